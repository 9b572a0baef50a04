/*
 * load.h - what every architecture's load() is made of, so that an arch file
 * says only what is particular to its family: the common tensors (embedding,
 * final norm, output or tied output), attention geometry, per-layer tensor
 * tables checked for their exact shapes, and the scratch description.  Keys
 * (scalar and per-layer, with one rule for a missing key) are read with
 * model/model.h's readers, which the loader shares: model/ is the layer
 * below this one.
 */
#ifndef HY_ARCH_LOAD_H
#define HY_ARCH_LOAD_H

#include <stddef.h>

#include "model/model.h"

/* Most routed experts a MoE layer may have (Qwen3-Next has 512, llama.cpp
 * allows 1024): a bound on the router's per-token work and tables. */
#define HY_MODEL_MAX_EXPERTS 4096

/* ---- hyperparameters ---------------------------------------------------- */

/* (The key readers, hy_model_key_u32 / _f32 / hy_model_layers_u32 / _flag,
 * are in model/model.h: the loader reads the keys every family shares with
 * them too.) */

/* Which layers are recurrent in a family that names its pattern the way
 * qwen3next and minimax-01 do: <arch>.attention.recurrent_layers (a bool
 * or integer array over block_count, or one bool for all) if present,
 * else every layer but each <arch>.full_attention_interval-th (that key,
 * else `interval`: llama.cpp's default for the family), into
 * is_recr[0..m->n_layer). */
int hy_model_recurrent_pattern(hy_model_t *m, uint32_t interval, bool *is_recr, char *err);
/* One attention geometry from scalar keys (families whose attention-like
 * layers all have one shape): head_count (required), head_count_kv
 * (default head_count; head_count must be a multiple of it, at most 1024),
 * key_length = value_length (default n_embd / head_count, 1..max_hd; the
 * families using this multiply values by something of the key size). */
int hy_model_attn_heads(hy_model_t *m, uint32_t max_hd, uint32_t *n_head, uint32_t *n_head_kv,
                        uint32_t *hd, char *err);
/* Refuses a feed_forward_length outside 1..2^20 (0 too unless allow_zero)
 * on any layer, naming the layer. */
int hy_model_check_ff(hy_model_t *m, const uint32_t *n_ff, bool allow_zero, char *err);

/* Fills m->rope from <arch>.rope.* keys; needs m->head_dim set. */
int hy_model_read_rope(hy_model_t *m, hy_rope_mode_t mode, char *err);

/* Attention geometry from the per-layer head counts of the layers with
 * is_attn[il] (NULL: every layer): head_count positive, at most 1024 and a
 * multiple of head_count_kv, the same in every attention layer (the KV
 * layout is one geometry).  Sets m->n_head / n_head_kv and the head sizes
 * from attention.key_length / value_length (default n_embd / head_count);
 * without attention layers all four are 1 (they only size buffers). */
int hy_model_attn_dims(hy_model_t *m, const uint32_t *n_head, const uint32_t *n_head_kv,
                       const bool *is_attn, char *err);

/* ---- tensors -------------------------------------------------------------- */

/* Binds tensor `name` to w after checking its shape is exactly ne[0..2]
 * (trailing dims 1).  If optional and absent, w->data stays NULL and HY_OK
 * is returned. */
int hy_model_weight(hy_model_t *m, hy_weight_t *w, const char *name,
                    int64_t ne0, int64_t ne1, bool optional, char *err);
int hy_model_weight3(hy_model_t *m, hy_weight_t *w, const char *name, int64_t ne0,
                     int64_t ne1, int64_t ne2, bool optional, char *err);

/* One row of a layer's tensor table: hy_layer_t member, name after
 * "blk.N.", exact shape (ne[1] / ne[2] of 0 mean 1). */
typedef struct {
    size_t field;      /* HY_LT(member) */
    const char *name;
    int64_t ne[3];
    bool optional;
} hy_layer_tensor_t;
#define HY_LT(member) offsetof(hy_layer_t, member)

/* Binds the n tensors of table t for layer il, in table order. */
int hy_model_layer_tensors(hy_model_t *m, hy_layer_t *L, int32_t il, const hy_layer_tensor_t *t,
                           size_t n, char *err);

/* The tensors every family has: token_embd (n_embd, n_vocab), the final
 * norm `norm_name` (output_norm.weight; LFM2 token_embd_norm.weight) and
 * output.weight, which is token_embd when absent (tied embeddings).  Also
 * allocates m->layers (zeroed, kv_index / rec_index -1, rope &m->rope). */
int hy_model_load_common(hy_model_t *m, const char *norm_name, char *err);

/* Layer il's GQA attention: attn_q/k/v/output and optional q/k/v biases
 * (key / value head sizes m->head_dim / m->head_dim_v); marks the layer
 * ATTN_FULL with the next kv_index. */
int hy_model_load_attention(hy_model_t *m, hy_layer_t *L, int32_t il, int32_t n_head,
                            int32_t n_head_kv, char *err);
/* Dense SwiGLU / GeGLU FFN of n_ff: ffn_gate, ffn_up, ffn_down. */
int hy_model_load_ffn(hy_model_t *m, hy_layer_t *L, int32_t il, int32_t n_ff, char *err);
/* Routed experts: ffn_gate_inp (n_embd, n_expert) and the gate/up/down
 * expert stacks of n_ff_exp; fills L->moe's tensors and sizes, marks the
 * layer HY_FFN_MOE.  Routing options are the caller's. */
int hy_model_load_experts(hy_model_t *m, hy_layer_t *L, int32_t il, int32_t n_expert,
                          int32_t n_expert_used, int32_t n_ff_exp, char *err);

/* ---- scratch -------------------------------------------------------------- */

/* Declares scratch member `member` of the architecture's struct (of
 * struct_size bytes) with per_tok floats per token in region `region`;
 * declaring a member again keeps the larger size. */
void hy_model_scratch(hy_model_t *m, size_t struct_size, size_t member, int32_t region,
                      int64_t per_tok);

#endif
