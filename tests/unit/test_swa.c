/*
 * test_swa.c - sliding-window layers in their own KV page group
 * (common/kvgroup.h), on the tiny gemma3, gemma2 and lfm2-swa models:
 *   - the results equal those of the same runner keeping every position
 *     (swa_full), bit for bit, on sequences a dozen windows long: prefill
 *     in steps of 64, 7 and 1, and a ragged batch of three then decoded
 *     together (the mask already hid what the sliding group gives back);
 *   - the allocator holds what the planner quotes: with Gemma 3's window
 *     (512, patched into the tiny gemma3, whose layer pattern is Gemma 3's
 *     five sliding to one global) one sequence holds, after each step the
 *     engine's way (commit, then trim), ceil(n / 16) full pages and
 *     hy_kv_swa_blocks sliding pages - the bytes hy_plan_seq_kv_bytes
 *     says - at 1K and 4K tokens, never more sliding pages than the plan's
 *     pool while a chunk runs, and the backend's pool is the plan's kv_total;
 *   - prefix caching: a repeated 4K-token prompt hits (3984 cached tokens
 *     reported) and samples the same tokens with the same top logprobs,
 *     bit for bit, as its cold run;
 *   - bad input: a KV layout with a sliding layer and no sliding pages, an
 *     attention batch that reaches a page the window gave back.
 * The page table's accounting (used + free + cached == total per group)
 * is checked after every scenario.
 */
#include "backend/layout.h"
#include "engine/local.h"
#include "engine/runner.h"
#include "kv/plan.h"
#include "test.h"
#include "golden.h"
#include "gguf_patch.h"
#include "local_req.h"

#include <math.h>
#include <string.h>

#define SW_LEN 200   /* tokens of the equality scenarios (window 16: 12 windows) */
#define SW_CTX 256
#define SW_GEMMA3_WINDOW 512
#define SW_LONG 4096 /* the allocation and prefix scenarios */

static hy_backend_t *g_be;

static void sw_tokens(int32_t *t, int32_t n, uint64_t seed, int32_t n_vocab)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;

    for (int32_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        t[i] = (int32_t)(x % (uint64_t)n_vocab);
    }
}

/* used + free + cached == total in both groups and hy_pt_check; with
 * idle, nothing used either. */
static bool sw_accounting(hy_pt_t *pt, bool idle, const char *what)
{
    char err[HY_ERR_LEN] = "ok";
    hy_pt_counts_t c;
    int rc = hy_pt_check(pt, err);

    hy_pt_counts(pt, &c);
    HY_T_OK(rc == HY_OK && c.pages_used + c.pages_free + c.pages_cached == c.pages_total &&
                c.swa_used + c.swa_free + c.swa_cached == c.swa_total &&
                (!idle || (c.pages_used == 0 && c.swa_used == 0)),
            "%s: accounting (%s; full %d+%d+%d=%d, sliding %d+%d+%d=%d)", what, err,
            c.pages_used, c.pages_free, c.pages_cached, c.pages_total, c.swa_used, c.swa_free,
            c.swa_cached, c.swa_total);
    return rc == HY_OK;
}

/* ---- sliding == every position ------------------------------------------------ */

typedef struct {
    float *steps[3]; /* [SW_LEN][n_vocab] logits, prefill in steps of 64, 7, 1 */
    float *batch;    /* [3 seqs' tokens + 5 decode rows x 3][n_vocab] */
    size_t batch_rows;
    bool trim_ok;    /* sliding run: the pages held after each step */
} sw_run_t;

static const int32_t sw_steps[3] = {64, 7, 1};
static const int32_t sw_batch_lens[3] = {SW_LEN, 150, 37};

/* Everything of one mode (sliding group or swa_full) into out. */
static int sw_run(hy_model_t *m, bool swa_full, const int32_t *ids, sw_run_t *out, char *err)
{
    hy_runner_opts_t o;
    hy_runner_t r;
    int32_t nv = m->n_vocab;
    int rc;

    hy_runner_opts_default(&o);
    o.max_tokens = 400; /* the ragged batch: 200 + 150 + 37 tokens */
    o.max_outputs = 400;
    o.max_seqs = 3;
    o.n_ctx = SW_CTX;
    o.kv_type = HY_DTYPE_F32;
    o.swa_full = swa_full;
    if ((rc = hy_runner_init(&r, m, g_be, &o, err)) != HY_OK)
        return rc;
    if (r.swa_window != (swa_full ? 0 : 16)) {
        rc = hy_err(err, HY_EINVAL, "runner's sliding window %d", r.swa_window);
        goto out;
    }
    out->trim_ok = true;
    for (int k = 0; k < 3 && rc == HY_OK; k++) {
        hy_kv_seq_t seq = {0};

        for (int32_t done = 0; done < SW_LEN && rc == HY_OK;) {
            hy_runner_item_t it = {&seq, ids + done, HY_MIN(sw_steps[k], SW_LEN - done), true};
            hy_pt_counts_t c;

            rc = hy_runner_step(&r, &it, 1, out->steps[k] + (size_t)done * nv, err);
            done += it.n;
            /* the engine's way: what the window left goes right after the step */
            hy_runner_seq_trim(&r, &seq, NULL, 0);
            hy_pt_counts(r.pt, &c);
            out->trim_ok &= c.pages_used == (done + 15) / 16 &&
                            c.swa_used == (swa_full ? 0 : hy_kv_swa_blocks(16, 16, done));
        }
        hy_runner_seq_release(&r, &seq);
    }
    if (rc == HY_OK) {
        hy_kv_seq_t seqs[3] = {{0}};
        hy_runner_item_t it[3];
        int32_t tok[3][SW_LEN + 5];
        size_t row = 0;

        for (int s = 0; s < 3; s++) {
            sw_tokens(tok[s], sw_batch_lens[s] + 5, 77 + (uint64_t)s, nv);
            it[s] = (hy_runner_item_t){&seqs[s], tok[s], sw_batch_lens[s], true};
        }
        rc = hy_runner_step(&r, it, 3, out->batch, err);
        row = (size_t)SW_LEN + 150 + 37;
        for (int d = 0; d < 5 && rc == HY_OK; d++) {
            for (int s = 0; s < 3; s++)
                it[s] = (hy_runner_item_t){&seqs[s], tok[s] + sw_batch_lens[s] + d, 1, false};
            rc = hy_runner_step(&r, it, 3, out->batch + row * nv, err);
            row += 3;
        }
        out->batch_rows = row;
        for (int s = 0; s < 3; s++)
            hy_runner_seq_release(&r, &seqs[s]);
    }
    sw_accounting(r.pt, true, swa_full ? "every position" : "sliding group");
out:
    hy_runner_free(&r);
    return rc;
}

static void sw_equal(const hy_t_golden_t *g)
{
    char err[HY_ERR_LEN] = "";
    hy_model_t *m = NULL;
    int32_t ids[SW_LEN];
    sw_run_t a = {0}, b = {0};
    int rc, k;
    bool same[3], same_batch;
    size_t n;

    rc = hy_model_load(&m, hy_t_golden_path(g), g_be, err);
    HY_T_OK(rc == HY_OK, "%s: loads (%s)", g->name, rc ? err : "ok");
    if (rc != HY_OK)
        return;
    n = (size_t)SW_LEN * (size_t)m->n_vocab;
    for (k = 0; k < 3; k++) {
        a.steps[k] = calloc(n, sizeof(float));
        b.steps[k] = calloc(n, sizeof(float));
    }
    a.batch = calloc((size_t)(SW_LEN + 150 + 37 + 15) * (size_t)m->n_vocab, sizeof(float));
    b.batch = calloc((size_t)(SW_LEN + 150 + 37 + 15) * (size_t)m->n_vocab, sizeof(float));
    sw_tokens(ids, SW_LEN, 5, m->n_vocab);
    rc = sw_run(m, false, ids, &a, err);
    if (rc == HY_OK)
        rc = sw_run(m, true, ids, &b, err);
    HY_T_OK(rc == HY_OK, "%s: runs with and without the sliding group (%s)", g->name,
            rc ? err : "ok");
    for (k = 0; k < 3; k++)
        same[k] = rc == HY_OK && memcmp(a.steps[k], b.steps[k], n * sizeof(float)) == 0;
    same_batch = rc == HY_OK && a.batch_rows == b.batch_rows &&
                 memcmp(a.batch, b.batch, a.batch_rows * (size_t)m->n_vocab * sizeof(float)) == 0;
    HY_T_OK(same[0] && same[1] && same[2] && same_batch,
            "%s: %d tokens (window 16) in steps of 64 / 7 / 1 and a ragged batch of three + 5 "
            "decodes: logits with the sliding group == keeping every position, bit for bit "
            "(%d %d %d %d)", g->name, SW_LEN, same[0], same[1], same[2], same_batch);
    HY_T_OK(rc == HY_OK && a.trim_ok,
            "%s: after each step one sequence holds ceil(n/16) full pages and the window's "
            "sliding pages (hy_kv_swa_blocks)", g->name);
    for (k = 0; k < 3; k++) {
        free(a.steps[k]);
        free(b.steps[k]);
    }
    free(a.batch);
    free(b.batch);
    hy_model_free(m);
}

/* ---- Gemma 3's window: the plan is the allocation --------------------------------- */

/* The tiny gemma3 with Gemma 3's 512-token window (its layer pattern is
 * Gemma 3's already: five sliding, then one global). */
static hy_model_t *sw_gemma3_512(const hy_t_golden_t *g, char *err)
{
    hy_model_t *m = NULL;
    size_t size;
    unsigned char *buf = hy_tp_read_all(hy_t_golden_path(g), &size);

    if (buf == NULL ||
        hy_tp_set_u32(buf, size, "gemma3.attention.sliding_window", SW_GEMMA3_WINDOW) != 0) {
        snprintf(err, HY_ERR_LEN, "cannot read or patch %s", hy_t_golden_path(g));
    } else if (hy_tp_load(g_be, buf, size, &m, err) != HY_OK) {
        m = NULL;
    }
    free(buf);
    return m;
}

static void sw_alloc(hy_model_t *m)
{
    char err[HY_ERR_LEN] = "";
    hy_plan_opts_t po = {SW_LONG + 16, 1, 16, 512, HY_DTYPE_F16, false, {0}, 0, 0, 0, 0, 0, 0};
    hy_plan_t p;
    hy_runner_opts_t o;
    hy_runner_t r;
    hy_kv_seq_t seq = {0};
    int32_t *ids = malloc(sizeof(int32_t) * SW_LONG), done = 0, peak = 0;
    uint64_t kv = 0, st = 0;
    int rc;

    if ((rc = hy_plan_make_opts(&p, m, g_be, &po, err)) == HY_OK) {
        hy_runner_opts_default(&o);
        o.max_tokens = 512;
        o.max_outputs = 1;
        o.max_seqs = 1;
        o.n_ctx = po.n_ctx;
        rc = hy_runner_init(&r, m, g_be, &o, err);
    }
    HY_T_OK(rc == HY_OK && p.swa_window == SW_GEMMA3_WINDOW && p.n_swa_kv_layers == 5 &&
                p.n_swa_pages == hy_kv_swa_peak_blocks(512, 16, 512, po.n_ctx) &&
                p.n_swa_pages == 65,
            "gemma3, window %d: plan of one %d-token sequence: %d full pages, %d sliding ones "
            "(the window + one 512-token chunk) (%s)", SW_GEMMA3_WINDOW, po.n_ctx, p.n_pages,
            p.n_swa_pages, rc ? err : "ok");
    if (rc != HY_OK || ids == NULL)
        goto out;
    g_be->i->mem_allocated(g_be, &kv, &st);
    HY_T_OK(kv == p.kv_total && r.page_bytes[HY_KV_FULL] == p.page_bytes &&
                r.page_bytes[HY_KV_SWA] == p.swa_page_bytes,
            "gemma3, window %d: the backend's pool is the plan's %llu bytes", SW_GEMMA3_WINDOW,
            (unsigned long long)p.kv_total);
    sw_tokens(ids, SW_LONG, 11, m->n_vocab);
    while (done < SW_LONG && rc == HY_OK) {
        hy_runner_item_t it = {&seq, ids + done, 512, false};
        hy_pt_counts_t c;

        if ((rc = hy_runner_step(&r, &it, 1, NULL, err)) != HY_OK)
            break;
        done += 512;
        hy_pt_counts(r.pt, &c);
        peak = HY_MAX(peak, c.swa_used);
        hy_runner_seq_trim(&r, &seq, NULL, 0);
        if (done == 1024 || done == SW_LONG) {
            uint64_t used;

            hy_pt_counts(r.pt, &c);
            used = (uint64_t)c.pages_used * r.page_bytes[HY_KV_FULL] +
                   (uint64_t)c.swa_used * r.page_bytes[HY_KV_SWA];
            HY_T_OK(c.pages_used == done / 16 &&
                        c.swa_used == hy_kv_swa_blocks(SW_GEMMA3_WINDOW, 16, done) &&
                        used == hy_plan_seq_kv_bytes(&p, done),
                    "gemma3, window %d, %d tokens: holds %d full + %d sliding pages = %llu "
                    "bytes, the plan says %llu (dense: %llu)", SW_GEMMA3_WINDOW, done,
                    c.pages_used, c.swa_used, (unsigned long long)used,
                    (unsigned long long)hy_plan_seq_kv_bytes(&p, done),
                    (unsigned long long)(p.dense_page_bytes * (uint64_t)(done / 16)));
        }
    }
    HY_T_OK(rc == HY_OK && peak <= p.n_swa_pages && peak > hy_kv_swa_blocks(512, 16, SW_LONG),
            "gemma3, window %d: at most %d sliding pages while a chunk runs (plan: %d) (%s)",
            SW_GEMMA3_WINDOW, peak, p.n_swa_pages, rc ? err : "ok");
    hy_runner_seq_release(&r, &seq);
    sw_accounting(r.pt, true, "gemma3, window 512");
    hy_runner_free(&r);
out:
    free(ids);
}

/* ---- prefix caching ------------------------------------------------------------------- */

/* A cold run of a SW_LONG-token prompt, then the same prompt again, in
 * one local engine with steps of mbt tokens; both outputs and what the
 * repeat found cached.  swa_full: every position kept (no sliding group). */
static int sw_prefix_run(hy_model_t *m, int32_t mbt, bool swa_full, const int32_t *prompt,
                         sw_out_t *cold, sw_out_t *warm, int32_t *hit, char *err)
{
    hy_engine_opts_t o;
    hy_local_engine_t le;
    sw_out_t outs[4];
    int32_t c0 = -1, want = (SW_LONG - 1) / 16 * 16;
    hy_pt_counts_t c;
    int rc, rc2;

    memset(&o, 0, sizeof o);
    memset(&le, 0, sizeof le);
    o.max_batch_tokens = mbt;
    o.max_seqs = 2;
    o.n_ctx = SW_LONG + 64;
    o.page_tokens = 16;
    o.kv_type = HY_DTYPE_F32;
    o.n_request_slots = 4;
    o.swa_full = swa_full;
    rc = hy_local_engine_open(&le, m, g_be, &o, sw_on_token, outs, err);
    if (rc == HY_OK)
        rc = sw_request(&le, prompt, SW_LONG, outs, cold, &c0, err);
    if (rc == HY_OK && !swa_full) {
        hy_pt_counts(le.pt, &c);
        /* what is left for the repeat: every full block, and the sliding
         * pages of the window before the prompt's last block boundary */
        HY_T_OK(c.pages_cached == SW_LONG / 16 && c.swa_used == 0 &&
                    c.swa_cached >= want / 16 - hy_kv_swa_first_block(SW_GEMMA3_WINDOW, 16, want),
                "gemma3 prefix, steps of %d: after a cold %d-token prompt, %d full and %d "
                "sliding pages cached", mbt, SW_LONG, c.pages_cached, c.swa_cached);
    }
    if (rc == HY_OK)
        rc = sw_request(&le, prompt, SW_LONG, outs, warm, hit, err);
    if (rc == HY_OK && c0 != 0)
        rc = hy_err(err, HY_EINVAL, "the cold run found %d tokens cached", c0);
    if (le.engine != NULL) {
        sw_accounting(le.pt, true, swa_full ? "gemma3 prefix, every position" : "gemma3 prefix");
        if ((rc2 = hy_local_engine_close(&le, err)) != HY_OK && rc == HY_OK)
            rc = rc2;
    }
    return rc;
}

/* A repeated 4K-token prompt hits.  With steps of 512 the repeat computes
 * its last 16 tokens in a step of 16 where the cold run had them in one
 * of 512, and the kernels' results depend in the last bits on a step's
 * shape (with or without the sliding group alike: the run keeping every
 * position gives the same bits); with steps of 16 the shapes are the same
 * and so are the bits. */
static void sw_prefix(hy_model_t *m)
{
    char err[HY_ERR_LEN] = "";
    int32_t *prompt = malloc(sizeof(int32_t) * SW_LONG), want = (SW_LONG - 1) / 16 * 16;
    sw_out_t cold = {0}, warm = {0}, fcold = {0}, fwarm = {0}, c16 = {0}, w16 = {0};
    int32_t hit = -1, fhit = -1, hit16 = -1;
    int rc;

    if (prompt == NULL) {
        HY_T_OK(0, "out of memory");
        return;
    }
    sw_tokens(prompt, SW_LONG, 21, m->n_vocab);
    rc = sw_prefix_run(m, 512, false, prompt, &cold, &warm, &hit, err);
    HY_T_OK(rc == HY_OK && hit == want && cold.n == SW_GEN && sw_gap(&cold, &warm) < 1e-5,
            "gemma3 prefix, window %d, steps of 512: a repeated %d-token prompt hits %d cached "
            "tokens, samples the same %d tokens, top-5 logprobs within %.2g (%s)",
            SW_GEMMA3_WINDOW, SW_LONG, hit, SW_GEN, sw_gap(&cold, &warm), rc ? err : "ok");
    if (rc == HY_OK)
        rc = sw_prefix_run(m, 512, true, prompt, &fcold, &fwarm, &fhit, err);
    HY_T_OK(rc == HY_OK && fhit == want && sw_same(&cold, &fcold) && sw_same(&warm, &fwarm),
            "gemma3 prefix, steps of 512: cold and repeat == keeping every position, bit for "
            "bit (%s)", rc ? err : "ok");
    if (rc == HY_OK)
        rc = sw_prefix_run(m, 16, false, prompt, &c16, &w16, &hit16, err);
    HY_T_OK(rc == HY_OK && hit16 == want && c16.n == SW_GEN && sw_same(&c16, &w16),
            "gemma3 prefix, steps of 16: the repeat hits %d tokens and == cold, bit for bit (%s)",
            hit16, rc ? err : "ok");
    free(prompt);
}

/* ---- bad input ------------------------------------------------------------------------ */

static void sw_bad(void)
{
    char err[HY_ERR_LEN] = "";
    uint8_t swa[2] = {0, 1};
    hy_kv_layout_t lay = {2, 2, 32, 32, 16, 8, HY_DTYPE_F32, 0, swa, {0, 0, 0, 0, 0, 0, 0}};
    int32_t full[4] = {0, 1, 2, 3}, slid[4] = {-1, -1, 0, 1}, pos[2] = {50, 51};
    int32_t tok[2] = {1, 2};
    hy_batch_seq_t sq = {0, 2, 50, full, 4, -1, slid, 4, NULL, 0, 0, 0, NULL, NULL};
    hy_batch_t b = {2, tok, pos, 1, &sq};
    hy_attn_params_t ap = {4, 2, 32, 32, 0.17f, 16, 0.0f};
    float *q = calloc(2 * 4 * 32, sizeof(float)), *kv = calloc(2 * 2 * 32, sizeof(float));
    float *out = calloc(2 * 4 * 32, sizeof(float));
    int rc;

    rc = g_be->i->kv_init(g_be, &lay, err);
    HY_T_OK(rc == HY_ERANGE && strstr(err, "kv: layer 1 is in the sliding-window group, which "
                                           "has no pages") != NULL,
            "a KV layout with a sliding layer and no sliding pages is refused (%s)", err);
    lay.n_swa_pages = 2;
    rc = g_be->i->kv_init(g_be, &lay, err);
    HY_T_OK(rc == HY_OK, "the same layout with 2 sliding pages (%s)", rc ? err : "ok");
    /* positions 50, 51 with window 16 see 35..51: blocks 2 and 3 */
    g_be->i->attention(g_be, 1, &b, q, kv, kv, out, &ap);
    rc = g_be->i->status(g_be, err);
    HY_T_OK(rc == HY_OK, "a sliding layer reads only the blocks its window sees (%s)",
            rc ? err : "ok");
    slid[2] = -1; /* block 2 given back although position 50 still sees 35.. */
    g_be->i->attention(g_be, 1, &b, q, kv, kv, out, &ap);
    rc = g_be->i->status(g_be, err);
    HY_T_OK(rc == HY_ERANGE && strstr(err, "attention: sequence 0 page 2 is id -1, pool has "
                                           "0..1") != NULL,
            "a sliding page the window still sees, given back, is refused (%s)", err);
    slid[2] = 0;
    ap.window = 0; /* a sliding-group layer asked to see everything */
    g_be->i->attention(g_be, 1, &b, q, kv, kv, out, &ap);
    rc = g_be->i->status(g_be, err);
    HY_T_OK(rc == HY_ERANGE && strstr(err, "page 0 is id -1") != NULL,
            "a sliding layer without its window cannot read released pages (%s)", err);
    free(q);
    free(kv);
    free(out);
}

int main(void)
{
    static const char *const names[] = {"gemma3", "gemma2", "lfm2-swa"};
    hy_backend_opts_t bo = {.n_threads = 2};
    hy_t_golden_t golden[HY_T_GOLDEN_MAX];
    int n_golden = hy_t_golden_models(golden, HY_T_GOLDEN_MAX);
    const hy_t_golden_t *g3 = hy_t_golden_find(golden, n_golden, "gemma3");
    char err[HY_ERR_LEN];
    hy_model_t *m;

    if (hy_backend_cpu_new(&g_be, &bo, err) != HY_OK) {
        HY_T_OK(0, "cpu backend (%s)", err);
        return hy_t_done();
    }
    for (size_t k = 0; k < HY_ARRAY_LEN(names); k++) {
        const hy_t_golden_t *g = hy_t_golden_find(golden, n_golden, names[k]);

        if (g != NULL)
            sw_equal(g);
    }
    if (g3 != NULL) {
        m = sw_gemma3_512(g3, err);
        HY_T_OK(m != NULL, "gemma3 with a %d-token window loads (%s)", SW_GEMMA3_WINDOW,
                m ? "ok" : err);
        if (m != NULL) {
            sw_alloc(m);
            sw_prefix(m);
            hy_model_free(m);
        }
    }
    sw_bad();
    g_be->i->free(g_be);
    return hy_t_done();
}
