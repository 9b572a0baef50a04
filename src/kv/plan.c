/*
 * plan.c - the memory planner (see plan.h).  Per-kind and per-group
 * numbers come from asking the backend for the size of a layout
 * restricted to those layers, so they add up to the totals the allocators
 * use.
 */
#include <stdio.h>

#include "kv/plan.h"
#include "backend/layout.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool hy_plan_is_attn(hy_layer_kind_t k)
{
    return k == HY_LAYER_ATTN_FULL || k == HY_LAYER_ATTN_SWA;
}

int32_t hy_plan_swa_window(const hy_model_t *m, int32_t n_ctx, bool swa_full)
{
    int32_t w = 0;

    for (int32_t il = 0; il < m->n_layer; il++)
        if (m->layers[il].kind == HY_LAYER_ATTN_SWA && m->layers[il].kv_index >= 0)
            w = HY_MAX(w, m->layers[il].window);
    /* a window as long as the context keeps every position anyway */
    return swa_full || w >= n_ctx ? 0 : w;
}

int hy_plan_sparse(const hy_config_attention_t *a, int32_t page_tokens, bool cli,
                   hy_kv_sparse_t *out, char *err)
{
    /* what the caller's user wrote: the key or the flag */
    const char *blk = cli ? "--sparse-block-tokens" : "[attention] sparse_block_tokens";
    const char *sink = cli ? "--sparse-sink-tokens" : "[attention] sink_tokens";
    const char *local = cli ? "--sparse-local-tokens" : "[attention] local_tokens";
    uint32_t bt = a->sparse_block_tokens;

    memset(out, 0, sizeof *out);
    if (a->sparse == HY_CONFIG_SPARSE_OFF)
        return HY_OK;
    if (page_tokens < 1 || bt < (uint32_t)page_tokens || bt % (uint32_t)page_tokens != 0)
        return hy_err(err, HY_EINVAL, "%s = %u: must be a multiple of the %d-token KV page "
                      "([cache] page_tokens)", blk, bt, page_tokens);
    if (a->sink_tokens % bt != 0)
        return hy_err(err, HY_EINVAL, "%s = %u: must be a multiple of %s (%u)", sink,
                      a->sink_tokens, blk, bt);
    if (a->local_tokens % bt != 0)
        return hy_err(err, HY_EINVAL, "%s = %u: must be a multiple of %s (%u)", local,
                      a->local_tokens, blk, bt);
    out->block_pages = (int32_t)(bt / (uint32_t)page_tokens);
    out->topk = (int32_t)a->sparse_topk;
    if (a->sparse_topp > 0 && a->sparse_max_blocks < a->sparse_topk)
        return hy_err(err, HY_EINVAL, "%s = %u: must be at least %s (%u) with %s = %g",
                      cli ? "--sparse-max-blocks" : "[attention] sparse_max_blocks",
                      a->sparse_max_blocks, cli ? "--sparse-topk" : "[attention] sparse_topk",
                      a->sparse_topk, cli ? "--sparse-topp" : "[attention] sparse_topp",
                      a->sparse_topp);
    out->topp = (float)a->sparse_topp;
    out->max_blocks = (int32_t)a->sparse_max_blocks;
    out->sink_blocks = (int32_t)(a->sink_tokens / bt);
    out->local_blocks = (int32_t)(a->local_tokens / bt);
    out->min_tokens = (int32_t)a->sparse_min_tokens;
    return HY_OK;
}

int hy_plan_hot_window(uint32_t hot_tokens, const hy_kv_sparse_t *sp, int32_t page_tokens,
                       int32_t chunk, bool cli, int32_t *hot_blocks, char *err)
{
    const char *key = cli ? "--hot-tokens" : "[cache] hot_tokens_per_seq";
    int64_t bt = (int64_t)sp->block_pages * page_tokens;

    *hot_blocks = 0;
    if (hot_tokens == 0)
        return HY_OK;
    if (sp->block_pages <= 0)
        return hy_err(err, HY_EINVAL, "%s = %u: needs block-sparse attention (%s; only sparse "
                      "tokens read pages that are not hot)", key, hot_tokens,
                      cli ? "--sparse" : "[attention] sparse = block");
    if (hot_tokens % bt != 0)
        return hy_err(err, HY_EINVAL, "%s = %u: must be a multiple of the %lld-token sparse "
                      "block", key, hot_tokens, (long long)bt);
    if (hot_tokens < (uint32_t)sp->min_tokens)
        return hy_err(err, HY_EINVAL, "%s = %u: must be at least sparse_min_tokens (%d): a "
                      "dense token reads every page", key, hot_tokens, sp->min_tokens);
    if ((int64_t)hot_tokens <= (int64_t)sp->local_blocks * bt || (int64_t)hot_tokens <= chunk)
        return hy_err(err, HY_EINVAL, "%s = %u: must exceed the local tokens (%lld) and a step "
                      "(%d tokens)", key, hot_tokens, (long long)(sp->local_blocks * bt), chunk);
    *hot_blocks = (int32_t)(hot_tokens / bt);
    return HY_OK;
}

int hy_plan_seq_warm(uint64_t mb, int32_t hot_blocks, const char *dir, bool cli,
                     uint64_t *bytes, char *err)
{
    const char *key = cli ? "--seq-warm-mb" : "[cache] seq_warm_mb";

    *bytes = 0;
    if (mb == 0)
        return HY_OK;
    if (hot_blocks <= 0)
        return hy_err(err, HY_EINVAL, "%s = %llu: needs a hot window (%s): it limits the RAM "
                      "of the pages older than it", key, (unsigned long long)mb,
                      cli ? "--hot-tokens" : "[cache] hot_tokens_per_seq");
    if (dir == NULL || dir[0] == '\0')
        return hy_err(err, HY_EINVAL, "%s = %llu: needs %s for the spill file of the pages RAM "
                      "does not hold", key, (unsigned long long)mb,
                      cli ? "--spill-dir" : "[cache] disk_dir");
    *bytes = mb << 20;
    return HY_OK;
}

int32_t hy_plan_hot_pages(const hy_kv_sparse_t *sp, int32_t hot_blocks, int32_t page_tokens,
                          int32_t chunk)
{
    return (sp->sink_blocks + hot_blocks + 1) * sp->block_pages +
           (chunk + page_tokens - 1) / page_tokens + 1;
}

void hy_plan_kv_layout(const hy_model_t *m, int32_t page_tokens, int32_t n_pages,
                       int32_t n_swa_pages, int32_t swa_window, hy_dtype_t type,
                       uint8_t *layer_swa, hy_kv_layout_t *out)
{
    memset(out, 0, sizeof *out);
    out->n_layers = m->n_kv_layers;
    out->n_head_kv = m->n_head_kv;
    out->head_dim_k = m->head_dim;
    out->head_dim_v = m->head_dim_v;
    out->page_tokens = page_tokens;
    out->n_pages = n_pages;
    out->type = type;
    if (swa_window <= 0)
        return;
    memset(layer_swa, 0, (size_t)m->n_kv_layers);
    for (int32_t il = 0; il < m->n_layer; il++) {
        const hy_layer_t *L = &m->layers[il];

        if (L->kind == HY_LAYER_ATTN_SWA && L->kv_index >= 0 && L->window > 0)
            layer_swa[L->kv_index] = 1;
    }
    out->n_swa_pages = n_swa_pages;
    out->layer_swa = layer_swa;
}

void hy_plan_state_layout(const hy_model_t *m, int32_t n_slots, int64_t *conv, int64_t *rec,
                          hy_state_layout_t *out)
{
    for (int32_t il = 0; il < m->n_layer; il++) {
        const hy_layer_t *L = &m->layers[il];

        if (L->rec_index >= 0) {
            conv[L->rec_index] = L->conv_floats;
            rec[L->rec_index] = L->rec_floats;
        }
    }
    out->n_layers = m->n_rec_layers;
    out->n_slots = n_slots;
    out->conv_floats = conv;
    out->rec_floats = rec;
}

/* Layer index of a tensor named blk.N.*, or -1. */
static int32_t hy_plan_tensor_layer(const char *name)
{
    char *end;
    long v;

    if (strncmp(name, "blk.", 4) != 0)
        return -1;
    v = strtol(name + 4, &end, 10);
    return end != name + 4 && *end == '.' && v >= 0 && v < INT32_MAX ? (int32_t)v : -1;
}

int hy_plan_group_page_bytes(hy_backend_t *be, const hy_kv_layout_t *kv,
                             uint64_t page_bytes[HY_KV_GROUPS], char *err)
{
    hy_kv_layout_t one = *kv;
    int32_t n_swa = 0;
    uint64_t sb;
    int rc;

    for (int32_t l = 0; kv->layer_swa != NULL && l < kv->n_layers; l++)
        n_swa += kv->layer_swa[l] != 0;
    one.layer_swa = NULL;
    one.n_layers = kv->n_layers - n_swa;
    if ((rc = be->i->mem_sizes(be, &one, NULL, &page_bytes[HY_KV_FULL], &sb, err)) != HY_OK)
        return rc;
    one.n_layers = n_swa;
    return be->i->mem_sizes(be, &one, NULL, &page_bytes[HY_KV_SWA], &sb, err);
}

uint64_t hy_plan_seq_kv_bytes(const hy_plan_t *p, int32_t n_tokens)
{
    int32_t pt = p->page_tokens;
    int64_t pages = (n_tokens + pt - 1) / pt, out = 0;
    uint64_t full;

    /* with a hot window the pages older than it (all but the ones a whole
     * context keeps: its sink and window) live in the out arena, without
     * keys */
    if (p->out_seq_pages > 0)
        out = HY_MAX(0, pages - ((p->n_ctx + pt - 1) / pt - p->out_seq_pages));
    full = (uint64_t)(pages - out) * (p->page_bytes + p->sparse_key_bytes) +
           (uint64_t)out * p->page_bytes + p->sparse_seq_bytes;

    if (p->swa_window <= 0)
        return full;
    return full + (uint64_t)hy_kv_swa_blocks(p->swa_window, pt, n_tokens) * p->swa_page_bytes;
}

int hy_plan_make(hy_plan_t *p, const hy_model_t *m, hy_backend_t *be, int32_t n_ctx,
                 int32_t n_seqs, int32_t page_tokens, hy_dtype_t kv_type, char *err)
{
    hy_plan_opts_t o = {n_ctx, n_seqs, page_tokens, HY_PLAN_CHUNK, kv_type, false, {0}, 0, 0,
                        0, 0, 0, 0};

    return hy_plan_make_opts(p, m, be, &o, err);
}

uint64_t hy_plan_out_index_bytes(int32_t n_units, int32_t n_warm, uint64_t runs)
{
    /* per unit: its slot, mark, written flag, a free-stack entry, a
     * read-list entry and its I/O job; a CRC per run of every unit when
     * some are only in the file (else one); per slot: its unit, a
     * free-stack entry and an I/O job (unit, slot, error, flag, time) */
    uint64_t crcs = n_warm < n_units ? (uint64_t)n_units * runs : 1;

    return (uint64_t)n_units * (4 + 1 + 1 + 4 + 4 + 4) + crcs * 4 +
           (uint64_t)n_warm * (4 + 4 + 4 + 4 + 4 + 1 + 8);
}

int32_t hy_plan_seq_list_pages(int32_t n_ctx, int32_t page_tokens)
{
    return (n_ctx + page_tokens - 1) / page_tokens;
}

int hy_plan_runner_bytes(const hy_model_t *m, int32_t max_tokens, int32_t max_seqs,
                         int32_t n_ctx, int32_t page_tokens, const hy_pt_params_t *pt, bool swa,
                         uint64_t *bytes, char *err)
{
    uint64_t T = (uint64_t)max_tokens, S = (uint64_t)max_seqs, list, total;
    hy_pt_layout_t l;
    int rc;

    /* tok, pos, out_rows; old_pages, old_swa, new_slot, bseqs; layer_swa */
    total = 3 * hy_host_alloc_bytes(T * sizeof(int32_t)) +
            2 * hy_host_alloc_bytes(S * sizeof(int32_t)) + hy_host_alloc_bytes(S * sizeof(bool)) +
            hy_host_alloc_bytes(S * sizeof(hy_batch_seq_t)) +
            hy_host_alloc_bytes((uint64_t)HY_MAX(m->n_kv_layers, 1));
    /* each sequence's lists, one per group: realloc may copy a list into
     * a new block, and the blocks it left (each at most half the next)
     * add up to less than the last */
    list = 2 * hy_host_alloc_bytes((uint64_t)hy_plan_seq_list_pages(n_ctx, page_tokens) *
                                   sizeof(int32_t));
    total += S * list * (swa ? 2 : 1);
    /* its private page table (hy_pt_create: one block of the layout's size) */
    if ((rc = hy_pt_layout(pt, &l, err)) != HY_OK)
        return rc;
    *bytes = total + hy_host_alloc_bytes(l.total_size);
    return HY_OK;
}

/* Every file mapping counts at its full size, not what is resident now:
 * the kernel faults code, tables and mapped weights in as they are first
 * touched, so a process that has not run a step yet (hyserve plan) holds
 * only part of what the server will (the 8K benchmark faulted in 1.3 MiB
 * of its binary's and libm's pages after main began).  The rest
 * (heap, stack, anonymous maps) counts at what is resident. */
uint64_t hy_plan_image_bytes(char *err)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    unsigned long long lo, hi, kb, inode = 0, total = 0;
    int n_maps = 0;

    if (f == NULL) {
        hy_err(err, HY_EIO, "cannot read this process's mappings from /proc/self/smaps");
        return 0;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        if (sscanf(line, "%llx-%llx %*s %*s %*s %llu", &lo, &hi, &inode) == 3) {
            n_maps++;
            if (inode != 0)
                total += hi - lo;
        } else if (inode == 0 && sscanf(line, "Rss: %llu kB", &kb) == 1) {
            total += kb * 1024;
        }
    }
    fclose(f);
    if (n_maps == 0 || total == 0) {
        hy_err(err, HY_EIO, "/proc/self/smaps lists no mappings");
        return 0;
    }
    return total;
}

/* The out arena of a hot window: its pages, how many of them RAM holds,
 * the file for the rest. */
static int hy_plan_out(hy_plan_t *p, const hy_plan_opts_t *o, uint64_t runs, char *err)
{
    uint64_t units = o->out_pages > 0 ? (uint64_t)o->out_pages
                                      : (uint64_t)p->out_seq_pages * (uint64_t)p->n_seqs, warm;

    p->out_total = units * p->page_bytes;
    if (p->hot_blocks <= 0)
        return HY_OK;
    units = HY_MAX(units, 1); /* the runner's arena has a page at least */
    warm = units;
    if (o->out_warm_bytes > 0 && p->page_bytes > 0) {
        if (o->out_warm_bytes < p->page_bytes)
            return hy_err(err, HY_ERANGE, "plan: %llu bytes of RAM for the out arena hold no "
                          "page of %llu bytes", (unsigned long long)o->out_warm_bytes,
                          (unsigned long long)p->page_bytes);
        warm = HY_MIN(units, o->out_warm_bytes / p->page_bytes);
    }
    if (units > INT32_MAX)
        return hy_err(err, HY_ERANGE, "plan: %llu out pages is too many",
                      (unsigned long long)units);
    p->out_warm_pages = (int32_t)warm;
    p->out_ram = warm * p->page_bytes +
                 hy_plan_out_index_bytes((int32_t)units, (int32_t)warm, runs);
    p->out_file = warm < units ? units * p->page_bytes : 0;
    return HY_OK;
}

/* The out arena's allocations (engine/outstore.c hy_outstore_init: its
 * RAM pages and its fourteen index arrays, and the runner's struct). */
#define HY_PLAN_OUT_ALLOCS 16

/* Asks the backend for its ops' scratch in a step of p->chunk tokens
 * (a step holds no more, however many sequences share it) at n_ctx: the
 * shape from the model's layers and tensors. */
static int hy_plan_op_bytes(hy_plan_t *p, const hy_model_t *m, hy_backend_t *be,
                            const hy_plan_opts_t *o, const hy_kv_layout_t *kv, char *err)
{
    hy_kv_layout_t lay = *kv;
    hy_work_shape_t w = {0};
    int32_t n_t = hy_gguf_n_tensors(m->gguf), L = HY_MAX(m->n_layer, 1);
    hy_weight_t *mats = calloc((size_t)HY_MAX(n_t, 1), sizeof *mats);
    hy_gdn_params_t *gdn = calloc((size_t)L, sizeof *gdn);
    hy_ssd_params_t *ssd = calloc((size_t)L, sizeof *ssd);
    hy_moe_t *moe = calloc((size_t)L, sizeof *moe);
    int rc = HY_OK;

    if (mats == NULL || gdn == NULL || ssd == NULL || moe == NULL) {
        rc = hy_err(err, HY_ENOMEM, "out of memory");
        goto out;
    }
    lay.sparse = o->sparse;
    w.kv = m->n_kv_layers > 0 ? &lay : NULL;
    w.n_tokens = p->chunk;
    w.n_ctx = p->n_ctx;
    w.staged = p->hot_blocks > 0;
    w.n_rot = HY_MAX(m->rope.n_rot, m->rope_swa.n_rot);
    w.n_embd = m->n_embd;
    /* matrices by their type and rows (all a matmul's scratch depends on);
     * vectors and conv kernels by their elements */
    for (int32_t i = 0; i < n_t; i++) {
        const hy_gguf_tensor_t *t = hy_gguf_tensor(m->gguf, i);
        int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];

        if (t->ne[1] > 1) {
            mats[w.n_mats].type = (hy_dtype_t)t->type;
            memcpy(mats[w.n_mats].ne, t->ne, sizeof t->ne);
            mats[w.n_mats++].name = t->name;
        } else if (t->type != HY_DTYPE_F32) { /* an F32 one is used where it is */
            w.most_vector = HY_MAX(w.most_vector, n);
        }
    }
    for (int32_t i = 0; i < m->n_layer; i++) {
        const hy_layer_t *l = &m->layers[i];

        if (hy_plan_is_attn(l->kind))
            w.n_head = HY_MAX(w.n_head, l->n_head);
        if (l->kind == HY_LAYER_GDN)
            gdn[w.n_gdn++] = l->gdn;
        if (l->kind == HY_LAYER_MAMBA2)
            ssd[w.n_ssd++] = l->ssd;
        if (l->ffn == HY_FFN_MOE)
            moe[w.n_moe++] = l->moe;
        w.most_conv = HY_MAX(w.most_conv, HY_MAX(l->ssm_conv1d.ne[0] * l->ssm_conv1d.ne[1],
                                                 l->sc_conv.ne[0] * l->sc_conv.ne[1]));
    }
    w.mats = mats;
    w.gdn = gdn;
    w.ssd = ssd;
    w.moe = moe;
    p->op_work_known = be->i->work_bytes != NULL;
    if (p->op_work_known)
        rc = be->i->work_bytes(be, &w, &p->op_work_bytes, err);
out:
    free(mats);
    free(gdn);
    free(ssd);
    free(moe);
    return rc;
}

/* The working memory of a step of p->chunk tokens with every sequence at
 * n_ctx, and the process total. */
static int hy_plan_work(hy_plan_t *p, const hy_model_t *m, hy_backend_t *be,
                        const hy_plan_opts_t *o, const hy_kv_layout_t *kv, char *err)
{
    hy_pt_params_t pt = {0};
    int rc;

    p->max_outputs = o->max_outputs > 0 ? o->max_outputs : p->chunk;
    p->fwd_bytes = hy_fwd_bytes(m, p->chunk, p->max_outputs);
    pt.n_pages = p->n_pages;
    pt.page_tokens = p->page_tokens;
    pt.n_swa_pages = p->n_swa_pages;
    pt.n_state_slots = p->n_slots;
    if ((rc = hy_plan_runner_bytes(m, p->chunk, p->n_seqs, p->n_ctx, p->page_tokens, &pt,
                                   p->swa_window > 0, &p->runner_bytes, err)) != HY_OK)
        return rc;
    p->token_bytes = hy_host_alloc_bytes((uint64_t)p->n_ctx * sizeof(int32_t)) *
                     (uint64_t)p->n_seqs;
    if ((rc = hy_plan_op_bytes(p, m, be, o, kv, err)) != HY_OK)
        return rc;
    p->work_total = p->fwd_bytes + p->op_work_bytes + p->runner_bytes + p->token_bytes;
    /* the cache's blocks: a KV and a sparse-key mapping per layer, each
     * sequence's key summaries, the state arena, the out arena's
     * (hy_outstore_init: HY_PLAN_OUT_ALLOCS); each can take up to two
     * pages more than its bytes */
    p->cache_round_bytes = (2 * (uint64_t)m->n_kv_layers + (uint64_t)p->n_seqs + 1 +
                            (p->hot_blocks > 0 ? HY_PLAN_OUT_ALLOCS : 0)) *
                           2 * hy_host_alloc_bytes(0);
    p->image_bytes = o->image_bytes;
    p->model_bytes = o->model_bytes;
    if (o->image_bytes > 0 && p->op_work_known)
        p->process_total = p->image_bytes + HY_MAX(p->model_bytes, p->weights_total) +
                           p->kv_total + p->state_total + p->cache_round_bytes +
                           p->work_total;
    return HY_OK;
}

int hy_plan_make_opts(hy_plan_t *p, const hy_model_t *m, hy_backend_t *be,
                      const hy_plan_opts_t *o, char *err)
{
    int32_t n_ctx = o->n_ctx, n_seqs = o->n_seqs, page_tokens = o->page_tokens;
    int64_t *conv = NULL, *rec = NULL, i;
    uint8_t *layer_swa = NULL;
    hy_kv_layout_t kv;
    hy_state_layout_t st;
    uint64_t pb, sb, group_bytes[HY_KV_GROUPS];
    int rc = HY_OK;
    int k;

    memset(p, 0, sizeof *p);
    if (n_ctx < 1 || n_seqs < 1 || page_tokens < 1 || o->chunk < 0)
        return hy_err(err, HY_EINVAL, "plan: context %d, sequences %d, page %d must be >= 1, "
                      "chunk %d >= 0", n_ctx, n_seqs, page_tokens, o->chunk);
    p->n_ctx = n_ctx;
    p->n_seqs = n_seqs;
    p->page_tokens = page_tokens;
    p->chunk = o->chunk > 0 ? o->chunk : HY_PLAN_CHUNK;
    p->kv_type = o->kv_type;
    p->swa_full = o->swa_full;
    p->swa_window = hy_plan_swa_window(m, n_ctx, o->swa_full);
    if (o->hot_blocks < 0 || (o->hot_blocks > 0 && o->sparse.block_pages <= 0))
        return hy_err(err, HY_EINVAL, "plan: a hot window of %d blocks needs block-sparse "
                      "attention", o->hot_blocks);
    p->hot_blocks = o->hot_blocks;
    {
        int64_t per = (n_ctx + page_tokens - 1) / page_tokens;
        int64_t pages, swa = 0;

        if (o->hot_blocks > 0) {
            int64_t held = hy_plan_hot_pages(&o->sparse, o->hot_blocks, page_tokens, p->chunk);
            int64_t kept = (int64_t)(o->sparse.sink_blocks + o->hot_blocks) *
                           o->sparse.block_pages;

            p->out_seq_pages = (int32_t)HY_MAX(0, per - kept);
            per = HY_MIN(per, held);
        }
        pages = (int64_t)n_seqs * per;

        if (p->swa_window > 0)
            swa = (int64_t)n_seqs *
                  hy_kv_swa_peak_blocks(p->swa_window, page_tokens, p->chunk, n_ctx);
        if (pages > INT32_MAX || swa > INT32_MAX)
            return hy_err(err, HY_ERANGE, "plan: %lld pages is too many", (long long)pages);
        p->n_pages = (int32_t)pages;
        p->n_swa_pages = (int32_t)swa;
    }
    p->n_slots = m->n_rec_layers > 0 ? n_seqs : 0;

    for (i = 0; i < m->n_layer; i++) {
        p->n_layers[m->layers[i].kind]++;
        p->window[m->layers[i].kind] = HY_MAX(p->window[m->layers[i].kind], m->layers[i].window);
    }
    for (i = 0; i < hy_gguf_n_tensors(m->gguf); i++) {
        const hy_gguf_tensor_t *t = hy_gguf_tensor(m->gguf, i);
        int32_t il = hy_plan_tensor_layer(t->name);

        if (il >= 0 && il < m->n_layer)
            p->weight_bytes[m->layers[il].kind] += t->nbytes;
        else
            p->weight_bytes_other += t->nbytes;
        p->weights_total += t->nbytes;
    }

    conv = calloc((size_t)HY_MAX(m->n_rec_layers, 1), sizeof *conv);
    rec = calloc((size_t)HY_MAX(m->n_rec_layers, 1), sizeof *rec);
    layer_swa = calloc((size_t)HY_MAX(m->n_kv_layers, 1), 1);
    if (conv == NULL || rec == NULL || layer_swa == NULL) {
        rc = hy_err(err, HY_ENOMEM, "out of memory");
        goto out;
    }
    /* totals: exactly the layouts the runner allocates */
    hy_plan_kv_layout(m, page_tokens, p->n_pages, p->n_swa_pages, p->swa_window, o->kv_type,
                      layer_swa, &kv);
    hy_plan_state_layout(m, HY_MAX(p->n_slots, 1), conv, rec, &st);
    if ((rc = be->i->mem_sizes(be, NULL, &st, &pb, &p->slot_bytes, err)) != HY_OK ||
        (rc = hy_plan_group_page_bytes(be, &kv, group_bytes, err)) != HY_OK)
        goto out;
    p->page_bytes = group_bytes[HY_KV_FULL];
    p->swa_page_bytes = group_bytes[HY_KV_SWA];
    for (int32_t l = 0; kv.layer_swa != NULL && l < kv.n_layers; l++)
        p->n_swa_kv_layers += kv.layer_swa[l] != 0;
    if (o->sparse.block_pages > 0) {
        hy_kv_layout_t keys = kv;

        keys.sparse = o->sparse;
        int32_t bt = o->sparse.block_pages * page_tokens;

        keys.sparse = o->sparse;
        p->sparse_key_bytes = hy_kv_sparse_key_bytes(&keys) *
                              (uint64_t)(kv.n_layers - p->n_swa_kv_layers);
        p->sparse_seq_bytes = (uint64_t)((n_ctx + bt - 1) / bt) * p->sparse_key_bytes;
    }
    p->out_run_bytes = hy_kv_layout_out_run(&kv);
    if ((rc = hy_plan_out(p, o, p->out_run_bytes > 0 ? p->page_bytes / p->out_run_bytes : 1,
                          err)) != HY_OK)
        goto out;
    p->kv_total = (p->page_bytes + p->sparse_key_bytes) * (uint64_t)p->n_pages +
                  p->sparse_seq_bytes * (uint64_t)n_seqs + p->out_ram +
                  p->swa_page_bytes * (uint64_t)p->n_swa_pages;
    p->state_total = p->slot_bytes * (uint64_t)p->n_slots;
    p->seq_kv_bytes = hy_plan_seq_kv_bytes(p, n_ctx);
    if ((rc = hy_plan_work(p, m, be, o, &kv, err)) != HY_OK)
        goto out;

    /* per kind: the same question for one layer of that kind */
    for (k = 0; k < HY_LAYER_KINDS; k++) {
        if (p->n_layers[k] == 0)
            continue;
        if (hy_plan_is_attn((hy_layer_kind_t)k)) {
            hy_kv_layout_t one = kv;

            one.n_layers = p->n_layers[k];
            if ((rc = be->i->mem_sizes(be, &one, NULL, &pb, &sb, err)) != HY_OK)
                goto out;
            p->kv_bytes_per_token[k] = pb / (uint64_t)page_tokens;
        } else {
            hy_state_layout_t one = st;
            int64_t *c1 = calloc((size_t)m->n_rec_layers, sizeof *c1);
            int64_t *r1 = calloc((size_t)m->n_rec_layers, sizeof *r1);

            if (c1 == NULL || r1 == NULL) {
                free(c1);
                free(r1);
                rc = hy_err(err, HY_ENOMEM, "out of memory");
                goto out;
            }
            for (i = 0; i < m->n_layer; i++) {
                const hy_layer_t *L = &m->layers[i];

                if (L->rec_index >= 0 && (int)L->kind == k) {
                    c1[L->rec_index] = L->conv_floats;
                    r1[L->rec_index] = L->rec_floats;
                }
            }
            one.conv_floats = c1;
            one.rec_floats = r1;
            rc = be->i->mem_sizes(be, NULL, &one, &pb, &sb, err);
            free(c1);
            free(r1);
            if (rc != HY_OK)
                goto out;
            p->state_bytes_per_seq[k] = sb;
        }
    }

    /* the dense counterfactual: every layer keeps KV like our attention
     * layers, for every position */
    if (m->n_kv_layers > 0) {
        hy_kv_layout_t dense = kv;

        dense.n_layers = m->n_layer;
        dense.layer_swa = NULL;
        if ((rc = be->i->mem_sizes(be, &dense, NULL, &p->dense_page_bytes, &sb, err)) != HY_OK)
            goto out;
        /* every sequence's whole context (a hot window is this model's) */
        p->dense_kv_total = p->dense_page_bytes * (uint64_t)n_seqs *
                            (uint64_t)((n_ctx + page_tokens - 1) / page_tokens);
        p->dense_seq_kv_bytes =
            p->dense_page_bytes * (uint64_t)((n_ctx + page_tokens - 1) / page_tokens);
    }
out:
    free(conv);
    free(rec);
    free(layer_swa);
    return rc;
}

int hy_plan_hot_bytes(hy_backend_t *be, uint64_t hot_mb, double fraction, uint64_t *out,
                      char *err)
{
    uint64_t free_b = 0, total_b = 0;
    int rc;

    *out = 0;
    if (hot_mb > 0) {
        *out = hot_mb << 20;
        return HY_OK;
    }
    if (be->i->mem_info == NULL)
        return hy_err(err, HY_EUNSUPPORTED,
                      "the %s backend cannot report its free memory: set [cache] hot_mb",
                      be->i->name);
    if ((rc = be->i->mem_info(be, &free_b, &total_b, err)) != HY_OK)
        return rc;
    *out = (uint64_t)((double)free_b * fraction);
    return HY_OK;
}

char hy_plan_kind_letter(hy_layer_kind_t k)
{
    static const char letters[] = "ASGMCL-";

    return (unsigned)k < sizeof letters - 1 ? letters[k] : '?';
}

/* A GGUF's name is arbitrary text: escape it for JSON. */
static void hy_plan_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Positions one sequence at n_ctx holds in the sliding group (0 without one). */
static int32_t hy_plan_seq_swa_tokens(const hy_plan_t *p)
{
    return p->swa_window > 0 ? hy_kv_swa_blocks(p->swa_window, p->page_tokens, p->n_ctx) *
                                   p->page_tokens
                             : 0;
}

static double hy_plan_mib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

void hy_plan_print(const hy_plan_t *p, const hy_model_t *m, FILE *f, bool json)
{
    int k;

    if (json) {
        fputs("{\"model\":", f);
        hy_plan_json_str(f, m->name);
        fputs(",\"architecture\":", f);
        hy_plan_json_str(f, m->arch_name);
        fprintf(f, ",\"context\":%d,\"sequences\":%d,"
                   "\"page_tokens\":%d,\"kv_type\":\"%s\",\"kinds\":[",
                p->n_ctx, p->n_seqs, p->page_tokens,
                hy_dtype_info(p->kv_type) ? hy_dtype_info(p->kv_type)->name : "?");
        bool first = true;

        for (k = 0; k < HY_LAYER_KINDS; k++) {
            if (p->n_layers[k] == 0)
                continue;
            fprintf(f, "%s{\"kind\":\"%s\",\"layers\":%d,\"window\":%d,\"weight_bytes\":%llu,"
                       "\"kv_bytes_per_token\":%llu,\"state_bytes_per_sequence\":%llu}",
                    first ? "" : ",", hy_layer_kind_name((hy_layer_kind_t)k), p->n_layers[k],
                    p->window[k], (unsigned long long)p->weight_bytes[k],
                    (unsigned long long)p->kv_bytes_per_token[k],
                    (unsigned long long)p->state_bytes_per_seq[k]);
            first = false;
        }
        fputs("],\"layers\":\"", f);
        for (int32_t il = 0; il < m->n_layer; il++)
            fputc(hy_plan_kind_letter(m->layers[il].kind), f);
        fputs("\",\"windows\":[", f);
        for (int32_t il = 0; il < m->n_layer; il++)
            fprintf(f, "%s%d", il ? "," : "", m->layers[il].window);
        fprintf(f, "],\"weight_bytes_other\":%llu,\"weights_total\":%llu,\"page_bytes\":%llu,"
                   "\"sparse_key_bytes\":%llu,\"sparse_seq_bytes\":%llu,\"hot_blocks\":%d,"
                   "\"out_seq_pages\":%d,\"out_total\":%llu,\"out_warm_pages\":%d,"
                   "\"out_ram\":%llu,\"out_run_bytes\":%llu,\"out_file\":%llu,\"pages\":%d,"
                   "\"kv_total\":%llu,"
                   "\"slot_bytes\":%llu,\"slots\":%d,"
                   "\"state_total\":%llu,\"cache_total\":%llu,\"dense_kv_total\":%llu,",
                (unsigned long long)p->weight_bytes_other, (unsigned long long)p->weights_total,
                (unsigned long long)p->page_bytes, (unsigned long long)p->sparse_key_bytes,
                (unsigned long long)p->sparse_seq_bytes, p->hot_blocks, p->out_seq_pages,
                (unsigned long long)p->out_total, p->out_warm_pages,
                (unsigned long long)p->out_ram, (unsigned long long)p->out_run_bytes,
                (unsigned long long)p->out_file, p->n_pages,
                (unsigned long long)p->kv_total,
                (unsigned long long)p->slot_bytes, p->n_slots, (unsigned long long)p->state_total,
                (unsigned long long)(p->kv_total + p->state_total),
                (unsigned long long)p->dense_kv_total);
        fprintf(f, "\"chunk\":%d,\"swa_full\":%s,\"swa_window\":%d,\"swa_layers\":%d,"
                   "\"swa_page_bytes\":%llu,\"swa_pages\":%d,\"swa_kv_total\":%llu,"
                   "\"seq_kv_bytes\":%llu,\"seq_swa_tokens\":%d,\"dense_seq_kv_bytes\":%llu,",
                p->chunk, p->swa_full ? "true" : "false", p->swa_window, p->n_swa_kv_layers,
                (unsigned long long)p->swa_page_bytes, p->n_swa_pages,
                (unsigned long long)(p->swa_page_bytes * (uint64_t)p->n_swa_pages),
                (unsigned long long)p->seq_kv_bytes, hy_plan_seq_swa_tokens(p),
                (unsigned long long)p->dense_seq_kv_bytes);
        fprintf(f, "\"max_outputs\":%d,\"fwd_bytes\":%llu,\"op_work_known\":%s,\"op_work_bytes\":%llu,"
                   "\"runner_bytes\":%llu,\"token_bytes\":%llu,\"work_total\":%llu,"
                   "\"cache_round_bytes\":%llu,"
                   "\"image_bytes\":%llu,\"model_bytes\":%llu,\"process_total\":%llu}\n",
                p->max_outputs, (unsigned long long)p->fwd_bytes,
                p->op_work_known ? "true" : "false",
                (unsigned long long)p->op_work_bytes, (unsigned long long)p->runner_bytes,
                (unsigned long long)p->token_bytes, (unsigned long long)p->work_total,
                (unsigned long long)p->cache_round_bytes,
                (unsigned long long)p->image_bytes, (unsigned long long)p->model_bytes,
                (unsigned long long)p->process_total);
        return;
    }
    fprintf(f, "model %s (%s), context %d x %d sequences, KV %s in pages of %d tokens\n\n",
            m->name, m->arch_name, p->n_ctx, p->n_seqs,
            hy_dtype_info(p->kv_type) ? hy_dtype_info(p->kv_type)->name : "?", p->page_tokens);
    fprintf(f, "%-18s %6s %14s %18s %22s\n", "layer kind", "layers", "weights MiB",
            "KV bytes/token", "state bytes/sequence");
    for (k = 0; k < HY_LAYER_KINDS; k++) {
        if (p->n_layers[k] == 0)
            continue;
        fprintf(f, "%-18s %6d %14.2f %18llu %22llu\n", hy_layer_kind_name((hy_layer_kind_t)k),
                p->n_layers[k], hy_plan_mib(p->weight_bytes[k]),
                (unsigned long long)p->kv_bytes_per_token[k],
                (unsigned long long)p->state_bytes_per_seq[k]);
    }
    fprintf(f, "%-18s %6s %14.2f\n\n", "embeddings/output", "", hy_plan_mib(p->weight_bytes_other));
    fputs("layers             ", f);
    for (int32_t il = 0; il < m->n_layer; il++)
        fputc(hy_plan_kind_letter(m->layers[il].kind), f);
    fputs("\n                   (A attention, S sliding window, G gated deltanet, M mamba2,"
          " C shortconv, L lightning, - MLP only)\n", f);
    if (p->swa_window > 0)
        fprintf(f, "sliding window     %d tokens in %d of %d layers: their own page group keeps "
                   "the last window\n                   (+ one %d-token chunk while it runs), "
                   "not the context\n", p->swa_window, p->n_swa_kv_layers, m->n_layer, p->chunk);
    else if (p->n_layers[HY_LAYER_ATTN_SWA] > 0)
        fprintf(f, "sliding window     %d tokens in %d of %d layers; their KV is kept for the whole"
                   " context (%s)\n", p->window[HY_LAYER_ATTN_SWA],
                p->n_layers[HY_LAYER_ATTN_SWA], m->n_layer,
                p->swa_full ? "--swa-full" : "the window covers the context");
    fputc('\n', f);
    fprintf(f, "weights            %12.2f MiB\n", hy_plan_mib(p->weights_total));
    fprintf(f, "KV pages           %12.2f MiB  (%d pages x %llu bytes%s)\n",
            hy_plan_mib(p->page_bytes * (uint64_t)p->n_pages), p->n_pages,
            (unsigned long long)p->page_bytes, p->swa_window > 0 ? ", full-attention layers" : "");
    if (p->sparse_key_bytes > 0)
        fprintf(f, "sparse page keys   %12.2f MiB  (%d pages x %llu bytes: block-sparse "
                   "attention's compressed keys, hot)\n"
                   "sparse block keys  %12.2f MiB  (%d sequence%s x %llu bytes: a key per "
                   "block of the context, hot)\n",
                hy_plan_mib(p->sparse_key_bytes * (uint64_t)p->n_pages), p->n_pages,
                (unsigned long long)p->sparse_key_bytes,
                hy_plan_mib(p->sparse_seq_bytes * (uint64_t)p->n_seqs), p->n_seqs,
                p->n_seqs == 1 ? "" : "s", (unsigned long long)p->sparse_seq_bytes);
    if (p->hot_blocks > 0)
        fprintf(f, "out arena          %12.2f MiB  (%d sequence%s x %d pages x %llu bytes: "
                   "the pages older than a hot window of %d blocks)\n"
                   "  in host RAM      %12.2f MiB  (%d pages and the arena's index)\n",
                hy_plan_mib(p->out_total), p->n_seqs, p->n_seqs == 1 ? "" : "s",
                p->out_seq_pages, (unsigned long long)p->page_bytes, p->hot_blocks,
                hy_plan_mib(p->out_ram), p->out_warm_pages);
    if (p->out_file > 0)
        fprintf(f, "  spill file       %12.2f MiB  (on disk, under the cache directory: "
                   "the pages RAM does not hold; not in the totals)\n",
                hy_plan_mib(p->out_file));
    if (p->swa_window > 0)
        fprintf(f, "sliding KV pages   %12.2f MiB  (%d pages x %llu bytes, sliding layers)\n",
                hy_plan_mib(p->swa_page_bytes * (uint64_t)p->n_swa_pages), p->n_swa_pages,
                (unsigned long long)p->swa_page_bytes);
    fprintf(f, "state slots        %12.2f MiB  (%d slots x %llu bytes)\n",
            hy_plan_mib(p->state_total), p->n_slots, (unsigned long long)p->slot_bytes);
    fprintf(f, "cache total        %12.2f MiB\n", hy_plan_mib(p->kv_total + p->state_total));
    fprintf(f, "dense equivalent   %12.2f MiB  (full attention in all %d layers)\n",
            hy_plan_mib(p->dense_kv_total), m->n_layer);
    fprintf(f, "one sequence       %12.2f MiB  of KV at %d tokens (%d positions in the full "
               "group, %d in the sliding one);\n                   %12.2f MiB dense\n",
            hy_plan_mib(p->seq_kv_bytes), p->n_ctx, p->n_ctx, hy_plan_seq_swa_tokens(p),
            hy_plan_mib(p->dense_seq_kv_bytes));
    fputs("\nthe process (a step of the chunk, every sequence at the context):\n", f);
    fprintf(f, "activations        %12.2f MiB  (%d tokens, %d logit rows)\n",
            hy_plan_mib(p->fwd_bytes), p->chunk, p->max_outputs);
    if (p->op_work_known)
        fprintf(f, "op scratch         %12.2f MiB  (the ops' own; the sparse choice's grows "
                   "with the context)\n", hy_plan_mib(p->op_work_bytes));
    else
        fputs("op scratch                  ?      (this backend cannot say)\n", f);
    fprintf(f, "runner arrays      %12.2f MiB  (a step's, each sequence's page lists, the page "
               "table)\n"
               "token ids          %12.2f MiB  (4 bytes a position)\n"
               "working memory     %12.2f MiB  (the four, each allocation in whole pages)\n"
               "cache rounding     %12.2f MiB  (the cache's allocations in whole pages)\n",
            hy_plan_mib(p->runner_bytes), hy_plan_mib(p->token_bytes),
            hy_plan_mib(p->work_total), hy_plan_mib(p->cache_round_bytes));
    if (p->image_bytes == 0)
        return;
    fprintf(f, "program image      %12.2f MiB  (measured: its file mappings whole, the rest "
               "resident)\n"
               "model as loaded    %12.2f MiB  (measured: what loading it mapped and "
               "allocated)\n",
            hy_plan_mib(p->image_bytes), hy_plan_mib(p->model_bytes));
    if (p->process_total == 0)
        fputs("process bound               ?      (the backend cannot size its ops' scratch)\n",
              f);
    else
        fprintf(f, "process bound      %12.2f MiB  (image + model or weights + cache + "
                   "rounding + working memory)\n", hy_plan_mib(p->process_total));
}
