/*
 * cli.c - helpers shared by the hyserve subcommands.
 */
#include <stdio.h>

#include "tools/cli.h"
#include "backend/select.h"
#include "model/chat_template.h"

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

int hy_cli_act_bits(const char *cmd, const char *s, int *out)
{
    if (strcmp(s, "8") != 0 && strcmp(s, "16") != 0) {
        fprintf(stderr, "hyserve %s: --act-bits = '%s': must be 8 or 16\n", cmd, s);
        return -1;
    }
    *out = atoi(s);
    return 0;
}

int hy_cli_kv_type(const char *cmd, const char *s, hy_dtype_t *out)
{
    if (strcmp(s, "f16") == 0)
        *out = HY_DTYPE_F16;
    else if (strcmp(s, "f32") == 0)
        *out = HY_DTYPE_F32;
    else if (strcmp(s, "q8_0") == 0)
        *out = HY_DTYPE_Q8_0;
    else {
        fprintf(stderr, "hyserve %s: --kv-type = '%s': must be f16, f32 or q8_0\n", cmd, s);
        return -1;
    }
    return 0;
}

int hy_cli_weights_memory(const char *cmd, const char *s, int *out)
{
    if (strcmp(s, "huge_pages") == 0)
        *out = HY_WEIGHTS_HUGE_PAGES;
    else if (strcmp(s, "mmap") == 0)
        *out = HY_WEIGHTS_MMAP;
    else {
        fprintf(stderr, "hyserve %s: --weights-memory = '%s': must be huge_pages or mmap\n", cmd,
                s);
        return -1;
    }
    return 0;
}

int hy_cli_open(hy_cli_ctx_t *c, const char *cmd, const char *model_path, const char *backend,
                const hy_backend_opts_t *bo, bool want_tok, const hy_runner_opts_t *ro)
{
    char err[HY_ERR_LEN];
    double t0 = hy_cli_now_ms();

    memset(c, 0, sizeof *c);
    if (model_path == NULL) {
        fprintf(stderr, "hyserve %s: -m MODEL.gguf is required\n", cmd);
        return -1;
    }
    if (hy_backend_new(&c->be, backend, bo, err) != HY_OK)
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

/* The BOS/EOS texts the template may print, NUL-terminated copies. */
static char *hy_cli_token_text(const hy_tok_t *tok, int32_t id)
{
    hy_tok_str_t t;
    char *s;

    if (id < 0)
        return NULL;
    t = hy_tok_text(tok, id);
    s = malloc(t.len + 1);
    if (s != NULL) {
        memcpy(s, t.ptr, t.len);
        s[t.len] = '\0';
    }
    return s;
}

int hy_cli_chat_render(hy_cli_ctx_t *c, const char *system_msg, const char *user,
                       char **out, size_t *out_len, char *err)
{
    hy_chat_src_t src;
    hy_chat_tmpl_t *t = NULL;
    hy_chat_msg_t msgs[2];
    hy_chat_opts_t o;
    size_t n = 0;
    int rc;

    if (hy_chat_model_source(c->model->gguf, &src) != HY_OK)
        return hy_err(err, HY_ENOENT, "%s has no tokenizer.chat_template; --chat needs one",
                      hy_gguf_path(c->model->gguf));
    if ((rc = hy_chat_compile(&t, src.src, src.len, err)) != HY_OK)
        return rc;
    memset(msgs, 0, sizeof msgs);
    if (system_msg != NULL) {
        msgs[n].role = "system";
        msgs[n++].content = system_msg;
    }
    msgs[n].role = "user";
    msgs[n++].content = user;
    memset(&o, 0, sizeof o);
    o.add_generation_prompt = true;
    o.enable_thinking = -1;
    o.bos_token = hy_cli_token_text(c->tok, hy_tok_bos(c->tok));
    o.eos_token = hy_cli_token_text(c->tok, hy_tok_eos(c->tok));
    rc = hy_chat_render(t, msgs, n, &o, out, out_len, err);
    free((char *)o.bos_token);
    free((char *)o.eos_token);
    hy_chat_free(t);
    return rc;
}

void hy_cli_attn_defaults(hy_config_attention_t *a)
{
    hy_config_t *cfg = malloc(sizeof *cfg);

    memset(a, 0, sizeof *a);
    if (cfg == NULL)
        return;
    hy_config_defaults(cfg);
    *a = cfg->attention;
    free(cfg);
}
