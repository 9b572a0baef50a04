/*
 * weight.c - the weight layouts of backend.h: reading a row of either, and
 * rearranging a matrix into 16-row groups (HY_WLAYOUT_ROWS16).
 */
#include "backend/backend.h"

#include <stdlib.h>
#include <string.h>

void hy_weight_row(const hy_weight_t *w, int64_t r, void *dst)
{
    const uint8_t *d = w->data;

    if (w->layout != HY_WLAYOUT_ROWS16) {
        memcpy(dst, d + (size_t)r * w->row_bytes, w->row_bytes);
        return;
    }
    const uint8_t *g = d + (size_t)(r / 16) * 16 * w->row_bytes;
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
    uint8_t *t = malloc(16 * row_bytes);

    if (t == NULL)
        return HY_ENOMEM;
    for (int64_t g = 0; g < rows / 16; g++) {
        uint8_t *d = (uint8_t *)data + (size_t)g * 16 * row_bytes;
        memcpy(t, d, 16 * row_bytes);
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
