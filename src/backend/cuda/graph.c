/*
 * graph.c - the shape-keyed cache of captured steps (graph.h): lookup with
 * LRU eviction and the capture policy.  It never touches CUDA; cuda.c does
 * the capturing and owns the executable graphs stored here.
 */
#include "backend/cuda/graph.h"

#include <string.h>

bool hy_cuda_graph_key(const hy_batch_t *b, int32_t n_out, hy_cuda_graph_key_t *k)
{
    memset(k, 0, sizeof *k);
    if (!b || b->n_tokens <= 0 || b->n_seqs <= 0 || n_out < 0 ||
        b->n_tokens > HY_CUDA_GRAPH_MAX_TOK)
        return false;
    k->n_tok = b->n_tokens;
    k->n_seqs = b->n_seqs;
    k->n_out = n_out;
    return true;
}

static bool hy_cuda_graph_key_eq(const hy_cuda_graph_key_t *a, const hy_cuda_graph_key_t *b)
{
    return a->n_tok == b->n_tok && a->n_seqs == b->n_seqs && a->n_out == b->n_out;
}

hy_cuda_graph_entry_t *hy_cuda_graph_get(hy_cuda_graph_cache_t *c, const hy_cuda_graph_key_t *k,
                                         void **evicted)
{
    hy_cuda_graph_entry_t *victim = NULL;

    *evicted = NULL;
    c->tick++;
    for (int i = 0; i < HY_CUDA_GRAPH_SLOTS; i++) {
        hy_cuda_graph_entry_t *e = &c->e[i];

        if (e->used && hy_cuda_graph_key_eq(&e->key, k)) {
            e->last = c->tick;
            return e;
        }
        /* a free slot beats any used one; among used ones the oldest */
        if (!victim || (victim->used && (!e->used || e->last < victim->last)))
            victim = e;
    }
    if (victim->used)
        *evicted = victim->exec;
    memset(victim, 0, sizeof *victim);
    victim->used = true;
    victim->key = *k;
    victim->last = c->tick;
    return victim;
}

hy_cuda_graph_plan_t hy_cuda_graph_plan(hy_cuda_graph_cache_t *c, hy_cuda_graph_entry_t *e)
{
    bool first = e->seen == 0;

    e->seen++;
    if (first || e->eager_only) {
        c->n_eager++;
        return HY_CUDA_GRAPH_EAGER;
    }
    return HY_CUDA_GRAPH_CAPTURE;
}

bool hy_cuda_graph_done(hy_cuda_graph_cache_t *c, hy_cuda_graph_entry_t *e, bool updated)
{
    bool first = e->captures++ == 0; /* the first capture must instantiate */

    e->breaks = 0;
    if (updated) {
        c->n_updated++;
        e->rebuilds = 0;
        return false;
    }
    c->n_instantiated++;
    if (first || e->eager_only)
        return false;
    e->rebuilds++;
    e->eager_only = e->rebuilds >= HY_CUDA_GRAPH_MAX_REBUILDS;
    return e->eager_only;
}

bool hy_cuda_graph_broken(hy_cuda_graph_cache_t *c, hy_cuda_graph_entry_t *e)
{
    c->n_broken++;
    if (e->eager_only)
        return false;
    e->breaks++;
    e->eager_only = e->breaks >= HY_CUDA_GRAPH_MAX_BREAKS;
    return e->eager_only;
}

void hy_cuda_graph_clear(hy_cuda_graph_cache_t *c, void (*drop)(void *exec, void *arg), void *arg)
{
    for (int i = 0; i < HY_CUDA_GRAPH_SLOTS; i++) {
        if (c->e[i].used && c->e[i].exec && drop)
            drop(c->e[i].exec, arg);
    }
    memset(c, 0, sizeof *c);
}

int hy_cuda_graph_env(const char *v, bool *off, char *err)
{
    *off = false;
    if (v == NULL || strcmp(v, "1") == 0)
        return HY_OK;
    if (strcmp(v, "0") == 0) {
        *off = true;
        return HY_OK;
    }
    return hy_err(err, HY_EINVAL, "HY_CUDA_GRAPHS='%.64s': must be 0 (graphs off) or 1 (on)", v);
}
