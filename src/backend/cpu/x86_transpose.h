/*
 * x86_transpose.h - in-register transposes of float tiles shared by the
 * AVX-512 GEMM (packing weights and activations) and the decode attention
 * kernels (keys across the lanes).  Static inline with their own
 * target attribute, so either kind of file can include them.
 */
#ifndef HY_X86_TRANSPOSE_H
#define HY_X86_TRANSPOSE_H

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* r[i] lane j -> r[j] lane i, for 16 x 16 floats. */
__attribute__((target("avx512f"), always_inline, unused)) static inline void
hy_x86_transpose16_ps(__m512 *r)
{
    __m512 t[16];

    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
}

/* 8 rows of 8 halves at column d -> dst[c*ds + r] as floats: the 8 x 8
 * transpose on 16-bit words (128-bit registers), then one conversion per
 * output row, so decode attention's keys (keys across the lanes) need no
 * float copy to transpose from.  An exact conversion: any width's kernel
 * may use it. */
__attribute__((target("avx2,f16c"), always_inline, unused)) static inline void
hy_x86_transpose8_f16(const uint16_t *const rp[8], int32_t d, float *dst, size_t ds)
{
    __m128i r[8], a[8], b[8];
#pragma GCC unroll 16
    for (int i = 0; i < 8; i++)
        r[i] = _mm_loadu_si128((const __m128i *)(rp[i] + d));
#pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        a[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
    }
    /* a[0]: columns 0-3 of rows 0,1; a[1]: columns 4-7; a[2], a[3]: rows 2,3 */
#pragma GCC unroll 16
    for (int i = 0; i < 2; i++) {
        b[4 * i + 0] = _mm_unpacklo_epi32(a[4 * i + 0], a[4 * i + 2]);
        b[4 * i + 1] = _mm_unpackhi_epi32(a[4 * i + 0], a[4 * i + 2]);
        b[4 * i + 2] = _mm_unpacklo_epi32(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm_unpackhi_epi32(a[4 * i + 1], a[4 * i + 3]);
    }
    /* b[k] (rows 0-3) and b[4+k] (rows 4-7): columns 2k, 2k+1 */
#pragma GCC unroll 16
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps(dst + (2 * k) * ds, _mm256_cvtph_ps(_mm_unpacklo_epi64(b[k], b[4 + k])));
        _mm256_storeu_ps(dst + (2 * k + 1) * ds,
                         _mm256_cvtph_ps(_mm_unpackhi_epi64(b[k], b[4 + k])));
    }
}

#endif

#endif
