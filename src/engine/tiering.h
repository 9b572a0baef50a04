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
 * others are admitted past it.
 */
#ifndef HY_ENGINE_TIERING_H
#define HY_ENGINE_TIERING_H

#include "backend/backend.h"
#include "ipc/pagetable.h"
#include "ipc/tier.h"

typedef struct hy_tiering hy_tiering_t;

/* Hooks store under pt (which then demotes instead of dropping).
 * max_blocks: the most full blocks a prompt has (n_ctx / page_tokens).
 * n_state_slots: the backend state slots before the checkpoint slots.
 * HY_EUNSUPPORTED when the backend cannot copy pages out. */
int hy_tiering_create(hy_tiering_t **out, hy_pt_t *pt, hy_backend_t *be, hy_tier_t *store,
                      int32_t max_blocks, int32_t n_state_slots, bool hybrid, char *err);
/* Unhooks and frees (the store stays the caller's). */
void hy_tiering_free(hy_tiering_t *tg);

/* Before the page-table match of a prompt: promotes what the lower tiers
 * hold of its prefix.  0: go on and match; 1: entries are on their way
 * up from disk, ask again on a later step. */
int hy_tiering_prepare(hy_tiering_t *tg, const int32_t *tokens, int32_t n);

/* Writes every cached page and checkpoint of the hot tier to the disk
 * tier (those it lacks): at shutdown, so a restart finds them.  The
 * engine must be stopped.  Returns the entries written. */
int64_t hy_tiering_persist_hot(hy_tiering_t *tg);

#endif
