/*
 * test_pagetable.c - the page table and prefix cache in private memory:
 * hits and misses, multi-turn reuse, checkpoint-gated matches for hybrid
 * models, LRU eviction under pressure (never of a referenced page),
 * duplicate blocks, recovery, the sliding-window page group (hits need the
 * window before the hit point; slid-out pages are evicted first; a full
 * page's eviction takes the sliding page of its block along), the tiers'
 * eviction hook (told each page's group; never offered a slid-out sliding
 * page, which is freed) and hot-run lookups with sliding pages, and the
 * used + free + cached == total invariant, per group, after every scenario.
 */
#include <stdlib.h>
#include <string.h>

#include "ipc/pagetable.h"
#include "test.h"

#define BT 4 /* tokens per block: small so scenarios span many blocks */

static hy_pt_t pt;
static void *mem;
static char err[HY_ERR_LEN];

static int setup_groups(int n_pages, int n_swa, int n_ckpt, int n_state)
{
    hy_pt_params_t p = {n_pages, BT, n_state, n_ckpt, 0, n_swa};
    hy_pt_layout_t l;

    free(mem);
    if (hy_pt_layout(&p, &l, err) != HY_OK)
        return -1;
    mem = aligned_alloc(64, (l.total_size + 63) / 64 * 64);
    return hy_pt_init(&pt, mem, l.total_size, &p, NULL, err);
}

static int setup(int n_pages, int n_ckpt, int n_state)
{
    return setup_groups(n_pages, 0, n_ckpt, n_state);
}

static bool accounting_ok(const char *what)
{
    hy_pt_counts_t c;
    int rc = hy_pt_check(&pt, err);

    hy_pt_counts(&pt, &c);
    HY_T_OK(rc == HY_OK && c.pages_used + c.pages_free + c.pages_cached == c.pages_total &&
                c.swa_used + c.swa_free + c.swa_cached == c.swa_total &&
                c.ckpt_used + c.ckpt_free + c.ckpt_cached == c.ckpt_total,
            "%s: accounting (pages %d+%d+%d=%d, sliding %d+%d+%d=%d, ckpt %d+%d+%d=%d) %s", what,
            c.pages_used, c.pages_free, c.pages_cached, c.pages_total, c.swa_used, c.swa_free,
            c.swa_cached, c.swa_total, c.ckpt_used, c.ckpt_free, c.ckpt_cached, c.ckpt_total,
            rc == HY_OK ? "" : err);
    return rc == HY_OK;
}

/* Runs a "sequence" the way the engine would: match, allocate the rest,
 * commit every full block, optionally checkpoint at the end of the last full
 * block, release.  Returns matched tokens. */
static int run_seq(const int32_t *tok, int n, bool hybrid, bool keep, int32_t *pages_out)
{
    int32_t pages[256];
    hy_pt_match_t m = {pages, 256, 0, 0, -1, 0, NULL, 0, 0};
    int32_t nb = (n + BT - 1) / BT, b;
    uint64_t h;

    if (hy_pt_match(&pt, tok, n, hybrid, &m, err) != HY_OK)
        return -1;
    if (m.ckpt >= 0)
        hy_pt_checkpoint_release(&pt, m.ckpt, err); /* state copied out */
    if (hy_pt_alloc_pages(&pt, HY_KV_FULL, nb - m.n_blocks, pages + m.n_blocks, err) != HY_OK) {
        hy_pt_release_seq(&pt, HY_KV_FULL, pages, m.n_blocks, err);
        return -2;
    }
    h = m.hash;
    for (b = m.n_blocks; b < n / BT; b++) {
        h = hy_pt_block_hash(h, tok + b * BT, BT);
        hy_pt_commit_block(&pt, HY_KV_FULL, pages[b], h, b, tok + b * BT, err);
        if (hybrid && b == n / BT - 1) {
            int32_t slot;
            bool existed;
            if (hy_pt_checkpoint_put(&pt, h, &slot, &existed, err) == HY_OK) {
                if (existed)
                    hy_pt_checkpoint_release(&pt, slot, err);
                else
                    hy_pt_checkpoint_publish(&pt, slot, err);
            }
        }
    }
    if (pages_out)
        memcpy(pages_out, pages, sizeof(int32_t) * (size_t)nb);
    if (!keep)
        hy_pt_release_seq(&pt, HY_KV_FULL, pages, nb, err);
    return m.n_tokens;
}

static void test_params(void)
{
    hy_pt_params_t p = {0, 16, 0, 0, 0, 0};
    hy_pt_layout_t l;
    int i;

    HY_T_OK(hy_pt_layout(&p, &l, err) == HY_ERANGE && strstr(err, "n_pages"),
            "n_pages = 0 refused: %s", err);
    p.n_pages = 8;
    p.page_tokens = 0;
    HY_T_OK(hy_pt_layout(&p, &l, err) == HY_ERANGE && strstr(err, "page_tokens"),
            "page_tokens = 0 refused: %s", err);
    p.page_tokens = 16;
    p.index_capacity = 12;
    HY_T_OK(hy_pt_layout(&p, &l, err) == HY_ERANGE, "non-power-of-two index refused: %s", err);
    p.index_capacity = 0;
    i = hy_pt_layout(&p, &l, err);
    HY_T_OK(i == HY_OK && l.index_capacity >= 2 * 9, "automatic index capacity %d",
            l.index_capacity);
}

static void test_hits_and_misses(void)
{
    int32_t a[12], b[12], pages[8];
    hy_pt_match_t m = {pages, 8, 0, 0, -1, 0, NULL, 0, 0};
    int i, r;

    setup(16, 0, 0);
    for (i = 0; i < 12; i++)
        a[i] = 100 + i, b[i] = 100 + i;
    b[5] = 7; /* differs inside block 1 */
    HY_T_OK(run_seq(a, 12, false, false, NULL) == 0, "cold prompt misses");
    r = run_seq(a, 12, false, false, NULL);
    HY_T_OK(r == 8, "same 12-token prompt hits 2 of 3 blocks (one token must remain): %d", r);
    r = hy_pt_match(&pt, b, 12, false, &m, err);
    HY_T_OK(r == HY_OK && m.n_blocks == 1, "prompt differing in block 1 hits only block 0: %d",
            m.n_blocks);
    hy_pt_release_seq(&pt, HY_KV_FULL, pages, m.n_blocks, err);
    HY_T_OK(hy_pt_match(&pt, a, 3, false, &m, err) == HY_OK && m.n_blocks == 0,
            "prompt shorter than one block: no hit");
    HY_T_OK(hy_pt_match(&pt, a, BT, false, &m, err) == HY_OK && m.n_blocks == 0,
            "prompt of exactly one block: no hit (a token must remain)");
    HY_T_OK(hy_pt_match(&pt, a, BT + 1, false, &m, err) == HY_OK && m.n_blocks == 1,
            "one block + 1 token: hit");
    hy_pt_release_seq(&pt, HY_KV_FULL, pages, m.n_blocks, err);
    accounting_ok("hits/misses");
}

static void test_collision_guard(void)
{
    int32_t a[9], pages[4];
    hy_pt_match_t m = {pages, 4, 0, 0, -1, 0, NULL, 0, 0};
    int32_t p, i;
    uint64_t h;

    /* commit a page whose stored tokens disagree with the hash it claims:
     * what a 64-bit collision would look like; the match must refuse it */
    setup(8, 0, 0);
    for (i = 0; i < 9; i++)
        a[i] = i + 1;
    hy_pt_alloc_pages(&pt, HY_KV_FULL, 1, &p, err);
    h = hy_pt_block_hash(HY_PT_HASH_ROOT, a, BT);
    {
        int32_t other[BT] = {9, 9, 9, 9};
        hy_pt_commit_block(&pt, HY_KV_FULL, p, h, 0, other, err);
    }
    hy_pt_release_seq(&pt, HY_KV_FULL, &p, 1, err);
    HY_T_OK(hy_pt_match(&pt, a, 9, false, &m, err) == HY_OK && m.n_blocks == 0,
            "hash hit with different tokens is not a hit");
    accounting_ok("collision guard");
}

static void test_multi_turn(void)
{
    int32_t conv[400];
    int n = 0, turn, i, ok = 1, worst = 0;

    setup(128, 32, 4);
    for (turn = 0; turn < 5; turn++) {
        int prev = n, r;
        for (i = 0; i < 37 + turn * 11; i++)
            conv[n++] = (turn * 131 + i * 7) % 1000;
        r = run_seq(conv, n, true, false, NULL);
        /* every full block of the previous turn ends at or before prev; the
         * checkpoint sits at the end of the previous turn's last full block */
        if (r != (turn == 0 ? 0 : prev / BT * BT)) {
            ok = 0;
            worst = r;
        }
    }
    HY_T_OK(ok, "5 growing turns each hit all previous full blocks (hybrid, checkpoint-gated)%s",
            ok ? "" : " - failed");
    (void)worst;
    accounting_ok("multi-turn");
}

static void test_checkpoint_gating(void)
{
    int32_t t[40], pages[16], slot;
    hy_pt_match_t m = {pages, 16, 0, 0, -1, 0, NULL, 0, 0};
    bool existed;
    int i;
    uint64_t h = HY_PT_HASH_ROOT, h2 = 0;

    setup(32, 4, 0);
    for (i = 0; i < 40; i++)
        t[i] = i * 3;
    run_seq(t, 32, false, false, NULL); /* pages for 8 blocks, no checkpoints */
    HY_T_OK(hy_pt_match(&pt, t, 40, true, &m, err) == HY_OK && m.n_blocks == 0 && m.ckpt == -1,
            "hybrid: pages without a checkpoint give no hit");
    for (i = 0; i < 2; i++)
        h = hy_pt_block_hash(h, t + i * BT, BT);
    hy_pt_checkpoint_put(&pt, h, &slot, &existed, err);
    HY_T_OK(hy_pt_match(&pt, t, 40, true, &m, err) == HY_OK && m.n_blocks == 0,
            "pending checkpoint is not matchable");
    hy_pt_checkpoint_publish(&pt, slot, err);
    i = hy_pt_match(&pt, t, 40, true, &m, err);
    HY_T_OK(i == HY_OK && m.n_blocks == 2 && m.ckpt == slot,
            "hybrid hit stops at the checkpoint after block 1: %d blocks", m.n_blocks);
    hy_pt_checkpoint_release(&pt, m.ckpt, err);
    hy_pt_release_seq(&pt, HY_KV_FULL, pages, m.n_blocks, err);
    HY_T_OK(hy_pt_match(&pt, t, 40, false, &m, err) == HY_OK && m.n_blocks == 8,
            "attention-only match of the same prompt: 8 blocks");
    hy_pt_release_seq(&pt, HY_KV_FULL, pages, m.n_blocks, err);
    hy_pt_checkpoint_put(&pt, h, &slot, &existed, err);
    HY_T_OK(existed, "second put at the same boundary returns the existing checkpoint");
    hy_pt_checkpoint_release(&pt, slot, err);
    /* fill the pool: 4 slots, then a 5th evicts the LRU one */
    for (i = 0; i < 4; i++) {
        h2 = hy_pt_block_hash(0x1234 + (uint64_t)i, t, BT);
        hy_pt_checkpoint_put(&pt, h2, &slot, &existed, err);
        hy_pt_checkpoint_publish(&pt, slot, err);
    }
    HY_T_OK(hy_pt_match(&pt, t, 40, true, &m, err) == HY_OK && m.n_blocks == 0,
            "oldest checkpoint evicted when the pool overflowed");
    {
        hy_pt_counts_t c;
        hy_pt_counts(&pt, &c);
        HY_T_OK(c.ckpt_evictions == 1 && c.ckpt_cached == 4, "one checkpoint eviction (%llu)",
                (unsigned long long)c.ckpt_evictions);
    }
    /* all in use: put must fail, not evict a referenced one */
    {
        int32_t held[4];
        int k, ok = 1;
        for (k = 0; k < 4; k++) {
            ok &= hy_pt_checkpoint_put(&pt, 0x9000 + (uint64_t)k, &held[k], &existed, err) == HY_OK;
        }
        HY_T_OK(ok && hy_pt_checkpoint_put(&pt, 0x9999, &slot, &existed, err) == HY_EFULL,
                "checkpoint pool with every slot referenced: HY_EFULL");
        for (k = 0; k < 4; k++)
            hy_pt_checkpoint_release(&pt, held[k], err); /* pending -> freed */
    }
    accounting_ok("checkpoints");
}

static void test_eviction_pressure(void)
{
    int32_t held[8], t[64], pages[16], extra[16];
    int i, s, ok = 1;
    hy_pt_counts_t c;

    setup(16, 0, 0);
    for (i = 0; i < 32; i++)
        t[i] = 500 + i;
    /* a running sequence holds 8 pages (7 of them hashed full blocks) */
    run_seq(t, 30, false, true, held);
    /* many other prompts churn through the remaining 8 pages */
    for (s = 0; s < 50; s++) {
        int32_t u[16];
        for (i = 0; i < 16; i++)
            u[i] = s * 1000 + i;
        if (run_seq(u, 16, false, false, NULL) < 0)
            ok = 0;
        for (i = 0; i < 8; i++)
            if (pt.pages[held[i]].refcount != 1)
                ok = 0;
    }
    HY_T_OK(ok, "50 prompts churn the pool; the 8 referenced pages are never evicted");
    HY_T_OK(hy_pt_alloc_pages(&pt, HY_KV_FULL, 9, extra, err) == HY_EFULL,
            "alloc beyond free + cached: HY_EFULL (%s)", err);
    HY_T_OK(hy_pt_alloc_pages(&pt, HY_KV_FULL, 8, extra, err) == HY_OK,
            "alloc of exactly free + cached succeeds by evicting");
    hy_pt_counts(&pt, &c);
    HY_T_OK(c.pages_used == 16 && c.pages_free == 0 && c.pages_cached == 0, "pool full");
    accounting_ok("eviction: full");
    hy_pt_release_seq(&pt, HY_KV_FULL, extra, 8, err);
    {
        hy_pt_match_t m = {pages, 16, 0, 0, -1, 0, NULL, 0, 0};
        i = hy_pt_match(&pt, t, 30, false, &m, err);
        HY_T_OK(i == HY_OK && m.n_blocks == 7,
                "the held sequence's blocks are still shared by a new match: %d", m.n_blocks);
        HY_T_OK(pt.pages[held[0]].refcount == 2, "shared page refcount 2");
        hy_pt_release_seq(&pt, HY_KV_FULL, pages, m.n_blocks, err);
    }
    hy_pt_release_seq(&pt, HY_KV_FULL, held, 8, err);
    HY_T_OK(hy_pt_release_seq(&pt, HY_KV_FULL, held, 1, err) == HY_EINVAL, "double release refused: %s", err);
    accounting_ok("eviction pressure");
}

static void test_lru_order(void)
{
    int32_t a[9], b[9], c9[9], pages[4], p;
    hy_pt_match_t m = {pages, 4, 0, 0, -1, 0, NULL, 0, 0};
    int i;

    /* 4 pages: A and B cached (2 blocks each), touch A, then allocating 2
     * must evict B's pages, not A's */
    setup(4, 0, 0);
    for (i = 0; i < 9; i++)
        a[i] = i, b[i] = 100 + i, c9[i] = 200 + i;
    run_seq(a, 8, false, false, NULL);
    run_seq(b, 8, false, false, NULL);
    hy_pt_match(&pt, a, 9, false, &m, err);
    hy_pt_release_seq(&pt, HY_KV_FULL, pages, m.n_blocks, err);
    run_seq(c9, 8, false, false, NULL);
    HY_T_OK(hy_pt_match(&pt, a, 9, false, &m, err) == HY_OK && m.n_blocks == 2,
            "recently used prefix survives eviction");
    hy_pt_release_seq(&pt, HY_KV_FULL, pages, m.n_blocks, err);
    HY_T_OK(hy_pt_match(&pt, b, 9, false, &m, err) == HY_OK && m.n_blocks == 0,
            "least recently used prefix was evicted");
    (void)p;
    accounting_ok("LRU order");
}

static void test_duplicate_and_partial(void)
{
    int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8}, p[2], q[2];
    uint64_t h = hy_pt_block_hash(HY_PT_HASH_ROOT, t, BT);
    hy_pt_counts_t c;

    setup(8, 0, 0);
    hy_pt_alloc_pages(&pt, HY_KV_FULL, 2, p, err);
    hy_pt_alloc_pages(&pt, HY_KV_FULL, 2, q, err);
    HY_T_OK(hy_pt_commit_block(&pt, HY_KV_FULL, p[0], h, 0, t, err) == HY_OK, "first commit indexes");
    HY_T_OK(hy_pt_commit_block(&pt, HY_KV_FULL, q[0], h, 0, t, err) == 1, "twin commit stays private");
    HY_T_OK(hy_pt_commit_block(&pt, HY_KV_FULL, p[0], h, 0, t, err) == HY_EINVAL, "recommit refused");
    /* p[1], q[1] are partial last blocks: never committed */
    hy_pt_release_seq(&pt, HY_KV_FULL, p, 2, err);
    hy_pt_release_seq(&pt, HY_KV_FULL, q, 2, err);
    hy_pt_counts(&pt, &c);
    HY_T_OK(c.pages_cached == 1 && c.pages_free == 7,
            "only the indexed full block is cached; twin and partial blocks freed (%d cached)",
            c.pages_cached);
    accounting_ok("duplicates and partial blocks");
}

static void test_state_slots_and_recover(void)
{
    int32_t s[3], x, t[24];
    int r1, r2;
    int i;

    setup(8, 4, 3);
    for (i = 0; i < 3; i++)
        hy_pt_state_alloc(&pt, &s[i], err);
    HY_T_OK(hy_pt_state_alloc(&pt, &x, err) == HY_EFULL, "state slots exhausted: %s", err);
    HY_T_OK(hy_pt_state_free(&pt, s[1], err) == HY_OK &&
                hy_pt_state_free(&pt, s[1], err) == HY_EINVAL,
            "state slot double free refused");
    for (i = 0; i < 24; i++)
        t[i] = i;
    run_seq(t, 20, true, false, NULL);
    /* scramble the derived data as a crashed holder might leave it */
    pt.sh->pages.free_head = 3;
    pt.sh->pages.lru_head = -1;
    atomic_store(&pt.sh->pages.n_free, 99);
    pt.sh->state_free_head = -1;
    HY_T_OK(hy_pt_check(&pt, err) != HY_OK, "check notices broken accounting: %s", err);
    hy_pt_recover(&pt);
    accounting_ok("after recover");
    r1 = run_seq(t, 20, false, false, NULL);
    r2 = run_seq(t, 21, true, false, NULL);
    HY_T_OK(r1 == 16 && r2 == 20, "prefix cache (and checkpoint) still hit after recover: %d %d",
            r1, r2);
    accounting_ok("after recover + reuse");
}

/* ---- the sliding-window group -------------------------------------------- */

#define W 6 /* window: the next token sees its own position and the 5 before */

/* A sequence of a model with sliding layers, as the engine runs it: match
 * (full pages + the window's sliding pages), both groups' pages for the
 * rest, every full block committed in both groups, the sliding blocks the
 * window has left released as stale - except the window before the
 * prompt's last block boundary, which an exact repeat resumes from - and
 * the rest released at the end.  Returns matched tokens (*swa_first: the
 * match's first sliding block). */
static int run_swa_seq(const int32_t *tok, int n, int32_t *swa_first)
{
    int32_t pages[64], swa[64], nb = (n + BT - 1) / BT, b, lo, pb = (n - 1) / BT * BT, klo, k;
    hy_pt_match_t m = {pages, 64, 0, 0, -1, 0, swa, W, 0};
    uint64_t h;

    if (hy_pt_match(&pt, tok, n, false, &m, err) != HY_OK)
        return -1;
    if (swa_first)
        *swa_first = m.swa_first;
    if (hy_pt_alloc_pages(&pt, HY_KV_FULL, nb - m.n_blocks, pages + m.n_blocks, err) != HY_OK ||
        hy_pt_alloc_pages(&pt, HY_KV_SWA, nb - m.n_blocks, swa + m.n_blocks, err) != HY_OK)
        return -2;
    h = m.hash;
    for (b = m.n_blocks; b < n / BT; b++) {
        h = hy_pt_block_hash(h, tok + b * BT, BT);
        hy_pt_commit_block(&pt, HY_KV_FULL, pages[b], h, b, tok + b * BT, err);
        hy_pt_commit_block(&pt, HY_KV_SWA, swa[b], h, b, tok + b * BT, err);
    }
    lo = hy_kv_swa_first_block(W, BT, n);
    klo = hy_kv_swa_first_block(W, BT, pb);
    for (k = m.swa_first; k < lo; k++) {
        if (k >= klo && k < pb / BT)
            hy_pt_release_seq(&pt, HY_KV_SWA, swa + k, 1, err);
        else
            hy_pt_release_stale(&pt, HY_KV_SWA, swa + k, 1, err);
    }
    hy_pt_release_seq(&pt, HY_KV_SWA, swa + lo, nb - lo, err);
    hy_pt_release_seq(&pt, HY_KV_FULL, pages, nb, err);
    return m.n_tokens;
}

static void test_sliding_group(void)
{
    int32_t a[32], b[32], pages[64], swa[64], extra[32], first = -1;
    hy_pt_match_t m = {pages, 64, 0, 0, -1, 0, swa, W, 0};
    hy_pt_counts_t c;
    int r, i;

    setup_groups(32, 12, 0, 0);
    for (i = 0; i < 32; i++)
        a[i] = 300 + i, b[i] = 300 + i;
    b[13] = 9; /* leaves a in block 3 */
    HY_T_OK(run_swa_seq(a, 24, NULL) == 0, "sliding: cold 24-token prompt misses");
    hy_pt_counts(&pt, &c);
    HY_T_OK(c.pages_cached == 6 && c.swa_cached == 6 && c.swa_used == 0,
            "sliding: its 6 blocks cached in both groups (%d full, %d sliding)", c.pages_cached,
            c.swa_cached);
    accounting_ok("sliding: one prompt");
    /* 25 tokens: a hit of 6 blocks needs the sliding pages of positions 19..23 */
    r = run_swa_seq(a, 25, &first);
    HY_T_OK(r == 24 && first == hy_kv_swa_first_block(W, BT, 24) && first == 4,
            "sliding: 24 tokens hit, sliding pages from block %d (window %d)", first, W);
    /* take every free sliding page and 4 more: the slid-out blocks 0..3,
     * at the front of the LRU, are evicted before the last window 4..5 */
    hy_pt_counts(&pt, &c);
    r = hy_pt_alloc_pages(&pt, HY_KV_SWA, c.swa_free + 4, extra, err);
    hy_pt_counts(&pt, &c);
    HY_T_OK(r == HY_OK && c.swa_cached == 2 && c.swa_evictions == 4,
            "sliding: slid-out pages evicted first (%d cached, %llu evictions)", c.swa_cached,
            (unsigned long long)c.swa_evictions);
    r = hy_pt_match(&pt, a, 25, false, &m, err);
    HY_T_OK(r == HY_OK && m.n_blocks == 6 && m.swa_first == 4 && swa[0] == -1 && swa[3] == -1 &&
                swa[4] >= 0 && swa[5] >= 0,
            "sliding: the hit at 24 still has its window (blocks %d.., %d blocks)", m.swa_first,
            m.n_blocks);
    hy_pt_release_seq(&pt, HY_KV_FULL, pages, m.n_blocks, err);
    hy_pt_release_seq(&pt, HY_KV_SWA, swa + m.swa_first, m.n_blocks - m.swa_first, err);
    /* b leaves a inside block 3: a hit at 12 would need blocks 1..2, gone */
    r = hy_pt_match(&pt, b, 20, false, &m, err);
    HY_T_OK(r == HY_OK && m.n_blocks == 0,
            "sliding: full pages of 3 blocks but no window before them: no hit (%d)",
            m.n_blocks);
    hy_pt_release_seq(&pt, HY_KV_SWA, extra, c.swa_used, err);
    accounting_ok("sliding: evictions");
    /* b computes blocks 0..2 again; block 1..2's sliding pages, the window
     * before its branch at 12, are cached again: c hits there */
    r = run_swa_seq(b, 20, NULL);
    memcpy(a, b, sizeof b);
    a[17] = 11; /* leaves b in block 4 */
    i = r == 0 ? run_swa_seq(a, 20, &first) : -1;
    HY_T_OK(i == 16 && first == 2,
            "sliding: the next prompt sharing 16 tokens hits them (%d, window from block %d)", i,
            first);
    /* evicting the full pages takes the cached sliding page of each block */
    hy_pt_counts(&pt, &c);
    r = hy_pt_alloc_pages(&pt, HY_KV_FULL, c.pages_free + c.pages_cached, extra, err);
    hy_pt_counts(&pt, &c);
    HY_T_OK(r == HY_OK && c.pages_cached == 0 && c.swa_cached == 0 && c.swa_free == 12,
            "sliding: a full page's eviction frees the sliding page of its block (%d cached)",
            c.swa_cached);
    hy_pt_release_seq(&pt, HY_KV_FULL, extra, c.pages_used, err);
    accounting_ok("sliding: full evictions");
    HY_T_OK(hy_pt_alloc_pages(&pt, 2, 1, extra, err) == HY_EINVAL && strstr(err, "group 2") &&
                hy_pt_release_seq(&pt, -1, extra, 1, err) == HY_EINVAL &&
                strstr(err, "no page group -1") &&
                hy_pt_commit_block(&pt, 5, 0, 1, 0, a, err) == HY_EINVAL,
            "sliding: a bad group is refused (%s)", err);
    HY_T_OK(hy_pt_release_seq(&pt, HY_KV_SWA, extra, 1, err) == HY_EINVAL &&
                strstr(err, "of group 1 is not in use"),
            "sliding: releasing a free sliding page is refused (%s)", err);
    m.swa_pages = NULL;
    HY_T_OK(hy_pt_match(&pt, a, 20, false, &m, err) == HY_EINVAL,
            "sliding: a window without a sliding page array is refused (%s)", err);
    /* recovery rebuilds the sliding pool too */
    run_swa_seq(a, 24, NULL);
    pt.sh->swa.free_head = -1;
    pt.sh->swa.lru_head = 2;
    atomic_store(&pt.sh->swa.n_cached, 77);
    HY_T_OK(hy_pt_check(&pt, err) != HY_OK && strstr(err, "sliding page"),
            "sliding: check notices a broken sliding pool (%s)", err);
    hy_pt_recover(&pt);
    accounting_ok("sliding: after recover");
    r = run_swa_seq(a, 25, &first);
    HY_T_OK(r == 24 && first == 4, "sliding: hits after recover (%d, window from block %d)", r,
            first);
    accounting_ok("sliding: after recover + reuse");
}

/* ---- the tiers' side: the eviction hook, stale sliding pages, lookups ------------- */

static struct {
    int n[HY_KV_GROUPS], ckpt;
    uint32_t swa_depths; /* bit per sliding page depth offered */
} hooked;

static void hook(void *ctx, int32_t what, int32_t id, uint64_t hash, int32_t depth,
                 const int32_t *tokens)
{
    (void)ctx, (void)id, (void)hash, (void)tokens;
    if (what == HY_PT_EVICT_CKPT) {
        hooked.ckpt++;
        return;
    }
    hooked.n[what]++;
    if (what == HY_KV_SWA && depth >= 0 && depth < 32)
        hooked.swa_depths |= 1u << depth;
}

static int n_stale(void)
{
    int n = 0;

    for (int32_t i = 0; i < pt.sh->swa.n_total; i++)
        n += (pt.pages[pt.sh->swa.base + i].flags & HY_PT_F_STALE) != 0;
    return n;
}

static void test_evict_hook(void)
{
    int32_t a[32], pages[64], swa[64], extra[64];
    hy_pt_match_t m = {pages, 64, 0, 0, -1, 0, swa, W, 0};
    hy_pt_run_t run = {pages, NULL, NULL, 64, 0, 0, swa, 4};
    hy_pt_counts_t c;
    int r, i;

    for (i = 0; i < 32; i++)
        a[i] = 700 + i;
    /* 24 tokens, window 6: blocks 0..2 slid out (stale), block 3 is in the
     * window before the prompt's last boundary (20), 4..5 the last window */
    setup_groups(32, 12, 0, 0);
    run_swa_seq(a, 24, NULL);
    HY_T_OK(n_stale() == 3, "hook: the 3 slid-out sliding pages are marked stale (%d)", n_stale());
    accounting_ok("hook: stale pages");
    /* the hot run with its sliding pages; refs on the window from block 4 only */
    r = hy_pt_lookup(&pt, a, 25, true, &run, err);
    hy_pt_counts(&pt, &c);
    HY_T_OK(r == HY_OK && run.n_blocks == 6 && swa[0] >= 0 && swa[5] >= 0 && c.pages_used == 6 &&
                c.swa_used == 2 && n_stale() == 3,
            "hook: lookup finds 6 blocks with their sliding pages, references the window's "
            "(%d full, %d sliding used)", c.pages_used, c.swa_used);
    hy_pt_lookup_release(&pt, &run);
    accounting_ok("hook: lookup released");
    /* evicting every sliding page offers only the non-stale ones */
    memset(&hooked, 0, sizeof hooked);
    pt.on_evict = hook;
    hy_pt_counts(&pt, &c);
    r = hy_pt_alloc_pages(&pt, HY_KV_SWA, c.swa_free + c.swa_cached, extra, err);
    HY_T_OK(r == HY_OK && hooked.n[HY_KV_SWA] == 3 && hooked.swa_depths == 0x38 &&
                hooked.n[HY_KV_FULL] == 0,
            "hook: evicting sliding pages offers blocks 3..5 to the tiers, frees the stale "
            "0..2 (%d offered, depths 0x%x)", hooked.n[HY_KV_SWA], hooked.swa_depths);
    hy_pt_counts(&pt, &c);
    hy_pt_release_seq(&pt, HY_KV_SWA, extra, c.swa_used, err);
    accounting_ok("hook: sliding evictions");
    /* a match whose window takes stale pages makes them ordinary again */
    pt.on_evict = NULL;
    setup_groups(32, 12, 0, 0);
    run_swa_seq(a, 24, NULL);
    r = hy_pt_match(&pt, a, 13, false, &m, err);
    HY_T_OK(r == HY_OK && m.n_blocks == 3 && m.swa_first == 1 && n_stale() == 1,
            "hook: a hit of 3 blocks references blocks 1..2, no longer stale (%d stale)",
            n_stale());
    hy_pt_release_seq(&pt, HY_KV_FULL, pages, m.n_blocks, err);
    hy_pt_release_seq(&pt, HY_KV_SWA, swa + m.swa_first, m.n_blocks - m.swa_first, err);
    /* evicting the full pages: each offered, with its block's sliding page
     * (not the stale one of block 0) */
    memset(&hooked, 0, sizeof hooked);
    pt.on_evict = hook;
    hy_pt_counts(&pt, &c);
    r = hy_pt_alloc_pages(&pt, HY_KV_FULL, c.pages_free + c.pages_cached, extra, err);
    HY_T_OK(r == HY_OK && hooked.n[HY_KV_FULL] == 6 && hooked.n[HY_KV_SWA] == 5 &&
                hooked.swa_depths == 0x3e,
            "hook: full evictions offer 6 full pages and the 5 non-stale sliding pages of "
            "their blocks (%d, %d, depths 0x%x)", hooked.n[HY_KV_FULL], hooked.n[HY_KV_SWA],
            hooked.swa_depths);
    hy_pt_counts(&pt, &c);
    hy_pt_release_seq(&pt, HY_KV_FULL, extra, c.pages_used, err);
    pt.on_evict = NULL;
    accounting_ok("hook: full evictions");
    /* check: a stale flag on a page in use is an error */
    run_swa_seq(a, 24, NULL);
    hy_pt_alloc_pages(&pt, HY_KV_SWA, 1, extra, err);
    pt.pages[pt.sh->swa.base + extra[0]].flags |= HY_PT_F_STALE;
    HY_T_OK(hy_pt_check(&pt, err) == HY_EFORMAT && strstr(err, "stale") != NULL,
            "hook: check notices a stale page in use (%s)", err);
    pt.pages[pt.sh->swa.base + extra[0]].flags &= ~HY_PT_F_STALE;
    hy_pt_release_seq(&pt, HY_KV_SWA, extra, 1, err);
    accounting_ok("hook: end");
}

/* The engine died (server/engine_proc.h): hy_pt_reset frees every entry of
 * both page groups, the checkpoints and the state slots, whatever they
 * were (held by a sequence, cached, a pending checkpoint), and nothing of
 * the dead engine's cache hits afterwards (its KV is gone). */
static void test_reset_groups(void)
{
    int32_t a[32], held[8], held_swa[8], slot = -1, ck = -1, st = -1;
    int32_t pages[64], swa[64];
    hy_pt_match_t m = {pages, 64, 0, 0, -1, 0, swa, W, 0};
    hy_pt_counts_t c0, c;
    bool existed = false;
    int r[5], i;

    setup_groups(32, 12, 4, 3);
    for (i = 0; i < 32; i++)
        a[i] = 700 + i;
    r[0] = run_swa_seq(a, 24, NULL); /* cached in both groups */
    r[1] = hy_pt_alloc_pages(&pt, HY_KV_FULL, 5, held, err);
    r[2] = hy_pt_alloc_pages(&pt, HY_KV_SWA, 3, held_swa, err);
    r[3] = hy_pt_checkpoint_put(&pt, 0x1234, &ck, &existed, err); /* pending, held */
    r[4] = hy_pt_state_alloc(&pt, &st, err);
    if (r[3] == HY_OK && hy_pt_checkpoint_put(&pt, 0x5678, &slot, &existed, err) == HY_OK)
        hy_pt_checkpoint_publish(&pt, slot, err); /* cached */
    hy_pt_counts(&pt, &c0);
    HY_T_OK(r[0] == 0 && r[1] == HY_OK && r[2] == HY_OK && r[3] == HY_OK && r[4] == HY_OK &&
                c0.pages_used == 5 && c0.pages_cached == 6 && c0.swa_used == 3 &&
                c0.swa_cached > 0 && c0.ckpt_used == 1 && c0.ckpt_cached == 1 &&
                c0.state_used == 1,
            "reset: before, pages %d used %d cached, sliding %d used %d cached, checkpoints %d "
            "used %d cached, states %d", c0.pages_used, c0.pages_cached, c0.swa_used,
            c0.swa_cached, c0.ckpt_used, c0.ckpt_cached, c0.state_used);
    r[0] = hy_pt_reset(&pt);
    hy_pt_counts(&pt, &c);
    HY_T_OK(r[0] == HY_OK && c.pages_free == c.pages_total && c.pages_total == 32 &&
                c.swa_free == c.swa_total && c.swa_total == 12 && c.ckpt_free == c.ckpt_total &&
                c.ckpt_total == 4 && c.state_used == 0,
            "reset: every page of both groups, checkpoint and state slot free (pages %d/%d, "
            "sliding %d/%d, checkpoints %d/%d, states %d used)", c.pages_free, c.pages_total,
            c.swa_free, c.swa_total, c.ckpt_free, c.ckpt_total, c.state_used);
    accounting_ok("reset");
    r[0] = hy_pt_match(&pt, a, 25, false, &m, err);
    HY_T_OK(r[0] == HY_OK && m.n_blocks == 0, "reset: the dead engine's prefix no longer hits (%d)",
            m.n_blocks);
    /* the pools work after it: a full allocation of each group succeeds */
    r[1] = hy_pt_alloc_pages(&pt, HY_KV_FULL, 32, pages, err);
    r[2] = hy_pt_alloc_pages(&pt, HY_KV_SWA, 12, swa, err);
    if (r[1] == HY_OK)
        hy_pt_release_seq(&pt, HY_KV_FULL, pages, 32, err);
    if (r[2] == HY_OK)
        hy_pt_release_seq(&pt, HY_KV_SWA, swa, 12, err);
    HY_T_OK(r[1] == HY_OK && r[2] == HY_OK, "reset: both pools allocate in full after it (%s)",
            r[1] == HY_OK && r[2] == HY_OK ? "ok" : err);
    accounting_ok("reset: reused");
}

int main(void)
{
    test_params();
    test_hits_and_misses();
    test_collision_guard();
    test_multi_turn();
    test_checkpoint_gating();
    test_eviction_pressure();
    test_lru_order();
    test_duplicate_and_partial();
    test_state_slots_and_recover();
    test_sliding_group();
    test_evict_hook();
    test_reset_groups();
    free(mem);
    return hy_t_done();
}
