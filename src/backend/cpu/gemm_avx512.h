/*
 * gemm_avx512.h - the AVX-512 GEMM for float weights (F32/F16/BF16) times
 * float activations, used by matmul.c at every number of tokens (one FMA
 * chain per output, so a token's row does not depend on the batch).  The
 * caller packs the activations once (hy_gemm_a5_pack_x), then threads
 * compute blocks of at most HY_GEMM_A5_MC output rows for every token
 * (hy_gemm_a5_rows), each with its own weight-panel buffer (unused for a
 * few tokens, which read the weights as they lie).  x86 builds only.
 */
#ifndef HY_GEMM_AVX512_H
#define HY_GEMM_AVX512_H

#include "common/hy.h"
#include "common/dtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Tokens per packed activation group (the micro-kernel's broadcast side). */
#define HY_GEMM_A5_NR 12
/* Weight rows per micro-kernel (two 16-lane vectors). */
#define HY_GEMM_A5_MR 32
/* Largest row block of one hy_gemm_a5_rows call (a multiple of MR). */
#define HY_GEMM_A5_MC 256

/* Floats of packed activations for n_tok tokens of k elements. */
size_t hy_gemm_a5_xpack_floats(int64_t k, int64_t n_tok);

/* Floats of one thread's weight-panel buffer (64-byte aligned by caller). */
size_t hy_gemm_a5_wpack_floats(int64_t k);

/* Packs token groups [g0, g1) (HY_GEMM_A5_NR tokens each, the last one
 * possibly short) of x: n_tok rows of k floats, row stride xs floats.
 * xp (64-byte aligned) has hy_gemm_a5_xpack_floats(k, n_tok) floats. */
void hy_gemm_a5_pack_x(const float *x, size_t xs, int64_t k, int64_t n_tok, int64_t g0,
                       int64_t g1, float *xp);

/* y[t*ys + r] = sum_i W[r][i] x[t][i] for rows r0 <= r < r1 (at most
 * HY_GEMM_A5_MC of them) and every token t < n_tok.  type: HY_DTYPE_F32,
 * F16 or BF16; row r of W starts at w + r*w_stride bytes, or with rows16
 * W is in HY_WLAYOUT_ROWS16 (backend.h; r0 and r1 multiples of 16).  Each
 * output is one FMA chain over i in order, whatever the blocking or the
 * layout, so the result does not depend on r0/r1, n_tok or the thread
 * count.  wpack: this thread's buffer of hy_gemm_a5_wpack_floats(k)
 * floats, 64-byte aligned. */
void hy_gemm_a5_rows(hy_dtype_t type, bool rows16, const void *w, size_t w_stride, int64_t k,
                     int64_t r0, int64_t r1, const float *xp, int64_t n_tok, float *y,
                     size_t ys, float *wpack);

#endif
