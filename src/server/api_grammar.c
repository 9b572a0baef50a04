/*
 * api_grammar.c - the request fields that constrain the output to a
 * grammar, turned into one GBNF text: OpenAI's response_format
 * ({"type":"json_object"} or {"type":"json_schema","json_schema":{"name",
 * "schema","strict"}}) and llama-server's "grammar" (GBNF) and
 * "json_schema" fields.  The text is compiled here once (without a
 * vocabulary) so that every mistake comes back as a 400 naming the field,
 * the schema location and the keyword; the engine compiles it again, with
 * the vocabulary, from its cache.
 */
#include "server/api.h"
#include "grammar/grammar.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *field(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

    return v == NULL || cJSON_IsNull(v) ? NULL : v;
}

/* schema -> GBNF, errors as 400s that say where. */
static int from_schema(const cJSON *schema, const char *param, const char *what, char **gbnf,
                       size_t *len, hy_api_error_t *e)
{
    char err[HY_ERR_LEN];
    int rc = hy_json_schema_to_gbnf(schema, gbnf, len, err);

    if (rc == HY_ENOMEM)
        return hy_api_err_nomem(e, "out of memory compiling the JSON schema");
    if (rc != HY_OK)
        return hy_api_err_invalid(e, param, rc == HY_EUNSUPPORTED ? "unsupported_schema" : NULL,
                                  "Invalid schema for %s: %s", what, err);
    return HY_OK;
}

static const char *kind(const cJSON *v)
{
    return cJSON_IsString(v) ? "a string" : cJSON_IsNumber(v) ? "a number"
           : cJSON_IsBool(v) ? "a boolean" : cJSON_IsArray(v) ? "an array" : "null";
}

static int read_response_format(const cJSON *rf, char **gbnf, size_t *len, hy_api_error_t *e)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rf, "type"), *js, *name, *schema, *strict;
    char what[128];
    int rc;

    if (!cJSON_IsObject(rf))
        return hy_api_err_invalid(e, "response_format", NULL,
                                  "response_format: expected an object, got %s", kind(rf));
    if (!cJSON_IsString(t))
        return hy_api_err_invalid(e, "response_format", NULL,
                                  "response_format.type: expected a string, got %s",
                                  t ? kind(t) : "nothing");
    if (strcmp(t->valuestring, "text") == 0)
        return HY_OK;
    if (strcmp(t->valuestring, "json_object") == 0) {
        cJSON *any = cJSON_Parse("{\"type\":\"object\"}");

        if (any == NULL)
            return hy_api_err_nomem(e, "out of memory");
        rc = from_schema(any, "response_format", "response_format", gbnf, len, e);
        cJSON_Delete(any);
        return rc;
    }
    if (strcmp(t->valuestring, "json_schema") != 0)
        return hy_api_err_invalid(e, "response_format", NULL,
                                  "response_format.type = '%.64s': must be text, json_object or "
                                  "json_schema",
                                  t->valuestring);
    js = field(rf, "json_schema");
    if (!cJSON_IsObject(js))
        return hy_api_err_invalid(e, "response_format", NULL,
                                  "response_format.json_schema: expected an object with the "
                                  "schema");
    name = field(js, "name");
    schema = field(js, "schema");
    strict = field(js, "strict");
    if (name != NULL && !cJSON_IsString(name))
        return hy_api_err_invalid(e, "response_format", NULL,
                                  "response_format.json_schema.name: expected a string");
    if (strict != NULL && !cJSON_IsBool(strict))
        return hy_api_err_invalid(e, "response_format", NULL,
                                  "response_format.json_schema.strict: expected a boolean");
    if (schema != NULL && !cJSON_IsObject(schema) && !cJSON_IsBool(schema))
        return hy_api_err_invalid(e, "response_format", NULL,
                                  "response_format.json_schema.schema: expected an object");
    snprintf(what, sizeof what, "response_format '%.64s'", name ? name->valuestring : "");
    if (schema == NULL) { /* a name only: any JSON object, like json_object */
        cJSON *any = cJSON_Parse("{\"type\":\"object\"}");

        if (any == NULL)
            return hy_api_err_nomem(e, "out of memory");
        rc = from_schema(any, "response_format", what, gbnf, len, e);
        cJSON_Delete(any);
        return rc;
    }
    return from_schema(schema, "response_format", what, gbnf, len, e);
}

int hy_api_read_grammar(const cJSON *root, char **gbnf, size_t *len, hy_api_error_t *e)
{
    const cJSON *rf = field(root, "response_format"), *gr = field(root, "grammar"),
                *js = field(root, "json_schema");
    const cJSON *rt = rf ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
    bool rf_on = rf != NULL && !(cJSON_IsString(rt) && strcmp(rt->valuestring, "text") == 0);
    char err[HY_ERR_LEN];
    hy_grammar_t *g = NULL;
    int rc;

    *gbnf = NULL;
    *len = 0;
    if ((rf_on ? 1 : 0) + (gr != NULL) + (js != NULL) > 1)
        return hy_api_err_invalid(e, gr ? "grammar" : "json_schema", NULL,
                                  "give at most one of response_format, grammar and json_schema");
    if (rf != NULL) {
        rc = read_response_format(rf, gbnf, len, e);
    } else if (js != NULL) {
        if (!cJSON_IsObject(js) && !cJSON_IsBool(js))
            return hy_api_err_invalid(e, "json_schema", NULL, "json_schema: expected an object");
        rc = from_schema(js, "json_schema", "json_schema", gbnf, len, e);
    } else if (gr != NULL) {
        if (!cJSON_IsString(gr))
            return hy_api_err_invalid(e, "grammar", NULL, "grammar: expected a string (GBNF)");
        if ((*gbnf = strdup(gr->valuestring)) == NULL)
            return hy_api_err_nomem(e, "out of memory");
        *len = strlen(gr->valuestring);
        rc = HY_OK;
    } else {
        return HY_OK;
    }
    if (rc != HY_OK || *gbnf == NULL)
        return rc;
    if (*len > HY_GRAMMAR_MAX_TEXT) {
        rc = hy_api_err_invalid(e, gr ? "grammar" : js ? "json_schema" : "response_format", NULL,
                                "the grammar is %zu bytes long: at most %d", *len,
                                HY_GRAMMAR_MAX_TEXT);
        goto fail;
    }
    /* compile once to report grammar errors (and schema recursion that
     * consumes nothing) as a 400 now rather than as a failed generation */
    rc = hy_grammar_compile(&g, *gbnf, *len, NULL, err);
    hy_grammar_unref(g);
    if (rc == HY_ENOMEM) {
        rc = hy_api_err_nomem(e, "out of memory compiling the grammar");
        goto fail;
    }
    if (rc != HY_OK) {
        rc = hy_api_err_invalid(e, gr ? "grammar" : js ? "json_schema" : "response_format", NULL,
                                "%s%s", gr ? "" : "the schema's grammar is invalid: ", err);
        goto fail;
    }
    return HY_OK;
fail:
    free(*gbnf);
    *gbnf = NULL;
    return rc;
}
