/*
 * cuda.c - the CUDA backend's method table, its memory (weights uploaded
 * once in weight_init and kept quantized, activation buffers, the paged KV
 * pool, the state-slot arena), matmul (custom mat-vec kernels for decode,
 * dequantized half tiles through cublasGemmEx for larger batches, plain
 * SGEMM for F32 weights) and the small ops.  Every op validates its input on
 * the host exactly as the CPU backend does, records the first error for
 * `status`, and zeroes its output instead of launching on bad shapes.  The
 * op-heavy layer kinds (attention, recurrent, MoE) live in cuda_ops.c.
 * Also here: the runner's steps captured and replayed as CUDA graphs per
 * batch shape (step_begin / step_end, policy in graph.c) and sampling on
 * the device (`sample`, kernels/hy_sample.cu).
 */
#include "backend/cuda/cuda_impl.h"
#include "backend/layout.h"
#include "backend/cuda/sample.h"
#include "common/log.h"
#include "hy_sample.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest dequantized weight tile (bytes of half) one cuBLAS call reads:
 * bounds the scratch while keeping each GEMM large enough to be efficient. */
#define HY_CUDA_TILE_BYTES ((size_t)64 << 20)
/* Largest n_rot the rope frequency table holds (as on the CPU). */
#define HY_CUDA_ROPE_MAX_ROT 1024
/* Pinned staging for the op metadata of one captured step: starts at 1 MiB,
 * grows (between steps) to what a step needed, never past the cap. */
#define HY_CUDA_GRAPH_META_MIN ((size_t)1 << 20)
#define HY_CUDA_GRAPH_META_MAX ((size_t)256 << 20)
/* cuBLAS workspace set up front (the size NVIDIA suggests for Hopper), so a
 * captured GEMM never allocates. */
#define HY_CUDA_BLAS_WORKSPACE ((size_t)32 << 20)
/* Broken captures in a row (over all shapes) after which graphs are off. */
#define HY_CUDA_GRAPH_OFF_AFTER 8

/* Where the step between step_begin and step_end stands. */
enum {
    HY_CUDA_STEP_IDLE = 0, /* no step, or an eager one: launches run directly */
    HY_CUDA_STEP_CAPTURE,  /* launches are being captured */
    HY_CUDA_STEP_BROKEN,   /* the capture cannot complete: the stream keeps
                            * capturing so the rest of the step is swallowed
                            * unexecuted, and step_end asks for a rerun */
    HY_CUDA_STEP_LAUNCHED, /* the graph is launched; the rest runs eagerly */
    HY_CUDA_STEP_POISON,   /* a broken capture could not be contained: the
                            * step fails with a recorded error */
};

static void hy_cuda_graph_break(hy_cuda_t *cu, const char *why);
static bool hy_cuda_graph_flush(hy_cuda_t *cu);

static inline hy_cuda_t *hy_cuda(hy_backend_t *be)
{
    return be->ctx;
}

void hy_cuda_fail(hy_cuda_t *cu, int code, const char *fmt, ...)
{
    va_list ap;

    if (cu->err_code != HY_OK)
        return;
    cu->err_code = code;
    va_start(ap, fmt);
    vsnprintf(cu->err_msg, sizeof cu->err_msg, fmt, ap);
    va_end(ap);
}

bool hy_cuda_ok(hy_cuda_t *cu, const char *op, int rc)
{
    if (rc == 0)
        return true;
    /* inside a capture a failed call (an op that synchronises, a copy a
     * graph cannot hold) means the graph would be wrong: rerun eagerly,
     * where a real error shows up again */
    hy_cuda_graph_break(cu, "a CUDA call failed inside the capture");
    hy_cuda_fail(cu, HY_EIO, "%s: CUDA error %d: %s", op, rc,
                 cudaGetErrorString((cudaError_t)rc));
    return false;
}

void hy_cuda_zero(hy_cuda_t *cu, float *p, size_t n)
{
    if (p && n)
        hy_cuda_ok(cu, "zero output", (int)cudaMemsetAsync(p, 0, n * sizeof(float), cu->stream));
}

bool hy_cuda_scratch(hy_cuda_t *cu, void **buf, size_t *size, size_t need, const char *op)
{
    void *p = NULL;
    cudaError_t e;

    if (need <= *size)
        return true;
    /* a captured node may already use the old buffer: never free it
     * mid-capture; the eager rerun of the step grows it */
    if (cu->g_state == HY_CUDA_STEP_CAPTURE || cu->g_state == HY_CUDA_STEP_BROKEN) {
        hy_cuda_graph_break(cu, "a scratch buffer had to grow");
        hy_cuda_fail(cu, HY_EIO, "%s: scratch growth inside a CUDA graph capture", op);
        return false;
    }
    need = (need + ((size_t)1 << 20) - 1) / ((size_t)1 << 20) * ((size_t)1 << 20);
    /* cudaFree waits for kernels still reading the old buffer */
    if (*buf)
        cudaFree(*buf);
    *buf = NULL;
    *size = 0;
    e = cudaMalloc(&p, need);
    if (e != cudaSuccess) {
        hy_cuda_fail(cu, HY_ENOMEM, "%s: cannot allocate %zu bytes of GPU scratch: %s", op, need,
                     cudaGetErrorString(e));
        return false;
    }
    *buf = p;
    *size = need;
    return true;
}

bool hy_cuda_meta(hy_cuda_t *cu, const char *op, int n, const void *const *parts,
                  const size_t *bytes, void **dev)
{
    size_t total = 0, off[16];

    if (n > 16)
        return false;
    for (int i = 0; i < n; i++) {
        off[i] = total;
        total += (bytes[i] + 15) / 16 * 16;
    }
    if (total == 0)
        total = 16;
    if (cu->g_state == HY_CUDA_STEP_BROKEN) {
        hy_cuda_fail(cu, HY_EIO, "%s: skipped (CUDA graph capture broke)", op);
        return false;
    }
    if (cu->g_state == HY_CUDA_STEP_CAPTURE) {
        /* every op of the step gets its own part of the pinned staging area:
         * the graph's copy nodes read it when the graph runs, after the
         * whole step has been packed */
        uint8_t *h = cu->g_hmeta + cu->g_meta_used, *d = cu->g_dmeta + cu->g_meta_used;

        if (total > cu->g_meta_size - cu->g_meta_used) {
            cu->g_meta_need = HY_MAX(cu->g_meta_need, 2 * (cu->g_meta_used + total));
            hy_cuda_graph_break(cu, "op metadata outgrew the pinned staging area");
            hy_cuda_fail(cu, HY_EIO, "%s: metadata staging full inside a CUDA graph capture", op);
            return false;
        }
        for (int i = 0; i < n; i++) {
            if (bytes[i])
                memcpy(h + off[i], parts[i], bytes[i]);
            dev[i] = d + off[i];
        }
        cu->g_meta_used += total;
        return hy_cuda_ok(cu, op, (int)cudaMemcpyAsync(d, h, total, cudaMemcpyHostToDevice,
                                                        cu->stream));
    }
    if (total > cu->hmeta_size) {
        uint8_t *h = realloc(cu->hmeta, total);
        if (!h) {
            hy_cuda_fail(cu, HY_ENOMEM, "%s: out of host memory for %zu bytes", op, total);
            return false;
        }
        cu->hmeta = h;
        cu->hmeta_size = total;
    }
    if (!hy_cuda_scratch(cu, (void **)&cu->meta, &cu->meta_size, total, op))
        return false;
    for (int i = 0; i < n; i++) {
        if (bytes[i])
            memcpy(cu->hmeta + off[i], parts[i], bytes[i]);
        dev[i] = cu->meta + off[i];
    }
    /* from pageable memory the copy has consumed hmeta when this returns,
     * and it is ordered after every kernel still reading the old meta */
    return hy_cuda_ok(cu, op, (int)cudaMemcpyAsync(cu->meta, cu->hmeta, total,
                                                    cudaMemcpyHostToDevice, cu->stream));
}

/* ---- weights ---------------------------------------------------------------- */

static int64_t hy_cuda_weight_rows(const hy_weight_t *w)
{
    return HY_MAX(w->ne[1], 1) * HY_MAX(w->ne[2], 1) * HY_MAX(w->ne[3], 1);
}

/* What matmul / get_rows need of a weight; message into err. */
static int hy_cuda_weight_check(const hy_weight_t *w, char *err)
{
    const char *name = w->name ? w->name : "?";
    const hy_dtype_info_t *ti = hy_dtype_info((uint32_t)w->type);

    if (!ti || !hy_cuk_type_ok((int)w->type))
        return hy_err(err, HY_EUNSUPPORTED, "weight %s: type %s has no CUDA kernels", name,
                      ti && ti->name ? ti->name : "unknown");
    if (w->ne[0] <= 0 || w->ne[1] <= 0 || w->ne[0] > INT32_MAX || w->ne[1] > INT32_MAX)
        return hy_err(err, HY_EINVAL, "weight %s: bad shape %lld x %lld", name,
                      (long long)w->ne[0], (long long)w->ne[1]);
    if (hy_dtype_row_bytes((uint32_t)w->type, w->ne[0]) == 0 ||
        w->row_bytes != hy_dtype_row_bytes((uint32_t)w->type, w->ne[0]))
        return hy_err(err, HY_EINVAL, "weight %s: row of %lld / row_bytes %zu do not fit type %s",
                      name, (long long)w->ne[0], w->row_bytes, ti->name);
    if (!w->dev)
        return hy_err(err, HY_EINVAL, "weight %s: not on the GPU (weight_init not called)", name);
    return HY_OK;
}

static int hy_cuda_weight_init(hy_backend_t *be, hy_weight_t *w, char *err)
{
    hy_cuda_t *cu = hy_cuda(be);
    const char *name = w->name ? w->name : "?";
    uint64_t bytes;
    void *dev = NULL;
    cudaError_t e;

    if (!w->data)
        return hy_err(err, HY_EINVAL, "weight %s: no data", name);
    if (!hy_cuk_type_ok((int)w->type)) {
        const hy_dtype_info_t *ti = hy_dtype_info((uint32_t)w->type);
        return hy_err(err, HY_EUNSUPPORTED, "weight %s: type %s has no CUDA kernels", name,
                      ti && ti->name ? ti->name : "unknown");
    }
    if (w->ne[0] <= 0 || hy_dtype_row_bytes((uint32_t)w->type, w->ne[0]) != w->row_bytes)
        return hy_err(err, HY_EINVAL, "weight %s: row of %lld elements does not fit %zu bytes",
                      name, (long long)w->ne[0], w->row_bytes);
    if (hy_mul_overflow_u64(w->row_bytes, (uint64_t)hy_cuda_weight_rows(w), &bytes) ||
        bytes > SIZE_MAX / 2)
        return hy_err(err, HY_ERANGE, "weight %s: size overflows", name);
    if (cu->n_wbufs == cu->cap_wbufs) {
        size_t cap = cu->cap_wbufs ? 2 * cu->cap_wbufs : 256;
        hy_cuda_wbuf_t *nb = realloc(cu->wbufs, cap * sizeof *nb);
        if (!nb)
            return hy_err(err, HY_ENOMEM, "weight %s: out of host memory", name);
        cu->wbufs = nb;
        cu->cap_wbufs = cap;
    }
    e = cudaMalloc(&dev, (size_t)bytes);
    if (e != cudaSuccess)
        return hy_err(err, HY_ENOMEM, "weight %s: cannot allocate %llu bytes on the GPU "
                      "(%llu already in weights): %s", name, (unsigned long long)bytes,
                      (unsigned long long)cu->weight_bytes, cudaGetErrorString(e));
    e = cudaMemcpy(dev, w->data, (size_t)bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        cudaFree(dev);
        return hy_err(err, HY_EIO, "weight %s: upload failed: %s", name, cudaGetErrorString(e));
    }
    cu->wbufs[cu->n_wbufs++] = (hy_cuda_wbuf_t){w->data, (size_t)bytes, dev};
    cu->weight_bytes += bytes;
    w->dev = dev;
    return HY_OK;
}

const float *hy_cuda_weight_floats(hy_cuda_t *cu, const char *op, const hy_weight_t *w,
                                   int64_t n, bool first_row, float **tmp)
{
    int64_t have = first_row ? w->ne[0] : w->ne[0] * hy_cuda_weight_rows(w);
    cudaError_t e;

    *tmp = NULL;
    if (!w->dev || have != n || w->ne[0] <= 0) {
        hy_cuda_fail(cu, HY_EINVAL, "%s: weight %s has %lld elements%s, want %lld", op,
                     w->name ? w->name : "?", (long long)(w->dev ? have : 0),
                     w->dev ? "" : " on the GPU", (long long)n);
        return NULL;
    }
    if (w->type == HY_DTYPE_F32)
        return w->dev;
    /* the converted copy is freed right after the op: a graph cannot keep it */
    if (cu->g_state == HY_CUDA_STEP_CAPTURE || cu->g_state == HY_CUDA_STEP_BROKEN) {
        hy_cuda_graph_break(cu, "a non-F32 vector weight is converted per call");
        hy_cuda_fail(cu, HY_EIO, "%s: weight conversion inside a CUDA graph capture", op);
        return NULL;
    }
    if (!hy_cuk_type_ok((int)w->type) ||
        hy_dtype_row_bytes((uint32_t)w->type, w->ne[0]) != w->row_bytes) {
        hy_cuda_fail(cu, HY_EUNSUPPORTED, "%s: weight %s has unsupported type %u", op,
                     w->name ? w->name : "?", (unsigned)w->type);
        return NULL;
    }
    e = cudaMalloc((void **)tmp, (size_t)n * sizeof(float));
    if (e != cudaSuccess) {
        *tmp = NULL;
        hy_cuda_fail(cu, HY_ENOMEM, "%s: out of GPU memory: %s", op, cudaGetErrorString(e));
        return NULL;
    }
    if (!hy_cuda_ok(cu, op, hy_cuk_dequant_f32((int)w->type, w->dev, w->row_bytes, w->ne[0],
                                               NULL, n / w->ne[0], *tmp, cu->stream))) {
        cudaFree(*tmp);
        *tmp = NULL;
        return NULL;
    }
    return *tmp;
}

/* ---- memory ---------------------------------------------------------------- */

static float *hy_cuda_alloc(hy_backend_t *be, size_t n_floats)
{
    void *p = NULL;

    if (n_floats == 0)
        n_floats = 1;
    if (n_floats > SIZE_MAX / sizeof(float))
        return NULL;
    if (cudaMalloc(&p, n_floats * sizeof(float)) != cudaSuccess)
        return NULL;
    return p;
}

static void hy_cuda_release(hy_backend_t *be, float *p)
{
    if (p)
        cudaFree(p);
}

static void hy_cuda_upload(hy_backend_t *be, float *dst, const float *src, size_t n)
{
    hy_cuda_t *cu = hy_cuda(be);

    /* host memory read when a graph runs could change before: launch first */
    if (!n || (cu->g_state == HY_CUDA_STEP_CAPTURE && !hy_cuda_graph_flush(cu)) ||
        cu->g_state == HY_CUDA_STEP_BROKEN)
        return;
    hy_cuda_ok(cu, "upload", (int)cudaMemcpyAsync(dst, src, n * sizeof(float),
                                                  cudaMemcpyHostToDevice, cu->stream));
}

static void hy_cuda_download(hy_backend_t *be, float *dst, const float *src, size_t n)
{
    hy_cuda_t *cu = hy_cuda(be);

    if (!n || (cu->g_state == HY_CUDA_STEP_CAPTURE && !hy_cuda_graph_flush(cu)) ||
        cu->g_state == HY_CUDA_STEP_BROKEN)
        return;
    if (hy_cuda_ok(cu, "download", (int)cudaMemcpyAsync(dst, src, n * sizeof(float),
                                                        cudaMemcpyDeviceToHost, cu->stream)))
        hy_cuda_ok(cu, "download", (int)cudaStreamSynchronize(cu->stream));
}

static void hy_cuda_sync(hy_backend_t *be)
{
    hy_cuda_t *cu = hy_cuda(be);

    if ((cu->g_state == HY_CUDA_STEP_CAPTURE && !hy_cuda_graph_flush(cu)) ||
        cu->g_state == HY_CUDA_STEP_BROKEN)
        return;
    hy_cuda_ok(cu, "sync", (int)cudaStreamSynchronize(cu->stream));
}

static int hy_cuda_status(hy_backend_t *be, char *err)
{
    hy_cuda_t *cu = hy_cuda(be);
    cudaError_t e;
    int rc;

    /* a broken capture's errors are its own: step_end discards them (a
     * POISON one's error is reported below) */
    if (cu->g_state == HY_CUDA_STEP_CAPTURE)
        hy_cuda_graph_flush(cu);
    if (cu->g_state == HY_CUDA_STEP_BROKEN)
        return HY_OK;
    e = cudaStreamQuery(cu->stream);
    /* a kernel that faulted asynchronously shows up here (sticky) */
    if (e != cudaSuccess && e != cudaErrorNotReady)
        hy_cuda_fail(cu, HY_EIO, "CUDA: %s", cudaGetErrorString(e));
    rc = cu->err_code;
    if (rc != HY_OK) {
        hy_err(err, rc, "%s", cu->err_msg);
        cu->err_code = HY_OK;
        cu->err_msg[0] = 0;
    }
    return rc;
}

/* ---- matmul ---------------------------------------------------------------- */

void hy_cuda_matmul(hy_backend_t *be, const hy_weight_t *w, const float *x, float *y,
                    int32_t n_tok)
{
    hy_cuda_t *cu = hy_cuda(be);
    char err[HY_ERR_LEN];
    const int64_t ne0 = w->ne[0], ne1 = w->ne[1];
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;

    if (n_tok <= 0)
        return;
    if (hy_cuda_weight_check(w, err) != HY_OK) {
        hy_cuda_fail(cu, HY_EUNSUPPORTED, "matmul: %s", err);
        if (w->ne[1] > 0)
            hy_cuda_zero(cu, y, (size_t)n_tok * (size_t)w->ne[1]);
        return;
    }
    if (n_tok <= HY_CUK_MATVEC_MAX_TOK) {
        hy_cuda_ok(cu, "matmul", hy_cuk_matvec((int)w->type, w->dev, w->row_bytes, ne0, ne1, x,
                                               y, n_tok, cu->stream));
        return;
    }
    if (w->type == HY_DTYPE_F32) {
        /* column-major view: Y^T (ne1 x n_tok) = W^T' X^T */
        st = cublasSgemm(cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)ne1, n_tok, (int)ne0, &one,
                         w->dev, (int)ne0, x, (int)ne0, &zero, y, (int)ne1);
        goto done;
    }
    {
        /* half activations, each token's row scaled by a power of two
         * (xscale, after them in x16) so that none overflows: an FFN's
         * down-projection input can pass 65504 */
        size_t hbytes = ((size_t)n_tok * (size_t)ne0 * 2 + 15) / 16 * 16;
        size_t xbytes = hbytes + sizeof(float) * (size_t)n_tok;
        int64_t rows = (int64_t)(HY_CUDA_TILE_BYTES / ((size_t)ne0 * 2));
        float *xscale;

        rows = HY_MAX(rows / 64 * 64, (int64_t)64);
        rows = HY_MIN(rows, ne1);
        xscale = hy_cuda_scratch(cu, &cu->x16, &cu->x16_size, xbytes, "matmul")
                     ? (float *)((uint8_t *)cu->x16 + hbytes)
                     : NULL;
        if (!xscale ||
            !hy_cuda_scratch(cu, &cu->w16, &cu->w16_size, (size_t)rows * ne0 * 2, "matmul") ||
            !hy_cuda_ok(cu, "matmul",
                        hy_cuk_f32_to_f16_rows(x, cu->x16, xscale, n_tok, ne0, cu->stream))) {
            hy_cuda_zero(cu, y, (size_t)n_tok * (size_t)ne1);
            return;
        }
        for (int64_t r0 = 0; r0 < ne1 && st == CUBLAS_STATUS_SUCCESS; r0 += rows) {
            int64_t nr = HY_MIN(rows, ne1 - r0);
            if (!hy_cuda_ok(cu, "matmul", hy_cuk_dequant_f16((int)w->type,
                                                             (const uint8_t *)w->dev +
                                                                 (size_t)r0 * w->row_bytes,
                                                             w->row_bytes, ne0, nr, cu->w16,
                                                             cu->stream)))
                return;
            st = cublasGemmEx(cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, n_tok, (int)ne0, &one,
                              cu->w16, CUDA_R_16F, (int)ne0, cu->x16, CUDA_R_16F, (int)ne0,
                              &zero, y + r0, CUDA_R_32F, (int)ne1, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT);
        }
        if (st == CUBLAS_STATUS_SUCCESS &&
            !hy_cuda_ok(cu, "matmul",
                        hy_cuk_scale_rows(y, xscale, n_tok, (int32_t)ne1, cu->stream)))
            return;
    }
done:
    if (st != CUBLAS_STATUS_SUCCESS)
        hy_cuda_fail(cu, HY_EIO, "matmul %s: cuBLAS status %d", w->name ? w->name : "?",
                     (int)st);
}

/* ---- small ops ------------------------------------------------------------- */

static void hy_cuda_get_rows(hy_backend_t *be, const hy_weight_t *w, const int32_t *ids,
                             float *y, int32_t n)
{
    hy_cuda_t *cu = hy_cuda(be);
    char err[HY_ERR_LEN];
    size_t bytes = (size_t)n * sizeof(int32_t);
    const void *parts[1] = {ids};
    void *dev[1];

    if (n <= 0)
        return;
    if (hy_cuda_weight_check(w, err) != HY_OK) {
        hy_cuda_fail(cu, HY_EUNSUPPORTED, "get_rows: %s", err);
        if (w->ne[0] > 0)
            hy_cuda_zero(cu, y, (size_t)n * (size_t)w->ne[0]);
        return;
    }
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= w->ne[1]) {
            hy_cuda_fail(cu, HY_ERANGE, "get_rows %s: id %d at %d outside 0..%lld",
                         w->name ? w->name : "?", ids[i], i, (long long)w->ne[1] - 1);
            hy_cuda_zero(cu, y, (size_t)n * (size_t)w->ne[0]);
            return;
        }
    if (!hy_cuda_meta(cu, "get_rows", 1, parts, &bytes, dev))
        return;
    hy_cuda_ok(cu, "get_rows", hy_cuk_dequant_f32((int)w->type, w->dev, w->row_bytes, w->ne[0],
                                                  dev[0], n, y, cu->stream));
}

static void hy_cuda_rmsnorm(hy_backend_t *be, const float *x, const hy_weight_t *w, float *y,
                            int32_t n_rows, int32_t dim, float eps)
{
    hy_cuda_t *cu = hy_cuda(be);
    const float *wf = NULL;
    float *tmp = NULL;

    if (n_rows <= 0 || dim <= 0)
        return;
    if (w && !(wf = hy_cuda_weight_floats(cu, "rmsnorm", w, dim, true, &tmp))) {
        hy_cuda_zero(cu, y, (size_t)n_rows * dim);
        return;
    }
    hy_cuda_ok(cu, "rmsnorm", hy_cuk_rmsnorm(x, wf, y, n_rows, dim, eps, cu->stream));
    if (tmp)
        cudaFree(tmp);
}

/* ggml_rope_yarn_corr_dim */
static double hy_cuda_corr_dim(int n_dims, int n_ctx_orig, double n_rot, double base)
{
    return n_dims * log(n_ctx_orig / (n_rot * 2 * M_PI)) / (2 * log(base));
}

static void hy_cuda_rope(hy_backend_t *be, float *x, int32_t n_tok, int32_t n_head,
                         int32_t head_dim, const int32_t *pos, const hy_rope_t *r)
{
    hy_cuda_t *cu = hy_cuda(be);
    double inv_freq[HY_CUDA_ROPE_MAX_ROT / 2], freq_scale, mscale, lo = 0, hi = 0;
    const void *parts[2] = {pos, inv_freq};
    size_t bytes[2];
    void *dev[2];

    if (n_tok <= 0 || n_head <= 0)
        return;
    if (r->n_rot <= 0 || r->n_rot % 2 || r->n_rot > head_dim || r->n_rot > HY_CUDA_ROPE_MAX_ROT) {
        hy_cuda_fail(cu, HY_EINVAL, "rope: n_rot = %d: must be even, 2..min(head_dim %d, %d)",
                     r->n_rot, head_dim, HY_CUDA_ROPE_MAX_ROT);
        return;
    }
    if (r->mode != HY_ROPE_NORM && r->mode != HY_ROPE_NEOX) {
        hy_cuda_fail(cu, HY_EUNSUPPORTED, "rope: mode %d not supported", (int)r->mode);
        return;
    }
    if (!(r->freq_base > 0.0f)) {
        hy_cuda_fail(cu, HY_EINVAL, "rope: freq_base = %g: must be > 0", r->freq_base);
        return;
    }
    if (n_tok > 65535 * 32767) {
        hy_cuda_fail(cu, HY_ERANGE, "rope: %d tokens is too many for one launch", n_tok);
        return;
    }
    freq_scale = r->freq_scale > 0.0f ? r->freq_scale : 1.0;
    mscale = r->attn_factor > 0.0f ? r->attn_factor : 1.0;
    if (r->ext_factor != 0.0f) {
        if (r->n_ctx_orig <= 0) {
            hy_cuda_fail(cu, HY_EINVAL, "rope: YaRN needs n_ctx_orig > 0 (got %d)",
                         r->n_ctx_orig);
            return;
        }
        double start = floor(hy_cuda_corr_dim(r->n_rot, r->n_ctx_orig, r->beta_fast, r->freq_base));
        double end = ceil(hy_cuda_corr_dim(r->n_rot, r->n_ctx_orig, r->beta_slow, r->freq_base));
        lo = HY_MAX(0.0, start);
        hi = HY_MIN((double)r->n_rot - 1, end);
        mscale *= 1.0 + 0.1 * log(1.0 / freq_scale);
    }
    for (int i = 0; i < r->n_rot / 2; i++) {
        double ff = r->freq_factors ? r->freq_factors[i] : 1.0;
        inv_freq[i] = pow(r->freq_base, -2.0 * i / r->n_rot) / ff;
    }
    bytes[0] = (size_t)n_tok * sizeof(int32_t);
    bytes[1] = (size_t)(r->n_rot / 2) * sizeof(double);
    if (!hy_cuda_meta(cu, "rope", 2, parts, bytes, dev))
        return;
    hy_cuda_ok(cu, "rope", hy_cuk_rope(x, n_tok, n_head, head_dim, dev[0],
                                       r->mode == HY_ROPE_NEOX, r->n_rot, dev[1], freq_scale,
                                       mscale, r->ext_factor, lo, hi, cu->stream));
}

static void hy_cuda_swiglu(hy_backend_t *be, const float *gate, const float *up, float *y,
                           size_t n)
{
    hy_cuda_ok(hy_cuda(be), "swiglu",
               hy_cuk_eltwise(HY_CUK_SWIGLU, y, gate, up, 0, n, hy_cuda(be)->stream));
}

static void hy_cuda_add(hy_backend_t *be, float *x, const float *y, size_t n)
{
    hy_cuda_ok(hy_cuda(be), "add", hy_cuk_eltwise(HY_CUK_ADD, x, y, NULL, 0, n, hy_cuda(be)->stream));
}

static void hy_cuda_scale(hy_backend_t *be, float *x, float s, size_t n)
{
    hy_cuda_ok(hy_cuda(be), "scale",
               hy_cuk_eltwise(HY_CUK_SCALE, x, NULL, NULL, s, n, hy_cuda(be)->stream));
}

static void hy_cuda_mul(hy_backend_t *be, float *x, const float *y, size_t n)
{
    hy_cuda_ok(hy_cuda(be), "mul", hy_cuk_eltwise(HY_CUK_MUL, x, y, NULL, 0, n, hy_cuda(be)->stream));
}

static void hy_cuda_unary(hy_backend_t *be, hy_unary_t op, const float *x, float *y, size_t n)
{
    hy_cuda_t *cu = hy_cuda(be);
    static const int map[] = {
        [HY_UNARY_SILU] = HY_CUK_SILU, [HY_UNARY_SIGMOID] = HY_CUK_SIGMOID,
        [HY_UNARY_SOFTPLUS] = HY_CUK_SOFTPLUS, [HY_UNARY_RELU_SQR] = HY_CUK_RELU_SQR,
        [HY_UNARY_GELU_TANH] = HY_CUK_GELU_TANH, [HY_UNARY_TANH] = HY_CUK_TANH,
    };

    if (n == 0)
        return;
    if ((unsigned)op > HY_UNARY_LAST) {
        hy_cuda_fail(cu, HY_EUNSUPPORTED, "unary: op %d not supported", (int)op);
        hy_cuda_zero(cu, y, n);
        return;
    }
    hy_cuda_ok(cu, "unary", hy_cuk_eltwise(map[op], y, x, NULL, 0, n, cu->stream));
}

static void hy_cuda_gather_rows(hy_backend_t *be, float *dst, const float *src,
                                const int32_t *rows, int32_t n_rows, int32_t n)
{
    hy_cuda_t *cu = hy_cuda(be);
    size_t bytes = (size_t)n_rows * sizeof(int32_t);
    const void *parts[1] = {rows};
    void *dev[1];
    int32_t max_row = 0;
    float *out = dst;

    if (n_rows <= 0 || n <= 0)
        return;
    for (int32_t i = 0; i < n_rows; i++) {
        if (rows[i] < 0) {
            hy_cuda_fail(cu, HY_ERANGE, "gather_rows: row %d at %d is negative", rows[i], i);
            hy_cuda_zero(cu, dst, (size_t)n_rows * n);
            return;
        }
        max_row = HY_MAX(max_row, rows[i]);
    }
    /* the CPU copies rows in order (memmove), so dst may overlap src; the
     * GPU copies all at once: stage through scratch when they overlap */
    if ((const float *)dst < src + ((size_t)max_row + 1) * n && src < dst + (size_t)n_rows * n) {
        if (!hy_cuda_scratch(cu, (void **)&cu->fscr, &cu->fscr_size,
                             (size_t)n_rows * n * sizeof(float), "gather_rows"))
            return;
        out = cu->fscr;
    }
    if (!hy_cuda_meta(cu, "gather_rows", 1, parts, &bytes, dev))
        return;
    if (hy_cuda_ok(cu, "gather_rows", hy_cuk_gather_rows(out, src, dev[0], n_rows, n, cu->stream)) &&
        out != dst)
        hy_cuda_ok(cu, "gather_rows", (int)cudaMemcpyAsync(dst, out, (size_t)n_rows * n * sizeof(float),
                                                           cudaMemcpyDeviceToDevice, cu->stream));
}

static void hy_cuda_add_bias(hy_backend_t *be, float *x, const hy_weight_t *b, int32_t n_tok,
                             int32_t dim)
{
    hy_cuda_t *cu = hy_cuda(be);
    float *tmp = NULL;
    const float *bf;

    if (n_tok <= 0 || dim <= 0)
        return;
    if (!(bf = hy_cuda_weight_floats(cu, "add_bias", b, dim, true, &tmp)))
        return;
    hy_cuda_ok(cu, "add_bias", hy_cuk_add_bias(x, bf, n_tok, dim, cu->stream));
    if (tmp)
        cudaFree(tmp);
}

static void hy_cuda_l2norm(hy_backend_t *be, float *x, int32_t n_rows, int32_t dim,
                           int32_t stride, float eps, float scale)
{
    hy_cuda_t *cu = hy_cuda(be);

    if (n_rows <= 0 || dim <= 0)
        return;
    if (stride < dim || !(eps > 0.0f)) {
        hy_cuda_fail(cu, HY_EINVAL, "l2norm: stride %d < dim %d or eps %g <= 0", stride, dim, eps);
        return;
    }
    hy_cuda_ok(cu, "l2norm", hy_cuk_l2norm(x, n_rows, dim, stride, eps, scale, cu->stream));
}

static void hy_cuda_scale_rows(hy_backend_t *be, float *x, const float *s, int32_t n_rows,
                               int32_t dim)
{
    hy_cuda_ok(hy_cuda(be), "scale_rows", hy_cuk_scale_rows(x, s, n_rows, dim, hy_cuda(be)->stream));
}

static void hy_cuda_group_rmsnorm_gated(hy_backend_t *be, float *y, const float *z,
                                        int32_t z_stride, const hy_weight_t *w, int32_t n_rows,
                                        int32_t dim, int32_t group_size, float eps)
{
    hy_cuda_t *cu = hy_cuda(be);
    float *tmp = NULL;
    const float *wf;

    if (n_rows <= 0)
        return;
    if (dim <= 0 || group_size <= 0 || dim % group_size != 0 || z_stride < dim) {
        hy_cuda_fail(cu, HY_EINVAL, "group_rmsnorm_gated: dim %d, group %d (must divide dim), "
                     "z stride %d", dim, group_size, z_stride);
        hy_cuda_zero(cu, y, (size_t)n_rows * (size_t)HY_MAX(dim, 0));
        return;
    }
    if (!(wf = hy_cuda_weight_floats(cu, "group_rmsnorm_gated", w, dim, false, &tmp))) {
        hy_cuda_zero(cu, y, (size_t)n_rows * dim);
        return;
    }
    hy_cuda_ok(cu, "group_rmsnorm_gated",
               hy_cuk_group_rmsnorm_gated(y, z, z_stride, wf, n_rows, dim, group_size, eps,
                                          cu->stream));
    if (tmp)
        cudaFree(tmp);
}

/* ---- KV pages and state slots ------------------------------------------------ */

static void hy_cuda_kv_free(hy_cuda_t *cu)
{
    if (cu->k_pool)
        cudaFree(cu->k_pool);
    if (cu->v_pool)
        cudaFree(cu->v_pool);
    cu->k_pool = cu->v_pool = NULL;
    free(cu->kv_layer_swa);
    free(cu->kv_layer_page);
    cu->kv_layer_swa = NULL;
    cu->kv_layer_page = NULL;
    cu->kv.layer_swa = NULL;
    cu->kv_ready = 0;
}

static int hy_cuda_kv_init(hy_backend_t *be, const hy_kv_layout_t *lay, char *err)
{
    hy_cuda_t *cu = hy_cuda(be);
    size_t krow, vrow;
    uint64_t kpage, vpage, kbytes, vbytes, n_all = 0, *first = NULL;
    uint8_t *kp = NULL, *vp = NULL, *swa = NULL;
    cudaError_t e;
    int rc;

    rc = hy_kv_layout_check(lay, HY_CUK_ATTN_MAX_HEAD, &krow, &vrow, &kpage, &vpage, err);
    if (rc != HY_OK)
        return rc;
    /* refused, not ignored: the same config must not mean dense here and
     * sparse on the CPU */
    if (lay->sparse.block_pages > 0)
        return hy_err(err, HY_EUNSUPPORTED, "[attention] sparse = block: block-sparse "
                      "attention is not implemented on the CUDA backend (use sparse = off)");
    /* every layer's pages one after the other, each layer its group's pool */
    first = malloc(sizeof *first * (size_t)HY_MAX(lay->n_layers, 1));
    swa = malloc((size_t)HY_MAX(lay->n_layers, 1));
    if (!first || !swa) {
        free(first);
        free(swa);
        return hy_err(err, HY_ENOMEM, "kv: out of memory");
    }
    for (int32_t l = 0; l < lay->n_layers; l++) {
        swa[l] = hy_kv_layout_group(lay, l) == HY_KV_SWA;
        first[l] = n_all;
        n_all += (uint64_t)hy_kv_layout_group_pages(lay, hy_kv_layout_group(lay, l));
    }
    if (hy_mul_overflow_u64(kpage, n_all, &kbytes) || hy_mul_overflow_u64(vpage, n_all, &vbytes) ||
        kbytes > SIZE_MAX / 2 || vbytes > SIZE_MAX / 2) {
        free(first);
        free(swa);
        return hy_err(err, HY_ERANGE, "kv: %d pages of %d tokens overflow", lay->n_pages,
                      lay->page_tokens);
    }
    /* the old pool stays until the new one exists: failure changes nothing */
    e = cudaMalloc((void **)&kp, HY_MAX((size_t)kbytes, (size_t)1));
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&vp, HY_MAX((size_t)vbytes, (size_t)1));
    if (e == cudaSuccess && kbytes)
        e = cudaMemset(kp, 0, (size_t)kbytes);
    if (e == cudaSuccess && vbytes)
        e = cudaMemset(vp, 0, (size_t)vbytes);
    if (e != cudaSuccess) {
        if (kp)
            cudaFree(kp);
        if (vp)
            cudaFree(vp);
        free(first);
        free(swa);
        return hy_err(err, HY_ENOMEM, "kv: cannot allocate %llu bytes of KV pages on the GPU: %s",
                      (unsigned long long)(kbytes + vbytes), cudaGetErrorString(e));
    }
    hy_cuda_kv_free(cu);
    cu->kv = *lay;
    cu->kv_layer_swa = swa;
    cu->kv.layer_swa = swa;
    cu->kv_layer_page = first;
    cu->k_pool = kp;
    cu->v_pool = vp;
    cu->k_row_bytes = krow;
    cu->v_row_bytes = vrow;
    cu->k_page_bytes = kpage;
    cu->v_page_bytes = vpage;
    cu->kv_ready = 1;
    return HY_OK;
}

static void hy_cuda_state_free(hy_cuda_t *cu)
{
    if (cu->st)
        cudaFree(cu->st);
    free(cu->st_conv_off);
    cu->st = NULL;
    cu->st_conv_off = cu->st_rec_off = cu->st_conv_floats = cu->st_rec_floats = NULL;
    cu->st_layers = cu->st_slots = 0;
    cu->st_slot_floats = 0;
}

static int hy_cuda_state_init(hy_backend_t *be, const hy_state_layout_t *lay, char *err)
{
    hy_cuda_t *cu = hy_cuda(be);
    int64_t *meta = NULL, off = 0;
    float *arena = NULL;
    uint64_t total;
    cudaError_t e;
    int rc = HY_OK;

    if ((rc = hy_state_layout_plan(lay, &meta, &off, &total, err)) != HY_OK)
        goto out;
    e = cudaMalloc((void **)&arena, (size_t)total);
    if (e == cudaSuccess)
        e = cudaMemset(arena, 0, (size_t)total);
    if (e != cudaSuccess) {
        rc = hy_err(err, HY_ENOMEM, "state_init: cannot allocate %llu bytes of state on the GPU "
                    "(%d slots): %s", (unsigned long long)total, lay->n_slots,
                    cudaGetErrorString(e));
        goto out;
    }
    hy_cuda_state_free(cu);
    cu->st = arena;
    cu->st_layers = lay->n_layers;
    cu->st_slots = lay->n_slots;
    cu->st_slot_floats = off;
    cu->st_conv_off = meta;
    cu->st_rec_off = meta + lay->n_layers;
    cu->st_conv_floats = meta + 2 * lay->n_layers;
    cu->st_rec_floats = meta + 3 * lay->n_layers;
    arena = NULL;
    meta = NULL;
out:
    if (arena)
        cudaFree(arena);
    free(meta);
    return rc;
}

static bool hy_cuda_slot_ok(hy_cuda_t *cu, const char *op, int32_t slot)
{
    if (!cu->st) {
        hy_cuda_fail(cu, HY_EINVAL, "%s: no recurrent state (state_init not called)", op);
        return false;
    }
    if (slot < 0 || slot >= cu->st_slots) {
        hy_cuda_fail(cu, HY_ERANGE, "%s: state slot %d outside 0..%d", op, slot, cu->st_slots - 1);
        return false;
    }
    return true;
}

static void hy_cuda_state_clear(hy_backend_t *be, int32_t slot)
{
    hy_cuda_t *cu = hy_cuda(be);

    if (hy_cuda_slot_ok(cu, "state_clear", slot))
        hy_cuda_zero(cu, cu->st + slot * cu->st_slot_floats, (size_t)cu->st_slot_floats);
}

static void hy_cuda_state_copy(hy_backend_t *be, int32_t dst, int32_t src)
{
    hy_cuda_t *cu = hy_cuda(be);

    if (!hy_cuda_slot_ok(cu, "state_copy", dst) || !hy_cuda_slot_ok(cu, "state_copy", src) ||
        dst == src)
        return;
    hy_cuda_ok(cu, "state_copy",
               (int)cudaMemcpyAsync(cu->st + dst * cu->st_slot_floats,
                                    cu->st + src * cu->st_slot_floats,
                                    (size_t)cu->st_slot_floats * sizeof(float),
                                    cudaMemcpyDeviceToDevice, cu->stream));
}

static void hy_cuda_mem_allocated(hy_backend_t *be, uint64_t *kv_bytes, uint64_t *state_bytes)
{
    hy_cuda_t *cu = hy_cuda(be);

    *kv_bytes = cu->kv_ready ? hy_kv_layout_bytes(&cu->kv, cu->k_page_bytes, cu->v_page_bytes)
                             : 0;
    *state_bytes = cu->st ? (uint64_t)cu->st_slot_floats * sizeof(float) * (uint64_t)cu->st_slots
                          : 0;
}

/* ---- CUDA graphs: one runner step captured and replayed --------------------------
 * step_begin starts capturing the stream when the step's shape has been seen
 * before; every op then runs its host code (checks, metadata packing) as
 * usual while its launches are recorded.  The first host synchronisation
 * (normally the logits download) ends the capture: the graph updates the
 * shape's cached executable in place (or instantiates one when the launch
 * sequence changed) and is launched.  Anything a graph cannot hold (scratch
 * growth, per-call weight conversion, a host sync inside an op) breaks the
 * capture: nothing of the step has run, the rest of it is swallowed by the
 * still-capturing stream, and step_end asks the runner to run it again,
 * eagerly. */

static void hy_cuda_graph_break(hy_cuda_t *cu, const char *why)
{
    if (cu->g_state != HY_CUDA_STEP_CAPTURE)
        return;
    cu->g_state = HY_CUDA_STEP_BROKEN;
    cu->g_why = why;
}

static void hy_cuda_graph_drop(void *exec, void *arg)
{
    (void)arg;
    cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

/* Ends the capture and launches the graph; false when the capture broke
 * (the state is then BROKEN, or POISON with an error recorded). */
static bool hy_cuda_graph_flush(hy_cuda_t *cu)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec;
    cudaGraphExecUpdateResultInfo info;
    cudaError_t e;
    bool updated = false;

    if (cu->g_state != HY_CUDA_STEP_CAPTURE)
        return cu->g_state == HY_CUDA_STEP_IDLE || cu->g_state == HY_CUDA_STEP_LAUNCHED;
    e = cudaStreamEndCapture(cu->stream, &g);
    if (e != cudaSuccess || !g) {
        /* an op synchronised with the host or made another call a
         * capture cannot contain */
        cu->g_why = "the capture was invalidated (a host synchronisation inside the step)";
        goto broken;
    }
    exec = (cudaGraphExec_t)cu->g_entry->exec;
    if (exec && cudaGraphExecUpdate(exec, g, &info) == cudaSuccess) {
        updated = true;
    } else if (exec) {
        /* the launch sequence changed (e.g. the attention split): rebuild */
        cudaGetLastError();
        cudaGraphExecDestroy(exec);
        cu->g_entry->exec = NULL;
    }
    if (!updated) {
        exec = NULL;
        if (cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) {
            cu->g_why = "cudaGraphInstantiate failed";
            goto broken;
        }
        cu->g_entry->exec = exec;
    }
    cudaGraphDestroy(g);
    g = NULL;
    if (cudaGraphLaunch(exec, cu->stream) != cudaSuccess) {
        cu->g_why = "cudaGraphLaunch failed";
        goto broken;
    }
    /* the next capture reuses the staging area this graph reads */
    cudaEventRecord(cu->g_done, cu->stream);
    if (hy_cuda_graph_done(&cu->graphs, cu->g_entry, updated))
        hy_log(LOG_WARNING, "cuda_graph_eager", "n_tok=%d n_seqs=%d n_out=%d reason=%s",
               cu->g_entry->key.n_tok, cu->g_entry->key.n_seqs, cu->g_entry->key.n_out,
               "the launch sequence changes every step (no graph update possible)");
    cu->g_breaks_in_row = 0;
    cu->g_state = HY_CUDA_STEP_LAUNCHED;
    return true;
broken:
    if (g)
        cudaGraphDestroy(g);
    cudaGetLastError(); /* not sticky: the rerun must not see it */
    /* the rest of the step must not run: swallow it in a capture that
     * step_end throws away */
    if (cudaStreamBeginCapture(cu->stream, cudaStreamCaptureModeRelaxed) == cudaSuccess) {
        cu->g_state = HY_CUDA_STEP_BROKEN;
    } else {
        cudaGetLastError();
        cu->g_state = HY_CUDA_STEP_POISON;
        cu->err_code = HY_OK;
        hy_cuda_fail(cu, HY_EIO, "CUDA graph: %s, and the rest of the step could not be held "
                     "back", cu->g_why);
    }
    return false;
}

/* (Re)allocates the pinned staging area and its device twin to `need`. */
static bool hy_cuda_graph_staging(hy_cuda_t *cu, size_t need)
{
    uint8_t *h = NULL, *d = NULL;

    need = (need + HY_CUDA_GRAPH_META_MIN - 1) / HY_CUDA_GRAPH_META_MIN * HY_CUDA_GRAPH_META_MIN;
    if (need > HY_CUDA_GRAPH_META_MAX)
        return false;
    if (cudaHostAlloc((void **)&h, need, cudaHostAllocDefault) != cudaSuccess ||
        cudaMalloc((void **)&d, need) != cudaSuccess) {
        cudaGetLastError();
        if (h)
            cudaFreeHost(h);
        return false;
    }
    /* a launched graph may still copy from the old area */
    cudaEventSynchronize(cu->g_done);
    if (cu->g_hmeta)
        cudaFreeHost(cu->g_hmeta);
    if (cu->g_dmeta)
        cudaFree(cu->g_dmeta);
    cu->g_hmeta = h;
    cu->g_dmeta = d;
    cu->g_meta_size = need;
    return true;
}

static bool hy_cuda_step_end(hy_backend_t *be);

static void hy_cuda_step_begin(hy_backend_t *be, const hy_batch_t *b, int32_t n_out)
{
    hy_cuda_t *cu = hy_cuda(be);
    hy_cuda_graph_key_t key;
    hy_cuda_graph_entry_t *ent;
    void *evicted = NULL;

    /* a step that was never ended (a caller bug) must not leave the stream
     * capturing: close it as a broken one */
    if (cu->g_state != HY_CUDA_STEP_IDLE && cu->g_entry)
        hy_cuda_step_end(be);
    cu->g_state = HY_CUDA_STEP_IDLE;
    cu->g_entry = NULL;
    /* a pending error must reach the caller as it is, not be discarded
     * with a broken capture */
    if (cu->g_off || cu->err_code != HY_OK || !hy_cuda_graph_key(b, n_out, &key))
        return;
    ent = hy_cuda_graph_get(&cu->graphs, &key, &evicted);
    if (evicted)
        cudaGraphExecDestroy((cudaGraphExec_t)evicted); /* freed once it has run */
    if (hy_cuda_graph_plan(&cu->graphs, ent) != HY_CUDA_GRAPH_CAPTURE)
        return;
    if ((cu->g_meta_need > cu->g_meta_size || !cu->g_hmeta) &&
        !hy_cuda_graph_staging(cu, HY_MAX(cu->g_meta_need, HY_CUDA_GRAPH_META_MIN))) {
        /* too much metadata for a graph, or no pinned memory: eager */
        if (hy_cuda_graph_broken(&cu->graphs, ent))
            hy_log(LOG_WARNING, "cuda_graph_eager", "n_tok=%d n_seqs=%d n_out=%d reason=%s",
                   key.n_tok, key.n_seqs, key.n_out, "no pinned staging for the op metadata");
        return;
    }
    cudaEventSynchronize(cu->g_done);
    cu->g_meta_used = 0;
    if (cudaStreamBeginCapture(cu->stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        cudaGetLastError();
        if (hy_cuda_graph_broken(&cu->graphs, ent))
            hy_log(LOG_WARNING, "cuda_graph_eager", "n_tok=%d n_seqs=%d n_out=%d reason=%s",
                   key.n_tok, key.n_seqs, key.n_out, "cudaStreamBeginCapture failed");
        return;
    }
    cu->g_entry = ent;
    cu->g_state = HY_CUDA_STEP_CAPTURE;
    cu->g_why = NULL;
}

static bool hy_cuda_step_end(hy_backend_t *be)
{
    hy_cuda_t *cu = hy_cuda(be);
    bool ran = true;

    if (cu->g_state == HY_CUDA_STEP_CAPTURE)
        hy_cuda_graph_flush(cu); /* a step without a host sync (no logits) */
    if (cu->g_state == HY_CUDA_STEP_BROKEN) {
        cudaGraph_t g = NULL;

        if (cudaStreamEndCapture(cu->stream, &g) == cudaSuccess && g)
            cudaGraphDestroy(g);
        cudaGetLastError();
        /* nothing of the step ran: its recorded errors (skipped ops) go too */
        cu->err_code = HY_OK;
        cu->err_msg[0] = 0;
        if (hy_cuda_graph_broken(&cu->graphs, cu->g_entry))
            hy_log(LOG_WARNING, "cuda_graph_eager", "n_tok=%d n_seqs=%d n_out=%d reason=%s",
                   cu->g_entry->key.n_tok, cu->g_entry->key.n_seqs, cu->g_entry->key.n_out,
                   cu->g_why ? cu->g_why : "?");
        /* a model whose every step breaks (MoE routing on the host) stops
         * paying for captures after a few shapes */
        if (++cu->g_breaks_in_row >= HY_CUDA_GRAPH_OFF_AFTER && !cu->g_off) {
            cu->g_off = true;
            hy_log(LOG_WARNING, "cuda_graphs_off", "broken_in_row=%u reason=%s",
                   cu->g_breaks_in_row, cu->g_why ? cu->g_why : "?");
        }
        ran = false;
    }
    cu->g_state = HY_CUDA_STEP_IDLE;
    cu->g_entry = NULL;
    return ran;
}

int hy_cuda_graph_stats(hy_backend_t *be, hy_cuda_graph_cache_t *out)
{
    if (!be || !be->i || !be->i->name || strcmp(be->i->name, "cuda") != 0)
        return HY_EINVAL;
    *out = hy_cuda(be)->graphs;
    return HY_OK;
}

/* ---- sampling on the device ------------------------------------------------------ */

_Static_assert(HY_SAMPLE_MAX_TOP == HY_CUK_SAMPLE_MAX_TOP, "top logprobs differ");

/* Grows the pinned + device parameter/result area of `sample`. */
static bool hy_cuda_sample_area(hy_cuda_t *cu, size_t need)
{
    void *h = NULL, *d = NULL;

    if (need <= cu->smp_size)
        return true;
    if (cudaHostAlloc(&h, need, cudaHostAllocDefault) != cudaSuccess ||
        cudaMalloc(&d, need) != cudaSuccess) {
        cudaGetLastError();
        if (h)
            cudaFreeHost(h);
        return false;
    }
    /* the previous call synchronised before returning: nothing reads the old area */
    if (cu->smp_host)
        cudaFreeHost(cu->smp_host);
    if (cu->smp_dev)
        cudaFree(cu->smp_dev);
    cu->smp_host = h;
    cu->smp_dev = d;
    cu->smp_size = need;
    return true;
}

static int hy_cuda_sample(hy_backend_t *be, const float *logits, int32_t n_rows, int32_t n_vocab,
                          const hy_sample_params_t *p, hy_sample_result_t *res, char *err)
{
    hy_cuda_t *cu = hy_cuda(be);
    size_t rows_bytes, res_bytes;
    hy_cuk_sample_row_t *hr;
    hy_cuk_sample_res_t *hs;
    cudaError_t e;
    int rc;

    if (!logits || !p || !res || n_rows <= 0 || n_rows > 65535 || n_vocab <= 0)
        return hy_err(err, HY_EINVAL, "sample: %d rows of %d logits (1..65535 rows of >= 1)",
                      (int)n_rows, (int)n_vocab);
    if (cu->g_state == HY_CUDA_STEP_CAPTURE || cu->g_state == HY_CUDA_STEP_BROKEN)
        return hy_err(err, HY_EINVAL, "sample: called inside a captured step");
    for (int32_t i = 0; i < n_rows; i++) {
        if ((rc = hy_sample_params_check(&p[i], err)) != HY_OK)
            return rc;
    }
    rows_bytes = ((size_t)n_rows * sizeof *hr + 15) / 16 * 16;
    res_bytes = (size_t)n_rows * sizeof *hs;
    if (!hy_cuda_sample_area(cu, rows_bytes + res_bytes))
        return hy_err(err, HY_ENOMEM, "sample: cannot allocate %zu bytes of pinned/GPU memory",
                      rows_bytes + res_bytes);
    hr = cu->smp_host;
    hs = (hy_cuk_sample_res_t *)((uint8_t *)cu->smp_host + rows_bytes);
    for (int32_t i = 0; i < n_rows; i++) {
        hr[i] = (hy_cuk_sample_row_t){
            .u = hy_sample_uniform(p[i].seed, p[i].counter),
            .temperature = p[i].temperature,
            .top_p = p[i].top_p,
            /* the host's own logf, so min_p's threshold rounds as on the CPU */
            .log_min_p = p[i].min_p > 0.0f ? logf(p[i].min_p) : -INFINITY,
            .top_k = p[i].top_k,
            .n_logprobs = p[i].n_logprobs,
        };
    }
    if ((e = cudaMemcpyAsync(cu->smp_dev, hr, rows_bytes, cudaMemcpyHostToDevice, cu->stream)) !=
            cudaSuccess ||
        (e = (cudaError_t)hy_cuk_sample(logits, n_rows, n_vocab, cu->smp_dev,
                                        (hy_cuk_sample_res_t *)((uint8_t *)cu->smp_dev + rows_bytes),
                                        cu->stream)) != cudaSuccess ||
        (e = cudaMemcpyAsync(hs, (uint8_t *)cu->smp_dev + rows_bytes, res_bytes,
                             cudaMemcpyDeviceToHost, cu->stream)) != cudaSuccess ||
        (e = cudaStreamSynchronize(cu->stream)) != cudaSuccess)
        return hy_err(err, HY_EIO, "sample: CUDA error %d: %s", (int)e, cudaGetErrorString(e));
    for (int32_t i = 0; i < n_rows; i++) {
        res[i].token = hs[i].token;
        res[i].logprob = hs[i].logprob;
        res[i].n_top = hs[i].n_top;
        for (int32_t j = 0; j < hs[i].n_top && j < HY_SAMPLE_MAX_TOP; j++) {
            res[i].top_ids[j] = hs[i].top_ids[j];
            res[i].top_logprobs[j] = hs[i].top_logprobs[j];
        }
    }
    return HY_OK;
}

/* ---- construction ------------------------------------------------------------ */

static void hy_cuda_free(hy_backend_t *be)
{
    hy_cuda_t *cu;

    if (!be)
        return;
    cu = be->ctx;
    if (cu) {
        if (cu->stream)
            cudaStreamSynchronize(cu->stream);
        hy_cuda_graph_clear(&cu->graphs, hy_cuda_graph_drop, NULL);
        if (cu->g_hmeta)
            cudaFreeHost(cu->g_hmeta);
        if (cu->g_dmeta)
            cudaFree(cu->g_dmeta);
        if (cu->g_done)
            cudaEventDestroy(cu->g_done);
        if (cu->smp_host)
            cudaFreeHost(cu->smp_host);
        if (cu->smp_dev)
            cudaFree(cu->smp_dev);
        for (size_t i = 0; i < cu->n_wbufs; i++)
            cudaFree(cu->wbufs[i].dev);
        free(cu->wbufs);
        hy_cuda_kv_free(cu);
        hy_cuda_state_free(cu);
        if (cu->meta)
            cudaFree(cu->meta);
        if (cu->w16)
            cudaFree(cu->w16);
        if (cu->x16)
            cudaFree(cu->x16);
        if (cu->fscr)
            cudaFree(cu->fscr);
        free(cu->hmeta);
        if (cu->blas)
            cublasDestroy(cu->blas);
        if (cu->blas_ws)
            cudaFree(cu->blas_ws);
        if (cu->stream)
            cudaStreamDestroy(cu->stream);
        free(cu);
    }
    free(be);
}

static const struct hy_backend_i hy_cuda_methods = {
    .name = "cuda",
    .free = hy_cuda_free,
    .weight_init = hy_cuda_weight_init,
    .kv_init = hy_cuda_kv_init,
    .alloc = hy_cuda_alloc,
    .release = hy_cuda_release,
    .upload = hy_cuda_upload,
    .download = hy_cuda_download,
    .sync = hy_cuda_sync,
    .matmul = hy_cuda_matmul,
    .get_rows = hy_cuda_get_rows,
    .rmsnorm = hy_cuda_rmsnorm,
    .rope = hy_cuda_rope,
    .attention = hy_cuda_attention,
    .swiglu = hy_cuda_swiglu,
    .add = hy_cuda_add,
    .scale = hy_cuda_scale,
    .gather_rows = hy_cuda_gather_rows,
    .add_bias = hy_cuda_add_bias,
    .state_init = hy_cuda_state_init,
    .state_clear = hy_cuda_state_clear,
    .state_copy = hy_cuda_state_copy,
    .conv1d = hy_cuda_conv1d,
    .unary = hy_cuda_unary,
    .mul = hy_cuda_mul,
    .l2norm = hy_cuda_l2norm,
    .gdn = hy_cuda_gdn,
    .ssd = hy_cuda_ssd,
    .lightning = hy_cuda_lightning,
    .moe = hy_cuda_moe,
    .scale_rows = hy_cuda_scale_rows,
    .group_rmsnorm_gated = hy_cuda_group_rmsnorm_gated,
    .mem_sizes = hy_layout_mem_sizes, /* the CPU backend's layouts, so its sizes */
    .mem_allocated = hy_cuda_mem_allocated,
    .status = hy_cuda_status,
    .step_begin = hy_cuda_step_begin,
    .step_end = hy_cuda_step_end,
    .sample = hy_cuda_sample,
    .kv_page_read = hy_cuda_kv_page_read,
    .kv_page_write = hy_cuda_kv_page_write,
    .state_read = hy_cuda_state_read,
    .state_write = hy_cuda_state_write,
    .mem_info = hy_cuda_mem_info,
    .host_alloc = hy_cuda_host_alloc,
    .host_free = hy_cuda_host_free,
};

int hy_backend_cuda_new(hy_backend_t **out, const hy_backend_opts_t *opts, char *err)
{
    hy_backend_t *be = NULL;
    hy_cuda_t *cu = NULL;
    int count = 0, rc = HY_OK;
    bool g_off;
    cudaError_t e;
    cublasStatus_t bs;

    *out = NULL;
    /* its matrix products have one arithmetic (cuBLAS over dequantized
     * weights); a request for the CPU's 8-bit activations is refused, not
     * ignored */
    if (opts && opts->act_bits != 0 && opts->act_bits != 16)
        return hy_err(err, HY_EUNSUPPORTED, "cuda backend: activation bits %d: only 16 "
                      "(8-bit activations are a CPU kernel choice)", opts->act_bits);
    /* HY_CUDA_GRAPHS=0 runs every step eagerly (comparisons, debugging); a
     * bad value is a configuration error, reported before any device work */
    if ((rc = hy_cuda_graph_env(getenv("HY_CUDA_GRAPHS"), &g_off, err)) != HY_OK)
        return rc;
    /* no driver, no device, or a driver too old for this runtime: all end
     * here with the runtime's own reason */
    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return hy_err(err, HY_EUNSUPPORTED, "no CUDA device: %s", cudaGetErrorString(e));
    if (count < 1)
        return hy_err(err, HY_EUNSUPPORTED, "no CUDA device: the driver reports 0 devices");
    be = calloc(1, sizeof *be);
    cu = calloc(1, sizeof *cu);
    if (!be || !cu) {
        free(be);
        free(cu);
        return hy_err(err, HY_ENOMEM, "cuda backend: out of memory");
    }
    be->i = &hy_cuda_methods;
    be->ctx = cu;
    cu->device = 0;
    if ((e = cudaSetDevice(cu->device)) != cudaSuccess ||
        (e = cudaStreamCreate(&cu->stream)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&cu->g_done, cudaEventDisableTiming)) != cudaSuccess) {
        rc = hy_err(err, HY_EUNSUPPORTED, "no CUDA device: device %d: %s", cu->device,
                    cudaGetErrorString(e));
        goto out;
    }
    if ((bs = cublasCreate(&cu->blas)) != CUBLAS_STATUS_SUCCESS ||
        (bs = cublasSetStream(cu->blas, cu->stream)) != CUBLAS_STATUS_SUCCESS ||
        /* full float32 for F32 weights (no TF32): the CPU is the reference */
        (bs = cublasSetMathMode(cu->blas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS) {
        rc = hy_err(err, HY_EIO, "cuda backend: cuBLAS setup failed (status %d)", (int)bs);
        goto out;
    }
    /* without its own workspace cuBLAS could allocate inside a capture;
     * if even 32 MiB is missing, graphs still work for matvec steps */
    if (cudaMalloc(&cu->blas_ws, HY_CUDA_BLAS_WORKSPACE) == cudaSuccess) {
        if (cublasSetWorkspace(cu->blas, cu->blas_ws, HY_CUDA_BLAS_WORKSPACE) !=
            CUBLAS_STATUS_SUCCESS) {
            cudaFree(cu->blas_ws);
            cu->blas_ws = NULL;
        }
    } else {
        cudaGetLastError();
        cu->blas_ws = NULL;
    }
    cu->g_off = g_off;
    *out = be;
    be = NULL;
out:
    if (be)
        hy_cuda_free(be);
    return rc;
}
