/*
 * sparse_attn.h - block-sparse attention over the paged KV cache, the
 * training-free InfLLM-v2 way (issue 14): every full page keeps a
 * compressed key per KV head (the mean of its keys); a block is
 * block_pages consecutive pages of a sequence, its key the mean of its
 * pages' keys; a decoding token's query group (the query heads of one KV
 * head) scores every full block before its own (q . key for one head;
 * with several, each head's softmax over the blocks, summed), reads the top-k
 * of them plus the sink blocks (the sequence's first) and the local blocks
 * (the ones just before its own), and attends exactly over those and its
 * own block: the kernels of attn_flash.h run on a compacted page list in
 * which the token sits at its offset after the chosen blocks.  Keys are
 * stored after RoPE, so a score depends on the vectors only, and the
 * result is dense attention with every other block masked out.
 *
 * Only the selected blocks' pages are read, which is what would let the
 * rest live in a lower tier (docs/tiers.md).  The functions below are the
 * arithmetic; cpu_impl.h's hy_cpu_sparse_* are the backend's glue: the
 * keys of every full page kept per layer as pages fill (and rebuilt when
 * the tiers write a page back), and the path attention.c sends a token of
 * a full-attention layer down when [attention] sparse = block and its
 * position is sparse_min_tokens or more (docs/sparse.md).
 */
#ifndef HY_BACKEND_CPU_SPARSE_ATTN_H
#define HY_BACKEND_CPU_SPARSE_ATTN_H

#include "backend/cpu/attn_flash.h"

typedef struct {
    int32_t block_pages;  /* pages per block (sparse_block_tokens / page_tokens), >= 1 */
    int32_t topk;         /* blocks chosen by score, >= 0 (with topp: at least) */
    int32_t sink_blocks;  /* the sequence's first blocks, always read */
    int32_t local_blocks; /* the blocks just before the token's own, always read */
    float scale, softcap; /* the layer's attention logits: scale * q . k, then softcap *
                           * tanh(x / softcap) when softcap > 0 (a group's heads' softmax) */
    float topp;           /* 0, or the group's block mass the chosen blocks reach */
    int32_t max_blocks;   /* with topp: at most this many chosen by score */
} hy_sparse_params_t;

/* The compressed key of one KV head of a full page: the mean of its
 * page_tokens keys, in f32 (out[f->hd]).  f addresses that head's pages
 * (k_base, k_page_bytes, k_row_bytes, row type) as for the kernels; page
 * is a pool page id. */
void hy_sparse_page_key(const hy_attn_flash_t *f, int32_t page, float *out);

/* A block's key: the mean of its n pages' keys (page_keys + page * stride
 * floats holds page's key; equal-sized pages, so this is the mean of the
 * block's keys).  The backend writes it into the sequence's block keys
 * (hy_batch_seq_t.sp_keys) once the block is complete, so that choosing
 * reads one key per block, in a row, instead of averaging block_pages of
 * them per token. */
void hy_sparse_block_key(const float *page_keys, size_t stride, const int32_t *pages, int32_t n,
                         int32_t hd, float *out);

/* The blocks one query group reads for a token in block cur (0-based, in
 * blocks of sp->block_pages pages): the sink blocks, the local blocks and
 * the top-k other full blocks before cur (block b's key: block_keys + b *
 * key_stride, hd floats), scored by the group's n_heads queries (q + h *
 * q_stride).  One head: q . key.  Several: log sum_h p_h(b), p_h the
 * softmax over the candidate blocks of head h's logits (sp->scale,
 * sp->softcap) - each head's preference counts, whatever the others'
 * (InfLLM-v2's rule; summing the queries first let them cancel).  In one
 * fixed order: the same bits for a token whatever else runs; a NaN counts
 * as -inf, ties go to the earlier block.  With sp->topp > 0 the choice
 * goes on past the top-k, best first, until the chosen blocks hold topp of
 * the group's mass (sum over blocks and heads of p_h(b) is n_heads; one
 * head takes the same rule), if sp->max_blocks of them can: a token whose
 * heads spread their attention over a few hundred blocks reads them, one
 * whose heads point reads the top-k, and one whose attention is flatter
 * than the cap can hold reads the top-k too.  Returns how many (each block once) in out, ascending;
 * scratch holds hy_sparse_select_floats(n_heads, cur) floats. */
size_t hy_sparse_select_floats(int32_t n_heads, int32_t cur);
/* log(sum_i exp(x[i * stride])) over i < n in the choice's order: the
 * largest first, then exp(x - it) (vexp.h) added into partial sum i mod 8
 * in index order, the partials as ((p0 + p1) + (p2 + p3)) + ((p4 + p5) +
 * (p6 + p7)), and vexp.h's log; -inf when none is above -inf (a head's
 * normalizer and the group's sum).  The same bits at every level. */
float hy_sparse_logsumexp(const float *x, size_t stride, int32_t n);
/* The scores hy_sparse_select ranks blocks 0..nb of keys by when a group
 * has several heads (the rule above): out[b] for b < nb and -inf up to
 * the next multiple of 4; raw holds n_heads rows of that many floats.
 * The same bits at every level (AVX2 or not); exported so that the tests
 * check them. */
void hy_sparse_group_scores(const float *q, int32_t q_stride, int32_t n_heads, int32_t hd,
                            const hy_sparse_params_t *sp, const float *keys, size_t key_stride,
                            int32_t nb, float *raw, float *out);
int32_t hy_sparse_select(const float *q, int32_t q_stride, int32_t n_heads, int32_t hd,
                         const float *block_keys, size_t key_stride, int32_t cur,
                         const hy_sparse_params_t *sp, int32_t *out, float *scratch);

/* Unit f (one query token t0 = t1 - 1, heads h0..h1 of one KV head, full
 * causal attention: window 0) over the n blocks in blocks (ascending,
 * before the token's own) and the token's own block up to its position:
 * kernel (hy_attn_decode_* or hy_attn_flash_*) on the compacted page list
 * (page_scratch: room for (n + 1) * block_pages ids).  HY_EINVAL for a
 * unit it cannot take. */
int hy_sparse_attend(const hy_attn_flash_t *f, const int32_t *blocks, int32_t n,
                     int32_t block_pages, int32_t *page_scratch,
                     void (*kernel)(const hy_attn_flash_t *f, float *scratch), float *scratch);

#endif
