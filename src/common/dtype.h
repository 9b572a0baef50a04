/*
 * dtype.h - tensor element types, numbered as ggml numbers them so that GGUF
 * type ids can be used directly.  A quantized type stores `block` elements in
 * `block_bytes` bytes; a row of n elements (n a multiple of block) takes
 * n / block * block_bytes bytes.
 */
#ifndef HY_DTYPE_H
#define HY_DTYPE_H

#include <stdint.h>
#include <stddef.h>

typedef enum {
    HY_DTYPE_F32 = 0,
    HY_DTYPE_F16 = 1,
    HY_DTYPE_Q4_0 = 2,
    HY_DTYPE_Q4_1 = 3,
    HY_DTYPE_Q5_0 = 6,
    HY_DTYPE_Q5_1 = 7,
    HY_DTYPE_Q8_0 = 8,
    HY_DTYPE_Q8_1 = 9,
    HY_DTYPE_Q2_K = 10,
    HY_DTYPE_Q3_K = 11,
    HY_DTYPE_Q4_K = 12,
    HY_DTYPE_Q5_K = 13,
    HY_DTYPE_Q6_K = 14,
    HY_DTYPE_Q8_K = 15,
    HY_DTYPE_IQ4_NL = 20,
    HY_DTYPE_IQ4_XS = 23,
    HY_DTYPE_I8 = 24,
    HY_DTYPE_I16 = 25,
    HY_DTYPE_I32 = 26,
    HY_DTYPE_I64 = 27,
    HY_DTYPE_F64 = 28,
    HY_DTYPE_BF16 = 30,
    /* hyserve-internal activation formats (ids ggml leaves unused): the
     * two-level int8 partners of the quantized dot products, see
     * backend/cpu/quant_impl.h.  Never valid as a weight type. */
    HY_DTYPE_Q8_2L = 60,
    HY_DTYPE_Q8_K2L = 61,
    /* the same values as Q8_2L stored as int16 (AVX2 and scalar kernels) */
    HY_DTYPE_Q16 = 62,
    /* one int8 per element and their exact sum, x ~= d*q: the 8-bit
     * activation mode's partner of Q5_0 (quant_impl.h) */
    HY_DTYPE_Q8_S = 63,
    HY_DTYPE_COUNT = 64 /* ids at or above this are invalid */
} hy_dtype_t;

typedef struct {
    const char *name;   /* "q4_K"; NULL for ids ggml does not define here */
    uint32_t block;     /* elements per block (1 for plain types) */
    uint32_t block_bytes; /* bytes per block */
    int supported;      /* 1 if hyserve has kernels for it as a weight */
} hy_dtype_info_t;

/* NULL for an id that is not a known type. */
const hy_dtype_info_t *hy_dtype_info(uint32_t id);

/* Bytes of a row of n elements; 0 if n is not a multiple of the block size
 * or the type is unknown. */
size_t hy_dtype_row_bytes(uint32_t id, int64_t n);

#endif
