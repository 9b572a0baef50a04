/*
 * grammar.h - grammar-constrained decoding: a GBNF grammar compiled into
 * byte-level automata (one per rule, rule calls as edges), a matcher that
 * runs them as a pushdown automaton over the bytes of accepted tokens, and
 * the per-step vocabulary mask (which tokens may come next).
 *
 * The parts and who owns them:
 *   hy_grammar_t  compiled from GBNF text; immutable automaton plus a lazily
 *                 filled cache of per-state token sets (see below).  Bound to
 *                 one vocabulary (or none: then it only validates).  Refcounted.
 *   hy_gvocab_t   the token trie of one vocabulary: every token's bytes,
 *                 shared prefixes stored once; built once per tokenizer.
 *   hy_gmatch_t   one sequence's position in the grammar (its own stacks);
 *                 advanced by each accepted token.
 *
 * The mask follows XGrammar (Dong et al., 2024): for each automaton state
 * the tokens whose acceptance does not depend on what is below the top of
 * the stack are computed once (a walk of the token trie from that state
 * alone) and cached in the grammar as an "accepted" set plus a small trie
 * of "context-dependent" tokens; a step's mask is the union over the
 * matcher's stacks of the cached set, plus the context-dependent tokens
 * checked against the real stack.  The cache fills on first use of a state
 * (hy_grammar_precompute fills all of it), so it is the same for every
 * request of the grammar and a mask never depends on other requests.
 *
 * Tokens whose type is CONTROL, UNKNOWN or UNUSED, or whose text is empty,
 * are never allowed inside the grammar; end-of-generation tokens are
 * allowed exactly where the grammar accepts.  Not thread-safe: one grammar,
 * its matchers and its cache are used by one thread (the engine's).
 */
#ifndef HY_GRAMMAR_GRAMMAR_H
#define HY_GRAMMAR_GRAMMAR_H

#include "common/hy.h"
#include "model/tokenizer.h"

typedef struct hy_grammar hy_grammar_t;
typedef struct hy_gvocab hy_gvocab_t;
typedef struct hy_gmatch hy_gmatch_t;

#define HY_GRAMMAR_MAX_STATES (1 << 18) /* automaton states after expansion */
/* NFA edges the subset construction may visit: a repetition of something
 * that can match nothing (x?{0,n}) puts the rest of the repetition in every
 * automaton state, n^2 work with only n states - seconds of CPU for n =
 * 20,000; the largest grammar of the test suite visits ~640,000 */
#define HY_GRAMMAR_MAX_WORK (1 << 23)
#define HY_GRAMMAR_MAX_TRIGGERS 16
#define HY_GRAMMAR_MAX_TRIGGER_LEN 128

/* ---- vocabulary ----------------------------------------------------------- */

/* Token trie of tok's vocabulary (pieces as generated text: no special
 * rendering, no SentencePiece prefix stripping).  In grammar_cache.c, the
 * only caller of the tokenizer: the rest links without it. */
int hy_gvocab_create(hy_gvocab_t **out, const hy_tok_t *tok, char *err);
/* The same from explicit pieces (tests, tools): pieces[i].len == 0 marks a
 * token that is never allowed; eog (may be NULL) the end-of-generation ones. */
int hy_gvocab_create_pieces(hy_gvocab_t **out, int32_t n_vocab, const hy_tok_str_t *pieces,
                            const bool *eog, char *err);
void hy_gvocab_free(hy_gvocab_t *v);
int32_t hy_gvocab_n_vocab(const hy_gvocab_t *v);
/* The bytes token id contributes (len 0: never allowed inside a grammar). */
hy_tok_str_t hy_gvocab_piece(const hy_gvocab_t *v, int32_t id);
bool hy_gvocab_is_eog(const hy_gvocab_t *v, int32_t id);

/* ---- compiled grammars ---------------------------------------------------- */

typedef struct {
    int32_t n_rules;      /* rules that got an automaton (the rest were inlined) */
    int32_t n_states;     /* automaton states */
    int32_t n_cached;     /* states whose token sets are cached so far */
    int64_t cache_bytes;  /* memory of those sets */
    double compile_ms;    /* parse + automaton construction (thread CPU time) */
    double precompute_ms; /* filling the per-state cache so far (thread CPU time) */
} hy_grammar_stats_t;

/* Compiles GBNF text.  vocab may be NULL: the grammar is then only checked
 * (and usable with hy_gmatch_accept_bytes, but not for masks).  Errors are
 * the parser's, or name the rule at fault: "grammar: rule 'expr' is
 * left-recursive (expr -> term -> expr)". */
int hy_grammar_compile(hy_grammar_t **out, const char *gbnf, size_t len,
                       const hy_gvocab_t *vocab, char *err);
hy_grammar_t *hy_grammar_ref(hy_grammar_t *g);
void hy_grammar_unref(hy_grammar_t *g);
/* Fills the token-set cache of every state now (for measurements). */
int hy_grammar_precompute(hy_grammar_t *g, char *err);
void hy_grammar_stats(const hy_grammar_t *g, hy_grammar_stats_t *out);

/* ---- matching ------------------------------------------------------------- */

/* Lazy grammars (tool calls): the output is free until one of the trigger
 * strings appears in it; the grammar then constrains the text from the
 * start of that trigger on (so the grammar starts with the trigger), and
 * once it has matched completely the output is free again and the triggers
 * re-arm (several calls in one answer).  n_triggers = 0: constrained from
 * the first byte, and the sequence must end where the grammar accepts. */
typedef struct {
    int32_t n_triggers;
    const char *triggers[HY_GRAMMAR_MAX_TRIGGERS];
    size_t trigger_len[HY_GRAMMAR_MAX_TRIGGERS];
} hy_gmatch_opts_t;

int hy_gmatch_create(hy_gmatch_t **out, hy_grammar_t *g, const hy_gmatch_opts_t *o, char *err);
void hy_gmatch_free(hy_gmatch_t *m);

/* Advances by the bytes of token id (an end-of-generation token ends the
 * match).  HY_EINVAL, with the offending byte offset in err, when the
 * grammar does not allow it; the matcher is then unchanged. */
int hy_gmatch_accept_token(hy_gmatch_t *m, int32_t id, char *err);
int hy_gmatch_accept_bytes(hy_gmatch_t *m, const void *bytes, size_t n, char *err);

/* Whether token id would be accepted now (the matcher is not changed). */
bool hy_gmatch_try_token(hy_gmatch_t *m, int32_t id);

/* Whether the text so far is a complete sentence of the grammar (or, lazy,
 * whether it may end here); and whether nothing but the end may follow. */
bool hy_gmatch_can_end(const hy_gmatch_t *m);
bool hy_gmatch_done(const hy_gmatch_t *m);
/* False while a lazy grammar waits for a trigger: no mask is needed. */
bool hy_gmatch_constrained(const hy_gmatch_t *m);
/* Bytes accepted so far (the offset errors refer to). */
uint64_t hy_gmatch_offset(const hy_gmatch_t *m);

/* The tokens allowed next as a bitset of (n_vocab + 63) / 64 words; the
 * end-of-generation tokens only where the grammar may end and allow_eog.
 * Returns how many tokens are allowed (0: the grammar is stuck: no token
 * of the vocabulary continues it), or HY_ENOMEM. */
int32_t hy_gmatch_fill_mask(hy_gmatch_t *m, uint64_t *bits, bool allow_eog);
/* Sets logits of tokens outside bits to -inf. */
void hy_grammar_apply_mask(float *logits, const uint64_t *bits, int32_t n_vocab);

/* The token budget (grammar_budget.c): how many bytes the nearest end of
 * the grammar is away (0: it may end here, or a lazy grammar is not
 * constrained now; HY_ENOMEM); whether after token id the end is still at
 * most `left` bytes away (so that `left` more tokens can reach it: true
 * for tokens the mask decides, i.e. refused ones and free text); and the
 * "closing" tokens: those each of whose bytes brings the end one byte
 * nearer (at the end already: the end-of-generation tokens where
 * allow_eog).  Returns how many (0: none; HY_ENOMEM). */
int32_t hy_gmatch_distance(hy_gmatch_t *m);
bool hy_gmatch_fits(hy_gmatch_t *m, int32_t id, int32_t left);
int32_t hy_gmatch_fill_closing_mask(hy_gmatch_t *m, uint64_t *bits, bool allow_eog);
/* Whether the matcher constrains the whole output (no triggers). */
bool hy_gmatch_whole(const hy_gmatch_t *m);

/* The grammar a matcher runs. */
hy_grammar_t *hy_gmatch_grammar(const hy_gmatch_t *m);

/* Thread CPU milliseconds (the clock compile and fill times use). */
double hy_grammar_now_ms(void);

/* Thread CPU nanoseconds spent in hy_gmatch_fill_mask by this matcher,
 * and calls. */
void hy_gmatch_mask_time(const hy_gmatch_t *m, uint64_t *ns, uint64_t *calls);

#endif
