/*
 * quant_fill.h - random but well-formed weight blocks for the tests and
 * benchmarks of the quantized types that hyserve has no quantizer for:
 * every bit pattern of their quant bytes is a valid block, so random bytes
 * reach every scale/min/high-bit/grid combination, and only the f16
 * factors need sane values, which this header knows the places of.
 * Static inline: include once per program.
 */
#ifndef HY_TEST_QUANT_FILL_H
#define HY_TEST_QUANT_FILL_H

#include "common/dtype.h"
#include "backend/cpu/quant.h"

#include <stdint.h>

/* Puts d (the scale) and m (the second factor: Q4_1/Q5_1 offset, K-quant
 * dmin; ignored by types without one) into one block of type t.  Returns 0
 * for types without f16 factors at fixed places (float types). */
static inline int hy_test_block_factors(hy_dtype_t t, uint8_t *blk, float d, float m)
{
    int od, om = -1;
    uint16_t h;

    switch (t) {
    case HY_DTYPE_Q4_0: case HY_DTYPE_Q5_0: case HY_DTYPE_Q8_0: case HY_DTYPE_IQ4_NL:
    case HY_DTYPE_IQ4_XS:
        od = 0;
        break;
    case HY_DTYPE_Q4_1: case HY_DTYPE_Q5_1: case HY_DTYPE_Q4_K: case HY_DTYPE_Q5_K:
        od = 0, om = 2;
        break;
    case HY_DTYPE_Q2_K: od = 80, om = 82; break;
    case HY_DTYPE_Q3_K: od = 108; break;
    case HY_DTYPE_Q6_K: od = 208; break;
    default: return 0;
    }
    h = hy_f32_to_f16(d);
    blk[od] = (uint8_t)h;
    blk[od + 1] = (uint8_t)(h >> 8);
    if (om >= 0) {
        h = hy_f32_to_f16(m);
        blk[om] = (uint8_t)h;
        blk[om + 1] = (uint8_t)(h >> 8);
    }
    return 1;
}

#endif
