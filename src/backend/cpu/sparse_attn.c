/*
 * sparse_attn.c - block-sparse attention's compressed keys, block choice
 * and exact attention over the chosen blocks (sparse_attn.h).  The keys
 * are plain means, summed in page order so the same pages always give the
 * same bits; the choice is a bounded insertion into the best-so-far list
 * (k is tens, the blocks thousands), with the blocks a token must always
 * read scored +infinity so they are chosen like any other; the attention
 * itself is the dense kernels' own arithmetic on a shorter page list.
 * Then the glue: keys kept per layer beside the page pool (a page's key
 * is written when its last slot is, so it always matches the page's rows
 * and stays with the page id through prefix sharing), and a unit's tokens
 * past the threshold, one by one, through the chosen blocks.
 */
#include "backend/cpu/sparse_attn.h"
#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/vexp.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Row s of a page's keys (at row) as floats. */
static void sp_key_row(const hy_attn_flash_t *f, const uint8_t *row, float *out)
{
    if (f->kv_f32) {
        memcpy(out, row, sizeof(float) * (size_t)f->hd);
    } else if (f->kv_f16) {
        const uint16_t *h = (const uint16_t *)(const void *)row;

        for (int32_t i = 0; i < f->hd; i++)
            out[i] = hy_f16_to_f32(h[i]);
    } else {
        f->to_float(row, out, f->hd);
    }
}

void hy_sparse_page_key(const hy_attn_flash_t *f, int32_t page, float *out)
{
    const uint8_t *base = f->k_base + (size_t)page * f->k_page_bytes;
    float row[HY_ATTN_MAX_HEAD_DIM];

    memset(out, 0, sizeof(float) * (size_t)f->hd);
    for (int32_t s = 0; s < f->page_tokens; s++) {
        sp_key_row(f, base + (size_t)s * f->k_row_bytes, row);
        for (int32_t i = 0; i < f->hd; i++)
            out[i] += row[i];
    }
    for (int32_t i = 0; i < f->hd; i++)
        out[i] /= (float)f->page_tokens;
}

void hy_sparse_block_key(const float *page_keys, size_t stride, const int32_t *pages, int32_t n,
                         int32_t hd, float *out)
{
    memset(out, 0, sizeof(float) * (size_t)hd);
    for (int32_t p = 0; p < n; p++) {
        const float *k = page_keys + (size_t)pages[p] * stride;

        for (int32_t i = 0; i < hd; i++)
            out[i] += k[i];
    }
    for (int32_t i = 0; i < hd && n > 0; i++)
        out[i] /= (float)n;
}

typedef float sp_v4_t __attribute__((vector_size(16)));

static inline sp_v4_t sp_splat(float x)
{
    return (sp_v4_t){x, x, x, x};
}

/* blocks scored per pass of the choice */
#define SP_CHUNK 32

/* q . k in one fixed order for any hd: eight running sums over i mod 8 in
 * two 4-lane vectors (a short tail counts as zeros), added lane by lane
 * into the four partial sums (s0 + s4, s1 + s5, s2 + s6, s3 + s7) that
 * this returns; sp_scores finishes them as ((s0 + s4) + (s2 + s6)) +
 * ((s1 + s5) + (s3 + s7)).  The independent sums keep the adds from
 * serializing. */
static inline sp_v4_t sp_dot4(const float *q, const float *k, int32_t hd)
{
    sp_v4_t lo = {0, 0, 0, 0}, hi = lo, qv, kv;
    int32_t i = 0;

    for (; i + 8 <= hd; i += 8) {
        memcpy(&qv, q + i, sizeof qv);
        memcpy(&kv, k + i, sizeof kv);
        lo += qv * kv;
        memcpy(&qv, q + i + 4, sizeof qv);
        memcpy(&kv, k + i + 4, sizeof kv);
        hi += qv * kv;
    }
    if (i < hd) {
        float qt[8] = {0}, kt[8] = {0};

        memcpy(qt, q + i, sizeof(float) * (size_t)(hd - i));
        memcpy(kt, k + i, sizeof(float) * (size_t)(hd - i));
        memcpy(&qv, qt, sizeof qv);
        memcpy(&kv, kt, sizeof kv);
        lo += qv * kv;
        memcpy(&qv, qt + 4, sizeof qv);
        memcpy(&kv, kt + 4, sizeof kv);
        hi += qv * kv;
    }
    return lo + hi;
}

typedef int32_t sp_i4_t __attribute__((vector_size(16)));

/* The scores of blocks key[0..n) (n a multiple of 4) into cs: four
 * blocks' partial sums transposed so that each block's last three adds
 * run once per four blocks, lane by lane (the same bits as finishing each
 * block alone).  Choosing scores every earlier block of a long sequence
 * per token, so this is the innermost loop of a million-token decode;
 * always inlined, so that a constant hd unrolls it. */
static inline __attribute__((always_inline)) void
sp_scores(const float *qs, const float *key, size_t stride, int32_t n, int32_t hd, float *cs)
{
    for (int32_t j = 0; j < n; j += 4, key += 4 * stride) {
        sp_v4_t a = sp_dot4(qs, key, hd), b = sp_dot4(qs, key + stride, hd);
        sp_v4_t c = sp_dot4(qs, key + 2 * stride, hd), d = sp_dot4(qs, key + 3 * stride, hd);
        /* ab = a0 b0 a1 b1, cd = c0 d0 c1 d1, ab2 = a2 b2 a3 b3, cd2 likewise */
        sp_v4_t ab = __builtin_shuffle(a, b, (sp_i4_t){0, 4, 1, 5});
        sp_v4_t cd = __builtin_shuffle(c, d, (sp_i4_t){0, 4, 1, 5});
        sp_v4_t ab2 = __builtin_shuffle(a, b, (sp_i4_t){2, 6, 3, 7});
        sp_v4_t cd2 = __builtin_shuffle(c, d, (sp_i4_t){2, 6, 3, 7});
        /* lane x of w_i is block j + x's partial sum i */
        sp_v4_t w0 = __builtin_shuffle(ab, cd, (sp_i4_t){0, 1, 4, 5});
        sp_v4_t w1 = __builtin_shuffle(ab, cd, (sp_i4_t){2, 3, 6, 7});
        sp_v4_t w2 = __builtin_shuffle(ab2, cd2, (sp_i4_t){0, 1, 4, 5});
        sp_v4_t w3 = __builtin_shuffle(ab2, cd2, (sp_i4_t){2, 3, 6, 7});
        sp_v4_t s = (w0 + w2) + (w1 + w3);

        memcpy(cs + j, &s, sizeof s);
    }
}

/* Whether any of cs[0..n) (n a multiple of 4) is above t. */
static bool sp_any_above(const float *cs, int32_t n, float t)
{
    sp_v4_t tv = {t, t, t, t}, v;
    sp_i4_t any = {0, 0, 0, 0};

    for (int32_t j = 0; j < n; j += 4) {
        memcpy(&v, cs + j, sizeof v);
        any |= v > tv;
    }
    return (any[0] | any[1] | any[2] | any[3]) != 0;
}

/* The largest of cs[0..n) (n a multiple of 4), NaN passed over (-inf for
 * none). */
static float sp_max(const float *cs, int32_t n)
{
    sp_v4_t mx = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, v;
    float m = -INFINITY;

    for (int32_t j = 0; j < n; j += 4) {
        sp_i4_t up;

        memcpy(&v, cs + j, sizeof v);
        up = v > mx; /* false for NaN */
        mx = (sp_v4_t)((up & (sp_i4_t)v) | (~up & (sp_i4_t)mx));
    }
    for (int32_t j = 0; j < 4; j++)
        m = mx[j] > m ? mx[j] : m;
    return m;
}

/* The k-th largest (1-based) of v[0..n) (no NaN), reordering v: a
 * quickselect with the middle element as pivot (the floor's value; which
 * copy of an equal value ends where does not matter). */
static float sp_kth(float *v, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n - 1, want = k - 1;

    while (lo < hi) {
        float p = v[lo + (hi - lo) / 2];
        int32_t i = lo, j = hi;

        /* descending: the larger ones first */
        while (i <= j) {
            while (v[i] > p)
                i++;
            while (v[j] < p)
                j--;
            if (i <= j) {
                float t = v[i];

                v[i++] = v[j];
                v[j--] = t;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            break;
    }
    return v[want];
}

/* Where a later block scoring s goes in the m scores kept, best first:
 * after every score not below it (an equal one is an earlier block). */
static int32_t sp_rank(const float *score, int32_t m, float s)
{
    int32_t lo = 0, hi = m;

    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;

        if (score[mid] >= s)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The scores of the nb (<= SP_CHUNK) blocks from key into cs (rounded up
 * to 4 entries): without branches, so that the key loads of many blocks
 * are in flight at once; the last one to three blocks are scored with
 * their first repeated in the spare lanes. */
static inline __attribute__((always_inline)) void
sp_chunk_scores(const float *qs, const float *key, size_t key_stride, int32_t nb, int32_t hd,
                float *tail, float *cs)
{
    int32_t n4 = nb & ~3;

    for (int32_t j = 0; j < 4 && n4 < nb; j++)
        memcpy(tail + (size_t)j * (size_t)hd,
               key + (size_t)(n4 + (n4 + j < nb ? j : 0)) * key_stride,
               sizeof(float) * (size_t)hd);
    if (hd == 8) { /* the loop unrolled for the common small head */
        sp_scores(qs, key, key_stride, n4, 8, cs);
        sp_scores(qs, tail, 8, n4 < nb ? 4 : 0, 8, cs + n4);
    } else {
        sp_scores(qs, key, key_stride, n4, hd, cs);
        sp_scores(qs, tail, (size_t)hd, n4 < nb ? 4 : 0, hd, cs + n4);
    }
}

/* The kept list (m of k blocks, best first, scores in score) after the
 * chunk's nb blocks from b0 with scores cs, taken in ascending order: one
 * that only ties the worst kept loses the tie; a NaN is never above a
 * score and counts as -inf while fewer than k are kept.  With a floor
 * above -inf, a block under it (or NaN) is passed over.  Returns m. */
static int32_t sp_keep(const float *cs, int32_t nb, int32_t b0, int32_t k, int32_t m,
                       float floor, float *score, int32_t *top)
{
    /* once k are kept, most chunks hold no block above the worst of them:
     * one vector test skips the chunk (a NaN is never above) */
    if (m == k && !sp_any_above(cs, (nb + 3) & ~3, score[m - 1]))
        return m;
    for (int32_t j = 0; j < nb; j++) {
        float s = cs[j];
        int32_t i;

        if ((m == k && !(s > score[m - 1])) || (floor > -INFINITY && !(s >= floor)))
            continue;
        s = isnan(s) ? -INFINITY : s;
        i = sp_rank(score, m, s);
        m = HY_MIN(m + 1, k);
        memmove(score + i + 1, score + i, sizeof(float) * (size_t)(m - 1 - i));
        memmove(top + i + 1, top + i, sizeof(int32_t) * (size_t)(m - 1 - i));
        score[i] = s;
        top[i] = b0 + j;
    }
    return m;
}

/* A log sum exp's terms in a fixed order for any width: term i goes into
 * partial sum i mod 8, in index order, and the partials add as ((p0 + p1)
 * + (p2 + p3)) + ((p4 + p5) + (p6 + p7)).  The exponentials and the log
 * are vexp.h's, whose 8-lane forms give the scalar bits: a million-token
 * choice takes two per block and head, and libm's expf one at a time made
 * the choice of 4 heads 20x that of one. */
static inline float sp_tree8(const float p[8])
{
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

#if defined(__x86_64__) && HY_BUILD_AVX2
#define SP_AVX2 __attribute__((target("avx2,fma")))

/* p[i mod 8] += e^(x[i] - mx) over the whole groups of 8 of x[0..n);
 * returns where the rest starts. */
SP_AVX2 static int32_t sp_lse_terms_avx2(const float *x, int32_t n, float mx, float p[8])
{
    __m256 z = _mm256_loadu_ps(p), m = _mm256_set1_ps(mx);
    int32_t i = 0;

    for (; i + 8 <= n; i += 8)
        z = _mm256_add_ps(z, hy_vexp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), m)));
    _mm256_storeu_ps(p, z);
    return i;
}

/* The largest of x[0..n), as the scalar loop finds it: maxps keeps its
 * second operand unless the first is above (a NaN is never above), the
 * loop its running max; lanes that end equal but for the sign of a zero
 * give the same sum (mx + log(s), log(s) >= +0). */
SP_AVX2 static float sp_max_avx2(const float *x, int32_t n)
{
    __m256 m = _mm256_set1_ps(-INFINITY);
    float l[8], mx = -INFINITY;
    int32_t i = 0;

    for (; i + 8 <= n; i += 8)
        m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
    _mm256_storeu_ps(l, m);
    for (int32_t j = 0; j < 8; j++)
        mx = l[j] > mx ? l[j] : mx;
    for (; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    return mx;
}

/* hy_sparse_logsumexp(raw + b + j, np, n_heads) for the 8 blocks b + j,
 * lane by lane in its order (max, terms into partial h mod 8, the tree,
 * the log): the same bits. */
SP_AVX2 static void sp_group_lse8_avx2(const float *raw, int32_t np, int32_t n_heads, int32_t b,
                                       float *out)
{
    __m256 mx = _mm256_set1_ps(-INFINITY), z[8], s;

    for (int32_t h = 0; h < n_heads; h++) /* max(v, mx): v > mx ? v : mx */
        mx = _mm256_max_ps(_mm256_loadu_ps(raw + (size_t)h * (size_t)np + b), mx);
    for (int32_t j = 0; j < 8; j++)
        z[j] = _mm256_setzero_ps();
    for (int32_t h = 0; h < n_heads; h++)
        z[h & 7] = _mm256_add_ps(
            z[h & 7],
            hy_vexp_avx2(_mm256_sub_ps(_mm256_loadu_ps(raw + (size_t)h * (size_t)np + b), mx)));
    s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(z[0], z[1]), _mm256_add_ps(z[2], z[3])),
                      _mm256_add_ps(_mm256_add_ps(z[4], z[5]), _mm256_add_ps(z[6], z[7])));
    s = _mm256_add_ps(mx, hy_vlog_avx2(s));
    /* no head saw the block: -inf, as hy_sparse_logsumexp returns */
    s = _mm256_blendv_ps(s, mx, _mm256_cmp_ps(mx, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ));
    _mm256_storeu_ps(out + b, s);
}

/* The kernels' level (tests pin the scalar one to compare the two). */
static bool sp_avx2(void)
{
    return hy_quant_isa() >= HY_ISA_AVX2;
}
#endif

float hy_sparse_logsumexp(const float *x, size_t stride, int32_t n)
{
    float mx = -INFINITY, p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int32_t i = 0;

#if defined(__x86_64__) && HY_BUILD_AVX2
    if (stride == 1 && sp_avx2())
        mx = sp_max_avx2(x, n);
    else
#endif
        for (int32_t k = 0; k < n; k++)
            mx = x[(size_t)k * stride] > mx ? x[(size_t)k * stride] : mx;
    if (mx == -INFINITY)
        return -INFINITY;
#if defined(__x86_64__) && HY_BUILD_AVX2
    if (stride == 1 && sp_avx2())
        i = sp_lse_terms_avx2(x, n, mx, p);
#endif
    for (; i < n; i++)
        p[i & 7] += hy_vexp1(x[(size_t)i * stride] - mx);
    return mx + hy_vlog1(sp_tree8(p));
}

/* A head's attention logit for a block from its score s = q . key: the
 * scale, then the soft-cap; NaN as -inf. */
static inline float sp_logit(float s, const hy_sparse_params_t *sp)
{
    float x = s * sp->scale;

    if (sp->softcap > 0)
        x = sp->softcap * tanhf(x / sp->softcap);
    return x == x ? x : -INFINITY;
}

/* out[b] = sp_logit(s[b]) for b < nb, the spare lanes nb <= b < np as
 * -inf (out may be s). */
static void sp_logits(const float *s, float *out, int32_t np, int32_t nb,
                      const hy_sparse_params_t *sp)
{
    for (int32_t b = 0; b < np; b++)
        out[b] = b < nb ? sp_logit(s[b], sp) : -INFINITY;
}

/* A group of several query heads: block b's score is the log of the sum
 * over the heads of the probability each head's own softmax over the
 * blocks (the model's attention logits: scale and soft-cap) gives b - the
 * InfLLM-v2 rule.  Summing the queries first (the one-head path) lets the
 * heads' directions cancel: a block that one head wants and the others
 * ignore is lost, which is how a pass key at 32K went missing
 * (docs/sparse.md).  In log form so that blocks far below every head's
 * best keep their order instead of all underflowing to 0.  raw holds
 * n_heads rows of np floats, out np floats (the spare lanes -inf).  The
 * last step is hy_sparse_logsumexp(raw + b, np, n_heads), eight blocks at
 * a time where the CPU has AVX2 (the same bits). */
void hy_sparse_group_scores(const float *q, int32_t q_stride, int32_t n_heads, int32_t hd,
                            const hy_sparse_params_t *sp, const float *keys,
                            size_t key_stride, int32_t nb, float *raw, float *out)
{
    int32_t np = (nb + 3) & ~3;
    float tail[4 * HY_ATTN_MAX_HEAD_DIM];

    for (int32_t h = 0; h < n_heads; h++) {
        const float *qh = q + (size_t)h * (size_t)q_stride;
        float *s = raw + (size_t)h * (size_t)np, lz;

        for (int32_t b0 = 0; b0 < nb; b0 += SP_CHUNK)
            sp_chunk_scores(qh, keys + (size_t)b0 * key_stride, key_stride,
                            HY_MIN(SP_CHUNK, nb - b0), hd, tail, s + b0);
        sp_logits(s, s, np, nb, sp);
        lz = hy_sparse_logsumexp(s, 1, nb);
        for (int32_t b = 0; b < np; b += 4) {
            sp_v4_t x;

            memcpy(&x, s + b, sizeof x);
            x = lz == -INFINITY ? sp_splat(-INFINITY) : x - sp_splat(lz);
            memcpy(s + b, &x, sizeof x);
        }
    }
    int32_t b = 0;
#if defined(__x86_64__) && HY_BUILD_AVX2
    if (sp_avx2())
        for (; b + 8 <= np; b += 8)
            sp_group_lse8_avx2(raw, np, n_heads, b, out);
#endif
    for (; b < np; b++)
        out[b] = hy_sparse_logsumexp(raw + b, (size_t)np, n_heads);
}

size_t hy_sparse_select_floats(int32_t n_heads, int32_t cur)
{
    size_t c = (size_t)HY_MAX(cur, 0) + 4;

    /* kept scores (up to every block), every block's score, each chunk's
     * best twice, and the heads' own scores (or one head's logits, with
     * topp) */
    return (size_t)(HY_MAX(n_heads, 1) + 3) * c;
}

/* How many of the m kept (best first, scores log sum_h p_h) a top-p choice
 * reads: at least k0, then until their mass, added in that order, reaches
 * topp of the group's n_heads. */
static int32_t sp_mass_count(const float *score, int32_t m, int32_t k0, int32_t n_heads,
                             float topp)
{
    float want = topp * (float)n_heads, acc = 0;
    int32_t i = 0;

    for (; i < m && (i < k0 || acc < want); i++)
        acc += score[i] == -INFINITY ? 0.0f : hy_vexp1(score[i]);
    return i;
}

/* sp_keep over every score (all: blocks sink..local, chunk after chunk)
 * into an empty list of up to k: the best k, no floor. */
static int32_t sp_keep_all(const float *all, int32_t sink, int32_t local, int32_t k,
                           float *score, int32_t *top)
{
    int32_t m = 0;

    for (int32_t b0 = sink; b0 < local; b0 += SP_CHUNK)
        m = sp_keep(all + (b0 - sink), HY_MIN(SP_CHUNK, local - b0), b0, k, m, -INFINITY, score,
                    top);
    return m;
}

/* The mass of the first n of the kept (best first, scores log sum_h p_h),
 * added in sp_mass_count's order. */
static float sp_mass(const float *score, int32_t n)
{
    float acc = 0;

    for (int32_t i = 0; i < n; i++)
        acc += score[i] == -INFINITY ? 0.0f : hy_vexp1(score[i]);
    return acc;
}

/* The m kept scores as the mass functions take them: a group's are its
 * log sum_h p_h already; one head's (lp non-NULL) are q . key, turned
 * into log p = logit - lz in lp, lz the log sum exp of every candidate's
 * logit - what the group's rule gives for one head. */
static const float *sp_log_probs(const float *kept, int32_t m, float *lp, float lz,
                                 const hy_sparse_params_t *sp)
{
    if (!lp)
        return kept;
    for (int32_t i = 0; i < m; i++)
        lp[i] = lz == -INFINITY ? -INFINITY : sp_logit(kept[i], sp) - lz;
    return lp;
}

int32_t hy_sparse_select(const float *q, int32_t q_stride, int32_t n_heads, int32_t hd,
                         const float *block_keys, size_t key_stride, int32_t cur,
                         const hy_sparse_params_t *sp, int32_t *out, float *scratch)
{
    int32_t sink = HY_MIN(HY_MAX(sp->sink_blocks, 0), cur);
    int32_t local = HY_MAX(cur - HY_MAX(sp->local_blocks, 0), sink);
    int32_t k = HY_MIN(HY_MAX(sp->topk, 0), local - sink), m = 0, n = 0;
    /* top-p: room for up to cap kept */
    int32_t cap = HY_MIN(hy_kv_sparse_scored(k, sp->topp, sp->max_blocks), local - sink);
    int32_t n_chunks = (local - sink + SP_CHUNK - 1) / SP_CHUNK;
    int32_t *top = out + sink;
    float qs[HY_ATTN_MAX_HEAD_DIM], tail[4 * HY_ATTN_MAX_HEAD_DIM], cs[SP_CHUNK + 4];
    float floor = -INFINITY;
    /* several heads score every block first (hy_sparse_group_scores), one
     * head as it goes; so with the floor, with several heads or with
     * top-p: every block's score after the cap kept (padded to 4), then
     * each chunk's best and a copy, then the heads' own scores or one
     * head's logits (hy_sparse_select_floats) */
    bool group = n_heads > 1 && k > 0, more = cap > k, pre = false;
    int32_t np = group || more ? ((local - sink) + 3) & ~3 : local - sink;
    float *all = scratch + cap, *cmax = all + np, *cbest = cmax + n_chunks;
    float *lp = NULL, lz = -INFINITY;
    const float *ms;

    if (group)
        hy_sparse_group_scores(q, q_stride, n_heads, hd, sp,
                               block_keys + (size_t)sink * key_stride, key_stride, local - sink,
                               cbest + n_chunks, all);
    /* one head (or nothing to choose): q . key itself, its softmax over
     * the blocks being monotone in it - the same choice, no exponentials */
    for (int32_t i = 0; i < hd && !group; i++) {
        float s = 0;

        for (int32_t h = 0; h < n_heads; h++)
            s += q[(size_t)h * (size_t)q_stride + (size_t)i];
        qs[i] = s;
    }
    /* Over many chunks, filling the kept list from the first blocks on
     * inserts most of the early ones only to drop them again.  So each
     * chunk's best score comes first (into scratch after the k kept
     * scores, and a copy after them: room while the chunks outnumber 4 k),
     * and the k-th best of those is a floor: the k chunks that reach it
     * hold k blocks that do, so no block under it is among the best k, and
     * only the blocks of the chunks that reach it are offered for keeping
     * (their scores kept from the first pass: the keys are read once).
     * The same blocks as one pass over them all: every block the best k
     * could hold is offered in the same order. */
    if (k > 0 && n_chunks >= 4 * k) {
        for (int32_t c = 0; c < n_chunks; c++) {
            int32_t b0 = sink + c * SP_CHUNK, nb = HY_MIN(SP_CHUNK, local - b0);

            if (group) {
                cmax[c] = sp_max(all + (size_t)c * SP_CHUNK, (nb + 3) & ~3);
                continue;
            }
            sp_chunk_scores(qs, block_keys + (size_t)b0 * key_stride, key_stride, nb, hd, tail,
                            cs);
            for (int32_t j = nb; j < ((nb + 3) & ~3); j++)
                cs[j] = -INFINITY; /* the spare lanes repeat a block */
            cmax[c] = sp_max(cs, (nb + 3) & ~3);
            memcpy(all + (size_t)c * SP_CHUNK, cs, sizeof(float) * (size_t)nb);
        }
        memcpy(cbest, cmax, sizeof(float) * (size_t)n_chunks);
        floor = sp_kth(cbest, n_chunks, k);
        /* (a floor of -inf is none: one pass over all, NaN blocks and all) */
        pre = floor > -INFINITY;
    }
    for (int32_t c = 0; c < n_chunks && k > 0; c++) {
        int32_t b0 = sink + c * SP_CHUNK, nb = HY_MIN(SP_CHUNK, local - b0);
        const float *sc = cs;

        if (pre) {
            if (!(cmax[c] >= floor))
                continue;
            /* (its last chunk's spare lanes hold the maxima: sp_keep's
             * vector test may look at them, its loop does not) */
            sc = all + (size_t)c * SP_CHUNK;
        } else if (group) {
            sc = all + (size_t)c * SP_CHUNK;
        } else {
            sp_chunk_scores(qs, block_keys + (size_t)b0 * key_stride, key_stride, nb, hd, tail,
                            cs);
            /* top-p ranks them again and needs their mass */
            if (more)
                memcpy(all + (size_t)c * SP_CHUNK, cs, sizeof(float) * (size_t)nb);
        }
        m = sp_keep(sc, nb, b0, k, m, floor, scratch, top);
    }
    /* One head ranks by q . key (monotone in its softmax over the blocks:
     * the top-k's choice, and no exponential per block for it); top-p then
     * needs that softmax's normalizer, one log sum exp over the candidates'
     * logits, in the spare lanes too (sp_keep's vector test reads them). */
    if (more && !group && m == k) {
        lp = cbest + n_chunks;
        for (int32_t b = local - sink; b < np; b++)
            all[b] = -INFINITY;
        sp_logits(all, lp, np, local - sink, sp);
        lz = hy_sparse_logsumexp(lp, 1, local - sink);
    }
    ms = sp_log_probs(scratch, m, lp, lz, sp);
    /* the top-k short of the mass: the best cap, then the fewest of them
     * that reach it (every score is in all: no key is read again) - when
     * the cap can reach it at all.  Where it cannot, the heads spread
     * their attention over more blocks than the cap: reading the cap would
     * cost up to cap / k times the top-k and still leave the output as
     * approximate, so the choice stays the top-k's (a random model's flat
     * attention at 1M tokens; Gemma 3's 32K context has under 512 blocks).
     * Each block past the k-th holds at most the k-th's share, which
     * bounds what the cap can hold before ranking it. */
    if (more && m == k) {
        float want = sp->topp * (float)n_heads, mk = sp_mass(ms, k);
        float last = ms[k - 1] == -INFINITY ? 0.0f : hy_vexp1(ms[k - 1]);

        if (mk < want && mk + (float)(cap - k) * last >= want) {
            m = sp_keep_all(all, sink, local, cap, scratch, top);
            ms = sp_log_probs(scratch, m, lp, lz, sp);
            if (sp_mass(ms, m) >= want) {
                m = sp_mass_count(ms, m, k, n_heads, sp->topp);
            } else {
                /* the bound let it through, the cap fell short: the top-k
                 * again, by one pass over every score (the blocks the
                 * floored pass chose) */
                m = sp_keep_all(all, sink, local, k, scratch, top);
                assert(m == k);
            }
        }
    }
    /* ascending, the order the keys lie in the sequence: the sink blocks,
     * the chosen ones (all between), the local ones */
    for (int32_t i = 1; i < m; i++) {
        int32_t v = top[i], j = i;

        for (; j > 0 && top[j - 1] > v; j--)
            top[j] = top[j - 1];
        top[j] = v;
    }
    for (int32_t b = 0; b < sink; b++)
        out[n++] = b;
    n += m;
    for (int32_t b = local; b < cur; b++)
        out[n++] = b;
    return n;
}

/* The compacted page list of hy_sparse_attend into page_scratch: how
 * many pages (-1: blocks or f not as it requires), the token's position
 * in it at *vpos. */
static int32_t sp_compact(const hy_attn_flash_t *f, const int32_t *blocks, int32_t n,
                          int32_t block_pages, int32_t *page_scratch, int32_t *vpos)
{
    int32_t pt = f->page_tokens, bt, pos, cur, np = 0;

    if (f->t1 != f->t0 + 1 || f->window != 0 || block_pages < 1 || n < 0)
        return -1;
    bt = block_pages * pt;
    pos = f->pos[f->t0];
    cur = pos / bt;
    for (int32_t i = 0; i < n; i++) {
        if (blocks[i] < 0 || blocks[i] >= cur || (i > 0 && blocks[i] <= blocks[i - 1]))
            return -1;
        for (int32_t j = 0; j < block_pages; j++)
            page_scratch[np++] = f->pages[blocks[i] * block_pages + j];
    }
    /* the token's own block, up to its page */
    for (int32_t p = cur * block_pages; p <= pos / pt; p++)
        page_scratch[np++] = f->pages[p];
    /* the token sits after the chosen blocks, at its offset in its own */
    *vpos = n * bt + (pos - cur * bt);
    return np;
}

/* Unit f's one token through the kernel over its compacted list. */
static void sp_run(const hy_attn_flash_t *f, const int32_t *pages, const int32_t *vpos,
                   void (*kernel)(const hy_attn_flash_t *f, float *scratch), float *scratch)
{
    hy_attn_flash_t g = *f;

    g.pages = pages;
    g.q = f->q + (size_t)f->t0 * (size_t)f->q_stride;
    g.out = f->out + (size_t)f->t0 * (size_t)f->out_stride;
    g.pos = vpos;
    g.t0 = 0;
    g.t1 = 1;
    kernel(&g, scratch);
}

int hy_sparse_attend(const hy_attn_flash_t *f, const int32_t *blocks, int32_t n,
                     int32_t block_pages, int32_t *page_scratch,
                     void (*kernel)(const hy_attn_flash_t *f, float *scratch), float *scratch)
{
    int32_t vpos;

    if (sp_compact(f, blocks, n, block_pages, page_scratch, &vpos) < 0)
        return HY_EINVAL;
    sp_run(f, page_scratch, &vpos, kernel, scratch);
    return HY_OK;
}

/* ---- the CPU backend's glue: page keys kept with the pages, the layer path ---- */

/* A layer's page keys are one mapping over the page ids: each page's key
 * per KV head. */
static size_t sp_layer_bytes(const hy_kv_layout_t *lay)
{
    return (size_t)lay->n_pages * (size_t)hy_kv_sparse_key_bytes(lay);
}

static size_t sp_page_floats(const hy_kv_layout_t *lay)
{
    return (size_t)lay->n_head_kv * (size_t)lay->head_dim_k;
}

/* Layer l's j in a sequence's block keys: its rank among the layers that
 * keep keys (the full-group ones). */
static int32_t sp_layer_rank(const hy_cpu_t *cpu, int32_t l)
{
    int32_t j = 0;

    for (int32_t i = 0; i < l; i++)
        j += cpu->sp_keys[i] != NULL;
    return j;
}

/* Sequence sq's block keys of layer l's KV head h (block b at + b * hd). */
static float *sp_seq_keys(const hy_cpu_t *cpu, int32_t l, const hy_batch_seq_t *sq, int32_t h)
{
    return sq->sp_keys + ((size_t)sp_layer_rank(cpu, l) * (size_t)cpu->kv.n_head_kv + (size_t)h) *
                             (size_t)sq->sp_cap * (size_t)cpu->kv.head_dim_k;
}

void hy_cpu_sparse_unmap(float **keys, const hy_kv_layout_t *lay)
{
    if (!keys)
        return;
    for (int32_t l = 0; l < lay->n_layers; l++)
        if (keys[l])
            munmap(keys[l], sp_layer_bytes(lay));
    free(keys);
}

float **hy_cpu_sparse_map(const hy_kv_layout_t *lay)
{
    float **keys = calloc((size_t)HY_MAX(lay->n_layers, 1), sizeof *keys);

    if (!keys || lay->sparse.block_pages <= 0)
        return keys;
    for (int32_t l = 0; l < lay->n_layers; l++) {
        void *p;

        /* sliding layers attend within their window: dense, no keys */
        if (hy_kv_layout_group(lay, l) != HY_KV_FULL)
            continue;
        /* committed as pages fill, like the pool itself */
        p = mmap(NULL, sp_layer_bytes(lay), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
        if (p == MAP_FAILED) {
            hy_cpu_sparse_unmap(keys, lay);
            return NULL;
        }
        keys[l] = p;
    }
    return keys;
}

/* Every KV head's key of one page of layer l, from the page's own rows:
 * the same bits whichever batch or copy wrote them. */
static void sp_page_keys(const hy_cpu_t *cpu, int32_t l, int32_t page)
{
    int32_t pt = cpu->kv.page_tokens, nkv = cpu->kv.n_head_kv, hd = cpu->kv.head_dim_k;
    hy_attn_flash_t f;

    memset(&f, 0, sizeof f);
    f.k_page_bytes = cpu->k_page_bytes;
    f.k_row_bytes = cpu->k_row_bytes;
    f.page_tokens = pt;
    f.kv_f32 = cpu->kv.type == HY_DTYPE_F32;
    f.kv_f16 = cpu->kv.type == HY_DTYPE_F16;
    f.to_float = hy_quant_traits(cpu->kv.type)->to_float;
    f.hd = hd;
    for (int32_t h = 0; h < nkv; h++) {
        f.k_base = cpu->k_pages[l] + (size_t)h * (size_t)pt * cpu->k_row_bytes;
        hy_sparse_page_key(&f, page, cpu->sp_keys[l] + ((size_t)page * nkv + h) * hd);
    }
}

typedef struct {
    const hy_cpu_t *cpu;
    int32_t layer;
    const hy_batch_t *b;
    int64_t n; /* pages filled by the batch, all sequences */
} sp_keys_job_t;

/* Sequence s's pages whose last slot the batch wrote: [*lo, *hi). */
static void sp_filled(const sp_keys_job_t *j, int32_t s, int32_t *lo, int32_t *hi)
{
    const hy_batch_seq_t *sq = &j->b->seqs[s];
    int32_t pt = j->cpu->kv.page_tokens;

    *lo = j->b->pos[sq->first] / pt;
    *hi = HY_MAX(*lo, (j->b->pos[sq->first + sq->n - 1] + 1) / pt);
}

static void sp_keys_worker(void *arg, int ith, int nth)
{
    sp_keys_job_t *j = arg;
    int64_t lo, hi, at = 0;

    hy_cpu_split(j->n, ith, nth, &lo, &hi);
    for (int32_t s = 0; s < j->b->n_seqs && at < hi; s++) {
        int32_t p0, p1;

        sp_filled(j, s, &p0, &p1);
        for (int32_t p = p0; p < p1; p++, at++)
            if (at >= lo && at < hi)
                sp_page_keys(j->cpu, j->layer, j->b->seqs[s].pages[p]);
    }
}

/* The complete blocks of sequence sq after the batch: its positions are
 * written up to its last token's. */
static int32_t sp_complete(const hy_cpu_t *cpu, const hy_batch_t *b, const hy_batch_seq_t *sq)
{
    return hy_kv_sparse_blocks_valid(&cpu->kv.sparse, cpu->kv.page_tokens,
                                     b->pos[sq->first + sq->n - 1] + 1);
}

/* The block keys the batch's sequences lack (from sp_valid to what is
 * complete), from their pages' keys: the blocks the batch completed, and
 * every block of a sequence whose keys the caller has just reset (a
 * cached prefix attached). */
static void sp_block_keys_batch(const hy_cpu_t *cpu, int32_t layer, const hy_batch_t *b)
{
    int32_t bp = cpu->kv.sparse.block_pages, nkv = cpu->kv.n_head_kv, hd = cpu->kv.head_dim_k;
    size_t stride = sp_page_floats(&cpu->kv);

    for (int32_t s = 0; s < b->n_seqs; s++) {
        const hy_batch_seq_t *sq = &b->seqs[s];
        int32_t end = sp_complete(cpu, b, sq);

        if (!sq->sp_keys)
            continue;
        for (int32_t h = 0; h < nkv; h++) {
            float *out = sp_seq_keys(cpu, layer, sq, h);

            for (int32_t k = HY_MAX(sq->sp_valid, 0); k < end; k++)
                hy_sparse_block_key(cpu->sp_keys[layer] + (size_t)h * hd, stride,
                                    sq->pages + (size_t)k * bp, bp, hd, out + (size_t)k * hd);
        }
    }
}

void hy_cpu_sparse_keys_batch(hy_cpu_t *cpu, int32_t layer, const hy_batch_t *b)
{
    sp_keys_job_t j = {cpu, layer, b, 0};

    if (!cpu->sp_keys || !cpu->sp_keys[layer])
        return;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t p0, p1;

        sp_filled(&j, s, &p0, &p1);
        j.n += p1 - p0;
    }
    if (j.n > 0)
        hy_pool_run_n(cpu->pool, (int)HY_MIN((int64_t)cpu->n_threads, (j.n + 7) / 8),
                      sp_keys_worker, &j);
    sp_block_keys_batch(cpu, layer, b);
}

int hy_cpu_sparse_check(const hy_cpu_t *cpu, int32_t layer, const hy_batch_t *b, int32_t s,
                        char *err)
{
    const hy_batch_seq_t *sq = &b->seqs[s];
    int32_t end, dense = -1;

    if (!cpu->sp_keys || !cpu->sp_keys[layer] || !sq->sp_keys)
        return HY_OK;
    end = sp_complete(cpu, b, sq);
    if (sq->sp_cap < end || sq->sp_valid < 0)
        return hy_err(err, HY_ERANGE, "attention: sequence %d completes %d blocks, its block "
                      "keys hold %d (%d valid)", s, end, sq->sp_cap, sq->sp_valid);
    /* a dense token (below min_tokens) reads every page before it */
    for (int32_t t = sq->first; sq->out && t < sq->first + sq->n; t++)
        dense = b->pos[t] < cpu->kv.sparse.min_tokens ? HY_MAX(dense, b->pos[t]) : dense;
    for (int32_t p = 0; dense >= 0 && p <= dense / cpu->kv.page_tokens; p++)
        if (sq->pages[p] < 0)
            return hy_err(err, HY_ERANGE, "attention: sequence %d position %d attends densely "
                          "but page %d is not hot (%d)", s, dense, p, sq->pages[p]);
    /* the blocks whose keys are to be written are averaged from their
     * pages' keys: those pages must be hot */
    for (int32_t p = sq->sp_valid * cpu->kv.sparse.block_pages;
         p < end * cpu->kv.sparse.block_pages; p++)
        if (sq->pages[p] < 0)
            return hy_err(err, HY_ERANGE, "attention: sequence %d page %d (block %d, whose key "
                          "is to be written) is not hot (%d)", s, p,
                          p / cpu->kv.sparse.block_pages, sq->pages[p]);
    return HY_OK;
}

void hy_cpu_sparse_keys_page(hy_cpu_t *cpu, int32_t group, int32_t page)
{
    if (!cpu->sp_keys || group != HY_KV_FULL)
        return;
    /* the blocks this page belongs to are the sequences' to know: each
     * sequence it is attached to averages its block keys from here */
    for (int32_t l = 0; l < cpu->kv.n_layers; l++)
        if (cpu->sp_keys[l])
            sp_page_keys(cpu, l, page);
}

/* The pages one token reads at most: its chosen blocks and its own. */
static size_t sp_max_pages(const hy_cpu_t *cpu)
{
    const hy_kv_sparse_t *c = &cpu->kv.sparse;
    int32_t scored = hy_kv_sparse_scored(c->topk, c->topp, c->max_blocks);

    return ((size_t)HY_MAX(c->sink_blocks, 0) + (size_t)HY_MAX(c->local_blocks, 0) +
            (size_t)HY_MAX(scored, 0) + 1) *
           (size_t)HY_MAX(c->block_pages, 1);
}

/* Floats of a thread's staging area, for a token that reads pages that
 * are not hot: where each page a token reads lies (K then V addresses),
 * then one KV head's K and V rows of each page read from the spill file. */
static size_t sp_stage_floats(const hy_cpu_t *cpu)
{
    size_t bytes = sp_max_pages(cpu) * (2 * sizeof(const uint8_t *) +
                                        (size_t)cpu->kv.page_tokens *
                                            (cpu->k_row_bytes + cpu->v_row_bytes));

    return ((bytes + sizeof(float) - 1) / sizeof(float) + 15) & ~(size_t)15;
}

size_t hy_cpu_sparse_scratch(const hy_cpu_t *cpu, int32_t max_pos, int32_t group, bool staged)
{
    size_t bp = (size_t)HY_MAX(cpu->kv.sparse.block_pages, 1);
    size_t cur = (size_t)max_pos / (bp * (size_t)cpu->kv.page_tokens) + 1;

    /* the staging area first (aligned), then block keys averaged here (a
     * sequence without its own), the choice's scratch, chosen blocks, the
     * compacted page list */
    return (staged ? sp_stage_floats(cpu) : 0) + cur * ((size_t)cpu->kv.head_dim_k + 1) +
           hy_sparse_select_floats(group, (int32_t)cur) + (cur + 1) * bp;
}

/* Out-page reads handed to the reader at once (K and V of 16 pages: a
 * block of the default 64 tokens four times over). */
#define SP_READS 32

/* One token whose compacted list (np pages in pages) holds pages that are
 * not hot: the kernel reads KV head g's rows of each listed page where
 * they lie, in the pool or the out store's RAM, and those of a page out
 * on the spill file from the thread's staging area, read into it first
 * (the same bytes in the same order: the same bits as if all were hot).
 * Returns the chosen blocks (block_pages pages each, first in the list)
 * with a page read from the file. */
static int32_t sp_run_at(const hy_cpu_t *cpu, int32_t layer, const hy_batch_seq_t *sq,
                      const hy_attn_flash_t *u, int32_t g, const int32_t *pages, int32_t np,
                      const int32_t *vpos, uint8_t *stage,
                      void (*kernel)(const hy_attn_flash_t *f, float *scratch), float *scr)
{
    int32_t pt = cpu->kv.page_tokens, n_full = 0, rank = sp_layer_rank(cpu, layer);
    size_t kb = (size_t)pt * cpu->k_row_bytes, vb = (size_t)pt * cpu->v_row_bytes;
    size_t maxp = sp_max_pages(cpu);
    const uint8_t **kat = (const uint8_t **)(void *)stage, **vat = kat + maxp;
    uint8_t *ks = (uint8_t *)(vat + maxp), *vs = ks + maxp * kb;
    hy_attn_flash_t w = *u;
    int32_t bp = HY_MAX(cpu->kv.sparse.block_pages, 1), cold = 0, last = -1;

    /* the out pages' K and V reads, SP_READS at a time, in list order: a
     * block's pages are consecutive units, which the reader takes in one
     * call when they are cold */
    hy_out_req_t rq[SP_READS];
    int32_t rpage[SP_READS / 2], nrq = 0;

    for (int32_t l = 0; l < cpu->kv.n_layers; l++)
        n_full += cpu->sp_keys[l] != NULL;
    for (int32_t i = 0; i < np; i++) {
        if (pages[i] >= 0) {
            kat[i] = cpu->k_pages[layer] + (size_t)pages[i] * cpu->k_page_bytes + (size_t)g * kb;
            vat[i] = cpu->v_pages[layer] + (size_t)pages[i] * cpu->v_page_bytes + (size_t)g * vb;
        } else {
            /* kv_page_read's layout: the group's K pages by layer, then its V pages */
            int32_t unit = HY_PAGE_OUT_REF(pages[i]);

            rpage[nrq / 2] = i;
            rq[nrq++] = (hy_out_req_t){unit, (size_t)rank * cpu->k_page_bytes + (size_t)g * kb,
                                       kb, ks + (size_t)i * kb, NULL};
            rq[nrq++] = (hy_out_req_t){unit,
                                       (size_t)n_full * cpu->k_page_bytes +
                                           (size_t)rank * cpu->v_page_bytes + (size_t)g * vb,
                                       vb, vs + (size_t)i * vb, NULL};
        }
        if (nrq == SP_READS || (i == np - 1 && nrq > 0)) {
            hy_out_reads(sq->out, rq, nrq);
            for (int32_t m = 0; m < nrq / 2; m++) {
                int32_t p = rpage[m];

                kat[p] = rq[2 * m].at;
                vat[p] = rq[2 * m + 1].at;
                /* the reader hands back the staging area for what it read */
                if (kat[p] == ks + (size_t)p * kb && p / bp != last) {
                    last = p / bp;
                    cold++;
                }
            }
            nrq = 0;
        }
    }
    w.k_at = kat;
    w.v_at = vat;
    sp_run(&w, pages, vpos, kernel, scr);
    return cold;
}

void hy_cpu_sparse_tokens(const hy_cpu_t *cpu, int32_t layer, const hy_batch_seq_t *sq,
                          const hy_attn_flash_t *f,
                          int32_t g, int32_t gh0, int32_t group,
                          void (*kernel)(const hy_attn_flash_t *f, float *scratch),
                          float *scr, float *sscr)
{
    const hy_kv_sparse_t *c = &cpu->kv.sparse;
    hy_sparse_params_t sp = {c->block_pages, c->topk,  c->sink_blocks, c->local_blocks,
                             f->scale,       f->softcap, c->topp,     c->max_blocks};
    /* the group's first unit counts the reads: once per token and KV head,
     * however its heads are cut into units */
    uint64_t *counts = f->h0 == gh0 ? sq->out_reads : NULL, reads = 0;
    int32_t hd = f->hd, bp = c->block_pages, bt = bp * f->page_tokens;
    /* the unit's last token sees the most blocks */
    int32_t ncur = f->pos[f->t1 - 1] / bt;
    uint8_t *stage = sq->out ? (uint8_t *)(void *)sscr : NULL;
    float *bkeys = sscr + (stage ? sp_stage_floats(cpu) : 0), *score = bkeys + (size_t)ncur * hd;
    int32_t *blocks = (int32_t *)(void *)(score + hy_sparse_select_floats(group, ncur + 1));
    int32_t *pages = blocks + ncur + 1;
    const float *bk = bkeys;

    if (sq->sp_keys) {
        bk = sp_seq_keys(cpu, layer, sq, g);
    } else {
        for (int32_t b = 0; b < ncur; b++)
            hy_sparse_block_key(cpu->sp_keys[layer] + (size_t)g * hd, sp_page_floats(&cpu->kv),
                                f->pages + (size_t)b * bp, bp, hd, bkeys + (size_t)b * hd);
    }
    for (int32_t t = f->t0; t < f->t1; t++) {
        hy_attn_flash_t u = *f;
        /* the whole query group chooses, however its heads are cut into
         * units: the same blocks for every batch */
        int32_t n = hy_sparse_select(f->q + (size_t)t * f->q_stride + (size_t)gh0 * hd, hd,
                                     group, hd, bk, (size_t)hd, f->pos[t] / bt, &sp, blocks,
                                     score);

        int32_t vpos, np;
        bool out = false;

        u.t0 = t;
        u.t1 = t + 1;
        reads += (uint64_t)n + 1;
        /* blocks and the position come from the checked batch: cannot fail */
        np = sp_compact(&u, blocks, n, c->block_pages, pages, &vpos);
        for (int32_t i = 0; stage && i < np; i++)
            out |= pages[i] < 0;
        if (out && counts) {
            uint64_t k = 0;

            /* a block leaves the pool whole: its first page says */
            for (int32_t i = 0; i < n; i++)
                k += f->pages[(size_t)blocks[i] * (size_t)bp] < -1;
            __atomic_fetch_add(counts, k, __ATOMIC_RELAXED);
        }
        if (out) {
            int32_t cold = sp_run_at(cpu, layer, sq, &u, g, pages, np, &vpos, stage, kernel, scr);

            if (cold > 0 && counts)
                __atomic_fetch_add(&counts[1], (uint64_t)cold, __ATOMIC_RELAXED);
        }
        else
            sp_run(&u, pages, &vpos, kernel, scr);
    }
    if (counts)
        __atomic_fetch_add(&counts[2], reads, __ATOMIC_RELAXED);
}
