/*
 * cpu_impl.h - private to the CPU backend: its context (thread pool, scratch
 * buffers, the paged KV pool, the sticky error) and the entry points that
 * cpu.c puts into the method table but matmul.c and attention.c implement.
 */
#ifndef HY_CPU_IMPL_H
#define HY_CPU_IMPL_H

#include "backend/backend.h"
#include "backend/layout.h"
#include "backend/cpu/threadpool.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/attn_flash.h"

/* Largest n_rot the rope op takes (the held rows copy that many
 * freq_factors / 2). */
#define HY_ROPE_MAX_ROT 1024

typedef struct {
    hy_pool_t *pool;
    int n_threads;
    bool act8;          /* hy_backend_opts_t.act_bits == 8 */
    bool huge_weights;  /* hy_backend_opts_t.weights_memory == HY_WEIGHTS_HUGE_PAGES */

    /* First error an op hit since the last `status` call (ops return void). */
    int err_code;
    char err_msg[HY_ERR_LEN];

    /* matmul: activations converted to the weight's vec_dot_type */
    void *act;          /* [n_tok][act row bytes] */
    size_t act_size;
    size_t mm_x_tile_bytes; /* a tile's activation rows, at most (hy_cpu_mm_x_tile_bytes) */

    /* paged KV store; page p of layer l holds, for each kv head h and slot
     * s, the K row at k_pages[l] + p*k_page_bytes + (h*page_tokens + s)*k_row_bytes
     * (V likewise): one head's keys of one page are contiguous.  Layer l
     * has the pages of its group (hy_kv_layout_group): page ids are the
     * group's. */
    hy_kv_layout_t kv;  /* kv.layer_swa points at kv_layer_swa */
    uint8_t *kv_layer_swa; /* [kv.n_layers] or NULL: no sliding group */
    int kv_ready;
    uint8_t **k_pages;  /* [kv.n_layers] */
    uint8_t **v_pages;  /* [kv.n_layers] */
    size_t k_row_bytes, v_row_bytes;    /* head_dim(_v) elements of kv.type */
    size_t k_page_bytes, v_page_bytes;  /* n_head_kv * page_tokens rows */

    /* block-sparse attention (kv.sparse.block_pages > 0; sparse_attn.c):
     * every full page's compressed key, per full-group layer: page p, kv
     * head h at sp_keys[l] + ((size_t)p * n_head_kv + h) * head_dim_k
     * floats, written when the page's last slot is (or the tiers write
     * the page back); NULL for sliding layers and when sparse is off.
     * Block keys are the sequences' (hy_batch_seq_t.sp_keys). */
    float **sp_keys;

    /* attention: per-thread float scratch */
    float *attn_scratch;
    size_t attn_scratch_floats; /* per thread */

    /* recurrent state (recurrent.c): st_slots slots of st_slot_floats
     * floats in one zeroed arena; recurrent layer l's conv window lives at
     * st + slot*st_slot_floats + st_conv_off[l] (st_conv_floats[l] floats),
     * its recurrent state at ... + st_rec_off[l] (st_rec_floats[l] floats). */
    float *st;
    int32_t st_layers, st_slots;
    int64_t st_slot_floats;
    int64_t *st_conv_off, *st_rec_off;       /* [st_layers] (one allocation) */
    int64_t *st_conv_floats, *st_rec_floats; /* [st_layers] */

    /* moe (moe.c): router logits, gathered rows and expert activations */
    void *moe_buf;
    size_t moe_buf_size;

    /* rope: the cos/sin rows of the last positions seen, per rope setting
     * (cpu.c hy_cpu_rope_rows): every layer of a step rotates q and k at
     * the same positions, so one computation serves them all */
    struct hy_cpu_rope_rows {
        hy_rope_t r;          /* the setting; r.freq_factors points at ff or is NULL */
        float ff[HY_ROPE_MAX_ROT / 2]; /* a copy of the setting's freq_factors */
        int32_t n_tok;        /* rows held */
        int32_t *pos;         /* [n_tok] their positions */
        float *cs, *sn;       /* [n_tok][r.n_rot / 2] */
        size_t cap_tok, cap_f; /* room: positions, floats in cs and in sn */
        uint64_t used;        /* when last used (the older one is refilled) */
    } rope_rows[2];
    uint64_t rope_clock;
} hy_cpu_t;

/* Records the first error (later ones are dropped: the first is the cause). */
void hy_cpu_fail(hy_cpu_t *cpu, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Grows a 64-byte aligned scratch buffer; 0 on success. */
int hy_cpu_scratch(void **buf, size_t *size, size_t need);

/* matmul.c */
/* The kernels a matmul of weight type t runs: hy_quant_traits_a8's where
 * the backend was asked for 8-bit activations, else the default. */
const hy_quant_traits_t *hy_cpu_mm_traits(const hy_cpu_t *cpu, hy_dtype_t t);
hy_quant_tile_fn_t hy_cpu_mm_tile(const hy_cpu_t *cpu, hy_dtype_t t);
/* Bytes of cpu->act a matmul of n_tok rows by w asks for with every
 * thread (0: none). */
uint64_t hy_cpu_matmul_act_bytes(const hy_cpu_t *cpu, const hy_weight_t *w, int32_t n_tok);
void hy_cpu_matmul(hy_backend_t *be, const hy_weight_t *w, const float *x, float *y,
                   int32_t n_tok);
/* Bytes of activation rows a prefill tile takes: 5/8 of this core's L2
 * (sysconf), the weight panels and output rows having the rest; 256 KB
 * where the C library does not say.  Tiles never change a result's bits,
 * only its speed (Zen 4, 1 MB: 640 KB, at least 128 token rows of every
 * Gemma 3 matrix, +4.5% on its pp512 against the fixed 96 KB before; the
 * cap is matmul.c's HY_MM_X_TILE_ROWS). */
size_t hy_cpu_mm_x_tile_bytes(void);
void hy_cpu_matmul_n(hy_backend_t *be, const hy_weight_t *const *w, int32_t n_w, const float *x,
                     float *const *y, int32_t n_tok);
/* Checks that a weight is something matmul / get_rows can use. */
int hy_cpu_weight_check(const hy_weight_t *w, char *err);
/* hy_backend_i.weight_rows16: float weights the AVX-512 GEMM multiplies. */
bool hy_cpu_weight_rows16(hy_backend_t *be, const hy_weight_t *w);

/* attention.c */
int hy_cpu_kv_init(hy_backend_t *be, const hy_kv_layout_t *layout, char *err);
void hy_cpu_kv_free(hy_cpu_t *cpu);
/* The attention's part of hy_backend_i.work_bytes. */
int hy_cpu_attn_work_bytes(const hy_cpu_t *cpu, const hy_work_shape_t *w, uint64_t *bytes,
                           char *err);
void hy_cpu_attention(hy_backend_t *be, int32_t kv_layer, const hy_batch_t *batch,
                      const float *q, const float *k, const float *v, float *out,
                      const hy_attn_params_t *p);
/* Pin the attention kernels' ISA level (tests); HY_EUNSUPPORTED above the
 * CPU's. */
int hy_cpu_attn_set_isa(hy_isa_t isa);
/* The level they run at: the pin, else the CPU's best for attention (AVX2
 * on CPUs that split 512-bit operations, hy_cpu_avx512_split). */
hy_isa_t hy_cpu_attn_isa(void);
/* Key positions per split of a query's attention reduction (attn_flash.h):
 * a lone decoding sequence's keys are shared among threads in whole
 * splits.  512: two threads share keys from 1,024 on, and the fold between
 * splits costs one output row per 512 keys (about 0.2% of their
 * arithmetic). */
#define HY_ATTN_SPLIT 512
/* Set the keys per split of the attention reduction (tests: short
 * sequences that cross splits; 0: one split); a multiple of the kernels'
 * 64-position tile, else HY_EINVAL.  Changes bits past a split: set it
 * before a sequence's first token. */
int hy_cpu_attn_set_split(int32_t tokens);

/* tiercopy.c: pages and slots as host bytes, the host's memory */
/* Block-sparse attention's glue (sparse_attn.c).  map/unmap: the key
 * arrays of a layout (NULL: out of memory; off: an array of NULLs).
 * keys_batch: the keys of the pages the batch's k/v rows just filled, in
 * layer (its sequences' page lists), and the keys of the complete blocks
 * its sequences' block keys lack.  keys_page: page of group's layers
 * after the tiers wrote it back.  tokens: unit f's tokens (all at
 * positions >= min_tokens) of sequence sq through the chosen blocks, the
 * choice made by the query heads gh0..gh0+group-1 of the unit's KV head
 * g; sscr holds hy_cpu_sparse_scratch(cpu, max_pos, group, staged) floats, staged
 * when any sequence of the batch has out units. */
float **hy_cpu_sparse_map(const hy_kv_layout_t *lay);
void hy_cpu_sparse_unmap(float **keys, const hy_kv_layout_t *lay);
void hy_cpu_sparse_keys_batch(hy_cpu_t *cpu, int32_t layer, const hy_batch_t *b);
/* Whether sequence s of b has room in its block keys (if it keeps them)
 * for every block its tokens complete in layer: HY_OK, or HY_ERANGE with
 * the message in err. */
int hy_cpu_sparse_check(const hy_cpu_t *cpu, int32_t layer, const hy_batch_t *b, int32_t s,
                        char *err);
void hy_cpu_sparse_keys_page(hy_cpu_t *cpu, int32_t group, int32_t page);
size_t hy_cpu_sparse_scratch(const hy_cpu_t *cpu, int32_t max_pos, int32_t group, bool staged);
void hy_cpu_sparse_tokens(const hy_cpu_t *cpu, int32_t layer, const hy_batch_seq_t *sq,
                          const hy_attn_flash_t *f,
                          int32_t g, int32_t gh0, int32_t group,
                          void (*kernel)(const hy_attn_flash_t *f, float *scratch),
                          float *scr, float *sscr);

int hy_cpu_kv_page_read(hy_backend_t *be, int32_t group, int32_t page, void *dst,
                        char *err);
int hy_cpu_kv_page_write(hy_backend_t *be, int32_t group, int32_t page, const void *src,
                         char *err);
int hy_cpu_state_read(hy_backend_t *be, int32_t slot, void *dst, char *err);
int hy_cpu_state_write(hy_backend_t *be, int32_t slot, const void *src, char *err);
int hy_cpu_mem_info(hy_backend_t *be, uint64_t *free_bytes, uint64_t *total_bytes, char *err);

/* recurrent.c: state slots, short conv and small element-wise ops */
int hy_cpu_state_init(hy_backend_t *be, const hy_state_layout_t *layout, char *err);
void hy_cpu_state_free(hy_cpu_t *cpu);
void hy_cpu_state_clear(hy_backend_t *be, int32_t slot);
void hy_cpu_state_copy(hy_backend_t *be, int32_t dst, int32_t src);
/* For recurrent kernels: checks that rec_layer exists, that every sequence
 * of the batch has a valid slot, and that the layer keeps exactly conv_need
 * conv-window floats and rec_need state floats (-1: not checked).  Records
 * an error naming op and returns false otherwise. */
bool hy_cpu_state_check(hy_cpu_t *cpu, const char *op, int32_t rec_layer,
                        const hy_batch_t *batch, int64_t conv_need, int64_t rec_need);
/* The block forms (gdn, ssd, lightning) place a sequence's rows by its
 * n_past: false (and the backend failed with a message) when one is negative. */
bool hy_cpu_past_check(hy_cpu_t *cpu, const char *op, const hy_batch_t *batch);
static inline float *hy_cpu_state_conv(hy_cpu_t *cpu, int32_t slot, int32_t rec_layer)
{
    return cpu->st + slot * cpu->st_slot_floats + cpu->st_conv_off[rec_layer];
}
static inline float *hy_cpu_state_rec(hy_cpu_t *cpu, int32_t slot, int32_t rec_layer)
{
    return cpu->st + slot * cpu->st_slot_floats + cpu->st_rec_off[rec_layer];
}
void hy_cpu_conv1d(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch,
                   const float *x, int32_t x_stride, const hy_weight_t *w,
                   const hy_weight_t *bias, float *y, int32_t channels, bool silu);
void hy_cpu_unary(hy_backend_t *be, hy_unary_t op, const float *x, float *y, size_t n);
void hy_cpu_mul(hy_backend_t *be, float *x, const float *y, size_t n);
void hy_cpu_l2norm(hy_backend_t *be, float *x, int32_t n_rows, int32_t dim, int32_t stride,
                   float eps, float scale);
/* A float copy of a small weight (vector or conv kernel) of n elements: the
 * data itself when F32, else converted into a malloc'd *tmp the caller
 * frees.  NULL after recording an error (wrong size, type, no memory). */
const float *hy_cpu_weight_floats(hy_cpu_t *cpu, const char *op, const hy_weight_t *w,
                                  int64_t n, float **tmp);

/* gdn.c: Gated DeltaNet (kernel in gdn_kern.h) and per-row scaling */
void hy_cpu_gdn(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch,
                const float *q, const float *k, const float *v, int32_t qkv_stride,
                const float *g, const float *beta, float *o, const hy_gdn_params_t *p);
void hy_cpu_scale_rows(hy_backend_t *be, float *x, const float *s, int32_t n_rows,
                       int32_t dim);

/* ssd.c: Mamba-2 SSD scan (kernel in ssd_kern.h) and gated grouped RMSNorm */
void hy_cpu_ssd(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch, const float *x,
                int32_t x_stride, const float *dt, int32_t dt_stride,
                const hy_weight_t *dt_bias, const hy_weight_t *A, const float *B,
                const float *C, int32_t bc_stride, const hy_weight_t *D, float *y,
                const hy_ssd_params_t *p);
void hy_cpu_group_rmsnorm_gated(hy_backend_t *be, float *y, const float *z, int32_t z_stride,
                                const hy_weight_t *w, int32_t n_rows, int32_t dim,
                                int32_t group_size, float eps);

/* moe.c */
/* Bytes of cpu->moe_buf a MoE layer of n_tok tokens asks for. */
size_t hy_cpu_moe_scratch_bytes(const hy_moe_t *m, int32_t n_tok, int32_t n_embd);
void hy_cpu_moe(hy_backend_t *be, const hy_moe_t *moe, const float *x, float *y,
                int32_t n_tok, int32_t n_embd);

/* Split [0, n) evenly: the part of thread ith of nth. */
static inline void hy_cpu_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi)
{
    int64_t per = (n + nth - 1) / nth;
    *lo = HY_MIN(n, per * ith);
    *hi = HY_MIN(n, *lo + per);
}

#endif
