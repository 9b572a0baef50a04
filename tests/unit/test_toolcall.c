/*
 * test_toolcall.c - tool calling without a server (toolcall.h): the output
 * parser on each syntax, whole and fed in pieces (every split point, byte
 * by byte), its events in streaming order, malformed and truncated calls
 * that must come back as content byte for byte; the syntax read off the
 * committed chat templates; the prompt side (the generic system message,
 * the call history written out, tool results as user turns, arguments
 * turned into objects for Hugging Face templates, rendered through real
 * templates); and the call grammar (a valid call matches, a call that
 * breaks the schema does not, auto is lazy on the marker).
 */
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/grammar_cache.h"
#include "server/toolcall.h"
#include "test.h"

/* ---- the parser ---- */

/* What a sink saw, in a flat log: "C<text>" content, "B<i>:<name>" begin,
 * "A<i>:<text>" args, "E<i>" end, "X<i>" abort; plus the collected result. */
typedef struct {
    hy_jbuf_t log;
    hy_tc_result_t res;
    bool args_before_begin;
} sink_t;

static int sink_fn(void *arg, const hy_tc_event_t *ev)
{
    sink_t *k = arg;

    switch (ev->kind) {
    case HY_TC_EV_CONTENT:
        break;
    case HY_TC_EV_CALL_BEGIN:
        hy_jbuf_printf(&k->log, "[B%d:%s]", ev->index, ev->name);
        break;
    case HY_TC_EV_CALL_ARGS:
        if ((size_t)ev->index >= k->res.n_calls)
            k->args_before_begin = true;
        break;
    case HY_TC_EV_CALL_END:
        hy_jbuf_printf(&k->log, "[E%d]", ev->index);
        break;
    case HY_TC_EV_CALL_ABORT:
        hy_jbuf_printf(&k->log, "[X%d]", ev->index);
        break;
    }
    return hy_tc_collect(&k->res, ev);
}

static void sink_free(sink_t *k)
{
    hy_jbuf_free(&k->log);
    hy_tc_result_free(&k->res);
}

/* Runs text through a parser in pieces of step bytes (0: whole), or split
 * once at split (when step < 0). */
static void run(hy_tc_syntax_t syn, const char *text, int step, size_t split, bool one,
                sink_t *k)
{
    hy_tc_stream_t s;
    size_t n = strlen(text), i;

    memset(k, 0, sizeof *k);
    hy_tc_stream_init(&s, syn, 42, one);
    if (step > 0) {
        for (i = 0; i < n; i += (size_t)step)
            hy_tc_stream_feed(&s, text + i, HY_MIN((size_t)step, n - i), sink_fn, k);
    } else if (step < 0) {
        hy_tc_stream_feed(&s, text, split, sink_fn, k);
        hy_tc_stream_feed(&s, text + split, n - split, sink_fn, k);
    } else {
        hy_tc_stream_feed(&s, text, n, sink_fn, k);
    }
    hy_tc_stream_end(&s, sink_fn, k);
    hy_tc_stream_free(&s);
}

static const char *content(const sink_t *k)
{
    return k->res.content.data ? k->res.content.data : "";
}

static const char *args(const sink_t *k, size_t i)
{
    return i < k->res.n_calls && k->res.calls[i].args.data ? k->res.calls[i].args.data : "";
}

/* The result of text is the same whole, byte by byte and at every split. */
static bool same_in_pieces(hy_tc_syntax_t syn, const char *text)
{
    sink_t a, b;
    size_t n = strlen(text), sp, i;
    bool ok = true;

    run(syn, text, 0, 0, false, &a);
    for (sp = 0; sp <= n + 1 && ok; sp++) {
        if (sp == n + 1)
            run(syn, text, 1, 0, false, &b);
        else
            run(syn, text, -1, sp, false, &b);
        ok = strcmp(content(&a), content(&b)) == 0 && a.res.n_calls == b.res.n_calls &&
             !b.args_before_begin;
        for (i = 0; ok && i < a.res.n_calls; i++)
            ok = strcmp(a.res.calls[i].name, b.res.calls[i].name) == 0 &&
                 strcmp(args(&a, i), args(&b, i)) == 0 &&
                 strcmp(a.res.calls[i].id, b.res.calls[i].id) == 0;
        if (!ok)
            printf("# split %zu: content '%s' vs '%s', %zu vs %zu calls\n", sp, content(&a),
                   content(&b), a.res.n_calls, b.res.n_calls);
        sink_free(&b);
    }
    sink_free(&a);
    return ok;
}

static void test_hermes(void)
{
    static const char one[] =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
        "\"q\": \"a}\\\"{\"}}\n</tool_call>";
    static const char two[] =
        "Let me check. <tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"b-2\", \"arguments\": {\"x\": [1, {\"y\": 2}]}}\n"
        "</tool_call> Done.";
    sink_t k;

    run(HY_TC_HERMES, one, 0, 0, false, &k);
    HY_T_OK(k.res.n_calls == 1 && strcmp(k.res.calls[0].name, "get_weather") == 0 &&
                strcmp(args(&k, 0), "{\"city\": \"Paris\", \"q\": \"a}\\\"{\"}") == 0 &&
                k.res.content.len == 0 && strncmp(k.res.calls[0].id, "call_", 5) == 0 &&
                strlen(k.res.calls[0].id) == HY_TC_ID_LEN &&
                strcmp(k.log.data, "[B0:get_weather][E0]") == 0,
            "hermes: one call, arguments as written (braces and quotes in strings), no content "
            "(%s, %s)", args(&k, 0), k.log.data);
    sink_free(&k);
    run(HY_TC_HERMES, two, 0, 0, false, &k);
    HY_T_OK(k.res.n_calls == 2 && strcmp(k.res.calls[1].name, "b-2") == 0 &&
                strcmp(args(&k, 0), "{}") == 0 &&
                strcmp(args(&k, 1), "{\"x\": [1, {\"y\": 2}]}") == 0 &&
                strcmp(content(&k), "Let me check. Done.") == 0 &&
                strcmp(k.res.calls[0].id, k.res.calls[1].id) != 0,
            "hermes: two calls between content; the whitespace around them goes ('%s')",
            content(&k));
    sink_free(&k);
    HY_T_OK(same_in_pieces(HY_TC_HERMES, one) && same_in_pieces(HY_TC_HERMES, two),
            "hermes: the same result fed whole, byte by byte and split at every offset; "
            "no arguments before their call's begin");

    run(HY_TC_HERMES, two, 0, 0, true, &k);
    HY_T_OK(k.res.n_calls == 1 && strcmp(content(&k), "Let me check.") == 0,
            "parallel_tool_calls false: the first call ends the answer");
    sink_free(&k);
}

static void test_other_shapes(void)
{
    sink_t k;

    run(HY_TC_LLAMA3, "{\"name\": \"f\", \"parameters\": {\"s\": \"}{\"}}", 0, 0, false, &k);
    HY_T_OK(k.res.n_calls == 1 && strcmp(k.res.calls[0].name, "f") == 0 &&
                strcmp(args(&k, 0), "{\"s\": \"}{\"}") == 0 && k.res.content.len == 0,
            "llama3: {\"name\", \"parameters\"} is a call");
    sink_free(&k);
    HY_T_OK(same_in_pieces(HY_TC_LLAMA3, "Sure: {\"name\": \"f\", \"parameters\": {\"a\": 1}}"),
            "llama3: fed in pieces, the same");

    run(HY_TC_HERMES,
        "<tool_call>[{\"name\": \"a\", \"arguments\": {\"k\": 1}}, {\"name\": \"b\", "
        "\"arguments\": {}}]</tool_call>",
        0, 0, false, &k);
    HY_T_OK(k.res.n_calls == 2 && strcmp(args(&k, 0), "{\"k\":1}") == 0 &&
                strcmp(k.res.calls[1].name, "b") == 0 && k.res.content.len == 0,
            "hermes: an array of calls in one block (SmolLM2's training form)");
    sink_free(&k);
    run(HY_TC_HERMES, "<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"f\"}</tool_call>", 0,
        0, false, &k);
    HY_T_OK(k.res.n_calls == 1 && strcmp(args(&k, 0), "{\"a\":1}") == 0,
            "hermes: arguments before the name");
    sink_free(&k);
    run(HY_TC_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
        0, 0, false, &k);
    HY_T_OK(k.res.n_calls == 1 && strcmp(args(&k, 0), "{\"a\": 1}") == 0,
            "hermes: arguments as a JSON string");
    sink_free(&k);
    run(HY_TC_HERMES, "<tool_call>{\"name\": \"now\"}</tool_call>", 0, 0, false, &k);
    HY_T_OK(k.res.n_calls == 1 && strcmp(args(&k, 0), "{}") == 0,
            "hermes: a call without arguments has {}");
    sink_free(&k);
    HY_T_OK(same_in_pieces(HY_TC_HERMES, "a <tool_call>{\"arguments\": {\"s\": \"</tool_\"}, "
                                         "\"name\": \"f\"} </tool_call> b <tool_call>[{\"name\": "
                                         "\"g\"}]</tool_call>"),
            "the whole-call path fed in pieces: the same");
    run(HY_TC_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}", 0, 0, false,
        &k);
    HY_T_OK(k.res.n_calls == 1 && strcmp(args(&k, 0), "{\"a\": 1}") == 0 &&
                k.res.content.len == 0,
            "hermes: the answer ends without </tool_call>: still the call");
    sink_free(&k);
}

/* Text that is not a call comes back as content, byte for byte. */
static void test_malformed(void)
{
    static const char *const texts[] = {
        "a < b and <tool is not a tag",
        "x <tool_call>{\"name\": \"f\", oops}</tool_call> y",
        "<tool_call>{\"name\": \"bad name!\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": 5}</tool_call> tail",
        "  <tool_call>not json at all</tool_call>",
        "<tool_call>\n{\"na",
        "text then <tool_",
        "<tool_call>[]</tool_call>",
        "{\"name\": 3}",
    };
    size_t i;
    bool ok = true;

    for (i = 0; i < sizeof texts / sizeof *texts; i++) {
        sink_t k;

        run(i == 8 ? HY_TC_LLAMA3 : HY_TC_HERMES, texts[i], 0, 0, false, &k);
        if (k.res.n_calls != 0 || strcmp(content(&k), texts[i]) != 0) {
            printf("# '%s' -> '%s' + %zu calls\n", texts[i], content(&k), k.res.n_calls);
            ok = false;
        }
        sink_free(&k);
        ok = ok && same_in_pieces(i == 8 ? HY_TC_LLAMA3 : HY_TC_HERMES, texts[i]);
    }
    HY_T_OK(ok, "malformed calls, a bad name, non-object arguments, a cut head, a marker "
                "prefix at the end: all content, byte for byte, in any pieces");
}

static void test_truncated(void)
{
    static const char text[] =
        "Hi <tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Par";
    sink_t k;

    run(HY_TC_HERMES, text, 0, 0, false, &k);
    HY_T_OK(k.res.n_calls == 0 && strcmp(content(&k), text) == 0 &&
                strcmp(k.log.data, "[B0:f][X0]") == 0,
            "a call cut in its arguments: streamed as begun then aborted, collected as "
            "content byte for byte ('%s', %s)", content(&k), k.log.data);
    sink_free(&k);
}

/* ---- syntax and prompt ---- */

static char *read_text(const char *rel, size_t *n)
{
    return (char *)hy_t_read_all(hy_t_srcpath(rel), n);
}

static void test_detect(void)
{
    static const struct {
        const char *file;
        hy_tc_syntax_t syn;
    } k[] = {
        {"tests/unit/chat/qwen2.5.jinja", HY_TC_HERMES},
        {"tests/unit/chat/qwen3.jinja", HY_TC_HERMES},
        {"tests/unit/chat/llama3.1.jinja", HY_TC_LLAMA3},
        {"tests/unit/chat/llama3.2.jinja", HY_TC_LLAMA3},
        {"tests/unit/chat/smollm2.jinja", HY_TC_GENERIC},
        {"tests/unit/chat/gemma3.jinja", HY_TC_GENERIC},
    };
    size_t i, n;
    bool ok = true;

    for (i = 0; i < sizeof k / sizeof *k; i++) {
        char *src = read_text(k[i].file, &n);

        if (src == NULL || hy_tc_detect(src, n) != k[i].syn) {
            printf("# %s: %s\n", k[i].file, src ? hy_tc_syntax_name(hy_tc_detect(src, n))
                                                : "missing");
            ok = false;
        }
        free(src);
    }
    HY_T_OK(ok, "syntax from the template: qwen hermes, llama 3 json, smollm2/gemma3 generic");
}

static const char k_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
    "\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\",\"unit\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]";

static const hy_chat_msg_t k_history[] = {
    {.role = "user", .content = "Weather in Paris?"},
    {.role = "assistant",
     .content = "",
     .tool_calls = "[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
                   "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\",\\\"unit\\\":"
                   "\\\"c\\\"}\"}},{\"id\":\"call_2\",\"type\":\"function\",\"function\":{"
                   "\"name\":\"now\",\"arguments\":\"{}\"}}]"},
    {.role = "tool", .content = "{\"t\":18}", .tool_call_id = "call_1"},
    {.role = "tool", .content = "12:00", .tool_call_id = "call_2"},
};

/* Llama 3.1's template takes one call per assistant turn. */
static const hy_chat_msg_t k_history1[] = {
    {.role = "user", .content = "Weather in Paris?"},
    {.role = "assistant",
     .content = "",
     .tool_calls = "[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
                   "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\",\\\"unit\\\":"
                   "\\\"c\\\"}\"}}]"},
    {.role = "tool", .content = "{\"t\":18}", .tool_call_id = "call_1"},
};

static int render(const char *file, hy_tc_syntax_t syn, const char *tools, char **out)
{
    hy_chat_tmpl_t *t = NULL;
    hy_chat_msg_t *m;
    hy_chat_opts_t o = {.add_generation_prompt = true, .enable_thinking = -1, .now = 1};
    hy_tc_store_t *st = NULL;
    size_t n, len;
    char err[HY_ERR_LEN], *src = read_text(file, &n);
    int rc = src == NULL ? HY_EIO : hy_chat_compile(&t, src, n, err);

    if (rc == HY_OK)
        rc = syn == HY_TC_LLAMA3
                 ? hy_tc_prepare_chat(syn, k_history1, 3, tools, &m, &n, &o.tools, &st, err)
                 : hy_tc_prepare_chat(syn, k_history, 4, tools, &m, &n, &o.tools, &st, err);
    if (rc == HY_OK)
        rc = hy_chat_render(t, m, n, &o, out, &len, err);
    if (rc != HY_OK)
        printf("# %s: %s\n", file, err);
    hy_tc_store_free(st);
    hy_chat_free(t);
    free(src);
    return rc;
}

static void test_prompt(void)
{
    hy_chat_msg_t *m;
    hy_tc_store_t *st = NULL;
    const char *tools_out = "x";
    size_t n = 0;
    char err[HY_ERR_LEN], *out = NULL;
    int rc;

    rc = hy_tc_prepare_chat(HY_TC_GENERIC, k_history, 4, k_tools, &m, &n, &tools_out, &st, err);
    HY_T_OK(rc == HY_OK && n == 4 && tools_out == NULL && strcmp(m[0].role, "system") == 0 &&
                strstr(m[0].content, "<tools>\n{\"name\":\"get_weather\"") != NULL &&
                strstr(m[0].content, "{\"name\":\"now\"}\n</tools>") != NULL &&
                m[2].tool_calls == NULL &&
                strcmp(m[2].content,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                       "{\"city\":\"Paris\",\"unit\":\"c\"}}\n</tool_call>\n<tool_call>\n"
                       "{\"name\": \"now\", \"arguments\": {}}\n</tool_call>") == 0 &&
                strcmp(m[3].role, "user") == 0 &&
                strcmp(m[3].content, "<tool_response>\n{\"t\":18}\n</tool_response>\n"
                                     "<tool_response>\n12:00\n</tool_response>") == 0,
            "generic: tools in a new system message, calls written into the assistant turn, "
            "the two results one user turn");
    hy_tc_store_free(st);
    st = NULL;
    rc = hy_tc_prepare_chat(HY_TC_HERMES, k_history, 4, k_tools, &m, &n, &tools_out, &st, err);
    HY_T_OK(rc == HY_OK && n == 4 && tools_out == k_tools &&
                strstr(m[1].tool_calls, "\"arguments\":{\"city\":\"Paris\",\"unit\":\"c\"}") &&
                strcmp(m[2].role, "tool") == 0,
            "hermes: the messages as given, arguments strings turned into objects");
    hy_tc_store_free(st);

    rc = render("tests/unit/chat/qwen2.5.jinja", HY_TC_HERMES, k_tools, &out);
    HY_T_OK(rc == HY_OK && strstr(out, "\"name\": \"get_weather\"") != NULL &&
                strstr(out, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                            "{\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>") != NULL &&
                strstr(out, "<tool_response>\n{\"t\":18}\n</tool_response>") != NULL,
            "qwen2.5's template renders the tools, the call history with object arguments and "
            "the results");
    free(out);
    out = NULL;
    rc = render("tests/unit/chat/llama3.1.jinja", HY_TC_LLAMA3, k_tools, &out);
    HY_T_OK(rc == HY_OK && strstr(out, "\"name\": \"get_weather\"") != NULL &&
                strstr(out, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"") &&
                strstr(out, "<|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"t\\\":18}\"") != NULL,
            "llama3.1's template renders the tools, the call and the result (an ipython turn; a "
            "string is iterable, so the template writes it with tojson, as in transformers)");
    free(out);
    out = NULL;
    rc = render("tests/unit/chat/smollm2.jinja", HY_TC_GENERIC, k_tools, &out);
    HY_T_OK(rc == HY_OK && strstr(out, "<|im_start|>system\nYou can call functions.") &&
                strstr(out, "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\"") &&
                strstr(out, "<|im_start|>user\n<tool_response>\n{\"t\":18}"),
            "smollm2's template (no tools of its own): the generic rendering");
    free(out);
    out = NULL;
    rc = render("tests/unit/chat/gemma3.jinja", HY_TC_GENERIC, k_tools, &out);
    HY_T_OK(rc == HY_OK && strstr(out, "<start_of_turn>user\nYou can call functions.") &&
                strstr(out, "<start_of_turn>model\n<tool_call>\n{\"name\": \"get_weather\"") &&
                strstr(out, "<start_of_turn>user\n<tool_response>\n{\"t\":18}"),
            "gemma3's template (roles must alternate): tools with the first user turn, the "
            "results as one user turn");
    free(out);
}

/* ---- the grammar ---- */

static bool matches(const char *spec, size_t spec_len, const char *text, bool *lazy)
{
    const char *gbnf;
    size_t glen;
    hy_gmatch_opts_t o;
    hy_grammar_t *g = NULL;
    hy_gmatch_t *m = NULL;
    char err[HY_ERR_LEN];
    bool ok;

    if (hy_grammar_spec_unpack(spec, spec_len, &gbnf, &glen, &o, err) != HY_OK ||
        hy_grammar_compile(&g, gbnf, glen, NULL, err) != HY_OK ||
        hy_gmatch_create(&m, g, &o, err) != HY_OK) {
        printf("# %s\n", err);
        hy_grammar_unref(g);
        return false;
    }
    *lazy = o.n_triggers > 0;
    ok = hy_gmatch_accept_bytes(m, text, strlen(text), err) == HY_OK && hy_gmatch_can_end(m);
    hy_gmatch_free(m);
    hy_grammar_unref(g);
    return ok;
}

static void test_grammar(void)
{
    static const char call[] = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                               "{\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>";
    char *spec = NULL, err[HY_ERR_LEN];
    size_t len;
    bool lazy = true, ok;

    ok = hy_tc_grammar(k_tools, HY_TC_HERMES, HY_TOOL_CHOICE_REQUIRED, NULL, true, NULL, 0, &spec, &len,
                       err) == HY_OK;
    HY_T_OK(ok && matches(spec, len, call, &lazy) && !lazy &&
                matches(spec, len,
                        "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                        "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
                        &lazy) &&
                !matches(spec, len,
                         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                         "{\"city\": \"Paris\", \"unit\": \"k\"}}\n</tool_call>",
                         &lazy) &&
                !matches(spec, len, "Sure!", &lazy) &&
                !matches(spec, len,
                         "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
                         &lazy),
            "required: a valid call and two parallel calls match; a bad enum value, text, an "
            "unknown function do not");
    free(spec);
    ok = hy_tc_grammar(k_tools, HY_TC_HERMES, HY_TOOL_CHOICE_NAMED, "now", false, NULL, 0, &spec, &len,
                       err) == HY_OK;
    HY_T_OK(ok && !matches(spec, len, call, &lazy) &&
                matches(spec, len, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n"
                                   "</tool_call>", &lazy) &&
                !matches(spec, len, "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"a\": 1}}"
                                    "\n</tool_call>", &lazy),
            "named: only that function; no parameters means {} exactly");
    free(spec);
    ok = hy_tc_grammar(k_tools, HY_TC_HERMES, HY_TOOL_CHOICE_AUTO, NULL, true, NULL, 0, &spec, &len,
                       err) == HY_OK;
    HY_T_OK(ok && matches(spec, len, "Some text first, then ", &lazy) && lazy &&
                matches(spec, len, "Let me see. <tool_call>\n{\"name\": \"now\", \"arguments\": "
                                   "{}}\n</tool_call> done", &lazy) &&
                !matches(spec, len, "x <tool_call>\n{\"name\": \"now\", \"arguments\": 5}", &lazy),
            "auto: lazy on <tool_call>: free text, then a constrained call, free again");
    free(spec);
    ok = hy_tc_grammar(k_tools, HY_TC_LLAMA3, HY_TOOL_CHOICE_REQUIRED, NULL, false, NULL, 0, &spec, &len,
                       err) == HY_OK;
    HY_T_OK(ok && matches(spec, len, "{\"name\": \"get_weather\", \"parameters\": {\"city\": "
                                     "\"Rome\", \"unit\": \"f\"}}", &lazy),
            "llama3: {\"name\", \"parameters\"}");
    free(spec);
    ok = hy_tc_grammar("[{\"type\":\"function\",\"function\":{\"name\":\"u\",\"parameters\":{}}}]",
                       HY_TC_HERMES, HY_TOOL_CHOICE_REQUIRED, NULL, false, NULL, 0, &spec, &len,
                       err) == HY_OK;
    HY_T_OK(ok && matches(spec, len, "<tool_call>\n{\"name\": \"u\", \"arguments\": {\"k\": [1]}}"
                                     "\n</tool_call>", &lazy) &&
                !matches(spec, len, "<tool_call>\n{\"name\": \"u\", \"arguments\": 5}\n"
                                    "</tool_call>", &lazy),
            "parameters {} (no type): any object, but an object");
    free(spec);
    {
        /* a response_format's grammar (rule names that clash with the
         * calls' on purpose) joins auto: content of that shape, or calls */
        static const char content[] =
            "root ::= \"{\\\"answer\\\": \" tc-call \"}\"\ntc-call ::= [0-9]{1,3} # digits\n";

        ok = hy_tc_grammar(k_tools, HY_TC_HERMES, HY_TOOL_CHOICE_AUTO, NULL, true, content,
                           strlen(content), &spec, &len, err) == HY_OK;
        HY_T_OK(ok && matches(spec, len, "{\"answer\": 42}", &lazy) && !lazy &&
                    matches(spec, len, call, &lazy) &&
                    matches(spec, len,
                            "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                            "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
                            &lazy) &&
                    !matches(spec, len, "Sure! {\"answer\": 42}", &lazy) &&
                    !matches(spec, len, "{\"answer\": 4200}", &lazy) &&
                    !matches(spec, len, "{\"answer\": 42} <tool_call>", &lazy),
                "auto with a response_format: the content's shape or calls, from the first "
                "byte; free text, content off its grammar, both together do not (%s)",
                ok ? "" : err);
        free(spec);
        ok = hy_tc_grammar(k_tools, HY_TC_HERMES, HY_TOOL_CHOICE_REQUIRED, NULL, false, content,
                           strlen(content), &spec, &len, err) == HY_OK;
        HY_T_OK(ok && matches(spec, len, call, &lazy) &&
                    !matches(spec, len, "{\"answer\": 42}", &lazy),
                "required with a response_format: calls only");
        free(spec);
    }
    HY_T_OK(hy_tc_grammar(k_tools, HY_TC_HERMES, HY_TOOL_CHOICE_NAMED, "missing", false, NULL,
                          0, &spec, &len, err) == HY_EINVAL &&
                strcmp(err, "tool_choice: no tool named 'missing'") == 0,
            "named: an unknown function is an error (%s)", err);
}

int main(void)
{
    test_hermes();
    test_other_shapes();
    test_malformed();
    test_truncated();
    test_detect();
    test_prompt();
    test_grammar();
    return hy_t_done();
}
