/*
 * bench_lightning.c - speed of the CPU lightning op on one sequence at
 * MiniMax-Text-01's shape: prefill (one call of T tokens) and decode (T
 * one-token calls), for the blocked form at several block lengths and for
 * the plain recurrence (chunk 1), in thread CPU time (the machine is
 * shared; one thread, so it is the op's own cost).  Not a test; run by hand:
 *   tests/unit/bench_lightning [tokens=512] [heads=64] [d=128] [isa=-1 auto|0|1] [chunk]
 * (with chunk: only that block length, for perf stat / callgrind).
 */
#include "backend/cpu/lightning.h"
#include "bench.h"
#include "test.h"

#include <math.h>
#include <string.h>

/* CPU seconds of T tokens of one sequence through the op: one call
 * (decode false) or T calls of one token. */
static double run(hy_backend_t *be, int T, int H, int d, int chunk, bool decode, const float *x,
                  const float *slope, float *table, float *out)
{
    const hy_weight_t dw = {HY_DTYPE_F32, {chunk + 1, H, 1, 1}, sizeof(float) * (size_t)(chunk + 1),
                            table, NULL, "decay", HY_WLAYOUT_ROWS};
    const hy_lightning_params_t p = {H, d, chunk};
    int64_t rec = hy_lightning_state_floats(&p), conv = 0;
    hy_state_layout_t lay = {1, 1, &conv, &rec};
    const int stride = 3 * H * d;
    char err[HY_ERR_LEN];
    double t0;

    hy_lightning_decays(slope, H, chunk, table);
    if (be->i->state_init(be, &lay, err) != HY_OK) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    t0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
    for (int t = 0; t < T; t += decode ? 1 : T) {
        const int n = decode ? 1 : T;
        hy_batch_seq_t sq = {0, n, t, NULL, 0, 0, NULL, 0, NULL, 0, 0, 0, NULL, NULL};
        hy_batch_t b = {n, NULL, NULL, 1, &sq};
        const float *xr = x + (size_t)t * stride;
        be->i->lightning(be, 0, &b, xr, xr + d, xr + 2 * d, stride, 3 * d, &dw, out, &p);
    }
    t0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
    if (be->i->status(be, err) != HY_OK) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    return t0;
}

int main(int argc, char **argv)
{
    const int T = argc > 1 ? atoi(argv[1]) : 512, H = argc > 2 ? atoi(argv[2]) : 64,
              d = argc > 3 ? atoi(argv[3]) : 128, isa = argc > 4 ? atoi(argv[4]) : -1,
              only = argc > 5 ? atoi(argv[5]) : 0;
    static const int chunks[] = {1, 8, 16, 32, 64};
    hy_backend_opts_t o = {.n_threads = 1};
    hy_backend_t *be;
    char err[HY_ERR_LEN];
    float *x = malloc(sizeof(float) * (size_t)T * 3 * H * d), *out = malloc(sizeof(float) * (size_t)H * d * T);
    float *slope = malloc(sizeof(float) * (size_t)H);
    float *table = malloc(sizeof(float) * (size_t)H * (HY_LIGHTNING_MAX_CHUNK + 1));
    uint32_t s = 12345;

    if (hy_backend_cpu_new(&be, &o, err) != HY_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (isa >= 0 && hy_cpu_lightning_set_isa(isa) != HY_OK) {
        fprintf(stderr, "this CPU lacks kernel build %d\n", isa);
        return 1;
    }
    for (size_t i = 0; i < (size_t)T * 3 * H * d; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (s >> 8) / 16777216.0f - 0.3f;
    }
    for (int h = 0; h < H; h++)
        slope[h] = (float)pow(2.0, -8.0 * (h + 1) / H);
    printf("lightning, %d tokens, %d heads of %d, 1 thread, thread CPU time:\n", T, H, d);
    printf("%-8s %14s %14s %16s\n", "chunk", "prefill us/tok", "decode us/tok", "slot KiB/head");
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        double pf = 1e30, dc = 1e30;
        if (only > 0 && chunks[c] != only)
            continue;
        for (int rep = 0; rep < 3; rep++) {
            pf = HY_MIN(pf, run(be, T, H, d, chunks[c], false, x, slope, table, out));
            dc = HY_MIN(dc, run(be, T, H, d, chunks[c], true, x, slope, table, out));
        }
        printf("%-8d %14.2f %14.2f %16.1f\n", chunks[c], pf / T * 1e6, dc / T * 1e6,
               hy_lightning_head_floats(d, chunks[c]) * 4 / 1024.0);
    }
    be->i->free(be);
    free(x);
    free(out);
    free(slope);
    free(table);
    return 0;
}
