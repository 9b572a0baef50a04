/*
 * test_backend_select.c - backend selection by name in every build: "cpu"
 * (and the empty name) gives the CPU backend, unknown names are refused
 * naming the valid ones, and "cuda" either works (a GPU is present), fails
 * with "no CUDA device: ..." (CUDA build, no GPU), or, in a build without
 * --with-cuda, fails with the exact "built without CUDA" message; a CUDA
 * build refuses a bad HY_CUDA_GRAPHS and 8-bit activations before it looks
 * for a device.
 * HY_TEST_CUDA_BUILT (0/1) comes from cuda.mk.
 */
#include "backend/select.h"
#include "../unit/test.h"

#include <stdlib.h>
#include <string.h>

int main(void)
{
    hy_backend_opts_t bo = {.n_threads = 1};
    hy_backend_t *be = NULL;
    char err[HY_ERR_LEN] = "";
    int rc;

    rc = hy_backend_new(&be, "cpu", &bo, err);
    HY_T_OK(rc == HY_OK && be && strcmp(be->i->name, "cpu") == 0, "\"cpu\" gives the CPU backend");
    if (be)
        be->i->free(be);
    be = NULL;
    rc = hy_backend_new(&be, NULL, &bo, err);
    HY_T_OK(rc == HY_OK && be && strcmp(be->i->name, "cpu") == 0, "no name means cpu");
    if (be)
        be->i->free(be);
    be = NULL;
    rc = hy_backend_new(&be, "CUDA", &bo, err);
    HY_T_OK(rc == HY_EINVAL && be == NULL &&
                strcmp(err, "backend 'CUDA': must be one of cpu|cuda") == 0,
            "unknown name refused: %s", err);
    rc = hy_backend_new(&be, "cuda", &bo, err);
    if (!HY_TEST_CUDA_BUILT) {
        HY_T_OK(rc == HY_EUNSUPPORTED && be == NULL &&
                    strcmp(err, "hyserve was built without CUDA (configure --with-cuda)") == 0,
                "\"cuda\" without CUDA built: %s", err);
    } else if (rc == HY_OK) {
        HY_T_OK(be && strcmp(be->i->name, "cuda") == 0, "\"cuda\" gives the CUDA backend");
        be->i->free(be);
    } else {
        HY_T_OK(rc == HY_EUNSUPPORTED && be == NULL && strncmp(err, "no CUDA device: ", 16) == 0,
                "\"cuda\" with CUDA built but no GPU: %s", err);
    }
    if (HY_TEST_CUDA_BUILT) {
        /* a bad HY_CUDA_GRAPHS is refused before any device work, so this
         * holds with or without a GPU */
        setenv("HY_CUDA_GRAPHS", "yes", 1);
        rc = hy_backend_new(&be, "cuda", &bo, err);
        unsetenv("HY_CUDA_GRAPHS");
        HY_T_OK(rc == HY_EINVAL && be == NULL &&
                    strcmp(err, "HY_CUDA_GRAPHS='yes': must be 0 (graphs off) or 1 (on)") == 0,
                "\"cuda\" with a bad HY_CUDA_GRAPHS: %s", err);
        /* 8-bit activations are a CPU kernel choice: refused, not ignored,
         * before any device work too */
        bo.act_bits = 8;
        rc = hy_backend_new(&be, "cuda", &bo, err);
        bo.act_bits = 0;
        HY_T_OK(rc == HY_EUNSUPPORTED && be == NULL &&
                    strcmp(err, "cuda backend: activation bits 8: only 16 (8-bit activations "
                                "are a CPU kernel choice)") == 0,
                "\"cuda\" with 8-bit activations: %s", err);
    }
    return hy_t_done();
}
