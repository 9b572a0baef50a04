/*
 * engine.c - one engine step: take, admit, build one mixed batch, run it,
 * commit full blocks to the prefix cache, checkpoint recurrent state, sample
 * and hand tokens to the request source.  Page ids, state slots and
 * checkpoint slots all come from the page table, which the runner shares:
 * the engine gives each sequence its pages before a step (prefix hits,
 * preemption), so the runner finds them covered; the runner's state arena
 * holds n_state_slots live states followed by n_checkpoint_slots snapshots,
 * copied with be->i->state_copy.  Preemption drops a sequence's pages and
 * state and recomputes them later from its tokens; its sampler (and its
 * grammar matcher) is kept, so the output is the same.  A constrained
 * request's logits are masked to what its grammar allows before sampling;
 * what that costs goes to the source (hy_req_source_i.grammar_counted).
 * A model with sliding-window layers has a second page group: the engine
 * commits its blocks to the prefix cache like the full group's, then gives
 * back what slid out of the window (runner.h).
 */
#include "engine/engine.h"
#include "common/log.h"
#include "backend/layout.h"
#include "engine/runner.h"
#include "engine/scheduler.h"
#include "grammar/grammar_cache.h"
#include "engine/tiering.h"
#include "kv/plan.h"
#include "model/tokenizer.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct hy_engine {
    hy_model_t *model;
    hy_backend_t *be;
    hy_req_source_t src;
    hy_pt_t *pt;
    const hy_tok_t *tok;   /* o.tok, or own_tok */
    hy_tok_t *own_tok;
    hy_engine_opts_t o;
    hy_pt_params_t sp;     /* the page table's numbers */
    hy_runner_t runner;
    bool hybrid;           /* the model keeps recurrent state */
    int32_t sparse_units;  /* full-attention layers x KV heads, where a token past
                            * o.sparse.min_tokens goes block-sparse (0: never) */
    int32_t swa_window;    /* the sliding page group's window (0: none) */
    int32_t ckpt_interval; /* rounded up to whole blocks; 0 = off */
    int32_t n_pool;        /* sequences held at once (running + preempted) */
    hy_sched_seq_t *pool;  /* [n_pool] */
    hy_sched_seq_t **order;/* [n_pool] scratch */
    hy_runner_item_t *items;
    hy_sched_seq_t **item_seq;
    float *logits;         /* [max_seqs][n_vocab] */
    /* the backend's own sampler (hy_backend_i.sample), when it has one */
    hy_sample_params_t *dev_p;   /* [max_seqs] */
    hy_sample_result_t *dev_r;   /* [max_seqs] */
    bool *dev_ok;                /* [max_seqs] row i was sampled by the backend */
    bool dev_failed_logged;
    /* grammar-constrained decoding: masks are computed and applied here,
     * where sampling happens, each from its own sequence's state only */
    hy_gvocab_t *gvocab;         /* token trie of the model's vocabulary */
    hy_grammar_cache_t *gcache;  /* compiled grammars, by text */
    uint64_t *gmask;             /* [(n_vocab + 63) / 64] one row's mask */
    hy_tiering_t *tiering; /* o.tiers hooked under the page table, or NULL */
    /* Requests a dead engine had started (hy_req_taken_t.resumed) whose
     * contexts are being recomputed: each client's stream stands still
     * until its own context is done.  In one batch every stream would wait
     * for all of them; they go in doubling batches instead, oldest first
     * (1, 2, 4, ... per step, hy_engine_build): the first stream resumes
     * after its own recompute, the last after about what one batch would
     * have taken.  The phase is logged with its wall and CPU time. */
    struct {
        int32_t active;          /* sequences still recomputing a resumed context */
        int32_t quota;           /* how many of them the next step may compute */
        int32_t n, tokens;       /* this phase's requests and their context tokens */
        int64_t t0_us, cpu0_us;  /* its start: CLOCK_MONOTONIC, the process's CPU time */
        bool first_logged;
    } rs;
    pthread_t thread;
    bool started;
    _Atomic int stop;
};

/* ---- sizing ------------------------------------------------------------- */

/* The KV part of a memory budget in pages of each group, in the plan's
 * proportion: per_seq full pages to per_swa sliding pages per sequence. */
static void hy_engine_split_pages(const hy_plan_t *plan, uint64_t budget, int32_t per_seq,
                                  int32_t per_swa, uint64_t *n_pages, uint64_t *n_swa)
{
    /* a full page costs its block-sparse keys too, as kv_init allocates them */
    uint64_t page = plan->page_bytes + plan->sparse_key_bytes;
    uint64_t seq_full = page * (uint64_t)per_seq;
    uint64_t seq_swa = plan->swa_page_bytes * (uint64_t)per_swa, share;

    *n_swa = 0;
    if (per_swa == 0 || seq_full + seq_swa == 0) {
        *n_pages = page > 0 ? budget / page : (uint64_t)plan->n_pages;
        return;
    }
    /* long double: budget * bytes may not fit 64 bits */
    share = (uint64_t)((long double)budget * (long double)seq_swa /
                       (long double)(seq_full + seq_swa));
    *n_swa = plan->swa_page_bytes > 0 ? share / plan->swa_page_bytes : (uint64_t)plan->n_swa_pages;
    *n_pages = page > 0 ? (budget - share) / page : (uint64_t)plan->n_pages;
}

int32_t hy_engine_n_ctx(const hy_model_t *m, const hy_engine_opts_t *o)
{
    return o->n_ctx > 0 ? o->n_ctx : (m->n_ctx_train > 0 ? m->n_ctx_train : 4096);
}

int hy_engine_plan(const hy_model_t *m, hy_backend_t *be, const hy_engine_opts_t *o,
                   hy_plan_t *plan, char *err)
{
    hy_plan_opts_t po = {hy_engine_n_ctx(m, o), o->max_seqs, o->page_tokens,
                         o->max_batch_tokens,   o->kv_type,  o->swa_full,
                         o->sparse,             o->hot_blocks,
                         o->out_warm_bytes,
                         /* a step's logit rows: the runner's, one per sequence */
                         .max_outputs = o->max_seqs};

    return hy_plan_make_opts(plan, m, be, &po, err);
}

int hy_engine_pt_params(const hy_model_t *m, hy_backend_t *be, const hy_engine_opts_t *o,
                        hy_pt_params_t *out, char *err)
{
    hy_plan_t plan;
    int32_t n_ctx = hy_engine_n_ctx(m, o), per_seq, per_swa = 0;
    uint64_t budget, state_budget, n_pages, n_swa = 0, n_state = 0, n_ckpt = 0;
    int rc;

    if (o->max_seqs < 1 || o->max_seqs > 65536)
        return hy_err(err, HY_EINVAL, "engine: max_seqs = %d: must be 1..65536", o->max_seqs);
    if (o->max_batch_tokens < 1)
        return hy_err(err, HY_EINVAL, "engine: max_batch_tokens = %d: must be >= 1",
                      o->max_batch_tokens);
    if (o->page_tokens < 1 || o->page_tokens > 256)
        return hy_err(err, HY_EINVAL, "engine: page_tokens = %d: must be 1..256", o->page_tokens);
    if (o->n_request_slots < 1)
        return hy_err(err, HY_EINVAL, "engine: %d request slots: must be >= 1", o->n_request_slots);
    if (o->checkpoint_interval < 0)
        return hy_err(err, HY_EINVAL, "engine: checkpoint_interval = %d: must be >= 0",
                      o->checkpoint_interval);
    if ((rc = hy_engine_plan(m, be, o, &plan, err)) != HY_OK)
        return rc;
    /* what one sequence holds in the pool: its context, or its hot window */
    per_seq = plan.n_pages / o->max_seqs;
    if (plan.swa_window > 0)
        per_swa = plan.n_swa_pages / o->max_seqs;
    memset(out, 0, sizeof *out);
    if (o->memory_bytes == 0) {
        n_pages = (uint64_t)plan.n_pages;
        n_swa = (uint64_t)plan.n_swa_pages;
        if (m->n_rec_layers > 0) {
            n_state = (uint64_t)o->max_seqs;
            n_ckpt = o->no_checkpoints ? 0 : 4 * (uint64_t)o->max_seqs;
        }
    } else {
        budget = o->memory_bytes;
        if (m->n_rec_layers > 0 && plan.slot_bytes > 0) {
            /* A quarter of the budget for live states and checkpoints: a
             * state slot costs as much as a whole sequence's recurrent
             * state, the KV pages grow with the context. */
            state_budget = budget / 4;
            n_state = HY_MIN((uint64_t)o->max_seqs, state_budget / plan.slot_bytes);
            if (n_state == 0)
                n_state = 1;
            if (n_state * plan.slot_bytes < state_budget && !o->no_checkpoints)
                n_ckpt = HY_MIN((state_budget - n_state * plan.slot_bytes) / plan.slot_bytes,
                                8 * (uint64_t)o->max_seqs);
            if ((n_state + n_ckpt) * plan.slot_bytes > budget)
                return hy_err(err, HY_ERANGE,
                              "engine: memory budget %llu bytes cannot hold one %llu-byte state slot",
                              (unsigned long long)budget, (unsigned long long)plan.slot_bytes);
            budget -= (n_state + n_ckpt) * plan.slot_bytes;
        }
        /* each sequence that runs holds its context's block keys */
        if (plan.sparse_seq_bytes * (uint64_t)o->max_seqs >= budget)
            return hy_err(err, HY_ERANGE,
                          "engine: memory budget %llu bytes cannot hold %d sequences' "
                          "block-sparse block keys (%llu bytes each)",
                          (unsigned long long)budget, o->max_seqs,
                          (unsigned long long)plan.sparse_seq_bytes);
        budget -= plan.sparse_seq_bytes * (uint64_t)o->max_seqs;
        hy_engine_split_pages(&plan, budget, per_seq, per_swa, &n_pages, &n_swa);
    }
    if (n_pages < (uint64_t)per_seq || n_swa < (uint64_t)per_swa)
        return hy_err(err, HY_ERANGE,
                      "engine: memory budget holds %llu KV pages and %llu sliding-window pages, "
                      "one %d-token sequence needs %d and %d", (unsigned long long)n_pages,
                      (unsigned long long)n_swa, n_ctx, per_seq, per_swa);
    if (n_pages > (uint64_t)INT32_MAX / 2)
        n_pages = INT32_MAX / 2;
    if (n_swa > (uint64_t)INT32_MAX / 2)
        n_swa = INT32_MAX / 2;
    out->n_pages = (int32_t)n_pages;
    out->n_swa_pages = (int32_t)n_swa;
    out->page_tokens = o->page_tokens;
    out->n_state_slots = (int32_t)n_state;
    out->n_checkpoint_slots = (int32_t)n_ckpt;
    return HY_OK;
}

/* ---- life cycle ------------------------------------------------------------ */

#define HY_ENGINE_GRAMMARS 32 /* compiled grammars kept */

static int hy_engine_grammar_init(hy_engine_t *e, char *err)
{
    int32_t n = HY_MAX(e->model->n_vocab, (int32_t)hy_tok_n_vocab(e->tok));
    int rc;

    if ((rc = hy_gvocab_create(&e->gvocab, e->tok, err)) != HY_OK ||
        (rc = hy_grammar_cache_create(&e->gcache, e->gvocab, HY_ENGINE_GRAMMARS, err)) != HY_OK)
        return rc;
    e->gmask = calloc((size_t)(n + 63) / 64, sizeof *e->gmask);
    return e->gmask ? HY_OK : hy_err(err, HY_ENOMEM, "out of memory");
}

void hy_engine_out_counts(const hy_engine_t *e, hy_outstore_counts_t *c)
{
    memset(c, 0, sizeof *c);
    if (e->runner.out != NULL)
        hy_outstore_counts(e->runner.out, c);
}

/* The out arena's counts into the shared stats for /metrics and
 * hyserve-ctl status (only the engine writes them). */
static void hy_engine_out_publish(hy_engine_t *e)
{
    hy_stats_t *st = e->o.stats;
    hy_outstore_counts_t c;

    if (st == NULL || e->runner.out == NULL)
        return;
    hy_outstore_counts(e->runner.out, &c);
    atomic_store(&st->out_units, c.units);
    atomic_store(&st->out_warm_slots, c.warm);
    atomic_store(&st->out_warm_used, c.warm_used);
    atomic_store(&st->out_cold_used, c.cold);
    atomic_store(&st->out_unit_bytes, e->runner.out->o.unit_bytes);
    atomic_store(&st->out_file_bytes, c.file_bytes);
    atomic_store(&st->out_promotions, c.promotions);
    atomic_store(&st->out_spills, c.spills);
    atomic_store(&st->out_read_failures, c.promote_failures);
    atomic_store(&st->out_disk_read_bytes, c.disk_read_bytes);
    atomic_store(&st->out_disk_write_bytes, c.disk_write_bytes);
}

int hy_engine_create(hy_engine_t **out, hy_model_t *m, hy_backend_t *be, hy_pt_t *pt,
                     const hy_req_source_t *src, const hy_engine_opts_t *o, char *err)
{
    hy_engine_t *e;
    hy_runner_opts_t ro;
    int32_t i, n_ctx = hy_engine_n_ctx(m, o), per_seq;
    int rc;

    *out = NULL;
    e = calloc(1, sizeof *e);
    if (e == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    e->model = m;
    e->be = be;
    e->src = *src;
    e->pt = pt;
    e->o = *o;
    e->o.n_ctx = n_ctx;
    e->sp = pt->sh->params;
    e->hybrid = m->n_rec_layers > 0;
    if (o->sparse.block_pages > 0)
        e->sparse_units = (int32_t)hy_model_sparse_units(m);
    if (o->max_seqs < 1 || o->max_batch_tokens < 1 || o->n_request_slots < 1) {
        rc = hy_err(err, HY_EINVAL,
                    "engine: max_seqs %d, max_batch_tokens %d and request slots %d must be >= 1",
                    o->max_seqs, o->max_batch_tokens, o->n_request_slots);
        goto fail;
    }
    if (e->sp.page_tokens != o->page_tokens) {
        rc = hy_err(err, HY_EINVAL, "engine: page table has %d-token pages, the engine wants %d",
                    e->sp.page_tokens, o->page_tokens);
        goto fail;
    }
    if (e->hybrid && e->sp.n_state_slots < 1) {
        rc = hy_err(err, HY_EINVAL,
                    "engine: %s keeps recurrent state but the page table has no state slots",
                    m->arch_name);
        goto fail;
    }
    if (o->checkpoint_interval > 0)
        e->ckpt_interval = (o->checkpoint_interval + o->page_tokens - 1) / o->page_tokens *
                           o->page_tokens;
    if (o->tok == NULL && (rc = hy_tok_load(&e->own_tok, m->gguf, err)) != HY_OK)
        goto fail;
    e->tok = o->tok != NULL ? o->tok : e->own_tok;
    if ((rc = hy_engine_grammar_init(e, err)) != HY_OK)
        goto fail;
    hy_runner_opts_default(&ro);
    ro.max_tokens = o->max_batch_tokens;
    ro.max_outputs = o->max_seqs;
    ro.max_seqs = o->max_seqs;
    ro.n_ctx = n_ctx;
    ro.kv_type = o->kv_type;
    ro.swa_full = o->swa_full;
    ro.sparse = o->sparse;
    if (o->hot_blocks > 0) {
        hy_plan_t plan;

        /* room for every sequence's old pages at the full context: the plan's out arena */
        if ((rc = hy_engine_plan(m, be, o, &plan, err)) != HY_OK)
            goto fail;
        ro.hot_blocks = o->hot_blocks;
        ro.out_pages = HY_MAX(1, plan.out_seq_pages * o->max_seqs);
        ro.out_warm = plan.out_warm_pages;
        ro.out_dir = o->out_dir;
    }
    ro.pt = pt; /* its state slots, then its checkpoints, in the backend's arena */
    if ((rc = hy_runner_init(&e->runner, m, be, &ro, err)) != HY_OK)
        goto fail;
    e->swa_window = e->runner.swa_window;
    if (e->runner.out != NULL && o->stats != NULL) {
        e->runner.out->read_time = &o->stats->out_read_time;
        e->runner.out->write_time = &o->stats->out_write_time;
    }
    hy_engine_out_publish(e);
    if (o->tiers != NULL &&
        (rc = hy_tiering_create(&e->tiering, pt, be, o->tiers, n_ctx / o->page_tokens,
                                e->sp.n_state_slots, e->hybrid, e->swa_window,
                                e->runner.page_bytes, err)) != HY_OK)
        goto fail;
    /* Preempted sequences wait in the pool, so it holds more than max_seqs;
     * it never needs more than there are request slots. */
    e->n_pool = HY_MIN(2 * o->max_seqs, o->n_request_slots);
    if (e->n_pool < o->max_seqs)
        e->n_pool = o->max_seqs;
    per_seq = n_ctx / o->page_tokens + 2;
    e->pool = calloc((size_t)e->n_pool, sizeof *e->pool);
    e->order = calloc((size_t)e->n_pool, sizeof *e->order);
    e->items = calloc((size_t)o->max_seqs, sizeof *e->items);
    e->item_seq = calloc((size_t)o->max_seqs, sizeof *e->item_seq);
    e->logits = malloc(sizeof(float) * (size_t)o->max_seqs * (size_t)m->n_vocab);
    if (be->i->sample != NULL) {
        e->dev_p = calloc((size_t)o->max_seqs, sizeof *e->dev_p);
        e->dev_r = calloc((size_t)o->max_seqs, sizeof *e->dev_r);
        e->dev_ok = calloc((size_t)o->max_seqs, sizeof *e->dev_ok);
        if (!e->dev_p || !e->dev_r || !e->dev_ok) {
            rc = hy_err(err, HY_ENOMEM, "out of memory");
            goto fail;
        }
    }
    if (!e->pool || !e->order || !e->items || !e->item_seq || !e->logits) {
        rc = hy_err(err, HY_ENOMEM, "out of memory");
        goto fail;
    }
    for (i = 0; i < e->n_pool; i++) {
        hy_sched_seq_t *s = &e->pool[i];

        s->cap = n_ctx + 1;
        s->tokens = malloc(sizeof(int32_t) * (size_t)s->cap);
        s->kv.pages = malloc(sizeof(int32_t) * (size_t)per_seq);
        s->kv.cap = per_seq;
        s->kv.swa_pages = malloc(sizeof(int32_t) * (size_t)per_seq);
        s->kv.swa_cap = per_seq;
        if (!s->tokens || !s->kv.pages || !s->kv.swa_pages) {
            rc = hy_err(err, HY_ENOMEM, "out of memory");
            goto fail;
        }
        for (int32_t j = 0; j < per_seq; j++)
            s->kv.swa_pages[j] = -1;
    }
    *out = e;
    return HY_OK;
fail:
    hy_engine_free(e);
    return rc;
}

void hy_engine_page_bytes(const hy_engine_t *e, uint64_t page_bytes[HY_KV_GROUPS])
{
    page_bytes[HY_KV_FULL] = e->runner.page_bytes[HY_KV_FULL];
    page_bytes[HY_KV_SWA] = e->swa_window > 0 ? e->runner.page_bytes[HY_KV_SWA] : 0;
}

void hy_engine_describe(const hy_engine_t *e, FILE *f)
{
    uint64_t kv = 0, st = 0, total;

    e->be->i->mem_allocated(e->be, &kv, &st);
    total = kv + st;
    fprintf(f,
            "engine pages=%d swa_pages=%d swa_window=%d page_tokens=%d kv_bytes=%llu "
            "state_slots=%d checkpoint_slots=%d "
            "state_bytes=%llu split_kv_pct=%.1f max_seqs=%d max_batch_tokens=%d n_ctx=%d "
            "checkpoint_interval=%d capacity_tokens=%lld request_slots=%d\n",
            e->sp.n_pages, e->sp.n_swa_pages, e->swa_window, e->sp.page_tokens,
            (unsigned long long)kv, e->sp.n_state_slots,
            e->sp.n_checkpoint_slots, (unsigned long long)st,
            total ? 100.0 * (double)kv / (double)total : 100.0, e->o.max_seqs,
            e->o.max_batch_tokens, e->o.n_ctx, e->ckpt_interval,
            (long long)e->sp.n_pages * e->sp.page_tokens, e->o.n_request_slots);
}

void hy_engine_free(hy_engine_t *e)
{
    int32_t i;

    if (e == NULL)
        return;
    if (e->started)
        hy_engine_stop(e);
    for (i = 0; e->pool && i < e->n_pool; i++) {
        free(e->pool[i].tokens);
        free(e->pool[i].kv.pages);
        free(e->pool[i].kv.swa_pages);
        free(e->pool[i].kv.sp_keys);
        hy_sampler_free(e->pool[i].sampler);
        hy_gmatch_free(e->pool[i].gm);
    }
    free(e->pool);
    free(e->order);
    free(e->items);
    free(e->item_seq);
    free(e->logits);
    free(e->dev_p);
    free(e->dev_r);
    free(e->dev_ok);
    hy_tiering_free(e->tiering);
    if (e->runner.model != NULL)
        hy_runner_free(&e->runner);
    hy_grammar_cache_free(e->gcache);
    hy_gvocab_free(e->gvocab);
    free(e->gmask);
    hy_tok_free(e->own_tok);
    free(e);
}

int64_t hy_engine_persist_tiers(hy_engine_t *e)
{
    return e != NULL && e->tiering != NULL && !e->started ? hy_tiering_persist_hot(e->tiering) : 0;
}

/* ---- resources ------------------------------------------------------------ */

/* Gives back pages, state slot and a pending checkpoint; publish says the
 * sequence ended normally, so its end-of-generation checkpoint is kept. */
static void hy_engine_drop(hy_engine_t *e, hy_sched_seq_t *s, bool publish)
{
    char err[HY_ERR_LEN];

    if (s->ckpt >= 0) {
        if (publish && !s->ckpt_existed)
            hy_pt_checkpoint_publish(e->pt, s->ckpt, err);
        else
            hy_pt_checkpoint_release(e->pt, s->ckpt, err);
        s->ckpt = -1;
    }
    hy_runner_seq_drop(&e->runner, &s->kv); /* pages and live state slot */
    hy_engine_out_publish(e);
    s->state = -1;
    s->n_hashed = 0;
    s->hash = HY_PT_HASH_ROOT;
    s->status = HY_SEQ_WAITING;
}

static int64_t hy_engine_clock_us(clockid_t c)
{
    struct timespec ts;

    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* s (just adopted) recomputes a dead engine's context before it goes on. */
static void hy_engine_resume_begin(hy_engine_t *e, hy_sched_seq_t *s)
{
    s->resuming = true;
    if (e->rs.active++ == 0) {
        e->rs.quota = 1;
        e->rs.n = e->rs.tokens = 0;
        e->rs.first_logged = false;
        e->rs.t0_us = hy_engine_clock_us(CLOCK_MONOTONIC);
        e->rs.cpu0_us = hy_engine_clock_us(CLOCK_PROCESS_CPUTIME_ID);
    }
    e->rs.n++;
    e->rs.tokens += s->n_total;
}

/* s is past its recompute (sampled: it has its next token) or gone.  The
 * first stream to resume and the end of the phase are logged: the time a
 * client's stream stood still after the engine came up, and how much of
 * it was this process computing (CPU time of all its threads, the
 * backend's pool included) rather than waiting for the machine. */
static void hy_engine_resume_end(hy_engine_t *e, hy_sched_seq_t *s, bool sampled)
{
    int64_t ms, cpu_ms;

    if (!s->resuming)
        return;
    s->resuming = false;
    e->rs.active--;
    if ((!sampled || e->rs.first_logged) && e->rs.active > 0)
        return;
    ms = (hy_engine_clock_us(CLOCK_MONOTONIC) - e->rs.t0_us) / 1000;
    cpu_ms = (hy_engine_clock_us(CLOCK_PROCESS_CPUTIME_ID) - e->rs.cpu0_us) / 1000;
    if (sampled && !e->rs.first_logged) {
        e->rs.first_logged = true;
        hy_log(LOG_INFO, "resume_first_token", "context_tokens=%d of=%d requests=%d ms=%lld "
               "cpu_ms=%lld", s->n_total, e->rs.tokens, e->rs.n, (long long)ms,
               (long long)cpu_ms);
    }
    if (e->rs.active == 0)
        hy_log(LOG_INFO, "resume_done", "requests=%d context_tokens=%d ms=%lld cpu_ms=%lld",
               e->rs.n, e->rs.tokens, (long long)ms, (long long)cpu_ms);
}

static void hy_engine_finish(hy_engine_t *e, hy_sched_seq_t *s, uint32_t state, int32_t reason,
                             int32_t code, const char *msg)
{
    hy_engine_resume_end(e, s, false);
    hy_engine_drop(e, s, state == HY_REQ_DONE);
    hy_sampler_free(s->sampler);
    s->sampler = NULL;
    hy_gmatch_free(s->gm);
    s->gm = NULL;
    e->src.i->attn_counted(&e->src, s->id, &s->attn);
    e->src.i->finish(&e->src, s->id, state, reason, code, msg);
    s->status = HY_SEQ_FREE;
    s->blocked = false;
}

static void hy_engine_preempt(hy_engine_t *e, hy_sched_seq_t *s)
{
    hy_engine_drop(e, s, false);
    e->src.i->preempted(&e->src);
}

/* Tries to give a WAITING sequence its state slot and its cached prefix.
 * false: not now (no state slot, or too few pages for its first chunk). */
static bool hy_engine_admit(hy_engine_t *e, hy_sched_seq_t *s)
{
    char err[HY_ERR_LEN];
    hy_pt_counts_t c;
    hy_pt_match_t m;
    int32_t first, page_blocks = 0;

    hy_pt_counts(e->pt, &c);
    first = HY_MIN(s->n_total, e->o.max_batch_tokens);
    /* Admitting what cannot get its first chunk's pages would only make
     * it preempt somebody (or be preempted) straight away. */
    if (c.pages_free + c.pages_cached < (first + e->sp.page_tokens - 1) / e->sp.page_tokens ||
        (e->swa_window > 0 &&
         c.swa_free + c.swa_cached < (first + e->sp.page_tokens - 1) / e->sp.page_tokens))
        return false;
    /* what the warm and cold tiers hold of its prefix comes up first; from
     * disk that takes a while, and the others go ahead meanwhile */
    s->fetching = e->tiering != NULL &&
                  hy_tiering_prepare(e->tiering, s->tokens, s->n_total, &s->tw) > 0;
    if (s->fetching)
        return false;
    if (e->hybrid) {
        if (hy_pt_state_alloc(e->pt, &s->state, err) != HY_OK) {
            s->state = -1;
            return false;
        }
        s->kv.state_slot = s->state + 1;
    }
    memset(&m, 0, sizeof m);
    m.pages = s->kv.pages;
    m.cap = HY_MIN(s->kv.cap, s->kv.swa_cap);
    m.ckpt = -1;
    m.swa_pages = s->kv.swa_pages;
    m.window = e->swa_window;
    if (hy_pt_match_ex(e->pt, s->tokens, s->n_total, e->hybrid, &m, &page_blocks, err) != HY_OK)
        memset(&m, 0, sizeof m), m.ckpt = -1, m.hash = HY_PT_HASH_ROOT, page_blocks = 0;
    if (e->hybrid && m.n_blocks > 0 && m.ckpt < 0) {
        /* pages without the state at their end are useless to a hybrid */
        hy_pt_release_seq(e->pt, HY_KV_FULL, m.pages, m.n_blocks, err);
        if (e->swa_window > 0)
            hy_pt_release_seq(e->pt, HY_KV_SWA, m.swa_pages + m.swa_first,
                              m.n_blocks - m.swa_first, err);
        m.n_blocks = m.n_tokens = m.swa_first = 0;
    }
    /* The cached pages reach further than any checkpoint: this prompt
     * branches off a cached prefix that has never been snapshotted at its
     * end (the earlier request went on past it).  Snapshot there, so every
     * later request sharing that prefix (same system prompt, new question)
     * resumes at the branch instead of the last interval checkpoint: the
     * policy Marconi (MLSys 2025) calls checkpointing at branch points. */
    /* The same for a sliding window: the full pages reach further than
     * the cached sliding pages of any window before their end; the pages
     * of the window before the branch are then kept cached (runner.h). */
    s->branch = (e->hybrid || e->swa_window > 0) && page_blocks > m.n_blocks
                    ? page_blocks * e->sp.page_tokens
                    : 0;
    s->kv.n_pages = m.n_blocks;
    s->kv.sp_valid = 0; /* the attached pages' block keys come from their page keys */
    s->kv.n_checked = 0;
    s->kv.n_swa_pages = e->swa_window > 0 ? m.n_blocks : 0;
    s->kv.swa_lo = e->swa_window > 0 ? m.swa_first : 0;
    s->kv.n_tokens = m.n_tokens;
    s->n_hashed = m.n_blocks;
    s->hash = m.n_blocks > 0 ? m.hash : HY_PT_HASH_ROOT;
    if (e->hybrid) {
        if (m.ckpt >= 0) {
            e->be->i->state_copy(e->be, s->state, e->sp.n_state_slots + m.ckpt);
            hy_pt_checkpoint_release(e->pt, m.ckpt, err);
        } else {
            e->be->i->state_clear(e->be, s->state);
        }
    }
    if (!s->started) {
        e->src.i->started(&e->src, s->id, m.n_tokens);
        s->started = true;
    }
    s->status = HY_SEQ_RUNNING;
    return true;
}

/* The request's grammar: compiled once per distinct text (the cache),
 * then a matcher of its own for this sequence. */
static int hy_engine_grammar(hy_engine_t *e, hy_sched_seq_t *s, const hy_req_taken_t *q,
                             char *err)
{
    hy_grammar_cache_stats_t before, after;
    hy_grammar_counts_t d;
    hy_gmatch_opts_t o;
    hy_grammar_t *g = NULL;
    const char *text;
    size_t len;
    bool hit;
    int rc;

    if (q->grammar == NULL)
        return hy_err(err, HY_EINVAL, "grammar spec of %u bytes is missing",
                      (unsigned)q->params.grammar_len);
    hy_grammar_cache_stats(e->gcache, &before);
    if ((rc = hy_grammar_spec_unpack(q->grammar, q->params.grammar_len, &text, &len, &o,
                                     err)) != HY_OK ||
        (rc = hy_grammar_cache_get(e->gcache, text, len, &g, &hit, err)) != HY_OK)
        return rc;
    hy_grammar_cache_stats(e->gcache, &after);
    rc = hy_gmatch_create(&s->gm, g, &o, err);
    hy_grammar_unref(g);
    memset(&d, 0, sizeof d);
    d.requests = 1;
    d.compiles = !hit;
    d.cache_hits = hit;
    d.compile_us = (uint64_t)((after.compile_ms - before.compile_ms) * 1e3);
    e->src.i->grammar_counted(&e->src, &d);
    return rc;
}

/* A request a dead engine had started (hy_req_taken_t.resumed): its tokens
 * join the context as generated ones, through the grammar and the
 * penalties exactly as when they were sampled, and the random stream
 * moves to where it stood, so what follows is what the dead engine would
 * have produced.  A request that had already reached its end is marked to
 * finish at once (s->finish_after). */
static int hy_engine_resume(hy_engine_t *e, hy_sched_seq_t *s, const hy_req_taken_t *q,
                            char *err)
{
    int32_t i, t;
    int rc;

    if (s->n_total + q->n_resumed > e->o.n_ctx)
        return hy_err(err, HY_ERANGE, "resumed request of %d + %d tokens: the context holds %d",
                      s->n_total, q->n_resumed, e->o.n_ctx);
    for (i = 0; i < q->n_resumed; i++) {
        t = q->resumed[i].token;
        if (t < 0 || t >= e->model->n_vocab)
            return hy_err(err, HY_EINVAL, "resumed token %d is outside the vocabulary", t);
        if (s->gm != NULL && (rc = hy_gmatch_accept_token(s->gm, t, err)) != HY_OK)
            return rc;
        if ((rc = hy_sampler_accept(s->sampler, t)) != HY_OK)
            return hy_err(err, rc, "sampler: cannot record the resumed tokens");
        s->tokens[s->n_total++] = t;
    }
    hy_sampler_skip(s->sampler, q->resumed[q->n_resumed - 1].rng_draws);
    s->closed = (q->resumed[q->n_resumed - 1].flags & HY_TOK_F_CLOSED) != 0;
    if (s->n_total - s->n_prompt >= s->max_tokens || s->n_total >= e->o.n_ctx)
        s->finish_after = HY_FINISH_LENGTH;
    else if (s->gm != NULL && hy_gmatch_done(s->gm))
        s->finish_after = s->closed ? HY_FINISH_LENGTH : HY_FINISH_STOP;
    return HY_OK;
}

/* A request the engine just took: copy what it needs out of the source. */
static int hy_engine_adopt(hy_engine_t *e, hy_sched_seq_t *s, const hy_req_taken_t *q, char *err)
{
    int32_t i, n = q->n_prompt;
    int rc;

    memset(&s->pending, 0, sizeof s->pending);
    s->id = q->id;
    s->params = q->params;
    s->priority = q->params.priority;
    s->order = q->order;
    s->started = s->blocked = s->fetching = s->resuming = s->closed = false;
    memset(&s->attn, 0, sizeof s->attn);
    memset(&s->tw, 0, sizeof s->tw);
    s->finish_after = HY_FINISH_NONE;
    s->state = s->ckpt = -1;
    s->branch = 0;
    s->kv.n_pages = s->kv.n_tokens = s->kv.state_slot = s->kv.n_checked = 0;
    s->kv.n_swa_pages = s->kv.swa_lo = 0;
    s->n_hashed = 0;
    s->hash = HY_PT_HASH_ROOT;
    s->max_tokens = q->params.max_tokens;
    s->status = HY_SEQ_WAITING;
    if (n < 1 || n >= e->o.n_ctx)
        return hy_err(err, HY_ERANGE, "prompt of %d tokens: the context holds %d (prompt + at least one token)",
                      n, e->o.n_ctx);
    for (i = 0; i < n; i++) {
        if (q->prompt[i] < 0 || q->prompt[i] >= e->model->n_vocab)
            return hy_err(err, HY_EINVAL, "prompt token %d is outside the vocabulary (0..%d)",
                          q->prompt[i], e->model->n_vocab - 1);
    }
    if (s->max_tokens < 1)
        return hy_err(err, HY_EINVAL, "max_tokens = %d: must be >= 1", s->max_tokens);
    memcpy(s->tokens, q->prompt, sizeof(int32_t) * (size_t)n);
    s->n_prompt = s->n_total = n;
    if ((rc = hy_sampler_create(&s->sampler, &q->params.sampling, e->model->n_vocab, err)) != HY_OK)
        return rc;
    if (q->params.grammar_len > 0 && (rc = hy_engine_grammar(e, s, q, err)) != HY_OK)
        return rc;
    if (hy_sampler_accept_prompt(s->sampler, s->tokens, (size_t)n) != HY_OK)
        return hy_err(err, HY_ENOMEM, "sampler: cannot record the prompt");
    rc = q->n_resumed > 0 ? hy_engine_resume(e, s, q, err) : HY_OK;
    if (rc == HY_OK && q->n_resumed > 0)
        hy_engine_resume_begin(e, s);
    return rc;
}

/* ---- one step --------------------------------------------------------------- */

static void hy_engine_cancels(hy_engine_t *e)
{
    int32_t i;

    for (i = 0; i < e->n_pool; i++) {
        hy_sched_seq_t *s = &e->pool[i];

        if (s->status != HY_SEQ_FREE && e->src.i->cancelled(&e->src, s->id))
            hy_engine_finish(e, s, HY_REQ_CANCELLED, HY_FINISH_CANCELLED, 0, "cancelled");
    }
}

static int32_t hy_engine_count(const hy_engine_t *e, int32_t status)
{
    int32_t i, n = 0;

    for (i = 0; i < e->n_pool; i++)
        n += e->pool[i].status == status;
    return n;
}

/* Preempted sequences first (they are older), then new requests, while
 * the step has room for more sequences. */
static void hy_engine_admit_all(hy_engine_t *e)
{
    char err[HY_ERR_LEN];
    int32_t i, n = 0, running = hy_engine_count(e, HY_SEQ_RUNNING);
    hy_req_taken_t q;

    for (i = 0; i < e->n_pool; i++)
        if (e->pool[i].status == HY_SEQ_WAITING)
            e->order[n++] = &e->pool[i];
    hy_sched_sort(e->order, n);
    for (i = 0; i < n && running < e->o.max_seqs; i++) {
        if (!hy_engine_admit(e, e->order[i])) {
            if (e->order[i]->fetching)
                continue;
            return; /* keep FCFS: nobody overtakes the oldest waiting one */
        }
        running++;
    }
    while (running < e->o.max_seqs) {
        hy_sched_seq_t *s = NULL;

        for (i = 0; i < e->n_pool && s == NULL; i++)
            if (e->pool[i].status == HY_SEQ_FREE)
                s = &e->pool[i];
        memset(&q, 0, sizeof q);
        if (s == NULL || e->src.i->take(&e->src, &q) != HY_OK)
            return;
        if (hy_engine_adopt(e, s, &q, err) != HY_OK) {
            hy_engine_finish(e, s, HY_REQ_ERROR, HY_FINISH_ERROR, HY_EINVAL, err);
            continue;
        }
        if (s->finish_after != HY_FINISH_NONE) { /* resumed at its very end */
            hy_engine_finish(e, s, HY_REQ_DONE, s->finish_after, 0, NULL);
            continue;
        }
        if (!hy_engine_admit(e, s)) {
            if (s->fetching)
                continue;
            return;
        }
        running++;
    }
}

/* Pages of one group for blocks [*n, blocks) into list, preempting
 * juniors if the pool is short.  false: not now. */
static bool hy_engine_group_pages(hy_engine_t *e, hy_sched_seq_t *s, int32_t group,
                                  int32_t *list, int32_t *n, int32_t blocks, int32_t n_run)
{
    char err[HY_ERR_LEN];
    int32_t need = blocks - *n;

    if (need <= 0)
        return true;
    while (hy_pt_alloc_pages(e->pt, group, need, list + *n, err) != HY_OK) {
        hy_sched_seq_t *v = hy_sched_victim(e->order, n_run, s);

        if (v == NULL)
            return false;
        hy_engine_preempt(e, v);
    }
    *n = blocks;
    return true;
}

/* The attention path of positions pos0 .. pos0+n-1 of s, by the rule the
 * backend follows (backend.h hy_kv_sparse_t): for the request's log line.
 * The blocks they read the backend counts (a top-p choice's number is the
 * scores'): hy_engine_run takes them after the step. */
static void hy_engine_count_attn(hy_engine_t *e, hy_sched_seq_t *s, int32_t pos0, int32_t n)
{
    int32_t dense = n;

    if (e->sparse_units > 0)
        dense = HY_MIN(HY_MAX(e->o.sparse.min_tokens - pos0, 0), n);

    s->attn.dense_tokens += (uint64_t)dense;
    s->attn.sparse_tokens += (uint64_t)(n - dense);
}

/* Pages for positions up to kv.n_tokens + chunk in every group, preempting
 * juniors if a pool is short.  false: this sequence cannot run in this
 * step (what it got stays for the next one). */
static bool hy_engine_pages(hy_engine_t *e, hy_sched_seq_t *s, int32_t chunk, int32_t n_run)
{
    int32_t blocks = (s->kv.n_tokens + chunk + e->sp.page_tokens - 1) / e->sp.page_tokens;

    return hy_engine_group_pages(e, s, HY_KV_FULL, s->kv.pages, &s->kv.n_pages, blocks, n_run) &&
           (e->swa_window == 0 || hy_engine_group_pages(e, s, HY_KV_SWA, s->kv.swa_pages,
                                                        &s->kv.n_swa_pages, blocks, n_run));
}

static int32_t hy_engine_build(hy_engine_t *e)
{
    int32_t i, n_run = 0, n_items = 0, budget = e->o.max_batch_tokens, pass, n_resuming = 0;

    for (i = 0; i < e->n_pool; i++) {
        e->pool[i].chunk = 0;
        if (e->pool[i].status == HY_SEQ_RUNNING)
            e->order[n_run++] = &e->pool[i];
    }
    hy_sched_sort(e->order, n_run);
    /* decodes first (their latency is what users see), then prefill chunks */
    for (pass = 0; pass < 2; pass++) {
        for (i = 0; i < n_run && n_items < e->o.max_seqs && budget > 0; i++) {
            hy_sched_seq_t *s = e->order[i];
            bool decode = s->n_total - s->kv.n_tokens == 1;
            int32_t chunk;

            if (s->status != HY_SEQ_RUNNING || s->blocked || s->chunk > 0 || decode != (pass == 0))
                continue;
            if (s->resuming && !decode && n_resuming >= e->rs.quota)
                continue; /* a later batch of resumed contexts (e->rs) */
            /* chunks end at checkpoint boundaries only if there are
             * checkpoint slots to take the state there */
            chunk = hy_sched_chunk(s, budget, e->sp.page_tokens, e->ckpt_interval,
                                   e->hybrid && e->sp.n_checkpoint_slots > 0);
            if (!hy_engine_pages(e, s, chunk, n_run)) {
                hy_pt_counts_t c;

                hy_pt_counts(e->pt, &c);
                /* every used page is its own: the pool can never hold it */
                if (c.pages_used == s->kv.n_pages &&
                    c.swa_used == s->kv.n_swa_pages - s->kv.swa_lo)
                    hy_engine_finish(e, s, HY_REQ_ERROR, HY_FINISH_ERROR, HY_EFULL,
                                     "the KV page pool cannot hold this request");
                continue;
            }
            s->chunk = chunk;
            hy_engine_count_attn(e, s, s->kv.n_tokens, chunk);
            n_resuming += s->resuming;
            e->items[n_items].seq = &s->kv;
            e->items[n_items].tokens = s->tokens + s->kv.n_tokens;
            e->items[n_items].n = chunk;
            e->items[n_items].all_logits = false;
            e->item_seq[n_items++] = s;
            budget -= chunk;
        }
    }
    if (n_resuming > 0)
        e->rs.quota = HY_MIN(2 * e->rs.quota, e->o.max_seqs);
    return n_items;
}

/* Commits every block that just filled, then snapshots the recurrent state
 * if this position is a checkpoint boundary. */
static void hy_engine_cache(hy_engine_t *e, hy_sched_seq_t *s)
{
    char err[HY_ERR_LEN];
    int32_t pt = e->sp.page_tokens, b = s->kv.n_tokens, slot;
    bool existed;

    while ((s->n_hashed + 1) * pt <= b) {
        const int32_t *blk = s->tokens + s->n_hashed * pt;
        uint64_t h = hy_pt_block_hash(s->hash, blk, pt);

        /* a block is committed after the step that fills it, before it can
         * leave the pool (a hot window exceeds a step); never commit an out
         * page's marker */
        if (s->kv.pages[s->n_hashed] >= 0)
            hy_pt_commit_block(e->pt, HY_KV_FULL, s->kv.pages[s->n_hashed], h, s->n_hashed,
                               blk, err);
        /* the runner trims at the next step: the block is still held */
        if (e->swa_window > 0 && s->kv.swa_pages[s->n_hashed] >= 0)
            hy_pt_commit_block(e->pt, HY_KV_SWA, s->kv.swa_pages[s->n_hashed], h, s->n_hashed,
                               blk, err);
        s->hash = h;
        s->n_hashed++;
    }
    if (!e->hybrid || e->sp.n_checkpoint_slots == 0 || b == 0 || b % pt != 0)
        return;
    if ((e->ckpt_interval > 0 && b % e->ckpt_interval == 0) || b == s->branch ||
        b == hy_sched_prompt_boundary(s, pt)) {
        if (hy_pt_checkpoint_put(e->pt, s->hash, &slot, &existed, err) != HY_OK)
            return;
        if (!existed) {
            e->be->i->state_copy(e->be, e->sp.n_state_slots + slot, s->state);
            hy_pt_checkpoint_publish(e->pt, slot, err);
        } else {
            hy_pt_checkpoint_release(e->pt, slot, err);
        }
    } else if (b >= s->n_prompt) {
        /* generation (or a prompt of whole blocks just done): keep the
         * latest boundary pending; it is published when the sequence
         * ends, so the next turn resumes from there */
        if (s->ckpt >= 0)
            hy_pt_checkpoint_release(e->pt, s->ckpt, err);
        s->ckpt = -1;
        if (hy_pt_checkpoint_put(e->pt, s->hash, &slot, &existed, err) != HY_OK)
            return;
        s->ckpt = slot;
        s->ckpt_existed = existed;
        if (!existed)
            e->be->i->state_copy(e->be, e->sp.n_state_slots + slot, s->state);
    }
}

/* Gives back the sliding pages s's window has left (after hy_engine_cache
 * committed them).  Those of the windows before the boundaries a later
 * request can resume from - the prompt's last block boundary (an exact
 * repeat) and the branch off a cached prefix - stay cached in LRU order;
 * the others are evicted first.  The last window goes when s ends. */
static void hy_engine_trim(hy_engine_t *e, hy_sched_seq_t *s)
{
    int32_t keep[2] = {hy_sched_prompt_boundary(s, e->sp.page_tokens), s->branch};

    hy_runner_seq_trim(&e->runner, &s->kv, keep, 2);
}

/* Pushes the held token; finishes if that token was the last. */
static void hy_engine_flush(hy_engine_t *e, hy_sched_seq_t *s)
{
    if (e->src.i->push(&e->src, s->id, &s->pending) == HY_EFULL)
        return;
    s->blocked = false;
    if (s->finish_after != HY_FINISH_NONE)
        hy_engine_finish(e, s, HY_REQ_DONE, s->finish_after, 0, NULL);
}

/* The backend samples on its side (hy_backend_i.sample, the GPU) the rows
 * of requests whose sampling it reproduces: no logit_bias, no penalties and
 * no grammar, which need the request's history and stay with the host
 * sampler.  Every row is passed (the rows are the items, one logit row
 * each) so that the call is one launch; dev_ok marks the results to use.
 * A failed call leaves every row to the host. */
static bool hy_engine_device_samples(const hy_engine_t *e, const hy_sched_seq_t *s)
{
    const hy_sampling_t *sp = &s->params.sampling;

    return e->dev_ok != NULL && sp->n_logit_bias == 0 && sp->repetition_penalty == 1.0f &&
           sp->presence_penalty == 0.0f && sp->frequency_penalty == 0.0f && s->gm == NULL;
}

/* host_logits: whether the step downloaded the logits to e->logits. */
static void hy_engine_device_sample(hy_engine_t *e, int32_t n_items, bool host_logits)
{
    char err[HY_ERR_LEN];
    bool any = false;
    int32_t i;

    for (i = 0; i < n_items; i++) {
        hy_sched_seq_t *s = e->item_seq[i];
        const hy_sampling_t *sp = &s->params.sampling;
        hy_sample_params_t *dp = &e->dev_p[i];

        memset(dp, 0, sizeof *dp);
        dp->top_p = 1.0f;
        e->dev_ok[i] = s->kv.n_tokens == s->n_total && hy_engine_device_samples(e, s);
        if (!e->dev_ok[i])
            continue;
        dp->temperature = sp->temperature;
        dp->top_k = sp->top_k;
        dp->top_p = sp->top_p;
        dp->min_p = sp->min_p;
        dp->seed = sp->seed;
        dp->counter = (uint64_t)(s->n_total - s->n_prompt);
        dp->n_logprobs = HY_MIN(sp->n_logprobs, HY_SAMPLE_MAX_TOP);
        any = true;
    }
    if (!any)
        return;
    if (e->be->i->sample(e->be, e->runner.fwd.logits, n_items, e->model->n_vocab, e->dev_p,
                         e->dev_r, err) != HY_OK) {
        if (!e->dev_failed_logged)
            hy_log(LOG_ERR, "device_sample_failed", "err=%s fallback=host", err);
        e->dev_failed_logged = true;
        memset(e->dev_ok, 0, sizeof *e->dev_ok * (size_t)n_items);
        if (!host_logits)
            e->be->i->download(e->be, e->logits, e->runner.fwd.logits,
                               (size_t)n_items * (size_t)e->model->n_vocab);
    }
}

/* Applies e->gmask (a grammar's mask over the tokenizer's vocabulary) to a
 * row of the model's: ids past the tokenizer's vocabulary (padded
 * embeddings) never. */
static void hy_engine_apply_gmask(hy_engine_t *e, float *logits)
{
    int32_t nw_tok = ((int32_t)hy_tok_n_vocab(e->tok) + 63) / 64;
    int32_t nw_model = (e->model->n_vocab + 63) / 64;

    if (nw_model > nw_tok)
        memset(e->gmask + nw_tok, 0, sizeof *e->gmask * (size_t)(nw_model - nw_tok));
    hy_grammar_apply_mask(logits, e->gmask, e->model->n_vocab);
}

/* Masks a constrained row's logits before any sampling step sees them:
 * tokens the grammar does not allow get -inf.  false: the sequence was
 * finished (the grammar is stuck, which no well-formed grammar over a
 * byte-complete vocabulary does, or out of memory). */
static bool hy_engine_mask(hy_engine_t *e, hy_sched_seq_t *s, float *logits, uint32_t flags)
{
    double t0 = hy_grammar_now_ms(); /* thread CPU time: the work, not the machine's load */
    hy_grammar_stats_t before, after;
    hy_grammar_counts_t d;
    int32_t n;
    char msg[128];

    if (!hy_gmatch_constrained(s->gm))
        return true;
    memset(&d, 0, sizeof d);
    hy_grammar_stats(hy_gmatch_grammar(s->gm), &before);
    n = hy_gmatch_fill_mask(s->gm, e->gmask, !(flags & HY_REQ_F_IGNORE_EOS));
    hy_grammar_stats(hy_gmatch_grammar(s->gm), &after);
    d.fill_us = (uint64_t)((after.precompute_ms - before.precompute_ms) * 1e3);
    if (n <= 0) {
        d.mask_us = (uint64_t)((hy_grammar_now_ms() - t0) * 1e3);
        e->src.i->grammar_counted(&e->src, &d);
        snprintf(msg, sizeof msg, n == 0 ? "grammar: no token can continue it at byte %llu"
                                         : "grammar: out of memory at byte %llu",
                 (unsigned long long)hy_gmatch_offset(s->gm));
        hy_engine_finish(e, s, HY_REQ_ERROR, HY_FINISH_ERROR, n == 0 ? HY_EINVAL : n, msg);
        return false;
    }
    hy_engine_apply_gmask(e, logits);
    d.masks = 1;
    d.mask_us = (uint64_t)((hy_grammar_now_ms() - t0) * 1e3);
    e->src.i->grammar_counted(&e->src, &d);
    return true;
}

/* The token budget of a constrained row (grammar/grammar_budget.c): t was
 * drawn from the masked logits; if after it the grammar's end lies
 * further (in bytes) than the tokens left after it, it is drawn again among
 * the tokens that bring the end nearer byte by byte, so a JSON answer
 * closes within max_tokens instead of being cut.  An answer this shaped is
 * marked closed: it finishes "length", valid but not the model's own end.
 * When the end is further than one byte per token left (the budget was
 * too small from the start) t stands and the answer is cut as any other. */
static int32_t hy_engine_budget(hy_engine_t *e, hy_sched_seq_t *s, float *logits, int32_t t,
                                hy_sample_out_t *so)
{
    int32_t left = HY_MIN(s->max_tokens - (s->n_total - s->n_prompt), e->o.n_ctx - s->n_total) - 1;
    int32_t n;

    if (t < 0 || !hy_gmatch_constrained(s->gm) || hy_gmatch_fits(s->gm, t, left))
        return t;
    /* out of reach whatever comes: a guarantee is all closing is for */
    if (hy_gmatch_distance(s->gm) > left + 1)
        return t;
    n = hy_gmatch_fill_closing_mask(s->gm, e->gmask, !(s->params.flags & HY_REQ_F_IGNORE_EOS));
    if (n <= 0)
        return t;
    hy_engine_apply_gmask(e, logits);
    if (!s->closed) {
        hy_grammar_counts_t d;

        memset(&d, 0, sizeof d);
        d.closed = 1;
        e->src.i->grammar_counted(&e->src, &d);
    }
    s->closed = true;
    return hy_sampler_resample(s->sampler, logits, so);
}

/* dev: the backend's result for this row, or NULL to sample on the host. */
static void hy_engine_sample(hy_engine_t *e, hy_sched_seq_t *s, float *logits,
                             const hy_sample_result_t *dev)
{
    const hy_req_params_t *p = &s->params;
    hy_sample_out_t so;
    int32_t t, j;
    bool stop = false;

    if (dev != NULL) {
        t = dev->token;
        so.token = t;
        so.logprob = dev->logprob;
        so.n_top = HY_MIN(dev->n_top, HY_SAMPLING_MAX_LOGPROBS);
        for (j = 0; j < so.n_top; j++) {
            so.top_ids[j] = dev->top_ids[j];
            so.top_logprobs[j] = dev->top_logprobs[j];
        }
    } else {
        if (s->gm != NULL && !hy_engine_mask(e, s, logits, p->flags))
            return;
        if (p->flags & HY_REQ_F_NO_LOGPROBS) {
            t = hy_sampler_sample(s->sampler, logits, NULL);
            so.logprob = 0.0f;
            so.n_top = 0;
        } else {
            t = hy_sampler_sample(s->sampler, logits, &so);
        }
        if (s->gm != NULL)
            t = hy_engine_budget(e, s, logits, t,
                                 p->flags & HY_REQ_F_NO_LOGPROBS ? NULL : &so);
    }
    if (t < 0) {
        hy_engine_finish(e, s, HY_REQ_ERROR, HY_FINISH_ERROR, t,
                         t == HY_ENOMEM ? "sampler: out of memory" : "the logits are not finite");
        return;
    }
    if (!(p->flags & HY_REQ_F_IGNORE_EOS)) {
        stop = hy_tok_is_eog(e->tok, t);
        for (j = 0; j < p->n_stop_ids && j < HY_REQ_MAX_STOP_IDS && !stop; j++)
            stop = p->stop_ids[j] == t;
    }
    if (stop) {
        hy_engine_finish(e, s, HY_REQ_DONE, s->closed ? HY_FINISH_LENGTH : HY_FINISH_STOP, 0,
                         NULL);
        return;
    }
    if (s->gm != NULL) {
        char err[HY_ERR_LEN];

        if (hy_gmatch_accept_token(s->gm, t, err) != HY_OK) {
            hy_engine_finish(e, s, HY_REQ_ERROR, HY_FINISH_ERROR, HY_EINVAL, err);
            return;
        }
    }
    /* The penalties must count every token: one that went uncounted would
     * bias every later draw with nobody told. */
    if ((j = hy_sampler_accept(s->sampler, t)) != HY_OK) {
        hy_engine_finish(e, s, HY_REQ_ERROR, HY_FINISH_ERROR, j, "sampler: out of memory");
        return;
    }
    s->tokens[s->n_total++] = t;
    s->pending.token = t;
    /* where a resumed request's stream restarts (the device sampler's
     * counter is the token's position, it needs none) */
    s->pending.rng_draws = dev != NULL ? 0 : (uint32_t)hy_sampler_draws(s->sampler);
    s->pending.flags = s->closed ? HY_TOK_F_CLOSED : 0;
    s->pending.logprob = so.logprob;
    s->pending.n_top = HY_MIN(so.n_top, HY_SAMPLING_MAX_LOGPROBS);
    for (j = 0; j < s->pending.n_top; j++) {
        s->pending.top_ids[j] = so.top_ids[j];
        s->pending.top_logprobs[j] = so.top_logprobs[j];
    }
    s->finish_after = s->n_total - s->n_prompt >= s->max_tokens || s->n_total >= e->o.n_ctx
                          ? HY_FINISH_LENGTH
                          : HY_FINISH_NONE;
    /* the grammar is complete and nothing may follow: stop here rather
     * than spend a step on the end-of-generation token */
    if (s->gm != NULL && hy_gmatch_done(s->gm))
        s->finish_after = s->closed ? HY_FINISH_LENGTH : HY_FINISH_STOP;
    s->blocked = true;
    hy_engine_flush(e, s);
}

/* Prompt tokens this step computes (cached ones never reach a step;
 * recomputing generated tokens after a preemption is not prompt work), for
 * the prompt tokens/s gauges. */
static void hy_engine_count_prompt(hy_engine_t *e, int32_t n_items)
{
    int32_t n = 0;
    int32_t i;

    for (i = 0; i < n_items; i++) {
        const hy_sched_seq_t *s = e->item_seq[i];

        if (s->kv.n_tokens < s->n_prompt)
            n += HY_MIN(s->chunk, s->n_prompt - s->kv.n_tokens);
    }
    e->src.i->prompt_computed(&e->src, n);
}

static void hy_engine_run(hy_engine_t *e, int32_t n_items)
{
    char err[HY_ERR_LEN];
    bool host_logits = false;
    int32_t i;
    int rc;

    /* The logits cross to the host only if a row may be sampled there. */
    for (i = 0; i < n_items && !host_logits; i++)
        host_logits = !hy_engine_device_samples(e, e->item_seq[i]);
    hy_engine_count_prompt(e, n_items);
    rc = hy_runner_step(&e->runner, e->items, n_items, host_logits ? e->logits : NULL, err);
    hy_engine_out_publish(e);
    if (rc == HY_OK && e->dev_ok != NULL)
        hy_engine_device_sample(e, n_items, host_logits);
    for (i = 0; i < n_items; i++) {
        hy_sched_seq_t *s = e->item_seq[i];
        /* the blocks the step's sparse tokens read, by tier, as the
         * backend counted them */
        uint64_t out = HY_MIN(s->kv.out_reads[0], s->kv.out_reads[2]);
        uint64_t cold = HY_MIN(s->kv.out_reads[1], out);

        s->attn.blocks_warm += out - cold;
        s->attn.blocks_cold += cold;
        s->attn.blocks_hot += s->kv.out_reads[2] - out;
        memset(s->kv.out_reads, 0, sizeof s->kv.out_reads);
        if (rc != HY_OK) {
            hy_engine_finish(e, s, HY_REQ_ERROR, HY_FINISH_ERROR, rc, err);
            continue;
        }
        hy_engine_cache(e, s);
        hy_engine_trim(e, s);
        if (s->kv.n_tokens == s->n_total) {
            hy_engine_resume_end(e, s, true);
            hy_engine_sample(e, s, e->logits + (size_t)i * (size_t)e->model->n_vocab,
                             e->dev_ok != NULL && e->dev_ok[i] ? &e->dev_r[i] : NULL);
        }
    }
}

/* Offers again the tokens that wait for their readers; *any_blocked: one
 * still waits. */
static void hy_engine_flush_all(hy_engine_t *e, bool *any_blocked)
{
    int32_t i;

    *any_blocked = false;
    for (i = 0; i < e->n_pool; i++) {
        if (e->pool[i].status != HY_SEQ_FREE && e->pool[i].blocked) {
            hy_engine_flush(e, &e->pool[i]);
            *any_blocked |= e->pool[i].status != HY_SEQ_FREE && e->pool[i].blocked;
        }
    }
}

/* One step; *any_blocked as hy_engine_flush_all says. */
static int32_t hy_engine_once(hy_engine_t *e, bool *any_blocked)
{
    int32_t n_items;

    hy_engine_cancels(e);
    hy_engine_flush_all(e, any_blocked);
    hy_engine_admit_all(e);
    n_items = hy_engine_build(e);
    if (n_items > 0)
        hy_engine_run(e, n_items);
    return n_items;
}

int32_t hy_engine_poll(hy_engine_t *e)
{
    bool any_blocked;

    return hy_engine_once(e, &any_blocked);
}

void hy_engine_cancel_all(hy_engine_t *e, const char *why)
{
    hy_req_taken_t q;
    int32_t i;

    for (i = 0; i < e->n_pool; i++)
        if (e->pool[i].status != HY_SEQ_FREE)
            hy_engine_finish(e, &e->pool[i], HY_REQ_CANCELLED, HY_FINISH_CANCELLED, 0, why);
    while (e->src.i->take(&e->src, &q) == HY_OK)
        e->src.i->finish(&e->src, q.id, HY_REQ_CANCELLED, HY_FINISH_CANCELLED, 0, why);
}

static void *hy_engine_main(void *arg)
{
    hy_engine_t *e = arg;

    while (!atomic_load(&e->stop)) {
        uint32_t seen = e->src.i->epoch(&e->src);
        bool any_blocked;

        if (hy_engine_once(e, &any_blocked) > 0)
            continue;
        /* nothing runnable: sleep until a submit/cancel, polling briefly
         * while a reader is behind (reads do not wake the engine) */
        e->src.i->wait(&e->src, seen,
                       any_blocked || hy_engine_count(e, HY_SEQ_WAITING) ? 1 : 100);
    }
    hy_engine_cancel_all(e, "the engine is shutting down");
    return NULL;
}

int hy_engine_start(hy_engine_t *e, char *err)
{
    int rc;

    if (e->started)
        return hy_err(err, HY_EINVAL, "engine already started");
    atomic_store(&e->stop, 0);
    if ((rc = pthread_create(&e->thread, NULL, hy_engine_main, e)) != 0)
        return hy_err(err, HY_ENOMEM, "engine thread: %s", strerror(rc));
    e->started = true;
    return HY_OK;
}

void hy_engine_stop(hy_engine_t *e)
{
    if (e == NULL || !e->started)
        return;
    atomic_store(&e->stop, 1);
    e->src.i->kick(&e->src);
    pthread_join(e->thread, NULL);
    e->started = false;
}
