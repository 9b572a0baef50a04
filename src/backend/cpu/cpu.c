/*
 * cpu.c - the CPU backend's method table and its small ops (get_rows,
 * rmsnorm, rope, swiglu, add, scale, gather_rows, add_bias).  matmul and
 * paged attention live in matmul.c and attention.c.  Ops are synchronous;
 * an op that gets input it cannot honour (token id out of range, weight of
 * the wrong shape) records a sticky error that `status` reports, and leaves
 * its output zeroed rather than crashing.
 */
#include "backend/cpu/act.h"
#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/gdn.h"
#include "backend/cpu/lightning.h"
#include "backend/cpu/ssd.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && HY_BUILD_AVX2
#include <immintrin.h>
#endif

/* Element-wise ops below this many floats run on the calling thread alone:
 * waking workers costs more than adding a few thousand floats. */
#define HY_CPU_PAR_MIN 32768
/* and each thread gets at least this many */
#define HY_CPU_PAR_GRAIN 16384

void hy_cpu_fail(hy_cpu_t *cpu, int code, const char *fmt, ...)
{
    va_list ap;

    if (cpu->err_code != HY_OK)
        return;
    cpu->err_code = code;
    va_start(ap, fmt);
    vsnprintf(cpu->err_msg, sizeof cpu->err_msg, fmt, ap);
    va_end(ap);
}

/* What hy_cpu_scratch allocates for need bytes: whole 4 KiB pages, so a
 * buffer grows in steps instead of on every slightly larger request. */
static uint64_t hy_cpu_scratch_round(uint64_t need)
{
    return (need + 4095) / 4096 * 4096;
}

int hy_cpu_scratch(void **buf, size_t *size, size_t need)
{
    void *p;

    if (need <= *size)
        return 0;
    need = (size_t)hy_cpu_scratch_round(need);
    p = aligned_alloc(64, need);
    if (!p)
        return -1;
    free(*buf);
    *buf = p;
    *size = need;
    return 0;
}

static inline hy_cpu_t *hy_cpu(hy_backend_t *be)
{
    return be->ctx;
}

/* Threads worth using for an element-wise op over n floats. */
static int hy_cpu_nth(const hy_cpu_t *cpu, size_t n)
{
    if (n < HY_CPU_PAR_MIN)
        return 1;
    size_t k = n / HY_CPU_PAR_GRAIN;
    return (int)HY_MIN((size_t)cpu->n_threads, HY_MAX(k, (size_t)1));
}

/* ---- method table: memory ---------------------------------------------- */

static float *hy_cpu_alloc(hy_backend_t *be, size_t n_floats)
{
    size_t bytes;

    if (n_floats == 0)
        n_floats = 1;
    if (__builtin_mul_overflow(n_floats, sizeof(float), &bytes) || bytes > SIZE_MAX - 63)
        return NULL;
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

static void hy_cpu_release(hy_backend_t *be, float *p)
{
    free(p);
}

static void hy_cpu_copy(hy_backend_t *be, float *dst, const float *src, size_t n)
{
    if (dst != src)
        memmove(dst, src, n * sizeof(float));
}

static void hy_cpu_sync(hy_backend_t *be)
{
}

static int hy_cpu_weight_init(hy_backend_t *be, hy_weight_t *w, char *err)
{
    return hy_cpu_weight_check(w, err);
}

static int hy_cpu_status(hy_backend_t *be, char *err)
{
    hy_cpu_t *cpu = hy_cpu(be);
    int rc = cpu->err_code;

    if (rc != HY_OK) {
        hy_err(err, rc, "%s", cpu->err_msg);
        cpu->err_code = HY_OK;
        cpu->err_msg[0] = 0;
    }
    return rc;
}

/* ---- get_rows ------------------------------------------------------------ */

typedef struct {
    const hy_weight_t *w;
    const hy_quant_traits_t *tr;
    const int32_t *ids;
    float *y;
    int32_t n;
    uint8_t *raw; /* [nth][row_bytes]: HY_WLAYOUT_ROWS16 rows gathered */
} hy_get_rows_job_t;

static void hy_get_rows_worker(void *arg, int ith, int nth)
{
    hy_get_rows_job_t *j = arg;
    int64_t lo, hi, ne0 = j->w->ne[0];

    hy_cpu_split(j->n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        const uint8_t *row = (const uint8_t *)j->w->data + (size_t)j->ids[i] * j->w->row_bytes;
        float *y = j->y + i * ne0;
        if (j->w->layout == HY_WLAYOUT_ROWS16) {
            /* the row's elements lie 16 apart: gathered first (F32 rows
             * straight into y) */
            if (j->w->type == HY_DTYPE_F32) {
                hy_weight_row(j->w, j->ids[i], y);
                continue;
            }
            hy_weight_row(j->w, j->ids[i], j->raw + (size_t)ith * j->w->row_bytes);
            row = j->raw + (size_t)ith * j->w->row_bytes;
        }
        if (j->w->type == HY_DTYPE_F32)
            memcpy(y, row, (size_t)ne0 * sizeof(float));
        else
            j->tr->to_float(row, y, ne0);
    }
}

static void hy_cpu_get_rows(hy_backend_t *be, const hy_weight_t *w, const int32_t *ids,
                            float *y, int32_t n)
{
    hy_cpu_t *cpu = hy_cpu(be);
    hy_get_rows_job_t j = {w, hy_quant_traits(w->type), ids, y, n, NULL};
    char err[HY_ERR_LEN];

    if (n <= 0)
        return;
    if (hy_cpu_weight_check(w, err) != HY_OK) {
        hy_cpu_fail(cpu, HY_EUNSUPPORTED, "get_rows: %s", err);
        memset(y, 0, (size_t)n * (size_t)w->ne[0] * sizeof(float));
        return;
    }
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= w->ne[1]) {
            hy_cpu_fail(cpu, HY_ERANGE, "get_rows %s: id %d at %d outside 0..%lld",
                        w->name ? w->name : "?", ids[i], i, (long long)w->ne[1] - 1);
            memset(y, 0, (size_t)n * (size_t)w->ne[0] * sizeof(float));
            return;
        }
    }
    const int nth = hy_cpu_nth(cpu, (size_t)n * (size_t)w->ne[0]);
    if (w->layout == HY_WLAYOUT_ROWS16 && w->type != HY_DTYPE_F32 &&
        (j.raw = malloc((size_t)nth * w->row_bytes)) == NULL) {
        hy_cpu_fail(cpu, HY_ENOMEM, "get_rows %s: out of memory", w->name ? w->name : "?");
        memset(y, 0, (size_t)n * (size_t)w->ne[0] * sizeof(float));
        return;
    }
    hy_pool_run_n(cpu->pool, nth, hy_get_rows_worker, &j);
    free(j.raw);
}

/* ---- rmsnorm ------------------------------------------------------------- */

typedef struct {
    const float *x;
    const float *w;  /* [dim] or NULL */
    float *y;
    int32_t n_rows, dim;
    float eps;
} hy_rmsnorm_job_t;

/* The row's scale: eight float partial sums (lane k takes elements 8i + k,
 * a product then a sum: this file is built without FMA) keep the rounding
 * error of a 576..8192-long sum near float epsilon; they and the tail go
 * into a double. */
static float hy_rms_scale(const float acc[8], const float *x, int32_t i, int32_t dim, float eps)
{
    double sum = 0;
    for (int k = 0; k < 8; k++)
        sum += acc[k];
    for (; i < dim; i++)
        sum += (double)x[i] * x[i];
    return (float)(1.0 / sqrt(sum / dim + (double)eps));
}

/* y = x * s (* w) from element i on */
static void hy_rms_apply(const float *x, const float *w, float *y, float s, int32_t i,
                         int32_t dim)
{
    if (w)
        for (; i < dim; i++)
            y[i] = x[i] * s * w[i];
    else
        for (; i < dim; i++)
            y[i] = x[i] * s;
}

static void hy_rms_row(const float *x, const float *w, float *y, int32_t dim, float eps)
{
    float acc[8] = {0};
    int32_t i = 0;

    for (; i + 8 <= dim; i += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += x[i + k] * x[i + k];
    hy_rms_apply(x, w, y, hy_rms_scale(acc, x, i, dim, eps), 0, dim);
}

#if defined(__x86_64__) && HY_BUILD_AVX2
/* The row operations a vector at a time: the portable loops' operations
 * element by element (a product and a sum, never fused; the partial sums
 * are the eight lanes), so the bits are theirs.  GCC left those loops
 * scalar (x, w and y may alias), and rmsnorm was 2% of Gemma 3's pp512. */
__attribute__((target("avx2"))) static void hy_rms_row_avx2(const float *x, const float *w,
                                                             float *y, int32_t dim, float eps)
{
    __m256 a = _mm256_setzero_ps();
    float acc[8];
    int32_t i = 0;

    for (; i + 8 <= dim; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        a = _mm256_add_ps(a, _mm256_mul_ps(v, v));
    }
    _mm256_storeu_ps(acc, a);
    const float s = hy_rms_scale(acc, x, i, dim, eps);
    const __m256 sv = _mm256_set1_ps(s);
    for (i = 0; i + 8 <= dim; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), sv);
        if (w)
            v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(y + i, v);
    }
    hy_rms_apply(x, w, y, s, i, dim);
}

__attribute__((target("avx2"))) static void hy_add_avx2(float *x, const float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        x[i] += y[i];
}

__attribute__((target("avx2"))) static void hy_scale_avx2(float *x, float s, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(s)));
    for (; i < n; i++)
        x[i] *= s;
}
#define HY_ROW_AVX2 (hy_quant_isa() >= HY_ISA_AVX2)
#else
#define HY_ROW_AVX2 0
#endif

static void hy_rmsnorm_worker(void *arg, int ith, int nth)
{
    hy_rmsnorm_job_t *j = arg;
    int64_t lo, hi;
    const bool v = HY_ROW_AVX2;

    hy_cpu_split(j->n_rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *x = j->x + r * j->dim;
        float *y = j->y + r * j->dim;
#if defined(__x86_64__) && HY_BUILD_AVX2
        if (v) {
            hy_rms_row_avx2(x, j->w, y, j->dim, j->eps);
            continue;
        }
#endif
        (void)v;
        hy_rms_row(x, j->w, y, j->dim, j->eps);
    }
}

/* Returns w as floats (the data itself for F32, else a converted copy in
 * *tmp that the caller frees), or NULL after recording an error. */
static const float *hy_cpu_vector_f32(hy_cpu_t *cpu, const char *op, const hy_weight_t *w,
                                      int32_t dim, float **tmp)
{
    const hy_quant_traits_t *tr;

    *tmp = NULL;
    if (w->ne[0] != dim || w->data == NULL) {
        hy_cpu_fail(cpu, HY_EINVAL, "%s: weight %s has %lld elements, want %d", op,
                    w->name ? w->name : "?", (long long)w->ne[0], dim);
        return NULL;
    }
    if (w->type == HY_DTYPE_F32)
        return w->data;
    tr = hy_quant_traits(w->type);
    if (!tr || !tr->to_float || hy_dtype_row_bytes(w->type, dim) == 0) {
        hy_cpu_fail(cpu, HY_EUNSUPPORTED, "%s: weight %s has unsupported type %u", op,
                    w->name ? w->name : "?", (unsigned)w->type);
        return NULL;
    }
    *tmp = malloc((size_t)dim * sizeof(float));
    if (!*tmp) {
        hy_cpu_fail(cpu, HY_ENOMEM, "%s: out of memory", op);
        return NULL;
    }
    tr->to_float(w->data, *tmp, dim);
    return *tmp;
}

static void hy_cpu_rmsnorm(hy_backend_t *be, const float *x, const hy_weight_t *w,
                           float *y, int32_t n_rows, int32_t dim, float eps)
{
    hy_cpu_t *cpu = hy_cpu(be);
    hy_rmsnorm_job_t j = {x, NULL, y, n_rows, dim, eps};
    float *tmp = NULL;

    if (n_rows <= 0 || dim <= 0)
        return;
    if (w) {
        j.w = hy_cpu_vector_f32(cpu, "rmsnorm", w, dim, &tmp);
        if (!j.w) {
            memset(y, 0, (size_t)n_rows * (size_t)dim * sizeof(float));
            return;
        }
    }
    hy_pool_run_n(cpu->pool, hy_cpu_nth(cpu, (size_t)n_rows * (size_t)dim),
                  hy_rmsnorm_worker, &j);
    free(tmp);
}

/* ---- rope ---------------------------------------------------------------- */

typedef struct {
    float *x;
    int32_t n_tok, n_head, head_dim;
    const int32_t *pos;
    const hy_rope_t *r;
    double freq_scale, mscale;   /* mscale includes YaRN's magnitude term */
    double corr_lo, corr_hi;     /* YaRN ramp ends, in pair indices */
    const double *inv_freq;      /* [n_rot/2] base^(-2i/n_rot) / freq_factor_i */
    float *cs, *sn;              /* [n_tok][n_rot/2] the rows (hy_cpu_rope_rows) */
    int fill;                    /* compute them (else they hold these positions') */
} hy_rope_job_t;

/* ggml's rope_yarn_ramp: 1 below `lo` (extrapolate), 0 above `hi`. */
static double hy_rope_ramp(double lo, double hi, int i)
{
    double y = (i - lo) / HY_MAX(0.001, hi - lo);
    return 1.0 - HY_MIN(1.0, HY_MAX(0.0, y));
}

/* ggml_rope_yarn_corr_dim: the dimension whose wavelength spans n_rot turns
 * over the original context. */
static double hy_rope_corr_dim(int n_dims, int n_ctx_orig, double n_rot, double base)
{
    return n_dims * log(n_ctx_orig / (n_rot * 2 * M_PI)) / (2 * log(base));
}

/* One head's rotation from pair i0 on: NEOX pairs (i, i + half), else
 * (2i, 2i + 1). */
static void hy_rope_row(float *x, const float *cs, const float *sn, int half, bool neox, int i0)
{
    if (neox) {
        for (int i = i0; i < half; i++) {
            float a = x[i], b = x[i + half];
            x[i] = a * cs[i] - b * sn[i];
            x[i + half] = a * sn[i] + b * cs[i];
        }
        return;
    }
    for (int i = i0; i < half; i++) {
        float a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * cs[i] - b * sn[i];
        x[2 * i + 1] = a * sn[i] + b * cs[i];
    }
}

#if defined(__x86_64__) && HY_BUILD_AVX2
/* hy_rope_row a vector at a time with its operations (products, then a
 * difference or a sum: x*c - y*s is x*c + y*(-s), exactly, and the sum's
 * order does not change its bits); the pairs past the last vector through
 * hy_rope_row. */
__attribute__((target("avx2"))) static void hy_rope_row_avx2(float *x, const float *cs,
                                                              const float *sn, int half, bool neox)
{
    int i = 0;

    if (neox) {
        for (; i + 8 <= half; i += 8) {
            const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + half);
            const __m256 c = _mm256_loadu_ps(cs + i), sv = _mm256_loadu_ps(sn + i);
            _mm256_storeu_ps(x + i, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, sv)));
            _mm256_storeu_ps(x + i + half,
                             _mm256_add_ps(_mm256_mul_ps(a, sv), _mm256_mul_ps(b, c)));
        }
        hy_rope_row(x, cs, sn, half, true, i);
        return;
    }
    /* pairs (2i, 2i+1), four to a vector: v*c' + swapped(v)*s' with c'
     * each cos twice and s' each sin as (-s, s) */
    const __m256 neg_even = _mm256_setr_ps(-0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f);
    for (; i + 4 <= half; i += 4) {
        const __m128 c4 = _mm_loadu_ps(cs + i), s4 = _mm_loadu_ps(sn + i);
        const __m256 c = _mm256_set_m128(_mm_unpackhi_ps(c4, c4), _mm_unpacklo_ps(c4, c4));
        const __m256 sv = _mm256_xor_ps(
            _mm256_set_m128(_mm_unpackhi_ps(s4, s4), _mm_unpacklo_ps(s4, s4)), neg_even);
        const __m256 v = _mm256_loadu_ps(x + 2 * i);
        const __m256 w = _mm256_permute_ps(v, 0xB1);
        _mm256_storeu_ps(x + 2 * i, _mm256_add_ps(_mm256_mul_ps(v, c), _mm256_mul_ps(w, sv)));
    }
    hy_rope_row(x, cs, sn, half, false, i);
}
#endif

static void hy_rope_worker(void *arg, int ith, int nth)
{
    hy_rope_job_t *j = arg;
    const hy_rope_t *r = j->r;
    int half = r->n_rot / 2;
    int64_t lo, hi;

    hy_cpu_split(j->n_tok, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        float *cs = j->cs + t * half, *sn = j->sn + t * half;

        /* Angles in double: float pos * freq loses ~1e-3 rad at pos 1e4. */
        for (int i = 0; j->fill && i < half; i++) {
            double extrap = j->pos[t] * j->inv_freq[i];
            double theta = j->freq_scale * extrap;
            if (r->ext_factor != 0.0f) {
                double mix = hy_rope_ramp(j->corr_lo, j->corr_hi, i) * r->ext_factor;
                theta = theta * (1 - mix) + extrap * mix;
            }
            cs[i] = (float)(cos(theta) * j->mscale);
            sn[i] = (float)(sin(theta) * j->mscale);
        }
        for (int h = 0; h < j->n_head; h++) {
            float *x = j->x + (t * j->n_head + h) * j->head_dim;
#if defined(__x86_64__) && HY_BUILD_AVX2
            if (HY_ROW_AVX2) {
                hy_rope_row_avx2(x, cs, sn, half, r->mode == HY_ROPE_NEOX);
                continue;
            }
#endif
            hy_rope_row(x, cs, sn, half, r->mode == HY_ROPE_NEOX, 0);
        }
    }
}

/* a: a held setting (its freq_factors a copy); b: the call's */
static bool hy_rope_same(const hy_rope_t *a, const hy_rope_t *b)
{
    return a->mode == b->mode && a->n_rot == b->n_rot && a->freq_base == b->freq_base &&
           a->freq_scale == b->freq_scale && a->ext_factor == b->ext_factor &&
           a->attn_factor == b->attn_factor && a->beta_fast == b->beta_fast &&
           a->beta_slow == b->beta_slow && a->n_ctx_orig == b->n_ctx_orig &&
           (a->freq_factors == NULL) == (b->freq_factors == NULL) &&
           (a->freq_factors == NULL ||
            memcmp(a->freq_factors, b->freq_factors,
                   (size_t)(a->n_rot / 2) * sizeof *a->freq_factors) == 0);
}

/* The cos/sin rows for these positions and this setting: held ones (*fill
 * = 0) when the last call with the setting had the same positions, else
 * the older slot's, to be computed (*fill = 1).  The rows are a function
 * of (setting, position) alone, so a held row is the computed one's bits;
 * the setting is compared by value, freq_factors' floats included.  NULL:
 * out of memory. */
static struct hy_cpu_rope_rows *hy_cpu_rope_rows(hy_cpu_t *cpu, const hy_rope_t *r,
                                                 const int32_t *pos, int32_t n_tok, int *fill)
{
    const size_t nf = (size_t)n_tok * (size_t)(r->n_rot / 2);
    struct hy_cpu_rope_rows *c = NULL;

    for (size_t k = 0; k < HY_ARRAY_LEN(cpu->rope_rows); k++) {
        struct hy_cpu_rope_rows *e = &cpu->rope_rows[k];

        if (e->n_tok == n_tok && hy_rope_same(&e->r, r) &&
            memcmp(e->pos, pos, (size_t)n_tok * sizeof *pos) == 0) {
            e->used = ++cpu->rope_clock;
            *fill = 0;
            return e;
        }
        if (c == NULL || e->used < c->used)
            c = e;
    }
    c->n_tok = 0;
    if (c->cap_tok < (size_t)n_tok) {
        free(c->pos);
        c->cap_tok = HY_MAX((size_t)n_tok, 2 * c->cap_tok);
        if ((c->pos = malloc(c->cap_tok * sizeof *c->pos)) == NULL) {
            c->cap_tok = 0;
            return NULL;
        }
    }
    if (c->cap_f < nf) {
        free(c->cs);
        free(c->sn);
        c->cap_f = HY_MAX(nf, 2 * c->cap_f);
        c->cs = malloc(c->cap_f * sizeof *c->cs);
        c->sn = malloc(c->cap_f * sizeof *c->sn);
        if (c->cs == NULL || c->sn == NULL) {
            c->cap_f = 0;
            return NULL;
        }
    }
    c->r = *r;
    if (r->freq_factors != NULL) {
        memcpy(c->ff, r->freq_factors, (size_t)(r->n_rot / 2) * sizeof *c->ff);
        c->r.freq_factors = c->ff;
    }
    c->n_tok = n_tok;
    memcpy(c->pos, pos, (size_t)n_tok * sizeof *pos);
    c->used = ++cpu->rope_clock;
    *fill = 1;
    return c;
}

static void hy_cpu_rope(hy_backend_t *be, float *x, int32_t n_tok, int32_t n_head,
                        int32_t head_dim, const int32_t *pos, const hy_rope_t *r)
{
    hy_cpu_t *cpu = hy_cpu(be);
    double inv_freq[HY_ROPE_MAX_ROT / 2];
    hy_rope_job_t j = {x, n_tok, n_head, head_dim, pos, r, 1, 1, 0, 0, inv_freq, NULL, NULL, 0};
    struct hy_cpu_rope_rows *rows;

    if (n_tok <= 0 || n_head <= 0)
        return;
    if (r->n_rot <= 0 || r->n_rot % 2 || r->n_rot > head_dim || r->n_rot > HY_ROPE_MAX_ROT) {
        hy_cpu_fail(cpu, HY_EINVAL, "rope: n_rot = %d: must be even, 2..min(head_dim %d, %d)",
                    r->n_rot, head_dim, HY_ROPE_MAX_ROT);
        return;
    }
    if (r->mode != HY_ROPE_NORM && r->mode != HY_ROPE_NEOX) {
        hy_cpu_fail(cpu, HY_EUNSUPPORTED, "rope: mode %d not supported", (int)r->mode);
        return;
    }
    if (!(r->freq_base > 0.0f)) {
        hy_cpu_fail(cpu, HY_EINVAL, "rope: freq_base = %g: must be > 0", r->freq_base);
        return;
    }
    /* 0 means "not set" for these two (a zeroed struct must not zero q/k). */
    j.freq_scale = r->freq_scale > 0.0f ? r->freq_scale : 1.0;
    j.mscale = r->attn_factor > 0.0f ? r->attn_factor : 1.0;
    if (r->ext_factor != 0.0f) {
        if (r->n_ctx_orig <= 0) {
            hy_cpu_fail(cpu, HY_EINVAL, "rope: YaRN needs n_ctx_orig > 0 (got %d)",
                        r->n_ctx_orig);
            return;
        }
        /* ggml_rope_yarn_corr_dims, with its float rounding */
        double start = floor(hy_rope_corr_dim(r->n_rot, r->n_ctx_orig, r->beta_fast, r->freq_base));
        double end = ceil(hy_rope_corr_dim(r->n_rot, r->n_ctx_orig, r->beta_slow, r->freq_base));
        j.corr_lo = HY_MAX(0.0, start);
        j.corr_hi = HY_MIN((double)r->n_rot - 1, end);
        j.mscale *= 1.0 + 0.1 * log(1.0 / j.freq_scale);
    }
    rows = hy_cpu_rope_rows(cpu, r, pos, n_tok, &j.fill);
    if (rows == NULL) {
        hy_cpu_fail(cpu, HY_ENOMEM, "rope: out of memory for the cos/sin rows of %d tokens",
                    n_tok);
        return;
    }
    j.cs = rows->cs;
    j.sn = rows->sn;
    for (int i = 0; j.fill && i < r->n_rot / 2; i++) {
        double ff = r->freq_factors ? r->freq_factors[i] : 1.0;
        inv_freq[i] = pow(r->freq_base, -2.0 * i / r->n_rot) / ff;
    }
    hy_pool_run_n(cpu->pool, hy_cpu_nth(cpu, (size_t)n_tok * n_head * (size_t)r->n_rot * 4),
                  hy_rope_worker, &j);
}

/* ---- element-wise -------------------------------------------------------- */

typedef struct {
    float *x;
    const float *y;
    float s;
    size_t n;
} hy_ew_job_t;

typedef struct {
    void (*fn)(const float *g, const float *u, float *y, size_t n); /* act.h's */
    const float *gate, *up;
    float *y;
    size_t n;
} hy_glu_job_t;

static void hy_glu_worker(void *arg, int ith, int nth)
{
    hy_glu_job_t *j = arg;
    int64_t lo, hi;

    hy_cpu_split((int64_t)j->n, ith, nth, &lo, &hi);
    if (hi > lo)
        j->fn(j->gate + lo, j->up + lo, j->y + lo, (size_t)(hi - lo));
}

static void hy_cpu_glu(hy_backend_t *be, void (*fn)(const float *, const float *, float *, size_t),
                       const float *gate, const float *up, float *y, size_t n)
{
    hy_glu_job_t j = {fn, gate, up, y, n};

    /* the exp makes this several times costlier per float than add: share it sooner */
    hy_pool_run_n(hy_cpu(be)->pool, hy_cpu_nth(hy_cpu(be), n * 8), hy_glu_worker, &j);
}

static void hy_cpu_swiglu(hy_backend_t *be, const float *gate, const float *up, float *y,
                          size_t n)
{
    hy_cpu_glu(be, hy_act_swiglu, gate, up, y, n);
}

/* Gemma's FFN: the GELU and the product in one pass over the gate rows
 * (separately they were two passes over n_ff floats a token, ~2% of a
 * prefill). */
static void hy_cpu_geglu(hy_backend_t *be, const float *gate, const float *up, float *y,
                         size_t n)
{
    hy_cpu_glu(be, hy_act_geglu, gate, up, y, n);
}

static void hy_add_worker(void *arg, int ith, int nth)
{
    hy_ew_job_t *j = arg;
    int64_t lo, hi;

    hy_cpu_split((int64_t)j->n, ith, nth, &lo, &hi);
#if defined(__x86_64__) && HY_BUILD_AVX2
    if (HY_ROW_AVX2) {
        hy_add_avx2(j->x + lo, j->y + lo, hi - lo);
        return;
    }
#endif
    for (int64_t i = lo; i < hi; i++)
        j->x[i] += j->y[i];
}

static void hy_cpu_add(hy_backend_t *be, float *x, const float *y, size_t n)
{
    hy_ew_job_t j = {x, y, 0, n};

    hy_pool_run_n(hy_cpu(be)->pool, hy_cpu_nth(hy_cpu(be), n), hy_add_worker, &j);
}

static void hy_scale_worker(void *arg, int ith, int nth)
{
    hy_ew_job_t *j = arg;
    int64_t lo, hi;

    hy_cpu_split((int64_t)j->n, ith, nth, &lo, &hi);
#if defined(__x86_64__) && HY_BUILD_AVX2
    if (HY_ROW_AVX2) {
        hy_scale_avx2(j->x + lo, j->s, hi - lo);
        return;
    }
#endif
    for (int64_t i = lo; i < hi; i++)
        j->x[i] *= j->s;
}

static void hy_cpu_scale(hy_backend_t *be, float *x, float s, size_t n)
{
    hy_ew_job_t j = {x, NULL, s, n};

    hy_pool_run_n(hy_cpu(be)->pool, hy_cpu_nth(hy_cpu(be), n), hy_scale_worker, &j);
}

static void hy_cpu_gather_rows(hy_backend_t *be, float *dst, const float *src,
                               const int32_t *rows, int32_t n_rows, int32_t n)
{
    /* rows index the caller's own buffers (not request data): a bad one is
     * a bug in the engine, but still must not read wild memory silently */
    for (int32_t i = 0; i < n_rows; i++) {
        if (rows[i] < 0) {
            hy_cpu_fail(hy_cpu(be), HY_ERANGE, "gather_rows: row %d at %d is negative",
                        rows[i], i);
            memset(dst + (size_t)i * n, 0, (size_t)n * sizeof(float));
            continue;
        }
        memmove(dst + (size_t)i * n, src + (size_t)rows[i] * n, (size_t)n * sizeof(float));
    }
}

typedef struct {
    float *x;
    const float *b;
    int32_t n_tok, dim;
} hy_bias_job_t;

static void hy_bias_worker(void *arg, int ith, int nth)
{
    hy_bias_job_t *j = arg;
    int64_t lo, hi;

    hy_cpu_split(j->n_tok, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        float *x = j->x + t * j->dim;
        for (int32_t i = 0; i < j->dim; i++)
            x[i] += j->b[i];
    }
}

static void hy_cpu_add_bias(hy_backend_t *be, float *x, const hy_weight_t *b,
                            int32_t n_tok, int32_t dim)
{
    hy_cpu_t *cpu = hy_cpu(be);
    hy_bias_job_t j = {x, NULL, n_tok, dim};
    float *tmp;

    if (n_tok <= 0 || dim <= 0)
        return;
    j.b = hy_cpu_vector_f32(cpu, "add_bias", b, dim, &tmp);
    if (!j.b)
        return;
    hy_pool_run_n(cpu->pool, hy_cpu_nth(cpu, (size_t)n_tok * (size_t)dim), hy_bias_worker, &j);
    free(tmp);
}

/* ---- construction -------------------------------------------------------- */

static void hy_cpu_free(hy_backend_t *be)
{
    hy_cpu_t *cpu;

    if (!be)
        return;
    cpu = be->ctx;
    if (cpu) {
        hy_pool_free(cpu->pool);
        hy_cpu_kv_free(cpu);
        hy_cpu_state_free(cpu);
        free(cpu->moe_buf);
        free(cpu->act);
        for (size_t k = 0; k < HY_ARRAY_LEN(cpu->rope_rows); k++) {
            free(cpu->rope_rows[k].pos);
            free(cpu->rope_rows[k].cs);
            free(cpu->rope_rows[k].sn);
        }
        free(cpu);
    }
    free(be);
}

/* Bytes the KV pages and state slots hold now (sized by backend/layout.c). */
static void hy_cpu_mem_allocated(hy_backend_t *be, uint64_t *kv_bytes, uint64_t *state_bytes)
{
    hy_cpu_t *cpu = be->ctx;

    *kv_bytes = cpu->kv_ready ? hy_kv_layout_bytes(&cpu->kv, cpu->k_page_bytes, cpu->v_page_bytes)
                              : 0;
    *state_bytes = cpu->st ? (uint64_t)cpu->st_slot_floats * sizeof(float) *
                                 (uint64_t)cpu->st_slots
                           : 0;
}

/* A buffer hy_cpu_scratch keeps for need bytes: whole pages, and the
 * replacement is allocated before the old one is freed, so both count. */
static uint64_t hy_cpu_kept_bytes(uint64_t need)
{
    return need == 0 ? 0 : 2 * hy_host_alloc_bytes(hy_cpu_scratch_round(need));
}

/* What each op allocates at most in a step of shape w.  Kept buffers
 * (matmul's activations, MoE's block, the attention scratch, RoPE rows)
 * at their largest; the ones an op frees before it returns are summed,
 * not maxed: a freed block the next op cannot reuse stays resident. */
static int hy_cpu_work_bytes(hy_backend_t *be, const hy_work_shape_t *w, uint64_t *bytes,
                             char *err)
{
    const hy_cpu_t *cpu = be->ctx;
    const uint64_t T = (uint64_t)HY_MAX(w->n_tokens, 1), nth = (uint64_t)cpu->n_threads;
    uint64_t total = 0, act = 0, moe = 0, gdn = 0, ssd = 0, route = 0, rot;
    int rc;

    if ((rc = hy_cpu_attn_work_bytes(cpu, w, &total, err)) != HY_OK)
        return rc;
    for (int32_t i = 0; i < w->n_mats; i++)
        act = HY_MAX(act, hy_cpu_matmul_act_bytes(cpu, &w->mats[i], (int32_t)T));
    for (int32_t i = 0; i < w->n_moe; i++) {
        moe = HY_MAX(moe, (uint64_t)hy_cpu_moe_scratch_bytes(&w->moe[i], (int32_t)T, w->n_embd));
        /* each routing thread's probabilities and taken flags */
        route = HY_MAX(route, nth * (hy_host_alloc_bytes((uint64_t)w->moe[i].n_expert *
                                                         sizeof(float)) +
                                     hy_host_alloc_bytes((uint64_t)w->moe[i].n_expert)));
    }
    for (int32_t i = 0; i < w->n_gdn; i++)
        gdn = HY_MAX(gdn, hy_host_alloc_bytes(hy_gdn_scratch_floats(w->gdn[i].chunk, w->gdn[i].d_k,
                                                                    w->gdn[i].d_v) *
                                              sizeof(float) * nth));
    for (int32_t i = 0; i < w->n_ssd; i++)
        if (w->ssd[i].chunk > 1)
            ssd = HY_MAX(ssd, hy_host_alloc_bytes(hy_ssd_scratch_floats(w->ssd[i].chunk,
                                                                        w->ssd[i].head_dim,
                                                                        w->ssd[i].d_state) *
                                                  sizeof(float) * nth));
    total += hy_cpu_kept_bytes(act) + hy_cpu_kept_bytes(moe) + gdn + ssd + route;
    /* hy_cpu_rope_rows: each entry's room at most doubles past the step's
     * tokens; positions, then cos and sin rows */
    rot = (uint64_t)(w->n_rot / 2);
    if (rot > 0)
        total += HY_ARRAY_LEN(cpu->rope_rows) *
                 (hy_host_alloc_bytes(2 * T * sizeof(int32_t)) +
                  2 * hy_host_alloc_bytes(2 * T * rot * sizeof(float)));
    /* weights converted to floats for one call: a vector, or conv1d's
     * kernel, its bias and its transposed copy */
    total += 2 * hy_host_alloc_bytes((uint64_t)w->most_vector * sizeof(float)) +
             2 * hy_host_alloc_bytes((uint64_t)w->most_conv * sizeof(float));
    *bytes = total;
    return HY_OK;
}

/* Designated initialisers: the table grows (recurrent ops, MoE) and slots
 * this file does not fill stay NULL instead of shifting. */
static void hy_cpu_kernel_name(hy_backend_t *be, const char *op, const hy_weight_t *w,
                               int32_t head_dim, char *buf, size_t n);

static bool hy_cpu_weights_huge_pages(hy_backend_t *be)
{
    return ((hy_cpu_t *)be->ctx)->huge_weights;
}

static const struct hy_backend_i hy_cpu_methods = {
    .name = "cpu",
    .free = hy_cpu_free,
    .weight_init = hy_cpu_weight_init,
    .weight_rows16 = hy_cpu_weight_rows16,
    .weights_huge_pages = hy_cpu_weights_huge_pages,
    .kv_init = hy_cpu_kv_init,
    .alloc = hy_cpu_alloc,
    .release = hy_cpu_release,
    .upload = hy_cpu_copy,
    .download = hy_cpu_copy,
    .sync = hy_cpu_sync,
    .matmul = hy_cpu_matmul,
    .matmul_n = hy_cpu_matmul_n,
    .get_rows = hy_cpu_get_rows,
    .rmsnorm = hy_cpu_rmsnorm,
    .rope = hy_cpu_rope,
    .attention = hy_cpu_attention,
    .swiglu = hy_cpu_swiglu,
    .geglu = hy_cpu_geglu,
    .add = hy_cpu_add,
    .scale = hy_cpu_scale,
    .gather_rows = hy_cpu_gather_rows,
    .add_bias = hy_cpu_add_bias,
    .state_init = hy_cpu_state_init,
    .state_clear = hy_cpu_state_clear,
    .state_copy = hy_cpu_state_copy,
    .conv1d = hy_cpu_conv1d,
    .unary = hy_cpu_unary,
    .mul = hy_cpu_mul,
    .l2norm = hy_cpu_l2norm,
    .moe = hy_cpu_moe,
    .gdn = hy_cpu_gdn,
    .scale_rows = hy_cpu_scale_rows,
    .ssd = hy_cpu_ssd,
    .lightning = hy_cpu_lightning,
    .group_rmsnorm_gated = hy_cpu_group_rmsnorm_gated,
    .status = hy_cpu_status,
    .mem_sizes = hy_layout_mem_sizes,
    .mem_allocated = hy_cpu_mem_allocated,
    .work_bytes = hy_cpu_work_bytes,
    .kernel_name = hy_cpu_kernel_name,
    .kv_page_read = hy_cpu_kv_page_read,
    .kv_page_write = hy_cpu_kv_page_write,
    .state_read = hy_cpu_state_read,
    .state_write = hy_cpu_state_write,
    .mem_info = hy_cpu_mem_info,
};

/* Names what the dispatchers pick with no test pin: every module takes the
 * CPU's best level (hy_cpu_isa; attention hy_cpu_attn_isa), matmul the
 * type's kernel pair from hy_cpu_mm_traits (a type without one is named
 * as such, not hidden). */
static void hy_cpu_kernel_name(hy_backend_t *be, const char *op, const hy_weight_t *w,
                               int32_t head_dim, char *buf, size_t n)
{
    const char *isa = hy_isa_name(hy_cpu_isa());

    if (strcmp(op, "matmul") == 0 && w != NULL) {
        const hy_quant_traits_t *t = hy_cpu_mm_traits(be->ctx, w->type);
        const hy_dtype_info_t *wi = hy_dtype_info((uint32_t)w->type);
        const hy_dtype_info_t *xi = t ? hy_dtype_info((uint32_t)t->vec_dot_type) : NULL;

        if (t == NULL)
            snprintf(buf, n, "%s:unsupported", wi && wi->name ? wi->name : "?");
        else
            snprintf(buf, n, "%sx%s-%s%s", wi && wi->name ? wi->name : "?",
                     xi && xi->name ? xi->name : "?", isa,
                     hy_cpu_mm_tile(be->ctx, w->type) ? "-tiled" : "");
    } else if (strcmp(op, "attention") == 0) {
        /* attention.c: the flash kernel for units of many queries, the
         * decode kernel (same bits) for a token's few heads, at every
         * level (portable C below AVX2); AVX2 on CPUs that split 512-bit
         * operations (hy_cpu_attn_isa) */
        (void)head_dim;
        snprintf(buf, n, "paged-flash+decode-%s", hy_isa_name(hy_cpu_attn_isa()));
    } else if (strcmp(op, "gdn") == 0) {
        snprintf(buf, n, "chunked-wy+recurrent-%s", isa);
    } else if (strcmp(op, "ssd") == 0) {
        snprintf(buf, n, "chunked-ssd+recurrent-%s", isa);
    } else if (strcmp(op, "lightning") == 0) {
        /* the AVX-512 level runs the AVX2 build (same bits, see lightning.c) */
        snprintf(buf, n, "blocked+recurrent-%s", hy_cpu_isa() >= HY_ISA_AVX2 ? "avx2" : "scalar");
    } else if (strcmp(op, "conv") == 0) {
        snprintf(buf, n, "causal-conv1d-c");
    } else {
        snprintf(buf, n, "unknown-op");
    }
}

int hy_backend_cpu_new(hy_backend_t **out, const hy_backend_opts_t *opts, char *err)
{
    hy_backend_t *be = NULL;
    hy_cpu_t *cpu = NULL;
    int rc;

    *out = NULL;
    be = calloc(1, sizeof *be);
    cpu = calloc(1, sizeof *cpu);
    if (!be || !cpu) {
        free(be);
        free(cpu);
        return hy_err(err, HY_ENOMEM, "cpu backend: out of memory");
    }
    be->i = &hy_cpu_methods;
    be->ctx = cpu;
    if (opts && opts->act_bits != 0 && opts->act_bits != 8 && opts->act_bits != 16) {
        rc = hy_err(err, HY_EINVAL, "cpu backend: activation bits %d: must be 8 or 16",
                    opts->act_bits);
        goto out;
    }
    cpu->act8 = opts && opts->act_bits == 8;
    if (opts && opts->weights_memory != HY_WEIGHTS_HUGE_PAGES &&
        opts->weights_memory != HY_WEIGHTS_MMAP) {
        rc = hy_err(err, HY_EINVAL, "cpu backend: weights memory %d: must be huge pages (%d) "
                    "or mmap (%d)", opts->weights_memory, HY_WEIGHTS_HUGE_PAGES, HY_WEIGHTS_MMAP);
        goto out;
    }
    cpu->huge_weights = !opts || opts->weights_memory == HY_WEIGHTS_HUGE_PAGES;
    rc = hy_pool_new(&cpu->pool, opts ? opts->n_threads : 0, err);
    if (rc != HY_OK)
        goto out;
    cpu->n_threads = hy_pool_size(cpu->pool);
    cpu->mm_x_tile_bytes = hy_cpu_mm_x_tile_bytes();
    *out = be;
    be = NULL;
out:
    if (be)
        hy_cpu_free(be);
    return rc;
}
