/*
 * api_tools.c - the request fields of tool calling: tools, tool_choice,
 * parallel_tool_calls and the legacy functions / function_call, checked
 * and turned into one normalised tools array (legacy functions become
 * {"type":"function","function":{...}} entries).  Each function's
 * parameters are compiled here with the JSON-Schema converter, so a schema
 * the grammar layer cannot enforce is a 400 naming the tool before
 * anything runs; the worker builds the call grammar from the same array
 * once it knows the model's call syntax (toolcall_prompt.c).
 */
#include "server/api.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_schema.h"

#define HY_API_MAX_TOOLS 128

static const cJSON *field(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

    return v == NULL || cJSON_IsNull(v) ? NULL : v;
}

static const char *kind(const cJSON *v)
{
    return v == NULL              ? "nothing"
           : cJSON_IsString(v)    ? "a string"
           : cJSON_IsNumber(v)    ? "a number"
           : cJSON_IsBool(v)      ? "a boolean"
           : cJSON_IsArray(v)     ? "an array"
           : cJSON_IsObject(v)    ? "an object"
                                  : "null";
}

static bool valid_name(const char *s)
{
    size_t i;

    for (i = 0; s[i]; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
            return false;
    return i >= 1 && i <= HY_TC_MAX_NAME;
}

/* One function definition {name, description?, parameters?, strict?}
 * (what = "tools[3].function" or "functions[3]" for the messages). */
static int check_function(const cJSON *f, const char *param, const char *what,
                          hy_api_error_t *e)
{
    const cJSON *n = field(f, "name"), *d = field(f, "description"),
                *p = field(f, "parameters"), *s = field(f, "strict"), *t;
    char *gbnf = NULL, err[HY_ERR_LEN];
    size_t len;
    int rc;

    if (!cJSON_IsObject(f))
        return hy_api_err_invalid(e, param, NULL, "%s: expected an object, got %s", what,
                                  kind(f));
    if (!cJSON_IsString(n))
        return hy_api_err_invalid(e, param, NULL, "%s.name: expected a string, got %s", what,
                                  kind(n));
    if (!valid_name(n->valuestring))
        return hy_api_err_invalid(e, param, NULL,
                                  "%s.name = '%.80s': must be 1 to 64 of a-z, A-Z, 0-9, _ and -",
                                  what, n->valuestring);
    if (d != NULL && !cJSON_IsString(d))
        return hy_api_err_invalid(e, param, NULL, "%s.description: expected a string, got %s",
                                  what, kind(d));
    if (s != NULL && !cJSON_IsBool(s))
        return hy_api_err_invalid(e, param, NULL, "%s.strict: expected a boolean, got %s", what,
                                  kind(s));
    if (p == NULL)
        return HY_OK;
    t = field(p, "type");
    if (!cJSON_IsObject(p) || (t != NULL && !(cJSON_IsString(t) &&
                                              strcmp(t->valuestring, "object") == 0)))
        return hy_api_err_invalid(e, param, NULL,
                                  "%s.parameters: must be a JSON Schema of type \"object\"",
                                  what);
    /* the call grammar is built from it: refuse now what it cannot enforce */
    rc = hy_json_schema_to_gbnf(p, &gbnf, &len, err);
    free(gbnf);
    if (rc == HY_ENOMEM)
        return hy_api_err_nomem(e, "out of memory compiling the JSON schema");
    if (rc != HY_OK)
        return hy_api_err_invalid(e, param, rc == HY_EUNSUPPORTED ? "unsupported_schema" : NULL,
                                  "Invalid schema for %s.parameters: %s", what, err);
    return HY_OK;
}

/* tools, or legacy functions turned into tools: a new array in *out. */
static int read_list(const cJSON *root, cJSON **out, hy_api_error_t *e)
{
    const cJSON *tools = field(root, "tools"), *fns = field(root, "functions"), *list, *t;
    const char *param = tools != NULL ? "tools" : "functions";
    char what[64];
    int i = 0, rc;

    *out = NULL;
    if (tools != NULL && fns != NULL)
        return hy_api_err_invalid(e, "functions", NULL,
                                  "give tools or the legacy functions, not both");
    if ((list = tools != NULL ? tools : fns) == NULL)
        return HY_OK;
    if (!cJSON_IsArray(list))
        return hy_api_err_invalid(e, param, NULL, "%s: expected an array, got %s", param,
                                  kind(list));
    if (cJSON_GetArraySize(list) == 0)
        return hy_api_err_invalid(e, param, NULL, "%s: array is empty", param);
    if (cJSON_GetArraySize(list) > HY_API_MAX_TOOLS)
        return hy_api_err_invalid(e, param, NULL, "%s: %d entries: at most %d", param,
                                  cJSON_GetArraySize(list), HY_API_MAX_TOOLS);
    cJSON_ArrayForEach(t, list) {
        const cJSON *f = t;

        if (tools != NULL) {
            const cJSON *ty = field(t, "type");

            snprintf(what, sizeof what, "tools[%d]", i);
            if (!cJSON_IsObject(t))
                return hy_api_err_invalid(e, param, NULL, "%s: expected an object, got %s",
                                          what, kind(t));
            if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function") != 0)
                return hy_api_err_invalid(e, param, NULL, "%s.type: must be \"function\"",
                                          what);
            f = field(t, "function");
            snprintf(what, sizeof what, "tools[%d].function", i);
        } else {
            snprintf(what, sizeof what, "functions[%d]", i);
        }
        if ((rc = check_function(f, param, what, e)) != HY_OK)
            return rc;
        for (int j = 0; j < i; j++) {
            const cJSON *o = cJSON_GetArrayItem(list, j);
            const cJSON *on = field(tools != NULL ? field(o, "function") : o, "name");

            if (strcmp(on->valuestring, field(f, "name")->valuestring) == 0)
                return hy_api_err_invalid(e, param, NULL, "%s.name = '%s': defined twice",
                                          what, on->valuestring);
        }
        i++;
    }
    if (tools != NULL) {
        *out = cJSON_Duplicate(tools, true);
    } else if ((*out = cJSON_CreateArray()) != NULL) {
        cJSON_ArrayForEach(t, fns) {
            cJSON *w = cJSON_CreateObject();

            if (w == NULL || !cJSON_AddItemToArray(*out, w) ||
                cJSON_AddStringToObject(w, "type", "function") == NULL ||
                !cJSON_AddItemToObject(w, "function", cJSON_Duplicate(t, true))) {
                cJSON_Delete(*out);
                *out = NULL;
                break;
            }
        }
    }
    return *out != NULL ? HY_OK : hy_api_err_nomem(e, "out of memory");
}

static bool has_function(const cJSON *tools, const char *name)
{
    const cJSON *t;

    cJSON_ArrayForEach(t, tools) {
        const cJSON *n = field(field(t, "function"), "name");

        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return true;
    }
    return false;
}

/* tool_choice, or the legacy function_call. */
static int read_choice(const cJSON *root, const cJSON *tools, hy_api_tools_t *o,
                       hy_api_error_t *e)
{
    const cJSON *tc = field(root, "tool_choice"), *fc = field(root, "function_call"), *v, *n;
    const char *param = tc != NULL ? "tool_choice" : "function_call";

    if (tc != NULL && fc != NULL)
        return hy_api_err_invalid(e, "function_call", NULL,
                                  "give tool_choice or the legacy function_call, not both");
    o->choice = tools != NULL ? HY_TOOL_CHOICE_AUTO : HY_TOOL_CHOICE_NONE;
    if ((v = tc != NULL ? tc : fc) == NULL)
        return HY_OK;
    if (cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "none") == 0)
            o->choice = HY_TOOL_CHOICE_NONE;
        else if (strcmp(v->valuestring, "auto") == 0)
            o->choice = HY_TOOL_CHOICE_AUTO;
        else if (tc != NULL && strcmp(v->valuestring, "required") == 0)
            o->choice = HY_TOOL_CHOICE_REQUIRED;
        else
            return hy_api_err_invalid(e, param, NULL,
                                      "%s = '%.64s': must be none, auto%s or %s", param,
                                      v->valuestring, tc != NULL ? ", required" : "",
                                      tc != NULL ? "a function object" : "{\"name\": ...}");
    } else if (cJSON_IsObject(v)) {
        const cJSON *ty = field(v, "type");

        if (tc != NULL && ty != NULL &&
            !(cJSON_IsString(ty) && strcmp(ty->valuestring, "function") == 0))
            return hy_api_err_invalid(e, param, NULL, "tool_choice.type: must be \"function\"");
        n = field(tc != NULL ? field(v, "function") : v, "name");
        if (!cJSON_IsString(n))
            return hy_api_err_invalid(e, param, NULL, "%s: expected a string, got %s",
                                      tc != NULL ? "tool_choice.function.name"
                                                 : "function_call.name",
                                      kind(n));
        o->choice = HY_TOOL_CHOICE_NAMED;
        snprintf(o->name, sizeof o->name, "%.64s", n->valuestring);
        if (tools != NULL && !has_function(tools, n->valuestring))
            return hy_api_err_invalid(e, param, NULL, "%s: no function named '%.64s' in %s",
                                      param, n->valuestring, tc != NULL ? "tools" : "functions");
    } else {
        return hy_api_err_invalid(e, param, NULL, "%s: expected a string or an object, got %s",
                                  param, kind(v));
    }
    if (tools == NULL && o->choice != HY_TOOL_CHOICE_NONE)
        return hy_api_err_invalid(e, param, NULL, "%s is only allowed when %s are given", param,
                                  tc != NULL ? "tools" : "functions");
    return HY_OK;
}

int hy_api_read_tools(const cJSON *root, hy_api_tools_t *o, hy_api_error_t *e)
{
    const cJSON *ptc = field(root, "parallel_tool_calls");
    cJSON *tools = NULL;
    int rc;

    memset(o, 0, sizeof *o);
    o->parallel = true;
    if (ptc != NULL && !cJSON_IsBool(ptc))
        return hy_api_err_invalid(e, "parallel_tool_calls", NULL,
                                  "parallel_tool_calls: expected a boolean, got %s", kind(ptc));
    if (ptc != NULL)
        o->parallel = cJSON_IsTrue(ptc);
    o->legacy = field(root, "functions") != NULL || field(root, "function_call") != NULL;
    if ((rc = read_list(root, &tools, e)) != HY_OK ||
        (rc = read_choice(root, tools, o, e)) != HY_OK)
        goto done;
    /* the legacy API answers with one function_call */
    if (o->legacy || o->choice == HY_TOOL_CHOICE_NAMED)
        o->parallel = false;
    if (tools != NULL && (o->tools = cJSON_PrintUnformatted(tools)) == NULL)
        rc = hy_api_err_nomem(e, "out of memory");
done:
    cJSON_Delete(tools);
    return rc;
}

int hy_api_check_tool_calls(const cJSON *calls, const char *where, hy_api_error_t *e)
{
    const cJSON *c;
    int i = 0;

    cJSON_ArrayForEach(c, calls) {
        const cJSON *f = field(c, "function"), *n = field(f, "name"), *a = field(f, "arguments"),
                    *id = field(c, "id");

        if (!cJSON_IsObject(c))
            return hy_api_err_invalid(e, where, NULL, "%s[%d]: expected an object, got %s",
                                      where, i, kind(c));
        if (id != NULL && !cJSON_IsString(id))
            return hy_api_err_invalid(e, where, NULL, "%s[%d].id: expected a string, got %s",
                                      where, i, kind(id));
        if (!cJSON_IsObject(f))
            return hy_api_err_invalid(e, where, NULL,
                                      "%s[%d].function: expected an object, got %s", where, i,
                                      kind(f));
        if (!cJSON_IsString(n))
            return hy_api_err_invalid(e, where, NULL,
                                      "%s[%d].function.name: expected a string, got %s", where,
                                      i, kind(n));
        if (a != NULL && !cJSON_IsString(a))
            return hy_api_err_invalid(e, where, NULL,
                                      "%s[%d].function.arguments: expected a string (JSON "
                                      "text), got %s",
                                      where, i, kind(a));
        i++;
    }
    return HY_OK;
}
