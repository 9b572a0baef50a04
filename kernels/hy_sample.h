/*
 * hy_sample.h - the C interface of the device sampler (kernels/hy_sample.cu):
 * one block per row of logits applies top_k, top_p and min_p, draws a token
 * with the row's uniform and reports its logprob and the best n_logprobs
 * alternatives, with the semantics of src/backend/cuda/sample_ref.c.  The
 * CUDA backend (cuda.c, `sample`) checks every parameter before launching.
 */
#ifndef HY_SAMPLE_KERNEL_H
#define HY_SAMPLE_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HY_CUK_SAMPLE_MAX_TOP 20   /* == HY_SAMPLE_MAX_TOP (backend.h) */
#define HY_CUK_SAMPLE_THREADS 1024 /* threads per row */

/* One row's parameters, checked and prepared on the host. */
typedef struct {
    double u;           /* the draw's uniform in [0, 1) (hy_sample_uniform) */
    float temperature;  /* 0 = greedy */
    float top_p;        /* (0, 1]; 1 = off */
    float log_min_p;    /* logf(min_p) computed on the host; -inf = off */
    int32_t top_k;      /* 0 = off (or >= n_vocab) */
    int32_t n_logprobs; /* 0..HY_CUK_SAMPLE_MAX_TOP */
    int32_t pad;
} hy_cuk_sample_row_t;

typedef struct {
    int32_t token;      /* -1: NaN in the row, or its maximum is +-inf */
    float logprob;
    int32_t n_top;
    int32_t top_ids[HY_CUK_SAMPLE_MAX_TOP];
    float top_logprobs[HY_CUK_SAMPLE_MAX_TOP];
} hy_cuk_sample_res_t;

/* rows[n_rows] and res[n_rows] in device memory; logits [n_rows][n_vocab].
 * Returns cudaGetLastError() as an int (cudaErrorInvalidValue for bad sizes). */
int hy_cuk_sample(const float *logits, int32_t n_rows, int32_t n_vocab,
                  const hy_cuk_sample_row_t *rows, hy_cuk_sample_res_t *res, void *stream);

#ifdef __cplusplus
}
#endif

#endif
