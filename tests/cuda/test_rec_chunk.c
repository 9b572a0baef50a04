/*
 * test_rec_chunk.c - the CUDA backend's chunked Gated DeltaNet and Mamba-2
 * SSD code (kernels/hy_rec_chunk.h) run on the host, one "thread" per
 * block, against the CPU backend: the cases of rec_cases.h (ragged
 * batches, continuation prefills, decode steps, every slot's state), plus
 * the launch plan (chunk lengths, shared memory per block and which
 * devices can hold it).  Runs in every build, GPU or not, so the kernels'
 * algorithm and indexing are checked wherever the tests run; shared memory
 * is allocated to its exact planned size and filled with NaN before each
 * block, so an overrun (ASan) or a read of an unwritten element shows.
 */
#include "backend/backend.h"

#include <pthread.h>

/* Blocks run on emu_nth host threads: the kernels' barriers become a real
 * one, so a phase that read what another thread of it writes, or a work
 * split that missed or doubled an element, would change the results. */
static pthread_barrier_t emu_bar;
#define HY_RC_SYNC() pthread_barrier_wait(&emu_bar)
#include "hy_rec_chunk.h"
#include "rec_cases.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Shared memory a block may opt into: A100 (sm_80) and H100/H200 (sm_90). */
#define OPTIN_SM80 166912
#define OPTIN_SM90 232448

/* ---- the emulated device ------------------------------------------------------------- */

typedef struct {
    int nth;                  /* host threads per emulated block */
    float *st;                /* [REC_SLOTS][rec_floats] */
    int64_t rec_floats;
    float *dt_bias, *A, *D;   /* ssd weights (D may be NULL) */
    long chunked_blocks, recurrent_units;
} emu_t;

static int emu_init(rec_dev_t *d, int64_t rec_floats, int32_t n_slots, char *err)
{
    emu_t *e = d->ctx;

    free(e->st);
    e->st = calloc((size_t)n_slots * (size_t)rec_floats, sizeof(float));
    e->rec_floats = rec_floats;
    if (!e->st)
        return hy_err(err, HY_ENOMEM, "emu: out of memory");
    return HY_OK;
}

static void emu_ssd_weights(rec_dev_t *d, const float *dt_bias, const float *A, const float *D,
                            int32_t n_head)
{
    emu_t *e = d->ctx;
    float **dst[3] = {&e->dt_bias, &e->A, &e->D};
    const float *src[3] = {dt_bias, A, D};

    for (int i = 0; i < 3; i++) {
        free(*dst[i]);
        *dst[i] = NULL;
        if (src[i]) {
            *dst[i] = malloc(sizeof(float) * (size_t)n_head);
            memcpy(*dst[i], src[i], sizeof(float) * (size_t)n_head);
        }
    }
}

/* One block: the GDN or SSD block function on e->nth threads. */
typedef struct {
    int is_ssd, tid, nth;
    const void *args;
    int64_t row0;
    int n, head, kh_or_grp, col0, width;
    float *S, *sm;
} emu_block_t;

static void *emu_thread(void *arg)
{
    emu_block_t *b = arg;

    if (b->is_ssd)
        hy_rc_ssd_block(b->args, b->row0, b->n, b->S, b->head, b->kh_or_grp, b->col0, b->width,
                        b->sm, b->tid, b->nth);
    else
        hy_rc_gdn_block(b->args, b->row0, b->n, b->S, b->kh_or_grp, b->head, b->col0, b->width,
                        b->sm, b->tid, b->nth);
    return NULL;
}

static void emu_run(emu_t *e, emu_block_t blk)
{
    pthread_t th[16];
    emu_block_t bs[16];
    const int nth = HY_MAX(1, HY_MIN(e->nth, 16));

    pthread_barrier_init(&emu_bar, NULL, (unsigned)nth);
    for (int t = 0; t < nth; t++) {
        bs[t] = blk;
        bs[t].tid = t;
        bs[t].nth = nth;
        if (t > 0)
            pthread_create(&th[t], NULL, emu_thread, &bs[t]);
    }
    emu_thread(&bs[0]);
    for (int t = 1; t < nth; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&emu_bar);
    e->chunked_blocks++;
}

static float *emu_smem(size_t n)
{
    float *sm = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        sm[i] = NAN;
    return sm;
}

static void emu_gdn(rec_dev_t *d, const hy_batch_t *b, const float *qkv, size_t qkv_n,
                    int32_t koff, int32_t voff, int32_t stride, const float *g,
                    const float *beta, float *o, size_t o_n, const hy_gdn_params_t *p)
{
    emu_t *e = d->ctx;
    const int dk = p->d_k, dv = p->d_v, Hv = p->n_v_heads, rep = Hv / p->n_k_heads;
    const int C = hy_rc_chunk_len(p->chunk);
    const bool chunked = hy_rc_plan_smem(0, p->chunk, dk, SIZE_MAX) > 0;
    const size_t smf = chunked ? hy_rc_gdn_smem_floats(C, dk) : 0;
    hy_rc_gdn_t a = {qkv, qkv + koff, qkv + voff, stride, g, beta, o, Hv, dk, dv, C};

    (void)qkv_n;
    (void)o_n;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const hy_batch_seq_t *sq = &b->seqs[s];
        for (int h = 0; h < Hv; h++) {
            const int kh = p->v_tiled ? h % p->n_k_heads : h / rep;
            float *S = e->st + (size_t)sq->state_slot * e->rec_floats + (size_t)h * dk * dv;
            if (chunked && sq->n >= HY_RC_GDN_MIN_ROWS) {
                for (int j0 = 0; j0 < dv; j0 += HY_RC_GDN_TV) {
                    emu_block_t blk = {0, 0, 1, &a, sq->first, sq->n, h, kh, j0,
                                       HY_MIN(HY_RC_GDN_TV, dv - j0), S, emu_smem(smf)};
                    emu_run(e, blk);
                    free(blk.sm);
                }
                continue;
            }
            /* the recurrent kernel's arithmetic (hy_gdn_kernel) */
            e->recurrent_units++;
            for (int t = 0; t < sq->n; t++) {
                const int64_t r = (int64_t)sq->first + t;
                const float *q = qkv + r * stride + (int64_t)kh * dk;
                const float *k = qkv + koff + r * stride + (int64_t)kh * dk;
                const float *v = qkv + voff + r * stride + (int64_t)h * dv;
                const float decay = expf(g[r * Hv + h]), bb = beta[r * Hv + h];
                for (int j = 0; j < dv; j++) {
                    float u = 0.0f, out = 0.0f;
                    for (int i = 0; i < dk; i++) {
                        S[i * dv + j] *= decay;
                        u += S[i * dv + j] * k[i];
                    }
                    const float delta = bb * (v[j] - u);
                    for (int i = 0; i < dk; i++) {
                        S[i * dv + j] += k[i] * delta;
                        out += S[i * dv + j] * q[i];
                    }
                    o[r * (int64_t)Hv * dv + (int64_t)h * dv + j] = out;
                }
            }
        }
    }
}

static void emu_ssd(rec_dev_t *d, const hy_batch_t *b, const float *xr, size_t xr_n,
                    int32_t dt_off, int32_t x_stride, const float *bc, size_t bc_n,
                    int32_t c_off, int32_t bc_stride, float *y, size_t y_n,
                    const hy_ssd_params_t *p)
{
    emu_t *e = d->ctx;
    const int H = p->n_head, P = p->head_dim, N = p->d_state, hpg = H / p->n_group;
    const int C = hy_rc_chunk_len(p->chunk);
    const bool chunked = hy_rc_plan_smem(1, p->chunk, N, SIZE_MAX) > 0;
    const size_t smf = chunked ? hy_rc_ssd_smem_floats(C, N) : 0;
    hy_rc_ssd_t a = {xr, x_stride, xr + dt_off, x_stride, e->dt_bias, e->A, e->D, bc,
                     bc + c_off, bc_stride, y, H, P, N, C};

    (void)xr_n;
    (void)bc_n;
    (void)y_n;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const hy_batch_seq_t *sq = &b->seqs[s];
        for (int h = 0; h < H; h++) {
            float *S = e->st + (size_t)sq->state_slot * e->rec_floats + (size_t)h * P * N;
            if (chunked && sq->n >= HY_RC_SSD_MIN_ROWS) {
                for (int p0 = 0; p0 < P; p0 += HY_RC_SSD_TP) {
                    emu_block_t blk = {1, 0, 1, &a, sq->first, sq->n, h, h / hpg, p0,
                                       HY_MIN(HY_RC_SSD_TP, P - p0), S, emu_smem(smf)};
                    emu_run(e, blk);
                    free(blk.sm);
                }
                continue;
            }
            /* the recurrent kernel's arithmetic (hy_ssd_kernel) */
            e->recurrent_units++;
            for (int t = 0; t < sq->n; t++) {
                const int64_t r = (int64_t)sq->first + t;
                const float *Br = bc + r * bc_stride + (int64_t)(h / hpg) * N;
                const float *Cr = bc + c_off + r * bc_stride + (int64_t)(h / hpg) * N;
                const float dtv = hy_rc_softplus(xr[r * x_stride + dt_off + h] + e->dt_bias[h]);
                const float dA = expf(dtv * e->A[h]), Dh = e->D ? e->D[h] : 0.0f;
                for (int pp = 0; pp < P; pp++) {
                    const float xv = xr[r * x_stride + (int64_t)h * P + pp], xdt = xv * dtv;
                    float sum = 0.0f;
                    for (int i = 0; i < N; i++) {
                        const float sv = S[pp * N + i] * dA + xdt * Br[i];
                        S[pp * N + i] = sv;
                        sum += sv * Cr[i];
                    }
                    y[r * (int64_t)H * P + (int64_t)h * P + pp] = sum + Dh * xv;
                }
            }
        }
    }
}

static void emu_state(rec_dev_t *d, int32_t slot, float *out, int64_t n)
{
    emu_t *e = d->ctx;

    memcpy(out, e->st + (size_t)slot * e->rec_floats, sizeof(float) * (size_t)n);
}

static int emu_status(rec_dev_t *d, char *err)
{
    (void)d;
    err[0] = '\0';
    return HY_OK;
}

/* ---- the launch plan ------------------------------------------------------------------- */

static void test_plan(void)
{
    HY_T_OK(hy_rc_chunk_len(1) == 0 && hy_rc_chunk_len(0) == 0 && hy_rc_chunk_len(2) == 2 &&
                hy_rc_chunk_len(32) == 32 && hy_rc_chunk_len(64) == 64 &&
                hy_rc_chunk_len(100) == HY_RC_MAX_CHUNK,
            "chunk lengths: 1 means the recurrence, 2..64 kept, longer cut to 64");
    /* qwen3next / qwen35 (d_k 128, chunk 64): 121.5 KB, on both generations */
    HY_T_OK(hy_rc_plan_smem(0, 64, 128, OPTIN_SM80) == 124416 &&
                hy_rc_plan_smem(0, 64, 128, OPTIN_SM90) == 124416,
            "gdn d_k 128, chunk 64: 124416 bytes per block on sm_80 and sm_90");
    HY_T_OK(hy_rc_plan_smem(0, 64, 256, OPTIN_SM90) == 206336 &&
                hy_rc_plan_smem(0, 64, 256, OPTIN_SM80) == 0,
            "gdn d_k 256: fits an H100/H200 block (206336 bytes), recurrence on an A100");
    HY_T_OK(hy_rc_plan_smem(0, 64, 257, SIZE_MAX) == 0 && hy_rc_plan_smem(0, 1, 128, SIZE_MAX) == 0 &&
                hy_rc_plan_smem(1, 64, 0, SIZE_MAX) == 0,
            "d_k 257, chunk 1 and d_state 0 take the recurrence");
    /* granitehybrid / nemotron_h (d_state 128, chunk 32) */
    HY_T_OK(hy_rc_plan_smem(1, 32, 128, OPTIN_SM80) == 58240 &&
                hy_rc_plan_smem(1, 64, 256, OPTIN_SM90) == 190080 &&
                hy_rc_plan_smem(1, 64, 256, OPTIN_SM80) == 0,
            "ssd: d_state 128 chunk 32 58240 bytes; d_state 256 chunk 64 on sm_90 only");
    /* the constants the tile loops assume: triangular tiles cover a whole
     * chunk in one round of the block's threads, warps hold whole tiles */
    HY_T_OK(HY_RC_THREADS % 32 == 0 && HY_RC_GDN_TV == 32 && HY_RC_SSD_TP == 32 &&
                HY_RC_MAX_CHUNK % HY_RC_SUB == 0 && HY_RC_SL * HY_RC_R == HY_RC_MAX_CHUNK &&
                (HY_RC_MAX_CHUNK / HY_RC_R) * HY_RC_SL <= HY_RC_THREADS,
            "kernel constants: %d threads, 32-wide tiles, %d x %d triangular tiles",
            HY_RC_THREADS, HY_RC_R, HY_RC_R);
}

int main(void)
{
    hy_backend_opts_t bo = {.n_threads = 2};
    char err[HY_ERR_LEN];
    rec_cpu_t cpu;
    emu_t emu;
    rec_dev_t ref, dut = {"host-run kernel code", &emu, emu_init, emu_ssd_weights, emu_gdn, emu_ssd,
                          emu_state, emu_status};

    test_plan();
    memset(&cpu, 0, sizeof cpu);
    memset(&emu, 0, sizeof emu);
    if (hy_backend_cpu_new(&cpu.be, &bo, err) != HY_OK) {
        HY_T_OK(0, "cpu backend: %s", err);
        return hy_t_done();
    }
    ref = rec_cpu_dev(&cpu);

    /* Same products in the same order as the CPU kernels; what differs is
     * FMA contraction (the CPU's AVX2/AVX-512 builds) and the blocked
     * forward substitution's grouping: 1e-5 relative, the float32 bound. */
    /* 5 threads: fewer than a tile's 32 columns, more than a phase's
     * single-thread work, so strided loops wrap and idle at once */
    emu.nth = 5;
    dut.name = "host-run kernel code (5 threads)";
    rec_gdn_case(&ref, &dut, 2, 4, 32, 48, false, 64, 1e-5);
    rec_gdn_case(&ref, &dut, 1, 2, 128, 128, false, 64, 1e-5);
    rec_gdn_case(&ref, &dut, 1, 1, 256, 40, false, 64, 1e-5);
    rec_gdn_case(&ref, &dut, 2, 2, 16, 16, false, 1, 1e-5);
    rec_gdn_case(&ref, &dut, 1, 3, 30, 20, false, 64, 1e-5); /* ragged register tiles */
    rec_ssd_case(&ref, &dut, 2, 18, 1, 20, true, 32, 1e-5);
    rec_ssd_case(&ref, &dut, 4, 16, 2, 32, true, 32, 1e-5);
    rec_ssd_case(&ref, &dut, 2, 64, 1, 128, true, 32, 1e-5);
    rec_ssd_case(&ref, &dut, 2, 16, 1, 256, true, 64, 1e-5);
    rec_ssd_case(&ref, &dut, 4, 16, 2, 32, true, 1, 1e-5);
    emu.nth = 1;
    dut.name = "host-run kernel code (1 thread)";
    rec_gdn_case(&ref, &dut, 2, 4, 32, 48, true, 16, 1e-5);
    rec_ssd_case(&ref, &dut, 3, 48, 3, 16, false, 64, 1e-5);
    HY_T_OK(emu.chunked_blocks > 0 && emu.recurrent_units > 0,
            "the cases ran both forms: %ld chunked blocks, %ld recurrent (sequence, head) units",
            emu.chunked_blocks, emu.recurrent_units);

    cpu.be->i->free(cpu.be);
    rec_cpu_free(&cpu);
    free(emu.st);
    free(emu.dt_bias);
    free(emu.A);
    free(emu.D);
    return hy_t_done();
}
