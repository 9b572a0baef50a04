/*
 * chat_template.h - renders a model's `tokenizer.chat_template` (a Jinja2
 * program) into the prompt text, exactly as Hugging Face transformers and
 * vLLM do (jinja2 ImmutableSandboxedEnvironment with trim_blocks and
 * lstrip_blocks, transformers' tojson/raise_exception/strftime_now).
 * Compile once at model load: anything unsupported is reported then, with
 * line:column.  Render per request; each render is independent and
 * thread-safe on a shared compiled template.
 */
#ifndef HY_CHAT_TEMPLATE_H
#define HY_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hy.h"
#include "model/gguf.h"

typedef struct hy_chat_tmpl hy_chat_tmpl_t;

/* One message; the template sees a dict with the non-NULL optional keys in
 * this order: role, content, name, tool_calls, tool_call_id, reasoning_content. */
typedef struct {
    const char *role;              /* required */
    const char *content;           /* NULL: the template sees None */
    const char *name;              /* optional */
    const char *tool_calls;        /* optional JSON array text (OpenAI tool_calls) */
    const char *tool_call_id;      /* optional */
    const char *reasoning_content; /* optional */
} hy_chat_msg_t;

typedef struct {
    bool add_generation_prompt;
    const char *bos_token;  /* NULL: undefined in the template */
    const char *eos_token;  /* NULL: undefined in the template */
    int enable_thinking;    /* -1: not passed (undefined); 0 false; 1 true */
    const char *tools;      /* JSON array text, or NULL (template sees None) */
    const char *extra_vars; /* JSON object of extra template variables, or NULL */
    int64_t now;            /* strftime_now clock: 0 = local time now; else this UTC epoch second */
    size_t max_output;      /* 0: 16 MiB */
} hy_chat_opts_t;

/* Parses src.  On failure *out is NULL and err says "chat template L:C: ...". */
int hy_chat_compile(hy_chat_tmpl_t **out, const char *src, size_t len, char *err);

/* Renders msgs; *out is malloc'd, NUL-terminated, and the caller frees it.
 * raise_exception() in the template becomes HY_EINVAL with its message. */
int hy_chat_render(const hy_chat_tmpl_t *t, const hy_chat_msg_t *msgs, size_t n,
                   const hy_chat_opts_t *opts, char **out, size_t *out_len, char *err);

void hy_chat_free(hy_chat_tmpl_t *t);

/* The template's text as compiled (NUL-terminated). */
const char *hy_chat_source(const hy_chat_tmpl_t *t, size_t *len);
/* The built-in template for general.architecture `arch` (len bytes), or
 * NULL when there is none; *src_len gets its length. */
const char *hy_chat_builtin(const char *arch, size_t len, size_t *src_len);

/* Where a model's template comes from: origin "gguf" (its own
 * tokenizer.chat_template) or "builtin:<arch>" (hy_chat_builtin of its
 * architecture, for files that carry none).  src points into the GGUF
 * mapping or static memory, not NUL-terminated. */
typedef struct {
    const char *src;
    size_t len;
    const char *origin;
} hy_chat_src_t;

/* HY_OK with *out set, or HY_ENOENT: no template of either kind. */
int hy_chat_model_source(const hy_gguf_t *g, hy_chat_src_t *out);

#endif
