/*
 * toolcall.h - tool calling around the chat template: which call syntax the
 * served model writes (read off its template), the prompt side (tools and a
 * tool-call history given to templates that know them, written into the
 * messages for templates that do not), the grammar that constrains a call
 * (tool_choice "required" / a named function: always; "auto": lazily, from
 * the syntax's opening marker on), and the parser that turns the model's
 * text back into OpenAI tool_calls, incrementally, so a stream can send a
 * call's name first and then its arguments as they are generated.
 *
 * Syntaxes:
 *   HERMES   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *            (Qwen 2.5/3, Hermes; templates that contain "<tool_call>")
 *   LLAMA3   {"name": "f", "parameters": {...}} (Llama 3.1+ templates:
 *            "<|python_tag|>" or "ipython" in the template)
 *   GENERIC  templates that render no tools at all (SmolLM2's): the tools
 *            are described in the system message by us, the model is asked
 *            for the HERMES form, a call history is written into the
 *            assistant's content and tool results become user turns
 *            wrapped in <tool_response> (a template without a "tool" role
 *            may refuse one).
 * The parser accepts either "arguments" or "parameters", and inside
 * <tool_call> also a JSON array of calls (SmolLM2's training format).
 */
#ifndef HY_SERVER_TOOLCALL_H
#define HY_SERVER_TOOLCALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hy.h"
#include "model/chat_template.h"
#include "server/json_out.h"

typedef enum {
    HY_TC_HERMES = 0,
    HY_TC_LLAMA3,
    HY_TC_GENERIC,
} hy_tc_syntax_t;

typedef enum {
    HY_TOOL_CHOICE_AUTO = 0, /* the default when tools are given */
    HY_TOOL_CHOICE_NONE,
    HY_TOOL_CHOICE_REQUIRED,
    HY_TOOL_CHOICE_NAMED,    /* tool_choice {"type":"function","function":{"name"}} */
} hy_tool_choice_t;

#define HY_TC_MAX_NAME 64 /* OpenAI: ^[A-Za-z0-9_-]{1,64}$ */
#define HY_TC_ID_LEN 29   /* "call_" + 24 characters */
#define HY_TC_MAX_PARALLEL 8 /* calls one constrained (required) answer may make */

/* The syntax a template's source implies. */
hy_tc_syntax_t hy_tc_detect(const char *tmpl_src, size_t len);
const char *hy_tc_syntax_name(hy_tc_syntax_t s);

/* The messages the template renders.  tools: the request's tools array
 * (JSON text) or NULL when the template should not see them (tool_choice
 * none).  For HERMES/LLAMA3 the messages are the request's, with each
 * tool call's "arguments" string turned into the object it encodes (what
 * Hugging Face templates expect: they write it with tojson) and
 * *tools_out = tools.  For GENERIC the tools go into the system message and
 * the history is rewritten as the header says; *tools_out = NULL.  *out
 * and the strings it points to live in *store (one malloc'd block list:
 * hy_tc_store_free). */
typedef struct hy_tc_store hy_tc_store_t;
int hy_tc_prepare_chat(hy_tc_syntax_t syn, const hy_chat_msg_t *in, size_t n,
                       const char *tools, hy_chat_msg_t **out, size_t *n_out,
                       const char **tools_out, hy_tc_store_t **store, char *err);
void hy_tc_store_free(hy_tc_store_t *s);

/* The grammar spec (grammar_cache.h) constraining the calls: tools is the
 * validated tools array (JSON text); name the function for NAMED.  AUTO
 * makes a lazy grammar triggered by the syntax's opening marker; REQUIRED
 * and NAMED constrain from the first token (parallel: one or more calls).
 * content (GBNF, may be NULL: the request's response_format) is what an
 * answer that is not a call must match: with AUTO the whole output is then
 * constrained to either that or the calls; REQUIRED and NAMED answer with
 * calls only, so it plays no part there.  *spec is malloc'd. */
int hy_tc_grammar(const char *tools, hy_tc_syntax_t syn, hy_tool_choice_t choice,
                  const char *name, bool parallel, const char *content, size_t content_len,
                  char **spec, size_t *spec_len, char *err);

/* ---- the output parser ---- */

typedef enum {
    HY_TC_EV_CONTENT,    /* text: plain content */
    HY_TC_EV_CALL_BEGIN, /* index, id, name: a call starts (arguments follow) */
    HY_TC_EV_CALL_ARGS,  /* index, text: the next bytes of its arguments */
    HY_TC_EV_CALL_END,   /* index: the call is complete */
    HY_TC_EV_CALL_ABORT, /* index, text: the call never completed; text is
                          * everything the model wrote for it (its marker
                          * included) */
} hy_tc_ev_kind_t;

typedef struct {
    hy_tc_ev_kind_t kind;
    int index;           /* the call's index in the answer */
    const char *id;
    const char *name;
    const char *text;
    size_t len;
} hy_tc_event_t;

/* A nonzero return stops the parser and is passed back. */
typedef int (*hy_tc_sink_fn)(void *arg, const hy_tc_event_t *ev);

typedef struct {
    hy_tc_syntax_t syn;
    int state;
    hy_jbuf_t b;         /* text not yet given out (see toolcall.c) */
    size_t scan;         /* bytes of buf already scanned in the current state */
    size_t args_at;      /* start of the arguments in buf */
    int depth;           /* JSON scanner over the arguments */
    bool in_str, esc;
    int n_calls;         /* calls begun */
    int n_done;          /* calls complete */
    bool open;           /* a begun call not yet complete */
    bool stop_after_one; /* parallel_tool_calls false: the first call ends the answer */
    uint64_t id_seed;
    char id[HY_TC_ID_LEN + 1];
    char name[HY_TC_MAX_NAME + 1];
    bool after_call;     /* whitespace right after a call is dropped */
    bool any_content;    /* content went out already */
    char sep[16];        /* the whitespace before a call, put back between
                          * the content before it and content after it */
    size_t sep_len;
    bool failed;         /* out of memory: everything else is refused */
} hy_tc_stream_t;

void hy_tc_stream_init(hy_tc_stream_t *s, hy_tc_syntax_t syn, uint64_t id_seed,
                       bool stop_after_one);
void hy_tc_stream_free(hy_tc_stream_t *s);
/* Feeds the next text (as released by the stop matcher). */
int hy_tc_stream_feed(hy_tc_stream_t *s, const char *text, size_t n, hy_tc_sink_fn sink,
                      void *arg);
/* The end of the text: what is held goes out as content; an unfinished
 * call is aborted (HY_TC_EV_CALL_ABORT after its CALL_BEGIN, as content
 * before). */
int hy_tc_stream_end(hy_tc_stream_t *s, hy_tc_sink_fn sink, void *arg);
/* stop_after_one and a call is complete: the answer should end now. */
bool hy_tc_stream_want_stop(const hy_tc_stream_t *s);

/* The non-streamed answer: content and the complete calls, collected from
 * the events (hy_tc_collect as the sink). */
typedef struct {
    char id[HY_TC_ID_LEN + 1];
    char name[HY_TC_MAX_NAME + 1];
    hy_jbuf_t args;
} hy_tc_call_t;

typedef struct {
    hy_jbuf_t content;
    hy_tc_call_t *calls;
    size_t n_calls, cap_calls;
    bool failed;         /* out of memory */
} hy_tc_result_t;

int hy_tc_collect(void *result, const hy_tc_event_t *ev);
void hy_tc_result_free(hy_tc_result_t *r);

#endif
