/*
 * grammar_build.c - GBNF tree -> one deterministic byte automaton per rule.
 *
 * Three passes.  (1) Thompson construction of one NFA over bytes: literals
 * become byte chains, code-point classes become UTF-8 byte-range sequences
 * (surrogates excluded), repetitions are unrolled (x{2,4} = x x (x (x)?)?,
 * the nested form stays linear when determinised) or looped, and a rule
 * reference is either inlined (the rule is not recursive and small) or
 * becomes a call edge.  Inlining is what makes most tokens
 * context-independent: a token that crosses from a value into the comma
 * after it stays inside one automaton.  (2) Subset construction per called
 * rule, treating "call R" as one more symbol: equal positions collapse into
 * one state, which keeps the matcher's set of stacks small.  (3) A check
 * that no rule can call itself before consuming a byte (left recursion,
 * which would make the stack grow without input).
 */
#include "grammar/gbnf.h"
#include "grammar/grammar_impl.h"
#include "model/unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Inlining: a rule that is not recursive and has no unbounded repetition
 * of its own (a character class, whitespace, a number, a fixed object) is
 * copied into its callers, so tokens that cross from it into what follows
 * stay context-independent.  A rule with an unbounded loop (a string, an
 * open array) is called instead: its states, and their token sets, are
 * then shared by every place that uses it, which is where most tokens of
 * an answer are spent. */
#define INLINE_MAX_COST 4096 /* estimated NFA states of a rule we still inline */

enum { NE_BYTE, NE_EPS, NE_CALL };

typedef struct {
    int32_t from, to;
    int32_t kind;   /* NE_* */
    uint8_t lo, hi; /* NE_BYTE */
    int32_t rule;   /* NE_CALL: gbnf rule index */
} nfa_edge_t;

typedef struct {
    uint8_t lo, hi;
    int32_t to, state; /* state --[lo, hi]--> to */
} tail_t;

typedef struct {
    const hy_gbnf_t *gb;
    char *err;
    int rc;
    tail_t tails[64]; /* the shared tails of the character class being emitted */
    int32_t n_tails;
    /* NFA */
    int32_t n_states;
    uint8_t *final;
    int32_t cap_final;
    nfa_edge_t *e;
    int32_t n_e, cap_e;
    int32_t *first; /* CSR after freezing: edges of state s are e[first[s], first[s+1]) */
    /* rules */
    int8_t *recursive;   /* [gbnf rules] */
    int32_t *cost;       /* [gbnf rules] estimated inline size, -1 unknown */
    int32_t *fsm_of;     /* [gbnf rules] automaton rule index or -1 */
    int32_t *fsm_rules;  /* gbnf rule index per automaton rule */
    int32_t *nfa_start;  /* per automaton rule */
    int32_t n_fsm;
    int inline_depth;
} gb_t;

/* Thread CPU time: compile and token-set times are work done, which wall
 * time on a shared machine would blur. */
double hy_grammar_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int gb_nomem(gb_t *b)
{
    if (b->rc == HY_OK)
        b->rc = hy_err(b->err, HY_ENOMEM, "grammar: out of memory");
    return b->rc;
}

static int gb_too_large(gb_t *b)
{
    if (b->rc == HY_OK)
        b->rc = hy_err(b->err, HY_ERANGE,
                       "grammar: too large: more than %d automaton states after expanding "
                       "repetitions (lower a {m,n} count, maxLength or maxItems)",
                       HY_GRAMMAR_MAX_STATES);
    return b->rc;
}

/* ---- NFA construction ------------------------------------------------------- */

static int32_t nfa_state(gb_t *b)
{
    if (b->rc != HY_OK)
        return -1;
    if (b->n_states >= HY_GRAMMAR_MAX_STATES)
        return gb_too_large(b), -1;
    if (HY_GBNF_GROW(b->final, b->cap_final, b->n_states + 1) != HY_OK)
        return gb_nomem(b), -1;
    b->final[b->n_states] = 0;
    return b->n_states++;
}

static int gb_work_too_large(gb_t *b)
{
    if (b->rc == HY_OK)
        b->rc = hy_err(b->err, HY_ERANGE,
                       "grammar: too large: building its automaton visits more than %d NFA "
                       "edges (a long repetition of something that can match nothing, like "
                       "x?{0,n}: write x{0,n}, or lower the count)", HY_GRAMMAR_MAX_WORK);
    return b->rc;
}

static int nfa_edge(gb_t *b, int32_t from, int32_t to, int kind, uint8_t lo, uint8_t hi,
                    int32_t rule)
{
    if (b->rc != HY_OK)
        return b->rc;
    if (b->n_e >= 8 * HY_GRAMMAR_MAX_STATES)
        return gb_too_large(b);
    if (HY_GBNF_GROW(b->e, b->cap_e, b->n_e + 1) != HY_OK)
        return gb_nomem(b);
    b->e[b->n_e++] = (nfa_edge_t){ from, to, kind, lo, hi, rule };
    return HY_OK;
}

/* Byte-range sequences for code points [lo, hi] of one UTF-8 length,
 * each added as a chain from -> ... -> to (the splitting scheme RE2 and
 * Rust's regex-syntax use: split until every byte position is a range). */
static int utf8_seq(gb_t *b, uint32_t lo, uint32_t hi, int32_t from, int32_t to)
{
    char a[4], z[4];
    int n, i;

    for (i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;

        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0)
                return utf8_seq(b, lo, lo | m, from, to) ||
                       utf8_seq(b, (lo | m) + 1, hi, from, to);
            if ((hi & m) != m)
                return utf8_seq(b, lo, (hi & ~m) - 1, from, to) ||
                       utf8_seq(b, hi & ~m, hi, from, to);
        }
    }
    n = (int)hy_uni_encode(lo, a);
    hy_uni_encode(hi, z);
    /* built from the end, sharing tails: every sequence of a class that
     * ends in "two continuation bytes" reuses the same two states, so the
     * automaton of one character stays small (and so do unrolled strings) */
    for (i = n - 1; i > 0; i--) {
        int32_t k, st = -1;

        for (k = 0; k < b->n_tails && st < 0; k++)
            if (b->tails[k].lo == (uint8_t)a[i] && b->tails[k].hi == (uint8_t)z[i] &&
                b->tails[k].to == to)
                st = b->tails[k].state;
        if (st < 0) {
            if ((st = nfa_state(b)) < 0 ||
                nfa_edge(b, st, to, NE_BYTE, (uint8_t)a[i], (uint8_t)z[i], 0) != HY_OK)
                return b->rc ? b->rc : HY_ENOMEM;
            if (b->n_tails < (int32_t)HY_ARRAY_LEN(b->tails))
                b->tails[b->n_tails++] = (tail_t){ (uint8_t)a[i], (uint8_t)z[i], to, st };
        }
        to = st;
    }
    return nfa_edge(b, from, to, NE_BYTE, (uint8_t)a[0], (uint8_t)z[0], 0);
}

static int utf8_range(gb_t *b, uint32_t lo, uint32_t hi, int32_t from, int32_t to)
{
    static const uint32_t bounds[] = { 0x7F, 0x7FF, 0xFFFF, 0x10FFFF };

    for (int k = 0; k < 4 && lo <= hi; k++) {
        uint32_t top = hi < bounds[k] ? hi : bounds[k];

        if (lo > bounds[k])
            continue;
        /* surrogates are not characters: split around them */
        if (lo <= 0xDFFF && top >= 0xD800) {
            if (lo < 0xD800 && utf8_seq(b, lo, 0xD7FF, from, to) != HY_OK)
                return b->rc;
            if (top > 0xDFFF && utf8_seq(b, 0xE000, top, from, to) != HY_OK)
                return b->rc;
        } else if (utf8_seq(b, lo, top, from, to) != HY_OK) {
            return b->rc;
        }
        lo = top + 1;
    }
    return b->rc;
}

static int32_t rule_cost(gb_t *b, int32_t r);

/* Estimated NFA states of a node (for the inlining decision). */
static int32_t node_cost(gb_t *b, int32_t ni)
{
    const hy_gbnf_node_t *n = &b->gb->nodes[ni];
    int64_t c = 0;

    switch (n->kind) {
    case HY_GBNF_EMPTY: return 0;
    case HY_GBNF_LIT: return n->b;
    case HY_GBNF_CLASS: return 2 + 3 * n->b;
    case HY_GBNF_REF: {
        int32_t rc = rule_cost(b, n->a);
        return rc < 0 ? 1 : rc;
    }
    case HY_GBNF_SEQ:
    case HY_GBNF_ALT:
        for (int32_t i = 0; i < n->b && c < INT32_MAX / 4; i++)
            c += node_cost(b, b->gb->kids[n->a + i]) + 1;
        return (int32_t)HY_MIN(c, INT32_MAX / 4);
    case HY_GBNF_REP:
        if (n->max < 0)
            return INT32_MAX / 4; /* a loop: called, never inlined */
        c = (int64_t)node_cost(b, n->a) * HY_MAX(n->max, 1) + 2;
        return (int32_t)HY_MIN(c, INT32_MAX / 4);
    }
    return 1;
}

/* Inlined size of rule r, or -1 when it is called instead. */
static int32_t rule_cost(gb_t *b, int32_t r)
{
    if (b->recursive[r])
        return -1;
    if (b->cost[r] == -2) {
        b->cost[r] = node_cost(b, b->gb->rules[r].expr);
        if (b->cost[r] > INLINE_MAX_COST)
            b->cost[r] = -1;
    }
    return b->cost[r];
}

/* Automaton index of rule r, creating it (its NFA is built later). */
static int32_t fsm_rule(gb_t *b, int32_t r)
{
    if (b->fsm_of[r] >= 0)
        return b->fsm_of[r];
    b->fsm_rules[b->n_fsm] = r;
    b->fsm_of[r] = b->n_fsm;
    return b->n_fsm++;
}

/* Builds the fragment for node ni starting at from; returns its end. */
static int32_t emit(gb_t *b, int32_t ni, int32_t from)
{
    const hy_gbnf_node_t *n = &b->gb->nodes[ni];
    int32_t to, s, i;

    if (b->rc != HY_OK)
        return -1;
    switch (n->kind) {
    case HY_GBNF_EMPTY:
        return from;
    case HY_GBNF_LIT:
        for (i = 0; i < n->b && from >= 0; i++) {
            uint8_t c = b->gb->lits[n->a + i];

            to = nfa_state(b);
            if (to < 0 || nfa_edge(b, from, to, NE_BYTE, c, c, 0) != HY_OK)
                return -1;
            from = to;
        }
        return from;
    case HY_GBNF_CLASS:
        if ((to = nfa_state(b)) < 0)
            return -1;
        b->n_tails = 0;
        for (i = 0; i < n->b; i++)
            if (utf8_range(b, b->gb->ranges[n->a + i].lo, b->gb->ranges[n->a + i].hi, from, to) !=
                HY_OK)
                return -1;
        return to;
    case HY_GBNF_REF:
        if (rule_cost(b, n->a) >= 0 && b->inline_depth < 64) {
            b->inline_depth++;
            to = emit(b, b->gb->rules[n->a].expr, from);
            b->inline_depth--;
            return to;
        }
        if ((to = nfa_state(b)) < 0 || nfa_edge(b, from, to, NE_CALL, 0, 0, fsm_rule(b, n->a)))
            return -1;
        return to;
    case HY_GBNF_SEQ:
        for (i = 0; i < n->b && from >= 0; i++)
            from = emit(b, b->gb->kids[n->a + i], from);
        return from;
    case HY_GBNF_ALT:
        if ((to = nfa_state(b)) < 0)
            return -1;
        for (i = 0; i < n->b; i++) {
            /* a private entry per alternative: a loop inside one must not
             * lead back into the others */
            int32_t in = nfa_state(b), out;

            if (in < 0 || nfa_edge(b, from, in, NE_EPS, 0, 0, 0) != HY_OK)
                return -1;
            out = emit(b, b->gb->kids[n->a + i], in);
            if (out < 0 || nfa_edge(b, out, to, NE_EPS, 0, 0, 0) != HY_OK)
                return -1;
        }
        return to;
    case HY_GBNF_REP:
        for (i = 0; i < n->min && from >= 0; i++)
            from = emit(b, n->a, from);
        if (from < 0)
            return -1;
        if (n->max < 0) {
            /* loop: from -> in -> x -> from; exit at from */
            int32_t in = nfa_state(b), out;

            if (in < 0 || nfa_edge(b, from, in, NE_EPS, 0, 0, 0) != HY_OK)
                return -1;
            out = emit(b, n->a, in);
            if (out < 0 || nfa_edge(b, out, from, NE_EPS, 0, 0, 0) != HY_OK)
                return -1;
            /* a fresh exit, so that the loop's head is not shared with
             * whatever follows */
            if ((to = nfa_state(b)) < 0 || nfa_edge(b, from, to, NE_EPS, 0, 0, 0) != HY_OK)
                return -1;
            return to;
        }
        if ((to = nfa_state(b)) < 0)
            return -1;
        for (i = n->min; i < n->max; i++) {
            if (nfa_edge(b, from, to, NE_EPS, 0, 0, 0) != HY_OK)
                return -1;
            s = nfa_state(b);
            if (s < 0 || nfa_edge(b, from, s, NE_EPS, 0, 0, 0) != HY_OK)
                return -1;
            if ((from = emit(b, n->a, s)) < 0)
                return -1;
        }
        if (nfa_edge(b, from, to, NE_EPS, 0, 0, 0) != HY_OK)
            return -1;
        return to;
    }
    return -1;
}

/* Marks rules that can reach themselves through references (these are
 * never inlined).  Reachability by DFS from every rule: grammars have few
 * rules, and this keeps the code obvious. */
static int mark_recursive(gb_t *b)
{
    const hy_gbnf_t *gb = b->gb;
    int32_t nr = gb->n_rules, *stack = NULL, *node_stack = NULL;
    uint8_t *seen = NULL;
    int rc = HY_OK;

    stack = malloc(sizeof *stack * (size_t)(gb->n_nodes + nr + 1));
    node_stack = malloc(sizeof *node_stack * (size_t)(gb->n_nodes + gb->n_kids + nr + 1));
    seen = malloc((size_t)gb->n_nodes + 1);
    if (stack == NULL || node_stack == NULL || seen == NULL) {
        rc = gb_nomem(b);
        goto done;
    }
    for (int32_t r = 0; r < nr; r++) {
        int32_t sp = 0;

        memset(seen, 0, (size_t)gb->n_nodes + 1);
        node_stack[sp++] = gb->rules[r].expr;
        while (sp > 0 && !b->recursive[r]) {
            int32_t ni = node_stack[--sp];
            const hy_gbnf_node_t *n = &gb->nodes[ni];

            if (seen[ni])
                continue;
            seen[ni] = 1;
            switch (n->kind) {
            case HY_GBNF_REF:
                if (n->a == r)
                    b->recursive[r] = 1;
                else
                    node_stack[sp++] = gb->rules[n->a].expr;
                break;
            case HY_GBNF_SEQ:
            case HY_GBNF_ALT:
                for (int32_t i = 0; i < n->b; i++)
                    node_stack[sp++] = gb->kids[n->a + i];
                break;
            case HY_GBNF_REP:
                node_stack[sp++] = n->a;
                break;
            }
        }
    }
done:
    free(stack);
    free(node_stack);
    free(seen);
    return rc;
}

static int edge_from_cmp(const void *x, const void *y)
{
    const nfa_edge_t *a = x, *c = y;

    return a->from < c->from ? -1 : a->from > c->from;
}

/* Sorts edges by source and builds first[]. */
static int nfa_freeze(gb_t *b)
{
    if (b->n_e > 1)
        qsort(b->e, (size_t)b->n_e, sizeof *b->e, edge_from_cmp);
    b->first = calloc((size_t)b->n_states + 1, sizeof *b->first);
    if (b->first == NULL)
        return gb_nomem(b);
    for (int32_t i = 0; i < b->n_e; i++)
        b->first[b->e[i].from + 1]++;
    for (int32_t s = 0; s < b->n_states; s++)
        b->first[s + 1] += b->first[s];
    return HY_OK;
}

/* ---- subset construction ------------------------------------------------- */

typedef struct {
    int32_t *pool;   /* all sets, concatenated */
    int64_t n_pool, cap_pool;
    int64_t *off;    /* per DFA state */
    int32_t *len;
    int32_t n, cap;
    int32_t *table;  /* hash -> DFA id, -1 empty */
    uint32_t tcap;
    /* output */
    hy_gstate_t *st;
    int32_t cap_st;
    hy_gedge_t *edges;
    int32_t n_edges, cap_edges;
    hy_gcall_t *calls;
    int32_t n_calls, cap_calls;
    /* scratch */
    uint32_t *mark;
    uint32_t stamp;
    int32_t *tmp, *tmp2;
    int32_t cap_tmp;
    int64_t work;    /* NFA edges visited, against HY_GRAMMAR_MAX_WORK */
} dfa_t;

static uint64_t set_hash(const int32_t *s, int32_t n)
{
    uint64_t h = 1469598103934665603ull;

    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static int int_cmp(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, c = *(const int32_t *)y;

    return a < c ? -1 : a > c;
}

/* In place: eps-closure of s[0..n) (capacity d->cap_tmp), sorted; returns n. */
static int32_t closure(gb_t *b, dfa_t *d, int32_t *s, int32_t n)
{
    int32_t i;

    d->stamp++;
    for (i = 0; i < n; i++)
        d->mark[s[i]] = d->stamp;
    for (i = 0; i < n; i++) {
        int32_t q = s[i];

        d->work += b->first[q + 1] - b->first[q];
        for (int32_t k = b->first[q]; k < b->first[q + 1]; k++) {
            const nfa_edge_t *e = &b->e[k];

            if (e->kind == NE_EPS && d->mark[e->to] != d->stamp) {
                d->mark[e->to] = d->stamp;
                s[n++] = e->to;
            }
        }
    }
    qsort(s, (size_t)n, sizeof *s, int_cmp);
    return n;
}

static int dfa_rehash(dfa_t *d)
{
    uint32_t cap = d->tcap ? d->tcap * 2 : 1024;
    int32_t *t = malloc(sizeof *t * cap);

    if (t == NULL)
        return HY_ENOMEM;
    memset(t, 0xff, sizeof *t * cap);
    for (int32_t i = 0; i < d->n; i++) {
        uint32_t h = (uint32_t)set_hash(d->pool + d->off[i], d->len[i]) & (cap - 1);

        while (t[h] >= 0)
            h = (h + 1) & (cap - 1);
        t[h] = i;
    }
    free(d->table);
    d->table = t;
    d->tcap = cap;
    return HY_OK;
}

/* DFA id of the (closed, sorted) NFA set s, adding it when new. */
static int32_t dfa_intern(gb_t *b, dfa_t *d, const int32_t *s, int32_t n, int32_t rule)
{
    uint32_t h;

    if ((uint32_t)(d->n + 1) * 2 > d->tcap && dfa_rehash(d) != HY_OK)
        return gb_nomem(b), -1;
    h = (uint32_t)set_hash(s, n) & (d->tcap - 1);
    while (d->table[h] >= 0) {
        int32_t id = d->table[h];

        if (d->len[id] == n && memcmp(d->pool + d->off[id], s, sizeof *s * (size_t)n) == 0)
            return id;
        h = (h + 1) & (d->tcap - 1);
    }
    if (d->n >= HY_GRAMMAR_MAX_STATES)
        return gb_too_large(b), -1;
    if (d->work > HY_GRAMMAR_MAX_WORK)
        return gb_work_too_large(b), -1;
    if (d->n == d->cap) {
        int32_t cap = d->cap ? d->cap * 2 : 256;
        int64_t *off = realloc(d->off, sizeof *off * (size_t)cap);
        int32_t *len = off ? realloc(d->len, sizeof *len * (size_t)cap) : NULL;
        hy_gstate_t *st;

        if (off != NULL)
            d->off = off;
        if (len != NULL)
            d->len = len;
        st = len ? realloc(d->st, sizeof *st * (size_t)cap) : NULL;
        if (st == NULL)
            return gb_nomem(b), -1;
        d->st = st;
        d->cap = cap;
    }
    if (d->n_pool + n > d->cap_pool) {
        int64_t c = d->cap_pool ? d->cap_pool : 4096;
        int32_t *p;

        while (c < d->n_pool + n)
            c *= 2;
        if ((p = realloc(d->pool, sizeof *p * (size_t)c)) == NULL)
            return gb_nomem(b), -1;
        d->pool = p;
        d->cap_pool = c;
    }
    memcpy(d->pool + d->n_pool, s, sizeof *s * (size_t)n);
    d->off[d->n] = d->n_pool;
    d->len[d->n] = n;
    d->n_pool += n;
    memset(&d->st[d->n], 0, sizeof d->st[d->n]);
    d->st[d->n].rule = rule;
    d->table[h] = d->n;
    return d->n++;
}

/* Target set of DFA state id on byte c (before closure), in d->tmp2. */
static int32_t byte_targets(gb_t *b, dfa_t *d, int32_t id, int c)
{
    int32_t m = 0;

    d->stamp++;
    for (int32_t i = 0; i < d->len[id]; i++) {
        int32_t q = d->pool[d->off[id] + i];

        d->work += b->first[q + 1] - b->first[q];
        for (int32_t k = b->first[q]; k < b->first[q + 1]; k++) {
            const nfa_edge_t *e = &b->e[k];

            if (e->kind == NE_BYTE && e->lo <= c && c <= e->hi && d->mark[e->to] != d->stamp) {
                d->mark[e->to] = d->stamp;
                d->tmp2[m++] = e->to;
            }
        }
    }
    return m;
}

/* Fills the byte edges and calls of DFA state id (new states get queued
 * simply by being appended: the caller walks ids in order). */
static int dfa_expand(gb_t *b, dfa_t *d, int32_t id, int32_t rule)
{
    uint8_t cut[257];
    int32_t prev_to = -1, i;
    int32_t nq = d->len[id];

    if (d->work > HY_GRAMMAR_MAX_WORK)
        return gb_work_too_large(b);
    /* byte boundaries where the target set may change */
    memset(cut, 0, sizeof cut);
    for (i = 0; i < nq; i++) {
        int32_t q = d->pool[d->off[id] + i];

        if (b->final[q])
            d->st[id].final = 1;
        d->work += b->first[q + 1] - b->first[q];
        for (int32_t k = b->first[q]; k < b->first[q + 1]; k++) {
            if (b->e[k].kind == NE_BYTE) {
                cut[b->e[k].lo] = 1;
                cut[b->e[k].hi + 1] = 1;
            }
        }
    }
    d->st[id].e0 = d->n_edges;
    for (int c = 0; c < 256; c++) {
        int32_t m, to;

        if (c > 0 && !cut[c]) {
            /* same target set as c - 1: extend the last edge */
            if (prev_to >= 0)
                d->edges[d->n_edges - 1].hi = (uint8_t)c;
            continue;
        }
        m = byte_targets(b, d, id, c);
        if (m == 0) {
            prev_to = -1;
            continue;
        }
        memcpy(d->tmp, d->tmp2, sizeof *d->tmp * (size_t)m);
        m = closure(b, d, d->tmp, m);
        if ((to = dfa_intern(b, d, d->tmp, m, rule)) < 0)
            return b->rc;
        if (prev_to == to && d->edges[d->n_edges - 1].hi == c - 1) {
            d->edges[d->n_edges - 1].hi = (uint8_t)c;
        } else {
            if (HY_GBNF_GROW(d->edges, d->cap_edges, d->n_edges + 1))
                return gb_nomem(b);
            d->edges[d->n_edges++] = (hy_gedge_t){ (uint8_t)c, (uint8_t)c, to };
        }
        prev_to = to;
    }
    d->st[id].ne = d->n_edges - d->st[id].e0;

    /* calls, grouped by rule */
    d->st[id].c0 = d->n_calls;
    for (i = 0; i < nq; i++) {
        int32_t q = d->pool[d->off[id] + i];

        for (int32_t k = b->first[q]; k < b->first[q + 1]; k++) {
            const nfa_edge_t *e = &b->e[k];
            int32_t r = e->rule, m = 0, to, j;
            bool dup = false;

            if (e->kind != NE_CALL)
                continue;
            for (j = d->st[id].c0; j < d->n_calls && !dup; j++)
                dup = d->calls[j].rule == r;
            if (dup)
                continue;
            d->stamp++;
            for (int32_t i2 = 0; i2 < nq; i2++) {
                int32_t q2 = d->pool[d->off[id] + i2];

                d->work += b->first[q2 + 1] - b->first[q2];
                for (int32_t k2 = b->first[q2]; k2 < b->first[q2 + 1]; k2++) {
                    const nfa_edge_t *e2 = &b->e[k2];

                    if (e2->kind == NE_CALL && e2->rule == r && d->mark[e2->to] != d->stamp) {
                        d->mark[e2->to] = d->stamp;
                        d->tmp[m++] = e2->to;
                    }
                }
            }
            m = closure(b, d, d->tmp, m);
            if ((to = dfa_intern(b, d, d->tmp, m, rule)) < 0)
                return b->rc;
            if (HY_GBNF_GROW(d->calls, d->cap_calls, d->n_calls + 1))
                return gb_nomem(b);
            d->calls[d->n_calls++] = (hy_gcall_t){ r, to };
        }
    }
    d->st[id].nc = d->n_calls - d->st[id].c0;
    return HY_OK;
}

static void dfa_free(dfa_t *d)
{
    free(d->pool);
    free(d->off);
    free(d->len);
    free(d->table);
    free(d->st);
    free(d->edges);
    free(d->calls);
    free(d->mark);
    free(d->tmp);
    free(d->tmp2);
}

/* ---- left recursion ---------------------------------------------------------- */

/* Rules reachable at the left edge of rule r (through nullable calls),
 * into lc[r * n + x]; nullable[r] when r can end without a byte. */
static void left_calls(const hy_grammar_t *g, int32_t r, const uint8_t *nullable, uint8_t *lc,
                       uint8_t *is_null, int32_t *stack, uint8_t *seen)
{
    int32_t sp = 0, n = g->n_rules;

    stack[sp++] = g->rule_start[r];
    seen[g->rule_start[r]] = 1;
    while (sp > 0) {
        const hy_gstate_t *s = &g->st[stack[--sp]];

        if (s->final)
            *is_null = 1;
        for (int32_t k = 0; k < s->nc; k++) {
            const hy_gcall_t *c = &g->calls[s->c0 + k];

            lc[(size_t)r * (size_t)n + (size_t)c->rule] = 1;
            if (nullable[c->rule] && !seen[c->to]) {
                seen[c->to] = 1;
                stack[sp++] = c->to;
            }
        }
    }
}

static int check_left_recursion(hy_grammar_t *g, char *err)
{
    int32_t n = g->n_rules, *stack = NULL, *path = NULL;
    uint8_t *nullable = NULL, *lc = NULL, *seen = NULL, *state = NULL;
    bool changed = true;
    int rc = HY_OK;

    nullable = calloc((size_t)n, 1);
    lc = calloc((size_t)n * (size_t)n, 1);
    seen = calloc((size_t)g->n_states, 1);
    stack = malloc(sizeof *stack * (size_t)(g->n_states + n + 1));
    path = malloc(sizeof *path * (size_t)(n + 1));
    state = calloc((size_t)n, 1);
    if (!nullable || !lc || !seen || !stack || !path || !state) {
        rc = hy_err(err, HY_ENOMEM, "grammar: out of memory");
        goto done;
    }
    while (changed) {
        changed = false;
        memset(lc, 0, (size_t)n * (size_t)n);
        for (int32_t r = 0; r < n; r++) {
            uint8_t is_null = 0;

            memset(seen, 0, (size_t)g->n_states);
            left_calls(g, r, nullable, lc, &is_null, stack, seen);
            if (is_null && !nullable[r])
                nullable[r] = 1, changed = true;
        }
    }
    /* a cycle in the left-call graph (DFS with colours, path kept for
     * the message) */
    for (int32_t r0 = 0; r0 < n && rc == HY_OK; r0++) {
        int32_t depth = 0;
        int32_t *next = stack; /* per depth: the next callee to try */

        if (state[r0])
            continue;
        path[0] = r0;
        next[0] = 0;
        state[r0] = 1;
        while (depth >= 0 && rc == HY_OK) {
            int32_t r = path[depth], x = next[depth]++;

            if (x >= n) {
                state[r] = 2;
                depth--;
                continue;
            }
            if (!lc[(size_t)r * (size_t)n + (size_t)x])
                continue;
            if (state[x] == 1) {
                char cyc[256];
                size_t len = 0;
                int32_t i = depth;

                while (i > 0 && path[i] != x)
                    i--;
                for (; i <= depth && len < sizeof cyc - 70; i++)
                    len += (size_t)snprintf(cyc + len, sizeof cyc - len, "%.64s -> ",
                                            g->rule_name[path[i]]);
                snprintf(cyc + len, sizeof cyc - len, "%.64s", g->rule_name[x]);
                rc = hy_err(err, HY_EFORMAT,
                            "grammar: rule '%.64s' is left-recursive (%s): it can call itself "
                            "before matching any character",
                            g->rule_name[x], cyc);
            } else if (state[x] == 0) {
                state[x] = 1;
                path[++depth] = x;
                next[depth] = 0;
            }
        }
    }
done:
    free(nullable);
    free(lc);
    free(seen);
    free(stack);
    free(path);
    free(state);
    return rc;
}

/* ---- entry point --------------------------------------------------------------- */

static int build(gb_t *b, hy_grammar_t *g)
{
    const hy_gbnf_t *gb = b->gb;
    dfa_t d;
    int32_t r, i;

    memset(&d, 0, sizeof d);
    b->recursive = calloc((size_t)gb->n_rules, 1);
    b->cost = malloc(sizeof *b->cost * (size_t)gb->n_rules);
    b->fsm_of = malloc(sizeof *b->fsm_of * (size_t)gb->n_rules);
    b->fsm_rules = malloc(sizeof *b->fsm_rules * (size_t)gb->n_rules);
    b->nfa_start = malloc(sizeof *b->nfa_start * (size_t)gb->n_rules);
    if (!b->recursive || !b->cost || !b->fsm_of || !b->fsm_rules || !b->nfa_start)
        return gb_nomem(b);
    for (r = 0; r < gb->n_rules; r++)
        b->cost[r] = -2, b->fsm_of[r] = -1;
    if (mark_recursive(b) != HY_OK)
        return b->rc;
    fsm_rule(b, gb->root);
    /* rules get automata as references to them are emitted */
    for (i = 0; i < b->n_fsm && b->rc == HY_OK; i++) {
        int32_t start = nfa_state(b), end;

        b->nfa_start[i] = start;
        if (start < 0)
            break;
        end = emit(b, gb->rules[b->fsm_rules[i]].expr, start);
        if (end >= 0)
            b->final[end] = 1;
    }
    if (b->rc != HY_OK || nfa_freeze(b) != HY_OK)
        return b->rc;

    d.mark = calloc((size_t)b->n_states, sizeof *d.mark);
    d.cap_tmp = b->n_states + 1;
    d.tmp = malloc(sizeof *d.tmp * (size_t)d.cap_tmp);
    d.tmp2 = malloc(sizeof *d.tmp2 * (size_t)d.cap_tmp);
    g->rule_start = malloc(sizeof *g->rule_start * (size_t)b->n_fsm);
    g->rule_name = calloc((size_t)b->n_fsm, sizeof *g->rule_name);
    if (!d.mark || !d.tmp || !d.tmp2 || !g->rule_start || !g->rule_name) {
        gb_nomem(b);
        goto done;
    }
    g->n_rules = b->n_fsm;
    for (i = 0; i < b->n_fsm; i++) {
        int32_t m, id, first_new = d.n;

        if ((g->rule_name[i] = strdup(gb->rules[b->fsm_rules[i]].name)) == NULL) {
            gb_nomem(b);
            goto done;
        }
        d.tmp[0] = b->nfa_start[i];
        m = closure(b, &d, d.tmp, 1);
        if ((id = dfa_intern(b, &d, d.tmp, m, i)) < 0)
            goto done;
        g->rule_start[i] = id;
        /* ids >= first_new were created for this rule; an id below it is
         * shared with an earlier rule only if the NFA sets are equal, which
         * cannot happen across rules (their NFA states are disjoint) */
        for (int32_t s = id; s < d.n && s >= first_new; s++)
            if (dfa_expand(b, &d, s, i) != HY_OK)
                goto done;
    }
    g->root = 0;
    g->n_states = d.n;
    g->st = d.st, d.st = NULL;
    g->edges = d.edges, d.edges = NULL;
    g->n_edges = d.n_edges;
    g->calls = d.calls, d.calls = NULL;
    g->n_calls = d.n_calls;
    if (g->st == NULL || (g->edges == NULL && d.n_edges > 0))
        gb_nomem(b);
done:
    dfa_free(&d);
    return b->rc;
}

int hy_grammar_compile(hy_grammar_t **out, const char *gbnf, size_t len,
                       const hy_gvocab_t *vocab, char *err)
{
    double t0 = hy_grammar_now_ms();
    hy_gbnf_t gb;
    gb_t b;
    hy_grammar_t *g = NULL;
    int rc;

    *out = NULL;
    memset(&b, 0, sizeof b);
    if ((rc = hy_gbnf_parse(&gb, gbnf, len, err)) != HY_OK)
        return rc;
    b.gb = &gb;
    b.err = err;
    g = calloc(1, sizeof *g);
    if (g == NULL) {
        rc = hy_err(err, HY_ENOMEM, "grammar: out of memory");
        goto done;
    }
    g->refs = 1;
    if ((rc = build(&b, g)) != HY_OK)
        goto done;
    if ((rc = check_left_recursion(g, err)) != HY_OK)
        goto done;
    g->vocab = vocab;
    if (vocab != NULL) {
        g->cache = calloc((size_t)g->n_states, sizeof *g->cache);
        if (g->cache == NULL || hy_grammar_runs(g) != HY_OK || hy_grammar_follow(g) != HY_OK) {
            rc = hy_err(err, HY_ENOMEM, "grammar: out of memory");
            goto done;
        }
    }
    g->compile_ms = hy_grammar_now_ms() - t0;
    *out = g;
    g = NULL;
done:
    hy_grammar_unref(g);
    hy_gbnf_free(&gb);
    free(b.final);
    free(b.e);
    free(b.first);
    free(b.recursive);
    free(b.cost);
    free(b.fsm_of);
    free(b.fsm_rules);
    free(b.nfa_start);
    return rc;
}

hy_grammar_t *hy_grammar_ref(hy_grammar_t *g)
{
    if (g != NULL)
        g->refs++;
    return g;
}

void hy_grammar_unref(hy_grammar_t *g)
{
    if (g == NULL || --g->refs > 0)
        return;
    hy_grammar_free_states(g);
    for (int32_t i = 0; g->rule_name && i < g->n_rules; i++)
        free(g->rule_name[i]);
    free(g->rule_name);
    free(g->rule_start);
    free(g->st);
    free(g->edges);
    free(g->calls);
    free(g->dist);
    free(g);
}

void hy_grammar_stats(const hy_grammar_t *g, hy_grammar_stats_t *o)
{
    memset(o, 0, sizeof *o);
    o->n_rules = g->n_rules;
    o->n_states = g->n_states;
    o->n_cached = g->n_cached;
    o->cache_bytes = g->cache_bytes;
    o->compile_ms = g->compile_ms;
    o->precompute_ms = g->precompute_ms;
}
