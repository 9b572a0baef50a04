/*
 * attn_flash_impl.h - the flash-attention prefill kernel over the paged KV
 * cache, written once for every vector width: attn_avx512.c and attn_avx2.c
 * each define the vector type and a dozen primitives (below) under their
 * own target pragma, then include this file.  Queries sit in the SIMD lanes
 * (groups of HY_AF_VMAX vectors of lanes, Qt is [d][lanes]) and the keys
 * are swept in tiles of HY_ATTN_FLASH_TILE positions: each tile is
 * converted to f32 once for every query of the unit, then per group
 * S^T = K Qt (HY_AF_NK keys x HY_AF_VMAX vectors in registers), a per-lane
 * online softmax (vertical operations only), and O^T += V^T P^T (HY_AF_ND
 * value columns x HY_AF_VMAX vectors).  Masking runs only on tiles that
 * cross a lane's causal edge or window.
 *
 * Units of few queries (decode) take hy_af_decode instead, which performs
 * for each (query, key) the same operations in the same order -- over the
 * same absolute 64-position tiles, the keys of one query across the lanes
 * -- so a query's output has the same bits from either kernel, and from any
 * batch or chunking of the prompt (see hy_af_decode).
 *
 * Both reduce a query's keys in splits of f->split absolute positions:
 * each split's softmax state starts empty and the states fold left to
 * right (hy_af_fold).  A single sweep folds as it crosses each boundary;
 * the decode kernel can instead write the states of a range of splits
 * (f->part) so that threads share one long sequence's keys, and
 * HY_AF_MERGE_ENTRY folds them afterwards with the same bits.
 *
 * The includer defines: HY_AF_W (lanes per vector), HY_AF_VMAX, HY_AF_NK,
 * HY_AF_ND (register blocking), HY_AF_ENTRY and HY_AF_DECODE_ENTRY (the
 * exported functions' names), the type hy_af_v, and always-inline
 * hy_af_zero, load, store, set1, fma (a*b+c), max, sub, add, exp (x <= 0),
 * mask_pos (s, or -inf where the key position is outside a lane's [qlo,
 * qpos]), keep_ge (p where x >= t, else 0, NaN x included), one_if_ninf (c,
 * or 1 where m is -inf), cvt_f16 (HY_AF_W halves to floats) and transpose
 * (a W x W block: dst[c*ds + r] = src[r*ss + c]).
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
    float *Qt;                          /* [hd][HY_AF_W nv]: query times scale */
    float *O;                           /* [hdv][HY_AF_W nv]: unnormalised output */
    float m[HY_AF_GL], l[HY_AF_GL];     /* running max and sum per lane */
    float *Oa;                          /* the earlier splits folded: like O */
    float Ma[HY_AF_GL], La[HY_AF_GL];   /* ... their max and sum */
    int32_t qpos[HY_AF_GL], qlo[HY_AF_GL];
} hy_af_group_t;

/* The next tile's K/V rows, prefetched into L2 a few lines at a time while
 * the current tile is computed: pages are scattered, so the hardware
 * prefetcher finds them only a page at a time, and a burst of a whole
 * tile's lines stalls on the fill buffers. */
typedef struct {
    const char *run[2 * (HY_AF_BK + 1)]; /* page runs of rows: start, bytes */
    size_t len[2 * (HY_AF_BK + 1)];
    int32_t n_run, ri;
    size_t off;                          /* within run[ri] */
} hy_af_pf_t;

/* Issues up to n more line prefetches. */
static inline void hy_af_pf_step(hy_af_pf_t *pf, int n)
{
    while (n > 0 && pf->ri < pf->n_run) {
        __builtin_prefetch(pf->run[pf->ri] + pf->off, 0, 2);
        n--;
        pf->off += 64;
        if (pf->off >= pf->len[pf->ri]) {
            pf->ri++;
            pf->off = 0;
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

/* S[r][lanes] = sum_d K[r][d] Qt[d][lanes] for rows r of nk consecutive
 * keys (NV vectors of lanes, NK keys: NV*NK accumulators, one FMA chain per
 * score over d); mx = max(mx, scores). */
HY_AF_INLINE void hy_af_qk_tile(const float *Qt, const float *K, int hd, float *S, int NV,
                                int NK, hy_af_v *mx)
{
    const int L = HY_AF_W * NV;
    hy_af_v acc[HY_AF_NK > HY_AF_ND ? HY_AF_NK : HY_AF_ND][HY_AF_VMAX];

#pragma GCC unroll 16
    for (int kk = 0; kk < NK; kk++)
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++)
            acc[kk][v] = hy_af_zero();
    for (int d = 0; d < hd; d++) {
        hy_af_v qv[HY_AF_VMAX];
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++)
            qv[v] = hy_af_load(Qt + (size_t)d * L + HY_AF_W * v);
#pragma GCC unroll 16
        for (int kk = 0; kk < NK; kk++) {
            hy_af_v kb = hy_af_set1(K[(size_t)kk * hd + d]);
#pragma GCC unroll 3
            for (int v = 0; v < NV; v++)
                acc[kk][v] = hy_af_fma(kb, qv[v], acc[kk][v]);
        }
    }
#pragma GCC unroll 16
    for (int kk = 0; kk < NK; kk++)
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++) {
            hy_af_store(S + (size_t)kk * L + HY_AF_W * v, acc[kk][v]);
            mx[v] = hy_af_max(mx[v], acc[kk][v]);
        }
}

HY_AF_INLINE void hy_af_qk(const float *Qt, const float *K, int hd, int n, float *S, int NV,
                           hy_af_v *mx)
{
    int r = 0;

    for (; r + HY_AF_NK <= n; r += HY_AF_NK)
        hy_af_qk_tile(Qt, K + (size_t)r * hd, hd, S + (size_t)r * HY_AF_W * NV, NV, HY_AF_NK, mx);
    for (; r + 2 <= n; r += 2)
        hy_af_qk_tile(Qt, K + (size_t)r * hd, hd, S + (size_t)r * HY_AF_W * NV, NV, 2, mx);
    if (r < n)
        hy_af_qk_tile(Qt, K + (size_t)r * hd, hd, S + (size_t)r * HY_AF_W * NV, NV, 1, mx);
}

/* O^T[d][lanes] = c O^T[d][lanes] + sum_r V[r][d] P[r][lanes] for value
 * columns d0 .. d0+ND (ND*NV accumulators, one chain per output over r). */
HY_AF_INLINE void hy_af_pv_tile(float *O, const float *P, const float *V, int hdv, int n,
                                const hy_af_v *c, int NV, int ND)
{
    const int L = HY_AF_W * NV;
    hy_af_v acc[HY_AF_NK > HY_AF_ND ? HY_AF_NK : HY_AF_ND][HY_AF_VMAX];

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

/* Folds keys [j0, j0+n) (rows K, V) into group gr: scores, the cap, the
 * mask where the tile crosses a lane's edge, the online softmax update and
 * the weighted values.  S is n x HY_AF_W NV scratch. */
HY_AF_INLINE void hy_af_group_tile(hy_af_group_t *gr, const float *K, const float *V,
                                   int32_t j0, int n, int hd, int hdv, float softcap,
                                   float *S, hy_af_pf_t *pf, int NV)
{
    const int L = HY_AF_W * NV;
    const hy_af_v ninf = hy_af_set1(-INFINITY);
    int masked = !(j0 + n - 1 <= gr->pmin && j0 >= gr->lomax);
    hy_af_v mx[HY_AF_VMAX], c[HY_AF_VMAX], mn[HY_AF_VMAX], lsum[HY_AF_VMAX];

    for (int v = 0; v < NV; v++)
        mx[v] = ninf;
    hy_af_qk(gr->Qt, K, hd, n, S, NV, mx);

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
                                 int32_t j0, int n, int hd, int hdv, float softcap, float *S,
                                 hy_af_pf_t *pf)
{
    /* a constant NV per copy, so the accumulators live in registers */
    switch (gr->nv) {
    case 1:
        hy_af_group_tile(gr, K, V, j0, n, hd, hdv, softcap, S, pf, 1);
        break;
    case 2:
        hy_af_group_tile(gr, K, V, j0, n, hd, hdv, softcap, S, pf, 2);
        break;
    default:
        hy_af_group_tile(gr, K, V, j0, n, hd, hdv, softcap, S, pf, 3);
        break;
    }
}

/* Rows [lo, hi) of one KV head into a float tile (row p - lo), page by page. */
static void hy_af_load_rows(const hy_attn_flash_t *f, const uint8_t *base, size_t page_bytes,
                            size_t row_bytes, int32_t dim, int32_t lo, int32_t hi, float *tile)
{
    int32_t pt = f->page_tokens;

    for (int32_t p = lo; p < hi;) {
        int32_t pi = p / pt, slot = p % pt, cnt = HY_MIN(hi - p, pt - slot);
        const uint8_t *src = base + (size_t)f->pages[pi] * page_bytes + (size_t)slot * row_bytes;
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
        p += cnt;
    }
}

/* Queues rows [lo, hi) of one KV head for hy_af_pf_step. */
static void hy_af_pf_rows(hy_af_pf_t *pf, const hy_attn_flash_t *f, const uint8_t *base,
                          size_t page_bytes, size_t row_bytes, int32_t lo, int32_t hi)
{
    int32_t pt = f->page_tokens;

    for (int32_t p = lo; p < hi;) {
        int32_t pi = p / pt, slot = p % pt, cnt = HY_MIN(hi - p, pt - slot);
        pf->run[pf->n_run] = (const char *)base + (size_t)f->pages[pi] * page_bytes +
                             (size_t)slot * row_bytes;
        pf->len[pf->n_run++] = (size_t)cnt * row_bytes;
        p += cnt;
    }
}

/* Queues the K and V rows of the tile after the one at a (keys up to kmax). */
static void hy_af_pf_next(hy_af_pf_t *pf, const hy_attn_flash_t *f, int32_t a, int32_t kmax)
{
    pf->n_run = pf->ri = 0;
    pf->off = 0;
    if (a + HY_AF_BK <= kmax) {
        int32_t nhi = HY_MIN(a + 2 * HY_AF_BK, kmax + 1);
        hy_af_pf_rows(pf, f, f->k_base, f->k_page_bytes, f->k_row_bytes, a + HY_AF_BK, nhi);
        hy_af_pf_rows(pf, f, f->v_base, f->v_page_bytes, f->v_row_bytes, a + HY_AF_BK, nhi);
    }
}

/* A split boundary: every lane's state so far folds into its Oa, Ma, La
 * and the lane starts the next split empty. */
static void hy_af_group_split(hy_af_group_t *gr, int32_t hdv)
{
    int32_t L = HY_AF_W * gr->nv;

    for (int32_t i = 0; i < gr->n; i++)
        hy_af_fold(&gr->Ma[i], &gr->La[i], gr->Oa + i, (size_t)L, gr->m[i], gr->l[i],
                   gr->O + i, (size_t)L, hdv);
    for (int32_t i = 0; i < L; i++) {
        gr->m[i] = -INFINITY;
        gr->l[i] = 0.0f;
    }
    memset(gr->O, 0, sizeof(float) * (size_t)hdv * L);
}

/* Lanes [q0, q0+nl) of the unit: set up the groups, sweep the keys, write
 * the outputs. */
static void hy_af_sweep(const hy_attn_flash_t *f, float *scr, int32_t q0, int32_t nl)
{
    const int32_t hd = f->hd, hdv = f->hdv, nh = f->h1 - f->h0;
    float *Kt = scr, *Vt = Kt + (size_t)HY_AF_BK * hd, *S = Vt + (size_t)HY_AF_BK * hdv;
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
        gr->Qt = Qbase + (size_t)gi * HY_AF_GL * (hd + 2 * hdv);
        gr->O = gr->Qt + (size_t)HY_AF_GL * hd;
        gr->Oa = gr->O + (size_t)HY_AF_GL * hdv;
        gr->pmin = gr->lomin = INT32_MAX;
        gr->pmax = gr->lomax = -1;
        memset(gr->Qt, 0, sizeof(float) * (size_t)hd * L);
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
            for (int32_t d = 0; d < hd; d++)
                gr->Qt[(size_t)d * L + i] = qv[d] * f->scale;
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
        hy_af_load_rows(f, f->k_base, f->k_page_bytes, f->k_row_bytes, hd, clo, chi, Kt);
        hy_af_load_rows(f, f->v_base, f->v_page_bytes, f->v_row_bytes, hdv, clo, chi, Vt);
        hy_af_pf_next(&pf, f, a, kmax);
        for (int32_t gi = 0; gi < ng; gi++) {
            int32_t glo = HY_MAX(clo, grs[gi].lomin), ghi = HY_MIN(chi, grs[gi].pmax + 1);
            if (glo >= ghi)
                continue;
            hy_af_group_tile_any(&grs[gi], Kt + (size_t)(glo - clo) * hd,
                                 Vt + (size_t)(glo - clo) * hdv, glo, ghi - glo, hd, hdv,
                                 f->softcap, S, &pf);
        }
        hy_af_pf_step(&pf, INT32_MAX); /* whatever the groups left */
    }

    for (int32_t gi = 0; gi < ng; gi++) {
        hy_af_group_t *gr = &grs[gi];
        int32_t L = HY_AF_W * gr->nv;
        for (int32_t i = 0; i < gr->n; i++) {
            int32_t lane = gr->lane0 + i, t = f->t0 + lane / nh, h = f->h0 + lane % nh;
            hy_af_last(&gr->Ma[i], &gr->La[i], gr->Oa + i, (size_t)L, gr->m[i], gr->l[i],
                       gr->O + i, (size_t)L, hdv,
                       f->out + (size_t)t * f->out_stride + (size_t)h * hdv);
        }
    }
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
 * absolute tiles) the scores of the keys the query sees are each one FMA
 * chain over d, fma(K[d], Q[d], s) from 0, computed W keys at a time from
 * the tile transposed; the cap, max, exp and the drop below HY_AF_EXP_MIN
 * are the same lane-wise operations; the weights are summed one after the
 * other in key order (the flash lane's chain, minus the zeros of keys it
 * masks); the value sums are one FMA chain per column in key order,
 * fma(V[j][d], P[j], acc) from 0, W columns at a time; and then
 * l = fma(l, c, lsum), O = fma(O, c, acc) as there.  Keys a flash lane
 * masks contribute exact zeros there, which is why skipping them here
 * changes no bit (barring sums that are exactly zero, whose sign could
 * differ). */

static inline float hy_af_max_scalar(float a, float b)
{
    return a > b ? a : b; /* maxps: b where either is NaN */
}

/* Rows [0, n) of kr (stride hd) transposed into kt[d*HY_AF_BK + j]; the
 * columns up to the next multiple of HY_AF_W are zero-filled first. */
static void hy_af_transpose_keys(const float *kr, int n, int hd, float *kt, float *blk)
{
    int nr = (n + HY_AF_W - 1) / HY_AF_W * HY_AF_W, d = 0;

    for (; d + HY_AF_W <= hd; d += HY_AF_W)
        for (int j = 0; j < nr; j += HY_AF_W) {
            if (j + HY_AF_W <= n) {
                hy_af_transpose(kr + (size_t)j * hd + d, (size_t)hd, kt + (size_t)d * HY_AF_BK + j,
                                HY_AF_BK);
            } else {
                /* the ragged end of the keys: zero rows past n */
                for (int r = 0; r < HY_AF_W; r++)
                    for (int c = 0; c < HY_AF_W; c++)
                        blk[r * HY_AF_W + c] = j + r < n ? kr[(size_t)(j + r) * hd + d + c] : 0.0f;
                hy_af_transpose(blk, HY_AF_W, kt + (size_t)d * HY_AF_BK + j, HY_AF_BK);
            }
        }
    for (; d < hd; d++) /* odd head sizes */
        for (int j = 0; j < nr; j++)
            kt[(size_t)d * HY_AF_BK + j] = j < n ? kr[(size_t)j * hd + d] : 0.0f;
}

/* Position p's row of one KV head's f16 pages (base, page and row sizes). */
static inline const uint16_t *hy_af_row_f16(const hy_attn_flash_t *f, const uint8_t *base,
                                            size_t page_bytes, size_t row_bytes, int32_t p)
{
    return (const uint16_t *)(const void *)(base +
                                            (size_t)f->pages[p / f->page_tokens] * page_bytes +
                                            (size_t)(p % f->page_tokens) * row_bytes);
}

/* The tile's keys [lo, hi) as floats, transposed into kt.  Halves whose
 * ISA has hy_af_transpose_f16 go straight from the pages, 8 rows at a
 * time (a ragged end reads a row of zeros); the rest are converted into
 * kr and transposed from there. */
static void hy_af_decode_keys(const hy_attn_flash_t *f, int32_t lo, int32_t hi, float *kr,
                              float *kt, float *blk)
{
#ifdef HY_AF_HAVE_TRANSPOSE_F16
    static const uint16_t zero_row[HY_ATTN_MAX_HEAD_DIM];
    if (f->kv_f16 && f->hd % 8 == 0 && f->hd <= HY_ATTN_MAX_HEAD_DIM) {
        const int32_t n = hi - lo;
        for (int32_t j = 0; j < n; j += 8) {
            const uint16_t *rp[8];
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                int32_t p = lo + j + r;
                rp[r] = p < hi ? hy_af_row_f16(f, f->k_base, f->k_page_bytes, f->k_row_bytes, p)
                               : zero_row;
            }
            for (int32_t d = 0; d < f->hd; d += 8)
                hy_af_transpose_f16(rp, d, kt + (size_t)d * HY_AF_BK + j, HY_AF_BK);
        }
        return;
    }
#endif
    hy_af_load_rows(f, f->k_base, f->k_page_bytes, f->k_row_bytes, f->hd, lo, hi, kr);
    hy_af_transpose_keys(kr, hi - lo, f->hd, kt, blk);
}

/* The key vectors [jb0, jb1) of the tile that keys [j0, j0+n) touch. */
#define HY_AF_DEC_SPAN(j0, n, jb0, jb1)                                            \
    const int jb0 = (j0) / HY_AF_W * HY_AF_W,                                      \
              jb1 = ((j0) + (n) + HY_AF_W - 1) / HY_AF_W * HY_AF_W

/* Queries of one token (heads of a KV group) that share a tile's keys and
 * so take its pass together, and the accumulators such a pass keeps (half
 * the vector registers). */
#define HY_AF_DEC_G 4
#define HY_AF_DEC_REGS (HY_AF_W >= 16 ? 16 : 8)

/* acc[q][v] (q < g, v < cnt) = the chain fma(base[i*stride + v*W ...],
 * coef[q][i], acc) over i in [i0, i1), from zero: the g queries' chains
 * side by side, so each row of base is read once for the group, and
 * g * cnt <= HY_AF_DEC_REGS chains keep both FMA ports busy through each
 * one's latency.  Scores (rows of the transposed keys times the queries'
 * d-th values) and value sums (value rows times the keys' weights) are
 * both this.  With hrows, row i is halves at hrows[i] + hoff instead,
 * converted as loaded: the value rows straight from f16
 * pages, without a converted copy of the tile (a literal NULL compiles
 * that away).  With pf, a line of the next tile is prefetched per row. */
HY_AF_INLINE void hy_af_chains(const float *base, size_t stride, const uint16_t *const *hrows,
                               int hoff, const float *const *coef, int i0, int i1, const int g,
                               int cnt, hy_af_pf_t *pf,
                               hy_af_v acc[HY_AF_DEC_G][HY_AF_DEC_REGS])
{
#pragma GCC unroll 4
    for (int q = 0; q < HY_AF_DEC_G; q++)
#pragma GCC unroll 16
        for (int v = 0; v < HY_AF_DEC_REGS; v++)
            acc[q][v] = hy_af_zero();
    for (int i = i0; i < i1; i++) {
        const float *row = hrows ? NULL : base + (size_t)i * stride;
        hy_af_v c[HY_AF_DEC_G];
        if (pf)
            hy_af_pf_step(pf, 1);
#pragma GCC unroll 4
        for (int q = 0; q < HY_AF_DEC_G; q++)
            c[q] = q < g ? hy_af_set1(coef[q][i]) : hy_af_zero();
#pragma GCC unroll 16
        for (int v = 0; v < HY_AF_DEC_REGS; v++)
            if (v < cnt) {
                /* a half converts to its float exactly: the same x either way */
                const hy_af_v x = hrows ? hy_af_cvt_f16(hrows[i] + hoff + v * HY_AF_W)
                                        : hy_af_load(row + v * HY_AF_W);
#pragma GCC unroll 4
                for (int q = 0; q < HY_AF_DEC_G; q++)
                    if (q < g)
                        acc[q][v] = hy_af_fma(x, c[q], acc[q][v]);
            }
    }
}

/* The scores of g <= HY_AF_DEC_G queries over keys [j0, j0+n) of the
 * transposed tile (positions relative to the tile's first loaded row) into
 * S[q]: per key a chain over d, fma(K[d], Q[d], s) from 0, all g queries
 * in one pass over the tile (64 KB of floats at a head size of 256: read
 * once per query, it came from L2 four times for Gemma 3's four heads). */
HY_AF_INLINE void hy_af_decode_scores_g(const float *const *Q, const int g, const float *kt,
                                        int j0, int n, int hd, float *const *S, hy_af_pf_t *pf)
{
    const int kv = HY_MAX(1, HY_AF_DEC_REGS / g);
    HY_AF_DEC_SPAN(j0, n, jb0, jb1);

    for (int jb = jb0; jb < jb1; jb += kv * HY_AF_W) {
        const int cnt = HY_MIN(kv, (jb1 - jb) / HY_AF_W);
        hy_af_v acc[HY_AF_DEC_G][HY_AF_DEC_REGS];
        /* a full pass with a constant count: no per-vector tests in the loop */
        if (cnt == kv)
            hy_af_chains(kt + jb, HY_AF_BK, NULL, 0, Q, 0, hd, g, kv, pf, acc);
        else
            hy_af_chains(kt + jb, HY_AF_BK, NULL, 0, Q, 0, hd, g, cnt, pf, acc);
#pragma GCC unroll 4
        for (int q = 0; q < HY_AF_DEC_G; q++)
#pragma GCC unroll 16
            for (int v = 0; v < HY_AF_DEC_REGS; v++)
                if (q < g && v < cnt)
                    hy_af_store(S[q] + jb + v * HY_AF_W, acc[q][v]);
    }
}

/* One query's softmax step over its scores S[j0, j0+n): cap, new max m,
 * the weights in place of the scores, l updated; returns the factor that
 * rescales the query's earlier output. */
static float hy_af_decode_softmax(int j0, int n, float softcap, float *S, float *m, float *l)
{
    HY_AF_DEC_SPAN(j0, n, jb0, jb1);
    float mx = -INFINITY, lsum = 0.0f;

    for (int j = j0; j < j0 + n; j++) {
        if (softcap > 0.0f)
            S[j] = softcap * tanhf(S[j] / softcap);
        mx = hy_af_max_scalar(mx, S[j]);
    }
    /* the flash lane's new max and rescale factor, through the same
     * vector operations */
    hy_af_v mv = hy_af_set1(*m), mn = hy_af_max(mv, hy_af_set1(mx)), x = hy_af_sub(mv, mn);
    float c = hy_af_lane0(hy_af_one_if_ninf(hy_af_keep_ge(hy_af_exp(x), x, HY_AF_EXP_MIN), mn));
    for (int jb = jb0; jb < jb1; jb += HY_AF_W) {
        hy_af_v xs = hy_af_sub(hy_af_load(S + jb), mn);
        hy_af_store(S + jb, hy_af_keep_ge(hy_af_exp(xs), xs, HY_AF_EXP_MIN));
    }
    for (int j = j0; j < j0 + n; j++)
        lsum = lsum + S[j];
    *m = hy_af_lane0(mn);
    *l = fmaf(*l, c, lsum);
    return c;
}

/* O[q][d] = fma(O[q][d], c[q], acc) for the g queries' weights P[q] over
 * keys [j0, j0+n), acc per column the chain fma(V[j][d], P[j], acc) from 0
 * in key order: each value row read once for the group, as the keys. */
HY_AF_INLINE void hy_af_decode_values_g(const float *vr, const uint16_t *const *vh, int j0,
                                        int n, int hdv, const int g, const float *const *P,
                                        const float *c, float *const *O)
{
    const int cv = HY_MAX(1, HY_AF_DEC_REGS / g);
    int d = 0;

    for (; d + HY_AF_W <= hdv; d += cv * HY_AF_W) {
        const int cnt = HY_MIN(cv, (hdv - d) / HY_AF_W);
        hy_af_v acc[HY_AF_DEC_G][HY_AF_DEC_REGS];
        if (vh && cnt == cv)
            hy_af_chains(NULL, 0, vh, d, P, j0, j0 + n, g, cv, NULL, acc);
        else if (vh)
            hy_af_chains(NULL, 0, vh, d, P, j0, j0 + n, g, cnt, NULL, acc);
        else
            hy_af_chains(vr + d, (size_t)hdv, NULL, 0, P, j0, j0 + n, g, cnt, NULL, acc);
#pragma GCC unroll 4
        for (int q = 0; q < HY_AF_DEC_G; q++)
#pragma GCC unroll 16
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

/* The two passes above for a group of g = 1..HY_AF_DEC_G, unrolled for
 * each g. */
static void hy_af_decode_scores(const float *const *Q, int g, const float *kt, int j0, int n,
                                int hd, float *const *S, hy_af_pf_t *pf)
{
    _Static_assert(HY_AF_DEC_G == 4, "one case per group size");
    switch (g) {
    case 1: hy_af_decode_scores_g(Q, 1, kt, j0, n, hd, S, pf); break;
    case 2: hy_af_decode_scores_g(Q, 2, kt, j0, n, hd, S, pf); break;
    case 3: hy_af_decode_scores_g(Q, 3, kt, j0, n, hd, S, pf); break;
    default: hy_af_decode_scores_g(Q, 4, kt, j0, n, hd, S, pf); break;
    }
}

static void hy_af_decode_values(const float *vr, const uint16_t *const *vh, int j0, int n,
                                int hdv, int g, const float *const *P, const float *c,
                                float *const *O)
{
    switch (g) {
    case 1: hy_af_decode_values_g(vr, vh, j0, n, hdv, 1, P, c, O); break;
    case 2: hy_af_decode_values_g(vr, vh, j0, n, hdv, 2, P, c, O); break;
    case 3: hy_af_decode_values_g(vr, vh, j0, n, hdv, 3, P, c, O); break;
    default: hy_af_decode_values_g(vr, vh, j0, n, hdv, 4, P, c, O); break;
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
    float *kr = scr, *vr = kr + (size_t)HY_AF_BK * hd, *kt = vr + (size_t)HY_AF_BK * hdv;
    float *S = kt + (size_t)HY_AF_BK * hdp, *blk = S + HY_AF_BK + HY_AF_W;
    float *Q = blk + HY_AF_W * HY_AF_W, *O = Q + (size_t)nq * hd, *m = O + (size_t)nq * hdv;
    float *l = m + nq, *Oa = l + nq, *Ma = Oa + (size_t)nq * hdv, *La = Ma + nq;
    /* a group's scores, then weights (S's size each) */
    float Sg[HY_AF_DEC_G][HY_AF_BK + HY_AF_W] __attribute__((aligned(64)));
    /* f16 value rows are read from the pages as they are summed */
    const uint16_t *vrow[HY_AF_BK];
    const bool v16 = f->kv_f16 && hdv % HY_AF_W == 0;
    hy_af_pf_t pf;
    int32_t kmin = INT32_MAX, kmax = -1, a0, a;

    for (int32_t i = 0; i < nq; i++) {
        int32_t t = f->t0 + i / nh, h = f->h0 + i % nh, p = f->pos[t];
        const float *qv = f->q + (size_t)t * f->q_stride + (size_t)h * hd;
        for (int32_t d = 0; d < hd; d++)
            Q[(size_t)i * hd + d] = qv[d] * f->scale;
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
        /* the next tile's rows come in while this one is scored: at long
         * contexts the pages are not in cache (the weights streamed
         * through it since the last token) */
        hy_af_pf_next(&pf, f, a, kmax);
        hy_af_decode_keys(f, lo, hi, kr, kt, blk);
        if (v16)
            for (int32_t p = lo; p < hi; p++)
                vrow[p - lo] = hy_af_row_f16(f, f->v_base, f->v_page_bytes, f->v_row_bytes, p);
        else
            hy_af_load_rows(f, f->v_base, f->v_page_bytes, f->v_row_bytes, hdv, lo, hi, vr);
        for (int32_t i = 0; i < nq;) {
            int32_t p = f->pos[f->t0 + i / nh];
            int32_t qlo = f->window > 0 ? HY_MAX(0, p - f->window + 1) : 0;
            int32_t j0 = HY_MAX(lo, qlo), j1 = HY_MIN(hi, p + 1);
            /* this query and the next heads of the same token */
            int g = 1;
            while (g < HY_AF_DEC_G && i + g < nq && (i + g) / nh == i / nh)
                g++;
            if (j0 < j1) {
                const float *qs[HY_AF_DEC_G];
                float *ss[HY_AF_DEC_G], *os[HY_AF_DEC_G], c[HY_AF_DEC_G];
                for (int q = 0; q < g; q++) {
                    qs[q] = Q + (size_t)(i + q) * hd;
                    ss[q] = Sg[q];
                    os[q] = O + (size_t)(i + q) * hdv;
                }
                hy_af_decode_scores(qs, g, kt, j0 - lo, j1 - j0, hd, ss, &pf);
                for (int q = 0; q < g; q++)
                    c[q] = hy_af_decode_softmax(j0 - lo, j1 - j0, f->softcap, ss[q], &m[i + q],
                                                &l[i + q]);
                hy_af_decode_values(vr, v16 ? vrow : NULL, j0 - lo, j1 - j0, hdv, g,
                                    (const float *const *)ss, c, os);
            }
            i += g;
        }
        hy_af_pf_step(&pf, INT32_MAX); /* whatever the scores left */
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
