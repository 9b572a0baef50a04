/*
 * test_shm.c - the shared segment: create (O_EXCL, 0600), attach from another
 * process, header/layout checks, a corrupted header refused, stale-segment
 * removal, stats histograms, and the robust mutex: a child takes the lock,
 * scrambles the page-table accounting and _exit()s while holding it; the
 * parent's next lock must recover and leave the accounting exact.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/shm.h"
#include "test.h"

static char err[HY_ERR_LEN];

static void small_params(hy_shm_params_t *p)
{
    hy_shm_params_default(p);
    p->n_pages = 64;
    p->n_request_slots = 8;
    p->max_prompt_tokens = 256;
    p->ring_capacity = 16;
    p->ring_top_logprobs = 2;
}

int main(void)
{
    char inst[64], path[128];
    hy_shm_params_t p;
    hy_shm_t *shm = NULL, *w = NULL, *dup = NULL;
    const hy_shm_header_t *h;
    struct stat st;
    pid_t pid;
    int status, rc, r, ok;

    snprintf(inst, sizeof inst, "test-shm-%d", (int)getpid());
    snprintf(path, sizeof path, "/dev/shm/hyserve-%s", inst);
    small_params(&p);

    HY_T_OK(hy_shm_create(&shm, "../etc", &p, err) == HY_EINVAL, "bad instance name: %s", err);
    p.n_request_slots = 0;
    HY_T_OK(hy_shm_create(&shm, inst, &p, err) == HY_ERANGE && strstr(err, "n_request_slots"),
            "bad parameter named: %s", err);
    small_params(&p);
    rc = hy_shm_create(&shm, inst, &p, err);
    HY_T_OK(rc == HY_OK, "create %s %s", inst, rc ? err : "");
    if (rc != HY_OK)
        return hy_t_done();
    h = hy_shm_header(shm);
    HY_T_OK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600 &&
                (uint64_t)st.st_size == h->total_size,
            "segment is mode 0600 and total_size bytes (%llu)", (unsigned long long)h->total_size);
    ok = h->magic == HY_SHM_MAGIC && h->layout_version == HY_SHM_LAYOUT_VERSION &&
         h->coordinator_pid == getpid() && h->created_unix > 0 && h->n_regions == HY_SHM_NREG;
    for (r = 0; r < HY_SHM_NREG; r++) {
        const hy_shm_region_t *g = &h->regions[r];
        ok &= g->off % 64 == 0 && g->off + g->size <= h->total_size && g->off >= sizeof *h;
        if (r > 0 && r != HY_SHM_REG_SLOTS)
            ok &= g->off >= h->regions[r - 1].off + h->regions[r - 1].size;
    }
    HY_T_OK(ok, "header: magic, version, pid, time; regions aligned, in bounds, not overlapping");
    HY_T_OK(h->regions[HY_SHM_REG_PAGES].count == 64 && h->regions[HY_SHM_REG_SLOTS].count == 8 &&
                h->regions[HY_SHM_REG_PROMPTS].count == 8 * 256 &&
                h->regions[HY_SHM_REG_RINGS].count == 8 * 16,
            "region counts follow the parameters");
    HY_T_OK(hy_shm_create(&dup, inst, &p, err) == HY_EIO && strstr(err, "File exists"),
            "second create refused (O_EXCL): %s", err);
    HY_T_OK(hy_shm_remove_stale(inst, err) == HY_EINVAL, "live coordinator's segment kept: %s",
            err);

    /* attach from a child: it allocates pages that the parent must see */
    pid = fork();
    if (pid == 0) {
        int32_t pg[5];
        if (hy_shm_attach(&w, inst, err) != HY_OK ||
            hy_pt_alloc_pages(hy_shm_pt(w), HY_KV_FULL, 5, pg, err) != HY_OK)
            _exit(1);
        hy_shm_close(w);
        _exit(0);
    }
    waitpid(pid, &status, 0);
    {
        hy_pt_counts_t c;
        hy_pt_counts(hy_shm_pt(shm), &c);
        HY_T_OK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && c.pages_used == 5,
                "a child attaches and its allocation is visible (%d used)", c.pages_used);
    }

    /* robust mutex: the holder dies mid-update */
    pid = fork();
    if (pid == 0) {
        hy_shm_t *c;
        hy_pt_t *pt;
        if (hy_shm_attach(&c, inst, err) != HY_OK)
            _exit(1);
        pt = hy_shm_pt(c);
        if (hy_pt_lock(pt) != HY_OK)
            _exit(2);
        /* half an allocation: unlinked from the free list, counters wrong */
        pt->sh->pages.free_head = pt->pages[pt->sh->pages.free_head].next;
        atomic_store(&pt->sh->pages.n_free, 1000);
        atomic_store(&pt->sh->pages.n_used, -3);
        _exit(0); /* still holding the lock */
    }
    waitpid(pid, &status, 0);
    {
        hy_pt_t *pt = hy_shm_pt(shm);
        int32_t pg[3];
        hy_pt_counts_t c;
        rc = hy_pt_alloc_pages(pt, HY_KV_FULL, 3, pg, err);
        hy_pt_counts(pt, &c);
        HY_T_OK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && rc == HY_OK &&
                    c.recoveries == 1,
                "lock after the holder died: EOWNERDEAD recovered (%llu recoveries)",
                (unsigned long long)c.recoveries);
        rc = hy_pt_check(pt, err);
        HY_T_OK(rc == HY_OK && c.pages_used == 8 && c.pages_free == 56,
                "accounting re-derived from the entries: used %d free %d %s", c.pages_used,
                c.pages_free, rc ? err : "");
        HY_T_OK(hy_shm_lock(shm) == HY_OK, "mutex is consistent again");
        hy_shm_unlock(shm);
    }

    /* a worker from another build (different layout version) is refused */
    {
        int fd = open(path, O_RDWR);
        hy_shm_header_t *raw = mmap(NULL, sizeof *raw, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        raw->layout_version++;
        HY_T_OK(hy_shm_attach(&w, inst, err) == HY_EFORMAT && strstr(err, "layout version"),
                "attach refuses a different layout version: %s", err);
        raw->layout_version--;
        raw->regions[HY_SHM_REG_RINGS].off += 64;
        HY_T_OK(hy_shm_attach(&w, inst, err) == HY_EFORMAT, "attach refuses bad region offsets: %s",
                err);
        raw->regions[HY_SHM_REG_RINGS].off -= 64;
        munmap(raw, sizeof *raw);
        rc = hy_shm_attach(&w, inst, err);
        HY_T_OK(rc == HY_OK, "attach accepts the repaired header");
        hy_shm_close(w);
    }

    /* histograms: bucket by upper bound */
    {
        hy_stats_t *s = hy_shm_stats(shm);
        hy_stats_observe(&s->ttft, 500);       /* 0.5 ms -> <= 0.001 */
        hy_stats_observe(&s->ttft, 30000);     /* 30 ms  -> <= 0.04 */
        hy_stats_observe(&s->ttft, 5000000000); /* 5000 s -> +Inf */
        HY_T_OK(atomic_load(&s->ttft.bucket[0]) == 1 && atomic_load(&s->ttft.bucket[4]) == 1 &&
                    atomic_load(&s->ttft.bucket[HY_STATS_NBUCKETS]) == 1 &&
                    atomic_load(&s->ttft.count) == 3,
                "histogram buckets");
    }

    hy_shm_close(shm);
    HY_T_OK(stat(path, &st) != 0, "close by the creator unlinks the segment");
    HY_T_OK(hy_shm_attach(&w, inst, err) == HY_ENOENT, "attach after unlink: %s", err);

    /* stale segment from a dead coordinator */
    pid = fork();
    if (pid == 0) {
        hy_shm_t *c;
        _exit(hy_shm_create(&c, inst, &p, err) == HY_OK ? 0 : 1); /* dies without closing */
    }
    waitpid(pid, &status, 0);
    HY_T_OK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && stat(path, &st) == 0 &&
                hy_shm_remove_stale(inst, err) == HY_OK && stat(path, &st) != 0,
            "stale segment of a dead coordinator removed");
    return hy_t_done();
}
