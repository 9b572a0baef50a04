/*
 * hy_attn.cu - paged-KV attention on the GPU.  The page layout is the CPU
 * backend's (src/backend/cpu/attention.c): page p of a layer holds, for kv
 * head g and slot s, the K row at k_pool + p*k_page_bytes +
 * (g*page_tokens + s)*k_row_bytes, in F32, F16 or Q8_0 (quantized exactly
 * as the CPU does: d = amax/127, ties-to-even rounding).
 *
 * attention: one block per (query head, token, KV split).  Each block walks
 * its part of positions lo..pos (sliding window aware) in tiles of 128
 * keys: every thread scores one key, the tile's max and sum update an online
 * softmax, then threads (one per output dimension) accumulate the tile's V
 * rows.  Long decode contexts are split over the KV length (n_split parts)
 * so that a batch of few tokens still fills the GPU; a second kernel merges
 * the parts' (max, sum, acc).  Query heads sharing a kv head (GQA) read the
 * same pages, which the L2 cache serves.
 */
#include "hy_kernels.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#define HY_AT_THREADS 128
#define HY_AT_PER_THREAD (HY_CUK_ATTN_MAX_HEAD / HY_AT_THREADS)

enum { KV_F32 = 0, KV_F16 = 1, KV_Q8_0 = 8 };

__device__ __forceinline__ float hy_kv_ld(const uint8_t *row, int type, int d)
{
    if (type == KV_F32)
        return ((const float *)row)[d];
    if (type == KV_F16)
        return __half2float(((const __half *)row)[d]);
    const uint8_t *b = row + (d / 32) * 34;
    const float sc = __half2float(__ushort_as_half((unsigned short)(b[0] | (b[1] << 8))));
    return (float)(int8_t)b[2 + d % 32] * sc;
}

/* One warp per (token, kv head, K or V): lanes walk the row; Q8_0 blocks
 * are one warp-wide max each. */
__global__ void hy_kv_write_kernel(hy_cuk_attn_t a, const float *k, const float *v)
{
    const int t = blockIdx.x, g = blockIdx.y, which = threadIdx.y; /* 0 = K, 1 = V */
    const int lane = threadIdx.x;
    const int hd = which ? a.head_dim_v : a.head_dim;
    const float *src = (which ? v : k) + ((size_t)t * a.n_head_kv + g) * hd;
    const int pos = a.pos[t];
    const int page = a.pages[a.page_off[a.tok_seq[t]] + pos / a.page_tokens];
    const int slot = pos % a.page_tokens;
    const size_t rb = which ? a.v_row_bytes : a.k_row_bytes;
    uint8_t *dst = (which ? a.v_pool : a.k_pool) + (size_t)page * (which ? a.v_page_bytes : a.k_page_bytes) +
                   ((size_t)g * a.page_tokens + slot) * rb;

    if (a.kv_type == KV_F32) {
        for (int d = lane; d < hd; d += 32)
            ((float *)dst)[d] = src[d];
    } else if (a.kv_type == KV_F16) {
        for (int d = lane; d < hd; d += 32)
            ((__half *)dst)[d] = __float2half_rn(src[d]);
    } else {
        for (int b0 = 0; b0 < hd; b0 += 32) {   /* hd is a multiple of 32 */
            const float xv = src[b0 + lane];
            float amax = fabsf(xv);
            for (int o = 16; o > 0; o >>= 1)
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            uint8_t *blk = dst + (b0 / 32) * 34;
            if (lane == 0) {
                const unsigned short hb = __half_as_ushort(__float2half_rn(d));
                blk[0] = (uint8_t)(hb & 0xFF);
                blk[1] = (uint8_t)(hb >> 8);
            }
            blk[2 + lane] = (uint8_t)(int8_t)rintf(xv * id);
        }
    }
}

extern "C" int hy_cuk_kv_write(const hy_cuk_attn_t *a, const float *k, const float *v,
                               int32_t n_tok, hy_cuk_stream_t stream)
{
    if (n_tok <= 0)
        return 0;
    hy_kv_write_kernel<<<dim3((unsigned)n_tok, (unsigned)a->n_head_kv), dim3(32, 2), 0, stream>>>(
        *a, k, v);
    return (int)cudaGetLastError();
}

__device__ __forceinline__ float hy_at_max(float v, float *red)
{
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0)
        red[wid] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < HY_AT_THREADS / 32; w++)
        v = fmaxf(v, red[w]);
    return v;
}

__device__ __forceinline__ float hy_at_sum(float v, float *red)
{
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0)
        red[wid] = v;
    __syncthreads();
    v = 0.0f;
    for (int w = 0; w < HY_AT_THREADS / 32; w++)
        v += red[w];
    return v;
}

/* part layout per (t, h, split): [m, l, acc[hdv]] */
__global__ void __launch_bounds__(HY_AT_THREADS)
hy_attn_kernel(hy_cuk_attn_t a, const float *q, float *part, int n_split)
{
    extern __shared__ float sm[];       /* q[head_dim] | p[HY_AT_THREADS] | red[32] */
    float *qs = sm, *ps = sm + a.head_dim, *red = ps + HY_AT_THREADS;
    const int h = blockIdx.x, t = blockIdx.y, sp = blockIdx.z, tid = threadIdx.x;
    const int g = h / (a.n_head / a.n_head_kv);
    const int pos = a.pos[t];
    const int lo = a.window > 0 ? max(0, pos - a.window + 1) : 0;
    const int len = pos - lo + 1, per = (len + n_split - 1) / n_split;
    const int j_begin = lo + sp * per, j_end = min(pos + 1, j_begin + per); /* [begin, end) */
    const int32_t *pages = a.pages + a.page_off[a.tok_seq[t]];
    const int hd = a.head_dim, hdv = a.head_dim_v;
    float acc[HY_AT_PER_THREAD];
    float m = -INFINITY, l = 0.0f;

    for (int d = tid; d < hd; d += HY_AT_THREADS)
        qs[d] = q[((size_t)t * a.n_head + h) * hd + d];
#pragma unroll
    for (int r = 0; r < HY_AT_PER_THREAD; r++)
        acc[r] = 0.0f;
    __syncthreads();

    for (int j0 = j_begin; j0 < j_end; j0 += HY_AT_THREADS) {
        const int j = j0 + tid, n = min(HY_AT_THREADS, j_end - j0);
        float s = -INFINITY;
        if (j < j_end) {
            const uint8_t *kr = a.k_pool + (size_t)pages[j / a.page_tokens] * a.k_page_bytes +
                                ((size_t)g * a.page_tokens + j % a.page_tokens) * a.k_row_bytes;
            float dot = 0.0f;
            for (int d = 0; d < hd; d++)
                dot += qs[d] * hy_kv_ld(kr, a.kv_type, d);
            s = dot * a.scale;
            if (a.softcap > 0.0f)
                s = a.softcap * tanhf(s / a.softcap);
        }
        const float mnew = fmaxf(m, hy_at_max(s, red));  /* finite: the tile has a key */
        const float c = expf(m - mnew);                   /* 0 while m is -inf */
        const float p = j < j_end ? expf(s - mnew) : 0.0f;
        ps[tid] = p;
        l = l * c + hy_at_sum(p, red);                    /* syncs: ps visible */
#pragma unroll
        for (int r = 0; r < HY_AT_PER_THREAD; r++)
            acc[r] *= c;
        for (int jj = 0; jj < n; jj++) {
            const int jp = j0 + jj;
            const uint8_t *vr = a.v_pool + (size_t)pages[jp / a.page_tokens] * a.v_page_bytes +
                                ((size_t)g * a.page_tokens + jp % a.page_tokens) * a.v_row_bytes;
            const float pj = ps[jj];
#pragma unroll
            for (int r = 0; r < HY_AT_PER_THREAD; r++) {
                const int d = tid + r * HY_AT_THREADS;
                if (d < hdv)
                    acc[r] += pj * hy_kv_ld(vr, a.kv_type, d);
            }
        }
        m = mnew;
        __syncthreads(); /* ps is rewritten by the next tile */
    }
    float *o = part + (((size_t)t * a.n_head + h) * n_split + sp) * (size_t)(2 + hdv);
    if (tid == 0) {
        o[0] = m;
        o[1] = l;
    }
#pragma unroll
    for (int r = 0; r < HY_AT_PER_THREAD; r++) {
        const int d = tid + r * HY_AT_THREADS;
        if (d < hdv)
            o[2 + d] = acc[r];
    }
}

/* out[t][h] = sum_s e^{m_s - M} acc_s / sum_s e^{m_s - M} l_s */
__global__ void hy_attn_merge_kernel(const float *part, float *out, int n_head, int hdv,
                                     int n_split)
{
    const int h = blockIdx.x, t = blockIdx.y;
    const float *p = part + ((size_t)t * n_head + h) * n_split * (size_t)(2 + hdv);
    float M = -INFINITY, L = 0.0f;

    for (int s = 0; s < n_split; s++)
        M = fmaxf(M, p[(size_t)s * (2 + hdv)]);
    for (int s = 0; s < n_split; s++) {
        const float ms = p[(size_t)s * (2 + hdv)];
        if (ms > -INFINITY)
            L += expf(ms - M) * p[(size_t)s * (2 + hdv) + 1];
    }
    for (int d = threadIdx.x; d < hdv; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float ms = p[(size_t)s * (2 + hdv)];
            if (ms > -INFINITY)
                acc += expf(ms - M) * p[(size_t)s * (2 + hdv) + 2 + d];
        }
        out[((size_t)t * n_head + h) * hdv + d] = L > 0.0f ? acc / L : 0.0f;
    }
}

extern "C" int hy_cuk_attention(const hy_cuk_attn_t *a, const float *q, float *out,
                                int32_t n_tok, int32_t n_split, float *part,
                                hy_cuk_stream_t stream)
{
    const size_t shm = sizeof(float) * ((size_t)a->head_dim + HY_AT_THREADS + 32);

    if (n_tok <= 0)
        return 0;
    if (n_split < 1 || n_split > 65535 || a->head_dim_v > HY_CUK_ATTN_MAX_HEAD ||
        a->head_dim > HY_CUK_ATTN_MAX_HEAD)
        return (int)cudaErrorInvalidValue;
    hy_attn_kernel<<<dim3((unsigned)a->n_head, (unsigned)n_tok, (unsigned)n_split),
                     HY_AT_THREADS, shm, stream>>>(*a, q, part, n_split);
    hy_attn_merge_kernel<<<dim3((unsigned)a->n_head, (unsigned)n_tok), 128, 0, stream>>>(
        part, out, a->n_head, a->head_dim_v, n_split);
    return (int)cudaGetLastError();
}
