/*
 * test_common.c - error helper and element-type table.
 */
#include "common/hy.h"
#include "common/dtype.h"
#include "test.h"

#include <string.h>

int main(void)
{
    char err[HY_ERR_LEN];

    HY_T_OK(hy_err(err, HY_EFORMAT, "bad %s at %d", "x", 7) == HY_EFORMAT &&
            strcmp(err, "bad x at 7") == 0, "hy_err formats and returns its code");
    HY_T_OK(hy_err(NULL, HY_EIO, "x") == HY_EIO, "hy_err accepts a NULL buffer");
    HY_T_OK(hy_dtype_row_bytes(HY_DTYPE_Q4_1, 64) == 40, "q4_1 row of 64 is 40 bytes");
    HY_T_OK(hy_dtype_row_bytes(HY_DTYPE_Q4_K, 100) == 0, "q4_K row not a block multiple is rejected");
    HY_T_OK(hy_dtype_row_bytes(HY_DTYPE_Q6_K, 512) == 420, "q6_K row of 512 is 420 bytes");
    HY_T_OK(hy_dtype_row_bytes(HY_DTYPE_Q5_0, 64) == 44 && hy_dtype_row_bytes(HY_DTYPE_Q5_1, 64) == 48 &&
            hy_dtype_row_bytes(20, 64) == 36 && hy_dtype_row_bytes(HY_DTYPE_Q2_K, 512) == 168 &&
            hy_dtype_row_bytes(HY_DTYPE_Q3_K, 512) == 220 && hy_dtype_row_bytes(23, 512) == 272 &&
            strcmp(hy_dtype_info(20)->name, "iq4_nl") == 0 &&
            strcmp(hy_dtype_info(23)->name, "iq4_xs") == 0 && hy_dtype_info(23)->supported &&
            hy_dtype_info(16) == NULL && !hy_dtype_info(HY_DTYPE_Q8_K)->supported,
            "q5_0/q5_1/iq4_nl/q2_K/q3_K/iq4_xs: GGUF ids and block sizes as ggml's");
    HY_T_OK(hy_dtype_info(4) == NULL && hy_dtype_info(9999) == NULL, "unknown type ids are NULL");
    return hy_t_done();
}
