/*
 * tiercopy.c - the CPU backend's side of the KV tiers (backend.h,
 * "the tiers below the hot pool"): a KV page or a state slot copied out to
 * host bytes and back (the warm tier's slots and the disk tier's payloads),
 * and the memory the hot pool lives in, which on the CPU is the host's.
 */
#include "backend/cpu/cpu_impl.h"

#include <string.h>

static int hy_cpu_page_ok(const hy_cpu_t *cpu, int32_t group, int32_t page, char *err)
{
    int32_t n;

    if (!cpu->kv_ready)
        return hy_err(err, HY_EINVAL, "kv page copy: kv_init was not called");
    if (group != HY_KV_FULL && group != HY_KV_SWA)
        return hy_err(err, HY_EINVAL, "kv page copy: no page group %d", group);
    n = hy_kv_layout_group_pages(&cpu->kv, group);
    if (page < 0 || page >= n)
        return hy_err(err, HY_ERANGE, "kv page copy: page %d of group %d outside 0..%d", page,
                      group, n - 1);
    return HY_OK;
}

/* The group's layers in layer order, K then V: the order backend.h fixes
 * for every backend.  to_host: pool -> host. */
static void hy_cpu_page_copy(hy_cpu_t *cpu, int32_t group, int32_t page, uint8_t *host,
                             bool to_host)
{
    uint8_t **pools[2] = {cpu->k_pages, cpu->v_pages};
    size_t bytes[2] = {cpu->k_page_bytes, cpu->v_page_bytes};

    for (int kv = 0; kv < 2; kv++) {
        for (int32_t l = 0; l < cpu->kv.n_layers; l++) {
            uint8_t *p;

            if (hy_kv_layout_group(&cpu->kv, l) != group)
                continue;
            p = pools[kv][l] + (size_t)page * bytes[kv];
            if (to_host)
                memcpy(host, p, bytes[kv]);
            else
                memcpy(p, host, bytes[kv]);
            host += bytes[kv];
        }
    }
}

int hy_cpu_kv_page_read(hy_backend_t *be, int32_t group, int32_t page, void *dst, char *err)
{
    hy_cpu_t *cpu = be->ctx;
    int rc;

    if ((rc = hy_cpu_page_ok(cpu, group, page, err)) != HY_OK)
        return rc;
    hy_cpu_page_copy(cpu, group, page, dst, true);
    return HY_OK;
}

int hy_cpu_kv_page_write(hy_backend_t *be, int32_t group, int32_t page, const void *src,
                         char *err)
{
    hy_cpu_t *cpu = be->ctx;
    int rc;

    if ((rc = hy_cpu_page_ok(cpu, group, page, err)) != HY_OK)
        return rc;
    hy_cpu_page_copy(cpu, group, page, (uint8_t *)src, false);
    /* a page back from warm or disk is full: its sparse-attention keys are
     * recomputed from its rows, so they need not travel with it */
    hy_cpu_sparse_keys_page(cpu, group, page);
    return HY_OK;
}

static int hy_cpu_slot_ok(const hy_cpu_t *cpu, int32_t slot, char *err)
{
    if (!cpu->st)
        return hy_err(err, HY_EINVAL, "state copy: state_init was not called");
    if (slot < 0 || slot >= cpu->st_slots)
        return hy_err(err, HY_ERANGE, "state copy: slot %d outside 0..%d", slot,
                      cpu->st_slots - 1);
    return HY_OK;
}

int hy_cpu_state_read(hy_backend_t *be, int32_t slot, void *dst, char *err)
{
    hy_cpu_t *cpu = be->ctx;
    int rc;

    if ((rc = hy_cpu_slot_ok(cpu, slot, err)) != HY_OK)
        return rc;
    memcpy(dst, cpu->st + slot * cpu->st_slot_floats, (size_t)cpu->st_slot_floats * sizeof(float));
    return HY_OK;
}

int hy_cpu_state_write(hy_backend_t *be, int32_t slot, const void *src, char *err)
{
    hy_cpu_t *cpu = be->ctx;
    int rc;

    if ((rc = hy_cpu_slot_ok(cpu, slot, err)) != HY_OK)
        return rc;
    memcpy(cpu->st + slot * cpu->st_slot_floats, src, (size_t)cpu->st_slot_floats * sizeof(float));
    return HY_OK;
}

int hy_cpu_mem_info(hy_backend_t *be, uint64_t *free_bytes, uint64_t *total_bytes, char *err)
{
    (void)be;
    hy_host_memory(total_bytes, free_bytes);
    if (*total_bytes == 0)
        return hy_err(err, HY_EIO, "cannot read the host's memory from /proc/meminfo");
    return HY_OK;
}
