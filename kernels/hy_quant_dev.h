/*
 * hy_quant_dev.h - device helpers shared by the weight kernels (hy_quant.cu)
 * and the MoE kernels (hy_moe.cu): the ggml type ids and the decoders of
 * one 32-element chunk of a block-quantized row or one element of a plain
 * row, with the formulas of src/backend/cpu/quant.c's reference
 * dequantizers.  Bytes are read one by one so no load depends on the
 * 18/20/34/144/176/210-byte block alignment.  CUDA only (nvcc).
 */
#ifndef HY_QUANT_DEV_H
#define HY_QUANT_DEV_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* ggml type ids (src/common/dtype.h) */
enum { T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q8_0 = 8, T_Q4_K = 12, T_Q5_K = 13,
       T_Q6_K = 14, T_BF16 = 30 };

__device__ __forceinline__ float hy_ld_f16(const uint8_t *p)
{
    return __half2float(__ushort_as_half((unsigned short)(p[0] | (p[1] << 8))));
}

/* Q4_K / Q5_K: 6-bit scale and min of sub-block j from the 12 packed bytes. */
__device__ __forceinline__ void hy_scale_min_k4(int j, const uint8_t *q, float *d, float *m)
{
    if (j < 4) {
        *d = (float)(q[j] & 63);
        *m = (float)(q[j + 4] & 63);
    } else {
        *d = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Chunk c (elements 32c .. 32c+31) of a row of block type T into v. */
template <int T>
__device__ __forceinline__ void hy_dq_chunk(const uint8_t *row, int64_t c, float *v)
{
    if (T == T_Q4_0) {
        const uint8_t *b = row + c * 18;
        const float d = hy_ld_f16(b);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            v[j] = (float)((int)(b[2 + j] & 0xF) - 8) * d;
            v[j + 16] = (float)((int)(b[2 + j] >> 4) - 8) * d;
        }
    } else if (T == T_Q4_1) {
        const uint8_t *b = row + c * 20;
        const float d = hy_ld_f16(b), m = hy_ld_f16(b + 2);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            v[j] = (float)(b[4 + j] & 0xF) * d + m;
            v[j + 16] = (float)(b[4 + j] >> 4) * d + m;
        }
    } else if (T == T_Q8_0) {
        const uint8_t *b = row + c * 34;
        const float d = hy_ld_f16(b);
#pragma unroll
        for (int j = 0; j < 32; j++)
            v[j] = (float)(int8_t)b[2 + j] * d;
    } else if (T == T_Q4_K) {
        /* block: d, dmin (f16), scales[12], qs[128]; sub-block sb uses the
         * low (even sb) or high (odd sb) nibbles of qs[32*(sb/2) ...] */
        const uint8_t *b = row + (c / 8) * 144;
        const int sb = (int)(c % 8);
        float sc, mn;
        hy_scale_min_k4(sb, b + 4, &sc, &mn);
        const float d = hy_ld_f16(b) * sc, m = hy_ld_f16(b + 2) * mn;
        const uint8_t *q = b + 16 + 32 * (sb / 2);
        const int sh = (sb & 1) * 4;
#pragma unroll
        for (int j = 0; j < 32; j++)
            v[j] = d * (float)((q[j] >> sh) & 0xF) - m;
    } else if (T == T_Q5_K) {
        /* block: d, dmin, scales[12], qh[32], qs[128]; bit sb of qh[j] is
         * the fifth bit of element j of sub-block sb */
        const uint8_t *b = row + (c / 8) * 176;
        const int sb = (int)(c % 8);
        float sc, mn;
        hy_scale_min_k4(sb, b + 4, &sc, &mn);
        const float d = hy_ld_f16(b) * sc, m = hy_ld_f16(b + 2) * mn;
        const uint8_t *qh = b + 16, *q = b + 48 + 32 * (sb / 2);
        const int sh = (sb & 1) * 4;
#pragma unroll
        for (int j = 0; j < 32; j++)
            v[j] = d * (float)(((q[j] >> sh) & 0xF) + (((qh[j] >> sb) & 1) << 4)) - m;
    } else if (T == T_Q6_K) {
        /* block: ql[128], qh[64], scales[16] (int8), d; each half of 128
         * elements holds four sub-blocks k: low/high nibbles of ql[0..32)
         * and ql[32..64), two bits each of qh[0..32) at shift 2k */
        const uint8_t *b = row + (c / 8) * 210;
        const int sb = (int)(c % 8), half = sb / 4, k = sb % 4;
        const uint8_t *ql = b + 64 * half + (k & 1) * 32, *qh = b + 128 + 32 * half;
        const int8_t *sc = (const int8_t *)(b + 192) + 8 * half + 2 * k;
        const float d = hy_ld_f16(b + 208);
        const int nsh = (k >> 1) * 4, hsh = 2 * k;
#pragma unroll
        for (int j = 0; j < 32; j++) {
            int q = (int)(((ql[j] >> nsh) & 0xF) | (((qh[j] >> hsh) & 3) << 4)) - 32;
            v[j] = d * (float)sc[j / 16] * (float)q;
        }
    }
}

template <int T>
__device__ __forceinline__ float hy_ld_plain(const uint8_t *row, int64_t i)
{
    if (T == T_F32)
        return ((const float *)row)[i];
    if (T == T_F16)
        return __half2float(((const __half *)row)[i]);
    return __bfloat162float(((const __nv_bfloat16 *)row)[i]);
}

template <int T> struct hy_is_plain { static const bool v = T == T_F32 || T == T_F16 || T == T_BF16; };

/* Every weight type the device kernels read: MACRO(T) per type, anything
 * else returns cudaErrorInvalidValue from the enclosing launcher. */
#define HY_DISPATCH(type, MACRO)                                                                  \
    switch (type) {                                                                               \
    case T_F32: MACRO(T_F32); break;                                                              \
    case T_F16: MACRO(T_F16); break;                                                              \
    case T_BF16: MACRO(T_BF16); break;                                                            \
    case T_Q4_0: MACRO(T_Q4_0); break;                                                            \
    case T_Q4_1: MACRO(T_Q4_1); break;                                                            \
    case T_Q8_0: MACRO(T_Q8_0); break;                                                            \
    case T_Q4_K: MACRO(T_Q4_K); break;                                                            \
    case T_Q5_K: MACRO(T_Q5_K); break;                                                            \
    case T_Q6_K: MACRO(T_Q6_K); break;                                                            \
    default: return (int)cudaErrorInvalidValue;                                                   \
    }

#endif
