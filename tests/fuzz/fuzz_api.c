/*
 * fuzz_api.c - fuzz target for the OpenAI request layer: every input is
 * parsed as each endpoint's body (chat, completions, infer, generate,
 * tokenize, detokenize); accepted requests are walked field by field and a
 * stop matcher is fed the prompt text, so a validation gap shows up as a
 * sanitizer report.  Two builds from one file:
 *
 *   libFuzzer (needs clang), from the source tree:
 *     clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -Isrc \
 *         -I/usr/include/cjson tests/fuzz/fuzz_api.c src/server/api.c \
 *         src/server/sse.c src/server/stop.c src/server/json_out.c \
 *         src/ipc/request.c src/common/hy.c src/server/api_grammar.c \
 *         src/grammar/{gbnf,grammar_build,grammar_match,grammar_mask,gtext,regex}.c \
 *         src/grammar/json_schema{,_types}.c src/model/unicode{,_data}.c \
 *         -lcjson -lm -o fuzz_api
 *     (response_format, grammar and json_schema are compiled to check them,
 *     so the JSON Schema translator and the GBNF compiler are fuzzed too)
 *     ./fuzz_api -max_len=4096 corpus_dir/
 *
 *   standalone (-DHY_FUZZ_STANDALONE, what `make check` runs as
 *   tests/fuzz/fuzz_api_replay): the seed corpus tests/fuzz/corpus/api
 *   (each file must be accepted by some endpoint), then a fixed-seed
 *   mutation loop over built-in seed bodies, HY_FUZZ_ITERS iterations
 *   (default 20000): the mutants must land on both sides (accepted and
 *   rejected), and every rejection must make an OpenAI error body.  Bounded
 *   and deterministic; tests/integration/test_fuzz_api.sh runs the real
 *   libFuzzer build for a bounded time.
 */
#include "server/api.h"
#include "server/sse.h"
#include "server/stop.h"
#include "server/toolcall.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile size_t g_sink;
/* what the standalone run checks: inputs some parser accepted, and
 * rejections whose OpenAI error body could not be made */
static size_t g_accepted, g_no_error_body;

static void walk(const hy_api_req_t *r)
{
    size_t i, j;
    hy_stop_t st;
    hy_stop_out_t o;
    hy_jbuf_t b;
    hy_api_error_t e;

    for (i = 0; i < r->n_prompts; i++) {
        if (r->prompts[i].text != NULL)
            g_sink += strlen(r->prompts[i].text) + r->prompts[i].text_len;
        for (j = 0; j < r->prompts[i].n_tokens; j++)
            g_sink += (size_t)r->prompts[i].tokens[j];
    }
    for (i = 0; i < r->n_messages; i++) {
        const hy_chat_msg_t *m = &r->messages[i];

        g_sink += strlen(m->role) + (m->content ? strlen(m->content) : 0) +
                  (m->name ? strlen(m->name) : 0) + (m->tool_calls ? strlen(m->tool_calls) : 0) +
                  (m->tool_call_id ? strlen(m->tool_call_id) : 0);
    }
    g_sink += r->tools ? strlen(r->tools) : 0;
    g_sink += (size_t)r->tool_choice + (r->tool_name ? strlen(r->tool_name) : 0);
    g_sink += r->template_kwargs ? strlen(r->template_kwargs) : 0;
    g_sink += r->grammar ? strlen(r->grammar) + r->grammar_len : 0;
    g_sink += hy_api_check_vocab(r, 1000, &e) == HY_OK;
    /* Feed the prompt text through the stop matcher in 3-byte pieces and
     * print it as an SSE delta: exercises both on arbitrary bytes. */
    if (hy_stop_init(&st, r->stop, r->stop_len, r->n_stop, r->include_stop_str_in_output,
                     NULL) == HY_OK) {
        hy_api_resp_t m = {r->kind, "id", 0, r->model, NULL, false, r->include_usage};

        hy_jbuf_init(&b);
        for (i = 0; i < r->n_prompts; i++) {
            const char *t = r->prompts[i].text;
            size_t n = t ? r->prompts[i].text_len : 0;

            for (j = 0; j < n && !st.matched; j += 3) {
                if (hy_stop_feed(&st, t + j, HY_MIN(3, n - j), &o) != HY_OK)
                    break;
                hy_sse_delta(&b, &m, 0, o.emit, o.emit_len, NULL, 0, 0);
            }
        }
        hy_stop_flush(&st, &o);
        g_sink += o.emit_len + b.len;
        hy_jbuf_free(&b);
        hy_stop_free(&st);
    }
    /* The tool-call parser on the prompts and message texts, as model
     * output in 5-byte pieces, under both marker syntaxes. */
    for (i = 0; i < r->n_prompts + r->n_messages; i++) {
        const char *t = i < r->n_prompts ? r->prompts[i].text : r->messages[i - r->n_prompts].content;
        size_t n = t == NULL ? 0 : i < r->n_prompts ? r->prompts[i].text_len : strlen(t);
        hy_tc_result_t res;
        hy_tc_stream_t ts;

        memset(&res, 0, sizeof res);
        hy_tc_stream_init(&ts, i % 2 ? HY_TC_LLAMA3 : HY_TC_HERMES, i, false);
        for (j = 0; j < n; j += 5)
            hy_tc_stream_feed(&ts, t + j, HY_MIN(5, n - j), hy_tc_collect, &res);
        hy_tc_stream_end(&ts, hy_tc_collect, &res);
        g_sink += res.content.len + res.n_calls;
        hy_tc_stream_free(&ts);
        hy_tc_result_free(&res);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const hy_api_kind_t kinds[] = {HY_API_CHAT, HY_API_COMPLETIONS, HY_API_INFER,
                                          HY_API_GENERATE};
    hy_api_req_t *r;
    hy_api_tok_req_t *t;
    hy_api_error_t e;
    char *s;
    size_t k;
    bool accepted = false;

    for (k = 0; k < HY_ARRAY_LEN(kinds); k++) {
        if (hy_api_parse(kinds[k], (const char *)data, size, &r, &e) == HY_OK) {
            walk(r);
            hy_api_req_free(r);
            accepted = true;
        } else if (hy_api_error_to_json(&e, &s) == HY_OK && strstr(s, "\"message\"")) {
            g_sink += strlen(s);
            free(s);
        } else {
            g_no_error_body++;
        }
    }
    if (hy_api_parse_tokenize((const char *)data, size, &t, &e) == HY_OK) {
        g_sink += t->text_len;
        hy_api_tok_req_free(t);
        accepted = true;
    }
    if (hy_api_parse_detokenize((const char *)data, size, &t, &e) == HY_OK) {
        g_sink += t->n_tokens;
        hy_api_tok_req_free(t);
        accepted = true;
    }
    g_accepted += accepted;
    return 0;
}

#ifdef HY_FUZZ_STANDALONE
#include <dirent.h>

#include "../unit/test.h"
#include "mutate.h"

static const char *const k_seeds[] = {
    "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\","
    "\"content\":[{\"type\":\"text\",\"text\":\"a\"}]},{\"role\":\"assistant\",\"content\":null,"
    "\"tool_calls\":[{\"id\":\"1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"content\":\"x\",\"tool_call_id\":\"1\"}],"
    "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":5,\"stop\":[\"\\n\",\"ab\"],\"seed\":\"7\","
    "\"logit_bias\":{\"3\":1},\"logprobs\":true,\"top_logprobs\":2,\"n\":2,\"stream\":true,"
    "\"stream_options\":{\"include_usage\":true},\"tools\":[{\"type\":\"function\",\"function\":"
    "{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
    "\"string\"}}}}}],\"tool_choice\":\"required\",\"parallel_tool_calls\":false,"
    "\"chat_template_kwargs\":{\"enable_thinking\":true}}",
    "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x <tool_call>\\n{\\\"name\\\": "
    "\\\"f\\\", \\\"arguments\\\": {\\\"a\\\": 1}}\\n</tool_call> y\"}],\"functions\":[{\"name\":\"f\"}],"
    "\"function_call\":{\"name\":\"f\"}}",
    "{\"model\":\"m\",\"prompt\":\"hello world ab cd\",\"max_tokens\":5,\"stop\":\"cd\",\"echo\":true,"
    "\"logprobs\":3,\"include_stop_str_in_output\":true}",
    "{\"model\":\"m\",\"prompt\":[[1,2,3],[4,5]],\"n\":3,\"best_of\":3,\"min_p\":0.1}",
    "{\"model\":\"m\",\"prompt\":[\"a\\u00e9\\ud83d\\ude00\",\"b\"],\"repetition_penalty\":1.2}",
    "{\"input\":\"x\",\"max_tokens\":3}",
    "{\"prompt\":\"caf\\u00e9!\",\"max_length\":9,\"stop\":[\"\\u00e9!\"]}",
    "{\"prompt\":\"tok\",\"add_special\":false}",
    "{\"tokens\":[1,2,3]}",
};

/* One random edit: flip, insert a JSON-significant byte, delete, or splice. */
static size_t mutate(uint8_t *buf, size_t n, size_t cap)
{
    static const char tokens[] = "{}[]\",:\\0123456789.-eEtrufalsn \x00\xC3\xA9\xFF";
    size_t pos;

    switch (hy_fz_rnd() % 5) {
    case 0:
        return hy_fz_flip(buf, n);
    case 1:
    case 2:
        if (n < cap) {
            pos = n ? (size_t)(hy_fz_rnd() % n) : 0;
            memmove(buf + pos + 1, buf + pos, n - pos);
            buf[pos] = (uint8_t)tokens[hy_fz_rnd() % (sizeof tokens - 1)];
            n++;
        }
        return n;
    case 3:
        return hy_fz_delete(buf, n, 8);
    default: /* grows nesting and repeats keys */
        return hy_fz_dup_slice(buf, n, cap, 32);
    }
}

/* Adds each regular file of dir (up to 4 KiB) as one more input. */
static size_t run_dir(const char *dir)
{
    char path[4096];
    uint8_t buf[4096];
    struct dirent *d;
    size_t count = 0, n;
    DIR *dp = opendir(dir);
    FILE *f;

    if (dp == NULL)
        return 0;
    while ((d = readdir(dp)) != NULL) {
        if (d->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, d->d_name);
        f = fopen(path, "rb");
        if (f == NULL)
            continue;
        n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
        count++;
    }
    closedir(dp);
    return count;
}

int main(int argc, char **argv)
{
    enum { CAP = 8192 };
    static uint8_t buf[CAP];
    const char *env = getenv("HY_FUZZ_ITERS");
    long iters = env ? strtol(env, NULL, 10) : 20000, i;
    size_t n = 0, files = 0, accepted;
    int a, m;

    if (argc > 1)
        for (a = 1; a < argc; a++)
            files += run_dir(argv[a]);
    else
        files = run_dir(hy_t_srcpath("tests/fuzz/corpus/api"));
    HY_T_OK(files >= 10 && g_accepted == files && g_no_error_body == 0,
            "seed corpus: %zu files, %zu accepted by an endpoint", files, g_accepted);
    g_accepted = 0;
    for (i = 0; i < iters; i++) {
        /* Restart from a seed every 64 steps so edits stay near valid JSON. */
        if (i % 64 == 0) {
            const char *s = k_seeds[(size_t)(i / 64) % HY_ARRAY_LEN(k_seeds)];

            n = strlen(s);
            memcpy(buf, s, n);
        }
        for (m = 1 + (int)(hy_fz_rnd() % 3); m > 0; m--)
            n = mutate(buf, n, CAP);
        LLVMFuzzerTestOneInput(buf, n);
    }
    accepted = g_accepted;
    HY_T_OK(accepted > 0 && accepted < (size_t)iters,
            "%ld mutated bodies: %zu accepted, %zu rejected, no crash", iters, accepted,
            (size_t)iters - accepted);
    HY_T_OK(g_no_error_body == 0, "every rejection made an OpenAI error body (%zu did not)",
            g_no_error_body);
    return hy_t_done();
}
#endif
