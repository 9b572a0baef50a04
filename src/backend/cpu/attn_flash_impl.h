/*
 * attn_flash_impl.h - the flash-attention prefill kernel over the paged KV
 * cache, written once for every vector width: attn_avx512.c and attn_avx2.c
 * each define the vector type and a dozen primitives (below) under their
 * own target pragma, then include this file.  Queries sit in the SIMD lanes
 * (groups of HY_AF_VMAX vectors of lanes) and the keys are swept in tiles
 * of HY_ATTN_FLASH_TILE positions: each tile is converted to f32 once for
 * every query of the unit, then per group the scores S^T (dot products of
 * key and query rows in blocks of HY_AF_DOT_K keys x HY_AF_DOT_Q queries,
 * each summed across its lanes into the query's lane: see "scores"), a
 * per-lane online softmax (vertical operations only), and O^T += V^T P^T
 * (HY_AF_ND value columns x HY_AF_VMAX vectors).  Masking runs only on
 * tiles that cross a lane's causal edge or window.
 *
 * Units of few queries (decode) take HY_AF_DECODE_ENTRY instead, which
 * performs for each (query, key) the same operations in the same order --
 * over the same absolute 64-position tiles, the keys of one query across
 * the lanes -- so a query's output has the same bits from either kernel,
 * and from any batch or chunking of the prompt (see "decode").
 *
 * Both reduce a query's keys in splits of f->split absolute positions:
 * each split's softmax state starts empty and the states fold left to
 * right (hy_af_fold).  A single sweep folds as it crosses each boundary;
 * the decode kernel can instead write the states of a range of splits
 * (f->part) so that threads share one long sequence's keys, and
 * HY_AF_MERGE_ENTRY folds them afterwards with the same bits.
 *
 * The includer defines: HY_AF_W (lanes per vector), HY_AF_VMAX, HY_AF_ND,
 * HY_AF_DOT_Q, HY_AF_DOT_K, HY_AF_DEC_DQ (register blocking), HY_AF_ENTRY,
 * HY_AF_DECODE_ENTRY and HY_AF_MERGE_ENTRY (the exported functions'
 * names), the type hy_af_v, and always-inline hy_af_zero, load, store,
 * set1, fma (a*b+c), max, sub, add, mul, exp (x <= 0), mask_pos (s, or -inf
 * where the key position is outside a lane's [qlo, qpos]), keep_ge (p where
 * x >= t, else 0, NaN x included), one_if_ninf (c, or 1 where m is -inf),
 * cvt_f16 (HY_AF_W halves to floats), transpose_v (W vectors in place:
 * r[i] lane j -> r[j] lane i; the outputs leave through it), and either
 * hy_af_hsum4 (with HY_AF_HAVE_HSUM4) or transpose (a W x W block in
 * memory: dst[c*ds + r] = src[r*ss + c]), which the generic hy_af_hsum4
 * is built on.
 */
#include <math.h>
#include <string.h>

#define HY_AF_BK HY_ATTN_FLASH_TILE
#define HY_AF_GL (HY_AF_W * HY_AF_VMAX)           /* lanes per group */
#define HY_AF_MAX_GROUPS (HY_ATTN_FLASH_MAX_LANES / HY_AF_GL)
#define HY_AF_INLINE __attribute__((always_inline)) static inline
/* Softmax weights below exp(-80) (2e-35 of the largest) are dropped: they
 * cannot move a sum that holds the largest weight, 1, while their products
 * with values would be denormals, which cost microcode assists. */
#define HY_AF_EXP_MIN -80.0f

_Static_assert(HY_AF_GL <= HY_ATTN_FLASH_GROUP_MAX, "groups fit the scratch plan");
_Static_assert(HY_ATTN_FLASH_MAX_LANES % HY_AF_GL == 0, "whole groups per sweep");
_Static_assert(HY_AF_VMAX == 3, "hy_af_group_tile_any instantiates 1..3 vectors");
_Static_assert(HY_AF_W <= HY_ATTN_FLASH_WMAX, "the decode scratch plan covers the width");

/* One lane group: nv vectors of lanes, the first n of them real queries
 * (padding lanes repeat the first query's positions with a zero query, so
 * they are ordinary finite lanes whose output is dropped). */
typedef struct {
    int32_t nv, lane0, n;
    int32_t pmin, pmax, lomin, lomax;   /* positions, over the real lanes */
    float *Qr;                          /* [HY_AF_GL][hdp]: query rows times scale */
    float *O;                           /* [hdv][HY_AF_W nv]: unnormalised output */
    float m[HY_AF_GL], l[HY_AF_GL];     /* running max and sum per lane */
    float *Oa;                          /* the earlier splits folded: like O */
    float Ma[HY_AF_GL], La[HY_AF_GL];   /* ... their max and sum */
    int32_t qpos[HY_AF_GL], qlo[HY_AF_GL];
} hy_af_group_t;

/* The next tile's K/V rows, prefetched into L2 a few lines at a time while
 * the current tile is computed: pages are scattered, so the hardware
 * prefetcher finds them only a page at a time, and a burst of a whole
 * tile's lines stalls on the fill buffers.  The prefill kernel's walker,
 * and the decode kernel's where its f16 step (HY_AF_DECODE_ENTRY) does not
 * apply. */
typedef struct {
    const char *run[2 * (HY_AF_BK + 1)]; /* page runs of rows: start, bytes */
    size_t len[2 * (HY_AF_BK + 1)];
    int32_t n_run, ri;
    size_t off;                          /* within run[ri] */
} hy_af_pf_t;

/* Issues up to n more line prefetches: the current run's lines in one
 * tight loop, the cursor written back once (these steps sit inside the
 * score and value loops). */
static inline void hy_af_pf_step(hy_af_pf_t *pf, int n)
{
    while (n > 0 && pf->ri < pf->n_run) {
        const char *p = pf->run[pf->ri] + pf->off;
        const size_t left = (pf->len[pf->ri] - pf->off + 63) / 64;
        const int m = (size_t)n < left ? n : (int)left;
        for (int i = 0; i < m; i++)
            __builtin_prefetch(p + 64 * (size_t)i, 0, 2);
        n -= m;
        if ((size_t)m == left) {
            pf->ri++;
            pf->off = 0;
        } else {
            pf->off += 64 * (size_t)m;
        }
    }
}

HY_AF_INLINE float hy_af_lane0(hy_af_v v)
{
    float t[HY_AF_W];
    hy_af_store(t, v);
    return t[0];
}

/* Folds one split's state (max m, sum l, unnormalised outputs O at stride
 * os) into a query's running fold (M, L, Oa at stride oas): an empty split
 * (m = -inf: no key seen) leaves it as it is, the first non-empty one is
 * copied, a later one joins with both sides rescaled to the larger max.
 * Every kernel and the merge fold through this one function, splits in
 * position order, so where a split was computed changes no bit. */
static void hy_af_fold(float *M, float *L, float *Oa, size_t oas, float m, float l,
                       const float *O, size_t os, int32_t hdv)
{
    if (m == -INFINITY)
        return;
    if (*M == -INFINITY) {
        *M = m;
        *L = l;
        for (int32_t d = 0; d < hdv; d++)
            Oa[(size_t)d * oas] = O[(size_t)d * os];
        return;
    }
    /* the scalars through the kernels' vector operations (lane 0) */
    hy_af_v mv = hy_af_set1(*M), sv = hy_af_set1(m), mn = hy_af_max(mv, sv);
    hy_af_v xa = hy_af_sub(mv, mn), xs = hy_af_sub(sv, mn);
    float ca = hy_af_lane0(hy_af_keep_ge(hy_af_exp(xa), xa, HY_AF_EXP_MIN));
    float cs = hy_af_lane0(hy_af_keep_ge(hy_af_exp(xs), xs, HY_AF_EXP_MIN));
    for (int32_t d = 0; d < hdv; d++) {
        float t = O[(size_t)d * os] * cs;
        Oa[(size_t)d * oas] = fmaf(Oa[(size_t)d * oas], ca, t);
    }
    {
        float t = l * cs;
        *L = fmaf(*L, ca, t);
    }
    *M = hy_af_lane0(mn);
}

/* A query's output: its state, normalised (no key: zeros). */
static void hy_af_finish(float l, const float *O, size_t os, int32_t hdv, float *out)
{
    float inv = l > 0.0f ? 1.0f / l : 0.0f;

    for (int32_t d = 0; d < hdv; d++)
        out[d] = O[(size_t)d * os] * inv;
}

/* The last split's state (m, l, O) folded into the earlier ones' (M, L,
 * Oa) and normalised into out; alone when it is the only one (the fold
 * would copy it). */
static void hy_af_last(float *M, float *L, float *Oa, size_t oas, float m, float l,
                       const float *O, size_t os, int32_t hdv, float *out)
{
    if (*M == -INFINITY) {
        hy_af_finish(l, O, os, hdv, out);
        return;
    }
    hy_af_fold(M, L, Oa, oas, m, l, O, os, hdv);
    hy_af_finish(*L, Oa, oas, hdv, out);
}

/* ---- scores: one definition for both kernels ----
 * A score is the dot product of a key row and a query row (times the
 * scale), both zero-padded to hdp, a multiple of HY_AF_W: per lane r the
 * chain over the W-wide chunks c of fma(K[cW + r], Q[cW + r], acc) from
 * zero, then the W lanes summed in one fixed tree, ((l0 + l1) + (l2 +
 * l3)) + ((l4 + l5) + (l6 + l7)) and so on (hy_af_hsum4).  The key rows
 * are read as they lie (no transpose), and where a score lands -- a lane
 * of queries for the flash kernel, a lane of keys for decode -- changes
 * no bit. */

#ifndef HY_AF_HAVE_HSUM4
/* out[i] = the sum of vector v[i]'s lanes, i < 4, in the tree above: the
 * vectors transposed, then rows added pairwise at distance 1, 2, 4, ...
 * An ISA may define a faster one with this tree (HY_AF_HAVE_HSUM4). */
HY_AF_INLINE void hy_af_hsum4(hy_af_v v0, hy_af_v v1, hy_af_v v2, hy_af_v v3, float *out)
{
    float t[HY_AF_W * HY_AF_W] __attribute__((aligned(64)));
    float u[HY_AF_W * HY_AF_W] __attribute__((aligned(64)));
    hy_af_v r[HY_AF_W];

    _Static_assert(HY_AF_W >= 4, "four sums fit a vector");
    hy_af_store(t, v0);
    hy_af_store(t + HY_AF_W, v1);
    hy_af_store(t + 2 * HY_AF_W, v2);
    hy_af_store(t + 3 * HY_AF_W, v3);
    memset(t + 4 * HY_AF_W, 0, sizeof(float) * HY_AF_W * (HY_AF_W - 4));
    hy_af_transpose(t, HY_AF_W, u, HY_AF_W);
#pragma GCC unroll 16
    for (int i = 0; i < HY_AF_W; i++)
        r[i] = hy_af_load(u + i * HY_AF_W);
#pragma GCC unroll 4
    for (int st = 1; st < HY_AF_W; st *= 2)
#pragma GCC unroll 16
        for (int i = 0; i + st < HY_AF_W; i += 2 * st)
            r[i] = hy_af_add(r[i], r[i + st]);
    hy_af_store(t, r[0]);
    memcpy(out, t, 4 * sizeof(float));
}
#endif

/* W elements from e of a key or value row in the pages as floats: halves,
 * or (q8, a literal) q8_0 blocks of 32, a chunk inside one block (W
 * divides 32), each element d * q: the product is exact (11 by 8
 * significant bits), so the floats are to_float's and the decode kernel's
 * arithmetic the flash kernel's. */
_Static_assert(32 % HY_AF_W == 0, "a q8_0 block holds whole chunks");
HY_AF_INLINE hy_af_v hy_af_cvt_row(const uint16_t *row, size_t e, const int q8)
{
    if (!q8)
        return hy_af_cvt_f16(row + e);
    return hy_af_cvt_q8((const uint8_t *)(const void *)row + e / 32 * 34, e % 32);
}

/* acc[q][k] for NQ queries times NK keys: the chains over nc chunks of W
 * columns, query q's chunk c at Q + q*qs + c*qc, key k's at kf + k*ks +
 * c*kc, or with kh the row at kh[k] (halves, or with q8 q8_0 blocks),
 * converted as loaded (literals compile the others away).  Each key chunk
 * is loaded once for the NQ queries, NQ*NK chains side by side.  With pf, a line of the next
 * tile is prefetched every other chunk; with nk (the next tile's f16 key
 * rows for this block's four keys, nc a multiple of 4: a row is nc/4 runs
 * of W/8 lines), chunk c prefetches run c / 4 of row nk[c % 4], so that
 * the four rows are whole at the last chunk. */
HY_AF_INLINE void hy_af_dots(const float *Q, size_t qs, size_t qc, const float *kf, size_t ks,
                             size_t kc, const uint16_t *const *kh, const int q8, int nc,
                             const int NQ, const int NK, hy_af_pf_t *pf,
                             const uint16_t *const *nk, hy_af_v acc[HY_AF_DOT_Q][4])
{
#pragma GCC unroll 8
    for (int q = 0; q < NQ; q++)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            acc[q][k] = hy_af_zero();
    for (int c = 0; c < nc; c++) {
        hy_af_v kx[4];
        if (pf && (c & 1))
            hy_af_pf_step(pf, 1);
        if (nk) {
            /* chunk c: W/8 lines of next K row c % 4 */
            const size_t o = 64 * (size_t)(HY_AF_W / 8) * (size_t)(c >> 2);
#pragma GCC unroll 2
            for (int u = 0; u < HY_AF_W / 8; u++)
                __builtin_prefetch((const char *)nk[c & 3] + o + 64 * (size_t)u, 0, 2);
        }
#pragma GCC unroll 4
        for (int k = 0; k < NK; k++)
            kx[k] = kh ? hy_af_cvt_row(kh[k], (size_t)c * HY_AF_W, q8)
                       : hy_af_load(kf + (size_t)k * ks + (size_t)c * kc);
#pragma GCC unroll 8
        for (int q = 0; q < NQ; q++) {
            const hy_af_v qv = hy_af_load(Q + (size_t)q * qs + (size_t)c * qc);
#pragma GCC unroll 4
            for (int k = 0; k < NK; k++)
                acc[q][k] = hy_af_fma(kx[k], qv, acc[q][k]);
        }
    }
}

_Static_assert(HY_AF_DOT_K <= 3, "hy_af_qk_block instantiates 1..3 keys");
_Static_assert(HY_AF_DOT_Q % 4 == 0 && HY_AF_DOT_Q <= 8, "queries in fours");
_Static_assert(HY_AF_W % HY_AF_DOT_Q == 0, "query blocks tile a vector of lanes");

/* The flash kernel's scores of HY_AF_DOT_Q query rows (Qr) by NK key rows
 * (K), nc chunks each, into S[k][0 .. HY_AF_DOT_Q) (rows L apart). */
HY_AF_INLINE void hy_af_qk_block(const float *Qr, const float *K, int nc, int L, float *S,
                                 const int NK)
{
    hy_af_v acc[HY_AF_DOT_Q][4];

    hy_af_dots(Qr, (size_t)nc * HY_AF_W, HY_AF_W, K, (size_t)nc * HY_AF_W, HY_AF_W,
               NULL, 0, nc, HY_AF_DOT_Q, NK, NULL, NULL, acc);
#pragma GCC unroll 4
    for (int k = 0; k < NK; k++)
#pragma GCC unroll 2
        for (int q = 0; q < HY_AF_DOT_Q; q += 4)
            hy_af_hsum4(acc[q][k], acc[q + 1][k], acc[q + 2][k], acc[q + 3][k],
                        S + (size_t)k * L + q);
}

static void hy_af_qk_block_any(const float *Qr, const float *K, int nc, int L, float *S, int nk)
{
    switch (nk) {
    case 1: hy_af_qk_block(Qr, K, nc, L, S, 1); break;
    case 2: hy_af_qk_block(Qr, K, nc, L, S, 2); break;
    default: hy_af_qk_block(Qr, K, nc, L, S, HY_AF_DOT_K); break;
    }
}

/* The flash kernel's scores: S[r][lanes] for key rows r < n of K and the
 * NV vectors of query rows Qr (both hdp floats apart), and mx = max(mx,
 * scores). */
HY_AF_INLINE void hy_af_qk(const float *Qr, const float *K, int hdp, int n, float *S, int NV,
                           hy_af_v *mx)
{
    const int L = HY_AF_W * NV;

    for (int r = 0; r < n; r += HY_AF_DOT_K)
        for (int i = 0; i < L; i += HY_AF_DOT_Q)
            hy_af_qk_block_any(Qr + (size_t)i * hdp, K + (size_t)r * hdp,
                               hdp / HY_AF_W, L, S + (size_t)r * L + i,
                               HY_MIN(HY_AF_DOT_K, n - r));
    for (int r = 0; r < n; r++)
        for (int v = 0; v < NV; v++)
            mx[v] = hy_af_max(mx[v], hy_af_load(S + (size_t)r * L + HY_AF_W * v));
}

/* O^T[d][lanes] = c O^T[d][lanes] + sum_r V[r][d] P[r][lanes] for value
 * columns d0 .. d0+ND (ND*NV accumulators, one chain per output over r). */
HY_AF_INLINE void hy_af_pv_tile(float *O, const float *P, const float *V, int hdv, int n,
                                const hy_af_v *c, int NV, int ND)
{
    const int L = HY_AF_W * NV;
    hy_af_v acc[HY_AF_ND][HY_AF_VMAX];

#pragma GCC unroll 16
    for (int dd = 0; dd < ND; dd++)
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++)
            acc[dd][v] = hy_af_zero();
    for (int r = 0; r < n; r++) {
        hy_af_v pv[HY_AF_VMAX];
        const float *vr = V + (size_t)r * hdv;
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++)
            pv[v] = hy_af_load(P + (size_t)r * L + HY_AF_W * v);
#pragma GCC unroll 16
        for (int dd = 0; dd < ND; dd++) {
            hy_af_v vb = hy_af_set1(vr[dd]);
#pragma GCC unroll 3
            for (int v = 0; v < NV; v++)
                acc[dd][v] = hy_af_fma(vb, pv[v], acc[dd][v]);
        }
    }
#pragma GCC unroll 16
    for (int dd = 0; dd < ND; dd++)
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++) {
            float *o = O + (size_t)dd * L + HY_AF_W * v;
            hy_af_store(o, hy_af_fma(hy_af_load(o), c[v], acc[dd][v]));
        }
}

HY_AF_INLINE void hy_af_pv(float *O, const float *P, const float *V, int hdv, int n,
                           const hy_af_v *c, int NV, hy_af_pf_t *pf)
{
    int d = 0;

    for (; d + HY_AF_ND <= hdv; d += HY_AF_ND) {
        hy_af_pv_tile(O + (size_t)d * HY_AF_W * NV, P, V + d, hdv, n, c, NV, HY_AF_ND);
        hy_af_pf_step(pf, HY_AF_ND);
    }
    for (; d < hdv; d++)
        hy_af_pv_tile(O + (size_t)d * HY_AF_W * NV, P, V + d, hdv, n, c, NV, 1);
}

/* Folds keys [j0, j0+n) (rows K of hdp floats, V) into group gr: scores,
 * the cap, the mask where the tile crosses a lane's edge, the online
 * softmax update and the weighted values.  S is n x HY_AF_W NV scratch. */
HY_AF_INLINE void hy_af_group_tile(hy_af_group_t *gr, const float *K, const float *V,
                                   int32_t j0, int n, int hdp, int hdv, float softcap,
                                   float *S, hy_af_pf_t *pf, int NV)
{
    const int L = HY_AF_W * NV;
    const hy_af_v ninf = hy_af_set1(-INFINITY);
    int masked = !(j0 + n - 1 <= gr->pmin && j0 >= gr->lomax);
    hy_af_v mx[HY_AF_VMAX], c[HY_AF_VMAX], mn[HY_AF_VMAX], lsum[HY_AF_VMAX];

    for (int v = 0; v < NV; v++)
        mx[v] = ninf;
    hy_af_qk(gr->Qr, K, hdp, n, S, NV, mx);

    if (softcap > 0.0f || masked) {
        /* cap and mask in place, then the max again */
        if (softcap > 0.0f)
            for (int i = 0; i < n * L; i++)
                S[i] = softcap * tanhf(S[i] / softcap);
        for (int v = 0; v < NV; v++) {
            mx[v] = ninf;
            for (int r = 0; r < n; r++) {
                float *sr = S + (size_t)r * L + HY_AF_W * v;
                hy_af_v s = hy_af_load(sr);
                if (masked) {
                    s = hy_af_mask_pos(s, j0 + r, gr->qpos + HY_AF_W * v, gr->qlo + HY_AF_W * v);
                    hy_af_store(sr, s);
                }
                mx[v] = hy_af_max(mx[v], s);
            }
        }
    }

    /* online softmax per lane: new max, rescale factor for what came before
     * (1 while a lane has seen nothing: its max is still -inf) */
    for (int v = 0; v < NV; v++) {
        hy_af_v m = hy_af_load(gr->m + HY_AF_W * v);
        mn[v] = hy_af_max(m, mx[v]);
        hy_af_v x = hy_af_sub(m, mn[v]);
        c[v] = hy_af_one_if_ninf(hy_af_keep_ge(hy_af_exp(x), x, HY_AF_EXP_MIN), mn[v]);
        lsum[v] = hy_af_zero();
        hy_af_store(gr->m + HY_AF_W * v, mn[v]);
    }
    for (int r = 0; r < n; r++)
        for (int v = 0; v < NV; v++) {
            float *sr = S + (size_t)r * L + HY_AF_W * v;
            hy_af_v s = hy_af_load(sr);
            hy_af_v x = hy_af_sub(s, mn[v]);
            /* masked scores (x = -inf, or NaN in a lane that has seen
             * nothing) weigh exactly 0, as do those below HY_AF_EXP_MIN */
            hy_af_v p = hy_af_keep_ge(hy_af_exp(x), x, HY_AF_EXP_MIN);
            hy_af_store(sr, p);
            lsum[v] = hy_af_add(lsum[v], p);
        }
    for (int v = 0; v < NV; v++) {
        hy_af_v l = hy_af_load(gr->l + HY_AF_W * v);
        hy_af_store(gr->l + HY_AF_W * v, hy_af_fma(l, c[v], lsum[v]));
    }
    hy_af_pv(gr->O, S, V, hdv, n, c, NV, pf);
}

static void hy_af_group_tile_any(hy_af_group_t *gr, const float *K, const float *V,
                                 int32_t j0, int n, int hdp, int hdv, float softcap, float *S,
                                 hy_af_pf_t *pf)
{
    /* a constant NV per copy, so the accumulators live in registers */
    switch (gr->nv) {
    case 1:
        hy_af_group_tile(gr, K, V, j0, n, hdp, hdv, softcap, S, pf, 1);
        break;
    case 2:
        hy_af_group_tile(gr, K, V, j0, n, hdp, hdv, softcap, S, pf, 2);
        break;
    default:
        hy_af_group_tile(gr, K, V, j0, n, hdp, hdv, softcap, S, pf, 3);
        break;
    }
}

/* Page pi of the unit's list, keys (v false) or values: found by its id
 * in the pool, or where the caller's list of addresses says it lies. */
static inline const uint8_t *hy_af_page(const hy_attn_flash_t *f, bool v, int32_t pi)
{
    const uint8_t *const *at = v ? f->v_at : f->k_at;

    if (at)
        return at[pi];
    return (v ? f->v_base : f->k_base) +
           (size_t)f->pages[pi] * (v ? f->v_page_bytes : f->k_page_bytes);
}

/* The run of positions from p (before hi) that lie in one page, keys or
 * values: its length, and where position p's row lies at *src.  The
 * row walks below go page by page through it. */
static inline int32_t hy_af_run(const hy_attn_flash_t *f, bool v, int32_t p, int32_t hi,
                                const uint8_t **src)
{
    int32_t pt = f->page_tokens, slot = p % pt;

    *src = hy_af_page(f, v, p / pt) + (size_t)slot * (v ? f->v_row_bytes : f->k_row_bytes);
    return HY_MIN(hi - p, pt - slot);
}

/* Where positions [lo, hi) of one KV head's keys or values lie (row p -
 * lo), halves or q8_0 blocks read in place. */
static void hy_af_rows(const hy_attn_flash_t *f, bool v, int32_t lo, int32_t hi,
                       const uint16_t **rows)
{
    size_t row_bytes = v ? f->v_row_bytes : f->k_row_bytes;
    const uint8_t *src;

    for (int32_t p = lo, cnt; p < hi; p += cnt) {
        cnt = hy_af_run(f, v, p, hi, &src);
        for (int32_t i = 0; i < cnt; i++)
            rows[p - lo + i] = (const uint16_t *)(const void *)(src + (size_t)i * row_bytes);
    }
}

/* Rows [lo, hi) of one KV head into a float tile (row p - lo), page by page. */
static void hy_af_load_rows(const hy_attn_flash_t *f, bool v, int32_t dim, int32_t lo, int32_t hi,
                            float *tile)
{
    const uint8_t *src;

    for (int32_t p = lo, cnt; p < hi; p += cnt) {
        cnt = hy_af_run(f, v, p, hi, &src);
        float *dst = tile + (size_t)(p - lo) * dim;
        size_t n = (size_t)cnt * dim, i = 0;
        if (f->kv_f32) {
            memcpy(dst, src, n * sizeof(float));
        } else if (f->kv_f16) {
            /* the common case, a vector of halves per instruction */
            const uint16_t *h = (const uint16_t *)src;
            for (; i + HY_AF_W <= n; i += HY_AF_W)
                hy_af_store(dst + i, hy_af_cvt_f16(h + i));
            if (i < n) { /* odd head sizes: through padded copies */
                uint16_t th[HY_AF_W] = {0};
                float tf[HY_AF_W];
                memcpy(th, h + i, (n - i) * sizeof(uint16_t));
                hy_af_store(tf, hy_af_cvt_f16(th));
                memcpy(dst + i, tf, (n - i) * sizeof(float));
            }
        } else {
            f->to_float(src, dst, (int64_t)n);
        }
    }
}

/* hy_af_load_rows with rows stride >= dim apart, zero-padded: the key
 * tiles' rows padded to hdp for the score chunks. */
static void hy_af_load_keys(const hy_attn_flash_t *f, int32_t stride, int32_t lo, int32_t hi,
                            float *tile)
{
    const int32_t dim = f->hd;

    hy_af_load_rows(f, false, dim, lo, hi, tile);
    if (stride == dim)
        return;
    for (int32_t r = hi - lo - 1; r >= 0; r--) { /* last row first: they move up */
        memmove(tile + (size_t)r * stride, tile + (size_t)r * dim, sizeof(float) * (size_t)dim);
        memset(tile + (size_t)r * stride + dim, 0, sizeof(float) * (size_t)(stride - dim));
    }
}

/* Queues rows [lo, hi) of one KV head for hy_af_pf_step. */
static void hy_af_pf_rows(hy_af_pf_t *pf, const hy_attn_flash_t *f, bool v, int32_t lo,
                          int32_t hi)
{
    size_t row_bytes = v ? f->v_row_bytes : f->k_row_bytes;
    const uint8_t *src;

    for (int32_t p = lo, cnt; p < hi; p += cnt) {
        cnt = hy_af_run(f, v, p, hi, &src);
        pf->run[pf->n_run] = (const char *)src;
        pf->len[pf->n_run++] = (size_t)cnt * row_bytes;
    }
}

/* Queues the K and V rows of the tile after the one at a (keys up to kmax). */
static void hy_af_pf_next(hy_af_pf_t *pf, const hy_attn_flash_t *f, int32_t a, int32_t kmax)
{
    pf->n_run = pf->ri = 0;
    pf->off = 0;
    if (a + HY_AF_BK <= kmax) {
        int32_t nhi = HY_MIN(a + 2 * HY_AF_BK, kmax + 1);
        hy_af_pf_rows(pf, f, false, a + HY_AF_BK, nhi);
        hy_af_pf_rows(pf, f, true, a + HY_AF_BK, nhi);
    }
}

/* hy_af_fold for the W lanes of vector v of a group at once, where they
 * all take one branch of it: every lane's split saw keys and so did its
 * fold (the join: per lane the same operations as hy_af_fold's lane 0),
 * or every lane's split saw keys and its fold none yet (the copy).  Any
 * other mix goes lane by lane through hy_af_fold.  A long prompt's
 * queries cross a split boundary every HY_ATTN_SPLIT keys, and the
 * scalar fold's strided walk over hdv outputs cost ~2% of a 16K-token
 * prefill. */
static void hy_af_group_fold(hy_af_group_t *gr, int v, int32_t hdv)
{
    const int32_t L = HY_AF_W * gr->nv, o = HY_AF_W * v;
    bool join = true, copy = true;

    for (int i = o; i < o + HY_AF_W; i++) {
        join = join && gr->m[i] != -INFINITY && gr->Ma[i] != -INFINITY;
        copy = copy && gr->m[i] != -INFINITY && gr->Ma[i] == -INFINITY;
    }
    if (join) {
        hy_af_v mv = hy_af_load(gr->Ma + o), sv = hy_af_load(gr->m + o);
        hy_af_v mn = hy_af_max(mv, sv), xa = hy_af_sub(mv, mn), xs = hy_af_sub(sv, mn);
        hy_af_v ca = hy_af_keep_ge(hy_af_exp(xa), xa, HY_AF_EXP_MIN);
        hy_af_v cs = hy_af_keep_ge(hy_af_exp(xs), xs, HY_AF_EXP_MIN);
        for (int32_t d = 0; d < hdv; d++) {
            float *oa = gr->Oa + (size_t)d * L + o;
            hy_af_v t = hy_af_mul(hy_af_load(gr->O + (size_t)d * L + o), cs);
            hy_af_store(oa, hy_af_fma(hy_af_load(oa), ca, t));
        }
        hy_af_v t = hy_af_mul(hy_af_load(gr->l + o), cs);
        hy_af_store(gr->La + o, hy_af_fma(hy_af_load(gr->La + o), ca, t));
        hy_af_store(gr->Ma + o, mn);
    } else if (copy) {
        for (int32_t d = 0; d < hdv; d++)
            hy_af_store(gr->Oa + (size_t)d * L + o, hy_af_load(gr->O + (size_t)d * L + o));
        hy_af_store(gr->La + o, hy_af_load(gr->l + o));
        hy_af_store(gr->Ma + o, hy_af_load(gr->m + o));
    } else {
        for (int i = o; i < o + HY_AF_W; i++)
            hy_af_fold(&gr->Ma[i], &gr->La[i], gr->Oa + i, (size_t)L, gr->m[i], gr->l[i],
                       gr->O + i, (size_t)L, hdv);
    }
}

/* A split boundary: every lane's state so far folds into its Oa, Ma, La
 * and the lane starts the next split empty.  The padding lanes fold too
 * (their output is dropped): they are finite lanes like the first, so
 * the vectors stay of one kind. */
static void hy_af_group_split(hy_af_group_t *gr, int32_t hdv)
{
    int32_t L = HY_AF_W * gr->nv;

    for (int v = 0; v < gr->nv; v++)
        hy_af_group_fold(gr, v, hdv);
    for (int32_t i = 0; i < L; i++) {
        gr->m[i] = -INFINITY;
        gr->l[i] = 0.0f;
    }
    memset(gr->O, 0, sizeof(float) * (size_t)hdv * L);
}

/* hy_af_last for the W lanes of vector v of a group: the last split folded
 * in (hy_af_group_fold, unless no lane folded an earlier one), the state
 * normalised as hy_af_finish does it (a multiply by 1/l per lane), and
 * each real lane's row written out through W x W transposes, where
 * lane-by-lane it was a strided walk (~1.2% of SmolLM2's pp512). */
static void hy_af_group_last(const hy_attn_flash_t *f, hy_af_group_t *gr, int v)
{
    const int32_t hdv = f->hdv, nh = f->h1 - f->h0, L = HY_AF_W * gr->nv, o = HY_AF_W * v;
    const int nr = HY_MIN(HY_AF_W, gr->n - o);
    const float *O = gr->O, *l = gr->l;
    float inv[HY_AF_W], *out[HY_AF_W];
    bool first = true;

    if (nr <= 0)
        return;
    for (int i = o; i < o + HY_AF_W; i++)
        first = first && gr->Ma[i] == -INFINITY;
    if (!first) {
        /* lanes with no earlier split copy their last one; those whose
         * state stays empty (no key at all) normalise to zeros from zeros */
        for (int i = o; i < o + HY_AF_W; i++)
            if (gr->Ma[i] == -INFINITY && gr->m[i] == -INFINITY)
                for (int32_t d = 0; d < hdv; d++)
                    gr->Oa[(size_t)d * L + i] = 0.0f;
        hy_af_group_fold(gr, v, hdv);
        O = gr->Oa;
        l = gr->La;
    }
    for (int i = 0; i < HY_AF_W; i++) {
        int32_t lane = gr->lane0 + o + HY_MIN(i, nr - 1);
        inv[i] = l[o + i] > 0.0f ? 1.0f / l[o + i] : 0.0f;
        out[i] = f->out + (size_t)(f->t0 + lane / nh) * f->out_stride +
                 (size_t)(f->h0 + lane % nh) * hdv;
    }
    const hy_af_v iv = hy_af_load(inv);
    int32_t d0 = 0;
    for (; d0 + HY_AF_W <= hdv; d0 += HY_AF_W) {
        hy_af_v r[HY_AF_W];
#pragma GCC unroll 16
        for (int dd = 0; dd < HY_AF_W; dd++)
            r[dd] = hy_af_mul(hy_af_load(O + (size_t)(d0 + dd) * L + o), iv);
        hy_af_transpose_v(r);
        for (int i = 0; i < nr; i++)
            hy_af_store(out[i] + d0, r[i]);
    }
    for (; d0 < hdv; d0++) /* head sizes that are not whole vectors */
        for (int i = 0; i < nr; i++)
            out[i][d0] = O[(size_t)d0 * L + o + i] * inv[i];
}

/* Lanes [q0, q0+nl) of the unit: set up the groups, sweep the keys, write
 * the outputs. */
static void hy_af_sweep(const hy_attn_flash_t *f, float *scr, int32_t q0, int32_t nl)
{
    const int32_t hd = f->hd, hdv = f->hdv, nh = f->h1 - f->h0;
    const int32_t hdp = (hd + HY_AF_W - 1) / HY_AF_W * HY_AF_W;
    float *Kt = scr, *Vt = Kt + (size_t)HY_AF_BK * hdp, *S = Vt + (size_t)HY_AF_BK * hdv;
    float *Qbase = S + (size_t)HY_AF_BK * HY_AF_GL;
    hy_af_group_t grs[HY_AF_MAX_GROUPS];
    hy_af_pf_t pf;
    int32_t ng = (nl + HY_AF_GL - 1) / HY_AF_GL, kmin = INT32_MAX, kmax = -1;

    for (int32_t gi = 0; gi < ng; gi++) {
        hy_af_group_t *gr = &grs[gi];
        int32_t n = HY_MIN(HY_AF_GL, nl - gi * HY_AF_GL), L;
        gr->lane0 = q0 + gi * HY_AF_GL;
        gr->n = n;
        gr->nv = (n + HY_AF_W - 1) / HY_AF_W;
        L = HY_AF_W * gr->nv;
        gr->Qr = Qbase + (size_t)gi * HY_AF_GL * (hdp + 2 * hdv);
        gr->O = gr->Qr + (size_t)HY_AF_GL * hdp;
        gr->Oa = gr->O + (size_t)HY_AF_GL * hdv;
        gr->pmin = gr->lomin = INT32_MAX;
        gr->pmax = gr->lomax = -1;
        memset(gr->Qr, 0, sizeof(float) * (size_t)hdp * HY_AF_GL);
        memset(gr->O, 0, sizeof(float) * (size_t)hdv * L);
        for (int32_t i = 0; i < L; i++) {
            int32_t lane = gr->lane0 + (i < n ? i : 0);
            int32_t t = f->t0 + lane / nh, h = f->h0 + lane % nh;
            int32_t p = f->pos[t], lo = f->window > 0 ? HY_MAX(0, p - f->window + 1) : 0;
            gr->m[i] = gr->Ma[i] = -INFINITY;
            gr->l[i] = gr->La[i] = 0.0f;
            gr->qpos[i] = p;
            gr->qlo[i] = lo;
            if (i >= n)
                continue;
            const float *qv = f->q + (size_t)t * f->q_stride + (size_t)h * hd;
            float *qr = gr->Qr + (size_t)i * hdp;
            int32_t d = 0;
            for (; d + HY_AF_W <= hd; d += HY_AF_W) /* the same products, W at a time */
                hy_af_store(qr + d, hy_af_mul(hy_af_load(qv + d), hy_af_set1(f->scale)));
            for (; d < hd; d++)
                qr[d] = qv[d] * f->scale;
            gr->pmin = HY_MIN(gr->pmin, p);
            gr->pmax = HY_MAX(gr->pmax, p);
            gr->lomin = HY_MIN(gr->lomin, lo);
            gr->lomax = HY_MAX(gr->lomax, lo);
        }
        kmin = HY_MIN(kmin, gr->lomin);
        kmax = HY_MAX(kmax, gr->pmax);
    }

    /* tiles aligned to multiples of HY_AF_BK positions */
    for (int32_t a0 = kmin - kmin % HY_AF_BK, a = a0; a <= kmax; a += HY_AF_BK) {
        int32_t lo = HY_MAX(a, kmin), hi = HY_MIN(a + HY_AF_BK, kmax + 1);
        if (f->split > 0 && a > a0 && a % f->split == 0)
            for (int32_t gi = 0; gi < ng; gi++)
                hy_af_group_split(&grs[gi], hdv);
        /* the part of the tile some group sees */
        int32_t clo = INT32_MAX, chi = -1;
        for (int32_t gi = 0; gi < ng; gi++) {
            clo = HY_MIN(clo, HY_MAX(lo, grs[gi].lomin));
            chi = HY_MAX(chi, HY_MIN(hi, grs[gi].pmax + 1));
        }
        if (clo >= chi)
            continue;
        hy_af_load_keys(f, hdp, clo, chi, Kt);
        hy_af_load_rows(f, true, hdv, clo, chi, Vt);
        hy_af_pf_next(&pf, f, a, kmax);
        for (int32_t gi = 0; gi < ng; gi++) {
            int32_t glo = HY_MAX(clo, grs[gi].lomin), ghi = HY_MIN(chi, grs[gi].pmax + 1);
            if (glo >= ghi)
                continue;
            hy_af_group_tile_any(&grs[gi], Kt + (size_t)(glo - clo) * hdp,
                                 Vt + (size_t)(glo - clo) * hdv, glo, ghi - glo, hdp, hdv,
                                 f->softcap, S, &pf);
        }
        hy_af_pf_step(&pf, INT32_MAX); /* whatever the groups left */
    }

    for (int32_t gi = 0; gi < ng; gi++)
        for (int v = 0; v < grs[gi].nv; v++)
            hy_af_group_last(f, &grs[gi], v);
}

void HY_AF_ENTRY(const hy_attn_flash_t *f, float *scratch)
{
    int32_t nq = (f->t1 - f->t0) * (f->h1 - f->h0);

    for (int32_t q0 = 0; q0 < nq; q0 += HY_ATTN_FLASH_MAX_LANES)
        hy_af_sweep(f, scratch, q0, HY_MIN(HY_ATTN_FLASH_MAX_LANES, nq - q0));
}

/* ---- decode: a few queries, keys across the lanes ----
 * The flash kernel's arithmetic for one (query, key tile) pair, restated
 * so that a single query fills the vectors: per 64-position tile (the same
 * absolute tiles) the scores of the keys the query sees are the same dot
 * products (hy_af_dots and hy_af_hsum4, four keys at a time); the
 * cap, max, exp and the drop below HY_AF_EXP_MIN are the same lane-wise
 * operations; the weights are summed one after the other in key order
 * (the flash lane's chain, minus the zeros of keys it masks); the value
 * sums are one FMA chain per column in key order, fma(V[j][d], P[j], acc)
 * from 0, W columns at a time; and then l = fma(l, c, lsum), O = fma(O,
 * c, acc) as there.  Keys a flash lane masks contribute exact zeros
 * there, which is why skipping them here changes no bit (barring sums
 * that are exactly zero, whose sign could differ). */

static inline float hy_af_max_scalar(float a, float b)
{
    return a > b ? a : b; /* maxps: b where either is NaN */
}

/* Queries of one token (heads of a KV group) that share a tile's keys and
 * so take its passes together, and the accumulators a value pass keeps
 * (three quarters of the vector registers). */
#define HY_AF_DEC_G 4
#define HY_AF_DEC_REGS (HY_AF_W >= 16 ? 24 : 12)
/* Lines of the next tile a value row's step prefetches.  A tile of four
 * 256-wide f16 heads is 1,024 lines; the AVX2 kernel steps ~1,200 times
 * over it, the AVX-512 one (twice the lanes: half the chunks and value
 * passes) ~320, which at one line a step left two thirds of the lines to a
 * burst at the tile's end that stalled on the fill buffers (bench_attn
 * decode, cold: 4K keys 830 -> 728 us). */
#define HY_AF_DEC_PF (HY_AF_W >= 16 ? 4 : 1)
_Static_assert(HY_AF_DEC_DQ <= HY_AF_DOT_Q, "a block of queries' chains fits hy_af_dots");

/* The scores of NQ <= HY_AF_DEC_DQ query rows (Q, stride hdp) by NK <= 4
 * keys (rows kf of stride hdp, or page rows at kh[k]: halves, with q8 q8_0)
 * into S[q][0 .. 4):
 * each query's four keys summed into one quarter vector (the scores of
 * missing keys are zeros: their chains stay empty). */
HY_AF_INLINE void hy_af_decode_block(const float *Q, int hdp, const float *kf,
                                     const uint16_t *const *kh, const int q8, const int NQ,
                                     const int NK, float *const *S, int j, hy_af_pf_t *pf,
                                     const uint16_t *const *nk)
{
    hy_af_v acc[HY_AF_DOT_Q][4];

    if (kh && nk)
        hy_af_dots(Q, (size_t)hdp, HY_AF_W, NULL, 0, 0, kh, q8, hdp / HY_AF_W, NQ, NK, NULL, nk,
                   acc);
    else if (kh)
        hy_af_dots(Q, (size_t)hdp, HY_AF_W, NULL, 0, 0, kh, q8, hdp / HY_AF_W, NQ, NK, pf, NULL,
                   acc);
    else
        hy_af_dots(Q, (size_t)hdp, HY_AF_W, kf, (size_t)hdp, HY_AF_W, NULL, 0, hdp / HY_AF_W, NQ,
                   NK, pf, NULL, acc);
#pragma GCC unroll 4
    for (int q = 0; q < NQ; q++)
        hy_af_hsum4(acc[q][0], acc[q][1], acc[q][2], acc[q][3], S[q] + j);
}

/* The scores of g <= HY_AF_DEC_G query rows (Q, stride hdp) over keys
 * [j0, j0+n) of the tile (rows relative to its first: kh rows straight
 * from the pages, halves or with q8 q8_0, else kr floats of stride hdp)
 * into S[q][j0 ..], four keys at a time (a short last four padded with
 * zero scores, which no later pass reads), each key row read once for
 * every HY_AF_DEC_DQ queries. */
static void hy_af_decode_scores(const float *Q, int hdp, int g, const float *kr,
                                const uint16_t *const *kh, bool q8, int j0, int n,
                                float *const *S, hy_af_pf_t *pf, const uint16_t *const *nxk)
{
    _Static_assert(HY_AF_DEC_DQ == 2 || HY_AF_DEC_DQ == 4, "one case per query count");
    for (int q0 = 0; q0 < g; q0 += HY_AF_DEC_DQ) {
        const int nq = HY_MIN(HY_AF_DEC_DQ, g - q0);
        const float *Qq = Q + (size_t)q0 * hdp;
        float *const *Sq = S + q0;
        for (int j = j0; j < j0 + n; j += 4) {
            const int nk = HY_MIN(4, j0 + n - j);
            const uint16_t *const *khj = kh ? kh + j : NULL;
            const float *kfj = kr + (size_t)j * hdp;
            /* the next tile's key rows in step with this tile's blocks,
             * for the first block of queries only */
            const uint16_t *const *nkj = nxk && q0 == 0 ? nxk + (j - j0) : NULL;
#define HY_AF_DEC_CASE(a, b)                                                  \
    case (a) * 8 + (b):                                                       \
        if (khj && nkj)                                                       \
            hy_af_decode_block(Qq, hdp, NULL, khj, 0, a, b, Sq, j, NULL, nkj); \
        else if (khj && q8)                                                   \
            hy_af_decode_block(Qq, hdp, NULL, khj, 1, a, b, Sq, j, pf, NULL); \
        else if (khj)                                                         \
            hy_af_decode_block(Qq, hdp, NULL, khj, 0, a, b, Sq, j, pf, NULL); \
        else                                                                  \
            hy_af_decode_block(Qq, hdp, kfj, NULL, 0, a, b, Sq, j, pf, NULL); \
        break;
#define HY_AF_DEC_CASES(a) HY_AF_DEC_CASE(a, 1) HY_AF_DEC_CASE(a, 2) HY_AF_DEC_CASE(a, 3) HY_AF_DEC_CASE(a, 4)
            switch (HY_MIN(nq, HY_AF_DEC_DQ) * 8 + nk) {
                HY_AF_DEC_CASES(1)
                HY_AF_DEC_CASES(2)
#if HY_AF_DEC_DQ > 2
                HY_AF_DEC_CASES(3)
                HY_AF_DEC_CASES(4)
#endif
            default: break;
            }
#undef HY_AF_DEC_CASES
#undef HY_AF_DEC_CASE
        }
    }
}

/* The softmax step of a group's g queries over their scores S[q][j0,
 * j0+n): cap, new max m[q], the weights in place of the scores, l[q]
 * updated, and in c[q] the factor that rescales the query's earlier
 * output.  Each query's max and sum are chains over j in order (the flash
 * lane's: a NaN score makes the max depend on the order); the g chains
 * run side by side so that their latencies overlap, one query after
 * another cost four cycles a key each. */
HY_AF_INLINE void hy_af_decode_softmax_g(int j0, int n, float softcap, float *const *S,
                                         const int g, float *m, float *l, float *c)
{
    float mx[HY_AF_DEC_G], lsum[HY_AF_DEC_G];

#pragma GCC unroll 4
    for (int q = 0; q < g; q++) {
        mx[q] = -INFINITY;
        lsum[q] = 0.0f;
        if (softcap > 0.0f)
            for (int j = j0; j < j0 + n; j++)
                S[q][j] = softcap * tanhf(S[q][j] / softcap);
    }
    for (int j = j0; j < j0 + n; j++)
#pragma GCC unroll 4
        for (int q = 0; q < g; q++)
            mx[q] = hy_af_max_scalar(mx[q], S[q][j]);
#pragma GCC unroll 4
    for (int q = 0; q < g; q++) {
        /* the flash lane's new max and rescale factor, through the same
         * vector operations */
        hy_af_v mv = hy_af_set1(m[q]), mn = hy_af_max(mv, hy_af_set1(mx[q]));
        hy_af_v x = hy_af_sub(mv, mn);
        c[q] = hy_af_lane0(hy_af_one_if_ninf(hy_af_keep_ge(hy_af_exp(x), x, HY_AF_EXP_MIN), mn));
        /* lane-wise: where the vectors start changes nothing (the scores
         * buffer runs a vector past the tile) */
        for (int j = j0; j < j0 + n; j += HY_AF_W) {
            hy_af_v xs = hy_af_sub(hy_af_load(S[q] + j), mn);
            hy_af_store(S[q] + j, hy_af_keep_ge(hy_af_exp(xs), xs, HY_AF_EXP_MIN));
        }
        m[q] = hy_af_lane0(mn);
    }
    for (int j = j0; j < j0 + n; j++)
#pragma GCC unroll 4
        for (int q = 0; q < g; q++)
            lsum[q] = lsum[q] + S[q][j];
#pragma GCC unroll 4
    for (int q = 0; q < g; q++)
        l[q] = fmaf(l[q], c[q], lsum[q]);
}

/* hy_af_decode_softmax_g for g = 1..HY_AF_DEC_G, unrolled for each g. */
static void hy_af_decode_softmax(int j0, int n, float softcap, float *const *S, int g, float *m,
                                 float *l, float *c)
{
    _Static_assert(HY_AF_DEC_G == 4, "one case per group size");
    switch (g) {
    case 1: hy_af_decode_softmax_g(j0, n, softcap, S, 1, m, l, c); break;
    case 2: hy_af_decode_softmax_g(j0, n, softcap, S, 2, m, l, c); break;
    case 3: hy_af_decode_softmax_g(j0, n, softcap, S, 3, m, l, c); break;
    default: hy_af_decode_softmax_g(j0, n, softcap, S, 4, m, l, c); break;
    }
}

/* acc[q][v] (q < g, v < cnt) = the chain fma(V[i][d0 + vW ..], P[q][i],
 * acc) over keys i in [i0, i1), from zero, the value rows floats at vr +
 * i*hdv or with vh page rows at vh[i] (halves, or with q8 q8_0 blocks),
 * converted as loaded (literals compile the others away): the g queries'
 * chains side by side, each row's vectors loaded once for the group, g *
 * cnt <= HY_AF_DEC_REGS chains; a line of the next tile prefetched per
 * row. */
HY_AF_INLINE void hy_af_value_chains(const float *vr, int hdv, const uint16_t *const *vh,
                                     const int q8, int d0, const float *const *P, int i0,
                                     int i1, const int g, const int cnt, hy_af_pf_t *pf,
                                     hy_af_v acc[HY_AF_DEC_G][HY_AF_DEC_REGS])
{
#pragma GCC unroll 4
    for (int q = 0; q < HY_AF_DEC_G; q++)
#pragma GCC unroll 24
        for (int v = 0; v < HY_AF_DEC_REGS; v++)
            acc[q][v] = hy_af_zero();
    for (int i = i0; i < i1; i++) {
        hy_af_v x[HY_AF_DEC_REGS];
        hy_af_pf_step(pf, HY_AF_DEC_PF);
#pragma GCC unroll 24
        for (int v = 0; v < HY_AF_DEC_REGS; v++)
            /* a half or a q8_0 element converts to its float exactly:
             * the same x either way */
            x[v] = v >= cnt ? hy_af_zero()
                   : vh     ? hy_af_cvt_row(vh[i], (size_t)(d0 + v * HY_AF_W), q8)
                            : hy_af_load(vr + (size_t)i * hdv + d0 + v * HY_AF_W);
#pragma GCC unroll 4
        for (int q = 0; q < HY_AF_DEC_G; q++)
            if (q < g) {
                const hy_af_v c = hy_af_set1(P[q][i]);
#pragma GCC unroll 24
                for (int v = 0; v < HY_AF_DEC_REGS; v++)
                    if (v < cnt)
                        acc[q][v] = hy_af_fma(x[v], c, acc[q][v]);
            }
    }
}

/* O[q][d] = fma(O[q][d], c[q], acc) for the g queries' weights P[q] over
 * keys [j0, j0+n), acc per column the chain fma(V[j][d], P[j], acc) from 0
 * in key order: each value row read once for the group, as the keys. */
HY_AF_INLINE void hy_af_decode_values_g(const float *vr, const uint16_t *const *vh, bool q8,
                                        int j0, int n, int hdv, const int g,
                                        const float *const *P, const float *c, float *const *O,
                                        hy_af_pf_t *pf)
{
    const int cv = HY_MAX(1, HY_AF_DEC_REGS / g);
    int d = 0;

    for (; d + HY_AF_W <= hdv; d += cv * HY_AF_W) {
        const int cnt = HY_MIN(cv, (hdv - d) / HY_AF_W);
        hy_af_v acc[HY_AF_DEC_G][HY_AF_DEC_REGS];
        /* passes with a constant count: no per-vector tests in the loop.
         * Besides full passes, the counts of common head sizes' last pass
         * (256 = 6 + 6 + 4 vectors for four heads, 64 = 4 for any) */
#define HY_AF_VCH(k)                                                               \
    do {                                                                           \
        if (vh && q8)                                                              \
            hy_af_value_chains(NULL, 0, vh, 1, d, P, j0, j0 + n, g, k, pf, acc);   \
        else if (vh)                                                               \
            hy_af_value_chains(NULL, 0, vh, 0, d, P, j0, j0 + n, g, k, pf, acc);   \
        else                                                                       \
            hy_af_value_chains(vr, hdv, NULL, 0, d, P, j0, j0 + n, g, k, pf, acc); \
    } while (0)
        if (cnt == cv)
            HY_AF_VCH(cv);
        else if (cnt == 4 && 4 * g <= HY_AF_DEC_REGS)
            HY_AF_VCH(4);
        else if (cnt == 2)
            HY_AF_VCH(2);
        else
            HY_AF_VCH(cnt);
#undef HY_AF_VCH
#pragma GCC unroll 4
        for (int q = 0; q < HY_AF_DEC_G; q++)
#pragma GCC unroll 24
            for (int k = 0; k < HY_AF_DEC_REGS; k++)
                if (q < g && k < cnt)
                    hy_af_store(O[q] + d + k * HY_AF_W,
                                hy_af_fma(hy_af_load(O[q] + d + k * HY_AF_W), hy_af_set1(c[q]),
                                          acc[q][k]));
    }
    d = hdv / HY_AF_W * HY_AF_W;
    for (; d < hdv; d++)
        for (int q = 0; q < g; q++) {
            float acc = 0.0f;
            for (int j = j0; j < j0 + n; j++)
                acc = fmaf(vr[(size_t)j * hdv + d], P[q][j], acc);
            O[q][d] = fmaf(O[q][d], c[q], acc);
        }
}

/* The value pass for a group of g = 1..HY_AF_DEC_G, unrolled for each g. */
static void hy_af_decode_values(const float *vr, const uint16_t *const *vh, bool q8, int j0,
                                int n, int hdv, int g, const float *const *P, const float *c,
                                float *const *O, hy_af_pf_t *pf)
{
    _Static_assert(HY_AF_DEC_G == 4, "one case per group size");
    switch (g) {
    case 1: hy_af_decode_values_g(vr, vh, q8, j0, n, hdv, 1, P, c, O, pf); break;
    case 2: hy_af_decode_values_g(vr, vh, q8, j0, n, hdv, 2, P, c, O, pf); break;
    case 3: hy_af_decode_values_g(vr, vh, q8, j0, n, hdv, 3, P, c, O, pf); break;
    default: hy_af_decode_values_g(vr, vh, q8, j0, n, hdv, 4, P, c, O, pf); break;
    }
}

/* Where query i of the unit keeps split sp's state in f->part. */
static inline float *hy_af_part_state(const hy_attn_flash_t *f, int32_t i, int32_t sp)
{
    const int32_t nh = f->h1 - f->h0;

    return f->part + (size_t)(i / nh) * f->part_ts + (size_t)(i % nh) * f->part_hs +
           (size_t)(sp - f->part_s0) * ((size_t)f->hdv + 2);
}

/* Query i's state at the end of split sp: into the part array, or folded
 * into its running fold; then empty for the next split. */
static void hy_af_decode_split(const hy_attn_flash_t *f, int32_t nq, int32_t sp, float *O,
                               float *m, float *l, float *Oa, float *Ma, float *La)
{
    const int32_t hdv = f->hdv;

    for (int32_t i = 0; i < nq; i++) {
        float *o = O + (size_t)i * hdv;
        if (f->part) {
            float *st = hy_af_part_state(f, i, sp);
            st[0] = m[i];
            st[1] = l[i];
            memcpy(st + 2, o, sizeof(float) * (size_t)hdv);
        } else {
            hy_af_fold(&Ma[i], &La[i], Oa + (size_t)i * hdv, 1, m[i], l[i], o, 1, hdv);
        }
        m[i] = -INFINITY;
        l[i] = 0.0f;
        memset(o, 0, sizeof(float) * (size_t)hdv);
    }
}

void HY_AF_DECODE_ENTRY(const hy_attn_flash_t *f, float *scr)
{
    const int32_t hd = f->hd, hdv = f->hdv, nh = f->h1 - f->h0;
    const int32_t nq = (f->t1 - f->t0) * nh;
    const int32_t hdp = (hd + HY_AF_W - 1) / HY_AF_W * HY_AF_W;
    float *kr = scr, *vr = kr + (size_t)HY_AF_BK * hdp, *Q = vr + (size_t)HY_AF_BK * hdv;
    float *O = Q + (size_t)nq * hdp, *m = O + (size_t)nq * hdv;
    float *l = m + nq, *Oa = l + nq, *Ma = Oa + (size_t)nq * hdv, *La = Ma + nq;
    /* a group's scores, then weights (a tile's, and a vector more: the
     * softmax's vectors may start anywhere in it; zeroed, so that lanes
     * past the last score are finite and defined) */
    float Sg[HY_AF_DEC_G][HY_AF_BK + HY_AF_W] __attribute__((aligned(64))) = {{0}};
    /* f16 rows are read from the pages as they are used; with K and V in
     * f16, the next tile's key rows (nk: rows[cur ^ 1][0]) are prefetched
     * in step with this tile's score blocks and its value rows through the
     * page-run walker pf in the value pass, else both through the walker.
     * The step spreads the key lines over the score arithmetic as it runs
     * (the walker's bookkeeping there cost the score chains: warm 512 keys
     * 28.5 -> 26.3 us); all the next tile's lines in the score pass, as
     * before, left the value pass with no reads in flight and the score
     * pass stalled on them (bench_attn decode, Gemma 3's 4/1 x 256, two
     * threads, 16,384 keys cold, eight alternating rounds twice: medians
     * 1165 -> 1110 and 1072 -> 1009 us; 4,096 keys warm 261 -> 237 us; 512
     * keys warm 33.7 -> 34.7 us) */
    _Static_assert(HY_AF_BK % 4 == 0, "a tile's score blocks end inside its rows");
    const uint16_t *rows[2][2][HY_AF_BK];
    const uint16_t **krow = rows[0][0], **vrow = rows[0][1];
    const bool k16 = f->kv_f16 && hd % HY_AF_W == 0, v16 = f->kv_f16 && hdv % HY_AF_W == 0;
    /* q8_0 rows (whole blocks: every row is) are read from the pages too, at
     * 34 bytes for 32 elements instead of a float tile's 128 */
    const bool kq = f->kv_q8 && hd % 32 == 0, vq = f->kv_q8 && hdv % 32 == 0;
    const bool krows = k16 || kq, vrows = v16 || vq;
    /* (rows of whole line pairs a chunk each: hy_af_dots) */
    const bool step = k16 && v16 && hdv == hd && hd % 64 == 0 && HY_AF_W >= 8;
    int cur = 0;
    hy_af_pf_t pf;
    int32_t kmin = INT32_MAX, kmax = -1, a0, a;

    pf.n_run = pf.ri = 0; /* empty until a tile queues the next one's rows */
    for (int32_t i = 0; i < nq; i++) {
        int32_t t = f->t0 + i / nh, h = f->h0 + i % nh, p = f->pos[t];
        const float *qv = f->q + (size_t)t * f->q_stride + (size_t)h * hd;
        for (int32_t d = 0; d < hdp; d++)
            Q[(size_t)i * hdp + d] = d < hd ? qv[d] * f->scale : 0.0f;
        memset(O + (size_t)i * hdv, 0, sizeof(float) * (size_t)hdv);
        m[i] = Ma[i] = -INFINITY;
        l[i] = La[i] = 0.0f;
        kmin = HY_MIN(kmin, f->window > 0 ? HY_MAX(0, p - f->window + 1) : 0);
        kmax = HY_MAX(kmax, p);
    }
    if (f->part) {
        /* this unit's splits start empty: those it sees no key of stay so */
        for (int32_t sp = f->k0 / f->split; sp < f->k1 / f->split; sp++)
            for (int32_t i = 0; i < nq; i++)
                hy_af_part_state(f, i, sp)[0] = -INFINITY;
        kmin = HY_MAX(kmin, f->k0);
        kmax = HY_MIN(kmax, f->k1 - 1);
    }
    /* the flash kernel's tiles: multiples of HY_AF_BK positions */
    for (a0 = kmin - kmin % HY_AF_BK, a = a0; a <= kmax; a += HY_AF_BK) {
        int32_t lo = HY_MAX(a, kmin), hi = HY_MIN(a + HY_AF_BK, kmax + 1);
        if (f->split > 0 && a > a0 && a % f->split == 0)
            hy_af_decode_split(f, nq, a / f->split - 1, O, m, l, Oa, Ma, La);
        /* the next tile's rows come in while this one is computed: at long
         * contexts the pages are not in cache (the weights streamed
         * through it since the last token) */
        const uint16_t **nk = NULL;
        int32_t nn = 0;
        if (step) {
            if (a == a0) {
                hy_af_rows(f, false, lo, hi, rows[cur][0]);
                hy_af_rows(f, true, lo, hi, rows[cur][1]);
            }
            krow = rows[cur][0];
            vrow = rows[cur][1];
            if (a + HY_AF_BK <= kmax) {
                nn = HY_MIN(a + 2 * HY_AF_BK, kmax + 1) - (a + HY_AF_BK);
                nk = rows[cur ^ 1][0];
                hy_af_rows(f, false, a + HY_AF_BK, a + HY_AF_BK + nn, nk);
                hy_af_rows(f, true, a + HY_AF_BK, a + HY_AF_BK + nn, rows[cur ^ 1][1]);
                /* blocks past the next tile's rows prefetch lines already asked for */
                for (int32_t r = nn; r < HY_AF_BK; r++)
                    nk[r] = nk[0];
                /* the value rows for the value pass's steps */
                pf.n_run = pf.ri = 0;
                pf.off = 0;
                hy_af_pf_rows(&pf, f, true, a + HY_AF_BK, a + HY_AF_BK + nn);
            }
        } else {
            hy_af_pf_next(&pf, f, a, kmax);
            if (krows)
                hy_af_rows(f, false, lo, hi, krow);
            else
                hy_af_load_keys(f, hdp, lo, hi, kr);
            if (vrows)
                hy_af_rows(f, true, lo, hi, vrow);
            else
                hy_af_load_rows(f, true, hdv, lo, hi, vr);
        }
        int32_t covered = 0;
        for (int32_t i = 0; i < nq;) {
            int32_t p = f->pos[f->t0 + i / nh];
            int32_t qlo = f->window > 0 ? HY_MAX(0, p - f->window + 1) : 0;
            int32_t j0 = HY_MAX(lo, qlo), j1 = HY_MIN(hi, p + 1);
            /* this query and the next heads of the same token */
            int g = 1;
            while (g < HY_AF_DEC_G && i + g < nq && (i + g) / nh == i / nh)
                g++;
            if (j0 < j1) {
                float *ss[HY_AF_DEC_G], *os[HY_AF_DEC_G], c[HY_AF_DEC_G];
                for (int q = 0; q < g; q++) {
                    ss[q] = Sg[q];
                    os[q] = O + (size_t)(i + q) * hdv;
                }
                const bool first = covered == 0;
                hy_af_decode_scores(Q + (size_t)i * hdp, hdp, g, kr, krows ? krow : NULL, kq,
                                    j0 - lo, j1 - j0, ss, &pf, first ? nk : NULL);
                if (first)
                    covered = (j1 - j0 + 3) / 4 * 4;
                hy_af_decode_softmax(j0 - lo, j1 - j0, f->softcap, ss, g, m + i, l + i, c);
                hy_af_decode_values(vr, vrows ? vrow : NULL, vq, j0 - lo, j1 - j0, hdv, g,
                                    (const float *const *)ss, c, os, &pf);
            }
            i += g;
        }
        hy_af_pf_step(&pf, INT32_MAX); /* whatever the passes left */
        /* the next tile's key rows past the blocks this one had (a
         * window's first, part tile) */
        for (int32_t r = covered; nk && r < nn; r++)
            for (size_t o = 0; o < (size_t)hd * sizeof(uint16_t); o += 64)
                __builtin_prefetch((const char *)nk[r] + o, 0, 2);
        cur ^= step;
    }
    if (f->part) {
        if (kmin <= kmax)
            hy_af_decode_split(f, nq, (a - HY_AF_BK) / f->split, O, m, l, Oa, Ma, La);
        return;
    }
    for (int32_t i = 0; i < nq; i++) {
        int32_t t = f->t0 + i / nh, h = f->h0 + i % nh;
        hy_af_last(&Ma[i], &La[i], Oa + (size_t)i * hdv, 1, m[i], l[i], O + (size_t)i * hdv, 1,
                   hdv, f->out + (size_t)t * f->out_stride + (size_t)h * hdv);
    }
}

void HY_AF_MERGE_ENTRY(const float *part, int32_t n, int32_t hdv, float *out)
{
    float M = -INFINITY, L = 0.0f;

    /* the running fold lives in out itself until it is normalised */
    memset(out, 0, sizeof(float) * (size_t)hdv);
    for (int32_t s = 0; s < n; s++) {
        const float *st = part + (size_t)s * ((size_t)hdv + 2);
        hy_af_fold(&M, &L, out, 1, st[0], st[1], st + 2, 1, hdv);
    }
    hy_af_finish(L, out, 1, hdv, out);
}
