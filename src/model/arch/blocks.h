/*
 * blocks.h - the pieces every architecture's forward pass is made of, so an
 * arch file reads like its paper: embed, per layer (norm, mixer, residual,
 * FFN), final norm, logits.  Each block reads its input from `in` and
 * writes `out` (both (n_tok, n_embd)); the hy_fwd_t buffers q/k/v/att/
 * gate/up are its scratch.
 */
#ifndef HY_ARCH_BLOCKS_H
#define HY_ARCH_BLOCKS_H

#include "model/model.h"

/* token embeddings of the batch into f->x (times m->embd_scale if != 1) */
void hy_blk_embed(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b);

/* GQA softmax attention with optional q/k/v biases, per-head q/k RMSNorm
 * and the layer's RoPE (L->rope NULL: no positional encoding, NoPE), over
 * the layer's window (0: the whole context), scores soft-capped by
 * m->attn_softcap (0: off). */
void hy_blk_attention(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b, const hy_layer_t *L,
                      const float *in, float *out);

/* SwiGLU feed-forward: out = down(silu(gate(in)) * up(in)). */
void hy_blk_ffn(hy_model_t *m, hy_fwd_t *f, const hy_layer_t *L, int32_t n,
                const float *in, float *out);
/* GeGLU feed-forward (Gemma): out = down(gelu_tanh(gate(in)) * up(in)). */
void hy_blk_ffn_geglu(hy_model_t *m, hy_fwd_t *f, const hy_layer_t *L, int32_t n,
                      const float *in, float *out);

/* x += s * y over n rows (s = m->residual_scale) */
void hy_blk_residual(hy_model_t *m, hy_fwd_t *f, float *y, int32_t n);

/* final norm over the rows that want logits, LM head, logit_scale and
 * final_softcap, download to host */
int hy_blk_logits(hy_model_t *m, hy_fwd_t *f, const int32_t *out_rows, int32_t n_out,
                  float *logits, char *err);

/* batch/buffer size check shared by every forward() */
int hy_blk_check(const hy_fwd_t *f, const hy_batch_t *b, int32_t n_out, char *err);

#endif
