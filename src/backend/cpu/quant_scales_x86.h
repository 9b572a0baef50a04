/*
 * quant_scales_x86.h - the block scales every x86 activation quantizer
 * starts from (quant_x86.h's and qmm_avx2.c's): the largest |x| of a
 * block of 32, d = amax / vmax and 1/d as the scalar references compute
 * them.  The two-pass quantizers take 8 blocks' scales first, then their
 * codes: in one pass each block's codes waited on its max and two
 * divisions (~60 cycles of latency), and the waiting instructions filled
 * the scheduler.  Compiled with the including file's flags (AVX2 at
 * least).
 */
#ifndef HY_QUANT_SCALES_X86_H
#define HY_QUANT_SCALES_X86_H

#include <immintrin.h>

/* max |x[i]| over n floats (n a multiple of 8); max is exact, so any
 * order gives the reference's value for finite x. */
static inline __attribute__((always_inline)) float hy_qx_amax(const float *x, int n)
{
    __m256 sign = _mm256_set1_ps(-0.0f), m = _mm256_setzero_ps();
#pragma GCC unroll 32
    for (int k = 0; k < n; k += 8)
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* d[k] = amax / vmax and id[k] = 1/d[k] (0 for an all-zero block) of
 * the g blocks of 32 floats at x. */
static inline __attribute__((always_inline)) void hy_qx_scales32(const float *x, int g,
                                                                 float vmax, float *d,
                                                                 float *id)
{
    for (int k = 0; k < g; k++) {
        d[k] = hy_qx_amax(x + 32 * k, 32) / vmax;
        id[k] = d[k] != 0.0f ? 1.0f / d[k] : 0.0f;
    }
}

#endif
