/*
 * kvgroup.h - KV page groups and the sliding-window rule, in one place for
 * the allocator (ipc/pagetable), the backends (which group's pool a layer
 * reads), the planner (kv/plan) and the engine.  Full-attention layers and
 * sliding-window layers keep KV in separate page groups (as vLLM's hybrid
 * allocator keeps "KV-cache groups"): a page of a group holds page_tokens
 * positions of every layer of that group, and each sequence has one page
 * list per group.  The full group keeps every position; the sliding group
 * keeps only the blocks that the sequence's next token can still see, so
 * a sliding layer's KV is bounded by its window, not by the context.
 */
#ifndef HY_COMMON_KVGROUP_H
#define HY_COMMON_KVGROUP_H

#include "common/hy.h"

enum {
    HY_KV_FULL = 0, /* full-attention layers: every position */
    HY_KV_SWA = 1,  /* sliding-window layers: the last `window` positions */
    HY_KV_GROUPS = 2,
};

/* The first block (page index) a sequence still needs in a sliding group
 * of `window` tokens once positions 0..n-1 are computed: the next token,
 * at position n, attends to positions n - window + 1 .. n (the kernels'
 * rule and llama.cpp's), and every later token sees less of the past.
 * A prefill chunk starting at n needs nothing older either.  window 0
 * (no sliding group) keeps everything. */
static inline int32_t hy_kv_swa_first_block(int32_t window, int32_t page_tokens, int32_t n)
{
    return window > 0 && n >= window ? (n - window + 1) / page_tokens : 0;
}

/* Blocks a sequence holds in the sliding group with n positions computed
 * and everything older than its window released. */
static inline int32_t hy_kv_swa_blocks(int32_t window, int32_t page_tokens, int32_t n)
{
    return (n + page_tokens - 1) / page_tokens - hy_kv_swa_first_block(window, page_tokens, n);
}

/* The most blocks one sequence holds in the sliding group at once: while
 * a chunk of `chunk` tokens runs, it holds what the chunk's first token
 * sees plus the chunk's own blocks.  With n_past - window + 1 = q *
 * page_tokens + r that is ceil((r + window - 1 + chunk) / page_tokens),
 * largest for r = page_tokens - 1; never more than the whole context. */
static inline int32_t hy_kv_swa_peak_blocks(int32_t window, int32_t page_tokens, int32_t chunk,
                                            int32_t n_ctx)
{
    int64_t all = ((int64_t)n_ctx + page_tokens - 1) / page_tokens;
    int64_t peak = ((int64_t)page_tokens + window + chunk - 2 + page_tokens - 1) / page_tokens;

    return (int32_t)(window > 0 && peak < all ? peak : all);
}

#endif
