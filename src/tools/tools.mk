# src/tools: the hyserve binary - the command table and every subcommand
# but serve (src/server) - and the end-to-end tests of the commands.
bin_PROGRAMS += hyserve
hyserve_SOURCES = src/tools/hyserve.c src/tools/cli.c src/tools/cli.h src/tools/cli_grammar.c \
	src/tools/cmd_run.c src/tools/cmd_tok.c src/tools/cmd_eval.c src/tools/cmd_bench.c \
	src/tools/cmd_plan.c src/tools/cmd_bench_offline.c src/tools/bench_offline.h
hyserve_LDADD = $(HY_LIBS)

# The default model and Gemma 3 270M against transformers' float32 logits
# (a missing model file fails: scripts/fetch-default-model, scripts/fetch-model
# gemma3-270m get them).
TESTS += tests/golden/check-golden.py tests/golden/check-golden-gemma3.sh
EXTRA_DIST += tests/golden/check-golden.py tests/golden/make-golden.py tests/golden/README.md \
	tests/golden/smollm2 scripts/fetch-default-model scripts/fetch-model \
	tests/golden/check-golden-gemma3.sh tests/golden/make-golden-gemma3.py tests/golden/gemma3 \
	scripts/bench-peers

# Bad flags and bad input of every subcommand: exit status and message.
TESTS += tests/integration/test_cli.sh
EXTRA_DIST += tests/integration/test_cli.sh

# `hyserve bench --url`: the streaming HTTP load generator (any
# OpenAI-compatible server) and its end-to-end test against hyserve behind
# nginx (skips without nginx or the default model).
hyserve_SOURCES += src/tools/cmd_bench_url.c src/tools/bench_url.h
TESTS += tests/integration/test_bench_url.py
EXTRA_DIST += tests/integration/test_bench_url.py
