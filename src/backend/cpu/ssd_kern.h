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
 * recurrent: token by token, exactly as written (decode, short steps,
 * chunk = 1), on the slot's S[p][n] layout (llama.cpp's ssm_scan layout).
 *
 * chunked (prefill): the state-space-dual block form of Dao and Gu,
 * "Transformers are SSMs: Generalized Models and Efficient Algorithms
 * Through Structured State Space Duality" (ICML 2024, arXiv:2405.21060),
 * section 6 / listing 1.  Within a chunk of q tokens entering with state
 * S0, with cum_i = a_0 + ... + a_i:
 *     L[i][j]  = exp(cum_i - cum_j) for j <= i, else 0   (exp(segsum(a)))
 *     Y_diag   = ((C B^T) o L) diag(dt) X                 (intra-chunk)
 *     Y_off[i] = exp(cum_i) S0 C_i                        (state passing in)
 *     S_q      = exp(cum_{q-1}) S0 + X^T diag(exp(cum_{q-1} - cum_j) dt_j) B
 * and the inter-chunk recurrence is S0 <- S_q, chunk after chunk.  Every
 * term is a small matrix product that runs from L1 at full SIMD width
 * instead of streaming the P x N state through load/store once per token.
 * Chunks are counted from the sequence's first row in this batch, so a
 * prompt split across engine steps (chunks starting mid-sequence) or a
 * short final chunk changes nothing but float rounding.  Inside the chunk
 * loop the state is kept transposed (St[n][p]) so that both state products
 * are row-times-matrix forms of the micro-kernel.
 */
#include "backend/cpu/ssd.h"

#include <math.h>
#include <string.h>

#define HY_SSD_MR 4
typedef float hy_ssd_vec_t __attribute__((vector_size(HY_SSD_NR * sizeof(float))));
/* Width of the recurrent form's partial-sum array (one or two vectors). */
#define HY_SSD_RW 16

/* C[M][N] (= or +=) A[M][K] . B[K][N]; leading dimensions in floats.
 * ktri: A is lower triangular (A[i][k] = 0 for k > i), so a row block
 *   stops its K loop at its last row.
 * ctri: only C's lower triangle (column <= row) is wanted; column tiles
 *   wholly above the block's last row are skipped (left unwritten). */
static void hy_ssd_gemm(int32_t M, int32_t N, int32_t K, const float *restrict A, int64_t lda,
                        const float *restrict B, int64_t ldb, float *restrict C, int64_t ldc,
                        bool accumulate, bool ktri, bool ctri)
{
    for (int32_t i0 = 0; i0 < M; i0 += HY_SSD_MR) {
        const int32_t mr = HY_MIN(HY_SSD_MR, M - i0);
        const int32_t kend = ktri ? HY_MIN(K, i0 + mr) : K;
        const int32_t nend = ctri ? HY_MIN(N, i0 + mr) : N;

        for (int32_t c0 = 0; c0 < nend; c0 += HY_SSD_NR) {
            const int32_t nr = HY_MIN(HY_SSD_NR, N - c0);
            float t[HY_SSD_MR][HY_SSD_NR];

            if (mr == HY_SSD_MR && nr == HY_SSD_NR) {
                /* the hot path: a full tile in vector registers (GCC vector
                 * extensions: one or two SIMD registers per row on every ISA
                 * build; memcpy because rows need not be aligned) */
                const float *a0 = A + (int64_t)i0 * lda, *a1 = a0 + lda, *a2 = a1 + lda,
                            *a3 = a2 + lda;
                hy_ssd_vec_t t0 = {0}, t1 = {0}, t2 = {0}, t3 = {0};
                float *c = C + (int64_t)i0 * ldc + c0;
                if (accumulate) {
                    memcpy(&t0, c, sizeof t0);
                    memcpy(&t1, c + ldc, sizeof t1);
                    memcpy(&t2, c + 2 * ldc, sizeof t2);
                    memcpy(&t3, c + 3 * ldc, sizeof t3);
                }
                for (int32_t k = 0; k < kend; k++) {
                    hy_ssd_vec_t b;
                    memcpy(&b, B + (int64_t)k * ldb + c0, sizeof b);
                    t0 += a0[k] * b;
                    t1 += a1[k] * b;
                    t2 += a2[k] * b;
                    t3 += a3[k] * b;
                }
                memcpy(c, &t0, sizeof t0);
                memcpy(c + ldc, &t1, sizeof t1);
                memcpy(c + 2 * ldc, &t2, sizeof t2);
                memcpy(c + 3 * ldc, &t3, sizeof t3);
            } else {
                for (int r = 0; r < mr; r++)
                    for (int l = 0; l < nr; l++)
                        t[r][l] = accumulate ? C[(int64_t)(i0 + r) * ldc + c0 + l] : 0.0f;
                for (int32_t k = 0; k < kend; k++) {
                    const float *b = B + (int64_t)k * ldb + c0;
                    for (int r = 0; r < mr; r++) {
                        const float v = A[(int64_t)(i0 + r) * lda + k];
                        for (int l = 0; l < nr; l++)
                            t[r][l] += v * b[l];
                    }
                }
                for (int r = 0; r < mr; r++)
                    for (int l = 0; l < nr; l++)
                        C[(int64_t)(i0 + r) * ldc + c0 + l] = t[r][l];
            }
        }
    }
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

/* The chunked form (see the top of the file) over rows first .. first+n-1. */
static void hy_ssd_chunked(const hy_ssd_job_t *j, float *restrict S, int32_t first, int32_t n,
                           int32_t h, int32_t g, float *scratch)
{
    const int32_t P = j->P, N = j->N, Q = j->chunk;
    const int64_t ldy = (int64_t)j->n_head * P;
    const float A = j->A[h], D = j->D ? j->D[h] : 0.0f, bias = j->dt_bias[h];
    float *St = scratch;                             /* [N][P] state, transposed */
    float *Bt = St + HY_SSD_PART((size_t)N * P);     /* [N][Q] B^T of the chunk */
    float *Bw = Bt + HY_SSD_PART((size_t)N * Q);     /* [N][Q] B^T diag(w) */
    float *Cs = Bw + HY_SSD_PART((size_t)N * Q);     /* [Q][N] diag(exp cum) C */
    float *Gm = Cs + HY_SSD_PART((size_t)Q * N);     /* [Q][Q] C B^T, then o L diag(dt) */
    float *Yc = Gm + HY_SSD_PART((size_t)Q * Q);     /* [Q][P] chunk output */
    float *cum = Yc + HY_SSD_PART((size_t)Q * P);    /* [Q] */
    float *dtv = cum + HY_SSD_PART(Q);               /* [Q] */

    for (int32_t p = 0; p < P; p++)
        for (int32_t k = 0; k < N; k++)
            St[(int64_t)k * P + p] = S[(int64_t)p * N + k];

    for (int32_t c0 = 0; c0 < n; c0 += Q) {
        const int32_t q = HY_MIN(Q, n - c0);
        const int64_t row0 = (int64_t)first + c0;
        const float *X0 = j->x + row0 * j->x_stride + (int64_t)h * P;     /* [q][P], x_stride */
        const float *C0 = j->C + row0 * j->bc_stride + (int64_t)g * N;    /* [q][N], bc_stride */
        float run = 0.0f, last;

        for (int32_t i = 0; i < q; i++) {
            const float d = hy_ssd_softplus(j->dt[(row0 + i) * j->dt_stride + h] + bias);
            dtv[i] = d;
            run += d * A;
            cum[i] = run;
        }
        last = cum[q - 1];
        for (int32_t i = 0; i < q; i++) {
            const float *Bi = j->B + (row0 + i) * j->bc_stride + (int64_t)g * N;
            const float *Ci = C0 + (int64_t)i * j->bc_stride;
            const float e = expf(cum[i]), w = expf(last - cum[i]) * dtv[i];
            for (int32_t k = 0; k < N; k++) {
                Bt[(int64_t)k * Q + i] = Bi[k];
                Bw[(int64_t)k * Q + i] = Bi[k] * w;
                Cs[(int64_t)i * N + k] = Ci[k] * e;
            }
        }
        /* Gm = C B^T (lower triangle), then the decay mask and dt */
        hy_ssd_gemm(q, q, N, C0, j->bc_stride, Bt, Q, Gm, Q, false, false, true);
        for (int32_t i = 0; i < q; i++) {
            float *gr = Gm + (int64_t)i * Q;
            for (int32_t k = 0; k <= i; k++)
                gr[k] *= expf(cum[i] - cum[k]) * dtv[k];
            for (int32_t k = i + 1; k < q; k++)
                gr[k] = 0.0f;
        }
        /* Yc = Y_diag + Y_off */
        hy_ssd_gemm(q, P, q, Gm, Q, X0, j->x_stride, Yc, P, false, true, false);
        hy_ssd_gemm(q, P, N, Cs, N, St, P, Yc, P, true, false, false);
        for (int32_t i = 0; i < q; i++) {
            float *yr = j->y + (row0 + i) * ldy + (int64_t)h * P;
            const float *xr = X0 + (int64_t)i * j->x_stride, *yc = Yc + (int64_t)i * P;
            for (int32_t p = 0; p < P; p++)
                yr[p] = yc[p] + D * xr[p];
        }
        /* the state the next chunk enters with */
        {
            const float decay = expf(last);
            for (int64_t k = 0; k < (int64_t)N * P; k++)
                St[k] *= decay;
        }
        hy_ssd_gemm(N, P, q, Bw, Q, X0, j->x_stride, St, P, true, false, false);
    }

    for (int32_t p = 0; p < P; p++)
        for (int32_t k = 0; k < N; k++)
            S[(int64_t)p * N + k] = St[(int64_t)k * P + p];
}

void HY_SSD_WORKER(void *arg, int ith, int nth)
{
    hy_ssd_job_t *j = arg;
    float *scratch = j->scratch ? j->scratch + (size_t)ith * j->scratch_floats : NULL;
    const int32_t heads_per_group = j->n_head / j->G;

    for (;;) {
        const int32_t u = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        const hy_batch_seq_t *sq;
        int32_t s, h;
        float *S;

        if (u >= j->n_units)
            break;
        s = u / j->n_head;
        h = u % j->n_head;
        sq = &j->b->seqs[s];
        if (sq->n <= 0)
            continue;
        S = hy_cpu_state_rec(j->cpu, sq->state_slot, j->rec_layer) + (int64_t)h * j->P * j->N;
        if (j->chunk > 1 && sq->n >= HY_SSD_MIN_CHUNKED && scratch != NULL)
            hy_ssd_chunked(j, S, sq->first, sq->n, h, h / heads_per_group, scratch);
        else
            hy_ssd_recurrent(j, S, sq->first, sq->n, h, h / heads_per_group);
    }
}
