/*
 * select.c - backend selection by name.  Both constructors always link
 * (the CUDA one is a stub in builds without --with-cuda), so this file is
 * the same in every build and carries no #ifdef.
 */
#include "backend/select.h"
#include "backend/cuda/cuda.h"

#include <string.h>

int hy_backend_new(hy_backend_t **out, const char *name, const hy_backend_opts_t *opts,
                   char *err)
{
    *out = NULL;
    if (name == NULL || name[0] == 0 || strcmp(name, "cpu") == 0)
        return hy_backend_cpu_new(out, opts, err);
    if (strcmp(name, "cuda") == 0)
        return hy_backend_cuda_new(out, opts, err);
    return hy_err(err, HY_EINVAL, "backend '%s': must be one of " HY_BACKEND_NAMES, name);
}
