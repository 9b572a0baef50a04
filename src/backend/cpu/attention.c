/*
 * attention.c - the paged KV store and causal attention over it.  Each
 * full-attention layer owns a pool of pages; a page holds page_tokens
 * positions of every kv head, one head's rows contiguous so a page of keys is
 * one run of memory.  attention() first writes the batch's k/v rows into
 * their sequences' pages, then computes softmax(q k^T * scale) v for every
 * token over positions 0..pos (or the sliding window) with an online softmax
 * in f32.  Work is split into (sequence, kv head, query heads, block of query
 * tokens) units; a unit goes to one of two kernels of attn_flash_impl.h,
 * built for AVX-512, AVX2 and portable C: the flash kernel (queries across
 * the SIMD lanes, each 64-key tile converted once for every query of the
 * unit: prefill) or the decode kernel (keys across the lanes: one token's
 * few heads).  Both reduce over the same absolute 64-position tiles in the
 * same order with the same operations, so a query's output has the same
 * bits whether it is decoded alone, prefilled whole or in chunks, batched
 * with any other sequences, or run on any number of threads.  The keys
 * reduce in splits of HY_ATTN_SPLIT absolute positions folded in order, so
 * a few decoding sequences can share their keys among the threads (each
 * unit a range of splits, then a fold) and still give those bits.
 * With [attention] sparse = block (kv.sparse), a full layer's tokens at
 * positions >= min_tokens take the block-sparse path instead
 * (sparse_attn.c): the same kernels over the blocks their KV head's query
 * group chose, one token at a time, so that too is independent of how the
 * batch was cut.
 */
#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/attn_flash.h"
#include "backend/cpu/quant_ref.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* HY_ATTN_X86: the AVX2 kernels are built; HY_ATTN_AVX512: the AVX-512 ones
 * too (configure's HY_BUILD_*: what the compiler can build). */
#if defined(__x86_64__) && HY_BUILD_AVX2
#define HY_ATTN_X86 1
#if HY_BUILD_AVX512
#define HY_ATTN_AVX512 1
#endif
#endif

/* Queries per unit for the flash kernel: four lane groups of 48, so each
 * K/V tile converted to f32 serves 192 queries (96 left 13% of the time
 * in conversion and page misses at 16K keys; 192 gains ~6%).  Halved while
 * a batch would make fewer than HY_ATTN_FLASH_UNITS units per thread. */
#define HY_ATTN_FLASH_LANES 192
#define HY_ATTN_FLASH_UNITS 4
/* Units of at most this many queries take the decode kernel: a token's
 * heads of one KV group (GQA) would fill few of the flash kernel's lanes. */
#define HY_ATTN_DECODE_MAX_Q 4
/* Units that share a sequence's keys take the decode kernel up to this
 * many queries (a token's heads of one KV group: 8 for Qwen3-Next, 16 for
 * wide GQA), where the flash kernel would leave lanes idle anyway. */
#define HY_ATTN_SHARE_MAX_Q 16
/* Largest head size accepted (the scratch is sized from it). */
#define HY_ATTN_MAX_HEAD HY_ATTN_MAX_HEAD_DIM

/* ---- kernel choice ------------------------------------------------------- */

/* -1: the CPU's best; tests pin lower levels to cover every variant. */
static int hy_attn_isa_pin = -1;

/* The pin, else the CPU's best - but AVX2 where the CPU splits 512-bit
 * operations in two (Zen 4): there the AVX2 kernels, with half the lanes
 * to sum per score, were faster at every shape bench_attn ran (prefill of
 * 512 x 512 at head sizes 64 and 256: 6-7%; one decode token over 16K
 * cold keys: 3-4%). */
hy_isa_t hy_cpu_attn_isa(void)
{
    int pin = __atomic_load_n(&hy_attn_isa_pin, __ATOMIC_RELAXED);

    if (pin >= 0)
        return (hy_isa_t)pin;
#ifdef HY_ATTN_X86
    if (hy_cpu_isa() == HY_ISA_AVX512 && hy_cpu_avx512_split())
        return HY_ISA_AVX2;
#endif
    return hy_cpu_isa();
}

int hy_cpu_attn_set_isa(hy_isa_t isa)
{
    if ((int)isa < 0 || isa > hy_cpu_isa())
        return HY_EUNSUPPORTED;
    __atomic_store_n(&hy_attn_isa_pin, (int)isa, __ATOMIC_RELAXED);
    return HY_OK;
}

/* The split size in use: HY_ATTN_SPLIT; tests set others. */
static int32_t hy_attn_split_pin = HY_ATTN_SPLIT;

int hy_cpu_attn_set_split(int32_t tokens)
{
    if (tokens < 0 || tokens % HY_ATTN_FLASH_TILE != 0)
        return HY_EINVAL;
    __atomic_store_n(&hy_attn_split_pin, tokens, __ATOMIC_RELAXED);
    return HY_OK;
}

typedef void (*hy_attn_kernel_fn)(const hy_attn_flash_t *f, float *scratch);
typedef void (*hy_attn_merge_fn)(const float *part, int32_t n, int32_t hdv, float *out);

/* The flash and decode kernels of the current level, and its merge. */
static void hy_attn_kernels(hy_attn_kernel_fn *flash, hy_attn_kernel_fn *decode,
                            hy_attn_merge_fn *merge)
{
    *flash = hy_attn_flash_generic;
    *decode = hy_attn_decode_generic;
    *merge = hy_attn_merge_generic;
#ifdef HY_ATTN_AVX512
    if (hy_cpu_attn_isa() == HY_ISA_AVX512) {
        *flash = hy_attn_flash_avx512;
        *decode = hy_attn_decode_avx512;
        *merge = hy_attn_merge_avx512;
    }
#endif
#ifdef HY_ATTN_X86
    if (hy_cpu_attn_isa() == HY_ISA_AVX2) {
        *flash = hy_attn_flash_avx2;
        *decode = hy_attn_decode_avx2;
        *merge = hy_attn_merge_avx2;
    }
#endif
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
        hy_cpu_sparse_unmap(cpu->sp_keys, &cpu->kv);
    }
    cpu->k_pages = cpu->v_pages = NULL;
    cpu->sp_keys = NULL;
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
    float **keys = NULL;
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
    keys = vp ? hy_cpu_sparse_map(lay) : NULL;
    if (!kp || !vp || !keys) {
        rc = hy_err(err, HY_ENOMEM, "kv: cannot map %d layers x %llu bytes of KV pages%s",
                    lay->n_layers, (unsigned long long)(kbytes + vbytes),
                    lay->sparse.block_pages > 0 ? " and their sparse-attention keys" : "");
        hy_kv_unmap(kp, lay, kpage);
        hy_kv_unmap(vp, lay, vpage);
        free(swa);
        return rc;
    }
    hy_cpu_kv_free(cpu);
    cpu->kv = *lay;
    cpu->kv_layer_swa = swa;
    cpu->kv.layer_swa = swa;
    cpu->k_pages = kp;
    cpu->v_pages = vp;
    cpu->sp_keys = keys;
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
    const hy_quant_traits_t *tr;   /* KV type's to_float */
    int group;                     /* query heads per kv head */
    int n_hsplit;                  /* units a group of heads is split into */
    int heads_per_unit;
    hy_attn_kernel_fn flash, decode; /* the level's kernels (same bits) */
    hy_attn_merge_fn merge;
    int32_t split;                 /* keys per split of the reduction */
    int32_t qblock;                /* query tokens per unit */
    /* Keys shared among threads (a few decoding sequences): per sequence
     * its first split, its splits, the units its splits are cut into, and
     * where its states go in part; NULL otherwise. */
    int32_t *split_lo, *n_splits, *chunks;
    int64_t *part_off;
    float *part;
    const int64_t *unit_start;     /* [n_seqs + 1] first unit of each sequence */
    int64_t n_units;
    size_t scratch_floats;         /* per thread */
    int sparse;                    /* tokens past kv.sparse.min_tokens go block-sparse */
    float *sp_scratch;             /* per thread sp_floats (sparse_attn.c) */
    size_t sp_floats;
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
#ifdef HY_ATTN_X86
                } else if (cpu->kv.type == HY_DTYPE_F16 && hy_cpu_attn_isa() >= HY_ISA_AVX2) {
                    hy_attn_f16_row_avx2(ks, (uint16_t *)kd, hd);
                    hy_attn_f16_row_avx2(vs, (uint16_t *)vd, hdv);
#endif
                } else {
                    /* sizes were validated by kv_init: cannot fail */
                    hy_quant_quantize_row(cpu->kv.type, ks, kd, hd);
                    hy_quant_quantize_row(cpu->kv.type, vs, vd, hdv);
                }
            }
        }
    }
}

/* One unit: query tokens [t0, t1) of sequence s, query heads [h0, h1), all
 * sharing kv head g (and with shared keys, the chunk-th range of the
 * sequence's splits), described by its page addressing for the kernels. */
static void hy_attn_unit(hy_attn_job_t *j, float *scr, float *sscr, int32_t s, int32_t t0,
                         int32_t t1, int32_t g, int32_t h0, int32_t h1, int32_t chunk)
{
    const hy_batch_seq_t *sq = &j->b->seqs[s];
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
        /* .kv_q8 = */ cpu->kv.type == HY_DTYPE_Q8_0,
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
        /* .split = */ j->split,
        /* .part = */ NULL, 0, 0, 0, 0, 0,
        /* .k_at = */ NULL, /* .v_at = */ NULL,
    };
    int32_t ts = t0;

    if (j->part) {
        /* few queries (the job checked): this chunk's splits */
        int32_t n = j->n_splits[s], c = j->chunks[s];
        int32_t s0 = j->split_lo[s] + (int32_t)((int64_t)chunk * n / c);
        int32_t s1 = j->split_lo[s] + (int32_t)((int64_t)(chunk + 1) * n / c);
        size_t st = ((size_t)p->head_dim_v + 2) * (size_t)n;
        f.part = j->part + j->part_off[s] + ((size_t)(t0 - sq->first) * p->n_head + h0) * st;
        f.part_ts = (size_t)p->n_head * st;
        f.part_hs = st;
        f.part_s0 = j->split_lo[s];
        f.k0 = s0 * j->split;
        f.k1 = s1 * j->split;
        j->decode(&f, scr);
        return;
    }

    /* the tokens past the threshold attend block-sparse, each alone: the
     * rule is a token's position, so chunking and batching change no bit */
    if (j->sparse) {
        while (ts < t1 && j->b->pos[ts] < cpu->kv.sparse.min_tokens)
            ts++;
        if (ts < t1) {
            hy_attn_flash_t sf = f;

            sf.t0 = ts;
            hy_cpu_sparse_tokens(cpu, j->layer, sq, &sf, g, g * j->group, j->group,
                                 h1 - h0 <= HY_ATTN_DECODE_MAX_Q ? j->decode : j->flash, scr,
                                 sscr);
            if (ts == t0)
                return;
            f.t1 = t1 = ts;
        }
    }
    /* a few queries leave most of the flash kernel's lanes idle: the
     * decode kernel puts keys across them instead */
    if ((t1 - t0) * (h1 - h0) <= HY_ATTN_DECODE_MAX_Q)
        j->decode(&f, scr);
    else
        j->flash(&f, scr);
}

static void hy_attn_worker(void *arg, int ith, int nth)
{
    hy_attn_job_t *j = arg;
    const hy_batch_t *b = j->b;
    float *scr = j->cpu->attn_scratch + (size_t)ith * j->scratch_floats;
    float *sscr = j->sp_scratch ? j->sp_scratch + (size_t)ith * j->sp_floats : NULL;
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
        int32_t nc = j->chunks ? j->chunks[lo] : 1;
        int64_t per_block = (int64_t)nkv * j->n_hsplit * nc;
        int32_t n_qb = (sq->n + j->qblock - 1) / j->qblock;
        /* last query block first: it sees the most keys, so it starts early */
        int32_t qb = n_qb - 1 - (int32_t)(r / per_block);
        int32_t g = (int32_t)(r % per_block) / (j->n_hsplit * nc);
        int32_t hs = (int32_t)(r % per_block) % (j->n_hsplit * nc) / nc;
        int32_t chunk = (int32_t)(r % per_block) % nc;
        int32_t h0 = g * j->group + hs * j->heads_per_unit;
        int32_t h1 = HY_MIN(h0 + j->heads_per_unit, (g + 1) * j->group);
        int32_t t0 = sq->first + qb * j->qblock;
        int32_t t1 = HY_MIN(t0 + j->qblock, sq->first + sq->n);
        if (h0 < h1)
            hy_attn_unit(j, scr, sscr, lo, t0, t1, g, h0, h1, chunk);
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
                                  msg) != HY_OK ||
            hy_cpu_sparse_check(cpu, layer, b, s, msg) != HY_OK) {
            hy_cpu_fail(cpu, HY_ERANGE, "%s", msg);
            return -1;
        }
    }
    return 0;
}

/* One thread's scratch for units of nq queries, rounded to cache lines:
 * what a step allocates and what hy_cpu_work_bytes counts. */
static size_t hy_attn_thread_floats(int32_t hd, int32_t hdv, int64_t nq)
{
    return (hy_attn_flash_scratch_floats(hd, hdv, (int32_t)HY_MIN(nq, INT32_MAX)) + 15) &
           ~(size_t)15;
}

/* One thread's sparse scratch for a token at position far, likewise. */
static size_t hy_attn_sparse_floats(const hy_cpu_t *cpu, int32_t far, int32_t group,
                                    bool staged)
{
    return (hy_cpu_sparse_scratch(cpu, far, group, staged) + 15) & ~(size_t)15;
}

/* The sparse path's per-thread scratch, for the batch's farthest token
 * (none when no token reaches min_tokens).  0, or -1 with the error set. */
static int hy_attn_sparse_scratch(hy_cpu_t *cpu, hy_attn_job_t *j)
{
    int32_t far = -1;
    bool staged = false;

    for (int32_t t = 0; t < j->b->n_tokens; t++)
        far = HY_MAX(far, j->b->pos[t]);
    for (int32_t s = 0; s < j->b->n_seqs; s++)
        staged |= j->b->seqs[s].out != NULL;
    if (far < cpu->kv.sparse.min_tokens)
        return 0;
    j->sp_floats = hy_attn_sparse_floats(cpu, far, j->group, staged);
    j->sp_scratch = malloc(j->sp_floats * (size_t)cpu->n_threads * sizeof(float));
    if (!j->sp_scratch) {
        hy_cpu_fail(cpu, HY_ENOMEM, "attention: out of memory for sparse scratch");
        return -1;
    }
    return 0;
}

/* Few decode units on several threads: each sequence's keys are cut into
 * chunks of whole splits, a unit per chunk writes its splits' states, and
 * hy_attn_merge folds them (the bits of one unit sweeping all the keys).
 * Sets j->part and the per-sequence arrays, or leaves them NULL where the
 * units are enough or hold more than HY_ATTN_SHARE_MAX_Q queries.  0, or
 * -1 with the error set. */
static int hy_attn_share_keys(hy_cpu_t *cpu, hy_attn_job_t *j, int64_t n_blocks, int nth)
{
    const hy_batch_t *b = j->b;
    const int32_t nkv = j->p->n_head_kv, S = j->split;
    const size_t st = (size_t)j->p->head_dim_v + 2;
    int64_t want, total = 0;
    bool any = false;

    if (nth < 2 || S <= 0 || j->sparse || j->qblock * j->group > HY_ATTN_SHARE_MAX_Q ||
        n_blocks * nkv >= (int64_t)HY_ATTN_FLASH_UNITS * nth)
        return 0;
    want = ((int64_t)HY_ATTN_FLASH_UNITS * nth + n_blocks * nkv - 1) / (n_blocks * nkv);
    j->split_lo = malloc(sizeof(int32_t) * 3 * (size_t)b->n_seqs);
    j->part_off = malloc(sizeof(int64_t) * ((size_t)b->n_seqs + 1));
    if (!j->split_lo || !j->part_off)
        goto oom;
    j->n_splits = j->split_lo + b->n_seqs;
    j->chunks = j->n_splits + b->n_seqs;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const hy_batch_seq_t *sq = &b->seqs[s];
        int32_t kmin = INT32_MAX, kmax = 0;
        for (int32_t t = sq->first; t < sq->first + sq->n; t++) {
            int32_t p = b->pos[t];
            kmin = HY_MIN(kmin, j->p->window > 0 ? HY_MAX(0, p - j->p->window + 1) : 0);
            kmax = HY_MAX(kmax, p);
        }
        j->split_lo[s] = kmin / S;
        j->n_splits[s] = kmax / S - kmin / S + 1;
        /* a chunk per split's worth of keys at most: a 512-key window
         * across a boundary is two splits of uneven size (12 + 500), shared
         * worse than its heads are */
        j->chunks[s] = (int32_t)HY_MIN((int64_t)(kmax - kmin + 1) / S, want);
        j->chunks[s] = HY_MAX(j->chunks[s], 1);
        any |= j->chunks[s] > 1;
        j->part_off[s] = total;
        total += (int64_t)sq->n * j->p->n_head * j->n_splits[s] * (int64_t)st;
    }
    j->part_off[b->n_seqs] = total;
    if (any && (j->part = malloc(sizeof(float) * (size_t)total)) == NULL)
        goto oom;
    if (!any) {
        free(j->split_lo);
        free(j->part_off);
        j->split_lo = j->n_splits = j->chunks = NULL;
        j->part_off = NULL;
    }
    return 0;
oom:
    hy_cpu_fail(cpu, HY_ENOMEM, "attention: out of memory for split states");
    return -1;
}

/* Every query's split states folded into its output (hy_attn_share_keys). */
static void hy_attn_merge(const hy_attn_job_t *j, float *out)
{
    const hy_batch_t *b = j->b;
    const int32_t nh = j->p->n_head, hdv = j->p->head_dim_v;

    for (int32_t s = 0; s < b->n_seqs; s++) {
        const hy_batch_seq_t *sq = &b->seqs[s];
        size_t st = ((size_t)hdv + 2) * (size_t)j->n_splits[s];
        for (int32_t t = sq->first; t < sq->first + sq->n; t++)
            for (int32_t h = 0; h < nh; h++)
                j->merge(j->part + j->part_off[s] + ((size_t)(t - sq->first) * nh + h) * st,
                         j->n_splits[s], hdv, out + ((size_t)t * nh + h) * hdv);
    }
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

    memset(&j, 0, sizeof j); /* the failure path frees its buffers */
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

    j.cpu = cpu;
    j.layer = kv_layer;
    j.b = b;
    j.q = q;
    j.k = k;
    j.v = v;
    j.out = out;
    j.p = p;
    j.tr = hy_quant_traits(cpu->kv.type);
    j.group = p->n_head / p->n_head_kv;
    hy_attn_kernels(&j.flash, &j.decode, &j.merge);
    j.split = __atomic_load_n(&hy_attn_split_pin, __ATOMIC_RELAXED);
    /* query tokens per unit: many for the flash kernel, halved while the
     * batch would give too few units to share (how the queries are cut
     * into units changes no bit) */
    j.qblock = HY_MAX(1, HY_ATTN_FLASH_LANES / j.group);
    for (;;) {
        int64_t units = 0;
        for (int32_t s = 0; s < b->n_seqs; s++)
            units += (b->seqs[s].n + j.qblock - 1) / j.qblock;
        if (j.qblock == 1 || units * p->n_head_kv >= (int64_t)HY_ATTN_FLASH_UNITS * nth)
            break;
        j.qblock = (j.qblock + 1) / 2;
    }

    /* 1. store this batch's k/v (all of it before anyone reads a page) */
    hy_pool_run_n(cpu->pool,
                  (int)HY_MIN((int64_t)nth, HY_MAX((int64_t)1, (int64_t)b->n_tokens *
                              p->n_head_kv * (p->head_dim + p->head_dim_v) / 16384)),
                  hy_attn_write_worker, &j);
    /* the keys of the pages just filled, before any token chooses */
    j.sparse = b == batch && p->window == 0 && cpu->sp_keys && cpu->sp_keys[kv_layer];
    if (j.sparse) {
        hy_cpu_sparse_keys_batch(cpu, kv_layer, b);
        if (hy_attn_sparse_scratch(cpu, &j) != 0)
            goto fail;
    }

    /* 2. units; split the heads of a group only when there are fewer
     * units than threads (decode of a few sequences).  Every unit converts
     * and transposes its K/V tiles again, which costs about two heads'
     * arithmetic: Gemma 3's one KV group of 4 heads cut into 4 units on 2
     * threads cost each thread 2 conversions + 2 heads, more than one
     * thread doing 1 + 4; cut into 2 units, 1 + 2.  (Which heads share a
     * unit changes no bit: each query has its own m, l and O.) */
    int64_t n_blocks = 0;
    for (int32_t s = 0; s < b->n_seqs; s++)
        n_blocks += (b->seqs[s].n + j.qblock - 1) / j.qblock;
    j.n_hsplit = 1;
    if (hy_attn_share_keys(cpu, &j, n_blocks, nth) != 0)
        goto fail;
    if (!j.part && n_blocks * p->n_head_kv < nth)
        j.n_hsplit = (int)HY_MIN((int64_t)j.group,
                                 (nth + n_blocks * p->n_head_kv - 1) / (n_blocks * p->n_head_kv));
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
                                                      j.qblock) * p->n_head_kv * j.n_hsplit *
                                          (j.chunks ? j.chunks[s] : 1);
    j.unit_start = unit_start;
    j.n_units = unit_start[b->n_seqs];

    /* per-thread scratch for either kernel, rounded to cache lines */
    int64_t nq = (int64_t)j.qblock * j.heads_per_unit;
    j.scratch_floats = hy_attn_thread_floats(p->head_dim, p->head_dim_v, nq);
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
    if (j.part)
        hy_attn_merge(&j, out);
    free(j.part);
    free(j.split_lo);
    free(j.part_off);
    free(j.sp_scratch);
    free(unit_start);
    free(gseqs);
    return;
fail:
    free(j.part);
    free(j.split_lo);
    free(j.part_off);
    free(j.sp_scratch);
    free(unit_start);
    free(gseqs);
    memset(out, 0, (size_t)b->n_tokens * p->n_head * p->head_dim_v * sizeof(float));
}

int hy_cpu_attn_work_bytes(const hy_cpu_t *cpu, const hy_work_shape_t *w, uint64_t *bytes,
                           char *err)
{
    const hy_kv_layout_t *kv = w->kv;
    const int32_t n_head = w->n_head, n_tokens = w->n_tokens, n_ctx = w->n_ctx;
    const bool staged = w->staged;
    hy_cpu_t shape;
    int32_t group, qblock, nth = cpu->n_threads;
    size_t krow, vrow;
    uint64_t kpage, vpage, floats, total;
    int rc;

    *bytes = 0;
    if (kv == NULL || kv->n_layers == 0)
        return HY_OK;
    if ((rc = hy_kv_layout_check(kv, HY_ATTN_MAX_HEAD, &krow, &vrow, &kpage, &vpage, err)) !=
        HY_OK)
        return rc;
    if (n_head < kv->n_head_kv || n_head % kv->n_head_kv != 0)
        return hy_err(err, HY_EINVAL, "work bytes: %d query heads for %d KV heads", n_head,
                      kv->n_head_kv);
    group = n_head / kv->n_head_kv;
    /* the largest unit hy_cpu_attention makes: qblock tokens of a group's
     * heads (it only ever halves qblock or splits the heads).  The kept
     * scratch grows by a new allocation before the old one is freed: both
     * count. */
    qblock = HY_MAX(1, HY_ATTN_FLASH_LANES / group);
    floats = hy_attn_thread_floats(kv->head_dim_k, kv->head_dim_v, (int64_t)qblock * group) *
             (uint64_t)nth;
    total = 2 * hy_host_alloc_bytes(floats * sizeof(float));
    /* the sparse path's, sized from the layout as kv_init would set it */
    if (kv->sparse.block_pages > 0 && n_ctx - 1 >= kv->sparse.min_tokens) {
        shape = *cpu;
        shape.kv = *kv;
        shape.k_row_bytes = krow;
        shape.v_row_bytes = vrow;
        floats = hy_attn_sparse_floats(&shape, n_ctx - 1, group, staged) * (uint64_t)nth;
        total += hy_host_alloc_bytes(floats * sizeof(float));
    }
    /* the split states of a few dense decoding sequences sharing keys
     * among threads (hy_attn_share_keys; never on the sparse path): at
     * most the step's tokens, a split per HY_ATTN_SPLIT keys; with their
     * per-sequence arrays (a step has at most n_tokens sequences) */
    if (nth > 1) {
        int32_t split = __atomic_load_n(&hy_attn_split_pin, __ATOMIC_RELAXED);
        uint64_t splits = split > 0 ? (uint64_t)(n_ctx - 1) / (uint64_t)split + 1 : 1;

        floats = (uint64_t)n_tokens * (uint64_t)n_head * splits * ((uint64_t)kv->head_dim_v + 2);
        total += hy_host_alloc_bytes(floats * sizeof(float)) +
                 hy_host_alloc_bytes(sizeof(int32_t) * 3 * (uint64_t)n_tokens) +
                 hy_host_alloc_bytes(sizeof(int64_t) * ((uint64_t)n_tokens + 1));
    }
    /* unit_start, and a sliding layer's batch copy */
    total += hy_host_alloc_bytes(sizeof(int64_t) * ((uint64_t)n_tokens + 1)) +
             hy_host_alloc_bytes(sizeof(hy_batch_seq_t) * (uint64_t)n_tokens);
    *bytes = total;
    return HY_OK;
}
