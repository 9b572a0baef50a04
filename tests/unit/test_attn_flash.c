/*
 * test_attn_flash.c - prefill attention over the paged KV cache (the flash
 * kernel of the CPU's level, and every lower level: attn_flash_impl.h)
 * against dense attention in double, on awkward shapes:
 * 1..70 and 513 new queries after cached prefixes whose lengths are not
 * multiples of the kernel's tiles, shuffled page ids, GQA 1/4/8, heads of
 * 64/128/256, pages of 16/7/5, window, softcap, F32/F16/Q8_0 KV, 1 and 2
 * threads, and every lower ISA level.
 */
#include "backend/backend.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_ref.h"
#include "backend/cpu/cpu_impl.h"
#include "test.h"
#define HY_TEST_SEED 0x2545F4914F6CDD1DULL
#include "cpu_test.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include "backend/cpu/x86_transpose.h"
#endif

typedef struct {
    int nkv, group, hd, hdv, pt;
    hy_dtype_t type;
    int window;
    float softcap;
    float qamp;  /* query amplitude; 0 means 6 (scores of a few units) */
} cfg_t;

/* Dense causal attention in double over the K/V the cache holds (rounded
 * through its type) for query token t of head h; o gets hdv values. */
static void ref_one(const cfg_t *c, const float *q, const float *kr, const float *vr, int t,
                    int h, float scale, double *s, double *o)
{
    int nh = c->nkv * c->group, g = h / c->group;
    int lo = c->window > 0 ? (t - c->window + 1 > 0 ? t - c->window + 1 : 0) : 0;
    const float *qv = q + ((size_t)t * nh + h) * c->hd;
    double mx = -INFINITY, sum = 0;

    for (int j = lo; j <= t; j++) {
        const float *kv = kr + ((size_t)j * c->nkv + g) * c->hd;
        double d4[4] = {0, 0, 0, 0}, d;
        /* four partial sums (every head here is a multiple of 4): the
         * reference dominates this test's time */
        for (int i = 0; i < c->hd; i += 4)
            for (int u = 0; u < 4; u++)
                d4[u] += (double)qv[i + u] * kv[i + u];
        d = ((d4[0] + d4[1]) + (d4[2] + d4[3])) * scale;
        if (c->softcap > 0)
            d = c->softcap * tanh(d / c->softcap);
        s[j] = d;
        mx = fmax(mx, d);
    }
    for (int i = 0; i < c->hdv; i++)
        o[i] = 0;
    for (int j = lo; j <= t; j++) {
        double e = exp(s[j] - mx);
        const float *vv = vr + ((size_t)j * c->nkv + g) * c->hdv;
        sum += e;
        for (int i = 0; i < c->hdv; i++)
            o[i] += e * vv[i];
    }
    for (int i = 0; i < c->hdv; i++)
        o[i] /= sum;
}

/* Rows of n floats rounded through the cache's element type. */
static void kv_round(hy_dtype_t t, float *x, size_t rows, int n)
{
    uint8_t buf[4096];

    if (t == HY_DTYPE_F32)
        return;
    for (size_t r = 0; r < rows; r++) {
        hy_quant_quantize_row(t, x + r * n, buf, n);
        hy_quant_traits(t)->to_float(buf, x + r * n, n);
    }
}

/* One sequence: n_past tokens prefilled by a first call, then n_new more in
 * a second, on fresh shuffled pages, once per kernel level isa[0..n_isa)
 * (-1: leave the level as it is).  worst[i] gets the largest error of any
 * output of level i against the double reference, computed once
 * (INFINITY on NaN or a backend error). */
static void run_case_isas(hy_backend_t *be, const cfg_t *c, int n_past, int n_new, int n_isa,
                          const int *isa, double *worst)
{
    int nh = c->nkv * c->group, T = n_past + n_new, n_pages = (T + c->pt - 1) / c->pt + 3;
    float *q = malloc((size_t)T * nh * c->hd * sizeof(float));
    float *k = malloc((size_t)T * c->nkv * c->hd * sizeof(float));
    float *v = malloc((size_t)T * c->nkv * c->hdv * sizeof(float));
    float *kr = malloc((size_t)T * c->nkv * c->hd * sizeof(float));
    float *vr = malloc((size_t)T * c->nkv * c->hdv * sizeof(float));
    float *out = malloc((size_t)n_isa * T * nh * c->hdv * sizeof(float));
    double *s = malloc((size_t)T * sizeof(double)), *o = malloc((size_t)c->hdv * sizeof(double));
    int32_t *pos = malloc((size_t)T * sizeof(int32_t)), *pages = malloc((size_t)n_pages * 4);
    hy_kv_layout_t lay = {1, c->nkv, c->hd, c->hdv, c->pt, n_pages, c->type, 0, NULL,
                          {0, 0, 0, 0, 0, 0, 0}};
    hy_attn_params_t p = {nh, c->nkv, c->hd, c->hdv, 1.0f / sqrtf((float)c->hd), c->window,
                          c->softcap};
    char err[HY_ERR_LEN] = "";
    int ok[4] = {0, 0, 0, 0};

    for (int ii = 0; ii < n_isa; ii++)
        worst[ii] = INFINITY;
    if (n_isa > 4 || !q || !k || !v || !kr || !vr || !out || !s || !o || !pos || !pages)
        goto done;
    /* queries large enough that the softmax is far from uniform */
    fill(q, (size_t)T * nh * c->hd, c->qamp > 0 ? c->qamp : 6.0f);
    fill(k, (size_t)T * c->nkv * c->hd, 1.0f);
    fill(v, (size_t)T * c->nkv * c->hdv, 1.0f);
    memcpy(kr, k, (size_t)T * c->nkv * c->hd * sizeof(float));
    memcpy(vr, v, (size_t)T * c->nkv * c->hdv * sizeof(float));
    kv_round(c->type, kr, (size_t)T * c->nkv, c->hd);
    kv_round(c->type, vr, (size_t)T * c->nkv, c->hdv);
    for (int i = 0; i < n_pages; i++)
        pages[i] = i;
    for (int i = n_pages - 1; i > 0; i--) {
        int j = (int)(rng_u32() % (uint32_t)(i + 1)), t = pages[i];
        pages[i] = pages[j];
        pages[j] = t;
    }
    for (int i = 0; i < T; i++)
        pos[i] = i;
    for (int ii = 0; ii < n_isa; ii++) {
        float *oi = out + (size_t)ii * T * nh * c->hdv;
        if (isa[ii] >= 0)
            hy_cpu_attn_set_isa((hy_isa_t)isa[ii]);
        if (be->i->kv_init(be, &lay, err) != HY_OK) {
            printf("# kv_init: %s\n", err);
            continue;
        }
        for (int part = 0; part < 2; part++) {
            int first = part ? n_past : 0, n = part ? n_new : n_past;
            if (n == 0)
                continue;
            hy_batch_seq_t sq = {0, n, first, pages, (first + n + c->pt - 1) / c->pt, -1, NULL, 0,
                                 NULL, 0, 0, 0, NULL, NULL};
            hy_batch_t b = {n, NULL, pos + first, 1, &sq};
            be->i->attention(be, 0, &b, q + (size_t)first * nh * c->hd,
                             k + (size_t)first * c->nkv * c->hd,
                             v + (size_t)first * c->nkv * c->hdv,
                             oi + (size_t)first * nh * c->hdv, &p);
        }
        if (be->i->status(be, err) != HY_OK) {
            printf("# attention: %s\n", err);
            continue;
        }
        ok[ii] = 1;
        worst[ii] = 0;
    }
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            ref_one(c, q, kr, vr, t, h, p.scale, s, o);
            for (int ii = 0; ii < n_isa; ii++)
                for (int i = 0; ok[ii] && i < c->hdv; i++) {
                    double e = fabs(out[(((size_t)ii * T + t) * nh + h) * c->hdv + i] - o[i]);
                    if (!(e <= worst[ii]))
                        worst[ii] = isnan(e) ? INFINITY : e;
                }
        }
done:
    free(q);
    free(k);
    free(v);
    free(kr);
    free(vr);
    free(out);
    free(s);
    free(o);
    free(pos);
    free(pages);
}

/* run_case_isas at the level set now. */
static double run_case(hy_backend_t *be, const cfg_t *c, int n_past, int n_new)
{
    const int keep = -1;
    double worst;

    run_case_isas(be, c, n_past, n_new, 1, &keep, &worst);
    return worst;
}

/* "512 and ": the default split, spelled out for a test name */
#define STR_(x) #x
#define STR(x) STR_(x)
#define SPLIT_AND STR(HY_ATTN_SPLIT) " and "

/* Float rounding of 256-term dots of scores up to ~10 and of the softmax
 * sums; the double reference sees the same rounded K/V. */
#define TOL 1e-5

/* The levels with a flash kernel (AVX-512, AVX2) this CPU has, best first;
 * just the best level where there is none. */
static int flash_isas(int *isa)
{
    int n = 0;

    for (int l = (int)hy_cpu_isa(); l >= (int)HY_ISA_AVX2 || (n == 0 && l >= 0); l--)
        isa[n++] = l;
    return n;
}

/* 1..70 new queries after 0..99 cached tokens, the shape rotating; one
 * line per level. */
static void test_sweep(hy_backend_t *be1, hy_backend_t *be2, int n_isa, const int *isa)
{
    static const int groups[3] = {1, 4, 8}, heads[3] = {64, 128, 256}, pts[4] = {16, 7, 5, 16};
    double worst[4] = {0, 0, 0, 0}, e[4];
    int worst_n[4] = {0, 0, 0, 0};

    for (int n = 1; n <= 70; n++) {
        int gi = n % 3, g = groups[gi];
        cfg_t c = {g == 8 ? 1 : 2, g, heads[(n / 3) % 3], heads[(n / 3) % 3], pts[n % 4],
                   HY_DTYPE_F16, 0, 0, 0};
        run_case_isas(n % 2 ? be2 : be1, &c, (n * 37) % 100, n, n_isa, isa, e);
        for (int ii = 0; ii < n_isa; ii++)
            if (!(e[ii] <= worst[ii])) {
                worst[ii] = e[ii];
                worst_n[ii] = n;
            }
    }
    for (int ii = 0; ii < n_isa; ii++)
        HY_T_OK(worst[ii] < TOL, "%s: 1..70 new queries after 0..99 cached, GQA 1/4/8, heads "
                "64/128/256, pages 16/7/5, 1/2 threads: max err %.2e at %d (tol %.0e)",
                hy_isa_name((hy_isa_t)isa[ii]), worst[ii], worst_n[ii], TOL);
}

#if defined(__x86_64__)
/* attn_flash_impl.h's tree over w lanes in plain C, as the generic
 * hy_af_hsum4 adds them: r[i] += r[i + st] for st = 1, 2, 4, ... */
static float tree_sum(const float *l, int w)
{
    float r[16];

    memcpy(r, l, sizeof(float) * (size_t)w);
    for (int st = 1; st < w; st *= 2)
        for (int i = 0; i + st < w; i += 2 * st)
            r[i] = r[i] + r[i + st];
    return r[0];
}

__attribute__((target("avx512f"))) static void hsum_512(const float *x, float *out)
{
    hy_x86_hsum4_ps512(_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16), _mm512_loadu_ps(x + 32),
                       _mm512_loadu_ps(x + 48), out);
}

__attribute__((target("avx"))) static void hsum_256(const float *x, float *out)
{
    hy_x86_hsum4_ps256(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8), _mm256_loadu_ps(x + 16),
                       _mm256_loadu_ps(x + 24), out);
}

/* The x86 kernels' horizontal sums are the tree, bit for bit: a score's
 * bits must not depend on which level's kernel summed it (the decode and
 * prefill kernels of one level share it; this pins it to the generic
 * one).  Values over 40 binades, with NaN, infinities, -0 and subnormals
 * mixed in: a tree in another order differs within a few hundred sums. */
static void test_hsum_tree(void)
{
    static const float special[] = {NAN, INFINITY, -INFINITY, -0.0f, 1e-40f, -3e-39f, 3e38f};
    const struct {
        const char *name;
        int have, w;
        void (*f)(const float *, float *);
    } lv[] = {{"avx512", __builtin_cpu_supports("avx512f"), 16, hsum_512},
              {"avx2", __builtin_cpu_supports("avx"), 8, hsum_256}};

    for (size_t v = 0; v < HY_ARRAY_LEN(lv); v++) {
        if (!lv[v].have) {
            HY_T_OK(1, "%s: the horizontal sum is the tree # SKIP this CPU lacks it", lv[v].name);
            continue;
        }
        long bad = 0, n = 0;
        for (int it = 0; it < 200000; it++) {
            float x[64], got[4];
            for (int i = 0; i < 4 * lv[v].w; i++) {
                uint32_t u = rng_u32();
                x[i] = (it % 8 == 0 && u % 64 < 3) ? special[(u >> 8) % HY_ARRAY_LEN(special)]
                                                   : ldexpf(rng_f(1.0f), (int)(u % 40) - 20);
            }
            lv[v].f(x, got);
            for (int k = 0; k < 4; k++, n++) {
                float want = tree_sum(x + k * lv[v].w, lv[v].w);
                /* which NaN an add passes on is the operand order's,
                 * which C leaves to the compiler: NaN is NaN here */
                bad += memcmp(&got[k], &want, sizeof(float)) != 0 &&
                       !(isnan(got[k]) && isnan(want));
            }
        }
        HY_T_OK(bad == 0, "%s: the horizontal sum is the tree, bit for bit (%ld of %ld sums "
                "differ)", lv[v].name, bad, n);
    }
}
#else
static void test_hsum_tree(void)
{
}
#endif

int main(void)
{
    hy_backend_t *be1 = new_backend(1), *be2 = new_backend(2);
    int isa[4], n_isa = flash_isas(isa);

    printf("# cpu isa: %s\n", hy_isa_name(hy_cpu_isa()));
    HY_T_OK(be1 && be2, "cpu backends with 1 and 2 threads");
    if (!be1 || !be2)
        return hy_t_done();
    test_hsum_tree();

    /* the shapes on every level with a flash kernel (AVX-512, AVX2) */
    test_sweep(be1, be2, n_isa, isa);

    /* 513 queries: a partial unit at the end whatever the unit size */
    static const struct {
        int nkv, group, hd, pt, n_past, threads;
    } big[] = {
        {2, 4, 256, 16, 77, 1}, {2, 1, 128, 7, 131, 2}, {1, 8, 64, 16, 200, 2},
        {2, 4, 256, 5, 0, 2},
    };
    for (size_t i = 0; i < HY_ARRAY_LEN(big); i++) {
        cfg_t c = {big[i].nkv, big[i].group, big[i].hd, big[i].hd, big[i].pt,
                   HY_DTYPE_F16, 0, 0, 0};
        double e[4];
        run_case_isas(big[i].threads == 1 ? be1 : be2, &c, big[i].n_past, 513, n_isa, isa, e);
        for (int ii = 0; ii < n_isa; ii++)
            HY_T_OK(e[ii] < TOL, "%s: 513 queries after %d, GQA %d, head %d, pages of %d, %d "
                    "thread(s): max err %.2e (tol %.0e)", hy_isa_name((hy_isa_t)isa[ii]),
                    big[i].n_past, big[i].group, big[i].hd, big[i].pt, big[i].threads, e[ii],
                    TOL);
    }
    hy_cpu_attn_set_isa(hy_cpu_isa());

    /* the other KV types and the options */
    static const struct {
        cfg_t c;
        int n_past, n_new;
        const char *what;
    } opt[] = {
        {{2, 4, 256, 128, 16, HY_DTYPE_F32, 0, 0, 0}, 70, 130, "f32 KV, head 256/128"},
        {{2, 4, 128, 128, 16, HY_DTYPE_Q8_0, 0, 0, 0}, 90, 100, "q8_0 KV, head 128"},
        {{2, 4, 128, 128, 16, HY_DTYPE_F16, 37, 0, 0}, 200, 130, "window 37"},
        {{2, 4, 128, 128, 7, HY_DTYPE_F16, 150, 0, 0}, 200, 130, "window 150, pages of 7"},
        {{2, 4, 64, 64, 16, HY_DTYPE_F16, 0, 3.0f, 0}, 60, 90, "softcap 3"},
        {{2, 2, 80, 48, 16, HY_DTYPE_F16, 0, 0, 0}, 45, 61, "head 80/48, GQA 2"},
    };
    for (size_t i = 0; i < HY_ARRAY_LEN(opt); i++) {
        double e = run_case(i % 2 ? be2 : be1, &opt[i].c, opt[i].n_past, opt[i].n_new);
        HY_T_OK(e < TOL, "%s: %d queries after %d: max err %.2e (tol %.0e)", opt[i].what,
                opt[i].n_new, opt[i].n_past, e, TOL);
    }

    /* scores spread over hundreds: most weights underflow (the kernels
     * drop those below e^-80) and one key dominates each query; the
     * error grows with the scores' size (float dots of ~500) */
    {
        cfg_t c = {2, 4, 128, 128, 16, HY_DTYPE_F16, 0, 0, 150.0f};
        double e = run_case(be2, &c, 100, 150);
        HY_T_OK(e < 10 * TOL, "scores up to ~500: 150 queries after 100: max err %.2e "
                "(tol %.0e)", e, 10 * TOL);
    }

    /* keys in splits folded in order: decode on 2 threads shares a token's
     * keys among them (units of whole splits, then a merge), prefill folds
     * as its sweep crosses each boundary; the default split, and splits of
     * one tile so that short sequences cross many, on every level */
    {
        static const struct {
            cfg_t c;
            int split, n_past, n_new, threads;
            const char *what;
        } sp[] = {
            {{1, 4, 256, 256, 16, HY_DTYPE_F16, 0, 0, 0}, HY_ATTN_SPLIT, 1030, 1, 2,
             "Gemma 3's global shape, decode at 1,030"},
            {{1, 4, 256, 256, 16, HY_DTYPE_F16, 0, 0, 0}, 64, 700, 1, 2, "decode at 700"},
            {{3, 3, 64, 64, 7, HY_DTYPE_F16, 0, 0, 0}, 64, 400, 2, 2, "SmolLM2's shape, 2 tokens"},
            {{1, 8, 128, 128, 16, HY_DTYPE_F16, 0, 0, 0}, 64, 400, 1, 2, "GQA 8"},
            {{1, 4, 128, 128, 16, HY_DTYPE_F16, 150, 0, 0}, 64, 600, 1, 2, "window 150"},
            {{2, 2, 80, 48, 5, HY_DTYPE_F32, 0, 3.0f, 0}, 64, 500, 1, 2, "f32, head 80/48, softcap"},
            {{1, 4, 128, 128, 16, HY_DTYPE_Q8_0, 0, 0, 0}, 64, 300, 1, 2, "q8_0 decode"},
            {{1, 4, 128, 128, 16, HY_DTYPE_F16, 0, 0, 0}, 64, 300, 200, 1, "prefill of 200"},
        };
        for (int lvl = (int)hy_cpu_isa(); lvl >= HY_ISA_SCALAR; lvl--) {
            double worst = 0;
            const char *at = "";
            if (hy_cpu_attn_set_isa((hy_isa_t)lvl) != HY_OK)
                continue;
            for (size_t i = 0; i < HY_ARRAY_LEN(sp); i++) {
                /* the long case at the best level only (its reference is
                 * most of this test's time) */
                if (lvl != (int)hy_cpu_isa() && sp[i].split != 64)
                    continue;
                hy_cpu_attn_set_split(sp[i].split);
                double e = run_case(sp[i].threads == 1 ? be1 : be2, &sp[i].c, sp[i].n_past,
                                    sp[i].n_new);
                if (!(e <= worst)) {
                    worst = e;
                    at = sp[i].what;
                }
            }
            hy_cpu_attn_set_split(HY_ATTN_SPLIT);
            HY_T_OK(worst < TOL, "%s: keys in splits of %s64 (decode on 2 threads, "
                    "prefill): max err %.2e%s%s (tol %.0e)", hy_isa_name((hy_isa_t)lvl),
                    lvl == (int)hy_cpu_isa() ? SPLIT_AND : "", worst, *at ? ", " : "", at, TOL);
        }
        hy_cpu_attn_set_isa(hy_cpu_isa());
    }

    /* the lower ISA levels take their own kernels (flash on AVX2, the lanes
     * kernel below): the options again */
    for (int lvl = HY_ISA_SCALAR; lvl < (int)hy_cpu_isa(); lvl++) {
        double worst = 0;
        hy_cpu_attn_set_isa((hy_isa_t)lvl);
        for (size_t i = 0; i < HY_ARRAY_LEN(opt); i += 2)
            worst = fmax(worst, run_case(be2, &opt[i].c, opt[i].n_past, opt[i].n_new));
        cfg_t c = {2, 4, 256, 256, 16, HY_DTYPE_F16, 0, 0, 0};
        worst = fmax(worst, run_case(be1, &c, 77, 45));
        HY_T_OK(worst < TOL, "kernels pinned to %s: f32/window/head 80 cases and 45 queries "
                "at head 256: max err %.2e (tol %.0e)", hy_isa_name((hy_isa_t)lvl), worst, TOL);
    }
    hy_cpu_attn_set_isa(hy_cpu_isa());

    be1->i->free(be1);
    be2->i->free(be2);
    return hy_t_done();
}
