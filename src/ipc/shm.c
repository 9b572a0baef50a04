/*
 * shm.c - create, attach, lay out and remove the shared segment (shm.h).
 * The layout is a pure function of the parameters: the creator writes it
 * into the header and every attacher recomputes it and refuses a segment
 * whose header disagrees, so a worker from a different build or a
 * truncated file never reads past its end.
 */
#include "ipc/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/futex.h"
#include "ipc/ring.h"

#define ALIGN64(x) (((x) + 63u) & ~(uint64_t)63u)

struct hy_shm {
    char *base;
    uint64_t size;
    hy_shm_header_t *hdr;
    hy_pt_t pt;
    bool owner; /* created it: unlink on close */
    char name[HY_SHM_INSTANCE_MAX + 16];
};

const double hy_stats_bucket_le[HY_STATS_NBUCKETS] = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160., 640.0, 2560.0,
};

const char *const hy_tier_giveup_name[HY_TIER_GIVEUP_N] = {"rereads", "stalled", "no_room"};

const double hy_tier_bucket_le[HY_TIER_NBUCKETS] = {
    1e-5,  2.5e-5, 5e-5,  1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
    5e-3, 0.01,   0.025, 0.05, 0.1,    0.25, 0.5,  1.0,
};

void hy_tier_observe(hy_tier_hist_t *h, uint64_t ns)
{
    int i;

    for (i = 0; i < HY_TIER_NBUCKETS; i++)
        if ((double)ns <= hy_tier_bucket_le[i] * 1e9)
            break;
    atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

void hy_stats_observe(hy_stats_hist_t *h, uint64_t us)
{
    int i;

    for (i = 0; i < HY_STATS_NBUCKETS; i++)
        if ((double)us <= hy_stats_bucket_le[i] * 1e6)
            break;
    atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    hy_qwin_observe(&h->win, hy_shm_now_ns(), us);
}

int64_t hy_shm_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void hy_shm_params_default(hy_shm_params_t *p)
{
    memset(p, 0, sizeof *p);
    p->n_pages = 1024;
    p->page_tokens = 16;
    p->n_state_slots = 16;
    p->n_checkpoint_slots = 64;
    p->n_request_slots = 64;
    p->max_prompt_tokens = 8192;
    p->ring_capacity = 256;
    p->ring_top_logprobs = 0;
    p->prefix_index_capacity = 0;
}

void hy_shm_params_for(hy_shm_params_t *p, const hy_pt_params_t *pt, int32_t n_request_slots,
                       int32_t max_prompt_tokens)
{
    memset(p, 0, sizeof *p);
    p->n_pages = pt->n_pages;
    p->n_swa_pages = pt->n_swa_pages;
    p->page_tokens = pt->page_tokens;
    p->n_state_slots = pt->n_state_slots;
    p->n_checkpoint_slots = pt->n_checkpoint_slots;
    p->prefix_index_capacity = pt->index_capacity;
    p->n_request_slots = n_request_slots;
    p->max_prompt_tokens = max_prompt_tokens;
    p->ring_capacity = 256;
    p->ring_top_logprobs = HY_SAMPLING_MAX_LOGPROBS;
}

static int instance_ok(const char *s, char *err)
{
    size_t i, n = s ? strlen(s) : 0;

    if (n == 0 || n > HY_SHM_INSTANCE_MAX || s[0] == '.')
        return hy_err(err, HY_EINVAL, "shm instance name \"%s\": must be 1..%d characters, not "
                      "starting with '.'", s ? s : "", HY_SHM_INSTANCE_MAX);
    for (i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return hy_err(err, HY_EINVAL, "shm instance name \"%s\": only [A-Za-z0-9_.-]", s);
    }
    return HY_OK;
}

static void set_region(hy_shm_header_t *h, int r, uint64_t *off, uint64_t count, uint32_t elem)
{
    h->regions[r].off = *off;
    h->regions[r].count = count;
    h->regions[r].elem_size = elem;
    h->regions[r].size = count * elem;
    *off = ALIGN64(*off + count * elem);
}

int hy_shm_layout(const hy_shm_params_t *p, hy_shm_header_t *h, char *err)
{
    hy_pt_params_t pp = {p->n_pages, p->page_tokens, p->n_state_slots, p->n_checkpoint_slots,
                         p->prefix_index_capacity, p->n_swa_pages};
    uint64_t n_all = (uint64_t)p->n_pages + (uint64_t)HY_MAX(p->n_swa_pages, 0);
    hy_pt_layout_t pl;
    uint64_t off, pt_off, ring_bytes;
    uint32_t es;
    int rc;

    if ((rc = hy_pt_layout(&pp, &pl, err)) != HY_OK)
        return rc;
    if (p->n_request_slots < 1 || p->n_request_slots > 65536)
        return hy_err(err, HY_ERANGE, "n_request_slots = %d: must be 1..65536", p->n_request_slots);
    if (p->max_prompt_tokens < 1 || p->max_prompt_tokens > (1 << 22))
        return hy_err(err, HY_ERANGE, "max_prompt_tokens = %d: must be 1..%d",
                      p->max_prompt_tokens, 1 << 22);
    if (p->ring_capacity < 2 || p->ring_capacity > (1 << 20))
        return hy_err(err, HY_ERANGE, "ring_capacity = %d: must be 2..%d", p->ring_capacity,
                      1 << 20);
    if (p->ring_top_logprobs < 0 || p->ring_top_logprobs > HY_SAMPLING_MAX_LOGPROBS)
        return hy_err(err, HY_ERANGE, "ring_top_logprobs = %d: must be 0..%d",
                      p->ring_top_logprobs, HY_SAMPLING_MAX_LOGPROBS);
    es = hy_ring_entry_size(p->ring_top_logprobs);
    ring_bytes = (uint64_t)p->ring_capacity * es;

    memset(h, 0, sizeof *h);
    h->magic = HY_SHM_MAGIC;
    h->layout_version = HY_SHM_LAYOUT_VERSION;
    h->header_size = sizeof *h;
    h->params = *p;
    h->params.prefix_index_capacity = pl.index_capacity;
    h->n_regions = HY_SHM_NREG;
    h->ring_entry_size = es;
    h->slot_size = sizeof(hy_req_slot_t);
    h->mutex_size = sizeof(pthread_mutex_t);
    /* the page table is one block whose own header records its arrays'
     * offsets; the segment header repeats them as absolute regions */
    pt_off = ALIGN64(sizeof *h);
    h->regions[HY_SHM_REG_PT] = (hy_shm_region_t){pt_off, sizeof(hy_pt_shared_t), 1,
                                                  sizeof(hy_pt_shared_t), 0};
    h->regions[HY_SHM_REG_PAGES] = (hy_shm_region_t){pt_off + pl.off_pages,
        n_all * sizeof(hy_pt_entry_t), n_all, sizeof(hy_pt_entry_t), 0};
    h->regions[HY_SHM_REG_CKPTS] = (hy_shm_region_t){pt_off + pl.off_ckpts,
        (uint64_t)p->n_checkpoint_slots * sizeof(hy_pt_entry_t), (uint64_t)p->n_checkpoint_slots,
        sizeof(hy_pt_entry_t), 0};
    h->regions[HY_SHM_REG_STATES] = (hy_shm_region_t){pt_off + pl.off_states,
        (uint64_t)p->n_state_slots * 4, (uint64_t)p->n_state_slots, 4, 0};
    h->regions[HY_SHM_REG_INDEX] = (hy_shm_region_t){pt_off + pl.off_index,
        (uint64_t)pl.index_capacity * sizeof(hy_pt_index_t), (uint64_t)pl.index_capacity,
        sizeof(hy_pt_index_t), 0};
    h->regions[HY_SHM_REG_DEPTH] = (hy_shm_region_t){pt_off + pl.off_depth, n_all * 4, n_all, 4, 0};
    h->regions[HY_SHM_REG_BLOCK_TOKENS] = (hy_shm_region_t){pt_off + pl.off_tokens,
        n_all * (uint64_t)p->page_tokens * 4, n_all * (uint64_t)p->page_tokens, 4, 0};
    off = ALIGN64(pt_off + pl.total_size);
    set_region(h, HY_SHM_REG_SLOTS, &off, (uint64_t)p->n_request_slots, sizeof(hy_req_slot_t));
    set_region(h, HY_SHM_REG_PROMPTS, &off,
               (uint64_t)p->n_request_slots * (uint64_t)p->max_prompt_tokens, 4);
    h->regions[HY_SHM_REG_RINGS] = (hy_shm_region_t){off, ring_bytes * (uint64_t)p->n_request_slots,
        (uint64_t)p->n_request_slots * (uint64_t)p->ring_capacity, es, 0};
    off = ALIGN64(off + ring_bytes * (uint64_t)p->n_request_slots);
    set_region(h, HY_SHM_REG_HISTORY, &off,
               (uint64_t)p->n_request_slots * (uint64_t)p->max_prompt_tokens,
               sizeof(hy_req_hist_t));
    set_region(h, HY_SHM_REG_STATS, &off, 1, sizeof(hy_stats_t));
    h->total_size = off;
    if (off > ((uint64_t)1 << 40))
        return hy_err(err, HY_ERANGE, "shared segment would be %llu bytes",
                      (unsigned long long)off);
    return HY_OK;
}

static hy_pt_params_t pt_params(const hy_shm_params_t *p)
{
    hy_pt_params_t pp = {p->n_pages, p->page_tokens, p->n_state_slots, p->n_checkpoint_slots,
                         p->prefix_index_capacity, p->n_swa_pages};
    return pp;
}

int hy_shm_create(hy_shm_t **out, const char *instance, const hy_shm_params_t *p, char *err)
{
    hy_shm_header_t lay;
    hy_shm_t *shm = NULL;
    pthread_mutexattr_t ma;
    hy_pt_params_t pp;
    int fd = -1, rc;
    void *base;

    *out = NULL;
    if ((rc = instance_ok(instance, err)) != HY_OK || (rc = hy_shm_layout(p, &lay, err)) != HY_OK)
        return rc;
    if ((shm = calloc(1, sizeof *shm)) == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    snprintf(shm->name, sizeof shm->name, "/hyserve-%s", instance);
    fd = shm_open(shm->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        rc = hy_err(err, HY_EIO, "shm_open %s: %s%s", shm->name, strerror(errno),
                    errno == EEXIST ? " (another coordinator runs, or a stale segment: "
                                      "remove it when no coordinator is alive)" : "");
        goto fail;
    }
    shm->owner = true;
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)lay.total_size) != 0) {
        rc = hy_err(err, HY_EIO, "sizing %s to %llu bytes: %s", shm->name,
                    (unsigned long long)lay.total_size, strerror(errno));
        goto fail;
    }
    base = mmap(NULL, lay.total_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        rc = hy_err(err, HY_EIO, "mmap %s: %s", shm->name, strerror(errno));
        goto fail;
    }
    close(fd);
    fd = -1;
    shm->base = base;
    shm->size = lay.total_size;
    shm->hdr = base;
    memcpy(shm->hdr, &lay, sizeof lay); /* ready = 0 until the end */
    if (pthread_mutexattr_init(&ma) != 0 ||
        pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED) != 0 ||
        pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST) != 0 ||
        pthread_mutex_init(&shm->hdr->lock, &ma) != 0) {
        rc = hy_err(err, HY_EIO, "cannot initialise the robust process-shared mutex");
        goto fail;
    }
    pthread_mutexattr_destroy(&ma);
    pp = pt_params(&lay.params);
    if ((rc = hy_pt_init(&shm->pt, shm->base + lay.regions[HY_SHM_REG_PT].off,
                         shm->size - lay.regions[HY_SHM_REG_PT].off, &pp, &shm->hdr->lock,
                         err)) != HY_OK)
        goto fail;
    hy_req_init_slots(shm);
    shm->hdr->created_unix = (int64_t)time(NULL);
    shm->hdr->coordinator_pid = (int32_t)getpid();
    atomic_store_explicit(&shm->hdr->ready, 1, memory_order_release);
    *out = shm;
    return HY_OK;
fail:
    if (fd >= 0)
        close(fd);
    hy_shm_close(shm);
    return rc;
}

static int header_check(const hy_shm_header_t *h, uint64_t file_size, const char *name, char *err)
{
    hy_shm_header_t want;
    char sub[HY_ERR_LEN];

    if (file_size < sizeof *h || h->magic != HY_SHM_MAGIC)
        return hy_err(err, HY_EFORMAT, "%s is not a hyserve segment", name);
    if (h->layout_version != HY_SHM_LAYOUT_VERSION || h->header_size != sizeof *h ||
        h->slot_size != sizeof(hy_req_slot_t) || h->mutex_size != sizeof(pthread_mutex_t))
        return hy_err(err, HY_EFORMAT,
                      "%s has layout version %u (header %u bytes), this build expects %u (%zu): "
                      "restart the coordinator and workers from one build",
                      name, h->layout_version, h->header_size, HY_SHM_LAYOUT_VERSION, sizeof *h);
    if (!atomic_load_explicit(&h->ready, memory_order_acquire))
        return hy_err(err, HY_EIO, "%s is still being initialised", name);
    if (hy_shm_layout(&h->params, &want, sub) != HY_OK)
        return hy_err(err, HY_EFORMAT, "%s has bad parameters: %s", name, sub);
    if (want.total_size != h->total_size || h->total_size != file_size ||
        want.ring_entry_size != h->ring_entry_size || h->n_regions != HY_SHM_NREG ||
        memcmp(want.regions, h->regions, sizeof want.regions) != 0)
        return hy_err(err, HY_EFORMAT, "%s: header does not match its size %llu", name,
                      (unsigned long long)file_size);
    return HY_OK;
}

int hy_shm_attach(hy_shm_t **out, const char *instance, char *err)
{
    hy_shm_t *shm = NULL;
    struct stat st;
    int fd = -1, rc;
    void *base;

    *out = NULL;
    if ((rc = instance_ok(instance, err)) != HY_OK)
        return rc;
    if ((shm = calloc(1, sizeof *shm)) == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    snprintf(shm->name, sizeof shm->name, "/hyserve-%s", instance);
    fd = shm_open(shm->name, O_RDWR, 0);
    if (fd < 0) {
        rc = hy_err(err, errno == ENOENT ? HY_ENOENT : HY_EIO, "shm_open %s: %s", shm->name,
                    strerror(errno));
        goto fail;
    }
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(hy_shm_header_t)) {
        rc = hy_err(err, HY_EFORMAT, "%s is too small to be a hyserve segment", shm->name);
        goto fail;
    }
    base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        rc = hy_err(err, HY_EIO, "mmap %s: %s", shm->name, strerror(errno));
        goto fail;
    }
    shm->base = base;
    shm->size = (uint64_t)st.st_size;
    shm->hdr = base;
    if ((rc = header_check(shm->hdr, shm->size, shm->name, err)) != HY_OK)
        goto fail;
    if ((rc = hy_pt_open(&shm->pt, shm->base + shm->hdr->regions[HY_SHM_REG_PT].off,
                         shm->size - shm->hdr->regions[HY_SHM_REG_PT].off, &shm->hdr->lock,
                         err)) != HY_OK)
        goto fail;
    close(fd);
    *out = shm;
    return HY_OK;
fail:
    if (fd >= 0)
        close(fd);
    hy_shm_close(shm);
    return rc;
}

int hy_shm_remove_stale(const char *instance, char *err)
{
    char name[HY_SHM_INSTANCE_MAX + 16];
    hy_shm_header_t h;
    int fd, rc;
    ssize_t n;

    if ((rc = instance_ok(instance, err)) != HY_OK)
        return rc;
    snprintf(name, sizeof name, "/hyserve-%s", instance);
    fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0)
        return errno == ENOENT ? HY_ENOENT
                               : hy_err(err, HY_EIO, "shm_open %s: %s", name, strerror(errno));
    n = pread(fd, &h, sizeof h, 0);
    close(fd);
    /* a segment that is not ours, or is unfinished, has no live owner we can
     * name; only a recorded, still running pid keeps it */
    if (n == (ssize_t)sizeof h && h.magic == HY_SHM_MAGIC && h.coordinator_pid > 0 &&
        (kill(h.coordinator_pid, 0) == 0 || errno == EPERM))
        return hy_err(err, HY_EINVAL, "%s belongs to running coordinator pid %d", name,
                      h.coordinator_pid);
    if (shm_unlink(name) != 0 && errno != ENOENT)
        return hy_err(err, HY_EIO, "shm_unlink %s: %s", name, strerror(errno));
    return HY_OK;
}

void hy_shm_close(hy_shm_t *shm)
{
    if (shm == NULL)
        return;
    if (shm->base != NULL)
        munmap(shm->base, shm->size);
    if (shm->owner)
        shm_unlink(shm->name);
    free(shm);
}

const hy_shm_header_t *hy_shm_header(const hy_shm_t *shm) { return shm->hdr; }
hy_shm_header_t *hy_shm_header_rw(hy_shm_t *shm) { return shm->hdr; }
hy_pt_t *hy_shm_pt(hy_shm_t *shm) { return &shm->pt; }

void *hy_shm_region(hy_shm_t *shm, int reg)
{
    if (reg < 0 || reg >= HY_SHM_NREG)
        return NULL;
    return shm->base + shm->hdr->regions[reg].off;
}

hy_stats_t *hy_shm_stats(hy_shm_t *shm)
{
    return (hy_stats_t *)hy_shm_region(shm, HY_SHM_REG_STATS);
}

int hy_shm_lock(hy_shm_t *shm) { return hy_pt_lock(&shm->pt); }
void hy_shm_unlock(hy_shm_t *shm) { hy_pt_unlock(&shm->pt); }

void hy_shm_engine_wait(hy_shm_t *shm, uint32_t seen, int timeout_ms)
{
    hy_shm_header_t *h = shm->hdr;

    atomic_store(&h->engine_waiting, 1);
    if (atomic_load(&h->engine_futex) == seen)
        hy_futex_wait(&h->engine_futex, seen, timeout_ms);
    atomic_store(&h->engine_waiting, 0);
}

void hy_shm_engine_kick(hy_shm_t *shm)
{
    hy_shm_header_t *h = shm->hdr;

    atomic_fetch_add(&h->engine_futex, 1);
    if (atomic_load(&h->engine_waiting))
        hy_futex_wake(&h->engine_futex, 1);
}
