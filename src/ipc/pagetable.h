/*
 * pagetable.h - the shared page table and prefix cache: KV page ids with
 * refcounts, recurrent-state slots, and recurrent-state checkpoint slots,
 * all indexed by a block hash chain so a new request can reuse the longest
 * cached prefix.  It lives in one caller-provided memory block (normally a
 * region of the coordinator's shared-memory segment) and holds offsets,
 * never pointers, so every process that maps it sees the same table.  The
 * KV and state memory itself belongs to the backend; this only hands out ids.
 *
 * Page states (derived from each entry, so they can be rebuilt after a crash):
 *   used   refcount > 0 (a running sequence, or several sharing a full block)
 *   cached refcount 0 and HASHED: a full block a prefix hit may reuse; on the
 *          LRU list, evicted oldest-first when free pages run out
 *   free   refcount 0, not hashed; on the free list
 * Invariant (hy_pt_check): used + free + cached == total, for pages and for
 * checkpoint slots; used + free == total for state slots.
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

#define HY_PT_HASH_ROOT 0x9e3779b97f4a7c15ULL /* h_{-1}: the empty prefix */
#define HY_PT_MAGIC 0x31544150594859ULL       /* "HYPAPT1" */

/* Entry flags. */
#define HY_PT_F_HASHED 1u  /* indexed by hash (page: a committed full block) */
#define HY_PT_F_PENDING 2u /* checkpoint reserved but its state not written yet */

typedef struct {
    int32_t n_pages;            /* KV pages, each page_tokens positions */
    int32_t page_tokens;        /* 1..4096 */
    int32_t n_state_slots;      /* live recurrent states (>= 0; 0 = pure attention) */
    int32_t n_checkpoint_slots; /* recurrent-state snapshots for prefix reuse (>= 0) */
    int32_t index_capacity;     /* hash index slots, a power of two >
                                   n_pages + n_checkpoint_slots; 0 = automatic */
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
 * the page and the checkpoint that end at that boundary.  Empty when both
 * are -1.  Deletion shifts back, so there are no tombstones. */
typedef struct {
    uint64_t hash;
    int32_t page;
    int32_t ckpt;
} hy_pt_index_t;

typedef struct {
    int32_t n_total;
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
    hy_pt_pool_t pages, ckpts;
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

/* A process-local view of the table. */
typedef struct hy_pt {
    hy_pt_shared_t *sh;
    hy_pt_entry_t *pages;  /* [n_pages] */
    hy_pt_entry_t *ckpts;  /* [n_checkpoint_slots] */
    int32_t *states;       /* [n_state_slots]: free-list link, or HY_PT_STATE_USED */
    hy_pt_index_t *index;  /* [index_capacity] */
    int32_t *tokens;       /* [n_pages][page_tokens]: each hashed page's block */
    int32_t *depth;        /* [n_pages]: block number of each hashed page */
    pthread_mutex_t *mu;   /* NULL: the caller serialises all access */
    void (*on_recover)(void *ctx); /* extra work after hy_pt_recover on EOWNERDEAD */
    void *recover_ctx;
} hy_pt_t;

#define HY_PT_STATE_USED (-2)

/* Result of hy_pt_match.  Caller sets pages/cap; the rest is output. */
typedef struct {
    int32_t *pages;   /* in: array for matched page ids; out: refs taken */
    int32_t cap;      /* in: its capacity (blocks considered at most) */
    int32_t n_blocks; /* matched full blocks */
    int32_t n_tokens; /* = n_blocks * page_tokens */
    int32_t ckpt;     /* checkpoint slot at the end of the match (ref taken), or -1 */
    uint64_t hash;    /* chain hash after the last matched block (ROOT if none) */
} hy_pt_match_t;

typedef struct {
    int32_t pages_total, pages_used, pages_free, pages_cached;
    int32_t ckpt_total, ckpt_used, ckpt_free, ckpt_cached;
    int32_t state_total, state_used;
    uint64_t page_evictions, ckpt_evictions;
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

/* n fresh private pages (refcount 1, unhashed) into out, evicting cached
 * pages LRU-first if needed.  HY_EFULL and nothing taken if even evicting
 * every cached page is not enough. */
int hy_pt_alloc_pages(hy_pt_t *pt, int32_t n, int32_t *out, char *err);
/* Drops one reference from each page, last first (so a sequence's early
 * blocks stay cached longest).  Hashed pages reaching 0 become cached,
 * others free.  HY_EINVAL for a bad id or a page already at 0 (the rest are
 * still released). */
int hy_pt_release_seq(hy_pt_t *pt, const int32_t *pages, int32_t n, char *err);
/* A page's block just filled: index it under hash (computed by the caller
 * with hy_pt_block_hash over this block's tokens) at chain depth `block`.
 * Returns HY_OK, or 1 when another page already holds that hash (this one
 * stays private and is freed, not cached, on release). */
int hy_pt_commit_block(hy_pt_t *pt, int32_t page, uint64_t hash, int32_t block,
                       const int32_t *tokens, char *err);
/* Longest cached prefix of tokens[0..n) in whole blocks, leaving at least one
 * token to compute (a prompt that is all cache still needs logits).  With
 * need_checkpoint the match ends at the last block boundary that also has a
 * ready checkpoint (m->ckpt, ref taken).  Page refs are taken. */
int hy_pt_match(hy_pt_t *pt, const int32_t *tokens, int32_t n, bool need_checkpoint,
                hy_pt_match_t *m, char *err);
/* hy_pt_match that also says how many leading full blocks have cached pages,
 * checkpoint or not (>= m->n_blocks; refs only on m->n_blocks of them).
 * With need_checkpoint, more of them than m->n_blocks means the prompt
 * branches off a cached prefix whose state was never snapshotted at its
 * end: the engine snapshots it there for the next request. */
int hy_pt_match_ex(hy_pt_t *pt, const int32_t *tokens, int32_t n, bool need_checkpoint,
                   hy_pt_match_t *m, int32_t *n_page_blocks, char *err);

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
