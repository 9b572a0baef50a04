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
    HY_T_OK(hy_dtype_info(4) == NULL && hy_dtype_info(9999) == NULL, "unknown type ids are NULL");
    return hy_t_done();
}
