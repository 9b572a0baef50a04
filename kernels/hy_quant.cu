/*
 * hy_quant.cu - weight kernels of the CUDA backend: decode of the ggml block
 * layouts (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, and plain F32/F16/BF16; the
 * same formulas as src/backend/cpu/quant.c's reference dequantizers), the
 * decode-time mat-vec products that read quantized rows straight from device
 * memory (one warp per output row, up to 8 tokens per pass so the weights
 * stream once), and the row dequantizers behind get_rows and the cuBLAS
 * tiles of large batches.  Block types are decoded 32 elements ("a chunk",
 * one sub-block of a K-quant) at a time; bytes are read one by one so no
 * load depends on the 18/20/34/144/176/210-byte block alignment.
 */
#include "hy_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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

__global__ void hy_f32_to_f16_kernel(const float *__restrict__ x, __half *__restrict__ o, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        o[i] = __float2half(x[i]);
}

/* ---- launchers -------------------------------------------------------------- */

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

extern "C" int hy_cuk_type_ok(int type)
{
    switch (type) {
    case T_F32: case T_F16: case T_BF16: case T_Q4_0: case T_Q4_1: case T_Q8_0: case T_Q4_K:
    case T_Q5_K: case T_Q6_K:
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

extern "C" int hy_cuk_f32_to_f16(const float *x, void *out, size_t n, hy_cuk_stream_t stream)
{
    size_t blocks = (n + 255) / 256;

    if (n == 0)
        return 0;
    hy_f32_to_f16_kernel<<<(unsigned)(blocks < 65535 ? blocks : 65535), 256, 0, stream>>>(
        x, (__half *)out, n);
    return (int)cudaGetLastError();
}
