# tests/integration/fuzz.mk - real libFuzzer runs on the OpenAI request
# parser and on the GGUF reader, each bounded in time (HY_FUZZ_SECONDS,
# default 60): the scripts build tests/fuzz/fuzz_api.c and fuzz_gguf.c with
# clang -fsanitize=fuzzer,address,undefined from the source tree
# (fuzzlib.sh) and fuzz from the checked-in seed corpora; a missing clang or
# fuzzer runtime fails (scripts/install-deps --test installs them).  Not
# under tests/unit/, so the sanitizer build (check-unit) does not run them a
# second time; their bounded replays (tests/fuzz/*_replay) run in every build.
TESTS += tests/integration/test_fuzz_api.sh tests/integration/test_fuzz_gguf.sh
EXTRA_DIST += tests/integration/test_fuzz_api.sh tests/integration/test_fuzz_gguf.sh \
	tests/integration/fuzzlib.sh tests/fuzz/corpus/api
