/*
 * ssd.h - the CPU backend's Mamba-2 SSD kernel, shared by ssd.c (the op
 * entry, argument checks, threading, ISA choice) and the per-ISA kernel
 * objects ssd_kern_{generic,avx2,avx512}.c, which compile the same source
 * (ssd_kern.h) with different target flags, like the quant and gdn kernels.
 */
#ifndef HY_CPU_SSD_H
#define HY_CPU_SSD_H

#include "backend/cpu/cpu_impl.h"

/* One ssd call, split into units (sequence, head) that threads take in
 * turn from `next`. */
typedef struct {
    hy_cpu_t *cpu;
    int32_t rec_layer;
    const hy_batch_t *b;
    const float *x;            /* rows of x_stride floats, head h at h*P */
    int64_t x_stride;
    const float *dt;           /* raw dt, rows of dt_stride floats, head h at h */
    int64_t dt_stride;
    const float *dt_bias;      /* [n_head] */
    const float *A;            /* [n_head], negative */
    const float *D;            /* [n_head] or NULL */
    const float *B, *C;        /* rows of bc_stride floats, group g at g*N */
    int64_t bc_stride;
    float *y;                  /* [n_tok][n_head * P] */
    int32_t n_head, P, G, N, chunk;
    float *scratch;            /* nth x scratch_floats (64-byte aligned parts) */
    size_t scratch_floats;
    int32_t n_units;
    int32_t next;              /* atomic: next unit to take */
} hy_ssd_job_t;

/* Scratch parts start on 64-byte boundaries. */
#define HY_SSD_PART(n) (((size_t)(n) + 15) / 16 * 16)

/* Floats of per-thread scratch the chunked form needs. */
size_t hy_ssd_scratch_floats(int32_t chunk, int32_t P, int32_t N);

/* Thread-pool workers, one per ISA. */
void hy_ssd_worker_generic(void *arg, int ith, int nth);
void hy_ssd_worker_avx2(void *arg, int ith, int nth);
void hy_ssd_worker_avx512(void *arg, int ith, int nth);

/* Tests and benchmarks: pin the kernel variant (HY_OK, or HY_EUNSUPPORTED
 * when this CPU lacks it); -1 returns to automatic choice. */
int hy_cpu_ssd_set_isa(int isa);

#endif
