/*
 * arch/nemotron_h.c - nemotron_h: NVIDIA Nemotron-H.  Every layer is one
 * pre-norm residual block of a single kind, decided as llama.cpp does from
 * the per-layer arrays: head_count_kv == 0 and feed_forward_length == 0 is a
 * Mamba-2 mixer, head_count_kv > 0 with feed_forward_length == 0 is GQA
 * attention (no positional encoding), anything with feed_forward_length > 0
 * an MLP out = down(relu(up(x))^2) (no gate).  Notes a, b.3; llama.cpp
 * src/models/nemotron-h.cpp.
 */
#include "model/arch/blocks.h"
#include "model/arch/load.h"
#include "model/arch/mamba2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The forward pass's buffers: only the Mamba-2 mixer's. */
typedef struct {
    hy_mamba2_scratch_t m2;
} hy_nh_scratch_t;

/* The MLP block: out = down(relu(up(x))^2), no gate. */
static int hy_nh_load_mlp(hy_model_t *m, hy_layer_t *L, int32_t il, uint32_t n_ff, char *err)
{
    const int64_t E = m->n_embd;
    const hy_layer_tensor_t t[] = {
        {HY_LT(ffn_up), "ffn_up.weight", {E, n_ff}, false},
        {HY_LT(ffn_down), "ffn_down.weight", {n_ff, E}, false},
    };

    L->kind = HY_LAYER_NONE;
    L->ffn = HY_FFN_DENSE;
    L->n_ff = (int32_t)n_ff;
    return hy_model_layer_tensors(m, L, il, t, HY_ARRAY_LEN(t), err);
}

static int hy_nh_load(hy_model_t *m, char *err)
{
    uint32_t n_head[HY_MODEL_MAX_LAYERS], n_head_kv[HY_MODEL_MAX_LAYERS], n_ff[HY_MODEL_MAX_LAYERS];
    bool is_attn[HY_MODEL_MAX_LAYERS], any_mamba = false;
    const int64_t E = m->n_embd;
    hy_mamba2_dims_t d = {0};
    int32_t il;
    int rc;

    if ((rc = hy_model_layers_u32(m, "attention.head_count", n_head, false, err)) != HY_OK ||
        (rc = hy_model_layers_u32(m, "attention.head_count_kv", n_head_kv, false, err)) != HY_OK ||
        (rc = hy_model_layers_u32(m, "feed_forward_length", n_ff, false, err)) != HY_OK ||
        (rc = hy_model_check_ff(m, n_ff, true, err)) != HY_OK)
        return rc;
    /* llama.cpp's rule: an MLP has feed_forward_length > 0; otherwise kv
     * heads make it attention, none a Mamba-2 mixer */
    for (il = 0; il < m->n_layer; il++) {
        is_attn[il] = n_ff[il] == 0 && n_head_kv[il] > 0;
        any_mamba = any_mamba || (n_ff[il] == 0 && n_head_kv[il] == 0);
    }
    if ((rc = hy_model_attn_dims(m, n_head, n_head_kv, is_attn, err)) != HY_OK ||
        (any_mamba && (rc = hy_mamba2_read_dims(m, &d, err)) != HY_OK))
        return rc;
    m->attn_scale = 0.0f; /* 1/sqrt(head_dim) unless the file says otherwise */
    if ((rc = hy_model_key_f32(m, "attention.scale", &m->attn_scale, true, err)) != HY_OK ||
        (rc = hy_model_load_common(m, "output_norm.weight", err)) != HY_OK)
        return rc;
    if (any_mamba)
        hy_mamba2_scratch(m, &d, sizeof(hy_nh_scratch_t), offsetof(hy_nh_scratch_t, m2), 0);

    for (il = 0; il < m->n_layer; il++) {
        hy_layer_t *L = &m->layers[il];
        const hy_layer_tensor_t norm[] = {{HY_LT(attn_norm), "attn_norm.weight", {E}, false}};

        L->ffn = HY_FFN_NONE;
        if ((rc = hy_model_layer_tensors(m, L, il, norm, 1, err)) != HY_OK)
            return rc;
        if (n_ff[il] > 0)
            rc = hy_nh_load_mlp(m, L, il, n_ff[il], err);
        else if (is_attn[il])
            rc = hy_model_load_attention(m, L, il, (int32_t)n_head[il], (int32_t)n_head_kv[il], err);
        else
            rc = hy_mamba2_load_layer(m, L, il, &d, err);
        if (rc != HY_OK)
            return rc;
        L->rope = NULL; /* no positional encoding */
    }
    return HY_OK;
}

/* Per layer: x += block(RMSNorm(x)), the block being the layer's one kind. */
static int hy_nh_forward(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b, const int32_t *out_rows,
                         int32_t n_out, float *logits, char *err)
{
    hy_backend_t *be = f->be;
    const struct hy_backend_i *op = be->i;
    const int32_t n = b->n_tokens, E = m->n_embd;
    const hy_nh_scratch_t *s = f->scratch;
    int rc;

    if ((rc = hy_blk_check(f, b, n_out, err)) != HY_OK)
        return rc;
    hy_blk_embed(m, f, b);
    for (int32_t il = 0; il < m->n_layer; il++) {
        const hy_layer_t *L = &m->layers[il];

        op->rmsnorm(be, f->x, &L->attn_norm, f->xn, n, E, m->norm_eps);
        if (L->kind == HY_LAYER_MAMBA2) {
            hy_mamba2_mixer(m, f, &s->m2, b, L, f->xn, f->xn);
        } else if (L->kind == HY_LAYER_ATTN_FULL) {
            hy_blk_attention(m, f, b, L, f->xn, f->xn);
        } else {
            op->matmul(be, &L->ffn_up, f->xn, f->up, n);
            op->unary(be, HY_UNARY_RELU_SQR, f->up, f->up, (size_t)n * L->n_ff);
            op->matmul(be, &L->ffn_down, f->up, f->xn, n);
        }
        hy_blk_residual(m, f, f->xn, n);
    }
    return hy_blk_logits(m, f, out_rows, n_out, logits, err);
}

static const hy_arch_t hy_arch_nemotron_h = {
    /* .name    = */ "nemotron_h",
    /* .load    = */ hy_nh_load,
    /* .forward = */ hy_nh_forward,
};
