/*
 * hy_dq_chunk.h - the CUDA weight kernels' decoders of the ggml block
 * layouts, one 32-element chunk (a Q*_0/Q*_1/IQ4_NL block, or one 32-element
 * sub-block of a 256-element K block) at a time, with the formulas and the
 * float operation order of src/backend/cpu/quant.c's reference
 * dequantizers.  Written once as plain C that nvcc compiles as device code
 * (hy_quant_dev.h) and a host compiler as ordinary code, which is how
 * tests/cuda/test_dq_chunk.c checks every type's layout, indices and
 * arithmetic against the CPU bit for bit on a machine without a GPU.
 * Bytes are read one by one, so no load depends on the block alignment
 * (18/20/22/24/34/84/110/136/144/176/210 bytes).  The includer defines
 * HY_DQ_F16(p): the f16 at p (two little-endian bytes) as a float.
 */
#ifndef HY_DQ_CHUNK_H
#define HY_DQ_CHUNK_H

#include <stdint.h>

#ifdef __CUDACC__
#define HY_DQ_FN __device__ __forceinline__
#define HY_DQ_CONST __constant__
#define HY_DQ_UNROLL _Pragma("unroll")
#else
#define HY_DQ_FN static inline
#define HY_DQ_CONST
#define HY_DQ_UNROLL
#endif

#ifndef HY_DQ_F16
#error "define HY_DQ_F16(p) before including hy_dq_chunk.h"
#endif

/* ggml type ids (src/common/dtype.h) */
enum { HY_DQ_F32 = 0, HY_DQ_F16_T = 1, HY_DQ_Q4_0 = 2, HY_DQ_Q4_1 = 3, HY_DQ_Q5_0 = 6,
       HY_DQ_Q5_1 = 7, HY_DQ_Q8_0 = 8, HY_DQ_Q2_K = 10, HY_DQ_Q3_K = 11, HY_DQ_Q4_K = 12,
       HY_DQ_Q5_K = 13, HY_DQ_Q6_K = 14, HY_DQ_IQ4_NL = 20, HY_DQ_IQ4_XS = 23,
       HY_DQ_BF16 = 30 };

/* IQ4_NL / IQ4_XS: the value of each 4-bit index (ggml's kvalues_iq4nl). */
static HY_DQ_CONST const int8_t hy_dq_iq4nl_values[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Q4_K / Q5_K: 6-bit scale and min of sub-block j from the 12 packed bytes. */
HY_DQ_FN void hy_dq_scale_min_k4(int j, const uint8_t *q, float *d, float *m)
{
    if (j < 4) {
        *d = (float)(q[j] & 63);
        *m = (float)(q[j + 4] & 63);
    } else {
        *d = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

HY_DQ_FN void hy_dq_q4_0(const uint8_t *row, int64_t c, float *v)
{
    const uint8_t *b = row + c * 18;
    const float d = HY_DQ_F16(b);
    HY_DQ_UNROLL
    for (int j = 0; j < 16; j++) {
        v[j] = (float)((int)(b[2 + j] & 0xF) - 8) * d;
        v[j + 16] = (float)((int)(b[2 + j] >> 4) - 8) * d;
    }
}

HY_DQ_FN void hy_dq_q4_1(const uint8_t *row, int64_t c, float *v)
{
    const uint8_t *b = row + c * 20;
    const float d = HY_DQ_F16(b), m = HY_DQ_F16(b + 2);
    HY_DQ_UNROLL
    for (int j = 0; j < 16; j++) {
        v[j] = (float)(b[4 + j] & 0xF) * d + m;
        v[j + 16] = (float)(b[4 + j] >> 4) * d + m;
    }
}

/* Q5_0 / Q5_1: d[, m], qh (bit j of the little-endian u32 is element j's
 * 5th bit), qs packed as Q4_0's. */
HY_DQ_FN void hy_dq_q5_0(const uint8_t *row, int64_t c, float *v)
{
    const uint8_t *b = row + c * 22;
    const float d = HY_DQ_F16(b);
    const uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 |
                        (uint32_t)b[5] << 24;
    HY_DQ_UNROLL
    for (int j = 0; j < 16; j++) {
        int q0 = (int)((b[6 + j] & 0xF) | ((qh >> j) & 1) << 4);
        int q1 = (int)((b[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
        v[j] = (float)(q0 - 16) * d;
        v[j + 16] = (float)(q1 - 16) * d;
    }
}

HY_DQ_FN void hy_dq_q5_1(const uint8_t *row, int64_t c, float *v)
{
    const uint8_t *b = row + c * 24;
    const float d = HY_DQ_F16(b), m = HY_DQ_F16(b + 2);
    const uint32_t qh = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 |
                        (uint32_t)b[7] << 24;
    HY_DQ_UNROLL
    for (int j = 0; j < 16; j++) {
        v[j] = (float)((b[8 + j] & 0xF) | ((qh >> j) & 1) << 4) * d + m;
        v[j + 16] = (float)((b[8 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4) * d + m;
    }
}

HY_DQ_FN void hy_dq_q8_0(const uint8_t *row, int64_t c, float *v)
{
    const uint8_t *b = row + c * 34;
    const float d = HY_DQ_F16(b);
    HY_DQ_UNROLL
    for (int j = 0; j < 32; j++)
        v[j] = (float)(int8_t)b[2 + j] * d;
}

HY_DQ_FN void hy_dq_iq4_nl(const uint8_t *row, int64_t c, float *v)
{
    const uint8_t *b = row + c * 18;
    const float d = HY_DQ_F16(b);
    HY_DQ_UNROLL
    for (int j = 0; j < 16; j++) {
        v[j] = d * (float)hy_dq_iq4nl_values[b[2 + j] & 0xF];
        v[j + 16] = d * (float)hy_dq_iq4nl_values[b[2 + j] >> 4];
    }
}

/* Q2_K: scales[16] (scale low nibble, min high), qs[64], d, dmin; sub-block
 * sb = 4h + j holds 2-bit field j of qs[32h ..], groups 2sb and 2sb+1. */
HY_DQ_FN void hy_dq_q2_k(const uint8_t *row, int64_t c, float *v)
{
    const uint8_t *b = row + (c / 8) * 84;
    const int sb = (int)(c % 8), sh = 2 * (sb % 4);
    const uint8_t *q = b + 16 + 32 * (sb / 4);
    const float d = HY_DQ_F16(b + 80), dmin = HY_DQ_F16(b + 82);
    for (int k = 0; k < 2; k++) {
        const uint8_t sc = b[2 * sb + k];
        const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
        HY_DQ_UNROLL
        for (int l = 16 * k; l < 16 * k + 16; l++)
            v[l] = dl * (float)((q[l] >> sh) & 3) - ml;
    }
}

/* Q3_K: hmask[32] (bit sb of hmask[l]: high bit of element l of sub-block
 * sb; clear means -4), qs[64] as Q2_K's, 16 6-bit scales stored +32 in
 * scales[12], d. */
HY_DQ_FN void hy_dq_q3_k(const uint8_t *row, int64_t c, float *v)
{
    const uint8_t *b = row + (c / 8) * 110;
    const int sb = (int)(c % 8), sh = 2 * (sb % 4);
    const uint8_t *hm = b, *q = b + 32 + 32 * (sb / 4), *sc = b + 96;
    const float d = HY_DQ_F16(b + 108);
    for (int k = 0; k < 2; k++) {
        const int g = 2 * sb + k;
        const int s = (((sc[g % 8] >> (4 * (g / 8))) & 0xF) | (((sc[8 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32;
        const float dl = d * (float)s;
        HY_DQ_UNROLL
        for (int l = 16 * k; l < 16 * k + 16; l++)
            v[l] = dl * (float)((int)((q[l] >> sh) & 3) - (((hm[l] >> sb) & 1) ? 0 : 4));
    }
}

HY_DQ_FN void hy_dq_q4_k(const uint8_t *row, int64_t c, float *v)
{
    /* block: d, dmin (f16), scales[12], qs[128]; sub-block sb uses the
     * low (even sb) or high (odd sb) nibbles of qs[32*(sb/2) ...] */
    const uint8_t *b = row + (c / 8) * 144;
    const int sb = (int)(c % 8);
    float sc, mn;
    hy_dq_scale_min_k4(sb, b + 4, &sc, &mn);
    const float d = HY_DQ_F16(b) * sc, m = HY_DQ_F16(b + 2) * mn;
    const uint8_t *q = b + 16 + 32 * (sb / 2);
    const int sh = (sb & 1) * 4;
    HY_DQ_UNROLL
    for (int j = 0; j < 32; j++)
        v[j] = d * (float)((q[j] >> sh) & 0xF) - m;
}

HY_DQ_FN void hy_dq_q5_k(const uint8_t *row, int64_t c, float *v)
{
    /* block: d, dmin, scales[12], qh[32], qs[128]; bit sb of qh[j] is
     * the fifth bit of element j of sub-block sb */
    const uint8_t *b = row + (c / 8) * 176;
    const int sb = (int)(c % 8);
    float sc, mn;
    hy_dq_scale_min_k4(sb, b + 4, &sc, &mn);
    const float d = HY_DQ_F16(b) * sc, m = HY_DQ_F16(b + 2) * mn;
    const uint8_t *qh = b + 16, *q = b + 48 + 32 * (sb / 2);
    const int sh = (sb & 1) * 4;
    HY_DQ_UNROLL
    for (int j = 0; j < 32; j++)
        v[j] = d * (float)(((q[j] >> sh) & 0xF) + (((qh[j] >> sb) & 1) << 4)) - m;
}

HY_DQ_FN void hy_dq_q6_k(const uint8_t *row, int64_t c, float *v)
{
    /* block: ql[128], qh[64], scales[16] (int8), d; each half of 128
     * elements holds four sub-blocks k: low/high nibbles of ql[0..32)
     * and ql[32..64), two bits each of qh[0..32) at shift 2k */
    const uint8_t *b = row + (c / 8) * 210;
    const int sb = (int)(c % 8), half = sb / 4, k = sb % 4;
    const uint8_t *ql = b + 64 * half + (k & 1) * 32, *qh = b + 128 + 32 * half;
    const int8_t *sc = (const int8_t *)(b + 192) + 8 * half + 2 * k;
    const float d = HY_DQ_F16(b + 208);
    const int nsh = (k >> 1) * 4, hsh = 2 * k;
    HY_DQ_UNROLL
    for (int j = 0; j < 32; j++) {
        int q = (int)(((ql[j] >> nsh) & 0xF) | (((qh[j] >> hsh) & 3) << 4)) - 32;
        v[j] = d * (float)sc[j / 16] * (float)q;
    }
}

/* IQ4_XS: d, scales_h (2 high bits of sub-block sb at bit 2sb), scales_l[4]
 * (4 low bits: nibble sb%2 of byte sb/2), qs[128] (sub-block sb at 16sb,
 * packed as IQ4_NL's); scales stored +32. */
HY_DQ_FN void hy_dq_iq4_xs(const uint8_t *row, int64_t c, float *v)
{
    const uint8_t *b = row + (c / 8) * 136;
    const int sb = (int)(c % 8);
    const int sh = ((b[2] | b[3] << 8) >> (2 * sb)) & 3, sl = (b[4 + sb / 2] >> (4 * (sb % 2))) & 0xF;
    const float dl = HY_DQ_F16(b) * (float)((sl | sh << 4) - 32);
    const uint8_t *q = b + 8 + 16 * sb;
    HY_DQ_UNROLL
    for (int j = 0; j < 16; j++) {
        v[j] = dl * (float)hy_dq_iq4nl_values[q[j] & 0xF];
        v[j + 16] = dl * (float)hy_dq_iq4nl_values[q[j] >> 4];
    }
}

/* Chunk c of a row of block type `type` into v; 0 if the type is not a
 * block type these decoders know. */
HY_DQ_FN int hy_dq_chunk_any(int type, const uint8_t *row, int64_t c, float *v)
{
    switch (type) {
    case HY_DQ_Q4_0: hy_dq_q4_0(row, c, v); return 1;
    case HY_DQ_Q4_1: hy_dq_q4_1(row, c, v); return 1;
    case HY_DQ_Q5_0: hy_dq_q5_0(row, c, v); return 1;
    case HY_DQ_Q5_1: hy_dq_q5_1(row, c, v); return 1;
    case HY_DQ_Q8_0: hy_dq_q8_0(row, c, v); return 1;
    case HY_DQ_IQ4_NL: hy_dq_iq4_nl(row, c, v); return 1;
    case HY_DQ_Q2_K: hy_dq_q2_k(row, c, v); return 1;
    case HY_DQ_Q3_K: hy_dq_q3_k(row, c, v); return 1;
    case HY_DQ_Q4_K: hy_dq_q4_k(row, c, v); return 1;
    case HY_DQ_Q5_K: hy_dq_q5_k(row, c, v); return 1;
    case HY_DQ_Q6_K: hy_dq_q6_k(row, c, v); return 1;
    case HY_DQ_IQ4_XS: hy_dq_iq4_xs(row, c, v); return 1;
    default: return 0;
    }
}

#endif
