/*
 * plan.h - the memory planner: for a model, a context length and a number of
 * concurrent sequences, how many bytes go to weights (by layer kind), to
 * attention KV pages (growing with the context) and to recurrent-state
 * slots (constant per sequence), next to what a dense model with the same
 * attention in every layer would need.  The runner sizes its pools with the
 * same layouts and the backend's own per-page / per-slot sizes, so the plan
 * is what really gets allocated.
 */
#ifndef HY_KV_PLAN_H
#define HY_KV_PLAN_H

#include <stdio.h>

#include "model/model.h"

#define HY_LAYER_KINDS 7

typedef struct {
    int32_t n_ctx, n_seqs, page_tokens;
    hy_dtype_t kv_type;

    int32_t n_layers[HY_LAYER_KINDS];          /* layers of each kind */
    uint64_t weight_bytes[HY_LAYER_KINDS];     /* tensors of blk.N of that kind */
    uint64_t weight_bytes_other;               /* embeddings, output, final norm */
    int32_t window[HY_LAYER_KINDS];            /* largest window of that kind (ATTN_SWA) */
    uint64_t kv_bytes_per_token[HY_LAYER_KINDS]; /* attention kinds only */
    uint64_t state_bytes_per_seq[HY_LAYER_KINDS]; /* recurrent kinds only */

    uint64_t page_bytes;     /* one KV page over all attention layers */
    uint64_t slot_bytes;     /* one sequence's whole recurrent state */
    int32_t n_pages;         /* n_seqs * ceil(n_ctx / page_tokens) */
    int32_t n_slots;         /* n_seqs, or 0 without recurrent layers */
    uint64_t weights_total, kv_total, state_total;

    /* the same model with full attention (this model's attention config)
     * in every layer */
    uint64_t dense_page_bytes, dense_kv_total;
} hy_plan_t;

/* KV layout of m's attention layers for a pool of n_pages pages. */
void hy_plan_kv_layout(const hy_model_t *m, int32_t page_tokens, int32_t n_pages,
                       hy_dtype_t type, hy_kv_layout_t *out);
/* State layout of m's recurrent layers; conv/rec must hold n_rec_layers. */
void hy_plan_state_layout(const hy_model_t *m, int32_t n_slots, int64_t *conv, int64_t *rec,
                          hy_state_layout_t *out);

int hy_plan_make(hy_plan_t *p, const hy_model_t *m, hy_backend_t *be, int32_t n_ctx,
                 int32_t n_seqs, int32_t page_tokens, hy_dtype_t kv_type, char *err);

/* The hot tier's bytes ([cache] hot_mb, memory_fraction): hot_mb MiB when
 * set, else fraction of what is free where the backend allocates KV pages
 * and state slots (hy_backend_i.mem_info: the GPU's memory with CUDA, not
 * the host's).  HY_EUNSUPPORTED when hot_mb is 0 and the backend cannot
 * say; the backend's error when asking fails. */
int hy_plan_hot_bytes(hy_backend_t *be, uint64_t hot_mb, double fraction, uint64_t *out,
                      char *err);

/* One letter per layer kind, for the per-layer line of the plan:
 * A attention, S sliding window, G gated deltanet, M mamba2, C shortconv,
 * L lightning, - no mixer. */
char hy_plan_kind_letter(hy_layer_kind_t k);

/* Human-readable table or JSON object on f. */
void hy_plan_print(const hy_plan_t *p, const hy_model_t *m, FILE *f, bool json);

#endif
