/*
 * arch/llama.c - the dense decoder family: llama (SmolLM2, Llama 2/3),
 * qwen2 (q/k/v biases) and qwen3 (per-head q/k RMSNorm).  They differ only in
 * which optional tensors exist and in the RoPE pairing, so one file reads all
 * three; the forward pass below is the whole network, top to bottom.
 */
#include "model/arch/blocks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hy_llama_load(hy_model_t *m, char *err)
{
    /* n_layer <= 4096 is checked by hy_model_load */
    uint32_t n_head[4096], n_head_kv[4096], n_ff[4096], u;
    const bool is_llama = strcmp(m->arch_name, "llama") == 0;
    const int64_t E = m->n_embd;
    int32_t il, hd, hdv;
    int rc;

    {
        char key[160];

        snprintf(key, sizeof key, "%s.attention.head_count", m->arch_name);
        if ((rc = hy_gguf_get_u32_layers(m->gguf, key, n_head, (uint32_t)m->n_layer, err)) != HY_OK)
            return rc == HY_ENOENT ? hy_err(err, HY_EFORMAT, "%s: required key '%s' is missing",
                                            hy_gguf_path(m->gguf), key) : rc;
        snprintf(key, sizeof key, "%s.attention.head_count_kv", m->arch_name);
        rc = hy_gguf_get_u32_layers(m->gguf, key, n_head_kv, (uint32_t)m->n_layer, err);
        if (rc == HY_ENOENT)
            memcpy(n_head_kv, n_head, sizeof(uint32_t) * (size_t)m->n_layer);
        else if (rc != HY_OK)
            return rc;
        snprintf(key, sizeof key, "%s.feed_forward_length", m->arch_name);
        if ((rc = hy_gguf_get_u32_layers(m->gguf, key, n_ff, (uint32_t)m->n_layer, err)) != HY_OK)
            return rc == HY_ENOENT ? hy_err(err, HY_EFORMAT, "%s: required key '%s' is missing",
                                            hy_gguf_path(m->gguf), key) : rc;
    }
    for (il = 0; il < m->n_layer; il++) {
        if (n_head[il] == 0 || n_head_kv[il] == 0 || n_head[il] % n_head_kv[il] != 0 ||
            n_head[il] > 1024)
            return hy_err(err, HY_EFORMAT,
                          "%s: layer %d: head_count %u / head_count_kv %u must be positive, with head_count a multiple of head_count_kv",
                          hy_gguf_path(m->gguf), il, n_head[il], n_head_kv[il]);
        if (n_ff[il] == 0 || n_ff[il] > 1u << 20)
            return hy_err(err, HY_EFORMAT, "%s: layer %d: feed_forward_length %u is out of range",
                          hy_gguf_path(m->gguf), il, n_ff[il]);
    }
    m->n_head = (int32_t)n_head[0];
    m->n_head_kv = (int32_t)n_head_kv[0];
    for (il = 1; il < m->n_layer; il++) {
        if (n_head[il] != n_head[0] || n_head_kv[il] != n_head_kv[0])
            return hy_err(err, HY_EUNSUPPORTED, "%s: per-layer head counts that differ between layers are not supported for %s",
                          hy_gguf_path(m->gguf), m->arch_name);
    }
    u = (uint32_t)(m->n_embd / m->n_head);
    if ((rc = hy_model_key_u32(m, "attention.key_length", &u, true, err)) != HY_OK)
        return rc;
    hd = (int32_t)u;
    u = (uint32_t)hd;
    if ((rc = hy_model_key_u32(m, "attention.value_length", &u, true, err)) != HY_OK)
        return rc;
    hdv = (int32_t)u;
    if (hd <= 0 || hd > 1024 || hdv <= 0 || hdv > 1024)
        return hy_err(err, HY_EFORMAT, "%s: attention head size %d/%d is out of range",
                      hy_gguf_path(m->gguf), hd, hdv);
    m->head_dim = hd;
    m->head_dim_v = hdv;
    if ((rc = hy_model_read_rope(m, is_llama ? HY_ROPE_NORM : HY_ROPE_NEOX, err)) != HY_OK)
        return rc;

    if ((rc = hy_model_weight(m, &m->tok_embd, "token_embd.weight", E, m->n_vocab, false,
                              err)) != HY_OK)
        return rc;
    if ((rc = hy_model_weight(m, &m->output_norm, "output_norm.weight", E, 1, false, err)) != HY_OK)
        return rc;
    if ((rc = hy_model_weight(m, &m->output, "output.weight", E, m->n_vocab, true, err)) != HY_OK)
        return rc;
    if (m->output.data == NULL)
        m->output = m->tok_embd; /* tied embeddings */

    m->layers = calloc((size_t)m->n_layer, sizeof *m->layers);
    if (m->layers == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    m->n_kv_layers = 0; /* counted by hy_blk_load_attention */
    for (il = 0; il < m->n_layer; il++) {
        hy_layer_t *L = &m->layers[il];
        const int64_t F = n_ff[il];

        L->ffn = HY_FFN_DENSE;
        L->rec_index = -1;
        L->n_ff = (int32_t)F;
        if ((rc = hy_blk_load_attention(m, L, il, (int32_t)n_head[il], (int32_t)n_head_kv[il],
                                        hd, hdv, err)) != HY_OK)
            return rc;
#define W(field, name, a, b, opt)                                                          \
    if ((rc = hy_model_layer_weight(m, &L->field, "blk.%d." name, il, a, b, opt, err)) != HY_OK) \
        return rc;
        W(attn_norm, "attn_norm.weight", E, 1, false)
        W(q_norm, "attn_q_norm.weight", hd, 1, true)
        W(k_norm, "attn_k_norm.weight", hd, 1, true)
        W(ffn_norm, "ffn_norm.weight", E, 1, false)
        W(ffn_gate, "ffn_gate.weight", E, F, false)
        W(ffn_up, "ffn_up.weight", E, F, false)
        W(ffn_down, "ffn_down.weight", F, E, false)
#undef W
    }
    return HY_OK;
}

/* The dense decoder: pre-norm attention and SwiGLU blocks with residuals. */
static int hy_llama_forward(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b,
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
        hy_blk_attention(m, f, b, L, &m->rope, f->xn, f->xn);
        hy_blk_residual(m, f, f->xn, n);

        op->rmsnorm(f->be, f->x, &L->ffn_norm, f->xn, n, E, m->norm_eps);
        hy_blk_ffn(m, f, L, n, f->xn, f->xn);
        hy_blk_residual(m, f, f->xn, n);
    }
    return hy_blk_logits(m, f, out_rows, n_out, logits, err);
}

const hy_arch_t hy_arch_llama = {
    /* .name    = */ "llama",
    /* .load    = */ hy_llama_load,
    /* .forward = */ hy_llama_forward,
};
