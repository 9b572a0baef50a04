# tests/integration/fuzz.mk - a real libFuzzer run on the OpenAI request
# parser, bounded in time (HY_FUZZ_SECONDS, default 60): the script builds
# tests/fuzz/fuzz_api.c with clang -fsanitize=fuzzer,address,undefined from
# the source tree and fuzzes from the checked-in seed corpus; it skips only
# when clang's fuzzer runtime is missing.  Not under tests/unit/, so the
# sanitizer build (check-unit) does not run it a second time.
TESTS += tests/integration/test_fuzz_api.sh
EXTRA_DIST += tests/integration/test_fuzz_api.sh tests/fuzz/corpus/api
