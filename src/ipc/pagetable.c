/*
 * pagetable.c - shared page table, prefix cache and checkpoint pool (see
 * pagetable.h for the states and the rules).  The pages of each group and
 * the checkpoint slots are instances of one "pool" (entries + free list +
 * LRU of cached entries); a single linear-probing index maps a block hash
 * to the page of each group and the checkpoint ending at that boundary.
 * Every list and counter is derived data: hy_pt_recover() rebuilds them
 * from the entries alone.
 */
#define _GNU_SOURCE /* qsort_r */
#include "ipc/pagetable.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN64(x) (((x) + 63u) & ~(uint64_t)63u)

/* ---- hashing ------------------------------------------------------------ */

/* wyhash's 64x64->128 multiply-fold: every input bit reaches every output bit. */
static inline uint64_t wymix(uint64_t a, uint64_t b)
{
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

#define P0 0xa0761d6478bd642fULL
#define P1 0xe7037ed1a0b428dbULL
#define P2 0x8ebc6af09c88c6e3ULL

uint64_t hy_pt_block_hash(uint64_t prev, const int32_t *tokens, int32_t n)
{
    uint64_t h = prev ^ P0;
    int32_t i;

    for (i = 0; i + 1 < n; i += 2) {
        uint64_t w = (uint64_t)(uint32_t)tokens[i] | (uint64_t)(uint32_t)tokens[i + 1] << 32;
        h = wymix(w ^ P1, h ^ P2);
    }
    if (i < n)
        h = wymix((uint64_t)(uint32_t)tokens[i] ^ P2, h ^ P1);
    return wymix(h ^ (uint64_t)(uint32_t)n, P1 ^ P0);
}

/* ---- layout ------------------------------------------------------------- */

int hy_pt_layout(const hy_pt_params_t *p, hy_pt_layout_t *out, char *err)
{
    uint64_t off, sz, need, cap, n_all;

    if (p->n_pages < 1 || p->n_pages > (1 << 28))
        return hy_err(err, HY_ERANGE, "n_pages = %d: must be 1..%d", p->n_pages, 1 << 28);
    if (p->n_swa_pages < 0 || p->n_swa_pages > (1 << 28))
        return hy_err(err, HY_ERANGE, "n_swa_pages = %d: must be 0..%d", p->n_swa_pages,
                      1 << 28);
    n_all = (uint64_t)p->n_pages + (uint64_t)p->n_swa_pages;
    if (p->page_tokens < 1 || p->page_tokens > 4096)
        return hy_err(err, HY_ERANGE, "page_tokens = %d: must be 1..4096", p->page_tokens);
    if (p->n_state_slots < 0 || p->n_state_slots > (1 << 24))
        return hy_err(err, HY_ERANGE, "n_state_slots = %d: must be 0..%d", p->n_state_slots,
                      1 << 24);
    if (p->n_checkpoint_slots < 0 || p->n_checkpoint_slots > (1 << 24))
        return hy_err(err, HY_ERANGE, "n_checkpoint_slots = %d: must be 0..%d",
                      p->n_checkpoint_slots, 1 << 24);
    /* every live index slot holds >= 1 hashed page or checkpoint, so more
     * slots than pages + checkpoints means the index can never fill */
    need = n_all + (uint64_t)p->n_checkpoint_slots + 1;
    if (p->index_capacity == 0) {
        for (cap = 16; cap < 2 * need; cap <<= 1)
            ;
    } else {
        cap = (uint64_t)p->index_capacity;
        if (p->index_capacity < 0 || (cap & (cap - 1)) != 0 || cap < need)
            return hy_err(err, HY_ERANGE,
                          "prefix index capacity = %d: must be a power of two >= %llu",
                          p->index_capacity, (unsigned long long)need);
    }
    if (cap > (1u << 30))
        return hy_err(err, HY_ERANGE, "prefix index capacity %llu too large",
                      (unsigned long long)cap);
    memset(out, 0, sizeof *out);
    out->index_capacity = (int32_t)cap;
    off = ALIGN64(sizeof(hy_pt_shared_t));
    out->off_pages = off;
    off = ALIGN64(off + n_all * sizeof(hy_pt_entry_t));
    out->off_ckpts = off;
    off = ALIGN64(off + (uint64_t)p->n_checkpoint_slots * sizeof(hy_pt_entry_t));
    out->off_states = off;
    off = ALIGN64(off + (uint64_t)p->n_state_slots * sizeof(int32_t));
    out->off_index = off;
    off = ALIGN64(off + cap * sizeof(hy_pt_index_t));
    out->off_depth = off;
    off = ALIGN64(off + n_all * sizeof(int32_t));
    out->off_tokens = off;
    if (hy_mul_overflow_u64(n_all, (uint64_t)p->page_tokens * 4, &sz) ||
        hy_add_overflow_u64(off, sz, &off))
        return hy_err(err, HY_ERANGE, "page table size overflows");
    out->total_size = ALIGN64(off);
    return HY_OK;
}

static void pt_bind(hy_pt_t *pt, void *mem, pthread_mutex_t *mu)
{
    char *b = mem;
    hy_pt_shared_t *sh = mem;

    memset(pt, 0, sizeof *pt);
    pt->sh = sh;
    pt->pages = (hy_pt_entry_t *)(b + sh->off_pages);
    pt->ckpts = (hy_pt_entry_t *)(b + sh->off_ckpts);
    pt->states = (int32_t *)(b + sh->off_states);
    pt->index = (hy_pt_index_t *)(b + sh->off_index);
    pt->tokens = (int32_t *)(b + sh->off_tokens);
    pt->depth = (int32_t *)(b + sh->off_depth);
    pt->mu = mu;
}

int hy_pt_init(hy_pt_t *pt, void *mem, uint64_t size, const hy_pt_params_t *p,
               pthread_mutex_t *mu, char *err)
{
    hy_pt_layout_t l;
    hy_pt_shared_t *sh = mem;
    int rc;

    if ((rc = hy_pt_layout(p, &l, err)) != HY_OK)
        return rc;
    if (size < l.total_size)
        return hy_err(err, HY_EINVAL, "page table needs %llu bytes, got %llu",
                      (unsigned long long)l.total_size, (unsigned long long)size);
    if (((uintptr_t)mem & 63u) != 0)
        return hy_err(err, HY_EINVAL, "page table memory must be 64-byte aligned");
    memset(mem, 0, l.total_size);
    sh->total_size = l.total_size;
    sh->params = *p;
    sh->params.index_capacity = l.index_capacity;
    sh->off_pages = l.off_pages;
    sh->off_ckpts = l.off_ckpts;
    sh->off_states = l.off_states;
    sh->off_index = l.off_index;
    sh->off_tokens = l.off_tokens;
    sh->off_depth = l.off_depth;
    sh->pages.n_total = p->n_pages;
    sh->swa.n_total = p->n_swa_pages;
    sh->swa.base = p->n_pages;
    sh->ckpts.n_total = p->n_checkpoint_slots;
    pt_bind(pt, mem, mu);
    /* every entry starts free with refcount 0: recovery builds the lists */
    hy_pt_recover(pt);
    sh->magic = HY_PT_MAGIC;
    return HY_OK;
}

int hy_pt_open(hy_pt_t *pt, void *mem, uint64_t size, pthread_mutex_t *mu, char *err)
{
    hy_pt_shared_t *sh = mem;
    hy_pt_layout_t l;
    int rc;

    if (size < sizeof *sh || sh->magic != HY_PT_MAGIC)
        return hy_err(err, HY_EFORMAT, "page table: bad magic");
    if ((rc = hy_pt_layout(&sh->params, &l, err)) != HY_OK)
        return hy_err(err, HY_EFORMAT, "page table: bad parameters");
    if (l.total_size != sh->total_size || l.total_size > size || l.off_pages != sh->off_pages ||
        l.off_ckpts != sh->off_ckpts || l.off_states != sh->off_states ||
        l.off_index != sh->off_index || l.off_tokens != sh->off_tokens ||
        l.off_depth != sh->off_depth || sh->pages.n_total != sh->params.n_pages ||
        sh->pages.base != 0 || sh->swa.n_total != sh->params.n_swa_pages ||
        sh->swa.base != sh->params.n_pages || sh->ckpts.base != 0 ||
        sh->ckpts.n_total != sh->params.n_checkpoint_slots)
        return hy_err(err, HY_EFORMAT, "page table: header does not match its parameters");
    pt_bind(pt, mem, mu);
    return HY_OK;
}

int hy_pt_create(hy_pt_t **out, const hy_pt_params_t *p, char *err)
{
    hy_pt_layout_t l;
    hy_pt_t *pt = NULL;
    void *mem = NULL;
    int rc;

    *out = NULL;
    if ((rc = hy_pt_layout(p, &l, err)) != HY_OK)
        return rc;
    pt = malloc(sizeof *pt);
    mem = aligned_alloc(64, (size_t)l.total_size); /* a multiple of 64 */
    if (pt == NULL || mem == NULL) {
        rc = hy_err(err, HY_ENOMEM, "out of memory for a page table of %d pages", p->n_pages);
        goto fail;
    }
    if ((rc = hy_pt_init(pt, mem, l.total_size, p, NULL, err)) != HY_OK)
        goto fail;
    *out = pt;
    return HY_OK;
fail:
    free(mem);
    free(pt);
    return rc;
}

void hy_pt_destroy(hy_pt_t *pt)
{
    if (pt == NULL)
        return;
    free(pt->sh);
    free(pt);
}

/* ---- locking ------------------------------------------------------------ */

int hy_pt_lock(hy_pt_t *pt)
{
    int rc;

    if (pt->mu == NULL)
        return HY_OK;
    rc = pthread_mutex_lock(pt->mu);
    if (rc == EOWNERDEAD) {
        /* The previous holder died inside a critical section: lists and
         * counters may be half-updated, the entries are the truth. */
        hy_pt_recover(pt);
        if (pt->on_recover)
            pt->on_recover(pt->recover_ctx);
        atomic_fetch_add_explicit(&pt->sh->recoveries, 1, memory_order_relaxed);
        if (pthread_mutex_consistent(pt->mu) != 0) {
            pthread_mutex_unlock(pt->mu);
            return HY_EIO;
        }
        return HY_OK;
    }
    return rc == 0 ? HY_OK : HY_EIO;
}

void hy_pt_unlock(hy_pt_t *pt)
{
    if (pt->mu != NULL)
        pthread_mutex_unlock(pt->mu);
}

/* ---- pools -------------------------------------------------------------- */

#define RLX memory_order_relaxed
static inline void cnt_add(_Atomic int32_t *c, int32_t d)
{
    atomic_store_explicit(c, atomic_load_explicit(c, RLX) + d, RLX);
}

/* The pool of a page group; NULL for a group that is not one. */
static hy_pt_pool_t *pt_pool(hy_pt_t *pt, int32_t group)
{
    return group == HY_KV_FULL ? &pt->sh->pages : group == HY_KV_SWA ? &pt->sh->swa : NULL;
}

/* A page pool's entries: its part of pt->pages, indexed by page id. */
static hy_pt_entry_t *pt_ents(const hy_pt_t *pt, const hy_pt_pool_t *pool)
{
    return pt->pages + pool->base;
}

static void lru_unlink(hy_pt_pool_t *pool, hy_pt_entry_t *e, int32_t id)
{
    if (e[id].prev >= 0)
        e[e[id].prev].next = e[id].next;
    else
        pool->lru_head = e[id].next;
    if (e[id].next >= 0)
        e[e[id].next].prev = e[id].prev;
    else
        pool->lru_tail = e[id].prev;
    e[id].prev = e[id].next = -1;
}

static void lru_append(hy_pt_pool_t *pool, hy_pt_entry_t *e, int32_t id)
{
    e[id].prev = pool->lru_tail;
    e[id].next = -1;
    if (pool->lru_tail >= 0)
        e[pool->lru_tail].next = id;
    else
        pool->lru_head = id;
    pool->lru_tail = id;
}

/* The front of the LRU: evicted first. */
static void lru_prepend(hy_pt_pool_t *pool, hy_pt_entry_t *e, int32_t id)
{
    e[id].prev = -1;
    e[id].next = pool->lru_head;
    if (pool->lru_head >= 0)
        e[pool->lru_head].prev = id;
    else
        pool->lru_tail = id;
    pool->lru_head = id;
}

static void free_push(hy_pt_pool_t *pool, hy_pt_entry_t *e, int32_t id)
{
    e[id].flags = 0;
    e[id].refcount = 0;
    e[id].prev = -1;
    e[id].next = pool->free_head;
    pool->free_head = id;
}

static int32_t free_pop(hy_pt_pool_t *pool, hy_pt_entry_t *e)
{
    int32_t id = pool->free_head;

    if (id >= 0) {
        pool->free_head = e[id].next;
        e[id].next = e[id].prev = -1;
    }
    return id;
}

/* Takes a reference: a cached entry leaves the LRU and becomes used. */
static void entry_ref(hy_pt_t *pt, hy_pt_pool_t *pool, hy_pt_entry_t *e, int32_t id)
{
    if (e[id].refcount == 0) {
        lru_unlink(pool, e, id);
        cnt_add(&pool->n_cached, -1);
        cnt_add(&pool->n_used, 1);
    }
    e[id].flags &= ~HY_PT_F_STALE; /* in a window again */
    e[id].refcount++;
    e[id].last_use = ++pt->sh->tick;
}

/* ---- index -------------------------------------------------------------- */

static bool idx_empty(const hy_pt_index_t *s)
{
    return s->page[HY_KV_FULL] < 0 && s->page[HY_KV_SWA] < 0 && s->ckpt < 0;
}

static void idx_clear(hy_pt_index_t *s)
{
    s->hash = 0;
    s->page[HY_KV_FULL] = s->page[HY_KV_SWA] = s->ckpt = -1;
    s->pad = 0;
}

static int32_t idx_find(const hy_pt_t *pt, uint64_t hash)
{
    uint32_t mask = (uint32_t)pt->sh->params.index_capacity - 1;
    uint32_t i = (uint32_t)(hash ^ hash >> 32) & mask;

    for (;; i = (i + 1) & mask) {
        const hy_pt_index_t *s = &pt->index[i];
        if (idx_empty(s))
            return -1;
        if (s->hash == hash)
            return (int32_t)i;
    }
}

/* Never fails: capacity > pages + checkpoints (see hy_pt_layout). */
static int32_t idx_get(hy_pt_t *pt, uint64_t hash)
{
    uint32_t mask = (uint32_t)pt->sh->params.index_capacity - 1;
    uint32_t i = (uint32_t)(hash ^ hash >> 32) & mask;

    for (;; i = (i + 1) & mask) {
        hy_pt_index_t *s = &pt->index[i];
        if (idx_empty(s)) {
            s->hash = hash;
            cnt_add(&pt->sh->n_index_used, 1);
            return (int32_t)i;
        }
        if (s->hash == hash)
            return (int32_t)i;
    }
}

/* Removes slot i if it holds nothing, shifting later probes back so lookups
 * never need tombstones (Knuth's algorithm R). */
static void idx_drop_if_empty(hy_pt_t *pt, int32_t pos)
{
    uint32_t mask = (uint32_t)pt->sh->params.index_capacity - 1;
    uint32_t i = (uint32_t)pos, j = i, k;

    if (!idx_empty(&pt->index[i]))
        return;
    cnt_add(&pt->sh->n_index_used, -1);
    for (;;) {
        j = (j + 1) & mask;
        if (idx_empty(&pt->index[j]))
            break;
        k = (uint32_t)(pt->index[j].hash ^ pt->index[j].hash >> 32) & mask;
        /* move j to i unless its home k lies cyclically in (i, j] */
        if ((i <= j) ? (i < k && k <= j) : (i < k || k <= j))
            continue;
        pt->index[i] = pt->index[j];
        i = j;
    }
    idx_clear(&pt->index[i]);
}

/* ---- eviction ----------------------------------------------------------- */

static void ckpt_evict(hy_pt_t *pt, int32_t c)
{
    hy_pt_entry_t *e = pt->ckpts;
    int32_t pos = idx_find(pt, e[c].hash);

    if (pt->on_evict != NULL)
        pt->on_evict(pt->evict_ctx, HY_PT_EVICT_CKPT, c, e[c].hash, -1, NULL);
    lru_unlink(&pt->sh->ckpts, e, c);
    if (pos >= 0 && pt->index[pos].ckpt == c) {
        pt->index[pos].ckpt = -1;
        idx_drop_if_empty(pt, pos);
    }
    free_push(&pt->sh->ckpts, e, c);
    cnt_add(&pt->sh->ckpts.n_cached, -1);
    cnt_add(&pt->sh->ckpts.n_free, 1);
    atomic_fetch_add_explicit(&pt->sh->ckpts.evictions, 1, RLX);
}

/* Evicts one cached page of group g.  What ends at the same boundary and
 * is useless without it goes too, if nobody holds it: the checkpoint (a
 * hit there needs every group's page of that block), and for a full-group
 * page the sliding page (no hit can reach past a missing full block). */
static void page_evict(hy_pt_t *pt, int32_t g, int32_t p)
{
    hy_pt_pool_t *pool = pt_pool(pt, g);
    hy_pt_entry_t *e = pt_ents(pt, pool);
    uint64_t hash = e[p].hash;
    int32_t pos = idx_find(pt, hash), c, s;

    /* a sliding page that left every window is freed, not demoted: no hit
     * can use it (hy_pt_release_stale) */
    if (pt->on_evict != NULL && !(e[p].flags & HY_PT_F_STALE))
        pt->on_evict(pt->evict_ctx, g, p, hash, pt->depth[pool->base + p],
                     pt->tokens + (size_t)(pool->base + p) * (size_t)pt->sh->params.page_tokens);
    lru_unlink(pool, e, p);
    if (pos >= 0 && pt->index[pos].page[g] == p) {
        pt->index[pos].page[g] = -1;
        s = pt->index[pos].page[HY_KV_SWA];
        if (g == HY_KV_FULL && s >= 0 && pt_ents(pt, &pt->sh->swa)[s].refcount == 0) {
            page_evict(pt, HY_KV_SWA, s);
            pos = idx_find(pt, hash); /* that may have moved or dropped the slot */
        }
        if (pos >= 0) {
            c = pt->index[pos].ckpt;
            if (c >= 0 && pt->ckpts[c].refcount == 0 && !(pt->ckpts[c].flags & HY_PT_F_PENDING))
                ckpt_evict(pt, c); /* also drops pos if now empty */
            else
                idx_drop_if_empty(pt, pos);
        }
    }
    free_push(pool, e, p);
    cnt_add(&pool->n_cached, -1);
    cnt_add(&pool->n_free, 1);
    atomic_fetch_add_explicit(&pool->evictions, 1, RLX);
}

/* ---- pages -------------------------------------------------------------- */

int hy_pt_alloc_pages(hy_pt_t *pt, int32_t group, int32_t n, int32_t *out, char *err)
{
    hy_pt_pool_t *pool;
    hy_pt_entry_t *e;
    int32_t i;
    int rc;

    if (n < 0 || pt_pool(pt, group) == NULL)
        return hy_err(err, HY_EINVAL, "alloc_pages: group %d, n = %d", group, n);
    if ((rc = hy_pt_lock(pt)) != HY_OK)
        return hy_err(err, rc, "page table lock is not recoverable");
    pool = pt_pool(pt, group);
    e = pt_ents(pt, pool);
    if (atomic_load_explicit(&pool->n_free, RLX) + atomic_load_explicit(&pool->n_cached, RLX) <
        n) {
        rc = hy_err(err, HY_EFULL, "%s pages exhausted: need %d, %d free + %d cached",
                    group == HY_KV_SWA ? "sliding-window KV" : "KV", n,
                    atomic_load_explicit(&pool->n_free, RLX),
                    atomic_load_explicit(&pool->n_cached, RLX));
        goto out;
    }
    while (atomic_load_explicit(&pool->n_free, RLX) < n)
        page_evict(pt, group, pool->lru_head);
    for (i = 0; i < n; i++) {
        int32_t p = free_pop(pool, e);
        e[p].refcount = 1;
        e[p].flags = 0;
        e[p].last_use = ++pt->sh->tick;
        out[i] = p;
    }
    cnt_add(&pool->n_free, -n);
    cnt_add(&pool->n_used, n);
    rc = HY_OK;
out:
    hy_pt_unlock(pt);
    return rc;
}

/* hy_pt_release_seq / hy_pt_release_stale: stale puts cached pages at
 * the front of the LRU (and their last use at 0, so recovery keeps them
 * there). */
static int pt_release(hy_pt_t *pt, int32_t group, const int32_t *pages, int32_t n, bool stale,
                      char *err)
{
    hy_pt_pool_t *pool;
    hy_pt_entry_t *ents;
    int32_t i, bad = -1;
    int rc;

    if (pt_pool(pt, group) == NULL)
        return hy_err(err, HY_EINVAL, "release: no page group %d", group);
    if ((rc = hy_pt_lock(pt)) != HY_OK)
        return hy_err(err, rc, "page table lock is not recoverable");
    pool = pt_pool(pt, group);
    ents = pt_ents(pt, pool);
    for (i = n - 1; i >= 0; i--) {
        int32_t p = pages[i];
        hy_pt_entry_t *e = &ents[p >= 0 && p < pool->n_total ? p : 0];
        if (p < 0 || p >= pool->n_total || e->refcount <= 0) {
            bad = p;
            continue;
        }
        e->last_use = ++pt->sh->tick;
        if (--e->refcount > 0)
            continue;
        cnt_add(&pool->n_used, -1);
        if (e->flags & HY_PT_F_HASHED) {
            if (stale) {
                e->last_use = 0;
                e->flags |= HY_PT_F_STALE;
                lru_prepend(pool, ents, p);
            } else {
                lru_append(pool, ents, p);
            }
            cnt_add(&pool->n_cached, 1);
        } else {
            free_push(pool, ents, p);
            cnt_add(&pool->n_free, 1);
        }
    }
    rc = bad == -1 ? HY_OK
                   : hy_err(err, HY_EINVAL, "release_seq: page %d of group %d is not in use",
                            bad, group);
    hy_pt_unlock(pt);
    return rc;
}

int hy_pt_release_seq(hy_pt_t *pt, int32_t group, const int32_t *pages, int32_t n, char *err)
{
    return pt_release(pt, group, pages, n, false, err);
}

int hy_pt_release_stale(hy_pt_t *pt, int32_t group, const int32_t *pages, int32_t n, char *err)
{
    return pt_release(pt, group, pages, n, true, err);
}

int hy_pt_commit_block(hy_pt_t *pt, int32_t group, int32_t page, uint64_t hash, int32_t block,
                       const int32_t *tokens, char *err)
{
    hy_pt_pool_t *pool;
    hy_pt_entry_t *e;
    int32_t pos, pt_tok, gid;
    int rc;

    if (pt_pool(pt, group) == NULL)
        return hy_err(err, HY_EINVAL, "commit_block: no page group %d", group);
    if ((rc = hy_pt_lock(pt)) != HY_OK)
        return hy_err(err, rc, "page table lock is not recoverable");
    pt_tok = pt->sh->params.page_tokens;
    pool = pt_pool(pt, group);
    e = pt_ents(pt, pool);
    if (page < 0 || page >= pool->n_total || e[page].refcount <= 0 ||
        (e[page].flags & HY_PT_F_HASHED) || block < 0) {
        rc = hy_err(err, HY_EINVAL, "commit_block: page %d of group %d is not a private page "
                    "in use", page, group);
        goto out;
    }
    pos = idx_get(pt, hash);
    if (pt->index[pos].page[group] >= 0) {
        rc = 1; /* a twin computed the same block first; keep this one private */
        goto out;
    }
    gid = pool->base + page;
    pt->index[pos].page[group] = page;
    e[page].hash = hash;
    e[page].flags |= HY_PT_F_HASHED;
    pt->depth[gid] = block;
    memcpy(pt->tokens + (size_t)gid * (size_t)pt_tok, tokens, sizeof(int32_t) * (size_t)pt_tok);
    rc = HY_OK;
out:
    hy_pt_unlock(pt);
    return rc;
}

int hy_pt_match(hy_pt_t *pt, const int32_t *tokens, int32_t n, bool need_checkpoint,
                hy_pt_match_t *m, char *err)
{
    return hy_pt_match_ex(pt, tokens, n, need_checkpoint, m, NULL, err);
}

/* The page of group g at index slot pos if it holds block b with exactly
 * these tokens (the guard against two prefixes colliding in 64 bits), else -1. */
static int32_t match_page(const hy_pt_t *pt, int32_t pos, int32_t g, int32_t b,
                          const int32_t *blk)
{
    const hy_pt_pool_t *pool = g == HY_KV_SWA ? &pt->sh->swa : &pt->sh->pages;
    int32_t bt = pt->sh->params.page_tokens, p;
    size_t gid;

    if (pos < 0 || (p = pt->index[pos].page[g]) < 0)
        return -1;
    gid = (size_t)pool->base + (size_t)p;
    if (pt->depth[gid] != b ||
        memcmp(pt->tokens + gid * (size_t)bt, blk, sizeof(int32_t) * (size_t)bt) != 0)
        return -1;
    return p;
}

int hy_pt_match_ex(hy_pt_t *pt, const int32_t *tokens, int32_t n, bool need_checkpoint,
                   hy_pt_match_t *m, int32_t *n_page_blocks, char *err)
{
    int32_t bt, max_blocks, b, found, best = 0, best_ckpt = -1, window, run = 0, lo;
    uint64_t h = HY_PT_HASH_ROOT, best_hash = HY_PT_HASH_ROOT;
    int rc;

    m->n_blocks = m->n_tokens = m->swa_first = 0;
    if (n_page_blocks != NULL)
        *n_page_blocks = 0;
    m->ckpt = -1;
    m->hash = HY_PT_HASH_ROOT;
    if (n < 0 || m->cap < 0 || m->window < 0 || (m->cap > 0 && m->pages == NULL) ||
        (m->window > 0 && m->cap > 0 && m->swa_pages == NULL))
        return hy_err(err, HY_EINVAL, "match: bad arguments");
    if ((rc = hy_pt_lock(pt)) != HY_OK)
        return hy_err(err, rc, "page table lock is not recoverable");
    bt = pt->sh->params.page_tokens;
    /* without a sliding pool there is nothing of a window to find */
    window = pt->sh->swa.n_total > 0 ? m->window : 0;
    /* at least one token must remain to be computed: the sampler needs logits */
    max_blocks = n > 0 ? (n - 1) / bt : 0;
    if (max_blocks > m->cap)
        max_blocks = m->cap;
    for (b = 0; b < max_blocks; b++) {
        const int32_t *blk = tokens + (size_t)b * (size_t)bt;
        int32_t pos, p, c;

        h = hy_pt_block_hash(h, blk, bt);
        pos = idx_find(pt, h);
        if ((p = match_page(pt, pos, HY_KV_FULL, b, blk)) < 0)
            break;
        m->pages[b] = p;
        if (window > 0) {
            /* run: first block of the unbroken stretch of sliding pages
             * ending here; the hit at b + 1 needs it to reach back to the
             * first block the next token sees */
            m->swa_pages[b] = match_page(pt, pos, HY_KV_SWA, b, blk);
            if (m->swa_pages[b] < 0)
                run = b + 1;
            if (run > hy_kv_swa_first_block(window, bt, (b + 1) * bt))
                continue;
        }
        c = pt->index[pos].ckpt;
        if (!need_checkpoint) {
            best = b + 1;
            best_hash = h;
        } else if (c >= 0 && !(pt->ckpts[c].flags & HY_PT_F_PENDING)) {
            best = b + 1;
            best_hash = h;
            best_ckpt = c;
        }
    }
    found = b;
    for (b = 0; b < best; b++)
        entry_ref(pt, &pt->sh->pages, pt_ents(pt, &pt->sh->pages), m->pages[b]);
    lo = window > 0 ? hy_kv_swa_first_block(window, bt, best * bt) : best;
    /* refs on the window's pages; -1 wherever the caller holds none */
    for (b = 0; window > 0 && b < found; b++) {
        if (b < lo || b >= best)
            m->swa_pages[b] = -1;
        else
            entry_ref(pt, &pt->sh->swa, pt_ents(pt, &pt->sh->swa), m->swa_pages[b]);
    }
    if (best_ckpt >= 0)
        entry_ref(pt, &pt->sh->ckpts, pt->ckpts, best_ckpt);
    m->n_blocks = best;
    m->n_tokens = best * bt;
    m->swa_first = lo;
    if (n_page_blocks != NULL)
        *n_page_blocks = found;
    m->ckpt = best_ckpt;
    m->hash = best_hash;
    atomic_fetch_add_explicit(&pt->sh->queries, 1, RLX);
    atomic_fetch_add_explicit(&pt->sh->query_tokens, (uint64_t)n, RLX);
    if (best > 0) {
        atomic_fetch_add_explicit(&pt->sh->hits, 1, RLX);
        atomic_fetch_add_explicit(&pt->sh->hit_tokens, (uint64_t)m->n_tokens, RLX);
    }
    hy_pt_unlock(pt);
    return HY_OK;
}

int hy_pt_lookup(hy_pt_t *pt, const int32_t *tokens, int32_t n, bool ref, hy_pt_run_t *r,
                 char *err)
{
    int32_t bt, max_blocks, b;
    uint64_t h = HY_PT_HASH_ROOT, next;
    bool swa;
    int rc;

    r->n_blocks = 0;
    r->hash = HY_PT_HASH_ROOT;
    if (n < 0 || r->cap < 0 || (r->cap > 0 && r->pages == NULL))
        return hy_err(err, HY_EINVAL, "lookup: bad arguments");
    if ((rc = hy_pt_lock(pt)) != HY_OK)
        return hy_err(err, rc, "page table lock is not recoverable");
    bt = pt->sh->params.page_tokens;
    swa = r->swa != NULL && pt->sh->swa.n_total > 0;
    max_blocks = HY_MIN(n > 0 ? (n - 1) / bt : 0, r->cap);
    for (b = 0; b < max_blocks; b++) {
        const int32_t *blk = tokens + (size_t)b * (size_t)bt;
        int32_t pos, p, c;

        next = hy_pt_block_hash(h, blk, bt);
        pos = idx_find(pt, next);
        if ((p = match_page(pt, pos, HY_KV_FULL, b, blk)) < 0)
            break;
        h = next;
        r->pages[b] = p;
        if (r->hashes != NULL)
            r->hashes[b] = h;
        c = pt->index[pos].ckpt;
        if (r->ckpt != NULL)
            r->ckpt[b] = c >= 0 && !(pt->ckpts[c].flags & HY_PT_F_PENDING) ? c : -1;
        if (r->swa != NULL)
            r->swa[b] = swa ? match_page(pt, pos, HY_KV_SWA, b, blk) : -1;
        if (!ref)
            continue;
        entry_ref(pt, &pt->sh->pages, pt_ents(pt, &pt->sh->pages), p);
        if (swa && b >= r->swa_from && r->swa[b] >= 0)
            entry_ref(pt, &pt->sh->swa, pt_ents(pt, &pt->sh->swa), r->swa[b]);
    }
    r->n_blocks = b;
    r->hash = h;
    hy_pt_unlock(pt);
    return HY_OK;
}

void hy_pt_lookup_release(hy_pt_t *pt, const hy_pt_run_t *r)
{
    char err[HY_ERR_LEN];

    hy_pt_release_seq(pt, HY_KV_FULL, r->pages, r->n_blocks, err);
    for (int32_t b = HY_MAX(r->swa_from, 0); r->swa != NULL && b < r->n_blocks; b++)
        if (r->swa[b] >= 0)
            hy_pt_release_seq(pt, HY_KV_SWA, &r->swa[b], 1, err);
}

/* ---- checkpoints -------------------------------------------------------- */

int hy_pt_checkpoint_put(hy_pt_t *pt, uint64_t hash, int32_t *slot, bool *existed, char *err)
{
    hy_pt_pool_t *pool;
    int32_t pos, c;
    int rc;

    *slot = -1;
    *existed = false;
    if ((rc = hy_pt_lock(pt)) != HY_OK)
        return hy_err(err, rc, "page table lock is not recoverable");
    pool = &pt->sh->ckpts;
    pos = idx_find(pt, hash);
    if (pos >= 0 && (c = pt->index[pos].ckpt) >= 0) {
        entry_ref(pt, pool, pt->ckpts, c);
        *slot = c;
        *existed = true;
        rc = HY_OK;
        goto out;
    }
    if (atomic_load_explicit(&pool->n_free, RLX) == 0) {
        if (pool->lru_head < 0) {
            rc = hy_err(err, HY_EFULL, "all %d checkpoint slots are in use", pool->n_total);
            goto out;
        }
        ckpt_evict(pt, pool->lru_head);
    }
    c = free_pop(pool, pt->ckpts);
    pt->ckpts[c].refcount = 1;
    pt->ckpts[c].flags = HY_PT_F_HASHED | HY_PT_F_PENDING;
    pt->ckpts[c].hash = hash;
    pt->ckpts[c].last_use = ++pt->sh->tick;
    cnt_add(&pool->n_free, -1);
    cnt_add(&pool->n_used, 1);
    pos = idx_get(pt, hash); /* after the eviction, which may move slots */
    pt->index[pos].ckpt = c;
    *slot = c;
    rc = HY_OK;
out:
    hy_pt_unlock(pt);
    return rc;
}

static int ckpt_unref(hy_pt_t *pt, int32_t c, bool publish, char *err)
{
    hy_pt_pool_t *pool = &pt->sh->ckpts;
    hy_pt_entry_t *e;

    if (c < 0 || c >= pool->n_total || pt->ckpts[c].refcount <= 0)
        return hy_err(err, HY_EINVAL, "checkpoint slot %d is not in use", c);
    e = &pt->ckpts[c];
    if (publish) {
        if (!(e->flags & HY_PT_F_PENDING))
            return hy_err(err, HY_EINVAL, "checkpoint slot %d is already published", c);
        e->flags &= ~HY_PT_F_PENDING;
    }
    e->last_use = ++pt->sh->tick;
    if (--e->refcount > 0)
        return HY_OK;
    cnt_add(&pool->n_used, -1);
    if (e->flags & HY_PT_F_PENDING) {
        /* abandoned before it was written: never matchable, free it */
        int32_t pos = idx_find(pt, e->hash);
        if (pos >= 0 && pt->index[pos].ckpt == c) {
            pt->index[pos].ckpt = -1;
            idx_drop_if_empty(pt, pos);
        }
        free_push(pool, pt->ckpts, c);
        cnt_add(&pool->n_free, 1);
    } else {
        lru_append(pool, pt->ckpts, c);
        cnt_add(&pool->n_cached, 1);
    }
    return HY_OK;
}

int hy_pt_checkpoint_publish(hy_pt_t *pt, int32_t slot, char *err)
{
    int rc;

    if ((rc = hy_pt_lock(pt)) != HY_OK)
        return hy_err(err, rc, "page table lock is not recoverable");
    rc = ckpt_unref(pt, slot, true, err);
    hy_pt_unlock(pt);
    return rc;
}

int hy_pt_checkpoint_release(hy_pt_t *pt, int32_t slot, char *err)
{
    int rc;

    if ((rc = hy_pt_lock(pt)) != HY_OK)
        return hy_err(err, rc, "page table lock is not recoverable");
    rc = ckpt_unref(pt, slot, false, err);
    hy_pt_unlock(pt);
    return rc;
}

/* ---- state slots -------------------------------------------------------- */

int hy_pt_state_alloc(hy_pt_t *pt, int32_t *slot, char *err)
{
    int32_t s;
    int rc;

    *slot = -1;
    if ((rc = hy_pt_lock(pt)) != HY_OK)
        return hy_err(err, rc, "page table lock is not recoverable");
    s = pt->sh->state_free_head;
    if (s < 0) {
        rc = hy_err(err, HY_EFULL, "all %d state slots are in use", pt->sh->params.n_state_slots);
        goto out;
    }
    pt->sh->state_free_head = pt->states[s];
    pt->states[s] = HY_PT_STATE_USED;
    cnt_add(&pt->sh->n_state_used, 1);
    *slot = s;
    rc = HY_OK;
out:
    hy_pt_unlock(pt);
    return rc;
}

int hy_pt_state_free(hy_pt_t *pt, int32_t slot, char *err)
{
    int rc;

    if ((rc = hy_pt_lock(pt)) != HY_OK)
        return hy_err(err, rc, "page table lock is not recoverable");
    if (slot < 0 || slot >= pt->sh->params.n_state_slots || pt->states[slot] != HY_PT_STATE_USED) {
        rc = hy_err(err, HY_EINVAL, "state slot %d is not in use", slot);
        goto out;
    }
    pt->states[slot] = pt->sh->state_free_head;
    pt->sh->state_free_head = slot;
    cnt_add(&pt->sh->n_state_used, -1);
    rc = HY_OK;
out:
    hy_pt_unlock(pt);
    return rc;
}

/* ---- recovery and checks ------------------------------------------------ */

static int by_last_use(const void *a, const void *b, void *ctx)
{
    const hy_pt_entry_t *e = ctx;
    uint64_t x = e[*(const int32_t *)a].last_use, y = e[*(const int32_t *)b].last_use;
    return x < y ? -1 : x > y;
}

/* Rebuilds one pool's free list, LRU and counters; cached entries are put
 * back in last_use order (id order if there is no memory to sort). */
static void pool_rebuild(hy_pt_pool_t *pool, hy_pt_entry_t *e)
{
    int32_t i, n = pool->n_total, used = 0, nfree = 0, ncached = 0;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));

    pool->free_head = pool->lru_head = pool->lru_tail = -1;
    for (i = n - 1; i >= 0; i--) {
        if (e[i].refcount < 0)
            e[i].refcount = 0;
        if (e[i].refcount == 0 && (e[i].flags & HY_PT_F_PENDING))
            e[i].flags = 0; /* a pending checkpoint nobody holds was never written */
        if (e[i].refcount > 0 || !(e[i].flags & HY_PT_F_HASHED))
            e[i].flags &= ~HY_PT_F_STALE; /* only cached pages can be stale */
        e[i].prev = e[i].next = -1;
        if (e[i].refcount > 0) {
            used++;
        } else if (e[i].flags & HY_PT_F_HASHED) {
            if (ids)
                ids[ncached] = i;
            else
                lru_append(pool, e, i);
            ncached++;
        } else {
            free_push(pool, e, i);
            nfree++;
        }
    }
    if (ids) {
        qsort_r(ids, (size_t)ncached, sizeof *ids, by_last_use, e);
        for (i = 0; i < ncached; i++)
            lru_append(pool, e, ids[i]);
        free(ids);
    }
    atomic_store_explicit(&pool->n_used, used, RLX);
    atomic_store_explicit(&pool->n_free, nfree, RLX);
    atomic_store_explicit(&pool->n_cached, ncached, RLX);
}

void hy_pt_recover(hy_pt_t *pt)
{
    hy_pt_shared_t *sh = pt->sh;
    int32_t i, g, cap = sh->params.index_capacity, pos, used = 0;

    /* the index first: an entry whose hash lost to a twin goes unhashed */
    for (i = 0; i < cap; i++)
        idx_clear(&pt->index[i]);
    atomic_store_explicit(&sh->n_index_used, 0, RLX);
    for (g = 0; g < HY_KV_GROUPS; g++) {
        hy_pt_pool_t *pool = pt_pool(pt, g);
        hy_pt_entry_t *e = pt_ents(pt, pool);

        for (i = 0; i < pool->n_total; i++) {
            if (!(e[i].flags & HY_PT_F_HASHED))
                continue;
            pos = idx_get(pt, e[i].hash);
            if (pt->index[pos].page[g] >= 0)
                e[i].flags &= ~HY_PT_F_HASHED;
            else
                pt->index[pos].page[g] = i;
        }
    }
    for (i = 0; i < sh->ckpts.n_total; i++) {
        hy_pt_entry_t *c = &pt->ckpts[i];
        if (!(c->flags & HY_PT_F_HASHED) || (c->refcount <= 0 && (c->flags & HY_PT_F_PENDING)))
            continue;
        pos = idx_get(pt, c->hash);
        if (pt->index[pos].ckpt >= 0)
            c->flags &= ~HY_PT_F_HASHED;
        else
            pt->index[pos].ckpt = i;
    }
    pool_rebuild(&sh->pages, pt_ents(pt, &sh->pages));
    pool_rebuild(&sh->swa, pt_ents(pt, &sh->swa));
    pool_rebuild(&sh->ckpts, pt->ckpts);
    sh->state_free_head = -1;
    for (i = sh->params.n_state_slots - 1; i >= 0; i--) {
        if (pt->states[i] == HY_PT_STATE_USED) {
            used++;
        } else {
            pt->states[i] = sh->state_free_head;
            sh->state_free_head = i;
        }
    }
    atomic_store_explicit(&sh->n_state_used, used, RLX);
}

/* The owner of the memory behind every id (the engine's backend) is gone:
 * nothing any entry says is true any more, cached blocks included (their
 * KV died with it).  Every entry of every page group and every checkpoint
 * becomes free and unhashed and the derived structures are rebuilt from
 * that, under the lock, whose EOWNERDEAD (the engine died holding it)
 * hy_pt_lock has already recovered. */
int hy_pt_reset(hy_pt_t *pt)
{
    hy_pt_shared_t *sh = pt->sh;
    int32_t i, g;

    if (hy_pt_lock(pt) != HY_OK)
        return HY_EIO;
    for (g = 0; g < HY_KV_GROUPS; g++) {
        hy_pt_pool_t *pool = pt_pool(pt, g);
        hy_pt_entry_t *e = pt_ents(pt, pool);

        for (i = 0; i < pool->n_total; i++)
            e[i] = (hy_pt_entry_t){.prev = -1, .next = -1};
    }
    for (i = 0; i < sh->ckpts.n_total; i++)
        pt->ckpts[i] = (hy_pt_entry_t){.prev = -1, .next = -1};
    for (i = 0; i < sh->params.n_state_slots; i++)
        pt->states[i] = -1; /* anything but HY_PT_STATE_USED: free */
    hy_pt_recover(pt);
    hy_pt_unlock(pt);
    return HY_OK;
}

/* group: the page group of a page pool, -1 for the checkpoints. */
static int pool_check(const hy_pt_t *pt, const hy_pt_pool_t *pool, const hy_pt_entry_t *e,
                      int32_t group, const char *what, char *err)
{
    int32_t i, n = pool->n_total, used = 0, nfree = 0, ncached = 0, walk, prev;

    for (i = 0; i < n; i++) {
        int32_t pos;
        if (e[i].refcount < 0)
            return hy_err(err, HY_EFORMAT, "%s %d: refcount %d", what, i, e[i].refcount);
        if ((e[i].flags & HY_PT_F_STALE) &&
            (group != HY_KV_SWA || e[i].refcount > 0 || !(e[i].flags & HY_PT_F_HASHED)))
            return hy_err(err, HY_EFORMAT, "%s %d: stale but not a cached sliding page", what, i);
        if (e[i].refcount > 0)
            used++;
        else if (e[i].flags & HY_PT_F_HASHED)
            ncached++;
        else
            nfree++;
        if (!(e[i].flags & HY_PT_F_HASHED))
            continue;
        pos = idx_find(pt, e[i].hash);
        if (pos < 0 || (group >= 0 ? pt->index[pos].page[group] : pt->index[pos].ckpt) != i)
            return hy_err(err, HY_EFORMAT, "%s %d: hashed but not indexed", what, i);
    }
    if (used + nfree + ncached != n || used != atomic_load(&pool->n_used) ||
        nfree != atomic_load(&pool->n_free) || ncached != atomic_load(&pool->n_cached))
        return hy_err(err, HY_EFORMAT,
                      "%s accounting: entries say used %d free %d cached %d, counters say "
                      "%d %d %d, total %d",
                      what, used, nfree, ncached, atomic_load(&pool->n_used),
                      atomic_load(&pool->n_free), atomic_load(&pool->n_cached), n);
    for (walk = 0, i = pool->free_head; i >= 0 && walk <= n; i = e[i].next, walk++)
        if (e[i].refcount != 0 || (e[i].flags & HY_PT_F_HASHED))
            return hy_err(err, HY_EFORMAT, "%s %d on the free list is not free", what, i);
    if (walk != nfree)
        return hy_err(err, HY_EFORMAT, "%s free list has %d entries, %d free", what, walk, nfree);
    prev = -1;
    for (walk = 0, i = pool->lru_head; i >= 0 && walk <= n; prev = i, i = e[i].next, walk++)
        if (e[i].refcount != 0 || !(e[i].flags & HY_PT_F_HASHED) || e[i].prev != prev)
            return hy_err(err, HY_EFORMAT, "%s %d on the LRU list is not cached", what, i);
    if (walk != ncached || pool->lru_tail != prev)
        return hy_err(err, HY_EFORMAT, "%s LRU list has %d entries, %d cached", what, walk,
                      ncached);
    return HY_OK;
}

int hy_pt_check(hy_pt_t *pt, char *err)
{
    hy_pt_shared_t *sh;
    int32_t i, live = 0, used = 0, walk;
    int rc;

    if ((rc = hy_pt_lock(pt)) != HY_OK)
        return hy_err(err, rc, "page table lock is not recoverable");
    sh = pt->sh;
    if ((rc = pool_check(pt, &sh->pages, pt_ents(pt, &sh->pages), HY_KV_FULL, "page", err)) !=
            HY_OK ||
        (rc = pool_check(pt, &sh->swa, pt_ents(pt, &sh->swa), HY_KV_SWA, "sliding page", err)) !=
            HY_OK ||
        (rc = pool_check(pt, &sh->ckpts, pt->ckpts, -1, "checkpoint", err)) != HY_OK)
        goto out;
    for (i = 0; i < sh->params.index_capacity; i++) {
        const hy_pt_index_t *s = &pt->index[i];
        bool bad = false;
        int32_t g;

        if (idx_empty(s))
            continue;
        live++;
        for (g = 0; g < HY_KV_GROUPS; g++) {
            const hy_pt_pool_t *pool = pt_pool(pt, g);
            const hy_pt_entry_t *e = pt_ents(pt, pool);
            int32_t p = s->page[g];

            bad |= p >= 0 && (p >= pool->n_total || e[p].hash != s->hash ||
                              !(e[p].flags & HY_PT_F_HASHED));
        }
        if (bad || idx_find(pt, s->hash) != i ||
            (s->ckpt >= 0 && (s->ckpt >= sh->ckpts.n_total || pt->ckpts[s->ckpt].hash != s->hash ||
                              !(pt->ckpts[s->ckpt].flags & HY_PT_F_HASHED)))) {
            rc = hy_err(err, HY_EFORMAT, "index slot %d is inconsistent", i);
            goto out;
        }
    }
    if (live != atomic_load(&sh->n_index_used)) {
        rc = hy_err(err, HY_EFORMAT, "index has %d live slots, counter says %d", live,
                    atomic_load(&sh->n_index_used));
        goto out;
    }
    for (i = 0; i < sh->params.n_state_slots; i++)
        used += pt->states[i] == HY_PT_STATE_USED;
    for (walk = 0, i = sh->state_free_head; i >= 0 && walk <= sh->params.n_state_slots;
         i = pt->states[i], walk++)
        ;
    if (used != atomic_load(&sh->n_state_used) || used + walk != sh->params.n_state_slots) {
        rc = hy_err(err, HY_EFORMAT, "state slots: %d used (counter %d) + %d free != %d", used,
                    atomic_load(&sh->n_state_used), walk, sh->params.n_state_slots);
        goto out;
    }
    rc = HY_OK;
out:
    hy_pt_unlock(pt);
    return rc;
}

void hy_pt_counts(const hy_pt_t *pt, hy_pt_counts_t *c)
{
    hy_pt_shared_t *sh = pt->sh;

    c->pages_total = sh->pages.n_total;
    c->pages_used = atomic_load_explicit(&sh->pages.n_used, RLX);
    c->pages_free = atomic_load_explicit(&sh->pages.n_free, RLX);
    c->pages_cached = atomic_load_explicit(&sh->pages.n_cached, RLX);
    c->swa_total = sh->swa.n_total;
    c->swa_used = atomic_load_explicit(&sh->swa.n_used, RLX);
    c->swa_free = atomic_load_explicit(&sh->swa.n_free, RLX);
    c->swa_cached = atomic_load_explicit(&sh->swa.n_cached, RLX);
    c->ckpt_total = sh->ckpts.n_total;
    c->ckpt_used = atomic_load_explicit(&sh->ckpts.n_used, RLX);
    c->ckpt_free = atomic_load_explicit(&sh->ckpts.n_free, RLX);
    c->ckpt_cached = atomic_load_explicit(&sh->ckpts.n_cached, RLX);
    c->state_total = sh->params.n_state_slots;
    c->state_used = atomic_load_explicit(&sh->n_state_used, RLX);
    c->page_evictions = atomic_load_explicit(&sh->pages.evictions, RLX);
    c->ckpt_evictions = atomic_load_explicit(&sh->ckpts.evictions, RLX);
    c->swa_evictions = atomic_load_explicit(&sh->swa.evictions, RLX);
    c->queries = atomic_load_explicit(&sh->queries, RLX);
    c->query_tokens = atomic_load_explicit(&sh->query_tokens, RLX);
    c->hits = atomic_load_explicit(&sh->hits, RLX);
    c->hit_tokens = atomic_load_explicit(&sh->hit_tokens, RLX);
    c->recoveries = atomic_load_explicit(&sh->recoveries, RLX);
}
