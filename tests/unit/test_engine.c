/*
 * test_engine.c - the coordinator's engine in-process: a private segment,
 * the engine thread, and this thread submitting through the worker-side
 * ring API.  Checks batch invariance (16 mixed requests together == each
 * alone), prefix hits (dense and hybrid: same tokens and logprobs as
 * without, and the expected number of hit tokens over a 5-turn
 * conversation, an exact repeat of whole blocks, and a shared prefix
 * branching with new suffixes), prompts under one block, preemption under a tiny page
 * budget (same outputs), cancellation, sampling by the backend
 * (hy_backend_i.sample, given here by the GPU sampler's host reference),
 * grammar-constrained requests (the text matches, "stop" at the grammar's
 * end, batch invariance among other requests, never the device sampler, a
 * corrupt spec refused, counted by the source, the in-process source
 * alike), an engine that dies mid-request (the next one resumes its
 * requests exactly; a restart storm fails them; the page table emptied,
 * EOWNERDEAD recovered), and the page-table accounting after every scenario.  Tiny random
 * models from tests/golden/tiny/.
 */
#include "backend/layout.h"
#include "engine/engine.h"
#include "engine/local.h"
#include "engine/runner.h"
#include "grammar/grammar_cache.h"
#include "engine/scheduler.h"
#include "kv/plan.h"
#include "backend/cuda/sample.h"
#include "ipc/ring.h"
#include "server/metrics.h"
#include "test.h"
#include "golden.h"

#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define HY_E_MAXGEN 64
#define HY_E_NREQ 16

typedef struct {
    int32_t tok[HY_E_MAXGEN];
    float lp[HY_E_MAXGEN];
    int32_t n, n_cached, finish;
} hy_e_out_t;

typedef struct {
    hy_model_t *m;
    hy_backend_t *be;
    hy_shm_t *shm;
    hy_engine_t *e;
    hy_engine_opts_t o;
    int32_t force_pages; /* > 0: a segment with this many pages instead */
    int32_t force_ring;  /* > 0: rings this short (the engine must wait for readers) */
    bool polled;         /* no engine thread: the test steps it (hy_engine_poll) */
} hy_e_env_t;

static int hy_e_inst;

static void hy_e_opts(hy_engine_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->max_batch_tokens = 64;
    o->max_seqs = 16;
    o->n_ctx = 160;
    o->page_tokens = 16;
    o->kv_type = HY_DTYPE_F32;
    o->checkpoint_interval = 32;
    o->n_request_slots = 24;
}

static int hy_e_up(hy_e_env_t *v, const hy_engine_opts_t *o, char *err)
{
    hy_pt_params_t pp;
    hy_shm_params_t sp;
    hy_req_source_t src;
    char inst[64];
    int rc;

    v->o = *o;
    snprintf(inst, sizeof inst, "test-engine-%ld-%d", (long)getpid(), hy_e_inst++);
    if ((rc = hy_engine_pt_params(v->m, v->be, o, &pp, err)) != HY_OK)
        return rc;
    hy_shm_params_for(&sp, &pp, o->n_request_slots, hy_engine_n_ctx(v->m, o));
    if (v->force_pages > 0)
        sp.n_pages = v->force_pages;
    if (v->force_ring > 0)
        sp.ring_capacity = v->force_ring;
    if ((rc = hy_shm_create(&v->shm, inst, &sp, err)) != HY_OK)
        return rc;
    hy_ring_source(v->shm, &src);
    if ((rc = hy_engine_create(&v->e, v->m, v->be, hy_shm_pt(v->shm), &src, o, err)) != HY_OK ||
        (!v->polled && (rc = hy_engine_start(v->e, err)) != HY_OK)) {
        hy_engine_free(v->e);
        hy_shm_close(v->shm);
        v->e = NULL;
        v->shm = NULL;
    }
    return rc;
}

/* Stops the engine and checks that everything went back: no used page,
 * state slot or checkpoint, and hy_pt_check's invariants. */
static void hy_e_down(hy_e_env_t *v, const char *what)
{
    char err[HY_ERR_LEN];
    hy_pt_counts_t c;
    int rc;

    if (v->e == NULL)
        return;
    hy_engine_stop(v->e);
    rc = hy_pt_check(hy_shm_pt(v->shm), err);
    hy_pt_counts(hy_shm_pt(v->shm), &c);
    HY_T_OK(rc == HY_OK && c.pages_used == 0 && c.swa_used == 0 && c.state_used == 0 &&
                c.ckpt_used == 0,
            "%s: accounting (%s; pages used %d free %d cached %d, sliding used %d free %d "
            "cached %d, states %d, ckpts used %d)", what, rc == HY_OK ? "ok" : err, c.pages_used,
            c.pages_free, c.pages_cached, c.swa_used, c.swa_free, c.swa_cached, c.state_used,
            c.ckpt_used);
    hy_engine_free(v->e);
    hy_shm_close(v->shm);
    v->e = NULL;
    v->shm = NULL;
}

static void hy_e_prompt(int32_t *p, int32_t n, uint64_t seed, int32_t n_vocab)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
    int32_t i;

    for (i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (int32_t)(x % (uint64_t)n_vocab);
    }
}

/* sampling: NULL = greedy with 2 logprobs */
static int hy_e_submit_s(hy_e_env_t *v, const int32_t *p, int32_t n, int32_t max_tokens,
                         const hy_sampling_t *sampling, hy_req_handle_t *h, char *err)
{
    hy_req_params_t rp;
    int rc;

    memset(&rp, 0, sizeof rp);
    hy_sampling_default(&rp.sampling);
    rp.sampling.temperature = 0;
    rp.sampling.n_logprobs = 2;
    if (sampling != NULL)
        rp.sampling = *sampling;
    rp.max_tokens = max_tokens;
    rp.flags = HY_REQ_F_IGNORE_EOS;
    rc = hy_req_submit(v->shm, &rp, p, n, h, err);
    hy_shm_engine_kick(v->shm);
    return rc;
}

static int hy_e_submit(hy_e_env_t *v, const int32_t *p, int32_t n, int32_t max_tokens,
                       hy_req_handle_t *h, char *err)
{
    return hy_e_submit_s(v, p, n, max_tokens, NULL, h, err);
}

/* Reads one request to its end (30 s at most). */
static int hy_e_collect(hy_e_env_t *v, hy_req_handle_t h, hy_e_out_t *out, char *err)
{
    hy_ring_tok_t buf[16];
    hy_req_status_t st;
    int k, n, i;

    memset(out, 0, sizeof *out);
    for (k = 0; k < 3000; k++) {
        n = hy_req_read(v->shm, h, buf, 16, 10, &st, err);
        if (n < 0)
            return n;
        for (i = 0; i < n && out->n < HY_E_MAXGEN; i++, out->n++) {
            out->tok[out->n] = buf[i].token;
            out->lp[out->n] = buf[i].logprob;
        }
        if (st.done) {
            out->n_cached = st.n_cached;
            out->finish = st.finish_reason;
            hy_req_release(v->shm, h, err);
            return st.finish_reason == HY_FINISH_ERROR ? hy_err(err, HY_EIO, "%s", st.error_msg)
                                                       : HY_OK;
        }
    }
    return hy_err(err, HY_EIO, "request did not finish in 30 s");
}

static int hy_e_run1(hy_e_env_t *v, const int32_t *p, int32_t n, int32_t max_tokens,
                     hy_e_out_t *out, char *err)
{
    hy_req_handle_t h;
    int rc;

    if ((rc = hy_e_submit(v, p, n, max_tokens, &h, err)) != HY_OK)
        return rc;
    return hy_e_collect(v, h, out, err);
}

/* Same tokens and logprobs within tol; returns the worst logprob gap or
 * INFINITY on a token mismatch. */
static double hy_e_diff(const hy_e_out_t *a, const hy_e_out_t *b)
{
    double worst = 0;
    int i;

    if (a->n != b->n)
        return INFINITY;
    for (i = 0; i < a->n; i++) {
        if (a->tok[i] != b->tok[i])
            return INFINITY;
        worst = fmax(worst, fabs((double)a->lp[i] - b->lp[i]));
    }
    return worst;
}

static const int32_t hy_e_lens[HY_E_NREQ] = {1, 70, 5, 16, 33, 2, 47, 17, 64, 9, 31, 100, 3, 48, 12, 80};

static int hy_e_submit_g(hy_e_env_t *v, const int32_t *p, int32_t n, int32_t max_tokens,
                         uint64_t seed, const char *spec, size_t spec_len, hy_req_handle_t *h,
                         char *err);

/* ---- sampling by the backend ------------------------------------------------ */

/* What the stand-in device sampler saw and answered, in call order. */
static struct {
    int calls, rows, bad_params;
    int downloads;                /* of n_vocab-multiple sizes: logits */
    bool fail;                    /* answer every call with an error */
    int32_t n_vocab;
    int n_tok;
    int32_t tok[4 * HY_E_MAXGEN]; /* tokens of rows with temperature > 0 */
} hy_e_dev;

/* hy_backend_i.sample for the CPU backend's host buffers, through the GPU
 * sampler's own host reference: the engine's wiring is what is tested. */
static int hy_e_dev_sample(hy_backend_t *be, const float *logits, int32_t n_rows,
                           int32_t n_vocab, const hy_sample_params_t *p,
                           hy_sample_result_t *res, char *err)
{
    int32_t r;
    int rc;

    (void)be;
    hy_e_dev.calls++;
    if (hy_e_dev.fail)
        return hy_err(err, HY_EIO, "stand-in device sampler: failing on purpose");
    for (r = 0; r < n_rows; r++) {
        hy_e_dev.rows++;
        if (hy_sample_params_check(&p[r], err) != HY_OK)
            hy_e_dev.bad_params++;
        if ((rc = hy_sample_ref(logits + (size_t)r * (size_t)n_vocab, n_vocab, &p[r], &res[r],
                                err)) != HY_OK)
            return rc;
        if (p[r].temperature > 0 && hy_e_dev.n_tok < (int)(sizeof hy_e_dev.tok / sizeof *hy_e_dev.tok))
            hy_e_dev.tok[hy_e_dev.n_tok++] = res[r].token;
    }
    return HY_OK;
}

static void (*hy_e_host_download)(hy_backend_t *be, float *dst, const float *src, size_t n);

static void hy_e_dev_download(hy_backend_t *be, float *dst, const float *src, size_t n)
{
    if (hy_e_dev.n_vocab > 0 && n > 0 && n % (size_t)hy_e_dev.n_vocab == 0)
        hy_e_dev.downloads++;
    hy_e_host_download(be, dst, src, n);
}

static int hy_e_run_s(hy_e_env_t *v, const int32_t *p, int32_t n, int32_t max_tokens,
                      const hy_sampling_t *sp, hy_e_out_t *out, char *err)
{
    hy_req_handle_t h;
    int rc;

    if ((rc = hy_e_submit_s(v, p, n, max_tokens, sp, &h, err)) != HY_OK)
        return rc;
    return hy_e_collect(v, h, out, err);
}

/* HY_REQ_F_NO_LOGPROBS: the engine skips the log-softmax, never the draw.
 * A seeded top-k/top-p request and a greedy one give the same tokens with
 * the flag as without; with it every token reports logprob 0 and no
 * alternatives, without it real (negative) logprobs. */
static void hy_e_nologprobs(hy_e_env_t *v, const char *name)
{
    hy_engine_opts_t o;
    hy_sampling_t sp;
    int32_t prompt[24];
    char err[HY_ERR_LEN];
    int rc = HY_OK, same = 1, zero = 1, real = 1;

    hy_e_prompt(prompt, 24, 91, v->m->n_vocab);
    hy_e_opts(&o);
    if ((rc = hy_e_up(v, &o, err)) != HY_OK) {
        HY_T_OK(0, "%s: engine for the no-logprobs flag (%s)", name, err);
        return;
    }
    hy_sampling_default(&sp);
    sp.temperature = 0.9f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.seed = 1234;
    sp.n_logprobs = 3;
    for (int greedy = 0; greedy < 2 && rc == HY_OK; greedy++) {
        hy_ring_tok_t got[2][16];
        int32_t n[2] = {0, 0};

        sp.temperature = greedy ? 0.0f : 0.9f;
        for (int f = 0; f < 2 && rc == HY_OK; f++) {
            hy_req_params_t rp;
            hy_req_handle_t h;
            hy_req_status_t st;

            memset(&rp, 0, sizeof rp);
            rp.sampling = sp;
            rp.max_tokens = 12;
            rp.flags = HY_REQ_F_IGNORE_EOS | (f ? HY_REQ_F_NO_LOGPROBS : 0);
            if ((rc = hy_req_submit(v->shm, &rp, prompt, 24, &h, err)) != HY_OK)
                break;
            hy_shm_engine_kick(v->shm);
            for (int k = 0; k < 3000 && rc == HY_OK; k++) {
                int r = hy_req_read(v->shm, h, got[f] + n[f], 16 - n[f], 10, &st, err);
                if (r < 0) {
                    rc = r;
                    break;
                }
                n[f] += r;
                if (st.done)
                    break;
            }
            if (rc == HY_OK)
                rc = hy_req_release(v->shm, h, err);
        }
        same &= n[0] == 12 && n[1] == 12;
        for (int32_t i = 0; i < n[0] && i < n[1]; i++) {
            same &= got[0][i].token == got[1][i].token;
            real &= got[0][i].logprob < 0.0f && got[0][i].n_top == 3;
            zero &= got[1][i].logprob == 0.0f && got[1][i].n_top == 0;
        }
    }
    HY_T_OK(rc == HY_OK && same && zero && real,
            "%s: HY_REQ_F_NO_LOGPROBS: same 12 tokens seeded and greedy, logprob 0 and no "
            "alternatives with it, real ones without (%s)", name,
            rc != HY_OK ? err : !same ? "tokens differ" : !zero ? "logprobs with the flag"
                                                                : !real ? "none without" : "ok");
    hy_e_down(v, name);
}

/* A backend with its own sampler: greedy rows give the host's tokens and
 * logprobs, sampled rows stream exactly the backend's draws (seeded, so a
 * repeat is identical), and requests with penalties or logit_bias never
 * reach it. */
static void hy_e_devsample(hy_e_env_t *v, const char *name)
{
    const struct hy_backend_i *host_i = v->be->i;
    struct hy_backend_i dev_i = *host_i;
    hy_engine_opts_t o;
    hy_sampling_t sp;
    hy_e_out_t host, dev, s1, s2, pen;
    int32_t prompt[20];
    char err[HY_ERR_LEN];
    int rc, i, same;

    memset(&s1, 0, sizeof s1);
    memset(&s2, 0, sizeof s2);
    memset(&pen, 0, sizeof pen);
    hy_e_prompt(prompt, 20, 77, v->m->n_vocab);
    hy_e_opts(&o);
    rc = hy_e_up(v, &o, err);
    if (rc == HY_OK)
        rc = hy_e_run1(v, prompt, 20, 12, &host, err);
    hy_e_down(v, name);
    HY_T_OK(rc == HY_OK, "%s: host-sampled run (%s)", name, rc == HY_OK ? "ok" : err);

    dev_i.sample = hy_e_dev_sample;
    hy_e_host_download = host_i->download;
    dev_i.download = hy_e_dev_download;
    v->be->i = &dev_i;
    memset(&hy_e_dev, 0, sizeof hy_e_dev);
    hy_e_dev.n_vocab = v->m->n_vocab;
    rc = hy_e_up(v, &o, err);
    if (rc == HY_OK)
        rc = hy_e_run1(v, prompt, 20, 12, &dev, err);
    HY_T_OK(rc == HY_OK && hy_e_dev.calls >= 12 && hy_e_dev.bad_params == 0 &&
                hy_e_diff(&host, &dev) < 1e-5 && hy_e_dev.downloads == 0,
            "%s: greedy through the backend's sampler = host, logits never downloaded (%d calls, "
            "%d bad params, %d downloads, gap %g)",
            name, hy_e_dev.calls, hy_e_dev.bad_params, hy_e_dev.downloads,
            rc == HY_OK ? hy_e_diff(&host, &dev) : -1.0);

    hy_sampling_default(&sp);
    sp.temperature = 0.9f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.min_p = 0.02f;
    sp.seed = 12345;
    sp.n_logprobs = 3;
    memset(&hy_e_dev, 0, sizeof hy_e_dev);
    if (rc == HY_OK)
        rc = hy_e_run_s(v, prompt, 20, 16, &sp, &s1, err);
    same = rc == HY_OK && hy_e_dev.n_tok == s1.n;
    for (i = 0; same && i < s1.n; i++)
        same = hy_e_dev.tok[i] == s1.tok[i];
    HY_T_OK(same && hy_e_dev.bad_params == 0,
            "%s: sampled tokens are the backend's draws (%d streamed, %d drawn; %s)", name, s1.n,
            hy_e_dev.n_tok, rc == HY_OK ? "ok" : err);
    if (rc == HY_OK)
        rc = hy_e_run_s(v, prompt, 20, 16, &sp, &s2, err);
    HY_T_OK(rc == HY_OK && hy_e_diff(&s1, &s2) == 0, "%s: same seed, same tokens on the device path",
            name);

    sp.presence_penalty = 0.5f;
    memset(&hy_e_dev, 0, sizeof hy_e_dev);
    hy_e_dev.n_vocab = v->m->n_vocab;
    if (rc == HY_OK)
        rc = hy_e_run_s(v, prompt, 20, 8, &sp, &pen, err);
    HY_T_OK(rc == HY_OK && pen.n == 8 && hy_e_dev.calls == 0 && hy_e_dev.downloads >= 8,
            "%s: a request with penalties is sampled on the host (%d backend calls, %d logit "
            "downloads; %s)", name, hy_e_dev.calls, hy_e_dev.downloads, rc == HY_OK ? "ok" : err);
    /* a grammar needs the host's mask: never the backend's sampler */
    memset(&hy_e_dev, 0, sizeof hy_e_dev);
    hy_e_dev.n_vocab = v->m->n_vocab;
    if (rc == HY_OK) {
        hy_req_handle_t h;

        if ((rc = hy_e_submit_g(v, prompt, 20, 8, 5, NULL, 0, &h, err)) == HY_OK)
            rc = hy_e_collect(v, h, &pen, err);
    }
    HY_T_OK(rc == HY_OK && pen.n > 0 && hy_e_dev.calls == 0 && hy_e_dev.downloads >= pen.n,
            "%s: a constrained request is sampled on the host (%d backend calls, %d logit "
            "downloads; %s)", name, hy_e_dev.calls, hy_e_dev.downloads, rc == HY_OK ? "ok" : err);
    hy_e_down(v, name);

    /* a failing device sampler: every row falls back to the host, whose
     * logits are fetched after the fact */
    memset(&hy_e_dev, 0, sizeof hy_e_dev);
    hy_e_dev.n_vocab = v->m->n_vocab;
    hy_e_dev.fail = true;
    rc = hy_e_up(v, &o, err);
    if (rc == HY_OK)
        rc = hy_e_run1(v, prompt, 20, 12, &dev, err);
    HY_T_OK(rc == HY_OK && hy_e_dev.calls >= 12 && hy_e_dev.downloads >= 12 &&
                hy_e_diff(&host, &dev) < 1e-5,
            "%s: a failing backend sampler falls back to the host (%d calls, %d downloads; %s)",
            name, hy_e_dev.calls, hy_e_dev.downloads, rc == HY_OK ? "ok" : err);
    hy_e_down(v, name);
    v->be->i = host_i;
}

static void hy_e_local(hy_e_env_t *v, const char *name, const hy_e_out_t *alone);

/* 16 mixed-length requests alone, then all at once in a fresh engine. */
static void hy_e_batch(hy_e_env_t *v, const char *name)
{
    char err[HY_ERR_LEN] = "";
    int32_t p[128];
    hy_e_out_t alone[HY_E_NREQ], tog[HY_E_NREQ];
    hy_req_handle_t h[HY_E_NREQ];
    double worst = 0;
    int i, rc = HY_OK;

    hy_e_opts(&v->o);
    if ((rc = hy_e_up(v, &v->o, err)) != HY_OK)
        goto out;
    for (i = 0; i < HY_E_NREQ && rc == HY_OK; i++) {
        hy_e_prompt(p, hy_e_lens[i], (uint64_t)i + 1, v->m->n_vocab);
        rc = hy_e_run1(v, p, hy_e_lens[i], 6 + i % 5, &alone[i], err);
    }
    hy_e_down(v, name);
    if (rc != HY_OK || (rc = hy_e_up(v, &v->o, err)) != HY_OK)
        goto out;
    for (i = 0; i < HY_E_NREQ && rc == HY_OK; i++) {
        hy_e_prompt(p, hy_e_lens[i], (uint64_t)i + 1, v->m->n_vocab);
        rc = hy_e_submit(v, p, hy_e_lens[i], 6 + i % 5, &h[i], err);
    }
    for (i = 0; i < HY_E_NREQ && rc == HY_OK; i++)
        rc = hy_e_collect(v, h[i], &tog[i], err);
    for (i = 0; i < HY_E_NREQ && rc == HY_OK; i++)
        worst = fmax(worst, alone[i].n == 6 + i % 5 ? hy_e_diff(&alone[i], &tog[i]) : INFINITY);
    hy_e_down(v, name);
out:
    HY_T_OK(rc == HY_OK && worst < 1e-3,
            "%s: 16 mixed requests together == each alone (worst logprob gap %.2g; %s)", name,
            worst, rc == HY_OK ? "ok" : err);
    if (rc == HY_OK)
        hy_e_local(v, name, alone);
}

/* ---- the in-process request source (engine/local.h) ------------------------------ */

typedef struct {
    hy_e_out_t out[HY_E_NREQ];
} hy_e_local_t;

static void hy_e_on_token(void *user, int32_t id, const hy_ring_tok_t *t)
{
    hy_e_out_t *o = &((hy_e_local_t *)user)->out[id];

    if (o->n < HY_E_MAXGEN) {
        o->tok[o->n] = t->token;
        o->lp[o->n++] = t->logprob;
    }
}

/* The 16 requests of hy_e_batch at once through the local source, the
 * engine stepped by this thread: the outputs of the shared slots, and
 * every page back in the private table at the end. */
static void hy_e_local(hy_e_env_t *v, const char *name, const hy_e_out_t *alone)
{
    char err[HY_ERR_LEN] = "";
    hy_local_engine_t le;
    hy_e_local_t got;
    hy_req_params_t rp;
    int32_t p[128], id[HY_E_NREQ];
    double worst = 0;
    int i, rc, done = 0, steps = 0;

    memset(&got, 0, sizeof got);
    memset(&rp, 0, sizeof rp);
    hy_sampling_default(&rp.sampling);
    rp.sampling.temperature = 0;
    rp.sampling.n_logprobs = 2;
    rp.flags = HY_REQ_F_IGNORE_EOS;
    rc = hy_local_engine_open(&le, v->m, v->be, &v->o, hy_e_on_token, &got, err);
    for (i = 0; i < HY_E_NREQ && rc == HY_OK; i++) {
        hy_e_prompt(p, hy_e_lens[i], (uint64_t)i + 1, v->m->n_vocab);
        rp.max_tokens = 6 + i % 5;
        rc = hy_local_submit(le.local, &rp, p, hy_e_lens[i], &id[i], err);
    }
    while (rc == HY_OK && done < HY_E_NREQ && steps++ < 10000) {
        hy_engine_poll(le.engine);
        for (i = 0, done = 0; i < HY_E_NREQ; i++)
            done += hy_local_status(le.local, id[i])->done;
    }
    for (i = 0; i < HY_E_NREQ && rc == HY_OK; i++) {
        const hy_local_status_t *st = hy_local_status(le.local, id[i]);

        got.out[id[i]].n_cached = st->n_cached;
        worst = fmax(worst, st->finish_reason == HY_FINISH_LENGTH && st->n_generated == 6 + i % 5
                                ? hy_e_diff(&alone[i], &got.out[id[i]])
                                : INFINITY);
        hy_local_release(le.local, id[i]);
    }
    if (rc == HY_OK && done < HY_E_NREQ)
        rc = hy_err(err, HY_EIO, "%d of %d requests done after 10000 steps", done, HY_E_NREQ);
    if (le.engine != NULL && hy_local_engine_close(&le, rc == HY_OK ? err : NULL) != HY_OK &&
        rc == HY_OK)
        rc = HY_EFORMAT;
    HY_T_OK(rc == HY_OK && worst < 1e-3,
            "%s: the same 16 requests through the in-process source == the shared slots "
            "(worst logprob gap %.2g), every page back (%s)", name, worst,
            rc == HY_OK ? "ok" : err);
}

/* What the in-process source refuses or reports, and cancellation. */
static void hy_e_local_errors(hy_e_env_t *v, const char *name)
{
    char err[HY_ERR_LEN] = "", e1[HY_ERR_LEN] = "", e2[HY_ERR_LEN] = "";
    hy_local_engine_t le;
    hy_engine_opts_t o;
    hy_req_params_t rp;
    const hy_local_status_t *st;
    int32_t p[200], id[3], bad;
    int rc, rc1, rc2;

    hy_e_opts(&o);
    o.n_request_slots = 2;
    memset(&rp, 0, sizeof rp);
    hy_sampling_default(&rp.sampling);
    rp.max_tokens = 4;
    hy_e_prompt(p, 200, 5, v->m->n_vocab);
    if ((rc = hy_local_engine_open(&le, v->m, v->be, &o, NULL, NULL, err)) != HY_OK) {
        HY_T_OK(0, "%s: local engine (%s)", name, err);
        return;
    }
    rp.max_tokens = 0;
    rc1 = hy_local_submit(le.local, &rp, p, 10, &bad, e1);
    rp.max_tokens = 4;
    rp.sampling.top_p = 0;
    rc2 = hy_local_submit(le.local, &rp, p, 10, &bad, e2);
    rp.sampling.top_p = 1;
    HY_T_OK(rc1 == HY_ERANGE && strstr(e1, "max_tokens = 0") && rc2 == HY_ERANGE &&
                strstr(e2, "top_p = 0"),
            "%s: local submit refuses bad parameters (%s | %s)", name, e1, e2);
    rc = hy_local_submit(le.local, &rp, p, 10, &id[0], err);
    if (rc == HY_OK)
        rc = hy_local_submit(le.local, &rp, p, 170, &id[1], err);
    rc1 = hy_local_submit(le.local, &rp, p, 10, &id[2], e1);
    HY_T_OK(rc == HY_OK && rc1 == HY_EFULL && strstr(e1, "2 local request slots"),
            "%s: a full local source says so (%s)", name, e1);
    hy_local_cancel(le.local, id[0]);
    st = hy_local_status(le.local, id[0]);
    HY_T_OK(st != NULL && st->done && st->state == HY_REQ_CANCELLED,
            "%s: a queued local request is cancelled at once", name);
    rc = hy_local_engine_wait(&le, id[1], err);
    st = hy_local_status(le.local, id[1]);
    HY_T_OK(rc == HY_OK && st->finish_reason == HY_FINISH_ERROR &&
                strstr(st->error_msg, "prompt of 170 tokens"),
            "%s: a prompt over the context ends with the engine's error (%s)", name,
            rc == HY_OK ? st->error_msg : err);
    hy_local_release(le.local, id[0]);
    hy_local_release(le.local, id[1]);
    rc = hy_local_engine_close(&le, err);
    HY_T_OK(rc == HY_OK, "%s: local engine closes with every page back (%s)", name,
            rc == HY_OK ? "ok" : err);
}

/* Prefix hits: a repeated prompt, a 5-turn conversation, a short prompt. */
/* The same prompt twice (8 tokens each; the second may hit the prefix
 * cache): *gap is hy_e_diff of the two. */
static int hy_e_run_twice(hy_e_env_t *v, const int32_t *p, int32_t n, hy_e_out_t *a,
                          hy_e_out_t *b, double *gap, char *err)
{
    int rc = hy_e_run1(v, p, n, 8, a, err);

    if (rc == HY_OK)
        rc = hy_e_run1(v, p, n, 8, b, err);
    if (rc == HY_OK)
        *gap = hy_e_diff(a, b);
    return rc;
}

static void hy_e_prefix(hy_e_env_t *v, const char *name)
{
    char err[HY_ERR_LEN] = "";
    int32_t conv[160], n_conv, pt = 16, turn, want_hit[5] = {0}, got_hit[5] = {0};
    hy_e_out_t a = {0}, b = {0}, c = {0}, turns[5], cold = {0};
    hy_e_env_t w = *v;
    double gap = INFINITY, tgap = 0;
    int rc;
    bool hits_ok = true;

    memset(turns, 0, sizeof turns);
    hy_e_opts(&v->o);
    if ((rc = hy_e_up(v, &v->o, err)) != HY_OK)
        goto out;
    hy_e_prompt(conv, 50, 99, v->m->n_vocab);
    rc = hy_e_run_twice(v, conv, 50, &a, &b, &gap, err);
    HY_T_OK(rc == HY_OK && a.n_cached == 0 && b.n_cached == 48 && gap < 1e-4,
            "%s: repeated 50-token prompt hits 48 cached tokens, same tokens/logprobs "
            "(cached %d then %d, gap %.2g; %s)", name, a.n_cached, b.n_cached, gap,
            rc == HY_OK ? "ok" : err);
    /* prompt under one block: nothing to hit, still generates */
    hy_e_prompt(conv + 60, 5, 98, v->m->n_vocab);
    if (rc == HY_OK)
        rc = hy_e_run1(v, conv + 60, 5, 4, &c, err);
    HY_T_OK(rc == HY_OK && c.n == 4 && c.n_cached == 0, "%s: 5-token prompt (%d tokens; %s)",
            name, c.n, rc == HY_OK ? "ok" : err);
    hy_e_down(v, name);

    /* 5 turns: each prompt = the previous prompt + its reply + 9 new tokens */
    if (rc != HY_OK || (rc = hy_e_up(v, &v->o, err)) != HY_OK)
        goto out;
    n_conv = 20;
    hy_e_prompt(conv, n_conv, 7, v->m->n_vocab);
    for (turn = 0; turn < 5 && rc == HY_OK; turn++) {
        rc = hy_e_run1(v, conv, n_conv, 6, &turns[turn], err);
        if (rc != HY_OK)
            break;
        got_hit[turn] = turns[turn].n_cached;
        hits_ok &= got_hit[turn] == want_hit[turn];
        /* the engine fed prompt + reply - 1 positions: every full block of them */
        if (turn < 4)
            want_hit[turn + 1] = (n_conv + turns[turn].n - 1) / pt * pt;
        memcpy(conv + n_conv, turns[turn].tok, sizeof(int32_t) * (size_t)turns[turn].n);
        n_conv += turns[turn].n;
        hy_e_prompt(conv + n_conv, 9, 100 + (uint64_t)turn, v->m->n_vocab);
        n_conv += 9;
    }
    hy_e_down(v, name);
    HY_T_OK(rc == HY_OK && hits_ok,
            "%s: 5-turn conversation hits every previous full block (hits %d %d %d %d %d, "
            "want 0 %d %d %d %d; %s)", name, got_hit[0], got_hit[1], got_hit[2], got_hit[3],
            got_hit[4], want_hit[1], want_hit[2], want_hit[3], want_hit[4],
            rc == HY_OK ? "ok" : err);
    /* the last turn with the cache against a cold engine */
    if (rc != HY_OK || (rc = hy_e_up(&w, &v->o, err)) != HY_OK)
        goto out;
    n_conv -= 9 + turns[4].n;
    rc = hy_e_run1(&w, conv, n_conv, 6, &cold, err);
    hy_e_down(&w, name);
    if (rc == HY_OK)
        tgap = hy_e_diff(&cold, &turns[4]);
    HY_T_OK(rc == HY_OK && cold.n_cached == 0 && tgap < 1e-4,
            "%s: turn 5 with a %d-token hit == cold (gap %.2g; %s)", name, turns[4].n_cached, tgap,
            rc == HY_OK ? "ok" : err);
    return;
out:
    HY_T_OK(0, "%s: prefix scenarios (%s)", name, err);
}

/* Block-sparse attention from position 32 (16-token blocks, the best one
 * plus the first and the last): a repeated prompt whose pages come from
 * the prefix cache averages its block keys again from the attached pages
 * and generates what the cold run generated, with the same logprobs. */
static void hy_e_prefix_sparse(hy_e_env_t *v, const char *name)
{
    char err[HY_ERR_LEN] = "";
    int32_t p[100];
    hy_e_out_t a = {0}, b = {0};
    double gap = INFINITY;
    int rc;

    hy_e_opts(&v->o);
    v->o.sparse = (hy_kv_sparse_t){1, 1, 1, 1, 32, 0, 0};
    if ((rc = hy_e_up(v, &v->o, err)) == HY_OK) {
        hy_e_prompt(p, 100, 41, v->m->n_vocab);
        rc = hy_e_run_twice(v, p, 100, &a, &b, &gap, err);
        hy_e_down(v, name);
    }
    HY_T_OK(rc == HY_OK && a.n_cached == 0 && b.n_cached == 96 && gap < 1e-4,
            "%s: sparse, a repeated 100-token prompt hits 96 cached tokens, same tokens and "
            "logprobs (cached %d then %d, gap %.2g; %s)", name, a.n_cached, b.n_cached, gap,
            rc == HY_OK ? "ok" : err);
}

/* A hot window ([cache] hot_tokens_per_seq) of 5 16-token blocks, sparse
 * from 32 (the best block, the first and the last): a 600-token prompt and
 * 8 generated tokens run in a pool of 2 sequences' windows (24 pages,
 * fewer than the 38 of one such context), the older blocks in the out
 * arena, and generate what the all-hot engine does, with the same
 * logprobs; a window that a step would outrun is refused. */
static void hy_e_hot(hy_e_env_t *v, const char *name)
{
    char err[HY_ERR_LEN] = "", err2[HY_ERR_LEN] = "", dir[] = "/tmp/hy-e-spill-XXXXXX";
    const hy_kv_sparse_t sp = {1, 1, 1, 1, 32, 0, 0};
    int32_t *p = malloc(sizeof(int32_t) * 600), hot = 0, pages[3] = {0, 0, 0};
    hy_e_out_t a = {0}, b = {0}, c = {0};
    hy_outstore_counts_t oc = {0};
    hy_pt_params_t pp;
    double gap = INFINITY, gap2 = INFINITY;
    int rc = HY_OK;

    for (int k = 0; k < 3 && rc == HY_OK && p; k++) {
        hy_e_opts(&v->o);
        v->o.n_ctx = 1024;
        v->o.max_seqs = 2;
        v->o.sparse = sp;
        if (k >= 1)
            rc = hy_plan_hot_window(80, &sp, 16, v->o.max_batch_tokens, false, &v->o.hot_blocks,
                                    err);
        if (k == 2 && rc == HY_OK) {
            hy_plan_t plan;

            /* 4 pages of the arena in RAM, the rest in a spill file */
            if ((rc = hy_engine_plan(v->m, v->be, &v->o, &plan, err)) == HY_OK) {
                v->o.out_warm_bytes = 4 * plan.page_bytes;
                v->o.out_dir = mkdtemp(dir);
            }
        }
        if (rc == HY_OK && (rc = hy_engine_pt_params(v->m, v->be, &v->o, &pp, err)) == HY_OK)
            pages[k] = pp.n_pages;
        if (rc == HY_OK && (rc = hy_e_up(v, &v->o, err)) == HY_OK) {
            hy_e_prompt(p, 600, 77, v->m->n_vocab);
            rc = hy_e_run1(v, p, 600, 8, k == 2 ? &c : k ? &b : &a, err);
            if (k == 2)
                hy_engine_out_counts(v->e, &oc);
            hy_e_down(v, name);
        }
        if (k == 1)
            hot = v->o.hot_blocks;
    }
    if (rc == HY_OK) {
        gap = hy_e_diff(&a, &b);
        gap2 = hy_e_diff(&a, &c);
    }
    HY_T_OK(rc == HY_OK && hot == 5 && pages[0] == 2 * 64 && pages[1] == 2 * 12 && a.n == 8 &&
                gap == 0,
            "%s: hot window of 80 tokens: 600 + 8 tokens in a pool of %d pages (all hot: %d), "
            "the all-hot tokens and logprobs (gap %.2g; %s)", name, pages[1], pages[0], gap,
            rc == HY_OK ? "ok" : err);
    HY_T_OK(rc == HY_OK && gap2 == 0 && oc.warm == 4 && oc.spills > 0 && oc.promotions > 0 &&
                oc.used == 0,
            "%s: and with 4 of the arena's pages in RAM, the rest in a spill file: the same "
            "(gap %.2g; %llu pages written, %llu brought up; %s)", name, gap2,
            (unsigned long long)oc.spills, (unsigned long long)oc.promotions,
            rc == HY_OK ? "ok" : err);
    if (v->o.out_dir != NULL)
        rmdir(dir);
    rc = hy_plan_hot_window(64, &sp, 16, 64, false, &hot, err2);
    HY_T_OK(rc == HY_EINVAL && strstr(err2, "[cache] hot_tokens_per_seq = 64: must exceed"),
            "%s: a hot window a step would outrun refused (%s)", name, err2);
    free(p);
}

/* The value of the /metrics sample that starts with name (labels included),
 * or -1. */
static double hy_e_sample(const char *text, const char *name)
{
    size_t n = strlen(name);

    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, name, n) == 0 && l[n] == ' ')
            return strtod(l + n + 1, NULL);
    return -1;
}

/* /metrics of a model with sliding-window layers, with two prompts cached:
 * the sliding group's pages by state add up to its pool, and its memory by
 * kind is those pages times the group's page bytes (the full group's
 * pages are 0 bytes for lfm2-swa, whose attention layers all slide). */
static void hy_e_metrics(hy_e_env_t *v, const char *name)
{
    char err[HY_ERR_LEN] = "", *text = NULL;
    hy_metrics_info_t info = {"test", "tiny", "v", "0", 0};
    uint64_t pb[HY_KV_GROUPS];
    int32_t p[50];
    hy_e_out_t a = {0};
    double u = -1, f = -1, c = -1, t = -1, mb = -1, mu = -1, mc = -1, fb = -1, ft = -1;
    size_t len;
    int rc;

    hy_e_opts(&v->o);
    if ((rc = hy_e_up(v, &v->o, err)) != HY_OK)
        goto out;
    hy_e_prompt(p, 50, 61, v->m->n_vocab);
    rc = hy_e_run1(v, p, 50, 4, &a, err);
    hy_e_prompt(p, 50, 62, v->m->n_vocab);
    if (rc == HY_OK)
        rc = hy_e_run1(v, p, 50, 4, &a, err);
    hy_engine_page_bytes(v->e, pb);
    hy_metrics_set_memory(v->shm, 1, pb[HY_KV_FULL], pb[HY_KV_SWA], 0);
    if (rc == HY_OK && (rc = hy_metrics_render(v->shm, &info, &text, &len)) == HY_OK) {
        u = hy_e_sample(text, "hyserve_kv_swa_pages{state=\"used\"}");
        f = hy_e_sample(text, "hyserve_kv_swa_pages{state=\"free\"}");
        c = hy_e_sample(text, "hyserve_kv_swa_pages{state=\"cached\"}");
        t = hy_e_sample(text, "hyserve_kv_swa_pages_total");
        mb = hy_e_sample(text, "hyserve_memory_bytes{kind=\"kv_swa_pages\",tier=\"hot\"}");
        mu = hy_e_sample(text, "hyserve_memory_used_bytes{kind=\"kv_swa_pages\",tier=\"hot\"}");
        mc = hy_e_sample(text, "hyserve_memory_cached_bytes{kind=\"kv_swa_pages\",tier=\"hot\"}");
        fb = hy_e_sample(text, "hyserve_memory_bytes{kind=\"kv_pages\",tier=\"hot\"}");
        ft = hy_e_sample(text, "hyserve_kv_pages_total");
    }
    free(text);
    hy_e_down(v, name);
out:
    HY_T_OK(rc == HY_OK && t > 0 && u == 0 && c > 0 && u + f + c == t && pb[HY_KV_SWA] > 0 &&
                mb == t * (double)pb[HY_KV_SWA] && mu == 0 && mc == c * (double)pb[HY_KV_SWA] &&
                ft > 0 && fb == ft * (double)pb[HY_KV_FULL],
            "%s: /metrics: sliding pages used %g + free %g + cached %g = total %g, memory by kind "
            "kv_swa_pages %g B (cached %g B) next to kv_pages %g B (%s)", name, u, f, c, t, mb, mc,
            fb, rc == HY_OK ? "ok" : err);
}

/* Where a hit resumes, with only prompt-end checkpoints (interval 0):
 * an exact repeat of a 64-token prompt (whole blocks: the match must leave
 * the last token, so it resumes at 48 and needs a checkpoint there), and a
 * 90-token shared prefix (not a multiple of 16) with new 11-token suffixes.
 * The first request sharing the prefix finds pages up to 80 but, on a
 * hybrid, no state there; it snapshots its state at that branch, so the
 * next one resumes at 80 too.  Every hit's output == a cold engine's. */
static void hy_e_resume(hy_e_env_t *v, const char *name)
{
    char err[HY_ERR_LEN] = "";
    int32_t p[128], want_b = v->m->n_rec_layers > 0 ? 0 : 80;
    hy_e_out_t a = {0}, a2 = {0}, x = {0}, b = {0}, c = {0}, cold_b = {0}, cold_c = {0};
    hy_e_env_t w = *v;
    double gap[3] = {INFINITY, INFINITY, INFINITY};
    int rc, k;

    hy_e_opts(&v->o);
    v->o.checkpoint_interval = 0;
    if ((rc = hy_e_up(v, &v->o, err)) != HY_OK)
        goto out;
    hy_e_prompt(p, 64, 501, v->m->n_vocab);
    rc = hy_e_run1(v, p, 64, 4, &a, err);
    if (rc == HY_OK)
        rc = hy_e_run1(v, p, 64, 4, &a2, err);
    if (rc == HY_OK)
        gap[0] = hy_e_diff(&a, &a2);
    HY_T_OK(rc == HY_OK && a.n_cached == 0 && a2.n_cached == 48 && gap[0] < 1e-4,
            "%s: exact repeat of a 64-token prompt resumes at 48 (cached %d then %d, gap %.2g; %s)",
            name, a.n_cached, a2.n_cached, gap[0], rc == HY_OK ? "ok" : err);
    /* prefix p[0..90) + suffix: x (cold), then b and c with new suffixes */
    hy_e_prompt(p, 90, 502, v->m->n_vocab);
    hy_e_prompt(p + 90, 11, 503, v->m->n_vocab);
    if (rc == HY_OK)
        rc = hy_e_run1(v, p, 101, 4, &x, err);
    hy_e_prompt(p + 90, 11, 504, v->m->n_vocab);
    if (rc == HY_OK)
        rc = hy_e_run1(v, p, 101, 4, &b, err);
    hy_e_prompt(p + 90, 11, 505, v->m->n_vocab);
    if (rc == HY_OK)
        rc = hy_e_run1(v, p, 101, 4, &c, err);
    hy_e_down(v, name);
    /* the same two prompts, each in a cold engine */
    for (k = 0; k < 2 && rc == HY_OK; k++) {
        hy_e_prompt(p + 90, 11, 504 + (uint64_t)k, v->m->n_vocab);
        if ((rc = hy_e_up(&w, &v->o, err)) != HY_OK)
            break;
        rc = hy_e_run1(&w, p, 101, 4, k == 0 ? &cold_b : &cold_c, err);
        hy_e_down(&w, name);
    }
    if (rc == HY_OK) {
        gap[1] = hy_e_diff(&cold_b, &b);
        gap[2] = hy_e_diff(&cold_c, &c);
    }
    HY_T_OK(rc == HY_OK && x.n_cached == 0 && b.n_cached == want_b && c.n_cached == 80 &&
                cold_b.n_cached == 0 && cold_c.n_cached == 0 && gap[1] < 1e-4 && gap[2] < 1e-4,
            "%s: 90-token shared prefix + new suffixes: hits %d, %d (want %d, 80), outputs == cold "
            "(gaps %.2g %.2g; %s)", name, b.n_cached, c.n_cached, want_b, gap[1], gap[2],
            rc == HY_OK ? "ok" : err);
    return;
out:
    HY_T_OK(0, "%s: resume points (%s)", name, err);
}

/* ---- the engine process dies (server/engine_proc.h) ---------------------- */

#define HY_E_CRASH_N 4
#define HY_E_CRASH_GEN 40

/* Request i of the crash tests: even ones greedy, odd ones temperature 0.9
 * with a seed and top_k, all with 2 logprobs; the last one constrained by
 * a grammar (its matcher must be where it was, too). */
static int hy_e_crash_submit(hy_e_env_t *v, int i, hy_req_handle_t *h, char *err)
{
    int32_t p[64];
    hy_sampling_t sp;

    hy_e_prompt(p, 20 + 7 * i, 900 + (uint64_t)i, v->m->n_vocab);
    if (i == HY_E_CRASH_N - 1)
        return hy_e_submit_g(v, p, 20 + 7 * i, HY_E_CRASH_GEN, 77, NULL, 0, h, err);
    hy_sampling_default(&sp);
    sp.temperature = i % 2 ? 0.9f : 0.0f;
    sp.top_k = 40;
    sp.seed = 100 + (uint64_t)i;
    sp.n_logprobs = 2;
    return hy_e_submit_s(v, p, 20 + 7 * i, HY_E_CRASH_GEN, &sp, h, err);
}

/* Appends what the ring holds to out; *st says the state once done. */
static int hy_e_drain(hy_e_env_t *v, hy_req_handle_t h, hy_e_out_t *out, int timeout_ms,
                      hy_req_status_t *st, char *err)
{
    hy_ring_tok_t buf[16];
    int n, i;

    if ((n = hy_req_read(v->shm, h, buf, 16, timeout_ms, st, err)) < 0)
        return n;
    for (i = 0; i < n && out->n < HY_E_MAXGEN; i++, out->n++) {
        out->tok[out->n] = buf[i].token;
        out->lp[out->n] = buf[i].logprob;
    }
    return n;
}

/* The engine "dies": freed with nothing finished, as a killed process
 * leaves its page-table references and running slots behind. */
static void hy_e_kill(hy_e_env_t *v)
{
    hy_engine_free(v->e);
    v->e = NULL;
}

/* Which of the re-queued requests have a token past their resume point. */
static uint32_t hy_e_resumed_mask(hy_e_env_t *v, const hy_req_handle_t *h)
{
    uint32_t mask = 0;

    for (int i = 0; i < HY_E_CRASH_N; i++) {
        const hy_req_slot_t *s = hy_req_slot(v->shm, (int32_t)h[i].idx);

        mask |= (atomic_load(&s->head) > (uint64_t)s->n_resumed) << i;
    }
    return mask;
}

/* The new engine, stepped by hand: the re-queued contexts are recomputed
 * in doubling batches, oldest first (engine.c e->rs).  Streams get their
 * next token oldest first (after each step, those that have it are the
 * oldest ones), and the oldest alone first; one batch of all would give
 * every stream its token in the same step, after all four contexts. */
static void hy_e_resume_order(hy_e_env_t *v, const hy_req_handle_t *h, const char *name)
{
    const uint32_t all = (1u << HY_E_CRASH_N) - 1;
    uint32_t mask = 0, first = 0;
    bool in_order = true;
    int k;

    for (k = 0; k < 40 && mask != all; k++) {
        hy_engine_poll(v->e);
        mask = hy_e_resumed_mask(v, h);
        in_order &= (mask & (mask + 1)) == 0; /* 0, 1, 11, 111, ... */
        if (first == 0)
            first = mask;
    }
    HY_T_OK(mask == all && in_order && first == 0x1,
            "%s: the resumed contexts are recomputed oldest first in doubling batches: the "
            "oldest stream resumes alone first, then the others in order (first %#x, all by "
            "step %d, in order %d)", name, first, k, in_order);
}

/* Requests under way when the engine dies resume on a new engine with
 * the same tokens and logprobs as undisturbed (greedy and seeded
 * sampling), whatever their reader had read; the page table is empty in
 * between and nothing stays held after. */
static void hy_e_crash(hy_e_env_t *v, const char *name)
{
    char err[HY_ERR_LEN] = "";
    hy_e_out_t ref[HY_E_CRASH_N], got[HY_E_CRASH_N];
    hy_req_handle_t h[HY_E_CRASH_N];
    hy_req_status_t st;
    hy_req_source_t src;
    hy_pt_counts_t dead, c;
    double worst = 0;
    int rc = HY_OK, i, k, requeued = -1, failed = -1, prc = HY_OK, pushed = 0;

    memset(got, 0, sizeof got);
    hy_e_opts(&v->o);
    if ((rc = hy_e_up(v, &v->o, err)) != HY_OK)
        goto out;
    for (i = 0; i < HY_E_CRASH_N && rc == HY_OK; i++)
        rc = hy_e_crash_submit(v, i, &h[i], err);
    for (i = 0; i < HY_E_CRASH_N && rc == HY_OK; i++)
        rc = hy_e_collect(v, h[i], &ref[i], err);
    hy_e_down(v, name);
    if (rc != HY_OK)
        goto out;
    /* the same requests on an engine this thread steps, then kills */
    v->polled = true;
    rc = hy_e_up(v, &v->o, err);
    v->polled = false;
    if (rc != HY_OK)
        goto out;
    for (i = 0; i < HY_E_CRASH_N && rc == HY_OK; i++)
        rc = hy_e_crash_submit(v, i, &h[i], err);
    for (k = 0; k < 7 && rc == HY_OK; k++) {
        hy_engine_poll(v->e);
        if (k == 4) /* the reader is behind by some tokens, not all */
            for (i = 0; i < HY_E_CRASH_N; i++)
                hy_e_drain(v, h[i], &got[i], 0, &st, err);
    }
    for (i = 0; i < HY_E_CRASH_N; i++)
        pushed += hy_req_slot(v->shm, (int32_t)h[i].idx)->n_generated > 0;
    hy_e_kill(v);
    hy_pt_counts(hy_shm_pt(v->shm), &dead);
    if (rc == HY_OK)
        rc = hy_shm_engine_lost(v->shm, NULL, &requeued, &failed);
    prc = hy_pt_check(hy_shm_pt(v->shm), err);
    hy_pt_counts(hy_shm_pt(v->shm), &c);
    HY_T_OK(rc == HY_OK && prc == HY_OK && dead.pages_used > 0 && requeued == HY_E_CRASH_N &&
                failed == 0 && pushed == HY_E_CRASH_N && c.pages_used == 0 &&
                c.pages_cached == 0 && c.pages_free == c.pages_total && c.state_used == 0 &&
                c.swa_free == c.swa_total && c.ckpt_used == 0 && c.ckpt_cached == 0,
            "%s: engine dies with %d pages (%d sliding) held: all free after hy_shm_engine_lost "
            "(used %d cached %d free %d of %d, sliding %d of %d free, states %d), %d requests "
            "re-queued (%s)", name, dead.pages_used, dead.swa_used, c.pages_used, c.pages_cached,
            c.pages_free, c.pages_total, c.swa_free, c.swa_total, c.state_used, requeued,
            prc == HY_OK ? "ok" : err);
    hy_ring_source(v->shm, &src);
    if (rc == HY_OK &&
        (rc = hy_engine_create(&v->e, v->m, v->be, hy_shm_pt(v->shm), &src, &v->o, err)) ==
            HY_OK) {
        hy_e_resume_order(v, h, name);
        if ((rc = hy_engine_start(v->e, err)) != HY_OK)
            hy_e_kill(v);
    }
    for (i = 0; i < HY_E_CRASH_N && rc == HY_OK; i++) {
        for (k = 0; k < 3000; k++) {
            int n = hy_e_drain(v, h[i], &got[i], 10, &st, err);

            if (n < 0 || st.done)
                break;
        }
        got[i].finish = st.finish_reason;
        hy_req_release(v->shm, h[i], err);
        worst = HY_MAX(worst, hy_e_diff(&ref[i], &got[i]));
    }
    HY_T_OK(rc == HY_OK && worst < 1e-4 && got[0].finish == HY_FINISH_LENGTH &&
                got[1].n == HY_E_CRASH_GEN,
            "%s: the new engine finishes them (one with a grammar, %d tokens): %d tokens each, "
            "same tokens and logprobs as undisturbed (worst gap %.2g; %s)", name,
            got[HY_E_CRASH_N - 1].n, got[0].n, worst, rc == HY_OK ? "ok" : err);
    hy_e_down(v, name);
    return;
out:
    HY_T_OK(0, "%s: engine crash (%s)", name, err);
}

/* A restart storm: the requests the dead engine ran and those still queued
 * end as ERROR with HY_EUNAVAILABLE and the message, one its worker
 * cancelled ends CANCELLED; the dead engine held the segment mutex
 * (EOWNERDEAD, recovered).  Every slot frees once its worker lets go. */
static void hy_e_storm(hy_e_env_t *v, const char *name)
{
    char err[HY_ERR_LEN] = "";
    hy_req_handle_t h[HY_E_CRASH_N];
    hy_req_status_t st[HY_E_CRASH_N];
    hy_e_out_t sink;
    hy_pt_counts_t c0, c;
    int rc, i, k, requeued = -1, failed = -1, n_err = 0, status = -1;
    pid_t pid;

    hy_e_opts(&v->o);
    v->polled = true;
    rc = hy_e_up(v, &v->o, err);
    v->polled = false;
    if (rc != HY_OK) {
        HY_T_OK(0, "%s: storm (%s)", name, err);
        return;
    }
    for (i = 0; i < HY_E_CRASH_N - 1 && rc == HY_OK; i++)
        rc = hy_e_crash_submit(v, i, &h[i], err);
    for (k = 0; k < 6; k++)
        hy_engine_poll(v->e);
    if (rc == HY_OK) /* never taken */
        rc = hy_e_crash_submit(v, HY_E_CRASH_N - 1, &h[HY_E_CRASH_N - 1], err);
    if (rc == HY_OK)
        rc = hy_req_cancel(v->shm, h[1], err);
    hy_e_kill(v);
    hy_pt_counts(hy_shm_pt(v->shm), &c0);
    /* it died inside a critical section */
    if ((pid = fork()) == 0)
        _exit(hy_shm_lock(v->shm) == HY_OK ? 0 : 1);
    waitpid(pid, &status, 0);
    if (rc == HY_OK)
        rc = hy_shm_engine_lost(v->shm, "restart storm", &requeued, &failed);
    for (i = 0; i < HY_E_CRASH_N; i++) {
        memset(&sink, 0, sizeof sink);
        memset(&st[i], 0, sizeof st[i]);
        for (k = 0; k < 100 && !st[i].done; k++)
            if (hy_e_drain(v, h[i], &sink, 0, &st[i], err) < 0)
                break;
        n_err += st[i].done && st[i].state == HY_REQ_ERROR &&
                 st[i].error_code == HY_EUNAVAILABLE && strcmp(st[i].error_msg, "restart storm") == 0;
        hy_req_release(v->shm, h[i], err);
    }
    hy_pt_counts(hy_shm_pt(v->shm), &c);
    HY_T_OK(rc == HY_OK && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
                c.recoveries == c0.recoveries + 1 && requeued == 0 && failed == 3 &&
                n_err == 3 && st[1].state == HY_REQ_CANCELLED && c.pages_used == 0 &&
                atomic_load(&hy_shm_stats(v->shm)->slots_used) == 0 &&
                hy_pt_check(hy_shm_pt(v->shm), err) == HY_OK,
            "%s: storm: the mutex's dead owner recovered (%llu), 2 running + 1 queued end as "
            "503-errors (%d, failed %d), the cancelled one CANCELLED, no slot or page held",
            name, (unsigned long long)c.recoveries, n_err, failed);
    hy_shm_close(v->shm);
    v->shm = NULL;
}

/* A pool far too small for 8 concurrent requests (each needs 4 of the 12
 * pages): preemption, same outputs. */
static void hy_e_preempt(hy_e_env_t *v, const char *name)
{
    char err[HY_ERR_LEN] = "";
    int32_t p[64];
    hy_e_out_t alone[8], tog[8];
    hy_req_handle_t h[8];
    hy_plan_t plan;
    hy_engine_opts_t o;
    uint64_t pre = 0;
    double worst = 0;
    int i, rc;

    hy_e_opts(&o);
    o.max_seqs = 8;
    o.n_ctx = 96;
    if ((rc = hy_plan_make(&plan, v->m, v->be, o.n_ctx, 1, o.page_tokens, o.kv_type, err)) != HY_OK)
        goto out;
    /* 12 pages (each request needs 5).  A dense model gets them from the
     * memory budget (12 of each group with sliding-window layers); a hybrid
     * one's budget also pays for state slots and checkpoints, so its
     * segment is cut down to 12 pages directly. */
    o.memory_bytes = 12 * (plan.page_bytes + plan.swa_page_bytes);
    if (v->m->n_rec_layers > 0) {
        o.memory_bytes = 0;
        v->force_pages = 12;
    }
    if ((rc = hy_e_up(v, &o, err)) != HY_OK)
        goto out;
    for (i = 0; i < 8 && rc == HY_OK; i++) {
        hy_e_prompt(p, 40 + i, 500 + (uint64_t)i, v->m->n_vocab);
        rc = hy_e_run1(v, p, 40 + i, 20, &alone[i], err);
    }
    hy_e_down(v, name);
    if (rc != HY_OK || (rc = hy_e_up(v, &o, err)) != HY_OK)
        goto out;
    for (i = 0; i < 8 && rc == HY_OK; i++) {
        hy_e_prompt(p, 40 + i, 500 + (uint64_t)i, v->m->n_vocab);
        rc = hy_e_submit(v, p, 40 + i, 20, &h[i], err);
    }
    for (i = 0; i < 8 && rc == HY_OK; i++)
        rc = hy_e_collect(v, h[i], &tog[i], err);
    for (i = 0; i < 8 && rc == HY_OK; i++)
        worst = fmax(worst, alone[i].n == 20 ? hy_e_diff(&alone[i], &tog[i]) : INFINITY);
    if (v->shm != NULL)
        pre = atomic_load(&hy_shm_stats(v->shm)->preemptions);
    hy_e_down(v, name);
out:
    v->force_pages = 0;
    HY_T_OK(rc == HY_OK && pre > 0 && worst < 1e-3,
            "%s: %llu preemptions under a 12-page pool, same outputs (gap %.2g; %s)", name,
            (unsigned long long)pre, worst, rc == HY_OK ? "ok" : err);
}

/* Cancel running and queued requests: everything comes back at once. */
static void hy_e_cancel(hy_e_env_t *v, const char *name)
{
    char err[HY_ERR_LEN] = "";
    int32_t p[64];
    hy_req_handle_t h[6];
    hy_ring_tok_t t[4];
    hy_req_status_t st;
    hy_engine_opts_t o;
    hy_e_out_t rest;
    int i, k, rc, got = 0, done = 0;

    hy_e_opts(&o);
    o.max_seqs = 4;
    /* 4-token rings: unread requests stall in the engine instead of
     * finishing, so the cancellations below always meet live requests */
    v->force_ring = 4;
    rc = hy_e_up(v, &o, err);
    v->force_ring = 0;
    if (rc != HY_OK)
        goto out;
    for (i = 0; i < 6 && rc == HY_OK; i++) {
        hy_e_prompt(p, 30, 900 + (uint64_t)i, v->m->n_vocab);
        rc = hy_e_submit(v, p, 30, 60, &h[i], err);
    }
    /* wait for a first token of request 0, then cancel all but request 1 */
    for (k = 0; k < 3000 && rc == HY_OK && got == 0; k++)
        got = hy_req_read(v->shm, h[0], t, 1, 10, &st, err);
    for (i = 0; i < 6 && rc == HY_OK; i++)
        if (i != 1)
            rc = hy_req_cancel(v->shm, h[i], err);
    hy_shm_engine_kick(v->shm);
    for (i = 0; i < 6 && rc == HY_OK; i++) {
        if (i == 1)
            continue;
        for (k = 0; k < 3000; k++) {
            if (hy_req_read(v->shm, h[i], t, 4, 10, &st, err) < 0 || st.done)
                break;
        }
        done += st.done && st.finish_reason == HY_FINISH_CANCELLED;
        hy_req_release(v->shm, h[i], err);
    }
    if (rc == HY_OK)
        rc = hy_e_collect(v, h[1], &rest, err);
    HY_T_OK(rc == HY_OK && got > 0 && done == 5 && rest.n == 60,
            "%s: 5 cancelled (%d), the other finishes (%d tokens; %s)", name, done,
            rc == HY_OK ? rest.n : 0, rc == HY_OK ? "ok" : err);
    hy_e_down(v, name);
    return;
out:
    HY_T_OK(0, "%s: cancellation (%s)", name, err);
}

/* ---- grammars ------------------------------------------------------------------- */

static const char k_e_grammar[] = "root ::= \"{\" [a-z]{1,6} \":\" [0-9]{1,3} ( \",\" [a-z]{1,6} "
                                  "\":\" [0-9]{1,3} ){0,2} \"}\"";

/* A constrained, sampled request (EOS allowed); spec overrides the packed
 * grammar when not NULL. */
static int hy_e_submit_g(hy_e_env_t *v, const int32_t *p, int32_t n, int32_t max_tokens,
                         uint64_t seed, const char *spec, size_t spec_len, hy_req_handle_t *h,
                         char *err)
{
    hy_req_params_t rp;
    char *packed = NULL;
    size_t len = 0;
    int rc;

    memset(&rp, 0, sizeof rp);
    hy_sampling_default(&rp.sampling);
    rp.sampling.seed = seed;
    rp.sampling.n_logprobs = 2;
    rp.max_tokens = max_tokens;
    if (spec == NULL && (rc = hy_grammar_spec_pack(k_e_grammar, sizeof k_e_grammar - 1, NULL,
                                                   &packed, &len, err)) != HY_OK)
        return rc;
    rc = hy_req_submit_grammar(v->shm, &rp, p, n, spec ? spec : packed, spec ? spec_len : len,
                               h, err);
    free(packed);
    hy_shm_engine_kick(v->shm);
    return rc;
}

/* Whether the tokens of out spell a sentence of the grammar (whole = the
 * complete sentence, else a prefix of one). */
static bool hy_e_matches(const hy_e_out_t *out, const hy_tok_t *tok, bool whole)
{
    char err[HY_ERR_LEN], *text = NULL;
    size_t len = 0;
    hy_grammar_t *g = NULL;
    hy_gmatch_t *m = NULL;
    bool ok;

    ok = hy_tok_decode(tok, out->tok, (size_t)out->n, false, &text, &len, err) == HY_OK &&
         hy_grammar_compile(&g, k_e_grammar, sizeof k_e_grammar - 1, NULL, err) == HY_OK &&
         hy_gmatch_create(&m, g, NULL, err) == HY_OK &&
         hy_gmatch_accept_bytes(m, text, len, err) == HY_OK &&
         (!whole || hy_gmatch_done(m));
    if (!ok)
        printf("# %s: '%.*s' (%s)\n", whole ? "not a sentence" : "not a prefix", (int)len,
               text ? text : "", err);
    hy_gmatch_free(m);
    hy_grammar_unref(g);
    free(text);
    return ok;
}

/* The in-process source carries the grammar too: the same constrained
 * request gives the same tokens as through the shared slots, the grammar's
 * counts reach the source (none kept by the engine), and a spec larger
 * than any grammar packs to is refused at submit. */
static void hy_e_grammar_local(hy_e_env_t *v, const char *name, const hy_engine_opts_t *o,
                               const int32_t *p, const hy_e_out_t *slots)
{
    char err[HY_ERR_LEN] = "", *packed = NULL, *huge = NULL;
    hy_local_engine_t le = {0};
    hy_e_local_t got;
    hy_req_params_t rp;
    hy_grammar_counts_t gc = {0};
    const hy_local_status_t *st = NULL;
    size_t len = 0;
    int32_t id = -1, bad;
    int rc, rc_big = HY_OK;

    memset(&got, 0, sizeof got);
    memset(&rp, 0, sizeof rp);
    hy_sampling_default(&rp.sampling);
    rp.sampling.seed = 100;
    rp.sampling.n_logprobs = 2;
    rp.max_tokens = 60;
    rc = hy_grammar_spec_pack(k_e_grammar, sizeof k_e_grammar - 1, NULL, &packed, &len, err);
    if (rc == HY_OK)
        rc = hy_local_engine_open(&le, v->m, v->be, o, hy_e_on_token, &got, err);
    if (rc == HY_OK &&
        (rc = hy_local_submit_grammar(le.local, &rp, p, 24, packed, len, &id, err)) == HY_OK &&
        (rc = hy_local_engine_wait(&le, id, err)) == HY_OK) {
        st = hy_local_status(le.local, id);
        got.out[id].finish = st->finish_reason;
        hy_local_grammar_counts(le.local, &gc);
        hy_local_release(le.local, id);
    }
    HY_T_OK(rc == HY_OK && st != NULL && got.out[id].finish == HY_FINISH_STOP &&
                hy_e_diff(slots, &got.out[id]) < 1e-4 && gc.requests == 1 && gc.compiles == 1 &&
                gc.masks >= (uint64_t)slots->n - 1,
            "%s: a constrained request through the in-process source == the shared slots, "
            "counted there (requests %llu, compiles %llu, masks %llu; %s)", name,
            (unsigned long long)gc.requests, (unsigned long long)gc.compiles,
            (unsigned long long)gc.masks, rc == HY_OK ? "ok" : err);
    if (rc == HY_OK && (huge = calloc(1, (size_t)HY_GRAMMAR_MAX_SPEC + 1)) != NULL)
        rc_big = hy_local_submit_grammar(le.local, &rp, p, 24, huge,
                                         (size_t)HY_GRAMMAR_MAX_SPEC + 1, &bad, err);
    HY_T_OK(huge != NULL && rc_big == HY_ERANGE && strstr(err, "grammar spec of ") &&
                strstr(err, "bytes: at most"),
            "%s: the in-process source refuses an oversized grammar spec: %s", name, err);
    if (le.engine != NULL && hy_local_engine_close(&le, err) != HY_OK)
        HY_T_OK(0, "%s: local engine closes with every page back (%s)", name, err);
    free(huge);
    free(packed);
}

static void hy_e_grammar(hy_e_env_t *v, const char *name)
{
    char err[HY_ERR_LEN] = "";
    hy_tok_t *tok = NULL;
    hy_engine_opts_t o;
    hy_req_handle_t h[16];
    hy_e_out_t alone[4], mixed[16], cut;
    int32_t p[24];
    int rc, i, good = 0, same = 0;

    hy_e_opts(&o);
    rc = hy_tok_load(&tok, v->m->gguf, err);
    if (rc == HY_OK)
        rc = hy_e_up(v, &o, err);
    hy_e_prompt(p, 24, 4242, v->m->n_vocab);
    for (i = 0; i < 4 && rc == HY_OK; i++) {
        if ((rc = hy_e_submit_g(v, p, 24, 60, 100 + (uint64_t)i, NULL, 0, &h[0], err)) == HY_OK)
            rc = hy_e_collect(v, h[0], &alone[i], err);
        good += rc == HY_OK && alone[i].finish == HY_FINISH_STOP && hy_e_matches(&alone[i], tok, true);
    }
    HY_T_OK(rc == HY_OK && good == 4,
            "%s: 4 sampled constrained requests spell the grammar and end with 'stop' (%s)", name,
            rc == HY_OK ? "ok" : err);
    if (rc == HY_OK) {
        const hy_stats_t *st = hy_shm_stats(v->shm);

        HY_T_OK(atomic_load(&st->grammar_requests) == 4 &&
                    atomic_load(&st->grammar_compiles) == 1 &&
                    atomic_load(&st->grammar_cache_hits) == 3 && atomic_load(&st->grammar_masks) > 0,
                "%s: the shared slots' stats count 4 constrained requests, 1 compile, 3 cache "
                "hits, %llu masks", name, (unsigned long long)atomic_load(&st->grammar_masks));
        hy_e_grammar_local(v, name, &o, p, &alone[0]);
    }
    /* the same 4 among 12 unconstrained ones, all at once */
    for (i = 0; i < 16 && rc == HY_OK; i++) {
        if (i % 4 == 0)
            rc = hy_e_submit_g(v, p, 24, 60, 100 + (uint64_t)i / 4, NULL, 0, &h[i], err);
        else
            rc = hy_e_submit(v, p, 24, 20, &h[i], err);
    }
    for (i = 0; i < 16 && rc == HY_OK; i++)
        rc = hy_e_collect(v, h[i], &mixed[i], err);
    for (i = 0; i < 4 && rc == HY_OK; i++)
        same += hy_e_diff(&alone[i], &mixed[4 * i]) < 1e-4;
    HY_T_OK(rc == HY_OK && same == 4,
            "%s: constrained output is the same alone and among 12 free requests (%d of 4; %s)",
            name, same, rc == HY_OK ? "ok" : err);
    /* cut by max_tokens: a prefix, finish 'length' */
    if (rc == HY_OK && (rc = hy_e_submit_g(v, p, 24, 3, 7, NULL, 0, &h[0], err)) == HY_OK)
        rc = hy_e_collect(v, h[0], &cut, err);
    HY_T_OK(rc == HY_OK && cut.n == 3 && cut.finish == HY_FINISH_LENGTH &&
                hy_e_matches(&cut, tok, false),
            "%s: cut at max_tokens: an incomplete prefix, finish 'length' (%s)", name,
            rc == HY_OK ? "ok" : err);
    /* a corrupt spec is the request's error, not the engine's */
    if (rc == HY_OK && (rc = hy_e_submit_g(v, p, 24, 8, 1, "HYG1\0\0\0\0\5\0\0\0ab", 14,
                                           &h[0], err)) == HY_OK) {
        rc = hy_e_collect(v, h[0], &cut, err);
        HY_T_OK(rc == HY_EIO && strstr(err, "grammar spec: the text length does not match"),
                "%s: a corrupt grammar spec fails that request: %s", name, err);
        rc = HY_OK;
    }
    /* the grammar arena: prompt + spec must fit the slot */
    if (rc == HY_OK) {
        int32_t big[150];
        char spec[400];

        memset(spec, 0, sizeof spec);
        hy_e_prompt(big, 150, 1, v->m->n_vocab);
        HY_T_OK(hy_e_submit_g(v, big, 150, 4, 1, spec, sizeof spec, &h[0], err) == HY_ERANGE &&
                    strstr(err, "does not fit next to a 150-token prompt (40 bytes left)"),
                "%s: a grammar that does not fit next to the prompt is refused: %s", name, err);
    }
    hy_e_down(v, name);
    hy_tok_free(tok);
}

/* Segment sizing: bad options and budgets are refused with a message; a
 * hybrid budget too small for max_seqs state slots gets fewer slots. */
/* Block-sparse attention's compressed keys live beside each full page in
 * hot memory, and every sequence that may run holds its context's block
 * keys: the same budget holds fewer pages, exactly as many as fit with
 * their keys after max_seqs sequences' block keys. */
static void hy_e_sizing_sparse(hy_e_env_t *v, const char *name)
{
    char err[HY_ERR_LEN] = "";
    hy_engine_opts_t o;
    hy_pt_params_t dense, sparse;
    hy_plan_t plan;
    hy_kv_layout_t one = {.n_head_kv = v->m->n_head_kv, .head_dim_k = v->m->head_dim,
                          .sparse = {.block_pages = 4, .topk = 2}};
    uint64_t keys = hy_kv_sparse_key_bytes(&one) * (uint64_t)v->m->n_kv_layers, budget, seqk;
    int rc[2];

    hy_e_opts(&o);
    seqk = (uint64_t)((o.n_ctx + 4 * o.page_tokens - 1) / (4 * o.page_tokens)) * keys;
    hy_plan_make(&plan, v->m, v->be, o.n_ctx, 1, o.page_tokens, o.kv_type, err);
    budget = 100 * plan.page_bytes;
    o.memory_bytes = budget;
    rc[0] = hy_engine_pt_params(v->m, v->be, &o, &dense, err);
    o.sparse = one.sparse;
    rc[1] = hy_engine_pt_params(v->m, v->be, &o, &sparse, err);
    HY_T_OK(rc[0] == HY_OK && rc[1] == HY_OK && dense.n_pages == 100 && keys > 0 &&
                (uint64_t)sparse.n_pages ==
                    (budget - (uint64_t)o.max_seqs * seqk) / (plan.page_bytes + keys),
            "%s: a budget of 100 pages holds %d pages with their sparse keys (%llu + %llu "
            "bytes each) after %d sequences' block keys (%llu bytes each)", name,
            rc[1] == HY_OK ? sparse.n_pages : -1, (unsigned long long)plan.page_bytes,
            (unsigned long long)keys, o.max_seqs, (unsigned long long)seqk);
}

static void hy_e_sizing(hy_e_env_t *v, const char *name)
{
    char err[HY_ERR_LEN] = "", err2[HY_ERR_LEN] = "";
    hy_engine_opts_t o;
    hy_pt_params_t sp;
    hy_plan_t plan;
    int rc[3];

    hy_e_opts(&o);
    o.max_seqs = 0;
    rc[0] = hy_engine_pt_params(v->m, v->be, &o, &sp, err);
    hy_e_opts(&o);
    o.memory_bytes = 1000;
    rc[1] = hy_engine_pt_params(v->m, v->be, &o, &sp, err2);
    HY_T_OK(rc[0] == HY_EINVAL && rc[1] == HY_ERANGE && strstr(err2, "budget") != NULL,
            "%s: bad options / a tiny budget are refused (%s | %s)", name, err, err2);
    if (v->m->n_rec_layers == 0 && v->m->n_swa_layers == 0)
        hy_e_sizing_sparse(v, name);
    if (v->m->n_rec_layers == 0)
        return;
    hy_e_opts(&o);
    hy_plan_make(&plan, v->m, v->be, o.n_ctx, 1, o.page_tokens, o.kv_type, err);
    o.memory_bytes = 16 * plan.slot_bytes + 4 * 10 * plan.page_bytes;
    rc[2] = hy_engine_pt_params(v->m, v->be, &o, &sp, err);
    HY_T_OK(rc[2] == HY_OK && sp.n_state_slots >= 1 && sp.n_state_slots < o.max_seqs &&
                sp.n_pages >= 10,
            "%s: a small budget sizes %d state slots (< max_seqs %d), %d checkpoints, %d pages (%s)",
            name, sp.n_state_slots, o.max_seqs, sp.n_checkpoint_slots, sp.n_pages,
            rc[2] == HY_OK ? "ok" : err);
}

/* The pure scheduling policy: chunk boundaries and preemption victims. */
static void hy_e_sched(void)
{
    hy_sched_seq_t a, b, c, *v[3] = {&a, &b, &c};
    int32_t got[4];

    memset(&a, 0, sizeof a);
    a.n_prompt = a.n_total = 50;
    got[0] = hy_sched_chunk(&a, 64, 16, 32, true);
    a.kv.n_tokens = 32;
    got[1] = hy_sched_chunk(&a, 64, 16, 32, true);
    a.kv.n_tokens = 48;
    got[2] = hy_sched_chunk(&a, 64, 16, 32, true);
    a.kv.n_tokens = 0;
    got[3] = hy_sched_chunk(&a, 64, 16, 32, false);
    HY_T_OK(got[0] == 32 && got[1] == 16 && got[2] == 2 && got[3] == 50,
            "hybrid chunks end at the interval and the prompt's last block (%d %d %d, dense %d)",
            got[0], got[1], got[2], got[3]);
    /* 64 tokens: the prompt boundary is 48 (a repeat must still compute the
     * last token); a branch at 80 of a 100-token prompt splits the chunk */
    a.n_prompt = a.n_total = 64;
    got[0] = hy_sched_chunk(&a, 64, 16, 0, true);
    a.n_prompt = a.n_total = 100;
    a.branch = 80;
    got[1] = hy_sched_chunk(&a, 128, 16, 0, true);
    a.kv.n_tokens = 80;
    got[2] = hy_sched_chunk(&a, 128, 16, 0, true);
    a.kv.n_tokens = 0;
    a.branch = 0;
    got[3] = hy_sched_chunk(&a, 128, 16, 0, true);
    HY_T_OK(got[0] == 48 && got[1] == 80 && got[2] == 16 && got[3] == 96,
            "hybrid chunks end before a whole-block prompt's last block and at a branch "
            "(%d %d %d %d)", got[0], got[1], got[2], got[3]);
    a.n_prompt = a.n_total = 50;
    b = c = a;
    a.status = b.status = c.status = HY_SEQ_RUNNING;
    a.order = 1, b.order = 2, c.order = 3;
    c.chunk = 5; /* already in this step: protected */
    HY_T_OK(hy_sched_victim(v, 3, &a) == &b && hy_sched_victim(v, 3, &b) == NULL,
            "the victim is the most junior unscheduled sequence, never a senior one");
    c.chunk = 0;
    c.priority = -1; /* a better priority outranks age */
    HY_T_OK(hy_sched_victim(v, 3, &c) == &b, "priority outranks submit order");
}

/* The runner on a given page table (as the engine runs it): page ids the
 * table does not have are refused, what a sequence lacks comes from the
 * table, a step the table cannot cover takes nothing, and the table's
 * accounting holds throughout. */
static void hy_e_runner(hy_model_t *m, hy_backend_t *be)
{
    char err[HY_ERR_LEN] = "", err2[HY_ERR_LEN] = "", perr[HY_ERR_LEN] = "ok";
    hy_pt_params_t pp = {4, 16, 0, 0, 0, 0};
    hy_pt_t *pt = NULL;
    hy_runner_t r;
    hy_runner_opts_t o;
    hy_pt_counts_t c[3];
    int32_t pages[2] = {7, 1}, tok[40] = {0};
    hy_kv_seq_t bad = {.pages = pages, .n_pages = 2, .cap = 2}, a = {0}, b = {0};
    hy_runner_item_t it[2] = {{&bad, tok, 20, false}, {&b, tok, 40, false}};
    float *logits = malloc(sizeof(float) * 2 * (size_t)m->n_vocab);
    char err3[HY_ERR_LEN] = "";
    int rc[4] = {0};

    hy_runner_opts_default(&o);
    o.n_ctx = 64;
    rc[0] = hy_pt_create(&pt, &pp, err);
    o.pt = pt;
    if (rc[0] != HY_OK || hy_runner_init(&r, m, be, &o, err) != HY_OK) {
        HY_T_OK(0, "runner on a 4-page table (%s)", err);
        hy_pt_destroy(pt);
        free(logits);
        return;
    }
    rc[0] = hy_runner_step(&r, it, 1, logits, err); /* page 7 is outside the pool */
    hy_pt_counts(pt, &c[0]);
    it[0].seq = &a;
    rc[1] = hy_runner_step(&r, it, 1, logits, err2); /* two pages from the table */
    hy_pt_counts(pt, &c[1]);
    it[0].tokens = tok + 20;
    it[0].n = 1;
    rc[2] = hy_runner_step(&r, it, 2, logits, err2); /* b needs 3 pages, 2 are free */
    hy_pt_counts(pt, &c[2]);
    /* a list rewritten below the checked count must lower it: then a
     * foreign id there is refused again */
    {
        int32_t keep = a.pages[0];
        hy_runner_item_t one = {&a, tok + 21, 1, false};

        a.pages[0] = 9;
        a.n_checked = 0;
        rc[3] = hy_runner_step(&r, &one, 1, logits, err3);
        a.pages[0] = keep;
    }
    HY_T_OK(rc[0] == HY_EINVAL && strstr(err, "page id 7 outside the pool (4)") &&
                c[0].pages_used == 0 && rc[1] == HY_OK && c[1].pages_used == 2 && a.n_pages == 2 && a.n_tokens == 20 &&
                rc[2] == HY_EFULL && strstr(err2, "sequence 1:") && c[2].pages_used == 2 &&
                a.n_tokens == 20 && b.n_pages == 0 && rc[3] == HY_EINVAL &&
                strstr(err3, "page id 9 outside the pool (4)") && a.n_tokens == 20,
            "runner on a table: foreign page refused (%s), pages taken from it (%d used), a "
            "step it cannot cover takes nothing (%s; %d used), a rewritten list checked "
            "again (%s)", err, c[1].pages_used, err2, c[2].pages_used, err3);
    hy_runner_seq_release(&r, &a);
    hy_runner_seq_release(&r, &b);
    rc[0] = hy_pt_check(pt, perr);
    hy_pt_counts(pt, &c[0]);
    HY_T_OK(rc[0] == HY_OK && c[0].pages_used == 0 && c[0].pages_free == 4,
            "runner on a table: every page back after release (%s)", perr);
    hy_runner_free(&r);
    hy_pt_destroy(pt);
    free(logits);
}

int main(void)
{
    /* One model per kind of cache the engine handles (dense KV, GDN, conv,
     * Mamba-2 with and without attention layers first), picked by name from
     * the manifest: a name it no longer lists fails. */
    static const char *const models[] = {"llama", "qwen3next", "lfm2", "granitehybrid-dense",
                                         "nemotron_h", "minimax", "gemma3", "gemma2", "lfm2-swa"};
    hy_t_golden_t golden[HY_T_GOLDEN_MAX];
    int n_golden = hy_t_golden_models(golden, HY_T_GOLDEN_MAX);
    hy_backend_opts_t bo = {.n_threads = 1};
    char err[HY_ERR_LEN];
    hy_e_env_t v;
    size_t k;

    memset(&v, 0, sizeof v);
    hy_e_sched();
    if (hy_backend_cpu_new(&v.be, &bo, err) != HY_OK) {
        HY_T_OK(0, "cpu backend (%s)", err);
        return hy_t_done();
    }
    for (k = 0; k < sizeof models / sizeof *models; k++) {
        const hy_t_golden_t *g = hy_t_golden_find(golden, n_golden, models[k]);
        int rc;

        if (g == NULL)
            continue;
        rc = hy_model_load(&v.m, hy_t_golden_path(g), v.be, err);
        HY_T_OK(rc == HY_OK, "%s loads (%s)", models[k], rc == HY_OK ? "ok" : err);
        if (rc != HY_OK)
            continue;
        if (k < 2)
            hy_e_sizing(&v, models[k]);
        if (k < 3)
            hy_e_batch(&v, models[k]);
        hy_e_prefix(&v, models[k]);
        if (k < 3) {
            hy_e_prefix_sparse(&v, models[k]);
            hy_e_hot(&v, models[k]);
        }
        hy_e_resume(&v, models[k]);
        if (k == 0 || k == 2 || k >= 6) /* qwen3next's decode is the slow one */
            hy_e_preempt(&v, models[k]);
        if (k >= 6)
            hy_e_metrics(&v, models[k]);
        if (k == 0 || k == 2 || k == 6) /* dense, a hybrid's states and checkpoints, and
                                           a sliding page group */
            hy_e_crash(&v, models[k]);
        if (k == 0) {
            hy_e_storm(&v, models[k]);
            hy_e_cancel(&v, models[k]);
            hy_e_local_errors(&v, models[k]);
            hy_e_devsample(&v, models[k]);
            hy_e_nologprobs(&v, models[k]);
            hy_e_grammar(&v, models[k]);
            hy_e_runner(v.m, v.be);
        }
        hy_model_free(v.m);
        v.m = NULL;
    }
    v.be->i->free(v.be);
    return hy_t_done();
}
