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
 * block form (chunk C >= 2): the WY / UT-transform form of Yang, Kautz and
 * Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with Delta Rule"
 * (2024, arXiv:2412.06464), as in flash-linear-attention's
 * chunk_gated_delta_rule, with its blocks at absolute positions [bC, (b+1)C)
 * of the sequence.  Within a block entered with state S0, with G_t = sum of
 * g_s over the block's rows s <= t and gamma_t = exp(G_t), the per-token
 * "new values" delta_t = beta_t (v_t - u_t) satisfy
 *     delta_t = beta_t (v_t - gamma_t S0^T k_t)
 *               - sum_{s<t} beta_t e^{G_t-G_s} (k_t . k_s) delta_s
 * (forward substitution, row by row); then
 *     o_t = gamma_t S0^T q_t + sum_{s<=t} e^{G_t-G_s} (q_t . k_s) delta_s
 *     S_C = gamma_{C-1} S0 + sum_s e^{G_{C-1}-G_s} k_s delta_s^T.
 * The slot keeps S0 and the block's rows so far (k_s, delta_s, G_s): a
 * token's output and delta depend only on them and on the token, computed
 * in one fixed order, and S advances only when a block is complete.  So a
 * one-token decode step, a prefill of many blocks and any cut in between
 * give the same bits (docs/determinism.md).  The objects are built with
 * -ffp-contract=off so that a matrix product's element is the same sum of
 * separately rounded products in a full register tile and in a tail.
 * Everything but the substitution is a small matrix product, so a block
 * costs about the flops of C recurrent steps but runs from L1.
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

/* Two rows through one pass over B: c0[N] = a0[K] . B, c1[N] = a1[K] . B
 * (a decode step's q and k against the state or the block's keys).  Each
 * element is the sum hy_gdn_gemm forms, in k order from zero. */
static void hy_gdn_gemv2(int N, int K, const float *restrict a0, const float *restrict a1,
                         const float *restrict B, int ldb, float *restrict c0,
                         float *restrict c1)
{
    for (int j = 0; j < N; j++)
        c0[j] = c1[j] = 0.0f;
    for (int kk = 0; kk < K; kk++) {
        const float x0 = a0[kk], x1 = a1[kk];
        const float *restrict b = B + (size_t)kk * ldb;
        for (int j = 0; j < N; j++) {
            c0[j] += x0 * b[j];
            c1[j] += x1 * b[j];
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

/* Per-thread scratch (C = chunk): a step's rows of one block. */
typedef struct {
    float *P;    /* [2C][dv]: S0^T q rows, then S0^T k rows */
    float *M;    /* [2C][C]: q.k_s rows, then k.k_s rows */
    float *u;    /* [dv]: the recurrent form */
    float *e;    /* [C]: e^{G_t-G_s} of one row t */
} hy_gdn_scr_t;

/* The slot's parts for one head (hy_gdn_state_floats). */
typedef struct {
    float *S;    /* [dk][dv] state at the block's start */
    float *KT;   /* [dk][C] the block's keys, column s = row s */
    float *D;    /* [C][dv] the block's delta rows */
    float *G;    /* [C] cumulative log decay within the block */
} hy_gdn_slot_t;

/* S absorbs the complete block: S = gamma_{C-1} S + sum_s e^{G_{C-1}-G_s} k_s delta_s^T. */
static void hy_gdn_fold(const hy_gdn_slot_t *sl, int dk, int dv, int C)
{
    const float gl = sl->G[C - 1], gam = expf(gl);

    for (int s = 0; s < C; s++) {
        const float f = expf(gl - sl->G[s]);
        for (int i = 0; i < dk; i++)
            sl->KT[(size_t)i * C + s] *= f;
    }
    for (size_t e = 0; e < (size_t)dk * dv; e++)
        sl->S[e] *= gam;
    hy_gdn_gemm(dk, dv, C, sl->KT, C, sl->D, dv, sl->S, dv, 1);
}

/* Rows row0 .. row0+cnt-1 of the batch, block rows b0 .. b0+cnt-1 of the
 * head's current block: append them to the block, write their outputs,
 * and fold the block into S when its last row is among them. */
static void hy_gdn_block(const hy_gdn_slot_t *sl, const hy_gdn_job_t *j, const hy_gdn_scr_t *w,
                         int64_t row0, int b0, int cnt, int kh, int h)
{
    const int dk = j->d_k, dv = j->d_v, C = j->chunk, Hv = j->n_v_heads, b1 = b0 + cnt;
    const float *q0 = j->q + row0 * j->stride + (int64_t)kh * dk;
    const float *k0 = j->k + row0 * j->stride + (int64_t)kh * dk;
    float *restrict KT = sl->KT, *restrict D = sl->D, *restrict G = sl->G;
    float *Pq = w->P, *Pk = w->P + (size_t)C * dv, *Mq = w->M, *Mk = w->M + (size_t)C * C;

    for (int t = 0; t < cnt; t++) {
        const int64_t r = row0 + t;
        const float *k = k0 + (int64_t)t * j->stride;
        const int b = b0 + t;

        for (int i = 0; i < dk; i++)
            KT[(size_t)i * C + b] = k[i];
        G[b] = (b > 0 ? G[b - 1] : 0.0f) + j->g[r * Hv + h];
    }
    /* S0^T q, S0^T k, and the scores against the block's keys 0 .. b1-1
     * (a decode row: q and k in one pass; the same sums) */
    if (cnt == 1) {
        hy_gdn_gemv2(dv, dk, q0, k0, sl->S, dv, Pq, Pk);
        hy_gdn_gemv2(b1, dk, q0, k0, KT, C, Mq, Mk);
    } else {
        hy_gdn_gemm(cnt, dv, dk, q0, (int)j->stride, sl->S, dv, Pq, dv, 0);
        hy_gdn_gemm(cnt, dv, dk, k0, (int)j->stride, sl->S, dv, Pk, dv, 0);
        hy_gdn_gemm(cnt, b1, dk, q0, (int)j->stride, KT, C, Mq, C, 0);
        hy_gdn_gemm(cnt, b1, dk, k0, (int)j->stride, KT, C, Mk, C, 0);
    }

    for (int t = 0; t < cnt; t++) {
        const int64_t r = row0 + t;
        const int b = b0 + t;
        const float beta = j->beta[r * Hv + h], gam = expf(G[b]);
        const float *restrict v = j->v + r * j->stride + (int64_t)h * dv;
        const float *restrict pk = Pk + (size_t)t * dv, *restrict pq = Pq + (size_t)t * dv;
        const float *mk = Mk + (size_t)t * C, *mq = Mq + (size_t)t * C;
        float *restrict dt = D + (size_t)b * dv;
        float *restrict o = j->o + r * (int64_t)Hv * dv + (int64_t)h * dv;

        for (int s = 0; s <= b; s++)
            w->e[s] = expf(G[b] - G[s]);
        for (int jj = 0; jj < dv; jj++)
            dt[jj] = beta * (v[jj] - gam * pk[jj]);
        for (int s = 0; s < b; s++) {
            const float a = beta * w->e[s] * mk[s];
            const float *restrict ds = D + (size_t)s * dv;
            for (int jj = 0; jj < dv; jj++)
                dt[jj] -= a * ds[jj];
        }
        for (int jj = 0; jj < dv; jj++)
            o[jj] = gam * pq[jj];
        for (int s = 0; s <= b; s++) {
            const float a = mq[s] * w->e[s];
            const float *restrict ds = D + (size_t)s * dv;
            for (int jj = 0; jj < dv; jj++)
                o[jj] += a * ds[jj];
        }
    }
    if (b1 == C)
        hy_gdn_fold(sl, dk, dv, C);
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
    w.P = base;
    w.M = w.P + HY_GDN_PART((size_t)2 * C * dv);
    w.u = w.M + HY_GDN_PART((size_t)2 * C * C);
    w.e = w.u + HY_GDN_PART(dv);
#undef HY_GDN_PART

    while ((unit = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n_units) {
        const hy_batch_seq_t *sq = &j->b->seqs[unit / Hv];
        const int h = unit % Hv;
        const int kh = j->v_tiled ? h % j->n_k_heads : h / rep;
        float *st = hy_cpu_state_rec(j->cpu, sq->state_slot, j->rec_layer);
        float *S = st + (size_t)h * dk * dv;

        if (C <= 1) {
            for (int32_t t = 0; t < sq->n; t++) {
                const int64_t r = (int64_t)sq->first + t;
                hy_gdn_step(S, j->q + r * j->stride + (int64_t)kh * dk,
                            j->k + r * j->stride + (int64_t)kh * dk,
                            j->v + r * j->stride + (int64_t)h * dv, j->g[r * Hv + h],
                            j->beta[r * Hv + h], j->o + r * (int64_t)Hv * dv + (int64_t)h * dv,
                            w.u, dk, dv);
            }
        } else {
            /* blocks at absolute positions: the slot's block holds n_past % C rows */
            float *blk = st + (size_t)Hv * dk * dv + (size_t)h * C * (dk + dv + 1);
            const hy_gdn_slot_t sl = {S, blk, blk + (size_t)dk * C, blk + (size_t)(dk + dv) * C};

            for (int32_t t = 0; t < sq->n;) {
                const int b0 = (int)(((int64_t)sq->n_past + t) % C);
                const int cnt = HY_MIN(C - b0, sq->n - t);

                hy_gdn_block(&sl, j, &w, (int64_t)sq->first + t, b0, cnt, kh, h);
                t += cnt;
            }
        }
    }
}
