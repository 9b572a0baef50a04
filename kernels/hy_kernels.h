/*
 * hy_kernels.h - the C interface of the CUDA kernels in the kernels/ .cu files.  The
 * CUDA backend (src/backend/cuda/) checks every argument on the host and
 * then calls one of these launchers; they only configure a grid, launch on
 * `stream` and return cudaGetLastError() as an int (0 = cudaSuccess), so no
 * kernel ever sees a shape the host did not validate.  All pointers are
 * device pointers unless a comment says otherwise.
 */
#ifndef HY_KERNELS_H
#define HY_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "hy_moe_route.h" /* hy_mr_params_t, shared with the routing kernel */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *hy_cuk_stream_t; /* == cudaStream_t */

/* Largest head size the attention kernels hold in registers (8 per thread). */
#define HY_CUK_ATTN_MAX_HEAD 1024
/* Rows of y one matvec launch handles per token: n_tok <= this takes the
 * custom quantized kernels, larger batches go through cuBLAS. */
#define HY_CUK_MATVEC_MAX_TOK 8

/* The decode kernel's KV parts: a row of `len` keys is cut into parts of
 * hy_cuk_part_keys(len) keys (HY_CUK_PART_KEYS, more once that would make
 * over HY_CUK_MAX_PARTS parts), hy_cuk_parts(len) of them.  The cut depends
 * on the row alone, never on the batch, so a token's result is the same in
 * any batch; a launch has the parts its longest row needs (hy_cuk_parts is
 * non-decreasing) and a shorter row's parts past its own are empty.  Parts
 * this short put a single sequence on many multiprocessors: one part is
 * one block, latency-bound over its keys. */
#define HY_CUK_PART_KEYS 64
#define HY_CUK_MAX_PARTS 64
#ifdef __CUDACC__
#define HY_CUK_HD static inline __host__ __device__
#else
#define HY_CUK_HD static inline
#endif
HY_CUK_HD int32_t hy_cuk_part_keys(int32_t len)
{
    const int32_t k = (len + HY_CUK_MAX_PARTS - 1) / HY_CUK_MAX_PARTS;
    return k > HY_CUK_PART_KEYS ? k : HY_CUK_PART_KEYS;
}
HY_CUK_HD int32_t hy_cuk_parts(int32_t len)
{
    return len < 1 ? 1 : (len + hy_cuk_part_keys(len) - 1) / hy_cuk_part_keys(len);
}

/* ---- weights (kernels/hy_quant.cu) ---------------------------------------- */
/* 1 if `type` (hy_dtype_t) has device kernels. */
int hy_cuk_type_ok(int type);
/* y[t][r] = sum_i W[r][i] x[t][i] for rows [0, n_rows), 1 <= n_tok <= 8. */
int hy_cuk_matvec(int type, const void *w, size_t row_bytes, int64_t ne0, int64_t n_rows,
                  const float *x, float *y, int32_t n_tok, hy_cuk_stream_t stream);
/* out[i][0..ne0) = row (ids ? ids[i] : i) of W as float (n rows). */
int hy_cuk_dequant_f32(int type, const void *w, size_t row_bytes, int64_t ne0,
                       const int32_t *ids, int64_t n, float *out, hy_cuk_stream_t stream);
/* out[i][0..ne0) = row i of W as half (n rows), the cuBLAS tiles. */
int hy_cuk_dequant_f16(int type, const void *w, size_t row_bytes, int64_t ne0, int64_t n,
                       void *out, hy_cuk_stream_t stream);
/* out[r][i] = (half)(x[r][i] / scale[r]) for n_rows rows of ne0: scale[r] is
 * the power of two that puts the row's largest |x| in [2^14, 2^15) (1 for a
 * zero or non-finite row), so no finite activation overflows half; the
 * product's row r is multiplied by scale[r] afterwards. */
int hy_cuk_f32_to_f16_rows(const float *x, void *out, float *scale, int32_t n_rows, int64_t ne0,
                           hy_cuk_stream_t stream);

/* ---- element-wise and row ops (kernels/hy_ops.cu) ------------------------- */
enum { HY_CUK_SWIGLU, HY_CUK_ADD, HY_CUK_MUL, HY_CUK_SCALE, HY_CUK_SILU, HY_CUK_SIGMOID,
       HY_CUK_SOFTPLUS, HY_CUK_RELU_SQR, HY_CUK_GELU_TANH, HY_CUK_TANH };
/* x = op(x, y) element-wise: SWIGLU x = silu(y) * z; ADD x += y; MUL x *= y;
 * SCALE x *= s; unary ops x = f(y). */
int hy_cuk_eltwise(int op, float *x, const float *y, const float *z, float s, size_t n,
                   hy_cuk_stream_t stream);
/* y = x / rms(x) (* w) per row; w may be NULL. */
int hy_cuk_rmsnorm(const float *x, const float *w, float *y, int32_t n_rows, int32_t dim,
                   float eps, hy_cuk_stream_t stream);
/* x[r][0..dim) *= scale / max(||x_r||, eps), rows `stride` floats apart. */
int hy_cuk_l2norm(float *x, int32_t n_rows, int32_t dim, int32_t stride, float eps,
                  float scale, hy_cuk_stream_t stream);
/* x[r][c] *= s[r] */
int hy_cuk_scale_rows(float *x, const float *s, int32_t n_rows, int32_t dim,
                      hy_cuk_stream_t stream);
/* x[r][c] += b[c] */
int hy_cuk_add_bias(float *x, const float *b, int32_t n_rows, int32_t dim,
                    hy_cuk_stream_t stream);
/* dst[i][0..n) = src[rows[i]][0..n) (dst and src must not overlap) */
int hy_cuk_gather_rows(float *dst, const float *src, const int32_t *rows, int32_t n_rows,
                       int32_t n, hy_cuk_stream_t stream);
/* y[rows[i]][c] += wt[i] * x[i][c] for i < n_rows (rows distinct) */
int hy_cuk_scatter_add(float *y, const float *x, const int32_t *rows, const float *wt,
                       int32_t n_rows, int32_t n, hy_cuk_stream_t stream);
/* Mamba-2 gated grouped RMSNorm, see hy_backend_i.group_rmsnorm_gated. */
int hy_cuk_group_rmsnorm_gated(float *y, const float *z, int32_t z_stride, const float *w,
                               int32_t n_rows, int32_t dim, int32_t group, float eps,
                               hy_cuk_stream_t stream);
/* RoPE in place; pos [n_tok], inv_freq [n_rot/2] (double) on the device. */
int hy_cuk_rope(float *x, int32_t n_tok, int32_t n_head, int32_t head_dim, const int32_t *pos,
                int neox, int32_t n_rot, const double *inv_freq, double freq_scale,
                double mscale, float ext_factor, double corr_lo, double corr_hi,
                hy_cuk_stream_t stream);

/* ---- paged attention (kernels/hy_attn.cu) ---------------------------------- */
typedef struct {
    uint8_t *k_pool, *v_pool;    /* this layer's pages */
    size_t k_row_bytes, v_row_bytes, k_page_bytes, v_page_bytes;
    int32_t kv_type;             /* HY_DTYPE_F32, F16 or Q8_0 */
    int32_t page_tokens, n_head, n_head_kv, head_dim, head_dim_v;
    int32_t window;
    float scale, softcap;
    const int32_t *pos;          /* [n_tok] */
    const int32_t *tok_seq;      /* [n_tok] sequence of each token */
    const int32_t *page_off;     /* [n_seqs] offset of its pages in `pages` */
    const int32_t *pages;        /* concatenated page lists */
} hy_cuk_attn_t;
/* Store k/v rows of n_tok tokens into their pages. */
int hy_cuk_kv_write(const hy_cuk_attn_t *a, const float *k, const float *v, int32_t n_tok,
                    hy_cuk_stream_t stream);
/* out = softmax(q K^T) V per token and head for the n_tok batch rows
 * toks[0..n_tok) (device; NULL = rows 0..n_tok-1), the KV length split into
 * n_split parts whose partial results (part: n_tok*n_head*n_split*(2+hdv)
 * floats) are merged at the end.  The decode kernel; n_tok <= 65535. */
int hy_cuk_attention(const hy_cuk_attn_t *a, const float *q, float *out, const int32_t *toks,
                     int32_t n_tok, int32_t n_split, float *part, hy_cuk_stream_t stream);

/* One block of the prefill (flash) kernel, for each kv head g: rows
 * r0 .. r0+tile_rows-1 (those below n*group) of sequence `seq`, where row f
 * is batch row first + f/group with query head g*group + f%group
 * (group = n_head/n_head_kv), i.e. the query heads sharing kv head g for
 * consecutive tokens.  kmin..kmax bounds the key positions any of its rows
 * may see (window and causal limits), so the block streams only those. */
typedef struct {
    int32_t seq;        /* index into hy_cuk_attn_t.page_off */
    int32_t first, n;   /* the sequence's batch rows first .. first+n-1 */
    int32_t r0;         /* first row of the tile */
    int32_t kmin, kmax; /* key positions, kmin <= kmax */
    int32_t pad[2];     /* 32 bytes: one aligned load per block */
} hy_cuk_attn_tile_t;
/* Rows per tile the flash kernel uses for these head sizes, or 0 when it
 * cannot take them (a head over 256, or too little shared memory on the
 * current device): then the caller uses hy_cuk_attention. */
int hy_cuk_flash_rows(int32_t head_dim, int32_t head_dim_v);
/* out rows of every tile (n_tiles x n_head_kv blocks); tile_rows must be
 * hy_cuk_flash_rows(head_dim, head_dim_v).  Float32 throughout. */
int hy_cuk_attention_flash(const hy_cuk_attn_t *a, const float *q, float *out,
                           const hy_cuk_attn_tile_t *tiles, int32_t n_tiles, int32_t tile_rows,
                           hy_cuk_stream_t stream);

/* ---- recurrent layers (kernels/hy_rec.cu) ---------------------------------- */
/* Per sequence s: rows first[s] .. first[s]+n[s]-1, state at st + slot[s]*slot_floats. */
typedef struct {
    float *st;
    int64_t slot_floats, conv_off, rec_off;
    const int32_t *first, *n, *slot;   /* [n_seqs] */
    const int32_t *n_past;             /* [n_seqs] positions before the batch */
    int32_t n_seqs;
    int32_t min_n, max_n;              /* shortest and longest n[s] (host copies) */
} hy_cuk_seqs_t;
/* Causal depthwise conv with carried window; w [C][K], bias [C] or NULL. */
int hy_cuk_conv1d(const hy_cuk_seqs_t *sq, const float *x, int32_t x_stride, const float *w,
                  const float *bias, float *y, int32_t C, int32_t K, int silu,
                  hy_cuk_stream_t stream);
/* Gated DeltaNet (see hy_gdn_params_t).  With chunk > 1, sequences of two
 * rows or more take the chunked form (kernels/hy_rec_chunk.h: chunks of
 * min(chunk, 64) rows counted from the sequence's first row, as the CPU)
 * when d_k <= 256 and the device can give a block its shared memory; the
 * others (decode), and every sequence when chunk <= 1, the exact
 * token-by-token recurrence. */
int hy_cuk_gdn(const hy_cuk_seqs_t *sq, const float *q, const float *k, const float *v,
               int32_t stride, const float *g, const float *beta, float *o, int32_t n_k_heads,
               int32_t n_v_heads, int32_t d_k, int32_t d_v, int v_tiled, int32_t chunk,
               hy_cuk_stream_t stream);
/* Mamba-2 SSD (see hy_ssd_params_t); D may be NULL.  Chunked as hy_cuk_gdn
 * for sequences of four rows or more when d_state <= 256. */
int hy_cuk_ssd(const hy_cuk_seqs_t *sq, const float *x, int32_t x_stride, const float *dt,
               int32_t dt_stride, const float *dt_bias, const float *A, const float *B,
               const float *C, int32_t bc_stride, const float *D, float *y, int32_t n_head,
               int32_t head_dim, int32_t n_group, int32_t d_state, int32_t chunk,
               hy_cuk_stream_t stream);

/* Lightning attention (see hy_lightning_params_t and backend/lightning.h):
 * chunk 1 the token-by-token recurrence, chunk >= 2 the blocked form of
 * kernels/hy_lightning.h for every sequence (decode included), needing
 * hy_la_smem_floats(d, chunk) floats of shared memory per block; decay
 * [n_head][chunk + 1] on the device. */
int hy_cuk_lightning(const hy_cuk_seqs_t *sq, const float *q, const float *k, const float *v,
                     int64_t row_stride, int64_t head_stride, const float *decay, float *o,
                     int32_t n_head, int32_t d, int32_t chunk, hy_cuk_stream_t stream);

/* ---- mixture of experts (kernels/hy_moe.cu) ------------------------------------ */
/* Routes n_tok tokens (logits [n_tok][n_expert], bias [n_expert] or NULL)
 * into sel / w [n_tok][n_used]: hy_mr_route with one warp per token. */
int hy_cuk_moe_route(const hy_mr_params_t *m, const float *logits, const float *bias,
                     int32_t *sel, float *w, int32_t n_tok, hy_cuk_stream_t stream);
/* For each pair j < n_pairs (1..65535): y0[j][r] = sum_i W0[sel[j]][r][i] *
 * x[j / x_div][i] for r < n_rows, where expert e's matrix starts at
 * w0 + e * expert_bytes (rows row_bytes apart, ne0 wide); the same with
 * w1 -> y1 when w1 is not NULL (same type and strides).  Pairs that share an
 * expert read its rows once per 8. */
int hy_cuk_moe_matvec(int type, const void *w0, float *y0, const void *w1, float *y1,
                      size_t expert_bytes, size_t row_bytes, int64_t ne0, int64_t n_rows,
                      const float *x, int32_t x_div, const int32_t *sel, int32_t n_pairs,
                      int32_t n_expert, hy_cuk_stream_t stream);
/* y[t][c] = sum_k w[t][k] * d[t*n_used+k][c], slots added in ascending
 * expert id (the CPU's order); n_tok <= 65535, n_used <= HY_MR_MAX_USED. */
int hy_cuk_moe_combine(float *y, const float *d, const int32_t *sel, const float *w,
                       int32_t n_tok, int32_t n_used, int32_t n_embd, hy_cuk_stream_t stream);

#ifdef __cplusplus
}
#endif

#endif
