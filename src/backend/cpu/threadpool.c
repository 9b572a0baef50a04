/*
 * threadpool.c - persistent workers woken by a generation counter.  The
 * caller publishes a job and bumps `gen`; workers spin on it for a short
 * time budget (fast hand-off between the back-to-back ops of one forward
 * pass) and then sleep on it with a futex (so an idle server burns no CPU).
 * Completion is the mirror image: workers count up `n_done`, the caller
 * spins, then sleeps on that word.  No mutex or condition variable per op.
 *
 * A worker's share of a job is claimed, by the worker or by the caller,
 * with one compare-and-swap on the worker's slot: when the caller is done
 * with its own share it takes over every share whose worker has not
 * started yet and runs it itself.  A worker that is descheduled (more
 * runnable threads than cores: other processes, parallel tests) then costs
 * its share's time instead of a whole time slice per op, and the caller
 * waits only for shares that are really running.
 */
#define _GNU_SOURCE
#include "backend/cpu/threadpool.h"
#include "common/futex.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HY_CPU_RELAX() _mm_pause()
#else
#define HY_CPU_RELAX() __asm__ __volatile__("" ::: "memory")
#endif

/* How long a thread spins before it sleeps.  Ops in one forward pass follow
 * each other within microseconds; 200 us covers those gaps with margin while
 * an idle pool goes to sleep almost at once. */
#define HY_POOL_SPIN_NS 200000LL
/* After this long a spinner yields its core on every clock check: when more
 * threads are runnable than there are cores (other processes, parallel
 * tests), the thread we wait for may be the one that is descheduled, and
 * spinning on would only delay it by a whole time slice. */
#define HY_POOL_YIELD_NS 20000LL

/* A slot holds (generation << 2) | state for its worker's share of the
 * job of that generation. */
enum { HY_SLOT_PENDING = 0, HY_SLOT_RUNNING = 1, HY_SLOT_TAKEN = 2 };

typedef struct {
    hy_pool_t *pool;
    int ith;
    _Alignas(64) _Atomic uint64_t slot;
} hy_pool_worker_t;

struct hy_pool {
    int n;                      /* threads including the caller */
    pthread_t *tids;            /* [n - 1] */
    hy_pool_worker_t *workers;  /* [n - 1] */
    /* job, written by the caller before it bumps gen */
    hy_pool_fn_t fn;
    void *arg;
    int nth;
    /* atomic: a worker that lost its share to the caller reads it with no
     * other synchronisation with the thread that sets it */
    _Atomic int stop;
    /* each word on its own cache line: they are hammered by spinners */
    _Alignas(64) _Atomic uint32_t gen;
    _Alignas(64) _Atomic uint32_t n_done;
    _Atomic int caller_waiting;
    /* shares claimed by their workers in the current job: n_done's goal
     * (set by the caller once its claims are over; read by workers only
     * after they finish a share, which the caller then still waits for) */
    _Atomic int n_running;
    _Alignas(64) _Atomic int n_sleeping;
};

static long long hy_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Spins until *word != seen or the budget runs out; returns the last value. */
static uint32_t hy_pool_spin(_Atomic uint32_t *word, uint32_t seen)
{
    long long start = 0;
    uint32_t v;

    for (unsigned i = 0;; i++) {
        v = atomic_load_explicit(word, memory_order_acquire);
        if (v != seen)
            return v;
        HY_CPU_RELAX();
        /* read the clock only now and then: it costs ~20 ns */
        if ((i & 63) == 63) {
            long long now = hy_now_ns();
            if (start == 0)
                start = now;
            else if (now - start > HY_POOL_SPIN_NS)
                return v;
            else if (now - start > HY_POOL_YIELD_NS)
                sched_yield();
        }
    }
}

static void *hy_pool_main(void *p)
{
    hy_pool_worker_t *w = p;
    hy_pool_t *pool = w->pool;
    uint32_t seen = 0;

    for (;;) {
        uint32_t g = hy_pool_spin(&pool->gen, seen);
        if (g == seen) {
            /* Sleep.  Dekker pairing with hy_pool_run_n: we bump n_sleeping
             * then re-read gen; the caller bumps gen then reads n_sleeping,
             * so one of us sees the other (seq_cst on both). */
            atomic_fetch_add(&pool->n_sleeping, 1);
            while ((g = atomic_load(&pool->gen)) == seen)
                hy_futex_wait_private(&pool->gen, seen);
            atomic_fetch_sub(&pool->n_sleeping, 1);
        }
        seen = g;
        if (atomic_load_explicit(&pool->stop, memory_order_acquire))
            break;
        /* The share is ours only if the caller has not taken it (nor moved
         * on to a later job, which rewrote the slot): job parameters are
         * read only after the claim, so a late worker never reads a job
         * the caller has already finished. */
        uint64_t want = (uint64_t)g << 2 | HY_SLOT_PENDING;
        if (!atomic_compare_exchange_strong(&w->slot, &want,
                                            (uint64_t)g << 2 | HY_SLOT_RUNNING))
            continue;
        pool->fn(pool->arg, w->ith, pool->nth);
        uint32_t d = atomic_fetch_add(&pool->n_done, 1) + 1;
        if (d == (uint32_t)pool->n_running && atomic_load(&pool->caller_waiting))
            hy_futex_wake_private(&pool->n_done, 1);
    }
    return NULL;
}

int hy_pool_default_threads(void)
{
    cpu_set_t set;

    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Stops and joins the first n_started workers. */
static void hy_pool_stop(hy_pool_t *pool, int n_started)
{
    atomic_store_explicit(&pool->stop, 1, memory_order_release);
    atomic_fetch_add(&pool->gen, 1);
    hy_futex_wake_private(&pool->gen, INT_MAX);
    for (int i = 0; i < n_started; i++)
        pthread_join(pool->tids[i], NULL);
}

int hy_pool_new(hy_pool_t **out, int n_threads, char *err)
{
    hy_pool_t *pool = NULL;
    sigset_t all, old;
    int rc = HY_OK, started = 0;

    *out = NULL;
    if (n_threads < 0 || n_threads > 4096) {
        rc = hy_err(err, HY_ERANGE, "threads = %d: must be 0 (all CPUs) .. 4096", n_threads);
        goto out;
    }
    if (n_threads == 0)
        n_threads = hy_pool_default_threads();
    pool = aligned_alloc(64, (sizeof *pool + 63) / 64 * 64);
    if (!pool) {
        rc = hy_err(err, HY_ENOMEM, "thread pool: out of memory");
        goto out;
    }
    memset(pool, 0, sizeof *pool);
    pool->n = n_threads;
    pool->nth = 1;
    atomic_init(&pool->gen, 0);
    atomic_init(&pool->n_done, 0);
    atomic_init(&pool->caller_waiting, 0);
    atomic_init(&pool->n_sleeping, 0);
    atomic_init(&pool->stop, 0);
    if (n_threads > 1) {
        pool->tids = calloc((size_t)n_threads - 1, sizeof *pool->tids);
        pool->workers = calloc((size_t)n_threads - 1, sizeof *pool->workers);
        if (!pool->tids || !pool->workers) {
            rc = hy_err(err, HY_ENOMEM, "thread pool: out of memory");
            goto out;
        }
    }
    /* Workers must not take the process's signals (SIGTERM, SIGHUP go to the
     * thread that handles them), so they start with everything blocked. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (; started < n_threads - 1; started++) {
        pool->workers[started].pool = pool;
        pool->workers[started].ith = started + 1;
        int e = pthread_create(&pool->tids[started], NULL, hy_pool_main,
                               &pool->workers[started]);
        if (e != 0) {
            rc = hy_err(err, HY_ENOMEM, "thread pool: cannot start thread %d of %d: %s",
                        started + 1, n_threads, strerror(e));
            break;
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != HY_OK) {
        hy_pool_stop(pool, started);
        goto out;
    }
    *out = pool;
    pool = NULL;
out:
    if (pool) {
        free(pool->tids);
        free(pool->workers);
        free(pool);
    }
    return rc;
}

void hy_pool_free(hy_pool_t *pool)
{
    if (!pool)
        return;
    hy_pool_stop(pool, pool->n - 1);
    free(pool->tids);
    free(pool->workers);
    free(pool);
}

int hy_pool_size(const hy_pool_t *pool)
{
    return pool->n;
}

void hy_pool_run_n(hy_pool_t *pool, int nth, hy_pool_fn_t fn, void *arg)
{
    uint32_t want, d, g;
    int running;

    if (nth > pool->n)
        nth = pool->n;
    if (nth <= 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    pool->nth = nth;
    atomic_store_explicit(&pool->n_done, 0, memory_order_relaxed);
    /* A share a worker never claimed stays marked for an older job; one of
     * those cannot be claimed any more since its generation is past. */
    atomic_store_explicit(&pool->n_running, INT_MAX, memory_order_relaxed);
    g = atomic_load_explicit(&pool->gen, memory_order_relaxed) + 1;
    for (int i = 1; i < nth; i++)
        atomic_store_explicit(&pool->workers[i - 1].slot, (uint64_t)g << 2 | HY_SLOT_PENDING,
                              memory_order_relaxed);
    /* shares of workers beyond nth: a generation nobody will ever claim */
    for (int i = nth; i < pool->n; i++)
        atomic_store_explicit(&pool->workers[i - 1].slot, (uint64_t)g << 2 | HY_SLOT_TAKEN,
                              memory_order_relaxed);
    atomic_fetch_add(&pool->gen, 1); /* seq_cst: publishes the job and the slots */
    if (atomic_load(&pool->n_sleeping) > 0)
        hy_futex_wake_private(&pool->gen, INT_MAX);

    fn(arg, 0, nth);

    /* Take over the shares nobody has started, then wait for the others. */
    running = 0;
    for (int i = 1; i < nth; i++) {
        uint64_t pend = (uint64_t)g << 2 | HY_SLOT_PENDING;
        if (atomic_compare_exchange_strong(&pool->workers[i - 1].slot, &pend,
                                           (uint64_t)g << 2 | HY_SLOT_TAKEN))
            fn(arg, i, nth);
        else
            running++;
    }
    if (running == 0)
        return;
    want = (uint32_t)running;
    atomic_store(&pool->n_running, running);

    /* Wait for the running shares: spin within the budget, then sleep.
     * Dekker pairing with hy_pool_main: we set caller_waiting then re-read
     * n_done; the last worker bumps n_done then reads caller_waiting. */
    long long start = 0;
    for (unsigned i = 0;
         (d = atomic_load_explicit(&pool->n_done, memory_order_acquire)) != want; i++) {
        HY_CPU_RELAX();
        if ((i & 63) == 63) {
            long long now = hy_now_ns();
            if (start == 0) {
                start = now;
            } else if (now - start > HY_POOL_SPIN_NS) {
                atomic_store(&pool->caller_waiting, 1);
                while ((d = atomic_load(&pool->n_done)) != want)
                    hy_futex_wait_private(&pool->n_done, d);
                atomic_store(&pool->caller_waiting, 0);
                break;
            } else if (now - start > HY_POOL_YIELD_NS) {
                sched_yield();
            }
        }
    }
}

void hy_pool_run(hy_pool_t *pool, hy_pool_fn_t fn, void *arg)
{
    hy_pool_run_n(pool, pool->n, fn, arg);
}
