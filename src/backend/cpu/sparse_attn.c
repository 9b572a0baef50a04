/*
 * sparse_attn.c - block-sparse attention's compressed keys, block choice
 * and exact attention over the chosen blocks (sparse_attn.h).  The keys
 * are plain means, summed in page order so the same pages always give the
 * same bits; the choice is a bounded insertion into the best-so-far list
 * (k is tens, the blocks thousands), with the blocks a token must always
 * read scored +infinity so they are chosen like any other; the attention
 * itself is the dense kernels' own arithmetic on a shorter page list.
 */
#include "backend/cpu/sparse_attn.h"
#include "backend/cpu/quant.h"

#include <math.h>
#include <string.h>

/* Row s of a page's keys (at row) as floats. */
static void sp_key_row(const hy_attn_flash_t *f, const uint8_t *row, float *out)
{
    if (f->kv_f32) {
        memcpy(out, row, sizeof(float) * (size_t)f->hd);
    } else if (f->kv_f16) {
        const uint16_t *h = (const uint16_t *)(const void *)row;

        for (int32_t i = 0; i < f->hd; i++)
            out[i] = hy_f16_to_f32(h[i]);
    } else {
        f->to_float(row, out, f->hd);
    }
}

void hy_sparse_page_key(const hy_attn_flash_t *f, int32_t page, float *out)
{
    const uint8_t *base = f->k_base + (size_t)page * f->k_page_bytes;
    float row[HY_ATTN_MAX_HEAD_DIM];

    memset(out, 0, sizeof(float) * (size_t)f->hd);
    for (int32_t s = 0; s < f->page_tokens; s++) {
        sp_key_row(f, base + (size_t)s * f->k_row_bytes, row);
        for (int32_t i = 0; i < f->hd; i++)
            out[i] += row[i];
    }
    for (int32_t i = 0; i < f->hd; i++)
        out[i] /= (float)f->page_tokens;
}

void hy_sparse_block_key(const float *page_keys, size_t stride, const int32_t *pages, int32_t n,
                         int32_t hd, float *out)
{
    memset(out, 0, sizeof(float) * (size_t)hd);
    for (int32_t p = 0; p < n; p++) {
        const float *k = page_keys + (size_t)pages[p] * stride;

        for (int32_t i = 0; i < hd; i++)
            out[i] += k[i];
    }
    for (int32_t i = 0; i < hd && n > 0; i++)
        out[i] /= (float)n;
}

/* Whether block a ranks before block b (higher score; the earlier block
 * on a tie). */
static bool sp_before(const float *score, int32_t a, int32_t b)
{
    return score[a] > score[b] || (score[a] == score[b] && a < b);
}

int32_t hy_sparse_select(const float *q, int32_t q_stride, int32_t n_heads, int32_t hd,
                         const float *block_keys, int32_t cur, const hy_sparse_params_t *sp,
                         int32_t *out, float *scratch)
{
    int32_t sink = HY_MIN(HY_MAX(sp->sink_blocks, 0), cur);
    int32_t local = HY_MAX(cur - HY_MAX(sp->local_blocks, 0), sink);
    int32_t want = HY_MIN(cur, sink + (cur - local) + HY_MAX(sp->topk, 0)), m = 0;

    for (int32_t b = 0; b < cur; b++) {
        float s = 0;

        if (b < sink || b >= local) {
            scratch[b] = INFINITY; /* always read */
            continue;
        }
        for (int32_t h = 0; h < n_heads; h++) {
            const float *qh = q + (size_t)h * (size_t)q_stride, *k = block_keys + (size_t)b * hd;

            for (int32_t i = 0; i < hd; i++)
                s += qh[i] * k[i];
        }
        scratch[b] = isnan(s) ? -INFINITY : s;
    }
    /* the best `want` blocks, best first */
    for (int32_t b = 0; b < cur && want > 0; b++) {
        int32_t i;

        if (m == want && !sp_before(scratch, b, out[m - 1]))
            continue;
        i = m < want ? m++ : m - 1;
        for (; i > 0 && sp_before(scratch, b, out[i - 1]); i--)
            out[i] = out[i - 1];
        out[i] = b;
    }
    /* ascending: the order the keys lie in the sequence */
    for (int32_t i = 1; i < m; i++) {
        int32_t b = out[i], j = i;

        for (; j > 0 && out[j - 1] > b; j--)
            out[j] = out[j - 1];
        out[j] = b;
    }
    return m;
}

int hy_sparse_attend(const hy_attn_flash_t *f, const int32_t *blocks, int32_t n,
                     int32_t block_pages, int32_t *page_scratch,
                     void (*kernel)(const hy_attn_flash_t *f, float *scratch), float *scratch)
{
    int32_t pt = f->page_tokens, bt, pos, cur, np = 0, vpos;
    hy_attn_flash_t g;

    if (f->t1 != f->t0 + 1 || f->window != 0 || block_pages < 1 || n < 0)
        return HY_EINVAL;
    bt = block_pages * pt;
    pos = f->pos[f->t0];
    cur = pos / bt;
    for (int32_t i = 0; i < n; i++) {
        if (blocks[i] < 0 || blocks[i] >= cur || (i > 0 && blocks[i] <= blocks[i - 1]))
            return HY_EINVAL;
        for (int32_t j = 0; j < block_pages; j++)
            page_scratch[np++] = f->pages[blocks[i] * block_pages + j];
    }
    /* the token's own block, up to its page */
    for (int32_t p = cur * block_pages; p <= pos / pt; p++)
        page_scratch[np++] = f->pages[p];
    /* the token sits after the chosen blocks, at its offset in its own */
    vpos = n * bt + (pos - cur * bt);
    g = *f;
    g.pages = page_scratch;
    g.q = f->q + (size_t)f->t0 * (size_t)f->q_stride;
    g.out = f->out + (size_t)f->t0 * (size_t)f->out_stride;
    g.pos = &vpos;
    g.t0 = 0;
    g.t1 = 1;
    kernel(&g, scratch);
    return HY_OK;
}
