/*
 * gdn.c - the CPU backend's Gated DeltaNet op (qwen3next / qwen35): checks
 * the arguments, sizes the per-thread scratch, and runs the kernel of
 * gdn_kern.h over units (sequence, v-head) on the thread pool, choosing the
 * AVX-512, AVX2 or generic build of the kernel at run time.  Also the
 * row-scaling op the family's shared-expert gate needs.
 */
#include "backend/cpu/gdn.h"

#include <stdlib.h>
#include <string.h>

/* Below this many state multiply-adds the op runs on the calling thread. */
#define HY_GDN_PAR_MIN 65536

static int hy_gdn_isa = -1; /* pinned by tests; -1 = what the CPU supports */

int hy_cpu_gdn_set_isa(int isa)
{
    if (isa >= 0 && isa > (int)hy_cpu_isa())
        return HY_EUNSUPPORTED;
    __atomic_store_n(&hy_gdn_isa, isa, __ATOMIC_RELAXED);
    return HY_OK;
}

static hy_pool_fn_t hy_gdn_worker(void)
{
    int isa = __atomic_load_n(&hy_gdn_isa, __ATOMIC_RELAXED);

    if (isa < 0)
        isa = (int)hy_cpu_isa();
#if HY_BUILD_AVX512
    if (isa == HY_ISA_AVX512)
        return hy_gdn_worker_avx512;
#endif
#if HY_BUILD_AVX2
    if (isa == HY_ISA_AVX2)
        return hy_gdn_worker_avx2;
#endif
    return hy_gdn_worker_generic;
}

#define HY_GDN_PART(n) (((size_t)(n) + 15) / 16 * 16)
size_t hy_gdn_scratch_floats(int32_t C, int32_t dk, int32_t dv)
{
    (void)dk;
    /* P [2C][dv] (S^T q, S^T k of a step's rows), M [2C][C] (their scores
     * against the block's keys), u [dv] (the recurrent form), e [C] (one
     * row's decays) */
    return HY_GDN_PART((size_t)2 * C * dv) + HY_GDN_PART((size_t)2 * C * C) + HY_GDN_PART(dv) +
           HY_GDN_PART(C);
}
#undef HY_GDN_PART

void hy_cpu_gdn(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch,
                const float *q, const float *k, const float *v, int32_t qkv_stride,
                const float *g, const float *beta, float *o, const hy_gdn_params_t *p)
{
    hy_cpu_t *cpu = be->ctx;
    hy_gdn_job_t j;
    int64_t work = 0;
    char err[HY_ERR_LEN];
    int nth, rc;

    if ((rc = hy_gdn_check(p, qkv_stride, err)) != HY_OK) {
        hy_cpu_fail(cpu, rc, "%s", err);
        goto zero;
    }
    if (!hy_cpu_state_check(cpu, "gdn", rec_layer, batch, -1, hy_gdn_state_floats(p)) ||
        (p->chunk > 1 && !hy_cpu_past_check(cpu, "gdn", batch)))
        goto zero;

    memset(&j, 0, sizeof j);
    j.cpu = cpu;
    j.rec_layer = rec_layer;
    j.b = batch;
    j.q = q;
    j.k = k;
    j.v = v;
    j.stride = qkv_stride;
    j.g = g;
    j.beta = beta;
    j.o = o;
    j.n_k_heads = p->n_k_heads;
    j.n_v_heads = p->n_v_heads;
    j.d_k = p->d_k;
    j.d_v = p->d_v;
    j.chunk = p->chunk;
    j.v_tiled = p->v_tiled;
    j.n_units = batch->n_seqs * p->n_v_heads;
    for (int32_t s = 0; s < batch->n_seqs; s++)
        work += (int64_t)batch->seqs[s].n;
    work *= (int64_t)p->n_v_heads * p->d_k * p->d_v;
    nth = work < HY_GDN_PAR_MIN ? 1 : HY_MIN(cpu->n_threads, j.n_units);
    nth = HY_MAX(nth, 1);
    j.scratch_floats = hy_gdn_scratch_floats(p->chunk, p->d_k, p->d_v);
    j.scratch = aligned_alloc(64, j.scratch_floats * sizeof(float) * (size_t)nth);
    if (j.scratch == NULL) {
        hy_cpu_fail(cpu, HY_ENOMEM, "gdn: out of memory for %d x %zu floats of scratch", nth,
                    j.scratch_floats);
        goto zero;
    }
    hy_pool_run_n(cpu->pool, nth, hy_gdn_worker(), &j);
    free(j.scratch);
    return;
zero:
    memset(o, 0, sizeof(float) * (size_t)batch->n_tokens * (size_t)HY_MAX(p->n_v_heads, 0) *
                     (size_t)HY_MAX(p->d_v, 0));
}

typedef struct {
    float *x;
    const float *s;
    int32_t n_rows, dim;
} hy_scale_rows_job_t;

static void hy_scale_rows_worker(void *arg, int ith, int nth)
{
    hy_scale_rows_job_t *j = arg;
    int64_t lo, hi;

    hy_cpu_split(j->n_rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        float *x = j->x + r * j->dim;
        const float s = j->s[r];
        for (int32_t i = 0; i < j->dim; i++)
            x[i] *= s;
    }
}

void hy_cpu_scale_rows(hy_backend_t *be, float *x, const float *s, int32_t n_rows,
                       int32_t dim)
{
    hy_cpu_t *cpu = be->ctx;
    hy_scale_rows_job_t j = {x, s, n_rows, dim};
    int64_t work = (int64_t)n_rows * dim;

    if (n_rows <= 0 || dim <= 0)
        return;
    hy_pool_run_n(cpu->pool, work < 65536 ? 1 : HY_MIN(cpu->n_threads, n_rows),
                  hy_scale_rows_worker, &j);
}
