/*
 * tiering.h - the engine's side of the KV tiers: it connects the page
 * table (the hot tier, ipc/pagetable.h), the backend that holds the hot
 * bytes, and the warm/cold store (ipc/tier.h).  Eviction from the page
 * table copies a cached page or checkpoint down (the table's on_evict
 * hook); before a request is admitted, the prefix it shares with cached
 * pages is followed below the hot tier, and what the warm and cold tiers
 * hold of it is brought back into the page table, so the ordinary match
 * that follows finds it hot.  Cold entries are read by the store's I/O
 * threads while the engine steps other sequences: the request waits,
 * others are admitted past it; the wait is bounded (hy_tiering_wait_t),
 * and what does not come up is recomputed.
 */
#ifndef HY_ENGINE_TIERING_H
#define HY_ENGINE_TIERING_H

#include "backend/backend.h"
#include "ipc/pagetable.h"
#include "ipc/tier.h"
#include "kv/plan.h"

typedef struct hy_tiering hy_tiering_t;

/* Hooks store under pt (which then demotes instead of dropping).
 * max_blocks: the most full blocks a prompt has (n_ctx / page_tokens).
 * n_state_slots: the backend state slots before the checkpoint slots.
 * window: the sliding page group's (0: none); page_bytes: the backend's
 * bytes of a page of each group, which must be the store's units.
 * HY_EUNSUPPORTED when the backend cannot copy pages out, HY_EINVAL when
 * the store was sized for other pages. */
int hy_tiering_create(hy_tiering_t **out, hy_pt_t *pt, hy_backend_t *be, hy_tier_t *store,
                      int32_t max_blocks, int32_t n_state_slots, bool hybrid, int32_t window,
                      const uint64_t page_bytes[HY_KV_GROUPS], char *err);
/* Unhooks and frees (the store stays the caller's). */
void hy_tiering_free(hy_tiering_t *tg);

/* A prompt's wait for its prefix from the lower tiers, kept by the caller
 * between calls to hy_tiering_prepare (all zero before the first; zeroed
 * again when the wait ends).  It bounds the wait: the reads it may queue
 * (twice each entry the prefix has below hot: once more for an entry the
 * warm tier pushed out before it was promoted) and the time its front
 * block may stand still. */
typedef struct {
    bool started;
    int32_t reads_left; /* reads it may still queue */
    int32_t front;      /* blocks hot when the front last moved */
    int64_t moved_us;   /* when it last moved (CLOCK_MONOTONIC) */
} hy_tiering_wait_t;

/* How long a front block may wait for its read before the rest of the
 * prefix is recomputed: a read that takes this long has a disk that is
 * gone (a healthy one reads a page in a millisecond or less). */
#define HY_TIERING_STALL_MS 10000

/* Before the page-table match of a prompt: promotes what the lower tiers
 * hold of its prefix, from its front, as far as it is warm, and asks the
 * disk for what comes next.  0: go on and match (what did not come up is
 * recomputed; a wait given up is counted in hy_tier_stats_t.fetch_giveups
 * and logged); 1: entries are on their way up from disk, ask again on a
 * later step.  Never 1 forever: see hy_tiering_wait_t. */
int hy_tiering_prepare(hy_tiering_t *tg, const int32_t *tokens, int32_t n, hy_tiering_wait_t *w);
/* Tests: the stall bound in milliseconds instead of HY_TIERING_STALL_MS. */
void hy_tiering_set_stall_ms(hy_tiering_t *tg, int32_t ms);

/* Writes every cached page and checkpoint of the hot tier to the disk
 * tier (those it lacks): at shutdown, so a restart finds them.  The
 * engine must be stopped.  Returns the entries written. */
int64_t hy_tiering_persist_hot(hy_tiering_t *tg);

/* The store options a model's geometry gives (the plan the engine uses,
 * its pools of n_pages full-group and n_swa_pages sliding-group pages):
 * each kind's unit bytes, the sliding pages' share of the warm tier, and
 * the files' identity except the model's size and SHA-256. */
void hy_tiering_store_opts(const hy_model_t *m, const hy_plan_t *plan, int32_t n_pages,
                           int32_t n_swa_pages, hy_tier_opts_t *to);

#endif
