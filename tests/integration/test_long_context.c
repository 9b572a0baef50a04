/*
 * test_long_context.c - a hybrid model (qwen35-long: three Gated DeltaNet
 * layers, one attention layer with one head of 8) run to 131072 tokens of
 * context on the CPU through the runner, 4096 tokens per step.  At 16K,
 * 32K, 64K and 128K the KV bytes in use must be the planner's kv_total for
 * that context, the recurrent state must stay the same size, the process's
 * resident memory must grow by the KV bytes and no more, and the logits
 * must stay finite; then a few tokens are decoded past 131072.  The first
 * 4096 positions of the long run must equal a short standalone run (other
 * step sizes) and transformers' goldens; at 16K the standalone run decodes
 * the last tokens one by one and must agree with the long run's prefill.
 * Integration, not unit: it takes tens of seconds, so it stays out of the
 * sanitizer build.
 */
#include "engine/runner.h"
#include "kv/plan.h"
#include "../unit/test.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LC_MODEL "qwen35-long"
#define LC_VOCAB 264
#define LC_CTX 131072
#define LC_STEP 4096
#define LC_DECODE 4
#define LC_SHORT 16384     /* the standalone run's length */
#define LC_SHORT_STEP 1000 /* not a multiple of pages, GDN chunks or LC_STEP */
#define LC_GOLDEN 100
#define LC_TOL 1e-4
#define LC_PAGE 16

/* Relative RMS error of n values and whether the argmax of each row of
 * LC_VOCAB agrees. */
typedef struct {
    double err2, ref2;
    int rows, argmax_ok;
} lc_cmp_t;

static int lc_argmax(const float *x)
{
    int best = 0;

    for (int i = 1; i < LC_VOCAB; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static void lc_cmp(lc_cmp_t *c, const float *got, const float *ref, int rows)
{
    for (int r = 0; r < rows; r++) {
        const float *g = got + (size_t)r * LC_VOCAB, *f = ref + (size_t)r * LC_VOCAB;
        for (int i = 0; i < LC_VOCAB; i++) {
            double e = (double)g[i] - f[i];
            c->err2 += isfinite(e) ? e * e : INFINITY;
            c->ref2 += (double)f[i] * f[i];
        }
        c->argmax_ok += lc_argmax(g) == lc_argmax(f);
        c->rows++;
    }
}

static double lc_rel(const lc_cmp_t *c)
{
    return c->ref2 > 0 ? sqrt(c->err2 / c->ref2) : INFINITY;
}

static int lc_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

static void *lc_read(const char *ext, size_t want)
{
    char rel[256];
    FILE *f;
    void *buf = NULL;
    long sz;

    snprintf(rel, sizeof rel, "tests/golden/tiny/%s%s", LC_MODEL, ext);
    if ((f = fopen(hy_t_srcpath(rel), "rb")) == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (sz == (long)want && (buf = malloc(want)) != NULL && fread(buf, 1, want, f) != want) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

/* The prompt: the golden 100-token sequence, then a fixed pseudo-random
 * stream of ordinary tokens (no specials). */
static int32_t *lc_tokens(int32_t n)
{
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n), *g = lc_read(".s100.ids",
                                                                  sizeof(int32_t) * LC_GOLDEN);
    uint64_t x = 0x9e3779b97f4a7c15ull;

    if (ids == NULL || g == NULL) {
        free(ids);
        free(g);
        return NULL;
    }
    memcpy(ids, g, sizeof(int32_t) * LC_GOLDEN);
    for (int32_t i = LC_GOLDEN; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((x >> 33) % 260);
    }
    free(g);
    return ids;
}

/* The standalone run: the first LC_SHORT tokens in steps of LC_SHORT_STEP
 * (all logits for the first LC_STEP positions into first), the last
 * LC_DECODE one token at a time; the final row into last. */
static int lc_short_run(hy_model_t *m, hy_backend_t *be, const int32_t *ids, float *first,
                        float *last, char *err)
{
    hy_runner_opts_t o;
    hy_runner_t r;
    hy_kv_seq_t seq;
    int32_t done = 0;
    int rc;

    hy_runner_opts_default(&o);
    o.max_tokens = LC_SHORT_STEP;
    o.max_outputs = LC_SHORT_STEP;
    o.max_seqs = 1;
    o.n_ctx = LC_SHORT;
    o.kv_type = HY_DTYPE_F32;
    if ((rc = hy_runner_init(&r, m, be, &o, err)) != HY_OK)
        return rc;
    memset(&seq, 0, sizeof seq);
    while (rc == HY_OK && done < LC_SHORT - LC_DECODE) {
        hy_runner_item_t it = {&seq, ids + done, HY_MIN(LC_SHORT_STEP, LC_SHORT - LC_DECODE - done),
                               done < LC_STEP};

        if (it.all_logits)
            it.n = HY_MIN(it.n, LC_STEP - done);
        rc = hy_runner_step(&r, &it, 1, it.all_logits ? first + (size_t)done * LC_VOCAB : last,
                            err);
        done += it.n;
    }
    for (; rc == HY_OK && done < LC_SHORT; done++) {
        hy_runner_item_t it = {&seq, ids + done, 1, false};

        rc = hy_runner_step(&r, &it, 1, last, err);
    }
    hy_runner_seq_release(&r, &seq);
    hy_runner_free(&r);
    return rc;
}

int main(void)
{
    hy_backend_opts_t bo = {.n_threads = 2};
    hy_backend_t *be = NULL;
    hy_model_t *m = NULL;
    hy_runner_opts_t o;
    hy_runner_t r;
    hy_kv_seq_t seq;
    hy_plan_t full, at;
    char err[HY_ERR_LEN] = "";
    static const int32_t checks[] = {16384, 32768, 65536, 131072};
    int32_t *ids = NULL, done = 0, ci = 0, tok;
    float *first = NULL, *ref_first = NULL, *golden = NULL, *last = NULL, *ref16 = NULL;
    uint64_t kv0, st0, kv, st, rss16 = 0, plan16 = 0;
    bool runner_up = false, finite = true, plan_ok = true, state_ok = true, pool_ok = true;
    lc_cmp_t c;
    double t0 = hy_t_now(), t_long, t_run = 0;
    int rc, n_attn = 0;

    ids = lc_tokens(LC_CTX + LC_DECODE);
    golden = lc_read(".s100.logits", sizeof(float) * LC_GOLDEN * LC_VOCAB);
    first = malloc(sizeof(float) * LC_STEP * LC_VOCAB);
    ref_first = malloc(sizeof(float) * LC_STEP * LC_VOCAB);
    last = malloc(sizeof(float) * LC_VOCAB);
    ref16 = malloc(sizeof(float) * LC_VOCAB);
    HY_T_OK(ids && golden && first && ref_first && last && ref16,
            "%s: golden ids and logits present", LC_MODEL);
    if (!(ids && golden && first && ref_first && last && ref16))
        goto out;
    if ((rc = hy_backend_cpu_new(&be, &bo, err)) == HY_OK)
        rc = hy_model_load(&m, hy_t_srcpath("tests/golden/tiny/" LC_MODEL ".gguf"), be, err);
    HY_T_OK(rc == HY_OK, "%s: load (%s)", LC_MODEL, rc ? err : "ok");
    if (rc != HY_OK)
        goto out;

    /* what the model is: a hybrid whose only attention is one small layer */
    for (int32_t il = 0; il < m->n_layer; il++)
        n_attn += m->layers[il].kind == HY_LAYER_ATTN_FULL;
    rc = hy_plan_make(&full, m, be, LC_CTX + LC_PAGE, 1, LC_PAGE, HY_DTYPE_F32, err);
    HY_T_OK(rc == HY_OK, "plan for %d tokens (%s)", LC_CTX + LC_PAGE, rc ? err : "ok");
    if (rc != HY_OK)
        goto out;
    {
        /* the KV cost per token comes from the attention layers only: k and v
         * rows of every kv head of every attention layer, in f32 */
        uint64_t want = (uint64_t)n_attn * m->n_head_kv * (m->head_dim + m->head_dim_v) * 4;
        uint64_t other = 0, rec_state = 0;
        for (int k = 0; k < HY_LAYER_KINDS; k++) {
            if (k != HY_LAYER_ATTN_FULL)
                other += full.kv_bytes_per_token[k];
            rec_state += full.state_bytes_per_seq[k];
        }
        HY_T_OK(n_attn == 1 && m->n_rec_layers == m->n_layer - 1 &&
                    full.kv_bytes_per_token[HY_LAYER_ATTN_FULL] == want && other == 0 &&
                    full.page_bytes == want * LC_PAGE && rec_state == full.slot_bytes &&
                    full.slot_bytes > 0,
                "KV per token = %llu bytes, all from the %d attention layer(s) (expected %llu; "
                "other kinds %llu); %d recurrent layers hold %llu bytes of state per sequence",
                (unsigned long long)full.kv_bytes_per_token[HY_LAYER_ATTN_FULL], n_attn,
                (unsigned long long)want, (unsigned long long)other, m->n_rec_layers,
                (unsigned long long)full.slot_bytes);
    }

    /* the standalone run first (the backend holds one KV pool at a time) */
    rc = lc_short_run(m, be, ids, ref_first, ref16, err);
    HY_T_OK(rc == HY_OK, "standalone run of %d tokens in steps of %d, last %d decoded (%s)",
            LC_SHORT, LC_SHORT_STEP, LC_DECODE, rc ? err : "ok");
    if (rc != HY_OK)
        goto out;
    memset(&c, 0, sizeof c);
    lc_cmp(&c, ref_first, golden, LC_GOLDEN);
    HY_T_OK(lc_rel(&c) <= LC_TOL && c.argmax_ok == c.rows,
            "standalone run, positions 0..%d vs transformers: rel RMS %.2e (tol %.0e), argmax "
            "%d/%d", LC_GOLDEN - 1, lc_rel(&c), LC_TOL, c.argmax_ok, c.rows);

    /* the long run */
    hy_runner_opts_default(&o);
    o.max_tokens = LC_STEP;
    o.max_outputs = LC_STEP;
    o.max_seqs = 1;
    o.n_ctx = LC_CTX + LC_PAGE;
    o.kv_type = HY_DTYPE_F32;
    rc = hy_runner_init(&r, m, be, &o, err);
    HY_T_OK(rc == HY_OK, "runner for %d positions (%s)", o.n_ctx, rc ? err : "ok");
    if (rc != HY_OK)
        goto out;
    runner_up = true;
    be->i->mem_allocated(be, &kv0, &st0);
    HY_T_OK(kv0 == full.kv_total && st0 == full.state_total && st0 == full.slot_bytes,
            "pool: KV %llu = plan %llu, state %llu = plan %llu (one sequence)",
            (unsigned long long)kv0, (unsigned long long)full.kv_total,
            (unsigned long long)st0, (unsigned long long)full.state_total);
    memset(&seq, 0, sizeof seq);
    t_run = hy_t_now();
    while (done < LC_CTX) {
        hy_runner_item_t it = {&seq, ids + done, LC_STEP, done == 0};
        float *out = done == 0 ? first : last;

        rc = hy_runner_step(&r, &it, 1, out, err);
        if (rc != HY_OK)
            break;
        finite = finite && lc_finite(out, (size_t)(done == 0 ? LC_STEP : 1) * LC_VOCAB);
        done += LC_STEP;
        if (done == LC_SHORT) {
            memset(&c, 0, sizeof c);
            lc_cmp(&c, last, ref16, 1);
            HY_T_OK(lc_rel(&c) <= LC_TOL && c.argmax_ok == 1,
                    "position %d: long run's prefill vs standalone run's decode: rel RMS %.2e "
                    "(tol %.0e), argmax %s", LC_SHORT - 1, lc_rel(&c), LC_TOL,
                    c.argmax_ok ? "same" : "differs");
        }
        if (ci < (int)HY_ARRAY_LEN(checks) && done == checks[ci]) {
            hy_pt_counts_t pc;
            uint64_t used, rss;

            hy_pt_counts(r.pt, &pc);
            used = (uint64_t)pc.pages_used * full.page_bytes;

            rc = hy_plan_make(&at, m, be, done, 1, LC_PAGE, HY_DTYPE_F32, err);
            if (rc != HY_OK)
                break;
            be->i->mem_allocated(be, &kv, &st);
            rss = hy_t_rss();
            plan_ok = plan_ok && used == at.kv_total &&
                      (uint64_t)seq.n_pages * full.page_bytes == at.kv_total;
            state_ok = state_ok && st == st0 && at.state_total == st0;
            pool_ok = pool_ok && kv == kv0;
            printf("# %6d tokens: KV in use %9llu B = plan %9llu B, state %llu B, RSS %.1f MiB, "
                   "%.1f s\n", done, (unsigned long long)used, (unsigned long long)at.kv_total,
                   (unsigned long long)st, rss / 1048576.0, hy_t_now() - t0);
            if (ci == 0) {
                rss16 = rss;
                plan16 = at.kv_total;
            } else if (ci == (int)HY_ARRAY_LEN(checks) - 1 && rss16 > 0 && rss > 0) {
                /* pages are committed when first written: what the process
                 * grows by from 16K to 128K is the attention KV, nothing else
                 * (slack for allocator noise: an eighth, plus 1 MiB) */
                double grew = (double)rss - (double)rss16;
                double kvgrew = (double)at.kv_total - (double)plan16;
                HY_T_OK(fabs(grew - kvgrew) <= kvgrew / 8 + 1048576.0,
                        "resident memory grew %.2f MiB from %d to %d tokens; the KV plan grew "
                        "%.2f MiB", grew / 1048576.0, checks[0], done, kvgrew / 1048576.0);
            }
            ci++;
        }
    }
    t_long = hy_t_now() - t_run;
    HY_T_OK(rc == HY_OK && done == LC_CTX && seq.n_tokens == LC_CTX,
            "prefilled %d tokens in steps of %d (%s)", done, LC_STEP, rc ? err : "ok");
    HY_T_OK(ci == (int)HY_ARRAY_LEN(checks) && plan_ok,
            "at 16K/32K/64K/128K the KV bytes in use equal the plan's kv_total for that context");
    HY_T_OK(ci == (int)HY_ARRAY_LEN(checks) && state_ok && pool_ok,
            "recurrent state stays %llu bytes and the pool %llu bytes at every checkpoint",
            (unsigned long long)st0, (unsigned long long)kv0);
    HY_T_OK(finite, "logits finite at every step");

    memset(&c, 0, sizeof c);
    lc_cmp(&c, first, ref_first, LC_STEP);
    HY_T_OK(lc_rel(&c) <= LC_TOL && c.argmax_ok == c.rows,
            "positions 0..%d of the long run vs the standalone run: rel RMS %.2e (tol %.0e), "
            "argmax %d/%d", LC_STEP - 1, lc_rel(&c), LC_TOL, c.argmax_ok, c.rows);

    /* decode past 131072: greedy, one token at a time */
    tok = lc_argmax(last);
    finite = true;
    for (int i = 0; i < LC_DECODE && rc == HY_OK; i++) {
        hy_runner_item_t it = {&seq, &tok, 1, false};

        rc = hy_runner_step(&r, &it, 1, last, err);
        finite = finite && rc == HY_OK && lc_finite(last, LC_VOCAB);
        tok = lc_argmax(last);
    }
    HY_T_OK(rc == HY_OK && finite && seq.n_tokens == LC_CTX + LC_DECODE,
            "decoded %d tokens after %d: finite logits, context now %d (%s)", LC_DECODE, LC_CTX,
            seq.n_tokens, rc ? err : "ok");
    printf("# long run: %.1f s for %d tokens (%.0f tokens/s), total %.1f s\n", t_long, LC_CTX,
           LC_CTX / t_long, hy_t_now() - t0);
    hy_runner_seq_release(&r, &seq);
    {
        char perr[HY_ERR_LEN] = "ok";
        int prc = hy_pt_check(r.pt, perr);
        hy_pt_counts_t pc;

        hy_pt_counts(r.pt, &pc);
        HY_T_OK(prc == HY_OK && pc.pages_used == 0 && pc.state_used == 0,
                "after release every page and slot is free (%s; %d pages, %d slots used)", perr,
                pc.pages_used, pc.state_used);
    }
out:
    if (runner_up)
        hy_runner_free(&r);
    if (m)
        hy_model_free(m);
    if (be)
        be->i->free(be);
    free(ids);
    free(golden);
    free(first);
    free(ref_first);
    free(last);
    free(ref16);
    return hy_t_done();
}
