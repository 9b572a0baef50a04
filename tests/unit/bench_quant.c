/*
 * bench_quant.c - micro-benchmark of the quantized kernels: GB/s of weight
 * data per ISA level on the SmolLM2-135M FFN-up shape (1536 rows of 576;
 * rows of 512 for the 256-element K types, L2-resident: the kernels'
 * compute rate; the types named on the command line, else all) for
 * vec_dot per row, the
 * decode tile (1 activation row) and the prefill tile (4 rows); then, at the
 * best level, the decode tile streaming a buffer larger than L2 next to a
 * pure read of the same bytes in the same order (the memory bound the
 * decode kernels are held to).  Timed in thread CPU time (the CI box is
 * shared).  Built by `make check` but not run as a test:
 *   ./tests/unit/bench_quant [seconds-per-case=0.3] [stream-MB=96] [rounds=5]
 *                            [type ...]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/quant.h"
#include "backend/cpu/quant_ref.h"
#include "bench.h"
#include "quant_fill.h"

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

static const hy_dtype_t bench_types[] = {
    HY_DTYPE_Q4_1, HY_DTYPE_Q4_0, HY_DTYPE_Q8_0, HY_DTYPE_Q5_0, HY_DTYPE_Q5_1,
    HY_DTYPE_IQ4_NL, HY_DTYPE_Q4_K, HY_DTYPE_Q5_K, HY_DTYPE_Q6_K, HY_DTYPE_Q2_K,
    HY_DTYPE_Q3_K, HY_DTYPE_IQ4_XS};

/* Weight row r of n elements: quantized from a fixed pattern where hyserve
 * has a quantizer, else patterned bytes under sane f16 factors. */
static void bench_weight_row(hy_dtype_t t, uint8_t *w, int64_t n, size_t r)
{
    const hy_dtype_info_t *info = hy_dtype_info(t);
    float wf[4096];

    for (int64_t i = 0; i < n; i++)
        wf[i] = (float)(((int64_t)r * 31 + i * 104729) % 997) / 498.0f - 1.0f;
    if (hy_quant_quantize_row(t, wf, w, n) == HY_OK)
        return;
    for (size_t i = 0; i < hy_dtype_row_bytes(t, n); i++)
        w[i] = (uint8_t)((r * 131 + i * 2654435761u) >> 7);
    for (int64_t b = 0; b < n / info->block; b++)
        hy_test_block_factors(t, w + b * info->block_bytes, 0.01f, 0.005f);
}

/* In-cache rates per ISA level. */
static void bench_in_cache(double secs, const hy_dtype_t *types, int n_types)
{
    enum { KMAX = 576, M = 1536, NX = 4 };
    float *xf = malloc(sizeof(float) * KMAX * NX);
    float *out = malloc(sizeof(float) * M * NX);

    for (int i = 0; i < KMAX * NX; i++)
        xf[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    for (int ti = 0; ti < n_types; ti++) {
        hy_dtype_t t = types[ti];
        const int K = hy_dtype_info(t)->block == 256 ? 512 : 576;
        size_t wb = hy_dtype_row_bytes(t, K);
        unsigned char *w = malloc(wb * M);
        for (int r = 0; r < M; r++)
            bench_weight_row(t, w + r * wb, K, 0);
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
                printf("%-6s %-7s %s: %7.2f GB/s weights, %8.1f us/matmul\n",
                       hy_dtype_info(t)->name, hy_isa_name((hy_isa_t)isa), names[mode],
                       (double)wb * M * iters / el / 1e9, el / iters * 1e6);
            }
            free(x);
        }
        free(w);
    }
    free(xf);
    free(out);
}

/* Decode over a buffer larger than L2 vs reading it: alternated rounds,
 * medians.  Rows of 576 as in SmolLM2's attention/FFN-up and output. */
static void bench_stream(size_t mb, int rounds, const hy_dtype_t *types, int n_types)
{
    enum { CHUNK = 1536 };
    float xf[576];

    for (int i = 0; i < 576; i++)
        xf[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    for (int ti = 0; ti < 2 * n_types; ti++) {
        hy_dtype_t t = types[ti / 2];
        const int K = hy_dtype_info(t)->block == 256 ? 512 : 576;
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
        for (size_t r = 0; r < rows; r++)
            bench_weight_row(t, w + r * wb, K, r);
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
        printf("%-6s %-7s stream %zu MB: decode tile %6.2f GB/s, read %6.2f GB/s, "
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

    hy_dtype_t types[HY_ARRAY_LEN(bench_types)];
    int n_types = 0;

    for (int a = 4; a < argc && n_types < (int)HY_ARRAY_LEN(types); a++) {
        hy_dtype_t t = bench_parse_type(argv[a]);
        if (t == HY_DTYPE_COUNT || !hy_quant_traits(t) || hy_dtype_info(t)->block == 1) {
            fprintf(stderr, "bench_quant: %s is not a quantized weight type\n", argv[a]);
            return 2;
        }
        types[n_types++] = t;
    }
    if (n_types == 0)
        for (size_t i = 0; i < HY_ARRAY_LEN(bench_types); i++)
            types[n_types++] = bench_types[i];
    if (secs > 0)
        bench_in_cache(secs, types, n_types);
    if (mb > 0 && rounds > 0)
        bench_stream((size_t)mb, rounds, types, n_types);
    return 0;
}
