/*
 * vexp.h - exp for x <= 0 on 16, 8 and 1 lanes with the same bits (and
 * log on 8 and 1, below): the Cephes polynomial on the reduced argument,
 * relative error ~2 ulp.
 * Arguments below -87 (results < 1e-38) are clamped there, so 2^n stays a
 * normal number.  Every step is one IEEE operation or an explicit fused
 * multiply-add, in the same order on every level: attention's softmax
 * (attn_flash_impl.h, attention.c), the activations (act.c) and the sparse
 * choice (sparse_attn.c) give a lane the bits of the scalar level whatever
 * width computes it.
 */
#ifndef HY_VEXP_H
#define HY_VEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float hy_vexp1(float x)
{
    x = x > -87.0f ? x : -87.0f;
    float n = nearbyintf(x * 1.44269504088896341f);
    float r = fmaf(-n, 0.693359375f, x);
    r = fmaf(-n, -2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, r * r, r + 1.0f);
    return ldexpf(p, (int)n);
}

/* log x for normal x > 0 on 1 and 8 lanes with the same bits (Cephes'
 * logf polynomial, ~1 ulp): x = m 2^e with m in [sqrt(1/2), sqrt(2)), the
 * polynomial in m - 1.  The group choice of block-sparse attention takes
 * it (sparse_attn.c). */
static inline float hy_vlog1(float x)
{
    uint32_t b;
    float m;

    memcpy(&b, &x, sizeof b);
    int32_t e = (int32_t)((b >> 23) & 0xffu) - 126;
    b = (b & 0x807fffffu) | 0x3f000000u; /* m in [0.5, 1) */
    memcpy(&m, &b, sizeof m);
    if (m < 0.707106781186547524f) {
        e -= 1;
        m = m + m;
    }
    float r = m - 1.0f, z = r * r;
    float p = 7.0376836292e-2f;
    p = fmaf(p, r, -1.1514610310e-1f);
    p = fmaf(p, r, 1.1676998740e-1f);
    p = fmaf(p, r, -1.2420140846e-1f);
    p = fmaf(p, r, 1.4249322787e-1f);
    p = fmaf(p, r, -1.6668057665e-1f);
    p = fmaf(p, r, 2.0000714765e-1f);
    p = fmaf(p, r, -2.4999993993e-1f);
    p = fmaf(p, r, 3.3333331174e-1f);
    float fe = (float)e, y = (p * r) * z;
    y = fmaf(fe, -2.12194440e-4f, y);
    y = fmaf(z, -0.5f, y);
    return fmaf(fe, 0.693359375f, r + y);
}

#if defined(__x86_64__) && HY_BUILD_AVX2
#include <immintrin.h>

#if HY_BUILD_AVX512
__attribute__((target("avx512f"), always_inline, unused)) static inline __m512
hy_vexp_avx512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}
#endif

__attribute__((target("avx2,fma"), always_inline, unused)) static inline __m256
hy_vexp_avx2(__m256 x)
{
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n into the exponent field; n >= -126 after the clamp */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

__attribute__((target("avx2,fma"), always_inline, unused)) static inline __m256
hy_vlog_avx2(__m256 x)
{
    __m256i b = _mm256_castps_si256(x);
    __m256i e = _mm256_and_si256(_mm256_srli_epi32(b, 23), _mm256_set1_epi32(0xff));
    __m256i mb = _mm256_and_si256(b, _mm256_set1_epi32((int)0x807fffffu));
    __m256 m = _mm256_castsi256_ps(_mm256_or_si256(mb, _mm256_set1_epi32(0x3f000000)));
    __m256 small = _mm256_cmp_ps(m, _mm256_set1_ps(0.707106781186547524f), _CMP_LT_OQ);
    e = _mm256_sub_epi32(e, _mm256_set1_epi32(126));
    e = _mm256_add_epi32(e, _mm256_castps_si256(small)); /* -1 where small */
    m = _mm256_add_ps(m, _mm256_and_ps(m, small));        /* m + m, or m + 0 */
    __m256 r = _mm256_sub_ps(m, _mm256_set1_ps(1.0f)), z = _mm256_mul_ps(r, r);
    __m256 p = _mm256_set1_ps(7.0376836292e-2f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(-1.1514610310e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.1676998740e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(-1.2420140846e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.4249322787e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(-1.6668057665e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(2.0000714765e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(-2.4999993993e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(3.3333331174e-1f));
    __m256 fe = _mm256_cvtepi32_ps(e), y = _mm256_mul_ps(_mm256_mul_ps(p, r), z);
    y = _mm256_fmadd_ps(fe, _mm256_set1_ps(-2.12194440e-4f), y);
    y = _mm256_fmadd_ps(z, _mm256_set1_ps(-0.5f), y);
    return _mm256_fmadd_ps(fe, _mm256_set1_ps(0.693359375f), _mm256_add_ps(r, y));
}
#endif

#endif
