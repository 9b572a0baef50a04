/*
 * hy_moe_route.h - one token's MoE routing (softmax or sigmoid gating,
 * selection bias, top-k, renormalisation, scale: see hy_moe_t), written once
 * as block-cooperative code.  The CUDA kernel in hy_moe.cu runs it with one
 * warp per token (HY_MR_LANES partial slots, one per lane); a host build runs
 * the very same code with one "thread" (barriers empty) or a few threads and
 * a real barrier, which is how tests/cuda/test_moe_route.c checks it against
 * the CPU backend's hy_moe_route_one without a GPU.  With one partial slot
 * (P = 1) every sum runs in the CPU's order, so the result is bit-identical;
 * with 32 slots the softmax denominator is summed in another order (ids
 * still exact, weights within an ulp or two).  Threads cooperate only through
 * strided loops separated by HY_MR_SYNC(), and no phase reads a field of
 * `part` that another thread writes in that same phase.
 */
#ifndef HY_MOE_ROUTE_H
#define HY_MOE_ROUTE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define HY_MR_FN __device__ __forceinline__
#define HY_MR_HD __host__ __device__ __forceinline__
#define HY_MR_SYNC() __syncthreads()
#else
#define HY_MR_FN static inline
#define HY_MR_HD static inline
#ifndef HY_MR_SYNC /* a host test may run the threads of a block with a real barrier */
#define HY_MR_SYNC() ((void)0)
#endif
#endif

#define HY_MR_LANES 32          /* threads (and partial slots) per token on the device */
#define HY_MR_MAX_EXPERT 4096   /* shared memory: 5 bytes per expert + the slots */
#define HY_MR_MAX_USED 64       /* experts chosen per token at most */

/* The routing rule of hy_moe_t, without its weights. */
typedef struct {
    int32_t n_expert, n_used;
    int32_t softmax;        /* softmax over all experts, else sigmoid */
    int32_t norm_topk;      /* divide the chosen weights by (their sum + norm_eps) */
    float weights_scale;    /* 0 means 1, as on the CPU */
    float norm_eps;
} hy_mr_params_t;

/* One partial slot: the max and the softmax denominator over experts
 * e = slot (mod P), and the best candidate among them in a top-k round. */
typedef struct {
    double d;       /* partial denominator */
    float f;        /* partial max */
    float s;        /* candidate's selection score */
    int32_t e;      /* candidate's expert (-1: none) */
    int32_t cls;    /* 0 none, 1 a number, 2 a NaN score the CPU's scan would keep */
} hy_mr_part_t;

/* Bytes of shared memory one token's block needs: the slots, p and taken. */
HY_MR_HD size_t hy_mr_smem_bytes(int32_t n_expert, int P)
{
    return sizeof(hy_mr_part_t) * (size_t)P + sizeof(float) * (size_t)n_expert +
           (size_t)n_expert;
}

/* Is candidate a chosen over b?  The CPU scans experts in id order keeping
 * the first strictly larger score: so among numbers the larger score wins
 * and equal scores go to the lower id; a NaN score is kept only when it is
 * the lowest expert not yet taken (the scan's starting point, which nothing
 * compares larger than), and is never picked up later.  Class 2 marks that
 * one NaN; the order is total, so any reduction tree gives the scan's choice. */
HY_MR_FN int hy_mr_better(int ca, float sa, int32_t ea, int cb, float sb, int32_t eb)
{
    if (ca != cb)
        return ca > cb;
    if (ca != 1)
        return ca == 2 && ea < eb;
    if (sa != sb)
        return sa > sb;
    return ea < eb;
}

/* Routes one token: l = its n_expert router logits, bias = selection bias
 * or NULL; p (n_expert floats), taken (n_expert bytes) and part (P slots, P a
 * power of two) are the block's scratch; sel / w (n_used each) receive the
 * chosen experts, best first, and their weights.  Thread tid of nth. */
HY_MR_FN void hy_mr_route(const hy_mr_params_t *m, const float *l, const float *bias, float *p,
                          uint8_t *taken, hy_mr_part_t *part, int P, int tid, int nth,
                          int32_t *sel, float *w)
{
    const int32_t E = m->n_expert, K = m->n_used;
    const float scale = m->weights_scale != 0.0f ? m->weights_scale : 1.0f;

    if (m->softmax) {
        float mx;
        double z;

        /* max: exact in any order; fmaxf skips NaN as the CPU's `>` does,
         * except that a NaN first logit stays the CPU's max */
        for (int s = tid; s < P; s += nth) {
            float v = -INFINITY;
            for (int32_t e = s; e < E; e += P)
                v = fmaxf(v, l[e]);
            part[s].f = v;
        }
        HY_MR_SYNC();
        for (int step = P / 2; step >= 1; step /= 2) {
            for (int i = tid; i < step; i += nth)
                part[i].f = fmaxf(part[i].f, part[i + step].f);
            HY_MR_SYNC();
        }
        mx = l[0] != l[0] ? l[0] : part[0].f;
        for (int32_t e = tid; e < E; e += nth)
            p[e] = expf(l[e] - mx);
        HY_MR_SYNC();
        /* the denominator in double, each slot in id order */
        for (int s = tid; s < P; s += nth) {
            double v = 0;
            for (int32_t e = s; e < E; e += P)
                v += p[e];
            part[s].d = v;
        }
        HY_MR_SYNC();
        for (int step = P / 2; step >= 1; step /= 2) {
            for (int i = tid; i < step; i += nth)
                part[i].d = part[i].d + part[i + step].d;
            HY_MR_SYNC();
        }
        z = part[0].d;
        for (int32_t e = tid; e < E; e += nth) {
            p[e] = (float)(p[e] / z);
            taken[e] = 0;
        }
    } else {
        for (int32_t e = tid; e < E; e += nth) {
            p[e] = 1.0f / (1.0f + expf(-l[e]));
            taken[e] = 0;
        }
    }
    HY_MR_SYNC();

    /* top-k: K rounds of an arg-max over the experts not yet taken */
    for (int32_t k = 0; k < K; k++) {
        int32_t first = 0;

        while (first < E - 1 && taken[first])
            first++;
        for (int s = tid; s < P; s += nth) {
            int c = 0;
            float bs = 0.0f;
            int32_t be = -1;
            for (int32_t e = s; e < E; e += P) {
                float sc;
                int ce;
                if (taken[e])
                    continue;
                sc = bias ? p[e] + bias[e] : p[e];
                ce = sc != sc ? (e == first ? 2 : 0) : 1;
                if (ce != 0 && hy_mr_better(ce, sc, e, c, bs, be)) {
                    c = ce;
                    bs = sc;
                    be = e;
                }
            }
            part[s].cls = c;
            part[s].s = bs;
            part[s].e = be;
        }
        HY_MR_SYNC();
        for (int step = P / 2; step >= 1; step /= 2) {
            for (int i = tid; i < step; i += nth)
                if (hy_mr_better(part[i + step].cls, part[i + step].s, part[i + step].e,
                                 part[i].cls, part[i].s, part[i].e)) {
                    part[i].cls = part[i + step].cls;
                    part[i].s = part[i + step].s;
                    part[i].e = part[i + step].e;
                }
            HY_MR_SYNC();
        }
        if (tid == 0) {
            /* a slot always holds the lowest untaken expert's class 1 or 2 */
            int32_t b = part[0].e >= 0 ? part[0].e : first;
            taken[b] = 1;
            sel[k] = b;
            w[k] = p[b];
        }
        HY_MR_SYNC();
    }

    if (tid == 0) {
        double sum = 0;

        for (int32_t k = 0; k < K; k++)
            sum += w[k];
        for (int32_t k = 0; k < K; k++) {
            if (m->norm_topk)
                w[k] = (float)(w[k] / (sum + m->norm_eps));
            w[k] *= scale;
        }
    }
}

/* ---- the indexed mat-vec's work split (host and device) -------------------- */

#define HY_MR_GROUP 8   /* pairs one block multiplies by an expert's rows at once */

/* Pair j of n_pairs (pair = (token, slot), sel[j] its expert) leads a group
 * when it is the 0th, 8th, 16th ... pair of its expert in pair order: then
 * list[0..n) receives it and the next n-1 pairs of that expert (n <= 8) and
 * n is returned, so every pair is in exactly one group and an expert's rows
 * stream once per 8 pairs; other pairs return 0 (their block has nothing
 * to do).  The list is written with constant indexes only, so a GPU keeps
 * it in registers. */
HY_MR_HD int hy_mr_pair_group(const int32_t *sel, int n_pairs, int j, int *list)
{
    const int32_t e = sel[j];
    int before = 0, n = 0;

    for (int i = 0; i < j; i++)
        before += sel[i] == e;
    if (before % HY_MR_GROUP != 0)
        return 0;
#ifdef __CUDACC__
#pragma unroll
#endif
    for (int t = 0; t < HY_MR_GROUP; t++)
        list[t] = j;
    for (int i = j; i < n_pairs && n < HY_MR_GROUP; i++)
        if (sel[i] == e) {
#ifdef __CUDACC__
#pragma unroll
#endif
            for (int t = 0; t < HY_MR_GROUP; t++)
                if (t == n)
                    list[t] = i;
            n++;
        }
    return n;
}

#endif
