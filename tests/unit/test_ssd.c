/*
 * test_ssd.c - the CPU Mamba-2 ops against plain references written here in
 * double precision: the SSD scan token by token (S <- exp(dt A) S + dt x B^T,
 * y = S C + D x, dt = softplus(raw + bias)) versus the op's chunked prefill
 * form (chunk 64, 16 and an odd 5, partial final chunks) and its exact
 * recurrent form (chunk 1); sequences split across steps of 1, 7, 64 and
 * all-at-once (chunks that start mid-sequence), several sequences of
 * different lengths in one batch, every kernel ISA build this CPU runs,
 * the final states; the block form's outputs and slots bitwise equal
 * whatever the steps; the gated grouped RMSNorm; refusal of bad shapes.
 */
#include "backend/backend.h"
#include "backend/cpu/ssd.h"
#include "backend/layout.h"
#include "test.h"

#include <math.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static float rng_f(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

typedef struct {
    int H, P, G, N;
} shape_t;

enum { N_SEQ = 3 };

/* One sequence: packed rows [x (H P) | B (G N) | C (G N) | dt (H) | pad],
 * the way in_proj output is laid out, so every stride is the row length. */
typedef struct {
    int n, stride;
    float *rows;
    double *ref_y, *ref_S; /* [n][H P]; the state [H][P][N] after 0, 1, ..., n tokens */
} seq_t;

typedef struct {
    shape_t sh;
    float *A, *D, *bias; /* [H] */
    hy_weight_t wA, wD, wbias;
} layer_t;

static double softplus_d(double v) { return v > 20.0 ? v : log1p(exp(v)); }

static void seq_make(seq_t *s, const layer_t *L, int n)
{
    const shape_t *sh = &L->sh;
    const int HP = sh->H * sh->P, GN = sh->G * sh->N;

    s->n = n;
    s->stride = HP + 2 * GN + sh->H + 3;
    s->rows = malloc(sizeof(float) * (size_t)n * s->stride);
    for (int t = 0; t < n; t++) {
        float *r = s->rows + (size_t)t * s->stride;
        for (int i = 0; i < s->stride; i++)
            r[i] = rng_f();
        for (int h = 0; h < sh->H; h++)
            r[HP + 2 * GN + h] = 2.0f * r[HP + 2 * GN + h] - 1.5f; /* raw dt in [-3.5, 0.5) */
        if (t == 3)
            r[HP + 2 * GN] = 25.0f; /* softplus' linear branch */
    }
    s->ref_y = calloc((size_t)n * HP, sizeof(double));
    s->ref_S = calloc((size_t)(n + 1) * sh->H * sh->P * sh->N, sizeof(double));
    /* no reference for the invalid shapes the refusal checks use */
    for (int t = 0; t < n && sh->H % sh->G == 0; t++) {
        const float *r = s->rows + (size_t)t * s->stride;
        const size_t sf = (size_t)sh->H * sh->P * sh->N;
        memcpy(s->ref_S + (t + 1) * sf, s->ref_S + t * sf, sizeof(double) * sf);
        for (int h = 0; h < sh->H; h++) {
            const int g = h / (sh->H / sh->G);
            const double dt = softplus_d((double)r[HP + 2 * GN + h] + L->bias[h]);
            const double dA = exp(dt * L->A[h]);
            const float *B = r + HP + g * sh->N, *C = r + HP + GN + g * sh->N;
            for (int p = 0; p < sh->P; p++) {
                double *S = s->ref_S + (t + 1) * sf + ((size_t)h * sh->P + p) * sh->N, y = 0;
                const double x = r[h * sh->P + p];
                for (int k = 0; k < sh->N; k++) {
                    S[k] = S[k] * dA + dt * x * B[k];
                    y += S[k] * C[k];
                }
                s->ref_y[(size_t)t * HP + h * sh->P + p] = y + L->D[h] * x;
            }
        }
    }
}

static void seq_free(seq_t *s)
{
    free(s->rows);
    free(s->ref_y);
    free(s->ref_S);
}

static void weight_vec(hy_weight_t *w, float *data, int n, const char *name)
{
    memset(w, 0, sizeof *w);
    w->type = HY_DTYPE_F32;
    w->ne[0] = 1; /* ssm_a / ssm_d are {1, n_head} in GGUF */
    w->ne[1] = n;
    w->ne[2] = w->ne[3] = 1;
    w->row_bytes = sizeof(float);
    w->data = data;
    w->name = name;
}

static void layer_make(layer_t *L, shape_t sh)
{
    L->sh = sh;
    L->A = malloc(sizeof(float) * sh.H);
    L->D = malloc(sizeof(float) * sh.H);
    L->bias = malloc(sizeof(float) * sh.H);
    for (int h = 0; h < sh.H; h++) {
        L->A[h] = -expf(1.5f * rng_f() - 0.5f); /* decays from ~0.1 to ~2.7 per unit dt */
        L->D[h] = rng_f();
        L->bias[h] = 0.5f * rng_f();
    }
    weight_vec(&L->wA, L->A, sh.H, "ssm_a");
    weight_vec(&L->wD, L->D, sh.H, "ssm_d");
    weight_vec(&L->wbias, L->bias, sh.H, "ssm_dt.bias");
}

static void layer_free(layer_t *L)
{
    free(L->A);
    free(L->D);
    free(L->bias);
}

/* Runs all sequences through the op in steps of at most `step` tokens per
 * sequence (0 = all at once), all sequences together in every step, and
 * returns the worst |y - ref| / max|ref| (outputs and final states: the
 * block form's slot holds the state at the last multiple of the chunk,
 * transposed).  keep (or NULL): each sequence's outputs, in order. */
static double run_schedule(hy_backend_t *be, const layer_t *L, seq_t *seqs, int step,
                           int chunk, int rec_layer, float *keep, char *err)
{
    const shape_t *sh = &L->sh;
    const int HP = sh->H * sh->P, GN = sh->G * sh->N, stride = seqs[0].stride;
    hy_ssd_params_t p = {sh->H, sh->P, sh->G, sh->N, chunk};
    int done[N_SEQ] = {0}, total = 0;
    double worst = 0, scale_y = 1e-30, scale_s = 1e-30;
    float *rows, *y;
    hy_cpu_t *cpu = be->ctx;

    for (int s = 0; s < N_SEQ; s++) {
        total += seqs[s].n;
        be->i->state_clear(be, s);
        for (size_t i = 0; i < (size_t)seqs[s].n * HP; i++)
            scale_y = fmax(scale_y, fabs(seqs[s].ref_y[i]));
        for (size_t i = 0; i < (size_t)(seqs[s].n + 1) * sh->H * sh->P * sh->N; i++)
            scale_s = fmax(scale_s, fabs(seqs[s].ref_S[i]));
    }
    rows = malloc(sizeof(float) * (size_t)total * stride);
    y = malloc(sizeof(float) * (size_t)total * HP);
    for (;;) {
        hy_batch_seq_t bs[N_SEQ];
        hy_batch_t b = {0};
        int nt = 0, ns = 0;

        for (int s = 0; s < N_SEQ; s++) {
            int take = seqs[s].n - done[s];
            if (step > 0 && take > step)
                take = step;
            if (take <= 0)
                continue;
            memcpy(rows + (size_t)nt * stride, seqs[s].rows + (size_t)done[s] * stride,
                   sizeof(float) * (size_t)take * stride);
            bs[ns] = (hy_batch_seq_t){.first = nt, .n = take, .n_past = done[s], .state_slot = s};
            ns++;
            nt += take;
        }
        if (ns == 0)
            break;
        b.n_tokens = nt;
        b.n_seqs = ns;
        b.seqs = bs;
        be->i->ssd(be, rec_layer, &b, rows, stride, rows + HP + 2 * GN, stride, &L->wbias,
                   &L->wA, rows + HP, rows + HP + GN, stride, &L->wD, y, &p);
        if (be->i->status(be, err) != HY_OK) {
            worst = INFINITY;
            break;
        }
        for (int k = 0; k < ns; k++) {
            const int s = bs[k].state_slot;
            for (int t = 0; t < bs[k].n; t++)
                for (int i = 0; i < HP; i++) {
                    double d = fabs(y[(size_t)(bs[k].first + t) * HP + i] -
                                    seqs[s].ref_y[(size_t)(done[s] + t) * HP + i]);
                    worst = fmax(worst, d / scale_y);
                }
            if (keep != NULL) {
                size_t off = 0;
                for (int s2 = 0; s2 < s; s2++)
                    off += (size_t)seqs[s2].n * HP;
                memcpy(keep + off + (size_t)done[s] * HP, y + (size_t)bs[k].first * HP,
                       sizeof(float) * (size_t)bs[k].n * HP);
            }
            done[s] += bs[k].n;
        }
    }
    for (int s = 0; s < N_SEQ && isfinite(worst); s++) {
        const float *S = hy_cpu_state_rec(cpu, s, rec_layer);
        const int at = chunk > 1 ? seqs[s].n / chunk * chunk : seqs[s].n;
        const double *ref = seqs[s].ref_S + (size_t)at * sh->H * sh->P * sh->N;
        for (int h = 0; h < sh->H; h++)
            for (int pp = 0; pp < sh->P; pp++)
                for (int k = 0; k < sh->N; k++) {
                    const size_t e = ((size_t)h * sh->P + pp) * sh->N + k;
                    const size_t c = chunk > 1 ? ((size_t)h * sh->N + k) * sh->P + pp : e;
                    worst = fmax(worst, fabs(S[c] - ref[e]) / scale_s);
                }
    }
    free(rows);
    free(y);
    return worst;
}

static void test_gnorm(hy_backend_t *be)
{
    enum { R = 37, DIM = 96, GS = 24, ZS = 100 };
    static float y[R * DIM], z[R * ZS], w[DIM];
    static double ref[R * DIM];
    hy_weight_t wt = {.type = HY_DTYPE_F32, .ne = {DIM, 1, 1, 1}, .row_bytes = DIM * 4,
                      .data = w, .name = "ssm_norm"};
    char err[HY_ERR_LEN];
    double worst = 0;

    for (int i = 0; i < R * DIM; i++)
        y[i] = 3.0f * rng_f();
    for (int i = 0; i < R * ZS; i++)
        z[i] = 4.0f * rng_f();
    for (int i = 0; i < DIM; i++)
        w[i] = 1.0f + 0.2f * rng_f();
    for (int r = 0; r < R; r++)
        for (int g = 0; g < DIM; g += GS) {
            double ss = 0, v[GS];
            for (int c = 0; c < GS; c++) {
                double zz = z[r * ZS + g + c];
                v[c] = y[r * DIM + g + c] * zz / (1.0 + exp(-zz));
                ss += v[c] * v[c];
            }
            for (int c = 0; c < GS; c++)
                ref[r * DIM + g + c] = v[c] / sqrt(ss / GS + 1e-5) * w[g + c];
        }
    be->i->group_rmsnorm_gated(be, y, z, ZS, &wt, R, DIM, GS, 1e-5f);
    for (int i = 0; i < R * DIM; i++)
        worst = fmax(worst, fabs(y[i] - ref[i]) / (1e-3 + fabs(ref[i])));
    HY_T_OK(be->i->status(be, err) == HY_OK && worst < 1e-5,
            "group_rmsnorm_gated matches y*silu(z) / rms per group * w (rel err %.2g)", worst);
    be->i->group_rmsnorm_gated(be, y, z, ZS, &wt, R, DIM, 25, 1e-5f);
    HY_T_OK(be->i->status(be, err) == HY_EINVAL && strstr(err, "group 25"),
            "group_rmsnorm_gated refuses a group size that does not divide dim (%s)", err);
}

int main(void)
{
    static const shape_t shapes[] = {
        {4, 16, 2, 16},  /* the tiny golden models' geometry */
        {6, 12, 3, 20},  /* sizes off the SIMD width: remainder paths */
        {2, 64, 1, 128}, /* a real model's head: P 64, N 128 */
    };
    static const int lens[N_SEQ] = {100, 37, 5};
    static const int steps[] = {0, 64, 7, 1};
    static const int chunks[] = {64, 16, 5, 1};
    hy_backend_opts_t opts = {.n_threads = 2};
    hy_backend_t *be = NULL;
    char err[HY_ERR_LEN];
    int64_t conv[2], rec[2];
    hy_state_layout_t lay = {2, N_SEQ, conv, rec};

    if (hy_backend_cpu_new(&be, &opts, err) != HY_OK) {
        HY_T_OK(0, "cpu backend: %s", err);
        return hy_t_done();
    }
    for (int isa = 0; isa <= (int)hy_cpu_isa(); isa++) {
        if (hy_cpu_ssd_set_isa(isa) != HY_OK)
            continue;
        for (size_t si = 0; si < HY_ARRAY_LEN(shapes); si++) {
            const shape_t sh = shapes[si];
            layer_t L;
            seq_t seqs[N_SEQ];
            double worst_c = 0, worst_r = 0;
            int n_diff = 0;

            layer_make(&L, sh);
            for (int s = 0; s < N_SEQ; s++)
                seq_make(&seqs[s], &L, lens[s]);
            /* layer 1 of two, so a wrong state offset shows */
            conv[0] = 7;
            rec[0] = 5;
            conv[1] = 0;
            for (size_t c = 0; c < HY_ARRAY_LEN(chunks); c++) {
                const hy_ssd_params_t p = {sh.H, sh.P, sh.G, sh.N, chunks[c]};
                const int total = lens[0] + lens[1] + lens[2];
                float *o0 = malloc(sizeof(float) * (size_t)total * sh.H * sh.P),
                      *o1 = malloc(sizeof(float) * (size_t)total * sh.H * sh.P), *slot0 = NULL;

                rec[1] = hy_ssd_state_floats(&p);
                slot0 = malloc(sizeof(float) * N_SEQ * (size_t)rec[1]);
                if (be->i->state_init(be, &lay, err) != HY_OK) {
                    HY_T_OK(0, "state_init: %s", err);
                    break;
                }
                for (size_t k = 0; k < HY_ARRAY_LEN(steps); k++) {
                    double e = run_schedule(be, &L, seqs, steps[k], chunks[c], 1,
                                            k == 0 ? o0 : o1, err);
                    if (chunks[c] == 1)
                        worst_r = fmax(worst_r, e);
                    else
                        worst_c = fmax(worst_c, e);
                    /* the block form's point: the cut into steps changes no bit */
                    for (int s = 0; s < N_SEQ; s++) {
                        const float *S = hy_cpu_state_rec(be->ctx, s, 1);
                        if (k == 0)
                            memcpy(slot0 + s * rec[1], S, sizeof(float) * (size_t)rec[1]);
                        else if (memcmp(slot0 + s * rec[1], S, sizeof(float) * (size_t)rec[1]))
                            n_diff++;
                    }
                    if (k > 0 && memcmp(o0, o1, sizeof(float) * (size_t)total * sh.H * sh.P))
                        n_diff++;
                }
                free(o0);
                free(o1);
                free(slot0);
            }
            HY_T_OK(worst_c < 2e-5,
                    "isa %d, H %d P %d G %d N %d: chunked form (chunk 64/16/5, steps all/64/7/1, 3 seqs) = reference (rel err %.2g)",
                    isa, sh.H, sh.P, sh.G, sh.N, worst_c);
            HY_T_OK(worst_r < 2e-5,
                    "isa %d, H %d P %d G %d N %d: recurrent form (chunk 1) = reference (rel err %.2g)",
                    isa, sh.H, sh.P, sh.G, sh.N, worst_r);
            HY_T_OK(n_diff == 0,
                    "isa %d, H %d P %d G %d N %d: chunks 64/16/5/1: outputs and slots bitwise equal in steps all/64/7/1 (%d differ)",
                    isa, sh.H, sh.P, sh.G, sh.N, n_diff);
            for (int s = 0; s < N_SEQ; s++)
                seq_free(&seqs[s]);
            layer_free(&L);
        }
    }
    hy_cpu_ssd_set_isa(-1);

    /* bad input: refused with a message, output zeroed, no crash */
    {
        layer_t L;
        seq_t sq[N_SEQ];
        double e;

        layer_make(&L, (shape_t){6, 8, 4, 8}); /* 4 groups do not divide 6 heads */
        for (int s = 0; s < N_SEQ; s++)
            seq_make(&sq[s], &L, 3);
        rec[1] = 6 * 8 * 8;
        be->i->state_init(be, &lay, err);
        e = run_schedule(be, &L, sq, 0, 64, 1, NULL, err);
        HY_T_OK(isinf(e) && strstr(err, "groups"), "ssd refuses n_group not dividing n_head (%s)",
                err);
        for (int s = 0; s < N_SEQ; s++)
            seq_free(&sq[s]);
        layer_free(&L);

        layer_make(&L, (shape_t){4, 8, 2, 8});
        for (int s = 0; s < N_SEQ; s++)
            seq_make(&sq[s], &L, 3);
        e = run_schedule(be, &L, sq, 0, 64, 1, NULL, err); /* slot keeps 6*8*8 floats */
        HY_T_OK(isinf(e) && strstr(err, "state floats"),
                "ssd refuses a state slot of the wrong size (%s)", err);
        e = run_schedule(be, &L, sq, 0, 64, 2, NULL, err);
        HY_T_OK(isinf(e) && strstr(err, "recurrent layer 2"),
                "ssd refuses a recurrent layer index out of range (%s)", err);
        {
            /* the block form places rows by n_past: a negative one is refused */
            const hy_ssd_params_t p = {4, 8, 2, 8, 64};
            hy_batch_seq_t bs = {.first = 0, .n = 3, .n_past = -1, .state_slot = 0};
            hy_batch_t b = {.n_tokens = 3, .n_seqs = 1, .seqs = &bs};
            float y[3 * 4 * 8];
            const float *r = sq[0].rows;
            const int st = sq[0].stride;

            rec[1] = hy_ssd_state_floats(&p);
            be->i->state_init(be, &lay, err);
            memset(y, 0x7f, sizeof y);
            be->i->ssd(be, 1, &b, r, st, r + 32 + 32, st, &L.wbias, &L.wA, r + 32, r + 48, st,
                       &L.wD, y, &p);
            HY_T_OK(be->i->status(be, err) == HY_ERANGE &&
                        strstr(err, "ssd: sequence 0 has n_past -1") && y[0] == 0.0f &&
                        y[3 * 4 * 8 - 1] == 0.0f,
                    "ssd refuses a negative n_past, output zeroed (%s)", err);
        }
        for (int s = 0; s < N_SEQ; s++)
            seq_free(&sq[s]);
        layer_free(&L);
    }
    test_gnorm(be);
    be->i->free(be);
    return hy_t_done();
}
