/*
 * ring.c - request slots and SPSC token rings (see ring.h for the slot life).
 * No locks: the owner pid CAS claims a slot, the state word publishes it,
 * `released` decides who frees it, and each ring is a head/tail counter pair
 * (engine writes head with release after filling the entry, worker reads it
 * with acquire; the reverse for tail).  A worker that dies anywhere in here
 * leaves a slot that hy_shm_reap_owner() can always take back.
 */
#include "ipc/ring.h"
#include "common/futex.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define ACQ memory_order_acquire
#define REL memory_order_release
#define RLX memory_order_relaxed

#define REL_WORKER 1u
#define REL_ENGINE 2u

/* Shared ring entry: header then n_top (id, logprob) pairs. */
typedef struct {
    int32_t token;
    float logprob;
    int32_t n_top;
    int32_t pad;
} ring_ent_t;

typedef struct {
    int32_t id;
    float logprob;
} ring_top_t;

uint32_t hy_ring_entry_size(int32_t top_logprobs)
{
    return (uint32_t)(sizeof(ring_ent_t) + sizeof(ring_top_t) * (size_t)top_logprobs);
}

static hy_req_slot_t *slots(hy_shm_t *shm)
{
    return hy_shm_region(shm, HY_SHM_REG_SLOTS);
}

static int32_t n_slots(hy_shm_t *shm)
{
    return hy_shm_header(shm)->params.n_request_slots;
}

hy_req_slot_t *hy_req_slot(hy_shm_t *shm, int32_t idx)
{
    if (idx < 0 || idx >= n_slots(shm))
        return NULL;
    return &slots(shm)[idx];
}

const int32_t *hy_req_prompt(hy_shm_t *shm, int32_t idx)
{
    const hy_shm_header_t *h = hy_shm_header(shm);
    return (const int32_t *)hy_shm_region(shm, HY_SHM_REG_PROMPTS) +
           (size_t)idx * (size_t)h->params.max_prompt_tokens;
}

/* The slot's history: one entry per token pushed (prompt + generated
 * never exceed max_prompt_tokens, the context). */
static hy_req_hist_t *slot_history(hy_shm_t *shm, int32_t idx)
{
    return (hy_req_hist_t *)hy_shm_region(shm, HY_SHM_REG_HISTORY) +
           (size_t)idx * (size_t)hy_shm_header(shm)->params.max_prompt_tokens;
}

static char *ring_entry(hy_shm_t *shm, int32_t idx, uint64_t pos)
{
    const hy_shm_header_t *h = hy_shm_header(shm);
    uint64_t cap = (uint64_t)h->params.ring_capacity;

    return (char *)hy_shm_region(shm, HY_SHM_REG_RINGS) +
           ((uint64_t)idx * cap + pos % cap) * h->ring_entry_size;
}

void hy_req_init_slots(hy_shm_t *shm)
{
    int32_t i;

    for (i = 0; i < n_slots(shm); i++) {
        hy_req_slot_t *s = &slots(shm)[i];
        memset(s, 0, sizeof *s);
        atomic_init(&s->state, HY_REQ_FREE);
        atomic_init(&s->gen, 1);
    }
}

/* Both sides let go: back to FREE.  gen changes first so a stale handle
 * fails before anybody can reuse the slot; owner 0 last re-opens the claim. */
static void slot_free(hy_shm_t *shm, hy_req_slot_t *s)
{
    atomic_fetch_add_explicit(&s->gen, 1, RLX);
    atomic_store_explicit(&s->state, HY_REQ_FREE, REL);
    atomic_store_explicit(&s->owner_pid, 0, REL);
    atomic_fetch_sub_explicit(&hy_shm_stats(shm)->slots_used, 1, RLX);
}

static void let_go(hy_shm_t *shm, hy_req_slot_t *s, uint32_t bit)
{
    uint32_t old = atomic_fetch_or_explicit(&s->released, bit, memory_order_acq_rel);

    if ((old | bit) == (REL_WORKER | REL_ENGINE) && old != (REL_WORKER | REL_ENGINE))
        slot_free(shm, s);
}

static void wake_reader(hy_req_slot_t *s, bool always)
{
    atomic_fetch_add(&s->futex, 1); /* seq_cst: pairs with the reader's waiting flag */
    if (always || atomic_load(&s->waiting))
        hy_futex_wake(&s->futex, 1);
}

static hy_req_slot_t *handle_slot(hy_shm_t *shm, hy_req_handle_t h, char *err)
{
    hy_req_slot_t *s;

    if (h.idx >= (uint32_t)n_slots(shm)) {
        hy_err(err, HY_EINVAL, "request handle %u out of range", h.idx);
        return NULL;
    }
    s = &slots(shm)[h.idx];
    if (atomic_load_explicit(&s->gen, ACQ) != h.gen ||
        atomic_load_explicit(&s->state, ACQ) == HY_REQ_FREE) {
        hy_err(err, HY_ENOENT, "request handle %u/%u is stale", h.idx, h.gen);
        return NULL;
    }
    return s;
}

static bool is_final(uint32_t st)
{
    return st == HY_REQ_DONE || st == HY_REQ_CANCELLED || st == HY_REQ_ERROR;
}

/* ---- worker side ---------------------------------------------------------- */

int hy_req_submit(hy_shm_t *shm, const hy_req_params_t *p, const int32_t *prompt, int32_t n,
                  hy_req_handle_t *h, char *err)
{
    return hy_req_submit_grammar(shm, p, prompt, n, NULL, 0, h, err);
}

size_t hy_req_grammar_room(const hy_shm_t *shm, int32_t n)
{
    int32_t max = hy_shm_header(shm)->params.max_prompt_tokens;

    return n < 0 || n > max ? 0 : sizeof(int32_t) * (size_t)(max - n);
}

const void *hy_req_grammar(hy_shm_t *shm, int32_t idx)
{
    const hy_req_slot_t *s = hy_req_slot(shm, idx);

    if (s->params.grammar_len == 0)
        return NULL;
    return hy_req_prompt(shm, idx) + s->prompt_len;
}

int hy_req_submit_grammar(hy_shm_t *shm, const hy_req_params_t *p, const int32_t *prompt,
                          int32_t n, const void *grammar, size_t glen, hy_req_handle_t *h,
                          char *err)
{
    hy_shm_header_t *hdr = hy_shm_header_rw(shm);
    hy_stats_t *stats = hy_shm_stats(shm);
    int32_t ns = n_slots(shm), i, k, start, pid = (int32_t)getpid();
    hy_req_slot_t *s = NULL;
    int rc;

    if (n < 1 || n > hdr->params.max_prompt_tokens)
        return hy_err(err, HY_ERANGE, "prompt has %d tokens: must be 1..%d", n,
                      hdr->params.max_prompt_tokens);
    if (p->sampling.n_logprobs > hdr->params.ring_top_logprobs)
        return hy_err(err, HY_ERANGE, "top_logprobs = %d: this server keeps at most %d",
                      p->sampling.n_logprobs, hdr->params.ring_top_logprobs);
    if ((rc = hy_req_check(p, prompt, n, err)) != HY_OK)
        return rc;
    if (glen > hy_req_grammar_room(shm, n))
        return hy_err(err, HY_ERANGE,
                      "grammar of %zu bytes does not fit next to a %d-token prompt (%zu bytes left)",
                      glen, n, hy_req_grammar_room(shm, n));

    start = (int32_t)(atomic_fetch_add_explicit(&hdr->claim_hint, 1, RLX) % (uint32_t)ns);
    for (k = 0; k < ns; k++) {
        int32_t zero = 0;
        i = (start + k) % ns;
        if (atomic_load_explicit(&slots(shm)[i].owner_pid, RLX) != 0 ||
            atomic_load_explicit(&slots(shm)[i].state, RLX) != HY_REQ_FREE)
            continue;
        if (atomic_compare_exchange_strong(&slots(shm)[i].owner_pid, &zero, pid)) {
            s = &slots(shm)[i];
            break;
        }
    }
    if (s == NULL) {
        atomic_fetch_add_explicit(&stats->requests[HY_STATS_REQ_REJECTED], 1, RLX);
        return hy_err(err, HY_EFULL, "all %d request slots are busy", ns);
    }
    atomic_fetch_add_explicit(&stats->slots_used, 1, RLX);
    atomic_store_explicit(&s->state, HY_REQ_CLAIMED, REL);
    atomic_store_explicit(&s->released, 0, RLX);
    atomic_store_explicit(&s->cancel, 0, RLX);
    atomic_store_explicit(&s->waiting, 0, RLX);
    atomic_store_explicit(&s->head, 0, RLX);
    atomic_store_explicit(&s->tail, 0, RLX);
    s->params = *p;
    s->params.grammar_len = (uint32_t)glen;
    s->prompt_len = (uint32_t)n;
    s->submit_ns = hy_shm_now_ns();
    s->start_ns = s->first_token_ns = s->finish_ns = 0;
    s->finish_reason = HY_FINISH_NONE;
    s->error_code = 0;
    s->error_msg[0] = '\0';
    s->n_cached_tokens = s->n_generated = s->n_resumed = 0;
    s->dense_tokens = s->sparse_tokens = s->sparse_blocks_hot = s->sparse_blocks_warm = 0;
    s->sparse_blocks_cold = 0;
    memcpy((int32_t *)hy_req_prompt(shm, i), prompt, sizeof(int32_t) * (size_t)n);
    if (glen > 0)
        memcpy((int32_t *)hy_req_prompt(shm, i) + n, grammar, glen);
    s->seq = atomic_fetch_add_explicit(&hdr->submit_seq, 1, RLX);
    h->idx = (uint32_t)i;
    h->gen = atomic_load_explicit(&s->gen, RLX);
    atomic_fetch_add_explicit(&stats->waiting, 1, RLX);
    atomic_store_explicit(&s->state, HY_REQ_QUEUED, REL); /* publishes everything above */
    hy_shm_engine_kick(shm);
    return HY_OK;
}

static void fill_status(hy_req_slot_t *s, uint32_t st, bool done, hy_req_status_t *out)
{
    if (out == NULL)
        return;
    memset(out, 0, sizeof *out);
    out->state = st;
    out->done = done;
    out->n_prompt = (int32_t)s->prompt_len;
    if (is_final(st)) {
        /* the state load was an acquire: the engine's fields are visible */
        out->finish_reason = s->finish_reason;
        out->error_code = s->error_code;
        memcpy(out->error_msg, s->error_msg, sizeof out->error_msg);
        out->n_generated = s->n_generated;
        out->dense_tokens = s->dense_tokens;
        out->sparse_tokens = s->sparse_tokens;
        out->sparse_blocks_hot = s->sparse_blocks_hot;
        out->sparse_blocks_warm = s->sparse_blocks_warm;
        out->sparse_blocks_cold = s->sparse_blocks_cold;
    }
    out->n_cached = s->n_cached_tokens;
}

int hy_req_read(hy_shm_t *shm, hy_req_handle_t h, hy_ring_tok_t *out, int32_t max,
                int timeout_ms, hy_req_status_t *st, char *err)
{
    const hy_shm_header_t *hdr = hy_shm_header(shm);
    int64_t deadline = timeout_ms > 0 ? hy_shm_now_ns() + (int64_t)timeout_ms * 1000000 : 0;
    hy_req_slot_t *s = handle_slot(shm, h, err);
    int32_t got = 0;

    if (s == NULL)
        return HY_ENOENT;
    if (max < 0 || (max > 0 && out == NULL))
        return hy_err(err, HY_EINVAL, "read: bad buffer");
    for (;;) {
        uint32_t f = atomic_load_explicit(&s->futex, ACQ);
        uint64_t tail = atomic_load_explicit(&s->tail, RLX);
        uint64_t head = atomic_load_explicit(&s->head, ACQ);
        uint32_t state;
        int wait_ms;

        if (head > tail && max > 0) {
            while (tail < head && got < max) {
                const ring_ent_t *e = (const ring_ent_t *)ring_entry(shm, (int32_t)h.idx, tail);
                const ring_top_t *t = (const ring_top_t *)(e + 1);
                hy_ring_tok_t *o = &out[got++];
                int32_t j, nt = e->n_top;
                if (nt < 0 || nt > hdr->params.ring_top_logprobs)
                    nt = 0;
                o->token = e->token;
                o->logprob = e->logprob;
                o->n_top = nt;
                for (j = 0; j < nt; j++) {
                    o->top_ids[j] = t[j].id;
                    o->top_logprobs[j] = t[j].logprob;
                }
                tail++;
            }
            atomic_store_explicit(&s->tail, tail, REL); /* frees the entries */
            state = atomic_load_explicit(&s->state, ACQ);
            fill_status(s, state, false, st);
            return got;
        }
        state = atomic_load_explicit(&s->state, ACQ);
        if (is_final(state)) {
            /* the engine pushes before it publishes the final state */
            if (atomic_load_explicit(&s->head, ACQ) > tail && max > 0)
                continue;
            fill_status(s, state, atomic_load_explicit(&s->head, ACQ) == tail, st);
            return 0;
        }
        if (timeout_ms == 0)
            break;
        if (timeout_ms > 0) {
            int64_t left = deadline - hy_shm_now_ns();
            if (left <= 0)
                break;
            wait_ms = (int)((left + 999999) / 1000000);
        } else {
            wait_ms = -1;
        }
        atomic_store(&s->waiting, 1);
        if (atomic_load(&s->futex) == f)
            hy_futex_wait(&s->futex, f, wait_ms);
        atomic_store(&s->waiting, 0);
    }
    fill_status(s, atomic_load_explicit(&s->state, ACQ), false, st);
    return 0;
}

/* QUEUED -> CANCELLED before the engine took it: the engine will never see
 * the request, so let go on its behalf. */
static void cancel_slot(hy_shm_t *shm, hy_req_slot_t *s)
{
    uint32_t q = HY_REQ_QUEUED;

    atomic_store_explicit(&s->cancel, 1, REL);
    if (atomic_compare_exchange_strong(&s->state, &q, HY_REQ_CANCELLED)) {
        hy_stats_t *stats = hy_shm_stats(shm);
        s->finish_reason = HY_FINISH_CANCELLED;
        atomic_fetch_sub_explicit(&stats->waiting, 1, RLX);
        atomic_fetch_add_explicit(&stats->requests[HY_STATS_REQ_CANCELLED], 1, RLX);
        let_go(shm, s, REL_ENGINE);
        wake_reader(s, true);
    }
    hy_shm_engine_kick(shm);
}

int hy_req_cancel(hy_shm_t *shm, hy_req_handle_t h, char *err)
{
    hy_req_slot_t *s = handle_slot(shm, h, err);

    if (s == NULL)
        return HY_ENOENT;
    if (!is_final(atomic_load_explicit(&s->state, ACQ)))
        cancel_slot(shm, s);
    return HY_OK;
}

int hy_req_release(hy_shm_t *shm, hy_req_handle_t h, char *err)
{
    hy_req_slot_t *s = handle_slot(shm, h, err);

    if (s == NULL)
        return HY_ENOENT;
    if (atomic_load_explicit(&s->released, ACQ) & REL_WORKER)
        return hy_err(err, HY_EINVAL, "request handle %u released twice", h.idx);
    if (!is_final(atomic_load_explicit(&s->state, ACQ)))
        cancel_slot(shm, s);
    let_go(shm, s, REL_WORKER);
    return HY_OK;
}

/* ---- engine side ---------------------------------------------------------- */

int hy_req_take(hy_shm_t *shm, int32_t *idx)
{
    hy_stats_t *stats = hy_shm_stats(shm);
    int32_t i, ns = n_slots(shm);

    for (;;) {
        int32_t best = -1;
        uint32_t q = HY_REQ_QUEUED;
        for (i = 0; i < ns; i++) {
            hy_req_slot_t *s = &slots(shm)[i];
            if (atomic_load_explicit(&s->state, ACQ) != HY_REQ_QUEUED)
                continue;
            if (best < 0 || s->params.priority < slots(shm)[best].params.priority ||
                (s->params.priority == slots(shm)[best].params.priority &&
                 s->seq < slots(shm)[best].seq))
                best = i;
        }
        if (best < 0)
            return HY_ENOENT;
        /* a worker may cancel it between the scan and here: rescan then */
        if (atomic_compare_exchange_strong(&slots(shm)[best].state, &q, HY_REQ_RUNNING)) {
            hy_req_slot_t *s = &slots(shm)[best];
            /* a request a dead engine had taken (hy_shm_engine_lost) waited
             * in the queue once: its second take is not queue time */
            if (s->start_ns == 0) {
                s->start_ns = hy_shm_now_ns();
                hy_stats_observe(&stats->queue, (uint64_t)(s->start_ns - s->submit_ns) / 1000);
            }
            atomic_fetch_sub_explicit(&stats->waiting, 1, RLX);
            atomic_fetch_add_explicit(&stats->running, 1, RLX);
            *idx = best;
            return HY_OK;
        }
    }
}

bool hy_req_cancel_requested(hy_shm_t *shm, int32_t idx)
{
    hy_req_slot_t *s = hy_req_slot(shm, idx);
    return s == NULL || atomic_load_explicit(&s->cancel, ACQ) != 0;
}

int hy_req_push(hy_shm_t *shm, int32_t idx, const hy_ring_tok_t *t)
{
    const hy_shm_header_t *hdr = hy_shm_header(shm);
    hy_req_slot_t *s = hy_req_slot(shm, idx);
    uint64_t head, tail;
    ring_ent_t *e;
    ring_top_t *top;
    int32_t j, nt;

    if (s == NULL || atomic_load_explicit(&s->state, RLX) != HY_REQ_RUNNING)
        return HY_EINVAL;
    head = atomic_load_explicit(&s->head, RLX);
    tail = atomic_load_explicit(&s->tail, ACQ); /* the reader is done with those entries */
    if (head - tail >= (uint64_t)hdr->params.ring_capacity)
        return HY_EFULL;
    e = (ring_ent_t *)ring_entry(shm, idx, head);
    top = (ring_top_t *)(e + 1);
    nt = HY_MIN(HY_MAX(t->n_top, 0), hdr->params.ring_top_logprobs);
    e->token = t->token;
    e->logprob = t->logprob;
    e->n_top = nt;
    e->pad = 0;
    for (j = 0; j < nt; j++) {
        top[j].id = t->top_ids[j];
        top[j].logprob = t->top_logprobs[j];
    }
    /* before head moves: a pushed token is always in the history */
    if (head < (uint64_t)hdr->params.max_prompt_tokens)
        slot_history(shm, idx)[head] = (hy_req_hist_t){t->token, t->rng_draws, t->flags};
    if (head == 0)
        s->first_token_ns = hy_shm_now_ns();
    s->n_generated++;
    atomic_store_explicit(&s->head, head + 1, REL);
    wake_reader(s, false);
    return HY_OK;
}

int hy_req_finish(hy_shm_t *shm, int32_t idx, uint32_t state, int32_t finish_reason,
                  int32_t error_code, const char *msg)
{
    hy_stats_t *stats = hy_shm_stats(shm);
    hy_req_slot_t *s = hy_req_slot(shm, idx);
    uint32_t running = HY_REQ_RUNNING;
    int kind;

    if (s == NULL || !is_final(state))
        return HY_EINVAL;
    s->finish_ns = hy_shm_now_ns();
    s->finish_reason = finish_reason;
    s->error_code = error_code;
    if (msg != NULL) {
        strncpy(s->error_msg, msg, sizeof s->error_msg - 1);
        s->error_msg[sizeof s->error_msg - 1] = '\0';
    }
    if (!atomic_compare_exchange_strong(&s->state, &running, state))
        return HY_EINVAL; /* not a request this engine took */
    kind = state == HY_REQ_ERROR       ? HY_STATS_REQ_ERROR
           : state == HY_REQ_CANCELLED ? HY_STATS_REQ_CANCELLED
           : finish_reason == HY_FINISH_LENGTH ? HY_STATS_REQ_LENGTH
                                               : HY_STATS_REQ_STOP;
    atomic_fetch_add_explicit(&stats->requests[kind], 1, RLX);
    atomic_fetch_sub_explicit(&stats->running, 1, RLX);
    atomic_fetch_add_explicit(&stats->prompt_tokens, s->prompt_len, RLX);
    atomic_fetch_add_explicit(&stats->cached_prompt_tokens, (uint64_t)s->n_cached_tokens, RLX);
    atomic_fetch_add_explicit(&stats->generation_tokens, (uint64_t)s->n_generated, RLX);
    hy_stats_observe(&stats->e2e, (uint64_t)(s->finish_ns - s->submit_ns) / 1000);
    if (s->n_generated > 0)
        hy_stats_observe(&stats->ttft, (uint64_t)(s->first_token_ns - s->submit_ns) / 1000);
    if (s->n_generated > 1)
        hy_stats_observe(&stats->tpot, (uint64_t)(s->finish_ns - s->first_token_ns) / 1000 /
                                           (uint64_t)(s->n_generated - 1));
    wake_reader(s, true);
    let_go(shm, s, REL_ENGINE);
    return HY_OK;
}

/* ---- the engine's request source ------------------------------------------ */

static int src_take(hy_req_source_t *src, hy_req_taken_t *out)
{
    hy_shm_t *shm = src->ctx;
    const hy_req_slot_t *s;
    int32_t idx;
    int rc;

    if ((rc = hy_req_take(shm, &idx)) != HY_OK)
        return rc;
    s = &slots(shm)[idx];
    out->id = idx;
    out->prompt = hy_req_prompt(shm, idx);
    out->n_prompt = (int32_t)s->prompt_len;
    out->order = s->seq;
    out->params = s->params;
    out->grammar = hy_req_grammar(shm, idx);
    out->n_resumed = s->n_resumed;
    out->resumed = s->n_resumed > 0 ? slot_history(shm, idx) : NULL;
    return HY_OK;
}

static bool src_cancelled(hy_req_source_t *src, int32_t id)
{
    return hy_req_cancel_requested(src->ctx, id);
}

static void src_started(hy_req_source_t *src, int32_t id, int32_t n_cached)
{
    hy_req_slot_t *s = hy_req_slot(src->ctx, id);

    /* a resumed request keeps what its first admission found */
    if (s != NULL && s->n_resumed == 0)
        s->n_cached_tokens = n_cached;
}

/* Each token handed to a reader counts in the generation tokens/s gauges. */
static int src_push(hy_req_source_t *src, int32_t id, const hy_ring_tok_t *t)
{
    int rc = hy_req_push(src->ctx, id, t);

    if (rc == HY_OK)
        hy_rwin_add(&hy_shm_stats(src->ctx)->generation_rate, hy_shm_now_ns(), 1);
    return rc;
}

/* Written before finish publishes the final state (a release), so a
 * reader that sees the end sees these.  A request resumed after an engine
 * crash counts what its new engine computed (the recomputed context too):
 * the dead one never reached its end. */
static void src_attn_counted(hy_req_source_t *src, int32_t id, const hy_attn_counts_t *c)
{
    hy_req_slot_t *s = hy_req_slot(src->ctx, id);
    hy_stats_t *st = hy_shm_stats(src->ctx);

    if (s == NULL)
        return;
    s->dense_tokens += c->dense_tokens;
    s->sparse_tokens += c->sparse_tokens;
    s->sparse_blocks_hot += c->blocks_hot;
    s->sparse_blocks_warm += c->blocks_warm;
    s->sparse_blocks_cold += c->blocks_cold;
    /* and for /metrics */
    atomic_fetch_add(&st->attn_dense_tokens, c->dense_tokens);
    atomic_fetch_add(&st->attn_sparse_tokens, c->sparse_tokens);
    atomic_fetch_add(&st->sparse_blocks_hot, c->blocks_hot);
    atomic_fetch_add(&st->sparse_blocks_warm, c->blocks_warm);
    atomic_fetch_add(&st->sparse_blocks_cold, c->blocks_cold);
}

static void src_finish(hy_req_source_t *src, int32_t id, uint32_t state, int32_t reason,
                       int32_t code, const char *msg)
{
    hy_req_finish(src->ctx, id, state, reason, code, msg);
}

static uint32_t src_epoch(hy_req_source_t *src)
{
    return atomic_load(&hy_shm_header_rw(src->ctx)->engine_futex);
}

static void src_wait(hy_req_source_t *src, uint32_t seen, int timeout_ms)
{
    hy_shm_engine_wait(src->ctx, seen, timeout_ms);
}

static void src_kick(hy_req_source_t *src)
{
    hy_shm_engine_kick(src->ctx);
}

static void src_preempted(hy_req_source_t *src)
{
    atomic_fetch_add_explicit(&hy_shm_stats(src->ctx)->preemptions, 1, RLX);
}

static void src_prompt_computed(hy_req_source_t *src, int32_t n)
{
    hy_rwin_add(&hy_shm_stats(src->ctx)->prompt_rate, hy_shm_now_ns(), (uint32_t)n);
}

/* Into the segment's stats, where /metrics (server/metrics.c) reads them. */
static void src_grammar_counted(hy_req_source_t *src, const hy_grammar_counts_t *d)
{
    hy_stats_t *st = hy_shm_stats(src->ctx);

    atomic_fetch_add_explicit(&st->grammar_requests, d->requests, RLX);
    atomic_fetch_add_explicit(&st->grammar_compiles, d->compiles, RLX);
    atomic_fetch_add_explicit(&st->grammar_cache_hits, d->cache_hits, RLX);
    atomic_fetch_add_explicit(&st->grammar_compile_us, d->compile_us, RLX);
    atomic_fetch_add_explicit(&st->grammar_masks, d->masks, RLX);
    atomic_fetch_add_explicit(&st->grammar_mask_us, d->mask_us, RLX);
    atomic_fetch_add_explicit(&st->grammar_fill_us, d->fill_us, RLX);
    atomic_fetch_add_explicit(&st->grammar_closed, d->closed, RLX);
}

static const struct hy_req_source_i hy_ring_source_methods = {
    .name = "shm",
    .take = src_take,
    .cancelled = src_cancelled,
    .started = src_started,
    .push = src_push,
    .finish = src_finish,
    .epoch = src_epoch,
    .wait = src_wait,
    .kick = src_kick,
    .preempted = src_preempted,
    .prompt_computed = src_prompt_computed,
    .grammar_counted = src_grammar_counted,
    .attn_counted = src_attn_counted,
};

void hy_ring_source(hy_shm_t *shm, hy_req_source_t *out)
{
    out->i = &hy_ring_source_methods;
    out->ctx = shm;
}

/* ---- coordinator ---------------------------------------------------------- */

int hy_shm_reap_owner(hy_shm_t *shm, pid_t pid)
{
    int32_t i, ns = n_slots(shm), reaped = 0;

    if (pid <= 0)
        return 0;
    for (i = 0; i < ns; i++) {
        hy_req_slot_t *s = &slots(shm)[i];
        int32_t owner = (int32_t)pid;
        uint32_t st;

        if (atomic_load_explicit(&s->owner_pid, ACQ) != (int32_t)pid)
            continue;
        st = atomic_load_explicit(&s->state, ACQ);
        if (st == HY_REQ_FREE) {
            /* died between the claim CAS and marking it CLAIMED */
            atomic_compare_exchange_strong(&s->owner_pid, &owner, 0);
            continue;
        }
        if (atomic_load_explicit(&s->released, ACQ) & REL_WORKER)
            continue; /* it had let go already; the engine frees it */
        if (st == HY_REQ_CLAIMED) {
            /* died while filling it: the engine never saw it */
            atomic_store_explicit(&s->released, REL_WORKER | REL_ENGINE, RLX);
            slot_free(shm, s);
        } else {
            if (!is_final(st))
                cancel_slot(shm, s);
            let_go(shm, s, REL_WORKER);
        }
        reaped++;
    }
    atomic_fetch_add_explicit(&hy_shm_stats(shm)->reaped_requests, (uint64_t)reaped, RLX);
    return reaped;
}

/* A request the dead engine held ends here (state ERROR or CANCELLED, from
 * `from`): what hy_req_finish would have done. */
static bool lost_finish(hy_shm_t *shm, hy_req_slot_t *s, uint32_t from, uint32_t state,
                        const char *msg)
{
    hy_stats_t *stats = hy_shm_stats(shm);
    uint32_t expect = from;

    s->finish_ns = hy_shm_now_ns();
    s->finish_reason = state == HY_REQ_ERROR ? HY_FINISH_ERROR : HY_FINISH_CANCELLED;
    s->error_code = state == HY_REQ_ERROR ? HY_EUNAVAILABLE : 0;
    snprintf(s->error_msg, sizeof s->error_msg, "%s", msg);
    if (!atomic_compare_exchange_strong(&s->state, &expect, state))
        return false; /* its worker cancelled it first (QUEUED only) */
    atomic_fetch_sub_explicit(from == HY_REQ_RUNNING ? &stats->running : &stats->waiting, 1, RLX);
    atomic_fetch_add_explicit(&stats->requests[state == HY_REQ_ERROR ? HY_STATS_REQ_ERROR
                                                                      : HY_STATS_REQ_CANCELLED],
                              1, RLX);
    wake_reader(s, true);
    let_go(shm, s, REL_ENGINE);
    return true;
}

int hy_shm_engine_lost(hy_shm_t *shm, const char *fail_msg, int *requeued, int *failed)
{
    hy_stats_t *stats = hy_shm_stats(shm);
    int32_t i, ns = n_slots(shm);
    int n_req = 0, n_fail = 0;

    if (hy_pt_reset(hy_shm_pt(shm)) != HY_OK)
        return HY_EIO;
    for (i = 0; i < ns; i++) {
        hy_req_slot_t *s = &slots(shm)[i];
        uint32_t st = atomic_load_explicit(&s->state, ACQ);

        if (st == HY_REQ_RUNNING) {
            if (atomic_load_explicit(&s->cancel, ACQ)) {
                lost_finish(shm, s, st, HY_REQ_CANCELLED, "cancelled");
            } else if (fail_msg != NULL) {
                n_fail += lost_finish(shm, s, st, HY_REQ_ERROR, fail_msg);
            } else {
                /* every token pushed is in the ring or read already: the
                 * next engine goes on from there */
                s->n_resumed = (int32_t)atomic_load_explicit(&s->head, ACQ);
                atomic_fetch_sub_explicit(&stats->running, 1, RLX);
                atomic_fetch_add_explicit(&stats->waiting, 1, RLX);
                atomic_store_explicit(&s->state, HY_REQ_QUEUED, REL);
                n_req++;
            }
        } else if (st == HY_REQ_QUEUED && fail_msg != NULL) {
            n_fail += lost_finish(shm, s, st, HY_REQ_ERROR, fail_msg);
        } else if (is_final(st) && !(atomic_load_explicit(&s->released, ACQ) & REL_ENGINE)) {
            /* it died between publishing the end and letting go */
            let_go(shm, s, REL_ENGINE);
        }
    }
    hy_shm_engine_kick(shm);
    if (requeued != NULL)
        *requeued = n_req;
    if (failed != NULL)
        *failed = n_fail;
    return HY_OK;
}

int hy_shm_fail_queued(hy_shm_t *shm, const char *fail_msg)
{
    int32_t i, ns = n_slots(shm);
    int n = 0;

    for (i = 0; i < ns; i++) {
        hy_req_slot_t *s = &slots(shm)[i];

        if (atomic_load_explicit(&s->state, ACQ) == HY_REQ_QUEUED)
            n += lost_finish(shm, s, HY_REQ_QUEUED, HY_REQ_ERROR, fail_msg);
    }
    return n;
}

int32_t hy_shm_count_stalled(hy_shm_t *shm)
{
    uint64_t cap = (uint64_t)hy_shm_header(shm)->params.ring_capacity;
    int32_t i, ns = n_slots(shm), n = 0;

    for (i = 0; i < ns; i++) {
        hy_req_slot_t *s = hy_req_slot(shm, i);

        if (atomic_load_explicit(&s->state, RLX) == HY_REQ_RUNNING &&
            atomic_load_explicit(&s->head, ACQ) - atomic_load_explicit(&s->tail, ACQ) >= cap)
            n++;
    }
    return n;
}
