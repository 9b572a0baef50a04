/*
 * recurrent.c - the CPU backend's recurrent-state slots and the small ops
 * that hybrid architectures share: the causal depthwise conv with its
 * window carried per sequence (Mamba-2, Gated DeltaNet, LFM2 short conv),
 * element-wise activations, products and per-row L2 normalisation.  The
 * big recurrent kernels (gdn, ssd) reach the slots through
 * hy_cpu_state_conv/rec (cpu_impl.h) after hy_cpu_state_check.
 */
#include "backend/cpu/act.h"
#include "backend/cpu/cpu_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Element-wise work (in float-ops) below which one thread does it all. */
#define HY_REC_PAR_MIN 32768
/* Per-layer parts of a slot start on 64-byte boundaries (SIMD loads). */
/* Largest conv kernel: keeps the window walk's stack arrays bounded. */
#define HY_REC_MAX_CONV 64

static int hy_rec_nth(const hy_cpu_t *cpu, size_t work)
{
    if (work < HY_REC_PAR_MIN)
        return 1;
    return (int)HY_MIN((size_t)cpu->n_threads, HY_MAX(work / (HY_REC_PAR_MIN / 2), (size_t)1));
}

/* ---- state slots ----------------------------------------------------------- */

void hy_cpu_state_free(hy_cpu_t *cpu)
{
    free(cpu->st);
    free(cpu->st_conv_off);
    cpu->st = NULL;
    cpu->st_conv_off = cpu->st_rec_off = NULL;
    cpu->st_conv_floats = cpu->st_rec_floats = NULL;
    cpu->st_layers = cpu->st_slots = 0;
    cpu->st_slot_floats = 0;
}

/* Lays every layer's conv window and recurrent state out in one slot, then
 * allocates all slots as one arena: a slot copy (prefix-cache checkpoint)
 * is then a single memcpy. */
int hy_cpu_state_init(hy_backend_t *be, const hy_state_layout_t *lay, char *err)
{
    hy_cpu_t *cpu = be->ctx;
    int64_t *meta = NULL, off = 0;
    float *arena = NULL;
    uint64_t total;
    int rc = HY_OK;

    if ((rc = hy_state_layout_plan(lay, &meta, &off, &total, err)) != HY_OK)
        goto out;
    arena = aligned_alloc(64, (size_t)total);
    if (!arena) {
        rc = hy_err(err, HY_ENOMEM, "state_init: cannot allocate %llu bytes of state (%d slots)",
                    (unsigned long long)total, lay->n_slots);
        goto out;
    }
    memset(arena, 0, (size_t)total);
    hy_cpu_state_free(cpu);
    cpu->st = arena;
    cpu->st_layers = lay->n_layers;
    cpu->st_slots = lay->n_slots;
    cpu->st_slot_floats = off;
    cpu->st_conv_off = meta;
    cpu->st_rec_off = meta + lay->n_layers;
    cpu->st_conv_floats = meta + 2 * lay->n_layers;
    cpu->st_rec_floats = meta + 3 * lay->n_layers;
    arena = NULL;
    meta = NULL;
out:
    free(arena);
    free(meta);
    return rc;
}

static bool hy_rec_slot_ok(hy_cpu_t *cpu, const char *op, int32_t slot)
{
    if (!cpu->st) {
        hy_cpu_fail(cpu, HY_EINVAL, "%s: no recurrent state (state_init not called)", op);
        return false;
    }
    if (slot < 0 || slot >= cpu->st_slots) {
        hy_cpu_fail(cpu, HY_ERANGE, "%s: state slot %d outside 0..%d", op, slot,
                    cpu->st_slots - 1);
        return false;
    }
    return true;
}

void hy_cpu_state_clear(hy_backend_t *be, int32_t slot)
{
    hy_cpu_t *cpu = be->ctx;

    if (!hy_rec_slot_ok(cpu, "state_clear", slot))
        return;
    memset(cpu->st + slot * cpu->st_slot_floats, 0, (size_t)cpu->st_slot_floats * sizeof(float));
}

void hy_cpu_state_copy(hy_backend_t *be, int32_t dst, int32_t src)
{
    hy_cpu_t *cpu = be->ctx;

    if (!hy_rec_slot_ok(cpu, "state_copy", dst) || !hy_rec_slot_ok(cpu, "state_copy", src))
        return;
    if (dst != src)
        memcpy(cpu->st + dst * cpu->st_slot_floats, cpu->st + src * cpu->st_slot_floats,
               (size_t)cpu->st_slot_floats * sizeof(float));
}

bool hy_cpu_state_check(hy_cpu_t *cpu, const char *op, int32_t rec_layer,
                        const hy_batch_t *batch, int64_t conv_need, int64_t rec_need)
{
    if (!cpu->st) {
        hy_cpu_fail(cpu, HY_EINVAL, "%s: no recurrent state (state_init not called)", op);
        return false;
    }
    if (rec_layer < 0 || rec_layer >= cpu->st_layers) {
        hy_cpu_fail(cpu, HY_ERANGE, "%s: recurrent layer %d outside 0..%d", op, rec_layer,
                    cpu->st_layers - 1);
        return false;
    }
    if (conv_need >= 0 && cpu->st_conv_floats[rec_layer] != conv_need) {
        hy_cpu_fail(cpu, HY_EINVAL, "%s: layer %d keeps %lld conv floats per slot, op needs %lld",
                    op, rec_layer, (long long)cpu->st_conv_floats[rec_layer],
                    (long long)conv_need);
        return false;
    }
    if (rec_need >= 0 && cpu->st_rec_floats[rec_layer] != rec_need) {
        hy_cpu_fail(cpu, HY_EINVAL, "%s: layer %d keeps %lld state floats per slot, op needs %lld",
                    op, rec_layer, (long long)cpu->st_rec_floats[rec_layer],
                    (long long)rec_need);
        return false;
    }
    for (int32_t s = 0; s < batch->n_seqs; s++) {
        const hy_batch_seq_t *q = &batch->seqs[s];
        if (!hy_rec_slot_ok(cpu, op, q->state_slot))
            return false;
        if (q->n < 0 || q->first < 0 || q->first + q->n > batch->n_tokens) {
            hy_cpu_fail(cpu, HY_ERANGE, "%s: sequence %d rows %d..+%d outside the batch of %d",
                        op, s, q->first, q->n, batch->n_tokens);
            return false;
        }
    }
    return true;
}

bool hy_cpu_past_check(hy_cpu_t *cpu, const char *op, const hy_batch_t *batch)
{
    for (int32_t s = 0; s < batch->n_seqs; s++)
        if (batch->seqs[s].n_past < 0) {
            hy_cpu_fail(cpu, HY_ERANGE, "%s: sequence %d has n_past %d", op, s,
                        batch->seqs[s].n_past);
            return false;
        }
    return true;
}

/* ---- small weights as floats ----------------------------------------------- */

const float *hy_cpu_weight_floats(hy_cpu_t *cpu, const char *op, const hy_weight_t *w,
                                  int64_t n, float **tmp)
{
    const hy_quant_traits_t *tr;
    int64_t have = w->ne[0] * HY_MAX(w->ne[1], 1) * HY_MAX(w->ne[2], 1) * HY_MAX(w->ne[3], 1);

    *tmp = NULL;
    if (!w->data || have != n) {
        hy_cpu_fail(cpu, HY_EINVAL, "%s: weight %s has %lld elements, want %lld", op,
                    w->name ? w->name : "?", (long long)(w->data ? have : 0), (long long)n);
        return NULL;
    }
    const bool r16 = w->layout == HY_WLAYOUT_ROWS16;
    if (w->type == HY_DTYPE_F32 && !r16)
        return w->data;
    tr = hy_quant_traits(w->type);
    if (!tr || !tr->to_float || hy_dtype_row_bytes(w->type, w->ne[0]) != w->row_bytes) {
        hy_cpu_fail(cpu, HY_EUNSUPPORTED, "%s: weight %s has unsupported type %u", op,
                    w->name ? w->name : "?", (unsigned)w->type);
        return NULL;
    }
    /* ROWS16: each row gathered after the floats, then converted */
    *tmp = malloc((size_t)n * sizeof(float) + (r16 ? w->row_bytes : 0));
    if (!*tmp) {
        hy_cpu_fail(cpu, HY_ENOMEM, "%s: out of memory", op);
        return NULL;
    }
    /* row by row: rows of block types are padded to whole blocks */
    for (int64_t r = 0; r < n / w->ne[0]; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        if (r16) {
            hy_weight_row(w, r, *tmp + n);
            row = (const uint8_t *)(*tmp + n);
        }
        tr->to_float(row, *tmp + r * w->ne[0], w->ne[0]);
    }
    return *tmp;
}

/* ---- conv1d ---------------------------------------------------------------- */

typedef struct {
    hy_cpu_t *cpu;
    int32_t rec_layer;
    const hy_batch_t *b;
    const float *x;
    int64_t x_stride;
    const float *wt;    /* [K][C]: kernel tap i of every channel, contiguous */
    const float *bias;  /* [C] or NULL */
    float *y;           /* [n_tok][C] */
    int32_t C, K;
    bool silu;
} hy_conv_job_t;

/* Threads own channel ranges and walk every sequence's tokens in order, so
 * the window update needs no synchronisation and each inner loop runs over
 * contiguous channels (vectorises). */
static void hy_conv_worker(void *arg, int ith, int nth)
{
    hy_conv_job_t *j = arg;
    int64_t lo, hi, nb = (j->C + 15) / 16;
    int32_t K = j->K, C = j->C;

    hy_cpu_split(nb, ith, nth, &lo, &hi);
    lo *= 16;
    hi = HY_MIN(hi * 16, (int64_t)C);
    if (lo >= hi)
        return;
    for (int32_t s = 0; s < j->b->n_seqs; s++) {
        const hy_batch_seq_t *q = &j->b->seqs[s];
        float *win = hy_cpu_state_conv(j->cpu, q->state_slot, j->rec_layer); /* [K-1][C] */
        const float *xs = j->x + (int64_t)q->first * j->x_stride;

        for (int32_t t = 0; t < q->n; t++) {
            float *yt = j->y + ((int64_t)q->first + t) * C;
            if (j->bias)
                memcpy(yt + lo, j->bias + lo, (size_t)(hi - lo) * sizeof(float));
            else
                memset(yt + lo, 0, (size_t)(hi - lo) * sizeof(float));
            for (int32_t i = 0; i < K; i++) {
                int32_t src_t = t - (K - 1) + i; /* < 0: from the window */
                const float *src = src_t < 0 ? win + (int64_t)(K - 1 + src_t) * C
                                             : xs + (int64_t)src_t * j->x_stride;
                const float *w = j->wt + (int64_t)i * C;
                for (int64_t c = lo; c < hi; c++)
                    yt[c] += w[c] * src[c];
            }
            if (j->silu)
                hy_act(HY_UNARY_SILU, yt + lo, yt + lo, (size_t)(hi - lo));
        }
        /* New window = last K-1 inputs of (old window, this step's rows).
         * Ascending i reads old entries at index >= i only, so in place is
         * safe even when the step is shorter than the window. */
        for (int32_t i = 0; i < K - 1; i++) {
            int32_t src_t = q->n - (K - 1) + i;
            float *dst = win + (int64_t)i * C;
            if (src_t < 0) {
                if (q->n > 0)
                    memmove(dst + lo, win + (int64_t)(K - 1 + src_t) * C + lo,
                            (size_t)(hi - lo) * sizeof(float));
            } else {
                memcpy(dst + lo, xs + (int64_t)src_t * j->x_stride + lo,
                       (size_t)(hi - lo) * sizeof(float));
            }
        }
    }
}

void hy_cpu_conv1d(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch,
                   const float *x, int32_t x_stride, const hy_weight_t *w,
                   const hy_weight_t *bias, float *y, int32_t channels, bool silu)
{
    hy_cpu_t *cpu = be->ctx;
    hy_conv_job_t j;
    float *wtmp = NULL, *btmp = NULL, *wt = NULL;
    const float *wf;
    int32_t K = (int32_t)w->ne[0];

    if (batch->n_tokens <= 0)
        return;
    if (channels <= 0 || x_stride < channels || K < 1 || K > HY_REC_MAX_CONV ||
        w->ne[1] != channels) {
        hy_cpu_fail(cpu, HY_EINVAL, "conv1d: weight %s is %lld x %lld, want (d_conv 1..%d, %d); "
                    "x_stride %d", w->name ? w->name : "?", (long long)w->ne[0],
                    (long long)w->ne[1], HY_REC_MAX_CONV, channels, x_stride);
        goto fail;
    }
    if (!hy_cpu_state_check(cpu, "conv1d", rec_layer, batch, (int64_t)(K - 1) * channels, -1))
        goto fail;
    wf = hy_cpu_weight_floats(cpu, "conv1d", w, (int64_t)K * channels, &wtmp);
    if (!wf)
        goto fail;
    memset(&j, 0, sizeof j);
    if (bias && bias->data) {
        j.bias = hy_cpu_weight_floats(cpu, "conv1d bias", bias, channels, &btmp);
        if (!j.bias)
            goto fail;
    }
    wt = malloc((size_t)K * channels * sizeof(float));
    if (!wt) {
        hy_cpu_fail(cpu, HY_ENOMEM, "conv1d: out of memory");
        goto fail;
    }
    for (int32_t c = 0; c < channels; c++)
        for (int32_t i = 0; i < K; i++)
            wt[(int64_t)i * channels + c] = wf[(int64_t)c * K + i];
    j.cpu = cpu;
    j.rec_layer = rec_layer;
    j.b = batch;
    j.x = x;
    j.x_stride = x_stride;
    j.wt = wt;
    j.y = y;
    j.C = channels;
    j.K = K;
    j.silu = silu;
    hy_pool_run_n(cpu->pool,
                  HY_MIN(hy_rec_nth(cpu, (size_t)batch->n_tokens * channels * (size_t)(K + 2)),
                         (channels + 15) / 16),
                  hy_conv_worker, &j);
    goto out;
fail:
    memset(y, 0, (size_t)batch->n_tokens * (size_t)HY_MAX(channels, 0) * sizeof(float));
out:
    free(wt);
    free(wtmp);
    free(btmp);
}

/* ---- element-wise ---------------------------------------------------------- */

typedef struct {
    hy_unary_t op;
    const float *x;
    float *y;
    size_t n;
} hy_unary_job_t;

static void hy_unary_worker(void *arg, int ith, int nth)
{
    hy_unary_job_t *j = arg;
    int64_t lo, hi;

    hy_cpu_split((int64_t)j->n, ith, nth, &lo, &hi);
    if (hi > lo && hy_act(j->op, j->x + lo, j->y + lo, (size_t)(hi - lo)))
        return; /* sigmoid, SiLU, GELU-tanh */
    switch (j->op) {
    case HY_UNARY_SOFTPLUS:
        /* torch's threshold 20: above it log1p(exp(x)) == x in float */
        for (int64_t i = lo; i < hi; i++)
            j->y[i] = j->x[i] > 20.0f ? j->x[i] : log1pf(expf(j->x[i]));
        break;
    case HY_UNARY_RELU_SQR:
        for (int64_t i = lo; i < hi; i++) {
            float r = j->x[i] > 0.0f ? j->x[i] : 0.0f;
            j->y[i] = r * r;
        }
        break;
    case HY_UNARY_TANH:
        for (int64_t i = lo; i < hi; i++)
            j->y[i] = tanhf(j->x[i]);
        break;
    default: /* hy_act's */
        break;
    }
}

void hy_cpu_unary(hy_backend_t *be, hy_unary_t op, const float *x, float *y, size_t n)
{
    hy_cpu_t *cpu = be->ctx;
    hy_unary_job_t j = {op, x, y, n};

    if (n == 0)
        return;
    if ((unsigned)op > HY_UNARY_LAST) {
        hy_cpu_fail(cpu, HY_EUNSUPPORTED, "unary: op %d not supported", (int)op);
        memset(y, 0, n * sizeof(float));
        return;
    }
    /* exp/log make these ~8x an add per float */
    hy_pool_run_n(cpu->pool, hy_rec_nth(cpu, n * 8), hy_unary_worker, &j);
}

typedef struct {
    float *x;
    const float *y;
    size_t n;
} hy_mul_job_t;

static void hy_mul_worker(void *arg, int ith, int nth)
{
    hy_mul_job_t *j = arg;
    int64_t lo, hi;

    hy_cpu_split((int64_t)j->n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++)
        j->x[i] *= j->y[i];
}

void hy_cpu_mul(hy_backend_t *be, float *x, const float *y, size_t n)
{
    hy_cpu_t *cpu = be->ctx;
    hy_mul_job_t j = {x, y, n};

    if (n == 0)
        return;
    hy_pool_run_n(cpu->pool, hy_rec_nth(cpu, n), hy_mul_worker, &j);
}

typedef struct {
    float *x;
    int32_t n_rows, dim, stride;
    float eps, scale;
} hy_l2_job_t;

static void hy_l2_worker(void *arg, int ith, int nth)
{
    hy_l2_job_t *j = arg;
    int64_t lo, hi;

    hy_cpu_split(j->n_rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        float *x = j->x + r * j->stride;
        float acc[8] = {0};
        double sum = 0;
        int32_t i = 0;
        for (; i + 8 <= j->dim; i += 8)
            for (int k = 0; k < 8; k++)
                acc[k] += x[i + k] * x[i + k];
        for (int k = 0; k < 8; k++)
            sum += acc[k];
        for (; i < j->dim; i++)
            sum += (double)x[i] * x[i];
        float s = (float)(j->scale / HY_MAX(sqrt(sum), (double)j->eps));
        for (i = 0; i < j->dim; i++)
            x[i] *= s;
    }
}

void hy_cpu_l2norm(hy_backend_t *be, float *x, int32_t n_rows, int32_t dim, int32_t stride,
                   float eps, float scale)
{
    hy_cpu_t *cpu = be->ctx;
    hy_l2_job_t j = {x, n_rows, dim, stride, eps, scale};

    if (n_rows <= 0 || dim <= 0)
        return;
    if (stride < dim || !(eps > 0.0f)) {
        hy_cpu_fail(cpu, HY_EINVAL, "l2norm: stride %d < dim %d or eps %g <= 0", stride, dim,
                    eps);
        return;
    }
    hy_pool_run_n(cpu->pool, hy_rec_nth(cpu, (size_t)n_rows * dim * 2), hy_l2_worker, &j);
}
