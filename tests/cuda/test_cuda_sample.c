/*
 * test_cuda_sample.c - sampling on the device.  On the CPU (every build):
 * the reference semantics (backend/cuda/sample_ref.c) against
 * engine/sampler.c - the same support and nearly the same frequencies over
 * 20000 seeded draws for each filter combination, including logits tied at
 * a top_k / top_p / min_p cut, identical greedy tokens, logprobs and top
 * alternatives - and its error paths.  With a GPU: the CUDA backend's
 * `sample` against the reference row by row (same uniform, so the same
 * token) on rows of several vocabulary sizes, ragged parameter mixes and
 * NaN rows.  Without a GPU the device part is skipped.
 */
#include "backend/backend.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/sample.h"
#include "engine/sampler.h"
#include "../unit/test.h"

#include <math.h>
#include <string.h>

#define N_DRAW 20000
#define V_SMALL 64

static uint64_t g_rng = 0x243F6A8885A308D3ull;

static float rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

typedef struct {
    const char *name;
    float temperature;
    int32_t top_k;
    float top_p, min_p;
} cfg_t;

static const cfg_t g_cfgs[] = {
    {"plain T=1", 1.0f, 0, 1.0f, 0.0f},
    {"T=0.7 top_k=5 (tie at the cut)", 0.7f, 5, 1.0f, 0.0f},
    {"T=1.3 top_p=0.8", 1.3f, 0, 0.8f, 0.0f},
    {"T=1 min_p=0.1", 1.0f, 0, 1.0f, 0.1f},
    {"T=0.8 top_k=20 top_p=0.9 min_p=0.05", 0.8f, 20, 0.9f, 0.05f},
    {"T=2 top_k=40 top_p=0.5", 2.0f, 40, 0.5f, 0.0f},
};

static hy_sample_params_t params_of(const cfg_t *c, uint64_t seed, uint64_t counter, int n_lp)
{
    hy_sample_params_t p = {c->temperature, c->top_k, c->top_p, c->min_p, seed, counter, n_lp};
    return p;
}

/* A 64-logit row in [-2, 2) with ties placed at the cuts: ids 10 and 40
 * share the 5th largest value (top_k = 5 must keep 10, not 40). */
static void small_row(float *l)
{
    for (int v = 0; v < V_SMALL; v++)
        l[v] = 2.0f * rnd();
    l[4] = 2.6f;
    l[0] = 2.5f;
    l[1] = 2.4f;
    l[2] = 2.3f;
    l[10] = l[40] = 2.2f; /* 4, 0, 1, 2, then the tie 10 / 40 */
    l[3] = -1.5f;
    l[20] = l[30] = -1.0f;
}

/* ---- CPU: the reference against engine/sampler.c ------------------------------- */

static void test_reference(void)
{
    float row[V_SMALL], work[V_SMALL];
    char err[HY_ERR_LEN];

    small_row(row);
    for (size_t ci = 0; ci < HY_ARRAY_LEN(g_cfgs); ci++) {
        const cfg_t *c = &g_cfgs[ci];
        static int ref_n[V_SMALL], host_n[V_SMALL];
        hy_sampling_t sp;
        hy_sampler_t *smp = NULL;
        double chi2 = 0.0, lim;
        int df = -1;
        bool support = true, ok = true;

        memset(ref_n, 0, sizeof ref_n);
        memset(host_n, 0, sizeof host_n);
        hy_sampling_default(&sp);
        sp.temperature = c->temperature;
        sp.top_k = c->top_k;
        sp.top_p = c->top_p;
        sp.min_p = c->min_p;
        sp.seed = 1234 + ci;
        ok = hy_sampler_create(&smp, &sp, V_SMALL, err) == HY_OK;
        for (int i = 0; ok && i < N_DRAW; i++) {
            hy_sample_params_t p = params_of(c, 99 + ci, (uint64_t)i, 0);
            hy_sample_result_t r;
            int32_t t;

            ok = hy_sample_ref(row, V_SMALL, &p, &r, err) == HY_OK && r.token >= 0 &&
                 r.token < V_SMALL;
            if (ok)
                ref_n[r.token]++;
            memcpy(work, row, sizeof row);
            t = hy_sampler_sample(smp, work, NULL);
            ok = ok && t >= 0 && t < V_SMALL;
            if (ok)
                host_n[t]++;
        }
        /* two-sample chi-square over the drawn tokens: about df when both
         * draw from one distribution, far above when they do not */
        for (int v = 0; v < V_SMALL; v++) {
            double a = ref_n[v], b = host_n[v];
            support = support && (a > 0) == (b > 0);
            if (a + b > 0) {
                chi2 += (a - b) * (a - b) / (a + b);
                df++;
            }
        }
        lim = df + 6.0 * sqrt(2.0 * HY_MAX(df, 1));
        HY_T_OK(ok && support && chi2 <= lim,
                "reference vs engine/sampler.c, %s: same support (%d tokens) %s, chi-square "
                "%.1f <= %.1f over %d draws each", c->name, df + 1, support ? "yes" : "NO",
                chi2, lim, N_DRAW);
        if (ci == 1)
            HY_T_OK(ref_n[10] > 0 && ref_n[40] == 0 && host_n[40] == 0,
                    "top_k tie: id 10 kept (%d draws), id 40 cut (%d / host %d)", ref_n[10],
                    ref_n[40], host_n[40]);
        hy_sampler_free(smp);
    }

    /* greedy and logprobs: identical to the host's report */
    {
        bool ok = true;
        double worst = 0.0;

        for (int trial = 0; trial < 50 && ok; trial++) {
            float r2[V_SMALL];
            hy_sampling_t sp;
            hy_sampler_t *smp = NULL;
            hy_sample_out_t so;
            hy_sample_result_t r;
            cfg_t c = {"", trial % 2 ? 0.0f : 1.0f, trial % 2 ? 0 : 1, 1.0f, 0.0f};
            hy_sample_params_t p = params_of(&c, 7, (uint64_t)trial, 1 + trial % HY_SAMPLE_MAX_TOP);

            for (int v = 0; v < V_SMALL; v++)
                r2[v] = (float)(int)(4.0f * rnd()); /* many ties */
            hy_sampling_default(&sp);
            sp.temperature = c.temperature;
            sp.top_k = c.top_k;
            sp.n_logprobs = p.n_logprobs;
            ok = hy_sampler_create(&smp, &sp, V_SMALL, err) == HY_OK &&
                 hy_sample_ref(r2, V_SMALL, &p, &r, err) == HY_OK &&
                 hy_sampler_sample(smp, r2, &so) == r.token && so.n_top == r.n_top;
            worst = HY_MAX(worst, fabs((double)so.logprob - r.logprob));
            for (int j = 0; ok && j < r.n_top; j++) {
                ok = so.top_ids[j] == r.top_ids[j];
                worst = HY_MAX(worst, fabs((double)so.top_logprobs[j] - r.top_logprobs[j]));
            }
            hy_sampler_free(smp);
        }
        HY_T_OK(ok && worst <= 1e-6, "greedy (T=0, top_k=1) tokens, logprobs and top "
                "alternatives equal the host's on tied rows (worst logprob diff %.1e)", worst);
    }

    /* error paths */
    {
        float bad[4] = {0.0f, NAN, 1.0f, 2.0f}, ninf[3] = {-INFINITY, -INFINITY, -INFINITY};
        float pinf[2] = {0.0f, INFINITY};
        cfg_t c = {"", 1.0f, 0, 1.0f, 0.0f};
        hy_sample_params_t p = params_of(&c, 1, 0, 0);
        hy_sample_result_t r;
        bool ok;

        ok = hy_sample_ref(bad, 4, &p, &r, err) == HY_OK && r.token == -1;
        ok = ok && hy_sample_ref(ninf, 3, &p, &r, err) == HY_OK && r.token == -1;
        ok = ok && hy_sample_ref(pinf, 2, &p, &r, err) == HY_OK && r.token == -1;
        p.top_p = 0.0f;
        ok = ok && hy_sample_ref(bad + 2, 2, &p, &r, err) == HY_ERANGE &&
             strstr(err, "top_p = 0") != NULL;
        p.top_p = 1.0f;
        p.n_logprobs = HY_SAMPLE_MAX_TOP + 1;
        ok = ok && hy_sample_ref(bad + 2, 2, &p, &r, err) == HY_ERANGE &&
             strstr(err, "top_logprobs") != NULL;
        p.n_logprobs = 0;
        p.temperature = NAN;
        ok = ok && hy_sample_ref(bad + 2, 2, &p, &r, err) == HY_ERANGE;
        HY_T_OK(ok, "reference: NaN / all -inf / +inf rows give token -1, bad parameters "
                "HY_ERANGE with the field named");
    }

    /* the uniform: in [0, 1), depends on seed and counter, and is spread */
    {
        double mean = 0.0, lo = 1.0, hi = 0.0;
        bool ok = hy_sample_uniform(1, 0) != hy_sample_uniform(2, 0) &&
                  hy_sample_uniform(1, 0) != hy_sample_uniform(1, 1);

        for (int i = 0; i < 100000; i++) {
            double u = hy_sample_uniform(42, (uint64_t)i);
            ok = ok && u >= 0.0 && u < 1.0;
            mean += u / 100000.0;
            lo = HY_MIN(lo, u);
            hi = HY_MAX(hi, u);
        }
        HY_T_OK(ok && fabs(mean - 0.5) < 0.005 && lo < 1e-3 && hi > 0.999,
                "uniform: 100000 draws in [0, 1), mean %.4f, seed and counter both matter", mean);
    }
}

/* ---- CPU: the kernel's search plan, emulated ---------------------------------------
 * kernels/hy_sample.cu finds the cuts by binary search over order-preserving
 * keys and draws over 1024 contiguous chunks instead of sorting.  This is
 * that plan step for step in plain C (block reductions become loops), run
 * against the sort-based reference on tied rows, so the plan itself is
 * checked on machines without a GPU. */

#define EMU_NT 1024

static uint32_t emu_key(float l)
{
    uint32_t b;

    if (l == 0.0f)
        l = 0.0f;
    memcpy(&b, &l, 4);
    return hy_sample_key(b);
}

static float emu_val(uint32_t k)
{
    uint32_t b = (k & 0x80000000u) ? k & 0x7fffffffu : ~k;
    float f;

    memcpy(&f, &b, 4);
    return f;
}

static int emu_count_ge(const float *x, int n, uint32_t k)
{
    int c = 0;
    for (int v = 0; v < n; v++)
        c += emu_key(x[v]) >= k;
    return c;
}

static double emu_mass(const float *x, int n, uint32_t k, bool strict, float maxl)
{
    double m = 0.0;
    for (int v = 0; v < n; v++) {
        uint32_t kv = emu_key(x[v]);
        if (kv > k || (!strict && kv == k))
            m += exp((double)x[v] - (double)maxl);
    }
    return m;
}

static int32_t emu_sample(const float *x, int n, const hy_sample_params_t *p)
{
    float maxl = -INFINITY, log_min_p = p->min_p > 0.0f ? logf(p->min_p) : -INFINITY;
    int best = 0, token;
    double log_z;

    for (int v = 0; v < n; v++) {
        if (isnan(x[v]))
            return -1;
        if (x[v] > maxl)
            maxl = x[v], best = v;
    }
    if (isinf(maxl))
        return -1;
    log_z = log(emu_mass(x, n, 0u, false, maxl));
    if (p->temperature == 0.0f || p->top_k == 1)
        return best;
    {
        const uint32_t kmax = emu_key(maxl);
        uint32_t ck = 0;
        int c_ties = 0;
        double mass = -1.0;

        if (p->top_k > 0 && p->top_k < n) {
            uint32_t lo = 0, hi = kmax;
            while (lo < hi) {
                uint32_t mid = lo + (hi - lo + 1) / 2;
                if (emu_count_ge(x, n, mid) >= p->top_k)
                    lo = mid;
                else
                    hi = mid - 1;
            }
            ck = lo;
            c_ties = p->top_k - emu_count_ge(x, n, lo + 1);
            mass = emu_mass(x, n, ck, true, maxl) +
                   (double)c_ties * exp((double)emu_val(ck) - (double)maxl);
        }
        if (p->top_p < 1.0f) {
            uint32_t lo = HY_MAX(ck, emu_key(maxl - 60.0f)), hi = kmax;
            double target;

            if (mass < 0.0)
                mass = exp(log_z);
            target = (double)p->top_p * mass;
            while (lo < hi) {
                uint32_t mid = lo + (hi - lo + 1) / 2;
                if (emu_mass(x, n, mid, false, maxl) >= target)
                    lo = mid;
                else
                    hi = mid - 1;
            }
            if (lo != ck || ck != 0) {
                double m_gt = emu_mass(x, n, lo, true, maxl);
                double w = exp((double)emu_val(lo) - (double)maxl);
                int avail = lo == ck ? c_ties : emu_count_ge(x, n, lo) - emu_count_ge(x, n, lo + 1);
                int j = w > 0.0 ? (int)ceil((target - m_gt) / w) : avail;
                ck = lo;
                c_ties = HY_MAX(1, HY_MIN(j, avail));
            }
        }
        if (log_min_p > -INFINITY) {
            const uint32_t kt = emu_key(maxl + log_min_p);
            if (ck < kt) {
                uint32_t lo = 0xffffffffu;
                for (int v = 0; v < n; v++)
                    if (emu_key(x[v]) >= kt && emu_key(x[v]) < lo)
                        lo = emu_key(x[v]);
                ck = lo;
                c_ties = emu_count_ge(x, n, lo) - emu_count_ge(x, n, lo + 1);
            }
        }
        {
            const int chunk = (n + EMU_NT - 1) / EMU_NT;
            const double inv_t = 1.0 / (double)p->temperature;
            static double sum[EMU_NT];
            static int ties[EMU_NT], last[EMU_NT];
            double total = 0.0, before = 0.0, target;
            int tb = 0, first = INT32_MAX, lastm = -1;

            for (int t = 0; t < EMU_NT; t++) {
                int v0 = HY_MIN(n, t * chunk), v1 = HY_MIN(n, v0 + chunk);
                ties[t] = 0;
                for (int v = v0; v < v1; v++)
                    ties[t] += emu_key(x[v]) == ck;
            }
            for (int t = 0; t < EMU_NT; t++) {
                int v0 = HY_MIN(n, t * chunk), v1 = HY_MIN(n, v0 + chunk), rank = tb;
                sum[t] = 0.0;
                last[t] = -1;
                for (int v = v0; v < v1; v++) {
                    uint32_t kv = emu_key(x[v]);
                    if (kv > ck || (kv == ck && rank++ < c_ties)) {
                        sum[t] += exp(((double)x[v] - (double)maxl) * inv_t);
                        last[t] = v;
                    }
                }
                tb += ties[t];
                total += sum[t];
            }
            target = hy_sample_uniform(p->seed, p->counter) * total;
            tb = 0;
            for (int t = 0; t < EMU_NT; t++) {
                int v0 = HY_MIN(n, t * chunk), v1 = HY_MIN(n, v0 + chunk), rank = tb;
                if (last[t] >= 0 && target < before + sum[t]) {
                    double cum = before;
                    for (int v = v0; v < v1; v++) {
                        uint32_t kv = emu_key(x[v]);
                        if (!(kv > ck || (kv == ck && rank++ < c_ties)))
                            continue;
                        cum += exp(((double)x[v] - (double)maxl) * inv_t);
                        if (target < cum) {
                            first = HY_MIN(first, v);
                            break;
                        }
                    }
                }
                lastm = HY_MAX(lastm, last[t]);
                before += sum[t];
                tb += ties[t];
            }
            token = first != INT32_MAX ? first : lastm >= 0 ? lastm : best;
        }
    }
    return token;
}

static void test_plan(void)
{
    static const int32_t vocabs[] = {1, 3, 64, 1000, 5000, 40000};
    char err[HY_ERR_LEN];
    int rows = 0, mism = 0;

    for (size_t vi = 0; vi < HY_ARRAY_LEN(vocabs); vi++) {
        const int32_t V = vocabs[vi];
        float *row = malloc(sizeof(float) * (size_t)V);
        int n_rows = V > 5000 ? 12 : 60;

        for (int r = 0; r < n_rows; r++) {
            const cfg_t *c = &g_cfgs[(size_t)r % HY_ARRAY_LEN(g_cfgs)];
            hy_sample_params_t p = params_of(c, 77 + vi, (uint64_t)r, 0);
            hy_sample_result_t rr;

            for (int32_t v = 0; v < V; v++)
                row[v] = 5.0f * rnd();
            if (r % 3 == 1) /* coarse values: ties everywhere, also at every cut */
                for (int32_t v = 0; v < V; v++)
                    row[v] = floorf(row[v] * 1.5f) / 1.5f;
            if (r % 4 == 0) /* a wide spread: many logits below max - 60 */
                for (int32_t v = 0; v < V; v++)
                    row[v] *= 40.0f;
            if (r % 7 == 3 && V > 2)
                row[1] = -INFINITY;
            if (r % 5 == 4)
                p.top_k = 1 + r % 9;
            if (hy_sample_ref(row, V, &p, &rr, err) != HY_OK)
                rr.token = -2;
            mism += emu_sample(row, V, &p) != rr.token;
            rows++;
        }
        free(row);
    }
    HY_T_OK(mism == 0, "kernel plan (key binary search, ties by id, 1024-chunk draw) emulated "
            "on the CPU equals the sorted reference on %d rows of 1..40000 logits (%d differ)",
            rows, mism);
}

/* ---- GPU: the kernel against the reference ------------------------------------------ */

static void test_device(hy_backend_t *gpu)
{
    static const int32_t vocabs[] = {1, 7, 1000, 32000, 151936};
    char err[HY_ERR_LEN];

    for (size_t vi = 0; vi < HY_ARRAY_LEN(vocabs); vi++) {
        const int32_t V = vocabs[vi], R = 1 + (int32_t)(vi * 3) % 8 + 2;
        float *h = malloc(sizeof(float) * (size_t)V * R), *d = gpu->i->alloc(gpu, (size_t)V * R);
        hy_sample_params_t *p = calloc((size_t)R, sizeof *p);
        hy_sample_result_t *rg = calloc((size_t)R, sizeof *rg), rr;
        int mism = 0, rc;
        double worst = 0.0;

        for (int32_t r = 0; r < R; r++) {
            const cfg_t *c = &g_cfgs[(size_t)(r + vi) % HY_ARRAY_LEN(g_cfgs)];
            float *row = h + (size_t)r * V;

            for (int32_t v = 0; v < V; v++)
                row[v] = 6.0f * rnd();
            /* ties: copy a few values around, some rows quantised */
            for (int32_t k = 0; k < V / 50; k++)
                row[(size_t)(k * 7919) % V] = row[(size_t)(k * 104729) % V];
            if (r % 3 == 2)
                for (int32_t v = 0; v < V; v++)
                    row[v] = floorf(row[v] * 2.0f) / 2.0f;
            if (r % 4 == 1) /* a wide spread: many logits below max - 60 */
                for (int32_t v = 0; v < V; v++)
                    row[v] *= 30.0f;
            p[r] = params_of(c, 1000 + vi, (uint64_t)r, r % 4 == 0 ? 0 : (r * 7) % 21);
            if (r == R - 1 && V > 1)
                p[r].temperature = 0.0f;
        }
        if (vi == 2)
            h[(size_t)1 * V + 5] = NAN; /* row 1 of this size is bad */
        gpu->i->upload(gpu, d, h, (size_t)V * R);
        rc = gpu->i->sample(gpu, d, R, V, p, rg, err);
        for (int32_t r = 0; rc == HY_OK && r < R; r++) {
            hy_sample_ref(h + (size_t)r * V, V, &p[r], &rr, err);
            if (rr.token != rg[r].token || rr.n_top != rg[r].n_top) {
                mism++;
                continue;
            }
            if (rr.token >= 0)
                worst = HY_MAX(worst, fabs((double)rr.logprob - rg[r].logprob) /
                                          HY_MAX(1.0, fabs((double)rr.logprob)));
            for (int j = 0; j < rr.n_top; j++) {
                mism += rr.top_ids[j] != rg[r].top_ids[j];
                worst = HY_MAX(worst, fabs((double)rr.top_logprobs[j] - rg[r].top_logprobs[j]) /
                                          HY_MAX(1.0, fabs((double)rr.top_logprobs[j])));
            }
        }
        HY_T_OK(rc == HY_OK && mism == 0 && worst <= 1e-5,
                "device sample, vocab %d x %d rows (mixed filters, ties%s): tokens and top ids "
                "equal the reference (%d differ), logprob rel err %.1e%s%s", V, R,
                vi == 2 ? ", a NaN row" : "", mism, worst, rc ? ": " : "", rc ? err : "");
        gpu->i->release(gpu, d);
        free(h);
        free(p);
        free(rg);
    }

    /* many draws of one row: token for token the reference (so the host's
     * distribution, which the reference matches) */
    {
        const int32_t R = 4096;
        float row[V_SMALL], *h = malloc(sizeof(float) * V_SMALL * R);
        float *d = gpu->i->alloc(gpu, (size_t)V_SMALL * R);
        hy_sample_params_t *p = calloc(R, sizeof *p);
        hy_sample_result_t *rg = calloc(R, sizeof *rg), rr;
        int mism = 0, rc;

        small_row(row);
        for (int32_t r = 0; r < R; r++) {
            memcpy(h + (size_t)r * V_SMALL, row, sizeof row);
            p[r] = params_of(&g_cfgs[(size_t)r % HY_ARRAY_LEN(g_cfgs)], 5, (uint64_t)r, 0);
        }
        gpu->i->upload(gpu, d, h, (size_t)V_SMALL * R);
        rc = gpu->i->sample(gpu, d, R, V_SMALL, p, rg, err);
        for (int32_t r = 0; rc == HY_OK && r < R; r++) {
            hy_sample_ref(row, V_SMALL, &p[r], &rr, err);
            mism += rr.token != rg[r].token;
        }
        HY_T_OK(rc == HY_OK && mism == 0, "device sample: %d draws of the tied 64-logit row "
                "under every filter mix equal the reference (%d differ)", R, mism);
        /* bad parameters are refused before any launch */
        p[3].top_p = 1.5f;
        rc = gpu->i->sample(gpu, d, R, V_SMALL, p, rg, err);
        HY_T_OK(rc == HY_ERANGE && strstr(err, "top_p") != NULL,
                "device sample: top_p 1.5 refused (%s)", err);
        gpu->i->release(gpu, d);
        free(h);
        free(p);
        free(rg);
    }
}

int main(void)
{
    hy_backend_t *gpu = NULL;
    hy_backend_opts_t o = {0};
    char err[HY_ERR_LEN];

    test_reference();
    test_plan();
    if (hy_backend_cuda_new(&gpu, &o, err) != HY_OK) {
        printf("ok %d - device sampling # SKIP no GPU (%s)\n", ++hy_t_count, err);
        return hy_t_done();
    }
    if (!gpu->i->sample) {
        HY_T_OK(0, "the CUDA backend provides sample");
    } else {
        test_device(gpu);
    }
    gpu->i->free(gpu);
    return hy_t_done();
}
