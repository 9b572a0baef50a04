/*
 * arch/granite_hybrid.c - granitehybrid: IBM Granite-4.0-H and Bamba.
 * Mamba-2 mixers (head_count_kv[il] == 0) interleaved with GQA attention
 * (NoPE for Granite-4.0-H; NORM RoPE when rope.scaling.finetuned is true,
 * as for Bamba), and on every layer a dense SwiGLU FFN or a MoE with a
 * shared expert, with Granite's embedding / residual / attention / logit
 * multipliers.  Notes b.3; llama.cpp src/models/granite-hybrid.cpp.
 */
#include "model/arch/blocks.h"
#include "model/arch/mamba2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads a per-layer u32 key (scalar broadcast); missing is an error unless
 * def is given. */
static int hy_gh_layers(hy_model_t *m, const char *suffix, uint32_t *out, const uint32_t *def,
                        char *err)
{
    char key[160];
    int rc;

    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    rc = hy_gguf_get_u32_layers(m->gguf, key, out, (uint32_t)m->n_layer, err);
    if (rc == HY_ENOENT && def != NULL) {
        for (int32_t i = 0; i < m->n_layer; i++)
            out[i] = *def;
        return HY_OK;
    }
    if (rc == HY_ENOENT)
        return hy_err(err, HY_EFORMAT, "%s: required key '%s' is missing", hy_gguf_path(m->gguf),
                      key);
    return rc;
}

static int hy_gh_load(hy_model_t *m, char *err)
{
    uint32_t n_head[4096], n_head_kv[4096], n_ff[4096], u, n_expert = 0, n_used = 0,
             n_ff_sh = 0, zero = 0;
    const int64_t E = m->n_embd;
    hy_mamba2_dims_t d;
    int32_t il, hd, hdv, n_rec = 0, att = -1;
    bool finetuned = false, moe;
    char key[160];
    int rc;

    if ((rc = hy_gh_layers(m, "attention.head_count", n_head, NULL, err)) != HY_OK ||
        (rc = hy_gh_layers(m, "attention.head_count_kv", n_head_kv, &zero, err)) != HY_OK ||
        (rc = hy_gh_layers(m, "feed_forward_length", n_ff, NULL, err)) != HY_OK)
        return rc;
    if ((rc = hy_mamba2_read_dims(m, &d, err)) != HY_OK)
        return rc;
    if ((rc = hy_model_key_u32(m, "expert_count", &n_expert, true, err)) != HY_OK ||
        (rc = hy_model_key_u32(m, "expert_used_count", &n_used, true, err)) != HY_OK ||
        (rc = hy_model_key_u32(m, "expert_shared_feed_forward_length", &n_ff_sh, true, err)) != HY_OK)
        return rc;
    moe = n_expert > 0;
    if (moe && (n_expert > 4096 || n_used == 0 || n_used > n_expert))
        return hy_err(err, HY_EFORMAT, "%s: %s.expert_used_count = %u must be 1..expert_count (%u)",
                      hy_gguf_path(m->gguf), m->arch_name, n_used, n_expert);
    /* every Granite MoE layer also runs its shared MLP (transformers'
     * GraniteMoeHybridDecoderLayer always builds shared_mlp) */
    if (moe && (n_ff_sh == 0 || n_ff_sh > 1u << 20))
        return hy_err(err, HY_EFORMAT, "%s: %s.expert_shared_feed_forward_length = %u is out of range (1..%u)",
                      hy_gguf_path(m->gguf), m->arch_name, n_ff_sh, 1u << 20);
    for (il = 0; il < m->n_layer; il++) {
        if (n_ff[il] == 0 || n_ff[il] > 1u << 20)
            return hy_err(err, HY_EFORMAT, "%s: layer %d: %s.feed_forward_length = %u is out of range",
                          hy_gguf_path(m->gguf), il, m->arch_name, n_ff[il]);
        if (n_head_kv[il] == 0)
            continue;
        if (n_head[il] == 0 || n_head[il] > 1024 || n_head[il] % n_head_kv[il] != 0)
            return hy_err(err, HY_EFORMAT,
                          "%s: layer %d: head_count %u / head_count_kv %u must be positive, with head_count a multiple of head_count_kv",
                          hy_gguf_path(m->gguf), il, n_head[il], n_head_kv[il]);
        if (att >= 0 && (n_head[il] != n_head[att] || n_head_kv[il] != n_head_kv[att]))
            return hy_err(err, HY_EUNSUPPORTED, "%s: attention layers %d and %d have different head counts",
                          hy_gguf_path(m->gguf), att, il);
        att = att < 0 ? il : att;
    }
    /* buffers are sized from the attention layers' geometry */
    m->n_head = att >= 0 ? (int32_t)n_head[att] : HY_MAX((int32_t)n_head[0], 1);
    m->n_head_kv = att >= 0 ? (int32_t)n_head_kv[att] : 1;
    if (m->n_head <= 0)
        return hy_err(err, HY_EFORMAT, "%s: %s.attention.head_count is 0", hy_gguf_path(m->gguf),
                      m->arch_name);
    u = (uint32_t)(m->n_embd / m->n_head);
    if ((rc = hy_model_key_u32(m, "attention.key_length", &u, true, err)) != HY_OK)
        return rc;
    hd = (int32_t)u;
    if ((rc = hy_model_key_u32(m, "attention.value_length", &u, true, err)) != HY_OK)
        return rc;
    hdv = (int32_t)u;
    if (hd <= 0 || hd > 1024 || hdv <= 0 || hdv > 1024)
        return hy_err(err, HY_EFORMAT, "%s: attention head size %d/%d is out of range",
                      hy_gguf_path(m->gguf), hd, hdv);
    m->head_dim = hd;
    m->head_dim_v = hdv;

    /* Granite's multipliers (absent: 1 / default attention scale) */
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
    /* Granite-4.0-H has no positional encoding; Bamba (finetuned) has RoPE */
    snprintf(key, sizeof key, "%s.rope.scaling.finetuned", m->arch_name);
    rc = hy_gguf_get_bool(m->gguf, key, &finetuned, err);
    if (rc != HY_OK && rc != HY_ENOENT)
        return rc;
    if (finetuned && (rc = hy_model_read_rope(m, HY_ROPE_NORM, err)) != HY_OK)
        return rc;
    m->rope.n_rot = finetuned ? m->rope.n_rot : 0; /* n_rot 0 marks NoPE for forward() */

    if ((rc = hy_model_weight(m, &m->tok_embd, "token_embd.weight", E, m->n_vocab, false,
                              err)) != HY_OK ||
        (rc = hy_model_weight(m, &m->output_norm, "output_norm.weight", E, 1, false, err)) != HY_OK ||
        (rc = hy_model_weight(m, &m->output, "output.weight", E, m->n_vocab, true, err)) != HY_OK)
        return rc;
    if (m->output.data == NULL)
        m->output = m->tok_embd; /* tied embeddings */

    m->layers = calloc((size_t)m->n_layer, sizeof *m->layers);
    if (m->layers == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    for (il = 0; il < m->n_layer; il++) {
        hy_layer_t *L = &m->layers[il];
        const int64_t F = n_ff[il];

        L->rec_index = -1;
        L->kv_index = -1;
        L->n_head = (int32_t)n_head[il];
        L->n_head_kv = (int32_t)n_head_kv[il];
#define W(field, name, a, b, opt)                                                          \
    if ((rc = hy_model_layer_weight(m, &L->field, "blk.%d." name, il, a, b, opt, err)) != HY_OK) \
        return rc;
#define W3(field, name, a, b, c)                                                           \
    snprintf(key, sizeof key, "blk.%d." name, il);                                         \
    if ((rc = hy_model_weight3(m, &L->field, key, a, b, c, false, err)) != HY_OK)          \
        return rc;
        W(attn_norm, "attn_norm.weight", E, 1, false)
        if (n_head_kv[il] == 0) {
            if ((rc = hy_mamba2_load_layer(m, L, il, &d, &n_rec, err)) != HY_OK)
                return rc;
        } else {
            if ((rc = hy_blk_load_attention(m, L, il, (int32_t)n_head[il],
                                            (int32_t)n_head_kv[il], hd, hdv, err)) != HY_OK)
                return rc;
        }
        W(ffn_norm, "ffn_norm.weight", E, 1, false)
        if (moe) {
            hy_moe_t *mo = &L->moe;

            L->ffn = HY_FFN_MOE;
            W(moe.gate_inp, "ffn_gate_inp.weight", E, n_expert, false)
            W3(moe.gate_exps, "ffn_gate_exps.weight", E, F, n_expert)
            W3(moe.up_exps, "ffn_up_exps.weight", E, F, n_expert)
            W3(moe.down_exps, "ffn_down_exps.weight", F, E, n_expert)
            mo->n_expert = (int32_t)n_expert;
            mo->n_expert_used = (int32_t)n_used;
            mo->n_ff_exp = (int32_t)F;
            /* top-k of the logits, softmax over those k == softmax, then
             * renormalise the chosen k */
            mo->softmax_gating = true;
            mo->norm_topk = true;
            mo->weights_scale = 1.0f;
            mo->norm_eps = 0.0f;
            L->n_ff_shexp = (int32_t)n_ff_sh;
            W(ffn_gate_shexp, "ffn_gate_shexp.weight", E, n_ff_sh, false)
            W(ffn_up_shexp, "ffn_up_shexp.weight", E, n_ff_sh, false)
            W(ffn_down_shexp, "ffn_down_shexp.weight", n_ff_sh, E, false)
            L->n_ff = L->n_ff_shexp; /* f->gate / f->up hold the shared expert */
        } else {
            L->ffn = HY_FFN_DENSE;
            L->n_ff = (int32_t)F;
            W(ffn_gate, "ffn_gate.weight", E, F, false)
            W(ffn_up, "ffn_up.weight", E, F, false)
            W(ffn_down, "ffn_down.weight", F, E, false)
        }
#undef W
#undef W3
    }
    m->n_rec_layers = n_rec;
    if (moe)
        m->scratch_per_tok[3] = E; /* routed experts' output */
    return HY_OK;
}

/* MoE FFN plus the shared expert: out = moe(in) + down(silu(gate(in)) *
 * up(in)); in and out may alias (in is read before out is written). */
static void hy_gh_moe(hy_model_t *m, hy_fwd_t *f, const hy_layer_t *L, int32_t n,
                      const float *in, float *out)
{
    hy_backend_t *be = f->be;
    const struct hy_backend_i *op = be->i;
    float *routed = f->scratch[3];

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
    const hy_rope_t *rope = m->rope.n_rot > 0 ? &m->rope : NULL;
    int rc;

    if ((rc = hy_blk_check(f, b, n_out, err)) != HY_OK)
        return rc;
    hy_blk_embed(m, f, b);
    for (int32_t il = 0; il < m->n_layer; il++) {
        const hy_layer_t *L = &m->layers[il];

        op->rmsnorm(f->be, f->x, &L->attn_norm, f->xn, n, E, m->norm_eps);
        if (L->kind == HY_LAYER_MAMBA2)
            hy_mamba2_mixer(m, f, b, L, f->xn, f->xn);
        else
            hy_blk_attention(m, f, b, L, rope, f->xn, f->xn);
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

const hy_arch_t hy_arch_granite_hybrid = {
    /* .name    = */ "granitehybrid",
    /* .load    = */ hy_gh_load,
    /* .forward = */ hy_gh_forward,
};
