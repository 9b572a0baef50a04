/*
 * ssd_kern.h - the Mamba-2 SSD kernel body, compiled once per ISA by
 * ssd_kern_{generic,avx2,avx512}.c (each defines HY_SSD_WORKER and HY_SSD_NR
 * first).  Plain C written so the vectoriser turns it into SIMD code: inner
 * loops run over contiguous columns into fixed-size accumulator arrays, and
 * every matrix product goes through one register-blocked micro-kernel.
 *
 * Per head h (head size P, state size N, group g = h / (n_head / G)), with
 * dt_t = softplus(dt_raw + dt_bias_h) and a_t = dt_t A_h <= 0, the state
 * S (P x N) follows
 *     S_t = exp(a_t) S_{t-1} + dt_t x_t B_t^T,   y_t = S_t C_t + D_h x_t.
 *
 * recurrent: token by token, exactly as written (chunk = 1), on the slot's
 * S[p][n] layout (llama.cpp's ssm_scan layout).
 *
 * block form (chunk Q >= 2): the state-space-dual block form of Dao and
 * Gu, "Transformers are SSMs: Generalized Models and Efficient Algorithms
 * Through Structured State Space Duality" (ICML 2024, arXiv:2405.21060),
 * section 6 / listing 1, with its blocks at absolute positions
 * [bQ, (b+1)Q) of the sequence.  Within a block entered with state S0,
 * with cum_i = a_0 + ... + a_i over the block's rows:
 *     y_i = exp(cum_i) S0 C_i + sum_{j<=i} (C_i . B_j) exp(cum_i - cum_j) dt_j x_j
 *           + D_h x_i
 *     S_Q = exp(cum_{Q-1}) S0 + X^T diag(exp(cum_{Q-1} - cum_j) dt_j) B.
 * The slot keeps S0 (transposed, St[n][p], so that both state products are
 * row-times-matrix forms of the micro-kernel) and the block's rows so far
 * (B_j, x_j, dt_j, cum_j); a token's output depends only on them and on the
 * token, computed in one fixed order, and the state advances only when a
 * block is complete.  So a one-token decode step, a prefill of many blocks
 * and any cut in between give the same bits (docs/determinism.md).  The
 * objects are built with -ffp-contract=off, so a product's element is the
 * same sum of separately rounded products in a full tile and in a tail.
 */
#include "backend/cpu/ssd.h"

#include <math.h>
#include <string.h>

#define HY_SSD_MR 4
/* Width of the recurrent form's partial-sum array (one or two vectors). */
#define HY_SSD_RW 16

/* The build's native vector: a tile row of HY_SSD_NR floats is
 * HY_SSD_NR / HY_SSD_NV of them (a wider GCC vector type, two registers,
 * is kept in memory when a loop holds several). */
#if defined(__AVX512F__)
#define HY_SSD_NV 16
#elif defined(__AVX__)
#define HY_SSD_NV 8
#else
#define HY_SSD_NV 4
#endif
typedef float hy_ssd_nv_t __attribute__((vector_size(HY_SSD_NV * sizeof(float))));
#define HY_SSD_UNROLL _Pragma("GCC unroll 8")

/* One row: c[N] (= or +=) a[K] . B[K][N], four native vectors of columns
 * at a time (independent sums hide the add latency of a decode step's
 * single row), then single vectors, then scalars: each element the same
 * sum in k order as in hy_ssd_gemm's tiles. */
static void hy_ssd_gemm_row(int32_t N, int32_t K, const float *restrict a, const float *restrict B,
                            int64_t ldb, float *restrict c, bool accumulate)
{
    int32_t c0 = 0;

    for (; c0 + 4 * HY_SSD_NV <= N; c0 += 4 * HY_SSD_NV) {
        hy_ssd_nv_t t0 = {0}, t1 = {0}, t2 = {0}, t3 = {0};
        if (accumulate) {
            memcpy(&t0, c + c0, sizeof t0);
            memcpy(&t1, c + c0 + HY_SSD_NV, sizeof t1);
            memcpy(&t2, c + c0 + 2 * HY_SSD_NV, sizeof t2);
            memcpy(&t3, c + c0 + 3 * HY_SSD_NV, sizeof t3);
        }
        for (int32_t k = 0; k < K; k++) {
            const float *b = B + (int64_t)k * ldb + c0;
            hy_ssd_nv_t b0, b1, b2, b3;
            memcpy(&b0, b, sizeof b0);
            memcpy(&b1, b + HY_SSD_NV, sizeof b1);
            memcpy(&b2, b + 2 * HY_SSD_NV, sizeof b2);
            memcpy(&b3, b + 3 * HY_SSD_NV, sizeof b3);
            t0 += a[k] * b0;
            t1 += a[k] * b1;
            t2 += a[k] * b2;
            t3 += a[k] * b3;
        }
        memcpy(c + c0, &t0, sizeof t0);
        memcpy(c + c0 + HY_SSD_NV, &t1, sizeof t1);
        memcpy(c + c0 + 2 * HY_SSD_NV, &t2, sizeof t2);
        memcpy(c + c0 + 3 * HY_SSD_NV, &t3, sizeof t3);
    }
    for (; c0 + HY_SSD_NV <= N; c0 += HY_SSD_NV) {
        hy_ssd_nv_t t0 = {0};
        if (accumulate)
            memcpy(&t0, c + c0, sizeof t0);
        for (int32_t k = 0; k < K; k++) {
            hy_ssd_nv_t b0;
            memcpy(&b0, B + (int64_t)k * ldb + c0, sizeof b0);
            t0 += a[k] * b0;
        }
        memcpy(c + c0, &t0, sizeof t0);
    }
    for (; c0 < N; c0++) {
        float t = accumulate ? c[c0] : 0.0f;
        for (int32_t k = 0; k < K; k++)
            t += a[k] * B[(int64_t)k * ldb + c0];
        c[c0] = t;
    }
}

/* C[M][N] (= or +=) A[M][K] . B[K][N]; leading dimensions in floats.  Every
 * element is the same sum in k order whatever tile it falls in (the block
 * form's bits must not depend on how many rows a step brings). */
static void hy_ssd_gemm(int32_t M, int32_t N, int32_t K, const float *restrict A, int64_t lda,
                        const float *restrict B, int64_t ldb, float *restrict C, int64_t ldc,
                        bool accumulate)
{
    int32_t i0 = 0;

    for (; i0 + HY_SSD_MR <= M; i0 += HY_SSD_MR) {
        for (int32_t c0 = 0; c0 < N; c0 += HY_SSD_NR) {
            const int32_t nr = HY_MIN(HY_SSD_NR, N - c0);
            float t[HY_SSD_MR][HY_SSD_NR];

            if (nr == HY_SSD_NR) {
                /* the hot path: a full tile in vector registers (native
                 * vectors, HY_SSD_NR / HY_SSD_NV per row, literal loop
                 * bounds so the sums stay in registers; memcpy because rows
                 * need not be aligned) */
                enum { V = HY_SSD_NR / HY_SSD_NV };
                hy_ssd_nv_t acc[HY_SSD_MR][V];
                float *c = C + (int64_t)i0 * ldc + c0;

                HY_SSD_UNROLL
                for (int r = 0; r < HY_SSD_MR; r++)
                    HY_SSD_UNROLL
                    for (int v = 0; v < V; v++) {
                        hy_ssd_nv_t z = {0};
                        if (accumulate)
                            memcpy(&z, c + r * ldc + v * HY_SSD_NV, sizeof z);
                        acc[r][v] = z;
                    }
                for (int32_t k = 0; k < K; k++) {
                    hy_ssd_nv_t b[V];
                    HY_SSD_UNROLL
                    for (int v = 0; v < V; v++)
                        memcpy(&b[v], B + (int64_t)k * ldb + c0 + v * HY_SSD_NV, sizeof b[v]);
                    HY_SSD_UNROLL
                    for (int r = 0; r < HY_SSD_MR; r++) {
                        const float ar = A[(int64_t)(i0 + r) * lda + k];
                        HY_SSD_UNROLL
                        for (int v = 0; v < V; v++)
                            acc[r][v] += ar * b[v];
                    }
                }
                HY_SSD_UNROLL
                for (int r = 0; r < HY_SSD_MR; r++)
                    HY_SSD_UNROLL
                    for (int v = 0; v < V; v++)
                        memcpy(c + r * ldc + v * HY_SSD_NV, &acc[r][v], sizeof acc[r][v]);
            } else {
                for (int r = 0; r < HY_SSD_MR; r++)
                    for (int l = 0; l < nr; l++)
                        t[r][l] = accumulate ? C[(int64_t)(i0 + r) * ldc + c0 + l] : 0.0f;
                for (int32_t k = 0; k < K; k++) {
                    const float *b = B + (int64_t)k * ldb + c0;
                    for (int r = 0; r < HY_SSD_MR; r++) {
                        const float v = A[(int64_t)(i0 + r) * lda + k];
                        for (int l = 0; l < nr; l++)
                            t[r][l] += v * b[l];
                    }
                }
                for (int r = 0; r < HY_SSD_MR; r++)
                    for (int l = 0; l < nr; l++)
                        C[(int64_t)(i0 + r) * ldc + c0 + l] = t[r][l];
            }
        }
    }
    for (; i0 < M; i0++)
        hy_ssd_gemm_row(N, K, A + (int64_t)i0 * lda, B, ldb, C + (int64_t)i0 * ldc, accumulate);
}

static inline float hy_ssd_softplus(float v)
{
    /* torch's threshold 20: above it log1p(exp(v)) == v in float */
    return v > 20.0f ? v : log1pf(expf(v));
}

/* Token by token on S[P][N]: rows first .. first+n-1 of the batch. */
static void hy_ssd_recurrent(const hy_ssd_job_t *j, float *restrict S, int32_t first,
                             int32_t n, int32_t h, int32_t g)
{
    const int32_t P = j->P, N = j->N, nfull = N / HY_SSD_RW * HY_SSD_RW;
    const int64_t ldy = (int64_t)j->n_head * P;
    const float A = j->A[h], D = j->D ? j->D[h] : 0.0f, bias = j->dt_bias[h];

    for (int32_t t = 0; t < n; t++) {
        const int64_t row = (int64_t)first + t;
        const float dtv = hy_ssd_softplus(j->dt[row * j->dt_stride + h] + bias);
        const float dA = expf(dtv * A);
        const float *restrict xr = j->x + row * j->x_stride + (int64_t)h * P;
        const float *restrict Br = j->B + row * j->bc_stride + (int64_t)g * N;
        const float *restrict Cr = j->C + row * j->bc_stride + (int64_t)g * N;
        float *restrict yr = j->y + row * ldy + (int64_t)h * P;

        for (int32_t p = 0; p < P; p++) {
            float *restrict s = S + (int64_t)p * N;
            const float xdt = xr[p] * dtv;
            float acc[HY_SSD_RW] = {0}, sum = 0.0f;

            for (int32_t n0 = 0; n0 < nfull; n0 += HY_SSD_RW)
                for (int l = 0; l < HY_SSD_RW; l++) {
                    const float v = s[n0 + l] * dA + xdt * Br[n0 + l];
                    s[n0 + l] = v;
                    acc[l] += v * Cr[n0 + l];
                }
            for (int32_t k = nfull; k < N; k++) {
                const float v = s[k] * dA + xdt * Br[k];
                s[k] = v;
                sum += v * Cr[k];
            }
            for (int l = 0; l < HY_SSD_RW; l++)
                sum += acc[l];
            yr[p] = sum + D * xr[p];
        }
    }
}

/* The slot's parts for one head (hy_ssd_state_floats). */
typedef struct {
    float *St;   /* [N][P] state at the block's start, transposed */
    float *Bt;   /* [N][Q] the block's B rows, column j = row j */
    float *X;    /* [Q][P] the block's x rows */
    float *dtv;  /* [Q] softplus(dt + bias) */
    float *cum;  /* [Q] cumulative dt A within the block */
} hy_ssd_slot_t;

/* The complete block enters the state: St = exp(cum_{Q-1}) St + B^T diag(w) X. */
static void hy_ssd_fold(const hy_ssd_slot_t *sl, int32_t N, int32_t P, int32_t Q)
{
    const float last = sl->cum[Q - 1], decay = expf(last);

    for (int32_t i = 0; i < Q; i++) {
        const float w = expf(last - sl->cum[i]) * sl->dtv[i];
        for (int32_t k = 0; k < N; k++)
            sl->Bt[(int64_t)k * Q + i] *= w;
    }
    for (int64_t k = 0; k < (int64_t)N * P; k++)
        sl->St[k] *= decay;
    hy_ssd_gemm(N, P, Q, sl->Bt, Q, sl->X, P, sl->St, P, true);
}

/* Rows row0 .. row0+cnt-1 of the batch, block rows b0 .. b0+cnt-1 of the
 * head's current block: append them, write their outputs, and fold the
 * block into the state when its last row is among them.  scratch: Yc
 * [Q][P] (S0 C_i rows), Gm [Q][Q] (C_i . B_j). */
static void hy_ssd_block(const hy_ssd_job_t *j, const hy_ssd_slot_t *sl, int64_t row0,
                         int32_t b0, int32_t cnt, int32_t h, int32_t g, float *scratch)
{
    const int32_t P = j->P, N = j->N, Q = j->chunk, b1 = b0 + cnt;
    const int64_t ldy = (int64_t)j->n_head * P;
    const float A = j->A[h], D = j->D ? j->D[h] : 0.0f, bias = j->dt_bias[h];
    const float *C0 = j->C + row0 * j->bc_stride + (int64_t)g * N;   /* [cnt][N], bc_stride */
    float *restrict Bt = sl->Bt, *restrict X = sl->X, *restrict dtv = sl->dtv,
                    *restrict cum = sl->cum;
    float *Yc = scratch, *Gm = scratch + HY_SSD_PART((size_t)Q * P);

    for (int32_t i = 0; i < cnt; i++) {
        const int64_t r = row0 + i;
        const int32_t b = b0 + i;
        const float d = hy_ssd_softplus(j->dt[r * j->dt_stride + h] + bias);
        const float *Bi = j->B + r * j->bc_stride + (int64_t)g * N;

        dtv[b] = d;
        cum[b] = (b > 0 ? cum[b - 1] : 0.0f) + d * A;
        for (int32_t k = 0; k < N; k++)
            Bt[(int64_t)k * Q + b] = Bi[k];
        memcpy(X + (int64_t)b * P, j->x + r * j->x_stride + (int64_t)h * P,
               sizeof(float) * (size_t)P);
    }
    /* S0 C_i for the new rows, and C_i . B_j against the block's rows (all Q
     * columns: whole vector tiles; the columns past b1 hold earlier rows or
     * zeros, each column is its own sum, and they are not read) */
    hy_ssd_gemm(cnt, P, N, C0, j->bc_stride, sl->St, P, Yc, P, false);
    hy_ssd_gemm(cnt, Q, N, C0, j->bc_stride, Bt, Q, Gm, Q, false);
    for (int32_t i = 0; i < cnt; i++) {
        const int32_t b = b0 + i;
        const float e = expf(cum[b]);
        const float *restrict yc = Yc + (int64_t)i * P, *gr = Gm + (int64_t)i * Q;
        const float *restrict xr = X + (int64_t)b * P;
        float *restrict yr = j->y + (row0 + i) * ldy + (int64_t)h * P;

        for (int32_t p = 0; p < P; p++)
            yr[p] = e * yc[p];
        for (int32_t s = 0; s <= b; s++) {
            const float a = gr[s] * (expf(cum[b] - cum[s]) * dtv[s]);
            const float *restrict xs = X + (int64_t)s * P;
            int32_t p = 0;
            for (; p + HY_SSD_NV <= P; p += HY_SSD_NV) {
                hy_ssd_nv_t yv, xv;
                memcpy(&yv, yr + p, sizeof yv);
                memcpy(&xv, xs + p, sizeof xv);
                yv += a * xv;
                memcpy(yr + p, &yv, sizeof yv);
            }
            for (; p < P; p++)
                yr[p] += a * xs[p];
        }
        for (int32_t p = 0; p < P; p++)
            yr[p] += D * xr[p];
    }
    if (b1 == Q)
        hy_ssd_fold(sl, N, P, Q);
}

void HY_SSD_WORKER(void *arg, int ith, int nth)
{
    hy_ssd_job_t *j = arg;
    float *scratch = j->scratch ? j->scratch + (size_t)ith * j->scratch_floats : NULL;
    const int32_t heads_per_group = j->n_head / j->G, P = j->P, N = j->N, Q = j->chunk;

    (void)nth;
    for (;;) {
        const int32_t u = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        const hy_batch_seq_t *sq;
        int32_t s, h;
        float *st;

        if (u >= j->n_units)
            break;
        s = u / j->n_head;
        h = u % j->n_head;
        sq = &j->b->seqs[s];
        if (sq->n <= 0)
            continue;
        st = hy_cpu_state_rec(j->cpu, sq->state_slot, j->rec_layer);
        if (Q <= 1) {
            hy_ssd_recurrent(j, st + (int64_t)h * P * N, sq->first, sq->n, h,
                             h / heads_per_group);
            continue;
        }
        {
            /* blocks at absolute positions: the slot's block holds n_past % Q rows */
            float *blk = st + (int64_t)j->n_head * P * N + (int64_t)h * Q * (N + P + 2);
            const hy_ssd_slot_t sl = {st + (int64_t)h * P * N, blk, blk + (int64_t)N * Q,
                                      blk + (int64_t)(N + P) * Q, blk + (int64_t)(N + P + 1) * Q};

            for (int32_t t = 0; t < sq->n;) {
                const int32_t b0 = (int32_t)(((int64_t)sq->n_past + t) % Q);
                const int32_t cnt = HY_MIN(Q - b0, sq->n - t);

                hy_ssd_block(j, &sl, (int64_t)sq->first + t, b0, cnt, h, h / heads_per_group,
                             scratch);
                t += cnt;
            }
        }
    }
}
