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
#include <sys/uio.h>
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

/* Where unit u's bytes at off lie when it is warm (marked read), else
 * NULL: the unit is cold, marked wanted the first time a step reads it. */
static const uint8_t *out_warm(hy_out_view_t *ov, int32_t u, size_t off)
{
    int32_t slot = __atomic_load_n(&ov->slot[u], __ATOMIC_ACQUIRE);

    if (slot >= 0) {
        __atomic_store_n(&ov->ref[u], 1, __ATOMIC_RELAXED);
        return ov->ram + (size_t)slot * ov->unit_bytes + off;
    }
    if (__atomic_exchange_n(&ov->ref[u], 2, __ATOMIC_RELAXED) != 2) {
        int32_t i = __atomic_fetch_add(&ov->n_wanted, 1, __ATOMIC_RELAXED);

        if (i < ov->wanted_cap)
            ov->wanted[i] = u;
    }
    return NULL;
}

/* A read across runs could not be checked: the op and the store disagree
 * on the layout, which no step may hide. */
static bool out_whole_runs(const hy_out_view_t *ov, size_t off, size_t n)
{
    uint64_t rb = ov->run_bytes;

    return rb != 0 && off % rb == 0 && n % rb == 0;
}

/* The bytes of a cold read, read into dst: checked and counted. */
static const uint8_t *out_check(hy_out_view_t *ov, int32_t u, size_t off, uint8_t *dst, size_t n)
{
    uint64_t rb = ov->run_bytes;
    const uint32_t *crc = ov->crc + (size_t)u * (size_t)(ov->unit_bytes / rb) + off / rb;

    if (!hy_out_runs_match(crc, dst, n, rb))
        return out_failed(ov, u, EBADMSG, dst, n);
    return dst;
}

/* Reads in one preadv at most: keeps the iovec array small on the stack. */
#define HY_OUT_IOV 64

void hy_out_reads(hy_out_view_t *ov, hy_out_req_t *r, int32_t n)
{
    /* the bytes between two merged reads land here and are dropped (every
     * gap may share it: nobody reads it) */
    static __thread uint8_t gap[HY_OUT_GAP_MAX];
    struct iovec iov[HY_OUT_IOV];
    int32_t i = 0;

    /* warm first: a cold mark is what says "read from the file" below */
    for (int32_t j = 0; j < n; j++) {
        r[j].at = out_warm(ov, r[j].unit, r[j].off);
        if (!r[j].at && !out_whole_runs(ov, r[j].off, r[j].n))
            r[j].at = out_failed(ov, r[j].unit, -1, r[j].dst, r[j].n);
    }
    while (i < n) {
        if (r[i].at) {
            i++;
            continue;
        }
        uint64_t start = (uint64_t)r[i].unit * ov->unit_bytes + r[i].off, end = start + r[i].n;
        int32_t j = i + 1, niov = 1;
        ssize_t got;

        iov[0] = (struct iovec){r[i].dst, r[i].n};
        for (; j < n && !r[j].at && niov + 2 <= HY_OUT_IOV; j++) {
            uint64_t at = (uint64_t)r[j].unit * ov->unit_bytes + r[j].off;

            if (at < end || at - end > HY_OUT_GAP_MAX)
                break;
            if (at > end)
                iov[niov++] = (struct iovec){gap, (size_t)(at - end)};
            iov[niov++] = (struct iovec){r[j].dst, r[j].n};
            end = at + r[j].n;
        }
        got = preadv(ov->fd, iov, niov, (off_t)start);
        if (got == (ssize_t)(end - start))
            __atomic_fetch_add(&ov->disk_read_bytes, end - start, __ATOMIC_RELAXED);
        for (int32_t k = i; k < j; k++)
            r[k].at = got == (ssize_t)(end - start)
                          ? out_check(ov, r[k].unit, r[k].off, r[k].dst, r[k].n)
                          : out_failed(ov, r[k].unit, got < 0 ? errno : 0, r[k].dst, r[k].n);
        i = j;
    }
}

const uint8_t *hy_out_read(hy_out_view_t *ov, int32_t u, size_t off, uint8_t *dst, size_t n)
{
    hy_out_req_t r = {u, off, n, dst, NULL};

    hy_out_reads(ov, &r, 1);
    return r.at;
}
