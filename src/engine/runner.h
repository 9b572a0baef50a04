/*
 * runner.h - runs ragged batches of sequences through a model: it owns the
 * forward-pass buffers, builds the hy_batch_t the backend reads, and returns
 * the logits asked for.  Page ids and recurrent-state slots come from one
 * page table (ipc/pagetable.h), the allocator the server runs: the engine
 * hands the runner the shared segment's table (and gives each sequence its
 * pages itself, with prefix hits and preemption); `hyserve eval/bench`, the
 * golden tests and the long-context test let the runner make a private one
 * (no mutex, so no lock calls).  Either way a step tops up what a sequence
 * lacks for its new positions from the table and checks the rest.
 *
 * Sliding-window layers (common/kvgroup.h) keep KV in their own page
 * group: a sequence's sliding pages older than what its next token sees
 * go back to the table (hy_runner_seq_trim; a step trims its sequences
 * before it reserves), so they hold about a window, not the context.
 */
#ifndef HY_ENGINE_RUNNER_H
#define HY_ENGINE_RUNNER_H

#include "engine/outstore.h"
#include "ipc/pagetable.h"
#include "model/model.h"

/* One sequence's KV pages, one list per page group: pages[i] (and
 * swa_pages[i]) hold positions i*page_tokens .. +page_tokens-1.  The
 * arrays are malloc'd (the runner grows them when it must). */
typedef struct {
    int32_t *pages;     /* [cap] full-group page ids from the runner's table */
    int32_t n_pages;
    int32_t cap;
    int32_t n_tokens;   /* positions already written */
    int32_t state_slot; /* recurrent-state slot + 1 (0 = none yet) */
    int32_t *swa_pages; /* [swa_cap] sliding-group page ids; -1 below swa_lo */
    int32_t n_swa_pages;/* blocks covered, the released ones included */
    int32_t swa_cap;
    int32_t swa_lo;     /* blocks below it are back in the table */
    /* block-sparse attention's block keys (hy_batch_seq_t.sp_keys): sp_cap
     * blocks, from the runner at the sequence's first step, freed by
     * hy_runner_seq_drop; blocks below sp_valid hold their keys.  Whoever
     * changes pages[] below sp_valid's pages lowers it (0: the next step
     * averages them again from the page keys). */
    float *sp_keys;
    int32_t sp_cap;
    int32_t sp_valid;
    /* pages[0 .. n_checked) were checked to be the table's ids by an
     * earlier step (hy_batch_seq_t.n_checked); whoever writes pages[]
     * below it lowers it */
    int32_t n_checked;
    /* blocks from the sink on below it were looked at for demotion
     * (hy_runner_opts_t.hot_blocks): those not kept hot are out */
    int32_t n_out_blocks;
    uint64_t out_reads[3]; /* blocks its sparse tokens read from the out arena, of
                              those with a page from the spill file, and in all
                              (backend.h out_reads), per layer and KV head; the
                              caller takes them */
} hy_kv_seq_t;

typedef struct {
    int32_t max_tokens;   /* tokens per step */
    int32_t max_outputs;  /* logit rows per step */
    int32_t max_seqs;     /* sequences per step */
    int32_t n_ctx;        /* longest sequence (positions) */
    int32_t n_pages;      /* KV pages in the pool; 0 = max_seqs * ceil(n_ctx / page_tokens) */
    int32_t page_tokens;  /* default 16 */
    int32_t n_slots;      /* recurrent-state slots; 0 = max_seqs */
    hy_dtype_t kv_type;   /* F16 default (use F32 for exactness tests) */
    bool swa_full;        /* sliding layers keep every position too (no sliding group) */
    hy_kv_sparse_t sparse; /* block-sparse full-attention layers; zeros: dense */
    /* A hot window per sequence (block-sparse only; 0: every page hot):
     * after each step a sequence's full blocks older than its last
     * hot_blocks complete ones (its sink blocks excepted) leave the pool:
     * their bytes go to the runner's out arena of out_pages pages (host
     * memory; when it is full the rest stay hot) and their pool pages go
     * back to the table; the attention op copies a chosen block from
     * there (backend.h, hy_batch_seq_t.out).  out_warm of them (0: all)
     * are in RAM, the rest in a spill file under out_dir
     * (engine/outstore.h).  hot_blocks * block
     * tokens must reach sparse.min_tokens (a dense token reads every
     * page) and exceed the local blocks. */
    int32_t hot_blocks;
    int32_t out_pages;
    int32_t out_warm;
    const char *out_dir;
    /* The page table to take pages and state slots from (the engine's);
     * n_pages, page_tokens and n_slots then come from it: its pages, and
     * its state slots followed by its checkpoint slots in the backend's
     * state arena; a table without sliding pages means no sliding group.
     * NULL: the runner makes a private one of the sizes above, with
     * max_seqs * hy_kv_swa_peak_blocks(window, page_tokens, max_tokens,
     * n_ctx) sliding pages (what kv/plan.c quotes). */
    hy_pt_t *pt;
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
    hy_pt_t *pt;                   /* opts.pt, or the private table */
    bool own_pt;
    int32_t *tok, *pos, *out_rows; /* [max_tokens] batch scratch */
    int32_t *old_pages;            /* [max_seqs] page counts before this step */
    int32_t *old_swa;              /* [max_seqs] sliding page counts before this step */
    int32_t swa_window;            /* the sliding group's window (0: no sliding group) */
    uint8_t *layer_swa;            /* [n_kv_layers] the KV layout's group of each layer */
    uint64_t page_bytes[HY_KV_GROUPS]; /* one page of each group in the backend */
    bool *new_slot;                /* [max_seqs] this step gave the sequence its state slot */
    int32_t n_slots;               /* backend state slots (0: the model has no recurrent layers) */
    int32_t n_live_slots;          /* of which the table hands to sequences */
    int32_t sp_cap;                /* blocks of n_ctx: a sequence's block keys (0: not sparse) */
    size_t sp_seq_floats;          /* one sequence's block keys */
    hy_outstore_t *out;            /* pages beyond the hot windows (hot_blocks > 0) */
    bool out_warned;               /* its last failure was logged */
    hy_batch_seq_t *bseqs;         /* [max_seqs] */
} hy_runner_t;

void hy_runner_opts_default(hy_runner_opts_t *o);
int hy_runner_init(hy_runner_t *r, hy_model_t *m, hy_backend_t *be,
                   const hy_runner_opts_t *o, char *err);
void hy_runner_free(hy_runner_t *r);

/* One forward pass over all items.  Pages (and a cleared state slot) that
 * a sequence lacks for its new positions are taken from the table first;
 * HY_EFULL when the table has too few.  logits receives, item by item, the
 * rows asked for (n rows when all_logits, else 1), each n_vocab floats;
 * NULL leaves them in r->fwd.logits on the backend only.  On error no
 * sequence advances and what this step took goes back. */
int hy_runner_step(hy_runner_t *r, hy_runner_item_t *items, int32_t n_items,
                   float *logits, char *err);

/* Feeds a whole prompt to one sequence in steps of at most max_tokens and
 * leaves the last token's logits in last_logits. */
int hy_runner_prefill(hy_runner_t *r, hy_kv_seq_t *seq, const int32_t *tokens,
                      int32_t n, float *last_logits, char *err);

/* Gives back the sliding pages seq's next token cannot see any more
 * (below hy_kv_swa_first_block of its positions).  A hashed one stays
 * cached, at the front of the LRU unless it lies in the window before one
 * of keep[0..n_keep) (token boundaries a later request may resume from),
 * where it waits its turn like any finished prefix's page. */
void hy_runner_seq_trim(hy_runner_t *r, hy_kv_seq_t *seq, const int32_t *keep, int32_t n_keep);
/* Bytes of one sequence's block-sparse block keys (0: not sparse); the
 * plan's sparse_seq_bytes. */
uint64_t hy_runner_sparse_seq_bytes(const hy_runner_t *r);
/* The out arena: its bytes, and how many of its pages hold a page now. */
uint64_t hy_runner_out_bytes(const hy_runner_t *r);
int32_t hy_runner_out_used(const hy_runner_t *r);
/* Gives seq's pages and state slot back to the table and empties it; the
 * page arrays stay for reuse, the block keys are freed. */
void hy_runner_seq_drop(hy_runner_t *r, hy_kv_seq_t *seq);
/* hy_runner_seq_drop, then frees the page array. */
void hy_runner_seq_release(hy_runner_t *r, hy_kv_seq_t *seq);

#endif
