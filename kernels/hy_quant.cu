/*
 * hy_quant.cu - weight kernels of the CUDA backend: decode of the ggml block
 * layouts (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K,
 * Q6_K, IQ4_XS, and plain F32/F16/BF16; the
 * same formulas as src/backend/cpu/quant.c's reference dequantizers), the
 * decode-time mat-vec products that read quantized rows straight from device
 * memory (one warp per output row, up to 8 tokens per pass so the weights
 * stream once), and the row dequantizers behind get_rows and the cuBLAS
 * tiles of large batches.  Block types are decoded 32 elements ("a chunk",
 * one sub-block of a K-quant) at a time by the decoders of hy_quant_dev.h
 * (shared with the MoE kernels); bytes are read one by one so no load
 * depends on the block alignment.
 */
#include "hy_kernels.h"
#include "hy_quant_dev.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

/* ---- mat-vec ---------------------------------------------------------------- */

#define HY_MV_WARPS 4

template <int T>
__global__ void hy_matvec_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int64_t ne0,
                                 int64_t n_rows, const float *__restrict__ x,
                                 float *__restrict__ y, int n_tok)
{
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * HY_MV_WARPS + (threadIdx.x >> 5);
    float acc[HY_CUK_MATVEC_MAX_TOK];

    if (r >= n_rows)
        return;
#pragma unroll
    for (int t = 0; t < HY_CUK_MATVEC_MAX_TOK; t++)
        acc[t] = 0.0f;
    const uint8_t *row = w + (size_t)r * row_bytes;
    if (hy_is_plain<T>::v) {
        for (int64_t i = lane; i < ne0; i += 32) {
            const float wv = hy_ld_plain<T>(row, i);
#pragma unroll
            for (int t = 0; t < HY_CUK_MATVEC_MAX_TOK; t++)
                if (t < n_tok)
                    acc[t] += wv * x[(size_t)t * ne0 + i];
        }
    } else {
        float v[32];
        for (int64_t c = lane; c < ne0 / 32; c += 32) {
            hy_dq_chunk<T>(row, c, v);
#pragma unroll
            for (int t = 0; t < HY_CUK_MATVEC_MAX_TOK; t++) {
                if (t < n_tok) {
                    /* scalar loads: x may be any float offset of a buffer */
                    const float *xv = x + (size_t)t * ne0 + c * 32;
                    float s = 0.0f;
#pragma unroll
                    for (int j = 0; j < 32; j++)
                        s += v[j] * xv[j];
                    acc[t] += s;
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < HY_CUK_MATVEC_MAX_TOK; t++) {
        float s = acc[t];
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0 && t < n_tok)
            y[(size_t)t * n_rows + r] = s;
    }
}

/* ---- row dequantizers ----------------------------------------------------- */

template <int T, typename O>
__device__ __forceinline__ O hy_cvt(float f);
template <> __device__ __forceinline__ float hy_cvt<0, float>(float f) { return f; }
template <> __device__ __forceinline__ __half hy_cvt<0, __half>(float f) { return __float2half(f); }

/* grid.x = rows (y-stride loop for more than 65535*... rows is not needed:
 * grid.x holds 2^31-1); threads walk the chunks / elements of the row. */
template <int T, typename O>
__global__ void hy_dequant_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int64_t ne0,
                                  const int32_t *__restrict__ ids, O *__restrict__ out)
{
    const int64_t i = blockIdx.x;
    const int64_t src = ids ? (int64_t)ids[i] : i;
    const uint8_t *row = w + (size_t)src * row_bytes;
    O *o = out + (size_t)i * ne0;

    if (hy_is_plain<T>::v) {
        for (int64_t e = threadIdx.x; e < ne0; e += blockDim.x)
            o[e] = hy_cvt<0, O>(hy_ld_plain<T>(row, e));
    } else {
        float v[32];
        for (int64_t c = threadIdx.x; c < ne0 / 32; c += blockDim.x) {
            hy_dq_chunk<T>(row, c, v);
#pragma unroll
            for (int j = 0; j < 32; j++)
                o[c * 32 + j] = hy_cvt<0, O>(v[j]);
        }
    }
}

/* One block per row: the row's largest |x| picks a power of two s with
 * max|x| / s in [2^14, 2^15), so the half copy never overflows (65504) and
 * keeps 2^28 of range below the row's largest element; dividing by a power
 * of two changes no mantissa, and the caller multiplies the product's row
 * by s again.  A row that is all zeros gets s = 1; one holding inf or NaN
 * too, so that it comes out of the product as it went in. */
__global__ void hy_f32_to_f16_rows_kernel(const float *__restrict__ x, __half *__restrict__ o,
                                          float *__restrict__ scale, int64_t ne0)
{
    __shared__ float red[32];
    const float *xr = x + (size_t)blockIdx.x * ne0;
    __half *orow = o + (size_t)blockIdx.x * ne0;
    float amax = 0.0f;
    int e;

    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x)
        amax = fmaxf(amax, fabsf(xr[i])); /* fmaxf drops a NaN: checked below */
    for (int off = 16; off > 0; off >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = amax;
    __syncthreads();
    amax = red[0];
    for (unsigned w = 1; w < blockDim.x / 32; w++)
        amax = fmaxf(amax, red[w]);
    frexpf(amax, &e); /* amax in [2^(e-1), 2^e) */
    /* s stays a normal float (a row of subnormals would make 1 / s inf) */
    const float s = amax > 0.0f && isfinite(amax) ? ldexpf(1.0f, e - 15 < -126 ? -126 : e - 15)
                                                  : 1.0f;
    const float inv = 1.0f / s; /* exact: a power of two */
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x)
        orow[i] = __float2half(xr[i] * inv);
    if (threadIdx.x == 0)
        scale[blockIdx.x] = s;
}

/* ---- launchers -------------------------------------------------------------- */

extern "C" int hy_cuk_type_ok(int type)
{
    switch (type) {
    case T_F32: case T_F16: case T_BF16: case T_Q4_0: case T_Q4_1: case T_Q8_0: case T_Q4_K:
    case T_Q5_K: case T_Q6_K: case T_Q5_0: case T_Q5_1: case T_IQ4_NL: case T_Q2_K: case T_Q3_K:
    case T_IQ4_XS:
        return 1;
    default:
        return 0;
    }
}

extern "C" int hy_cuk_matvec(int type, const void *w, size_t row_bytes, int64_t ne0,
                             int64_t n_rows, const float *x, float *y, int32_t n_tok,
                             hy_cuk_stream_t stream)
{
    const unsigned grid = (unsigned)((n_rows + HY_MV_WARPS - 1) / HY_MV_WARPS);

    if (n_tok < 1 || n_tok > HY_CUK_MATVEC_MAX_TOK || n_rows < 1)
        return (int)cudaErrorInvalidValue;
#define HY_MV(T)                                                                                  \
    hy_matvec_kernel<T><<<grid, 32 * HY_MV_WARPS, 0, stream>>>((const uint8_t *)w, row_bytes,    \
                                                                ne0, n_rows, x, y, n_tok)
    HY_DISPATCH(type, HY_MV)
#undef HY_MV
    return (int)cudaGetLastError();
}

extern "C" int hy_cuk_dequant_f32(int type, const void *w, size_t row_bytes, int64_t ne0,
                                  const int32_t *ids, int64_t n, float *out,
                                  hy_cuk_stream_t stream)
{
    if (n < 1 || n > INT32_MAX)
        return n == 0 ? 0 : (int)cudaErrorInvalidValue;
#define HY_DQ(T)                                                                                  \
    hy_dequant_kernel<T, float><<<(unsigned)n, 128, 0, stream>>>((const uint8_t *)w, row_bytes,  \
                                                                  ne0, ids, out)
    HY_DISPATCH(type, HY_DQ)
#undef HY_DQ
    return (int)cudaGetLastError();
}

extern "C" int hy_cuk_dequant_f16(int type, const void *w, size_t row_bytes, int64_t ne0,
                                  int64_t n, void *out, hy_cuk_stream_t stream)
{
    if (n < 1 || n > INT32_MAX)
        return n == 0 ? 0 : (int)cudaErrorInvalidValue;
#define HY_DQ(T)                                                                                  \
    hy_dequant_kernel<T, __half><<<(unsigned)n, 128, 0, stream>>>((const uint8_t *)w, row_bytes, \
                                                                   ne0, NULL, (__half *)out)
    HY_DISPATCH(type, HY_DQ)
#undef HY_DQ
    return (int)cudaGetLastError();
}

extern "C" int hy_cuk_f32_to_f16_rows(const float *x, void *out, float *scale, int32_t n_rows,
                                      int64_t ne0, hy_cuk_stream_t stream)
{
    if (n_rows <= 0 || ne0 <= 0)
        return n_rows == 0 ? 0 : (int)cudaErrorInvalidValue;
    hy_f32_to_f16_rows_kernel<<<(unsigned)n_rows, 256, 0, stream>>>(x, (__half *)out, scale, ne0);
    return (int)cudaGetLastError();
}
