/*
 * test_json_schema.c - JSON Schema -> GBNF, keyword by keyword: for each
 * schema, JSON texts the grammar must accept and texts it must reject
 * (checked by running the compiled grammar), then every refusal with its
 * exact message (unsupported keywords, bad values, impossible ranges,
 * regular-expression features outside the subset), and the builder API a
 * tool-call grammar is written with.  Schemas and instances are written
 * with ' for " to keep them readable.
 */
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

/* s with ' turned into " (static buffers, a few at a time). */
static const char *q(const char *s)
{
    static char buf[8][4096];
    static int k;
    char *b = buf[k = (k + 1) % 8];
    size_t i;

    for (i = 0; s[i] && i + 1 < sizeof buf[0]; i++)
        b[i] = s[i] == '\'' ? '"' : s[i];
    b[i] = '\0';
    return b;
}

static hy_grammar_t *schema_grammar(const char *schema, char *err)
{
    cJSON *s = cJSON_Parse(q(schema));
    char *text = NULL;
    size_t len;
    hy_grammar_t *g = NULL;

    if (s == NULL) {
        snprintf(err, HY_ERR_LEN, "test bug: schema is not JSON");
        return NULL;
    }
    if (hy_json_schema_to_gbnf(s, &text, &len, err) == HY_OK &&
        hy_grammar_compile(&g, text, len, NULL, err) != HY_OK)
        printf("# grammar:\n%s\n", text);
    free(text);
    cJSON_Delete(s);
    return g;
}

static bool accepts(hy_grammar_t *g, const char *text)
{
    char err[HY_ERR_LEN];
    hy_gmatch_t *m = NULL;
    bool ok;

    if (hy_gmatch_create(&m, g, NULL, err) != HY_OK)
        return false;
    ok = hy_gmatch_accept_bytes(m, text, strlen(text), err) == HY_OK && hy_gmatch_can_end(m);
    hy_gmatch_free(m);
    return ok;
}

/* yes: NULL-terminated texts to accept; no: to reject. */
static void check(const char *what, const char *schema, const char *const *yes,
                  const char *const *no)
{
    char err[HY_ERR_LEN] = "";
    hy_grammar_t *g = schema_grammar(schema, err);
    const char *wrong = NULL;
    int n = 0;

    for (; g && yes && *yes; yes++, n++)
        if (!wrong && !accepts(g, q(*yes)))
            wrong = *yes;
    for (; g && no && *no; no++, n++)
        if (!wrong && accepts(g, q(*no)))
            wrong = *no;
    HY_T_OK(g != NULL && wrong == NULL, "%s: %d texts right%s%s%s", what, n,
            wrong ? "; wrong on: " : "", wrong ? wrong : "", g ? "" : err);
    hy_grammar_unref(g);
}

#define L(...) ((const char *const[]){ __VA_ARGS__, NULL })

static void test_types(void)
{
    check("string", "{'type':'string'}", L("''", "'a b'", "'\\u00e9\\n\\\"'", "'caf\xc3\xa9'"),
          L("1", "'a", "'\\x'", "'\\ud800'", "'\x01'"));
    check("integer", "{'type':'integer'}", L("0", "-7", "1234567890123456"),
          L("1.5", "01", "-0x", "12345678901234567", "1e3"));
    check("number", "{'type':'number'}", L("0", "-0.5", "3.25e-10", "1E+5", "12"),
          L("1.", ".5", "+1", "1e", "1e999"));
    check("boolean and null", "{'type':['boolean','null']}", L("true", "false", "null"),
          L("1", "'true'"));
    check("type array with integer and number", "{'type':['integer','number','string']}",
          L("1", "1.5", "'x'"), L("null"));
    check("nullable (OpenAPI)", "{'type':'string','nullable':true}", L("'a'", "null"), L("1"));
    check("no type: any JSON", "{'description':'anything'}",
          L("1", "'s'", "[1,{'a':null}]", "{'x': [true]}"), L("'a", "[1,]"));
    check("true schema: any JSON", "true", L("null", "{}"), L("nul"));
    check("keywords imply the type", "{'minLength':2}", L("'ab'"), L("'a'", "5"));
}

static void test_objects(void)
{
    const char *person = "{'type':'object','properties':{'name':{'type':'string'},"
                         "'age':{'type':'integer'},'email':{'type':'string'}},"
                         "'required':['name','email']}";

    check("properties in order, optional skippable", person,
          L("{'name':'a','email':'b'}", "{'name':'a','age':3,'email':'b'}",
            "{\n  'name': 'a',\n  'email': 'b'\n}"),
          L("{'email':'b','name':'a'}", "{'name':'a'}", "{'name':'a','email':'b','x':1}",
            "{'name':'a',,'email':'b'}", "{'name':'a','email':'b',}"));
    check("all optional", "{'properties':{'a':{'type':'integer'},'b':{'type':'integer'}}}",
          L("{}", "{'a':1}", "{'b':2}", "{'a':1,'b':2}"), L("{'b':2,'a':1}", "{,'b':2}"));
    check("additionalProperties false", "{'type':'object','properties':{'a':{}},"
                                        "'additionalProperties':false}",
          L("{}", "{'a':[1]}"), L("{'b':1}"));
    check("additionalProperties true: extra keys never repeat a declared one",
          "{'type':'object','properties':{'ab':{'type':'integer'},'abc':{'type':'integer'}},"
          "'additionalProperties':true}",
          L("{'ab':1,'x':'y'}", "{'a':1}", "{'abcd':null}", "{'abd':1,'b':2}", "{'':0}"),
          L("{'ab':1,'ab':2}", "{'x':1,'ab':2}", "{'abc':'s'}"));
    check("additionalProperties as a schema (a map)",
          "{'type':'object','additionalProperties':{'type':'integer'}}",
          L("{}", "{'k':1,'j':2}"), L("{'k':'v'}"));
    check("object with no properties: any object", "{'type':'object'}",
          L("{}", "{'a':{'b':[]}}"), L("[]"));
    check("required but undeclared is added", "{'type':'object','required':['id'],"
                                              "'properties':{'a':{}}}",
          L("{'id':5}", "{'a':1,'id':'x'}"), L("{}"));
    check("required but undeclared takes additionalProperties' schema",
          "{'type':'object','required':['id'],'additionalProperties':{'type':'integer'}}",
          L("{'id':5}", "{'id':5,'x':6}"), L("{'id':'x'}"));
    check("property schema false may not appear",
          "{'properties':{'a':{'type':'integer'},'b':false}}", L("{'a':1}"), L("{'b':1}"));
    check("escaped property names", "{'properties':{'a\\'b':{'const':1},'c\\\\d':{'const':2}},"
                                    "'required':['a\\'b','c\\\\d']}",
          L("{'a\\'b':1,'c\\\\d':2}"), L("{'ab':1,'cd':2}"));
    check("minProperties met by required", "{'properties':{'a':{},'b':{}},'required':['a'],"
                                           "'minProperties':1,'maxProperties':2}",
          L("{'a':1}"), L("{}"));
    check("unevaluatedProperties false", "{'properties':{'a':{}},'unevaluatedProperties':false}",
          L("{'a':1}"), L("{'b':1}"));
}

static void test_arrays(void)
{
    check("items with min/maxItems", "{'type':'array','items':{'type':'integer'},"
                                     "'minItems':1,'maxItems':3}",
          L("[1]", "[1, 2, 3]", "[\n  1,\n  2\n]"), L("[]", "[1,2,3,4]", "['a']", "[1,]"));
    check("empty array allowed", "{'type':'array','items':{'type':'string'}}",
          L("[]", "['a','b','c','d','e']"), L("[1]"));
    check("prefixItems then items", "{'type':'array','prefixItems':[{'type':'string'},"
                                    "{'type':'integer'}],'items':{'type':'boolean'}}",
          L("[]", "['a']", "['a',1]", "['a',1,true,false]"), L("[1]", "['a','b']", "['a',1,2]"));
    check("prefixItems and items false", "{'prefixItems':[{'const':1},{'const':2}],'items':false,"
                                         "'minItems':2}",
          L("[1,2]"), L("[1]", "[1,2,3]"));
    check("draft-4 tuple items + additionalItems", "{'items':[{'type':'integer'}],"
                                                   "'additionalItems':{'type':'string'}}",
          L("[1]", "[1,'a','b']"), L("['a']", "[1,2]"));
    check("maxItems 0", "{'type':'array','maxItems':0}", L("[]"), L("[1]"));
    check("uniqueItems false is fine", "{'type':'array','uniqueItems':false,'items':{'const':1}}",
          L("[1,1]"), L("[2]"));
    check("array of objects", "{'type':'array','items':{'type':'object','properties':"
                              "{'id':{'type':'integer'}},'required':['id']},'maxItems':2}",
          L("[{'id':1},{'id':2}]"), L("[{}]", "[{'id':1},{'id':2},{'id':3}]"));
}

static void test_enums_refs_unions(void)
{
    check("enum of mixed values", "{'enum':['red','gr\\'een',1,null,{'a':[1]},2.5]}",
          L("'red'", "'gr\\'een'", "1", "null", "{'a':[1]}", "2.5"), L("'blue'", "2", "'1'"));
    check("enum filtered by type", "{'type':'string','enum':['a',1]}", L("'a'"), L("1"));
    check("const", "{'const':'fixed'}", L("'fixed'"), L("'other'"));
    check("$defs and $ref", "{'$defs':{'pt':{'type':'object','properties':{'x':{'type':"
                            "'integer'}},'required':['x']}},'type':'array','items':"
                            "{'$ref':'#/$defs/pt'}}",
          L("[{'x':1},{'x':2}]"), L("[{'y':1}]"));
    check("recursive $ref (a tree)",
          "{'$defs':{'node':{'type':'object','properties':{'v':{'type':'integer'},'kids':"
          "{'type':'array','items':{'$ref':'#/$defs/node'}}},'required':['v']}},"
          "'$ref':'#/$defs/node'}",
          L("{'v':1}", "{'v':1,'kids':[{'v':2,'kids':[{'v':3}]},{'v':4}]}"),
          L("{'v':1,'kids':[{}]}"));
    check("definitions (draft 7) and '#' recursion",
          "{'definitions':{'s':{'type':'string'}},'type':'object','properties':{'name':"
          "{'$ref':'#/definitions/s'},'child':{'$ref':'#'}}}",
          L("{'name':'a','child':{'child':{'name':'b'}}}"), L("{'name':1}"));
    check("anyOf", "{'anyOf':[{'type':'integer'},{'type':'string','maxLength':2}]}",
          L("5", "'ab'"), L("'abc'", "1.5"));
    check("oneOf as a tagged union",
          "{'oneOf':[{'type':'object','properties':{'kind':{'const':'a'},'x':{'type':'integer'}},"
          "'required':['kind','x']},{'type':'object','properties':{'kind':{'const':'b'},"
          "'y':{'type':'string'}},'required':['kind','y']}]}",
          L("{'kind':'a','x':1}", "{'kind':'b','y':'s'}"), L("{'kind':'a','y':'s'}"));
    check("anyOf with sibling keywords (distributed)",
          "{'type':'object','properties':{'id':{'type':'integer'}},'required':['id'],"
          "'anyOf':[{'properties':{'a':{'type':'string'}},'required':['a']},"
          "{'properties':{'b':{'type':'boolean'}},'required':['b']}]}",
          L("{'id':1,'a':'x'}", "{'id':1,'b':true}"), L("{'a':'x'}", "{'id':1}"));
    check("allOf of objects merged",
          "{'allOf':[{'type':'object','properties':{'a':{'type':'integer'}},'required':['a']},"
          "{'properties':{'b':{'type':'string'}},'required':['b']}]}",
          L("{'a':1,'b':'x'}"), L("{'a':1}", "{'b':'x'}"));
    check("allOf tightens bounds", "{'allOf':[{'type':'integer','minimum':0},{'maximum':5},"
                                   "{'minimum':2}]}",
          L("2", "5"), L("1", "6"));
    check("$ref with siblings", "{'$defs':{'n':{'type':'integer','minimum':0}},"
                                "'$ref':'#/$defs/n','maximum':3}",
          L("0", "3"), L("4", "-1"));
    check("allOf with additionalProperties false drops the other branch's optional keys",
          "{'allOf':[{'properties':{'a':{}},'additionalProperties':false},"
          "{'properties':{'b':{}}}]}",
          L("{'a':1}", "{}"), L("{'b':1}"));
}

static void test_numbers(void)
{
    check("integer range [-5, 12]", "{'type':'integer','minimum':-5,'maximum':12}",
          L("-5", "-1", "0", "9", "10", "12"), L("-6", "13", "-0x", "100", "-10"));
    check("integer range [7, 1234]", "{'type':'integer','minimum':7,'maximum':1234}",
          L("7", "9", "10", "99", "100", "999", "1000", "1199", "1234"),
          L("6", "0", "1235", "1300", "2000", "10000"));
    check("integer exclusive bounds (draft 6+)", "{'type':'integer','exclusiveMinimum':0,"
                                                 "'exclusiveMaximum':100}",
          L("1", "99"), L("0", "100"));
    check("integer exclusive bounds (draft 4 booleans)", "{'type':'integer','minimum':0,"
                                                         "'exclusiveMinimum':true}",
          L("1", "123456"), L("0", "-1"));
    /* a bound past every generated integer is no bound (fuzz_api found its
     * conversion to int64_t: undefined behaviour) */
    check("integer with a maximum of 1.1e61", "{'type':'integer','minimum':0,"
                                              "'maximum':11111111111111111111111111111111111111111111111111111111111150}",
          L("0", "7", "9999999999999999"), L("-1", "1.5"));
    check("integer with a minimum of -1e300", "{'type':'integer','minimum':-1e300,'maximum':5}",
          L("-9999999999999999", "0", "5"), L("6", "50"));
    check("integer with fractional bounds", "{'type':'integer','minimum':1.5,'maximum':3.5}",
          L("2", "3"), L("1", "4"));
    check("integer only a minimum", "{'type':'integer','minimum':-3}",
          L("-3", "0", "5", "9999999999999999"), L("-4", "-30"));
    check("integer only a maximum", "{'type':'integer','maximum':-20}",
          L("-20", "-21", "-9999999999999999"), L("-19", "0", "5"));
    check("number [-1.5, 2.25)", "{'type':'number','minimum':-1.5,'exclusiveMaximum':2.25}",
          L("-1.5", "-1.49", "0", "-0.5", "2", "2.2499", "-1"), L("-1.6", "2.25", "2.250", "-2",
                                                                  "1e1"));
    check("number (0, 1]", "{'type':'number','exclusiveMinimum':0,'maximum':1}",
          L("0.0001", "1", "1.0", "0.5"), L("0", "0.0", "1.01", "-0.1"));
    check("number >= 0.1 (decimal bound, not binary)", "{'type':'number','minimum':0.1}",
          L("0.1", "0.10", "0.2", "1", "12345.5"), L("0.09", "0", "-1", "0.0999999"));
    check("number in [100, 100.5]", "{'type':'number','minimum':100,'maximum':100.5}",
          L("100", "100.25", "100.5"), L("99.9", "100.51", "101"));
    check("multipleOf 1 means integer", "{'type':'number','multipleOf':1,'minimum':0}",
          L("3"), L("3.5"));
}

static void test_strings(void)
{
    check("minLength/maxLength in code points", "{'type':'string','minLength':2,'maxLength':3}",
          L("'ab'", "'abc'", "'\xc3\xa9\xc3\xa9'", "'a\\nb'"), L("'a'", "'abcd'", "''"));
    check("pattern anchored", "{'type':'string','pattern':'^[A-Z]{2}-\\\\d{3}$'}",
          L("'AB-123'"), L("'ab-123'", "'AB-1234'", "'xAB-123'"));
    check("pattern unanchored", "{'type':'string','pattern':'ab+c'}",
          L("'abc'", "'xxabbbcyy'"), L("'ac'", "'abx'"));
    check("pattern with alternation and groups",
          "{'pattern':'^(?:cat|dog)s?$|^(?<n>[0-9]+)$'}", L("'cats'", "'dog'", "'42'"),
          L("'cow'", "'dogss'", "'4a'"));
    check("pattern: quotes and backslashes are JSON-escaped",
          "{'pattern':'^a\\\"b\\\\\\\\c$'}", L("'a\\\"b\\\\c'"), L("'a\"b'"));
    check("pattern: classes, negation, escapes", "{'pattern':'^[^a-c\\\\s][\\\\w.-]*\\\\.txt$'}",
          L("'d_x.txt'", "'Z.txt'", "'9-a.b.txt'"), L("'a.txt'", "' x.txt'", "'d.doc'"));
    check("pattern: dot excludes newlines", "{'pattern':'^.{2}$'}", L("'ab'", "'\\t\xc3\xa9'"),
          L("'a\\n'", "'abc'"));
    check("pattern: counted and lazy quantifiers", "{'pattern':'^x{2,3}?y{2}z{1,}$'}",
          L("'xxyyz'", "'xxxyyzzz'"), L("'xyyz'", "'xxyz'"));
    check("format date", "{'type':'string','format':'date'}",
          L("'2024-02-28'", "'1999-12-31'", "'0001-01-01'"),
          L("'2024-02-30'", "'2024-13-01'", "'0000-01-01'", "'2024-04-31'", "'24-01-01'"));
    check("format date-time", "{'format':'date-time'}",
          L("'2024-05-06T07:08:09Z'", "'2024-05-06T23:59:59.123+02:00'"),
          L("'2024-05-06 07:08:09Z'", "'2024-05-06T24:00:00Z'", "'2024-05-06T07:08:09'"));
    check("format time", "{'format':'time'}", L("'12:00:00Z'"), L("'12:00'"));
    check("format uuid", "{'format':'uuid'}", L("'123e4567-e89b-12d3-a456-426614174000'"),
          L("'123e4567e89b12d3a456426614174000'"));
    check("format email", "{'format':'email'}", L("'a.b+c@ex-ample.co.uk'"),
          L("'a@b'", "'@x.com'", "'a..b@x.com'"));
    check("format ipv4", "{'format':'ipv4'}", L("'192.168.0.1'", "'255.255.255.255'"),
          L("'256.1.1.1'", "'01.2.3.4'", "'1.2.3'"));
    check("format ipv6", "{'format':'ipv6'}", L("'2001:db8:0:0:0:0:2:1'"), L("'2001:db8::1'"));
    check("format hostname", "{'format':'hostname'}", L("'api.example.com'", "'localhost'"),
          L("'-a.com'", "'a_b.com'"));
    check("format uri", "{'format':'uri'}", L("'https://example.com/a/b?x=1'"),
          L("'example.com'"));
    check("format duration", "{'format':'duration'}", L("'P1Y2M3D'", "'PT5M'", "'P2W'",
                                                         "'P1DT2H'"),
          L("'P'", "'PT'", "'1D'"));
}

static void expect_error(const char *schema, const char *want)
{
    char err[HY_ERR_LEN] = "";
    cJSON *s = cJSON_Parse(q(schema));
    char *text = NULL;
    size_t len;
    int rc = s ? hy_json_schema_to_gbnf(s, &text, &len, err) : HY_EINVAL;

    HY_T_OK(rc != HY_OK && strstr(err, want) != NULL, "refused: %.60s -> %s (got: %s)", schema,
            want, err);
    free(text);
    cJSON_Delete(s);
}

static void test_refusals(void)
{
    expect_error("{'type':'string','foo':1}", "/: keyword 'foo' is not supported");
    expect_error("{'properties':{'tags':{'type':'array','uniqueItems':true}}}",
                 "/properties/tags: 'uniqueItems': true is not supported");
    expect_error("{'properties':{'a':{'type':'object','patternProperties':{}}}}",
                 "/properties/a: keyword 'patternProperties' is not supported");
    expect_error("{'type':'number','multipleOf':0.5}", "'multipleOf' other than 1 is not supported");
    expect_error("{'type':'array','contains':{}}", "keyword 'contains' is not supported");
    expect_error("{'type':'string','pattern':'(?=a)b'}", "pattern: lookahead '(?=' at offset 0 is not supported");
    expect_error("{'type':'string','pattern':'a(?<!b)'}", "lookbehind '(?<' at offset 1 is not supported");
    expect_error("{'type':'string','pattern':'(a)\\\\1'}", "backreference at offset 3 is not supported");
    expect_error("{'type':'string','pattern':'\\\\bword'}", "word boundary '\\b' at offset 0");
    expect_error("{'type':'string','pattern':'a^b'}", "anchor '^' inside the pattern at offset 1");
    expect_error("{'type':'string','pattern':'\\\\p{L}'}", "Unicode property escape");
    expect_error("{'type':'string','pattern':'(?i)abc'}", "inline flags");
    expect_error("{'type':'string','pattern':'a{5000}'}", "repetition count over 1000");
    expect_error("{'type':'string','pattern':'(ab'}", "invalid regular expression: unclosed group");
    expect_error("{'type':'string','format':'color'}", "format 'color' is not supported");
    expect_error("{'type':'string','format':'date','maxLength':3}",
                 "'format' together with minLength/maxLength is not supported");
    expect_error("{'$ref':'#/$defs/missing'}", "$ref '#/$defs/missing' does not resolve");
    expect_error("{'$ref':'https://example.com/s.json'}", "only references inside the schema");
    expect_error("{'type':'integer','minimum':5,'maximum':3}", "the range of values is empty");
    expect_error("{'type':'integer','minimum':1.2,'maximum':1.8}", "no integer lies in the range");
    expect_error("{'type':'number','exclusiveMinimum':1,'maximum':1}", "the range of values is empty");
    expect_error("{'type':'integer','minimum':1e20}", "beyond the 16-digit integers");
    expect_error("{'type':'array','minItems':3,'maxItems':2}", "maxItems 2 is below minItems 3");
    expect_error("{'type':'strin'}", "type 'strin' is not a JSON Schema type");
    expect_error("{'properties':{'a':{'type':'object','properties':{'b':{'minLength':-1}}}}}",
                 "/properties/a/properties/b: 'minLength' must be a non-negative integer");
    expect_error("{'allOf':[{'type':'string'},{'type':'integer'}]}", "types do not intersect");
    expect_error("{'allOf':[{'pattern':'a'},{'pattern':'b'}]}",
                 "allOf: the branches have different 'pattern'");
    expect_error("{'allOf':[{'properties':{'a':{}},'additionalProperties':false},"
                 "{'properties':{'b':{}},'required':['b']}]}",
                 "property 'b' is required by one branch and forbidden");
    expect_error("{'type':'object','minProperties':2}", "'minProperties' is not supported unless");
    expect_error("{'type':'object','properties':{'a':{}},'required':['b'],'additionalProperties':false}",
                 "property 'b' is required but additionalProperties is false");
    expect_error("false", "the schema false accepts no value");
    expect_error("{'enum':[1,2],'minimum':0}", "'minimum' together with enum/const is not supported");
    expect_error("{'type':'string','enum':[1,2]}", "no enum/const value has an allowed type");
    expect_error("[1]", "a schema must be an object or a boolean");
    {
        char deep[4096];
        size_t n = 0;

        for (int i = 0; i < 70; i++)
            n += (size_t)snprintf(deep + n, sizeof deep - n, "{'items':");
        n += (size_t)snprintf(deep + n, sizeof deep - n, "{}");
        for (int i = 0; i < 70; i++)
            deep[n++] = '}';
        deep[n] = '\0';
        expect_error(deep, "nested deeper than 64");
    }
}

/* What a tool-call grammar looks like when written with the builder. */
static void test_builder(void)
{
    char err[HY_ERR_LEN] = "";
    hy_jsg_t *g = NULL;
    cJSON *args = cJSON_Parse(q("{'type':'object','properties':{'city':{'type':'string'}},"
                                "'required':['city'],'additionalProperties':false}"));
    char *text = NULL, body[512];
    size_t len;
    hy_grammar_t *gr = NULL;
    hy_gmatch_opts_t o = { .n_triggers = 1, .triggers = { "<tool_call>" },
                           .trigger_len = { 11 } };
    hy_gmatch_t *m = NULL;
    const char *out = "Let me check. <tool_call>{\"name\": \"get_weather\", \"arguments\": "
                      "{\"city\": \"Oslo\"}}</tool_call> Done.";
    bool ok;

    ok = hy_jsg_create(&g) == HY_OK && hy_jsg_add_schema(g, "weather-args", args, err) == HY_OK;
    snprintf(body, sizeof body,
             "\"<tool_call>\" %s \"{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" "
             "weather-args %s \"}\" %s \"</tool_call>\"",
             hy_jsg_ws(g), hy_jsg_ws(g), hy_jsg_ws(g));
    ok = ok && hy_jsg_add_rule(g, "root", body, err) == HY_OK &&
         hy_jsg_text(g, &text, &len, err) == HY_OK &&
         hy_grammar_compile(&gr, text, len, NULL, err) == HY_OK &&
         hy_gmatch_create(&m, gr, &o, err) == HY_OK &&
         hy_gmatch_accept_bytes(m, out, strlen(out), err) == HY_OK && hy_gmatch_can_end(m);
    HY_T_OK(ok, "builder: trigger + named-function JSON, free text around it (%s)", err);
    HY_T_OK(g && hy_jsg_add_rule(g, "root", "\"x\"", err) == HY_EINVAL &&
                strstr(err, "already used") != NULL,
            "builder: a rule name cannot be defined twice");
    hy_gmatch_free(m);
    if (gr && hy_gmatch_create(&m, gr, &o, err) == HY_OK) {
        const char *bad = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"town\"";

        HY_T_OK(hy_gmatch_accept_bytes(m, bad, strlen(bad), err) == HY_EINVAL,
                "builder: arguments outside the parameter schema are refused (%s)", err);
    }
    hy_gmatch_free(m);
    hy_grammar_unref(gr);
    free(text);
    hy_jsg_free(g);
    cJSON_Delete(args);
}

int main(void)
{
    test_types();
    test_objects();
    test_arrays();
    test_enums_refs_unions();
    test_numbers();
    test_strings();
    test_refusals();
    test_builder();
    return hy_t_done();
}
