/*
 * attn_generic.c - the flash-attention kernels (attn_flash_impl.h) in
 * portable C, for CPUs without AVX2 (and the tests that pin the scalar
 * level): a "vector" is four floats operated on lane by lane, and exp is the
 * same Cephes polynomial as the SIMD files with fmaf (vexp.h), so the kernels keep
 * their one per-lane arithmetic for prefill and decode at this level too.
 * Built with the project's flags (-ffp-contract=off is not needed: every
 * fused operation here is an explicit fmaf).
 */
#include "backend/cpu/attn_flash.h"
#include "backend/cpu/quant.h"

#include <math.h>
#include <string.h>

#define HY_AF_W 4
#define HY_AF_VMAX 3
#define HY_AF_ND 4
#define HY_AF_DOT_Q 4
#define HY_AF_DOT_K 3
#define HY_AF_DEC_DQ 4
#define HY_AF_ENTRY hy_attn_flash_generic
#define HY_AF_DECODE_ENTRY hy_attn_decode_generic
#define HY_AF_MERGE_ENTRY hy_attn_merge_generic

typedef struct {
    float x[HY_AF_W];
} hy_af_v;

#define HY_AF_PRIM __attribute__((always_inline)) static inline
#define HY_AF_MAP(expr)                                                            \
    hy_af_v r;                                                                     \
    for (int i = 0; i < HY_AF_W; i++)                                              \
        r.x[i] = (expr);                                                           \
    return r

HY_AF_PRIM hy_af_v hy_af_zero(void) { HY_AF_MAP(0.0f); }
HY_AF_PRIM hy_af_v hy_af_load(const float *p) { HY_AF_MAP(p[i]); }
HY_AF_PRIM void hy_af_store(float *p, hy_af_v v)
{
    for (int i = 0; i < HY_AF_W; i++)
        p[i] = v.x[i];
}
HY_AF_PRIM hy_af_v hy_af_set1(float v) { HY_AF_MAP(v); }
HY_AF_PRIM hy_af_v hy_af_fma(hy_af_v a, hy_af_v b, hy_af_v c) { HY_AF_MAP(fmaf(a.x[i], b.x[i], c.x[i])); }
/* NaN-ignoring like maxps with the NaN in the first operand: returns b then */
HY_AF_PRIM hy_af_v hy_af_max(hy_af_v a, hy_af_v b) { HY_AF_MAP(a.x[i] > b.x[i] ? a.x[i] : b.x[i]); }
HY_AF_PRIM hy_af_v hy_af_sub(hy_af_v a, hy_af_v b) { HY_AF_MAP(a.x[i] - b.x[i]); }
HY_AF_PRIM hy_af_v hy_af_add(hy_af_v a, hy_af_v b) { HY_AF_MAP(a.x[i] + b.x[i]); }
HY_AF_PRIM hy_af_v hy_af_mul(hy_af_v a, hy_af_v b) { HY_AF_MAP(a.x[i] * b.x[i]); }

HY_AF_PRIM hy_af_v hy_af_exp(hy_af_v x) { HY_AF_MAP(hy_vexp1(x.x[i])); }

HY_AF_PRIM hy_af_v hy_af_mask_pos(hy_af_v s, int32_t j, const int32_t *qpos, const int32_t *qlo)
{
    HY_AF_MAP(j > qpos[i] || j < qlo[i] ? -INFINITY : s.x[i]);
}

/* p where x >= t, else 0 (a NaN x included) */
HY_AF_PRIM hy_af_v hy_af_keep_ge(hy_af_v p, hy_af_v x, float t) { HY_AF_MAP(x.x[i] >= t ? p.x[i] : 0.0f); }

HY_AF_PRIM hy_af_v hy_af_one_if_ninf(hy_af_v c, hy_af_v m) { HY_AF_MAP(m.x[i] == -INFINITY ? 1.0f : c.x[i]); }

HY_AF_PRIM hy_af_v hy_af_cvt_f16(const uint16_t *h) { HY_AF_MAP(hy_f16_to_f32(h[i])); }
/* The W codes from o of the q8_0 block at b, times its d. */
HY_AF_PRIM hy_af_v hy_af_cvt_q8(const uint8_t *b, size_t o)
{
    uint16_t d;
    memcpy(&d, b, sizeof d);
    HY_AF_MAP((float)(int8_t)b[2 + o + (size_t)i] * hy_f16_to_f32(d));
}

HY_AF_PRIM void hy_af_transpose(const float *src, size_t ss, float *dst, size_t ds)
{
#pragma GCC unroll 16
    for (int r = 0; r < HY_AF_W; r++)
#pragma GCC unroll 16
        for (int c = 0; c < HY_AF_W; c++)
            dst[c * ds + r] = src[r * ss + c];
}

HY_AF_PRIM void hy_af_transpose_v(hy_af_v *r)
{
    float t[HY_AF_W * HY_AF_W], u[HY_AF_W * HY_AF_W];

    for (int i = 0; i < HY_AF_W; i++)
        hy_af_store(t + i * HY_AF_W, r[i]);
    hy_af_transpose(t, HY_AF_W, u, HY_AF_W);
    for (int i = 0; i < HY_AF_W; i++)
        r[i] = hy_af_load(u + i * HY_AF_W);
}

#include "backend/cpu/attn_flash_impl.h"
