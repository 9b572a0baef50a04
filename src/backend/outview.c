/*
 * outview.c - how an attention op reads a running sequence's page that is
 * not hot (backend.h hy_out_view_t): from the out store's RAM, or from its
 * spill file, checked run by run before the op uses a byte of it.
 */
#define _GNU_SOURCE
#include "backend/backend.h"
#include "common/crc32c.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

static const uint8_t *out_failed(hy_out_view_t *ov, int32_t u, int why, uint8_t *dst, size_t n)
{
    int32_t none = -1;

    memset(dst, 0, n);
    if (__atomic_compare_exchange_n(&ov->failed_unit, &none, u, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        __atomic_store_n(&ov->failed_errno, why, __ATOMIC_RELAXED);
    return dst;
}

bool hy_out_runs_match(const uint32_t *crc, const uint8_t *p, size_t n, uint64_t run_bytes)
{
    for (size_t i = 0; i < n / run_bytes; i++)
        if (hy_crc32c(0, p + i * run_bytes, (size_t)run_bytes) != crc[i])
            return false;
    return true;
}

const uint8_t *hy_out_read(hy_out_view_t *ov, int32_t u, size_t off, uint8_t *dst, size_t n)
{
    int32_t slot = __atomic_load_n(&ov->slot[u], __ATOMIC_ACQUIRE);
    uint64_t rb = ov->run_bytes;
    const uint32_t *crc;
    ssize_t got;

    if (slot >= 0) {
        __atomic_store_n(&ov->ref[u], 1, __ATOMIC_RELAXED);
        return ov->ram + (size_t)slot * ov->unit_bytes + off;
    }
    if (__atomic_exchange_n(&ov->ref[u], 2, __ATOMIC_RELAXED) != 2) {
        int32_t i = __atomic_fetch_add(&ov->n_wanted, 1, __ATOMIC_RELAXED);

        if (i < ov->wanted_cap)
            ov->wanted[i] = u;
    }
    /* a read across runs could not be checked: the op and the store
     * disagree on the layout, which no step may hide */
    if (rb == 0 || off % rb != 0 || n % rb != 0)
        return out_failed(ov, u, -1, dst, n);
    got = pread(ov->fd, dst, n, (off_t)((uint64_t)u * ov->unit_bytes + off));
    if (got != (ssize_t)n)
        return out_failed(ov, u, got < 0 ? errno : 0, dst, n);
    crc = ov->crc + (size_t)u * (size_t)(ov->unit_bytes / rb) + off / rb;
    if (!hy_out_runs_match(crc, dst, n, rb))
        return out_failed(ov, u, EBADMSG, dst, n);
    __atomic_fetch_add(&ov->disk_read_bytes, (uint64_t)n, __ATOMIC_RELAXED);
    return dst;
}
