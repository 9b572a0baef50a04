/*
 * tiercopy.c - the CUDA backend's side of the KV tiers (backend.h, "the
 * tiers below the hot pool"): a KV page or a state slot copied between the
 * device pools and host bytes (pinned warm slots copy at full PCIe speed),
 * the device's free memory for the hot tier's default size, and pinned
 * host memory for the warm tier.  Copies go on the backend's stream, after
 * the kernels that wrote the page, and are waited for.
 */
#include "backend/cuda/cuda_impl.h"
#include "backend/layout.h"

#include <string.h>

static hy_cuda_t *hy_tc_ctx(hy_backend_t *be) { return be->ctx; }

static int hy_tc_page_ok(const hy_cuda_t *cu, int32_t group, int32_t page, char *err)
{
    int32_t n;

    if (!cu->kv_ready)
        return hy_err(err, HY_EINVAL, "kv page copy: kv_init was not called");
    if (group != HY_KV_FULL && group != HY_KV_SWA)
        return hy_err(err, HY_EINVAL, "kv page copy: no page group %d", group);
    n = hy_kv_layout_group_pages(&cu->kv, group);
    if (page < 0 || page >= n)
        return hy_err(err, HY_ERANGE, "kv page copy: page %d of group %d outside 0..%d", page,
                      group, n - 1);
    return HY_OK;
}

static int hy_tc_done(hy_cuda_t *cu, cudaError_t e, const char *op, char *err)
{
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(cu->stream);
    return e == cudaSuccess ? HY_OK : hy_err(err, HY_EIO, "%s: %s", op, cudaGetErrorString(e));
}

/* One group's page: layer l's pages start at pool + kv_layer_page[l] *
 * page_bytes (cuda_impl.h), in its group's pool; host bytes are the K page
 * of every layer of the group, then their V pages. */
static int hy_tc_page(hy_cuda_t *cu, int32_t group, int32_t page, uint8_t *host, bool to_host,
                      char *err)
{
    uint8_t *pools[2] = {cu->k_pool, cu->v_pool};
    uint64_t bytes[2] = {cu->k_page_bytes, cu->v_page_bytes};
    cudaError_t e = cudaSuccess;

    for (int kv = 0; kv < 2 && e == cudaSuccess; kv++) {
        for (int32_t l = 0; l < cu->kv.n_layers && e == cudaSuccess; l++) {
            uint8_t *dev;

            if (hy_kv_layout_group(&cu->kv, l) != group)
                continue;
            dev = pools[kv] + (size_t)(cu->kv_layer_page[l] + (uint64_t)page) * bytes[kv];
            e = to_host ? cudaMemcpyAsync(host, dev, bytes[kv], cudaMemcpyDeviceToHost, cu->stream)
                        : cudaMemcpyAsync(dev, host, bytes[kv], cudaMemcpyHostToDevice, cu->stream);
            host += bytes[kv];
        }
    }
    return hy_tc_done(cu, e, to_host ? "kv_page_read" : "kv_page_write", err);
}

int hy_cuda_kv_page_read(hy_backend_t *be, int32_t group, int32_t page, void *dst, char *err)
{
    hy_cuda_t *cu = hy_tc_ctx(be);
    int rc = hy_tc_page_ok(cu, group, page, err);

    return rc != HY_OK ? rc : hy_tc_page(cu, group, page, dst, true, err);
}

int hy_cuda_kv_page_write(hy_backend_t *be, int32_t group, int32_t page, const void *src,
                          char *err)
{
    hy_cuda_t *cu = hy_tc_ctx(be);
    int rc = hy_tc_page_ok(cu, group, page, err);

    return rc != HY_OK ? rc : hy_tc_page(cu, group, page, (uint8_t *)src, false, err);
}

static int hy_tc_slot_ok(const hy_cuda_t *cu, int32_t slot, char *err)
{
    if (!cu->st)
        return hy_err(err, HY_EINVAL, "state copy: state_init was not called");
    if (slot < 0 || slot >= cu->st_slots)
        return hy_err(err, HY_ERANGE, "state copy: slot %d outside 0..%d", slot, cu->st_slots - 1);
    return HY_OK;
}

int hy_cuda_state_read(hy_backend_t *be, int32_t slot, void *dst, char *err)
{
    hy_cuda_t *cu = hy_tc_ctx(be);
    size_t n = (size_t)cu->st_slot_floats * sizeof(float);
    int rc = hy_tc_slot_ok(cu, slot, err);

    if (rc != HY_OK)
        return rc;
    return hy_tc_done(cu, cudaMemcpyAsync(dst, cu->st + slot * cu->st_slot_floats, n,
                                          cudaMemcpyDeviceToHost, cu->stream),
                      "state_read", err);
}

int hy_cuda_state_write(hy_backend_t *be, int32_t slot, const void *src, char *err)
{
    hy_cuda_t *cu = hy_tc_ctx(be);
    size_t n = (size_t)cu->st_slot_floats * sizeof(float);
    int rc = hy_tc_slot_ok(cu, slot, err);

    if (rc != HY_OK)
        return rc;
    return hy_tc_done(cu, cudaMemcpyAsync(cu->st + slot * cu->st_slot_floats, src, n,
                                          cudaMemcpyHostToDevice, cu->stream),
                      "state_write", err);
}

/* The device's memory, not the host's: the hot tier is allocated here. */
int hy_cuda_mem_info(hy_backend_t *be, uint64_t *free_bytes, uint64_t *total_bytes, char *err)
{
    size_t f = 0, t = 0;
    cudaError_t e;

    (void)be;
    e = cudaMemGetInfo(&f, &t);
    *free_bytes = (uint64_t)f;
    *total_bytes = (uint64_t)t;
    return e == cudaSuccess ? HY_OK
                            : hy_err(err, HY_EIO, "cudaMemGetInfo: %s", cudaGetErrorString(e));
}

void *hy_cuda_host_alloc(hy_backend_t *be, size_t bytes)
{
    void *p = NULL;

    (void)be;
    return cudaHostAlloc(&p, bytes, cudaHostAllocDefault) == cudaSuccess ? p : NULL;
}

void hy_cuda_host_free(hy_backend_t *be, void *p, size_t bytes)
{
    (void)be;
    (void)bytes;
    if (p != NULL)
        cudaFreeHost(p);
}
