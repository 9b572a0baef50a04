/*
 * arch/minimax.c - MiniMax-Text-01 and MiniMax-M1 (GGUF minimax-01):
 * lightning-attention layers (HY_LAYER_LIGHTNING: linear attention with a
 * per-head exponential decay, an RMSNorm over all heads and a sigmoid
 * output gate) with a softmax GQA attention layer every
 * full_attention_interval-th layer (NEOX RoPE), each layer followed by a
 * softmax top-k MoE without shared expert.  The residual stream is
 * MiniMax's: a block's *normed* input, times residual_scale (the
 * layernorm alpha of the HF config), plus the block's output.
 * Reference: transformers' MiniMaxForCausalLM; GGUF names and keys are
 * llama.cpp's (src/models/minimax-01.cpp at 34af94cd; docs/minimax.md).
 */
#include "backend/lightning.h"
#include "model/arch/blocks.h"
#include "model/arch/load.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Lightning block length at absolute positions (backend/lightning.h): 16
 * keeps the slot's copy of the current block at 2 x 16 x head_dim floats a
 * head (+25% over the d x d state at MiniMax's head size 128) while a
 * prefill still folds 16 rows into the state per pass over it. */
#define HY_MINIMAX_CHUNK 16
/* transformers' MiniMaxLightningAttention normalises its output with
 * MiniMaxRMSNorm's default eps, not the config's rms_norm_eps (llama.cpp
 * uses rms_norm_eps there: the two differ only for outputs of mean square
 * near 1e-5). */
#define HY_MINIMAX_LA_NORM_EPS 1e-6f
/* llama.cpp's default when neither layer-pattern key is present. */
#define HY_MINIMAX_INTERVAL 8

/* The hyperparameters, read and checked once (every layer of a kind has the
 * same geometry in this family). */
typedef struct {
    uint32_t n_head, n_head_kv, hd, n_expert, n_used, n_ff;
    float w_scale, alpha;
} hy_minimax_hp_t;

/* The forward pass's buffer: a lightning layer's q|k|v projection. */
typedef struct {
    float *qkv; /* (T, 3 * n_head * head_dim): per head [q | k | v] */
} hy_minimax_scratch_t;

static int hy_minimax_read_hp(hy_model_t *m, hy_minimax_hp_t *h, char *err)
{
    const char *path = hy_gguf_path(m->gguf), *a = m->arch_name;
    int rc;

    memset(h, 0, sizeof *h);
    h->w_scale = 1.0f;
    h->alpha = 1.0f;
    /* the lightning state is d x d: keys and values have one head size */
    if ((rc = hy_model_attn_heads(m, HY_LIGHTNING_MAX_DIM, &h->n_head, &h->n_head_kv, &h->hd,
                                  err)) != HY_OK ||
        (rc = hy_model_key_u32(m, "expert_count", &h->n_expert, false, err)) != HY_OK ||
        (rc = hy_model_key_u32(m, "expert_used_count", &h->n_used, false, err)) != HY_OK ||
        (rc = hy_model_key_u32(m, "feed_forward_length", &h->n_ff, false, err)) != HY_OK ||
        (rc = hy_model_key_f32(m, "expert_weights_scale", &h->w_scale, true, err)) != HY_OK ||
        (rc = hy_model_key_f32(m, "residual_scale", &h->alpha, true, err)) != HY_OK)
        return rc;
    if (h->n_expert == 0 || h->n_expert > HY_MODEL_MAX_EXPERTS || h->n_used == 0 ||
        h->n_used > h->n_expert)
        return hy_err(err, HY_EFORMAT, "%s: %s.expert_used_count = %u must be 1..expert_count = %u (at most %d)",
                      path, a, h->n_used, h->n_expert, HY_MODEL_MAX_EXPERTS);
    if (h->n_ff == 0 || h->n_ff > 1u << 20)
        return hy_err(err, HY_EFORMAT, "%s: %s.feed_forward_length = %u is out of range (1..%u)",
                      path, a, h->n_ff, 1u << 20);
    if (!(h->alpha > 0.0f))
        return hy_err(err, HY_EFORMAT, "%s: %s.residual_scale = %g must be positive", path, a,
                      h->alpha);
    return HY_OK;
}

/* transformers' MiniMaxLightningAttention.get_slope_rate for layer il of
 * n_layer: s_h = (2^(-8/H))^(h+1) * (1 - il / (n_layer - 1 + 1e-5) + 1e-5),
 * in double, rounded once (llama.cpp omits the 1e-5 in the divisor: a
 * relative 1e-7 at most). */
static void hy_minimax_slopes(int32_t n_head, int32_t il, int32_t n_layer, float *out)
{
    const double factor = 1.0 - (double)il / ((double)n_layer - 1.0 + 1e-5) + 1e-5;

    for (int32_t h = 0; h < n_head; h++)
        out[h] = (float)(pow(2.0, -8.0 * (double)(h + 1) / (double)n_head) * factor);
}

/* A lightning layer: fused per-head [q | k | v] projection, output gate,
 * the norm over all heads (attn_norm_2), output projection; its decay
 * table (the layer's ssm_a, n_head x (chunk + 1) floats at `table`) comes
 * from the slope formula, not the file. */
static int hy_minimax_load_la(hy_model_t *m, hy_layer_t *L, int32_t il, const hy_minimax_hp_t *h,
                              float *table, char *err)
{
    float slopes[1024]; /* n_head <= 1024 (hy_model_attn_heads) */
    const int64_t E = m->n_embd, Q = (int64_t)h->n_head * h->hd;
    const hy_layer_tensor_t t[] = {
        {HY_LT(attn_qkv), "attn_qkv.weight", {E, 3 * Q}, false},
        {HY_LT(attn_gate), "attn_gate.weight", {E, Q}, false},
        {HY_LT(ssm_norm), "attn_norm_2.weight", {Q}, false},
        {HY_LT(wo), "attn_output.weight", {Q, E}, false},
    };
    const hy_lightning_params_t lp = {(int32_t)h->n_head, (int32_t)h->hd, HY_MINIMAX_CHUNK};
    int rc;

    L->kind = HY_LAYER_LIGHTNING;
    L->rec_index = m->n_rec_layers++;
    L->n_head = (int32_t)h->n_head;
    L->conv_floats = 0;
    L->rec_floats = hy_lightning_state_floats(&lp);
    if ((rc = hy_model_layer_tensors(m, L, il, t, HY_ARRAY_LEN(t), err)) != HY_OK)
        return rc;
    hy_minimax_slopes((int32_t)h->n_head, il, m->n_layer, slopes);
    hy_lightning_decays(slopes, lp.n_head, lp.chunk, table);
    memset(&L->ssm_a, 0, sizeof L->ssm_a);
    L->ssm_a.type = HY_DTYPE_F32;
    L->ssm_a.ne[0] = lp.chunk + 1;
    L->ssm_a.ne[1] = h->n_head;
    L->ssm_a.ne[2] = L->ssm_a.ne[3] = 1;
    L->ssm_a.row_bytes = sizeof(float) * (size_t)(lp.chunk + 1);
    L->ssm_a.data = table;
    L->ssm_a.name = "lightning decay table (built at load)";
    return m->be->i->weight_init(m->be, &L->ssm_a, err);
}

static int hy_minimax_load(hy_model_t *m, char *err)
{
    const int64_t E = m->n_embd;
    bool is_la[HY_MODEL_MAX_LAYERS];
    hy_minimax_hp_t h;
    int32_t il, n_la = 0;
    const size_t per_layer = (size_t)HY_MINIMAX_CHUNK + 1;
    float *tables;
    int rc;

    if ((rc = hy_minimax_read_hp(m, &h, err)) != HY_OK ||
        (rc = hy_model_recurrent_pattern(m, HY_MINIMAX_INTERVAL, is_la, err)) != HY_OK)
        return rc;
    m->n_head = (int32_t)h.n_head;
    m->n_head_kv = (int32_t)h.n_head_kv;
    m->head_dim = m->head_dim_v = (int32_t)h.hd;
    m->residual_scale = h.alpha;
    if ((rc = hy_model_read_rope(m, HY_ROPE_NEOX, err)) != HY_OK ||
        (rc = hy_model_load_common(m, "output_norm.weight", err)) != HY_OK)
        return rc;
    for (il = 0; il < m->n_layer; il++)
        n_la += is_la[il];
    /* every lightning layer's decay table, freed with the model */
    m->arch_mem = calloc((size_t)HY_MAX(n_la, 1) * h.n_head * per_layer, sizeof(float));
    if (m->arch_mem == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    tables = m->arch_mem;

    for (il = 0; il < m->n_layer; il++) {
        hy_layer_t *L = &m->layers[il];
        const hy_layer_tensor_t norms[] = {
            {HY_LT(attn_norm), "attn_norm.weight", {E}, false},
            {HY_LT(ffn_norm), "ffn_norm.weight", {E}, false},
        };
        hy_moe_t *mo = &L->moe;

        if ((rc = hy_model_layer_tensors(m, L, il, norms, HY_ARRAY_LEN(norms), err)) != HY_OK)
            return rc;
        rc = is_la[il] ? hy_minimax_load_la(m, L, il, &h,
                                            tables + (size_t)m->n_rec_layers * h.n_head * per_layer,
                                            err)
                       : hy_model_load_attention(m, L, il, (int32_t)h.n_head,
                                                 (int32_t)h.n_head_kv, err);
        if (rc != HY_OK ||
            (rc = hy_model_load_experts(m, L, il, (int32_t)h.n_expert, (int32_t)h.n_used,
                                        (int32_t)h.n_ff, err)) != HY_OK)
            return rc;
        /* MiniMaxTopKRouter: softmax over all experts, top-k renormalised */
        mo->softmax_gating = true;
        mo->norm_topk = true;
        mo->weights_scale = h.w_scale;
        mo->norm_eps = 0.0f;
    }
    if (m->n_rec_layers > 0)
        hy_model_scratch(m, sizeof(hy_minimax_scratch_t), offsetof(hy_minimax_scratch_t, qkv), 0,
                         3 * (int64_t)h.n_head * h.hd);
    return HY_OK;
}

/* Lightning attention: qkv = silu(W_qkv h) split per head, the op (decay
 * per head, no scaling), RMSNorm over all heads, times sigmoid(W_g h),
 * output projection into out. */
static void hy_minimax_lightning(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b,
                                 const hy_layer_t *L, const float *in, float *out)
{
    hy_backend_t *be = f->be;
    const struct hy_backend_i *op = be->i;
    const int32_t n = b->n_tokens, d = m->head_dim, H = L->n_head, Q = H * d;
    const hy_lightning_params_t lp = {H, d, HY_MINIMAX_CHUNK};
    const hy_minimax_scratch_t *s = f->scratch;
    float *qkv = s->qkv, *o = f->att, *gate = f->q;

    op->matmul(be, &L->attn_qkv, in, qkv, n);
    op->unary(be, HY_UNARY_SILU, qkv, qkv, (size_t)n * 3 * Q);
    op->lightning(be, L->rec_index, b, qkv, qkv + d, qkv + 2 * d, 3 * Q, 3 * d, &L->ssm_a, o,
                  &lp);
    op->rmsnorm(be, o, &L->ssm_norm, o, n, Q, HY_MINIMAX_LA_NORM_EPS);
    op->matmul(be, &L->attn_gate, in, gate, n);
    op->unary(be, HY_UNARY_SIGMOID, gate, gate, (size_t)n * Q);
    op->mul(be, o, gate, (size_t)n * Q);
    op->matmul(be, &L->wo, o, out, n);
}

/* x = alpha * h + y, where the block wrote y into f->x and h is its normed
 * input (in f->xn, consumed). */
static void hy_minimax_residual(hy_model_t *m, hy_fwd_t *f, int32_t n)
{
    const size_t cnt = (size_t)n * m->n_embd;

    if (m->residual_scale != 1.0f)
        f->be->i->scale(f->be, f->xn, m->residual_scale, cnt);
    f->be->i->add(f->be, f->x, f->xn, cnt);
}

static int hy_minimax_forward(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b,
                              const int32_t *out_rows, int32_t n_out, float *logits, char *err)
{
    const struct hy_backend_i *op = f->be->i;
    const int32_t n = b->n_tokens, E = m->n_embd;
    int rc;

    if ((rc = hy_blk_check(f, b, n_out, err)) != HY_OK)
        return rc;
    hy_blk_embed(m, f, b);
    for (int32_t il = 0; il < m->n_layer; il++) {
        const hy_layer_t *L = &m->layers[il];

        /* the mixer reads the normed input and writes its output over the
         * stream, which MiniMax's residual no longer needs */
        op->rmsnorm(f->be, f->x, &L->attn_norm, f->xn, n, E, m->norm_eps);
        if (L->kind == HY_LAYER_LIGHTNING)
            hy_minimax_lightning(m, f, b, L, f->xn, f->x);
        else
            hy_blk_attention(m, f, b, L, f->xn, f->x);
        hy_minimax_residual(m, f, n);

        op->rmsnorm(f->be, f->x, &L->ffn_norm, f->xn, n, E, m->norm_eps);
        op->moe(f->be, &L->moe, f->xn, f->x, n, E);
        hy_minimax_residual(m, f, n);
    }
    return hy_blk_logits(m, f, out_rows, n_out, logits, err);
}

static const hy_arch_t hy_arch_minimax = {
    /* .name    = */ "minimax-01",
    /* .load    = */ hy_minimax_load,
    /* .forward = */ hy_minimax_forward,
};
