/*
 * ssd.c - the CPU backend's Mamba-2 ops (granitehybrid, nemotron_h): the
 * SSD scan entry (argument checks, per-thread scratch, ISA choice; the
 * kernel itself is ssd_kern.h, run over units (sequence, head) on the
 * thread pool) and the gated grouped RMSNorm that follows the scan.
 */
#include "backend/cpu/ssd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Below this many state multiply-adds the op runs on the calling thread. */
#define HY_SSD_PAR_MIN 65536

static int hy_ssd_isa = -1; /* pinned by tests; -1 = what the CPU supports */

int hy_cpu_ssd_set_isa(int isa)
{
    if (isa >= 0 && isa > (int)hy_cpu_isa())
        return HY_EUNSUPPORTED;
    __atomic_store_n(&hy_ssd_isa, isa, __ATOMIC_RELAXED);
    return HY_OK;
}

static hy_pool_fn_t hy_ssd_worker(void)
{
    int isa = __atomic_load_n(&hy_ssd_isa, __ATOMIC_RELAXED);

    if (isa < 0)
        isa = (int)hy_cpu_isa();
#if HY_BUILD_AVX512
    if (isa == HY_ISA_AVX512)
        return hy_ssd_worker_avx512;
#endif
#if HY_BUILD_AVX2
    if (isa == HY_ISA_AVX2)
        return hy_ssd_worker_avx2;
#endif
    return hy_ssd_worker_generic;
}

size_t hy_ssd_scratch_floats(int32_t Q, int32_t P, int32_t N)
{
    (void)N;
    /* Yc [Q][P], Gm [Q][Q]: the layout of hy_ssd_block */
    return HY_SSD_PART((size_t)Q * P) + HY_SSD_PART((size_t)Q * Q);
}

void hy_cpu_ssd(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch, const float *x,
                int32_t x_stride, const float *dt, int32_t dt_stride,
                const hy_weight_t *dt_bias, const hy_weight_t *A, const float *B,
                const float *C, int32_t bc_stride, const hy_weight_t *D, float *y,
                const hy_ssd_params_t *p)
{
    hy_cpu_t *cpu = be->ctx;
    hy_ssd_job_t j;
    float *tA = NULL, *tD = NULL, *tbias = NULL;
    int64_t work = 0;
    char err[HY_ERR_LEN];
    int nth, rc;

    memset(&j, 0, sizeof j);
    if (batch->n_tokens <= 0)
        return;
    if ((rc = hy_ssd_check(p, x_stride, dt_stride, bc_stride, err)) != HY_OK) {
        hy_cpu_fail(cpu, rc, "%s", err);
        goto zero;
    }
    if (!hy_cpu_state_check(cpu, "ssd", rec_layer, batch, -1, hy_ssd_state_floats(p)) ||
        (p->chunk > 1 && !hy_cpu_past_check(cpu, "ssd", batch)))
        goto zero;
    if (!(j.A = hy_cpu_weight_floats(cpu, "ssd A", A, p->n_head, &tA)) ||
        !(j.dt_bias = hy_cpu_weight_floats(cpu, "ssd dt_bias", dt_bias, p->n_head, &tbias)))
        goto zero;
    if (D != NULL && D->data != NULL &&
        !(j.D = hy_cpu_weight_floats(cpu, "ssd D", D, p->n_head, &tD)))
        goto zero;

    j.cpu = cpu;
    j.rec_layer = rec_layer;
    j.b = batch;
    j.x = x;
    j.x_stride = x_stride;
    j.dt = dt;
    j.dt_stride = dt_stride;
    j.B = B;
    j.C = C;
    j.bc_stride = bc_stride;
    j.y = y;
    j.n_head = p->n_head;
    j.P = p->head_dim;
    j.G = p->n_group;
    j.N = p->d_state;
    j.chunk = p->chunk;
    j.n_units = batch->n_seqs * p->n_head;
    for (int32_t s = 0; s < batch->n_seqs; s++)
        work += (int64_t)batch->seqs[s].n;
    work *= (int64_t)p->n_head * p->head_dim * p->d_state;
    nth = work < HY_SSD_PAR_MIN ? 1 : HY_MIN(cpu->n_threads, j.n_units);
    nth = HY_MAX(nth, 1);
    /* scratch only for the block form */
    if (p->chunk > 1) {
        j.scratch_floats = hy_ssd_scratch_floats(p->chunk, p->head_dim, p->d_state);
        j.scratch = aligned_alloc(64, j.scratch_floats * sizeof(float) * (size_t)nth);
        if (j.scratch == NULL) {
            hy_cpu_fail(cpu, HY_ENOMEM, "ssd: out of memory for %d x %zu floats of scratch", nth,
                        j.scratch_floats);
            goto zero;
        }
    }
    hy_pool_run_n(cpu->pool, nth, hy_ssd_worker(), &j);
    goto out;
zero:
    memset(y, 0, sizeof(float) * (size_t)batch->n_tokens * (size_t)HY_MAX(p->n_head, 0) *
                     (size_t)HY_MAX(p->head_dim, 0));
out:
    free(j.scratch);
    free(tA);
    free(tD);
    free(tbias);
}

/* ---- gated grouped RMSNorm ------------------------------------------------- */

typedef struct {
    float *y;
    const float *z;
    int64_t z_stride;
    const float *w;
    int32_t n_rows, dim, group;
    float eps;
} hy_gnorm_job_t;

static void hy_gnorm_worker(void *arg, int ith, int nth)
{
    hy_gnorm_job_t *j = arg;
    int64_t lo, hi;

    hy_cpu_split(j->n_rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        float *y = j->y + r * j->dim;
        const float *z = j->z + r * j->z_stride;

        /* gate first, then normalise each group: transformers'
         * MambaRMSNormGated with norm_before_gate=False, as llama.cpp's
         * build_mamba2_layer (y * silu(z), then group rms_norm, then w) */
        for (int32_t c = 0; c < j->dim; c++)
            y[c] *= z[c] / (1.0f + expf(-z[c]));
        for (int32_t g0 = 0; g0 < j->dim; g0 += j->group) {
            float ss = 0.0f, sc;
            for (int32_t c = g0; c < g0 + j->group; c++)
                ss += y[c] * y[c];
            sc = 1.0f / sqrtf(ss / (float)j->group + j->eps);
            for (int32_t c = g0; c < g0 + j->group; c++)
                y[c] = y[c] * sc * j->w[c];
        }
    }
}

void hy_cpu_group_rmsnorm_gated(hy_backend_t *be, float *y, const float *z, int32_t z_stride,
                                const hy_weight_t *w, int32_t n_rows, int32_t dim,
                                int32_t group_size, float eps)
{
    hy_cpu_t *cpu = be->ctx;
    hy_gnorm_job_t j;
    float *tw = NULL;
    int64_t work;

    if (n_rows <= 0)
        return;
    if (dim <= 0 || group_size <= 0 || dim % group_size != 0 || z_stride < dim) {
        hy_cpu_fail(cpu, HY_EINVAL, "group_rmsnorm_gated: dim %d, group %d (must divide dim), z stride %d",
                    dim, group_size, z_stride);
        memset(y, 0, sizeof(float) * (size_t)n_rows * (size_t)HY_MAX(dim, 0));
        return;
    }
    j.w = hy_cpu_weight_floats(cpu, "group_rmsnorm_gated", w, dim, &tw);
    if (j.w == NULL) {
        memset(y, 0, sizeof(float) * (size_t)n_rows * (size_t)dim);
        return;
    }
    j.y = y;
    j.z = z;
    j.z_stride = z_stride;
    j.n_rows = n_rows;
    j.dim = dim;
    j.group = group_size;
    j.eps = eps;
    work = (int64_t)n_rows * dim * 8; /* expf dominates */
    hy_pool_run_n(cpu->pool, work < 65536 ? 1 : HY_MIN(cpu->n_threads, n_rows),
                  hy_gnorm_worker, &j);
    free(tw);
}
