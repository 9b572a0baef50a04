/*
 * hy_quant_dev.h - device helpers shared by the weight kernels (hy_quant.cu)
 * and the MoE kernels (hy_moe.cu): the ggml type ids, the decoder of one
 * 32-element chunk of a block-quantized row (hy_dq_chunk.h, which the host
 * tests run too) or of one element of a plain row, and the dispatch over
 * every weight type the device kernels read.  CUDA only (nvcc).
 */
#ifndef HY_QUANT_DEV_H
#define HY_QUANT_DEV_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

__device__ __forceinline__ float hy_ld_f16(const uint8_t *p)
{
    return __half2float(__ushort_as_half((unsigned short)(p[0] | (p[1] << 8))));
}

#define HY_DQ_F16(p) hy_ld_f16(p)
#include "hy_dq_chunk.h"

/* ggml type ids (src/common/dtype.h) */
enum { T_F32 = HY_DQ_F32, T_F16 = HY_DQ_F16_T, T_Q4_0 = HY_DQ_Q4_0, T_Q4_1 = HY_DQ_Q4_1,
       T_Q5_0 = HY_DQ_Q5_0, T_Q5_1 = HY_DQ_Q5_1, T_Q8_0 = HY_DQ_Q8_0, T_Q2_K = HY_DQ_Q2_K,
       T_Q3_K = HY_DQ_Q3_K, T_Q4_K = HY_DQ_Q4_K, T_Q5_K = HY_DQ_Q5_K, T_Q6_K = HY_DQ_Q6_K,
       T_IQ4_NL = HY_DQ_IQ4_NL, T_IQ4_XS = HY_DQ_IQ4_XS, T_BF16 = HY_DQ_BF16 };

/* Chunk c (elements 32c .. 32c+31) of a row of block type T into v
 * (hy_dq_chunk.h; T is a constant, so the chain folds to one call). */
template <int T>
__device__ __forceinline__ void hy_dq_chunk(const uint8_t *row, int64_t c, float *v)
{
    if (T == T_Q4_0) hy_dq_q4_0(row, c, v);
    else if (T == T_Q4_1) hy_dq_q4_1(row, c, v);
    else if (T == T_Q5_0) hy_dq_q5_0(row, c, v);
    else if (T == T_Q5_1) hy_dq_q5_1(row, c, v);
    else if (T == T_Q8_0) hy_dq_q8_0(row, c, v);
    else if (T == T_IQ4_NL) hy_dq_iq4_nl(row, c, v);
    else if (T == T_Q2_K) hy_dq_q2_k(row, c, v);
    else if (T == T_Q3_K) hy_dq_q3_k(row, c, v);
    else if (T == T_Q4_K) hy_dq_q4_k(row, c, v);
    else if (T == T_Q5_K) hy_dq_q5_k(row, c, v);
    else if (T == T_Q6_K) hy_dq_q6_k(row, c, v);
    else if (T == T_IQ4_XS) hy_dq_iq4_xs(row, c, v);
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
    case T_Q5_0: MACRO(T_Q5_0); break;                                                            \
    case T_Q5_1: MACRO(T_Q5_1); break;                                                            \
    case T_IQ4_NL: MACRO(T_IQ4_NL); break;                                                        \
    case T_Q2_K: MACRO(T_Q2_K); break;                                                            \
    case T_Q3_K: MACRO(T_Q3_K); break;                                                            \
    case T_IQ4_XS: MACRO(T_IQ4_XS); break;                                                        \
    case T_Q4_K: MACRO(T_Q4_K); break;                                                            \
    case T_Q5_K: MACRO(T_Q5_K); break;                                                            \
    case T_Q6_K: MACRO(T_Q6_K); break;                                                            \
    default: return (int)cudaErrorInvalidValue;                                                   \
    }

#endif
