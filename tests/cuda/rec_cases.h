/*
 * rec_cases.h - the Gated DeltaNet and Mamba-2 SSD cases shared by
 * test_rec_chunk.c (the chunked kernels' code run on the host, every
 * build) and test_cuda_rec.c (the CUDA backend, with a GPU): ragged
 * batches of several sequences of 1, 7, 64, 65, 200 rows in one call, then
 * continuation prefills and decode steps on the same slots, each call's
 * outputs and every slot's state compared with the CPU backend.  A device
 * under test is a small table of hooks taking host arrays, so both tests
 * drive exactly the same inputs through the same sequence of calls.
 * The CPU runs the canonical block form (blocks at absolute positions, the
 * slot holding the state at the block's start and the block's rows,
 * docs/determinism.md); the CUDA kernels still run the older form on the
 * states part of the same slot, so the comparison is within a tolerance
 * and the CPU's state is first carried to the slot's position.
 */
#ifndef HY_TEST_REC_CASES_H
#define HY_TEST_REC_CASES_H

#include "backend/backend.h"
#include "backend/cpu/cpu_impl.h" /* hy_cpu_state_rec: the reference's slots */
#include "backend/layout.h"
#include "common/hy.h"
#include "../unit/test.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#define REC_SLOTS 6

typedef struct rec_dev rec_dev_t;
struct rec_dev {
    const char *name;
    void *ctx;
    /* one recurrent layer (rec_floats per slot, no conv window), all zero */
    int (*init)(rec_dev_t *d, int64_t rec_floats, int32_t n_slots, char *err);
    /* ssd weights for the next ssd calls (n_head floats each; D may be NULL) */
    void (*ssd_weights)(rec_dev_t *d, const float *dt_bias, const float *A, const float *D,
                        int32_t n_head);
    /* q, k, v at qkv + 0 / koff / voff of rows of stride floats (qkv_n floats) */
    void (*gdn)(rec_dev_t *d, const hy_batch_t *b, const float *qkv, size_t qkv_n,
                int32_t koff, int32_t voff, int32_t stride, const float *g, const float *beta,
                float *o, size_t o_n, const hy_gdn_params_t *p);
    /* x at xr + 0 and raw dt at xr + dt_off (rows of x_stride); B at bc + 0,
     * C at bc + c_off (rows of bc_stride) */
    void (*ssd)(rec_dev_t *d, const hy_batch_t *b, const float *xr, size_t xr_n, int32_t dt_off,
                int32_t x_stride, const float *bc, size_t bc_n, int32_t c_off, int32_t bc_stride,
                float *y, size_t y_n, const hy_ssd_params_t *p);
    /* the layer's rec state of a slot, n floats */
    void (*state)(rec_dev_t *d, int32_t slot, float *out, int64_t n);
    int (*status)(rec_dev_t *d, char *err);
};

/* One call: runs of (rows, slot), rows in increasing order as hy_batch_t
 * requires; the slots are a permutation, not the sequence index. */
typedef struct {
    int n_runs;
    int32_t n[6], slot[6];
} rec_call_t;

/* prefill of every length at once (with a decode token mixed in), a
 * continuation prefill mixed with decode tokens, then two decode steps */
static const rec_call_t rec_calls[] = {
    {5, {200, 1, 65, 7, 64}, {3, 0, 1, 5, 2}},
    {5, {1, 1, 3, 64, 2}, {3, 1, 5, 0, 2}},
    {4, {1, 1, 1, 1}, {3, 0, 1, 5}},
    {5, {1, 1, 1, 1, 1}, {2, 3, 5, 0, 1}},
};
#define REC_N_CALLS ((int)(sizeof rec_calls / sizeof rec_calls[0]))

static uint64_t rec_rng = 0x2545F4914F6CDD1Dull;

static float rec_rnd(void)
{
    rec_rng ^= rec_rng << 13;
    rec_rng ^= rec_rng >> 7;
    rec_rng ^= rec_rng << 17;
    return (float)((rec_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* Relative RMS error of a against reference r; INFINITY on any NaN/inf. */
static double rec_err(const float *a, const float *r, size_t n)
{
    double e = 0, s = 0;

    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(r[i]))
            return INFINITY;
        e += ((double)a[i] - r[i]) * ((double)a[i] - r[i]);
        s += (double)r[i] * r[i];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

/* Tokens each slot has taken since its case began: the calls' n_past (the
 * CPU's block form places its blocks by it). */
static int32_t rec_past[REC_SLOTS];

/* The batch of one call into seqs / tok / pos (n_past from rec_past);
 * returns n_tokens. */
static int32_t rec_batch(const rec_call_t *c, hy_batch_seq_t *seqs, int32_t *tok, int32_t *pos,
                         hy_batch_t *b)
{
    int32_t row = 0;

    memset(seqs, 0, sizeof(hy_batch_seq_t) * (size_t)c->n_runs);
    for (int i = 0; i < c->n_runs; i++) {
        seqs[i].first = row;
        seqs[i].n = c->n[i];
        seqs[i].n_past = rec_past[c->slot[i]];
        seqs[i].state_slot = c->slot[i];
        row += c->n[i];
    }
    for (int32_t t = 0; t < row; t++)
        tok[t] = pos[t] = 0;
    b->n_tokens = row;
    b->token = tok;
    b->pos = pos;
    b->n_seqs = c->n_runs;
    b->seqs = seqs;
    return row;
}

/* After a call: each run's slot has taken its rows. */
static void rec_advance(const rec_call_t *c)
{
    for (int i = 0; i < c->n_runs; i++)
        rec_past[c->slot[i]] += c->n[i];
}

/* Worst state error over all slots: the first rec_floats floats of a slot
 * (the states; a device gives them as of the slot's rec_past). */
static double rec_state_err(rec_dev_t *ref, rec_dev_t *dut, int64_t rec_floats)
{
    float *a = malloc(sizeof(float) * (size_t)rec_floats);
    float *r = malloc(sizeof(float) * (size_t)rec_floats);
    double worst = 0;

    for (int32_t s = 0; s < REC_SLOTS; s++) {
        dut->state(dut, s, a, rec_floats);
        ref->state(ref, s, r, rec_floats);
        worst = HY_MAX(worst, rec_err(a, r, (size_t)rec_floats));
    }
    free(a);
    free(r);
    return worst;
}

static bool rec_status(rec_dev_t *d, const char *what)
{
    char err[HY_ERR_LEN];
    int rc = d->status(d, err);

    if (rc != HY_OK)
        printf("# %s on %s: %s\n", what, d->name, err);
    return rc == HY_OK;
}

/* One GDN shape through every call of rec_calls; one TAP line. */
static void rec_gdn_case(rec_dev_t *ref, rec_dev_t *dut, int Hk, int Hv, int dk, int dv,
                         bool v_tiled, int chunk, double tol)
{
    const hy_gdn_params_t p = {Hk, Hv, dk, dv, v_tiled, chunk};
    /* the slot as the CPU's block form sizes it; the states (the part
     * compared) first */
    const int64_t rec_floats = hy_gdn_state_floats(&p), st_floats = (int64_t)Hv * dk * dv;
    const int32_t koff = Hk * dk, voff = 2 * Hk * dk, stride = 2 * Hk * dk + Hv * dv + 3;
    char err[HY_ERR_LEN];
    double w_out = 0, w_st = 0;
    bool ok = ref->init(ref, rec_floats, REC_SLOTS, err) == HY_OK;

    memset(rec_past, 0, sizeof rec_past);

    if (!ok)
        printf("# init %s: %s\n", ref->name, err);
    if (ok && dut->init(dut, rec_floats, REC_SLOTS, err) != HY_OK) {
        printf("# init %s: %s\n", dut->name, err);
        ok = false;
    }
    for (int c = 0; ok && c < REC_N_CALLS; c++) {
        hy_batch_seq_t seqs[6];
        int32_t tok[400], pos[400];
        hy_batch_t b;
        const int32_t n = rec_batch(&rec_calls[c], seqs, tok, pos, &b);
        const size_t nq = (size_t)n * stride, no = (size_t)n * Hv * dv;
        float *qkv = malloc(sizeof(float) * nq), *g = malloc(sizeof(float) * (size_t)n * Hv);
        float *beta = malloc(sizeof(float) * (size_t)n * Hv);
        float *o1 = malloc(sizeof(float) * no), *o2 = malloc(sizeof(float) * no);

        for (size_t i = 0; i < nq; i++)
            qkv[i] = rec_rnd();
        /* q, k L2-normalised per head, q also scaled by 1/sqrt(d_k), as the
         * models hand them to the op */
        for (int32_t t = 0; t < n; t++)
            for (int hh = 0; hh < 2 * Hk; hh++) {
                float *x = qkv + (size_t)t * stride + (size_t)hh * dk;
                double ss = 0;
                for (int i = 0; i < dk; i++)
                    ss += (double)x[i] * x[i];
                const float sc = (float)(1.0 / sqrt(ss + 1e-12)) *
                                 (hh < Hk ? (float)(1.0 / sqrt((double)dk)) : 1.0f);
                for (int i = 0; i < dk; i++)
                    x[i] *= sc;
            }
        for (int32_t i = 0; i < n * Hv; i++) {
            g[i] = -1.2f * fabsf(rec_rnd());     /* log decay in (-1.2, 0] */
            beta[i] = 0.5f + 0.5f * rec_rnd();   /* (0, 1) */
        }
        for (size_t i = 0; i < no; i++)
            o1[i] = o2[i] = NAN; /* every row is some sequence's: all overwritten */
        ref->gdn(ref, &b, qkv, nq, koff, voff, stride, g, beta, o1, no, &p);
        dut->gdn(dut, &b, qkv, nq, koff, voff, stride, g, beta, o2, no, &p);
        ok = rec_status(ref, "gdn") & rec_status(dut, "gdn");
        w_out = HY_MAX(w_out, rec_err(o2, o1, no));
        rec_advance(&rec_calls[c]);
        w_st = HY_MAX(w_st, rec_state_err(ref, dut, st_floats));
        free(qkv);
        free(g);
        free(beta);
        free(o1);
        free(o2);
    }
    HY_T_OK(ok && w_out <= tol && w_st <= tol,
            "gdn %s vs cpu: %d/%d heads, d_k %d, d_v %d%s, chunk %d: outputs rel err %.2e, "
            "states %.2e (limit %.0e)", dut->name, Hk, Hv, dk, dv, v_tiled ? " v_tiled" : "",
            chunk, w_out, w_st, tol);
}

/* One SSD shape through every call of rec_calls; one TAP line. */
static void rec_ssd_case(rec_dev_t *ref, rec_dev_t *dut, int H, int P, int G, int N, bool with_D,
                         int chunk, double tol)
{
    const hy_ssd_params_t p = {H, P, G, N, chunk};
    const int64_t rec_floats = hy_ssd_state_floats(&p), st_floats = (int64_t)H * P * N;
    const int32_t x_stride = H * P + H + 1, bc_stride = 2 * G * N + 1;
    char err[HY_ERR_LEN];
    float *dtb = malloc(sizeof(float) * (size_t)H), *A = malloc(sizeof(float) * (size_t)H);
    float *D = malloc(sizeof(float) * (size_t)H);
    double w_out = 0, w_st = 0;
    bool ok = ref->init(ref, rec_floats, REC_SLOTS, err) == HY_OK;

    memset(rec_past, 0, sizeof rec_past);
    if (!ok)
        printf("# init %s: %s\n", ref->name, err);
    if (ok && dut->init(dut, rec_floats, REC_SLOTS, err) != HY_OK) {
        printf("# init %s: %s\n", dut->name, err);
        ok = false;
    }
    for (int h = 0; h < H; h++) {
        dtb[h] = -1.0f + 0.5f * rec_rnd();
        A[h] = -(0.5f + 4.0f * fabsf(rec_rnd()));  /* -exp(A_log) of real models */
        D[h] = rec_rnd();
    }
    if (ok) {
        ref->ssd_weights(ref, dtb, A, with_D ? D : NULL, H);
        dut->ssd_weights(dut, dtb, A, with_D ? D : NULL, H);
    }
    for (int c = 0; ok && c < REC_N_CALLS; c++) {
        hy_batch_seq_t seqs[6];
        int32_t tok[400], pos[400];
        hy_batch_t b;
        const int32_t n = rec_batch(&rec_calls[c], seqs, tok, pos, &b);
        const size_t nx = (size_t)n * x_stride, nb = (size_t)n * bc_stride, ny = (size_t)n * H * P;
        float *xr = malloc(sizeof(float) * nx), *bc = malloc(sizeof(float) * nb);
        float *y1 = malloc(sizeof(float) * ny), *y2 = malloc(sizeof(float) * ny);

        for (int32_t t = 0; t < n; t++)
            for (int32_t i = 0; i < x_stride; i++)
                /* dt = softplus(raw + bias) in (0.004, 0.47), the range of
                 * trained models.  The recurrence-only case also gets, at
                 * row 50 of each 97, one raw value past softplus's
                 * threshold of 20; not the chunked ones: their
                 * exp(cum_i - cum_k) carries |cum| eps of rounding, and a
                 * jump of cum by -20 |A| alone costs 3e-6 between two
                 * float32 implementations (measured on the host). */
                xr[(size_t)t * x_stride + i] =
                    i < H * P ? rec_rnd()
                    : chunk <= 1 && i == H * P + (t / 97) % H && t % 97 == 50
                        ? 20.25f + 0.25f * rec_rnd()
                        : -2.0f + 2.0f * rec_rnd();
        for (size_t i = 0; i < nb; i++)
            bc[i] = rec_rnd();
        for (size_t i = 0; i < ny; i++)
            y1[i] = y2[i] = NAN;
        ref->ssd(ref, &b, xr, nx, H * P, x_stride, bc, nb, G * N, bc_stride, y1, ny, &p);
        dut->ssd(dut, &b, xr, nx, H * P, x_stride, bc, nb, G * N, bc_stride, y2, ny, &p);
        ok = rec_status(ref, "ssd") & rec_status(dut, "ssd");
        w_out = HY_MAX(w_out, rec_err(y2, y1, ny));
        rec_advance(&rec_calls[c]);
        w_st = HY_MAX(w_st, rec_state_err(ref, dut, st_floats));
        free(xr);
        free(bc);
        free(y1);
        free(y2);
    }
    HY_T_OK(ok && w_out <= tol && w_st <= tol,
            "ssd %s vs cpu: %d heads of %d, %d groups, state %d%s, chunk %d: outputs rel err "
            "%.2e, states %.2e (limit %.0e)", dut->name, H, P, G, N, with_D ? ", D" : "", chunk,
            w_out, w_st, tol);
    free(dtb);
    free(A);
    free(D);
}

/* ---- the CPU backend as the reference device ------------------------------------ */

typedef struct {
    hy_backend_t *be;
    hy_weight_t w[3];     /* dt_bias, A, D */
    float *wdata[3];
    bool has_D;
    /* the last call's op and shape: the block form's slot holds the state
     * at the block's start, which rec_cpu_state carries to rec_past */
    bool last_ssd;
    hy_gdn_params_t gp;
    hy_ssd_params_t sp;
} rec_cpu_t;

static int rec_cpu_init(rec_dev_t *d, int64_t rec_floats, int32_t n_slots, char *err)
{
    rec_cpu_t *c = d->ctx;
    int64_t conv = 0;
    hy_state_layout_t lay = {1, n_slots, &conv, &rec_floats};

    return c->be->i->state_init(c->be, &lay, err);
}

static void rec_cpu_ssd_weights(rec_dev_t *d, const float *dt_bias, const float *A,
                                const float *D, int32_t n_head)
{
    rec_cpu_t *c = d->ctx;
    const float *src[3] = {dt_bias, A, D};
    char err[HY_ERR_LEN];

    c->has_D = D != NULL;
    for (int i = 0; i < 3; i++) {
        free(c->wdata[i]);
        c->wdata[i] = malloc(sizeof(float) * (size_t)n_head);
        memcpy(c->wdata[i], src[i] ? src[i] : dt_bias, sizeof(float) * (size_t)n_head);
        memset(&c->w[i], 0, sizeof c->w[i]);
        c->w[i].type = HY_DTYPE_F32;
        c->w[i].ne[0] = n_head;
        c->w[i].ne[1] = c->w[i].ne[2] = c->w[i].ne[3] = 1;
        c->w[i].row_bytes = sizeof(float) * (size_t)n_head;
        c->w[i].data = c->wdata[i];
        c->w[i].name = i == 0 ? "dt_bias" : i == 1 ? "A" : "D";
        if (c->be->i->weight_init(c->be, &c->w[i], err) != HY_OK)
            printf("# weight_init: %s\n", err);
    }
}

static void rec_cpu_gdn(rec_dev_t *d, const hy_batch_t *b, const float *qkv, size_t qkv_n,
                        int32_t koff, int32_t voff, int32_t stride, const float *g,
                        const float *beta, float *o, size_t o_n, const hy_gdn_params_t *p)
{
    rec_cpu_t *c = d->ctx;

    (void)qkv_n;
    (void)o_n;
    c->last_ssd = false;
    c->gp = *p;
    c->be->i->gdn(c->be, 0, b, qkv, qkv + koff, qkv + voff, stride, g, beta, o, p);
}

static void rec_cpu_ssd(rec_dev_t *d, const hy_batch_t *b, const float *xr, size_t xr_n,
                        int32_t dt_off, int32_t x_stride, const float *bc, size_t bc_n,
                        int32_t c_off, int32_t bc_stride, float *y, size_t y_n,
                        const hy_ssd_params_t *p)
{
    rec_cpu_t *c = d->ctx;

    (void)xr_n;
    (void)bc_n;
    (void)y_n;
    c->last_ssd = true;
    c->sp = *p;
    c->be->i->ssd(c->be, 0, b, xr, x_stride, xr + dt_off, x_stride, &c->w[0], &c->w[1], bc,
                  bc + c_off, bc_stride, c->has_D ? &c->w[2] : NULL, y, p);
}

/* The GDN state at the slot's position from the block form's slot: the
 * block's m rows folded in (in double; the block form itself folds only
 * complete blocks).  out: [H][dk][dv]. */
static void rec_cpu_gdn_state(const hy_gdn_params_t *p, const float *st, int m, float *out)
{
    const int H = p->n_v_heads, dk = p->d_k, dv = p->d_v, C = p->chunk;

    for (int h = 0; h < H; h++) {
        const float *S = st + (size_t)h * dk * dv;
        const float *blk = st + (size_t)H * dk * dv + (size_t)h * C * (dk + dv + 1);
        const float *KT = blk, *D = blk + (size_t)dk * C, *G = D + (size_t)C * dv;
        const double gl = m > 0 ? G[m - 1] : 0.0;

        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++) {
                double v = exp(gl) * S[(size_t)i * dv + j];
                for (int s = 0; s < m; s++)
                    v += exp(gl - G[s]) * KT[(size_t)i * C + s] * D[(size_t)s * dv + j];
                out[((size_t)h * dk + i) * dv + j] = (float)v;
            }
    }
}

/* The same for SSD, out in the recurrent layout [H][P][N] (the block form
 * keeps its state transposed, [H][N][P]). */
static void rec_cpu_ssd_state(const hy_ssd_params_t *p, const float *st, int m, float *out)
{
    const int H = p->n_head, P = p->head_dim, N = p->d_state, Q = p->chunk;

    for (int h = 0; h < H; h++) {
        const float *St = st + (size_t)h * P * N;
        const float *blk = st + (size_t)H * P * N + (size_t)h * Q * (N + P + 2);
        const float *Bt = blk, *X = Bt + (size_t)N * Q, *dtv = X + (size_t)Q * P,
                    *cum = dtv + Q;
        const double last = m > 0 ? cum[m - 1] : 0.0;

        for (int pp = 0; pp < P; pp++)
            for (int k = 0; k < N; k++) {
                double v = exp(last) * St[(size_t)k * P + pp];
                for (int j = 0; j < m; j++)
                    v += exp(last - cum[j]) * dtv[j] * X[(size_t)j * P + pp] * Bt[(size_t)k * Q + j];
                out[((size_t)h * P + pp) * N + k] = (float)v;
            }
    }
}

static void rec_cpu_state(rec_dev_t *d, int32_t slot, float *out, int64_t n)
{
    rec_cpu_t *c = d->ctx;
    const float *st = hy_cpu_state_rec(c->be->ctx, slot, 0);
    const int chunk = c->last_ssd ? c->sp.chunk : c->gp.chunk;

    if (chunk <= 1)
        memcpy(out, st, sizeof(float) * (size_t)n);
    else if (c->last_ssd)
        rec_cpu_ssd_state(&c->sp, st, rec_past[slot] % chunk, out);
    else
        rec_cpu_gdn_state(&c->gp, st, rec_past[slot] % chunk, out);
}

static int rec_cpu_status(rec_dev_t *d, char *err)
{
    rec_cpu_t *c = d->ctx;

    return c->be->i->status(c->be, err);
}

/* The reference device over an existing CPU backend. */
static rec_dev_t rec_cpu_dev(rec_cpu_t *c)
{
    rec_dev_t d = {"cpu", c, rec_cpu_init, rec_cpu_ssd_weights, rec_cpu_gdn, rec_cpu_ssd,
                   rec_cpu_state, rec_cpu_status};
    return d;
}

static void rec_cpu_free(rec_cpu_t *c)
{
    for (int i = 0; i < 3; i++)
        free(c->wdata[i]);
}

#endif
