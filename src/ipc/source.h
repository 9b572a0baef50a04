/*
 * source.h - how the engine takes requests, whoever submits them: a method
 * table plus a context, like a backend (hy_backend_i).  The engine asks the
 * source for the next queued request, copies what it needs, and from then on
 * speaks to the source only by the request's id: whether its submitter
 * cancelled it, how much of its prompt the prefix cache held, each token,
 * and its end.  Two sources exist: the shared segment's request slots
 * (ipc/ring.c, hy_ring_source: the FastCGI workers in other processes) and a
 * queue in the engine's own process (engine/local.c: `hyserve run`,
 * `hyserve bench --offline`).
 *
 * The engine keeps no pointer into a source's memory across calls and owns
 * nothing a source lends it, so the source is the state that outlives an
 * engine: a new engine on the same slots starts from what take() hands it.
 */
#ifndef HY_IPC_SOURCE_H
#define HY_IPC_SOURCE_H

#include "ipc/request.h"

typedef struct hy_req_source hy_req_source_t;

/* A request as take() hands it over. */
typedef struct {
    int32_t id;             /* the source's handle, >= 0 */
    const int32_t *prompt;  /* n_prompt token ids, valid until the next call into the source */
    int32_t n_prompt;
    uint64_t order;         /* submit order: first come, first served among equal priorities */
    hy_req_params_t params; /* a copy */
    const void *grammar;    /* params.grammar_len bytes of grammar spec, NULL when none;
                             * valid until the next call into the source, like prompt */
    /* A request a dead engine had started: the n_resumed tokens it already
     * handed to the reader (valid like prompt), which the engine takes as
     * generated (penalties, grammar, max_tokens) without pushing them
     * again, its sampler's stream moved on by resumed[n_resumed-1].rng_draws. */
    const hy_req_hist_t *resumed;
    int32_t n_resumed;
} hy_req_taken_t;

/* What constrained decoding cost, as the engine reports it after each piece
 * of work (a delta, so a source adds it to whatever totals it keeps): the
 * source owns the counters, the engine keeps none. */
typedef struct {
    uint64_t requests;   /* requests that carried a grammar */
    uint64_t compiles;   /* of those, grammars compiled (cache misses) */
    uint64_t cache_hits; /* ... and grammars found compiled */
    uint64_t compile_us; /* engine thread CPU time compiling */
    uint64_t masks;      /* vocabulary masks computed and applied */
    uint64_t mask_us;    /* engine thread CPU time on masks */
    uint64_t fill_us;    /* part of mask_us: token sets of states reached the first time */
    uint64_t closed;     /* requests whose token budget chose their ending (finish "length",
                          * complete) */
} hy_grammar_counts_t;

/* Which attention path a request's tokens took (the engine counts them as
 * it schedules them, recomputed ones included), reported once, at its end:
 * its log line says it (issue 14).  A block a sparse token reads comes from
 * the hot pool, or, older than a hot window ([cache] hot_tokens_per_seq),
 * from the runner's out arena: its host RAM (warm) or, for a block with a
 * page only in the spill file, the disk (cold; the backend counts both). */
typedef struct {
    uint64_t dense_tokens;  /* tokens whose attention read every position */
    uint64_t sparse_tokens; /* tokens whose full-attention layers went block-sparse */
    uint64_t blocks_hot;    /* blocks those read from the pool, summed over layers and KV
                             * heads */
    uint64_t blocks_warm;   /* ... from the out arena's RAM */
    uint64_t blocks_cold;   /* ... with a page read from its spill file */
} hy_attn_counts_t;

struct hy_req_source_i {
    const char *name;
    /* The best queued request (lowest params.priority, then lowest order)
     * moves from QUEUED to RUNNING and is handed over.  HY_ENOENT: none. */
    int (*take)(hy_req_source_t *src, hy_req_taken_t *out);
    /* The submitter asked to stop id (or gave it up). */
    bool (*cancelled)(hy_req_source_t *src, int32_t id);
    /* id was admitted for the first time: n_cached of its prompt tokens came
     * from the prefix cache. */
    void (*started)(hy_req_source_t *src, int32_t id, int32_t n_cached);
    /* One generated token.  HY_EFULL when the reader is that far behind: the
     * engine keeps the token and offers it again on a later step. */
    int (*push)(hy_req_source_t *src, int32_t id, const hy_ring_tok_t *t);
    /* The attention paths id's tokens took, just before its finish. */
    void (*attn_counted)(hy_req_source_t *src, int32_t id, const hy_attn_counts_t *c);
    /* The end: state HY_REQ_DONE / HY_REQ_CANCELLED / HY_REQ_ERROR with its
     * HY_FINISH_* reason (code and msg for errors, msg may be NULL).  The
     * engine lets go of id. */
    void (*finish)(hy_req_source_t *src, int32_t id, uint32_t state, int32_t reason,
                   int32_t code, const char *msg);
    /* A counter that changes on every submit and cancel: the engine reads
     * it before a step and, when nothing could run, waits for a change. */
    uint32_t (*epoch)(hy_req_source_t *src);
    /* Returns when epoch() != seen, on kick(), or after timeout_ms. */
    void (*wait)(hy_req_source_t *src, uint32_t seen, int timeout_ms);
    /* Wakes a wait(): the engine thread's stop. */
    void (*kick)(hy_req_source_t *src);
    /* A running request lost its pages to a senior one (counted for /metrics). */
    void (*preempted)(hy_req_source_t *src);
    /* A step computed n prompt tokens (cache hits never reach a step, and
     * recomputing generated tokens after a preemption is not prompt work):
     * the prompt tokens/s gauges of /metrics. */
    void (*prompt_computed)(hy_req_source_t *src, int32_t n);
    /* Grammar work done since the last call (/metrics, bench --offline). */
    void (*grammar_counted)(hy_req_source_t *src, const hy_grammar_counts_t *delta);
};

struct hy_req_source {
    const struct hy_req_source_i *i;
    void *ctx;
};

#endif
