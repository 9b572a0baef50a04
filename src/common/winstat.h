/*
 * winstat.h - lock-free statistics over a sliding time window, laid out for
 * shared memory (fixed size, no pointers, atomics only), so that the engine
 * writes them and any worker answering /metrics reads them:
 *
 *   hy_qwin_t  quantiles (P50/P95/P99) of the values observed in the last
 *              60 s: one log-linear histogram per 5-second step, 12 steps;
 *              a value is counted exactly below 16 and in a bucket 1/16 of
 *              its power of two wide above, so a reported quantile is within
 *              3.2% of the true one (the bucket's midpoint is reported);
 *   hy_rwin_t  a count per second for the last 64 seconds (tokens/s over
 *              the last 10 s and 60 s).
 *
 * Time is passed in (CLOCK_MONOTONIC nanoseconds, comparable between
 * processes), so tests drive both with a fake clock.  Any number of writers
 * and readers; nobody ever waits.  A step that rotates is reset by the one
 * writer that claims it (a CAS on its epoch); a value racing that reset is
 * dropped rather than counted in the wrong step, and a reader skips a step
 * whose epoch changed while it was copying it.
 */
#ifndef HY_COMMON_WINSTAT_H
#define HY_COMMON_WINSTAT_H

#include <stdatomic.h>
#include <stdint.h>

#define HY_QWIN_SUB 16      /* buckets per power of two above the exact range */
#define HY_QWIN_OCTAVES 32  /* powers of two from 16 up: values < 2^36 */
#define HY_QWIN_NBUCKETS (HY_QWIN_SUB + HY_QWIN_SUB * HY_QWIN_OCTAVES)
#define HY_QWIN_STEPS 12
#define HY_QWIN_STEP_NS 5000000000LL /* 12 x 5 s = the last 60 s */
#define HY_QWIN_SECONDS 60

typedef struct {
    /* the step (now_ns / HY_QWIN_STEP_NS) these counts belong to; -(e + 1)
     * while a writer resets the slot for step e */
    _Atomic int64_t epoch;
    _Atomic uint32_t n[HY_QWIN_NBUCKETS];
} hy_qwin_step_t;

typedef struct {
    hy_qwin_step_t step[HY_QWIN_STEPS];
} hy_qwin_t;

#define HY_RWIN_SLOTS 64 /* seconds kept: a window may span up to 63 */

typedef struct {
    _Atomic uint64_t slot[HY_RWIN_SLOTS]; /* (second << 32) | count of that second */
} hy_rwin_t;

/* The bucket of value v, and the value a bucket reports (its midpoint). */
int hy_qwin_bucket(uint64_t v);
double hy_qwin_bucket_value(int b);

/* Counts v (any unit; the metrics use microseconds) at time now_ns. */
void hy_qwin_observe(hy_qwin_t *w, int64_t now_ns, uint64_t v);

/* Quantiles q[0..nq) (each 0..1) of the values observed in the window that
 * ends at now_ns, into out[] (NaN when the window is empty); returns how
 * many values the window holds.  Quantile q is the value of rank
 * ceil(q * n) (the nearest-rank definition). */
uint64_t hy_qwin_quantiles(const hy_qwin_t *w, int64_t now_ns, const double *q, int nq,
                           double *out);

/* Adds n to the second of now_ns. */
void hy_rwin_add(hy_rwin_t *w, int64_t now_ns, uint32_t n);
/* Mean count per second over the `seconds` (1..63) whole seconds before the
 * one now_ns is in: the current second is still filling, so it is left out. */
double hy_rwin_rate(const hy_rwin_t *w, int64_t now_ns, int seconds);

#endif
