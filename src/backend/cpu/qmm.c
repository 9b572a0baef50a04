/*
 * qmm.c - the portable half of qmm.h: the Q16 activation quantizer, each
 * weight type's block decoder (its int16 codes, D and M for one 32-element
 * block: the definition the AVX2 unpackers are tested against) and the
 * contract's dot product in plain C.  Built with -ffp-contract=off, like
 * every quant file: the only fused operations are the contract's fmaf.
 */
#include <math.h>
#include <string.h>

#include "qmm.h"

void hy_qmm_ref_from_float_q16(const float *x, void *vy, int64_t n)
{
    hy_block_q16_t *y = vy;

    for (int64_t i = 0; i < n / 32; i++) {
        const float *xb = x + i * 32;
        /* the d, 1/d and rounding of Q8_2L, so v = 255*hi + lo exactly */
        float id, d = hy_quant_2l_scale(xb, 32, &id);
        for (int j = 0; j < 32; j++)
            y[i].v[hy_qmm_slot(j)] = (int16_t)nearbyintf(xb[j] * id);
        y[i].d = d;
        y[i].s = hy_quant_sum32(xb);
    }
}

/* ---- block decoders: w[j] for element j of block b, D_b, M_b ---- */

static void hy_qmm_decode_q4_0(const void *row, int64_t b, int16_t w[32], float *D, float *M)
{
    const hy_block_q4_0_t *blk = (const hy_block_q4_0_t *)row + b;

    for (int j = 0; j < 16; j++) {
        w[j] = (int16_t)((blk->qs[j] & 15) - 8);
        w[j + 16] = (int16_t)((blk->qs[j] >> 4) - 8);
    }
    *D = hy_f16_to_f32(blk->d);
    *M = 0.0f;
}

static void hy_qmm_decode_q4_1(const void *row, int64_t b, int16_t w[32], float *D, float *M)
{
    const hy_block_q4_1_t *blk = (const hy_block_q4_1_t *)row + b;

    for (int j = 0; j < 16; j++) {
        w[j] = (int16_t)(blk->qs[j] & 15);
        w[j + 16] = (int16_t)(blk->qs[j] >> 4);
    }
    *D = hy_f16_to_f32(blk->d);
    *M = hy_f16_to_f32(blk->m);
}

static void hy_qmm_decode_q8_0(const void *row, int64_t b, int16_t w[32], float *D, float *M)
{
    const hy_block_q8_0_t *blk = (const hy_block_q8_0_t *)row + b;

    for (int j = 0; j < 32; j++)
        w[j] = blk->qs[j];
    *D = hy_f16_to_f32(blk->d);
    *M = 0.0f;
}

/* Q4_K/Q5_K: sub-block k of a 256-block is y = d*sc_k*q - dmin*m_k, so
 * w = sc_k*q (<= 63*31 = 1953: a 32-element sum stays below 2^31), D = d,
 * M = -(dmin*m_k). */
static void hy_qmm_decode_q45_k(int is5, const void *row, int64_t b, int16_t w[32], float *D,
                                float *M)
{
    const hy_block_q4_k_t *w4 = (const hy_block_q4_k_t *)row + b / 8;
    const hy_block_q5_k_t *w5 = (const hy_block_q5_k_t *)row + b / 8;
    const uint8_t *qs = is5 ? w5->qs : w4->qs, *scales = is5 ? w5->scales : w4->scales;
    int k = (int)(b % 8), shift = (k & 1) * 4;
    const uint8_t *q = qs + (k / 2) * 32;
    uint8_t sc, m;

    hy_quant_scale_min_k4(k, scales, &sc, &m);
    for (int l = 0; l < 32; l++) {
        int qv = (q[l] >> shift) & 15;
        if (is5)
            qv += ((w5->qh[l] >> k) & 1) * 16;
        w[l] = (int16_t)(sc * qv);
    }
    *D = hy_f16_to_f32(is5 ? w5->d : w4->d);
    *M = -(hy_f16_to_f32(is5 ? w5->dmin : w4->dmin) * (float)m);
}

static void hy_qmm_decode_q4_k(const void *row, int64_t b, int16_t w[32], float *D, float *M)
{
    hy_qmm_decode_q45_k(0, row, b, w, D, M);
}

static void hy_qmm_decode_q5_k(const void *row, int64_t b, int16_t w[32], float *D, float *M)
{
    hy_qmm_decode_q45_k(1, row, b, w, D, M);
}

/* Q6_K: 16-element sub-blocks, y = d*sc*(q - 32) with sc in [-128, 127],
 * so |w| <= 4096 and the integer sums are taken per 16 (HY_QMM_CHUNK16). */
static void hy_qmm_decode_q6_k(const void *row, int64_t b, int16_t w[32], float *D, float *M)
{
    const hy_block_q6_k_t *blk = (const hy_block_q6_k_t *)row + b / 8;
    int j = (int)(b % 8), half = j / 4, m = j % 4;
    const uint8_t *ql = blk->ql + 64 * half, *qh = blk->qh + 32 * half;
    const int8_t *sc = blk->scales + 8 * half;

    for (int l = 0; l < 32; l++) {
        int lo = m & 1 ? ql[l + 32] : ql[l];
        int q = ((m < 2 ? lo & 15 : lo >> 4) | (((qh[l] >> (2 * m)) & 3) << 4)) - 32;
        w[l] = (int16_t)(sc[l / 16 + 2 * m] * q);
    }
    *D = hy_f16_to_f32(blk->d);
    *M = 0.0f;
}

/* Q5_0/Q5_1: the nibbles of Q4_0/Q4_1 with bit j of qh on top as 16;
 * Q5_0 stores q + 16. */
static void hy_qmm_decode_q5(const uint8_t *qh, const uint8_t *qs, int off, int16_t w[32])
{
    for (int j = 0; j < 16; j++) {
        w[j] = (int16_t)(((qs[j] & 15) | hy_quant_q5_high(qh, j) << 4) - off);
        w[j + 16] = (int16_t)(((qs[j] >> 4) | hy_quant_q5_high(qh, j + 16) << 4) - off);
    }
}

static void hy_qmm_decode_q5_0(const void *row, int64_t b, int16_t w[32], float *D, float *M)
{
    const hy_block_q5_0_t *blk = (const hy_block_q5_0_t *)row + b;

    hy_qmm_decode_q5(blk->qh, blk->qs, 16, w);
    *D = hy_f16_to_f32(blk->d);
    *M = 0.0f;
}

static void hy_qmm_decode_q5_1(const void *row, int64_t b, int16_t w[32], float *D, float *M)
{
    const hy_block_q5_1_t *blk = (const hy_block_q5_1_t *)row + b;

    hy_qmm_decode_q5(blk->qh, blk->qs, 0, w);
    *D = hy_f16_to_f32(blk->d);
    *M = hy_f16_to_f32(blk->m);
}

/* IQ4_NL, and IQ4_XS's sub-blocks: 16 bytes of grid indices packed as in
 * Q4_0, times an integer scale (1 for IQ4_NL). */
static void hy_qmm_decode_iq4(const uint8_t *qs, int scale, int16_t w[32])
{
    for (int j = 0; j < 16; j++) {
        w[j] = (int16_t)(scale * hy_quant_iq4nl_values[qs[j] & 15]);
        w[j + 16] = (int16_t)(scale * hy_quant_iq4nl_values[qs[j] >> 4]);
    }
}

static void hy_qmm_decode_iq4_nl(const void *row, int64_t b, int16_t w[32], float *D, float *M)
{
    const hy_block_iq4_nl_t *blk = (const hy_block_iq4_nl_t *)row + b;

    hy_qmm_decode_iq4(blk->qs, 1, w);
    *D = hy_f16_to_f32(blk->d);
    *M = 0.0f;
}

/* IQ4_XS: sub-block k of a 256-block is y = d*(ls_k - 32)*grid[q], so
 * w = (ls_k - 32)*grid[q], |w| <= 32*127 = 4064: integer sums per 16
 * (HY_QMM_CHUNK16), as for Q6_K. */
static void hy_qmm_decode_iq4_xs(const void *row, int64_t b, int16_t w[32], float *D, float *M)
{
    const hy_block_iq4_xs_t *blk = (const hy_block_iq4_xs_t *)row + b / 8;
    int k = (int)(b % 8);

    hy_qmm_decode_iq4(blk->qs + 16 * k, hy_quant_scale_iq4_xs(blk, k), w);
    *D = hy_f16_to_f32(blk->d);
    *M = 0.0f;
}

/* Q3_K: 16-element groups g of y = d*(sc_g - 32)*(q - (high bit ? 0 : 4)),
 * so w = (sc_g - 32)*q, |w| <= 128, D = d. */
static void hy_qmm_decode_q3_k(const void *row, int64_t b, int16_t w[32], float *D, float *M)
{
    const hy_block_q3_k_t *blk = (const hy_block_q3_k_t *)row + b / 8;
    int k = (int)(b % 8);

    for (int l = 0; l < 32; l++) {
        int e = 32 * k + l, hi = (blk->hmask[l] >> k) & 1;
        w[l] = (int16_t)(hy_quant_scale_q3_k(blk->scales, e / 16) *
                         (hy_quant_k2_low(blk->qs, e) - (hi ? 0 : 4)));
    }
    *D = hy_f16_to_f32(blk->d);
    *M = 0.0f;
}

/* Q2_K: 16-element groups g of y = d*sc_g*q - dmin*m_g, so w = sc_g*q
 * (<= 45), D = d and an offset per group: M[h] = -(dmin*m_g) for the two
 * groups of the block (HY_QMM_OFFSET16). */
static void hy_qmm_decode_q2_k(const void *row, int64_t b, int16_t w[32], float *D, float *M)
{
    const hy_block_q2_k_t *blk = (const hy_block_q2_k_t *)row + b / 8;
    int k = (int)(b % 8);
    float dmin = hy_f16_to_f32(blk->dmin);

    for (int l = 0; l < 32; l++) {
        int e = 32 * k + l;
        w[l] = (int16_t)((blk->scales[e / 16] & 15) * hy_quant_k2_low(blk->qs, e));
    }
    *D = hy_f16_to_f32(blk->d);
    M[0] = -(dmin * (float)(blk->scales[2 * k] >> 4));
    M[1] = -(dmin * (float)(blk->scales[2 * k + 1] >> 4));
}

static const hy_qmm_type_t hy_qmm_types[HY_DTYPE_COUNT] = {
    [HY_DTYPE_Q4_0] = {hy_qmm_decode_q4_0, 0},
    [HY_DTYPE_Q4_1] = {hy_qmm_decode_q4_1, HY_QMM_OFFSET},
    [HY_DTYPE_Q8_0] = {hy_qmm_decode_q8_0, 0},
    [HY_DTYPE_Q4_K] = {hy_qmm_decode_q4_k, HY_QMM_OFFSET},
    [HY_DTYPE_Q5_K] = {hy_qmm_decode_q5_k, HY_QMM_OFFSET},
    [HY_DTYPE_Q6_K] = {hy_qmm_decode_q6_k, HY_QMM_CHUNK16},
    [HY_DTYPE_Q5_0] = {hy_qmm_decode_q5_0, 0},
    [HY_DTYPE_Q5_1] = {hy_qmm_decode_q5_1, HY_QMM_OFFSET},
    [HY_DTYPE_IQ4_NL] = {hy_qmm_decode_iq4_nl, 0},
    [HY_DTYPE_Q2_K] = {hy_qmm_decode_q2_k, HY_QMM_OFFSET16},
    [HY_DTYPE_Q3_K] = {hy_qmm_decode_q3_k, 0},
    [HY_DTYPE_IQ4_XS] = {hy_qmm_decode_iq4_xs, HY_QMM_CHUNK16},
};

const hy_qmm_type_t *hy_qmm_type(hy_dtype_t t)
{
    if ((unsigned)t >= HY_DTYPE_COUNT || !hy_qmm_types[t].decode)
        return NULL;
    return &hy_qmm_types[t];
}

void hy_qmm_ref_dot(const hy_qmm_type_t *ty, int64_t n, float *s, const void *w,
                    const void *vx)
{
    const hy_block_q16_t *x = vx;
    float acc = 0.0f, mac = 0.0f;

    for (int64_t b = 0; b < n / 32; b++) {
        int16_t wq[32];
        float D, M[2];
        int32_t p[2] = {0, 0}, vs[2] = {0, 0};

        ty->decode(w, b, wq, &D, M);
        for (int j = 0; j < 32; j++) {
            p[j / 16] += (int32_t)wq[j] * x[b].v[hy_qmm_slot(j)];
            vs[j / 16] += x[b].v[j]; /* slots 0..15 hold elements 0..15 */
        }
        float sc = D * x[b].d;
        if (ty->flags & HY_QMM_CHUNK16) {
            acc = fmaf((float)p[0], sc, acc);
            acc = fmaf((float)p[1], sc, acc);
        } else {
            acc = fmaf((float)(p[0] + p[1]), sc, acc);
        }
        if (ty->flags & HY_QMM_OFFSET)
            mac = fmaf(M[0], x[b].s, mac);
        if (ty->flags & HY_QMM_OFFSET16) {
            /* |V_h| <= 16*32512: exact in float, one rounding for * d */
            mac = fmaf(M[0], (float)vs[0] * x[b].d, mac);
            mac = fmaf(M[1], (float)vs[1] * x[b].d, mac);
        }
    }
    *s = ty->flags & HY_QMM_HAS_OFFSET ? acc + mac : acc;
}

/* The scalar level's kernels: vec_dot is the contract, tiles loop over it. */
#define HY_QMM_REF_KERNELS(name, t)                                                \
    void hy_qmm_ref_dot_##name(int64_t n, float *s, const void *w, const void *x) \
    {                                                                              \
        hy_qmm_ref_dot(&hy_qmm_types[t], n, s, w, x);                              \
    }                                                                              \
    void hy_qmm_ref_tile_##name(int64_t n, float *s, size_t ss, const void *w,    \
                                size_t ws, int nw, const void *x, size_t xs, int nx) \
    {                                                                              \
        hy_quant_tile_generic(hy_qmm_ref_dot_##name, n, s, ss, w, ws, nw, x, xs,   \
                              nx);                                                 \
    }
HY_QMM_REF_KERNELS(q4_0, HY_DTYPE_Q4_0)
HY_QMM_REF_KERNELS(q4_1, HY_DTYPE_Q4_1)
HY_QMM_REF_KERNELS(q8_0, HY_DTYPE_Q8_0)
HY_QMM_REF_KERNELS(q4_k, HY_DTYPE_Q4_K)
HY_QMM_REF_KERNELS(q5_k, HY_DTYPE_Q5_K)
HY_QMM_REF_KERNELS(q6_k, HY_DTYPE_Q6_K)
HY_QMM_REF_KERNELS(q5_0, HY_DTYPE_Q5_0)
HY_QMM_REF_KERNELS(q5_1, HY_DTYPE_Q5_1)
HY_QMM_REF_KERNELS(iq4_nl, HY_DTYPE_IQ4_NL)
HY_QMM_REF_KERNELS(q2_k, HY_DTYPE_Q2_K)
HY_QMM_REF_KERNELS(q3_k, HY_DTYPE_Q3_K)
HY_QMM_REF_KERNELS(iq4_xs, HY_DTYPE_IQ4_XS)
