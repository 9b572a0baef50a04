/*
 * matmul.c - y[t][o] = sum_i W[o][i] x[t][i] over quantized (or F32/F16/
 * BF16) weights: the hot loop of the CPU backend.  Each activation row is
 * converted once into the weight type's vec_dot_type, then the output is
 * cut into tiles of (weight rows x token rows) that threads claim from an
 * atomic counter.  A tile's weight rows stay in L1/L2 while they meet every
 * token of the tile (prefill reuses weights from cache); with one token the
 * tiles are plain row ranges, each thread streams its own contiguous run of
 * them once and then helps with the others' (decode runs near memory
 * bandwidth).  Float weights (F32/F16/BF16) on an AVX-512 CPU take the
 * packed GEMM of gemm_avx512.c instead, at every number of tokens: threads
 * claim blocks of output rows, each computed for every token.
 *
 * Every path gives a token's output row the same bits whatever the batch:
 * the tile kernels' per-output arithmetic does not depend on the tile's
 * shape (quant.h, qmm.h), tiles never split k, and the GEMM is one FMA
 * chain per output (tests/unit/test_invariance).
 */
#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/gemm_avx512.h"
#include "backend/cpu/quant_impl.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Target bytes of weight rows in one tile: about half of a 48 KB L1d, so
 * the activation rows streaming past do not evict them. */
#define HY_MM_W_TILE_BYTES (24 * 1024)
/* One token streams each weight once, so no cache budget binds its tiles;
 * larger ones amortise what a tile does once for its token (the AVX-512
 * one-token tiles' byte planes, qmm_avx2.c). */
#define HY_MM_W_TILE_BYTES_ONE (256 * 1024)
/* Token rows per tile at most: the 16-row tile kernels keep this many
 * tokens' sums (qmm_avx2.c HY_Q2_CT, quant_avx512.c HY_A5K_CT), so each
 * unpacked panel of weights meets them all. */
#define HY_MM_X_TILE_ROWS 256
/* Weight rows per tile are a multiple of this: the AVX2/AVX-512 kernels
 * take 16 rows at a time (8 for one token), repeating rows of a ragged
 * last group. */
#define HY_MM_ROWS 16
/* Tiles per thread to aim for, so uneven threads still finish together. */
#define HY_MM_TILES_PER_THREAD 4

/* Threads that get their own runs of decode tiles (more share one counter). */
#define HY_MM_MAX_RUNS 64

/* Row blocks per thread to aim for in the GEMM (a late thread's share can
 * be taken over by the other). */
#define HY_MM_GEMM_UNITS_PER_THREAD 4
/* Tokens per GEMM block (a multiple of HY_GEMM_A5_NR): a block's outputs
 * for one row block (256 rows x 516 tokens, 528 KB) stay in L2 next to the
 * weight panel between its k blocks; longer batches are cut into blocks,
 * each repacking its weights (~1% of its time). */
#define HY_MM_GEMM_NC (43 * HY_GEMM_A5_NR)

/* One thread's run of consecutive tiles, claimed front to back; on its own
 * cache line so that claims of different threads do not contend. */
typedef struct {
    _Alignas(64) _Atomic int64_t next;
    int64_t end;
} hy_mm_run_t;

typedef struct {
    const hy_weight_t *w;
    const hy_quant_traits_t *tr;
    hy_quant_tile_fn_t tile;
    const float *x;       /* [n_tok][ne0] */
    float *y;             /* [n_tok][n_out] */
    const uint8_t *act;   /* [n_tok][act_row] converted activations */
    size_t act_row;
    int64_t ne0, n_out, n_tok;
    int64_t br, bt;       /* tile: weight rows x token rows */
    int64_t n_rb, n_tb;   /* tiles along each axis */
    _Atomic int64_t next; /* next tile to claim */
    hy_mm_run_t *runs;    /* decode: [nth] contiguous runs, or NULL */
    uint8_t *raw;         /* HY_WLAYOUT_ROWS16 for a tile of the file's rows:
                           * [nth][br] rows gathered */
} hy_mm_job_t;

/* The GEMM's job: activations packed once, then blocks of mc output rows
 * claimed from one counter. */
typedef struct {
    const hy_weight_t *w;
    const float *x;      /* [n_tok][k] */
    float *y;            /* [n_tok][n_out] */
    float *xp;           /* packed activations */
    float *wp;           /* [nth][wp_floats] weight panels */
    size_t wp_floats;
    int64_t k, n_out, n_tok, n_groups;
    int64_t mc, n_rb;    /* rows per row block, row blocks */
    int64_t n_tb;        /* token blocks of HY_MM_GEMM_NC */
    int64_t n_units;     /* n_rb * n_tb, row blocks varying fastest */
    _Atomic int64_t next;
} hy_mm_gemm_job_t;

int hy_cpu_weight_check(const hy_weight_t *w, char *err)
{
    const hy_quant_traits_t *tr;
    const char *name = w->name ? w->name : "?";
    size_t rb;

    if ((unsigned)w->type >= HY_DTYPE_COUNT || !(tr = hy_quant_traits(w->type)))
        return hy_err(err, HY_EUNSUPPORTED, "weight %s: type %u has no CPU kernels", name,
                      (unsigned)w->type);
    if (w->ne[0] <= 0 || w->ne[1] <= 0 || w->ne[0] > INT32_MAX || w->ne[1] > INT32_MAX)
        return hy_err(err, HY_EINVAL, "weight %s: bad shape %lld x %lld", name,
                      (long long)w->ne[0], (long long)w->ne[1]);
    rb = hy_dtype_row_bytes(w->type, w->ne[0]);
    if (rb == 0 || hy_dtype_row_bytes(tr->vec_dot_type, w->ne[0]) == 0)
        return hy_err(err, HY_EINVAL, "weight %s: row of %lld is not a multiple of the %s block",
                      name, (long long)w->ne[0], hy_dtype_info(w->type)->name);
    if (w->row_bytes != rb)
        return hy_err(err, HY_EINVAL, "weight %s: row_bytes %zu, type %s needs %zu", name,
                      w->row_bytes, hy_dtype_info(w->type)->name, rb);
    if (!w->data)
        return hy_err(err, HY_EINVAL, "weight %s: no data", name);
    if (w->layout != HY_WLAYOUT_ROWS &&
        (w->layout != HY_WLAYOUT_ROWS16 || w->ne[1] % 16 != 0 ||
         !hy_weight_rows16_type(w->type)))
        return hy_err(err, HY_EINVAL, "weight %s: layout %u does not fit type %s with %lld rows",
                      name, (unsigned)w->layout, hy_dtype_info(w->type)->name,
                      (long long)w->ne[1]);
    return HY_OK;
}

static void hy_mm_convert_worker(void *arg, int ith, int nth)
{
    hy_mm_job_t *j = arg;
    int64_t lo, hi;

    hy_cpu_split(j->n_tok, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++)
        j->tr->from_float(j->x + t * j->ne0, (uint8_t *)j->act + t * j->act_row, j->ne0);
}

static void hy_mm_tile(hy_mm_job_t *j, int64_t u, int ith)
{
    int64_t rb = u / j->n_tb, tb = u % j->n_tb;
    int64_t r0 = rb * j->br, r1 = HY_MIN(j->n_out, r0 + j->br);
    int64_t t0 = tb * j->bt, t1 = HY_MIN(j->n_tok, t0 + j->bt);
    const uint8_t *w = (const uint8_t *)j->w->data + (size_t)r0 * j->w->row_bytes;
    const uint8_t *x = j->act + (size_t)t0 * j->act_row;
    float *y = j->y + t0 * j->n_out + r0;

    if (j->raw != NULL) {
        /* the tile kernel reads rows as the file has them */
        uint8_t *raw = j->raw + (size_t)ith * (size_t)j->br * j->w->row_bytes;
        for (int64_t r = r0; r < r1; r++)
            hy_weight_row(j->w, r, raw + (size_t)(r - r0) * j->w->row_bytes);
        w = raw;
    }

    if (j->tile) {
        j->tile(j->ne0, y, (size_t)j->n_out, w, j->w->row_bytes, (int)(r1 - r0), x,
                j->act_row, (int)(t1 - t0));
        return;
    }
    for (int64_t t = t0; t < t1; t++, x += j->act_row, y += j->n_out) {
        const uint8_t *wr = w;
        for (int64_t r = 0; r < r1 - r0; r++, wr += j->w->row_bytes)
            j->tr->vec_dot(j->ne0, &y[r], wr, x);
    }
}

static void hy_mm_worker(void *arg, int ith, int nth)
{
    hy_mm_job_t *j = arg;
    int64_t n_units = j->n_rb * j->n_tb;

    if (j->runs) {
        /* Decode, a few tokens (HY_TILE_PF_TOKENS): this thread's own
         * rows first, in address order, so its stream is one contiguous
         * range (the kernels' software prefetch runs ahead into the
         * thread's next tile, never into another's); then it helps
         * finish the other runs. */
        for (int k = 0; k < nth; k++) {
            hy_mm_run_t *run = &j->runs[(ith + k) % nth];
            int64_t u;
            while ((u = atomic_fetch_add_explicit(&run->next, 1, memory_order_relaxed)) <
                   run->end)
                hy_mm_tile(j, u, ith);
        }
        return;
    }
    /* The first tile of each thread is fixed, so the counter is touched
     * only once per later tile. */
    for (int64_t u = ith; u < n_units;
         u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed))
        hy_mm_tile(j, u, ith);
}

/* Whether w takes the GEMM: float weights and the AVX-512 kernels selected
 * (tests pin lower levels through hy_quant_set_isa, which must then not
 * reach AVX-512 code).  Not a function of the number of tokens: the GEMM
 * and the tiles round differently, and decode must give the bits a
 * prefilled token gets (up to 12 tokens it skips the packing). */
static bool hy_mm_gemm_wanted(const hy_weight_t *w)
{
    if (w->type != HY_DTYPE_F32 && w->type != HY_DTYPE_F16 && w->type != HY_DTYPE_BF16)
        return false;
#if HY_BUILD_AVX512
    return hy_quant_traits(w->type) == &hy_quant_avx512_kernels[w->type].traits;
#else
    return false;
#endif
}

/* The tile that reads w's ROWS16 rows in place, or NULL: a level or
 * activation mode without one (a test pinning AVX2 after the load) takes
 * the file's rows gathered back (hy_mm_tile). */
static hy_quant_tile_fn_t hy_mm_rows16_tile(const hy_cpu_t *cpu, const hy_weight_t *w)
{
    const hy_quant_tile_fn_t t = hy_quant_vec_dot_tile_rows16(w->type);

    return t && hy_cpu_mm_tile(cpu, w->type) == hy_quant_vec_dot_tile(w->type) ? t : NULL;
}

bool hy_cpu_weight_rows16(hy_backend_t *be, const hy_weight_t *w)
{
    /* The layout serves the GEMM's few-token kernel (gemm_avx512.c), which
     * then keeps 16 rows in the lanes, and the quantized tiles that read it
     * (at AVX-512 and AVX2), which then need no transposes (backend.h).
     * Every matrix of a 3-D stack (MoE experts) keeps whole groups, so its
     * slices are matrices of the same layout. */
    if (w->ne[1] % 16 != 0)
        return false;
    if (hy_dtype_info(w->type)->block > 1)
        return hy_mm_rows16_tile(be->ctx, w) != NULL;
    return hy_mm_gemm_wanted(w) && w->ne[0] >= 16;
}

#if HY_BUILD_AVX512
/* The GEMM's scratch in floats: packed activations of n_tok rows of k,
 * then each of nth threads' weight panel (both multiples of 16 floats, so
 * every part stays 64-byte aligned).  0 on overflow. */
static uint64_t hy_mm_gemm_floats(int64_t k, int32_t n_tok, int nth, size_t *xp, size_t *wp)
{
    uint64_t need;

    *xp = (hy_gemm_a5_xpack_floats(k, n_tok) + 15) & ~(size_t)15;
    *wp = (hy_gemm_a5_wpack_floats(k) + 15) & ~(size_t)15;
    if (hy_mul_overflow_u64(*wp, (uint64_t)nth, &need) || hy_add_overflow_u64(need, *xp, &need))
        return 0;
    return need;
}

static void hy_mm_gemm_pack_worker(void *arg, int ith, int nth)
{
    hy_mm_gemm_job_t *j = arg;
    int64_t lo, hi;

    hy_cpu_split(j->n_groups, ith, nth, &lo, &hi);
    hy_gemm_a5_pack_x(j->x, (size_t)j->k, j->k, j->n_tok, lo, hi, j->xp);
}

static void hy_mm_gemm_worker(void *arg, int ith, int nth)
{
    hy_mm_gemm_job_t *j = arg;
    float *wp = j->wp + (size_t)ith * j->wp_floats;

    (void)nth;
    for (int64_t u = ith; u < j->n_units;
         u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) {
        int64_t rb = u % j->n_rb, t0 = u / j->n_rb * HY_MM_GEMM_NC;
        int64_t r0 = rb * j->mc, r1 = HY_MIN(j->n_out, r0 + j->mc);
        hy_gemm_a5_rows(j->w->type, j->w->layout == HY_WLAYOUT_ROWS16, j->w->data,
                        j->w->row_bytes, j->k, r0, r1,
                        j->xp + (size_t)(t0 / HY_GEMM_A5_NR) * (size_t)j->k * HY_GEMM_A5_NR,
                        HY_MIN((int64_t)HY_MM_GEMM_NC, j->n_tok - t0), j->y + t0 * j->n_out,
                        (size_t)j->n_out, wp);
    }
}

/* y = x W^T through the packed GEMM.  Returns false (nothing done) only if
 * the scratch cannot be had; the caller then reports the failure, since the
 * tile path would round differently from the rows other calls produced. */
static bool hy_mm_gemm(hy_cpu_t *cpu, const hy_weight_t *w, const float *x, float *y,
                       int32_t n_tok)
{
    hy_mm_gemm_job_t j;
    int nth = cpu->n_threads;
    size_t xp_floats;
    uint64_t need;

    memset(&j, 0, sizeof j);
    j.w = w;
    j.x = x;
    j.y = y;
    j.k = w->ne[0];
    j.n_out = w->ne[1];
    j.n_tok = n_tok;
    j.n_groups = (n_tok + HY_GEMM_A5_NR - 1) / HY_GEMM_A5_NR;
    /* Row blocks: as large as the L2 budget allows, but enough of them that
     * every thread gets a few (rounded to the 32-row micro-kernel). */
    int64_t want = nth > 1 ? (int64_t)nth * HY_MM_GEMM_UNITS_PER_THREAD : 1;
    int64_t mc = (j.n_out + want - 1) / want;
    mc = (mc + HY_GEMM_A5_MR - 1) / HY_GEMM_A5_MR * HY_GEMM_A5_MR;
    j.mc = HY_MAX((int64_t)HY_GEMM_A5_MR, HY_MIN((int64_t)HY_GEMM_A5_MC, mc));
    j.n_rb = (j.n_out + j.mc - 1) / j.mc;
    j.n_tb = (n_tok + HY_MM_GEMM_NC - 1) / HY_MM_GEMM_NC;
    j.n_units = j.n_rb * j.n_tb;
    nth = (int)HY_MIN((int64_t)nth, j.n_units);

    need = hy_mm_gemm_floats(j.k, n_tok, nth, &xp_floats, &j.wp_floats);
    if (need == 0 || hy_mul_overflow_u64(need, sizeof(float), &need) || need > SIZE_MAX ||
        hy_cpu_scratch(&cpu->act, &cpu->act_size, (size_t)need) != 0)
        return false;
    j.xp = cpu->act;
    j.wp = j.xp + xp_floats;

    hy_pool_run_n(cpu->pool, (int)HY_MIN((int64_t)cpu->n_threads, (j.n_groups + 1) / 2),
                  hy_mm_gemm_pack_worker, &j);
    atomic_init(&j.next, nth); /* units 0..nth-1 are the threads' first */
    hy_pool_run_n(cpu->pool, nth, hy_mm_gemm_worker, &j);
    return true;
}
#else
static bool hy_mm_gemm(hy_cpu_t *cpu, const hy_weight_t *w, const float *x, float *y,
                       int32_t n_tok)
{
    (void)cpu, (void)w, (void)x, (void)y, (void)n_tok;
    return false;
}
#endif

const hy_quant_traits_t *hy_cpu_mm_traits(const hy_cpu_t *cpu, hy_dtype_t t)
{
    return cpu->act8 ? hy_quant_traits_a8(t) : hy_quant_traits(t);
}

hy_quant_tile_fn_t hy_cpu_mm_tile(const hy_cpu_t *cpu, hy_dtype_t t)
{
    return cpu->act8 ? hy_quant_vec_dot_tile_a8(t) : hy_quant_vec_dot_tile(t);
}

/* Bytes of an activation row converted to the vec_dot partner of traits
 * tr (0: F32 partners read x as it is). */
static size_t hy_mm_act_row(const hy_quant_traits_t *tr, int64_t ne0)
{
    return tr->vec_dot_type == HY_DTYPE_F32 ? 0 : hy_dtype_row_bytes(tr->vec_dot_type, ne0);
}

uint64_t hy_cpu_matmul_act_bytes(const hy_cpu_t *cpu, const hy_weight_t *w, int32_t n_tok)
{
    const hy_quant_traits_t *tr = hy_cpu_mm_traits(cpu, w->type);

    if (hy_mm_gemm_wanted(w)) {
#if HY_BUILD_AVX512
        size_t xp, wp;

        return hy_mm_gemm_floats(w->ne[0], n_tok, cpu->n_threads, &xp, &wp) * sizeof(float);
#endif
    }
    return tr == NULL ? 0 : (uint64_t)hy_mm_act_row(tr, w->ne[0]) * (uint64_t)n_tok;
}

size_t hy_cpu_mm_x_tile_bytes(void)
{
    long l2 = -1;

#ifdef _SC_LEVEL2_CACHE_SIZE
    l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    if (l2 <= 0)
        return 256 * 1024;
    return HY_MAX((size_t)l2 / 8 * 5, (size_t)64 * 1024);
}

typedef void (*hy_from_float_fn_t)(const float *x, void *y, int64_t n);

/* One matmul; *conv says what cpu->act holds (x converted by that
 * from_float, or NULL: nothing known), and is updated: a matrix of the
 * same conversion as the one before it reads the activations it left. */
static void hy_mm_one(hy_cpu_t *cpu, const hy_weight_t *w, const float *x, float *y,
                      int32_t n_tok, hy_from_float_fn_t *conv)
{
    hy_mm_job_t j;
    hy_mm_run_t runs[HY_MM_MAX_RUNS];
    char err[HY_ERR_LEN];
    int nth = cpu->n_threads;

    if (n_tok <= 0)
        return;
    if (hy_cpu_weight_check(w, err) != HY_OK) {
        hy_cpu_fail(cpu, HY_EUNSUPPORTED, "matmul: %s", err);
        memset(y, 0, (size_t)n_tok * (size_t)HY_MAX(w->ne[1], 0) * sizeof(float));
        return;
    }
    if (hy_mm_gemm_wanted(w)) {
        *conv = NULL; /* its packing overwrites cpu->act */
        if (!hy_mm_gemm(cpu, w, x, y, n_tok)) {
            hy_cpu_fail(cpu, HY_ENOMEM, "matmul %s: out of memory for the GEMM's panels "
                        "(%d tokens)", w->name ? w->name : "?", n_tok);
            memset(y, 0, (size_t)n_tok * (size_t)w->ne[1] * sizeof(float));
        }
        return;
    }
    memset(&j, 0, sizeof j);
    j.w = w;
    j.tr = hy_cpu_mm_traits(cpu, w->type);
    j.tile = w->layout == HY_WLAYOUT_ROWS16 ? hy_mm_rows16_tile(cpu, w) : NULL;
    const bool gather = w->layout == HY_WLAYOUT_ROWS16 && j.tile == NULL;
    if (j.tile == NULL)
        j.tile = hy_cpu_mm_tile(cpu, w->type);
    j.x = x;
    j.y = y;
    j.ne0 = w->ne[0];
    j.n_out = w->ne[1];
    j.n_tok = n_tok;

    /* activations in vec_dot_type: F32 partners use x as it is */
    if (hy_mm_act_row(j.tr, j.ne0) == 0) {
        j.act = (const uint8_t *)x;
        j.act_row = (size_t)j.ne0 * sizeof(float);
    } else if (*conv == j.tr->from_float) {
        /* the row bytes follow from the function and ne0, equal here */
        j.act_row = hy_mm_act_row(j.tr, j.ne0);
        j.act = cpu->act;
    } else {
        *conv = NULL;
        j.act_row = hy_mm_act_row(j.tr, j.ne0);
        if (hy_cpu_scratch(&cpu->act, &cpu->act_size, j.act_row * (size_t)n_tok) != 0) {
            hy_cpu_fail(cpu, HY_ENOMEM, "matmul %s: out of memory for %d activation rows",
                        w->name ? w->name : "?", n_tok);
            memset(y, 0, (size_t)n_tok * (size_t)j.n_out * sizeof(float));
            return;
        }
        j.act = cpu->act;
        /* one row converts in ~1 us: not worth a wake-up */
        hy_pool_run_n(cpu->pool, n_tok >= 4 ? HY_MIN(nth, n_tok / 2) : 1,
                      hy_mm_convert_worker, &j);
        *conv = j.tr->from_float;
    }

    /* Tile shape.  Token rows: as many as fit the L2 budget (one row for
     * decode).  Weight rows: the L1 budget, shrunk when that would leave too
     * few tiles to keep every thread busy. */
    j.bt = HY_MAX((int64_t)1, (int64_t)(cpu->mm_x_tile_bytes / j.act_row));
    j.bt = HY_MIN(j.bt, HY_MM_X_TILE_ROWS);
    /* Float weights: their tile kernels walk k in chunks (a panel of
     * converted weight rows and a few token rows stay in L1), so the L2
     * budget does not bind; 64 token rows are their kernels' pass. */
    if (j.tr->vec_dot_type == HY_DTYPE_F32)
        j.bt = 64;
    if (j.bt >= n_tok)
        j.bt = n_tok;
    else if (j.bt > 4)
        j.bt &= ~(int64_t)3;
    j.n_tb = (n_tok + j.bt - 1) / j.bt;
    /* Weight rows in multiples of HY_MM_ROWS: the kernels take rows in
     * groups of 8 or 16, and a tile's ragged group repeats rows. */
    j.br = HY_MAX((int64_t)HY_MM_ROWS,
                  (int64_t)((n_tok == 1 ? HY_MM_W_TILE_BYTES_ONE : HY_MM_W_TILE_BYTES) /
                            w->row_bytes)) /
           HY_MM_ROWS * HY_MM_ROWS;
    int64_t want = (int64_t)nth * HY_MM_TILES_PER_THREAD;
    if (nth > 1 && ((j.n_out + j.br - 1) / j.br) * j.n_tb < want) {
        int64_t per = (j.n_out * j.n_tb + want - 1) / want;
        j.br = HY_MAX((int64_t)HY_MM_ROWS, (per + HY_MM_ROWS - 1) / HY_MM_ROWS * HY_MM_ROWS);
    }
    j.br = HY_MIN(j.br, j.n_out);
    j.n_rb = (j.n_out + j.br - 1) / j.br;
    nth = (int)HY_MIN((int64_t)nth, j.n_rb * j.n_tb);
    atomic_init(&j.next, nth);  /* tiles 0..nth-1 are the threads' first */
    /* One token or a few in one token tile (batched decode): weights are
     * streamed once, and the tiles are row ranges.  Claimed from one
     * counter, consecutive tiles alternate between the threads, so each
     * thread's stream restarts cold at every tile (the prefetch of its
     * previous tile ran into the neighbour's rows): give each thread a
     * contiguous run instead. */
    if (j.n_tb == 1 && n_tok <= HY_TILE_PF_TOKENS && nth > 1 && nth <= HY_MM_MAX_RUNS) {
        for (int t = 0; t < nth; t++) {
            int64_t lo, hi;
            hy_cpu_split(j.n_rb, t, nth, &lo, &hi);
            atomic_init(&runs[t].next, lo);
            runs[t].end = hi;
        }
        j.runs = runs;
    }
    /* ROWS16 weights at a level without their tile (a test pinning a
     * lower one after the load): rare
     * enough for an allocation per call */
    if (gather && (j.raw = malloc((size_t)nth * (size_t)j.br * w->row_bytes)) == NULL) {
        hy_cpu_fail(cpu, HY_ENOMEM, "matmul %s: out of memory for %lld gathered rows",
                    w->name ? w->name : "?", (long long)j.br);
        memset(y, 0, (size_t)n_tok * (size_t)j.n_out * sizeof(float));
        return;
    }
    hy_pool_run_n(cpu->pool, nth, hy_mm_worker, &j);
    free(j.raw);
}

void hy_cpu_matmul(hy_backend_t *be, const hy_weight_t *w, const float *x, float *y,
                   int32_t n_tok)
{
    hy_from_float_fn_t conv = NULL;

    hy_mm_one(be->ctx, w, x, y, n_tok, &conv);
}

void hy_cpu_matmul_n(hy_backend_t *be, const hy_weight_t *const *w, int32_t n_w, const float *x,
                     float *const *y, int32_t n_tok)
{
    hy_from_float_fn_t conv = NULL;

    for (int32_t i = 0; i < n_w; i++) {
        /* every matrix reads ne0 floats of a row: one x for all */
        if (i > 0 && w[i]->ne[0] != w[0]->ne[0])
            conv = NULL;
        hy_mm_one(be->ctx, w[i], x, y[i], n_tok, &conv);
    }
}
