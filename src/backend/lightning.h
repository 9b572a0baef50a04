/*
 * lightning.h - what every backend's lightning-attention op
 * (hy_backend_i.lightning) shares: the argument checks, the floats a layer
 * keeps per state slot and where they are, the decay table, and the one
 * order of arithmetic that the CPU kernels (backend/cpu/lightning_kern.h)
 * and the CUDA kernel (kernels/hy_lightning.h) both follow.  Because decode
 * and prefill run that same arithmetic, a token's output does not depend
 * on where the engine cut its sequence into steps, nor on the batch, nor
 * on the thread count; and the host-run CUDA algorithm equals the CPU
 * kernels bit for bit (tests/cuda/test_lightning_chunk.c).
 *
 * State of head h of a layer (floats, at the layer's rec offset in the
 * slot + h * hy_lightning_head_floats(d, C)):
 *   S  [d][d]  the state after the last complete block of C positions
 *   KT [d][C]  the current block's keys, transposed (column r = its row r)
 *   V  [C][d]  the current block's values
 * chunk 1 keeps S only.  The current block holds n_past % C rows: blocks
 * start at absolute positions bC, so the count needs no storage and a
 * slot copied at any position (a prefix-cache checkpoint) is complete.
 *
 * The arithmetic (products and sums rounded separately, never fused; lam[n]
 * = the head's row of the decay table, lambda^n rounded once from double
 * (hy_lightning_decays), which every backend reads instead of computing
 * exp() itself; sums start from 0.0f and run in the order written):
 *   row t of its block (0 <= t < C), q = that row's query:
 *     x[j]  = sum_{i = 0..d-1} q[i] * S[i][j]
 *     o[j]  = x[j] * lam[t + 1]
 *     w_r   = (sum_{i = 0..d-1} q[i] * KT[i][r]) * lam[t - r],  r = 0..t
 *     o[j]  = o[j] + w_r * V[r][j],                          r = 0..t
 *   when the block is complete (after its rows' outputs):
 *     S[i][j] = S[i][j] * lam[C]; then for r = 0..C-1:
 *     S[i][j] = S[i][j] + (KT[i][r] * lam[C - 1 - r]) * V[r][j]
 *   chunk 1 (the plain recurrence), token by token:
 *     S[i][j] = S[i][j] * lam[1] + k[i] * v[j]  (i ascending), and
 *     o[j]    = sum_{i = 0..d-1} S[i][j] * q[i]
 * That is transformers' MiniMaxLightningAttention (block form for prefill,
 * recurrence for decode) with its blocks placed at absolute positions.
 */
#ifndef HY_BACKEND_LIGHTNING_H
#define HY_BACKEND_LIGHTNING_H

#include "backend/backend.h"

/* Largest block (the kernels keep a row of C scores on the stack / in
 * shared memory) and head size (the CUDA kernel's shared-memory tiles). */
#define HY_LIGHTNING_MAX_CHUNK 64
#define HY_LIGHTNING_MAX_DIM 256

/* Floats one head keeps per slot (layout above). */
static inline int64_t hy_lightning_head_floats(int32_t d, int32_t chunk)
{
    return (int64_t)d * d + (chunk > 1 ? 2 * (int64_t)chunk * d : 0);
}

/* Floats one layer keeps per slot: what its rec_floats must be. */
static inline int64_t hy_lightning_state_floats(const hy_lightning_params_t *p)
{
    return (int64_t)p->n_head * hy_lightning_head_floats(p->head_dim, p->chunk);
}

/* The decay table of a layer whose heads have decay rates slopes[0..n_head)
 * (lambda_h = exp(-slope_h)): out[h * (chunk + 1) + n] = lambda_h^n for
 * n = 0..chunk, each computed in double and rounded once.  The op reads
 * it as an F32 weight {chunk + 1, n_head}; a table built once (at load) and
 * uploaded keeps exp() out of every step and makes the GPU read the CPU's
 * very numbers. */
void hy_lightning_decays(const float *slopes, int32_t n_head, int32_t chunk, float *out);

/* The op's argument checks: shape, strides, the decay table (F32
 * {chunk + 1, n_head}, every value finite in [0, 1]).  HY_EINVAL with the
 * message in err. */
int hy_lightning_check(const hy_lightning_params_t *p, int32_t row_stride, int32_t head_stride,
                       const hy_weight_t *decay, char *err);

#endif
