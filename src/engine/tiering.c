/*
 * tiering.c - demotion through the page table's eviction hook and
 * promotion before a prefix match (tiering.h).  A promotion takes fresh
 * pages from the table (which may demote others: the store pins what is
 * being promoted, the table's references protect the prompt's own hot
 * run), writes the warm bytes into them, commits them under their chain
 * hashes and lets go: they are then cached hot pages like any other, and
 * the engine's match takes its references as usual.  For a hybrid model
 * pages are worth promoting only up to a boundary with a recurrent-state
 * checkpoint, which comes up with them.
 */
#include "engine/tiering.h"
#include "common/log.h"

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
    uint64_t page_bytes, slot_bytes;
    /* scratch, [cap] each */
    int32_t *run_pages, *run_ckpt, *new_pages;
    uint64_t *hashes;
    int8_t *where;
    hy_tier_pin_t *pins;
    bool copy_failed_logged;
};

static void tg_copy_failed(hy_tiering_t *tg, const char *what, const char *err)
{
    if (tg->copy_failed_logged)
        return;
    tg->copy_failed_logged = true;
    hy_log(LOG_ERR, "tier_copy_failed", "what=%s err=%s", what, err);
}

/* The page table's on_evict: copy the entry into a warm slot. */
static void tg_on_evict(void *ctx, bool ckpt, int32_t id, uint64_t hash, int32_t depth,
                        const int32_t *tokens)
{
    hy_tiering_t *tg = ctx;
    char err[HY_ERR_LEN];
    hy_tier_put_t p;
    int rc;

    if (hy_tier_put_begin(tg->store, ckpt ? HY_TIER_CKPT : HY_TIER_PAGE, hash, depth, tokens,
                          &p) != HY_OK)
        return;
    rc = ckpt ? tg->be->i->state_read(tg->be, tg->n_state_slots + id, p.dst, err)
              : tg->be->i->kv_page_read(tg->be, id, p.dst, err);
    if (rc != HY_OK)
        tg_copy_failed(tg, ckpt ? "state_read" : "kv_page_read", err);
    hy_tier_put_end(tg->store, &p, rc == HY_OK);
}

int hy_tiering_create(hy_tiering_t **out, hy_pt_t *pt, hy_backend_t *be, hy_tier_t *store,
                      int32_t max_blocks, int32_t n_state_slots, bool hybrid, char *err)
{
    const struct hy_backend_i *i = be->i;
    hy_tiering_t *tg;
    size_t cap;

    *out = NULL;
    if (i->kv_page_read == NULL || i->kv_page_write == NULL ||
        (hybrid && (i->state_read == NULL || i->state_write == NULL)))
        return hy_err(err, HY_EUNSUPPORTED, "the %s backend cannot copy KV pages to host memory",
                      i->name);
    if ((tg = calloc(1, sizeof *tg)) == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    tg->pt = pt;
    tg->be = be;
    tg->store = store;
    tg->st = hy_tier_stats(store);
    tg->bt = pt->sh->params.page_tokens;
    tg->cap = max_blocks + 1;
    tg->n_state_slots = n_state_slots;
    tg->hybrid = hybrid;
    cap = (size_t)tg->cap;
    tg->run_pages = malloc(sizeof *tg->run_pages * cap);
    tg->run_ckpt = malloc(sizeof *tg->run_ckpt * cap);
    tg->new_pages = malloc(sizeof *tg->new_pages * cap);
    tg->hashes = malloc(sizeof *tg->hashes * cap);
    tg->where = malloc(sizeof *tg->where * cap);
    tg->pins = malloc(sizeof *tg->pins * cap);
    if (!tg->run_pages || !tg->run_ckpt || !tg->new_pages || !tg->hashes || !tg->where ||
        !tg->pins) {
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
    free(tg);
}

/* ---- promotion -------------------------------------------------------------- */

/* What a prompt's prefix has below the hot tier. */
typedef struct {
    int32_t hot;      /* leading blocks with hot pages */
    int32_t target;   /* blocks the match should reach after promotion */
    int ckpt_where;   /* hybrid: where the checkpoint at target is (-1: hot/none) */
} tg_plan_t;

/* Follows the chain below the hot run and picks how far to promote. */
static void tg_plan(hy_tiering_t *tg, const int32_t *tokens, int32_t n, tg_plan_t *pl)
{
    char err[HY_ERR_LEN];
    hy_pt_run_t run = {tg->run_pages, tg->run_ckpt, tg->hashes, tg->cap, 0, HY_PT_HASH_ROOT};
    int32_t max_blocks = HY_MIN(n > 0 ? (n - 1) / tg->bt : 0, tg->cap), b, end;
    uint64_t h;

    pl->hot = pl->target = 0;
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
    if (!tg->hybrid) {
        pl->target = end;
        return;
    }
    /* the furthest boundary with a checkpoint, hot or below */
    for (b = end; b > 0; b--) {
        if (b <= pl->hot && tg->run_ckpt[b - 1] >= 0) {
            pl->target = b;
            return;
        }
        if ((pl->ckpt_where = hy_tier_where(tg->store, HY_TIER_CKPT, tg->hashes[b - 1], -1,
                                            NULL)) >= 0) {
            pl->target = b;
            return;
        }
    }
    pl->ckpt_where = -1;
}

/* Asks the store to read what is cold, earliest first, at most half the
 * warm slots at a time: what was read must not be pushed out of warm by
 * what is read after it before it is promoted.  *in_flight: reads on
 * their way; *more: cold entries left for a later round. */
static void tg_fetch(hy_tiering_t *tg, const tg_plan_t *pl, int32_t *in_flight, bool *more)
{
    int32_t window = HY_MAX(hy_tier_slots(tg->store, HY_TIER_PAGE) / 2, 1), asked = 0;
    int r;

    *in_flight = 0;
    *more = false;
    for (int32_t b = pl->hot; b < pl->target && !*more; b++) {
        if (tg->where[b] != HY_TIER_COLD)
            continue;
        if (asked == window) {
            *more = true;
            break;
        }
        r = hy_tier_fetch(tg->store, HY_TIER_PAGE, tg->hashes[b]);
        asked += r != 0;
        *in_flight += r == 1;
        /* no slot free now (2), or dropped by a failed read (< 0): later */
        *more |= r == 2 || r < 0;
    }
    if (pl->ckpt_where == HY_TIER_COLD) {
        r = hy_tier_fetch(tg->store, HY_TIER_CKPT, tg->hashes[pl->target - 1]);
        *in_flight += r == 1;
        *more |= r == 2 || r < 0;
    }
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

/* Promotes the warm pages from pl->hot on, as far as they are warm (and
 * the checkpoint at pl->target when all are); returns the pages done. */
static int32_t tg_promote(hy_tiering_t *tg, const int32_t *tokens, int32_t n, const tg_plan_t *pl,
                          bool *ckpt_done)
{
    char err[HY_ERR_LEN];
    hy_pt_run_t run = {tg->run_pages, NULL, NULL, tg->cap, 0, HY_PT_HASH_ROOT};
    int32_t w = 0, j, done = 0;

    *ckpt_done = pl->ckpt_where < 0;
    /* the prompt's own hot run must survive the allocation below */
    if (hy_pt_lookup(tg->pt, tokens, n, true, &run, err) != HY_OK)
        return 0;
    while (pl->hot + w < pl->target &&
           hy_tier_pin(tg->store, HY_TIER_PAGE, tg->hashes[pl->hot + w], &tg->pins[w]) == HY_OK)
        w++;
    if (w > 0 && hy_pt_alloc_pages(tg->pt, w, tg->new_pages, err) != HY_OK) {
        /* the hot pool cannot take them now: the blocks are recomputed */
        for (j = 0; j < w; j++)
            hy_tier_unpin(tg->store, &tg->pins[j], false);
        w = 0;
    }
    for (j = 0; j < w; j++) {
        int32_t b = pl->hot + j;
        bool ok = done == j &&
                  tg->be->i->kv_page_write(tg->be, tg->new_pages[j], tg->pins[j].src, err) == HY_OK;

        if (!ok && done == j)
            tg_copy_failed(tg, "kv_page_write", err);
        /* a private page if anything failed: freed, never matched */
        if (ok && hy_pt_commit_block(tg->pt, tg->new_pages[j], tg->hashes[b], b,
                                     tokens + (size_t)b * (size_t)tg->bt, err) == HY_OK) {
            done++;
            atomic_fetch_add_explicit(&tg->st->hits[tg->pins[j].from_cold ? HY_TIER_COLD
                                                                          : HY_TIER_WARM],
                                      1, memory_order_relaxed);
        }
        hy_tier_unpin(tg->store, &tg->pins[j], ok && done == j + 1);
    }
    if (w > 0)
        hy_pt_release_seq(tg->pt, tg->new_pages, w, err);
    if (!*ckpt_done && pl->hot + done >= pl->target)
        *ckpt_done = tg_promote_ckpt(tg, tg->hashes[pl->target - 1]);
    hy_pt_release_seq(tg->pt, tg->run_pages, run.n_blocks, err);
    return done;
}

static int64_t tg_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int hy_tiering_prepare(hy_tiering_t *tg, const int32_t *tokens, int32_t n)
{
    tg_plan_t pl;
    bool more, ckpt_done;
    int32_t done, need, in_flight;
    int64_t t0 = tg_now_us();

    tg_plan(tg, tokens, n, &pl);
    need = HY_MAX(pl.target - pl.hot, 0);
    if (pl.target <= pl.hot && pl.ckpt_where < 0) {
        atomic_fetch_add_explicit(&tg->st->hits[HY_TIER_HOT], (uint64_t)HY_MIN(pl.hot, pl.target),
                                  memory_order_relaxed);
        return 0;
    }
    /* Everything up to warm first, then one promotion: the hot pool is
     * not churned while the disk reads.  When it takes more than one round
     * of reads (a warm tier smaller than the prefix), each round promotes
     * what is warm from the front. */
    tg_fetch(tg, &pl, &in_flight, &more);
    if (in_flight > 0 && !more)
        return 1;
    done = tg_promote(tg, tokens, n, &pl, &ckpt_done);
    hy_log(LOG_DEBUG, "tier_promoted", "hot_blocks=%d pages=%d of=%d checkpoint=%d us=%lld", pl.hot,
           done, need, ckpt_done && pl.ckpt_where >= 0, (long long)(tg_now_us() - t0));
    if (done < need || !ckpt_done) {
        /* Wait while anything moves; with no progress (the hot pool cannot
         * take the pages, a failed read dropped one) the rest is computed. */
        return done > 0 || in_flight > 0 ? 1 : 0;
    }
    atomic_fetch_add_explicit(&tg->st->hits[HY_TIER_HOT], (uint64_t)HY_MIN(pl.hot, pl.target),
                              memory_order_relaxed);
    return 0;
}

/* ---- shutdown --------------------------------------------------------------- */

int64_t hy_tiering_persist_hot(hy_tiering_t *tg)
{
    hy_pt_t *pt = tg->pt;
    const hy_pt_params_t *pp = &pt->sh->params;
    uint64_t pb = 0, sb = 0, unit;
    char err[HY_ERR_LEN];
    void *buf;
    int64_t n = 0, t0;
    struct timespec ts;

    if (tg->be->i->mem_sizes == NULL)
        return 0;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t0 = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    {
        uint64_t kv = 0, st = 0;
        tg->be->i->mem_allocated(tg->be, &kv, &st);
        pb = pp->n_pages > 0 ? kv / (uint64_t)pp->n_pages : 0;
        sb = pp->n_state_slots + pp->n_checkpoint_slots > 0
                 ? st / (uint64_t)(pp->n_state_slots + pp->n_checkpoint_slots)
                 : 0;
    }
    unit = HY_MAX(pb, sb);
    if (unit == 0 || (buf = malloc((size_t)unit)) == NULL)
        return 0;
    for (int32_t p = 0; p < pp->n_pages; p++) {
        const hy_pt_entry_t *e = &pt->pages[p];

        if (!(e->flags & HY_PT_F_HASHED) ||
            tg->be->i->kv_page_read(tg->be, p, buf, err) != HY_OK)
            continue;
        n += hy_tier_persist(tg->store, HY_TIER_PAGE, e->hash, pt->depth[p],
                             pt->tokens + (size_t)p * (size_t)pp->page_tokens, buf) == HY_OK;
    }
    for (int32_t c = 0; tg->hybrid && c < pp->n_checkpoint_slots; c++) {
        const hy_pt_entry_t *e = &pt->ckpts[c];

        if (!(e->flags & HY_PT_F_HASHED) || (e->flags & HY_PT_F_PENDING) ||
            tg->be->i->state_read(tg->be, tg->n_state_slots + c, buf, err) != HY_OK)
            continue;
        n += hy_tier_persist(tg->store, HY_TIER_CKPT, e->hash, -1, NULL, buf) == HY_OK;
    }
    free(buf);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    hy_log(LOG_INFO, "tier_persisted", "entries=%lld ms=%lld", (long long)n,
           (long long)((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - t0));
    return n;
}
