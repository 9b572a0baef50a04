/*
 * arch/llama.c - the dense decoder family: llama (SmolLM2, Llama 2/3),
 * qwen2 (q/k/v biases) and qwen3 (per-head q/k RMSNorm).  They differ only in
 * which optional tensors exist and in the RoPE pairing, so one file reads all
 * three; the forward pass below is the whole network, top to bottom.
 */
#include "model/arch/blocks.h"
#include "model/arch/load.h"

#include <string.h>

static int hy_llama_load(hy_model_t *m, char *err)
{
    uint32_t n_head[HY_MODEL_MAX_LAYERS], n_head_kv[HY_MODEL_MAX_LAYERS], n_ff[HY_MODEL_MAX_LAYERS];
    const bool is_llama = strcmp(m->arch_name, "llama") == 0;
    const int64_t E = m->n_embd;
    int rc;

    /* head_count_kv defaults to head_count (llama.cpp: no GQA) */
    if ((rc = hy_model_layers_u32(m, "attention.head_count", n_head, false, err)) != HY_OK)
        return rc;
    memcpy(n_head_kv, n_head, sizeof(uint32_t) * (size_t)m->n_layer);
    if ((rc = hy_model_layers_u32(m, "attention.head_count_kv", n_head_kv, true, err)) != HY_OK ||
        (rc = hy_model_layers_u32(m, "feed_forward_length", n_ff, false, err)) != HY_OK ||
        (rc = hy_model_check_ff(m, n_ff, false, err)) != HY_OK ||
        (rc = hy_model_attn_dims(m, n_head, n_head_kv, NULL, err)) != HY_OK ||
        (rc = hy_model_read_rope(m, is_llama ? HY_ROPE_NORM : HY_ROPE_NEOX, err)) != HY_OK ||
        (rc = hy_model_load_common(m, "output_norm.weight", err)) != HY_OK)
        return rc;
    for (int32_t il = 0; il < m->n_layer; il++) {
        hy_layer_t *L = &m->layers[il];
        const hy_layer_tensor_t norms[] = {
            {HY_LT(attn_norm), "attn_norm.weight", {E}, false},
            {HY_LT(q_norm), "attn_q_norm.weight", {m->head_dim}, true}, /* qwen3 */
            {HY_LT(k_norm), "attn_k_norm.weight", {m->head_dim}, true},
            {HY_LT(ffn_norm), "ffn_norm.weight", {E}, false},
        };

        if ((rc = hy_model_load_attention(m, L, il, (int32_t)n_head[il], (int32_t)n_head_kv[il],
                                          err)) != HY_OK ||
            (rc = hy_model_layer_tensors(m, L, il, norms, HY_ARRAY_LEN(norms), err)) != HY_OK ||
            (rc = hy_model_load_ffn(m, L, il, (int32_t)n_ff[il], err)) != HY_OK)
            return rc;
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
        hy_blk_attention(m, f, b, L, f->xn, f->xn);
        hy_blk_residual(m, f, f->xn, n);

        op->rmsnorm(f->be, f->x, &L->ffn_norm, f->xn, n, E, m->norm_eps);
        hy_blk_ffn(m, f, L, n, f->xn, f->xn);
        hy_blk_residual(m, f, f->xn, n);
    }
    return hy_blk_logits(m, f, out_rows, n_out, logits, err);
}

static const hy_arch_t hy_arch_llama = {
    /* .name    = */ "llama",
    /* .load    = */ hy_llama_load,
    /* .forward = */ hy_llama_forward,
};
