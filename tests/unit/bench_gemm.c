/*
 * bench_gemm.c - GFLOP/s of the backend's matmul for float weights at the
 * prefill shapes of the qwen35-bench model (K=1024 -> 6144, 2048; K=2048 ->
 * 1024) for 64, 512 and 4096 tokens, with 1 thread (thread CPU time: the
 * machine is shared, wall time would measure the queue) and 2 (wall time).
 * Built by `make check`, not run by it:
 *   tests/unit/bench_gemm [type=f16] [max_threads=2] [reps=5] [n_tok] [layout]
 * (n_tok: that token count instead of 64, 512, 4096; layout: "rows" keeps
 * the file's layout where a loaded model would get the one the backend
 * asks for, HY_WLAYOUT_ROWS16 at AVX-512).
 */
#include "backend/backend.h"
#include "backend/cpu/quant.h"
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The single-thread fp32 FMA peak of the reference machine (2 ports x 16
 * lanes x 2 FLOP x ~2.45 GHz), to print a share of it. */
#define BENCH_PEAK_GFLOPS 155.0

int main(int argc, char **argv)
{
    static const int64_t shapes[][2] = {{1024, 6144}, {1024, 2048}, {2048, 1024}};
    int ntoks[] = {64, 512, 4096};
    hy_dtype_t t = bench_parse_type(argc > 1 ? argv[1] : "f16");
    int max_th = argc > 2 ? atoi(argv[2]) : 2;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    size_t n_nt = sizeof ntoks / sizeof ntoks[0];
    char err[HY_ERR_LEN];

    if (argc > 4) {
        ntoks[0] = atoi(argv[4]);
        n_nt = 1;
        if (ntoks[0] < 1 || ntoks[0] > 4096) {
            fprintf(stderr, "bench_gemm: n_tok must be 1..4096\n");
            return 2;
        }
    }
    if (t != HY_DTYPE_F32 && t != HY_DTYPE_F16 && t != HY_DTYPE_BF16) {
        fprintf(stderr, "bench_gemm: type must be f32, f16 or bf16\n");
        return 2;
    }
    if (reps < 1)
        reps = 1;
    const bool file_layout = argc > 5 && strcmp(argv[5], "rows") == 0;
    printf("# %s weights, isa %s, %s layout, min of %d runs; 1 thread: thread CPU time, %% "
           "of %.0f GFLOP/s\n", hy_dtype_info(t)->name, hy_isa_name(hy_cpu_isa()),
           file_layout ? "the file's" : "the backend's", reps, BENCH_PEAK_GFLOPS);
    for (int th = 1; th <= max_th; th++) {
        hy_backend_t *be = NULL;
        hy_backend_opts_t o = {.n_threads = th};
        if (hy_backend_cpu_new(&be, &o, err) != HY_OK) {
            fprintf(stderr, "bench_gemm: %s\n", err);
            return 1;
        }
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            int64_t k = shapes[si][0], n_out = shapes[si][1];
            size_t rb = hy_dtype_row_bytes(t, k);
            uint8_t *wd = malloc(rb * (size_t)n_out);
            float *row = malloc((size_t)k * sizeof(float));
            float *x = malloc((size_t)(4096 * k) * sizeof(float));
            float *y = malloc((size_t)(4096 * n_out) * sizeof(float));
            hy_weight_t w = {0};
            if (!wd || !row || !x || !y) {
                fprintf(stderr, "bench_gemm: out of memory\n");
                return 1;
            }
            for (int64_t r = 0; r < n_out; r++) {
                for (int64_t i = 0; i < k; i++)
                    row[i] = (float)((r * 31 + i * 17) % 97) / 97.0f - 0.5f;
                if (t == HY_DTYPE_F32)
                    memcpy(wd + (size_t)r * rb, row, rb);
                for (int64_t i = 0; t != HY_DTYPE_F32 && i < k; i++) {
                    uint16_t h = t == HY_DTYPE_F16 ? hy_f32_to_f16(row[i]) : hy_f32_to_bf16(row[i]);
                    memcpy(wd + (size_t)r * rb + i * 2, &h, 2);
                }
            }
            for (int64_t i = 0; i < 4096 * k; i++)
                x[i] = (float)((i * 13) % 101) / 101.0f - 0.5f;
            w.type = t;
            w.ne[0] = k;
            w.ne[1] = n_out;
            w.ne[2] = w.ne[3] = 1;
            w.row_bytes = rb;
            w.data = wd;
            w.name = "bench";
            if (!file_layout && be->i->weight_rows16 && be->i->weight_rows16(be, &w)) {
                if (hy_weight_to_rows16(wd, t, n_out, rb) != HY_OK) {
                    fprintf(stderr, "bench_gemm: out of memory\n");
                    return 1;
                }
                w.layout = HY_WLAYOUT_ROWS16;
            }
            for (size_t ni = 0; ni < n_nt; ni++) {
                int nt = ntoks[ni];
                double best = 1e30, best_cpu = 1e30;
                clockid_t id = th == 1 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
                be->i->matmul(be, &w, x, y, nt); /* warm-up: scratch, page faults */
                for (int r = 0; r < reps; r++) {
                    double t0 = bench_clock_s(id), c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
                    be->i->matmul(be, &w, x, y, nt);
                    double dt = bench_clock_s(id) - t0;
                    double dc = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
                    best = dt < best ? dt : best;
                    best_cpu = dc < best_cpu ? dc : best_cpu;
                }
                double gf = 2.0 * (double)k * (double)n_out * nt / best * 1e-9;
                /* with 2+ threads on a busy machine the wall time shows the
                 * queue: the CPU seconds per thread show the kernels' cost */
                double gf_cpu = 2.0 * (double)k * (double)n_out * nt / best_cpu * 1e-9;
                printf("threads %d  K %5lld N %5lld n_tok %5d  %8.3f ms  %6.1f GFLOP/s  "
                       "%5.1f%% of peak per thread (by CPU time: %5.1f%%)\n", th,
                       (long long)k, (long long)n_out, nt, best * 1e3, gf,
                       100.0 * gf / th / BENCH_PEAK_GFLOPS, 100.0 * gf_cpu / BENCH_PEAK_GFLOPS);
                fflush(stdout);
            }
            if (be->i->status(be, err) != HY_OK) {
                fprintf(stderr, "bench_gemm: %s\n", err);
                return 1;
            }
            free(wd);
            free(row);
            free(x);
            free(y);
        }
        be->i->free(be);
    }
    return 0;
}
