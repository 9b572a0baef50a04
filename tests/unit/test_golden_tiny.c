/*
 * test_golden_tiny.c - every tiny model of tests/golden/tiny/ (one per
 * architecture family, float32 weights, random init) against the logits of
 * transformers' own forward pass.  Each sequence is fed whole, in steps of
 * 64, 7 and 1 tokens (chunked prefill across engine steps), as
 * prefix-then-decode, and all sequences together in one ragged batch; every
 * variant must match the reference to a relative RMS error of 1e-4 with the
 * same argmax at every position.  After each model the page and slot
 * accounting must be back to all-free.  The models are the manifest's
 * (tests/golden/tiny/manifest.json), every one of them.
 */
#include "backend/cpu/quant.h"
#include "engine/runner.h"
#include "test.h"
#include "golden.h"

#include <math.h>
#include <string.h>

#define HY_G_VOCAB 264
#define HY_G_TOL 1e-4

static const int hy_g_lens[] = {1, 7, 33, 100};
static const int hy_g_prefix[] = {0, 3, 16, 70}; /* decode prefix per length */

static void *hy_g_read(const char *name, const char *ext, size_t want)
{
    char rel[256];
    FILE *f;
    void *buf;
    long sz;

    snprintf(rel, sizeof rel, "tests/golden/tiny/%s%s", name, ext);
    f = fopen(hy_t_srcpath(rel), "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (sz != (long)want) {
        fclose(f);
        return NULL;
    }
    buf = malloc(want);
    if (buf && fread(buf, 1, want, f) != want) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

typedef struct {
    double err2, ref2;   /* summed squared error / squared reference */
    int rows, argmax_ok;
} hy_g_cmp_t;

static int hy_g_argmax(const float *x)
{
    int i, best = 0;

    for (i = 1; i < HY_G_VOCAB; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static void hy_g_compare(hy_g_cmp_t *c, const float *ours, const float *ref, int rows)
{
    int r, i;

    for (r = 0; r < rows; r++) {
        const float *a = ours + (size_t)r * HY_G_VOCAB, *b = ref + (size_t)r * HY_G_VOCAB;

        for (i = 0; i < HY_G_VOCAB; i++) {
            c->err2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
            c->ref2 += (double)b[i] * b[i];
        }
        c->rows++;
        c->argmax_ok += hy_g_argmax(a) == hy_g_argmax(b);
    }
}

static double hy_g_rel(const hy_g_cmp_t *c)
{
    return c->ref2 > 0 ? sqrt(c->err2 / c->ref2) : INFINITY;
}

static void hy_g_report(const char *model, const char *what, const hy_g_cmp_t *c)
{
    double rel = hy_g_rel(c);

    HY_T_OK(c->rows > 0 && rel <= HY_G_TOL && c->argmax_ok == c->rows,
            "%s: %s: relative RMS error %.2e (limit %.0e), argmax %d/%d", model, what, rel,
            HY_G_TOL, c->argmax_ok, c->rows);
}

/* Feeds ids[0..n) to a fresh sequence in steps of `step`, logits of every row. */
static int hy_g_run_steps(hy_runner_t *r, const int32_t *ids, int n, int step, float *out)
{
    hy_kv_seq_t seq = {0};
    char err[HY_ERR_LEN];
    int done = 0, rc = HY_OK;

    while (done < n && rc == HY_OK) {
        hy_runner_item_t it = {&seq, ids + done, HY_MIN(step, n - done), true};

        rc = hy_runner_step(r, &it, 1, out + (size_t)done * HY_G_VOCAB, err);
        if (rc != HY_OK)
            fprintf(stderr, "# step failed: %s\n", err);
        done += it.n;
    }
    hy_runner_seq_release(r, &seq);
    return rc;
}

/* A runner for up to 4 sequences of 128 tokens, KV in f32. */
static int hy_g_runner(hy_runner_t *r, hy_model_t *m, hy_backend_t *be, char *err)
{
    hy_runner_opts_t o;

    hy_runner_opts_default(&o);
    o.max_tokens = 400;
    o.max_outputs = 400;
    o.max_seqs = 4;
    o.n_ctx = 128;
    o.kv_type = HY_DTYPE_F32;
    return hy_runner_init(r, m, be, &o, err);
}

static void hy_g_model(const char *name, hy_backend_t *be)
{
    char rel[256], err[HY_ERR_LEN];
    hy_model_t *m = NULL;
    hy_runner_t r;
    int32_t *ids[4] = {0};
    float *ref[4] = {0}, *dec[4] = {0}, *out = NULL;
    hy_g_cmp_t whole = {0}, s64 = {0}, s7 = {0}, s1 = {0}, dcmp = {0}, batch = {0};
    int k, rc;

    snprintf(rel, sizeof rel, "tests/golden/tiny/%.63s.gguf", name); /* a manifest name */
    rc = hy_model_load(&m, hy_t_srcpath(rel), be, err);
    HY_T_OK(rc == HY_OK, "%s: loads (%s)", name, rc == HY_OK ? "ok" : err);
    if (rc != HY_OK)
        return;
    rc = hy_g_runner(&r, m, be, err);
    HY_T_OK(rc == HY_OK, "%s: runner (%s)", name, rc == HY_OK ? "ok" : err);
    if (rc != HY_OK) {
        hy_model_free(m);
        return;
    }
    out = malloc(sizeof(float) * 400 * HY_G_VOCAB);
    for (k = 0; k < 4; k++) {
        int n = hy_g_lens[k];

        snprintf(rel, sizeof rel, ".s%d.ids", n);
        ids[k] = hy_g_read(name, rel, sizeof(int32_t) * n);
        snprintf(rel, sizeof rel, ".s%d.logits", n);
        ref[k] = hy_g_read(name, rel, sizeof(float) * n * HY_G_VOCAB);
        if (hy_g_prefix[k] > 0) {
            snprintf(rel, sizeof rel, ".s%d.decode.logits", n);
            dec[k] = hy_g_read(name, rel, sizeof(float) * (n - hy_g_prefix[k] + 1) * HY_G_VOCAB);
        }
    }
    HY_T_OK(ids[0] && ids[1] && ids[2] && ids[3] && ref[0] && ref[1] && ref[2] && ref[3] &&
            dec[1] && dec[2] && dec[3], "%s: golden files present", name);
    if (!(ids[0] && ids[1] && ids[2] && ids[3] && ref[0] && ref[1] && ref[2] && ref[3] &&
          dec[1] && dec[2] && dec[3]))
        goto out;

    for (k = 0; k < 4; k++) {
        int n = hy_g_lens[k];

        if (hy_g_run_steps(&r, ids[k], n, n, out) == HY_OK) hy_g_compare(&whole, out, ref[k], n);
        if (hy_g_run_steps(&r, ids[k], n, 64, out) == HY_OK) hy_g_compare(&s64, out, ref[k], n);
        if (hy_g_run_steps(&r, ids[k], n, 7, out) == HY_OK) hy_g_compare(&s7, out, ref[k], n);
        if (hy_g_run_steps(&r, ids[k], n, 1, out) == HY_OK) hy_g_compare(&s1, out, ref[k], n);
        if (hy_g_prefix[k] > 0) {
            /* prefill the prefix, then decode token by token */
            hy_kv_seq_t seq = {0};
            int P = hy_g_prefix[k], t;
            hy_runner_item_t it = {&seq, ids[k], P, false};

            rc = hy_runner_step(&r, &it, 1, out, err);
            for (t = P; rc == HY_OK && t < n; t++) {
                hy_runner_item_t d = {&seq, ids[k] + t, 1, false};

                rc = hy_runner_step(&r, &d, 1, out + (size_t)(t - P + 1) * HY_G_VOCAB, err);
            }
            if (rc == HY_OK)
                hy_g_compare(&dcmp, out, dec[k], n - P + 1);
            hy_runner_seq_release(&r, &seq);
        }
    }
    hy_g_report(name, "whole prompt in one step", &whole);
    hy_g_report(name, "prefill in steps of 64", &s64);
    hy_g_report(name, "prefill in steps of 7", &s7);
    hy_g_report(name, "prefill in steps of 1", &s1);
    hy_g_report(name, "prefix then decode", &dcmp);

    /* all four sequences in one ragged batch */
    {
        hy_kv_seq_t seqs[4] = {{0}};
        hy_runner_item_t items[4];
        size_t off = 0;

        for (k = 0; k < 4; k++) {
            items[k].seq = &seqs[k];
            items[k].tokens = ids[k];
            items[k].n = hy_g_lens[k];
            items[k].all_logits = true;
        }
        rc = hy_runner_step(&r, items, 4, out, err);
        if (rc == HY_OK) {
            for (k = 0; k < 4; k++) {
                hy_g_compare(&batch, out + off, ref[k], hy_g_lens[k]);
                off += (size_t)hy_g_lens[k] * HY_G_VOCAB;
            }
        }
        for (k = 0; k < 4; k++)
            hy_runner_seq_release(&r, &seqs[k]);
        hy_g_report(name, "four sequences in one ragged batch", &batch);
    }
    {
        char perr[HY_ERR_LEN] = "ok";
        int prc = hy_pt_check(r.pt, perr);
        hy_pt_counts_t c;

        hy_pt_counts(r.pt, &c);
        HY_T_OK(prc == HY_OK && c.pages_used == 0 && c.pages_free == c.pages_total &&
                    c.state_used == 0,
                "%s: accounting (%s): pages used %d + free %d = total %d, state slots used %d "
                "of %d", name, perr, c.pages_used, c.pages_free, c.pages_total, c.state_used,
                c.state_total);
    }
out:
    for (k = 0; k < 4; k++) {
        free(ids[k]);
        free(ref[k]);
        free(dec[k]);
    }
    free(out);
    hy_runner_free(&r);
    hy_model_free(m);
}

/* The logits of ids (n tokens, whole and then one at a time) from name
 * loaded through be into out[2][n][vocab]; *r16 counts the tensors the
 * loader rearranged into 16-row groups.  false if anything failed. */
static bool hy_g_logits(const char *name, hy_backend_t *be, const int32_t *ids, int n,
                        float *out, int *r16)
{
    char rel[256], err[HY_ERR_LEN];
    hy_model_t *m = NULL;
    hy_runner_t r;
    bool ok;

    snprintf(rel, sizeof rel, "tests/golden/tiny/%.63s.gguf", name);
    if (hy_model_load(&m, hy_t_srcpath(rel), be, err) != HY_OK)
        return false;
    *r16 = 0;
    for (int64_t i = 0; i < hy_gguf_n_tensors(m->gguf); i++)
        *r16 += hy_gguf_tensor(m->gguf, i)->layout == HY_WLAYOUT_ROWS16;
    if (hy_g_runner(&r, m, be, err) != HY_OK) {
        hy_model_free(m);
        return false;
    }
    ok = hy_g_run_steps(&r, ids, n, n, out) == HY_OK &&
         hy_g_run_steps(&r, ids, n, 1, out + (size_t)n * HY_G_VOCAB) == HY_OK;
    hy_runner_free(&r);
    hy_model_free(m);
    return ok;
}

/* The loader's 16-row groups (weights read into memory of its own) against
 * the file's layout (weights mapped): the same logits, bit for bit. */
static void hy_g_layouts(const char *name, hy_backend_t *be, hy_backend_t *be_mmap)
{
    enum { N = 100 };
    int32_t *ids = hy_g_read(name, ".s100.ids", sizeof(int32_t) * N);
    float *a = malloc(sizeof(float) * 2 * N * HY_G_VOCAB);
    float *b = malloc(sizeof(float) * 2 * N * HY_G_VOCAB);
    int ra = -1, rb = -1;
    bool ok = ids && a && b && hy_g_logits(name, be, ids, N, a, &ra) &&
              hy_g_logits(name, be_mmap, ids, N, b, &rb);

    HY_T_OK(ok && ra > 0 && rb == 0 && memcmp(a, b, sizeof(float) * 2 * N * HY_G_VOCAB) == 0,
            "%s: %d tensors in 16-row groups (mapped: %d) give the mapped file's logits bit "
            "for bit, 100 tokens whole and one at a time (%s)", name, ra, rb,
            !ok ? "failed to run" : memcmp(a, b, sizeof(float) * 2 * N * HY_G_VOCAB) ? "DIFFER"
                                                                                     : "same");
    free(ids);
    free(a);
    free(b);
}

int main(void)
{
    hy_backend_opts_t bo = {.n_threads = 2};
    hy_backend_opts_t bm = {.n_threads = 2, .weights_memory = HY_WEIGHTS_MMAP};
    hy_backend_t *be = NULL, *be_mmap = NULL;
    hy_t_golden_t models[HY_T_GOLDEN_MAX];
    char err[HY_ERR_LEN];
    int i, n = hy_t_golden_models(models, HY_T_GOLDEN_MAX);

    if (hy_backend_cpu_new(&be, &bo, err) != HY_OK ||
        hy_backend_cpu_new(&be_mmap, &bm, err) != HY_OK) {
        HY_T_OK(0, "cpu backend: %s", err);
        return hy_t_done();
    }
    for (i = 0; i < n; i++) {
        hy_g_model(models[i].name, be);
        if (be->i->weight_rows16 && hy_cpu_isa() >= HY_ISA_AVX512)
            hy_g_layouts(models[i].name, be, be_mmap);
    }
    be->i->free(be);
    be_mmap->i->free(be_mmap);
    return hy_t_done();
}
