/*
 * cuda.h - the CUDA backend's constructor.  The backend keeps every weight
 * (quantized blocks as in the GGUF file), every KV page and every state slot
 * in GPU memory and implements struct hy_backend_i with cuBLAS plus the
 * kernels of the kernels/ .cu files.  In a build without --with-cuda the same function
 * exists and fails with "hyserve was built without CUDA", so callers need
 * no #ifdef (src/backend/select.c picks a backend by name).
 */
#ifndef HY_BACKEND_CUDA_H
#define HY_BACKEND_CUDA_H

#include "backend/backend.h"

/* opts may be NULL (device 0).  Without a usable GPU: HY_EUNSUPPORTED and
 * "no CUDA device: <reason>" in err, never a crash. */
int hy_backend_cuda_new(hy_backend_t **out, const hy_backend_opts_t *opts, char *err);

#endif
