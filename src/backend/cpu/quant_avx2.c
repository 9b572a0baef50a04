/*
 * quant_avx2.c - AVX2+FMA+F16C kernels, compiled only with those flags (own
 * convenience library) so the rest of libhy stays baseline x86-64, and the
 * AVX2 level's kernel table.  The quantized types take qmm_avx2.c's kernels
 * over Q16 activations (qmm.h); this file holds the register-blocked
 * Q4_0/Q4_1/Q8_0 tiles over ggml's Q8_0/Q8_1 (hy_quant_traits_q8: 2 weight
 * rows x 2 activation rows, two blocks per step; vec_dot is their 1x1
 * instance), quant_x86.h's K-quant dots for the same, and F32/F16/BF16's
 * register-blocked SGEMM tile (4 weight rows x 3 token rows, half-precision
 * rows converted once per tile into an L1 panel).
 */
#if defined(__x86_64__) || defined(__i386__)

#include "qmm.h"
#include "quant_x86.h"

enum { HY_A2_Q4_0, HY_A2_Q4_1, HY_A2_Q8_0 };

/* Weight block ib of the row at w, as the unsigned or signed bytes that the
 * integer dot consumes, plus its scale (and Q4_1 offset). */
HY_QX_INLINE __m256i hy_a2_wload(int kind, const char *w, int64_t ib, float *d, float *m)
{
    if (kind == HY_A2_Q4_0) {
        const hy_block_q4_0_t *b = (const hy_block_q4_0_t *)w + ib;
        *d = hy_qx_h2f(b->d);
        return hy_qx_nibbles(b->qs);
    }
    if (kind == HY_A2_Q4_1) {
        const hy_block_q4_1_t *b = (const hy_block_q4_1_t *)w + ib;
        *d = hy_qx_h2f(b->d);
        *m = hy_qx_h2f(b->m);
        return hy_qx_nibbles(b->qs);
    }
    const hy_block_q8_0_t *b = (const hy_block_q8_0_t *)w + ib;
    *d = hy_qx_h2f(b->d);
    return _mm256_loadu_si256((const __m256i *)b->qs);
}

HY_QX_INLINE __m256i hy_a2_xload(int kind, const char *x, int64_t ib, float *d, float *s)
{
    if (kind == HY_A2_Q4_1) {
        const hy_block_q8_1_t *b = (const hy_block_q8_1_t *)x + ib;
        *d = hy_qx_h2f(b->d);
        *s = hy_qx_h2f(b->s);
        return _mm256_loadu_si256((const __m256i *)b->qs);
    }
    const hy_block_q8_0_t *b = (const hy_block_q8_0_t *)x + ib;
    *d = hy_qx_h2f(b->d);
    return _mm256_loadu_si256((const __m256i *)b->qs);
}

/* Integer dot of one weight block with one activation block, as 8 floats.
 * corr = 8*sum(x) in groups of 4 (Q4_0 only: its q is stored +8). */
HY_QX_INLINE __m256 hy_a2_bdot(int kind, __m256i wq, __m256i xq, __m256i corr)
{
    __m256i p;
    if (kind == HY_A2_Q8_0)
        p = hy_qx_mul_sum_us8(_mm256_abs_epi8(wq), _mm256_sign_epi8(xq, wq));
    else
        p = hy_qx_mul_sum_us8(wq, xq);
    if (kind == HY_A2_Q4_0)
        p = _mm256_sub_epi32(p, corr);
    return _mm256_cvtepi32_ps(p);
}

HY_QX_INLINE void hy_a2_tile_kernel(int kind, int64_t nb, float *s, size_t ss,
                                    const char *w, size_t ws, const char *x,
                                    size_t xs, const int RW, const int RX)
{
    __m256 acc[2][2];
    __m128 msum[2];
    const __m256i eight = _mm256_set1_epi8(8);
    int64_t ib = 0;

#pragma GCC unroll 2
    for (int c = 0; c < RX; c++) {
        msum[c] = _mm_setzero_ps();
#pragma GCC unroll 2
        for (int r = 0; r < RW; r++)
            acc[r][c] = _mm256_setzero_ps();
    }
    /* two blocks per step, folded before touching the accumulator, to halve
     * the FMA latency chain in the 1x1 case */
    for (; ib + 2 <= nb; ib += 2) {
        __m256i wq[2][2];
        float dw[2][2], mw[2][4] = {{0}};
#pragma GCC unroll 2
        for (int r = 0; r < RW; r++) {
            wq[r][0] = hy_a2_wload(kind, w + r * ws, ib, &dw[r][0], &mw[0][r]);
            wq[r][1] = hy_a2_wload(kind, w + r * ws, ib + 1, &dw[r][1], &mw[1][r]);
        }
#pragma GCC unroll 2
        for (int c = 0; c < RX; c++) {
            float dx0, dx1, sx0 = 0, sx1 = 0;
            __m256i x0 = hy_a2_xload(kind, x + c * xs, ib, &dx0, &sx0);
            __m256i x1 = hy_a2_xload(kind, x + c * xs, ib + 1, &dx1, &sx1);
            __m256i c0 = _mm256_setzero_si256(), c1 = c0;
            if (kind == HY_A2_Q4_0) {
                c0 = hy_qx_mul_sum_us8(eight, x0);
                c1 = hy_qx_mul_sum_us8(eight, x1);
            }
            if (kind == HY_A2_Q4_1) {
                __m128 t = _mm_fmadd_ps(hy_qx_vec4(mw[0], RW), _mm_set1_ps(sx0),
                                        _mm_mul_ps(hy_qx_vec4(mw[1], RW), _mm_set1_ps(sx1)));
                msum[c] = _mm_add_ps(msum[c], t);
            }
#pragma GCC unroll 2
            for (int r = 0; r < RW; r++) {
                __m256 p0 = hy_a2_bdot(kind, wq[r][0], x0, c0);
                __m256 p1 = hy_a2_bdot(kind, wq[r][1], x1, c1);
                __m256 t = _mm256_fmadd_ps(p0, _mm256_set1_ps(dw[r][0] * dx0),
                                           _mm256_mul_ps(p1, _mm256_set1_ps(dw[r][1] * dx1)));
                acc[r][c] = _mm256_add_ps(acc[r][c], t);
            }
        }
    }
    if (ib < nb) {
        __m256i wq[2];
        float dw[2], mw[4] = {0};
#pragma GCC unroll 2
        for (int r = 0; r < RW; r++)
            wq[r] = hy_a2_wload(kind, w + r * ws, ib, &dw[r], &mw[r]);
#pragma GCC unroll 2
        for (int c = 0; c < RX; c++) {
            float dx0, sx0 = 0;
            __m256i x0 = hy_a2_xload(kind, x + c * xs, ib, &dx0, &sx0);
            __m256i c0 = _mm256_setzero_si256();
            if (kind == HY_A2_Q4_0)
                c0 = hy_qx_mul_sum_us8(eight, x0);
            if (kind == HY_A2_Q4_1)
                msum[c] = _mm_fmadd_ps(hy_qx_vec4(mw, RW), _mm_set1_ps(sx0), msum[c]);
#pragma GCC unroll 2
            for (int r = 0; r < RW; r++)
                acc[r][c] = _mm256_fmadd_ps(hy_a2_bdot(kind, wq[r], x0, c0),
                                            _mm256_set1_ps(dw[r] * dx0), acc[r][c]);
        }
    }
#pragma GCC unroll 2
    for (int c = 0; c < RX; c++) {
        float mm[4];
        _mm_storeu_ps(mm, msum[c]);
#pragma GCC unroll 2
        for (int r = 0; r < RW; r++)
            s[c * ss + r] = hy_qx_hsum8(acc[r][c]) + (kind == HY_A2_Q4_1 ? mm[r] : 0.0f);
    }
}

/* Walks the nw x nx grid in 2x2 tiles, weight rows outermost so a tile's
 * weights stay in cache while all activation rows pass. */
HY_QX_INLINE void hy_a2_tile(int kind, int64_t n, float *s, size_t ss, const void *w,
                             size_t ws, int nw, const void *x, size_t xs, int nx)
{
    int64_t nb = n / 32;
    for (int r0 = 0; r0 < nw; r0 += 2) {
        for (int c0 = 0; c0 < nx; c0 += 2) {
            float *sp = s + (size_t)c0 * ss + r0;
            const char *wp = (const char *)w + (size_t)r0 * ws;
            const char *xp = (const char *)x + (size_t)c0 * xs;
            int rw = HY_MIN(2, nw - r0), rx = HY_MIN(2, nx - c0);
            if (rw == 2 && rx == 2)
                hy_a2_tile_kernel(kind, nb, sp, ss, wp, ws, xp, xs, 2, 2);
            else if (rw == 2)
                hy_a2_tile_kernel(kind, nb, sp, ss, wp, ws, xp, xs, 2, 1);
            else if (rx == 2)
                hy_a2_tile_kernel(kind, nb, sp, ss, wp, ws, xp, xs, 1, 2);
            else
                hy_a2_tile_kernel(kind, nb, sp, ss, wp, ws, xp, xs, 1, 1);
        }
    }
}

#define HY_A2_KERNELS(name, kind)                                                  \
    static void hy_a2_tile_##name(int64_t n, float *s, size_t ss, const void *w,  \
                                  size_t ws, int nw, const void *x, size_t xs,    \
                                  int nx)                                          \
    {                                                                              \
        hy_a2_tile(kind, n, s, ss, w, ws, nw, x, xs, nx);                          \
    }                                                                              \
    static void hy_a2_dot_##name(int64_t n, float *s, const void *w, const void *x) \
    {                                                                              \
        hy_a2_tile_kernel(kind, n / 32, s, 0, w, 0, x, 0, 1, 1);                   \
    }
HY_A2_KERNELS(q4_0, HY_A2_Q4_0)
HY_A2_KERNELS(q4_1, HY_A2_Q4_1)
HY_A2_KERNELS(q8_0, HY_A2_Q8_0)

/* ---- float weights (F32/F16/BF16): register-blocked SGEMM tiles ----
 * Every (weight row, token row) pair owns one 8-lane accumulator that sums
 * w*x over k in order, 8 elements a step (a zero-padded step for the tail),
 * reduced by hy_qx_hsum8 at the end.  That order does not depend on the
 * tile's shape, so a token row gives the same bits alone or in any batch,
 * and vec_dot is the 1x1 tile.  With few token rows the half-precision
 * weights are converted in registers (decode streams them once); with more,
 * 4 weight rows are converted exactly into a float panel on the stack once
 * per chunk and meet every token row from L1.  4 x 3 tiles: 12
 * accumulators + 4 weight vectors fill the 16 ymm registers. */
enum { HY_A2F_F32, HY_A2F_F16, HY_A2F_BF16 };
#define HY_A2F_KC 512
#define HY_A2F_CT 64
#define HY_A2F_RX 3
#define HY_A2F_PANEL_MIN 8 /* token rows from which the panel pays (F16 at 3..7: 25%
                               * slower than converting in registers, bench_mm) */

/* lanes [0, m) of a float row; the rest zero (maskload never touches
 * memory of masked-off lanes) */
HY_QX_INLINE __m256 hy_a2f_xload_tail(const float *p, int m)
{
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(m), idx));
}

HY_QX_INLINE __m256 hy_a2f_wload(int kind, const char *w, int64_t k, int m)
{
    if (kind == HY_A2F_F32)
        return m ? hy_a2f_xload_tail((const float *)w + k, m) : _mm256_loadu_ps((const float *)w + k);
    uint16_t tmp[8] = {0};
    const uint16_t *p = (const uint16_t *)w + k;
    if (m) {
        memcpy(tmp, p, (size_t)m * sizeof(uint16_t));
        p = tmp;
    }
    return kind == HY_A2F_F16 ? hy_qx_load_f16(p) : hy_qx_load_bf16(p);
}

/* acc[c*4 + r] += rows r < RW of w (stride ws bytes) . rows c < RX of x
 * (stride xs bytes) over len elements, in 8-element steps. */
HY_QX_INLINE void hy_a2f_micro(int kind, int64_t len, const char *w, size_t ws,
                               const char *x, size_t xs, __m256 *acc, const int RW,
                               const int RX)
{
    __m256 a[4][HY_A2F_RX];
    int64_t k = 0;

#pragma GCC unroll 3
    for (int c = 0; c < RX; c++)
#pragma GCC unroll 4
        for (int r = 0; r < RW; r++)
            a[r][c] = acc[c * 4 + r];
    for (; k + 8 <= len; k += 8) {
        __m256 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < RW; r++)
            wv[r] = hy_a2f_wload(kind, w + r * ws, k, 0);
#pragma GCC unroll 3
        for (int c = 0; c < RX; c++) {
            __m256 xv = _mm256_loadu_ps((const float *)(x + c * xs) + k);
#pragma GCC unroll 4
            for (int r = 0; r < RW; r++)
                a[r][c] = _mm256_fmadd_ps(wv[r], xv, a[r][c]);
        }
    }
    if (k < len) {
        /* zero lanes add exact zeros: the tail is one more ordinary step */
        int m = (int)(len - k);
        __m256 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < RW; r++)
            wv[r] = hy_a2f_wload(kind, w + r * ws, k, m);
#pragma GCC unroll 3
        for (int c = 0; c < RX; c++) {
            __m256 xv = hy_a2f_xload_tail((const float *)(x + c * xs) + k, m);
#pragma GCC unroll 4
            for (int r = 0; r < RW; r++)
                a[r][c] = _mm256_fmadd_ps(wv[r], xv, a[r][c]);
        }
    }
#pragma GCC unroll 3
    for (int c = 0; c < RX; c++)
#pragma GCC unroll 4
        for (int r = 0; r < RW; r++)
            acc[c * 4 + r] = a[r][c];
}

#define HY_A2F_CASE(kind, rw, rx)                                                  \
    case (rw) * 8 + (rx):                                                          \
        hy_a2f_micro(kind, len, w, ws, x, xs, acc, rw, rx);                        \
        break;
#define HY_A2F_RUN(name, kind)                                                     \
    static void hy_a2f_run_##name(int64_t len, const char *w, size_t ws,          \
                                  const char *x, size_t xs, __m256 *acc, int rw,  \
                                  int rx)                                          \
    {                                                                              \
        switch (rw * 8 + rx) {                                                     \
        HY_A2F_CASE(kind, 1, 1) HY_A2F_CASE(kind, 1, 2) HY_A2F_CASE(kind, 1, 3)    \
        HY_A2F_CASE(kind, 2, 1) HY_A2F_CASE(kind, 2, 2) HY_A2F_CASE(kind, 2, 3)    \
        HY_A2F_CASE(kind, 3, 1) HY_A2F_CASE(kind, 3, 2) HY_A2F_CASE(kind, 3, 3)    \
        HY_A2F_CASE(kind, 4, 1) HY_A2F_CASE(kind, 4, 2) HY_A2F_CASE(kind, 4, 3)    \
        }                                                                          \
    }
HY_A2F_RUN(f32, HY_A2F_F32)
HY_A2F_RUN(f16, HY_A2F_F16)
HY_A2F_RUN(bf16, HY_A2F_BF16)

HY_QX_INLINE void hy_a2f_tile(int kind, int64_t n, float *s, size_t ss, const void *vw,
                              size_t ws, int nw, const void *vx, size_t xs, int nx)
{
    const char *w = vw, *x = vx;
    const size_t esz = kind == HY_A2F_F32 ? sizeof(float) : sizeof(uint16_t);
    const int panel = kind != HY_A2F_F32 && nx >= HY_A2F_PANEL_MIN;
    float buf[4 * HY_A2F_KC] __attribute__((aligned(32)));
    __m256 acc[HY_A2F_CT * 4];

    for (int r0 = 0; r0 < nw; r0 += 4) {
        int rw = HY_MIN(4, nw - r0);
        for (int c0 = 0; c0 < nx; c0 += HY_A2F_CT) {
            int ct = HY_MIN(HY_A2F_CT, nx - c0);
            for (int i = 0; i < ct * 4; i++)
                acc[i] = _mm256_setzero_ps();
            for (int64_t k0 = 0; k0 < n; k0 += HY_A2F_KC) {
                int64_t len = HY_MIN((int64_t)HY_A2F_KC, n - k0);
                const char *wp = w + (size_t)r0 * ws + (size_t)k0 * esz;
                size_t wps = ws;
                if (panel) {
                    /* exact conversion; the zero-padded tail is never read
                     * past len by the micro-kernel */
                    for (int r = 0; r < rw; r++)
                        (kind == HY_A2F_F16 ? hy_qx_to_float_f16 : hy_qx_to_float_bf16)(
                            wp + r * ws, buf + r * HY_A2F_KC, len);
                    wp = (const char *)buf;
                    wps = HY_A2F_KC * sizeof(float);
                }
                for (int cc = 0; cc < ct; cc += HY_A2F_RX) {
                    int rx = HY_MIN(HY_A2F_RX, ct - cc);
                    const char *xp = x + (size_t)(c0 + cc) * xs + (size_t)k0 * sizeof(float);
                    if (panel || kind == HY_A2F_F32)
                        hy_a2f_run_f32(len, wp, wps, xp, xs, acc + cc * 4, rw, rx);
                    else if (kind == HY_A2F_F16)
                        hy_a2f_run_f16(len, wp, wps, xp, xs, acc + cc * 4, rw, rx);
                    else
                        hy_a2f_run_bf16(len, wp, wps, xp, xs, acc + cc * 4, rw, rx);
                }
            }
            for (int c = 0; c < ct; c++)
                for (int r = 0; r < rw; r++)
                    s[(size_t)(c0 + c) * ss + (size_t)(r0 + r)] = hy_qx_hsum8(acc[c * 4 + r]);
        }
    }
}

#define HY_A2F_KERNELS(name, kind)                                                 \
    static void hy_a2_tile_##name(int64_t n, float *s, size_t ss, const void *w,  \
                                  size_t ws, int nw, const void *x, size_t xs,    \
                                  int nx)                                          \
    {                                                                              \
        hy_a2f_tile(kind, n, s, ss, w, ws, nw, x, xs, nx);                         \
    }                                                                              \
    static void hy_a2_dot_##name(int64_t n, float *s, const void *w, const void *x) \
    {                                                                              \
        hy_a2f_tile(kind, n, s, 0, w, 0, 1, x, 0, 1);                              \
    }
HY_A2F_KERNELS(f32, HY_A2F_F32)
HY_A2F_KERNELS(f16, HY_A2F_F16)
HY_A2F_KERNELS(bf16, HY_A2F_BF16)

#define HY_A2_GENERIC_TILE(name)                                                   \
    static void hy_a2_tile_##name(int64_t n, float *s, size_t ss, const void *w,  \
                                  size_t ws, int nw, const void *x, size_t xs,    \
                                  int nx)                                          \
    {                                                                              \
        hy_quant_tile_generic(hy_qx_dot_##name, n, s, ss, w, ws, nw, x, xs, nx);   \
    }
HY_A2_GENERIC_TILE(q4_k)
HY_A2_GENERIC_TILE(q5_k)
HY_A2_GENERIC_TILE(q6_k)

const hy_quant_kernels_t hy_quant_avx2_kernels[HY_DTYPE_COUNT] = {
    [HY_DTYPE_F32] = {{HY_DTYPE_F32, hy_quant_ref_from_float_copy, hy_a2_dot_f32,
                       hy_quant_ref_to_float_f32},
                      hy_a2_tile_f32},
    [HY_DTYPE_F16] = {{HY_DTYPE_F32, hy_quant_ref_from_float_copy, hy_a2_dot_f16,
                       hy_qx_to_float_f16}, hy_a2_tile_f16},
    [HY_DTYPE_BF16] = {{HY_DTYPE_F32, hy_quant_ref_from_float_copy, hy_a2_dot_bf16,
                        hy_qx_to_float_bf16}, hy_a2_tile_bf16},
    /* quantized types: qmm_avx2.c's kernels over Q16 (vec_dot is the
     * portable contract, which the tiles reproduce bit for bit) */
    [HY_DTYPE_Q4_0] = HY_QMM_ENTRY_AVX2(q4_0, hy_qx_to_float_q4_0),
    [HY_DTYPE_Q4_1] = HY_QMM_ENTRY_AVX2(q4_1, hy_qx_to_float_q4_1),
    [HY_DTYPE_Q8_0] = HY_QMM_ENTRY_AVX2(q8_0, hy_qx_to_float_q8_0),
    HY_QMM_ENTRIES_AVX2,
};
/* The single-level partners (hy_quant_traits_q8): ggml's, and Q5_0's Q8_S */
const hy_quant_kernels_t hy_quant_avx2_kernels_q8[HY_DTYPE_COUNT] = {
    [HY_DTYPE_Q5_0] = {{HY_DTYPE_Q8_S, hy_qx_from_float_q8_s, hy_quant_ref_dot_q5_0_q8s,
                        hy_quant_ref_to_float_q5_0}, hy_quant_ref_tile_q5_0_q8s},
    [HY_DTYPE_Q4_0] = {{HY_DTYPE_Q8_0, hy_qx_from_float_q8_0, hy_a2_dot_q4_0,
                        hy_qx_to_float_q4_0}, hy_a2_tile_q4_0},
    [HY_DTYPE_Q4_1] = {{HY_DTYPE_Q8_1, hy_qx_from_float_q8_1, hy_a2_dot_q4_1,
                        hy_qx_to_float_q4_1}, hy_a2_tile_q4_1},
    [HY_DTYPE_Q8_0] = {{HY_DTYPE_Q8_0, hy_qx_from_float_q8_0, hy_a2_dot_q8_0,
                        hy_qx_to_float_q8_0}, hy_a2_tile_q8_0},
    [HY_DTYPE_Q4_K] = {{HY_DTYPE_Q8_K, hy_qx_from_float_q8_k, hy_qx_dot_q4_k,
                        hy_quant_ref_to_float_q4_k}, hy_a2_tile_q4_k},
    [HY_DTYPE_Q5_K] = {{HY_DTYPE_Q8_K, hy_qx_from_float_q8_k, hy_qx_dot_q5_k,
                        hy_quant_ref_to_float_q5_k}, hy_a2_tile_q5_k},
    [HY_DTYPE_Q6_K] = {{HY_DTYPE_Q8_K, hy_qx_from_float_q8_k, hy_qx_dot_q6_k,
                        hy_quant_ref_to_float_q6_k}, hy_a2_tile_q6_k},
};

#endif
