/*
 * attn_avx2.c - the attention kernels (attn_flash_impl.h) on AVX2 + FMA +
 * F16C: 8 lanes per vector, groups of 3 vectors (24 queries); score chains
 * of 4 queries x 3 keys (prefill) or 2 x 4 (decode), and 4 value columns x
 * 3 vectors of output, in registers (12 accumulators, the loaded vectors
 * and a broadcast: at most all 16 ymm).
 */
#include "backend/cpu/attn_flash.h"

#include <math.h>

#if defined(__x86_64__) && HY_BUILD_AVX2
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#define HY_AF_W 8
#define HY_AF_VMAX 3
#define HY_AF_ND 4
#define HY_AF_DOT_Q 4
#define HY_AF_DOT_K 3
#define HY_AF_DEC_DQ 2
#define HY_AF_ENTRY hy_attn_flash_avx2
#define HY_AF_DECODE_ENTRY hy_attn_decode_avx2
#define HY_AF_MERGE_ENTRY hy_attn_merge_avx2

typedef __m256 hy_af_v;

#define HY_AF_PRIM __attribute__((always_inline)) static inline
HY_AF_PRIM hy_af_v hy_af_zero(void) { return _mm256_setzero_ps(); }
HY_AF_PRIM hy_af_v hy_af_load(const float *p) { return _mm256_loadu_ps(p); }
HY_AF_PRIM void hy_af_store(float *p, hy_af_v v) { _mm256_storeu_ps(p, v); }
HY_AF_PRIM hy_af_v hy_af_set1(float x) { return _mm256_set1_ps(x); }
HY_AF_PRIM hy_af_v hy_af_fma(hy_af_v a, hy_af_v b, hy_af_v c) { return _mm256_fmadd_ps(a, b, c); }
HY_AF_PRIM hy_af_v hy_af_max(hy_af_v a, hy_af_v b) { return _mm256_max_ps(a, b); }
HY_AF_PRIM hy_af_v hy_af_sub(hy_af_v a, hy_af_v b) { return _mm256_sub_ps(a, b); }
HY_AF_PRIM hy_af_v hy_af_add(hy_af_v a, hy_af_v b) { return _mm256_add_ps(a, b); }
HY_AF_PRIM hy_af_v hy_af_exp(hy_af_v x) { return hy_vexp_avx2(x); }

HY_AF_PRIM hy_af_v hy_af_mask_pos(hy_af_v s, int32_t j, const int32_t *qpos, const int32_t *qlo)
{
    __m256i jp = _mm256_set1_epi32(j);
    __m256i bad = _mm256_or_si256(
        _mm256_cmpgt_epi32(jp, _mm256_loadu_si256((const __m256i *)qpos)),
        _mm256_cmpgt_epi32(_mm256_loadu_si256((const __m256i *)qlo), jp));
    return _mm256_blendv_ps(s, _mm256_set1_ps(-INFINITY), _mm256_castsi256_ps(bad));
}

HY_AF_PRIM hy_af_v hy_af_keep_ge(hy_af_v p, hy_af_v x, float t)
{
    return _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(t), _CMP_GE_OQ), p);
}

HY_AF_PRIM hy_af_v hy_af_one_if_ninf(hy_af_v c, hy_af_v m)
{
    return _mm256_blendv_ps(c, _mm256_set1_ps(1.0f),
                            _mm256_cmp_ps(m, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ));
}

HY_AF_PRIM hy_af_v hy_af_cvt_f16(const uint16_t *h)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}

/* 8 x 8 floats: dst[c*ds + r] = src[r*ss + c] */
HY_AF_PRIM void hy_af_transpose(const float *src, size_t ss, float *dst, size_t ds)
{
    __m256 r[8], t[8];
#pragma GCC unroll 16
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_ps(src + i * ss);
#pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 2; i++) {
        r[4 * i + 0] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 1] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
#pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(dst + i * ds, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
        _mm256_storeu_ps(dst + (i + 4) * ds, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
}

/* out[i] = the sum of vector vi's 8 lanes in the tree ((l0 + l1) + (l2 +
 * l3)) + ((l4 + l5) + (l6 + l7)), the generic hy_af_hsum4's: pairs and
 * quads by hadd, then the two halves. */
#define HY_AF_HAVE_HSUM4 1
HY_AF_PRIM void hy_af_hsum4(__m256 v0, __m256 v1, __m256 v2, __m256 v3, float *out)
{
    __m256 q = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1)));
}

#include "backend/cpu/attn_flash_impl.h"

#pragma GCC pop_options
#endif
