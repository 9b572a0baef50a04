/*
 * test_gemm.c - the float-weight (F32/F16/BF16) matrix product of many
 * tokens against a double-precision reference: through the backend's matmul
 * at every ISA level this CPU has (AVX-512 takes the packed GEMM of
 * gemm_avx512.c from 9 tokens on, the others the tile kernels), and the
 * GEMM's own entry points with odd shapes, unaligned strides, partial row
 * ranges and its invariance (a token's outputs do not depend on the batch,
 * the row block or the thread count).
 */
#include "backend/backend.h"
#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/gemm_avx512.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_impl.h"
#include "test.h"
#define HY_TEST_SEED 0x2545F4914F6CDD1DULL
#include "cpu_test.h"

#include <math.h>
#include <string.h>

static const hy_dtype_t types[] = {HY_DTYPE_F32, HY_DTYPE_F16, HY_DTYPE_BF16};

/* A weight of n_out rows of k elements of type t, row stride ws bytes
 * (>= the packed row), from random floats; wf gets the exact float values
 * of what was stored. */
static uint8_t *make_weight(hy_dtype_t t, int64_t k, int64_t n_out, size_t ws, float *wf)
{
    uint8_t *w = calloc((size_t)n_out, ws);

    for (int64_t r = 0; w && r < n_out; r++)
        for (int64_t i = 0; i < k; i++) {
            float v = rng_f(1.0f);
            uint8_t *p = w + (size_t)r * ws;
            if (t == HY_DTYPE_F32) {
                memcpy(p + i * 4, &v, 4);
            } else {
                uint16_t h = t == HY_DTYPE_F16 ? hy_f32_to_f16(v) : hy_f32_to_bf16(v);
                memcpy(p + i * 2, &h, 2);
                v = t == HY_DTYPE_F16 ? hy_f16_to_f32(h) : hy_bf16_to_f32(h);
            }
            wf[r * k + i] = v;
        }
    return w;
}

/* ref[t][r] = sum_i wf[r][i] x[t][i] in double, mag = sum |...|. */
static void reference(const float *wf, const float *x, size_t xs, int64_t k, int64_t n_out,
                      int64_t n_tok, double *ref, double *mag)
{
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < n_out; r++) {
            double s = 0, m = 0;
            for (int64_t i = 0; i < k; i++) {
                double p = (double)wf[r * k + i] * x[(size_t)t * xs + i];
                s += p;
                m += fabs(p);
            }
            ref[t * n_out + r] = s;
            mag[t * n_out + r] = m > 0 ? m : 1;
        }
}

/* Worst |got - ref| / mag over n_tok x n_out outputs (NaN: infinity). */
static double worst_err(const float *y, size_t ys, const double *ref, const double *mag,
                        int64_t n_out, int64_t n_tok)
{
    double worst = 0;

    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < n_out; r++) {
            double e = fabs(y[(size_t)t * ys + r] - ref[t * n_out + r]) / mag[t * n_out + r];
            if (!(e <= worst))
                worst = isnan(e) ? INFINITY : e;
        }
    return worst;
}

/* ---- through the backend, every ISA level -------------------------------- */

/* Whether v (w's matrix in HY_WLAYOUT_ROWS16) reads back as w: every row
 * (row: scratch of a row's bytes), the embedding lookup of rows on both
 * sides of a group's edge and the last, and the small-weight floats. */
static int rows16_reads_back(hy_backend_t *be, const hy_weight_t *w, const hy_weight_t *v,
                             uint8_t *row)
{
    const int64_t k = w->ne[0], n_out = w->ne[1];
    const int32_t last = (int32_t)n_out - 1;
    const int32_t ids[6] = {0, 1, 15, HY_MIN(16, last), HY_MIN(17, last), last};
    float *ya = malloc((size_t)6 * (size_t)k * sizeof(float));
    float *yb = malloc((size_t)6 * (size_t)k * sizeof(float));
    float *ta = NULL, *tb = NULL;
    int ok = ya && yb;

    for (int64_t r = 0; ok && r < n_out; r++) {
        hy_weight_row(v, r, row);
        ok = memcmp(row, (const uint8_t *)w->data + (size_t)r * w->row_bytes, w->row_bytes) == 0;
    }
    if (ok) {
        be->i->get_rows(be, w, ids, ya, 6);
        be->i->get_rows(be, v, ids, yb, 6);
        ok = memcmp(ya, yb, (size_t)6 * (size_t)k * sizeof(float)) == 0;
    }
    const float *fa = hy_cpu_weight_floats(be->ctx, "t", w, k * n_out, &ta);
    const float *fb = hy_cpu_weight_floats(be->ctx, "t", v, k * n_out, &tb);
    ok = ok && fa && fb && memcmp(fa, fb, (size_t)(k * n_out) * sizeof(float)) == 0;
    free(ta);
    free(tb);
    free(ya);
    free(yb);
    return ok;
}

static void test_matmul_levels(hy_backend_t *be1, hy_backend_t *be3)
{
    /* (k, n_out): k not a multiple of 16, n_out not of 32, one of each
     * below the micro-kernel's sizes, one over the GEMM's k block (384) and
     * row block (256) */
    static const int64_t shapes[][2] = {{37, 45}, {16, 1}, {1, 33}, {515, 300}, {200, 64},
                                        {37, 48}, {515, 304}};
    static const int ntoks[] = {1, 2, 5, 8, 9, 11, 12, 13, 23, 24, 25, 37, 64, 70};
    enum { MAX_TOK = 70 };

    for (int isa = HY_ISA_SCALAR; isa <= HY_ISA_AVX512; isa++) {
        if (hy_quant_set_isa((hy_isa_t)isa) != HY_OK) {
            printf("# matmul at %s: not on this CPU, skipped\n", hy_isa_name((hy_isa_t)isa));
            continue;
        }
        for (size_t ti = 0; ti < HY_ARRAY_LEN(types); ti++) {
            hy_dtype_t t = types[ti];
            double worst = 0;
            int same = 1, ran = 1, dot_same = 1, r16_same = 1, r16_rows = 1, n_r16 = 0;
            for (size_t si = 0; si < HY_ARRAY_LEN(shapes) && ran; si++) {
                int64_t k = shapes[si][0], n_out = shapes[si][1];
                size_t rb = hy_dtype_row_bytes(t, k);
                float *wf = malloc((size_t)(k * n_out) * sizeof(float));
                float *x = malloc((size_t)(MAX_TOK * k) * sizeof(float));
                float *y1 = malloc((size_t)(MAX_TOK * n_out) * sizeof(float));
                float *y3 = malloc((size_t)(MAX_TOK * n_out) * sizeof(float));
                double *ref = malloc((size_t)(MAX_TOK * n_out) * sizeof(double));
                double *mag = malloc((size_t)(MAX_TOK * n_out) * sizeof(double));
                uint8_t *wd = wf ? make_weight(t, k, n_out, rb, wf) : NULL;
                uint8_t *w16 = NULL, *row = malloc(rb);
                hy_weight_t w = {0}, v = {0};
                char err[HY_ERR_LEN];
                if (!wf || !x || !y1 || !y3 || !ref || !mag || !wd || !row) {
                    ran = 0;
                    goto next;
                }
                for (int64_t i = 0; i < MAX_TOK * k; i++)
                    x[i] = rng_f(2.0f);
                reference(wf, x, (size_t)k, k, n_out, MAX_TOK, ref, mag);
                w.type = t;
                w.ne[0] = k;
                w.ne[1] = n_out;
                w.ne[2] = w.ne[3] = 1;
                w.row_bytes = rb;
                w.data = wd;
                w.name = "gemm.weight";
                /* the same matrix in 16-row groups where its rows allow: at
                 * AVX-512 the GEMM's lanes-are-rows kernel, below it the
                 * tiles over gathered rows */
                if (n_out % 16 == 0 && k >= 16) {
                    if ((w16 = malloc((size_t)n_out * rb)) != NULL)
                        memcpy(w16, wd, (size_t)n_out * rb);
                    if (!w16 || hy_weight_to_rows16(w16, t, n_out, rb) != HY_OK) {
                        ran = 0;
                        goto next;
                    }
                    v = w;
                    v.data = w16;
                    v.layout = HY_WLAYOUT_ROWS16;
                    n_r16++;
                    r16_rows = rows16_reads_back(be3, &w, &v, row);
                }
                for (size_t ni = 0; ni < HY_ARRAY_LEN(ntoks); ni++) {
                    int nt = ntoks[ni];
                    memset(y1, 0xff, (size_t)(MAX_TOK * n_out) * sizeof(float)); /* NaN */
                    memset(y3, 0xff, (size_t)(MAX_TOK * n_out) * sizeof(float));
                    be1->i->matmul(be1, &w, x, y1, nt);
                    be3->i->matmul(be3, &w, x, y3, nt);
                    double e1 = worst_err(y1, (size_t)n_out, ref, mag, n_out, nt);
                    double e3 = worst_err(y3, (size_t)n_out, ref, mag, n_out, nt);
                    worst = HY_MAX(worst, HY_MAX(e1, e3));
                    same = same && memcmp(y1, y3, (size_t)(nt * n_out) * sizeof(float)) == 0;
                    if (w16) {
                        be3->i->matmul(be3, &v, x, y3, nt);
                        r16_same = r16_same &&
                                   memcmp(y1, y3, (size_t)(nt * n_out) * sizeof(float)) == 0;
                        be1->i->matmul(be1, &v, x, y3, nt);
                        r16_same = r16_same &&
                                   memcmp(y1, y3, (size_t)(nt * n_out) * sizeof(float)) == 0;
                    }
                    /* every level: each output is vec_dot's bits, whatever
                     * n_tok (AVX-512: the GEMM, also for one token) */
                    for (int tk = 0; tk < nt; tk++)
                        for (int64_t r = 0; r < n_out; r++) {
                            float d;
                            hy_quant_traits(t)->vec_dot(k, &d, wd + (size_t)r * rb,
                                                        x + (size_t)tk * k);
                            dot_same = dot_same && memcmp(&d, &y1[tk * n_out + r], 4) == 0;
                        }
                }
                if (be1->i->status(be1, err) != HY_OK || be3->i->status(be3, err) != HY_OK) {
                    printf("# %s\n", err);
                    ran = 0;
                }
            next:
                free(w16);
                free(row);
                free(wf);
                free(x);
                free(y1);
                free(y3);
                free(ref);
                free(mag);
                free(wd);
            }
            HY_T_OK(ran && worst <= 1e-5 && same && dot_same,
                    "matmul %s at %s, 7 shapes x n_tok 1..70: err vs double %.2e (tol 1e-5), "
                    "1 and 3 threads %s, == vec_dot bit for bit %s", hy_dtype_info(t)->name,
                    hy_isa_name((hy_isa_t)isa), worst, same ? "identical" : "DIFFER",
                    dot_same ? "yes" : "NO");
            HY_T_OK(ran && n_r16 == 3 && r16_same && r16_rows,
                    "matmul %s at %s, %d shapes in 16-row groups: rows, get_rows and weight floats "
                    "read back %s, the "
                    "file's layout's bits at 1 and 3 threads %s", hy_dtype_info(t)->name,
                    hy_isa_name((hy_isa_t)isa), n_r16, r16_rows ? "exactly" : "WRONG",
                    r16_same ? "yes" : "NO");
        }
    }
    hy_quant_set_isa(hy_cpu_isa());
}

/* ---- the GEMM's own entry points (AVX-512 CPUs) --------------------------- */

#if HY_BUILD_AVX512
/* One type: every n_tok 1..70 over an odd shape with unaligned strides, a
 * row range inside the matrix (the rows outside it, and the padding of y's
 * rows, must stay untouched), and the invariance of each token's outputs. */
static void test_gemm_direct_type(hy_dtype_t t)
{
    enum { K = 403, N_OUT = 291, MAX_TOK = 70, XS = K + 3, YS = N_OUT + 5 };
    const int64_t r0 = 7, r1 = r0 + HY_GEMM_A5_MC - 3; /* one full block, ragged */
    const size_t ws = hy_dtype_row_bytes(t, K) + 6;     /* rows 2 bytes off alignment */
    float *wf = malloc((size_t)K * N_OUT * sizeof(float));
    float *xbuf = malloc(((size_t)MAX_TOK * XS + 1) * sizeof(float));
    float *ybuf = malloc(((size_t)MAX_TOK * YS + 1) * sizeof(float));
    float *yall = malloc((size_t)MAX_TOK * YS * sizeof(float));
    float *xp = NULL, *wp = NULL;
    double *ref = malloc((size_t)MAX_TOK * N_OUT * sizeof(double));
    double *mag = malloc((size_t)MAX_TOK * N_OUT * sizeof(double));
    uint8_t *wbuf = NULL;
    double worst = 0;
    int untouched = 1, invariant = 1, ok = 0;

    if (!wf || !xbuf || !ybuf || !yall || !ref || !mag)
        goto out;
    wbuf = malloc((size_t)N_OUT * ws + 1);
    xp = aligned_alloc(64, (hy_gemm_a5_xpack_floats(K, MAX_TOK) * sizeof(float) + 63) & ~63u);
    wp = aligned_alloc(64, (hy_gemm_a5_wpack_floats(K) * sizeof(float) + 63) & ~63u);
    if (!wbuf || !xp || !wp)
        goto out;
    /* weights and x start one element off alignment inside their buffers */
    uint8_t *wd = make_weight(t, K, N_OUT, ws, wf);
    if (!wd)
        goto out;
    memcpy(wbuf + 1, wd, (size_t)N_OUT * ws);
    free(wd);
    float *x = xbuf + 1, *y = ybuf + 1;
    for (size_t i = 0; i < (size_t)MAX_TOK * XS; i++)
        x[i] = rng_f(2.0f);
    reference(wf, x, XS, K, N_OUT, MAX_TOK, ref, mag);

    for (int nt = 1; nt <= MAX_TOK; nt++) {
        memset(ybuf, 0xff, ((size_t)MAX_TOK * YS + 1) * sizeof(float));
        hy_gemm_a5_pack_x(x, XS, K, nt, 0, (nt + HY_GEMM_A5_NR - 1) / HY_GEMM_A5_NR, xp);
        hy_gemm_a5_rows(t, false, wbuf + 1, ws, K, r0, r1, xp, nt, y, YS, wp);
        /* the ref's columns r0..r1-1 */
        for (int64_t tk = 0; tk < nt; tk++)
            for (int64_t r = r0; r < r1; r++) {
                double e = fabs(y[tk * YS + r] - ref[tk * N_OUT + r]) / mag[tk * N_OUT + r];
                if (!(e <= worst))
                    worst = isnan(e) ? INFINITY : e;
            }
        /* all-ones bytes are a NaN no result can have bit for bit */
        uint32_t bits;
        memcpy(&bits, &ybuf[0], 4);
        untouched = untouched && bits == 0xffffffffu;
        for (int64_t tk = 0; tk < MAX_TOK; tk++)
            for (int64_t r = 0; r < YS; r++) {
                if (tk < nt && r >= r0 && r < r1)
                    continue;
                memcpy(&bits, &y[tk * YS + r], 4);
                untouched = untouched && bits == 0xffffffffu;
            }
        if (nt == MAX_TOK)
            memcpy(yall, y, (size_t)MAX_TOK * YS * sizeof(float));
    }
    /* The same outputs from other blocks: the rows in two pieces split off
     * the micro-kernel's grid, and the tokens from 57 on packed as their
     * own batch (the last call above left nt == MAX_TOK in y). */
    memset(ybuf, 0xff, ((size_t)MAX_TOK * YS + 1) * sizeof(float));
    hy_gemm_a5_rows(t, false, wbuf + 1, ws, K, r0, r0 + 45, xp, MAX_TOK, y, YS, wp);
    hy_gemm_a5_rows(t, false, wbuf + 1, ws, K, r0 + 45, r1, xp, MAX_TOK, y, YS, wp);
    for (int64_t tk = 0; tk < MAX_TOK; tk++)
        invariant = invariant && memcmp(y + tk * YS + r0, yall + tk * YS + r0,
                                        (size_t)(r1 - r0) * sizeof(float)) == 0;
    hy_gemm_a5_pack_x(x + 57 * XS, XS, K, MAX_TOK - 57, 0, 2, xp);
    hy_gemm_a5_rows(t, false, wbuf + 1, ws, K, r0, r1, xp, MAX_TOK - 57, y, YS, wp);
    for (int64_t tk = 57; tk < MAX_TOK; tk++)
        invariant = invariant && memcmp(y + (tk - 57) * YS + r0, yall + tk * YS + r0,
                                        (size_t)(r1 - r0) * sizeof(float)) == 0;
    ok = 1;
out:
    HY_T_OK(ok && worst <= 1e-5 && untouched,
            "gemm %s %dx%d rows %lld..%lld, strides +3/+5 floats, rows 2 bytes off, "
            "n_tok 1..70: err vs double %.2e (tol 1e-5), outside untouched %s",
            hy_dtype_info(t)->name, K, N_OUT, (long long)r0, (long long)r1, worst,
            untouched ? "yes" : "NO");
    HY_T_OK(ok && invariant, "gemm %s: split row blocks and a separate 13-token batch give "
            "the same bits", hy_dtype_info(t)->name);
    free(wf);
    free(xbuf);
    free(ybuf);
    free(yall);
    free(ref);
    free(mag);
    free(wbuf);
    free(xp);
    free(wp);
}

/* HY_WLAYOUT_ROWS16 through the entry point: every n_tok 1..70 (the
 * lanes-are-rows kernel up to 12, packed panels above) gives the file's
 * layout's bits, over a full row block and over one that ends half way
 * through a 32-row panel. */
static void test_gemm_direct_rows16(hy_dtype_t t)
{
    enum { K = 403, N_OUT = 304, MAX_TOK = 70, YS = N_OUT + 5 };
    static const int64_t blocks[][2] = {{32, 32 + HY_GEMM_A5_MC}, {16, 64}};
    const size_t rb = hy_dtype_row_bytes(t, K);
    float *wf = malloc((size_t)K * N_OUT * sizeof(float));
    float *x = malloc((size_t)MAX_TOK * K * sizeof(float));
    float *ya = malloc((size_t)MAX_TOK * YS * sizeof(float));
    float *yb = malloc((size_t)MAX_TOK * YS * sizeof(float));
    float *xp = aligned_alloc(64, (hy_gemm_a5_xpack_floats(K, MAX_TOK) * sizeof(float) + 63) & ~63u);
    float *wp = aligned_alloc(64, (hy_gemm_a5_wpack_floats(K) * sizeof(float) + 63) & ~63u);
    uint8_t *wd = wf ? make_weight(t, K, N_OUT, rb, wf) : NULL;
    uint8_t *w16 = malloc((size_t)N_OUT * rb);
    int same = 1, ok = 0;

    if (!x || !ya || !yb || !xp || !wp || !wd || !w16)
        goto out;
    memcpy(w16, wd, (size_t)N_OUT * rb);
    if (hy_weight_to_rows16(w16, t, N_OUT, rb) != HY_OK)
        goto out;
    for (size_t i = 0; i < (size_t)MAX_TOK * K; i++)
        x[i] = rng_f(2.0f);
    for (int nt = 1; nt <= MAX_TOK; nt++) {
        hy_gemm_a5_pack_x(x, K, K, nt, 0, (nt + HY_GEMM_A5_NR - 1) / HY_GEMM_A5_NR, xp);
        for (size_t bi = 0; bi < HY_ARRAY_LEN(blocks); bi++) {
            int64_t r0 = blocks[bi][0], r1 = blocks[bi][1];
            memset(ya, 0xff, (size_t)MAX_TOK * YS * sizeof(float));
            memset(yb, 0xff, (size_t)MAX_TOK * YS * sizeof(float));
            hy_gemm_a5_rows(t, false, wd, rb, K, r0, r1, xp, nt, ya, YS, wp);
            hy_gemm_a5_rows(t, true, w16, rb, K, r0, r1, xp, nt, yb, YS, wp);
            /* the untouched NaN padding compares equal as bytes too */
            same = same && memcmp(ya, yb, (size_t)MAX_TOK * YS * sizeof(float)) == 0;
        }
    }
    ok = 1;
out:
    HY_T_OK(ok && same, "gemm %s in 16-row groups, %dx%d, rows 32..288 and 16..64, n_tok "
            "1..70: the file's layout's bits %s", hy_dtype_info(t)->name, K, N_OUT,
            same ? "yes" : "NO");
    free(wf);
    free(x);
    free(ya);
    free(yb);
    free(xp);
    free(wp);
    free(wd);
    free(w16);
}
#endif

/* The quantized types in 16-row groups (backend.h): at every level and 1
 * and 3 threads,
 * every n_tok (AVX-512: its own tile, straight from the blocks up to 8
 * tokens, through a panel above; below: rows gathered back) gives the
 * file's layout's bits, and rows, get_rows and the weight's floats read
 * back exactly.  Random codes and scales, rows of 2 to 20 blocks. */
static void test_quant_rows16(hy_backend_t *be1, hy_backend_t *be3, hy_dtype_t t)
{
    /* rows of 2, 20 and 3 blocks (super-blocks: 1, 5 and 3) */
    static const int64_t shapes32[][2] = {{64, 16}, {640, 48}, {96, 304}};
    static const int64_t shapes256[][2] = {{256, 16}, {1280, 48}, {768, 304}};
    const int64_t(*shapes)[2] = hy_dtype_info(t)->block == 256 ? shapes256 : shapes32;
    static const int ntoks[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 37, 70};
    enum { MAX_TOK = 70 };
    const char *tn = hy_dtype_info(t)->name;
    const size_t bsz = hy_dtype_info(t)->block_bytes;
    /* where the block's f16 fields are (d first; Q4_1's and Q5_1's m, the
     * K-quants' dmin) */
    size_t f16[2] = {0, 2};
    const int nf16 = t == HY_DTYPE_Q4_1 || t == HY_DTYPE_Q5_1 || t == HY_DTYPE_Q4_K ||
                             t == HY_DTYPE_Q5_K || t == HY_DTYPE_Q2_K
                         ? 2
                         : 1;
    if (t == HY_DTYPE_Q6_K)
        f16[0] = offsetof(hy_block_q6_k_t, d);
    else if (t == HY_DTYPE_Q3_K)
        f16[0] = offsetof(hy_block_q3_k_t, d);
    else if (t == HY_DTYPE_Q2_K)
        f16[0] = offsetof(hy_block_q2_k_t, d), f16[1] = offsetof(hy_block_q2_k_t, dmin);

    for (int isa = HY_ISA_SCALAR; isa <= HY_ISA_AVX512; isa++) {
        int ran = 1, same = 1, rows = 1, asked = 0;
        if (hy_quant_set_isa((hy_isa_t)isa) != HY_OK)
            continue;
        for (size_t si = 0; si < HY_ARRAY_LEN(shapes32) && ran; si++) {
            const int64_t k = shapes[si][0], n_out = shapes[si][1];
            const size_t rb = hy_dtype_row_bytes(t, k);
            uint8_t *wd = malloc((size_t)n_out * rb), *w16 = malloc((size_t)n_out * rb);
            uint8_t *row = malloc(rb);
            float *x = malloc((size_t)MAX_TOK * (size_t)k * sizeof(float));
            float *ya = malloc((size_t)MAX_TOK * (size_t)n_out * sizeof(float));
            float *yb = malloc((size_t)MAX_TOK * (size_t)n_out * sizeof(float));
            char err[HY_ERR_LEN];
            if (!wd || !w16 || !row || !x || !ya || !yb) {
                ran = 0;
                goto next;
            }
            for (size_t i = 0; i < (size_t)n_out * rb; i++)
                wd[i] = (uint8_t)rng_u32();
            /* every block's f16 scales finite, of either sign */
            for (size_t b = 0; b < (size_t)n_out * rb / bsz; b++)
                for (int f = 0; f < nf16; f++) {
                    uint16_t h = hy_f32_to_f16(rng_f(0.02f));
                    memcpy(wd + b * bsz + f16[f], &h, 2);
                }
            for (size_t i = 0; i < (size_t)MAX_TOK * (size_t)k; i++)
                x[i] = rng_f(2.0f);
            memcpy(w16, wd, (size_t)n_out * rb);
            hy_weight_t w = {.type = t, .ne = {k, n_out, 1, 1}, .row_bytes = rb, .data = wd,
                             .name = "quant.weight"};
            hy_weight_t v = w;
            v.data = w16;
            v.layout = HY_WLAYOUT_ROWS16;
            asked += be3->i->weight_rows16(be3, &w);
            if (hy_weight_to_rows16(w16, t, n_out, rb) != HY_OK) {
                ran = 0;
                goto next;
            }
            rows = rows && rows16_reads_back(be3, &w, &v, row);
            for (size_t ni = 0; ni < HY_ARRAY_LEN(ntoks); ni++) {
                const int nt = ntoks[ni];
                const size_t ny = (size_t)nt * (size_t)n_out * sizeof(float);
                memset(ya, 0xff, ny);
                be1->i->matmul(be1, &w, x, ya, nt);
                hy_backend_t *bes[2] = {be1, be3};
                for (int bi = 0; bi < 2; bi++) {
                    memset(yb, 0xff, ny);
                    bes[bi]->i->matmul(bes[bi], &v, x, yb, nt);
                    same = same && memcmp(ya, yb, ny) == 0;
                }
            }
            if (be1->i->status(be1, err) != HY_OK || be3->i->status(be3, err) != HY_OK) {
                printf("# %s\n", err);
                ran = 0;
            }
        next:
            free(wd);
            free(w16);
            free(row);
            free(x);
            free(ya);
            free(yb);
        }
        HY_T_OK(ran && same && rows,
                "matmul %s at %s in 16-row groups, 3 shapes x n_tok 1..70: the file's "
                "layout's bits at 1 and 3 threads %s, rows, get_rows and weight floats read back "
                "%s", tn, hy_isa_name((hy_isa_t)isa), same ? "yes" : "NO",
                rows ? "exactly" : "WRONG");
        /* the backend asks for the layout where it has the tile */
        HY_T_OK(asked == (hy_quant_vec_dot_tile_rows16(t) ? 3 : 0),
                "%s at %s: the backend asks for 16-row groups for %d of 3 matrices (its tile: "
                "%s)", tn, hy_isa_name((hy_isa_t)isa), asked,
                hy_quant_vec_dot_tile_rows16(t) ? "yes" : "none");
    }
    hy_quant_set_isa(hy_cpu_isa());
}

/* A weight marked ROWS16 that the layout cannot describe (rows not a
 * multiple of 16) is refused by name: the matmul
 * records the error and leaves zeros, never reads groups that are not
 * there. */
static void test_layout_refused(hy_backend_t *be)
{
    static const struct {
        hy_dtype_t t;
        int64_t n_out;
        const char *want;
    } cases[] = {
        {HY_DTYPE_F16, 45, "weight bad.layout: layout 1 does not fit type f16 with 45 rows"},
        {HY_DTYPE_Q8_0, 40, "weight bad.layout: layout 1 does not fit type q8_0 with 40 rows"},
    };
    const int64_t k = 64;

    for (size_t i = 0; i < HY_ARRAY_LEN(cases); i++) {
        size_t rb = hy_dtype_row_bytes(cases[i].t, k);
        uint8_t *wd = calloc((size_t)cases[i].n_out, rb);
        float x[64] = {0}, *y = malloc((size_t)cases[i].n_out * sizeof(float));
        hy_weight_t w = {.type = cases[i].t, .ne = {k, cases[i].n_out, 1, 1}, .row_bytes = rb,
                         .data = wd, .name = "bad.layout", .layout = HY_WLAYOUT_ROWS16};
        char err[HY_ERR_LEN] = "";
        int rc = HY_OK, zero = 1;

        if (wd && y) {
            memset(y, 0xff, (size_t)cases[i].n_out * sizeof(float));
            be->i->matmul(be, &w, x, y, 1);
            rc = be->i->status(be, err);
            for (int64_t r = 0; r < cases[i].n_out; r++)
                zero = zero && y[r] == 0.0f;
        }
        HY_T_OK(rc != HY_OK && strstr(err, cases[i].want) != NULL && zero,
                "a %s weight of %lld rows marked ROWS16 is refused (%s), output zeroed %s",
                hy_dtype_info(cases[i].t)->name, (long long)cases[i].n_out, err,
                zero ? "yes" : "NO");
        free(wd);
        free(y);
    }
}

/* The loader asks only for types the layout describes (every weight type
 * with CPU kernels); another one (Q8_1, an activation type) is refused by
 * the rearrangement itself, its bytes left as they were. */
static void test_rows16_refused(void)
{
    const size_t rb = hy_dtype_row_bytes(HY_DTYPE_Q8_1, 64);
    uint8_t *wd = malloc(16 * rb), *keep = malloc(16 * rb);
    int rc = HY_OK, same = 0;

    if (wd && keep) {
        for (size_t i = 0; i < 16 * rb; i++)
            wd[i] = keep[i] = (uint8_t)rng_u32();
        rc = hy_weight_to_rows16(wd, HY_DTYPE_Q8_1, 16, rb);
        same = memcmp(wd, keep, 16 * rb) == 0;
    }
    HY_T_OK(rc == HY_EINVAL && same && !hy_weight_rows16_type(HY_DTYPE_Q8_1) &&
                hy_weight_rows16_type(HY_DTYPE_Q4_1),
            "16-row groups of q8_1 refused (rc %d), its bytes untouched %s", rc,
            same ? "yes" : "NO");
    free(wd);
    free(keep);
}

int main(void)
{
    hy_backend_t *be1 = NULL, *be3 = NULL;
    hy_backend_opts_t o1 = {.n_threads = 1}, o3 = {.n_threads = 3};
    char err[HY_ERR_LEN];

    if (hy_backend_cpu_new(&be1, &o1, err) != HY_OK ||
        hy_backend_cpu_new(&be3, &o3, err) != HY_OK) {
        HY_T_OK(0, "cpu backend: %s", err);
        return hy_t_done();
    }
    test_matmul_levels(be1, be3);
    {
        static const hy_dtype_t qt[] = {HY_DTYPE_Q8_0, HY_DTYPE_Q4_0, HY_DTYPE_Q4_1, HY_DTYPE_IQ4_NL,
                                        HY_DTYPE_Q5_0, HY_DTYPE_Q5_1, HY_DTYPE_Q4_K,
                                        HY_DTYPE_Q5_K, HY_DTYPE_Q6_K, HY_DTYPE_Q2_K,
                                        HY_DTYPE_Q3_K, HY_DTYPE_IQ4_XS};
        for (size_t i = 0; i < HY_ARRAY_LEN(qt); i++)
            test_quant_rows16(be1, be3, qt[i]);
    }
    test_layout_refused(be3);
    test_rows16_refused();
#if HY_BUILD_AVX512
    if (hy_cpu_isa() >= HY_ISA_AVX512) {
        for (size_t ti = 0; ti < HY_ARRAY_LEN(types); ti++)
            test_gemm_direct_type(types[ti]);
        for (size_t ti = 0; ti < HY_ARRAY_LEN(types); ti++)
            test_gemm_direct_rows16(types[ti]);
    } else {
        printf("# gemm entry points: no AVX-512 on this CPU, skipped\n");
    }
#endif
    be1->i->free(be1);
    be3->i->free(be3);
    return hy_t_done();
}
