/*
 * graph.h - the CUDA backend's cache of captured decode steps, keyed by the
 * batch shape.  Plain C with no CUDA types (the executable graph is an
 * opaque pointer the backend owns), so the policy - which step to capture,
 * which to run eagerly, when to give up on a shape, which entry to evict -
 * is unit-tested on machines without a GPU (tests/cuda/test_cuda_graph_cache).
 */
#ifndef HY_CUDA_GRAPH_H
#define HY_CUDA_GRAPH_H

#include "backend/backend.h"

#define HY_CUDA_GRAPH_SLOTS 32      /* shapes kept at once (LRU) */
#define HY_CUDA_GRAPH_MAX_TOK 256   /* larger steps (prefill) gain nothing: eager */
#define HY_CUDA_GRAPH_MAX_BREAKS 3  /* consecutive failed captures before a shape is eager */
#define HY_CUDA_GRAPH_MAX_REBUILDS 4 /* consecutive re-instantiations before a shape is eager */

/* What changes the sequence of launches and their grid sizes: the kernels
 * see n_tok tokens of n_seqs sequences and n_out logit rows. */
typedef struct {
    int32_t n_tok, n_seqs, n_out;
} hy_cuda_graph_key_t;

typedef struct {
    hy_cuda_graph_key_t key;
    bool used;
    bool eager_only;     /* gave up on this shape (logged once) */
    uint32_t seen;       /* steps of this shape so far */
    uint32_t breaks;     /* consecutive captures that could not complete */
    uint32_t captures;   /* captures that completed */
    uint32_t rebuilds;   /* consecutive captures that could not update the exec */
    uint64_t last;       /* cache tick of the last use (LRU) */
    void *exec;          /* cudaGraphExec_t or NULL, owned by the backend */
} hy_cuda_graph_entry_t;

typedef struct {
    hy_cuda_graph_entry_t e[HY_CUDA_GRAPH_SLOTS];
    uint64_t tick;
    /* counters for tests and the log */
    uint64_t n_eager;        /* steps run without a graph (warm-up, eager-only) */
    uint64_t n_instantiated; /* captures that built a new executable graph */
    uint64_t n_updated;      /* captures that updated the cached one in place */
    uint64_t n_broken;       /* captures that could not complete (step rerun) */
} hy_cuda_graph_cache_t;

typedef enum {
    HY_CUDA_GRAPH_EAGER = 0,  /* run the step's launches directly */
    HY_CUDA_GRAPH_CAPTURE,    /* capture them and launch the graph */
} hy_cuda_graph_plan_t;

/* The shape of a step; false when the step is not worth a graph (too many
 * tokens, or nothing to run). */
bool hy_cuda_graph_key(const hy_batch_t *b, int32_t n_out, hy_cuda_graph_key_t *k);

/* The entry of key k, inserted if new: a new entry takes a free slot or
 * evicts the least recently used one, whose exec (to be destroyed by the
 * caller) is stored in *evicted (NULL when none). */
hy_cuda_graph_entry_t *hy_cuda_graph_get(hy_cuda_graph_cache_t *c, const hy_cuda_graph_key_t *k,
                                         void **evicted);

/* Decides one step of entry e and counts it.  The first step of a shape runs
 * eagerly: it grows the backend's scratch buffers to this shape's sizes, an
 * allocation a capture could not contain.  An eager-only shape stays eager. */
hy_cuda_graph_plan_t hy_cuda_graph_plan(hy_cuda_graph_cache_t *c, hy_cuda_graph_entry_t *e);

/* A capture of e completed (updated: the cached exec was updated in place,
 * else a new one was instantiated).  A shape whose launch sequence changes
 * every step (so every capture pays a full instantiation) is not worth
 * graphs: returns true when this made e eager-only, to log once. */
bool hy_cuda_graph_done(hy_cuda_graph_cache_t *c, hy_cuda_graph_entry_t *e, bool updated);

/* A capture of e could not complete.  Returns true when this made e
 * eager-only, so the caller logs that once. */
bool hy_cuda_graph_broken(hy_cuda_graph_cache_t *c, hy_cuda_graph_entry_t *e);

/* Calls drop(exec, arg) for every cached exec and empties the cache. */
void hy_cuda_graph_clear(hy_cuda_graph_cache_t *c, void (*drop)(void *exec, void *arg), void *arg);

/* The HY_CUDA_GRAPHS environment value v (NULL when unset): unset or "1"
 * keeps graphs on, "0" turns them off (*off); anything else is HY_EINVAL
 * with the value named in err, so a typo does not silently keep them on. */
int hy_cuda_graph_env(const char *v, bool *off, char *err);

/* A copy of the CUDA backend's cache and counters (cuda.c, CUDA builds
 * only); HY_EINVAL when be is not the CUDA backend. */
int hy_cuda_graph_stats(hy_backend_t *be, hy_cuda_graph_cache_t *out);

#endif
