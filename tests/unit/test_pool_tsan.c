/*
 * test_pool_tsan.c - the thread pool under ThreadSanitizer (built with
 * -fsanitize=thread in builds without ASan, see cpu.mk).  Jobs on 1..4
 * threads back to back (spin hand-off), after sleeps past the spin budget
 * (futex wake-ups), and with a worker kept busy elsewhere so that the caller
 * takes over its shares: every share runs exactly once and what a share
 * wrote is visible to the caller after hy_pool_run_n returns.  TSan turns a
 * missing happens-before edge into a report and a non-zero exit.
 */
#include "backend/cpu/threadpool.h"
#include "test.h"

#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    _Atomic int calls;
    int wrote[8];    /* plain writes: TSan checks the caller's reads */
    int nth_seen[8];
} hy_tp_probe_t;

static void hy_tp_share(void *arg, int ith, int nth)
{
    hy_tp_probe_t *p = arg;

    p->wrote[ith] += ith + 1;
    p->nth_seen[ith] = nth;
    atomic_fetch_add(&p->calls, 1);
}

/* Share 1 sleeps when a worker runs it, so the next jobs find that worker
 * late and the caller takes its share over. */
static void hy_tp_slow_share(void *arg, int ith, int nth)
{
    hy_tp_share(arg, ith, nth);
    if (ith == 1)
        usleep(200);
}

static int hy_tp_round(hy_pool_t *pool, int jobs, hy_pool_fn_t fn)
{
    int bad = 0;

    for (int it = 0; it < jobs; it++) {
        hy_tp_probe_t p;
        int nth = it % 4 + 1;

        memset(&p, 0, sizeof p);
        if (it % 1000 == 999)
            usleep(3000);
        hy_pool_run_n(pool, nth, fn, &p);
        if (atomic_load(&p.calls) != nth)
            bad++;
        for (int i = 0; i < nth; i++)
            bad += p.wrote[i] != i + 1 || p.nth_seen[i] != nth;
    }
    return bad;
}

int main(void)
{
    hy_pool_t *pool;
    char err[HY_ERR_LEN];
    int bad;

    if (hy_pool_new(&pool, 4, err) != HY_OK) {
        HY_T_OK(0, "pool of 4: %s", err);
        return hy_t_done();
    }
    bad = hy_tp_round(pool, 10000, hy_tp_share);
    HY_T_OK(bad == 0, "10000 jobs on 1..4 threads: every share once, its writes seen (%d bad)",
            bad);
    bad = hy_tp_round(pool, 2000, hy_tp_slow_share);
    HY_T_OK(bad == 0, "2000 jobs with a slow worker share: every share once (%d bad)", bad);
    hy_pool_free(pool);
    return hy_t_done();
}
