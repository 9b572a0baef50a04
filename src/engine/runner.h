/*
 * runner.h - runs ragged batches of sequences through a model: it owns the
 * forward-pass buffers and the KV page pool, reserves each sequence's pages,
 * builds the hy_batch_t the backend reads, and returns the logits asked for.
 * `hyserve run/eval/bench` drive it directly with one or a few sequences; the
 * coordinator's engine loop feeds it the scheduler's mixed batches, with
 * caller_pages set: pages and state slots then come from the shared page
 * table and the runner only checks that they cover each step.
 */
#ifndef HY_ENGINE_RUNNER_H
#define HY_ENGINE_RUNNER_H

#include "model/model.h"
#include "kv/pages.h"

typedef struct {
    int32_t max_tokens;   /* tokens per step */
    int32_t max_outputs;  /* logit rows per step */
    int32_t max_seqs;     /* sequences per step */
    int32_t n_ctx;        /* longest sequence (positions) */
    int32_t n_pages;      /* KV pages in the pool; 0 = max_seqs * ceil(n_ctx / page_tokens) */
    int32_t page_tokens;  /* default 16 */
    int32_t n_slots;      /* recurrent-state slots; 0 = max_seqs */
    hy_dtype_t kv_type;   /* F16 default (use F32 for exactness tests) */
    /* The caller owns page ids and state slots (the coordinator's shared
     * page table): each step only checks that every sequence's page list
     * covers its new positions and that it has a state slot; the runner
     * allocates, frees and clears nothing. */
    bool caller_pages;
} hy_runner_opts_t;

typedef struct {
    hy_kv_seq_t *seq;       /* the sequence; its n_tokens advances by n */
    const int32_t *tokens;  /* next tokens of the sequence */
    int32_t n;              /* >= 1 */
    bool all_logits;        /* logits for every token, else only the last */
} hy_runner_item_t;

typedef struct {
    hy_model_t *model;
    hy_backend_t *be;
    hy_runner_opts_t opts;
    hy_fwd_t fwd;
    hy_kv_pages_t pages;
    int32_t *tok, *pos, *out_rows; /* [max_tokens] batch scratch */
    int32_t n_slots;               /* recurrent-state slots (0: model has none) */
    int32_t n_free_slots;
    int32_t *free_slots;           /* [n_slots] stack of free slot ids */
    hy_batch_seq_t *bseqs;         /* [max_seqs] */
} hy_runner_t;

void hy_runner_opts_default(hy_runner_opts_t *o);
int hy_runner_init(hy_runner_t *r, hy_model_t *m, hy_backend_t *be,
                   const hy_runner_opts_t *o, char *err);
void hy_runner_free(hy_runner_t *r);

/* One forward pass over all items.  logits receives, item by item, the rows
 * asked for (n rows when all_logits, else 1), each n_vocab floats; NULL
 * leaves them in r->fwd.logits on the backend only.  On error no sequence
 * advances. */
int hy_runner_step(hy_runner_t *r, hy_runner_item_t *items, int32_t n_items,
                   float *logits, char *err);

/* Feeds a whole prompt to one sequence in steps of at most max_tokens and
 * leaves the last token's logits in last_logits. */
int hy_runner_prefill(hy_runner_t *r, hy_kv_seq_t *seq, const int32_t *tokens,
                      int32_t n, float *last_logits, char *err);

void hy_runner_seq_release(hy_runner_t *r, hy_kv_seq_t *seq);

#endif
