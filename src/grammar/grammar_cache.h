/*
 * grammar_cache.h - how a grammar travels with a request and where the
 * compiled form is kept.
 *
 * A request's grammar is a "spec": GBNF text plus, for lazy grammars, the
 * trigger strings, packed into one byte string that fits next to the
 * prompt in the request's shared-memory slot (the worker packs it after
 * validating it; the engine unpacks it).  The engine compiles each
 * distinct GBNF text once and keeps it, with its per-state token cache, in
 * a small LRU keyed by the text's SHA-256 (a hit also compares the text),
 * so every request with the same schema reuses the same automaton and the
 * masks already computed for it.
 */
#ifndef HY_GRAMMAR_CACHE_H
#define HY_GRAMMAR_CACHE_H

#include "grammar/grammar.h"

#define HY_GRAMMAR_SPEC_MAGIC "HYG1"
#define HY_GRAMMAR_MAX_TEXT (256 * 1024) /* bytes of GBNF one request may carry */
/* The largest spec hy_grammar_spec_pack makes: header, the most triggers
 * at their longest, the longest text (a transport's size limit). */
#define HY_GRAMMAR_MAX_SPEC \
    (12 + HY_GRAMMAR_MAX_TRIGGERS * (4 + HY_GRAMMAR_MAX_TRIGGER_LEN) + HY_GRAMMAR_MAX_TEXT)

/* Packs gbnf (and o's triggers, o may be NULL) into *out (malloc'd). */
int hy_grammar_spec_pack(const char *gbnf, size_t len, const hy_gmatch_opts_t *o, char **out,
                         size_t *out_len, char *err);
/* Unpacks buf; *gbnf and o's triggers point into buf.  Every length is
 * checked against len. */
int hy_grammar_spec_unpack(const void *buf, size_t len, const char **gbnf, size_t *gbnf_len,
                           hy_gmatch_opts_t *o, char *err);

typedef struct hy_grammar_cache hy_grammar_cache_t;

typedef struct {
    uint64_t lookups, hits, compiles;
    double compile_ms; /* total */
    int32_t entries;
} hy_grammar_cache_stats_t;

/* capacity: compiled grammars kept (at least 1). */
int hy_grammar_cache_create(hy_grammar_cache_t **out, const hy_gvocab_t *vocab, int32_t capacity,
                            char *err);
void hy_grammar_cache_free(hy_grammar_cache_t *c);
/* The compiled grammar for gbnf (a new reference: hy_grammar_unref it). */
int hy_grammar_cache_get(hy_grammar_cache_t *c, const char *gbnf, size_t len, hy_grammar_t **out,
                         bool *hit, char *err);
void hy_grammar_cache_stats(const hy_grammar_cache_t *c, hy_grammar_cache_stats_t *out);

#endif
