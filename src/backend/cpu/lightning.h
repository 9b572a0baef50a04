/*
 * lightning.h - the CPU backend's lightning-attention op: the job that
 * lightning.c (entry, checks, decay tables, threading, ISA choice) hands
 * to the kernels of lightning_kern.h, compiled once per ISA by
 * lightning_kern_{generic,avx2}.c.  Both builds perform the arithmetic of
 * backend/lightning.h in the same order without fused multiply-adds, so
 * they agree bit for bit (the tests compare them exactly).
 */
#ifndef HY_CPU_LIGHTNING_H
#define HY_CPU_LIGHTNING_H

#include "backend/cpu/cpu_impl.h"
#include "backend/lightning.h"

/* One lightning call, split into units (sequence, head) that threads take
 * in turn from `next`: a unit walks its sequence's rows in order, so the
 * result does not depend on which thread ran it. */
typedef struct {
    hy_cpu_t *cpu;
    int32_t rec_layer;
    const hy_batch_t *b;
    const float *q, *k, *v;  /* head h of row r at + r*row_stride + h*head_stride */
    int64_t row_stride, head_stride;
    float *o;                /* [n_tok][n_head * d] */
    int32_t n_head, d, chunk;
    const float *lam;        /* [n_head][chunk + 1]: the decay table, lam[h][n] = lambda_h^n */
    int32_t n_units;
    int32_t next;            /* atomic: next unit to take */
} hy_lightning_job_t;

/* Thread-pool workers, one per ISA (AVX2 only on x86-64). */
void hy_lightning_worker_generic(void *arg, int ith, int nth);
void hy_lightning_worker_avx2(void *arg, int ith, int nth);

void hy_cpu_lightning(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch,
                      const float *q, const float *k, const float *v, int32_t row_stride,
                      int32_t head_stride, const hy_weight_t *decay, float *o,
                      const hy_lightning_params_t *p);

/* Tests and benchmarks: pin the kernel variant (HY_OK, or HY_EUNSUPPORTED
 * when this CPU lacks it); -1 returns to automatic choice. */
int hy_cpu_lightning_set_isa(int isa);

#endif
