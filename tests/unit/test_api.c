/*
 * test_api.c - the OpenAI request/response layer against hand-written
 * expectations: every field's wrong-type and out-of-range message and
 * param, malformed and hostile JSON, the unknown-field rule, response and
 * SSE bytes compared with goldens written from OpenAI's documented shapes
 * (and re-parsed with cJSON to check the key sets), and the stop matcher
 * across chunk boundaries and UTF-8 characters.
 */
#include "server/api.h"
#include "server/sse.h"
#include "server/stop.h"
#include "test.h"

#include <math.h>
#include <string.h>

#include <cjson/cJSON.h>

/* ---- helpers ---- */

static int parse(hy_api_kind_t k, const char *body, hy_api_req_t **r, hy_api_error_t *e)
{
    return hy_api_parse(k, body, strlen(body), r, e);
}

/* Parses body expecting failure with exactly (status, message, param). */
static int expect_err(hy_api_kind_t k, const char *body, int status, const char *msg,
                      const char *param)
{
    hy_api_req_t *r = NULL;
    hy_api_error_t e;
    int rc = parse(k, body, &r, &e), ok;

    if (rc == HY_OK) {
        printf("# unexpectedly accepted: %s\n", body);
        hy_api_req_free(r);
        return 0;
    }
    ok = r == NULL && e.status == status && strcmp(e.message, msg) == 0 &&
         strcmp(e.param, param ? param : "") == 0;
    if (!ok)
        printf("# body %s\n#  got %d [%s] param [%s]\n# want %d [%s] param [%s]\n", body,
               e.status, e.message, e.param, status, msg, param ? param : "");
    return ok;
}

typedef struct {
    hy_api_kind_t kind;
    const char *body;
    const char *message;
    const char *param;
} err_case_t;

#define CH HY_API_CHAT
#define CO HY_API_COMPLETIONS
#define M "\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define P "\"model\":\"m\",\"prompt\":\"hi\""
#define TOOLS_F "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]"
#define X64 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
#define X1024 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64
#define X1025 X1024 "x"

static const err_case_t k_type_cases[] = {
    {CH, "{" M ",\"temperature\":\"0.5\"}", "temperature: expected a number, got a string", "temperature"},
    {CH, "{" M ",\"top_p\":true}", "top_p: expected a number, got a boolean", "top_p"},
    {CH, "{" M ",\"min_p\":[]}", "min_p: expected a number, got an array", "min_p"},
    {CH, "{" M ",\"top_k\":\"5\"}", "top_k: expected an integer, got a string", "top_k"},
    {CH, "{" M ",\"top_k\":2.5}", "top_k = 2.5: must be an integer", "top_k"},
    {CH, "{" M ",\"presence_penalty\":{}}", "presence_penalty: expected a number, got an object", "presence_penalty"},
    {CH, "{" M ",\"frequency_penalty\":\"x\"}", "frequency_penalty: expected a number, got a string", "frequency_penalty"},
    {CH, "{" M ",\"repetition_penalty\":false}", "repetition_penalty: expected a number, got a boolean", "repetition_penalty"},
    {CH, "{" M ",\"seed\":true}", "seed: expected an integer, got a boolean", "seed"},
    {CH, "{" M ",\"seed\":1.5}", "seed = 1.5: must be an integer", "seed"},
    {CH, "{" M ",\"seed\":\"12x\"}", "seed = '12x': must be a decimal 64-bit integer", "seed"},
    {CH, "{" M ",\"max_tokens\":\"10\"}", "max_tokens: expected an integer, got a string", "max_tokens"},
    {CH, "{" M ",\"max_completion_tokens\":1.5}", "max_completion_tokens = 1.5: must be an integer", "max_completion_tokens"},
    {CH, "{" M ",\"n\":\"2\"}", "n: expected an integer, got a string", "n"},
    {CH, "{" M ",\"stream\":\"yes\"}", "stream: expected a boolean, got a string", "stream"},
    {CH, "{" M ",\"stream\":true,\"stream_options\":{\"include_usage\":1}}", "stream_options.include_usage: expected a boolean, got a number", "stream_options"},
    {CH, "{" M ",\"stream_options\":[]}", "stream_options: expected an object, got an array", "stream_options"},
    {CH, "{" M ",\"stop\":5}", "stop: expected a string or an array of strings, got a number", "stop"},
    {CH, "{" M ",\"stop\":[\"a\",3]}", "stop[1]: expected a string, got a number", "stop"},
    {CH, "{" M ",\"logit_bias\":[1]}", "logit_bias: expected an object mapping token ids to numbers, got an array", "logit_bias"},
    {CH, "{" M ",\"logit_bias\":{\"abc\":1}}", "logit_bias: key 'abc' is not a token id", "logit_bias"},
    {CH, "{" M ",\"logit_bias\":{\"12\":\"1\"}}", "logit_bias[12]: expected a number, got a string", "logit_bias"},
    {CH, "{" M ",\"logprobs\":1}", "logprobs: expected a boolean, got a number", "logprobs"},
    {CH, "{" M ",\"logprobs\":true,\"top_logprobs\":\"3\"}", "top_logprobs: expected an integer, got a string", "top_logprobs"},
    {CO, "{" P ",\"logprobs\":true}", "logprobs: expected an integer (number of alternatives, 0..5), got a boolean", "logprobs"},
    {CH, "{" M ",\"user\":5}", "user: expected a string, got a number", "user"},
    {CO, "{" P ",\"echo\":1}", "echo: expected a boolean, got a number", "echo"},
    {CH, "{" M ",\"ignore_eos\":\"true\"}", "ignore_eos: expected a boolean, got a string", "ignore_eos"},
    {CH, "{" M ",\"response_format\":\"text\"}", "response_format: expected an object, got a string", "response_format"},
    {CH, "{" M ",\"chat_template_kwargs\":[]}", "chat_template_kwargs: expected an object, got an array", "chat_template_kwargs"},
    {CH, "{" M ",\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}}", "chat_template_kwargs.enable_thinking: expected a boolean, got a string", "chat_template_kwargs"},
    {CH, "{\"model\":5," "\"messages\":[]}", "model: expected a string, got a number", "model"},
    {CH, "{\"model\":\"m\",\"messages\":{}}", "messages: expected an array, got an object", "messages"},
    {CH, "{\"model\":\"m\",\"messages\":[\"hi\"]}", "messages[0]: expected an object, got a string", "messages[0]"},
    {CH, "{\"model\":\"m\",\"messages\":[{\"role\":1,\"content\":\"x\"}]}", "messages[0].role: expected a string, got a number", "messages[0].role"},
    {CH, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":7}]}", "messages[0].content: expected a string or an array of content parts, got a number", "messages[0].content"},
    {CH, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}", "messages[0].content[0].text: expected a string, got a number", "messages[0].content[0]"},
    {CH, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":1}]}", "messages[0].name: expected a string, got a number", "messages[0].name"},
    {CH, "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}", "messages[0].tool_calls: expected an array, got an object", "messages[0].tool_calls"},
    {CO, "{\"model\":\"m\",\"prompt\":5}", "prompt: expected a string, an array of strings, an array of token ids or an array of token-id arrays, got a number", "prompt"},
    {CO, "{\"model\":\"m\",\"prompt\":[\"a\",1]}", "prompt[1]: expected a string, got a number", "prompt"},
    {CO, "{\"model\":\"m\",\"prompt\":[1,\"a\"]}", "prompt[1]: expected an integer, got a string", "prompt"},
    {CO, "{\"model\":\"m\",\"prompt\":[[1],[2.5]]}", "prompt[1][0] = 2.5: must be an integer", "prompt"},
    {HY_API_INFER, "{\"input\":[1,2]}", "input: expected a string, got an array", "input"},
    {HY_API_GENERATE, "{\"prompt\":\"x\",\"max_length\":\"5\"}", "max_length: expected an integer, got a string", "max_length"},
};

static const err_case_t k_range_cases[] = {
    {CH, "{" M ",\"temperature\":2.5}", "temperature = 2.5: must be in [0, 2]", "temperature"},
    {CH, "{" M ",\"temperature\":-0.1}", "temperature = -0.1: must be in [0, 2]", "temperature"},
    {CH, "{" M ",\"top_p\":0}", "top_p = 0: must be in (0, 1]", "top_p"},
    {CH, "{" M ",\"top_p\":1.5}", "top_p = 1.5: must be in (0, 1]", "top_p"},
    {CH, "{" M ",\"top_k\":-2}", "top_k = -2: must be >= 0 (0 = off)", "top_k"},
    {CH, "{" M ",\"min_p\":1.5}", "min_p = 1.5: must be in [0, 1]", "min_p"},
    {CH, "{" M ",\"presence_penalty\":3}", "presence_penalty = 3: must be in [-2, 2]", "presence_penalty"},
    {CH, "{" M ",\"frequency_penalty\":-2.5}", "frequency_penalty = -2.5: must be in [-2, 2]", "frequency_penalty"},
    {CH, "{" M ",\"repetition_penalty\":0}", "repetition_penalty = 0: must be in (0, 10]", "repetition_penalty"},
    {CH, "{" M ",\"logit_bias\":{\"5\":101}}", "logit_bias[5] = 101: must be in [-100, 100]", "logit_bias"},
    {CH, "{" M ",\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs = 21: must be in [0, 20]", "top_logprobs"},
    {CH, "{" M ",\"top_logprobs\":2}", "top_logprobs requires logprobs to be true", "top_logprobs"},
    {CO, "{" P ",\"logprobs\":6}", "logprobs = 6: must be in [0, 5]", "logprobs"},
    {CH, "{" M ",\"max_tokens\":0}", "max_tokens = 0: must be in [1, 2147483647]", "max_tokens"},
    {CH, "{" M ",\"max_tokens\":5,\"max_completion_tokens\":6}", "max_tokens = 5 and max_completion_tokens = 6 disagree", "max_completion_tokens"},
    {CH, "{" M ",\"n\":17}", "n = 17: must be in [1, 16]", "n"},
    {CH, "{" M ",\"n\":0}", "n = 0: must be in [1, 16]", "n"},
    {CH, "{" M ",\"seed\":1e20}", "seed = 1e+20: integers beyond 2^53 are not exact in JSON numbers; pass the seed as a decimal string", "seed"},
    {CH, "{" M ",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop: 5 sequences: at most 4", "stop"},
    {CH, "{" M ",\"stop\":\"\"}", "stop: must not be empty", "stop"},
    {CH, "{" M ",\"stop\":[\"a\",\"\"]}", "stop[1]: must not be empty", "stop"},
    {CH, "{" M ",\"stop\":\"" X1025 "\"}", "stop: 1025 bytes: at most 1024", "stop"},
    {CO, "{" P ",\"stop\":[\"a\",\"" X1025 "\"]}", "stop[1]: 1025 bytes: at most 1024", "stop"},
    {CH, "{" M ",\"stream_options\":{\"include_usage\":true}}", "stream_options is only allowed when stream is true", "stream_options"},
    {CH, "{\"model\":\"m\",\"messages\":[]}", "messages: array is empty", "messages"},
    {CH, "{\"model\":\"m\",\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "messages[0].role = 'robot': must be one of system, developer, user, assistant, tool", "messages[0].role"},
    {CH, "{\"model\":\"m\",\"messages\":[{\"content\":\"x\"}]}", "missing required field 'messages[0].role'", "messages[0].role"},
    {CH, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}]}", "missing required field 'messages[0].content' for role 'user'", "messages[0].content"},
    {CH, "{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"content\":\"42\"}]}", "missing required field 'messages[0].tool_call_id' for role 'tool'", "messages[0].tool_call_id"},
    {CH, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}", "messages[0].tool_calls: only assistant messages have tool_calls", "messages[0].tool_calls"},
    {CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "missing required field 'model'", "model"},
    {CH, "{\"model\":\"m\"}", "missing required field 'messages'", "messages"},
    {CO, "{\"model\":\"m\"}", "missing required field 'prompt'", "prompt"},
    {CO, "{\"model\":\"m\",\"prompt\":[]}", "prompt: array is empty", "prompt"},
    {CO, "{\"model\":\"m\",\"prompt\":[[1],[]]}", "prompt[1]: token array is empty", "prompt"},
    {CO, "{\"model\":\"m\",\"prompt\":[-1]}", "prompt[0] = -1: must be in [0, 2147483647]", "prompt"},
    {CO, "{\"model\":\"m\",\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\"],\"n\":16}", "5 prompts x n = 16: at most 64 sequences per request", "n"},
    {HY_API_INFER, "{\"max_tokens\":5}", "missing required field 'input'", "input"},
    {HY_API_GENERATE, "{\"prompt\":\"x\",\"max_length\":0}", "max_length = 0: must be in [1, 2147483647]", "max_length"},
};

/* unsupported features and the unknown-field rule */
static const err_case_t k_rule_cases[] = {
    {CH, "{" M ",\"response_format\":{\"type\":\"yaml\"}}", "response_format.type = 'yaml': must be text, json_object or json_schema", "response_format"},
    {CH, "{" M ",\"response_format\":{\"type\":\"json_schema\"}}", "response_format.json_schema: expected an object with the schema", "response_format"},
    {CH, "{" M ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":5}}}", "response_format.json_schema.name: expected a string", "response_format"},
    {CH, "{" M ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"strict\":\"yes\"}}}", "response_format.json_schema.strict: expected a boolean", "response_format"},
    {CH, "{" M ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":{\"type\":\"string\",\"foo\":1}}}}", "Invalid schema for response_format 'p': /: keyword 'foo' is not supported", "response_format"},
    {CH, "{" M ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":{\"properties\":{\"t\":{\"type\":\"array\",\"uniqueItems\":true}}}}}}", "Invalid schema for response_format 'p': /properties/t: 'uniqueItems': true is not supported", "response_format"},
    {CH, "{" M ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":{\"type\":\"string\",\"pattern\":\"(?=x)\"}}}}", "Invalid schema for response_format 'p': /: pattern: lookahead '(?=' at offset 0 is not supported", "response_format"},
    {CH, "{" M ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":{\"$ref\":\"#\"}}}}", "the schema's grammar is invalid: grammar: rule 'ref' is left-recursive (ref -> ref): it can call itself before matching any character", "response_format"},
    {CH, "{" M ",\"grammar\":\"root ::= foo\"}", "grammar: offset 9 (line 1, column 10): rule 'foo' is used but never defined", "grammar"},
    {CH, "{" M ",\"grammar\":5}", "grammar: expected a string (GBNF)", "grammar"},
    {CO, "{" P ",\"json_schema\":{\"type\":\"integer\",\"minimum\":3,\"maximum\":1}}", "Invalid schema for json_schema: /: the range of values is empty", "json_schema"},
    {CH, "{" M ",\"grammar\":\"root ::= \\\"x\\\"\",\"response_format\":{\"type\":\"json_object\"}}", "give at most one of response_format, grammar and json_schema", "grammar"},
    {CO, "{" P ",\"suffix\":\"end\"}", "suffix is not supported by this server", "suffix"},
    {CO, "{" P ",\"best_of\":3}", "best_of = 3 is not supported by this server (only best_of = n)", "best_of"},
    {CH, "{" M ",\"audio\":{}}", "audio is not supported by this server", "audio"},
    /* tool calling: every field checked, the 400 names it */
    {CH, "{" M ",\"tools\":{}}", "tools: expected an array, got an object", "tools"},
    {CH, "{" M ",\"tools\":[]}", "tools: array is empty", "tools"},
    {CH, "{" M ",\"tools\":[5]}", "tools[0]: expected an object, got a number", "tools"},
    {CH, "{" M ",\"tools\":[{\"function\":{\"name\":\"f\"}}]}", "tools[0].type: must be \"function\"", "tools"},
    {CH, "{" M ",\"tools\":[{\"type\":\"function\"}]}", "tools[0].function: expected an object, got nothing", "tools"},
    {CH, "{" M ",\"tools\":[{\"type\":\"function\",\"function\":{}}]}", "tools[0].function.name: expected a string, got nothing", "tools"},
    {CH, "{" M ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}", "tools[0].function.name = 'a b': must be 1 to 64 of a-z, A-Z, 0-9, _ and -", "tools"},
    {CH, "{" M ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", "tools[1].function.name = 'f': defined twice", "tools"},
    {CH, "{" M ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":1}}]}", "tools[0].function.description: expected a string, got a number", "tools"},
    {CH, "{" M ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"string\"}}}]}", "tools[0].function.parameters: must be a JSON Schema of type \"object\"", "tools"},
    {CH, "{" M ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"uniqueItems\":true}}}}}]}", "Invalid schema for tools[0].function.parameters: /properties/a: 'uniqueItems': true is not supported", "tools"},
    {CH, "{" M ",\"tool_choice\":\"auto\"}", "tool_choice is only allowed when tools are given", "tool_choice"},
    {CH, "{" M "," TOOLS_F ",\"tool_choice\":\"sometimes\"}", "tool_choice = 'sometimes': must be none, auto, required or a function object", "tool_choice"},
    {CH, "{" M "," TOOLS_F ",\"tool_choice\":5}", "tool_choice: expected a string or an object, got a number", "tool_choice"},
    {CH, "{" M "," TOOLS_F ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}", "tool_choice: no function named 'g' in tools", "tool_choice"},
    {CH, "{" M "," TOOLS_F ",\"tool_choice\":{\"type\":\"function\"}}", "tool_choice.function.name: expected a string, got nothing", "tool_choice"},
    {CH, "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[5]}]}", "messages[0].tool_calls[0]: expected an object, got a number", "messages[0].tool_calls"},
    {CH, "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"1\"}]}]}", "messages[0].tool_calls[0].function: expected an object, got nothing", "messages[0].tool_calls"},
    {CH, "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"arguments\":\"{}\"}}]}]}", "messages[0].tool_calls[0].function.name: expected a string, got nothing", "messages[0].tool_calls"},
    {CH, "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":{}}}]}]}", "messages[0].tool_calls[0].function.arguments: expected a string (JSON text), got an object", "messages[0].tool_calls"},
    {CH, "{" M "," TOOLS_F ",\"parallel_tool_calls\":1}", "parallel_tool_calls: expected a boolean, got a number", "parallel_tool_calls"},
    {CH, "{" M "," TOOLS_F ",\"functions\":[{\"name\":\"f\"}]}", "give tools or the legacy functions, not both", "functions"},
    {CH, "{" M ",\"functions\":[{\"name\":\"f\"}],\"function_call\":\"required\"}", "function_call = 'required': must be none, auto or {\"name\": ...}", "function_call"},
    {CH, "{" M ",\"function_call\":\"auto\"}", "function_call is only allowed when functions are given", "function_call"},
    {CH, "{" M ",\"modalities\":[\"text\",\"audio\"]}", "modalities: only \"text\" is supported by this server", "modalities"},
    {CH, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}", "messages[0].content[0].type = 'image_url' is not supported: this server accepts text only", "messages[0].content[0]"},
    {CH, "{" M ",\"min_tokens\":5}", "min_tokens is not supported by this server", "min_tokens"},
    {CO, "{" P ",\"stop_token_ids\":[2]}", "stop_token_ids is not supported by this server", "stop_token_ids"},
    {CH, "{" M ",\"temprature\":0.2}", "unknown field 'temprature' (did you mean 'temperature'?)", "temprature"},
    {CH, "{" M ",\"Temperature\":0.2}", "unknown field 'Temperature' (did you mean 'temperature'?)", "Temperature"},
    {CH, "{" M ",\"top-p\":0.2}", "unknown field 'top-p' (did you mean 'top_p'?)", "top-p"},
    {CH, "{" M ",\"max_token\":5}", "unknown field 'max_token' (did you mean 'max_tokens'?)", "max_token"},
    {CH, "{" M ",\"mesages\":[]}", "unknown field 'mesages' (did you mean 'messages'?)", "mesages"},
    {CO, "{" P ",\"prompts\":[]}", "unknown field 'prompts' (did you mean 'prompt'?)", "prompts"},
    {CH, "{" M ",\"temperature\":0.1,\"temperature\":1.9}", "duplicate field 'temperature'", "temperature"},
};

static void test_error_tables(void)
{
    const struct {
        const char *what;
        const err_case_t *c;
        size_t n;
    } tabs[] = {{"wrong-type", k_type_cases, HY_ARRAY_LEN(k_type_cases)},
                {"out-of-range/missing", k_range_cases, HY_ARRAY_LEN(k_range_cases)},
                {"unsupported/unknown-field", k_rule_cases, HY_ARRAY_LEN(k_rule_cases)}};
    size_t t, i, bad;

    for (t = 0; t < HY_ARRAY_LEN(tabs); t++) {
        bad = 0;
        for (i = 0; i < tabs[t].n; i++)
            bad += !expect_err(tabs[t].c[i].kind, tabs[t].c[i].body, 400, tabs[t].c[i].message,
                               tabs[t].c[i].param);
        HY_T_OK(bad == 0, "%s: %zu cases give their exact 400 message and param (%zu wrong)",
                tabs[t].what, tabs[t].n, bad);
    }
}

static void test_ignored_fields(void)
{
    hy_api_req_t *r = NULL;
    hy_api_error_t e;
    int rc;

    /* ignored OpenAI fields, a vendor extension, nulls for optional fields,
     * and short names that are not typos ("x" is one edit from "n") */
    rc = parse(CH,
               "{" M ",\"metadata\":{\"a\":1},\"store\":false,\"parallel_tool_calls\":true,"
               "\"x\":1,\"my_vendor_thing\":{\"deep\":[1,2]},\"temperature\":null,\"stop\":null}",
               &r, &e);
    HY_T_OK(rc == HY_OK && r->sampling.temperature == 1.0f && r->n_stop == 0,
            "ignored OpenAI fields, vendor extensions and nulls are accepted (%s)",
            rc ? e.message : "ok");
    hy_api_req_free(r);
}

/* ---- successful parses ---- */

static void test_chat_full(void)
{
    const char *body =
        "{\"model\":\"qwen\",\"messages\":["
        "{\"role\":\"system\",\"content\":\"be brief\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}],\"name\":\"bob\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"content\":\"42\",\"tool_call_id\":\"c1\"},"
        "{\"role\":\"developer\",\"content\":\"\\u00e9\"}],"
        "\"max_completion_tokens\":64,\"temperature\":0.7,\"top_p\":0.9,\"top_k\":-1,\"min_p\":0.05,"
        "\"seed\":\"18446744073709551615\",\"stop\":[\"\\n\\n\",\"END\"],\"presence_penalty\":0.5,"
        "\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,\"logit_bias\":{\"50256\":-100,\"7\":2.5},"
        "\"logprobs\":true,\"top_logprobs\":3,\"n\":2,\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},\"user\":\"u1\",\"ignore_eos\":true,"
        "\"response_format\":{\"type\":\"text\"},"
        "\"chat_template_kwargs\":{\"enable_thinking\":false}}";
    hy_api_req_t *r = NULL;
    hy_api_error_t e;
    int rc = parse(CH, body, &r, &e);

    HY_T_OK(rc == HY_OK, "full chat request parses (%s)", rc ? e.message : "ok");
    if (rc != HY_OK)
        return;
    HY_T_OK(strcmp(r->model, "qwen") == 0 && r->n_messages == 5 &&
                strcmp(r->messages[0].role, "system") == 0 &&
                strcmp(r->messages[1].content, "a\nb") == 0 &&
                strcmp(r->messages[1].name, "bob") == 0 &&
                strcmp(r->messages[2].content, "") == 0 &&
                strcmp(r->messages[2].tool_calls,
                       "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                       "\"arguments\":\"{}\"}}]") == 0 &&
                strcmp(r->messages[3].tool_call_id, "c1") == 0 &&
                strcmp(r->messages[4].content, "\xC3\xA9") == 0,
            "messages: roles, joined text parts, name, an assistant's null content as \"\", "
            "tool_calls JSON, tool_call_id, \\u escapes");
    HY_T_OK(r->max_tokens == 64 && r->sampling.temperature == 0.7f &&
                r->sampling.top_p == 0.9f && r->sampling.top_k == 0 &&
                r->sampling.min_p == 0.05f && r->seed_given &&
                r->sampling.seed == UINT64_MAX && r->sampling.presence_penalty == 0.5f &&
                r->sampling.frequency_penalty == -0.5f &&
                r->sampling.repetition_penalty == 1.1f && r->sampling.n_logit_bias == 2 &&
                r->sampling.logit_bias[0].token == 50256 &&
                r->sampling.logit_bias[0].bias == -100.0f &&
                r->sampling.logit_bias[1].token == 7 && r->sampling.n_logprobs == 3,
            "sampling fields land in hy_sampling_t (top_k -1 = off, string seed is 64-bit)");
    HY_T_OK(r->n_stop == 2 && r->stop_len[0] == 2 && memcmp(r->stop[0], "\n\n", 2) == 0 &&
                strcmp(r->stop[1], "END") == 0 && r->logprobs && r->n == 2 && r->stream &&
                r->include_usage && strcmp(r->user, "u1") == 0 && r->ignore_eos &&
                r->skip_special_tokens && r->add_generation_prompt,
            "stop, logprobs, n, stream, include_usage, user, ignore_eos, defaults");
    HY_T_OK(r->tools == NULL && r->enable_thinking == 0 &&
                strcmp(r->template_kwargs, "{\"enable_thinking\":false}") == 0,
            "chat_template_kwargs pass through as JSON");
    hy_api_req_free(r);
    r = NULL;
    /* an assistant turn with absent content (tool calls only, or nothing)
     * reads as "" like null */
    rc = parse(CH,
               "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
               "{\"role\":\"assistant\",\"tool_calls\":[]},{\"role\":\"assistant\"}]}",
               &r, &e);
    HY_T_OK(rc == HY_OK && r->n_messages == 3 && strcmp(r->messages[1].content, "") == 0 &&
                strcmp(r->messages[2].content, "") == 0,
            "assistant messages without content read as \"\" (%s)", rc ? e.message : "ok");
    hy_api_req_free(r);
}

/* The grammar a request asks for, as the GBNF text the engine gets. */
static void test_grammar_fields(void)
{
    static const struct {
        hy_api_kind_t kind;
        const char *body, *want;
    } cases[] = {
        {CH, "{" M ",\"response_format\":{\"type\":\"json_object\"}}", "json-object"},
        {CH, "{" M ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
             "{\"name\":\"p\",\"strict\":true,\"schema\":{\"type\":\"object\","
             "\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}}}}",
         "\"a\""},
        {CH, "{" M ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
             "{\"name\":\"any\"}}}", "json-object"},
        {CO, "{" P ",\"grammar\":\"root ::= [0-9]+\"}", "root ::= [0-9]+"},
        {CO, "{" P ",\"json_schema\":{\"enum\":[\"x\",\"y\"]}}", "\"\\\"x\\\"\""},
    };
    size_t bad = 0;

    for (size_t i = 0; i < HY_ARRAY_LEN(cases); i++) {
        hy_api_req_t *r = NULL;
        hy_api_error_t e;

        if (parse(cases[i].kind, cases[i].body, &r, &e) != HY_OK || r->grammar == NULL ||
            strlen(r->grammar) != r->grammar_len || strstr(r->grammar, "root ::=") == NULL ||
            strstr(r->grammar, cases[i].want) == NULL) {
            printf("# case %zu: %s\n", i, r ? (r->grammar ? r->grammar : "no grammar") : e.message);
            bad++;
        }
        hy_api_req_free(r);
    }
    HY_T_OK(bad == 0, "response_format json_object/json_schema, grammar and json_schema give "
                      "the grammar text (%zu wrong)", bad);
    {
        hy_api_req_t *r = NULL;
        hy_api_error_t e;
        int rc = parse(CH, "{" M ",\"response_format\":{\"type\":\"text\"}}", &r, &e);

        HY_T_OK(rc == HY_OK && r->grammar == NULL, "response_format text: no grammar");
        hy_api_req_free(r);
    }
}

/* tools, tool_choice, parallel_tool_calls, and the legacy fields turned
 * into the same form. */
static void test_tools(void)
{
    hy_api_req_t *r = NULL;
    hy_api_error_t e;
    bool ok;

    ok = parse(CH, "{" M "," TOOLS_F "}", &r, &e) == HY_OK &&
         r->tool_choice == HY_TOOL_CHOICE_AUTO && r->parallel_tool_calls &&
         !r->legacy_functions && r->tool_name == NULL &&
         strcmp(r->tools, "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]") == 0;
    hy_api_req_free(r);
    r = NULL;
    HY_T_OK(ok, "tools alone: tool_choice auto, parallel calls");
    ok = parse(CH, "{" M "," TOOLS_F ",\"tool_choice\":{\"type\":\"function\",\"function\":"
                   "{\"name\":\"f\"}}}", &r, &e) == HY_OK &&
         r->tool_choice == HY_TOOL_CHOICE_NAMED && strcmp(r->tool_name, "f") == 0 &&
         !r->parallel_tool_calls;
    hy_api_req_free(r);
    r = NULL;
    ok = ok && parse(CH, "{" M "," TOOLS_F ",\"tool_choice\":\"required\","
                         "\"parallel_tool_calls\":false}", &r, &e) == HY_OK &&
         r->tool_choice == HY_TOOL_CHOICE_REQUIRED && !r->parallel_tool_calls;
    hy_api_req_free(r);
    r = NULL;
    ok = ok && parse(CH, "{" M "," TOOLS_F ",\"tool_choice\":\"none\"}", &r, &e) == HY_OK &&
         r->tool_choice == HY_TOOL_CHOICE_NONE && r->tools != NULL;
    hy_api_req_free(r);
    r = NULL;
    ok = ok && parse(CH, "{" M ",\"tool_choice\":\"none\"}", &r, &e) == HY_OK &&
         r->tool_choice == HY_TOOL_CHOICE_NONE && r->tools == NULL;
    hy_api_req_free(r);
    r = NULL;
    HY_T_OK(ok, "tool_choice named (one call), required with parallel_tool_calls false, none "
                "(with and without tools)");
    ok = parse(CH, "{" M ",\"functions\":[{\"name\":\"g\",\"parameters\":{\"type\":"
                   "\"object\"}}],\"function_call\":{\"name\":\"g\"}}", &r, &e) == HY_OK &&
         r->legacy_functions && r->tool_choice == HY_TOOL_CHOICE_NAMED &&
         strcmp(r->tool_name, "g") == 0 &&
         strcmp(r->tools, "[{\"type\":\"function\",\"function\":{\"name\":\"g\","
                          "\"parameters\":{\"type\":\"object\"}}}]") == 0;
    hy_api_req_free(r);
    HY_T_OK(ok, "legacy functions + function_call: tools form, named, legacy answer");
}

static void test_prompts(void)
{
    hy_api_req_t *r = NULL;
    hy_api_error_t e;
    int ok;

    ok = parse(CO, "{\"model\":\"m\",\"prompt\":\"hello\",\"max_tokens\":7,\"echo\":true,\"logprobs\":2,\"seed\":-1}", &r, &e) == HY_OK &&
         r->n_prompts == 1 && strcmp(r->prompts[0].text, "hello") == 0 &&
         r->prompts[0].text_len == 5 && r->prompts[0].tokens == NULL && r->max_tokens == 7 &&
         r->echo && r->logprobs && r->sampling.n_logprobs == 2 && r->sampling.seed == UINT64_MAX;
    HY_T_OK(ok, "prompt as a string (+ echo, logprobs 2, negative seed wraps)");
    hy_api_req_free(r);
    r = NULL;
    ok = parse(CO, "{\"model\":\"m\",\"prompt\":[\"a\",\"bc\"]}", &r, &e) == HY_OK &&
         r->n_prompts == 2 && strcmp(r->prompts[1].text, "bc") == 0 && r->max_tokens == 16 &&
         !r->logprobs;
    HY_T_OK(ok, "prompt as an array of strings; max_tokens defaults to 16 (OpenAI's)");
    hy_api_req_free(r);
    r = NULL;
    ok = parse(CO, "{\"model\":\"m\",\"prompt\":[1,2,3],\"logprobs\":0}", &r, &e) == HY_OK &&
         r->n_prompts == 1 && r->prompts[0].text == NULL && r->prompts[0].n_tokens == 3 &&
         r->prompts[0].tokens[2] == 3 && r->logprobs && r->sampling.n_logprobs == 0;
    HY_T_OK(ok, "prompt as token ids (logprobs 0 = chosen token only)");
    hy_api_req_free(r);
    r = NULL;
    ok = parse(CO, "{\"model\":\"m\",\"prompt\":[[1,2],[3]]}", &r, &e) == HY_OK &&
         r->n_prompts == 2 && r->prompts[0].n_tokens == 2 && r->prompts[1].tokens[0] == 3;
    HY_T_OK(ok, "prompt as an array of token-id arrays");
    if (ok) {
        HY_T_OK(hy_api_check_vocab(r, 3, &e) == HY_EINVAL &&
                    strcmp(e.message, "prompt token 3: must be in [0, 2]") == 0 &&
                    hy_api_check_vocab(r, 4, &e) == HY_OK,
                "check_vocab: token ids against the vocabulary");
    }
    hy_api_req_free(r);
    r = NULL;
    ok = parse(HY_API_INFER, "{\"input\":\"x\",\"max_tokens\":3}", &r, &e) == HY_OK &&
         r->model == NULL && strcmp(r->prompts[0].text, "x") == 0 && r->max_tokens == 3;
    hy_api_req_free(r);
    r = NULL;
    ok = ok && parse(HY_API_GENERATE, "{\"prompt\":\"y\",\"max_length\":9}", &r, &e) == HY_OK &&
         strcmp(r->prompts[0].text, "y") == 0 && r->max_tokens == 9;
    HY_T_OK(ok, "/v1/infer and /generate aliases");
    hy_api_req_free(r);
    r = NULL;
    ok = parse(CH, "{" M "}", &r, &e) == HY_OK && r->max_tokens == -1;
    hy_api_req_free(r);
    r = NULL;
    ok = ok && parse(HY_API_INFER, "{\"input\":\"x\"}", &r, &e) == HY_OK && r->max_tokens == -1;
    hy_api_req_free(r);
    HY_T_OK(ok, "chat and the aliases without max_tokens: what the context leaves (-1)");
}

/* ---- malformed and hostile bodies ---- */

static void test_malformed(void)
{
    static char deep[200001];
    hy_api_req_t *r = NULL;
    hy_api_error_t e;
    char body[512];
    size_t i;
    int ok;

    ok = expect_err(CH, "{\"model\": \"m\",}", 400, "malformed JSON body at byte 14 (near '}')", NULL) &&
         expect_err(CH, "{\"model\":", 400, "malformed JSON body: unexpected end of input at byte 9", NULL) &&
         expect_err(CH, "{} x", 400, "malformed JSON body at byte 3 (near 'x')", NULL) &&
         expect_err(CH, "[1]", 400, "request body must be a JSON object, got an array", NULL) &&
         expect_err(CH, "", 400, "request body is empty: expected a JSON object", NULL);
    HY_T_OK(ok, "malformed JSON: the message gives the byte offset");

    /* Not NUL-terminated: the parser must stop at len. */
    memcpy(body, "{\"model\":\"m\",\"prompt\":\"hi\"}GARBAGE", 35);
    ok = hy_api_parse(CO, body, 27, &r, &e) == HY_OK && strcmp(r->prompts[0].text, "hi") == 0;
    hy_api_req_free(r);
    r = NULL;
    HY_T_OK(ok, "body without a terminating NUL parses up to len only");

    ok = expect_err(CO, "{\"model\":\"m\",\"prompt\":\"a\\u0000b\"}", 400,
                    "NUL character in the JSON body at byte 24 is not supported", NULL);
    HY_T_OK(ok, "\\u0000 inside a string is refused, not truncated");
    ok = parse(CO, "{\"model\":\"m\",\"prompt\":\"a\\\\u0000b\"}", &r, &e) == HY_OK &&
         strcmp(r->prompts[0].text, "a\\u0000b") == 0;
    hy_api_req_free(r);
    r = NULL;
    HY_T_OK(ok, "an escaped backslash before u0000 is not a NUL");

    /* invalid UTF-8 inside a string: a 400 at the first bad byte */
    ok = expect_err(CO, "{\"model\":\"m\",\"prompt\":\"a\x80" "b\"}", 400,
                    "invalid UTF-8 in a JSON string at byte 24 (byte 0x80)", NULL) &&
         expect_err(CO, "{\"model\":\"m\",\"prompt\":\"\xc0\xafx\"}", 400,
                    "invalid UTF-8 in a JSON string at byte 23 (byte 0xc0)", NULL) &&
         expect_err(CO, "{\"model\":\"m\",\"prompt\":\"\xed\xa0\x80\"}", 400,
                    "invalid UTF-8 in a JSON string at byte 23 (byte 0xed)", NULL) &&
         expect_err(CO, "{\"model\":\"m\",\"prompt\":\"\xe2\x82\"}", 400,
                    "invalid UTF-8 in a JSON string at byte 23 (byte 0xe2)", NULL) &&
         expect_err(CH, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"ok\xff\"}]}",
                    400, "invalid UTF-8 in a JSON string at byte 53 (byte 0xff)", NULL) &&
         expect_err(CO, "{\"model\":\"m\",\"prompt\":\"x\",\"\xf5\x80\x80\x80\":1}", 400,
                    "invalid UTF-8 in a JSON string at byte 27 (byte 0xf5)", NULL);
    HY_T_OK(ok, "invalid UTF-8 in a string (stray continuation, overlong, surrogate, cut "
                "sequence, 0xff, > U+10FFFF in a key) is a 400 naming the byte");
    ok = parse(CO, "{\"model\":\"m\",\"prompt\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}", &r,
               &e) == HY_OK && r->prompts[0].text_len == 9;
    hy_api_req_free(r);
    r = NULL;
    HY_T_OK(ok, "2-, 3- and 4-byte UTF-8 characters pass");

    for (i = 0; i < 100000; i++)
        deep[i] = '[';
    for (; i < 200000; i++)
        deep[i] = ']';
    ok = expect_err(CH, deep, 400, "JSON nesting deeper than 64 levels at byte 64", NULL);
    HY_T_OK(ok, "100000-deep nesting is refused before cJSON recurses");
    snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"x\",\"ext\":%s1%s}",
             "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
             "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]");
    ok = parse(CO, body, &r, &e) == HY_OK;
    hy_api_req_free(r);
    r = NULL;
    HY_T_OK(ok, "64 levels of nesting are still accepted");
    ok = parse(CO, "{\"model\":\"m\",\"prompt\":\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"}",
               &r, &e) == HY_OK && r->prompts[0].text_len == 80;
    hy_api_req_free(r);
    r = NULL;
    HY_T_OK(ok, "brackets inside strings do not count as nesting");
}

/* ---- error bodies and helpers ---- */

static void test_error_bodies(void)
{
    hy_api_error_t e;
    char *s = NULL, *h = NULL;
    int ok;

    hy_api_error_json(400, "invalid_request_error", "top_p = 0: must be in (0, 1]", "top_p", NULL, &s);
    ok = s && strcmp(s, "{\"error\":{\"message\":\"top_p = 0: must be in (0, 1]\",\"type\":"
                        "\"invalid_request_error\",\"param\":\"top_p\",\"code\":null}}") == 0;
    HY_T_OK(ok, "hy_api_error_json: OpenAI's shape, null code");
    free(s);

    hy_api_err_context_length(&e, HY_API_CHAT, 4096, 4000, 1000);
    hy_api_error_to_json(&e, &s);
    ok = e.status == 400 &&
         strcmp(s, "{\"error\":{\"message\":\"This model's maximum context length is 4096 "
                   "tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in "
                   "the completion). Please reduce the length of the messages or completion."
                   "\",\"type\":\"invalid_request_error\",\"param\":\"messages\",\"code\":"
                   "\"context_length_exceeded\"}}") == 0;
    HY_T_OK(ok, "context_length_exceeded with both numbers");
    free(s);

    hy_api_err_model_not_found(&e, "gpt-4");
    hy_api_error_to_json(&e, &s);
    ok = e.status == 404 &&
         strcmp(s, "{\"error\":{\"message\":\"The model `gpt-4` does not exist or you do not "
                   "have access to it.\",\"type\":\"invalid_request_error\",\"param\":\"model\","
                   "\"code\":\"model_not_found\"}}") == 0;
    HY_T_OK(ok, "404 model_not_found");
    free(s);

    hy_api_err_overloaded(&e, 503, 5, "draining");
    hy_api_error_headers(&e, NULL, &h);
    hy_api_error_to_json(&e, &s);
    ok = strcmp(h, "Status: 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                   "Retry-After: 5\r\n\r\n") == 0 &&
         strcmp(s, "{\"error\":{\"message\":\"The server is unavailable: draining. Retry after "
                   "5 s.\",\"type\":\"server_error\",\"param\":null,\"code\":"
                   "\"service_unavailable\"}}") == 0;
    HY_T_OK(ok, "503 with Retry-After header");
    free(h);
    free(s);

    hy_api_err_method(&e, "GET", "POST");
    hy_api_error_headers(&e, "POST", &h);
    ok = e.status == 405 && strcmp(e.message, "Method GET is not allowed here; use POST.") == 0 &&
         strcmp(h, "Status: 405 Method Not Allowed\r\nContent-Type: application/json\r\n"
                   "Allow: POST\r\n\r\n") == 0;
    HY_T_OK(ok, "405 with Allow header");
    free(h);

    hy_api_err_too_large(&e, 3000000, 1048576);
    ok = e.status == 413 && strcmp(e.code, "request_too_large") == 0 &&
         strcmp(e.message, "Request body of 3000000 bytes is larger than the limit of 1048576 "
                           "bytes.") == 0;
    HY_T_OK(ok, "413 body too large");

    {
        hy_api_req_t *r = NULL;

        parse(CH, "{" M "}", &r, &e);
        ok = r && hy_api_check_model(r, "m", &e) == HY_OK &&
             hy_api_check_model(r, "other", &e) == HY_ENOENT && e.status == 404 &&
             strcmp(e.param, "model") == 0;
        HY_T_OK(ok, "check_model: served id matches, other ids 404");
        hy_api_req_free(r);
    }
}

/* ---- responses ---- */

/* The set of keys of object o, comma-joined in order. */
static void keys_of(const cJSON *o, char *out, size_t n)
{
    const cJSON *c;

    out[0] = '\0';
    for (c = o ? o->child : NULL; c != NULL; c = c->next) {
        if (out[0])
            strncat(out, ",", n - strlen(out) - 1);
        strncat(out, c->string, n - strlen(out) - 1);
    }
}

static void test_responses(void)
{
    const hy_api_top_t top0[] = {{"Hi", 2, -0.25f}, {"Hey", 3, -1.5f}};
    const hy_api_top_t top1[] = {{"!", 1, -0.5f}, {"!", 1, -0.75f}};
    const hy_api_token_lp_t lp[] = {{"Hi", 2, -0.25f, top0, 2}, {"!", 1, -0.5f, top1, 2}};
    hy_api_choice_t ch = {.text = "Hi!", .text_len = 3, .finish = HY_API_FINISH_STOP, .lp = lp,
                          .n_lp = 2};
    hy_api_usage_t u = {5, 2, 4};
    hy_api_resp_t m = {HY_API_CHAT, "chatcmpl-1", 1700000000, "qwen", "fp_hy", true, false};
    char *s = NULL, keys[512];
    cJSON *j;
    int ok;

    hy_api_format_response(&m, &ch, 1, &u, &s, NULL);
    ok = strcmp(s,
                "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1700000000,"
                "\"model\":\"qwen\",\"system_fingerprint\":\"fp_hy\",\"choices\":[{\"index\":0,"
                "\"message\":{\"role\":\"assistant\",\"content\":\"Hi!\"},\"logprobs\":{"
                "\"content\":[{\"token\":\"Hi\",\"logprob\":-0.25,\"bytes\":[72,105],"
                "\"top_logprobs\":[{\"token\":\"Hi\",\"logprob\":-0.25,\"bytes\":[72,105]},"
                "{\"token\":\"Hey\",\"logprob\":-1.5,\"bytes\":[72,101,121]}]},{\"token\":\"!\","
                "\"logprob\":-0.5,\"bytes\":[33],\"top_logprobs\":[{\"token\":\"!\",\"logprob\":"
                "-0.5,\"bytes\":[33]},{\"token\":\"!\",\"logprob\":-0.75,\"bytes\":[33]}]}]},"
                "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,"
                "\"completion_tokens\":2,\"total_tokens\":7,\"prompt_tokens_details\":{"
                "\"cached_tokens\":4}}}") == 0;
    HY_T_OK(ok, "chat.completion with logprobs: golden bytes");
    j = cJSON_Parse(s);
    keys_of(j, keys, sizeof keys);
    ok = j && strcmp(keys, "id,object,created,model,system_fingerprint,choices,usage") == 0;
    keys_of(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), keys, sizeof keys);
    ok = ok && strcmp(keys, "index,message,logprobs,finish_reason") == 0;
    HY_T_OK(ok, "chat.completion round-trips through cJSON with OpenAI's keys");
    cJSON_Delete(j);
    free(s);

    /* completions: echo-like first token with no logprob, duplicate alternative dropped */
    m.kind = HY_API_COMPLETIONS;
    m.id = "cmpl-1";
    m.system_fingerprint = NULL;
    ch.finish = HY_API_FINISH_LENGTH;
    hy_api_format_response(&m, &ch, 1, &u, &s, NULL);
    ok = strcmp(s,
                "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1700000000,"
                "\"model\":\"qwen\",\"system_fingerprint\":null,\"choices\":[{\"text\":\"Hi!\","
                "\"index\":0,\"logprobs\":{\"tokens\":[\"Hi\",\"!\"],\"token_logprobs\":[-0.25,"
                "-0.5],\"top_logprobs\":[{\"Hi\":-0.25,\"Hey\":-1.5},{\"!\":-0.5}],"
                "\"text_offset\":[0,2]},\"finish_reason\":\"length\"}],\"usage\":{"
                "\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7,"
                "\"prompt_tokens_details\":{\"cached_tokens\":4}}}") == 0;
    HY_T_OK(ok, "text_completion with logprobs: golden bytes");
    j = cJSON_Parse(s);
    keys_of(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0),
                                "logprobs"),
            keys, sizeof keys);
    HY_T_OK(j && strcmp(keys, "tokens,token_logprobs,top_logprobs,text_offset") == 0,
            "text_completion logprobs round-trip with OpenAI's keys");
    cJSON_Delete(j);
    free(s);

    /* invalid UTF-8 in a token and control characters still give valid JSON */
    {
        const hy_api_token_lp_t bad[] = {{"\xE2\x82", 2, -INFINITY, NULL, 0}};
        hy_api_choice_t c2 = {.text = "a\"\\\n\x01\xE2\x82", .text_len = 7,
                              .finish = HY_API_FINISH_STOP, .lp = bad, .n_lp = 1};

        m.kind = HY_API_CHAT;
        hy_api_format_response(&m, &c2, 1, &u, &s, NULL);
        j = cJSON_Parse(s);
        ok = j && strstr(s, "\"content\":\"a\\\"\\\\\\n\\u0001\xEF\xBF\xBD\xEF\xBF\xBD\"") &&
             strstr(s, "{\"token\":\"\xEF\xBF\xBD\xEF\xBF\xBD\",\"logprob\":-9999.0,"
                       "\"bytes\":[226,130],\"top_logprobs\":[]}");
        HY_T_OK(ok, "escapes, U+FFFD for broken UTF-8 (bytes kept exact), -inf -> -9999.0");
        cJSON_Delete(j);
        free(s);
    }
}

/* tool_calls in a message (content null), the legacy function_call, and
 * the streamed deltas of a call: golden bytes. */
static void test_tool_shapes(void)
{
    hy_tc_call_t calls[2];
    hy_api_choice_t ch = {.text = "", .finish = HY_API_FINISH_TOOL_CALLS, .calls = calls,
                          .n_calls = 2};
    hy_api_usage_t u = {5, 2, 0};
    hy_api_resp_t m = {HY_API_CHAT, "chatcmpl-1", 1, "m", NULL, false, false};
    hy_jbuf_t b;
    char *s = NULL;
    const char *hd = "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1,"
                     "\"model\":\"m\",\"system_fingerprint\":null,\"choices\":[";
    char want[2048];

    memset(calls, 0, sizeof calls);
    strcpy(calls[0].id, "call_a");
    strcpy(calls[0].name, "f");
    hy_jbuf_cstr(&calls[0].args, "{\"x\": 1}");
    strcpy(calls[1].id, "call_b");
    strcpy(calls[1].name, "g");
    hy_api_format_response(&m, &ch, 1, &u, &s, NULL);
    snprintf(want, sizeof want,
             "%s{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":null,"
             "\"tool_calls\":[{\"id\":\"call_a\",\"type\":\"function\",\"function\":{"
             "\"name\":\"f\",\"arguments\":\"{\\\"x\\\": 1}\"}},{\"id\":\"call_b\",\"type\":"
             "\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"\"}}]},"
             "\"logprobs\":null,\"finish_reason\":\"tool_calls\"}],\"usage\":{"
             "\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7,"
             "\"prompt_tokens_details\":{\"cached_tokens\":0}}}",
             hd);
    HY_T_OK(s && strcmp(s, want) == 0, "tool_calls: content null, arguments as a JSON string, "
                                       "finish_reason tool_calls: golden bytes");
    free(s);
    ch.legacy = true;
    ch.n_calls = 1;
    ch.text = "ok";
    ch.text_len = 2;
    ch.finish = HY_API_FINISH_FUNCTION_CALL;
    hy_api_format_response(&m, &ch, 1, &u, &s, NULL);
    HY_T_OK(s && strstr(s, "\"message\":{\"role\":\"assistant\",\"content\":\"ok\","
                           "\"function_call\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": 1}\"}},"
                           "\"logprobs\":null,\"finish_reason\":\"function_call\"}"),
            "legacy function_call beside content, finish_reason function_call");
    free(s);
    hy_jbuf_free(&calls[0].args);

    hy_jbuf_init(&b);
    hy_sse_tool_begin(&b, &m, 0, 1, "call_b", "g", false);
    hy_sse_tool_args(&b, &m, 0, 1, "{\"y\"", 4, false);
    hy_sse_tool_begin(&b, &m, 0, 0, NULL, "f", true);
    hy_sse_tool_args(&b, &m, 0, 0, "{}", 2, true);
    hy_sse_finish(&b, &m, 0, HY_API_FINISH_TOOL_CALLS);
    HY_T_OK(b.data && strstr(b.data, "\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{"
                                     "\"index\":1,\"id\":\"call_b\",\"type\":\"function\","
                                     "\"function\":{\"name\":\"g\",\"arguments\":\"\"}}]},"
                                     "\"logprobs\":null,\"finish_reason\":null}]}\n\n") &&
                strstr(b.data, "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,"
                               "\"function\":{\"arguments\":\"{\\\"y\\\"\"}}]},\"logprobs\":null,"
                               "\"finish_reason\":null}") &&
                strstr(b.data, "\"delta\":{\"function_call\":{\"name\":\"f\","
                               "\"arguments\":\"\"}}") &&
                strstr(b.data, "\"delta\":{\"function_call\":{\"arguments\":\"{}\"}}") &&
                strstr(b.data, "\"finish_reason\":\"tool_calls\"}]}\n\n"),
            "streamed: a call's first delta (index, id, type, name, arguments \"\"), argument "
            "fragments, the legacy function_call deltas, finish_reason tool_calls");
    hy_jbuf_free(&b);
}

static void test_sse(void)
{
    hy_api_resp_t m = {HY_API_CHAT, "chatcmpl-x", 1, "m", NULL, false, true};
    hy_api_usage_t u = {3, 2, 0};
    hy_api_error_t e;
    hy_jbuf_t b;
    char id[64];
    const char *hd = "data: {\"id\":\"chatcmpl-x\",\"object\":\"chat.completion.chunk\","
                     "\"created\":1,\"model\":\"m\",\"system_fingerprint\":null,\"choices\":[";
    char want[4096];
    int ok;

    hy_jbuf_init(&b);
    hy_sse_role(&b, &m, 0);
    hy_sse_delta(&b, &m, 0, "Hel", 3, NULL, 0, 0);
    hy_sse_delta(&b, &m, 0, "lo", 2, NULL, 0, 0);
    hy_sse_finish(&b, &m, 0, HY_API_FINISH_STOP);
    hy_sse_usage(&b, &m, &u);
    hy_sse_done(&b);
    snprintf(want, sizeof want,
             "%s{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n"
             "%s{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n"
             "%s{\"index\":0,\"delta\":{\"content\":\"lo\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n"
             "%s{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\n"
             "%s],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n"
             "data: [DONE]\n\n",
             hd, hd, hd, hd, hd);
    ok = !b.failed && strcmp(b.data, want) == 0;
    if (!ok)
        printf("# got:\n%s# want:\n%s", b.data, want);
    HY_T_OK(ok, "chat SSE stream with include_usage: byte-exact");

    hy_jbuf_reset(&b);
    m.kind = HY_API_COMPLETIONS;
    m.id = "cmpl-x";
    m.include_usage = false;
    hy_sse_delta(&b, &m, 1, "ok", 2, NULL, 0, 0);
    hy_sse_finish(&b, &m, 1, HY_API_FINISH_LENGTH);
    hy_sse_done(&b);
    ok = strcmp(b.data,
                "data: {\"id\":\"cmpl-x\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"system_fingerprint\":null,\"choices\":[{\"text\":\"ok\",\"index\":1,\"logprobs\":null,\"finish_reason\":null}]}\n\n"
                "data: {\"id\":\"cmpl-x\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"system_fingerprint\":null,\"choices\":[{\"text\":\"\",\"index\":1,\"logprobs\":null,\"finish_reason\":\"length\"}]}\n\n"
                "data: [DONE]\n\n") == 0;
    HY_T_OK(ok, "completions SSE stream without usage: byte-exact");

    hy_jbuf_reset(&b);
    hy_api_err_internal(&e, "worker lost the engine");
    hy_sse_error(&b, &e);
    ok = strcmp(b.data, "data: {\"error\":{\"message\":\"Internal error: worker lost the engine.\","
                        "\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n"
                        "data: [DONE]\n\n") == 0;
    HY_T_OK(ok, "error event after the stream began, then [DONE]");
    hy_jbuf_free(&b);

    hy_api_make_id(HY_API_CHAT, 0x0123456789abcdefULL, 1, id);
    ok = strcmp(id, "chatcmpl-0123456789abcdef0000000000000001") == 0;
    hy_api_make_id(HY_API_COMPLETIONS, 0, 0, id);
    ok = ok && strcmp(id, "cmpl-00000000000000000000000000000000") == 0;
    HY_T_OK(ok, "ids: chatcmpl-/cmpl- + 32 hex");
}

static void test_models_tokenize(void)
{
    const hy_api_layer_kind_t lk[] = {{"attention", 12}, {"linear_attention", 36}};
    hy_api_model_info_t mi = {"qwen3-next", 1700000000, 262144, "qwen3next", lk, 2};
    const int32_t toks[] = {1, 22, 333};
    hy_api_tok_req_t *t = NULL;
    hy_api_error_t e;
    char *s = NULL;
    int ok;

    hy_api_format_models(&mi, &s, NULL);
    ok = strcmp(s, "{\"object\":\"list\",\"data\":[{\"id\":\"qwen3-next\",\"object\":\"model\","
                   "\"created\":1700000000,\"owned_by\":\"hyserve\",\"max_model_len\":262144,"
                   "\"architecture\":\"qwen3next\",\"layer_kinds\":{\"attention\":12,"
                   "\"linear_attention\":36}}]}") == 0;
    HY_T_OK(ok, "/v1/models body");
    free(s);

    ok = hy_api_parse_tokenize("{\"prompt\":\"hi there\",\"add_special\":false}", 41, &t, &e) ==
             HY_OK &&
         strcmp(t->text, "hi there") == 0 && !t->add_special;
    hy_api_tok_req_free(t);
    ok = ok && hy_api_parse_tokenize("{\"content\":\"x\"}", 15, &t, &e) == HY_OK &&
         strcmp(t->text, "x") == 0 && t->add_special;
    hy_api_tok_req_free(t);
    ok = ok && hy_api_parse_tokenize("{\"content\":1}", 13, &t, &e) == HY_EINVAL && t == NULL &&
         strcmp(e.message, "content: expected a string, got a number") == 0;
    ok = ok && hy_api_parse_tokenize("{\"add_special\":true}", 20, &t, &e) == HY_EINVAL &&
         strcmp(e.message, "missing required field 'prompt'") == 0;
    HY_T_OK(ok, "/tokenize request: prompt or content, add_special, errors");

    ok = hy_api_parse_detokenize("{\"tokens\":[5,6]}", 16, &t, &e) == HY_OK &&
         t->n_tokens == 2 && t->tokens[1] == 6;
    hy_api_tok_req_free(t);
    ok = ok && hy_api_parse_detokenize("{\"tokens\":[5,\"6\"]}", 18, &t, &e) == HY_EINVAL &&
         strcmp(e.message, "tokens[1]: expected an integer, got a string") == 0 &&
         strcmp(e.param, "tokens") == 0;
    ok = ok && hy_api_parse_detokenize("{\"tokens\":[]}", 13, &t, &e) == HY_OK &&
         t->n_tokens == 0;
    hy_api_tok_req_free(t);
    HY_T_OK(ok, "/detokenize request: token ids, errors, empty list");

    hy_api_format_tokenize(toks, 3, 4096, &s, NULL);
    ok = strcmp(s, "{\"tokens\":[1,22,333],\"count\":3,\"max_model_len\":4096}") == 0;
    free(s);
    hy_api_format_detokenize("a\"b", 3, &s, NULL);
    ok = ok && strcmp(s, "{\"prompt\":\"a\\\"b\"}") == 0;
    free(s);
    HY_T_OK(ok, "/tokenize and /detokenize bodies");
}

/* ---- stop matcher ---- */

/* Feeds pieces; returns everything emitted, with '|' between calls that
 * emitted something, and whether it stopped. */
static void run_stop(const char *const *stops, size_t n_stops, bool incl,
                     const char *const *pieces, size_t n, char *out, size_t cap, bool *stopped)
{
    size_t lens[HY_STOP_MAX], i;
    hy_stop_t s;
    hy_stop_out_t o;

    for (i = 0; i < n_stops; i++)
        lens[i] = strlen(stops[i]);
    hy_stop_init(&s, stops, lens, n_stops, incl, NULL);
    out[0] = '\0';
    *stopped = false;
    for (i = 0; i <= n; i++) {
        if (i < n)
            hy_stop_feed(&s, pieces[i], strlen(pieces[i]), &o);
        else
            hy_stop_flush(&s, &o);
        if (o.emit_len > 0) {
            if (out[0])
                strncat(out, "|", cap - strlen(out) - 1);
            strncat(out, o.emit, cap - strlen(out) - 1);
        }
        if (o.stopped)
            *stopped = true;
    }
    hy_stop_free(&s);
}

static void test_stop(void)
{
    char out[256];
    bool st;

    {
        const char *stops[] = {"###"};
        const char *p[] = {"ab#", "#c", "d"};

        run_stop(stops, 1, false, p, 3, out, sizeof out, &st);
        HY_T_OK(strcmp(out, "ab|##c|d") == 0 && !st, "partial stop prefix held back, then released (%s)", out);
    }
    {
        const char *stops[] = {"###"};
        const char *p[] = {"ab#", "#", "#tail"};

        run_stop(stops, 1, false, p, 3, out, sizeof out, &st);
        HY_T_OK(strcmp(out, "ab") == 0 && st, "stop string across three chunks: text before it only (%s)", out);
    }
    {
        const char *stops[] = {"END", "ND!"};
        const char *p[] = {"xEN", "D! more"};

        run_stop(stops, 2, true, p, 2, out, sizeof out, &st);
        HY_T_OK(strcmp(out, "x|END") == 0 && st, "earliest of several stops wins; include_stop keeps it (%s)", out);
    }
    {
        /* "é" = C3 A9, "€" = E2 82 AC: never split */
        const char *stops[] = {"zz"};
        const char *p[] = {"a\xC3", "\xA9" "b\xE2\x82", "\xAC" "c"};

        run_stop(stops, 1, false, p, 3, out, sizeof out, &st);
        HY_T_OK(strcmp(out, "a|\xC3\xA9" "b|\xE2\x82\xAC" "c") == 0 && !st,
                "UTF-8 characters are never split across emits (%s)", out);
    }
    {
        const char *stops[] = {"\xC3\xA9!"};
        const char *p[] = {"caf\xC3", "\xA9", "!x"};

        run_stop(stops, 1, false, p, 3, out, sizeof out, &st);
        HY_T_OK(strcmp(out, "caf") == 0 && st, "multibyte stop string split mid-character (%s)", out);
    }
    {
        const char *p[] = {"no stops", " \xF0\x9F"};

        run_stop(NULL, 0, false, p, 2, out, sizeof out, &st);
        HY_T_OK(strcmp(out, "no stops| |\xF0\x9F") == 0 && !st,
                "no stop strings: only an unfinished character waits; flush releases it (%s)", out);
    }
    {
        hy_stop_t s;
        const char *bad = "";
        size_t zero = 0;
        char err[HY_ERR_LEN];

        HY_T_OK(hy_stop_init(&s, &bad, &zero, 1, false, err) == HY_EINVAL &&
                    strcmp(err, "stop[0]: must not be empty") == 0,
                "empty stop string refused");
    }
}

/* "priority" (lower runs earlier) and the API key's default from nginx's
 * key map, which is also the most urgent the key may ask for. */
static void test_priority(void)
{
    hy_api_req_t *r = NULL, *none = NULL;
    hy_api_error_t e;
    int32_t p = 99, p2 = 99, p3 = 99;
    int ok;

    ok = parse(CO, "{" P ",\"priority\":-7}", &r, &e) == HY_OK && r->priority_given &&
         r->priority == -7 && parse(CO, "{" P "}", &none, &e) == HY_OK && !none->priority_given;
    HY_T_OK(ok, "priority is read from the body (and absent by default)");
    ok = expect_err(CO, "{" P ",\"priority\":1001}", 400,
                    "priority = 1001: must be in [-1000, 1000]", "priority") &&
         expect_err(CO, "{" P ",\"priority\":1.5}", 400, "priority = 1.5: must be an integer",
                    "priority") &&
         expect_err(CH, "{" M ",\"priority\":\"high\"}", 400,
                    "priority: expected an integer, got a string", "priority") &&
         expect_err(CO, "{" P ",\"priorty\":1}", 400,
                    "unknown field 'priorty' (did you mean 'priority'?)", "priorty");
    HY_T_OK(ok, "a priority that is not an integer in -1000..1000 (or misspelt) is a 400");
    HY_T_OK(r != NULL && none != NULL && hy_api_priority(none, NULL, &p, &e) == HY_OK && p == 0 &&
                hy_api_priority(none, "", &p2, &e) == HY_OK && p2 == 0 &&
                hy_api_priority(r, NULL, &p3, &e) == HY_OK && p3 == -7,
            "no key priority: 0 by default, the body's value when given");
    p = p2 = 99;
    HY_T_OK(none != NULL && hy_api_priority(none, "-3", &p, &e) == HY_OK && p == -3 &&
                hy_api_priority(none, "12", &p2, &e) == HY_OK && p2 == 12,
            "the key's priority is the default");
    ok = r != NULL && hy_api_priority(r, "-3", &p, &e) != HY_OK && e.status == 403 &&
         strcmp(e.type, "permission_error") == 0 && strcmp(e.param, "priority") == 0 &&
         strcmp(e.code, "priority_not_allowed") == 0 &&
         strcmp(e.message, "priority = -7: this API key may not ask for a priority below -3 "
                           "(lower runs earlier)") == 0;
    if (!ok && r != NULL)
        printf("# got %d %s\n", e.status, e.message);
    HY_T_OK(ok, "a body priority more urgent than the key's is a 403");
    p = 99;
    HY_T_OK(r != NULL && hy_api_priority(r, "-7", &p, &e) == HY_OK && p == -7 &&
                hy_api_priority(r, "-10", &p, &e) == HY_OK && p == -7,
            "a key may ask for its own priority or a less urgent one");
    ok = none != NULL && hy_api_priority(none, "x5", &p, &e) != HY_OK && e.status == 500 &&
         strstr(e.message, "HYSERVE_KEY_PRIORITY") != NULL &&
         hy_api_priority(none, "5000", &p, &e) != HY_OK && e.status == 500;
    HY_T_OK(ok, "a malformed key priority from the site is a 500 naming it");
    hy_api_req_free(r);
    hy_api_req_free(none);
}

int main(void)
{
    test_error_tables();
    test_grammar_fields();
    test_ignored_fields();
    test_chat_full();
    test_prompts();
    test_tools();
    test_tool_shapes();
    test_malformed();
    test_error_bodies();
    test_responses();
    test_sse();
    test_models_tokenize();
    test_stop();
    test_priority();
    return hy_t_done();
}
