/*
 * arch/gemma.c - Google's Gemma 2 (gemma2) and Gemma 3 text models
 * (gemma3), as llama.cpp reads them (src/models/gemma2.cpp, gemma3.cpp):
 * embeddings times sqrt(n_embd); per layer RMSNorm before and after both
 * attention and the GeGLU (tanh GELU) FFN; GQA attention with NEOX RoPE,
 * per-head q/k RMSNorm (gemma3) or score soft-capping (gemma2); sliding
 * window layers interleaved with global ones; final logit soft-capping.
 * Gemma's RMSNorm multiplies by (1 + w): the converter stores w + 1, so
 * the norms here are plain.
 *
 * Sliding layers (HY_LAYER_ATTN_SWA, window from attention.sliding_window)
 * follow llama.cpp's pattern rule: with period P (the scalar
 * attention.sliding_window_pattern, default 6 for gemma3 and 2 for gemma2)
 * layer il slides unless il % P == P - 1 (P 0: all slide).  A bool array
 * of block_count entries under that key names each layer instead (the
 * gguf-py form; llama.cpp's gemma3 ignores an array and keeps 6).  They use
 * their own RoPE base, rope.freq_base_swa (gemma3 default 10000 and no
 * linear scaling; gemma2 default the global base).
 */
#include "model/arch/blocks.h"
#include "model/arch/load.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* llama.cpp's defaults where the file has no key */
#define HY_GEMMA3_SWA_PERIOD 6
#define HY_GEMMA2_SWA_PERIOD 2
#define HY_GEMMA2_WINDOW 4096
#define HY_GEMMA2_ATTN_SOFTCAP 50.0f
#define HY_GEMMA2_FINAL_SOFTCAP 30.0f
#define HY_GEMMA3_FREQ_BASE_SWA 10000.0f

/* Which layers slide: is_swa[0..n_layer) from attention.sliding_window_pattern
 * (scalar period or per-layer bool array), default `period`. */
static int hy_gemma_read_pattern(hy_model_t *m, uint32_t period, bool *is_swa, char *err)
{
    int rc;

    rc = hy_model_layers_flag(m, "attention.sliding_window_pattern", "a u32 period", is_swa, err);
    if (rc != HY_ENOENT)
        return rc;
    if ((rc = hy_model_key_u32(m, "attention.sliding_window_pattern", &period, true, err)) != HY_OK)
        return rc;
    for (int32_t il = 0; il < m->n_layer; il++)
        is_swa[il] = period == 0 || (uint32_t)il % period < period - 1;
    return HY_OK;
}

/* Window, pattern, the sliding layers' RoPE, the soft-caps and the
 * attention scale: everything that differs between gemma2 and gemma3. */
static int hy_gemma_read_hparams(hy_model_t *m, bool *is_swa, uint32_t *window, char *err)
{
    const bool g2 = strcmp(m->arch_name, "gemma2") == 0;
    const char *path = hy_gguf_path(m->gguf);
    int rc;

    *window = g2 ? HY_GEMMA2_WINDOW : 0;
    if ((rc = hy_model_key_u32(m, "attention.sliding_window", window, true, err)) != HY_OK)
        return rc;
    if ((g2 && *window == 0) || *window > (uint32_t)INT32_MAX)
        return hy_err(err, HY_EFORMAT, "%s: %s.attention.sliding_window = %u is out of range (1..%d)",
                      path, m->arch_name, *window, INT32_MAX);
    if (*window == 0)
        memset(is_swa, 0, sizeof(bool) * (size_t)m->n_layer); /* gemma3 without SWA */
    else if ((rc = hy_gemma_read_pattern(m, g2 ? HY_GEMMA2_SWA_PERIOD : HY_GEMMA3_SWA_PERIOD,
                                         is_swa, err)) != HY_OK)
        return rc;

    if ((rc = hy_model_read_rope(m, HY_ROPE_NEOX, err)) != HY_OK)
        return rc;
    if (!g2) {
        m->rope_swa.freq_base = HY_GEMMA3_FREQ_BASE_SWA;
        m->rope_swa.freq_scale = 1.0f; /* linear scaling is for the global layers */
    }
    if ((rc = hy_model_key_f32(m, "rope.freq_base_swa", &m->rope_swa.freq_base, true, err)) != HY_OK)
        return rc;
    if (!(m->rope_swa.freq_base > 0.0f))
        return hy_err(err, HY_EFORMAT, "%s: %s.rope.freq_base_swa must be positive", path,
                      m->arch_name);

    m->attn_softcap = g2 ? HY_GEMMA2_ATTN_SOFTCAP : 0.0f;
    m->final_softcap = g2 ? HY_GEMMA2_FINAL_SOFTCAP : 0.0f;
    if ((g2 && (rc = hy_model_key_f32(m, "attn_logit_softcapping", &m->attn_softcap, true,
                                      err)) != HY_OK) ||
        (rc = hy_model_key_f32(m, "final_logit_softcapping", &m->final_softcap, true, err)) != HY_OK)
        return rc;
    if (m->attn_softcap < 0.0f || m->final_softcap < 0.0f)
        return hy_err(err, HY_EFORMAT, "%s: %s soft-capping %g / %g must not be negative (0: off)",
                      path, m->arch_name, m->attn_softcap, m->final_softcap);

    /* llama.cpp (after gemma_pytorch): the 27B models scale queries by
     * 1/sqrt(n_embd / n_head) (their query_pre_attn_scalar), the others
     * by 1/sqrt(head size); the file has no key for it */
    if (m->n_layer == (g2 ? 46 : 62))
        m->attn_scale = 1.0f / sqrtf((float)(m->n_embd / m->n_head));
    else
        m->attn_scale = 1.0f / sqrtf((float)m->head_dim);
    m->embd_scale = sqrtf((float)m->n_embd);
    return HY_OK;
}

/* One decoder layer's tensors: norms around attention and FFN. */
static int hy_gemma_load_layer(hy_model_t *m, hy_layer_t *L, int32_t il, uint32_t n_head,
                               uint32_t n_head_kv, uint32_t n_ff, char *err)
{
    const bool g3 = strcmp(m->arch_name, "gemma3") == 0;
    const int64_t E = m->n_embd;
    const hy_layer_tensor_t norms[] = {
        {HY_LT(attn_norm), "attn_norm.weight", {E}, false},
        {HY_LT(q_norm), "attn_q_norm.weight", {m->head_dim}, !g3},
        {HY_LT(k_norm), "attn_k_norm.weight", {m->head_dim}, !g3},
        {HY_LT(attn_post_norm), "post_attention_norm.weight", {E}, false},
        {HY_LT(ffn_norm), "ffn_norm.weight", {E}, false},
        {HY_LT(ffn_post_norm), "post_ffw_norm.weight", {E}, false},
    };
    int rc;

    if ((rc = hy_model_load_attention(m, L, il, (int32_t)n_head, (int32_t)n_head_kv, err)) != HY_OK ||
        (rc = hy_model_layer_tensors(m, L, il, norms, HY_ARRAY_LEN(norms), err)) != HY_OK)
        return rc;
    return hy_model_load_ffn(m, L, il, (int32_t)n_ff, err);
}

static int hy_gemma_load(hy_model_t *m, char *err)
{
    uint32_t n_head[HY_MODEL_MAX_LAYERS], n_head_kv[HY_MODEL_MAX_LAYERS], n_ff[HY_MODEL_MAX_LAYERS];
    bool is_swa[HY_MODEL_MAX_LAYERS];
    uint32_t window;
    int rc;

    if ((rc = hy_model_layers_u32(m, "attention.head_count", n_head, false, err)) != HY_OK)
        return rc;
    memcpy(n_head_kv, n_head, sizeof(uint32_t) * (size_t)m->n_layer);
    if ((rc = hy_model_layers_u32(m, "attention.head_count_kv", n_head_kv, true, err)) != HY_OK ||
        (rc = hy_model_layers_u32(m, "feed_forward_length", n_ff, false, err)) != HY_OK ||
        (rc = hy_model_check_ff(m, n_ff, false, err)) != HY_OK ||
        (rc = hy_model_attn_dims(m, n_head, n_head_kv, NULL, err)) != HY_OK ||
        (rc = hy_gemma_read_hparams(m, is_swa, &window, err)) != HY_OK ||
        (rc = hy_model_load_common(m, "output_norm.weight", err)) != HY_OK)
        return rc;
    for (int32_t il = 0; il < m->n_layer; il++) {
        hy_layer_t *L = &m->layers[il];

        if ((rc = hy_gemma_load_layer(m, L, il, n_head[il], n_head_kv[il], n_ff[il], err)) != HY_OK)
            return rc;
        if (is_swa[il]) {
            L->kind = HY_LAYER_ATTN_SWA;
            L->window = (int32_t)window;
            L->rope = &m->rope_swa;
            m->n_swa_layers++;
        }
    }
    return HY_OK;
}

/* Embed (x sqrt(n_embd)); per layer: x += post_norm(attention(norm(x))),
 * x += post_ffw_norm(GeGLU(ffn_norm(x))); final norm, logits, soft-cap. */
static int hy_gemma_forward(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b,
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

        op->rmsnorm(f->be, f->x, &L->attn_norm, f->xn, n, E, m->norm_eps);
        hy_blk_attention(m, f, b, L, f->xn, f->xn);
        op->rmsnorm(f->be, f->xn, &L->attn_post_norm, f->xn, n, E, m->norm_eps);
        hy_blk_residual(m, f, f->xn, n);

        op->rmsnorm(f->be, f->x, &L->ffn_norm, f->xn, n, E, m->norm_eps);
        hy_blk_ffn_geglu(m, f, L, n, f->xn, f->xn);
        op->rmsnorm(f->be, f->xn, &L->ffn_post_norm, f->xn, n, E, m->norm_eps);
        hy_blk_residual(m, f, f->xn, n);
    }
    return hy_blk_logits(m, f, out_rows, n_out, logits, err);
}

static const hy_arch_t hy_arch_gemma = {
    /* .name    = */ "gemma",
    /* .load    = */ hy_gemma_load,
    /* .forward = */ hy_gemma_forward,
};
