# src/tools: the hyserve binary.
bin_PROGRAMS += hyserve
hyserve_SOURCES = src/tools/hyserve.c src/tools/cli.c src/tools/cli.h src/tools/cmd_run.c \
	src/tools/cmd_tok.c src/tools/cmd_eval.c src/tools/cmd_bench.c
hyserve_LDADD = $(HY_LIBS)
