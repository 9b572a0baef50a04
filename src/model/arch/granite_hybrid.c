/*
 * arch/granite_hybrid.c - granitehybrid: IBM Granite-4.0-H and Bamba.
 * Mamba-2 mixers (head_count_kv[il] == 0) interleaved with GQA attention
 * (NoPE for Granite-4.0-H; NORM RoPE when rope.scaling.finetuned is true,
 * as for Bamba), and on every layer a dense SwiGLU FFN or a MoE with a
 * shared expert, with Granite's embedding / residual / attention / logit
 * multipliers.  Notes b.3; llama.cpp src/models/granite-hybrid.cpp.
 */
#include "model/arch/blocks.h"
#include "model/arch/load.h"
#include "model/arch/mamba2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The forward pass's buffers: the Mamba-2 mixer's and the routed experts'
 * output of a MoE layer. */
typedef struct {
    hy_mamba2_scratch_t m2;
    float *routed; /* (T, n_embd) */
} hy_gh_scratch_t;
enum { HY_GH_R_ROUTED = HY_MAMBA2_REGIONS };

/* The MoE keys (no expert_count: dense FFNs). */
typedef struct {
    uint32_t n_expert, n_used, n_ff_sh;
} hy_gh_moe_t;

static int hy_gh_read_moe(hy_model_t *m, hy_gh_moe_t *x, char *err)
{
    int rc;

    *x = (hy_gh_moe_t){0};
    if ((rc = hy_model_key_u32(m, "expert_count", &x->n_expert, true, err)) != HY_OK ||
        (rc = hy_model_key_u32(m, "expert_used_count", &x->n_used, true, err)) != HY_OK ||
        (rc = hy_model_key_u32(m, "expert_shared_feed_forward_length", &x->n_ff_sh, true, err)) != HY_OK)
        return rc;
    if (x->n_expert == 0)
        return HY_OK;
    if (x->n_expert > HY_MODEL_MAX_EXPERTS || x->n_used == 0 || x->n_used > x->n_expert)
        return hy_err(err, HY_EFORMAT, "%s: %s.expert_used_count = %u must be 1..expert_count (%u)",
                      hy_gguf_path(m->gguf), m->arch_name, x->n_used, x->n_expert);
    /* every Granite MoE layer also runs its shared MLP (transformers'
     * GraniteMoeHybridDecoderLayer always builds shared_mlp) */
    if (x->n_ff_sh == 0 || x->n_ff_sh > 1u << 20)
        return hy_err(err, HY_EFORMAT, "%s: %s.expert_shared_feed_forward_length = %u is out of range (1..%u)",
                      hy_gguf_path(m->gguf), m->arch_name, x->n_ff_sh, 1u << 20);
    return HY_OK;
}

/* Granite's multipliers (absent: 1 / the default attention scale) and its
 * positional encoding: none for Granite-4.0-H, NORM RoPE when
 * rope.scaling.finetuned is true (Bamba). */
static int hy_gh_read_scalars(hy_model_t *m, char *err)
{
    bool finetuned = false;
    char key[160];
    int rc;

    m->embd_scale = m->residual_scale = m->logit_scale = 1.0f;
    m->attn_scale = 0.0f;
    if ((rc = hy_model_key_f32(m, "embedding_scale", &m->embd_scale, true, err)) != HY_OK ||
        (rc = hy_model_key_f32(m, "residual_scale", &m->residual_scale, true, err)) != HY_OK ||
        (rc = hy_model_key_f32(m, "logit_scale", &m->logit_scale, true, err)) != HY_OK ||
        (rc = hy_model_key_f32(m, "attention.scale", &m->attn_scale, true, err)) != HY_OK)
        return rc;
    if (m->logit_scale == 0.0f)
        return hy_err(err, HY_EFORMAT, "%s: %s.logit_scale must not be 0", hy_gguf_path(m->gguf),
                      m->arch_name);
    snprintf(key, sizeof key, "%s.rope.scaling.finetuned", m->arch_name);
    rc = hy_gguf_get_bool(m->gguf, key, &finetuned, err);
    if (rc != HY_OK && rc != HY_ENOENT)
        return rc;
    if (finetuned && (rc = hy_model_read_rope(m, HY_ROPE_NORM, err)) != HY_OK)
        return rc;
    m->rope.n_rot = finetuned ? m->rope.n_rot : 0; /* 0: NoPE (layers get rope NULL) */
    return HY_OK;
}

/* A MoE FFN: routed experts (softmax top-k, renormalised) plus the shared
 * SwiGLU expert that every token runs. */
static int hy_gh_load_moe(hy_model_t *m, hy_layer_t *L, int32_t il, const hy_gh_moe_t *x,
                          int32_t n_ff, char *err)
{
    const int64_t E = m->n_embd, S = x->n_ff_sh;
    const hy_layer_tensor_t shexp[] = {
        {HY_LT(ffn_gate_shexp), "ffn_gate_shexp.weight", {E, S}, false},
        {HY_LT(ffn_up_shexp), "ffn_up_shexp.weight", {E, S}, false},
        {HY_LT(ffn_down_shexp), "ffn_down_shexp.weight", {S, E}, false},
    };
    hy_moe_t *mo = &L->moe;
    int rc;

    if ((rc = hy_model_load_experts(m, L, il, (int32_t)x->n_expert, (int32_t)x->n_used, n_ff,
                                    err)) != HY_OK ||
        (rc = hy_model_layer_tensors(m, L, il, shexp, HY_ARRAY_LEN(shexp), err)) != HY_OK)
        return rc;
    /* top-k of the logits, softmax over those k == softmax, then
     * renormalise the chosen k */
    mo->softmax_gating = true;
    mo->norm_topk = true;
    mo->weights_scale = 1.0f;
    mo->norm_eps = 0.0f;
    L->n_ff_shexp = (int32_t)x->n_ff_sh;
    L->n_ff = L->n_ff_shexp; /* f->gate / f->up hold the shared expert */
    hy_model_scratch(m, sizeof(hy_gh_scratch_t), offsetof(hy_gh_scratch_t, routed),
                     HY_GH_R_ROUTED, E);
    return HY_OK;
}

static int hy_gh_load(hy_model_t *m, char *err)
{
    uint32_t n_head[HY_MODEL_MAX_LAYERS], n_head_kv[HY_MODEL_MAX_LAYERS], n_ff[HY_MODEL_MAX_LAYERS];
    bool is_attn[HY_MODEL_MAX_LAYERS];
    const int64_t E = m->n_embd;
    hy_mamba2_dims_t d;
    hy_gh_moe_t moe;
    int32_t il;
    int rc;

    /* head_count_kv 0 (or absent) marks a Mamba-2 layer */
    memset(n_head_kv, 0, sizeof(uint32_t) * (size_t)m->n_layer);
    if ((rc = hy_model_layers_u32(m, "attention.head_count", n_head, false, err)) != HY_OK ||
        (rc = hy_model_layers_u32(m, "attention.head_count_kv", n_head_kv, true, err)) != HY_OK ||
        (rc = hy_model_layers_u32(m, "feed_forward_length", n_ff, false, err)) != HY_OK ||
        (rc = hy_mamba2_read_dims(m, &d, err)) != HY_OK ||
        (rc = hy_gh_read_moe(m, &moe, err)) != HY_OK ||
        (rc = hy_model_check_ff(m, n_ff, false, err)) != HY_OK)
        return rc;
    for (il = 0; il < m->n_layer; il++)
        is_attn[il] = n_head_kv[il] != 0;
    if ((rc = hy_model_attn_dims(m, n_head, n_head_kv, is_attn, err)) != HY_OK ||
        (rc = hy_gh_read_scalars(m, err)) != HY_OK ||
        (rc = hy_model_load_common(m, "output_norm.weight", err)) != HY_OK)
        return rc;
    hy_mamba2_scratch(m, &d, sizeof(hy_gh_scratch_t), offsetof(hy_gh_scratch_t, m2), 0);

    for (il = 0; il < m->n_layer; il++) {
        hy_layer_t *L = &m->layers[il];
        const hy_layer_tensor_t attn_norm[] = {{HY_LT(attn_norm), "attn_norm.weight", {E}, false}};
        const hy_layer_tensor_t ffn_norm[] = {{HY_LT(ffn_norm), "ffn_norm.weight", {E}, false}};

        if ((rc = hy_model_layer_tensors(m, L, il, attn_norm, 1, err)) != HY_OK)
            return rc;
        rc = is_attn[il] ? hy_model_load_attention(m, L, il, (int32_t)n_head[il],
                                                   (int32_t)n_head_kv[il], err)
                         : hy_mamba2_load_layer(m, L, il, &d, err);
        if (rc != HY_OK || (rc = hy_model_layer_tensors(m, L, il, ffn_norm, 1, err)) != HY_OK)
            return rc;
        rc = moe.n_expert > 0 ? hy_gh_load_moe(m, L, il, &moe, (int32_t)n_ff[il], err)
                              : hy_model_load_ffn(m, L, il, (int32_t)n_ff[il], err);
        if (rc != HY_OK)
            return rc;
        L->rope = m->rope.n_rot > 0 ? &m->rope : NULL;
    }
    return HY_OK;
}

/* MoE FFN plus the shared expert: out = moe(in) + down(silu(gate(in)) *
 * up(in)); in and out may alias (in is read before out is written). */
static void hy_gh_moe(hy_model_t *m, hy_fwd_t *f, const hy_layer_t *L, int32_t n,
                      const float *in, float *out)
{
    hy_backend_t *be = f->be;
    const struct hy_backend_i *op = be->i;
    const hy_gh_scratch_t *s = f->scratch;
    float *routed = s->routed;

    op->moe(be, &L->moe, in, routed, n, m->n_embd);
    op->matmul(be, &L->ffn_gate_shexp, in, f->gate, n);
    op->matmul(be, &L->ffn_up_shexp, in, f->up, n);
    op->swiglu(be, f->gate, f->up, f->gate, (size_t)n * L->n_ff_shexp);
    op->matmul(be, &L->ffn_down_shexp, f->gate, out, n);
    op->add(be, out, routed, (size_t)n * m->n_embd);
}

/* embed (x embedding_scale); per layer: norm, Mamba-2 or attention,
 * residual (x residual_scale), norm, FFN, residual; norm, logits / logit_scale */
static int hy_gh_forward(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b, const int32_t *out_rows,
                         int32_t n_out, float *logits, char *err)
{
    const struct hy_backend_i *op = f->be->i;
    const int32_t n = b->n_tokens, E = m->n_embd;
    const hy_gh_scratch_t *s = f->scratch;
    int rc;

    if ((rc = hy_blk_check(f, b, n_out, err)) != HY_OK)
        return rc;
    hy_blk_embed(m, f, b);
    for (int32_t il = 0; il < m->n_layer; il++) {
        const hy_layer_t *L = &m->layers[il];

        op->rmsnorm(f->be, f->x, &L->attn_norm, f->xn, n, E, m->norm_eps);
        if (L->kind == HY_LAYER_MAMBA2)
            hy_mamba2_mixer(m, f, &s->m2, b, L, f->xn, f->xn);
        else
            hy_blk_attention(m, f, b, L, f->xn, f->xn);
        hy_blk_residual(m, f, f->xn, n);

        op->rmsnorm(f->be, f->x, &L->ffn_norm, f->xn, n, E, m->norm_eps);
        if (L->ffn == HY_FFN_MOE)
            hy_gh_moe(m, f, L, n, f->xn, f->xn);
        else
            hy_blk_ffn(m, f, L, n, f->xn, f->xn);
        hy_blk_residual(m, f, f->xn, n);
    }
    return hy_blk_logits(m, f, out_rows, n_out, logits, err);
}

static const hy_arch_t hy_arch_granite_hybrid = {
    /* .name    = */ "granitehybrid",
    /* .load    = */ hy_gh_load,
    /* .forward = */ hy_gh_forward,
};
