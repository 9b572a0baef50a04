/*
 * hy_moe.cu - the mixture-of-experts kernels of the CUDA backend: routing
 * (kernels/hy_moe_route.h, one warp per token, selected expert ids and
 * weights written to device memory), the indexed mat-vec that multiplies
 * each (token, slot) pair's input by its chosen expert's matrix inside a 3-D
 * stack (base + id * expert stride; every weight type of hy_quant.cu), and
 * the weighted sum of the experts' outputs into y.  Together with the
 * SwiGLU of hy_ops.cu they run a decode-size MoE layer with no host
 * synchronisation, so CUDA graphs can capture it.
 */
#include "hy_kernels.h"
#include "hy_quant_dev.h"

#include <cuda_runtime.h>

/* ---- routing ----------------------------------------------------------------- */

/* One block of HY_MR_LANES threads per token; dynamic shared memory
 * hy_mr_smem_bytes(n_expert, HY_MR_LANES): slots | p | taken. */
__global__ void hy_moe_route_kernel(hy_mr_params_t m, const float *__restrict__ logits,
                                    const float *__restrict__ bias, int32_t *__restrict__ sel,
                                    float *__restrict__ w)
{
    extern __shared__ double hy_mr_smem[]; /* double: the slots' alignment */
    hy_mr_part_t *part = (hy_mr_part_t *)hy_mr_smem;
    float *p = (float *)(part + HY_MR_LANES);
    uint8_t *taken = (uint8_t *)(p + m.n_expert);
    const int64_t t = blockIdx.x;

    hy_mr_route(&m, logits + t * m.n_expert, bias, p, taken, part, HY_MR_LANES, threadIdx.x,
                blockDim.x, sel + t * m.n_used, w + t * m.n_used);
}

/* ---- indexed mat-vec ------------------------------------------------------------ */

#define HY_MOE_WARPS 4
#define HY_MOE_MAXT HY_MR_GROUP
static_assert(HY_MR_GROUP == HY_CUK_MATVEC_MAX_TOK, "a decode batch's pairs of one expert "
                                                    "fit one group");

/* Block (row group, pair j, matrix z): rows r of expert sel[j] of stack z
 * times the input row of each pair i of j's group (x + (i / x_div) * ne0),
 * into row i of y.  Groups (hy_mr_pair_group): the pairs sharing an expert,
 * up to 8 per block, so each expert's rows stream once per decode step;
 * blocks of pairs that lead no group return at once. */
template <int T>
__global__ void hy_moe_matvec_kernel(const uint8_t *__restrict__ w0, float *__restrict__ y0,
                                     const uint8_t *__restrict__ w1, float *__restrict__ y1,
                                     size_t expert_bytes, size_t row_bytes, int64_t ne0,
                                     int64_t n_rows, const float *__restrict__ x, int x_div,
                                     const int32_t *__restrict__ sel, int n_pairs, int n_expert)
{
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * HY_MOE_WARPS + (threadIdx.x >> 5);
    const int j = blockIdx.y;
    const int32_t e = sel[j];
    const uint8_t *w = blockIdx.z ? w1 : w0;
    float *y = blockIdx.z ? y1 : y0;
    int list[HY_MOE_MAXT];
    const float *xr[HY_MOE_MAXT];
    float acc[HY_MOE_MAXT];
    /* block-uniform: every thread reads the same ids */
    const int n = hy_mr_pair_group(sel, n_pairs, j, list);

    if (n == 0 || r >= n_rows)
        return;
#pragma unroll
    for (int t = 0; t < HY_MOE_MAXT; t++)
        acc[t] = 0.0f;
    if (e < 0 || e >= n_expert) {
        /* never from the routing kernel; keep the output defined */
#pragma unroll
        for (int t = 0; t < HY_MOE_MAXT; t++)
            if (lane == 0 && t < n)
                y[(size_t)list[t] * n_rows + r] = 0.0f;
        return;
    }
#pragma unroll
    for (int t = 0; t < HY_MOE_MAXT; t++)
        xr[t] = x + (size_t)(list[t] / x_div) * (size_t)ne0;
    const uint8_t *row = w + (size_t)e * expert_bytes + (size_t)r * row_bytes;
    if (hy_is_plain<T>::v) {
        for (int64_t i = lane; i < ne0; i += 32) {
            const float wv = hy_ld_plain<T>(row, i);
#pragma unroll
            for (int t = 0; t < HY_MOE_MAXT; t++)
                if (t < n)
                    acc[t] += wv * xr[t][i];
        }
    } else {
        float v[32];
        for (int64_t c = lane; c < ne0 / 32; c += 32) {
            hy_dq_chunk<T>(row, c, v);
#pragma unroll
            for (int t = 0; t < HY_MOE_MAXT; t++) {
                if (t < n) {
                    const float *xv = xr[t] + c * 32;
                    float s = 0.0f;
#pragma unroll
                    for (int q = 0; q < 32; q++)
                        s += v[q] * xv[q];
                    acc[t] += s;
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < HY_MOE_MAXT; t++) {
        float s = acc[t];
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0 && t < n)
            y[(size_t)list[t] * n_rows + r] = s;
    }
}

/* ---- weighted sum --------------------------------------------------------------- */

/* y[t][c] = sum of w[t][k] * d[t*K+k][c] over the token's slots in
 * ascending expert id, the order in which the CPU adds its experts. */
__global__ void hy_moe_combine_kernel(float *__restrict__ y, const float *__restrict__ d,
                                      const int32_t *__restrict__ sel,
                                      const float *__restrict__ w, int K, int n_embd)
{
    __shared__ int order[HY_MR_MAX_USED];
    const int64_t t = blockIdx.y;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;

    if (threadIdx.x == 0) {
        /* insertion sort of the K slots by expert id (K <= 64) */
        for (int k = 0; k < K; k++) {
            int at = k;
            while (at > 0 && sel[t * K + order[at - 1]] > sel[t * K + k]) {
                order[at] = order[at - 1];
                at--;
            }
            order[at] = k;
        }
    }
    __syncthreads();
    if (c >= n_embd)
        return;
    float acc = 0.0f;
    for (int i = 0; i < K; i++) {
        const int64_t pk = t * K + order[i];
        acc += w[pk] * d[(size_t)pk * n_embd + c];
    }
    y[(size_t)t * n_embd + c] = acc;
}

/* ---- launchers -------------------------------------------------------------------- */

static bool hy_mr_params_ok(const hy_mr_params_t *m)
{
    return m->n_expert >= 1 && m->n_expert <= HY_MR_MAX_EXPERT && m->n_used >= 1 &&
           m->n_used <= m->n_expert && m->n_used <= HY_MR_MAX_USED;
}

extern "C" int hy_cuk_moe_route(const hy_mr_params_t *m, const float *logits, const float *bias,
                                int32_t *sel, float *w, int32_t n_tok, hy_cuk_stream_t stream)
{
    if (!m || !hy_mr_params_ok(m) || n_tok < 1 || !logits || !sel || !w)
        return (int)cudaErrorInvalidValue;
    hy_moe_route_kernel<<<(unsigned)n_tok, HY_MR_LANES,
                          hy_mr_smem_bytes(m->n_expert, HY_MR_LANES), stream>>>(*m, logits, bias,
                                                                                 sel, w);
    return (int)cudaGetLastError();
}

extern "C" int hy_cuk_moe_matvec(int type, const void *w0, float *y0, const void *w1, float *y1,
                                 size_t expert_bytes, size_t row_bytes, int64_t ne0,
                                 int64_t n_rows, const float *x, int32_t x_div,
                                 const int32_t *sel, int32_t n_pairs, int32_t n_expert,
                                 hy_cuk_stream_t stream)
{
    const int64_t blocks = (n_rows + HY_MOE_WARPS - 1) / HY_MOE_WARPS;
    const bool plain = type == T_F32 || type == T_F16 || type == T_BF16;
    dim3 grid;

    if (!w0 || !y0 || (w1 == NULL) != (y1 == NULL) || !x || !sel || ne0 < 1 || n_rows < 1 ||
        blocks > INT32_MAX || x_div < 1 || n_pairs < 1 || n_pairs > 65535 || n_expert < 1 ||
        (!plain && ne0 % 32 != 0) || row_bytes == 0 || expert_bytes < (size_t)n_rows * row_bytes)
        return (int)cudaErrorInvalidValue;
    grid = dim3((unsigned)blocks, (unsigned)n_pairs, w1 ? 2u : 1u);
#define HY_MM(T)                                                                                  \
    hy_moe_matvec_kernel<T><<<grid, 32 * HY_MOE_WARPS, 0, stream>>>(                             \
        (const uint8_t *)w0, y0, (const uint8_t *)w1, y1, expert_bytes, row_bytes, ne0, n_rows,  \
        x, x_div, sel, n_pairs, n_expert)
    HY_DISPATCH(type, HY_MM)
#undef HY_MM
    return (int)cudaGetLastError();
}

extern "C" int hy_cuk_moe_combine(float *y, const float *d, const int32_t *sel, const float *w,
                                  int32_t n_tok, int32_t n_used, int32_t n_embd,
                                  hy_cuk_stream_t stream)
{
    if (!y || !d || !sel || !w || n_tok < 1 || n_tok > 65535 || n_used < 1 ||
        n_used > HY_MR_MAX_USED || n_embd < 1)
        return (int)cudaErrorInvalidValue;
    hy_moe_combine_kernel<<<dim3((unsigned)((n_embd + 255) / 256), (unsigned)n_tok), 256, 0,
                            stream>>>(y, d, sel, w, n_used, n_embd);
    return (int)cudaGetLastError();
}
