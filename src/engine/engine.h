/*
 * engine.h - the engine: takes requests from a request source (ipc/source.h),
 * schedules every running sequence into one mixed batch per step (decode
 * tokens + chunked prefill, one forward pass), samples, and hands the tokens
 * back to the source.  KV pages, state slots and recurrent-state checkpoints
 * come from a page table (ipc/pagetable.h), so prefix caching spans requests.
 *
 * The server gives it the shared segment's request slots and page table and
 * runs it on its own thread (hy_engine_start); `hyserve run` and `hyserve
 * bench --offline` give it an in-process source (engine/local.h) and a
 * private page table and drive it step by step from their own thread
 * (hy_engine_poll).  The engine never sees which.
 */
#ifndef HY_ENGINE_ENGINE_H
#define HY_ENGINE_ENGINE_H

#include <stdio.h>

#include "engine/outstore.h"
#include "ipc/pagetable.h"
#include "ipc/source.h"
#include "ipc/tier.h"
#include "kv/plan.h"
#include "model/model.h"
#include "model/tokenizer.h"

typedef struct hy_engine hy_engine_t;

typedef struct {
    int32_t max_batch_tokens;    /* [engine] max_batch_tokens */
    int32_t max_seqs;            /* [engine] max_seqs */
    int32_t n_ctx;               /* per sequence; 0 = model's */
    int32_t page_tokens;         /* [cache] page_tokens */
    hy_dtype_t kv_type;          /* [cache] kv_type */
    uint64_t memory_bytes;       /* [cache] budget for KV pages + state slots + checkpoints;
                                    0 = max_seqs full-context sequences */
    int32_t checkpoint_interval; /* [cache] checkpoint_interval tokens (0 = prompt ends only) */
    int32_t n_request_slots;     /* requests the source can hold ([server] max_queue + max_seqs) */
    hy_kv_sparse_t sparse;       /* [attention]: block-sparse full-attention layers
                                    (kv/plan.h hy_plan_sparse); zeros: dense */
    int32_t hot_blocks;          /* [cache] hot_tokens_per_seq in blocks (hy_plan_hot_window):
                                    a running sequence's older blocks leave the pool for the
                                    runner's out arena; 0: all hot */
    uint64_t out_warm_bytes;     /* [cache] seq_warm_mb: the out arena's pages in host RAM at
                                    most, the rest in a spill file under out_dir; 0: all */
    const char *out_dir;         /* [cache] disk_dir (needed when out_warm_bytes is below
                                    the arena) */
    bool swa_full;               /* sliding-window layers keep every position too (no
                                    sliding page group; llama.cpp's --swa-full) */
    bool no_checkpoints;         /* no recurrent-state checkpoint slots: requests that never
                                    share a prefix (hyserve run) */
    const hy_tok_t *tok;         /* the model's tokenizer, when the caller has loaded it
                                    already (only read); NULL: the engine loads its own */
    hy_tier_t *tiers;            /* the warm/cold tiers under the page table (the
                                    caller's; outlives the engine), or NULL */
    hy_stats_t *stats;           /* where the out arena's counts go after each step (the
                                    shared segment's), or NULL */
} hy_engine_opts_t;

/* The context length o gives for m (o->n_ctx, else the model's). */
int32_t hy_engine_n_ctx(const hy_model_t *m, const hy_engine_opts_t *o);
/* The memory plan (kv/plan.h) of an engine with options o on m. */
int hy_engine_plan(const hy_model_t *m, hy_backend_t *be, const hy_engine_opts_t *o,
                   hy_plan_t *plan, char *err);

/* The page table the engine needs (pages, state slots, checkpoints) from
 * the model, the backend's sizes and the memory budget split between KV
 * pages and state+checkpoint slots; never refuses because slots <
 * max_seqs: sizes them (fewer state slots means fewer running sequences). */
int hy_engine_pt_params(const hy_model_t *m, hy_backend_t *be, const hy_engine_opts_t *o,
                        hy_pt_params_t *out, char *err);
/* pt must have been made with hy_engine_pt_params' numbers (or at least as
 * many pages and slots); src is copied.  The engine uses both until freed. */
int hy_engine_create(hy_engine_t **out, hy_model_t *m, hy_backend_t *be, hy_pt_t *pt,
                     const hy_req_source_t *src, const hy_engine_opts_t *o, char *err);
/* The engine on its own thread: steps while there is work, waits on the
 * source while there is none. */
int hy_engine_start(hy_engine_t *e, char *err);
void hy_engine_stop(hy_engine_t *e); /* finishes the current step, cancels the rest */
/* Or driven by the caller: one step (take, admit, one forward pass, sample,
 * hand tokens over).  Returns how many sequences ran; 0 when nothing can
 * run now (no request, or every one waits for its reader). */
int32_t hy_engine_poll(hy_engine_t *e);
/* Ends every request the engine holds, and every one still queued in the
 * source, as cancelled with reason why; their pages go back. */
void hy_engine_cancel_all(hy_engine_t *e, const char *why);
void hy_engine_free(hy_engine_t *e);
/* With tiers: writes the hot tier's cached pages and checkpoints that the
 * disk tier lacks (the engine stopped), so a restart finds them; returns
 * how many were written. */
int64_t hy_engine_persist_tiers(hy_engine_t *e);
/* Bytes of one KV page of each group (HY_KV_FULL, HY_KV_SWA; 0 for a
 * group the model does not use), for the memory gauges. */
void hy_engine_page_bytes(const hy_engine_t *e, uint64_t page_bytes[HY_KV_GROUPS]);
/* The out arena's counts (zeros without a hot window); the engine thread's
 * own, so call it when the engine is idle or stopped. */
void hy_engine_out_counts(const hy_engine_t *e, hy_outstore_counts_t *c);
/* One key=value line: pages, slots, split, capacity. */
void hy_engine_describe(const hy_engine_t *e, FILE *f);

#endif
