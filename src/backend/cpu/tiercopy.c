/*
 * tiercopy.c - the CPU backend's side of the KV tiers (backend.h,
 * "the tiers below the hot pool"): a KV page or a state slot copied out to
 * host bytes and back (the warm tier's slots and the disk tier's payloads),
 * and the memory the hot pool lives in, which on the CPU is the host's.
 */
#include "backend/cpu/cpu_impl.h"

#include <string.h>

static int hy_cpu_page_ok(const hy_cpu_t *cpu, int32_t page, char *err)
{
    if (!cpu->kv_ready)
        return hy_err(err, HY_EINVAL, "kv page copy: kv_init was not called");
    if (page < 0 || page >= cpu->kv.n_pages)
        return hy_err(err, HY_ERANGE, "kv page copy: page %d outside 0..%d", page,
                      cpu->kv.n_pages - 1);
    return HY_OK;
}

/* Layer by layer, K then V: the order backend.h fixes for every backend. */
int hy_cpu_kv_page_read(hy_backend_t *be, int32_t page, void *dst, char *err)
{
    hy_cpu_t *cpu = be->ctx;
    uint8_t *d = dst;
    int rc;

    if ((rc = hy_cpu_page_ok(cpu, page, err)) != HY_OK)
        return rc;
    for (int32_t l = 0; l < cpu->kv.n_layers; l++, d += cpu->k_page_bytes)
        memcpy(d, cpu->k_pages[l] + (size_t)page * cpu->k_page_bytes, cpu->k_page_bytes);
    for (int32_t l = 0; l < cpu->kv.n_layers; l++, d += cpu->v_page_bytes)
        memcpy(d, cpu->v_pages[l] + (size_t)page * cpu->v_page_bytes, cpu->v_page_bytes);
    return HY_OK;
}

int hy_cpu_kv_page_write(hy_backend_t *be, int32_t page, const void *src, char *err)
{
    hy_cpu_t *cpu = be->ctx;
    const uint8_t *s = src;
    int rc;

    if ((rc = hy_cpu_page_ok(cpu, page, err)) != HY_OK)
        return rc;
    for (int32_t l = 0; l < cpu->kv.n_layers; l++, s += cpu->k_page_bytes)
        memcpy(cpu->k_pages[l] + (size_t)page * cpu->k_page_bytes, s, cpu->k_page_bytes);
    for (int32_t l = 0; l < cpu->kv.n_layers; l++, s += cpu->v_page_bytes)
        memcpy(cpu->v_pages[l] + (size_t)page * cpu->v_page_bytes, s, cpu->v_page_bytes);
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
