/*
 * weight.c - the weight layouts of backend.h: reading a row of either, and
 * rearranging a matrix into 16-row groups (HY_WLAYOUT_ROWS16).
 */
#include "backend/backend.h"

#include <stdlib.h>
#include <string.h>

/* A run of n consecutive fields of len bytes at byte off of the file's
 * block; ROWS16 stores each field for the 16 rows together (16 * len
 * bytes), the runs in their order here. */
typedef struct {
    uint8_t off, len, n;
} hy_r16_run_t;

/* runs of a quantized block in ROWS16 at most (Q5_1's, Q5_K's, Q6_K's...) */
#define HY_R16_MAX_RUNS 4

/* The runs of a block of the quantized types ROWS16 takes (backend.h);
 * 0 for another type.  A kernel reading the layout finds a 4-byte field
 * of 16 rows in one zmm, the codes of a word of the file's block lined up
 * by row; the kernels (qmm_avx2.c's hy_q2_r16_* and hy_q2_k16_*,
 * quant_avx512.c's HY_A5T_R16) read fields at the offsets this gives. */
static int hy_r16_runs(hy_dtype_t t, hy_r16_run_t r[HY_R16_MAX_RUNS])
{
    static const struct {
        hy_dtype_t t;
        hy_r16_run_t r[HY_R16_MAX_RUNS];
    } runs[] = {
        /* the 32-element types: the f16 d, Q4_1's and Q5_1's f16 m,
         * Q5_x's 32 high bits, the words of qs */
        {HY_DTYPE_Q8_0, {{0, 2, 1}, {2, 4, 8}}},
        {HY_DTYPE_Q4_0, {{0, 2, 1}, {2, 4, 4}}},
        {HY_DTYPE_Q4_1, {{0, 2, 1}, {2, 2, 1}, {4, 4, 4}}},
        {HY_DTYPE_IQ4_NL, {{0, 2, 1}, {2, 4, 4}}},
        {HY_DTYPE_Q5_0, {{0, 2, 1}, {2, 4, 1}, {6, 4, 4}}},
        {HY_DTYPE_Q5_1, {{0, 2, 1}, {2, 2, 1}, {4, 4, 1}, {8, 4, 4}}},
        /* the super-blocks, in the file's order: d and dmin (one word),
         * the packed scales, Q5_K's qh, qs */
        {HY_DTYPE_Q4_K, {{0, 4, 1}, {4, 4, 3}, {16, 4, 32}}},
        {HY_DTYPE_Q5_K, {{0, 4, 1}, {4, 4, 3}, {16, 4, 8}, {48, 4, 32}}},
        /* ql, qh, the 16 int8 scales, d */
        {HY_DTYPE_Q6_K, {{0, 4, 32}, {128, 4, 16}, {192, 4, 4}, {208, 2, 1}}},
        /* scales and mins, qs, d and dmin */
        {HY_DTYPE_Q2_K, {{0, 4, 4}, {16, 4, 16}, {80, 4, 1}}},
        /* hmask, qs, the packed scales, d */
        {HY_DTYPE_Q3_K, {{0, 4, 8}, {32, 4, 16}, {96, 4, 3}, {108, 2, 1}}},
        /* d and scales_h, scales_l, qs */
        {HY_DTYPE_IQ4_XS, {{0, 4, 1}, {4, 4, 1}, {8, 4, 32}}},
    };

    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        if (runs[i].t != t)
            continue;
        int n = 0;
        while (n < HY_R16_MAX_RUNS && runs[i].r[n].n)
            r[n] = runs[i].r[n], n++;
        return n;
    }
    return 0;
}

bool hy_weight_rows16_type(hy_dtype_t t)
{
    hy_r16_run_t r[HY_R16_MAX_RUNS];

    return t == HY_DTYPE_F32 || t == HY_DTYPE_F16 || t == HY_DTYPE_BF16 || hy_r16_runs(t, r) > 0;
}

/* Row j (of 16) of the quantized ROWS16 group g (n blocks of type t) into
 * the file's blocks at row, or (to_r16) the other way round; only the
 * destination is written (hy_weight_row passes its const group). */
static void hy_weight_r16_blocks(hy_dtype_t t, uint8_t *g, int j, uint8_t *row, int64_t n,
                                 bool to_r16)
{
    hy_r16_run_t r[HY_R16_MAX_RUNS];
    const int nr = hy_r16_runs(t, r);
    const size_t bs = hy_dtype_info(t)->block_bytes;

    for (int64_t b = 0; b < n; b++) {
        uint8_t *blk = g + (size_t)b * 16 * bs, *fb = row + (size_t)b * bs;
        size_t pos = 0;

        for (int i = 0; i < nr; i++)
            for (int f = 0; f < r[i].n; pos += 16 * (size_t)r[i].len, f++) {
                uint8_t *r16 = blk + pos + (size_t)j * r[i].len;
                uint8_t *at = fb + r[i].off + (size_t)f * r[i].len;
                if (to_r16)
                    memcpy(r16, at, r[i].len);
                else
                    memcpy(at, r16, r[i].len);
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
