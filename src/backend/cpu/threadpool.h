/*
 * threadpool.h - persistent worker threads for the CPU backend.  A decode
 * step issues a few hundred ops of 10-50 us each, so starting an op must cost
 * about a microsecond: workers spin briefly on a generation counter and only
 * then sleep on a futex, and the caller runs a share of every job itself.
 */
#ifndef HY_CPU_THREADPOOL_H
#define HY_CPU_THREADPOOL_H

#include "common/hy.h"

typedef struct hy_pool hy_pool_t;

/* One job: called once per share ith in 0..nth-1, each share on one thread
 * (not necessarily a distinct one): the caller runs share 0, and any share
 * whose worker has not started when the caller is done with its own. */
typedef void (*hy_pool_fn_t)(void *arg, int ith, int nth);

/* n_threads counts the caller too; 0 = the CPUs this process may run on. */
int hy_pool_new(hy_pool_t **out, int n_threads, char *err);
void hy_pool_free(hy_pool_t *pool);
int hy_pool_size(const hy_pool_t *pool);

/* Runs fn on all threads and returns when every call has returned. */
void hy_pool_run(hy_pool_t *pool, hy_pool_fn_t fn, void *arg);
/* Same with only nth threads (1 <= nth <= size; clamped); nth == 1 runs fn in
 * the caller without waking anyone, for ops too small to share. */
void hy_pool_run_n(hy_pool_t *pool, int nth, hy_pool_fn_t fn, void *arg);

/* CPUs this process may run on (sched_getaffinity), at least 1. */
int hy_pool_default_threads(void);

#endif
