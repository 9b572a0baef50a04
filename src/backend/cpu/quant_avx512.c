/*
 * quant_avx512.c - AVX-512 (F/BW/VL/DQ + VNNI) kernels, compiled with those
 * flags in their own convenience library.  Q4_1 over the two-level Q8_2L
 * activations (SmolLM2's weights) puts 16 weight rows across the lanes
 * (hy_a5t_*: one exact int32 sum per block and row, VNNI dpbusd, two per
 * block for the two planes; decode tiles prefetch 16 rows ahead,
 * HY_A5_PF_ROWS); over ggml's single-level Q8_1 the same kernel takes one
 * plane, and Q5_0 over Q8_U its signed codes (the 8-bit activation mode's
 * Q4_1 and Q5_0 kernels).  ggml's single-level
 * Q8_0 partners of Q4_0/Q8_0 are 512-bit tiles with two 32-element blocks
 * per zmm, register-blocked 4 weight rows x 4 activation rows, vec_dot the
 * 1x1 instance of the same code; the K-quant partners are quant_x86.h's 256-bit kernels
 * rebuilt here with VNNI and EVEX.  Every other quantized type, Q4_0 and
 * Q8_0 included, takes the qmm kernels over Q16 (qmm_avx2.c built for this
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

/* ---- Q4_1 over Q8_2L (and Q8_1), Q5_0 over Q8_U: 16 weight rows across
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
 * A Q4_1 block's d and m of 16 rows come from one gather.  Prefill meets
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

/* Nibbles of one block of 16 rows transposed.  Row 4q + j's qs bytes are
 * at b[q] + o[j] (o[0] = 0).  Lane r of lo[k] holds row r's low nibbles of
 * qs bytes 4k..4k+3 (elements 4k..4k+3), hi[k] its high nibbles (elements
 * 16+4k..16+4k+3). */
HY_QX_INLINE void hy_a5t_wload(const char *const b[4], const size_t o[4], __m512i lo[4],
                               __m512i hi[4])
{
    __m512i v[4], t[4];

    /* v[j]'s 128-bit lane q = qs of row 4q + j, so that the 4x4 dword
     * transpose below leaves row r in lane r */
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
    const __m512i m4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        lo[k] = _mm512_and_si512(v[k], m4);
        hi[k] = _mm512_and_si512(_mm512_srli_epi16(v[k], 4), m4);
    }
}

HY_QX_INLINE __m512i hy_a5t_bcast(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Q5_0's signed codes c = q - 16 from hy_a5t_wload's nibbles and each
 * row's 32 high bits qh (lane r: row r's qh[0..3]): byte b of lo[k] is
 * element 4k + b, whose high bit is bit 4k + b of qh (hi[k]: 16 + 4k + b).
 * A byte shuffle puts the qh byte holding those bits in each byte, a test
 * against the byte's bit gives a mask, and the bytes without the bit lose
 * 16.  Returns 128 * the lane's sum of its 32 codes, exact (dpbusd with
 * ones): what the 128 of Q8_U's unsigned bytes adds to a block's sum. */
HY_QX_INLINE __m512i hy_a5t_q5_codes(__m512i qh, __m512i lo[4], __m512i hi[4])
{
    /* shuffle indices are per 128-bit lane: dword i's bytes at 4i */
    const __m512i base = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0x00000000);
    const __m512i one = _mm512_set1_epi8(1), sixteen = _mm512_set1_epi8(16);
    __m512i sum = _mm512_setzero_si512();

#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        /* bits 4k..4k+3 lie in qh byte k / 2, at (4k) % 8 upward */
        const __m512i bit = _mm512_set1_epi32((k & 1) ? (int)0x80402010 : 0x08040201);
        const __m512i sl = _mm512_add_epi8(base, _mm512_set1_epi8((char)(k / 2)));
        const __m512i sh = _mm512_add_epi8(base, _mm512_set1_epi8((char)(2 + k / 2)));
        const __mmask64 ml = _mm512_test_epi8_mask(_mm512_shuffle_epi8(qh, sl), bit);
        const __mmask64 mh = _mm512_test_epi8_mask(_mm512_shuffle_epi8(qh, sh), bit);
        lo[k] = _mm512_mask_sub_epi8(lo[k], _knot_mask64(ml), lo[k], sixteen);
        hi[k] = _mm512_mask_sub_epi8(hi[k], _knot_mask64(mh), hi[k], sixteen);
        sum = _mm512_dpbusd_epi32(sum, one, lo[k]);
        sum = _mm512_dpbusd_epi32(sum, one, hi[k]);
    }
    return _mm512_slli_epi32(sum, 7);
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
enum { HY_A5T_ROWS, HY_A5T_KEEP, HY_A5T_PANEL };
/* What the kernel multiplies: Q4_1 weights over Q8_2L (two planes) or
 * ggml's Q8_1 (one), or Q5_0 weights over Q8_U (signed 5-bit codes on
 * dpbusd's signed side, the activations as unsigned bytes q = v + 128 on
 * the other; a block's sum of codes times 128 comes back out). */
enum { HY_A5T_Q41_Q81 = 1, HY_A5T_Q41_2L = 2, HY_A5T_Q50_Q8U = 3 };
/* Blocks a prefill panel holds (640 bytes each: K up to 2048 on the stack). */
#define HY_A5T_PANEL_BLOCKS 64

/* Rows w + r*ws (r < 16) against RX activation rows x + c*xs over nb
 * blocks; s[c*ss + r] for the rows in `store`.  pf > 0: prefetch each row
 * pf bytes ahead (decode streams the weights once; see HY_A5_PF_ROWS).
 * vidx holds r*ws, which the caller checked fits an int32.  src: where the
 * blocks come from (pk: the panel of HY_A5T_KEEP and HY_A5T_PANEL). */
HY_QX_INLINE void hy_a5t_kernel(int64_t nb, float *s, size_t ss, const char *w, size_t ws,
                                const char *x, size_t xs, const int RX, __mmask16 store,
                                size_t pf, const int src, hy_a5t_blk_t *pk, const int fmt)
{
    __m512 acc[HY_A5T_RX], mac[HY_A5T_RX];
    const __m512i vidx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)ws));
    /* the d halves of the gathered (d, m) dwords to the low 256 bits, the
     * m halves to the high */
    const __m512i dmsel = _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3,
                                           1, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                           2, 0);

    /* decode's prefetch: a block's share of the run of pf bytes ahead
     * (HY_A5_PF_ROWS rows of nb blocks: whole bytes) */
    const size_t pf_step = nb > 0 ? pf / (size_t)nb : 0;
    /* Q5_0: the low dwords of 16 gathered qwords, and their low words */
    const __m512i q5_even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                              28, 30);
    const __m512i q5_dsel = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 60,
                                             56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4,
                                             0);

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
        const char *wb = b[0];
        __m512i lo[4], hi[4];
        __m512 d, m;

        if (src == HY_A5T_PANEL) {
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                lo[k] = _mm512_load_si512(&pk[ib].lo[k]);
                hi[k] = _mm512_load_si512(&pk[ib].hi[k]);
            }
            d = _mm512_load_ps(&pk[ib].d);
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
            if (fmt == HY_A5T_Q50_Q8U) {
                const char *const bq[4] = {b[0] + 6, b[1] + 6, b[2] + 6, b[3] + 6};
                hy_a5t_wload(bq, o, lo, hi);
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++)
                    b[q] += sizeof(hy_block_q5_0_t);
                /* one 8-byte gather per row (d, qh and two qs bytes): half
                 * the gathered elements of a dword gather each for d and qh */
                const __m512i g0 = _mm512_i32gather_epi64(_mm512_castsi512_si256(vidx), wb, 1);
                const __m512i g1 =
                    _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(vidx, 1), wb, 1);
                const __m512i qh = _mm512_permutex2var_epi32(
                    _mm512_srli_epi64(g0, 16), q5_even, _mm512_srli_epi64(g1, 16));
                d = _mm512_cvtph_ps(
                    _mm512_castsi512_si256(_mm512_permutex2var_epi16(g0, q5_dsel, g1)));
                m = _mm512_castsi512_ps(hy_a5t_q5_codes(qh, lo, hi));
            } else {
                const char *const bq[4] = {b[0] + 4, b[1] + 4, b[2] + 4, b[3] + 4};
                hy_a5t_wload(bq, o, lo, hi);
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++)
                    b[q] += sizeof(hy_block_q4_1_t);
                __m512i dm =
                    _mm512_permutexvar_epi16(dmsel, _mm512_i32gather_epi32(vidx, wb, 1));
                d = _mm512_cvtph_ps(_mm512_castsi512_si256(dm));
                m = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(dm, 1));
            }
            if (src == HY_A5T_KEEP) {
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    _mm512_store_si512(&pk[ib].lo[k], lo[k]);
                    _mm512_store_si512(&pk[ib].hi[k], hi[k]);
                }
                _mm512_store_ps(&pk[ib].d, d);
                _mm512_store_ps(&pk[ib].m, m);
            }
        }
#pragma GCC unroll 8
        for (int c = 0; c < RX && fmt == HY_A5T_Q50_Q8U; c++) {
            const hy_block_q8_u_t *xb = (const hy_block_q8_u_t *)(x + (size_t)c * xs) + ib;
            __m512i p = _mm512_setzero_si512(), p2 = p;
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                p = _mm512_dpbusd_epi32(p, hy_a5t_bcast((const int8_t *)xb->qs + 4 * k), lo[k]);
                p2 = _mm512_dpbusd_epi32(p2, hy_a5t_bcast((const int8_t *)xb->qs + 16 + 4 * k),
                                         hi[k]);
            }
            /* m holds 128 * the lane's sum of codes (hy_a5t_q5_codes) */
            const __m512i pv = _mm512_sub_epi32(_mm512_add_epi32(p, p2), _mm512_castps_si512(m));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pv),
                                     _mm512_mul_ps(d, _mm512_set1_ps(xb->d)), acc[c]);
        }
#pragma GCC unroll 8
        for (int c = 0; c < RX && fmt == HY_A5T_Q41_Q81; c++) {
            const hy_block_q8_1_t *xb = (const hy_block_q8_1_t *)(x + (size_t)c * xs) + ib;
            __m512i p = _mm512_setzero_si512(), p2 = p;
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                p = _mm512_dpbusd_epi32(p, lo[k], hy_a5t_bcast(xb->qs + 4 * k));
                p2 = _mm512_dpbusd_epi32(p2, hi[k], hy_a5t_bcast(xb->qs + 16 + 4 * k));
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
                ph = _mm512_dpbusd_epi32(ph, lo[k], hy_a5t_bcast(xb->hi + 4 * k));
                ph2 = _mm512_dpbusd_epi32(ph2, hi[k], hy_a5t_bcast(xb->hi + 16 + 4 * k));
                pl = _mm512_dpbusd_epi32(pl, lo[k], hy_a5t_bcast(xb->lo + 4 * k));
                pl2 = _mm512_dpbusd_epi32(pl2, hi[k], hy_a5t_bcast(xb->lo + 16 + 4 * k));
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
    for (int c = 0; c < RX; c++)
        _mm512_mask_storeu_ps(s + (size_t)c * ss, store, _mm512_add_ps(acc[c], mac[c]));
}

/* RX-token instance (RX <= HY_A5T_RX) over one group, its blocks from src. */
#define HY_A5T_K(n, srcv, fmt) \
    hy_a5t_kernel(nb, s, ss, w, ws, x, xs, n, store, pf, srcv, pk, fmt)
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
 * HY_A5T_Q41_Q81 and HY_A5T_Q50_Q8U for hy_quant_traits_q8's). */
#define HY_A5T_GROUP(name, fmt)                                                    \
    static void name(int64_t nb, float *s, size_t ss, const char *w, size_t ws,   \
                     const char *x, size_t xs, int rx, __mmask16 store, size_t pf, \
                     int src, hy_a5t_blk_t *pk)                                    \
    {                                                                              \
        _Static_assert(HY_A5T_RX == 8, "hy_a5t_group instantiates 1..8 tokens");  \
        if (src == HY_A5T_PANEL) {                                                 \
            HY_A5T_SRC(HY_A5T_PANEL, fmt)                                          \
        } else if (src == HY_A5T_KEEP) {                                           \
            HY_A5T_SRC(HY_A5T_KEEP, fmt)                                           \
        } else {                                                                   \
            HY_A5T_SRC(HY_A5T_ROWS, fmt)                                           \
        }                                                                          \
    }
HY_A5T_GROUP(hy_a5t_group_2l, HY_A5T_Q41_2L)
HY_A5T_GROUP(hy_a5t_group_1l, HY_A5T_Q41_Q81)
HY_A5T_GROUP(hy_a5t_group_q5u, HY_A5T_Q50_Q8U)
typedef void (*hy_a5t_group_fn_t)(int64_t, float *, size_t, const char *, size_t, const char *,
                                  size_t, int, __mmask16, size_t, int, hy_a5t_blk_t *);

/* Groups of 16 rows; a ragged end takes the last 16 rows again (the rows
 * it shares with the previous group get the same bits twice).  Fewer than
 * 16 rows, or rows too far apart for the gather's int32 offsets, go one
 * row at a time as 16 copies of it (ws = 0). */
HY_QX_INLINE void hy_a5t_tile(hy_a5t_group_fn_t hy_a5t_group, int64_t n, float *s, size_t ss,
                              const void *vw, size_t ws, int nw, const void *vx, size_t xs,
                              int nx)
{
    const char *w = vw, *x = vx;
    const int64_t nb = n / 32;
    /* decode: prefetch the next group's rows (HY_A5_PF_ROWS = 16) */
    const size_t pf = nx == 1 ? (size_t)HY_A5_PF_ROWS * ws : 0;

    hy_a5t_blk_t panel[HY_A5T_PANEL_BLOCKS];
    /* more than one token group: the first transposes into the panel, the
     * others read it (where the panel holds the row) */
    const int keep = nx > HY_A5T_RX && nb <= HY_A5T_PANEL_BLOCKS;

    if (nw < 16 || ws > (size_t)INT32_MAX / 16) {
        for (int r = 0; r < nw; r++)
            for (int c0 = 0; c0 < nx; c0 += HY_A5T_RX)
                hy_a5t_group(nb, s + (size_t)c0 * ss + r, ss, w + (size_t)r * ws, 0,
                             x + (size_t)c0 * xs, xs, HY_MIN(HY_A5T_RX, nx - c0), 0x1, 0,
                             HY_A5T_ROWS, NULL);
        return;
    }
    for (int r0 = 0; r0 < nw; r0 += 16) {
        const int r = HY_MIN(r0, nw - 16);
        for (int c0 = 0; c0 < nx; c0 += HY_A5T_RX)
            hy_a5t_group(nb, s + (size_t)c0 * ss + r, ss, w + (size_t)r * ws, ws,
                         x + (size_t)c0 * xs, xs, HY_MIN(HY_A5T_RX, nx - c0), 0xFFFF, pf,
                         !keep ? HY_A5T_ROWS : c0 == 0 ? HY_A5T_KEEP : HY_A5T_PANEL, panel);
    }
}

static void hy_a5_tile_q4_1_2l(int64_t n, float *s, size_t ss, const void *w, size_t ws,
                               int nw, const void *x, size_t xs, int nx)
{
    hy_a5t_tile(hy_a5t_group_2l, n, s, ss, w, ws, nw, x, xs, nx);
}

static void hy_a5_tile_q4_1_1l(int64_t n, float *s, size_t ss, const void *w, size_t ws,
                               int nw, const void *x, size_t xs, int nx)
{
    hy_a5t_tile(hy_a5t_group_1l, n, s, ss, w, ws, nw, x, xs, nx);
}

static void hy_a5_tile_q5_0_q8u(int64_t n, float *s, size_t ss, const void *w, size_t ws,
                                int nw, const void *x, size_t xs, int nx)
{
    hy_a5t_tile(hy_a5t_group_q5u, n, s, ss, w, ws, nw, x, xs, nx);
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

#define HY_A5_GENERIC_TILE(name)                                                   \
    static void hy_a5_tile_##name(int64_t n, float *s, size_t ss, const void *w,  \
                                  size_t ws, int nw, const void *x, size_t xs,    \
                                  int nx)                                          \
    {                                                                              \
        hy_quant_tile_generic(hy_qx_dot_##name, n, s, ss, w, ws, nw, x, xs, nx);   \
    }
HY_A5_GENERIC_TILE(q4_k)
HY_A5_GENERIC_TILE(q5_k)
HY_A5_GENERIC_TILE(q6_k)

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
/* The single-level partners (hy_quant_traits_q8): ggml's, and Q5_0's Q8_U
 * (vec_dot the reference: the same exact sums and float operations as the
 * tile's lanes) */
const hy_quant_kernels_t hy_quant_avx512_kernels_q8[HY_DTYPE_COUNT] = {
    [HY_DTYPE_Q5_0] = {{HY_DTYPE_Q8_U, hy_qx_from_float_q8_u, hy_quant_ref_dot_q5_0_q8u,
                        hy_quant_ref_to_float_q5_0}, hy_a5_tile_q5_0_q8u},
    [HY_DTYPE_Q4_0] = {{HY_DTYPE_Q8_0, hy_qx_from_float_q8_0, hy_a5_dot_q4_0,
                        hy_qx_to_float_q4_0}, hy_a5_tile_q4_0},
    [HY_DTYPE_Q4_1] = {{HY_DTYPE_Q8_1, hy_qx_from_float_q8_1, hy_a5_dot_q4_1_1l,
                        hy_qx_to_float_q4_1}, hy_a5_tile_q4_1_1l},
    [HY_DTYPE_Q8_0] = {{HY_DTYPE_Q8_0, hy_qx_from_float_q8_0, hy_a5_dot_q8_0,
                        hy_qx_to_float_q8_0}, hy_a5_tile_q8_0},
    [HY_DTYPE_Q4_K] = {{HY_DTYPE_Q8_K, hy_qx_from_float_q8_k, hy_qx_dot_q4_k,
                        hy_quant_ref_to_float_q4_k}, hy_a5_tile_q4_k},
    [HY_DTYPE_Q5_K] = {{HY_DTYPE_Q8_K, hy_qx_from_float_q8_k, hy_qx_dot_q5_k,
                        hy_quant_ref_to_float_q5_k}, hy_a5_tile_q5_k},
    [HY_DTYPE_Q6_K] = {{HY_DTYPE_Q8_K, hy_qx_from_float_q8_k, hy_qx_dot_q6_k,
                        hy_quant_ref_to_float_q6_k}, hy_a5_tile_q6_k},
};

#endif
