/*
 * runner.c - batch building and page reservation around one forward pass.
 * Pages for every sequence of the step are reserved before anything runs,
 * and released again if the step cannot run, so a failed step leaves the
 * pool and the sequences exactly as they were.
 */
#include "engine/runner.h"
#include "kv/plan.h"

#include <stdlib.h>
#include <string.h>

static int hy_runner_state_init(hy_runner_t *r, char *err);

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

int hy_runner_init(hy_runner_t *r, hy_model_t *m, hy_backend_t *be,
                   const hy_runner_opts_t *o, char *err)
{
    hy_kv_layout_t lay;
    int rc;

    memset(r, 0, sizeof *r);
    r->model = m;
    r->be = be;
    r->opts = *o;
    if (o->max_tokens < 1 || o->max_outputs < 1 || o->max_seqs < 1 || o->n_ctx < 1 ||
        o->page_tokens < 1 || o->page_tokens > 256)
        return hy_err(err, HY_EINVAL, "runner: bad sizes (tokens %d outputs %d seqs %d ctx %d page %d)",
                      o->max_tokens, o->max_outputs, o->max_seqs, o->n_ctx, o->page_tokens);
    if (r->opts.n_pages == 0) {
        int64_t n = (int64_t)o->max_seqs * ((o->n_ctx + o->page_tokens - 1) / o->page_tokens);

        if (n > INT32_MAX)
            return hy_err(err, HY_ERANGE, "runner: %lld KV pages is too many", (long long)n);
        r->opts.n_pages = (int32_t)n;
    }
    if ((rc = hy_fwd_init(&r->fwd, m, be, o->max_tokens, o->max_outputs, err)) != HY_OK)
        return rc;
    if (!o->caller_pages && (rc = hy_kv_pages_init(&r->pages, r->opts.n_pages, err)) != HY_OK)
        goto fail;
    hy_plan_kv_layout(m, o->page_tokens, r->opts.n_pages, o->kv_type, &lay);
    if ((rc = be->i->kv_init(be, &lay, err)) != HY_OK)
        goto fail;
    if (m->n_rec_layers > 0 && (rc = hy_runner_state_init(r, err)) != HY_OK)
        goto fail;
    r->tok = malloc(sizeof(int32_t) * (size_t)o->max_tokens);
    r->pos = malloc(sizeof(int32_t) * (size_t)o->max_tokens);
    r->out_rows = malloc(sizeof(int32_t) * (size_t)o->max_tokens);
    r->bseqs = malloc(sizeof(hy_batch_seq_t) * (size_t)o->max_seqs);
    if (!r->tok || !r->pos || !r->out_rows || !r->bseqs) {
        rc = hy_err(err, HY_ENOMEM, "out of memory");
        goto fail;
    }
    return HY_OK;
fail:
    hy_runner_free(r);
    return rc;
}

/* One state slot per sequence that may run at once: recurrent state does
 * not grow with the context, so there is nothing to page. */
static int hy_runner_state_init(hy_runner_t *r, char *err)
{
    const hy_model_t *m = r->model;
    hy_state_layout_t lay;
    int64_t *conv = NULL, *rec = NULL;
    int32_t il, k = 0, i;
    int rc;

    r->n_slots = r->opts.n_slots > 0 ? r->opts.n_slots : r->opts.max_seqs;
    conv = calloc((size_t)m->n_rec_layers, sizeof *conv);
    rec = calloc((size_t)m->n_rec_layers, sizeof *rec);
    r->free_slots = malloc(sizeof(int32_t) * (size_t)r->n_slots);
    if (conv == NULL || rec == NULL || r->free_slots == NULL) {
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
    for (i = 0; i < r->n_slots; i++)
        r->free_slots[i] = r->n_slots - 1 - i;
    r->n_free_slots = r->n_slots;
out:
    free(conv);
    free(rec);
    return rc;
}

void hy_runner_free(hy_runner_t *r)
{
    free(r->free_slots);
    hy_fwd_free(&r->fwd);
    hy_kv_pages_free(&r->pages);
    free(r->tok);
    free(r->pos);
    free(r->out_rows);
    free(r->bseqs);
    memset(r, 0, sizeof *r);
}

int hy_runner_step(hy_runner_t *r, hy_runner_item_t *items, int32_t n_items,
                   float *logits, char *err)
{
    int32_t n_tok = 0, n_out = 0, i, j, reserved = 0;
    int32_t *old_pages = NULL;
    bool *new_slot = NULL;
    hy_batch_t b;
    int rc = HY_OK;

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
    old_pages = malloc(sizeof(int32_t) * (size_t)n_items);
    new_slot = calloc((size_t)n_items, sizeof(bool));
    if (old_pages == NULL || new_slot == NULL) {
        free(old_pages);
        free(new_slot);
        return hy_err(err, HY_ENOMEM, "out of memory");
    }
    for (i = 0; r->opts.caller_pages && i < n_items; i++) {
        hy_kv_seq_t *s = items[i].seq;
        int32_t need = (s->n_tokens + items[i].n + r->opts.page_tokens - 1) / r->opts.page_tokens;

        if (s->n_pages < need) {
            rc = hy_err(err, HY_EINVAL, "sequence %d has %d pages, %d positions need %d", i,
                        s->n_pages, s->n_tokens + items[i].n, need);
            goto out;
        }
        for (j = 0; j < need; j++) {
            if (s->pages[j] < 0 || s->pages[j] >= r->opts.n_pages) {
                rc = hy_err(err, HY_EINVAL, "sequence %d: page id %d outside the pool (%d)", i,
                            s->pages[j], r->opts.n_pages);
                goto out;
            }
        }
        if (r->n_slots > 0 && (s->state_slot < 1 || s->state_slot > r->n_slots)) {
            rc = hy_err(err, HY_EINVAL, "sequence %d has no valid state slot (%d)", i,
                        s->state_slot - 1);
            goto out;
        }
    }
    for (i = 0; !r->opts.caller_pages && i < n_items; i++) {
        hy_kv_seq_t *s = items[i].seq;

        old_pages[i] = s->n_pages;
        rc = hy_kv_seq_reserve(&r->pages, s, s->n_tokens + items[i].n, r->opts.page_tokens, err);
        if (rc != HY_OK)
            goto undo;
        reserved = i + 1;
        if (r->n_slots > 0 && s->state_slot == 0) {
            if (r->n_free_slots == 0) {
                rc = hy_err(err, HY_EFULL, "no free recurrent-state slot (%d in use)", r->n_slots);
                goto undo;
            }
            s->state_slot = r->free_slots[--r->n_free_slots] + 1;
            new_slot[i] = true;
            r->be->i->state_clear(r->be, s->state_slot - 1);
        }
    }

    n_tok = n_out = 0;
    for (i = 0; i < n_items; i++) {
        const hy_runner_item_t *it = &items[i];
        hy_batch_seq_t *bs = &r->bseqs[i];

        bs->first = n_tok;
        bs->n = it->n;
        bs->n_past = it->seq->n_tokens;
        bs->pages = it->seq->pages;
        bs->n_pages = it->seq->n_pages;
        bs->state_slot = it->seq->state_slot - 1;
        for (j = 0; j < it->n; j++) {
            r->tok[n_tok + j] = it->tokens[j];
            r->pos[n_tok + j] = it->seq->n_tokens + j;
            if (it->all_logits || j == it->n - 1)
                r->out_rows[n_out++] = n_tok + j;
        }
        n_tok += it->n;
    }
    for (i = 0; i < n_tok; i++) {
        if (r->tok[i] < 0 || r->tok[i] >= r->model->n_vocab) {
            rc = hy_err(err, HY_EINVAL, "token id %d is outside the vocabulary (0..%d)",
                        r->tok[i], r->model->n_vocab - 1);
            goto undo;
        }
    }
    b.n_tokens = n_tok;
    b.token = r->tok;
    b.pos = r->pos;
    b.n_seqs = n_items;
    b.seqs = r->bseqs;
    /* step_begin/step_end let the backend replay the step as a CUDA graph;
     * when its capture could not complete nothing ran: run it again, eagerly */
    if (r->be->i->step_begin)
        r->be->i->step_begin(r->be, &b, n_out);
    rc = hy_model_forward(r->model, &r->fwd, &b, r->out_rows, n_out, logits, err);
    if (r->be->i->step_end && !r->be->i->step_end(r->be))
        rc = hy_model_forward(r->model, &r->fwd, &b, r->out_rows, n_out, logits, err);
    if (rc != HY_OK)
        goto undo;
    for (i = 0; i < n_items; i++)
        items[i].seq->n_tokens += items[i].n;
out:
    free(old_pages);
    free(new_slot);
    return rc;
undo:
    /* give back pages reserved by this step only */
    for (i = 0; i < reserved; i++) {
        hy_kv_seq_t *s = items[i].seq;

        while (s->n_pages > old_pages[i])
            hy_kv_page_unref(&r->pages, s->pages[--s->n_pages]);
        if (new_slot[i]) {
            r->free_slots[r->n_free_slots++] = s->state_slot - 1;
            s->state_slot = 0;
        }
    }
    free(old_pages);
    free(new_slot);
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

void hy_runner_seq_release(hy_runner_t *r, hy_kv_seq_t *seq)
{
    if (r->opts.caller_pages) {
        seq->n_pages = seq->n_tokens = seq->state_slot = 0;
        return;
    }
    if (seq->state_slot > 0)
        r->free_slots[r->n_free_slots++] = seq->state_slot - 1;
    hy_kv_seq_release(&r->pages, seq);
}
