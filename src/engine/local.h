/*
 * local.h - a request source (ipc/source.h) in the engine's own process, for
 * the commands that run the engine without a server: `hyserve run` streams
 * one request through it, `hyserve bench --offline` keeps N in flight.  A
 * fixed number of request records is submitted, read and released by the
 * thread that also drives the engine (hy_engine_poll); tokens reach that
 * thread through a callback as the engine emits them, so there is no ring
 * and nothing ever waits for a reader.  Not for hy_engine_start: there is
 * no lock, and wait() returns at once because nobody else can submit.
 *
 * hy_local_engine_t bundles what such a command needs: a private page table
 * sized by hy_engine_pt_params, the source and the engine.
 */
#ifndef HY_ENGINE_LOCAL_H
#define HY_ENGINE_LOCAL_H

#include "engine/engine.h"

typedef struct hy_local hy_local_t;

/* Each token the engine emits for request id, in order, from inside
 * hy_engine_poll. */
typedef void (*hy_local_token_fn)(void *user, int32_t id, const hy_ring_tok_t *t);

typedef struct {
    uint32_t state;        /* HY_REQ_QUEUED .. HY_REQ_ERROR */
    bool done;             /* a final state */
    int32_t finish_reason; /* HY_FINISH_* once done */
    int32_t error_code;
    char error_msg[HY_REQ_ERRMSG_LEN];
    int32_t n_prompt, n_cached, n_generated;
    int64_t submit_ns, first_token_ns, finish_ns; /* CLOCK_MONOTONIC; 0 = not yet */
} hy_local_status_t;

/* n_slots requests may be submitted and not yet released at once. */
int hy_local_create(hy_local_t **out, int32_t n_slots, hy_local_token_fn on_token, void *user,
                    char *err);
void hy_local_free(hy_local_t *l);
void hy_local_source(hy_local_t *l, hy_req_source_t *out);

/* Queues a request (prompt copied) with the checks a request slot makes.
 * HY_EFULL when every record is in use. */
int hy_local_submit(hy_local_t *l, const hy_req_params_t *p, const int32_t *prompt, int32_t n,
                    int32_t *id, char *err);
/* The same with a grammar spec (grammar/grammar_cache.h, glen bytes, copied):
 * the engine constrains the output to it.  HY_ERANGE above
 * HY_GRAMMAR_MAX_SPEC bytes. */
int hy_local_submit_grammar(hy_local_t *l, const hy_req_params_t *p, const int32_t *prompt,
                            int32_t n, const void *grammar, size_t glen, int32_t *id, char *err);
/* Asks the engine to stop id; a request still queued ends at once. */
void hy_local_cancel(hy_local_t *l, int32_t id);
/* NULL for an id that is not submitted. */
const hy_local_status_t *hy_local_status(const hy_local_t *l, int32_t id);
/* The caller is done with id (cancelled first if it still runs: its record
 * is reused once the engine lets go of it too). */
void hy_local_release(hy_local_t *l, int32_t id);
/* What constrained decoding cost the engine so far, summed over every
 * request (the shared segment's /metrics counters, in process). */
void hy_local_grammar_counts(const hy_local_t *l, hy_grammar_counts_t *out);
/* The attention paths every request's tokens took, summed. */
void hy_local_attn_counts(const hy_local_t *l, hy_attn_counts_t *out);

typedef struct {
    hy_pt_t *pt;
    hy_local_t *local;
    hy_engine_t *engine;
} hy_local_engine_t;

int hy_local_engine_open(hy_local_engine_t *le, hy_model_t *m, hy_backend_t *be,
                         const hy_engine_opts_t *o, hy_local_token_fn on_token, void *user,
                         char *err);
/* Steps the engine until request id is done.  HY_EIO if the engine has
 * nothing left to run while id still is not done (it can never run). */
int hy_local_engine_wait(hy_local_engine_t *le, int32_t id, char *err);
/* Cancels what is left, checks that every page and slot went back to the
 * table (HY_EFORMAT with the count otherwise) and frees everything. */
int hy_local_engine_close(hy_local_engine_t *le, char *err);

#endif
