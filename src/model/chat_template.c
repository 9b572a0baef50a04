/*
 * chat_template.c - public face of the Jinja2 interpreter: turns messages
 * and options into the variables transformers passes to
 * `compiled_template.render(messages=..., tools=..., add_generation_prompt=...,
 * **special_tokens, **kwargs)` and runs the compiled template in a fresh
 * arena, so a render never touches shared state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/chat_template.h"
#include "model/jinja.h"

struct hy_chat_tmpl {
    jtemplate_t t;
    char *src; /* the text, for what callers read off it (tool-call syntax) */
    size_t len;
};

int hy_chat_compile(hy_chat_tmpl_t **out, const char *src, size_t len, char *err)
{
    hy_chat_tmpl_t *t = NULL;
    int rc;

    *out = NULL;
    if (!src)
        return hy_err(err, HY_EINVAL, "chat template: no template text");
    if (!(t = calloc(1, sizeof(*t))))
        return hy_err(err, HY_ENOMEM, "chat template: out of memory");
    t->t.arena.cap = HY_JINJA_MAX_MEM;
    if ((rc = hy_jinja_parse(&t->t, src, len, err)) < 0)
        goto fail;
    if ((t->src = malloc(len + 1)) == NULL) {
        rc = hy_err(err, HY_ENOMEM, "chat template: out of memory");
        goto fail;
    }
    memcpy(t->src, src, len);
    t->src[len] = '\0';
    t->len = len;
    *out = t;
    return HY_OK;
fail:
    hy_chat_free(t);
    return rc;
}

void hy_chat_free(hy_chat_tmpl_t *t)
{
    if (!t)
        return;
    hy_jinja_arena_free(&t->t.arena);
    free(t->src);
    free(t);
}

const char *hy_chat_source(const hy_chat_tmpl_t *t, size_t *len)
{
    *len = t->len;
    return t->src;
}

static jv_t cstr(hy_jinja_arena_t *a, const char *s)
{
    return jv_str(s, strlen(s));
}

static int json_field(hy_jinja_arena_t *a, const char *what, const char *text, jv_t *out, char *err)
{
    char sub[HY_ERR_LEN];
    int rc = jv_parse_json(a, text, strlen(text), out, sub);
    if (rc < 0)
        return hy_err(err, rc, "chat template: %s: %s", what, sub);
    return HY_OK;
}

int hy_chat_render(const hy_chat_tmpl_t *t, const hy_chat_msg_t *msgs, size_t n,
                   const hy_chat_opts_t *opts, char **out, size_t *out_len, char *err)
{
    hy_jinja_arena_t a = {.cap = HY_JINJA_MAX_MEM};
    hy_chat_opts_t dflt = {.enable_thinking = -1};
    jglobal_t g[8];
    size_t ng = 0;
    jv_list_t *ml;
    jv_t v;
    char *res;
    size_t len;
    int rc;

    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (!t || (n && !msgs))
        return hy_err(err, HY_EINVAL, "chat template: bad arguments");
    if (!opts)
        opts = &dflt;
    if (!(ml = jv_list_new(&a, n))) {
        rc = hy_err(err, HY_ENOMEM, "chat template: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const hy_chat_msg_t *m = &msgs[i];
        jv_dict_t *d = jv_dict_new(&a, 0);
        if (!d || !m->role) {
            rc = d ? hy_err(err, HY_EINVAL, "chat template: message %zu has no role", i)
                   : hy_err(err, HY_ENOMEM, "chat template: out of memory");
            goto done;
        }
        rc = jv_dict_set(&a, d, "role", 4, cstr(&a, m->role));
        if (rc >= 0)
            rc = jv_dict_set(&a, d, "content", 7, m->content ? cstr(&a, m->content) : jv_none());
        if (rc >= 0 && m->name)
            rc = jv_dict_set(&a, d, "name", 4, cstr(&a, m->name));
        if (rc >= 0 && m->tool_calls) {
            char what[64];
            snprintf(what, sizeof what, "message %zu tool_calls", i);
            if ((rc = json_field(&a, what, m->tool_calls, &v, err)) < 0)
                goto done;
            rc = jv_dict_set(&a, d, "tool_calls", 10, v);
        }
        if (rc >= 0 && m->tool_call_id)
            rc = jv_dict_set(&a, d, "tool_call_id", 12, cstr(&a, m->tool_call_id));
        if (rc >= 0 && m->reasoning_content)
            rc = jv_dict_set(&a, d, "reasoning_content", 17, cstr(&a, m->reasoning_content));
        if (rc < 0) {
            rc = hy_err(err, HY_ENOMEM, "chat template: out of memory");
            goto done;
        }
        ml->v[ml->n].t = JV_DICT;
        ml->v[ml->n++].u.d = d;
    }
    v.t = JV_LIST;
    v.u.l = ml;
    g[ng++] = (jglobal_t){"messages", v};
    if (opts->tools) {
        if ((rc = json_field(&a, "tools", opts->tools, &v, err)) < 0)
            goto done;
        g[ng++] = (jglobal_t){"tools", v};
    } else {
        g[ng++] = (jglobal_t){"tools", jv_none()};
    }
    g[ng++] = (jglobal_t){"documents", jv_none()};
    g[ng++] = (jglobal_t){"add_generation_prompt", jv_bool(opts->add_generation_prompt)};
    if (opts->bos_token)
        g[ng++] = (jglobal_t){"bos_token", cstr(&a, opts->bos_token)};
    if (opts->eos_token)
        g[ng++] = (jglobal_t){"eos_token", cstr(&a, opts->eos_token)};
    if (opts->enable_thinking >= 0)
        g[ng++] = (jglobal_t){"enable_thinking", jv_bool(opts->enable_thinking != 0)};
    if (opts->extra_vars) {
        jv_t ex;
        if ((rc = json_field(&a, "extra_vars", opts->extra_vars, &ex, err)) < 0)
            goto done;
        if (ex.t != JV_DICT) {
            rc = hy_err(err, HY_EINVAL, "chat template: extra_vars must be a JSON object");
            goto done;
        }
        /* extra variables override the standard ones, like **kwargs */
        jglobal_t *all = hy_jinja_alloc(&a, (ng + ex.u.d->n) * sizeof(*all));
        if (!all) {
            rc = hy_err(err, HY_ENOMEM, "chat template: out of memory");
            goto done;
        }
        memcpy(all, g, ng * sizeof(*all));
        for (size_t i = 0; i < ex.u.d->n; i++)
            all[ng + i] = (jglobal_t){ex.u.d->k[i], ex.u.d->v[i]};
        rc = hy_jinja_render(&t->t, &a, all, ng + ex.u.d->n, opts->now,
                             opts->max_output ? opts->max_output : (size_t)16 << 20, &res, &len, err);
    } else {
        rc = hy_jinja_render(&t->t, &a, g, ng, opts->now,
                             opts->max_output ? opts->max_output : (size_t)16 << 20, &res, &len, err);
    }
    if (rc < 0)
        goto done;
    if (!(*out = malloc(len + 1))) {
        rc = hy_err(err, HY_ENOMEM, "chat template: out of memory");
        goto done;
    }
    memcpy(*out, res, len);
    (*out)[len] = 0;
    if (out_len)
        *out_len = len;
    rc = HY_OK;
done:
    hy_jinja_arena_free(&a);
    return rc;
}

/* ---- built-in templates ------------------------------------------------
 * Some architectures' GGUF files ship without tokenizer.chat_template (the
 * Gemma 3 GGUFs made by llama.cpp's converter from the base repositories,
 * among them the 270M that CI serves).  Their published template is kept
 * here, byte for byte as the model's tokenizer_config.json has it, so that
 * /v1/chat/completions formats a conversation the way the model was tuned
 * on instead of answering 400.  tests/unit/chat/<arch>.jinja holds the same
 * bytes; test_chat_template checks that they are equal and that each renders
 * as jinja2 does. */

/* Google's Gemma 3 instruct template (gemma-3-*-it tokenizer_config.json). */
static const char k_tmpl_gemma3[] =
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n"
    "\n"
    "' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n"
    "\n"
    "' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n"
    "' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n"
    "' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n"
    "'}}\n"
    "{%- endif -%}\n";

static const struct {
    const char *arch, *origin;
    const char *src;
    size_t len;
} k_builtin[] = {
    {"gemma3", "builtin:gemma3", k_tmpl_gemma3, sizeof k_tmpl_gemma3 - 1},
};

static int builtin_index(const char *arch, size_t len)
{
    for (size_t i = 0; i < sizeof k_builtin / sizeof k_builtin[0]; i++)
        if (strlen(k_builtin[i].arch) == len && memcmp(k_builtin[i].arch, arch, len) == 0)
            return (int)i;
    return -1;
}

const char *hy_chat_builtin(const char *arch, size_t len, size_t *src_len)
{
    int i = builtin_index(arch, len);

    if (i < 0)
        return NULL;
    *src_len = k_builtin[i].len;
    return k_builtin[i].src;
}

int hy_chat_model_source(const hy_gguf_t *g, hy_chat_src_t *out)
{
    hy_gguf_str_t s;
    int i;

    if (hy_gguf_get_str(g, "tokenizer.chat_template", &s, NULL) == HY_OK) {
        *out = (hy_chat_src_t){s.ptr, s.len, "gguf"};
        return HY_OK;
    }
    if (hy_gguf_get_str(g, "general.architecture", &s, NULL) == HY_OK &&
        (i = builtin_index(s.ptr, s.len)) >= 0) {
        *out = (hy_chat_src_t){k_builtin[i].src, k_builtin[i].len, k_builtin[i].origin};
        return HY_OK;
    }
    return HY_ENOENT;
}
