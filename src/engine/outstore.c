/*
 * outstore.c - RAM slots and a spill file for running sequences' pages
 * beyond their hot window (outstore.h).
 */
#define _GNU_SOURCE
#include "engine/outstore.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "kv/plan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
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

static void *os_io_main(void *arg);

int hy_outstore_init(hy_outstore_t *s, const hy_outstore_opts_t *o, char *err)
{
    size_t nu, nw, nc;
    int rc;

    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->o = *o;
    if (o->unit_bytes < 1 || o->n_units < 1 || o->n_warm < 0 ||
        (o->run_bytes > 0 && o->unit_bytes % o->run_bytes != 0))
        return hy_err(err, HY_EINVAL, "out store: %d units of %llu bytes (checked in runs of "
                      "%llu), %d in RAM", o->n_units, (unsigned long long)o->unit_bytes,
                      (unsigned long long)o->run_bytes, o->n_warm);
    if (o->n_warm == 0 || o->n_warm > o->n_units)
        s->o.n_warm = o->n_units;
    if (o->run_bytes == 0)
        s->o.run_bytes = o->unit_bytes;
    s->runs = s->o.unit_bytes / s->o.run_bytes;
    nu = (size_t)s->o.n_units;
    nw = (size_t)s->o.n_warm;
    /* a CRC per run of every unit; without a file, none is used */
    nc = s->o.n_warm < s->o.n_units ? nu * (size_t)s->runs : 1;
    s->ram = malloc(nw * (size_t)o->unit_bytes);
    s->slot = malloc(nu * sizeof *s->slot);
    s->slot_unit = malloc(nw * sizeof *s->slot_unit);
    s->ref = calloc(nu, 1);
    s->on_disk = calloc(nu, 1);
    s->crc = calloc(nc, sizeof *s->crc);
    s->free_units = malloc(nu * sizeof *s->free_units);
    s->free_slots = malloc(nw * sizeof *s->free_slots);
    s->wanted = malloc(nu * sizeof *s->wanted);
    s->unit_job = malloc(nu * sizeof *s->unit_job);
    s->job_unit = malloc(nw * sizeof *s->job_unit);
    s->job_slot = malloc(nw * sizeof *s->job_slot);
    s->job_err = malloc(nw * sizeof *s->job_err);
    s->job_in = malloc(nw);
    s->job_ns = malloc(nw * sizeof *s->job_ns);
    if (!s->ram || !s->slot || !s->slot_unit || !s->ref || !s->on_disk || !s->crc ||
        !s->free_units || !s->free_slots || !s->wanted || !s->unit_job || !s->job_unit ||
        !s->job_slot || !s->job_err || !s->job_in || !s->job_ns) {
        hy_outstore_free(s);
        return hy_err(err, HY_ENOMEM, "out store: out of memory for %d units of %llu bytes "
                      "(%d in RAM)", o->n_units, (unsigned long long)o->unit_bytes,
                      s->o.n_warm);
    }
    for (size_t i = 0; i < nu; i++) {
        s->slot[i] = -1;
        s->unit_job[i] = -1;
        s->free_units[i] = (int32_t)(nu - 1 - i);
    }
    for (size_t i = 0; i < nw; i++) {
        s->slot_unit[i] = -1;
        s->free_slots[i] = (int32_t)(nw - 1 - i);
    }
    s->n_free_units = s->o.n_units;
    s->n_free_slots = s->o.n_warm;
    if (s->o.n_warm < s->o.n_units) {
        if ((rc = os_file(s, err)) != HY_OK) {
            hy_outstore_free(s);
            return rc;
        }
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv_job, NULL);
        pthread_cond_init(&s->cv_done, NULL);
        if ((rc = pthread_create(&s->io, NULL, os_io_main, s)) != 0) {
            pthread_mutex_destroy(&s->mu);
            pthread_cond_destroy(&s->cv_job);
            pthread_cond_destroy(&s->cv_done);
            hy_outstore_free(s);
            return hy_err(err, HY_ENOMEM, "out store: starting its I/O thread: %s",
                          strerror(rc));
        }
        s->io_up = true;
    }
    s->view.ram = s->ram;
    s->view.slot = s->slot;
    s->view.unit_bytes = o->unit_bytes;
    s->view.run_bytes = s->o.run_bytes;
    s->view.crc = s->crc;
    s->view.fd = s->fd;
    s->view.ref = s->ref;
    s->view.wanted = s->wanted;
    s->view.wanted_cap = s->o.n_units;
    s->view.failed_unit = -1;
    return HY_OK;
}

void hy_outstore_free(hy_outstore_t *s)
{
    if (s->io_up) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_broadcast(&s->cv_job);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->io, NULL);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv_job);
        pthread_cond_destroy(&s->cv_done);
    }
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
    free(s->unit_job);
    free(s->job_unit);
    free(s->job_slot);
    free(s->job_err);
    free(s->job_in);
    free(s->job_ns);
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
    for (uint64_t i = 0; i < s->runs; i++)
        s->crc[(size_t)u * s->runs + i] =
            hy_crc32c(0, src + i * s->o.run_bytes, (size_t)s->o.run_bytes);
    s->on_disk[u] = 1;
    s->c.spills++;
    s->c.disk_write_bytes += s->o.unit_bytes;
    return HY_OK;
}

/* A free RAM slot: the clock passes over the slots, clearing each one's
 * mark, and empties the first unmarked one (writing it to the file first
 * if it was never written); a slot the I/O thread is filling is passed
 * over.  HY_EFULL when every slot holds a marked or arriving unit twice
 * round. */
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
        if (s->unit_job[u] >= 0)
            continue;
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
    rc = os_free_slot(s, &sl, err);
    /* every slot holds an arriving unit: one frees up when the I/O
     * thread's batch is accounted */
    if (rc == HY_EFULL && s->n_jobs > 0) {
        hy_outstore_sync(s);
        rc = os_free_slot(s, &sl, err);
    }
    if (rc != HY_OK)
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
    /* on its way up: its slot and file bytes are the I/O thread's until
     * the batch ends (a read of one unit: microseconds) */
    if (s->unit_job[u] >= 0)
        hy_outstore_sync(s);
    if (s->slot[u] >= 0) {
        s->slot_unit[s->slot[u]] = -1;
        s->free_slots[s->n_free_slots++] = s->slot[u];
        s->slot[u] = -1;
    }
    s->on_disk[u] = 0;
    s->ref[u] = 0;
    s->free_units[s->n_free_units++] = u;
}

/* Units the I/O thread reads in one call at most. */
#define OS_RUN 64

/* Cold units u[0..n), each the one before plus one (their bytes follow
 * one another in the file), into RAM slots sl[0..n) with one preadv, each
 * checked run by run against what was written: e[k] = 0, an errno, -1
 * for a short read or EBADMSG.  A step's cold units come in its reading
 * order, a chosen block's pages one after the other: one call a block
 * instead of one a page. */
static void os_read_units(const hy_outstore_t *s, const int32_t *u, const int32_t *sl, int32_t n,
                          int *e)
{
    size_t ub = (size_t)s->o.unit_bytes;
    struct iovec iov[OS_RUN];
    ssize_t got;

    for (int32_t k = 0; k < n; k++)
        iov[k] = (struct iovec){s->ram + (size_t)sl[k] * ub, ub};
    got = preadv(s->fd, iov, n, (off_t)((uint64_t)u[0] * ub));
    for (int32_t k = 0; k < n; k++) {
        if (got < 0)
            e[k] = errno;
        else if ((size_t)got < (size_t)(k + 1) * ub)
            e[k] = -1;
        else
            e[k] = hy_out_runs_match(s->crc + (size_t)u[k] * s->runs, iov[k].iov_base, ub,
                                     s->o.run_bytes)
                       ? 0
                       : EBADMSG;
    }
}

/* The I/O thread: takes the batch's jobs a run of consecutive units at a
 * time, reads and checks them outside the lock and publishes their slots
 * at once (the op of a running step may read them from there on). */
static void *os_io_main(void *arg)
{
    hy_outstore_t *s = arg;

    pthread_mutex_lock(&s->mu);
    for (;;) {
        int32_t i, j, u[OS_RUN], sl[OS_RUN];
        int e[OS_RUN];
        uint64_t t0, ns;

        while (!s->stop && s->next_job >= s->n_jobs)
            pthread_cond_wait(&s->cv_job, &s->mu);
        if (s->stop)
            break;
        i = s->next_job;
        for (j = i; j < s->n_jobs && j - i < OS_RUN; j++) {
            if (j > i && s->job_unit[j] != s->job_unit[j - 1] + 1)
                break;
            u[j - i] = s->job_unit[j];
            sl[j - i] = s->job_slot[j];
        }
        s->next_job = j;
        pthread_mutex_unlock(&s->mu);
        t0 = os_now_ns();
        os_read_units(s, u, sl, j - i, e);
        ns = os_now_ns() - t0;
        pthread_mutex_lock(&s->mu);
        for (int32_t k = i; k < j; k++) {
            s->job_err[k] = e[k - i];
            /* the call's time shared: the read time adds up to the thread's */
            s->job_ns[k] = ns / (uint64_t)(j - i);
            if (e[k - i] == 0) {
                __atomic_store_n(&s->slot[u[k - i]], sl[k - i], __ATOMIC_RELEASE);
                s->job_in[k] = 1;
            }
        }
        s->n_done += j - i;
        if (s->n_done == s->n_jobs)
            pthread_cond_broadcast(&s->cv_done);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

void hy_outstore_sync(hy_outstore_t *s)
{
    int32_t n;

    if (s->n_jobs == 0)
        return;
    pthread_mutex_lock(&s->mu);
    while (s->n_done < s->n_jobs)
        pthread_cond_wait(&s->cv_done, &s->mu);
    n = s->n_jobs;
    s->n_jobs = s->next_job = s->n_done = 0;
    pthread_mutex_unlock(&s->mu);
    /* the batch is done: the thread waits for the next one and touches
     * none of it */
    for (int32_t i = 0; i < n; i++) {
        int32_t u = s->job_unit[i], sl = s->job_slot[i];

        s->unit_job[u] = -1;
        if (s->job_in[i]) {
            s->c.promotions++;
            s->ref[u] = 1;
        } else {
            s->slot_unit[sl] = -1;
            s->free_slots[s->n_free_slots++] = sl;
        }
        if (s->job_err[i] == 0 || s->job_err[i] == EBADMSG) {
            s->c.disk_read_bytes += s->o.unit_bytes;
            s->c.disk_read_ns += s->job_ns[i];
            if (s->read_time != NULL)
                hy_tier_observe(s->read_time, s->job_ns[i]);
        }
        if (s->job_err[i] != 0) {
            /* it stays cold: the next step that reads it checks what it
             * reads and fails if the file is bad */
            s->c.promote_failures++;
            hy_log(LOG_WARNING, "out_store_read_failed", "unit=%d offset=%llu file=%s err=%s",
                   u, (unsigned long long)((uint64_t)u * s->o.unit_bytes), s->path,
                   s->job_err[i] < 0 ? "short read"
                   : s->job_err[i] == EBADMSG ? "checksum mismatch" : strerror(s->job_err[i]));
        }
    }
}

/* Cold unit u on its way up as job i, into a slot the clock frees (false:
 * every slot holds a unit on its way up) */
static bool os_queue(hy_outstore_t *s, int32_t u, int32_t i)
{
    char sub[HY_ERR_LEN];
    int32_t sl;

    if (os_free_slot(s, &sl, sub) != HY_OK)
        return false;
    s->slot_unit[sl] = u;
    s->unit_job[u] = i;
    s->job_unit[i] = u;
    s->job_slot[i] = sl;
    s->job_err[i] = 0;
    s->job_in[i] = 0;
    s->job_ns[i] = 0;
    return true;
}

int hy_outstore_end_step(hy_outstore_t *s, char *err)
{
    hy_out_view_t *v = &s->view;
    int32_t n = HY_MIN(v->n_wanted, v->wanted_cap), failed = v->failed_unit, queued = 0;
    int e = v->failed_errno;
    bool full = false;
    int rc = HY_OK;

    hy_outstore_sync(s);
    s->c.disk_read_bytes += v->disk_read_bytes;
    v->disk_read_bytes = 0;
    if (failed >= 0)
        rc = hy_err(err, HY_EIO, "out store: reading unit %d at offset %lld of %s: %s", failed,
                    (long long)((uint64_t)failed * s->o.unit_bytes), s->path,
                    e == EBADMSG ? "checksum mismatch"
                    : e == -1 ? "a read across the checked runs"
                    : e ? strerror(e) : "short read");
    /* what the step read cold comes up while the next one runs; a step
     * that failed reading one leaves it cold */
    for (int32_t i = 0; i < n; i++) {
        int32_t u = s->wanted[i];

        s->ref[u] = 1;
        /* (every one is marked read again, so that the op lists it next
         * time, whether it goes up now or not) */
        if (rc != HY_OK || full || s->slot[u] >= 0)
            continue;
        if (queued == s->o.n_warm || !os_queue(s, u, queued))
            full = true;
        else
            queued++;
    }
    if (queued > 0) {
        pthread_mutex_lock(&s->mu);
        s->n_jobs = queued;
        pthread_cond_signal(&s->cv_job);
        pthread_mutex_unlock(&s->mu);
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
    c->pending = s->n_jobs;
    c->used = s->o.n_units - s->n_free_units;
    c->warm_used = s->o.n_warm - s->n_free_slots - c->pending;
    c->cold = c->used - c->warm_used;
}
