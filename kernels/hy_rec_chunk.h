/*
 * hy_rec_chunk.h - the chunked (prefill) forms of the Gated DeltaNet and
 * Mamba-2 SSD recurrences, written once as block-cooperative code: the
 * CUDA kernels in hy_rec.cu run it with 256 threads per block, and a host
 * build runs the very same code with one "thread" (barriers empty) or a
 * few host threads and a real barrier, which is how
 * tests/cuda/test_rec_chunk.c checks the algorithm, its work split, the
 * shared-memory layout and every index against the CPU backend on a
 * machine without a GPU.  The rules that make the two runs agree: threads
 * cooperate only through strided loops `for (e = tid; e < n; e += nth)`
 * separated by HY_RC_SYNC(), and within one such phase no thread reads a
 * shared element another thread writes.
 *
 * Both forms follow the CPU kernels (src/backend/cpu/gdn_kern.h,
 * ssd_kern.h) product for product and in the same summation order, so
 * the GPU and the CPU differ by FMA contraction and expf ulps only.
 */
#ifndef HY_REC_CHUNK_H
#define HY_REC_CHUNK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define HY_RC_FN __device__ __forceinline__
#define HY_RC_HD __host__ __device__ __forceinline__
#define HY_RC_SYNC() __syncthreads()
#else
#define HY_RC_FN static inline
#define HY_RC_HD static inline
#ifndef HY_RC_SYNC /* a host test may run blocks on threads with a real barrier */
#define HY_RC_SYNC() ((void)0)
#endif
#endif

#define HY_RC_THREADS 256     /* threads per block of the chunked kernels */
#define HY_RC_MAX_CHUNK 64    /* rows per chunk at most (chunk params above it are cut) */
#define HY_RC_MAX_DIM 256     /* largest d_k (GDN) / d_state (SSD) of the chunked form */
#define HY_RC_GDN_TV 32       /* GDN value columns per block (columns are independent) */
#define HY_RC_SSD_TP 32       /* SSD head rows per block (rows are independent) */
#define HY_RC_SUB 8           /* rows per diagonal block of the forward substitution */
/* Runs shorter than these take the exact recurrence, as on the CPU
 * (gdn_kern.h: n == 1; ssd.h: HY_SSD_MIN_CHUNKED). */
#define HY_RC_GDN_MIN_ROWS 2
#define HY_RC_SSD_MIN_ROWS 4

/* ---- planning (host and device) ---------------------------------------------- */

/* The chunk length the kernels use for the op's chunk parameter: 0 when
 * the op asks for the exact recurrence (chunk <= 1). */
HY_RC_HD int hy_rc_chunk_len(int chunk)
{
    return chunk <= 1 ? 0 : chunk > HY_RC_MAX_CHUNK ? HY_RC_MAX_CHUNK : chunk;
}

/* Shared-memory floats of one GDN block (layout in hy_rc_gdn_block). */
HY_RC_HD size_t hy_rc_gdn_smem_floats(int C, int dk)
{
    return 2 * (size_t)C * (size_t)(dk + 1) + (size_t)dk * HY_RC_GDN_TV +
           2 * (size_t)C * (size_t)C + (size_t)C * HY_RC_GDN_TV + 4 * (size_t)C;
}

/* Shared-memory floats of one SSD block (layout in hy_rc_ssd_block). */
HY_RC_HD size_t hy_rc_ssd_smem_floats(int C, int N)
{
    return 2 * (size_t)C * (size_t)(N + 1) + (size_t)HY_RC_SSD_TP * (size_t)(N + 1) +
           (size_t)C * (size_t)C + (size_t)C * HY_RC_SSD_TP + 4 * (size_t)C;
}

/* Bytes of shared memory the chunked form needs for (chunk param, dim), or
 * 0 when it does not apply (chunk <= 1, dim outside 1..HY_RC_MAX_DIM) or
 * does not fit `optin` bytes per block; then the op runs the recurrence. */
HY_RC_HD size_t hy_rc_plan_smem(int is_ssd, int chunk, int dim, size_t optin)
{
    const int C = hy_rc_chunk_len(chunk);
    size_t need;

    if (C == 0 || dim < 1 || dim > HY_RC_MAX_DIM)
        return 0;
    need = sizeof(float) * (is_ssd ? hy_rc_ssd_smem_floats(C, dim) : hy_rc_gdn_smem_floats(C, dim));
    return need <= optin ? need : 0;
}

/* Rows of a register tile: products whose operand row is shared (a state
 * column, a value column) give each thread HY_RC_R output rows, so one
 * load of the shared operand feeds HY_RC_R multiply-adds. */
#define HY_RC_R 4
/* The triangular products' tiles: HY_RC_R rows by HY_RC_R columns
 * s = sl + HY_RC_SL * c, interleaved so that the lanes of a warp read
 * consecutive rows (distinct banks); HY_RC_SL * HY_RC_R covers a chunk. */
#define HY_RC_SL (HY_RC_MAX_CHUNK / HY_RC_R)

/* ---- Gated DeltaNet --------------------------------------------------------------- */

typedef struct {
    const float *q, *k, *v;   /* rows of `stride` floats; k-head kh at kh*dk, v-head h at h*dv */
    int64_t stride;
    const float *g, *beta;    /* [n_tok][Hv] log decay, beta */
    float *o;                 /* [n_tok][Hv * dv] */
    int32_t Hv, dk, dv;
    int32_t chunk;            /* hy_rc_chunk_len(): 2..HY_RC_MAX_CHUNK */
} hy_rc_gdn_t;

/* One (sequence, v-head h, value tile j0..j0+tv-1) over rows row0..row0+n-1,
 * chunk after chunk, the state tile held in shared memory throughout.  Sg
 * is the head's state in the slot, S[i][j] at Sg[i*dv + j].  Per chunk of m
 * rows (G_t = sum_{s<=t} g_s, gamma_t = exp(G_t), see gdn_kern.h):
 *   D = beta (V - gamma K S0) solved by (I + A) D = R, A[t][s] = beta_t e^{G_t-G_s} k_t.k_s
 *   O_t = gamma_t q_t S0 + sum_{s<=t} e^{G_t-G_s} (q_t.k_s) D_s
 *   S  = gamma_{m-1} S0 + sum_s e^{G_{m-1}-G_s} k_s D_s^T
 * Shared memory (floats): Q, K [C][dk+1] (odd stride: rows read across
 * threads do not collide in one bank) | S [dk][TV] | A, QK [C][C] |
 * D [C][TV] | G, beta, gamma, wl [C]. */
HY_RC_FN void hy_rc_gdn_block(const hy_rc_gdn_t *a, int64_t row0, int n, float *Sg, int kh,
                              int h, int j0, int tv, float *sm, int tid, int nth)
{
    const int C = a->chunk, dk = a->dk, dv = a->dv, Hv = a->Hv, ldk = dk + 1;
    const int TV = HY_RC_GDN_TV;
    const int64_t ldo = (int64_t)Hv * dv, st = a->stride;
    float *Q = sm, *K = Q + (size_t)C * ldk, *S = K + (size_t)C * ldk;
    float *Am = S + (size_t)dk * TV, *QK = Am + (size_t)C * C, *D = QK + (size_t)C * C;
    float *G = D + (size_t)C * TV, *bt = G + C, *gam = bt + C, *wl = gam + C;

    for (int e = tid; e < dk * tv; e += nth) {
        const int i = e / tv, j = e % tv;
        S[i * TV + j] = Sg[(int64_t)i * dv + j0 + j];
    }
    for (int c0 = 0; c0 < n; c0 += C) {
        const int m = n - c0 < C ? n - c0 : C;
        const int64_t r0 = row0 + c0;

        HY_RC_SYNC(); /* the previous chunk's readers are done */
        /* 1. the chunk's rows; G by one thread, in the CPU's order */
        for (int e = tid; e < m * dk; e += nth) {
            const int t = e / dk, i = e % dk;
            const int64_t r = r0 + t;
            Q[t * ldk + i] = a->q[r * st + (int64_t)kh * dk + i];
            K[t * ldk + i] = a->k[r * st + (int64_t)kh * dk + i];
        }
        for (int e = tid; e < m * tv; e += nth) {
            const int t = e / tv, j = e % tv;
            D[t * TV + j] = a->v[(r0 + t) * st + (int64_t)h * dv + j0 + j];
        }
        for (int t = tid; t < m; t += nth)
            bt[t] = a->beta[(r0 + t) * Hv + h];
        if (tid == 0) {
            float acc = 0.0f;
            for (int t = 0; t < m; t++) {
                acc += a->g[(r0 + t) * Hv + h];
                G[t] = acc;
            }
        }
        HY_RC_SYNC();
        /* 2. A (s < t) and decay-weighted QK (s <= t); R = beta (v - gamma K S0)
         * into D (each thread its own (t, j)); gamma and wl for later */
        for (int e = tid; e < (m + HY_RC_R - 1) / HY_RC_R * HY_RC_SL; e += nth) {
            const int t0 = e / HY_RC_SL * HY_RC_R, sl = e % HY_RC_SL;
            float qk[HY_RC_R][HY_RC_R] = {{0.0f}}, kk[HY_RC_R][HY_RC_R] = {{0.0f}};
            if (sl >= m || sl > t0 + HY_RC_R - 1)
                continue; /* no s <= t in this tile */
            for (int i = 0; i < dk; i++) {
                float qt[HY_RC_R], kt[HY_RC_R], ks[HY_RC_R];
                for (int r = 0; r < HY_RC_R; r++) {
                    const int t = t0 + r, s = sl + HY_RC_SL * r;
                    qt[r] = t < m ? Q[t * ldk + i] : 0.0f;
                    kt[r] = t < m ? K[t * ldk + i] : 0.0f;
                    ks[r] = s < m ? K[s * ldk + i] : 0.0f;
                }
                for (int r = 0; r < HY_RC_R; r++)
                    for (int c = 0; c < HY_RC_R; c++) {
                        qk[r][c] += qt[r] * ks[c];
                        kk[r][c] += kt[r] * ks[c];
                    }
            }
            for (int r = 0; r < HY_RC_R; r++)
                for (int c = 0; c < HY_RC_R; c++) {
                    const int t = t0 + r, s = sl + HY_RC_SL * c;
                    if (t < m && s <= t) {
                        QK[t * C + s] = qk[r][c] * expf(G[t] - G[s]);
                        Am[t * C + s] = bt[t] * expf(G[t] - G[s]) * kk[r][c];
                    }
                }
        }
        for (int e = tid; e < (m + HY_RC_R - 1) / HY_RC_R * tv; e += nth) {
            const int t0 = e / tv * HY_RC_R, j = e % tv;
            const int nr = m - t0 < HY_RC_R ? m - t0 : HY_RC_R;
            float pk[HY_RC_R] = {0.0f};
            for (int i = 0; i < dk; i++) {
                const float sv = S[i * TV + j];
                for (int r = 0; r < HY_RC_R; r++)
                    if (r < nr)
                        pk[r] += K[(t0 + r) * ldk + i] * sv;
            }
            for (int r = 0; r < nr; r++) {
                const int t = t0 + r;
                D[t * TV + j] = bt[t] * (D[t * TV + j] - expf(G[t]) * pk[r]);
            }
        }
        for (int t = tid; t < m; t += nth) {
            gam[t] = expf(G[t]);
            wl[t] = expf(G[m - 1] - G[t]);
        }
        HY_RC_SYNC();
        /* 3. forward substitution D_t -= sum_{s<t} A[t][s] D_s, s ascending as
         * on the CPU: a diagonal block of HY_RC_SUB rows column by column
         * (one thread per column), then every row below it at once */
        for (int b0 = 0; b0 < m; b0 += HY_RC_SUB) {
            const int b1 = b0 + HY_RC_SUB < m ? b0 + HY_RC_SUB : m;
            for (int j = tid; j < tv; j += nth)
                for (int t = b0 + 1; t < b1; t++) {
                    float d = D[t * TV + j];
                    for (int s = b0; s < t; s++)
                        d -= Am[t * C + s] * D[s * TV + j];
                    D[t * TV + j] = d;
                }
            HY_RC_SYNC();
            for (int e = tid; e < (m - b1) * tv; e += nth) {
                const int t = b1 + e / tv, j = e % tv;
                float d = D[t * TV + j];
                for (int s = b0; s < b1; s++)
                    d -= Am[t * C + s] * D[s * TV + j];
                D[t * TV + j] = d;
            }
            HY_RC_SYNC();
        }
        /* 4. outputs: gamma_t q_t S0 + sum_{s<=t} QK[t][s] D_s */
        for (int e = tid; e < (m + HY_RC_R - 1) / HY_RC_R * tv; e += nth) {
            const int t0 = e / tv * HY_RC_R, j = e % tv;
            const int nr = m - t0 < HY_RC_R ? m - t0 : HY_RC_R;
            float acc[HY_RC_R] = {0.0f};
            for (int i = 0; i < dk; i++) {
                const float sv = S[i * TV + j];
                for (int r = 0; r < HY_RC_R; r++)
                    if (r < nr)
                        acc[r] += Q[(t0 + r) * ldk + i] * sv;
            }
            for (int r = 0; r < HY_RC_R; r++)
                if (r < nr)
                    acc[r] *= gam[t0 + r];
            for (int s = 0; s < t0 + nr; s++) {
                const float ds = D[s * TV + j];
                for (int r = 0; r < HY_RC_R; r++)
                    if (r < nr && s <= t0 + r)
                        acc[r] += QK[(t0 + r) * C + s] * ds;
            }
            for (int r = 0; r < nr; r++)
                a->o[(r0 + t0 + r) * ldo + (int64_t)h * dv + j0 + j] = acc[r];
        }
        HY_RC_SYNC(); /* step 4 read S */
        /* 5. the state the next chunk enters with */
        for (int e = tid; e < (dk + HY_RC_R - 1) / HY_RC_R * tv; e += nth) {
            const int i0 = e / tv * HY_RC_R, j = e % tv;
            const int nr = dk - i0 < HY_RC_R ? dk - i0 : HY_RC_R;
            float acc[HY_RC_R];
            for (int r = 0; r < HY_RC_R; r++)
                acc[r] = r < nr ? S[(i0 + r) * TV + j] * gam[m - 1] : 0.0f;
            for (int s = 0; s < m; s++) {
                const float ds = D[s * TV + j], w = wl[s];
                for (int r = 0; r < HY_RC_R; r++)
                    if (r < nr)
                        acc[r] += (K[s * ldk + i0 + r] * w) * ds;
            }
            for (int r = 0; r < nr; r++)
                S[(i0 + r) * TV + j] = acc[r];
        }
    }
    HY_RC_SYNC();
    for (int e = tid; e < dk * tv; e += nth) {
        const int i = e / tv, j = e % tv;
        Sg[(int64_t)i * dv + j0 + j] = S[i * TV + j];
    }
}

/* ---- Mamba-2 SSD -------------------------------------------------------------------- */

HY_RC_HD float hy_rc_softplus(float v)
{
    /* torch's threshold 20, as the CPU's hy_ssd_softplus */
    return v > 20.0f ? v : log1pf(expf(v));
}

typedef struct {
    const float *x;           /* rows of x_stride floats, head h at h*P */
    int64_t x_stride;
    const float *dt;          /* raw dt, rows of dt_stride floats, head h at h */
    int64_t dt_stride;
    const float *dt_bias, *A, *D; /* [n_head]; D may be NULL */
    const float *Bm, *Cm;     /* rows of bc_stride floats, group g at g*N */
    int64_t bc_stride;
    float *y;                 /* [n_tok][n_head * P] */
    int32_t n_head, P, N;
    int32_t chunk;            /* hy_rc_chunk_len(): 2..HY_RC_MAX_CHUNK */
} hy_rc_ssd_t;

/* One (sequence, head h of group grp, head rows p0..p0+tp-1) over rows
 * row0..row0+n-1.  Sg is the head's state in the slot, S[p][n] at
 * Sg[p*N + n].  Per chunk of m rows (cum_i = sum_{k<=i} dt_k A, see
 * ssd_kern.h):
 *   Y_i = sum_{k<=i} (C_i.B_k) e^{cum_i-cum_k} dt_k x_k + e^{cum_i} S0 C_i + D x_i
 *   S   = e^{cum_{m-1}} S0 + sum_k x_k (e^{cum_{m-1}-cum_k} dt_k B_k)^T
 * Shared memory (floats): B, C [C][N+1] | S [TP][N+1] (odd strides: rows
 * read across threads fall in distinct banks) | Gm [C][C] | X [C][TP] |
 * cum, dt, e^cum, w [C]. */
HY_RC_FN void hy_rc_ssd_block(const hy_rc_ssd_t *a, int64_t row0, int n, float *Sg, int h,
                              int grp, int p0, int tp, float *sm, int tid, int nth)
{
    const int Q = a->chunk, N = a->N, P = a->P, ldn = N + 1, TP = HY_RC_SSD_TP;
    const int64_t ldy = (int64_t)a->n_head * P;
    const float Ah = a->A[h], Dh = a->D ? a->D[h] : 0.0f, bias = a->dt_bias[h];
    float *Bc = sm, *Cc = Bc + (size_t)Q * ldn, *S = Cc + (size_t)Q * ldn;
    float *Gm = S + (size_t)TP * ldn, *X = Gm + (size_t)Q * Q, *cum = X + (size_t)Q * TP;
    float *dtv = cum + Q, *ec = dtv + Q, *wv = ec + Q;

    for (int e = tid; e < tp * N; e += nth) {
        const int p = e / N, k = e % N;
        S[p * ldn + k] = Sg[(int64_t)(p0 + p) * N + k];
    }
    for (int c0 = 0; c0 < n; c0 += Q) {
        const int m = n - c0 < Q ? n - c0 : Q;
        const int64_t r0 = row0 + c0;

        HY_RC_SYNC(); /* the previous chunk's readers are done */
        /* 1. the chunk's rows; dt and cum by one thread, in the CPU's order */
        for (int e = tid; e < m * N; e += nth) {
            const int i = e / N, k = e % N;
            const int64_t off = (r0 + i) * a->bc_stride + (int64_t)grp * N + k;
            Bc[i * ldn + k] = a->Bm[off];
            Cc[i * ldn + k] = a->Cm[off];
        }
        for (int e = tid; e < m * tp; e += nth) {
            const int i = e / tp, p = e % tp;
            X[i * TP + p] = a->x[(r0 + i) * a->x_stride + (int64_t)h * P + p0 + p];
        }
        if (tid == 0) {
            float run = 0.0f;
            for (int i = 0; i < m; i++) {
                const float d = hy_rc_softplus(a->dt[(r0 + i) * a->dt_stride + h] + bias);
                dtv[i] = d;
                run += d * Ah;
                cum[i] = run;
            }
        }
        HY_RC_SYNC();
        /* 2. Gm = (C B^T) o L diag(dt) on the lower triangle; the row weights */
        for (int e = tid; e < (m + HY_RC_R - 1) / HY_RC_R * HY_RC_SL; e += nth) {
            const int i0 = e / HY_RC_SL * HY_RC_R, kl = e % HY_RC_SL;
            float cb[HY_RC_R][HY_RC_R] = {{0.0f}};
            if (kl >= m || kl > i0 + HY_RC_R - 1)
                continue; /* no k <= i in this tile */
            for (int l = 0; l < N; l++) {
                float ci[HY_RC_R], bk[HY_RC_R];
                for (int r = 0; r < HY_RC_R; r++) {
                    const int i = i0 + r, k = kl + HY_RC_SL * r;
                    ci[r] = i < m ? Cc[i * ldn + l] : 0.0f;
                    bk[r] = k < m ? Bc[k * ldn + l] : 0.0f;
                }
                for (int r = 0; r < HY_RC_R; r++)
                    for (int c = 0; c < HY_RC_R; c++)
                        cb[r][c] += ci[r] * bk[c];
            }
            for (int r = 0; r < HY_RC_R; r++)
                for (int c = 0; c < HY_RC_R; c++) {
                    const int i = i0 + r, k = kl + HY_RC_SL * c;
                    if (i < m && k <= i)
                        Gm[i * Q + k] = cb[r][c] * (expf(cum[i] - cum[k]) * dtv[k]);
                }
        }
        for (int i = tid; i < m; i += nth) {
            ec[i] = expf(cum[i]);
            wv[i] = expf(cum[m - 1] - cum[i]) * dtv[i];
        }
        HY_RC_SYNC();
        /* 3. outputs: intra-chunk part, then the entering state's part */
        for (int e = tid; e < (m + HY_RC_R - 1) / HY_RC_R * tp; e += nth) {
            const int i0 = e / tp * HY_RC_R, p = e % tp;
            const int nr = m - i0 < HY_RC_R ? m - i0 : HY_RC_R;
            float acc[HY_RC_R] = {0.0f}, er[HY_RC_R];
            for (int r = 0; r < HY_RC_R; r++)
                er[r] = r < nr ? ec[i0 + r] : 0.0f;
            for (int k = 0; k < i0 + nr; k++) {
                const float xv = X[k * TP + p];
                for (int r = 0; r < HY_RC_R; r++)
                    if (r < nr && k <= i0 + r)
                        acc[r] += Gm[(i0 + r) * Q + k] * xv;
            }
            for (int l = 0; l < N; l++) {
                const float sv = S[p * ldn + l];
                for (int r = 0; r < HY_RC_R; r++)
                    if (r < nr)
                        acc[r] += (Cc[(i0 + r) * ldn + l] * er[r]) * sv;
            }
            for (int r = 0; r < nr; r++)
                a->y[(r0 + i0 + r) * ldy + (int64_t)h * P + p0 + p] =
                    acc[r] + Dh * X[(i0 + r) * TP + p];
        }
        HY_RC_SYNC(); /* step 3 read S */
        /* 4. the state the next chunk enters with */
        for (int e = tid; e < (tp + HY_RC_R - 1) / HY_RC_R * N; e += nth) {
            const int q0 = e / N * HY_RC_R, l = e % N;
            const int nr = tp - q0 < HY_RC_R ? tp - q0 : HY_RC_R;
            float acc[HY_RC_R];
            for (int r = 0; r < HY_RC_R; r++)
                acc[r] = r < nr ? S[(q0 + r) * ldn + l] * ec[m - 1] : 0.0f;
            for (int k = 0; k < m; k++) {
                const float bw = Bc[k * ldn + l] * wv[k];
                for (int r = 0; r < HY_RC_R; r++)
                    if (r < nr)
                        acc[r] += bw * X[k * TP + q0 + r];
            }
            for (int r = 0; r < nr; r++)
                S[(q0 + r) * ldn + l] = acc[r];
        }
    }
    HY_RC_SYNC();
    for (int e = tid; e < tp * N; e += nth) {
        const int p = e / N, k = e % N;
        Sg[(int64_t)(p0 + p) * N + k] = S[p * ldn + k];
    }
}

#endif
