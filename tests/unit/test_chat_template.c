/*
 * test_chat_template.c - renders the real chat templates in tests/unit/chat/
 * with every conversation of inputs.json, as listed in cases.json, and
 * compares byte for byte with what jinja2 (configured like transformers)
 * produced via make-expected.py; cases where jinja2 raised must fail here
 * too.  Then the compile-time diagnostics (line:col + construct), the
 * render-time errors, and the limits that protect against hostile input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "gguf_writer.h"
#include "model/chat_template.h"
#include "test.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;

    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = 0;
        if (len)
            *len = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Renders one case; returns 1 if it behaves like jinja2 did. */
static int run_case(hy_chat_tmpl_t *t, const cJSON *inputs, const cJSON *c, char *why, size_t whylen)
{
    const cJSON *conv = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(inputs, "conversations"), jstr(c, "conversation"));
    const cJSON *tinfo = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(inputs, "templates"), jstr(c, "template"));
    size_t n = (size_t)cJSON_GetArraySize(conv), i = 0;
    hy_chat_msg_t *msgs = calloc(n ? n : 1, sizeof(*msgs));
    char **owned = calloc(n ? n : 1, sizeof(char *));
    char *tools = NULL, *out = NULL, err[HY_ERR_LEN] = "";
    size_t out_len = 0;
    const cJSON *m;
    int ok = 0, rc;

    cJSON_ArrayForEach(m, conv) {
        msgs[i].role = jstr(m, "role");
        msgs[i].content = jstr(m, "content");
        msgs[i].name = jstr(m, "name");
        msgs[i].tool_call_id = jstr(m, "tool_call_id");
        msgs[i].reasoning_content = jstr(m, "reasoning_content");
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (tc && !cJSON_IsNull(tc))
            msgs[i].tool_calls = owned[i] = cJSON_PrintUnformatted(tc);
        i++;
    }
    hy_chat_opts_t o = {
        .add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt")),
        .bos_token = jstr(tinfo, "bos_token"),
        .eos_token = jstr(tinfo, "eos_token"),
        .enable_thinking = cJSON_GetObjectItemCaseSensitive(c, "enable_thinking")->valueint,
        .now = (int64_t)cJSON_GetObjectItemCaseSensitive(inputs, "now")->valuedouble,
    };
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "tools")))
        o.tools = tools = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(inputs, "tools"));
    rc = hy_chat_render(t, msgs, n, &o, &out, &out_len, err);
    const char *exp_err = jstr(c, "error");
    if (exp_err) {
        if (rc >= 0)
            snprintf(why, whylen, "rendered, but jinja2 raised: %.200s", exp_err);
        else if (strstr(exp_err, "at once") || strstr(exp_err, "not allowed"))
            ok = strstr(err, exp_err) != NULL; /* raise_exception: same message */
        else
            ok = 1;
        if (!ok && rc < 0)
            snprintf(why, whylen, "error text '%.200s' lacks '%.200s'", err, exp_err);
    } else if (rc < 0) {
        snprintf(why, whylen, "render failed: %.300s", err);
    } else {
        char path[512];
        size_t elen = 0;
        snprintf(path, sizeof path, "tests/unit/chat/%s", jstr(c, "expected"));
        char *exp = slurp(hy_t_srcpath(path), &elen);
        if (!exp) {
            snprintf(why, whylen, "cannot read %.300s", path);
        } else if (elen != out_len || memcmp(exp, out, elen)) {
            size_t k = 0;
            while (k < elen && k < out_len && exp[k] == out[k])
                k++;
            snprintf(why, whylen, "differs at byte %zu (len %zu vs expected %zu): got '%.40s' want '%.40s'",
                     k, out_len, elen, out + k, exp + k);
        } else {
            ok = 1;
        }
        free(exp);
    }
    for (i = 0; i < n; i++)
        free(owned[i]);
    free(owned);
    free(msgs);
    free(tools);
    free(out);
    return ok;
}

static void test_reference_cases(void)
{
    char *in_txt = slurp(hy_t_srcpath("tests/unit/chat/inputs.json"), NULL);
    char *cs_txt = slurp(hy_t_srcpath("tests/unit/chat/cases.json"), NULL);
    cJSON *inputs = in_txt ? cJSON_Parse(in_txt) : NULL;
    cJSON *cases = cs_txt ? cJSON_Parse(cs_txt) : NULL;
    const cJSON *tn;

    HY_T_OK(inputs && cases, "read inputs.json and cases.json");
    if (!inputs || !cases)
        goto done;
    cJSON_ArrayForEach(tn, cJSON_GetObjectItemCaseSensitive(inputs, "templates")) {
        char path[256], err[HY_ERR_LEN] = "", why[512] = "";
        size_t len = 0;
        int total = 0, good = 0;
        hy_chat_tmpl_t *t = NULL;
        const cJSON *c;

        snprintf(path, sizeof path, "tests/unit/chat/%s.jinja", tn->string);
        char *src = slurp(hy_t_srcpath(path), &len);
        int rc = src ? hy_chat_compile(&t, src, len, err) : -1;
        HY_T_OK(rc == HY_OK, "compile %s %s", tn->string, err);
        free(src);
        if (rc != HY_OK)
            continue;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(cases, "cases")) {
            char w[512] = "";
            if (strcmp(jstr(c, "template"), tn->string))
                continue;
            total++;
            if (run_case(t, inputs, c, w, sizeof w)) {
                good++;
            } else if (!why[0]) {
                snprintf(why, sizeof why, "%.40s g%d t%d k%d: %.400s", jstr(c, "conversation"),
                         cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt")),
                         cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "tools")),
                         cJSON_GetObjectItemCaseSensitive(c, "enable_thinking")->valueint, w);
            }
        }
        HY_T_OK(total > 0 && good == total, "%s: %d/%d cases match jinja2%s%s", tn->string, good, total,
                why[0] ? "; first failure: " : "", why);
        hy_chat_free(t);
    }
done:
    cJSON_Delete(inputs);
    cJSON_Delete(cases);
    free(in_txt);
    free(cs_txt);
}

/* compile must fail with a message containing `want` */
static void compile_err(const char *src, const char *want, const char *what)
{
    hy_chat_tmpl_t *t = (hy_chat_tmpl_t *)1;
    char err[HY_ERR_LEN] = "";
    int rc = hy_chat_compile(&t, src, strlen(src), err);
    HY_T_OK(rc < 0 && t == NULL && strstr(err, want), "compile error %s: '%s' (want '%s')", what, err, want);
    if (rc >= 0)
        hy_chat_free(t);
}

static int render_src(const char *src, const hy_chat_opts_t *o, char **out, char *err)
{
    hy_chat_tmpl_t *t;
    hy_chat_msg_t m[2] = {{.role = "user", .content = "hi"}, {.role = "assistant", .content = "yo"}};
    size_t len;
    int rc = hy_chat_compile(&t, src, strlen(src), err);
    *out = NULL;
    if (rc < 0)
        return rc;
    rc = hy_chat_render(t, m, 2, o, out, &len, err);
    hy_chat_free(t);
    return rc;
}

static void render_err(const char *src, const hy_chat_opts_t *o, const char *want, const char *what)
{
    char err[HY_ERR_LEN] = "", *out;
    int rc = render_src(src, o, &out, err);
    HY_T_OK(rc < 0 && out == NULL && strstr(err, want), "render error %s: '%s' (want '%s')", what, err, want);
    free(out);
}

static void render_eq(const char *src, const hy_chat_opts_t *o, const char *want, const char *what)
{
    char err[HY_ERR_LEN] = "", *out;
    int rc = render_src(src, o, &out, err);
    HY_T_OK(rc == HY_OK && out && !strcmp(out, want), "render %s: got '%s' want '%s' %s", what,
            out ? out : "(null)", want, err);
    free(out);
}

static char *repeat(const char *a, int n, const char *mid, const char *b, int m)
{
    size_t la = strlen(a), lb = strlen(b), lm = strlen(mid);
    char *s = malloc(la * (size_t)n + lm + lb * (size_t)m + 1), *p = s;
    for (int i = 0; i < n; i++, p += la)
        memcpy(p, a, la);
    memcpy(p, mid, lm);
    p += lm;
    for (int i = 0; i < m; i++, p += lb)
        memcpy(p, b, lb);
    *p = 0;
    return s;
}

static void test_errors(void)
{
    hy_chat_opts_t o = {.enable_thinking = -1};
    char *s;

    compile_err("ab\n  {{ x ", "2:3: unterminated '{{' tag", "unterminated var tag");
    compile_err("{% if x %}\nA", "1:1: 'if' block never closed", "unclosed if");
    compile_err("x\n{{ y | frobnicate }}", "2:8: unknown filter 'frobnicate'", "unknown filter");
    compile_err("{{ y is frob }}", "1:9: unknown test 'frob'", "unknown test");
    compile_err("{{ 1 + }}", "1:8: expected an expression, got '}}'", "bad expression");
    compile_err("{% include 'x' %}", "1:4: unknown or unsupported tag 'include'", "unsupported tag");
    compile_err("{% for x in y %}{% endif %}", "1:20: unexpected 'endif'", "mismatched end tag");
    compile_err("{{ 'abc }}", "1:4: unterminated string literal", "unterminated string");
    compile_err("a {# never closed", "1:3: unterminated comment", "unterminated comment");
    compile_err("{{ a ) }}", "1:6: unexpected ')'", "unbalanced paren");
    compile_err("{{ x $ }}", "1:6: unexpected character '$'", "bad character");
    compile_err("{% raw %}x{% endraw %}", "unsupported tag 'raw'", "raw block");
    compile_err("{% set x = 1 %}\n{% else %}", "2:4: unexpected 'else'", "stray else");

    render_err("{{ raise_exception('Only user and assistant roles are supported!') }}", &o,
               "raise_exception: Only user and assistant roles are supported!", "raise_exception");
    render_err("{{ x.y }}", &o, "'x' is undefined", "attribute of undefined");
    render_err("{{ messages[0].content + 1 }}", &o, "unsupported operand type(s) for +: 'str' and 'int'",
               "str + int");
    render_err("{{ 1 // 0 }}", &o, "by zero", "division by zero");
    render_err("{% for m in 3 %}{% endfor %}", &o, "'int' object is not iterable", "iterate int");
    render_err("{{ tools | tojson }}{{ foo() }}", &o, "'foo' is undefined", "call undefined");
    o.tools = "[{\"a\": }]";
    render_err("{{ tools }}", &o, "tools: invalid JSON", "bad tools JSON");
    o.tools = NULL;

    /* values flow through as in Python */
    render_eq("{{ messages | map(attribute='role') | join(',') }}|{{ messages[1]['content'] }}", &o,
              "user,assistant|yo", "messages visible");
    o.extra_vars = "{\"custom_flag\": true, \"date_string\": \"1 Jan 2025\"}";
    render_eq("{{ custom_flag }} {{ date_string }} {{ enable_thinking is defined }}", &o,
              "True 1 Jan 2025 False", "extra_vars");
    o.extra_vars = NULL;
    o.now = 86400 * 365;
    render_eq("{{ strftime_now('%Y-%m-%d') }}", &o, "1971-01-01", "strftime_now fixed clock");
    o.now = 0;
    render_eq("x\r\ny\n", &o, "x\ny", "newline normalisation and trailing newline");

    /* limits: nothing may crash, hang or exhaust the stack */
    s = repeat("(", 100000, "1", ")", 100000);
    char *src = malloc(strlen(s) + 10);
    sprintf(src, "{{ %s }}", s);
    compile_err(src, "nested too deeply", "deep parentheses");
    free(src);
    free(s);
    s = repeat("{% if true %}", 5000, "x", "{% endif %}", 5000);
    compile_err(s, "nested too deeply", "deep if blocks");
    free(s);
    s = repeat("[", 50000, "", "]", 50000);
    src = malloc(strlen(s) + 10);
    sprintf(src, "{{ %s }}", s);
    compile_err(src, "nested too deeply", "deep list literal");
    free(src);
    free(s);
    s = repeat("not ", 100000, "x", "", 0);
    src = malloc(strlen(s) + 10);
    sprintf(src, "{{ %s }}", s);
    compile_err(src, "nested too deeply", "long not chain");
    free(src);
    free(s);
    render_err("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", &o, "nested too deeply",
               "infinite macro recursion");
    render_err("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", &o,
               "loop iterations", "iteration cap");
    render_err("{{ range(100000000) | length }}", &o, "exceeds", "huge range");
    o.max_output = 1 << 20;
    render_err("{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}", &o, "output exceeds",
               "output cap");
    render_err("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
               &o, "limit", "doubling string");
    o.max_output = 0;
    render_err("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"
               "{{ ns.x == ns.x }}{{ ns.x }}", &o, "nested too deeply", "deeply nested list value");
    s = repeat("[", 100000, "", "]", 100000);
    o.tools = s;
    render_err("{{ tools | length }}", &o, "nested too deeply", "deep tools JSON");
    o.tools = NULL;
    free(s);
}

/* A GGUF with only general.architecture and, when tmpl is not NULL,
 * tokenizer.chat_template; its template source as hy_chat_model_source
 * picks it.  The buffer stays alive in *w for src to point into. */
static int model_source(hy_tw_t *w, const char *arch, const char *tmpl, hy_gguf_t **g,
                        hy_chat_src_t *src)
{
    char err[HY_ERR_LEN];

    hy_tw_init(w);
    hy_tw_header(w, 3, 0, tmpl ? 2 : 1);
    hy_tw_kv_str(w, "general.architecture", arch);
    if (tmpl)
        hy_tw_kv_str(w, "tokenizer.chat_template", tmpl);
    if (w->oom || hy_gguf_open_buffer(g, w->buf, w->len, "t.gguf", err) != HY_OK)
        return HY_EIO;
    return hy_chat_model_source(*g, src);
}

/* Built-in templates: the gemma3 one is tests/unit/chat/gemma3.jinja byte
 * for byte (so the reference cases above prove it renders as jinja2), and it
 * is what a gemma3 file without tokenizer.chat_template gets; a file's own
 * template wins; other architectures get none. */
static void test_builtin(void)
{
    size_t len = 0, blen = 0;
    char *want = slurp(hy_t_srcpath("tests/unit/chat/gemma3.jinja"), &len);
    const char *b = hy_chat_builtin("gemma3", 6, &blen);
    hy_chat_src_t src;
    hy_gguf_t *g = NULL;
    hy_tw_t w;
    int rc;

    HY_T_OK(want != NULL && b != NULL && blen == len && memcmp(b, want, len) == 0,
            "built-in gemma3 template equals tests/unit/chat/gemma3.jinja (%zu bytes)", blen);
    free(want);
    HY_T_OK(hy_chat_builtin("gemma", 5, &blen) == NULL && hy_chat_builtin("gemma3n", 7, &blen) == NULL,
            "no built-in template for gemma or gemma3n");

    rc = model_source(&w, "gemma3", NULL, &g, &src);
    HY_T_OK(rc == HY_OK && strcmp(src.origin, "builtin:gemma3") == 0 && src.src == b,
            "gemma3 file without a template: the built-in one (%s)", rc ? "none" : src.origin);
    hy_gguf_close(g);
    hy_tw_free(&w);
    g = NULL;
    rc = model_source(&w, "gemma3", "{{ messages[0].content }}", &g, &src);
    HY_T_OK(rc == HY_OK && strcmp(src.origin, "gguf") == 0 && src.len == 25 &&
                memcmp(src.src, "{{ messages[0].content }}", 25) == 0,
            "gemma3 file with its own template: that one");
    hy_gguf_close(g);
    hy_tw_free(&w);
    g = NULL;
    rc = model_source(&w, "llama", NULL, &g, &src);
    HY_T_OK(rc == HY_ENOENT, "llama file without a template: none (rc %d)", rc);
    hy_gguf_close(g);
    hy_tw_free(&w);
}

int main(void)
{
    test_reference_cases();
    test_builtin();
    test_errors();
    return hy_t_done();
}
