/*
 * tiering.c - demotion through the page table's eviction hook and
 * promotion before a prefix match (tiering.h).  A promotion takes fresh
 * pages from the table (which may demote others: the store pins what is
 * being promoted, the table's references protect the prompt's own hot
 * run), writes the warm bytes into them, commits them under their chain
 * hashes and lets go: they are then cached hot pages like any other, and
 * the engine's match takes its references as usual.  For a hybrid model
 * pages are worth promoting only up to a boundary with a recurrent-state
 * checkpoint, which comes up with them.  With a sliding-window page group
 * (common/kvgroup.h) a hit at block boundary B also needs the sliding
 * pages of the window before B: each page moves as its own group's kind
 * (its layers, its size), the promotion brings up that window's sliding
 * pages with the full ones, and a boundary is a target only if they are
 * all in some tier.  Stale sliding pages (out of every window worth
 * keeping) never come here: the table frees them (HY_PT_F_STALE).
 */
#include "engine/tiering.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "kv/plan.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct hy_tiering {
    hy_pt_t *pt;
    hy_backend_t *be;
    hy_tier_t *store;
    hy_tier_stats_t *st;
    int32_t bt;            /* tokens per block */
    int32_t cap;           /* blocks a prompt may have */
    int32_t n_state_slots; /* checkpoint slot c is backend slot n_state_slots + c */
    bool hybrid;
    int32_t window;        /* the sliding page group's window (0: no such group) */
    uint64_t unit[HY_TIER_KINDS]; /* the store's bytes of each kind */
    /* scratch, [cap] each */
    int32_t *run_pages, *run_ckpt, *new_pages, *run_swa, *blocks;
    uint64_t *hashes;
    int8_t *where, *where_swa;
    hy_tier_pin_t *pins;
    bool copy_failed_logged;
    int32_t stall_ms; /* HY_TIERING_STALL_MS, or a test's */
};

static void tg_copy_failed(hy_tiering_t *tg, const char *what, const char *err)
{
    if (tg->copy_failed_logged)
        return;
    tg->copy_failed_logged = true;
    hy_log(LOG_ERR, "tier_copy_failed", "what=%s err=%s", what, err);
}

/* The store's kind for a page group. */
static int32_t tg_kind(int32_t group)
{
    return group == HY_KV_SWA ? HY_TIER_SWA : HY_TIER_PAGE;
}

/* The page table's on_evict: copy the entry into a warm slot of its kind. */
static void tg_on_evict(void *ctx, int32_t what, int32_t id, uint64_t hash, int32_t depth,
                        const int32_t *tokens)
{
    hy_tiering_t *tg = ctx;
    char err[HY_ERR_LEN];
    hy_tier_put_t p;
    bool ckpt = what == HY_PT_EVICT_CKPT;
    int rc;

    if (hy_tier_put_begin(tg->store, ckpt ? HY_TIER_CKPT : tg_kind(what), hash, depth, tokens,
                          &p) != HY_OK)
        return;
    rc = ckpt ? tg->be->i->state_read(tg->be, tg->n_state_slots + id, p.dst, err)
              : tg->be->i->kv_page_read(tg->be, what, id, p.dst, err);
    if (rc != HY_OK)
        tg_copy_failed(tg, ckpt ? "state_read" : "kv_page_read", err);
    hy_tier_put_end(tg->store, &p, rc == HY_OK);
}

int hy_tiering_create(hy_tiering_t **out, hy_pt_t *pt, hy_backend_t *be, hy_tier_t *store,
                      int32_t max_blocks, int32_t n_state_slots, bool hybrid, int32_t window,
                      const uint64_t page_bytes[HY_KV_GROUPS], char *err)
{
    const struct hy_backend_i *i = be->i;
    hy_tiering_t *tg;
    size_t cap;

    *out = NULL;
    if (i->kv_page_read == NULL || i->kv_page_write == NULL ||
        (hybrid && (i->state_read == NULL || i->state_write == NULL)))
        return hy_err(err, HY_EUNSUPPORTED, "the %s backend cannot copy KV pages to host memory",
                      i->name);
    /* a store sized for other pages would demote garbage and serve it */
    for (int32_t g = 0; g < HY_KV_GROUPS; g++) {
        uint64_t want = g == HY_KV_SWA && window <= 0 ? 0 : page_bytes[g];

        if (hy_tier_unit_bytes(store, tg_kind(g)) != want)
            return hy_err(err, HY_EINVAL, "tiers: the store's %s are %llu bytes, the engine's "
                          "%llu", g == HY_KV_SWA ? "sliding-window pages" : "KV pages",
                          (unsigned long long)hy_tier_unit_bytes(store, tg_kind(g)),
                          (unsigned long long)want);
    }
    if ((tg = calloc(1, sizeof *tg)) == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    tg->pt = pt;
    tg->be = be;
    tg->store = store;
    tg->st = hy_tier_stats(store);
    tg->bt = pt->sh->params.page_tokens;
    tg->cap = max_blocks + 1;
    tg->n_state_slots = n_state_slots;
    tg->stall_ms = HY_TIERING_STALL_MS;
    tg->hybrid = hybrid;
    tg->window = pt->sh->params.n_swa_pages > 0 ? window : 0;
    for (int32_t k = 0; k < HY_TIER_KINDS; k++)
        tg->unit[k] = hy_tier_unit_bytes(store, k);
    cap = (size_t)tg->cap;
    tg->run_pages = malloc(sizeof *tg->run_pages * cap);
    tg->run_ckpt = malloc(sizeof *tg->run_ckpt * cap);
    tg->new_pages = malloc(sizeof *tg->new_pages * cap);
    tg->hashes = malloc(sizeof *tg->hashes * cap);
    tg->where = malloc(sizeof *tg->where * cap);
    tg->pins = malloc(sizeof *tg->pins * cap);
    tg->run_swa = malloc(sizeof *tg->run_swa * cap);
    tg->blocks = malloc(sizeof *tg->blocks * cap);
    tg->where_swa = malloc(sizeof *tg->where_swa * cap);
    if (!tg->run_pages || !tg->run_ckpt || !tg->new_pages || !tg->hashes || !tg->where ||
        !tg->pins || !tg->run_swa || !tg->where_swa || !tg->blocks) {
        hy_tiering_free(tg);
        return hy_err(err, HY_ENOMEM, "out of memory");
    }
    pt->evict_ctx = tg;
    pt->on_evict = tg_on_evict;
    *out = tg;
    return HY_OK;
}

void hy_tiering_free(hy_tiering_t *tg)
{
    if (tg == NULL)
        return;
    if (tg->pt->evict_ctx == tg) {
        tg->pt->on_evict = NULL;
        tg->pt->evict_ctx = NULL;
    }
    free(tg->run_pages);
    free(tg->run_ckpt);
    free(tg->new_pages);
    free(tg->hashes);
    free(tg->where);
    free(tg->pins);
    free(tg->run_swa);
    free(tg->where_swa);
    free(tg->blocks);
    free(tg);
}

/* ---- promotion -------------------------------------------------------------- */

/* What a prompt's prefix has below the hot tier. */
typedef struct {
    int32_t hot;      /* leading blocks with hot full-group pages */
    int32_t target;   /* blocks the match should reach after promotion */
    int32_t swa_lo;   /* first block of the sliding window before target (= target: none) */
    int32_t swa_need; /* sliding pages of that window that are not hot */
    int ckpt_where;   /* hybrid: where the checkpoint at target is (-1: hot/none) */
} tg_plan_t;

#define TG_UNKNOWN (-2) /* where_swa: not looked up yet */

/* Where block b's sliding page is: HY_TIER_HOT, WARM, COLD or -1.  Blocks
 * of the hot run were looked up with it; the others are asked once. */
static int tg_swa_where(hy_tiering_t *tg, const int32_t *tokens, const tg_plan_t *pl, int32_t b)
{
    if (tg->where_swa[b] == TG_UNKNOWN) {
        if (b < pl->hot && tg->run_swa[b] >= 0)
            tg->where_swa[b] = HY_TIER_HOT;
        else
            tg->where_swa[b] = (int8_t)hy_tier_where(tg->store, HY_TIER_SWA, tg->hashes[b], b,
                                                     tokens + (size_t)b * (size_t)tg->bt);
    }
    return tg->where_swa[b];
}

/* Whether a hit of B blocks would find its boundary's needs in some tier:
 * the sliding pages of the window before B, and (hybrid) the checkpoint
 * at B; *ckpt_where says where that checkpoint is (-1: hot or none). */
static bool tg_boundary_ok(hy_tiering_t *tg, const int32_t *tokens, const tg_plan_t *pl,
                           int32_t B, int *ckpt_where)
{
    *ckpt_where = -1;
    for (int32_t j = hy_kv_swa_first_block(tg->window, tg->bt, B * tg->bt);
         tg->window > 0 && j < B; j++)
        if (tg_swa_where(tg, tokens, pl, j) < 0)
            return false;
    if (!tg->hybrid || (B <= pl->hot && tg->run_ckpt[B - 1] >= 0))
        return true;
    *ckpt_where = hy_tier_where(tg->store, HY_TIER_CKPT, tg->hashes[B - 1], -1, NULL);
    return *ckpt_where >= 0;
}

/* Follows the chain below the hot run and picks how far to promote: the
 * furthest boundary whose full pages, window of sliding pages and (for a
 * hybrid) checkpoint are all in some tier. */
static void tg_plan(hy_tiering_t *tg, const int32_t *tokens, int32_t n, tg_plan_t *pl)
{
    char err[HY_ERR_LEN];
    hy_pt_run_t run = {tg->run_pages, tg->run_ckpt, tg->hashes, tg->cap, 0, HY_PT_HASH_ROOT,
                       tg->run_swa, 0};
    int32_t max_blocks = HY_MIN(n > 0 ? (n - 1) / tg->bt : 0, tg->cap), b, end;
    uint64_t h;

    memset(pl, 0, sizeof *pl);
    pl->ckpt_where = -1;
    if (hy_pt_lookup(tg->pt, tokens, n, false, &run, err) != HY_OK)
        return;
    pl->hot = run.n_blocks;
    h = run.hash;
    for (b = pl->hot; b < max_blocks; b++) {
        const int32_t *blk = tokens + (size_t)b * (size_t)tg->bt;

        h = hy_pt_block_hash(h, blk, tg->bt);
        if ((tg->where[b] = (int8_t)hy_tier_where(tg->store, HY_TIER_PAGE, h, b, blk)) < 0)
            break;
        tg->hashes[b] = h;
    }
    end = b;
    for (b = 0; b < end; b++)
        tg->where_swa[b] = TG_UNKNOWN;
    for (b = end; b > 0; b--)
        if (tg_boundary_ok(tg, tokens, pl, b, &pl->ckpt_where))
            break;
    pl->target = b;
    pl->swa_lo = tg->window > 0 ? hy_kv_swa_first_block(tg->window, tg->bt, b * tg->bt) : b;
    for (b = pl->swa_lo; b < pl->target; b++)
        pl->swa_need += tg->where_swa[b] != HY_TIER_HOT;
}

/* What one round of reads asked for. */
typedef struct {
    int32_t in_flight; /* the prompt's reads on their way (queued now or before) or
                        * ended since this round's promotion (the next one takes them) */
    bool busy;         /* a slot frees when another I/O on its way ends */
    bool more;         /* cold entries left for a later round */
    bool no_budget;    /* a read was needed and the wait's budget is spent */
    bool gone;         /* an entry left the store since the plan (a failed read) */
} tg_fetch_t;

/* One entry's read, counted in f and against the wait's budget. */
static void tg_fetch_one(hy_tiering_t *tg, int32_t kind, uint64_t hash, hy_tiering_wait_t *w,
                         tg_fetch_t *f)
{
    int r = hy_tier_fetch(tg->store, kind, hash);

    w->reads_left -= r == HY_TIER_FETCH_QUEUED;
    f->in_flight += r == HY_TIER_FETCH_QUEUED || r == HY_TIER_FETCH_READING ||
                    r == HY_TIER_FETCH_WARM;
    f->busy |= r == HY_TIER_FETCH_BUSY;
    /* no slot free now, or dropped by a failed read: a later round */
    f->more |= r == HY_TIER_FETCH_NO_SLOT || r == HY_TIER_FETCH_BUSY || r < 0;
    f->gone |= r < 0;
}

/* Asks the store to read kind's cold entries among blocks [lo, hi) (where
 * says which), earliest first.  What the prompt holds in warm slots -
 * entries read for it and waiting for the blocks before them, and reads
 * on their way - stays within `cap` slots: a read must not push out of
 * warm what the prompt read before and has not promoted yet.  (Counting
 * only the reads, as this once did, let a prefix longer than the warm
 * tier evict its own front block each time that came back: the prompt
 * waited forever while the disk was read in a circle.)  Each read queued
 * spends one of w->reads_left. */
static void tg_fetch_kind(hy_tiering_t *tg, int32_t kind, const int8_t *where, int32_t lo,
                          int32_t hi, int32_t cap, hy_tiering_wait_t *w, tg_fetch_t *f)
{
    int32_t held = 0;
    bool stop = false;

    for (int32_t b = lo; b < hi && !stop; b++) {
        if (where[b] != HY_TIER_WARM && where[b] != HY_TIER_COLD)
            continue; /* hot */
        if (held == cap || (where[b] == HY_TIER_COLD && w->reads_left <= 0)) {
            f->more = true;
            f->no_budget |= held < cap;
            break;
        }
        held++;
        if (where[b] == HY_TIER_WARM)
            continue;
        tg_fetch_one(tg, kind, tg->hashes[b], w, f);
        stop = f->more;
    }
}

/* The reads for what tg_promote left below hot: the full pages from
 * `front`, the window's sliding pages and the checkpoint.  Full pages come
 * up from the front as they arrive, so they may hold half the warm slots;
 * the window's sliding pages and the checkpoint come up all at once, so
 * they may hold them all. */
static void tg_fetch(hy_tiering_t *tg, const tg_plan_t *pl, int32_t front, bool swa_done,
                     bool ckpt_done, hy_tiering_wait_t *w, tg_fetch_t *f)
{
    memset(f, 0, sizeof *f);
    tg_fetch_kind(tg, HY_TIER_PAGE, tg->where, front, pl->target,
                  HY_MAX(hy_tier_slots(tg->store, HY_TIER_PAGE) / 2, 1), w, f);
    if (!swa_done)
        tg_fetch_kind(tg, HY_TIER_SWA, tg->where_swa, pl->swa_lo, pl->target,
                      hy_tier_slots(tg->store, HY_TIER_SWA), w, f);
    if (!ckpt_done && pl->ckpt_where == HY_TIER_COLD) {
        if (w->reads_left > 0)
            tg_fetch_one(tg, HY_TIER_CKPT, tg->hashes[pl->target - 1], w, f);
        else
            f->more = f->no_budget = true;
    }
}

/* The plan's entries below the hot tier (warm or cold): the wait's read
 * budget is twice as many (a warm one pushed out to disk is read once). */
static int32_t tg_below_hot(const hy_tiering_t *tg, const tg_plan_t *pl)
{
    int32_t n = pl->ckpt_where >= 0;

    for (int32_t b = pl->hot; b < pl->target; b++)
        n += tg->where[b] >= HY_TIER_WARM;
    for (int32_t b = pl->swa_lo; pl->swa_need > 0 && b < pl->target; b++)
        n += tg->where_swa[b] >= HY_TIER_WARM;
    return n;
}

/* The recurrent state at the end of the promoted run, into a checkpoint
 * slot of the table; true when it is there. */
static bool tg_promote_ckpt(hy_tiering_t *tg, uint64_t hash)
{
    char err[HY_ERR_LEN];
    hy_tier_pin_t p;
    bool existed, ok;
    int32_t slot;

    if (hy_tier_pin(tg->store, HY_TIER_CKPT, hash, &p) != HY_OK)
        return false;
    if (hy_pt_checkpoint_put(tg->pt, hash, &slot, &existed, err) != HY_OK) {
        hy_tier_unpin(tg->store, &p, false);
        return false;
    }
    ok = existed || tg->be->i->state_write(tg->be, tg->n_state_slots + slot, p.src, err) == HY_OK;
    if (!ok)
        tg_copy_failed(tg, "state_write", err);
    if (!existed && ok)
        hy_pt_checkpoint_publish(tg->pt, slot, err);
    else
        hy_pt_checkpoint_release(tg->pt, slot, err);
    if (ok && !existed)
        atomic_fetch_add_explicit(&tg->st->hits[p.from_cold ? HY_TIER_COLD : HY_TIER_WARM], 1,
                                  memory_order_relaxed);
    hy_tier_unpin(tg->store, &p, ok && !existed);
    return ok;
}

/* Copies the n pinned warm pages of group into fresh pages of the table
 * and commits them as blocks blocks[0..n); pages that fail stay private
 * (freed, never matched).  Counts hits for full-group pages (a block is
 * counted once, by its full page).  Returns how many were committed,
 * in order: the first failure ends the run. */
static int32_t tg_commit_pages(hy_tiering_t *tg, int32_t group, const int32_t *tokens,
                               const int32_t *blocks, hy_tier_pin_t *pins, int32_t n)
{
    char err[HY_ERR_LEN];
    int32_t done = 0;

    if (n > 0 && hy_pt_alloc_pages(tg->pt, group, n, tg->new_pages, err) != HY_OK) {
        /* the hot pool cannot take them now: the blocks are recomputed */
        for (int32_t j = 0; j < n; j++)
            hy_tier_unpin(tg->store, &pins[j], false);
        return 0;
    }
    for (int32_t j = 0; j < n; j++) {
        int32_t b = blocks[j];
        bool ok = done == j && tg->be->i->kv_page_write(tg->be, group, tg->new_pages[j],
                                                        pins[j].src, err) == HY_OK;

        if (!ok && done == j)
            tg_copy_failed(tg, "kv_page_write", err);
        if (ok && hy_pt_commit_block(tg->pt, group, tg->new_pages[j], tg->hashes[b], b,
                                     tokens + (size_t)b * (size_t)tg->bt, err) == HY_OK) {
            done++;
            if (group == HY_KV_FULL)
                atomic_fetch_add_explicit(
                    &tg->st->hits[pins[j].from_cold ? HY_TIER_COLD : HY_TIER_WARM], 1,
                    memory_order_relaxed);
        }
        hy_tier_unpin(tg->store, &pins[j], ok && done == j + 1);
    }
    if (n > 0)
        hy_pt_release_seq(tg->pt, group, tg->new_pages, n, err);
    return done;
}

/* Promotes the warm full pages from pl->hot on, as far as they are warm,
 * then the window's sliding pages that are not hot (when every full page
 * up to target is), then the checkpoint at pl->target; returns the full
 * pages done, *swa_ok and *ckpt_ok whether the window and the checkpoint
 * are there (or not needed). */
static int32_t tg_promote(hy_tiering_t *tg, const int32_t *tokens, int32_t n, const tg_plan_t *pl,
                          bool *swa_ok, bool *ckpt_ok)
{
    char err[HY_ERR_LEN];
    /* the prompt's own hot run, and the hot sliding pages of the target's
     * window, must survive the allocations below */
    hy_pt_run_t run = {tg->run_pages, NULL, NULL, tg->cap, 0, HY_PT_HASH_ROOT, tg->run_swa,
                       pl->swa_lo};
    int32_t w = 0, done, ns = 0;
    bool swa_done;

    *swa_ok = *ckpt_ok = false;
    if (hy_pt_lookup(tg->pt, tokens, n, true, &run, err) != HY_OK)
        return 0;
    while (pl->hot + w < pl->target &&
           hy_tier_pin(tg->store, HY_TIER_PAGE, tg->hashes[pl->hot + w], &tg->pins[w]) == HY_OK) {
        tg->blocks[w] = pl->hot + w;
        w++;
    }
    done = tg_commit_pages(tg, HY_KV_FULL, tokens, tg->blocks, tg->pins, w);
    swa_done = pl->swa_need == 0;
    if (!swa_done && pl->hot + done >= pl->target) {
        swa_done = true;
        for (int32_t b = pl->swa_lo; b < pl->target && swa_done; b++) {
            if (b < run.n_blocks && tg->run_swa[b] >= 0)
                continue; /* hot (and referenced by the lookup) */
            swa_done = hy_tier_pin(tg->store, HY_TIER_SWA, tg->hashes[b], &tg->pins[ns]) == HY_OK;
            if (swa_done)
                tg->blocks[ns++] = b;
        }
        if (!swa_done) {
            /* not all warm (yet): none of the window comes up this round */
            for (int32_t j = 0; j < ns; j++)
                hy_tier_unpin(tg->store, &tg->pins[j], false);
        } else {
            swa_done = tg_commit_pages(tg, HY_KV_SWA, tokens, tg->blocks, tg->pins, ns) == ns;
        }
    }
    *swa_ok = swa_done;
    *ckpt_ok = pl->ckpt_where < 0 || (swa_done && pl->hot + done >= pl->target &&
                                      tg_promote_ckpt(tg, tg->hashes[pl->target - 1]));
    hy_pt_lookup_release(tg->pt, &run);
    return done;
}

static int64_t tg_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The wait ends without all of the prefix: counted, logged, and the
 * match takes what is hot. */
static void tg_give_up(hy_tiering_t *tg, const tg_plan_t *pl, int32_t front, int reason,
                       const hy_tiering_wait_t *w)
{
    atomic_fetch_add_explicit(&tg->st->fetch_giveups[reason], 1, memory_order_relaxed);
    hy_log(LOG_WARNING, "tier_fetch_given_up",
           "reason=%s hot_blocks=%d target_blocks=%d recomputed_blocks=%d reads_left=%d "
           "front_still_ms=%lld", hy_tier_giveup_name[reason], front, pl->target,
           pl->target - front, w->reads_left, (long long)((tg_now_us() - w->moved_us) / 1000));
}

void hy_tiering_set_stall_ms(hy_tiering_t *tg, int32_t ms)
{
    tg->stall_ms = ms;
}

int hy_tiering_prepare(hy_tiering_t *tg, const int32_t *tokens, int32_t n, hy_tiering_wait_t *w)
{
    tg_plan_t pl;
    tg_fetch_t f;
    bool swa_ok, ckpt_ok;
    int32_t done, need, front;
    int64_t t0 = tg_now_us();
    int rc = 0, reason = -1;

    tg_plan(tg, tokens, n, &pl);
    need = HY_MAX(pl.target - pl.hot, 0);
    if (need == 0 && pl.ckpt_where < 0 && pl.swa_need == 0)
        goto out;
    if (!w->started) {
        w->started = true;
        w->reads_left = 2 * tg_below_hot(tg, &pl);
        w->front = pl.hot;
        w->moved_us = t0;
    }
    /* What is warm from the front goes up first, every round: it leaves
     * its warm slot for the reads after it and can no longer be pushed
     * out by them. */
    done = tg_promote(tg, tokens, n, &pl, &swa_ok, &ckpt_ok);
    front = pl.hot + done;
    hy_log(LOG_DEBUG, "tier_promoted",
           "hot_blocks=%d pages=%d of=%d swa_pages=%d window_done=%d checkpoint=%d us=%lld",
           pl.hot, done, need, pl.swa_need, swa_ok, ckpt_ok && pl.ckpt_where >= 0,
           (long long)(tg_now_us() - t0));
    if (front > w->front) {
        w->front = front;
        w->moved_us = t0;
    }
    if (done >= need && swa_ok && ckpt_ok)
        goto out;
    tg_fetch(tg, &pl, front, swa_ok, ckpt_ok, w, &f);
    if (f.no_budget)
        reason = HY_TIER_GIVEUP_REREADS;
    else if (f.in_flight == 0 && !f.busy && done == 0 && !f.gone)
        reason = HY_TIER_GIVEUP_NO_ROOM; /* nothing moves: the hot pool or warm slots are full */
    else if ((t0 - w->moved_us) / 1000 >= tg->stall_ms)
        reason = HY_TIER_GIVEUP_STALLED; /* whatever it waits for, the front stood still */
    else
        rc = 1; /* reads or a slot on their way, the front moved, or the chain got shorter */
    if (reason >= 0)
        tg_give_up(tg, &pl, front, reason, w);
out:
    if (rc == 0) {
        atomic_fetch_add_explicit(&tg->st->hits[HY_TIER_HOT], (uint64_t)HY_MIN(pl.hot, pl.target),
                                  memory_order_relaxed);
        memset(w, 0, sizeof *w);
    }
    return rc;
}

/* ---- shutdown --------------------------------------------------------------- */

int64_t hy_tiering_persist_hot(hy_tiering_t *tg)
{
    hy_pt_t *pt = tg->pt;
    const hy_pt_params_t *pp = &pt->sh->params;
    uint64_t unit = 0;
    char err[HY_ERR_LEN];
    void *buf;
    int64_t n = 0, t0 = tg_now_us();
    int32_t n_group[HY_KV_GROUPS] = {pp->n_pages, tg->window > 0 ? pp->n_swa_pages : 0};

    for (int32_t k = 0; k < HY_TIER_KINDS; k++)
        unit = HY_MAX(unit, tg->unit[k]);
    if (unit == 0 || (buf = malloc((size_t)unit)) == NULL)
        return 0;
    for (int32_t g = 0; g < HY_KV_GROUPS; g++) {
        int32_t base = g == HY_KV_SWA ? pp->n_pages : 0;

        for (int32_t p = 0; p < n_group[g]; p++) {
            const hy_pt_entry_t *e = &pt->pages[base + p];

            /* a stale sliding page is in no window a hit can use */
            if (!(e->flags & HY_PT_F_HASHED) || (e->flags & HY_PT_F_STALE) ||
                tg->be->i->kv_page_read(tg->be, g, p, buf, err) != HY_OK)
                continue;
            n += hy_tier_persist(tg->store, tg_kind(g), e->hash, pt->depth[base + p],
                                 pt->tokens + (size_t)(base + p) * (size_t)pp->page_tokens,
                                 buf) == HY_OK;
        }
    }
    for (int32_t c = 0; tg->hybrid && c < pp->n_checkpoint_slots; c++) {
        const hy_pt_entry_t *e = &pt->ckpts[c];

        if (!(e->flags & HY_PT_F_HASHED) || (e->flags & HY_PT_F_PENDING) ||
            tg->be->i->state_read(tg->be, tg->n_state_slots + c, buf, err) != HY_OK)
            continue;
        n += hy_tier_persist(tg->store, HY_TIER_CKPT, e->hash, -1, NULL, buf) == HY_OK;
    }
    free(buf);
    hy_log(LOG_INFO, "tier_persisted", "entries=%lld ms=%lld", (long long)n,
           (long long)((tg_now_us() - t0) / 1000));
    return n;
}

/* ---- the store's geometry ------------------------------------------------------ */

void hy_tiering_store_opts(const hy_model_t *m, const hy_plan_t *plan, int32_t n_pages,
                           int32_t n_swa_pages, hy_tier_opts_t *to)
{
    uint8_t layer_swa[HY_MODEL_MAX_LAYERS]; /* n_kv_layers <= the model limit */
    hy_kv_layout_t kv;
    bool swa = plan->swa_window > 0;
    /* full pages of 0 bytes (every attention layer slides) still cost
     * the store an entry each: the warm split counts that */
    long double full = (long double)(plan->page_bytes > 0
                                         ? plan->page_bytes
                                         : hy_tier_entry_bytes((uint32_t)plan->page_tokens)) *
                       (long double)n_pages;
    long double slide = swa ? (long double)plan->swa_page_bytes * (long double)n_swa_pages : 0;

    hy_plan_kv_layout(m, plan->page_tokens, n_pages, n_swa_pages, plan->swa_window,
                      plan->kv_type, layer_swa, &kv);
    to->unit_bytes[HY_TIER_PAGE] = plan->page_bytes;
    to->unit_bytes[HY_TIER_CKPT] = plan->slot_bytes;
    to->unit_bytes[HY_TIER_SWA] = swa ? plan->swa_page_bytes : 0;
    to->swa_share = swa && full + slide > 0 ? (double)(slide / (full + slide)) : 0;
    to->ident.kv_type = (uint32_t)plan->kv_type;
    to->ident.n_kv_layers = (uint32_t)kv.n_layers;
    to->ident.n_head_kv = (uint32_t)kv.n_head_kv;
    to->ident.head_dim_k = (uint32_t)kv.head_dim_k;
    to->ident.head_dim_v = (uint32_t)kv.head_dim_v;
    to->ident.n_rec_layers = (uint32_t)m->n_rec_layers;
    to->ident.page_tokens = (uint32_t)plan->page_tokens;
    to->ident.page_bytes = plan->page_bytes;
    to->ident.slot_bytes = plan->slot_bytes;
    to->ident.n_swa_layers = swa ? (uint32_t)plan->n_swa_kv_layers : 0;
    to->ident.swa_window = swa ? (uint32_t)plan->swa_window : 0;
    to->ident.swa_page_bytes = to->unit_bytes[HY_TIER_SWA];
    to->ident.swa_map_crc = swa ? hy_crc32c(0, layer_swa, (size_t)kv.n_layers) : 0;
}
