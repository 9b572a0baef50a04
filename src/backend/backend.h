/*
 * backend.h - the operations a model's forward pass needs, as a method table
 * plus a context (ggml-backend style), so the model code is written once and
 * runs on the CPU backend (threads + AVX2/AVX-512) or the CUDA backend.
 *
 * Memory model: activations are float32 buffers the backend allocates
 * (hy_backend_i.alloc); weights are hy_weight_t that the backend prepared
 * from the mapped GGUF (upload for CUDA; nothing for CPU).  Every op is
 * synchronous from the caller's point of view as far as later ops are
 * concerned; `sync` waits for results to be readable on the host.
 *
 * Batches are ragged: tokens of several sequences in one call, each with its
 * own position and its own KV pages (DESIGN §2-3).
 */
#ifndef HY_BACKEND_H
#define HY_BACKEND_H

#include "common/hy.h"
#include "common/dtype.h"

typedef struct hy_backend hy_backend_t;

/* How a weight's rows lie in its data.  ROWS: as in the file, row r at
 * data + r*row_bytes.  ROWS16 (every matrix's rows a multiple of 16), of
 * the float types F32/F16/BF16: each run of 16 rows (16*row_bytes bytes
 * where the 16 rows were) holds element i of its row j at position
 * i*16 + j, so one vector load reads element i of 16 rows.  A CPU that
 * multiplies one token by float weights then keeps 16 rows in the lanes of
 * one FMA, where the file's layout needs one FMA per row (issue 16: F16
 * decode at half llama.cpp's speed).  The loader rearranges the bytes when
 * it holds a private copy of the file and the backend asks for it
 * (hy_backend_i.weight_rows16); hy_weight_row reads a row of either.
 * ROWS16 of the quantized types (every one with CPU kernels: Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, IQ4_NL, the K-quants Q2_K..Q6_K and IQ4_XS; rows a
 * multiple of 16): each run of 16 rows holds, for each block b (the
 * K-quants': super-block), 16 blocks' bytes at b * 16 * (block bytes): the
 * fields of the file's block for the 16 rows together, in weight.c's
 * order - e.g. Q5_1's f16 d (2 bytes a row: 32), f16 m (32), 32 high bits
 * (4 bytes a row: 64), then each 4-byte word of qs (64) - row r's part of
 * a field at r times its size, so that one load gives a field of 16 rows
 * in the lanes where the AVX-512 kernels multiply them (the rows16 tiles
 * of qmm_avx2.c and, for Q4_1, quant_avx512.c; issue 16's few-token
 * matmuls, whose time went to transposing the file's rows), or, as two
 * loads of 8 rows each, the AVX2 level's (qmm_avx2.c: every type). */
typedef enum {
    HY_WLAYOUT_ROWS = 0,
    HY_WLAYOUT_ROWS16 = 1,
} hy_weight_layout_t;

/* A weight matrix or vector.  ne[0] is the row length (input features), ne[1]
 * the number of rows (output features); vectors have ne[1] = 1.  The
 * matmul convention is y[t][o] = sum_i W[o][i] * x[t][i]. */
typedef struct {
    hy_dtype_t type;
    int64_t ne[4];
    size_t row_bytes;  /* bytes of one row of ne[0] elements */
    const void *data;  /* host data (into the GGUF mapping) */
    void *dev;         /* backend-side copy or NULL (CPU uses data) */
    const char *name;  /* tensor name, for messages */
    uint8_t layout;    /* hy_weight_layout_t of data */
} hy_weight_t;

/* Row r of w (either layout) into dst, row_bytes bytes, as the file has it. */
void hy_weight_row(const hy_weight_t *w, int64_t r, void *dst);

/* Whether HY_WLAYOUT_ROWS16 describes weights of type t. */
bool hy_weight_rows16_type(hy_dtype_t t);

/* Rearranges rows (a multiple of 16) rows of row_bytes bytes of type t
 * (hy_weight_rows16_type) at data into HY_WLAYOUT_ROWS16, in place.  HY_OK,
 * HY_EINVAL (data untouched) for another type, or HY_ENOMEM (data
 * untouched) without 16 rows of scratch. */
int hy_weight_to_rows16(void *data, hy_dtype_t type, int64_t rows, size_t row_bytes);

/* One sequence's part of a batch.  Its tokens are rows first .. first+n-1
 * of the batch, at positions n_past .. n_past+n-1.  Its KV pages come in
 * two lists (common/kvgroup.h): the full-attention group's and, when the
 * KV layout has a sliding-window group, that group's, where blocks older
 * than every token's window may have gone back to the pool (id -1). */
typedef struct {
    int32_t first;         /* first token row of this sequence in the batch */
    int32_t n;             /* tokens of this sequence in the batch (>= 1) */
    int32_t n_past;        /* tokens already in its KV cache before this batch */
    const int32_t *pages;  /* full-group KV page ids covering positions 0 .. n_past+n-1 */
    int32_t n_pages;       /* >= ceil((n_past+n) / page_tokens) */
    int32_t state_slot;    /* recurrent-state slot, -1 if the model has none */
    const int32_t *swa_pages; /* sliding-group page ids by block (NULL: no such group) */
    int32_t n_swa_pages;      /* >= ceil((n_past+n) / page_tokens) when there is one */
    /* Block-sparse attention's block keys of this sequence, in the
     * caller's memory so that a block's key outlives its pages' ids
     * (NULL: the backend averages each block's page keys per token).  For
     * the j-th full-group KV layer and KV head h, block b's key (head_dim_k
     * floats) is at sp_keys + ((j * n_head_kv + h) * sp_cap + b) *
     * head_dim_k, so one query group's choice reads its keys in a row.
     * Blocks below sp_valid hold their keys; the attention op writes the
     * complete blocks from sp_valid on from its page keys (the same bits
     * as averaging them per token), and the caller raises sp_valid once
     * the step has run (hy_kv_sparse_blocks_valid). */
    float *sp_keys;
    int32_t sp_cap;           /* blocks sp_keys has room for */
    int32_t sp_valid;
    /* pages[0 .. n_checked) are known to be ids of the full group's pool:
     * the runner checked them when it gave them out and keeps the count
     * while the list is unchanged, so the attention op checks only the
     * rest instead of a million-token list per layer (0: check all) */
    int32_t n_checked;
    /* Pages that are not hot (block-sparse attention with a hot window,
     * runner.h): pages[i] = HY_PAGE_OUT(u) for such a page, unit u of the
     * out store (engine/outstore.h) whose bytes are kv_page_read's layout
     * of the full group, in host memory or in its spill file, which the
     * backend reads while the step runs.  Only a sparse token's chosen
     * blocks may be out; a dense token, a block whose key is still to be
     * written, or a batch position never is.  NULL: every page is hot. */
    struct hy_out_view *out;
    /* NULL, or where the attention op adds the blocks its sparse tokens
     * read (one per block, layer and KV head): [0] those from the out store,
     * [1] of those the ones with a page read from the spill file, [2] all,
     * the token's own block included */
    uint64_t *out_reads;
} hy_batch_seq_t;

/* What the attention op reads an out unit u through.  slot[u] >= 0: its
 * bytes are at ram + slot[u] * unit_bytes (warm); -1: only in the spill
 * file fd, at u * unit_bytes (cold).  slot[u] may turn >= 0 while a step
 * runs (the store's I/O thread brings a unit up, its bytes complete
 * before it publishes the slot): read it with hy_out_read.  The op marks
 * every unit it reads in ref[u] (1; the store's clock clears it); a cold
 * one it reads with pread, marks 2 the first time and appends to wanted[]
 * (while there is room: the store brings those up to RAM after the step,
 * on its I/O thread, while the next step runs).  Every byte read from the
 * file is checked before it is used: the file holds a unit as runs of
 * run_bytes (one KV head's K or V rows of a page, or whole units), run i
 * of unit u with CRC-32C crc[u * (unit_bytes / run_bytes) + i].  A failed
 * read or a run whose bytes are not what was written sets failed_unit /
 * failed_errno (the first wins; 0: a short read, EBADMSG: a checksum
 * mismatch, -1: a read that is not whole runs) and the store fails the
 * step. */
typedef struct hy_out_view {
    const uint8_t *ram;
    const int32_t *slot;    /* atomic: the store's I/O thread publishes */
    uint64_t unit_bytes;
    uint64_t run_bytes;     /* divides unit_bytes */
    const uint32_t *crc;
    int fd;
    uint8_t *ref;
    int32_t *wanted;
    int32_t wanted_cap;
    int32_t n_wanted;       /* atomic */
    int32_t failed_unit;    /* -1: none (atomic) */
    int32_t failed_errno;   /* an errno, or as above */
    uint64_t disk_read_bytes; /* atomic: bytes the op read from the file */
} hy_out_view_t;

/* Where n bytes of out unit u at off lie: in RAM when the unit is warm,
 * else read from the spill file into dst and checked (off and n whole
 * runs).  A failed read or check leaves zeros in dst and tells the store
 * (failed_unit), which fails the step. */
const uint8_t *hy_out_read(hy_out_view_t *ov, int32_t u, size_t off, uint8_t *dst, size_t n);
/* One read of hy_out_reads: n bytes of unit u at off (whole runs), read
 * into dst when the unit is cold; at: where they lie after the call. */
typedef struct {
    int32_t unit;
    size_t off, n;
    uint8_t *dst;
    const uint8_t *at;
} hy_out_req_t;
/* Bytes between two file reads that hy_out_reads reads and drops rather
 * than make a second system call: about what a call costs in copying. */
#define HY_OUT_GAP_MAX 4096
/* hy_out_read of each of r[0..n), with the same checks and the same
 * failures per read, but the cold reads that follow one another in r and
 * in the file (each after the last, at most HY_OUT_GAP_MAX bytes apart)
 * are one preadv: a token's chosen block is consecutive units, read in
 * one call instead of two per page. */
void hy_out_reads(hy_out_view_t *ov, hy_out_req_t *r, int32_t n);
/* Whether the n bytes at p (whole runs of run_bytes) have the CRC-32Cs
 * crc[0 ..): what the op and the store's I/O thread check a read with. */
bool hy_out_runs_match(const uint32_t *crc, const uint8_t *p, size_t n, uint64_t run_bytes);

/* The page-list entry of a page that is not hot (r >= 0), and back. */
#define HY_PAGE_OUT(r) (-2 - (int32_t)(r))
#define HY_PAGE_OUT_REF(id) (-2 - (int32_t)(id))

typedef struct {
    int32_t n_tokens;
    const int32_t *token;  /* [n_tokens] token ids */
    const int32_t *pos;    /* [n_tokens] position of each token in its sequence */
    int32_t n_seqs;
    const hy_batch_seq_t *seqs; /* [n_seqs], rows in increasing order */
} hy_batch_t;

/* Geometry of the paged KV store, fixed when the backend is set up.  KV
 * layers are in the full-attention group unless layer_swa puts them in the
 * sliding-window group; each group has its own pool of pages (a page of a
 * group holds page_tokens positions of every layer of the group), and the
 * attention op of a sliding layer reads the batch's swa_pages. */
/* Block-sparse attention over the full-attention group's layers
 * ([attention] sparse = block; backend/cpu/sparse_attn.h): a token at a
 * position >= min_tokens of a full (window 0) layer attends to its sink
 * blocks, its local blocks, the top-k other blocks by compressed key, and
 * its own block, not to every position.  block_pages 0: every layer dense.
 * With topp > 0 the top-k is a floor: a token whose top-k blocks hold less
 * than topp of its query group's block probability mass takes more, best
 * first, until they do - if max_blocks of them can; if not, its attention
 * is too flat for any affordable choice to be near exact and it reads the
 * top-k (so the count varies per token: the backend reports it,
 * hy_batch_seq_t.out_reads[2]). */
typedef struct {
    int32_t block_pages;  /* pages per block (sparse_block_tokens / page_tokens); 0 = off */
    int32_t topk;         /* blocks chosen by score per KV head (with topp: at least) */
    int32_t sink_blocks;  /* the sequence's first blocks, always read */
    int32_t local_blocks; /* the blocks just before a token's own, always read */
    int32_t min_tokens;   /* positions below it attend densely */
    float topp;           /* 0 = off, else the mass the chosen blocks reach, 0..1 */
    int32_t max_blocks;   /* with topp: the most blocks chosen by score, >= topk */
} hy_kv_sparse_t;

/* The blocks before its own (block cur) that one query group of a sparse
 * token reads with a top-k choice: the sink blocks, the local blocks and
 * the top-k of the rest, each once, never more than there are (with top-p,
 * topk = max_blocks gives the most it may read).  The tests hold the
 * choice and the backend's count of blocks read to it. */
static inline int32_t hy_kv_sparse_blocks_before(int32_t cur, int32_t sink_blocks,
                                                 int32_t local_blocks, int32_t topk)
{
    int32_t sink = HY_MIN(HY_MAX(sink_blocks, 0), cur);
    int32_t local = HY_MAX(cur - HY_MAX(local_blocks, 0), sink);

    return HY_MIN(cur, sink + (cur - local) + HY_MAX(topk, 0));
}

/* The most blocks a token chooses by score: the top-k, or with top-p on
 * top of a top-k the cap (the choice in backend/cpu/sparse_attn.c and
 * the pages a token's scratch holds both take it from here). */
static inline int32_t hy_kv_sparse_scored(int32_t topk, float topp, int32_t max_blocks)
{
    return topp > 0 && topk > 0 ? HY_MAX(topk, max_blocks) : topk;
}

/* The complete blocks of a sequence at n_tokens positions: what its block
 * keys hold once a step up to there has run. */
static inline int32_t hy_kv_sparse_blocks_valid(const hy_kv_sparse_t *sp, int32_t page_tokens,
                                                int32_t n_tokens)
{
    return sp->block_pages > 0 ? n_tokens / (sp->block_pages * page_tokens) : 0;
}

typedef struct {
    int32_t n_layers;     /* attention layers that keep KV (both groups) */
    int32_t n_head_kv;
    int32_t head_dim_k;
    int32_t head_dim_v;
    int32_t page_tokens;  /* tokens per page */
    int32_t n_pages;      /* pages in the full group's pool */
    hy_dtype_t type;      /* F32, F16 or Q8_0 */
    int32_t n_swa_pages;  /* pages in the sliding group's pool (0: no such group) */
    const uint8_t *layer_swa; /* [n_layers] 1: KV layer in the sliding group; NULL: none
                                 is (only read by kv_init) */
    hy_kv_sparse_t sparse;    /* block-sparse attention of the full group's layers; a
                                 backend without it refuses block_pages > 0 in kv_init */
} hy_kv_layout_t;

typedef enum {
    HY_ROPE_NORM = 0,  /* pairs (2i, 2i+1): llama */
    HY_ROPE_NEOX = 2,  /* pairs (i, i + n_rot/2): qwen2/3, gpt-neox */
} hy_rope_mode_t;

typedef struct {
    hy_rope_mode_t mode;
    int32_t n_rot;        /* rotated dims per head (<= head_dim; rest passed through) */
    float freq_base;
    float freq_scale;     /* 1 / linear scaling factor */
    /* YaRN (rope.scaling.type = yarn); ext_factor 0 disables */
    float ext_factor, attn_factor, beta_fast, beta_slow;
    int32_t n_ctx_orig;
    const float *freq_factors; /* [n_rot/2] llama3 rope_freqs or NULL (host) */
} hy_rope_t;

typedef struct {
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;     /* q/k head size */
    int32_t head_dim_v;
    float scale;          /* usually 1/sqrt(head_dim) */
    int32_t window;       /* sliding window in tokens, 0 = full */
    float softcap;        /* 0 = off */
} hy_attn_params_t;

/* ---- recurrent layers ---------------------------------------------------
 * A state slot holds one sequence's whole recurrent state: for every
 * recurrent layer its conv window ((d_conv-1) x channels floats, oldest
 * first) and its recurrent state matrix.  Slots are addressed by the
 * batch's hy_batch_seq_t.state_slot; recurrent layers by their index among
 * the model's recurrent layers (rec_layer).  State is always float32. */
typedef struct {
    int32_t n_layers;           /* recurrent layers */
    int32_t n_slots;
    const int64_t *conv_floats; /* [n_layers] conv-window floats per slot */
    const int64_t *rec_floats;  /* [n_layers] recurrent-state floats per slot */
} hy_state_layout_t;

typedef enum {
    HY_UNARY_SILU = 0,
    HY_UNARY_SIGMOID,
    HY_UNARY_SOFTPLUS,   /* x > 20 ? x : log1p(exp(x)), as torch */
    HY_UNARY_RELU_SQR,   /* max(x,0)^2 (nemotron_h MLP) */
    HY_UNARY_GELU_TANH,  /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Gemma GeGLU) */
    HY_UNARY_TANH,       /* tanh(x) (Gemma's final logit soft-capping) */
} hy_unary_t;
#define HY_UNARY_LAST HY_UNARY_TANH

/* Gated DeltaNet (qwen3next / qwen35): per v-head h, state S (d_k x d_v):
 * S <- exp(g_t) S; u = S^T k_t; S <- S + k_t (beta_t (v_t - u))^T; o_t = S^T q_t.
 * q/k/v are rows of a packed buffer (row stride in floats), q and k already
 * L2-normalised and q scaled by 1/sqrt(d_k).  v-head h reads k-head
 * (v_tiled ? h % n_k_heads : h / (n_v_heads / n_k_heads)). */
typedef struct {
    int32_t n_k_heads, n_v_heads, d_k, d_v;
    bool v_tiled;
    int32_t chunk;   /* prefill chunk length (64); 1 = exact recurrent form */
} hy_gdn_params_t;

/* Mamba-2 SSD (granitehybrid, nemotron_h): per head h with head_dim P and
 * state N, group g = h / (n_head / n_group):
 * S_h <- exp(dt A_h) S_h + dt x_t B_t^T;  y_t = S_h C_t + D_h x_t. */
typedef struct {
    int32_t n_head, head_dim, n_group, d_state;
    int32_t chunk;   /* prefill chunk length; 1 = exact recurrent form */
} hy_ssd_params_t;

/* Lightning attention (MiniMax-Text-01 / M1, the linear layers of SALA):
 * per head h with decay rate s_h > 0 (lambda_h = exp(-s_h)) and state S
 * (head_dim x head_dim, S[i][j]: key index i, value index j):
 *   S <- lambda_h S + k_t v_t^T;  o_t = S^T q_t
 * (no scaling or normalisation of q/k inside the op).
 * chunk 1: exactly that recurrence, token by token; the slot keeps S.
 * chunk C >= 2: the blocked form, with blocks at absolute positions
 * [bC, (b+1)C) of each sequence: a token's output is computed from the
 * state at its block's start plus the block's earlier rows, and S absorbs
 * a block only once it is complete.  The slot keeps S and the current
 * block's rows (keys and values), so decode and prefill run the same
 * arithmetic and the output is bitwise the same however the sequence is
 * cut into steps (backend/lightning.h gives the order and the sizes). */
typedef struct {
    int32_t n_head, head_dim;
    int32_t chunk;   /* 1 = exact recurrence; 2..HY_LIGHTNING_MAX_CHUNK = blocked */
} hy_lightning_params_t;

/* Mixture of experts FFN weights (3-D tensors have ne[2] = n_expert).
 * Routing per token: p = softmax(logits) or sigmoid(logits); choose the
 * n_expert_used largest p + exp_bias (bias only for selection); weights =
 * chosen p, divided by (their sum + norm_eps) if norm_topk, times
 * weights_scale.  qwen3next/qwen35moe: softmax, norm_topk per config,
 * norm_eps 0.  granitehybrid (softmax over the top-k logits) is the same
 * as softmax + norm_topk, norm_eps 0.  lfm2moe: sigmoid + expert bias,
 * norm_topk, norm_eps 1e-6, routed_scaling_factor. */
typedef struct {
    hy_weight_t gate_inp;   /* (n_embd, n_expert) router */
    hy_weight_t exp_bias;   /* (n_expert) selection bias or absent */
    hy_weight_t gate_exps;  /* (n_embd, n_ff_exp, n_expert) */
    hy_weight_t up_exps;    /* (n_embd, n_ff_exp, n_expert) */
    hy_weight_t down_exps;  /* (n_ff_exp, n_embd, n_expert) */
    int32_t n_expert, n_expert_used, n_ff_exp;
    bool softmax_gating;    /* softmax over all experts (else sigmoid) */
    bool norm_topk;         /* renormalise the chosen weights to sum 1 */
    float weights_scale;    /* multiply the chosen weights (1 or 0 = off) */
    float norm_eps;         /* added to the sum when renormalising (lfm2moe 1e-6) */
} hy_moe_t;

/* A step's shape as the ops see it: what the optional method work_bytes
 * sizes their scratch from (the plan fills it from the model). */
typedef struct {
    const hy_kv_layout_t *kv; /* the attention layers' layout; NULL or no layers: none */
    int32_t n_head;           /* their most query heads */
    int32_t n_tokens;         /* the step's tokens */
    int32_t n_ctx;            /* its farthest position is below this */
    bool staged;              /* some sequence has an out arena (a hot window) */
    const hy_weight_t *mats;  /* [n_mats] the matrices matmul multiplies by (data unused) */
    int32_t n_mats;
    int64_t most_vector;      /* elements of the largest vector weight (norms, biases) */
    int64_t most_conv;        /* elements of the largest conv1d kernel (K x channels) */
    int32_t n_rot;            /* the most rotated dimensions (0: no RoPE) */
    const hy_gdn_params_t *gdn; /* [n_gdn] each GDN layer's parameters */
    int32_t n_gdn;
    const hy_ssd_params_t *ssd; /* [n_ssd] each Mamba-2 layer's */
    int32_t n_ssd;
    const hy_moe_t *moe;      /* [n_moe] each MoE layer's (n_embd wide) */
    int32_t n_moe, n_embd;
} hy_work_shape_t;

/* ---- sampling on the device (optional method `sample`) ------------------
 * One row of logits -> one token as engine/sampler.c picks it for a request
 * without logit_bias and penalties (those stay on the host: such a request
 * is sampled there): top_k -> top_p -> min_p on temperature-1
 * probabilities, then a draw with weights exp((l - max) / temperature)
 * whose uniform is hy_sample_uniform(seed, counter) (backend/cuda/sample.h).
 * temperature 0 or top_k 1 is greedy (ties -> lowest id).  logprobs are
 * log-softmax at temperature 1 over the whole row, as the host reports. */
#define HY_SAMPLE_MAX_TOP 20
typedef struct {
    float temperature;  /* 0..2; 0 = greedy */
    int32_t top_k;      /* >= 0; 0 = off */
    float top_p;        /* (0, 1]; 1 = off */
    float min_p;        /* 0..1; 0 = off */
    uint64_t seed;      /* the request's seed */
    uint64_t counter;   /* which draw of the request (e.g. tokens generated so far) */
    int32_t n_logprobs; /* 0..HY_SAMPLE_MAX_TOP alternatives to report */
} hy_sample_params_t;

typedef struct {
    int32_t token;      /* -1: the row holds NaN or its max is +-inf */
    float logprob;      /* of token */
    int32_t n_top;      /* min(n_logprobs, n_vocab) */
    int32_t top_ids[HY_SAMPLE_MAX_TOP];     /* best first, ties -> lowest id */
    float top_logprobs[HY_SAMPLE_MAX_TOP];
} hy_sample_result_t;

struct hy_backend_i {
    const char *name;
    void (*free)(hy_backend_t *be);

    /* Prepare a weight for use (upload / repack).  CPU: may be a no-op. */
    int (*weight_init)(hy_backend_t *be, hy_weight_t *w, char *err);

    /* Whether w (not yet prepared) should be rearranged into
     * HY_WLAYOUT_ROWS16 before weight_init, where the loader can write its
     * bytes.  NULL: never. */
    bool (*weight_rows16)(hy_backend_t *be, const hy_weight_t *w);

    /* Whether the model's file should be read into huge pages of host
     * memory rather than mapped (hy_model_load): the CPU computes from
     * those bytes, and they stream faster from huge pages.  NULL: mapped. */
    bool (*weights_huge_pages)(hy_backend_t *be);

    /* Set up (or replace) the paged KV store. */
    int (*kv_init)(hy_backend_t *be, const hy_kv_layout_t *layout, char *err);

    /* float buffers for activations */
    float *(*alloc)(hy_backend_t *be, size_t n_floats);
    void (*release)(hy_backend_t *be, float *p);
    /* host <-> backend buffer copies (CPU: memcpy) */
    void (*upload)(hy_backend_t *be, float *dst, const float *src, size_t n);
    void (*download)(hy_backend_t *be, float *dst, const float *src, size_t n);
    void (*sync)(hy_backend_t *be);

    /* y[n_tok][w->ne[1]] = x[n_tok][w->ne[0]] W^T */
    void (*matmul)(hy_backend_t *be, const hy_weight_t *w, const float *x,
                   float *y, int32_t n_tok);
    /* y[i] = x w[i]^T for i < n_w: matrices that read the same x (q, k
     * and v; gate and up), each as matmul computes it, bit for bit.  The
     * CPU converts x once for consecutive matrices of one activation type
     * (the conversion was up to a tenth of a prefill).  NULL: callers use
     * matmul per matrix (hy_backend_matmul_n). */
    void (*matmul_n)(hy_backend_t *be, const hy_weight_t *const *w, int32_t n_w,
                     const float *x, float *const *y, int32_t n_tok);
    /* y[i] = row ids[i] of w, dequantized (embedding lookup) */
    void (*get_rows)(hy_backend_t *be, const hy_weight_t *w, const int32_t *ids,
                     float *y, int32_t n);
    /* y = x / rms(x) * w per row of dim floats; w may be NULL (no weight).
     * x == y allowed. */
    void (*rmsnorm)(hy_backend_t *be, const float *x, const hy_weight_t *w,
                    float *y, int32_t n_rows, int32_t dim, float eps);
    /* In place RoPE on x[n_tok][n_head][head_dim] (row stride = n_head*head_dim). */
    void (*rope)(hy_backend_t *be, float *x, int32_t n_tok, int32_t n_head,
                 int32_t head_dim, const int32_t *pos, const hy_rope_t *rope);
    /* Store k/v rows of this batch into the layer's KV pages at each token's
     * position, then causal attention for every token over its sequence's
     * positions 0..pos.  q [n_tok][n_head*head_dim], k [n_tok][n_head_kv*head_dim],
     * v [n_tok][n_head_kv*head_dim_v], out [n_tok][n_head*head_dim_v]. */
    void (*attention)(hy_backend_t *be, int32_t kv_layer, const hy_batch_t *batch,
                      const float *q, const float *k, const float *v, float *out,
                      const hy_attn_params_t *p);
    /* y = silu(gate) * up, n floats (y may alias gate) */
    void (*swiglu)(hy_backend_t *be, const float *gate, const float *up, float *y,
                   size_t n);
    /* y = gelu_tanh(gate) * up, n floats (y may alias gate): unary's
     * GELU-tanh and mul in one pass, with their bits.  NULL: callers run
     * the two (hy_backend_geglu). */
    void (*geglu)(hy_backend_t *be, const float *gate, const float *up, float *y,
                  size_t n);
    /* x += y, n floats */
    void (*add)(hy_backend_t *be, float *x, const float *y, size_t n);
    /* x *= s, n floats */
    void (*scale)(hy_backend_t *be, float *x, float s, size_t n);
    /* Copy rows: dst[i] = src[rows[i]], each row n floats. */
    void (*gather_rows)(hy_backend_t *be, float *dst, const float *src,
                        const int32_t *rows, int32_t n_rows, int32_t n);
    /* x[n_tok][dim] += b (bias vector broadcast over rows) */
    void (*add_bias)(hy_backend_t *be, float *x, const hy_weight_t *b,
                     int32_t n_tok, int32_t dim);

    /* ---- recurrent layers and MoE (hybrid architectures) ---- */
    /* Allocate n_slots state slots of the given layout (all zero). */
    int (*state_init)(hy_backend_t *be, const hy_state_layout_t *layout, char *err);
    /* Zero a slot (a new sequence starts from empty state). */
    void (*state_clear)(hy_backend_t *be, int32_t slot);
    /* Copy a whole slot (prefix-cache checkpoints and their restore). */
    void (*state_copy)(hy_backend_t *be, int32_t dst, int32_t src);
    /* Causal depthwise conv over channels, per sequence, carrying the
     * window in the sequence's slot: y_t[c] = sum_i w[c][i] x_{t-K+1+i}[c]
     * (+ bias[c]), then SiLU if silu.  x rows have stride x_stride floats;
     * y is dense [n_tok][channels].  w is (d_conv, channels). */
    void (*conv1d)(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch,
                   const float *x, int32_t x_stride, const hy_weight_t *w,
                   const hy_weight_t *bias, float *y, int32_t channels, bool silu);
    /* y = op(x), n floats (y may alias x) */
    void (*unary)(hy_backend_t *be, hy_unary_t op, const float *x, float *y, size_t n);
    /* x[i] *= y[i], n floats */
    void (*mul)(hy_backend_t *be, float *x, const float *y, size_t n);
    /* Per-row L2 normalisation of n_rows rows of dim floats (row stride
     * stride floats), x / max(||x||, eps), times scale; in place. */
    void (*l2norm)(hy_backend_t *be, float *x, int32_t n_rows, int32_t dim,
                   int32_t stride, float eps, float scale);
    /* Gated DeltaNet core for one layer (see hy_gdn_params_t): q/k/v rows
     * of stride qkv_stride floats, g and beta [n_tok][n_v_heads], output
     * o [n_tok][n_v_heads*d_v].  Uses and updates the slots' rec state. */
    void (*gdn)(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch,
                const float *q, const float *k, const float *v, int32_t qkv_stride,
                const float *g, const float *beta, float *o, const hy_gdn_params_t *p);
    /* Mamba-2 SSD scan for one layer: x [n_tok][n_head*head_dim] (stride
     * x_stride), dt [n_tok][n_head] raw (stride dt_stride): the op applies
     * softplus(dt + dt_bias) itself, so dt can be read straight out of the
     * in_proj output; A [n_head] (negative), B, C [n_tok][n_group*d_state]
     * (stride bc_stride), D [n_head] or NULL, y [n_tok][n_head*head_dim]. */
    void (*ssd)(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch,
                const float *x, int32_t x_stride, const float *dt, int32_t dt_stride,
                const hy_weight_t *dt_bias, const hy_weight_t *A, const float *B,
                const float *C, int32_t bc_stride, const hy_weight_t *D, float *y,
                const hy_ssd_params_t *p);
    /* Lightning attention core for one layer (see hy_lightning_params_t):
     * head h of token row r reads q at q + r*row_stride + h*head_stride
     * (k, v likewise); decay is the layer's table (F32 {chunk + 1, n_head}:
     * decay[h][n] = lambda_h^n, built once by hy_lightning_decays); output
     * o [n_tok][n_head*head_dim], not overlapping q/k/v.  Uses and updates
     * the slots' rec state, which must hold hy_lightning_state_floats(p)
     * floats per slot. */
    void (*lightning)(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch,
                      const float *q, const float *k, const float *v, int32_t row_stride,
                      int32_t head_stride, const hy_weight_t *decay, float *o,
                      const hy_lightning_params_t *p);
    /* y[n_tok][n_embd] = MoE FFN (SwiGLU experts) of x[n_tok][n_embd]. */
    void (*moe)(hy_backend_t *be, const hy_moe_t *moe, const float *x, float *y,
                int32_t n_tok, int32_t n_embd);
    /* x[r][c] *= s[r] for n_rows rows of dim floats: one scalar per row
     * (qwen3next/qwen35moe shared-expert gate sigmoid(w . h) per token). */
    void (*scale_rows)(hy_backend_t *be, float *x, const float *s, int32_t n_rows,
                       int32_t dim);
    /* Mamba-2's gated grouped RMSNorm, in place on y [n_rows][dim]:
     * y <- y * silu(z), then each group of group_size channels is divided
     * by its own rms (eps inside the root), then times w (dim floats).
     * z rows have stride z_stride floats. */
    void (*group_rmsnorm_gated)(hy_backend_t *be, float *y, const float *z,
                                int32_t z_stride, const hy_weight_t *w, int32_t n_rows,
                                int32_t dim, int32_t group_size, float eps);

    /* ---- memory accounting (planner) ---- */
    /* Bytes one KV page (all kv->n_layers layers, K and V; the group
     * assignment is not looked at) and one state slot (all recurrent
     * layers) occupy in this backend for these layouts; either layout may
     * be NULL (its size is then 0).  kv_init allocates exactly, per group,
     * that group's pages times the page bytes of that group's layers, and
     * state_init n_slots * slot_bytes, so the planner (asking once per
     * group) quotes the allocator's own numbers. */
    int (*mem_sizes)(hy_backend_t *be, const hy_kv_layout_t *kv,
                     const hy_state_layout_t *st, uint64_t *page_bytes,
                     uint64_t *slot_bytes, char *err);
    /* Optional (NULL: the backend cannot say).  Host memory the ops
     * allocate for themselves at most in a step of the shape w (each
     * allocation as hy_host_alloc_bytes counts it): the attention's
     * per-thread scratch, sparse choice (O(context)) and split states,
     * matmul's converted activations, the recurrent scans' and MoE's
     * scratch, RoPE rows, weights converted to floats.  The plan's
     * "op scratch". */
    int (*work_bytes)(hy_backend_t *be, const hy_work_shape_t *w, uint64_t *bytes, char *err);
    /* Bytes of KV pages and of state slots allocated right now. */
    void (*mem_allocated)(hy_backend_t *be, uint64_t *kv_bytes, uint64_t *state_bytes);

    /* Ops return void, so one that gets input it cannot honour (token id out
     * of range, KV position beyond the sequence's pages, unsupported weight
     * type) records the first such error and zeroes its output.  status
     * returns HY_OK or that error (message into err) and clears it; the
     * engine checks it once per forward pass. */
    int (*status)(hy_backend_t *be, char *err);

    /* The kernel this backend runs for op ("matmul" for weight w,
     * "attention" at head size head_dim, "gdn", "ssd", "conv"), written
     * into buf (at most n bytes), for the start-up log line that makes a
     * silent fallback to a slower path visible.  May be NULL. */
    void (*kernel_name)(hy_backend_t *be, const char *op, const hy_weight_t *w,
                        int32_t head_dim, char *buf, size_t n);

    /* ---- optional (NULL: not provided) ---- */
    /* Bracket one forward pass of batch b with n_out logit rows (the
     * runner's step).  The CUDA backend captures the step's launches into a
     * CUDA graph cached by batch shape and launches that, instead of each
     * kernel, when the shape repeats.  step_end returns false when the
     * step's work did NOT run (a capture could not complete; nothing was
     * executed and its results must be ignored): the caller then runs the
     * same forward pass again, which the backend executes eagerly. */
    void (*step_begin)(hy_backend_t *be, const hy_batch_t *b, int32_t n_out);
    bool (*step_end)(hy_backend_t *be);
    /* Samples rows 0..n_rows-1 of logits (a backend buffer, n_vocab floats
     * per row) with p[i] for row i (see hy_sample_params_t) into host
     * res[i].  HY_OK, or HY_EINVAL / HY_ERANGE for bad parameters, or the
     * backend's error; message in err.  A row with NaN gets token -1. */
    int (*sample)(hy_backend_t *be, const float *logits, int32_t n_rows, int32_t n_vocab,
                  const hy_sample_params_t *p, hy_sample_result_t *res, char *err);

    /* ---- the tiers below the hot pool (optional; NULL: no warm/cold tier) ----
     * A KV page of a page group (HY_KV_FULL / HY_KV_SWA; page is an id of
     * that group's pool) as host bytes: the K page of every KV layer of the
     * group in layer order, then their V pages (mem_sizes' page_bytes for a
     * layout of the group's layers), the same order on every backend, so a
     * page one backend demoted another of the same geometry reads back.  A
     * state slot likewise (slot_bytes).  The copy is complete on return.
     * HY_EINVAL / HY_ERANGE for a group, page or slot the pools do not
     * have, or the device's error. */
    int (*kv_page_read)(hy_backend_t *be, int32_t group, int32_t page, void *dst, char *err);
    int (*kv_page_write)(hy_backend_t *be, int32_t group, int32_t page, const void *src,
                         char *err);
    int (*state_read)(hy_backend_t *be, int32_t slot, void *dst, char *err);
    int (*state_write)(hy_backend_t *be, int32_t slot, const void *src, char *err);
    /* Free and total bytes of the memory the hot tier (KV pages, state
     * slots) is allocated in: the device's (cudaMemGetInfo) with CUDA, the
     * host's MemAvailable / MemTotal on the CPU.  [cache] hot_mb = 0 sizes
     * the hot tier from it. */
    int (*mem_info)(hy_backend_t *be, uint64_t *free_bytes, uint64_t *total_bytes, char *err);
    /* Host memory the device copies to and from at full speed (pinned with
     * CUDA), for the warm tier; NULL methods: ordinary pages. */
    void *(*host_alloc)(hy_backend_t *be, size_t bytes);
    void (*host_free)(hy_backend_t *be, void *p, size_t bytes);
};

struct hy_backend {
    const struct hy_backend_i *i;
    void *ctx;
};

typedef struct {
    int n_threads;  /* CPU: 0 = all cores */
    /* CPU: integer activations of the quantized matrix products.  16 (or
     * 0): hyserve's own, within ~1e-5 of a float dot (qmm.h, Q8_2L); 8:
     * ggml's single-level blocks (one int8 per element, ~1e-2 per dot, as
     * llama.cpp multiplies) where that is faster on this CPU
     * (hy_quant_traits_a8: Q4_1, Q5_0 and the K-quants Q4_K/Q5_K/Q6_K at
     * AVX-512, one dpbusd where 16 bits take two), 16 elsewhere.  The
     * CUDA backend takes only 16. */
    int act_bits;
    /* CPU: where the model's weights live.  HY_WEIGHTS_HUGE_PAGES (0, the
     * default): read into anonymous memory on transparent huge pages;
     * HY_WEIGHTS_MMAP: the file mapped as it is (shared with the page
     * cache, 4 KB pages).  Same bits either way.  The CUDA backend keeps
     * its weights on the device and maps the file. */
    int weights_memory;
} hy_backend_opts_t;

#define HY_WEIGHTS_HUGE_PAGES 0
#define HY_WEIGHTS_MMAP 1

int hy_backend_cpu_new(hy_backend_t **out, const hy_backend_opts_t *opts, char *err);

/* be's matmul_n, or its matmul once per matrix where it has none. */
static inline void hy_backend_matmul_n(hy_backend_t *be, const hy_weight_t *const *w,
                                       int32_t n_w, const float *x, float *const *y,
                                       int32_t n_tok)
{
    if (be->i->matmul_n) {
        be->i->matmul_n(be, w, n_w, x, y, n_tok);
        return;
    }
    for (int32_t k = 0; k < n_w; k++)
        be->i->matmul(be, w[k], x, y[k], n_tok);
}

/* gate = gelu_tanh(gate) * up: be's geglu, or unary then mul. */
static inline void hy_backend_geglu(hy_backend_t *be, float *gate, const float *up, size_t n)
{
    if (be->i->geglu) {
        be->i->geglu(be, gate, up, gate, n);
        return;
    }
    be->i->unary(be, HY_UNARY_GELU_TANH, gate, gate, n);
    be->i->mul(be, gate, up, n);
}

#endif
