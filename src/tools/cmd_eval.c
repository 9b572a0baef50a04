/*
 * cmd_eval.c - `hyserve eval`: teacher-forced logits of every position of an
 * id sequence, written raw (float32, row-major [n_tokens][n_vocab]) for the
 * golden tests that compare us with a reference implementation.  A 262K-token
 * vocabulary makes that 1 MiB a position, so --rows keeps the full rows of
 * the listed positions only and --argmax writes every position's argmax
 * (int32), which is all a long golden sequence needs.
 */
#include <stdio.h>

#include "tools/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static int hy_eval_read_ids(const char *path, int32_t n_vocab, int32_t **ids, int32_t *n)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL, *p, *end;
    size_t len, cap = 0;
    int32_t k = 0, *v = NULL;

    if (f == NULL || hy_cli_read_all(f, &text, &len) != 0) {
        fprintf(stderr, "hyserve eval: cannot read %s\n", path);
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    /* only the first line holds the ids; later lines are metadata */
    p = strchr(text, '\n');
    if (p)
        *p = '\0';
    for (p = text;;) {
        long x;

        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == ',')
            p++;
        if (*p == '\0')
            break;
        errno = 0;
        x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x >= n_vocab) {
            fprintf(stderr, "hyserve eval: %s: '%.20s' at byte %zu is not a token id (0..%d)\n",
                    path, p, (size_t)(p - text), n_vocab - 1);
            free(text);
            free(v);
            return -1;
        }
        if ((size_t)k == cap) {
            int32_t *nv;

            cap = cap ? cap * 2 : 256;
            nv = realloc(v, cap * sizeof *v);
            if (nv == NULL) {
                free(text);
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = end;
    }
    free(text);
    if (k == 0) {
        fprintf(stderr, "hyserve eval: %s holds no token ids\n", path);
        free(v);
        return -1;
    }
    *ids = v;
    *n = k;
    return 0;
}

/* --rows "3,17,511": strictly ascending positions; -1 with a message else. */
static int hy_eval_parse_rows(const char *spec, int32_t **rows, int32_t *n_rows)
{
    const char *p = spec;
    int32_t k = 0, *v;

    /* k positions need at least 2k - 1 bytes (digit and comma) */
    v = malloc(sizeof *v * (strlen(spec) / 2 + 1));
    if (v == NULL)
        return -1;
    for (;;) {
        char *end;
        long x;

        errno = 0;
        x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end != ',' && *end != '\0') ||
            (k > 0 && x <= v[k - 1])) {
            fprintf(stderr, "hyserve eval: --rows = '%s': expected ascending positions "
                    "separated by commas, at byte %zu\n", spec, (size_t)(p - spec));
            free(v);
            return -1;
        }
        v[k++] = (int32_t)x;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    *rows = v;
    *n_rows = k;
    return 0;
}

/* The first index of the largest value (the reference's tie rule). */
static int32_t hy_eval_argmax(const float *x, int32_t n)
{
    int32_t best = 0;

    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

int hy_cmd_eval(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"ids", required_argument, 0, 'i'},
        {"out", required_argument, 0, 'o'}, {"threads", required_argument, 0, 't'},
        {"batch", required_argument, 0, 'b'}, {"kv-type", required_argument, 0, 'k'},
        {"backend", required_argument, 0, 'B'}, {"rows", required_argument, 0, 'r'},
        {"argmax", required_argument, 0, 'a'}, {"act-bits", required_argument, 0, 'A'},
        {"weights-memory", required_argument, 0, 'W'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *model = NULL, *ids_path = NULL, *out_path = NULL, *backend = NULL;
    const char *rows_spec = NULL, *argmax_path = NULL;
    long threads = 0, batch = 64;
    hy_dtype_t kv = HY_DTYPE_F32;
    hy_runner_opts_t ro;
    hy_cli_ctx_t c;
    hy_backend_opts_t bo = {0};
    hy_kv_seq_t seq = {0};
    int32_t *ids = NULL, n = 0, done = 0, *rows = NULL, n_rows = 0, next_row = 0;
    int32_t *amax = NULL;
    float *logits = NULL;
    FILE *out = NULL, *amax_out = NULL;
    char err[HY_ERR_LEN];
    int opt, rc = 1;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "m:i:o:t:b:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'm': model = optarg; break;
        case 'i': ids_path = optarg; break;
        case 'o': out_path = optarg; break;
        case 'B': backend = optarg; break;
        case 'r': rows_spec = optarg; break;
        case 'a': argmax_path = optarg; break;
        case 't': if (hy_cli_int("eval", "--threads", optarg, 0, 1024, &threads)) return 2; break;
        case 'b': if (hy_cli_int("eval", "--batch", optarg, 1, 4096, &batch)) return 2; break;
        case 'A': if (hy_cli_act_bits("eval", optarg, &bo.act_bits)) return 2; break;
        case 'W': if (hy_cli_weights_memory("eval", optarg, &bo.weights_memory)) return 2; break;
        case 'k':
            if (strcmp(optarg, "f32") == 0) kv = HY_DTYPE_F32;
            else if (strcmp(optarg, "f16") == 0) kv = HY_DTYPE_F16;
            else {
                fprintf(stderr, "hyserve eval: --kv-type = '%s': must be f32 or f16\n", optarg);
                return 2;
            }
            break;
        case 'h':
            printf("usage: hyserve eval -m MODEL.gguf --ids FILE --out FILE [--rows P,P,...] [--argmax FILE]\n"
                   "                   [--batch N] [--kv-type f32|f16] [-t N] [--act-bits 16|8]\n"
                   "                   [--weights-memory huge_pages|mmap] [--backend cpu|cuda]\n"
                   HY_CLI_ACT_BITS_HELP
                   HY_CLI_WEIGHTS_MEMORY_HELP
                   "  --out FILE     float32 logits [n_tokens][n_vocab], or [rows][n_vocab] with --rows\n"
                   "  --rows LIST    only the rows of these ascending positions (0-based)\n"
                   "  --argmax FILE  int32 argmax of every position (first of equal maxima)\n");
            return 0;
        default: return 2;
        }
    }
    if (ids_path == NULL || out_path == NULL) {
        fprintf(stderr, "hyserve eval: --ids FILE and --out FILE are required\n");
        return 2;
    }
    if (rows_spec != NULL && hy_eval_parse_rows(rows_spec, &rows, &n_rows) != 0)
        return 2;
    hy_runner_opts_default(&ro);
    ro.max_seqs = 1;
    ro.max_tokens = (int32_t)batch;
    ro.max_outputs = (int32_t)batch;
    ro.kv_type = kv;
    ro.n_ctx = 1 << 20; /* clipped to the model's context by hy_cli_open */
    bo.n_threads = (int)threads;
    if (hy_cli_open(&c, "eval", model, backend, &bo, false, &ro) != 0) {
        free(rows);
        return 1;
    }
    if (hy_eval_read_ids(ids_path, c.model->n_vocab, &ids, &n) != 0)
        goto out;
    if (n > c.runner.opts.n_ctx) {
        fprintf(stderr, "hyserve eval: %d ids exceed the context of %d\n", n, c.runner.opts.n_ctx);
        goto out;
    }
    if (n_rows > 0 && rows[n_rows - 1] >= n) {
        fprintf(stderr, "hyserve eval: --rows: position %d is past the last of %d ids\n",
                rows[n_rows - 1], n);
        goto out;
    }
    logits = malloc(sizeof(float) * (size_t)batch * (size_t)c.model->n_vocab);
    amax = malloc(sizeof *amax * (size_t)n);
    if (logits == NULL || amax == NULL) {
        fprintf(stderr, "hyserve eval: out of memory for %ld x %d logits\n", batch,
                c.model->n_vocab);
        goto out;
    }
    if ((out = fopen(out_path, "wb")) == NULL ||
        (argmax_path != NULL && (amax_out = fopen(argmax_path, "wb")) == NULL)) {
        fprintf(stderr, "hyserve eval: cannot open %s for writing: %s\n",
                out == NULL ? out_path : argmax_path, strerror(errno));
        goto out;
    }
    while (done < n) {
        hy_runner_item_t it = {&seq, ids + done, (int32_t)HY_MIN(batch, n - done), true};

        if (hy_runner_step(&c.runner, &it, 1, logits, err) != HY_OK) {
            fprintf(stderr, "hyserve eval: %s\n", err);
            goto out;
        }
        for (int32_t j = 0; j < it.n; j++) {
            const float *row = logits + (size_t)j * (size_t)c.model->n_vocab;
            bool keep = rows == NULL || (next_row < n_rows && rows[next_row] == done + j);

            amax[done + j] = hy_eval_argmax(row, c.model->n_vocab);
            if (!keep)
                continue;
            next_row++;
            if (fwrite(row, sizeof(float), (size_t)c.model->n_vocab, out) !=
                (size_t)c.model->n_vocab) {
                fprintf(stderr, "hyserve eval: write to %s failed\n", out_path);
                goto out;
            }
        }
        done += it.n;
    }
    if (amax_out != NULL && fwrite(amax, sizeof *amax, (size_t)n, amax_out) != (size_t)n) {
        fprintf(stderr, "hyserve eval: write to %s failed\n", argmax_path);
        goto out;
    }
    rc = 0;
    if (fclose(out) != 0) {
        fprintf(stderr, "hyserve eval: write to %s failed\n", out_path);
        rc = 1;
    }
    out = NULL;
    if (amax_out != NULL && fclose(amax_out) != 0) {
        fprintf(stderr, "hyserve eval: write to %s failed\n", argmax_path);
        rc = 1;
    }
    amax_out = NULL;
out:
    if (out)
        fclose(out);
    if (amax_out)
        fclose(amax_out);
    if (c.runner_ready)
        hy_runner_seq_release(&c.runner, &seq);
    free(ids);
    free(rows);
    free(amax);
    free(logits);
    hy_cli_close(&c);
    return rc;
}
