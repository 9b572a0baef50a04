/*
 * golden.h - the tiny golden models as tests/golden/tiny/manifest.json
 * lists them (scripts/make-tiny-models writes it): the one list every test
 * that runs "each golden model" iterates, so a model added to the manifest is
 * tested everywhere and a test cannot quietly drop one.  A manifest that is
 * missing or malformed is a failed TAP line, never a skip.  Static
 * functions: include once per test program, after test.h.
 */
#ifndef HY_TEST_GOLDEN_H
#define HY_TEST_GOLDEN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#define HY_T_GOLDEN_MAX 32

typedef struct {
    char name[64];  /* "qwen35moe": files are tests/golden/tiny/<name>.* */
    char arch[64];  /* general.architecture, e.g. "granitehybrid" */
    char gguf[128]; /* the file name under tests/golden/tiny/ */
    bool moe;       /* the reference config routes to experts */
    int32_t n_vocab;
} hy_t_golden_t;

/* A positive integer member of o, 0 when absent or not a number. */
static int64_t hy_t_golden_int(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

    return cJSON_IsNumber(v) && v->valuedouble > 0 ? (int64_t)v->valuedouble : 0;
}

static bool hy_t_golden_str(const cJSON *o, const char *key, char *out, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

    if (!cJSON_IsString(v) || v->valuestring[0] == '\0' || strlen(v->valuestring) >= cap)
        return false;
    memcpy(out, v->valuestring, strlen(v->valuestring) + 1);
    return true;
}

/* Reads the manifest into out[0..max).  Returns the number of models, or 0
 * after printing a failed TAP line that says what is wrong with it. */
static int hy_t_golden_models(hy_t_golden_t *out, int max) __attribute__((unused));
static int hy_t_golden_models(hy_t_golden_t *out, int max)
{
    const char *path = hy_t_srcpath("tests/golden/tiny/manifest.json");
    size_t size;
    char *text = (char *)hy_t_read_all(path, &size);
    cJSON *root = text ? cJSON_ParseWithLength(text, size) : NULL;
    const cJSON *models, *m;
    int n = 0;
    bool ok = true;

    free(text);
    models = cJSON_GetObjectItemCaseSensitive(root, "models");
    if (!cJSON_IsArray(models) || cJSON_GetArraySize(models) == 0) {
        HY_T_OK(0, "%s: %s", path, root == NULL ? "missing or not JSON" : "no \"models\" array");
        cJSON_Delete(root);
        return 0;
    }
    cJSON_ArrayForEach(m, models) {
        hy_t_golden_t *g = &out[n];
        const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "hf_config");

        if (n == max) {
            HY_T_OK(0, "%s: more than %d models (raise HY_T_GOLDEN_MAX)", path, max);
            ok = false;
            break;
        }
        memset(g, 0, sizeof *g);
        g->n_vocab = (int32_t)hy_t_golden_int(m, "n_vocab");
        g->moe = hy_t_golden_int(cfg, "num_experts") > 0 ||
                 hy_t_golden_int(cfg, "num_local_experts") > 0;
        if (!hy_t_golden_str(m, "name", g->name, sizeof g->name) ||
            !hy_t_golden_str(m, "arch", g->arch, sizeof g->arch) ||
            !hy_t_golden_str(m, "gguf", g->gguf, sizeof g->gguf) || g->n_vocab == 0) {
            HY_T_OK(0, "%s: model %d lacks name, arch, gguf or n_vocab", path, n);
            ok = false;
            break;
        }
        n++;
    }
    cJSON_Delete(root);
    return ok ? n : 0;
}

/* The manifest entry called name: a test that picks models by name fails
 * (one TAP line) when the manifest no longer has one. */
static const hy_t_golden_t *hy_t_golden_find(const hy_t_golden_t *ms, int n, const char *name)
    __attribute__((unused));
static const hy_t_golden_t *hy_t_golden_find(const hy_t_golden_t *ms, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(ms[i].name, name) == 0)
            return &ms[i];
    HY_T_OK(0, "golden model %s is not in tests/golden/tiny/manifest.json", name);
    return NULL;
}

/* "tests/golden/tiny/<gguf>" in the source tree. */
static const char *hy_t_golden_path(const hy_t_golden_t *g) __attribute__((unused));
static const char *hy_t_golden_path(const hy_t_golden_t *g)
{
    char rel[192];

    snprintf(rel, sizeof rel, "tests/golden/tiny/%s", g->gguf);
    return hy_t_srcpath(rel);
}

#endif
