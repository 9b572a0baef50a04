/*
 * grammar_mask.c - which tokens may come next.  The vocabulary is a trie in
 * preorder (sorted pieces, shared prefixes walked once, a dead prefix skips
 * its whole subtree in O(1)).  Per automaton state the grammar caches the
 * outcome of walking that trie from the state alone with an unknown caller
 * below it: tokens accepted inside the rule (or ending exactly as the rule
 * ends) are context-independent; tokens that leave the rule with bytes to
 * spare are context-dependent and kept in a small trie of their own, walked
 * again at each step from the real stack.  A step's mask is the union over
 * the matcher's stacks; each matcher also remembers its last few masks,
 * keyed by its exact set of stacks (inside a long string value the set
 * repeats token after token).
 */
#define _GNU_SOURCE /* qsort_r */
#include "grammar/grammar_impl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- vocabulary ------------------------------------------------------------ */

static int piece_cmp(const void *a, const void *b, void *ctx)
{
    const hy_gvocab_t *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], lx < ly ? lx : ly);

    if (c != 0)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

void hy_gtrie_free(hy_gtrie_t *t)
{
    free(t->nodes);
    free(t->toks);
    memset(t, 0, sizeof *t);
}

/* The bulk classes: JSON-string-safe ASCII, letters and digits, lower-case
 * letters, digits.  String contents, words, identifiers and numbers are
 * where most of a vocabulary's tokens stay inside one class. */
static bool in_class(int k, uint8_t b)
{
    switch (k) {
    case 0: return b >= 0x20 && b <= 0x7E && b != '"' && b != '\\';
    case 1: return (b >= '0' && b <= '9') || (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z');
    case 2: return b >= 'a' && b <= 'z';
    default: return b >= '0' && b <= '9';
    }
}

static uint8_t class_bits(uint8_t b)
{
    uint8_t c = 0;

    for (int k = 0; k < HY_GCLASSES; k++)
        c |= (uint8_t)(in_class(k, b) << k);
    return c;
}

/* clean and deep of every node, children before parents: nodes are in
 * preorder, so scanning backwards meets a node after its whole subtree,
 * and a stack of open ancestors collects it. */
static void trie_summaries(hy_gtrie_t *t)
{
    uint8_t bits[256];

    for (int b = 0; b < 256; b++)
        bits[b] = class_bits((uint8_t)b);
    for (int32_t i = t->n_nodes - 1; i >= 0; i--) {
        hy_gtrie_node_t *nd = &t->nodes[i];
        uint8_t clean = bits[nd->byte];
        uint16_t deep = nd->depth;

        /* the children are the nodes j in (i, end) with depth + 1, each
         * already summarised */
        for (int32_t j = i + 1; j < nd->end; j = t->nodes[j].end) {
            clean &= t->nodes[j].clean;
            deep = HY_MAX(deep, t->nodes[j].deep);
        }
        nd->clean = clean;
        nd->deep = deep;
    }
}

/* Builds the preorder trie of tokens ids[0..n) (each with len > 0). */
int hy_gtrie_build(hy_gtrie_t *t, const hy_gvocab_t *v, const int32_t *ids, int32_t n,
                   bool sorted, bool summaries)
{
    int32_t *path = NULL, depth = 0, cap = 0, i;
    const uint8_t *prev = NULL;
    uint32_t prev_len = 0;
    int rc = HY_ENOMEM;

    memset(t, 0, sizeof *t);
    if (n == 0)
        return HY_OK;
    t->toks = malloc(sizeof *t->toks * (size_t)n);
    if (t->toks == NULL)
        goto done;
    memcpy(t->toks, ids, sizeof *ids * (size_t)n);
    if (!sorted)
        qsort_r(t->toks, (size_t)n, sizeof *t->toks, piece_cmp, (void *)v);
    t->n_toks = n;
    for (i = 0; i < n; i++)
        t->max_depth = HY_MAX(t->max_depth, (int32_t)v->len[t->toks[i]]);
    path = malloc(sizeof *path * (size_t)(t->max_depth + 1));
    for (i = 0; i < n; i++)
        cap += (int32_t)v->len[t->toks[i]]; /* an upper bound on the nodes */
    t->nodes = malloc(sizeof *t->nodes * (size_t)cap);
    if (path == NULL || t->nodes == NULL)
        goto done;
    for (i = 0; i < n; i++) {
        const uint8_t *s = v->bytes + v->off[t->toks[i]];
        uint32_t len = v->len[t->toks[i]], l = 0;

        while (l < len && l < prev_len && s[l] == prev[l])
            l++;
        /* close the nodes below the common prefix */
        while (depth > (int32_t)l)
            t->nodes[path[--depth]].end = t->n_nodes;
        for (; (uint32_t)depth < len; depth++) {
            hy_gtrie_node_t *nd = &t->nodes[t->n_nodes];

            nd->byte = s[depth];
            nd->depth = (uint16_t)(depth + 1);
            nd->end = -1;
            nd->tok0 = i; /* sorted: the first token through a node starts its range */
            nd->ntok = 0;
            nd->clean = 0;
            nd->deep = nd->depth;
            path[depth] = t->n_nodes++;
        }
        if (t->nodes[path[len - 1]].ntok == UINT16_MAX)
            goto done; /* 65535 tokens with one piece: not a real vocabulary */
        t->nodes[path[len - 1]].ntok++;
        prev = s;
        prev_len = len;
    }
    while (depth > 0)
        t->nodes[path[--depth]].end = t->n_nodes;
    if (summaries)
        trie_summaries(t);
    rc = HY_OK;
done:
    free(path);
    if (rc != HY_OK)
        hy_gtrie_free(t);
    return rc;
}

int hy_gvocab_create_pieces(hy_gvocab_t **out, int32_t n_vocab, const hy_tok_str_t *pieces,
                            const bool *eog, char *err)
{
    hy_gvocab_t *v;
    int32_t *ids = NULL, n_ids = 0, i;
    int64_t total = 0;

    *out = NULL;
    if (n_vocab <= 0)
        return hy_err(err, HY_EINVAL, "grammar: vocabulary of %d tokens", (int)n_vocab);
    v = calloc(1, sizeof *v);
    if (v == NULL)
        return hy_err(err, HY_ENOMEM, "grammar: out of memory");
    v->n_vocab = n_vocab;
    v->n_words = (n_vocab + 63) / 64;
    for (i = 0; i < n_vocab; i++)
        total += (int64_t)pieces[i].len;
    v->bytes = malloc((size_t)total + 1);
    v->off = malloc(sizeof *v->off * (size_t)n_vocab);
    v->len = malloc(sizeof *v->len * (size_t)n_vocab);
    v->eog_bits = calloc((size_t)v->n_words, sizeof *v->eog_bits);
    v->eog_ids = malloc(sizeof *v->eog_ids * (size_t)n_vocab);
    ids = malloc(sizeof *ids * (size_t)n_vocab);
    if (!v->bytes || !v->off || !v->len || !v->eog_bits || !v->eog_ids || !ids)
        goto nomem;
    total = 0;
    for (i = 0; i < n_vocab; i++) {
        bool e = eog != NULL && eog[i];
        uint32_t len = e || pieces[i].len > UINT16_MAX ? 0 : (uint32_t)pieces[i].len;

        v->off[i] = total;
        v->len[i] = len;
        if (len > 0)
            memcpy(v->bytes + total, pieces[i].ptr, len);
        total += len;
        if (e) {
            v->eog_bits[i / 64] |= 1ull << (i % 64);
            v->eog_ids[v->n_eog++] = i;
        } else if (len > 0) {
            ids[n_ids++] = i;
        }
    }
    if (hy_gtrie_build(&v->trie, v, ids, n_ids, false, true) != HY_OK)
        goto nomem;
    free(ids);
    *out = v;
    return HY_OK;
nomem:
    free(ids);
    hy_gvocab_free(v);
    return hy_err(err, HY_ENOMEM, "grammar: out of memory for the vocabulary trie");
}

void hy_gvocab_free(hy_gvocab_t *v)
{
    if (v == NULL)
        return;
    free(v->bytes);
    free(v->off);
    free(v->len);
    free(v->eog_bits);
    free(v->eog_ids);
    hy_gtrie_free(&v->trie);
    free(v);
}

int32_t hy_gvocab_n_vocab(const hy_gvocab_t *v)
{
    return v->n_vocab;
}

hy_tok_str_t hy_gvocab_piece(const hy_gvocab_t *v, int32_t id)
{
    hy_tok_str_t s = { "", 0 };

    if (id >= 0 && id < v->n_vocab) {
        s.ptr = (const char *)v->bytes + v->off[id];
        s.len = v->len[id];
    }
    return s;
}

bool hy_gvocab_is_eog(const hy_gvocab_t *v, int32_t id)
{
    return id >= 0 && id < v->n_vocab && (v->eog_bits[id / 64] >> (id % 64)) & 1;
}

/* ---- bulk runs ----------------------------------------------------------------- */

/* run[q][k]: how many class-k bytes state q can take in a row, whatever
 * they are, without leaving its rule's automaton: 0 if some class-k byte
 * has no edge, else 1 + the least run of the states they lead to (never
 * reaching such a state: INT32_MAX).  That is the distance to the nearest
 * state missing a class byte, along class-byte edges: one breadth-first
 * search per class, backwards from those states. */
int hy_grammar_runs(hy_grammar_t *g)
{
    int32_t n = g->n_states, *first = NULL, *src = NULL, *queue = NULL, m = 0;
    uint8_t bits[256];
    int rc = HY_ENOMEM;

    for (int b = 0; b < 256; b++)
        bits[b] = class_bits((uint8_t)b);
    g->run = malloc(sizeof *g->run * (size_t)n);
    first = calloc((size_t)n + 1, sizeof *first);
    src = malloc(sizeof *src * (size_t)(g->n_edges + 1));
    queue = malloc(sizeof *queue * (size_t)(n + 1));
    if (g->run == NULL || first == NULL || src == NULL || queue == NULL)
        goto done;
    for (int k = 0; k < HY_GCLASSES; k++) {
        int32_t head = 0, tail = 0;

        /* reverse class-k edges, as CSR: sources of edges into each state */
        memset(first, 0, sizeof *first * ((size_t)n + 1));
        for (int pass = 0; pass < 2; pass++) {
            m = 0;
            for (int32_t q = 0; q < n; q++) {
                const hy_gstate_t *st = &g->st[q];

                for (int32_t e = 0; e < st->ne; e++) {
                    const hy_gedge_t *ed = &g->edges[st->e0 + e];
                    bool meets = false;

                    for (int b = ed->lo; b <= ed->hi && !meets; b++)
                        meets = (bits[b] >> k) & 1;
                    if (!meets)
                        continue;
                    if (pass == 0)
                        first[ed->to + 1]++;
                    else
                        src[first[ed->to] + queue[ed->to]++] = q;
                    m++;
                }
            }
            if (pass == 0) {
                for (int32_t q = 0; q < n; q++)
                    first[q + 1] += first[q];
                memset(queue, 0, sizeof *queue * (size_t)n); /* fill cursors */
            }
        }
        /* the states missing a class-k byte start at 0 */
        for (int32_t q = 0; q < n; q++) {
            const hy_gstate_t *st = &g->st[q];
            int covered = 0, need = 0;

            for (int b = 0; b < 256; b++)
                need += (bits[b] >> k) & 1;
            for (int32_t e = 0; e < st->ne; e++)
                for (int b = g->edges[st->e0 + e].lo; b <= g->edges[st->e0 + e].hi; b++)
                    covered += (bits[b] >> k) & 1;
            g->run[q][k] = covered == need ? INT32_MAX : 0;
        }
        for (int32_t q = 0; q < n; q++)
            if (g->run[q][k] == 0)
                queue[tail++] = q;
        while (head < tail) {
            int32_t q = queue[head++];

            for (int32_t j = first[q]; j < first[q + 1]; j++) {
                int32_t p = src[j];

                if (g->run[p][k] == INT32_MAX) {
                    g->run[p][k] = g->run[q][k] + 1;
                    queue[tail++] = p;
                }
            }
        }
    }
    rc = HY_OK;
done:
    free(first);
    free(src);
    free(queue);
    return rc;
}

static inline bool mask_has(const uint64_t *m, uint8_t b)
{
    return (m[b >> 6] >> (b & 63)) & 1;
}

static bool mask_or(uint64_t *dst, const uint64_t *src)
{
    bool changed = false;

    for (int w = 0; w < 4; w++) {
        changed |= (dst[w] | src[w]) != dst[w];
        dst[w] |= src[w];
    }
    return changed;
}

/*
 * follow[r]: the bytes that may come right after rule r ends, from every
 * place it is called (XGrammar's "context expansion").  A token that leaves
 * a rule and goes on with a byte outside this set is rejected whatever the
 * stack, instead of being context-dependent: without it, every token that
 * starts with a space would depend on the caller of a rule ending in
 * optional whitespace.  Fixpoints, in order: first[q] (bytes that can come
 * first from state q, through calls of rules that may be empty), ends[q]
 * (q can reach its rule's end without a byte), then follow.
 */
int hy_grammar_follow(hy_grammar_t *g)
{
    uint64_t (*first)[4] = calloc((size_t)g->n_states, sizeof *first);
    uint8_t *ends = calloc((size_t)g->n_states, 1);
    bool changed = true;
    int rc = HY_ENOMEM;

    g->follow = calloc((size_t)g->n_rules, sizeof *g->follow);
    if (first == NULL || ends == NULL || g->follow == NULL)
        goto done;
    for (int32_t q = 0; q < g->n_states; q++) {
        const hy_gstate_t *st = &g->st[q];

        ends[q] = st->final;
        for (int32_t e = 0; e < st->ne; e++)
            for (int b = g->edges[st->e0 + e].lo; b <= g->edges[st->e0 + e].hi; b++)
                first[q][b >> 6] |= 1ull << (b & 63);
    }
    while (changed) {
        changed = false;
        for (int32_t q = 0; q < g->n_states; q++) {
            const hy_gstate_t *st = &g->st[q];

            for (int32_t c = 0; c < st->nc; c++) {
                const hy_gcall_t *call = &g->calls[st->c0 + c];
                int32_t start = g->rule_start[call->rule];

                changed |= mask_or(first[q], first[start]);
                if (ends[start]) {
                    changed |= mask_or(first[q], first[call->to]);
                    if (ends[call->to] && !ends[q])
                        ends[q] = 1, changed = true;
                }
            }
        }
    }
    for (changed = true; changed;) {
        changed = false;
        for (int32_t q = 0; q < g->n_states; q++) {
            const hy_gstate_t *st = &g->st[q];

            for (int32_t c = 0; c < st->nc; c++) {
                const hy_gcall_t *call = &g->calls[st->c0 + c];

                changed |= mask_or(g->follow[call->rule], first[call->to]);
                if (ends[call->to])
                    changed |= mask_or(g->follow[call->rule], g->follow[st->rule]);
            }
        }
    }
    rc = HY_OK;
done:
    free(first);
    free(ends);
    return rc;
}

/* Whether every token below trie node nd (entered from the stacks of set
 * s, before its byte) is accepted without looking: some stack's state can
 * take all of the subtree's bytes, which lie in one class. */
static inline bool bulk(const hy_grammar_t *g, const hy_gpool_t *p, const hy_gset_t *s,
                        const hy_gtrie_node_t *nd)
{
    int32_t need = nd->deep - nd->depth + 1;

    if (nd->clean == 0 || g->run == NULL)
        return false;
    for (int32_t i = 0; i < s->n; i++) {
        const int32_t *run = g->run[p->nodes[s->ids[i]].state];

        for (int k = 0; k < HY_GCLASSES; k++)
            if (((nd->clean >> k) & 1) && run[k] >= need)
                return true;
    }
    return false;
}

/* ---- trie walks --------------------------------------------------------------- */

typedef struct {
    int32_t *v;
    int32_t n, cap;
} idlist_t;

static int idlist_push(idlist_t *l, int32_t id)
{
    if (l->n == l->cap) {
        int32_t cap = l->cap ? l->cap * 2 : 256;
        int32_t *v = realloc(l->v, sizeof *v * (size_t)cap);

        if (v == NULL)
            return HY_ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = id;
    return HY_OK;
}

/* Level sets for walks of depth up to depth. */
static int levels_ensure(hy_gset_t **lv, int32_t *n, int32_t depth)
{
    if (*n > depth)
        return HY_OK;
    hy_gset_t *l = realloc(*lv, sizeof *l * (size_t)(depth + 1));

    if (l == NULL)
        return HY_ENOMEM;
    memset(l + *n, 0, sizeof *l * (size_t)(depth + 1 - *n));
    *lv = l;
    *n = depth + 1;
    return HY_OK;
}

/* Walks trie t from the single stack `start` (a node of pool p).
 * Context mode (acc, dep != NULL): start sits on an unknown caller; each
 * token goes to acc (accepted whatever the caller), dep (depends on it) or
 * nowhere.  Real mode (bits != NULL): accepted tokens are set in bits. */
static int walk(hy_gpool_t *p, hy_gset_t *lv, const hy_gtrie_t *t, int32_t start, idlist_t *acc,
                idlist_t *dep, uint64_t *bits)
{
    int32_t i = 0, mark = p->n;
    int rc = HY_OK;

    lv[0].n = 0;
    lv[0].accept = lv[0].escape = lv[0].dep = 0;
    if (hy_gset_push(&lv[0], start) != HY_OK)
        return HY_ENOMEM;
    while (i < t->n_nodes) {
        const hy_gtrie_node_t *nd = &t->nodes[i];
        int32_t d = nd->depth;
        hy_gset_t *s = &lv[d];
        const int32_t *r;
        bool alive;

        if (bulk(p->g, p, &lv[d - 1], nd)) {
            /* the whole subtree is accepted: no step needed */
            int32_t t1 = nd->end < t->n_nodes ? t->nodes[nd->end].tok0 : t->n_toks;

            for (int32_t k = nd->tok0; k < t1 && rc == HY_OK; k++) {
                int32_t id = t->toks[k];

                if (bits != NULL)
                    bits[id / 64] |= 1ull << (id % 64);
                else
                    rc = idlist_push(acc, id);
            }
            if (rc != HY_OK)
                break;
            i = nd->end;
            continue;
        }

        /* the common case inline: one stack whose step is memoised */
        if (lv[d - 1].n == 1 && p->memo_on &&
            (r = hy_gpool_memo(p, lv[d - 1].ids[0], nd->byte)) != NULL &&
            (r[0] & 0xFFFFFF) <= s->cap) {
            const int32_t *ids = r + 1;

            s->n = r[0] & 0xFFFFFF;
            s->accept = (r[0] >> 24) & 1;
            s->escape = (r[0] >> 25) & 1;
            if (s->escape) {
                memcpy(s->follow, r + 1, sizeof s->follow);
                ids += 8;
            }
            for (int32_t k = 0; k < s->n; k++)
                s->ids[k] = ids[k];
        } else if ((rc = hy_gpool_step(p, &lv[d - 1], nd->byte, s)) != HY_OK) {
            break;
        }
        alive = s->n > 0;
        if (bits != NULL) {
            if (nd->ntok > 0 && (alive || s->accept))
                for (int32_t k = 0; k < nd->ntok; k++) {
                    int32_t id = t->toks[nd->tok0 + k];

                    bits[id / 64] |= 1ull << (id % 64);
                }
        } else {
            /* a path left the rule one byte up, and this byte may follow it:
             * from here on the token's fate is the caller's */
            const hy_gset_t *up = &lv[d - 1];

            s->dep = up->dep || (up->escape && mask_has(up->follow, nd->byte));
            for (int32_t k = 0; k < nd->ntok && rc == HY_OK; k++) {
                int32_t id = t->toks[nd->tok0 + k];

                if (alive || s->escape)
                    rc = idlist_push(acc, id);
                else if (s->dep)
                    rc = idlist_push(dep, id);
            }
            if (!alive && (s->dep || s->escape)) {
                /* the longer tokens: all the caller's (dep), or those whose
                 * next byte may follow the rule that just ended */
                for (int32_t c = i + 1; c < nd->end && rc == HY_OK; c = t->nodes[c].end) {
                    int32_t t1 = t->nodes[c].end < t->n_nodes ? t->nodes[t->nodes[c].end].tok0
                                                              : t->n_toks;

                    if (!s->dep && !mask_has(s->follow, t->nodes[c].byte))
                        continue;
                    for (int32_t k = t->nodes[c].tok0; k < t1 && rc == HY_OK; k++)
                        rc = idlist_push(dep, t->toks[k]);
                }
            }
        }
        if (rc != HY_OK)
            break;
        i = alive ? i + 1 : nd->end;
    }
    if (!p->memo_on)
        hy_gpool_rollback(p, mark);
    return rc;
}

/* ---- the per-state cache --------------------------------------------------------- */

static int entry_fill(hy_grammar_t *g, int32_t state)
{
    const hy_gvocab_t *v = g->vocab;
    hy_gentry_t *e = &g->cache[state];
    idlist_t acc = { 0 }, dep = { 0 };
    double t0 = hy_grammar_now_ms();
    int32_t n0;
    int rc = HY_ENOMEM;

    if (g->cpool.g == NULL) {
        if (hy_gpool_init(&g->cpool, g) != HY_OK)
            return HY_ENOMEM;
        g->cpool.memo_on = true;
    }
    /* the pool keeps its nodes (the memo refers to them) unless it grew
     * large: stacks nested deep by recursive rules */
    if (g->cpool.n > (1 << 20) || g->cpool.n_mids > (1 << 24))
        hy_gpool_reset(&g->cpool);
    if (levels_ensure(&g->clevel, &g->n_clevel, v->trie.max_depth) != HY_OK)
        return HY_ENOMEM;
    n0 = hy_gpool_node(&g->cpool, state, HY_GNODE_BOTTOM);
    if (n0 < 0)
        return HY_ENOMEM;
    if ((rc = walk(&g->cpool, g->clevel, &v->trie, n0, &acc, &dep, NULL)) != HY_OK)
        goto done;
    rc = HY_ENOMEM;
    e->n_acc = acc.n;
    if ((int64_t)acc.n * 32 >= v->n_vocab) {
        e->acc_bits = calloc((size_t)v->n_words, sizeof *e->acc_bits);
        if (e->acc_bits == NULL)
            goto done;
        for (int32_t k = 0; k < acc.n; k++)
            e->acc_bits[acc.v[k] / 64] |= 1ull << (acc.v[k] % 64);
        g->cache_bytes += (int64_t)v->n_words * 8;
    } else if (acc.n > 0) {
        e->acc_ids = acc.v;
        acc.v = NULL;
        g->cache_bytes += (int64_t)e->n_acc * 4;
    }
    /* a walk collects tokens in trie (= piece) order: no sort needed */
    if (hy_gtrie_build(&e->dep, v, dep.v, dep.n, true, false) != HY_OK)
        goto done;
    g->cache_bytes += (int64_t)e->dep.n_nodes * (int64_t)sizeof *e->dep.nodes +
                      (int64_t)e->dep.n_toks * 4;
    e->ready = 1;
    g->n_cached++;
    rc = HY_OK;
done:
    free(acc.v);
    free(dep.v);
    g->precompute_ms += hy_grammar_now_ms() - t0;
    return rc;
}

int hy_grammar_entry(hy_grammar_t *g, int32_t state, const hy_gentry_t **out)
{
    int rc;

    if (!g->cache[state].ready && (rc = entry_fill(g, state)) != HY_OK)
        return rc;
    *out = &g->cache[state];
    return HY_OK;
}

int hy_grammar_precompute(hy_grammar_t *g, char *err)
{
    const hy_gentry_t *e;

    if (g->vocab == NULL)
        return hy_err(err, HY_EINVAL, "grammar: compiled without a vocabulary");
    for (int32_t s = 0; s < g->n_states; s++)
        if (g->st[s].ne > 0 && hy_grammar_entry(g, s, &e) != HY_OK)
            return hy_err(err, HY_ENOMEM, "grammar: out of memory filling the token cache");
    return HY_OK;
}

void hy_grammar_free_states(hy_grammar_t *g)
{
    for (int32_t s = 0; g->cache && s < g->n_states; s++) {
        free(g->cache[s].acc_bits);
        free(g->cache[s].acc_ids);
        hy_gtrie_free(&g->cache[s].dep);
    }
    free(g->cache);
    g->cache = NULL;
    free(g->run);
    g->run = NULL;
    free(g->follow);
    g->follow = NULL;
    for (int32_t i = 0; i < g->n_clevel; i++)
        hy_gset_free(&g->clevel[i]);
    free(g->clevel);
    g->clevel = NULL;
    g->n_clevel = 0;
    if (g->cpool.g != NULL)
        hy_gpool_free(&g->cpool);
}

/* ---- masks -------------------------------------------------------------------------- */

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t memo_key(const hy_gset_t *s, bool eog)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)(s->accept * 2 + eog);

    for (int32_t i = 0; i < s->n; i++)
        h = (h ^ (uint32_t)s->ids[i]) * 1099511628211ull;
    return h;
}

static int32_t popcount_bits(const uint64_t *bits, int32_t n_words)
{
    int32_t c = 0;

    for (int32_t w = 0; w < n_words; w++)
        c += __builtin_popcountll(bits[w]);
    return c;
}

static hy_gmemo_t *memo_find(hy_gmatch_t *m, uint64_t key, bool eog)
{
    const hy_gset_t *s = &m->cur;

    for (int i = 0; i < HY_GMATCH_MEMO; i++) {
        hy_gmemo_t *e = &m->memo[i];

        if (e->used && e->key == key && e->n_ids == s->n && e->accept == s->accept &&
            e->eog == eog && memcmp(e->ids, s->ids, sizeof *s->ids * (size_t)s->n) == 0)
            return e;
    }
    return NULL;
}

static void memo_store(hy_gmatch_t *m, uint64_t key, bool eog, const uint64_t *bits,
                       int32_t count)
{
    const hy_gset_t *s = &m->cur;
    hy_gmemo_t *e = &m->memo[0];
    int32_t nw = m->g->vocab->n_words;
    int32_t *ids;

    for (int i = 1; i < HY_GMATCH_MEMO; i++)
        if (!m->memo[i].used || (e->used && m->memo[i].age < e->age))
            e = &m->memo[i];
    if (e->bits == NULL && (e->bits = malloc(sizeof *bits * (size_t)nw)) == NULL)
        return; /* the memo is an optimisation: skip it */
    if ((ids = realloc(e->ids, sizeof *ids * (size_t)(s->n + 1))) == NULL)
        return;
    e->ids = ids;
    if (s->n > 0)
        memcpy(e->ids, s->ids, sizeof *ids * (size_t)s->n);
    memcpy(e->bits, bits, sizeof *bits * (size_t)nw);
    e->n_ids = s->n;
    e->key = key;
    e->accept = s->accept;
    e->eog = eog;
    e->count = count;
    e->used = 1;
    e->age = ++m->memo_clock;
}

int32_t hy_gmatch_fill_mask(hy_gmatch_t *m, uint64_t *bits, bool allow_eog)
{
    hy_grammar_t *g = m->g;
    const hy_gvocab_t *v = g->vocab;
    uint64_t t0 = now_ns(), key;
    hy_gmemo_t *memo;
    int32_t count = 0, nw;

    if (v == NULL)
        return HY_EINVAL;
    nw = v->n_words;
    if (!m->active) {
        memset(bits, 0xff, sizeof *bits * (size_t)nw);
        if (v->n_vocab % 64)
            bits[nw - 1] = (1ull << (v->n_vocab % 64)) - 1;
        count = v->n_vocab;
        goto out;
    }
    key = memo_key(&m->cur, allow_eog);
    if ((memo = memo_find(m, key, allow_eog)) != NULL) {
        memcpy(bits, memo->bits, sizeof *bits * (size_t)nw);
        memo->age = ++m->memo_clock;
        count = memo->count;
        goto out;
    }
    memset(bits, 0, sizeof *bits * (size_t)nw);
    if (levels_ensure(&m->level, &m->n_level, v->trie.max_depth) != HY_OK) {
        count = HY_ENOMEM;
        goto out;
    }
    for (int32_t i = 0; i < m->cur.n; i++) {
        int32_t node = m->cur.ids[i];
        const hy_gentry_t *e;

        if (hy_grammar_entry(g, m->pool.nodes[node].state, &e) != HY_OK) {
            count = HY_ENOMEM;
            goto out;
        }
        if (e->acc_bits != NULL) {
            for (int32_t w = 0; w < nw; w++)
                bits[w] |= e->acc_bits[w];
        } else {
            for (int32_t k = 0; k < e->n_acc; k++)
                bits[e->acc_ids[k] / 64] |= 1ull << (e->acc_ids[k] % 64);
        }
        if (e->dep.n_nodes > 0 &&
            walk(&m->pool, m->level, &e->dep, node, NULL, NULL, bits) != HY_OK) {
            count = HY_ENOMEM;
            goto out;
        }
    }
    if (m->cur.accept && allow_eog)
        for (int32_t w = 0; w < nw; w++)
            bits[w] |= v->eog_bits[w];
    count = popcount_bits(bits, nw);
    memo_store(m, key, allow_eog, bits, count);
out:
    m->mask_ns += now_ns() - t0;
    m->mask_calls++;
    return count;
}

void hy_grammar_apply_mask(float *logits, const uint64_t *bits, int32_t n_vocab)
{
    const float ninf = -__builtin_inff();

    /* whole words first: a mask is mostly all-allowed words (a string's
     * contents) or all-refused ones (a key, a number), both branch-free */
    for (int32_t w = 0; w * 64 < n_vocab; w++) {
        uint64_t b = bits[w];
        int32_t base = w * 64, end = HY_MIN(n_vocab, base + 64);

        if (b == ~0ull && end - base == 64)
            continue;
        if (b == 0) {
            for (int32_t i = base; i < end; i++)
                logits[i] = ninf;
            continue;
        }
        for (int32_t i = base; i < end; i++)
            if (!((b >> (i - base)) & 1))
                logits[i] = ninf;
    }
}
