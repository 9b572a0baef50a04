/*
 * cli.c - helpers shared by the hyserve subcommands.
 */
#include <stdio.h>

#include "tools/cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int hy_cli_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "hyserve %s: %s = '%s': must be an integer in %ld..%ld\n", cmd, flag,
                s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int hy_cli_float(const char *cmd, const char *flag, const char *s, double lo, double hi,
                 double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "hyserve %s: %s = '%s': must be a number in %g..%g\n", cmd, flag, s,
                lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

double hy_cli_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int hy_cli_read_all(FILE *f, char **buf, size_t *len)
{
    size_t cap = 4096, n = 0, got;
    char *b = malloc(cap), *nb;

    if (b == NULL)
        return -1;
    while ((got = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            nb = realloc(b, cap * 2);
            if (nb == NULL) {
                free(b);
                return -1;
            }
            b = nb;
            cap *= 2;
        }
    }
    if (ferror(f)) {
        free(b);
        return -1;
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return 0;
}

int hy_cli_open(hy_cli_ctx_t *c, const char *cmd, const char *model_path, int threads,
                bool want_tok, const hy_runner_opts_t *ro)
{
    char err[HY_ERR_LEN];
    hy_backend_opts_t bo = {.n_threads = threads};
    double t0 = hy_cli_now_ms();

    memset(c, 0, sizeof *c);
    if (model_path == NULL) {
        fprintf(stderr, "hyserve %s: -m MODEL.gguf is required\n", cmd);
        return -1;
    }
    if (hy_backend_cpu_new(&c->be, &bo, err) != HY_OK)
        goto fail;
    if (hy_model_load(&c->model, model_path, c->be, err) != HY_OK)
        goto fail;
    if (want_tok && hy_tok_load(&c->tok, c->model->gguf, err) != HY_OK)
        goto fail;
    if (ro != NULL) {
        hy_runner_opts_t o = *ro;

        if (o.n_ctx > c->model->n_ctx_train)
            o.n_ctx = c->model->n_ctx_train;
        if (hy_runner_init(&c->runner, c->model, c->be, &o, err) != HY_OK)
            goto fail;
        c->runner_ready = true;
    }
    c->load_ms = hy_cli_now_ms() - t0;
    return 0;
fail:
    fprintf(stderr, "hyserve %s: %s\n", cmd, err);
    hy_cli_close(c);
    return -1;
}

void hy_cli_close(hy_cli_ctx_t *c)
{
    if (c->runner_ready)
        hy_runner_free(&c->runner);
    hy_tok_free(c->tok);
    hy_model_free(c->model);
    if (c->be)
        c->be->i->free(c->be);
    memset(c, 0, sizeof *c);
}
