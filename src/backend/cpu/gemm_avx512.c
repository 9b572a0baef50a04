/*
 * gemm_avx512.c - register-blocked SGEMM for float weights (F32/F16/BF16)
 * times float activations, the prefill hot loop.  Weights are converted to
 * f32 once per call into a transposed L2-resident panel ([k][32 rows]),
 * activations once into groups of 12 tokens ([k][12]); the micro-kernel
 * keeps a 32 rows x 12 tokens block of outputs in 24 zmm accumulators and
 * does 24 FMAs per k for 2 vector loads and 12 broadcasts (BLIS's skx
 * shape).  Compiled with the AVX-512 flags of quant_avx512.c.
 */
#if defined(__x86_64__) || defined(__i386__)

#include "backend/cpu/gemm_avx512.h"
#include "backend/cpu/x86_transpose.h"

#include <immintrin.h>

#define HY_GEMM_A5_INLINE static inline __attribute__((always_inline))

/* k elements per panel block: the 12-token activation slice (kc*48 bytes)
 * stays in L1 while the 32-row weight slices (kc*128 bytes each) stream
 * from L2; a block of MC rows is MC*kc*4 = 384 KB, well inside a 2 MB L2. */
#ifndef HY_GEMM_A5_KC
#define HY_GEMM_A5_KC 384
#endif

_Static_assert(HY_GEMM_A5_MC % HY_GEMM_A5_MR == 0, "MC is a multiple of MR");
_Static_assert(HY_GEMM_A5_KC % 16 == 0, "KC is a multiple of 16");

size_t hy_gemm_a5_xpack_floats(int64_t k, int64_t n_tok)
{
    int64_t groups = (n_tok + HY_GEMM_A5_NR - 1) / HY_GEMM_A5_NR;
    return (size_t)groups * (size_t)k * HY_GEMM_A5_NR;
}

size_t hy_gemm_a5_wpack_floats(int64_t k)
{
    return (size_t)HY_GEMM_A5_MC * (size_t)HY_MIN(k + 16, (int64_t)HY_GEMM_A5_KC);
}

/* 16 elements of a weight row from element k, as floats (exact); tail:
 * only the lanes in m are read, the others are 0. */
HY_GEMM_A5_INLINE __m512 hy_gemm_a5_wload(hy_dtype_t type, const char *w, int64_t k,
                                          __mmask16 m, int tail)
{
    if (type == HY_DTYPE_F32)
        return tail ? _mm512_maskz_loadu_ps(m, (const float *)w + k)
                    : _mm512_loadu_ps((const float *)w + k);
    __m256i h = tail ? _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + k)
                     : _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k));
    if (type == HY_DTYPE_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Rows [0, rows) (rows <= 32) of w, elements [k0, k0+kc), as floats into
 * ap[k][32] (rows >= `rows` are 0): each 16 x 16 block is loaded a row at a
 * time, converted, and transposed in registers. */
HY_GEMM_A5_INLINE void hy_gemm_a5_pack_w_type(hy_dtype_t type, const char *w, size_t ws,
                                              int rows, int64_t k0, int64_t kc, float *ap)
{
    for (int h = 0; h < 2; h++) {
        for (int64_t kk = 0; kk < kc; kk += 16) {
            int n = (int)HY_MIN((int64_t)16, kc - kk);
            __mmask16 m = (__mmask16)((1u << n) - 1);
            __m512 r[16];
            for (int i = 0; i < 16; i++) {
                int row = h * 16 + i;
                if (row >= rows)
                    r[i] = _mm512_setzero_ps();
                else if (n == 16)
                    r[i] = hy_gemm_a5_wload(type, w + (size_t)row * ws, k0 + kk, m, 0);
                else
                    r[i] = hy_gemm_a5_wload(type, w + (size_t)row * ws, k0 + kk, m, 1);
            }
            hy_x86_transpose16_ps(r);
            for (int i = 0; i < n; i++)
                _mm512_store_ps(ap + (kk + i) * HY_GEMM_A5_MR + h * 16, r[i]);
        }
    }
}

static void hy_gemm_a5_pack_w(hy_dtype_t type, const char *w, size_t ws, int rows, int64_t k0,
                              int64_t kc, float *ap)
{
    if (type == HY_DTYPE_F16)
        hy_gemm_a5_pack_w_type(HY_DTYPE_F16, w, ws, rows, k0, kc, ap);
    else if (type == HY_DTYPE_BF16)
        hy_gemm_a5_pack_w_type(HY_DTYPE_BF16, w, ws, rows, k0, kc, ap);
    else
        hy_gemm_a5_pack_w_type(HY_DTYPE_F32, w, ws, rows, k0, kc, ap);
}

void hy_gemm_a5_pack_x(const float *x, size_t xs, int64_t k, int64_t n_tok, int64_t g0,
                       int64_t g1, float *xp)
{
    const __mmask16 m12 = (__mmask16)((1u << HY_GEMM_A5_NR) - 1);

    for (int64_t g = g0; g < g1; g++) {
        int64_t t0 = g * HY_GEMM_A5_NR;
        int nr = (int)HY_MIN((int64_t)HY_GEMM_A5_NR, n_tok - t0);
        float *bp = xp + (size_t)g * (size_t)k * HY_GEMM_A5_NR;
        for (int64_t kk = 0; kk < k; kk += 16) {
            int n = (int)HY_MIN((int64_t)16, k - kk);
            __mmask16 m = (__mmask16)((1u << n) - 1);
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < nr ? _mm512_maskz_loadu_ps(m, x + (size_t)(t0 + i) * xs + kk)
                              : _mm512_setzero_ps();
            hy_x86_transpose16_ps(r);
            /* 12 of the 16 lanes: the next k's store overwrites nothing */
            for (int i = 0; i < n; i++)
                _mm512_mask_storeu_ps(bp + (kk + i) * HY_GEMM_A5_NR, m12, r[i]);
        }
    }
}

/* c[j*cs + i] (+)= sum_k ap[k][i] * bp[k][j] for i < 32 (lanes in m0|m1),
 * j < NR: one FMA chain per output over k in order, continued from c
 * unless first. */
HY_GEMM_A5_INLINE void hy_gemm_a5_micro(int64_t kc, const float *ap, const float *bp, float *c,
                                        size_t cs, __mmask16 m0, __mmask16 m1, int first,
                                        const int NR)
{
    __m512 c0[HY_GEMM_A5_NR], c1[HY_GEMM_A5_NR];

#pragma GCC unroll 12
    for (int j = 0; j < NR; j++) {
        if (first) {
            c0[j] = _mm512_setzero_ps();
            c1[j] = _mm512_setzero_ps();
        } else {
            c0[j] = _mm512_maskz_loadu_ps(m0, c + (size_t)j * cs);
            c1[j] = _mm512_maskz_loadu_ps(m1, c + (size_t)j * cs + 16);
        }
    }
#pragma GCC unroll 2
    for (int64_t k = 0; k < kc; k++) {
        __m512 a0 = _mm512_load_ps(ap), a1 = _mm512_load_ps(ap + 16);
#pragma GCC unroll 12
        for (int j = 0; j < NR; j++) {
            __m512 b = _mm512_set1_ps(bp[j]);
            c0[j] = _mm512_fmadd_ps(a0, b, c0[j]);
            c1[j] = _mm512_fmadd_ps(a1, b, c1[j]);
        }
        ap += HY_GEMM_A5_MR;
        bp += HY_GEMM_A5_NR;
    }
#pragma GCC unroll 12
    for (int j = 0; j < NR; j++) {
        _mm512_mask_storeu_ps(c + (size_t)j * cs, m0, c0[j]);
        _mm512_mask_storeu_ps(c + (size_t)j * cs + 16, m1, c1[j]);
    }
}

#define HY_GEMM_A5_CASE(nr)                                                        \
    case nr:                                                                       \
        hy_gemm_a5_micro(kc, ap, bp, c, cs, m0, m1, first, nr);                    \
        break;
static void hy_gemm_a5_micro_n(int nr, int64_t kc, const float *ap, const float *bp, float *c,
                               size_t cs, __mmask16 m0, __mmask16 m1, int first)
{
    switch (nr) {
    HY_GEMM_A5_CASE(1) HY_GEMM_A5_CASE(2) HY_GEMM_A5_CASE(3) HY_GEMM_A5_CASE(4)
    HY_GEMM_A5_CASE(5) HY_GEMM_A5_CASE(6) HY_GEMM_A5_CASE(7) HY_GEMM_A5_CASE(8)
    HY_GEMM_A5_CASE(9) HY_GEMM_A5_CASE(10) HY_GEMM_A5_CASE(11) HY_GEMM_A5_CASE(12)
    }
}

void hy_gemm_a5_rows(hy_dtype_t type, const void *vw, size_t ws, int64_t k, int64_t r0,
                     int64_t r1, const float *xp, int64_t n_tok, float *y, size_t ys,
                     float *wpack)
{
    const char *w = (const char *)vw + (size_t)r0 * ws;
    const int64_t rows = r1 - r0;
    const int64_t n_mr = (rows + HY_GEMM_A5_MR - 1) / HY_GEMM_A5_MR;
    const int64_t n_g = (n_tok + HY_GEMM_A5_NR - 1) / HY_GEMM_A5_NR;
    /* equal k blocks of at most KC, multiples of 16 except the last */
    const int64_t n_kb = (k + HY_GEMM_A5_KC - 1) / HY_GEMM_A5_KC;
    const int64_t kcb = ((k + n_kb - 1) / n_kb + 15) & ~(int64_t)15;

    for (int64_t pc = 0; pc < k; pc += kcb) {
        int64_t kc = HY_MIN(kcb, k - pc);
        for (int64_t i = 0; i < n_mr; i++)
            hy_gemm_a5_pack_w(type, w + (size_t)(i * HY_GEMM_A5_MR) * ws, ws,
                              (int)HY_MIN((int64_t)HY_GEMM_A5_MR, rows - i * HY_GEMM_A5_MR),
                              pc, kc, wpack + i * kc * HY_GEMM_A5_MR);
        /* one 12-token slice of activations meets every 32-row slice of
         * the panel while it sits in L1 */
        for (int64_t g = 0; g < n_g; g++) {
            int nr = (int)HY_MIN((int64_t)HY_GEMM_A5_NR, n_tok - g * HY_GEMM_A5_NR);
            const float *bp = xp + (size_t)g * (size_t)k * HY_GEMM_A5_NR +
                              (size_t)pc * HY_GEMM_A5_NR;
            for (int64_t i = 0; i < n_mr; i++) {
                int64_t left = rows - i * HY_GEMM_A5_MR;
                /* the next block of outputs (12 rows of y, far apart) is
                 * fetched while this one computes: with many tokens y is
                 * beyond L2 and these would be 24+ misses in a row */
                int64_t ni = i + 1 < n_mr ? i + 1 : 0, ng = i + 1 < n_mr ? g : g + 1;
                if (ng < n_g) {
                    int ntr = (int)HY_MIN((int64_t)HY_GEMM_A5_NR, n_tok - ng * HY_GEMM_A5_NR);
                    int64_t nl = HY_MIN((int64_t)HY_GEMM_A5_MR, rows - ni * HY_GEMM_A5_MR);
                    const char *pc0 = (const char *)(y + (size_t)(ng * HY_GEMM_A5_NR) * ys +
                                                     r0 + ni * HY_GEMM_A5_MR);
                    for (int j = 0; j < ntr; j++) {
                        const char *p = pc0 + (size_t)j * ys * sizeof(float);
                        _mm_prefetch(p, _MM_HINT_T0);
                        _mm_prefetch(p + 64, _MM_HINT_T0);
                        _mm_prefetch(p + (nl * 4 - 4), _MM_HINT_T0);
                    }
                }
                __mmask16 m0 = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
                __mmask16 m1 = left >= 32 ? 0xFFFF
                               : left <= 16 ? 0
                                            : (__mmask16)((1u << (left - 16)) - 1);
                hy_gemm_a5_micro_n(nr, kc, wpack + i * kc * HY_GEMM_A5_MR, bp,
                                   y + (size_t)(g * HY_GEMM_A5_NR) * ys + r0 +
                                       i * HY_GEMM_A5_MR,
                                   ys, m0, m1, pc == 0);
            }
        }
    }
}

#endif
