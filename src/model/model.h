/*
 * model.h - a loaded model: hyperparameters, the layer list with each
 * layer's kind, and its weights as backend tensors.  The architecture files
 * in src/model/arch/ fill this from GGUF metadata and tensors and provide the
 * forward pass; the KV manager reads each layer's kind to decide what it
 * needs (pages for attention, state slots for recurrent layers).
 */
#ifndef HY_MODEL_H
#define HY_MODEL_H

#include "common/hy.h"
#include "model/gguf.h"
#include "backend/backend.h"

typedef enum {
    HY_LAYER_ATTN_FULL = 0, /* softmax attention over the whole context */
    HY_LAYER_ATTN_SWA,      /* softmax attention over a sliding window */
    HY_LAYER_GDN,           /* gated delta net (linear attention) */
    HY_LAYER_MAMBA2,        /* Mamba-2 SSD */
    HY_LAYER_SHORTCONV,     /* gated short convolution */
    HY_LAYER_LIGHTNING,     /* lightning (linear) attention */
    HY_LAYER_NONE,          /* no mixer (MLP-only layer) */
} hy_layer_kind_t;

typedef enum {
    HY_FFN_DENSE = 0, /* SwiGLU */
    HY_FFN_MOE,
    HY_FFN_NONE,
} hy_ffn_kind_t;

const char *hy_layer_kind_name(hy_layer_kind_t k);

/* Most layers a model may have.  Loaders read per-layer key arrays into
 * fixed arrays of this many entries on their stack (16 KiB each): far above
 * any released model (Llama 3.1 405B has 126 layers), and a block_count
 * beyond it is refused by hy_model_load with the key's name. */
#define HY_MODEL_MAX_LAYERS 4096

typedef struct {
    hy_layer_kind_t kind;
    hy_ffn_kind_t ffn;
    int32_t kv_index;     /* index among KV-keeping layers, or -1 */
    int32_t n_head;
    int32_t n_head_kv;
    int32_t n_ff;
    /* ATTN_SWA: a token attends to the last `window` positions, its own
     * included; 0 for every other kind.  The KV pages of a sliding layer
     * are still kept for the whole sequence (the kernel masks to the
     * window); releasing what slid out is the page allocator's later job. */
    int32_t window;
    const hy_rope_t *rope; /* attention layers: the RoPE they use (m->rope or m->rope_swa) */

    hy_weight_t attn_norm;            /* (n_embd) */
    hy_weight_t wq, wk, wv, wo;       /* (n_embd, n_head*hd) (n_embd, n_kv*hd) x2 (n_head*hd, n_embd) */
    hy_weight_t bq, bk, bv;           /* biases (qwen2) or absent (data == NULL) */
    hy_weight_t q_norm, k_norm;       /* (head_dim) per-head RMSNorm (qwen3) or absent */
    hy_weight_t ffn_norm;             /* (n_embd) */
    hy_weight_t ffn_gate, ffn_up;     /* (n_embd, n_ff) */
    hy_weight_t ffn_down;             /* (n_ff, n_embd) */
    hy_weight_t attn_post_norm;       /* Gemma: (n_embd) norm of the attention output */
    hy_weight_t ffn_post_norm;        /* Gemma: (n_embd) norm of the FFN output */

    /* ---- recurrent mixers (hybrid architectures) ---- */
    int32_t rec_index;                /* index among recurrent layers, or -1 */
    int64_t conv_floats;              /* conv-window floats this layer keeps per slot */
    int64_t rec_floats;               /* recurrent-state floats this layer keeps per slot */
    hy_weight_t attn_qkv;             /* GDN: (n_embd, conv_dim) fused q|k|v;
                                       * lightning: (n_embd, 3 n_head hd) per head [q|k|v] */
    hy_weight_t attn_gate;            /* GDN: (n_embd, value_dim) z; lightning: output gate */
    hy_weight_t ssm_in;               /* Mamba-2 in_proj (n_embd, d_in_proj) */
    hy_weight_t ssm_conv1d;           /* (d_conv, channels) */
    hy_weight_t ssm_conv1d_b;         /* (channels) or absent */
    hy_weight_t ssm_dt_b;             /* (n_v_heads | n_head) */
    hy_weight_t ssm_a;                /* (n_v_heads | n_head): A = -exp(A_log);
                                       * lightning: (chunk+1, n_head) decay table, built at load */
    hy_weight_t ssm_d;                /* (n_head) Mamba-2 skip */
    hy_weight_t ssm_norm;             /* GDN (d_v) / Mamba-2 (d_inner/G, G) / lightning
                                       * (n_head hd) attn_norm_2 */
    hy_weight_t ssm_out;              /* (value_dim | d_inner, n_embd) */
    hy_weight_t ssm_ba;               /* qwen3next (n_embd, 2*n_v_heads) */
    hy_weight_t ssm_beta, ssm_alpha;  /* qwen35 (n_embd, n_v_heads) each */
    hy_weight_t sc_in;                /* LFM2 shortconv.in_proj (n_embd, 3*n_embd) */
    hy_weight_t sc_conv;              /* LFM2 shortconv.conv (L, n_embd) */
    hy_weight_t sc_out;               /* LFM2 shortconv.out_proj (n_embd, n_embd) */
    hy_weight_t sc_in_b, sc_in_c, sc_in_x; /* LFM2: row views of sc_in, (n_embd, n_embd) each */
    hy_weight_t attn_gate_q;          /* unused slot kept for arch-specific use */
    hy_gdn_params_t gdn;              /* GDN layers: the op's parameters (the plan sizes its scratch) */
    hy_ssd_params_t ssd;              /* Mamba-2 layers: likewise */
    hy_weight_t ssm_a_diag;           /* GDN: diag(ssm_a) (n_v_heads, n_v_heads) F32, built at load
                                       * (g = A * softplus(.) as a matmul; memory owned by the layers array) */

    /* ---- mixture of experts ---- */
    hy_moe_t moe;
    hy_weight_t ffn_gate_shexp, ffn_up_shexp; /* (n_embd, n_ff_shexp) */
    hy_weight_t ffn_down_shexp;       /* (n_ff_shexp, n_embd) */
    hy_weight_t ffn_gate_inp_shexp;   /* (n_embd) sigmoid gate of the shared expert */
    int32_t n_ff_shexp;
} hy_layer_t;

typedef struct hy_model hy_model_t;
typedef struct hy_arch hy_arch_t;
typedef struct hy_fwd hy_fwd_t;

/* ---- per-architecture scratch ------------------------------------------
 * An architecture names the extra buffers its forward pass needs in a
 * struct of float pointers of its own (hy_qwen_scratch_t, ...) and its
 * load() describes each member once with hy_model_scratch: which member,
 * how many floats per token, and its region.  Members of one region share
 * memory (the architecture promises they are never live together, e.g. a
 * GDN layer's buffers and an attention layer's); every region gets its own
 * 64-byte aligned span of one backend allocation.  hy_fwd_init sizes that
 * allocation and points every member into it from this description alone,
 * so no arch file computes an offset or a size twice. */
#define HY_SCRATCH_PARTS 16

typedef struct {
    size_t member;    /* offsetof(<arch scratch struct>, <float * member>) */
    int32_t region;   /* 0..HY_SCRATCH_PARTS-1 */
    int64_t per_tok;  /* floats per token */
} hy_scratch_part_t;

typedef struct {
    size_t size;      /* sizeof(<arch scratch struct>); 0: no scratch */
    int32_t n_parts;
    hy_scratch_part_t part[HY_SCRATCH_PARTS];
} hy_scratch_desc_t;

struct hy_model {
    hy_gguf_t *gguf;
    hy_backend_t *be;     /* weights were prepared for this backend */
    const hy_arch_t *arch;
    char arch_name[32];
    char name[128];

    int32_t n_vocab;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_ctx_train;
    int32_t n_head;       /* layer 0's, for reporting */
    int32_t n_head_kv;
    int32_t head_dim;     /* key/query head size */
    int32_t head_dim_v;
    int32_t n_kv_layers;  /* layers that keep KV pages */
    int32_t n_rec_layers; /* layers that keep a recurrent state */
    int32_t n_swa_layers; /* ATTN_SWA layers (among the n_kv_layers) */
    hy_scratch_desc_t scratch; /* the architecture's forward scratch, set by its load() */
    /* Architecture-specific scalars (Granite's multipliers, ...). */
    float embd_scale;     /* multiply embeddings (1 = off) */
    float residual_scale; /* multiply each block's output before the residual add (1);
                           * minimax-01: its layernorm alpha, times the normed input */
    float attn_scale;     /* attention scale override (0 = 1/sqrt(head_dim)) */
    float logit_scale;    /* divide logits by this (1 = off) */
    float attn_softcap;   /* attention scores -> c tanh(s / c) (0 = off; Gemma 2) */
    float final_softcap;  /* logits -> c tanh(l / c) (0 = off; Gemma 2/3) */
    float norm_eps;
    hy_rope_t rope;
    hy_rope_t rope_swa;   /* sliding layers' RoPE where it differs (Gemma's freq_base_swa) */
    float *rope_freq_factors; /* owned copy of rope_freqs, or NULL */
    void *arch_mem;       /* one allocation an architecture keeps (freed with the model) */

    hy_weight_t tok_embd;     /* (n_embd, n_vocab) */
    hy_weight_t output_norm;  /* (n_embd) */
    hy_weight_t output;       /* (n_embd, n_vocab); == tok_embd when tied */
    hy_layer_t *layers;       /* [n_layer] */
};

/* Working buffers for one forward pass of up to max_tokens tokens. */
struct hy_fwd {
    hy_backend_t *be;
    int32_t max_tokens;
    int32_t max_outputs;
    float *x;      /* (max_tokens, n_embd) residual stream */
    float *xn;     /* (max_tokens, n_embd) normed input */
    float *q;      /* (max_tokens, n_head*head_dim) */
    float *k;      /* (max_tokens, n_head_kv*head_dim) */
    float *v;      /* (max_tokens, n_head_kv*head_dim_v) */
    float *att;    /* (max_tokens, n_head*head_dim_v) */
    float *gate;   /* (max_tokens, n_ff_max) */
    float *up;     /* (max_tokens, n_ff_max) */
    float *out_x;  /* (max_outputs, n_embd) rows that want logits */
    float *logits; /* (max_outputs, n_vocab) backend side */
    void *scratch;      /* the architecture's scratch struct (see hy_scratch_desc_t) or NULL */
    float *scratch_mem; /* backend memory its members point into */
};

/* An architecture: how to read its weights and how to run it.  The table
 * of families (src/model/arch/families.c) maps general.architecture names
 * to these. */
struct hy_arch {
    const char *name;
    int (*load)(hy_model_t *m, char *err);
    /* Runs the batch and writes logits of rows out_rows[0..n_out-1] into
     * logits (host, n_out x n_vocab); logits NULL leaves them only in
     * f->logits on the backend (a backend that samples them itself). */
    int (*forward)(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b,
                   const int32_t *out_rows, int32_t n_out, float *logits, char *err);
};

int hy_model_load(hy_model_t **out, const char *path, hy_backend_t *be, char *err);
void hy_model_free(hy_model_t *m);

/* max_tokens: largest batch; max_outputs: most rows that want logits. */
int hy_fwd_init(hy_fwd_t *f, const hy_model_t *m, hy_backend_t *be, int32_t max_tokens,
                int32_t max_outputs, char *err);
void hy_fwd_free(hy_fwd_t *f);
/* Host memory hy_fwd_init's buffers for these sizes can take, each
 * allocation as hy_host_alloc_bytes counts it: the plan's activations. */
uint64_t hy_fwd_bytes(const hy_model_t *m, int32_t max_tokens, int32_t max_outputs);

static inline int hy_model_forward(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b,
                                   const int32_t *out_rows, int32_t n_out, float *logits,
                                   char *err)
{
    return m->arch->forward(m, f, b, out_rows, n_out, logits, err);
}

/* The (layer, KV head) pairs block-sparse attention chooses blocks in: the
 * KV heads of the layers that keep KV without a window (a sliding layer
 * always reads its window densely).  The engine's, the tests' and the
 * benchmark's count of blocks read are per such pair. */
static inline int64_t hy_model_sparse_units(const hy_model_t *m)
{
    int64_t n = 0;

    for (int32_t il = 0; il < m->n_layer; il++)
        n += m->layers[il].kv_index >= 0 && m->layers[il].window == 0;
    return n * m->n_head_kv;
}

/* Keys, for the loader and every family's load() (model/arch/load.h has the
 * rest of what they share).  The rule for a missing key, everywhere: a
 * required key that is absent is an error naming the key and the file
 * ("<file>: required key '<key>' is missing"); an optional one leaves the
 * caller's value (its default) as it was.  A key of the wrong type or array
 * length is an error naming the key.
 *
 * "<arch>.<suffix>" as u32 / f32 (f32: also refused when not finite). */
int hy_model_key_u32(hy_model_t *m, const char *suffix, uint32_t *out, bool optional,
                     char *err);
int hy_model_key_f32(hy_model_t *m, const char *suffix, float *out, bool optional,
                     char *err);
/* "<arch>.<suffix>" as a per-layer u32: a scalar for every layer or an array
 * of block_count values, into out[0..m->n_layer). */
int hy_model_layers_u32(hy_model_t *m, const char *suffix, uint32_t *out, bool optional,
                        char *err);
/* "<arch>.<suffix>" as a per-layer flag array: bools or integers (non-zero
 * = true), one per layer, into out[0..m->n_layer).  HY_ENOENT (err
 * untouched) when the key is absent or not an array, so that the caller
 * can read its scalar form; an array of another type or length is an error
 * naming the key and `what` the scalar form would be. */
int hy_model_layers_flag(hy_model_t *m, const char *suffix, const char *what, bool *out,
                         char *err);

/* The architecture that reads general.architecture `name` (len bytes), or
 * NULL: a lookup in the table of families. */
const hy_arch_t *hy_arch_find(const char *name, size_t len);

#endif
