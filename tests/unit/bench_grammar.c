/*
 * bench_grammar.c - what grammar-constrained decoding costs per token,
 * without a model's forward pass: a JSON document is tokenized with a real
 * vocabulary and replayed token by token through the matcher, timing each
 * step's mask in thread CPU time (the machine may be shared).  Reports the
 * vocabulary trie build, schema compile (to GBNF and to automata), the
 * first pass (token sets filled on first use: what the first request with
 * a new schema pays), a warm pass (cached sets: every later request), the
 * same with the caches flushed before each mask (as a forward pass does in
 * the engine), and filling every state's set up front.  Each mask is also
 * applied to a row of logits, as the engine does.
 *
 *   tests/unit/bench_grammar MODEL.gguf SCHEMA.json DOCUMENT.json [reps]
 * SCHEMA.json may be "json" (any JSON object).
 *   tests/unit/bench_grammar MODEL.gguf --corpus DIR
 * compiles every *.json schema of DIR and fills all its token sets: the
 * distribution (median, 90th percentile, max) of each cost.
 * Built by make check, not run.
 */
#include "bench.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CPU CLOCK_THREAD_CPUTIME_ID

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *b = NULL;
    long n;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0 || (b = malloc((size_t)n + 1)) == NULL ||
        fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    } else {
        b[n] = '\0';
        *len = (size_t)n;
    }
    if (f)
        fclose(f);
    return b;
}

/* What a forward pass does to the caches between two masks in the
 * engine: stream 64 MiB (the default model's weights are 92 MiB). */
static char *flush_buf;
static void flush_caches(void)
{
    if (flush_buf == NULL && (flush_buf = malloc(64 << 20)) == NULL)
        return;
    for (size_t i = 0; i < (64u << 20); i += 64)
        flush_buf[i]++;
}

/* One pass over the document: mask (and apply it to a row of logits) then
 * accept, per token.  cold: flush the caches before each mask, as the
 * engine's forward pass does.  Returns the CPU seconds spent in masks, or
 * -1 if the grammar refused a token. */
static double pass(hy_grammar_t *g, const int32_t *ids, size_t n, int32_t n_vocab, double *max_s,
                   bool cold)
{
    char err[HY_ERR_LEN];
    uint64_t *bits = calloc((size_t)(n_vocab + 63) / 64, sizeof *bits);
    float *logits = calloc((size_t)n_vocab, sizeof *logits);
    hy_gmatch_t *m = NULL;
    double total = 0;

    *max_s = 0;
    if (bits == NULL || logits == NULL || hy_gmatch_create(&m, g, NULL, err) != HY_OK)
        return -1;
    for (size_t i = 0; i < n; i++) {
        double t0, dt;

        if (cold)
            flush_caches();
        t0 = bench_clock_s(CPU);
        hy_gmatch_fill_mask(m, bits, true);
        hy_grammar_apply_mask(logits, bits, n_vocab);
        dt = bench_clock_s(CPU) - t0;
        total += dt;
        *max_s = dt > *max_s ? dt : *max_s;
        if (!((bits[ids[i] / 64] >> (ids[i] % 64)) & 1) ||
            hy_gmatch_accept_token(m, ids[i], err) != HY_OK) {
            fprintf(stderr, "token %zu (id %d) refused: %s\n", i, ids[i], err);
            total = -1;
            break;
        }
    }
    hy_gmatch_free(m);
    free(bits);
    free(logits);
    return total;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void report(const char *what, double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    printf("bench_grammar corpus %s: median %.2f p90 %.2f max %.2f\n", what, v[n / 2],
           v[(int)(0.9 * (n - 1))], v[n - 1]);
}

/* Every schema of dir: compile and fill times (ms of thread CPU). */
static int corpus(hy_gvocab_t *v, const char *dir, char *err)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char *names[1024];
    int n = 0, rc = HY_OK;
    double conv[1024], comp[1024], fill[1024], states[1024];

    if (d == NULL)
        return hy_err(err, HY_EIO, "cannot open %s", dir);
    while ((de = readdir(d)) != NULL && n < 1024)
        if (strstr(de->d_name, ".json") != NULL)
            names[n++] = strdup(de->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, name_cmp);
    for (int i = 0; i < n && rc == HY_OK; i++) {
        char path[4096], *text, *gbnf = NULL;
        size_t len = 0, glen = 0;
        cJSON *schema;
        hy_grammar_t *g = NULL;
        hy_grammar_stats_t st;
        double t0, t1;

        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if ((text = slurp(path, &len)) == NULL || (schema = cJSON_Parse(text)) == NULL) {
            free(text);
            rc = hy_err(err, HY_EIO, "%s: cannot read", path);
            break;
        }
        t0 = bench_clock_s(CPU);
        rc = hy_json_schema_to_gbnf(schema, &gbnf, &glen, err);
        t1 = bench_clock_s(CPU);
        if (rc == HY_OK)
            rc = hy_grammar_compile(&g, gbnf, glen, v, err);
        conv[i] = (t1 - t0) * 1e3;
        comp[i] = (bench_clock_s(CPU) - t1) * 1e3;
        t0 = bench_clock_s(CPU);
        if (rc == HY_OK)
            rc = hy_grammar_precompute(g, err);
        fill[i] = (bench_clock_s(CPU) - t0) * 1e3;
        if (rc == HY_OK) {
            hy_grammar_stats(g, &st);
            states[i] = st.n_states;
        }
        if (comp[i] > 20 || fill[i] > 200)
            printf("bench_grammar corpus slow: %s compile_ms=%.1f states=%.0f fill_ms=%.1f\n",
                   names[i], comp[i], states[i], fill[i]);
        hy_grammar_unref(g);
        cJSON_Delete(schema);
        free(gbnf);
        free(text);
    }
    if (rc == HY_OK) {
        printf("bench_grammar corpus %s: %d schemas, vocabulary %d\n", dir, n,
               hy_gvocab_n_vocab(v));
        report("schema_to_gbnf_ms", conv, n);
        report("compile_ms", comp, n);
        report("automaton_states", states, n);
        report("fill_all_token_sets_ms", fill, n);
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    return rc;
}

int main(int argc, char **argv)
{
    char err[HY_ERR_LEN];
    hy_gguf_t *gg = NULL;
    hy_tok_t *tok = NULL;
    hy_gvocab_t *v = NULL;
    hy_grammar_t *g = NULL;
    cJSON *schema = NULL;
    char *doc = NULL, *sch = NULL, *gbnf = NULL;
    size_t doc_len = 0, sch_len = 0, glen = 0, n_ids = 0;
    int32_t *ids = NULL;
    int reps = argc > 4 ? atoi(argv[4]) : 5, rc = 1;
    double t0, t_vocab, t_json = 1e9, t_fsm = 1e9, cold, warm = 1e9, cold_max, warm_max = 0, t_all;
    double evicted = 1e9;
    hy_grammar_stats_t st;

    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL.gguf SCHEMA.json|json DOCUMENT.json [reps]\n", argv[0]);
        return 2;
    }
    if (hy_gguf_open(&gg, argv[1], err) != HY_OK || hy_tok_load(&tok, gg, err) != HY_OK)
        goto fail;
    t0 = bench_clock_s(CPU);
    if (hy_gvocab_create(&v, tok, err) != HY_OK)
        goto fail;
    t_vocab = bench_clock_s(CPU) - t0;
    if (strcmp(argv[2], "--corpus") == 0) {
        if (corpus(v, argv[3], err) != HY_OK)
            goto fail;
        rc = 0;
        goto out;
    }
    sch = strcmp(argv[2], "json") == 0 ? strdup("{\"type\":\"object\"}") : slurp(argv[2], &sch_len);
    doc = slurp(argv[3], &doc_len);
    if (sch == NULL || doc == NULL || (schema = cJSON_Parse(sch)) == NULL) {
        snprintf(err, sizeof err, "cannot read the schema or the document");
        goto fail;
    }
    while (doc_len > 0 && (doc[doc_len - 1] == '\n' || doc[doc_len - 1] == ' '))
        doc[--doc_len] = '\0';
    for (int r = 0; r < reps; r++) {
        double a = bench_clock_s(CPU), b;

        free(gbnf);
        if (hy_json_schema_to_gbnf(schema, &gbnf, &glen, err) != HY_OK)
            goto fail;
        b = bench_clock_s(CPU);
        hy_grammar_unref(g);
        if (hy_grammar_compile(&g, gbnf, glen, v, err) != HY_OK)
            goto fail;
        t_json = HY_MIN(t_json, b - a);
        t_fsm = HY_MIN(t_fsm, bench_clock_s(CPU) - b);
    }
    if (hy_tok_encode_alloc(tok, doc, doc_len, false, false, &ids, &n_ids, err) != HY_OK)
        goto fail;
    if ((cold = pass(g, ids, n_ids, hy_gvocab_n_vocab(v), &cold_max, false)) < 0)
        goto fail;
    hy_grammar_stats(g, &st);
    for (int r = 0; r < reps; r++) {
        double mx, w = pass(g, ids, n_ids, hy_gvocab_n_vocab(v), &mx, false);

        if (w < 0)
            goto fail;
        if (w < warm)
            warm = w, warm_max = mx;
    }
    for (int r = 0; r < reps; r++) {
        double mx, w = pass(g, ids, n_ids, hy_gvocab_n_vocab(v), &mx, true);

        if (w < 0)
            goto fail;
        if (w < evicted)
            evicted = w;
    }
    hy_grammar_unref(g);
    g = NULL;
    if (hy_grammar_compile(&g, gbnf, glen, v, err) != HY_OK)
        goto fail;
    t0 = bench_clock_s(CPU);
    if (hy_grammar_precompute(g, err) != HY_OK)
        goto fail;
    t_all = bench_clock_s(CPU) - t0;
    printf("bench_grammar vocab=%d trie_build_ms=%.1f gbnf_bytes=%zu schema_to_gbnf_ms=%.2f "
           "compile_ms=%.2f states=%d rules=%d\n",
           hy_gvocab_n_vocab(v), t_vocab * 1e3, glen, t_json * 1e3, t_fsm * 1e3, st.n_states,
           st.n_rules);
    printf("bench_grammar tokens=%zu first_pass_ms_per_token=%.3f (max %.2f, %d sets filled "
           "%.1f ms) warm_ms_per_token=%.4f (max %.3f) warm_after_cache_flush_ms_per_token=%.4f "
           "precompute_all_ms=%.1f\n",
           n_ids, cold * 1e3 / (double)n_ids, cold_max * 1e3, st.n_cached, st.precompute_ms,
           warm * 1e3 / (double)n_ids, warm_max * 1e3, evicted * 1e3 / (double)n_ids,
           t_all * 1e3);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "bench_grammar: %s\n", err);
out:
    hy_grammar_unref(g);
    hy_gvocab_free(v);
    hy_tok_free(tok);
    hy_gguf_close(gg);
    cJSON_Delete(schema);
    free(doc);
    free(sch);
    free(gbnf);
    free(ids);
    free(flush_buf);
    return rc;
}
