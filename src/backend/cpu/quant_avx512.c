/*
 * quant_avx512.c - AVX-512 (F/BW/VL/DQ + VNNI) kernels, compiled with those
 * flags in their own convenience library.  Q4_1 over the two-level Q8_2L
 * activations (SmolLM2's weights) puts 16 weight rows across the lanes
 * (hy_a5t_*: one exact int32 sum per block and row, VNNI dpbusd, two per
 * block for the two planes; decode tiles prefetch 16 rows ahead,
 * HY_A5_PF_ROWS); over ggml's single-level Q8_1 the same kernel takes one
 * plane, and Q5_0 over Q8_S its unsigned 5-bit codes; the K-quants
 * Q4_K/Q5_K/Q6_K over ggml's Q8_K have their own 16-row kernels (hy_a5k_*:
 * a super-block unpacked once per 16 rows, the sub-block scales applied to
 * exact int32 sums).  Those are the 8-bit activation mode's kernels; their
 * 16-row transposes also fill qmm's 16-bit panels of Q4_K, Q5_K, Q6_K,
 * Q5_0, Q5_1, Q8_0, Q2_K, Q3_K and IQ4_XS (hy_qmm_avx512_panel16_*).
 * ggml's single-level Q8_0 partners of Q4_0/Q8_0 are 512-bit tiles with
 * two 32-element blocks per zmm, register-blocked 4 weight rows x 4
 * activation rows, vec_dot the 1x1 instance of the same code.  Every other
 * quantized type, Q4_0 and Q8_0 included, takes the qmm kernels over Q16 (qmm_avx2.c built for this
 * level as qmm_avx512.c: 16 rows per zmm and vpdpwssd in prefill, 3x the
 * two-level Q8_0 tile's rate from 16 tokens).  F32/F16/BF16 weights are
 * multiplied by gemm_avx512.c at any batch size; their vec_dot here is the
 * GEMM's per-output FMA chain.
 */
#if defined(__x86_64__) || defined(__i386__)

#define HY_QX_VNNI 1
#include "quant_x86.h"
#include "qmm.h"

#include <math.h>

enum { HY_A5_Q4_0, HY_A5_Q8_0 };

HY_QX_INLINE __m512 hy_a5_pair_ps(float a, float b)
{
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(a)), _mm256_set1_ps(b), 1);
}

/* 16 packed-nibble bytes of blocks b and b1 -> zmm laid out like the two
 * activation blocks: [b low, b high, b1 low, b1 high] (16 bytes each). */
HY_QX_INLINE __m512i hy_a5_nibbles2(const uint8_t *qs0, const uint8_t *qs1)
{
    /* [qs0, qs0, qs1, qs1] by two broadcast loads, then one variable shift
     * (0 or 4 per 128-bit lane) and one mask: 4 uops instead of a shuffle
     * chain, which matters in decode where nothing else amortizes them */
    __m512i v = _mm512_mask_broadcast_i32x4(
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)qs0)), 0xFF00,
        _mm_loadu_si128((const __m128i *)qs1));
    const __m512i sh = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
    return _mm512_and_si512(_mm512_srlv_epi64(v, sh), _mm512_set1_epi8(0x0F));
}

/* Weight blocks ib and ib+1 (ib+1 only if two; else zeros) as the unsigned
 * bytes fed to dpbusd, their scales as [d0 x8, d1 x8]. */
HY_QX_INLINE __m512i hy_a5_wload(int kind, const char *w, int64_t ib, int two, __m512 *dv)
{
    if (kind == HY_A5_Q8_0) {
        const hy_block_q8_0_t *b = (const hy_block_q8_0_t *)w + ib;
        __m256i lo = _mm256_loadu_si256((const __m256i *)b[0].qs);
        __m256i hi = two ? _mm256_loadu_si256((const __m256i *)b[1].qs)
                         : _mm256_set1_epi8((char)0x80); /* 0x80 ^ 0x80 = 0 below */
        *dv = hy_a5_pair_ps(hy_qx_h2f(b[0].d), two ? hy_qx_h2f(b[1].d) : 0.0f);
        /* w + 128 is unsigned; the 128*sum(x) it adds is removed by the
         * caller's correction term */
        return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                                _mm512_set1_epi8((char)0x80));
    }
    const hy_block_q4_0_t *b = (const hy_block_q4_0_t *)w + ib;
    *dv = hy_a5_pair_ps(hy_qx_h2f(b[0].d), two ? hy_qx_h2f(b[1].d) : 0.0f);
    return hy_a5_nibbles2(b[0].qs, two ? b[1].qs : b[0].qs);
}

/* Q8_0 activation blocks ib, ib+1 (zeros if !two): 64 int8 and scales. */
HY_QX_INLINE __m512i hy_a5_xload(const char *x, int64_t ib, int two, __m512 *dv)
{
    const hy_block_q8_0_t *b = (const hy_block_q8_0_t *)x + ib;
    __m256i lo = _mm256_loadu_si256((const __m256i *)b[0].qs);
    __m256i hi = two ? _mm256_loadu_si256((const __m256i *)b[1].qs) : _mm256_setzero_si256();
    *dv = hy_a5_pair_ps(hy_qx_h2f(b[0].d), two ? hy_qx_h2f(b[1].d) : 0.0f);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* One step of the tile over block pair (ib, ib+1). */
HY_QX_INLINE void hy_a5_step(int kind, int64_t ib, int two, const char *w, size_t ws,
                             const char *x, size_t xs, const int RW, const int RX,
                             __m512 acc[4][4])
{
    __m512i wq[4];
    __m512 dw[4];

#pragma GCC unroll 4
    for (int r = 0; r < RW; r++)
        wq[r] = hy_a5_wload(kind, w + r * ws, ib, two, &dw[r]);
#pragma GCC unroll 4
    for (int c = 0; c < RX; c++) {
        __m512 dx;
        __m512i xq = hy_a5_xload(x + c * xs, ib, two, &dx);
        __m512i init = _mm512_setzero_si512();
        /* Q4_0 stores q+8, Q8_0 is fed as w+128: start the dpbusd sums at
         * minus that offset times the activation sums */
        if (kind == HY_A5_Q4_0)
            init = _mm512_sub_epi32(init, _mm512_dpbusd_epi32(init, _mm512_set1_epi8(8), xq));
        if (kind == HY_A5_Q8_0)
            init = _mm512_sub_epi32(init, _mm512_dpbusd_epi32(init, _mm512_set1_epi8((char)0x80), xq));
#pragma GCC unroll 4
        for (int r = 0; r < RW; r++) {
            __m512i p = _mm512_dpbusd_epi32(init, wq[r], xq);
            acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw[r], dx), acc[r][c]);
        }
    }
}

HY_QX_INLINE void hy_a5_tile_kernel(int kind, int64_t nb, float *s, size_t ss,
                                    const char *w, size_t ws, const char *x,
                                    size_t xs, const int RW, const int RX)
{
    __m512 acc[4][4];
    int64_t ib = 0;

#pragma GCC unroll 4
    for (int c = 0; c < RX; c++)
#pragma GCC unroll 4
        for (int r = 0; r < RW; r++)
            acc[r][c] = _mm512_setzero_ps();
    for (; ib + 2 <= nb; ib += 2)
        hy_a5_step(kind, ib, 1, w, ws, x, xs, RW, RX, acc);
    if (ib < nb)
        hy_a5_step(kind, ib, 0, w, ws, x, xs, RW, RX, acc);
#pragma GCC unroll 4
    for (int c = 0; c < RX; c++)
#pragma GCC unroll 4
        for (int r = 0; r < RW; r++)
            s[c * ss + r] = _mm512_reduce_add_ps(acc[r][c]);
}

#define HY_A5_CASE(rw, rx)                                                         \
    case (rw) * 8 + (rx):                                                          \
        hy_a5_tile_kernel(kind, nb, sp, ss, wp, ws, xp, xs, rw, rx);               \
        break;

/* 4x4 tiles, weight rows outermost (a tile's weights stay in L1 while every
 * activation row passes); edges use the smaller instances. */
HY_QX_INLINE void hy_a5_tile(int kind, int64_t n, float *s, size_t ss, const void *w,
                             size_t ws, int nw, const void *x, size_t xs, int nx)
{
    int64_t nb = n / 32;
    for (int r0 = 0; r0 < nw; r0 += 4) {
        for (int c0 = 0; c0 < nx; c0 += 4) {
            float *sp = s + (size_t)c0 * ss + r0;
            const char *wp = (const char *)w + (size_t)r0 * ws;
            const char *xp = (const char *)x + (size_t)c0 * xs;
            switch (HY_MIN(4, nw - r0) * 8 + HY_MIN(4, nx - c0)) {
            HY_A5_CASE(1, 1) HY_A5_CASE(1, 2) HY_A5_CASE(1, 3) HY_A5_CASE(1, 4)
            HY_A5_CASE(2, 1) HY_A5_CASE(2, 2) HY_A5_CASE(2, 3) HY_A5_CASE(2, 4)
            HY_A5_CASE(3, 1) HY_A5_CASE(3, 2) HY_A5_CASE(3, 3) HY_A5_CASE(3, 4)
            HY_A5_CASE(4, 1) HY_A5_CASE(4, 2) HY_A5_CASE(4, 3) HY_A5_CASE(4, 4)
            }
        }
    }
}

#define HY_A5_KERNELS(name, kind)                                                  \
    static void hy_a5_tile_##name(int64_t n, float *s, size_t ss, const void *w,  \
                                  size_t ws, int nw, const void *x, size_t xs,    \
                                  int nx)                                          \
    {                                                                              \
        hy_a5_tile(kind, n, s, ss, w, ws, nw, x, xs, nx);                          \
    }                                                                              \
    static void hy_a5_dot_##name(int64_t n, float *s, const void *w, const void *x) \
    {                                                                              \
        hy_a5_tile_kernel(kind, n / 32, s, 0, w, 0, x, 0, 1, 1);                   \
    }
HY_A5_KERNELS(q4_0, HY_A5_Q4_0)
HY_A5_KERNELS(q8_0, HY_A5_Q8_0)

/* Software prefetch for decode, in weight rows ahead of the row being
 * read.  A decode pass walks 8 consecutive rows side by side, a block pair
 * at a time, so the hardware streamers see 8 interleaved short streams and
 * fall behind: without this the kernel ran at ~45% of a plain read of the
 * same bytes (bench_quant's stream case), with it at 70-90%.  16 rows is
 * 5.8 KB ahead for SmolLM2's Q4_1 rows of 576 and 9.8 KB for its Q8_0
 * output rows: about 0.5-1 us at ~10 GB/s, more than a DRAM miss, and far
 * inside L1 + L2.  8..32 measured the same; prefetches past the end of the
 * matrix are harmless (prefetch never faults). */
#define HY_A5_PF_ROWS 16

/* ---- Q4_1 over Q8_2L (and Q8_1), Q5_0 over Q8_S: 16 weight rows across
 * the lanes ----
 * The tiles above keep a block's 32 elements across the lanes of one row,
 * so every block of every row pays a float convert, a scale and an FMA per
 * 4 elements, and the per-row scale work bounded decode at ~3.4 cycles
 * per 20-byte block.  Here lane r is weight row r of a 16-row group: the
 * rows' nibbles are transposed in registers (4-byte groups), each 4-byte
 * group of the activation block is broadcast (a plain load), and dpbusd
 * sums a whole block per lane in int32 (exact: |255*hi + lo| <= 32512, so
 * |sum| <= 32*15*32512 < 2^24).  Per block and row the float work is then
 *   acc = fma((float)P, d_w*d_x, acc);  mac = fma(m_w, s_x, mac)
 * in block order, and the result acc + mac: the same per-lane operations
 * for every row, token and tile shape, so vec_dot (the same operations in
 * scalar form), the decode tile and the prefill tile agree bit for bit.
 * A block's d and m (Q5_0: d and qh) of 16 rows come from one more
 * transpose of the rows' first 16 bytes (it replaced a gather: bench_mm
 * B = 8, Q4_1 over Q8_1 220 -> 233 GFLOP/s, Q5_0 over Q8_U (now Q8_S)
 * 182 -> 209, on a Zen 4).  Prefill meets
 * 8 tokens per pass, and its first pass keeps the transposed blocks in a
 * panel that the other passes read (rows of up to 64 blocks), so a block is
 * transposed once per 16 rows, not once per 8 tokens (SmolLM2 pp512: 4
 * tokens per transpose -> 8, +8% at one thread and +15% at two; the panel
 * another +7-9%, on a Xeon with AVX-512 VNNI; decode unchanged).  Over
 * Q8_1 (one int8 plane, d and s in f16) a block takes 8 dpbusd instead of
 * 16 and P = sum(w*q) directly: bench_mm Q4_1 at B = 64 184 -> 300
 * GFLOP/s on a Zen 4.  Measured on the SmolLM2
 * FFN-up shape in L2 (bench_quant, thread CPU time): decode 14.2 -> 22 GB/s
 * of weights, 4-token tile 4.5 -> 10.5 GB/s; streaming 91 MB, 75% -> 85%
 * of a plain read of the same bytes. */
#define HY_A5T_RX 8

/* The low int16 of each lane, an f16, as a float. */
HY_QX_INLINE __m512 hy_a5t_f16lo(__m512i v)
{
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

/* Four dwords of 16 rows transposed: lane r of v[k] holds bytes 4k..4k+3
 * of the 16 bytes at off in row r's block, which starts at b[q] + o[j]
 * for row 4q + j (o[0] = 0). */
HY_QX_INLINE void hy_a5t_tload(const char *const bb[4], size_t off, const size_t o[4],
                               __m512i v[4])
{
    const char *const b[4] = {bb[0] + off, bb[1] + off, bb[2] + off, bb[3] + off};
    __m512i t[4];

    /* v[j]'s 128-bit lane q = the bytes of row 4q + j, so that the 4x4
     * dword transpose below leaves row r in lane r */
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        v[j] = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(b[0] + o[j])));
        v[j] = _mm512_mask_broadcast_i32x4(v[j], 0x00F0,
                                           _mm_loadu_si128((const __m128i *)(b[1] + o[j])));
        v[j] = _mm512_mask_broadcast_i32x4(v[j], 0x0F00,
                                           _mm_loadu_si128((const __m128i *)(b[2] + o[j])));
        v[j] = _mm512_mask_broadcast_i32x4(v[j], 0xF000,
                                           _mm_loadu_si128((const __m128i *)(b[3] + o[j])));
    }
    t[0] = _mm512_unpacklo_epi32(v[0], v[1]);
    t[1] = _mm512_unpackhi_epi32(v[0], v[1]);
    t[2] = _mm512_unpacklo_epi32(v[2], v[3]);
    t[3] = _mm512_unpackhi_epi32(v[2], v[3]);
    v[0] = _mm512_unpacklo_epi64(t[0], t[2]);
    v[1] = _mm512_unpackhi_epi64(t[0], t[2]);
    v[2] = _mm512_unpacklo_epi64(t[1], t[3]);
    v[3] = _mm512_unpackhi_epi64(t[1], t[3]);
}

/* The same for the 32 bytes at off: lane r of v[k] holds bytes 4k..4k+3
 * (k < 8). */
HY_QX_INLINE void hy_a5t_tload32(const char *const b[4], size_t off, const size_t o[4],
                                 __m512i v[8])
{
    hy_a5t_tload(b, off, o, v);
    hy_a5t_tload(b, off + 16, o, v + 4);
}

/* Nibbles of one block of 16 rows transposed (hy_a5t_tload's bytes): lane
 * r of lo[k] holds row r's low nibbles of qs bytes 4k..4k+3 (elements
 * 4k..4k+3), hi[k] its high nibbles (elements 16+4k..16+4k+3). */
HY_QX_INLINE void hy_a5t_wload(const char *const b[4], size_t off, const size_t o[4],
                               __m512i lo[4], __m512i hi[4])
{
    __m512i v[4];
    const __m512i m4 = _mm512_set1_epi8(0x0F);

    hy_a5t_tload(b, off, o, v);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        lo[k] = _mm512_and_si512(v[k], m4);
        hi[k] = _mm512_and_si512(_mm512_srli_epi16(v[k], 4), m4);
    }
}

/* *P = dpbusd(*P, w, the 4 signed bytes at v broadcast), the bytes read by
 * the multiply-add itself ({1to16}): GCC emits a separate vpbroadcastd for
 * the intrinsic, one more instruction per multiply-add. */
HY_QX_INLINE void hy_a5t_dpbusd_bcast(__m512i *P, __m512i w, const int8_t *v)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(*P) : "v"(w), "m"(*(const int32_t *)v));
}

/* The same from zero: a zeroing idiom the register renamer drops, where a
 * zero kept in a register costs a copy each time. */
HY_QX_INLINE __m512i hy_a5t_dpbusd_bcast0(__m512i w, const int8_t *v)
{
    __m512i p;
    __asm__("vpxord %0, %0, %0\n\tvpdpbusd %2%{1to16%}, %1, %0"
            : "=&v"(p)
            : "v"(w), "m"(*(const int32_t *)v));
    return p;
}

HY_QX_INLINE __m512i hy_a5t_bcast(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Q5_0's unsigned codes q (the value is q - 16) from hy_a5t_wload's
 * nibbles and each row's 32 high bits qh (lane r: row r's qh[0..3]): byte b
 * of lo[k] is element 4k + b, whose high bit is bit 4k + b of qh (hi[k]:
 * 16 + 4k + b).  A byte shuffle puts the qh byte holding those bits in each
 * byte, a test against the byte's bit gives a mask, and the bytes with the
 * bit gain 16.  sgn: the values q - 16 as signed bytes instead (the bytes
 * without the bit lose 16). */
HY_QX_INLINE void hy_a5t_q5_codes(__m512i qh, __m512i lo[4], __m512i hi[4], const int sgn)
{
    /* shuffle indices are per 128-bit lane: dword i's bytes at 4i */
    const __m512i base = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0x00000000);
    const __m512i sixteen = _mm512_set1_epi8(16);

#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        /* bits 4k..4k+3 lie in qh byte k / 2, at (4k) % 8 upward */
        const __m512i bit = _mm512_set1_epi32((k & 1) ? (int)0x80402010 : 0x08040201);
        const __m512i sl = _mm512_add_epi8(base, _mm512_set1_epi8((char)(k / 2)));
        const __m512i sh = _mm512_add_epi8(base, _mm512_set1_epi8((char)(2 + k / 2)));
        const __m512i bl = _mm512_shuffle_epi8(qh, sl), bh = _mm512_shuffle_epi8(qh, sh);
        if (sgn) {
            lo[k] = _mm512_mask_sub_epi8(lo[k], _mm512_testn_epi8_mask(bl, bit), lo[k], sixteen);
            hi[k] = _mm512_mask_sub_epi8(hi[k], _mm512_testn_epi8_mask(bh, bit), hi[k], sixteen);
        } else {
            lo[k] = _mm512_mask_add_epi8(lo[k], _mm512_test_epi8_mask(bl, bit), lo[k], sixteen);
            hi[k] = _mm512_mask_add_epi8(hi[k], _mm512_test_epi8_mask(bh, bit), hi[k], sixteen);
        }
    }
}

/* A block of 16 rows as the kernel consumes it: transposed nibbles, d, m. */
typedef struct {
    __m512i lo[4], hi[4];
    __m512 d, m;
} hy_a5t_blk_t;

/* Where the kernel takes a block's weights from: the rows (transposing
 * them), the rows with the result kept in a panel for the next token
 * groups, or that panel.  Prefill transposes each block once per 16 rows
 * instead of once per 8 tokens. */
enum { HY_A5T_ROWS, HY_A5T_KEEP, HY_A5T_PANEL, HY_A5T_R16 };
/* HY_A5T_R16: the 16 rows in HY_WLAYOUT_ROWS16 (weight.c: Q4_1's d, m and
 * each word of qs for the 16 rows together, 320 bytes a block), already
 * lined up by row: no transposes and no panel. */
/* What the kernel multiplies: Q4_1 weights over Q8_2L (two planes) or
 * ggml's Q8_1 (one), or Q5_0 weights over Q8_S (the unsigned 5-bit codes
 * q on dpbusd's unsigned side, the activations on the signed one; the
 * offset's 16 * the block's activation sum comes back out). */
enum { HY_A5T_Q41_Q81 = 1, HY_A5T_Q41_2L = 2, HY_A5T_Q50_Q8S = 3 };
/* Blocks a prefill panel holds (640 bytes each: K up to 2048 on the stack). */
#define HY_A5T_PANEL_BLOCKS 64

/* Rows w + r*ws (r < 16) against RX activation rows x + c*xs over nb
 * blocks; s[c*ss + r] for the rows in `store`.  pf > 0: prefetch each row
 * pf bytes ahead (decode streams the weights once; see HY_A5_PF_ROWS).
 * src: where the blocks come from (pk: the panel of HY_A5T_KEEP and
 * HY_A5T_PANEL). */
HY_QX_INLINE void hy_a5t_kernel(int64_t nb, float *s, size_t ss, const char *w, size_t ws,
                                const char *x, size_t xs, const int RX, __mmask16 store,
                                size_t pf, const int src, hy_a5t_blk_t *pk, const int fmt,
                                int stream)
{
    __m512 acc[HY_A5T_RX], mac[HY_A5T_RX];
    /* decode's prefetch: a block's share of the run of pf bytes ahead
     * (HY_A5_PF_ROWS rows of nb blocks: whole bytes) */
    const size_t pf_step = nb > 0 ? pf / (size_t)nb : 0;
#pragma GCC unroll 8
    for (int c = 0; c < RX; c++) {
        acc[c] = _mm512_setzero_ps();
        mac[c] = _mm512_setzero_ps();
    }
    /* row 4q + j of block ib at b[q] + o[j]: four pointers stepped per
     * block and three fixed offsets, so the 16 rows need no address math */
    const char *b[4] = {w, w + 4 * ws, w + 8 * ws, w + 12 * ws};
    const size_t o[4] = {0, ws, 2 * ws, 3 * ws};
    for (int64_t ib = 0; ib < nb; ib++) {
        __m512i lo[4], hi[4];
        __m512 d, m = _mm512_setzero_ps(); /* m: Q4_1 only */

        if (src == HY_A5T_R16) {
            const char *blk = w + (size_t)ib * 16 * sizeof(hy_block_q4_1_t);
            const __m512i m4 = _mm512_set1_epi8(0x0F);
            if (pf) {
                for (size_t off = 0; off < 16 * sizeof(hy_block_q4_1_t); off += 64)
                    _mm_prefetch(blk + pf + off, _MM_HINT_T0);
            }
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m512i v = _mm512_loadu_si512(blk + 64 + 64 * k);
                lo[k] = _mm512_and_si512(v, m4);
                hi[k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            }
            d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
            m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 32)));
        } else if (src == HY_A5T_PANEL) {
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                lo[k] = _mm512_load_si512(&pk[ib].lo[k]);
                hi[k] = _mm512_load_si512(&pk[ib].hi[k]);
            }
            d = _mm512_load_ps(&pk[ib].d);
            if (fmt != HY_A5T_Q50_Q8S) /* Q4_1's m; Q5_0 has none */
                m = _mm512_load_ps(&pk[ib].m);
        } else {
            /* the rows pf bytes ahead are one contiguous run: block
             * ib's share of it, a line at a time, so that each line is
             * asked for once and in address order (per-row prefetches of
             * 16 interleaved streams left a DRAM-bound decode at ~9 GB/s
             * where qmm_avx2.c's run order reaches ~12) */
            if (pf) {
                const size_t lo_b = (size_t)ib * pf_step;
                const size_t hi_b = lo_b + pf_step + (ib + 1 == nb ? 64 : 0);
                for (size_t off = (lo_b + 63) & ~(size_t)63; off < hi_b; off += 64)
                    _mm_prefetch(w + pf + off, _MM_HINT_T0);
            }
            /* each row's first 16 bytes: d, and Q4_1's m or Q5_0's qh */
            __m512i hd[4];
            hy_a5t_tload(b, 0, o, hd);
            if (fmt == HY_A5T_Q50_Q8S) {
                hy_a5t_wload(b, 6, o, lo, hi);
                /* qh: bytes 2..5, across the first two dwords */
                const __m512i qh = _mm512_or_si512(_mm512_srli_epi32(hd[0], 16),
                                                   _mm512_slli_epi32(hd[1], 16));
                d = hy_a5t_f16lo(hd[0]);
                hy_a5t_q5_codes(qh, lo, hi, 0);
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++)
                    b[q] += sizeof(hy_block_q5_0_t);
            } else {
                hy_a5t_wload(b, 4, o, lo, hi);
                d = hy_a5t_f16lo(hd[0]);
                m = hy_a5t_f16lo(_mm512_srli_epi32(hd[0], 16));
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++)
                    b[q] += sizeof(hy_block_q4_1_t);
            }
            if (src == HY_A5T_KEEP) {
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    _mm512_store_si512(&pk[ib].lo[k], lo[k]);
                    _mm512_store_si512(&pk[ib].hi[k], hi[k]);
                }
                _mm512_store_ps(&pk[ib].d, d);
                if (fmt != HY_A5T_Q50_Q8S)
                    _mm512_store_ps(&pk[ib].m, m);
            }
        }
#pragma GCC unroll 8
        for (int c = 0; c < RX && fmt == HY_A5T_Q50_Q8S; c++) {
            const hy_block_q8_s_t *xb = (const hy_block_q8_s_t *)(x + (size_t)c * xs) + ib;
            /* sum (q - 16) v: the offset's -16 vsum starts one chain */
            __m512i p = _mm512_set1_epi32(-16 * xb->vsum), p2 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                hy_a5t_dpbusd_bcast(&p, lo[k], xb->qs + 4 * k);
                hy_a5t_dpbusd_bcast(&p2, hi[k], xb->qs + 16 + 4 * k);
            }
            const __m512i pv = _mm512_add_epi32(p, p2);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pv),
                                     _mm512_mul_ps(d, _mm512_set1_ps(xb->d)), acc[c]);
        }
#pragma GCC unroll 8
        for (int c = 0; c < RX && fmt == HY_A5T_Q41_Q81; c++) {
            const hy_block_q8_1_t *xb = (const hy_block_q8_1_t *)(x + (size_t)c * xs) + ib;
            __m512i p = _mm512_setzero_si512(), p2 = p;
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                hy_a5t_dpbusd_bcast(&p, lo[k], xb->qs + 4 * k);
                hy_a5t_dpbusd_bcast(&p2, hi[k], xb->qs + 16 + 4 * k);
            }
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(p, p2)),
                                     _mm512_mul_ps(d, _mm512_set1_ps(hy_qx_h2f(xb->d))), acc[c]);
            mac[c] = _mm512_fmadd_ps(m, _mm512_set1_ps(hy_qx_h2f(xb->s)), mac[c]);
        }
#pragma GCC unroll 8
        for (int c = 0; c < RX && fmt == HY_A5T_Q41_2L; c++) {
            const hy_block_q8_2l_t *xb = (const hy_block_q8_2l_t *)(x + (size_t)c * xs) + ib;
            __m512i ph = _mm512_setzero_si512(), ph2 = ph, pl = ph, pl2 = ph;
            /* four independent chains: low and high nibbles of each plane */
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                hy_a5t_dpbusd_bcast(&ph, lo[k], xb->hi + 4 * k);
                hy_a5t_dpbusd_bcast(&ph2, hi[k], xb->hi + 16 + 4 * k);
                hy_a5t_dpbusd_bcast(&pl, lo[k], xb->lo + 4 * k);
                hy_a5t_dpbusd_bcast(&pl2, hi[k], xb->lo + 16 + 4 * k);
            }
            /* 255*hi + lo: |sum hi*w| <= 32*15*127, so << 8 stays exact */
            const __m512i h = _mm512_add_epi32(ph, ph2);
            const __m512i p = _mm512_add_epi32(_mm512_sub_epi32(_mm512_slli_epi32(h, 8), h),
                                               _mm512_add_epi32(pl, pl2));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
                                     _mm512_mul_ps(d, _mm512_set1_ps(xb->d)), acc[c]);
            mac[c] = _mm512_fmadd_ps(m, _mm512_set1_ps(xb->s), mac[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < RX; c++) {
        float *d = s + (size_t)c * ss;
        if (stream && store == 0xFFFF && ((uintptr_t)d & 63) == 0)
            _mm512_stream_ps(d, _mm512_add_ps(acc[c], mac[c]));
        else
            _mm512_mask_storeu_ps(d, store, _mm512_add_ps(acc[c], mac[c]));
    }
}

/* RX-token instance (RX <= HY_A5T_RX) over one group, its blocks from src. */
#define HY_A5T_K(n, srcv, fmt) \
    hy_a5t_kernel(nb, s, ss, w, ws, x, xs, n, store, pf, srcv, pk, fmt, stream)
#define HY_A5T_SRC(srcv, fmt)                                                      \
    switch (rx) {                                                                  \
    case 1: HY_A5T_K(1, srcv, fmt); break;                                         \
    case 2: HY_A5T_K(2, srcv, fmt); break;                                         \
    case 3: HY_A5T_K(3, srcv, fmt); break;                                         \
    case 4: HY_A5T_K(4, srcv, fmt); break;                                         \
    case 5: HY_A5T_K(5, srcv, fmt); break;                                         \
    case 6: HY_A5T_K(6, srcv, fmt); break;                                         \
    case 7: HY_A5T_K(7, srcv, fmt); break;                                         \
    default: HY_A5T_K(8, srcv, fmt); break;                                        \
    }
/* One instance per format (fmt: HY_A5T_Q41_2L for the default Q4_1 kernel,
 * HY_A5T_Q41_Q81 and HY_A5T_Q50_Q8S for hy_quant_traits_q8's). */
#define HY_A5T_GROUP(name, fmt)                                                    \
    static void name(int64_t nb, float *s, size_t ss, const char *w, size_t ws,   \
                     const char *x, size_t xs, int rx, __mmask16 store, size_t pf, \
                     int src, hy_a5t_blk_t *pk, int stream)                        \
    {                                                                              \
        _Static_assert(HY_A5T_RX == 8, "hy_a5t_group instantiates 1..8 tokens");  \
        if (src == HY_A5T_PANEL) {                                                 \
            HY_A5T_SRC(HY_A5T_PANEL, fmt)                                          \
        } else if (src == HY_A5T_R16 && fmt == HY_A5T_Q41_2L) {                    \
            HY_A5T_SRC(HY_A5T_R16, fmt)                                            \
        } else if (src == HY_A5T_KEEP) {                                           \
            HY_A5T_SRC(HY_A5T_KEEP, fmt)                                           \
        } else {                                                                   \
            HY_A5T_SRC(HY_A5T_ROWS, fmt)                                           \
        }                                                                          \
    }
HY_A5T_GROUP(hy_a5t_group_2l, HY_A5T_Q41_2L)
HY_A5T_GROUP(hy_a5t_group_1l, HY_A5T_Q41_Q81)
HY_A5T_GROUP(hy_a5t_group_q5s, HY_A5T_Q50_Q8S)
typedef void (*hy_a5t_group_fn_t)(int64_t, float *, size_t, const char *, size_t, const char *,
                                  size_t, int, __mmask16, size_t, int, hy_a5t_blk_t *, int);

/* Groups of 16 rows; a ragged end takes the last 16 rows again (the rows
 * it shares with the previous group get the same bits twice).  Fewer than
 * 16 rows go one row at a time as 16 copies of it (ws = 0). */
HY_QX_INLINE void hy_a5t_tile(hy_a5t_group_fn_t hy_a5t_group, int64_t n, float *s, size_t ss,
                              const void *vw, size_t ws, int nw, const void *vx, size_t xs,
                              int nx)
{
    const char *w = vw, *x = vx;
    const int64_t nb = n / 32;
    /* a few tokens: prefetch the next group's rows (HY_A5_PF_ROWS = 16)
     * while the first token group reads these (HY_TILE_PF_TOKENS) */
    const size_t pf = nx <= HY_TILE_PF_TOKENS ? (size_t)HY_A5_PF_ROWS * ws : 0;

    hy_a5t_blk_t panel[HY_A5T_PANEL_BLOCKS];
    /* more than one token group: the first transposes into the panel, the
     * others read it (where the panel holds the row) */
    const int keep = nx > HY_A5T_RX && nb <= HY_A5T_PANEL_BLOCKS;

    if (nw < 16) {
        for (int r = 0; r < nw; r++)
            for (int c0 = 0; c0 < nx; c0 += HY_A5T_RX)
                hy_a5t_group(nb, s + (size_t)c0 * ss + r, ss, w + (size_t)r * ws, 0,
                             x + (size_t)c0 * xs, xs, HY_MIN(HY_A5T_RX, nx - c0), 0x1, 0,
                             HY_A5T_ROWS, NULL, 0);
        return;
    }
    for (int r0 = 0; r0 < nw; r0 += 16) {
        const int r = HY_MIN(r0, nw - 16);
        for (int c0 = 0; c0 < nx; c0 += HY_A5T_RX)
            hy_a5t_group(nb, s + (size_t)c0 * ss + r, ss, w + (size_t)r * ws, ws,
                         x + (size_t)c0 * xs, xs, HY_MIN(HY_A5T_RX, nx - c0), 0xFFFF,
                         c0 == 0 ? pf : 0,
                         !keep ? HY_A5T_ROWS : c0 == 0 ? HY_A5T_KEEP : HY_A5T_PANEL, panel,
                         nx >= HY_TILE_STREAM_TOKENS);
    }
    /* the streamed sums are in memory before the pool's barrier says so */
    _mm_sfence();
}

static void hy_a5_tile_q4_1_2l(int64_t n, float *s, size_t ss, const void *w, size_t ws,
                               int nw, const void *x, size_t xs, int nx)
{
    hy_a5t_tile(hy_a5t_group_2l, n, s, ss, w, ws, nw, x, xs, nx);
}

/* Q4_1 in HY_WLAYOUT_ROWS16 (qmm.h): w at the first of nw rows, both
 * multiples of 16; every token group reads the blocks in place.  The same
 * kernel as hy_a5_tile_q4_1_2l's, so the same bits. */
void hy_qmm_avx512_tile_q4_1_rows16(int64_t n, float *s, size_t ss, const void *vw, size_t ws,
                                    int nw, const void *vx, size_t xs, int nx)
{
    const char *w = vw, *x = vx;
    const int64_t nb = n / 32;
    const size_t pf = nx <= HY_TILE_PF_TOKENS ? 16 * ws : 0;

    for (int r0 = 0; r0 < nw; r0 += 16)
        for (int c0 = 0; c0 < nx; c0 += HY_A5T_RX)
            hy_a5t_group_2l(nb, s + (size_t)c0 * ss + r0, ss, w + (size_t)r0 * ws, ws,
                            x + (size_t)c0 * xs, xs, HY_MIN(HY_A5T_RX, nx - c0), 0xFFFF,
                            c0 == 0 ? pf : 0, HY_A5T_R16, NULL, nx >= HY_TILE_STREAM_TOKENS);
    /* the streamed sums are in memory before the pool's barrier says so */
    _mm_sfence();
}

static void hy_a5_tile_q4_1_1l(int64_t n, float *s, size_t ss, const void *w, size_t ws,
                               int nw, const void *x, size_t xs, int nx)
{
    hy_a5t_tile(hy_a5t_group_1l, n, s, ss, w, ws, nw, x, xs, nx);
}

static void hy_a5_tile_q5_0_q8s(int64_t n, float *s, size_t ss, const void *w, size_t ws,
                                int nw, const void *x, size_t xs, int nx)
{
    hy_a5t_tile(hy_a5t_group_q5s, n, s, ss, w, ws, nw, x, xs, nx);
}

/* One row: a lane of hy_a5t_kernel without the 15 idle copies (lvl as
 * there).  The block's integer sum is the same int32 formed in another
 * order, and the scalar conversions, product and fmaf are the same IEEE
 * operations as the vector lanes', so the bits agree with the tiles. */
HY_QX_INLINE void hy_a5_dot_q4_1_lvl(int64_t n, float *s, const void *vw, const void *vx,
                                     const int lvl)
{
    const hy_block_q4_1_t *w = vw;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    float acc = 0.0f, mac = 0.0f;

    for (int64_t ib = 0; ib < n / 32; ib++) {
        const __m128i q = _mm_loadu_si128((const __m128i *)w[ib].qs);
        /* elements 0..15 (low nibbles), then 16..31 (high nibbles) */
        const __m256i wq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
        const int8_t *hi, *lo = NULL;
        float dx, sx;
        int32_t p;

        if (lvl == 2) {
            const hy_block_q8_2l_t *x = (const hy_block_q8_2l_t *)vx + ib;
            hi = x->hi;
            lo = x->lo;
            dx = x->d;
            sx = x->s;
        } else {
            const hy_block_q8_1_t *x = (const hy_block_q8_1_t *)vx + ib;
            hi = x->qs;
            dx = hy_qx_h2f(x->d);
            sx = hy_qx_h2f(x->s);
        }
        p = hy_qx_hsum8i(_mm256_dpbusd_epi32(_mm256_setzero_si256(), wq,
                                             _mm256_loadu_si256((const __m256i *)hi)));
        if (lvl == 2)
            p = 255 * p + hy_qx_hsum8i(_mm256_dpbusd_epi32(
                              _mm256_setzero_si256(), wq, _mm256_loadu_si256((const __m256i *)lo)));
        acc = fmaf((float)p, hy_qx_h2f(w[ib].d) * dx, acc);
        mac = fmaf(hy_qx_h2f(w[ib].m), sx, mac);
    }
    *s = acc + mac;
}

static void hy_a5_dot_q4_1_2l(int64_t n, float *s, const void *w, const void *x)
{
    hy_a5_dot_q4_1_lvl(n, s, w, x, 2);
}

static void hy_a5_dot_q4_1_1l(int64_t n, float *s, const void *w, const void *x)
{
    hy_a5_dot_q4_1_lvl(n, s, w, x, 1);
}

/* ---- K-quants over Q8_K (the 8-bit activation mode): 16 rows across the
 * lanes ----
 * The layout of the kernels above for 256-element super-blocks: lane r is
 * weight row r of a 16-row group, a super-block's codes are transposed once
 * per 16 rows into 4-byte groups (unsigned bytes, dpbusd's unsigned side;
 * Q8_K's int8 activations are broadcast on the signed side), and each
 * sub-block's exact int32 sum is scaled by its row's sub-block scale in
 * int32.  Per super-block, lane and token, exactly:
 *   Q4_K/Q5_K: P = sum_k sc_k * (q . x)_k,   M = sum_k m_k * (sum x)_k
 *   Q6_K:      P = sum_k sc_k * (q . x)_k - 32 * sum_k sc_k * (sum x)_k
 * (q the unsigned codes, Q6_K's offset 32 taken out through Q8_K's bsums,
 * M's and the offset's sums of pairs by vpdpwssd), then
 *   acc = fma((float)P, d_w*d_x, acc);  mac = fma((float)M, dmin_w*d_x, mac)
 * in super-block order, and the result acc - mac (Q6_K: acc).  vec_dot is
 * the same operations in scalar form, so the tile, its decode and vec_dot
 * agree bit for bit, whatever the rows' grouping or the batch.  The sums
 * are the reference's integers; the float steps are this level's own (the
 * default kernels' Q16 contract does not apply to Q8_K). */
enum { HY_A5K_Q4, HY_A5K_Q5, HY_A5K_Q6 };
/* Token rows whose sums one pass over a group's super-blocks keeps. */
#define HY_A5K_CT 256

/* One super-block of 16 rows, unpacked (5.8 KB: stays in L1 while the
 * tokens go over it). */
typedef struct {
    __m512i q[64];  /* lane r: row r's codes of elements 4g..4g+3 */
    __m512i sc[16]; /* sub-block scales, int32 (Q4_K/Q5_K: 8 of 32 elements) */
    __m512i mp[8];  /* int16 pairs against Q8_K's bsums: Q4_K/Q5_K the mins of
                     * sub-blocks 2j, 2j+1 (j < 4); Q6_K scales 2j, 2j+1 */
    __m512 d, dmin;
    __m512i u[4];   /* the sub-block scales as bytes, scale s in byte s % 4 of u[s / 4]:
                     * Q6_K's 16 as loaded, Q4_K/Q5_K's 8 (0..63) in u[0..1] */
} hy_a5k_sb_t;

HY_QX_INLINE size_t hy_a5k_bytes(const int fmt)
{
    return fmt == HY_A5K_Q4 ? sizeof(hy_block_q4_k_t)
           : fmt == HY_A5K_Q5 ? sizeof(hy_block_q5_k_t)
                              : sizeof(hy_block_q6_k_t);
}

/* v shifted left by n bits in each dword (right by -n for n < 0). */
HY_QX_INLINE __m512i hy_a5k_shift(__m512i v, const int n)
{
    return n > 0 ? _mm512_slli_epi32(v, (unsigned)n)
           : n < 0 ? _mm512_srli_epi32(v, (unsigned)-n)
                   : v;
}

/* Super-block i of rows w + r*ws (r < 16) into *sb, every field through
 * hy_a5t_tload's transposes (no gathers). */
HY_QX_INLINE void hy_a5k_unpack(const int fmt, const char *w, size_t ws, int64_t i,
                                hy_a5k_sb_t *sb)
{
    const char *base = w + (size_t)i * hy_a5k_bytes(fmt);
    const char *const b[4] = {base, base + 4 * ws, base + 8 * ws, base + 12 * ws};
    const size_t o[4] = {0, ws, 2 * ws, 3 * ws};
    const __m512i ff = _mm512_set1_epi32(0xFF);

    if (fmt != HY_A5K_Q6) {
        const size_t qs = fmt == HY_A5K_Q4 ? offsetof(hy_block_q4_k_t, qs)
                                           : offsetof(hy_block_q5_k_t, qs);
        /* the first 16 bytes: d and dmin, then the 12 bytes of scales */
        __m512i hd[4];
        hy_a5t_tload(b, 0, o, hd);
        const __m512i dm = hd[0];
        __m512i sc[2], mn[2];
        hy_qx_k4_scales16(hd + 1, sc, mn);
        __m512i qh[8];

        sb->u[0] = sc[0];
        sb->u[1] = sc[1];
        sb->d = hy_a5t_f16lo(dm);
        sb->dmin = hy_a5t_f16lo(_mm512_srli_epi32(dm, 16));
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            sb->sc[k] = _mm512_and_si512(_mm512_srli_epi32(sc[k / 4], 8 * (k % 4)), ff);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            sb->mp[2 * h] = _mm512_or_si512(
                _mm512_and_si512(mn[h], ff),
                _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(mn[h], 8), ff), 16));
            sb->mp[2 * h + 1] = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi32(mn[h], 16), ff),
                _mm512_slli_epi32(_mm512_srli_epi32(mn[h], 24), 16));
        }
        if (fmt == HY_A5K_Q5) {
            /* qh byte l holds bit k of element l of sub-block k */
            const size_t oh = offsetof(hy_block_q5_k_t, qh);
            hy_a5t_tload32(b, oh, o, qh);
        }
        /* 32-byte run c: low nibbles sub-block 2c, high nibbles 2c+1 */
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
#pragma GCC unroll 2
            for (int hf = 0; hf < 2; hf++) {
                __m512i lo[4], hi[4];
                hy_a5t_wload(b, qs + 32 * (size_t)c + 16 * (size_t)hf, o, lo, hi);
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++) {
                    const int gg = 4 * hf + g;
                    if (fmt == HY_A5K_Q5) {
                        /* bit 2c (2c + 1) of each qh byte moved to bit 4
                         * and or-ed in under the mask: lo | (qh' & m) */
                        const __m512i b4 = _mm512_set1_epi8(0x10);
                        lo[g] = _mm512_ternarylogic_epi32(lo[g], hy_a5k_shift(qh[gg], 4 - 2 * c),
                                                          b4, 0xF8);
                        hi[g] = _mm512_ternarylogic_epi32(
                            hi[g], hy_a5k_shift(qh[gg], 3 - 2 * c), b4, 0xF8);
                    }
                    sb->q[16 * c + gg] = lo[g];
                    sb->q[16 * c + 8 + gg] = hi[g];
                }
            }
    } else {
        const __m512i m30 = _mm512_set1_epi8(0x30);
        /* the 16 scales, and d ending the block: the high half of the
         * last dword of the 16 bytes that end with it */
        __m512i u[4], dw[4];
        hy_a5t_tload(b, offsetof(hy_block_q6_k_t, scales), o, u);
        memcpy(sb->u, u, sizeof u);
        hy_a5t_tload(b, offsetof(hy_block_q6_k_t, d) + 2 - 16, o, dw);
        sb->d = hy_a5t_f16lo(_mm512_srli_epi32(dw[3], 16));
        sb->dmin = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                sb->sc[4 * j + k] = _mm512_srai_epi32(_mm512_slli_epi32(u[j], 24 - 8 * k), 24);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            sb->mp[j] = _mm512_or_si512(_mm512_and_si512(sb->sc[2 * j], _mm512_set1_epi32(0xFFFF)),
                                        _mm512_slli_epi32(sb->sc[2 * j + 1], 16));
        /* half h, element 128h + 32s + l (l < 32): ql[64h + l] (s = 0, 2)
         * or ql[64h + 32 + l] (s = 1, 3), low nibble for s < 2, and bits
         * 2s, 2s+1 of qh[32h + l] */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i qh[8];
            const size_t oh = offsetof(hy_block_q6_k_t, qh) + 32 * (size_t)h;
            hy_a5t_tload32(b, oh, o, qh);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                /* ql bytes 64h + 16r ..: run ro = r / 2 (s = ro or 2 + ro),
                 * l = 16 (r % 2) + 4g + byte */
                const int ro = r / 2;
                __m512i lo[4], hi[4];
                hy_a5t_wload(b, 64 * (size_t)h + 16 * (size_t)r, o, lo, hi);
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++) {
                    const int gl = 4 * (r % 2) + g; /* group of l */
                    /* bits 2s, 2s+1 of each qh byte moved to bits 4, 5
                     * (s = ro: left by 4 - 2ro; s = ro + 2: right by
                     * 2ro), taken under the mask and or-ed into the
                     * nibble in one ternary-logic op (lo | (qh' & m)) */
                    const __m512i sl = ro ? _mm512_slli_epi32(qh[gl], 2)
                                          : _mm512_slli_epi32(qh[gl], 4);
                    const __m512i sh = ro ? _mm512_srli_epi32(qh[gl], 2) : qh[gl];
                    sb->q[32 * h + 8 * ro + gl] = _mm512_ternarylogic_epi32(lo[g], sl, m30, 0xF8);
                    sb->q[32 * h + 8 * (ro + 2) + gl] =
                        _mm512_ternarylogic_epi32(hi[g], sh, m30, 0xF8);
                }
            }
        }
    }
}

/* acc/mac[c*16 + lane] (c < RX) += super-block sb against RX token rows
 * x + c*xs (Q8_K blocks, already at this super-block). */
HY_QX_INLINE void hy_a5k_compute(const int fmt, const hy_a5k_sb_t *sb, const char *x, size_t xs,
                                 const int RX, float *acc, float *mac)
{
    const int nsub = fmt == HY_A5K_Q6 ? 16 : 8, gps = 64 / nsub;
    __m512i sumi[HY_A5T_RX];

#pragma GCC unroll 8
    for (int c = 0; c < RX; c++)
        sumi[c] = _mm512_setzero_si512();
    for (int k = 0; k < nsub; k++) {
        __m512i wq[8];
        const __m512i sc = _mm512_load_si512(&sb->sc[k]);
#pragma GCC unroll 8
        for (int g = 0; g < gps; g++)
            wq[g] = _mm512_load_si512(&sb->q[k * gps + g]);
#pragma GCC unroll 8
        for (int c = 0; c < RX; c++) {
            const int8_t *xq = ((const hy_block_q8_k_t *)(x + (size_t)c * xs))->qs + 4 * k * gps;
            __m512i p = hy_a5t_dpbusd_bcast0(wq[0], xq);
#pragma GCC unroll 8
            for (int g = 1; g < gps; g++)
                hy_a5t_dpbusd_bcast(&p, wq[g], xq + 4 * g);
            sumi[c] = _mm512_add_epi32(sumi[c], _mm512_mullo_epi32(p, sc));
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < RX; c++) {
        const hy_block_q8_k_t *xb = (const hy_block_q8_k_t *)(x + (size_t)c * xs);
        const __m512 dx = _mm512_set1_ps(xb->d);
        __m512i p = sumi[c], corr = _mm512_setzero_si512();
        if (fmt == HY_A5K_Q6) {
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                corr = _mm512_dpwssd_epi32(corr, sb->mp[j],
                                           hy_a5t_bcast((const int8_t *)(xb->bsums + 2 * j)));
            p = _mm512_sub_epi32(p, _mm512_slli_epi32(corr, 5));
        } else {
            /* (sum x) of sub-blocks 2j, 2j+1 as an int16 pair: |sum| <= 32*127 */
            const __m256i b16 = _mm256_loadu_si256((const __m256i *)xb->bsums);
            const __m256i b32 = _mm256_madd_epi16(b16, _mm256_set1_epi16(1));
            int32_t pr[8];
            _mm256_storeu_si256((__m256i *)pr, _mm256_packs_epi32(b32, b32));
            /* packs per 128-bit lane: pairs (0,1), (2,3) at dwords 0, 1;
             * (4,5), (6,7) at 4, 5 */
            static const int at[4] = {0, 1, 4, 5};
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                corr = _mm512_dpwssd_epi32(corr, sb->mp[j], _mm512_set1_epi32(pr[at[j]]));
            float *m = mac + 16 * c;
            _mm512_store_ps(m, _mm512_fmadd_ps(_mm512_cvtepi32_ps(corr),
                                               _mm512_mul_ps(sb->dmin, dx), _mm512_load_ps(m)));
        }
        float *a = acc + 16 * c;
        _mm512_store_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(sb->d, dx),
                                           _mm512_load_ps(a)));
    }
}

#define HY_A5K_RUN(fmt)                                                            \
    switch (rx) {                                                                  \
    case 1: hy_a5k_compute(fmt, sb, x, xs, 1, acc, mac); break;                   \
    case 2: hy_a5k_compute(fmt, sb, x, xs, 2, acc, mac); break;                   \
    case 3: hy_a5k_compute(fmt, sb, x, xs, 3, acc, mac); break;                   \
    case 4: hy_a5k_compute(fmt, sb, x, xs, 4, acc, mac); break;                   \
    case 5: hy_a5k_compute(fmt, sb, x, xs, 5, acc, mac); break;                   \
    case 6: hy_a5k_compute(fmt, sb, x, xs, 6, acc, mac); break;                   \
    case 7: hy_a5k_compute(fmt, sb, x, xs, 7, acc, mac); break;                   \
    default: hy_a5k_compute(fmt, sb, x, xs, 8, acc, mac); break;                  \
    }

#define HY_A5K_TYPE(name, fmt)                                                     \
    static void hy_a5k_compute_##name(const hy_a5k_sb_t *sb, const char *x, size_t xs, \
                                      int rx, float *acc, float *mac)              \
    {                                                                              \
        HY_A5K_RUN(fmt)                                                            \
    }
HY_A5K_TYPE(q4, HY_A5K_Q4)
HY_A5K_TYPE(q5, HY_A5K_Q5)
HY_A5K_TYPE(q6, HY_A5K_Q6)

/* Groups of 16 rows, a ragged end taking the last 16 again (the rows it
 * repeats get the same bits); fewer than 16 rows go one at a time as 16
 * copies (ws = 0).
 * Decode prefetches the next group's rows as one run, a super-block's
 * share at a time (HY_A5_PF_ROWS). */
HY_QX_INLINE void hy_a5k_tile(const int fmt, int64_t n, float *s, size_t ss, const void *vw,
                              size_t ws, int nw, const void *vx, size_t xs, int nx)
{
    const char *w = vw, *x = vx;
    const int64_t nsb = n / 256;
    const int one_row = nw < 16;
    const size_t gws = one_row ? 0 : ws;
    /* Q6_K's decode does more per byte than the others' and wants its
     * rows earlier (bench_mm, B = 1 from DRAM, 16 -> 32 rows ahead: Q6_K
     * ~25 -> ~32 GFLOP/s, Q4_K/Q5_K no better); into L2, where into L1
     * halved Q4_K's (58 -> 29) */
    const size_t pf = !one_row && nx == 1
                          ? (size_t)(fmt == HY_A5K_Q6 ? 2 * HY_A5_PF_ROWS : HY_A5_PF_ROWS) * ws
                          : 0;
    const size_t pf_step = nsb > 0 ? pf / (size_t)nsb : 0;
    hy_a5k_sb_t sbuf __attribute__((aligned(64)));
    float acc[HY_A5K_CT * 16] __attribute__((aligned(64)));
    float mac[HY_A5K_CT * 16] __attribute__((aligned(64)));
    const hy_a5k_sb_t *sb = &sbuf;

    for (int g0 = 0; g0 < nw; g0 += one_row ? 1 : 16) {
        const int r = one_row ? g0 : HY_MIN(g0, nw - 16);
        const char *wr = w + (size_t)r * ws;
        for (int c0 = 0; c0 < nx; c0 += HY_A5K_CT) {
            const int ct = HY_MIN(HY_A5K_CT, nx - c0);
            memset(acc, 0, sizeof(float) * 16 * (size_t)ct);
            memset(mac, 0, sizeof(float) * 16 * (size_t)ct);
            for (int64_t i = 0; i < nsb; i++) {
                if (pf) {
                    const size_t lo_b = (size_t)i * pf_step;
                    const size_t hi_b = lo_b + pf_step + (i + 1 == nsb ? 64 : 0);
                    for (size_t off = (lo_b + 63) & ~(size_t)63; off < hi_b; off += 64)
                        _mm_prefetch(wr + pf + off, _MM_HINT_T1);
                }
                hy_a5k_unpack(fmt, wr, gws, i, &sbuf);
                for (int cc = 0; cc < ct; cc += HY_A5T_RX) {
                    const int rx = HY_MIN(HY_A5T_RX, ct - cc);
                    const char *xc =
                        x + (size_t)(c0 + cc) * xs + (size_t)i * sizeof(hy_block_q8_k_t);
                    float *a = acc + 16 * cc, *m = mac + 16 * cc;
                    if (fmt == HY_A5K_Q4) {
                        hy_a5k_compute_q4(sb, xc, xs, rx, a, m);
                    } else if (fmt == HY_A5K_Q5) {
                        hy_a5k_compute_q5(sb, xc, xs, rx, a, m);
                    } else {
                        hy_a5k_compute_q6(sb, xc, xs, rx, a, m);
                    }
                }
            }
            for (int c = 0; c < ct; c++) {
                __m512 v = _mm512_load_ps(acc + 16 * c);
                if (fmt != HY_A5K_Q6)
                    v = _mm512_sub_ps(v, _mm512_load_ps(mac + 16 * c));
                float *d = s + (size_t)(c0 + c) * ss + r;
                if (one_row)
                    *d = _mm512_cvtss_f32(v);
                else
                    _mm512_storeu_ps(d, v);
            }
        }
    }
}

/* One row: a lane of hy_a5k_tile (the same integers, the same IEEE float
 * operations). */
HY_QX_INLINE void hy_a5k_dot(const int fmt, int64_t n, float *s, const void *vw, const void *vx)
{
    const hy_block_q8_k_t *x = vx;
    const char *w = vw;
    float acc = 0.0f, mac = 0.0f;

    for (int64_t i = 0; i < n / 256; i++) {
        int32_t p = 0, corr = 0;
        float d, dmin = 0.0f;
        if (fmt != HY_A5K_Q6) {
            const int is5 = fmt == HY_A5K_Q5;
            const char *blk = w + (size_t)i * hy_a5k_bytes(fmt);
            const hy_block_q4_k_t *b4 = (const hy_block_q4_k_t *)blk;
            const hy_block_q5_k_t *b5 = (const hy_block_q5_k_t *)blk;
            const uint8_t *scales = is5 ? b5->scales : b4->scales;
            const uint8_t *qs = is5 ? b5->qs : b4->qs;
            d = hy_qx_h2f(is5 ? b5->d : b4->d);
            dmin = hy_qx_h2f(is5 ? b5->dmin : b4->dmin);
            for (int k = 0; k < 8; k++) {
                uint8_t sc, m;
                int32_t isum = 0;
                hy_quant_scale_min_k4(k, scales, &sc, &m);
                for (int l = 0; l < 32; l++) {
                    int q = (qs[32 * (k / 2) + l] >> (4 * (k & 1))) & 15;
                    if (is5)
                        q += ((b5->qh[l] >> k) & 1) << 4;
                    isum += q * x[i].qs[32 * k + l];
                }
                p += sc * isum;
                corr += m * (x[i].bsums[2 * k] + x[i].bsums[2 * k + 1]);
            }
        } else {
            const hy_block_q6_k_t *b6 = (const hy_block_q6_k_t *)w + i;
            d = hy_qx_h2f(b6->d);
            for (int e0 = 0; e0 < 256; e0 += 16) {
                int32_t isum = 0;
                for (int e = e0; e < e0 + 16; e++) {
                    const int h = e / 128, sq = (e % 128) / 32, l = e % 32;
                    const uint8_t ql = b6->ql[64 * h + 32 * (sq & 1) + l];
                    const int q = ((sq < 2 ? ql : ql >> 4) & 15) |
                                  ((b6->qh[32 * h + l] >> (2 * sq)) & 3) << 4;
                    isum += q * x[i].qs[e];
                }
                p += b6->scales[e0 / 16] * isum;
                corr += b6->scales[e0 / 16] * x[i].bsums[e0 / 16];
            }
            p -= 32 * corr;
        }
        acc = fmaf((float)p, d * x[i].d, acc);
        if (fmt != HY_A5K_Q6)
            mac = fmaf((float)corr, dmin * x[i].d, mac);
    }
    *s = fmt == HY_A5K_Q6 ? acc : acc - mac;
}

#define HY_A5K_ENTRY(name, fmt)                                                    \
    static void hy_a5k_tile_##name(int64_t n, float *s, size_t ss, const void *w, \
                                   size_t ws, int nw, const void *x, size_t xs, int nx) \
    {                                                                              \
        hy_a5k_tile(fmt, n, s, ss, w, ws, nw, x, xs, nx);                          \
    }                                                                              \
    static void hy_a5k_dot_##name(int64_t n, float *s, const void *w, const void *x) \
    {                                                                              \
        hy_a5k_dot(fmt, n, s, w, x);                                               \
    }
HY_A5K_ENTRY(q4_k, HY_A5K_Q4)
HY_A5K_ENTRY(q5_k, HY_A5K_Q5)
HY_A5K_ENTRY(q6_k, HY_A5K_Q6)

/* Slot pairs 2g and 2g+1 of qmm's panel (q[0], q[1]: 16 rows each) from a
 * dword per row of unsigned code bytes c0..c3 (elements 4g..4g+3): the
 * dword's even bytes (c0, c2) and odd bytes (c1, c3) as int16 pairs, less
 * off. */
HY_QX_INLINE void hy_a5p_put_pairs(__m512i x, short off, int32_t (*q)[2][8])
{
    const __m512i bytes = _mm512_set1_epi32(0x00FF00FF), o = _mm512_set1_epi16(off);

    _mm512_store_si512(q[0], _mm512_sub_epi16(_mm512_and_si512(x, bytes), o));
    _mm512_store_si512(q[1], _mm512_sub_epi16(_mm512_srli_epi16(x, 8), o));
}

/* A sub-block's scale per row as the scaled pairs take it: the signed
 * byte s in bytes 0 and 2 of each dword (e) or 1 and 3 (o), and off * s
 * in both int16 halves. */
typedef struct {
    __m512i e, o, off;
} hy_a5p_sc_t;

/* Byte k of each dword of u (a signed scale per row) as the scaled pairs
 * take it; off = 1 << lg.  Byte shuffles place it (the dword's bytes are
 * per 128-bit lane: 4i + k for dword i). */
HY_QX_INLINE hy_a5p_sc_t hy_a5p_scale_b(__m512i u, const int k, const unsigned lg)
{
#define HY_A5P_IE(i) (int)(0x80008000u | (uint32_t)(4 * (i) + k) * 0x10001u)
#define HY_A5P_IO(i) (int)(0x00800080u | (uint32_t)(4 * (i) + k) * 0x1000100u)
    const __m512i ie = _mm512_set4_epi32(HY_A5P_IE(3), HY_A5P_IE(2), HY_A5P_IE(1), HY_A5P_IE(0));
    const __m512i io = _mm512_set4_epi32(HY_A5P_IO(3), HY_A5P_IO(2), HY_A5P_IO(1), HY_A5P_IO(0));
#undef HY_A5P_IE
#undef HY_A5P_IO
    hy_a5p_sc_t sc;

    sc.e = _mm512_shuffle_epi8(u, ie);
    sc.o = _mm512_shuffle_epi8(u, io);
    /* s * 256 in each int16 half of o, shifted down to s * off (lg <= 8) */
    sc.off = _mm512_srai_epi16(sc.o, 8 - lg);
    return sc;
}

/* hy_a5p_put_pairs' pairs times the scale, less off * scale (w = s (c -
 * off)): vpmaddubsw multiplies the unsigned code bytes by the scale
 * placed under the even (odd) bytes and adds the zero products of the
 * others, which splits and scales in one instruction (|c s| < 2^13: no
 * saturation). */
HY_QX_INLINE void hy_a5p_put_scaled(__m512i x, const int has_off, const hy_a5p_sc_t *sc,
                                    int32_t (*q)[2][8])
{
    __m512i e = _mm512_maddubs_epi16(x, sc->e), od = _mm512_maddubs_epi16(x, sc->o);

    if (has_off) {
        e = _mm512_sub_epi16(e, sc->off);
        od = _mm512_sub_epi16(od, sc->off);
    }
    _mm512_store_si512(q[0], e);
    _mm512_store_si512(q[1], od);
}

/* The lines of the next 16 rows that the panel being unpacked prefetches
 * into L2 (qmm.h's pf): the next line a and how many are left.  Issued a
 * few at a time between its blocks, where one burst before each panel
 * left a few-token tile over a matrix from DRAM waiting (bench_mm B = 8,
 * 65,536 rows: Q8_0 120 -> 152 GFLOP/s, Q5_1 129 -> 146; in L2 the lines
 * still cost the K-quants ~5%, burst or not). */
typedef struct {
    const char *a;
    int64_t n;
} hy_a5p_pf_t;

/* Up to k lines more (k a constant where the callers unroll). */
HY_QX_INLINE void hy_a5p_pf_lines(hy_a5p_pf_t *c, const int k)
{
    for (int i = 0; i < k && c->n > 0; i++, c->n--, c->a += 64)
        _mm_prefetch(c->a, _MM_HINT_T1);
}

/* Unit i's share (a block, or a K-quant super-block, of `bytes` per row)
 * of the run at pf (16 rows x ws, contiguous): its 16 x bytes, each line
 * fetched by the unit its start falls in; none without pf. */
HY_QX_INLINE hy_a5p_pf_t hy_a5p_pf_share(const char *pf, size_t bytes, int64_t i)
{
    hy_a5p_pf_t c = {NULL, 0};

    if (pf) {
        const uintptr_t lo = (uintptr_t)(pf + (size_t)i * 16 * bytes), hi = lo + 16 * bytes;
        const uintptr_t a = (lo + 63) & ~(uintptr_t)63;
        c.a = (const char *)a;
        c.n = a < hi ? (int64_t)((hi - a + 63) / 64) : 0;
    }
    return c;
}

/* Super-block sb of 16 rows as qmm's panel (qmm.h: hy_qmm_pblk_t, the
 * int16 codes of its decoders, in pairs per slot).  hy_a5k_unpack's
 * transposes put the 16 rows in the lanes (qmm's 8-row extractors
 * transpose twice as often, and 256 bits at a time); a lane's dword of
 * codes c0..c3 (elements 4g..4g+3) is slot pairs 2g = (c0, c2) and 2g+1 =
 * (c1, c3), its even and odd bytes, times the sub-block's scale
 * (hy_a5p_put_scaled; Q6_K: less 32 times it), as qmm.c decodes them:
 *   Q4_K/Q5_K: w = sc_k q, D = d, M = -(dmin m_k);  Q6_K: w = sc (q - 32). */
HY_QX_INLINE void hy_a5k_kpanel(const int fmt, const char *w, size_t ws, int64_t i,
                                hy_qmm_pblk_t *p, hy_a5p_pf_t *pf)
{
    hy_a5k_sb_t sb __attribute__((aligned(64)));
    hy_a5k_unpack(fmt, w, ws, i, &sb);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        __m512 m = _mm512_setzero_ps();
        if (fmt != HY_A5K_Q6) {
            /* m_j: the int16 half j % 2 of mp[j / 2] */
            const __m512i mj =
                _mm512_srli_epi32(_mm512_slli_epi32(sb.mp[j / 2], 16 - 16 * (j % 2)), 16);
            m = _mm512_castsi512_ps(_mm512_xor_si512(
                _mm512_castps_si512(_mm512_mul_ps(sb.dmin, _mm512_cvtepi32_ps(mj))),
                _mm512_set1_epi32((int)0x80000000u)));
        }
        /* the scales of elements 0..15 and 16..31: Q6_K's two (its offset
         * 32 = 1 << 5), Q4_K's and Q5_K's one for both (no offset) */
        const hy_a5p_sc_t sc[2] = {
            fmt == HY_A5K_Q6 ? hy_a5p_scale_b(sb.u[j / 2], 2 * (j % 2), 5)
                             : hy_a5p_scale_b(sb.u[j / 4], j % 4, 5),
            fmt == HY_A5K_Q6 ? hy_a5p_scale_b(sb.u[j / 2], 2 * (j % 2) + 1, 5)
                             : hy_a5p_scale_b(sb.u[j / 4], j % 4, 5)};
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++)
            hy_a5p_put_scaled(sb.q[8 * j + g], fmt == HY_A5K_Q6, &sc[g / 4], &p[j].q[2 * g]);
        _mm512_store_ps(p[j].d[0], sb.d);
        _mm512_store_ps(p[j].m[0], m);
        hy_a5p_pf_lines(pf, 7);
    }
}

/* Half h of a 16-row panel block from the rows' codes as unsigned bytes
 * (lane r: row r's codes of elements 16h + 4g.. in c[g], g < 4), less
 * off. */
HY_QX_INLINE void hy_a5p_pairs_u8(const __m512i c[4], int h, short off, hy_qmm_pblk_t *p)
{
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++)
        hy_a5p_put_pairs(c[g], off, &p->q[8 * h + 2 * g]);
}

/* The same from signed code bytes: each int16 half of a pair
 * sign-extended from its byte. */
HY_QX_INLINE void hy_a5p_pairs_s8(const __m512i c[4], int h, hy_qmm_pblk_t *p)
{
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        _mm512_store_si512(p->q[8 * h + 2 * g], _mm512_srai_epi16(_mm512_slli_epi16(c[g], 8), 8));
        _mm512_store_si512(p->q[8 * h + 2 * g + 1], _mm512_srai_epi16(c[g], 8));
    }
}

/* The 32-element types whose block starts with its f16 d, 16 rows at once
 * (hy_a5t_kernel's unpack): Q4_0 (w = q - 8), IQ4_NL (w = grid[q]), Q5_0
 * (w = q - 16) and Q5_1 (w = q, M = m); D = d.  d (m, qh) from the
 * first dwords of one transpose (Q4_0's and IQ4_NL's d by a gather), the
 * nibbles from the 16 bytes at qs.  The
 * signed codes (IQ4_NL's grid values, Q5_0's q - 16) have each int16 half
 * of a pair sign-extended from its byte. */
enum { HY_A5P_Q4_0, HY_A5P_IQ4_NL, HY_A5P_Q5_0, HY_A5P_Q5_1 };
HY_QX_INLINE void hy_a5p_small(const int kind, const char *w, size_t ws, int64_t b0, int64_t nb,
                               hy_qmm_pblk_t *p)
{
    const size_t o[4] = {0, ws, 2 * ws, 3 * ws};
    /* row r's byte offset r * ws for the gather, where it fits its int32
     * indices (rows of 134 MB would not) */
    const bool gather = (kind == HY_A5P_Q4_0 || kind == HY_A5P_IQ4_NL) && ws <= INT32_MAX / 16;
    const __m512i rows = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32(gather ? (int)ws : 0));
    const size_t bsz = kind == HY_A5P_Q5_0   ? sizeof(hy_block_q5_0_t)
                       : kind == HY_A5P_Q5_1 ? sizeof(hy_block_q5_1_t)
                                             : sizeof(hy_block_q4_0_t);
    const size_t qs = kind == HY_A5P_Q5_0   ? offsetof(hy_block_q5_0_t, qs)
                      : kind == HY_A5P_Q5_1 ? offsetof(hy_block_q5_1_t, qs)
                                            : offsetof(hy_block_q4_0_t, qs);
    const __m512i grid = _mm512_broadcast_i32x4(
        _mm_loadu_si128((const __m128i *)(const void *)hy_quant_iq4nl_values));
    _Static_assert(sizeof(hy_block_iq4_nl_t) == sizeof(hy_block_q4_0_t) &&
                       offsetof(hy_block_iq4_nl_t, qs) == offsetof(hy_block_q4_0_t, qs),
                   "IQ4_NL's block is Q4_0's");

    for (int64_t ib = 0; ib < nb; ib++) {
        const char *base = w + (size_t)(b0 + ib) * bsz;
        const char *const b[4] = {base, base + 4 * ws, base + 8 * ws, base + 12 * ws};
        __m512i hd[4], lo[4], hi[4];
        /* Q4_0's and IQ4_NL's first 16 bytes hold nothing but d beside
         * codes the wload reads: one gather of the 16 rows' first dwords
         * instead of a transpose (bench_mm B = 8: Q4_0 169 -> 178, IQ4_NL
         * 169 -> 180 GFLOP/s; Q5_0's and Q5_1's d, m and qh by two gathers
         * were no faster than the transpose) */
        if (gather)
            hd[0] = _mm512_i32gather_epi32(rows, base, 1);
        else
            hy_a5t_tload(b, 0, o, hd);
        hy_a5t_wload(b, qs, o, lo, hi);
        if (kind == HY_A5P_IQ4_NL) {
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                lo[g] = _mm512_shuffle_epi8(grid, lo[g]);
                hi[g] = _mm512_shuffle_epi8(grid, hi[g]);
            }
        } else if (kind != HY_A5P_Q4_0) {
            /* qh: Q5_1's second dword; Q5_0's bytes 2..5, across the first two */
            hy_a5t_q5_codes(kind == HY_A5P_Q5_1
                                ? hd[1]
                                : _mm512_or_si512(_mm512_srli_epi32(hd[0], 16),
                                                  _mm512_slli_epi32(hd[1], 16)),
                            lo, hi, kind == HY_A5P_Q5_0);
        }
        if (kind == HY_A5P_IQ4_NL || kind == HY_A5P_Q5_0) {
            hy_a5p_pairs_s8(lo, 0, p + ib);
            hy_a5p_pairs_s8(hi, 1, p + ib);
        } else {
            hy_a5p_pairs_u8(lo, 0, kind == HY_A5P_Q4_0 ? 8 : 0, p + ib);
            hy_a5p_pairs_u8(hi, 1, kind == HY_A5P_Q4_0 ? 8 : 0, p + ib);
        }
        _mm512_store_ps(p[ib].d[0], hy_a5t_f16lo(hd[0]));
        _mm512_store_ps(p[ib].m[0], kind == HY_A5P_Q5_1
                                        ? hy_a5t_f16lo(_mm512_srli_epi32(hd[0], 16))
                                        : _mm512_setzero_ps());
    }
}

#define HY_A5P_SMALL(name, kind)                                                   \
    HY_QX_INLINE void hy_a5p_##name(const char *w, size_t ws, int64_t b0, int64_t nb, \
                                    hy_qmm_pblk_t *p)                              \
    {                                                                              \
        hy_a5p_small(kind, w, ws, b0, nb, p);                                      \
    }
HY_A5P_SMALL(q4_0, HY_A5P_Q4_0)
HY_A5P_SMALL(iq4_nl, HY_A5P_IQ4_NL)
HY_A5P_SMALL(q5_0, HY_A5P_Q5_0)
HY_A5P_SMALL(q5_1, HY_A5P_Q5_1)

/* Q8_0 (w = q; D = d): d from the first dword, the codes as bytes from
 * offsets 2 and 18, each int16 half sign-extended from its byte. */
HY_QX_INLINE void hy_a5p_q8_0(const char *w, size_t ws, int64_t b0, int64_t nb, hy_qmm_pblk_t *p)
{
    const size_t o[4] = {0, ws, 2 * ws, 3 * ws};

    for (int64_t ib = 0; ib < nb; ib++) {
        const char *base = w + (size_t)(b0 + ib) * sizeof(hy_block_q8_0_t);
        const char *const b[4] = {base, base + 4 * ws, base + 8 * ws, base + 12 * ws};
        __m512i hd[4], c[8];
        hy_a5t_tload(b, 0, o, hd);
        hy_a5t_tload32(b, 2, o, c);
        hy_a5p_pairs_s8(c, 0, p + ib);
        hy_a5p_pairs_s8(c + 4, 1, p + ib);
        _mm512_store_ps(p[ib].d[0], hy_a5t_f16lo(hd[0]));
        _mm512_store_ps(p[ib].m[0], _mm512_setzero_ps());
    }
}

/* The 2-bit fields of a Q2_K/Q3_K super-block of 16 rows (row 4q + j at
 * b[q] + o[j]) as panel blocks p[0..8): block k = 4n + j takes bits 2j.. of
 * the 32 bytes at qs + 32n, element l in byte l, as slot pairs (the even
 * and odd bytes of a dword); Q3_K (hm: its hmask transposed) adds bit k of
 * hmask[l] as 4, less 4.  Elements 0..15 take their group's scale 2k,
 * 16..31 scale 2k + 1: scale g is the signed byte g % 4 of each row's dword
 * in sb[g / 4]; Q2_K's groups' M in mn. */
HY_QX_INLINE void hy_a5p_k23(const char *const b[4], const size_t o[4], size_t qs,
                             const __m512i *hm, const __m512i sb[4], __m512 d, const __m512 *mn,
                             hy_qmm_pblk_t *p, hy_a5p_pf_t *pf)
{
    const __m512i m2 = _mm512_set1_epi8(0x03), one = _mm512_set1_epi8(0x01);

#pragma GCC unroll 2
    for (int n = 0; n < 2; n++) {
        __m512i c[8];
        hy_a5t_tload32(b, qs + 32 * (size_t)n, o, c);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const int k = 4 * n + j;
            hy_qmm_pblk_t *pk = p + k;
            const hy_a5p_sc_t sc[2] = {hy_a5p_scale_b(sb[k / 2], 2 * (k % 2), 2),
                                       hy_a5p_scale_b(sb[k / 2], 2 * (k % 2) + 1, 2)};
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                __m512i x = _mm512_and_si512(_mm512_srli_epi32(c[g], 2 * j), m2);
                if (hm) {
                    const __m512i h = _mm512_and_si512(_mm512_srli_epi32(hm[g], k), one);
                    x = _mm512_or_si512(x, _mm512_slli_epi32(h, 2));
                }
                hy_a5p_put_scaled(x, hm != NULL, &sc[g / 4], &pk->q[2 * g]);
            }
            _mm512_store_ps(pk->d[0], d);
            _mm512_store_ps(pk->m[0], mn ? mn[2 * k] : _mm512_setzero_ps());
            if (mn)
                _mm512_store_ps(pk->m2[0], mn[2 * k + 1]);
            hy_a5p_pf_lines(pf, 7);
        }
    }
}

/* Q2_K super-blocks (qmm.c's decoder: block k, element l: w = (scales[2k
 * + l/16] & 15) q, q the 2-bit code at bits 2(k%4) of qs[32(k/4) + l];
 * D = d; M = -(dmin (scales[2k] >> 4)), M2 the same for 2k+1). */
HY_QX_INLINE void hy_a5p_q2_k(const char *w, size_t ws, int64_t b0, int64_t nb, hy_qmm_pblk_t *p,
                              hy_a5p_pf_t *pf)
{
    const size_t o[4] = {0, ws, 2 * ws, 3 * ws};
    const __m512i ff = _mm512_set1_epi32(0xFF), m4 = _mm512_set1_epi8(15);

    for (int64_t ib = 0; ib < nb; ib += 8) {
        const char *base = w + (size_t)((b0 + ib) / 8) * sizeof(hy_block_q2_k_t);
        const char *const b[4] = {base, base + 4 * ws, base + 8 * ws, base + 12 * ws};
        __m512i u[4], e[4], sc[4];
        __m512 mn[16];
        hy_a5t_tload(b, offsetof(hy_block_q2_k_t, scales), o, u);
        /* d and dmin end the block: the last dword of its last 16 bytes */
        hy_a5t_tload(b, sizeof(hy_block_q2_k_t) - 16, o, e);
        const __m512 d = hy_a5t_f16lo(e[3]), dmin = hy_a5t_f16lo(_mm512_srli_epi32(e[3], 16));
#pragma GCC unroll 16
        for (int g = 0; g < 16; g++) {
            const __m512i v = _mm512_and_si512(_mm512_srli_epi32(u[g / 4], 8 * (g % 4)), ff);
            const __m512 m = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)));
            mn[g] = _mm512_castsi512_ps(
                _mm512_xor_si512(_mm512_castps_si512(m), _mm512_set1_epi32((int)0x80000000u)));
        }
        /* the scales: each byte's low nibble (0..15) */
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
            sc[q] = _mm512_and_si512(u[q], m4);
        hy_a5p_k23(b, o, offsetof(hy_block_q2_k_t, qs), NULL, sc, d, mn, p + ib, pf);
    }
}

/* IQ4_XS super-blocks (w = (ls_k - 32) grid[q], D = d): the grid looked
 * up per byte, each int16 half of a pair sign-extended from its byte. */
HY_QX_INLINE void hy_a5p_iq4_xs(const char *w, size_t ws, int64_t b0, int64_t nb,
                                hy_qmm_pblk_t *p, hy_a5p_pf_t *pf)
{
    const size_t o[4] = {0, ws, 2 * ws, 3 * ws};
    const __m512i grid = _mm512_broadcast_i32x4(
        _mm_loadu_si128((const __m128i *)(const void *)hy_quant_iq4nl_values));

    for (int64_t ib = 0; ib < nb; ib += 8) {
        const char *base = w + (size_t)((b0 + ib) / 8) * sizeof(hy_block_iq4_xs_t);
        const char *const b[4] = {base, base + 4 * ws, base + 8 * ws, base + 12 * ws};
        __m512i hd[4];
        /* d and scales_h in the first dword, scales_l in the second */
        hy_a5t_tload(b, 0, o, hd);
        const __m512 d = hy_a5t_f16lo(hd[0]);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            hy_qmm_pblk_t *pk = p + ib + k;
            const int sh = 8 * (k / 2) + 4 * (k % 2);
            const __m512i lsl =
                _mm512_and_si512(_mm512_srli_epi32(hd[1], sh), _mm512_set1_epi32(15));
            const __m512i lsh = _mm512_and_si512(_mm512_srli_epi32(hd[0], 16 + 2 * k),
                                                 _mm512_set1_epi32(3));
            const __m512i ls = _mm512_sub_epi32(_mm512_or_si512(lsl, _mm512_slli_epi32(lsh, 4)),
                                                _mm512_set1_epi32(32));
            const __m512i sc = _mm512_or_si512(_mm512_and_si512(ls, _mm512_set1_epi32(0xFFFF)),
                                               _mm512_slli_epi32(ls, 16));
            __m512i lo[4], hi[4];
            hy_a5t_wload(b, offsetof(hy_block_iq4_xs_t, qs) + 16 * (size_t)k, o, lo, hi);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++) {
                    const __m512i v = _mm512_shuffle_epi8(grid, h ? hi[g] : lo[g]);
                    const __m512i e = _mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8);
                    const __m512i od = _mm512_srai_epi16(v, 8);
                    _mm512_store_si512(pk->q[8 * h + 2 * g], _mm512_mullo_epi16(e, sc));
                    _mm512_store_si512(pk->q[8 * h + 2 * g + 1], _mm512_mullo_epi16(od, sc));
                }
            _mm512_store_ps(pk->d[0], d);
            _mm512_store_ps(pk->m[0], _mm512_setzero_ps());
            hy_a5p_pf_lines(pf, 7);
        }
    }
}

/* Q3_K super-blocks (w = (sc_g - 32) (q - (high bit ? 0 : 4)), D = d): the
 * 6-bit scales of the 16 groups by hy_qx_k3_scales16 (as qmm_avx2.c's
 * hy_q2_k3_prep builds them for 8 rows),
 * 2-bit fields as Q2_K's and bit k of hmask[l] on top. */
HY_QX_INLINE void hy_a5p_q3_k(const char *w, size_t ws, int64_t b0, int64_t nb, hy_qmm_pblk_t *p,
                              hy_a5p_pf_t *pf)
{
    const size_t o[4] = {0, ws, 2 * ws, 3 * ws};

    for (int64_t ib = 0; ib < nb; ib += 8) {
        const char *base = w + (size_t)((b0 + ib) / 8) * sizeof(hy_block_q3_k_t);
        const char *const b[4] = {base, base + 4 * ws, base + 8 * ws, base + 12 * ws};
        __m512i t[4], hm[8], sq[4];
        /* the last 16 bytes: scales from byte 2, d in the last two */
        hy_a5t_tload(b, sizeof(hy_block_q3_k_t) - 16, o, t);
        const __m512 d = hy_a5t_f16lo(_mm512_srli_epi32(t[3], 16));
        /* scales[0..3], [4..7] and [8..11]: the dwords 2 bytes into t[0..2] */
        __m512i a[3];
#pragma GCC unroll 3
        for (int i = 0; i < 3; i++)
            a[i] = _mm512_or_si512(_mm512_srli_epi32(t[i], 16), _mm512_slli_epi32(t[i + 1], 16));
        hy_qx_k3_scales16(a, sq);
        hy_a5t_tload32(b, offsetof(hy_block_q3_k_t, hmask), o, hm);
        hy_a5p_k23(b, o, offsetof(hy_block_q3_k_t, qs), hm, sq, d, NULL, p + ib, pf);
    }
}

#define HY_A5P_KQUANT(name, fmt)                                                   \
    HY_QX_INLINE void hy_a5p_##name(const char *w, size_t ws, int64_t b0, int64_t nb,  \
                                    hy_qmm_pblk_t *p, hy_a5p_pf_t *pf)             \
    {                                                                              \
        for (int64_t b = 0; b < nb; b += 8)                                        \
            hy_a5k_kpanel(fmt, w, ws, (b0 + b) / 8, p + b, pf);                    \
    }
HY_A5P_KQUANT(q4_k, HY_A5K_Q4)
HY_A5P_KQUANT(q5_k, HY_A5K_Q5)
HY_A5P_KQUANT(q6_k, HY_A5K_Q6)

/* qmm.h's contract: the panel of blocks [b0, b0+nb) of 16 rows, a unit at a
 * time (a block, or a super-block of 8), each unit's share of the next
 * rows' lines issued as it is unpacked: the 32-element types' after each
 * block, the super-blocks' a few lines after each of their blocks. */
#define HY_A5P_ENTRY1(name, bytes)                                                 \
    void hy_qmm_avx512_panel16_##name(const char *w, size_t ws, int64_t b0, int64_t nb, \
                                      hy_qmm_pblk_t *p, const char *pf)            \
    {                                                                              \
        for (int64_t b = 0; b < nb; b++) {                                         \
            hy_a5p_pf_t c = hy_a5p_pf_share(pf, (bytes), b0 + b);                  \
            hy_a5p_##name(w, ws, b0 + b, 1, p + b);                                \
            hy_a5p_pf_lines(&c, 16);                                               \
        }                                                                          \
    }
#define HY_A5P_ENTRY8(name, bytes)                                                 \
    void hy_qmm_avx512_panel16_##name(const char *w, size_t ws, int64_t b0, int64_t nb, \
                                      hy_qmm_pblk_t *p, const char *pf)            \
    {                                                                              \
        for (int64_t b = 0; b < nb; b += 8) {                                      \
            hy_a5p_pf_t c = hy_a5p_pf_share(pf, (bytes), (b0 + b) / 8);            \
            hy_a5p_##name(w, ws, b0 + b, 8, p + b, &c);                            \
            hy_a5p_pf_lines(&c, 64);                                               \
        }                                                                          \
    }
HY_A5P_ENTRY8(q4_k, sizeof(hy_block_q4_k_t))
HY_A5P_ENTRY8(q5_k, sizeof(hy_block_q5_k_t))
HY_A5P_ENTRY8(q6_k, sizeof(hy_block_q6_k_t))
HY_A5P_ENTRY8(q2_k, sizeof(hy_block_q2_k_t))
HY_A5P_ENTRY8(q3_k, sizeof(hy_block_q3_k_t))
HY_A5P_ENTRY8(iq4_xs, sizeof(hy_block_iq4_xs_t))
HY_A5P_ENTRY1(q5_0, sizeof(hy_block_q5_0_t))
HY_A5P_ENTRY1(q5_1, sizeof(hy_block_q5_1_t))
HY_A5P_ENTRY1(q8_0, sizeof(hy_block_q8_0_t))
HY_A5P_ENTRY1(q4_0, sizeof(hy_block_q4_0_t))
HY_A5P_ENTRY1(iq4_nl, sizeof(hy_block_iq4_nl_t))

/* ---- float weights (F32/F16/BF16): the GEMM's arithmetic ----
 * matmul sends every float-weight product at this level through
 * gemm_avx512.c, whatever the number of tokens, so that a token's row does
 * not depend on the batch: each output there is one FMA chain over k in
 * order, s = fma(w_k, x_k, s) from 0.  vec_dot is that chain written out
 * and the tile loops over it, so all three agree bit for bit. */
#define HY_A5F_DOT(name, wtype, conv)                                              \
    static void hy_a5_dot_##name(int64_t n, float *s, const void *vw, const void *vx) \
    {                                                                              \
        const wtype *w = vw;                                                       \
        const float *x = vx;                                                       \
        float acc = 0.0f;                                                          \
        for (int64_t k = 0; k < n; k++)                                            \
            acc = fmaf(conv(w[k]), x[k], acc);                                     \
        *s = acc;                                                                  \
    }                                                                              \
    static void hy_a5_tile_##name(int64_t n, float *s, size_t ss, const void *w,  \
                                  size_t ws, int nw, const void *x, size_t xs,    \
                                  int nx)                                          \
    {                                                                              \
        hy_quant_tile_generic(hy_a5_dot_##name, n, s, ss, w, ws, nw, x, xs, nx);   \
    }
#define HY_A5F_ID(v) (v)
HY_A5F_DOT(f32, float, HY_A5F_ID)
HY_A5F_DOT(f16, uint16_t, hy_qx_h2f)
HY_A5F_DOT(bf16, uint16_t, hy_bf16_to_f32)

const hy_quant_kernels_t hy_quant_avx512_kernels[HY_DTYPE_COUNT] = {
    [HY_DTYPE_F32] = {{HY_DTYPE_F32, hy_quant_ref_from_float_copy, hy_a5_dot_f32,
                       hy_quant_ref_to_float_f32}, hy_a5_tile_f32},
    [HY_DTYPE_F16] = {{HY_DTYPE_F32, hy_quant_ref_from_float_copy, hy_a5_dot_f16,
                       hy_qx_to_float_f16}, hy_a5_tile_f16},
    [HY_DTYPE_BF16] = {{HY_DTYPE_F32, hy_quant_ref_from_float_copy, hy_a5_dot_bf16,
                        hy_qx_to_float_bf16}, hy_a5_tile_bf16},
    [HY_DTYPE_Q4_0] = HY_QMM_ENTRY_AVX512(q4_0, hy_qx_to_float_q4_0),
    [HY_DTYPE_Q4_1] = {{HY_DTYPE_Q8_2L, hy_qx_from_float_q8_2l, hy_a5_dot_q4_1_2l,
                        hy_qx_to_float_q4_1}, hy_a5_tile_q4_1_2l},
    [HY_DTYPE_Q8_0] = HY_QMM_ENTRY_AVX512(q8_0, hy_qx_to_float_q8_0),
    /* the other quantized types: the AVX2 level's qmm kernels built again
     * with AVX-512 (qmm_avx512.c: 16 rows per zmm in the many-token
     * kernel), the AVX2 level's bits */
    HY_QMM_ENTRIES_AVX512,
};
/* The single-level partners (hy_quant_traits_q8): ggml's, and Q5_0's Q8_S
 * (vec_dot the reference: the same exact sums and float operations as the
 * tile's lanes) */
const hy_quant_kernels_t hy_quant_avx512_kernels_q8[HY_DTYPE_COUNT] = {
    [HY_DTYPE_Q5_0] = {{HY_DTYPE_Q8_S, hy_qx_from_float_q8_s, hy_quant_ref_dot_q5_0_q8s,
                        hy_quant_ref_to_float_q5_0}, hy_a5_tile_q5_0_q8s},
    [HY_DTYPE_Q4_0] = {{HY_DTYPE_Q8_0, hy_qx_from_float_q8_0, hy_a5_dot_q4_0,
                        hy_qx_to_float_q4_0}, hy_a5_tile_q4_0},
    [HY_DTYPE_Q4_1] = {{HY_DTYPE_Q8_1, hy_qx_from_float_q8_1, hy_a5_dot_q4_1_1l,
                        hy_qx_to_float_q4_1}, hy_a5_tile_q4_1_1l},
    [HY_DTYPE_Q8_0] = {{HY_DTYPE_Q8_0, hy_qx_from_float_q8_0, hy_a5_dot_q8_0,
                        hy_qx_to_float_q8_0}, hy_a5_tile_q8_0},
    [HY_DTYPE_Q4_K] = {{HY_DTYPE_Q8_K, hy_qx_from_float_q8_k, hy_a5k_dot_q4_k,
                        hy_quant_ref_to_float_q4_k}, hy_a5k_tile_q4_k},
    [HY_DTYPE_Q5_K] = {{HY_DTYPE_Q8_K, hy_qx_from_float_q8_k, hy_a5k_dot_q5_k,
                        hy_quant_ref_to_float_q5_k}, hy_a5k_tile_q5_k},
    [HY_DTYPE_Q6_K] = {{HY_DTYPE_Q8_K, hy_qx_from_float_q8_k, hy_a5k_dot_q6_k,
                        hy_quant_ref_to_float_q6_k}, hy_a5k_tile_q6_k},
};

#endif

