/*
 * attn_flash.h - the attention kernels (attn_flash_impl.h, built once per
 * ISA by attn_avx512.c, attn_avx2.c and attn_generic.c): one unit of
 * queries (a block of tokens times the query heads of one KV head) against
 * the paged KV cache, by the flash kernel (queries across the lanes) or the
 * decode kernel (keys across the lanes), which give the same bits.
 * attention.c decides which units take which and supplies the page
 * addressing; these own only the arithmetic.
 */
#ifndef HY_ATTN_FLASH_H
#define HY_ATTN_FLASH_H

#include "backend/cpu/vexp.h"
#include "common/hy.h"

#include <stddef.h>
#include <stdint.h>

/* One unit.  Lane i of the unit is query token t0 + i / (h1 - h0), head
 * h0 + i % (h1 - h0); it attends to positions max(0, pos - window + 1) ..
 * pos (window 0: from 0) of one KV head. */
typedef struct {
    /* that KV head's keys: position p is row p % page_tokens of page
     * pages[p / page_tokens], at k_base + page * k_page_bytes (rows of
     * k_row_bytes, contiguous within a page); values likewise */
    const uint8_t *k_base, *v_base;
    size_t k_page_bytes, v_page_bytes, k_row_bytes, v_row_bytes;
    const int32_t *pages;
    int32_t page_tokens;
    int kv_f32;                      /* rows are floats: copied, not converted */
    int kv_f16;                      /* rows are halves: converted inline */
    int kv_q8;                       /* rows are q8_0 blocks: the decode kernel converts
                                        them inline, the flash kernel through to_float */
    void (*to_float)(const void *x, float *y, int64_t n); /* row elements -> f32 */

    const float *q;      /* [tokens][q_stride]: head h at q + t*q_stride + h*hd */
    float *out;          /* [tokens][out_stride]: head h at + h*hdv */
    const int32_t *pos;  /* [tokens] positions */
    int32_t q_stride, out_stride;
    int32_t t0, t1, h0, h1;
    int32_t hd, hdv;
    int32_t window;      /* 0 = full causal */
    float scale, softcap;

    /* A query's keys reduce in splits of this many absolute positions (a
     * multiple of HY_ATTN_FLASH_TILE; 0: one split), each from an empty
     * state, folded left to right by hy_af_fold: so the decode kernel may
     * compute a sequence's splits on several threads (part) and a fold
     * after them gives the bits of the one thread's sweep. */
    int32_t split;
    /* Decode kernel only; NULL: fold and write out.  Otherwise only keys
     * [k0, k1) (multiples of split) are read and the lane of token t, head
     * h writes split s's state (m, l, then hdv unnormalised outputs) at
     * part + (t - t0) * part_ts + (h - h0) * part_hs + (s - part_s0) *
     * (hdv + 2), an empty split with m = -inf; hy_attn_merge_* folds them. */
    float *part;
    size_t part_ts, part_hs;
    int32_t part_s0, k0, k1;

    /* NULL: page i of the list lies at k_base + pages[i] * k_page_bytes
     * (v_base likewise).  Otherwise at k_at[i] and v_at[i] (this KV head's
     * rows), and pages is not read: a list whose pages do not all lie in
     * one pool, as sparse attention's chosen blocks read where they are. */
    const uint8_t *const *k_at, *const *v_at;
} hy_attn_flash_t;

/* Query lanes a kernel handles per sweep of the keys; units with more
 * lanes sweep the keys more than once. */
#define HY_ATTN_FLASH_MAX_LANES 192
/* Key positions per tile, and the most lanes a kernel puts in one group. */
#define HY_ATTN_FLASH_TILE 64
#define HY_ATTN_FLASH_GROUP_MAX 48

/* Largest head the kernels are built for (attention.c checks). */
#define HY_ATTN_MAX_HEAD_DIM 1024
/* Widest vector of any kernel, in floats. */
#define HY_ATTN_FLASH_WMAX 16

/* Scratch floats one call of either kernel needs for units of up to
 * max_lanes queries.  Flash: K and V tiles, the score tile, then the query
 * rows, O^T and the folded splits' O^T of every group; decode: K and V
 * tiles, and per query Q, O, m, l and the folded O, m, l.  Key and query
 * rows are padded to a multiple of the vector width (at most
 * HY_ATTN_FLASH_WMAX floats more).  (Any float alignment works; 64-byte
 * aligned scratch keeps the AVX-512 kernel's tiles on cache lines.) */
static inline size_t hy_attn_flash_scratch_floats(int32_t hd, int32_t hdv, int32_t max_lanes)
{
    size_t lanes = (size_t)HY_MIN(max_lanes, HY_ATTN_FLASH_MAX_LANES);
    size_t tile = HY_ATTN_FLASH_TILE, hdp = (size_t)hd + HY_ATTN_FLASH_WMAX, flash, decode;

    lanes = (lanes + HY_ATTN_FLASH_GROUP_MAX - 1) / HY_ATTN_FLASH_GROUP_MAX *
            HY_ATTN_FLASH_GROUP_MAX;
    flash = tile * (hdp + (size_t)hdv + HY_ATTN_FLASH_GROUP_MAX) +
            lanes * (hdp + 2 * (size_t)hdv);
    decode = tile * (hdp + (size_t)hdv) + (size_t)max_lanes * (hdp + 2 * (size_t)hdv + 4);
    return HY_MAX(flash, decode);
}

/* Portable versions of both kernels (the scalar level). */
void hy_attn_flash_generic(const hy_attn_flash_t *f, float *scratch);
void hy_attn_decode_generic(const hy_attn_flash_t *f, float *scratch);

/* One query's n split states (m, l, hdv outputs each, consecutive) as the
 * kernels of the same level fold them: its normalised output into out. */
void hy_attn_merge_generic(const float *part, int32_t n, int32_t hdv, float *out);

#if defined(__x86_64__) && HY_BUILD_AVX2
#include <immintrin.h>

/* Compute the unit's outputs: flash (many queries) or decode (a few), the
 * same bits either way.  The caller checks cpuid: AVX-512F, or AVX2 with
 * FMA and F16C; each exists in builds whose compiler could build it. */
void hy_attn_flash_avx512(const hy_attn_flash_t *f, float *scratch);
void hy_attn_flash_avx2(const hy_attn_flash_t *f, float *scratch);
void hy_attn_decode_avx512(const hy_attn_flash_t *f, float *scratch);
void hy_attn_decode_avx2(const hy_attn_flash_t *f, float *scratch);
void hy_attn_merge_avx512(const float *part, int32_t n, int32_t hdv, float *out);
void hy_attn_merge_avx2(const float *part, int32_t n, int32_t hdv, float *out);
/* y[i] = x[i] as a half, F16C's round to nearest even: hy_f32_to_f16's
 * bits for every non-NaN float (test_quant), for the f16 KV rows the
 * batch writes (the scalar conversion was ~1.5% of a prefill). */
void hy_attn_f16_row_avx2(const float *x, uint16_t *y, int64_t n);
#endif

#endif
