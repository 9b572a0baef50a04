/*
 * blocks.c - shared building blocks of the forward passes (see blocks.h).
 */
#include "model/arch/blocks.h"

#include <math.h>

int hy_blk_check(const hy_fwd_t *f, const hy_batch_t *b, int32_t n_out, char *err)
{
    if (b->n_tokens <= 0 || b->n_tokens > f->max_tokens || n_out < 0 || n_out > f->max_outputs)
        return hy_err(err, HY_EINVAL, "batch of %d tokens / %d outputs exceeds %d / %d",
                      b->n_tokens, n_out, f->max_tokens, f->max_outputs);
    return HY_OK;
}

void hy_blk_embed(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b)
{
    hy_backend_t *be = f->be;

    be->i->get_rows(be, &m->tok_embd, b->token, f->x, b->n_tokens);
    if (m->embd_scale != 0.0f && m->embd_scale != 1.0f)
        be->i->scale(be, f->x, m->embd_scale, (size_t)b->n_tokens * m->n_embd);
}

void hy_blk_attention(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b, const hy_layer_t *L,
                      const float *in, float *out)
{
    hy_backend_t *be = f->be;
    const struct hy_backend_i *op = be->i;
    const int32_t n = b->n_tokens, hd = m->head_dim;
    hy_attn_params_t ap = {
        .n_head = L->n_head, .n_head_kv = L->n_head_kv, .head_dim = hd,
        .head_dim_v = m->head_dim_v,
        .scale = m->attn_scale != 0.0f ? m->attn_scale : 1.0f / sqrtf((float)hd),
        .window = L->window, .softcap = m->attn_softcap,
    };

    const hy_weight_t *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *const qkv_y[3] = {f->q, f->k, f->v};

    hy_backend_matmul_n(be, qkv, 3, in, qkv_y, n);
    if (L->bq.data) op->add_bias(be, f->q, &L->bq, n, L->n_head * hd);
    if (L->bk.data) op->add_bias(be, f->k, &L->bk, n, L->n_head_kv * hd);
    if (L->bv.data) op->add_bias(be, f->v, &L->bv, n, L->n_head_kv * m->head_dim_v);
    if (L->q_norm.data) op->rmsnorm(be, f->q, &L->q_norm, f->q, n * L->n_head, hd, m->norm_eps);
    if (L->k_norm.data) op->rmsnorm(be, f->k, &L->k_norm, f->k, n * L->n_head_kv, hd, m->norm_eps);
    if (L->rope != NULL) {
        op->rope(be, f->q, n, L->n_head, hd, b->pos, L->rope);
        op->rope(be, f->k, n, L->n_head_kv, hd, b->pos, L->rope);
    }
    op->attention(be, L->kv_index, b, f->q, f->k, f->v, f->att, &ap);
    op->matmul(be, &L->wo, f->att, out, n);
}

/* The FFN's gate and up products, which read the same rows. */
static void hy_blk_gate_up(hy_fwd_t *f, const hy_layer_t *L, const float *in, int32_t n)
{
    const hy_weight_t *w[2] = {&L->ffn_gate, &L->ffn_up};
    float *const y[2] = {f->gate, f->up};

    hy_backend_matmul_n(f->be, w, 2, in, y, n);
}

void hy_blk_ffn(hy_model_t *m, hy_fwd_t *f, const hy_layer_t *L, int32_t n,
                const float *in, float *out)
{
    hy_backend_t *be = f->be;
    const struct hy_backend_i *op = be->i;

    hy_blk_gate_up(f, L, in, n);
    op->swiglu(be, f->gate, f->up, f->gate, (size_t)n * L->n_ff);
    op->matmul(be, &L->ffn_down, f->gate, out, n);
}

void hy_blk_ffn_geglu(hy_model_t *m, hy_fwd_t *f, const hy_layer_t *L, int32_t n,
                      const float *in, float *out)
{
    hy_backend_t *be = f->be;
    const struct hy_backend_i *op = be->i;
    const size_t cnt = (size_t)n * L->n_ff;

    (void)m;
    hy_blk_gate_up(f, L, in, n);
    hy_backend_geglu(be, f->gate, f->up, cnt);
    op->matmul(be, &L->ffn_down, f->gate, out, n);
}

void hy_blk_residual(hy_model_t *m, hy_fwd_t *f, float *y, int32_t n)
{
    hy_backend_t *be = f->be;
    size_t cnt = (size_t)n * m->n_embd;

    if (m->residual_scale != 0.0f && m->residual_scale != 1.0f)
        be->i->scale(be, y, m->residual_scale, cnt);
    be->i->add(be, f->x, y, cnt);
}

int hy_blk_logits(hy_model_t *m, hy_fwd_t *f, const int32_t *out_rows, int32_t n_out,
                  float *logits, char *err)
{
    hy_backend_t *be = f->be;
    const struct hy_backend_i *op = be->i;
    const int32_t E = m->n_embd;

    if (n_out > 0) {
        op->gather_rows(be, f->out_x, f->x, out_rows, n_out, E);
        op->rmsnorm(be, f->out_x, &m->output_norm, f->out_x, n_out, E, m->norm_eps);
        op->matmul(be, &m->output, f->out_x, f->logits, n_out);
        if (m->logit_scale != 0.0f && m->logit_scale != 1.0f)
            op->scale(be, f->logits, 1.0f / m->logit_scale, (size_t)n_out * m->n_vocab);
        if (m->final_softcap > 0.0f) {
            /* c tanh(l / c), in llama.cpp's three steps */
            const size_t cnt = (size_t)n_out * m->n_vocab;

            op->scale(be, f->logits, 1.0f / m->final_softcap, cnt);
            op->unary(be, HY_UNARY_TANH, f->logits, f->logits, cnt);
            op->scale(be, f->logits, m->final_softcap, cnt);
        }
        if (logits != NULL)
            op->download(be, logits, f->logits, (size_t)n_out * m->n_vocab);
    }
    return op->status(be, err);
}
