# src/tools: the hyserve binary.
bin_PROGRAMS += hyserve
hyserve_SOURCES = src/tools/hyserve.c src/tools/cli.c src/tools/cli.h src/tools/cli_grammar.c \
	src/tools/cmd_run.c \
	src/tools/cmd_tok.c src/tools/cmd_eval.c src/tools/cmd_bench.c src/tools/cmd_plan.c
hyserve_LDADD = $(HY_LIBS)

# The default model against transformers' float32 logits (skips without the
# model file; scripts/fetch-default-model gets it).
TESTS += tests/golden/check-golden.py
EXTRA_DIST += tests/golden/check-golden.py tests/golden/make-golden.py tests/golden/README.md \
	tests/golden/smollm2 scripts/fetch-default-model

# Bad flags and bad input of every subcommand: exit status and message.
TESTS += tests/integration/test_cli.sh
EXTRA_DIST += tests/integration/test_cli.sh
