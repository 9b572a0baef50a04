/*
 * quant_impl.h - private to the quant kernels: the ggml block layouts, the
 * per-ISA kernel tables, and the portable reference kernels that the AVX2
 * and AVX-512 tables fall back to.  Only quant.c, quant_avx2.c,
 * quant_avx512.c and the tests include it.
 */
#ifndef HY_QUANT_IMPL_H
#define HY_QUANT_IMPL_H

#include <math.h>

#include "quant.h"

/* Tiles of this many tokens or more (prefill) write their sums past the
 * caches where the CPU has AVX-512 (the 16-row kernels, qmm_avx2.c and
 * quant_avx512.c): a token's 16 outputs are one line of its far-apart
 * row, and ordinary stores waited on each line's read for ownership,
 * often from the other core's cache (Gemma 3 pp512 at 2 threads: 3.6% of
 * the time in those stores).  The next op reads them back from memory. */
#define HY_TILE_STREAM_TOKENS 64

/* Tiles of this many tokens or fewer (decode, batched decode) read each
 * weight row once for little arithmetic, so their time is the weights'
 * memory time: the tiles prefetch the rows after the ones they multiply, and matmul.c hands each thread a contiguous run of row tiles
 * so that those rows are its own next ones.  Gemma 3 at 2 threads, 8
 * sequences decoding: 46 -> 31 ms a step; 64 sequences, 32 -> 64 here:
 * 183-186 -> 172-177 ms (SmolLM2: 117-130 -> 110-123). */
#define HY_TILE_PF_TOKENS 64

/* Block layouts exactly as ggml-common.h stores them (little-endian;
 * halves kept as raw uint16_t bits). */
typedef struct {
    uint16_t d;       /* f16 scale */
    uint8_t qs[16];   /* q[j] = qs[j] & 15, q[j+16] = qs[j] >> 4 */
} hy_block_q4_0_t;
typedef struct {
    uint16_t d, m;    /* f16 scale and offset: y = d*q + m */
    uint8_t qs[16];
} hy_block_q4_1_t;
typedef struct {
    uint16_t d;
    int8_t qs[32];
} hy_block_q8_0_t;
typedef struct {
    uint16_t d, s;    /* s = d * sum(qs), rounded to f16 */
    int8_t qs[32];
} hy_block_q8_1_t;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12]; /* 8 x (6-bit scale, 6-bit min), packed */
    uint8_t qs[128];
} hy_block_q4_k_t;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];     /* 5th bits */
    uint8_t qs[128];
} hy_block_q5_k_t;
typedef struct {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
} hy_block_q6_k_t;
typedef struct {
    float d;
    int8_t qs[256];
    int16_t bsums[16];  /* sums of each 16 consecutive qs */
} hy_block_q8_k_t;
typedef struct {
    uint16_t d;       /* y = d * (q - 16) */
    uint8_t qh[4];    /* bit j of the little-endian u32: 5th bit of q[j] */
    uint8_t qs[16];   /* low 4 bits, packed as in Q4_0 */
} hy_block_q5_0_t;
typedef struct {
    uint16_t d, m;    /* y = d*q + m */
    uint8_t qh[4];
    uint8_t qs[16];
} hy_block_q5_1_t;
typedef struct {
    uint8_t scales[16]; /* group g of 16: scale (low nibble), min (high) */
    uint8_t qs[64];     /* 2 bits: element 128h + 32j + l at qs[32h + l] >> 2j */
    uint16_t d, dmin;   /* y = d*sc_g*q - dmin*m_g */
} hy_block_q2_k_t;
typedef struct {
    uint8_t hmask[32];  /* bit j of hmask[l]: high bit of element 32j + l */
    uint8_t qs[64];     /* low 2 bits, laid out as in Q2_K */
    uint8_t scales[12]; /* 16 x 6-bit scales stored +32, see hy_quant_scale_q3_k */
    uint16_t d;         /* y = d*(sc_g - 32)*(q - (high bit ? 0 : 4)) */
} hy_block_q3_k_t;
typedef struct {
    uint16_t d;       /* y = d * hy_quant_iq4nl_values[q] */
    uint8_t qs[16];   /* packed as in Q4_0 */
} hy_block_iq4_nl_t;
typedef struct {
    uint16_t d;
    uint16_t scales_h;  /* 2 high bits of sub-block b's scale at bit 2b */
    uint8_t scales_l[4];/* 4 low bits of sub-block b's scale: nibble b%2 of byte b/2 */
    uint8_t qs[128];    /* sub-block b of 32: qs[16b..16b+15], packed as in Q4_0 */
} hy_block_iq4_xs_t;    /* y = d*(sc_b - 32) * hy_quant_iq4nl_values[q] */

/* Two-level int8 activations, hyserve's own partner format (ggml's Q8_x
 * blocks lose ~1e-2 of an outlier-heavy row to their single int8 scale).
 * Each element is v = round(x/d), |v| <= 127*256 = 32512 (d = amax/32512),
 * stored as v = 255*hi + lo with hi = round(v/255): both then lie in
 * [-127, 127] (255 is odd, so v/255 is never a tie and |lo| <= 127), which
 * keeps the AVX2 abs/sign trick and maddubs free of overflow.  A dot is
 * d_w*d*(255*sum(w*hi) + sum(w*lo)): two integer multiply-adds per block. */
typedef struct {
    float d;          /* x[j] ~= d * (255*hi[j] + lo[j]) */
    float s;          /* sum of the 32 x as float (Q4_1's m*sum(x) term);
                       * summed in the order hy_quant_sum32 fixes */
    int32_t vsum;     /* sum of the 32 v (Q4_0's -8*sum(v), exact) */
    int8_t hi[32];
    int8_t lo[32];
} hy_block_q8_2l_t;
typedef struct {
    float d;
    int32_t bsums[16]; /* sum of v over each 16 consecutive elements */
    int8_t hi[256];
    int8_t lo[256];
} hy_block_q8_k2l_t;

/* Single-level int8 activations with their exact sum (v = round(x/d), d =
 * amax/127 as a float): VNNI's dpbusd multiplies unsigned by signed bytes,
 * so Q5_0 puts its unsigned 5-bit codes q on the unsigned side and these on
 * the signed one, and its offset comes back out of the exact int32 sum as
 * 16*vsum: sum (q - 16) v = sum q v - 16 vsum. */
typedef struct {
    float d;          /* x[j] ~= d * qs[j] */
    int32_t vsum;     /* sum of the 32 qs */
    int8_t qs[32];
} hy_block_q8_s_t;

/* Largest |v| of the two-level formats. */
#define HY_Q8_2L_VMAX 32512.0f

/* The scale d = amax/32512 of n floats in a two-level (or Q16) block and
 * the 1/d (0 for an all-zero block) that v = round(x * (1/d)) uses: one
 * definition, so every format holding these v agrees on them. */
static inline float hy_quant_2l_scale(const float *x, int n, float *id)
{
    float amax = 0.0f;
    for (int j = 0; j < n; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / HY_Q8_2L_VMAX;
    *id = d != 0.0f ? 1.0f / d : 0.0f;
    return d;
}

/* Sum of 32 floats in the order the SIMD quantizer adds them (8 lanes of
 * 4 sequential adds, then the hsum tree), so every ISA stores the same s. */
static inline float hy_quant_sum32(const float *x)
{
    float a[8];
    for (int l = 0; l < 8; l++)
        a[l] = ((x[l] + x[8 + l]) + x[16 + l]) + x[24 + l];
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

_Static_assert(sizeof(hy_block_q8_2l_t) == 76, "q8_2l block");
_Static_assert(sizeof(hy_block_q8_s_t) == 40, "q8_s block");
_Static_assert(sizeof(hy_block_q8_k2l_t) == 580, "q8_K2l block");
_Static_assert(sizeof(hy_block_q4_0_t) == 18, "q4_0 block");
_Static_assert(sizeof(hy_block_q4_1_t) == 20, "q4_1 block");
_Static_assert(sizeof(hy_block_q8_0_t) == 34, "q8_0 block");
_Static_assert(sizeof(hy_block_q8_1_t) == 36, "q8_1 block");
_Static_assert(sizeof(hy_block_q4_k_t) == 144, "q4_K block");
_Static_assert(sizeof(hy_block_q5_k_t) == 176, "q5_K block");
_Static_assert(sizeof(hy_block_q6_k_t) == 210, "q6_K block");
_Static_assert(sizeof(hy_block_q8_k_t) == 292, "q8_K block");
_Static_assert(sizeof(hy_block_q5_0_t) == 22, "q5_0 block");
_Static_assert(sizeof(hy_block_q5_1_t) == 24, "q5_1 block");
_Static_assert(sizeof(hy_block_q2_k_t) == 84, "q2_K block");
_Static_assert(sizeof(hy_block_q3_k_t) == 110, "q3_K block");
_Static_assert(sizeof(hy_block_iq4_nl_t) == 18, "iq4_nl block");
_Static_assert(sizeof(hy_block_iq4_xs_t) == 136, "iq4_xs block");

/* The 16 values an IQ4_NL/IQ4_XS index selects (ggml's kvalues_iq4nl): a
 * non-uniform grid, denser near zero, within int8. */
static const int8_t hy_quant_iq4nl_values[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* One ISA level's kernels for one weight type.  `tile` is never NULL in a
 * table entry that has a vec_dot: types without a blocked kernel get the
 * generic loop over vec_dot. */
typedef struct {
    hy_quant_traits_t traits;
    hy_quant_tile_fn_t tile;
} hy_quant_kernels_t;

/* Tables indexed by hy_dtype_t; entries with vec_dot == NULL are
 * unsupported.  The AVX tables exist only in x86 builds. */
extern const hy_quant_kernels_t hy_quant_scalar_kernels[HY_DTYPE_COUNT];
extern const hy_quant_kernels_t hy_quant_avx2_kernels[HY_DTYPE_COUNT];
extern const hy_quant_kernels_t hy_quant_avx512_kernels[HY_DTYPE_COUNT];
/* The single-level (ggml Q8_0/Q8_1/Q8_K partner) kernels of the quantized
 * types, kept for hy_quant_traits_q8(); other entries empty. */
extern const hy_quant_kernels_t hy_quant_scalar_kernels_q8[HY_DTYPE_COUNT];
extern const hy_quant_kernels_t hy_quant_avx2_kernels_q8[HY_DTYPE_COUNT];
extern const hy_quant_kernels_t hy_quant_avx512_kernels_q8[HY_DTYPE_COUNT];

/* Portable reference kernels (quant.c), shared by the SIMD tables where a
 * SIMD version would not pay (K-quant dequantization). */
void hy_quant_ref_to_float_q4_k(const void *w, float *y, int64_t n);
void hy_quant_ref_to_float_q5_k(const void *w, float *y, int64_t n);
void hy_quant_ref_to_float_q6_k(const void *w, float *y, int64_t n);
void hy_quant_ref_to_float_q5_0(const void *w, float *y, int64_t n);
void hy_quant_ref_to_float_q5_1(const void *w, float *y, int64_t n);
void hy_quant_ref_to_float_q2_k(const void *w, float *y, int64_t n);
void hy_quant_ref_to_float_q3_k(const void *w, float *y, int64_t n);
void hy_quant_ref_to_float_iq4_nl(const void *w, float *y, int64_t n);
void hy_quant_ref_to_float_iq4_xs(const void *w, float *y, int64_t n);
void hy_quant_ref_to_float_f32(const void *w, float *y, int64_t n);
void hy_quant_ref_from_float_copy(const float *x, void *y, int64_t n);
/* Q5_0 over Q8_S at every level (the AVX-512 level tiles it its own way,
 * with these bits) and the Q8_S quantizer. */
void hy_quant_ref_from_float_q8_s(const float *x, void *y, int64_t n);
void hy_quant_ref_dot_q5_0_q8s(int64_t n, float *s, const void *w, const void *x);
void hy_quant_ref_tile_q5_0_q8s(int64_t n, float *s, size_t ss, const void *w, size_t ws,
                                int nw, const void *x, size_t xs, int nx);
void hy_quant_tile_generic(hy_quant_dot_fn_t dot, int64_t n, float *s,
                           size_t s_stride, const void *w, size_t w_stride,
                           int nw, const void *x, size_t x_stride, int nx);

/* Unpack the 6-bit (scale, min) pair k of a Q4_K/Q5_K scales[12] array. */
static inline void hy_quant_scale_min_k4(int k, const uint8_t *q, uint8_t *sc,
                                         uint8_t *m)
{
    if (k < 4) {
        *sc = q[k] & 63;
        *m = q[k + 4] & 63;
    } else {
        *sc = (uint8_t)((q[k + 4] & 0xF) | ((q[k - 4] >> 6) << 4));
        *m = (uint8_t)((q[k + 4] >> 4) | ((q[k] >> 6) << 4));
    }
}

/* Scale g (0..15) of a Q3_K block, minus its +32 bias: the low 4 bits are
 * nibble g/8 of scales[g%8], the high 2 bits field g/4 of scales[8 + g%4]. */
static inline int hy_quant_scale_q3_k(const uint8_t *scales, int g)
{
    int lo = (scales[g % 8] >> (4 * (g / 8))) & 15;
    int hi = (scales[8 + g % 4] >> (2 * (g / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* The 5th bits of a Q5_0/Q5_1 block: bit j of qh (little-endian) belongs to
 * element j. */
static inline int hy_quant_q5_high(const uint8_t *qh, int j)
{
    return (qh[j / 8] >> (j % 8)) & 1;
}

/* The 2-bit field of element e (0..255) of a Q2_K/Q3_K block's qs[64]. */
static inline int hy_quant_k2_low(const uint8_t *qs, int e)
{
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
}

/* Scale of sub-block b (0..7) of an IQ4_XS block, minus its +32 bias. */
static inline int hy_quant_scale_iq4_xs(const hy_block_iq4_xs_t *x, int b)
{
    int lo = (x->scales_l[b / 2] >> (4 * (b % 2))) & 15;
    int hi = (x->scales_h >> (2 * b)) & 3;
    return (lo | (hi << 4)) - 32;
}

#endif
