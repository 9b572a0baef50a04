/*
 * hyserve.c - the one binary's entry point: picks the subcommand.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "server/coordinator.h"
#include "tools/cli.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} hy_cmds[] = {
    {"serve", hy_cmd_serve, "serve the OpenAI API over FastCGI (-c hyserve.ini)"},
    {"run", hy_cmd_run, "generate text from a prompt"},
    {"tokenize", hy_cmd_tokenize, "text on stdin -> token ids"},
    {"detokenize", hy_cmd_detokenize, "token ids on stdin -> text"},
    {"eval", hy_cmd_eval, "logits of every position of an id sequence"},
    {"bench", hy_cmd_bench, "prompt processing and generation speed (pp512, tg128)"},
    {"plan", hy_cmd_plan, "memory for a context length and concurrency, per layer kind"},
};

static void hy_usage(FILE *f)
{
    size_t i;

    fprintf(f, "usage: hyserve COMMAND [options]   (hyserve COMMAND --help)\n\ncommands:\n");
    for (i = 0; i < sizeof hy_cmds / sizeof hy_cmds[0]; i++)
        fprintf(f, "  %-12s %s\n", hy_cmds[i].name, hy_cmds[i].help);
}

int main(int argc, char **argv)
{
    size_t i;

    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        hy_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("hyserve " PACKAGE_VERSION "\n");
        return 0;
    }
    for (i = 0; i < sizeof hy_cmds / sizeof hy_cmds[0]; i++) {
        if (strcmp(argv[1], hy_cmds[i].name) == 0)
            return hy_cmds[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "hyserve: unknown command '%s'\n", argv[1]);
    hy_usage(stderr);
    return 2;
}
