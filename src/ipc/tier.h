/*
 * tier.h - the warm and cold tiers under the page table's hot pool.  The
 * page table (ipc/pagetable.h) holds the pages the kernels read: the hot
 * tier.  When it evicts an unreferenced cached page or recurrent-state
 * checkpoint, its bytes come here instead of being lost: into host RAM
 * (warm, fixed slots, LRU) and from there, written through by I/O threads,
 * into checksummed files under [cache] disk_dir (cold, LRU within a byte
 * budget).  A prefix hit on a warm entry copies it back up; one on a cold
 * entry first reads it back into a warm slot on an I/O thread while the
 * engine goes on computing.  The files outlive the process: a new store on
 * the same directory re-indexes them in the background (and looks a file
 * up by its name until then), so a restarted server still hits them.
 *
 * Entries are keyed like the page table: (kind, chain hash); a page also
 * keeps its block's tokens and depth, and a lookup must match them all.
 * The page groups (common/kvgroup.h) are kinds of their own: a page of
 * the full-attention group (HY_TIER_PAGE) and one of the sliding-window
 * group (HY_TIER_SWA) ending at the same block share the hash, have their
 * own sizes (their layers), warm slots and files.
 * Hot and warm are exclusive (a page promoted to hot leaves warm; demoted
 * again, it is copied again); cold is inclusive (a file stays until the
 * disk budget evicts it), which is what makes it persistent.
 *
 * Accounting (hy_tier_check): per tier and kind, used (pinned: being
 * filled, copied up, read or written) + cached (idle content) + free =
 * total, in slots for warm and in bytes for cold (a write in flight holds
 * its reserved bytes as used).  The counters are mirrored into
 * hy_stats_t.tiers for /metrics.
 *
 * Threads: the engine thread calls everything below; the I/O threads and
 * the indexer run inside.  One mutex guards the store; file I/O happens
 * outside it, renames and unlinks inside it (so the index and the
 * directory never disagree about a name).
 */
#ifndef HY_IPC_TIER_H
#define HY_IPC_TIER_H

#include "ipc/shm.h"
#include "ipc/tier_file.h"

/* Reader threads (pread); one writer thread (pwrite, nice 10) comes on
 * top.  Measured (tests/unit/bench_tier, docs/tiers.md): two readers
 * bring a prefix up faster than one, four no faster on 2 cores. */
#define HY_TIER_IO_THREADS 2

/* What the fault hook is asked about: a file write, a file read, and the
 * indexer about to read a file's header (a test may hold it there). */
enum { HY_TIER_OP_WRITE, HY_TIER_OP_READ, HY_TIER_OP_INDEX };

typedef struct hy_tier hy_tier_t;

/* Host bytes one entry costs the store besides its unit (index links,
 * the block's tokens): what sizes the warm slots of a kind of 0-byte
 * units (the full page group of a model whose every attention layer
 * slides, whose pages only carry the prefix chain). */
static inline uint64_t hy_tier_entry_bytes(uint32_t page_tokens)
{
    return 64 + 4 * (uint64_t)page_tokens;
}

typedef struct {
    /* a full-attention group's KV page (its layers), a state checkpoint
     * (0: none), a sliding-window group's page (0: no such group) */
    uint64_t unit_bytes[HY_TIER_KINDS];
    /* the sliding group's share of the hot pool's page bytes: the warm
     * page bytes are split the same way (0: half, when there is a group) */
    double swa_share;
    uint64_t warm_bytes;   /* host RAM of the warm tier; 0 = no warm (and no cold) tier */
    const char *disk_dir;  /* NULL or "" = no cold tier; else needs warm_bytes > 0 */
    uint64_t disk_bytes;   /* the cold tier's files at most */
    int32_t io_threads;    /* reader threads; 0 = HY_TIER_IO_THREADS (+ 1 writer) */
    hy_tier_ident_t ident; /* page geometry and model size; the SHA-256 when sha_known */
    bool sha_known;
    /* The model file: when disk_dir/model.id remembers its SHA-256 for the
     * same size, mtime and inode, the disk tier starts without waiting for
     * the hash (NULL: always wait for hy_tier_set_model). */
    const char *model_path;
    hy_stats_t *stats;     /* counters for /metrics (NULL: kept private) */
    /* warm memory (pinned for a GPU's copies); NULL: anonymous mappings */
    void *(*host_alloc)(void *ctx, size_t bytes);
    void (*host_free)(void *ctx, void *p, size_t bytes);
    void *host_ctx;
    /* tests: an errno the next op on file `name` fails with, or 0 */
    int (*fault)(void *ctx, int op, const char *name);
    void *fault_ctx;
} hy_tier_opts_t;

/* A demotion in progress: the caller copies unit bytes into dst. */
typedef struct {
    int32_t entry;
    int32_t kind;
    void *dst;
    int64_t t0;
} hy_tier_put_t;

/* A promotion source: unit bytes at src, pinned until hy_tier_unpin. */
typedef struct {
    int32_t entry;
    int32_t kind;
    const void *src;
    bool from_cold; /* read up from disk for this promotion */
    int64_t t0;
} hy_tier_pin_t;

typedef struct {
    int64_t n[HY_TIER_LEVELS][HY_TIER_KINDS][HY_TIER_STATES]; /* warm, cold */
    int64_t total[HY_TIER_LEVELS][HY_TIER_KINDS];           /* warm slots */
    uint64_t bytes[HY_TIER_LEVELS][HY_TIER_STATES];
    uint64_t total_bytes[HY_TIER_LEVELS];
    int32_t jobs;       /* I/O queued or running */
    int32_t disk_state; /* HY_TIER_DISK_* */
} hy_tier_counts_t;

/* Sizes the warm slots (a quarter of warm_bytes for checkpoints when
 * there are any, at least one of each), opens, locks and checks disk_dir
 * (created if missing; two servers cannot share one), starts the I/O
 * threads and, when the model's SHA-256 is known, the indexer.  Errors
 * name what is wrong, for the caller to prefix with the config key. */
int hy_tier_create(hy_tier_t **out, const hy_tier_opts_t *o, char *err);
/* Finishes the writes already queued, stops the threads, frees. */
void hy_tier_free(hy_tier_t *t);

/* The model file's SHA-256 is known (the coordinator hashes it in the
 * background): the disk tier comes online and indexes its directory. */
void hy_tier_set_model(hy_tier_t *t, const uint8_t sha256[32]);
/* The hash failed: the disk tier stays off; why goes to the log. */
void hy_tier_disk_off(hy_tier_t *t, const char *why);

/* Demotion: a warm slot for (kind, hash) into p->dst.  HY_OK: copy the
 * unit bytes there and call hy_tier_put_end; 1: the tier has it already;
 * HY_ENOENT no warm tier for this kind; HY_EFULL every slot is pinned
 * and no I/O is under way.  When the writer is behind, the caller writes
 * a queued page itself first (backpressure without waiting on it). */
int hy_tier_put_begin(hy_tier_t *t, int32_t kind, uint64_t hash, int32_t depth,
                      const int32_t *tokens, hy_tier_put_t *p);
/* ok: the bytes are in; it becomes warm and, with a disk tier, is queued
 * for writing.  !ok: the slot goes back. */
void hy_tier_put_end(hy_tier_t *t, const hy_tier_put_t *p, bool ok);

/* Where (kind, hash) lives: HY_TIER_WARM, HY_TIER_COLD, or -1.  A page
 * must also have this depth and these tokens.  While the directory is
 * being indexed, a miss looks for the file by its name. */
int hy_tier_where(hy_tier_t *t, int32_t kind, uint64_t hash, int32_t depth,
                  const int32_t *tokens);
/* What hy_tier_fetch did: the entry is warm; its read was queued by this
 * call; no warm slot is free and no I/O is on its way to free one (every
 * slot is pinned by copies); a read queued earlier is still on its way;
 * no warm slot is free now, but an I/O on its way frees one when it ends
 * (ask again then).  A caller that bounds how much it reads counts only
 * HY_TIER_FETCH_QUEUED. */
enum {
    HY_TIER_FETCH_WARM,
    HY_TIER_FETCH_QUEUED,
    HY_TIER_FETCH_NO_SLOT,
    HY_TIER_FETCH_READING,
    HY_TIER_FETCH_BUSY
};

/* Brings a cold entry into a warm slot on an I/O thread: HY_TIER_FETCH_*,
 * or HY_ENOENT when it is not in any tier (a failed read drops it). */
int hy_tier_fetch(hy_tier_t *t, int32_t kind, uint64_t hash);
/* Pins a warm entry for copying up.  HY_ENOENT when it is not warm. */
int hy_tier_pin(hy_tier_t *t, int32_t kind, uint64_t hash, hy_tier_pin_t *p);
/* promoted: the copy reached the hot tier (counted; the warm slot is
 * freed, hot and warm being exclusive); else it stays warm. */
void hy_tier_unpin(hy_tier_t *t, const hy_tier_pin_t *p, bool promoted);

/* Writes bytes to the disk tier now, in this thread, unless a file for
 * (kind, hash) exists or is being written: the hot tier's cached pages at
 * shutdown.  HY_OK, 1 (nothing to do), HY_EFULL (over the budget),
 * HY_EIO (counted and logged). */
int hy_tier_persist(hy_tier_t *t, int32_t kind, uint64_t hash, int32_t depth,
                    const int32_t *tokens, const void *bytes);

/* Waits until no I/O is queued or running (and indexing is done). */
void hy_tier_sync(hy_tier_t *t);
void hy_tier_counts(hy_tier_t *t, hy_tier_counts_t *c);
/* Recounts every entry against the counters, the lists and the index;
 * with_dir also checks the directory (every file indexed, with its size;
 * no temporary file left).  HY_EFORMAT with the first difference. */
int hy_tier_check(hy_tier_t *t, bool with_dir, char *err);
/* Whether the store has a warm tier for kind; how many warm slots. */
bool hy_tier_has(const hy_tier_t *t, int32_t kind);
int32_t hy_tier_slots(const hy_tier_t *t, int32_t kind);
/* Bytes of one entry of kind (0: a kind the store does not hold). */
uint64_t hy_tier_unit_bytes(const hy_tier_t *t, int32_t kind);
/* The counters the store keeps (shared with /metrics): the engine adds
 * its hits per tier there. */
hy_tier_stats_t *hy_tier_stats(hy_tier_t *t);

#endif
