/*
 * x86_transpose.h - in-register transposes of float tiles (the AVX-512
 * GEMM packs weights and activations with them) and the attention kernels'
 * horizontal sums: four vectors' lanes each summed in attn_flash_impl.h's
 * fixed tree, ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) and so on
 * (the AVX2 and AVX-512 kernels' hy_af_hsum4; test_attn_flash holds them
 * to that tree bit for bit).  Static inline with their own target
 * attribute, so any file can include them.
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

/* r[i] lane j -> r[j] lane i, for 8 x 8 floats. */
__attribute__((target("avx"), always_inline, unused)) static inline void
hy_x86_transpose8_ps(__m256 *r)
{
    __m256 t[8], u[8];

    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* out[i] = the tree sum of vi's 8 lanes: pairs and quads by hadd, then
 * the two halves. */
__attribute__((target("avx"), always_inline, unused)) static inline void
hy_x86_hsum4_ps256(__m256 v0, __m256 v1, __m256 v2, __m256 v3, float *out)
{
    __m256 q = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1)));
}

/* out[i] = the tree sum of vi's 16 lanes, four vectors a level: each level
 * adds the even-placed partials (left) to the odd ones, as the tree adds
 * lane 2j to lane 2j+1.  (A 16 x 16 transpose in memory per four sums, the
 * generic way, cost the prefill kernel more than its multiply-adds.) */
__attribute__((target("avx512f"), always_inline, unused)) static inline void
hy_x86_hsum4_ps512(__m512 v0, __m512 v1, __m512 v2, __m512 v3, float *out)
{
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                         30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    /* [v0's 8 pair sums | v1's], [v2's | v3's] */
    __m512 a01 = _mm512_add_ps(_mm512_permutex2var_ps(v0, ev, v1),
                               _mm512_permutex2var_ps(v0, od, v1));
    __m512 a23 = _mm512_add_ps(_mm512_permutex2var_ps(v2, ev, v3),
                               _mm512_permutex2var_ps(v2, od, v3));
    /* each vector's 4 quad sums, in order */
    __m512 b = _mm512_add_ps(_mm512_permutex2var_ps(a01, ev, a23),
                             _mm512_permutex2var_ps(a01, od, a23));
    /* lanes 0..7: the vectors' half sums (an index's low 4 bits pick) */
    __m512 c = _mm512_add_ps(_mm512_permutexvar_ps(ev, b), _mm512_permutexvar_ps(od, b));
    __m512 d = _mm512_add_ps(_mm512_permutexvar_ps(ev, c), _mm512_permutexvar_ps(od, c));
    _mm_storeu_ps(out, _mm512_castps512_ps128(d));
}

#endif

#endif
