/*
 * plan.h - the memory planner: for a model, a context length and a number of
 * concurrent sequences, how many bytes go to weights (by layer kind), to
 * attention KV pages (growing with the context) and to recurrent-state
 * slots (constant per sequence), next to what a dense model with the same
 * attention in every layer would need.  The runner sizes its pools with the
 * same layouts and the backend's own per-page / per-slot sizes, so the plan
 * is what really gets allocated.
 *
 * Sliding-window layers keep KV in their own page group (common/kvgroup.h)
 * whose pool holds, per sequence, the blocks its window and one running
 * chunk need, not the context: the plan quotes both pools and what one
 * sequence holds at a given length.
 */
#ifndef HY_KV_PLAN_H
#define HY_KV_PLAN_H

#include <stdio.h>

#include "common/config.h"
#include "common/kvgroup.h"
#include "model/model.h"
#include "ipc/pagetable.h"

#define HY_LAYER_KINDS 7
#define HY_PLAN_CHUNK 512 /* tokens per step hy_plan_make assumes (the runner's default) */

typedef struct {
    int32_t n_ctx, n_seqs, page_tokens;
    int32_t chunk;     /* tokens per step (max_batch_tokens): the sliding pages a running
                          chunk needs; 0 = HY_PLAN_CHUNK */
    hy_dtype_t kv_type;
    bool swa_full;     /* sliding layers keep every position too (llama.cpp's --swa-full) */
    hy_kv_sparse_t sparse; /* block-sparse attention (hy_plan_sparse; zeros: off) */
    int32_t hot_blocks;    /* each sequence's hot window in blocks (hy_plan_hot_window;
                              0: every page of a running sequence is hot) */
    uint64_t out_warm_bytes; /* with it, the out arena's pages in host RAM at most
                                ([cache] seq_warm_mb; the rest in a spill file); 0: all */
    int32_t out_pages;       /* the out arena's pages when the caller sizes it itself
                                (bench_sparse --out-pages); 0: n_seqs * out_seq_pages */
    int32_t max_outputs;     /* logit rows per step; 0: chunk (every token's) */
    /* measured by the caller (hy_plan_rss_bytes), 0: not measured: its
     * resident bytes before the model loaded, and what loading the model
     * (and its tokenizer) added */
    uint64_t image_bytes, model_bytes;
} hy_plan_opts_t;

typedef struct {
    int32_t n_ctx, n_seqs, page_tokens, chunk;
    hy_dtype_t kv_type;
    bool swa_full;

    int32_t n_layers[HY_LAYER_KINDS];          /* layers of each kind */
    uint64_t weight_bytes[HY_LAYER_KINDS];     /* tensors of blk.N of that kind */
    uint64_t weight_bytes_other;               /* embeddings, output, final norm */
    int32_t window[HY_LAYER_KINDS];            /* largest window of that kind (ATTN_SWA) */
    uint64_t kv_bytes_per_token[HY_LAYER_KINDS]; /* attention kinds only */
    uint64_t state_bytes_per_seq[HY_LAYER_KINDS]; /* recurrent kinds only */

    uint64_t page_bytes;     /* one KV page of the full group: its layers' K and V (every
                                attention layer when there is no sliding group) */
    uint64_t sparse_key_bytes; /* beside each full page with block-sparse attention: its
                                * compressed keys in every full layer (hot, never tiered;
                                * 0 without it).  Counted in kv_total and seq_kv_bytes */
    uint64_t sparse_seq_bytes; /* one sequence's block keys (ceil(n_ctx / block tokens)
                                * blocks, a key per full layer and KV head each; the
                                * runner allocates them whole): n_seqs of them are in
                                * kv_total, one in seq_kv_bytes */
    int32_t hot_blocks;      /* the hot window (0: none) */
    int32_t out_seq_pages;   /* with it, the full pages of one n_ctx sequence that live
                              * in the runner's out arena (host memory) */
    uint64_t out_total;      /* n_seqs of them: out_seq_pages * page_bytes each */
    int32_t out_warm_pages;  /* of which in host RAM (engine/outstore.h; all when the
                              * options do not limit it) */
    uint64_t out_ram;        /* those pages and the store's index; in kv_total */
    uint64_t out_run_bytes;  /* the store checks a page in runs of this size (a KV head's
                              * K or V rows of a layer: layout.h hy_kv_layout_out_run) */
    uint64_t out_file;       /* the spill file for the rest (every page's place: out_total;
                              * 0 when all are in RAM) */
    uint64_t slot_bytes;     /* one sequence's whole recurrent state */
    int32_t n_pages;         /* full group: n_seqs * ceil(n_ctx / page_tokens), or with a
                                hot window n_seqs * hy_plan_hot_pages */
    int32_t n_slots;         /* n_seqs, or 0 without recurrent layers */
    uint64_t weights_total, kv_total, state_total; /* kv_total: both page groups */

    /* the sliding group (swa_window 0: none; the sliding layers, if any,
     * keep every position in the full group) */
    int32_t swa_window;      /* the largest window of its layers */
    int32_t n_swa_kv_layers; /* its layers */
    uint64_t swa_page_bytes; /* one page of it */
    int32_t n_swa_pages;     /* n_seqs * hy_kv_swa_peak_blocks(window, page_tokens, chunk, n_ctx) */
    uint64_t seq_kv_bytes;   /* one sequence at n_ctx positions (hy_plan_seq_kv_bytes) */

    /* the process: the cache and the weights above, plus the working
     * memory of a step of chunk tokens and the measured program image
     * and model.  Each computed term comes from the size function its
     * allocator uses, every allocation as hy_host_alloc_bytes counts it. */
    int32_t max_outputs;       /* logit rows per step the activations hold */
    uint64_t fwd_bytes;        /* the forward pass's activations (model.h hy_fwd_bytes) */
    uint64_t op_work_bytes;    /* the backend's ops' own scratch at n_ctx
                                  (hy_backend_i.work_bytes; 0: the backend cannot say) */
    bool op_work_known;
    uint64_t runner_bytes;     /* the runner's step arrays, each sequence's page lists and
                                  its page table (hy_plan_runner_bytes) */
    uint64_t token_bytes;      /* the sequences' token ids: 4 bytes a position */
    uint64_t work_total;       /* the four */
    uint64_t cache_round_bytes; /* the cache's allocations rounded to pages (kv_total and
                                   state_total count exact bytes) */
    uint64_t image_bytes, model_bytes; /* measured (hy_plan_opts_t) */
    uint64_t process_total;    /* image + model (or weights when larger) + cache and its
                                  rounding + work; 0 when the image was not measured or
                                  the backend cannot size its ops' scratch */

    /* the same model with full attention (this model's attention config)
     * in every layer */
    uint64_t dense_page_bytes, dense_kv_total, dense_seq_kv_bytes;
} hy_plan_t;

/* The window of m's sliding group for a context of n_ctx: the largest
 * sliding window, or 0 (no group) when there is none, when it covers the
 * whole context anyway, or with swa_full. */
int32_t hy_plan_swa_window(const hy_model_t *m, int32_t n_ctx, bool swa_full);
/* KV layout of m's attention layers for pools of n_pages full-group and
 * n_swa_pages sliding-group pages; swa_window as hy_plan_swa_window says
 * (0: every KV layer in the full group).  layer_swa: [m->n_kv_layers]
 * storage the layout points at. */
/* [attention] (or `hyserve run`'s --sparse flags when cli) as the KV
 * layout's block-sparse settings for pages of page_tokens: zeros when
 * sparse is off; HY_EINVAL naming the key (or flag) when a size is not a
 * whole number of pages or blocks. */
int hy_plan_sparse(const hy_config_attention_t *a, int32_t page_tokens, bool cli,
                   hy_kv_sparse_t *out, char *err);

void hy_plan_kv_layout(const hy_model_t *m, int32_t page_tokens, int32_t n_pages,
                       int32_t n_swa_pages, int32_t swa_window, hy_dtype_t type,
                       uint8_t *layer_swa, hy_kv_layout_t *out);
/* State layout of m's recurrent layers; conv/rec must hold n_rec_layers. */
void hy_plan_state_layout(const hy_model_t *m, int32_t n_slots, int64_t *conv, int64_t *rec,
                          hy_state_layout_t *out);

/* Bytes of one page of each group of a KV layout (the backend's sizes of
 * a layout of that group's layers). */
int hy_plan_group_page_bytes(hy_backend_t *be, const hy_kv_layout_t *kv,
                             uint64_t page_bytes[HY_KV_GROUPS], char *err);
int hy_plan_make_opts(hy_plan_t *p, const hy_model_t *m, hy_backend_t *be,
                      const hy_plan_opts_t *o, char *err);
/* hy_plan_make_opts with chunks of HY_PLAN_CHUNK and sliding groups on. */
int hy_plan_make(hy_plan_t *p, const hy_model_t *m, hy_backend_t *be, int32_t n_ctx,
                 int32_t n_seqs, int32_t page_tokens, hy_dtype_t kv_type, char *err);
/* KV bytes one sequence holds with n_tokens positions computed and its
 * sliding pages trimmed to the window (what the engine leaves after each
 * step): ceil(n / page_tokens) full-group pages plus hy_kv_swa_blocks
 * sliding-group pages. */
uint64_t hy_plan_seq_kv_bytes(const hy_plan_t *p, int32_t n_tokens);

/* The hot tier's bytes ([cache] hot_mb, memory_fraction): hot_mb MiB when
 * set, else fraction of what is free where the backend allocates KV pages
 * and state slots (hy_backend_i.mem_info: the GPU's memory with CUDA, not
 * the host's).  HY_EUNSUPPORTED when hot_mb is 0 and the backend cannot
 * say; the backend's error when asking fails. */
int hy_plan_hot_bytes(hy_backend_t *be, uint64_t hot_mb, double fraction, uint64_t *out,
                      char *err);

/* One letter per layer kind, for the per-layer line of the plan:
 * A attention, S sliding window, G gated deltanet, M mamba2, C shortconv,
 * L lightning, - no mixer. */
char hy_plan_kind_letter(hy_layer_kind_t k);

/* Human-readable table or JSON object on f. */
void hy_plan_print(const hy_plan_t *p, const hy_model_t *m, FILE *f, bool json);

/* [cache] hot_tokens_per_seq (hot_tokens) as a hot window in blocks for
 * the sparse settings sp and steps of chunk tokens: 0 when hot_tokens is
 * 0; else it must be whole blocks, need block-sparse attention, reach
 * sparse_min_tokens (a dense token reads every page) and exceed the local
 * blocks and a step (a block is hashed for the prefix cache while hot).
 * HY_EINVAL naming the key (cli: `hyserve plan`'s --hot-tokens) otherwise. */
int hy_plan_hot_window(uint32_t hot_tokens, const hy_kv_sparse_t *sp, int32_t page_tokens,
                       int32_t chunk, bool cli, int32_t *hot_blocks, char *err);
/* [cache] seq_warm_mb (mb; cli: --seq-warm-mb) as the out arena's RAM in
 * bytes: 0 when mb is 0; else it needs a hot window and a directory for
 * the spill file (dir: [cache] disk_dir, --spill-dir).  HY_EINVAL naming
 * the key otherwise. */
int hy_plan_seq_warm(uint64_t mb, int32_t hot_blocks, const char *dir, bool cli,
                     uint64_t *bytes, char *err);
/* The full-group pages one running sequence holds with a hot window of
 * hot_blocks: its sink blocks, the window, the block being filled and the
 * pages a step of chunk tokens adds before its old blocks leave. */
/* Host bytes of an out store's index of n_units pages, n_warm of them in
 * RAM, each checked in runs (besides the pages): what engine/outstore.c
 * allocates. */
uint64_t hy_plan_out_index_bytes(int32_t n_units, int32_t n_warm, uint64_t runs);

/* Positions' page-list entries one sequence holds at most in a group: the
 * runner grows a list to this and no further. */
int32_t hy_plan_seq_list_pages(int32_t n_ctx, int32_t page_tokens);
/* Host memory of the runner's own allocations (engine/runner.c), each as
 * hy_host_alloc_bytes counts it: a step's tokens, positions, output rows
 * and per-sequence entries, its KV layout's group per layer, each
 * sequence's page lists at their longest (one per group; swa: a sliding
 * group) and the private page table of parameters pt. */
int hy_plan_runner_bytes(const hy_model_t *m, int32_t max_tokens, int32_t max_seqs,
                         int32_t n_ctx, int32_t page_tokens, const hy_pt_params_t *pt, bool swa,
                         uint64_t *bytes, char *err);
/* The most of this process's present mappings that can become resident
 * (/proc/self/smaps): file mappings at their size, the others at their
 * resident size; or 0 with err set.  Taken before and after loading the
 * model: the plan's program image and model. */
uint64_t hy_plan_image_bytes(char *err);

int32_t hy_plan_hot_pages(const hy_kv_sparse_t *sp, int32_t hot_blocks, int32_t page_tokens,
                          int32_t chunk);

#endif
