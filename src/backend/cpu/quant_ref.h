/*
 * quant_ref.h - quantize float rows into any type hyserve can write: the
 * weight types Q4_0, Q4_1, Q8_0 (tests, KV cache in q8_0) and the activation
 * types Q8_0, Q8_1, Q8_K, plus F32/F16/BF16.  Always the portable reference
 * code, so results do not depend on the CPU.
 */
#ifndef HY_QUANT_REF_H
#define HY_QUANT_REF_H

#include "quant.h"

/* x (n floats) -> y in type t.  Returns HY_OK, HY_EUNSUPPORTED for a type
 * with no quantizer, or HY_EINVAL if n is negative or not a multiple of the
 * type's block size. */
int hy_quant_quantize_row(hy_dtype_t t, const float *x, void *y, int64_t n);

#endif
