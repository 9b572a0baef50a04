/*
 * weight.c - the weight layouts of backend.h: reading a row of either, and
 * rearranging a matrix into 16-row groups (HY_WLAYOUT_ROWS16).
 */
#include "backend/backend.h"

#include <stdlib.h>
#include <string.h>

/* fields of a quantized block in ROWS16: Q8_0's d and 8 words */
#define HY_R16_MAX_FIELDS 9

/* The fields of a block of the quantized types ROWS16 takes (backend.h),
 * in their order there: offset and bytes in the file's block; 0 for
 * another type. */
static int hy_r16_fields(hy_dtype_t t, uint8_t off[HY_R16_MAX_FIELDS],
                         uint8_t len[HY_R16_MAX_FIELDS])
{
    /* the f16 d first, Q5_1's f16 m, Q5_x's 32 high bits, then the words
     * of qs */
    const int q51 = t == HY_DTYPE_Q5_1, q5 = q51 || t == HY_DTYPE_Q5_0;
    const int qs = q51 ? 8 : q5 ? 6 : 2;
    const int words = t == HY_DTYPE_Q8_0 ? 8 : 4;
    int n = 0;

    if (t != HY_DTYPE_Q8_0 && t != HY_DTYPE_Q4_0 && t != HY_DTYPE_IQ4_NL && !q5)
        return 0;
    off[n] = 0, len[n++] = 2;
    if (q51)
        off[n] = 2, len[n++] = 2;
    if (q5)
        off[n] = (uint8_t)(q51 ? 4 : 2), len[n++] = 4;
    for (int k = 0; k < words; k++)
        off[n] = (uint8_t)(qs + 4 * k), len[n++] = 4;
    return n;
}

bool hy_weight_rows16_type(hy_dtype_t t)
{
    uint8_t off[HY_R16_MAX_FIELDS], len[HY_R16_MAX_FIELDS];

    return t == HY_DTYPE_F32 || t == HY_DTYPE_F16 || t == HY_DTYPE_BF16 ||
           hy_r16_fields(t, off, len) > 0;
}

/* Row j (of 16) of the quantized ROWS16 group g (n blocks of type t) into
 * the file's blocks at row, or (to_r16) the other way round; only the
 * destination is written (hy_weight_row passes its const group). */
static void hy_weight_r16_blocks(hy_dtype_t t, uint8_t *g, int j, uint8_t *row, int64_t n,
                                 bool to_r16)
{
    uint8_t off[HY_R16_MAX_FIELDS], len[HY_R16_MAX_FIELDS];
    const int nf = hy_r16_fields(t, off, len);
    const size_t bs = hy_dtype_info(t)->block_bytes;

    for (int64_t b = 0; b < n; b++) {
        uint8_t *blk = g + (size_t)b * 16 * bs, *fb = row + (size_t)b * bs;
        size_t pos = 0;

        for (int f = 0; f < nf; pos += 16 * (size_t)len[f], f++) {
            uint8_t *r16 = blk + pos + (size_t)j * len[f];
            if (to_r16)
                memcpy(r16, fb + off[f], len[f]);
            else
                memcpy(fb + off[f], r16, len[f]);
        }
    }
}

void hy_weight_row(const hy_weight_t *w, int64_t r, void *dst)
{
    const uint8_t *d = w->data;

    if (w->layout != HY_WLAYOUT_ROWS16) {
        memcpy(dst, d + (size_t)r * w->row_bytes, w->row_bytes);
        return;
    }
    const uint8_t *g = d + (size_t)(r / 16) * 16 * w->row_bytes;
    if (hy_dtype_info(w->type)->block > 1) {
        hy_weight_r16_blocks(w->type, (uint8_t *)g, (int)(r % 16), dst,
                             (int64_t)(w->row_bytes / hy_dtype_info(w->type)->block_bytes),
                             false);
        return;
    }
    /* typed loops, as below: the embedding lookup gathers every prompt
     * token's row this way */
    if (hy_dtype_info(w->type)->block_bytes == 2) {
        const uint16_t *s = (const uint16_t *)g + r % 16;
        uint16_t *o = dst;
        for (int64_t i = 0; i < w->ne[0]; i++)
            o[i] = s[i * 16];
    } else {
        const uint32_t *s = (const uint32_t *)g + r % 16;
        uint32_t *o = dst;
        for (int64_t i = 0; i < w->ne[0]; i++)
            o[i] = s[i * 16];
    }
}

int hy_weight_to_rows16(void *data, hy_dtype_t type, int64_t rows, size_t row_bytes)
{
    const size_t esz = hy_dtype_info(type)->block_bytes;
    const int64_t n = (int64_t)(row_bytes / esz);
    uint8_t *t;

    if (!hy_weight_rows16_type(type))
        return HY_EINVAL;
    if ((t = malloc(16 * row_bytes)) == NULL)
        return HY_ENOMEM;
    for (int64_t g = 0; g < rows / 16; g++) {
        uint8_t *d = (uint8_t *)data + (size_t)g * 16 * row_bytes;
        memcpy(t, d, 16 * row_bytes);
        if (hy_dtype_info(type)->block > 1) {
            for (int j = 0; j < 16; j++)
                hy_weight_r16_blocks(type, d, j, t + (size_t)j * row_bytes, n, true);
            continue;
        }
        /* typed loops: Gemma 3's 262K x 640 F16 output matrix moves in a
         * fraction of a second at load */
        for (int j = 0; j < 16; j++) {
            if (esz == 2) {
                const uint16_t *s = (const uint16_t *)(t + (size_t)j * row_bytes);
                uint16_t *o = (uint16_t *)d + j;
                for (int64_t i = 0; i < n; i++)
                    o[i * 16] = s[i];
            } else {
                const uint32_t *s = (const uint32_t *)(t + (size_t)j * row_bytes);
                uint32_t *o = (uint32_t *)d + j;
                for (int64_t i = 0; i < n; i++)
                    o[i * 16] = s[i];
            }
        }
    }
    free(t);
    return HY_OK;
}
