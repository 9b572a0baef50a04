/*
 * toolcall_prompt.c - the input side of tool calling (toolcall.h): which
 * syntax a template implies, the messages and tools the template renders,
 * and the grammar that constrains a call to the syntax with arguments
 * valid against the function's parameter schema (json_schema.h builds the
 * argument rules; the rules around them are written here).
 */
#include "server/toolcall.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"

static bool has(const char *s, size_t n, const char *what)
{
    size_t k = strlen(what), i;

    for (i = 0; s != NULL && i + k <= n; i++)
        if (memcmp(s + i, what, k) == 0)
            return true;
    return false;
}

hy_tc_syntax_t hy_tc_detect(const char *src, size_t len)
{
    /* what the template writes for a call is what the model was trained on */
    if (has(src, len, "<tool_call>"))
        return HY_TC_HERMES;
    if (has(src, len, "<|python_tag|>") || has(src, len, "ipython"))
        return HY_TC_LLAMA3;
    return HY_TC_GENERIC;
}

const char *hy_tc_syntax_name(hy_tc_syntax_t s)
{
    return s == HY_TC_HERMES ? "hermes" : s == HY_TC_LLAMA3 ? "llama3" : "generic";
}

/* ---- the messages ---- */

struct hy_tc_store {
    struct hy_tc_store *next;
    max_align_t data[];
};

static void *store_alloc(hy_tc_store_t **s, size_t n)
{
    hy_tc_store_t *b = malloc(sizeof *b + n + 1);

    if (b == NULL)
        return NULL;
    b->next = *s;
    *s = b;
    return b->data;
}

/* A cJSON string (cJSON's malloc) copied into the store. */
static const char *store_take(hy_tc_store_t **s, char *text)
{
    char *p = NULL;

    if (text != NULL && (p = store_alloc(s, strlen(text))) != NULL)
        strcpy(p, text);
    cJSON_free(text);
    return p;
}

void hy_tc_store_free(hy_tc_store_t *s)
{
    while (s != NULL) {
        hy_tc_store_t *n = s->next;
        free(s);
        s = n;
    }
}

/* Moves b's text into the store. */
static const char *sb_keep(hy_jbuf_t *b, hy_tc_store_t **s)
{
    char *p = NULL;

    if (!b->failed && (p = store_alloc(s, b->len)) != NULL) {
        memcpy(p, b->data ? b->data : "", b->len);
        p[b->len] = '\0';
    }
    hy_jbuf_free(b);
    hy_jbuf_init(b);
    return p;
}

/* tool_calls with each "arguments" string that holds a JSON object turned
 * into that object, as Hugging Face's templates expect. */
static const char *args_as_objects(const char *tool_calls, hy_tc_store_t **s)
{
    cJSON *a = cJSON_Parse(tool_calls), *c;

    if (a == NULL)
        return tool_calls;
    cJSON_ArrayForEach(c, a) {
        cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        cJSON *g = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "arguments") : NULL;
        cJSON *o = cJSON_IsString(g) ? cJSON_Parse(g->valuestring) : NULL;

        if (cJSON_IsObject(o))
            cJSON_ReplaceItemInObjectCaseSensitive(f, "arguments", o);
        else
            cJSON_Delete(o);
    }
    tool_calls = store_take(s, cJSON_PrintUnformatted(a));
    cJSON_Delete(a);
    return tool_calls;
}

/* The system text that tells a model whose template knows no tools what
 * it may call and how (the HERMES form the parser reads). */
static void tools_prompt(hy_jbuf_t *b, const cJSON *tools)
{
    const cJSON *t;

    hy_jbuf_cstr(b, "You can call functions. The available functions, one JSON object per line:\n"
              "<tools>\n");
    cJSON_ArrayForEach(t, tools) {
        char *f = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(t, "function"));

        if (f == NULL) {
            b->failed = 1;
            return;
        }
        hy_jbuf_cstr(b, f);
        hy_jbuf_cstr(b, "\n");
        cJSON_free(f);
    }
    hy_jbuf_cstr(b, "</tools>\n\nTo call a function, answer with a JSON object giving its name and "
              "its arguments inside <tool_call></tool_call> tags:\n<tool_call>\n"
              "{\"name\": \"function_name\", \"arguments\": {\"argument\": \"value\"}}\n"
              "</tool_call>\nUse one <tool_call> block per call. Results come back inside "
              "<tool_response></tool_response> tags.");
}

/* An assistant turn's calls written out as the model would have. */
static void calls_text(hy_jbuf_t *b, const char *tool_calls)
{
    cJSON *a = cJSON_Parse(tool_calls), *c;
    bool first = true;

    cJSON_ArrayForEach(c, a) {
        cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        cJSON *n = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "name") : NULL;
        cJSON *g = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "arguments") : NULL;
        cJSON *o = cJSON_IsString(g) ? cJSON_Parse(g->valuestring) : NULL;
        char *args = cJSON_PrintUnformatted(o != NULL ? o : g != NULL ? g : f);

        hy_jbuf_cstr(b, first ? "<tool_call>\n{\"name\": \"" : "\n<tool_call>\n{\"name\": \"");
        hy_jbuf_cstr(b, cJSON_IsString(n) ? n->valuestring : "");
        hy_jbuf_cstr(b, "\", \"arguments\": ");
        hy_jbuf_cstr(b, args != NULL ? args : "{}");
        hy_jbuf_cstr(b, "}\n</tool_call>");
        cJSON_free(args);
        cJSON_Delete(o);
        first = false;
    }
    cJSON_Delete(a);
}

static int prepare_generic(const hy_chat_msg_t *in, size_t n, const char *tools,
                           hy_chat_msg_t *out, size_t *n_out, hy_tc_store_t **s, char *err)
{
    cJSON *tj = tools ? cJSON_Parse(tools) : NULL;
    hy_jbuf_t b;
    size_t i, k = 0;
    int rc = HY_OK;

    hy_jbuf_init(&b);
    if (tools != NULL && tj == NULL)
        return hy_err(err, HY_ENOMEM, "tools: cannot parse again");
    i = 0;
    if (tj != NULL) {
        bool sys = n > 0 && (strcmp(in[0].role, "system") == 0 ||
                             strcmp(in[0].role, "developer") == 0);

        out[k] = sys ? in[0] : (hy_chat_msg_t){.role = "system"};
        out[k].role = "system";
        if (sys && in[0].content != NULL && in[0].content[0] != '\0') {
            hy_jbuf_cstr(&b, in[0].content);
            hy_jbuf_cstr(&b, "\n\n");
        }
        tools_prompt(&b, tj);
        out[k++].content = sb_keep(&b, s);
        i = sys ? 1 : 0;
        if (out[k - 1].content == NULL)
            rc = HY_ENOMEM;
    }
    for (; rc == HY_OK && i < n; i++) {
        const hy_chat_msg_t *m = &in[i];

        if (strcmp(m->role, "tool") == 0) {
            /* consecutive results become one user turn */
            for (; i < n && strcmp(in[i].role, "tool") == 0; i++) {
                hy_jbuf_cstr(&b, b.len ? "\n<tool_response>\n" : "<tool_response>\n");
                hy_jbuf_cstr(&b, in[i].content ? in[i].content : "");
                hy_jbuf_cstr(&b, "\n</tool_response>");
            }
            i--;
            out[k] = (hy_chat_msg_t){.role = "user", .content = sb_keep(&b, s)};
            rc = out[k++].content != NULL ? HY_OK : HY_ENOMEM;
        } else if (m->tool_calls != NULL) {
            out[k] = *m;
            if (m->content != NULL && m->content[0] != '\0') {
                hy_jbuf_cstr(&b, m->content);
                hy_jbuf_cstr(&b, "\n");
            }
            calls_text(&b, m->tool_calls);
            out[k].tool_calls = NULL;
            out[k].content = sb_keep(&b, s);
            rc = out[k++].content != NULL ? HY_OK : HY_ENOMEM;
        } else {
            out[k++] = *m;
        }
    }
    cJSON_Delete(tj);
    *n_out = k;
    return rc == HY_OK ? HY_OK : hy_err(err, rc, "out of memory rendering the tools");
}

int hy_tc_prepare_chat(hy_tc_syntax_t syn, const hy_chat_msg_t *in, size_t n,
                       const char *tools, hy_chat_msg_t **out, size_t *n_out,
                       const char **tools_out, hy_tc_store_t **store, char *err)
{
    hy_chat_msg_t *m;
    size_t i;

    *store = NULL;
    *n_out = 0;
    *tools_out = NULL;
    if ((m = store_alloc(store, (n + 1) * sizeof *m)) == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory rendering the tools");
    *out = m;
    if (syn == HY_TC_GENERIC)
        return prepare_generic(in, n, tools, m, n_out, store, err);
    for (i = 0; i < n; i++) {
        m[i] = in[i];
        if (in[i].tool_calls != NULL &&
            (m[i].tool_calls = args_as_objects(in[i].tool_calls, store)) == NULL)
            return hy_err(err, HY_ENOMEM, "out of memory rendering the tools");
    }
    *n_out = n;
    *tools_out = tools;
    return HY_OK;
}

/* ---- the grammar ---- */

static const cJSON *tool_fn(const cJSON *t)
{
    return cJSON_GetObjectItemCaseSensitive(t, "function");
}

static const char *tool_name(const cJSON *t)
{
    return cJSON_GetObjectItemCaseSensitive(tool_fn(t), "name")->valuestring;
}

/* Adds one rule per offered function, "tc-fn-<i>", and "tc-call" as their
 * alternatives. */
static int add_calls(hy_jsg_t *g, const cJSON *tools, hy_tc_syntax_t syn, const char *only,
                     char *err)
{
    const char *key = syn == HY_TC_LLAMA3 ? "parameters" : "arguments";
    char rule[32], args[32], body[HY_TC_MAX_NAME + 128];
    hy_jbuf_t alt;
    const cJSON *t;
    cJSON *empty = NULL, *typed = NULL;
    int i = 0, rc = HY_OK;

    hy_jbuf_init(&alt);
    cJSON_ArrayForEach(t, tools) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(tool_fn(t), "parameters");

        if (only != NULL && strcmp(tool_name(t), only) != 0) {
            i++;
            continue;
        }
        if (p == NULL || cJSON_IsNull(p)) {
            /* no parameters: the function takes none, {} */
            if (empty == NULL &&
                (empty = cJSON_Parse("{\"type\":\"object\",\"properties\":{},"
                                     "\"additionalProperties\":false}")) == NULL) {
                rc = hy_err(err, HY_ENOMEM, "out of memory");
                break;
            }
            p = empty;
        }
        if (cJSON_GetObjectItemCaseSensitive(p, "type") == NULL) {
            /* {} and {"properties": ...} validate any value; arguments are
             * an object */
            cJSON_Delete(typed);
            if ((typed = cJSON_Duplicate(p, true)) == NULL ||
                cJSON_AddStringToObject(typed, "type", "object") == NULL) {
                rc = hy_err(err, HY_ENOMEM, "out of memory");
                break;
            }
            p = typed;
        }
        snprintf(rule, sizeof rule, "tc-fn-%d", i);
        snprintf(args, sizeof args, "tc-args-%d", i);
        snprintf(body, sizeof body, "\"{\\\"name\\\": \\\"%s\\\", \\\"%s\\\": \" %s \"}\"",
                 tool_name(t), key, args);
        if ((rc = hy_jsg_add_schema(g, args, p, err)) != HY_OK ||
            (rc = hy_jsg_add_rule(g, rule, body, err)) != HY_OK)
            break;
        hy_jbuf_cstr(&alt, alt.len ? " | " : "");
        hy_jbuf_cstr(&alt, rule);
        i++;
    }
    cJSON_Delete(empty);
    cJSON_Delete(typed);
    if (rc == HY_OK && alt.len == 0)
        rc = hy_err(err, HY_EINVAL, "tool_choice: no tool named '%s'", only ? only : "");
    if (rc == HY_OK && alt.failed)
        rc = hy_err(err, HY_ENOMEM, "out of memory");
    if (rc == HY_OK)
        rc = hy_jsg_add_rule(g, "tc-call", alt.data, err);
    hy_jbuf_free(&alt);
    return rc;
}

/* text (the calls' rules, with "tc-root" choosing them) with the content
 * grammar's rules appended under the prefix "rf-", and a root choosing
 * between the content and the calls. */
static int join_content(char **text, size_t *len, const char *content, size_t content_len,
                        char *err)
{
    char *pre = NULL, *joined;
    size_t pre_len = 0, n;
    int rc;

    if ((rc = hy_gbnf_prefix(content, content_len, "rf-", &pre, &pre_len, err)) != HY_OK)
        return rc;
    n = *len + pre_len + 64;
    if ((joined = malloc(n)) == NULL) {
        free(pre);
        return hy_err(err, HY_ENOMEM, "out of memory");
    }
    n = (size_t)snprintf(joined, n, "root ::= rf-root | tc-root\n%.*s\n%s\n", (int)*len, *text,
                         pre);
    free(pre);
    free(*text);
    *text = joined;
    *len = n;
    return HY_OK;
}

int hy_tc_grammar(const char *tools, hy_tc_syntax_t syn, hy_tool_choice_t choice,
                  const char *name, bool parallel, const char *content, size_t content_len,
                  char **spec, size_t *spec_len, char *err)
{
    cJSON *tj = cJSON_Parse(tools);
    hy_jsg_t *g = NULL;
    hy_gmatch_opts_t o;
    const char *marker = syn == HY_TC_LLAMA3 ? "{\"name\"" : "<tool_call>";
    char *text = NULL, root[64];
    size_t len = 0;
    int rc;

    *spec = NULL;
    *spec_len = 0;
    memset(&o, 0, sizeof o);
    if (tj == NULL) {
        rc = hy_err(err, HY_EINVAL, "tools: not JSON");
        goto done;
    }
    if ((rc = hy_jsg_create(&g)) != HY_OK) {
        rc = hy_err(err, rc, "out of memory");
        goto done;
    }
    if ((rc = add_calls(g, tj, syn, choice == HY_TOOL_CHOICE_NAMED ? name : NULL, err)) !=
        HY_OK)
        goto done;
    rc = hy_jsg_add_rule(g, "tc-block",
                         syn == HY_TC_LLAMA3 ? "tc-call"
                                             : "\"<tool_call>\\n\" tc-call \"\\n</tool_call>\"",
                         err);
    if (rc != HY_OK)
        goto done;
    /* auto: the lazy grammar re-arms after each call, so several calls
     * need nothing more; required: one, or up to HY_TC_MAX_PARALLEL when
     * parallel (a small model repeats a call until max_tokens otherwise) */
    /* a content grammar makes auto constrained from the first byte: one
     * answer, content or calls (parallel as required's) */
    if (choice != HY_TOOL_CHOICE_AUTO)
        content = NULL;
    snprintf(root, sizeof root, "tc-block (\"\\n\" tc-block){0,%d}", HY_TC_MAX_PARALLEL - 1);
    rc = hy_jsg_add_rule(g, content != NULL ? "tc-root" : "root",
                         parallel && (choice != HY_TOOL_CHOICE_AUTO || content != NULL)
                             ? root
                             : "tc-block",
                         err);
    if (rc != HY_OK || (rc = hy_jsg_text(g, &text, &len, err)) != HY_OK)
        goto done;
    if (content != NULL && (rc = join_content(&text, &len, content, content_len, err)) != HY_OK)
        goto done;
    {
        /* the schemas compiled alone; together they must still compile */
        hy_grammar_t *cg = NULL;

        rc = hy_grammar_compile(&cg, text, len, NULL, err);
        hy_grammar_unref(cg);
        if (rc != HY_OK)
            goto done;
    }
    if (choice == HY_TOOL_CHOICE_AUTO && content == NULL) {
        o.n_triggers = 1;
        o.triggers[0] = marker;
        o.trigger_len[0] = strlen(marker);
    }
    rc = hy_grammar_spec_pack(text, len, &o, spec, spec_len, err);
done:
    free(text);
    hy_jsg_free(g);
    cJSON_Delete(tj);
    return rc;
}
