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
#include "model/arch/mamba2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hy_nh_layers(hy_model_t *m, const char *suffix, uint32_t *out, bool required,
                        char *err)
{
    char key[160];
    int rc;

    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    rc = hy_gguf_get_u32_layers(m->gguf, key, out, (uint32_t)m->n_layer, err);
    if (rc == HY_ENOENT && !required) {
        memset(out, 0, sizeof(uint32_t) * (size_t)m->n_layer);
        return HY_OK;
    }
    if (rc == HY_ENOENT)
        return hy_err(err, HY_EFORMAT, "%s: required key '%s' is missing", hy_gguf_path(m->gguf),
                      key);
    return rc;
}

static int hy_nh_load(hy_model_t *m, char *err)
{
    uint32_t n_head[4096], n_head_kv[4096], n_ff[4096], u;
    const int64_t E = m->n_embd;
    hy_mamba2_dims_t d = {0};
    int32_t il, hd, hdv, n_rec = 0, att = -1;
    bool any_mamba = false;
    int rc;

    if ((rc = hy_nh_layers(m, "attention.head_count", n_head, true, err)) != HY_OK ||
        (rc = hy_nh_layers(m, "attention.head_count_kv", n_head_kv, true, err)) != HY_OK ||
        (rc = hy_nh_layers(m, "feed_forward_length", n_ff, true, err)) != HY_OK)
        return rc;
    for (il = 0; il < m->n_layer; il++) {
        if (n_ff[il] > 1u << 20)
            return hy_err(err, HY_EFORMAT, "%s: layer %d: %s.feed_forward_length = %u is out of range",
                          hy_gguf_path(m->gguf), il, m->arch_name, n_ff[il]);
        if (n_ff[il] == 0 && n_head_kv[il] == 0) {
            any_mamba = true;
            continue;
        }
        if (n_ff[il] > 0)
            continue; /* MLP */
        if (n_head[il] == 0 || n_head[il] > 1024 || n_head[il] % n_head_kv[il] != 0)
            return hy_err(err, HY_EFORMAT,
                          "%s: layer %d: head_count %u / head_count_kv %u must be positive, with head_count a multiple of head_count_kv",
                          hy_gguf_path(m->gguf), il, n_head[il], n_head_kv[il]);
        if (att >= 0 && (n_head[il] != n_head[att] || n_head_kv[il] != n_head_kv[att]))
            return hy_err(err, HY_EUNSUPPORTED, "%s: attention layers %d and %d have different head counts",
                          hy_gguf_path(m->gguf), att, il);
        att = att < 0 ? il : att;
    }
    if (any_mamba && (rc = hy_mamba2_read_dims(m, &d, err)) != HY_OK)
        return rc;
    m->n_head = att >= 0 ? (int32_t)n_head[att] : HY_MAX((int32_t)n_head[0], 1);
    m->n_head_kv = att >= 0 ? (int32_t)n_head_kv[att] : 1;
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
    m->attn_scale = 0.0f; /* 1/sqrt(head_dim) unless the file says otherwise */
    if ((rc = hy_model_key_f32(m, "attention.scale", &m->attn_scale, true, err)) != HY_OK)
        return rc;

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

        L->rec_index = -1;
        L->kv_index = -1;
        L->ffn = HY_FFN_NONE;
        L->n_head = (int32_t)n_head[il];
        L->n_head_kv = (int32_t)n_head_kv[il];
#define W(field, name, a, b, opt)                                                          \
    if ((rc = hy_model_layer_weight(m, &L->field, "blk.%d." name, il, a, b, opt, err)) != HY_OK) \
        return rc;
        W(attn_norm, "attn_norm.weight", E, 1, false)
        if (n_ff[il] > 0) {
            L->kind = HY_LAYER_NONE;
            L->ffn = HY_FFN_DENSE;
            L->n_ff = (int32_t)n_ff[il];
            W(ffn_up, "ffn_up.weight", E, n_ff[il], false)
            W(ffn_down, "ffn_down.weight", n_ff[il], E, false)
        } else if (n_head_kv[il] == 0) {
            if ((rc = hy_mamba2_load_layer(m, L, il, &d, &n_rec, err)) != HY_OK)
                return rc;
        } else {
            if ((rc = hy_blk_load_attention(m, L, il, (int32_t)n_head[il],
                                            (int32_t)n_head_kv[il], hd, hdv, err)) != HY_OK)
                return rc;
        }
#undef W
    }
    m->n_rec_layers = n_rec;
    return HY_OK;
}

/* Per layer: x += block(RMSNorm(x)), the block being the layer's one kind. */
static int hy_nh_forward(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b, const int32_t *out_rows,
                         int32_t n_out, float *logits, char *err)
{
    hy_backend_t *be = f->be;
    const struct hy_backend_i *op = be->i;
    const int32_t n = b->n_tokens, E = m->n_embd;
    int rc;

    if ((rc = hy_blk_check(f, b, n_out, err)) != HY_OK)
        return rc;
    hy_blk_embed(m, f, b);
    for (int32_t il = 0; il < m->n_layer; il++) {
        const hy_layer_t *L = &m->layers[il];

        op->rmsnorm(be, f->x, &L->attn_norm, f->xn, n, E, m->norm_eps);
        if (L->kind == HY_LAYER_MAMBA2) {
            hy_mamba2_mixer(m, f, b, L, f->xn, f->xn);
        } else if (L->kind == HY_LAYER_ATTN_FULL) {
            hy_blk_attention(m, f, b, L, NULL, f->xn, f->xn);
        } else {
            op->matmul(be, &L->ffn_up, f->xn, f->up, n);
            op->unary(be, HY_UNARY_RELU_SQR, f->up, f->up, (size_t)n * L->n_ff);
            op->matmul(be, &L->ffn_down, f->up, f->xn, n);
        }
        hy_blk_residual(m, f, f->xn, n);
    }
    return hy_blk_logits(m, f, out_rows, n_out, logits, err);
}

const hy_arch_t hy_arch_nemotron_h = {
    /* .name    = */ "nemotron_h",
    /* .load    = */ hy_nh_load,
    /* .forward = */ hy_nh_forward,
};
