/*
 * tier.c - the warm and cold tier store (see tier.h for what and why).
 * Entries live in one growable array, found through a chained hash index,
 * and sit on up to two LRU lists (their kind's warm list while warm, the
 * cold list while they have a file).  Every counter is derived: acc(-1)
 * before a change to an entry and acc(+1) after it keep them equal to
 * what hy_tier_check recounts from the entries.  The I/O threads take
 * jobs (read a file into a warm slot, write a warm slot to a file) from
 * a FIFO; an entry with a job is pinned, so its index and slot stay put.
 */
#define _GNU_SOURCE
#include "ipc/tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

#define F_WARM 1u   /* the warm slot holds the content */
#define F_COLD 2u   /* a file holds the content */
#define F_QUEUED 4u /* in a job FIFO, not yet taken by a thread */

enum { JOB_NONE, JOB_READ, JOB_WRITE };

typedef struct {
    uint64_t hash;
    int32_t depth;
    uint8_t kind, job, from_cold, flags;
    int32_t warm;         /* warm slot, -1 = none (allocated while filling or reading) */
    int32_t pins;         /* copies in progress + a job */
    int32_t hnext;        /* index chain; free-list link while free */
    int32_t wprev, wnext; /* the kind's warm LRU while F_WARM */
    int32_t cprev, cnext; /* the cold LRU while F_COLD */
    int32_t qnext;        /* job FIFO */
    uint64_t file_bytes;  /* the file's size while F_COLD, or reserved for a write */
} tier_entry_t;

typedef struct {
    int32_t head, tail;
} tier_list_t;

typedef struct {
    hy_tier_t *t;
    int job; /* JOB_READ or JOB_WRITE: the queue this thread serves */
} tier_io_arg_t;

struct hy_tier {
    hy_tier_opts_t o;
    char *dir;               /* disk_dir, or NULL */
    char *model_path;        /* o.model_path's copy, or NULL */
    int dirfd, lockfd;
    pthread_mutex_t mu;
    pthread_cond_t cv_job[2], cv_done; /* cv_job[JOB_READ - 1], cv_job[JOB_WRITE - 1] */
    /* entries */
    tier_entry_t *e;
    int32_t *tokens;         /* [cap][page_tokens] */
    int32_t cap, n_live, free_head;
    int32_t *buckets;        /* [n_buckets] */
    uint32_t n_buckets;
    /* warm slots */
    uint8_t *arena[HY_TIER_KINDS];
    size_t arena_bytes[HY_TIER_KINDS];
    int32_t n_warm[HY_TIER_KINDS];
    int32_t *warm_free[HY_TIER_KINDS]; /* stack of free slots */
    int32_t n_warm_free[HY_TIER_KINDS];
    tier_list_t wlru[HY_TIER_KINDS], clru;
    /* counters kept by acc() */
    int64_t n[HY_TIER_LEVELS][HY_TIER_KINDS][HY_TIER_STATES];
    int64_t bytes[HY_TIER_LEVELS][HY_TIER_STATES];
    /* jobs: reads (a request waits for them) and writes (nobody does), each
     * a FIFO with its own threads */
    tier_list_t q[2];        /* [JOB_READ - 1], [JOB_WRITE - 1]; linked by qnext */
    int32_t n_jobs;          /* queued + running */
    pthread_t *io;           /* n_io threads: the readers, then the writer */
    tier_io_arg_t *io_args;  /* [n_io] */
    int32_t n_io;
    bool stop;               /* the I/O threads end (lock held) */
    _Atomic bool stop_index; /* the indexer cuts its scan short */
    unsigned tag;            /* temporary file names */
    /* the disk tier */
    int disk_state;
    pthread_t indexer;
    bool indexer_started;
    hy_stats_t own_stats;    /* when o.stats is NULL */
    hy_tier_stats_t *st;
    _Atomic uint64_t *disk_errors;
};

#define RLX memory_order_relaxed

static int64_t tier_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static const char *tier_kind_name(int k)
{
    return k == HY_TIER_CKPT ? "checkpoint" : k == HY_TIER_SWA ? "sliding-window page" : "page";
}

static bool disk_usable(const hy_tier_t *t)
{
    return t->disk_state == HY_TIER_DISK_INDEXING || t->disk_state == HY_TIER_DISK_READY;
}

/* ---- accounting ------------------------------------------------------------- */

/* Adds (sign +1) or removes (-1) entry i's share of the counters. */
static void acc(hy_tier_t *t, int32_t i, int sign)
{
    const tier_entry_t *e = &t->e[i];
    int k = e->kind, st;

    if (e->warm >= 0) {
        st = e->pins > 0 ? HY_TIER_USED : HY_TIER_CACHED;
        t->n[HY_TIER_WARM][k][st] += sign;
        t->bytes[HY_TIER_WARM][st] += (int64_t)sign * (int64_t)t->o.unit_bytes[k];
    }
    if (e->flags & F_COLD) {
        st = e->job == JOB_READ ? HY_TIER_USED : HY_TIER_CACHED;
        t->n[HY_TIER_COLD][k][st] += sign;
        t->bytes[HY_TIER_COLD][st] += (int64_t)sign * (int64_t)e->file_bytes;
    } else if (e->job == JOB_WRITE) {
        t->n[HY_TIER_COLD][k][HY_TIER_USED] += sign;
        t->bytes[HY_TIER_COLD][HY_TIER_USED] += (int64_t)sign * (int64_t)e->file_bytes;
    }
}

/* Pins (+1) or unpins (-1) entry i: its warm slot moves between used and
 * cached. */
static void pin(hy_tier_t *t, int32_t i, int delta)
{
    acc(t, i, -1);
    t->e[i].pins += delta;
    acc(t, i, +1);
}

static uint64_t cold_taken(const hy_tier_t *t)
{
    return (uint64_t)(t->bytes[HY_TIER_COLD][HY_TIER_USED] + t->bytes[HY_TIER_COLD][HY_TIER_CACHED]);
}

/* Free counts and bytes, from the totals. */
static void derive_free(const hy_tier_t *t, int64_t n[HY_TIER_LEVELS][HY_TIER_KINDS][HY_TIER_STATES],
                        int64_t b[HY_TIER_LEVELS][HY_TIER_STATES])
{
    int64_t cold_free = (int64_t)t->o.disk_bytes - b[HY_TIER_COLD][HY_TIER_USED] -
                        b[HY_TIER_COLD][HY_TIER_CACHED];

    b[HY_TIER_WARM][HY_TIER_FREE] = 0;
    for (int k = 0; k < HY_TIER_KINDS; k++) {
        uint64_t file = hy_tier_file_header_bytes(hy_tier_kind_is_page(k) ? t->o.ident.page_tokens : 0) +
                        t->o.unit_bytes[k];

        n[HY_TIER_WARM][k][HY_TIER_FREE] = t->n_warm[k] - n[HY_TIER_WARM][k][HY_TIER_USED] -
                                           n[HY_TIER_WARM][k][HY_TIER_CACHED];
        b[HY_TIER_WARM][HY_TIER_FREE] +=
            n[HY_TIER_WARM][k][HY_TIER_FREE] * (int64_t)t->o.unit_bytes[k];
        n[HY_TIER_COLD][k][HY_TIER_FREE] =
            t->dir != NULL && t->o.unit_bytes[k] > 0 && cold_free > 0 ? cold_free / (int64_t)file : 0;
    }
    b[HY_TIER_COLD][HY_TIER_FREE] = t->dir != NULL ? cold_free : 0;
}

/* Mirrors the counters into the shared stats (for /metrics). */
static void publish(hy_tier_t *t)
{
    int64_t n[HY_TIER_LEVELS][HY_TIER_KINDS][HY_TIER_STATES], b[HY_TIER_LEVELS][HY_TIER_STATES];

    memcpy(n, t->n, sizeof n);
    memcpy(b, t->bytes, sizeof b);
    derive_free(t, n, b);
    for (int l = HY_TIER_WARM; l < HY_TIER_LEVELS; l++) {
        for (int s = 0; s < HY_TIER_STATES; s++) {
            for (int k = 0; k < HY_TIER_KINDS; k++)
                atomic_store_explicit(&t->st->n[l][k][s], n[l][k][s], RLX);
            atomic_store_explicit(&t->st->bytes[l][s], b[l][s], RLX);
        }
    }
    atomic_store_explicit(&t->st->disk_state, (uint32_t)t->disk_state, RLX);
}

/* ---- lists ------------------------------------------------------------------ */

/* The warm and cold lists share one implementation through these offsets. */
#define LINK_W 0
#define LINK_C 1

static int32_t *l_prev(tier_entry_t *e, int which) { return which == LINK_W ? &e->wprev : &e->cprev; }
static int32_t *l_next(tier_entry_t *e, int which) { return which == LINK_W ? &e->wnext : &e->cnext; }

static void list_remove(hy_tier_t *t, tier_list_t *l, int which, int32_t i)
{
    tier_entry_t *e = &t->e[i];
    int32_t p = *l_prev(e, which), n = *l_next(e, which);

    if (p >= 0)
        *l_next(&t->e[p], which) = n;
    else
        l->head = n;
    if (n >= 0)
        *l_prev(&t->e[n], which) = p;
    else
        l->tail = p;
    *l_prev(e, which) = *l_next(e, which) = -1;
}

/* Appends at the tail (most recent), or at the head (oldest) when at_head. */
static void list_add(hy_tier_t *t, tier_list_t *l, int which, int32_t i, bool at_head)
{
    tier_entry_t *e = &t->e[i];

    if (at_head) {
        *l_prev(e, which) = -1;
        *l_next(e, which) = l->head;
        if (l->head >= 0)
            *l_prev(&t->e[l->head], which) = i;
        else
            l->tail = i;
        l->head = i;
        return;
    }
    *l_next(e, which) = -1;
    *l_prev(e, which) = l->tail;
    if (l->tail >= 0)
        *l_next(&t->e[l->tail], which) = i;
    else
        l->head = i;
    l->tail = i;
}

static void list_touch(hy_tier_t *t, tier_list_t *l, int which, int32_t i)
{
    if (l->tail != i) {
        list_remove(t, l, which, i);
        list_add(t, l, which, i, false);
    }
}

/* ---- the index ---------------------------------------------------------------- */

static uint32_t bucket_of(const hy_tier_t *t, int32_t kind, uint64_t hash)
{
    uint64_t h = hash ^ (uint64_t)kind * 0x9e3779b97f4a7c15ULL;

    h ^= h >> 31;
    return (uint32_t)h & (t->n_buckets - 1);
}

static int32_t find(const hy_tier_t *t, int32_t kind, uint64_t hash)
{
    int32_t i;

    for (i = t->buckets[bucket_of(t, kind, hash)]; i >= 0; i = t->e[i].hnext)
        if (t->e[i].hash == hash && t->e[i].kind == kind)
            return i;
    return -1;
}

static int32_t *tok_of(hy_tier_t *t, int32_t i)
{
    return t->tokens + (size_t)i * (size_t)HY_MAX(t->o.ident.page_tokens, 1u);
}

/* Doubles the entry array and the index.  Entries are referred to by
 * index only, so moving them is safe under the lock. */
static int grow(hy_tier_t *t)
{
    int32_t ncap = t->cap ? t->cap * 2 : 1024, i;
    uint32_t nb = (uint32_t)ncap * 2;
    size_t pt = HY_MAX(t->o.ident.page_tokens, 1u);
    tier_entry_t *ne = realloc(t->e, sizeof *ne * (size_t)ncap);
    int32_t *nt, *bk;

    if (ne == NULL)
        return HY_ENOMEM;
    t->e = ne;
    nt = realloc(t->tokens, sizeof *nt * pt * (size_t)ncap);
    bk = malloc(sizeof *bk * nb);
    if (nt == NULL || bk == NULL) {
        if (nt != NULL)
            t->tokens = nt;
        free(bk);
        return HY_ENOMEM;
    }
    t->tokens = nt;
    for (i = ncap - 1; i >= t->cap; i--) {
        memset(&t->e[i], 0, sizeof t->e[i]);
        t->e[i].kind = 0xff; /* free */
        t->e[i].hnext = t->free_head;
        t->free_head = i;
    }
    /* rehash the live entries */
    for (uint32_t b = 0; b < nb; b++)
        bk[b] = -1;
    free(t->buckets);
    t->buckets = bk;
    t->n_buckets = nb;
    for (i = 0; i < t->cap; i++) {
        if (t->e[i].kind == 0xff)
            continue;
        uint32_t b = bucket_of(t, t->e[i].kind, t->e[i].hash);
        t->e[i].hnext = t->buckets[b];
        t->buckets[b] = i;
    }
    t->cap = ncap;
    return HY_OK;
}

/* A new entry with nothing in it (the caller fills a tier in); -1 when
 * memory is out. */
static int32_t entry_new(hy_tier_t *t, int32_t kind, uint64_t hash, int32_t depth,
                         const int32_t *tokens)
{
    tier_entry_t *e;
    int32_t i;
    uint32_t b;

    if (t->free_head < 0 && grow(t) != HY_OK)
        return -1;
    i = t->free_head;
    e = &t->e[i];
    t->free_head = e->hnext;
    memset(e, 0, sizeof *e);
    e->hash = hash;
    e->depth = depth;
    e->kind = (uint8_t)kind;
    e->warm = -1;
    e->wprev = e->wnext = e->cprev = e->cnext = e->qnext = -1;
    if (hy_tier_kind_is_page(kind) && tokens != NULL)
        memcpy(tok_of(t, i), tokens, sizeof(int32_t) * t->o.ident.page_tokens);
    b = bucket_of(t, kind, hash);
    e->hnext = t->buckets[b];
    t->buckets[b] = i;
    t->n_live++;
    return i;
}

/* Frees entry i when no tier holds it and nothing works on it. */
static void entry_gc(hy_tier_t *t, int32_t i)
{
    tier_entry_t *e = &t->e[i];
    int32_t *pp;

    if (e->warm >= 0 || (e->flags & F_COLD) || e->pins > 0 || e->job != JOB_NONE)
        return;
    for (pp = &t->buckets[bucket_of(t, e->kind, e->hash)]; *pp != i; pp = &t->e[*pp].hnext)
        ;
    *pp = e->hnext;
    e->kind = 0xff; /* free (grow skips it) */
    e->hnext = t->free_head;
    t->free_head = i;
    t->n_live--;
}

static bool page_matches(hy_tier_t *t, int32_t i, int32_t depth, const int32_t *tokens)
{
    return !hy_tier_kind_is_page(t->e[i].kind) ||
           (t->e[i].depth == depth &&
            memcmp(tok_of(t, i), tokens, sizeof(int32_t) * t->o.ident.page_tokens) == 0);
}

/* ---- warm slots ---------------------------------------------------------------- */

static void *slot_ptr(hy_tier_t *t, int32_t kind, int32_t slot)
{
    return t->arena[kind] + (size_t)slot * (size_t)t->o.unit_bytes[kind];
}

/* Drops entry i's warm copy (it must be idle). */
static void warm_drop(hy_tier_t *t, int32_t i)
{
    tier_entry_t *e = &t->e[i];

    acc(t, i, -1);
    if (e->flags & F_WARM)
        list_remove(t, &t->wlru[e->kind], LINK_W, i);
    t->warm_free[e->kind][t->n_warm_free[e->kind]++] = e->warm;
    e->warm = -1;
    e->flags &= (uint8_t)~F_WARM;
    acc(t, i, +1);
    entry_gc(t, i);
}

/* What warm_take asks of its caller when it has no slot to give. */
enum {
    WT_FULL = -1,  /* every slot is in use (copied or read into): none frees soon */
    WT_WRITE = -2, /* run the write queue's head here, then ask again */
    WT_WAIT = -3   /* an I/O on its way frees a slot when it ends */
};

/* A free warm slot of kind, else the least recently used idle entry's (its
 * disk copy, if any, stays), or WT_*.  The order is LRU whatever the
 * writer's lag: an older entry that only waits for its write-through is
 * written first (WT_WRITE: the FIFO reaches it) or waited for (WT_WAIT:
 * its write is running) rather than passed over for a newer one - which,
 * with the low-priority writer behind, was the entry a waiting prefix had
 * just read and was about to promote: it read it again, and again, until
 * its budget gave out.  Entries pinned by copies and reads are in use. */
static int32_t warm_take(hy_tier_t *t, int32_t kind)
{
    const tier_entry_t *e;
    int32_t i;

    if (t->n_warm_free[kind] > 0)
        return t->warm_free[kind][--t->n_warm_free[kind]];
    for (i = t->wlru[kind].head; i >= 0; i = e->wnext) {
        e = &t->e[i];
        if (e->pins == 0)
            break;
        if (e->job == JOB_WRITE && e->pins == 1)
            return e->flags & F_QUEUED ? WT_WRITE : WT_WAIT;
    }
    if (i < 0)
        return t->q[JOB_WRITE - 1].head >= 0 ? WT_WRITE : t->n_jobs > 0 ? WT_WAIT : WT_FULL;
    warm_drop(t, i);
    return t->warm_free[kind][--t->n_warm_free[kind]];
}

/* ---- the disk ----------------------------------------------------------------- */

static void drop_log(hy_tier_t *t, const char *name, int code, const char *why)
{
    int r = code == HY_EUNSUPPORTED ? HY_TIER_DROP_FOREIGN
            : code == HY_EFORMAT    ? HY_TIER_DROP_CORRUPT
                                    : HY_TIER_DROP_UNREADABLE;

    atomic_fetch_add_explicit(&t->st->dropped[r], 1, RLX);
    hy_log(LOG_WARNING, "tier_file_dropped", "file=%s/%s reason=%s detail=%s", t->dir, name,
           r == HY_TIER_DROP_FOREIGN ? "foreign" : r == HY_TIER_DROP_CORRUPT ? "corrupt" : "unreadable",
           why);
}

/* Removes entry i's file (lock held: the index and the directory change
 * together). */
static void cold_drop(hy_tier_t *t, int32_t i)
{
    tier_entry_t *e = &t->e[i];
    char name[HY_TIER_NAME_LEN];

    hy_tier_file_name(name, sizeof name, e->kind, e->hash);
    acc(t, i, -1);
    list_remove(t, &t->clru, LINK_C, i);
    e->flags &= (uint8_t)~F_COLD;
    e->file_bytes = 0;
    acc(t, i, +1);
    if (unlinkat(t->dirfd, name, 0) != 0 && errno != ENOENT)
        hy_log(LOG_WARNING, "tier_unlink_failed", "file=%s/%s err=%s", t->dir, name,
               strerror(errno));
    entry_gc(t, i);
}

/* Makes room for `bytes` more on disk by evicting the oldest idle files;
 * false when even that is not enough. */
static bool cold_room(hy_tier_t *t, uint64_t bytes)
{
    int32_t i, next;

    if (bytes > t->o.disk_bytes)
        return false;
    for (i = t->clru.head; i >= 0 && cold_taken(t) + bytes > t->o.disk_bytes; i = next) {
        next = t->e[i].cnext;
        if (t->e[i].job == JOB_NONE)
            cold_drop(t, i);
    }
    return cold_taken(t) + bytes <= t->o.disk_bytes;
}

static uint64_t file_bytes_of(const hy_tier_t *t, int32_t kind)
{
    return hy_tier_file_header_bytes(hy_tier_kind_is_page(kind) ? t->o.ident.page_tokens : 0) +
           t->o.unit_bytes[kind];
}

static void enqueue(hy_tier_t *t, int32_t i, int job)
{
    tier_list_t *q = &t->q[job - 1];

    t->e[i].job = (uint8_t)job;
    t->e[i].flags |= F_QUEUED;
    t->e[i].qnext = -1;
    if (q->tail >= 0)
        t->e[q->tail].qnext = i;
    else
        q->head = i;
    q->tail = i;
    t->n_jobs++;
    pthread_cond_signal(&t->cv_job[job - 1]);
}

/* Queues entry i (warm, no file) for writing, if the budget allows. */
static void write_queue(hy_tier_t *t, int32_t i)
{
    uint64_t fb = file_bytes_of(t, t->e[i].kind);

    if (!disk_usable(t) || (t->e[i].flags & F_COLD) || t->e[i].job != JOB_NONE)
        return;
    if (!cold_room(t, fb)) {
        atomic_fetch_add_explicit(&t->st->skipped_writes, 1, RLX);
        return;
    }
    acc(t, i, -1);
    t->e[i].pins++;
    t->e[i].file_bytes = fb;
    enqueue(t, i, JOB_WRITE);
    acc(t, i, +1);
}

/* A write of entry i ended (lock held; the file is in place when rc is
 * HY_OK): account.  The rename happened before, without the lock: no one
 * else touches the name meanwhile, the entry being pinned by its write (a
 * budget eviction unlinks only entries with a file, the indexer skips
 * entries with a job). */
static int write_done(hy_tier_t *t, int32_t i, const char *name, int rc, char *why, int64_t ns,
                      bool from_job)
{
    tier_entry_t *e = &t->e[i];

    acc(t, i, -1);
    e->job = JOB_NONE;
    if (from_job)
        e->pins--;
    if (rc == HY_OK) {
        e->flags |= F_COLD;
        list_add(t, &t->clru, LINK_C, i, false);
        atomic_fetch_add_explicit(&t->st->demotions[HY_TIER_COLD], 1, RLX);
        atomic_fetch_add_explicit(&t->st->write_bytes[HY_TIER_COLD], e->file_bytes, RLX);
        hy_tier_observe(&t->st->write_time[HY_TIER_COLD], (uint64_t)ns);
    } else {
        e->file_bytes = 0;
        atomic_fetch_add_explicit(t->disk_errors, 1, RLX);
        hy_log(LOG_WARNING, "tier_write_failed", "file=%s/%s err=%s", t->dir, name, why);
    }
    acc(t, i, +1);
    entry_gc(t, i);
    return rc;
}

static void job_write(hy_tier_t *t, int32_t i)
{
    tier_entry_t *e = &t->e[i];
    char name[HY_TIER_NAME_LEN], why[HY_ERR_LEN];
    int32_t tokens[256];
    hy_tier_rec_t r;
    const void *src = slot_ptr(t, e->kind, e->warm);
    unsigned tag = ++t->tag;
    int64_t t0;
    int inject, rc;

    memset(&r, 0, sizeof r);
    r.kind = e->kind;
    r.hash = e->hash;
    r.depth = hy_tier_kind_is_page(e->kind) ? e->depth : -1;
    r.n_tokens = hy_tier_kind_is_page(e->kind) ? t->o.ident.page_tokens : 0;
    r.payload_bytes = t->o.unit_bytes[e->kind];
    if (r.n_tokens > 0)
        memcpy(tokens, tok_of(t, i), sizeof(int32_t) * r.n_tokens);
    hy_tier_file_name(name, sizeof name, e->kind, e->hash);
    pthread_mutex_unlock(&t->mu);
    inject = t->o.fault ? t->o.fault(t->o.fault_ctx, HY_TIER_OP_WRITE, name) : 0;
    t0 = tier_now_ns();
    rc = hy_tier_file_write(t->dirfd, name, tag, &t->o.ident, &r, tokens, src, inject, why);
    pthread_mutex_lock(&t->mu);
    write_done(t, i, name, rc, why, tier_now_ns() - t0, true);
}

/* Checks a file read back against what the index says it holds. */
static int read_check(hy_tier_t *t, int32_t i, const hy_tier_rec_t *r, const int32_t *tokens,
                      char *why)
{
    if (hy_tier_kind_is_page(t->e[i].kind) &&
        (r->depth != t->e[i].depth ||
         memcmp(tokens, tok_of(t, i), sizeof(int32_t) * t->o.ident.page_tokens) != 0))
        return hy_err(why, HY_EFORMAT, "holds another block than it did when indexed");
    return HY_OK;
}

static void job_read(hy_tier_t *t, int32_t i)
{
    tier_entry_t *e = &t->e[i];
    char name[HY_TIER_NAME_LEN], why[HY_ERR_LEN];
    int32_t tokens[256];
    hy_tier_rec_t r;
    void *dst = slot_ptr(t, e->kind, e->warm);
    int64_t t0, ns;
    int inject, rc;

    hy_tier_file_name(name, sizeof name, e->kind, e->hash);
    pthread_mutex_unlock(&t->mu);
    inject = t->o.fault ? t->o.fault(t->o.fault_ctx, HY_TIER_OP_READ, name) : 0;
    t0 = tier_now_ns();
    if (inject != 0)
        rc = hy_err(why, HY_EIO, "read: %s", strerror(inject));
    else
        rc = hy_tier_file_read(t->dirfd, name, &t->o.ident, &r, tokens, dst,
                               t->o.unit_bytes[e->kind], why);
    ns = tier_now_ns() - t0;
    if (rc == HY_OK)
        utimensat(t->dirfd, name, NULL, 0); /* its age survives a restart */
    pthread_mutex_lock(&t->mu);
    e = &t->e[i];
    if (rc == HY_OK)
        rc = read_check(t, i, &r, tokens, why);
    acc(t, i, -1);
    e->job = JOB_NONE;
    e->pins--;
    if (rc == HY_OK) {
        e->flags |= F_WARM;
        e->from_cold = 1;
        list_add(t, &t->wlru[e->kind], LINK_W, i, false);
        list_touch(t, &t->clru, LINK_C, i);
        acc(t, i, +1);
        atomic_fetch_add_explicit(&t->st->promotions[HY_TIER_COLD], 1, RLX);
        atomic_fetch_add_explicit(&t->st->read_bytes[HY_TIER_COLD], e->file_bytes, RLX);
        hy_tier_observe(&t->st->read_time[HY_TIER_COLD], (uint64_t)ns);
        return;
    }
    /* never served: the block is recomputed by whoever asked for it */
    t->warm_free[e->kind][t->n_warm_free[e->kind]++] = e->warm;
    e->warm = -1;
    acc(t, i, +1);
    atomic_fetch_add_explicit(t->disk_errors, 1, RLX);
    drop_log(t, name, rc, why);
    cold_drop(t, i);
}

/* Takes the oldest job of a queue and runs it (lock held; released
 * around the file I/O). */
static void run_one(hy_tier_t *t, int job)
{
    tier_list_t *q = &t->q[job - 1];
    int32_t i = q->head;

    q->head = t->e[i].qnext;
    if (q->head < 0)
        q->tail = -1;
    t->e[i].flags &= (uint8_t)~F_QUEUED;
    if (job == JOB_WRITE)
        job_write(t, i);
    else
        job_read(t, i);
    t->n_jobs--;
    publish(t);
    pthread_cond_broadcast(&t->cv_done);
}

/* A reader serves the read queue: a request waits for those.  The writer
 * serves the write queue at a lower CPU priority (nice 10, like the model
 * hash): writing through to disk must never take a core from the engine. */
static void *io_main(void *arg)
{
    tier_io_arg_t *a = arg;
    hy_tier_t *t = a->t;
    tier_list_t *q = &t->q[a->job - 1];

    if (a->job == JOB_WRITE)
        (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    pthread_mutex_lock(&t->mu);
    for (;;) {
        if (q->head < 0) {
            if (t->stop)
                break;
            pthread_cond_wait(&t->cv_job[a->job - 1], &t->mu);
            continue;
        }
        run_one(t, a->job);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* ---- indexing --------------------------------------------------------------------- */

typedef struct {
    char name[HY_TIER_NAME_LEN];
    int64_t mtime_ns;
    uint64_t bytes;
    hy_tier_rec_t r;
    int32_t tokens[256];
} tier_found_t;

/* Reads the header of file `name`; a bad one is dropped (logged, removed).
 * HY_OK with f filled in. */
static int index_one(hy_tier_t *t, const char *name, tier_found_t *f)
{
    char why[HY_ERR_LEN];
    struct stat sb;
    int rc;

    rc = hy_tier_file_read(t->dirfd, name, &t->o.ident, &f->r, f->tokens, NULL, 0, why);
    if (rc == HY_ENOENT)
        return rc;
    if (rc != HY_OK) {
        uint32_t kind;
        uint64_t hash;
        int32_t i;

        hy_tier_file_parse_name(name, &kind, &hash);
        pthread_mutex_lock(&t->mu);
        /* the store may have written a good file under this name since it
         * was read: that one is its own, leave it */
        i = find(t, (int32_t)kind, hash);
        if (i < 0 || !((t->e[i].flags & F_COLD) || t->e[i].job != JOB_NONE)) {
            drop_log(t, name, rc, why);
            unlinkat(t->dirfd, name, 0);
        }
        pthread_mutex_unlock(&t->mu);
        return rc;
    }
    if (fstatat(t->dirfd, name, &sb, 0) != 0)
        return HY_ENOENT;
    snprintf(f->name, sizeof f->name, "%s", name);
    f->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    f->bytes = (uint64_t)sb.st_size;
    return HY_OK;
}

/* Adds a file found on disk (lock held) unless the store knows it. */
static void index_add(hy_tier_t *t, const tier_found_t *f, bool at_head)
{
    int32_t i = find(t, (int32_t)f->r.kind, f->r.hash);

    if (i >= 0 && ((t->e[i].flags & F_COLD) || t->e[i].job != JOB_NONE))
        return;
    if (i >= 0 && !page_matches(t, i, f->r.depth, f->tokens))
        return; /* the warm copy is another block under a colliding hash: keep it */
    if (i < 0 && (i = entry_new(t, (int32_t)f->r.kind, f->r.hash, f->r.depth, f->tokens)) < 0)
        return;
    acc(t, i, -1);
    t->e[i].flags |= F_COLD;
    t->e[i].file_bytes = f->bytes;
    list_add(t, &t->clru, LINK_C, i, at_head);
    acc(t, i, +1);
}

static int by_mtime_desc(const void *a, const void *b)
{
    int64_t x = ((const tier_found_t *)a)->mtime_ns, y = ((const tier_found_t *)b)->mtime_ns;

    return x < y ? 1 : x > y ? -1 : 0;
}

/* The directory's files into the index, oldest at the LRU head; the
 * store serves (and writes) meanwhile, looking files up by name. */
static void *index_main(void *arg)
{
    hy_tier_t *t = arg;
    tier_found_t *found = NULL;
    size_t n = 0, cap = 0, n_dropped = 0;
    int64_t t0 = tier_now_ns();
    struct dirent *d;
    DIR *dir;
    int fd;

    fd = openat(t->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (dir == NULL) {
        if (fd >= 0)
            close(fd);
        hy_log(LOG_ERR, "tier_index_failed", "dir=%s err=%s", t->dir, strerror(errno));
        pthread_mutex_lock(&t->mu);
        t->disk_state = HY_TIER_DISK_FAILED;
        publish(t);
        pthread_cond_broadcast(&t->cv_done); /* nobody waits for it to come online */
        pthread_mutex_unlock(&t->mu);
        return NULL;
    }
    /* leftovers of writes a crash interrupted go before anything writes */
    while ((d = readdir(dir)) != NULL) {
        size_t len = strlen(d->d_name);
        if (len > 4 && strcmp(d->d_name + len - 4, ".tmp") == 0)
            unlinkat(t->dirfd, d->d_name, 0);
    }
    pthread_mutex_lock(&t->mu);
    if (t->disk_state == HY_TIER_DISK_WAITING) {
        t->disk_state = HY_TIER_DISK_INDEXING;
        /* what was demoted while the model's hash was not known yet */
        for (int k = 0; k < HY_TIER_KINDS; k++)
            for (int32_t i = t->wlru[k].head; i >= 0; i = t->e[i].wnext)
                write_queue(t, i);
    }
    publish(t);
    pthread_cond_broadcast(&t->cv_done); /* a persist waits for the disk to come online */
    pthread_mutex_unlock(&t->mu);
    rewinddir(dir);
    while ((d = readdir(dir)) != NULL && !atomic_load(&t->stop_index)) {
        uint32_t kind;
        uint64_t hash;

        if (!hy_tier_file_parse_name(d->d_name, &kind, &hash))
            continue;
        if (n == cap) {
            tier_found_t *nf = realloc(found, sizeof *nf * (cap = cap ? cap * 2 : 256));
            if (nf == NULL)
                break;
            found = nf;
        }
        if (t->o.fault != NULL)
            (void)t->o.fault(t->o.fault_ctx, HY_TIER_OP_INDEX, d->d_name);
        int rc = index_one(t, d->d_name, &found[n]);
        if (rc == HY_OK)
            n++;
        else if (rc != HY_ENOENT)
            n_dropped++;
    }
    closedir(dir);
    if (n > 1)
        qsort(found, n, sizeof *found, by_mtime_desc);
    pthread_mutex_lock(&t->mu);
    /* newest first, each at the head: the oldest ends up evicted first,
     * behind everything this process touched already */
    for (size_t k = 0; k < n; k++)
        index_add(t, &found[k], true);
    cold_room(t, 0);
    if (t->disk_state == HY_TIER_DISK_INDEXING)
        t->disk_state = HY_TIER_DISK_READY;
    publish(t);
    hy_log(LOG_INFO, "tier_indexed", "dir=%s files=%zu bytes=%lld dropped=%zu ms=%lld", t->dir, n,
           (long long)cold_taken(t), n_dropped, (long long)((tier_now_ns() - t0) / 1000000));
    pthread_cond_broadcast(&t->cv_done);
    pthread_mutex_unlock(&t->mu);
    free(found);
    return NULL;
}

/* Looks a file up by name while the indexer has not reached it (lock held
 * on entry and exit; released around the read). */
static int32_t probe(hy_tier_t *t, int32_t kind, uint64_t hash)
{
    char name[HY_TIER_NAME_LEN];
    tier_found_t *f = malloc(sizeof *f);
    int32_t i = -1;

    if (f == NULL)
        return -1;
    hy_tier_file_name(name, sizeof name, (uint32_t)kind, hash);
    pthread_mutex_unlock(&t->mu);
    int rc = index_one(t, name, f);
    pthread_mutex_lock(&t->mu);
    if (rc == HY_OK) {
        index_add(t, f, false);
        i = find(t, kind, hash);
        if (i >= 0 && !(t->e[i].flags & F_COLD))
            i = -1;
    }
    free(f);
    return i;
}

static void start_indexer(hy_tier_t *t)
{
    int e;

    t->disk_state = HY_TIER_DISK_WAITING;
    if ((e = pthread_create(&t->indexer, NULL, index_main, t)) != 0) {
        hy_log(LOG_ERR, "tier_index_failed", "dir=%s err=pthread_create:%s", t->dir,
               strerror(e));
        t->disk_state = HY_TIER_DISK_FAILED;
        return;
    }
    t->indexer_started = true;
}

/* ---- the remembered model identity ------------------------------------------------ */

#define MODEL_ID_FILE "model.id"

/* "hyserve-model-id 1 <sha hex> <size> <mtime ns> <inode>" for the model
 * file as it is now; false when it cannot be stat'ed. */
static bool model_id_line(const char *path, const uint8_t *sha, char *buf, size_t cap)
{
    struct stat sb;
    char hex[65];

    if (path == NULL || stat(path, &sb) != 0)
        return false;
    for (int k = 0; k < 32; k++)
        snprintf(hex + 2 * k, 3, "%02x", sha[k]);
    snprintf(buf, cap, "hyserve-model-id 1 %s %lld %lld %llu\n", hex, (long long)sb.st_size,
             (long long)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec,
             (unsigned long long)sb.st_ino);
    return true;
}

/* The SHA-256 model.id remembers, if it was taken of this very file. */
static bool model_id_recall(hy_tier_t *t, uint8_t sha[32])
{
    char have[256], want[256];
    ssize_t n;
    int fd = openat(t->dirfd, MODEL_ID_FILE, O_RDONLY | O_CLOEXEC);
    unsigned v;

    if (fd < 0)
        return false;
    n = read(fd, have, sizeof have - 1);
    close(fd);
    if (n <= 0)
        return false;
    have[n] = '\0';
    for (int k = 0; k < 32; k++) {
        if (sscanf(have + 19 + 2 * k, "%2x", &v) != 1)
            return false;
        sha[k] = (uint8_t)v;
    }
    return strncmp(have, "hyserve-model-id 1 ", 19) == 0 &&
           model_id_line(t->o.model_path, sha, want, sizeof want) && strcmp(have, want) == 0;
}

static void model_id_store(hy_tier_t *t)
{
    char line[256];
    int fd;

    if (!model_id_line(t->o.model_path, t->o.ident.model_sha256, line, sizeof line))
        return;
    fd = openat(t->dirfd, MODEL_ID_FILE ".tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    if (write(fd, line, strlen(line)) != (ssize_t)strlen(line) || close(fd) != 0) {
        unlinkat(t->dirfd, MODEL_ID_FILE ".tmp", 0);
        return;
    }
    renameat(t->dirfd, MODEL_ID_FILE ".tmp", t->dirfd, MODEL_ID_FILE);
}

void hy_tier_set_model(hy_tier_t *t, const uint8_t sha256[32])
{
    pthread_mutex_lock(&t->mu);
    if (t->dir == NULL || t->disk_state == HY_TIER_DISK_FAILED) {
        pthread_mutex_unlock(&t->mu);
        return;
    }
    if (t->o.sha_known) {
        if (memcmp(t->o.ident.model_sha256, sha256, 32) != 0) {
            /* model.id matched the file's size, mtime and inode, yet the
             * bytes differ: trust nothing on this disk */
            t->disk_state = HY_TIER_DISK_FAILED;
            hy_log(LOG_ERR, "tier_disk_disabled", "dir=%s reason=%s", t->dir,
                   "the model file changed without its size, mtime or inode changing");
            pthread_cond_broadcast(&t->cv_done); /* a persist waiting for the disk: off */
        }
        publish(t);
        pthread_mutex_unlock(&t->mu);
        return;
    }
    memcpy(t->o.ident.model_sha256, sha256, 32);
    t->o.sha_known = true;
    model_id_store(t);
    start_indexer(t);
    publish(t);
    pthread_mutex_unlock(&t->mu);
}

void hy_tier_disk_off(hy_tier_t *t, const char *why)
{
    pthread_mutex_lock(&t->mu);
    if (t->dir != NULL && !t->o.sha_known) {
        t->disk_state = HY_TIER_DISK_FAILED;
        hy_log(LOG_ERR, "tier_disk_disabled", "dir=%s reason=%s", t->dir, why);
        publish(t);
    }
    pthread_mutex_unlock(&t->mu);
}

/* ---- life cycle ------------------------------------------------------------------- */

/* The arena of a kind whose entries hold no bytes (the full-attention group
 * of a model whose every attention layer slides: its pages only carry the
 * prefix chain): slot pointers into it are never dereferenced for more
 * than 0 bytes, and it is never freed. */
static uint8_t tier_no_bytes[1];

static void *warm_alloc(hy_tier_t *t, size_t bytes)
{
    void *p;

    if (bytes == 0)
        return tier_no_bytes;
    if (t->o.host_alloc != NULL)
        return t->o.host_alloc(t->o.host_ctx, bytes);
    /* committed page by page as slots fill, like the hot pool */
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
             0);
    return p == MAP_FAILED ? NULL : p;
}

static void warm_release(hy_tier_t *t, void *p, size_t bytes)
{
    if (p == NULL || p == tier_no_bytes)
        return;
    if (t->o.host_free != NULL)
        t->o.host_free(t->o.host_ctx, p, bytes);
    else
        munmap(p, bytes);
}

/* Splits warm_bytes into slots: a quarter for checkpoints (as the hot
 * budget) when the model has them; the rest for pages, shared between the
 * two page groups as the hot pool shares its bytes (o.swa_share), so each
 * group's warm tier is the same multiple of its hot pool; at least one
 * slot of each kind the model has.  Full-group pages of 0 bytes (every
 * attention layer slides) are sized by what an entry costs the store. */
static int warm_size(hy_tier_t *t, char *err)
{
    uint64_t w = t->o.warm_bytes, pb = t->o.unit_bytes[HY_TIER_PAGE],
             sb = t->o.unit_bytes[HY_TIER_CKPT], wb = t->o.unit_bytes[HY_TIER_SWA], nc = 0, np,
             ns = 0, pages, pc;

    if (w == 0)
        return HY_OK;
    if (pb == 0 && wb == 0)
        return hy_err(err, HY_EINVAL, "warm tier: the model keeps no KV pages");
    pc = pb > 0 ? pb : hy_tier_entry_bytes(t->o.ident.page_tokens);
    if (sb > 0) {
        nc = w / 4 / sb;
        if (nc == 0 && w >= sb + pc + wb)
            nc = 1;
        if (nc == 0)
            return hy_err(err, HY_ERANGE, "warm tier: %llu bytes hold no state checkpoint of "
                          "%llu bytes and a page of %llu", (unsigned long long)w, (unsigned long long)sb,
                          (unsigned long long)(pc + wb));
    }
    pages = w - nc * sb;
    if (wb > 0) {
        double share = t->o.swa_share > 0 && t->o.swa_share < 1 ? t->o.swa_share : 0.5;

        ns = (uint64_t)((double)pages * share) / wb;
        if (ns == 0 && pages >= wb + pc)
            ns = 1;
        if (ns == 0)
            return hy_err(err, HY_ERANGE, "warm tier: %llu bytes hold no sliding-window page of "
                          "%llu bytes and a page of %llu", (unsigned long long)w,
                          (unsigned long long)wb, (unsigned long long)pc);
    }
    np = (pages - ns * wb) / pc;
    if (np == 0)
        return hy_err(err, HY_ERANGE, "warm tier: %llu bytes hold no KV page of %llu bytes",
                      (unsigned long long)w, (unsigned long long)pc);
    if (np > INT32_MAX / 2 || nc > INT32_MAX / 2 || ns > INT32_MAX / 2)
        return hy_err(err, HY_ERANGE, "warm tier: too many slots");
    t->n_warm[HY_TIER_PAGE] = (int32_t)np;
    t->n_warm[HY_TIER_CKPT] = (int32_t)nc;
    t->n_warm[HY_TIER_SWA] = (int32_t)ns;
    for (int k = 0; k < HY_TIER_KINDS; k++) {
        t->arena_bytes[k] = (size_t)t->n_warm[k] * (size_t)t->o.unit_bytes[k];
        if (t->n_warm[k] == 0)
            continue;
        t->arena[k] = warm_alloc(t, t->arena_bytes[k]);
        t->warm_free[k] = malloc(sizeof(int32_t) * (size_t)t->n_warm[k]);
        if (t->arena[k] == NULL || t->warm_free[k] == NULL)
            return hy_err(err, HY_ENOMEM, "warm tier: cannot allocate %zu bytes of %s slots",
                          t->arena_bytes[k], tier_kind_name(k));
        for (int32_t s = 0; s < t->n_warm[k]; s++)
            t->warm_free[k][s] = t->n_warm[k] - 1 - s;
        t->n_warm_free[k] = t->n_warm[k];
    }
    return HY_OK;
}

/* Creates (one level), locks and sizes the directory. */
static int disk_open(hy_tier_t *t, char *err)
{
    struct statvfs vf;
    uint64_t fs;

    if (mkdir(t->dir, 0700) != 0 && errno != EEXIST)
        return hy_err(err, HY_EIO, "cannot create %s: %s", t->dir, strerror(errno));
    t->dirfd = open(t->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (t->dirfd < 0)
        return hy_err(err, HY_EIO, "cannot open %s: %s", t->dir, strerror(errno));
    if (faccessat(t->dirfd, ".", W_OK, AT_EACCESS) != 0)
        return hy_err(err, HY_EIO, "%s is not writable: %s", t->dir, strerror(errno));
    t->lockfd = openat(t->dirfd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (t->lockfd < 0)
        return hy_err(err, HY_EIO, "cannot create %s/.lock: %s", t->dir, strerror(errno));
    if (flock(t->lockfd, LOCK_EX | LOCK_NB) != 0)
        return hy_err(err, HY_EINVAL, "%s is in use by another hyserve (one directory per "
                      "instance)", t->dir);
    if (fstatvfs(t->dirfd, &vf) == 0) {
        fs = (uint64_t)vf.f_blocks * (uint64_t)vf.f_frsize;
        if (t->o.disk_bytes > fs)
            return hy_err(err, HY_ERANGE, "disk budget: %llu MiB is more than the file system "
                          "of %s holds (%llu MiB)", (unsigned long long)(t->o.disk_bytes >> 20), t->dir,
                          (unsigned long long)(fs >> 20));
    }
    if (t->o.disk_bytes < file_bytes_of(t, HY_TIER_PAGE))
        return hy_err(err, HY_ERANGE, "disk budget: %llu bytes hold no page file of %llu bytes",
                      (unsigned long long)t->o.disk_bytes,
                      (unsigned long long)file_bytes_of(t, HY_TIER_PAGE));
    return HY_OK;
}

int hy_tier_create(hy_tier_t **out, const hy_tier_opts_t *o, char *err)
{
    hy_tier_t *t;
    uint8_t sha[32];
    int rc, e;

    *out = NULL;
    if ((t = calloc(1, sizeof *t)) == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    t->o = *o;
    t->o.disk_dir = NULL; /* t->dir is the copy */
    t->o.model_path = NULL;
    if (o->model_path != NULL && (t->o.model_path = t->model_path = strdup(o->model_path)) == NULL) {
        free(t);
        return hy_err(err, HY_ENOMEM, "out of memory");
    }
    t->dirfd = t->lockfd = -1;
    t->free_head = -1;
    t->q[0].head = t->q[0].tail = t->q[1].head = t->q[1].tail = -1;
    for (int k = 0; k < HY_TIER_KINDS; k++)
        t->wlru[k].head = t->wlru[k].tail = -1;
    t->clru.head = t->clru.tail = -1;
    t->st = o->stats ? &o->stats->tiers : &t->own_stats.tiers;
    t->disk_errors = o->stats ? &o->stats->disk_errors : &t->own_stats.disk_errors;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv_job[0], NULL);
    pthread_cond_init(&t->cv_job[1], NULL);
    pthread_cond_init(&t->cv_done, NULL);
    if (o->ident.page_tokens < 1 || o->ident.page_tokens > 256) {
        rc = hy_err(err, HY_EINVAL, "page_tokens = %u: must be 1..256", o->ident.page_tokens);
        goto fail;
    }
    if (grow(t) != HY_OK) {
        rc = hy_err(err, HY_ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = warm_size(t, err)) != HY_OK)
        goto fail;
    if (o->disk_dir != NULL && o->disk_dir[0]) {
        if (o->warm_bytes == 0) {
            rc = hy_err(err, HY_EINVAL, "a disk tier needs a warm tier to stage its pages "
                        "(warm size 0)");
            goto fail;
        }
        if ((t->dir = strdup(o->disk_dir)) == NULL) {
            rc = hy_err(err, HY_ENOMEM, "out of memory");
            goto fail;
        }
        if ((rc = disk_open(t, err)) != HY_OK)
            goto fail;
        t->disk_state = HY_TIER_DISK_WAITING;
        if (!t->o.sha_known && model_id_recall(t, sha)) {
            memcpy(t->o.ident.model_sha256, sha, 32);
            t->o.sha_known = true;
        }
    }
    /* the readers, then one writer */
    t->n_io = t->dir ? (o->io_threads > 0 ? o->io_threads : HY_TIER_IO_THREADS) + 1 : 0;
    if (t->n_io > 0 && ((t->io = calloc((size_t)t->n_io, sizeof *t->io)) == NULL ||
                        (t->io_args = calloc((size_t)t->n_io, sizeof *t->io_args)) == NULL)) {
        rc = hy_err(err, HY_ENOMEM, "out of memory");
        goto fail;
    }
    for (int32_t k = 0; k < t->n_io; k++) {
        t->io_args[k].t = t;
        t->io_args[k].job = k == t->n_io - 1 ? JOB_WRITE : JOB_READ;
        if ((e = pthread_create(&t->io[k], NULL, io_main, &t->io_args[k])) != 0) {
            t->n_io = k;
            rc = hy_err(err, HY_ENOMEM, "tier I/O thread: %s", strerror(e));
            goto fail;
        }
    }
    pthread_mutex_lock(&t->mu);
    if (t->dir != NULL && t->o.sha_known)
        start_indexer(t);
    publish(t);
    pthread_mutex_unlock(&t->mu);
    *out = t;
    return HY_OK;
fail:
    hy_tier_free(t);
    return rc;
}

void hy_tier_sync(hy_tier_t *t)
{
    pthread_mutex_lock(&t->mu);
    while (t->n_jobs > 0 || t->disk_state == HY_TIER_DISK_INDEXING ||
           (t->indexer_started && t->disk_state == HY_TIER_DISK_WAITING))
        pthread_cond_wait(&t->cv_done, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

void hy_tier_free(hy_tier_t *t)
{
    if (t == NULL)
        return;
    if (t->indexer_started) {
        atomic_store(&t->stop_index, true);
        pthread_join(t->indexer, NULL);
    }
    pthread_mutex_lock(&t->mu);
    while (t->n_jobs > 0)
        pthread_cond_wait(&t->cv_done, &t->mu);
    t->stop = true;
    pthread_cond_broadcast(&t->cv_job[0]);
    pthread_cond_broadcast(&t->cv_job[1]);
    pthread_mutex_unlock(&t->mu);
    for (int32_t k = 0; k < t->n_io; k++)
        pthread_join(t->io[k], NULL);
    free(t->io);
    free(t->io_args);
    for (int k = 0; k < HY_TIER_KINDS; k++) {
        warm_release(t, t->arena[k], t->arena_bytes[k]);
        free(t->warm_free[k]);
    }
    if (t->lockfd >= 0)
        close(t->lockfd);
    if (t->dirfd >= 0)
        close(t->dirfd);
    pthread_cond_destroy(&t->cv_job[0]);
    pthread_cond_destroy(&t->cv_job[1]);
    pthread_cond_destroy(&t->cv_done);
    pthread_mutex_destroy(&t->mu);
    free(t->dir);
    free(t->model_path);
    free(t->e);
    free(t->tokens);
    free(t->buckets);
    free(t);
}

hy_tier_stats_t *hy_tier_stats(hy_tier_t *t) { return t->st; }

int32_t hy_tier_slots(const hy_tier_t *t, int32_t kind)
{
    return hy_tier_has(t, kind) ? t->n_warm[kind] : 0;
}

uint64_t hy_tier_unit_bytes(const hy_tier_t *t, int32_t kind)
{
    return kind >= 0 && kind < HY_TIER_KINDS ? t->o.unit_bytes[kind] : 0;
}

bool hy_tier_has(const hy_tier_t *t, int32_t kind)
{
    return t != NULL && kind >= 0 && kind < HY_TIER_KINDS && t->n_warm[kind] > 0;
}

/* ---- the engine's calls ------------------------------------------------------------ */

int hy_tier_put_begin(hy_tier_t *t, int32_t kind, uint64_t hash, int32_t depth,
                      const int32_t *tokens, hy_tier_put_t *p)
{
    int32_t i, slot;
    int rc = HY_OK;

    memset(p, 0, sizeof *p);
    p->entry = -1;
    if (!hy_tier_has(t, kind))
        return HY_ENOENT;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        i = find(t, kind, hash);
        if (i >= 0 && (t->e[i].warm >= 0 || !page_matches(t, i, depth, tokens))) {
            if (t->e[i].flags & F_WARM)
                list_touch(t, &t->wlru[kind], LINK_W, i);
            rc = 1;
            goto out;
        }
        if ((slot = warm_take(t, kind)) >= 0)
            break;
        /* The writer is behind: this thread writes the oldest queued
         * page itself (waiting would put the engine behind a low-priority
         * thread), or waits for the I/O in flight; with none (every slot
         * is being copied), the page is dropped. */
        if (slot == WT_WRITE) {
            run_one(t, JOB_WRITE);
        } else if (slot == WT_WAIT) {
            pthread_cond_wait(&t->cv_done, &t->mu);
        } else {
            rc = HY_EFULL;
            goto out;
        }
    }
    if (i < 0 && (i = entry_new(t, kind, hash, depth, tokens)) < 0) {
        t->warm_free[kind][t->n_warm_free[kind]++] = slot;
        rc = HY_ENOMEM;
        goto out;
    }
    acc(t, i, -1);
    t->e[i].warm = slot;
    t->e[i].pins++;
    acc(t, i, +1);
    p->entry = i;
    p->kind = kind;
    p->dst = slot_ptr(t, kind, slot);
    p->t0 = tier_now_ns();
out:
    publish(t);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

void hy_tier_put_end(hy_tier_t *t, const hy_tier_put_t *p, bool ok)
{
    int32_t i = p->entry;
    tier_entry_t *e;

    if (i < 0)
        return;
    pthread_mutex_lock(&t->mu);
    e = &t->e[i];
    acc(t, i, -1);
    e->pins--;
    if (ok) {
        e->flags |= F_WARM;
        e->from_cold = 0;
        list_add(t, &t->wlru[e->kind], LINK_W, i, false);
        acc(t, i, +1);
        atomic_fetch_add_explicit(&t->st->demotions[HY_TIER_WARM], 1, RLX);
        atomic_fetch_add_explicit(&t->st->write_bytes[HY_TIER_WARM], t->o.unit_bytes[e->kind], RLX);
        hy_tier_observe(&t->st->write_time[HY_TIER_WARM], (uint64_t)(tier_now_ns() - p->t0));
        write_queue(t, i); /* write-through: cold is the persistent copy */
    } else {
        t->warm_free[e->kind][t->n_warm_free[e->kind]++] = e->warm;
        e->warm = -1;
        acc(t, i, +1);
        entry_gc(t, i);
    }
    publish(t);
    pthread_mutex_unlock(&t->mu);
}

int hy_tier_where(hy_tier_t *t, int32_t kind, uint64_t hash, int32_t depth,
                  const int32_t *tokens)
{
    int32_t i;
    int rc = -1;

    if (!hy_tier_has(t, kind))
        return -1;
    pthread_mutex_lock(&t->mu);
    i = find(t, kind, hash);
    if (i < 0 && t->disk_state == HY_TIER_DISK_INDEXING)
        i = probe(t, kind, hash);
    if (i >= 0 && page_matches(t, i, depth, tokens)) {
        if (t->e[i].flags & F_WARM)
            rc = HY_TIER_WARM;
        else if ((t->e[i].flags & F_COLD) && disk_usable(t))
            rc = HY_TIER_COLD;
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int hy_tier_fetch(hy_tier_t *t, int32_t kind, uint64_t hash)
{
    int32_t i, slot;
    int rc;

    if (!hy_tier_has(t, kind))
        return HY_ENOENT;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        i = find(t, kind, hash);
        if (i < 0) {
            rc = HY_ENOENT;
        } else if (t->e[i].flags & F_WARM) {
            list_touch(t, &t->wlru[kind], LINK_W, i);
            rc = HY_TIER_FETCH_WARM;
        } else if (t->e[i].job == JOB_READ) {
            rc = HY_TIER_FETCH_READING;
        } else if (!(t->e[i].flags & F_COLD) || !disk_usable(t)) {
            rc = HY_ENOENT;
        } else if ((slot = warm_take(t, kind)) >= 0) {
            acc(t, i, -1);
            t->e[i].warm = slot;
            t->e[i].pins++;
            enqueue(t, i, JOB_READ);
            acc(t, i, +1);
            rc = HY_TIER_FETCH_QUEUED;
        } else if (slot == WT_WRITE) {
            /* the slots wait for the writer: write one here (as put does) */
            run_one(t, JOB_WRITE);
            continue;
        } else {
            rc = slot == WT_WAIT ? HY_TIER_FETCH_BUSY : HY_TIER_FETCH_NO_SLOT;
        }
        break;
    }
    publish(t);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int hy_tier_pin(hy_tier_t *t, int32_t kind, uint64_t hash, hy_tier_pin_t *p)
{
    int32_t i;

    memset(p, 0, sizeof *p);
    p->entry = -1;
    if (!hy_tier_has(t, kind))
        return HY_ENOENT;
    pthread_mutex_lock(&t->mu);
    i = find(t, kind, hash);
    if (i < 0 || !(t->e[i].flags & F_WARM)) {
        pthread_mutex_unlock(&t->mu);
        return HY_ENOENT;
    }
    pin(t, i, +1);
    p->entry = i;
    p->kind = kind;
    p->src = slot_ptr(t, kind, t->e[i].warm);
    p->from_cold = t->e[i].from_cold != 0;
    p->t0 = tier_now_ns();
    publish(t);
    pthread_mutex_unlock(&t->mu);
    return HY_OK;
}

void hy_tier_unpin(hy_tier_t *t, const hy_tier_pin_t *p, bool promoted)
{
    int32_t i = p->entry;
    tier_entry_t *e;

    if (i < 0)
        return;
    pthread_mutex_lock(&t->mu);
    pin(t, i, -1);
    e = &t->e[i];
    if (promoted) {
        atomic_fetch_add_explicit(&t->st->promotions[HY_TIER_WARM], 1, RLX);
        atomic_fetch_add_explicit(&t->st->read_bytes[HY_TIER_WARM], t->o.unit_bytes[e->kind], RLX);
        hy_tier_observe(&t->st->read_time[HY_TIER_WARM], (uint64_t)(tier_now_ns() - p->t0));
        e->from_cold = 0;
        /* a write still reading the slot keeps it; LRU reclaims it later */
        if (e->pins == 0 && e->job == JOB_NONE)
            warm_drop(t, i);
    }
    publish(t);
    pthread_mutex_unlock(&t->mu);
}

int hy_tier_persist(hy_tier_t *t, int32_t kind, uint64_t hash, int32_t depth,
                    const int32_t *tokens, const void *bytes)
{
    char name[HY_TIER_NAME_LEN], why[HY_ERR_LEN];
    hy_tier_rec_t r;
    unsigned tag;
    int32_t i;
    int64_t t0;
    int rc, inject;

    if (t == NULL || t->o.unit_bytes[kind] == 0)
        return 1;
    pthread_mutex_lock(&t->mu);
    /* The model's hash came in a moment ago (a stop soon after a first
     * start): the indexer is clearing a crash's leftover temporary files
     * before anything writes.  That takes a directory listing; skipping
     * instead lost the pages persisted meanwhile - the prompt's first
     * blocks, so the next start hit nothing. */
    while (t->indexer_started && t->disk_state == HY_TIER_DISK_WAITING)
        pthread_cond_wait(&t->cv_done, &t->mu);
    i = find(t, kind, hash);
    if (!disk_usable(t) ||
        (i >= 0 && ((t->e[i].flags & F_COLD) || t->e[i].job != JOB_NONE ||
                    !page_matches(t, i, depth, tokens)))) {
        pthread_mutex_unlock(&t->mu);
        return 1;
    }
    if (!cold_room(t, file_bytes_of(t, kind)) ||
        (i < 0 && (i = entry_new(t, kind, hash, depth, tokens)) < 0)) {
        atomic_fetch_add_explicit(&t->st->skipped_writes, 1, RLX);
        publish(t);
        pthread_mutex_unlock(&t->mu);
        return HY_EFULL;
    }
    acc(t, i, -1);
    t->e[i].file_bytes = file_bytes_of(t, kind);
    t->e[i].job = JOB_WRITE; /* not queued: this thread writes it */
    acc(t, i, +1);
    tag = ++t->tag;
    pthread_mutex_unlock(&t->mu);
    memset(&r, 0, sizeof r);
    r.kind = (uint32_t)kind;
    r.hash = hash;
    r.depth = hy_tier_kind_is_page(kind) ? depth : -1;
    r.n_tokens = hy_tier_kind_is_page(kind) ? t->o.ident.page_tokens : 0;
    r.payload_bytes = t->o.unit_bytes[kind];
    hy_tier_file_name(name, sizeof name, (uint32_t)kind, hash);
    inject = t->o.fault ? t->o.fault(t->o.fault_ctx, HY_TIER_OP_WRITE, name) : 0;
    t0 = tier_now_ns();
    rc = hy_tier_file_write(t->dirfd, name, tag, &t->o.ident, &r, tokens, bytes, inject, why);
    pthread_mutex_lock(&t->mu);
    rc = write_done(t, i, name, rc, why, tier_now_ns() - t0, false);
    publish(t);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

/* ---- accounting for tests and operators -------------------------------------------- */

void hy_tier_counts(hy_tier_t *t, hy_tier_counts_t *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_lock(&t->mu);
    memcpy(c->n, t->n, sizeof c->n);
    for (int l = 0; l < HY_TIER_LEVELS; l++)
        for (int s = 0; s < HY_TIER_STATES; s++)
            c->bytes[l][s] = (uint64_t)t->bytes[l][s];
    {
        int64_t b[HY_TIER_LEVELS][HY_TIER_STATES];
        memcpy(b, t->bytes, sizeof b);
        derive_free(t, c->n, b);
        for (int l = 0; l < HY_TIER_LEVELS; l++)
            c->bytes[l][HY_TIER_FREE] = (uint64_t)b[l][HY_TIER_FREE];
    }
    for (int k = 0; k < HY_TIER_KINDS; k++) {
        c->total[HY_TIER_WARM][k] = t->n_warm[k];
        c->total_bytes[HY_TIER_WARM] += t->arena_bytes[k];
    }
    c->total_bytes[HY_TIER_COLD] = t->dir ? t->o.disk_bytes : 0;
    c->jobs = t->n_jobs;
    c->disk_state = t->disk_state;
    pthread_mutex_unlock(&t->mu);
}

/* Walks one LRU list: every member must qualify and the length must be n. */
static int check_list(hy_tier_t *t, const tier_list_t *l, int which, int kind, int64_t n,
                      const char *what, char *err)
{
    int64_t walk = 0;
    int32_t i, prev = -1;

    for (i = l->head; i >= 0 && walk <= t->cap; prev = i, i = *l_next(&t->e[i], which), walk++) {
        const tier_entry_t *e = &t->e[i];
        bool ok = which == LINK_W ? (e->flags & F_WARM) && e->warm >= 0 && e->kind == kind
                                  : (e->flags & F_COLD) != 0;
        if (!ok || *l_prev(&t->e[i], which) != prev)
            return hy_err(err, HY_EFORMAT, "%s list: entry %d does not belong", what, i);
    }
    if (walk != n || l->tail != prev)
        return hy_err(err, HY_EFORMAT, "%s list has %lld entries, %lld expected", what,
                      (long long)walk, (long long)n);
    return HY_OK;
}

/* Every final-named file is indexed with its size; no temporary file is
 * left while nothing writes. */
static int check_dir(hy_tier_t *t, int64_t n_files, char *err)
{
    int fd = openat(t->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *d;
    int64_t seen = 0;
    int rc = HY_OK;

    if (dir == NULL) {
        if (fd >= 0)
            close(fd);
        return hy_err(err, HY_EIO, "cannot list %s", t->dir);
    }
    while ((d = readdir(dir)) != NULL && rc == HY_OK) {
        uint32_t kind;
        uint64_t hash;
        struct stat sb;
        size_t len = strlen(d->d_name);
        int32_t i;

        if (len > 4 && strcmp(d->d_name + len - 4, ".tmp") == 0 && t->n_jobs == 0) {
            rc = hy_err(err, HY_EFORMAT, "temporary file %s left behind", d->d_name);
        } else if (hy_tier_file_parse_name(d->d_name, &kind, &hash)) {
            seen++;
            i = find(t, (int32_t)kind, hash);
            if (i < 0 || !(t->e[i].flags & F_COLD))
                rc = hy_err(err, HY_EFORMAT, "file %s is not indexed", d->d_name);
            else if (fstatat(t->dirfd, d->d_name, &sb, 0) != 0 ||
                     (uint64_t)sb.st_size != t->e[i].file_bytes)
                rc = hy_err(err, HY_EFORMAT, "file %s: size differs from the index", d->d_name);
        }
    }
    closedir(dir);
    if (rc == HY_OK && seen != n_files)
        rc = hy_err(err, HY_EFORMAT, "%lld files indexed, %lld on disk", (long long)n_files,
                    (long long)seen);
    return rc;
}

int hy_tier_check(hy_tier_t *t, bool with_dir, char *err)
{
    int64_t n[HY_TIER_LEVELS][HY_TIER_KINDS][HY_TIER_STATES] = {{{0}}};
    int64_t b[HY_TIER_LEVELS][HY_TIER_STATES] = {{0}};
    int64_t n_warm_list[HY_TIER_KINDS] = {0}, n_cold = 0, live = 0;
    int rc = HY_OK;

    pthread_mutex_lock(&t->mu);
    /* recount from the entries with acc() itself into scratch counters */
    {
        int64_t save_n[HY_TIER_LEVELS][HY_TIER_KINDS][HY_TIER_STATES];
        int64_t save_b[HY_TIER_LEVELS][HY_TIER_STATES];

        memcpy(save_n, t->n, sizeof save_n);
        memcpy(save_b, t->bytes, sizeof save_b);
        memset(t->n, 0, sizeof t->n);
        memset(t->bytes, 0, sizeof t->bytes);
        for (int32_t i = 0; i < t->cap; i++)
            if (t->e[i].kind < HY_TIER_KINDS)
                acc(t, i, +1);
        memcpy(n, t->n, sizeof n);
        memcpy(b, t->bytes, sizeof b);
        memcpy(t->n, save_n, sizeof save_n);
        memcpy(t->bytes, save_b, sizeof save_b);
    }
    if (memcmp(n, t->n, sizeof n) != 0 || memcmp(b, t->bytes, sizeof b) != 0) {
        rc = hy_err(err, HY_EFORMAT, "tier counters differ from the entries (warm pages %lld/%lld "
                    "used, %lld/%lld cached)", (long long)t->n[HY_TIER_WARM][0][HY_TIER_USED],
                    (long long)n[HY_TIER_WARM][0][HY_TIER_USED],
                    (long long)t->n[HY_TIER_WARM][0][HY_TIER_CACHED],
                    (long long)n[HY_TIER_WARM][0][HY_TIER_CACHED]);
        goto out;
    }
    for (int32_t i = 0; i < t->cap; i++) {
        const tier_entry_t *e = &t->e[i];

        if (e->kind >= HY_TIER_KINDS)
            continue;
        live++;
        if (find(t, e->kind, e->hash) != i) {
            rc = hy_err(err, HY_EFORMAT, "entry %d is not indexed", i);
            goto out;
        }
        if ((e->flags & F_WARM) && e->warm >= 0)
            n_warm_list[e->kind]++;
        if (e->flags & F_COLD)
            n_cold++;
    }
    if (live != t->n_live) {
        rc = hy_err(err, HY_EFORMAT, "%lld live entries, counter says %d", (long long)live,
                    t->n_live);
        goto out;
    }
    for (int k = 0; k < HY_TIER_KINDS; k++) {
        int64_t slots = n[HY_TIER_WARM][k][HY_TIER_USED] + n[HY_TIER_WARM][k][HY_TIER_CACHED];

        if (slots + t->n_warm_free[k] != t->n_warm[k]) {
            rc = hy_err(err, HY_EFORMAT, "warm %s slots: %lld held + %d free != %d",
                        tier_kind_name(k), (long long)slots,
                        t->n_warm_free[k], t->n_warm[k]);
            goto out;
        }
        if ((rc = check_list(t, &t->wlru[k], LINK_W, k, n_warm_list[k], "warm", err)) != HY_OK)
            goto out;
    }
    if ((rc = check_list(t, &t->clru, LINK_C, 0, n_cold, "cold", err)) != HY_OK)
        goto out;
    if (cold_taken(t) > (t->dir ? t->o.disk_bytes : 0)) {
        rc = hy_err(err, HY_EFORMAT, "cold tier holds %llu bytes, budget %llu",
                    (unsigned long long)cold_taken(t), (unsigned long long)t->o.disk_bytes);
        goto out;
    }
    if (with_dir && t->dir != NULL)
        rc = check_dir(t, n_cold, err);
out:
    pthread_mutex_unlock(&t->mu);
    return rc;
}
