/*
 * bench_tier.c - the disk tier's I/O threads: how fast N pages are written
 * through (put into warm, written by the one writer thread) and read back
 * after a restart (a new store on the directory, every page fetched at
 * once, as a restart hit on a long prefix does) by 1, 2 and 4 reader
 * threads.  Prints wall time, MB/s and the mean per-file latency the store
 * measured; the files are in the page cache when read back (no device
 * reads), which is also the common case for a recently demoted prefix.
 *
 *   tests/unit/bench_tier [pages=250] [page_bytes=368640] [dir=/tmp] [reps=3]
 *
 * (368640 bytes: a SmolLM2-135M page of 16 tokens, f16 KV.)  The machine is
 * shared: take the median of the reps.
 */
#define _GNU_SOURCE
#include "ipc/tier.h"
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void opts(hy_tier_opts_t *o, hy_stats_t *st, int32_t pages, uint64_t pb, const char *dir,
                 int32_t threads)
{
    memset(o, 0, sizeof *o);
    o->unit_bytes[HY_TIER_PAGE] = pb;
    o->warm_bytes = (uint64_t)pages * pb;
    o->disk_dir = dir;
    o->disk_bytes = 2 * (uint64_t)pages * (pb + 4096);
    o->io_threads = threads;
    o->stats = st;
    o->ident.page_tokens = 16;
    o->ident.page_bytes = pb;
    memset(o->ident.model_sha256, 3, 32);
    o->sha_known = true;
}

/* One write-then-read round; wall seconds of each phase into w and r. */
static int round_trip(int32_t pages, uint64_t pb, const char *dir, int32_t threads, double *w,
                      double *r, double *w_us, double *r_us, double *w_cpu, double *r_cpu)
{
    hy_stats_t *st = calloc(1, sizeof *st);
    hy_tier_opts_t o;
    hy_tier_t *t;
    char err[HY_ERR_LEN], cmd[1100];
    int32_t tok[16];
    double t0, c0;
    int rc = 0;

    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    if (st == NULL || system(cmd) != 0)
        return -1;
    opts(&o, st, pages, pb, dir, threads);
    if (hy_tier_create(&t, &o, err) != HY_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    hy_tier_sync(t);
    t0 = bench_clock_s(CLOCK_MONOTONIC);
    c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (int32_t i = 0; i < pages; i++) {
        hy_tier_put_t p;

        for (int k = 0; k < 16; k++)
            tok[k] = i * 16 + k;
        if (hy_tier_put_begin(t, HY_TIER_PAGE, 0x5000 + (uint64_t)i, i, tok, &p) == HY_OK) {
            memset(p.dst, i & 0xff, pb);
            hy_tier_put_end(t, &p, true);
        }
    }
    hy_tier_sync(t);
    *w = bench_clock_s(CLOCK_MONOTONIC) - t0;
    *w_cpu = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    *w_us = (double)atomic_load(&st->tiers.write_time[HY_TIER_COLD].sum_ns) / 1e3 /
            (double)HY_MAX(atomic_load(&st->tiers.write_time[HY_TIER_COLD].count), 1);
    hy_tier_free(t);
    memset(st, 0, sizeof *st);
    if (hy_tier_create(&t, &o, err) != HY_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    hy_tier_sync(t); /* the index */
    t0 = bench_clock_s(CLOCK_MONOTONIC);
    c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (int32_t i = 0; i < pages; i++)
        rc |= hy_tier_fetch(t, HY_TIER_PAGE, 0x5000 + (uint64_t)i) != 1;
    hy_tier_sync(t);
    *r = bench_clock_s(CLOCK_MONOTONIC) - t0;
    *r_cpu = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    *r_us = (double)atomic_load(&st->tiers.read_time[HY_TIER_COLD].sum_ns) / 1e3 /
            (double)HY_MAX(atomic_load(&st->tiers.read_time[HY_TIER_COLD].count), 1);
    if (atomic_load(&st->tiers.promotions[HY_TIER_COLD]) != (uint64_t)pages)
        rc = 1;
    hy_tier_free(t);
    free(st);
    return rc;
}

int main(int argc, char **argv)
{
    int32_t pages = argc > 1 ? atoi(argv[1]) : 250;
    uint64_t pb = argc > 2 ? strtoull(argv[2], NULL, 10) : 368640;
    const char *base = argc > 3 ? argv[3] : "/tmp";
    int reps = argc > 4 ? atoi(argv[4]) : 3;
    static const int32_t threads[] = {1, 2, 4};
    char dir[512];

    snprintf(dir, sizeof dir, "%s/hyserve-bench-tier-%ld", base, (long)getpid());
    printf("%d pages of %llu bytes; medians of %d; CPU = the process's CPU time (every thread)\n",
           pages, (unsigned long long)pb, reps);
    printf("| readers | write MB/s | write ms | write CPU ms | per file us | read MB/s | "
           "read ms | read CPU ms | per file us |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t k = 0; k < HY_ARRAY_LEN(threads); k++) {
        double w[16], r[16], wu[16], ru[16], wc[16], rc[16];
        int n = 0;

        for (int i = 0; i < reps && i < 16; i++)
            if (round_trip(pages, pb, dir, threads[k], &w[n], &r[n], &wu[n], &ru[n], &wc[n],
                           &rc[n]) == 0)
                n++;
        if (n == 0) {
            printf("| %d | failed |\n", threads[k]);
            continue;
        }
        qsort(w, (size_t)n, sizeof *w, bench_cmp_double);
        qsort(r, (size_t)n, sizeof *r, bench_cmp_double);
        qsort(wu, (size_t)n, sizeof *wu, bench_cmp_double);
        qsort(ru, (size_t)n, sizeof *ru, bench_cmp_double);
        qsort(wc, (size_t)n, sizeof *wc, bench_cmp_double);
        qsort(rc, (size_t)n, sizeof *rc, bench_cmp_double);
        printf("| %d | %.0f | %.1f | %.1f | %.0f | %.0f | %.1f | %.1f | %.0f |\n", threads[k],
               (double)pages * (double)pb / 1e6 / w[n / 2], w[n / 2] * 1e3, wc[n / 2] * 1e3,
               wu[n / 2], (double)pages * (double)pb / 1e6 / r[n / 2], r[n / 2] * 1e3,
               rc[n / 2] * 1e3, ru[n / 2]);
    }
    {
        char cmd[1100];

        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        return system(cmd) != 0;
    }
}
