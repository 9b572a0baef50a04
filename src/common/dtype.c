/*
 * dtype.c - the element-type table.  Sizes follow ggml's block layouts
 * (ggml-common.h); `supported` marks the weight types we have dot products
 * and dequantizers for.
 */
#include "dtype.h"

static const hy_dtype_info_t hy_dtype_table[HY_DTYPE_COUNT] = {
    [HY_DTYPE_F32] = {"f32", 1, 4, 1},
    [HY_DTYPE_F16] = {"f16", 1, 2, 1},
    [HY_DTYPE_Q4_0] = {"q4_0", 32, 18, 1},
    [HY_DTYPE_Q4_1] = {"q4_1", 32, 20, 1},
    [HY_DTYPE_Q5_0] = {"q5_0", 32, 22, 1},
    [HY_DTYPE_Q5_1] = {"q5_1", 32, 24, 1},
    [HY_DTYPE_Q8_0] = {"q8_0", 32, 34, 1},
    [HY_DTYPE_Q8_1] = {"q8_1", 32, 36, 0},
    [HY_DTYPE_Q2_K] = {"q2_K", 256, 84, 1},
    [HY_DTYPE_Q3_K] = {"q3_K", 256, 110, 1},
    [HY_DTYPE_Q4_K] = {"q4_K", 256, 144, 1},
    [HY_DTYPE_Q5_K] = {"q5_K", 256, 176, 1},
    [HY_DTYPE_Q6_K] = {"q6_K", 256, 210, 1},
    [HY_DTYPE_Q8_K] = {"q8_K", 256, 292, 0},
    [HY_DTYPE_IQ4_NL] = {"iq4_nl", 32, 18, 1},
    [HY_DTYPE_IQ4_XS] = {"iq4_xs", 256, 136, 1},
    [HY_DTYPE_I8] = {"i8", 1, 1, 0},
    [HY_DTYPE_I16] = {"i16", 1, 2, 0},
    [HY_DTYPE_I32] = {"i32", 1, 4, 0},
    [HY_DTYPE_I64] = {"i64", 1, 8, 0},
    [HY_DTYPE_F64] = {"f64", 1, 8, 0},
    [HY_DTYPE_BF16] = {"bf16", 1, 2, 1},
    /* internal activation formats (quant_impl.h): not weight types */
    [HY_DTYPE_Q8_2L] = {"q8_2l", 32, 76, 0},
    [HY_DTYPE_Q8_K2L] = {"q8_K2l", 256, 580, 0},
    [HY_DTYPE_Q16] = {"q16", 32, 72, 0},
    [HY_DTYPE_Q8_S] = {"q8_s", 32, 40, 0},
};

const hy_dtype_info_t *hy_dtype_info(uint32_t id)
{
    if (id >= HY_DTYPE_COUNT || hy_dtype_table[id].name == NULL)
        return NULL;
    return &hy_dtype_table[id];
}

size_t hy_dtype_row_bytes(uint32_t id, int64_t n)
{
    const hy_dtype_info_t *t = hy_dtype_info(id);

    if (t == NULL || n < 0 || n % t->block != 0)
        return 0;
    return (size_t)(n / t->block) * t->block_bytes;
}
