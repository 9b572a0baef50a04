/*
 * test_swa_context.c - sliding-window layers to 32K tokens.  First Gemma 3's
 * window (512) and layer pattern (five sliding layers, then a global one)
 * on the tiny gemma3, its window patched: 32768 tokens through the runner
 * in steps of 512, trimmed after each step as the engine does.  At 1K, 4K,
 * 16K and 32K the pages each group holds are what hy_plan_seq_kv_bytes
 * quotes, the pool stays the plan's kv_total, and the process's resident
 * memory grows by the global layer's KV and no more (the sliding layers
 * hold 32 pages at any length: the dense equivalent would grow six times
 * as much); the logits stay finite and a few tokens decode past 32K.
 * Then the real Gemma 3 270M (models/gemma-3-270m-q4_k_m.gguf, fetched by
 * scripts/fetch-model gemma3-270m; its absence is a failure): its plan at
 * 1K, 4K and 32K against its geometry (3 global layers keep every
 * position, 15 sliding ones the last 512), a 32K runner's pool against
 * the plan, a 1024-token prefill holding what the plan says, and a
 * repeated 4096-token prompt that hits 4080 tokens and samples what its
 * cold run sampled, bit for bit.
 * Integration, not unit: tens of seconds, so out of the sanitizer build.
 */
#include "engine/runner.h"
#include "kv/plan.h"
#include "../unit/test.h"
#include "../unit/gguf_patch.h"
#include "../unit/local_req.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SC_WINDOW 512
#define SC_CTX 32768
#define SC_STEP 512
#define SC_DECODE 4
#define SC_REAL "models/gemma-3-270m-q4_k_m.gguf"

static hy_backend_t *g_be;

static bool sc_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

static int32_t *sc_tokens(int32_t n, int32_t n_vocab, int32_t lo)
{
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    uint64_t x = 0x9e3779b97f4a7c15ull;

    for (int32_t i = 0; ids != NULL && i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = lo + (int32_t)((x >> 33) % (uint64_t)(n_vocab - lo));
    }
    return ids;
}

/* The KV bytes of pages a runner's table holds now, group by group. */
static uint64_t sc_used(const hy_runner_t *r, hy_pt_counts_t *c)
{
    hy_pt_counts(r->pt, c);
    return (uint64_t)c->pages_used * r->page_bytes[HY_KV_FULL] +
           (uint64_t)c->swa_used * r->page_bytes[HY_KV_SWA];
}

/* ---- the tiny gemma3 with Gemma 3's window, to 32K ---------------------------------- */

static void sc_tiny(void)
{
    static const int32_t checks[] = {1024, 4096, 16384, 32768};
    char err[HY_ERR_LEN] = "";
    hy_plan_opts_t po = {SC_CTX + 64, 1, 16, SC_STEP, HY_DTYPE_F16, false, {0}, 0, 0, 0, 0, 0, 0};
    hy_model_t *m = NULL;
    hy_plan_t p;
    hy_runner_opts_t o;
    hy_runner_t r;
    hy_kv_seq_t seq = {0};
    unsigned char *buf;
    size_t size;
    int32_t *ids = NULL, done = 0, ci = 0, tok;
    uint64_t kv0 = 0, st, kv, rss4 = 0, used4 = 0;
    float *logits = NULL;
    bool plan_ok = true, pool_ok = true, finite = true, up = false;
    double t0 = hy_t_now();
    int rc;

    buf = hy_tp_read_all(hy_t_srcpath("tests/golden/tiny/gemma3.gguf"), &size);
    rc = buf != NULL && hy_tp_set_u32(buf, size, "gemma3.attention.sliding_window", SC_WINDOW) == 0
             ? hy_tp_load(g_be, buf, size, &m, err)
             : hy_err(err, HY_EIO, "cannot read or patch tests/golden/tiny/gemma3.gguf");
    free(buf);
    HY_T_OK(rc == HY_OK, "tiny gemma3 with a %d-token window loads (%s)", SC_WINDOW,
            rc ? err : "ok");
    if (rc != HY_OK)
        return;
    if ((rc = hy_plan_make_opts(&p, m, g_be, &po, err)) == HY_OK) {
        hy_runner_opts_default(&o);
        o.max_tokens = SC_STEP;
        o.max_outputs = 1;
        o.max_seqs = 1;
        o.n_ctx = po.n_ctx;
        if ((rc = hy_runner_init(&r, m, g_be, &o, err)) == HY_OK)
            up = true;
    }
    ids = sc_tokens(SC_CTX + SC_DECODE, m->n_vocab, 0);
    logits = malloc(sizeof(float) * (size_t)m->n_vocab);
    HY_T_OK(rc == HY_OK && ids && logits && p.swa_window == SC_WINDOW && p.n_swa_kv_layers == 5,
            "runner and plan for %d positions: %d full pages, %d sliding ones (%s)", po.n_ctx,
            p.n_pages, p.n_swa_pages, rc ? err : "ok");
    if (rc != HY_OK || !ids || !logits)
        goto out;
    g_be->i->mem_allocated(g_be, &kv0, &st);
    while (done < SC_CTX && rc == HY_OK) {
        hy_runner_item_t it = {&seq, ids + done, SC_STEP, false};
        hy_pt_counts_t c;
        uint64_t used, rss;

        if ((rc = hy_runner_step(&r, &it, 1, logits, err)) != HY_OK)
            break;
        done += SC_STEP;
        finite = finite && sc_finite(logits, (size_t)m->n_vocab);
        hy_runner_seq_trim(&r, &seq, NULL, 0); /* the engine's way, right after the step */
        if (ci >= (int)HY_ARRAY_LEN(checks) || done != checks[ci])
            continue;
        used = sc_used(&r, &c);
        rss = hy_t_rss();
        g_be->i->mem_allocated(g_be, &kv, &st);
        plan_ok = plan_ok && c.pages_used == done / 16 &&
                  c.swa_used == hy_kv_swa_blocks(SC_WINDOW, 16, done) &&
                  used == hy_plan_seq_kv_bytes(&p, done);
        pool_ok = pool_ok && kv == kv0 && kv0 == p.kv_total;
        printf("# %5d tokens: %4d full + %2d sliding pages = %8llu B (plan %8llu B, dense %8llu "
               "B), RSS %.1f MiB, %.1f s\n", done, c.pages_used, c.swa_used,
               (unsigned long long)used, (unsigned long long)hy_plan_seq_kv_bytes(&p, done),
               (unsigned long long)(p.dense_page_bytes * (uint64_t)(done / 16)),
               rss / 1048576.0, hy_t_now() - t0);
        if (done == 4096) {
            rss4 = rss;
            used4 = used;
        } else if (done == SC_CTX && rss4 > 0 && rss > 0) {
            /* pages are committed when first written: from 4K to 32K the
             * process grows by the global layer's new pages, the sliding
             * layers reuse theirs (slack: an eighth, plus 1 MiB) */
            double grew = (double)rss - (double)rss4, kvgrew = (double)(used - used4);

            HY_T_OK(fabs(grew - kvgrew) <= kvgrew / 8 + 1048576.0,
                    "resident memory grew %.2f MiB from 4K to 32K tokens; the KV in use grew "
                    "%.2f MiB (dense: %.2f MiB)", grew / 1048576.0, kvgrew / 1048576.0,
                    (double)(p.dense_page_bytes * (uint64_t)((SC_CTX - 4096) / 16)) / 1048576.0);
        }
        ci++;
    }
    HY_T_OK(rc == HY_OK && done == SC_CTX && ci == (int)HY_ARRAY_LEN(checks) && plan_ok,
            "at 1K/4K/16K/32K each group holds what the plan quotes (full: every block; "
            "sliding: %d pages) (%s)", hy_kv_swa_blocks(SC_WINDOW, 16, SC_CTX), rc ? err : "ok");
    HY_T_OK(pool_ok && finite, "the pool stays the plan's %llu bytes; logits finite",
            (unsigned long long)p.kv_total);
    tok = ids[SC_CTX];
    for (int i = 0; i < SC_DECODE && rc == HY_OK; i++) {
        hy_runner_item_t it = {&seq, &tok, 1, false};

        rc = hy_runner_step(&r, &it, 1, logits, err);
        finite = finite && rc == HY_OK && sc_finite(logits, (size_t)m->n_vocab);
        tok = ids[SC_CTX + 1 + i % (SC_DECODE - 1)];
    }
    HY_T_OK(rc == HY_OK && finite && seq.n_tokens == SC_CTX + SC_DECODE,
            "decoded %d tokens past %d: finite logits (%s)", SC_DECODE, SC_CTX, rc ? err : "ok");
    hy_runner_seq_release(&r, &seq);
    {
        char perr[HY_ERR_LEN] = "ok";
        hy_pt_counts_t c;
        int prc = hy_pt_check(r.pt, perr);

        hy_pt_counts(r.pt, &c);
        HY_T_OK(prc == HY_OK && c.pages_used == 0 && c.swa_used == 0 &&
                    c.swa_used + c.swa_free + c.swa_cached == c.swa_total,
                "after release every page of both groups is back (%s)", perr);
    }
    printf("# tiny gemma3 to %d tokens: %.1f s\n", SC_CTX, hy_t_now() - t0);
out:
    if (up)
        hy_runner_free(&r);
    free(ids);
    free(logits);
    hy_model_free(m);
}

/* ---- the real Gemma 3 270M --------------------------------------------------------------- */

/* A 4096-token prompt, then the same again, through one local engine in
 * steps of 512: the repeat hits every block but the last (4080 tokens;
 * the window's sliding pages before it were kept) and samples the same
 * tokens with the same logprobs and top-5, bit for bit, although its last
 * 16 positions run in a step of their own: the kernels give a token the
 * same bits in a step of any size (test_invariance), so a hit may not
 * change a bit either. */
static void sc_real_prefix(hy_model_t *m)
{
    char err[HY_ERR_LEN] = "";
    hy_engine_opts_t o;
    hy_local_engine_t le;
    sw_out_t outs[4], cold = {0}, warm = {0};
    int32_t *prompt = sc_tokens(4096, m->n_vocab, 1000), c0 = -1, c1 = -1;
    double t0 = hy_t_now(), gap;
    int rc, rc2;

    memset(&o, 0, sizeof o);
    memset(&le, 0, sizeof le);
    o.max_batch_tokens = 512;
    o.max_seqs = 1;
    o.n_ctx = 4096 + 64;
    o.page_tokens = 16;
    o.kv_type = HY_DTYPE_F16;
    o.n_request_slots = 2;
    rc = prompt != NULL ? hy_local_engine_open(&le, m, g_be, &o, sw_on_token, outs, err)
                        : hy_err(err, HY_ENOMEM, "out of memory");
    if (rc == HY_OK)
        rc = sw_request(&le, prompt, 4096, outs, &cold, &c0, err);
    if (rc == HY_OK)
        rc = sw_request(&le, prompt, 4096, outs, &warm, &c1, err);
    if (le.engine != NULL && (rc2 = hy_local_engine_close(&le, err)) != HY_OK && rc == HY_OK)
        rc = rc2;
    gap = sw_gap(&cold, &warm);
    HY_T_OK(rc == HY_OK && c0 == 0 && c1 == 4080 && cold.n == SW_GEN && sw_same(&cold, &warm),
            "Gemma 3 270M: a repeated 4096-token prompt hits %d cached tokens (cold %d), samples "
            "the same %d tokens, logprobs and top-5 bit for bit (largest gap %.2g; %.0f s; %s)",
            c1, c0, SW_GEN, gap,
            hy_t_now() - t0, rc ? err : "ok");
    free(prompt);
}

static void sc_real(void)
{
    static const int32_t lens[] = {1024, 4096, 32768};
    char err[HY_ERR_LEN] = "";
    hy_model_t *m = NULL;
    hy_runner_opts_t o;
    hy_runner_t r;
    hy_kv_seq_t seq = {0};
    hy_plan_t p;
    hy_pt_counts_t c;
    int32_t *ids = NULL, done = 0;
    uint64_t kv = 0, st, used, per_tok = 0;
    int rc = access(hy_t_srcpath(SC_REAL), R_OK) == 0
                 ? hy_model_load(&m, hy_t_srcpath(SC_REAL), g_be, err)
                 : hy_err(err, HY_ENOENT, "%s is missing: scripts/fetch-model gemma3-270m",
                          SC_REAL);

    HY_T_OK(rc == HY_OK, "Gemma 3 270M loads (%s)", rc ? err : "ok");
    if (rc != HY_OK)
        return;
    /* one KV row: n_head_kv x (k + v head sizes) halves */
    per_tok = (uint64_t)m->n_head_kv * (uint64_t)(m->head_dim + m->head_dim_v) * 2;
    for (size_t i = 0; i < HY_ARRAY_LEN(lens); i++) {
        hy_plan_opts_t po = {lens[i], 1, 16, 512, HY_DTYPE_F16, false, {0}, 0, 0, 0, 0, 0, 0};
        uint64_t want;

        rc = hy_plan_make_opts(&p, m, g_be, &po, err);
        want = per_tok * (3 * (uint64_t)lens[i] +
                          15 * (uint64_t)hy_kv_swa_blocks(512, 16, lens[i]) * 16);
        HY_T_OK(rc == HY_OK && m->n_layer == 18 && p.n_layers[HY_LAYER_ATTN_FULL] == 3 &&
                    p.swa_window == 512 && p.n_swa_kv_layers == 15 && p.seq_kv_bytes == want,
                "Gemma 3 270M at %d tokens: the plan holds %llu KV bytes per sequence = 3 "
                "layers x %d positions + 15 x %d (dense: %llu) (%s)", lens[i],
                (unsigned long long)p.seq_kv_bytes, lens[i],
                hy_kv_swa_blocks(512, 16, lens[i]) * 16, (unsigned long long)p.dense_seq_kv_bytes,
                rc ? err : "ok");
    }
    /* p is the 32K plan: a runner for 32K positions has its pool */
    hy_runner_opts_default(&o);
    o.max_tokens = 512;
    o.max_outputs = 1;
    o.max_seqs = 1;
    o.n_ctx = 32768;
    if ((rc = hy_runner_init(&r, m, g_be, &o, err)) == HY_OK)
        g_be->i->mem_allocated(g_be, &kv, &st);
    HY_T_OK(rc == HY_OK && kv == p.kv_total,
            "Gemma 3 270M, 32K positions: the backend's pool is the plan's %llu bytes (%llu; %s)",
            (unsigned long long)p.kv_total, (unsigned long long)kv, rc ? err : "ok");
    if (rc != HY_OK)
        goto out;
    ids = sc_tokens(1024, m->n_vocab, 1000); /* ordinary pieces, no control tokens */
    while (ids != NULL && rc == HY_OK && done < 1024) {
        hy_runner_item_t it = {&seq, ids + done, 512, false};

        rc = hy_runner_step(&r, &it, 1, NULL, err);
        done += 512;
        hy_runner_seq_trim(&r, &seq, NULL, 0);
    }
    used = sc_used(&r, &c);
    HY_T_OK(rc == HY_OK && ids && c.pages_used == 64 && c.swa_used == 32 &&
                used == hy_plan_seq_kv_bytes(&p, 1024),
            "Gemma 3 270M after a 1024-token prefill: %d full + %d sliding pages = %llu bytes, "
            "the plan says %llu (%s)", c.pages_used, c.swa_used, (unsigned long long)used,
            (unsigned long long)hy_plan_seq_kv_bytes(&p, 1024), rc ? err : "ok");
    hy_runner_seq_release(&r, &seq);
    hy_runner_free(&r);
    sc_real_prefix(m);
out:
    free(ids);
    hy_model_free(m);
}

int main(void)
{
    hy_backend_opts_t bo = {.n_threads = 2};
    char err[HY_ERR_LEN];

    if (hy_backend_cpu_new(&g_be, &bo, err) != HY_OK) {
        HY_T_OK(0, "cpu backend (%s)", err);
        return hy_t_done();
    }
    sc_tiny();
    sc_real();
    g_be->i->free(g_be);
    return hy_t_done();
}
