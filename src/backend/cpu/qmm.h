/*
 * qmm.h - the quantized dot products of the scalar, AVX2 and AVX-512
 * levels (Q4_1 has its own at AVX-512), one arithmetic for any number of
 * tokens.  Activations are Q16 blocks (the
 * two-level values v = round(x/d) of Q8_2L, |v| <= 32512, kept as int16).
 * A weight row is read in 32-element blocks; each block b gives int16
 * weights w_j (the type's integer codes with any sub-block scale folded
 * in, so that sum w_j v_j is exact in int32), a float scale D_b and, for
 * types with an offset, a float M_b (or one per 16 elements, M0_b and M1_b,
 * for Q2_K's per-16 mins).  Every kernel of these levels (vec_dot, the
 * one-token tile, the B-token tile) forms an output as
 *
 *     acc = 0, mac = 0
 *     for each block b, in order:
 *         for each integer chunk of b (all 32 elements, or halves of 16 for
 *         types whose |w| reaches 4096: HY_QMM_CHUNK16):
 *             acc = fmaf((float)P, D_b * d_b, acc)   P = exact sum w_j v_j
 *         offset types: mac = fmaf(M_b, s_b, mac)     s_b = float sum of x
 *         per-16 offsets: for h = 0, 1:
 *             mac = fmaf(Mh_b, (float)V_h * d_b, mac) V_h = exact sum of
 *                                                     v over half h
 *     y = acc + mac (offset types), else acc
 *
 * so an output has the same bits alone or in a batch of any size, tiled
 * any way, on any thread, at any of these levels.  A weight type plugs
 * in with a scalar block decoder (hy_qmm_decode_fn_t, which alone makes
 * it work at every level) and, for speed, an AVX2 unpacker that writes the
 * same codes for 8 rows at once (qmm_avx2.c, which the AVX-512 level
 * builds again as qmm_avx512.c).
 */
#ifndef HY_QMM_H
#define HY_QMM_H

#include "quant_impl.h"

/* Largest |v| of Q16 (that of Q8_2L). */
#define HY_QMM_VMAX 32512

/* Element j of a block is stored at v[hy_qmm_slot(j)]: each group of four
 * as x0, x2, x1, x3.  The pairs the int16 multiply-add takes, (v[2p],
 * v[2p+1]), are then elements (4i, 4i+2) and (4i+1, 4i+3): the even and
 * odd bytes (or nibbles) of a 32-bit word of weights, which the AVX2
 * unpackers separate with shifts and masks instead of shuffles. */
typedef struct {
    float d;        /* x[j] ~= d * v[hy_qmm_slot(j)] */
    float s;        /* float sum of the 32 x, in hy_quant_sum32's order */
    int16_t v[32];
} hy_block_q16_t;

static inline int hy_qmm_slot(int j)
{
    return (j & ~3) | ((j & 1) << 1) | ((j >> 1) & 1);
}
_Static_assert(sizeof(hy_block_q16_t) == 72, "q16 block");

/* Per-type flags of the contract above. */
#define HY_QMM_OFFSET 1  /* has the M_b * s_b term */
#define HY_QMM_CHUNK16 2 /* integer sums per 16 elements (|w| up to 4096) */
#define HY_QMM_OFFSET16 4 /* an offset per 16 elements: M[0], M[1] (Q2_K) */
#define HY_QMM_HAS_OFFSET (HY_QMM_OFFSET | HY_QMM_OFFSET16)

/* Block b (32 elements) of a weight row: the int16 codes, D_b and M_b in
 * M[0] (0 for types without an offset), or for HY_QMM_OFFSET16 types the
 * offsets of elements 0..15 and 16..31 in M[0] and M[1]. */
typedef void (*hy_qmm_decode_fn_t)(const void *row, int64_t b, int16_t w[32], float *D,
                                   float M[2]);

typedef struct {
    hy_qmm_decode_fn_t decode;
    int flags;               /* HY_QMM_OFFSET | HY_QMM_CHUNK16 | HY_QMM_OFFSET16 */
} hy_qmm_type_t;

/* The contract's description of weight type t; NULL if it has none. */
const hy_qmm_type_t *hy_qmm_type(hy_dtype_t t);

/* x (n floats, n a multiple of 32) -> Q16 blocks, portable reference. */
void hy_qmm_ref_from_float_q16(const float *x, void *y, int64_t n);
/* The contract in plain C: the scalar level's vec_dot, and the AVX2
 * level's (its tiles reproduce it bit for bit). */
void hy_qmm_ref_dot(const hy_qmm_type_t *ty, int64_t n, float *s, const void *w,
                    const void *x);

/* qmm_avx2.c (x86 builds): the Q16 quantizer; its tiles are declared
 * below.  (The AVX2 level's vec_dot is hy_qmm_ref_dot_*: the tiles give
 * its bits.) */
void hy_qmm_avx2_from_float_q16(const float *x, void *y, int64_t n);

/* Per type: the contract as vec_dot, a tile that loops over it (the scalar
 * level), and the AVX2 tile. */
#define HY_QMM_DECLARE(name)                                                       \
    void hy_qmm_ref_dot_##name(int64_t n, float *s, const void *w, const void *x); \
    void hy_qmm_ref_tile_##name(int64_t n, float *s, size_t ss, const void *w,    \
                                size_t ws, int nw, const void *x, size_t xs, int nx); \
    void hy_qmm_avx2_tile_##name(int64_t n, float *s, size_t ss, const void *w,   \
                                 size_t ws, int nw, const void *x, size_t xs, int nx); \
    void hy_qmm_avx512_tile_##name(int64_t n, float *s, size_t ss, const void *w, \
                                   size_t ws, int nw, const void *x, size_t xs, int nx);
HY_QMM_DECLARE(q4_0)
HY_QMM_DECLARE(q4_1)
HY_QMM_DECLARE(q8_0)
HY_QMM_DECLARE(q4_k)
HY_QMM_DECLARE(q5_k)
HY_QMM_DECLARE(q6_k)
HY_QMM_DECLARE(q5_0)
HY_QMM_DECLARE(q5_1)
HY_QMM_DECLARE(iq4_nl)
HY_QMM_DECLARE(q2_k)
HY_QMM_DECLARE(q3_k)
HY_QMM_DECLARE(iq4_xs)

/* One 32-element block of 16 weight rows (two halves of 8) as qmm's
 * many-token kernel reads it: per slot pair p and row, the pair of int16
 * codes w (the decoder's) in one int32, low half first. */
typedef struct {
    int32_t q[16][2][8];    /* [p][h][r]: row 8h+r's codes of slot pair p */
    float d[2][8], m[2][8]; /* D and M of each row */
    float m2[2][8];         /* HY_QMM_OFFSET16: M of elements 16..31 (m: 0..15) */
} hy_qmm_pblk_t;

/* qmm_avx2.c at the AVX-512 level: quant.h's tile over rows in
 * HY_WLAYOUT_ROWS16 (backend.h), whole groups of 16 (w at a group, nw a
 * multiple of 16): the bits of hy_qmm_avx512_tile_NAME on the file's rows. */
#define HY_QMM_ROWS16_DECLARE(name)                                                \
    void hy_qmm_avx512_tile_##name##_rows16(int64_t n, float *s, size_t ss, const void *w, \
                                            size_t ws, int nw, const void *x, size_t xs, \
                                            int nx);
HY_QMM_ROWS16_DECLARE(q8_0)
HY_QMM_ROWS16_DECLARE(q4_0)
HY_QMM_ROWS16_DECLARE(iq4_nl)
HY_QMM_ROWS16_DECLARE(q5_0)
HY_QMM_ROWS16_DECLARE(q5_1)
HY_QMM_ROWS16_DECLARE(q4_k)
HY_QMM_ROWS16_DECLARE(q5_k)
HY_QMM_ROWS16_DECLARE(q6_k)
HY_QMM_ROWS16_DECLARE(q2_k)
HY_QMM_ROWS16_DECLARE(q3_k)
HY_QMM_ROWS16_DECLARE(iq4_xs)
/* quant_avx512.c: Q4_1's, its default kernel over Q8_2L reading the groups */
HY_QMM_ROWS16_DECLARE(q4_1)
/* qmm_avx2.c at the AVX2 level: the same tiles, 8 rows per ymm, with the
 * bits of hy_qmm_avx2_tile_NAME on the file's rows. */
#define HY_QMM_ROWS16_AVX2_DECLARE(name)                                         \
    void hy_qmm_avx2_tile_##name##_rows16(int64_t n, float *s, size_t ss, const void *w, \
                                          size_t ws, int nw, const void *x, size_t xs,   \
                                          int nx);
HY_QMM_ROWS16_AVX2_DECLARE(q8_0)
HY_QMM_ROWS16_AVX2_DECLARE(q4_0)
HY_QMM_ROWS16_AVX2_DECLARE(iq4_nl)
HY_QMM_ROWS16_AVX2_DECLARE(q5_0)
HY_QMM_ROWS16_AVX2_DECLARE(q5_1)
HY_QMM_ROWS16_AVX2_DECLARE(q4_1)
HY_QMM_ROWS16_AVX2_DECLARE(q4_k)
HY_QMM_ROWS16_AVX2_DECLARE(q5_k)
HY_QMM_ROWS16_AVX2_DECLARE(q6_k)
HY_QMM_ROWS16_AVX2_DECLARE(q2_k)
HY_QMM_ROWS16_AVX2_DECLARE(q3_k)
HY_QMM_ROWS16_AVX2_DECLARE(iq4_xs)

/* quant_avx512.c: blocks [b0, b0+nb) of 16 rows w + r*ws as the panel's
 * blocks p[0..nb) (the AVX-512 level's qmm tiles take them for 16 rows at
 * once, in place of two passes of the 8-row extractors).  The K-quants
 * take whole super-blocks: b0 and nb multiples of 8.  pf (or NULL): the
 * next 16 rows, w + 16*ws, whose lines for these blocks go to L2 as the
 * blocks are unpacked. */
#define HY_QMM_PANEL16_DECLARE(name)                                               \
    void hy_qmm_avx512_panel16_##name(const char *w, size_t ws, int64_t b0, int64_t nb, \
                                      hy_qmm_pblk_t *p, const char *pf);
HY_QMM_PANEL16_DECLARE(q4_k)
HY_QMM_PANEL16_DECLARE(q5_k)
HY_QMM_PANEL16_DECLARE(q6_k)
HY_QMM_PANEL16_DECLARE(q5_0)
HY_QMM_PANEL16_DECLARE(q8_0)
HY_QMM_PANEL16_DECLARE(q2_k)
HY_QMM_PANEL16_DECLARE(q3_k)
HY_QMM_PANEL16_DECLARE(q5_1)
HY_QMM_PANEL16_DECLARE(iq4_xs)
HY_QMM_PANEL16_DECLARE(q4_0)
HY_QMM_PANEL16_DECLARE(iq4_nl)

/* Kernel-table entries (hy_quant_kernels_t) of a type at each level. */
#define HY_QMM_ENTRY_REF(name, to_float)                                           \
    {{HY_DTYPE_Q16, hy_qmm_ref_from_float_q16, hy_qmm_ref_dot_##name, to_float},  \
     hy_qmm_ref_tile_##name}
#define HY_QMM_ENTRY_AVX2(name, to_float)                                          \
    {{HY_DTYPE_Q16, hy_qmm_avx2_from_float_q16, hy_qmm_ref_dot_##name, to_float}, \
     hy_qmm_avx2_tile_##name}

/* The entries of every type qmm_avx2.c serves at the AVX2 level and, built
 * again as qmm_avx512.c, at the AVX-512 level (Q4_0/Q4_1/Q8_0 are not
 * here: AVX-512 has its own, quant_avx512.c). */
#define HY_QMM_ENTRIES_AVX2                                                        \
    [HY_DTYPE_Q4_K] = HY_QMM_ENTRY_AVX2(q4_k, hy_quant_ref_to_float_q4_k),         \
    [HY_DTYPE_Q5_K] = HY_QMM_ENTRY_AVX2(q5_k, hy_quant_ref_to_float_q5_k),         \
    [HY_DTYPE_Q6_K] = HY_QMM_ENTRY_AVX2(q6_k, hy_quant_ref_to_float_q6_k),         \
    [HY_DTYPE_Q5_0] = HY_QMM_ENTRY_AVX2(q5_0, hy_quant_ref_to_float_q5_0),         \
    [HY_DTYPE_Q5_1] = HY_QMM_ENTRY_AVX2(q5_1, hy_quant_ref_to_float_q5_1),         \
    [HY_DTYPE_IQ4_NL] = HY_QMM_ENTRY_AVX2(iq4_nl, hy_quant_ref_to_float_iq4_nl),   \
    [HY_DTYPE_Q2_K] = HY_QMM_ENTRY_AVX2(q2_k, hy_quant_ref_to_float_q2_k),         \
    [HY_DTYPE_Q3_K] = HY_QMM_ENTRY_AVX2(q3_k, hy_quant_ref_to_float_q3_k),         \
    [HY_DTYPE_IQ4_XS] = HY_QMM_ENTRY_AVX2(iq4_xs, hy_quant_ref_to_float_iq4_xs)
#define HY_QMM_ENTRY_AVX512(name, to_float)                                    \
    {{HY_DTYPE_Q16, hy_qmm_avx2_from_float_q16, hy_qmm_ref_dot_##name, to_float}, \
     hy_qmm_avx512_tile_##name}
#define HY_QMM_ENTRIES_AVX512                                                  \
    [HY_DTYPE_Q4_K] = HY_QMM_ENTRY_AVX512(q4_k, hy_quant_ref_to_float_q4_k),   \
    [HY_DTYPE_Q5_K] = HY_QMM_ENTRY_AVX512(q5_k, hy_quant_ref_to_float_q5_k),   \
    [HY_DTYPE_Q6_K] = HY_QMM_ENTRY_AVX512(q6_k, hy_quant_ref_to_float_q6_k),   \
    [HY_DTYPE_Q5_0] = HY_QMM_ENTRY_AVX512(q5_0, hy_quant_ref_to_float_q5_0),   \
    [HY_DTYPE_Q5_1] = HY_QMM_ENTRY_AVX512(q5_1, hy_quant_ref_to_float_q5_1),   \
    [HY_DTYPE_IQ4_NL] = HY_QMM_ENTRY_AVX512(iq4_nl, hy_quant_ref_to_float_iq4_nl), \
    [HY_DTYPE_Q2_K] = HY_QMM_ENTRY_AVX512(q2_k, hy_quant_ref_to_float_q2_k),   \
    [HY_DTYPE_Q3_K] = HY_QMM_ENTRY_AVX512(q3_k, hy_quant_ref_to_float_q3_k),   \
    [HY_DTYPE_IQ4_XS] = HY_QMM_ENTRY_AVX512(iq4_xs, hy_quant_ref_to_float_iq4_xs)

#endif
