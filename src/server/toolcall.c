/*
 * toolcall.c - the output side of tool calling (toolcall.h): the parser
 * that splits the model's text into content and tool calls as it arrives.
 * The prompt side and the grammar are in toolcall_prompt.c.
 *
 * The parser is a small state machine over a buffer of text not yet given
 * out.  In TEXT it passes content through, holding back a tail that could
 * be the start of the opening marker (and trailing whitespace, which is
 * dropped when a call follows).  At a marker it reads the call's head
 * ({"name": "f", "arguments":) and announces the call; the arguments are
 * then given out as they arrive, their end found by a JSON scanner, and
 * the closing marker ends the call.  Anything that does not have that
 * shape (another key order, an array of calls, arguments as a string) is
 * held until the call's end and parsed whole with cJSON; if it is not a
 * call after all it goes out as content, so no text is ever lost.  The
 * non-streamed answer is built from the same events (hy_tc_collect), so
 * both modes agree.
 */
#define _GNU_SOURCE /* memmem */
#include "server/toolcall.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ST_TEXT, ST_HEAD, ST_ARGS, ST_TAIL, ST_DEFER, ST_STOPPED };

/* literal match results */
#define LIT_MISS (-1)
#define LIT_NEED 0
#define LIT_OK 1

static const char k_open_hermes[] = "<tool_call>";
static const char k_close_hermes[] = "</tool_call>";
static const char k_open_llama3[] = "{\"name\"";

static bool is_llama3(const hy_tc_stream_t *s)
{
    return s->syn == HY_TC_LLAMA3;
}

static const char *open_marker(const hy_tc_stream_t *s)
{
    return is_llama3(s) ? k_open_llama3 : k_open_hermes;
}

/* Where the JSON body of a call starts in buf: after <tool_call>; at the
 * marker itself for Llama 3, whose marker is the object's start. */
static size_t body_at(const hy_tc_stream_t *s)
{
    return is_llama3(s) ? 0 : sizeof k_open_hermes - 1;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

void hy_tc_stream_init(hy_tc_stream_t *s, hy_tc_syntax_t syn, uint64_t id_seed,
                       bool stop_after_one)
{
    memset(s, 0, sizeof *s);
    hy_jbuf_init(&s->b);
    s->syn = syn;
    s->state = ST_TEXT;
    s->id_seed = id_seed;
    s->stop_after_one = stop_after_one;
}

void hy_tc_stream_free(hy_tc_stream_t *s)
{
    hy_jbuf_free(&s->b);
}

bool hy_tc_stream_want_stop(const hy_tc_stream_t *s)
{
    return s->stop_after_one && s->n_done > 0;
}

static int buf_add(hy_tc_stream_t *s, const char *p, size_t n)
{
    hy_jbuf_raw(&s->b, p, n);
    if (s->b.failed)
        s->failed = true;
    return s->failed ? HY_ENOMEM : HY_OK;
}

/* Drops buf[0..n). */
static void buf_cut(hy_tc_stream_t *s, size_t n)
{
    s->scan = 0;
    if (s->b.data == NULL)
        return;
    memmove(s->b.data, s->b.data + n, s->b.len - n);
    s->b.len -= n;
    s->b.data[s->b.len] = '\0';
}

/* lit at s[*i..n): LIT_OK (and *i moves past it), LIT_NEED (s ends inside
 * it) or LIT_MISS. */
static int lit(const char *s, size_t n, size_t *i, const char *lit)
{
    size_t k = strlen(lit), have = n - *i < k ? n - *i : k;

    if (memcmp(s + *i, lit, have) != 0)
        return LIT_MISS;
    if (have < k)
        return LIT_NEED;
    *i += k;
    return LIT_OK;
}

static void skip_ws(const char *s, size_t n, size_t *i)
{
    while (*i < n && is_ws(s[*i]))
        (*i)++;
}

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c == '.';
}

/* The head of a call, {"name": "f", "arguments": (or "parameters"), up to
 * the '{' that opens the arguments: LIT_OK with *args_at there, LIT_NEED,
 * or LIT_MISS for any other shape (left to the whole-call parse). */
static int head_parse(const char *s, size_t n, size_t *args_at, char *name)
{
    size_t i = 0, k;
    int r;

#define STEP(expr)                   \
    do {                             \
        if ((r = (expr)) != LIT_OK)  \
            return r;                \
    } while (0)
    skip_ws(s, n, &i);
    STEP(lit(s, n, &i, "{"));
    skip_ws(s, n, &i);
    STEP(lit(s, n, &i, "\"name\""));
    skip_ws(s, n, &i);
    STEP(lit(s, n, &i, ":"));
    skip_ws(s, n, &i);
    STEP(lit(s, n, &i, "\""));
    for (k = 0; i < n && s[i] != '"'; i++, k++) {
        if (!name_char(s[i]) || k == HY_TC_MAX_NAME)
            return LIT_MISS;
        name[k] = s[i];
    }
    if (i == n)
        return LIT_NEED;
    if (k == 0)
        return LIT_MISS;
    name[k] = '\0';
    i++;
    skip_ws(s, n, &i);
    STEP(lit(s, n, &i, ","));
    skip_ws(s, n, &i);
    {
        size_t j = i;
        int a = lit(s, n, &i, "\"arguments\""), p;

        if (a != LIT_OK) {
            i = j;
            p = lit(s, n, &i, "\"parameters\"");
            if (p != LIT_OK)
                return a == LIT_NEED || p == LIT_NEED ? LIT_NEED : LIT_MISS;
        }
    }
    skip_ws(s, n, &i);
    STEP(lit(s, n, &i, ":"));
    skip_ws(s, n, &i);
    STEP(lit(s, n, &i, "{"));
#undef STEP
    *args_at = i - 1;
    return LIT_OK;
}

static uint64_t mix64(uint64_t z)
{
    /* splitmix64's finaliser */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* "call_" + 24 letters and digits, from the answer's seed and the call's
 * index: distinct per call and per answer. */
static void make_id(hy_tc_stream_t *s)
{
    static const char k_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t x = mix64(s->id_seed ^ mix64((uint64_t)s->n_calls + 1)), z = 0;
    int i;

    memcpy(s->id, "call_", 5);
    for (i = 0; i < 24; i++) {
        if (i % 8 == 0)
            z = mix64(x += 0x9E3779B97F4A7C15ull);
        s->id[5 + i] = k_chars[z % (sizeof k_chars - 1)];
        z /= sizeof k_chars - 1;
    }
    s->id[HY_TC_ID_LEN] = '\0';
}

static int emit(hy_tc_sink_fn sink, void *arg, hy_tc_ev_kind_t kind, int index,
                const hy_tc_stream_t *s, const char *text, size_t len)
{
    hy_tc_event_t ev = {kind, index, s->id, s->name, text, len};

    if ((kind == HY_TC_EV_CONTENT || kind == HY_TC_EV_CALL_ARGS) && len == 0)
        return HY_OK;
    return sink(arg, &ev);
}

/* The whitespace a call took out, when the call turned out not to be one
 * (so its text is content after all). */
static int emit_sep(hy_tc_stream_t *s, hy_tc_sink_fn sink, void *arg)
{
    int rc = emit(sink, arg, HY_TC_EV_CONTENT, 0, s, s->sep, s->sep_len);

    s->sep_len = 0;
    return rc;
}

/* One call parsed whole (cJSON): an object with "name" and "arguments" or
 * "parameters" (an object, or a string holding one). */
static bool call_ok(const cJSON *o)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "name"), *a;
    size_t k;

    if (!cJSON_IsObject(o) || !cJSON_IsString(n) || n->valuestring[0] == '\0' ||
        strlen(n->valuestring) > HY_TC_MAX_NAME)
        return false;
    for (k = 0; n->valuestring[k]; k++)
        if (!name_char(n->valuestring[k]))
            return false;
    a = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (a == NULL)
        a = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    if (a == NULL || cJSON_IsObject(a)) /* none: a function without parameters */
        return true;
    if (cJSON_IsString(a)) {
        cJSON *p = cJSON_Parse(a->valuestring);
        bool ok = cJSON_IsObject(p);

        cJSON_Delete(p);
        return ok;
    }
    return false;
}

static int emit_parsed_call(hy_tc_stream_t *s, const cJSON *o, hy_tc_sink_fn sink, void *arg)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    char *text = NULL;
    int rc, index = s->n_calls;

    if (a == NULL)
        a = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    snprintf(s->name, sizeof s->name, "%s",
             cJSON_GetObjectItemCaseSensitive(o, "name")->valuestring);
    make_id(s);
    s->n_calls++;
    if ((rc = emit(sink, arg, HY_TC_EV_CALL_BEGIN, index, s, NULL, 0)) != HY_OK)
        return rc;
    if (a == NULL)
        rc = emit(sink, arg, HY_TC_EV_CALL_ARGS, index, s, "{}", 2);
    else if (cJSON_IsString(a))
        rc = emit(sink, arg, HY_TC_EV_CALL_ARGS, index, s, a->valuestring, strlen(a->valuestring));
    else if ((text = cJSON_PrintUnformatted(a)) == NULL)
        rc = HY_ENOMEM;
    else
        rc = emit(sink, arg, HY_TC_EV_CALL_ARGS, index, s, text, strlen(text));
    free(text);
    if (rc == HY_OK)
        rc = emit(sink, arg, HY_TC_EV_CALL_END, index, s, NULL, 0);
    s->n_done++;
    return rc;
}

/* A whole call's text (from its marker on, body at body_at): its calls, or
 * the text as content when it is not one.  n_emitted: how many calls. */
static int finish_deferred(hy_tc_stream_t *s, size_t raw_len, size_t body_end,
                           hy_tc_sink_fn sink, void *arg, int *n_emitted)
{
    size_t b = body_at(s);
    cJSON *j = cJSON_ParseWithLength(s->b.data + b, body_end - b), *el;
    bool ok = j != NULL;
    int rc = HY_OK;

    *n_emitted = 0;
    if (cJSON_IsArray(j)) {
        ok = cJSON_GetArraySize(j) > 0;
        cJSON_ArrayForEach(el, j) ok = ok && call_ok(el);
    } else {
        ok = ok && call_ok(j);
    }
    if (!ok) {
        rc = emit_sep(s, sink, arg);
        if (rc == HY_OK)
            rc = emit(sink, arg, HY_TC_EV_CONTENT, 0, s, s->b.data, raw_len);
        s->any_content = true;
    } else if (cJSON_IsArray(j)) {
        cJSON_ArrayForEach(el, j) {
            if ((rc = emit_parsed_call(s, el, sink, arg)) != HY_OK)
                break;
            ++*n_emitted;
            if (hy_tc_stream_want_stop(s))
                break;
        }
    } else {
        rc = emit_parsed_call(s, j, sink, arg);
        *n_emitted = 1;
    }
    cJSON_Delete(j);
    return rc;
}

/* buf[0..n) as content, after the whitespace a call took out from between
 * two pieces of content. */
static int emit_content(hy_tc_stream_t *s, hy_tc_sink_fn sink, void *arg, size_t n)
{
    int rc = HY_OK;

    if (n == 0)
        return HY_OK;
    if (s->sep_len > 0)
        rc = emit(sink, arg, HY_TC_EV_CONTENT, 0, s, s->sep, s->sep_len);
    s->sep_len = 0;
    s->any_content = true;
    return rc != HY_OK ? rc : emit(sink, arg, HY_TC_EV_CONTENT, 0, s, s->b.data, n);
}

/* TEXT: content up to a marker (then *moved, in ST_HEAD). */
static int step_text(hy_tc_stream_t *s, hy_tc_sink_fn sink, void *arg, bool *moved)
{
    const char *m = open_marker(s);
    size_t mlen = strlen(m), p, keep, t, lead = 0;
    char *at;
    int rc;

    if (s->after_call) {
        while (lead < s->b.len && is_ws(s->b.data[lead]))
            lead++;
        if (lead < s->b.len)
            s->after_call = false;
        buf_cut(s, lead);
    }
    at = s->b.len >= mlen ? memmem(s->b.data, s->b.len, m, mlen) : NULL;
    if (at != NULL) {
        p = (size_t)(at - s->b.data);
        t = p;
        while (t > 0 && is_ws(s->b.data[t - 1]))
            t--;
        if ((rc = emit_content(s, sink, arg, t)) != HY_OK)
            return rc;
        if (p > t) {
            s->sep_len = HY_MIN(p - t, sizeof s->sep);
            memcpy(s->sep, s->b.data + t, s->sep_len);
        }
        buf_cut(s, p);
        s->state = ST_HEAD;
        *moved = true;
        return HY_OK;
    }
    /* hold a tail that may start the marker, and whitespace before it */
    for (keep = mlen - 1 < s->b.len ? mlen - 1 : s->b.len; keep > 0; keep--)
        if (memcmp(s->b.data + s->b.len - keep, m, keep) == 0)
            break;
    t = s->b.len - keep;
    while (t > 0 && is_ws(s->b.data[t - 1]))
        t--;
    if ((rc = emit_content(s, sink, arg, t)) != HY_OK)
        return rc;
    buf_cut(s, t);
    return HY_OK;
}

/* A call is complete at buf[end]: the rest is text again. */
static int call_done(hy_tc_stream_t *s, size_t end, hy_tc_sink_fn sink, void *arg)
{
    int rc = emit(sink, arg, HY_TC_EV_CALL_END, s->n_calls - 1, s, NULL, 0);

    if (!s->any_content)
        s->sep_len = 0; /* whitespace before the first call is not content */
    s->n_done++;
    s->open = false;
    buf_cut(s, end);
    s->state = hy_tc_stream_want_stop(s) ? ST_STOPPED : ST_TEXT;
    s->after_call = true;
    return rc;
}

/* The end of a JSON object from buf[s->scan] on (the scanner's state
 * carries over between feeds): its end offset, or 0 when not yet. */
static size_t scan_object(hy_tc_stream_t *s)
{
    size_t i;

    for (i = s->scan; i < s->b.len; i++) {
        char c = s->b.data[i];

        if (s->in_str) {
            if (s->esc)
                s->esc = false;
            else if (c == '\\')
                s->esc = true;
            else if (c == '"')
                s->in_str = false;
        } else if (c == '"') {
            s->in_str = true;
        } else if (c == '{' || c == '[') {
            s->depth++;
        } else if ((c == '}' || c == ']') && --s->depth == 0) {
            s->scan = i + 1;
            return i + 1;
        }
    }
    s->scan = i;
    return 0;
}

static int step_call(hy_tc_stream_t *s, hy_tc_sink_fn sink, void *arg, bool *moved)
{
    size_t b = body_at(s), end, i;
    int r, rc, n;

    switch (s->state) {
    case ST_HEAD:
        r = head_parse(s->b.data + b, s->b.len - b, &s->args_at, s->name);
        if (r == LIT_NEED)
            return HY_OK;
        if (r == LIT_MISS) {
            s->state = ST_DEFER;
            s->scan = b;
            s->depth = 0;
            s->in_str = s->esc = false;
            *moved = true;
            return HY_OK;
        }
        s->args_at += b;
        make_id(s);
        s->open = true;
        s->n_calls++;
        if ((rc = emit(sink, arg, HY_TC_EV_CALL_BEGIN, s->n_calls - 1, s, NULL, 0)) != HY_OK)
            return rc;
        s->state = ST_ARGS;
        s->scan = s->args_at;
        s->depth = 0;
        s->in_str = s->esc = false;
        *moved = true;
        return HY_OK;
    case ST_ARGS: {
        size_t from = s->scan;

        end = scan_object(s);
        rc = emit(sink, arg, HY_TC_EV_CALL_ARGS, s->n_calls - 1, s, s->b.data + from,
                  (end ? end : s->b.len) - from);
        if (rc == HY_OK && end) {
            s->state = ST_TAIL;
            s->scan = end;
            *moved = true;
        }
        return rc;
    }
    case ST_TAIL:
        i = s->scan;
        skip_ws(s->b.data, s->b.len, &i);
        if (i == s->b.len)
            return HY_OK;
        *moved = true;
        if (s->b.data[i] != '}') /* arguments complete, the rest is not ours */
            return call_done(s, s->scan, sink, arg);
        i++;
        if (is_llama3(s))
            return call_done(s, i, sink, arg);
        end = i;
        skip_ws(s->b.data, s->b.len, &i);
        if (i == s->b.len) {
            *moved = false;
            return HY_OK;
        }
        r = lit(s->b.data, s->b.len, &i, k_close_hermes);
        if (r == LIT_NEED) {
            *moved = false;
            return HY_OK;
        }
        return call_done(s, r == LIT_OK ? i : end, sink, arg);
    case ST_DEFER:
        if (is_llama3(s)) {
            if ((end = scan_object(s)) == 0)
                return HY_OK;
            rc = finish_deferred(s, end, end, sink, arg, &n);
        } else {
            /* from where the last feed's search left off */
            size_t from = HY_MAX(b, s->scan), k = sizeof k_close_hermes - 1;
            char *at = memmem(s->b.data + from, s->b.len - from, k_close_hermes, k);

            if (at == NULL) {
                s->scan = s->b.len >= k ? HY_MAX(b, s->b.len - k + 1) : b;
                return HY_OK;
            }
            end = (size_t)(at - s->b.data);
            rc = finish_deferred(s, end + sizeof k_close_hermes - 1, end, sink, arg, &n);
            end += sizeof k_close_hermes - 1;
        }
        buf_cut(s, end);
        s->state = hy_tc_stream_want_stop(s) ? ST_STOPPED : ST_TEXT;
        s->after_call = n > 0;
        if (n > 0 && !s->any_content)
            s->sep_len = 0;
        *moved = true;
        return rc;
    default:
        return HY_OK;
    }
}

int hy_tc_stream_feed(hy_tc_stream_t *s, const char *text, size_t n, hy_tc_sink_fn sink,
                      void *arg)
{
    bool moved = true;
    int rc = HY_OK;

    if (s->failed)
        return HY_ENOMEM;
    if (s->state == ST_STOPPED)
        return HY_OK;
    if (n > 0 && (rc = buf_add(s, text, n)) != HY_OK)
        return rc;
    while (rc == HY_OK && moved && s->state != ST_STOPPED) {
        moved = false;
        rc = s->state == ST_TEXT ? step_text(s, sink, arg, &moved)
                                 : step_call(s, sink, arg, &moved);
    }
    return rc;
}

int hy_tc_stream_end(hy_tc_stream_t *s, hy_tc_sink_fn sink, void *arg)
{
    size_t t, b = body_at(s);
    int rc = HY_OK, n;

    if (s->failed)
        return HY_ENOMEM;
    switch (s->state) {
    case ST_TEXT:
        t = s->b.len;
        if (s->n_done > 0)
            while (t > 0 && is_ws(s->b.data[t - 1]))
                t--;
        rc = emit_content(s, sink, arg, t);
        break;
    case ST_HEAD:
    case ST_DEFER:
        /* no closing marker (the model stopped right after the JSON):
         * still a call if the body parses as one */
        t = s->b.len;
        while (t > b && is_ws(s->b.data[t - 1]))
            t--;
        if (t > b) {
            rc = finish_deferred(s, s->b.len, t, sink, arg, &n);
        } else if ((rc = emit_sep(s, sink, arg)) == HY_OK) {
            rc = emit(sink, arg, HY_TC_EV_CONTENT, 0, s, s->b.data, s->b.len);
        }
        break;
    case ST_ARGS:
        rc = emit_sep(s, sink, arg);
        if (rc == HY_OK)
            rc = emit(sink, arg, HY_TC_EV_CALL_ABORT, s->n_calls - 1, s, s->b.data, s->b.len);
        s->open = false;
        break;
    case ST_TAIL:
        rc = call_done(s, s->b.len, sink, arg);
        break;
    default:
        break;
    }
    buf_cut(s, s->b.len);
    s->state = ST_STOPPED;
    return rc;
}

/* ---- the non-streamed answer ---- */

int hy_tc_collect(void *result, const hy_tc_event_t *ev)
{
    hy_tc_result_t *r = result;
    hy_tc_call_t *c;
    int rc = HY_OK;

    switch (ev->kind) {
    case HY_TC_EV_CONTENT:
        hy_jbuf_raw(&r->content, ev->text, ev->len);
        break;
    case HY_TC_EV_CALL_BEGIN:
        if (r->n_calls == r->cap_calls) {
            size_t nc = r->cap_calls ? r->cap_calls * 2 : 4;
            hy_tc_call_t *p = realloc(r->calls, nc * sizeof *p);

            if (p == NULL) {
                rc = HY_ENOMEM;
                break;
            }
            r->calls = p;
            r->cap_calls = nc;
        }
        c = &r->calls[r->n_calls++];
        memset(c, 0, sizeof *c);
        snprintf(c->id, sizeof c->id, "%s", ev->id);
        snprintf(c->name, sizeof c->name, "%s", ev->name);
        hy_jbuf_init(&c->args);
        break;
    case HY_TC_EV_CALL_ARGS:
        c = &r->calls[r->n_calls - 1];
        hy_jbuf_raw(&c->args, ev->text, ev->len);
        rc = c->args.failed ? HY_ENOMEM : HY_OK;
        break;
    case HY_TC_EV_CALL_END:
        break;
    case HY_TC_EV_CALL_ABORT:
        /* an unfinished call is not a call: its text is the content */
        c = &r->calls[--r->n_calls];
        hy_jbuf_free(&c->args);
        hy_jbuf_raw(&r->content, ev->text, ev->len);
        break;
    }
    if (r->content.failed)
        rc = HY_ENOMEM;
    if (rc != HY_OK)
        r->failed = true;
    return rc;
}

void hy_tc_result_free(hy_tc_result_t *r)
{
    size_t i;

    for (i = 0; i < r->n_calls; i++)
        hy_jbuf_free(&r->calls[i].args);
    free(r->calls);
    hy_jbuf_free(&r->content);
    memset(r, 0, sizeof *r);
}
