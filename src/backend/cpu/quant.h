/*
 * quant.h - CPU kernels for quantized weights: dequantize a row, quantize an
 * activation row into the weight type's dot-product partner, and the dot
 * product itself.  Each kernel exists as portable C, AVX2 and AVX-512
 * variants; hy_quant_traits() returns the best variant the running CPU
 * supports (cpuid, once), and tests can pin a level with hy_quant_set_isa().
 */
#ifndef HY_QUANT_H
#define HY_QUANT_H

#include "../../common/hy.h"
#include "../../common/dtype.h"

typedef enum {
    HY_ISA_SCALAR = 0,
    HY_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    HY_ISA_AVX512 = 2, /* AVX-512 F/BW/VL (+VNNI where used) */
} hy_isa_t;

typedef struct {
    /* Activation format the dot product consumes (e.g. Q8_1 for Q4_1
     * weights, F32 for F32 weights). */
    hy_dtype_t vec_dot_type;
    /* x (n floats) -> y in vec_dot_type; n a multiple of its block. */
    void (*from_float)(const float *x, void *y, int64_t n);
    /* *s = dot(weight row w, activation row x), n elements. */
    void (*vec_dot)(int64_t n, float *s, const void *w, const void *x);
    /* weight row -> n floats */
    void (*to_float)(const void *w, float *y, int64_t n);
} hy_quant_traits_t;

/* Highest level this CPU and this build support. */
hy_isa_t hy_cpu_isa(void);
/* Whether this AVX-512 CPU executes 512-bit floating-point operations as
 * two 256-bit halves (AMD Zen 4): kernels whose cost is per vector of
 * lanes, such as attention's horizontal sums, may then do better at the
 * AVX2 level. */
bool hy_cpu_avx512_split(void);
const char *hy_isa_name(hy_isa_t isa);
/* Pin the level used by hy_quant_traits (tests); returns HY_EUNSUPPORTED if
 * the CPU lacks it. */
int hy_quant_set_isa(hy_isa_t isa);
/* The level in use: the pinned one, else the CPU's. */
hy_isa_t hy_quant_isa(void);

/* Kernels for weight type t at the current level; NULL if unsupported. */
const hy_quant_traits_t *hy_quant_traits(hy_dtype_t t);

/* Half/bfloat conversions used everywhere. */
float hy_f16_to_f32(uint16_t h);
uint16_t hy_f32_to_f16(float f);
float hy_bf16_to_f32(uint16_t h);
uint16_t hy_f32_to_bf16(float f);

/* ---- additions (multi-row kernels) ---- */

typedef void (*hy_quant_dot_fn_t)(int64_t n, float *s, const void *w,
                                  const void *x);
/* Dots of nw weight rows (w + r*w_stride bytes) with nx activation rows
 * (x + c*x_stride bytes, already in vec_dot_type), n elements each:
 * s[c*s_stride + r] = vec_dot(w_r, x_c), bit-identical to vec_dot at the
 * same ISA level.  Register-blocked for prompt processing; s_stride counts
 * floats. */
typedef void (*hy_quant_tile_fn_t)(int64_t n, float *s, size_t s_stride,
                                   const void *w, size_t w_stride, int nw,
                                   const void *x, size_t x_stride, int nx);

/* Tile kernel for weight type t at the current level; NULL only where
 * hy_quant_traits(t) is NULL (types without a blocked kernel get a loop
 * over vec_dot). */
hy_quant_tile_fn_t hy_quant_vec_dot_tile(hy_dtype_t t);

/* ---- additions (activation precision) ----
 * hy_quant_traits() gives the quantized types ~16-bit activation partners
 * (dot within ~1e-5 of float): Q16 at the scalar and AVX2 levels and, at
 * AVX-512, for every type but Q4_0/Q4_1/Q8_0 (qmm.h), which take the same
 * values as two int8 planes (HY_DTYPE_Q8_2L) there.  Within a level every
 * kernel of a type gives a token's row the same bits in any batch.
 * These two return the single-level kernels instead (~1e-2 per dot):
 * ggml's Q8_0/Q8_1/Q8_K partners of Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K,
 * and Q5_0 over Q8_S (quant_impl.h); for float types and the other
 * quantized types (Q5_1, IQ4_NL, Q2_K, Q3_K, IQ4_XS: Q16 only) they equal
 * the plain functions. */
const hy_quant_traits_t *hy_quant_traits_q8(hy_dtype_t t);
hy_quant_tile_fn_t hy_quant_vec_dot_tile_q8(hy_dtype_t t);
/* The tile (hy_quant_vec_dot_tile's contract and bits, 16-bit activations)
 * that reads type t's rows in HY_WLAYOUT_ROWS16 (backend.h) where they lie,
 * whole groups of 16 rows at a time, at the selected level; NULL where
 * there is none (Q8_0, Q4_0, IQ4_NL, Q5_0 and Q5_1 have one at AVX-512). */
hy_quant_tile_fn_t hy_quant_vec_dot_tile_rows16(hy_dtype_t t);
/* The 8-bit activation mode ([engine] activation_bits = 8): the
 * single-level kernels of the types where they are faster at the current
 * level than the default ones (Q4_1, Q5_0 and Q4_K/Q5_K/Q6_K at AVX-512), the default
 * kernels of every other type. */
const hy_quant_traits_t *hy_quant_traits_a8(hy_dtype_t t);
hy_quant_tile_fn_t hy_quant_vec_dot_tile_a8(hy_dtype_t t);

#endif
