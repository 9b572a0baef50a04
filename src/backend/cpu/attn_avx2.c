/*
 * attn_avx2.c - the attention kernels (attn_flash_impl.h) on AVX2 + FMA +
 * F16C: 8 lanes per vector, groups of 3 vectors (24 queries); score chains
 * of 4 queries x 3 keys (prefill) or 2 x 4 (decode), and 4 value columns x
 * 3 vectors of output, in registers (12 accumulators, the loaded vectors
 * and a broadcast: at most all 16 ymm).
 */
#include "backend/cpu/attn_flash.h"
#include "backend/cpu/x86_transpose.h"

#include <math.h>
#include <string.h>

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
HY_AF_PRIM hy_af_v hy_af_mul(hy_af_v a, hy_af_v b) { return _mm256_mul_ps(a, b); }
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

/* The W codes from o of the q8_0 block at b, times its d. */
HY_AF_PRIM hy_af_v hy_af_cvt_q8(const uint8_t *b, size_t o)
{
    uint16_t d;
    memcpy(&d, b, sizeof d);
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                             _mm_loadl_epi64((const __m128i *)(const void *)(b + 2 + o)))),
                         _mm256_cvtph_ps(_mm_set1_epi16((short)d)));
}

#define HY_AF_HAVE_HSUM4 1
HY_AF_PRIM void hy_af_hsum4(__m256 v0, __m256 v1, __m256 v2, __m256 v3, float *out)
{
    hy_x86_hsum4_ps256(v0, v1, v2, v3, out);
}

HY_AF_PRIM void hy_af_transpose_v(hy_af_v *r) { hy_x86_transpose8_ps(r); }

#include "backend/cpu/attn_flash_impl.h"

void hy_attn_f16_row_avx2(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;

    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        y[i] = (uint16_t)_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

#pragma GCC pop_options
#endif
