/*
 * layout.h - what every backend computes the same way, whatever memory it
 * allocates: the bytes of a KV page and of a recurrent-state slot for a
 * layout (so a plan made with one backend quotes the other's allocation),
 * the checks of a KV or state layout, the argument checks of the gdn and ssd
 * ops, and MoE's routing rule (which experts a token picks, with what
 * weights), which the CUDA backend's kernel must reproduce bit for bit.
 * The CPU and CUDA backends both call these; neither includes the other.
 */
#ifndef HY_BACKEND_LAYOUT_H
#define HY_BACKEND_LAYOUT_H

#include "backend/backend.h"
#include "common/kvgroup.h"

/* Longest prefill chunk of the gdn and ssd ops (the CPU kernels' per-thread
 * scratch is O(chunk * (head sizes + chunk))). */
#define HY_GDN_MAX_CHUNK 256
#define HY_SSD_MAX_CHUNK 256

/* Floats: each state region starts on a 64-byte boundary. */
#define HY_REC_ALIGN 16

/* Bytes of one K and V row and of one layer's K and V page of lay. */
int hy_kv_layout_sizes(const hy_kv_layout_t *lay, size_t *krow, size_t *vrow, uint64_t *kpage,
                       uint64_t *vpage, char *err);
/* kv_init's checks of a layout (the backend's largest head: max_head),
 * then hy_kv_layout_sizes. */
int hy_kv_layout_check(const hy_kv_layout_t *lay, int32_t max_head, size_t *krow, size_t *vrow,
                       uint64_t *kpage, uint64_t *vpage, char *err);
/* The page group of KV layer l of lay (HY_KV_FULL / HY_KV_SWA) and the
 * pages of a group's pool. */
int32_t hy_kv_layout_group(const hy_kv_layout_t *lay, int32_t l);
int32_t hy_kv_layout_group_pages(const hy_kv_layout_t *lay, int32_t group);
/* The runs the out store checks a full-group page in (backend.h
 * hy_out_view_t.run_bytes): every K or V rows of one KV head of one layer's
 * page (page_tokens rows) is whole runs, so the attention op checks what it
 * reads without reading more.  0 for a layout hy_kv_layout_sizes refuses. */
uint64_t hy_kv_layout_out_run(const hy_kv_layout_t *lay);
/* Bytes kv_init allocates for lay: per layer, its group's pages times one
 * layer's K and V page (kpage + vpage from hy_kv_layout_sizes), plus, with
 * block-sparse attention, each full-group page's compressed keys. */
uint64_t hy_kv_layout_bytes(const hy_kv_layout_t *lay, uint64_t kpage, uint64_t vpage);
/* The compressed key of one page of one full-group layer with block-sparse
 * attention on (one float key per KV head), else 0: part of the page's
 * cost, so the plan's page bytes, the pool's size and mem_allocated count
 * it.  A block's key (hy_batch_seq_t.sp_keys, the sequence's) is the same
 * size. */
uint64_t hy_kv_sparse_key_bytes(const hy_kv_layout_t *lay);
/* The batch an attention op of a layer of `group` reads: b itself for the
 * full group, else a copy whose sequences' pages are their sliding-group
 * pages (seqs: the copy's [b->n_seqs] array). */
const hy_batch_t *hy_kv_group_batch(const hy_batch_t *b, int32_t group, hy_batch_t *copy,
                                    hy_batch_seq_t *seqs);
/* The attention op's check of one sequence's pages: the ones its tokens
 * can see (from the first token's window start, all of them when window
 * is 0) must be ids of a pool of n_pool pages, those below the sequence's
 * n_checked (b's, the full group's) taken as checked.  HY_OK, or
 * HY_ERANGE with the message in err. */
int hy_kv_check_seq_pages(const hy_batch_t *b, int32_t s, int32_t page_tokens, int32_t window,
                          int32_t n_pool, char *err);
/* Floats of one state slot, and where each layer's conv window and state
 * start in it (conv_off / rec_off may be NULL). */
int hy_state_layout_floats(const hy_state_layout_t *lay, int64_t *conv_off, int64_t *rec_off,
                           int64_t *slot_floats, char *err);
/* What every backend's state_init needs before it allocates: the layout
 * checked, *meta = malloc'd [4][n_layers] (conv offsets, rec offsets, conv
 * floats, rec floats; the caller owns it), the floats of one slot and the
 * bytes of all n_slots slots. */
int hy_state_layout_plan(const hy_state_layout_t *lay, int64_t **meta, int64_t *slot_floats,
                         uint64_t *total_bytes, char *err);
/* hy_backend_i.mem_sizes for a backend that lays memory out as above. */
int hy_layout_mem_sizes(hy_backend_t *be, const hy_kv_layout_t *kv, const hy_state_layout_t *st,
                        uint64_t *page_bytes, uint64_t *slot_bytes, char *err);

/* Floats one gdn / ssd layer keeps per state slot: what its rec_floats
 * must be.  chunk 1: the states alone (gdn H d_k d_v, S[i][j]; ssd H P N,
 * S[p][n]).  chunk C >= 2 (the canonical block form, docs/determinism.md):
 * all heads' states first, at the same offsets as with chunk 1, then per
 * head the current block's rows since the last multiple of C: gdn
 * k^T [d_k][C], delta [C][d_v], G [C]; ssd B^T [N][C], x [C][P], dt [C],
 * cum [C]. */
int64_t hy_gdn_state_floats(const hy_gdn_params_t *p);
int64_t hy_ssd_state_floats(const hy_ssd_params_t *p);

/* The argument checks of the gdn and ssd ops: HY_EINVAL with the message
 * in err, or HY_OK. */
int hy_gdn_check(const hy_gdn_params_t *p, int32_t qkv_stride, char *err);
int hy_ssd_check(const hy_ssd_params_t *p, int32_t x_stride, int32_t dt_stride,
                 int32_t bc_stride, char *err);

/* One token's expert choice and weights (see hy_moe_t for each family's
 * math): l[n_expert] router logits, bias[n_expert] selection bias or NULL;
 * p and taken are n_expert scratch; sel[k] and w[k] out. */
void hy_moe_route_one(const hy_moe_t *m, const float *l, const float *bias, float *p,
                      uint8_t *taken, int32_t *sel, float *w);

#endif
