/*
 * lightning.c - the CPU backend's lightning-attention op (MiniMax-Text-01 /
 * M1): checks the arguments and runs the kernel of lightning_kern.h over units (sequence, head) on the thread
 * pool, choosing its AVX2 or generic build at run time (they give the same
 * bits; AVX-512 machines take the AVX2 build).
 */
#include "backend/cpu/lightning.h"

#include <string.h>

/* Below this many state multiply-adds the op runs on the calling thread. */
#define HY_LIGHTNING_PAR_MIN 65536

static int hy_lightning_isa = -1; /* pinned by tests; -1 = what the CPU supports */

int hy_cpu_lightning_set_isa(int isa)
{
    if (isa >= 0 && isa > (int)hy_cpu_isa())
        return HY_EUNSUPPORTED;
    __atomic_store_n(&hy_lightning_isa, isa, __ATOMIC_RELAXED);
    return HY_OK;
}

static hy_pool_fn_t hy_lightning_worker(void)
{
    int isa = __atomic_load_n(&hy_lightning_isa, __ATOMIC_RELAXED);

    if (isa < 0)
        isa = (int)hy_cpu_isa();
#if defined(__x86_64__) && HY_BUILD_AVX2
    if (isa >= HY_ISA_AVX2)
        return hy_lightning_worker_avx2;
#endif
    return hy_lightning_worker_generic;
}

void hy_cpu_lightning(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch,
                      const float *q, const float *k, const float *v, int32_t row_stride,
                      int32_t head_stride, const hy_weight_t *decay, float *o,
                      const hy_lightning_params_t *p)
{
    hy_cpu_t *cpu = be->ctx;
    hy_lightning_job_t j;
    int64_t work = 0;
    char err[HY_ERR_LEN];
    int nth, rc;

    if (batch->n_tokens <= 0)
        return;
    if ((rc = hy_lightning_check(p, row_stride, head_stride, decay, err)) != HY_OK) {
        hy_cpu_fail(cpu, rc, "%s", err);
        goto zero;
    }
    if (!hy_cpu_state_check(cpu, "lightning", rec_layer, batch, -1, hy_lightning_state_floats(p)) ||
        !hy_cpu_past_check(cpu, "lightning", batch))
        goto zero;

    memset(&j, 0, sizeof j);
    j.cpu = cpu;
    j.rec_layer = rec_layer;
    j.b = batch;
    j.q = q;
    j.k = k;
    j.v = v;
    j.row_stride = row_stride;
    j.head_stride = head_stride;
    j.o = o;
    j.n_head = p->n_head;
    j.d = p->head_dim;
    j.chunk = p->chunk;
    j.lam = decay->data;
    j.n_units = batch->n_seqs * p->n_head;
    for (int32_t s = 0; s < batch->n_seqs; s++)
        work += (int64_t)batch->seqs[s].n;
    work *= (int64_t)p->n_head * p->head_dim * p->head_dim;
    nth = work < HY_LIGHTNING_PAR_MIN ? 1 : HY_MIN(cpu->n_threads, j.n_units);
    hy_pool_run_n(cpu->pool, HY_MAX(nth, 1), hy_lightning_worker(), &j);
    return;
zero:
    memset(o, 0, sizeof(float) * (size_t)batch->n_tokens * (size_t)HY_MAX(p->n_head, 0) *
                     (size_t)HY_MAX(p->head_dim, 0));
}
