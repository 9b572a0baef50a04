/*
 * grammar_impl.h - what the grammar files share and nobody else sees: the
 * compiled automaton (one deterministic byte automaton per rule, rule calls
 * as labelled edges), the token trie, the per-state token-set cache and the
 * pool of stack nodes the pushdown automaton runs on.
 *
 * A stack is a chain of nodes (state, parent): the top node's state is the
 * position in the rule being matched, each parent the position to resume in
 * the caller once that rule ends.  Nodes are interned per pool, so equal
 * stacks are equal ids and a set of stacks is a sorted id array.
 */
#ifndef HY_GRAMMAR_IMPL_H
#define HY_GRAMMAR_IMPL_H

#include "grammar/grammar.h"

/* ---- automaton ---- */

typedef struct {
    uint8_t lo, hi; /* inclusive byte range */
    int32_t to;
} hy_gedge_t;

typedef struct {
    int32_t rule, to; /* enter rule; resume at state `to` when it ends */
} hy_gcall_t;

typedef struct {
    int32_t e0, ne; /* byte edges edges[e0, e0+ne): sorted by lo, disjoint */
    int32_t c0, nc; /* calls[c0, c0+nc): one per called rule */
    int32_t rule;   /* the rule this state belongs to */
    uint8_t final;  /* the rule may end here */
} hy_gstate_t;

/* ---- token trie (preorder: a node's subtree is [i + 1, end)) ---- */

/* Byte classes the mask walk can accept in bulk (grammar_mask.c): a
 * subtree of the trie whose bytes all lie in class k is accepted whole
 * from a state that can take at least that many class-k bytes in a row. */
#define HY_GCLASSES 4

typedef struct {
    uint8_t byte;
    uint8_t clean;  /* bit k: every byte of this node's subtree is in class k */
    uint16_t depth; /* 1 for the children of the (implicit) root */
    uint16_t deep;  /* the deepest depth in the subtree */
    uint16_t ntok;  /* tokens whose piece ends here: toks[tok0, tok0 + ntok) */
    int32_t end;
    int32_t tok0;   /* the first token at or below this node (a subtree's tokens are
                     * toks[tok0, nodes[end].tok0)) */
} hy_gtrie_node_t;

typedef struct {
    hy_gtrie_node_t *nodes;
    int32_t n_nodes;
    int32_t *toks;
    int32_t n_toks;
    int32_t max_depth;
} hy_gtrie_t;

struct hy_gvocab {
    int32_t n_vocab;
    int32_t n_words;     /* (n_vocab + 63) / 64 */
    uint8_t *bytes;      /* every piece, concatenated */
    int64_t *off;        /* [n_vocab] */
    uint32_t *len;       /* [n_vocab]; 0 = never inside a grammar */
    uint64_t *eog_bits;  /* [n_words] */
    int32_t *eog_ids;
    int32_t n_eog;
    hy_gtrie_t trie;     /* every allowed token */
};

/* ---- per-state token sets ---- */

typedef struct {
    int8_t ready;
    int32_t n_acc;       /* tokens accepted whatever the stack below */
    uint64_t *acc_bits;  /* dense form (many tokens) or NULL */
    int32_t *acc_ids;    /* sparse form (few tokens) or NULL */
    hy_gtrie_t dep;      /* tokens that leave the rule with bytes to spare */
} hy_gentry_t;

/* ---- stack node pools ---- */

#define HY_GNODE_ROOT (-1)   /* below the start rule: popping here accepts */
#define HY_GNODE_BOTTOM (-2) /* unknown caller (cache filling): popping here
                              * makes the token context-dependent */

typedef struct {
    int32_t state, parent;
} hy_gnode_t;

typedef struct {
    int32_t *ids;
    int32_t n, cap;
    uint8_t accept;  /* a path popped to ROOT: the grammar may end here */
    uint8_t escape;  /* a path popped to BOTTOM */
    uint8_t dep;     /* trie walks: the token so far could go on in the caller */
    uint64_t follow[4]; /* with escape: the bytes that may follow the rules that ended */
} hy_gset_t;

typedef struct {
    const struct hy_grammar *g;
    hy_gnode_t *nodes;
    int32_t n, cap;
    int32_t *slot;     /* [cap] each node's hash slot */
    uint32_t *seen;    /* [cap] visit stamps */
    uint32_t stamp;
    int32_t *table;    /* [tcap] node id or -1 */
    uint32_t tcap;
    int32_t *work;     /* explicit expansion stack */
    int32_t wcap;
    /* Step memo for one-stack sets (cache filling only, where nodes are
     * never rolled back): (node, byte) -> the resulting set, so walking
     * the vocabulary trie from a wide state costs a lookup per trie node.
     * This is a lazily built DFA over the stacks seen. */
    bool memo_on;
    int32_t **mrow;    /* [mrows] per node: 256 offsets into mids (-1 unknown), lazily */
    int32_t mrows;
    int32_t *mids;     /* results: count | flags << 24, then the ids */
    int64_t n_mids, cap_mids;
} hy_gpool_t;

struct hy_grammar {
    int refs;
    int32_t n_states;
    hy_gstate_t *st;
    hy_gedge_t *edges;
    int32_t n_edges;
    hy_gcall_t *calls;
    int32_t n_calls;
    int32_t n_rules;     /* rules with an automaton */
    int32_t *rule_start; /* [n_rules] */
    char **rule_name;    /* [n_rules] */
    int32_t root;        /* rule index of root */
    const hy_gvocab_t *vocab;
    hy_gentry_t *cache;  /* [n_states] when vocab != NULL */
    int32_t (*run)[HY_GCLASSES]; /* [n_states] class-k bytes the state can take in a row
                                  * (INT32_MAX: any number) */
    uint64_t (*follow)[4];       /* [n_rules] bytes that may come right after the rule
                                  * ends, in any caller (XGrammar's context expansion) */
    int32_t *dist;       /* [n_states] fewest bytes to the end of the state's rule,
                          * or NULL until first asked (grammar_budget.c) */
    hy_gpool_t cpool;    /* scratch for cache filling */
    hy_gset_t *clevel;   /* [vocab max depth + 1] */
    int32_t n_clevel;
    int32_t n_cached;
    int64_t cache_bytes;
    double compile_ms, precompute_ms;
};

/* ---- matchers ---- */

#define HY_GMATCH_MEMO 4 /* masks remembered per matcher */

typedef struct {
    uint64_t key;
    int32_t n_ids;
    int32_t *ids;
    uint8_t accept, eog, used;
    uint64_t *bits;
    int32_t count;
    uint64_t age;
} hy_gmemo_t;

struct hy_gmatch {
    hy_grammar_t *g;
    hy_gpool_t pool;
    hy_gset_t cur, a, b;
    uint64_t offset;
    bool ended;        /* an end-of-generation token was accepted */
    /* lazy grammars */
    int32_t n_triggers;
    char *triggers[HY_GRAMMAR_MAX_TRIGGERS];
    size_t trigger_len[HY_GRAMMAR_MAX_TRIGGERS];
    bool active;       /* constrained now */
    uint8_t tail[2 * HY_GRAMMAR_MAX_TRIGGER_LEN];
    size_t n_tail;
    /* masks */
    hy_gset_t *level;  /* [trie depth + 1] */
    int32_t n_level;
    hy_gmemo_t memo[HY_GMATCH_MEMO];
    uint64_t memo_clock;
    uint64_t mask_ns, mask_calls;
};

/* The memoised step of the one-stack set {node} by byte b: count | flags
 * << 24, then the ids; NULL when not known yet. */
static inline const int32_t *hy_gpool_memo(const hy_gpool_t *p, int32_t node, uint8_t b)
{
    const int32_t *row;

    if (node >= p->mrows || (row = p->mrow[node]) == NULL || row[b] < 0)
        return NULL;
    return p->mids + row[b];
}

/* grammar_match.c */
int hy_gpool_init(hy_gpool_t *p, const struct hy_grammar *g);
void hy_gpool_free(hy_gpool_t *p);
void hy_gpool_rollback(hy_gpool_t *p, int32_t mark);
/* Forgets every node and memo entry (cache filling, when it grew large). */
void hy_gpool_reset(hy_gpool_t *p);
int32_t hy_gpool_node(hy_gpool_t *p, int32_t state, int32_t parent);
/* out = closure of node (positions with byte edges), flags set in out */
int hy_gpool_expand(hy_gpool_t *p, int32_t node, hy_gset_t *out);
/* out = the stacks of in advanced by byte b (out is cleared first) */
int hy_gpool_step(hy_gpool_t *p, const hy_gset_t *in, uint8_t b, hy_gset_t *out);
int hy_gset_push(hy_gset_t *s, int32_t id);
void hy_gset_free(hy_gset_t *s);
int hy_gset_copy(hy_gset_t *dst, const hy_gset_t *src);
void hy_gset_sort(hy_gset_t *s);

/* grammar_mask.c */
/* sorted: ids already in piece order (as a trie walk collects them);
 * summaries: fill clean/deep for bulk acceptance (else bulk is off). */
int hy_gtrie_build(hy_gtrie_t *t, const hy_gvocab_t *v, const int32_t *ids, int32_t n,
                   bool sorted, bool summaries);
void hy_gtrie_free(hy_gtrie_t *t);
int hy_grammar_entry(struct hy_grammar *g, int32_t state, const hy_gentry_t **out);
/* Fill g->run and g->follow (after construction, with a vocabulary). */
int hy_grammar_runs(struct hy_grammar *g);
int hy_grammar_follow(struct hy_grammar *g);
void hy_grammar_free_states(struct hy_grammar *g);


#endif
