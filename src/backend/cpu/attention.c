/*
 * attention.c - the paged KV store and causal attention over it.  Each
 * full-attention layer owns a pool of pages; a page holds page_tokens
 * positions of every kv head, one head's rows contiguous so a page of keys is
 * one run of memory.  attention() first writes the batch's k/v rows into
 * their sequences' pages, then computes softmax(q k^T * scale) v for every
 * token over positions 0..pos (or the sliding window) with an online softmax
 * in f32.  Work is split into (sequence, kv head, query heads, block of query
 * tokens) units: every query head that shares a kv head (GQA) and every
 * token of the block reuses each page once it is converted to f32 and in L1,
 * which is what makes long prompts (O(n^2)) affordable.  Prefill units (and
 * any unit of heads of at most 16 floats) take another kernel
 * (hy_attn_lanes_t) that puts 16 queries in the SIMD lanes instead of one
 * head's dimensions; decode units keep the row kernel.  On AVX2 and
 * AVX-512, prefill units of larger heads go to the flash-attention kernels
 * (attn_flash_impl.h) instead, in bigger units (up to HY_ATTN_FLASH_LANES
 * queries each).
 */
#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/attn_flash.h"
#include "backend/cpu/quant_ref.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* HY_ATTN_X86: the AVX2 kernels are built; HY_ATTN_AVX512: the AVX-512 ones
 * too (configure's HY_BUILD_*: what the compiler can build). */
#if defined(__x86_64__) && HY_BUILD_AVX2
#include <immintrin.h>
#define HY_ATTN_X86 1
#if HY_BUILD_AVX512
#define HY_ATTN_AVX512 1
#endif
#endif

/* Query tokens per unit: enough to amortise converting a page to f32 over
 * many queries, small enough that short prompts still split across threads. */
#define HY_ATTN_QBLOCK 16
/* Queries per unit for the flash kernel: four lane groups of 48, so each
 * K/V tile converted to f32 serves 192 queries (96 left 13% of the time
 * in conversion and page misses at 16K keys; 192 gains ~6%).  Halved while
 * a batch would make fewer than HY_ATTN_FLASH_UNITS units per thread. */
#define HY_ATTN_FLASH_LANES 192
#define HY_ATTN_FLASH_UNITS 4
/* Largest head size accepted (the row scratch is sized from it). */
#define HY_ATTN_MAX_HEAD 1024

/* ---- vector helpers (chosen once by ISA) ---------------------------------- */

struct hy_attn_lanes;

/* Kernels over one page of keys for one query, so the indirect call is paid
 * per page and the per-key work inlines within one ISA. */
typedef struct {
    /* s[j] = q . K[j], j < n (K rows of hd floats) */
    void (*qk)(const float *q, const float *K, int n, int hd, float *s);
    /* s[j] = exp(s[j] - m); returns the sum */
    float (*expsum)(float *s, int n, float m);
    /* acc += sum_j p[j] V[j] (V rows of hdv floats) */
    void (*pv)(float *acc, const float *p, const float *V, int n, int hdv);
    /* y *= a */
    void (*scale)(float *y, float a, int n);
    /* small heads: one page folded into 16 queries' state (below) */
    void (*lanes)(struct hy_attn_lanes *a, const float *K, const float *V, int n,
                  int32_t jpos0);
} hy_attn_vec_t;

#define HY_ATTN_BLOCK_KERNELS(sfx, attr)                                        \
    attr static void hy_attn_qk_##sfx(const float *q, const float *K, int n,    \
                                      int hd, float *s)                         \
    {                                                                           \
        for (int j = 0; j < n; j++)                                             \
            s[j] = hy_attn_dot_##sfx(q, K + (size_t)j * hd, hd);                \
    }                                                                           \
    attr static void hy_attn_pv_##sfx(float *acc, const float *p,               \
                                      const float *V, int n, int hdv)           \
    {                                                                           \
        for (int j = 0; j < n; j++)                                             \
            hy_attn_axpy_##sfx(acc, p[j], V + (size_t)j * hdv, hdv);            \
    }

static inline float hy_attn_dot_c(const float *a, const float *b, int n)
{
    float s[8] = {0};
    int i = 0;

    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += a[i + k] * b[i + k];
    for (; i < n; i++)
        s[0] += a[i] * b[i];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

static inline void hy_attn_axpy_c(float *y, float a, const float *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

static void hy_attn_scale_c(float *y, float a, int n)
{
    for (int i = 0; i < n; i++)
        y[i] *= a;
}

static float hy_attn_expsum_c(float *s, int n, float m)
{
    float sum = 0;

    for (int j = 0; j < n; j++) {
        s[j] = expf(s[j] - m);
        sum += s[j];
    }
    return sum;
}

HY_ATTN_BLOCK_KERNELS(c, )

/* Small heads (hd, hdv <= HY_ATTN_LANE_HEAD): a dot product of 8 floats
 * fills half a vector and then pays a horizontal sum per key, so instead
 * 16 queries sit in the SIMD lanes and everything runs down the keys:
 * S[j][lane] = sum_d K[j][d] Qt[d][lane], a per-lane online softmax, and
 * accT[d][lane] += V[j][d] P[j][lane] -- vertical operations only.  Each
 * lane's arithmetic is independent of the other lanes, so a query gets the
 * same bits whether it is decoded alone or prefilled in a block. */
#define HY_ATTN_LANES 16
#define HY_ATTN_LANE_HEAD 16
/* Larger heads take the lane kernel too once a unit has this many queries
 * (prefill): half-empty lanes still beat a horizontal sum per key.  Decode
 * units (one token, a few heads) keep the row kernel, so for large heads a
 * decoded query differs from the same query prefilled by rounding only
 * (test_cpu_backend bounds it at 1e-6). */
#define HY_ATTN_LANES_MIN_Q 8

typedef struct hy_attn_lanes {
    const float *Qt;      /* [hd][16] queries times the scale, padding lanes 0 */
    const int32_t *qpos;  /* [16] query positions, -1 in padding lanes */
    const int32_t *qlo;   /* [16] first position each query may see */
    int hd, hdv;
    float softcap;
    float *m, *l, *accT;  /* [16], [16], [hdv][16]: running max, sum, output */
    float *S;             /* [page_tokens][16] scores, then weights */
} hy_attn_lanes_t;

/* s = softcap * tanh(s / softcap) on n rows of raw scores. */
static void hy_attn_lanes_softcap(hy_attn_lanes_t *a, int n)
{
    for (int i = 0; i < n * HY_ATTN_LANES; i++)
        a->S[i] = a->softcap * tanhf(a->S[i] / a->softcap);
}

/* One page's keys K[0..n) (positions jpos0..) folded into the lanes' state. */
static void hy_attn_lanes_c(hy_attn_lanes_t *a, const float *K, const float *V, int n,
                            int32_t jpos0)
{
    const int hd = a->hd, hdv = a->hdv;
    float mn[HY_ATTN_LANES], c[HY_ATTN_LANES];
    int j, d, i;

    for (i = 0; i < HY_ATTN_LANES; i++)
        mn[i] = a->m[i];
    for (j = 0; j < n; j++) {
        float *sr = a->S + (size_t)j * HY_ATTN_LANES;
        for (i = 0; i < HY_ATTN_LANES; i++)
            sr[i] = 0.0f;
        for (d = 0; d < hd; d++)
            for (i = 0; i < HY_ATTN_LANES; i++)
                sr[i] = fmaf(K[(size_t)j * hd + d], a->Qt[(size_t)d * HY_ATTN_LANES + i], sr[i]);
    }
    if (a->softcap > 0.0f)
        hy_attn_lanes_softcap(a, n);
    for (j = 0; j < n; j++) {
        float *sr = a->S + (size_t)j * HY_ATTN_LANES;
        for (i = 0; i < HY_ATTN_LANES; i++) {
            if (jpos0 + j > a->qpos[i] || jpos0 + j < a->qlo[i])
                sr[i] = -INFINITY;
            mn[i] = HY_MAX(mn[i], sr[i]);
        }
    }
    for (i = 0; i < HY_ATTN_LANES; i++) {
        c[i] = mn[i] == -INFINITY ? 1.0f : expf(a->m[i] - mn[i]);
        a->l[i] *= c[i];
        a->m[i] = mn[i];
    }
    for (j = 0; j < n; j++) {
        float *sr = a->S + (size_t)j * HY_ATTN_LANES;
        for (i = 0; i < HY_ATTN_LANES; i++) {
            sr[i] = sr[i] == -INFINITY ? 0.0f : expf(sr[i] - mn[i]);
            a->l[i] += sr[i];
        }
    }
    for (d = 0; d < hdv; d++) {
        float *o = a->accT + (size_t)d * HY_ATTN_LANES;
        for (i = 0; i < HY_ATTN_LANES; i++)
            o[i] *= c[i];
        for (j = 0; j < n; j++)
            for (i = 0; i < HY_ATTN_LANES; i++)
                o[i] = fmaf(V[(size_t)j * hdv + d], a->S[(size_t)j * HY_ATTN_LANES + i], o[i]);
    }
}

#ifdef HY_ATTN_X86
__attribute__((target("avx2,fma")))
static inline float hy_attn_dot_avx2(const float *a, const float *b, int n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;

    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float s = _mm_cvtss_f32(h);
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

__attribute__((target("avx2,fma")))
static inline void hy_attn_axpy_avx2(float *y, float a, const float *x, int n)
{
    __m256 va = _mm256_set1_ps(a);
    int i = 0;

    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i),
                                                _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}

__attribute__((target("avx2,fma")))
static void hy_attn_scale_avx2(float *y, float a, int n)
{
    __m256 va = _mm256_set1_ps(a);
    int i = 0;

    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] *= a;
}

#ifdef HY_ATTN_AVX512
__attribute__((target("avx512f")))
static inline float hy_attn_dot_avx512(const float *a, const float *b, int n)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int i = 0;

    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16)
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

__attribute__((target("avx512f")))
static inline void hy_attn_axpy_avx512(float *y, float a, const float *x, int n)
{
    __m512 va = _mm512_set1_ps(a);
    int i = 0;

    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i),
                                                _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i),
                                                       _mm512_maskz_loadu_ps(m, y + i)));
    }
}

__attribute__((target("avx512f")))
static void hy_attn_scale_avx512(float *y, float a, int n)
{
    __m512 va = _mm512_set1_ps(a);
    int i = 0;

    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_mul_ps(va, _mm512_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] *= a;
}

/* (hy_attn_exp_avx512/avx2 are in attn_flash.h, shared with the flash kernels) */
__attribute__((target("avx512f")))
static float hy_attn_expsum_avx512(float *s, int n, float m)
{
    __m512 vm = _mm512_set1_ps(m), acc = _mm512_setzero_ps();
    int j = 0;

    for (; j + 16 <= n; j += 16) {
        __m512 e = hy_attn_exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm));
        _mm512_storeu_ps(s + j, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (j < n) {
        __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
        __m512 e = hy_attn_exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vm));
        _mm512_mask_storeu_ps(s + j, k, e);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(k, e));
    }
    return _mm512_reduce_add_ps(acc);
}

#endif

__attribute__((target("avx2,fma")))
static float hy_attn_expsum_avx2(float *s, int n, float m)
{
    __m256 vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
    int j = 0;
    float sum;

    for (; j + 8 <= n; j += 8) {
        __m256 e = hy_attn_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        _mm256_storeu_ps(s + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    sum = _mm_cvtss_f32(h);
    for (; j < n; j++) {
        s[j] = expf(s[j] - m);
        sum += s[j];
    }
    return sum;
}

HY_ATTN_BLOCK_KERNELS(avx2, __attribute__((target("avx2,fma"))))
#ifdef HY_ATTN_AVX512
HY_ATTN_BLOCK_KERNELS(avx512, __attribute__((target("avx512f"))))

/* ---- small heads: 16 queries in the SIMD lanes (see hy_attn_lanes_t) ---- */

__attribute__((target("avx512f")))
static void hy_attn_lanes_avx512(hy_attn_lanes_t *a, const float *K, const float *V, int n,
                                 int32_t jpos0)
{
    const int hd = a->hd, hdv = a->hdv;
    const __m512i qpos = _mm512_loadu_si512(a->qpos), qlo = _mm512_loadu_si512(a->qlo);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mmax = ninf;
    int j = 0, d;

    /* scores, eight keys at a time sharing each query column (eight
     * independent FMA chains hide the FMA latency on two ports); every
     * key's dot product is one chain over d, whatever the blocking */
    for (; j + 8 <= n; j += 8) {
        const float *k0 = K + (size_t)j * hd;
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0,
               s7 = s0;
        for (d = 0; d < hd; d++) {
            __m512 q = _mm512_loadu_ps(a->Qt + (size_t)d * HY_ATTN_LANES);
            s0 = _mm512_fmadd_ps(_mm512_set1_ps(k0[d]), q, s0);
            s1 = _mm512_fmadd_ps(_mm512_set1_ps(k0[hd + d]), q, s1);
            s2 = _mm512_fmadd_ps(_mm512_set1_ps(k0[2 * hd + d]), q, s2);
            s3 = _mm512_fmadd_ps(_mm512_set1_ps(k0[3 * hd + d]), q, s3);
            s4 = _mm512_fmadd_ps(_mm512_set1_ps(k0[4 * hd + d]), q, s4);
            s5 = _mm512_fmadd_ps(_mm512_set1_ps(k0[5 * hd + d]), q, s5);
            s6 = _mm512_fmadd_ps(_mm512_set1_ps(k0[6 * hd + d]), q, s6);
            s7 = _mm512_fmadd_ps(_mm512_set1_ps(k0[7 * hd + d]), q, s7);
        }
        float *sj = a->S + (size_t)j * HY_ATTN_LANES;
        _mm512_storeu_ps(sj, s0);
        _mm512_storeu_ps(sj + HY_ATTN_LANES, s1);
        _mm512_storeu_ps(sj + 2 * HY_ATTN_LANES, s2);
        _mm512_storeu_ps(sj + 3 * HY_ATTN_LANES, s3);
        _mm512_storeu_ps(sj + 4 * HY_ATTN_LANES, s4);
        _mm512_storeu_ps(sj + 5 * HY_ATTN_LANES, s5);
        _mm512_storeu_ps(sj + 6 * HY_ATTN_LANES, s6);
        _mm512_storeu_ps(sj + 7 * HY_ATTN_LANES, s7);
    }
    for (; j + 4 <= n; j += 4) {
        const float *k0 = K + (size_t)j * hd;
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (d = 0; d < hd; d++) {
            __m512 q = _mm512_loadu_ps(a->Qt + (size_t)d * HY_ATTN_LANES);
            s0 = _mm512_fmadd_ps(_mm512_set1_ps(k0[d]), q, s0);
            s1 = _mm512_fmadd_ps(_mm512_set1_ps(k0[hd + d]), q, s1);
            s2 = _mm512_fmadd_ps(_mm512_set1_ps(k0[2 * hd + d]), q, s2);
            s3 = _mm512_fmadd_ps(_mm512_set1_ps(k0[3 * hd + d]), q, s3);
        }
        _mm512_storeu_ps(a->S + (size_t)j * HY_ATTN_LANES, s0);
        _mm512_storeu_ps(a->S + (size_t)(j + 1) * HY_ATTN_LANES, s1);
        _mm512_storeu_ps(a->S + (size_t)(j + 2) * HY_ATTN_LANES, s2);
        _mm512_storeu_ps(a->S + (size_t)(j + 3) * HY_ATTN_LANES, s3);
    }
    for (; j < n; j++) {
        const float *kj = K + (size_t)j * hd;
        __m512 s0 = _mm512_setzero_ps();
        for (d = 0; d < hd; d++)
            s0 = _mm512_fmadd_ps(_mm512_set1_ps(kj[d]),
                                 _mm512_loadu_ps(a->Qt + (size_t)d * HY_ATTN_LANES), s0);
        _mm512_storeu_ps(a->S + (size_t)j * HY_ATTN_LANES, s0);
    }
    if (a->softcap > 0.0f)
        hy_attn_lanes_softcap(a, n);
    for (j = 0; j < n; j++) {
        float *sr = a->S + (size_t)j * HY_ATTN_LANES;
        __m512i jp = _mm512_set1_epi32(jpos0 + j);
        __mmask16 ok = _mm512_cmple_epi32_mask(jp, qpos) & _mm512_cmpge_epi32_mask(jp, qlo);
        __m512 s = _mm512_mask_blend_ps(ok, ninf, _mm512_loadu_ps(sr));
        _mm512_storeu_ps(sr, s);
        mmax = _mm512_max_ps(mmax, s);
    }

    /* online softmax per lane: rescale what came before if the max grew */
    __m512 m = _mm512_loadu_ps(a->m), mn = _mm512_max_ps(m, mmax);
    __mmask16 empty = _mm512_cmp_ps_mask(mn, ninf, _CMP_EQ_OQ);
    __m512 c = _mm512_mask_blend_ps(empty, hy_attn_exp_avx512(_mm512_sub_ps(m, mn)),
                                    _mm512_set1_ps(1.0f));
    __m512 l = _mm512_mul_ps(_mm512_loadu_ps(a->l), c);
    for (j = 0; j < n; j++) {
        float *sr = a->S + (size_t)j * HY_ATTN_LANES;
        __m512 s = _mm512_loadu_ps(sr);
        __mmask16 ok = _mm512_cmp_ps_mask(s, ninf, _CMP_NEQ_OQ);
        __m512 p = _mm512_maskz_mov_ps(ok, hy_attn_exp_avx512(_mm512_sub_ps(s, mn)));
        _mm512_storeu_ps(sr, p);
        l = _mm512_add_ps(l, p);
    }
    _mm512_storeu_ps(a->m, mn);
    _mm512_storeu_ps(a->l, l);

    /* accT[d] = c accT[d] + sum_j V[j][d] P[j], eight value columns at a
     * time (then four, then one; each column is one chain over j) */
    for (d = 0; d + 8 <= hdv; d += 8) {
        float *o = a->accT + (size_t)d * HY_ATTN_LANES;
        __m512 o0 = _mm512_mul_ps(_mm512_loadu_ps(o), c);
        __m512 o1 = _mm512_mul_ps(_mm512_loadu_ps(o + HY_ATTN_LANES), c);
        __m512 o2 = _mm512_mul_ps(_mm512_loadu_ps(o + 2 * HY_ATTN_LANES), c);
        __m512 o3 = _mm512_mul_ps(_mm512_loadu_ps(o + 3 * HY_ATTN_LANES), c);
        __m512 o4 = _mm512_mul_ps(_mm512_loadu_ps(o + 4 * HY_ATTN_LANES), c);
        __m512 o5 = _mm512_mul_ps(_mm512_loadu_ps(o + 5 * HY_ATTN_LANES), c);
        __m512 o6 = _mm512_mul_ps(_mm512_loadu_ps(o + 6 * HY_ATTN_LANES), c);
        __m512 o7 = _mm512_mul_ps(_mm512_loadu_ps(o + 7 * HY_ATTN_LANES), c);
        for (j = 0; j < n; j++) {
            const float *vj = V + (size_t)j * hdv + d;
            __m512 p = _mm512_loadu_ps(a->S + (size_t)j * HY_ATTN_LANES);
            o0 = _mm512_fmadd_ps(_mm512_set1_ps(vj[0]), p, o0);
            o1 = _mm512_fmadd_ps(_mm512_set1_ps(vj[1]), p, o1);
            o2 = _mm512_fmadd_ps(_mm512_set1_ps(vj[2]), p, o2);
            o3 = _mm512_fmadd_ps(_mm512_set1_ps(vj[3]), p, o3);
            o4 = _mm512_fmadd_ps(_mm512_set1_ps(vj[4]), p, o4);
            o5 = _mm512_fmadd_ps(_mm512_set1_ps(vj[5]), p, o5);
            o6 = _mm512_fmadd_ps(_mm512_set1_ps(vj[6]), p, o6);
            o7 = _mm512_fmadd_ps(_mm512_set1_ps(vj[7]), p, o7);
        }
        _mm512_storeu_ps(o, o0);
        _mm512_storeu_ps(o + HY_ATTN_LANES, o1);
        _mm512_storeu_ps(o + 2 * HY_ATTN_LANES, o2);
        _mm512_storeu_ps(o + 3 * HY_ATTN_LANES, o3);
        _mm512_storeu_ps(o + 4 * HY_ATTN_LANES, o4);
        _mm512_storeu_ps(o + 5 * HY_ATTN_LANES, o5);
        _mm512_storeu_ps(o + 6 * HY_ATTN_LANES, o6);
        _mm512_storeu_ps(o + 7 * HY_ATTN_LANES, o7);
    }
    for (; d + 4 <= hdv; d += 4) {
        float *o = a->accT + (size_t)d * HY_ATTN_LANES;
        __m512 o0 = _mm512_mul_ps(_mm512_loadu_ps(o), c);
        __m512 o1 = _mm512_mul_ps(_mm512_loadu_ps(o + HY_ATTN_LANES), c);
        __m512 o2 = _mm512_mul_ps(_mm512_loadu_ps(o + 2 * HY_ATTN_LANES), c);
        __m512 o3 = _mm512_mul_ps(_mm512_loadu_ps(o + 3 * HY_ATTN_LANES), c);
        for (j = 0; j < n; j++) {
            const float *vj = V + (size_t)j * hdv + d;
            __m512 p = _mm512_loadu_ps(a->S + (size_t)j * HY_ATTN_LANES);
            o0 = _mm512_fmadd_ps(_mm512_set1_ps(vj[0]), p, o0);
            o1 = _mm512_fmadd_ps(_mm512_set1_ps(vj[1]), p, o1);
            o2 = _mm512_fmadd_ps(_mm512_set1_ps(vj[2]), p, o2);
            o3 = _mm512_fmadd_ps(_mm512_set1_ps(vj[3]), p, o3);
        }
        _mm512_storeu_ps(o, o0);
        _mm512_storeu_ps(o + HY_ATTN_LANES, o1);
        _mm512_storeu_ps(o + 2 * HY_ATTN_LANES, o2);
        _mm512_storeu_ps(o + 3 * HY_ATTN_LANES, o3);
    }
    for (; d < hdv; d++) {
        float *o = a->accT + (size_t)d * HY_ATTN_LANES;
        __m512 o0 = _mm512_mul_ps(_mm512_loadu_ps(o), c);
        for (j = 0; j < n; j++)
            o0 = _mm512_fmadd_ps(_mm512_set1_ps(V[(size_t)j * hdv + d]),
                                 _mm512_loadu_ps(a->S + (size_t)j * HY_ATTN_LANES), o0);
        _mm512_storeu_ps(o, o0);
    }
}

#endif

/* The AVX2 form: the 16 lanes as two independent halves of 8. */
__attribute__((target("avx2,fma")))
static void hy_attn_lanes_avx2(hy_attn_lanes_t *a, const float *K, const float *V, int n,
                               int32_t jpos0)
{
    const int hd = a->hd, hdv = a->hdv;
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    int j, d;

    if (a->softcap > 0.0f) {
        /* raw scores of both halves first, then the cap, as the AVX-512 form */
        for (j = 0; j < n; j++)
            for (int h = 0; h < 2; h++) {
                __m256 s0 = _mm256_setzero_ps();
                for (d = 0; d < hd; d++)
                    s0 = _mm256_fmadd_ps(_mm256_set1_ps(K[(size_t)j * hd + d]),
                                         _mm256_loadu_ps(a->Qt + (size_t)d * HY_ATTN_LANES + 8 * h), s0);
                _mm256_storeu_ps(a->S + (size_t)j * HY_ATTN_LANES + 8 * h, s0);
            }
        hy_attn_lanes_softcap(a, n);
    }
    for (int h = 0; h < 2; h++) {
        const __m256i qpos = _mm256_loadu_si256((const __m256i *)(a->qpos + 8 * h));
        const __m256i qlo = _mm256_loadu_si256((const __m256i *)(a->qlo + 8 * h));
        float *S = a->S + 8 * h;
        __m256 mmax = ninf;

        for (j = 0; j < n; j++) {
            __m256 s;
            if (a->softcap > 0.0f) {
                s = _mm256_loadu_ps(S + (size_t)j * HY_ATTN_LANES);
            } else {
                const float *kj = K + (size_t)j * hd;
                s = _mm256_setzero_ps();
                for (d = 0; d < hd; d++)
                    s = _mm256_fmadd_ps(_mm256_set1_ps(kj[d]),
                                        _mm256_loadu_ps(a->Qt + (size_t)d * HY_ATTN_LANES + 8 * h), s);
            }
            __m256i jp = _mm256_set1_epi32(jpos0 + j);
            __m256i bad = _mm256_or_si256(_mm256_cmpgt_epi32(jp, qpos), _mm256_cmpgt_epi32(qlo, jp));
            s = _mm256_blendv_ps(s, ninf, _mm256_castsi256_ps(bad));
            _mm256_storeu_ps(S + (size_t)j * HY_ATTN_LANES, s);
            mmax = _mm256_max_ps(mmax, s);
        }
        __m256 m = _mm256_loadu_ps(a->m + 8 * h), mn = _mm256_max_ps(m, mmax);
        __m256 empty = _mm256_cmp_ps(mn, ninf, _CMP_EQ_OQ);
        __m256 c = _mm256_blendv_ps(hy_attn_exp_avx2(_mm256_sub_ps(m, mn)), _mm256_set1_ps(1.0f),
                                    empty);
        __m256 l = _mm256_mul_ps(_mm256_loadu_ps(a->l + 8 * h), c);
        for (j = 0; j < n; j++) {
            __m256 s = _mm256_loadu_ps(S + (size_t)j * HY_ATTN_LANES);
            __m256 ok = _mm256_cmp_ps(s, ninf, _CMP_NEQ_OQ);
            __m256 p = _mm256_and_ps(ok, hy_attn_exp_avx2(_mm256_sub_ps(s, mn)));
            _mm256_storeu_ps(S + (size_t)j * HY_ATTN_LANES, p);
            l = _mm256_add_ps(l, p);
        }
        _mm256_storeu_ps(a->m + 8 * h, mn);
        _mm256_storeu_ps(a->l + 8 * h, l);
        for (d = 0; d < hdv; d++) {
            float *o = a->accT + (size_t)d * HY_ATTN_LANES + 8 * h;
            __m256 o0 = _mm256_mul_ps(_mm256_loadu_ps(o), c);
            for (j = 0; j < n; j++)
                o0 = _mm256_fmadd_ps(_mm256_set1_ps(V[(size_t)j * hdv + d]),
                                     _mm256_loadu_ps(S + (size_t)j * HY_ATTN_LANES), o0);
            _mm256_storeu_ps(o, o0);
        }
    }
}
#endif

/* -1: the CPU's best; tests pin lower levels to cover every variant. */
static int hy_attn_isa_pin = -1;

/* The level the kernels run at now (the pin, else the CPU's best). */
static hy_isa_t hy_attn_isa(void)
{
    int pin = __atomic_load_n(&hy_attn_isa_pin, __ATOMIC_RELAXED);

    return pin >= 0 ? (hy_isa_t)pin : hy_cpu_isa();
}

int hy_cpu_attn_set_isa(hy_isa_t isa)
{
    if ((int)isa < 0 || isa > hy_cpu_isa())
        return HY_EUNSUPPORTED;
    __atomic_store_n(&hy_attn_isa_pin, (int)isa, __ATOMIC_RELAXED);
    return HY_OK;
}

static hy_attn_vec_t hy_attn_vec(void)
{
    hy_attn_vec_t v = {hy_attn_qk_c, hy_attn_expsum_c, hy_attn_pv_c, hy_attn_scale_c,
                       hy_attn_lanes_c};

#ifdef HY_ATTN_X86
    switch (hy_attn_isa()) {
#ifdef HY_ATTN_AVX512
    case HY_ISA_AVX512:
        v = (hy_attn_vec_t){hy_attn_qk_avx512, hy_attn_expsum_avx512, hy_attn_pv_avx512,
                            hy_attn_scale_avx512, hy_attn_lanes_avx512};
        break;
#endif
    case HY_ISA_AVX2:
        v = (hy_attn_vec_t){hy_attn_qk_avx2, hy_attn_expsum_avx2, hy_attn_pv_avx2,
                            hy_attn_scale_avx2, hy_attn_lanes_avx2};
        break;
    default:
        break;
    }
#endif
    return v;
}

/* ---- the page pool -------------------------------------------------------- */

/* Layer l's pages of page_bytes each: its group's pool. */
static size_t hy_kv_layer_bytes(const hy_kv_layout_t *lay, int32_t l, size_t page_bytes)
{
    return page_bytes * (size_t)hy_kv_layout_group_pages(lay, hy_kv_layout_group(lay, l));
}

static void hy_kv_unmap(uint8_t **pages, const hy_kv_layout_t *lay, size_t page_bytes)
{
    if (!pages)
        return;
    for (int32_t l = 0; l < lay->n_layers; l++)
        if (pages[l])
            munmap(pages[l], hy_kv_layer_bytes(lay, l, page_bytes));
    free(pages);
}

void hy_cpu_kv_free(hy_cpu_t *cpu)
{
    if (cpu->kv_ready) {
        hy_kv_unmap(cpu->k_pages, &cpu->kv, cpu->k_page_bytes);
        hy_kv_unmap(cpu->v_pages, &cpu->kv, cpu->v_page_bytes);
    }
    cpu->k_pages = cpu->v_pages = NULL;
    free(cpu->kv_layer_swa);
    cpu->kv_layer_swa = NULL;
    cpu->kv.layer_swa = NULL;
    cpu->kv_ready = 0;
    free(cpu->attn_scratch);
    cpu->attn_scratch = NULL;
    cpu->attn_scratch_floats = 0;
}

/* Maps each layer's pages: anonymous memory is zeroed and committed only as
 * pages are first written, so a large pool costs nothing until used. */
static uint8_t **hy_kv_map(const hy_kv_layout_t *lay, size_t page_bytes)
{
    uint8_t **pages = calloc((size_t)HY_MAX(lay->n_layers, 1), sizeof *pages);

    if (!pages)
        return NULL;
    for (int32_t l = 0; l < lay->n_layers; l++) {
        void *p = mmap(NULL, hy_kv_layer_bytes(lay, l, page_bytes), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            hy_kv_unmap(pages, lay, page_bytes);
            return NULL;
        }
        pages[l] = p;
    }
    return pages;
}

int hy_cpu_kv_init(hy_backend_t *be, const hy_kv_layout_t *lay, char *err)
{
    hy_cpu_t *cpu = be->ctx;
    size_t krow, vrow;
    uint64_t kpage, vpage, kbytes, vbytes;
    uint8_t **kp = NULL, **vp = NULL, *swa = NULL;
    int32_t most = HY_MAX(lay->n_pages, lay->n_swa_pages);
    int rc = HY_OK;

    rc = hy_kv_layout_check(lay, HY_ATTN_MAX_HEAD, &krow, &vrow, &kpage, &vpage, err);
    if (rc != HY_OK)
        return rc;
    if (!hy_quant_traits(lay->type) || !hy_quant_traits(lay->type)->to_float)
        return hy_err(err, HY_EUNSUPPORTED, "kv: no conversion kernels for type %u",
                      (unsigned)lay->type);
    if (hy_mul_overflow_u64(kpage, (uint64_t)most, &kbytes) ||
        hy_mul_overflow_u64(vpage, (uint64_t)most, &vbytes) || kbytes > SIZE_MAX / 2 ||
        vbytes > SIZE_MAX / 2)
        return hy_err(err, HY_ERANGE, "kv: %d pages of %d tokens overflow the address space",
                      most, lay->page_tokens);
    if (lay->layer_swa != NULL && lay->n_layers > 0) {
        swa = malloc((size_t)lay->n_layers);
        if (!swa)
            return hy_err(err, HY_ENOMEM, "kv: out of memory");
        memcpy(swa, lay->layer_swa, (size_t)lay->n_layers);
    }
    /* Build the new pool before dropping the old: a failure leaves the
     * backend as it was. */
    kp = hy_kv_map(lay, kpage);
    vp = kp ? hy_kv_map(lay, vpage) : NULL;
    if (!kp || !vp) {
        rc = hy_err(err, HY_ENOMEM, "kv: cannot map %d layers x %llu bytes of KV pages",
                    lay->n_layers, (unsigned long long)(kbytes + vbytes));
        hy_kv_unmap(kp, lay, kpage);
        free(swa);
        return rc;
    }
    hy_cpu_kv_free(cpu);
    cpu->kv = *lay;
    cpu->kv_layer_swa = swa;
    cpu->kv.layer_swa = swa;
    cpu->k_pages = kp;
    cpu->v_pages = vp;
    cpu->k_row_bytes = krow;
    cpu->v_row_bytes = vrow;
    cpu->k_page_bytes = kpage;
    cpu->v_page_bytes = vpage;
    cpu->kv_ready = 1;
    return HY_OK;
}

/* ---- attention ------------------------------------------------------------ */

typedef struct {
    hy_cpu_t *cpu;
    int32_t layer;
    const hy_batch_t *b;
    const float *q, *k, *v;
    float *out;
    const hy_attn_params_t *p;
    hy_attn_vec_t vec;
    const hy_quant_traits_t *tr;   /* KV type's to_float */
    int group;                     /* query heads per kv head */
    int n_hsplit;                  /* units a group of heads is split into */
    int heads_per_unit;
    int lanes;                     /* small heads: always hy_attn_unit_lanes */
    /* prefill units of larger heads: the flash kernel of the ISA, or NULL */
    void (*flash)(const hy_attn_flash_t *f, float *scratch);
    int32_t qblock;                /* query tokens per unit */
    const int64_t *unit_start;     /* [n_seqs + 1] first unit of each sequence */
    int64_t n_units;
    size_t scratch_floats;         /* per thread */
    _Atomic int64_t next;
} hy_attn_job_t;

static void hy_attn_write_worker(void *arg, int ith, int nth)
{
    hy_attn_job_t *j = arg;
    hy_cpu_t *cpu = j->cpu;
    const hy_batch_t *b = j->b;
    int32_t pt = cpu->kv.page_tokens, nkv = cpu->kv.n_head_kv;
    int32_t hd = cpu->kv.head_dim_k, hdv = cpu->kv.head_dim_v;

    for (int32_t s = 0; s < b->n_seqs; s++) {
        const hy_batch_seq_t *sq = &b->seqs[s];
        int64_t lo, hi;
        /* split each sequence's tokens so a lone long prompt still spreads */
        hy_cpu_split(sq->n, ith, nth, &lo, &hi);
        for (int64_t i = lo; i < hi; i++) {
            int32_t t = sq->first + (int32_t)i, pos = b->pos[t];
            size_t page = (size_t)sq->pages[pos / pt], slot = (size_t)(pos % pt);
            for (int32_t g = 0; g < nkv; g++) {
                uint8_t *kd = cpu->k_pages[j->layer] + page * cpu->k_page_bytes +
                              ((size_t)g * pt + slot) * cpu->k_row_bytes;
                uint8_t *vd = cpu->v_pages[j->layer] + page * cpu->v_page_bytes +
                              ((size_t)g * pt + slot) * cpu->v_row_bytes;
                const float *ks = j->k + ((size_t)t * nkv + g) * hd;
                const float *vs = j->v + ((size_t)t * nkv + g) * hdv;
                if (cpu->kv.type == HY_DTYPE_F32) {
                    memcpy(kd, ks, (size_t)hd * sizeof(float));
                    memcpy(vd, vs, (size_t)hdv * sizeof(float));
                } else {
                    /* sizes were validated by kv_init: cannot fail */
                    hy_quant_quantize_row(cpu->kv.type, ks, kd, hd);
                    hy_quant_quantize_row(cpu->kv.type, vs, vd, hdv);
                }
            }
        }
    }
}

/* A unit in the lanes (see hy_attn_lanes_t): its queries 16 at a time,
 * each group sweeping the pages any of them can see. */
static void hy_attn_unit_lanes(hy_attn_job_t *j, float *scr, const hy_batch_seq_t *sq,
                               int32_t t0, int32_t t1, int32_t g, int32_t h0, int32_t h1)
{
    hy_cpu_t *cpu = j->cpu;
    const hy_attn_params_t *p = j->p;
    const int32_t *pos = j->b->pos;
    int32_t pt = cpu->kv.page_tokens, hd = p->head_dim, hdv = p->head_dim_v;
    int32_t nh = h1 - h0, nq = (t1 - t0) * nh;
    int is_f32 = cpu->kv.type == HY_DTYPE_F32;
    float *kbuf = scr, *vbuf = kbuf + (size_t)pt * hd, *S = vbuf + (size_t)pt * hdv;
    float *Qt = S + (size_t)pt * HY_ATTN_LANES, *m = Qt + (size_t)hd * HY_ATTN_LANES;
    float *l = m + HY_ATTN_LANES, *accT = l + HY_ATTN_LANES;
    int32_t qpos[HY_ATTN_LANES], qlo[HY_ATTN_LANES];
    hy_attn_lanes_t a = {Qt, qpos, qlo, hd, hdv, p->softcap, m, l, accT, S};

    for (int32_t q0 = 0; q0 < nq; q0 += HY_ATTN_LANES) {
        int32_t kmin = INT32_MAX, kmax = -1, nl = HY_MIN(HY_ATTN_LANES, nq - q0);

        memset(Qt, 0, sizeof(float) * (size_t)hd * HY_ATTN_LANES);
        memset(accT, 0, sizeof(float) * (size_t)hdv * HY_ATTN_LANES);
        for (int32_t i = 0; i < HY_ATTN_LANES; i++) {
            m[i] = -INFINITY;
            l[i] = 0.0f;
            qpos[i] = -1;
            qlo[i] = 0;
        }
        for (int32_t i = 0; i < nl; i++) {
            int32_t t = t0 + (q0 + i) / nh, h = h0 + (q0 + i) % nh;
            const float *qv = j->q + ((size_t)t * p->n_head + h) * hd;
            for (int32_t d = 0; d < hd; d++)
                Qt[(size_t)d * HY_ATTN_LANES + i] = qv[d] * p->scale;
            qpos[i] = pos[t];
            qlo[i] = p->window > 0 ? HY_MAX(0, pos[t] - p->window + 1) : 0;
            kmin = HY_MIN(kmin, qlo[i]);
            kmax = HY_MAX(kmax, qpos[i]);
        }
        for (int32_t pi = kmin / pt; pi <= kmax / pt; pi++) {
            size_t page = (size_t)sq->pages[pi];
            int32_t j0 = pi * pt, c0 = HY_MAX(j0, kmin) - j0, c1 = HY_MIN(j0 + pt, kmax + 1) - j0;
            const uint8_t *kp = cpu->k_pages[j->layer] + page * cpu->k_page_bytes +
                                (size_t)g * pt * cpu->k_row_bytes;
            const uint8_t *vp = cpu->v_pages[j->layer] + page * cpu->v_page_bytes +
                                (size_t)g * pt * cpu->v_row_bytes;
            const float *K, *V;

            if (is_f32) {
                K = (const float *)kp;
                V = (const float *)vp;
            } else {
                j->tr->to_float(kp + (size_t)c0 * cpu->k_row_bytes, kbuf + (size_t)c0 * hd,
                                (int64_t)(c1 - c0) * hd);
                j->tr->to_float(vp + (size_t)c0 * cpu->v_row_bytes, vbuf + (size_t)c0 * hdv,
                                (int64_t)(c1 - c0) * hdv);
                K = kbuf;
                V = vbuf;
            }
            j->vec.lanes(&a, K + (size_t)c0 * hd, V + (size_t)c0 * hdv, c1 - c0, j0 + c0);
        }
        for (int32_t i = 0; i < nl; i++) {
            int32_t t = t0 + (q0 + i) / nh, h = h0 + (q0 + i) % nh;
            float *o = j->out + ((size_t)t * p->n_head + h) * hdv;
            float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
            for (int32_t d = 0; d < hdv; d++)
                o[d] = accT[(size_t)d * HY_ATTN_LANES + i] * inv;
        }
    }
}

/* A prefill unit through the flash kernel (attn_flash_impl.h): the same unit,
 * described by its page addressing. */
static void hy_attn_unit_flash(hy_attn_job_t *j, float *scr, const hy_batch_seq_t *sq,
                               int32_t t0, int32_t t1, int32_t g, int32_t h0, int32_t h1)
{
#ifdef HY_ATTN_X86
    hy_cpu_t *cpu = j->cpu;
    const hy_attn_params_t *p = j->p;
    int32_t pt = cpu->kv.page_tokens;
    hy_attn_flash_t f = {
        /* .k_base = */ cpu->k_pages[j->layer] + (size_t)g * pt * cpu->k_row_bytes,
        /* .v_base = */ cpu->v_pages[j->layer] + (size_t)g * pt * cpu->v_row_bytes,
        /* .k_page_bytes = */ cpu->k_page_bytes,
        /* .v_page_bytes = */ cpu->v_page_bytes,
        /* .k_row_bytes = */ cpu->k_row_bytes,
        /* .v_row_bytes = */ cpu->v_row_bytes,
        /* .pages = */ sq->pages,
        /* .page_tokens = */ pt,
        /* .kv_f32 = */ cpu->kv.type == HY_DTYPE_F32,
        /* .kv_f16 = */ cpu->kv.type == HY_DTYPE_F16,
        /* .to_float = */ j->tr->to_float,
        /* .q = */ j->q,
        /* .out = */ j->out,
        /* .pos = */ j->b->pos,
        /* .q_stride = */ p->n_head * p->head_dim,
        /* .out_stride = */ p->n_head * p->head_dim_v,
        /* .t0 = */ t0, /* .t1 = */ t1, /* .h0 = */ h0, /* .h1 = */ h1,
        /* .hd = */ p->head_dim,
        /* .hdv = */ p->head_dim_v,
        /* .window = */ p->window,
        /* .scale = */ p->scale,
        /* .softcap = */ p->softcap,
    };
    j->flash(&f, scr);
#else
    (void)j, (void)scr, (void)sq, (void)t0, (void)t1, (void)g, (void)h0, (void)h1;
#endif
}

/* One unit: query tokens [t0, t1) of sequence sq, query heads [h0, h1), all
 * sharing kv head g. */
static void hy_attn_unit(hy_attn_job_t *j, float *scr, const hy_batch_seq_t *sq, int32_t t0,
                         int32_t t1, int32_t g, int32_t h0, int32_t h1)
{
    hy_cpu_t *cpu = j->cpu;
    const hy_attn_params_t *p = j->p;
    const int32_t *pos = j->b->pos;
    int32_t pt = cpu->kv.page_tokens, hd = p->head_dim, hdv = p->head_dim_v;
    int32_t nh = h1 - h0, nq = (t1 - t0) * nh;
    int is_f32 = cpu->kv.type == HY_DTYPE_F32;
    float *kbuf = scr, *vbuf = kbuf + (size_t)pt * hd, *sc = vbuf + (size_t)pt * hdv;
    float *m = sc + pt, *l = m + nq, *acc = l + nq;
    int32_t kmin = INT32_MAX, kmax = -1;
    float softcap = p->softcap;

    for (int32_t t = t0; t < t1; t++) {
        int32_t lo = p->window > 0 ? HY_MAX(0, pos[t] - p->window + 1) : 0;
        kmin = HY_MIN(kmin, lo);
        kmax = HY_MAX(kmax, pos[t]);
    }
    for (int32_t i = 0; i < nq; i++) {
        m[i] = -INFINITY;
        l[i] = 0;
    }
    memset(acc, 0, (size_t)nq * hdv * sizeof(float));

    for (int32_t pi = kmin / pt; pi <= kmax / pt; pi++) {
        size_t page = (size_t)sq->pages[pi];
        int32_t j0 = pi * pt, j1 = HY_MIN(j0 + pt, kmax + 1); /* positions [j0, j1) */
        const uint8_t *kp = cpu->k_pages[j->layer] + page * cpu->k_page_bytes +
                            (size_t)g * pt * cpu->k_row_bytes;
        const uint8_t *vp = cpu->v_pages[j->layer] + page * cpu->v_page_bytes +
                            (size_t)g * pt * cpu->v_row_bytes;
        const float *K, *V;

        /* convert the part of the page any query can see, once for all */
        int32_t c0 = HY_MAX(j0, kmin) - j0, c1 = j1 - j0;
        if (is_f32) {
            K = (const float *)kp;
            V = (const float *)vp;
        } else {
            j->tr->to_float(kp + (size_t)c0 * cpu->k_row_bytes, kbuf + (size_t)c0 * hd,
                            (int64_t)(c1 - c0) * hd);
            j->tr->to_float(vp + (size_t)c0 * cpu->v_row_bytes, vbuf + (size_t)c0 * hdv,
                            (int64_t)(c1 - c0) * hdv);
            K = kbuf;
            V = vbuf;
        }
        for (int32_t t = t0; t < t1; t++) {
            int32_t wlo = p->window > 0 ? HY_MAX(0, pos[t] - p->window + 1) : 0;
            int32_t lo = HY_MAX(j0, wlo) - j0, hi = HY_MIN(j1 - 1, pos[t]) - j0;
            if (lo > hi)
                continue;
            for (int32_t h = h0; h < h1; h++) {
                int32_t qi = (t - t0) * nh + (h - h0);
                const float *qv = j->q + ((size_t)t * p->n_head + h) * hd;
                float *a = acc + (size_t)qi * hdv;
                float *sj = sc + lo, bm = -INFINITY;
                int32_t nk = hi - lo + 1;
                j->vec.qk(qv, K + (size_t)lo * hd, nk, hd, sj);
                for (int32_t jj = 0; jj < nk; jj++) {
                    float s = sj[jj] * p->scale;
                    if (softcap > 0.0f)
                        s = softcap * tanhf(s / softcap);
                    sj[jj] = s;
                    bm = HY_MAX(bm, s);
                }
                if (bm > m[qi]) {
                    /* new running max: rescale what was accumulated so far */
                    float c = expf(m[qi] - bm);
                    if (l[qi] > 0.0f) {
                        l[qi] *= c;
                        j->vec.scale(a, c, hdv);
                    }
                    m[qi] = bm;
                }
                float lsum = j->vec.expsum(sj, nk, m[qi]);
                j->vec.pv(a, sj, V + (size_t)lo * hdv, nk, hdv);
                l[qi] += lsum;
            }
        }
    }

    for (int32_t t = t0; t < t1; t++)
        for (int32_t h = h0; h < h1; h++) {
            int32_t qi = (t - t0) * nh + (h - h0);
            float *o = j->out + ((size_t)t * p->n_head + h) * hdv;
            float inv = l[qi] > 0.0f ? 1.0f / l[qi] : 0.0f;
            for (int32_t i = 0; i < hdv; i++)
                o[i] = acc[(size_t)qi * hdv + i] * inv;
        }
}

static void hy_attn_worker(void *arg, int ith, int nth)
{
    hy_attn_job_t *j = arg;
    const hy_batch_t *b = j->b;
    float *scr = j->cpu->attn_scratch + (size_t)ith * j->scratch_floats;
    int32_t nkv = j->p->n_head_kv;

    for (int64_t u = ith; u < j->n_units;
         u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) {
        /* the sequence holding unit u: binary search the prefix sums */
        int32_t lo = 0, hi = b->n_seqs - 1;
        while (lo < hi) {
            int32_t mid = (lo + hi + 1) / 2;
            if (j->unit_start[mid] <= u)
                lo = mid;
            else
                hi = mid - 1;
        }
        const hy_batch_seq_t *sq = &b->seqs[lo];
        int64_t r = u - j->unit_start[lo];
        int64_t per_block = (int64_t)nkv * j->n_hsplit;
        int32_t n_qb = (sq->n + j->qblock - 1) / j->qblock;
        /* last query block first: it sees the most keys, so it starts early */
        int32_t qb = n_qb - 1 - (int32_t)(r / per_block);
        int32_t g = (int32_t)(r % per_block) / j->n_hsplit;
        int32_t hs = (int32_t)(r % per_block) % j->n_hsplit;
        int32_t h0 = g * j->group + hs * j->heads_per_unit;
        int32_t h1 = HY_MIN(h0 + j->heads_per_unit, (g + 1) * j->group);
        int32_t t0 = sq->first + qb * j->qblock;
        int32_t t1 = HY_MIN(t0 + j->qblock, sq->first + sq->n);
        /* a unit with enough queries to fill most of the lanes (prefill)
         * runs lane-wise whatever the head size: no horizontal sum per key
         * and the output accumulates in registers across a page instead of
         * being loaded and stored once per key (2-3x at head 256); the
         * flash kernel, where there is one, also blocks keys and queries
         * in registers (another 2x at head 256) */
        if (h0 >= h1)
            continue;
        if (j->flash && (t1 - t0) * (h1 - h0) >= HY_ATTN_LANES_MIN_Q)
            hy_attn_unit_flash(j, scr, sq, t0, t1, g, h0, h1);
        else if (j->lanes || (t1 - t0) * (h1 - h0) >= HY_ATTN_LANES_MIN_Q)
            hy_attn_unit_lanes(j, scr, sq, t0, t1, g, h0, h1);
        else
            hy_attn_unit(j, scr, sq, t0, t1, g, h0, h1);
    }
}

/* Everything the kernels index with comes from the scheduler; check it all
 * before touching a page.  Returns 0 if the batch is usable. */
static int hy_attn_check(hy_cpu_t *cpu, int32_t layer, const hy_batch_t *b,
                         const hy_attn_params_t *p)
{
    const hy_kv_layout_t *kv = &cpu->kv;
    char msg[HY_ERR_LEN];

    if (!cpu->kv_ready) {
        hy_cpu_fail(cpu, HY_EINVAL, "attention: kv_init was not called");
        return -1;
    }
    if (layer < 0 || layer >= kv->n_layers) {
        hy_cpu_fail(cpu, HY_ERANGE, "attention: kv layer %d outside 0..%d", layer,
                    kv->n_layers - 1);
        return -1;
    }
    if (p->n_head_kv != kv->n_head_kv || p->head_dim != kv->head_dim_k ||
        p->head_dim_v != kv->head_dim_v || p->n_head < 1 || p->n_head % p->n_head_kv) {
        hy_cpu_fail(cpu, HY_EINVAL, "attention: heads %d/%d of %d/%d do not match the KV "
                    "layout (%d kv heads of %d/%d)", p->n_head, p->n_head_kv, p->head_dim,
                    p->head_dim_v, kv->n_head_kv, kv->head_dim_k, kv->head_dim_v);
        return -1;
    }
    if (p->window < 0 || p->softcap < 0.0f) {
        hy_cpu_fail(cpu, HY_EINVAL, "attention: window %d / softcap %g must be >= 0",
                    p->window, p->softcap);
        return -1;
    }
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const hy_batch_seq_t *sq = &b->seqs[s];
        if (sq->first < 0 || sq->n < 1 || sq->first > b->n_tokens - sq->n ||
            (s > 0 && sq->first < b->seqs[s - 1].first + b->seqs[s - 1].n)) {
            hy_cpu_fail(cpu, HY_EINVAL, "attention: sequence %d rows %d+%d do not fit the "
                        "batch of %d in order", s, sq->first, sq->n, b->n_tokens);
            return -1;
        }
        for (int32_t t = sq->first; t < sq->first + sq->n; t++) {
            if (b->pos[t] < 0) {
                hy_cpu_fail(cpu, HY_ERANGE, "attention: token %d has position %d", t, b->pos[t]);
                return -1;
            }
        }
        if (hy_kv_check_seq_pages(b, s, kv->page_tokens, p->window,
                                  hy_kv_layout_group_pages(kv, hy_kv_layout_group(kv, layer)),
                                  msg) != HY_OK) {
            hy_cpu_fail(cpu, HY_ERANGE, "%s", msg);
            return -1;
        }
    }
    return 0;
}

void hy_cpu_attention(hy_backend_t *be, int32_t kv_layer, const hy_batch_t *batch,
                      const float *q, const float *k, const float *v, float *out,
                      const hy_attn_params_t *p)
{
    hy_cpu_t *cpu = be->ctx;
    hy_attn_job_t j;
    int64_t *unit_start = NULL;
    hy_batch_seq_t *gseqs = NULL;
    hy_batch_t gcopy;
    const hy_batch_t *b = batch;
    int nth = cpu->n_threads;

    if (batch->n_tokens <= 0 || batch->n_seqs <= 0)
        return;
    /* a sliding layer reads its group's pages: the batch with those lists */
    if (cpu->kv_ready && hy_kv_layout_group(&cpu->kv, kv_layer) == HY_KV_SWA) {
        gseqs = malloc(sizeof *gseqs * (size_t)batch->n_seqs);
        if (!gseqs) {
            hy_cpu_fail(cpu, HY_ENOMEM, "attention: out of memory");
            goto fail;
        }
        b = hy_kv_group_batch(batch, HY_KV_SWA, &gcopy, gseqs);
    }
    if (hy_attn_check(cpu, kv_layer, b, p) != 0)
        goto fail;

    memset(&j, 0, sizeof j);
    j.cpu = cpu;
    j.layer = kv_layer;
    j.b = b;
    j.q = q;
    j.k = k;
    j.v = v;
    j.out = out;
    j.p = p;
    j.vec = hy_attn_vec();
    j.tr = hy_quant_traits(cpu->kv.type);
    j.group = p->n_head / p->n_head_kv;
    j.lanes = p->head_dim <= HY_ATTN_LANE_HEAD && p->head_dim_v <= HY_ATTN_LANE_HEAD;
#ifdef HY_ATTN_X86
    /* small heads stay in the lanes kernel, whose decode gives the same
     * bits as its prefill */
#ifdef HY_ATTN_AVX512
    if (!j.lanes && hy_attn_isa() == HY_ISA_AVX512)
        j.flash = hy_attn_flash_avx512;
#endif
    if (!j.lanes && hy_attn_isa() == HY_ISA_AVX2)
        j.flash = hy_attn_flash_avx2;
#endif
    j.qblock = HY_ATTN_QBLOCK;
    if (j.flash) {
        j.qblock = HY_MAX(1, HY_ATTN_FLASH_LANES / j.group);
        for (;;) {
            int64_t units = 0;
            for (int32_t s = 0; s < b->n_seqs; s++)
                units += (b->seqs[s].n + j.qblock - 1) / j.qblock;
            if (j.qblock == 1 || units * p->n_head_kv >= (int64_t)HY_ATTN_FLASH_UNITS * nth)
                break;
            j.qblock = (j.qblock + 1) / 2;
        }
    }

    /* 1. store this batch's k/v (all of it before anyone reads a page) */
    hy_pool_run_n(cpu->pool,
                  (int)HY_MIN((int64_t)nth, HY_MAX((int64_t)1, (int64_t)b->n_tokens *
                              p->n_head_kv * (p->head_dim + p->head_dim_v) / 16384)),
                  hy_attn_write_worker, &j);

    /* 2. units; split the heads of a group only when there is too little
     * other parallelism (decode of a few sequences) */
    int64_t n_blocks = 0;
    for (int32_t s = 0; s < b->n_seqs; s++)
        n_blocks += (b->seqs[s].n + j.qblock - 1) / j.qblock;
    j.n_hsplit = 1;
    if (n_blocks * p->n_head_kv < 2 * nth)
        j.n_hsplit = (int)HY_MIN((int64_t)j.group,
                                 (2 * nth + n_blocks * p->n_head_kv - 1) / (n_blocks * p->n_head_kv));
    j.heads_per_unit = (j.group + j.n_hsplit - 1) / j.n_hsplit;
    j.n_hsplit = (j.group + j.heads_per_unit - 1) / j.heads_per_unit;
    unit_start = malloc(((size_t)b->n_seqs + 1) * sizeof *unit_start);
    if (!unit_start) {
        hy_cpu_fail(cpu, HY_ENOMEM, "attention: out of memory");
        goto fail;
    }
    unit_start[0] = 0;
    for (int32_t s = 0; s < b->n_seqs; s++)
        unit_start[s + 1] = unit_start[s] + (int64_t)((b->seqs[s].n + j.qblock - 1) /
                                                      j.qblock) * p->n_head_kv * j.n_hsplit;
    j.unit_start = unit_start;
    j.n_units = unit_start[b->n_seqs];

    /* per-thread scratch: K and V page in f32, scores, and m, l, acc for
     * every query of a unit; rounded to cache lines */
    int64_t nq = (int64_t)j.qblock * j.heads_per_unit;
    size_t row_floats = (size_t)cpu->kv.page_tokens * (p->head_dim + p->head_dim_v + 1) +
                        (size_t)nq * (2 + p->head_dim_v);
    size_t lane_floats = (size_t)cpu->kv.page_tokens * (p->head_dim + p->head_dim_v +
                                                        HY_ATTN_LANES) +
                         (size_t)HY_ATTN_LANES * (p->head_dim + p->head_dim_v + 2);
    /* large heads run either kernel, unit by unit (hy_attn_worker) */
    j.scratch_floats = j.lanes ? lane_floats : HY_MAX(row_floats, lane_floats);
    if (j.flash)
        j.scratch_floats = HY_MAX(j.scratch_floats,
                                  hy_attn_flash_scratch_floats(p->head_dim, p->head_dim_v,
                                                               (int32_t)HY_MIN(nq, INT32_MAX)));
    j.scratch_floats = (j.scratch_floats + 15) & ~(size_t)15;
    nth = (int)HY_MIN((int64_t)nth, j.n_units);
    if (j.scratch_floats * (size_t)nth > cpu->attn_scratch_floats) {
        float *s = aligned_alloc(64, j.scratch_floats * (size_t)nth * sizeof(float));
        if (!s) {
            hy_cpu_fail(cpu, HY_ENOMEM, "attention: out of memory for scratch");
            goto fail;
        }
        free(cpu->attn_scratch);
        cpu->attn_scratch = s;
        cpu->attn_scratch_floats = j.scratch_floats * (size_t)nth;
    }
    atomic_init(&j.next, nth);
    hy_pool_run_n(cpu->pool, nth, hy_attn_worker, &j);
    free(unit_start);
    free(gseqs);
    return;
fail:
    free(unit_start);
    free(gseqs);
    memset(out, 0, (size_t)b->n_tokens * p->n_head * p->head_dim_v * sizeof(float));
}
