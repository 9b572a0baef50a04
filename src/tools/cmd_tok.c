/*
 * cmd_tok.c - `hyserve tokenize` and `hyserve detokenize`: the tokenizer on
 * its own, for scripts and tests.  Only the vocabulary is read, so any GGUF
 * with tokenizer metadata works (vocab-only files included).
 */
#include <stdio.h>

#include "tools/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static int hy_tok_open_vocab(const char *cmd, const char *path, hy_gguf_t **g, hy_tok_t **tok)
{
    char err[HY_ERR_LEN];

    if (path == NULL) {
        fprintf(stderr, "hyserve %s: -m MODEL.gguf is required\n", cmd);
        return -1;
    }
    if (hy_gguf_open(g, path, err) != HY_OK || hy_tok_load(tok, *g, err) != HY_OK) {
        fprintf(stderr, "hyserve %s: %s\n", cmd, err);
        hy_gguf_close(*g);
        *g = NULL;
        return -1;
    }
    return 0;
}

int hy_cmd_tokenize(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"bos", no_argument, 0, 'b'},
                                         {"parse-special", no_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *model = NULL;
    bool bos = false, special = false;
    hy_gguf_t *g = NULL;
    hy_tok_t *tok = NULL;
    char *text = NULL, err[HY_ERR_LEN];
    size_t len, n, i;
    int32_t *ids = NULL;
    int opt, rc = 1;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'm': model = optarg; break;
        case 'b': bos = true; break;
        case 's': special = true; break;
        case 'h':
            printf("usage: hyserve tokenize -m MODEL.gguf [--bos] [--parse-special] < text\n");
            return 0;
        default: return 2;
        }
    }
    if (hy_tok_open_vocab("tokenize", model, &g, &tok) != 0)
        return 1;
    if (hy_cli_read_all(stdin, &text, &len) != 0) {
        fprintf(stderr, "hyserve tokenize: cannot read stdin\n");
        goto out;
    }
    if (hy_tok_encode_alloc(tok, text, len, bos, special, &ids, &n, err) != HY_OK) {
        fprintf(stderr, "hyserve tokenize: %s\n", err);
        goto out;
    }
    for (i = 0; i < n; i++)
        printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    rc = 0;
out:
    free(ids);
    free(text);
    hy_tok_free(tok);
    hy_gguf_close(g);
    return rc;
}

int hy_cmd_detokenize(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"special", no_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *model = NULL;
    bool special = false;
    hy_gguf_t *g = NULL;
    hy_tok_t *tok = NULL;
    char *text = NULL, *p, *end, *out = NULL, err[HY_ERR_LEN];
    size_t len, n = 0, cap = 0, olen;
    int32_t *ids = NULL;
    int opt, rc = 1;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'm': model = optarg; break;
        case 's': special = true; break;
        case 'h':
            printf("usage: hyserve detokenize -m MODEL.gguf [--special] < ids\n");
            return 0;
        default: return 2;
        }
    }
    if (hy_tok_open_vocab("detokenize", model, &g, &tok) != 0)
        return 1;
    if (hy_cli_read_all(stdin, &text, &len) != 0) {
        fprintf(stderr, "hyserve detokenize: cannot read stdin\n");
        goto out;
    }
    for (p = text;;) {
        long v;

        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ',')
            p++;
        if (*p == '\0')
            break;
        errno = 0;
        v = strtol(p, &end, 10);
        if (end == p || errno != 0 || v < 0 || (size_t)v >= hy_tok_n_vocab(tok)) {
            /* quote just the offending word: the rest of the line (or a
             * newline) in the message would hide what was wrong */
            int wl = (int)strcspn(p, " \n\t\r,");

            fprintf(stderr, "hyserve detokenize: '%.*s' at byte %zu is not a token id (0..%zu)\n",
                    wl > 20 ? 20 : wl, p, (size_t)(p - text), hy_tok_n_vocab(tok) - 1);
            goto out;
        }
        if (n == cap) {
            int32_t *ni;

            cap = cap ? cap * 2 : 256;
            ni = realloc(ids, cap * sizeof *ids);
            if (ni == NULL)
                goto out;
            ids = ni;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    if (hy_tok_decode(tok, ids, n, special, &out, &olen, err) != HY_OK) {
        fprintf(stderr, "hyserve detokenize: %s\n", err);
        goto out;
    }
    fwrite(out, 1, olen, stdout);
    rc = 0;
out:
    free(out);
    free(ids);
    free(text);
    hy_tok_free(tok);
    hy_gguf_close(g);
    return rc;
}
