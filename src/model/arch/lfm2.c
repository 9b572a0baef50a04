/*
 * arch/lfm2.c - Liquid's LFM2 hybrid (lfm2) and its MoE variant (lfm2moe):
 * gated short-convolution layers and GQA attention layers (per-head q/k
 * RMSNorm, NEOX RoPE), each followed by a SwiGLU FFN (lfm2moe: a sigmoid
 * routed MoE after the leading dense layers).  A layer is a conv layer when
 * its head_count_kv is 0; the final norm is stored as token_embd_norm.
 * Conventions: /work/shared/notes/gguf-and-hybrid-architectures.md, b.2.
 */
#include "model/arch/blocks.h"
#include "model/arch/load.h"

#include <string.h>

/* transformers' Lfm2MoeTopKRouter: weights / (sum + 1e-6). */
#define HY_LFM2_MOE_NORM_EPS 1e-6f

/* The forward pass's buffers: a conv layer's B | C | x parts of in_proj,
 * all live at once, and a MoE layer's output (its input stays in xn). */
typedef struct {
    float *b, *c, *x; /* (T, n_embd) each */
    float *moe_out;   /* (T, n_embd) */
} hy_lfm2_scratch_t;
enum { HY_LFM2_R_B, HY_LFM2_R_C, HY_LFM2_R_X, HY_LFM2_R_MOE };

/* lfm2moe's routing keys, checked. */
typedef struct {
    uint32_t n_dense, n_expert, n_used, n_ff_exp, gating, norm_w;
    float w_scale;
} hy_lfm2_moe_t;

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

static int hy_lfm2_read_moe(hy_model_t *m, hy_lfm2_moe_t *x, char *err)
{
    const char *path = hy_gguf_path(m->gguf);
    int rc;

    *x = (hy_lfm2_moe_t){.gating = 2, .norm_w = 1, .w_scale = 1.0f};
    if ((rc = hy_model_key_u32(m, "leading_dense_block_count", &x->n_dense, true, err)) != HY_OK ||
        (rc = hy_model_key_u32(m, "expert_count", &x->n_expert, false, err)) != HY_OK ||
        (rc = hy_model_key_u32(m, "expert_used_count", &x->n_used, false, err)) != HY_OK ||
        (rc = hy_model_key_u32(m, "expert_feed_forward_length", &x->n_ff_exp, false, err)) != HY_OK ||
        (rc = hy_model_key_u32(m, "expert_gating_func", &x->gating, true, err)) != HY_OK ||
        (rc = hy_model_key_u32(m, "expert_weights_norm", &x->norm_w, true, err)) != HY_OK ||
        (rc = hy_model_key_f32(m, "expert_weights_scale", &x->w_scale, true, err)) != HY_OK)
        return rc;
    /* llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID; the converter always writes it */
    if (x->gating != 2)
        return hy_err(err, HY_EUNSUPPORTED, "%s: lfm2moe expert_gating_func %u (only 2, "
                      "sigmoid, is defined)", path, x->gating);
    if (x->n_expert == 0 || x->n_expert > HY_MODEL_MAX_EXPERTS || x->n_used == 0 ||
        x->n_used > x->n_expert || x->n_ff_exp == 0 || x->n_ff_exp > 1u << 20)
        return hy_err(err, HY_EFORMAT, "%s: %u of %u experts with expert_feed_forward_length "
                      "%u are out of range", path, x->n_used, x->n_expert, x->n_ff_exp);
    return HY_OK;
}

/* A gated short-conv layer: in_proj (and its B / C / x row views), the
 * depthwise kernel of l_cache taps, out_proj; its conv window is a state. */
static int hy_lfm2_load_conv(hy_model_t *m, hy_layer_t *L, int32_t il, uint32_t l_cache,
                             char *err)
{
    const int64_t E = m->n_embd;
    const hy_layer_tensor_t t[] = {
        {HY_LT(sc_in), "shortconv.in_proj.weight", {E, 3 * E}, false},
        {HY_LT(sc_conv), "shortconv.conv.weight", {l_cache, E}, false},
        {HY_LT(sc_out), "shortconv.out_proj.weight", {E, E}, false},
    };
    int rc;

    L->kind = HY_LAYER_SHORTCONV;
    L->rec_index = m->n_rec_layers++;
    L->conv_floats = (int64_t)(l_cache - 1) * E;
    L->rec_floats = 0;
    if ((rc = hy_model_layer_tensors(m, L, il, t, HY_ARRAY_LEN(t), err)) != HY_OK ||
        (rc = hy_lfm2_in_part(m, &L->sc_in, 0, &L->sc_in_b, err)) != HY_OK ||
        (rc = hy_lfm2_in_part(m, &L->sc_in, 1, &L->sc_in_c, err)) != HY_OK ||
        (rc = hy_lfm2_in_part(m, &L->sc_in, 2, &L->sc_in_x, err)) != HY_OK)
        return rc;
    hy_model_scratch(m, sizeof(hy_lfm2_scratch_t), offsetof(hy_lfm2_scratch_t, b), HY_LFM2_R_B, E);
    hy_model_scratch(m, sizeof(hy_lfm2_scratch_t), offsetof(hy_lfm2_scratch_t, c), HY_LFM2_R_C, E);
    hy_model_scratch(m, sizeof(hy_lfm2_scratch_t), offsetof(hy_lfm2_scratch_t, x), HY_LFM2_R_X, E);
    return HY_OK;
}

/* An attention layer: GQA with per-head q/k RMSNorm; with
 * attention.sliding_window every attention layer slides (llama.cpp's
 * LFM2: all non-recurrent layers are SWA when the key is set). */
static int hy_lfm2_load_attn(hy_model_t *m, hy_layer_t *L, int32_t il, uint32_t n_head,
                             uint32_t n_head_kv, uint32_t window, char *err)
{
    const hy_layer_tensor_t t[] = {
        {HY_LT(q_norm), "attn_q_norm.weight", {m->head_dim}, false},
        {HY_LT(k_norm), "attn_k_norm.weight", {m->head_dim}, false},
    };
    int rc;

    if ((rc = hy_model_load_attention(m, L, il, (int32_t)n_head, (int32_t)n_head_kv, err)) != HY_OK ||
        (rc = hy_model_layer_tensors(m, L, il, t, HY_ARRAY_LEN(t), err)) != HY_OK)
        return rc;
    if (window > 0) {
        L->kind = HY_LAYER_ATTN_SWA;
        L->window = (int32_t)window;
        m->n_swa_layers++;
    }
    return HY_OK;
}

/* lfm2moe's routed experts (sigmoid gating with a selection bias). */
static int hy_lfm2_load_moe(hy_model_t *m, hy_layer_t *L, int32_t il, const hy_lfm2_moe_t *x,
                            char *err)
{
    const hy_layer_tensor_t bias[] = {
        {HY_LT(moe.exp_bias), "exp_probs_b.bias", {x->n_expert}, false},
    };
    hy_moe_t *mo = &L->moe;
    int rc;

    if ((rc = hy_model_load_experts(m, L, il, (int32_t)x->n_expert, (int32_t)x->n_used,
                                    (int32_t)x->n_ff_exp, err)) != HY_OK ||
        (rc = hy_model_layer_tensors(m, L, il, bias, 1, err)) != HY_OK)
        return rc;
    mo->softmax_gating = false;
    mo->norm_topk = x->norm_w != 0;
    mo->norm_eps = HY_LFM2_MOE_NORM_EPS;
    mo->weights_scale = x->w_scale;
    L->n_ff = 0; /* no dense FFN buffers needed for this layer */
    hy_model_scratch(m, sizeof(hy_lfm2_scratch_t), offsetof(hy_lfm2_scratch_t, moe_out),
                     HY_LFM2_R_MOE, m->n_embd);
    return HY_OK;
}

static int hy_lfm2_load(hy_model_t *m, char *err)
{
    uint32_t n_head[HY_MODEL_MAX_LAYERS], n_head_kv[HY_MODEL_MAX_LAYERS], n_ff[HY_MODEL_MAX_LAYERS];
    bool is_attn[HY_MODEL_MAX_LAYERS];
    uint32_t l_cache = 0, window = 0;
    const bool is_moe = strcmp(m->arch_name, "lfm2moe") == 0;
    const int64_t E = m->n_embd;
    const char *path = hy_gguf_path(m->gguf);
    hy_lfm2_moe_t moe = {0};
    int32_t il, n_attn = 0;
    int rc;

    if ((rc = hy_model_layers_u32(m, "attention.head_count", n_head, false, err)) != HY_OK ||
        (rc = hy_model_layers_u32(m, "attention.head_count_kv", n_head_kv, false, err)) != HY_OK ||
        (rc = hy_model_layers_u32(m, "feed_forward_length", n_ff, false, err)) != HY_OK ||
        (rc = hy_model_check_ff(m, n_ff, false, err)) != HY_OK ||
        (rc = hy_model_key_u32(m, "shortconv.l_cache", &l_cache, false, err)) != HY_OK ||
        (rc = hy_model_key_u32(m, "attention.sliding_window", &window, true, err)) != HY_OK)
        return rc;
    if (l_cache < 1 || l_cache > 64)
        return hy_err(err, HY_EFORMAT, "%s: shortconv.l_cache = %u: must be 1..64", path, l_cache);
    if (window > (uint32_t)INT32_MAX)
        return hy_err(err, HY_EFORMAT, "%s: %s.attention.sliding_window = %u is out of range",
                      path, m->arch_name, window);
    if (is_moe && (rc = hy_lfm2_read_moe(m, &moe, err)) != HY_OK)
        return rc;
    for (il = 0; il < m->n_layer; il++) {
        is_attn[il] = n_head_kv[il] != 0; /* a conv layer has no kv heads */
        n_attn += is_attn[il];
    }
    if ((rc = hy_model_attn_dims(m, n_head, n_head_kv, is_attn, err)) != HY_OK ||
        (n_attn > 0 && (rc = hy_model_read_rope(m, HY_ROPE_NEOX, err)) != HY_OK) ||
        (rc = hy_model_load_common(m, "token_embd_norm.weight", err)) != HY_OK)
        return rc;

    for (il = 0; il < m->n_layer; il++) {
        hy_layer_t *L = &m->layers[il];
        const hy_layer_tensor_t norms[] = {
            {HY_LT(attn_norm), "attn_norm.weight", {E}, false},
            {HY_LT(ffn_norm), "ffn_norm.weight", {E}, false},
        };

        L->n_ff = (int32_t)n_ff[il];
        if ((rc = hy_model_layer_tensors(m, L, il, norms, HY_ARRAY_LEN(norms), err)) != HY_OK)
            return rc;
        rc = is_attn[il] ? hy_lfm2_load_attn(m, L, il, n_head[il], n_head_kv[il], window, err)
                         : hy_lfm2_load_conv(m, L, il, l_cache, err);
        if (rc != HY_OK)
            return rc;
        rc = is_moe && il >= (int32_t)moe.n_dense ? hy_lfm2_load_moe(m, L, il, &moe, err)
                                                  : hy_model_load_ffn(m, L, il, (int32_t)n_ff[il], err);
        if (rc != HY_OK)
            return rc;
    }
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
    const hy_lfm2_scratch_t *s = f->scratch;
    float *B = s->b, *C = s->c, *X = s->x;

    const hy_weight_t *in_w[3] = {&L->sc_in_b, &L->sc_in_c, &L->sc_in_x};
    float *const in_y[3] = {B, C, X};

    hy_backend_matmul_n(be, in_w, 3, in, in_y, n);
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
            hy_blk_attention(m, f, b, L, f->xn, f->xn);
        hy_blk_residual(m, f, f->xn, n);

        op->rmsnorm(f->be, f->x, &L->ffn_norm, f->xn, n, E, m->norm_eps);
        if (L->ffn == HY_FFN_MOE) {
            /* moe's output may not alias its input */
            const hy_lfm2_scratch_t *s = f->scratch;

            op->moe(f->be, &L->moe, f->xn, s->moe_out, n, E);
            hy_blk_residual(m, f, s->moe_out, n);
        } else {
            hy_blk_ffn(m, f, L, n, f->xn, f->xn);
            hy_blk_residual(m, f, f->xn, n);
        }
    }
    return hy_blk_logits(m, f, out_rows, n_out, logits, err);
}

static const hy_arch_t hy_arch_lfm2 = {
    /* .name    = */ "lfm2",
    /* .load    = */ hy_lfm2_load,
    /* .forward = */ hy_lfm2_forward,
};
