# src/tools/loadgen.mk - `hyserve bench --url`: the streaming HTTP load
# generator (any OpenAI-compatible server) and its end-to-end test against
# hyserve behind nginx (skips without nginx or the default model).
hyserve_SOURCES += src/tools/cmd_bench_url.c src/tools/bench_url.h
TESTS += tests/integration/test_bench_url.py
EXTRA_DIST += tests/integration/test_bench_url.py
