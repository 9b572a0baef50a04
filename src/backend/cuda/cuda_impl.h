/*
 * cuda_impl.h - private to the CUDA backend: its context (stream, cuBLAS
 * handle, uploaded weights, device and host scratch, the paged KV pool and
 * the state-slot arena, the sticky error) and the entry points cuda.c puts
 * into the method table but cuda_ops.c implements.  The KV page and state
 * slot layouts are the CPU backend's (src/backend/cpu/mem.c), so the
 * planner's numbers and the kernels' addressing agree on both backends.
 */
#ifndef HY_CUDA_IMPL_H
#define HY_CUDA_IMPL_H

#include "backend/backend.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/graph.h"
#include "hy_kernels.h" /* kernels/, on the include path in CUDA builds */

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

/* One uploaded weight.  Copies are never shared by host address: a model
 * loaded after another may be mapped at the same address, and backend.h has
 * no weight release, so they live until the backend is freed. */
typedef struct {
    const void *data;
    size_t bytes;
    void *dev;
} hy_cuda_wbuf_t;

typedef struct {
    int device;
    cudaStream_t stream;      /* every launch and copy, in order; a blocking
                               * stream, so it also orders after the legacy
                               * stream's cudaMemcpy/cudaMemset */
    cublasHandle_t blas;

    int err_code;             /* first error since the last `status` */
    char err_msg[HY_ERR_LEN];

    hy_cuda_wbuf_t *wbufs;    /* [n_wbufs] uploaded weights */
    size_t n_wbufs, cap_wbufs;
    uint64_t weight_bytes;

    /* small per-op metadata (ids, positions, page lists): packed on the
     * host in hmeta, then one copy to meta */
    uint8_t *hmeta, *meta;
    size_t hmeta_size, meta_size;
    /* large batches: dequantized weight rows and activations as half */
    void *w16, *x16;
    size_t w16_size, x16_size;
    /* float scratch (attention partials, MoE buffers, gather staging) */
    float *fscr;
    size_t fscr_size;         /* bytes */

    /* paged KV: layer l's K pages (its group's pool, hy_kv_layout_group)
     * start at k_pool + kv_layer_page[l] * k_page_bytes */
    hy_kv_layout_t kv;     /* kv.layer_swa points at kv_layer_swa */
    uint8_t *kv_layer_swa; /* [kv.n_layers] or NULL: no sliding group */
    uint64_t *kv_layer_page; /* [kv.n_layers] first page of each layer in the pools */
    int kv_ready;
    uint8_t *k_pool, *v_pool;
    size_t k_row_bytes, v_row_bytes;
    uint64_t k_page_bytes, v_page_bytes;

    /* state slots: one arena of st_slots * st_slot_floats floats */
    float *st;
    int32_t st_layers, st_slots;
    int64_t st_slot_floats;
    int64_t *st_conv_off, *st_rec_off, *st_conv_floats, *st_rec_floats; /* one allocation */

    /* CUDA graphs (cuda.c, graph.h): the runner's step between step_begin
     * and step_end is captured, launched as one graph at its first host
     * synchronisation (download/sync/status/upload) and cached by shape.
     * While capturing, op metadata goes to distinct offsets of a fixed
     * pinned staging area (g_hmeta) copied by graph nodes to g_dmeta, so
     * every node still reads its own data when the graph runs. */
    hy_cuda_graph_cache_t graphs;
    hy_cuda_graph_entry_t *g_entry; /* shape of the step in progress */
    int g_state;                    /* HY_CUDA_STEP_* (cuda.c) */
    const char *g_why;              /* why the capture broke */
    bool g_off;                     /* HY_CUDA_GRAPHS=0, or every capture broke */
    uint32_t g_breaks_in_row;       /* broken captures since the last good one */
    uint8_t *g_hmeta, *g_dmeta;     /* pinned host / device staging, g_meta_size bytes */
    size_t g_meta_size, g_meta_used, g_meta_need;
    cudaEvent_t g_done;             /* recorded after each graph launch */
    void *blas_ws;                  /* cuBLAS workspace: no allocation inside a capture */
    /* device sampling (sample): per-row parameters and results */
    void *smp_dev;                  /* device: rows' params then results */
    void *smp_host;                 /* pinned: the same layout */
    size_t smp_size;
} hy_cuda_t;

/* Records the first error (later ones are dropped: the first is the cause). */
void hy_cuda_fail(hy_cuda_t *cu, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records a failed CUDA call or launch (rc != 0); returns rc == 0. */
bool hy_cuda_ok(hy_cuda_t *cu, const char *op, int rc);
/* Zeroes n floats of a device buffer (an op's output after an error). */
void hy_cuda_zero(hy_cuda_t *cu, float *p, size_t n);
/* Grows a device scratch buffer to `need` bytes; false after recording. */
bool hy_cuda_scratch(hy_cuda_t *cu, void **buf, size_t *size, size_t need, const char *op);

/* Packs n host arrays (16-byte aligned each) into one upload; dev[i]
 * receives the device address of part i.  False after recording. */
bool hy_cuda_meta(hy_cuda_t *cu, const char *op, int n, const void *const *parts,
                  const size_t *bytes, void **dev);

/* A weight used as n floats on the device: its own copy when F32, else a
 * converted cudaMalloc'd *tmp the caller cudaFree's.  first_row: only the
 * first row must hold n (rmsnorm / bias vectors, as the CPU checks).  NULL
 * after recording an error. */
const float *hy_cuda_weight_floats(hy_cuda_t *cu, const char *op, const hy_weight_t *w,
                                   int64_t n, bool first_row, float **tmp);

void hy_cuda_matmul(hy_backend_t *be, const hy_weight_t *w, const float *x, float *y,
                    int32_t n_tok);

/* tiercopy.c: pages and slots as host bytes, device memory, pinned memory */
int hy_cuda_kv_page_read(hy_backend_t *be, int32_t group, int32_t page, void *dst,
                        char *err);
int hy_cuda_kv_page_write(hy_backend_t *be, int32_t group, int32_t page, const void *src,
                         char *err);
int hy_cuda_state_read(hy_backend_t *be, int32_t slot, void *dst, char *err);
int hy_cuda_state_write(hy_backend_t *be, int32_t slot, const void *src, char *err);
int hy_cuda_mem_info(hy_backend_t *be, uint64_t *free_bytes, uint64_t *total_bytes, char *err);
void *hy_cuda_host_alloc(hy_backend_t *be, size_t bytes);
void hy_cuda_host_free(hy_backend_t *be, void *p, size_t bytes);

/* cuda_ops.c */
void hy_cuda_attention(hy_backend_t *be, int32_t kv_layer, const hy_batch_t *batch,
                       const float *q, const float *k, const float *v, float *out,
                       const hy_attn_params_t *p);
void hy_cuda_conv1d(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch,
                    const float *x, int32_t x_stride, const hy_weight_t *w,
                    const hy_weight_t *bias, float *y, int32_t channels, bool silu);
void hy_cuda_gdn(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch,
                 const float *q, const float *k, const float *v, int32_t qkv_stride,
                 const float *g, const float *beta, float *o, const hy_gdn_params_t *p);
void hy_cuda_ssd(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch,
                 const float *x, int32_t x_stride, const float *dt, int32_t dt_stride,
                 const hy_weight_t *dt_bias, const hy_weight_t *A, const float *B,
                 const float *C, int32_t bc_stride, const hy_weight_t *D, float *y,
                 const hy_ssd_params_t *p);
void hy_cuda_lightning(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch,
                       const float *q, const float *k, const float *v, int32_t row_stride,
                       int32_t head_stride, const hy_weight_t *decay, float *o,
                       const hy_lightning_params_t *p);
void hy_cuda_moe(hy_backend_t *be, const hy_moe_t *moe, const float *x, float *y,
                 int32_t n_tok, int32_t n_embd);

#endif
