/*
 * test_cuda_rec.c - the CUDA backend's Gated DeltaNet and Mamba-2 SSD ops
 * (chunked prefill + exact recurrent decode, kernels/hy_rec.cu) against the
 * CPU backend: the cases of rec_cases.h (sequences of 1, 7, 64, 65 and 200
 * rows in one ragged call, continuation prefills mixed with decode tokens,
 * decode steps; outputs and every slot's state after each call), at the
 * real models' head sizes, the lightning op (bit for bit), plus a shape the
 * op must refuse.  Without a GPU
 * it reports "# SKIP no GPU"; test_rec_chunk.c checks the same kernel code
 * on the host in every build.
 */
#include "backend/backend.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_impl.h" /* the state arena, to compare slots */
#include "backend/lightning.h"
#include "rec_cases.h"

#include <math.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

static hy_backend_t *g_gpu;

/* ---- the GPU as a device under test ---------------------------------------------- */

typedef struct {
    hy_weight_t w[3];     /* dt_bias, A, D (uploaded by weight_init) */
    float *wdata[64];     /* every case's host copies, freed at the end */
    int n_wdata;
    bool has_D;
} gpu_t;

static int gpu_init(rec_dev_t *d, int64_t rec_floats, int32_t n_slots, char *err)
{
    int64_t conv = 0;
    hy_state_layout_t lay = {1, n_slots, &conv, &rec_floats};

    (void)d;
    return g_gpu->i->state_init(g_gpu, &lay, err);
}

static void gpu_ssd_weights(rec_dev_t *d, const float *dt_bias, const float *A, const float *D,
                            int32_t n_head)
{
    gpu_t *c = d->ctx;
    const float *src[3] = {dt_bias, A, D};
    char err[HY_ERR_LEN];

    c->has_D = D != NULL;
    for (int i = 0; i < 3 && c->n_wdata < 64; i++) {
        /* the backend keeps its copy until it is freed: the host data too */
        float *h = malloc(sizeof(float) * (size_t)n_head);
        c->wdata[c->n_wdata++] = h;
        memcpy(h, src[i] ? src[i] : dt_bias, sizeof(float) * (size_t)n_head);
        memset(&c->w[i], 0, sizeof c->w[i]);
        c->w[i].type = HY_DTYPE_F32;
        c->w[i].ne[0] = n_head;
        c->w[i].ne[1] = c->w[i].ne[2] = c->w[i].ne[3] = 1;
        c->w[i].row_bytes = sizeof(float) * (size_t)n_head;
        c->w[i].data = h;
        c->w[i].name = i == 0 ? "dt_bias" : i == 1 ? "A" : "D";
        if (g_gpu->i->weight_init(g_gpu, &c->w[i], err) != HY_OK)
            printf("# weight_init: %s\n", err);
    }
}

static float *gpu_put(const float *h, size_t n)
{
    float *d = g_gpu->i->alloc(g_gpu, n);
    if (d)
        g_gpu->i->upload(g_gpu, d, h, n);
    return d;
}

static void gpu_gdn(rec_dev_t *d, const hy_batch_t *b, const float *qkv, size_t qkv_n,
                    int32_t koff, int32_t voff, int32_t stride, const float *g,
                    const float *beta, float *o, size_t o_n, const hy_gdn_params_t *p)
{
    const size_t ng = (size_t)b->n_tokens * p->n_v_heads;
    float *dq = gpu_put(qkv, qkv_n), *dg = gpu_put(g, ng), *db = gpu_put(beta, ng);
    float *dout = g_gpu->i->alloc(g_gpu, o_n);

    (void)d;
    g_gpu->i->gdn(g_gpu, 0, b, dq, dq + koff, dq + voff, stride, dg, db, dout, p);
    g_gpu->i->download(g_gpu, o, dout, o_n);
    g_gpu->i->release(g_gpu, dq);
    g_gpu->i->release(g_gpu, dg);
    g_gpu->i->release(g_gpu, db);
    g_gpu->i->release(g_gpu, dout);
}

static void gpu_ssd(rec_dev_t *d, const hy_batch_t *b, const float *xr, size_t xr_n,
                    int32_t dt_off, int32_t x_stride, const float *bc, size_t bc_n,
                    int32_t c_off, int32_t bc_stride, float *y, size_t y_n,
                    const hy_ssd_params_t *p)
{
    gpu_t *c = d->ctx;
    float *dx = gpu_put(xr, xr_n), *dbc = gpu_put(bc, bc_n), *dy = g_gpu->i->alloc(g_gpu, y_n);

    g_gpu->i->ssd(g_gpu, 0, b, dx, x_stride, dx + dt_off, x_stride, &c->w[0], &c->w[1], dbc,
                  dbc + c_off, bc_stride, c->has_D ? &c->w[2] : NULL, dy, p);
    g_gpu->i->download(g_gpu, y, dy, y_n);
    g_gpu->i->release(g_gpu, dx);
    g_gpu->i->release(g_gpu, dbc);
    g_gpu->i->release(g_gpu, dy);
}

static void gpu_state(rec_dev_t *d, int32_t slot, float *out, int64_t n)
{
    hy_cuda_t *cu = g_gpu->ctx;

    (void)d;
    g_gpu->i->download(g_gpu, out, cu->st + slot * cu->st_slot_floats + cu->st_rec_off[0],
                       (size_t)n);
}

static int gpu_status(rec_dev_t *d, char *err)
{
    (void)d;
    return g_gpu->i->status(g_gpu, err);
}

/* A bad shape is refused with the CPU's message and a zeroed output. */
static void test_refused(void)
{
    char err[HY_ERR_LEN];
    int64_t conv = 0, rec = 3 * 16 * 16;
    hy_state_layout_t lay = {1, 2, &conv, &rec};
    hy_batch_seq_t seq = {0, 2, 0, NULL, 0, 1, NULL, 0, NULL, 0, 0, 0, NULL, NULL};
    int32_t tok[2] = {0, 0}, pos[2] = {0, 1};
    hy_batch_t b = {2, tok, pos, 1, &seq};
    hy_gdn_params_t p = {2, 3, 16, 16, false, 64}; /* 3 v-heads over 2 k-heads */
    float ones[2 * 3 * 16], out[2 * 3 * 16];
    float *dx, *dout;
    int rc;

    for (int i = 0; i < 2 * 3 * 16; i++)
        ones[i] = 1.0f;
    g_gpu->i->state_init(g_gpu, &lay, err);
    dx = gpu_put(ones, 2 * 3 * 16);
    dout = gpu_put(ones, 2 * 3 * 16);
    g_gpu->i->gdn(g_gpu, 0, &b, dx, dx, dx, 48, dx, dx, dout, &p);
    rc = g_gpu->i->status(g_gpu, err);
    g_gpu->i->download(g_gpu, out, dout, 2 * 3 * 16);
    HY_T_OK(rc == HY_EINVAL && strstr(err, "gdn: bad shape") && out[0] == 0.0f &&
                out[2 * 3 * 16 - 1] == 0.0f,
            "gdn with 3 v-heads over 2 k-heads is refused, output zeroed: %s", rc ? err : "ok");
    g_gpu->i->release(g_gpu, dx);
    g_gpu->i->release(g_gpu, dout);
}

/* Lightning attention (backend/lightning.h), blocked and recurrent, on a
 * schedule of continuation prefills and decode steps: the GPU reads the
 * CPU's decay table and rounds each product and sum on its own in the
 * CPU's order, so outputs and the live state (S and the current block's
 * rows) must be the CPU's bits exactly (test_lightning_chunk.c runs the
 * same kernel code on the host). */
static void test_lightning(hy_backend_t *cpu, int H, int d, int C)
{
    static const int sched[4][3] = {{37, 1, 20}, {1, 1, 13}, {30, 0, 1}, {1, 17, 1}};
    const hy_lightning_params_t p = {H, d, C};
    const int hs = 3 * d, stride = H * hs, O = H * d;
    int64_t rec = hy_lightning_state_floats(&p), conv = 0, hf = hy_lightning_head_floats(d, C);
    hy_state_layout_t lay = {1, 3, &conv, &rec};
    float slope[8], *table = malloc(sizeof(float) * (size_t)H * (C + 1));
    hy_weight_t wc = {HY_DTYPE_F32, {C + 1, H, 1, 1}, sizeof(float) * (size_t)(C + 1), table,
                      NULL, "decay", HY_WLAYOUT_ROWS}, wg = wc;
    float *gs = malloc(sizeof(float) * (size_t)rec);
    int n_past[3] = {0};
    char err[HY_ERR_LEN];
    bool same = true;

    for (int h = 0; h < H; h++)
        slope[h] = h == H - 1 ? 0.0f : 0.5f * powf(0.3f, (float)h);
    hy_lightning_decays(slope, H, C, table);
    same = g_gpu->i->weight_init(g_gpu, &wg, err) == HY_OK &&
           cpu->i->state_init(cpu, &lay, err) == HY_OK &&
           g_gpu->i->state_init(g_gpu, &lay, err) == HY_OK;
    for (int s = 0; s < 3 && same; s++) {
        cpu->i->state_clear(cpu, s);
        g_gpu->i->state_clear(g_gpu, s);
    }
    for (int c = 0; c < 4 && same; c++) {
        hy_batch_seq_t seqs[3];
        hy_batch_t b = {0, NULL, NULL, 0, seqs};
        float *x, *oc, *og, *dx, *dout;

        for (int s = 0; s < 3; s++)
            if (sched[c][s] > 0) {
                seqs[b.n_seqs++] = (hy_batch_seq_t){b.n_tokens, sched[c][s], n_past[s], NULL, 0,
                                                    2 - s, NULL, 0, NULL, 0, 0, 0, NULL, NULL};
                b.n_tokens += sched[c][s];
            }
        x = malloc(sizeof(float) * (size_t)b.n_tokens * stride);
        oc = malloc(sizeof(float) * (size_t)b.n_tokens * O);
        og = malloc(sizeof(float) * (size_t)b.n_tokens * O);
        for (size_t e = 0; e < (size_t)b.n_tokens * stride; e++)
            x[e] = rec_rnd();
        cpu->i->lightning(cpu, 0, &b, x, x + d, x + 2 * d, stride, hs, &wc, oc, &p);
        dx = gpu_put(x, (size_t)b.n_tokens * stride);
        dout = g_gpu->i->alloc(g_gpu, (size_t)b.n_tokens * O);
        g_gpu->i->lightning(g_gpu, 0, &b, dx, dx + d, dx + 2 * d, stride, hs, &wg, dout, &p);
        g_gpu->i->download(g_gpu, og, dout, (size_t)b.n_tokens * O);
        same = cpu->i->status(cpu, err) == HY_OK && g_gpu->i->status(g_gpu, err) == HY_OK &&
               memcmp(oc, og, sizeof(float) * (size_t)b.n_tokens * O) == 0;
        for (int i = 0; i < b.n_seqs; i++)
            n_past[2 - seqs[i].state_slot] += seqs[i].n;
        for (int s = 0; s < 3 && same; s++) {
            const float *cs = hy_cpu_state_rec(cpu->ctx, 2 - s, 0);
            const int m = C > 1 ? n_past[s] % C : 0;
            gpu_state(NULL, 2 - s, gs, rec);
            for (int h = 0; h < H && same; h++) {
                const float *a = cs + h * hf, *g = gs + h * hf;
                same = memcmp(a, g, sizeof(float) * (size_t)d * d) == 0;
                for (int i = 0; i < d && C > 1 && same; i++)
                    same = memcmp(a + d * d + i * C, g + d * d + i * C, sizeof(float) * m) == 0;
                if (C > 1 && same)
                    same = memcmp(a + d * d + d * C, g + d * d + d * C,
                                  sizeof(float) * (size_t)m * d) == 0;
            }
        }
        g_gpu->i->release(g_gpu, dx);
        g_gpu->i->release(g_gpu, dout);
        free(x);
        free(oc);
        free(og);
    }
    HY_T_OK(same, "lightning H %d d %d chunk %d: 4 calls of prefills and decode steps, outputs "
            "and live state == the CPU's bits (%s)", H, d, C, same ? "ok" : err);
    free(table);
    free(gs);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A long prefill at real model sizes, on the GPU alone: the chunked form
 * against the exact recurrence (chunk 1) on the same inputs from the same
 * (zero) state, and the time of each (a diagnostic for the device log:
 * timings are not asserted).  GDN: qwen35-2B's 16 v-heads over 16 k-heads
 * of 128; SSD: granite-4.0-h's 48 heads of 64, one group, state 128. */
static void test_long(int is_ssd)
{
    const int32_t n = 4096;
    const int H = is_ssd ? 48 : 16, dk = 128, dv = is_ssd ? 64 : 128, N = 128;
    /* the slot of each form: chunked (sized for the CPU's block form), recurrent */
    const int64_t rec_f[2] = {
        is_ssd ? hy_ssd_state_floats(&(hy_ssd_params_t){H, dv, 1, N, 32})
               : hy_gdn_state_floats(&(hy_gdn_params_t){H, H, dk, dv, false, 64}),
        is_ssd ? (int64_t)H * dv * N : (int64_t)H * dk * dv};
    int64_t rec = rec_f[0];
    const int32_t stride = is_ssd ? H * dv + H : 2 * H * dk + H * dv;
    const int32_t bc_stride = 2 * N;
    const size_t nin = (size_t)n * stride, nout = (size_t)n * H * dv, ng = (size_t)n * H;
    int64_t conv = 0;
    hy_state_layout_t lay = {1, 2, &conv, &rec};
    hy_batch_seq_t seq[2] = {{.first = 0, .n = n, .state_slot = 0},
                             {.first = 0, .n = n, .state_slot = 1}};
    int32_t *tok = calloc((size_t)n, sizeof(int32_t));
    hy_batch_t b[2] = {{n, tok, tok, 1, &seq[0]}, {n, tok, tok, 1, &seq[1]}};
    float *hin = malloc(sizeof(float) * nin), *hg = malloc(sizeof(float) * ng);
    float *hbe = malloc(sizeof(float) * ng), *hbc = malloc(sizeof(float) * (size_t)n * bc_stride);
    float *o[2] = {malloc(sizeof(float) * nout), malloc(sizeof(float) * nout)};
    float wv[3][48];
    double ms[2] = {0, 0}, e;
    char err[HY_ERR_LEN];
    gpu_t w;
    rec_dev_t d = {"cuda", &w, gpu_init, gpu_ssd_weights, gpu_gdn, gpu_ssd, gpu_state, gpu_status};
    int rc;

    memset(&w, 0, sizeof w);
    for (size_t i = 0; i < nin; i++)
        hin[i] = rec_rnd() * (is_ssd ? 1.0f : 0.0884f); /* q, k near unit norm */
    for (size_t i = 0; i < ng; i++) {
        hg[i] = -0.3f * fabsf(rec_rnd());
        hbe[i] = 0.5f + 0.5f * rec_rnd();
    }
    for (size_t i = 0; i < (size_t)n * bc_stride; i++)
        hbc[i] = rec_rnd();
    if (is_ssd) {
        for (size_t t = 0; t < (size_t)n; t++)
            for (int h = 0; h < H; h++)
                hin[t * stride + (size_t)H * dv + h] = -2.0f + 2.0f * rec_rnd();
        for (int h = 0; h < H; h++) {
            wv[0][h] = -1.0f + 0.5f * rec_rnd(); /* dt in (0.004, 0.47), as rec_cases.h */
            wv[1][h] = -(0.5f + 4.0f * fabsf(rec_rnd()));
            wv[2][h] = rec_rnd();
        }
        gpu_ssd_weights(&d, wv[0], wv[1], wv[2], H);
    }
    float *din = gpu_put(hin, nin), *dg = gpu_put(hg, ng), *dbe = gpu_put(hbe, ng);
    float *dbc = gpu_put(hbc, (size_t)n * bc_stride), *dout = g_gpu->i->alloc(g_gpu, nout);
    for (int rep = 0; rep < 2; rep++)       /* the first round warms up */
        for (int form = 0; form < 2; form++) { /* 0 chunked, 1 recurrent */
            rec = rec_f[form];
            if ((rc = g_gpu->i->state_init(g_gpu, &lay, err)) != HY_OK)
                break;
            g_gpu->i->state_clear(g_gpu, form);
            g_gpu->i->sync(g_gpu);
            double t0 = now_ms();
            if (is_ssd) {
                hy_ssd_params_t p = {H, dv, 1, N, form ? 1 : 32};
                g_gpu->i->ssd(g_gpu, 0, &b[form], din, stride, din + H * dv, stride, &w.w[0],
                              &w.w[1], dbc, dbc + N, bc_stride, &w.w[2], dout, &p);
            } else {
                hy_gdn_params_t p = {H, H, dk, dv, false, form ? 1 : 64};
                g_gpu->i->gdn(g_gpu, 0, &b[form], din, din + H * dk, din + 2 * H * dk, stride, dg,
                              dbe, dout, &p);
            }
            g_gpu->i->sync(g_gpu);
            ms[form] = now_ms() - t0;
            g_gpu->i->download(g_gpu, o[form], dout, nout);
        }
    e = rec_err(o[0], o[1], nout);
    /* chunked vs recurrent: another summation order over 4096 rows, so
     * the bound of test_cuda_ops' chunked-CPU-vs-recurrent-GPU check */
    HY_T_OK(rc == HY_OK && rec_status(&d, "long prefill") && e <= 1e-4,
            "%s %d-token prefill, %d heads: chunked vs recurrent on the GPU rel err %.2e "
            "(chunked %.2f ms, recurrent %.2f ms)", is_ssd ? "ssd" : "gdn", n, H, e, ms[0], ms[1]);
    g_gpu->i->release(g_gpu, din);
    g_gpu->i->release(g_gpu, dg);
    g_gpu->i->release(g_gpu, dbe);
    g_gpu->i->release(g_gpu, dbc);
    g_gpu->i->release(g_gpu, dout);
    for (int i = 0; i < w.n_wdata; i++)
        free(w.wdata[i]);
    free(tok);
    free(hin);
    free(hg);
    free(hbe);
    free(hbc);
    free(o[0]);
    free(o[1]);
}

int main(void)
{
    hy_backend_opts_t bo = {.n_threads = 2};
    char err[HY_ERR_LEN];
    rec_cpu_t cpu;
    gpu_t gpu;
    rec_dev_t ref, dut = {"cuda", &gpu, gpu_init, gpu_ssd_weights, gpu_gdn, gpu_ssd, gpu_state,
                          gpu_status};
    int rc = hy_backend_cuda_new(&g_gpu, &bo, err);

    if (rc != HY_OK) {
        HY_T_OK(rc == HY_EUNSUPPORTED && strncmp(err, "no CUDA device: ", 16) == 0,
                "no GPU: hy_backend_cuda_new fails cleanly: %s", err);
        printf("ok %d - CUDA recurrent-op tests # SKIP no GPU\n", ++hy_t_count);
        return hy_t_done();
    }
    memset(&cpu, 0, sizeof cpu);
    memset(&gpu, 0, sizeof gpu);
    if (hy_backend_cpu_new(&cpu.be, &bo, err) != HY_OK) {
        HY_T_OK(0, "cpu backend: %s", err);
        return hy_t_done();
    }
    ref = rec_cpu_dev(&cpu);

    /* Chunked on both sides at the same boundaries, products in the same
     * order (test_rec_chunk.c sees 1e-7 between them on the host): what is
     * left is FMA contraction and the device's expf, so the float32 bound
     * 1e-5 holds. */
    rec_gdn_case(&ref, &dut, 2, 4, 32, 48, false, 64, 1e-5);
    rec_gdn_case(&ref, &dut, 2, 4, 32, 48, true, 16, 1e-5);
    rec_gdn_case(&ref, &dut, 2, 4, 128, 128, true, 64, 1e-5);  /* qwen35 head sizes */
    rec_gdn_case(&ref, &dut, 1, 2, 128, 128, false, 64, 1e-5); /* qwen3next */
    rec_gdn_case(&ref, &dut, 1, 1, 256, 256, false, 64, 1e-5); /* largest chunked */
    rec_gdn_case(&ref, &dut, 2, 2, 16, 16, false, 1, 1e-5);    /* recurrence only */
    rec_gdn_case(&ref, &dut, 1, 3, 30, 20, false, 64, 1e-5);   /* ragged register tiles */
    /* d_k 320: the recurrence on the GPU against the CPU's chunks (the
     * old test_cuda_ops bound for that pairing) */
    rec_gdn_case(&ref, &dut, 1, 1, 320, 32, false, 64, 1e-4);
    /* chunk 100: cut to 64 rows on the GPU, other boundaries than the
     * CPU's, so only rounding agrees: 1e-4 */
    rec_gdn_case(&ref, &dut, 1, 2, 64, 64, false, 100, 1e-4);
    rec_ssd_case(&ref, &dut, 4, 16, 2, 32, true, 32, 1e-5);
    rec_ssd_case(&ref, &dut, 4, 64, 1, 128, true, 32, 1e-5);   /* granite / nemotron_h */
    rec_ssd_case(&ref, &dut, 3, 48, 3, 16, false, 64, 1e-5);
    rec_ssd_case(&ref, &dut, 2, 18, 1, 20, true, 32, 1e-5);
    rec_ssd_case(&ref, &dut, 2, 16, 1, 256, true, 64, 1e-5);
    rec_ssd_case(&ref, &dut, 4, 16, 2, 32, true, 1, 1e-5);
    test_lightning(cpu.be, 4, 128, 16); /* MiniMax's head size and block */
    test_lightning(cpu.be, 3, 40, 5);   /* value tiles of 32 + 8 */
    test_lightning(cpu.be, 2, 16, 1);   /* the recurrence */
    test_refused();
    test_long(0);
    test_long(1);

    cpu.be->i->free(cpu.be);
    rec_cpu_free(&cpu);
    g_gpu->i->free(g_gpu);
    for (int i = 0; i < gpu.n_wdata; i++)
        free(gpu.wdata[i]);
    return hy_t_done();
}
