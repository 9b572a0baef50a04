/*
 * guard.h - the supervisor's hold on the FastCGI connections its workers
 * are answering, so that a worker that dies mid-answer gives the client an
 * aborted response, never one that looks complete.
 *
 * Why: nginx (1.22, and upstream still) ends an unbuffered FastCGI response
 * normally when the connection closes before FCGI_END_REQUEST (u->length is
 * -1 and EOF counts as the end, ngx_http_upstream_process_non_buffered_
 * request), so a killed worker's stream got a last chunk over HTTP/1.1 and a
 * clean END_STREAM over HTTP/2.  nginx aborts only on a read error or a
 * record it cannot parse; a SIGKILLed process can send neither.  So each
 * worker hands a duplicate of every connection it accepts to the supervisor
 * (SCM_RIGHTS over a socketpair) and says when it is done with it; when the
 * worker dies, the supervisor writes, onto each connection still held, a
 * FastCGI stderr record saying why (nginx logs it) and then a record header
 * nginx rejects: nginx aborts the response (no terminating chunk over
 * HTTP/1.1, RST_STREAM over HTTP/2), or, before the response header, takes
 * it for a broken upstream (502: the site's 503 with Retry-After).
 * Each libfcgi write is one whole record of at most 8 KiB, which AF_UNIX
 * queues all or nothing, so the supervisor's bytes always start a record.
 */
#ifndef HY_SERVER_GUARD_H
#define HY_SERVER_GUARD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/hy.h"

/* The supervisor's side for one worker slot.  It outlives the worker: a new
 * worker in the slot gets a new socketpair (hy_guard_open again), while
 * aborts still waiting for room stay in pending. */
typedef struct {
    int fd;            /* the supervisor's end of the socketpair; -1 = none */
    int *conns;        /* [n_threads] connection held for each accept thread; -1 */
    uint32_t n_threads;
    int *pending;      /* [n_pending] connections whose abort did not fit yet */
    uint32_t n_pending, cap_pending;
    char why[160];     /* the stderr text of the pending aborts */
} hy_guard_t;

/* ---- worker side (the end hy_guard_open gave it, blocking) ---- */

/* Accept thread `thread` took connection conn_fd.  Failures (the supervisor
 * not draining, no fd to spare) are returned, not fatal: the request is
 * served unguarded. */
int hy_guard_hold(int worker_end, uint32_t thread, int conn_fd, char *err);
/* Accept thread `thread` finished its request (FCGX_Finish_r done). */
int hy_guard_drop(int worker_end, uint32_t thread, char *err);

/* The bytes of an abort: a FastCGI stderr record carrying why (cut at 256
 * bytes), then a header nginx rejects.  Returns their length, 0 when cap is
 * too small; async-signal-safe (a worker writes it from a signal handler
 * when its master dies, as nobody else is left to). */
#define HY_GUARD_ABORT_MAX (8 + 256 + 8 + 8)
size_t hy_guard_abort_record(unsigned char *rec, size_t cap, const char *why);

/* ---- supervisor side ---- */

/* Zeroes g (fds -1); call once per slot before the first hy_guard_open. */
void hy_guard_init(hy_guard_t *g);
/* A new socketpair for the next worker of the slot (n_threads accept
 * threads); *worker_end is the worker's end, which the supervisor closes
 * once it has forked.  Connections a previous worker left held are closed. */
int hy_guard_open(hy_guard_t *g, uint32_t n_threads, int *worker_end, char *err);
/* Reads every message the worker sent so far (holds and drops), and retries
 * the pending aborts; never blocks. */
void hy_guard_poll(hy_guard_t *g);
/* The slot's worker pid died (status from waitpid): every connection it
 * still held gets the abort.  Returns how many; the socketpair is closed. */
int hy_guard_abort(hy_guard_t *g, pid_t pid, int status);
/* Closes every descriptor of g: at shutdown, and in a freshly forked worker
 * (which must not keep its siblings' connections open). */
void hy_guard_close(hy_guard_t *g);

#endif
