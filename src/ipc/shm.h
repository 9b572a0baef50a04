/*
 * shm.h - the shared-memory segment between the coordinator (engine) and the
 * preforked FastCGI workers: /dev/shm/hyserve-<instance>, mode 0600, created
 * O_EXCL by the coordinator and unlinked at its shutdown, attached read-write
 * by workers and by hyserve-ctl.  One fixed layout sized from parameters and
 * described by a versioned header (magic, layout version, total size, every
 * region's offset/count/element size, creation time, coordinator pid); all
 * cross-references are offsets, never pointers, so it maps anywhere.
 *
 * Regions: the page table + prefix cache (ipc/pagetable.h, guarded by the one
 * robust process-shared mutex in the header), request slots, their prompt
 * arena and token rings (ipc/ring.h, lock-free), and the stats counters
 * that /metrics and `hyserve-ctl status` read.
 */
#ifndef HY_IPC_SHM_H
#define HY_IPC_SHM_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "common/hy.h"
#include "common/winstat.h"
#include "ipc/pagetable.h"
#include "ipc/tier_file.h"

#define HY_SHM_MAGIC 0x314d48535948ULL /* "HYSHM1" */
#define HY_SHM_LAYOUT_VERSION 11 /* 2: model file, sha256 and its state in the header;
                                 3: windows, HTTP counts and memory facts in the stats;
                                 4: grammar_len in the request parameters (the spec
                                    follows the prompt), grammar counters in the stats;
                                 5: the sliding-window page group;
                                 6: the warm and cold tiers' counters (with the sliding
                                    group's pages as their own kind) in the stats;
                                 7: the engine process's pid and state in the header,
                                    each slot's generated tokens (HISTORY) for resuming
                                    a request after an engine crash;
                                 8: the tiers' given-up prefix fetches in the stats;
                                 9: blocks read from the out arena in each slot,
                                    attention paths and blocks by tier in the stats;
                                 10: the out arena's gauges and counters;
                                 11: blocks read from the out arena split into its RAM
                                     and its spill file (slots and stats), the arena's
                                     failed background reads */
#define HY_SHM_INSTANCE_MAX 48 /* [A-Za-z0-9_.-], not starting with '.' */

typedef struct {
    int32_t n_pages;               /* KV pages of the full-attention group */
    int32_t page_tokens;           /* tokens per page / prefix block */
    int32_t n_state_slots;         /* live recurrent states */
    int32_t n_checkpoint_slots;    /* recurrent-state snapshots for prefix reuse */
    int32_t n_request_slots;       /* in-flight requests (1..65536) */
    int32_t max_prompt_tokens;     /* per request, in the prompt arena */
    int32_t ring_capacity;         /* generated tokens buffered per request */
    int32_t ring_top_logprobs;     /* alternatives stored per token, 0..20 */
    int32_t prefix_index_capacity; /* 0 = automatic (see hy_pt_params_t) */
    int32_t n_swa_pages;           /* KV pages of the sliding-window group (0 = none) */
} hy_shm_params_t;

enum {
    HY_SHM_REG_PT,           /* page-table header (hy_pt_shared_t) */
    HY_SHM_REG_PAGES,        /* hy_pt_entry_t [n_pages + n_swa_pages] */
    HY_SHM_REG_CKPTS,        /* hy_pt_entry_t [n_checkpoint_slots] */
    HY_SHM_REG_STATES,       /* int32_t [n_state_slots] */
    HY_SHM_REG_INDEX,        /* hy_pt_index_t [prefix index capacity] */
    HY_SHM_REG_DEPTH,        /* int32_t [n_pages + n_swa_pages] */
    HY_SHM_REG_BLOCK_TOKENS, /* int32_t [n_pages + n_swa_pages][page_tokens] */
    HY_SHM_REG_SLOTS,        /* hy_req_slot_t [n_request_slots] */
    HY_SHM_REG_PROMPTS,      /* int32_t [n_request_slots][max_prompt_tokens] */
    HY_SHM_REG_RINGS,        /* ring entries [n_request_slots][ring_capacity] */
    HY_SHM_REG_HISTORY,      /* hy_req_hist_t [n_request_slots][max_prompt_tokens]: every
                                token pushed, so a new engine can resume the request */
    HY_SHM_REG_STATS,        /* hy_stats_t */
    HY_SHM_NREG
};

typedef struct {
    uint64_t off;  /* bytes from the segment start */
    uint64_t size; /* bytes */
    uint64_t count;
    uint32_t elem_size;
    uint32_t pad;
} hy_shm_region_t;

typedef struct {
    uint64_t magic;
    uint32_t layout_version;
    uint32_t header_size; /* sizeof(hy_shm_header_t): catches mismatched builds */
    uint64_t total_size;
    hy_shm_params_t params;
    uint32_t n_regions;
    uint32_t ring_entry_size;
    uint32_t slot_size;  /* sizeof(hy_req_slot_t) */
    uint32_t mutex_size; /* sizeof(pthread_mutex_t) */
    hy_shm_region_t regions[HY_SHM_NREG];
    int64_t created_unix; /* seconds */
    int32_t coordinator_pid;
    _Atomic uint32_t ready;        /* 1 once fully initialised */
    _Atomic uint32_t engine_futex; /* bumped on submit/cancel: wakes an idle engine */
    _Atomic uint32_t engine_waiting;
    _Atomic uint32_t claim_hint;   /* where the next slot search starts */
    _Atomic uint64_t submit_seq;   /* FIFO order among equal priorities */
    pthread_mutex_t lock __attribute__((aligned(64))); /* robust, process-shared */
    /* The model file's SHA-256, hashed by the coordinator in a background
     * thread after start (serving does not wait for it); /v1/models and
     * /health show "<file name>@<first 8 hex digits>" once state is DONE. */
    _Atomic uint32_t model_sha256_state; /* HY_SHM_SHA256_* */
    char model_sha256[65];               /* lower-case hex; written before DONE */
    char model_file[256];                /* resolved file name without ".gguf"; set before ready */
    /* The engine process (server/engine_proc.c), written by the master:
     * its pid (0 while none runs) and HY_SHM_ENGINE_*; /health and
     * /metrics read them.  retry_at_ns: while FAILED, when the master
     * tries a new engine (Retry-After). */
    _Atomic int32_t engine_pid;
    _Atomic uint32_t engine_state;
    _Atomic int64_t engine_retry_at_ns;
} hy_shm_header_t;

enum { HY_SHM_SHA256_PENDING, HY_SHM_SHA256_DONE, HY_SHM_SHA256_FAILED };

enum {
    HY_SHM_ENGINE_STARTING = 0, /* the first engine is loading */
    HY_SHM_ENGINE_RUNNING,      /* an engine serves the slots */
    HY_SHM_ENGINE_RESTARTING,   /* it died; its requests wait for the next one */
    HY_SHM_ENGINE_FAILED,       /* it died too often ([server] engine_restart_max): every
                                   request is refused until engine_retry_at_ns */
};

/* ---- stats (atomics only; read without locks) ---------------------------- */

#define HY_STATS_HTTP_ORIGINS 2    /* 0 hyserve, 1 nginx */
#define HY_STATS_HTTP_ENDPOINTS 12 /* server/metrics.c names them */
#define HY_STATS_HTTP_CODES 500    /* statuses 100..599 */

#define HY_STATS_NBUCKETS 22 /* finite bounds; one more bucket is +Inf */
/* Upper bounds in seconds shared by every latency histogram. */
extern const double hy_stats_bucket_le[HY_STATS_NBUCKETS];

typedef struct {
    _Atomic uint64_t bucket[HY_STATS_NBUCKETS + 1]; /* non-cumulative counts */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_us;
    hy_qwin_t win; /* the same observations over the last 60 s: /metrics summaries */
} hy_stats_hist_t;

/* ---- the KV tiers (ipc/tier.h) ---------------------------------------------
 * hot = the page table's pool (its own counters), warm = host RAM, cold =
 * files under [cache] disk_dir.  The tier store (engine side) keeps the
 * warm and cold gauges here; the engine counts hits per tier. */
enum { HY_TIER_HOT, HY_TIER_WARM, HY_TIER_COLD, HY_TIER_LEVELS };
enum { HY_TIER_USED, HY_TIER_FREE, HY_TIER_CACHED, HY_TIER_STATES };
/* why a disk-tier file was dropped */
enum { HY_TIER_DROP_CORRUPT, HY_TIER_DROP_FOREIGN, HY_TIER_DROP_UNREADABLE, HY_TIER_DROP_N };
/* why a prompt's wait for its prefix from the lower tiers was given up
 * and the rest of the prefix recomputed (engine/tiering.h): it read
 * entries back more often than its budget allows (the warm tier thrashes:
 * what it read was pushed out again before it was promoted), its front
 * block did not move for HY_TIERING_STALL_MS (a read that does not end),
 * or nothing could move (every warm slot pinned, the hot pool full) */
enum { HY_TIER_GIVEUP_REREADS, HY_TIER_GIVEUP_STALLED, HY_TIER_GIVEUP_NO_ROOM, HY_TIER_GIVEUP_N };
/* their names in the log line and the metric's reason label */
extern const char *const hy_tier_giveup_name[HY_TIER_GIVEUP_N];
/* the disk tier's life: off, waiting for the model's SHA-256, indexing
 * the directory (already served), ready, given up (log line says why) */
enum { HY_TIER_DISK_OFF, HY_TIER_DISK_WAITING, HY_TIER_DISK_INDEXING, HY_TIER_DISK_READY,
       HY_TIER_DISK_FAILED };

#define HY_TIER_NBUCKETS 16 /* finite bounds; one more bucket is +Inf */
/* Upper bounds in seconds of the per-page tier transfer histograms: a page
 * moves in microseconds to milliseconds, below the request buckets. */
extern const double hy_tier_bucket_le[HY_TIER_NBUCKETS];

typedef struct {
    _Atomic uint64_t bucket[HY_TIER_NBUCKETS + 1]; /* non-cumulative */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_ns;
} hy_tier_hist_t;

typedef struct {
    /* entries of each kind (HY_TIER_PAGE / HY_TIER_CKPT) by state, and
     * bytes by state; warm and cold only (hot: the page table) */
    _Atomic int64_t n[HY_TIER_LEVELS][HY_TIER_KINDS][HY_TIER_STATES];
    _Atomic int64_t bytes[HY_TIER_LEVELS][HY_TIER_STATES];
    _Atomic uint64_t hits[HY_TIER_LEVELS];       /* prefix blocks a hit took from the tier */
    _Atomic uint64_t promotions[HY_TIER_LEVELS]; /* entries moved up out of the tier */
    _Atomic uint64_t demotions[HY_TIER_LEVELS];  /* entries moved down into the tier */
    _Atomic uint64_t read_bytes[HY_TIER_LEVELS], write_bytes[HY_TIER_LEVELS];
    hy_tier_hist_t read_time[HY_TIER_LEVELS];  /* one entry out of the tier */
    hy_tier_hist_t write_time[HY_TIER_LEVELS]; /* one entry into the tier */
    _Atomic uint64_t dropped[HY_TIER_DROP_N];  /* disk files dropped, by reason */
    _Atomic uint64_t skipped_writes;           /* not written: the disk budget is all pinned */
    _Atomic uint64_t fetch_giveups[HY_TIER_GIVEUP_N]; /* prefix waits given up, by reason */
    _Atomic uint32_t disk_state;               /* HY_TIER_DISK_* */
} hy_tier_stats_t;

void hy_tier_observe(hy_tier_hist_t *h, uint64_t ns);

enum {
    HY_STATS_REQ_STOP,      /* finished: stop token / stop condition */
    HY_STATS_REQ_LENGTH,    /* finished: max_tokens */
    HY_STATS_REQ_CANCELLED, /* client went away or asked */
    HY_STATS_REQ_ERROR,     /* engine error */
    HY_STATS_REQ_REJECTED,  /* no free slot at submit (HTTP 503) */
    HY_STATS_REQ_N
};

typedef struct {
    _Atomic uint64_t requests[HY_STATS_REQ_N];
    hy_stats_hist_t ttft;  /* submit -> first token */
    hy_stats_hist_t tpot;  /* mean time per output token after the first */
    hy_stats_hist_t e2e;   /* submit -> finish */
    hy_stats_hist_t queue; /* submit -> taken by the engine */
    _Atomic uint64_t prompt_tokens, generation_tokens, cached_prompt_tokens;
    _Atomic int32_t running, waiting, slots_used;
    _Atomic uint64_t preemptions, worker_restarts, reaped_requests;
    /* ---- for operators (server/metrics.c) ---- */
    /* every HTTP answer, by who produced it (hyserve, or nginx handing us
     * its own refusal), endpoint (hy_metrics_endpoint) and status 100..599 */
    _Atomic uint64_t http[HY_STATS_HTTP_ORIGINS][HY_STATS_HTTP_ENDPOINTS][HY_STATS_HTTP_CODES];
    hy_rwin_t generation_rate; /* tokens pushed to clients, per second */
    hy_rwin_t prompt_rate;     /* prompt tokens computed (cache hits excluded) */
    /* Counters the crash-proof master (engine respawns) and the disk tier
     * (failed reads/writes/checksums) add to; 0 until those exist. */
    _Atomic uint64_t engine_restarts, disk_errors;
    /* memory facts the coordinator publishes once before ready: bytes of
     * the weights, of one KV page of each group and of one state slot (a
     * checkpoint slot is the same size); multiplied by the page table's counts */
    _Atomic uint64_t mem_weights_bytes, mem_page_bytes, mem_slot_bytes, mem_swa_page_bytes;
    hy_tier_stats_t tiers;
    /* grammar-constrained decoding (what the engine reports through
     * hy_req_source_i.grammar_counted) */
    _Atomic uint64_t grammar_requests, grammar_compiles, grammar_cache_hits;
    _Atomic uint64_t grammar_compile_us, grammar_masks, grammar_mask_us;
    _Atomic uint64_t grammar_fill_us; /* part of mask_us: token sets filled on first use */
    _Atomic uint64_t grammar_closed;  /* answers the token budget closed (engine.c) */
    /* finished requests' attention (hy_attn_counts_t): tokens dense and
     * sparse, blocks sparse tokens read from the pool and the out arena */
    _Atomic uint64_t attn_dense_tokens, attn_sparse_tokens, sparse_blocks_hot, sparse_blocks_warm,
        sparse_blocks_cold;
    /* the out arena (engine/outstore.h: running sequences' pages beyond
     * their hot window, in RAM or only in the spill file), as the engine
     * last published it: pages it can hold, RAM slots, of which used, used
     * pages only on disk, the page and file bytes; cold pages brought up,
     * pages written, bytes read and written */
    _Atomic int64_t out_units, out_warm_slots, out_warm_used, out_cold_used;
    _Atomic uint64_t out_unit_bytes, out_file_bytes;
    _Atomic uint64_t out_promotions, out_spills, out_disk_read_bytes, out_disk_write_bytes;
    _Atomic uint64_t out_read_failures; /* the I/O thread's reads that failed or mismatched */
    hy_tier_hist_t out_read_time, out_write_time; /* one page from / to the spill file */
} hy_stats_t;

void hy_stats_observe(hy_stats_hist_t *h, uint64_t us);


/* ---- the segment ----------------------------------------------------------- */

typedef struct hy_shm hy_shm_t;

/* A small default for tests and `hyserve run`; the coordinator fills its own. */
void hy_shm_params_default(hy_shm_params_t *p);

/* The segment for an engine's page table (hy_engine_pt_params), with
 * n_request_slots slots for prompts of up to max_prompt_tokens, and rings
 * of 256 tokens with room for every logprob a request may ask for. */
void hy_shm_params_for(hy_shm_params_t *p, const hy_pt_params_t *pt, int32_t n_request_slots,
                       int32_t max_prompt_tokens);

/* Validates p and computes the header (sizes, regions) it would produce. */
int hy_shm_layout(const hy_shm_params_t *p, hy_shm_header_t *hdr, char *err);

/* Coordinator: creates and formats /dev/shm/hyserve-<instance>.  Fails if it
 * exists (another coordinator, or a stale one: see hy_shm_remove_stale). */
int hy_shm_create(hy_shm_t **out, const char *instance, const hy_shm_params_t *p, char *err);
/* Workers and tools: maps an existing segment read-write after checking its
 * header against this build's layout. */
int hy_shm_attach(hy_shm_t **out, const char *instance, char *err);
/* Removes a segment whose coordinator is gone.  HY_OK removed, HY_ENOENT none,
 * HY_EINVAL its coordinator still runs. */
int hy_shm_remove_stale(const char *instance, char *err);
/* Unmaps; the creator also unlinks the name. */
void hy_shm_close(hy_shm_t *shm);

const hy_shm_header_t *hy_shm_header(const hy_shm_t *shm);
hy_shm_header_t *hy_shm_header_rw(hy_shm_t *shm);
void *hy_shm_region(hy_shm_t *shm, int reg);
hy_pt_t *hy_shm_pt(hy_shm_t *shm);
hy_stats_t *hy_shm_stats(hy_shm_t *shm);

/* The segment mutex (the page table's): HY_OK, or HY_EIO if unrecoverable.
 * EOWNERDEAD is handled inside (page-table accounting rebuilt). */
int hy_shm_lock(hy_shm_t *shm);
void hy_shm_unlock(hy_shm_t *shm);

/* Engine idle wait: returns when engine_futex != seen or after timeout_ms
 * (-1 = forever).  Workers call hy_shm_engine_kick after submit/cancel. */
void hy_shm_engine_wait(hy_shm_t *shm, uint32_t seen, int timeout_ms);
void hy_shm_engine_kick(hy_shm_t *shm);

int64_t hy_shm_now_ns(void); /* CLOCK_MONOTONIC: comparable across processes */

#endif
