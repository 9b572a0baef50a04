/*
 * hy_lightning.h - the CUDA backend's lightning-attention algorithm
 * (backend/lightning.h gives the op, the slot layout and the arithmetic),
 * written once as block-cooperative code: the kernels in hy_rec.cu run it
 * with HY_LA_THREADS threads per block, and tests/cuda/test_lightning_chunk.c
 * runs the very same code on the host, one "thread" or several host threads
 * with a real barrier per block, against the CPU backend.  Threads
 * cooperate only through strided loops `for (e = tid; e < n; e += nth)`
 * separated by HY_LA_SYNC(), and within one phase no thread reads what
 * another writes.
 *
 * Every product and sum is rounded on its own (__fmul_rn / __fadd_rn on the
 * device, which nvcc never contracts into an FMA; plain * and + on the
 * host, built with -ffp-contract=off) in the order backend/lightning.h
 * writes down, and each output element is one thread's sum in that order,
 * reading the decay table the CPU reads (built at load, uploaded): the
 * device computes the CPU kernels' bits.
 *
 * A block owns one (sequence, head, tile of HY_LA_TV value columns).  The
 * value columns of S and V are independent, so tiles need not talk; the
 * keys of the current block are shared by all tiles of a head, which is
 * why no tile writes them back: hy_la_keys_back (a second launch, after
 * every tile has read them) stores the keys that stay pending.
 */
#ifndef HY_LIGHTNING_KERN_H
#define HY_LIGHTNING_KERN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define HY_LA_FN __device__ __forceinline__
#define HY_LA_HD __host__ __device__ __forceinline__
#define HY_LA_SYNC() __syncthreads()
#define HY_LA_MUL(a, b) __fmul_rn((a), (b))
#define HY_LA_ADD(a, b) __fadd_rn((a), (b))
#else
#define HY_LA_FN static inline
#define HY_LA_HD static inline
#ifndef HY_LA_SYNC /* a host test may run a block on threads with a real barrier */
#define HY_LA_SYNC() ((void)0)
#endif
#define HY_LA_MUL(a, b) ((a) * (b))
#define HY_LA_ADD(a, b) ((a) + (b))
#endif

#define HY_LA_THREADS 128 /* threads per block of the blocked kernel */
#define HY_LA_TV 32       /* value columns per block */

typedef struct {
    const float *q, *k, *v;   /* head h of row r at + r*row_stride + h*head_stride */
    int64_t row_stride, head_stride;
    const float *decay;       /* [n_head][chunk + 1]: lambda_h^n */
    float *o;                 /* [n_tok][n_head * d] */
    int32_t n_head, d, chunk; /* chunk >= 2 for hy_la_block */
} hy_la_args_t;

/* Floats a head keeps in the slot (backend/lightning.h's layout). */
HY_LA_HD int64_t hy_la_head_floats(int d, int C)
{
    return (int64_t)d * d + (C > 1 ? 2 * (int64_t)C * d : 0);
}

/* Shared-memory floats of one block of hy_la_block. */
HY_LA_HD size_t hy_la_smem_floats(int d, int C)
{
    return (size_t)d * HY_LA_TV + (size_t)d * C + (size_t)C * HY_LA_TV + (size_t)C * d +
           (size_t)C * C + (size_t)C + 1;
}

/* The blocked form for one (sequence, head h, value columns j0..j0+tv-1)
 * over the sequence's rows row0..row0+n-1 at positions n_past..  St is the
 * head's state in the slot: S [d][d], KT [d][C], V [C][d].  Shared memory
 * (floats): S tile [d][TV] | K [d][C] (the block's keys, transposed) |
 * V tile [C][TV] | Q [C][d] | W [C][C] (decayed scores) | lam [C+1]. */
HY_LA_FN void hy_la_block(const hy_la_args_t *a, int64_t row0, int n, int64_t n_past, float *St,
                          int h, int j0, int tv, float *sm, int tid, int nth)
{
    const int d = a->d, C = a->chunk, TV = HY_LA_TV;
    const int64_t ldo = (int64_t)a->n_head * d;
    float *KTg = St + (size_t)d * d, *Vg = KTg + (size_t)d * C;
    float *S = sm, *K = S + (size_t)d * TV, *V = K + (size_t)d * C, *Q = V + (size_t)C * TV;
    float *W = Q + (size_t)C * d, *lam = W + (size_t)C * C;
    int m = (int)(n_past % C), done = 0;

    /* the entering state: S tile, decay table, the block's pending rows */
    for (int e = tid; e < d * tv; e += nth) {
        const int i = e / tv, j = e % tv;
        S[i * TV + j] = St[(int64_t)i * d + j0 + j];
    }
    for (int e = tid; e <= C; e += nth)
        lam[e] = a->decay[(int64_t)h * (C + 1) + e];
    for (int e = tid; e < d * m; e += nth) {
        const int i = e / m, r = e % m;
        K[i * C + r] = KTg[(int64_t)i * C + r];
    }
    for (int e = tid; e < m * tv; e += nth) {
        const int r = e / tv, j = e % tv;
        V[r * TV + j] = Vg[(int64_t)r * d + j0 + j];
    }
    while (done < n) {
        const int b0 = m, b1 = C < m + (n - done) ? C : m + (n - done);
        const int64_t r0 = row0 + done - b0; /* batch row of the block's row 0 */

        HY_LA_SYNC(); /* the previous phase's readers are done */
        /* 1. the new rows b0..b1-1 of the block */
        for (int e = tid; e < (b1 - b0) * d; e += nth) {
            const int t = b0 + e / d, i = e % d;
            const int64_t off = (r0 + t) * a->row_stride + (int64_t)h * a->head_stride + i;
            K[i * C + t] = a->k[off];
            Q[t * d + i] = a->q[off];
        }
        for (int e = tid; e < (b1 - b0) * tv; e += nth) {
            const int t = b0 + e / tv, j = e % tv;
            V[t * TV + j] =
                a->v[(r0 + t) * a->row_stride + (int64_t)h * a->head_stride + j0 + j];
        }
        HY_LA_SYNC();
        /* 2. decayed scores W[t][r] = (q_t . k_r) lam[t-r], r <= t */
        for (int e = tid; e < (b1 - b0) * C; e += nth) {
            const int t = b0 + e / C, r = e % C;
            float x = 0.0f;
            if (r > t)
                continue;
            for (int i = 0; i < d; i++)
                x = HY_LA_ADD(x, HY_LA_MUL(Q[t * d + i], K[i * C + r]));
            W[t * C + r] = HY_LA_MUL(x, lam[t - r]);
        }
        HY_LA_SYNC();
        /* 3. outputs: (q_t S) lam[t+1] + sum_{r<=t} W[t][r] V[r] */
        for (int e = tid; e < (b1 - b0) * tv; e += nth) {
            const int t = b0 + e / tv, j = e % tv;
            float x = 0.0f;
            for (int i = 0; i < d; i++)
                x = HY_LA_ADD(x, HY_LA_MUL(Q[t * d + i], S[i * TV + j]));
            x = HY_LA_MUL(x, lam[t + 1]);
            for (int r = 0; r <= t; r++)
                x = HY_LA_ADD(x, HY_LA_MUL(W[t * C + r], V[r * TV + j]));
            a->o[(r0 + t) * ldo + (int64_t)h * d + j0 + j] = x;
        }
        /* 4. a complete block folds into S */
        if (b1 == C) {
            HY_LA_SYNC(); /* step 3 read S */
            for (int e = tid; e < d * tv; e += nth) {
                const int i = e / tv, j = e % tv;
                float x = HY_LA_MUL(S[i * TV + j], lam[C]);
                for (int r = 0; r < C; r++)
                    x = HY_LA_ADD(x, HY_LA_MUL(HY_LA_MUL(K[i * C + r], lam[C - 1 - r]),
                                               V[r * TV + j]));
                S[i * TV + j] = x;
            }
        }
        m = b1 == C ? 0 : b1;
        done += b1 - b0;
    }
    HY_LA_SYNC();
    for (int e = tid; e < d * tv; e += nth) {
        const int i = e / tv, j = e % tv;
        St[(int64_t)i * d + j0 + j] = S[i * TV + j];
    }
    for (int e = tid; e < m * tv; e += nth) {
        const int r = e / tv, j = e % tv;
        Vg[(int64_t)r * d + j0 + j] = V[r * TV + j];
    }
}

/* After every tile of (sequence, head) ran hy_la_block: the keys of this
 * call's rows that are still in the current block go to KT.  Element e of
 * d * min(n, pending) (thread-strided by the caller). */
HY_LA_FN void hy_la_keys_back(const hy_la_args_t *a, int64_t row0, int n, int64_t n_past,
                              float *St, int h, int e)
{
    const int d = a->d, C = a->chunk;
    const int pend = (int)((n_past + n) % C), keep = pend < n ? pend : n;
    const int t = n - keep + e / d, i = e % d; /* row t of the call */
    float *KTg = St + (size_t)d * d;

    KTg[(int64_t)i * C + (int)((n_past + t) % C)] =
        a->k[(row0 + t) * a->row_stride + (int64_t)h * a->head_stride + i];
}

/* The chunk-1 recurrence for value column j of head h over rows
 * row0..row0+n-1: S = S lam1 + k v^T, o = S^T q.  qk holds q_t then k_t
 * (2d floats, staged by the caller: it is the same for every column). */
HY_LA_FN void hy_la_rec_column(float *S, const float *qk, float v, float lam1, int d, int j,
                               float *out)
{
    float x = 0.0f;

    for (int i = 0; i < d; i++) {
        const float s = HY_LA_ADD(HY_LA_MUL(S[(int64_t)i * d + j], lam1), HY_LA_MUL(qk[d + i], v));
        S[(int64_t)i * d + j] = s;
        x = HY_LA_ADD(x, HY_LA_MUL(s, qk[i]));
    }
    *out = x;
}

#endif
