/*
 * hy_rec.cu - recurrent-layer kernels of the CUDA backend, on the state
 * slots laid out as the CPU backend lays them out (src/backend/cpu/mem.c):
 * the causal depthwise conv with its (d_conv-1) x C window carried in the
 * slot, the Gated DeltaNet recurrence on S[d_k][d_v] per v-head, and the
 * Mamba-2 SSD recurrence on S[head_dim][d_state] per head.  A sequence's
 * run of rows takes the chunked (prefill) form of hy_rec_chunk.h when it
 * is long enough, the exact token-by-token form otherwise (decode); one
 * launch of each covers the batch, every block skipping the sequences the
 * other form owns.  The recurrent kernels give each thread a column (GDN)
 * or a row (SSD) of the state, so no two threads write one element.
 * Lightning attention runs the blocked form of hy_lightning.h for every
 * sequence, decode included (its state layout keeps the current block),
 * or the plain recurrence when the op asks for chunk 1.
 */
#include "hy_kernels.h"
#include "hy_rec_chunk.h"
#include "hy_lightning.h"

#include <cuda_runtime.h>
#include <math.h>

/* Thread per (channel, sequence): it owns channel c of the window. */
__global__ void hy_conv1d_kernel(hy_cuk_seqs_t sq, int64_t conv_off, const float *x,
                                 int32_t x_stride, const float *w, const float *bias, float *y,
                                 int32_t C, int32_t K, int silu)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
    if (c >= C)
        return;
    const int first = sq.first[s], n = sq.n[s];
    float *win = sq.st + (int64_t)sq.slot[s] * sq.slot_floats + conv_off; /* [K-1][C] */
    const float *xs = x + (int64_t)first * x_stride;
    const float *wc = w + (int64_t)c * K;

    for (int t = 0; t < n; t++) {
        float acc = bias ? bias[c] : 0.0f;
        for (int i = 0; i < K; i++) {
            const int src_t = t - (K - 1) + i;
            const float xv = src_t < 0 ? win[(int64_t)(K - 1 + src_t) * C + c]
                                       : xs[(int64_t)src_t * x_stride + c];
            acc += wc[i] * xv;
        }
        if (silu)
            acc = acc / (1.0f + expf(-acc));
        y[((int64_t)first + t) * C + c] = acc;
    }
    /* new window: the last K-1 inputs; ascending i reads entries >= i */
    for (int i = 0; i < K - 1; i++) {
        const int src_t = n - (K - 1) + i;
        win[(int64_t)i * C + c] = src_t < 0 ? win[(int64_t)(K - 1 + src_t) * C + c]
                                            : xs[(int64_t)src_t * x_stride + c];
    }
}

extern "C" int hy_cuk_conv1d(const hy_cuk_seqs_t *sq, const float *x, int32_t x_stride,
                             const float *w, const float *bias, float *y, int32_t C, int32_t K,
                             int silu, hy_cuk_stream_t stream)
{
    if (sq->n_seqs <= 0 || C <= 0)
        return 0;
    hy_conv1d_kernel<<<dim3((unsigned)((C + 127) / 128), (unsigned)sq->n_seqs), 128, 0, stream>>>(
        *sq, sq->conv_off, x, x_stride, w, bias, y, C, K, silu);
    return (int)cudaGetLastError();
}

/* Shared memory a block may opt into on the current device (cached per
 * device: the attribute never changes, and launches stay free of queries). */
static int hy_rec_smem_optin(size_t *out)
{
    static int cached[64];
    int dev, v;
    cudaError_t e = cudaGetDevice(&dev);

    if (e != cudaSuccess)
        return (int)e;
    if (dev >= 0 && dev < 64 && cached[dev] > 0) {
        *out = (size_t)cached[dev];
        return 0;
    }
    e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e != cudaSuccess)
        return (int)e;
    if (dev >= 0 && dev < 64)
        cached[dev] = v;
    *out = (size_t)v;
    return 0;
}

/* Lets `fn` take `bytes` of dynamic shared memory (above the default 48 KB
 * it must be opted into, per kernel and device); remembers the largest
 * grant per device so steady-state launches make no extra driver call. */
static int hy_rec_smem_allow(const void *fn, int *granted, size_t bytes)
{
    int dev;
    cudaError_t e;

    if (bytes <= 48 * 1024)
        return 0;
    e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return (int)e;
    if (dev >= 0 && dev < 64 && (size_t)granted[dev] >= bytes)
        return 0;
    e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess)
        return (int)e;
    if (dev >= 0 && dev < 64)
        granted[dev] = (int)bytes;
    return 0;
}

/* Block per (v-head, sequence); thread j owns column j of S (d_k x d_v,
 * row-major), so each token costs two coalesced sweeps over S.  Sequences
 * of skip_from rows or more belong to the chunked kernel. */
__global__ void hy_gdn_kernel(hy_cuk_seqs_t sq, const float *q, const float *k, const float *v,
                              int32_t stride, const float *g, const float *beta, float *o,
                              int32_t n_k_heads, int32_t Hv, int32_t dk, int32_t dv, int v_tiled,
                              int32_t skip_from)
{
    extern __shared__ float sm[]; /* q[dk] | k[dk] */
    const int h = blockIdx.x, s = blockIdx.y;
    const int kh = v_tiled ? h % n_k_heads : h / (Hv / n_k_heads);
    const int first = sq.first[s], n = sq.n[s];
    float *S = sq.st + (int64_t)sq.slot[s] * sq.slot_floats + sq.rec_off + (int64_t)h * dk * dv;
    float *qs = sm, *ks = sm + dk;

    if (n >= skip_from)
        return; /* whole block: no barrier is skipped by part of it */
    for (int t = 0; t < n; t++) {
        const int64_t r = (int64_t)first + t;
        __syncthreads(); /* previous token's q/k no longer read */
        for (int i = threadIdx.x; i < dk; i += blockDim.x) {
            qs[i] = q[r * stride + (int64_t)kh * dk + i];
            ks[i] = k[r * stride + (int64_t)kh * dk + i];
        }
        __syncthreads();
        const float decay = expf(g[r * Hv + h]), b = beta[r * Hv + h];
        for (int j = threadIdx.x; j < dv; j += blockDim.x) {
            float u = 0.0f, out = 0.0f;
            for (int i = 0; i < dk; i++) {
                const float sv = S[(int64_t)i * dv + j] * decay;
                S[(int64_t)i * dv + j] = sv;
                u += sv * ks[i];
            }
            const float delta = b * (v[r * stride + (int64_t)h * dv + j] - u);
            for (int i = 0; i < dk; i++) {
                const float sv = S[(int64_t)i * dv + j] + ks[i] * delta;
                S[(int64_t)i * dv + j] = sv;
                out += sv * qs[i];
            }
            o[r * (int64_t)Hv * dv + (int64_t)h * dv + j] = out;
        }
    }
}

/* Block per (value tile, v-head, sequence) of the sequences with at least
 * min_rows rows: the chunked form of hy_rec_chunk.h. */
__global__ void __launch_bounds__(HY_RC_THREADS)
hy_gdn_chunk_kernel(hy_cuk_seqs_t sq, hy_rc_gdn_t a, int32_t n_k_heads, int v_tiled,
                    int32_t min_rows)
{
    extern __shared__ float sm[];
    const int s = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * HY_RC_GDN_TV;
    const int n = sq.n[s];
    const int kh = v_tiled ? h % n_k_heads : h / (a.Hv / n_k_heads);
    const int tv = a.dv - j0 < HY_RC_GDN_TV ? a.dv - j0 : HY_RC_GDN_TV;
    float *S = sq.st + (int64_t)sq.slot[s] * sq.slot_floats + sq.rec_off +
               (int64_t)h * a.dk * a.dv;

    if (n < min_rows)
        return; /* whole block */
    hy_rc_gdn_block(&a, sq.first[s], n, S, kh, h, j0, tv, sm, (int)threadIdx.x, (int)blockDim.x);
}

extern "C" int hy_cuk_gdn(const hy_cuk_seqs_t *sq, const float *q, const float *k,
                          const float *v, int32_t stride, const float *g, const float *beta,
                          float *o, int32_t n_k_heads, int32_t n_v_heads, int32_t d_k,
                          int32_t d_v, int v_tiled, int32_t chunk, hy_cuk_stream_t stream)
{
    static int granted[64];
    const int threads = d_v >= 256 ? 256 : (d_v + 31) / 32 * 32;
    const size_t shm = sizeof(float) * 2 * (size_t)d_k;
    size_t optin = 0, cshm = 0;
    int32_t skip_from = INT32_MAX;
    int rc;

    if (sq->n_seqs <= 0 || sq->max_n <= 0)
        return 0;
    if (sq->n_seqs > 65535 || n_v_heads < 1 || n_v_heads > 65535 || n_k_heads < 1 ||
        n_v_heads % n_k_heads != 0 || d_k < 1 || d_v < 1 || shm > 48 * 1024)
        return (int)cudaErrorInvalidValue;
    if (sq->max_n >= HY_RC_GDN_MIN_ROWS && hy_rc_chunk_len(chunk) > 0) {
        if ((rc = hy_rec_smem_optin(&optin)) != 0)
            return rc;
        cshm = hy_rc_plan_smem(0, chunk, d_k, optin);
    }
    if (cshm > 0) {
        hy_rc_gdn_t a = {q, k, v, stride, g, beta, o, n_v_heads, d_k, d_v,
                         hy_rc_chunk_len(chunk)};
        if ((rc = hy_rec_smem_allow((const void *)hy_gdn_chunk_kernel, granted, cshm)) != 0)
            return rc;
        skip_from = HY_RC_GDN_MIN_ROWS;
        hy_gdn_chunk_kernel<<<dim3((unsigned)((d_v + HY_RC_GDN_TV - 1) / HY_RC_GDN_TV),
                                   (unsigned)n_v_heads, (unsigned)sq->n_seqs),
                              HY_RC_THREADS, cshm, stream>>>(*sq, a, n_k_heads, v_tiled,
                                                             HY_RC_GDN_MIN_ROWS);
        if ((rc = (int)cudaGetLastError()) != 0)
            return rc;
    }
    if (sq->min_n < skip_from)
        hy_gdn_kernel<<<dim3((unsigned)n_v_heads, (unsigned)sq->n_seqs), threads, shm, stream>>>(
            *sq, q, k, v, stride, g, beta, o, n_k_heads, n_v_heads, d_k, d_v, v_tiled, skip_from);
    return (int)cudaGetLastError();
}

/* Block per (head, sequence); thread p owns row p of S (head_dim x d_state).
 * Sequences of skip_from rows or more belong to the chunked kernel. */
__global__ void hy_ssd_kernel(hy_cuk_seqs_t sq, const float *x, int32_t x_stride,
                              const float *dt, int32_t dt_stride, const float *dt_bias,
                              const float *A, const float *B, const float *C, int32_t bc_stride,
                              const float *D, float *y, int32_t n_head, int32_t P,
                              int32_t n_group, int32_t N, int32_t skip_from)
{
    extern __shared__ float sm[]; /* B[N] | C[N] */
    const int h = blockIdx.x, s = blockIdx.y, grp = h / (n_head / n_group);
    const int first = sq.first[s], n = sq.n[s];
    float *S = sq.st + (int64_t)sq.slot[s] * sq.slot_floats + sq.rec_off + (int64_t)h * P * N;
    float *Bs = sm, *Cs = sm + N;
    const float Ah = A[h], Dh = D ? D[h] : 0.0f, bias = dt_bias[h];
    const int64_t ldy = (int64_t)n_head * P;

    if (n >= skip_from)
        return; /* whole block */
    for (int t = 0; t < n; t++) {
        const int64_t r = (int64_t)first + t;
        __syncthreads();
        for (int i = threadIdx.x; i < N; i += blockDim.x) {
            Bs[i] = B[r * bc_stride + (int64_t)grp * N + i];
            Cs[i] = C[r * bc_stride + (int64_t)grp * N + i];
        }
        __syncthreads();
        const float dtv = hy_rc_softplus(dt[r * dt_stride + h] + bias);
        const float dA = expf(dtv * Ah);
        for (int p = threadIdx.x; p < P; p += blockDim.x) {
            const float xv = x[r * x_stride + (int64_t)h * P + p], xdt = xv * dtv;
            float *sr = S + (int64_t)p * N, sum = 0.0f;
            for (int i = 0; i < N; i++) {
                const float sv = sr[i] * dA + xdt * Bs[i];
                sr[i] = sv;
                sum += sv * Cs[i];
            }
            y[r * ldy + (int64_t)h * P + p] = sum + Dh * xv;
        }
    }
}

/* Block per (head-row tile, head, sequence) of the sequences with at least
 * min_rows rows: the chunked form of hy_rec_chunk.h. */
__global__ void __launch_bounds__(HY_RC_THREADS)
hy_ssd_chunk_kernel(hy_cuk_seqs_t sq, hy_rc_ssd_t a, int32_t n_group, int32_t min_rows)
{
    extern __shared__ float sm[];
    const int s = blockIdx.z, h = blockIdx.y, p0 = blockIdx.x * HY_RC_SSD_TP;
    const int n = sq.n[s];
    const int tp = a.P - p0 < HY_RC_SSD_TP ? a.P - p0 : HY_RC_SSD_TP;
    float *S = sq.st + (int64_t)sq.slot[s] * sq.slot_floats + sq.rec_off +
               (int64_t)h * a.P * a.N;

    if (n < min_rows)
        return; /* whole block */
    hy_rc_ssd_block(&a, sq.first[s], n, S, h, h / (a.n_head / n_group), p0, tp, sm,
                    (int)threadIdx.x, (int)blockDim.x);
}

extern "C" int hy_cuk_ssd(const hy_cuk_seqs_t *sq, const float *x, int32_t x_stride,
                          const float *dt, int32_t dt_stride, const float *dt_bias,
                          const float *A, const float *B, const float *C, int32_t bc_stride,
                          const float *D, float *y, int32_t n_head, int32_t head_dim,
                          int32_t n_group, int32_t d_state, int32_t chunk,
                          hy_cuk_stream_t stream)
{
    static int granted[64];
    const int threads = head_dim >= 128 ? 128 : (head_dim + 31) / 32 * 32;
    const size_t shm = sizeof(float) * 2 * (size_t)d_state;
    size_t optin = 0, cshm = 0;
    int32_t skip_from = INT32_MAX;
    int rc;

    if (sq->n_seqs <= 0 || sq->max_n <= 0)
        return 0;
    if (sq->n_seqs > 65535 || n_head < 1 || n_head > 65535 || n_group < 1 ||
        n_head % n_group != 0 || head_dim < 1 || d_state < 1 || shm > 48 * 1024)
        return (int)cudaErrorInvalidValue;
    if (sq->max_n >= HY_RC_SSD_MIN_ROWS && hy_rc_chunk_len(chunk) > 0) {
        if ((rc = hy_rec_smem_optin(&optin)) != 0)
            return rc;
        cshm = hy_rc_plan_smem(1, chunk, d_state, optin);
    }
    if (cshm > 0) {
        hy_rc_ssd_t a = {x, x_stride, dt, dt_stride, dt_bias, A, D, B, C, bc_stride, y,
                         n_head, head_dim, d_state, hy_rc_chunk_len(chunk)};
        if ((rc = hy_rec_smem_allow((const void *)hy_ssd_chunk_kernel, granted, cshm)) != 0)
            return rc;
        skip_from = HY_RC_SSD_MIN_ROWS;
        hy_ssd_chunk_kernel<<<dim3((unsigned)((head_dim + HY_RC_SSD_TP - 1) / HY_RC_SSD_TP),
                                   (unsigned)n_head, (unsigned)sq->n_seqs),
                              HY_RC_THREADS, cshm, stream>>>(*sq, a, n_group,
                                                             HY_RC_SSD_MIN_ROWS);
        if ((rc = (int)cudaGetLastError()) != 0)
            return rc;
    }
    if (sq->min_n < skip_from)
        hy_ssd_kernel<<<dim3((unsigned)n_head, (unsigned)sq->n_seqs), threads, shm, stream>>>(
            *sq, x, x_stride, dt, dt_stride, dt_bias, A, B, C, bc_stride, D, y, n_head, head_dim,
            n_group, d_state, skip_from);
    return (int)cudaGetLastError();
}

/* ---- lightning attention ------------------------------------------------------------ */

/* Block per (value tile, head, sequence): hy_la_block. */
__global__ void __launch_bounds__(HY_LA_THREADS)
hy_lightning_block_kernel(hy_cuk_seqs_t sq, hy_la_args_t a)
{
    extern __shared__ float sm[];
    const int s = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * HY_LA_TV;
    const int tv = a.d - j0 < HY_LA_TV ? a.d - j0 : HY_LA_TV;
    float *St = sq.st + (int64_t)sq.slot[s] * sq.slot_floats + sq.rec_off +
                (int64_t)h * hy_la_head_floats(a.d, a.chunk);

    if (sq.n[s] <= 0)
        return; /* whole block */
    hy_la_block(&a, sq.first[s], sq.n[s], sq.n_past[s], St, h, j0, tv, sm, (int)threadIdx.x,
                (int)blockDim.x);
}

/* Block per (head, sequence), after every tile of hy_lightning_block_kernel
 * (stream order): the keys that stay in the current block. */
__global__ void hy_lightning_keys_kernel(hy_cuk_seqs_t sq, hy_la_args_t a)
{
    const int h = blockIdx.x, s = blockIdx.y, n = sq.n[s];
    const int64_t np = sq.n_past[s];
    const int pend = (int)((np + n) % a.chunk), keep = pend < n ? pend : n;
    float *St = sq.st + (int64_t)sq.slot[s] * sq.slot_floats + sq.rec_off +
                (int64_t)h * hy_la_head_floats(a.d, a.chunk);

    for (int e = threadIdx.x; e < keep * a.d; e += blockDim.x)
        hy_la_keys_back(&a, sq.first[s], n, np, St, h, e);
}

/* chunk 1: block per (head, sequence), thread per value column of S. */
__global__ void hy_lightning_rec_kernel(hy_cuk_seqs_t sq, hy_la_args_t a)
{
    extern __shared__ float sm[]; /* q[d] | k[d] of the current row */
    const int h = blockIdx.x, s = blockIdx.y, d = a.d;
    const int first = sq.first[s], n = sq.n[s];
    const float lam1 = a.decay[(int64_t)h * 2 + 1]; /* chunk 1: rows of 2 */
    float *S = sq.st + (int64_t)sq.slot[s] * sq.slot_floats + sq.rec_off + (int64_t)h * d * d;

    for (int t = 0; t < n; t++) {
        const int64_t off = ((int64_t)first + t) * a.row_stride + (int64_t)h * a.head_stride;
        __syncthreads(); /* the previous row's q/k no longer read */
        for (int i = threadIdx.x; i < d; i += blockDim.x) {
            sm[i] = a.q[off + i];
            sm[d + i] = a.k[off + i];
        }
        __syncthreads();
        for (int j = threadIdx.x; j < d; j += blockDim.x)
            hy_la_rec_column(S, sm, a.v[off + j], lam1, d, j,
                             &a.o[((int64_t)first + t) * a.n_head * d + (int64_t)h * d + j]);
    }
}

extern "C" int hy_cuk_lightning(const hy_cuk_seqs_t *sq, const float *q, const float *k,
                                const float *v, int64_t row_stride, int64_t head_stride,
                                const float *decay, float *o, int32_t n_head, int32_t d,
                                int32_t chunk, hy_cuk_stream_t stream)
{
    static int granted[64];
    const hy_la_args_t a = {q, k, v, row_stride, head_stride, decay, o, n_head, d, chunk};
    size_t optin = 0, shm;
    int rc;

    if (sq->n_seqs <= 0 || sq->max_n <= 0)
        return 0;
    if (sq->n_seqs > 65535 || n_head < 1 || n_head > 65535 || d < 1 || chunk < 1)
        return (int)cudaErrorInvalidValue;
    if (chunk == 1) {
        const int threads = d >= 256 ? 256 : (d + 31) / 32 * 32;
        if (sizeof(float) * 2 * (size_t)d > 48 * 1024)
            return (int)cudaErrorInvalidValue;
        hy_lightning_rec_kernel<<<dim3((unsigned)n_head, (unsigned)sq->n_seqs), threads,
                                  sizeof(float) * 2 * (size_t)d, stream>>>(*sq, a);
        return (int)cudaGetLastError();
    }
    shm = sizeof(float) * hy_la_smem_floats(d, chunk);
    if ((rc = hy_rec_smem_optin(&optin)) != 0)
        return rc;
    if (shm > optin)
        return (int)cudaErrorInvalidValue;
    if ((rc = hy_rec_smem_allow((const void *)hy_lightning_block_kernel, granted, shm)) != 0)
        return rc;
    hy_lightning_block_kernel<<<dim3((unsigned)((d + HY_LA_TV - 1) / HY_LA_TV), (unsigned)n_head,
                                     (unsigned)sq->n_seqs),
                                HY_LA_THREADS, shm, stream>>>(*sq, a);
    if ((rc = (int)cudaGetLastError()) != 0)
        return rc;
    hy_lightning_keys_kernel<<<dim3((unsigned)n_head, (unsigned)sq->n_seqs), 128, 0, stream>>>(
        *sq, a);
    return (int)cudaGetLastError();
}
