/*
 * test_tier_engine.c - the engine with warm and cold tiers under a page
 * table too small for its prompts, on a dense model (llama) and a Gated
 * DeltaNet hybrid (qwen35, whose hits also need recurrent-state
 * checkpoints): eight 100-token prompts computed, then asked again newest
 * first — every one hits its 96 cached tokens from hot, warm or cold (all
 * three seen), with the tokens a
 * cold engine produces and the very logprobs of a hot hit; a restart (new
 * store and engine on the same directory, after the hot pages were written
 * at shutdown) still hits; a corrupt file is dropped and its blocks are
 * recomputed with the same output; a disk that refuses every write costs
 * hits, never a request.  Page-table and tier accounting after each.
 *
 * Gemma-shaped (the tiny gemma3: five sliding-window layers to one global,
 * its window patched to 40 tokens): the prefixes' full pages and the
 * sliding pages of their last window are demoted to warm and to disk
 * (hot pools of 24 full and 8 sliding pages) and restored, also after a
 * restart, and the restored requests give the very tokens and top-5
 * logprobs, bit for bit, of the same requests computed cold (steps of 16
 * tokens in both, so every step has the same shape); the sliding pages
 * that slid out of every window are freed, never written down (the disk
 * holds each prompt's 6 full pages and exactly the 3 sliding pages of its
 * last window); accounting per tier and per page group after each.  The
 * same for lfm2-swa (short conv + attention layers that all slide: its
 * full-group pages hold 0 bytes and carry the prefix chain; its hits also
 * need short-conv checkpoints).
 */
#define _GNU_SOURCE
#include "engine/engine.h"
#include "engine/tiering.h"
#include "ipc/ring.h"
#include "ipc/tier.h"
#include "kv/plan.h"
#include "test.h"
#include "golden.h"
#include "gguf_patch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NP 8      /* prompts */
#define PLEN 100  /* tokens each: 6 full blocks, 96 cached on a hit */
#define NGEN 4
#define NTOP 5    /* top logprobs compared in the sliding-window scenario */
#define SWA_WINDOW 40

typedef struct {
    int32_t tok[NGEN];
    float lp[NGEN];
    int32_t top_ids[NGEN][NTOP];
    float top_lp[NGEN][NTOP];
    int32_t n, n_cached;
} out_t;

typedef struct {
    hy_model_t *m;
    hy_backend_t *be;
    hy_shm_t *shm;
    hy_engine_t *e;
    hy_tier_t *tier;
    hy_stats_t *st;    /* the tier store's counters */
    int32_t pages;     /* > 0: a hot pool this small */
    int32_t swa_pages; /* > 0: a sliding-window page pool this small */
    int32_t warm;      /* warm page slots (0: 12) */
    int32_t mbt;       /* > 0: tokens per step (else 64) */
    int32_t n_top;     /* top logprobs asked for (0: 1) */
} env_t;

static char tdir[256];
static int inst;
static int fail_writes;

static int fault(void *ctx, int op, const char *name)
{
    (void)ctx;
    (void)name;
    return op == HY_TIER_OP_WRITE && fail_writes ? ENOSPC : 0;
}

static void eopts(const env_t *v, hy_engine_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->max_batch_tokens = v->mbt > 0 ? v->mbt : 64;
    o->max_seqs = 4;
    o->n_ctx = 256;
    o->page_tokens = 16;
    o->kv_type = HY_DTYPE_F32;
    o->checkpoint_interval = 32;
    o->n_request_slots = 8;
}

static int tier_up(env_t *v, char *err)
{
    hy_engine_opts_t o;
    hy_tier_opts_t to;
    hy_plan_t plan;
    uint64_t pc;
    int rc;

    eopts(v, &o);
    if ((rc = hy_engine_plan(v->m, v->be, &o, &plan, err)) != HY_OK)
        return rc;
    memset(&to, 0, sizeof to);
    hy_tiering_store_opts(v->m, &plan, 1, 1, &to);
    /* about 12 pages (or v->warm) of each group, and a quarter for
     * checkpoints; a full page of 0 bytes is sized by its entry */
    pc = plan.page_bytes > 0 ? plan.page_bytes : hy_tier_entry_bytes((uint32_t)o.page_tokens);
    to.swa_share = (double)to.unit_bytes[HY_TIER_SWA] / (double)(pc + to.unit_bytes[HY_TIER_SWA]);
    to.warm_bytes = (uint64_t)(v->warm ? v->warm : 12) * (pc + to.unit_bytes[HY_TIER_SWA]) +
                    (plan.slot_bytes ? 4 * plan.slot_bytes : 0);
    to.disk_dir = tdir;
    to.disk_bytes = 8 << 20;
    to.stats = v->st;
    to.fault = fault;
    memset(to.ident.model_sha256, 0x5a, 32);
    to.sha_known = true;
    if ((rc = hy_tier_create(&v->tier, &to, err)) != HY_OK)
        return rc;
    hy_tier_sync(v->tier); /* indexed before the first request, for exact counts */
    return HY_OK;
}

static int up(env_t *v, bool tiers, char *err)
{
    hy_engine_opts_t o;
    hy_pt_params_t pp;
    hy_shm_params_t sp;
    hy_req_source_t src;
    char name[64];
    int rc;

    eopts(v, &o);
    if (tiers && (rc = tier_up(v, err)) != HY_OK)
        return rc;
    o.tiers = tiers ? v->tier : NULL;
    snprintf(name, sizeof name, "test-tier-engine-%ld-%d", (long)getpid(), inst++);
    if ((rc = hy_engine_pt_params(v->m, v->be, &o, &pp, err)) != HY_OK)
        return rc;
    hy_shm_params_for(&sp, &pp, o.n_request_slots, o.n_ctx);
    if (v->pages > 0)
        sp.n_pages = v->pages;
    if (v->swa_pages > 0)
        sp.n_swa_pages = v->swa_pages;
    if ((rc = hy_shm_create(&v->shm, name, &sp, err)) != HY_OK)
        return rc;
    hy_ring_source(v->shm, &src);
    if ((rc = hy_engine_create(&v->e, v->m, v->be, hy_shm_pt(v->shm), &src, &o, err)) != HY_OK ||
        (rc = hy_engine_start(v->e, err)) != HY_OK) {
        hy_engine_free(v->e);
        v->e = NULL;
    }
    return rc;
}

/* Stops everything, writing the hot pages down first; checks the page
 * table (nothing used) and the tiers (used + free + cached = total, the
 * directory = the index). */
static void down(env_t *v, const char *what)
{
    char err[HY_ERR_LEN] = "", terr[HY_ERR_LEN] = "ok";
    hy_pt_counts_t c;
    int rc, trc = HY_OK;

    if (v->e == NULL)
        return;
    hy_engine_stop(v->e);
    hy_engine_persist_tiers(v->e);
    rc = hy_pt_check(hy_shm_pt(v->shm), err);
    hy_pt_counts(hy_shm_pt(v->shm), &c);
    if (v->tier != NULL) {
        hy_tier_sync(v->tier);
        trc = hy_tier_check(v->tier, true, terr);
    }
    HY_T_OK(rc == HY_OK && trc == HY_OK && c.pages_used == 0 && c.ckpt_used == 0 &&
                c.swa_used == 0 && c.pages_used + c.pages_free + c.pages_cached == c.pages_total &&
                c.swa_used + c.swa_free + c.swa_cached == c.swa_total,
            "%s: accounting (page table %s, used %d free %d cached %d of %d, sliding %d %d %d of "
            "%d; tiers %s)", what, rc == HY_OK ? "ok" : err, c.pages_used, c.pages_free,
            c.pages_cached, c.pages_total, c.swa_used, c.swa_free, c.swa_cached, c.swa_total,
            terr);
    hy_engine_free(v->e);
    hy_shm_close(v->shm);
    hy_tier_free(v->tier);
    v->e = NULL;
    v->shm = NULL;
    v->tier = NULL;
}

static void prompt(int32_t *p, int k, int32_t n_vocab)
{
    uint64_t x = (uint64_t)k * 0x9e3779b97f4a7c15ULL + 77;

    for (int i = 0; i < PLEN; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (int32_t)(x % (uint64_t)n_vocab);
    }
}

static int run(env_t *v, int k, out_t *out, char *err)
{
    int32_t p[PLEN];
    hy_req_params_t rp;
    hy_req_handle_t h;
    hy_ring_tok_t buf[8];
    hy_req_status_t st;
    int rc, n;

    memset(out, 0, sizeof *out);
    prompt(p, k, v->m->n_vocab);
    memset(&rp, 0, sizeof rp);
    hy_sampling_default(&rp.sampling);
    rp.sampling.temperature = 0;
    rp.sampling.n_logprobs = v->n_top > 0 ? v->n_top : 1;
    rp.max_tokens = NGEN;
    rp.flags = HY_REQ_F_IGNORE_EOS;
    if ((rc = hy_req_submit(v->shm, &rp, p, PLEN, &h, err)) != HY_OK)
        return rc;
    hy_shm_engine_kick(v->shm);
    for (int tries = 0; tries < 3000; tries++) {
        if ((n = hy_req_read(v->shm, h, buf, 8, 10, &st, err)) < 0)
            return n;
        for (int i = 0; i < n && out->n < NGEN; i++, out->n++) {
            out->tok[out->n] = buf[i].token;
            out->lp[out->n] = buf[i].logprob;
            for (int j = 0; j < NTOP && j < buf[i].n_top; j++) {
                out->top_ids[out->n][j] = buf[i].top_ids[j];
                out->top_lp[out->n][j] = buf[i].top_logprobs[j];
            }
        }
        if (st.done) {
            out->n_cached = st.n_cached;
            hy_req_release(v->shm, h, err);
            return st.finish_reason == HY_FINISH_ERROR ? hy_err(err, HY_EIO, "%s", st.error_msg)
                                                       : HY_OK;
        }
    }
    return hy_err(err, HY_EIO, "request did not finish in 30 s");
}

/* Same tokens; worst logprob gap (INFINITY on a token mismatch). */
static double gap(const out_t *a, const out_t *b)
{
    double g = 0;

    if (a->n != b->n)
        return INFINITY;
    for (int i = 0; i < a->n; i++) {
        if (a->tok[i] != b->tok[i])
            return INFINITY;
        g = fmax(g, fabs((double)a->lp[i] - b->lp[i]));
    }
    return g;
}

/* Flips a payload byte of every page file in the directory. */
static int corrupt_pages(void)
{
    DIR *d = opendir(tdir);
    struct dirent *de;
    char path[600];
    int n = 0;

    while (d != NULL && (de = readdir(d)) != NULL) {
        int fd;
        uint8_t c;

        if (strncmp(de->d_name, "p-", 2) != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", tdir, de->d_name);
        fd = open(path, O_RDWR);
        if (fd >= 0 && pread(fd, &c, 1, 300) == 1) {
            c ^= 0x40;
            n += pwrite(fd, &c, 1, 300) == 1;
        }
        if (fd >= 0)
            close(fd);
    }
    if (d != NULL)
        closedir(d);
    return n;
}

static void wipe_dir(void)
{
    char cmd[600];

    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", tdir, tdir);
    if (system(cmd) != 0)
        HY_T_OK(0, "%s", cmd);
}

static unsigned long long giveups(const env_t *v, int reason)
{
    return (unsigned long long)atomic_load(&v->st->tiers.fetch_giveups[reason]);
}

static void scenario(env_t *v, const char *name)
{
    char err[HY_ERR_LEN] = "ok";
    out_t cold[NP], hot3, a, b[NP], r5 = {0}, r4 = {0}, c6 = {0}, w = {0};
    uint64_t hh, hw, hc, errs;
    double worst = 0, g3 = INFINITY, g4 = INFINITY, g5 = INFINITY, g6 = INFINITY;
    bool hits = true;
    int rc, k, n_corrupt;

    memset(v->st, 0, sizeof *v->st);
    wipe_dir();
    /* reference: a pool that holds everything, no tiers */
    v->pages = 0;
    rc = up(v, false, err);
    for (k = 0; k < NP && rc == HY_OK; k++)
        rc = run(v, k, &cold[k], err);
    if (rc == HY_OK)
        rc = run(v, 3, &hot3, err);
    down(v, name);
    HY_T_OK(rc == HY_OK && hot3.n_cached == 96, "%s: reference outputs, a hot hit of 96 (%s)",
            name, err);
    if (rc != HY_OK)
        return;

    /* 24 hot pages for 8 prompts of 7: most of them go down and come back */
    v->pages = 24;
    rc = up(v, true, err);
    for (k = 0; k < NP && rc == HY_OK; k++)
        rc = run(v, k, &a, err);
    /* newest first: the last ones are still hot, the middle warm, the first on disk */
    for (k = NP - 1; k >= 0 && rc == HY_OK; k--) {
        if ((rc = run(v, k, &b[k], err)) != HY_OK)
            break;
        hits &= b[k].n_cached == 96;
        worst = fmax(worst, gap(&b[k], &cold[k]));
    }
    if (rc == HY_OK)
        g3 = gap(&b[3], &hot3);
    hh = atomic_load(&v->st->tiers.hits[HY_TIER_HOT]);
    hw = atomic_load(&v->st->tiers.hits[HY_TIER_WARM]);
    hc = atomic_load(&v->st->tiers.hits[HY_TIER_COLD]);
    HY_T_OK(rc == HY_OK && hits && worst < 1e-4,
            "%s: every prompt asked again hits its 96 tokens through the tiers, same output as "
            "cold (worst gap %.2g; cached %d %d %d %d %d %d %d %d; waits given up: %llu rereads, "
            "%llu stalled, %llu no room; %s)", name, worst, b[0].n_cached, b[1].n_cached,
            b[2].n_cached, b[3].n_cached, b[4].n_cached, b[5].n_cached, b[6].n_cached,
            b[7].n_cached, giveups(v, HY_TIER_GIVEUP_REREADS),
            giveups(v, HY_TIER_GIVEUP_STALLED), giveups(v, HY_TIER_GIVEUP_NO_ROOM), err);
    HY_T_OK(g3 == 0, "%s: a hit through the tiers has the very logprobs of a hot hit (gap %g)",
            name, g3);
    HY_T_OK(hh > 0 && hw > 0 && hc > 0 && atomic_load(&v->st->tiers.promotions[HY_TIER_COLD]) > 0 &&
                atomic_load(&v->st->tiers.demotions[HY_TIER_WARM]) > 0 &&
                atomic_load(&v->st->tiers.demotions[HY_TIER_COLD]) > 0,
            "%s: blocks came from hot (%llu), warm (%llu) and disk (%llu); demotions and "
            "promotions counted", name, (unsigned long long)hh, (unsigned long long)hw,
            (unsigned long long)hc);
    down(v, name);

    /* a restart: new store and engine on the same directory */
    if (rc == HY_OK)
        rc = up(v, true, err);
    if (rc == HY_OK)
        rc = run(v, 5, &r5, err);
    if (rc == HY_OK)
        g5 = gap(&r5, &cold[5]);
    HY_T_OK(rc == HY_OK && r5.n_cached == 96 && g5 < 1e-4,
            "%s: after a restart the prompt hits 96 tokens from disk, same output (cached %d, "
            "gap %.2g; %s)", name, r5.n_cached, g5, err);
    down(v, name);

    /* a warm tier of 4 pages for a 6-page prefix: read and promoted in rounds */
    v->warm = 4;
    if (rc == HY_OK)
        rc = up(v, true, err);
    if (rc == HY_OK)
        rc = run(v, 4, &r4, err);
    if (rc == HY_OK)
        g4 = gap(&r4, &cold[4]);
    HY_T_OK(rc == HY_OK && r4.n_cached == 96 && g4 < 1e-4,
            "%s: a warm tier smaller than the prefix brings it up in rounds (cached %d, gap %.2g; "
            "%s)", name, r4.n_cached, g4, err);
    down(v, name);
    v->warm = 0;

    /* every page file corrupted: dropped on read, recomputed, same output */
    n_corrupt = corrupt_pages();
    errs = atomic_load(&v->st->disk_errors);
    if (rc == HY_OK)
        rc = up(v, true, err);
    if (rc == HY_OK)
        rc = run(v, 6, &c6, err);
    if (rc == HY_OK)
        g6 = gap(&c6, &cold[6]);
    HY_T_OK(rc == HY_OK && n_corrupt > 0 && c6.n_cached == 0 && g6 < 1e-4 &&
                atomic_load(&v->st->disk_errors) > errs &&
                atomic_load(&v->st->tiers.dropped[HY_TIER_DROP_CORRUPT]) > 0,
            "%s: %d corrupt page files: dropped on read, the prompt recomputed (cached %d, gap "
            "%.2g, disk errors %llu; %s)", name, n_corrupt, c6.n_cached, g6,
            (unsigned long long)atomic_load(&v->st->disk_errors), err);
    down(v, name);

    /* a disk that refuses every write: requests still succeed */
    wipe_dir();
    errs = atomic_load(&v->st->disk_errors);
    fail_writes = 1;
    if (rc == HY_OK)
        rc = up(v, true, err);
    for (k = 0; k < NP && rc == HY_OK; k++)
        rc = run(v, k, &w, err);
    HY_T_OK(rc == HY_OK && gap(&w, &cold[NP - 1]) < 1e-4 && atomic_load(&v->st->disk_errors) > errs,
            "%s: every disk write failing (ENOSPC) costs hits, never a request (disk errors %llu; %s)",
            name, (unsigned long long)atomic_load(&v->st->disk_errors), err);
    down(v, name);
    fail_writes = 0;
}

/* ---- a Gemma-shaped model: sliding-window pages in the tiers ----------------------- */

/* Same tokens, logprobs and top-NTOP alternatives, bit for bit. */
static bool same_bits(const out_t *a, const out_t *b)
{
    return a->n == b->n && a->n == NGEN && memcmp(a->tok, b->tok, sizeof a->tok) == 0 &&
           memcmp(a->lp, b->lp, sizeof a->lp) == 0 &&
           memcmp(a->top_ids, b->top_ids, sizeof a->top_ids) == 0 &&
           memcmp(a->top_lp, b->top_lp, sizeof a->top_lp) == 0;
}

typedef struct {
    int full, swa, ckpt;  /* files by kind */
    int swa_lo, swa_hi;   /* the sliding pages' lowest and highest block */
    int bad;              /* a file whose header's kind is not its name's */
} files_t;

/* The page files in the directory by group, from their headers (kind at
 * byte 12, depth at 24, little-endian: ipc/tier_file.h). */
static void count_files(files_t *f)
{
    DIR *d = opendir(tdir);
    struct dirent *de;
    char path[600];

    memset(f, 0, sizeof *f);
    f->swa_lo = INT32_MAX;
    f->swa_hi = -1;
    while (d != NULL && (de = readdir(d)) != NULL) {
        uint8_t h[28];
        uint32_t kind, depth;
        int fd;

        if (strstr(de->d_name, ".hykv") == NULL || strstr(de->d_name, ".tmp") != NULL)
            continue;
        snprintf(path, sizeof path, "%s/%s", tdir, de->d_name);
        if ((fd = open(path, O_RDONLY)) < 0)
            continue;
        if (pread(fd, h, sizeof h, 0) == (ssize_t)sizeof h) {
            kind = (uint32_t)h[12] | (uint32_t)h[13] << 8 | (uint32_t)h[14] << 16 |
                   (uint32_t)h[15] << 24;
            depth = (uint32_t)h[24] | (uint32_t)h[25] << 8 | (uint32_t)h[26] << 16 |
                    (uint32_t)h[27] << 24;
            f->bad += (de->d_name[0] == 's') != (kind == HY_TIER_SWA);
            f->full += kind == HY_TIER_PAGE;
            f->ckpt += kind == HY_TIER_CKPT;
            if (kind == HY_TIER_SWA) {
                f->swa++;
                f->swa_lo = HY_MIN(f->swa_lo, (int)depth);
                f->swa_hi = HY_MAX(f->swa_hi, (int)depth);
            }
        }
        close(fd);
    }
    if (d != NULL)
        closedir(d);
}

/* The tiny gemma3 with a 40-token window: a 96-token hit needs the sliding
 * pages of blocks 3..5 (hy_kv_swa_first_block(40, 16, 96) = 3). */
static hy_model_t *gemma3_window(hy_backend_t *be, const hy_t_golden_t *g, char *err)
{
    hy_model_t *m = NULL;
    size_t size;
    unsigned char *buf = hy_tp_read_all(hy_t_golden_path(g), &size);

    if (buf == NULL ||
        hy_tp_set_u32(buf, size, "gemma3.attention.sliding_window", SWA_WINDOW) != 0)
        snprintf(err, HY_ERR_LEN, "cannot read or patch %s", hy_t_golden_path(g));
    else if (hy_tp_load(be, buf, size, &m, err) != HY_OK)
        m = NULL;
    free(buf);
    return m;
}

/* name: the model's; window: its sliding group's (checked against the
 * plan); warm: warm slots per group (0: 12); a hybrid also keeps
 * checkpoint files. */
static void scenario_swa(env_t *v, const char *name, int32_t window, int32_t warm)
{
    char err[HY_ERR_LEN] = "ok";
    /* what a hit at 96 needs, and what the finished sequences keep cached:
     * the sliding pages of the window before 96 (that of the last token,
     * 103, starts no earlier) */
    int32_t first = hy_kv_swa_first_block(window, 16, 96);
    bool hybrid = v->m->n_rec_layers > 0;
    out_t cold[NP], a, b[NP], r5 = {0};
    int64_t swa_warm = 0, swa_cold = 0;
    uint64_t hw, hc, pc;
    bool hits = true, same = true;
    files_t f;
    int rc, k;

    memset(v->st, 0, sizeof *v->st);
    wipe_dir();
    /* every step 16 tokens at most, so a hit's last 4 prompt tokens run in
     * a step of the shape the cold run gave them */
    v->mbt = 16;
    v->n_top = NTOP;
    v->pages = v->swa_pages = 0;
    rc = up(v, false, err);
    for (k = 0; k < NP && rc == HY_OK; k++)
        if ((rc = run(v, k, &cold[k], err)) == HY_OK && cold[k].n_cached != 0)
            rc = hy_err(err, HY_EINVAL, "prompt %d hit %d tokens cold", k, cold[k].n_cached);
    if (rc == HY_OK && hy_plan_swa_window(v->m, 256, false) != window)
        rc = hy_err(err, HY_EINVAL, "the sliding group's window is %d",
                    hy_plan_swa_window(v->m, 256, false));
    down(v, name);
    HY_T_OK(rc == HY_OK, "%s: reference outputs, computed cold (%s)", name, err);
    if (rc != HY_OK)
        return;

    /* 24 full and 8 sliding hot pages for 8 prompts of 6 + (6 - first) */
    v->pages = 24;
    v->swa_pages = 8;
    v->warm = warm;
    rc = up(v, true, err);
    for (k = 0; k < NP && rc == HY_OK; k++)
        rc = run(v, k, &a, err);
    if (rc == HY_OK) {
        hy_tier_sync(v->tier);
        swa_warm = atomic_load(&v->st->tiers.n[HY_TIER_WARM][HY_TIER_SWA][HY_TIER_CACHED]);
        swa_cold = atomic_load(&v->st->tiers.n[HY_TIER_COLD][HY_TIER_SWA][HY_TIER_CACHED]);
    }
    HY_T_OK(rc == HY_OK && swa_warm > 0 && swa_cold > 0,
            "%s: sliding pages of the prefixes' last windows were demoted: %lld warm, %lld on "
            "disk (%s)", name, (long long)swa_warm, (long long)swa_cold, err);
    for (k = NP - 1; k >= 0 && rc == HY_OK; k--) {
        if ((rc = run(v, k, &b[k], err)) != HY_OK)
            break;
        hits &= b[k].n_cached == 96;
        same &= same_bits(&b[k], &cold[k]);
    }
    hw = atomic_load(&v->st->tiers.hits[HY_TIER_WARM]);
    hc = atomic_load(&v->st->tiers.hits[HY_TIER_COLD]);
    /* entries read up from disk, of any kind (a model whose full pages hold
     * 0 bytes keeps them all in warm slots: its sliding pages come from disk) */
    pc = atomic_load(&v->st->tiers.promotions[HY_TIER_COLD]);
    HY_T_OK(rc == HY_OK && hits && same && hw > 0 && pc > 0,
            "%s: every prompt asked again hits its 96 tokens (full pages and the window's "
            "sliding pages from hot, warm (%llu blocks) and disk (%llu blocks, %llu entries "
            "read up)): tokens and top-%d logprobs bit for bit those computed cold (%s; cached "
            "%d %d %d %d %d %d %d %d; %s)", name, (unsigned long long)hw, (unsigned long long)hc,
            (unsigned long long)pc, NTOP, same ? "same" : "DIFFERENT", b[0].n_cached,
            b[1].n_cached, b[2].n_cached, b[3].n_cached, b[4].n_cached, b[5].n_cached,
            b[6].n_cached, b[7].n_cached, err);
    down(v, name);
    count_files(&f);
    HY_T_OK(f.full == NP * 6 && f.swa == NP * (6 - first) && f.swa_lo == first && f.swa_hi == 5 &&
                f.bad == 0 && (f.ckpt > 0) == hybrid,
            "%s: the disk holds each prompt's 6 full pages (%d) and only the %d sliding pages "
            "of its last window (%d, blocks %d..%d): the ones that slid out were freed, not "
            "demoted; %d checkpoints", name, f.full, 6 - first, f.swa, f.swa_lo, f.swa_hi,
            f.ckpt);

    /* a restart: everything comes from disk */
    if (rc == HY_OK)
        rc = up(v, true, err);
    if (rc == HY_OK)
        rc = run(v, 5, &r5, err);
    HY_T_OK(rc == HY_OK && r5.n_cached == 96 && same_bits(&r5, &cold[5]) &&
                atomic_load(&v->st->tiers.hits[HY_TIER_COLD]) > hc,
            "%s: after a restart the prompt hits 96 tokens from disk, full and sliding pages, "
            "bit for bit the cold output (cached %d; %s)", name, r5.n_cached, err);
    down(v, name);
    v->mbt = v->n_top = v->pages = v->swa_pages = v->warm = 0;
}

int main(void)
{
    static const char *const models[] = {"llama", "qwen35"};
    hy_t_golden_t golden[HY_T_GOLDEN_MAX];
    int n_golden = hy_t_golden_models(golden, HY_T_GOLDEN_MAX);
    hy_backend_opts_t bo = {.n_threads = 1};
    char err[HY_ERR_LEN], cmd[600];
    env_t v;

    memset(&v, 0, sizeof v);
    snprintf(tdir, sizeof tdir, "/tmp/hyserve-test-tier-engine-%ld", (long)getpid());
    v.st = calloc(1, sizeof *v.st);
    if (hy_backend_cpu_new(&v.be, &bo, err) != HY_OK) {
        HY_T_OK(0, "cpu backend (%s)", err);
        return hy_t_done();
    }
    for (size_t k = 0; k < HY_ARRAY_LEN(models); k++) {
        const hy_t_golden_t *g = hy_t_golden_find(golden, n_golden, models[k]);
        int rc;

        if (g == NULL) {
            HY_T_OK(0, "%s is in the manifest", models[k]);
            continue;
        }
        rc = hy_model_load(&v.m, hy_t_golden_path(g), v.be, err);
        HY_T_OK(rc == HY_OK, "%s loads (%s)", models[k], rc == HY_OK ? "ok" : err);
        if (rc != HY_OK)
            continue;
        scenario(&v, models[k]);
        hy_model_free(v.m);
        v.m = NULL;
    }
    {
        const hy_t_golden_t *g = hy_t_golden_find(golden, n_golden, "gemma3");

        v.m = g != NULL ? gemma3_window(v.be, g, err) : NULL;
        HY_T_OK(v.m != NULL, "gemma3 with a 40-token window loads (%s)",
                g == NULL ? "not in the manifest" : v.m != NULL ? "ok" : err);
        if (v.m != NULL)
            scenario_swa(&v, "gemma3 (sliding window 40)", SWA_WINDOW, 0);
        hy_model_free(v.m);
        v.m = NULL;
    }
    {
        /* every attention layer slides: full-group pages of 0 bytes carry
         * the prefix chain through the tiers; short-conv checkpoints too */
        const hy_t_golden_t *g = hy_t_golden_find(golden, n_golden, "lfm2-swa");
        int rc = g != NULL ? hy_model_load(&v.m, hy_t_golden_path(g), v.be, err) : HY_ENOENT;

        HY_T_OK(rc == HY_OK, "lfm2-swa loads (%s)", g == NULL ? "not in the manifest"
                                                     : rc == HY_OK ? "ok" : err);
        if (rc == HY_OK)
            scenario_swa(&v, "lfm2-swa (every attention layer slides)",
                         hy_plan_swa_window(v.m, 256, false), 2);
        hy_model_free(v.m);
        v.m = NULL;
    }
    v.be->i->free(v.be);
    free(v.st);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tdir);
    if (system(cmd) != 0)
        HY_T_OK(0, "cleanup of %s", tdir);
    return hy_t_done();
}
