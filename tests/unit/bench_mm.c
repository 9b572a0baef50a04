/*
 * bench_mm.c - micro-benchmark of the matmul tile kernels per batch size:
 * GFLOP/s (2 per weight x token product) of one thread for B = 1..256
 * tokens against the core's peak, for every weight type at the CPU's best
 * level (or the one named).  The peak is measured, not assumed: the clock
 * from a chain of dependent adds, and the issue rate of the instruction
 * that bounds the kernel (vpmaddwd for the int16 kernels of the AVX2
 * level: 16 products each; vfmadd for float weights: 8 or 16 lanes).
 * Timed in thread CPU time (the machine is shared).  Built by `make check`,
 * not run as a test:
 *   ./tests/unit/bench_mm [seconds-per-case=0.2] [isa=best] [rows=1024] [k=576] [type] [B]
 * (a type name, e.g. q8_0, times that type alone: a matrix larger than the
 * caches, such as a 262144-row output matrix, then sets up in seconds and
 * its B=1 column is the decode's memory-bound speed; a B after it times
 * that batch size alone, for a profiler).  A type whose rows the loader
 * puts in 16-row groups (every quantized type at AVX-512 and AVX2) gets a
 * second row, NAME/16, in that layout.  BENCH_MM_Q8=1 times
 * the single-level kernels of hy_quant_traits_q8 instead (those that
 * [engine] activation_bits = 8 takes where they are faster).
 * BENCH_MM_REPS=R times each case R times over (seconds-per-case each) and
 * prints the fastest: on a host shared with other tenants one case's rate
 * moves by a quarter from run to run, and the peak it is set against is
 * itself the rate of a quiet moment.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_ref.h"
#include "bench.h"
#include "quant_fill.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* Cycles per second of this thread: 4 dependent adds per iteration, of a
 * register (Golden Cove and later resolve an add of an immediate at
 * rename, without a cycle: that chain read 12 GHz on a Xeon). */
static double measure_hz(void)
{
    const long n = 100000000;
    unsigned long x = 1, one = 1;
    double t0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < n; i++)
        __asm__ volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
                         : "+r"(x)
                         : "r"(one));
    return 4.0 * n / (bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - t0);
}

#define HY_B_R10(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9)
#define HY_B_REGS(v) "+x"(v##0), "+x"(v##1), "+x"(v##2), "+x"(v##3), "+x"(v##4), \
    "+x"(v##5), "+x"(v##6), "+x"(v##7), "+x"(v##8), "+x"(v##9)

/* vpmaddwd ymm issued per cycle (10 independent chains). */
__attribute__((target("avx2"))) static double measure_madd(double hz)
{
    const long n = 20000000;
    __m256i w = _mm256_set1_epi16(3);
#define D(k) __m256i a##k = _mm256_set1_epi32(k + 1);
    HY_B_R10(D)
#undef D
    double t0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < n; i++) {
#define M(k) a##k = _mm256_madd_epi16(a##k, w);
        HY_B_R10(M)
#undef M
        __asm__ volatile("" : HY_B_REGS(a));
    }
    return 10.0 * n / (bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - t0) / hz;
}

/* The AVX-512 level's bounds: the VNNI instructions issued per cycle (20
 * independent chains): vpdpwssd zmm (32 int16 products, the Q16 kernels'
 * instruction there) and vpdpbusd zmm (64 int8 products, the single-level
 * kernels'); vfmadd's are bench.h's.  Ten chains read 1.6-1.7 a cycle on
 * a Xeon (Sapphire Rapids class) whose two ports issue 2.0: the sum's
 * latency is over five cycles there, so ten in flight cannot fill both
 * ports, and every % of peak this benchmark printed there was a fifth too
 * high until 2026-12-06. */
#define HY_B_R20A(X, a) X(0, a) X(1, a) X(2, a) X(3, a) X(4, a) X(5, a) X(6, a) X(7, a) \
    X(8, a) X(9, a) X(10, a) X(11, a) X(12, a) X(13, a) X(14, a) X(15, a) X(16, a)  \
    X(17, a) X(18, a) X(19, a)
#define HY_B_VD(k, unused) __m512i a##k = _mm512_set1_epi32(k + 1);
#define HY_B_VM(k, op) a##k = op(a##k, w, w);
#define HY_B_VK(k, unused) __asm__ volatile("" : "+v"(a##k));
#define HY_B_VNNI512(name, op, wv)                                                 \
    __attribute__((target("avx512f,avx512vnni"))) static double name(double hz)   \
    {                                                                              \
        const long n = 20000000;                                                   \
        __m512i w = wv;                                                            \
        HY_B_R20A(HY_B_VD, 0)                                                      \
        double t0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID);                        \
        for (long i = 0; i < n; i++) {                                             \
            HY_B_R20A(HY_B_VM, op)                                                 \
            HY_B_R20A(HY_B_VK, 0)                                                  \
        }                                                                          \
        return 20.0 * n / (bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - t0) / hz;      \
    }
HY_B_VNNI512(measure_dpwssd512, _mm512_dpwssd_epi32, _mm512_set1_epi16(3))
HY_B_VNNI512(measure_dpbusd512, _mm512_dpbusd_epi32, _mm512_set1_epi8(3))

#endif

int main(int argc, char **argv)
{
    static const hy_dtype_t types[] = {HY_DTYPE_Q4_1, HY_DTYPE_Q8_0,  HY_DTYPE_Q4_0,
                                       HY_DTYPE_Q4_K, HY_DTYPE_Q5_K,  HY_DTYPE_Q6_K,
                                       HY_DTYPE_Q5_0, HY_DTYPE_Q5_1,  HY_DTYPE_IQ4_NL,
                                       HY_DTYPE_Q2_K, HY_DTYPE_Q3_K,  HY_DTYPE_IQ4_XS,
                                       HY_DTYPE_F32,  HY_DTYPE_F16,   HY_DTYPE_BF16};
    static const int bs[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    enum { MAX_B = 256 };
    double secs = argc > 1 ? atof(argv[1]) : 0.2;
    hy_isa_t isa = hy_cpu_isa();
    int rows = argc > 3 ? atoi(argv[3]) : 1024, k = argc > 4 ? atoi(argv[4]) : 576;
    const int only_b = argc > 6 ? atoi(argv[6]) : 0;
    double hz = 0, madd = 0, fma = 0, busd = 0, peak_int = 0, peak_f = 0, peak_i8 = 0;

    if (argc > 2) {
        for (int i = 0; i <= (int)HY_ISA_AVX512; i++)
            if (strcmp(argv[2], hy_isa_name((hy_isa_t)i)) == 0)
                isa = (hy_isa_t)i;
    }
    if (hy_quant_set_isa(isa) != HY_OK || rows < 8 || k < 256 || k % 32) {
        fprintf(stderr, "bench_mm: bad isa/rows/k (k >= 256, a multiple of 32)\n");
        return 1;
    }
    long reps_l = 1;
    if (!bench_env_long("bench_mm", "BENCH_MM_REPS", 1, 100, "1..100 runs a case", &reps_l))
        return 1;
    const int reps = (int)reps_l;
    long q8_l = 0;
    if (!bench_env_long("bench_mm", "BENCH_MM_Q8", 0, 1, "0 or 1", &q8_l))
        return 1;
    const int q8 = (int)q8_l;
#if defined(__x86_64__) && defined(__GNUC__)
    /* the peaks of the fastest (by the int16 rate) of at least three
     * measurements: one alone read vpmaddwd ymm at 1.47 a cycle here as
     * often as at 1.97 (2026-12-07), which put every AVX2 kernel a quarter
     * to a third nearer its peak than it is */
    for (int rep = 0; rep < HY_MAX(reps, 3); rep++) {
        double h = measure_hz(), m = 0, f = 0, u = 0;
        if (isa >= HY_ISA_AVX2) {
            /* int16 kernels: 16 products per vpmaddwd ymm (AVX2), 32 per
             * vpdpwssd zmm (AVX-512, where Q8_2L's two vpdpbusd per 64
             * bytes come to the same rate); float: 8 or 16 per vfmadd */
            if (isa == HY_ISA_AVX512) {
                m = measure_dpwssd512(h);
                f = bench_fma512_per_s() / h;
                u = measure_dpbusd512(h);
            } else {
                m = measure_madd(h);
                f = bench_fma256_per_s() / h;
            }
        }
        const double pi = m * (isa == HY_ISA_AVX512 ? 32 : 16) * 2 * h / 1e9;
        if (rep == 0 || pi > peak_int) {
            hz = h;
            madd = m;
            fma = f;
            busd = u;
            peak_int = pi;
            peak_f = f * (isa == HY_ISA_AVX512 ? 16 : 8) * 2 * h / 1e9;
            peak_i8 = u * 64 * 2 * h / 1e9;
        }
    }
#endif
    /* the rates per cycle assume the add chain's clock; the peaks are
     * instructions per second whatever that clock reads */
    printf("# %s, clock %.2f GHz (dependent adds), %s %.2f/cycle, vfmadd %s %.2f/cycle\n",
           hy_isa_name(isa), hz / 1e9, isa == HY_ISA_AVX512 ? "vpdpwssd zmm" : "vpmaddwd ymm",
           madd, isa == HY_ISA_AVX512 ? "zmm" : "ymm", fma);
    printf("# peak per core: int16 products %.1f GFLOP/s, float %.1f GFLOP/s", peak_int, peak_f);
    if (peak_i8 > 0)
        printf(", int8 products (vpdpbusd zmm %.2f/cycle) %.1f GFLOP/s", busd, peak_i8);
    printf("\n");
    printf("# %d rows x %d (K-quants: x %d), one thread; GFLOP/s (%% of the peak of the "
           "kernel's kind), the fastest of %d run(s) of %.2f s\n", rows, k, k / 256 * 256, reps,
           secs);
    printf("%-6s", "type");
    for (size_t i = 0; i < HY_ARRAY_LEN(bs); i++)
        printf("  B=%-3d       ", bs[i]);
    printf("\n");

    float *xf = malloc(sizeof(float) * (size_t)k * MAX_B), *wf = malloc(sizeof(float) * (size_t)k);
    float *out = malloc(sizeof(float) * (size_t)rows * MAX_B);
    for (int i = 0; i < k * MAX_B; i++)
        xf[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    const int k0 = k;
    for (size_t ti = 0; ti < HY_ARRAY_LEN(types); ti++) {
        hy_dtype_t t = types[ti];
        k = hy_dtype_info(t)->block == 256 ? k0 / 256 * 256 : k0;
        const hy_quant_traits_t *tr = q8 ? hy_quant_traits_q8(t) : hy_quant_traits(t);
        hy_quant_tile_fn_t tile = q8 ? hy_quant_vec_dot_tile_q8(t) : hy_quant_vec_dot_tile(t);
        if (!tr || !tile || (argc > 5 && strcmp(argv[5], hy_dtype_info(t)->name) != 0))
            continue;
        if (isa == HY_ISA_AVX512 && hy_dtype_info(t)->block == 1) {
            /* float weights take gemm_avx512.c there, not this tile (their
             * vec_dot chain): timing it would misstate the level */
            printf("%-6s the AVX-512 GEMM: tests/unit/bench_gemm\n", hy_dtype_info(t)->name);
            continue;
        }
        size_t wb = hy_dtype_row_bytes(t, k), xb = hy_dtype_row_bytes(tr->vec_dot_type, k);
        uint8_t *w = malloc(wb * (size_t)rows), *x = malloc(xb * MAX_B);
        for (int r = 0; r < rows; r++) {
            for (int i = 0; i < k; i++)
                wf[i] = (float)(((int64_t)r * 31 + i * 104729) % 997) / 498.0f - 1.0f;
            if (hy_quant_quantize_row(t, wf, w + (size_t)r * wb, k) != HY_OK) {
                /* types without a quantizer: random bytes, sane f16 scales */
                for (size_t i = 0; i < wb; i++)
                    w[(size_t)r * wb + i] = (uint8_t)((r * 131 + i * 7) >> 3);
                for (int b = 0; b < k / (int)hy_dtype_info(t)->block; b++)
                    hy_test_block_factors(
                        t, w + (size_t)r * wb + (size_t)b * hy_dtype_info(t)->block_bytes, 0.01f,
                        0.01f);
            }
        }
        for (int c = 0; c < MAX_B; c++)
            tr->from_float(xf + (size_t)c * k, x + (size_t)c * xb, k);
        int is_f = tr->vec_dot_type == HY_DTYPE_F32;
        /* single-level int8 partners multiply with vpdpbusd at AVX-512 (the
         * AVX2 level's maddubs route runs at the int16 rate) */
        int is_i8 = tr->vec_dot_type == HY_DTYPE_Q8_0 || tr->vec_dot_type == HY_DTYPE_Q8_1 ||
                    tr->vec_dot_type == HY_DTYPE_Q8_K || tr->vec_dot_type == HY_DTYPE_Q8_S;
        double peak = is_f ? peak_f : is_i8 && peak_i8 > 0 ? peak_i8 : peak_int;
        /* then, where the level has a tile for it, the same rows in the
         * layout the loader gives them (HY_WLAYOUT_ROWS16, backend.h) */
        hy_quant_tile_fn_t t16 = q8 || rows % 16 ? NULL : hy_quant_vec_dot_tile_rows16(t);
        for (int lay = 0; lay < (t16 ? 2 : 1); lay++) {
            if (lay == 1) {
                if (hy_weight_to_rows16(w, t, rows, wb) != HY_OK)
                    break;
                tile = t16;
            }
            char name[32];
            snprintf(name, sizeof name, "%s%s", hy_dtype_info(t)->name, lay ? "/16" : "");
            printf("%-6s", name);
            for (size_t i = 0; i < HY_ARRAY_LEN(bs); i++) {
                int b = bs[i];
                if (only_b > 0 && b != only_b)
                    continue;
                double gf = 0;
                for (int rep = 0; rep < reps; rep++) {
                    long iters = 0;
                    double t0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID), el;
                    do {
                        tile(k, out, (size_t)rows, w, wb, rows, x, xb, b);
                        iters++;
                        el = bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
                    } while (el < secs);
                    gf = HY_MAX(gf, 2.0 * rows * k * b * iters / el / 1e9);
                }
                printf(" %6.1f (%3.0f%%)", gf, peak > 0 ? 100.0 * gf / peak : 0.0);
            }
            printf("\n");
            fflush(stdout);
        }
        free(w);
        free(x);
    }
    free(xf);
    free(wf);
    free(out);
    return 0;
}
