/*
 * hy_ops.cu - the CUDA backend's element-wise and per-row kernels: SwiGLU,
 * add/mul/scale, the unary activations, RMSNorm, L2 norm, per-row scale and
 * bias, row gather/scatter (MoE), Mamba-2's gated grouped RMSNorm and RoPE
 * (norm / neox, YaRN ramp, llama3 frequency factors).  Each reproduces the
 * CPU backend's formula (src/backend/cpu/cpu.c, recurrent.c, ssd.c); rows
 * reduce in one block with warp shuffles, angles of RoPE are in double as
 * on the CPU.
 */
#include "hy_kernels.h"

#include <cuda_runtime.h>
#include <math.h>

static unsigned hy_grid(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 65535 ? (b ? b : 1) : 65535);
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result.  `red` is 32 floats of shared memory. */
__device__ float hy_block_sum(float v, float *red)
{
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;

    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads(); /* red may still be read by a previous call */
    if (lane == 0)
        red[wid] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void hy_eltwise_kernel(int op, float *x, const float *y, const float *z, float s,
                                  size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        switch (op) {
        case HY_CUK_SWIGLU: {
            const float g = y[i];
            x[i] = g / (1.0f + expf(-g)) * z[i];
            break;
        }
        case HY_CUK_ADD: x[i] += y[i]; break;
        case HY_CUK_MUL: x[i] *= y[i]; break;
        case HY_CUK_SCALE: x[i] *= s; break;
        case HY_CUK_SILU: x[i] = y[i] / (1.0f + expf(-y[i])); break;
        case HY_CUK_SIGMOID: x[i] = 1.0f / (1.0f + expf(-y[i])); break;
        case HY_CUK_SOFTPLUS: x[i] = y[i] > 20.0f ? y[i] : log1pf(expf(y[i])); break;
        case HY_CUK_RELU_SQR: {
            const float r = y[i] > 0.0f ? y[i] : 0.0f;
            x[i] = r * r;
            break;
        }
        case HY_CUK_GELU_TANH: {
            /* torch's gelu(approximate="tanh"); sqrt(2/pi) as torch writes it */
            const float v = y[i];
            x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
            break;
        }
        case HY_CUK_TANH: x[i] = tanhf(y[i]); break;
        }
    }
}

extern "C" int hy_cuk_eltwise(int op, float *x, const float *y, const float *z, float s,
                              size_t n, hy_cuk_stream_t stream)
{
    if (n == 0)
        return 0;
    hy_eltwise_kernel<<<hy_grid(n, 256), 256, 0, stream>>>(op, x, y, z, s, n);
    return (int)cudaGetLastError();
}

__global__ void hy_rmsnorm_kernel(const float *x, const float *w, float *y, int32_t dim,
                                  float eps)
{
    __shared__ float red[32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    float ss = 0.0f;

    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        ss += xr[i] * xr[i];
    ss = hy_block_sum(ss, red);
    const float sc = (float)(1.0 / sqrt((double)ss / dim + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        yr[i] = w ? xr[i] * sc * w[i] : xr[i] * sc;
}

extern "C" int hy_cuk_rmsnorm(const float *x, const float *w, float *y, int32_t n_rows,
                              int32_t dim, float eps, hy_cuk_stream_t stream)
{
    if (n_rows <= 0 || dim <= 0)
        return 0;
    hy_rmsnorm_kernel<<<(unsigned)n_rows, 256, 0, stream>>>(x, w, y, dim, eps);
    return (int)cudaGetLastError();
}

__global__ void hy_l2norm_kernel(float *x, int32_t dim, int32_t stride, float eps, float scale)
{
    __shared__ float red[32];
    float *xr = x + (size_t)blockIdx.x * stride;
    float ss = 0.0f;

    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        ss += xr[i] * xr[i];
    ss = hy_block_sum(ss, red);
    const float sc = (float)(scale / fmax(sqrt((double)ss), (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        xr[i] *= sc;
}

extern "C" int hy_cuk_l2norm(float *x, int32_t n_rows, int32_t dim, int32_t stride, float eps,
                             float scale, hy_cuk_stream_t stream)
{
    if (n_rows <= 0 || dim <= 0)
        return 0;
    hy_l2norm_kernel<<<(unsigned)n_rows, 128, 0, stream>>>(x, dim, stride, eps, scale);
    return (int)cudaGetLastError();
}

/* mode 0: x[r][c] *= s[r]; mode 1: x[r][c] += s[c] */
__global__ void hy_rowop_kernel(float *x, const float *s, int32_t n_rows, int32_t dim, int mode)
{
    const size_t n = (size_t)n_rows * dim;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (mode == 0)
            x[i] *= s[i / dim];
        else
            x[i] += s[i % dim];
    }
}

extern "C" int hy_cuk_scale_rows(float *x, const float *s, int32_t n_rows, int32_t dim,
                                 hy_cuk_stream_t stream)
{
    if (n_rows <= 0 || dim <= 0)
        return 0;
    hy_rowop_kernel<<<hy_grid((size_t)n_rows * dim, 256), 256, 0, stream>>>(x, s, n_rows, dim, 0);
    return (int)cudaGetLastError();
}

extern "C" int hy_cuk_add_bias(float *x, const float *b, int32_t n_rows, int32_t dim,
                               hy_cuk_stream_t stream)
{
    if (n_rows <= 0 || dim <= 0)
        return 0;
    hy_rowop_kernel<<<hy_grid((size_t)n_rows * dim, 256), 256, 0, stream>>>(x, b, n_rows, dim, 1);
    return (int)cudaGetLastError();
}

__global__ void hy_gather_kernel(float *dst, const float *src, const int32_t *rows, int32_t n)
{
    const float *s = src + (size_t)rows[blockIdx.x] * n;
    float *d = dst + (size_t)blockIdx.x * n;

    for (int i = threadIdx.x; i < n; i += blockDim.x)
        d[i] = s[i];
}

extern "C" int hy_cuk_gather_rows(float *dst, const float *src, const int32_t *rows,
                                  int32_t n_rows, int32_t n, hy_cuk_stream_t stream)
{
    if (n_rows <= 0 || n <= 0)
        return 0;
    hy_gather_kernel<<<(unsigned)n_rows, 128, 0, stream>>>(dst, src, rows, n);
    return (int)cudaGetLastError();
}

__global__ void hy_scatter_add_kernel(float *y, const float *x, const int32_t *rows,
                                      const float *wt, int32_t n)
{
    float *d = y + (size_t)rows[blockIdx.x] * n;
    const float *s = x + (size_t)blockIdx.x * n;
    const float w = wt[blockIdx.x];

    for (int i = threadIdx.x; i < n; i += blockDim.x)
        d[i] += w * s[i];
}

extern "C" int hy_cuk_scatter_add(float *y, const float *x, const int32_t *rows, const float *wt,
                                  int32_t n_rows, int32_t n, hy_cuk_stream_t stream)
{
    if (n_rows <= 0 || n <= 0)
        return 0;
    hy_scatter_add_kernel<<<(unsigned)n_rows, 128, 0, stream>>>(y, x, rows, wt, n);
    return (int)cudaGetLastError();
}

__global__ void hy_gnorm_kernel(float *y, const float *z, int32_t z_stride, const float *w,
                                int32_t dim, int32_t group, float eps)
{
    __shared__ float red[32];
    float *yr = y + (size_t)blockIdx.x * dim;
    const float *zr = z + (size_t)blockIdx.x * z_stride;

    for (int c = threadIdx.x; c < dim; c += blockDim.x)
        yr[c] *= zr[c] / (1.0f + expf(-zr[c]));
    __syncthreads();
    for (int g0 = 0; g0 < dim; g0 += group) {
        float ss = 0.0f;
        for (int c = g0 + threadIdx.x; c < g0 + group; c += blockDim.x)
            ss += yr[c] * yr[c];
        ss = hy_block_sum(ss, red);
        const float sc = 1.0f / sqrtf(ss / (float)group + eps);
        for (int c = g0 + threadIdx.x; c < g0 + group; c += blockDim.x)
            yr[c] = yr[c] * sc * w[c];
    }
}

extern "C" int hy_cuk_group_rmsnorm_gated(float *y, const float *z, int32_t z_stride,
                                          const float *w, int32_t n_rows, int32_t dim,
                                          int32_t group, float eps, hy_cuk_stream_t stream)
{
    if (n_rows <= 0 || dim <= 0 || group <= 0)
        return 0;
    hy_gnorm_kernel<<<(unsigned)n_rows, 256, 0, stream>>>(y, z, z_stride, w, dim, group, eps);
    return (int)cudaGetLastError();
}

/* ggml's rope_yarn_ramp */
__device__ double hy_rope_ramp(double lo, double hi, int i)
{
    double y = (i - lo) / fmax(0.001, hi - lo);
    return 1.0 - fmin(1.0, fmax(0.0, y));
}

/* One block per token; threads walk (head, pair). */
__global__ void hy_rope_kernel(float *x, int32_t n_head, int32_t head_dim, const int32_t *pos,
                               int neox, int32_t n_rot, const double *inv_freq,
                               double freq_scale, double mscale, float ext_factor,
                               double corr_lo, double corr_hi)
{
    const int half = n_rot / 2;
    const int64_t t = blockIdx.x;

    for (int idx = threadIdx.x; idx < n_head * half; idx += blockDim.x) {
        const int h = idx / half, i = idx % half;
        const double extrap = pos[t] * inv_freq[i];
        double theta = freq_scale * extrap;
        if (ext_factor != 0.0f) {
            const double mix = hy_rope_ramp(corr_lo, corr_hi, i) * ext_factor;
            theta = theta * (1 - mix) + extrap * mix;
        }
        const float cs = (float)(cos(theta) * mscale), sn = (float)(sin(theta) * mscale);
        float *xh = x + ((size_t)t * n_head + h) * head_dim;
        const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        const float a = xh[i0], b = xh[i1];
        xh[i0] = a * cs - b * sn;
        xh[i1] = a * sn + b * cs;
    }
}

extern "C" int hy_cuk_rope(float *x, int32_t n_tok, int32_t n_head, int32_t head_dim,
                           const int32_t *pos, int neox, int32_t n_rot, const double *inv_freq,
                           double freq_scale, double mscale, float ext_factor, double corr_lo,
                           double corr_hi, hy_cuk_stream_t stream)
{
    if (n_tok <= 0 || n_head <= 0 || n_rot < 2)
        return 0;
    hy_rope_kernel<<<(unsigned)n_tok, 128, 0, stream>>>(x, n_head, head_dim, pos, neox, n_rot,
                                                         inv_freq, freq_scale, mscale,
                                                         ext_factor, corr_lo, corr_hi);
    return (int)cudaGetLastError();
}
