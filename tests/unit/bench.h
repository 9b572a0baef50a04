/*
 * bench.h - what the micro-benchmarks (tests/unit/bench_*.c) share: a
 * clock in seconds (they pick thread or process CPU time, since the machine
 * they run on is shared), a qsort comparator for medians, a weight type by
 * its ggml name, an integer setting from the environment, checked, and the
 * plain 64-byte-load read that is the bandwidth bound they compare kernels
 * with.  Static inline: one include per program.
 */
#ifndef HY_BENCH_H
#define HY_BENCH_H

#include "common/dtype.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double bench_clock_s(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* HY_DTYPE_COUNT if no type has that name. */
static inline hy_dtype_t bench_parse_type(const char *s)
{
    for (uint32_t t = 0; t < HY_DTYPE_COUNT; t++) {
        const hy_dtype_info_t *i = hy_dtype_info(t);
        if (i && i->name && strcmp(i->name, s) == 0)
            return (hy_dtype_t)t;
    }
    return HY_DTYPE_COUNT;
}

/* Environment variable name as an integer in lo..hi into *v (left as it
 * is when the variable is unset): false for anything else, after a line on
 * stderr that names the program, the variable, its value and what it
 * wants. */
static inline bool bench_env_long(const char *prog, const char *name, long lo, long hi,
                                  const char *want, long *v)
{
    const char *s = getenv(name);
    char *end;

    if (s == NULL)
        return true;
    long x = strtol(s, &end, 10);
    if (end == s || *end || x < lo || x > hi) {
        fprintf(stderr, "%s: %s=%s: want %s\n", prog, name, s, want);
        return false;
    }
    *v = x;
    return true;
}

/* vfmadd instructions a second of this thread, 10 independent chains (ymm,
 * or zmm where the build has AVX-512): times lanes x 2, the float peak the
 * float kernels (packed GEMM, flash attention) are rated against, measured
 * on the machine the benchmark runs on, not assumed. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BENCH_R10(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9)
#define BENCH_FMA_LOOP(vt, set1, con)                                       \
    const long n = 20000000;                                                       \
    vt m = set1(1.0001f), c = set1(0.999f);                                        \
    BENCH_R10(BENCH_FMA_D)                                                         \
    double t0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID);                            \
    for (long i = 0; i < n; i++) {                                                 \
        BENCH_R10(BENCH_FMA_M)                                                     \
        __asm__ volatile("" : "+" con(f0), "+" con(f1), "+" con(f2), "+" con(f3),  \
                         "+" con(f4), "+" con(f5), "+" con(f6), "+" con(f7),       \
                         "+" con(f8), "+" con(f9));                                \
    }                                                                              \
    return 10.0 * n / (bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - t0);
#define BENCH_FMA_D(k) __typeof__(m) f##k = c;
#define BENCH_FMA_M(k) f##k = BENCH_FMA_OP(f##k, m, c);
__attribute__((target("avx2,fma"), unused)) static double bench_fma256_per_s(void)
{
#define BENCH_FMA_OP _mm256_fmadd_ps
    BENCH_FMA_LOOP(__m256, _mm256_set1_ps, "x")
#undef BENCH_FMA_OP
}
#if HY_BUILD_AVX512
__attribute__((target("avx512f"), unused)) static double bench_fma512_per_s(void)
{
#define BENCH_FMA_OP _mm512_fmadd_ps
    BENCH_FMA_LOOP(__m512, _mm512_set1_ps, "v")
#undef BENCH_FMA_OP
}
#endif
#endif

/* Every byte read once, in order, with 64-byte loads (the kernels' own
 * width), folded into a value the caller keeps so the reads stay. */
#if defined(__x86_64__) && defined(__GNUC__) && HY_BUILD_AVX512
#include <immintrin.h>
#define HAVE_READ_AVX512 1
__attribute__((target("avx512f"), unused)) static uint64_t bench_read_avx512(const uint8_t *p,
                                                                             size_t n)
{
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;

    for (; i + 256 <= n; i += 256) {
        a0 = _mm512_xor_si512(a0, _mm512_loadu_si512(p + i));
        a1 = _mm512_xor_si512(a1, _mm512_loadu_si512(p + i + 64));
        a2 = _mm512_xor_si512(a2, _mm512_loadu_si512(p + i + 128));
        a3 = _mm512_xor_si512(a3, _mm512_loadu_si512(p + i + 192));
    }
    for (; i < n; i++)
        a0 = _mm512_add_epi64(a0, _mm512_set1_epi64(p[i]));
    a0 = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    uint64_t v[8], r = 0;
    _mm512_storeu_si512(v, a0); /* (reduce_add would be signed: UB on overflow) */
    for (int k = 0; k < 8; k++)
        r ^= v[k];
    return r;
}
#endif

#endif
