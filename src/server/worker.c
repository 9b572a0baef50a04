/*
 * worker.c - the FastCGI worker: accept a request, route it, and for the
 * generation routes turn the OpenAI body into prompt ids, submit one engine
 * request per choice through the shared-memory ring, and stream the tokens
 * back (SSE) or collect them (one JSON body).  Text goes through the
 * streaming detokenizer and the stop-string matcher so a client never sees
 * half a UTF-8 character or half a stop string.  A client that goes away
 * (write failure, or the nginx connection hanging up while we wait) cancels
 * its engine requests at once, so its KV pages and slot are freed.
 */
#define _GNU_SOURCE /* POLLRDHUP */
#include "server/worker.h"

#include "config.h" /* PACKAGE_VERSION */

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcgiapp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "grammar/grammar_cache.h"
#include "server/api.h"
#include "server/json_out.h"
#include "server/stop.h"

#define WK_POLL_MS 50        /* longest wait between client-liveness checks */
#define WK_READ_BATCH 64     /* ring tokens read per call */
#define WK_RETRY_AFTER_S 2

/* ---- per-request arena: every allocation of one request, freed at once ---- */

typedef struct wk_blk {
    struct wk_blk *next;
    max_align_t data[];
} wk_blk_t;

typedef struct {
    wk_blk_t *head;
} wk_arena_t;

static void *wk_alloc(wk_arena_t *a, size_t n)
{
    wk_blk_t *b;

    if (n > SIZE_MAX - sizeof *b)
        return NULL;
    b = malloc(sizeof *b + (n ? n : 1));
    if (b == NULL)
        return NULL;
    b->next = a->head;
    a->head = b;
    return b->data;
}

static void wk_arena_free(wk_arena_t *a)
{
    while (a->head) {
        wk_blk_t *n = a->head->next;
        free(a->head);
        a->head = n;
    }
}

/* ---- one request ---------------------------------------------------------- */

typedef struct {
    hy_worker_ctx_t *w;
    FCGX_Request *rq;
    wk_arena_t arena;
    char id[64];         /* request id, also the response id */
    const char *route;
    int status;          /* HTTP status sent */
    bool head_sent;      /* 200 headers are out (errors go in the stream) */
    bool client_gone;
    int64_t t0_ns;
    int64_t ttft_ns;     /* 0 until the first token arrived */
    int32_t prompt_tokens, cached_tokens, completion_tokens;
} wk_req_t;

static uint64_t wk_random64(void)
{
    uint64_t r = 0;

    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        r = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid() << 32 ^
            (uint64_t)ts.tv_sec;
    }
    return r;
}

/* Writes and flushes; a failure means the client (nginx) is gone. */
static int wk_put(wk_req_t *r, const char *s, size_t n)
{
    if (r->client_gone)
        return -1;
    if ((n > 0 && FCGX_PutStr(s, (int)n, r->rq->out) < 0) || FCGX_FFlush(r->rq->out) < 0) {
        r->client_gone = true;
        hy_log(LOG_WARNING, "client_gone", "req=%s route=%s stream_err=%d", r->id, r->route,
               FCGX_GetError(r->rq->out));
        return -1;
    }
    return 0;
}

/* Whether nginx hung up on us while we wait for tokens (it closes the
 * upstream connection when its client aborts; nothing else is sent after
 * the request body, so any hang-up means the client is gone). */
static bool wk_peer_closed(wk_req_t *r)
{
    struct pollfd p = {.fd = r->rq->ipcFd, .events = POLLRDHUP};

    if (r->client_gone)
        return true;
    if (p.fd < 0)
        return false;
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
        r->client_gone = true;
        hy_log(LOG_WARNING, "client_gone", "req=%s route=%s stream_err=hangup", r->id,
               r->route);
        return true;
    }
    return false;
}

static void wk_send_error(wk_req_t *r, const hy_api_error_t *e, const char *allow)
{
    char *hdr = NULL, *body = NULL;

    r->status = e->status;
    if (hy_api_error_headers(e, allow, &hdr) != HY_OK ||
        hy_api_error_to_json(e, &body) != HY_OK) {
        free(hdr);
        free(body);
        wk_put(r, "Status: 500 Internal Server Error\r\nContent-Type: text/plain\r\n\r\n"
                  "out of memory\n", 78);
        r->status = 500;
        return;
    }
    if (wk_put(r, hdr, strlen(hdr)) == 0)
        wk_put(r, body, strlen(body));
    free(hdr);
    free(body);
}

static void wk_send_body(wk_req_t *r, const char *ctype, const char *body, size_t len)
{
    char hdr[256];
    int n = snprintf(hdr, sizeof hdr,
                     "Status: 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Cache-Control: no-cache\r\n\r\n",
                     ctype, len);

    r->status = 200;
    if (wk_put(r, hdr, (size_t)n) == 0)
        wk_put(r, body, len);
}

static void wk_send_json(wk_req_t *r, int rc, char *body, size_t len)
{
    hy_api_error_t e;

    if (rc != HY_OK) {
        hy_api_err_internal(&e, "cannot format the response");
        wk_send_error(r, &e, NULL);
    } else {
        wk_send_body(r, "application/json", body, len);
    }
    free(body);
}

/* Reads exactly CONTENT_LENGTH bytes (nginx buffers the body, so the length
 * is always known); 413 above server.max_body_bytes. */
static int wk_read_body(wk_req_t *r, char **body, size_t *len, hy_api_error_t *e)
{
    const char *cl = FCGX_GetParam("CONTENT_LENGTH", r->rq->envp);
    unsigned long long n = 0;
    size_t got = 0;
    char *end, *b;

    if (cl != NULL && *cl) {
        errno = 0;
        n = strtoull(cl, &end, 10);
        if (errno || *end || cl[0] == '-')
            return hy_api_err_invalid(e, NULL, NULL, "bad Content-Length '%s'", cl);
    }
    if (n > r->w->cfg->server.max_body_bytes)
        return hy_api_err_too_large(e, (size_t)n, (size_t)r->w->cfg->server.max_body_bytes);
    b = wk_alloc(&r->arena, (size_t)n + 1);
    if (b == NULL)
        return hy_api_err_internal(e, "out of memory");
    while (got < n) {
        int k = FCGX_GetStr(b + got, (int)HY_MIN(n - got, (unsigned long long)1 << 20),
                            r->rq->in);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    if (got != n)
        return hy_api_err_invalid(e, NULL, NULL, "request body ended after %zu of %llu bytes",
                                  got, n);
    /* Consume the end-of-stdin record so that later readiness on the socket
     * can only mean a hang-up. */
    (void)FCGX_GetChar(r->rq->in);
    b[got] = '\0';
    *body = b;
    *len = got;
    return HY_OK;
}

/* ---- generation ------------------------------------------------------------ */

typedef struct {
    hy_req_handle_t h;
    bool live;              /* submitted, not yet released */
    bool done;
    bool ended;             /* wk_choice_end ran */
    hy_api_finish_t finish;
    bool failed;
    char errmsg[HY_REQ_ERRMSG_LEN];
    int32_t n_prompt, n_cached, n_gen;
    const int32_t *ids;     /* prompt ids (arena or request memory) */
    int64_t max_tokens;
    hy_tok_stream_t ts;
    bool ts_ready;
    hy_stop_t stop;
    bool stop_ready;
    hy_jbuf_t text;         /* non-streamed: the whole text */
    size_t lp_offset;       /* streamed: text_offset of the next logprob token
                             * (the token pieces so far, not the text sent:
                             * the stop matcher and detokenizer hold bytes) */
    hy_api_token_lp_t *lp;  /* non-streamed logprobs */
    size_t n_lp, cap_lp;
    hy_api_top_t *tops;
    size_t n_tops, cap_tops;
} wk_choice_t;

static void wk_choice_free(wk_choice_t *c)
{
    if (c->ts_ready)
        hy_tok_stream_free(&c->ts);
    if (c->stop_ready)
        hy_stop_free(&c->stop);
    hy_jbuf_free(&c->text);
    free(c->lp);
    free(c->tops);
}

/* Records one token's logprob entry (pieces point into the tokenizer). */
static int wk_lp_push(wk_choice_t *c, const hy_tok_t *tok, const hy_ring_tok_t *t, bool special)
{
    hy_tok_str_t s = hy_tok_token_piece(tok, t->token, special);
    hy_api_token_lp_t *lp;
    int32_t j;

    if (c->n_lp == c->cap_lp) {
        size_t nc = c->cap_lp ? c->cap_lp * 2 : 64;
        hy_api_token_lp_t *p = realloc(c->lp, nc * sizeof *p);
        if (p == NULL)
            return HY_ENOMEM;
        c->lp = p;
        c->cap_lp = nc;
    }
    if (c->n_tops + (size_t)t->n_top > c->cap_tops) {
        size_t nc = HY_MAX(c->cap_tops * 2, c->n_tops + (size_t)t->n_top + 64);
        hy_api_top_t *p = realloc(c->tops, nc * sizeof *p);
        if (p == NULL)
            return HY_ENOMEM;
        c->tops = p;
        c->cap_tops = nc;
    }
    lp = &c->lp[c->n_lp++];
    lp->text = s.ptr;
    lp->len = s.len;
    lp->logprob = t->logprob;
    lp->top = (const hy_api_top_t *)(uintptr_t)c->n_tops; /* index; fixed up later */
    lp->n_top = (size_t)t->n_top;
    for (j = 0; j < t->n_top; j++) {
        hy_tok_str_t ts = hy_tok_token_piece(tok, t->top_ids[j], special);
        c->tops[c->n_tops].text = ts.ptr;
        c->tops[c->n_tops].len = ts.len;
        c->tops[c->n_tops++].logprob = t->top_logprobs[j];
    }
    return HY_OK;
}

static void wk_lp_fixup(wk_choice_t *c)
{
    size_t i;

    for (i = 0; i < c->n_lp; i++)
        c->lp[i].top = c->tops + (uintptr_t)c->lp[i].top;
}

static bool wk_is_eog(const hy_worker_ctx_t *w, int32_t id)
{
    return hy_tok_is_eog(w->tok, id);
}

/* Renders the chat messages through the model's template. */
static int wk_render_chat(wk_req_t *r, const hy_api_req_t *q, char **text, size_t *len,
                          hy_api_error_t *e)
{
    hy_chat_opts_t o;
    char err[HY_ERR_LEN];
    int rc;

    if (r->w->tmpl == NULL)
        return hy_api_err_invalid(e, "messages", NULL,
                                  "the served model has no chat template; use /v1/completions");
    memset(&o, 0, sizeof o);
    o.add_generation_prompt = q->add_generation_prompt;
    o.bos_token = r->w->bos_text;
    o.eos_token = r->w->eos_text;
    o.enable_thinking = q->enable_thinking;
    o.tools = q->tools;
    o.extra_vars = q->template_kwargs;
    rc = hy_chat_render(r->w->tmpl, q->messages, q->n_messages, &o, text, len, err);
    if (rc == HY_ENOMEM)
        return hy_api_err_internal(e, "out of memory");
    if (rc != HY_OK)
        return hy_api_err_invalid(e, "messages", NULL, "chat template: %s", err);
    return HY_OK;
}

/* Prompt i as token ids (arena memory). */
static int wk_prompt_ids(wk_req_t *r, const hy_api_req_t *q, size_t i, const char *chat_text,
                         size_t chat_len, const int32_t **ids, size_t *n, hy_api_error_t *e)
{
    const char *text = chat_text;
    size_t len = chat_len, cnt = 0;
    int32_t *out;
    char err[HY_ERR_LEN];
    int rc;

    if (q->kind != HY_API_CHAT) {
        if (q->prompts[i].tokens != NULL) {
            *ids = q->prompts[i].tokens;
            *n = q->prompts[i].n_tokens;
            return HY_OK;
        }
        text = q->prompts[i].text;
        len = q->prompts[i].text_len;
    }
    rc = hy_tok_encode_alloc(r->w->tok, text, len, true, true, &out, &cnt, err);
    if (rc != HY_OK)
        return rc == HY_ENOMEM ? hy_api_err_internal(e, "out of memory")
                               : hy_api_err_invalid(e, "prompt", NULL, "cannot tokenize: %s", err);
    {
        int32_t *a = wk_alloc(&r->arena, (cnt ? cnt : 1) * sizeof *a);
        if (a == NULL) {
            free(out);
            return hy_api_err_internal(e, "out of memory");
        }
        memcpy(a, out, cnt * sizeof *a);
        free(out);
        *ids = a;
    }
    *n = cnt;
    return HY_OK;
}

static hy_api_finish_t wk_finish_of(int32_t reason)
{
    return reason == HY_FINISH_LENGTH ? HY_API_FINISH_LENGTH : HY_API_FINISH_STOP;
}

/* Sends (streamed) or keeps (collected) the text the stop matcher released. */
static int wk_emit(wk_req_t *r, const hy_api_req_t *q, const hy_api_resp_t *m, wk_choice_t *c,
                   int index, const char *s, size_t n, const hy_api_token_lp_t *lp,
                   size_t n_lp, hy_jbuf_t *sb)
{
    if (!q->stream) {
        hy_jbuf_raw(&c->text, s, n);
        return c->text.failed ? HY_ENOMEM : HY_OK;
    }
    if (n == 0 && n_lp == 0)
        return HY_OK;
    hy_jbuf_reset(sb);
    hy_sse_delta(sb, m, index, s, n, lp, n_lp, c->lp_offset);
    for (size_t i = 0; i < n_lp; i++)
        c->lp_offset += lp[i].len;
    if (sb->failed)
        return HY_ENOMEM;
    return wk_put(r, sb->data, sb->len) == 0 ? HY_OK : HY_EIO;
}

/* Handles tokens read from one choice's ring. */
static int wk_consume(wk_req_t *r, const hy_api_req_t *q, const hy_api_resp_t *m,
                      wk_choice_t *c, int index, const hy_ring_tok_t *toks, int32_t n,
                      hy_jbuf_t *sb, hy_api_token_lp_t *slp, hy_api_top_t *stops)
{
    const hy_worker_ctx_t *w = r->w;
    bool special = !q->skip_special_tokens;
    char err[HY_ERR_LEN];
    int32_t i;
    int rc;

    for (i = 0; i < n && !c->done; i++) {
        const hy_ring_tok_t *t = &toks[i];
        const char *piece;
        size_t plen, n_lp = 0;
        hy_stop_out_t so;

        c->n_gen++;
        if (r->ttft_ns == 0)
            r->ttft_ns = hy_shm_now_ns() - r->t0_ns;
        if (!q->ignore_eos && wk_is_eog(w, t->token)) {
            c->finish = HY_API_FINISH_STOP;
            c->done = true;
            hy_req_cancel(w->shm, c->h, err);
            break;
        }
        if (hy_tok_stream_feed(&c->ts, t->token, &piece, &plen, err) != HY_OK)
            return HY_EINVAL;
        if ((rc = hy_stop_feed(&c->stop, piece, plen, &so)) != HY_OK)
            return rc;
        if (q->logprobs) {
            if (q->stream) {
                hy_tok_str_t s = hy_tok_token_piece(w->tok, t->token, special);
                int32_t j;

                slp->text = s.ptr;
                slp->len = s.len;
                slp->logprob = t->logprob;
                slp->top = stops;
                slp->n_top = (size_t)t->n_top;
                for (j = 0; j < t->n_top; j++) {
                    hy_tok_str_t ts = hy_tok_token_piece(w->tok, t->top_ids[j], special);
                    stops[j].text = ts.ptr;
                    stops[j].len = ts.len;
                    stops[j].logprob = t->top_logprobs[j];
                }
                n_lp = 1;
            } else if ((rc = wk_lp_push(c, w->tok, t, special)) != HY_OK) {
                return rc;
            }
        }
        if ((rc = wk_emit(r, q, m, c, index, so.emit, so.emit_len, slp, n_lp, sb)) != HY_OK)
            return rc;
        if (so.stopped) {
            /* A stop string: the engine may still be generating; stop it. */
            c->finish = HY_API_FINISH_STOP;
            c->done = true;
            hy_req_cancel(w->shm, c->h, err);
        }
    }
    return HY_OK;
}

/* End of a choice: release what the detokenizer and stop matcher held. */
static int wk_choice_end(wk_req_t *r, const hy_api_req_t *q, const hy_api_resp_t *m,
                         wk_choice_t *c, int index, hy_jbuf_t *sb)
{
    const char *piece;
    size_t plen;
    hy_stop_out_t so;
    char err[HY_ERR_LEN];
    int rc;

    if (!c->stop.matched) {
        if (hy_tok_stream_flush(&c->ts, &piece, &plen, err) == HY_OK && plen > 0) {
            if ((rc = hy_stop_feed(&c->stop, piece, plen, &so)) != HY_OK)
                return rc;
            if ((rc = wk_emit(r, q, m, c, index, so.emit, so.emit_len, NULL, 0, sb)) != HY_OK)
                return rc;
        }
        if (!c->stop.matched) {
            if ((rc = hy_stop_flush(&c->stop, &so)) != HY_OK)
                return rc;
            if ((rc = wk_emit(r, q, m, c, index, so.emit, so.emit_len, NULL, 0, sb)) != HY_OK)
                return rc;
        }
    }
    if (q->stream) {
        hy_jbuf_reset(sb);
        hy_sse_finish(sb, m, index, c->finish);
        if (sb->failed)
            return HY_ENOMEM;
        if (wk_put(r, sb->data, sb->len) != 0)
            return HY_EIO;
    }
    return HY_OK;
}

/* Reads what one choice's ring holds (waiting up to timeout_ms) and handles
 * it; marks the choice done at its end.  HY_EIO: the client is gone. */
static int wk_poll_choice(wk_req_t *r, const hy_api_req_t *q, const hy_api_resp_t *m,
                          wk_choice_t *c, int index, hy_ring_tok_t *toks, int timeout_ms,
                          hy_jbuf_t *sb, hy_api_token_lp_t *slp, hy_api_top_t *stops,
                          bool *any)
{
    hy_req_status_t st;
    char err[HY_ERR_LEN];
    int32_t got;
    int rc;

    got = hy_req_read(r->w->shm, c->h, toks, WK_READ_BATCH, timeout_ms, &st, err);
    if (got < 0) {
        c->failed = true;
        c->done = true;
        snprintf(c->errmsg, sizeof c->errmsg, "%.*s", (int)sizeof c->errmsg - 1, err);
        return HY_OK;
    }
    if (st.n_cached > c->n_cached)
        c->n_cached = st.n_cached;
    if (got > 0) {
        *any = true;
        if ((rc = wk_consume(r, q, m, c, index, toks, got, sb, slp, stops)) != HY_OK)
            return rc;
    }
    if (!c->done && st.done) {
        c->done = true;
        if (st.finish_reason == HY_FINISH_ERROR || st.state == HY_REQ_ERROR) {
            c->failed = true;
            snprintf(c->errmsg, sizeof c->errmsg, "%s",
                     st.error_msg[0] ? st.error_msg : "engine error");
            return HY_OK;
        }
        c->finish = wk_finish_of(st.finish_reason);
    } else if (!c->done) {
        return HY_OK;
    }
    if (c->ended || c->failed)
        return HY_OK;
    c->ended = true;
    return wk_choice_end(r, q, m, c, index, sb);
}

static void wk_cancel_all(wk_req_t *r, wk_choice_t *cs, size_t n)
{
    char err[HY_ERR_LEN];
    size_t i;

    for (i = 0; i < n; i++)
        if (cs[i].live && !cs[i].done)
            hy_req_cancel(r->w->shm, cs[i].h, err);
}

static void wk_generate(wk_req_t *r, hy_api_kind_t kind, const char *body, size_t len)
{
    hy_worker_ctx_t *w = r->w;
    hy_api_req_t *q = NULL;
    hy_api_error_t e;
    hy_api_resp_t m;
    wk_choice_t *cs = NULL;
    size_t n_choices = 0, i, n_live;
    char *chat_text = NULL, err[HY_ERR_LEN];
    size_t chat_len = 0;
    char *gspec = NULL; /* the grammar as the engine receives it */
    size_t gspec_len = 0;
    hy_jbuf_t sb;
    hy_ring_tok_t *toks = NULL;
    hy_api_token_lp_t slp;
    hy_api_top_t stops[HY_SAMPLING_MAX_LOGPROBS];
    uint64_t seed;
    int rc;

    hy_jbuf_init(&sb);
    memset(&e, 0, sizeof e);
    if (hy_api_parse(kind, body, len, &q, &e) != HY_OK)
        goto fail;
    if (hy_api_check_model(q, w->info.id, &e) != HY_OK ||
        hy_api_check_vocab(q, w->n_vocab, &e) != HY_OK)
        goto fail;
    if (atomic_load(&w->ctl->draining)) {
        hy_api_err_overloaded(&e, 503, WK_RETRY_AFTER_S, "the server is shutting down");
        goto fail;
    }
    if (kind == HY_API_CHAT && wk_render_chat(r, q, &chat_text, &chat_len, &e) != HY_OK)
        goto fail;

    n_choices = (kind == HY_API_CHAT ? 1 : q->n_prompts) * (size_t)q->n;
    cs = calloc(n_choices, sizeof *cs);
    toks = malloc(WK_READ_BATCH * sizeof *toks);
    if (cs == NULL || toks == NULL) {
        hy_api_err_internal(&e, "out of memory");
        goto fail;
    }
    seed = q->seed_given ? q->sampling.seed : wk_random64();
    if (q->grammar != NULL &&
        hy_grammar_spec_pack(q->grammar, q->grammar_len, NULL, &gspec, &gspec_len, err) != HY_OK) {
        hy_api_err_invalid(&e, "response_format", NULL, "%s", err);
        goto fail;
    }

    /* Tokenize and check every prompt before submitting any. */
    for (i = 0; i < n_choices; i++) {
        wk_choice_t *c = &cs[i];
        size_t pi = i / (size_t)q->n;
        const int32_t *ids = NULL;
        size_t n_ids = 0;
        int64_t max_tokens;

        hy_jbuf_init(&c->text);
        hy_tok_stream_init(&c->ts, w->tok, !q->skip_special_tokens, false);
        c->ts_ready = true;
        if (hy_stop_init(&c->stop, q->stop, q->stop_len, q->n_stop,
                         q->include_stop_str_in_output, err) != HY_OK) {
            hy_api_err_invalid(&e, "stop", NULL, "%s", err);
            goto fail;
        }
        c->stop_ready = true;
        if (i % (size_t)q->n != 0)
            continue;
        if (wk_prompt_ids(r, q, pi, chat_text, chat_len, &ids, &n_ids, &e) != HY_OK)
            goto fail;
        if (n_ids == 0) {
            hy_api_err_invalid(&e, "prompt", NULL, "the prompt is empty after tokenization");
            goto fail;
        }
        max_tokens = q->max_tokens >= 0 ? q->max_tokens : (int64_t)w->n_ctx - (int64_t)n_ids;
        if ((int64_t)n_ids + HY_MAX(max_tokens, 1) > w->n_ctx || max_tokens < 1 ||
            n_ids > (size_t)hy_shm_header(w->shm)->params.max_prompt_tokens) {
            hy_api_err_context_length(&e, kind, w->n_ctx, (int64_t)n_ids,
                                      q->max_tokens >= 0 ? q->max_tokens : 1);
            goto fail;
        }
        /* the grammar travels in the prompt's shared-memory arena */
        if (gspec_len > hy_req_grammar_room(w->shm, (int32_t)n_ids)) {
            hy_api_err_invalid(&e, "response_format", NULL,
                               "the grammar (%zu bytes compiled) does not fit next to a "
                               "%zu-token prompt: %zu bytes are left; shorten the schema or the "
                               "prompt",
                               gspec_len, n_ids, hy_req_grammar_room(w->shm, (int32_t)n_ids));
            goto fail;
        }
        for (size_t j = 0; j < (size_t)q->n; j++) {
            cs[i + j].n_prompt = (int32_t)n_ids;
            cs[i + j].ids = ids;
            cs[i + j].max_tokens = max_tokens;
        }
    }

    /* Submit one engine request per choice (seed + j for choice j). */
    for (i = 0; i < n_choices; i++) {
        hy_req_params_t p;

        memset(&p, 0, sizeof p);
        p.sampling = q->sampling;
        p.sampling.seed = seed + i % (size_t)q->n;
        p.max_tokens = (int32_t)HY_MIN(cs[i].max_tokens, (int64_t)INT32_MAX);
        /* End-of-generation tokens are the engine's business (it knows the
         * vocabulary); stop strings are ours. */
        p.flags = q->ignore_eos ? HY_REQ_F_IGNORE_EOS : 0;
        rc = hy_req_submit_grammar(w->shm, &p, cs[i].ids, cs[i].n_prompt, gspec, gspec_len,
                                   &cs[i].h, err);
        if (rc != HY_OK) {
            if (rc == HY_EFULL)
                hy_api_err_overloaded(&e, 503, WK_RETRY_AFTER_S,
                                      "no free request slot; retry later");
            else
                hy_api_err_internal(&e, err);
            for (size_t j = 0; j < i; j++) {
                hy_req_release(w->shm, cs[j].h, err);
                cs[j].live = false;
            }
            goto fail;
        }
        cs[i].live = true;
        r->prompt_tokens += (i % (size_t)q->n == 0) ? cs[i].n_prompt : 0;
    }
    hy_shm_engine_kick(w->shm);

    /* Response metadata. */
    memset(&m, 0, sizeof m);
    m.kind = kind;
    hy_api_make_id(kind, wk_random64(), wk_random64(), r->id);
    m.id = r->id;
    m.created = (int64_t)time(NULL);
    m.model = w->info.id;
    m.logprobs = q->logprobs;
    m.include_usage = q->stream && q->include_usage;

    if (q->stream) {
        static const char hdr[] = "Status: 200 OK\r\nContent-Type: text/event-stream\r\n"
                                  "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n\r\n";
        r->status = 200;
        r->head_sent = true;
        if (wk_put(r, hdr, sizeof hdr - 1) != 0)
            goto gone;
        for (i = 0; i < n_choices; i++) {
            hy_jbuf_reset(&sb);
            if (kind == HY_API_CHAT)
                hy_sse_role(&sb, &m, (int)i);
            if (q->echo && kind != HY_API_CHAT) {
                const hy_api_prompt_t *pp = &q->prompts[i / (size_t)q->n];
                if (pp->text != NULL) {
                    hy_sse_delta(&sb, &m, (int)i, pp->text, pp->text_len, NULL, 0, 0);
                    cs[i].lp_offset = pp->text_len;
                }
            }
            if (sb.len > 0 && wk_put(r, sb.data, sb.len) != 0)
                goto gone;
        }
    } else if (q->echo && kind != HY_API_CHAT) {
        for (i = 0; i < n_choices; i++) {
            const hy_api_prompt_t *pp = &q->prompts[i / (size_t)q->n];
            if (pp->text != NULL)
                hy_jbuf_raw(&cs[i].text, pp->text, pp->text_len);
        }
    }

    /* The read loop: every live choice, until all are done.  A pass that
     * finds nothing blocks on the first live choice, at most WK_POLL_MS so
     * that a client hang-up is noticed even during a long prefill. */
    {
        int timeout = 0;

        for (;;) {
            bool any = false;

            n_live = 0;
            for (i = 0; i < n_choices; i++) {
                if (cs[i].done)
                    continue;
                rc = wk_poll_choice(r, q, &m, &cs[i], (int)i, toks, timeout, &sb, &slp, stops,
                                    &any);
                timeout = 0;
                if (rc == HY_EIO)
                    goto gone;
                if (rc != HY_OK) {
                    hy_api_err_internal(&e, "cannot format tokens");
                    goto fail_live;
                }
                if (!cs[i].done)
                    n_live++;
            }
            if (n_live == 0)
                break;
            if (!any) {
                if (wk_peer_closed(r))
                    goto gone;
                timeout = WK_POLL_MS;
            }
        }
    }

    /* Usage and the end of the response. */
    {
        hy_api_usage_t u = {0};
        bool failed = false;
        const char *why = NULL;

        for (i = 0; i < n_choices; i++) {
            u.completion_tokens += cs[i].n_gen;
            if (i % (size_t)q->n == 0)
                u.cached_tokens += cs[i].n_cached;
            if (cs[i].failed) {
                failed = true;
                why = cs[i].errmsg;
            }
        }
        u.prompt_tokens = r->prompt_tokens;
        r->cached_tokens = (int32_t)u.cached_tokens;
        r->completion_tokens = (int32_t)u.completion_tokens;
        if (failed) {
            hy_api_err_internal(&e, why);
            if (q->stream) {
                hy_jbuf_reset(&sb);
                hy_sse_error(&sb, &e);
                r->status = 500;
                wk_put(r, sb.data, sb.len);
            } else {
                wk_send_error(r, &e, NULL);
            }
            goto out;
        }
        if (q->stream) {
            hy_jbuf_reset(&sb);
            if (m.include_usage)
                hy_sse_usage(&sb, &m, &u);
            hy_sse_done(&sb);
            if (!sb.failed)
                wk_put(r, sb.data, sb.len);
        } else {
            hy_api_choice_t *ch = calloc(n_choices, sizeof *ch);
            char *out = NULL;
            size_t out_len = 0;

            if (ch == NULL) {
                hy_api_err_internal(&e, "out of memory");
                wk_send_error(r, &e, NULL);
                goto out;
            }
            for (i = 0; i < n_choices; i++) {
                wk_lp_fixup(&cs[i]);
                ch[i].text = cs[i].text.data ? cs[i].text.data : "";
                ch[i].text_len = cs[i].text.len;
                ch[i].finish = cs[i].finish;
                ch[i].lp = cs[i].lp;
                ch[i].n_lp = cs[i].n_lp;
                ch[i].text_offset = q->echo && kind != HY_API_CHAT &&
                                            q->prompts[i / (size_t)q->n].text
                                        ? q->prompts[i / (size_t)q->n].text_len
                                        : 0;
            }
            rc = hy_api_format_response(&m, ch, n_choices, &u, &out, &out_len);
            free(ch);
            wk_send_json(r, rc, out, out_len);
        }
    }
    goto out;

gone:
    /* The client went away: stop generating at once so its pages free up. */
    wk_cancel_all(r, cs, n_choices);
    r->status = 499;
    goto out;
fail_live:
    wk_cancel_all(r, cs, n_choices);
fail:
    if (r->head_sent) {
        hy_jbuf_reset(&sb);
        hy_sse_error(&sb, &e);
        wk_put(r, sb.data, sb.len);
        r->status = e.status;
    } else {
        wk_send_error(r, &e, NULL);
    }
out:
    for (i = 0; cs != NULL && i < n_choices; i++) {
        if (cs[i].live)
            hy_req_release(w->shm, cs[i].h, err);
        if (r->completion_tokens == 0 && cs[i].n_gen > 0 && r->status == 499)
            r->completion_tokens += cs[i].n_gen;
        wk_choice_free(&cs[i]);
    }
    free(cs);
    free(toks);
    free(chat_text);
    free(gspec);
    hy_jbuf_free(&sb);
    hy_api_req_free(q);
}

/* ---- the other routes ------------------------------------------------------ */

/* What exactly this instance serves, for operators comparing colours
 * (blue/green, canary): the instance name, the model file's version
 * "<file>@<first 8 hex of its SHA-256>" ("@hashing" until the coordinator's
 * background hash is done, "@unknown" if it failed), the full digest, and
 * hyserve's own version. */
typedef struct {
    const char *instance;
    char model_version[sizeof ((hy_shm_header_t *)0)->model_file + 16];
    const char *model_sha256; /* NULL until hashed */
} wk_version_t;

static void wk_version(const wk_req_t *r, wk_version_t *v)
{
    const hy_shm_header_t *h = hy_shm_header(r->w->shm);
    uint32_t st = atomic_load_explicit(&h->model_sha256_state, memory_order_acquire);

    v->instance = r->w->cfg->server.instance;
    v->model_sha256 = st == HY_SHM_SHA256_DONE ? h->model_sha256 : NULL;
    snprintf(v->model_version, sizeof v->model_version, "%.*s@%.8s",
             (int)strnlen(h->model_file, sizeof h->model_file), h->model_file,
             v->model_sha256 ? v->model_sha256
                             : st == HY_SHM_SHA256_PENDING ? "hashing" : "unknown");
}

static void wk_models(wk_req_t *r)
{
    char *out = NULL, *with = NULL;
    size_t len = 0;
    cJSON *doc = NULL, *m;
    wk_version_t v;

    int rc = hy_api_format_models(&r->w->info, &out, &len);

    /* The shared formatter knows the model; the version fields belong to
     * this process, so they are added to data[0] here. */
    if (rc == HY_OK) {
        wk_version(r, &v);
        doc = cJSON_ParseWithLength(out, len);
        m = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "data"), 0);
        if (!cJSON_IsObject(m) || !cJSON_AddStringToObject(m, "instance", v.instance) ||
            !cJSON_AddStringToObject(m, "model_version", v.model_version) ||
            !(v.model_sha256 ? cJSON_AddStringToObject(m, "model_sha256", v.model_sha256)
                             : cJSON_AddNullToObject(m, "model_sha256")) ||
            !cJSON_AddStringToObject(m, "hyserve_version", PACKAGE_VERSION) ||
            (with = cJSON_PrintUnformatted(doc)) == NULL)
            rc = HY_ENOMEM;
        free(out);
        out = with;
        len = with ? strlen(with) : 0;
        cJSON_Delete(doc);
    }
    wk_send_json(r, rc, out, len);
}

static void wk_health(wk_req_t *r)
{
    const hy_shm_header_t *h = hy_shm_header(r->w->shm);
    hy_api_error_t e;

    if (atomic_load(&r->w->ctl->draining)) {
        hy_api_err_overloaded(&e, 503, WK_RETRY_AFTER_S, "draining: the server is shutting down");
        wk_send_error(r, &e, NULL);
    } else if (!atomic_load(&h->ready)) {
        hy_api_err_overloaded(&e, 503, WK_RETRY_AFTER_S, "loading");
        wk_send_error(r, &e, NULL);
    } else {
        hy_jbuf_t b;
        wk_version_t v;
        char *out = NULL;
        size_t len = 0;
        int rc;

        wk_version(r, &v);
        hy_jbuf_init(&b);
        hy_jbuf_cstr(&b, "{\"status\":\"ok\",\"instance\":");
        hy_jbuf_cstr_q(&b, v.instance);
        hy_jbuf_cstr(&b, ",\"model\":");
        hy_jbuf_cstr_q(&b, r->w->info.id);
        hy_jbuf_cstr(&b, ",\"model_version\":");
        hy_jbuf_cstr_q(&b, v.model_version);
        hy_jbuf_cstr(&b, ",\"model_sha256\":");
        hy_jbuf_cstr_q(&b, v.model_sha256);
        hy_jbuf_cstr(&b, ",\"hyserve_version\":");
        hy_jbuf_cstr_q(&b, PACKAGE_VERSION);
        hy_jbuf_cstr(&b, "}\n");
        rc = hy_jbuf_take(&b, &out, &len);
        wk_send_json(r, rc, out, len);
    }
}

static void wk_hist(hy_jbuf_t *b, const char *name, const char *help, const hy_stats_hist_t *h)
{
    uint64_t cum = 0;
    int i;

    hy_jbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (i = 0; i < HY_STATS_NBUCKETS; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        hy_jbuf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, hy_stats_bucket_le[i],
                       (unsigned long long)cum);
    }
    cum += atomic_load_explicit(&h->bucket[HY_STATS_NBUCKETS], memory_order_relaxed);
    hy_jbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    hy_jbuf_printf(b, "%s_sum %.6f\n%s_count %llu\n", name,
                   (double)atomic_load(&h->sum_us) / 1e6, name,
                   (unsigned long long)atomic_load(&h->count));
}

static void wk_metric(hy_jbuf_t *b, const char *name, const char *type, const char *help,
                      unsigned long long v)
{
    hy_jbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, v);
}

/* Grammar-constrained decoding: how often, compiled or cached, and what
 * the masks cost the engine (per mask: mask_seconds / masks). */
static void wk_grammar_metrics(hy_jbuf_t *b, hy_stats_t *s)
{
    wk_metric(b, "hyserve_grammar_requests_total", "counter",
              "Requests constrained by a grammar or JSON schema.",
              (unsigned long long)atomic_load(&s->grammar_requests));
    wk_metric(b, "hyserve_grammar_compiles_total", "counter",
              "Grammars the engine compiled (cache misses).",
              (unsigned long long)atomic_load(&s->grammar_compiles));
    wk_metric(b, "hyserve_grammar_cache_hits_total", "counter",
              "Constrained requests whose grammar was already compiled.",
              (unsigned long long)atomic_load(&s->grammar_cache_hits));
    wk_metric(b, "hyserve_grammar_masks_total", "counter", "Vocabulary masks computed.",
              (unsigned long long)atomic_load(&s->grammar_masks));
    hy_jbuf_printf(b, "# HELP hyserve_grammar_mask_seconds_total Engine thread CPU time spent "
                      "computing and applying vocabulary masks.\n# TYPE hyserve_grammar_mask_seconds_total "
                      "counter\nhyserve_grammar_mask_seconds_total %.6f\n",
                   (double)atomic_load(&s->grammar_mask_us) / 1e6);
    hy_jbuf_printf(b, "# HELP hyserve_grammar_token_set_seconds_total Part of the mask time "
                      "spent filling token sets of states reached for the first time.\n"
                      "# TYPE hyserve_grammar_token_set_seconds_total counter\n"
                      "hyserve_grammar_token_set_seconds_total %.6f\n",
                   (double)atomic_load(&s->grammar_fill_us) / 1e6);
    hy_jbuf_printf(b, "# HELP hyserve_grammar_compile_seconds_total Engine thread CPU time spent "
                      "compiling grammars.\n# TYPE hyserve_grammar_compile_seconds_total counter\n"
                      "hyserve_grammar_compile_seconds_total %.6f\n",
                   (double)atomic_load(&s->grammar_compile_us) / 1e6);
}

/* Prometheus text from the segment's stats and the page table's counts;
 * lock-free, so a scrape never waits on the engine. */
static void wk_metrics(wk_req_t *r)
{
    hy_stats_t *s = hy_shm_stats(r->w->shm);
    const hy_shm_header_t *h = hy_shm_header(r->w->shm);
    static const char *const why[HY_STATS_REQ_N] = {"stop", "length", "cancelled", "error",
                                                    "rejected"};
    hy_pt_counts_t pc;
    hy_jbuf_t b;
    char *out = NULL;
    size_t len = 0;
    int i;

    hy_pt_counts(hy_shm_pt(r->w->shm), &pc);
    hy_jbuf_init(&b);
    hy_jbuf_cstr(&b, "# HELP hyserve_requests_total Finished requests by outcome.\n"
                     "# TYPE hyserve_requests_total counter\n");
    for (i = 0; i < HY_STATS_REQ_N; i++)
        hy_jbuf_printf(&b, "hyserve_requests_total{finish=\"%s\"} %llu\n", why[i],
                       (unsigned long long)atomic_load(&s->requests[i]));
    wk_hist(&b, "hyserve_time_to_first_token_seconds", "Submit to first token.", &s->ttft);
    wk_hist(&b, "hyserve_time_per_output_token_seconds", "Mean time per output token after the first.", &s->tpot);
    wk_hist(&b, "hyserve_e2e_request_latency_seconds", "Submit to finish.", &s->e2e);
    wk_hist(&b, "hyserve_request_queue_time_seconds", "Submit to taken by the engine.", &s->queue);
    wk_metric(&b, "hyserve_prompt_tokens_total", "counter", "Prompt tokens submitted.",
              (unsigned long long)atomic_load(&s->prompt_tokens));
    wk_metric(&b, "hyserve_generation_tokens_total", "counter", "Tokens generated.",
              (unsigned long long)atomic_load(&s->generation_tokens));
    wk_metric(&b, "hyserve_cached_prompt_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
              (unsigned long long)atomic_load(&s->cached_prompt_tokens));
    wk_metric(&b, "hyserve_num_requests_running", "gauge", "Requests the engine is running.",
              (unsigned long long)HY_MAX(atomic_load(&s->running), 0));
    wk_metric(&b, "hyserve_num_requests_waiting", "gauge", "Requests queued for the engine.",
              (unsigned long long)HY_MAX(atomic_load(&s->waiting), 0));
    wk_metric(&b, "hyserve_request_slots_used", "gauge", "Request slots in use.",
              (unsigned long long)HY_MAX(atomic_load(&s->slots_used), 0));
    wk_metric(&b, "hyserve_request_slots_total", "gauge", "Request slots in the segment.",
              (unsigned long long)h->params.n_request_slots);
    wk_metric(&b, "hyserve_preemptions_total", "counter", "Sequences preempted for memory.",
              (unsigned long long)atomic_load(&s->preemptions));
    wk_metric(&b, "hyserve_worker_restarts_total", "counter", "Worker processes respawned.",
              (unsigned long long)atomic_load(&s->worker_restarts));
    wk_metric(&b, "hyserve_reaped_requests_total", "counter", "Requests of dead workers reclaimed.",
              (unsigned long long)atomic_load(&s->reaped_requests));
    wk_grammar_metrics(&b, s);
    hy_jbuf_cstr(&b, "# HELP hyserve_kv_pages KV pages by state.\n# TYPE hyserve_kv_pages gauge\n");
    hy_jbuf_printf(&b, "hyserve_kv_pages{state=\"used\"} %d\nhyserve_kv_pages{state=\"free\"} %d\n"
                       "hyserve_kv_pages{state=\"cached\"} %d\n",
                   pc.pages_used, pc.pages_free, pc.pages_cached);
    wk_metric(&b, "hyserve_kv_pages_total", "gauge", "KV pages in the pool.",
              (unsigned long long)pc.pages_total);
    hy_jbuf_cstr(&b, "# HELP hyserve_state_checkpoints Recurrent-state snapshots by state.\n"
                     "# TYPE hyserve_state_checkpoints gauge\n");
    hy_jbuf_printf(&b, "hyserve_state_checkpoints{state=\"used\"} %d\n"
                       "hyserve_state_checkpoints{state=\"free\"} %d\n"
                       "hyserve_state_checkpoints{state=\"cached\"} %d\n",
                   pc.ckpt_used, pc.ckpt_free, pc.ckpt_cached);
    wk_metric(&b, "hyserve_state_slots_used", "gauge", "Live recurrent-state slots in use.",
              (unsigned long long)pc.state_used);
    wk_metric(&b, "hyserve_state_slots_total", "gauge", "Live recurrent-state slots.",
              (unsigned long long)pc.state_total);
    wk_metric(&b, "hyserve_kv_page_evictions_total", "counter", "Cached pages evicted.",
              (unsigned long long)pc.page_evictions);
    wk_metric(&b, "hyserve_prefix_cache_queries_total", "counter", "Prefix-cache lookups (tokens).",
              (unsigned long long)pc.query_tokens);
    wk_metric(&b, "hyserve_prefix_cache_hits_total", "counter", "Prefix-cache hits (tokens).",
              (unsigned long long)pc.hit_tokens);
    wk_metric(&b, "hyserve_draining", "gauge", "1 while the server drains for shutdown.",
              (unsigned long long)atomic_load(&r->w->ctl->draining));
    if (hy_jbuf_take(&b, &out, &len) != HY_OK) {
        hy_jbuf_free(&b);
        wk_send_json(r, HY_ENOMEM, NULL, 0);
        return;
    }
    wk_send_body(r, "text/plain; version=0.0.4", out, len);
    free(out);
}

static void wk_tokenize(wk_req_t *r, const char *body, size_t len)
{
    hy_api_tok_req_t *t = NULL;
    hy_api_error_t e;
    int32_t *ids = NULL;
    size_t n = 0;
    char err[HY_ERR_LEN], *out = NULL;
    size_t out_len = 0;
    int rc;

    if (hy_api_parse_tokenize(body, len, &t, &e) != HY_OK) {
        wk_send_error(r, &e, NULL);
        return;
    }
    if (t->model != NULL && strcmp(t->model, r->w->info.id) != 0) {
        hy_api_err_model_not_found(&e, t->model);
        wk_send_error(r, &e, NULL);
    } else if ((rc = hy_tok_encode_alloc(r->w->tok, t->text, t->text_len, t->add_special, true,
                                         &ids, &n, err)) != HY_OK) {
        if (rc == HY_ENOMEM)
            hy_api_err_internal(&e, "out of memory");
        else
            hy_api_err_invalid(&e, "prompt", NULL, "cannot tokenize: %s", err);
        wk_send_error(r, &e, NULL);
    } else {
        r->prompt_tokens = (int32_t)n;
        rc = hy_api_format_tokenize(ids, n, r->w->n_ctx, &out, &out_len);
        wk_send_json(r, rc, out, out_len);
    }
    free(ids);
    hy_api_tok_req_free(t);
}

static void wk_detokenize(wk_req_t *r, const char *body, size_t len)
{
    hy_api_tok_req_t *t = NULL;
    hy_api_error_t e;
    char err[HY_ERR_LEN], *text = NULL, *out = NULL;
    size_t tlen = 0, out_len = 0, i;

    if (hy_api_parse_detokenize(body, len, &t, &e) != HY_OK) {
        wk_send_error(r, &e, NULL);
        return;
    }
    for (i = 0; i < t->n_tokens; i++) {
        if (t->tokens[i] < 0 || t->tokens[i] >= r->w->n_vocab) {
            hy_api_err_invalid(&e, "tokens", NULL, "tokens[%zu] = %d: must be in 0..%d", i,
                               t->tokens[i], r->w->n_vocab - 1);
            wk_send_error(r, &e, NULL);
            goto out;
        }
    }
    if (hy_tok_decode(r->w->tok, t->tokens, t->n_tokens, false, &text, &tlen, err) != HY_OK) {
        hy_api_err_invalid(&e, "tokens", NULL, "%s", err);
        wk_send_error(r, &e, NULL);
        goto out;
    }
    {
        int rc = hy_api_format_detokenize(text, tlen, &out, &out_len);

        wk_send_json(r, rc, out, out_len);
    }
out:
    free(text);
    hy_api_tok_req_free(t);
}

/* ---- routing --------------------------------------------------------------- */

enum { WK_GEN, WK_MODELS, WK_HEALTH, WK_METRICS, WK_TOKENIZE, WK_DETOKENIZE };

static const struct {
    const char *path;
    const char *method; /* GET routes also answer HEAD */
    int handler;
    hy_api_kind_t kind;
} wk_routes[] = {
    {"/v1/completions", "POST", WK_GEN, HY_API_COMPLETIONS},
    {"/v1/chat/completions", "POST", WK_GEN, HY_API_CHAT},
    {"/v1/infer", "POST", WK_GEN, HY_API_INFER},
    {"/generate", "POST", WK_GEN, HY_API_GENERATE},
    {"/v1/models", "GET", WK_MODELS, 0},
    {"/health", "GET", WK_HEALTH, 0},
    {"/metrics", "GET", WK_METRICS, 0},
    {"/tokenize", "POST", WK_TOKENIZE, 0},
    {"/detokenize", "POST", WK_DETOKENIZE, 0},
};

/* The request path without the query: DOCUMENT_URI (nginx), else
 * SCRIPT_NAME + PATH_INFO, else REQUEST_URI up to '?'. */
static const char *wk_path(wk_req_t *r, char *buf, size_t cap)
{
    char **env = r->rq->envp;
    const char *p = FCGX_GetParam("DOCUMENT_URI", env), *q;

    if (p != NULL && *p)
        return p;
    p = FCGX_GetParam("SCRIPT_NAME", env);
    q = FCGX_GetParam("PATH_INFO", env);
    if ((p && *p) || (q && *q)) {
        snprintf(buf, cap, "%s%s", p ? p : "", q ? q : "");
        return buf;
    }
    p = FCGX_GetParam("REQUEST_URI", env);
    if (p == NULL)
        return "/";
    snprintf(buf, cap, "%.*s", (int)strcspn(p, "?"), p);
    return buf;
}

static void wk_handle(hy_worker_ctx_t *w, FCGX_Request *rq)
{
    wk_req_t r;
    hy_api_error_t e;
    char pbuf[512], *body = NULL;
    const char *path, *method, *rid, *key_id;
    size_t i, len = 0;
    bool path_known = false;

    memset(&r, 0, sizeof r);
    r.w = w;
    r.rq = rq;
    r.t0_ns = hy_shm_now_ns();
    rid = FCGX_GetParam("HTTP_X_REQUEST_ID", rq->envp);
    if (rid != NULL && *rid)
        snprintf(r.id, sizeof r.id, "%.63s", rid);
    else
        snprintf(r.id, sizeof r.id, "req-%016llx", (unsigned long long)wk_random64());
    path = wk_path(&r, pbuf, sizeof pbuf);
    method = FCGX_GetParam("REQUEST_METHOD", rq->envp);
    if (method == NULL)
        method = "GET";
    /* nginx's keys map names the caller (the secret itself never reaches
     * us); "-" when the socket is reached without the site in front */
    key_id = FCGX_GetParam("HYSERVE_KEY_ID", rq->envp);
    if (key_id == NULL || !*key_id)
        key_id = "-";
    r.route = path;
    for (i = 0; i < HY_ARRAY_LEN(wk_routes); i++) {
        if (strcmp(path, wk_routes[i].path) != 0)
            continue;
        path_known = true;
        if (strcmp(method, wk_routes[i].method) == 0 ||
            (strcmp(method, "HEAD") == 0 && strcmp(wk_routes[i].method, "GET") == 0))
            break;
    }
    if (i == HY_ARRAY_LEN(wk_routes)) {
        if (path_known) {
            size_t j;
            for (j = 0; j < HY_ARRAY_LEN(wk_routes) && strcmp(path, wk_routes[j].path); j++)
                ;
            hy_api_err_method(&e, method, wk_routes[j].method);
            wk_send_error(&r, &e, strcmp(wk_routes[j].method, "GET") == 0 ? "GET, HEAD" : "POST");
        } else {
            hy_api_err_not_found(&e, path);
            wk_send_error(&r, &e, NULL);
        }
        goto log;
    }
    r.route = wk_routes[i].path;
    if (strcmp(wk_routes[i].method, "POST") == 0 && wk_read_body(&r, &body, &len, &e) != HY_OK) {
        wk_send_error(&r, &e, NULL);
        goto log;
    }
    switch (wk_routes[i].handler) {
    case WK_GEN: wk_generate(&r, wk_routes[i].kind, body, len); break;
    case WK_MODELS: wk_models(&r); break;
    case WK_HEALTH: wk_health(&r); break;
    case WK_METRICS: wk_metrics(&r); break;
    case WK_TOKENIZE: wk_tokenize(&r, body, len); break;
    case WK_DETOKENIZE: wk_detokenize(&r, body, len); break;
    }
log:
    if (r.route != NULL && (strcmp(r.route, "/health") != 0 && strcmp(r.route, "/metrics") != 0
                            ? true : hy_log_enabled(LOG_DEBUG)))
        hy_log(r.status >= 500 ? LOG_WARNING : LOG_INFO, "request",
               "req=%s key_id=%s route=%s method=%s status=%d prompt_tokens=%d cached_tokens=%d "
               "completion_tokens=%d ttft_ms=%.1f duration_ms=%.1f",
               r.id, key_id, r.route, method, r.status, r.prompt_tokens, r.cached_tokens,
               r.completion_tokens, r.ttft_ns / 1e6, (hy_shm_now_ns() - r.t0_ns) / 1e6);
    wk_arena_free(&r.arena);
}

/* ---- the accept loop ------------------------------------------------------- */

static volatile sig_atomic_t wk_stop;

static void wk_on_term(int sig)
{
    (void)sig;
    wk_stop = 1;
    FCGX_ShutdownPending();
}

typedef struct {
    hy_worker_ctx_t *w;
    int log_gen;
} wk_thread_t;

/* SIGHUP may change the log settings.  The accept threads of one worker
 * share its syslog connection and ident buffer, so only the first thread to
 * see a new generation reopens the log; the others just take note. */
static pthread_mutex_t wk_log_lock = PTHREAD_MUTEX_INITIALIZER;
static int wk_log_gen_open = -1;

static void wk_log_reopen(hy_worker_ctx_t *w, int gen)
{
    pthread_mutex_lock(&wk_log_lock);
    if (gen != wk_log_gen_open) {
        hy_log_open(w->log_ident, w->cfg->log.facility, atomic_load(&w->ctl->log_level),
                    w->cfg->log.to_stderr);
        wk_log_gen_open = gen;
    }
    pthread_mutex_unlock(&wk_log_lock);
}

static void *wk_loop(void *arg)
{
    wk_thread_t *t = arg;
    hy_worker_ctx_t *w = t->w;
    FCGX_Request rq;

    if (FCGX_InitRequest(&rq, w->listen_fd, FCGI_FAIL_ACCEPT_ON_INTR) != 0)
        return NULL;
    while (!wk_stop && FCGX_Accept_r(&rq) >= 0) {
        int gen = atomic_load(&w->ctl->log_gen);

        if (gen != t->log_gen) {
            wk_log_reopen(w, gen);
            t->log_gen = gen;
        }
        wk_handle(w, &rq);
        FCGX_Finish_r(&rq);
    }
    FCGX_Free(&rq, 1);
    return NULL;
}

int hy_worker_main(hy_worker_ctx_t *w)
{
    struct sigaction sa;
    uint32_t n_threads = w->cfg->server.threads_per_worker, i;
    pthread_t *tids = NULL;
    wk_thread_t *ts = NULL;

    /* No SA_RESTART: a SIGTERM wakes accept() so the loop can end; a worker
     * in the middle of a stream finishes it first. */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = wk_on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (FCGX_Init() != 0) {
        hy_log(LOG_ERR, "worker_failed", "err=\"FCGX_Init failed\"");
        return 1;
    }
    if (n_threads < 1)
        n_threads = 1;
    tids = calloc(n_threads, sizeof *tids);
    ts = calloc(n_threads, sizeof *ts);
    if (tids == NULL || ts == NULL) {
        free(tids);
        free(ts);
        return 1;
    }
    for (i = 0; i < n_threads; i++) {
        ts[i].w = w;
        ts[i].log_gen = atomic_load(&w->ctl->log_gen);
    }
    hy_log(LOG_INFO, "worker_started", "threads=%u", n_threads);
    for (i = 1; i < n_threads; i++)
        if (pthread_create(&tids[i], NULL, wk_loop, &ts[i]) != 0)
            tids[i] = 0;
    wk_loop(&ts[0]);
    /* The other threads may be blocked in accept(): wake them. */
    for (i = 1; i < n_threads; i++)
        if (tids[i])
            pthread_kill(tids[i], SIGUSR1);
    for (i = 1; i < n_threads; i++)
        if (tids[i])
            pthread_join(tids[i], NULL);
    hy_log(LOG_INFO, "worker_exit", "reason=shutdown");
    free(tids);
    free(ts);
    return 0;
}
