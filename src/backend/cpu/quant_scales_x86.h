/*
 * quant_scales_x86.h - the block scales every x86 activation quantizer
 * starts from (quant_x86.h's and qmm_avx2.c's): the largest |x| of a
 * block of 32, d = amax / vmax and 1/d as the scalar references compute
 * them.  The two-pass quantizers take 8 blocks' scales first, then their
 * codes: in one pass each block's codes waited on its max and two
 * divisions (~60 cycles of latency), and the waiting instructions filled
 * the scheduler.  Also the K-quants' packed weight scales of 8 or 16 rows
 * at once.  Compiled with the including file's flags (AVX2 at least).
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

/* The packed K-quant scales of 8 rows (ymm: hy_qx_..._scales8) or 16
 * (zmm, at AVX-512: ..._scales16), a dword of each row's field per lane:
 * one definition for both widths (V the vector, P its intrinsics' prefix,
 * SI their integer suffix).  quant_avx512.c's file-layout kernels and
 * qmm_avx2.c's 16-row groups (hy_q2_k16_prep, at either level) decode
 * them.
 *
 * hy_qx_k4_scales*: hy_quant_scale_min_k4, u[0..2] the 12 bytes of each
 * row's Q4_K/Q5_K scales; byte j of sc[0] (sc[1]) is scale j (4 + j), of
 * mn[] the mins. */
#define HY_QX_K4_SCALES(name, V, P, SI)                                                       \
    static inline __attribute__((always_inline)) void name(const V u[3], V sc[2], V mn[2])    \
    {                                                                                         \
        const V m6 = P##set1_epi8(0x3F), m4 = P##set1_epi8(0x0F), m2 = P##set1_epi8(0x03);    \
                                                                                              \
        sc[0] = P##and_##SI(u[0], m6);                                                        \
        sc[1] = P##or_##SI(P##and_##SI(u[2], m4),                                             \
                           P##slli_epi32(P##and_##SI(P##srli_epi32(u[0], 6), m2), 4));        \
        mn[0] = P##and_##SI(u[1], m6);                                                        \
        mn[1] = P##or_##SI(P##and_##SI(P##srli_epi32(u[2], 4), m4),                           \
                           P##slli_epi32(P##and_##SI(P##srli_epi32(u[1], 6), m2), 4));        \
    }

/* hy_qx_k3_scales*: the 16 6-bit scales of Q3_K (hy_quant_scale_q3_k),
 * a[0..2] the 12 bytes of each row's scales; byte j of sq[q] is scale 4q
 * + j, less 32 (a signed byte): the low nibble of scales[g % 8] (the high
 * one for g >= 8) and 2-bit field g / 4 of scales[8 + g % 4]. */
#define HY_QX_K3_SCALES(name, V, P, SI)                                                       \
    static inline __attribute__((always_inline)) void name(const V a[3], V sq[4])             \
    {                                                                                         \
        const V m4 = P##set1_epi8(0x0F), m2 = P##set1_epi8(0x03);                             \
                                                                                              \
        _Pragma("GCC unroll 4")                                                               \
        for (int q = 0; q < 4; q++)                                                           \
            sq[q] = P##sub_epi8(                                                              \
                P##or_##SI(P##and_##SI(P##srli_epi32(a[q % 2], 4 * (q / 2)), m4),             \
                           P##slli_epi32(P##and_##SI(P##srli_epi32(a[2], 2 * q), m2), 4)),    \
                P##set1_epi8(32));                                                            \
    }

HY_QX_K4_SCALES(hy_qx_k4_scales8, __m256i, _mm256_, si256)
HY_QX_K3_SCALES(hy_qx_k3_scales8, __m256i, _mm256_, si256)
#ifdef __AVX512F__
HY_QX_K4_SCALES(hy_qx_k4_scales16, __m512i, _mm512_, si512)
HY_QX_K3_SCALES(hy_qx_k3_scales16, __m512i, _mm512_, si512)
#endif

#endif
