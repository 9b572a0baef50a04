/*
 * grammar_budget.c - finishing a constrained answer within its token
 * budget.
 *
 * A constrained answer that runs into max_tokens is cut in the middle of
 * its JSON: useless to the client, whatever the finish reason says.  The
 * grammar knows how far its end is: for every automaton state the fewest
 * bytes that finish its rule (a rule call costs the callee's fewest bytes),
 * so a stack is as far from the end as the sum over its nodes and the
 * matcher as its nearest stack.  The engine keeps that distance within
 * the tokens left: a sampled token that would put the end out of reach is
 * drawn again among the tokens each of whose bytes brings the end one byte
 * nearer (the "closing" tokens).  Every token holds at least one byte, so
 * as long as the distance in bytes is at most the tokens left the answer
 * can always be finished: each closing token keeps that true.  The model
 * still chooses among the closing tokens by its own logits.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"

#define DIST_INF (INT32_MAX / 4)

static inline int32_t dist_add(int32_t a, int32_t b)
{
    return a >= DIST_INF || b >= DIST_INF ? DIST_INF : HY_MIN(a + b, DIST_INF);
}

/* g->dist: the fewest bytes from each state to the end of its rule, by
 * relaxation to a fixed point (every cost is >= 0, so it ends; states are
 * numbered roughly in rule order, and a backward sweep settles most of
 * them in one pass). */
static int dist_compute(hy_grammar_t *g)
{
    int32_t *d;
    bool changed = true;

    if (g->dist != NULL)
        return HY_OK;
    if ((d = malloc(sizeof *d * (size_t)HY_MAX(g->n_states, 1))) == NULL)
        return HY_ENOMEM;
    for (int32_t s = 0; s < g->n_states; s++)
        d[s] = g->st[s].final ? 0 : DIST_INF;
    while (changed) {
        changed = false;
        for (int32_t s = g->n_states - 1; s >= 0; s--) {
            const hy_gstate_t *st = &g->st[s];
            int32_t best = d[s];

            for (int32_t k = 0; k < st->ne; k++)
                best = HY_MIN(best, dist_add(1, d[g->edges[st->e0 + k].to]));
            for (int32_t k = 0; k < st->nc; k++) {
                const hy_gcall_t *c = &g->calls[st->c0 + k];

                best = HY_MIN(best, dist_add(d[g->rule_start[c->rule]], d[c->to]));
            }
            if (best < d[s]) {
                d[s] = best;
                changed = true;
            }
        }
    }
    g->dist = d;
    return HY_OK;
}

/* The distance of a set of stacks: 0 where the grammar may end. */
static int32_t set_dist(const hy_gpool_t *p, const int32_t *dist, const hy_gset_t *s)
{
    int32_t best = s->accept ? 0 : DIST_INF;

    for (int32_t i = 0; i < s->n && best > 0; i++) {
        int32_t sum = 0;

        for (int32_t n = s->ids[i]; n >= 0 && sum < best; n = p->nodes[n].parent)
            sum = dist_add(sum, dist[p->nodes[n].state]);
        best = HY_MIN(best, sum);
    }
    return best;
}

int32_t hy_gmatch_distance(hy_gmatch_t *m)
{
    if (!m->active || m->ended)
        return 0;
    if (dist_compute(m->g) != HY_OK)
        return HY_ENOMEM;
    return set_dist(&m->pool, m->g->dist, &m->cur);
}

/* The distance after token id's bytes (DIST_INF: not accepted); the
 * matcher is unchanged. */
static int32_t dist_after(hy_gmatch_t *m, int32_t id)
{
    const hy_gvocab_t *v = m->g->vocab;
    const hy_gset_t *in = &m->cur;
    hy_gset_t *out = &m->a;
    int32_t mark = m->pool.n, d = DIST_INF;
    hy_tok_str_t p;
    size_t i;

    if (hy_gvocab_is_eog(v, id))
        return m->cur.accept ? 0 : DIST_INF;
    p = hy_gvocab_piece(v, id);
    for (i = 0; i < p.len; i++) {
        if (hy_gpool_step(&m->pool, in, (uint8_t)p.ptr[i], out) != HY_OK ||
            !(out->n > 0 || (out->accept && i + 1 == p.len)))
            break;
        in = out;
        out = out == &m->a ? &m->b : &m->a;
    }
    if (p.len > 0 && i == p.len)
        d = set_dist(&m->pool, m->g->dist, in);
    hy_gpool_rollback(&m->pool, mark);
    return d;
}

bool hy_gmatch_fits(hy_gmatch_t *m, int32_t id, int32_t left)
{
    const hy_gvocab_t *v = m->g->vocab;

    /* free text of a lazy grammar, or a token the grammar refuses (the
     * caller's mask decides those): nothing to keep within reach */
    if (!m->active || m->ended || v == NULL || id < 0 || id >= v->n_vocab)
        return true;
    if (dist_compute(m->g) != HY_OK)
        return true;
    return dist_after(m, id) <= HY_MAX(left, 0);
}

/* Sets the tokens below trie node range [i0, end) every byte of which
 * shortens the distance by exactly one, starting from set lv[0] at
 * distance d0.  lv[k] holds the stacks after a node of depth k. */
static int closing_walk(hy_gmatch_t *m, hy_gset_t *lv, int32_t *ld, uint64_t *bits,
                        int32_t *count)
{
    const hy_gtrie_t *t = &m->g->vocab->trie;
    const int32_t *dist = m->g->dist;
    int32_t i = 0;

    while (i < t->n_nodes) {
        const hy_gtrie_node_t *nd = &t->nodes[i];
        hy_gset_t *in = &lv[nd->depth - 1], *out = &lv[nd->depth];

        if (hy_gpool_step(&m->pool, in, nd->byte, out) != HY_OK)
            return HY_ENOMEM;
        ld[nd->depth] = out->n > 0 || out->accept ? set_dist(&m->pool, dist, out) : DIST_INF;
        if (ld[nd->depth] != ld[nd->depth - 1] - 1) {
            i = nd->end; /* this byte does not bring the end nearer: nor does any below it */
            continue;
        }
        for (int32_t k = 0; k < nd->ntok; k++) {
            int32_t id = t->toks[nd->tok0 + k];

            bits[id / 64] |= 1ull << (id % 64);
            ++*count;
        }
        i++;
    }
    return HY_OK;
}

int32_t hy_gmatch_fill_closing_mask(hy_gmatch_t *m, uint64_t *bits, bool allow_eog)
{
    const hy_gvocab_t *v = m->g->vocab;
    int32_t mark = m->pool.n, count = 0, depth, *ld;
    hy_gset_t *lv;
    int rc;

    if (v == NULL)
        return HY_EINVAL;
    memset(bits, 0, sizeof *bits * (size_t)v->n_words);
    if (!m->active || m->ended)
        return 0;
    if (dist_compute(m->g) != HY_OK)
        return HY_ENOMEM;
    if (m->cur.accept) {
        /* at the end already: only the end itself brings nothing further */
        if (!allow_eog)
            return 0;
        for (int32_t w = 0; w < v->n_words; w++)
            bits[w] = v->eog_bits[w];
        return v->n_eog;
    }
    depth = v->trie.max_depth;
    lv = calloc((size_t)depth + 1, sizeof *lv);
    ld = malloc(sizeof *ld * ((size_t)depth + 1));
    if (lv == NULL || ld == NULL) {
        free(lv);
        free(ld);
        return HY_ENOMEM;
    }
    lv[0] = m->cur; /* read only: the walk writes lv[1..] */
    ld[0] = set_dist(&m->pool, m->g->dist, &m->cur);
    rc = closing_walk(m, lv, ld, bits, &count);
    hy_gpool_rollback(&m->pool, mark);
    for (int32_t k = 1; k <= depth; k++)
        hy_gset_free(&lv[k]);
    free(lv);
    free(ld);
    return rc != HY_OK ? rc : count;
}
