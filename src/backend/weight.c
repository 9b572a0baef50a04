/*
 * weight.c - the weight layouts of backend.h: reading a row of either, and
 * rearranging a matrix into 16-row groups (HY_WLAYOUT_ROWS16).
 */
#include "backend/backend.h"

#include <stdlib.h>
#include <string.h>

/* Q8_0's ROWS16 block of 16 rows (backend.h): the offset of row j's d and
 * of its qs word k within the block */
#define HY_R16_Q8_BYTES 34 /* a Q8_0 block: f16 d, 32 int8 */
#define HY_R16_Q8_BLOCK (16 * HY_R16_Q8_BYTES)
#define HY_R16_Q8_D(j) (2 * (size_t)(j))
#define HY_R16_Q8_QS(j, k) (32 + 64 * (size_t)(k) + 4 * (size_t)(j))
_Static_assert(HY_R16_Q8_BLOCK == 32 + 8 * 64, "16 rows' d and qs fill the block");

/* Row j (of 16) of the Q8_0 ROWS16 group g (n blocks) into the file's
 * blocks at row, or (to_r16) the other way round. */
static void hy_weight_q8_0_r16(uint8_t *g, int j, uint8_t *row, int64_t n, bool to_r16)
{
    for (int64_t b = 0; b < n; b++) {
        uint8_t *blk = g + (size_t)b * HY_R16_Q8_BLOCK;
        uint8_t *fb = row + (size_t)b * HY_R16_Q8_BYTES;

        if (to_r16) {
            memcpy(blk + HY_R16_Q8_D(j), fb, 2);
            for (int k = 0; k < 8; k++)
                memcpy(blk + HY_R16_Q8_QS(j, k), fb + 2 + 4 * k, 4);
        } else {
            memcpy(fb, blk + HY_R16_Q8_D(j), 2);
            for (int k = 0; k < 8; k++)
                memcpy(fb + 2 + 4 * k, blk + HY_R16_Q8_QS(j, k), 4);
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
    if (w->type == HY_DTYPE_Q8_0) {
        hy_weight_q8_0_r16((uint8_t *)g, (int)(r % 16), dst,
                           (int64_t)(w->row_bytes / HY_R16_Q8_BYTES), false);
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

    if (type != HY_DTYPE_F32 && type != HY_DTYPE_F16 && type != HY_DTYPE_BF16 &&
        type != HY_DTYPE_Q8_0)
        return HY_EINVAL;
    if ((t = malloc(16 * row_bytes)) == NULL)
        return HY_ENOMEM;
    for (int64_t g = 0; g < rows / 16; g++) {
        uint8_t *d = (uint8_t *)data + (size_t)g * 16 * row_bytes;
        memcpy(t, d, 16 * row_bytes);
        if (type == HY_DTYPE_Q8_0) {
            for (int j = 0; j < 16; j++)
                hy_weight_q8_0_r16(d, j, t + (size_t)j * row_bytes, n, true);
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
