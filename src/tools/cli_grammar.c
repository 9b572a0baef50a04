/*
 * cli_grammar.c - constrained decoding for the offline subcommands:
 * `--grammar FILE` (GBNF), `--json-schema FILE` and `--json` (any JSON
 * object) turned into the grammar spec a request carries to the engine
 * (grammar/grammar_cache.h), which masks with the same compiler and cache
 * as the server's.  The text is compiled once here, without a vocabulary,
 * so that a mistake is reported with the file's name before the model
 * loads rather than as a failed generation.
 */
#include <stdio.h>

#include "tools/cli.h"
#include "grammar/grammar.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"

#include <stdlib.h>
#include <string.h>

static int read_file(const char *path, char **buf, size_t *len, char *err)
{
    FILE *f = fopen(path, "rb");
    int rc;

    if (f == NULL)
        return hy_err(err, HY_EIO, "cannot open %s", path);
    rc = hy_cli_read_all(f, buf, len);
    fclose(f);
    return rc == 0 ? HY_OK : hy_err(err, HY_EIO, "cannot read %s", path);
}

/* The schema file (or, for --json, any object) as GBNF text. */
static int schema_gbnf(const char *schema_file, bool json, char **gbnf, size_t *glen, char *err)
{
    static const char any_object[] = "{\"type\":\"object\"}";
    char *text = NULL, sub[HY_ERR_LEN];
    size_t len = 0;
    cJSON *schema = NULL;
    int rc;

    if (!json && (rc = read_file(schema_file, &text, &len, err)) != HY_OK)
        return rc;
    schema = cJSON_ParseWithLength(json ? any_object : text, json ? sizeof any_object - 1 : len);
    if (schema == NULL) {
        rc = hy_err(err, HY_EFORMAT, "%s: not valid JSON (near byte %zu)", schema_file,
                    (size_t)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - text : 0));
        goto done;
    }
    if ((rc = hy_json_schema_to_gbnf(schema, gbnf, glen, sub)) != HY_OK)
        hy_err(err, rc, "%s: %s", json ? "--json" : schema_file, sub);
done:
    cJSON_Delete(schema);
    free(text);
    return rc;
}

int hy_cli_grammar_spec(const char *grammar_file, const char *schema_file, bool json,
                        char **spec, size_t *spec_len, char *err)
{
    char *gbnf = NULL, sub[HY_ERR_LEN];
    size_t glen = 0;
    hy_grammar_t *g = NULL;
    int rc;

    *spec = NULL;
    *spec_len = 0;
    if ((grammar_file != NULL) + (schema_file != NULL) + json > 1)
        return hy_err(err, HY_EINVAL, "give at most one of --grammar, --json-schema and --json");
    if (grammar_file == NULL && schema_file == NULL && !json)
        return HY_OK;
    rc = grammar_file != NULL ? read_file(grammar_file, &gbnf, &glen, err)
                              : schema_gbnf(schema_file, json, &gbnf, &glen, err);
    if (rc != HY_OK)
        goto done;
    if ((rc = hy_grammar_compile(&g, gbnf, glen, NULL, sub)) != HY_OK) {
        hy_err(err, rc, "%s: %s", grammar_file ? grammar_file : "the schema's grammar", sub);
        goto done;
    }
    if ((rc = hy_grammar_spec_pack(gbnf, glen, NULL, spec, spec_len, sub)) != HY_OK)
        hy_err(err, rc, "%s: %s", grammar_file ? grammar_file : "the schema's grammar", sub);
done:
    hy_grammar_unref(g);
    free(gbnf);
    return rc;
}
