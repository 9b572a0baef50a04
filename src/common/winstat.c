/*
 * winstat.c - sliding-window quantiles and per-second rates (winstat.h).
 * Writers are the engine thread (latencies at request finish, tokens as
 * they are pushed); readers are the workers formatting /metrics.  Each
 * step of the quantile window and each second of the rate window carries
 * the time it counts, so a stale slot is recognised and never mixed into
 * the current window, whatever the gap since the last write.
 */
#include "common/winstat.h"

#include <math.h>
#include <string.h>

#define ACQ memory_order_acquire
#define REL memory_order_release
#define RLX memory_order_relaxed

/* ---- buckets --------------------------------------------------------------- */

int hy_qwin_bucket(uint64_t v)
{
    int e;

    if (v < HY_QWIN_SUB)
        return (int)v;
    e = 63 - __builtin_clzll(v); /* 2^e <= v < 2^(e+1), e >= 4 */
    if (e - 4 >= HY_QWIN_OCTAVES)
        return HY_QWIN_NBUCKETS - 1;
    /* the 4 bits below the leading one pick 1 of 16 equal parts of [2^e, 2^(e+1)) */
    return HY_QWIN_SUB + (e - 4) * HY_QWIN_SUB + (int)((v >> (e - 4)) - HY_QWIN_SUB);
}

double hy_qwin_bucket_value(int b)
{
    int e, sub;
    double lo, width;

    if (b < HY_QWIN_SUB)
        return (double)b;
    e = (b - HY_QWIN_SUB) / HY_QWIN_SUB + 4;
    sub = (b - HY_QWIN_SUB) % HY_QWIN_SUB;
    width = ldexp(1.0, e - 4);
    lo = (double)(HY_QWIN_SUB + sub) * width;
    return lo + (width - 1.0) / 2.0; /* the middle of the integers lo .. lo + width - 1 */
}

/* ---- quantile window ------------------------------------------------------- */

/* The step slot for epoch e, reset first if it still holds an older step;
 * NULL when the value must be dropped (a newer step took the slot, or
 * another writer is resetting it for this very step). */
static hy_qwin_step_t *qwin_step(hy_qwin_t *w, int64_t e)
{
    hy_qwin_step_t *s = &w->step[e % HY_QWIN_STEPS];

    for (;;) {
        int64_t cur = atomic_load_explicit(&s->epoch, ACQ);

        if (cur == e)
            return s;
        if (cur > e || (cur < 0 && -cur - 1 >= e))
            return NULL;
        /* An older step (or a reset abandoned by a writer that died):
         * claim it, zero it, publish the new epoch. */
        if (atomic_compare_exchange_weak_explicit(&s->epoch, &cur, -(e + 1), ACQ, RLX)) {
            for (int i = 0; i < HY_QWIN_NBUCKETS; i++)
                atomic_store_explicit(&s->n[i], 0, RLX);
            atomic_store_explicit(&s->epoch, e, REL);
            return s;
        }
    }
}

void hy_qwin_observe(hy_qwin_t *w, int64_t now_ns, uint64_t v)
{
    hy_qwin_step_t *s;

    if (now_ns < 0 || (s = qwin_step(w, now_ns / HY_QWIN_STEP_NS)) == NULL)
        return;
    atomic_fetch_add_explicit(&s->n[hy_qwin_bucket(v)], 1, RLX);
}

uint64_t hy_qwin_quantiles(const hy_qwin_t *w, int64_t now_ns, const double *q, int nq,
                           double *out)
{
    uint64_t merged[HY_QWIN_NBUCKETS], total = 0, copy[HY_QWIN_NBUCKETS];
    int64_t e_now = now_ns / HY_QWIN_STEP_NS;
    int i, k;

    memset(merged, 0, sizeof merged);
    for (k = 0; k < HY_QWIN_STEPS; k++) {
        const hy_qwin_step_t *s = &w->step[k];
        int64_t e = atomic_load_explicit(&s->epoch, ACQ);
        uint64_t n = 0;

        if (e < 0 || e > e_now || e <= e_now - HY_QWIN_STEPS)
            continue;
        for (i = 0; i < HY_QWIN_NBUCKETS; i++)
            n += copy[i] = atomic_load_explicit(&s->n[i], RLX);
        atomic_thread_fence(ACQ);
        /* rotated while we copied: its counts may be a mix of two steps */
        if (atomic_load_explicit(&s->epoch, RLX) != e)
            continue;
        for (i = 0; i < HY_QWIN_NBUCKETS; i++)
            merged[i] += copy[i];
        total += n;
    }
    for (k = 0; k < nq; k++) {
        uint64_t rank, cum = 0;

        if (total == 0) {
            out[k] = NAN;
            continue;
        }
        rank = (uint64_t)ceil(q[k] * (double)total);
        rank = rank < 1 ? 1 : rank > total ? total : rank;
        for (i = 0; i < HY_QWIN_NBUCKETS - 1; i++) {
            cum += merged[i];
            if (cum >= rank)
                break;
        }
        out[k] = hy_qwin_bucket_value(i);
    }
    return total;
}

/* ---- rate window ------------------------------------------------------------ */

void hy_rwin_add(hy_rwin_t *w, int64_t now_ns, uint32_t n)
{
    uint32_t sec;
    _Atomic uint64_t *slot;
    uint64_t old, next;

    if (now_ns < 0 || n == 0)
        return;
    sec = (uint32_t)(now_ns / 1000000000LL);
    slot = &w->slot[sec % HY_RWIN_SLOTS];
    old = atomic_load_explicit(slot, RLX);
    do {
        uint32_t at = (uint32_t)(old >> 32), cnt = (uint32_t)old;

        if (at > sec)
            return; /* a later second took the slot: this count is out of the window */
        if (at == sec)
            cnt = cnt > UINT32_MAX - n ? UINT32_MAX : cnt + n;
        else
            cnt = n;
        next = (uint64_t)sec << 32 | cnt;
    } while (!atomic_compare_exchange_weak_explicit(slot, &old, next, RLX, RLX));
}

double hy_rwin_rate(const hy_rwin_t *w, int64_t now_ns, int seconds)
{
    uint32_t cur;
    uint64_t sum = 0;
    int k;

    if (seconds < 1 || seconds >= HY_RWIN_SLOTS || now_ns < 0)
        return NAN;
    cur = (uint32_t)(now_ns / 1000000000LL);
    for (k = 1; k <= seconds && (uint32_t)k <= cur; k++) {
        uint32_t sec = cur - (uint32_t)k;
        uint64_t v = atomic_load_explicit(&w->slot[sec % HY_RWIN_SLOTS], RLX);

        if ((uint32_t)(v >> 32) == sec)
            sum += (uint32_t)v;
    }
    return (double)sum / seconds;
}
