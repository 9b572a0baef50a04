/*
 * bench_quant.c - micro-benchmark of the Q4_1/Q4_0/Q8_0 kernels: GB/s of
 * weight data per ISA level on the SmolLM2-135M FFN-up shape (1536 rows of
 * 576, L2-resident: the kernels' compute rate) for vec_dot per row, the
 * decode tile (1 activation row) and the prefill tile (4 rows); then, at the
 * best level, the decode tile streaming a buffer larger than L2 next to a
 * pure read of the same bytes in the same order (the memory bound the
 * decode kernels are held to).  Timed in thread CPU time (the CI box is
 * shared).  Built by `make check` but not run as a test:
 *   ./tests/unit/bench_quant [seconds-per-case=0.3] [stream-MB=96] [rounds=5]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/quant.h"
#include "backend/cpu/quant_ref.h"
#include "bench.h"

/* The bound: every byte read once, in order, nothing else done with it:
 * bench.h's 64-byte loads where the CPU has them (the kernels' own loads),
 * else 64-bit adds as `hyserve bench --membw` does. */
static uint64_t read_u64(const uint8_t *p, size_t n)
{
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, v[4];
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        memcpy(v, p + i, 32);
        s0 += v[0];
        s1 += v[1];
        s2 += v[2];
        s3 += v[3];
    }
    return s0 + s1 + s2 + s3;
}

static uint64_t read_bound(const uint8_t *p, size_t n)
{
#ifdef HAVE_READ_AVX512
    if (__builtin_cpu_supports("avx512f"))
        return bench_read_avx512(p, n);
#endif
    return read_u64(p, n);
}

/* In-cache rates per ISA level. */
static void bench_in_cache(double secs)
{
    enum { K = 576, M = 1536, NX = 4 };
    hy_dtype_t types[] = {HY_DTYPE_Q4_1, HY_DTYPE_Q4_0, HY_DTYPE_Q8_0};
    float *xf = malloc(sizeof(float) * K * NX), *wf = malloc(sizeof(float) * K);
    float *out = malloc(sizeof(float) * M * NX);

    for (int i = 0; i < K * NX; i++)
        xf[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    for (int i = 0; i < K; i++)
        wf[i] = (float)((i * 104729) % 997) / 498.0f - 1.0f;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        hy_dtype_t t = types[ti];
        size_t wb = hy_dtype_row_bytes(t, K);
        unsigned char *w = malloc(wb * M);
        for (int r = 0; r < M; r++)
            hy_quant_quantize_row(t, wf, w + r * wb, K);
        for (int isa = HY_ISA_SCALAR; isa <= HY_ISA_AVX512; isa++) {
            if (hy_quant_set_isa((hy_isa_t)isa) != HY_OK)
                continue;
            const hy_quant_traits_t *tr = hy_quant_traits(t);
            hy_quant_tile_fn_t tile = hy_quant_vec_dot_tile(t);
            size_t xb = hy_dtype_row_bytes(tr->vec_dot_type, K);
            unsigned char *x = malloc(xb * NX);
            static const char *names[] = {"1 row (vec_dot)", "1 row (tile)   ",
                                          "4 rows (tile)  "};
            for (int c = 0; c < NX; c++)
                tr->from_float(xf + c * K, x + c * xb, K);
            for (int mode = 0; mode < 3; mode++) {
                long iters = 0;
                double t0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID), el;
                do {
                    if (mode == 0)
                        for (int r = 0; r < M; r++)
                            tr->vec_dot(K, out + r, w + r * wb, x);
                    else
                        tile(K, out, M, w, wb, M, x, xb, mode == 1 ? 1 : NX);
                    iters++;
                    el = bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
                } while (el < secs);
                printf("%-5s %-7s %s: %7.2f GB/s weights, %8.1f us/matmul\n",
                       hy_dtype_info(t)->name, hy_isa_name((hy_isa_t)isa), names[mode],
                       (double)wb * M * iters / el / 1e9, el / iters * 1e6);
            }
            free(x);
        }
        free(w);
    }
    free(xf);
    free(wf);
    free(out);
}

/* Decode over a buffer larger than L2 vs reading it: alternated rounds,
 * medians.  Rows of 576 as in SmolLM2's attention/FFN-up and output. */
static void bench_stream(size_t mb, int rounds)
{
    enum { K = 576, CHUNK = 1536 };
    hy_dtype_t types[] = {HY_DTYPE_Q4_1, HY_DTYPE_Q8_0};
    float wf[K], xf[K];

    for (int i = 0; i < K; i++)
        xf[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    for (size_t ti = 0; ti < 2 * sizeof types / sizeof types[0]; ti++) {
        hy_dtype_t t = types[ti / 2];
        hy_isa_t isa = ti % 2 ? hy_cpu_isa() : HY_ISA_AVX2;
        if ((ti % 2 == 0 && hy_cpu_isa() <= HY_ISA_AVX2) || hy_quant_set_isa(isa) != HY_OK)
            continue; /* each level once, scalar never (far from memory-bound) */
        const hy_quant_traits_t *tr = hy_quant_traits(t);
        hy_quant_tile_fn_t tile = hy_quant_vec_dot_tile(t);
        size_t wb = hy_dtype_row_bytes(t, K), xb = hy_dtype_row_bytes(tr->vec_dot_type, K);
        size_t rows = mb * 1000000 / wb / CHUNK * CHUNK, bytes = rows * wb;
        uint8_t *w = malloc(bytes), *x = malloc(xb);
        float *out = malloc(sizeof(float) * rows);
        double *kern = malloc(sizeof(double) * (size_t)rounds);
        double *rd = malloc(sizeof(double) * (size_t)rounds);
        double *ratio = malloc(sizeof(double) * (size_t)rounds);
        uint64_t sink = 0;

        if (!w || !x || !out || !kern || !rd || !ratio || rows == 0) {
            fprintf(stderr, "bench_quant: out of memory for %zu MB\n", mb);
            exit(1);
        }
        for (size_t r = 0; r < rows; r++) {
            for (int i = 0; i < K; i++)
                wf[i] = (float)(((int64_t)r * 31 + i * 104729) % 997) / 498.0f - 1.0f;
            hy_quant_quantize_row(t, wf, w + r * wb, K);
        }
        tr->from_float(xf, x, K);
        for (int k = 0; k < rounds; k++) {
            double t0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
            for (size_t r = 0; r < rows; r += CHUNK)
                tile(K, out + r, rows, w + r * wb, wb, CHUNK, x, xb, 1);
            kern[k] = bytes / (bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - t0) / 1e9;
            t0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
            sink += read_bound(w, bytes);
            rd[k] = bytes / (bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - t0) / 1e9;
            ratio[k] = kern[k] / rd[k];
        }
        qsort(kern, (size_t)rounds, sizeof(double), bench_cmp_double);
        qsort(rd, (size_t)rounds, sizeof(double), bench_cmp_double);
        qsort(ratio, (size_t)rounds, sizeof(double), bench_cmp_double);
        printf("%-5s %-7s stream %zu MB: decode tile %6.2f GB/s, read %6.2f GB/s, "
               "ratio %.0f%% (median of %d alternated rounds; sink %d)\n",
               hy_dtype_info(t)->name, hy_isa_name(isa), bytes >> 20,
               kern[rounds / 2], rd[rounds / 2], 100.0 * ratio[rounds / 2], rounds,
               (int)(sink & 1));
        free(w);
        free(x);
        free(out);
        free(kern);
        free(rd);
        free(ratio);
    }
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 0.3;
    long mb = argc > 2 ? atol(argv[2]) : 96;
    int rounds = argc > 3 ? atoi(argv[3]) : 5;

    if (secs > 0)
        bench_in_cache(secs);
    if (mb > 0 && rounds > 0)
        bench_stream((size_t)mb, rounds);
    return 0;
}
