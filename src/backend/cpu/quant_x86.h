/*
 * quant_x86.h - 256-bit kernels shared by quant_avx2.c and quant_avx512.c.
 * Each of those files includes this one and compiles it with its own flags,
 * so the AVX-512 build gets the same code with EVEX encodings and VNNI where
 * HY_QX_VNNI is defined.  Everything here is static: no symbol clashes.
 * Kernels: F32/F16/BF16 dots, Q4_K/Q5_K/Q6_K x Q8_K dots (ggml's
 * single-level partners; the AVX2 level's only), the Q8_0/Q8_1/Q8_K/Q8_2L
 * activation quantizers and the simple dequantizers.
 */
#ifndef HY_QUANT_X86_H
#define HY_QUANT_X86_H

#include <immintrin.h>
#include <string.h>

#include "quant_impl.h"
#include "quant_scales_x86.h"

#define HY_QX_INLINE static inline __attribute__((always_inline))

HY_QX_INLINE float hy_qx_hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

HY_QX_INLINE int hy_qx_hsum8i(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* The first n of v as a vector, built in registers: loading v as a
 * vector right after scalar stores would stall on store forwarding. */
HY_QX_INLINE __m128 hy_qx_vec4(const float *v, int n)
{
    return _mm_setr_ps(v[0], n > 1 ? v[1] : 0.0f, n > 2 ? v[2] : 0.0f, n > 3 ? v[3] : 0.0f);
}

HY_QX_INLINE float hy_qx_h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

/* F16C's round-to-nearest-even conversion: hy_f32_to_f16's bits (the
 * scalar reference quantizers'), without its out-of-line call and branches,
 * which were 8% of an 8-bit-activation pp512. */
HY_QX_INLINE uint16_t hy_qx_f2h(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

/* u8 x s8 products summed in groups of 4 into 8 int32 lanes. */
HY_QX_INLINE __m256i hy_qx_mul_sum_us8(__m256i a, __m256i b)
{
#ifdef HY_QX_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
#endif
}

/* ---- float dots ---- */

/* unused where a file has its own blocked float kernels */
__attribute__((unused)) static void hy_qx_dot_f32(int64_t n, float *s, const void *vw, const void *vx)
{
    const float *w = vw, *x = vx;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    float sum;

    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    sum = hy_qx_hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++)
        sum += w[i] * x[i];
    *s = sum;
}

HY_QX_INLINE __m256 hy_qx_load_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

HY_QX_INLINE __m256 hy_qx_load_bf16(const uint16_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

#define HY_QX_DOT_HALF(name, load, conv)                                          \
    __attribute__((unused)) static void hy_qx_dot_##name(int64_t n, float *s, const void *vw, const void *vx) \
    {                                                                              \
        const uint16_t *w = vw;                                                    \
        const float *x = vx;                                                       \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;               \
        int64_t i = 0;                                                             \
        float sum;                                                                 \
        for (; i + 32 <= n; i += 32) {                                             \
            a0 = _mm256_fmadd_ps(load(w + i), _mm256_loadu_ps(x + i), a0);        \
            a1 = _mm256_fmadd_ps(load(w + i + 8), _mm256_loadu_ps(x + i + 8), a1); \
            a2 = _mm256_fmadd_ps(load(w + i + 16), _mm256_loadu_ps(x + i + 16), a2); \
            a3 = _mm256_fmadd_ps(load(w + i + 24), _mm256_loadu_ps(x + i + 24), a3); \
        }                                                                          \
        for (; i + 8 <= n; i += 8)                                                 \
            a0 = _mm256_fmadd_ps(load(w + i), _mm256_loadu_ps(x + i), a0);        \
        sum = hy_qx_hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))); \
        for (; i < n; i++)                                                         \
            sum += conv(w[i]) * x[i];                                              \
        *s = sum;                                                                  \
    }
HY_QX_DOT_HALF(f16, hy_qx_load_f16, hy_f16_to_f32)
HY_QX_DOT_HALF(bf16, hy_qx_load_bf16, hy_bf16_to_f32)

/* ---- dequantizers (same float operations as the reference: exact) ---- */

static void hy_qx_to_float_f16(const void *vw, float *y, int64_t n)
{
    const uint16_t *w = vw;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, hy_qx_load_f16(w + i));
    for (; i < n; i++)
        y[i] = hy_f16_to_f32(w[i]);
}

static void hy_qx_to_float_bf16(const void *vw, float *y, int64_t n)
{
    const uint16_t *w = vw;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, hy_qx_load_bf16(w + i));
    for (; i < n; i++)
        y[i] = hy_bf16_to_f32(w[i]);
}

/* 16 bytes of packed nibbles -> 32 bytes: low nibbles, then high ones. */
HY_QX_INLINE __m256i hy_qx_nibbles(const uint8_t *qs)
{
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(v),
                                           _mm_srli_epi16(v, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

HY_QX_INLINE void hy_qx_store_i8_as_f32(float *y, __m256i q, __m256 d, __m256 m, int add_m)
{
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    __m256 f[4];
    f[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
    f[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo)));
    f[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
    f[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi)));
    for (int k = 0; k < 4; k++) {
        __m256 v = _mm256_mul_ps(d, f[k]);
        _mm256_storeu_ps(y + 8 * k, add_m ? _mm256_add_ps(v, m) : v);
    }
}

static void hy_qx_to_float_q4_0(const void *vw, float *y, int64_t n)
{
    const hy_block_q4_0_t *w = vw;
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i q = _mm256_sub_epi8(hy_qx_nibbles(w[i].qs), _mm256_set1_epi8(8));
        hy_qx_store_i8_as_f32(y + i * 32, q, _mm256_set1_ps(hy_qx_h2f(w[i].d)),
                              _mm256_setzero_ps(), 0);
    }
}

static void hy_qx_to_float_q4_1(const void *vw, float *y, int64_t n)
{
    const hy_block_q4_1_t *w = vw;
    for (int64_t i = 0; i < n / 32; i++)
        hy_qx_store_i8_as_f32(y + i * 32, hy_qx_nibbles(w[i].qs),
                              _mm256_set1_ps(hy_qx_h2f(w[i].d)),
                              _mm256_set1_ps(hy_qx_h2f(w[i].m)), 1);
}

static void hy_qx_to_float_q8_0(const void *vw, float *y, int64_t n)
{
    const hy_block_q8_0_t *w = vw;
    for (int64_t i = 0; i < n / 32; i++)
        hy_qx_store_i8_as_f32(y + i * 32, _mm256_loadu_si256((const __m256i *)w[i].qs),
                              _mm256_set1_ps(hy_qx_h2f(w[i].d)), _mm256_setzero_ps(), 0);
}

/* ---- activation quantizers: same amax, d, 1/d and ties-to-even rounding
 * as the reference, hence identical bytes ---- */

/* 32 floats -> 32 int8 (x * id rounded), returns the 4 int32 vectors' sum
 * through *sum if non-NULL. */
HY_QX_INLINE __m256i hy_qx_quant32(const float *x, float id, __m256i *i32s)
{
    __m256 mul = _mm256_set1_ps(id);
    __m256i v[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m256 f = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), mul);
        f = _mm256_round_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v[k] = _mm256_cvtps_epi32(f);
        if (i32s)
            i32s[k] = v[k];
    }
    __m256i p01 = _mm256_packs_epi32(v[0], v[1]);
    __m256i p23 = _mm256_packs_epi32(v[2], v[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    /* packs works per 128-bit lane: restore element order */
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void hy_qx_from_float_q8_0(const float *x, void *vy, int64_t n)
{
    hy_block_q8_0_t *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float d = hy_qx_amax(x + i * 32, 32) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = hy_qx_f2h(d);
        _mm256_storeu_si256((__m256i *)y[i].qs, hy_qx_quant32(x + i * 32, id, NULL));
    }
}

__attribute__((unused)) static void hy_qx_from_float_q8_s(const float *x, void *vy,
                                                          int64_t n)
{
    hy_block_q8_s_t *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float d = hy_qx_amax(x + i * 32, 32) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        __m256i v[4];
        y[i].d = d;
        _mm256_storeu_si256((__m256i *)y[i].qs, hy_qx_quant32(x + i * 32, id, v));
        y[i].vsum = hy_qx_hsum8i(_mm256_add_epi32(_mm256_add_epi32(v[0], v[1]),
                                                  _mm256_add_epi32(v[2], v[3])));
    }
}

static void hy_qx_from_float_q8_1(const float *x, void *vy, int64_t n)
{
    hy_block_q8_1_t *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i v[4];
        float d = hy_qx_amax(x + i * 32, 32) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        _mm256_storeu_si256((__m256i *)y[i].qs, hy_qx_quant32(x + i * 32, id, v));
        int sum = hy_qx_hsum8i(_mm256_add_epi32(_mm256_add_epi32(v[0], v[1]),
                                                _mm256_add_epi32(v[2], v[3])));
        y[i].d = hy_qx_f2h(d);
        y[i].s = hy_qx_f2h(d * (float)sum);
    }
}

static void hy_qx_from_float_q8_k(const float *x, void *vy, int64_t n)
{
    hy_block_q8_k_t *y = vy;
    for (int64_t i = 0; i < n / 256; i++) {
        const float *xb = x + i * 256;
        float d = hy_qx_amax(xb, 256) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = d;
        for (int k = 0; k < 8; k++) {
            __m256i v[4];
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * k),
                                hy_qx_quant32(xb + 32 * k, id, v));
            y[i].bsums[2 * k] = (int16_t)hy_qx_hsum8i(_mm256_add_epi32(v[0], v[1]));
            y[i].bsums[2 * k + 1] = (int16_t)hy_qx_hsum8i(_mm256_add_epi32(v[2], v[3]));
        }
    }
}

/* ---- two-level activation quantizers: same amax, d, 1/d, roundings and
 * s summation order as the reference, hence identical bytes ---- */

/* 32 floats -> hi[32], lo[32] (v = 255*hi + lo = round(x*id)); the four
 * 8-lane vectors of v come back in v[] for the sums. */
HY_QX_INLINE void hy_qx_quant32_2l(const float *x, float id, int8_t *hi, int8_t *lo,
                                   __m256i v[4])
{
    const __m256 mul = _mm256_set1_ps(id), inv255 = _mm256_set1_ps(1.0f / 255.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i h[4], l[4];
    /* unrolled: GCC otherwise keeps h[] and l[] on the stack */
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m256 f = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), mul),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 fh = _mm256_round_ps(_mm256_mul_ps(f, inv255),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v[k] = _mm256_cvtps_epi32(f);
        h[k] = _mm256_cvtps_epi32(fh);
        /* lo = v - 255*hi = v - (hi << 8) + hi */
        l[k] = _mm256_add_epi32(_mm256_sub_epi32(v[k], _mm256_slli_epi32(h[k], 8)), h[k]);
    }
    __m256i ph = _mm256_packs_epi16(_mm256_packs_epi32(h[0], h[1]), _mm256_packs_epi32(h[2], h[3]));
    __m256i pl = _mm256_packs_epi16(_mm256_packs_epi32(l[0], l[1]), _mm256_packs_epi32(l[2], l[3]));
    _mm256_storeu_si256((__m256i *)hi, _mm256_permutevar8x32_epi32(ph, perm));
    _mm256_storeu_si256((__m256i *)lo, _mm256_permutevar8x32_epi32(pl, perm));
}

/* Q8_2L rows (the AVX-512 Q4_1 kernel's partner): 8 blocks' scales
 * first (quant_scales_x86.h), then their codes, in the reference's
 * roundings and s association.  The conversion was a tenth of a Q4_1
 * prefill; two passes take 0.27 ns an element where one took 0.51, and
 * the second pass on zmm ran no faster (16 rows of 576 in L1). */
__attribute__((unused)) static void hy_qx_from_float_q8_2l(const float *x, void *vy, int64_t n)
{
    hy_block_q8_2l_t *y = vy;
    const int64_t nb = n / 32;

    for (int64_t i0 = 0; i0 < nb; i0 += 8) {
        const int g = (int)HY_MIN((int64_t)8, nb - i0);
        float ds[8], ids[8];

        hy_qx_scales32(x + i0 * 32, g, HY_Q8_2L_VMAX, ds, ids);
        for (int k = 0; k < g; k++) {
            const float *xb = x + (i0 + k) * 32;
            hy_block_q8_2l_t *yb = y + i0 + k;
            __m256i v[4];

            hy_qx_quant32_2l(xb, ids[k], yb->hi, yb->lo, v);
            /* same association as hy_quant_sum32 */
            __m256 fs = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xb),
                                                                  _mm256_loadu_ps(xb + 8)),
                                                    _mm256_loadu_ps(xb + 16)),
                                      _mm256_loadu_ps(xb + 24));
            yb->d = ds[k];
            yb->s = hy_qx_hsum8(fs);
            yb->vsum = hy_qx_hsum8i(_mm256_add_epi32(_mm256_add_epi32(v[0], v[1]),
                                                     _mm256_add_epi32(v[2], v[3])));
        }
    }
}

/* ---- K-quant dots (after ggml's AVX2 kernels) ----
 * The AVX2 level's partners of Q8_K; the AVX-512 level has its own
 * 16-row kernels (quant_avx512.c, hy_a5k_*). */
#ifndef HY_QX_VNNI

/* scales[12] -> bytes sc[0..7] then m[0..7]. */
HY_QX_INLINE __m256i hy_qx_k4_scales_mins(const uint8_t *scales)
{
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t u[4], aux;
    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
    aux = u[1] & kmask1;
    u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
    u[2] = aux;
    u[0] &= kmask1;
    return _mm256_cvtepu8_epi16(_mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]));
}

/* Broadcast int16 element i of each 128-bit lane. */
HY_QX_INLINE __m256i hy_qx_bcast16(__m256i v, int i)
{
    return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short)(((2 * i + 1) << 8) | (2 * i))));
}

/* d_x*dmin*sum_k m_k*(bsums[2k]+bsums[2k+1]) as 4 int32 partial sums. */
HY_QX_INLINE __m128i hy_qx_k4_mins_dot(__m256i mins_and_scales, const int16_t *bsums)
{
    __m256i q8sums = _mm256_loadu_si256((const __m256i *)bsums);
    __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(q8sums),
                                 _mm256_extracti128_si256(q8sums, 1));
    return _mm_madd_epi16(_mm256_extracti128_si256(mins_and_scales, 1), q8s);
}

static void hy_qx_dot_q4_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const hy_block_q4_k_t *w = vw;
    const hy_block_q8_k_t *x = vx;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();

    for (int64_t i = 0; i < n / 256; i++) {
        const float d = x[i].d * hy_qx_h2f(w[i].d);
        const float dmin = -x[i].d * hy_qx_h2f(w[i].dmin);
        const __m256i ms = hy_qx_k4_scales_mins(w[i].scales);
        const __m128i prod = hy_qx_k4_mins_dot(ms, x[i].bsums);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
        const __m128i sc128 = _mm256_castsi256_si128(ms);
        const __m256i scales = _mm256_inserti128_si256(_mm256_castsi128_si256(sc128), sc128, 1);
        const uint8_t *q4 = w[i].qs;
        const int8_t *q8 = x[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(q4 + 32 * j));
            __m256i ql = _mm256_and_si256(bits, m4);
            __m256i qh = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            __m256i p0 = _mm256_maddubs_epi16(ql, _mm256_loadu_si256((const __m256i *)(q8 + 64 * j)));
            __m256i p1 = _mm256_maddubs_epi16(qh, _mm256_loadu_si256((const __m256i *)(q8 + 64 * j + 32)));
            p0 = _mm256_madd_epi16(hy_qx_bcast16(scales, 2 * j), p0);
            p1 = _mm256_madd_epi16(hy_qx_bcast16(scales, 2 * j + 1), p1);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
    *s = hy_qx_hsum8(acc) + _mm_cvtss_f32(acc_m);
}

static void hy_qx_dot_q5_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const hy_block_q5_k_t *w = vw;
    const hy_block_q8_k_t *x = vx;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();

    for (int64_t i = 0; i < n / 256; i++) {
        const float d = x[i].d * hy_qx_h2f(w[i].d);
        const float dmin = -x[i].d * hy_qx_h2f(w[i].dmin);
        const __m256i ms = hy_qx_k4_scales_mins(w[i].scales);
        const __m128i prod = hy_qx_k4_mins_dot(ms, x[i].bsums);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
        const __m128i sc128 = _mm256_castsi256_si128(ms);
        const __m256i scales = _mm256_inserti128_si256(_mm256_castsi128_si256(sc128), sc128, 1);
        const __m256i hbits = _mm256_loadu_si256((const __m256i *)w[i].qh);
        const uint8_t *q5 = w[i].qs;
        const int8_t *q8 = x[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(q5 + 32 * j));
            /* bit 2j / 2j+1 of qh -> 0 or 16 */
            __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * j)), one);
            __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * j + 1)), one);
            __m256i q0 = _mm256_or_si256(_mm256_and_si256(bits, m4), _mm256_slli_epi16(h0, 4));
            __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                                         _mm256_slli_epi16(h1, 4));
            __m256i p0 = _mm256_maddubs_epi16(q0, _mm256_loadu_si256((const __m256i *)(q8 + 64 * j)));
            __m256i p1 = _mm256_maddubs_epi16(q1, _mm256_loadu_si256((const __m256i *)(q8 + 64 * j + 32)));
            p0 = _mm256_madd_epi16(hy_qx_bcast16(scales, 2 * j), p0);
            p1 = _mm256_madd_epi16(hy_qx_bcast16(scales, 2 * j + 1), p1);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
    *s = hy_qx_hsum8(acc) + _mm_cvtss_f32(acc_m);
}

static void hy_qx_dot_q6_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const hy_block_q6_k_t *w = vw;
    const hy_block_q8_k_t *x = vx;
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);
    const __m256i m32s = _mm256_set1_epi8(32);
    __m256 acc = _mm256_setzero_ps();

    for (int64_t i = 0; i < n / 256; i++) {
        const float d = x[i].d * hy_qx_h2f(w[i].d);
        const uint8_t *ql = w[i].ql, *qh = w[i].qh;
        const int8_t *q8 = x[i].qs;
        const __m128i scales = _mm_loadu_si128((const __m128i *)w[i].scales);
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 2; j++) {
            __m256i b1 = _mm256_loadu_si256((const __m256i *)(ql + 64 * j));
            __m256i b2 = _mm256_loadu_si256((const __m256i *)(ql + 64 * j + 32));
            __m256i bh = _mm256_loadu_si256((const __m256i *)(qh + 32 * j));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(b1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(bh, m2), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(b2, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 2), m2), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 4), m2), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 6), m2), 4));
            for (int k = 0; k < 4; k++) {
                __m256i q8v = _mm256_loadu_si256((const __m256i *)(q8 + 128 * j + 32 * k));
                /* elements 0..15 use scale 8j+2k, 16..31 scale 8j+2k+1 */
                int s0 = 8 * j + 2 * k;
                __m128i shuf = _mm_set_epi64x(0x0101010101010101LL * (s0 + 1),
                                              0x0101010101010101LL * s0);
                __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, shuf));
                __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], q8v),
                                             _mm256_maddubs_epi16(m32s, q8v));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc, p));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hy_qx_hsum8(acc);
}

#endif /* !HY_QX_VNNI */

#endif
