/*
 * attn_plan.h - host-side planning of CUDA attention launches: which batch
 * rows take the flash (prefill) kernel and how its tiles are cut and
 * ordered (the decode kernel's KV parts: hy_cuk_parts in hy_kernels.h).
 * Pure C with no CUDA calls, so the plan is unit-tested on machines
 * without a GPU (tests/cuda/test_cuda_attn.c).
 */
#ifndef HY_CUDA_ATTN_PLAN_H
#define HY_CUDA_ATTN_PLAN_H

#include "backend/backend.h"
#include "hy_kernels.h" /* hy_cuk_attn_tile_t (kernels/, on the include path) */

/* A sequence with at least this many tokens in the batch is prefilled by
 * the flash kernel; fewer (decode, short continuations) take the split
 * kernel, which also spreads one long context over many blocks. */
#define HY_CUDA_FLASH_MIN_TOK 16

/* Cuts the batch (validated by the caller: sequences in order, positions
 * >= 0) into flash tiles of tile_rows (token, head) rows for every sequence
 * of >= min_tok tokens whose n*group fits an int32, and lists every other
 * batch row in toks[] (capacity b->n_tokens) with their count in *n_toks.
 * tile_rows == 0 sends every row to toks.  Tiles come longest key range
 * first, so the blocks that run longest start first.  toks == NULL only
 * counts (tiles unused); otherwise tiles must hold the count such a call
 * returned.  Returns the number of tiles. */
int32_t hy_cuda_attn_plan(const hy_batch_t *b, int32_t group, int32_t window,
                          int32_t tile_rows, int32_t min_tok, hy_cuk_attn_tile_t *tiles,
                          int32_t *toks, int32_t *n_toks);

#endif
