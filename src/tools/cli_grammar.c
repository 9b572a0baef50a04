/*
 * cli_grammar.c - constrained decoding for the offline subcommands:
 * `--grammar FILE` (GBNF), `--json-schema FILE` and `--json` (any JSON
 * object) turned into a matcher over the model's vocabulary, with the
 * same compiler and masks the engine uses.
 */
#include <stdio.h>

#include "tools/cli.h"
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

int hy_cli_grammar_open(hy_cli_grammar_t *cg, const hy_tok_t *tok, const char *grammar_file,
                        const char *schema_file, bool json, char *err)
{
    char *text = NULL, *gbnf = NULL, sub[HY_ERR_LEN];
    size_t len = 0, glen = 0;
    cJSON *schema = NULL;
    int rc;

    memset(cg, 0, sizeof *cg);
    if ((grammar_file != NULL) + (schema_file != NULL) + json > 1)
        return hy_err(err, HY_EINVAL, "give at most one of --grammar, --json-schema and --json");
    if (grammar_file == NULL && schema_file == NULL && !json)
        return HY_OK;
    if (grammar_file != NULL) {
        if ((rc = read_file(grammar_file, &gbnf, &glen, err)) != HY_OK)
            return rc;
    } else {
        if (schema_file != NULL && (rc = read_file(schema_file, &text, &len, err)) != HY_OK)
            return rc;
        schema = cJSON_ParseWithLength(json ? "{\"type\":\"object\"}" : text,
                                       json ? 17 : len);
        if (schema == NULL) {
            rc = hy_err(err, HY_EFORMAT, "%s: not valid JSON (near byte %zu)", schema_file,
                        (size_t)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - text : 0));
            goto done;
        }
        if ((rc = hy_json_schema_to_gbnf(schema, &gbnf, &glen, sub)) != HY_OK) {
            hy_err(err, rc, "%s: %s", json ? "--json" : schema_file, sub);
            goto done;
        }
    }
    if ((rc = hy_gvocab_create(&cg->vocab, tok, err)) != HY_OK ||
        (rc = hy_grammar_compile(&cg->grammar, gbnf, glen, cg->vocab, sub)) != HY_OK) {
        if (rc != HY_ENOMEM && cg->vocab != NULL)
            hy_err(err, rc, "%s: %s", grammar_file ? grammar_file : "the schema's grammar", sub);
        goto done;
    }
    rc = hy_gmatch_create(&cg->match, cg->grammar, NULL, err);
    if (rc == HY_OK)
        cg->mask = calloc((size_t)(hy_gvocab_n_vocab(cg->vocab) + 63) / 64, sizeof *cg->mask);
    if (rc == HY_OK && cg->mask == NULL)
        rc = hy_err(err, HY_ENOMEM, "out of memory");
done:
    cJSON_Delete(schema);
    free(text);
    free(gbnf);
    if (rc != HY_OK)
        hy_cli_grammar_close(cg);
    return rc;
}

int hy_cli_grammar_mask(hy_cli_grammar_t *cg, float *logits, int32_t n_vocab, bool allow_eog,
                        char *err)
{
    int32_t nv = hy_gvocab_n_vocab(cg->vocab), n;

    if (cg->match == NULL || !hy_gmatch_constrained(cg->match))
        return HY_OK;
    n = hy_gmatch_fill_mask(cg->match, cg->mask, allow_eog);
    if (n <= 0)
        return hy_err(err, n == 0 ? HY_EINVAL : n,
                      "grammar: no token can continue it at byte %llu",
                      (unsigned long long)hy_gmatch_offset(cg->match));
    hy_grammar_apply_mask(logits, cg->mask, HY_MIN(n_vocab, nv));
    for (int32_t i = nv; i < n_vocab; i++) /* padded embeddings past the vocabulary */
        logits[i] = -__builtin_inff();
    return HY_OK;
}

void hy_cli_grammar_close(hy_cli_grammar_t *cg)
{
    hy_gmatch_free(cg->match);
    hy_grammar_unref(cg->grammar);
    hy_gvocab_free(cg->vocab);
    free(cg->mask);
    memset(cg, 0, sizeof *cg);
}
