/*
 * test_cuda_moe.c - the CUDA backend's MoE FFN against the CPU backend:
 * the whole op for 1, 3, 8 tokens (routing + indexed mat-vec, no host
 * synchronisation) and 40 tokens (device routing, grouped cuBLAS) with
 * every weight type the device reads, every gating variant (softmax,
 * sigmoid + selection bias + scale, with and without renormalisation),
 * mixed per-stack types; the routing kernel alone against
 * hy_moe_route_one; and MoE decode steps captured as CUDA graphs (no
 * broken capture, same results as the CPU), a prefill-size MoE step inside
 * a capture (graph launched at the selection download, the rest eager).
 * Relative RMS error limits: F32 experts 1e-5, others 1e-2 (the CPU rounds
 * activations to 8 bits for quantized weights).  Skips without a GPU.
 */
#include "backend/backend.h"
#include "backend/layout.h" /* hy_moe_route_one */
#include "backend/cpu/quant.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/graph.h"
#include "hy_kernels.h"
#include "../unit/test.h"
#include "cuda_test.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <string.h>

#define TOL_F32 1e-5
#define TOL_HALF 1e-2

/* ---- buffers and weights on both backends -------------------------------------- */

/* ---- one MoE layer on both backends --------------------------------------------- */

typedef struct {
    int32_t E, K, D, F;
    hy_dtype_t tg, tu, td;  /* gate / up / down stack types */
    int variant;            /* 0 softmax + renorm, 1 sigmoid + bias + renorm + scale
                             * (lfm2moe), 2 softmax without renorm */
} moe_shape_t;

typedef struct {
    hy_moe_t c, g;
    wpair_t w[5];
} moe_pair_t;

static void moe_new(moe_pair_t *mp, const moe_shape_t *s)
{
    float *bias = rnd_vec((size_t)s->E, 0.05f);

    memset(mp, 0, sizeof *mp);
    mp->w[0] = wpair_new(HY_DTYPE_F32, s->D, s->E, 1, rnd_weight_s(HY_DTYPE_F32, s->D, s->E, 0.2f));
    mp->w[1] = wpair_new(s->tg, s->D, s->F, s->E, rnd_weight_s(s->tg, s->D, (int64_t)s->F * s->E, 0.2f));
    mp->w[2] = wpair_new(s->tu, s->D, s->F, s->E, rnd_weight_s(s->tu, s->D, (int64_t)s->F * s->E, 0.2f));
    mp->w[3] = wpair_new(s->td, s->F, s->D, s->E, rnd_weight_s(s->td, s->F, (int64_t)s->D * s->E, 0.2f));
    mp->w[4] = wpair_new(HY_DTYPE_F32, s->E, 1, 1, bias);
    mp->c.n_expert = s->E;
    mp->c.n_expert_used = s->K;
    mp->c.n_ff_exp = s->F;
    mp->c.softmax_gating = s->variant != 1;
    mp->c.norm_topk = s->variant != 2;
    mp->c.weights_scale = s->variant == 1 ? 2.5f : s->variant == 2 ? 1.0f : 0.0f;
    mp->c.norm_eps = s->variant == 1 ? 1e-6f : 0.0f;
    mp->g = mp->c;
    mp->c.gate_inp = mp->w[0].c, mp->g.gate_inp = mp->w[0].g;
    mp->c.gate_exps = mp->w[1].c, mp->g.gate_exps = mp->w[1].g;
    mp->c.up_exps = mp->w[2].c, mp->g.up_exps = mp->w[2].g;
    mp->c.down_exps = mp->w[3].c, mp->g.down_exps = mp->w[3].g;
    if (s->variant == 1) {
        mp->c.exp_bias = mp->w[4].c;
        mp->g.exp_bias = mp->w[4].g;
    }
}

/* The GPU keeps its uploads until the backend is freed; the host data the
 * CPU backend reads goes once the case is done. */
static void moe_free(moe_pair_t *mp)
{
    for (int i = 0; i < 5; i++)
        free(mp->w[i].data);
}

static double moe_tol(const moe_shape_t *s)
{
    return s->tg == HY_DTYPE_F32 && s->tu == HY_DTYPE_F32 && s->td == HY_DTYPE_F32 ? TOL_F32
                                                                                   : TOL_HALF;
}

/* The op on both backends for n_tok random rows; relative error of y. */
static double moe_run(moe_pair_t *mp, const moe_shape_t *s, int32_t n_tok, bool *ok)
{
    float *xv = rnd_vec((size_t)n_tok * s->D, 1.0f);
    pair_t x = pair_new(xv, (size_t)n_tok * s->D), y = pair_new(NULL, (size_t)n_tok * s->D);
    double e;

    /* stale values in y must not survive: the op writes every element */
    {
        float *junk = rnd_vec((size_t)n_tok * s->D, 100.0f);
        g_gpu->i->upload(g_gpu, y.g, junk, y.n);
        free(junk);
    }
    g_cpu->i->moe(g_cpu, &mp->c, x.c, y.c, n_tok, s->D);
    g_gpu->i->moe(g_gpu, &mp->g, x.g, y.g, n_tok, s->D);
    e = pair_err(&y, 0, y.n);
    *ok = hy_ct_both_ok(g_cpu, g_gpu, "moe");
    pair_free(&x);
    pair_free(&y);
    free(xv);
    return e;
}

static const char *const g_variant_name[3] = {"softmax + renorm", "sigmoid + bias + scale",
                                              "softmax, no renorm"};

static void test_op_types(void)
{
    static const hy_dtype_t types[] = {HY_DTYPE_F32, HY_DTYPE_F16, HY_DTYPE_BF16,
                                       HY_DTYPE_Q4_0, HY_DTYPE_Q4_1, HY_DTYPE_Q8_0,
                                       HY_DTYPE_Q4_K, HY_DTYPE_Q5_K, HY_DTYPE_Q6_K,
                                       HY_DTYPE_Q5_0, HY_DTYPE_Q5_1, HY_DTYPE_IQ4_NL,
                                       HY_DTYPE_Q2_K, HY_DTYPE_Q3_K, HY_DTYPE_IQ4_XS};
    static const int32_t toks[] = {1, 3, 8, 40};

    for (size_t ti = 0; ti < HY_ARRAY_LEN(types); ti++) {
        for (size_t ni = 0; ni < HY_ARRAY_LEN(toks); ni++) {
            moe_shape_t s = {16, 4, 256, 256, types[ti], types[ti], types[ti],
                             (int)((ti + ni) % 3)};
            moe_pair_t mp;
            bool ok;
            double e, tol = moe_tol(&s);

            moe_new(&mp, &s);
            e = moe_run(&mp, &s, toks[ni], &ok);
            HY_T_OK(ok && e <= tol, "moe %s experts, %s, %d tokens (%s): rel err %.2e (limit %.0e)",
                    hy_dtype_info(types[ti])->name, g_variant_name[s.variant], toks[ni],
                    toks[ni] <= HY_CUK_MATVEC_MAX_TOK ? "indexed mat-vec" : "grouped", e, tol);
            moe_free(&mp);
        }
    }
}

/* Q4_K_M-style mixes (gate/up one type, down another; gate and up of
 * different types take separate launches), more experts than lanes, and
 * many tokens sharing few experts. */
static void test_op_shapes(void)
{
    static const struct {
        moe_shape_t s;
        int32_t n_tok;
    } cases[] = {
        {{16, 4, 256, 256, HY_DTYPE_Q4_K, HY_DTYPE_Q4_K, HY_DTYPE_Q6_K, 0}, 1},
        {{16, 4, 256, 256, HY_DTYPE_Q4_K, HY_DTYPE_Q4_K, HY_DTYPE_Q6_K, 1}, 8},
        {{16, 4, 256, 256, HY_DTYPE_Q8_0, HY_DTYPE_Q4_0, HY_DTYPE_F16, 2}, 5},
        {{16, 4, 256, 256, HY_DTYPE_Q8_0, HY_DTYPE_Q4_0, HY_DTYPE_F16, 0}, 40},
        {{128, 8, 512, 256, HY_DTYPE_Q4_K, HY_DTYPE_Q4_K, HY_DTYPE_Q4_K, 0}, 8},
        {{128, 8, 512, 256, HY_DTYPE_Q4_K, HY_DTYPE_Q4_K, HY_DTYPE_Q4_K, 1}, 2},
        {{4, 4, 64, 96, HY_DTYPE_F32, HY_DTYPE_F32, HY_DTYPE_F32, 1}, 7},   /* all experts */
        {{4, 1, 64, 24, HY_DTYPE_F32, HY_DTYPE_F32, HY_DTYPE_F32, 0}, 8},   /* one, shared;
                                                                            * tiny-model F 24 */
        {{6, 2, 64, 24, HY_DTYPE_F32, HY_DTYPE_F32, HY_DTYPE_F32, 1}, 3},   /* lfm2moe tiny */
        {{64, 6, 128, 64, HY_DTYPE_F32, HY_DTYPE_F32, HY_DTYPE_F32, 2}, 300},
    };

    for (size_t i = 0; i < HY_ARRAY_LEN(cases); i++) {
        const moe_shape_t *s = &cases[i].s;
        moe_pair_t mp;
        bool ok;
        double e, tol = moe_tol(s);

        moe_new(&mp, s);
        e = moe_run(&mp, s, cases[i].n_tok, &ok);
        HY_T_OK(ok && e <= tol, "moe %d of %d experts, %dx%d, %s/%s/%s, %s, %d tokens: rel err "
                "%.2e (limit %.0e)", s->K, s->E, s->D, s->F, hy_dtype_info(s->tg)->name,
                hy_dtype_info(s->tu)->name, hy_dtype_info(s->td)->name, g_variant_name[s->variant],
                cases[i].n_tok, e, tol);
        moe_free(&mp);
    }
}

/* ---- the routing kernel alone ---------------------------------------------------- */

/* Ids must match the CPU except where the CPU's two candidates score
 * within 1e-6 (expf differs by an ulp between host and device); weights
 * of matching tokens within 1e-5 relative. */
static void test_route_kernel(int32_t E, int32_t K, int variant, bool ties)
{
    const int32_t n = 333;
    hy_moe_t cm;
    hy_mr_params_t rp;
    float *l = malloc(sizeof(float) * (size_t)n * E), *bias = rnd_vec((size_t)E, 0.1f);
    float *p = malloc(sizeof(float) * (size_t)E), *wc = malloc(sizeof(float) * (size_t)K);
    float *wg = malloc(sizeof(float) * (size_t)n * K);
    int32_t *sc = malloc(sizeof(int32_t) * (size_t)K), *sg = malloc(sizeof(int32_t) * (size_t)n * K);
    uint8_t *taken = malloc((size_t)E);
    float *dl = NULL, *db = NULL, *dw = NULL;
    int32_t *ds = NULL;
    long bad = 0, near = 0;
    double worst = 0;
    int rc;

    for (size_t i = 0; i < (size_t)n * E; i++)
        l[i] = ties ? (float)(int)(rnd() * 3) : rnd() * 4;
    memset(&cm, 0, sizeof cm);
    cm.n_expert = E;
    cm.n_expert_used = K;
    cm.softmax_gating = variant != 1;
    cm.norm_topk = variant != 2;
    cm.weights_scale = variant == 1 ? 2.5f : 0.0f;
    cm.norm_eps = variant == 1 ? 1e-6f : 0.0f;
    rp = (hy_mr_params_t){E, K, cm.softmax_gating, cm.norm_topk, cm.weights_scale, cm.norm_eps};
    rc = cudaMalloc((void **)&dl, sizeof(float) * (size_t)n * E) |
         cudaMalloc((void **)&db, sizeof(float) * (size_t)E) |
         cudaMalloc((void **)&dw, sizeof(float) * (size_t)n * K) |
         cudaMalloc((void **)&ds, sizeof(int32_t) * (size_t)n * K);
    if (rc == 0)
        rc = cudaMemcpy(dl, l, sizeof(float) * (size_t)n * E, cudaMemcpyHostToDevice) |
             cudaMemcpy(db, bias, sizeof(float) * (size_t)E, cudaMemcpyHostToDevice);
    if (rc == 0)
        rc = hy_cuk_moe_route(&rp, dl, variant == 1 ? db : NULL, ds, dw, n, NULL);
    if (rc == 0)
        rc = cudaMemcpy(sg, ds, sizeof(int32_t) * (size_t)n * K, cudaMemcpyDeviceToHost) |
             cudaMemcpy(wg, dw, sizeof(float) * (size_t)n * K, cudaMemcpyDeviceToHost);
    for (int32_t t = 0; rc == 0 && t < n; t++) {
        bool same = true;
        hy_moe_route_one(&cm, l + (size_t)t * E, variant == 1 ? bias : NULL, p, taken, sc, wc);
        for (int32_t k = 0; k < K; k++) {
            int32_t a = sc[k], b = sg[(size_t)t * K + k];
            if (a == b)
                continue;
            same = false;
            if (b >= 0 && b < E) {
                float sa = p[a] + (variant == 1 ? bias[a] : 0.0f);
                float sb = p[b] + (variant == 1 ? bias[b] : 0.0f);
                if (fabsf(sa - sb) <= 1e-6f) {
                    near++;
                    break;
                }
            }
            bad++;
            break;
        }
        for (int32_t k = 0; same && k < K; k++) {
            double d = fabs((double)wg[(size_t)t * K + k] - wc[k]) / fmax(1e-30, fabs((double)wc[k]));
            worst = d > worst || isnan(d) ? (isnan(d) ? INFINITY : d) : worst;
        }
    }
    HY_T_OK(rc == 0 && bad == 0 && worst <= 1e-5,
            "routing kernel, %d of %d experts, %s%s, %d tokens: %ld ids differ (%ld near-ties "
            "allowed), weights within %.1e (limit 1e-5)%s", K, E, g_variant_name[variant],
            ties ? ", tied logits" : "", n, bad, near, worst, rc ? ": CUDA error" : "");
    cudaFree(dl);
    cudaFree(db);
    cudaFree(dw);
    cudaFree(ds);
    free(l);
    free(bias);
    free(p);
    free(wc);
    free(wg);
    free(sc);
    free(sg);
    free(taken);
}

/* ---- CUDA graphs ------------------------------------------------------------------ */

/* Steps of n_tok rows, one MoE layer each, between step_begin and
 * step_end (the result downloaded inside, as the runner's logits are):
 * decode sizes must be captured with no broken capture; every step's
 * result must equal the CPU's. */
static void test_graph(int32_t n_tok)
{
    /* F = 256: the Q4_K down stack's rows (F long) hold whole 256-element blocks */
    moe_shape_t s = {32, 4, 256, 256, HY_DTYPE_Q8_0, HY_DTYPE_Q8_0, HY_DTYPE_Q4_K, 1};
    hy_batch_seq_t sq = {0, n_tok, 0, NULL, 0, -1, NULL, 0, NULL, 0, 0, 0, NULL, NULL};
    hy_batch_t b = {n_tok, NULL, NULL, 1, &sq};
    hy_cuda_graph_cache_t before, after;
    moe_pair_t mp;
    double worst = 0;
    int reruns = 0;
    bool ok = true;
    const int steps = 6;

    moe_new(&mp, &s);
    hy_cuda_graph_stats(g_gpu, &before);
    for (int it = 0; it < steps; it++) {
        float *xv = rnd_vec((size_t)n_tok * s.D, 1.0f), *hg = malloc(sizeof(float) * (size_t)n_tok * s.D);
        pair_t x = pair_new(xv, (size_t)n_tok * s.D), y = pair_new(NULL, (size_t)n_tok * s.D);
        bool ran;

        g_cpu->i->moe(g_cpu, &mp.c, x.c, y.c, n_tok, s.D);
        do {
            g_gpu->i->step_begin(g_gpu, &b, 1);
            g_gpu->i->moe(g_gpu, &mp.g, x.g, y.g, n_tok, s.D);
            g_gpu->i->download(g_gpu, hg, y.g, y.n);
            ran = g_gpu->i->step_end(g_gpu);
            reruns += !ran;
        } while (!ran && reruns < 10);
        ok = ok && ran && hy_ct_both_ok(g_cpu, g_gpu, "moe graph");
        double e = rel_err(hg, y.c, y.n);
        worst = e > worst || isnan(e) ? e : worst;
        pair_free(&x);
        pair_free(&y);
        free(xv);
        free(hg);
    }
    hy_cuda_graph_stats(g_gpu, &after);
    uint64_t inst = after.n_instantiated - before.n_instantiated;
    uint64_t upd = after.n_updated - before.n_updated;
    uint64_t brk = after.n_broken - before.n_broken;
    HY_T_OK(ok && worst <= TOL_HALF && brk == 0 && reruns == 0 && inst + upd >= (uint64_t)steps - 1,
            "MoE %d-token steps as CUDA graphs: %llu instantiated, %llu updated, %llu broken, "
            "%d reruns; rel err vs CPU %.2e", n_tok, (unsigned long long)inst,
            (unsigned long long)upd, (unsigned long long)brk, reruns, worst);
    moe_free(&mp);
}

int main(void)
{
    hy_backend_opts_t bo = {.n_threads = 2};
    char err[HY_ERR_LEN];

    if (hy_backend_cuda_new(&g_gpu, &bo, err) != HY_OK) {
        printf("ok %d - CUDA MoE tests # SKIP no GPU (%s)\n", ++hy_t_count, err);
        return hy_t_done();
    }
    if (hy_backend_cpu_new(&g_cpu, &bo, err) != HY_OK) {
        HY_T_OK(0, "cpu backend: %s", err);
        g_gpu->i->free(g_gpu);
        return hy_t_done();
    }
    test_op_types();
    test_op_shapes();
    for (int v = 0; v < 3; v++) {
        test_route_kernel(8, 2, v, false);
        test_route_kernel(64, 8, v, v == 0);
        test_route_kernel(512, 10, v, false);
    }
    test_route_kernel(4096, 64, 1, true);
    test_graph(1);
    test_graph(3);
    test_graph(8);
    /* prefill size inside a step: the selection download launches the
     * captured part, the rest runs eagerly (never broken) */
    test_graph(40);
    g_cpu->i->free(g_cpu);
    g_gpu->i->free(g_gpu);
    return hy_t_done();
}
