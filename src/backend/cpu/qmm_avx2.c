/*
 * qmm_avx2.c - qmm.h's contract on AVX2, one arithmetic for one token and
 * for many.  Eight weight rows sit in the eight 32-bit lanes: lane r of
 * "pair vector" p holds row r's two int16 codes for the elements of Q16
 * slot pair p, so vpmaddwd against a token's broadcast pair (v[2p],
 * v[2p+1]) adds two exact products per row, and 16 of them make the
 * block's integer sum P for 8 rows.  The float work per block and token is
 * then one convert, one multiply and one or two FMAs for 8 rows at once, in
 * the contract's order: every path below gives hy_qmm_ref_dot's bits.
 *
 * Getting 8 rows into the lanes is a transpose of 32-bit words (four or
 * eight per block: 12 or 24 shuffles for 8 rows); Q16's slot order makes
 * the rest shifts and masks (a word's even bytes, or nibbles, form one
 * pair, its odd ones the next).  Two paths use the same extractors:
 *   - one token (decode): 8 rows at a time, every block extracted into
 *     registers and consumed at once (hy_q2_dec), or for the types decode
 *     meets most, row by row without the transpose (HY_Q2_DEC_ROWS,
 *     hy_q2_dec_krows);
 *   - more tokens: a k-chunk of 16 rows is unpacked once into an L1 panel
 *     and meets every token of the tile, each broadcast pair feeding both
 *     halves (hy_q2_compute); at the AVX-512 level the panels of every
 *     type here but Q4_1 come 16 rows at once from quant_avx512.c
 *     (hy_qmm_avx512_panel16_*).  A tile of a
 *     few tokens prefetches the rows after its own (HY_TILE_PF_TOKENS).
 * A weight type plugs in with an extractor; types without one go through
 * their scalar decoder (hy_q2_unpack_decode).  Compiled with -mavx2 -mfma
 * -mf16c (cpu.mk).
 */
#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "qmm.h"
#include "quant_scales_x86.h"

#define HY_Q2_INLINE static inline __attribute__((always_inline))

/* qmm_avx512.c builds this file again for the AVX-512 level (its flags add
 * AVX-512 F/BW/VL/DQ/VNNI): the same extractors and decoders, and a panel
 * kernel with 16 rows per zmm and vpdpwssd (hy_q2_compute). */
#ifdef HY_Q2_AVX512
#define HY_Q2_PREFIX hy_qmm_avx512_
#else
#define HY_Q2_PREFIX hy_qmm_avx2_
#endif
#define HY_Q2_CAT2(a, b) a##b
#define HY_Q2_CAT(a, b) HY_Q2_CAT2(a, b)
#define HY_Q2_SYM(x) HY_Q2_CAT(HY_Q2_PREFIX, x)

/* A type of 256-element super-blocks (the K-quants, IQ4_XS), decided at
 * compile time for a constant t: the tiles instantiated per type keep only
 * their own kernels (hy_dtype_info's table is read at run time). */
HY_Q2_INLINE bool hy_q2_super(hy_dtype_t t)
{
    return t == HY_DTYPE_Q2_K || t == HY_DTYPE_Q3_K || t == HY_DTYPE_Q4_K || t == HY_DTYPE_Q5_K ||
           t == HY_DTYPE_Q6_K || t == HY_DTYPE_IQ4_XS;
}

/* A block's bytes, a constant for a constant t like hy_q2_super (the
 * prefetch loops over a 16-row block then unroll). */
HY_Q2_INLINE size_t hy_q2_block_bytes(hy_dtype_t t)
{
    switch (t) {
    case HY_DTYPE_Q4_0: return sizeof(hy_block_q4_0_t);
    case HY_DTYPE_Q4_1: return sizeof(hy_block_q4_1_t);
    case HY_DTYPE_Q5_0: return sizeof(hy_block_q5_0_t);
    case HY_DTYPE_Q5_1: return sizeof(hy_block_q5_1_t);
    case HY_DTYPE_Q8_0: return sizeof(hy_block_q8_0_t);
    case HY_DTYPE_IQ4_NL: return sizeof(hy_block_iq4_nl_t);
    case HY_DTYPE_Q2_K: return sizeof(hy_block_q2_k_t);
    case HY_DTYPE_Q3_K: return sizeof(hy_block_q3_k_t);
    case HY_DTYPE_Q4_K: return sizeof(hy_block_q4_k_t);
    case HY_DTYPE_Q5_K: return sizeof(hy_block_q5_k_t);
    case HY_DTYPE_Q6_K: return sizeof(hy_block_q6_k_t);
    case HY_DTYPE_IQ4_XS: return sizeof(hy_block_iq4_xs_t);
    default: return hy_dtype_info(t)->block_bytes;
    }
}

/* Blocks per panel: 12 x 1216 bytes stay in L1 next to the tokens' rows. */
#define HY_Q2_KB 12
/* Token rows whose sums one tile call keeps (acc and mac: 32 KB). */
#define HY_Q2_CT 256
/* HY_QMM_OFFSET16's half-block sums a tile keeps (128 KB): 2 per token
 * block, HY_Q2_CT tokens of rows up to 2,048 long once for the whole tile;
 * beyond, a chunk's at a time for each 16 rows, which cost Q2_K a fifth of
 * a 1024 x 1024 product at 256 tokens (bench_mm B = 256: 152 -> 214 GFLOP/s) */
#define HY_Q2_HS_MAX 32768
_Static_assert(HY_Q2_HS_MAX >= 2 * HY_Q2_CT * HY_Q2_KB, "a chunk's half sums fit");
/* Token rows per pass of the compute kernel over the panel (AVX-512: one
 * zmm sum per token, 32 registers). */
#ifdef HY_Q2_AVX512
#define HY_Q2_C 8
#else
#define HY_Q2_C 5
#endif
/* Decode prefetch distance, in rows: two groups of 8 ahead (one left
 * latency exposed in bench_mm on a 262144-row matrix). */
#define HY_Q2_PF_ROWS 16

/* The panel's blocks (qmm.h). */
typedef hy_qmm_pblk_t hy_q2_blk_t;

/* One block of 8 rows in registers: the 16 pair vectors, D and M. */
typedef struct {
    __m256i pv[16];
    __m256 d, m, m2;        /* m2: HY_QMM_OFFSET16 types' second M */
} hy_q2_regs_t;

/* Per-super-block state of the K-quant extractors: each row's sub-block
 * scales as int16 pairs (both halves the scale), its M terms, D; sb is
 * the super-block it holds (-1: none). */
typedef struct {
    int64_t sb;
    __m256i sc[16];
    __m256 mn[16];
    __m256 d;
    /* the words of the last quant and high-bit runs transposed, and their
     * offsets: sub-blocks that share bytes (the two nibbles of a run,
     * qh for a whole super-block) transpose them once */
    size_t tq, th;
    __m256i t[8], h[8];
} hy_q2_kst_t;

/* ---- activations ---- */

/* Same amax, d, 1/d, rounding, slot order and s association as the
 * reference, hence identical bytes; 8 blocks' scales first
 * (quant_scales_x86.h). */
#ifndef HY_Q2_AVX512 /* one quantizer serves both levels */
void hy_qmm_avx2_from_float_q16(const float *x, void *vy, int64_t n)
{
    hy_block_q16_t *y = vy;
    /* int16 elements 1 and 2 of each group of four swap places */
    const __m256i slots = _mm256_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15,
                                           0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15);
    const int64_t nb = n / 32;

    for (int64_t i0 = 0; i0 < nb; i0 += 8) {
        const int g = (int)HY_MIN((int64_t)8, nb - i0);
        float ds[8], ids[8];

        hy_qx_scales32(x + i0 * 32, g, (float)HY_QMM_VMAX, ds, ids);
        for (int k = 0; k < g; k++) {
            const float *xb = x + (i0 + k) * 32;
            hy_block_q16_t *yb = y + i0 + k;
            const __m256 id = _mm256_set1_ps(ids[k]);
            __m256 xv[4];
            __m256i v[4];
#pragma GCC unroll 16
            for (int q = 0; q < 4; q++) {
                xv[q] = _mm256_loadu_ps(xb + 8 * q);
                v[q] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(xv[q], id),
                                                          _MM_FROUND_TO_NEAREST_INT |
                                                              _MM_FROUND_NO_EXC));
            }
            /* packs works per 128-bit lane: qword order 0, 2, 1, 3 restores it */
            __m256i v0 = _mm256_permute4x64_epi64(_mm256_packs_epi32(v[0], v[1]), 0xD8);
            __m256i v1 = _mm256_permute4x64_epi64(_mm256_packs_epi32(v[2], v[3]), 0xD8);
            _mm256_storeu_si256((__m256i *)yb->v, _mm256_shuffle_epi8(v0, slots));
            _mm256_storeu_si256((__m256i *)(yb->v + 16), _mm256_shuffle_epi8(v1, slots));
            /* hy_quant_sum32's association */
            __m256 a = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(xv[0], xv[1]), xv[2]), xv[3]);
            __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
            s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            s = _mm_add_ss(s, _mm_movehdup_ps(s));
            yb->d = ds[k];
            yb->s = _mm_cvtss_f32(s);
        }
    }
}
#endif

/* ---- getting 8 rows into the lanes ---- */

HY_Q2_INLINE void hy_q2_rows(const char *w, size_t ws, int nrows, const char *rp[8])
{
#pragma GCC unroll 16
    for (int r = 0; r < 8; r++)
        rp[r] = w + (size_t)HY_MIN(r, nrows - 1) * ws;
}

/* Word i (4 bytes at o + 4i) of the 8 rows into t[i], lane r = row r, for
 * i < 4: rows r and r+4 share a load, then a 4 x 4 transpose per lane.
 * Reads exactly the 16 bytes at o of each row. */
HY_Q2_INLINE void hy_q2_words4(const char *const rp[8], size_t o, __m256i t[4])
{
    __m256i y[4], a[4];

#pragma GCC unroll 16
    for (int i = 0; i < 4; i++)
        y[i] = _mm256_loadu2_m128i((const __m128i *)(rp[i + 4] + o),
                                   (const __m128i *)(rp[i] + o));
    a[0] = _mm256_unpacklo_epi32(y[0], y[1]);
    a[1] = _mm256_unpackhi_epi32(y[0], y[1]);
    a[2] = _mm256_unpacklo_epi32(y[2], y[3]);
    a[3] = _mm256_unpackhi_epi32(y[2], y[3]);
    t[0] = _mm256_unpacklo_epi64(a[0], a[2]);
    t[1] = _mm256_unpackhi_epi64(a[0], a[2]);
    t[2] = _mm256_unpacklo_epi64(a[1], a[3]);
    t[3] = _mm256_unpackhi_epi64(a[1], a[3]);
}

/* The two f16 of each lane of t (a word per row, as hy_q2_words4 leaves
 * them) as 8 floats each: the low half returned, the high into *hi. */
HY_Q2_INLINE __m256 hy_q2_halves(__m256i t, __m256 *hi)
{
    /* [lo0..lo3 hi0..hi3 | lo4..lo7 hi4..hi7] -> [lo0..lo7 | hi0..hi7] */
    __m256i pk = _mm256_packus_epi32(_mm256_and_si256(t, _mm256_set1_epi32(0xFFFF)),
                                     _mm256_srli_epi32(t, 16));
    pk = _mm256_permute4x64_epi64(pk, 0xD8);
    if (hi)
        *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(pk, 1));
    return _mm256_cvtph_ps(_mm256_castsi256_si128(pk));
}

/* The f16 at byte offset o of each row, gathered in general-purpose
 * registers: eight 16-bit loads and shifts run on the scalar ports, where
 * hy_q2_f16x8's transpose takes ~13 of the vector shuffle slots that the
 * row decoders are short of. */
HY_Q2_INLINE __m256 hy_q2_f16x8_gpr(const char *const rp[8], size_t o)
{
    uint64_t a = 0, b = 0;

#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        uint16_t h0, h1;
        memcpy(&h0, rp[r] + o, 2);
        memcpy(&h1, rp[r + 4] + o, 2);
        a |= (uint64_t)h0 << (16 * r);
        b |= (uint64_t)h1 << (16 * r);
    }
    return _mm256_cvtph_ps(_mm_insert_epi64(_mm_cvtsi64_si128((long long)a), (long long)b, 1));
}

/* The f16 at byte offset o of each row (and the one after it into *hi),
 * through a transposed load: cheaper than eight scalar inserts.  Reads 16
 * bytes at o: the caller keeps them inside the row. */
HY_Q2_INLINE __m256 hy_q2_f16x8(const char *const rp[8], size_t o, __m256 *hi)
{
    __m256i t[4];
    hy_q2_words4(rp, o, t);
    return hy_q2_halves(t[0], hi);
}

/* ---- extractors: block b of 8 rows into registers ---- */

/* The four pair vectors of word i of a 32-element block packed as Q4_0
 * (low nibbles: pairs 2i, 2i+1; high nibbles: 8+2i, 9+2i). */
HY_Q2_INLINE void hy_q2_put_word(hy_q2_regs_t *g, int i, const __m256i q[4])
{
    g->pv[2 * i] = q[0];
    g->pv[2 * i + 1] = q[1];
    g->pv[8 + 2 * i] = q[2];
    g->pv[9 + 2 * i] = q[3];
}

/* Q4_0/Q4_1: word i of qs holds elements 4i..4i+3 (low nibbles) and
 * 16+4i.. (high nibbles); as two int16 each, the low nibbles of its even
 * bytes are elements (4i, 4i+2) = pair 2i, of its odd bytes pair 2i+1, and
 * the high nibbles pairs 8+2i and 9+2i. */
HY_Q2_INLINE void hy_q2_nib_pairs(const char *const rp[8], size_t o, int sub8, hy_q2_regs_t *g)
{
    const __m256i m4 = _mm256_set1_epi16(0x000F), eight = _mm256_set1_epi16(8);
    __m256i t[4];

    hy_q2_words4(rp, o, t);
#pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        __m256i q[4] = {_mm256_and_si256(t[i], m4),
                        _mm256_and_si256(_mm256_srli_epi16(t[i], 8), m4),
                        _mm256_and_si256(_mm256_srli_epi16(t[i], 4), m4),
                        _mm256_srli_epi16(t[i], 12)};
#pragma GCC unroll 16
        for (int j = 0; j < 4; j++)
            if (sub8)
                q[j] = _mm256_sub_epi16(q[j], eight);
        hy_q2_put_word(g, i, q);
    }
}

HY_Q2_INLINE void hy_q2_x_q4_0(const char *const rp[8], int64_t b, hy_q2_regs_t *g,
                               hy_q2_kst_t *st)
{
    (void)st;
    size_t o = (size_t)b * sizeof(hy_block_q4_0_t);
    hy_q2_nib_pairs(rp, o + 2, 1, g);
    g->d = hy_q2_f16x8(rp, o, NULL);
    g->m = _mm256_setzero_ps();
}

HY_Q2_INLINE void hy_q2_x_q4_1(const char *const rp[8], int64_t b, hy_q2_regs_t *g,
                               hy_q2_kst_t *st)
{
    (void)st;
    size_t o = (size_t)b * sizeof(hy_block_q4_1_t);
    hy_q2_nib_pairs(rp, o + 4, 0, g);
    g->d = hy_q2_f16x8(rp, o, &g->m);
}

/* Q8_0: word i holds elements 4i..4i+3; its even bytes sign-extended are
 * pair 2i, its odd bytes pair 2i+1. */
HY_Q2_INLINE void hy_q2_x_q8_0(const char *const rp[8], int64_t b, hy_q2_regs_t *g,
                               hy_q2_kst_t *st)
{
    (void)st;
    size_t o = (size_t)b * sizeof(hy_block_q8_0_t);
    __m256i t[8];

    hy_q2_words4(rp, o + 2, t);
    hy_q2_words4(rp, o + 18, t + 4);
#pragma GCC unroll 16
    for (int i = 0; i < 8; i++) {
        g->pv[2 * i] = _mm256_srai_epi16(_mm256_slli_epi16(t[i], 8), 8);
        g->pv[2 * i + 1] = _mm256_srai_epi16(t[i], 8);
    }
    g->d = hy_q2_f16x8(rp, o, NULL);
    g->m = _mm256_setzero_ps();
}


/* ---- K-quants: 256-element super-blocks, sub-block scales folded ---- */

/* Words 0..7 of the 32 bytes at o into t (as hy_q2_words4), unless t
 * already holds them (*at == o). */
HY_Q2_INLINE void hy_q2_words8(const char *const rp[8], size_t o, size_t *at, __m256i t[8])
{
    if (*at == o)
        return;
    hy_q2_words4(rp, o, t);
    hy_q2_words4(rp, o + 16, t + 4);
    *at = o;
}

/* Q4_K/Q5_K super-block sb of the 8 rows: D = d, and per sub-block k the
 * int16-pair scales sc_k and M = -(dmin*m_k), as qmm.c decodes them.  The
 * first 16 bytes (d, dmin, scales[12]) come in transposed, so the 6-bit
 * unpacking runs for the 8 rows at once. */
static void hy_q2_k45_prep(const char *const rp[8], int64_t sb, size_t bsz, hy_q2_kst_t *st)
{
    const __m256i k1 = _mm256_set1_epi32(0x3f3f3f3f), k2 = _mm256_set1_epi32(0x0f0f0f0f);
    const __m256i k3 = _mm256_set1_epi32(0x03030303), ff = _mm256_set1_epi32(0xFF);
    __m256i t[4], sc[2], mn[2];
    __m256 dmin;

    st->sb = sb;
    hy_q2_words4(rp, (size_t)sb * bsz, t);
    st->d = hy_q2_halves(t[0], &dmin);
    /* t[1..3] = scales words u0..u2 of each row; bytes of sc[0], sc[1]
     * are sc_0..3, sc_4..7 and of mn[] the mins (hy_quant_scale_min_k4) */
    sc[0] = _mm256_and_si256(t[1], k1);
    mn[0] = _mm256_and_si256(t[2], k1);
    sc[1] = _mm256_or_si256(_mm256_and_si256(t[3], k2),
                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(t[1], 6), k3), 4));
    mn[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(t[3], 4), k2),
                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(t[2], 6), k3), 4));
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        const __m128i sh = _mm_cvtsi32_si128(8 * (k % 4));
        __m256i s = _mm256_and_si256(_mm256_srl_epi32(sc[k / 4], sh), ff);
        __m256i m = _mm256_and_si256(_mm256_srl_epi32(mn[k / 4], sh), ff);
        st->sc[k] = _mm256_or_si256(s, _mm256_slli_epi32(s, 16));
        st->mn[k] = _mm256_xor_ps(_mm256_mul_ps(dmin, _mm256_cvtepi32_ps(m)),
                                  _mm256_set1_ps(-0.0f));
    }
}

/* Q4_K/Q5_K block b: sub-block k = b % 8 is the low (k even) or high
 * nibbles of 32-byte chunk k / 2; Q5_K adds bit k of qh as 16. */
HY_Q2_INLINE void hy_q2_x_k45(const char *const rp[8], int64_t b, hy_q2_regs_t *g,
                              hy_q2_kst_t *st, const int is5)
{
    const size_t bsz = is5 ? sizeof(hy_block_q5_k_t) : sizeof(hy_block_q4_k_t);
    const size_t qs = is5 ? offsetof(hy_block_q5_k_t, qs) : offsetof(hy_block_q4_k_t, qs);
    const int k = (int)(b % 8), shift = (k & 1) * 4;
    const size_t o = (size_t)(b / 8) * bsz;
    const __m256i m4 = _mm256_set1_epi16(0x000F), one = _mm256_set1_epi16(1);
    const __m128i sh = _mm_cvtsi32_si128(shift), shh = _mm_cvtsi32_si128(k);
    const __m128i shh8 = _mm_cvtsi32_si128(k + 8);

    if (st->sb != b / 8)
        hy_q2_k45_prep(rp, b / 8, bsz, st);
    hy_q2_words8(rp, o + qs + (size_t)(k / 2) * 32, &st->tq, st->t);
    if (is5)
        hy_q2_words8(rp, o + offsetof(hy_block_q5_k_t, qh), &st->th, st->h);
    const __m256i *t = st->t, *h = st->h;
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        __m256i q = _mm256_srl_epi16(t[i], sh);
        __m256i e = _mm256_and_si256(q, m4), od = _mm256_and_si256(_mm256_srli_epi16(q, 8), m4);
        if (is5) {
            e = _mm256_or_si256(e, _mm256_slli_epi16(
                                       _mm256_and_si256(_mm256_srl_epi16(h[i], shh), one), 4));
            od = _mm256_or_si256(od, _mm256_slli_epi16(
                                         _mm256_and_si256(_mm256_srl_epi16(h[i], shh8), one), 4));
        }
        g->pv[2 * i] = _mm256_mullo_epi16(e, st->sc[k]);
        g->pv[2 * i + 1] = _mm256_mullo_epi16(od, st->sc[k]);
    }
    g->d = st->d;
    g->m = st->mn[k];
}

HY_Q2_INLINE void hy_q2_x_q4_k(const char *const rp[8], int64_t b, hy_q2_regs_t *g,
                               hy_q2_kst_t *st)
{
    hy_q2_x_k45(rp, b, g, st, 0);
}

HY_Q2_INLINE void hy_q2_x_q5_k(const char *const rp[8], int64_t b, hy_q2_regs_t *g,
                               hy_q2_kst_t *st)
{
    hy_q2_x_k45(rp, b, g, st, 1);
}

/* Q6_K super-block sb: D = d and the 16 signed 16-element scales as
 * int16 pairs (the scales come in transposed, four per word). */
static void hy_q2_k6_prep(const char *const rp[8], int64_t sb, hy_q2_kst_t *st)
{
    const size_t o = (size_t)sb * sizeof(hy_block_q6_k_t);
    __m256i t[4];

    st->sb = sb;
    /* d ends the block: the 16 bytes that end with it, word 3's high half */
    hy_q2_words4(rp, o + offsetof(hy_block_q6_k_t, d) + 2 - 16, t);
    hy_q2_halves(t[3], &st->d);
    hy_q2_words4(rp, o + offsetof(hy_block_q6_k_t, scales), t);
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) {
        /* byte k % 4 of word k / 4, sign-extended, into both int16 halves */
        __m256i s = _mm256_srai_epi32(_mm256_sll_epi32(t[k / 4],
                                                       _mm_cvtsi32_si128(24 - 8 * (k % 4))), 24);
        st->sc[k] = _mm256_or_si256(_mm256_and_si256(s, _mm256_set1_epi32(0xFFFF)),
                                    _mm256_slli_epi32(s, 16));
    }
}

/* Q6_K block b: j = b % 8 is part m = j % 4 of half j / 4: the low (m even)
 * or high nibbles of ql[64*half + 32*(m & 1) ...] with bits 2m, 2m+1 of
 * qh[32*half ...] on top, minus 32, times the scale of its 16 elements. */
HY_Q2_INLINE void hy_q2_x_q6_k(const char *const rp[8], int64_t b, hy_q2_regs_t *g,
                               hy_q2_kst_t *st)
{
    const int j = (int)(b % 8), half = j / 4, m = j % 4;
    const size_t o = (size_t)(b / 8) * sizeof(hy_block_q6_k_t);
    const __m256i m4 = _mm256_set1_epi16(0x000F), m3 = _mm256_set1_epi16(3);
    const __m256i k32 = _mm256_set1_epi16(32);
    const __m128i sl = _mm_cvtsi32_si128(m < 2 ? 0 : 4), shh = _mm_cvtsi32_si128(2 * m);
    const __m128i shh8 = _mm_cvtsi32_si128(2 * m + 8);

    if (st->sb != b / 8)
        hy_q2_k6_prep(rp, b / 8, st);
    hy_q2_words8(rp, o + (size_t)(64 * half + 32 * (m & 1)), &st->tq, st->t);
    hy_q2_words8(rp, o + offsetof(hy_block_q6_k_t, qh) + (size_t)(32 * half), &st->th, st->h);
    const __m256i *t = st->t, *h = st->h;
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        /* pairs 0..7 are elements 0..15 (scale 2m), 8..15 the rest */
        const __m256i scv = st->sc[8 * half + 2 * m + (i >= 4)];
        __m256i q = _mm256_srl_epi16(t[i], sl);
        __m256i e = _mm256_or_si256(_mm256_and_si256(q, m4),
                                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(h[i], shh), m3), 4));
        __m256i od = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 8), m4),
                                     _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(h[i], shh8), m3), 4));
        g->pv[2 * i] = _mm256_mullo_epi16(_mm256_sub_epi16(e, k32), scv);
        g->pv[2 * i + 1] = _mm256_mullo_epi16(_mm256_sub_epi16(od, k32), scv);
    }
    g->d = st->d;
    g->m = _mm256_setzero_ps();
}

/* ---- the 32-element types of quant (Q5_0, Q5_1, IQ4_NL) ---- */

/* Q5_0/Q5_1: hy_q2_nib_pairs' nibbles with the 5th bits on top, minus off.
 * Bit j of qh (lanes: each row's 32 bits) is element j's.  With
 * L = lo16 | lo16 << 14 (lo16: bits 0..15), bits 0 and 16 of L >> 4i are
 * elements 4i and 4i+2 (pair 2i's two halves), bits 1 and 17 elements
 * 4i+1 and 4i+3 (pair 2i+1); the same from bits 16..31 for the high
 * nibbles (pairs 8 + 2i, 9 + 2i). */
HY_Q2_INLINE void hy_q2_q5_pairs(const __m256i t[4], __m256i qh, int off, hy_q2_regs_t *g)
{
    const __m256i m4 = _mm256_set1_epi16(0x000F), b4 = _mm256_set1_epi16(0x0010);
    const __m256i lo16 = _mm256_and_si256(qh, _mm256_set1_epi32(0xFFFF));
    const __m256i hi16 = _mm256_srli_epi32(qh, 16);
    const __m256i L = _mm256_or_si256(lo16, _mm256_slli_epi32(lo16, 14));
    const __m256i H = _mm256_or_si256(hi16, _mm256_slli_epi32(hi16, 14));

#pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        const __m256i a = _mm256_srli_epi32(L, 4 * i), c = _mm256_srli_epi32(H, 4 * i);
        __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(t[i], m4),
                            _mm256_and_si256(_mm256_slli_epi16(a, 4), b4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(t[i], 8), m4),
                            _mm256_and_si256(_mm256_slli_epi16(a, 3), b4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(t[i], 4), m4),
                            _mm256_and_si256(_mm256_slli_epi16(c, 4), b4)),
            _mm256_or_si256(_mm256_srli_epi16(t[i], 12),
                            _mm256_and_si256(_mm256_slli_epi16(c, 3), b4))};
#pragma GCC unroll 16
        for (int j = 0; j < 4; j++)
            if (off)
                q[j] = _mm256_sub_epi16(q[j], _mm256_set1_epi16((short)off));
        hy_q2_put_word(g, i, q);
    }
}

/* Q5_0 (d, qh at byte 2, qs at 6; 22 bytes): the first 16 bytes give d and
 * qh (straddling words 0 and 1), the last 16 qs. */
HY_Q2_INLINE void hy_q2_x_q5_0(const char *const rp[8], int64_t b, hy_q2_regs_t *g,
                               hy_q2_kst_t *st)
{
    (void)st;
    size_t o = (size_t)b * sizeof(hy_block_q5_0_t);
    __m256i t[4], q[4];

    hy_q2_words4(rp, o, t);
    hy_q2_words4(rp, o + offsetof(hy_block_q5_0_t, qs), q);
    hy_q2_q5_pairs(q, _mm256_or_si256(_mm256_srli_epi32(t[0], 16), _mm256_slli_epi32(t[1], 16)),
                   16, g);
    g->d = hy_q2_halves(t[0], NULL);
    g->m = _mm256_setzero_ps();
}

/* Q5_1 (d, m, qh at byte 4, qs at 8; 24 bytes). */
HY_Q2_INLINE void hy_q2_x_q5_1(const char *const rp[8], int64_t b, hy_q2_regs_t *g,
                               hy_q2_kst_t *st)
{
    (void)st;
    size_t o = (size_t)b * sizeof(hy_block_q5_1_t);
    __m256i t[4], q[4];

    hy_q2_words4(rp, o, t);
    hy_q2_words4(rp, o + offsetof(hy_block_q5_1_t, qs), q);
    hy_q2_q5_pairs(q, t[1], 0, g);
    g->d = hy_q2_halves(t[0], &g->m);
}

/* 16 bytes of IQ4 grid indices per row (t, packed as Q4_0's nibbles) ->
 * the grid values as pairs, times the int16-pair scale sc unless NULL
 * (IQ4_XS).  The lookup works on bytes; even and odd bytes are then
 * sign-extended into the two pair halves. */
HY_Q2_INLINE void hy_q2_iq4_pairs(const __m256i t[4], const __m256i *sc, hy_q2_regs_t *g)
{
    const __m256i grid = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)hy_quant_iq4nl_values));
    const __m256i m4 = _mm256_set1_epi8(0x0F);

#pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        const __m256i lo = _mm256_shuffle_epi8(grid, _mm256_and_si256(t[i], m4));
        const __m256i hi = _mm256_shuffle_epi8(grid, _mm256_and_si256(_mm256_srli_epi16(t[i], 4), m4));
        __m256i q[4] = {_mm256_srai_epi16(_mm256_slli_epi16(lo, 8), 8), _mm256_srai_epi16(lo, 8),
                        _mm256_srai_epi16(_mm256_slli_epi16(hi, 8), 8), _mm256_srai_epi16(hi, 8)};
#pragma GCC unroll 16
        for (int j = 0; j < 4; j++)
            if (sc)
                q[j] = _mm256_mullo_epi16(q[j], *sc);
        hy_q2_put_word(g, i, q);
    }
}

/* IQ4_NL (d, qs at byte 2; 18 bytes). */
HY_Q2_INLINE void hy_q2_x_iq4_nl(const char *const rp[8], int64_t b, hy_q2_regs_t *g,
                                 hy_q2_kst_t *st)
{
    (void)st;
    size_t o = (size_t)b * sizeof(hy_block_iq4_nl_t);
    __m256i t[4];

    hy_q2_words4(rp, o + offsetof(hy_block_iq4_nl_t, qs), t);
    hy_q2_iq4_pairs(t, NULL, g);
    g->d = hy_q2_f16x8(rp, o, NULL);
    g->m = _mm256_setzero_ps();
}

/* ---- the super-block types of quant (Q2_K, Q3_K, IQ4_XS) ---- */

/* One int32 lane per row -> the int16 pair (s, s) of its low 16 bits. */
HY_Q2_INLINE __m256i hy_q2_pair16(__m256i s)
{
    return _mm256_or_si256(_mm256_and_si256(s, _mm256_set1_epi32(0xFFFF)),
                           _mm256_slli_epi32(s, 16));
}

/* IQ4_XS super-block sb (d, scales_h, scales_l[4], qs[128]): D = d and the
 * 8 sub-block scales (6 bits, minus 32) as int16 pairs.  Scale k's low
 * nibble is bits 4k.. of the scales_l word, its high bits 2k.. of
 * scales_h (the upper half of word 0). */
static void hy_q2_iq4xs_prep(const char *const rp[8], int64_t sb, hy_q2_kst_t *st)
{
    __m256i t[4];

    st->sb = sb;
    hy_q2_words4(rp, (size_t)sb * sizeof(hy_block_iq4_xs_t), t);
    st->d = hy_q2_halves(t[0], NULL);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        __m256i lo = _mm256_and_si256(_mm256_srli_epi32(t[1], 4 * k), _mm256_set1_epi32(15));
        __m256i hi = _mm256_and_si256(_mm256_srli_epi32(t[0], 16 + 2 * k), _mm256_set1_epi32(3));
        __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)),
                                      _mm256_set1_epi32(32));
        st->sc[k] = hy_q2_pair16(ls);
    }
}

/* IQ4_XS block b: sub-block k = b % 8 is qs[16k ..] (IQ4_NL's packing),
 * times its scale. */
HY_Q2_INLINE void hy_q2_x_iq4_xs(const char *const rp[8], int64_t b, hy_q2_regs_t *g,
                                 hy_q2_kst_t *st)
{
    const int k = (int)(b % 8);
    const size_t o = (size_t)(b / 8) * sizeof(hy_block_iq4_xs_t);
    __m256i t[4];

    if (st->sb != b / 8)
        hy_q2_iq4xs_prep(rp, b / 8, st);
    hy_q2_words4(rp, o + offsetof(hy_block_iq4_xs_t, qs) + 16 * (size_t)k, t);
    hy_q2_iq4_pairs(t, &st->sc[k], g);
    g->d = st->d;
    g->m = _mm256_setzero_ps();
}

/* Q3_K super-block sb: D = d and the 16 group scales (hy_quant_scale_q3_k,
 * minus 32) as int16 pairs.  scales[12] and d are the last 14 bytes, read
 * as the 16 that end the block: word 0's upper half and words 1..3 hold
 * scales[0..11] two bytes off, word 3's upper half d. */
static void hy_q2_k3_prep(const char *const rp[8], int64_t sb, hy_q2_kst_t *st)
{
    const size_t o = (size_t)sb * sizeof(hy_block_q3_k_t) + sizeof(hy_block_q3_k_t) - 16;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    __m256i t[4], s[4];

    st->sb = sb;
    hy_q2_words4(rp, o, t);
    hy_q2_halves(t[3], &st->d);
    /* a0 = scales[0..3], a1 = scales[4..7], hb = scales[8..11] */
    const __m256i a0 = _mm256_or_si256(_mm256_srli_epi32(t[0], 16), _mm256_slli_epi32(t[1], 16));
    const __m256i a1 = _mm256_or_si256(_mm256_srli_epi32(t[1], 16), _mm256_slli_epi32(t[2], 16));
    const __m256i hb = _mm256_or_si256(_mm256_srli_epi32(t[2], 16), _mm256_slli_epi32(t[3], 16));
    /* byte j of s[q] is scale 4q + j: low nibble of scales[g % 8] (upper
     * for g >= 8) and 2-bit field g / 4 of scales[8 + g % 4] */
    s[0] = _mm256_or_si256(_mm256_and_si256(a0, m4), _mm256_slli_epi32(_mm256_and_si256(hb, m2), 4));
    s[1] = _mm256_or_si256(_mm256_and_si256(a1, m4),
                           _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 2), m2), 4));
    s[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(a0, 4), m4),
                           _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 4), m2), 4));
    s[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(a1, 4), m4),
                           _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 6), m2), 4));
#pragma GCC unroll 16
    for (int g = 0; g < 16; g++) {
        __m256i v = _mm256_sub_epi8(s[g / 4], _mm256_set1_epi8(32));
        /* byte g % 4, sign-extended */
        v = _mm256_srai_epi32(_mm256_sll_epi32(v, _mm_cvtsi32_si128(24 - 8 * (g % 4))), 24);
        st->sc[g] = hy_q2_pair16(v);
    }
}

/* The 2-bit fields of Q2_K/Q3_K block b (k = b % 8): bits 2(k % 4).. of
 * the 32 bytes at byte qs + 32(k / 4) of the super-block, element l in byte
 * l; pairs 0..7 (elements 0..15) and 8..15 each take their group's scale
 * sc[2k], sc[2k+1].  Q3_K (hm) adds bit k of hmask[l] as 4, minus 4. */
HY_Q2_INLINE void hy_q2_k23_pairs(const char *const rp[8], int64_t b, size_t bsz, size_t qs,
                                  int hm, hy_q2_regs_t *g, hy_q2_kst_t *st)
{
    const int k = (int)(b % 8);
    const size_t o = (size_t)(b / 8) * bsz;
    const __m256i m2 = _mm256_set1_epi16(3), one = _mm256_set1_epi16(1);
    const __m256i four = _mm256_set1_epi16(4);
    const __m128i sh = _mm_cvtsi32_si128(2 * (k % 4)), shh = _mm_cvtsi32_si128(k);

    hy_q2_words8(rp, o + qs + 32 * (size_t)(k / 4), &st->tq, st->t);
    if (hm)
        hy_q2_words8(rp, o + offsetof(hy_block_q3_k_t, hmask), &st->th, st->h);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        const __m256i scv = st->sc[2 * k + (i >= 4)];
        const __m256i q = _mm256_srl_epi16(st->t[i], sh);
        __m256i e = _mm256_and_si256(q, m2), od = _mm256_and_si256(_mm256_srli_epi16(q, 8), m2);
        if (hm) {
            const __m256i h = _mm256_srl_epi16(st->h[i], shh);
            e = _mm256_sub_epi16(_mm256_or_si256(e, _mm256_slli_epi16(_mm256_and_si256(h, one), 2)),
                                 four);
            od = _mm256_sub_epi16(
                _mm256_or_si256(od, _mm256_slli_epi16(
                                        _mm256_and_si256(_mm256_srli_epi16(h, 8), one), 2)),
                four);
        }
        g->pv[2 * i] = _mm256_mullo_epi16(e, scv);
        g->pv[2 * i + 1] = _mm256_mullo_epi16(od, scv);
    }
}

HY_Q2_INLINE void hy_q2_x_q3_k(const char *const rp[8], int64_t b, hy_q2_regs_t *g,
                               hy_q2_kst_t *st)
{
    if (st->sb != b / 8)
        hy_q2_k3_prep(rp, b / 8, st);
    hy_q2_k23_pairs(rp, b, sizeof(hy_block_q3_k_t), offsetof(hy_block_q3_k_t, qs), 1, g, st);
    g->d = st->d;
    g->m = _mm256_setzero_ps();
}

/* Q2_K super-block sb (scales[16], qs[64], d, dmin): D = d, group g's
 * scale (low nibble of scales[g]) as int16 pairs and M = -(dmin*m_g)
 * (high nibble), as qmm.c decodes them. */
static void hy_q2_k2_prep(const char *const rp[8], int64_t sb, hy_q2_kst_t *st)
{
    const size_t o = (size_t)sb * sizeof(hy_block_q2_k_t);
    const __m256i ff = _mm256_set1_epi32(0xFF), m4 = _mm256_set1_epi32(15);
    __m256i t[4], u[4];
    __m256 dmin;

    st->sb = sb;
    hy_q2_words4(rp, o, t);
    /* d and dmin end the block: the 16 bytes that end with them */
    hy_q2_words4(rp, o + sizeof(hy_block_q2_k_t) - 16, u);
    st->d = hy_q2_halves(u[3], &dmin);
#pragma GCC unroll 16
    for (int g = 0; g < 16; g++) {
        __m256i v = _mm256_and_si256(_mm256_srl_epi32(t[g / 4], _mm_cvtsi32_si128(8 * (g % 4))), ff);
        st->sc[g] = hy_q2_pair16(_mm256_and_si256(v, m4));
        st->mn[g] = _mm256_xor_ps(_mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4))),
                                  _mm256_set1_ps(-0.0f));
    }
}

HY_Q2_INLINE void hy_q2_x_q2_k(const char *const rp[8], int64_t b, hy_q2_regs_t *g,
                               hy_q2_kst_t *st)
{
    const int k = (int)(b % 8);

    if (st->sb != b / 8)
        hy_q2_k2_prep(rp, b / 8, st);
    hy_q2_k23_pairs(rp, b, sizeof(hy_block_q2_k_t), offsetof(hy_block_q2_k_t, qs), 0, g, st);
    g->d = st->d;
    g->m = st->mn[2 * k];
    g->m2 = st->mn[2 * k + 1];
}

/* The types with an extractor: name, weight type and qmm.h flags (those of
 * qmm.c's table; the kernels are specialised on them).  HY_Q2_TYPES_T are
 * those whose one-token decoder is the transposed extractor (hy_q2_dec);
 * Q8_0's, Q4_0's, Q5_0's and IQ4_NL's are row-wise (HY_Q2_DEC_ROWS), Q4_K's
 * and Q6_K's row-wise with transposed super-block scales (hy_q2_dec_krows). */
#define HY_Q2_TYPES(X) \
    X(q8_0, HY_DTYPE_Q8_0, 0) \
    X(q4_0, HY_DTYPE_Q4_0, 0) \
    X(q5_0, HY_DTYPE_Q5_0, 0) \
    X(iq4_nl, HY_DTYPE_IQ4_NL, 0) \
    X(q4_k, HY_DTYPE_Q4_K, HY_QMM_OFFSET) \
    X(q6_k, HY_DTYPE_Q6_K, HY_QMM_CHUNK16) \
    HY_Q2_TYPES_T(X)
#define HY_Q2_TYPES_T(X) \
    X(q4_1, HY_DTYPE_Q4_1, HY_QMM_OFFSET) \
    X(q5_k, HY_DTYPE_Q5_K, HY_QMM_OFFSET) \
    X(q5_1, HY_DTYPE_Q5_1, HY_QMM_OFFSET) \
    X(q2_k, HY_DTYPE_Q2_K, HY_QMM_OFFSET16) \
    X(q3_k, HY_DTYPE_Q3_K, 0) \
    X(iq4_xs, HY_DTYPE_IQ4_XS, HY_QMM_CHUNK16)

/* ---- the one-token kernel ---- */

HY_Q2_INLINE __m256i hy_q2_bcast(const int16_t *v)
{
    int32_t t;
    memcpy(&t, v, 4);
    return _mm256_set1_epi32(t);
}

/* V_0 * d and V_1 * d of a Q16 block (qmm.h: the sums of v over elements
 * 0..15 and 16..31, exact in int32 and in float, times d once rounded) in
 * lanes 0 and 1: what HY_QMM_OFFSET16's offsets multiply. */
HY_Q2_INLINE __m128 hy_q2_halfsums(const hy_block_q16_t *xb)
{
    const __m256i one = _mm256_set1_epi16(1);
    __m256i a = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->v), one);
    __m256i b = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xb->v + 16)), one);
    __m256i h = _mm256_hadd_epi32(a, b);

    h = _mm256_hadd_epi32(h, h);
    __m128i v = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    return _mm_mul_ps(_mm_cvtepi32_ps(v), _mm_set1_ps(xb->d));
}

/* The contract's step for one block of 8 rows and one token: acc (and mac)
 * updated in place. */
HY_Q2_INLINE void hy_q2_step(const hy_q2_regs_t *g, const hy_block_q16_t *xb, __m256 *acc,
                             __m256 *mac, const int flags)
{
    const __m256 sc = _mm256_mul_ps(g->d, _mm256_set1_ps(xb->d));
    __m256i P = _mm256_setzero_si256();

#pragma GCC unroll 16
    for (int p = 0; p < 16; p++) {
        if ((flags & HY_QMM_CHUNK16) && p == 8) {
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(P), sc, *acc);
            P = _mm256_setzero_si256();
        }
        P = _mm256_add_epi32(P, _mm256_madd_epi16(g->pv[p], hy_q2_bcast(xb->v + 2 * p)));
    }
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(P), sc, *acc);
    if (flags & HY_QMM_OFFSET)
        *mac = _mm256_fmadd_ps(g->m, _mm256_set1_ps(xb->s), *mac);
    if (flags & HY_QMM_OFFSET16) {
        const __m128 u = hy_q2_halfsums(xb);
        *mac = _mm256_fmadd_ps(g->m, _mm256_broadcastss_ps(u), *mac);
        *mac = _mm256_fmadd_ps(g->m2, _mm256_broadcastss_ps(_mm_movehdup_ps(u)), *mac);
    }
}

/* hs[2 (c hn + j) + h] = half h of block b0 + j (j < nb) of token row c
 * (c < nx) of x (Q16 rows, stride xs): hy_q2_halfsums' floats, which the
 * panel kernel reads per token and block. */
static void hy_q2_halfsums_to(float *hs, const char *x, size_t xs, int nx, int64_t b0,
                              int64_t nb, int64_t hn)
{
    for (int c = 0; c < nx; c++)
        for (int64_t j = 0; j < nb; j++)
            _mm_storel_pi((__m64 *)(hs + 2 * ((size_t)c * (size_t)hn + (size_t)j)),
                          hy_q2_halfsums((const hy_block_q16_t *)(x + (size_t)c * xs) + b0 + j));
}

/* The share of block b (of nb) of the bytes HY_Q2_PF_ROWS rows ahead of
 * the 8 rows at w, a cache line at a time: the rows are consecutive, so
 * their successors are one contiguous run, and prefetching it line by
 * line leaves no line of it to a demand miss.  step = hy_q2_pf_step(): a
 * block's share when it is a whole number of bytes (any matrix whose rows
 * are nb blocks: 8 rows of ws bytes), so a block costs a multiply instead
 * of two 64-bit divisions, which cost as much as a row's arithmetic. */
HY_Q2_INLINE size_t hy_q2_pf_step(size_t ws, int64_t nb)
{
    return nb > 0 && 8 * ws % (size_t)nb == 0 ? 8 * ws / (size_t)nb : 0;
}

HY_Q2_INLINE void hy_q2_prefetch(const char *w, size_t ws, int64_t b, int64_t nb, size_t step)
{
    const size_t span = 8 * ws;
    const size_t lo = step ? (size_t)b * step : (size_t)b * span / (size_t)nb;
    /* the last block also takes the line the run's last byte may spill into */
    const size_t hi = (step ? lo + step : (size_t)(b + 1) * span / (size_t)nb) +
                      (b + 1 == nb ? 64 : 0);
    const char *base = w + HY_Q2_PF_ROWS * ws;

    /* into L2, not L1: on Zen 4 with the weights on huge pages T0 left
     * Gemma 3's one-thread decode ~17% slower (PERFORMANCE.md section 24;
     * 8 rows ahead lost ~28% more, 32 the same as 16) */
    for (size_t o = (lo + 63) & ~(size_t)63; o < hi; o += 64)
        _mm_prefetch(base + o, _MM_HINT_T1);
}

/* Rows w + min(r, nrows-1)*ws (r < 8) against one Q16 row x: 8 outputs.
 * The rows HY_Q2_PF_ROWS ahead are prefetched block by block (decode streams the
 * weights once, 8 interleaved streams the hardware alone follows late). */
#define HY_Q2_DEC(name, extract, flags)                                            \
    static void hy_q2_dec_##name(const char *w, size_t ws, int nrows, int64_t nb, \
                                 const hy_block_q16_t *x, float out[8], int pf)    \
    {                                                                              \
        const char *rp[8];                                                         \
        const size_t step = hy_q2_pf_step(ws, nb);                                 \
        hy_q2_kst_t st;                                                            \
        __m256 acc = _mm256_setzero_ps(), mac = _mm256_setzero_ps();               \
        st.sb = -1;                                                                \
        st.tq = st.th = SIZE_MAX;                                                  \
        hy_q2_rows(w, ws, nrows, rp);                                              \
        for (int64_t b = 0; b < nb; b++) {                                         \
            hy_q2_regs_t g;                                                        \
            if (pf)                                                                \
                hy_q2_prefetch(w, ws, b, nb, step);                                \
            extract(rp, b, &g, &st);                                               \
            hy_q2_step(&g, x + b, &acc, &mac, flags);                              \
        }                                                                          \
        if ((flags) & HY_QMM_HAS_OFFSET)                                           \
            acc = _mm256_add_ps(acc, mac);                                         \
        _mm256_storeu_ps(out, acc);                                                \
    }
#define HY_Q2_DEC_X(name, t, flags) HY_Q2_DEC(name, hy_q2_x_##name, flags)
HY_Q2_TYPES_T(HY_Q2_DEC_X)

/* The 8 int32 lanes of each a[r] summed: lane r of the result.  Unpack
 * and add, three rounds (21 operations for 8 rows).  hy_q2_hsum8_2 stops
 * before the last round: lane r of the result sums a[r]'s lanes 0..3, of
 * *hi its lanes 4..7. */
HY_Q2_INLINE __m256i hy_q2_hsum8_2(const __m256i a[8], __m256i *hi)
{
    __m256i t[4], u[2];

#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        t[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(a[2 * i], a[2 * i + 1]),
                                _mm256_unpackhi_epi32(a[2 * i], a[2 * i + 1]));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++)
        u[i] = _mm256_add_epi32(_mm256_unpacklo_epi64(t[2 * i], t[2 * i + 1]),
                                _mm256_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
    /* u[0] = rows 0..3 in each 128-bit half, u[1] rows 4..7 */
    *hi = _mm256_permute2x128_si256(u[0], u[1], 0x31);
    return _mm256_permute2x128_si256(u[0], u[1], 0x20);
}

HY_Q2_INLINE __m256i hy_q2_hsum8(const __m256i a[8])
{
    __m256i hi, lo = hy_q2_hsum8_2(a, &hi);
    return _mm256_add_epi32(lo, hi);
}

/* Q16 block xb as int16 lanes: *e the even elements 0, 2, .., 30, *od the
 * odd ones.  Slot order puts (e[4g], e[4g+2]) in word 2g and (e[4g+1],
 * e[4g+3]) in word 2g+1: the even and odd words, gathered. */
HY_Q2_INLINE void hy_q2_x_evod(const hy_block_q16_t *xb, __m256i *e, __m256i *od)
{
    const __m256 v0 = _mm256_loadu_ps((const float *)xb->v);
    const __m256 v1 = _mm256_loadu_ps((const float *)(xb->v + 16));

    /* [v0 w0 w2, v1 w0 w2 | v0 w4 w6, v1 w4 w6]: qwords 0, 2, 1, 3 */
    *e = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(v0, v1, 0x88)), 0xD8);
    *od = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(v0, v1, 0xDD)), 0xD8);
}

/* The exact integer sum of one row's block (32 int8 codes in element order,
 * c) against the token's block split into even (xe) and odd (xo) elements
 * (hy_q2_x_evod), as 8 int32 partial sums.  A code pair is one int16 lane:
 * shifts sign-extend its even (low) and odd (high) byte in place, where
 * vpmovsxbw would cross the 128-bit halves (the shuffle ports' work, and
 * the bound of these decoders on Zen 3 by llvm-mca's model). */
HY_Q2_INLINE __m256i hy_q2_row_i8(__m256i c, __m256i xe, __m256i xo)
{
    return _mm256_add_epi32(
        _mm256_madd_epi16(_mm256_srai_epi16(_mm256_slli_epi16(c, 8), 8), xe),
        _mm256_madd_epi16(_mm256_srai_epi16(c, 8), xo));
}

/* Per-type row functions: the 8 int32 partial sums of block blk of one row
 * against the token block (xe, xo: even and odd elements). */
HY_Q2_INLINE __m256i hy_q2_row_q8_0(const char *blk, __m256i xe, __m256i xo)
{
    return hy_q2_row_i8(
        _mm256_loadu_si256((const __m256i *)(blk + offsetof(hy_block_q8_0_t, qs))), xe, xo);
}

/* The 16 bytes of Q4_0-style nibbles at q as 32 bytes in element order:
 * low nibbles (elements 0..15), then high nibbles (16..31). */
HY_Q2_INLINE __m256i hy_q2_row_nibs(const char *q)
{
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q));
    return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4)),
                            _mm256_set1_epi8(0x0F));
}

/* Per type: a block's codes as unsigned bytes in element order, and their
 * offset (the code is u - off): the VNNI decoders take them as they are,
 * the int16 rows of Q4_0 and Q5_0 build on them. */
#define HY_Q2_OFF_q8_0 128
HY_Q2_INLINE __m256i hy_q2_u_q8_0(const char *blk)
{
    return _mm256_xor_si256(
        _mm256_loadu_si256((const __m256i *)(blk + offsetof(hy_block_q8_0_t, qs))),
        _mm256_set1_epi8((char)0x80));
}

#define HY_Q2_OFF_q4_0 8
HY_Q2_INLINE __m256i hy_q2_u_q4_0(const char *blk)
{
    return hy_q2_row_nibs(blk + offsetof(hy_block_q4_0_t, qs));
}

#define HY_Q2_OFF_iq4_nl 128
HY_Q2_INLINE __m256i hy_q2_u_iq4_nl(const char *blk)
{
    const __m256i grid = _mm256_xor_si256(
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)hy_quant_iq4nl_values)),
        _mm256_set1_epi8((char)0x80));
    return _mm256_shuffle_epi8(grid, hy_q2_row_nibs(blk + offsetof(hy_block_iq4_nl_t, qs)));
}

/* Q5_0: q = nibble | 16 * (bit j of qh) for element j, in 0..31 (the
 * code is q - 16).  AVX-512: qh is a byte mask as it stands; AVX2: byte j
 * of the broadcast qh word tests bit j % 8 of qh's byte j / 8. */
#define HY_Q2_OFF_q5_0 16
HY_Q2_INLINE __m256i hy_q2_u_q5_0(const char *blk)
{
    const __m256i nib = hy_q2_row_nibs(blk + offsetof(hy_block_q5_0_t, qs));
    const __m256i b16 = _mm256_set1_epi8(16);
    uint32_t qh;

    memcpy(&qh, blk + offsetof(hy_block_q5_0_t, qh), 4);
#ifdef HY_Q2_AVX512
    return _mm256_mask_add_epi8(nib, _cvtu32_mask32(qh), nib, b16);
#else
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                          2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    const __m256i hb = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), pick),
                                        bit);
    return _mm256_or_si256(nib, _mm256_and_si256(_mm256_cmpeq_epi8(hb, bit), b16));
#endif
}

HY_Q2_INLINE __m256i hy_q2_row_q4_0(const char *blk, __m256i xe, __m256i xo)
{
    return hy_q2_row_i8(_mm256_sub_epi8(hy_q2_u_q4_0(blk), _mm256_set1_epi8(8)), xe, xo);
}

HY_Q2_INLINE __m256i hy_q2_row_iq4_nl(const char *blk, __m256i xe, __m256i xo)
{
    const __m256i grid = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)hy_quant_iq4nl_values));
    return hy_q2_row_i8(
        _mm256_shuffle_epi8(grid, hy_q2_row_nibs(blk + offsetof(hy_block_iq4_nl_t, qs))), xe,
        xo);
}

/* Q5_0's row.  A code is q - 16 with q = nibble | 16 * (bit j of qh) in
 * 0..31, so a row's sum is sum(q x) - 16 sum(x) (hy_q2_corr_q5_0 takes the
 * second term off once per block for all 8 rows): q stays unsigned, and
 * its int16 pairs split into even and odd elements with a mask and a
 * shift (no sign to extend).  Both sums are exact in int32 (|x| < 2^15,
 * q < 32, 32 elements).  The signed row path this replaced took the
 * offset off every byte and sign-extended the codes across the 128-bit
 * halves (bench_quant's one-token tile ~1.1x); Gemma 3's Q5_0 projections
 * are still its slowest bytes per byte at the AVX2 level: the qh
 * expansion's shuffle, broadcasts and shifts. */
HY_Q2_INLINE __m256i hy_q2_row_q5_0(const char *blk, __m256i xe, __m256i xo)
{
    const __m256i q = hy_q2_u_q5_0(blk);

    return _mm256_add_epi32(
        _mm256_madd_epi16(_mm256_and_si256(q, _mm256_set1_epi16(0x00FF)), xe),
        _mm256_madd_epi16(_mm256_srli_epi16(q, 8), xo));
}

/* What a block's row sums lose to a type's code offset, the same for all 8
 * rows: 16 sum(x) for Q5_0's unsigned codes, nothing for the signed ones. */
HY_Q2_INLINE __m256i hy_q2_corr_q5_0(__m256i xe, __m256i xo)
{
    const __m256i ones = _mm256_set1_epi16(1);
    /* xe + xo could overflow int16: widen first */
    const __m256i s8 = _mm256_add_epi32(_mm256_madd_epi16(xe, ones), _mm256_madd_epi16(xo, ones));
    __m128i sx = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));

    sx = _mm_add_epi32(sx, _mm_shuffle_epi32(sx, 0x4E));
    sx = _mm_add_epi32(sx, _mm_shuffle_epi32(sx, 0xB1));
    return _mm256_slli_epi32(_mm256_broadcastd_epi32(sx), 4);
}

HY_Q2_INLINE __m256i hy_q2_corr_none(__m256i xe, __m256i xo)
{
    (void)xe;
    (void)xo;
    return _mm256_setzero_si256();
}

/* A token's block as two signed byte planes in element order, v = 256 hi
 * + lo (the AVX-512 decoders below). */
typedef struct {
    __m256i lo, hi;
} hy_q2_xpl_t;

/* sum u v of one row's block (u its unsigned codes) as 8 int32 partial
 * sums; AVX-512 VNNI only (the AVX2 level's decoders never take it) */
HY_Q2_INLINE __m256i hy_q2_vrow(__m256i u, const hy_q2_xpl_t *p)
{
#ifdef HY_Q2_AVX512
    const __m256i h = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, p->hi);
    return _mm256_dpbusd_epi32(_mm256_slli_epi32(h, 8), u, p->lo);
#else
    (void)u, (void)p;
    __builtin_unreachable();
#endif
}

/* One-token decoder, row by row, for the 32-element types whose block
 * starts with its f16 D and whose codes fit in int8 (Q8_0, Q4_0, IQ4_NL)
 * or are unsigned with an offset (Q5_0; corr): a row's codes, as int16
 * pairs, meet the token's block split into even and odd elements
 * (hy_q2_row_i8; the split once per block for all 8 rows).  P is exact in
 * int32, so summing it this way gives the transposed extractor's P, and
 * the float step is hy_q2_step's: the same bits, without the transpose
 * and the pair extraction that made decode compute-bound (Gemma 3's
 * 262144 x 640 Q8_0 output matrix, its Q5_0 projections).  vnni (AVX-512
 * only): the row's unsigned codes (hy_q2_u_*) meet the token's byte planes
 * instead, the type's offset times the block's sum of v taken out once
 * (the VNNI decoders below). */
#define HY_Q2_DEC_ROWS(name, corr)                                                 \
    HY_Q2_INLINE void hy_q2_rows_##name(const char *w, size_t ws, int nrows, int64_t nb, \
                                        const hy_block_q16_t *x, const hy_q2_xpl_t *xp, \
                                        const int32_t *sv, float out[8], int pf,    \
                                        const int vnni)                             \
    {                                                                              \
        const size_t bsz = sizeof(hy_block_##name##_t);                            \
        const size_t step = hy_q2_pf_step(ws, nb);                                 \
        const char *rp[8];                                                         \
        __m256 acc = _mm256_setzero_ps();                                          \
        hy_q2_rows(w, ws, nrows, rp);                                              \
        for (int64_t b = 0; b < nb; b++) {                                         \
            const size_t o = (size_t)b * bsz;                                      \
            __m256i xe = _mm256_setzero_si256(), xo = xe, a[8], c;                 \
            if (!vnni)                                                             \
                hy_q2_x_evod(x + b, &xe, &xo);                                     \
            if (pf)                                                                \
                hy_q2_prefetch(w, ws, b, nb, step);                                \
            _Pragma("GCC unroll 16") for (int r = 0; r < 8; r++)                   \
                a[r] = vnni ? hy_q2_vrow(hy_q2_u_##name(rp[r] + o), xp + b)        \
                            : hy_q2_row_##name(rp[r] + o, xe, xo);                 \
            c = vnni ? _mm256_set1_epi32(HY_Q2_OFF_##name * (sv[2 * b] + sv[2 * b + 1])) \
                     : corr(xe, xo);                                               \
            const __m256 sc = _mm256_mul_ps(hy_q2_f16x8_gpr(rp, o),                \
                                            _mm256_set1_ps(x[b].d));               \
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(hy_q2_hsum8(a), c)), \
                                  sc, acc);                                        \
        }                                                                          \
        _mm256_storeu_ps(out, acc);                                                \
    }                                                                              \
    static void hy_q2_dec_##name(const char *w, size_t ws, int nrows, int64_t nb, \
                                 const hy_block_q16_t *x, float out[8], int pf)    \
    {                                                                              \
        hy_q2_rows_##name(w, ws, nrows, nb, x, NULL, NULL, out, pf, 0);            \
    }
HY_Q2_DEC_ROWS(q8_0, hy_q2_corr_none)
HY_Q2_DEC_ROWS(q4_0, hy_q2_corr_none)
HY_Q2_DEC_ROWS(iq4_nl, hy_q2_corr_none)
HY_Q2_DEC_ROWS(q5_0, hy_q2_corr_q5_0)

#ifdef HY_Q2_AVX512
/* The AVX-512 level's one-token decoders for the same types, on VNNI's
 * vpdpbusd (unsigned bytes times signed bytes, four products a lane).  The
 * token's int16 blocks become two signed byte planes in element order,
 * v = 256 hi + lo, once per tile (hy_q2_vtile_one), and a row's codes go
 * on the unsigned side as u = code + off (the type's own offset, or 128
 * for signed codes).  Then
 *     P = sum u lo + 256 sum u hi - off sum v
 * exactly in int32 (|sum u hi| < 2^17 a lane, |P| < 2^29): the integer the
 * int16 path forms, hence the same bits, for four vector operations a row
 * (one of them a shift) where the int16 path takes six (three shifts) and
 * the shift and shuffle ports bound it. */

/* Blocks whose planes a tile keeps on its stack (17 KB: K <= 8192); longer
 * rows take the int16 decoders. */
#define HY_Q2_XPL_MAX 256

static const int16_t hy_q2_slot_idx[32] __attribute__((aligned(64))) = {
    0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15,
    16, 18, 17, 19, 20, 22, 21, 23, 24, 26, 25, 27, 28, 30, 29, 31};

HY_Q2_INLINE int32_t hy_q2_rsum8(__m256i a)
{
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));

    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1)));
}

/* Block xb's planes, and the sums of v over elements 0..15 and 16..31
 * into sv[0] and sv[1]. */
HY_Q2_INLINE void hy_q2_x_planes(const hy_block_q16_t *xb, hy_q2_xpl_t *p, int32_t sv[2])
{
    /* element j is in slot hy_qmm_slot(j) */
    const __m512i v = _mm512_permutexvar_epi16(_mm512_load_si512(hy_q2_slot_idx),
                                               _mm512_loadu_si512(xb->v));

    p->lo = _mm512_cvtepi16_epi8(v); /* the low byte, read as signed */
    /* |v| <= 32512: v + 128 does not overflow, and (v + 128) >> 8 = hi */
    p->hi = _mm512_cvtepi16_epi8(_mm512_srai_epi16(_mm512_add_epi16(v, _mm512_set1_epi16(128)), 8));
    const __m512i s = _mm512_madd_epi16(v, _mm512_set1_epi16(1)); /* lanes 0..7: elements 0..15 */
    sv[0] = hy_q2_rsum8(_mm512_castsi512_si256(s));
    sv[1] = hy_q2_rsum8(_mm512_extracti64x4_epi64(s, 1));
}

/* Rows w + min(r, nrows-1)*ws (r < 8) against the token's planes xp and
 * half-block sums sv ([nb][2]): 8 outputs, hy_q2_dec_*'s bits. */
typedef void (*hy_q2_vdec_fn)(const char *w, size_t ws, int nrows, int64_t nb,
                              const hy_block_q16_t *x, const hy_q2_xpl_t *xp,
                              const int32_t *sv, float out[8], int pf);
#define HY_Q2_DEC_VROWS(name)                                                      \
    static void hy_q2_vdec_##name(const char *w, size_t ws, int nrows, int64_t nb, \
                                  const hy_block_q16_t *x, const hy_q2_xpl_t *xp, \
                                  const int32_t *sv, float out[8], int pf)         \
    {                                                                              \
        hy_q2_rows_##name(w, ws, nrows, nb, x, xp, sv, out, pf, 1);                \
    }
HY_Q2_DEC_VROWS(q8_0)
HY_Q2_DEC_VROWS(q4_0)
HY_Q2_DEC_VROWS(iq4_nl)
HY_Q2_DEC_VROWS(q5_0)

#endif

/* The K-quant rows take a row's 32 codes as 16 int16 lanes, lane i
 * holding elements 2i (low byte) and 2i+1 (high byte) as they lie in
 * memory: masks and shifts split them into even and odd elements, which
 * meet the token's block split the same way (hy_q2_x_evod) with no
 * widening.  Lanes 0..7 are elements 0..15, so the int32 sums of vpmaddwd
 * keep elements 0..15 in the low 128 bits and 16..31 in the high. */

/* Q4_K block b of one row against the token (xe, xo): 8 int32 partial
 * sums of q*v.  Sub-block k = b % 8 is the low (k even) or high nibbles of
 * 32-byte run k / 2. */
HY_Q2_INLINE __m256i hy_q2_row_q4_k(const char *sb, int k, __m256i xe, __m256i xo)
{
    const __m256i m4 = _mm256_set1_epi16(0x000F);
    const __m256i q = _mm256_loadu_si256(
        (const __m256i *)(sb + offsetof(hy_block_q4_k_t, qs) + 32 * (size_t)(k / 2)));
    const __m256i e = k & 1 ? _mm256_and_si256(_mm256_srli_epi16(q, 4), m4)
                            : _mm256_and_si256(q, m4);
    const __m256i od = k & 1 ? _mm256_srli_epi16(q, 12)
                             : _mm256_and_si256(_mm256_srli_epi16(q, 8), m4);
    return _mm256_add_epi32(_mm256_madd_epi16(e, xe), _mm256_madd_epi16(od, xo));
}

/* Q6_K block j = b % 8 of one row (part m = j % 4 of half j / 4): its q
 * in 0..63 as bytes in element order (the code is q - 32). */
HY_Q2_INLINE __m256i hy_q2_u_q6_k(const char *sb, int j)
{
    const int half = j / 4, m = j % 4;
    const __m256i l = _mm256_loadu_si256((const __m256i *)(sb + 64 * half + 32 * (m & 1)));
    const __m256i h = _mm256_loadu_si256(
        (const __m256i *)(sb + offsetof(hy_block_q6_k_t, qh) + 32 * (size_t)half));
    const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(l, _mm_cvtsi32_si128(m < 2 ? 0 : 4)),
                                        _mm256_set1_epi8(0x0F));
    const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(2 * m)),
                                        _mm256_set1_epi8(3));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}

/* Q6_K block j of one row: the codes q - 32 against (xe, xo); lanes 0..3
 * of the result sum elements 0..15, lanes 4..7 elements 16..31. */
HY_Q2_INLINE __m256i hy_q2_row_q6_k(const char *sb, int j, __m256i xe, __m256i xo)
{
    const __m256i c = _mm256_sub_epi8(hy_q2_u_q6_k(sb, j), _mm256_set1_epi8(32));
    /* int8 codes of the even (low) and odd (high) bytes, sign-extended */
    const __m256i e = _mm256_srai_epi16(_mm256_slli_epi16(c, 8), 8);
    return _mm256_add_epi32(_mm256_madd_epi16(e, xe),
                            _mm256_madd_epi16(_mm256_srai_epi16(c, 8), xo));
}

/* Q4_K sub-block k of one row: its q in 0..15 as bytes in element order. */
HY_Q2_INLINE __m256i hy_q2_u_q4_k(const char *sb, int k)
{
    const __m256i q = _mm256_loadu_si256(
        (const __m256i *)(sb + offsetof(hy_block_q4_k_t, qs) + 32 * (size_t)(k / 2)));
    return _mm256_and_si256(k & 1 ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(0x0F));
}

/* One-token decoder, row by row, for Q4_K (is6 = 0) and Q6_K (is6 = 1).
 * The super-block's D, M and sub-block scales still come in transposed,
 * once per 8 blocks (hy_q2_k45_prep, hy_q2_k6_prep); each row's codes meet
 * the token as above and the scale is applied after the sum: sc * sum(q v)
 * and the extractor's sum((sc q) v) are one integer, exact in int32 (qmm.c
 * bounds |sc q| and the sums), so P, and with it hy_q2_step's float steps
 * in its order, are unchanged: per block one FMA (Q4_K, plus the M FMA) or
 * one per 16 elements (Q6_K, HY_QMM_CHUNK16), the offset added at the end.
 * vnni (AVX-512 only): the row's unsigned codes meet the token's byte
 * planes xp instead (hy_q2_vrow), Q6_K's 32 taken out of each half with
 * the half-block sums sv: the same integers. */
HY_Q2_INLINE void hy_q2_dec_krows(const char *w, size_t ws, int nrows, int64_t nb,
                                  const hy_block_q16_t *x, const hy_q2_xpl_t *xp,
                                  const int32_t *sv, float out[8], int pf, const int is6,
                                  const int vnni)
{
    const size_t bsz = is6 ? sizeof(hy_block_q6_k_t) : sizeof(hy_block_q4_k_t);
    const size_t step = hy_q2_pf_step(ws, nb);
    const char *rp[8];
    hy_q2_kst_t st;
    __m256 acc = _mm256_setzero_ps(), mac = _mm256_setzero_ps();

    st.sb = -1;
    st.tq = st.th = SIZE_MAX;
    hy_q2_rows(w, ws, nrows, rp);
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = (size_t)(b / 8) * bsz;
        const int k = (int)(b % 8);
        __m256i xe = _mm256_setzero_si256(), xo = xe, a[8];

        if (pf)
            hy_q2_prefetch(w, ws, b, nb, step);
        if (st.sb != b / 8) {
            if (is6)
                hy_q2_k6_prep(rp, b / 8, &st);
            else
                hy_q2_k45_prep(rp, b / 8, bsz, &st);
        }
        if (!vnni)
            hy_q2_x_evod(x + b, &xe, &xo);
        const __m256 sc = _mm256_mul_ps(st.d, _mm256_set1_ps(x[b].d));
        if (is6) {
            /* elements 0..15 and 16..31 have their own scale and sum;
             * st.sc holds (s, s) int16 pairs: the high half is s */
            const int s0 = 8 * (k / 4) + 2 * (k % 4);
            __m256i P0, P1;
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++)
                a[r] = vnni ? hy_q2_vrow(hy_q2_u_q6_k(rp[r] + o, k), xp + b)
                            : hy_q2_row_q6_k(rp[r] + o, k, xe, xo);
            P0 = hy_q2_hsum8_2(a, &P1);
            if (vnni) {
                P0 = _mm256_sub_epi32(P0, _mm256_set1_epi32(32 * sv[2 * b]));
                P1 = _mm256_sub_epi32(P1, _mm256_set1_epi32(32 * sv[2 * b + 1]));
            }
            P0 = _mm256_mullo_epi32(P0, _mm256_srai_epi32(st.sc[s0], 16));
            P1 = _mm256_mullo_epi32(P1, _mm256_srai_epi32(st.sc[s0 + 1], 16));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(P0), sc, acc);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(P1), sc, acc);
        } else {
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++)
                a[r] = vnni ? hy_q2_vrow(hy_q2_u_q4_k(rp[r] + o, k), xp + b)
                            : hy_q2_row_q4_k(rp[r] + o, k, xe, xo);
            const __m256i P = _mm256_mullo_epi32(hy_q2_hsum8(a), _mm256_srai_epi32(st.sc[k], 16));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(P), sc, acc);
            mac = _mm256_fmadd_ps(st.mn[k], _mm256_set1_ps(x[b].s), mac);
        }
    }
    if (!is6)
        acc = _mm256_add_ps(acc, mac);
    _mm256_storeu_ps(out, acc);
}

static void hy_q2_dec_q4_k(const char *w, size_t ws, int nrows, int64_t nb,
                           const hy_block_q16_t *x, float out[8], int pf)
{
    hy_q2_dec_krows(w, ws, nrows, nb, x, NULL, NULL, out, pf, 0, 0);
}

static void hy_q2_dec_q6_k(const char *w, size_t ws, int nrows, int64_t nb,
                           const hy_block_q16_t *x, float out[8], int pf)
{
    hy_q2_dec_krows(w, ws, nrows, nb, x, NULL, NULL, out, pf, 1, 0);
}

#ifdef HY_Q2_AVX512
static void hy_q2_vdec_q4_k(const char *w, size_t ws, int nrows, int64_t nb,
                            const hy_block_q16_t *x, const hy_q2_xpl_t *xp, const int32_t *sv,
                            float out[8], int pf)
{
    hy_q2_dec_krows(w, ws, nrows, nb, x, xp, sv, out, pf, 0, 1);
}

static void hy_q2_vdec_q6_k(const char *w, size_t ws, int nrows, int64_t nb,
                            const hy_block_q16_t *x, const hy_q2_xpl_t *xp, const int32_t *sv,
                            float out[8], int pf)
{
    hy_q2_dec_krows(w, ws, nrows, nb, x, xp, sv, out, pf, 1, 1);
}

/* The VNNI decoder of weight type t, NULL for types without one (constant
 * in each tile function). */
HY_Q2_INLINE hy_q2_vdec_fn hy_q2_vdec_of(hy_dtype_t t)
{
    switch (t) {
    case HY_DTYPE_Q8_0: return hy_q2_vdec_q8_0;
    case HY_DTYPE_Q4_0: return hy_q2_vdec_q4_0;
    case HY_DTYPE_IQ4_NL: return hy_q2_vdec_iq4_nl;
    case HY_DTYPE_Q5_0: return hy_q2_vdec_q5_0;
    case HY_DTYPE_Q4_K: return hy_q2_vdec_q4_k;
    case HY_DTYPE_Q6_K: return hy_q2_vdec_q6_k;
    default: return NULL;
    }
}
#endif

typedef void (*hy_q2_dec_fn)(const char *w, size_t ws, int nrows, int64_t nb,
                             const hy_block_q16_t *x, float out[8], int pf);

/* ---- the panel: unpackers and the many-token kernel ---- */

/* Rows w + min(r, nrows-1)*ws (r < 8), blocks [b0, b0+nb) -> half h of
 * p[0..nb). */
typedef void (*hy_q2_unpack_fn)(const hy_qmm_type_t *ty, const char *w, size_t ws, int nrows,
                                int64_t b0, int64_t nb, hy_q2_blk_t *p, int h);

/* Half h of panel block p from registers (m2 only where the type has it). */
HY_Q2_INLINE void hy_q2_store(const hy_q2_regs_t *g, hy_q2_blk_t *p, int h, const int flags)
{
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++)
        _mm256_store_si256((__m256i *)p->q[k][h], g->pv[k]);
    _mm256_store_ps(p->d[h], g->d);
    _mm256_store_ps(p->m[h], g->m);
    if (flags & HY_QMM_OFFSET16)
        _mm256_store_ps(p->m2[h], g->m2);
}

#define HY_Q2_UNPACK(name, extract, flags)                                         \
    static void hy_q2_unpack_##name(const hy_qmm_type_t *ty, const char *w,       \
                                    size_t ws, int nrows, int64_t b0, int64_t nb, \
                                    hy_q2_blk_t *p, int h)                         \
    {                                                                              \
        const char *rp[8];                                                         \
        hy_q2_kst_t st;                                                            \
        (void)ty;                                                                  \
        st.sb = -1;                                                                \
        st.tq = st.th = SIZE_MAX;                                                  \
        hy_q2_rows(w, ws, nrows, rp);                                              \
        for (int64_t b = 0; b < nb; b++) {                                         \
            hy_q2_regs_t g;                                                        \
            extract(rp, b0 + b, &g, &st);                                          \
            hy_q2_store(&g, &p[b], h, flags);                                      \
        }                                                                          \
    }
#define HY_Q2_UNPACK_X(name, t, flags) HY_Q2_UNPACK(name, hy_q2_x_##name, flags)
HY_Q2_TYPES(HY_Q2_UNPACK_X)

/* Any type, through its scalar decoder: correct for every type, fast
 * enough where the panel serves many tokens.  A new weight type can start
 * here (HY_Q2_TILE(name, t, hy_q2_unpack_decode, NULL): one-token calls
 * then take the panel too) and get an extractor when it matters. */
__attribute__((unused)) static void hy_q2_unpack_decode(const hy_qmm_type_t *ty, const char *w, size_t ws, int nrows,
                                int64_t b0, int64_t nb, hy_q2_blk_t *p, int h)
{
    for (int64_t b = 0; b < nb; b++, p++)
#pragma GCC unroll 16
        for (int r = 0; r < 8; r++) {
            int16_t c[32], sl[32];
            float D, M[2] = {0.0f, 0.0f};
            ty->decode(w + (size_t)HY_MIN(r, nrows - 1) * ws, b0 + b, c, &D, M);
#pragma GCC unroll 16
            for (int j = 0; j < 32; j++)
                sl[hy_qmm_slot(j)] = c[j];
#pragma GCC unroll 16
            for (int k = 0; k < 16; k++)
                p->q[k][h][r] = (int32_t)((uint32_t)(uint16_t)sl[2 * k] |
                                          (uint32_t)(uint16_t)sl[2 * k + 1] << 16);
            p->d[h][r] = D;
            p->m[h][r] = M[0];
            p->m2[h][r] = M[1];
        }
}

#ifdef HY_Q2_AVX512
/* acc/mac[c*16 + row] (c < C, 16 rows) += the contract's terms of nb panel
 * blocks against C token rows x + c*xs (Q16 rows, already at the panel's
 * first block): the AVX2 kernel below with both row halves in one zmm
 * (the panel keeps a pair's 16 rows together) and vpdpwssd adding each
 * pair's two products to the sum in one instruction, the token's pair
 * broadcast from memory into it.  The integer sums are the same exact
 * int32 and every float step the same per lane, so the two levels agree
 * bit for bit (test_quant's tile == vec_dot at each level, test_invariance). */

/* *P += w . (the int16 pair at v, broadcast), the pair read by the
 * multiply-add itself ({1to16}): GCC emits a separate vpbroadcastd, one
 * more instruction per multiply-add. */
HY_Q2_INLINE void hy_q2_dpwssd_bcast(__m512i *P, __m512i w, const int16_t *v)
{
    __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(*P) : "v"(w), "m"(*(const int32_t *)v));
}

/* Block b of C token rows (Q16, stride xs, from x): its address per token
 * and two zeroed int32 chains each. */
HY_Q2_INLINE void hy_q2_block_start(const int C, const char *x, size_t xs, int64_t b,
                                    const hy_block_q16_t *xb[HY_Q2_C], __m512i P[HY_Q2_C],
                                    __m512i P2[HY_Q2_C])
{
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) {
        xb[c] = (const hy_block_q16_t *)(x + (size_t)c * xs) + b;
        P[c] = _mm512_setzero_si512();
        P2[c] = _mm512_setzero_si512();
    }
}

HY_Q2_INLINE void hy_q2_compute(const hy_q2_blk_t *pb, int64_t nb, const char *x, size_t xs,
                                const float *hs, size_t hss, float *acc, float *mac,
                                const int C, const int flags, int first)
{
    /* the sums stay in registers over the panel's blocks (stores to acc
     * could alias the panel and the tokens, so GCC reloads them per block);
     * the tile's first panel starts them at zero (acc and mac hold nothing
     * yet: the tile does not clear them) */
    __m512 A[HY_Q2_C], MA[HY_Q2_C];
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) {
        A[c] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + 16 * c);
        MA[c] = first ? _mm512_setzero_ps() : _mm512_load_ps(mac + 16 * c);
    }
    /* two int32 chains per token (even and odd pairs), added at the end of
     * the block: its 16 dependent vpdpwssd, 5 cycles each, took as long as
     * 8 tokens' issue (bench_mm B = 8: Q5_0 153 -> 160, Q8_0 155 -> 162
     * GFLOP/s); the sum is the same exact integer.  Not where the offset
     * sums hold 8 more registers (no gain, spills), nor for CHUNK16 types,
     * whose chains are 8 long (Q6_K lost 6%). */
    const int split = !(flags & (HY_QMM_OFFSET | HY_QMM_OFFSET16 | HY_QMM_CHUNK16));
    for (int64_t b = 0; b < nb; b++, pb++) {
        const hy_block_q16_t *xb[HY_Q2_C];
        __m512i P[HY_Q2_C], P2[HY_Q2_C];
        hy_q2_block_start(C, x, xs, b, xb, P, P2);
        const __m512 D = _mm512_load_ps(pb->d[0]);
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) {
            if ((flags & HY_QMM_CHUNK16) && k == 8) {
#pragma GCC unroll 8
                for (int c = 0; c < C; c++) {
                    A[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P[c]),
                                           _mm512_mul_ps(D, _mm512_set1_ps(xb[c]->d)), A[c]);
                    P[c] = _mm512_setzero_si512();
                }
            }
            const __m512i w = _mm512_load_si512(pb->q[k]);
#pragma GCC unroll 8
            for (int c = 0; c < C; c++)
                hy_q2_dpwssd_bcast(split && (k & 1) ? &P2[c] : &P[c], w, xb[c]->v + 2 * k);
        }
        if (split)
#pragma GCC unroll 8
            for (int c = 0; c < C; c++)
                P[c] = _mm512_add_epi32(P[c], P2[c]);
        const __m512 M = _mm512_load_ps(pb->m[0]);
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            A[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P[c]),
                                   _mm512_mul_ps(D, _mm512_set1_ps(xb[c]->d)), A[c]);
            if (flags & HY_QMM_OFFSET)
                MA[c] = _mm512_fmadd_ps(M, _mm512_set1_ps(xb[c]->s), MA[c]);
            if (flags & HY_QMM_OFFSET16) {
                const float *u = hs + (size_t)c * hss + 2 * b;
                MA[c] = _mm512_fmadd_ps(_mm512_load_ps(pb->m2[0]), _mm512_set1_ps(u[1]),
                                        _mm512_fmadd_ps(M, _mm512_set1_ps(u[0]), MA[c]));
            }
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) {
        _mm512_store_ps(acc + 16 * c, A[c]);
        if (flags & (HY_QMM_OFFSET | HY_QMM_OFFSET16))
            _mm512_store_ps(mac + 16 * c, MA[c]);
    }
}
#else
/* acc/mac[c*16 + row] (c < C, 16 rows) += the contract's terms of nb panel
 * blocks against C token rows x + c*xs (Q16 rows, already at the panel's
 * first block).  Each broadcast pair feeds both halves of the row group:
 * a broadcast costs an issue slot like a multiply-add, so sharing it is
 * what leaves the vpmaddwd ports busy. */
HY_Q2_INLINE void hy_q2_compute(const hy_q2_blk_t *pb, int64_t nb, const char *x, size_t xs,
                                const float *hs, size_t hss, float *acc, float *mac,
                                const int C, const int flags, int first)
{
    (void)first; /* the tile clears acc and mac for this version */
    for (int64_t b = 0; b < nb; b++, pb++) {
        const hy_block_q16_t *xb[HY_Q2_C];
        __m256i P0[HY_Q2_C], P1[HY_Q2_C];
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            xb[c] = (const hy_block_q16_t *)(x + (size_t)c * xs) + b;
            P0[c] = _mm256_setzero_si256();
            P1[c] = _mm256_setzero_si256();
        }
        const __m256 D0 = _mm256_load_ps(pb->d[0]), D1 = _mm256_load_ps(pb->d[1]);
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) {
            if ((flags & HY_QMM_CHUNK16) && k == 8) {
#pragma GCC unroll 8
                for (int c = 0; c < C; c++) {
                    const __m256 dx = _mm256_set1_ps(xb[c]->d);
                    float *a = acc + 16 * c;
                    _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(P0[c]),
                                                       _mm256_mul_ps(D0, dx), _mm256_load_ps(a)));
                    _mm256_store_ps(a + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(P1[c]),
                                                           _mm256_mul_ps(D1, dx),
                                                           _mm256_load_ps(a + 8)));
                    P0[c] = P1[c] = _mm256_setzero_si256();
                }
            }
            const __m256i w0 = _mm256_load_si256((const __m256i *)pb->q[k][0]);
            const __m256i w1 = _mm256_load_si256((const __m256i *)pb->q[k][1]);
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) {
                const __m256i bc = hy_q2_bcast(xb[c]->v + 2 * k);
                P0[c] = _mm256_add_epi32(P0[c], _mm256_madd_epi16(w0, bc));
                P1[c] = _mm256_add_epi32(P1[c], _mm256_madd_epi16(w1, bc));
                /* one add chain per sum: GCC would otherwise rebalance the
                 * integer adds into trees and spill the products */
                __asm__("" : "+x"(P0[c]), "+x"(P1[c]));
            }
        }
        const __m256 M0 = _mm256_load_ps(pb->m[0]), M1 = _mm256_load_ps(pb->m[1]);
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            const __m256 dx = _mm256_set1_ps(xb[c]->d);
            float *a = acc + 16 * c;
            _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(P0[c]), _mm256_mul_ps(D0, dx),
                                               _mm256_load_ps(a)));
            _mm256_store_ps(a + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(P1[c]),
                                                   _mm256_mul_ps(D1, dx), _mm256_load_ps(a + 8)));
            if (flags & HY_QMM_OFFSET) {
                const __m256 sx = _mm256_set1_ps(xb[c]->s);
                float *m = mac + 16 * c;
                _mm256_store_ps(m, _mm256_fmadd_ps(M0, sx, _mm256_load_ps(m)));
                _mm256_store_ps(m + 8, _mm256_fmadd_ps(M1, sx, _mm256_load_ps(m + 8)));
            }
            if (flags & HY_QMM_OFFSET16) {
                const float *u = hs + (size_t)c * hss + 2 * b;
                const __m256 u0 = _mm256_set1_ps(u[0]), u1 = _mm256_set1_ps(u[1]);
                float *m = mac + 16 * c;
                _mm256_store_ps(m, _mm256_fmadd_ps(_mm256_load_ps(pb->m2[0]), u1,
                                                   _mm256_fmadd_ps(M0, u0, _mm256_load_ps(m))));
                _mm256_store_ps(m + 8,
                                _mm256_fmadd_ps(_mm256_load_ps(pb->m2[1]), u1,
                                                _mm256_fmadd_ps(M1, u0, _mm256_load_ps(m + 8))));
            }
        }
    }
}

#endif

#if HY_Q2_C == 8
#define HY_Q2_RUN_WIDE(flags)                                                      \
    case 5: hy_q2_compute(pb, nb, x, xs, hs, hss, acc, mac, 5, flags, first); break; \
    case 6: hy_q2_compute(pb, nb, x, xs, hs, hss, acc, mac, 6, flags, first); break; \
    case 7: hy_q2_compute(pb, nb, x, xs, hs, hss, acc, mac, 7, flags, first); break;
#else
#define HY_Q2_RUN_WIDE(flags)
#endif
#define HY_Q2_RUN(name, flags)                                                     \
    static void hy_q2_run_##name(int c, const hy_q2_blk_t *pb, int64_t nb,        \
                                 const char *x, size_t xs, const float *hs,       \
                                 size_t hss, float *acc, float *mac, int first)   \
    {                                                                              \
        switch (c) {                                                               \
        case 1: hy_q2_compute(pb, nb, x, xs, hs, hss, acc, mac, 1, flags, first); break; \
        case 2: hy_q2_compute(pb, nb, x, xs, hs, hss, acc, mac, 2, flags, first); break; \
        case 3: hy_q2_compute(pb, nb, x, xs, hs, hss, acc, mac, 3, flags, first); break; \
        case 4: hy_q2_compute(pb, nb, x, xs, hs, hss, acc, mac, 4, flags, first); break; \
        HY_Q2_RUN_WIDE(flags)                                                      \
        default: hy_q2_compute(pb, nb, x, xs, hs, hss, acc, mac, HY_Q2_C, flags, first); break; \
        }                                                                          \
    }
HY_Q2_RUN(plain, 0)
HY_Q2_RUN(offset, HY_QMM_OFFSET)
HY_Q2_RUN(chunk16, HY_QMM_CHUNK16)
HY_Q2_RUN(offset16, HY_QMM_OFFSET16)
_Static_assert(HY_Q2_C == 5 || HY_Q2_C == 8, "hy_q2_run instantiates 1..HY_Q2_C tokens");

typedef void (*hy_q2_run_fn)(int c, const hy_q2_blk_t *pb, int64_t nb, const char *x, size_t xs,
                             const float *hs, size_t hss, float *acc, float *mac, int first);

/* ---- tiles ---- */

/* One token: 8 rows at a time, a ragged end taking the last 8 rows again
 * (the rows it repeats get the same bits) and fewer than 8 rows repeating
 * the last one in the idle lanes. */
static void hy_q2_tile_one(hy_q2_dec_fn dec, int64_t nb, float *s, const char *w, size_t ws,
                           int nw, const hy_block_q16_t *x)
{
    /* prefetch the next group while this one has a successor (the tile is
     * part of a thread's run of rows; vec_dot and tests pass ws = 0) */
    for (int r0 = 0; r0 < nw; r0 += 8) {
        const int rb = nw >= 8 ? HY_MIN(r0, nw - 8) : 0;
        float out[8];
        dec(w + (size_t)rb * ws, ws, HY_MIN(8, nw), nb, x, out, ws != 0);
        memcpy(s + r0, out + (r0 - rb), sizeof(float) * (size_t)HY_MIN(8, nw - r0));
    }
}

#ifdef HY_Q2_AVX512
/* hy_q2_tile_one through a VNNI decoder: the token's planes once for the
 * tile.  False (nothing done) without one, or for rows too long for the
 * planes' buffer. */
static bool hy_q2_vtile_one(hy_q2_vdec_fn dec, int64_t nb, float *s, const char *w, size_t ws,
                            int nw, const hy_block_q16_t *x)
{
    hy_q2_xpl_t xp[HY_Q2_XPL_MAX];
    int32_t sv[2 * HY_Q2_XPL_MAX];

    if (!dec || nb > HY_Q2_XPL_MAX)
        return false;
    for (int64_t b = 0; b < nb; b++)
        hy_q2_x_planes(x + b, xp + b, sv + 2 * b);
    for (int r0 = 0; r0 < nw; r0 += 8) {
        const int rb = nw >= 8 ? HY_MIN(r0, nw - 8) : 0;
        float out[8];
        dec(w + (size_t)rb * ws, ws, HY_MIN(8, nw), nb, x, xp, sv, out, ws != 0);
        memcpy(s + r0, out + (r0 - rb), sizeof(float) * (size_t)HY_MIN(8, nw - r0));
    }
    return true;
}
#endif

/* Blocks [b, b+kn) of 16 rows starting at w are being unpacked: their
 * share of the next 16 rows' run (16 ws bytes, contiguous) into L2, so
 * that a few-token tile over a matrix from DRAM (Gemma 3's output matrix
 * in batched decode) finds its rows there instead of waiting on 16
 * interleaved streams the hardware prefetcher follows poorly.  A burst per
 * panel: the AVX-512 16-row unpackers issue the same lines between their
 * blocks instead (qmm.h). */
HY_Q2_INLINE void hy_q2_prefetch_next16(const char *w, size_t ws, int64_t b, int64_t kn,
                                        int64_t nb)
{
    const size_t span = 16 * ws;
    const size_t lo = (size_t)b * span / (size_t)nb, hi = (size_t)(b + kn) * span / (size_t)nb;
    const char *base = w + span;

    for (size_t o = (lo + 63) & ~(size_t)63; o < hi + (b + kn == nb ? 64 : 0); o += 64)
        _mm_prefetch(base + o, _MM_HINT_T1);
}

/* Blocks [b0, b0+nb) of 16 rows as panel blocks, the next rows' lines
 * prefetched among them (qmm.h). */
typedef void (*hy_q2_panel16_fn)(const char *w, size_t ws, int64_t b0, int64_t nb,
                                 hy_qmm_pblk_t *p, const char *pf);

#ifdef HY_Q2_AVX512
/* quant_avx512.c's 16-row unpacker of type t, or NULL. */
HY_Q2_INLINE hy_q2_panel16_fn hy_q2_panel16_of(hy_dtype_t t)
{
    return t == HY_DTYPE_Q4_K   ? hy_qmm_avx512_panel16_q4_k
           : t == HY_DTYPE_Q5_K ? hy_qmm_avx512_panel16_q5_k
           : t == HY_DTYPE_Q6_K ? hy_qmm_avx512_panel16_q6_k
           : t == HY_DTYPE_Q5_0 ? hy_qmm_avx512_panel16_q5_0
           : t == HY_DTYPE_Q8_0 ? hy_qmm_avx512_panel16_q8_0
           : t == HY_DTYPE_Q2_K ? hy_qmm_avx512_panel16_q2_k
           : t == HY_DTYPE_Q3_K ? hy_qmm_avx512_panel16_q3_k
           : t == HY_DTYPE_Q5_1 ? hy_qmm_avx512_panel16_q5_1
           : t == HY_DTYPE_IQ4_XS ? hy_qmm_avx512_panel16_iq4_xs
           : t == HY_DTYPE_Q4_0 ? hy_qmm_avx512_panel16_q4_0
           : t == HY_DTYPE_IQ4_NL ? hy_qmm_avx512_panel16_iq4_nl
                                : NULL;
}
#else
#define hy_q2_panel16_of(t) ((hy_q2_panel16_fn)NULL)
#endif

/* s[c*ss + r] for nw rows of w (stride ws bytes) and nx Q16 rows of x
 * (stride xs bytes), n elements each.  Rows go 16 at a time, a ragged end
 * or a short tile handled as in hy_q2_tile_one; 16 rows or more of a type
 * with a 16-row unpacker (p16) take it for their panels. */
static void hy_q2_tile(hy_dtype_t t, hy_q2_unpack_fn unpack, hy_q2_dec_fn dec,
                       hy_q2_panel16_fn p16r, int64_t n, float *s, size_t ss, const void *vw,
                       size_t ws, int nw, const void *vx, size_t xs, int nx)
{
    const hy_qmm_type_t *ty = hy_qmm_type(t);
    const char *w = vw, *x = vx;
    const int64_t nb = n / 32;
    const int64_t nkc = (nb + HY_Q2_KB - 1) / HY_Q2_KB;
    /* 16 rows at once where the type has a 16-row unpacker; the
     * K-quants' panels are whole super-blocks */
    const hy_q2_panel16_fn p16 = p16r ? p16r : nw >= 16 ? hy_q2_panel16_of(t) : NULL;
    const bool kp = p16 != NULL, sb8 = hy_dtype_info(t)->block == 256;
    const int64_t kbs = kp && sb8 ? 8 : nkc ? (nb + nkc - 1) / nkc : 0;
    /* a few tokens: the weights' memory time is most of the tile's */
    const bool pf = nx <= HY_TILE_PF_TOKENS && ws != 0;
    const hy_q2_run_fn run = (ty->flags & HY_QMM_OFFSET)     ? hy_q2_run_offset
                             : (ty->flags & HY_QMM_OFFSET16) ? hy_q2_run_offset16
                             : (ty->flags & HY_QMM_CHUNK16)  ? hy_q2_run_chunk16
                                                             : hy_q2_run_plain;
    hy_q2_blk_t panel[HY_Q2_KB] __attribute__((aligned(64)));
    float acc[HY_Q2_CT * 16] __attribute__((aligned(64)));
    float mac[HY_Q2_CT * 16] __attribute__((aligned(64)));

    if (nx == 1 && dec) {
        hy_q2_tile_one(dec, nb, s, w, ws, nw, (const hy_block_q16_t *)x);
        return;
    }
    /* HY_QMM_OFFSET16's half-block sums depend on the token alone: once
     * for the tile where they fit the buffer, else per panel and chunk */
    float hs[HY_Q2_HS_MAX] __attribute__((aligned(64)));
    const bool off16 = ty->flags & HY_QMM_OFFSET16;
    const bool hs_all = off16 && (int64_t)nx * nb * 2 <= HY_Q2_HS_MAX;
    if (hs_all)
        hy_q2_halfsums_to(hs, x, xs, nx, 0, nb, nb);
    for (int r0 = 0; r0 < nw; r0 += 16) {
        const int rb = nw >= 16 ? HY_MIN(r0, nw - 16) : 0;
        const int lane0 = r0 - rb, nst = HY_MIN(16, nw - r0);
        /* rows of each half that exist (the unpackers repeat the last) */
        const int n0 = HY_MIN(8, nw - rb), n1 = HY_MAX(1, HY_MIN(8, nw - rb - 8));
        const char *w1 = w + (size_t)HY_MIN(rb + 8, nw - 1) * ws;
        for (int c0 = 0; c0 < nx; c0 += HY_Q2_CT) {
            const int ct = HY_MIN(HY_Q2_CT, nx - c0);
#ifndef HY_Q2_AVX512
            memset(acc, 0, sizeof(float) * 16 * (size_t)ct);
            memset(mac, 0, sizeof(float) * 16 * (size_t)ct);
#endif
            for (int64_t kb = 0; kb < nb; kb += kbs) {
                const int64_t kn = HY_MIN(kbs, nb - kb);
                if (kp) {
                    p16(w + (size_t)rb * ws, ws, kb, kn, panel,
                        pf ? w + (size_t)(rb + 16) * ws : NULL);
                } else {
                    if (pf)
                        hy_q2_prefetch_next16(w + (size_t)rb * ws, ws, kb, kn, nb);
                    unpack(ty, w + (size_t)rb * ws, ws, n0, kb, kn, panel, 0);
                    unpack(ty, w1, ws, n1, kb, kn, panel, 1);
                }
                if (off16 && !hs_all)
                    hy_q2_halfsums_to(hs, x + (size_t)c0 * xs, xs, ct, kb, kn, kbs);
                for (int cc = 0; cc < ct; cc += HY_Q2_C) {
                    const size_t hc = hs_all ? (size_t)(c0 + cc) * (size_t)nb + (size_t)kb
                                             : (size_t)cc * (size_t)kbs;
                    const float *h = off16 ? hs + 2 * hc : NULL;
                    run(HY_MIN(HY_Q2_C, ct - cc), panel, kn,
                        x + (size_t)(c0 + cc) * xs + (size_t)kb * sizeof(hy_block_q16_t), xs, h,
                        2 * (size_t)(hs_all ? nb : kbs), acc + cc * 16, mac + cc * 16, kb == 0);
                }
            }
            for (int c = 0; c < ct; c++) {
                float *o = acc + c * 16;
                if (ty->flags & HY_QMM_HAS_OFFSET)
#pragma GCC unroll 16
                    for (int h = 0; h < 16; h += 8)
                        _mm256_store_ps(o + h, _mm256_add_ps(_mm256_load_ps(o + h),
                                                             _mm256_load_ps(mac + c * 16 + h)));
                float *d = s + (size_t)(c0 + c) * ss + r0;
                /* the output rows are far apart (a token's row of the
                 * result): plain stores, where memcpy's rep movs stalled on
                 * each row's first touch */
#ifdef HY_Q2_AVX512
                if (nst == 16 && nx >= HY_TILE_STREAM_TOKENS && ((uintptr_t)d & 63) == 0) {
                    _mm512_stream_ps(d, _mm512_load_ps(o));
                } else
#endif
                if (nst == 16) {
                    _mm256_storeu_ps(d, _mm256_load_ps(o));
                    _mm256_storeu_ps(d + 8, _mm256_load_ps(o + 8));
                } else {
                    memcpy(d, o + lane0, sizeof(float) * (size_t)nst);
                }
            }
        }
    }
    /* the streamed sums are in memory before the pool's barrier says so */
    _mm_sfence();
}

#ifdef HY_Q2_AVX512
#define HY_Q2_VTILE_ONE(t, n, s, w, ws, nw, x, nx)                                 \
    ((nx) == 1 && hy_q2_vtile_one(hy_q2_vdec_of(t), (n) / 32, s, w, ws, nw, x))
#else
#define HY_Q2_VTILE_ONE(t, n, s, w, ws, nw, x, nx) false
#endif
#define HY_Q2_TILE(name, t, unpacker, dec)                                         \
    void HY_Q2_SYM(tile_##name)(int64_t n, float *s, size_t ss, const void *w,    \
                                size_t ws, int nw, const void *x, size_t xs, int nx) \
    {                                                                              \
        if (HY_Q2_VTILE_ONE(t, n, s, w, ws, nw, x, nx))                            \
            return;                                                                \
        hy_q2_tile(t, unpacker, dec, NULL, n, s, ss, w, ws, nw, x, xs, nx);        \
    }
#define HY_Q2_TILE_X(name, t, flags)                                               \
    HY_Q2_TILE(name, t, hy_q2_unpack_##name, hy_q2_dec_##name)
HY_Q2_TYPES(HY_Q2_TILE_X)

/* ---- HY_WLAYOUT_ROWS16 at both levels ---- */

/* Block b's lines of the next 16 rows (pf: their block 0, bb bytes a
 * block of 16 rows) into L2. */
HY_Q2_INLINE void hy_q2_r16_prefetch(const char *pf, size_t bb, int64_t b)
{
    if (pf == NULL)
        return;
    const char *lo = pf + (size_t)b * bb;
#pragma GCC unroll 16
    for (size_t o = 0; o < bb; o += 64)
        _mm_prefetch(lo + o, _MM_HINT_T1);
}

/* Block j's share of the next 16 rows' super-block at pf (bb bytes) into
 * L2. */
HY_Q2_INLINE void hy_q2_k16_prefetch(const char *pf, size_t bb, const int j)
{
    if (pf == NULL)
        return;
    for (size_t o = 0; o < bb / 8 + 64; o += 64)
        _mm_prefetch(pf + (size_t)j * (bb / 8) + o, _MM_HINT_T1);
}

/* ---- HY_WLAYOUT_ROWS16 of the 32-element types (backend.h) ----
 * A block of 16 rows holds each field of the file's block (d, Q4_1's and
 * Q5_1's m, Q5_x's qh, each 32-bit word of qs) for the 16 rows together, a
 * 16-bit field in 32 bytes, a 32-bit one in 64 (one zmm at AVX-512; two
 * ymm at AVX2, half h: rows 8h..8h+7, the lanes of hy_q2_compute's panel
 * halves): the transposes of the file's layout (hy_a5t_tload: 20 shuffles
 * per 16 bytes of 16 rows; at AVX2 the panel's unpack, about a third of a
 * B = 8 product, PERFORMANCE.md section 21) are done once, at load.  A few
 * tokens then take each block straight from memory into the multiply-adds,
 * with no panel between (the panel's stores and reloads cost as much as
 * the transposes did); more tokens unpack a panel that every pass of them
 * reads, as hy_q2_tile does for the file's layout.  Either way each row's
 * sum is hy_q2_compute's: the exact int32 sums of the even and odd pairs
 * added, then one FMA per block in block order (Q4_1's and Q5_1's M terms
 * in their own sum, added at the end), so the bits equal those of the
 * file's layout at every level.  The field work is written once over the
 * level's vector (HY_Q2_V and the hy_q2_v_ helpers); the rows kernels
 * differ, as the register files do. */

/* The level's vector for the fields of 16 rows, and the few steps whose
 * instructions differ between the levels (AVX-512's ternary logic and
 * mask registers; AVX2's packs and compares). */
#ifdef HY_Q2_AVX512
typedef __m512i hy_q2_vi;
typedef __m512 hy_q2_vf;
#define HY_Q2_NH 1 /* vectors a 64-byte field of 16 rows takes */
#define HY_Q2_V(op) _mm512_##op
#define HY_Q2_VSI(op) _mm512_##op##_si512
#define HY_Q2_VCASTI(v) _mm512_castps_si512(v)
#define HY_Q2_VCASTF(v) _mm512_castsi512_ps(v)
#define HY_Q2_VST(p, v) _mm512_store_si512((p), (v))
/* Half h (AVX-512: all) of the 64-byte field at u + off. */
#define HY_Q2_VLD(u, off, h) _mm512_loadu_si512((u) + (off))
/* The 16-byte table at p in each 128-bit lane. */
#define HY_Q2_VTAB(p) \
    _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)(p)))
/* The packed K-quant scales of the vector's rows (quant_scales_x86.h). */
#define HY_Q2_VK4_SCALES hy_qx_k4_scales16
#define HY_Q2_VK3_SCALES hy_qx_k3_scales16

/* The dwords a, b, c, d in each 128-bit lane, in that order. */
HY_Q2_INLINE __m512i hy_q2_v_lanes(int a, int b, int c, int d)
{
    return _mm512_set4_epi32(d, c, b, a);
}

/* The f16 in the low (hi: high) half of each dword, as floats. */
HY_Q2_INLINE __m512 hy_q2_v_f16(__m512i v, const int hi)
{
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hi ? _mm512_srli_epi32(v, 16) : v));
}

/* Half h's (AVX-512: the 16 rows') f16 of the run at p, as floats. */
HY_Q2_INLINE __m512 hy_q2_v_f16s(const char *p, const int h)
{
    (void)h;
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}

/* c | (s & m), in one ternary-logic operation. */
HY_Q2_INLINE __m512i hy_q2_v_or_and(__m512i c, __m512i s, __m512i m)
{
    return _mm512_ternarylogic_epi32(c, s, m, 0xF8);
}

/* Q5_x's codes n with their high bits, the bytes of hq under bit: 16 added
 * where set (q5_1), or taken where clear (Q5_0's q - 16). */
HY_Q2_INLINE __m512i hy_q2_v_q5_high(__m512i n, __m512i hq, __m512i bit, const int q5_1)
{
    return q5_1 ? _mm512_mask_add_epi8(n, _mm512_test_epi8_mask(hq, bit), n, _mm512_set1_epi8(16))
                : _mm512_mask_sub_epi8(n, _mm512_testn_epi8_mask(hq, bit), n,
                                       _mm512_set1_epi8(16));
}

/* The even and odd bytes of a word of codes, each sign-extended to int16:
 * slot pairs 2k and 2k+1.  vpmaddubsw by 1 under the even (odd) bytes and
 * 0 under the others gives each byte's value exactly: two instructions
 * where the shifts were three, all on one port (bench_mm B = 1 in L2, nine
 * alternating rounds, q8_0 median 71.1 -> 78.8 GFLOP/s, q5_0 66.3 -> 72.0) */
HY_Q2_INLINE void hy_q2_v_pairs(__m512i v, __m512i *e, __m512i *o)
{
    *e = _mm512_maddubs_epi16(_mm512_set1_epi16(0x0001), v);
    *o = _mm512_maddubs_epi16(_mm512_set1_epi16(0x0100), v);
}
#else
typedef __m256i hy_q2_vi;
typedef __m256 hy_q2_vf;
#define HY_Q2_NH 2
#define HY_Q2_V(op) _mm256_##op
#define HY_Q2_VSI(op) _mm256_##op##_si256
#define HY_Q2_VCASTI(v) _mm256_castps_si256(v)
#define HY_Q2_VCASTF(v) _mm256_castsi256_ps(v)
#define HY_Q2_VST(p, v) _mm256_store_si256((__m256i *)(void *)(p), (v))
#define HY_Q2_VLD(u, off, h) _mm256_loadu_si256((const __m256i *)((u) + (off) + 32 * (h)))
#define HY_Q2_VTAB(p) \
    _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define HY_Q2_VK4_SCALES hy_qx_k4_scales8
#define HY_Q2_VK3_SCALES hy_qx_k3_scales8

HY_Q2_INLINE __m256i hy_q2_v_lanes(int a, int b, int c, int d)
{
    return _mm256_setr_epi32(a, b, c, d, a, b, c, d);
}

HY_Q2_INLINE __m256 hy_q2_v_f16(__m256i v, const int hi)
{
    const __m256i w =
        _mm256_and_si256(hi ? _mm256_srli_epi32(v, 16) : v, _mm256_set1_epi32(0xFFFF));
    /* packus per 128-bit lane: qwords 0 and 2 hold the 8 halves in order */
    return _mm256_cvtph_ps(_mm256_castsi256_si128(
        _mm256_permute4x64_epi64(_mm256_packus_epi32(w, w), 0x08)));
}

/* 8 rows' f16 at p, as floats. */
HY_Q2_INLINE __m256 hy_q2_f16s8(const char *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

HY_Q2_INLINE __m256 hy_q2_v_f16s(const char *p, const int h)
{
    return hy_q2_f16s8(p + 16 * h);
}

HY_Q2_INLINE __m256i hy_q2_v_or_and(__m256i c, __m256i s, __m256i m)
{
    return _mm256_or_si256(c, _mm256_and_si256(s, m));
}

/* (the bytes compared with their bit: no mask registers) */
HY_Q2_INLINE __m256i hy_q2_v_q5_high(__m256i n, __m256i hq, __m256i bit, const int q5_1)
{
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hq, bit), bit);
    return q5_1 ? _mm256_add_epi8(n, _mm256_and_si256(set, _mm256_set1_epi8(16)))
                : _mm256_sub_epi8(n, _mm256_andnot_si256(set, _mm256_set1_epi8(16)));
}

/* (by shifts) */
HY_Q2_INLINE void hy_q2_v_pairs(__m256i v, __m256i *e, __m256i *o)
{
    *e = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8);
    *o = _mm256_srai_epi16(v, 8);
}
#endif

/* Half h of block b's 32 signed codes of 16 rows as eight words: lane r
 * of word k holds row 8h+r's codes of elements 4k..4k+3 (Q16's slot pairs
 * 2k and 2k+1: even and odd bytes), one byte each. */
HY_Q2_INLINE hy_q2_vi hy_q2_r16_code(hy_dtype_t t, const char *blk, const int k, const int h)
{
    if (t == HY_DTYPE_Q8_0)
        return HY_Q2_VLD(blk, 32 + 64 * k, h);
    /* the fields before qs: d (32 bytes), Q4_1's and Q5_1's m (32), Q5_x's
     * qh (64) */
    const int q5 = t == HY_DTYPE_Q5_0 || t == HY_DTYPE_Q5_1;
    const int qh_at = t == HY_DTYPE_Q5_1 ? 64 : 32;
    const int qs_at = q5 ? qh_at + 64 : t == HY_DTYPE_Q4_1 ? 64 : 32;
    const hy_q2_vi v = HY_Q2_VLD(blk, qs_at + 64 * (k & 3), h);
    const hy_q2_vi m4 = HY_Q2_V(set1_epi8)(0x0F);
    /* elements 4k.. in the low nibbles of word k, 16 + 4k.. in the high */
    const hy_q2_vi n = HY_Q2_VSI(and)(k < 4 ? v : HY_Q2_V(srli_epi16)(v, 4), m4);
    if (t == HY_DTYPE_Q4_0)
        return HY_Q2_V(sub_epi8)(n, HY_Q2_V(set1_epi8)(8));
    if (t == HY_DTYPE_Q4_1)
        return n;
    if (t == HY_DTYPE_IQ4_NL)
        return HY_Q2_V(shuffle_epi8)(HY_Q2_VTAB(hy_quant_iq4nl_values), n);
    /* Q5_0: q - 16, Q5_1: q, the high bit of element e bit e of the row's
     * qh: the qh byte holding the word's four bits in each of its bytes (a
     * shuffle per 128-bit lane), tested against the byte's own bit */
    const int j = k & 3, hb = k >> 2;
    const hy_q2_vi idx = HY_Q2_V(add_epi8)(hy_q2_v_lanes(0x00000000, 0x04040404, 0x08080808,
                                                         0x0C0C0C0C),
                                           HY_Q2_V(set1_epi8)((char)(2 * hb + j / 2)));
    const hy_q2_vi bit = HY_Q2_V(set1_epi32)((j & 1) ? (int)0x80402010 : 0x08040201);
    const hy_q2_vi hq = HY_Q2_V(shuffle_epi8)(HY_Q2_VLD(blk, qh_at, h), idx);
    return hy_q2_v_q5_high(n, hq, bit, t == HY_DTYPE_Q5_1);
}

/* Half h of block blk's D and M (Q4_1's and Q5_1's m; zero for the types
 * without). */
HY_Q2_INLINE hy_q2_vf hy_q2_r16_d(const char *blk, const int h)
{
    return hy_q2_v_f16s(blk, h);
}

HY_Q2_INLINE hy_q2_vf hy_q2_r16_m(hy_dtype_t t, const char *blk, const int h)
{
    return t == HY_DTYPE_Q4_1 || t == HY_DTYPE_Q5_1 ? hy_q2_v_f16s(blk + 32, h)
                                                    : HY_Q2_V(setzero_ps)();
}

/* qmm.h's panel16 contract over the rearranged blocks of type t. */
HY_Q2_INLINE void hy_q2_r16_panel(hy_dtype_t t, const char *w, int64_t b0, int64_t nb,
                                  hy_qmm_pblk_t *p, const char *pf)
{
    const size_t bb = 16 * hy_q2_block_bytes(t);

    for (int64_t ib = 0; ib < nb; ib++) {
        const char *blk = w + (size_t)(b0 + ib) * bb;
#pragma GCC unroll 2
        for (int h = 0; h < HY_Q2_NH; h++) {
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                hy_q2_vi e, o;
                hy_q2_v_pairs(hy_q2_r16_code(t, blk, k, h), &e, &o);
                HY_Q2_VST(p[ib].q[2 * k][h], e);
                HY_Q2_VST(p[ib].q[2 * k + 1][h], o);
            }
            HY_Q2_V(store_ps)(p[ib].d[h], hy_q2_r16_d(blk, h));
            HY_Q2_V(store_ps)(p[ib].m[h], hy_q2_r16_m(t, blk, h));
        }
        hy_q2_r16_prefetch(pf, bb, b0 + ib);
    }
}

#ifdef HY_Q2_AVX512
/* s[c*ss + 0..16) for the 16 rows at w (nb blocks of type t) and C <= 8
 * tokens: the sums in registers over all blocks, each block's words read
 * once.  Q5_1 (HY_QMM_OFFSET) adds its M terms' sums at the end, as the
 * tile does, and keeps one int32 chain per token (the M sums take the
 * registers of the second). */
HY_Q2_INLINE void hy_q2_r16_rows(hy_dtype_t t, const int C, int64_t nb, float *s, size_t ss,
                                 const char *w, const char *x, size_t xs, const char *pf)
{
    const size_t bb = 16 * hy_q2_block_bytes(t);
    const bool off = t == HY_DTYPE_Q5_1;
    __m512 A[HY_Q2_C], MA[HY_Q2_C];

#pragma GCC unroll 8
    for (int c = 0; c < C; c++)
        A[c] = MA[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *blk = w + (size_t)b * bb;
        const hy_block_q16_t *xb[HY_Q2_C];
        __m512i P[HY_Q2_C], P2[HY_Q2_C];
        hy_q2_block_start(C, x, xs, b, xb, P, P2);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m512i e, o;
            hy_q2_v_pairs(hy_q2_r16_code(t, blk, k, 0), &e, &o);
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) {
                hy_q2_dpwssd_bcast(&P[c], e, xb[c]->v + 4 * k);
                hy_q2_dpwssd_bcast(off ? &P[c] : &P2[c], o, xb[c]->v + 4 * k + 2);
            }
        }
        hy_q2_r16_prefetch(pf, bb, b);
        const __m512 D = hy_q2_r16_d(blk, 0);
        const __m512 M = hy_q2_r16_m(t, blk, 0);
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            A[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(off ? P[c] : _mm512_add_epi32(P[c], P2[c])),
                                   _mm512_mul_ps(D, _mm512_set1_ps(xb[c]->d)), A[c]);
            if (off)
                MA[c] = _mm512_fmadd_ps(M, _mm512_set1_ps(xb[c]->s), MA[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; c++)
        _mm512_storeu_ps(s + (size_t)c * ss, off ? _mm512_add_ps(A[c], MA[c]) : A[c]);
}

#else
/* Tokens the rows kernel takes in one pass: two int32 chains each (the
 * halves), with both halves' codes and the two broadcast pairs, fill 14 of
 * the 16 ymm registers at 4; the float sums live in L1. */
#define HY_Q2_R16_C 4
/* Tokens up to which a tile of type t takes the rows kernel (in passes of
 * HY_Q2_R16_C); more unpack a panel once for all of them.  The rows
 * kernel decodes the codes again in each pass: at 8 tokens that is cheaper
 * than the panel's stores and reloads for Q8_0, Q4_0 and Q4_1 (bench_mm
 * B = 8, Zen 3: 56%, 50% and 51% of the int16 peak against 46%, 46% and
 * 49%), dearer for the types whose codes cost more (Q5_x's high bits,
 * IQ4_NL's table: 38-45% against 47-52%; the K-quants, whose scales are
 * unpacked again too: 29-40% against 33-44%). */
HY_Q2_INLINE int hy_q2_r16_rows_max(hy_dtype_t t)
{
    return t == HY_DTYPE_Q8_0 || t == HY_DTYPE_Q4_0 || t == HY_DTYPE_Q4_1 ? 8 : 4;
}

/* Token c's block b of x (rows xs apart) at xb[c], its chains empty. */
HY_Q2_INLINE void hy_q2_h_start(const int C, const char *x, size_t xs, int64_t b,
                                const hy_block_q16_t **xb, __m256i *P0, __m256i *P1)
{
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        xb[c] = (const hy_block_q16_t *)(x + (size_t)c * xs) + b;
        P0[c] = P1[c] = _mm256_setzero_si256();
    }
}

/* Word k's slot pairs of both halves (e0, o0 and e1, o1) by each token's
 * broadcast pairs into its chains: each broadcast feeds both halves (it
 * costs an issue slot like a multiply-add; hy_q2_compute shares it the
 * same way), one add chain per sum as there. */
HY_Q2_INLINE void hy_q2_h_madd(const int C, const hy_block_q16_t *const *xb, const int k,
                               __m256i e0, __m256i o0, __m256i e1, __m256i o1, __m256i *P0,
                               __m256i *P1)
{
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        const __m256i be = hy_q2_bcast(xb[c]->v + 4 * k);
        const __m256i bo = hy_q2_bcast(xb[c]->v + 4 * k + 2);
        P0[c] = _mm256_add_epi32(P0[c], _mm256_madd_epi16(e0, be));
        P1[c] = _mm256_add_epi32(P1[c], _mm256_madd_epi16(e1, be));
        P0[c] = _mm256_add_epi32(P0[c], _mm256_madd_epi16(o0, bo));
        P1[c] = _mm256_add_epi32(P1[c], _mm256_madd_epi16(o1, bo));
        __asm__("" : "+x"(P0[c]), "+x"(P1[c]));
    }
}

/* Each token's chains into its float sums (both halves): acc = fma(P,
 * D * d, acc). */
HY_Q2_INLINE void hy_q2_h_fold(const int C, const hy_block_q16_t *const *xb, const __m256i *P0,
                               const __m256i *P1, __m256 D0, __m256 D1, float (*acc)[16])
{
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        const __m256 dx = _mm256_set1_ps(xb[c]->d);
        _mm256_store_ps(acc[c], _mm256_fmadd_ps(_mm256_cvtepi32_ps(P0[c]), _mm256_mul_ps(D0, dx),
                                                _mm256_load_ps(acc[c])));
        _mm256_store_ps(acc[c] + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(P1[c]),
                                                    _mm256_mul_ps(D1, dx),
                                                    _mm256_load_ps(acc[c] + 8)));
    }
}

/* s[c*ss + 0..16) = each token's float sums, plus its M terms' (mac)
 * where the type has them (off). */
HY_Q2_INLINE void hy_q2_h_store(const int C, float (*acc)[16], float (*mac)[16],
                                const bool off, float *s, size_t ss)
{
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256 a = _mm256_load_ps(acc[c] + 8 * h);
            _mm256_storeu_ps(s + (size_t)c * ss + 8 * h,
                             off ? _mm256_add_ps(a, _mm256_load_ps(mac[c] + 8 * h)) : a);
        }
}

/* s[c*ss + 0..16) for the 16 rows at w (nb blocks of type t) and C <= 4
 * tokens: per block each word of codes is read once for every token and
 * each broadcast pair feeds both halves.  One int32
 * chain per token and half: the even and odd pairs' products in one sum,
 * the same exact integer as the panel kernel's. */
HY_Q2_INLINE void hy_q2_r16_rows(hy_dtype_t t, const int C, int64_t nb, float *s, size_t ss,
                                 const char *w, const char *x, size_t xs, const char *pf)
{
    const size_t bb = 16 * hy_q2_block_bytes(t);
    const bool off = t == HY_DTYPE_Q4_1 || t == HY_DTYPE_Q5_1;
    float acc[HY_Q2_R16_C][16] __attribute__((aligned(32)));
    float mac[HY_Q2_R16_C][16] __attribute__((aligned(32)));

    memset(acc, 0, sizeof acc);
    memset(mac, 0, sizeof mac);
    for (int64_t b = 0; b < nb; b++) {
        const char *blk = w + (size_t)b * bb;
        const hy_block_q16_t *xb[HY_Q2_R16_C];
        __m256i P0[HY_Q2_R16_C], P1[HY_Q2_R16_C];
        hy_q2_h_start(C, x, xs, b, xb, P0, P1);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m256i e0, o0, e1, o1;
            hy_q2_v_pairs(hy_q2_r16_code(t, blk, k, 0), &e0, &o0);
            hy_q2_v_pairs(hy_q2_r16_code(t, blk, k, 1), &e1, &o1);
            hy_q2_h_madd(C, xb, k, e0, o0, e1, o1, P0, P1);
        }
        hy_q2_r16_prefetch(pf, bb, b);
        hy_q2_h_fold(C, xb, P0, P1, hy_q2_r16_d(blk, 0), hy_q2_r16_d(blk, 1), acc);
        if (off) {
            const __m256 M0 = hy_q2_r16_m(t, blk, 0), M1 = hy_q2_r16_m(t, blk, 1);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                const __m256 sx = _mm256_set1_ps(xb[c]->s);
                _mm256_store_ps(mac[c], _mm256_fmadd_ps(M0, sx, _mm256_load_ps(mac[c])));
                _mm256_store_ps(mac[c] + 8, _mm256_fmadd_ps(M1, sx, _mm256_load_ps(mac[c] + 8)));
            }
        }
    }
    hy_q2_h_store(C, acc, mac, off, s, ss);
}
#endif

/* ---- the super-block types (Q2_K..Q6_K, IQ4_XS) in HY_WLAYOUT_ROWS16 ----
 * A super-block of 16 rows holds weight.c's runs of the file's block, each
 * 4-byte field of the 16 rows in 64 bytes (the offsets below are those
 * runs'): one zmm at AVX-512, two ymm at AVX2 (half h: rows 8h..8h+7, the
 * lanes of hy_q2_compute's panel halves).  Per super-block the rows'
 * scales come out of their packed fields once, as int32 per 16-element
 * half of each block, with D and the offsets (hy_q2_k16_prep); each
 * block's codes are then split into slot pairs and scaled in the same
 * instructions (hy_q2_k16_scaled): the decoder's int16 codes, so the int32
 * sums, the float steps and the bits are the file layout's.  As for the
 * 32-element types, the field work is written once over the level's
 * vector; the rows kernels after it differ, as the register files do. */


/* A super-block's terms beyond the codes, for half h's rows. */
typedef struct {
    hy_q2_vi sc[16]; /* the scale of half k of block j at sc[2j + k] */
    hy_q2_vf M[16];  /* HY_QMM_OFFSET: block j's M at M[2j]; OFFSET16: the halves' */
    hy_q2_vf D;
} hy_q2_k16_t;

/* Byte i % 4 of each dword of v[i / 4], unsigned (sgn: signed), as int32. */
HY_Q2_INLINE hy_q2_vi hy_q2_k16_byte(const hy_q2_vi *v, const int i, const int sgn)
{
    const hy_q2_vi u = HY_Q2_V(slli_epi32)(v[i / 4], 24 - 8 * (i % 4));
    return sgn ? HY_Q2_V(srai_epi32)(u, 24) : HY_Q2_V(srli_epi32)(u, 24);
}

/* -(dmin * m), as the decoders round it. */
HY_Q2_INLINE hy_q2_vf hy_q2_k16_neg_min(hy_q2_vf dmin, hy_q2_vi m)
{
    return HY_Q2_VCASTF(HY_Q2_VSI(xor)(
        HY_Q2_VCASTI(HY_Q2_V(mul_ps)(dmin, HY_Q2_V(cvtepi32_ps)(m))),
        HY_Q2_V(set1_epi32)((int)0x80000000u)));
}

/* Half h of the super-block of 16 rows at u: its scales, D and M into
 * *st. */
HY_Q2_INLINE void hy_q2_k16_prep(hy_dtype_t t, const char *u, const int h, hy_q2_k16_t *st)
{
    if (t == HY_DTYPE_Q4_K || t == HY_DTYPE_Q5_K) {
        /* dm at 0, the scales' three words at 64 */
        const hy_q2_vi dm = HY_Q2_VLD(u, 0, h);
        const hy_q2_vi uw[3] = {HY_Q2_VLD(u, 64, h), HY_Q2_VLD(u, 128, h), HY_Q2_VLD(u, 192, h)};
        hy_q2_vi sc[2], mn[2];
        HY_Q2_VK4_SCALES(uw, sc, mn);
        const hy_q2_vf dmin = hy_q2_v_f16(dm, 1);
        st->D = hy_q2_v_f16(dm, 0);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            st->sc[2 * j] = st->sc[2 * j + 1] = hy_q2_k16_byte(sc, j, 0);
            st->M[2 * j] = hy_q2_k16_neg_min(dmin, hy_q2_k16_byte(mn, j, 0));
        }
    } else if (t == HY_DTYPE_Q6_K) {
        /* the 16 int8 scales' words at 3072, d at 3328 */
        const hy_q2_vi sv[4] = {HY_Q2_VLD(u, 3072, h), HY_Q2_VLD(u, 3136, h),
                                HY_Q2_VLD(u, 3200, h), HY_Q2_VLD(u, 3264, h)};
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            st->sc[i] = hy_q2_k16_byte(sv, i, 1);
        st->D = hy_q2_v_f16s(u + 3328, h);
    } else if (t == HY_DTYPE_Q2_K) {
        /* group g's scale (low nibble) and min (high) in byte g of the
         * words at 0, d and dmin at 1280 */
        const hy_q2_vi sv[4] = {HY_Q2_VLD(u, 0, h), HY_Q2_VLD(u, 64, h), HY_Q2_VLD(u, 128, h),
                                HY_Q2_VLD(u, 192, h)};
        const hy_q2_vi dm = HY_Q2_VLD(u, 1280, h);
        const hy_q2_vf dmin = hy_q2_v_f16(dm, 1);
        st->D = hy_q2_v_f16(dm, 0);
#pragma GCC unroll 16
        for (int g = 0; g < 16; g++) {
            const hy_q2_vi v = hy_q2_k16_byte(sv, g, 0);
            st->sc[g] = HY_Q2_VSI(and)(v, HY_Q2_V(set1_epi32)(15));
            st->M[g] = hy_q2_k16_neg_min(dmin, HY_Q2_V(srli_epi32)(v, 4));
        }
    } else if (t == HY_DTYPE_Q3_K) {
        /* the 12 bytes of scales at 1536, d at 1728 */
        const hy_q2_vi a[3] = {HY_Q2_VLD(u, 1536, h), HY_Q2_VLD(u, 1600, h),
                               HY_Q2_VLD(u, 1664, h)};
        hy_q2_vi sq[4];
        HY_Q2_VK3_SCALES(a, sq);
#pragma GCC unroll 16
        for (int g = 0; g < 16; g++)
            st->sc[g] = hy_q2_k16_byte(sq, g, 1);
        st->D = hy_q2_v_f16s(u + 1728, h);
    } else {
        /* IQ4_XS: d and scales_h at 0, scales_l at 64 */
        const hy_q2_vi hd0 = HY_Q2_VLD(u, 0, h), hd1 = HY_Q2_VLD(u, 64, h);
        st->D = hy_q2_v_f16(hd0, 0);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const hy_q2_vi lsl = HY_Q2_VSI(and)(
                HY_Q2_V(srli_epi32)(hd1, 8 * (j / 2) + 4 * (j % 2)), HY_Q2_V(set1_epi32)(15));
            const hy_q2_vi lsh = HY_Q2_VSI(and)(HY_Q2_V(srli_epi32)(hd0, 16 + 2 * j),
                                                HY_Q2_V(set1_epi32)(3));
            st->sc[2 * j] = st->sc[2 * j + 1] = HY_Q2_V(sub_epi32)(
                HY_Q2_VSI(or)(lsl, HY_Q2_V(slli_epi32)(lsh, 4)), HY_Q2_V(set1_epi32)(32));
        }
    }
}

/* What the codes below are offset by: w = scale * (c - off). */
HY_Q2_INLINE int hy_q2_k16_off(hy_dtype_t t)
{
    return t == HY_DTYPE_Q6_K ? 32 : t == HY_DTYPE_Q3_K ? 4 : t == HY_DTYPE_IQ4_XS ? 128 : 0;
}

/* The bits at sh.. of each byte of half h of the word at u + off, under
 * mask m. */
HY_Q2_INLINE hy_q2_vi hy_q2_k16_bits(const char *u, int off, const int h, const int sh, char m)
{
    return HY_Q2_VSI(and)(HY_Q2_V(srli_epi32)(HY_Q2_VLD(u, off, h), (unsigned)sh),
                          HY_Q2_V(set1_epi8)(m));
}

/* c with the bits of each byte of half h of the word at u + off moved by
 * sh (left; right for sh < 0) and taken under mask m or-ed in: a code's
 * high bits from another field. */
HY_Q2_INLINE hy_q2_vi hy_q2_k16_or_high(hy_q2_vi c, const char *u, int off, const int h,
                                        const int sh, char m)
{
    const hy_q2_vi v = HY_Q2_VLD(u, off, h);
    const hy_q2_vi s = sh > 0   ? HY_Q2_V(slli_epi32)(v, (unsigned)sh)
                       : sh < 0 ? HY_Q2_V(srli_epi32)(v, (unsigned)-sh)
                                : v;
    return hy_q2_v_or_and(c, s, HY_Q2_V(set1_epi8)(m));
}

/* Half h of block j's codes of 16 rows, word k as hy_q2_r16_code's (lane
 * r holds row 8h+r's codes of elements 4k..4k+3), as unsigned bytes c
 * with the value c - hy_q2_k16_off(t): Q6_K's q (less 32), Q3_K's q with
 * the high bit as 4 (less 4), IQ4_XS's grid values plus 128. */
HY_Q2_INLINE hy_q2_vi hy_q2_k16_code(hy_dtype_t t, const char *u, const int j, const int k,
                                     const int h)
{
    if (t == HY_DTYPE_Q4_K || t == HY_DTYPE_Q5_K) {
        /* qs at 256 (Q5_K: 768): 32-byte run j / 2, nibble j % 2; Q5_K's
         * bit j of qh's byte (qh at 256) as 16 */
        const int qs = t == HY_DTYPE_Q4_K ? 256 : 768;
        const hy_q2_vi n = hy_q2_k16_bits(u, qs + 64 * (8 * (j / 2) + k), h, 4 * (j % 2), 0x0F);
        return t == HY_DTYPE_Q4_K ? n : hy_q2_k16_or_high(n, u, 256 + 64 * k, h, 4 - j, 0x10);
    }
    if (t == HY_DTYPE_Q6_K) {
        /* ql at 0: run 2 (j / 4) + j % 2, nibble (j % 4) / 2; bits 2m, 2m+1
         * (m = j % 4) of qh (at 2048, run j / 4) as 16 and 32 */
        const int hh = j / 4, m = j % 4;
        const hy_q2_vi n =
            hy_q2_k16_bits(u, 64 * (16 * hh + 8 * (m & 1) + k), h, 4 * (m >> 1), 0x0F);
        return hy_q2_k16_or_high(n, u, 2048 + 64 * (8 * hh + k), h, 4 - 2 * m, 0x30);
    }
    if (t == HY_DTYPE_Q2_K || t == HY_DTYPE_Q3_K) {
        /* bits 2 (j % 4) of qs's run j / 4 (at 256; Q3_K 512); Q3_K's bit
         * j of hmask (at 0) as 4 */
        const int qs = t == HY_DTYPE_Q2_K ? 256 : 512;
        const hy_q2_vi q = hy_q2_k16_bits(u, qs + 64 * (8 * (j / 4) + k), h, 2 * (j % 4), 0x03);
        return t == HY_DTYPE_Q2_K ? q : hy_q2_k16_or_high(q, u, 64 * k, h, 2 - j, 0x04);
    }
    /* IQ4_XS: qs at 128, block j's 16 bytes (4 words), nibble k / 4 */
    const hy_q2_vi n = hy_q2_k16_bits(u, 128 + 64 * (4 * j + (k & 3)), h, 4 * (k / 4), 0x0F);
    return HY_Q2_V(add_epi8)(HY_Q2_V(shuffle_epi8)(HY_Q2_VTAB(hy_quant_iq4nl_values), n),
                             HY_Q2_V(set1_epi8)((char)128));
}

/* A half's scale (int32 per row, |s| <= 128) as the scaled pairs take
 * it: s in bytes 0 and 2 of each dword (e) or 1 and 3 (o), and s * off
 * in both int16 halves. */
typedef struct {
    hy_q2_vi e, o, off;
} hy_q2_k16_sc_t;

HY_Q2_INLINE hy_q2_k16_sc_t hy_q2_k16_scale(hy_dtype_t t, hy_q2_vi s)
{
    const hy_q2_vi s16 = HY_Q2_VSI(or)(HY_Q2_VSI(and)(s, HY_Q2_V(set1_epi32)(0xFFFF)),
                                       HY_Q2_V(slli_epi32)(s, 16));
    const int off = hy_q2_k16_off(t);
    hy_q2_k16_sc_t sc;

    sc.e = HY_Q2_VSI(and)(s16, HY_Q2_V(set1_epi16)(0xFF));
    sc.o = HY_Q2_V(slli_epi16)(s16, 8);
    sc.off = HY_Q2_V(slli_epi16)(s16, off == 128 ? 7 : off == 32 ? 5 : off == 4 ? 2 : 0);
    return sc;
}

/* A word of codes as slot pairs 2k, 2k+1 (its even and odd bytes as
 * int16), times the scale: vpmaddubsw multiplies the unsigned code bytes
 * by the scale under the even (odd) bytes and adds the zero products of
 * the others, which splits and scales in one instruction (|c s| <= 255 *
 * 32: no saturation), less s * off. */
HY_Q2_INLINE void hy_q2_k16_scaled(hy_dtype_t t, hy_q2_vi v, const hy_q2_k16_sc_t *sc,
                                   hy_q2_vi *e, hy_q2_vi *o)
{
    *e = HY_Q2_V(maddubs_epi16)(v, sc->e);
    *o = HY_Q2_V(maddubs_epi16)(v, sc->o);
    if (hy_q2_k16_off(t)) {
        *e = HY_Q2_V(sub_epi16)(*e, sc->off);
        *o = HY_Q2_V(sub_epi16)(*o, sc->off);
    }
}

/* qmm.h's panel16 contract over the rearranged super-blocks of type t:
 * the codes scaled per half in int16 (|w| <= 4096), as the decoders give
 * them. */
HY_Q2_INLINE void hy_q2_k16_panel(hy_dtype_t t, const char *w, int64_t b0, int64_t nb,
                                  hy_qmm_pblk_t *p, const char *pf)
{
    const size_t bb = 16 * hy_q2_block_bytes(t);
    const bool off = t == HY_DTYPE_Q4_K || t == HY_DTYPE_Q5_K || t == HY_DTYPE_Q2_K;

    for (int64_t ib = 0; ib < nb; ib += 8) {
        const int64_t i = (b0 + ib) / 8;
        const char *u = w + (size_t)i * bb;
        hy_q2_k16_t st[HY_Q2_NH];
#pragma GCC unroll 2
        for (int h = 0; h < HY_Q2_NH; h++)
            hy_q2_k16_prep(t, u, h, &st[h]);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            hy_qmm_pblk_t *pk = p + ib + j;
#pragma GCC unroll 2
            for (int h = 0; h < HY_Q2_NH; h++) {
                const hy_q2_k16_sc_t sc[2] = {hy_q2_k16_scale(t, st[h].sc[2 * j]),
                                              hy_q2_k16_scale(t, st[h].sc[2 * j + 1])};
#pragma GCC unroll 8
                for (int k = 0; k < 8; k++) {
                    hy_q2_vi e, o;
                    hy_q2_k16_scaled(t, hy_q2_k16_code(t, u, j, k, h), &sc[k / 4], &e, &o);
                    HY_Q2_VST(pk->q[2 * k][h], e);
                    HY_Q2_VST(pk->q[2 * k + 1][h], o);
                }
                HY_Q2_V(store_ps)(pk->d[h], st[h].D);
                HY_Q2_V(store_ps)(pk->m[h], off ? st[h].M[2 * j] : HY_Q2_V(setzero_ps)());
                if (t == HY_DTYPE_Q2_K)
                    HY_Q2_V(store_ps)(pk->m2[h], st[h].M[2 * j + 1]);
            }
            hy_q2_k16_prefetch(pf ? pf + (size_t)i * bb : NULL, bb, j);
        }
    }
}

#ifdef HY_Q2_AVX512
/* Block j of super-block i (at u, its terms in *st) for C <= 8 tokens
 * into the float sums A and MA (hy_q2_k16_rows). */
HY_Q2_INLINE void hy_q2_k16_rows_blk(hy_dtype_t t, const int C, int64_t i, const int j,
                                     const char *u, const hy_q2_k16_t *st, const char *x,
                                     size_t xs, const float *hs, size_t hss, const char *pf,
                                     size_t bb, __m512 *A, __m512 *MA)
{
    const bool off = t == HY_DTYPE_Q4_K || t == HY_DTYPE_Q5_K, off16 = t == HY_DTYPE_Q2_K;
    const bool chunk16 = t == HY_DTYPE_Q6_K || t == HY_DTYPE_IQ4_XS;
    const bool one = (off || off16) && C > 4;
    const int64_t b = 8 * i + j;
    const hy_block_q16_t *xb[HY_Q2_C];
    __m512i P[HY_Q2_C], P2[HY_Q2_C];
    hy_q2_block_start(C, x, xs, b, xb, P, P2);
    const hy_q2_k16_sc_t sc[2] = {hy_q2_k16_scale(t, st->sc[2 * j]),
                                  hy_q2_k16_scale(t, st->sc[2 * j + 1])};
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        __m512i e, o;
        hy_q2_k16_scaled(t, hy_q2_k16_code(t, u, j, k, 0), &sc[k / 4], &e, &o);
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            __m512i *h = one || k < 4 ? &P[c] : &P2[c];
            hy_q2_dpwssd_bcast(h, e, xb[c]->v + 4 * k);
            hy_q2_dpwssd_bcast(h, o, xb[c]->v + 4 * k + 2);
        }
    }
    hy_q2_k16_prefetch(pf ? pf + (size_t)i * bb : NULL, bb, j);
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) {
        const __m512 dd = _mm512_mul_ps(st->D, _mm512_set1_ps(xb[c]->d));
        if (chunk16) {
            A[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P[c]), dd, A[c]);
            A[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P2[c]), dd, A[c]);
        } else {
            const __m512i q = one ? P[c] : _mm512_add_epi32(P[c], P2[c]);
            A[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), dd, A[c]);
        }
        if (off)
            MA[c] = _mm512_fmadd_ps(st->M[2 * j], _mm512_set1_ps(xb[c]->s), MA[c]);
        if (off16) {
            const float *h = hs + (size_t)c * hss + 2 * b;
            MA[c] = _mm512_fmadd_ps(st->M[2 * j + 1], _mm512_set1_ps(h[1]),
                                    _mm512_fmadd_ps(st->M[2 * j], _mm512_set1_ps(h[0]), MA[c]));
        }
    }
}

/* s[c*ss + 0..16) for the 16 rows at w (nsb super-blocks of type t) and C
 * <= 8 tokens, the sums in registers: each block's codes scaled as they
 * are split into pairs (hy_q2_k16_scaled: no more instructions than the
 * split alone; scaling each token's two sums instead, a vpmulld of two
 * uops each, was no faster at B = 1..4 and slower at 8), then an int32
 * chain per half, or for the offset types beyond 4 tokens one chain (the
 * M sums take the registers of the second).  hs: HY_QMM_OFFSET16's half
 * sums (hy_q2_halfsums_to, hss per token).  The blocks of a super-block
 * unrolled where a block's codes sit at shifts that depend on it (Q3_K to
 * Q6_K: immediate shifts instead of a count in a register and a branch on
 * its sign; bench_mm B = 8, 2026-12-07: q6_K, q5_K +20-40%, q3_K +12%);
 * Q2_K and IQ4_XS were no faster unrolled, so they keep the loop. */
HY_Q2_INLINE void hy_q2_k16_rows(hy_dtype_t t, const int C, int64_t nsb, float *s, size_t ss,
                                 const char *w, const char *x, size_t xs, const float *hs,
                                 size_t hss, const char *pf)
{
    const size_t bb = 16 * hy_q2_block_bytes(t);
    const bool off = t == HY_DTYPE_Q4_K || t == HY_DTYPE_Q5_K || t == HY_DTYPE_Q2_K;
    __m512 A[HY_Q2_C], MA[HY_Q2_C];

#pragma GCC unroll 8
    for (int c = 0; c < C; c++)
        A[c] = MA[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const char *u = w + (size_t)i * bb;
        hy_q2_k16_t st;
        hy_q2_k16_prep(t, u, 0, &st);
        if (t == HY_DTYPE_Q2_K || t == HY_DTYPE_IQ4_XS) {
            for (int j = 0; j < 8; j++)
                hy_q2_k16_rows_blk(t, C, i, j, u, &st, x, xs, hs, hss, pf, bb, A, MA);
        } else {
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                hy_q2_k16_rows_blk(t, C, i, j, u, &st, x, xs, hs, hss, pf, bb, A, MA);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; c++)
        _mm512_storeu_ps(s + (size_t)c * ss, off ? _mm512_add_ps(A[c], MA[c]) : A[c]);
}

/* quant.h's tile over rows of type t in HY_WLAYOUT_ROWS16: w at the first
 * of nw rows, both multiples of 16 (whole groups; ws = 0: no next rows to
 * prefetch).  Up to 8 tokens take the rows kernels; more, or Q2_K's half
 * sums beyond the buffer, the panel (hy_q2_tile). */
HY_Q2_INLINE void hy_q2_r16_tile(hy_dtype_t t, hy_q2_panel16_fn panel, int64_t n, float *s,
                                 size_t ss, const char *w, size_t ws, int nw, const char *x,
                                 size_t xs, int nx)
{
    const int64_t nb = n / 32;
    const bool sb8 = hy_q2_super(t), off16 = t == HY_DTYPE_Q2_K;
    float hs[HY_Q2_HS_MAX] __attribute__((aligned(64)));

    if (nx > HY_Q2_C || (off16 && (int64_t)nx * nb * 2 > HY_Q2_HS_MAX)) {
        hy_q2_tile(t, NULL, NULL, panel, n, s, ss, w, ws, nw, x, xs, nx);
        return;
    }
    if (off16)
        hy_q2_halfsums_to(hs, x, xs, nx, 0, nb, nb);
    for (int r0 = 0; r0 < nw; r0 += 16) {
        const char *wr = w + (size_t)r0 * ws, *pf = ws ? wr + 16 * ws : NULL;
        float *o = s + r0;
#define HY_Q2_R16_ROWS(C)                                                         \
    (sb8 ? hy_q2_k16_rows(t, C, nb / 8, o, ss, wr, x, xs, hs, 2 * (size_t)nb, pf) \
         : hy_q2_r16_rows(t, C, nb, o, ss, wr, x, xs, pf))
        switch (nx) {
        case 1: HY_Q2_R16_ROWS(1); break;
        case 2: HY_Q2_R16_ROWS(2); break;
        case 3: HY_Q2_R16_ROWS(3); break;
        case 4: HY_Q2_R16_ROWS(4); break;
        case 5: HY_Q2_R16_ROWS(5); break;
        case 6: HY_Q2_R16_ROWS(6); break;
        case 7: HY_Q2_R16_ROWS(7); break;
        default: HY_Q2_R16_ROWS(8); break;
        }
#undef HY_Q2_R16_ROWS
    }
}

#else
/* s[c*ss + 0..16) for the 16 rows at w (nsb super-blocks of type t) and C
 * <= 4 tokens: each block's codes of both halves scaled as they are split
 * into pairs, every broadcast pair feeding both halves, one int32 chain
 * per token and half (CHUNK16 types: one per 16 elements, added to the
 * float sum in turn, as hy_q2_compute does), the float sums in L1.  hs:
 * HY_QMM_OFFSET16's half sums (hy_q2_halfsums_to, hss per token). */
HY_Q2_INLINE void hy_q2_k16_rows(hy_dtype_t t, const int C, int64_t nsb, float *s, size_t ss,
                                 const char *w, const char *x, size_t xs, const float *hs,
                                 size_t hss, const char *pf)
{
    const size_t bb = 16 * hy_q2_block_bytes(t);
    const bool off = t == HY_DTYPE_Q4_K || t == HY_DTYPE_Q5_K, off16 = t == HY_DTYPE_Q2_K;
    const bool chunk16 = t == HY_DTYPE_Q6_K || t == HY_DTYPE_IQ4_XS;
    float acc[HY_Q2_R16_C][16] __attribute__((aligned(32)));
    float mac[HY_Q2_R16_C][16] __attribute__((aligned(32)));

    memset(acc, 0, sizeof acc);
    memset(mac, 0, sizeof mac);
    for (int64_t i = 0; i < nsb; i++) {
        const char *u = w + (size_t)i * bb;
        hy_q2_k16_t st[2];
        hy_q2_k16_prep(t, u, 0, &st[0]);
        hy_q2_k16_prep(t, u, 1, &st[1]);
        /* not unrolled as the panel is: with 16 ymm registers the unrolled
         * blocks ran B = 4 10-40% slower (bench_mm, 2026-12-07) */
        for (int j = 0; j < 8; j++) {
            const int64_t b = 8 * i + j;
            const hy_block_q16_t *xb[HY_Q2_R16_C];
            __m256i P0[HY_Q2_R16_C], P1[HY_Q2_R16_C];
            const hy_q2_k16_sc_t sc0[2] = {hy_q2_k16_scale(t, st[0].sc[2 * j]),
                                          hy_q2_k16_scale(t, st[0].sc[2 * j + 1])};
            const hy_q2_k16_sc_t sc1[2] = {hy_q2_k16_scale(t, st[1].sc[2 * j]),
                                          hy_q2_k16_scale(t, st[1].sc[2 * j + 1])};
            hy_q2_h_start(C, x, xs, b, xb, P0, P1);
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                if (chunk16 && k == 4) {
                    hy_q2_h_fold(C, xb, P0, P1, st[0].D, st[1].D, acc);
#pragma GCC unroll 4
                    for (int c = 0; c < C; c++)
                        P0[c] = P1[c] = _mm256_setzero_si256();
                }
                __m256i e0, o0, e1, o1;
                hy_q2_k16_scaled(t, hy_q2_k16_code(t, u, j, k, 0), &sc0[k / 4], &e0, &o0);
                hy_q2_k16_scaled(t, hy_q2_k16_code(t, u, j, k, 1), &sc1[k / 4], &e1, &o1);
                hy_q2_h_madd(C, xb, k, e0, o0, e1, o1, P0, P1);
            }
            hy_q2_k16_prefetch(pf ? pf + (size_t)i * bb : NULL, bb, j);
            hy_q2_h_fold(C, xb, P0, P1, st[0].D, st[1].D, acc);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                if (off) {
                    const __m256 sx = _mm256_set1_ps(xb[c]->s);
                    _mm256_store_ps(mac[c],
                                    _mm256_fmadd_ps(st[0].M[2 * j], sx, _mm256_load_ps(mac[c])));
                    _mm256_store_ps(mac[c] + 8, _mm256_fmadd_ps(st[1].M[2 * j], sx,
                                                                _mm256_load_ps(mac[c] + 8)));
                }
                if (off16) {
                    const float *hc = hs + (size_t)c * hss + 2 * b;
                    const __m256 u0 = _mm256_set1_ps(hc[0]), u1 = _mm256_set1_ps(hc[1]);
#pragma GCC unroll 2
                    for (int h = 0; h < 2; h++)
                        _mm256_store_ps(
                            mac[c] + 8 * h,
                            _mm256_fmadd_ps(st[h].M[2 * j + 1], u1,
                                            _mm256_fmadd_ps(st[h].M[2 * j], u0,
                                                            _mm256_load_ps(mac[c] + 8 * h))));
                }
            }
        }
    }
    hy_q2_h_store(C, acc, mac, off || off16, s, ss);
}

/* quant.h's tile over rows of type t in HY_WLAYOUT_ROWS16: w at the first
 * of nw rows, both multiples of 16 (ws = 0: no next rows to prefetch).
 * Q2_K's half sums beyond the buffer take the panel. */
HY_Q2_INLINE void hy_q2_r16_tile(hy_dtype_t t, hy_q2_panel16_fn panel, int64_t n, float *s,
                                 size_t ss, const char *w, size_t ws, int nw, const char *x,
                                 size_t xs, int nx)
{
    const int64_t nb = n / 32;
    const bool sb8 = hy_q2_super(t), off16 = t == HY_DTYPE_Q2_K;
    float hs[HY_Q2_HS_MAX] __attribute__((aligned(64)));

    if (nx > hy_q2_r16_rows_max(t) || (off16 && (int64_t)nx * nb * 2 > HY_Q2_HS_MAX)) {
        hy_q2_tile(t, NULL, NULL, panel, n, s, ss, w, ws, nw, x, xs, nx);
        return;
    }
    if (off16)
        hy_q2_halfsums_to(hs, x, xs, nx, 0, nb, nb);
    for (int r0 = 0; r0 < nw; r0 += 16) {
        const char *wr = w + (size_t)r0 * ws, *pf = ws ? wr + 16 * ws : NULL;
        for (int c0 = 0; c0 < nx; c0 += HY_Q2_R16_C) {
            const char *xc = x + (size_t)c0 * xs;
            const float *hc = hs + (size_t)c0 * 2 * (size_t)nb;
            float *o = s + (size_t)c0 * ss + r0;
#define HY_Q2_R16_ROWS(C)                                                               \
    (sb8 ? hy_q2_k16_rows(t, C, nb / 8, o, ss, wr, xc, xs, hc, 2 * (size_t)nb, pf) \
         : hy_q2_r16_rows(t, C, nb, o, ss, wr, xc, xs, pf))
            switch (HY_MIN(HY_Q2_R16_C, nx - c0)) {
            case 1: HY_Q2_R16_ROWS(1); break;
            case 2: HY_Q2_R16_ROWS(2); break;
            case 3: HY_Q2_R16_ROWS(3); break;
            default: HY_Q2_R16_ROWS(4); break;
            }
#undef HY_Q2_R16_ROWS
        }
    }
}

#endif

/* Per type, at either level: qmm.h's panel16 over its groups, and the
 * tile (Q4_1's at AVX-512 is quant_avx512.c's). */
#define HY_Q2_R16_TILE(name, t)                                                            \
    static void hy_q2_r16_panel_##name(const char *w, size_t ws, int64_t b0, int64_t nb,   \
                                       hy_qmm_pblk_t *p, const char *pf)                   \
    {                                                                                      \
        (void)ws;                                                                          \
        if (hy_q2_super(t))                                                                \
            hy_q2_k16_panel(t, w, b0, nb, p, pf);                                          \
        else                                                                               \
            hy_q2_r16_panel(t, w, b0, nb, p, pf);                                          \
    }                                                                                      \
    void HY_Q2_SYM(tile_##name##_rows16)(int64_t n, float *s, size_t ss, const void *w,    \
                                         size_t ws, int nw, const void *x, size_t xs,      \
                                         int nx)                                           \
    {                                                                                      \
        hy_q2_r16_tile(t, hy_q2_r16_panel_##name, n, s, ss, w, ws, nw, x, xs, nx);         \
    }
HY_Q2_R16_TILE(q8_0, HY_DTYPE_Q8_0)
HY_Q2_R16_TILE(q4_0, HY_DTYPE_Q4_0)
HY_Q2_R16_TILE(iq4_nl, HY_DTYPE_IQ4_NL)
HY_Q2_R16_TILE(q5_0, HY_DTYPE_Q5_0)
HY_Q2_R16_TILE(q5_1, HY_DTYPE_Q5_1)
#ifndef HY_Q2_AVX512
HY_Q2_R16_TILE(q4_1, HY_DTYPE_Q4_1)
#endif
HY_Q2_R16_TILE(q4_k, HY_DTYPE_Q4_K)
HY_Q2_R16_TILE(q5_k, HY_DTYPE_Q5_K)
HY_Q2_R16_TILE(q6_k, HY_DTYPE_Q6_K)
HY_Q2_R16_TILE(q2_k, HY_DTYPE_Q2_K)
HY_Q2_R16_TILE(q3_k, HY_DTYPE_Q3_K)
HY_Q2_R16_TILE(iq4_xs, HY_DTYPE_IQ4_XS)

#endif
