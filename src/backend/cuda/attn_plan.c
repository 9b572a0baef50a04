/*
 * attn_plan.c - how hy_cuda_attention cuts a batch for the kernels in
 * kernels/hy_attn.cu: the flash kernel's tiles (sequence, first row, key
 * range) for prefilling sequences and the token list left to the decode
 * kernel (whose KV parts hy_kernels.h's hy_cuk_parts sizes).  Kept free of
 * CUDA calls so the plan is tested without a GPU.
 */
#include "backend/cuda/attn_plan.h"

#include <stdlib.h>

/* Longest key range first; ties in batch order so the plan is deterministic. */
static int hy_cuda_tile_cmp(const void *pa, const void *pb)
{
    const hy_cuk_attn_tile_t *a = pa, *b = pb;
    int64_t la = (int64_t)a->kmax - a->kmin, lb = (int64_t)b->kmax - b->kmin;

    if (la != lb)
        return la > lb ? -1 : 1;
    if (a->seq != b->seq)
        return a->seq < b->seq ? -1 : 1;
    return a->r0 < b->r0 ? -1 : a->r0 > b->r0;
}

int32_t hy_cuda_attn_plan(const hy_batch_t *b, int32_t group, int32_t window,
                          int32_t tile_rows, int32_t min_tok, hy_cuk_attn_tile_t *tiles,
                          int32_t *toks, int32_t *n_toks)
{
    int32_t n_tiles = 0, n_gen = 0;
    const bool fill = toks != NULL;

    for (int32_t s = 0; s < b->n_seqs; s++) {
        const hy_batch_seq_t *sq = &b->seqs[s];
        int64_t rows = (int64_t)sq->n * group;

        /* rows are int32 in the kernel: a (never seen) larger sequence
         * takes the decode kernel rather than overflow */
        if (tile_rows <= 0 || group < 1 || sq->n < min_tok || rows > INT32_MAX - tile_rows) {
            if (fill)
                for (int32_t t = sq->first; t < sq->first + sq->n; t++)
                    toks[n_gen++] = t;
            continue;
        }
        for (int64_t r0 = 0; r0 < rows; r0 += tile_rows) {
            if (fill) {
                hy_cuk_attn_tile_t *tl = &tiles[n_tiles];
                int64_t r1 = r0 + tile_rows < rows ? r0 + tile_rows : rows;
                int32_t kmin = INT32_MAX, kmax = -1;
                /* rows r0..r1-1 are tokens r0/group .. (r1-1)/group */
                for (int64_t f = r0 / group; f <= (r1 - 1) / group; f++) {
                    int32_t p = b->pos[sq->first + f];
                    int32_t lo = window > 0 ? HY_MAX(0, p - window + 1) : 0;
                    kmin = HY_MIN(kmin, lo);
                    kmax = HY_MAX(kmax, p);
                }
                *tl = (hy_cuk_attn_tile_t){s, sq->first, sq->n, (int32_t)r0, kmin, kmax, {0, 0}};
            }
            n_tiles++;
        }
    }
    if (fill && n_tiles > 0)
        qsort(tiles, (size_t)n_tiles, sizeof *tiles, hy_cuda_tile_cmp);
    if (n_toks)
        *n_toks = n_gen;
    return n_tiles;
}
