/*
 * sse.h - response bodies in OpenAI's exact shapes: the non-streamed
 * text_completion / chat.completion objects, the streamed chunks with their
 * Server-Sent-Events framing ("data: {json}\n\n" ... "data: [DONE]\n\n"),
 * and the /v1/models, /tokenize and /detokenize bodies.  The worker owns
 * the generation; these functions only print what it hands them.
 *
 * Stream order for one chat choice (what OpenAI sends):
 *   role chunk   delta {"role":"assistant","content":""}
 *   delta chunks delta {"content":"..."}
 *   tool calls   delta {"tool_calls":[{"index":k,"id","type":"function","function":
 *                {"name","arguments":""}}]} when call k starts, then
 *                delta {"tool_calls":[{"index":k,"function":{"arguments":"..."}}]}
 *                (legacy functions: delta {"function_call":{...}} alike)
 *   final chunk  delta {} with finish_reason
 *   usage chunk  "choices":[] with usage (only with stream_options.include_usage;
 *                every other chunk then carries "usage":null)
 *   data: [DONE]
 */
#ifndef HY_SERVER_SSE_H
#define HY_SERVER_SSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hy.h"
#include "server/api.h"
#include "server/json_out.h"

typedef enum {
    HY_API_FINISH_NONE = 0, /* still running: finish_reason null */
    HY_API_FINISH_STOP,     /* EOS or a stop string: "stop" */
    HY_API_FINISH_LENGTH,   /* max_tokens or the context ran out: "length" */
    HY_API_FINISH_TOOL_CALLS,    /* the answer called tools: "tool_calls" */
    HY_API_FINISH_FUNCTION_CALL, /* legacy functions: "function_call" */
} hy_api_finish_t;

/* One alternative token in a logprobs list. */
typedef struct {
    const char *text;  /* the token's bytes (may be part of a UTF-8 character) */
    size_t len;
    float logprob;
} hy_api_top_t;

/* One generated token with its logprob and the alternatives. */
typedef struct {
    const char *text;
    size_t len;
    float logprob;     /* NaN prints null (echoed first prompt token) */
    const hy_api_top_t *top;
    size_t n_top;
} hy_api_token_lp_t;

typedef struct {
    const char *text;               /* the choice's whole text */
    size_t text_len;
    hy_api_finish_t finish;
    const hy_api_token_lp_t *lp;    /* its tokens, when the response has logprobs */
    size_t n_lp;
    size_t text_offset;             /* completions text_offset of lp[0] */
    const hy_tc_call_t *calls;      /* chat: the tool calls (content null when text_len
                                     * is 0 and there are calls) */
    size_t n_calls;
    bool legacy;                    /* calls[0] as "function_call" (legacy functions) */
} hy_api_choice_t;

typedef struct {
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t cached_tokens;          /* prompt tokens served from the prefix cache */
} hy_api_usage_t;

/* What every chunk/response of one request repeats. */
typedef struct {
    hy_api_kind_t kind;             /* CHAT -> chat shapes, the others -> text_completion */
    const char *id;                 /* from hy_api_make_id */
    int64_t created;                /* unix seconds */
    const char *model;
    const char *system_fingerprint; /* NULL prints null */
    bool logprobs;                  /* choices carry logprobs objects (else null) */
    bool include_usage;             /* stream: "usage":null on every chunk but the last */
} hy_api_resp_t;

/* "chatcmpl-<32 hex>" / "cmpl-<32 hex>" from two random words. */
void hy_api_make_id(hy_api_kind_t kind, uint64_t r1, uint64_t r2, char out[64]);

/* Non-streamed response with n choices; *out malloc'd. */
int hy_api_format_response(const hy_api_resp_t *m, const hy_api_choice_t *choices, size_t n,
                           const hy_api_usage_t *u, char **out, size_t *out_len);

/* Streaming: each appends one complete "data: ...\n\n" event to b. */
void hy_sse_role(hy_jbuf_t *b, const hy_api_resp_t *m, int index); /* chat only */
/* A text delta; lp/n_lp its tokens when m->logprobs; text_offset as above. */
void hy_sse_delta(hy_jbuf_t *b, const hy_api_resp_t *m, int index, const char *text,
                  size_t len, const hy_api_token_lp_t *lp, size_t n_lp, size_t text_offset);
/* A tool call starts (id and name; arguments "") / the next bytes of its
 * arguments. */
void hy_sse_tool_begin(hy_jbuf_t *b, const hy_api_resp_t *m, int index, int call,
                       const char *id, const char *name, bool legacy);
void hy_sse_tool_args(hy_jbuf_t *b, const hy_api_resp_t *m, int index, int call,
                      const char *text, size_t len, bool legacy);
void hy_sse_finish(hy_jbuf_t *b, const hy_api_resp_t *m, int index, hy_api_finish_t f);
void hy_sse_usage(hy_jbuf_t *b, const hy_api_resp_t *m, const hy_api_usage_t *u);
void hy_sse_done(hy_jbuf_t *b);
/* An error after the stream began: the error event, then [DONE]. */
void hy_sse_error(hy_jbuf_t *b, const hy_api_error_t *e);

/* /v1/models */
typedef struct {
    const char *kind;  /* "attention", "linear_attention", "mamba2", "shortconv", ... */
    int32_t count;
} hy_api_layer_kind_t;

typedef struct {
    const char *id;
    int64_t created;
    int64_t max_model_len;
    const char *architecture;  /* GGUF general.architecture */
    const hy_api_layer_kind_t *layers;
    size_t n_layer_kinds;
} hy_api_model_info_t;

int hy_api_format_models(const hy_api_model_info_t *m, char **out, size_t *out_len);

/* {"tokens":[...],"count":n,"max_model_len":N} and {"prompt":"..."} */
int hy_api_format_tokenize(const int32_t *tokens, size_t n, int64_t max_model_len, char **out,
                           size_t *out_len);
int hy_api_format_detokenize(const char *text, size_t len, char **out, size_t *out_len);

#endif
