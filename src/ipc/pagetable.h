/*
 * pagetable.h - the shared page table and prefix cache: KV page ids with
 * refcounts, recurrent-state slots, and recurrent-state checkpoint slots,
 * all indexed by a block hash chain so a new request can reuse the longest
 * cached prefix.  It lives in one caller-provided memory block (normally a
 * region of the coordinator's shared-memory segment) and holds offsets,
 * never pointers, so every process that maps it sees the same table.  The
 * KV and state memory itself belongs to the backend; this only hands out ids.
 *
 * Page groups (common/kvgroup.h): full-attention layers keep KV in the
 * HY_KV_FULL group, sliding-window layers in the HY_KV_SWA group; each
 * group is its own pool of pages (ids 0..n-1 within the group, the
 * backend's arenas are per group) with its own free list, LRU and
 * counters, and one prefix index maps a block hash to the page of each
 * group (and the checkpoint) ending at that boundary.  A model with no
 * full-attention layer still gets full-group pages (of 0 bytes in the
 * backend): they carry the prefix chain that matches verify.  Sequences
 * release sliding pages as they slide out of the window (hashed ones stay
 * cached, first in line for eviction: hy_pt_release_stale).
 *
 * Page states (derived from each entry, so they can be rebuilt after a crash):
 *   used   refcount > 0 (a running sequence, or several sharing a full block)
 *   cached refcount 0 and HASHED: a full block a prefix hit may reuse; on the
 *          LRU list, evicted oldest-first when free pages run out
 *   free   refcount 0, not hashed; on the free list
 * Invariant (hy_pt_check): used + free + cached == total, for each page
 * group and for checkpoint slots; used + free == total for state slots.
 *
 * Prefix hashing: h_0 = HY_PT_HASH_ROOT, h_i = hy_pt_block_hash(h_{i-1},
 * tokens of block i) (a wyhash-style 64-bit mix).  Collisions: every hashed
 * page also stores its block's tokens and its chain depth, and a hit needs
 * hash, depth and tokens to agree, so two different blocks never alias; the
 * remaining risk is two different *prefixes* colliding in 64 bits and then
 * continuing with identical blocks (~2^-64 per pair; accepted).
 *
 * Copy-on-write rule: only FULL blocks are ever hashed, so only full blocks
 * are shared, and a full block is immutable once committed.  A partial last
 * block is never hashed, never matched and never shared: it is always
 * private (refcount 1) and its owner writes into it in place.  A prefix hit
 * therefore never hands out a block anybody will write into.
 *
 * Sliding-window layers: a hit of B blocks needs, besides the full group's
 * pages of blocks 0..B-1, the sliding group's pages of the blocks the next
 * token still sees (hy_kv_swa_first_block .. B-1): hy_pt_match with a
 * window stops at the longest prefix that has them.
 *
 * Hybrid models: a hit must also restore the recurrent state at the block
 * boundary where the hit ends.  Checkpoint slots (one sequence's whole
 * recurrent state each; the memory lives in the backend) are indexed by the
 * same hash as the page that ends at that boundary, and hy_pt_match() with
 * need_checkpoint stops at the longest prefix whose pages are all present AND
 * that has a checkpoint at its end.
 *
 * Locking: every public function takes the table's mutex itself (a robust,
 * process-shared mutex owned by the shm segment, or NULL when one thread
 * owns the table).  If a holder died mid-update (EOWNERDEAD) the next
 * locker rebuilds free lists, LRU lists, the index and the counters from the
 * entries (hy_pt_recover) before marking the mutex consistent.
 */
#ifndef HY_IPC_PAGETABLE_H
#define HY_IPC_PAGETABLE_H

#include <pthread.h>
#include <stdatomic.h>

#include "common/hy.h"
#include "common/kvgroup.h"

#define HY_PT_HASH_ROOT 0x9e3779b97f4a7c15ULL /* h_{-1}: the empty prefix */
#define HY_PT_MAGIC 0x31544150594859ULL       /* "HYPAPT1" */

/* Entry flags. */
#define HY_PT_F_HASHED 1u  /* indexed by hash (page: a committed full block) */
#define HY_PT_F_PENDING 2u /* checkpoint reserved but its state not written yet */
#define HY_PT_F_STALE 4u   /* sliding page cached after it left a running sequence's
                              window outside every window worth keeping
                              (hy_pt_release_stale): evicted first, freed, never
                              demoted to a lower tier; cleared by the next reference */

typedef struct {
    int32_t n_pages;            /* full-group KV pages, each page_tokens positions */
    int32_t page_tokens;        /* 1..4096 */
    int32_t n_state_slots;      /* live recurrent states (>= 0; 0 = pure attention) */
    int32_t n_checkpoint_slots; /* recurrent-state snapshots for prefix reuse (>= 0) */
    int32_t index_capacity;     /* hash index slots, a power of two > n_pages +
                                   n_swa_pages + n_checkpoint_slots; 0 = automatic */
    int32_t n_swa_pages;        /* sliding-group KV pages (0 = no sliding group) */
} hy_pt_params_t;

/* One page or checkpoint slot. 32 bytes. */
typedef struct {
    int32_t refcount;
    uint32_t flags;    /* HY_PT_F_* */
    uint64_t hash;     /* chain hash of the prefix ending with this block (if HASHED) */
    uint64_t last_use; /* table tick of the last ref/unref: rebuilds LRU order */
    int32_t prev;      /* LRU links while cached (-1 = none) */
    int32_t next;      /* LRU link while cached, free-list link while free */
} hy_pt_entry_t;

/* Open-addressing (linear probing) index slot: one per distinct hash; holds
 * the page of each group and the checkpoint that end at that boundary.
 * Empty when all are -1.  Deletion shifts back, so there are no tombstones. */
typedef struct {
    uint64_t hash;
    int32_t page[HY_KV_GROUPS]; /* page id within its group, or -1 */
    int32_t ckpt;
    int32_t pad;
} hy_pt_index_t;

typedef struct {
    int32_t n_total;
    int32_t base;       /* first entry of this pool in its entry array */
    int32_t free_head;  /* -1 = empty */
    int32_t lru_head;   /* least recently used cached entry (evicted first) */
    int32_t lru_tail;   /* most recently used */
    _Atomic int32_t n_used, n_free, n_cached; /* read lock-free by /metrics */
    _Atomic uint64_t evictions;
} hy_pt_pool_t;

/* The shared header at offset 0 of the table's memory block. */
typedef struct {
    uint64_t magic;
    uint64_t total_size;
    hy_pt_params_t params; /* index_capacity resolved */
    uint64_t off_pages, off_ckpts, off_states, off_index, off_tokens, off_depth;
    hy_pt_pool_t pages, ckpts; /* pages: the full group */
    hy_pt_pool_t swa;          /* the sliding group (entries after the full group's) */
    int32_t state_free_head;
    _Atomic int32_t n_state_used;
    _Atomic int32_t n_index_used;
    uint64_t tick;
    _Atomic uint64_t queries, query_tokens, hits, hit_tokens, recoveries;
} hy_pt_shared_t;

/* Where each array lives inside the memory block (bytes from its start). */
typedef struct {
    uint64_t off_pages, off_ckpts, off_states, off_index, off_tokens, off_depth;
    uint64_t total_size;
    int32_t index_capacity;
} hy_pt_layout_t;

/* Called under the lock for each cached page or checkpoint the table is
 * about to reuse (LRU eviction), before its id goes to a new owner: a tier
 * store (ipc/tier.h) copies the content down instead of losing it.  what:
 * HY_PT_EVICT_CKPT for a checkpoint slot at the boundary hash; else the
 * page group (HY_KV_FULL / HY_KV_SWA) of page id (an id within that
 * group), with its block's chain hash, depth and tokens.  Stale sliding
 * pages (HY_PT_F_STALE) are not offered: they are only freed. */
#define HY_PT_EVICT_CKPT (-1)
typedef void (*hy_pt_evict_fn)(void *ctx, int32_t what, int32_t id, uint64_t hash, int32_t depth,
                               const int32_t *tokens);

/* A process-local view of the table. */
typedef struct hy_pt {
    hy_pt_shared_t *sh;
    hy_pt_entry_t *pages;  /* [n_pages + n_swa_pages]: full group, then sliding */
    hy_pt_entry_t *ckpts;  /* [n_checkpoint_slots] */
    int32_t *states;       /* [n_state_slots]: free-list link, or HY_PT_STATE_USED */
    hy_pt_index_t *index;  /* [index_capacity] */
    int32_t *tokens;       /* [n_pages + n_swa_pages][page_tokens]: each hashed
                              page's block (entry order) */
    int32_t *depth;        /* [n_pages + n_swa_pages]: block number of each hashed page */
    pthread_mutex_t *mu;   /* NULL: the caller serialises all access */
    void (*on_recover)(void *ctx); /* extra work after hy_pt_recover on EOWNERDEAD */
    void *recover_ctx;
    hy_pt_evict_fn on_evict;       /* NULL: evicted content is dropped */
    void *evict_ctx;
} hy_pt_t;

#define HY_PT_STATE_USED (-2)

/* Result of hy_pt_match.  Caller sets pages/cap (and swa_pages/window for
 * a model with a sliding group); the rest is output. */
typedef struct {
    int32_t *pages;   /* in: array for matched full-group page ids; out: refs taken */
    int32_t cap;      /* in: its capacity (blocks considered at most) */
    int32_t n_blocks; /* matched full blocks */
    int32_t n_tokens; /* = n_blocks * page_tokens */
    int32_t ckpt;     /* checkpoint slot at the end of the match (ref taken), or -1 */
    uint64_t hash;    /* chain hash after the last matched block (ROOT if none) */
    int32_t *swa_pages; /* in: [cap] for the sliding group's page ids by block, or NULL;
                           out: [swa_first, n_blocks) hold refs, the rest -1 */
    int32_t window;     /* in: the sliding group's window in tokens (0 = none) */
    int32_t swa_first;  /* out: first block with a sliding page */
} hy_pt_match_t;

typedef struct {
    int32_t pages_total, pages_used, pages_free, pages_cached; /* the full group */
    int32_t swa_total, swa_used, swa_free, swa_cached;         /* the sliding group */
    int32_t ckpt_total, ckpt_used, ckpt_free, ckpt_cached;
    int32_t state_total, state_used;
    uint64_t page_evictions, ckpt_evictions, swa_evictions;
    uint64_t queries, query_tokens, hits, hit_tokens, recoveries;
} hy_pt_counts_t;

uint64_t hy_pt_block_hash(uint64_t prev, const int32_t *tokens, int32_t n);

/* Fills in defaults for zero index_capacity, validates, computes offsets. */
int hy_pt_layout(const hy_pt_params_t *p, hy_pt_layout_t *out, char *err);
/* Formats mem (size bytes, 64-byte aligned) as an empty table. */
int hy_pt_init(hy_pt_t *pt, void *mem, uint64_t size, const hy_pt_params_t *p,
               pthread_mutex_t *mu, char *err);
/* Builds a view of a table another process formatted; checks its header. */
int hy_pt_open(hy_pt_t *pt, void *mem, uint64_t size, pthread_mutex_t *mu, char *err);

/* A table in this process's own memory with no mutex, for one owner
 * (`hyserve run`, the tools, the tests): the same allocator as the shared
 * one, with no lock calls.  hy_pt_destroy frees only tables made here. */
int hy_pt_create(hy_pt_t **out, const hy_pt_params_t *p, char *err);
void hy_pt_destroy(hy_pt_t *pt);

/* The robust lock (EOWNERDEAD -> recover).  HY_EIO if not recoverable. */
int hy_pt_lock(hy_pt_t *pt);
void hy_pt_unlock(hy_pt_t *pt);
/* Rebuilds every derived structure from the entries.  Lock held. */
void hy_pt_recover(hy_pt_t *pt);
/* Empties the table: every page, checkpoint and state slot free, nothing
 * cached (the backend memory the ids named is gone: a dead engine's).
 * Takes the lock (recovering a dead holder's); HY_EIO if unrecoverable. */
int hy_pt_reset(hy_pt_t *pt);

/* n fresh private pages of group (HY_KV_FULL / HY_KV_SWA; refcount 1,
 * unhashed) into out, evicting the group's cached pages LRU-first if
 * needed.  HY_EFULL and nothing taken if even evicting every cached page
 * of the group is not enough. */
int hy_pt_alloc_pages(hy_pt_t *pt, int32_t group, int32_t n, int32_t *out, char *err);
/* Drops one reference from each page of group, last first (so a
 * sequence's early blocks stay cached longest).  Hashed pages reaching 0
 * become cached (most recently used), others free.  HY_EINVAL for a bad
 * group, a bad id or a page already at 0 (the rest are still released). */
int hy_pt_release_seq(hy_pt_t *pt, int32_t group, const int32_t *pages, int32_t n, char *err);
/* hy_pt_release_seq for sliding pages that slid out of a running
 * sequence's window: hashed ones reaching 0 stay cached but go to the
 * front of the LRU, evicted before the last windows of finished prefixes
 * (which a next request can resume from). */
int hy_pt_release_stale(hy_pt_t *pt, int32_t group, const int32_t *pages, int32_t n,
                        char *err);
/* A page's block just filled: index it under hash (computed by the caller
 * with hy_pt_block_hash over this block's tokens) at chain depth `block`.
 * Returns HY_OK, or 1 when another page of the group already holds that
 * hash (this one stays private and is freed, not cached, on release). */
int hy_pt_commit_block(hy_pt_t *pt, int32_t group, int32_t page, uint64_t hash, int32_t block,
                       const int32_t *tokens, char *err);
/* Longest cached prefix of tokens[0..n) in whole blocks, leaving at least one
 * token to compute (a prompt that is all cache still needs logits).  With
 * need_checkpoint the match ends at the last block boundary that also has a
 * ready checkpoint (m->ckpt, ref taken); with m->window > 0 (and a sliding
 * group) at the last one whose sliding pages of that window are all
 * cached (m->swa_pages[m->swa_first .. m->n_blocks), refs taken).  Full-group
 * page refs are taken. */
int hy_pt_match(hy_pt_t *pt, const int32_t *tokens, int32_t n, bool need_checkpoint,
                hy_pt_match_t *m, char *err);
/* hy_pt_match that also says how many leading full blocks have cached
 * full-group pages, checkpoint and sliding window or not (>= m->n_blocks;
 * refs only on m->n_blocks of them).  More of them than m->n_blocks means
 * the prompt branches off a cached prefix whose state was never
 * snapshotted at its end, or whose sliding pages there were evicted: the
 * engine snapshots the state there, and keeps that window's sliding pages,
 * for the next request. */
int hy_pt_match_ex(hy_pt_t *pt, const int32_t *tokens, int32_t n, bool need_checkpoint,
                   hy_pt_match_t *m, int32_t *n_page_blocks, char *err);

/* The hot run of a prompt, as hy_pt_match walks it (whole blocks, at
 * least one token left), without counting a query: for the tier store to
 * continue the chain below it.  Caller sets pages (and ckpt, swa, hashes,
 * or NULL) with room for cap; out: n_blocks leading blocks with a cached
 * or used full-group page, their page ids, the ready checkpoint at the
 * end of each (or -1), the sliding-group page of each (or -1: none hot),
 * the chain hash after each and after them all.  ref: a reference is
 * taken on each full page of the run and on each sliding page found at a
 * block >= swa_from (a promotion's own window; its other sliding pages
 * keep their place in the LRU); give them back with hy_pt_lookup_release. */
typedef struct {
    int32_t *pages;
    int32_t *ckpt;     /* or NULL */
    uint64_t *hashes;  /* or NULL: the chain hash after each block of the run */
    int32_t cap;
    int32_t n_blocks;
    uint64_t hash;
    int32_t *swa;      /* or NULL: [cap] sliding page of each block, -1 = not hot */
    int32_t swa_from;  /* in (with ref): first block whose sliding page is referenced */
} hy_pt_run_t;
int hy_pt_lookup(hy_pt_t *pt, const int32_t *tokens, int32_t n, bool ref, hy_pt_run_t *r,
                 char *err);
/* Drops the references hy_pt_lookup(ref = true) took. */
void hy_pt_lookup_release(hy_pt_t *pt, const hy_pt_run_t *r);

/* Reserves a checkpoint slot for the state at the boundary `hash` (ref taken,
 * PENDING: invisible to matches).  Evicts the LRU cached checkpoint if none
 * is free; HY_EFULL if all are in use.  If a checkpoint for hash exists
 * already, returns it with a ref and *existed = true (do not write it). */
int hy_pt_checkpoint_put(hy_pt_t *pt, uint64_t hash, int32_t *slot, bool *existed,
                         char *err);
/* The backend finished writing the state: make it matchable, drop the ref. */
int hy_pt_checkpoint_publish(hy_pt_t *pt, int32_t slot, char *err);
/* Drops a ref (after copying from a matched checkpoint, or to abandon a
 * pending one, which is then freed). */
int hy_pt_checkpoint_release(hy_pt_t *pt, int32_t slot, char *err);

/* Live recurrent-state slots for running sequences. */
int hy_pt_state_alloc(hy_pt_t *pt, int32_t *slot, char *err);
int hy_pt_state_free(hy_pt_t *pt, int32_t slot, char *err);

/* Verifies every invariant (counts, lists, index); HY_EFORMAT + message. */
int hy_pt_check(hy_pt_t *pt, char *err);
/* Lock-free snapshot of the counters (each individually consistent). */
void hy_pt_counts(const hy_pt_t *pt, hy_pt_counts_t *c);

#endif
