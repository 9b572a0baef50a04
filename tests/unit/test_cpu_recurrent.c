/*
 * test_cpu_recurrent.c - the CPU backend's hybrid-model ops against plain
 * references written here: state slots (init, clear, copy, bad slots),
 * conv1d split across steps of every size (including steps shorter than the
 * window) and several sequences per batch vs a one-shot causal conv, the
 * element-wise ops, l2norm, and the MoE FFN vs a dense per-token reference
 * for each routing family (qwen3next, granite, lfm2moe).
 */
#include "backend/backend.h"
#include "backend/cpu/act.h"
#include "backend/cpu/quant.h"
#include "test.h"
#define HY_TEST_SEED 0x2545F4914F6CDD1DULL
#include "cpu_test.h"

#include <math.h>
#include <string.h>

static hy_weight_t f32_weight(const float *data, int64_t ne0, int64_t ne1, int64_t ne2,
                              const char *name)
{
    hy_weight_t w;

    memset(&w, 0, sizeof w);
    w.type = HY_DTYPE_F32;
    w.ne[0] = ne0;
    w.ne[1] = ne1;
    w.ne[2] = ne2;
    w.ne[3] = 1;
    w.row_bytes = (size_t)ne0 * sizeof(float);
    w.data = data;
    w.name = name;
    return w;
}

static float max_abs_diff(const float *a, const float *b, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* ---- conv1d ----------------------------------------------------------------- */

enum { CV_SEQS = 3, CV_MAX_T = 40 };

/* One-shot causal conv of a whole sequence with a zero initial window. */
static void conv_ref(const float *x, int64_t stride, int32_t T, const float *w, const float *b,
                     int32_t C, int32_t K, bool silu, float *y)
{
    for (int32_t t = 0; t < T; t++)
        for (int32_t c = 0; c < C; c++) {
            double acc = b ? b[c] : 0;
            for (int32_t i = 0; i < K; i++) {
                int32_t s = t - (K - 1) + i;
                if (s >= 0)
                    acc += (double)w[c * K + i] * x[(int64_t)s * stride + c];
            }
            float v = (float)acc;
            y[(int64_t)t * C + c] = silu ? v / (1.0f + expf(-v)) : v;
        }
}

/* Runs CV_SEQS sequences of lengths len[] through conv1d in steps: in each
 * step sequence s contributes up to step[s] tokens (all sequences share the
 * batch), with x a strided view.  Returns max |diff| vs the one-shot
 * reference; status error -> INFINITY. */
static float conv_split(hy_backend_t *be, int32_t C, int32_t K, bool silu, bool bias,
                        const int32_t *len, const int32_t *step)
{
    int64_t stride = C + 5;  /* a view into a wider row, like GDN's qkv */
    int64_t conv_floats[2] = {7, (int64_t)(K - 1) * C};  /* layer 1 is the conv */
    int64_t rec_floats[2] = {3, 11};
    hy_state_layout_t lay = {2, CV_SEQS + 1, conv_floats, rec_floats};
    float *x[CV_SEQS], *yref[CV_SEQS], *yout[CV_SEQS];
    float *w = malloc((size_t)C * K * sizeof(float)), *b = malloc((size_t)C * sizeof(float));
    float *bx = malloc((size_t)CV_SEQS * CV_MAX_T * stride * sizeof(float));
    float *by = malloc((size_t)CV_SEQS * CV_MAX_T * C * sizeof(float));
    hy_weight_t ww = f32_weight(w, K, C, 1, "conv.weight"), wb = f32_weight(b, C, 1, 1, "conv.bias");
    int32_t done[CV_SEQS] = {0};
    char err[HY_ERR_LEN];
    float worst = 0;

    fill(w, (size_t)C * K, 0.8f);
    fill(b, (size_t)C, 0.3f);
    if (be->i->state_init(be, &lay, err) != HY_OK) {
        printf("# state_init: %s\n", err);
        return INFINITY;
    }
    for (int s = 0; s < CV_SEQS; s++) {
        x[s] = malloc((size_t)len[s] * stride * sizeof(float));
        yref[s] = malloc((size_t)len[s] * C * sizeof(float));
        yout[s] = malloc((size_t)len[s] * C * sizeof(float));
        fill(x[s], (size_t)len[s] * stride, 1.5f);
        conv_ref(x[s], stride, len[s], w, bias ? b : NULL, C, K, silu, yref[s]);
        be->i->state_clear(be, s + 1); /* slots 1..3: slot 0 stays unused */
    }
    for (;;) {
        hy_batch_seq_t seqs[CV_SEQS];
        hy_batch_t batch = {0, NULL, NULL, 0, seqs};
        int32_t row = 0;

        for (int s = 0; s < CV_SEQS; s++) {
            int32_t n = HY_MIN(step[s], len[s] - done[s]);
            if (n <= 0)
                continue;
            seqs[batch.n_seqs++] = (hy_batch_seq_t){row, n, done[s], NULL, 0, s + 1, NULL, 0,
                                                    NULL, 0, 0, 0, NULL, NULL};
            memcpy(bx + (size_t)row * stride, x[s] + (size_t)done[s] * stride,
                   (size_t)n * stride * sizeof(float));
            row += n;
        }
        if (batch.n_seqs == 0)
            break;
        batch.n_tokens = row;
        be->i->conv1d(be, 1, &batch, bx, (int32_t)stride, &ww, bias ? &wb : NULL, by, C, silu);
        for (int32_t i = 0; i < batch.n_seqs; i++) {
            int s = seqs[i].state_slot - 1;
            memcpy(yout[s] + (size_t)done[s] * C, by + (size_t)seqs[i].first * C,
                   (size_t)seqs[i].n * C * sizeof(float));
            done[s] += seqs[i].n;
        }
    }
    if (be->i->status(be, err) != HY_OK) {
        printf("# conv1d: %s\n", err);
        worst = INFINITY;
    }
    for (int s = 0; s < CV_SEQS; s++) {
        worst = HY_MAX(worst, max_abs_diff(yout[s], yref[s], (size_t)len[s] * C));
        free(x[s]);
        free(yref[s]);
        free(yout[s]);
    }
    free(w);
    free(b);
    free(bx);
    free(by);
    return worst;
}

static void test_conv1d(hy_backend_t *be, int threads)
{
    static const int32_t lens[CV_SEQS] = {23, 2, 37};
    static const int32_t steps[][CV_SEQS] = {
        {CV_MAX_T, CV_MAX_T, CV_MAX_T}, {1, 1, 1}, {2, 1, 7}, {7, 2, 3}, {5, 40, 1}};
    static const struct { int32_t C, K; bool silu, bias; } shapes[] = {
        {37, 4, true, true}, {16, 3, false, false}, {640, 4, true, false}, {8, 1, false, true},
        {24, 6, true, true}};
    float worst = 0;

    for (size_t sh = 0; sh < HY_ARRAY_LEN(shapes); sh++)
        for (size_t st = 0; st < HY_ARRAY_LEN(steps); st++)
            worst = HY_MAX(worst, conv_split(be, shapes[sh].C, shapes[sh].K, shapes[sh].silu,
                                             shapes[sh].bias, lens, steps[st]));
    HY_T_OK(worst < 1e-5f, "conv1d (%d threads): 5 shapes x 5 step patterns x 3 sequences "
            "(steps shorter than the window, strided x) == one-shot conv (max |d| %.2g)",
            threads, worst);
}

/* state_copy forks a sequence; state_clear restarts it; bad slots and a
 * wrong layer size are reported, not crashed on. */
static void test_state_slots(hy_backend_t *be)
{
    enum { C = 20, K = 4, T = 9 };
    int64_t conv_floats[1] = {(K - 1) * C}, rec_floats[1] = {5};
    hy_state_layout_t lay = {1, 3, conv_floats, rec_floats};
    float w[C * K], x[T * C], y0[T * C], y1[T * C], y2[T * C];
    hy_weight_t ww = f32_weight(w, K, C, 1, "w");
    hy_batch_seq_t seq = {0, 4, 0, NULL, 0, 0, NULL, 0, NULL, 0, 0, 0, NULL, NULL};
    hy_batch_t b = {4, NULL, NULL, 1, &seq};
    char err[HY_ERR_LEN];
    int rc;

    fill(w, C * K, 1.0f);
    fill(x, T * C, 1.0f);
    HY_T_OK(be->i->state_init(be, &lay, err) == HY_OK, "state_init 3 slots");
    /* slot 0: first 4 tokens, then fork into slot 2 and run the rest in both */
    be->i->conv1d(be, 0, &b, x, C, &ww, NULL, y0, C, false);
    be->i->state_copy(be, 2, 0);
    seq = (hy_batch_seq_t){0, T - 4, 4, NULL, 0, 0, NULL, 0, NULL, 0, 0, 0, NULL, NULL};
    b.n_tokens = T - 4;
    be->i->conv1d(be, 0, &b, x + 4 * C, C, &ww, NULL, y0, C, false);
    seq.state_slot = 2;
    be->i->conv1d(be, 0, &b, x + 4 * C, C, &ww, NULL, y1, C, false);
    HY_T_OK(max_abs_diff(y0, y1, (T - 4) * C) == 0, "state_copy: forked slot continues identically");
    /* clear slot 2 and rerun the tail: now it starts from an empty window */
    be->i->state_clear(be, 2);
    be->i->conv1d(be, 0, &b, x + 4 * C, C, &ww, NULL, y1, C, false);
    conv_ref(x + 4 * C, C, T - 4, w, NULL, C, K, false, y2);
    HY_T_OK(max_abs_diff(y1, y2, (T - 4) * C) < 1e-5f && max_abs_diff(y0, y1, (T - 4) * C) > 1e-3f,
            "state_clear: slot restarts from a zero window");
    HY_T_OK(be->i->status(be, err) == HY_OK, "no error so far");

    seq.state_slot = 3;
    be->i->conv1d(be, 0, &b, x, C, &ww, NULL, y1, C, false);
    rc = be->i->status(be, err);
    HY_T_OK(rc == HY_ERANGE && strstr(err, "slot 3") && y1[0] == 0 && y1[(T - 4) * C - 1] == 0,
            "conv1d with slot 3 of 3: error \"%s\", output zeroed", err);
    seq.state_slot = 1;
    be->i->conv1d(be, 0, &b, x, C + 1, &ww, NULL, y1, C - 1, false);
    rc = be->i->status(be, err);
    HY_T_OK(rc == HY_EINVAL, "conv1d with wrong channel count: \"%s\"", err);
    be->i->conv1d(be, 1, &b, x, C, &ww, NULL, y1, C, false);
    rc = be->i->status(be, err);
    HY_T_OK(rc == HY_ERANGE && strstr(err, "layer 1"), "conv1d on layer 1 of 1: \"%s\"", err);
    be->i->state_copy(be, 0, -1);
    be->i->state_clear(be, 7);
    rc = be->i->status(be, err);
    HY_T_OK(rc == HY_ERANGE, "state_copy / state_clear with bad slots: \"%s\"", err);
    lay.n_slots = 0;
    rc = be->i->state_init(be, &lay, err);
    HY_T_OK(rc == HY_EINVAL, "state_init with 0 slots: \"%s\"", err);
}

/* ---- element-wise ------------------------------------------------------------ */

static double unary_ref(hy_unary_t op, double x)
{
    switch (op) {
    case HY_UNARY_SILU: return x / (1 + exp(-x));
    case HY_UNARY_SIGMOID: return 1 / (1 + exp(-x));
    case HY_UNARY_SOFTPLUS: return x > 20 ? x : log1p(exp(x));
    case HY_UNARY_RELU_SQR: return x > 0 ? x * x : 0;
    case HY_UNARY_GELU_TANH:
        return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case HY_UNARY_TANH: return tanh(x);
    }
    return NAN;
}

static void test_elementwise(hy_backend_t *be)
{
    enum { N = 100003 };
    static const char *names[] = {"silu", "sigmoid", "softplus", "relu_sqr", "gelu_tanh", "tanh"};
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    float *z = malloc(N * sizeof(float));
    char err[HY_ERR_LEN];

    for (int op = HY_UNARY_SILU; op <= HY_UNARY_LAST; op++) {
        double worst = 0;
        fill(x, N, 12.0f);
        x[0] = 30.0f;   /* softplus threshold branch */
        x[1] = -90.0f;  /* exp underflow */
        x[2] = 90.0f;   /* exp overflow would give inf without the threshold */
        x[3] = 20.5f;
        be->i->unary(be, (hy_unary_t)op, x, y, N);
        for (int i = 0; i < N; i++) {
            double r = unary_ref((hy_unary_t)op, x[i]);
            double d = fabs(y[i] - r) / HY_MAX(1.0, fabs(r));
            if (!(d <= worst))
                worst = isnan(d) ? INFINITY : d;
        }
        /* in place */
        memcpy(z, x, N * sizeof(float));
        be->i->unary(be, (hy_unary_t)op, z, z, N);
        HY_T_OK(worst < 2e-6 && max_abs_diff(y, z, N) == 0,
                "unary %s over %d floats (|x| <= 90, in place too): max rel err %.2g",
                names[op], N, worst);
    }
    be->i->unary(be, (hy_unary_t)17, x, y, 4);
    HY_T_OK(be->i->status(be, err) == HY_EUNSUPPORTED, "unary op 17: \"%s\"", err);

    fill(x, N, 3.0f);
    fill(y, N, 3.0f);
    memcpy(z, x, N * sizeof(float));
    be->i->mul(be, z, y, N);
    {
        float worst = 0;
        for (int i = 0; i < N; i++)
            worst = HY_MAX(worst, fabsf(z[i] - x[i] * y[i]));
        HY_T_OK(worst == 0, "mul over %d floats", N);
    }
    free(x);
    free(y);
    free(z);
}

static void test_l2norm(hy_backend_t *be)
{
    enum { ROWS = 301, DIM = 67, STRIDE = 80 };
    float *x = malloc(ROWS * STRIDE * sizeof(float)), *x0 = malloc(ROWS * STRIDE * sizeof(float));
    double worst = 0;
    bool untouched = true;

    fill(x, ROWS * STRIDE, 2.0f);
    memset(x + 5 * STRIDE, 0, DIM * sizeof(float));            /* zero row: eps guards */
    for (int i = 0; i < DIM; i++)
        x[7 * STRIDE + i] = 1e-9f;                               /* below eps */
    memcpy(x0, x, ROWS * STRIDE * sizeof(float));
    be->i->l2norm(be, x, ROWS, DIM, STRIDE, 1e-6f, 0.125f);
    for (int r = 0; r < ROWS; r++) {
        double ss = 0;
        for (int i = 0; i < DIM; i++)
            ss += (double)x0[r * STRIDE + i] * x0[r * STRIDE + i];
        double s = 0.125 / HY_MAX(sqrt(ss), 1e-6);
        for (int i = 0; i < DIM; i++)
            worst = HY_MAX(worst, fabs(x[r * STRIDE + i] - x0[r * STRIDE + i] * s));
        for (int i = DIM; i < STRIDE; i++)
            untouched &= x[r * STRIDE + i] == x0[r * STRIDE + i];
    }
    HY_T_OK(worst < 1e-6 && untouched && x[5 * STRIDE] == 0 && isfinite(x[7 * STRIDE]),
            "l2norm %d strided rows of %d (zero and tiny rows): max |d| %.2g, gaps untouched",
            ROWS, DIM, worst);
    free(x);
    free(x0);
}

/* ---- MoE ------------------------------------------------------------------------ */

typedef enum { FAM_QWEN, FAM_QWEN_NONORM, FAM_GRANITE, FAM_LFM2MOE } moe_family_t;

/* Dense per-token reference written from each family's transformers code,
 * not from hy_moe_t's description. */
static void moe_ref(moe_family_t fam, const float *router, const float *bias, const float *g,
                    const float *u, const float *d, int E, int K, int D, int F, float scale,
                    const float *x, float *y)
{
    double l[64], p[64], wk[64];
    int sel[64];
    bool taken[64] = {0};

    for (int e = 0; e < E; e++) {
        l[e] = 0;
        for (int i = 0; i < D; i++)
            l[e] += (double)router[e * D + i] * x[i];
    }
    if (fam == FAM_LFM2MOE) {
        for (int e = 0; e < E; e++)
            p[e] = 1 / (1 + exp(-l[e]));
    } else {
        double mx = l[0], z = 0;
        for (int e = 1; e < E; e++)
            mx = HY_MAX(mx, l[e]);
        for (int e = 0; e < E; e++)
            z += (p[e] = exp(l[e] - mx));
        for (int e = 0; e < E; e++)
            p[e] /= z;
    }
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            /* granite: top-k of logits; lfm2moe: of sigmoid + bias */
            double s = fam == FAM_GRANITE ? l[e] : fam == FAM_LFM2MOE ? p[e] + bias[e] : p[e];
            double bs = best < 0 ? 0 : fam == FAM_GRANITE ? l[best]
                                     : fam == FAM_LFM2MOE ? p[best] + bias[best] : p[best];
            if (!taken[e] && (best < 0 || s > bs))
                best = e;
        }
        taken[best] = true;
        sel[k] = best;
    }
    if (fam == FAM_GRANITE) { /* softmax over the top-k logits */
        double z = 0;
        for (int k = 0; k < K; k++)
            z += exp(l[sel[k]] - l[sel[0]]);
        for (int k = 0; k < K; k++)
            wk[k] = exp(l[sel[k]] - l[sel[0]]) / z;
    } else {
        double sum = 0;
        for (int k = 0; k < K; k++)
            sum += (wk[k] = p[sel[k]]);
        for (int k = 0; k < K; k++) {
            if (fam == FAM_QWEN)
                wk[k] /= sum;
            else if (fam == FAM_LFM2MOE)
                wk[k] = wk[k] / (sum + 1e-6) * scale;
        }
    }
    for (int i = 0; i < D; i++)
        y[i] = 0;
    for (int k = 0; k < K; k++) {
        int e = sel[k];
        double h[256];
        for (int f = 0; f < F; f++) {
            double a = 0, b = 0;
            for (int i = 0; i < D; i++) {
                a += (double)g[((size_t)e * F + f) * D + i] * x[i];
                b += (double)u[((size_t)e * F + f) * D + i] * x[i];
            }
            h[f] = a / (1 + exp(-a)) * b;
        }
        for (int i = 0; i < D; i++) {
            double o = 0;
            for (int f = 0; f < F; f++)
                o += (double)d[((size_t)e * D + i) * F + f] * h[f];
            y[i] += (float)(wk[k] * o);
        }
    }
}

static void test_moe(hy_backend_t *be, int threads)
{
    enum { E = 12, K = 3, D = 48, F = 40, T = 77 };
    static const char *fam_names[] = {"qwen3next (softmax, norm_topk)",
                                      "qwen (softmax, no renormalisation)",
                                      "granite (softmax over top-k logits)",
                                      "lfm2moe (sigmoid + selection bias, eps, scale)"};
    float *router = malloc(E * D * sizeof(float)), *bias = malloc(E * sizeof(float));
    float *g = malloc((size_t)E * F * D * sizeof(float)), *u = malloc((size_t)E * F * D * sizeof(float));
    float *d = malloc((size_t)E * D * F * sizeof(float));
    float *x = malloc(T * D * sizeof(float)), *y = malloc(T * D * sizeof(float));
    float *yr = malloc(T * D * sizeof(float)), *y1 = malloc(D * sizeof(float));
    char err[HY_ERR_LEN];
    hy_moe_t m;

    fill(router, E * D, 0.5f);
    fill(bias, E, 0.3f);
    fill(g, (size_t)E * F * D, 0.3f);
    fill(u, (size_t)E * F * D, 0.3f);
    fill(d, (size_t)E * D * F, 0.3f);
    fill(x, T * D, 1.0f);
    for (int fam = FAM_QWEN; fam <= FAM_LFM2MOE; fam++) {
        memset(&m, 0, sizeof m);
        m.gate_inp = f32_weight(router, D, E, 1, "ffn_gate_inp");
        m.gate_exps = f32_weight(g, D, F, E, "ffn_gate_exps");
        m.up_exps = f32_weight(u, D, F, E, "ffn_up_exps");
        m.down_exps = f32_weight(d, F, D, E, "ffn_down_exps");
        m.n_expert = E;
        m.n_expert_used = K;
        m.n_ff_exp = F;
        m.softmax_gating = fam != FAM_LFM2MOE;
        m.norm_topk = fam != FAM_QWEN_NONORM;
        m.weights_scale = fam == FAM_LFM2MOE ? 2.5f : 0.0f;
        m.norm_eps = fam == FAM_LFM2MOE ? 1e-6f : 0.0f;
        if (fam == FAM_LFM2MOE)
            m.exp_bias = f32_weight(bias, E, 1, 1, "exp_probs_b");
        be->i->moe(be, &m, x, y, T, D);
        for (int t = 0; t < T; t++)
            moe_ref((moe_family_t)fam, router, bias, g, u, d, E, K, D, F, 2.5f, x + t * D,
                    yr + t * D);
        be->i->moe(be, &m, x + 40 * D, y1, 1, D);
        float diff = max_abs_diff(y, yr, T * D);
        HY_T_OK(diff < 2e-5f && max_abs_diff(y1, y + 40 * D, D) < 1e-6f &&
                be->i->status(be, err) == HY_OK,
                "moe %s, %d threads: %d tokens, %d of %d experts == dense reference "
                "(max |d| %.2g), one token alone == batched", fam_names[fam], threads, T, K, E,
                diff);
    }
    m.n_expert_used = E + 1;
    be->i->moe(be, &m, x, y, T, D);
    HY_T_OK(be->i->status(be, err) == HY_EINVAL && y[0] == 0, "moe with k > n_expert: \"%s\"",
            err);
    m.n_expert_used = K;
    m.down_exps.ne[2] = E - 1;
    be->i->moe(be, &m, x, y, T, D);
    HY_T_OK(be->i->status(be, err) == HY_EINVAL, "moe with a short expert stack: \"%s\"", err);
    free(router);
    free(bias);
    free(g);
    free(u);
    free(d);
    free(x);
    free(y);
    free(yr);
    free(y1);
}

/* act.c: every level gives the scalar level's bits, lane by lane: SIMD
 * bodies and scalar tails alike (odd lengths and offsets put each element
 * in a different position of a vector), in place too, and a NaN stays NaN. */
static void test_act_levels(void)
{
    enum { N = 4099 };
    static const hy_unary_t ops[] = {HY_UNARY_SIGMOID, HY_UNARY_SILU, HY_UNARY_GELU_TANH};
    static const char *names[] = {"sigmoid", "silu", "gelu_tanh", "swiglu", "geglu"};
    float *x = malloc(N * sizeof(float)), *u = malloc(N * sizeof(float));
    float *ref = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));

    fill(x, N, 40.0f);
    fill(u, N, 3.0f);
    x[5] = NAN;
    x[6] = -0.0f;
    x[7] = 0.0f;
    x[8] = 1e-30f;
    x[9] = -1e-30f;
    for (int k = 0; k < 5; k++) {
        hy_cpu_act_set_isa(HY_ISA_SCALAR);
        if (k < 3)
            hy_act(ops[k], x, ref, N);
        else if (k == 3)
            hy_act_swiglu(x, u, ref, N);
        else
            hy_act_geglu(x, u, ref, N);
        HY_T_OK(isnan(ref[5]) && (k == 0 || ref[6] == 0.0f), "%s keeps NaN a NaN", names[k]);
        for (int isa = HY_ISA_AVX2; isa <= HY_ISA_AVX512; isa++) {
            if (hy_cpu_act_set_isa(isa) != HY_OK) {
                HY_T_OK(1, "%s at level %s # SKIP this CPU lacks it", names[k],
                        hy_isa_name((hy_isa_t)isa));
                continue;
            }
            int same = 1;
            /* offsets 0..16 shift every element across the vector lanes */
            for (int off = 0; off <= 16 && same; off++) {
                memcpy(y, x, N * sizeof(float));
                if (k < 3)
                    hy_act(ops[k], y + off, y + off, (size_t)(N - off));
                else if (k == 3)
                    hy_act_swiglu(y + off, u + off, y + off, (size_t)(N - off));
                else
                    hy_act_geglu(y + off, u + off, y + off, (size_t)(N - off));
                same = memcmp(y + off, ref + off, (size_t)(N - off) * sizeof(float)) == 0;
            }
            HY_T_OK(same, "%s at level %s == scalar level, bit for bit, at 17 offsets (in place)",
                    names[k], hy_isa_name((hy_isa_t)isa));
        }
    }
    /* geglu is GELU-tanh, then the product: the two passes' bits */
    for (int isa = HY_ISA_SCALAR; isa <= HY_ISA_AVX512; isa++) {
        if (hy_cpu_act_set_isa(isa) != HY_OK)
            continue;
        hy_act(HY_UNARY_GELU_TANH, x, ref, N);
        for (int i = 0; i < N; i++)
            ref[i] *= u[i];
        hy_act_geglu(x, u, y, N);
        HY_T_OK(memcmp(y, ref, N * sizeof(float)) == 0,
                "geglu at level %s == gelu_tanh then a product, bit for bit",
                hy_isa_name((hy_isa_t)isa));
    }
    hy_cpu_act_set_isa(-1);
    HY_T_OK(!hy_act(HY_UNARY_TANH, x, y, 4) && !hy_act(HY_UNARY_SOFTPLUS, x, y, 4),
            "hy_act refuses the ops it does not compute");
    free(x);
    free(u);
    free(ref);
    free(y);
}

int main(void)
{
    static const int threads[] = {1, 4};

    for (size_t i = 0; i < HY_ARRAY_LEN(threads); i++) {
        hy_backend_t *be = new_backend(threads[i]);
        HY_T_OK(be != NULL, "cpu backend with %d threads", threads[i]);
        if (!be)
            continue;
        test_conv1d(be, threads[i]);
        test_moe(be, threads[i]);
        if (i == 0) {
            test_state_slots(be);
            test_elementwise(be);
            test_l2norm(be);
            test_act_levels();
        }
        be->i->free(be);
    }
    return hy_t_done();
}
