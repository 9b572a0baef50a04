/*
 * test_lightning.c - the CPU lightning-attention op (backend/lightning.h)
 * against the plain recurrence S <- lambda S + k v^T, o = S^T q computed
 * here in double precision, for the exact recurrent form (chunk 1) and the
 * position-aligned blocked form (chunks 16, 5 and 64), head sizes that
 * leave AVX2 tails (12, 40) and MiniMax's 128, odd lengths, state carried
 * across steps, several sequences in one batch, and a decay of exactly 1.
 * Then what the blocked form promises bit for bit: a sequence's outputs and
 * slot are the same whole, in steps of 1, 7, 16 or 64, beside other
 * sequences, on 1 or 2 threads, and from the generic or the AVX2 build;
 * a slot copied mid-block (a prefix-cache checkpoint) continues exactly as
 * the original.  Last, the op's refusals, each with its exact message.
 */
#include "backend/cpu/lightning.h"
#include "test.h"

#define HY_TEST_SEED 0x5DEECE66DULL
#include "cpu_test.h"

#include <math.h>
#include <string.h>

enum { N_SEQ = 3, MAX_H = 4 };

typedef struct {
    int H, d;
} shape_t;

/* One sequence's rows: per head [q | k | v] (head stride 3d), then 5 floats
 * of padding, so row and head strides differ from the dense ones. */
typedef struct {
    int n, hs, stride;
    float *x;
    double *ref_o; /* [n][H d] */
    double *ref_S; /* [H][d][d] after the last row */
} seq_t;

static float slopes[MAX_H];
static float table[MAX_H * (HY_LIGHTNING_MAX_CHUNK + 1)];
static hy_weight_t decay_w;

/* Slopes in MiniMax's range, the last head with no decay at all, and the
 * decay table of chunk for them (the op's decay weight). */
static void set_slopes(int H, int chunk)
{
    for (int h = 0; h < H; h++)
        slopes[h] = h == H - 1 ? 0.0f : 0.6f * powf(0.25f, (float)h);
    hy_lightning_decays(slopes, H, chunk, table);
    memset(&decay_w, 0, sizeof decay_w);
    decay_w.type = HY_DTYPE_F32;
    decay_w.ne[0] = chunk + 1;
    decay_w.ne[1] = H;
    decay_w.ne[2] = decay_w.ne[3] = 1;
    decay_w.row_bytes = sizeof(float) * (size_t)(chunk + 1);
    decay_w.data = table;
    decay_w.name = "test-decay";
}

static void seq_make(seq_t *s, const shape_t *sh, int n)
{
    const int d = sh->d;

    s->n = n;
    s->hs = 3 * d;
    s->stride = sh->H * s->hs + 5;
    s->x = malloc(sizeof(float) * (size_t)n * s->stride);
    fill(s->x, (size_t)n * s->stride, 1.0f);
    s->ref_o = calloc((size_t)n * sh->H * d, sizeof(double));
    s->ref_S = calloc((size_t)sh->H * d * d, sizeof(double));
    for (int h = 0; h < sh->H; h++) {
        const double lam = exp(-(double)slopes[h]);
        double *S = s->ref_S + (size_t)h * d * d;
        for (int t = 0; t < n; t++) {
            const float *q = s->x + (size_t)t * s->stride + h * s->hs, *k = q + d, *v = q + 2 * d;
            for (int i = 0; i < d; i++)
                for (int j = 0; j < d; j++)
                    S[i * d + j] = lam * S[i * d + j] + (double)k[i] * v[j];
            for (int j = 0; j < d; j++) {
                double o = 0;
                for (int i = 0; i < d; i++)
                    o += S[i * d + j] * q[i];
                s->ref_o[((size_t)t * sh->H + h) * d + j] = o;
            }
        }
    }
}

static void seq_free(seq_t *s)
{
    free(s->x);
    free(s->ref_o);
    free(s->ref_S);
}

/* A run's results: each sequence's outputs and its whole slot. */
typedef struct {
    float *out[N_SEQ];
    float *slot[N_SEQ];
    int64_t slot_floats;
    int failed;
} run_t;

static void run_free(run_t *r)
{
    for (int s = 0; s < N_SEQ; s++) {
        free(r->out[s]);
        free(r->slot[s]);
    }
    memset(r, 0, sizeof *r);
}

/* Feeds the sequences through the op in steps (sequence s gives up to
 * step[s] rows per batch, all sharing the batch; slots in reverse order). */
static void run(hy_backend_t *be, const shape_t *sh, const seq_t *sq, const int *step,
                int chunk, run_t *r)
{
    const hy_lightning_params_t p = {sh->H, sh->d, chunk};
    const int O = sh->H * sh->d, stride = sq[0].stride;
    int64_t rec = hy_lightning_state_floats(&p), conv = 0;
    hy_state_layout_t lay = {1, N_SEQ, &conv, &rec};
    int done[N_SEQ] = {0}, total = 0;
    char err[HY_ERR_LEN];
    float *bx, *bo;

    memset(r, 0, sizeof *r);
    set_slopes(sh->H, chunk);
    for (int s = 0; s < N_SEQ; s++)
        total += sq[s].n;
    bx = malloc(sizeof(float) * (size_t)total * stride);
    bo = malloc(sizeof(float) * (size_t)total * O);
    if (be->i->state_init(be, &lay, err) != HY_OK) {
        printf("# state_init: %s\n", err);
        r->failed = 1;
        goto out;
    }
    for (int s = 0; s < N_SEQ; s++) {
        r->out[s] = malloc(sizeof(float) * (size_t)sq[s].n * O);
        be->i->state_clear(be, N_SEQ - 1 - s);
    }
    for (;;) {
        hy_batch_seq_t seqs[N_SEQ];
        hy_batch_t b = {0, NULL, NULL, 0, seqs};
        int row = 0;

        for (int s = 0; s < N_SEQ; s++) {
            int n = HY_MIN(step[s], sq[s].n - done[s]);
            if (n <= 0)
                continue;
            memcpy(bx + (size_t)row * stride, sq[s].x + (size_t)done[s] * stride,
                   sizeof(float) * (size_t)n * stride);
            seqs[b.n_seqs++] = (hy_batch_seq_t){row, n, done[s], NULL, 0, N_SEQ - 1 - s, NULL, 0,
                                                NULL, 0, 0, 0, NULL, NULL};
            row += n;
        }
        if (b.n_seqs == 0)
            break;
        b.n_tokens = row;
        be->i->lightning(be, 0, &b, bx, bx + sh->d, bx + 2 * sh->d, stride, sq[0].hs, &decay_w,
                         bo, &p);
        if (be->i->status(be, err) != HY_OK) {
            printf("# lightning: %s\n", err);
            r->failed = 1;
            break;
        }
        for (int i = 0; i < b.n_seqs; i++) {
            int s = N_SEQ - 1 - seqs[i].state_slot;
            memcpy(r->out[s] + (size_t)done[s] * O, bo + (size_t)seqs[i].first * O,
                   sizeof(float) * (size_t)seqs[i].n * O);
            done[s] += seqs[i].n;
        }
    }
    r->slot_floats = rec;
    for (int s = 0; s < N_SEQ; s++) {
        r->slot[s] = malloc(sizeof(float) * (size_t)rec);
        memcpy(r->slot[s], hy_cpu_state_rec(be->ctx, N_SEQ - 1 - s, 0),
               sizeof(float) * (size_t)rec);
    }
out:
    free(bx);
    free(bo);
}

/* The state a slot stands for after n rows: S itself (chunk 1), or the
 * block-start S decayed over the m = n % C pending rows plus their k v^T. */
static void effective_state(const float *slot, const shape_t *sh, int chunk, int n, int h,
                            double *S)
{
    const int d = sh->d, C = chunk, m = C > 1 ? n % C : 0;
    const float *base = slot + (size_t)h * (size_t)hy_lightning_head_floats(d, C);
    const float *KT = base + (size_t)d * d, *V = KT + (size_t)d * C;
    const double lam = exp(-(double)slopes[h]);

    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) {
            double x = base[i * d + j] * pow(lam, m);
            for (int r = 0; r < m; r++)
                x += pow(lam, m - 1 - r) * (double)KT[(size_t)i * C + r] * V[(size_t)r * d + j];
            S[i * d + j] = x;
        }
}

static double rel(double e2, double r2)
{
    return r2 > 0 && e2 == e2 ? sqrt(e2 / r2) : INFINITY;
}

/* Relative RMS errors of a run's outputs and states against the reference. */
static void accuracy(const run_t *r, const shape_t *sh, const seq_t *sq, int chunk,
                     double *out_rel, double *st_rel)
{
    double oe = 0, orf = 0, se = 0, sr = 0;
    double *S = malloc(sizeof(double) * (size_t)sh->d * sh->d);

    for (int s = 0; s < N_SEQ; s++) {
        for (size_t e = 0; e < (size_t)sq[s].n * sh->H * sh->d; e++) {
            double dlt = r->out[s][e] - sq[s].ref_o[e];
            oe += dlt * dlt;
            orf += sq[s].ref_o[e] * sq[s].ref_o[e];
        }
        for (int h = 0; h < sh->H; h++) {
            const double *ref = sq[s].ref_S + (size_t)h * sh->d * sh->d;
            effective_state(r->slot[s], sh, chunk, sq[s].n, h, S);
            for (int e = 0; e < sh->d * sh->d; e++) {
                se += (S[e] - ref[e]) * (S[e] - ref[e]);
                sr += ref[e] * ref[e];
            }
        }
    }
    free(S);
    *out_rel = rel(oe, orf);
    *st_rel = rel(se, sr);
}

static bool same_bits(const run_t *a, const run_t *b, const seq_t *sq, const shape_t *sh)
{
    if (a->failed || b->failed || a->slot_floats != b->slot_floats)
        return false;
    for (int s = 0; s < N_SEQ; s++)
        if (memcmp(a->out[s], b->out[s], sizeof(float) * (size_t)sq[s].n * sh->H * sh->d) != 0 ||
            memcmp(a->slot[s], b->slot[s], sizeof(float) * (size_t)a->slot_floats) != 0)
            return false;
    return true;
}

static const int steps[][N_SEQ] = {
    {1000, 1000, 1000}, {64, 64, 64}, {16, 16, 16}, {7, 7, 7}, {1, 1, 1}, {100, 1, 5},
};
static const int lens[N_SEQ] = {150, 1, 37};

/* One (shape, chunk): the generic build on 2 threads against double at
 * every step pattern, each pattern bit for bit the whole-sequence run;
 * then the AVX2 build (generic where the CPU lacks it) on 1 thread, the
 * same bits again at every pattern. */
static void check_shape(hy_backend_t *be1, hy_backend_t *be2, const shape_t *sh, int chunk,
                        bool avx2)
{
    seq_t sq[N_SEQ];
    run_t whole, r;
    double worst_o = 0, worst_s = 0, o, st;
    bool exact = true, other = true;
    int len[N_SEQ];

    for (int s = 0; s < N_SEQ; s++)
        len[s] = sh->d >= 128 ? (lens[s] + 2) / 3 : lens[s]; /* d 128: 50, 1, 13 rows */
    set_slopes(sh->H, chunk);
    for (int s = 0; s < N_SEQ; s++)
        seq_make(&sq[s], sh, len[s]);
    hy_cpu_lightning_set_isa(HY_ISA_SCALAR);
    run(be2, sh, sq, steps[0], chunk, &whole);
    for (size_t c = 0; c < HY_ARRAY_LEN(steps); c++) {
        run(be2, sh, sq, steps[c], chunk, &r);
        accuracy(&r, sh, sq, chunk, &o, &st);
        worst_o = r.failed ? INFINITY : HY_MAX(worst_o, o);
        worst_s = r.failed ? INFINITY : HY_MAX(worst_s, st);
        exact = exact && same_bits(&whole, &r, sq, sh);
        run_free(&r);
    }
    HY_T_OK(!whole.failed && worst_o < 1e-5 && worst_s < 1e-5,
            "H %d d %d chunk %d: lengths %d/%d/%d in steps all/64/16/7/1/mixed vs double: "
            "output rel err %.1e, state %.1e", sh->H, sh->d, chunk, len[0], len[1], len[2],
            worst_o, worst_s);
    HY_T_OK(exact, "  every step pattern gives the whole run's outputs and slots bit for bit");
    hy_cpu_lightning_set_isa(avx2 ? HY_ISA_AVX2 : HY_ISA_SCALAR);
    for (size_t c = 0; c < HY_ARRAY_LEN(steps); c++) {
        run(be1, sh, sq, steps[c], chunk, &r);
        other = other && same_bits(&whole, &r, sq, sh);
        run_free(&r);
    }
    HY_T_OK(other, "  the %s build on 1 thread: the same bits at every step pattern",
            avx2 ? "AVX2" : "generic (no AVX2 here)");
    hy_cpu_lightning_set_isa(-1);
    run_free(&whole);
    for (int s = 0; s < N_SEQ; s++)
        seq_free(&sq[s]);
}

/* A slot copied in the middle of a block (37 rows: 5 pending at chunk 16)
 * continues like the original: outputs and slots bit for bit. */
static void check_checkpoint(hy_backend_t *be)
{
    const shape_t sh = {4, 16};
    const hy_lightning_params_t p = {4, 16, 16};
    int64_t rec = hy_lightning_state_floats(&p), conv = 0;
    hy_state_layout_t lay = {1, 2, &conv, &rec};
    const int O = sh.H * sh.d;
    seq_t sq;
    float *o[2];
    char err[HY_ERR_LEN];
    bool ok = true;

    set_slopes(sh.H, p.chunk);
    seq_make(&sq, &sh, 57);
    o[0] = malloc(sizeof(float) * 57 * O);
    o[1] = malloc(sizeof(float) * 57 * O);
    ok = be->i->state_init(be, &lay, err) == HY_OK;
    be->i->state_clear(be, 0);
    {
        hy_batch_seq_t s0 = {0, 37, 0, NULL, 0, 0, NULL, 0, NULL, 0, 0, 0, NULL, NULL};
        hy_batch_t b = {37, NULL, NULL, 1, &s0};
        be->i->lightning(be, 0, &b, sq.x, sq.x + 16, sq.x + 32, sq.stride, sq.hs, &decay_w, o[0],
                         &p);
    }
    be->i->state_copy(be, 1, 0);
    for (int k = 0; k < 2; k++) {
        hy_batch_seq_t s1 = {0, 20, 37, NULL, 0, k, NULL, 0, NULL, 0, 0, 0, NULL, NULL};
        hy_batch_t b = {20, NULL, NULL, 1, &s1};
        const float *x = sq.x + (size_t)37 * sq.stride;
        be->i->lightning(be, 0, &b, x, x + 16, x + 32, sq.stride, sq.hs, &decay_w, o[k], &p);
    }
    ok = ok && be->i->status(be, err) == HY_OK;
    HY_T_OK(ok && memcmp(o[0], o[1], sizeof(float) * 20 * O) == 0 &&
                memcmp(hy_cpu_state_rec(be->ctx, 0, 0), hy_cpu_state_rec(be->ctx, 1, 0),
                       sizeof(float) * (size_t)rec) == 0,
            "checkpoint: a slot copied at row 37 (5 rows into a block of 16) continues bit for bit");
    free(o[0]);
    free(o[1]);
    seq_free(&sq);
}

/* One refused call: the status message and a zeroed output. */
static void expect_refused(hy_backend_t *be, hy_lightning_params_t p, int32_t row_stride,
                           int32_t head_stride, const hy_weight_t *sw, int32_t n_past,
                           int64_t slot_rec, const char *want)
{
    int64_t conv = 0;
    hy_state_layout_t lay = {1, 1, &conv, &slot_rec};
    hy_batch_seq_t s0 = {0, 2, n_past, NULL, 0, 0, NULL, 0, NULL, 0, 0, 0, NULL, NULL};
    hy_batch_t b = {2, NULL, NULL, 1, &s0};
    float x[2 * 200], o[2 * 4 * 257]; /* the zeroed output: 2 rows of p's heads */
    const int n_o = 2 * HY_MAX(p.n_head, 0) * HY_MAX(p.head_dim, 0);
    char err[HY_ERR_LEN] = "";
    bool zero = true;
    int rc;

    fill(x, HY_ARRAY_LEN(x), 1.0f);
    fill(o, HY_ARRAY_LEN(o), 1.0f);
    be->i->state_init(be, &lay, err);
    be->i->lightning(be, 0, &b, x, x + 16, x + 32, row_stride, head_stride, sw, o, &p);
    rc = be->i->status(be, err);
    for (int i = 0; i < n_o; i++)
        zero = zero && o[i] == 0.0f;
    HY_T_OK(rc < 0 && strcmp(err, want) == 0 && zero, "refused: \"%s\" (got \"%s\"), output zeroed",
            want, err);
}

static void check_refusals(hy_backend_t *be)
{
    const hy_lightning_params_t good = {4, 16, 16};
    const int64_t rec = hy_lightning_state_floats(&good);
    hy_weight_t w;

    set_slopes(4, 16);
    expect_refused(be, (hy_lightning_params_t){4, 16, 0}, 200, 48, &decay_w, 0, rec,
                   "lightning: bad shape: 4 heads (1..65535) of 16 (1..256), chunk 0 (1..64)");
    expect_refused(be, (hy_lightning_params_t){4, 16, 65}, 200, 48, &decay_w, 0, rec,
                   "lightning: bad shape: 4 heads (1..65535) of 16 (1..256), chunk 65 (1..64)");
    expect_refused(be, (hy_lightning_params_t){4, 257, 16}, 2000, 800, &decay_w, 0, rec,
                   "lightning: bad shape: 4 heads (1..65535) of 257 (1..256), chunk 16 (1..64)");
    expect_refused(be, good, 150, 48, &decay_w, 0, rec,
                   "lightning: strides row 150 / head 48 are shorter than 4 heads of 16");
    expect_refused(be, good, 200, 8, &decay_w, 0, rec,
                   "lightning: strides row 200 / head 8 are shorter than 4 heads of 16");
    w = decay_w;
    w.ne[1] = 3;
    expect_refused(be, good, 200, 48, &w, 0, rec,
                   "lightning: decay table test-decay must be f32 {17, 4} (chunk + 1, heads)");
    w = decay_w;
    w.ne[0] = 2; /* a chunk-1 table */
    expect_refused(be, good, 200, 48, &w, 0, rec,
                   "lightning: decay table test-decay must be f32 {17, 4} (chunk + 1, heads)");
    w = decay_w;
    w.type = HY_DTYPE_F16;
    expect_refused(be, good, 200, 48, &w, 0, rec,
                   "lightning: decay table test-decay must be f32 {17, 4} (chunk + 1, heads)");
    table[2 * 17 + 5] = 1.5f;
    expect_refused(be, good, 200, 48, &decay_w, 0, rec,
                   "lightning: decay table test-decay holds 1.5 for head 2, power 5 (must be in [0, 1])");
    table[2 * 17 + 5] = NAN;
    expect_refused(be, good, 200, 48, &decay_w, 0, rec,
                   "lightning: decay table test-decay holds nan for head 2, power 5 (must be in [0, 1])");
    set_slopes(4, 16);
    expect_refused(be, good, 200, 48, &decay_w, 0, 4 * 16 * 16,
                   "lightning: layer 0 keeps 1024 state floats per slot, op needs 3072");
    expect_refused(be, good, 200, 48, &decay_w, -1, rec,
                   "lightning: sequence 0 has n_past -1");
}

int main(void)
{
    static const shape_t shapes[] = {{4, 16}, {3, 12}, {2, 40}, {2, 128}};
    static const int chunks[] = {1, 16, 5, 64};
    hy_backend_t *be1 = new_backend(1), *be2 = new_backend(2);
    bool avx2;

    if (be1 == NULL || be2 == NULL) {
        HY_T_OK(0, "cpu backends");
        return hy_t_done();
    }
    avx2 = hy_cpu_lightning_set_isa(HY_ISA_AVX2) == HY_OK;
    if (!avx2)
        printf("# this CPU lacks AVX2: the generic build is compared with itself\n");
    for (size_t i = 0; i < HY_ARRAY_LEN(shapes); i++)
        for (size_t c = 0; c < HY_ARRAY_LEN(chunks); c++)
            check_shape(be1, be2, &shapes[i], chunks[c], avx2);
    check_checkpoint(be2);
    check_refusals(be1);
    be1->i->free(be1);
    be2->i->free(be2);
    return hy_t_done();
}
