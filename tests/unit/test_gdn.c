/*
 * test_gdn.c - the CPU Gated DeltaNet op against a plain token-by-token
 * recurrence in double precision written here: the chunked prefill form
 * (chunk 64 and 16, partial final chunks) and the exact recurrent form
 * (chunk 1), for interleaved and tiled v-head mapping and d_k != d_v, with
 * sequences split across steps of 1, 7, 64 and all-at-once, several
 * sequences of different lengths in one batch, every kernel ISA build this
 * CPU runs, and refusal of inconsistent shapes.
 */
#include "backend/backend.h"
#include "backend/cpu/gdn.h"
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
    int Hk, Hv, dk, dv;
    bool tiled;
} shape_t;

enum { N_SEQ = 3 };

/* Inputs of one sequence: packed rows [q (Hk dk) | k (Hk dk) | v (Hv dv) | pad]. */
typedef struct {
    int n;
    int stride;
    float *qkv, *g, *beta;
    double *ref_o, *ref_S; /* reference output [n][Hv dv]; states at 0, 16, 32, ..., then n */
} seq_t;

/* The reference keeps the state at every multiple of this (a divisor of
 * every chunk tested): a slot in the block form holds the state at the
 * last multiple of its chunk. */
enum { REF_EVERY = 16 };

static void seq_make(seq_t *s, const shape_t *sh, int n, float gscale)
{
    const int kd = sh->Hk * sh->dk;

    s->n = n;
    s->stride = 2 * kd + sh->Hv * sh->dv + 3;
    s->qkv = malloc(sizeof(float) * (size_t)n * s->stride);
    s->g = malloc(sizeof(float) * (size_t)n * sh->Hv);
    s->beta = malloc(sizeof(float) * (size_t)n * sh->Hv);
    for (int t = 0; t < n; t++) {
        float *row = s->qkv + (size_t)t * s->stride;
        for (int i = 0; i < s->stride; i++)
            row[i] = rng_f();
        /* q, k L2-normalised per head, q scaled by 1/sqrt(d_k), as the model does */
        for (int h = 0; h < 2 * sh->Hk; h++) {
            float *x = row + h * sh->dk;
            double ss = 0;
            for (int i = 0; i < sh->dk; i++)
                ss += (double)x[i] * x[i];
            for (int i = 0; i < sh->dk; i++)
                x[i] = (float)(x[i] / sqrt(ss) * (h < sh->Hk ? 1.0 / sqrt(sh->dk) : 1.0));
        }
        for (int h = 0; h < sh->Hv; h++) {
            s->g[t * sh->Hv + h] = gscale * (0.5f + 0.5f * rng_f()); /* in [gscale, 0] */
            s->beta[t * sh->Hv + h] = 0.5f + 0.49f * rng_f();
        }
    }
    /* reference */
    s->ref_o = calloc((size_t)n * sh->Hv * sh->dv, sizeof(double));
    s->ref_S = calloc((size_t)(n / REF_EVERY + 2) * sh->Hv * sh->dk * sh->dv, sizeof(double));
    for (int h = 0; h < sh->Hv; h++) {
        const int kh = sh->tiled ? h % sh->Hk : h / (sh->Hv / sh->Hk);
        const size_t sf = (size_t)sh->Hv * sh->dk * sh->dv;
        double S[64 * 64] = {0}, u[256];
        for (int t = 0; t < n; t++) {
            const float *row = s->qkv + (size_t)t * s->stride;
            const float *q = row + kh * sh->dk, *k = row + kd + kh * sh->dk,
                        *v = row + 2 * kd + h * sh->dv;
            const double a = exp((double)s->g[t * sh->Hv + h]), b = s->beta[t * sh->Hv + h];
            for (int j = 0; j < sh->dv; j++) {
                u[j] = 0;
                for (int i = 0; i < sh->dk; i++) {
                    S[i * sh->dv + j] *= a;
                    u[j] += S[i * sh->dv + j] * k[i];
                }
                u[j] = b * (v[j] - u[j]);
            }
            for (int j = 0; j < sh->dv; j++) {
                double o = 0;
                for (int i = 0; i < sh->dk; i++) {
                    S[i * sh->dv + j] += k[i] * u[j];
                    o += S[i * sh->dv + j] * q[i];
                }
                s->ref_o[((size_t)t * sh->Hv + h) * sh->dv + j] = o;
            }
            if ((t + 1) % REF_EVERY == 0)
                memcpy(s->ref_S + (size_t)(t + 1) / REF_EVERY * sf + (size_t)h * sh->dk * sh->dv,
                       S, sizeof(double) * (size_t)sh->dk * sh->dv);
        }
        memcpy(s->ref_S + (size_t)(n / REF_EVERY + 1) * sf + (size_t)h * sh->dk * sh->dv, S,
               sizeof(double) * (size_t)sh->dk * sh->dv);
    }
}

static void seq_free(seq_t *s)
{
    free(s->qkv);
    free(s->g);
    free(s->beta);
    free(s->ref_o);
    free(s->ref_S);
}

typedef struct {
    double err2, ref2, s_err2, s_ref2;
    int failed;
    /* the first step pattern's outputs and slots, and how many later
     * patterns' outputs or slots differ from them in any bit */
    float *o0[N_SEQ], *slot0[N_SEQ];
    int n_diff;
} acc_t;

/* Keeps the first pattern's outputs and slot, or counts a difference from it. */
static void keep_or_compare(acc_t *acc, int s, const float *o, size_t no, const float *slot,
                            size_t ns)
{
    if (acc->o0[s] == NULL) {
        acc->o0[s] = malloc(sizeof(float) * no);
        acc->slot0[s] = malloc(sizeof(float) * ns);
        memcpy(acc->o0[s], o, sizeof(float) * no);
        memcpy(acc->slot0[s], slot, sizeof(float) * ns);
    } else if (memcmp(acc->o0[s], o, sizeof(float) * no) != 0 ||
               memcmp(acc->slot0[s], slot, sizeof(float) * ns) != 0) {
        acc->n_diff++;
    }
}

static void acc_free(acc_t *acc)
{
    for (int s = 0; s < N_SEQ; s++) {
        free(acc->o0[s]);
        free(acc->slot0[s]);
    }
}

/* Runs n_seq sequences through the op in steps (sequence s gives up to
 * step[s] tokens per batch, all sharing the batch), then compares outputs
 * and final states with the reference. */
static void run_case(hy_backend_t *be, const shape_t *sh, seq_t *sq, int n_seq,
                     const int *step, int chunk, acc_t *acc)
{
    const int kd = sh->Hk * sh->dk, O = sh->Hv * sh->dv, stride = sq[0].stride;
    hy_gdn_params_t p = {sh->Hk, sh->Hv, sh->dk, sh->dv, sh->tiled, chunk};
    int64_t rec_floats = hy_gdn_state_floats(&p), conv_floats = 0;
    const size_t sf = (size_t)sh->Hv * sh->dk * sh->dv;
    hy_state_layout_t lay = {1, N_SEQ, &conv_floats, &rec_floats};
    int done[N_SEQ] = {0}, total = 0;
    float *out[N_SEQ];
    char err[HY_ERR_LEN];

    for (int s = 0; s < n_seq; s++)
        total += sq[s].n;
    float *bx = malloc(sizeof(float) * (size_t)total * stride);
    float *bg = malloc(sizeof(float) * (size_t)total * sh->Hv);
    float *bb = malloc(sizeof(float) * (size_t)total * sh->Hv);
    float *bo = malloc(sizeof(float) * (size_t)total * O);
    if (be->i->state_init(be, &lay, err) != HY_OK) {
        printf("# state_init: %s\n", err);
        acc->failed = 1;
        return;
    }
    for (int s = 0; s < n_seq; s++) {
        out[s] = malloc(sizeof(float) * (size_t)sq[s].n * O);
        be->i->state_clear(be, N_SEQ - 1 - s); /* slots in reverse: not the row order */
    }
    for (;;) {
        hy_batch_seq_t seqs[N_SEQ];
        hy_batch_t b = {0, NULL, NULL, 0, seqs};
        int row = 0;

        for (int s = 0; s < n_seq; s++) {
            int n = HY_MIN(step[s], sq[s].n - done[s]);
            if (n <= 0)
                continue;
            memcpy(bx + (size_t)row * stride, sq[s].qkv + (size_t)done[s] * stride,
                   sizeof(float) * (size_t)n * stride);
            memcpy(bg + (size_t)row * sh->Hv, sq[s].g + (size_t)done[s] * sh->Hv,
                   sizeof(float) * (size_t)n * sh->Hv);
            memcpy(bb + (size_t)row * sh->Hv, sq[s].beta + (size_t)done[s] * sh->Hv,
                   sizeof(float) * (size_t)n * sh->Hv);
            seqs[b.n_seqs] = (hy_batch_seq_t){row, n, done[s], NULL, 0, N_SEQ - 1 - s, NULL, 0,
                                              NULL, 0, 0, 0, NULL, NULL};
            b.n_seqs++;
            row += n;
        }
        if (b.n_seqs == 0)
            break;
        b.n_tokens = row;
        be->i->gdn(be, 0, &b, bx, bx + kd, bx + 2 * kd, stride, bg, bb, bo, &p);
        if (be->i->status(be, err) != HY_OK) {
            printf("# gdn: %s\n", err);
            acc->failed = 1;
            break;
        }
        for (int i = 0; i < b.n_seqs; i++) {
            int s = N_SEQ - 1 - seqs[i].state_slot;
            memcpy(out[s] + (size_t)done[s] * O, bo + (size_t)seqs[i].first * O,
                   sizeof(float) * (size_t)seqs[i].n * O);
            done[s] += seqs[i].n;
        }
    }
    for (int s = 0; s < n_seq; s++) {
        hy_cpu_t *cpu = be->ctx;
        const float *S = hy_cpu_state_rec(cpu, N_SEQ - 1 - s, 0);
        for (size_t e = 0; e < (size_t)sq[s].n * O; e++) {
            double d = out[s][e] - sq[s].ref_o[e];
            acc->err2 += d * d;
            acc->ref2 += sq[s].ref_o[e] * sq[s].ref_o[e];
        }
        /* the block form's slot holds the state at the last multiple of the chunk */
        const double *ref =
            sq[s].ref_S + (chunk > 1 ? (size_t)(sq[s].n / chunk * chunk) / REF_EVERY
                                     : (size_t)sq[s].n / REF_EVERY + 1) * sf;
        if (chunk > 1 && sq[s].n / chunk * chunk % REF_EVERY != 0)
            acc->failed = 1;
        for (size_t e = 0; e < sf; e++) {
            double d = S[e] - ref[e];
            acc->s_err2 += d * d;
            acc->s_ref2 += ref[e] * ref[e];
        }
        keep_or_compare(acc, s, out[s], (size_t)sq[s].n * O, S, (size_t)rec_floats);
        free(out[s]);
    }
    free(bx);
    free(bg);
    free(bb);
    free(bo);
}

static double rel(double e2, double r2)
{
    return r2 > 0 && e2 == e2 ? sqrt(e2 / r2) : INFINITY;
}

static void check_shape(hy_backend_t *be, const shape_t *sh, float gscale)
{
    static const int lens[N_SEQ] = {150, 1, 37};
    static const int steps[][N_SEQ] = {
        {1000, 1000, 1000}, {64, 64, 64}, {7, 7, 7}, {1, 1, 1}, {100, 1, 5},
    };
    seq_t sq[N_SEQ];
    acc_t chunked = {0}, chunk16 = {0}, recur = {0};

    for (int s = 0; s < N_SEQ; s++)
        seq_make(&sq[s], sh, lens[s], gscale);
    for (size_t c = 0; c < HY_ARRAY_LEN(steps); c++) {
        run_case(be, sh, sq, N_SEQ, steps[c], 64, &chunked);
        run_case(be, sh, sq, N_SEQ, steps[c], 16, &chunk16);
        run_case(be, sh, sq, N_SEQ, steps[c], 1, &recur);
    }
    HY_T_OK(!chunked.failed && rel(chunked.err2, chunked.ref2) < 2e-5 &&
                rel(chunked.s_err2, chunked.s_ref2) < 2e-5,
            "Hk %d Hv %d dk %d dv %d %s g>=%.1f: chunk 64, steps all/64/7/1/mixed: output rel err %.1e, state %.1e",
            sh->Hk, sh->Hv, sh->dk, sh->dv, sh->tiled ? "tiled" : "interleaved", gscale,
            rel(chunked.err2, chunked.ref2), rel(chunked.s_err2, chunked.s_ref2));
    HY_T_OK(!chunk16.failed && rel(chunk16.err2, chunk16.ref2) < 2e-5 &&
                rel(chunk16.s_err2, chunk16.s_ref2) < 2e-5,
            "  same with chunk 16: output %.1e, state %.1e", rel(chunk16.err2, chunk16.ref2),
            rel(chunk16.s_err2, chunk16.s_ref2));
    HY_T_OK(!recur.failed && rel(recur.err2, recur.ref2) < 2e-5 &&
                rel(recur.s_err2, recur.s_ref2) < 2e-5,
            "  same with chunk 1 (recurrent form): output %.1e, state %.1e",
            rel(recur.err2, recur.ref2), rel(recur.s_err2, recur.s_ref2));
    /* the block form's point: the cut into steps changes no bit */
    HY_T_OK(chunked.n_diff == 0 && chunk16.n_diff == 0 && recur.n_diff == 0,
            "  chunks 64 / 16 / 1: outputs and slots bitwise equal in every step pattern (%d, %d, %d differ)",
            chunked.n_diff, chunk16.n_diff, recur.n_diff);
    acc_free(&chunked);
    acc_free(&chunk16);
    acc_free(&recur);
    for (int s = 0; s < N_SEQ; s++)
        seq_free(&sq[s]);
}

int main(void)
{
    static const shape_t shapes[] = {
        {2, 4, 16, 16, false}, {2, 4, 16, 16, true}, {1, 3, 8, 24, false},
        {3, 6, 32, 20, true}, {2, 2, 64, 64, false},
    };
    hy_backend_opts_t o = {.n_threads = 3};
    hy_backend_t *be = NULL;
    char err[HY_ERR_LEN];

    if (hy_backend_cpu_new(&be, &o, err) != HY_OK) {
        HY_T_OK(0, "backend: %s", err);
        return hy_t_done();
    }
    for (int isa = 0; isa <= 2; isa++) {
        if (hy_cpu_gdn_set_isa(isa) != HY_OK) {
            printf("ok %d - kernel build %d # SKIP this CPU lacks it\n", ++hy_t_count, isa);
            continue;
        }
        printf("# kernel build %s\n", isa == 0 ? "generic" : isa == 1 ? "avx2" : "avx512");
        for (size_t i = 0; i < HY_ARRAY_LEN(shapes); i++)
            check_shape(be, &shapes[i], i == 2 ? -3.0f : -0.3f);
    }
    hy_cpu_gdn_set_isa(-1);

    /* inconsistent shapes are refused with a message, output zeroed */
    {
        int64_t rec_floats = hy_gdn_state_floats(&(hy_gdn_params_t){1, 3, 8, 8, false, 64}),
                conv_floats = 0;
        hy_state_layout_t lay = {1, 1, &conv_floats, &rec_floats};
        hy_batch_seq_t sq = {0, 2, 0, NULL, 0, 0, NULL, 0, NULL, 0, 0, 0, NULL, NULL};
        hy_batch_t b = {2, NULL, NULL, 1, &sq};
        float x[2 * 64] = {0}, g[6] = {0}, beta[6] = {0}, out[2 * 24];
        hy_gdn_params_t bad = {2, 3, 8, 8, false, 64}, wrong_state = {1, 2, 8, 8, false, 64};
        int rc;

        be->i->state_init(be, &lay, err);
        memset(out, 0x7f, sizeof out);
        be->i->gdn(be, 0, &b, x, x, x, 64, g, beta, out, &bad);
        rc = be->i->status(be, err);
        HY_T_OK(rc != HY_OK && strstr(err, "multiple") != NULL && out[0] == 0.0f,
                "3 v-heads over 2 k-heads refused (%s)", err);
        be->i->gdn(be, 0, &b, x, x, x, 64, g, beta, out, &wrong_state);
        rc = be->i->status(be, err);
        HY_T_OK(rc != HY_OK && strstr(err, "state floats") != NULL,
                "state size mismatch refused (%s)", err);
        sq.state_slot = 5;
        be->i->gdn(be, 0, &b, x, x, x, 64, g, beta, out, &(hy_gdn_params_t){1, 3, 8, 8, false, 64});
        rc = be->i->status(be, err);
        HY_T_OK(rc != HY_OK && strstr(err, "slot") != NULL, "bad slot refused (%s)", err);
        /* the block form places rows by n_past: a negative one is refused */
        sq.state_slot = 0;
        sq.n_past = -3;
        memset(out, 0x7f, sizeof out);
        be->i->gdn(be, 0, &b, x, x, x, 64, g, beta, out, &(hy_gdn_params_t){1, 3, 8, 8, false, 64});
        rc = be->i->status(be, err);
        HY_T_OK(rc == HY_ERANGE && strstr(err, "gdn: sequence 0 has n_past -3") != NULL &&
                    out[0] == 0.0f && out[2 * 24 - 1] == 0.0f,
                "negative n_past refused, output zeroed (%s)", err);
    }
    be->i->free(be);
    return hy_t_done();
}
