/*
 * attn_avx512.c - the attention kernels (attn_flash_impl.h) on AVX-512: 16
 * lanes per vector, groups of 3 vectors (48 queries); score chains of 8
 * queries x 3 keys (prefill) or 4 x 4 (decode), and 8 value columns x 3
 * vectors of output, in registers (up to 28 of the 32 zmm).
 */
#include "backend/cpu/attn_flash.h"
#include "backend/cpu/x86_transpose.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && HY_BUILD_AVX512
#pragma GCC push_options
#pragma GCC target("avx512f,f16c")

#define HY_AF_W 16
#define HY_AF_VMAX 3
#define HY_AF_ND 8
#define HY_AF_DOT_Q 8
#define HY_AF_DOT_K 3
#define HY_AF_DEC_DQ 4
#define HY_AF_ENTRY hy_attn_flash_avx512
#define HY_AF_DECODE_ENTRY hy_attn_decode_avx512
#define HY_AF_MERGE_ENTRY hy_attn_merge_avx512

typedef __m512 hy_af_v;

#define HY_AF_PRIM __attribute__((always_inline)) static inline
HY_AF_PRIM hy_af_v hy_af_zero(void) { return _mm512_setzero_ps(); }
HY_AF_PRIM hy_af_v hy_af_load(const float *p) { return _mm512_loadu_ps(p); }
HY_AF_PRIM void hy_af_store(float *p, hy_af_v v) { _mm512_storeu_ps(p, v); }
HY_AF_PRIM hy_af_v hy_af_set1(float x) { return _mm512_set1_ps(x); }
HY_AF_PRIM hy_af_v hy_af_fma(hy_af_v a, hy_af_v b, hy_af_v c) { return _mm512_fmadd_ps(a, b, c); }
HY_AF_PRIM hy_af_v hy_af_max(hy_af_v a, hy_af_v b) { return _mm512_max_ps(a, b); }
HY_AF_PRIM hy_af_v hy_af_sub(hy_af_v a, hy_af_v b) { return _mm512_sub_ps(a, b); }
HY_AF_PRIM hy_af_v hy_af_add(hy_af_v a, hy_af_v b) { return _mm512_add_ps(a, b); }
HY_AF_PRIM hy_af_v hy_af_mul(hy_af_v a, hy_af_v b) { return _mm512_mul_ps(a, b); }
HY_AF_PRIM hy_af_v hy_af_exp(hy_af_v x) { return hy_vexp_avx512(x); }

HY_AF_PRIM hy_af_v hy_af_mask_pos(hy_af_v s, int32_t j, const int32_t *qpos, const int32_t *qlo)
{
    __m512i jp = _mm512_set1_epi32(j);
    __mmask16 ok = _mm512_cmple_epi32_mask(jp, _mm512_loadu_si512(qpos)) &
                   _mm512_cmpge_epi32_mask(jp, _mm512_loadu_si512(qlo));
    return _mm512_mask_blend_ps(ok, _mm512_set1_ps(-INFINITY), s);
}

HY_AF_PRIM hy_af_v hy_af_keep_ge(hy_af_v p, hy_af_v x, float t)
{
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(t), _CMP_GE_OQ), p);
}

HY_AF_PRIM hy_af_v hy_af_one_if_ninf(hy_af_v c, hy_af_v m)
{
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ), c,
                                _mm512_set1_ps(1.0f));
}

HY_AF_PRIM hy_af_v hy_af_cvt_f16(const uint16_t *h)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
}

/* The W codes from o of the q8_0 block at b, times its d. */
HY_AF_PRIM hy_af_v hy_af_cvt_q8(const uint8_t *b, size_t o)
{
    uint16_t d;
    memcpy(&d, b, sizeof d);
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                             _mm_loadu_si128((const __m128i *)(const void *)(b + 2 + o)))),
                         _mm512_cvtph_ps(_mm256_set1_epi16((short)d)));
}

#define HY_AF_HAVE_HSUM4 1
HY_AF_PRIM void hy_af_hsum4(__m512 v0, __m512 v1, __m512 v2, __m512 v3, float *out)
{
    hy_x86_hsum4_ps512(v0, v1, v2, v3, out);
}

HY_AF_PRIM void hy_af_transpose_v(hy_af_v *r) { hy_x86_transpose16_ps(r); }

#include "backend/cpu/attn_flash_impl.h"

#pragma GCC pop_options
#endif
