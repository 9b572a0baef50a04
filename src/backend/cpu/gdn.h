/*
 * gdn.h - the CPU backend's Gated DeltaNet kernel, shared by gdn.c (the op
 * entry, argument checks, threading, ISA choice) and the per-ISA kernel
 * objects gdn_kern_{generic,avx2,avx512}.c, which compile the same source
 * (gdn_kern.h) with different target flags, like the quant kernels.
 */
#ifndef HY_CPU_GDN_H
#define HY_CPU_GDN_H

#include "backend/cpu/cpu_impl.h"

/* One gdn call, split into units (sequence, v-head) that threads take in
 * turn from `next`. */
typedef struct {
    hy_cpu_t *cpu;
    int32_t rec_layer;
    const hy_batch_t *b;
    const float *q, *k, *v;   /* rows of stride floats */
    int64_t stride;
    const float *g, *beta;    /* [n_tok][n_v_heads] */
    float *o;                 /* [n_tok][n_v_heads * d_v] */
    int32_t n_k_heads, n_v_heads, d_k, d_v, chunk;
    bool v_tiled;
    float *scratch;           /* nth x scratch_floats, 64-byte aligned parts */
    size_t scratch_floats;
    int32_t n_units;
    int32_t next;             /* atomic: next unit to take */
} hy_gdn_job_t;

/* Floats of per-thread scratch the chunked form needs. */
size_t hy_gdn_scratch_floats(int32_t chunk, int32_t d_k, int32_t d_v);

/* Thread-pool workers, one per ISA. */
void hy_gdn_worker_generic(void *arg, int ith, int nth);
void hy_gdn_worker_avx2(void *arg, int ith, int nth);
void hy_gdn_worker_avx512(void *arg, int ith, int nth);

/* Tests and benchmarks: pin the kernel variant (HY_OK, or HY_EUNSUPPORTED
 * when this CPU lacks it); -1 returns to automatic choice. */
int hy_cpu_gdn_set_isa(int isa);

#endif
