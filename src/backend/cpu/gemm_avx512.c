/*
 * gemm_avx512.c - register-blocked SGEMM for float weights (F32/F16/BF16)
 * times float activations, the prefill hot loop.  Weights are converted to
 * f32 once per call into a transposed L2-resident panel ([k][32 rows]),
 * activations once into groups of 12 tokens ([k][12]); the micro-kernel
 * keeps a 32 rows x 12 tokens block of outputs in 24 zmm accumulators and
 * does 24 FMAs per k for 2 vector loads and 12 broadcasts (BLIS's skx
 * shape).  Few tokens skip the weight panel: weights the loader laid out
 * in 16-row groups (HY_WLAYOUT_ROWS16) up to 24 tokens with 16 rows in the
 * lanes (hy_gemm_a5_r16), others up to 12 with the tokens in the lanes
 * (hy_gemm_a5_few); the same FMA chains either way.  Compiled with the
 * AVX-512 flags of quant_avx512.c.
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

/* Bytes ahead in each weight row that the panel packing prefetches. */
#ifndef HY_GEMM_A5_PF
#define HY_GEMM_A5_PF 256
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

/* Element i of the 16 rows of a HY_WLAYOUT_ROWS16 group at g, as floats:
 * the group's 16 elements from i*16, read as one row's. */
HY_GEMM_A5_INLINE __m512 hy_gemm_a5_gload(hy_dtype_t type, const char *g, int64_t i)
{
    return hy_gemm_a5_wload(type, g, i * 16, 0xFFFF, 0);
}

/* Rows [0, rows) (rows <= 32) of w, elements [k0, k0+kc), as floats into
 * ap[k][32] (rows >= `rows` are 0): each 16 x 16 block is loaded a row at a
 * time, converted, and transposed in registers. */
HY_GEMM_A5_INLINE void hy_gemm_a5_pack_w_type(hy_dtype_t type, bool rows16, const char *w,
                                              size_t ws, int rows, int64_t k0, int64_t kc,
                                              float *ap)
{
    const size_t esz = type == HY_DTYPE_F32 ? 4 : 2;
    if (rows16) {
        /* each 16-row group already lies k-major: converted, not transposed */
        for (int h = 0; h < 2; h++) {
            const char *g = w + (size_t)(h * 16) * ws;
            for (int64_t kk = 0; kk < kc; kk++)
                _mm512_store_ps(ap + kk * HY_GEMM_A5_MR + h * 16,
                                h * 16 < rows ? hy_gemm_a5_gload(type, g, k0 + kk)
                                              : _mm512_setzero_ps());
        }
        return;
    }
    for (int h = 0; h < 2; h++) {
        for (int64_t kk = 0; kk < kc; kk += 16) {
            int n = (int)HY_MIN((int64_t)16, kc - kk);
            __mmask16 m = (__mmask16)((1u << n) - 1);
            __m512 r[16];
            for (int i = 0; i < 16; i++) {
                int row = h * 16 + i;
                /* 16 rows a few KB apart, read 32-64 bytes at a time: the
                 * hardware follows so many streams late, and decode-sized
                 * calls spent more time waiting on these loads than in
                 * the products (bench_gemm, 8 tokens) */
                if (row < rows)
                    _mm_prefetch(w + (size_t)row * ws + (size_t)(k0 + kk) * esz + HY_GEMM_A5_PF,
                                 _MM_HINT_T0);
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

static void hy_gemm_a5_pack_w(hy_dtype_t type, bool rows16, const char *w, size_t ws, int rows,
                              int64_t k0, int64_t kc, float *ap)
{
    if (type == HY_DTYPE_F16)
        hy_gemm_a5_pack_w_type(HY_DTYPE_F16, rows16, w, ws, rows, k0, kc, ap);
    else if (type == HY_DTYPE_BF16)
        hy_gemm_a5_pack_w_type(HY_DTYPE_BF16, rows16, w, ws, rows, k0, kc, ap);
    else
        hy_gemm_a5_pack_w_type(HY_DTYPE_F32, rows16, w, ws, rows, k0, kc, ap);
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

/* ---- few tokens: the weights as they lie, the tokens in the lanes ----
 *
 * With one token group (n_tok <= NR) a panel is packed for a few products
 * per weight: packing cost 2-3x the products at 8 tokens and made decode
 * wait on 16 row streams (bench_gemm).  Here FR rows go through 16 k at a
 * time: each row's 16 weights converted into buf, then per k one vector of
 * the packed group (xp[k][NR]: token t in lane t) times each row's weight,
 * broadcast.  acc[r] lane t is output (row r, token t): the micro-kernel's
 * FMA chain over k in order, w * x + c, from zero, so the same bits. */
#define HY_GEMM_A5_FR 16

HY_GEMM_A5_INLINE void hy_gemm_a5_few_wbuf(hy_dtype_t type, const char *const rp[HY_GEMM_A5_FR],
                                           int64_t k0, int n, float *buf)
{
    const size_t esz = type == HY_DTYPE_F32 ? 4 : 2;
    const __mmask16 m = (__mmask16)((1u << n) - 1);

#pragma GCC unroll 16
    for (int r = 0; r < HY_GEMM_A5_FR; r++) {
        _mm_prefetch(rp[r] + (size_t)k0 * esz + HY_GEMM_A5_PF, _MM_HINT_T0);
        _mm512_store_ps(buf + 16 * r, hy_gemm_a5_wload(type, rp[r], k0, m, n < 16));
    }
}

/* rows (<= FR) rows of w from row 0 against the nr (<= V) tokens of the
 * packed group xp: y[t*ys + r].  VT: V lanes of float (ymm for up to 8
 * tokens: two FMAs a cycle on Zen 4, as many products as one zmm). */
#define HY_GEMM_A5_FEW(name, VT, V, LOADX, FMA, ZERO, STORE)                       \
    HY_GEMM_A5_INLINE void name(hy_dtype_t type, const char *w, size_t ws, int rows, \
                                int64_t k, const float *xp, int nr, float *y, size_t ys) \
    {                                                                              \
        const char *rp[HY_GEMM_A5_FR];                                             \
        float buf[HY_GEMM_A5_FR * 16] __attribute__((aligned(64)));                \
        VT acc[HY_GEMM_A5_FR];                                                     \
        _Pragma("GCC unroll 16") for (int r = 0; r < HY_GEMM_A5_FR; r++) {         \
            rp[r] = w + (size_t)HY_MIN(r, rows - 1) * ws;                          \
            acc[r] = ZERO();                                                       \
        }                                                                          \
        for (int64_t k0 = 0; k0 < k; k0 += 16) {                                   \
            const int n = (int)HY_MIN((int64_t)16, k - k0);                        \
            const float *xk = xp + (size_t)k0 * HY_GEMM_A5_NR;                     \
            hy_gemm_a5_few_wbuf(type, rp, k0, n, buf);                             \
            /* one unrolled body for the tail too */                               \
            _Pragma("GCC unroll 16") for (int kk = 0; kk < 16; kk++) {             \
                if (kk >= n)                                                       \
                    break;                                                         \
                const VT xv = LOADX(xk + kk * HY_GEMM_A5_NR);                      \
                _Pragma("GCC unroll 16") for (int r = 0; r < HY_GEMM_A5_FR; r++)   \
                    acc[r] = FMA(buf + 16 * r + kk, xv, acc[r]);                   \
            }                                                                      \
        }                                                                          \
        float out[HY_GEMM_A5_FR][V] __attribute__((aligned(64)));                  \
        /* unrolled: a sum indexed at run time would live in memory */             \
        _Pragma("GCC unroll 16") for (int r = 0; r < HY_GEMM_A5_FR; r++)           \
            STORE(out[r], acc[r]);                                                 \
        for (int t = 0; t < nr; t++)                                               \
            for (int r = 0; r < rows; r++)                                         \
                y[(size_t)t * ys + (size_t)r] = out[r][t];                         \
    }

/* acc + x * (*w broadcast): the weight read by the FMA itself ({1toN}),
 * where GCC would keep buf in registers and broadcast each lane with a
 * permute (and spill the sums to make room) */
HY_GEMM_A5_INLINE __m256 hy_gemm_a5_fma8(const float *w, __m256 x, __m256 acc)
{
    __asm__("vfmadd231ps %2%{1to8%}, %1, %0" : "+v"(acc) : "v"(x), "m"(*w));
    return acc;
}

HY_GEMM_A5_INLINE __m512 hy_gemm_a5_fma16(const float *w, __m512 x, __m512 acc)
{
    __asm__("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(x), "m"(*w));
    return acc;
}

#define HY_GEMM_A5_X8(p) _mm256_loadu_ps(p)
#define HY_GEMM_A5_X16(p) _mm512_maskz_loadu_ps((__mmask16)((1u << HY_GEMM_A5_NR) - 1), p)
HY_GEMM_A5_FEW(hy_gemm_a5_few8, __m256, 8, HY_GEMM_A5_X8, hy_gemm_a5_fma8, _mm256_setzero_ps,
               _mm256_store_ps)
HY_GEMM_A5_FEW(hy_gemm_a5_few12, __m512, 16, HY_GEMM_A5_X16, hy_gemm_a5_fma16, _mm512_setzero_ps,
               _mm512_store_ps)

static void hy_gemm_a5_few(hy_dtype_t type, const char *w, size_t ws, int64_t rows, int64_t k,
                           const float *xp, int nr, float *y, size_t ys)
{
    for (int64_t r = 0; r < rows; r += HY_GEMM_A5_FR) {
        const int n = (int)HY_MIN((int64_t)HY_GEMM_A5_FR, rows - r);
        if (nr <= 8)
            hy_gemm_a5_few8(type, w + (size_t)r * ws, ws, n, k, xp, nr, y + r, ys);
        else
            hy_gemm_a5_few12(type, w + (size_t)r * ws, ws, n, k, xp, nr, y + r, ys);
    }
}

/* Bytes ahead in each 16-row group's stream that the few-token kernel
 * prefetches: G streams at once are more than the L2 streamer follows
 * well, and it stops at every 4 KB page.  Gemma 3 F16 decode from DRAM,
 * 2 threads: 45-49 tok/s without, 52-57 with 2048 (1024 and 4096 within
 * the noise of it); L3-resident shapes unchanged (bench_gemm). */
#ifndef HY_GEMM_A5_R16_PF
#define HY_GEMM_A5_R16_PF 2048
#endif

/* Tokens up to which HY_WLAYOUT_ROWS16 weights skip the panel: one sum
 * per token and a weight vector in 32 registers (two packed groups). */
#define HY_GEMM_A5_R16_TOK 24

/* ---- few tokens, HY_WLAYOUT_ROWS16: 16 rows in the lanes ----
 *
 * One load (and conversion) gives element i of a group's 16 rows; one FMA
 * per token adds its products to 16 outputs, where the file's layout needs
 * an FMA per row and token.  Lane j of acc[g*B + t] is output (row 16g+j,
 * token t): the micro-kernel's chain w * x + c over k in order from zero,
 * so the same bits.  G groups at a time keep G*B chains in flight (an
 * FMA's latency is 4 cycles, two issue a cycle); each group is one
 * sequential stream of 32 (F16/BF16) or 64 bytes per k. */
HY_GEMM_A5_INLINE void hy_gemm_a5_g16(hy_dtype_t type, const char *w, size_t gs, int64_t k,
                                      const float *xp, float *y, size_t ys, const int G,
                                      const int B)
{
    __m512 acc[HY_GEMM_A5_R16_TOK];

#pragma GCC unroll 24
    for (int a = 0; a < G * B; a++)
        acc[a] = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i++) {
        __m512 wv[8];
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
#if HY_GEMM_A5_R16_PF > 0
            /* once a 64-byte line: every k for F32, every other for 16-bit */
            if ((i & (type == HY_DTYPE_F32 ? 0 : 1)) == 0)
                _mm_prefetch(w + (size_t)g * gs + (size_t)i * 16 * (type == HY_DTYPE_F32 ? 4 : 2) +
                                 HY_GEMM_A5_R16_PF,
                             _MM_HINT_T0);
#endif
            wv[g] = hy_gemm_a5_gload(type, w + (size_t)g * gs, i);
        }
#pragma GCC unroll 24
        for (int t = 0; t < B; t++) {
            /* token t in packed group t / NR */
            const __m512 xb = _mm512_set1_ps(xp[(size_t)(t / HY_GEMM_A5_NR) * (size_t)k *
                                                    HY_GEMM_A5_NR +
                                                i * HY_GEMM_A5_NR + t % HY_GEMM_A5_NR]);
#pragma GCC unroll 8
            for (int g = 0; g < G; g++)
                acc[g * B + t] = _mm512_fmadd_ps(wv[g], xb, acc[g * B + t]);
        }
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; g++)
#pragma GCC unroll 24
        for (int t = 0; t < B; t++)
            _mm512_storeu_ps(y + (size_t)t * ys + (size_t)g * 16, acc[g * B + t]);
}

/* Groups per pass for B tokens: G*B sums and G weight vectors in 32
 * registers, at least 8 chains where B allows; from 13 tokens one group. */
#define HY_GEMM_A5_G16_CASE(B, G)                                                   \
    case B:                                                                         \
        for (; g + G <= ng; g += G)                                                 \
            hy_gemm_a5_g16(type, w + (size_t)g * gs, gs, k, xp, y + g * 16, ys, G, B); \
        for (; g < ng; g++)                                                         \
            hy_gemm_a5_g16(type, w + (size_t)g * gs, gs, k, xp, y + g * 16, ys, 1, B); \
        break;

HY_GEMM_A5_INLINE void hy_gemm_a5_r16_type(hy_dtype_t type, const char *w, size_t ws,
                                           int64_t rows, int64_t k, const float *xp, int nr,
                                           float *y, size_t ys)
{
    const size_t gs = 16 * ws;
    const int64_t ng = rows / 16;
    int64_t g = 0;

    switch (nr) {
    HY_GEMM_A5_G16_CASE(1, 8) HY_GEMM_A5_G16_CASE(2, 6) HY_GEMM_A5_G16_CASE(3, 4)
    HY_GEMM_A5_G16_CASE(4, 4) HY_GEMM_A5_G16_CASE(5, 3) HY_GEMM_A5_G16_CASE(6, 3)
    HY_GEMM_A5_G16_CASE(7, 2) HY_GEMM_A5_G16_CASE(8, 2) HY_GEMM_A5_G16_CASE(9, 2)
    HY_GEMM_A5_G16_CASE(10, 2) HY_GEMM_A5_G16_CASE(11, 2) HY_GEMM_A5_G16_CASE(12, 2)
    HY_GEMM_A5_G16_CASE(13, 1) HY_GEMM_A5_G16_CASE(14, 1) HY_GEMM_A5_G16_CASE(15, 1)
    HY_GEMM_A5_G16_CASE(16, 1) HY_GEMM_A5_G16_CASE(17, 1) HY_GEMM_A5_G16_CASE(18, 1)
    HY_GEMM_A5_G16_CASE(19, 1) HY_GEMM_A5_G16_CASE(20, 1) HY_GEMM_A5_G16_CASE(21, 1)
    HY_GEMM_A5_G16_CASE(22, 1) HY_GEMM_A5_G16_CASE(23, 1) HY_GEMM_A5_G16_CASE(24, 1)
    }
}

static void hy_gemm_a5_r16(hy_dtype_t type, const char *w, size_t ws, int64_t rows, int64_t k,
                           const float *xp, int nr, float *y, size_t ys)
{
    if (type == HY_DTYPE_F16)
        hy_gemm_a5_r16_type(HY_DTYPE_F16, w, ws, rows, k, xp, nr, y, ys);
    else if (type == HY_DTYPE_BF16)
        hy_gemm_a5_r16_type(HY_DTYPE_BF16, w, ws, rows, k, xp, nr, y, ys);
    else
        hy_gemm_a5_r16_type(HY_DTYPE_F32, w, ws, rows, k, xp, nr, y, ys);
}

void hy_gemm_a5_rows(hy_dtype_t type, bool rows16, const void *vw, size_t ws, int64_t k,
                     int64_t r0, int64_t r1, const float *xp, int64_t n_tok, float *y,
                     size_t ys, float *wpack)
{
    const char *w = (const char *)vw + (size_t)r0 * ws;
    const int64_t rows = r1 - r0;

    if (rows16 && n_tok <= HY_GEMM_A5_R16_TOK) {
        hy_gemm_a5_r16(type, w, ws, rows, k, xp, (int)n_tok, y + r0, ys);
        return;
    }
    if (n_tok <= HY_GEMM_A5_NR) {
        hy_gemm_a5_few(type, w, ws, rows, k, xp, (int)n_tok, y + r0, ys);
        return;
    }
    const int64_t n_mr = (rows + HY_GEMM_A5_MR - 1) / HY_GEMM_A5_MR;
    const int64_t n_g = (n_tok + HY_GEMM_A5_NR - 1) / HY_GEMM_A5_NR;
    /* equal k blocks of at most KC, multiples of 16 except the last */
    const int64_t n_kb = (k + HY_GEMM_A5_KC - 1) / HY_GEMM_A5_KC;
    const int64_t kcb = ((k + n_kb - 1) / n_kb + 15) & ~(int64_t)15;

    for (int64_t pc = 0; pc < k; pc += kcb) {
        int64_t kc = HY_MIN(kcb, k - pc);
        for (int64_t i = 0; i < n_mr; i++)
            hy_gemm_a5_pack_w(type, rows16, w + (size_t)(i * HY_GEMM_A5_MR) * ws, ws,
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
