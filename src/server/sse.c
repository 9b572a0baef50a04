/*
 * sse.c - prints the response bodies and SSE events declared in sse.h.
 * Everything goes through hy_jbuf_t so the bytes are fixed (the unit tests
 * compare them with hand-written goldens) and no cJSON tree is built on the
 * per-token path.  Key order follows OpenAI's own responses.
 */
#include "server/sse.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char *finish_name(hy_api_finish_t f)
{
    switch (f) {
    case HY_API_FINISH_STOP: return "\"stop\"";
    case HY_API_FINISH_LENGTH: return "\"length\"";
    case HY_API_FINISH_TOOL_CALLS: return "\"tool_calls\"";
    case HY_API_FINISH_FUNCTION_CALL: return "\"function_call\"";
    default: return "null";
    }
}

void hy_api_make_id(hy_api_kind_t kind, uint64_t r1, uint64_t r2, char out[64])
{
    snprintf(out, 64, "%s-%016" PRIx64 "%016" PRIx64, kind == HY_API_CHAT ? "chatcmpl" : "cmpl",
             r1, r2);
}

/* {"id":..,"object":..,"created":..,"model":..,"system_fingerprint":.., */
static void head(hy_jbuf_t *b, const hy_api_resp_t *m, bool chunk)
{
    const char *object = m->kind == HY_API_CHAT ? (chunk ? "chat.completion.chunk"
                                                         : "chat.completion")
                                                : "text_completion";

    hy_jbuf_cstr(b, "{\"id\":");
    hy_jbuf_cstr_q(b, m->id);
    hy_jbuf_printf(b, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object,
                   (long long)m->created);
    hy_jbuf_cstr_q(b, m->model);
    hy_jbuf_cstr(b, ",\"system_fingerprint\":");
    hy_jbuf_cstr_q(b, m->system_fingerprint);
    hy_jbuf_cstr(b, ",\"choices\":[");
}

static void usage_obj(hy_jbuf_t *b, const hy_api_usage_t *u)
{
    hy_jbuf_printf(b,
                   "{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"total_tokens\":%lld,"
                   "\"prompt_tokens_details\":{\"cached_tokens\":%lld}}",
                   (long long)u->prompt_tokens, (long long)u->completion_tokens,
                   (long long)(u->prompt_tokens + u->completion_tokens),
                   (long long)u->cached_tokens);
}

static void bytes_arr(hy_jbuf_t *b, const char *s, size_t n)
{
    size_t i;

    hy_jbuf_cstr(b, "[");
    for (i = 0; i < n; i++)
        hy_jbuf_printf(b, i ? ",%u" : "%u", (unsigned)(unsigned char)s[i]);
    hy_jbuf_cstr(b, "]");
}

/* chat: {"content":[{"token","logprob","bytes","top_logprobs":[...]}]} */
static void chat_logprobs(hy_jbuf_t *b, const hy_api_token_lp_t *lp, size_t n)
{
    size_t i, j;

    hy_jbuf_cstr(b, "{\"content\":[");
    for (i = 0; i < n; i++) {
        hy_jbuf_cstr(b, i ? ",{\"token\":" : "{\"token\":");
        hy_jbuf_str(b, lp[i].text, lp[i].len);
        hy_jbuf_cstr(b, ",\"logprob\":");
        hy_jbuf_f32(b, lp[i].logprob);
        hy_jbuf_cstr(b, ",\"bytes\":");
        bytes_arr(b, lp[i].text, lp[i].len);
        hy_jbuf_cstr(b, ",\"top_logprobs\":[");
        for (j = 0; j < lp[i].n_top; j++) {
            const hy_api_top_t *t = &lp[i].top[j];

            hy_jbuf_cstr(b, j ? ",{\"token\":" : "{\"token\":");
            hy_jbuf_str(b, t->text, t->len);
            hy_jbuf_cstr(b, ",\"logprob\":");
            hy_jbuf_f32(b, t->logprob);
            hy_jbuf_cstr(b, ",\"bytes\":");
            bytes_arr(b, t->text, t->len);
            hy_jbuf_cstr(b, "}");
        }
        hy_jbuf_cstr(b, "]}");
    }
    hy_jbuf_cstr(b, "]}");
}

/* completions: {"tokens","token_logprobs","top_logprobs":[{tok:lp}],"text_offset"};
 * two alternatives that print the same (distinct ids, same text) would be a
 * duplicate JSON key, so only the first (the more likely) is kept. */
static void completion_logprobs(hy_jbuf_t *b, const hy_api_token_lp_t *lp, size_t n,
                                size_t offset)
{
    size_t i, j, k;

    hy_jbuf_cstr(b, "{\"tokens\":[");
    for (i = 0; i < n; i++) {
        if (i)
            hy_jbuf_cstr(b, ",");
        hy_jbuf_str(b, lp[i].text, lp[i].len);
    }
    hy_jbuf_cstr(b, "],\"token_logprobs\":[");
    for (i = 0; i < n; i++) {
        if (i)
            hy_jbuf_cstr(b, ",");
        hy_jbuf_f32(b, lp[i].logprob);
    }
    hy_jbuf_cstr(b, "],\"top_logprobs\":[");
    for (i = 0; i < n; i++) {
        bool first = true;

        if (i)
            hy_jbuf_cstr(b, ",");
        if (lp[i].n_top == 0) {
            hy_jbuf_cstr(b, "null");
            continue;
        }
        hy_jbuf_cstr(b, "{");
        for (j = 0; j < lp[i].n_top; j++) {
            const hy_api_top_t *t = &lp[i].top[j];

            for (k = 0; k < j; k++)
                if (lp[i].top[k].len == t->len && memcmp(lp[i].top[k].text, t->text, t->len) == 0)
                    break;
            if (k < j)
                continue;
            if (!first)
                hy_jbuf_cstr(b, ",");
            first = false;
            hy_jbuf_str(b, t->text, t->len);
            hy_jbuf_cstr(b, ":");
            hy_jbuf_f32(b, t->logprob);
        }
        hy_jbuf_cstr(b, "}");
    }
    hy_jbuf_cstr(b, "],\"text_offset\":[");
    for (i = 0; i < n; i++) {
        hy_jbuf_printf(b, i ? ",%zu" : "%zu", offset);
        offset += lp[i].len;
    }
    hy_jbuf_cstr(b, "]}");
}

static void logprobs_val(hy_jbuf_t *b, const hy_api_resp_t *m, const hy_api_token_lp_t *lp,
                         size_t n, size_t offset)
{
    if (!m->logprobs)
        hy_jbuf_cstr(b, "null");
    else if (m->kind == HY_API_CHAT)
        chat_logprobs(b, lp, n);
    else
        completion_logprobs(b, lp, n, offset);
}

/* ,"tool_calls":[...] (or the legacy ,"function_call":{...}) */
static void message_calls(hy_jbuf_t *b, const hy_api_choice_t *c)
{
    size_t i;

    if (c->n_calls == 0)
        return;
    if (c->legacy) {
        hy_jbuf_cstr(b, ",\"function_call\":{\"name\":");
        hy_jbuf_cstr_q(b, c->calls[0].name);
        hy_jbuf_cstr(b, ",\"arguments\":");
        hy_jbuf_str(b, c->calls[0].args.data ? c->calls[0].args.data : "", c->calls[0].args.len);
        hy_jbuf_cstr(b, "}");
        return;
    }
    hy_jbuf_cstr(b, ",\"tool_calls\":[");
    for (i = 0; i < c->n_calls; i++) {
        hy_jbuf_cstr(b, i ? ",{\"id\":" : "{\"id\":");
        hy_jbuf_cstr_q(b, c->calls[i].id);
        hy_jbuf_cstr(b, ",\"type\":\"function\",\"function\":{\"name\":");
        hy_jbuf_cstr_q(b, c->calls[i].name);
        hy_jbuf_cstr(b, ",\"arguments\":");
        hy_jbuf_str(b, c->calls[i].args.data ? c->calls[i].args.data : "", c->calls[i].args.len);
        hy_jbuf_cstr(b, "}}");
    }
    hy_jbuf_cstr(b, "]");
}

int hy_api_format_response(const hy_api_resp_t *m, const hy_api_choice_t *choices, size_t n,
                           const hy_api_usage_t *u, char **out, size_t *out_len)
{
    hy_jbuf_t b;
    size_t i;

    hy_jbuf_init(&b);
    head(&b, m, false);
    for (i = 0; i < n; i++) {
        const hy_api_choice_t *c = &choices[i];

        if (i)
            hy_jbuf_cstr(&b, ",");
        if (m->kind == HY_API_CHAT) {
            hy_jbuf_printf(&b, "{\"index\":%zu,\"message\":{\"role\":\"assistant\",\"content\":",
                           i);
            if (c->n_calls > 0 && c->text_len == 0)
                hy_jbuf_cstr(&b, "null");
            else
                hy_jbuf_str(&b, c->text ? c->text : "", c->text_len);
            message_calls(&b, c);
            hy_jbuf_cstr(&b, "},\"logprobs\":");
        } else {
            hy_jbuf_cstr(&b, "{\"text\":");
            hy_jbuf_str(&b, c->text ? c->text : "", c->text_len);
            hy_jbuf_printf(&b, ",\"index\":%zu,\"logprobs\":", i);
        }
        logprobs_val(&b, m, c->lp, c->n_lp, c->text_offset);
        hy_jbuf_printf(&b, ",\"finish_reason\":%s}", finish_name(c->finish));
    }
    hy_jbuf_cstr(&b, "],\"usage\":");
    usage_obj(&b, u);
    hy_jbuf_cstr(&b, "}");
    return hy_jbuf_take(&b, out, out_len);
}

/* The end of a chunk: "]" closing choices, usage, "}" and the SSE blank line. */
static void chunk_tail(hy_jbuf_t *b, const hy_api_resp_t *m)
{
    hy_jbuf_cstr(b, m->include_usage ? "],\"usage\":null}\n\n" : "]}\n\n");
}

void hy_sse_role(hy_jbuf_t *b, const hy_api_resp_t *m, int index)
{
    hy_jbuf_cstr(b, "data: ");
    head(b, m, true);
    hy_jbuf_printf(b,
                   "{\"index\":%d,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
                   "\"logprobs\":null,\"finish_reason\":null}",
                   index);
    chunk_tail(b, m);
}

void hy_sse_delta(hy_jbuf_t *b, const hy_api_resp_t *m, int index, const char *text,
                  size_t len, const hy_api_token_lp_t *lp, size_t n_lp, size_t text_offset)
{
    hy_jbuf_cstr(b, "data: ");
    head(b, m, true);
    if (m->kind == HY_API_CHAT) {
        hy_jbuf_printf(b, "{\"index\":%d,\"delta\":{\"content\":", index);
        hy_jbuf_str(b, text ? text : "", len);
        hy_jbuf_cstr(b, "},\"logprobs\":");
    } else {
        hy_jbuf_cstr(b, "{\"text\":");
        hy_jbuf_str(b, text ? text : "", len);
        hy_jbuf_printf(b, ",\"index\":%d,\"logprobs\":", index);
    }
    logprobs_val(b, m, lp, n_lp, text_offset);
    hy_jbuf_cstr(b, ",\"finish_reason\":null}");
    chunk_tail(b, m);
}

void hy_sse_tool_begin(hy_jbuf_t *b, const hy_api_resp_t *m, int index, int call,
                       const char *id, const char *name, bool legacy)
{
    hy_jbuf_cstr(b, "data: ");
    head(b, m, true);
    hy_jbuf_printf(b, "{\"index\":%d,\"delta\":{", index);
    if (legacy) {
        hy_jbuf_cstr(b, "\"function_call\":{\"name\":");
        hy_jbuf_cstr_q(b, name);
        hy_jbuf_cstr(b, ",\"arguments\":\"\"}");
    } else {
        hy_jbuf_printf(b, "\"tool_calls\":[{\"index\":%d,\"id\":", call);
        hy_jbuf_cstr_q(b, id);
        hy_jbuf_cstr(b, ",\"type\":\"function\",\"function\":{\"name\":");
        hy_jbuf_cstr_q(b, name);
        hy_jbuf_cstr(b, ",\"arguments\":\"\"}}]");
    }
    hy_jbuf_cstr(b, "},\"logprobs\":null,\"finish_reason\":null}");
    chunk_tail(b, m);
}

void hy_sse_tool_args(hy_jbuf_t *b, const hy_api_resp_t *m, int index, int call,
                      const char *text, size_t len, bool legacy)
{
    hy_jbuf_cstr(b, "data: ");
    head(b, m, true);
    hy_jbuf_printf(b, "{\"index\":%d,\"delta\":{", index);
    if (legacy)
        hy_jbuf_cstr(b, "\"function_call\":{\"arguments\":");
    else
        hy_jbuf_printf(b, "\"tool_calls\":[{\"index\":%d,\"function\":{\"arguments\":",
                       call);
    hy_jbuf_str(b, text ? text : "", len);
    hy_jbuf_cstr(b, legacy ? "}" : "}}]");
    hy_jbuf_cstr(b, "},\"logprobs\":null,\"finish_reason\":null}");
    chunk_tail(b, m);
}

void hy_sse_finish(hy_jbuf_t *b, const hy_api_resp_t *m, int index, hy_api_finish_t f)
{
    hy_jbuf_cstr(b, "data: ");
    head(b, m, true);
    if (m->kind == HY_API_CHAT)
        hy_jbuf_printf(b, "{\"index\":%d,\"delta\":{},\"logprobs\":null,\"finish_reason\":%s}",
                       index, finish_name(f));
    else
        hy_jbuf_printf(b, "{\"text\":\"\",\"index\":%d,\"logprobs\":null,\"finish_reason\":%s}",
                       index, finish_name(f));
    chunk_tail(b, m);
}

void hy_sse_usage(hy_jbuf_t *b, const hy_api_resp_t *m, const hy_api_usage_t *u)
{
    hy_jbuf_cstr(b, "data: ");
    head(b, m, true);
    hy_jbuf_cstr(b, "],\"usage\":");
    usage_obj(b, u);
    hy_jbuf_cstr(b, "}\n\n");
}

void hy_sse_done(hy_jbuf_t *b)
{
    hy_jbuf_cstr(b, "data: [DONE]\n\n");
}

void hy_sse_error(hy_jbuf_t *b, const hy_api_error_t *e)
{
    hy_jbuf_cstr(b, "data: {\"error\":{\"message\":");
    hy_jbuf_cstr_q(b, e->message);
    hy_jbuf_cstr(b, ",\"type\":");
    hy_jbuf_cstr_q(b, e->type ? e->type : "server_error");
    hy_jbuf_cstr(b, ",\"param\":");
    hy_jbuf_cstr_q(b, e->param[0] ? e->param : NULL);
    hy_jbuf_cstr(b, ",\"code\":");
    hy_jbuf_cstr_q(b, e->code);
    hy_jbuf_cstr(b, "}}\n\n");
    hy_sse_done(b);
}

int hy_api_format_models(const hy_api_model_info_t *m, char **out, size_t *out_len)
{
    hy_jbuf_t b;
    size_t i;

    hy_jbuf_init(&b);
    hy_jbuf_cstr(&b, "{\"object\":\"list\",\"data\":[{\"id\":");
    hy_jbuf_cstr_q(&b, m->id);
    hy_jbuf_printf(&b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"hyserve\","
                       "\"max_model_len\":%lld,\"architecture\":",
                   (long long)m->created, (long long)m->max_model_len);
    hy_jbuf_cstr_q(&b, m->architecture);
    hy_jbuf_cstr(&b, ",\"layer_kinds\":{");
    for (i = 0; i < m->n_layer_kinds; i++) {
        if (i)
            hy_jbuf_cstr(&b, ",");
        hy_jbuf_cstr_q(&b, m->layers[i].kind ? m->layers[i].kind : "");
        hy_jbuf_printf(&b, ":%d", (int)m->layers[i].count);
    }
    hy_jbuf_cstr(&b, "}}]}");
    return hy_jbuf_take(&b, out, out_len);
}

int hy_api_format_tokenize(const int32_t *tokens, size_t n, int64_t max_model_len, char **out,
                           size_t *out_len)
{
    hy_jbuf_t b;
    size_t i;

    hy_jbuf_init(&b);
    hy_jbuf_cstr(&b, "{\"tokens\":[");
    for (i = 0; i < n; i++)
        hy_jbuf_printf(&b, i ? ",%d" : "%d", (int)tokens[i]);
    hy_jbuf_printf(&b, "],\"count\":%zu,\"max_model_len\":%lld}", n, (long long)max_model_len);
    return hy_jbuf_take(&b, out, out_len);
}

int hy_api_format_detokenize(const char *text, size_t len, char **out, size_t *out_len)
{
    hy_jbuf_t b;

    hy_jbuf_init(&b);
    hy_jbuf_cstr(&b, "{\"prompt\":");
    hy_jbuf_str(&b, text ? text : "", len);
    hy_jbuf_cstr(&b, "}");
    return hy_jbuf_take(&b, out, out_len);
}
