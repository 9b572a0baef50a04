/*
 * stub.c - hy_backend_cuda_new for builds configured without --with-cuda:
 * it refuses with a message that says how to get the backend, so
 * `hyserve --backend cuda` on such a build is a clear error, not a link
 * failure or a crash.  cuda.mk compiles this file or cuda.c, never both.
 */
#include "backend/cuda/cuda.h"

int hy_backend_cuda_new(hy_backend_t **out, const hy_backend_opts_t *opts, char *err)
{
    (void)opts;
    *out = NULL;
    return hy_err(err, HY_EUNSUPPORTED, "hyserve was built without CUDA (configure --with-cuda)");
}
