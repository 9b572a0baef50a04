/*
 * bench.h - what the micro-benchmarks (tests/unit/bench_*.c) share: a
 * clock in seconds (they pick thread or process CPU time, since the machine
 * they run on is shared), a qsort comparator for medians, a weight type by
 * its ggml name, and the plain 64-byte-load read that is the bandwidth
 * bound they compare kernels with.  Static inline: one include per program.
 */
#ifndef HY_BENCH_H
#define HY_BENCH_H

#include "common/dtype.h"

#include <stdint.h>
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
