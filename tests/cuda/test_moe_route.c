/*
 * test_moe_route.c - the CUDA backend's MoE routing code (kernels/
 * hy_moe_route.h) run on the host against the CPU backend's
 * hy_moe_route_one, for every gating variant (softmax / sigmoid, with and
 * without selection bias, renormalisation, norm_eps and scale) over random
 * logits, logits with many ties, and NaN / inf rows.  With one partial slot
 * the header must be bit-identical to the CPU; with the device's 32 slots
 * the ids must be exact and the weights within 1e-6; run by 4 host threads
 * with a real barrier (the kernel's work split and barriers) it must equal
 * the one-thread run bit for bit.  Runs in every build, GPU or not.
 */
#include "backend/layout.h" /* hy_moe_route_one */
#include "backend/backend.h"

#include <pthread.h>

/* The threads of an emulated block meet at a real barrier. */
static pthread_barrier_t emu_bar;
static int emu_nth = 1;
static void emu_sync(void)
{
    if (emu_nth > 1)
        pthread_barrier_wait(&emu_bar);
}
#define HY_MR_SYNC() emu_sync()
#include "hy_moe_route.h"
#include "../unit/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EMU_THREADS 4

static uint64_t g_rng = 0x5DEECE66Dull;

/* uniform in [0, 1) */
static double urand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}

/* Equal bits, or both NaN (payloads may differ). */
static bool same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

typedef struct {
    const hy_mr_params_t *m;
    const float *l, *bias;
    float *p;
    uint8_t *taken;
    hy_mr_part_t *part;
    int P, tid, nth;
    int32_t *sel;
    float *w;
} emu_job_t;

static void *emu_thread(void *arg)
{
    emu_job_t *j = arg;
    hy_mr_route(j->m, j->l, j->bias, j->p, j->taken, j->part, j->P, j->tid, j->nth, j->sel, j->w);
    return NULL;
}

/* The header on EMU_THREADS host threads (the kernel's barriers for real). */
static bool route_threads(const hy_mr_params_t *m, const float *l, const float *bias, float *p,
                          uint8_t *taken, hy_mr_part_t *part, int32_t *sel, float *w)
{
    pthread_t th[EMU_THREADS];
    emu_job_t jobs[EMU_THREADS];
    int started = 0;

    emu_nth = EMU_THREADS;
    pthread_barrier_init(&emu_bar, NULL, EMU_THREADS);
    for (int t = 0; t < EMU_THREADS; t++) {
        jobs[t] = (emu_job_t){m, l, bias, p, taken, part, HY_MR_LANES, t, EMU_THREADS, sel, w};
        if (pthread_create(&th[t], NULL, emu_thread, &jobs[t]) != 0)
            break;
        started++;
    }
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&emu_bar);
    emu_nth = 1;
    return started == EMU_THREADS;
}

/* Logits of one token: kind 0 continuous, 1 ties (a few distinct values),
 * 2 a NaN somewhere, 3 a NaN first, 4 +-inf entries. */
static void make_logits(float *l, int32_t E, int kind)
{
    for (int32_t e = 0; e < E; e++)
        l[e] = kind == 1 ? (float)((int)(urand() * 4)) * 0.5f : (float)(urand() * 8.0 - 4.0);
    if (kind == 2)
        l[(int32_t)(urand() * E)] = NAN;
    if (kind == 3)
        l[0] = NAN;
    if (kind == 4) {
        l[(int32_t)(urand() * E)] = INFINITY;
        l[(int32_t)(urand() * E)] = -INFINITY;
    }
}

typedef struct {
    long cases, p1_bad, p32_ids_bad, threads_bad, invalid;
    double p32_worst;
} stats_t;

static void run_variant(bool softmax, bool use_bias, bool norm, stats_t *st)
{
    static const int32_t Es[] = {1, 3, 8, 32, 33, 64, 128, 257, 512};
    float *l = malloc(sizeof(float) * 512), *bias = malloc(sizeof(float) * 512);
    float *p = malloc(sizeof(float) * 512), *w_cpu = malloc(sizeof(float) * 512);
    float *w1 = malloc(sizeof(float) * 512), *w32 = malloc(sizeof(float) * 512);
    float *wt = malloc(sizeof(float) * 512);
    int32_t *s_cpu = malloc(sizeof(int32_t) * 512), *s1 = malloc(sizeof(int32_t) * 512);
    int32_t *s32 = malloc(sizeof(int32_t) * 512), *stt = malloc(sizeof(int32_t) * 512);
    uint8_t *taken = malloc(512);
    hy_mr_part_t part[HY_MR_LANES];
    long n = 0;

    for (size_t ei = 0; ei < sizeof Es / sizeof Es[0]; ei++) {
        const int32_t E = Es[ei];
        const int32_t Ks[4] = {1, E < 2 ? 1 : 2, E < 8 ? E : 8, E <= 64 ? E : 10};
        for (int ki = 0; ki < 4; ki++) {
            for (int kind = 0; kind < 5; kind++) {
                for (int rep = 0; rep < (kind <= 1 ? 6 : 2); rep++) {
                    const int32_t K = Ks[ki];
                    hy_moe_t cm;
                    hy_mr_params_t rp;
                    bool bad1 = false, badt = false;

                    memset(&cm, 0, sizeof cm);
                    cm.n_expert = E;
                    cm.n_expert_used = K;
                    cm.softmax_gating = softmax;
                    cm.norm_topk = norm;
                    cm.weights_scale = rep % 2 ? 2.5f : 0.0f;
                    cm.norm_eps = rep % 3 == 1 ? 1e-6f : 0.0f;
                    rp = (hy_mr_params_t){E, K, softmax, norm, cm.weights_scale, cm.norm_eps};
                    make_logits(l, E, kind);
                    for (int32_t e = 0; e < E; e++)
                        /* ties in the bias too: quarter steps */
                        bias[e] = (float)((int)(urand() * 4)) * 0.25f - 0.5f;
                    const float *b = use_bias ? bias : NULL;

                    hy_moe_route_one(&cm, l, b, p, taken, s_cpu, w_cpu);
                    hy_mr_route(&rp, l, b, p, taken, part, 1, 0, 1, s1, w1);
                    hy_mr_route(&rp, l, b, p, taken, part, HY_MR_LANES, 0, 1, s32, w32);
                    bool threaded = n % 7 == 0;
                    if (threaded && !route_threads(&rp, l, b, p, taken, part, stt, wt))
                        badt = true;
                    for (int32_t k = 0; k < K; k++) {
                        if (s1[k] != s_cpu[k] || !same_float(w1[k], w_cpu[k]))
                            bad1 = true;
                        if (s32[k] != s_cpu[k])
                            st->p32_ids_bad++;
                        else if (!(isnan(w32[k]) && isnan(w_cpu[k]))) {
                            double d = fabs((double)w32[k] - w_cpu[k]) /
                                       fmax(1.0, fabs((double)w_cpu[k]));
                            if (!(d <= st->p32_worst))
                                st->p32_worst = isnan(d) ? INFINITY : d;
                        }
                        if (threaded && (stt[k] != s32[k] || !same_float(wt[k], w32[k])))
                            badt = true;
                        if (s32[k] < 0 || s32[k] >= E)
                            st->invalid++;
                        for (int32_t k2 = 0; k2 < k; k2++)
                            st->invalid += s32[k2] == s32[k];
                    }
                    st->p1_bad += bad1;
                    st->threads_bad += badt;
                    n++;
                }
            }
        }
    }
    st->cases += n;
    free(l);
    free(bias);
    free(p);
    free(w_cpu);
    free(w1);
    free(w32);
    free(wt);
    free(s_cpu);
    free(s1);
    free(s32);
    free(stt);
    free(taken);
}

/* The indexed mat-vec's groups: every pair in exactly one group, a group
 * holds pairs of one expert in increasing order, at most HY_MR_GROUP, led
 * by its first pair; decode batches (distinct experts per token, at most
 * 8 tokens) give one group per used expert. */
static void test_pair_groups(void)
{
    int32_t sel[700];
    int cover[700], list[HY_MR_GROUP];
    long bad = 0, groups = 0, decode_bad = 0;

    for (int rep = 0; rep < 400; rep++) {
        const int n_pairs = 1 + (int)(urand() * 700), n_exp = 1 + (int)(urand() * 24);
        const bool decode = rep % 2 == 1;
        const int K = 1 + (int)(urand() * 8), n_tok = 1 + (int)(urand() * 8);
        const int np = decode ? n_tok * K : n_pairs, ne = decode ? K + (int)(urand() * 16) : n_exp;
        int used = 0, n_groups = 0;
        uint8_t seen[64];

        memset(seen, 0, sizeof seen);
        for (int t = 0; t < np; t++)
            sel[t] = (int32_t)(urand() * ne);
        if (decode) /* K distinct experts per token, as routing gives */
            for (int t = 0; t < n_tok; t++)
                for (int k = 0; k < K; k++)
                    sel[t * K + k] = (int32_t)((t * 7 + k * (ne / K > 0 ? ne / K : 1) +
                                                (int)(urand() * 2)) % ne);
        for (int t = 0; decode && t < n_tok; t++) /* keep them distinct */
            for (int k = 0; k < K; k++)
                for (int k2 = 0; k2 < k; k2++)
                    if (sel[t * K + k] == sel[t * K + k2]) {
                        sel[t * K + k] = (sel[t * K + k] + 1) % ne;
                        k2 = -1;
                    }
        memset(cover, 0, sizeof cover);
        for (int j = 0; j < np; j++) {
            int n = hy_mr_pair_group(sel, np, j, list);
            if (n == 0)
                continue;
            n_groups++;
            groups++;
            if (n > HY_MR_GROUP || list[0] != j)
                bad++;
            for (int t = 0; t < n && t < HY_MR_GROUP; t++) {
                cover[list[t]]++;
                if (sel[list[t]] != sel[j] || (t > 0 && list[t] <= list[t - 1]))
                    bad++;
            }
        }
        for (int j = 0; j < np; j++) {
            bad += cover[j] != 1;
            if (sel[j] < 64 && !seen[sel[j]]) {
                seen[sel[j]] = 1;
                used++;
            }
        }
        if (decode && n_groups != used)
            decode_bad++;
    }
    HY_T_OK(bad == 0 && decode_bad == 0 && groups > 0,
            "indexed mat-vec groups: every pair in one group of one expert, in order, at most %d "
            "(%ld problems over %ld groups); decode batches one group per expert (%ld not)",
            HY_MR_GROUP, bad, groups, decode_bad);
}

/* ---- the decode plan against the CPU backend's MoE op --------------------------- */

static float dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* The device's decode chain replayed on the host with its own indexing:
 * router logits, hy_mr_route with 32 slots, the indexed mat-vec's groups
 * (gate/up: input row pair / K; down: input row pair; expert e's matrix at
 * e * rows), SwiGLU as hy_ops.cu, and the weighted sum in ascending expert
 * id.  Relative error against the CPU backend's moe op. */
static double decode_plan_err(hy_backend_t *cpu, int32_t E, int32_t K, int32_t D, int32_t F,
                              int32_t n_tok, bool sigmoid)
{
    const int32_t nk = n_tok * K;
    float *wr = malloc(sizeof(float) * (size_t)E * D), *wg = malloc(sizeof(float) * (size_t)E * F * D);
    float *wu = malloc(sizeof(float) * (size_t)E * F * D), *wd = malloc(sizeof(float) * (size_t)E * D * F);
    float *bias = malloc(sizeof(float) * (size_t)E), *x = malloc(sizeof(float) * (size_t)n_tok * D);
    float *yc = calloc((size_t)n_tok * D, sizeof(float)), *ye = calloc((size_t)n_tok * D, sizeof(float));
    float *lg = malloc(sizeof(float) * (size_t)n_tok * E), *ws = malloc(sizeof(float) * (size_t)nk);
    float *g = malloc(sizeof(float) * (size_t)nk * F), *u = malloc(sizeof(float) * (size_t)nk * F);
    float *d = malloc(sizeof(float) * (size_t)nk * D), *p = malloc(sizeof(float) * (size_t)E);
    int32_t *sel = malloc(sizeof(int32_t) * (size_t)nk);
    uint8_t *taken = malloc((size_t)E);
    hy_mr_part_t part[HY_MR_LANES];
    hy_moe_t m;
    hy_mr_params_t rp;
    char err[HY_ERR_LEN];
    double e2 = 0, r2 = 0;
    int list[HY_MR_GROUP];
    hy_weight_t *ws4[5] = {&m.gate_inp, &m.gate_exps, &m.up_exps, &m.down_exps, &m.exp_bias};
    float *data[5] = {wr, wg, wu, wd, bias};
    int64_t shape[5][3] = {{D, E, 1}, {D, F, E}, {D, F, E}, {F, D, E}, {E, 1, 1}};

    for (size_t i = 0; i < (size_t)E * F * D; i++) {
        wg[i] = (float)(urand() - 0.5) * 0.4f;
        wu[i] = (float)(urand() - 0.5) * 0.4f;
        wd[i] = (float)(urand() - 0.5) * 0.4f;
    }
    for (size_t i = 0; i < (size_t)E * D; i++)
        wr[i] = (float)(urand() - 0.5);
    for (int32_t e = 0; e < E; e++)
        bias[e] = (float)(urand() - 0.5) * 0.1f;
    for (size_t i = 0; i < (size_t)n_tok * D; i++)
        x[i] = (float)(urand() * 2 - 1);
    memset(&m, 0, sizeof m);
    for (int i = 0; i < 5; i++) {
        hy_weight_t *w = ws4[i];
        w->type = HY_DTYPE_F32;
        w->ne[0] = shape[i][0];
        w->ne[1] = shape[i][1];
        w->ne[2] = shape[i][2];
        w->ne[3] = 1;
        w->row_bytes = sizeof(float) * (size_t)shape[i][0];
        w->data = data[i];
        w->name = "plan";
        if (cpu->i->weight_init(cpu, w, err) != HY_OK)
            fprintf(stderr, "# weight_init: %s\n", err);
    }
    if (!sigmoid)
        memset(&m.exp_bias, 0, sizeof m.exp_bias);
    m.n_expert = E;
    m.n_expert_used = K;
    m.n_ff_exp = F;
    m.softmax_gating = !sigmoid;
    m.norm_topk = true;
    m.weights_scale = sigmoid ? 2.5f : 0.0f;
    m.norm_eps = sigmoid ? 1e-6f : 0.0f;
    cpu->i->moe(cpu, &m, x, yc, n_tok, D);

    rp = (hy_mr_params_t){E, K, !sigmoid, 1, m.weights_scale, m.norm_eps};
    for (int32_t t = 0; t < n_tok; t++) {
        for (int32_t e = 0; e < E; e++)
            lg[t * E + e] = dot(wr + (size_t)e * D, x + (size_t)t * D, D);
        hy_mr_route(&rp, lg + (size_t)t * E, sigmoid ? bias : NULL, p, taken, part, HY_MR_LANES,
                    0, 1, sel + t * K, ws + t * K);
    }
    for (int z = 0; z < 2; z++) { /* gate/up, then down */
        for (int32_t j = 0; j < nk; j++) {
            int n = hy_mr_pair_group(sel, nk, j, list);
            for (int t = 0; t < n; t++) {
                int i = list[t];
                if (z == 0) {
                    for (int32_t r = 0; r < F; r++) {
                        size_t row = ((size_t)sel[j] * F + r) * D;
                        g[(size_t)i * F + r] = dot(wg + row, x + (size_t)(i / K) * D, D);
                        u[(size_t)i * F + r] = dot(wu + row, x + (size_t)(i / K) * D, D);
                    }
                } else {
                    for (int32_t r = 0; r < D; r++)
                        d[(size_t)i * D + r] = dot(wd + ((size_t)sel[j] * D + r) * F,
                                                   g + (size_t)i * F, F);
                }
            }
        }
        for (size_t i = 0; z == 0 && i < (size_t)nk * F; i++)
            g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
    for (int32_t t = 0; t < n_tok; t++) {
        int32_t prev = -1;
        for (int32_t k = 0; k < K; k++) {
            int32_t best = -1;
            for (int32_t k2 = 0; k2 < K; k2++) /* next expert id up */
                if (sel[t * K + k2] > prev && (best < 0 || sel[t * K + k2] < sel[t * K + best]))
                    best = k2;
            prev = sel[t * K + best];
            for (int32_t c = 0; c < D; c++)
                ye[(size_t)t * D + c] += ws[t * K + best] * d[((size_t)t * K + best) * D + c];
        }
    }
    for (size_t i = 0; i < (size_t)n_tok * D; i++) {
        e2 += ((double)ye[i] - yc[i]) * ((double)ye[i] - yc[i]);
        r2 += (double)yc[i] * yc[i];
    }
    if (cpu->i->status(cpu, err) != HY_OK) {
        fprintf(stderr, "# cpu moe: %s\n", err);
        e2 = INFINITY;
    }
    for (int i = 0; i < 5; i++)
        free(data[i]);
    free(x);
    free(yc);
    free(ye);
    free(lg);
    free(ws);
    free(g);
    free(u);
    free(d);
    free(p);
    free(sel);
    free(taken);
    return r2 > 0 ? sqrt(e2 / r2) : INFINITY;
}

static void test_decode_plan(void)
{
    hy_backend_opts_t bo = {.n_threads = 1};
    hy_backend_t *cpu = NULL;
    char err[HY_ERR_LEN];
    double worst = 0;

    if (hy_backend_cpu_new(&cpu, &bo, err) != HY_OK) {
        HY_T_OK(0, "cpu backend: %s", err);
        return;
    }
    for (int v = 0; v < 2; v++) {
        static const int32_t toks[] = {1, 3, 8};
        for (int i = 0; i < 3; i++) {
            double e = decode_plan_err(cpu, 12, 3, 64, 24, toks[i], v == 1);
            worst = e > worst || isnan(e) ? e : worst;
            e = decode_plan_err(cpu, 4, 4, 32, 32, toks[i], v == 1); /* every expert */
            worst = e > worst || isnan(e) ? e : worst;
        }
    }
    HY_T_OK(worst <= 1e-5, "decode plan (routing, groups, SwiGLU, ascending-id sum) replayed on "
            "the host equals the CPU moe op: rel err %.2e (limit 1e-5)", worst);
    cpu->i->free(cpu);
}

int main(void)
{
    stats_t all;

    memset(&all, 0, sizeof all);
    for (int v = 0; v < 8; v++) {
        bool softmax = v & 1, use_bias = v & 2, norm = v & 4;
        stats_t st;
        char what[96];

        memset(&st, 0, sizeof st);
        run_variant(softmax, use_bias, norm, &st);
        snprintf(what, sizeof what, "%s gating%s%s", softmax ? "softmax" : "sigmoid",
                 use_bias ? ", selection bias" : "", norm ? ", renormalised" : "");
        HY_T_OK(st.p1_bad == 0, "%s: one slot is bit-identical to hy_moe_route_one "
                "(%ld of %ld tokens differ)", what, st.p1_bad, st.cases);
        HY_T_OK(st.p32_ids_bad == 0 && st.p32_worst <= 1e-6 && st.invalid == 0,
                "%s: the device's %d slots: ids exact (%ld wrong, %ld invalid or repeated), "
                "weights within %.1e (limit 1e-6)", what, HY_MR_LANES, st.p32_ids_bad,
                st.invalid, st.p32_worst);
        all.threads_bad += st.threads_bad;
        all.cases += st.cases;
    }
    HY_T_OK(all.threads_bad == 0, "%d host threads with a barrier equal one thread bit for bit "
            "(%ld tokens differ)", EMU_THREADS, all.threads_bad);
    HY_T_OK(hy_mr_smem_bytes(HY_MR_MAX_EXPERT, HY_MR_LANES) <= 48 * 1024 &&
                hy_mr_smem_bytes(HY_MR_MAX_EXPERT, HY_MR_LANES) % 8 == 0 &&
                sizeof(hy_mr_part_t) % 8 == 0,
            "routing block shared memory %zu bytes at %d experts fits the 48 KiB default",
            hy_mr_smem_bytes(HY_MR_MAX_EXPERT, HY_MR_LANES), HY_MR_MAX_EXPERT);
    test_pair_groups();
    test_decode_plan();
    return hy_t_done();
}
