/*
 * quant.c - the portable reference quant kernels, half/bfloat conversions,
 * and the runtime choice between scalar, AVX2 and AVX-512 tables.  The
 * scalar code is written plainly: it is what the SIMD variants are tested
 * against, so clarity beats speed here.  Built with -ffp-contract=off so that
 * dequantization is the same float arithmetic as in the SIMD files.
 */
#include <math.h>
#include <string.h>

#include "qmm.h"
#include "quant_impl.h"
#include "quant_ref.h"

/* ---- f16 / bf16 ---- */

float hy_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F;
    uint32_t mant = h & 0x3FF;
    uint32_t bits;
    float f;

    if (exp == 0x1F) {                 /* inf / nan, payload kept */
        bits = sign | 0x7F800000u | (mant << 13);
    } else if (exp != 0) {             /* normal: rebias 15 -> 127 */
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {            /* signed zero */
        bits = sign;
    } else {                           /* subnormal: normalize */
        uint32_t e = 113;
        while (!(mant & 0x400)) {
            mant <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((mant & 0x3FF) << 13);
    }
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest, ties to even, like F16C's vcvtps2ph with imm 0; NaN
 * stays NaN (quieted, top payload bits kept). */
uint16_t hy_f32_to_f16(float f)
{
    uint32_t x, ax;
    uint16_t sign;

    memcpy(&x, &f, 4);
    sign = (uint16_t)((x >> 16) & 0x8000);
    ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u)
        return (uint16_t)(sign | 0x7E00 | ((ax >> 13) & 0x3FF));
    if (ax >= 0x477FF000u)             /* >= 65520 rounds to inf */
        return (uint16_t)(sign | 0x7C00);
    if (ax >= 0x38800000u) {           /* half normal range */
        uint32_t odd = (ax >> 13) & 1;
        return (uint16_t)(sign | ((ax - (112u << 23) + 0xFFF + odd) >> 13));
    }
    {
        /* half subnormal: count units of 2^-24 and round by hand */
        uint32_t e = ax >> 23, mant, q, rem, half;
        int shift;

        if (e < 102)                   /* below 2^-25: rounds to zero */
            return sign;
        mant = (ax & 0x7FFFFF) | 0x800000;
        shift = 126 - (int)e;          /* 14 .. 24 */
        q = mant >> shift;
        rem = mant & ((1u << shift) - 1);
        half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return (uint16_t)(sign | q);   /* q == 0x400 is the smallest normal */
    }
}

float hy_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;

    memcpy(&f, &bits, 4);
    return f;
}

uint16_t hy_f32_to_bf16(float f)
{
    uint32_t x;

    memcpy(&x, &f, 4);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((x >> 16) | 0x40); /* quiet the nan */
    x += 0x7FFF + ((x >> 16) & 1);           /* nearest even; may carry to inf */
    return (uint16_t)(x >> 16);
}

/* ---- activation quantizers (reference) ----
 * Rounding is nearbyintf (ties to even) rather than roundf so that the SIMD
 * versions (vroundps nearest) give identical bytes. */

/* The single-level scale of n floats, d = amax/127, and the 1/d (0 for
 * an all-zero block) that v = round(x * (1/d)) uses. */
static float hy_quant_ref_scale8(const float *x, int n, float *id)
{
    float amax = 0.0f;

    for (int j = 0; j < n; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f;
    *id = d != 0.0f ? 1.0f / d : 0.0f;
    return d;
}

static void hy_quant_ref_from_float_q8_0(const float *x, void *vy, int64_t n)
{
    hy_block_q8_0_t *y = vy;

    for (int64_t i = 0; i < n / 32; i++) {
        float id, d = hy_quant_ref_scale8(x + i * 32, 32, &id);
        y[i].d = hy_f32_to_f16(d);
        for (int j = 0; j < 32; j++)
            y[i].qs[j] = (int8_t)nearbyintf(x[i * 32 + j] * id);
    }
}

static void hy_quant_ref_from_float_q8_1(const float *x, void *vy, int64_t n)
{
    hy_block_q8_1_t *y = vy;

    for (int64_t i = 0; i < n / 32; i++) {
        int sum = 0;
        float id, d = hy_quant_ref_scale8(x + i * 32, 32, &id);
        for (int j = 0; j < 32; j++) {
            y[i].qs[j] = (int8_t)nearbyintf(x[i * 32 + j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = hy_f32_to_f16(d);
        y[i].s = hy_f32_to_f16(d * (float)sum);
    }
}

void hy_quant_ref_from_float_q8_s(const float *x, void *vy, int64_t n)
{
    hy_block_q8_s_t *y = vy;

    for (int64_t i = 0; i < n / 32; i++) {
        float id, d = hy_quant_ref_scale8(x + i * 32, 32, &id);
        y[i].d = d;
        y[i].vsum = 0;
        for (int j = 0; j < 32; j++) {
            y[i].qs[j] = (int8_t)nearbyintf(x[i * 32 + j] * id);
            y[i].vsum += y[i].qs[j];
        }
    }
}

static void hy_quant_ref_from_float_q8_k(const float *x, void *vy, int64_t n)
{
    hy_block_q8_k_t *y = vy;

    for (int64_t i = 0; i < n / 256; i++) {
        float id, d = hy_quant_ref_scale8(x + i * 256, 256, &id);
        y[i].d = d;
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) {
                int8_t q = (int8_t)nearbyintf(x[i * 256 + g * 16 + j] * id);
                y[i].qs[g * 16 + j] = q;
                sum += q;
            }
            y[i].bsums[g] = (int16_t)sum;
        }
    }
}

/* Two-level quantizers: v = round(x/d) (ties to even), hi = round(v/255)
 * computed as the SIMD code does (float multiply by 1/255: exact, since
 * v/255 is never within 1e-3 of a tie), lo = v - 255*hi. */
static inline int hy_quant_split_2l(float x, float id, int8_t *hi, int8_t *lo)
{
    float f = nearbyintf(x * id);
    int v = (int)f, h = (int)nearbyintf(f * (1.0f / 255.0f));

    *hi = (int8_t)h;
    *lo = (int8_t)(v - 255 * h);
    return v;
}

static void hy_quant_ref_from_float_q8_2l(const float *x, void *vy, int64_t n)
{
    hy_block_q8_2l_t *y = vy;

    for (int64_t i = 0; i < n / 32; i++) {
        const float *xb = x + i * 32;
        int32_t vsum = 0;
        float id, d = hy_quant_2l_scale(xb, 32, &id);
        for (int j = 0; j < 32; j++)
            vsum += hy_quant_split_2l(xb[j], id, &y[i].hi[j], &y[i].lo[j]);
        y[i].d = d;
        y[i].s = hy_quant_sum32(xb);
        y[i].vsum = vsum;
    }
}

static void hy_quant_ref_from_float_q8_k2l(const float *x, void *vy, int64_t n)
{
    hy_block_q8_k2l_t *y = vy;

    for (int64_t i = 0; i < n / 256; i++) {
        const float *xb = x + i * 256;
        float id, d = hy_quant_2l_scale(xb, 256, &id);
        y[i].d = d;
        for (int g = 0; g < 16; g++) {
            int32_t sum = 0;
            for (int j = g * 16; j < g * 16 + 16; j++)
                sum += hy_quant_split_2l(xb[j], id, &y[i].hi[j], &y[i].lo[j]);
            y[i].bsums[g] = sum;
        }
    }
}

void hy_quant_ref_from_float_copy(const float *x, void *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}

/* ---- weight quantizers (tests, KV cache) ---- */

static void hy_quant_ref_from_float_q4_0(const float *x, void *vy, int64_t n)
{
    hy_block_q4_0_t *y = vy;

    for (int64_t i = 0; i < n / 32; i++) {
        const float *xb = x + i * 32;
        float amax = 0.0f, max = 0.0f;
        /* ggml maps the value of largest magnitude to -8 so that its sign
         * uses the asymmetric end of the range */
        for (int j = 0; j < 32; j++) {
            if (fabsf(xb[j]) > amax) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        }
        float d = max / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = hy_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)nearbyintf(xb[j] * id) + 8;
            int q1 = (int)nearbyintf(xb[j + 16] * id) + 8;
            q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
            q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void hy_quant_ref_from_float_q4_1(const float *x, void *vy, int64_t n)
{
    hy_block_q4_1_t *y = vy;

    for (int64_t i = 0; i < n / 32; i++) {
        const float *xb = x + i * 32;
        float min = xb[0], max = xb[0];
        for (int j = 1; j < 32; j++) {
            min = fminf(min, xb[j]);
            max = fmaxf(max, xb[j]);
        }
        float d = (max - min) / 15.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = hy_f32_to_f16(d);
        y[i].m = hy_f32_to_f16(min);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)nearbyintf((xb[j] - min) * id);
            int q1 = (int)nearbyintf((xb[j + 16] - min) * id);
            q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
            q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void hy_quant_ref_from_float_f16(const float *x, void *vy, int64_t n)
{
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++)
        y[i] = hy_f32_to_f16(x[i]);
}

static void hy_quant_ref_from_float_bf16(const float *x, void *vy, int64_t n)
{
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++)
        y[i] = hy_f32_to_bf16(x[i]);
}

/* ---- dequantization (reference) ---- */

void hy_quant_ref_to_float_f32(const void *w, float *y, int64_t n)
{
    memcpy(y, w, (size_t)n * sizeof(float));
}

static void hy_quant_ref_to_float_f16(const void *vw, float *y, int64_t n)
{
    const uint16_t *w = vw;
    for (int64_t i = 0; i < n; i++)
        y[i] = hy_f16_to_f32(w[i]);
}

static void hy_quant_ref_to_float_bf16(const void *vw, float *y, int64_t n)
{
    const uint16_t *w = vw;
    for (int64_t i = 0; i < n; i++)
        y[i] = hy_bf16_to_f32(w[i]);
}

static void hy_quant_ref_to_float_q4_0(const void *vw, float *y, int64_t n)
{
    const hy_block_q4_0_t *w = vw;

    for (int64_t i = 0; i < n / 32; i++) {
        float d = hy_f16_to_f32(w[i].d);
        for (int j = 0; j < 16; j++) {
            y[i * 32 + j] = d * (float)((w[i].qs[j] & 15) - 8);
            y[i * 32 + j + 16] = d * (float)((w[i].qs[j] >> 4) - 8);
        }
    }
}

static void hy_quant_ref_to_float_q4_1(const void *vw, float *y, int64_t n)
{
    const hy_block_q4_1_t *w = vw;

    for (int64_t i = 0; i < n / 32; i++) {
        float d = hy_f16_to_f32(w[i].d), m = hy_f16_to_f32(w[i].m);
        for (int j = 0; j < 16; j++) {
            y[i * 32 + j] = d * (float)(w[i].qs[j] & 15) + m;
            y[i * 32 + j + 16] = d * (float)(w[i].qs[j] >> 4) + m;
        }
    }
}

static void hy_quant_ref_to_float_q8_0(const void *vw, float *y, int64_t n)
{
    const hy_block_q8_0_t *w = vw;

    for (int64_t i = 0; i < n / 32; i++) {
        float d = hy_f16_to_f32(w[i].d);
        for (int j = 0; j < 32; j++)
            y[i * 32 + j] = d * (float)w[i].qs[j];
    }
}

/* One Q4_K or Q5_K super-block (qh: Q5_K's fifth bits; NULL for Q4_K)
 * into y[0 .. 256), as ggml's dequantize_row_q4_K / q5_K round it. */
static void hy_quant_ref_k45(uint16_t d16, uint16_t dmin16, const uint8_t *scales,
                             const uint8_t *q, const uint8_t *qh, float *y)
{
    float d = hy_f16_to_f32(d16), dmin = hy_f16_to_f32(dmin16);

    for (int c = 0; c < 4; c++) { /* 64-element chunks */
        uint8_t sc, m, u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
        hy_quant_scale_min_k4(2 * c, scales, &sc, &m);
        float d1 = d * sc, m1 = dmin * m;
        hy_quant_scale_min_k4(2 * c + 1, scales, &sc, &m);
        float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)((q[l] & 15) + (qh && (qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (float)((q[l] >> 4) + (qh && (qh[l] & u2) ? 16 : 0)) - m2;
        q += 32;
    }
}

void hy_quant_ref_to_float_q4_k(const void *vw, float *y, int64_t n)
{
    const hy_block_q4_k_t *w = vw;

    for (int64_t i = 0; i < n / 256; i++)
        hy_quant_ref_k45(w[i].d, w[i].dmin, w[i].scales, w[i].qs, NULL, y + 256 * i);
}

void hy_quant_ref_to_float_q5_k(const void *vw, float *y, int64_t n)
{
    const hy_block_q5_k_t *w = vw;

    for (int64_t i = 0; i < n / 256; i++)
        hy_quant_ref_k45(w[i].d, w[i].dmin, w[i].scales, w[i].qs, w[i].qh, y + 256 * i);
}

void hy_quant_ref_to_float_q6_k(const void *vw, float *y, int64_t n)
{
    const hy_block_q6_k_t *w = vw;

    for (int64_t i = 0; i < n / 256; i++) {
        float d = hy_f16_to_f32(w[i].d);
        const uint8_t *ql = w[i].ql, *qh = w[i].qh;
        const int8_t *sc = w[i].scales;
        for (int half = 0; half < 2; half++) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

void hy_quant_ref_to_float_q5_0(const void *vw, float *y, int64_t n)
{
    const hy_block_q5_0_t *w = vw;

    for (int64_t i = 0; i < n / 32; i++) {
        float d = hy_f16_to_f32(w[i].d);
        for (int j = 0; j < 16; j++) {
            int q0 = (w[i].qs[j] & 15) | hy_quant_q5_high(w[i].qh, j) << 4;
            int q1 = (w[i].qs[j] >> 4) | hy_quant_q5_high(w[i].qh, j + 16) << 4;
            y[i * 32 + j] = d * (float)(q0 - 16);
            y[i * 32 + j + 16] = d * (float)(q1 - 16);
        }
    }
}

/* Q5_0 over Q8_S: per block the exact int32 P = sum v_j * c_j (c the
 * signed codes, qmm.h's decoder), then acc = fmaf((float)P,
 * d_w * d_x, acc), and the result acc + 0.0f, as the AVX-512 tile's lanes
 * do (quant_avx512.c). */
void hy_quant_ref_dot_q5_0_q8s(int64_t n, float *s, const void *vw, const void *vx)
{
    const hy_qmm_type_t *ty = hy_qmm_type(HY_DTYPE_Q5_0);
    const hy_block_q8_s_t *x = vx;
    float acc = 0.0f;

    for (int64_t i = 0; i < n / 32; i++) {
        int16_t c[32];
        float D, M[2];
        int32_t p = 0;

        ty->decode(vw, i, c, &D, M);
        for (int j = 0; j < 32; j++)
            p += x[i].qs[j] * c[j];
        acc = fmaf((float)p, D * x[i].d, acc);
    }
    *s = acc + 0.0f;
}

void hy_quant_ref_tile_q5_0_q8s(int64_t n, float *s, size_t ss, const void *w, size_t ws,
                                int nw, const void *x, size_t xs, int nx)
{
    hy_quant_tile_generic(hy_quant_ref_dot_q5_0_q8s, n, s, ss, w, ws, nw, x, xs, nx);
}

void hy_quant_ref_to_float_q5_1(const void *vw, float *y, int64_t n)
{
    const hy_block_q5_1_t *w = vw;

    for (int64_t i = 0; i < n / 32; i++) {
        float d = hy_f16_to_f32(w[i].d), m = hy_f16_to_f32(w[i].m);
        for (int j = 0; j < 16; j++) {
            int q0 = (w[i].qs[j] & 15) | hy_quant_q5_high(w[i].qh, j) << 4;
            int q1 = (w[i].qs[j] >> 4) | hy_quant_q5_high(w[i].qh, j + 16) << 4;
            y[i * 32 + j] = d * (float)q0 + m;
            y[i * 32 + j + 16] = d * (float)q1 + m;
        }
    }
}

void hy_quant_ref_to_float_iq4_nl(const void *vw, float *y, int64_t n)
{
    const hy_block_iq4_nl_t *w = vw;

    for (int64_t i = 0; i < n / 32; i++) {
        float d = hy_f16_to_f32(w[i].d);
        for (int j = 0; j < 16; j++) {
            y[i * 32 + j] = d * (float)hy_quant_iq4nl_values[w[i].qs[j] & 15];
            y[i * 32 + j + 16] = d * (float)hy_quant_iq4nl_values[w[i].qs[j] >> 4];
        }
    }
}

void hy_quant_ref_to_float_q2_k(const void *vw, float *y, int64_t n)
{
    const hy_block_q2_k_t *w = vw;

    for (int64_t i = 0; i < n / 256; i++) {
        float d = hy_f16_to_f32(w[i].d), dmin = hy_f16_to_f32(w[i].dmin);
        for (int g = 0; g < 16; g++) {
            float dl = d * (float)(w[i].scales[g] & 15);
            float ml = dmin * (float)(w[i].scales[g] >> 4);
            for (int e = 16 * g; e < 16 * g + 16; e++)
                *y++ = dl * (float)hy_quant_k2_low(w[i].qs, e) - ml;
        }
    }
}

void hy_quant_ref_to_float_q3_k(const void *vw, float *y, int64_t n)
{
    const hy_block_q3_k_t *w = vw;

    for (int64_t i = 0; i < n / 256; i++) {
        float d = hy_f16_to_f32(w[i].d);
        for (int g = 0; g < 16; g++) {
            float dl = d * (float)hy_quant_scale_q3_k(w[i].scales, g);
            for (int e = 16 * g; e < 16 * g + 16; e++) {
                int hi = (w[i].hmask[e % 32] >> (e / 32)) & 1;
                *y++ = dl * (float)(hy_quant_k2_low(w[i].qs, e) - (hi ? 0 : 4));
            }
        }
    }
}

void hy_quant_ref_to_float_iq4_xs(const void *vw, float *y, int64_t n)
{
    const hy_block_iq4_xs_t *w = vw;

    for (int64_t i = 0; i < n / 256; i++) {
        float d = hy_f16_to_f32(w[i].d);
        for (int b = 0; b < 8; b++) {
            float dl = d * (float)hy_quant_scale_iq4_xs(&w[i], b);
            const uint8_t *q = w[i].qs + 16 * b;
            for (int j = 0; j < 16; j++)
                y[j] = dl * (float)hy_quant_iq4nl_values[q[j] & 15];
            for (int j = 0; j < 16; j++)
                y[j + 16] = dl * (float)hy_quant_iq4nl_values[q[j] >> 4];
            y += 32;
        }
    }
}

/* ---- dot products (reference): integer sums inside a block, float
 * accumulation across blocks, as ggml does ---- */

static void hy_quant_ref_dot_f32(int64_t n, float *s, const void *vw, const void *vx)
{
    const float *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += w[i] * x[i];
    *s = sum;
}

static void hy_quant_ref_dot_f16(int64_t n, float *s, const void *vw, const void *vx)
{
    const uint16_t *w = vw;
    const float *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += hy_f16_to_f32(w[i]) * x[i];
    *s = sum;
}

static void hy_quant_ref_dot_bf16(int64_t n, float *s, const void *vw, const void *vx)
{
    const uint16_t *w = vw;
    const float *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += hy_bf16_to_f32(w[i]) * x[i];
    *s = sum;
}

static void hy_quant_ref_dot_q4_0(int64_t n, float *s, const void *vw, const void *vx)
{
    const hy_block_q4_0_t *w = vw;
    const hy_block_q8_0_t *x = vx;
    float sum = 0.0f;

    for (int64_t i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += ((w[i].qs[j] & 15) - 8) * x[i].qs[j];
            isum += ((w[i].qs[j] >> 4) - 8) * x[i].qs[j + 16];
        }
        sum += hy_f16_to_f32(w[i].d) * hy_f16_to_f32(x[i].d) * (float)isum;
    }
    *s = sum;
}

static void hy_quant_ref_dot_q4_1(int64_t n, float *s, const void *vw, const void *vx)
{
    const hy_block_q4_1_t *w = vw;
    const hy_block_q8_1_t *x = vx;
    float sum = 0.0f;

    /* sum_j (d_w q_j + m)(d_x x_j) = d_w d_x sum q_j x_j + m * s_x */
    for (int64_t i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (w[i].qs[j] & 15) * x[i].qs[j];
            isum += (w[i].qs[j] >> 4) * x[i].qs[j + 16];
        }
        sum += hy_f16_to_f32(w[i].d) * hy_f16_to_f32(x[i].d) * (float)isum
             + hy_f16_to_f32(w[i].m) * hy_f16_to_f32(x[i].s);
    }
    *s = sum;
}

static void hy_quant_ref_dot_q8_0(int64_t n, float *s, const void *vw, const void *vx)
{
    const hy_block_q8_0_t *w = vw, *x = vx;
    float sum = 0.0f;

    for (int64_t i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 32; j++)
            isum += w[i].qs[j] * x[i].qs[j];
        sum += hy_f16_to_f32(w[i].d) * hy_f16_to_f32(x[i].d) * (float)isum;
    }
    *s = sum;
}

/* Q4_K/Q5_K: y = d*sc_k*q - dmin*m_k, so per block
 * dot = d_x*d*sum_k sc_k*(q.x)_k - d_x*dmin*sum_k m_k*(sum x)_k, the last
 * sums coming from the Q8_K bsums.  This is one super-block's two integer
 * sums (qh: Q5_K's fifth bits; NULL for Q4_K) by Q8_K block x: the first
 * into *sumi, the second into *summ. */
static void hy_quant_ref_sums_k45(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
                                  const hy_block_q8_k_t *x, int *sumi, int *summ)
{
    *sumi = *summ = 0;
    for (int k = 0; k < 8; k++) {
        uint8_t sc, m;
        const uint8_t *q = qs + (k / 2) * 32;
        const int8_t *xq = x->qs + k * 32;
        int shift = (k & 1) * 4, isum = 0;
        hy_quant_scale_min_k4(k, scales, &sc, &m);
        for (int l = 0; l < 32; l++) {
            int qv = ((q[l] >> shift) & 15) + (qh ? ((qh[l] >> k) & 1) * 16 : 0);
            isum += qv * xq[l];
        }
        *sumi += sc * isum;
        *summ += m * (x->bsums[2 * k] + x->bsums[2 * k + 1]);
    }
}

static void hy_quant_ref_dot_q4_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const hy_block_q4_k_t *w = vw;
    const hy_block_q8_k_t *x = vx;
    float sum = 0.0f;

    for (int64_t i = 0; i < n / 256; i++) {
        int sumi, summ;
        hy_quant_ref_sums_k45(w[i].scales, w[i].qs, NULL, &x[i], &sumi, &summ);
        sum += x[i].d * hy_f16_to_f32(w[i].d) * (float)sumi
             - x[i].d * hy_f16_to_f32(w[i].dmin) * (float)summ;
    }
    *s = sum;
}

static void hy_quant_ref_dot_q5_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const hy_block_q5_k_t *w = vw;
    const hy_block_q8_k_t *x = vx;
    float sum = 0.0f;

    for (int64_t i = 0; i < n / 256; i++) {
        int sumi, summ;
        hy_quant_ref_sums_k45(w[i].scales, w[i].qs, w[i].qh, &x[i], &sumi, &summ);
        sum += x[i].d * hy_f16_to_f32(w[i].d) * (float)sumi
             - x[i].d * hy_f16_to_f32(w[i].dmin) * (float)summ;
    }
    *s = sum;
}

static void hy_quant_ref_dot_q6_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const hy_block_q6_k_t *w = vw;
    const hy_block_q8_k_t *x = vx;
    float sum = 0.0f;

    for (int64_t i = 0; i < n / 256; i++) {
        const uint8_t *ql = w[i].ql, *qh = w[i].qh;
        const int8_t *xq = x[i].qs;
        int sumi = 0;
        for (int half = 0; half < 2; half++) {
            const int8_t *sc = w[i].scales + half * 8;
            int isum[8] = {0};
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                isum[is] += (((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32) * xq[l];
                isum[is + 2] += (((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32) * xq[l + 32];
                isum[is + 4] += (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * xq[l + 64];
                isum[is + 6] += (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * xq[l + 96];
            }
            for (int k = 0; k < 8; k++)
                sumi += sc[k] * isum[k];
            ql += 64;
            qh += 32;
            xq += 128;
        }
        sum += x[i].d * hy_f16_to_f32(w[i].d) * (float)sumi;
    }
    *s = sum;
}

void hy_quant_tile_generic(hy_quant_dot_fn_t dot, int64_t n, float *s,
                           size_t s_stride, const void *w, size_t w_stride,
                           int nw, const void *x, size_t x_stride, int nx)
{
    for (int r = 0; r < nw; r++)
        for (int c = 0; c < nx; c++)
            dot(n, s + (size_t)c * s_stride + r,
                (const char *)w + (size_t)r * w_stride,
                (const char *)x + (size_t)c * x_stride);
}

/* Float weights: the same sequential sums as the ref dots above, register
 * blocked 4 weight rows x 4 token rows.  Half-precision rows are converted
 * once per chunk into a float panel that every token row of the tile
 * reuses (the conversion is exact, so the bits equal the dot's); partial
 * sums carry across chunks in order. */
#define HY_REFF_KC 256
#define HY_REFF_CT 64

static void hy_quant_ref_tile_float(hy_dtype_t t, int64_t n, float *s, size_t ss,
                                    const void *vw, size_t ws, int nw, const void *vx,
                                    size_t xs, int nx)
{
    const char *w = vw, *x = vx;
    float buf[4 * HY_REFF_KC], acc[HY_REFF_CT][4];

    for (int r0 = 0; r0 < nw; r0 += 4) {
        int rw = HY_MIN(4, nw - r0);
        for (int c0 = 0; c0 < nx; c0 += HY_REFF_CT) {
            int ct = HY_MIN(HY_REFF_CT, nx - c0);
            memset(acc, 0, sizeof acc);
            for (int64_t k0 = 0; k0 < n; k0 += HY_REFF_KC) {
                int len = (int)HY_MIN((int64_t)HY_REFF_KC, n - k0);
                for (int r = 0; r < rw; r++) {
                    const char *row = w + (size_t)(r0 + r) * ws;
                    if (t == HY_DTYPE_F32)
                        memcpy(buf + r * HY_REFF_KC, (const float *)row + k0,
                               (size_t)len * sizeof(float));
                    else if (t == HY_DTYPE_F16)
                        hy_quant_ref_to_float_f16((const uint16_t *)row + k0,
                                                  buf + r * HY_REFF_KC, len);
                    else
                        hy_quant_ref_to_float_bf16((const uint16_t *)row + k0,
                                                   buf + r * HY_REFF_KC, len);
                }
                for (int c = 0; c < ct; c++) {
                    const float *xr = (const float *)(x + (size_t)(c0 + c) * xs) + k0;
                    float a0 = acc[c][0], a1 = acc[c][1], a2 = acc[c][2], a3 = acc[c][3];
                    if (rw == 4) {
                        for (int k = 0; k < len; k++) {
                            a0 += buf[k] * xr[k];
                            a1 += buf[HY_REFF_KC + k] * xr[k];
                            a2 += buf[2 * HY_REFF_KC + k] * xr[k];
                            a3 += buf[3 * HY_REFF_KC + k] * xr[k];
                        }
                        acc[c][0] = a0, acc[c][1] = a1, acc[c][2] = a2, acc[c][3] = a3;
                    } else {
                        for (int r = 0; r < rw; r++) {
                            float a = acc[c][r];
                            for (int k = 0; k < len; k++)
                                a += buf[r * HY_REFF_KC + k] * xr[k];
                            acc[c][r] = a;
                        }
                    }
                }
            }
            for (int c = 0; c < ct; c++)
                for (int r = 0; r < rw; r++)
                    s[(size_t)(c0 + c) * ss + (size_t)(r0 + r)] = acc[c][r];
        }
    }
}

#define HY_REFF_TILE(name, t)                                                  \
    static void hy_quant_ref_tile_##name(int64_t n, float *s, size_t ss,      \
                                         const void *w, size_t ws, int nw,    \
                                         const void *x, size_t xs, int nx)    \
    {                                                                          \
        hy_quant_ref_tile_float(t, n, s, ss, w, ws, nw, x, xs, nx);            \
    }
HY_REFF_TILE(f32, HY_DTYPE_F32)
HY_REFF_TILE(f16, HY_DTYPE_F16)
HY_REFF_TILE(bf16, HY_DTYPE_BF16)

#define HY_REF_TILE(name)                                                      \
    static void hy_quant_ref_tile_##name(int64_t n, float *s, size_t ss,      \
                                         const void *w, size_t ws, int nw,    \
                                         const void *x, size_t xs, int nx)    \
    {                                                                          \
        hy_quant_tile_generic(hy_quant_ref_dot_##name, n, s, ss, w, ws, nw,    \
                              x, xs, nx);                                      \
    }
HY_REF_TILE(q4_0)
HY_REF_TILE(q4_1)
HY_REF_TILE(q8_0)
HY_REF_TILE(q4_k)
HY_REF_TILE(q5_k)
HY_REF_TILE(q6_k)

const hy_quant_kernels_t hy_quant_scalar_kernels[HY_DTYPE_COUNT] = {
    [HY_DTYPE_F32] = {{HY_DTYPE_F32, hy_quant_ref_from_float_copy,
                       hy_quant_ref_dot_f32, hy_quant_ref_to_float_f32},
                      hy_quant_ref_tile_f32},
    [HY_DTYPE_F16] = {{HY_DTYPE_F32, hy_quant_ref_from_float_copy,
                       hy_quant_ref_dot_f16, hy_quant_ref_to_float_f16},
                      hy_quant_ref_tile_f16},
    [HY_DTYPE_BF16] = {{HY_DTYPE_F32, hy_quant_ref_from_float_copy,
                        hy_quant_ref_dot_bf16, hy_quant_ref_to_float_bf16},
                       hy_quant_ref_tile_bf16},
    /* the quantized types: Q16 activations and qmm.h's contract, which
     * the AVX2 level reproduces bit for bit */
    [HY_DTYPE_Q4_0] = HY_QMM_ENTRY_REF(q4_0, hy_quant_ref_to_float_q4_0),
    [HY_DTYPE_Q4_1] = HY_QMM_ENTRY_REF(q4_1, hy_quant_ref_to_float_q4_1),
    [HY_DTYPE_Q8_0] = HY_QMM_ENTRY_REF(q8_0, hy_quant_ref_to_float_q8_0),
    [HY_DTYPE_Q4_K] = HY_QMM_ENTRY_REF(q4_k, hy_quant_ref_to_float_q4_k),
    [HY_DTYPE_Q5_K] = HY_QMM_ENTRY_REF(q5_k, hy_quant_ref_to_float_q5_k),
    [HY_DTYPE_Q6_K] = HY_QMM_ENTRY_REF(q6_k, hy_quant_ref_to_float_q6_k),
    [HY_DTYPE_Q5_0] = HY_QMM_ENTRY_REF(q5_0, hy_quant_ref_to_float_q5_0),
    [HY_DTYPE_Q5_1] = HY_QMM_ENTRY_REF(q5_1, hy_quant_ref_to_float_q5_1),
    [HY_DTYPE_IQ4_NL] = HY_QMM_ENTRY_REF(iq4_nl, hy_quant_ref_to_float_iq4_nl),
    [HY_DTYPE_Q2_K] = HY_QMM_ENTRY_REF(q2_k, hy_quant_ref_to_float_q2_k),
    [HY_DTYPE_Q3_K] = HY_QMM_ENTRY_REF(q3_k, hy_quant_ref_to_float_q3_k),
    [HY_DTYPE_IQ4_XS] = HY_QMM_ENTRY_REF(iq4_xs, hy_quant_ref_to_float_iq4_xs),
};

/* The single-level partners (hy_quant_traits_q8): ggml's, and Q5_0's Q8_S */
const hy_quant_kernels_t hy_quant_scalar_kernels_q8[HY_DTYPE_COUNT] = {
    [HY_DTYPE_Q5_0] = {{HY_DTYPE_Q8_S, hy_quant_ref_from_float_q8_s,
                        hy_quant_ref_dot_q5_0_q8s, hy_quant_ref_to_float_q5_0},
                       hy_quant_ref_tile_q5_0_q8s},
    [HY_DTYPE_Q4_0] = {{HY_DTYPE_Q8_0, hy_quant_ref_from_float_q8_0,
                        hy_quant_ref_dot_q4_0, hy_quant_ref_to_float_q4_0},
                       hy_quant_ref_tile_q4_0},
    [HY_DTYPE_Q4_1] = {{HY_DTYPE_Q8_1, hy_quant_ref_from_float_q8_1,
                        hy_quant_ref_dot_q4_1, hy_quant_ref_to_float_q4_1},
                       hy_quant_ref_tile_q4_1},
    [HY_DTYPE_Q8_0] = {{HY_DTYPE_Q8_0, hy_quant_ref_from_float_q8_0,
                        hy_quant_ref_dot_q8_0, hy_quant_ref_to_float_q8_0},
                       hy_quant_ref_tile_q8_0},
    [HY_DTYPE_Q4_K] = {{HY_DTYPE_Q8_K, hy_quant_ref_from_float_q8_k,
                        hy_quant_ref_dot_q4_k, hy_quant_ref_to_float_q4_k},
                       hy_quant_ref_tile_q4_k},
    [HY_DTYPE_Q5_K] = {{HY_DTYPE_Q8_K, hy_quant_ref_from_float_q8_k,
                        hy_quant_ref_dot_q5_k, hy_quant_ref_to_float_q5_k},
                       hy_quant_ref_tile_q5_k},
    [HY_DTYPE_Q6_K] = {{HY_DTYPE_Q8_K, hy_quant_ref_from_float_q8_k,
                        hy_quant_ref_dot_q6_k, hy_quant_ref_to_float_q6_k},
                       hy_quant_ref_tile_q6_k},
};

int hy_quant_quantize_row(hy_dtype_t t, const float *x, void *y, int64_t n)
{
    void (*fn)(const float *, void *, int64_t) = NULL;
    const hy_dtype_info_t *info = hy_dtype_info((uint32_t)t);

    switch (t) {
    case HY_DTYPE_F32: fn = hy_quant_ref_from_float_copy; break;
    case HY_DTYPE_F16: fn = hy_quant_ref_from_float_f16; break;
    case HY_DTYPE_BF16: fn = hy_quant_ref_from_float_bf16; break;
    case HY_DTYPE_Q4_0: fn = hy_quant_ref_from_float_q4_0; break;
    case HY_DTYPE_Q4_1: fn = hy_quant_ref_from_float_q4_1; break;
    case HY_DTYPE_Q8_0: fn = hy_quant_ref_from_float_q8_0; break;
    case HY_DTYPE_Q8_1: fn = hy_quant_ref_from_float_q8_1; break;
    case HY_DTYPE_Q8_K: fn = hy_quant_ref_from_float_q8_k; break;
    case HY_DTYPE_Q8_2L: fn = hy_quant_ref_from_float_q8_2l; break;
    case HY_DTYPE_Q8_K2L: fn = hy_quant_ref_from_float_q8_k2l; break;
    case HY_DTYPE_Q16: fn = hy_qmm_ref_from_float_q16; break;
    case HY_DTYPE_Q8_S: fn = hy_quant_ref_from_float_q8_s; break;
    default: return HY_EUNSUPPORTED;
    }
    if (info == NULL || n < 0 || n % info->block != 0)
        return HY_EINVAL;
    fn(x, y, n);
    return HY_OK;
}

/* ---- runtime ISA choice ---- */

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* XCR0 says which register state the OS saves on context switch; a CPU with
 * AVX-512 under an OS that does not save zmm state must not use it. */
static uint64_t hy_quant_xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static hy_isa_t hy_quant_detect(void)
{
    unsigned a, b, c, d;
    uint64_t xcr0;
    int avx2, avx512;

    if (!__get_cpuid(1, &a, &b, &c, &d))
        return HY_ISA_SCALAR;
    /* OSXSAVE (27), AVX (28), FMA (12), F16C (29) */
    if (!(c & (1u << 27)) || !(c & (1u << 28)) || !(c & (1u << 12)) ||
        !(c & (1u << 29)))
        return HY_ISA_SCALAR;
    xcr0 = hy_quant_xgetbv0();
    if ((xcr0 & 0x6) != 0x6)           /* xmm + ymm state */
        return HY_ISA_SCALAR;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return HY_ISA_SCALAR;
    avx2 = (b >> 5) & 1;
    /* F (16), DQ (17), BW (30), VL (31); VNNI is ecx bit 11 */
    avx512 = ((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 30) & 1) &&
             ((b >> 31) & 1) && ((c >> 11) & 1) && (xcr0 & 0xE6) == 0xE6;
    if (!avx2)
        return HY_ISA_SCALAR;
    return avx512 ? HY_ISA_AVX512 : HY_ISA_AVX2;
}
#else
static hy_isa_t hy_quant_detect(void)
{
    return HY_ISA_SCALAR;
}
#endif

/* -1 until first use; detection is idempotent, so a race only repeats it. */
static int hy_quant_cpu_level = -1;
static int hy_quant_level = -1;

hy_isa_t hy_cpu_isa(void)
{
    int v = __atomic_load_n(&hy_quant_cpu_level, __ATOMIC_RELAXED);

    if (v < 0) {
        v = (int)hy_quant_detect();
        /* never a level whose kernels this build lacks (configure's
         * HY_BUILD_AVX2 / HY_BUILD_AVX512) */
        if (v == HY_ISA_AVX512 && !HY_BUILD_AVX512)
            v = HY_ISA_AVX2;
        if (v == HY_ISA_AVX2 && !HY_BUILD_AVX2)
            v = HY_ISA_SCALAR;
        __atomic_store_n(&hy_quant_cpu_level, v, __ATOMIC_RELAXED);
    }
    return (hy_isa_t)v;
}

#if defined(__x86_64__) || defined(__i386__)
static int hy_quant_detect_split(void)
{
    unsigned a, b, c, d, family;

    /* "AuthenticAMD" in ebx, edx, ecx */
    if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u || d != 0x69746e65u ||
        c != 0x444d4163u || !__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    family = (a >> 8) & 0xF;
    if (family == 0xF)
        family += (a >> 20) & 0xFF;
    /* family 0x19 is Zen 3 and Zen 4; only Zen 4 has AVX-512 */
    return family == 0x19 && hy_cpu_isa() == HY_ISA_AVX512;
}
#else
static int hy_quant_detect_split(void)
{
    return 0;
}
#endif

static int hy_quant_cpu_split = -1;

bool hy_cpu_avx512_split(void)
{
    int v = __atomic_load_n(&hy_quant_cpu_split, __ATOMIC_RELAXED);

    if (v < 0) {
        v = hy_quant_detect_split();
        __atomic_store_n(&hy_quant_cpu_split, v, __ATOMIC_RELAXED);
    }
    return v != 0;
}

const char *hy_isa_name(hy_isa_t isa)
{
    switch (isa) {
    case HY_ISA_SCALAR: return "scalar";
    case HY_ISA_AVX2: return "avx2";
    case HY_ISA_AVX512: return "avx512";
    }
    return "unknown";
}

int hy_quant_set_isa(hy_isa_t isa)
{
    if ((int)isa < 0 || isa > hy_cpu_isa())
        return HY_EUNSUPPORTED;
    __atomic_store_n(&hy_quant_level, (int)isa, __ATOMIC_RELAXED);
    return HY_OK;
}

hy_isa_t hy_quant_isa(void)
{
    int level = __atomic_load_n(&hy_quant_level, __ATOMIC_RELAXED);

    return level < 0 ? hy_cpu_isa() : (hy_isa_t)level;
}

static const hy_quant_kernels_t *hy_quant_kernels(hy_dtype_t t, int q8)
{
    const hy_isa_t level = hy_quant_isa();
    const hy_quant_kernels_t *tab = hy_quant_scalar_kernels;
    const hy_quant_kernels_t *tab_q8 = hy_quant_scalar_kernels_q8;

    (void)level; /* a build without SIMD levels has only the scalar tables */
    if ((unsigned)t >= HY_DTYPE_COUNT)
        return NULL;
#if HY_BUILD_AVX512
    if (level == HY_ISA_AVX512) {
        tab = hy_quant_avx512_kernels;
        tab_q8 = hy_quant_avx512_kernels_q8;
    }
#endif
#if HY_BUILD_AVX2
    if (level == HY_ISA_AVX2) {
        tab = hy_quant_avx2_kernels;
        tab_q8 = hy_quant_avx2_kernels_q8;
    }
#endif
    /* float types have no int8 partner: the q8 table leaves them empty */
    if (q8 && tab_q8[t].traits.vec_dot)
        return &tab_q8[t];
    return tab[t].traits.vec_dot ? &tab[t] : NULL;
}

const hy_quant_traits_t *hy_quant_traits(hy_dtype_t t)
{
    const hy_quant_kernels_t *k = hy_quant_kernels(t, 0);
    return k ? &k->traits : NULL;
}

hy_quant_tile_fn_t hy_quant_vec_dot_tile(hy_dtype_t t)
{
    const hy_quant_kernels_t *k = hy_quant_kernels(t, 0);
    return k ? k->tile : NULL;
}

hy_quant_tile_fn_t hy_quant_vec_dot_tile_rows16(hy_dtype_t t)
{
#if HY_BUILD_AVX512
    if (hy_quant_isa() == HY_ISA_AVX512)
        return t == HY_DTYPE_Q8_0     ? hy_qmm_avx512_tile_q8_0_rows16
               : t == HY_DTYPE_Q4_0   ? hy_qmm_avx512_tile_q4_0_rows16
               : t == HY_DTYPE_IQ4_NL ? hy_qmm_avx512_tile_iq4_nl_rows16
               : t == HY_DTYPE_Q5_0   ? hy_qmm_avx512_tile_q5_0_rows16
               : t == HY_DTYPE_Q5_1   ? hy_qmm_avx512_tile_q5_1_rows16
               : t == HY_DTYPE_Q4_1   ? hy_qmm_avx512_tile_q4_1_rows16
               : t == HY_DTYPE_Q4_K   ? hy_qmm_avx512_tile_q4_k_rows16
               : t == HY_DTYPE_Q5_K   ? hy_qmm_avx512_tile_q5_k_rows16
               : t == HY_DTYPE_Q6_K   ? hy_qmm_avx512_tile_q6_k_rows16
               : t == HY_DTYPE_Q2_K   ? hy_qmm_avx512_tile_q2_k_rows16
               : t == HY_DTYPE_Q3_K   ? hy_qmm_avx512_tile_q3_k_rows16
               : t == HY_DTYPE_IQ4_XS ? hy_qmm_avx512_tile_iq4_xs_rows16
                                      : NULL;
#endif
#if HY_BUILD_AVX2
    if (hy_quant_isa() == HY_ISA_AVX2)
        return t == HY_DTYPE_Q8_0     ? hy_qmm_avx2_tile_q8_0_rows16
               : t == HY_DTYPE_Q4_0   ? hy_qmm_avx2_tile_q4_0_rows16
               : t == HY_DTYPE_IQ4_NL ? hy_qmm_avx2_tile_iq4_nl_rows16
               : t == HY_DTYPE_Q5_0   ? hy_qmm_avx2_tile_q5_0_rows16
               : t == HY_DTYPE_Q5_1   ? hy_qmm_avx2_tile_q5_1_rows16
               : t == HY_DTYPE_Q4_1   ? hy_qmm_avx2_tile_q4_1_rows16
               : t == HY_DTYPE_Q4_K   ? hy_qmm_avx2_tile_q4_k_rows16
               : t == HY_DTYPE_Q5_K   ? hy_qmm_avx2_tile_q5_k_rows16
               : t == HY_DTYPE_Q6_K   ? hy_qmm_avx2_tile_q6_k_rows16
               : t == HY_DTYPE_Q2_K   ? hy_qmm_avx2_tile_q2_k_rows16
               : t == HY_DTYPE_Q3_K   ? hy_qmm_avx2_tile_q3_k_rows16
               : t == HY_DTYPE_IQ4_XS ? hy_qmm_avx2_tile_iq4_xs_rows16
                                      : NULL;
#endif
    (void)t;
    return NULL;
}

/* The types whose single-level kernel at a level is faster than its
 * default one (tests/unit/bench_mm with BENCH_MM_Q8=1): Q4_1, Q5_0 and the
 * K-quants Q4_K/Q5_K/Q6_K at AVX-512, where one dpbusd does the work of two
 * (Q8_2L's two planes, or Q16's vpdpwssd at half the products) in 16-row
 * kernels.  Elsewhere the single-level kernels are slower (the AVX2
 * level's, and the AVX-512 4 x 4 tiles of Q4_0/Q8_0: no decode prefetch)
 * and less accurate. */
static int hy_quant_a8_faster(hy_dtype_t t)
{
    return hy_quant_isa() == HY_ISA_AVX512 &&
           (t == HY_DTYPE_Q4_1 || t == HY_DTYPE_Q5_0 || t == HY_DTYPE_Q4_K ||
            t == HY_DTYPE_Q5_K || t == HY_DTYPE_Q6_K);
}

const hy_quant_traits_t *hy_quant_traits_a8(hy_dtype_t t)
{
    const hy_quant_kernels_t *k = hy_quant_kernels(t, hy_quant_a8_faster(t));
    return k ? &k->traits : NULL;
}

hy_quant_tile_fn_t hy_quant_vec_dot_tile_a8(hy_dtype_t t)
{
    const hy_quant_kernels_t *k = hy_quant_kernels(t, hy_quant_a8_faster(t));
    return k ? k->tile : NULL;
}

const hy_quant_traits_t *hy_quant_traits_q8(hy_dtype_t t)
{
    const hy_quant_kernels_t *k = hy_quant_kernels(t, 1);
    return k ? &k->traits : NULL;
}

hy_quant_tile_fn_t hy_quant_vec_dot_tile_q8(hy_dtype_t t)
{
    const hy_quant_kernels_t *k = hy_quant_kernels(t, 1);
    return k ? k->tile : NULL;
}
