# tests/fuzz/fuzz.mk - the GGUF reader's fuzz target built as a bounded,
# deterministic replay + mutation run (no clang needed; see the comment at
# the top of tests/fuzz/fuzz_gguf.c), over the seed corpus
# tests/fuzz/corpus/gguf that tests/fuzz/make-gguf-seeds.py writes.  The
# request parser's twin, fuzz_api_replay, is in src/server/server.mk.
check_PROGRAMS += tests/fuzz/fuzz_gguf_replay
TESTS += tests/fuzz/fuzz_gguf_replay
tests_fuzz_fuzz_gguf_replay_SOURCES = tests/fuzz/fuzz_gguf.c
tests_fuzz_fuzz_gguf_replay_CPPFLAGS = $(AM_CPPFLAGS) -DHY_FUZZ_STANDALONE
tests_fuzz_fuzz_gguf_replay_LDADD = $(TEST_LDADD)
EXTRA_DIST += tests/fuzz/corpus/gguf tests/fuzz/make-gguf-seeds.py
