/*
 * api.c - parses and validates OpenAI-style request bodies (see api.h for
 * the accepted fields and the unknown-field rule) and formats the error
 * objects every refusal becomes.  cJSON builds a tree; everything the
 * request keeps is copied into one per-request arena so the tree is freed
 * before returning and hy_api_req_free is a single call.
 */
#include "server/api.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/unicode.h"
#include "server/json_out.h"

/* ---- the per-request arena: a list of blocks, freed in one call ---- */

typedef struct arena_blk {
    struct arena_blk *next;
    size_t used, cap;
    max_align_t data[];
} arena_blk_t;

typedef struct {
    arena_blk_t *head;
} arena_t;

static void *arena_alloc(arena_t *a, size_t n)
{
    const size_t align = sizeof(max_align_t);
    arena_blk_t *b = a->head;
    size_t cap;
    void *p;

    n = (n + align - 1) / align * align;
    if (n == 0)
        n = align;
    if (b == NULL || b->cap - b->used < n) {
        cap = n > 4096 ? n : 4096;
        b = malloc(sizeof *b + cap);
        if (b == NULL)
            return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    p = (char *)b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

static void arena_free(arena_t *a)
{
    arena_blk_t *b, *next;

    if (a == NULL)
        return;
    for (b = a->head; b != NULL; b = next) {
        next = b->next;
        free(b);
    }
    free(a);
}

static char *arena_strndup(arena_t *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);

    if (p != NULL) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* ---- errors ---- */

const char *hy_api_status_text(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

static int err_fill(hy_api_error_t *e, int rc, int status, const char *type, const char *param,
                    const char *code, const char *fmt, va_list ap)
{
    memset(e, 0, sizeof *e);
    e->status = status;
    e->type = type;
    e->code = code;
    if (param != NULL)
        snprintf(e->param, sizeof e->param, "%s", param);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    return rc;
}

static int err_set(hy_api_error_t *e, int rc, int status, const char *type, const char *param,
                   const char *code, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static int err_set(hy_api_error_t *e, int rc, int status, const char *type, const char *param,
                   const char *code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    err_fill(e, rc, status, type, param, code, fmt, ap);
    va_end(ap);
    return rc;
}

int hy_api_err_invalid(hy_api_error_t *e, const char *param, const char *code,
                       const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    err_fill(e, HY_EINVAL, 400, "invalid_request_error", param, code, fmt, ap);
    va_end(ap);
    return HY_EINVAL;
}

int hy_api_err_context_length(hy_api_error_t *e, hy_api_kind_t kind, int64_t max_context,
                              int64_t prompt_tokens, int64_t completion_tokens)
{
    const char *what = kind == HY_API_CHAT ? "messages" : "prompt";

    return err_set(e, HY_ERANGE, 400, "invalid_request_error", what, "context_length_exceeded",
                   "This model's maximum context length is %lld tokens. However, you requested "
                   "%lld tokens (%lld in the %s, %lld in the completion). Please reduce the "
                   "length of the %s or completion.",
                   (long long)max_context, (long long)(prompt_tokens + completion_tokens),
                   (long long)prompt_tokens, what, (long long)completion_tokens, what);
}

int hy_api_err_model_not_found(hy_api_error_t *e, const char *requested)
{
    return err_set(e, HY_ENOENT, 404, "invalid_request_error", "model", "model_not_found",
                   "The model `%s` does not exist or you do not have access to it.",
                   requested ? requested : "");
}

int hy_api_err_method(hy_api_error_t *e, const char *method, const char *allow)
{
    return err_set(e, HY_EUNSUPPORTED, 405, "invalid_request_error", NULL, "method_not_allowed",
                   "Method %s is not allowed here; use %s.", method ? method : "?",
                   allow ? allow : "POST");
}

int hy_api_err_not_found(hy_api_error_t *e, const char *path)
{
    return err_set(e, HY_ENOENT, 404, "invalid_request_error", NULL, "not_found",
                   "Unknown path %s.", path ? path : "?");
}

int hy_api_err_too_large(hy_api_error_t *e, size_t len, size_t limit)
{
    return err_set(e, HY_ERANGE, 413, "invalid_request_error", NULL, "request_too_large",
                   "Request body of %zu bytes is larger than the limit of %zu bytes.", len,
                   limit);
}

int hy_api_err_overloaded(hy_api_error_t *e, int status, int retry_after_s, const char *why)
{
    int rc;

    if (status == 429)
        rc = err_set(e, HY_EFULL, 429, "rate_limit_error", NULL, "rate_limit_exceeded",
                     "Too many requests: %s. Retry after %d s.", why ? why : "queue full",
                     retry_after_s);
    else
        rc = err_set(e, HY_EFULL, 503, "server_error", NULL, "service_unavailable",
                     "The server is unavailable: %s. Retry after %d s.",
                     why ? why : "overloaded", retry_after_s);
    e->retry_after = retry_after_s > 0 ? retry_after_s : 1;
    return rc;
}

int hy_api_err_internal(hy_api_error_t *e, const char *why)
{
    return err_set(e, HY_EIO, 500, "server_error", NULL, NULL, "Internal error: %s.",
                   why ? why : "unknown");
}

int hy_api_err_nomem(hy_api_error_t *e, const char *why)
{
    return err_set(e, HY_ENOMEM, 500, "server_error", NULL, NULL, "Internal error: %s.",
                   why ? why : "out of memory");
}

int hy_api_err_forbidden(hy_api_error_t *e, const char *why)
{
    return err_set(e, HY_EINVAL, 403, "permission_error", NULL, "forbidden", "%s", why);
}

int hy_api_check_model(const hy_api_req_t *req, const char *served_id, hy_api_error_t *e)
{
    if (req->model == NULL || strcmp(req->model, served_id) == 0)
        return HY_OK;
    return hy_api_err_model_not_found(e, req->model);
}

int hy_api_error_json(int status, const char *type, const char *message, const char *param,
                      const char *code, char **out)
{
    hy_jbuf_t b;

    (void)status; /* the status travels in the HTTP header, not the body (OpenAI) */
    hy_jbuf_init(&b);
    hy_jbuf_cstr(&b, "{\"error\":{\"message\":");
    hy_jbuf_cstr_q(&b, message ? message : "");
    hy_jbuf_cstr(&b, ",\"type\":");
    hy_jbuf_cstr_q(&b, type ? type : "invalid_request_error");
    hy_jbuf_cstr(&b, ",\"param\":");
    hy_jbuf_cstr_q(&b, param && param[0] ? param : NULL);
    hy_jbuf_cstr(&b, ",\"code\":");
    hy_jbuf_cstr_q(&b, code);
    hy_jbuf_cstr(&b, "}}");
    return hy_jbuf_take(&b, out, NULL);
}

int hy_api_error_to_json(const hy_api_error_t *e, char **out)
{
    return hy_api_error_json(e->status, e->type, e->message, e->param, e->code, out);
}

int hy_api_error_headers(const hy_api_error_t *e, const char *allow, char **out)
{
    hy_jbuf_t b;

    hy_jbuf_init(&b);
    hy_jbuf_printf(&b, "Status: %d %s\r\nContent-Type: application/json\r\n", e->status,
                   hy_api_status_text(e->status));
    if (e->retry_after > 0)
        hy_jbuf_printf(&b, "Retry-After: %d\r\n", e->retry_after);
    if (e->status == 405)
        hy_jbuf_printf(&b, "Allow: %s\r\n", allow ? allow : "POST");
    hy_jbuf_cstr(&b, "\r\n");
    return hy_jbuf_take(&b, out, NULL);
}

/* ---- JSON reading helpers ---- */

typedef struct {
    arena_t *arena;
    hy_api_error_t *e;
    hy_api_kind_t kind;
} pctx_t;

static const char *json_type_name(const cJSON *v)
{
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an unknown value";
}

static int err_type(pctx_t *c, const char *field, const char *expected, const cJSON *got)
{
    return hy_api_err_invalid(c->e, field, NULL, "%s: expected %s, got %s", field, expected,
                              json_type_name(got));
}

static int err_nomem(pctx_t *c)
{
    return err_set(c->e, HY_ENOMEM, 500, "server_error", NULL, NULL, "Out of memory.");
}

/* The value of key, or NULL when absent or null (optional fields). */
static const cJSON *get_opt(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

    return (v == NULL || cJSON_IsNull(v)) ? NULL : v;
}

static int read_bool(pctx_t *c, const cJSON *obj, const char *key, bool *out)
{
    const cJSON *v = get_opt(obj, key);

    if (v == NULL)
        return HY_OK;
    if (!cJSON_IsBool(v))
        return err_type(c, key, "a boolean", v);
    *out = cJSON_IsTrue(v);
    return HY_OK;
}

static int read_float(pctx_t *c, const cJSON *obj, const char *key, float *out)
{
    const cJSON *v = get_opt(obj, key);

    if (v == NULL)
        return HY_OK;
    if (!cJSON_IsNumber(v))
        return err_type(c, key, "a number", v);
    *out = (float)v->valuedouble;
    return HY_OK;
}

/* An integer-valued number in [lo, hi]; cJSON's valueint saturates, so
 * check the double. */
static int check_int(pctx_t *c, const char *field, const cJSON *v, double lo, double hi,
                     int64_t *out)
{
    double d;

    if (!cJSON_IsNumber(v))
        return err_type(c, field, "an integer", v);
    d = v->valuedouble;
    if (!isfinite(d) || d != floor(d))
        return hy_api_err_invalid(c->e, field, NULL, "%s = %.17g: must be an integer", field, d);
    if (d < lo || d > hi)
        return hy_api_err_invalid(c->e, field, NULL, "%s = %.17g: must be in [%.17g, %.17g]",
                                  field, d, lo, hi);
    *out = (int64_t)d;
    return HY_OK;
}

static int read_int(pctx_t *c, const cJSON *obj, const char *key, double lo, double hi,
                    int64_t *out, bool *given)
{
    const cJSON *v = get_opt(obj, key);

    if (given != NULL)
        *given = v != NULL;
    if (v == NULL)
        return HY_OK;
    return check_int(c, key, v, lo, hi, out);
}

static int read_string(pctx_t *c, const cJSON *obj, const char *key, bool required,
                       const char **out, size_t *len)
{
    const cJSON *v = get_opt(obj, key);
    size_t n;

    if (v == NULL) {
        if (required)
            return hy_api_err_invalid(c->e, key, NULL, "missing required field '%s'", key);
        return HY_OK;
    }
    if (!cJSON_IsString(v))
        return err_type(c, key, "a string", v);
    n = strlen(v->valuestring);
    *out = arena_strndup(c->arena, v->valuestring, n);
    if (*out == NULL)
        return err_nomem(c);
    if (len != NULL)
        *len = n;
    return HY_OK;
}

/* Re-serialises a JSON value into the arena (tools, tool_calls, kwargs). */
static int dup_json(pctx_t *c, const cJSON *v, const char **out)
{
    char *s = cJSON_PrintUnformatted(v);

    if (s == NULL)
        return err_nomem(c);
    *out = arena_strndup(c->arena, s, strlen(s));
    cJSON_free(s);
    return *out ? HY_OK : err_nomem(c);
}

/* ---- raw-body scan: nesting depth, NUL characters, UTF-8 ---- */

/* cJSON recurses once per nesting level, silently truncates strings at
 * \u0000 and copies any bytes into strings, so before parsing we bound the
 * depth ourselves, remember where the first NUL (raw or escaped) is, and
 * refuse strings that are not UTF-8 (RFC 8259 8.1; OpenAI answers 400): a
 * prompt of broken bytes would be tokenized as something else.  For valid
 * JSON the string tracking is exact; for invalid JSON cJSON reports the
 * real error afterwards. */
static int scan_body(pctx_t *c, const char *s, size_t n, size_t *nul_at, bool *open)
{
    size_t i, depth = 0;
    bool in_str = false;

    *nul_at = SIZE_MAX;
    for (i = 0; i < n; i++) {
        char ch = s[i];

        if (ch == '\0') {
            if (*nul_at == SIZE_MAX)
                *nul_at = i;
            continue;
        }
        if (in_str && (unsigned char)ch >= 0x80) {
            int k = hy_uni_check_utf8((const unsigned char *)s + i, n - i);

            if (k <= 0)
                return hy_api_err_invalid(c->e, NULL, NULL,
                                          "invalid UTF-8 in a JSON string at byte %zu (byte "
                                          "0x%02x)",
                                          i, (unsigned char)ch);
            i += (size_t)k - 1;
        } else if (in_str) {
            if (ch == '\\') {
                if (i + 5 < n && s[i + 1] == 'u' && memcmp(s + i + 2, "0000", 4) == 0 &&
                    *nul_at == SIZE_MAX)
                    *nul_at = i;
                i++;
            } else if (ch == '"') {
                in_str = false;
            }
        } else if (ch == '"') {
            in_str = true;
        } else if (ch == '{' || ch == '[') {
            if (++depth > HY_API_MAX_DEPTH)
                return hy_api_err_invalid(c->e, NULL, NULL,
                                          "JSON nesting deeper than %d levels at byte %zu",
                                          HY_API_MAX_DEPTH, i);
        } else if ((ch == '}' || ch == ']') && depth > 0) {
            depth--;
        }
    }
    *open = in_str || depth > 0;
    return HY_OK;
}

/* cJSON returns NULL both for bad JSON and when it ran out of memory, and
 * the second must not reach the client as a 400 about its valid body.  Its
 * allocations go through this hook, which notes a failure for the parsing
 * thread (workers parse concurrently; the hooks are process-wide, set once,
 * and still plain malloc/free for every other cJSON user). */
static _Thread_local bool json_oom;
static pthread_once_t json_hooks_once = PTHREAD_ONCE_INIT;

static void *json_malloc(size_t n)
{
    void *p = malloc(n);

    if (p == NULL)
        json_oom = true;
    return p;
}

static void json_hooks(void)
{
    cJSON_Hooks h = {json_malloc, free};

    cJSON_InitHooks(&h);
}

/* Parses body into a tree; every failure of the body is a 400 saying where,
 * running out of memory a 500. */
static int parse_json(pctx_t *c, const char *body, size_t len, cJSON **out)
{
    const char *end = NULL;
    size_t nul_at, off;
    bool open = false;
    cJSON *root;
    int rc;

    *out = NULL;
    if (body == NULL || len == 0)
        return hy_api_err_invalid(c->e, NULL, NULL, "request body is empty: expected a JSON object");
    rc = scan_body(c, body, len, &nul_at, &open);
    if (rc != HY_OK)
        return rc;
    pthread_once(&json_hooks_once, json_hooks);
    json_oom = false;
    root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (root == NULL && json_oom)
        return err_nomem(c);
    if (root != NULL) {
        /* Trailing content after the value must be whitespace only. */
        while (end < body + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
            end++;
        if (end != body + len) {
            cJSON_Delete(root);
            root = NULL;
        }
    }
    if (root == NULL) {
        off = (end != NULL && end >= body && end <= body + len) ? (size_t)(end - body) : 0;
        /* cJSON reports the last byte when it ran out of input; an unclosed
         * string, object or array tells that case apart. */
        if (off >= len || (open && off + 1 == len))
            return hy_api_err_invalid(c->e, NULL, NULL,
                                      "malformed JSON body: unexpected end of input at byte %zu",
                                      len);
        if (isprint((unsigned char)body[off]))
            return hy_api_err_invalid(c->e, NULL, NULL,
                                      "malformed JSON body at byte %zu (near '%c')", off,
                                      body[off]);
        return hy_api_err_invalid(c->e, NULL, NULL,
                                  "malformed JSON body at byte %zu (byte 0x%02x)", off,
                                  (unsigned char)body[off]);
    }
    if (nul_at != SIZE_MAX) {
        cJSON_Delete(root);
        return hy_api_err_invalid(c->e, NULL, NULL,
                                  "NUL character in the JSON body at byte %zu is not supported",
                                  nul_at);
    }
    if (!cJSON_IsObject(root)) {
        rc = hy_api_err_invalid(c->e, NULL, NULL, "request body must be a JSON object, got %s",
                                json_type_name(root));
        cJSON_Delete(root);
        return rc;
    }
    *out = root;
    return HY_OK;
}

/* ---- field names: known, ignored, unsupported; misspelling detection ---- */

static const char *const k_common_fields[] = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "logprobs",
    "n", "stream", "stream_options", "user", "ignore_eos", "skip_special_tokens",
    "include_stop_str_in_output", "response_format", "priority", "grammar", "json_schema",
    NULL};
static const char *const k_chat_fields[] = {
    "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
    "parallel_tool_calls", "functions", "function_call", "chat_template_kwargs",
    "add_generation_prompt", NULL};
static const char *const k_completion_fields[] = {"prompt", "echo", NULL};
static const char *const k_infer_fields[] = {"input", NULL};
static const char *const k_generate_fields[] = {"prompt", "max_length", NULL};
/* OpenAI fields with no effect on what we compute. */
static const char *const k_ignored_fields[] = {
    "metadata", "store", "service_tier", "reasoning_effort", "web_search_options",
    "stream_options", "request_id", "continuous_usage_stats", NULL};

/* Extensions of other servers (vLLM, TGI, llama.cpp) that change the output
 * and that we do not implement: refused by name, before the misspelling
 * check could mistake e.g. min_tokens for max_tokens. */
static const char *const k_foreign_fields[] = {
    "min_tokens", "stop_token_ids", "use_beam_search", "length_penalty", "prompt_logprobs",
    "guided_json", "guided_regex", "guided_choice", "guided_grammar", "typical_p", "mirostat",
    "max_new_tokens", NULL};

static bool in_list(const char *const *list, const char *s)
{
    for (; *list != NULL; list++)
        if (strcmp(*list, s) == 0)
            return true;
    return false;
}

static bool field_known(hy_api_kind_t kind, const char *s)
{
    if (in_list(k_common_fields, s))
        return true;
    switch (kind) {
    case HY_API_CHAT: return in_list(k_chat_fields, s);
    case HY_API_COMPLETIONS: return in_list(k_completion_fields, s);
    case HY_API_INFER: return in_list(k_infer_fields, s);
    case HY_API_GENERATE: return in_list(k_generate_fields, s);
    }
    return false;
}

/* Edit distance after folding case and '-' to '_', capped at 3. */
static int name_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), i, j;
    int row[64], prev, tmp, best;

    if (la >= 63 || lb >= 63)
        return 3;
    if ((la > lb ? la - lb : lb - la) > 2)
        return 3;
    for (j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (i = 1; i <= la; i++) {
        int ca = tolower((unsigned char)a[i - 1]);

        prev = row[0];
        row[0] = (int)i;
        best = row[0];
        if (ca == '-')
            ca = '_';
        for (j = 1; j <= lb; j++) {
            int cb = tolower((unsigned char)b[j - 1]);
            int cost = (ca == (cb == '-' ? '_' : cb)) ? 0 : 1;

            tmp = row[j];
            row[j] = HY_MIN(HY_MIN(row[j] + 1, row[j - 1] + 1), prev + cost);
            prev = tmp;
            best = HY_MIN(best, row[j]);
        }
        if (best > 2)
            return 3;
    }
    return row[lb];
}

/* The known field s is probably a misspelling of, or NULL. */
static const char *near_miss(hy_api_kind_t kind, const char *s)
{
    const char *const *lists[2];
    size_t li, len = strlen(s), klen;
    const char *const *p;

    lists[0] = k_common_fields;
    lists[1] = kind == HY_API_CHAT          ? k_chat_fields
               : kind == HY_API_COMPLETIONS ? k_completion_fields
               : kind == HY_API_INFER       ? k_infer_fields
                                            : k_generate_fields;
    for (li = 0; li < 2; li++) {
        for (p = lists[li]; *p != NULL; p++) {
            int d = name_distance(s, *p);

            klen = strlen(*p);
            if (d == 0)
                return *p; /* differs only in case or '-' */
            if (klen < 4 || len < 4)
                continue;  /* "n" vs "x": too short to call a typo */
            if (d <= (klen <= 6 ? 1 : 2))
                return *p;
        }
    }
    return NULL;
}

/* Rejects duplicated known fields and likely misspellings (see api.h). */
static int check_fields(pctx_t *c, const cJSON *root)
{
    const cJSON *a, *b;
    const char *near;

    for (a = root->child; a != NULL; a = a->next) {
        if (a->string == NULL)
            continue;
        if (field_known(c->kind, a->string)) {
            for (b = a->next; b != NULL; b = b->next)
                if (b->string != NULL && strcmp(a->string, b->string) == 0)
                    return hy_api_err_invalid(c->e, a->string, NULL,
                                              "duplicate field '%s'", a->string);
            continue;
        }
        if (in_list(k_ignored_fields, a->string))
            continue;
        if (in_list(k_foreign_fields, a->string)) {
            if (cJSON_IsNull(a))
                continue;
            return err_set(c->e, HY_EUNSUPPORTED, 400, "invalid_request_error", a->string,
                           "unsupported_parameter", "%s is not supported by this server",
                           a->string);
        }
        near = near_miss(c->kind, a->string);
        if (near != NULL)
            return hy_api_err_invalid(c->e, a->string, "unknown_field",
                                      "unknown field '%s' (did you mean '%s'?)", a->string,
                                      near);
    }
    return HY_OK;
}

/* ---- prompts ---- */

static int read_token_array(pctx_t *c, const cJSON *arr, const char *field,
                            hy_api_prompt_t *p)
{
    const cJSON *v;
    int32_t *tok;
    size_t n = (size_t)cJSON_GetArraySize(arr), i = 0;
    char name[64];
    int64_t t;
    int rc;

    if (n == 0)
        return hy_api_err_invalid(c->e, field, NULL, "%s: token array is empty", field);
    tok = arena_alloc(c->arena, n * sizeof *tok);
    if (tok == NULL)
        return err_nomem(c);
    cJSON_ArrayForEach(v, arr) {
        snprintf(name, sizeof name, "%s[%zu]", field, i);
        rc = check_int(c, name, v, 0, INT32_MAX, &t);
        if (rc != HY_OK) {
            snprintf(c->e->param, sizeof c->e->param, "%s", field);
            return rc;
        }
        tok[i++] = (int32_t)t;
    }
    p->tokens = tok;
    p->n_tokens = n;
    return HY_OK;
}

static int read_text_prompt(pctx_t *c, const cJSON *v, hy_api_prompt_t *p)
{
    p->text_len = strlen(v->valuestring);
    p->text = arena_strndup(c->arena, v->valuestring, p->text_len);
    return p->text ? HY_OK : err_nomem(c);
}

/* prompt: "text" | ["text", ...] | [id, ...] | [[id, ...], ...] (OpenAI). */
static int read_prompts(pctx_t *c, const cJSON *root, const char *key, hy_api_req_t *r)
{
    const cJSON *v = get_opt(root, key), *el, *first;
    size_t n, i = 0;
    char name[64];
    int rc;

    if (v == NULL)
        return hy_api_err_invalid(c->e, key, NULL, "missing required field '%s'", key);
    if (cJSON_IsString(v)) {
        r->prompts = arena_alloc(c->arena, sizeof *r->prompts);
        if (r->prompts == NULL)
            return err_nomem(c);
        r->n_prompts = 1;
        return read_text_prompt(c, v, &r->prompts[0]);
    }
    if (!cJSON_IsArray(v) || c->kind != HY_API_COMPLETIONS)
        return err_type(c, key,
                        c->kind == HY_API_COMPLETIONS
                            ? "a string, an array of strings, an array of token ids or an "
                              "array of token-id arrays"
                            : "a string",
                        v);
    first = v->child;
    if (first == NULL)
        return hy_api_err_invalid(c->e, key, NULL, "%s: array is empty", key);
    if (cJSON_IsNumber(first)) {
        r->prompts = arena_alloc(c->arena, sizeof *r->prompts);
        if (r->prompts == NULL)
            return err_nomem(c);
        r->n_prompts = 1;
        return read_token_array(c, v, key, &r->prompts[0]);
    }
    n = (size_t)cJSON_GetArraySize(v);
    if (n > HY_API_MAX_PROMPTS)
        return hy_api_err_invalid(c->e, key, NULL, "%s: %zu prompts: at most %d per request",
                                  key, n, HY_API_MAX_PROMPTS);
    r->prompts = arena_alloc(c->arena, n * sizeof *r->prompts);
    if (r->prompts == NULL)
        return err_nomem(c);
    r->n_prompts = n;
    cJSON_ArrayForEach(el, v) {
        snprintf(name, sizeof name, "%s[%zu]", key, i);
        if (cJSON_IsString(first) && cJSON_IsString(el)) {
            rc = read_text_prompt(c, el, &r->prompts[i]);
        } else if (cJSON_IsArray(first) && cJSON_IsArray(el)) {
            rc = read_token_array(c, el, name, &r->prompts[i]);
            if (rc != HY_OK && c->e->status == 400)
                snprintf(c->e->param, sizeof c->e->param, "%s", key);
        } else {
            rc = err_type(c, name, cJSON_IsString(first) ? "a string" : "an array of token ids",
                          el);
            snprintf(c->e->param, sizeof c->e->param, "%s", key);
        }
        if (rc != HY_OK)
            return rc;
        i++;
    }
    return HY_OK;
}

/* ---- chat messages ---- */

static const char *const k_roles[] = {"system", "developer", "user", "assistant", "tool", NULL};

/* content: "text" | [{"type":"text","text":...}, ...] (joined by "\n", as
 * vLLM does for string-content templates) | null. */
static int read_content(pctx_t *c, const cJSON *v, size_t mi, const char **out)
{
    const cJSON *part, *type, *text;
    char name[64];
    size_t total = 0, i = 0, off = 0, l;
    char *s;

    snprintf(name, sizeof name, "messages[%zu].content", mi);
    if (cJSON_IsString(v)) {
        *out = arena_strndup(c->arena, v->valuestring, strlen(v->valuestring));
        return *out ? HY_OK : err_nomem(c);
    }
    if (!cJSON_IsArray(v))
        return err_type(c, name, "a string or an array of content parts", v);
    cJSON_ArrayForEach(part, v) {
        snprintf(name, sizeof name, "messages[%zu].content[%zu]", mi, i);
        if (!cJSON_IsObject(part))
            return err_type(c, name, "an object", part);
        type = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (!cJSON_IsString(type))
            return hy_api_err_invalid(c->e, name, NULL, "%s.type: expected a string, got %s",
                                      name, type ? json_type_name(type) : "nothing");
        if (strcmp(type->valuestring, "text") != 0)
            return err_set(c->e, HY_EUNSUPPORTED, 400, "invalid_request_error", name,
                           "unsupported_content_type",
                           "%s.type = '%s' is not supported: this server accepts text only",
                           name, type->valuestring);
        text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(text))
            return hy_api_err_invalid(c->e, name, NULL, "%s.text: expected a string, got %s",
                                      name, text ? json_type_name(text) : "nothing");
        total += strlen(text->valuestring) + 1;
        i++;
    }
    s = arena_alloc(c->arena, total + 1);
    if (s == NULL)
        return err_nomem(c);
    cJSON_ArrayForEach(part, v) {
        text = cJSON_GetObjectItemCaseSensitive(part, "text");
        l = strlen(text->valuestring);
        if (off > 0)
            s[off++] = '\n';
        memcpy(s + off, text->valuestring, l);
        off += l;
    }
    s[off] = '\0';
    *out = s;
    return HY_OK;
}

static int read_message(pctx_t *c, const cJSON *m, size_t mi, hy_chat_msg_t *out)
{
    const cJSON *role, *content, *v;
    char name[64];
    int rc;

    snprintf(name, sizeof name, "messages[%zu]", mi);
    if (!cJSON_IsObject(m))
        return err_type(c, name, "an object", m);
    role = cJSON_GetObjectItemCaseSensitive(m, "role");
    snprintf(name, sizeof name, "messages[%zu].role", mi);
    if (role == NULL)
        return hy_api_err_invalid(c->e, name, NULL, "missing required field '%s'", name);
    if (!cJSON_IsString(role))
        return err_type(c, name, "a string", role);
    if (!in_list(k_roles, role->valuestring))
        return hy_api_err_invalid(c->e, name, NULL,
                                  "%s = '%s': must be one of system, developer, user, "
                                  "assistant, tool",
                                  name, role->valuestring);
    out->role = arena_strndup(c->arena, role->valuestring, strlen(role->valuestring));
    if (out->role == NULL)
        return err_nomem(c);

    content = get_opt(m, "content");
    if (content != NULL) {
        rc = read_content(c, content, mi, &out->content);
        if (rc != HY_OK)
            return rc;
    }
#define MSG_STR(key, dst)                                                              \
    do {                                                                               \
        v = get_opt(m, key);                                                           \
        snprintf(name, sizeof name, "messages[%zu]." key, mi);                         \
        if (v != NULL && !cJSON_IsString(v))                                           \
            return err_type(c, name, "a string", v);                                   \
        if (v != NULL && (dst = arena_strndup(c->arena, v->valuestring,                \
                                              strlen(v->valuestring))) == NULL)        \
            return err_nomem(c);                                                       \
    } while (0)
    MSG_STR("name", out->name);
    MSG_STR("tool_call_id", out->tool_call_id);
    MSG_STR("reasoning_content", out->reasoning_content);
#undef MSG_STR
    v = get_opt(m, "tool_calls");
    if (v != NULL) {
        snprintf(name, sizeof name, "messages[%zu].tool_calls", mi);
        if (strcmp(out->role, "assistant") != 0)
            return hy_api_err_invalid(c->e, name, NULL, "%s: only assistant messages have tool_calls",
                                      name);
        if (!cJSON_IsArray(v))
            return err_type(c, name, "an array", v);
        if ((rc = hy_api_check_tool_calls(v, name, c->e)) != HY_OK)
            return rc;
        rc = dup_json(c, v, &out->tool_calls);
        if (rc != HY_OK)
            return rc;
    }
    snprintf(name, sizeof name, "messages[%zu].content", mi);
    if (out->content == NULL && strcmp(out->role, "assistant") != 0)
        return hy_api_err_invalid(c->e, name, NULL, "missing required field '%s' for role '%s'",
                                  name, out->role);
    /* an assistant turn that only called tools has content null (or none);
     * templates concatenate message.content, so it renders as "" */
    if (out->content == NULL)
        out->content = "";
    if (strcmp(out->role, "tool") == 0 && out->tool_call_id == NULL) {
        snprintf(name, sizeof name, "messages[%zu].tool_call_id", mi);
        return hy_api_err_invalid(c->e, name, NULL,
                                  "missing required field '%s' for role 'tool'", name);
    }
    return HY_OK;
}

static int read_messages(pctx_t *c, const cJSON *root, hy_api_req_t *r)
{
    const cJSON *v = get_opt(root, "messages"), *m;
    size_t n, i = 0;
    int rc;

    if (v == NULL)
        return hy_api_err_invalid(c->e, "messages", NULL, "missing required field 'messages'");
    if (!cJSON_IsArray(v))
        return err_type(c, "messages", "an array", v);
    n = (size_t)cJSON_GetArraySize(v);
    if (n == 0)
        return hy_api_err_invalid(c->e, "messages", NULL, "messages: array is empty");
    r->messages = arena_alloc(c->arena, n * sizeof *r->messages);
    if (r->messages == NULL)
        return err_nomem(c);
    cJSON_ArrayForEach(m, v) {
        rc = read_message(c, m, i, &r->messages[i]);
        if (rc != HY_OK)
            return rc;
        i++;
    }
    r->n_messages = n;
    return HY_OK;
}

/* tools, tool_choice, parallel_tool_calls and the legacy functions /
 * function_call (api_tools.c), after response_format (they exclude each
 * other). */
static int read_tools(pctx_t *c, const cJSON *root, hy_api_req_t *r)
{
    hy_api_tools_t t;
    int rc = hy_api_read_tools(root, &t, c->e);

    if (rc != HY_OK)
        return rc;
    r->tool_choice = t.choice;
    r->parallel_tool_calls = t.parallel;
    r->legacy_functions = t.legacy;
    if (t.choice == HY_TOOL_CHOICE_NAMED &&
        (r->tool_name = arena_strndup(c->arena, t.name, strlen(t.name))) == NULL)
        rc = err_nomem(c);
    if (rc == HY_OK && t.tools != NULL &&
        (r->tools = arena_strndup(c->arena, t.tools, strlen(t.tools))) == NULL)
        rc = err_nomem(c);
    cJSON_free(t.tools);
    return rc;
}

/* ---- sampling and the remaining scalar fields ---- */

static int read_priority(pctx_t *c, const cJSON *root, hy_api_req_t *r)
{
    int64_t v = 0;
    int rc = read_int(c, root, "priority", HY_API_PRIORITY_MIN, HY_API_PRIORITY_MAX, &v,
                      &r->priority_given);

    r->priority = (int32_t)v;
    return rc;
}

/* seed: an int64 number (exact only up to 2^53 in JSON) or a decimal string
 * for the full 64 bits; negative seeds wrap to uint64 as vLLM's do. */
static int read_seed(pctx_t *c, const cJSON *root, hy_api_req_t *r)
{
    const cJSON *v = get_opt(root, "seed");
    const double lim = 9007199254740992.0; /* 2^53 */
    char *end;

    if (v == NULL)
        return HY_OK;
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;

        if (!isfinite(d) || d != floor(d))
            return hy_api_err_invalid(c->e, "seed", NULL, "seed = %.17g: must be an integer", d);
        if (d > lim || d < -lim)
            return hy_api_err_invalid(c->e, "seed", NULL,
                                      "seed = %.17g: integers beyond 2^53 are not exact in "
                                      "JSON numbers; pass the seed as a decimal string",
                                      d);
        r->sampling.seed = (uint64_t)(int64_t)d;
    } else if (cJSON_IsString(v)) {
        const char *s = v->valuestring;

        errno = 0;
        if (s[0] == '-')
            r->sampling.seed = (uint64_t)strtoll(s, &end, 10);
        else
            r->sampling.seed = strtoull(s, &end, 10);
        if (s[0] == '\0' || *end != '\0' || errno != 0 || isspace((unsigned char)s[0]) ||
            s[0] == '+')
            return hy_api_err_invalid(c->e, "seed", NULL,
                                      "seed = '%.40s': must be a decimal 64-bit integer", s);
    } else {
        return err_type(c, "seed", "an integer", v);
    }
    r->seed_given = true;
    return HY_OK;
}

static int read_logit_bias(pctx_t *c, const cJSON *root, hy_api_req_t *r)
{
    const cJSON *v = get_opt(root, "logit_bias"), *el;
    int n, i = 0;
    char *end;
    long t;

    if (v == NULL)
        return HY_OK;
    if (!cJSON_IsObject(v))
        return err_type(c, "logit_bias", "an object mapping token ids to numbers", v);
    n = cJSON_GetArraySize(v);
    if (n > HY_SAMPLING_MAX_LOGIT_BIAS)
        return hy_api_err_invalid(c->e, "logit_bias", NULL,
                                  "logit_bias: %d entries: must be at most %d", n,
                                  HY_SAMPLING_MAX_LOGIT_BIAS);
    cJSON_ArrayForEach(el, v) {
        errno = 0;
        t = strtol(el->string, &end, 10);
        if (el->string[0] == '\0' || !isdigit((unsigned char)el->string[0]) || *end != '\0' ||
            errno != 0 || t > INT32_MAX)
            return hy_api_err_invalid(c->e, "logit_bias", NULL,
                                      "logit_bias: key '%.40s' is not a token id", el->string);
        if (!cJSON_IsNumber(el))
            return hy_api_err_invalid(c->e, "logit_bias", NULL,
                                      "logit_bias[%ld]: expected a number, got %s", t,
                                      json_type_name(el));
        r->sampling.logit_bias[i].token = (int32_t)t;
        r->sampling.logit_bias[i].bias = (float)el->valuedouble;
        i++;
    }
    r->sampling.n_logit_bias = i;
    return HY_OK;
}

static int read_stop(pctx_t *c, const cJSON *root, hy_api_req_t *r)
{
    const cJSON *v = get_opt(root, "stop"), *el;
    char name[32];
    size_t n = 0;
    int count;

    if (v == NULL)
        return HY_OK;
    if (cJSON_IsString(v)) {
        count = 1;
    } else if (cJSON_IsArray(v)) {
        count = cJSON_GetArraySize(v);
        if (count > HY_API_MAX_STOP)
            return hy_api_err_invalid(c->e, "stop", NULL, "stop: %d sequences: at most %d",
                                      count, HY_API_MAX_STOP);
    } else {
        return err_type(c, "stop", "a string or an array of strings", v);
    }
    for (el = cJSON_IsString(v) ? v : v->child; el != NULL && n < (size_t)count;
         el = el->next) {
        snprintf(name, sizeof name, "stop[%zu]", n);
        if (!cJSON_IsString(el)) {
            err_type(c, name, "a string", el);
            snprintf(c->e->param, sizeof c->e->param, "stop");
            return HY_EINVAL;
        }
        r->stop_len[n] = strlen(el->valuestring);
        if (r->stop_len[n] == 0)
            return hy_api_err_invalid(c->e, "stop", NULL, "%s: must not be empty",
                                      cJSON_IsString(v) ? "stop" : name);
        /* the matcher holds back text that could be the start of a stop
         * string, so a huge one would stall the stream */
        if (r->stop_len[n] > HY_API_MAX_STOP_LEN)
            return hy_api_err_invalid(c->e, "stop", NULL, "%s: %zu bytes: at most %d",
                                      cJSON_IsString(v) ? "stop" : name, r->stop_len[n],
                                      HY_API_MAX_STOP_LEN);
        r->stop[n] = arena_strndup(c->arena, el->valuestring, r->stop_len[n]);
        if (r->stop[n] == NULL)
            return err_nomem(c);
        n++;
    }
    r->n_stop = n;
    return HY_OK;
}

/* logprobs: chat = bool (+ top_logprobs 0..20); completions = int 0..5. */
static int read_logprobs(pctx_t *c, const cJSON *root, hy_api_req_t *r)
{
    const cJSON *v = get_opt(root, "logprobs");
    int64_t k = 0;
    bool given = false;
    int rc;

    if (c->kind == HY_API_CHAT) {
        rc = read_bool(c, root, "logprobs", &r->logprobs);
        if (rc == HY_OK)
            rc = read_int(c, root, "top_logprobs", 0, HY_SAMPLING_MAX_LOGPROBS, &k, &given);
        if (rc != HY_OK)
            return rc;
        if (given && !r->logprobs)
            return hy_api_err_invalid(c->e, "top_logprobs", NULL,
                                      "top_logprobs requires logprobs to be true");
        r->sampling.n_logprobs = (int32_t)k;
        return HY_OK;
    }
    if (v == NULL)
        return HY_OK;
    if (cJSON_IsBool(v)) /* a chat-style boolean is a common client mistake */
        return err_type(c, "logprobs", "an integer (number of alternatives, 0..5)", v);
    rc = check_int(c, "logprobs", v, 0, HY_API_MAX_COMPLETION_LOGPROBS, &k);
    if (rc != HY_OK)
        return rc;
    r->logprobs = true;
    r->sampling.n_logprobs = (int32_t)k;
    return HY_OK;
}

static int read_max_tokens(pctx_t *c, const cJSON *root, hy_api_req_t *r)
{
    const char *key = c->kind == HY_API_GENERATE ? "max_length" : "max_tokens";
    int64_t a = -1, b = -1;
    bool ga = false, gb = false;
    int rc;

    rc = read_int(c, root, key, 1, INT32_MAX, &a, &ga);
    if (rc == HY_OK && c->kind == HY_API_CHAT)
        rc = read_int(c, root, "max_completion_tokens", 1, INT32_MAX, &b, &gb);
    if (rc != HY_OK)
        return rc;
    /* /generate also accepts max_tokens (the common alias). */
    if (c->kind == HY_API_GENERATE && !ga) {
        rc = read_int(c, root, "max_tokens", 1, INT32_MAX, &a, &ga);
        if (rc != HY_OK)
            return rc;
    }
    if (ga && gb && a != b)
        return hy_api_err_invalid(c->e, "max_completion_tokens", NULL,
                                  "max_tokens = %lld and max_completion_tokens = %lld disagree",
                                  (long long)a, (long long)b);
    /* /v1/completions defaults to 16 as OpenAI's does; the others to what
     * the context leaves */
    r->max_tokens = gb  ? b
                    : ga ? a
                    : c->kind == HY_API_COMPLETIONS ? HY_API_COMPLETIONS_MAX_TOKENS
                                                    : -1;
    return HY_OK;
}

/* response_format, grammar, json_schema: one GBNF text (api_grammar.c). */
static int read_response_format(pctx_t *c, const cJSON *root, hy_api_req_t *r)
{
    char *g = NULL;
    size_t n = 0;
    int rc = hy_api_read_grammar(root, &g, &n, c->e);

    if (rc != HY_OK || g == NULL)
        return rc;
    r->grammar = arena_strndup(c->arena, g, n);
    r->grammar_len = n;
    free(g);
    return r->grammar != NULL ? HY_OK : err_nomem(c);
}

/* OpenAI fields that would change the output in ways we cannot honour. */
static int read_unsupported(pctx_t *c, const cJSON *root, int n)
{
    const cJSON *v;
    int64_t best_of = 0;
    int rc;

    if (c->kind == HY_API_COMPLETIONS) {
        v = get_opt(root, "suffix");
        if (v != NULL)
            return err_set(c->e, HY_EUNSUPPORTED, 400, "invalid_request_error", "suffix",
                           "unsupported_parameter", "suffix is not supported by this server");
        v = get_opt(root, "best_of");
        if (v != NULL) {
            rc = check_int(c, "best_of", v, 1, HY_API_MAX_N, &best_of);
            if (rc != HY_OK)
                return rc;
            if (best_of != n)
                return err_set(c->e, HY_EUNSUPPORTED, 400, "invalid_request_error", "best_of",
                               "unsupported_parameter",
                               "best_of = %lld is not supported by this server (only best_of "
                               "= n)",
                               (long long)best_of);
        }
    }
    if (c->kind == HY_API_CHAT) {
        static const char *const no[] = {"audio", "prediction", NULL};
        const char *const *p;

        for (p = no; *p != NULL; p++)
            if (get_opt(root, *p) != NULL)
                return err_set(c->e, HY_EUNSUPPORTED, 400, "invalid_request_error", *p,
                               "unsupported_parameter", "%s is not supported by this server",
                               *p);
        v = get_opt(root, "modalities");
        if (v != NULL) {
            const cJSON *m;

            if (!cJSON_IsArray(v))
                return err_type(c, "modalities", "an array of strings", v);
            cJSON_ArrayForEach(m, v)
                if (!cJSON_IsString(m) || strcmp(m->valuestring, "text") != 0)
                    return err_set(c->e, HY_EUNSUPPORTED, 400, "invalid_request_error",
                                   "modalities", "unsupported_parameter",
                                   "modalities: only \"text\" is supported by this server");
        }
    }
    return HY_OK;
}

static int read_sampling(pctx_t *c, const cJSON *root, hy_api_req_t *r)
{
    hy_sampling_t *s = &r->sampling;
    char msg[HY_ERR_LEN], param[64];
    int64_t top_k = 0;
    bool given;
    size_t i;
    int rc;

    hy_sampling_default(s);
    if ((rc = read_float(c, root, "temperature", &s->temperature)) != HY_OK ||
        (rc = read_float(c, root, "top_p", &s->top_p)) != HY_OK ||
        (rc = read_float(c, root, "min_p", &s->min_p)) != HY_OK ||
        (rc = read_float(c, root, "presence_penalty", &s->presence_penalty)) != HY_OK ||
        (rc = read_float(c, root, "frequency_penalty", &s->frequency_penalty)) != HY_OK ||
        (rc = read_float(c, root, "repetition_penalty", &s->repetition_penalty)) != HY_OK ||
        (rc = read_int(c, root, "top_k", INT32_MIN, INT32_MAX, &top_k, &given)) != HY_OK ||
        (rc = read_seed(c, root, r)) != HY_OK || (rc = read_logit_bias(c, root, r)) != HY_OK ||
        (rc = read_logprobs(c, root, r)) != HY_OK)
        return rc;
    s->top_k = top_k == -1 ? 0 : (int32_t)top_k; /* -1 = off, as vLLM */
    rc = hy_sampling_validate(s, 0, msg);
    if (rc != HY_OK) {
        /* The message starts with the field's OpenAI name: use it as param. */
        for (i = 0; i + 1 < sizeof param && (isalnum((unsigned char)msg[i]) || msg[i] == '_');
             i++)
            param[i] = msg[i];
        param[i] = '\0';
        return err_set(c->e, rc, 400, "invalid_request_error", param, NULL, "%s", msg);
    }
    return HY_OK;
}

static int read_request(pctx_t *c, const cJSON *root, hy_api_req_t *r)
{
    const cJSON *so;
    int64_t n = 1;
    int rc;

    r->kind = c->kind;
    r->n = 1;
    r->max_tokens = -1;
    r->enable_thinking = -1;
    r->add_generation_prompt = true;
    r->skip_special_tokens = true;

    if ((rc = check_fields(c, root)) != HY_OK || (rc = read_priority(c, root, r)) != HY_OK)
        return rc;
    rc = read_string(c, root, "model",
                     c->kind == HY_API_COMPLETIONS || c->kind == HY_API_CHAT, &r->model, NULL);
    if (rc != HY_OK)
        return rc;
    if (c->kind == HY_API_CHAT)
        rc = read_messages(c, root, r);
    else
        rc = read_prompts(c, root, c->kind == HY_API_INFER ? "input" : "prompt", r);
    if (rc != HY_OK)
        return rc;
    if ((rc = read_max_tokens(c, root, r)) != HY_OK ||
        (rc = read_int(c, root, "n", 1, HY_API_MAX_N, &n, NULL)) != HY_OK)
        return rc;
    r->n = (int)n;
    if ((rc = read_sampling(c, root, r)) != HY_OK || (rc = read_stop(c, root, r)) != HY_OK ||
        (rc = read_bool(c, root, "stream", &r->stream)) != HY_OK ||
        (rc = read_string(c, root, "user", false, &r->user, NULL)) != HY_OK ||
        (rc = read_bool(c, root, "ignore_eos", &r->ignore_eos)) != HY_OK ||
        (rc = read_bool(c, root, "skip_special_tokens", &r->skip_special_tokens)) != HY_OK ||
        (rc = read_bool(c, root, "include_stop_str_in_output",
                        &r->include_stop_str_in_output)) != HY_OK ||
        (rc = read_response_format(c, root, r)) != HY_OK ||
        (rc = read_unsupported(c, root, r->n)) != HY_OK)
        return rc;
    if (c->kind == HY_API_COMPLETIONS && (rc = read_bool(c, root, "echo", &r->echo)) != HY_OK)
        return rc;
    if (r->n_prompts * (size_t)r->n > HY_API_MAX_PROMPTS)
        return hy_api_err_invalid(c->e, "n", NULL,
                                  "%zu prompts x n = %d: at most %d sequences per request",
                                  r->n_prompts, r->n, HY_API_MAX_PROMPTS);

    so = get_opt(root, "stream_options");
    if (so != NULL) {
        if (!cJSON_IsObject(so))
            return err_type(c, "stream_options", "an object", so);
        if (!r->stream)
            return hy_api_err_invalid(c->e, "stream_options", NULL,
                                      "stream_options is only allowed when stream is true");
        rc = read_bool(c, so, "include_usage", &r->include_usage);
        if (rc != HY_OK) {
            snprintf(c->e->message, sizeof c->e->message,
                     "stream_options.include_usage: expected a boolean, got %s",
                     json_type_name(cJSON_GetObjectItemCaseSensitive(so, "include_usage")));
            snprintf(c->e->param, sizeof c->e->param, "stream_options");
            return rc;
        }
    }

    if (c->kind == HY_API_CHAT) {
        const cJSON *kw = get_opt(root, "chat_template_kwargs"), *et;

        if ((rc = read_tools(c, root, r)) != HY_OK ||
            (rc = read_bool(c, root, "add_generation_prompt", &r->add_generation_prompt)) !=
                HY_OK)
            return rc;
        if (kw != NULL) {
            if (!cJSON_IsObject(kw))
                return err_type(c, "chat_template_kwargs", "an object", kw);
            et = get_opt(kw, "enable_thinking");
            if (et != NULL) {
                if (!cJSON_IsBool(et))
                    return hy_api_err_invalid(c->e, "chat_template_kwargs", NULL,
                                              "chat_template_kwargs.enable_thinking: expected "
                                              "a boolean, got %s",
                                              json_type_name(et));
                r->enable_thinking = cJSON_IsTrue(et);
            }
            if ((rc = dup_json(c, kw, &r->template_kwargs)) != HY_OK)
                return rc;
        }
    }
    return HY_OK;
}

int hy_api_parse(hy_api_kind_t kind, const char *body, size_t len, hy_api_req_t **out,
                 hy_api_error_t *e)
{
    pctx_t c = {.kind = kind, .e = e};
    cJSON *root = NULL;
    hy_api_req_t *r = NULL;
    int rc;

    *out = NULL;
    c.arena = calloc(1, sizeof *c.arena);
    if (c.arena == NULL) {
        rc = err_nomem(&c);
        goto done;
    }
    rc = parse_json(&c, body, len, &root);
    if (rc != HY_OK)
        goto done;
    r = arena_alloc(c.arena, sizeof *r);
    if (r == NULL) {
        rc = err_nomem(&c);
        goto done;
    }
    r->arena_ = c.arena;
    rc = read_request(&c, root, r);
done:
    cJSON_Delete(root);
    if (rc != HY_OK) {
        arena_free(c.arena);
        return rc;
    }
    *out = r;
    return HY_OK;
}

void hy_api_req_free(hy_api_req_t *req)
{
    if (req != NULL)
        arena_free(req->arena_);
}

/* ---- /tokenize and /detokenize ---- */

static int tok_begin(const char *body, size_t len, hy_api_tok_req_t **out, hy_api_error_t *e,
                     pctx_t *c, cJSON **root)
{
    int rc;

    *out = NULL;
    c->e = e;
    c->kind = HY_API_COMPLETIONS;
    c->arena = calloc(1, sizeof *c->arena);
    if (c->arena == NULL)
        return err_nomem(c);
    rc = parse_json(c, body, len, root);
    if (rc != HY_OK)
        return rc;
    *out = arena_alloc(c->arena, sizeof **out);
    if (*out == NULL)
        return err_nomem(c);
    (*out)->arena_ = c->arena;
    (*out)->add_special = true;
    return read_string(c, *root, "model", false, &(*out)->model, NULL);
}

static int tok_end(int rc, pctx_t *c, cJSON *root, hy_api_tok_req_t **out)
{
    cJSON_Delete(root);
    if (rc != HY_OK) {
        arena_free(c->arena);
        *out = NULL;
    }
    return rc;
}

int hy_api_parse_tokenize(const char *body, size_t len, hy_api_tok_req_t **out,
                          hy_api_error_t *e)
{
    pctx_t c;
    cJSON *root = NULL;
    const char *key;
    int rc;

    rc = tok_begin(body, len, out, e, &c, &root);
    if (rc != HY_OK)
        return tok_end(rc, &c, root, out);
    /* vLLM takes "prompt", llama.cpp "content": accept either, not both. */
    if (get_opt(root, "prompt") != NULL && get_opt(root, "content") != NULL)
        return tok_end(hy_api_err_invalid(e, "content", NULL,
                                          "give either 'prompt' or 'content', not both"),
                       &c, root, out);
    key = get_opt(root, "content") != NULL ? "content" : "prompt";
    rc = read_string(&c, root, key, true, &(*out)->text, &(*out)->text_len);
    if (rc == HY_OK)
        rc = read_bool(&c, root, "add_special", &(*out)->add_special);
    if (rc == HY_OK) /* vLLM's spelling */
        rc = read_bool(&c, root, "add_special_tokens", &(*out)->add_special);
    return tok_end(rc, &c, root, out);
}

int hy_api_parse_detokenize(const char *body, size_t len, hy_api_tok_req_t **out,
                            hy_api_error_t *e)
{
    hy_api_prompt_t p = {0};
    pctx_t c;
    cJSON *root = NULL;
    const cJSON *v;
    int rc;

    rc = tok_begin(body, len, out, e, &c, &root);
    if (rc != HY_OK)
        return tok_end(rc, &c, root, out);
    v = get_opt(root, "tokens");
    if (v == NULL)
        rc = hy_api_err_invalid(e, "tokens", NULL, "missing required field 'tokens'");
    else if (!cJSON_IsArray(v))
        rc = err_type(&c, "tokens", "an array of token ids", v);
    else if (v->child == NULL)
        (*out)->n_tokens = 0; /* detokenizing nothing is "" */
    else
        rc = read_token_array(&c, v, "tokens", &p);
    if (rc == HY_OK) {
        (*out)->tokens = p.tokens;
        (*out)->n_tokens = p.n_tokens;
    }
    return tok_end(rc, &c, root, out);
}

void hy_api_tok_req_free(hy_api_tok_req_t *r)
{
    if (r != NULL)
        arena_free(r->arena_);
}

int hy_api_check_vocab(const hy_api_req_t *req, int32_t n_vocab, hy_api_error_t *e)
{
    char msg[HY_ERR_LEN];
    size_t i, j;
    int rc;

    for (i = 0; i < req->n_prompts; i++)
        for (j = 0; j < req->prompts[i].n_tokens; j++)
            if (req->prompts[i].tokens[j] >= n_vocab)
                return hy_api_err_invalid(e, req->kind == HY_API_INFER ? "input" : "prompt",
                                          NULL, "prompt token %d: must be in [0, %d]",
                                          (int)req->prompts[i].tokens[j], (int)n_vocab - 1);
    rc = hy_sampling_validate(&req->sampling, n_vocab, msg);
    if (rc != HY_OK)
        return err_set(e, rc, 400, "invalid_request_error", "logit_bias", NULL, "%s", msg);
    return HY_OK;
}

int hy_api_priority(const hy_api_req_t *req, const char *key_priority, int32_t *out,
                    hy_api_error_t *e)
{
    long key = 0;
    char *end;

    if (key_priority != NULL && *key_priority) {
        errno = 0;
        key = strtol(key_priority, &end, 10);
        if (errno || *end || key < HY_API_PRIORITY_MIN || key > HY_API_PRIORITY_MAX)
            return hy_api_err_internal(e, "the site passed a malformed HYSERVE_KEY_PRIORITY "
                                          "(nginx key map); it must be an integer in "
                                          "-1000..1000");
    }
    *out = (int32_t)key;
    if (!req->priority_given)
        return HY_OK;
    if (key_priority != NULL && *key_priority && req->priority < key)
        return err_set(e, HY_EINVAL, 403, "permission_error", "priority", "priority_not_allowed",
                       "priority = %d: this API key may not ask for a priority below %ld "
                       "(lower runs earlier)",
                       (int)req->priority, key);
    *out = req->priority;
    return HY_OK;
}
