/*
 * arch/lfm2.c - Liquid's LFM2 hybrid (lfm2) and its MoE variant (lfm2moe):
 * gated short-convolution layers and GQA attention layers (per-head q/k
 * RMSNorm, NEOX RoPE), each followed by a SwiGLU FFN (lfm2moe: a sigmoid
 * routed MoE after the leading dense layers).  A layer is a conv layer when
 * its head_count_kv is 0; the final norm is stored as token_embd_norm.
 * Conventions: /work/shared/notes/gguf-and-hybrid-architectures.md, b.2.
 */
#include "model/arch/blocks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* transformers' Lfm2MoeTopKRouter: weights / (sum + 1e-6). */
#define HY_LFM2_MOE_NORM_EPS 1e-6f

/* Reads a required per-layer u32 key "<arch>.<suffix>". */
static int hy_lfm2_layers_u32(hy_model_t *m, const char *suffix, uint32_t *out, bool optional,
                              char *err)
{
    char key[160];
    int rc;

    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    rc = hy_gguf_get_u32_layers(m->gguf, key, out, (uint32_t)m->n_layer, err);
    if (rc == HY_ENOENT && !optional)
        return hy_err(err, HY_EFORMAT, "%s: required key '%s' is missing",
                      hy_gguf_path(m->gguf), key);
    return rc;
}

/* Rows [k*E, (k+1)*E) of in_proj (B, C or x) as a matrix of its own, so
 * each lands in its own dense buffer without strided element-wise ops. */
static int hy_lfm2_in_part(hy_model_t *m, const hy_weight_t *in, int k, hy_weight_t *out,
                           char *err)
{
    *out = *in;
    out->data = (const uint8_t *)in->data + (size_t)k * (size_t)m->n_embd * in->row_bytes;
    out->ne[1] = m->n_embd;
    out->dev = NULL;
    return m->be->i->weight_init(m->be, out, err);
}

static int hy_lfm2_load(hy_model_t *m, char *err)
{
    /* n_layer <= 4096 is checked by hy_model_load */
    uint32_t n_head[4096], n_head_kv[4096], n_ff[4096];
    uint32_t l_cache = 0, n_dense = 0, n_expert = 0, n_used = 0, n_ff_exp = 0, u;
    uint32_t gating = 2, norm_w = 1;
    float w_scale = 1.0f;
    const bool is_moe = strcmp(m->arch_name, "lfm2moe") == 0;
    const int64_t E = m->n_embd;
    const char *path = hy_gguf_path(m->gguf);
    int32_t il, hd = 0, n_attn = 0;
    int rc;

    if ((rc = hy_lfm2_layers_u32(m, "attention.head_count", n_head, false, err)) != HY_OK ||
        (rc = hy_lfm2_layers_u32(m, "attention.head_count_kv", n_head_kv, false, err)) != HY_OK ||
        (rc = hy_lfm2_layers_u32(m, "feed_forward_length", n_ff, false, err)) != HY_OK)
        return rc;
    if ((rc = hy_model_key_u32(m, "shortconv.l_cache", &l_cache, false, err)) != HY_OK)
        return rc;
    if (l_cache < 1 || l_cache > 64)
        return hy_err(err, HY_EFORMAT, "%s: shortconv.l_cache = %u: must be 1..64", path, l_cache);
    u = 0;
    if ((rc = hy_model_key_u32(m, "attention.sliding_window", &u, true, err)) != HY_OK)
        return rc;
    if (u != 0)
        return hy_err(err, HY_EUNSUPPORTED, "%s: %s with sliding-window attention (window %u) "
                      "is not supported", path, m->arch_name, u);
    if (is_moe) {
        if ((rc = hy_model_key_u32(m, "leading_dense_block_count", &n_dense, true, err)) != HY_OK ||
            (rc = hy_model_key_u32(m, "expert_count", &n_expert, false, err)) != HY_OK ||
            (rc = hy_model_key_u32(m, "expert_used_count", &n_used, false, err)) != HY_OK ||
            (rc = hy_model_key_u32(m, "expert_feed_forward_length", &n_ff_exp, false, err)) != HY_OK ||
            (rc = hy_model_key_u32(m, "expert_gating_func", &gating, true, err)) != HY_OK ||
            (rc = hy_model_key_u32(m, "expert_weights_norm", &norm_w, true, err)) != HY_OK ||
            (rc = hy_model_key_f32(m, "expert_weights_scale", &w_scale, true, err)) != HY_OK)
            return rc;
        /* llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID; the converter always writes it */
        if (gating != 2)
            return hy_err(err, HY_EUNSUPPORTED, "%s: lfm2moe expert_gating_func %u (only 2, "
                          "sigmoid, is defined)", path, gating);
        if (n_expert == 0 || n_expert > 4096 || n_used == 0 || n_used > n_expert ||
            n_ff_exp == 0 || n_ff_exp > 1u << 20)
            return hy_err(err, HY_EFORMAT, "%s: %u of %u experts with expert_feed_forward_length "
                          "%u are out of range", path, n_used, n_expert, n_ff_exp);
    }

    for (il = 0; il < m->n_layer; il++) {
        if (n_ff[il] == 0 || n_ff[il] > 1u << 20)
            return hy_err(err, HY_EFORMAT, "%s: layer %d: feed_forward_length %u is out of range",
                          path, il, n_ff[il]);
        if (n_head_kv[il] == 0)
            continue;
        if (n_head[il] == 0 || n_head[il] > 1024 || n_head[il] % n_head_kv[il] != 0 ||
            E % n_head[il] != 0)
            return hy_err(err, HY_EFORMAT, "%s: layer %d: head_count %u / head_count_kv %u must "
                          "be positive, head_count a multiple of head_count_kv and a divisor "
                          "of n_embd %lld", path, il, n_head[il], n_head_kv[il], (long long)E);
        if (n_attn > 0 && (n_head[il] != (uint32_t)m->n_head || n_head_kv[il] != (uint32_t)m->n_head_kv))
            return hy_err(err, HY_EUNSUPPORTED, "%s: attention layers with different head "
                          "counts are not supported", path);
        m->n_head = (int32_t)n_head[il];
        m->n_head_kv = (int32_t)n_head_kv[il];
        n_attn++;
    }
    if (n_attn == 0) {
        /* buffers are sized from the attention geometry: keep them tiny */
        m->n_head = 1;
        m->n_head_kv = 1;
        hd = 1;
    } else {
        hd = (int32_t)(E / m->n_head);
    }
    m->head_dim = hd;
    m->head_dim_v = hd;
    if (n_attn > 0 && (rc = hy_model_read_rope(m, HY_ROPE_NEOX, err)) != HY_OK)
        return rc;

    if ((rc = hy_model_weight(m, &m->tok_embd, "token_embd.weight", E, m->n_vocab, false,
                              err)) != HY_OK ||
        (rc = hy_model_weight(m, &m->output_norm, "token_embd_norm.weight", E, 1, false,
                              err)) != HY_OK ||
        (rc = hy_model_weight(m, &m->output, "output.weight", E, m->n_vocab, true, err)) != HY_OK)
        return rc;
    if (m->output.data == NULL)
        m->output = m->tok_embd; /* tied embeddings */

    m->layers = calloc((size_t)m->n_layer, sizeof *m->layers);
    if (m->layers == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    m->n_kv_layers = 0;
    m->n_rec_layers = 0;
    for (il = 0; il < m->n_layer; il++) {
        hy_layer_t *L = &m->layers[il];
        const int64_t F = n_ff[il];

#define W(field, name, a, b, opt)                                                          \
    if ((rc = hy_model_layer_weight(m, &L->field, "blk.%d." name, il, a, b, opt, err)) != HY_OK) \
        return rc;
        L->n_ff = (int32_t)F;
        W(attn_norm, "attn_norm.weight", E, 1, false)
        W(ffn_norm, "ffn_norm.weight", E, 1, false)
        if (n_head_kv[il] == 0) {
            L->kind = HY_LAYER_SHORTCONV;
            L->kv_index = -1;
            L->rec_index = m->n_rec_layers++;
            L->conv_floats = (int64_t)(l_cache - 1) * E;
            L->rec_floats = 0;
            W(sc_in, "shortconv.in_proj.weight", E, 3 * E, false)
            W(sc_conv, "shortconv.conv.weight", l_cache, E, false)
            W(sc_out, "shortconv.out_proj.weight", E, E, false)
            if ((rc = hy_lfm2_in_part(m, &L->sc_in, 0, &L->sc_in_b, err)) != HY_OK ||
                (rc = hy_lfm2_in_part(m, &L->sc_in, 1, &L->sc_in_c, err)) != HY_OK ||
                (rc = hy_lfm2_in_part(m, &L->sc_in, 2, &L->sc_in_x, err)) != HY_OK)
                return rc;
        } else {
            const int64_t KV = (int64_t)n_head_kv[il] * hd;
            L->kind = HY_LAYER_ATTN_FULL;
            L->kv_index = m->n_kv_layers++;
            L->rec_index = -1;
            L->n_head = (int32_t)n_head[il];
            L->n_head_kv = (int32_t)n_head_kv[il];
            W(wq, "attn_q.weight", E, E, false)
            W(wk, "attn_k.weight", E, KV, false)
            W(wv, "attn_v.weight", E, KV, false)
            W(wo, "attn_output.weight", E, E, false)
            W(q_norm, "attn_q_norm.weight", hd, 1, false)
            W(k_norm, "attn_k_norm.weight", hd, 1, false)
        }
        if (is_moe && il >= (int32_t)n_dense) {
            hy_moe_t *mo = &L->moe;
            L->ffn = HY_FFN_MOE;
            W(moe.gate_inp, "ffn_gate_inp.weight", E, n_expert, false)
            W(moe.exp_bias, "exp_probs_b.bias", n_expert, 1, false)
#define W3(field, name, a, b, c)                                                              \
    {                                                                                          \
        char nm[96];                                                                           \
        snprintf(nm, sizeof nm, "blk.%d." name, il);                                           \
        if ((rc = hy_model_weight3(m, &L->field, nm, a, b, c, false, err)) != HY_OK)          \
            return rc;                                                                         \
    }
            W3(moe.gate_exps, "ffn_gate_exps.weight", E, n_ff_exp, n_expert)
            W3(moe.up_exps, "ffn_up_exps.weight", E, n_ff_exp, n_expert)
            W3(moe.down_exps, "ffn_down_exps.weight", n_ff_exp, E, n_expert)
#undef W3
            mo->n_expert = (int32_t)n_expert;
            mo->n_expert_used = (int32_t)n_used;
            mo->n_ff_exp = (int32_t)n_ff_exp;
            mo->softmax_gating = false;
            mo->norm_topk = norm_w != 0;
            mo->norm_eps = HY_LFM2_MOE_NORM_EPS;
            mo->weights_scale = w_scale;
            L->n_ff = 0; /* no dense FFN buffers needed for this layer */
        } else {
            L->ffn = HY_FFN_DENSE;
            W(ffn_gate, "ffn_gate.weight", E, F, false)
            W(ffn_up, "ffn_up.weight", E, F, false)
            W(ffn_down, "ffn_down.weight", F, E, false)
        }
#undef W
    }
    /* conv layers: B | C | x parts of in_proj, n_embd floats each */
    if (m->n_rec_layers > 0)
        m->scratch_per_tok[0] = 3 * E;
    /* MoE layers: the expert mixture's output */
    if (is_moe && n_dense < (uint32_t)m->n_layer)
        m->scratch_per_tok[1] = E;
    return HY_OK;
}

/* Gated short conv: [B|C|x] = W_in h; u = B*x; y = causal conv(u) with the
 * last L-1 u's of the sequence carried in its state slot; out = W_out (C*y). */
static void hy_lfm2_shortconv(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b,
                              const hy_layer_t *L, const float *in, float *out)
{
    hy_backend_t *be = f->be;
    const struct hy_backend_i *op = be->i;
    const int32_t n = b->n_tokens, E = m->n_embd;
    const size_t nE = (size_t)n * E;
    float *B = f->scratch[0], *C = B + nE, *X = C + nE;

    op->matmul(be, &L->sc_in_b, in, B, n);
    op->matmul(be, &L->sc_in_c, in, C, n);
    op->matmul(be, &L->sc_in_x, in, X, n);
    op->mul(be, B, X, nE);
    op->conv1d(be, L->rec_index, b, B, E, &L->sc_conv, NULL, X, E, false);
    op->mul(be, X, C, nE);
    op->matmul(be, &L->sc_out, X, out, n);
}

/* Embed; per layer: operator norm, conv or attention, residual, FFN norm,
 * SwiGLU or MoE FFN, residual; final norm (token_embd_norm); logits. */
static int hy_lfm2_forward(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b,
                           const int32_t *out_rows, int32_t n_out, float *logits, char *err)
{
    const struct hy_backend_i *op = f->be->i;
    const int32_t n = b->n_tokens, E = m->n_embd;
    int32_t il;
    int rc;

    if ((rc = hy_blk_check(f, b, n_out, err)) != HY_OK)
        return rc;
    hy_blk_embed(m, f, b);
    for (il = 0; il < m->n_layer; il++) {
        const hy_layer_t *L = &m->layers[il];

        op->rmsnorm(f->be, f->x, &L->attn_norm, f->xn, n, E, m->norm_eps);
        if (L->kind == HY_LAYER_SHORTCONV)
            hy_lfm2_shortconv(m, f, b, L, f->xn, f->xn);
        else
            hy_blk_attention(m, f, b, L, &m->rope, f->xn, f->xn);
        hy_blk_residual(m, f, f->xn, n);

        op->rmsnorm(f->be, f->x, &L->ffn_norm, f->xn, n, E, m->norm_eps);
        if (L->ffn == HY_FFN_MOE) {
            /* moe's output may not alias its input */
            op->moe(f->be, &L->moe, f->xn, f->scratch[1], n, E);
            hy_blk_residual(m, f, f->scratch[1], n);
        } else {
            hy_blk_ffn(m, f, L, n, f->xn, f->xn);
            hy_blk_residual(m, f, f->xn, n);
        }
    }
    return hy_blk_logits(m, f, out_rows, n_out, logits, err);
}

const hy_arch_t hy_arch_lfm2 = {
    /* .name    = */ "lfm2",
    /* .load    = */ hy_lfm2_load,
    /* .forward = */ hy_lfm2_forward,
};
