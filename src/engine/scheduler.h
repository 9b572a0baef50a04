/*
 * scheduler.h - the engine's per-sequence bookkeeping and the pure policy
 * parts of scheduling: seniority order (priority, then submit order), how
 * many tokens of a sequence go into this step (chunked prefill that ends on
 * checkpoint boundaries for hybrid models), and which sequence to preempt
 * when KV pages run out (the most junior one, as vLLM does).  Resources
 * (pages, state slots, checkpoints) are handled by engine.c; this file never
 * touches the page table, so its decisions can be tested on their own.
 */
#ifndef HY_ENGINE_SCHEDULER_H
#define HY_ENGINE_SCHEDULER_H

#include "engine/sampler.h"
#include "engine/runner.h"
#include "engine/tiering.h"
#include "ipc/request.h"
#include "ipc/source.h"

enum {
    HY_SEQ_FREE = 0, /* pool entry unused */
    HY_SEQ_WAITING,  /* taken (or preempted), holds no pages or state slot */
    HY_SEQ_RUNNING,  /* holds pages (and a state slot for hybrid models) */
};

typedef struct {
    int32_t status;        /* HY_SEQ_* */
    int32_t id;            /* the request's id in its source (ipc/source.h) */
    hy_req_params_t params; /* the request's parameters, copied when taken */
    int32_t priority;      /* lower runs first */
    uint64_t order;        /* submit order: FCFS among equal priorities */
    int32_t *tokens;       /* [cap] prompt, then accepted generated tokens */
    int32_t n_prompt;
    int32_t n_total;       /* prompt + generated */
    int32_t cap;           /* n_ctx */
    int32_t max_tokens;
    hy_kv_seq_t kv;        /* page list (pages[cap/page_tokens+1]) and computed positions */
    int32_t state;         /* live recurrent-state slot, -1 = none */
    int32_t n_hashed;      /* leading blocks committed to the prefix cache */
    uint64_t hash;         /* chain hash after those blocks */
    int32_t branch;        /* hybrid: block boundary where this prompt leaves a cached
                              prefix that has pages but no checkpoint there (0 = none);
                              the state is snapshotted there so the next request that
                              shares the prefix resumes at its end */
    int32_t ckpt;          /* pending end-of-generation checkpoint, -1 = none */
    bool ckpt_existed;     /* ... which someone else wrote already (release, not publish) */
    bool started;          /* admitted at least once (cached-token count reported) */
    hy_sampler_t *sampler; /* kept across preemption: the RNG state continues */
    struct hy_gmatch *gm;  /* grammar position (NULL: unconstrained); kept likewise */
    hy_attn_counts_t attn; /* the attention paths its scheduled tokens take (engine.c) */
    bool closed;           /* the grammar's token budget chose one of its tokens: it
                            * finishes "length" (engine.c hy_engine_budget) */
    bool blocked;          /* a token waits for ring space */
    bool fetching;         /* waits for its prefix to come up from disk (engine/tiering.h) */
    hy_tiering_wait_t tw;  /* that wait's bounds */
    bool resuming;         /* recomputing the context a dead engine had (engine.c e->rs) */
    hy_ring_tok_t pending; /* that token */
    int32_t finish_after;  /* HY_FINISH_* once the pending token is pushed, else NONE */
    int32_t chunk;         /* tokens scheduled in this step */
} hy_sched_seq_t;

/* Negative when a runs before b (lower priority value, then older). */
int hy_sched_cmp(const hy_sched_seq_t *a, const hy_sched_seq_t *b);

/* Sorts pointers to sequences by seniority. */
void hy_sched_sort(hy_sched_seq_t **v, int32_t n);

/* Tokens of s to feed in this step, at most budget (> 0).  For hybrid
 * models the chunk stops at the next checkpoint boundary (a multiple of
 * ckpt_interval, the prompt boundary below, or s->branch) so the state at
 * that boundary can be snapshotted; interval 0 disables the multiples. */
int32_t hy_sched_chunk(const hy_sched_seq_t *s, int32_t budget, int32_t page_tokens,
                       int32_t ckpt_interval, bool hybrid);

/* The last block boundary strictly before the prompt's last token (0 if the
 * prompt is one block or less).  Strictly before, because a prefix match
 * always leaves the last token to compute (its logits are needed): an exact
 * repeat of a prompt of k full blocks can resume after k - 1 blocks, never
 * after k, so a checkpoint at k blocks would never be hit by it. */
int32_t hy_sched_prompt_boundary(const hy_sched_seq_t *s, int32_t page_tokens);

/* Most junior RUNNING sequence of v[0..n) that is junior to `asking` and
 * not already in this step's batch (chunk > 0); NULL if none. */
hy_sched_seq_t *hy_sched_victim(hy_sched_seq_t **v, int32_t n, const hy_sched_seq_t *asking);

#endif
