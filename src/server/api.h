/*
 * api.h - the OpenAI-compatible request layer: turns a POST body (not
 * NUL-terminated, straight from FastCGI) into a plain hy_api_req_t, and
 * turns every refusal into OpenAI's {"error":{message,type,param,code}}
 * body with its HTTP status.  Pure functions: no sockets, no globals, so the
 * worker calls them and the unit tests and the fuzzer drive them directly.
 * Response bodies and SSE chunks are in sse.h; stop strings in stop.h.
 *
 * Unknown-field rule (a demanding user's choice, documented in the tests):
 *   - every field we implement is type- and range-checked;
 *   - OpenAI fields that would change the output in a way we cannot honour
 *     (suffix, best_of != n, audio, prediction,
 *     non-text modalities, non-text content parts) and other servers'
 *     extensions that we do not implement (min_tokens, stop_token_ids,
 *     guided_*, use_beam_search, max_new_tokens, ...) are a 400 "not supported";
 *   - OpenAI fields with no effect here (metadata, store, service_tier,
 *     reasoning_effort, ...) are accepted and ignored;
 *   - any other unknown field is ignored (clients send vendor extensions),
 *     UNLESS it looks like a misspelling of a field we know (same name up to
 *     case and '-'/'_', or within edit distance 1 (names of 4..6 chars) or 2
 *     (longer names)): that is a 400 "unknown field 'temprature' (did you mean
 *     'temperature'?)", because silently sampling at the default temperature
 *     is worse than refusing.
 */
#ifndef HY_SERVER_API_H
#define HY_SERVER_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hy.h"
#include "ipc/request.h"
#include "model/chat_template.h"
#include "server/toolcall.h"

#define HY_API_MAX_DEPTH 64     /* JSON nesting we accept (cJSON allows 1000) */
#define HY_API_MAX_STOP 4       /* OpenAI: up to 4 stop sequences */
#define HY_API_MAX_STOP_LEN 1024 /* bytes of one stop sequence */
#define HY_API_COMPLETIONS_MAX_TOKENS 16 /* /v1/completions without max_tokens (OpenAI's) */
#define HY_API_MAX_N 16         /* choices per prompt */
#define HY_API_MAX_PROMPTS 64   /* prompts in one batched /v1/completions */
#define HY_API_MAX_COMPLETION_LOGPROBS 5 /* /v1/completions "logprobs" */
/* "priority": lower runs earlier (vLLM's convention), 0 by default */
#define HY_API_PRIORITY_MIN (-1000)
#define HY_API_PRIORITY_MAX 1000

typedef enum {
    HY_API_COMPLETIONS = 0, /* POST /v1/completions */
    HY_API_CHAT,            /* POST /v1/chat/completions */
    HY_API_INFER,           /* POST /v1/infer    {"input","max_tokens"} */
    HY_API_GENERATE,        /* POST /generate    {"prompt","max_length"} */
} hy_api_kind_t;

/* One prompt: either text or token ids (exactly one of the two is set). */
typedef struct {
    const char *text;      /* NUL-terminated; NULL when tokens are given */
    size_t text_len;
    const int32_t *tokens; /* NULL when text is given */
    size_t n_tokens;
} hy_api_prompt_t;

typedef struct {
    hy_api_kind_t kind;
    const char *model;          /* NULL when the body has none (aliases only) */

    /* completions / infer / generate: n_prompts >= 1 */
    hy_api_prompt_t *prompts;
    size_t n_prompts;

    /* chat: ready for hy_chat_render (array-of-parts content joined by "\n",
     * an assistant's null content as "", tool_calls re-serialised as JSON
     * text) */
    hy_chat_msg_t *messages;
    size_t n_messages;
    const char *tools;          /* tools (legacy functions converted) as a JSON array, or NULL */
    hy_tool_choice_t tool_choice; /* NONE when no tools */
    const char *tool_name;      /* the function tool_choice / function_call names (NAMED) */
    bool parallel_tool_calls;   /* default true; false for NAMED and legacy functions */
    bool legacy_functions;      /* functions / function_call: answer with function_call */
    const char *template_kwargs;/* chat_template_kwargs as JSON object text, or NULL */
    int enable_thinking;        /* -1 unset; from chat_template_kwargs.enable_thinking */
    bool add_generation_prompt; /* default true */

    int64_t max_tokens;         /* -1: not given (the worker uses what the context leaves);
                                 * /v1/completions: 16 when not given */
    hy_sampling_t sampling;     /* validated with hy_sampling_validate(.., 0, ..) */
    bool seed_given;            /* false: the worker picks a random seed */
    const char *stop[HY_API_MAX_STOP];
    size_t stop_len[HY_API_MAX_STOP];
    size_t n_stop;
    bool logprobs;              /* report the chosen tokens' logprobs
                                 * (sampling.n_logprobs alternatives each) */
    int n;                      /* choices per prompt, 1..HY_API_MAX_N */
    bool stream;
    bool include_usage;         /* stream_options.include_usage */
    const char *user;
    bool echo;                  /* completions: prepend the prompt */
    bool ignore_eos;
    bool skip_special_tokens;   /* default true */
    bool include_stop_str_in_output;
    int32_t priority;           /* HY_API_PRIORITY_MIN..MAX; see hy_api_priority */
    bool priority_given;
    const char *grammar;        /* GBNF the output must match (response_format json_object /
                                 * json_schema, or llama-server's grammar / json_schema), or NULL */
    size_t grammar_len;

    void *arena_;               /* private: owns every pointer above */
} hy_api_req_t;

/* An error ready to send: HTTP status plus OpenAI's error object. */
typedef struct {
    int status;                 /* 400, 404, 405, 413, 429, 503, 500 */
    const char *type;           /* "invalid_request_error", "server_error", ... */
    const char *code;           /* NULL or e.g. "context_length_exceeded" */
    char param[64];             /* offending field, "" for none */
    int retry_after;            /* seconds for a Retry-After header; 0 = none */
    char message[HY_ERR_LEN];
} hy_api_error_t;

/* Parses and validates a body of len bytes (need not be NUL-terminated).
 * On success *out is owned by the caller (hy_api_req_free) and e is
 * untouched; on failure *out is NULL, e is filled and a negative code is
 * returned (HY_ENOMEM gives a 500). */
int hy_api_parse(hy_api_kind_t kind, const char *body, size_t len, hy_api_req_t **out,
                 hy_api_error_t *e);
void hy_api_req_free(hy_api_req_t *req);

/* response_format / grammar / json_schema of a request body as one GBNF
 * text (api_grammar.c): *gbnf is malloc'd, NULL when the output is free.
 * Every schema or grammar mistake is a 400 naming the field. */
struct cJSON;
int hy_api_read_grammar(const struct cJSON *root, char **gbnf, size_t *len, hy_api_error_t *e);

/* tools / functions, tool_choice / function_call and parallel_tool_calls
 * (api_tools.c).  tools is malloc'd (cJSON_free) or NULL.  A grammar of the
 * request (response_format) constrains what is not a call (toolcall.h). */
typedef struct {
    char *tools;
    hy_tool_choice_t choice;
    char name[HY_TC_MAX_NAME + 1];
    bool parallel;
    bool legacy;
} hy_api_tools_t;
int hy_api_read_tools(const struct cJSON *root, hy_api_tools_t *out, hy_api_error_t *e);
/* An assistant message's tool_calls array (where: "messages[3].tool_calls"):
 * objects with function.name and, if given, function.arguments as strings. */
int hy_api_check_tool_calls(const struct cJSON *calls, const char *where, hy_api_error_t *e);

/* /tokenize {"prompt"|"content": str, "add_special": bool (default true)}
 * and /detokenize {"tokens": [int...]}.  Outputs point into *arena_out,
 * freed with hy_api_arena_free. */
typedef struct {
    const char *text;
    size_t text_len;
    bool add_special;
    const int32_t *tokens;
    size_t n_tokens;
    const char *model;
    void *arena_;
} hy_api_tok_req_t;
int hy_api_parse_tokenize(const char *body, size_t len, hy_api_tok_req_t **out,
                          hy_api_error_t *e);
int hy_api_parse_detokenize(const char *body, size_t len, hy_api_tok_req_t **out,
                            hy_api_error_t *e);
void hy_api_tok_req_free(hy_api_tok_req_t *r);

/* ---- errors: each fills e and returns its negative code ---- */

/* Generic 400 with param (may be NULL) and code (may be NULL). */
int hy_api_err_invalid(hy_api_error_t *e, const char *param, const char *code,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* 400 context_length_exceeded, OpenAI's wording; chat says "messages". */
int hy_api_err_context_length(hy_api_error_t *e, hy_api_kind_t kind, int64_t max_context,
                              int64_t prompt_tokens, int64_t completion_tokens);
/* 404 model_not_found for a model that is not the served one. */
int hy_api_err_model_not_found(hy_api_error_t *e, const char *requested);
/* 405 (the worker also sends "Allow: <allow>"). */
int hy_api_err_method(hy_api_error_t *e, const char *method, const char *allow);
/* 404 for an unknown path. */
int hy_api_err_not_found(hy_api_error_t *e, const char *path);
/* 413 body of len bytes over limit. */
int hy_api_err_too_large(hy_api_error_t *e, size_t len, size_t limit);
/* 429 (queue full) or 503 (loading, draining, out of KV pages) with Retry-After. */
int hy_api_err_overloaded(hy_api_error_t *e, int status, int retry_after_s, const char *why);
/* 403 permission_error "forbidden" with why as the message. */
int hy_api_err_forbidden(hy_api_error_t *e, const char *why);
/* 500 for an internal failure (message is logged, the client sees it too). */
int hy_api_err_internal(hy_api_error_t *e, const char *why);
/* The same for an allocation that failed: HY_ENOMEM, status 500. */
int hy_api_err_nomem(hy_api_error_t *e, const char *why);

/* Checks the requested model against the served id: HY_OK when they match
 * or the request names none (aliases), else a 404 in e. */
int hy_api_check_model(const hy_api_req_t *req, const char *served_id, hy_api_error_t *e);

/* After the vocabulary is known: prompt token ids and logit_bias keys
 * must be < n_vocab (400 otherwise). */
int hy_api_check_vocab(const hy_api_req_t *req, int32_t n_vocab, hy_api_error_t *e);

/* The scheduling priority of req (lower runs earlier): the body's
 * "priority", else the API key's.  key_priority is the site's
 * HYSERVE_KEY_PRIORITY (nginx's key map gives every key one, 0 unless set
 * with `hyserve-ctl key add --priority`); it is also the most urgent the
 * key may ask for: a body priority below it is refused with 403, so only
 * the operator makes a key more urgent, while any client can step back.
 * NULL or "" (no site in front: no key policy) takes the body's value as it
 * is, 0 by default.  A malformed key_priority (a broken site config) is a
 * 500 naming it. */
int hy_api_priority(const hy_api_req_t *req, const char *key_priority, int32_t *out,
                    hy_api_error_t *e);

/* {"error":{"message","type","param","code"}}: malloc'd, NUL-terminated. */
int hy_api_error_json(int status, const char *type, const char *message, const char *param,
                      const char *code, char **out);
int hy_api_error_to_json(const hy_api_error_t *e, char **out);
/* CGI response headers for e ("Status: 400 Bad Request\r\n...\r\n\r\n"),
 * with Retry-After/Allow when set; malloc'd. */
int hy_api_error_headers(const hy_api_error_t *e, const char *allow, char **out);
/* "Bad Request" etc. for the Status: header. */
const char *hy_api_status_text(int status);

#endif
