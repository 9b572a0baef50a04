/*
 * cuda_ops.c - the CUDA backend's layer-kind ops: paged attention (store
 * the batch's k/v, then a flash kernel for prefilling sequences and a
 * kernel split over the KV length for decode rows), the recurrent ops
 * (causal conv1d, Gated DeltaNet, Mamba-2 SSD) on the device state slots,
 * and the MoE FFN.  The host side of each validates the batch exactly as
 * the CPU backend does (same messages), packs the small per-sequence
 * tables into one upload and launches the kernels/ .cu files.  MoE routes
 * on the device with the CPU backend's rule (kernels/hy_moe_route.h); decode
 * batches then run the chosen experts with no host synchronisation (graph
 * capture works), prefill batches group tokens by expert for cuBLAS.
 */
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/attn_plan.h"
#include "backend/layout.h"
#include "backend/lightning.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- attention ------------------------------------------------------------- */

static bool hy_cuda_attn_check(hy_cuda_t *cu, int32_t layer, const hy_batch_t *b,
                               const hy_attn_params_t *p)
{
    const hy_kv_layout_t *kv = &cu->kv;
    char msg[HY_ERR_LEN];

    if (!cu->kv_ready) {
        hy_cuda_fail(cu, HY_EINVAL, "attention: kv_init was not called");
        return false;
    }
    if (layer < 0 || layer >= kv->n_layers) {
        hy_cuda_fail(cu, HY_ERANGE, "attention: kv layer %d outside 0..%d", layer,
                     kv->n_layers - 1);
        return false;
    }
    if (p->n_head_kv != kv->n_head_kv || p->head_dim != kv->head_dim_k ||
        p->head_dim_v != kv->head_dim_v || p->n_head < 1 || p->n_head % p->n_head_kv) {
        hy_cuda_fail(cu, HY_EINVAL, "attention: heads %d/%d of %d/%d do not match the KV "
                     "layout (%d kv heads of %d/%d)", p->n_head, p->n_head_kv, p->head_dim,
                     p->head_dim_v, kv->n_head_kv, kv->head_dim_k, kv->head_dim_v);
        return false;
    }
    if (p->window < 0 || p->softcap < 0.0f) {
        hy_cuda_fail(cu, HY_EINVAL, "attention: window %d / softcap %g must be >= 0", p->window,
                     p->softcap);
        return false;
    }
    if (b->n_tokens > 65535 || p->n_head > 65535) {
        hy_cuda_fail(cu, HY_ERANGE, "attention: %d tokens x %d heads exceed one launch (65535)",
                     b->n_tokens, p->n_head);
        return false;
    }
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const hy_batch_seq_t *sq = &b->seqs[s];
        if (sq->first < 0 || sq->n < 1 || sq->first > b->n_tokens - sq->n ||
            (s > 0 && sq->first < b->seqs[s - 1].first + b->seqs[s - 1].n)) {
            hy_cuda_fail(cu, HY_EINVAL, "attention: sequence %d rows %d+%d do not fit the "
                         "batch of %d in order", s, sq->first, sq->n, b->n_tokens);
            return false;
        }
        for (int32_t t = sq->first; t < sq->first + sq->n; t++) {
            if (b->pos[t] < 0) {
                hy_cuda_fail(cu, HY_ERANGE, "attention: token %d has position %d", t, b->pos[t]);
                return false;
            }
        }
        if (hy_kv_check_seq_pages(b, s, kv->page_tokens, p->window,
                                  hy_kv_layout_group_pages(kv, hy_kv_layout_group(kv, layer)),
                                  msg) != HY_OK) {
            hy_cuda_fail(cu, HY_ERANGE, "%s", msg);
            return false;
        }
    }
    return true;
}

/* Stores the batch's k/v, then runs the flash kernel over the tiles of the
 * prefilling sequences and the split decode kernel over every other row
 * (attn_plan.c decides which); the two write disjoint rows of out. */
void hy_cuda_attention(hy_backend_t *be, int32_t kv_layer, const hy_batch_t *batch,
                       const float *q, const float *k, const float *v, float *out,
                       const hy_attn_params_t *p)
{
    hy_cuda_t *cu = be->ctx;
    const int32_t pt = cu->kv.page_tokens;
    int32_t *tok_seq = NULL, *page_off = NULL, *pages = NULL, *gen = NULL;
    int32_t n_pages = 0, max_len = 1, n_split = 1, n_tok = batch->n_tokens;
    int32_t tile_rows = 0, n_tiles = 0, n_gen = 0;
    hy_cuk_attn_tile_t *tiles = NULL;
    hy_batch_seq_t *gseqs = NULL;
    hy_batch_t gcopy;
    const hy_batch_t *b = batch;
    hy_cuk_attn_t a;
    void *dev[6];

    if (batch->n_tokens <= 0 || batch->n_seqs <= 0)
        return;
    /* a sliding layer reads its group's pages: the batch with those lists
     * (blocks the window left behind are -1 there; no kernel reads them) */
    if (cu->kv_ready && hy_kv_layout_group(&cu->kv, kv_layer) == HY_KV_SWA) {
        gseqs = malloc(sizeof *gseqs * (size_t)batch->n_seqs);
        if (!gseqs) {
            hy_cuda_fail(cu, HY_ENOMEM, "attention: out of memory");
            goto fail;
        }
        b = hy_kv_group_batch(batch, HY_KV_SWA, &gcopy, gseqs);
    }
    if (!hy_cuda_attn_check(cu, kv_layer, b, p))
        goto fail;
    /* 0 (heads over 256): everything takes the split kernel */
    tile_rows = hy_cuk_flash_rows(p->head_dim, p->head_dim_v);
    n_tiles = hy_cuda_attn_plan(b, p->n_head / p->n_head_kv, p->window, tile_rows,
                                HY_CUDA_FLASH_MIN_TOK, NULL, NULL, NULL);
    tok_seq = malloc(sizeof(int32_t) * (size_t)n_tok);
    gen = malloc(sizeof(int32_t) * (size_t)n_tok);
    page_off = malloc(sizeof(int32_t) * (size_t)b->n_seqs);
    tiles = malloc(sizeof(hy_cuk_attn_tile_t) * (size_t)HY_MAX(n_tiles, 1));
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t max_pos = 0;
        for (int32_t t = b->seqs[s].first; t < b->seqs[s].first + b->seqs[s].n; t++)
            max_pos = HY_MAX(max_pos, b->pos[t]);
        n_pages += max_pos / pt + 1;
    }
    pages = malloc(sizeof(int32_t) * (size_t)n_pages);
    if (!tok_seq || !gen || !page_off || !tiles || !pages) {
        hy_cuda_fail(cu, HY_ENOMEM, "attention: out of memory");
        goto fail;
    }
    hy_cuda_attn_plan(b, p->n_head / p->n_head_kv, p->window, tile_rows, HY_CUDA_FLASH_MIN_TOK,
                      tiles, gen, &n_gen);
    /* tokens outside every sequence (none in a valid batch) read sequence 0 */
    memset(tok_seq, 0, sizeof(int32_t) * (size_t)n_tok);
    n_pages = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const hy_batch_seq_t *sq = &b->seqs[s];
        int32_t max_pos = 0;
        for (int32_t t = sq->first; t < sq->first + sq->n; t++) {
            tok_seq[t] = s;
            max_pos = HY_MAX(max_pos, b->pos[t]);
        }
        page_off[s] = n_pages;
        memcpy(pages + n_pages, sq->pages, sizeof(int32_t) * (size_t)(max_pos / pt + 1));
        n_pages += max_pos / pt + 1;
    }
    /* the parts are sized by the decode kernel's rows only */
    for (int32_t i = 0; i < n_gen; i++) {
        int32_t pos = b->pos[gen[i]], lo = p->window > 0 ? HY_MAX(0, pos - p->window + 1) : 0;
        max_len = HY_MAX(max_len, pos - lo + 1);
    }
    {
        const void *parts[6] = {b->pos, tok_seq, page_off, pages, tiles, gen};
        size_t bytes[6] = {sizeof(int32_t) * (size_t)n_tok, sizeof(int32_t) * (size_t)n_tok,
                           sizeof(int32_t) * (size_t)b->n_seqs, sizeof(int32_t) * (size_t)n_pages,
                           sizeof(hy_cuk_attn_tile_t) * (size_t)n_tiles,
                           sizeof(int32_t) * (size_t)n_gen};
        if (!hy_cuda_meta(cu, "attention", 6, parts, bytes, dev))
            goto fail;
    }
    memset(&a, 0, sizeof a);
    a.k_pool = cu->k_pool + (size_t)cu->kv_layer_page[kv_layer] * cu->k_page_bytes;
    a.v_pool = cu->v_pool + (size_t)cu->kv_layer_page[kv_layer] * cu->v_page_bytes;
    a.k_row_bytes = cu->k_row_bytes;
    a.v_row_bytes = cu->v_row_bytes;
    a.k_page_bytes = cu->k_page_bytes;
    a.v_page_bytes = cu->v_page_bytes;
    a.kv_type = (int32_t)cu->kv.type;
    a.page_tokens = pt;
    a.n_head = p->n_head;
    a.n_head_kv = p->n_head_kv;
    a.head_dim = p->head_dim;
    a.head_dim_v = p->head_dim_v;
    a.window = p->window;
    a.scale = p->scale;
    a.softcap = p->softcap;
    a.pos = dev[0];
    a.tok_seq = dev[1];
    a.page_off = dev[2];
    a.pages = dev[3];
    if (!hy_cuda_ok(cu, "attention kv store", hy_cuk_kv_write(&a, k, v, n_tok, cu->stream)))
        goto fail;
    if (n_tiles > 0 &&
        !hy_cuda_ok(cu, "attention (prefill)",
                    hy_cuk_attention_flash(&a, q, out, dev[4], n_tiles, tile_rows, cu->stream)))
        goto fail;
    if (n_gen > 0) {
        n_split = hy_cuk_parts(max_len);
        if (!hy_cuda_scratch(cu, (void **)&cu->fscr, &cu->fscr_size,
                             sizeof(float) * (size_t)n_gen * p->n_head * n_split *
                                 (2 + p->head_dim_v),
                             "attention"))
            goto fail;
        if (!hy_cuda_ok(cu, "attention", hy_cuk_attention(&a, q, out, dev[5], n_gen, n_split,
                                                          cu->fscr, cu->stream)))
            goto fail;
    }
    goto out;
fail:
    hy_cuda_zero(cu, out, (size_t)b->n_tokens * (size_t)HY_MAX(p->n_head, 0) *
                              (size_t)HY_MAX(p->head_dim_v, 0));
out:
    free(tok_seq);
    free(gen);
    free(page_off);
    free(pages);
    free(tiles);
    free(gseqs);
}

/* ---- recurrent layers ------------------------------------------------------ */

/* The CPU backend's state checks (hy_cpu_state_check), then the per-sequence
 * tables on the device. */
static bool hy_cuda_rec_seqs(hy_cuda_t *cu, const char *op, int32_t rec_layer,
                             const hy_batch_t *b, int64_t conv_need, int64_t rec_need,
                             hy_cuk_seqs_t *sq)
{
    int32_t *tab = NULL;
    bool ok = false;

    if (!cu->st) {
        hy_cuda_fail(cu, HY_EINVAL, "%s: no recurrent state (state_init not called)", op);
        return false;
    }
    if (rec_layer < 0 || rec_layer >= cu->st_layers) {
        hy_cuda_fail(cu, HY_ERANGE, "%s: recurrent layer %d outside 0..%d", op, rec_layer,
                     cu->st_layers - 1);
        return false;
    }
    if (conv_need >= 0 && cu->st_conv_floats[rec_layer] != conv_need) {
        hy_cuda_fail(cu, HY_EINVAL, "%s: layer %d keeps %lld conv floats per slot, op needs %lld",
                     op, rec_layer, (long long)cu->st_conv_floats[rec_layer],
                     (long long)conv_need);
        return false;
    }
    if (rec_need >= 0 && cu->st_rec_floats[rec_layer] != rec_need) {
        hy_cuda_fail(cu, HY_EINVAL, "%s: layer %d keeps %lld state floats per slot, op needs %lld",
                     op, rec_layer, (long long)cu->st_rec_floats[rec_layer], (long long)rec_need);
        return false;
    }
    if (b->n_seqs > 65535) {
        hy_cuda_fail(cu, HY_ERANGE, "%s: %d sequences exceed one launch", op, b->n_seqs);
        return false;
    }
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const hy_batch_seq_t *q = &b->seqs[s];
        if (q->state_slot < 0 || q->state_slot >= cu->st_slots) {
            hy_cuda_fail(cu, HY_ERANGE, "%s: state slot %d outside 0..%d", op, q->state_slot,
                         cu->st_slots - 1);
            return false;
        }
        if (q->n < 0 || q->first < 0 || q->first + q->n > b->n_tokens) {
            hy_cuda_fail(cu, HY_ERANGE, "%s: sequence %d rows %d..+%d outside the batch of %d",
                         op, s, q->first, q->n, b->n_tokens);
            return false;
        }
    }
    tab = malloc(sizeof(int32_t) * 4 * (size_t)HY_MAX(b->n_seqs, 1));
    if (!tab) {
        hy_cuda_fail(cu, HY_ENOMEM, "%s: out of memory", op);
        return false;
    }
    for (int32_t s = 0; s < b->n_seqs; s++) {
        tab[s] = b->seqs[s].first;
        tab[b->n_seqs + s] = b->seqs[s].n;
        tab[2 * b->n_seqs + s] = b->seqs[s].state_slot;
        tab[3 * b->n_seqs + s] = b->seqs[s].n_past;
    }
    {
        const void *parts[1] = {tab};
        size_t bytes = sizeof(int32_t) * 4 * (size_t)b->n_seqs;
        void *dev[1];
        if (!hy_cuda_meta(cu, op, 1, parts, &bytes, dev))
            goto out;
        sq->st = cu->st;
        sq->slot_floats = cu->st_slot_floats;
        sq->conv_off = cu->st_conv_off[rec_layer];
        sq->rec_off = cu->st_rec_off[rec_layer];
        sq->first = dev[0];
        sq->n = (const int32_t *)dev[0] + b->n_seqs;
        sq->slot = (const int32_t *)dev[0] + 2 * b->n_seqs;
        sq->n_past = (const int32_t *)dev[0] + 3 * b->n_seqs;
        sq->n_seqs = b->n_seqs;
        /* the launchers choose chunked / recurrent kernels from these */
        sq->min_n = b->n_seqs > 0 ? INT32_MAX : 0;
        sq->max_n = 0;
        for (int32_t s = 0; s < b->n_seqs; s++) {
            sq->min_n = HY_MIN(sq->min_n, b->seqs[s].n);
            sq->max_n = HY_MAX(sq->max_n, b->seqs[s].n);
        }
    }
    ok = true;
out:
    free(tab);
    return ok;
}

void hy_cuda_conv1d(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch, const float *x,
                    int32_t x_stride, const hy_weight_t *w, const hy_weight_t *bias, float *y,
                    int32_t channels, bool silu)
{
    hy_cuda_t *cu = be->ctx;
    int32_t K = (int32_t)w->ne[0];
    float *wtmp = NULL, *btmp = NULL;
    const float *wf, *bf = NULL;
    hy_cuk_seqs_t sq;

    if (batch->n_tokens <= 0)
        return;
    if (channels <= 0 || x_stride < channels || K < 1 || K > 64 || w->ne[1] != channels) {
        hy_cuda_fail(cu, HY_EINVAL, "conv1d: weight %s is %lld x %lld, want (d_conv 1..%d, %d); "
                     "x_stride %d", w->name ? w->name : "?", (long long)w->ne[0],
                     (long long)w->ne[1], 64, channels, x_stride);
        goto fail;
    }
    if (!hy_cuda_rec_seqs(cu, "conv1d", rec_layer, batch, (int64_t)(K - 1) * channels, -1, &sq))
        goto fail;
    if (!(wf = hy_cuda_weight_floats(cu, "conv1d", w, (int64_t)K * channels, false, &wtmp)))
        goto fail;
    if (bias && bias->data &&
        !(bf = hy_cuda_weight_floats(cu, "conv1d bias", bias, channels, false, &btmp)))
        goto fail;
    if (hy_cuda_ok(cu, "conv1d", hy_cuk_conv1d(&sq, x, x_stride, wf, bf, y, channels, K, silu,
                                               cu->stream)))
        goto out;
fail:
    hy_cuda_zero(cu, y, (size_t)batch->n_tokens * (size_t)HY_MAX(channels, 0));
out:
    if (wtmp)
        cudaFree(wtmp);
    if (btmp)
        cudaFree(btmp);
}

void hy_cuda_gdn(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch, const float *q,
                 const float *k, const float *v, int32_t qkv_stride, const float *g,
                 const float *beta, float *o, const hy_gdn_params_t *p)
{
    hy_cuda_t *cu = be->ctx;
    hy_cuk_seqs_t sq;
    char err[HY_ERR_LEN];
    int rc;

    /* chunk as on the CPU: 1 = exact recurrence; otherwise runs of two rows
     * or more take the chunked form (chunks above 64 rows are cut to 64,
     * which changes rounding only) */
    if ((rc = hy_gdn_check(p, qkv_stride, err)) != HY_OK) {
        hy_cuda_fail(cu, rc, "%s", err);
        goto zero;
    }
    if (p->n_v_heads > 65535) { /* one grid dimension per v-head */
        hy_cuda_fail(cu, HY_EINVAL, "gdn: %d v-heads: the GPU kernels take at most 65535",
                     p->n_v_heads);
        goto zero;
    }
    /* the slot is sized for the CPU's canonical block form (the states
     * first, then each head's block rows); this kernel still runs the older
     * form on the states alone and leaves the block area unused
     * (docs/determinism.md) */
    if (!hy_cuda_rec_seqs(cu, "gdn", rec_layer, batch, -1, hy_gdn_state_floats(p), &sq))
        goto zero;
    if (hy_cuda_ok(cu, "gdn", hy_cuk_gdn(&sq, q, k, v, qkv_stride, g, beta, o, p->n_k_heads,
                                         p->n_v_heads, p->d_k, p->d_v, p->v_tiled, p->chunk,
                                         cu->stream)))
        return;
zero:
    hy_cuda_zero(cu, o, (size_t)batch->n_tokens * (size_t)HY_MAX(p->n_v_heads, 0) *
                            (size_t)HY_MAX(p->d_v, 0));
}

void hy_cuda_ssd(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch, const float *x,
                 int32_t x_stride, const float *dt, int32_t dt_stride, const hy_weight_t *dt_bias,
                 const hy_weight_t *A, const float *B, const float *C, int32_t bc_stride,
                 const hy_weight_t *D, float *y, const hy_ssd_params_t *p)
{
    hy_cuda_t *cu = be->ctx;
    float *tA = NULL, *tD = NULL, *tb = NULL;
    const float *fA, *fb, *fD = NULL;
    hy_cuk_seqs_t sq;
    char err[HY_ERR_LEN];
    int rc;

    if (batch->n_tokens <= 0)
        return;
    if ((rc = hy_ssd_check(p, x_stride, dt_stride, bc_stride, err)) != HY_OK) {
        hy_cuda_fail(cu, rc, "%s", err);
        goto zero;
    }
    if (p->n_head > 65535) { /* one grid dimension per head */
        hy_cuda_fail(cu, HY_EINVAL, "ssd: %d heads: the GPU kernels take at most 65535",
                     p->n_head);
        goto zero;
    }
    /* as gdn: slot sized for the CPU's block form, states first; this
     * kernel runs the older form on the states alone */
    if (!hy_cuda_rec_seqs(cu, "ssd", rec_layer, batch, -1, hy_ssd_state_floats(p), &sq))
        goto zero;
    if (!(fA = hy_cuda_weight_floats(cu, "ssd A", A, p->n_head, false, &tA)) ||
        !(fb = hy_cuda_weight_floats(cu, "ssd dt_bias", dt_bias, p->n_head, false, &tb)))
        goto zero;
    if (D != NULL && D->data != NULL &&
        !(fD = hy_cuda_weight_floats(cu, "ssd D", D, p->n_head, false, &tD)))
        goto zero;
    if (hy_cuda_ok(cu, "ssd", hy_cuk_ssd(&sq, x, x_stride, dt, dt_stride, fb, fA, B, C, bc_stride,
                                         fD, y, p->n_head, p->head_dim, p->n_group, p->d_state,
                                         p->chunk, cu->stream)))
        goto out;
zero:
    hy_cuda_zero(cu, y, (size_t)batch->n_tokens * (size_t)HY_MAX(p->n_head, 0) *
                            (size_t)HY_MAX(p->head_dim, 0));
out:
    if (tA)
        cudaFree(tA);
    if (tb)
        cudaFree(tb);
    if (tD)
        cudaFree(tD);
}

void hy_cuda_lightning(hy_backend_t *be, int32_t rec_layer, const hy_batch_t *batch,
                       const float *q, const float *k, const float *v, int32_t row_stride,
                       int32_t head_stride, const hy_weight_t *decay, float *o,
                       const hy_lightning_params_t *p)
{
    hy_cuda_t *cu = be->ctx;
    float *tt = NULL;
    const float *ft;
    hy_cuk_seqs_t sq;
    char err[HY_ERR_LEN];
    int rc;

    if (batch->n_tokens <= 0)
        return;
    if ((rc = hy_lightning_check(p, row_stride, head_stride, decay, err)) != HY_OK) {
        hy_cuda_fail(cu, rc, "%s", err);
        goto zero;
    }
    if (!hy_cuda_rec_seqs(cu, "lightning", rec_layer, batch, -1, hy_lightning_state_floats(p),
                          &sq))
        goto zero;
    if (!(ft = hy_cuda_weight_floats(cu, "lightning decay", decay,
                                     (int64_t)p->n_head * (p->chunk + 1), false, &tt)))
        goto zero;
    /* the blocked kernel's shared memory: 36 KB at MiniMax's head 128 and
     * chunk 16; the launcher refuses (invalid argument) what the device
     * cannot give, named here */
    rc = hy_cuk_lightning(&sq, q, k, v, row_stride, head_stride, ft, o, p->n_head, p->head_dim,
                          p->chunk, cu->stream);
    if (rc == (int)cudaErrorInvalidValue)
        hy_cuda_fail(cu, HY_EUNSUPPORTED, "lightning: head size %d with chunk %d does not fit a "
                     "block's shared memory on this device", p->head_dim, p->chunk);
    if (hy_cuda_ok(cu, "lightning", rc))
        goto out;
zero:
    hy_cuda_zero(cu, o, (size_t)batch->n_tokens * (size_t)HY_MAX(p->n_head, 0) *
                            (size_t)HY_MAX(p->head_dim, 0));
out:
    if (tt)
        cudaFree(tt);
}

/* ---- mixture of experts ---------------------------------------------------- */

/* Expert e's 2-D matrix inside a 3-D stack on the device. */
static hy_weight_t hy_cuda_moe_slice(const hy_weight_t *stack, int32_t e)
{
    hy_weight_t v = *stack;

    v.data = (const uint8_t *)stack->data + (size_t)e * (size_t)stack->ne[1] * stack->row_bytes;
    v.dev = stack->dev ? (uint8_t *)stack->dev + (size_t)e * (size_t)stack->ne[1] * stack->row_bytes
                       : NULL;
    v.ne[2] = 1;
    v.ne[3] = 1;
    return v;
}

/* The CPU's shape checks, plus what the device kernels need: every stack
 * of a type with kernels and rows that fit it, on the device, and routing
 * within the routing kernel's limits. */
static bool hy_cuda_moe_check(hy_cuda_t *cu, const hy_moe_t *m, int32_t n_embd)
{
    const hy_weight_t *st[3] = {&m->gate_exps, &m->up_exps, &m->down_exps};
    int64_t want[3][2] = {{n_embd, m->n_ff_exp}, {n_embd, m->n_ff_exp}, {m->n_ff_exp, n_embd}};

    if (m->n_expert <= 0 || m->n_expert_used <= 0 || m->n_expert_used > m->n_expert ||
        m->n_ff_exp <= 0) {
        hy_cuda_fail(cu, HY_EINVAL, "moe: %d of %d experts with n_ff_exp %d", m->n_expert_used,
                     m->n_expert, m->n_ff_exp);
        return false;
    }
    if (m->n_expert > HY_MR_MAX_EXPERT || m->n_expert_used > HY_MR_MAX_USED) {
        hy_cuda_fail(cu, HY_EUNSUPPORTED, "moe: %d of %d experts: the CUDA routing takes at most "
                     "%d of %d", m->n_expert_used, m->n_expert, HY_MR_MAX_USED, HY_MR_MAX_EXPERT);
        return false;
    }
    if (m->gate_inp.ne[0] != n_embd || m->gate_inp.ne[1] != m->n_expert || !m->gate_inp.dev) {
        hy_cuda_fail(cu, HY_EINVAL, "moe: router %s is %lld x %lld, want %d x %d",
                     m->gate_inp.name ? m->gate_inp.name : "?", (long long)m->gate_inp.ne[0],
                     (long long)m->gate_inp.ne[1], n_embd, m->n_expert);
        return false;
    }
    for (int i = 0; i < 3; i++) {
        const char *name = st[i]->name ? st[i]->name : "?";
        if (st[i]->ne[0] != want[i][0] || st[i]->ne[1] != want[i][1] ||
            st[i]->ne[2] != m->n_expert || !st[i]->dev) {
            hy_cuda_fail(cu, HY_EINVAL, "moe: expert stack %s is %lld x %lld x %lld, want "
                         "%lld x %lld x %d", name, (long long)st[i]->ne[0],
                         (long long)st[i]->ne[1], (long long)st[i]->ne[2],
                         (long long)want[i][0], (long long)want[i][1], m->n_expert);
            return false;
        }
        if (!hy_cuk_type_ok((int)st[i]->type) ||
            hy_dtype_row_bytes((uint32_t)st[i]->type, st[i]->ne[0]) == 0 ||
            st[i]->row_bytes != hy_dtype_row_bytes((uint32_t)st[i]->type, st[i]->ne[0])) {
            hy_cuda_fail(cu, HY_EUNSUPPORTED, "moe: expert stack %s: type %u with rows of %lld "
                         "(%zu bytes) has no CUDA kernels", name, (unsigned)st[i]->type,
                         (long long)st[i]->ne[0], st[i]->row_bytes);
            return false;
        }
    }
    return true;
}

/* Decode-size batches: every (token, slot) pair through the indexed
 * mat-vec, all on the stream with no host synchronisation (graphs capture
 * it).  sel / wsel come from the routing kernel; scratch holds the pairs'
 * gate, up and down rows. */
static void hy_cuda_moe_small(hy_cuda_t *cu, const hy_moe_t *m, const float *x, float *y,
                              int32_t n_tok, int32_t n_embd, const int32_t *sel,
                              const float *wsel, float *ge, float *ue, float *de)
{
    const int32_t K = m->n_expert_used, F = m->n_ff_exp, nk = n_tok * K;
    const hy_weight_t *wg = &m->gate_exps, *wu = &m->up_exps, *wd = &m->down_exps;
    hy_cuk_stream_t st = cu->stream;

    if (wg->type == wu->type && wg->row_bytes == wu->row_bytes) {
        if (!hy_cuda_ok(cu, "moe gate/up", hy_cuk_moe_matvec((int)wg->type, wg->dev, ge, wu->dev,
                                                             ue, (size_t)F * wg->row_bytes,
                                                             wg->row_bytes, n_embd, F, x, K, sel,
                                                             nk, m->n_expert, st)))
            return;
    } else if (!hy_cuda_ok(cu, "moe gate", hy_cuk_moe_matvec((int)wg->type, wg->dev, ge, NULL,
                                                            NULL, (size_t)F * wg->row_bytes,
                                                            wg->row_bytes, n_embd, F, x, K, sel,
                                                            nk, m->n_expert, st)) ||
               !hy_cuda_ok(cu, "moe up", hy_cuk_moe_matvec((int)wu->type, wu->dev, ue, NULL, NULL,
                                                          (size_t)F * wu->row_bytes, wu->row_bytes,
                                                          n_embd, F, x, K, sel, nk, m->n_expert,
                                                          st)))
        return;
    if (!hy_cuda_ok(cu, "moe swiglu", hy_cuk_eltwise(HY_CUK_SWIGLU, ge, ge, ue, 0,
                                                     (size_t)nk * F, st)) ||
        !hy_cuda_ok(cu, "moe down", hy_cuk_moe_matvec((int)wd->type, wd->dev, de, NULL, NULL,
                                                      (size_t)n_embd * wd->row_bytes,
                                                      wd->row_bytes, F, n_embd, ge, 1, sel, nk,
                                                      m->n_expert, st)))
        return;
    hy_cuda_ok(cu, "moe combine", hy_cuk_moe_combine(y, de, sel, wsel, n_tok, K, n_embd, st));
}

/* Prefill-size batches: the (small) selection (dsel: wsel [nk] then sel
 * [nk]) comes to the host with one synchronisation, tokens are grouped by
 * expert there (token order kept, as on the CPU) and each used expert runs
 * over its tokens through the ordinary matmul (cuBLAS on dequantized
 * tiles, sized by the counts, which is why they must reach the host). */
static void hy_cuda_moe_grouped(hy_backend_t *be, const hy_moe_t *m, const float *x, float *y,
                                int32_t n_tok, int32_t n_embd, const float *dsel, float *xe,
                                float *ge, float *ue, float *de)
{
    hy_cuda_t *cu = be->ctx;
    const int32_t E = m->n_expert, K = m->n_expert_used, F = m->n_ff_exp;
    const size_t nk = (size_t)n_tok * (size_t)K;
    float *hsel = NULL, *we = NULL; /* hsel: wsel [nk] then sel [nk] (int32) */
    int32_t *sel, *cnt = NULL, *start = NULL, *tok = NULL;
    void *dev[2];

    hsel = calloc(2 * nk, sizeof(float));
    we = malloc(sizeof(float) * nk);
    tok = malloc(sizeof(int32_t) * nk);
    cnt = calloc((size_t)E + 1, sizeof(int32_t));
    start = calloc((size_t)E + 1, sizeof(int32_t));
    if (!hsel || !we || !tok || !cnt || !start) {
        hy_cuda_fail(cu, HY_ENOMEM, "moe: out of memory");
        goto out;
    }
    hy_cuda_zero(cu, y, (size_t)n_tok * (size_t)n_embd);
    /* the backend's download: inside a captured step it first launches what
     * was captured so far as the step's graph (the rest then runs eagerly),
     * as the logits download does; a broken capture makes it a no-op and
     * the metadata upload below refuses to run */
    be->i->download(be, hsel, dsel, 2 * nk);
    if (cu->err_code != HY_OK)
        goto out;
    sel = (int32_t *)(hsel + nk);
    for (size_t i = 0; i < nk; i++) {
        if (sel[i] < 0 || sel[i] >= E) {
            hy_cuda_fail(cu, HY_EIO, "moe: routing produced expert %d of %d", sel[i], E);
            goto out;
        }
        cnt[sel[i]]++;
    }
    for (int32_t e = 0; e < E; e++)
        start[e + 1] = start[e] + cnt[e];
    memset(cnt, 0, sizeof(int32_t) * ((size_t)E + 1));
    for (size_t i = 0; i < nk; i++) {
        int32_t e = sel[i], at = start[e] + cnt[e]++;
        tok[at] = (int32_t)(i / (size_t)K);
        we[at] = hsel[i];
    }
    {
        const void *parts[2] = {tok, we};
        size_t bytes[2] = {sizeof(int32_t) * nk, sizeof(float) * nk};
        if (!hy_cuda_meta(cu, "moe", 2, parts, bytes, dev))
            goto out;
    }
    for (int32_t e = 0; e < E && cu->err_code == HY_OK; e++) {
        int32_t n = start[e + 1] - start[e];
        const int32_t *te = (const int32_t *)dev[0] + start[e];
        const float *wte = (const float *)dev[1] + start[e];
        hy_weight_t wg, wu, wd;

        if (n == 0)
            continue;
        wg = hy_cuda_moe_slice(&m->gate_exps, e);
        wu = hy_cuda_moe_slice(&m->up_exps, e);
        wd = hy_cuda_moe_slice(&m->down_exps, e);
        if (!hy_cuda_ok(cu, "moe gather", hy_cuk_gather_rows(xe, x, te, n, n_embd, cu->stream)))
            break;
        hy_cuda_matmul(be, &wg, xe, ge, n);
        hy_cuda_matmul(be, &wu, xe, ue, n);
        hy_cuda_ok(cu, "moe swiglu", hy_cuk_eltwise(HY_CUK_SWIGLU, ge, ge, ue, 0, (size_t)n * F,
                                                    cu->stream));
        hy_cuda_matmul(be, &wd, ge, de, n);
        hy_cuda_ok(cu, "moe scatter", hy_cuk_scatter_add(y, de, te, wte, n, n_embd, cu->stream));
    }
out:
    free(hsel);
    free(we);
    free(tok);
    free(cnt);
    free(start);
}

/* Router logits and routing on the device (kernels/hy_moe_route.h, the
 * CPU's rule), then the experts: the indexed mat-vec for decode-size
 * batches, grouped cuBLAS products for larger ones.  Scratch (fscr):
 * logits [n_tok][E] | wsel [nk] | sel [nk] | the experts' buffers. */
void hy_cuda_moe(hy_backend_t *be, const hy_moe_t *m, const float *x, float *y, int32_t n_tok,
                 int32_t n_embd)
{
    hy_cuda_t *cu = be->ctx;
    const int32_t E = m->n_expert, K = m->n_expert_used, F = m->n_ff_exp;
    const bool small = n_tok <= HY_CUK_MATVEC_MAX_TOK;
    float *btmp = NULL, *logits, *wsel, *buf;
    const float *bias = NULL;
    int32_t *sel;
    size_t nk, head, need;
    hy_mr_params_t rp;

    if (n_tok <= 0)
        return;
    if (n_embd <= 0 || !hy_cuda_moe_check(cu, m, n_embd))
        goto fail;
    nk = (size_t)n_tok * (size_t)K;
    /* the experts' buffers start 16-float aligned */
    head = ((size_t)n_tok * E + 2 * nk + 15) / 16 * 16;
    need = small ? head + nk * (2 * (size_t)F + (size_t)n_embd)
                 : head + (size_t)n_tok * (2 * (size_t)n_embd + 2 * (size_t)F);
    if (m->exp_bias.data &&
        !(bias = hy_cuda_weight_floats(cu, "moe selection bias", &m->exp_bias, E, false, &btmp)))
        goto fail;
    if (!hy_cuda_scratch(cu, (void **)&cu->fscr, &cu->fscr_size, sizeof(float) * need, "moe"))
        goto fail;
    logits = cu->fscr;
    wsel = logits + (size_t)n_tok * E;
    sel = (int32_t *)(wsel + nk);
    buf = logits + head;

    /* 1. route on the device */
    memset(&rp, 0, sizeof rp);
    rp.n_expert = E;
    rp.n_used = K;
    rp.softmax = m->softmax_gating;
    rp.norm_topk = m->norm_topk;
    rp.weights_scale = m->weights_scale;
    rp.norm_eps = m->norm_eps;
    hy_cuda_matmul(be, &m->gate_inp, x, logits, n_tok);
    if (cu->err_code != HY_OK ||
        !hy_cuda_ok(cu, "moe route", hy_cuk_moe_route(&rp, logits, bias, sel, wsel, n_tok,
                                                      cu->stream)))
        goto fail;

    /* 2. the experts */
    if (small)
        hy_cuda_moe_small(cu, m, x, y, n_tok, n_embd, sel, wsel, buf, buf + nk * F,
                          buf + 2 * nk * F);
    else
        hy_cuda_moe_grouped(be, m, x, y, n_tok, n_embd, wsel, buf,
                            buf + 2 * (size_t)n_tok * n_embd,
                            buf + 2 * (size_t)n_tok * n_embd + (size_t)n_tok * F,
                            buf + (size_t)n_tok * n_embd);
    if (cu->err_code == HY_OK)
        goto out;
fail:
    hy_cuda_zero(cu, y, (size_t)n_tok * (size_t)HY_MAX(n_embd, 0));
out:
    if (btmp)
        cudaFree(btmp);
}
