/*
 * test_cpu_backend.c - every CPU backend op against a naive double-precision
 * reference written here, on deterministic random data: the thread pool,
 * matmul over each weight type with 1 and 3 threads, get_rows, rmsnorm,
 * rope (NORM/NEOX, partial n_rot, freq_factors, YaRN), the element-wise ops,
 * and paged attention on a ragged batch against dense attention, plus the
 * invariance property (batched == alone == token by token).
 */
#include "backend/backend.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_ref.h"
#include "backend/cpu/quant_impl.h"
#include "backend/cpu/threadpool.h"
#include "backend/cpu/cpu_impl.h"
#include "quant_fill.h"
#include "test.h"
#define HY_TEST_SEED 0x9E3779B97F4A7C15ULL
#include "cpu_test.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------- */

/* ---- thread pool --------------------------------------------------------- */

typedef struct {
    _Atomic int calls;
    _Atomic int64_t sum;
    int nth_seen[8];
    pthread_t caller;
    _Atomic int by_caller; /* shares other than 0 the caller took over */
} pool_probe_t;

static void pool_probe(void *arg, int ith, int nth)
{
    pool_probe_t *p = arg;
    atomic_fetch_add(&p->calls, 1);
    atomic_fetch_add(&p->sum, ith);
    p->nth_seen[ith] = nth;
    if (ith > 0 && pthread_equal(pthread_self(), p->caller))
        atomic_fetch_add(&p->by_caller, 1);
}

static void test_pool(void)
{
    hy_pool_t *pool;
    char err[HY_ERR_LEN];
    int ok = 1, taken = 0;

    HY_T_OK(hy_pool_new(&pool, -1, err) == HY_ERANGE, "pool rejects -1 threads (%s)", err);
    if (hy_pool_new(&pool, 4, err) != HY_OK) {
        HY_T_OK(0, "pool of 4: %s", err);
        return;
    }
    /* many back-to-back jobs (spin path), then some after a sleep longer
     * than the spin budget (futex path), and jobs on fewer threads */
    for (int it = 0; it < 3000 && ok; it++) {
        pool_probe_t p;
        int nth = it % 4 + 1;
        memset(&p, 0, sizeof p);
        p.caller = pthread_self();
        if (it % 500 == 499)
            usleep(2000);
        hy_pool_run_n(pool, nth, pool_probe, &p);
        ok = atomic_load(&p.calls) == nth && atomic_load(&p.sum) == nth * (nth - 1) / 2;
        for (int i = 0; i < nth; i++)
            ok = ok && p.nth_seen[i] == nth;
        taken += atomic_load(&p.by_caller);
    }
    /* a share whose worker was late (asleep, descheduled) is run by the
     * caller instead: still exactly once */
    HY_T_OK(ok, "pool: 3000 jobs on 1..4 threads each ran once per share, spin and futex "
            "wake-ups (%d shares taken over by the caller)", taken);
    hy_pool_free(pool);
}

/* ---- matmul -------------------------------------------------------------- */

/* Random weights of type t: quantized from floats where a quantizer exists,
 * random bytes with sane f16 scales for the K-quants.  Returns row bytes. */
static size_t make_weight(hy_dtype_t t, int64_t ne0, int64_t n_out, void **data)
{
    size_t rb = hy_dtype_row_bytes(t, ne0);
    uint8_t *d = malloc(rb * (size_t)n_out);
    float *row = malloc((size_t)ne0 * sizeof(float));

    for (int64_t r = 0; r < n_out; r++) {
        uint8_t *dst = d + (size_t)r * rb;
        fill(row, (size_t)ne0, 1.0f);
        if (hy_quant_quantize_row(t, row, dst, ne0) == HY_OK)
            continue;
        for (size_t i = 0; i < rb; i++)
            dst[i] = (uint8_t)rng_u32();
        for (int64_t b = 0; b < ne0 / hy_dtype_info(t)->block; b++)
            hy_test_block_factors(t, dst + (size_t)b * hy_dtype_info(t)->block_bytes,
                                  0.01f + 0.01f * (float)(rng_u32() % 100) / 100.0f, 0.005f);
    }
    free(row);
    *data = d;
    return rb;
}

static void test_matmul_type(hy_backend_t *be1, hy_backend_t *be3, hy_dtype_t t)
{
    const int64_t ne0 = 512, n_out = 150;
    const int ntoks[] = {1, 3, 17, 64};
    const hy_quant_traits_t *tr = hy_quant_traits(t);
    hy_weight_t w = {0};
    void *data;
    double worst_ref = 0, worst_dot = 0;
    int ok = 1;
    char err[HY_ERR_LEN];

    w.type = t;
    w.ne[0] = ne0;
    w.ne[1] = n_out;
    w.ne[2] = w.ne[3] = 1;
    w.row_bytes = make_weight(t, ne0, n_out, &data);
    w.data = data;
    w.name = "test.weight";
    if (be1->i->weight_init(be1, &w, err) != HY_OK) {
        HY_T_OK(0, "matmul %s: weight_init: %s", hy_dtype_info(t)->name, err);
        free(data);
        return;
    }

    float *wf = malloc((size_t)(ne0 * n_out) * sizeof(float));
    float *x = malloc((size_t)(64 * ne0) * sizeof(float));
    float *y = malloc((size_t)(64 * n_out) * sizeof(float));
    float *ydot = malloc((size_t)(64 * n_out) * sizeof(float));
    uint8_t *xq = malloc(hy_dtype_row_bytes(tr->vec_dot_type, ne0) + 64);
    for (int64_t r = 0; r < n_out; r++)
        tr->to_float((const uint8_t *)data + (size_t)r * w.row_bytes, wf + r * ne0, ne0);
    fill(x, (size_t)(64 * ne0), 1.0f);
    /* the same dots one at a time through vec_dot: the tiling and threading
     * must reproduce them (tile kernels are bit-identical to vec_dot) */
    for (int t2 = 0; t2 < 64; t2++) {
        tr->from_float(x + t2 * ne0, xq, ne0);
        for (int64_t r = 0; r < n_out; r++)
            tr->vec_dot(ne0, &ydot[t2 * n_out + r], (const uint8_t *)data + (size_t)r * w.row_bytes,
                        xq);
    }
    int quant_act = tr->vec_dot_type != HY_DTYPE_F32;
    for (size_t ti = 0; ti < HY_ARRAY_LEN(ntoks); ti++) {
        for (int bi = 0; bi < 2; bi++) {
            hy_backend_t *be = bi ? be3 : be1;
            int nt = ntoks[ti];
            memset(y, 0xff, (size_t)(64 * n_out) * sizeof(float)); /* NaN */
            be->i->matmul(be, &w, x, y, nt);
            for (int t2 = 0; t2 < nt; t2++)
                for (int64_t r = 0; r < n_out; r++) {
                    double ref = 0, mag = 0;
                    for (int64_t i = 0; i < ne0; i++) {
                        ref += (double)wf[r * ne0 + i] * x[t2 * ne0 + i];
                        mag += fabs((double)wf[r * ne0 + i] * x[t2 * ne0 + i]);
                    }
                    double got = y[t2 * n_out + r];
                    double e_ref = fabs(got - ref) / mag;
                    double e_dot = fabs(got - ydot[t2 * n_out + r]) / mag;
                    if (!(e_ref <= worst_ref))
                        worst_ref = isnan(e_ref) ? INFINITY : e_ref;
                    if (!(e_dot <= worst_dot))
                        worst_dot = isnan(e_dot) ? INFINITY : e_dot;
                }
        }
    }
    /* Error relative to sum|w_i x_i|.  F32 partners: float rounding only.
     * Quantized activations (q8): each x_i moves by <= amax/254; over random
     * rows the bound below holds with a wide margin. */
    double tol_ref = quant_act ? 1e-2 : 1e-5;
    ok = worst_ref <= tol_ref && worst_dot <= 1e-6;
    HY_T_OK(ok, "matmul %s %lldx%lld, n_tok 1/3/17/64, 1 and 3 threads: err vs double %.2e "
            "(tol %.0e), vs vec_dot %.2e (tol 1e-6)", hy_dtype_info(t)->name, (long long)ne0,
            (long long)n_out, worst_ref, tol_ref, worst_dot);
    HY_T_OK(be1->i->status(be1, err) == HY_OK && be3->i->status(be3, err) == HY_OK,
            "matmul %s: no error recorded", hy_dtype_info(t)->name);
    free(wf);
    free(x);
    free(y);
    free(ydot);
    free(xq);
    free(data);
}

static void test_matmul(hy_backend_t *be1, hy_backend_t *be3)
{
    const hy_dtype_t types[] = {HY_DTYPE_F32, HY_DTYPE_F16, HY_DTYPE_BF16, HY_DTYPE_Q8_0,
                                HY_DTYPE_Q4_0, HY_DTYPE_Q4_1, HY_DTYPE_Q4_K, HY_DTYPE_Q5_K,
                                HY_DTYPE_Q6_K, HY_DTYPE_Q5_0, HY_DTYPE_Q5_1, HY_DTYPE_IQ4_NL,
                                HY_DTYPE_Q2_K, HY_DTYPE_Q3_K, HY_DTYPE_IQ4_XS};
    hy_weight_t w = {0};
    char err[HY_ERR_LEN];
    float x[64] = {0}, y[4];

    for (size_t i = 0; i < HY_ARRAY_LEN(types); i++) {
        if (!hy_quant_traits(types[i])) {
            printf("# matmul: no kernels for %s, skipped\n", hy_dtype_info(types[i])->name);
            continue;
        }
        test_matmul_type(be1, be3, types[i]);
    }

    /* bad weights: refused by weight_init, and matmul records an error */
    static const float data[4 * 33];
    w.type = HY_DTYPE_Q8_0;
    w.ne[0] = 33;
    w.ne[1] = 4;
    w.row_bytes = 34;
    w.data = data;
    w.name = "bad.q8";
    HY_T_OK(be1->i->weight_init(be1, &w, err) == HY_EINVAL && strstr(err, "bad.q8"),
            "weight_init rejects a q8_0 row of 33: %s", err);
    w.type = HY_DTYPE_F32;
    w.ne[0] = 32;
    w.row_bytes = 100;
    HY_T_OK(be1->i->weight_init(be1, &w, err) == HY_EINVAL, "weight_init rejects wrong "
            "row_bytes: %s", err);
    w.type = (hy_dtype_t)77;
    be1->i->matmul(be1, &w, x, y, 1);
    HY_T_OK(be1->i->status(be1, err) == HY_EUNSUPPORTED && y[0] == 0.0f &&
            be1->i->status(be1, err) == HY_OK,
            "matmul with an unknown type records an error, zeroes y, status clears it");
}

/* ---- get_rows, rmsnorm, element-wise ------------------------------------- */

static void test_get_rows(hy_backend_t *be)
{
    const int64_t ne0 = 256, n_rows = 40;
    const hy_dtype_t types[] = {HY_DTYPE_F32, HY_DTYPE_F16, HY_DTYPE_Q8_0, HY_DTYPE_Q4_K,
                                HY_DTYPE_Q5_0, HY_DTYPE_Q5_1, HY_DTYPE_IQ4_NL, HY_DTYPE_Q2_K,
                                HY_DTYPE_Q3_K, HY_DTYPE_IQ4_XS};
    int32_t ids[300];
    float *y = malloc(300 * ne0 * sizeof(float)), *ref = malloc(ne0 * sizeof(float));
    char err[HY_ERR_LEN];
    int ok = 1;

    for (size_t k = 0; k < HY_ARRAY_LEN(types); k++) {
        hy_weight_t w = {0};
        void *data;
        if (!hy_quant_traits(types[k]))
            continue;
        w.type = types[k];
        w.ne[0] = ne0;
        w.ne[1] = n_rows;
        w.row_bytes = make_weight(types[k], ne0, n_rows, &data);
        w.data = data;
        for (int i = 0; i < 300; i++)
            ids[i] = (int32_t)(rng_u32() % n_rows);
        be->i->get_rows(be, &w, ids, y, 300);
        for (int i = 0; i < 300; i++) {
            hy_quant_traits(types[k])->to_float((const uint8_t *)data + ids[i] * w.row_bytes,
                                                ref, ne0);
            ok = ok && memcmp(ref, y + i * ne0, ne0 * sizeof(float)) == 0;
        }
        if (k == 0) {
            ids[7] = (int32_t)n_rows;
            be->i->get_rows(be, &w, ids, y, 10);
            HY_T_OK(be->i->status(be, err) == HY_ERANGE && strstr(err, "id 40"),
                    "get_rows: id out of range is reported: %s", err);
        }
        free(data);
    }
    HY_T_OK(ok, "get_rows f32/f16/q8_0/q4_K/q5_0/q5_1/iq4_nl/q2_K/q3_K/iq4_xs: 300 rows "
            "equal to_float of the picked row");
    free(y);
    free(ref);
}

static void test_rmsnorm(hy_backend_t *be)
{
    const int n_rows = 200, dim = 576;
    float *x = malloc(n_rows * dim * sizeof(float)), *y = malloc(n_rows * dim * sizeof(float));
    float wv[576];
    hy_weight_t w = {HY_DTYPE_F32, {dim, 1, 1, 1}, dim * sizeof(float), wv, NULL, "norm", HY_WLAYOUT_ROWS};
    double worst = 0;

    fill(x, (size_t)n_rows * dim, 3.0f);
    fill(wv, dim, 2.0f);
    for (int pass = 0; pass < 3; pass++) {
        /* pass 0: weighted; 1: no weight; 2: per-head (dim 64) in place */
        int d = pass == 2 ? 64 : dim, nr = n_rows * dim / d;
        float *src = malloc((size_t)nr * d * sizeof(float));
        memcpy(src, x, (size_t)nr * d * sizeof(float));
        hy_weight_t wh = w;
        wh.ne[0] = d;
        if (pass == 2) {
            memcpy(y, x, (size_t)nr * d * sizeof(float));
            be->i->rmsnorm(be, y, &wh, y, nr, d, 1e-6f);
        } else {
            be->i->rmsnorm(be, x, pass == 0 ? &w : NULL, y, nr, d, 1e-5f);
        }
        for (int r = 0; r < nr; r++) {
            double ss = 0;
            for (int i = 0; i < d; i++)
                ss += (double)src[r * d + i] * src[r * d + i];
            double s = 1.0 / sqrt(ss / d + (pass == 2 ? 1e-6 : 1e-5));
            for (int i = 0; i < d; i++) {
                double ref = src[r * d + i] * s * (pass == 1 ? 1.0 : wv[i]);
                double e = fabs(y[r * d + i] - ref) / (fabs(ref) + 1e-3);
                if (!(e <= worst))
                    worst = isnan(e) ? INFINITY : e;
            }
        }
        free(src);
    }
    HY_T_OK(worst < 1e-5, "rmsnorm: weighted, unweighted, per-head in place; worst rel err "
            "%.2e (tol 1e-5)", worst);
    free(x);
    free(y);
}

static void test_elementwise(hy_backend_t *be)
{
    const size_t n = 100003; /* above the parallel threshold, odd */
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    float *c = malloc(n * sizeof(float)), *a0 = malloc(n * sizeof(float));
    double worst = 0;
    int ok;

    fill(a, n, 6.0f);
    fill(b, n, 2.0f);
    memcpy(a0, a, n * sizeof(float));
    be->i->swiglu(be, a, b, c, n);
    for (size_t i = 0; i < n; i++) {
        double g = a0[i], ref = g / (1 + exp(-g)) * b[i];
        worst = HY_MAX(worst, fabs(c[i] - ref) / (fabs(ref) + 1e-3));
    }
    be->i->swiglu(be, a, b, a, 1000); /* y aliasing gate */
    ok = worst < 1e-5 && a[999] == c[999];
    HY_T_OK(ok, "swiglu %zu floats (and aliased): worst rel err %.2e (tol 1e-5)", n, worst);

    /* geglu: the backend's unary GELU-tanh and mul in one op, their bits */
    memcpy(a, a0, n * sizeof(float));
    be->i->unary(be, HY_UNARY_GELU_TANH, a, c, n);
    be->i->mul(be, c, b, n);
    be->i->geglu(be, a, b, a, n); /* y aliasing gate, as the FFN calls it */
    HY_T_OK(memcmp(a, c, n * sizeof(float)) == 0,
            "geglu %zu floats (aliased) == unary gelu_tanh then mul, bit for bit", n);

    memcpy(a, a0, n * sizeof(float));
    be->i->add(be, a, b, n);
    ok = 1;
    for (size_t i = 0; i < n; i++)
        ok = ok && a[i] == a0[i] + b[i];
    be->i->scale(be, a, 0.5f, n);
    for (size_t i = 0; i < n; i++)
        ok = ok && a[i] == (a0[i] + b[i]) * 0.5f;
    HY_T_OK(ok, "add and scale over %zu floats are exact", n);

    /* rmsnorm on every level: the portable loop's bits (its eight partial
     * sums are the AVX2 lanes; products and sums never fused), with and
     * without a weight, a tail past the vectors, in place */
    {
        static const int32_t dims[] = {576, 645, 7};
        float wv[645];
        fill(wv, 645, 1.5f);
        hy_weight_t nw = {HY_DTYPE_F32, {645, 1, 1, 1}, sizeof wv, wv, NULL, "norm", HY_WLAYOUT_ROWS};
        int same = 1, runs = 0;
        for (size_t di = 0; di < HY_ARRAY_LEN(dims); di++)
            for (int wi = 0; wi < 2; wi++) {
                const int32_t d = dims[di], nr = 37;
                nw.ne[0] = d;
                hy_quant_set_isa(HY_ISA_SCALAR);
                be->i->rmsnorm(be, a0, wi ? &nw : NULL, c, nr, d, 1e-6f);
                for (int isa = HY_ISA_AVX2; isa <= (int)hy_cpu_isa(); isa++) {
                    if (hy_quant_set_isa((hy_isa_t)isa) != HY_OK)
                        continue;
                    memcpy(a, a0, (size_t)nr * d * sizeof(float));
                    be->i->rmsnorm(be, a, wi ? &nw : NULL, a, nr, d, 1e-6f);
                    same = same && memcmp(a, c, (size_t)nr * d * sizeof(float)) == 0;
                    runs++;
                }
            }
        hy_quant_set_isa(hy_cpu_isa());
        HY_T_OK(same, "rmsnorm at every level == the portable loop, bit for bit (%d runs: "
                "dims 576/645/7, weighted or not, in place)", runs);
    }

    const int32_t rows[] = {3, 0, 3, 7};
    be->i->gather_rows(be, c, a0, rows, 4, 1000);
    ok = 1;
    for (int r = 0; r < 4; r++)
        ok = ok && memcmp(c + r * 1000, a0 + rows[r] * 1000, 1000 * sizeof(float)) == 0;
    HY_T_OK(ok, "gather_rows copies rows 3,0,3,7");

    float bias[600];
    fill(bias, 600, 1.0f);
    hy_weight_t bw = {HY_DTYPE_F32, {600, 1, 1, 1}, sizeof bias, bias, NULL, "bias", HY_WLAYOUT_ROWS};
    memcpy(a, a0, n * sizeof(float));
    be->i->add_bias(be, a, &bw, 160, 600);
    ok = 1;
    for (int t = 0; t < 160; t++)
        for (int i = 0; i < 600; i++)
            ok = ok && a[t * 600 + i] == a0[t * 600 + i] + bias[i];
    HY_T_OK(ok, "add_bias over 160 rows of 600");
    free(a);
    free(b);
    free(c);
    free(a0);
}

/* ---- rope ---------------------------------------------------------------- */

/* ggml's rope, written out in double for one head vector. */
static void rope_ref(double *x, int head_dim, int pos, const hy_rope_t *r)
{
    int n = r->n_rot, half = n / 2;
    double fs = r->freq_scale, ms = r->attn_factor, lo = 0, hi = 0;

    if (r->ext_factor != 0) {
        double cd_fast = n * log(r->n_ctx_orig / (r->beta_fast * 2 * M_PI)) / (2 * log(r->freq_base));
        double cd_slow = n * log(r->n_ctx_orig / (r->beta_slow * 2 * M_PI)) / (2 * log(r->freq_base));
        lo = fmax(0, floor(cd_fast));
        hi = fmin(n - 1, ceil(cd_slow));
        ms *= 1 + 0.1 * log(1 / fs);
    }
    for (int i = 0; i < half; i++) {
        double ex = pos * pow(r->freq_base, -2.0 * i / n);
        if (r->freq_factors)
            ex /= r->freq_factors[i];
        double th = fs * ex;
        if (r->ext_factor != 0) {
            double y = (i - lo) / fmax(0.001, hi - lo);
            double ramp = (1 - fmin(1, fmax(0, y))) * r->ext_factor;
            th = th * (1 - ramp) + ex * ramp;
        }
        int a = r->mode == HY_ROPE_NEOX ? i : 2 * i;
        int b = r->mode == HY_ROPE_NEOX ? i + half : 2 * i + 1;
        double x0 = x[a], x1 = x[b];
        x[a] = (x0 * cos(th) - x1 * sin(th)) * ms;
        x[b] = (x0 * sin(th) + x1 * cos(th)) * ms;
    }
    (void)head_dim;
}

static void test_rope(hy_backend_t *be)
{
    const int n_tok = 37, n_head = 5, hd = 64;
    float *x = malloc(n_tok * n_head * hd * sizeof(float));
    float *x0 = malloc(n_tok * n_head * hd * sizeof(float));
    int32_t pos[37];
    float ff[32];
    char err[HY_ERR_LEN];
    struct {
        const char *what;
        hy_rope_t r;
    } cases[] = {
        {"norm full", {HY_ROPE_NORM, 64, 10000, 1, 0, 1, 0, 0, 0, NULL}},
        {"neox full", {HY_ROPE_NEOX, 64, 1000000, 1, 0, 1, 0, 0, 0, NULL}},
        {"norm n_rot 32", {HY_ROPE_NORM, 32, 10000, 1, 0, 1, 0, 0, 0, NULL}},
        {"neox n_rot 24, freq_scale 0.25", {HY_ROPE_NEOX, 24, 500000, 0.25f, 0, 1, 0, 0, 0, NULL}},
        {"norm freq_factors", {HY_ROPE_NORM, 64, 500000, 1, 0, 1, 0, 0, 0, ff}},
        {"neox freq_factors n_rot 48", {HY_ROPE_NEOX, 48, 10000, 1, 0, 1, 0, 0, 0, ff}},
        {"neox yarn", {HY_ROPE_NEOX, 64, 10000, 0.25f, 1.0f, 1.0f, 32, 1, 4096, NULL}},
        {"norm yarn n_rot 32", {HY_ROPE_NORM, 32, 10000, 0.5f, 1.0f, 0.9f, 32, 1, 2048, NULL}},
    };
    double worst = 0;
    int pass = 1, tail_ok = 1;

    for (int i = 0; i < 32; i++)
        ff[i] = 1.0f + (float)i * 0.37f;
    for (int t = 0; t < n_tok; t++)
        pos[t] = t < 20 ? t : (int32_t)(rng_u32() % 20000);
    for (size_t c = 0; c < HY_ARRAY_LEN(cases); c++) {
        fill(x0, (size_t)n_tok * n_head * hd, 2.0f);
        memcpy(x, x0, (size_t)n_tok * n_head * hd * sizeof(float));
        be->i->rope(be, x, n_tok, n_head, hd, pos, &cases[c].r);
        double cw = 0;
        for (int t = 0; t < n_tok; t++)
            for (int h = 0; h < n_head; h++) {
                double v[64];
                const float *src = x0 + (t * n_head + h) * hd;
                const float *got = x + (t * n_head + h) * hd;
                for (int i = 0; i < hd; i++)
                    v[i] = src[i];
                rope_ref(v, hd, pos[t], &cases[c].r);
                for (int i = 0; i < hd; i++)
                    cw = fmax(cw, fabs(got[i] - v[i]));
                for (int i = cases[c].r.n_rot; i < hd; i++)
                    tail_ok = tail_ok && got[i] == src[i];
            }
        if (cw > 2e-5) {
            printf("# rope %s: max abs err %.3e\n", cases[c].what, cw);
            pass = 0;
        }
        worst = fmax(worst, cw);
    }
    HY_T_OK(pass && be->i->status(be, err) == HY_OK,
            "rope: norm/neox, partial n_rot, freq_scale, freq_factors, YaRN; positions to "
            "20000; worst abs err %.2e (tol 2e-5)", worst);
    HY_T_OK(tail_ok, "rope: dims past n_rot pass through unchanged");
    hy_rope_t bad = {HY_ROPE_NORM, 65, 10000, 1, 0, 1, 0, 0, 0, NULL};
    be->i->rope(be, x, 1, 1, hd, pos, &bad);
    HY_T_OK(be->i->status(be, err) == HY_EINVAL, "rope: odd n_rot rejected: %s", err);
    free(x);
    free(x0);
}

/* The CPU backend keeps the cos/sin rows of the last positions per
 * setting (two settings): a sequence of calls that revisits, changes one
 * position of, shortens and alternates three settings over the same
 * positions must give, call by call, the bits of a backend that has seen
 * nothing before (a fresh one per call). */
static void test_rope_rows(hy_backend_t *be)
{
    enum { N = 24, NH = 3, HD = 64 };
    /* the fourth setting's freq_factors change in place between calls */
    static float ff[HD / 2];
    const hy_rope_t set[4] = {
        {HY_ROPE_NEOX, 64, 1000000, 1, 0, 1, 0, 0, 0, NULL},
        {HY_ROPE_NEOX, 64, 10000, 1, 0, 1, 0, 0, 0, NULL},
        {HY_ROPE_NORM, 32, 10000, 0.5f, 1.0f, 0.9f, 32, 1, 2048, NULL},
        {HY_ROPE_NORM, 64, 500000, 1, 0, 1, 0, 0, 0, ff},
    };
    /* setting, first position, tokens, a position changed (-1: none), and
     * the freq_factors' scale */
    static const int calls[][5] = {
        {0, 100, N, -1, 1}, {0, 100, N, -1, 1}, {1, 100, N, -1, 1}, {0, 100, N, -1, 1},
        {0, 100, N, 5, 1},  {1, 100, N, 5, 1},  {2, 100, N, -1, 1}, {0, 100, N, -1, 1},
        {1, 100, N, -1, 1}, {1, 101, N, -1, 1}, {1, 101, 7, -1, 1}, {1, 101, N, -1, 1},
        {2, 0, 1, -1, 1},   {2, 1, 1, -1, 1},   {2, 0, 1, -1, 1},   {0, 0, 1, -1, 1},
        {3, 50, N, -1, 1},  {3, 50, N, -1, 1},  {3, 50, N, -1, 2},  {3, 50, N, -1, 2},
    };
    float x0[N * NH * HD], a[N * NH * HD], b[N * NH * HD];
    int32_t pos[N];
    char err[HY_ERR_LEN];
    int bad = 0;

    fill(x0, HY_ARRAY_LEN(x0), 2.0f);
    for (size_t c = 0; c < HY_ARRAY_LEN(calls); c++) {
        hy_backend_t *fresh = new_backend(1);
        const hy_rope_t *r = &set[calls[c][0]];
        int n = calls[c][2];

        for (int t = 0; t < n; t++)
            pos[t] = calls[c][1] + 3 * t + (t == calls[c][3] ? 1000 : 0);
        for (int i = 0; i < HD / 2; i++)
            ff[i] = (1.0f + 0.25f * (float)i) * (float)calls[c][4];
        memcpy(a, x0, sizeof x0);
        memcpy(b, x0, sizeof x0);
        be->i->rope(be, a, n, NH, HD, pos, r);
        if (fresh != NULL) {
            fresh->i->rope(fresh, b, n, NH, HD, pos, r);
            fresh->i->free(fresh);
        }
        if (fresh == NULL || memcmp(a, b, sizeof a) != 0) {
            printf("# rope rows: call %zu differs from a fresh backend's\n", c);
            bad++;
        }
    }
    /* every level rotates with the portable loop's bits: NEOX and
     * interleaved pairs, all or part of the head, halves that are not
     * whole vectors */
    {
        const hy_rope_t lv[] = {
            {HY_ROPE_NEOX, 64, 10000, 1, 0, 1, 0, 0, 0, NULL},
            {HY_ROPE_NORM, 64, 10000, 1, 0, 1, 0, 0, 0, NULL},
            {HY_ROPE_NEOX, 20, 10000, 1, 0, 1, 0, 0, 0, NULL},
            {HY_ROPE_NORM, 26, 500000, 0.5f, 1.0f, 0.9f, 32, 1, 2048, NULL},
        };
        int same = 1, runs = 0;
        for (int t = 0; t < N; t++)
            pos[t] = 7 + 5 * t;
        for (size_t k = 0; k < HY_ARRAY_LEN(lv); k++) {
            hy_quant_set_isa(HY_ISA_SCALAR);
            memcpy(b, x0, sizeof x0);
            be->i->rope(be, b, N, NH, HD, pos, &lv[k]);
            for (int isa = HY_ISA_AVX2; isa <= (int)hy_cpu_isa(); isa++) {
                if (hy_quant_set_isa((hy_isa_t)isa) != HY_OK)
                    continue;
                memcpy(a, x0, sizeof x0);
                be->i->rope(be, a, N, NH, HD, pos, &lv[k]);
                same = same && memcmp(a, b, sizeof a) == 0;
                runs++;
            }
        }
        hy_quant_set_isa(hy_cpu_isa());
        HY_T_OK(same, "rope at every level == the portable loop, bit for bit (%d runs: NEOX "
                "and pairs, 64 of 64, 20 and 26 of 64 dims)", runs);
    }
    HY_T_OK(bad == 0 && be->i->status(be, err) == HY_OK,
            "rope: rows held between calls (same, changed, fewer positions; four settings "
            "in two slots; freq_factors changed in place) == a fresh backend's, bit for bit "
            "(%d of %zu calls differ)",
            bad, HY_ARRAY_LEN(calls));
}

/* ---- attention ----------------------------------------------------------- */

enum { A_NH = 8, A_NKV = 2, A_MAXPOS = 160, A_MAXPAGES = 64 };

typedef struct {
    int hd, hdv, pt;
    hy_dtype_t type;
    int window;
    float softcap;
} attn_cfg_t;

/* A sequence's full history: K/V/Q of every position, as the test made them. */
typedef struct {
    float k[A_MAXPOS][A_NKV][64];
    float v[A_MAXPOS][A_NKV][64];
    float q[A_MAXPOS][A_NH][64];
    int32_t pages[A_MAXPAGES];
} seq_hist_t;

/* K/V as stored: rounded through the cache's element type. */
static float kv_round(hy_dtype_t t, float *row, int n)
{
    uint8_t buf[64 * 4];
    hy_quant_quantize_row(t, row, buf, n);
    hy_quant_traits(t)->to_float(buf, row, n);
    return 0;
}

/* Dense attention in double for query position p of sequence h, head hh. */
static void attn_ref(const seq_hist_t *h, const attn_cfg_t *c, hy_dtype_t t, int p, int hh,
                     double *o)
{
    int g = hh / (A_NH / A_NKV), lo = c->window > 0 ? HY_MAX(0, p - c->window + 1) : 0;
    double s[A_MAXPOS], mx = -INFINITY, sum = 0;
    float kr[64], vr[64];

    for (int j = lo; j <= p; j++) {
        memcpy(kr, h->k[j][g], sizeof kr);
        if (t != HY_DTYPE_F32)
            kv_round(t, kr, c->hd);
        double d = 0;
        for (int i = 0; i < c->hd; i++)
            d += (double)h->q[p][hh][i] * kr[i];
        d *= 1.0 / sqrt(c->hd);
        if (c->softcap > 0)
            d = c->softcap * tanh(d / c->softcap);
        s[j] = d;
        mx = fmax(mx, d);
    }
    for (int i = 0; i < c->hdv; i++)
        o[i] = 0;
    for (int j = lo; j <= p; j++) {
        double e = exp(s[j] - mx);
        sum += e;
        memcpy(vr, h->v[j][g], sizeof vr);
        if (t != HY_DTYPE_F32)
            kv_round(t, vr, c->hdv);
        for (int i = 0; i < c->hdv; i++)
            o[i] += e * vr[i];
    }
    for (int i = 0; i < c->hdv; i++)
        o[i] /= sum;
}

typedef struct {
    int seq;     /* which history */
    int n_past;
    int n;
} run_part_t;

/* Runs one attention call over the given parts (a ragged batch) and writes
 * each token's output into outs[seq][pos]. */
static void attn_run(hy_backend_t *be, const attn_cfg_t *c, seq_hist_t *hs, const run_part_t *parts,
                     int n_parts, float (*outs)[A_MAXPOS][A_NH * 64])
{
    int n_tok = 0;
    for (int i = 0; i < n_parts; i++)
        n_tok += parts[i].n;
    float *q = malloc((size_t)n_tok * A_NH * c->hd * sizeof(float));
    float *k = malloc((size_t)n_tok * A_NKV * c->hd * sizeof(float));
    float *v = malloc((size_t)n_tok * A_NKV * c->hdv * sizeof(float));
    float *out = malloc((size_t)n_tok * A_NH * c->hdv * sizeof(float));
    int32_t *pos = malloc((size_t)n_tok * sizeof(int32_t));
    hy_batch_seq_t seqs[8];
    hy_batch_t b = {n_tok, NULL, pos, n_parts, seqs};
    hy_attn_params_t p = {A_NH, A_NKV, c->hd, c->hdv, 1.0f / sqrtf((float)c->hd), c->window,
                          c->softcap};
    int row = 0;

    for (int i = 0; i < n_parts; i++) {
        const seq_hist_t *h = &hs[parts[i].seq];
        int end = parts[i].n_past + parts[i].n;
        seqs[i] = (hy_batch_seq_t){row, parts[i].n, parts[i].n_past, h->pages,
                                   (end + c->pt - 1) / c->pt, -1, NULL, 0, NULL, 0, 0, 0, NULL,
                                   NULL};
        for (int j = 0; j < parts[i].n; j++, row++) {
            int ps = parts[i].n_past + j;
            pos[row] = ps;
            for (int hh = 0; hh < A_NH; hh++)
                memcpy(q + ((size_t)row * A_NH + hh) * c->hd, h->q[ps][hh], c->hd * sizeof(float));
            for (int g = 0; g < A_NKV; g++) {
                memcpy(k + ((size_t)row * A_NKV + g) * c->hd, h->k[ps][g], c->hd * sizeof(float));
                memcpy(v + ((size_t)row * A_NKV + g) * c->hdv, h->v[ps][g], c->hdv * sizeof(float));
            }
        }
    }
    be->i->attention(be, 0, &b, q, k, v, out, &p);
    row = 0;
    for (int i = 0; i < n_parts; i++)
        for (int j = 0; j < parts[i].n; j++, row++)
            memcpy(outs[parts[i].seq][parts[i].n_past + j], out + (size_t)row * A_NH * c->hdv,
                   A_NH * c->hdv * sizeof(float));
    free(q);
    free(k);
    free(v);
    free(out);
    free(pos);
}

static int kv_setup(hy_backend_t *be, const attn_cfg_t *c)
{
    hy_kv_layout_t lay = {2, A_NKV, c->hd, c->hdv, c->pt, 3 * A_MAXPAGES, c->type, 0, NULL,
                          {0, 0, 0, 0, 0, 0, 0}};
    char err[HY_ERR_LEN];
    int rc = be->i->kv_init(be, &lay, err);
    if (rc != HY_OK)
        printf("# kv_init: %s\n", err);
    return rc;
}

static void test_attention_cfg(hy_backend_t *be1, hy_backend_t *be3, const attn_cfg_t *c)
{
    static seq_hist_t hs[3];
    static float outs[3][3][A_MAXPOS][A_NH * 64]; /* [run kind][seq][pos] */
    const int past[3] = {30, 5, 50}, len[3] = {17, 1, 9};
    int perm[3 * A_MAXPAGES];
    char err[HY_ERR_LEN] = "";
    double worst = 0, inv = 0;

    /* shuffled page ids, disjoint between sequences */
    for (int i = 0; i < 3 * A_MAXPAGES; i++)
        perm[i] = i;
    for (int i = 3 * A_MAXPAGES - 1; i > 0; i--) {
        int j = (int)(rng_u32() % (uint32_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < A_MAXPAGES; i++)
            hs[s].pages[i] = perm[s * A_MAXPAGES + i];
        fill(&hs[s].k[0][0][0], sizeof hs[s].k / sizeof(float), 1.5f);
        fill(&hs[s].v[0][0][0], sizeof hs[s].v / sizeof(float), 1.0f);
        fill(&hs[s].q[0][0][0], sizeof hs[s].q / sizeof(float), 1.5f);
    }
    memset(outs, 0, sizeof outs);

    /* run 0: all three sequences batched, prefill then a ragged step
     * (a long chunk, a decode token, a short chunk); 3 threads */
    if (kv_setup(be3, c) != HY_OK)
        goto fail;
    run_part_t pre[3] = {{0, 0, past[0]}, {1, 0, past[1]}, {2, 0, past[2]}};
    run_part_t step[3] = {{0, past[0], len[0]}, {1, past[1], len[1]}, {2, past[2], len[2]}};
    attn_run(be3, c, hs, pre, 3, outs[0]);
    attn_run(be3, c, hs, step, 3, outs[0]);
    HY_T_OK(be3->i->status(be3, err) == HY_OK, "attention %s pt %d: batched runs ok %s",
            hy_dtype_info(c->type)->name, c->pt, err);

    /* run 1: sequence 0 alone (fresh cache), 1 thread */
    if (kv_setup(be1, c) != HY_OK)
        goto fail;
    attn_run(be1, c, hs, &pre[0], 1, outs[1]);
    attn_run(be1, c, hs, &step[0], 1, outs[1]);

    /* run 2: sequence 0 token by token, 3 threads */
    if (kv_setup(be3, c) != HY_OK)
        goto fail;
    for (int p = 0; p < past[0] + len[0]; p++) {
        run_part_t one = {0, p, 1};
        attn_run(be3, c, hs, &one, 1, outs[2]);
    }

    for (int s = 0; s < 3; s++)
        for (int p = 0; p < past[s] + len[s]; p++)
            for (int hh = 0; hh < A_NH; hh++) {
                double o[64];
                attn_ref(&hs[s], c, c->type, p, hh, o);
                for (int i = 0; i < c->hdv; i++) {
                    double e = fabs(outs[0][s][p][hh * c->hdv + i] - o[i]);
                    if (!(e <= worst))
                        worst = isnan(e) ? INFINITY : e;
                }
            }
    for (int p = 0; p < past[0] + len[0]; p++) {
        size_t row = A_NH * (size_t)c->hdv * sizeof(float);
        inv += memcmp(outs[0][0][p], outs[1][0][p], row) != 0;
        inv += memcmp(outs[0][0][p], outs[2][0][p], row) != 0;
    }
    HY_T_OK(worst < 2e-5, "attention %s hd %d/%d page %d window %d softcap %g: 3 ragged "
            "sequences, GQA 4:1, shuffled pages vs dense double: max err %.2e (tol 2e-5)",
            hy_dtype_info(c->type)->name, c->hd, c->hdv, c->pt, c->window, c->softcap, worst);
    HY_T_OK(inv == 0, "attention %s window %d: batched == alone == token by token, bit for "
            "bit (%.0f rows differ)", hy_dtype_info(c->type)->name, c->window, inv);
    return;
fail:
    HY_T_OK(0, "attention %s: kv_init failed", hy_dtype_info(c->type)->name);
}

static void test_attention_errors(hy_backend_t *be)
{
    attn_cfg_t c = {64, 64, 16, HY_DTYPE_F16, 0, 0};
    hy_kv_layout_t lay = {1, 2, 64, 64, 16, 4, HY_DTYPE_F16, 0, NULL, {0, 0, 0, 0, 0, 0, 0}};
    char err[HY_ERR_LEN];
    float q[A_NH * 64] = {0}, kv[A_NKV * 64] = {0}, out[A_NH * 64];
    int32_t pos = 20, pages[2] = {0, 9};
    hy_batch_seq_t s = {0, 1, 20, pages, 2, -1, NULL, 0, NULL, 0, 0, 0, NULL, NULL};
    hy_batch_t b = {1, NULL, &pos, 1, &s};
    hy_attn_params_t p = {A_NH, A_NKV, 64, 64, 0.125f, 0, 0};

    (void)c;
    lay.page_tokens = 0;
    HY_T_OK(be->i->kv_init(be, &lay, err) == HY_ERANGE, "kv_init: page_tokens 0: %s", err);
    lay.page_tokens = 16;
    lay.type = HY_DTYPE_Q4_0;
    HY_T_OK(be->i->kv_init(be, &lay, err) == HY_EUNSUPPORTED, "kv_init: q4_0: %s", err);
    lay.type = HY_DTYPE_Q8_0;
    lay.head_dim_v = 48;
    HY_T_OK(be->i->kv_init(be, &lay, err) == HY_EINVAL, "kv_init: q8_0 with head 48: %s", err);
    lay.type = HY_DTYPE_F16;
    lay.head_dim_v = 64;
    HY_T_OK(be->i->kv_init(be, &lay, err) == HY_OK, "kv_init f16 ok");
    be->i->attention(be, 0, &b, q, kv, kv, out, &p);
    HY_T_OK(be->i->status(be, err) == HY_ERANGE && strstr(err, "id 9"),
            "attention: page id beyond the pool is reported: %s", err);
    pages[1] = 1;
    pos = 40;
    be->i->attention(be, 0, &b, q, kv, kv, out, &p);
    HY_T_OK(be->i->status(be, err) == HY_ERANGE, "attention: position past the sequence's "
            "pages is reported: %s", err);
    pos = 20;
    be->i->attention(be, 1, &b, q, kv, kv, out, &p);
    HY_T_OK(be->i->status(be, err) == HY_ERANGE, "attention: layer out of range: %s", err);
}

static void test_attention(hy_backend_t *be1, hy_backend_t *be3)
{
    const attn_cfg_t cfgs[] = {
        {64, 64, 16, HY_DTYPE_F32, 0, 0},
        {64, 48, 7, HY_DTYPE_F32, 13, 0},
        {64, 64, 16, HY_DTYPE_F16, 0, 0},
        {64, 64, 16, HY_DTYPE_F16, 21, 0},
        {32, 64, 5, HY_DTYPE_F16, 0, 3.0f},
        {64, 32, 16, HY_DTYPE_Q8_0, 0, 0},
    };
    for (size_t i = 0; i < HY_ARRAY_LEN(cfgs); i++)
        test_attention_cfg(be1, be3, &cfgs[i]);
    /* the lower ISA variants of the kernels, on the softcap case (odd
     * sizes: head 32, page 5) and a windowed one */
    for (int isa = HY_ISA_SCALAR; isa < (int)hy_cpu_isa(); isa++) {
        printf("# attention kernels pinned to %s\n", hy_isa_name((hy_isa_t)isa));
        hy_cpu_attn_set_isa((hy_isa_t)isa);
        test_attention_cfg(be1, be3, &cfgs[4]);
        test_attention_cfg(be1, be3, &cfgs[1]);
    }
    hy_cpu_attn_set_isa(hy_cpu_isa());
    test_attention_errors(be1);
}

int main(void)
{
    hy_backend_t *be1, *be3;

    printf("# cpu isa: %s\n", hy_isa_name(hy_cpu_isa()));
    test_pool();
    be1 = new_backend(1);
    be3 = new_backend(3);
    HY_T_OK(be1 && be3, "cpu backends with 1 and 3 threads");
    if (!be1 || !be3)
        return hy_t_done();
    test_matmul(be1, be3);
    test_get_rows(be3);
    test_rmsnorm(be3);
    test_elementwise(be3);
    test_rope(be3);
    test_rope_rows(be3);
    test_attention(be1, be3);
    be1->i->free(be1);
    be3->i->free(be3);
    return hy_t_done();
}
