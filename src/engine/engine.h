/*
 * engine.h - the coordinator's engine: one thread that takes requests from
 * the shared segment's request slots, schedules every running sequence into
 * one mixed batch per step (decode tokens + chunked prefill, one forward
 * pass), samples, and streams tokens into the slots' rings.  KV pages, state
 * slots and recurrent-state checkpoints come from the segment's page table,
 * so prefix caching spans requests and workers.
 */
#ifndef HY_ENGINE_ENGINE_H
#define HY_ENGINE_ENGINE_H

#include <stdio.h>

#include "model/model.h"
#include "ipc/shm.h"

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
    int32_t n_request_slots;     /* [server] max_queue + max_seqs */
} hy_engine_opts_t;

/* Fills the segment parameters (pages, state slots, checkpoints, request
 * slots...) from the model, the backend's sizes and the memory budget split
 * between KV pages and state+checkpoint slots; never refuses because slots
 * < max_seqs: sizes them (fewer state slots means fewer running sequences). */
int hy_engine_shm_params(const hy_model_t *m, hy_backend_t *be, const hy_engine_opts_t *o,
                         hy_shm_params_t *out, char *err);
/* The segment must have been created with hy_engine_shm_params' numbers
 * (or at least as many pages/slots as the runner is given). */
int hy_engine_create(hy_engine_t **out, hy_model_t *m, hy_backend_t *be, hy_shm_t *shm,
                     const hy_engine_opts_t *o, char *err);
int hy_engine_start(hy_engine_t *e, char *err); /* engine thread */
void hy_engine_stop(hy_engine_t *e);            /* finishes the current step, cancels the rest */
void hy_engine_free(hy_engine_t *e);
/* One key=value line: pages, slots, split, capacity. */
void hy_engine_describe(const hy_engine_t *e, FILE *f);

#endif
