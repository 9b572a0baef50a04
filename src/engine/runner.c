/*
 * runner.c - batch building and page reservation around one forward pass.
 * What a step's sequences lack (pages for their new positions, a state
 * slot) is taken from the page table before anything runs, and given back
 * if the step cannot run, so a failed step leaves the table and the
 * sequences exactly as they were.  Sliding-group pages a sequence's window
 * has left are given back first (they are not needed whatever happens).
 */
#include "engine/runner.h"
#include "backend/layout.h"
#include "kv/plan.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

static int hy_runner_state_init(hy_runner_t *r, char *err);
static int hy_runner_out_init(hy_runner_t *r, const hy_kv_layout_t *lay, char *err);

void hy_runner_opts_default(hy_runner_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->max_tokens = 512;
    o->max_outputs = 64;
    o->max_seqs = 16;
    o->n_ctx = 4096;
    o->page_tokens = 16;
    o->kv_type = HY_DTYPE_F16;
}

/* The table's numbers into r->opts (a given table), or a private table of
 * r->opts' numbers: one state slot per sequence that may run at once. */
static int hy_runner_table(hy_runner_t *r, char *err)
{
    hy_runner_opts_t *o = &r->opts;
    hy_pt_params_t pp;
    int64_t n;

    if (o->pt != NULL) {
        r->pt = o->pt;
        o->n_pages = r->pt->sh->params.n_pages;
        o->page_tokens = r->pt->sh->params.page_tokens;
        r->n_live_slots = r->pt->sh->params.n_state_slots;
        o->n_slots = r->n_live_slots + r->pt->sh->params.n_checkpoint_slots;
        r->swa_window = hy_plan_swa_window(r->model, o->n_ctx, o->swa_full);
        if (r->pt->sh->params.n_swa_pages == 0)
            r->swa_window = 0;
        return HY_OK;
    }
    if (o->n_pages == 0) {
        n = (int64_t)o->max_seqs * ((o->n_ctx + o->page_tokens - 1) / o->page_tokens);
        if (n > INT32_MAX)
            return hy_err(err, HY_ERANGE, "runner: %lld KV pages is too many", (long long)n);
        o->n_pages = (int32_t)n;
    }
    if (o->n_slots == 0)
        o->n_slots = o->max_seqs;
    memset(&pp, 0, sizeof pp);
    pp.n_pages = o->n_pages;
    pp.page_tokens = o->page_tokens;
    r->swa_window = hy_plan_swa_window(r->model, o->n_ctx, o->swa_full);
    if (r->swa_window > 0) {
        n = (int64_t)o->max_seqs * hy_kv_swa_peak_blocks(r->swa_window, o->page_tokens,
                                                         o->max_tokens, o->n_ctx);
        if (n > INT32_MAX)
            return hy_err(err, HY_ERANGE, "runner: %lld sliding KV pages is too many",
                          (long long)n);
        pp.n_swa_pages = (int32_t)n;
    }
    pp.n_state_slots = r->model->n_rec_layers > 0 ? o->n_slots : 0;
    r->n_live_slots = pp.n_state_slots;
    r->own_pt = true;
    return hy_pt_create(&r->pt, &pp, err);
}

int hy_runner_init(hy_runner_t *r, hy_model_t *m, hy_backend_t *be,
                   const hy_runner_opts_t *o, char *err)
{
    hy_kv_layout_t lay;
    size_t ns;
    int rc;

    memset(r, 0, sizeof *r);
    r->model = m;
    r->be = be;
    r->opts = *o;
    if (o->max_tokens < 1 || o->max_outputs < 1 || o->max_seqs < 1 || o->n_ctx < 1 ||
        o->page_tokens < 1 || o->page_tokens > 256)
        return hy_err(err, HY_EINVAL, "runner: bad sizes (tokens %d outputs %d seqs %d ctx %d page %d)",
                      o->max_tokens, o->max_outputs, o->max_seqs, o->n_ctx, o->page_tokens);
    if ((rc = hy_runner_table(r, err)) != HY_OK)
        return rc;
    if ((rc = hy_fwd_init(&r->fwd, m, be, o->max_tokens, o->max_outputs, err)) != HY_OK)
        goto fail;
    if ((r->layer_swa = calloc((size_t)HY_MAX(m->n_kv_layers, 1), 1)) == NULL) {
        rc = hy_err(err, HY_ENOMEM, "out of memory");
        goto fail;
    }
    hy_plan_kv_layout(m, r->opts.page_tokens, r->opts.n_pages, r->pt->sh->params.n_swa_pages,
                      r->swa_window, o->kv_type, r->layer_swa, &lay);
    lay.sparse = o->sparse;
    if ((rc = hy_plan_group_page_bytes(be, &lay, r->page_bytes, err)) != HY_OK)
        goto fail;
    if (o->sparse.block_pages > 0) {
        int32_t n_full = 0, bt = o->sparse.block_pages * r->opts.page_tokens;

        for (int32_t l = 0; l < lay.n_layers; l++)
            n_full += hy_kv_layout_group(&lay, l) == HY_KV_FULL;
        r->sp_cap = (o->n_ctx + bt - 1) / bt;
        r->sp_seq_floats = (size_t)r->sp_cap * (size_t)n_full *
                           (size_t)(hy_kv_sparse_key_bytes(&lay) / sizeof(float));
    }
    if ((rc = be->i->kv_init(be, &lay, err)) != HY_OK)
        goto fail;
    if (o->hot_blocks != 0 && (rc = hy_runner_out_init(r, &lay, err)) != HY_OK)
        goto fail;
    if (m->n_rec_layers > 0 && (rc = hy_runner_state_init(r, err)) != HY_OK)
        goto fail;
    ns = (size_t)o->max_seqs;
    r->tok = malloc(sizeof(int32_t) * (size_t)o->max_tokens);
    r->pos = malloc(sizeof(int32_t) * (size_t)o->max_tokens);
    r->out_rows = malloc(sizeof(int32_t) * (size_t)o->max_tokens);
    r->old_pages = malloc(sizeof(int32_t) * ns);
    r->old_swa = malloc(sizeof(int32_t) * ns);
    r->new_slot = malloc(sizeof(bool) * ns);
    r->bseqs = malloc(sizeof(hy_batch_seq_t) * ns);
    if (!r->tok || !r->pos || !r->out_rows || !r->old_pages || !r->old_swa || !r->new_slot ||
        !r->bseqs) {
        rc = hy_err(err, HY_ENOMEM, "out of memory");
        goto fail;
    }
    return HY_OK;
fail:
    hy_runner_free(r);
    return rc;
}

/* The out arena of a hot window, after checking that the window can work:
 * only sparse tokens may read a page that is not hot. */
static int hy_runner_out_init(hy_runner_t *r, const hy_kv_layout_t *lay, char *err)
{
    const hy_runner_opts_t *o = &r->opts;
    int64_t bt = (int64_t)o->sparse.block_pages * o->page_tokens;

    if (o->hot_blocks < 0 || o->sparse.block_pages <= 0)
        return hy_err(err, HY_EINVAL, "runner: a hot window of %d blocks needs block-sparse "
                      "attention", o->hot_blocks);
    if (o->hot_blocks * bt < o->sparse.min_tokens || o->hot_blocks <= o->sparse.local_blocks)
        return hy_err(err, HY_EINVAL, "runner: a hot window of %lld tokens must reach "
                      "sparse_min_tokens (%d) and exceed the local blocks (%d)",
                      (long long)(o->hot_blocks * bt), o->sparse.min_tokens,
                      o->sparse.local_blocks);
    if (o->out_pages < 1)
        return hy_err(err, HY_EINVAL, "runner: out arena of %d pages", o->out_pages);
    {
        hy_outstore_opts_t so = {r->page_bytes[HY_KV_FULL], o->out_pages, o->out_warm,
                                 o->out_dir, hy_kv_layout_out_run(lay)};
        int rc;

        if ((r->out = malloc(sizeof *r->out)) == NULL)
            return hy_err(err, HY_ENOMEM, "runner: out of memory");
        if ((rc = hy_outstore_init(r->out, &so, err)) != HY_OK) {
            free(r->out);
            r->out = NULL;
            return rc;
        }
    }
    return HY_OK;
}

/* After a step: s's blocks older than its hot window leave the pool, as
 * long as the out store has room (the rest wait for a later step). */
static void hy_runner_demote(hy_runner_t *r, hy_kv_seq_t *s)
{
    int32_t bp = r->opts.sparse.block_pages;
    int32_t end = hy_kv_sparse_blocks_valid(&r->opts.sparse, r->opts.page_tokens, s->n_tokens) -
                  r->opts.hot_blocks;
    char err[HY_ERR_LEN];

    /* a block whose key is not written yet is averaged from its pages */
    end = HY_MIN(end, s->sp_valid);
    for (int32_t b = HY_MAX(s->n_out_blocks, r->opts.sparse.sink_blocks); b < end; b++) {
        for (int32_t j = 0; j < bp; j++) {
            int32_t p = b * bp + j, id = s->pages[p], unit;
            uint8_t *dst;
            int rc;

            if (id < 0)
                continue;
            rc = hy_outstore_take(r->out, &unit, &dst, err);
            if (rc == HY_OK &&
                (rc = r->be->i->kv_page_read(r->be, HY_KV_FULL, id, dst, err)) != HY_OK)
                hy_outstore_put(r->out, unit);
            if (rc != HY_OK) {
                /* it stays hot, and so does the rest until a later step; a
                 * failing disk is logged once until a page goes out again */
                if (rc != HY_EFULL && !r->out_warned)
                    hy_log(LOG_WARNING, "out_store_failed", "err=%s", err);
                r->out_warned = rc != HY_EFULL;
                return;
            }
            r->out_warned = false;
            hy_pt_release_seq(r->pt, HY_KV_FULL, &id, 1, err);
            s->pages[p] = HY_PAGE_OUT(unit);
        }
        s->n_out_blocks = b + 1;
    }
}

/* The backend's state arena: n_slots slots (recurrent state does not grow
 * with the context, so there is nothing to page). */
static int hy_runner_state_init(hy_runner_t *r, char *err)
{
    const hy_model_t *m = r->model;
    hy_state_layout_t lay;
    int64_t *conv = NULL, *rec = NULL;
    int32_t il, k = 0;
    int rc;

    r->n_slots = r->opts.n_slots;
    conv = calloc((size_t)m->n_rec_layers, sizeof *conv);
    rec = calloc((size_t)m->n_rec_layers, sizeof *rec);
    if (conv == NULL || rec == NULL) {
        rc = hy_err(err, HY_ENOMEM, "out of memory");
        goto out;
    }
    for (il = 0; il < m->n_layer; il++)
        k += m->layers[il].rec_index >= 0;
    if (k != m->n_rec_layers) {
        rc = hy_err(err, HY_EINVAL, "model declares %d recurrent layers but indexes %d",
                    m->n_rec_layers, k);
        goto out;
    }
    hy_plan_state_layout(m, r->n_slots, conv, rec, &lay);
    rc = r->be->i->state_init(r->be, &lay, err);
out:
    free(conv);
    free(rec);
    return rc;
}

void hy_runner_free(hy_runner_t *r)
{
    hy_fwd_free(&r->fwd);
    if (r->own_pt)
        hy_pt_destroy(r->pt);
    free(r->tok);
    free(r->pos);
    free(r->out_rows);
    free(r->old_pages);
    free(r->old_swa);
    free(r->layer_swa);
    free(r->new_slot);
    free(r->bseqs);
    if (r->out != NULL)
        hy_outstore_free(r->out);
    free(r->out);
    memset(r, 0, sizeof *r);
}

/* ---- one step --------------------------------------------------------------- */

static int hy_runner_check(const hy_runner_t *r, const hy_runner_item_t *items,
                           int32_t n_items, char *err)
{
    int32_t n_tok = 0, n_out = 0, i, j;

    if (n_items < 1 || n_items > r->opts.max_seqs)
        return hy_err(err, HY_EINVAL, "step of %d sequences (1..%d allowed)", n_items,
                      r->opts.max_seqs);
    for (i = 0; i < n_items; i++) {
        if (items[i].n < 1)
            return hy_err(err, HY_EINVAL, "sequence %d has no tokens in this step", i);
        if (items[i].seq->n_tokens + items[i].n > r->opts.n_ctx)
            return hy_err(err, HY_ERANGE, "sequence %d would reach %d positions, the context is %d",
                          i, items[i].seq->n_tokens + items[i].n, r->opts.n_ctx);
        n_tok += items[i].n;
        n_out += items[i].all_logits ? items[i].n : 1;
        if (n_tok > r->opts.max_tokens || n_out > r->opts.max_outputs)
            return hy_err(err, HY_EINVAL, "step of %d tokens / %d outputs exceeds %d / %d",
                          n_tok, n_out, r->opts.max_tokens, r->opts.max_outputs);
        for (j = 0; j < n_items; j++) {
            if (j != i && items[j].seq == items[i].seq)
                return hy_err(err, HY_EINVAL, "sequence %d appears twice in one step", i);
        }
    }
    return HY_OK;
}

/* Makes *list hold at least need ids (new entries -1), doubling but never
 * past the context's pages (hy_plan_seq_list_pages: what the plan counts). */
static int hy_runner_grow(int32_t **list, int32_t *cap, int32_t need, int32_t most,
                          char *err)
{
    int32_t c = HY_MAX(need, HY_MIN((int64_t)*cap * 2, most)), *np;

    if (need <= *cap)
        return HY_OK;
    if ((np = realloc(*list, sizeof(int32_t) * (size_t)c)) == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    for (int32_t j = *cap; j < c; j++)
        np[j] = -1;
    *list = np;
    *cap = c;
    return HY_OK;
}

/* The blocks [*n, need) of one group's list from the table when it has
 * fewer; then blocks [lo, need) must be ids of the group's pool, those
 * below *checked (when given) already known to be. */
static int hy_runner_reserve_group(hy_runner_t *r, int32_t group, int32_t **list, int32_t *cap,
                                   int32_t *n, int32_t lo, int32_t need, int32_t *checked,
                                   char *err)
{
    int32_t pool = group == HY_KV_SWA ? r->pt->sh->params.n_swa_pages : r->opts.n_pages, bad;
    int rc;

    if ((rc = hy_runner_grow(list, cap, need,
                             hy_plan_seq_list_pages(r->opts.n_ctx, r->opts.page_tokens),
                             err)) != HY_OK)
        return rc;
    if (need > *n) {
        if ((rc = hy_pt_alloc_pages(r->pt, group, need - *n, *list + *n, err)) != HY_OK)
            return rc;
        *n = need;
    }
    if (checked)
        lo = HY_MAX(lo, HY_MIN(*checked, need));
    if ((bad = hy_ids_first_outside(*list + lo, need - lo, pool)) >= 0)
        return hy_err(err, HY_EINVAL, "%spage id %d outside the pool (%d)",
                      group == HY_KV_SWA ? "sliding " : "", (*list)[lo + bad], pool);
    if (checked)
        *checked = HY_MAX(*checked, need);
    return HY_OK;
}

/* Pages for s's positions up to n_total (in each group) and a state slot,
 * from the table when s lacks them; then every page id and the slot must
 * be the table's. */
static int hy_runner_reserve(hy_runner_t *r, hy_kv_seq_t *s, int32_t n_total, bool *new_slot,
                             char *err)
{
    int32_t need = (n_total + r->opts.page_tokens - 1) / r->opts.page_tokens;
    int rc;

    *new_slot = false;
    if ((rc = hy_runner_reserve_group(r, HY_KV_FULL, &s->pages, &s->cap, &s->n_pages, 0, need,
                                      &s->n_checked, err)) != HY_OK)
        return rc;
    if (r->swa_window > 0 &&
        (rc = hy_runner_reserve_group(r, HY_KV_SWA, &s->swa_pages, &s->swa_cap, &s->n_swa_pages,
                                      s->swa_lo, need, NULL, err)) != HY_OK)
        return rc;
    if (r->sp_seq_floats > 0 && s->sp_keys == NULL) {
        /* the whole context's blocks at once: what the plan counts */
        if ((s->sp_keys = malloc(sizeof(float) * r->sp_seq_floats)) == NULL)
            return hy_err(err, HY_ENOMEM, "out of memory for %zu bytes of block keys",
                          sizeof(float) * r->sp_seq_floats);
        s->sp_cap = r->sp_cap;
        s->sp_valid = 0;
    }
    if (s->sp_keys != NULL && s->sp_cap != r->sp_cap)
        return hy_err(err, HY_EINVAL, "block keys for %d blocks, the context has %d", s->sp_cap,
                      r->sp_cap);
    if (r->n_slots == 0)
        return HY_OK;
    if (s->state_slot == 0) {
        int32_t slot;

        if ((rc = hy_pt_state_alloc(r->pt, &slot, err)) != HY_OK)
            return rc;
        s->state_slot = slot + 1;
        *new_slot = true;
        r->be->i->state_clear(r->be, slot);
    }
    if (s->state_slot < 1 || s->state_slot > r->n_slots)
        return hy_err(err, HY_EINVAL, "no valid state slot (%d)", s->state_slot - 1);
    return HY_OK;
}

/* Gives back what this step's reservations took from items[0..n). */
static void hy_runner_unreserve(hy_runner_t *r, hy_runner_item_t *items, int32_t n)
{
    char err[HY_ERR_LEN];
    int32_t i;

    for (i = 0; i < n; i++) {
        hy_kv_seq_t *s = items[i].seq;

        if (s->n_pages > r->old_pages[i])
            hy_pt_release_seq(r->pt, HY_KV_FULL, s->pages + r->old_pages[i],
                              s->n_pages - r->old_pages[i], err);
        s->n_pages = HY_MIN(s->n_pages, r->old_pages[i]);
        s->n_checked = HY_MIN(s->n_checked, s->n_pages);
        if (s->n_swa_pages > r->old_swa[i]) {
            hy_pt_release_seq(r->pt, HY_KV_SWA, s->swa_pages + r->old_swa[i],
                              s->n_swa_pages - r->old_swa[i], err);
            for (int32_t j = r->old_swa[i]; j < s->n_swa_pages; j++)
                s->swa_pages[j] = -1;
            s->n_swa_pages = r->old_swa[i];
        }
        if (r->new_slot[i]) {
            hy_pt_state_free(r->pt, s->state_slot - 1, err);
            s->state_slot = 0;
        }
    }
}

/* The batch the backend reads; n_out rows of logits asked for. */
static int hy_runner_batch(hy_runner_t *r, const hy_runner_item_t *items, int32_t n_items,
                           hy_batch_t *b, int32_t *n_out, char *err)
{
    int32_t n_tok = 0, i, j;

    *n_out = 0;
    for (i = 0; i < n_items; i++) {
        const hy_runner_item_t *it = &items[i];
        hy_batch_seq_t *bs = &r->bseqs[i];

        bs->first = n_tok;
        bs->n = it->n;
        bs->n_past = it->seq->n_tokens;
        bs->pages = it->seq->pages;
        bs->n_pages = it->seq->n_pages;
        bs->state_slot = it->seq->state_slot - 1;
        bs->swa_pages = r->swa_window > 0 ? it->seq->swa_pages : NULL;
        bs->n_swa_pages = r->swa_window > 0 ? it->seq->n_swa_pages : 0;
        bs->sp_keys = it->seq->sp_keys;
        bs->sp_cap = it->seq->sp_cap;
        bs->sp_valid = it->seq->sp_valid;
        bs->n_checked = it->seq->n_checked;
        bs->out = r->out ? &r->out->view : NULL;
        bs->out_reads = it->seq->out_reads;
        for (j = 0; j < it->n; j++) {
            if (it->tokens[j] < 0 || it->tokens[j] >= r->model->n_vocab)
                return hy_err(err, HY_EINVAL, "token id %d is outside the vocabulary (0..%d)",
                              it->tokens[j], r->model->n_vocab - 1);
            r->tok[n_tok + j] = it->tokens[j];
            r->pos[n_tok + j] = it->seq->n_tokens + j;
            if (it->all_logits || j == it->n - 1)
                r->out_rows[(*n_out)++] = n_tok + j;
        }
        n_tok += it->n;
    }
    b->n_tokens = n_tok;
    b->token = r->tok;
    b->pos = r->pos;
    b->n_seqs = n_items;
    b->seqs = r->bseqs;
    return HY_OK;
}

int hy_runner_step(hy_runner_t *r, hy_runner_item_t *items, int32_t n_items,
                   float *logits, char *err)
{
    int32_t i, reserved = 0, n_out;
    char sub[HY_ERR_LEN];
    hy_batch_t b;
    int rc;

    if ((rc = hy_runner_check(r, items, n_items, err)) != HY_OK)
        return rc;
    for (i = 0; i < n_items; i++)
        hy_runner_seq_trim(r, items[i].seq, NULL, 0);
    for (i = 0; i < n_items; i++) {
        r->old_pages[i] = items[i].seq->n_pages;
        r->old_swa[i] = items[i].seq->n_swa_pages;
        r->new_slot[i] = false;
        reserved = i + 1;
        rc = hy_runner_reserve(r, items[i].seq, items[i].seq->n_tokens + items[i].n,
                               &r->new_slot[i], sub);
        if (rc != HY_OK) {
            hy_err(err, rc, "sequence %d: %.400s", i, sub);
            goto undo;
        }
    }
    if ((rc = hy_runner_batch(r, items, n_items, &b, &n_out, err)) != HY_OK)
        goto undo;
    /* step_begin/step_end let the backend replay the step as a CUDA graph;
     * when its capture could not complete nothing ran: run it again, eagerly */
    if (r->be->i->step_begin)
        r->be->i->step_begin(r->be, &b, n_out);
    rc = hy_model_forward(r->model, &r->fwd, &b, r->out_rows, n_out, logits, err);
    if (r->be->i->step_end && !r->be->i->step_end(r->be))
        rc = hy_model_forward(r->model, &r->fwd, &b, r->out_rows, n_out, logits, err);
    /* a unit the step could not read, or read wrong, fails it */
    if (r->out != NULL && hy_outstore_end_step(r->out, rc == HY_OK ? err : sub) != HY_OK &&
        rc == HY_OK)
        rc = HY_EIO;
    if (rc != HY_OK)
        goto undo;
    for (i = 0; i < n_items; i++) {
        hy_kv_seq_t *s = items[i].seq;

        s->n_tokens += items[i].n;
        if (s->sp_keys != NULL)
            s->sp_valid = hy_kv_sparse_blocks_valid(&r->opts.sparse, r->opts.page_tokens,
                                                    s->n_tokens);
        if (r->out != NULL)
            hy_runner_demote(r, s);
    }
    return HY_OK;
undo:
    hy_runner_unreserve(r, items, reserved);
    return rc;
}

int hy_runner_prefill(hy_runner_t *r, hy_kv_seq_t *seq, const int32_t *tokens,
                      int32_t n, float *last_logits, char *err)
{
    int32_t done = 0;
    int rc;

    while (done < n) {
        hy_runner_item_t it = {seq, tokens + done, HY_MIN(n - done, r->opts.max_tokens), false};

        if ((rc = hy_runner_step(r, &it, 1, last_logits, err)) != HY_OK)
            return rc;
        done += it.n;
    }
    return HY_OK;
}

/* Whether block b lies in the window before one of keep[0..n_keep). */
static bool hy_runner_kept(const hy_runner_t *r, int32_t b, const int32_t *keep, int32_t n_keep)
{
    int32_t pt = r->opts.page_tokens;

    for (int32_t k = 0; k < n_keep; k++)
        if (keep[k] > 0 && b >= hy_kv_swa_first_block(r->swa_window, pt, keep[k]) &&
            b < (keep[k] + pt - 1) / pt)
            return true;
    return false;
}

void hy_runner_seq_trim(hy_runner_t *r, hy_kv_seq_t *seq, const int32_t *keep, int32_t n_keep)
{
    char err[HY_ERR_LEN];
    int32_t lo, b, end;

    if (r->swa_window <= 0)
        return;
    lo = HY_MIN(hy_kv_swa_first_block(r->swa_window, r->opts.page_tokens, seq->n_tokens),
                seq->n_swa_pages);
    /* runs of blocks that go to the same end of the LRU, one call each */
    for (b = seq->swa_lo; b < lo; b = end) {
        bool kept = hy_runner_kept(r, b, keep, n_keep);

        for (end = b + 1; end < lo && hy_runner_kept(r, end, keep, n_keep) == kept; end++)
            ;
        if (kept)
            hy_pt_release_seq(r->pt, HY_KV_SWA, seq->swa_pages + b, end - b, err);
        else
            hy_pt_release_stale(r->pt, HY_KV_SWA, seq->swa_pages + b, end - b, err);
        for (int32_t j = b; j < end; j++)
            seq->swa_pages[j] = -1;
    }
    seq->swa_lo = HY_MAX(seq->swa_lo, lo);
}

/* Whether a page-list entry is one of this runner's out pages (anything
 * else, a bad id included, goes to the table, which reports it). */
static bool hy_runner_is_out(const hy_runner_t *r, int32_t id)
{
    return r->out != NULL && id < -1 && HY_PAGE_OUT_REF(id) < r->opts.out_pages;
}

void hy_runner_seq_drop(hy_runner_t *r, hy_kv_seq_t *seq)
{
    char err[HY_ERR_LEN];

    /* hot pages back to the table in runs, out ones back to the arena */
    for (int32_t p = 0, end; p < seq->n_pages; p = end) {
        if (hy_runner_is_out(r, seq->pages[p])) {
            hy_outstore_put(r->out, HY_PAGE_OUT_REF(seq->pages[p]));
            seq->pages[p] = -1;
            end = p + 1;
            continue;
        }
        for (end = p + 1; end < seq->n_pages && !hy_runner_is_out(r, seq->pages[end]); end++)
            ;
        hy_pt_release_seq(r->pt, HY_KV_FULL, seq->pages + p, end - p, err);
    }
    if (seq->n_swa_pages > seq->swa_lo)
        hy_pt_release_seq(r->pt, HY_KV_SWA, seq->swa_pages + seq->swa_lo,
                          seq->n_swa_pages - seq->swa_lo, err);
    for (int32_t j = 0; j < seq->n_swa_pages; j++)
        seq->swa_pages[j] = -1;
    if (seq->state_slot > 0)
        hy_pt_state_free(r->pt, seq->state_slot - 1, err);
    seq->n_pages = seq->n_tokens = seq->state_slot = seq->n_checked = seq->n_out_blocks = 0;
    memset(seq->out_reads, 0, sizeof seq->out_reads);
    seq->n_swa_pages = seq->swa_lo = 0;
    free(seq->sp_keys);
    seq->sp_keys = NULL;
    seq->sp_cap = seq->sp_valid = 0;
}

uint64_t hy_runner_sparse_seq_bytes(const hy_runner_t *r)
{
    return (uint64_t)r->sp_seq_floats * sizeof(float);
}

uint64_t hy_runner_out_bytes(const hy_runner_t *r)
{
    /* the RAM it holds: its slots and its index */
    return r->out ? (uint64_t)r->out->o.n_warm * r->out->o.unit_bytes +
                        hy_plan_out_index_bytes(r->out->o.n_units, r->out->o.n_warm,
                                                r->out->runs)
                  : 0;
}

int32_t hy_runner_out_used(const hy_runner_t *r)
{
    hy_outstore_counts_t c;

    if (r->out == NULL)
        return 0;
    hy_outstore_counts(r->out, &c);
    return c.used;
}

void hy_runner_seq_release(hy_runner_t *r, hy_kv_seq_t *seq)
{
    hy_runner_seq_drop(r, seq);
    free(seq->pages);
    free(seq->swa_pages);
    memset(seq, 0, sizeof *seq);
}
