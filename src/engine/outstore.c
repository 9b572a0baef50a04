/*
 * outstore.c - RAM slots and a spill file for running sequences' pages
 * beyond their hot window (outstore.h).
 */
#define _GNU_SOURCE
#include "engine/outstore.h"
#include "common/crc32c.h"
#include "kv/plan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int os_file(hy_outstore_t *s, char *err)
{
    const char *dir = s->o.dir;
    uint64_t bytes = (uint64_t)s->o.n_units * s->o.unit_bytes;
    int rc;

    if (dir == NULL || dir[0] == '\0')
        return hy_err(err, HY_EINVAL, "out store: %d of %d units in RAM needs a directory for "
                      "the rest", s->o.n_warm, s->o.n_units);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return hy_err(err, HY_EIO, "out store: mkdir %s: %s", dir, strerror(errno));
    if ((size_t)snprintf(s->path, sizeof s->path, "%s/hyserve-spill-XXXXXX", dir) >=
        sizeof s->path)
        return hy_err(err, HY_EINVAL, "out store: directory name too long: %s", dir);
    if ((s->fd = mkostemp(s->path, O_CLOEXEC)) < 0)
        return hy_err(err, HY_EIO, "out store: creating %s: %s", s->path, strerror(errno));
    /* nothing in it outlives the process */
    unlink(s->path);
    if ((rc = posix_fallocate(s->fd, 0, (off_t)bytes)) != 0)
        return hy_err(err, HY_EIO, "out store: %s cannot hold a spill file of %.1f MiB "
                      "(%d units of %llu bytes): %s", dir, (double)bytes / 1048576.0,
                      s->o.n_units, (unsigned long long)s->o.unit_bytes, strerror(rc));
    s->c.file_bytes = bytes;
    return HY_OK;
}

int hy_outstore_init(hy_outstore_t *s, const hy_outstore_opts_t *o, char *err)
{
    size_t nu, nw;
    int rc;

    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->o = *o;
    if (o->unit_bytes < 1 || o->n_units < 1 || o->n_warm < 0)
        return hy_err(err, HY_EINVAL, "out store: %d units of %llu bytes, %d in RAM",
                      o->n_units, (unsigned long long)o->unit_bytes, o->n_warm);
    if (o->n_warm == 0 || o->n_warm > o->n_units)
        s->o.n_warm = o->n_units;
    nu = (size_t)s->o.n_units;
    nw = (size_t)s->o.n_warm;
    s->ram = malloc(nw * (size_t)o->unit_bytes);
    s->slot = malloc(nu * sizeof *s->slot);
    s->slot_unit = malloc(nw * sizeof *s->slot_unit);
    s->ref = calloc(nu, 1);
    s->on_disk = calloc(nu, 1);
    s->crc = calloc(nu, sizeof *s->crc);
    s->free_units = malloc(nu * sizeof *s->free_units);
    s->free_slots = malloc(nw * sizeof *s->free_slots);
    s->wanted = malloc(nu * sizeof *s->wanted);
    if (!s->ram || !s->slot || !s->slot_unit || !s->ref || !s->on_disk || !s->crc ||
        !s->free_units || !s->free_slots || !s->wanted) {
        hy_outstore_free(s);
        return hy_err(err, HY_ENOMEM, "out store: out of memory for %d units of %llu bytes "
                      "(%d in RAM)", o->n_units, (unsigned long long)o->unit_bytes,
                      s->o.n_warm);
    }
    for (size_t i = 0; i < nu; i++) {
        s->slot[i] = -1;
        s->free_units[i] = (int32_t)(nu - 1 - i);
    }
    for (size_t i = 0; i < nw; i++) {
        s->slot_unit[i] = -1;
        s->free_slots[i] = (int32_t)(nw - 1 - i);
    }
    s->n_free_units = s->o.n_units;
    s->n_free_slots = s->o.n_warm;
    if (s->o.n_warm < s->o.n_units && (rc = os_file(s, err)) != HY_OK) {
        hy_outstore_free(s);
        return rc;
    }
    s->view.ram = s->ram;
    s->view.slot = s->slot;
    s->view.unit_bytes = o->unit_bytes;
    s->view.fd = s->fd;
    s->view.ref = s->ref;
    s->view.wanted = s->wanted;
    s->view.wanted_cap = s->o.n_units;
    s->view.failed_unit = -1;
    return HY_OK;
}

void hy_outstore_free(hy_outstore_t *s)
{
    if (s->fd >= 0)
        close(s->fd);
    free(s->ram);
    free(s->slot);
    free(s->slot_unit);
    free(s->ref);
    free(s->on_disk);
    free(s->crc);
    free(s->free_units);
    free(s->free_slots);
    free(s->wanted);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

static uint8_t *os_bytes(hy_outstore_t *s, int32_t slot)
{
    return s->ram + (size_t)slot * (size_t)s->o.unit_bytes;
}

static uint64_t os_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int os_write(hy_outstore_t *s, int32_t u, char *err)
{
    const uint8_t *src = os_bytes(s, s->slot[u]);
    off_t off = (off_t)((uint64_t)u * s->o.unit_bytes);
    uint64_t t0 = os_now_ns();
    ssize_t n = pwrite(s->fd, src, (size_t)s->o.unit_bytes, off);

    if (s->write_time != NULL)
        hy_tier_observe(s->write_time, os_now_ns() - t0);
    if (n != (ssize_t)s->o.unit_bytes)
        return hy_err(err, HY_EIO, "out store: writing unit %d at offset %lld of %s: %s", u,
                      (long long)off, s->path, n < 0 ? strerror(errno) : "short write");
    s->crc[u] = hy_crc32c(0, src, (size_t)s->o.unit_bytes);
    s->on_disk[u] = 1;
    s->c.spills++;
    s->c.disk_write_bytes += s->o.unit_bytes;
    return HY_OK;
}

/* A free RAM slot: the clock passes over the slots, clearing each one's
 * mark, and empties the first unmarked one (writing it to the file first
 * if it was never written). */
static int os_free_slot(hy_outstore_t *s, int32_t *slot, char *err)
{
    int rc;

    if (s->n_free_slots > 0) {
        *slot = s->free_slots[--s->n_free_slots];
        return HY_OK;
    }
    for (int32_t i = 0; i <= 2 * s->o.n_warm; i++) {
        int32_t sl = s->hand, u = s->slot_unit[sl];

        s->hand = (s->hand + 1) % s->o.n_warm;
        if (s->ref[u]) {
            s->ref[u] = 0;
            continue;
        }
        if (!s->on_disk[u] && (rc = os_write(s, u, err)) != HY_OK)
            return rc;
        s->slot[u] = -1;
        s->slot_unit[sl] = -1;
        *slot = sl;
        return HY_OK;
    }
    return hy_err(err, HY_EFULL, "out store: no RAM slot"); /* every slot holds a unit */
}

int hy_outstore_take(hy_outstore_t *s, int32_t *unit, uint8_t **bytes, char *err)
{
    int32_t sl, u;
    int rc;

    if (s->n_free_units == 0)
        return hy_err(err, HY_EFULL, "out store: all %d units in use", s->o.n_units);
    if ((rc = os_free_slot(s, &sl, err)) != HY_OK)
        return rc;
    u = s->free_units[--s->n_free_units];
    s->slot[u] = sl;
    s->slot_unit[sl] = u;
    s->on_disk[u] = 0;
    s->ref[u] = 1; /* a new unit is a recent one */
    *unit = u;
    *bytes = os_bytes(s, sl);
    return HY_OK;
}

void hy_outstore_put(hy_outstore_t *s, int32_t u)
{
    if (u < 0 || u >= s->o.n_units)
        return;
    if (s->slot[u] >= 0) {
        s->slot_unit[s->slot[u]] = -1;
        s->free_slots[s->n_free_slots++] = s->slot[u];
        s->slot[u] = -1;
    }
    s->on_disk[u] = 0;
    s->ref[u] = 0;
    s->free_units[s->n_free_units++] = u;
}

/* Cold unit u into a RAM slot, checked against what was written. */
static int os_promote(hy_outstore_t *s, int32_t u, char *err)
{
    off_t off = (off_t)((uint64_t)u * s->o.unit_bytes);
    uint64_t t0, ns;
    int32_t sl;
    ssize_t n;
    bool same;
    int rc;

    if ((rc = os_free_slot(s, &sl, err)) != HY_OK)
        return rc;
    t0 = os_now_ns();
    n = pread(s->fd, os_bytes(s, sl), (size_t)s->o.unit_bytes, off);
    same = n == (ssize_t)s->o.unit_bytes &&
           hy_crc32c(0, os_bytes(s, sl), (size_t)n) == s->crc[u];
    ns = os_now_ns() - t0;
    s->c.disk_read_ns += ns;
    if (s->read_time != NULL)
        hy_tier_observe(s->read_time, ns);
    if (!same) {
        s->free_slots[s->n_free_slots++] = sl;
        return hy_err(err, HY_EIO, "out store: unit %d at offset %lld of %s: %s", u,
                      (long long)off, s->path,
                      n < 0 ? strerror(errno)
                            : n != (ssize_t)s->o.unit_bytes ? "short read" : "checksum mismatch");
    }
    s->c.disk_read_bytes += s->o.unit_bytes;
    s->c.promotions++;
    s->slot[u] = sl;
    s->slot_unit[sl] = u;
    s->ref[u] = 1;
    return HY_OK;
}

int hy_outstore_end_step(hy_outstore_t *s, char *err)
{
    hy_out_view_t *v = &s->view;
    int32_t n = HY_MIN(v->n_wanted, v->wanted_cap), failed = v->failed_unit;
    int rc = HY_OK;

    s->c.disk_read_bytes += v->disk_read_bytes;
    v->disk_read_bytes = 0;
    if (failed >= 0)
        rc = hy_err(err, HY_EIO, "out store: reading unit %d at offset %lld of %s: %s", failed,
                    (long long)((uint64_t)failed * s->o.unit_bytes), s->path,
                    v->failed_errno ? strerror(v->failed_errno) : "short read");
    /* every cold unit read is checked, brought up or not */
    for (int32_t i = 0; i < n; i++) {
        int32_t u = s->wanted[i];
        char sub[HY_ERR_LEN];

        s->ref[u] = 1;
        if (s->slot[u] >= 0)
            continue;
        if (os_promote(s, u, sub) != HY_OK && rc == HY_OK)
            rc = hy_err(err, HY_EIO, "%s", sub);
    }
    v->n_wanted = 0;
    v->failed_unit = -1;
    v->failed_errno = 0;
    return rc;
}

void hy_outstore_counts(const hy_outstore_t *s, hy_outstore_counts_t *c)
{
    *c = s->c;
    c->units = s->o.n_units;
    c->warm = s->o.n_warm;
    c->used = s->o.n_units - s->n_free_units;
    c->warm_used = s->o.n_warm - s->n_free_slots;
    c->cold = c->used - c->warm_used;
}
