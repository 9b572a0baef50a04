/*
 * local.c - the in-process request source (local.h).  A request record goes
 * FREE -> QUEUED -> RUNNING -> DONE | CANCELLED | ERROR and back to FREE when
 * both sides let go of it, the caller (hy_local_release) and the engine
 * (finish, or at once for a request cancelled before it was taken): the same
 * life as a shared request slot (ipc/ring.h) without the atomics, since one
 * thread does everything.
 */
#include "engine/local.h"
#include "grammar/grammar_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    bool used;        /* submitted and not yet free again */
    bool user_done;   /* the caller released it */
    bool engine_done; /* the engine let go (or never took it) */
    bool cancel;
    uint64_t order;
    hy_req_params_t params;
    int32_t *prompt;  /* [st.n_prompt] */
    char *grammar;    /* [params.grammar_len] spec bytes, NULL when unconstrained */
    hy_local_status_t st;
} hy_local_req_t;

struct hy_local {
    hy_local_req_t *reqs; /* [n] */
    int32_t n;
    uint64_t next_order;
    uint32_t epoch;       /* bumped on submit and cancel */
    hy_local_token_fn on_token;
    void *user;
    hy_grammar_counts_t grammar; /* totals of what the engine reported */
    hy_attn_counts_t attn;       /* likewise */
};

static int64_t hy_local_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int hy_local_create(hy_local_t **out, int32_t n_slots, hy_local_token_fn on_token, void *user,
                    char *err)
{
    hy_local_t *l;

    *out = NULL;
    if (n_slots < 1 || n_slots > 65536)
        return hy_err(err, HY_ERANGE, "local requests: %d slots: must be 1..65536", n_slots);
    l = calloc(1, sizeof *l);
    if (l == NULL || (l->reqs = calloc((size_t)n_slots, sizeof *l->reqs)) == NULL) {
        free(l);
        return hy_err(err, HY_ENOMEM, "out of memory");
    }
    l->n = n_slots;
    l->on_token = on_token;
    l->user = user;
    *out = l;
    return HY_OK;
}

void hy_local_free(hy_local_t *l)
{
    int32_t i;

    if (l == NULL)
        return;
    for (i = 0; i < l->n; i++) {
        free(l->reqs[i].prompt);
        free(l->reqs[i].grammar);
    }
    free(l->reqs);
    free(l);
}

static hy_local_req_t *hy_local_req(const hy_local_t *l, int32_t id)
{
    return id >= 0 && id < l->n && l->reqs[id].used ? &l->reqs[id] : NULL;
}

/* Both sides let go: the record is free again. */
static void hy_local_let_go(hy_local_req_t *r)
{
    if (!r->user_done || !r->engine_done)
        return;
    free(r->prompt);
    free(r->grammar);
    memset(r, 0, sizeof *r);
}

int hy_local_submit(hy_local_t *l, const hy_req_params_t *p, const int32_t *prompt, int32_t n,
                    int32_t *id, char *err)
{
    return hy_local_submit_grammar(l, p, prompt, n, NULL, 0, id, err);
}

int hy_local_submit_grammar(hy_local_t *l, const hy_req_params_t *p, const int32_t *prompt,
                            int32_t n, const void *grammar, size_t glen, int32_t *id, char *err)
{
    hy_local_req_t *r = NULL;
    int32_t i;
    int rc;

    if ((rc = hy_req_check(p, prompt, n, err)) != HY_OK)
        return rc;
    /* No arena bounds it here (a request slot's does): the largest spec
     * a grammar can pack to, so nothing the engine would refuse is copied. */
    if (glen > HY_GRAMMAR_MAX_SPEC)
        return hy_err(err, HY_ERANGE, "grammar spec of %zu bytes: at most %d", glen,
                      HY_GRAMMAR_MAX_SPEC);
    if (glen > 0 && grammar == NULL)
        return hy_err(err, HY_EINVAL, "grammar spec of %zu bytes at NULL", glen);
    for (i = 0; i < l->n && r == NULL; i++)
        if (!l->reqs[i].used)
            r = &l->reqs[i];
    if (r == NULL)
        return hy_err(err, HY_EFULL, "all %d local request slots are busy", l->n);
    if ((r->prompt = malloc(sizeof(int32_t) * (size_t)n)) == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory for a %d-token prompt", n);
    if (glen > 0 && (r->grammar = malloc(glen)) == NULL) {
        free(r->prompt);
        r->prompt = NULL;
        return hy_err(err, HY_ENOMEM, "out of memory for a %zu-byte grammar spec", glen);
    }
    memcpy(r->prompt, prompt, sizeof(int32_t) * (size_t)n);
    if (glen > 0)
        memcpy(r->grammar, grammar, glen);
    r->used = true;
    r->params = *p;
    r->params.grammar_len = (uint32_t)glen;
    r->order = l->next_order++;
    r->st.state = HY_REQ_QUEUED;
    r->st.n_prompt = n;
    r->st.submit_ns = hy_local_now_ns();
    l->epoch++;
    *id = (int32_t)(r - l->reqs);
    return HY_OK;
}

void hy_local_cancel(hy_local_t *l, int32_t id)
{
    hy_local_req_t *r = hy_local_req(l, id);

    if (r == NULL || r->st.done)
        return;
    r->cancel = true;
    l->epoch++;
    if (r->st.state == HY_REQ_QUEUED) {
        /* the engine never took it: it never will */
        r->st.state = HY_REQ_CANCELLED;
        r->st.finish_reason = HY_FINISH_CANCELLED;
        r->st.done = true;
        r->st.finish_ns = hy_local_now_ns();
        r->engine_done = true;
    }
}

const hy_local_status_t *hy_local_status(const hy_local_t *l, int32_t id)
{
    const hy_local_req_t *r = hy_local_req(l, id);

    return r != NULL ? &r->st : NULL;
}

void hy_local_release(hy_local_t *l, int32_t id)
{
    hy_local_req_t *r = hy_local_req(l, id);

    if (r == NULL || r->user_done)
        return;
    hy_local_cancel(l, id);
    r->user_done = true;
    hy_local_let_go(r);
}

/* ---- the engine's side --------------------------------------------------- */

static int hy_local_take(hy_req_source_t *src, hy_req_taken_t *out)
{
    hy_local_t *l = src->ctx;
    hy_local_req_t *best = NULL;
    int32_t i;

    for (i = 0; i < l->n; i++) {
        hy_local_req_t *r = &l->reqs[i];

        if (!r->used || r->st.state != HY_REQ_QUEUED)
            continue;
        if (best == NULL || r->params.priority < best->params.priority ||
            (r->params.priority == best->params.priority && r->order < best->order))
            best = r;
    }
    if (best == NULL)
        return HY_ENOENT;
    best->st.state = HY_REQ_RUNNING;
    out->id = (int32_t)(best - l->reqs);
    out->prompt = best->prompt;
    out->n_prompt = best->st.n_prompt;
    out->order = best->order;
    out->params = best->params;
    out->grammar = best->grammar;
    out->resumed = NULL; /* an in-process queue dies with its engine */
    out->n_resumed = 0;
    return HY_OK;
}

static bool hy_local_cancelled(hy_req_source_t *src, int32_t id)
{
    const hy_local_req_t *r = hy_local_req(src->ctx, id);

    return r == NULL || r->cancel;
}

static void hy_local_started(hy_req_source_t *src, int32_t id, int32_t n_cached)
{
    hy_local_req_t *r = hy_local_req(src->ctx, id);

    if (r != NULL)
        r->st.n_cached = n_cached;
}

static int hy_local_push(hy_req_source_t *src, int32_t id, const hy_ring_tok_t *t)
{
    hy_local_t *l = src->ctx;
    hy_local_req_t *r = hy_local_req(l, id);

    if (r == NULL || r->st.state != HY_REQ_RUNNING)
        return HY_EINVAL;
    if (r->st.n_generated++ == 0)
        r->st.first_token_ns = hy_local_now_ns();
    if (l->on_token != NULL && !r->user_done)
        l->on_token(l->user, id, t);
    return HY_OK;
}

static void hy_local_finish(hy_req_source_t *src, int32_t id, uint32_t state, int32_t reason,
                            int32_t code, const char *msg)
{
    hy_local_req_t *r = hy_local_req(src->ctx, id);

    if (r == NULL || r->st.state != HY_REQ_RUNNING)
        return;
    r->st.state = state;
    r->st.finish_reason = reason;
    r->st.error_code = code;
    if (msg != NULL)
        snprintf(r->st.error_msg, sizeof r->st.error_msg, "%s", msg);
    r->st.finish_ns = hy_local_now_ns();
    r->st.done = true;
    r->engine_done = true;
    hy_local_let_go(r);
}

static uint32_t hy_local_epoch(hy_req_source_t *src)
{
    return ((hy_local_t *)src->ctx)->epoch;
}

/* Nobody else can submit while the one thread waits: nothing to wait for. */
static void hy_local_wait(hy_req_source_t *src, uint32_t seen, int timeout_ms)
{
    (void)src;
    (void)seen;
    (void)timeout_ms;
}

static void hy_local_kick(hy_req_source_t *src)
{
    ((hy_local_t *)src->ctx)->epoch++;
}

/* No /metrics in process: preemptions and prompt work are not counted. */
static void hy_local_preempted(hy_req_source_t *src)
{
    (void)src;
}

static void hy_local_prompt_computed(hy_req_source_t *src, int32_t n)
{
    (void)src;
    (void)n;
}

static void hy_local_grammar_counted(hy_req_source_t *src, const hy_grammar_counts_t *d)
{
    hy_grammar_counts_t *c = &((hy_local_t *)src->ctx)->grammar;

    c->requests += d->requests;
    c->compiles += d->compiles;
    c->cache_hits += d->cache_hits;
    c->compile_us += d->compile_us;
    c->masks += d->masks;
    c->mask_us += d->mask_us;
    c->fill_us += d->fill_us;
    c->closed += d->closed;
}

void hy_local_grammar_counts(const hy_local_t *l, hy_grammar_counts_t *out)
{
    *out = l->grammar;
}

static void hy_local_attn_counted(hy_req_source_t *src, int32_t id, const hy_attn_counts_t *d)
{
    hy_attn_counts_t *c = &((hy_local_t *)src->ctx)->attn;

    (void)id;
    c->dense_tokens += d->dense_tokens;
    c->sparse_tokens += d->sparse_tokens;
    c->blocks_hot += d->blocks_hot;
    c->blocks_warm += d->blocks_warm;
    c->blocks_cold += d->blocks_cold;
}

void hy_local_attn_counts(const hy_local_t *l, hy_attn_counts_t *out)
{
    *out = l->attn;
}

static const struct hy_req_source_i hy_local_methods = {
    .name = "local",
    .take = hy_local_take,
    .cancelled = hy_local_cancelled,
    .started = hy_local_started,
    .push = hy_local_push,
    .finish = hy_local_finish,
    .epoch = hy_local_epoch,
    .wait = hy_local_wait,
    .kick = hy_local_kick,
    .preempted = hy_local_preempted,
    .prompt_computed = hy_local_prompt_computed,
    .grammar_counted = hy_local_grammar_counted,
    .attn_counted = hy_local_attn_counted,
};

void hy_local_source(hy_local_t *l, hy_req_source_t *out)
{
    out->i = &hy_local_methods;
    out->ctx = l;
}

/* ---- engine + source + page table ------------------------------------------ */

int hy_local_engine_open(hy_local_engine_t *le, hy_model_t *m, hy_backend_t *be,
                         const hy_engine_opts_t *o, hy_local_token_fn on_token, void *user,
                         char *err)
{
    hy_pt_params_t pp;
    hy_req_source_t src;
    int rc;

    memset(le, 0, sizeof *le);
    if ((rc = hy_engine_pt_params(m, be, o, &pp, err)) != HY_OK ||
        (rc = hy_pt_create(&le->pt, &pp, err)) != HY_OK ||
        (rc = hy_local_create(&le->local, o->n_request_slots, on_token, user, err)) != HY_OK)
        goto fail;
    hy_local_source(le->local, &src);
    if ((rc = hy_engine_create(&le->engine, m, be, le->pt, &src, o, err)) != HY_OK)
        goto fail;
    return HY_OK;
fail:
    hy_local_engine_close(le, NULL);
    return rc;
}

int hy_local_engine_wait(hy_local_engine_t *le, int32_t id, char *err)
{
    const hy_local_status_t *st;

    while ((st = hy_local_status(le->local, id)) != NULL && !st->done)
        if (hy_engine_poll(le->engine) == 0 && !hy_local_status(le->local, id)->done)
            return hy_err(err, HY_EIO, "the engine cannot run request %d (too few KV pages "
                          "or state slots for it)", id);
    return st != NULL ? HY_OK : hy_err(err, HY_ENOENT, "request %d is not submitted", id);
}

int hy_local_engine_close(hy_local_engine_t *le, char *err)
{
    char sub[HY_ERR_LEN];
    hy_pt_counts_t c;
    int rc = HY_OK;

    if (le->engine != NULL)
        hy_engine_cancel_all(le->engine, "the command is ending");
    if (le->pt != NULL) {
        hy_pt_counts(le->pt, &c);
        if (hy_pt_check(le->pt, sub) != HY_OK)
            rc = hy_err(err, HY_EFORMAT, "page table: %s", sub);
        else if (le->engine != NULL &&
                 (c.pages_used || c.swa_used || c.state_used || c.ckpt_used))
            rc = hy_err(err, HY_EFORMAT, "the engine kept %d pages (+ %d sliding-window), %d "
                        "state slots, %d checkpoints after its last request", c.pages_used,
                        c.swa_used, c.state_used,
                        c.ckpt_used);
    }
    hy_engine_free(le->engine);
    hy_local_free(le->local);
    hy_pt_destroy(le->pt);
    memset(le, 0, sizeof *le);
    return rc;
}
