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
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "grammar/grammar_cache.h"
#include "server/access.h"
#include "server/api.h"
#include "server/guard.h"
#include "server/json_out.h"
#include "server/metrics.h"
#include "server/stop.h"

#define WK_POLL_MS 50        /* longest wait between client-liveness checks */
#define WK_READ_BATCH 64     /* ring tokens read per call */
#define WK_RETRY_AFTER_S 2
/* what a client's X-Request-Id may contain to be used as ours */
#define WK_ID_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:/+=-"

/* ---- per-request arena: every allocation of one request, freed at once ---- */

typedef struct wk_blk {
    struct wk_blk *next;
    max_align_t data[];
} wk_blk_t;

/* What the arena runs when it is freed (in reverse order of registration):
 * the frees of objects that manage their own memory (the parsed request,
 * detokenizers, growing buffers), so error paths need no frees. */
typedef struct wk_cleanup {
    struct wk_cleanup *next;
    void (*fn)(void *arg);
    void *arg;
} wk_cleanup_t;

typedef struct {
    wk_blk_t *head;
    wk_cleanup_t *cleanups;
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

/* n zeroed bytes. */
static void *wk_zalloc(wk_arena_t *a, size_t n)
{
    void *p = wk_alloc(a, n);

    if (p != NULL)
        memset(p, 0, n);
    return p;
}

/* fn(arg) when the arena is freed; HY_ENOMEM (and fn not registered) when
 * the arena cannot hold the record. */
static int wk_arena_cleanup(wk_arena_t *a, void (*fn)(void *), void *arg)
{
    wk_cleanup_t *c = wk_alloc(a, sizeof *c);

    if (c == NULL)
        return HY_ENOMEM;
    c->fn = fn;
    c->arg = arg;
    c->next = a->cleanups;
    a->cleanups = c;
    return HY_OK;
}

static void wk_arena_free(wk_arena_t *a)
{
    for (wk_cleanup_t *c = a->cleanups; c != NULL; c = c->next)
        c->fn(c->arg);
    a->cleanups = NULL;
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
    hy_attn_counts_t attn;  /* summed over its choices (generation routes) */
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

/* Writes a CGI header block (hdr ends with the blank line) with
 * X-Request-Id added: the id this request's log line carries, so that a
 * client can quote it. */
static int wk_put_head(wk_req_t *r, const char *hdr, size_t n)
{
    char id[96];
    int k = snprintf(id, sizeof id, "X-Request-Id: %s\r\n\r\n", r->id);

    if (!r->client_gone && n >= 2 && FCGX_PutStr(hdr, (int)n - 2, r->rq->out) < 0)
        return wk_put(r, "", 0); /* reports the failure */
    return wk_put(r, id, (size_t)k);
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
        if (wk_put_head(r, "Status: 500 Internal Server Error\r\nContent-Type: text/plain\r\n\r\n",
                        64) == 0)
            wk_put(r, "out of memory\n", 14);
        r->status = 500;
        return;
    }
    if (wk_put_head(r, hdr, strlen(hdr)) == 0)
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
    if (wk_put_head(r, hdr, (size_t)n) == 0)
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
    bool unavailable;       /* failed for want of an engine (restart storm): 503 */
    char errmsg[HY_REQ_ERRMSG_LEN];
    int32_t n_prompt, n_cached, n_gen;
    hy_attn_counts_t attn;  /* its tokens' attention paths, from the engine at the end */
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
    bool tc_on;             /* tools offered: the text goes through the call parser */
    hy_tc_stream_t tc;
    hy_tc_result_t res;     /* non-streamed: content and calls */
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
    if (c->tc_on) {
        hy_tc_stream_free(&c->tc);
        hy_tc_result_free(&c->res);
    }
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

/* The tool-call syntax of the served model (read off its template). */
static hy_tc_syntax_t wk_tc_syntax(const hy_worker_ctx_t *w)
{
    size_t n;
    const char *src = hy_chat_source(w->tmpl, &n);

    return hy_tc_detect(src, n);
}

/* Renders the chat messages through the model's template: the tools (not
 * with tool_choice none) and a tool-call history as the syntax wants them
 * (toolcall.h). */
static int wk_render_chat(wk_req_t *r, const hy_api_req_t *q, char **text, size_t *len,
                          hy_api_error_t *e)
{
    hy_chat_opts_t o;
    hy_chat_msg_t *msgs;
    hy_tc_store_t *store = NULL;
    size_t n_msgs;
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
    o.extra_vars = q->template_kwargs;
    rc = hy_tc_prepare_chat(wk_tc_syntax(r->w), q->messages, q->n_messages,
                            q->tool_choice != HY_TOOL_CHOICE_NONE ? q->tools : NULL, &msgs,
                            &n_msgs, &o.tools, &store, err);
    if (rc == HY_OK)
        rc = hy_chat_render(r->w->tmpl, msgs, n_msgs, &o, text, len, err);
    hy_tc_store_free(store);
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
    /* A rendered chat carries its own BOS where the template prints
     * bos_token (Gemma's, Llama 3's): adding one would double it.  vLLM and
     * transformers tokenize rendered chats without special tokens too. */
    rc = hy_tok_encode_alloc(r->w->tok, text, len, q->kind != HY_API_CHAT, true, &out, &cnt, err);
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

static int wk_send_delta(wk_req_t *r, const hy_api_resp_t *m, wk_choice_t *c, int index,
                         const char *s, size_t n, const hy_api_token_lp_t *lp, size_t n_lp,
                         hy_jbuf_t *sb);

/* Where the tool-call parser's events go: SSE chunks, or the collected
 * answer.  A token's logprobs ride on its first content chunk (or an
 * empty one when all its text went into a call). */
typedef struct {
    wk_req_t *r;
    const hy_api_req_t *q;
    const hy_api_resp_t *m;
    wk_choice_t *c;
    int index;
    hy_jbuf_t *sb;
    const hy_api_token_lp_t *lp;
    size_t n_lp;
} wk_tc_sink_t;

static int wk_tc_event(void *arg, const hy_tc_event_t *ev)
{
    wk_tc_sink_t *k = arg;
    bool legacy = k->q->legacy_functions;
    int rc;

    if (!k->q->stream)
        return hy_tc_collect(&k->c->res, ev);
    if (ev->kind == HY_TC_EV_CONTENT) {
        rc = wk_send_delta(k->r, k->m, k->c, k->index, ev->text, ev->len, k->lp, k->n_lp, k->sb);
        k->n_lp = 0;
        return rc;
    }
    if (ev->kind != HY_TC_EV_CALL_BEGIN && ev->kind != HY_TC_EV_CALL_ARGS)
        return HY_OK; /* the end of a call has no chunk of its own */
    hy_jbuf_reset(k->sb);
    if (ev->kind == HY_TC_EV_CALL_BEGIN)
        hy_sse_tool_begin(k->sb, k->m, k->index, ev->index, ev->id, ev->name, legacy);
    else
        hy_sse_tool_args(k->sb, k->m, k->index, ev->index, ev->text, ev->len, legacy);
    if (k->sb->failed)
        return HY_ENOMEM;
    return wk_put(k->r, k->sb->data, k->sb->len) == 0 ? HY_OK : HY_EIO;
}

/* Sends (streamed) or keeps (collected) the text the stop matcher released. */
static int wk_emit(wk_req_t *r, const hy_api_req_t *q, const hy_api_resp_t *m, wk_choice_t *c,
                   int index, const char *s, size_t n, const hy_api_token_lp_t *lp,
                   size_t n_lp, hy_jbuf_t *sb)
{
    if (c->tc_on) {
        wk_tc_sink_t k = {r, q, m, c, index, sb, lp, n_lp};
        int rc = hy_tc_stream_feed(&c->tc, s, n, wk_tc_event, &k);

        if (rc == HY_OK && q->stream && k.n_lp > 0)
            rc = wk_send_delta(r, m, c, index, "", 0, k.lp, k.n_lp, sb);
        return rc;
    }
    if (!q->stream) {
        hy_jbuf_raw(&c->text, s, n);
        return c->text.failed ? HY_ENOMEM : HY_OK;
    }
    return wk_send_delta(r, m, c, index, s, n, lp, n_lp, sb);
}

/* One streamed text delta. */
static int wk_send_delta(wk_req_t *r, const hy_api_resp_t *m, wk_choice_t *c, int index,
                         const char *s, size_t n, const hy_api_token_lp_t *lp, size_t n_lp,
                         hy_jbuf_t *sb)
{
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
        if (so.stopped || (c->tc_on && hy_tc_stream_want_stop(&c->tc))) {
            /* A stop string, or the one call parallel_tool_calls false
             * allows: the engine may still be generating; stop it. */
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

    /* Cut at max_tokens, the detokenizer may hold the start of a character
     * the next token would have finished: it is dropped, not sent as
     * U+FFFD.  At any other end a held byte is a broken character the
     * model made, and says so. */
    if (!c->stop.matched && c->finish != HY_API_FINISH_LENGTH) {
        if (hy_tok_stream_flush(&c->ts, &piece, &plen, err) == HY_OK && plen > 0) {
            if ((rc = hy_stop_feed(&c->stop, piece, plen, &so)) != HY_OK)
                return rc;
            if ((rc = wk_emit(r, q, m, c, index, so.emit, so.emit_len, NULL, 0, sb)) != HY_OK)
                return rc;
        }
    }
    if (!c->stop.matched) {
        if ((rc = hy_stop_flush(&c->stop, &so)) != HY_OK)
            return rc;
        if ((rc = wk_emit(r, q, m, c, index, so.emit, so.emit_len, NULL, 0, sb)) != HY_OK)
            return rc;
    }
    if (c->tc_on) {
        wk_tc_sink_t k = {r, q, m, c, index, sb, NULL, 0};

        if ((rc = hy_tc_stream_end(&c->tc, wk_tc_event, &k)) != HY_OK)
            return rc;
        /* an answer cut at max_tokens says so even when it called tools */
        if (c->tc.n_done > 0 && c->finish == HY_API_FINISH_STOP)
            c->finish = q->legacy_functions ? HY_API_FINISH_FUNCTION_CALL
                                            : HY_API_FINISH_TOOL_CALLS;
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
        c->attn = (hy_attn_counts_t){st.dense_tokens, st.sparse_tokens, st.sparse_blocks_hot,
                                     st.sparse_blocks_warm, st.sparse_blocks_cold};
        if (st.finish_reason == HY_FINISH_ERROR || st.state == HY_REQ_ERROR) {
            c->failed = true;
            c->unavailable = st.error_code == HY_EUNAVAILABLE;
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

/* ---- one generation request, phase by phase ------------------------------------- */

/* What the phases of wk_generate share.  It lives in the request's arena,
 * and everything it owns is freed by the arena's cleanups. */
typedef struct {
    wk_req_t *r;
    hy_api_kind_t kind;
    hy_api_req_t *q;
    hy_api_error_t e;       /* the error to send when a phase fails */
    hy_api_resp_t m;        /* response metadata */
    wk_choice_t *cs;        /* [n_choices] */
    size_t n_choices;
    char *chat_text;        /* the rendered chat (HY_API_CHAT) */
    size_t chat_len;
    hy_jbuf_t sb;           /* one SSE event */
    hy_ring_tok_t *toks;    /* [WK_READ_BATCH] */
    hy_api_token_lp_t slp;  /* one streamed token's logprobs */
    hy_api_top_t stops[HY_SAMPLING_MAX_LOGPROBS];
    int32_t priority;       /* the body's or the API key's (hy_api_priority) */
    char *gspec;            /* the grammar as the engine receives it (malloc'd), or NULL */
    size_t gspec_len;
    bool tools_on;          /* tools offered (tool_choice not none): parse the calls */
} wk_gen_t;

/* A phase's outcome besides HY_OK: the client went away (nothing more to
 * send), or g->e holds the error to send. */
#define WK_GONE 1
#define WK_FAILED 2

static void wk_gen_cleanup(void *arg)
{
    wk_gen_t *g = arg;

    for (size_t i = 0; g->cs != NULL && i < g->n_choices; i++)
        wk_choice_free(&g->cs[i]);
    free(g->chat_text);
    free(g->gspec);
    hy_jbuf_free(&g->sb);
    hy_api_req_free(g->q);
}

static void wk_cancel_all(wk_gen_t *g)
{
    char err[HY_ERR_LEN];
    size_t i;

    for (i = 0; i < g->n_choices; i++)
        if (g->cs[i].live && !g->cs[i].done)
            hy_req_cancel(g->r->w->shm, g->cs[i].h, err);
}

/* Tools offered: the grammar that keeps a call to the model's syntax with
 * valid arguments (lazy for tool_choice auto, unless a response_format
 * constrains the answer that is not a call). */
static int wk_gen_tools(wk_gen_t *g)
{
    const hy_api_req_t *q = g->q;
    char err[HY_ERR_LEN];
    int rc;

    if (g->kind != HY_API_CHAT || q->tools == NULL || q->tool_choice == HY_TOOL_CHOICE_NONE)
        return HY_OK;
    g->tools_on = true;
    rc = hy_tc_grammar(q->tools, wk_tc_syntax(g->r->w), q->tool_choice, q->tool_name,
                       q->parallel_tool_calls, q->grammar, q->grammar_len, &g->gspec,
                       &g->gspec_len, err);
    if (rc == HY_ENOMEM) {
        hy_api_err_internal(&g->e, "out of memory building the tool-call grammar");
        return WK_FAILED;
    }
    if (rc != HY_OK) {
        hy_api_err_invalid(&g->e, "tools", NULL, "the tool-call grammar: %s", err);
        return WK_FAILED;
    }
    return HY_OK;
}

/* Seconds until the master tries a new engine after a restart storm. */
static int wk_engine_retry_s(const hy_worker_ctx_t *w)
{
    int64_t left = atomic_load(&hy_shm_header(w->shm)->engine_retry_at_ns) - hy_shm_now_ns();

    return left > 0 ? (int)((left + 999999999) / 1000000000) : 1;
}

/* The body: parsed, checked against the served model, the server's state,
 * and (for chat) rendered through the template. */
static int wk_gen_parse(wk_gen_t *g, const char *body, size_t len)
{
    const hy_worker_ctx_t *w = g->r->w;
    char err[HY_ERR_LEN];

    if (hy_api_parse(g->kind, body, len, &g->q, &g->e) != HY_OK ||
        hy_api_check_model(g->q, w->info.id, &g->e) != HY_OK ||
        hy_api_check_vocab(g->q, w->n_vocab, &g->e) != HY_OK ||
        hy_api_priority(g->q, FCGX_GetParam("HYSERVE_KEY_PRIORITY", g->r->rq->envp),
                        &g->priority, &g->e) != HY_OK)
        return WK_FAILED;
    if (atomic_load(&w->ctl->draining)) {
        hy_api_err_overloaded(&g->e, 503, WK_RETRY_AFTER_S, "the server is shutting down");
        return WK_FAILED;
    }
    /* a restart storm: nothing would run it (a request already queued is
     * refused by the master) */
    if (atomic_load(&hy_shm_header(w->shm)->engine_state) == HY_SHM_ENGINE_FAILED) {
        hy_api_err_overloaded(&g->e, 503, wk_engine_retry_s(w),
                              "the engine process is restarting too often; retry later");
        return WK_FAILED;
    }
    if (g->kind == HY_API_CHAT &&
        wk_render_chat(g->r, g->q, &g->chat_text, &g->chat_len, &g->e) != HY_OK)
        return WK_FAILED;
    if (g->kind == HY_API_CHAT && g->q->tools != NULL &&
        g->q->tool_choice != HY_TOOL_CHOICE_NONE)
        return wk_gen_tools(g); /* the response_format joins the calls' grammar */
    if (g->q->grammar != NULL && hy_grammar_spec_pack(g->q->grammar, g->q->grammar_len, NULL,
                                                      &g->gspec, &g->gspec_len, err) != HY_OK) {
        hy_api_err_invalid(&g->e, "response_format", NULL, "%s", err);
        return WK_FAILED;
    }
    return HY_OK;
}

/* Every choice's detokenizer and stop matcher, every prompt tokenized and
 * checked against the context, before anything is submitted. */
static int wk_gen_prompts(wk_gen_t *g)
{
    const hy_worker_ctx_t *w = g->r->w;
    const hy_api_req_t *q = g->q;
    char err[HY_ERR_LEN];
    size_t i, n = (size_t)q->n;

    g->n_choices = (g->kind == HY_API_CHAT ? 1 : q->n_prompts) * n;
    g->cs = wk_zalloc(&g->r->arena, g->n_choices * sizeof *g->cs);
    g->toks = wk_alloc(&g->r->arena, WK_READ_BATCH * sizeof *g->toks);
    if (g->cs == NULL || g->toks == NULL) {
        g->n_choices = g->cs == NULL ? 0 : g->n_choices;
        hy_api_err_internal(&g->e, "out of memory");
        return WK_FAILED;
    }
    for (i = 0; i < g->n_choices; i++) {
        wk_choice_t *c = &g->cs[i];
        const int32_t *ids = NULL;
        size_t n_ids = 0;
        int64_t max_tokens;

        hy_jbuf_init(&c->text);
        if (g->tools_on) {
            hy_tc_stream_init(&c->tc, wk_tc_syntax(w), wk_random64(), !q->parallel_tool_calls);
            c->tc_on = true;
        }
        hy_tok_stream_init(&c->ts, w->tok, !q->skip_special_tokens, false);
        c->ts_ready = true;
        if (hy_stop_init(&c->stop, q->stop, q->stop_len, q->n_stop, q->include_stop_str_in_output,
                         err) != HY_OK) {
            hy_api_err_invalid(&g->e, "stop", NULL, "%s", err);
            return WK_FAILED;
        }
        c->stop_ready = true;
        if (i % n != 0)
            continue;
        if (wk_prompt_ids(g->r, q, i / n, g->chat_text, g->chat_len, &ids, &n_ids, &g->e) != HY_OK)
            return WK_FAILED;
        if (n_ids == 0) {
            hy_api_err_invalid(&g->e, "prompt", NULL, "the prompt is empty after tokenization");
            return WK_FAILED;
        }
        max_tokens = q->max_tokens >= 0 ? q->max_tokens : (int64_t)w->n_ctx - (int64_t)n_ids;
        if ((int64_t)n_ids + HY_MAX(max_tokens, 1) > w->n_ctx || max_tokens < 1 ||
            n_ids > (size_t)hy_shm_header(w->shm)->params.max_prompt_tokens) {
            hy_api_err_context_length(&g->e, g->kind, w->n_ctx, (int64_t)n_ids,
                                      q->max_tokens >= 0 ? q->max_tokens : 1);
            return WK_FAILED;
        }
        /* the grammar travels in the prompt's shared-memory arena */
        if (g->gspec_len > hy_req_grammar_room(w->shm, (int32_t)n_ids)) {
            hy_api_err_invalid(&g->e, g->tools_on ? "tools" : "response_format", NULL,
                               "the grammar (%zu bytes compiled) does not fit next to a "
                               "%zu-token prompt: %zu bytes are left; shorten the schema or the "
                               "prompt",
                               g->gspec_len, n_ids, hy_req_grammar_room(w->shm, (int32_t)n_ids));
            return WK_FAILED;
        }
        for (size_t j = 0; j < n; j++) {
            g->cs[i + j].n_prompt = (int32_t)n_ids;
            g->cs[i + j].ids = ids;
            g->cs[i + j].max_tokens = max_tokens;
        }
    }
    return HY_OK;
}

/* One engine request per choice (seed + j for choice j); on a refusal the
 * ones already submitted are released again. */
static int wk_gen_submit(wk_gen_t *g)
{
    hy_worker_ctx_t *w = g->r->w;
    const hy_api_req_t *q = g->q;
    uint64_t seed = q->seed_given ? q->sampling.seed : wk_random64();
    char err[HY_ERR_LEN];
    size_t i, n = (size_t)q->n;
    int rc;

    for (i = 0; i < g->n_choices; i++) {
        hy_req_params_t p;

        memset(&p, 0, sizeof p);
        p.sampling = q->sampling;
        p.sampling.seed = seed + i % n;
        p.max_tokens = (int32_t)HY_MIN(g->cs[i].max_tokens, (int64_t)INT32_MAX);
        p.priority = g->priority;
        /* End-of-generation tokens are the engine's business (it knows the
         * vocabulary); stop strings are ours. */
        p.flags = (q->ignore_eos ? HY_REQ_F_IGNORE_EOS : 0) |
                  (q->logprobs ? 0 : HY_REQ_F_NO_LOGPROBS);
        rc = hy_req_submit_grammar(w->shm, &p, g->cs[i].ids, g->cs[i].n_prompt, g->gspec,
                                   g->gspec_len, &g->cs[i].h, err);
        if (rc != HY_OK) {
            if (rc == HY_EFULL)
                hy_api_err_overloaded(&g->e, 503, WK_RETRY_AFTER_S,
                                      "no free request slot; retry later");
            else
                hy_api_err_internal(&g->e, err);
            for (size_t j = 0; j < i; j++) {
                hy_req_release(w->shm, g->cs[j].h, err);
                g->cs[j].live = false;
            }
            return WK_FAILED;
        }
        g->cs[i].live = true;
        g->r->prompt_tokens += (i % n == 0) ? g->cs[i].n_prompt : 0;
    }
    hy_shm_engine_kick(w->shm);
    return HY_OK;
}

/* Response metadata; for a stream the headers, each choice's role and the
 * echoed prompt, for a body the echoed prompt in each choice's text. */
static int wk_gen_head(wk_gen_t *g)
{
    const hy_api_req_t *q = g->q;
    wk_req_t *r = g->r;
    size_t i;

    memset(&g->m, 0, sizeof g->m);
    g->m.kind = g->kind;
    hy_api_make_id(g->kind, wk_random64(), wk_random64(), r->id);
    g->m.id = r->id;
    g->m.created = (int64_t)time(NULL);
    g->m.model = r->w->info.id;
    g->m.logprobs = q->logprobs;
    g->m.include_usage = q->stream && q->include_usage;
    if (!q->stream) {
        for (i = 0; q->echo && g->kind != HY_API_CHAT && i < g->n_choices; i++) {
            const hy_api_prompt_t *pp = &q->prompts[i / (size_t)q->n];
            if (pp->text != NULL)
                hy_jbuf_raw(&g->cs[i].text, pp->text, pp->text_len);
        }
        return HY_OK;
    }
    {
        static const char hdr[] = "Status: 200 OK\r\nContent-Type: text/event-stream\r\n"
                                  "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n\r\n";
        r->status = 200;
        r->head_sent = true;
        if (wk_put_head(r, hdr, sizeof hdr - 1) != 0)
            return WK_GONE;
    }
    for (i = 0; i < g->n_choices; i++) {
        hy_jbuf_reset(&g->sb);
        if (g->kind == HY_API_CHAT)
            hy_sse_role(&g->sb, &g->m, (int)i);
        if (q->echo && g->kind != HY_API_CHAT) {
            const hy_api_prompt_t *pp = &q->prompts[i / (size_t)q->n];
            if (pp->text != NULL) {
                hy_sse_delta(&g->sb, &g->m, (int)i, pp->text, pp->text_len, NULL, 0, 0);
                g->cs[i].lp_offset = pp->text_len;
            }
        }
        if (g->sb.len > 0 && wk_put(r, g->sb.data, g->sb.len) != 0)
            return WK_GONE;
    }
    return HY_OK;
}

/* The read loop: every live choice, until all are done.  A pass that finds
 * nothing blocks on the first live choice, at most WK_POLL_MS so that a
 * client hang-up is noticed even during a long prefill. */
static int wk_gen_read(wk_gen_t *g)
{
    int timeout = 0, rc;
    size_t i, n_live;

    for (;;) {
        bool any = false;

        n_live = 0;
        for (i = 0; i < g->n_choices; i++) {
            if (g->cs[i].done)
                continue;
            rc = wk_poll_choice(g->r, g->q, &g->m, &g->cs[i], (int)i, g->toks, timeout, &g->sb,
                                &g->slp, g->stops, &any);
            timeout = 0;
            if (rc == HY_EIO)
                return WK_GONE;
            if (rc != HY_OK) {
                hy_api_err_internal(&g->e, "cannot format tokens");
                return WK_FAILED;
            }
            if (!g->cs[i].done)
                n_live++;
        }
        if (n_live == 0)
            return HY_OK;
        if (!any) {
            if (wk_peer_closed(g->r))
                return WK_GONE;
            timeout = WK_POLL_MS;
        }
    }
}

/* Usage and the end of the response: the final SSE events, or the whole
 * JSON body; an engine error in any choice is the response's error. */
static void wk_gen_end(wk_gen_t *g)
{
    const hy_api_req_t *q = g->q;
    wk_req_t *r = g->r;
    hy_api_usage_t u = {0};
    hy_api_choice_t *ch;
    const char *why = NULL;
    bool unavailable = false;
    char *out = NULL;
    size_t i, out_len = 0;
    int rc;

    for (i = 0; i < g->n_choices; i++) {
        r->attn.dense_tokens += g->cs[i].attn.dense_tokens;
        r->attn.sparse_tokens += g->cs[i].attn.sparse_tokens;
        r->attn.blocks_hot += g->cs[i].attn.blocks_hot;
        r->attn.blocks_warm += g->cs[i].attn.blocks_warm;
        r->attn.blocks_cold += g->cs[i].attn.blocks_cold;
        u.completion_tokens += g->cs[i].n_gen;
        if (i % (size_t)q->n == 0)
            u.cached_tokens += g->cs[i].n_cached;
        if (g->cs[i].failed)
            why = g->cs[i].errmsg;
        unavailable |= g->cs[i].failed && g->cs[i].unavailable;
    }
    u.prompt_tokens = r->prompt_tokens;
    r->cached_tokens = (int32_t)u.cached_tokens;
    r->completion_tokens = (int32_t)u.completion_tokens;
    if (why != NULL) {
        if (unavailable)
            hy_api_err_overloaded(&g->e, 503, wk_engine_retry_s(r->w), why);
        else
            hy_api_err_internal(&g->e, why);
        if (q->stream) {
            hy_jbuf_reset(&g->sb);
            hy_sse_error(&g->sb, &g->e);
            r->status = g->e.status;
            wk_put(r, g->sb.data, g->sb.len);
        } else {
            wk_send_error(r, &g->e, NULL);
        }
        return;
    }
    if (q->stream) {
        hy_jbuf_reset(&g->sb);
        if (g->m.include_usage)
            hy_sse_usage(&g->sb, &g->m, &u);
        hy_sse_done(&g->sb);
        if (!g->sb.failed)
            wk_put(r, g->sb.data, g->sb.len);
        return;
    }
    if ((ch = wk_zalloc(&r->arena, g->n_choices * sizeof *ch)) == NULL) {
        hy_api_err_internal(&g->e, "out of memory");
        wk_send_error(r, &g->e, NULL);
        return;
    }
    for (i = 0; i < g->n_choices; i++) {
        const hy_api_prompt_t *pp = &q->prompts[i / (size_t)q->n];

        wk_lp_fixup(&g->cs[i]);
        ch[i].text = g->cs[i].text.data ? g->cs[i].text.data : "";
        ch[i].text_len = g->cs[i].text.len;
        if (g->cs[i].tc_on) {
            if (g->cs[i].res.failed) {
                hy_api_err_internal(&g->e, "out of memory");
                wk_send_error(r, &g->e, NULL);
                return;
            }
            ch[i].text = g->cs[i].res.content.data ? g->cs[i].res.content.data : "";
            ch[i].text_len = g->cs[i].res.content.len;
            ch[i].calls = g->cs[i].res.calls;
            ch[i].n_calls = g->cs[i].res.n_calls;
            ch[i].legacy = q->legacy_functions;
        }
        ch[i].finish = g->cs[i].finish;
        ch[i].lp = g->cs[i].lp;
        ch[i].n_lp = g->cs[i].n_lp;
        ch[i].text_offset = q->echo && g->kind != HY_API_CHAT && pp->text ? pp->text_len : 0;
    }
    rc = hy_api_format_response(&g->m, ch, g->n_choices, &u, &out, &out_len);
    wk_send_json(r, rc, out, out_len);
}

/* A phase failed: stop what runs, then the error in the stream (headers
 * are out) or as the response; a client that went away gets nothing. */
static void wk_gen_fail(wk_gen_t *g, int why)
{
    wk_req_t *r = g->r;

    wk_cancel_all(g);
    if (why == WK_GONE) {
        r->status = 499;
        return;
    }
    if (r->head_sent) {
        hy_jbuf_reset(&g->sb);
        hy_sse_error(&g->sb, &g->e);
        wk_put(r, g->sb.data, g->sb.len);
        r->status = g->e.status;
    } else {
        wk_send_error(r, &g->e, NULL);
    }
}

static void wk_generate(wk_req_t *r, hy_api_kind_t kind, const char *body, size_t len)
{
    wk_gen_t *g = wk_zalloc(&r->arena, sizeof *g);
    char err[HY_ERR_LEN];
    size_t i;
    int rc;

    if (g == NULL || wk_arena_cleanup(&r->arena, wk_gen_cleanup, g) != HY_OK) {
        hy_api_error_t e;

        hy_api_err_internal(&e, "out of memory");
        wk_send_error(r, &e, NULL);
        return;
    }
    g->r = r;
    g->kind = kind;
    hy_jbuf_init(&g->sb);
    if ((rc = wk_gen_parse(g, body, len)) == HY_OK && (rc = wk_gen_prompts(g)) == HY_OK &&
        (rc = wk_gen_submit(g)) == HY_OK && (rc = wk_gen_head(g)) == HY_OK)
        rc = wk_gen_read(g);
    if (rc == HY_OK)
        wk_gen_end(g);
    else
        wk_gen_fail(g, rc);
    /* the engine requests go back now; the arena frees the rest */
    for (i = 0; i < g->n_choices; i++) {
        if (g->cs[i].live)
            hy_req_release(r->w->shm, g->cs[i].h, err);
        g->cs[i].live = false;
        if (r->completion_tokens == 0 && g->cs[i].n_gen > 0 && r->status == 499)
            r->completion_tokens += g->cs[i].n_gen;
    }
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

/* GET /v1/models, or with one (GET /v1/models/{one}) that model's object
 * alone (404 when it is not the served one). */
static void wk_models(wk_req_t *r, const char *one)
{
    char *out = NULL, *with = NULL;
    size_t len = 0;
    cJSON *doc = NULL, *m;
    wk_version_t v;
    hy_api_error_t e;
    int rc;

    if (one != NULL && strcmp(one, r->w->info.id) != 0) {
        hy_api_err_model_not_found(&e, one);
        wk_send_error(r, &e, NULL);
        return;
    }
    rc = hy_api_format_models(&r->w->info, &out, &len);

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
            (with = cJSON_PrintUnformatted(one != NULL ? m : doc)) == NULL)
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
    } else if (!atomic_load(&h->ready) ||
               atomic_load(&h->engine_state) == HY_SHM_ENGINE_STARTING) {
        hy_api_err_overloaded(&e, 503, WK_RETRY_AFTER_S, "loading");
        wk_send_error(r, &e, NULL);
    } else if (atomic_load(&h->engine_state) == HY_SHM_ENGINE_RESTARTING) {
        /* requests are accepted meanwhile: they wait for the new engine */
        hy_api_err_overloaded(&e, 503, WK_RETRY_AFTER_S,
                              "restarting: the engine process died and a new one is loading; "
                              "requests in flight resume");
        wk_send_error(r, &e, NULL);
    } else if (atomic_load(&h->engine_state) == HY_SHM_ENGINE_FAILED) {
        hy_api_err_overloaded(&e, 503, wk_engine_retry_s(r->w),
                              "failed: the engine process is restarting too often");
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

/* Prometheus text from the segment's stats (server/metrics.c). */
static void wk_metrics(wk_req_t *r)
{
    hy_metrics_info_t in;
    wk_version_t v;
    char *out = NULL;
    size_t len = 0;

    wk_version(r, &v);
    in.instance = v.instance;
    in.model = r->w->info.id;
    in.model_version = v.model_version;
    in.version = PACKAGE_VERSION;
    in.draining = atomic_load(&r->w->ctl->draining);
    if (hy_metrics_render(r->w->shm, &in, &out, &len) != HY_OK) {
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

enum { WK_GEN, WK_MODELS, WK_MODEL, WK_HEALTH, WK_METRICS, WK_TOKENIZE, WK_DETOKENIZE };

static const struct {
    const char *path;   /* a path ending in '/' matches what starts with it */
    const char *method; /* GET routes also answer HEAD */
    int handler;
    hy_api_kind_t kind;
} wk_routes[] = {
    {"/v1/completions", "POST", WK_GEN, HY_API_COMPLETIONS},
    {"/v1/chat/completions", "POST", WK_GEN, HY_API_CHAT},
    {"/v1/infer", "POST", WK_GEN, HY_API_INFER},
    {"/generate", "POST", WK_GEN, HY_API_GENERATE},
    {"/v1/models", "GET", WK_MODELS, 0},
    {"/v1/models/", "GET", WK_MODEL, 0}, /* /v1/models/{model} */
    {"/health", "GET", WK_HEALTH, 0},
    {"/metrics", "GET", WK_METRICS, 0},
    {"/tokenize", "POST", WK_TOKENIZE, 0},
    {"/detokenize", "POST", WK_DETOKENIZE, 0},
};

static bool wk_route_match(const char *route, const char *path)
{
    size_t n = strlen(route);

    if (route[n - 1] == '/')
        return strncmp(path, route, n) == 0 && path[n] != '\0' && strchr(path + n, '/') == NULL;
    return strcmp(path, route) == 0;
}

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

/* nginx is the only way in: a request without the instance's secret comes
 * from another local process speaking FastCGI to the socket, and whatever
 * key id it claims is not believed (logged as claimed, not as the key). */
static bool wk_admitted(wk_req_t *r, const char *path, const char **key_id)
{
    const char *given = FCGX_GetParam("HYSERVE_SECRET", r->rq->envp);
    hy_api_error_t e;

    if (r->w->secret == NULL || !r->w->secret[0] || hy_access_secret_equal(r->w->secret, given))
        return true;
    hy_log(LOG_WARNING, "forbidden", "req=%s route=%.200s reason=%s claimed_key_id=%.64s",
           r->id, path, given != NULL && *given ? "wrong instance secret" : "no instance secret",
           strspn(*key_id, WK_ID_CHARS) == strlen(*key_id) ? *key_id : "(not a token)");
    *key_id = "-";
    hy_api_err_forbidden(&e, "Requests reach this server through its web server only (no "
                             "instance secret).");
    wk_send_error(r, &e, NULL);
    return false;
}

/* A refusal nginx made itself (API key, rate limit, body size, malformed
 * request...), handed over by the site's error_page location with its
 * status (HYSERVE_NGINX_STATUS): the client gets OpenAI's error object and
 * /metrics counts it under origin="nginx" and the endpoint the client asked
 * for (REQUEST_URI; the location's own path is nginx's, not the client's). */
static void wk_nginx_refusal(wk_req_t *r, const char *status, char *pbuf, size_t cap)
{
    const char *uri = FCGX_GetParam("REQUEST_URI", r->rq->envp);
    hy_api_error_t e;
    char *end;
    long st;

    snprintf(pbuf, cap, "%.*s", uri ? (int)strcspn(uri, "?") : 0, uri ? uri : "");
    r->route = pbuf[0] ? pbuf : "-";
    errno = 0;
    st = strtol(status, &end, 10);
    if (errno || *end || st < 100 || st > 599)
        st = 0;
    if (hy_metrics_nginx_error((int)st, &e) != HY_OK)
        hy_log(LOG_ERR, "bad_nginx_status", "req=%s status=\"%.16s\"", r->id, status);
    wk_send_error(r, &e, e.status == 405 ? "GET, HEAD, POST" : NULL);
}

/* One request: route, answer, log, finish the response, then free its
 * arena.  control: a request from the control socket, which serves only what
 * answers at once (/health, /metrics, /v1/models, nginx's refusals), so
 * that probes and scrapes get through while every generation worker
 * streams. */
static void wk_handle(hy_worker_ctx_t *w, FCGX_Request *rq, bool control)
{
    wk_req_t r;
    hy_api_error_t e;
    char pbuf[512], *body = NULL;
    const char *path, *method, *rid, *key_id, *nginx_status;
    size_t i, len = 0;
    bool path_known = false;
    hy_metrics_origin_t origin = HY_METRICS_HYSERVE;

    memset(&r, 0, sizeof r);
    r.w = w;
    r.rq = rq;
    r.t0_ns = hy_shm_now_ns();
    /* the client's X-Request-Id when it is a plain token: it goes into a
     * response header and a key=value log line as it is */
    rid = FCGX_GetParam("HTTP_X_REQUEST_ID", rq->envp);
    if (rid != NULL && *rid && strspn(rid, WK_ID_CHARS) == strlen(rid))
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
    if (!wk_admitted(&r, path, &key_id))
        goto log;
    if ((nginx_status = FCGX_GetParam("HYSERVE_NGINX_STATUS", rq->envp)) != NULL) {
        wk_nginx_refusal(&r, nginx_status, pbuf, sizeof pbuf);
        origin = HY_METRICS_NGINX;
        goto log;
    }
    for (i = 0; i < HY_ARRAY_LEN(wk_routes); i++) {
        if (!wk_route_match(wk_routes[i].path, path))
            continue;
        path_known = true;
        if (strcmp(method, wk_routes[i].method) == 0 ||
            (strcmp(method, "HEAD") == 0 && strcmp(wk_routes[i].method, "GET") == 0))
            break;
    }
    if (i == HY_ARRAY_LEN(wk_routes)) {
        if (path_known) {
            size_t j;
            for (j = 0; j < HY_ARRAY_LEN(wk_routes) && !wk_route_match(wk_routes[j].path, path);
                 j++)
                ;
            hy_api_err_method(&e, method, wk_routes[j].method);
            wk_send_error(&r, &e, strcmp(wk_routes[j].method, "GET") == 0 ? "GET, HEAD" : "POST");
        } else {
            hy_api_err_not_found(&e, path);
            wk_send_error(&r, &e, NULL);
        }
        goto log;
    }
    /* one model's object counts as /v1/models */
    r.route = wk_routes[i].handler == WK_MODEL ? "/v1/models" : wk_routes[i].path;
    if (control && wk_routes[i].handler != WK_HEALTH && wk_routes[i].handler != WK_METRICS &&
        wk_routes[i].handler != WK_MODELS && wk_routes[i].handler != WK_MODEL) {
        hy_api_err_not_found(&e, path);
        snprintf(e.message, sizeof e.message,
                 "%.200s is served on the FastCGI socket ([server] socket), not the control "
                 "socket", path);
        wk_send_error(&r, &e, NULL);
        goto log;
    }
    if (strcmp(wk_routes[i].method, "POST") == 0 && wk_read_body(&r, &body, &len, &e) != HY_OK) {
        wk_send_error(&r, &e, NULL);
        goto log;
    }
    switch (wk_routes[i].handler) {
    case WK_GEN: wk_generate(&r, wk_routes[i].kind, body, len); break;
    case WK_MODELS: wk_models(&r, NULL); break;
    case WK_MODEL: wk_models(&r, path + strlen(wk_routes[i].path)); break;
    case WK_HEALTH: wk_health(&r); break;
    case WK_METRICS: wk_metrics(&r); break;
    case WK_TOKENIZE: wk_tokenize(&r, body, len); break;
    case WK_DETOKENIZE: wk_detokenize(&r, body, len); break;
    }
log:
    hy_metrics_count(hy_shm_stats(w->shm), origin, r.route, r.status);
    if (r.route != NULL && (strcmp(r.route, "/health") != 0 && strcmp(r.route, "/metrics") != 0
                            ? true : hy_log_enabled(LOG_DEBUG))) {
        int lv = r.status >= 500 ? LOG_WARNING : LOG_INFO;
        double dur = (hy_shm_now_ns() - r.t0_ns) / 1e6;

        /* a request that computed tokens also says their attention path
         * (issue 14): dense, sparse or both (a prompt crossing
         * sparse_min_tokens), and the blocks the sparse ones read */
        if (r.attn.dense_tokens + r.attn.sparse_tokens > 0)
            hy_log(lv, "request",
                   "req=%s key_id=%s route=%s method=%s status=%d prompt_tokens=%d "
                   "cached_tokens=%d completion_tokens=%d ttft_ms=%.1f duration_ms=%.1f attn=%s "
                   "sparse_tokens=%llu blocks_hot=%llu blocks_warm=%llu blocks_cold=%llu",
                   r.id, key_id, r.route, method, r.status, r.prompt_tokens, r.cached_tokens,
                   r.completion_tokens, r.ttft_ns / 1e6, dur,
                   r.attn.sparse_tokens == 0  ? "dense"
                   : r.attn.dense_tokens == 0 ? "sparse"
                                              : "dense+sparse",
                   (unsigned long long)r.attn.sparse_tokens,
                   (unsigned long long)r.attn.blocks_hot,
                   (unsigned long long)r.attn.blocks_warm,
                   (unsigned long long)r.attn.blocks_cold);
        else
            hy_log(lv, "request",
                   "req=%s key_id=%s route=%s method=%s status=%d prompt_tokens=%d "
                   "cached_tokens=%d completion_tokens=%d ttft_ms=%.1f duration_ms=%.1f",
                   r.id, key_id, r.route, method, r.status, r.prompt_tokens, r.cached_tokens,
                   r.completion_tokens, r.ttft_ns / 1e6, dur);
    }
    /* the response is complete before the request's memory goes */
    FCGX_Finish_r(rq);
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
    uint32_t index; /* its slot in the connection guard */
    int fd;       /* the socket this thread accepts on */
    bool control; /* it is the control socket */
    bool tcp;     /* it is [server] listen: peers are checked against [server] allow */
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

/* A TCP peer outside [server] allow is closed unanswered before anything
 * of its request is looked at.  libfcgi accepts inside FCGX_Accept_r (and
 * has read the request's FastCGI parameters by the time it returns), so
 * this is the first moment the connection is ours to judge. */
static bool wk_peer_allowed(hy_worker_ctx_t *w, FCGX_Request *rq)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char addr[HY_NET_ADDR_STR];
    int one = 1;

    if (getpeername(rq->ipcFd, (struct sockaddr *)&ss, &len) != 0)
        ss.ss_family = AF_UNSPEC;
    if (hy_net_allowed(w->allow, (struct sockaddr *)&ss)) {
        /* libfcgi sets it for IPv4 peers only: tokens must not wait on Nagle */
        (void)setsockopt(rq->ipcFd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return true;
    }
    hy_net_format((struct sockaddr *)&ss, addr, sizeof addr);
    hy_log(LOG_WARNING, "peer_refused", "peer=%s key=%s allow=%s", addr, "[server] allow",
           w->cfg->server.allow[0] ? w->cfg->server.allow : "127.0.0.0/8, ::1/128");
    (void)shutdown(rq->ipcFd, SHUT_RDWR);
    FCGX_Free(rq, 1);
    return false;
}

/* The master's death (the kernel's PR_SET_PDEATHSIG, SIGUSR2) takes the
 * whole host: the engine dies with it, and nobody is left to write the
 * guard's abort (guard.h) onto the connections this worker answers, so the
 * worker does it itself before exiting: its streams end in an error at the
 * client, never in what looks like a complete answer.  wk_conns[i] is the
 * connection accept thread i answers, -1 between requests; the record is
 * built at start, so the handler only sends. */
static _Atomic int *wk_conns;
static uint32_t wk_n_conns;
static unsigned char wk_abort[HY_GUARD_ABORT_MAX];
static size_t wk_abort_len;

static void wk_on_master_gone(int sig)
{
    (void)sig;
    for (uint32_t i = 0; i < wk_n_conns; i++) {
        int fd = atomic_load(&wk_conns[i]);

        if (fd >= 0)
            (void)send(fd, wk_abort, wk_abort_len, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    _exit(70);
}

static void wk_master_gone_init(uint32_t n_all)
{
    struct sigaction sa;
    char why[160];

    snprintf(why, sizeof why, "hyserve: the master of worker %d died (its host went down); "
                              "the response is aborted", (int)getpid());
    wk_abort_len = hy_guard_abort_record(wk_abort, sizeof wk_abort, why);
    for (uint32_t i = 0; i < n_all; i++)
        atomic_store(&wk_conns[i], -1);
    wk_n_conns = n_all;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = wk_on_master_gone;
    sigfillset(&sa.sa_mask);
    /* before this, SIGUSR2's default action ends the worker: nothing was
     * accepted yet, so there is nothing to abort */
    sigaction(SIGUSR2, &sa, NULL);
}

static void *wk_loop(void *arg)
{
    wk_thread_t *t = arg;
    hy_worker_ctx_t *w = t->w;
    FCGX_Request rq;

    if (FCGX_InitRequest(&rq, t->fd, FCGI_FAIL_ACCEPT_ON_INTR) != 0)
        return NULL;
    while (!wk_stop && FCGX_Accept_r(&rq) >= 0) {
        int gen = atomic_load(&w->ctl->log_gen);

        char err[HY_ERR_LEN];
        bool held;

        if (gen != t->log_gen) {
            wk_log_reopen(w, gen);
            t->log_gen = gen;
        }
        if (t->tcp && !wk_peer_allowed(w, &rq))
            continue;
        /* the coordinator holds the connection while we answer, so that
         * our death aborts the response instead of ending it */
        held = w->guard_fd >= 0 && hy_guard_hold(w->guard_fd, t->index, rq.ipcFd, err) == HY_OK;
        if (w->guard_fd >= 0 && !held)
            hy_log(LOG_WARNING, "unguarded", "err=%s", err);
        atomic_store(&wk_conns[t->index], rq.ipcFd);
        wk_handle(w, &rq, t->control);
        /* closed by now: its number may be another thread's next connection,
         * which a dying master aborts too, so the window costs nothing */
        atomic_store(&wk_conns[t->index], -1);
        if (held && hy_guard_drop(w->guard_fd, t->index, err) != HY_OK)
            hy_log(LOG_WARNING, "unguarded", "err=%s", err);
    }
    FCGX_Free(&rq, 1);
    return NULL;
}

int hy_worker_main(hy_worker_ctx_t *w)
{
    struct sigaction sa;
    uint32_t n_threads = w->cfg->server.threads_per_worker, n_all, i;
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
    /* as many again for [server] listen, one more for the control socket */
    n_all = n_threads * (1 + (w->tcp_fd >= 0)) + (w->control_fd >= 0);
    tids = calloc(n_all, sizeof *tids);
    ts = calloc(n_all, sizeof *ts);
    wk_conns = calloc(n_all, sizeof *wk_conns);
    if (tids == NULL || ts == NULL || wk_conns == NULL) {
        free(tids);
        free(ts);
        return 1;
    }
    wk_master_gone_init(n_all);
    for (i = 0; i < n_all; i++) {
        ts[i].w = w;
        ts[i].log_gen = atomic_load(&w->ctl->log_gen);
        ts[i].index = i;
        ts[i].control = w->control_fd >= 0 && i == n_all - 1;
        ts[i].tcp = !ts[i].control && i >= n_threads;
        ts[i].fd = ts[i].control ? w->control_fd : ts[i].tcp ? w->tcp_fd : w->listen_fd;
    }
    hy_log(LOG_INFO, "worker_started", "threads=%u control=%d tcp=%d", n_threads,
           w->control_fd >= 0, w->tcp_fd >= 0);
    for (i = 1; i < n_all; i++)
        if (pthread_create(&tids[i], NULL, wk_loop, &ts[i]) != 0)
            tids[i] = 0;
    wk_loop(&ts[0]);
    /* The other threads may be blocked in accept(): wake them. */
    for (i = 1; i < n_all; i++)
        if (tids[i])
            pthread_kill(tids[i], SIGUSR1);
    for (i = 1; i < n_all; i++)
        if (tids[i])
            pthread_join(tids[i], NULL);
    hy_log(LOG_INFO, "worker_exit", "reason=shutdown");
    free(tids);
    free(ts);
    return 0;
}
