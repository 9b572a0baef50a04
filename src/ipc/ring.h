/*
 * ring.h - request slots and token rings in the shared segment.  A worker
 * submits a request into a free slot (prompt ids + sampling parameters), the
 * engine takes it, pushes generated tokens into the slot's single-producer /
 * single-consumer ring and bumps the slot's futex word; the worker waits on
 * that word with a timeout and streams tokens out.  Everything here is
 * lock-free (C11 atomics): slot claim is a CAS on the owner pid, the ring is
 * two monotonically increasing counters (head by the engine, tail by the
 * worker) with acquire/release ordering.
 *
 * Slot life: FREE -> CLAIMED (worker filling it) -> QUEUED -> RUNNING ->
 * DONE | CANCELLED | ERROR -> FREE.  A slot is freed when both sides have let
 * go: the worker (hy_req_release, or hy_shm_reap_owner after it died) and the
 * engine (hy_req_finish, or implicitly when a QUEUED request is cancelled
 * before the engine took it).  Handles carry a generation so a stale handle
 * never touches a reused slot.
 */
#ifndef HY_IPC_RING_H
#define HY_IPC_RING_H

#include "ipc/request.h"
#include "ipc/shm.h"
#include "ipc/source.h"

typedef struct {
    _Atomic uint32_t state;    /* HY_REQ_* */
    _Atomic int32_t owner_pid; /* 0 = unowned; the claim CAS */
    _Atomic uint32_t gen;      /* bumped on every free */
    _Atomic uint32_t released; /* bit 0 worker let go, bit 1 engine let go */
    _Atomic uint32_t cancel;   /* worker asks the engine to stop */
    _Atomic uint32_t futex;    /* bumped by the engine after each push/finish */
    _Atomic uint32_t waiting;  /* worker is (about to be) in FUTEX_WAIT */
    uint32_t prompt_len;
    uint64_t seq;              /* submit order */
    int64_t submit_ns, start_ns, first_token_ns, finish_ns;
    int32_t finish_reason;     /* HY_FINISH_* */
    int32_t error_code;
    int32_t n_cached_tokens;   /* prefix-cache hit, set by the engine */
    int32_t n_generated;
    int32_t n_resumed;         /* tokens a dead engine had pushed, set when re-queued */
    uint64_t dense_tokens, sparse_tokens, sparse_blocks_hot, sparse_blocks_warm,
        sparse_blocks_cold; /* hy_attn_counts_t, at the end */
    char error_msg[HY_REQ_ERRMSG_LEN];
    hy_req_params_t params;
    _Atomic uint64_t head __attribute__((aligned(64))); /* pushed (engine writes) */
    _Atomic uint64_t tail __attribute__((aligned(64))); /* consumed (worker writes) */
} hy_req_slot_t;

typedef struct {
    uint32_t idx;
    uint32_t gen;
} hy_req_handle_t;

typedef struct {
    uint32_t state;
    bool done;             /* final state reached and every token read */
    int32_t finish_reason; /* HY_FINISH_* once done */
    int32_t error_code;
    char error_msg[HY_REQ_ERRMSG_LEN];
    int32_t n_prompt, n_cached, n_generated;
    uint64_t dense_tokens, sparse_tokens, sparse_blocks_hot, sparse_blocks_warm,
        sparse_blocks_cold; /* once done (hy_attn_counts_t) */
} hy_req_status_t;

/* Bytes of one ring entry for a given top-logprob count. */
uint32_t hy_ring_entry_size(int32_t top_logprobs);
/* Formats every slot as FREE (called by hy_shm_create). */
void hy_req_init_slots(hy_shm_t *shm);

/* ---- worker side ---- */
/* Copies prompt + params into a free slot.  HY_EFULL when none is free (the
 * caller answers 503); HY_ERANGE/HY_EINVAL for bad input. */
int hy_req_submit(hy_shm_t *shm, const hy_req_params_t *p, const int32_t *prompt, int32_t n,
                  hy_req_handle_t *h, char *err);
/* The same with a grammar spec of len bytes (p->grammar_len is set from
 * len), stored after the prompt in the slot's arena: prompt and grammar
 * share its 4 * max_prompt_tokens bytes (HY_ERANGE when they do not fit). */
int hy_req_submit_grammar(hy_shm_t *shm, const hy_req_params_t *p, const int32_t *prompt,
                          int32_t n, const void *grammar, size_t len, hy_req_handle_t *h,
                          char *err);
/* Bytes a grammar spec may take next to an n-token prompt. */
size_t hy_req_grammar_room(const hy_shm_t *shm, int32_t n);
/* Up to max tokens into out; waits up to timeout_ms (0 = poll, -1 = forever)
 * when none is ready.  Returns the count (0 on timeout or when done) or a
 * negative code; st says the state and, once st->done, the finish reason. */
int hy_req_read(hy_shm_t *shm, hy_req_handle_t h, hy_ring_tok_t *out, int32_t max,
                int timeout_ms, hy_req_status_t *st, char *err);
/* Asks the engine to stop; a queued request is cancelled at once. */
int hy_req_cancel(hy_shm_t *shm, hy_req_handle_t h, char *err);
/* The worker is done with h (cancels first if still live). */
int hy_req_release(hy_shm_t *shm, hy_req_handle_t h, char *err);

/* ---- engine side ---- */
/* Takes the best queued request (lowest priority value, then oldest):
 * QUEUED -> RUNNING.  HY_ENOENT when nothing is queued. */
int hy_req_take(hy_shm_t *shm, int32_t *idx);
hy_req_slot_t *hy_req_slot(hy_shm_t *shm, int32_t idx);
const int32_t *hy_req_prompt(hy_shm_t *shm, int32_t idx);
/* The slot's grammar spec (params.grammar_len bytes), NULL when none. */
const void *hy_req_grammar(hy_shm_t *shm, int32_t idx);
bool hy_req_cancel_requested(hy_shm_t *shm, int32_t idx);
/* Appends one token and wakes the reader.  HY_EFULL when the reader is
 * ring_capacity tokens behind (keep the token and retry next step). */
int hy_req_push(hy_shm_t *shm, int32_t idx, const hy_ring_tok_t *t);
/* Final state (DONE/CANCELLED/ERROR) and reason; records stats; the engine
 * lets go of the slot. */
int hy_req_finish(hy_shm_t *shm, int32_t idx, uint32_t state, int32_t finish_reason,
                  int32_t error_code, const char *msg);

/* The engine's view of the slots (ipc/source.h): take, cancelled, push and
 * finish above, the segment's engine futex for epoch/wait/kick, and the
 * segment's stats for preemptions.  ctx is the segment. */
void hy_ring_source(hy_shm_t *shm, hy_req_source_t *out);

/* ---- coordinator ---- */
/* A worker died: cancel its requests and let go of them on its behalf.
 * Returns how many slots were reaped. */
int hy_shm_reap_owner(hy_shm_t *shm, pid_t pid);

/* The engine process died (the master calls this once it is reaped).  Its
 * KV memory died with it, so the page table is emptied (the robust mutex
 * recovered if it held it; every page, state and checkpoint free, the
 * prefix cache forgotten).  Then every request it held: with fail_msg ==
 * NULL a RUNNING one goes back to QUEUED with the tokens it already pushed
 * as its resume point (hy_req_taken_t.resumed) and its reader keeps its
 * ring; with fail_msg every RUNNING and QUEUED request ends as an ERROR
 * with error_code HY_EUNAVAILABLE and that message.  A request its worker
 * had cancelled ends CANCELLED either way.  Counts go to *requeued and
 * *failed (either may be NULL).  HY_EIO: the mutex is unrecoverable. */
int hy_shm_engine_lost(hy_shm_t *shm, const char *fail_msg, int *requeued, int *failed);
/* Ends every QUEUED request as hy_shm_engine_lost with fail_msg does (no
 * engine will take them): for requests submitted while the engine is
 * FAILED.  Returns how many. */
int hy_shm_fail_queued(hy_shm_t *shm, const char *fail_msg);

/* ---- observers (/metrics) ---- */
/* Running requests whose token ring is full: their reader (a client that
 * stopped reading, through its worker) is behind, so the engine holds them
 * until it reads (back-pressure). */
int32_t hy_shm_count_stalled(hy_shm_t *shm);

#endif
