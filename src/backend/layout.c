/*
 * layout.c - the sizes, checks and routing rule of layout.h.  Both backends'
 * kv_init and state_init size their allocations with these same functions,
 * and the planner (src/kv/plan.c) asks them through hy_backend_i.mem_sizes,
 * so a plan quotes the allocator's numbers on either backend.
 */
#include "backend/layout.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int hy_kv_layout_sizes(const hy_kv_layout_t *lay, size_t *krow, size_t *vrow, uint64_t *kpage,
                       uint64_t *vpage, char *err)
{
    *krow = hy_dtype_row_bytes(lay->type, lay->head_dim_k);
    *vrow = hy_dtype_row_bytes(lay->type, lay->head_dim_v);
    if (*krow == 0 || *vrow == 0)
        return hy_err(err, HY_EINVAL, "kv: q8_0 cache needs head sizes that are multiples of "
                      "32 (k %d, v %d)", lay->head_dim_k, lay->head_dim_v);
    if (hy_mul_overflow_u64(*krow, (uint64_t)lay->page_tokens * lay->n_head_kv, kpage) ||
        hy_mul_overflow_u64(*vrow, (uint64_t)lay->page_tokens * lay->n_head_kv, vpage))
        return hy_err(err, HY_ERANGE, "kv: pages of %d tokens overflow", lay->page_tokens);
    return HY_OK;
}

uint64_t hy_kv_layout_out_run(const hy_kv_layout_t *lay)
{
    size_t krow, vrow;
    uint64_t kpage, vpage, a, b;
    char err[HY_ERR_LEN];

    if (hy_kv_layout_sizes(lay, &krow, &vrow, &kpage, &vpage, err) != HY_OK)
        return 0;
    a = (uint64_t)krow * (uint64_t)lay->page_tokens;
    b = (uint64_t)vrow * (uint64_t)lay->page_tokens;
    while (b != 0) { /* gcd: a head's K rows and its V rows may differ in size */
        uint64_t t = a % b;

        a = b;
        b = t;
    }
    return a;
}

int hy_kv_layout_check(const hy_kv_layout_t *lay, int32_t max_head, size_t *krow, size_t *vrow,
                       uint64_t *kpage, uint64_t *vpage, char *err)
{
    if (lay->n_layers < 0 || lay->n_layers > 4096)
        return hy_err(err, HY_ERANGE, "kv: n_layers = %d: must be 0..4096", lay->n_layers);
    if (lay->n_head_kv < 1 || lay->n_head_kv > 4096)
        return hy_err(err, HY_ERANGE, "kv: n_head_kv = %d: must be 1..4096", lay->n_head_kv);
    if (lay->head_dim_k < 1 || lay->head_dim_k > max_head || lay->head_dim_v < 1 ||
        lay->head_dim_v > max_head)
        return hy_err(err, HY_ERANGE, "kv: head_dim_k = %d, head_dim_v = %d: must be 1..%d",
                      lay->head_dim_k, lay->head_dim_v, max_head);
    if (lay->page_tokens < 1 || lay->page_tokens > 4096)
        return hy_err(err, HY_ERANGE, "kv: page_tokens = %d: must be 1..4096", lay->page_tokens);
    if (lay->n_pages < 1)
        return hy_err(err, HY_ERANGE, "kv: n_pages = %d: must be >= 1", lay->n_pages);
    if (lay->n_swa_pages < 0)
        return hy_err(err, HY_ERANGE, "kv: n_swa_pages = %d: must be >= 0", lay->n_swa_pages);
    for (int32_t l = 0; l < lay->n_layers; l++)
        if (hy_kv_layout_group(lay, l) == HY_KV_SWA && lay->n_swa_pages < 1)
            return hy_err(err, HY_ERANGE, "kv: layer %d is in the sliding-window group, which "
                          "has no pages", l);
    if (lay->type != HY_DTYPE_F32 && lay->type != HY_DTYPE_F16 && lay->type != HY_DTYPE_Q8_0)
        return hy_err(err, HY_EUNSUPPORTED, "kv: element type %u: use f32, f16 or q8_0",
                      (unsigned)lay->type);
    if (lay->sparse.block_pages < 0 || lay->sparse.block_pages > 65536 ||
        lay->sparse.topk < 0 || lay->sparse.sink_blocks < 0 || lay->sparse.local_blocks < 0 ||
        lay->sparse.min_tokens < 0)
        return hy_err(err, HY_ERANGE, "kv: sparse attention: block of %d pages, top-%d, %d sink "
                      "and %d local blocks from position %d: each must be >= 0",
                      lay->sparse.block_pages, lay->sparse.topk, lay->sparse.sink_blocks,
                      lay->sparse.local_blocks, lay->sparse.min_tokens);
    if (!(lay->sparse.topp >= 0 && lay->sparse.topp <= 1) ||
        (lay->sparse.topp > 0 && lay->sparse.max_blocks < lay->sparse.topk))
        return hy_err(err, HY_ERANGE, "kv: sparse attention: top-p %g up to %d blocks: must be "
                      "0..1, and with it at least top-%d", (double)lay->sparse.topp,
                      lay->sparse.max_blocks, lay->sparse.topk);
    return hy_kv_layout_sizes(lay, krow, vrow, kpage, vpage, err);
}

int32_t hy_kv_layout_group(const hy_kv_layout_t *lay, int32_t l)
{
    return lay->layer_swa != NULL && l >= 0 && l < lay->n_layers && lay->layer_swa[l]
               ? HY_KV_SWA
               : HY_KV_FULL;
}

int32_t hy_kv_layout_group_pages(const hy_kv_layout_t *lay, int32_t group)
{
    return group == HY_KV_SWA ? lay->n_swa_pages : lay->n_pages;
}

uint64_t hy_kv_sparse_key_bytes(const hy_kv_layout_t *lay)
{
    return lay->sparse.block_pages > 0
               ? (uint64_t)lay->n_head_kv * (uint64_t)lay->head_dim_k * sizeof(float)
               : 0;
}

uint64_t hy_kv_layout_bytes(const hy_kv_layout_t *lay, uint64_t kpage, uint64_t vpage)
{
    uint64_t total = 0, keys = hy_kv_sparse_key_bytes(lay);

    for (int32_t l = 0; l < lay->n_layers; l++) {
        int32_t g = hy_kv_layout_group(lay, l);

        total += (kpage + vpage + (g == HY_KV_FULL ? keys : 0)) *
                 (uint64_t)hy_kv_layout_group_pages(lay, g);
    }
    return total;
}

const hy_batch_t *hy_kv_group_batch(const hy_batch_t *b, int32_t group, hy_batch_t *copy,
                                    hy_batch_seq_t *seqs)
{
    if (group != HY_KV_SWA)
        return b;
    *copy = *b;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        seqs[s] = b->seqs[s];
        seqs[s].pages = b->seqs[s].swa_pages;
        seqs[s].n_pages = b->seqs[s].n_swa_pages;
        seqs[s].n_checked = 0; /* the count is the full group's */
    }
    copy->seqs = seqs;
    return copy;
}

int hy_kv_check_seq_pages(const hy_batch_t *b, int32_t s, int32_t page_tokens, int32_t window,
                          int32_t n_pool, char *err)
{
    const hy_batch_seq_t *sq = &b->seqs[s];
    int32_t max_pos = -1, min_pos = INT32_MAX, lo, bad;

    for (int32_t t = sq->first; t < sq->first + sq->n; t++) {
        max_pos = HY_MAX(max_pos, b->pos[t]);
        min_pos = HY_MIN(min_pos, b->pos[t]);
    }
    if (max_pos / page_tokens >= sq->n_pages || !sq->pages)
        return hy_err(err, HY_ERANGE, "attention: sequence %d reaches position %d but has %d "
                      "pages of %d tokens", s, max_pos, sq->n_pages, page_tokens);
    /* blocks older than every token's window may be back in the pool */
    lo = window > 0 ? HY_MAX(0, min_pos - window + 1) / page_tokens : 0;
    lo = HY_MAX(lo, HY_MIN(sq->n_checked, max_pos / page_tokens + 1));
    bad = hy_ids_first_outside(sq->pages + lo, max_pos / page_tokens + 1 - lo, n_pool);
    if (bad >= 0)
        return hy_err(err, HY_ERANGE, "attention: sequence %d page %d is id %d, pool has "
                      "0..%d", s, lo + bad, sq->pages[lo + bad], n_pool - 1);
    return HY_OK;
}

int hy_state_layout_floats(const hy_state_layout_t *lay, int64_t *conv_off, int64_t *rec_off,
                           int64_t *slot_floats, char *err)
{
    int64_t off = 0;

    for (int32_t l = 0; l < lay->n_layers; l++) {
        int64_t c = lay->conv_floats[l], r = lay->rec_floats[l];

        if (c < 0 || r < 0 || c > (INT64_C(1) << 40) || r > (INT64_C(1) << 40))
            return hy_err(err, HY_EINVAL, "state_init: layer %d: bad sizes conv %lld, rec %lld",
                          l, (long long)c, (long long)r);
        /* each region starts on a 64-byte boundary for aligned vector loads */
        if (conv_off)
            conv_off[l] = off;
        off += (c + HY_REC_ALIGN - 1) / HY_REC_ALIGN * HY_REC_ALIGN;
        if (rec_off)
            rec_off[l] = off;
        off += (r + HY_REC_ALIGN - 1) / HY_REC_ALIGN * HY_REC_ALIGN;
    }
    if (off == 0)
        off = HY_REC_ALIGN;
    *slot_floats = off;
    return HY_OK;
}

int hy_state_layout_plan(const hy_state_layout_t *lay, int64_t **meta, int64_t *slot_floats,
                         uint64_t *total_bytes, char *err)
{
    int64_t *m, off = 0;
    uint64_t total;
    int rc;

    *meta = NULL;
    if (!lay || lay->n_layers <= 0 || lay->n_slots <= 0 || !lay->conv_floats || !lay->rec_floats)
        return hy_err(err, HY_EINVAL, "state_init: need n_layers > 0, n_slots > 0 and both size "
                      "arrays (got %d layers, %d slots)", lay ? lay->n_layers : 0,
                      lay ? lay->n_slots : 0);
    m = calloc((size_t)lay->n_layers * 4, sizeof *m);
    if (!m)
        return hy_err(err, HY_ENOMEM, "state_init: out of memory");
    /* same layout the planner quotes (hy_layout_mem_sizes) */
    if ((rc = hy_state_layout_floats(lay, m, m + lay->n_layers, &off, err)) != HY_OK) {
        free(m);
        return rc;
    }
    for (int32_t l = 0; l < lay->n_layers; l++) {
        m[2 * lay->n_layers + l] = lay->conv_floats[l];
        m[3 * lay->n_layers + l] = lay->rec_floats[l];
    }
    if (hy_mul_overflow_u64((uint64_t)off, (uint64_t)lay->n_slots, &total) ||
        hy_mul_overflow_u64(total, sizeof(float), &total) || total > SIZE_MAX / 2) {
        free(m);
        return hy_err(err, HY_ERANGE, "state_init: %d slots of %lld floats overflow",
                      lay->n_slots, (long long)off);
    }
    *meta = m;
    *slot_floats = off;
    *total_bytes = total;
    return HY_OK;
}

int hy_layout_mem_sizes(hy_backend_t *be, const hy_kv_layout_t *kv, const hy_state_layout_t *st,
                        uint64_t *page_bytes, uint64_t *slot_bytes, char *err)
{
    int rc;

    *page_bytes = 0;
    *slot_bytes = 0;
    if (kv != NULL && kv->n_layers > 0) {
        size_t krow, vrow;
        uint64_t kpage, vpage;

        if ((rc = hy_kv_layout_sizes(kv, &krow, &vrow, &kpage, &vpage, err)) != HY_OK)
            return rc;
        *page_bytes = (kpage + vpage) * (uint64_t)kv->n_layers;
    }
    if (st != NULL && st->n_layers > 0) {
        int64_t floats;

        if ((rc = hy_state_layout_floats(st, NULL, NULL, &floats, err)) != HY_OK)
            return rc;
        *slot_bytes = (uint64_t)floats * sizeof(float);
    }
    return HY_OK;
}

/* ---- op arguments ------------------------------------------------------------ */

int64_t hy_gdn_state_floats(const hy_gdn_params_t *p)
{
    const int64_t H = p->n_v_heads, dk = p->d_k, dv = p->d_v, C = p->chunk;

    return H * dk * dv + (C > 1 ? H * C * (dk + dv + 1) : 0);
}

int64_t hy_ssd_state_floats(const hy_ssd_params_t *p)
{
    const int64_t H = p->n_head, P = p->head_dim, N = p->d_state, Q = p->chunk;

    return H * P * N + (Q > 1 ? H * Q * (N + P + 2) : 0);
}

int hy_gdn_check(const hy_gdn_params_t *p, int32_t qkv_stride, char *err)
{
    if (p->n_k_heads <= 0 || p->n_v_heads <= 0 || p->n_v_heads % p->n_k_heads != 0 ||
        p->d_k <= 0 || p->d_v <= 0 || p->d_k > 4096 || p->d_v > 4096 || p->chunk < 1 ||
        p->chunk > HY_GDN_MAX_CHUNK)
        return hy_err(err, HY_EINVAL,
                      "gdn: bad shape: %d k-heads, %d v-heads (must be a multiple), d_k %d, d_v %d, chunk %d (1..%d)",
                      p->n_k_heads, p->n_v_heads, p->d_k, p->d_v, p->chunk, HY_GDN_MAX_CHUNK);
    if (qkv_stride < p->d_v * p->n_v_heads || qkv_stride < p->d_k * p->n_k_heads)
        return hy_err(err, HY_EINVAL, "gdn: row stride %d is shorter than a row of heads",
                      qkv_stride);
    return HY_OK;
}

int hy_ssd_check(const hy_ssd_params_t *p, int32_t x_stride, int32_t dt_stride,
                 int32_t bc_stride, char *err)
{
    if (p->n_head <= 0 || p->head_dim <= 0 || p->d_state <= 0 || p->n_group <= 0 ||
        p->n_head % p->n_group != 0 || p->head_dim > 4096 || p->d_state > 4096 ||
        p->chunk < 1 || p->chunk > HY_SSD_MAX_CHUNK)
        return hy_err(err, HY_EINVAL,
                      "ssd: bad shape: %d heads of %d, %d groups (must divide the heads), state %d, chunk %d (1..%d)",
                      p->n_head, p->head_dim, p->n_group, p->d_state, p->chunk, HY_SSD_MAX_CHUNK);
    if (x_stride < p->n_head * p->head_dim || dt_stride < p->n_head ||
        bc_stride < p->n_group * p->d_state)
        return hy_err(err, HY_EINVAL, "ssd: row strides x %d / dt %d / bc %d are shorter than a row",
                      x_stride, dt_stride, bc_stride);
    return HY_OK;
}

/* ---- MoE routing ---------------------------------------------------------- */

/* The CUDA kernel (kernels/hy_moe_route.h) is tested against this one. */
void hy_moe_route_one(const hy_moe_t *m, const float *l, const float *bias, float *p,
                      uint8_t *taken, int32_t *sel, float *w)
{
    int32_t E = m->n_expert, K = m->n_expert_used;
    float scale = m->weights_scale != 0.0f ? m->weights_scale : 1.0f;
    double sum = 0;

    if (m->softmax_gating) {
        float mx = l[0];
        double z = 0;

        for (int32_t e = 1; e < E; e++)
            mx = l[e] > mx ? l[e] : mx;
        for (int32_t e = 0; e < E; e++) {
            p[e] = expf(l[e] - mx);
            z += p[e];
        }
        for (int32_t e = 0; e < E; e++)
            p[e] = (float)(p[e] / z);
    } else {
        for (int32_t e = 0; e < E; e++)
            p[e] = 1.0f / (1.0f + expf(-l[e]));
    }
    /* top-k by selection score; ties go to the lower expert id, and a
     * NaN score still yields K distinct experts */
    memset(taken, 0, (size_t)E);
    for (int32_t k = 0; k < K; k++) {
        int32_t best = -1;
        float bs = 0;

        for (int32_t e = 0; e < E; e++) {
            float s = bias ? p[e] + bias[e] : p[e];

            if (!taken[e] && (best < 0 || s > bs)) {
                best = e;
                bs = s;
            }
        }
        taken[best] = 1;
        sel[k] = best;
        w[k] = p[best];
        sum += p[best];
    }
    for (int32_t k = 0; k < K; k++) {
        if (m->norm_topk)
            w[k] = (float)(w[k] / (sum + m->norm_eps));
        w[k] *= scale;
    }
}
