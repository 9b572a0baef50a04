/*
 * gdn_kern.h - the Gated DeltaNet kernel body, compiled once per ISA by
 * gdn_kern_{generic,avx2,avx512}.c (each defines HY_GDN_WORKER and HY_GDN_NR
 * first).  Plain C written so the vectoriser turns it into SIMD code: every
 * inner loop runs over contiguous output columns with no reductions, and the
 * small matrix products go through one register-blocked micro-kernel.
 *
 * Two forms of the same recurrence (per v-head, state S is d_k x d_v,
 * row-major: S[i][j], i = key index, j = value index):
 *   S <- exp(g_t) S;  u = S^T k_t;  S <- S + k_t (beta_t (v_t - u))^T;  o_t = S^T q_t
 *
 * recurrent: token by token, exactly as written (decode, chunk = 1).
 *
 * chunked (prefill): the WY / UT-transform form of Yang, Kautz and
 * Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with Delta Rule"
 * (2024, arXiv:2412.06464), as in flash-linear-attention's
 * chunk_gated_delta_rule.  Within a chunk of n tokens starting from state
 * S0, with G_t = sum_{s<=t} g_s and gamma_t = exp(G_t), the per-token
 * "new values" delta_t = beta_t (v_t - u_t) satisfy
 *     delta_t + beta_t sum_{s<t} e^{G_t-G_s} (k_t . k_s) delta_s
 *         = beta_t (v_t - gamma_t S0^T k_t),
 * a unit-lower-triangular system (I + A) D = R that forward substitution
 * solves; then
 *     o_t = gamma_t S0^T q_t + sum_{s<=t} e^{G_t-G_s} (q_t . k_s) delta_s
 *     S_n = gamma_{n-1} S0 + sum_s e^{G_{n-1}-G_s} k_s delta_s^T.
 * Everything but the substitution is a small matrix product, so a chunk
 * costs about the same flops as n recurrent steps but runs from L1 at
 * full SIMD width instead of streaming the state from L2 once per token.
 * Chunks are counted from the first row of the sequence in this batch, so
 * a prompt split across steps (or a short final chunk) changes nothing but
 * float rounding.
 */
#include "backend/cpu/gdn.h"

#include <math.h>
#include <string.h>

#define HY_GDN_MR 4

/* C[M][N] (=|+=) A[M][K] . B[K][N]; leading dimensions in floats. */
static void hy_gdn_gemm(int M, int N, int K, const float *restrict A, int lda,
                        const float *restrict B, int ldb, float *restrict C, int ldc, int acc)
{
    int m0 = 0, n0;

    for (; m0 + HY_GDN_MR <= M; m0 += HY_GDN_MR) {
        for (n0 = 0; n0 + HY_GDN_NR <= N; n0 += HY_GDN_NR) {
            float c[HY_GDN_MR][HY_GDN_NR];

            for (int r = 0; r < HY_GDN_MR; r++)
                for (int jj = 0; jj < HY_GDN_NR; jj++)
                    c[r][jj] = acc ? C[(size_t)(m0 + r) * ldc + n0 + jj] : 0.0f;
            for (int kk = 0; kk < K; kk++) {
                const float *b = B + (size_t)kk * ldb + n0;
                for (int r = 0; r < HY_GDN_MR; r++) {
                    const float a = A[(size_t)(m0 + r) * lda + kk];
                    for (int jj = 0; jj < HY_GDN_NR; jj++)
                        c[r][jj] += a * b[jj];
                }
            }
            for (int r = 0; r < HY_GDN_MR; r++)
                for (int jj = 0; jj < HY_GDN_NR; jj++)
                    C[(size_t)(m0 + r) * ldc + n0 + jj] = c[r][jj];
        }
        if (n0 < N) {
            for (int r = 0; r < HY_GDN_MR; r++) {
                float *cr = C + (size_t)(m0 + r) * ldc;
                if (!acc)
                    for (int j = n0; j < N; j++)
                        cr[j] = 0.0f;
                for (int kk = 0; kk < K; kk++) {
                    const float a = A[(size_t)(m0 + r) * lda + kk];
                    const float *b = B + (size_t)kk * ldb;
                    for (int j = n0; j < N; j++)
                        cr[j] += a * b[j];
                }
            }
        }
    }
    for (; m0 < M; m0++) {
        float *cr = C + (size_t)m0 * ldc;
        if (!acc)
            for (int j = 0; j < N; j++)
                cr[j] = 0.0f;
        for (int kk = 0; kk < K; kk++) {
            const float a = A[(size_t)m0 * lda + kk];
            const float *b = B + (size_t)kk * ldb;
            for (int j = 0; j < N; j++)
                cr[j] += a * b[j];
        }
    }
}

/* One token of one head, exactly the recurrence; u is d_v floats scratch. */
static void hy_gdn_step(float *restrict S, const float *restrict q, const float *restrict k,
                        const float *restrict v, float g, float beta, float *restrict o,
                        float *restrict u, int dk, int dv)
{
    const float alpha = expf(g);

    for (int j = 0; j < dv; j++)
        u[j] = 0.0f;
    for (int i = 0; i < dk; i++) {
        float *restrict row = S + (size_t)i * dv;
        const float ki = k[i];
        for (int j = 0; j < dv; j++) {
            row[j] *= alpha;
            u[j] += row[j] * ki;
        }
    }
    for (int j = 0; j < dv; j++) {
        u[j] = beta * (v[j] - u[j]);
        o[j] = 0.0f;
    }
    for (int i = 0; i < dk; i++) {
        float *restrict row = S + (size_t)i * dv;
        const float ki = k[i], qi = q[i];
        for (int j = 0; j < dv; j++) {
            row[j] += ki * u[j];
            o[j] += row[j] * qi;
        }
    }
}

/* Per-thread scratch layout of the chunked form (C = chunk). */
typedef struct {
    float *QK;   /* [2C][dk]: the chunk's q rows, then its k rows */
    float *KT;   /* [dk][C]: k transposed, later decay-weighted */
    float *P;    /* [2C][dv]: [Q;K] S0, then the output rows */
    float *D;    /* [C][dv]: right-hand side, then delta */
    float *M;    /* [2C][C]: [Q;K] K^T (attention scores, then the system) */
    float *G;    /* [C] cumulative log decay */
    float *u;    /* [dv] */
} hy_gdn_scr_t;

static void hy_gdn_chunk(float *restrict S, const hy_gdn_job_t *j, const hy_gdn_scr_t *w,
                         int64_t row0, int n, int kh, int h)
{
    const int dk = j->d_k, dv = j->d_v, C = j->chunk, Hv = j->n_v_heads;
    float *restrict QK = w->QK, *restrict KT = w->KT, *restrict P = w->P, *restrict D = w->D,
                    *restrict M = w->M, *restrict G = w->G;
    float acc = 0.0f;

    /* gather the chunk's rows; G_t = sum of log decays */
    for (int t = 0; t < n; t++) {
        const int64_t r = row0 + t;
        const float *q = j->q + r * j->stride + (int64_t)kh * dk;
        const float *k = j->k + r * j->stride + (int64_t)kh * dk;
        const float *v = j->v + r * j->stride + (int64_t)h * dv;

        memcpy(QK + (size_t)t * dk, q, sizeof(float) * (size_t)dk);
        memcpy(QK + (size_t)(n + t) * dk, k, sizeof(float) * (size_t)dk);
        for (int i = 0; i < dk; i++)
            KT[(size_t)i * C + t] = k[i];
        memcpy(D + (size_t)t * dv, v, sizeof(float) * (size_t)dv);
        acc += j->g[r * Hv + h];
        G[t] = acc;
    }
    /* [Q;K] S0 and [Q;K] K^T */
    hy_gdn_gemm(2 * n, dv, dk, QK, dk, S, dv, P, dv, 0);
    hy_gdn_gemm(2 * n, n, dk, QK, dk, KT, C, M, C, 0);

    /* R_t = beta_t (v_t - gamma_t (S0^T k_t)), then forward substitution:
     * delta_t = R_t - sum_{s<t} beta_t e^{G_t-G_s} (k_t.k_s) delta_s */
    for (int t = 0; t < n; t++) {
        const float beta = j->beta[(row0 + t) * Hv + h], gam = expf(G[t]);
        float *restrict dt = D + (size_t)t * dv;
        const float *restrict pk = P + (size_t)(n + t) * dv;
        const float *mk = M + (size_t)(n + t) * C;

        for (int jj = 0; jj < dv; jj++)
            dt[jj] = beta * (dt[jj] - gam * pk[jj]);
        for (int s = 0; s < t; s++) {
            const float a = beta * expf(G[t] - G[s]) * mk[s];
            const float *restrict ds = D + (size_t)s * dv;
            for (int jj = 0; jj < dv; jj++)
                dt[jj] -= a * ds[jj];
        }
    }
    /* o_t = gamma_t S0^T q_t + sum_{s<=t} e^{G_t-G_s} (q_t.k_s) delta_s */
    for (int t = 0; t < n; t++) {
        float *restrict mq = M + (size_t)t * C, *restrict pq = P + (size_t)t * dv;
        const float gam = expf(G[t]);

        for (int s = 0; s <= t; s++)
            mq[s] *= expf(G[t] - G[s]);
        for (int s = t + 1; s < n; s++)
            mq[s] = 0.0f;
        for (int jj = 0; jj < dv; jj++)
            pq[jj] *= gam;
    }
    hy_gdn_gemm(n, dv, n, M, C, D, dv, P, dv, 1);
    for (int t = 0; t < n; t++)
        memcpy(j->o + (row0 + t) * (int64_t)Hv * dv + (int64_t)h * dv, P + (size_t)t * dv,
               sizeof(float) * (size_t)dv);

    /* S_n = gamma_{n-1} S0 + sum_s e^{G_{n-1}-G_s} k_s delta_s^T */
    {
        const float gl = G[n - 1], gam = expf(gl);

        for (int s = 0; s < n; s++) {
            const float f = expf(gl - G[s]);
            for (int i = 0; i < dk; i++)
                KT[(size_t)i * C + s] *= f;
        }
        for (size_t e = 0; e < (size_t)dk * dv; e++)
            S[e] *= gam;
        hy_gdn_gemm(dk, dv, n, KT, C, D, dv, S, dv, 1);
    }
}

void HY_GDN_WORKER(void *arg, int ith, int nth)
{
    hy_gdn_job_t *j = arg;
    const int dk = j->d_k, dv = j->d_v, Hv = j->n_v_heads, C = j->chunk;
    const int rep = j->n_v_heads / j->n_k_heads;
    float *base = j->scratch + (size_t)ith * j->scratch_floats;
    hy_gdn_scr_t w;
    int32_t unit;

    (void)nth;
    /* 16-float (64-byte) aligned parts, matching hy_gdn_scratch_floats */
#define HY_GDN_PART(n) (((size_t)(n) + 15) / 16 * 16)
    w.QK = base;
    w.KT = w.QK + HY_GDN_PART((size_t)2 * C * dk);
    w.P = w.KT + HY_GDN_PART((size_t)dk * C);
    w.D = w.P + HY_GDN_PART((size_t)2 * C * dv);
    w.M = w.D + HY_GDN_PART((size_t)C * dv);
    w.G = w.M + HY_GDN_PART((size_t)2 * C * C);
    w.u = w.G + HY_GDN_PART(C);
#undef HY_GDN_PART

    while ((unit = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n_units) {
        const hy_batch_seq_t *sq = &j->b->seqs[unit / Hv];
        const int h = unit % Hv;
        const int kh = j->v_tiled ? h % j->n_k_heads : h / rep;
        float *S = hy_cpu_state_rec(j->cpu, sq->state_slot, j->rec_layer) +
                   (size_t)h * dk * dv;

        if (C <= 1 || sq->n == 1) {
            for (int32_t t = 0; t < sq->n; t++) {
                const int64_t r = (int64_t)sq->first + t;
                hy_gdn_step(S, j->q + r * j->stride + (int64_t)kh * dk,
                            j->k + r * j->stride + (int64_t)kh * dk,
                            j->v + r * j->stride + (int64_t)h * dv, j->g[r * Hv + h],
                            j->beta[r * Hv + h], j->o + r * (int64_t)Hv * dv + (int64_t)h * dv,
                            w.u, dk, dv);
            }
        } else {
            for (int32_t t0 = 0; t0 < sq->n; t0 += C)
                hy_gdn_chunk(S, j, &w, (int64_t)sq->first + t0, HY_MIN(C, sq->n - t0), kh, h);
        }
    }
}
