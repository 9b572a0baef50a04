/*
 * test_fault_model.c - every allocation on the way from a GGUF file to
 * logits fails once (tests/unit/fault.h): the GGUF reader (a file and a
 * caller's buffer), the CPU backend and model load, the runner (init and
 * ragged steps), the sampler (logits to tokens, as the engine drives it per
 * request) and the page table with its prefix cache (which allocates only
 * while rebuilding after a crash).  Each armed run must end in an error
 * with a message, or in the same result as the unarmed run bit for bit
 * (logits, the file's keys and tensors, the drawn tokens, the table's
 * counts); a step that fails must leave its sequences where they were;
 * nothing may stay allocated.  Runs over every model of
 * tests/golden/tiny/manifest.json.
 * Built with --enable-fault-injection (implied by --enable-sanitizers).
 */
#include "backend/backend.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "ipc/pagetable.h"
#include "model/gguf.h"
#include "model/model.h"
#include "test.h"
#include "golden.h"
#include "fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FM_ROWS 10 /* logit rows the forward check keeps */

/* ---- the GGUF reader ----------------------------------------------------- */

typedef struct {
    const char *path;
    unsigned char *buf; /* the file in memory, for hy_gguf_open_buffer */
    size_t size;
    bool from_buffer;
    bool have_ref;
    uint64_t ref;
} fm_gguf_t;

/* Everything the reader hands out: keys, their types, tensor names, shapes,
 * types and data (whose bytes must be the file's). */
static uint64_t fm_gguf_digest(const hy_gguf_t *g)
{
    uint64_t h = HY_FAULT_HASH0;
    int64_t i;

    for (i = 0; i < hy_gguf_n_kv(g); i++) {
        hy_gguf_str_t k = hy_gguf_kv_key(g, i);
        hy_gguf_type_t t = hy_gguf_kv_type(g, i);

        h = hy_fault_hash(hy_fault_hash(h, k.ptr, k.len), &t, sizeof t);
    }
    for (i = 0; i < hy_gguf_n_tensors(g); i++) {
        const hy_gguf_tensor_t *t = hy_gguf_tensor(g, i);

        h = hy_fault_hash(h, t->name, strlen(t->name));
        h = hy_fault_hash(h, t->ne, sizeof t->ne);
        h = hy_fault_hash(h, &t->type, sizeof t->type);
        h = hy_fault_hash(h, t->data, t->nbytes < 64 ? t->nbytes : 64);
        h = hy_gguf_find_tensor(g, t->name) == t ? h : h + 1;
    }
    return h;
}

static int fm_gguf_run(void *ctx, char *why, size_t why_len)
{
    fm_gguf_t *c = ctx;
    char err[HY_ERR_LEN] = "";
    hy_gguf_t *g = NULL;
    uint64_t d;
    int rc;

    if (c->from_buffer)
        rc = hy_gguf_open_buffer(&g, c->buf, c->size, c->path, err);
    else
        rc = hy_gguf_open(&g, c->path, err);
    if (rc != HY_OK) {
        snprintf(why, why_len, "%s", err);
        return rc < 0 ? rc : HY_EINVAL;
    }
    d = fm_gguf_digest(g);
    hy_gguf_close(g);
    if (!c->have_ref) {
        c->ref = d;
        c->have_ref = true;
    }
    if (d != c->ref) {
        snprintf(why, why_len, "opened, but its keys or tensors differ from the unarmed run's");
        return 1;
    }
    return 0;
}

/* A read of the weights into huge pages that ends early or fails: an error
 * naming the file and the byte, the memory given back; one interrupted
 * read is retried and changes nothing. */
static void fm_gguf_read_errors(const char *path, const char *name)
{
    struct {
        long after;
        int err;
        const char *want; /* printf format of the message's tail (size); NULL: opens */
    } cases[] = {
        {0, 0, "file ended at byte 0 while reading %zu"},
        {1000, 0, "file ended at byte 1000 while reading %zu"},
        {1000, EIO, "read failed at byte 1000 of %zu: Input/output error"},
        {1000, EINTR, NULL},
    };
    char err[HY_ERR_LEN], want[160];
    hy_gguf_t *g = NULL;
    uint64_t ref;
    size_t size;
    unsigned char *buf = hy_t_read_all(path, &size);

    free(buf);
    if (buf == NULL || hy_gguf_open_ex(&g, path, HY_GGUF_HUGE_PAGES, err) != HY_OK) {
        HY_T_OK(0, "%s: read into huge pages: %s", name, buf == NULL ? "cannot read" : err);
        return;
    }
    ref = fm_gguf_digest(g);
    hy_gguf_close(g);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long live0 = hy_fault_live();
        int rc;

        err[0] = '\0';
        g = NULL;
        hy_fault_pread(cases[i].after, cases[i].err);
        rc = hy_gguf_open_ex(&g, path, HY_GGUF_HUGE_PAGES, err);
        hy_fault_pread(-1, 0);
        if (cases[i].want == NULL) {
            bool same = rc == HY_OK && fm_gguf_digest(g) == ref;

            hy_gguf_close(g);
            HY_T_OK(same && hy_fault_live() == live0,
                    "%s: a read interrupted after 1000 bytes is retried: the same file (%s)",
                    name, rc == HY_OK ? "opened" : err);
            continue;
        }
        snprintf(want, sizeof want, cases[i].want, size);
        HY_T_OK(rc == HY_EIO && g == NULL && strncmp(err, path, strlen(path)) == 0 &&
                    strstr(err, want) != NULL && hy_fault_live() == live0,
                "%s: a read that stops after %ld bytes (%s): \"%s\", nothing left mapped", name,
                cases[i].after, cases[i].err ? strerror(cases[i].err) : "end of file", err);
    }
}

/* ---- backend + model + runner --------------------------------------------- */

enum { FM_ARM_LOAD, FM_ARM_RUN };

typedef struct {
    const char *path;
    int arm;         /* which phase allocations may fail in; the other is paused */
    int32_t n_vocab;
    bool have_ref;
    float *ref;      /* [FM_ROWS][n_vocab] */
    float *out;      /* the same, this run */
} fm_model_t;

/* A step that failed must leave its sequences as they were: same length,
 * same pages (the runner's rule: no sequence advances on error). */
static int fm_step(hy_runner_t *r, hy_runner_item_t *it, int32_t n, float *logits, char *err,
                   char *why, size_t why_len)
{
    int32_t tok[4], pages[4], i;
    int rc;

    for (i = 0; i < n; i++) {
        tok[i] = it[i].seq->n_tokens;
        pages[i] = it[i].seq->n_pages;
    }
    rc = hy_runner_step(r, it, n, logits, err);
    if (rc == HY_OK)
        return HY_OK;
    for (i = 0; i < n; i++) {
        if (it[i].seq->n_tokens != tok[i] || it[i].seq->n_pages != pages[i]) {
            snprintf(why, why_len, "a failed step (%s) moved sequence %d from %d tokens/%d pages "
                     "to %d/%d", err, i, tok[i], pages[i], it[i].seq->n_tokens,
                     it[i].seq->n_pages);
            return 1;
        }
    }
    snprintf(why, why_len, "step: %s", err);
    return rc;
}

/* Two sequences through three steps: a 5-token prefill with every row, a
 * ragged step (one decode + a 3-token prefill), one more decode. */
static int fm_forward(hy_runner_t *r, float *out, int32_t n_vocab, char *why, size_t why_len)
{
    static const int32_t a[] = {1, 17, 42, 99, 128, 200, 7}, b[] = {63, 5, 250};
    char err[HY_ERR_LEN] = "";
    hy_kv_seq_t sa = {0}, sb = {0};
    hy_runner_item_t s1 = {&sa, a, 5, true};
    hy_runner_item_t s2[2] = {{&sa, a + 5, 1, false}, {&sb, b, 3, true}};
    hy_runner_item_t s3 = {&sa, a + 6, 1, false};
    int rc;

    rc = fm_step(r, &s1, 1, out, err, why, why_len);
    if (rc == HY_OK)
        rc = fm_step(r, s2, 2, out + (size_t)5 * n_vocab, err, why, why_len);
    if (rc == HY_OK) /* rows 0..4 (a), 5 (a), 6..8 (b), 9 (a) */
        rc = fm_step(r, &s3, 1, out + (size_t)9 * n_vocab, err, why, why_len);
    hy_runner_seq_release(r, &sa);
    hy_runner_seq_release(r, &sb);
    return rc;
}

static int fm_model_run(void *ctx, char *why, size_t why_len)
{
    fm_model_t *c = ctx;
    hy_backend_opts_t bo = {.n_threads = 2}; /* the pool's start-up allocates too */
    hy_backend_t *be = NULL;
    hy_model_t *m = NULL;
    hy_runner_t r;
    hy_runner_opts_t o;
    char err[HY_ERR_LEN] = "";
    bool runner = false;
    int rc;

    hy_fault_pause(c->arm != FM_ARM_LOAD);
    if ((rc = hy_backend_cpu_new(&be, &bo, err)) != HY_OK) {
        snprintf(why, why_len, "cpu backend: %s", err);
        goto out;
    }
    if ((rc = hy_model_load(&m, c->path, be, err)) != HY_OK) {
        snprintf(why, why_len, "load: %s", err);
        goto out;
    }
    hy_fault_pause(c->arm != FM_ARM_RUN);
    hy_runner_opts_default(&o);
    o.max_tokens = 8;
    o.max_outputs = 8;
    o.max_seqs = 2;
    o.n_ctx = 32;
    o.kv_type = HY_DTYPE_F32;
    if ((rc = hy_runner_init(&r, m, be, &o, err)) != HY_OK) {
        snprintf(why, why_len, "runner: %s", err);
        goto out;
    }
    runner = true;
    memset(c->out, 0, sizeof(float) * FM_ROWS * (size_t)c->n_vocab);
    rc = fm_forward(&r, c->out, c->n_vocab, why, why_len);
    hy_fault_pause(true);
    if (rc == HY_OK && !c->have_ref) {
        memcpy(c->ref, c->out, sizeof(float) * FM_ROWS * (size_t)c->n_vocab);
        c->have_ref = true;
    }
    if (rc == HY_OK && memcmp(c->ref, c->out, sizeof(float) * FM_ROWS * (size_t)c->n_vocab)) {
        snprintf(why, why_len, "succeeded, but the logits differ from the unarmed run's");
        rc = 1;
    }
out:
    hy_fault_pause(true); /* teardown frees only */
    if (runner)
        hy_runner_free(&r);
    hy_model_free(m);
    if (be)
        be->i->free(be);
    return rc;
}

/* ---- the sampler -------------------------------------------------------------- */

#define FS_VOCAB 300

typedef struct {
    bool have_ref;
    uint64_t ref;
} fm_smp_t;

/* Step k's logits: a fixed pseudo-random row, so every run sees the same. */
static void fm_smp_logits(float *l, int k)
{
    uint64_t x = 0x9E3779B97F4A7C15ULL * (uint64_t)(k + 1);

    for (int v = 0; v < FS_VOCAB; v++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        l[v] = (float)(x % 8000) / 1000.0f - 4.0f;
    }
}

/* What the engine does per request: a sampler with every filter and
 * penalty on, the prompt recorded, then 48 draws each accepted.  The drawn
 * tokens and their logprobs must be the unarmed run's; an allocation that
 * fails must fail a call (a token missing from the penalty counts would
 * skew every later draw). */
static int fm_smp_run(void *ctx, char *why, size_t why_len)
{
    fm_smp_t *c = ctx;
    hy_sampling_t p;
    hy_sampler_t *smp = NULL;
    hy_sample_out_t so;
    char err[HY_ERR_LEN] = "";
    float logits[FS_VOCAB];
    int32_t prompt[40], t = 0;
    uint64_t h = HY_FAULT_HASH0;
    int rc, k;

    hy_sampling_default(&p);
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.9f;
    p.min_p = 0.01f;
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.penalty_last_n = 16;
    p.seed = 42;
    p.n_logprobs = 3;
    for (k = 0; k < 40; k++)
        prompt[k] = (k * 37) % 90; /* repeats: the penalties see counts > 1 */
    if ((rc = hy_sampler_create(&smp, &p, FS_VOCAB, err)) != HY_OK) {
        snprintf(why, why_len, "create: %s", err);
        return rc;
    }
    if ((rc = hy_sampler_accept_prompt(smp, prompt, 40)) != HY_OK) {
        snprintf(why, why_len, "accept_prompt: %s", hy_strerror(rc));
        goto out;
    }
    for (k = 0; k < 48; k++) {
        fm_smp_logits(logits, k);
        if ((t = hy_sampler_sample(smp, logits, &so)) < 0) {
            rc = t;
            snprintf(why, why_len, "draw %d: %s", k, hy_strerror(rc));
            goto out;
        }
        if ((rc = hy_sampler_accept(smp, t)) != HY_OK) {
            snprintf(why, why_len, "accept %d: %s", k, hy_strerror(rc));
            goto out;
        }
        h = hy_fault_hash(hy_fault_hash(h, &t, sizeof t), &so.logprob, sizeof so.logprob);
    }
    if (!c->have_ref) {
        c->ref = h;
        c->have_ref = true;
    }
    if (h != c->ref) {
        snprintf(why, why_len, "succeeded, but drew other tokens than the unarmed run");
        rc = 1;
    }
out:
    hy_sampler_free(smp);
    return rc;
}

/* ---- the page table --------------------------------------------------------- */

#define FP_BT 4

typedef struct {
    void *mem;
    uint64_t size;
    hy_pt_params_t p;
    bool have_ref;
    hy_pt_counts_t ref;
    int32_t ref_hit;
} fm_pt_t;

/* One engine-like sequence: match, allocate the rest, commit full blocks,
 * checkpoint the last one, release.  Returns the tokens matched or < 0. */
static int32_t fm_pt_seq(hy_pt_t *pt, const int32_t *tok, int32_t n, char *err)
{
    int32_t pages[64], b, slot, nb = (n + FP_BT - 1) / FP_BT;
    hy_pt_match_t m = {pages, 64, 0, 0, -1, 0, NULL, 0, 0};
    uint64_t h;
    bool existed;
    int rc;

    if ((rc = hy_pt_match(pt, tok, n, true, &m, err)) != HY_OK)
        return rc;
    if (m.ckpt >= 0)
        hy_pt_checkpoint_release(pt, m.ckpt, err);
    if ((rc = hy_pt_alloc_pages(pt, HY_KV_FULL, nb - m.n_blocks, pages + m.n_blocks, err)) != HY_OK) {
        hy_pt_release_seq(pt, HY_KV_FULL, pages, m.n_blocks, err);
        return rc;
    }
    h = m.hash;
    for (b = m.n_blocks; b < n / FP_BT; b++) {
        h = hy_pt_block_hash(h, tok + b * FP_BT, FP_BT);
        hy_pt_commit_block(pt, HY_KV_FULL, pages[b], h, b, tok + b * FP_BT, err);
    }
    if (n / FP_BT > m.n_blocks && hy_pt_checkpoint_put(pt, h, &slot, &existed, err) == HY_OK) {
        if (existed)
            hy_pt_checkpoint_release(pt, slot, err);
        else
            hy_pt_checkpoint_publish(pt, slot, err);
    }
    hy_pt_release_seq(pt, HY_KV_FULL, pages, nb, err);
    return m.n_tokens;
}

/* A conversation that fills the cache, a crash (hy_pt_recover rebuilds the
 * lists, sorting cached entries by last use when it can allocate, in id
 * order when it cannot), then a prefix hit: either way the table must check
 * out and the hit must be the same. */
static int fm_pt_run(void *ctx, char *why, size_t why_len)
{
    fm_pt_t *c = ctx;
    char err[HY_ERR_LEN] = "";
    int32_t tok[40], i, hit, slot;
    hy_pt_counts_t cn;
    hy_pt_t pt;
    int rc;

    for (i = 0; i < 40; i++)
        tok[i] = 1000 + i * 7;
    if ((rc = hy_pt_init(&pt, c->mem, c->size, &c->p, NULL, err)) != HY_OK) {
        snprintf(why, why_len, "init: %s", err);
        return rc;
    }
    for (i = 8; i <= 40; i += 8)
        if ((rc = fm_pt_seq(&pt, tok, i, err)) < 0) {
            snprintf(why, why_len, "turn of %d tokens: %s", i, err);
            return rc;
        }
    hy_pt_state_alloc(&pt, &slot, err); /* a live sequence at the crash */
    hy_pt_recover(&pt);
    hy_pt_state_free(&pt, slot, err);
    if ((rc = hy_pt_check(&pt, err)) != HY_OK) {
        snprintf(why, why_len, "after recovery: %s", err);
        return 1;
    }
    hit = fm_pt_seq(&pt, tok, 36, err);
    hy_pt_counts(&pt, &cn);
    cn.queries = cn.query_tokens = cn.hits = cn.hit_tokens = 0; /* not part of the state */
    if (!c->have_ref) {
        c->ref = cn;
        c->ref_hit = hit;
        c->have_ref = true;
    }
    if (hit != c->ref_hit || hy_pt_check(&pt, err) != HY_OK || memcmp(&cn, &c->ref, sizeof cn)) {
        snprintf(why, why_len, "after recovery the 36-token prompt hit %d tokens (%d unarmed), "
                 "pages used/free/cached %d/%d/%d (%d/%d/%d)", hit, c->ref_hit, cn.pages_used,
                 cn.pages_free, cn.pages_cached, c->ref.pages_used, c->ref.pages_free,
                 c->ref.pages_cached);
        return 1;
    }
    return 0;
}

static void fm_pagetable(void)
{
    fm_pt_t c = {.p = {16, FP_BT, 2, 4, 0}};
    hy_pt_layout_t l;
    hy_fault_result_t res;
    char err[HY_ERR_LEN];

    if (hy_pt_layout(&c.p, &l, err) != HY_OK) {
        HY_T_OK(0, "page table layout: %s", err);
        return;
    }
    c.size = l.total_size;
    c.mem = aligned_alloc(64, (c.size + 63) / 64 * 64);
    hy_fault_loop(fm_pt_run, &c, 0, &res);
    hy_fault_report("page table: 5 turns of a conversation, a crash, recovery, a prefix hit", &res);
    free(c.mem);
}

static void fm_golden(const hy_t_golden_t *g)
{
    fm_gguf_t gc = {.path = hy_t_golden_path(g)};
    fm_model_t mc = {.path = gc.path, .n_vocab = g->n_vocab};
    hy_fault_result_t res;
    char what[160];

    hy_fault_loop(fm_gguf_run, &gc, 0, &res);
    snprintf(what, sizeof what, "%.63s: hy_gguf_open", g->name);
    hy_fault_report(what, &res);
    gc.buf = hy_t_read_all(gc.path, &gc.size);
    gc.from_buffer = true;
    gc.have_ref = false;
    if (gc.buf == NULL) {
        HY_T_OK(0, "%s: cannot read %s", g->name, gc.path);
    } else {
        hy_fault_loop(fm_gguf_run, &gc, 0, &res);
        snprintf(what, sizeof what, "%.63s: hy_gguf_open_buffer", g->name);
        hy_fault_report(what, &res);
    }
    free(gc.buf);
    fm_gguf_read_errors(gc.path, g->name);

    mc.ref = calloc(FM_ROWS * (size_t)g->n_vocab, sizeof(float));
    mc.out = calloc(FM_ROWS * (size_t)g->n_vocab, sizeof(float));
    mc.arm = FM_ARM_LOAD;
    hy_fault_loop(fm_model_run, &mc, 0, &res);
    snprintf(what, sizeof what, "%.63s: cpu backend + hy_model_load (logits checked)", g->name);
    hy_fault_report(what, &res);
    mc.arm = FM_ARM_RUN;
    hy_fault_loop(fm_model_run, &mc, 0, &res);
    snprintf(what, sizeof what, "%.63s: hy_runner_init + 3 ragged steps (logits checked)", g->name);
    hy_fault_report(what, &res);
    free(mc.ref);
    free(mc.out);
}

int main(void)
{
    hy_t_golden_t models[HY_T_GOLDEN_MAX];
    int i, n;

    hy_fault_init();
    n = hy_t_golden_models(models, HY_T_GOLDEN_MAX);
    fm_pagetable();
    {
        fm_smp_t c = {0};
        hy_fault_result_t res;

        hy_fault_loop(fm_smp_run, &c, 0, &res);
        hy_fault_report("sampler: every filter and penalty, prompt + 48 draws", &res);
    }
    for (i = 0; i < n; i++)
        fm_golden(&models[i]);
    return hy_t_done();
}
