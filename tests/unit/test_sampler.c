/*
 * test_sampler.c - the sampler against independent double-precision
 * references: greedy and top_k = 1, seeded determinism, a chi-square test
 * of the drawn distribution, exactly which tokens top_p/min_p keep, the
 * penalties' exact effect on logits, logprobs and parameter validation, and
 * the random stream's position (draw count, skip) a resumed request uses.
 */
#include "engine/sampler.h"
#include "test.h"

#include <math.h>
#include <string.h>

#define BIG_VOCAB 151936

/* Test-local generator so the logits do not depend on the sampler's RNG. */
static uint64_t t_state = 12345;
static double t_uniform(void)
{
    t_state = t_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(t_state >> 11) * 0x1.0p-53;
}

static hy_sampler_t *mk(const hy_sampling_t *p, int32_t n_vocab)
{
    char err[HY_ERR_LEN];
    hy_sampler_t *s = NULL;

    if (hy_sampler_create(&s, p, n_vocab, err) != HY_OK) {
        printf("# create failed: %s\n", err);
        return NULL;
    }
    return s;
}

/* Draws n tokens from fixed logits, counting each id into hist. */
static int draw_hist(const hy_sampling_t *p, const float *logits, int32_t n_vocab, int n,
                     long *hist)
{
    hy_sampler_t *s = mk(p, n_vocab);
    float *work = malloc((size_t)n_vocab * sizeof *work);
    int rc = 0;

    memset(hist, 0, (size_t)n_vocab * sizeof *hist);
    for (int i = 0; i < n && s && work; i++) {
        int32_t t;

        memcpy(work, logits, (size_t)n_vocab * sizeof *work);
        t = hy_sampler_sample(s, work, NULL);
        if (t < 0 || t >= n_vocab) {
            rc = -1;
            break;
        }
        hist[t]++;
    }
    if (s == NULL || work == NULL)
        rc = -1;
    free(work);
    hy_sampler_free(s);
    return rc;
}

static int cmp_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? 1 : x > y ? -1 : 0;
}

static void test_greedy(void)
{
    hy_sampling_t p;
    hy_sampler_t *s;
    float l[6] = { 0.5f, 3.0f, -1.0f, 3.0f, 2.9f, -INFINITY };
    int32_t t;

    hy_sampling_default(&p);
    p.temperature = 0.0f;
    s = mk(&p, 6);
    t = hy_sampler_sample(s, l, NULL);
    HY_T_OK(t == 1, "greedy picks the argmax, ties to the lowest id (got %d)", (int)t);
    hy_sampler_free(s);
}

static void test_top_k1_is_greedy(void)
{
    hy_sampling_t pk, pg;
    hy_sampler_t *sk, *sg;
    float *a = malloc(BIG_VOCAB * sizeof *a), *b = malloc(BIG_VOCAB * sizeof *b);
    int mismatches = 0;

    hy_sampling_default(&pk);
    pk.top_k = 1;
    pk.temperature = 1.5f;
    pk.seed = 7;
    hy_sampling_default(&pg);
    pg.temperature = 0.0f;
    sk = mk(&pk, BIG_VOCAB);
    sg = mk(&pg, BIG_VOCAB);
    for (int r = 0; r < 6; r++) {
        for (int v = 0; v < BIG_VOCAB; v++)
            a[v] = (float)(int)(t_uniform() * 200.0) * 0.05f; /* many ties */
        memcpy(b, a, BIG_VOCAB * sizeof *a);
        mismatches += hy_sampler_sample(sk, a, NULL) != hy_sampler_sample(sg, b, NULL);
    }
    HY_T_OK(mismatches == 0, "top_k = 1 equals greedy on 6 tied 152k-vocab rows (%d differ)",
            mismatches);
    hy_sampler_free(sk);
    hy_sampler_free(sg);
    free(a);
    free(b);
}

static void test_seeds(void)
{
    enum { V = 1000, N = 300 };
    hy_sampling_t p;
    float logits[V], work[V];
    int32_t a[N], b[N], c[N], d[N];
    hy_sampler_t *s1, *s2, *s3, *s4;
    int same_ab = 1, diff_ac = 0, same_ad = 1;

    for (int v = 0; v < V; v++)
        logits[v] = (float)(t_uniform() * 4.0);
    hy_sampling_default(&p);
    p.seed = 42;
    s1 = mk(&p, V);
    s2 = mk(&p, V);
    s4 = mk(&p, V);
    p.seed = 43;
    s3 = mk(&p, V);
    for (int i = 0; i < N; i++) {
        memcpy(work, logits, sizeof work);
        a[i] = hy_sampler_sample(s1, work, NULL);
        memcpy(work, logits, sizeof work);
        c[i] = hy_sampler_sample(s3, work, NULL);
    }
    /* s2 alone; s4 interleaved with another sequence's sampler (s3) */
    for (int i = 0; i < N; i++) {
        memcpy(work, logits, sizeof work);
        b[i] = hy_sampler_sample(s2, work, NULL);
        memcpy(work, logits, sizeof work);
        (void)hy_sampler_sample(s3, work, NULL);
        memcpy(work, logits, sizeof work);
        d[i] = hy_sampler_sample(s4, work, NULL);
    }
    for (int i = 0; i < N; i++) {
        same_ab &= a[i] == b[i];
        same_ad &= a[i] == d[i];
        diff_ac += a[i] != c[i];
    }
    HY_T_OK(same_ab, "same seed gives the same %d tokens", N);
    HY_T_OK(same_ad, "a sequence's tokens do not depend on other sequences' sampling");
    HY_T_OK(diff_ac > N / 2, "seeds 42 and 43 differ (%d of %d tokens)", diff_ac, N);
    hy_sampler_free(s1);
    hy_sampler_free(s2);
    hy_sampler_free(s3);
    hy_sampler_free(s4);
}

/* The stream's position (what a request resumed after an engine crash
 * restarts from): one draw per sampled token with temperature > 0 and
 * top_k/top_p on or off, none when greedy; a fresh sampler skipped to the
 * position of token k samples what the original sampled after it. */
static void test_resume_position(void)
{
    enum { V = 500, N = 60, K = 23 };
    hy_sampling_t p;
    float logits[V], work[V];
    int32_t a[N], b[N - K];
    uint64_t at_k = 0;
    hy_sampler_t *s1, *s2, *g;
    int same = 1;

    for (int v = 0; v < V; v++)
        logits[v] = (float)(t_uniform() * 4.0);
    hy_sampling_default(&p);
    p.seed = 7;
    p.temperature = 0.9f;
    p.top_p = 0.95f;
    s1 = mk(&p, V);
    for (int i = 0; i < N; i++) {
        memcpy(work, logits, sizeof work);
        a[i] = hy_sampler_sample(s1, work, NULL);
        hy_sampler_accept(s1, a[i]);
        if (i == K - 1)
            at_k = hy_sampler_draws(s1);
    }
    HY_T_OK(at_k == K && hy_sampler_draws(s1) == N, "one draw per token (%llu after %d, %llu "
            "after %d)", (unsigned long long)at_k, K, (unsigned long long)hy_sampler_draws(s1), N);
    s2 = mk(&p, V);
    for (int i = 0; i < K; i++)
        hy_sampler_accept(s2, a[i]);
    hy_sampler_skip(s2, at_k);
    for (int i = K; i < N; i++) {
        memcpy(work, logits, sizeof work);
        b[i - K] = hy_sampler_sample(s2, work, NULL);
        hy_sampler_accept(s2, b[i - K]);
        same &= b[i - K] == a[i];
    }
    HY_T_OK(same && hy_sampler_draws(s2) == N,
            "a new sampler skipped to draw %llu continues with the same %d tokens",
            (unsigned long long)at_k, N - K);
    p.temperature = 0;
    g = mk(&p, V);
    memcpy(work, logits, sizeof work);
    hy_sampler_sample(g, work, NULL);
    HY_T_OK(hy_sampler_draws(g) == 0, "greedy draws nothing");
    hy_sampler_free(s1);
    hy_sampler_free(s2);
    hy_sampler_free(g);
}

/* Pearson chi-square of hist against probs; df = n - 1. */
static double chi_square(const long *hist, const double *probs, int n, long total)
{
    double chi = 0.0;

    for (int i = 0; i < n; i++) {
        double e = probs[i] * (double)total;

        chi += (hist[i] - e) * (hist[i] - e) / e;
    }
    return chi;
}

static void test_distribution(void)
{
    enum { V = 8, N = 40000 };
    const double want[V] = { 0.30, 0.20, 0.15, 0.12, 0.10, 0.07, 0.04, 0.02 };
    float logits[V];
    double probs[V], z = 0.0, chi;
    long hist[V];
    hy_sampling_t p;

    hy_sampling_default(&p);
    p.seed = 2024;
    for (int i = 0; i < V; i++)
        logits[i] = (float)log(want[i]) + 1.5f; /* shift: softmax is invariant */
    HY_T_OK(draw_hist(&p, logits, V, N, hist) == 0, "drew %d tokens", N);
    chi = chi_square(hist, want, V, N);
    /* 24.32 is the 0.999 quantile of chi-square with 7 degrees of freedom */
    HY_T_OK(chi < 24.32, "temperature 1 draws match softmax (chi2 = %.2f, df 7)", chi);

    p.temperature = 0.5f;
    for (int i = 0; i < V; i++)
        z += probs[i] = exp(2.0 * log(want[i]));
    for (int i = 0; i < V; i++)
        probs[i] /= z;
    draw_hist(&p, logits, V, N, hist);
    chi = chi_square(hist, probs, V, N);
    HY_T_OK(chi < 24.32, "temperature 0.5 draws match softmax(l / 0.5) (chi2 = %.2f)", chi);

    /* a wrong distribution must fail the same test, or the test proves nothing */
    chi = chi_square(hist, want, V, N);
    HY_T_OK(chi > 100.0, "the chi-square check rejects the wrong distribution (%.0f)", chi);
}

/* Which of the V tokens appear in N draws, as a bit mask. */
static unsigned drawn_mask(const hy_sampling_t *p, const float *logits, int V)
{
    long hist[16];
    unsigned m = 0;

    if (draw_hist(p, logits, V, 4000, hist) != 0)
        return ~0u;
    for (int i = 0; i < V; i++)
        m |= (unsigned)(hist[i] > 0) << i;
    return m;
}

static void test_filters(void)
{
    /* probabilities 0.4 0.3 0.2 0.1 placed out of order on purpose */
    const double pr[5] = { 0.2, 0.4, 0.1, 0.3, 0.0 };
    float logits[5];
    hy_sampling_t p;
    unsigned m;

    for (int i = 0; i < 5; i++)
        logits[i] = pr[i] > 0 ? (float)log(pr[i]) : -INFINITY;
    hy_sampling_default(&p);
    p.seed = 5;
    m = drawn_mask(&p, logits, 5);
    HY_T_OK(m == 0xF, "no filter: all four live tokens drawn, never the -inf one (mask %x)", m);
    p.top_k = 2;
    m = drawn_mask(&p, logits, 5);
    HY_T_OK(m == ((1u << 1) | (1u << 3)), "top_k = 2 keeps exactly tokens 1 and 3 (mask %x)", m);
    p.top_k = 0;
    p.top_p = 0.65f; /* 0.4 < 0.65 <= 0.7: two tokens */
    m = drawn_mask(&p, logits, 5);
    HY_T_OK(m == ((1u << 1) | (1u << 3)), "top_p = 0.65 keeps exactly tokens 1 and 3 (mask %x)", m);
    p.top_p = 0.75f; /* 0.7 < 0.75 <= 0.9: three tokens */
    m = drawn_mask(&p, logits, 5);
    HY_T_OK(m == 0xB, "top_p = 0.75 keeps exactly tokens 0, 1, 3 (mask %x)", m);
    p.top_p = 0.35f; /* the top token alone already reaches it */
    m = drawn_mask(&p, logits, 5);
    HY_T_OK(m == (1u << 1), "top_p = 0.35 keeps only the best token (mask %x)", m);
    p.top_p = 1.0f;
    p.min_p = 0.6f; /* threshold 0.24: keeps 0.4 and 0.3 */
    m = drawn_mask(&p, logits, 5);
    HY_T_OK(m == ((1u << 1) | (1u << 3)), "min_p = 0.6 keeps exactly tokens 1 and 3 (mask %x)", m);
    p.min_p = 0.4f; /* threshold 0.16: keeps 0.4 0.3 0.2 */
    p.top_p = 0.95f; /* top_p first keeps 0.4 0.3 0.2 0.1, then min_p drops 0.1 */
    m = drawn_mask(&p, logits, 5);
    HY_T_OK(m == 0xB, "top_p then min_p = 0.4 keeps exactly tokens 0, 1, 3 (mask %x)", m);
    p.min_p = 0.0f;
    p.top_p = 0.55f;
    p.top_k = 2; /* top_k first: renormalised 4/7 >= 0.55 (0.4 alone would not be) */
    m = drawn_mask(&p, logits, 5);
    HY_T_OK(m == (1u << 1), "top_p renormalises after top_k (mask %x)", m);
}

/* top_p over a 152k vocabulary whose nucleus spans thousands of tokens, so
 * the slice-growing selection runs several rounds. */
static void test_top_p_big(void)
{
    float *logits = malloc(BIG_VOCAB * sizeof *logits), *work = malloc(BIG_VOCAB * sizeof *work);
    double *sorted = malloc(BIG_VOCAB * sizeof *sorted), z = 0.0, cum = 0.0, thr = 0.0;
    hy_sampling_t p;
    hy_sampler_t *s;
    int bad = 0, kept = 0;

    for (int v = 0; v < BIG_VOCAB; v++) {
        logits[v] = (float)(t_uniform() * 6.0);
        sorted[v] = logits[v];
    }
    qsort(sorted, BIG_VOCAB, sizeof *sorted, cmp_desc);
    for (int v = 0; v < BIG_VOCAB; v++)
        z += exp(sorted[v] - sorted[0]);
    for (int v = 0; v < BIG_VOCAB; v++) {
        cum += exp(sorted[v] - sorted[0]);
        if (cum >= 0.5 * z) {
            thr = sorted[v];
            kept = v + 1;
            break;
        }
    }
    hy_sampling_default(&p);
    p.top_p = 0.5f;
    p.temperature = 2.0f; /* flatten inside the nucleus so its edge gets drawn */
    p.seed = 99;
    s = mk(&p, BIG_VOCAB);
    for (int i = 0; i < 60; i++) {
        int32_t t;

        memcpy(work, logits, BIG_VOCAB * sizeof *work);
        t = hy_sampler_sample(s, work, NULL);
        bad += t < 0 || logits[t] < thr;
    }
    HY_T_OK(bad == 0 && kept > 1000,
            "top_p = 0.5 over 152k: 60 draws all inside the %d-token nucleus (%d outside)",
            kept, bad);
    hy_sampler_free(s);
    free(logits);
    free(work);
    free(sorted);
}

static void test_penalties(void)
{
    enum { V = 8 };
    const float base[V] = { 1.0f, 2.0f, -1.0f, 0.5f, -2.0f, 3.0f, 0.0f, 4.0f };
    float l[V], want[V];
    const int32_t prompt[] = { 1, 2, 1 };
    hy_sampling_t p;
    hy_sampler_t *s;
    float worst = 0.0f;

    hy_sampling_default(&p);
    p.temperature = 0.0f;
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.n_logit_bias = 1;
    p.logit_bias[0] = (hy_logit_bias_t){ 6, 1.5f };
    s = mk(&p, V);
    hy_sampler_accept_prompt(s, prompt, 3);
    hy_sampler_accept(s, 2);
    hy_sampler_accept(s, 3);
    hy_sampler_accept(s, 3);
    memcpy(l, base, sizeof l);
    memcpy(want, base, sizeof want);
    want[1] = 2.0f / 2.0f;                        /* prompt only: repetition */
    want[2] = -1.0f * 2.0f - 0.5f - 0.25f;        /* prompt + 1 generated */
    want[3] = 0.5f / 2.0f - 0.5f - 2 * 0.25f;     /* 2 generated */
    want[6] = 0.0f + 1.5f;                        /* biased, never seen */
    hy_sampler_sample(s, l, NULL);
    for (int v = 0; v < V; v++)
        worst = fmaxf(worst, fabsf(l[v] - want[v]));
    HY_T_OK(worst < 1e-6f, "bias + repetition/presence/frequency change exactly the right logits (max err %g)",
            worst);
    hy_sampler_free(s);

    /* window of 2: token 5 falls out after two newer tokens */
    p.penalty_last_n = 2;
    p.n_logit_bias = 0;
    s = mk(&p, V);
    hy_sampler_accept(s, 5);
    hy_sampler_accept(s, 0);
    hy_sampler_accept(s, 0);
    memcpy(l, base, sizeof l);
    hy_sampler_sample(s, l, NULL);
    HY_T_OK(l[5] == 3.0f && fabsf(l[0] - (0.5f - 0.5f - 0.5f)) < 1e-6f,
            "penalty_last_n = 2 forgets older tokens (l5 %g, l0 %g)", l[5], l[0]);
    HY_T_OK(hy_sampler_accept(s, V) == HY_EINVAL && hy_sampler_accept(s, -1) == HY_EINVAL,
            "accepting an out-of-vocabulary token is refused");
    hy_sampler_free(s);

    /* greedy follows the penalised logits */
    hy_sampling_default(&p);
    p.temperature = 0.0f;
    p.presence_penalty = 2.0f;
    s = mk(&p, V);
    hy_sampler_accept(s, 7);
    memcpy(l, base, sizeof l);
    HY_T_OK(hy_sampler_sample(s, l, NULL) == 5, "presence penalty moves greedy off a repeated token");
    hy_sampler_free(s);
}

static void test_logprobs(void)
{
    float *logits = malloc(BIG_VOCAB * sizeof *logits), *work = malloc(BIG_VOCAB * sizeof *work);
    double *ref = malloc(BIG_VOCAB * sizeof *ref), maxl = -INFINITY, z = 0.0, worst = 0.0;
    hy_sample_out_t out;
    hy_sampling_t p;
    hy_sampler_t *s;
    int32_t t;
    int ids_ok = 1;

    for (int v = 0; v < BIG_VOCAB; v++) {
        logits[v] = (float)(t_uniform() * 20.0 - 10.0);
        maxl = fmax(maxl, logits[v]);
    }
    for (int v = 0; v < BIG_VOCAB; v++)
        z += exp(logits[v] - maxl);
    for (int v = 0; v < BIG_VOCAB; v++)
        ref[v] = logits[v] - maxl - log(z);
    hy_sampling_default(&p);
    p.n_logprobs = 20;
    p.temperature = 0.7f;
    p.top_k = 50;
    p.seed = 3;
    s = mk(&p, BIG_VOCAB);
    memcpy(work, logits, BIG_VOCAB * sizeof *work);
    t = hy_sampler_sample(s, work, &out);
    worst = fabs(out.logprob - ref[t]);
    for (int i = 0; i < out.n_top; i++) {
        worst = fmax(worst, fabs(out.top_logprobs[i] - ref[out.top_ids[i]]));
        if (i > 0 && out.top_logprobs[i] > out.top_logprobs[i - 1])
            ids_ok = 0;
    }
    /* the 20th best must beat every token not listed */
    for (int v = 0; v < BIG_VOCAB && ids_ok; v++) {
        int listed = 0;

        for (int i = 0; i < out.n_top; i++)
            listed |= out.top_ids[i] == v;
        if (!listed && ref[v] > ref[out.top_ids[out.n_top - 1]])
            ids_ok = 0;
    }
    HY_T_OK(out.token == t && out.n_top == 20 && ids_ok,
            "top 20 logprobs are the 20 best tokens, best first");
    HY_T_OK(worst < 1e-5, "logprobs match a double log-softmax over 152k (max err %.2g)", worst);
    hy_sampler_free(s);
    free(logits);
    free(work);
    free(ref);
}

static void test_bad_logits(void)
{
    float l[4] = { 0.0f, NAN, 1.0f, 2.0f };
    float m[4] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY };
    hy_sampling_t p;
    hy_sampler_t *s;

    hy_sampling_default(&p);
    s = mk(&p, 4);
    HY_T_OK(hy_sampler_sample(s, l, NULL) == HY_EINVAL, "NaN logits are refused");
    HY_T_OK(hy_sampler_sample(s, m, NULL) == HY_EINVAL, "all -inf logits are refused");
    hy_sampler_free(s);
}

static int check_msg(const hy_sampling_t *p, int32_t n_vocab, const char *want)
{
    char err[HY_ERR_LEN] = "";
    hy_sampler_t *s = NULL;
    int rc = hy_sampler_create(&s, p, n_vocab, err);

    if (rc == HY_OK || s != NULL || strcmp(err, want) != 0) {
        printf("# got rc %d \"%s\", want \"%s\"\n", rc, err, want);
        hy_sampler_free(s);
        return 0;
    }
    return 1;
}

static void test_validation(void)
{
    hy_sampling_t p, d;
    int ok = 1;

    hy_sampling_default(&d);
    HY_T_OK(hy_sampling_validate(&d, 100, NULL) == HY_OK, "defaults validate");
    p = d; p.temperature = 2.5f;
    ok &= check_msg(&p, 100, "temperature = 2.5: must be in [0, 2]");
    p = d; p.temperature = NAN;
    ok &= check_msg(&p, 100, "temperature = nan: must be in [0, 2]");
    p = d; p.top_k = -1;
    ok &= check_msg(&p, 100, "top_k = -1: must be >= 0 (0 = off)");
    p = d; p.top_p = 0.0f;
    ok &= check_msg(&p, 100, "top_p = 0: must be in (0, 1]");
    p = d; p.min_p = 1.5f;
    ok &= check_msg(&p, 100, "min_p = 1.5: must be in [0, 1]");
    p = d; p.repetition_penalty = 0.0f;
    ok &= check_msg(&p, 100, "repetition_penalty = 0: must be in (0, 10]");
    p = d; p.presence_penalty = -2.5f;
    ok &= check_msg(&p, 100, "presence_penalty = -2.5: must be in [-2, 2]");
    p = d; p.frequency_penalty = 3.0f;
    ok &= check_msg(&p, 100, "frequency_penalty = 3: must be in [-2, 2]");
    p = d; p.n_logprobs = 21;
    ok &= check_msg(&p, 100, "top_logprobs = 21: must be in [0, 20]");
    p = d; p.n_logit_bias = 1; p.logit_bias[0] = (hy_logit_bias_t){ 100, 1.0f };
    ok &= check_msg(&p, 100, "logit_bias: token 100: must be in [0, 99]");
    p = d; p.n_logit_bias = 1; p.logit_bias[0] = (hy_logit_bias_t){ 5, -101.0f };
    ok &= check_msg(&p, 100, "logit_bias[5] = -101: must be in [-100, 100]");
    ok &= check_msg(&d, 0, "sampler: n_vocab = 0: must be > 0");
    HY_T_OK(ok, "every out-of-range field is refused with a message naming it");
    p = d; p.temperature = 2.0f; p.top_p = 1.0f; p.presence_penalty = -2.0f;
    p.repetition_penalty = 10.0f; p.n_logprobs = 20; p.min_p = 1.0f;
    HY_T_OK(hy_sampling_validate(&p, 100, NULL) == HY_OK, "range end points are accepted");
}

int main(void)
{
    test_greedy();
    test_top_k1_is_greedy();
    test_seeds();
    test_resume_position();
    test_distribution();
    test_filters();
    test_top_p_big();
    test_penalties();
    test_logprobs();
    test_bad_logits();
    test_validation();
    return hy_t_done();
}
