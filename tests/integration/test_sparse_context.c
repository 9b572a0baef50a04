/*
 * test_sparse_context.c - block-sparse attention through the runner (the
 * engine's forward path) on real models: the tiny llama (every layer full
 * attention), the tiny gemma3 (sliding layers and full ones: only the full
 * ones go sparse) and the tiny qwen35 (Gated DeltaNet layers and gated full
 * attention), 640 teacher-forced tokens each, every position's logits.
 *  - every block chosen (top-k larger than the context, from position 0)
 *    gives the dense logits bit for bit;
 *  - 32-token blocks, top-2, one sink and one local block from position
 *    256: the first 256 positions' logits are the dense ones bit for bit,
 *    later ones differ;
 *  - the same sparse run fed in steps of 37 tokens, one token at a time
 *    (64 and 256 for the hybrid, whose GDN chunks fix its cuts), and
 *    batched with another sequence: the same bits (the choice is per
 *    sequence and per token, not per batch);
 *  - each [attention] setting changed alone changes the logits past the
 *    threshold (and sparse_min_tokens moves where they start to differ);
 *  - a sequence whose full pages were written back through kv_page_write
 *    (as the warm and cold tiers promote pages), swapped between two page
 *    ids, decodes the same bits as its twin: the compressed keys are
 *    rebuilt from the written page, not left with the page id (its block
 *    keys averaged again from them, as the runner's contract asks of
 *    whoever rewrites a page list); with every page written back and
 *    every block key averaged again the next token too.
 * Integration, not unit: ~10-20 s of model runs.
 */
#include "engine/runner.h"
#include "../unit/test.h"

#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SP_N 640
#define SP_MIN 256
#define SP_CHUNK 128

static hy_backend_t *g_be;

static int32_t *sp_tokens(int32_t n, int32_t n_vocab, uint64_t seed)
{
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    uint64_t x = seed;

    for (int32_t i = 0; ids != NULL && i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)n_vocab);
    }
    return ids;
}

static void sp_runner_opts(hy_runner_opts_t *o, const hy_kv_sparse_t *sp, int32_t chunk)
{
    hy_runner_opts_default(o);
    o->max_tokens = 2 * chunk;
    o->max_outputs = 2 * chunk;
    o->max_seqs = 2;
    o->n_ctx = SP_N + 16;
    o->sparse = *sp;
}

/* Every position's logits of ids[0..SP_N) ([SP_N][n_vocab] in out), fed
 * in steps of chunk tokens, beside other (SP_N tokens, its logits
 * dropped) in the same steps when other != NULL; reads (or NULL): the
 * blocks its sparse tokens read, as the backend counted them. */
static int sp_run_reads(hy_model_t *m, const hy_kv_sparse_t *sp, const int32_t *ids,
                        int32_t chunk, const int32_t *other, float *out, uint64_t *reads,
                        char *err)
{
    size_t nv = (size_t)m->n_vocab;
    hy_runner_opts_t o;
    hy_runner_t r;
    hy_kv_seq_t a = {0}, b = {0};
    float *lg = malloc(sizeof(float) * nv * 2 * (size_t)chunk);
    int rc = HY_OK;

    sp_runner_opts(&o, sp, chunk);
    if (lg == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    if ((rc = hy_runner_init(&r, m, g_be, &o, err)) != HY_OK) {
        free(lg);
        return rc;
    }
    for (int32_t done = 0; done < SP_N && rc == HY_OK; done += chunk) {
        int32_t c = HY_MIN(chunk, SP_N - done);
        hy_runner_item_t it[2] = {{&a, ids + done, c, true}, {&b, other ? other + done : NULL, c, true}};

        if ((rc = hy_runner_step(&r, it, other ? 2 : 1, lg, err)) == HY_OK)
            memcpy(out + (size_t)done * nv, lg, sizeof(float) * nv * (size_t)c);
    }
    if (reads)
        *reads = a.out_reads[2];
    hy_runner_seq_release(&r, &a);
    hy_runner_seq_release(&r, &b);
    hy_runner_free(&r);
    free(lg);
    return rc;
}

static int sp_run(hy_model_t *m, const hy_kv_sparse_t *sp, const int32_t *ids, int32_t chunk,
                  const int32_t *other, float *out, char *err)
{
    return sp_run_reads(m, sp, ids, chunk, other, out, NULL, err);
}

/* Rows [lo, hi) of x and y: the first that differs in any bit, or hi. */
static int32_t sp_first_diff(const float *x, const float *y, int32_t nv, int32_t lo, int32_t hi)
{
    for (int32_t i = lo; i < hi; i++)
        if (memcmp(x + (size_t)i * nv, y + (size_t)i * nv, sizeof(float) * (size_t)nv) != 0)
            return i;
    return hi;
}

/* Rows [lo, hi) of x and y that differ. */
static int32_t sp_n_diff(const float *x, const float *y, int32_t nv, int32_t lo, int32_t hi)
{
    int32_t n = 0;

    for (int32_t i = lo; i < hi; i++)
        n += memcmp(x + (size_t)i * nv, y + (size_t)i * nv, sizeof(float) * (size_t)nv) != 0;
    return n;
}

/* Each setting changed alone moves the logits past the threshold. */
static void sp_keys_matter(hy_model_t *m, const char *name, const hy_kv_sparse_t *base,
                           const int32_t *ids, const float *dense, const float *sparse, float *buf)
{
    static const char *what[] = {"sparse_block_tokens 16", "sparse_topk 3", "sink_tokens 0",
                                 "local_tokens 64", "sparse_min_tokens 320"};
    int32_t nv = m->n_vocab;
    char err[HY_ERR_LEN] = "";

    for (int k = 0; k < (int)HY_ARRAY_LEN(what); k++) {
        hy_kv_sparse_t sp = *base;
        int rc;

        switch (k) {
        case 0: sp.block_pages = 1; sp.sink_blocks = 2; sp.local_blocks = 2; sp.topk = 4; break;
        case 1: sp.topk = 3; break;
        case 2: sp.sink_blocks = 0; break;
        case 3: sp.local_blocks = 2; break;
        default: sp.min_tokens = 320; break;
        }
        rc = sp_run(m, &sp, ids, SP_CHUNK, NULL, buf, err);
        if (k < 4)
            HY_T_OK(rc == HY_OK && sp_first_diff(buf, dense, nv, 0, SP_N) == SP_MIN &&
                    sp_n_diff(buf, sparse, nv, SP_MIN, SP_N) > 0,
                    "%s: %s changes the logits past position %d, not before (%s)", name,
                    what[k], SP_MIN, rc ? err : "ok");
        else
            HY_T_OK(rc == HY_OK && sp_first_diff(buf, dense, nv, 0, SP_N) == 320 &&
                    sp_n_diff(buf, sparse, nv, SP_MIN, 320) == 320 - SP_MIN,
                    "%s: %s: dense to position 320, where the 256 run was sparse (%s)", name,
                    what[k], rc ? err : "ok");
    }
}

/* The blocks the rule reads for positions SP_MIN..SP_N-1 with up to
 * scored blocks chosen by score, in every full layer's KV heads. */
static uint64_t sp_rule_reads(const hy_model_t *m, const hy_kv_sparse_t *sp, int32_t scored)
{
    uint64_t n = 0;
    hy_runner_opts_t o;

    sp_runner_opts(&o, sp, SP_CHUNK);
    for (int32_t p = sp->min_tokens; p < SP_N; p++)
        n += (uint64_t)hy_kv_sparse_blocks_before(p / (sp->block_pages * o.page_tokens),
                                                  sp->sink_blocks, sp->local_blocks, scored) + 1;
    return n * (uint64_t)hy_model_sparse_units(m);
}

/* The backend's count of blocks read is the rule's for a top-k; top-p
 * (0.9, up to 6 blocks) reads more on these random models, whose heads
 * spread their attention (where 6 blocks can hold 0.9 of it; past that
 * the top-k), and never past the cap; its bits do not depend
 * on the cuts of the prompt or a batch; with the cap at the top-k it is
 * the top-k. */
static void sp_topp(hy_model_t *m, const char *name, const hy_kv_sparse_t *base,
                    const int32_t *ids, const int32_t *other, const float *sparse, float *buf,
                    float *buf2)
{
    hy_kv_sparse_t sp = *base;
    size_t bytes = sizeof(float) * (size_t)m->n_vocab * SP_N;
    uint64_t reads = 0, rk = sp_rule_reads(m, base, base->topk), rc6 = sp_rule_reads(m, base, 6);
    char err[HY_ERR_LEN] = "";
    int rc = sp_run_reads(m, base, ids, SP_CHUNK, NULL, buf, &reads, err);

    HY_T_OK(rc == HY_OK && reads == rk, "%s: top-%d: the backend counts %llu blocks read, the "
            "rule's %llu (%s)", name, base->topk, (unsigned long long)reads,
            (unsigned long long)rk, rc ? err : "ok");
    sp.topp = 0.9f;
    sp.max_blocks = 6;
    rc = sp_run_reads(m, &sp, ids, SP_CHUNK, NULL, buf, &reads, err);
    HY_T_OK(rc == HY_OK && reads > rk && reads <= rc6 &&
                sp_first_diff(buf, sparse, m->n_vocab, 0, SP_N) >= SP_MIN &&
                sp_n_diff(buf, sparse, m->n_vocab, SP_MIN, SP_N) > 0,
            "%s: top-p 0.9 up to 6 blocks: %llu blocks read (top-%d %llu, all at the cap %llu), "
            "other logits past %d (%s)", name, (unsigned long long)reads, base->topk,
            (unsigned long long)rk, (unsigned long long)rc6, SP_MIN, rc ? err : "ok");
    for (int c = 0; c < 2 && rc == HY_OK; c++) {
        int32_t chunk = m->n_rec_layers > 0 ? 64 : (c ? 1 : 37);

        rc = sp_run(m, &sp, ids, chunk, c ? other : NULL, buf2, err);
        HY_T_OK(rc == HY_OK && memcmp(buf2, buf, bytes) == 0,
                "%s: top-p in steps of %d tokens%s: the same bits (%s)", name, chunk,
                c ? ", batched with another sequence" : "", rc ? err : "ok");
    }
    sp.max_blocks = base->topk;
    rc = sp_run(m, &sp, ids, SP_CHUNK, NULL, buf, err);
    HY_T_OK(rc == HY_OK && memcmp(buf, sparse, bytes) == 0,
            "%s: top-p with its cap at the top-k: the top-k's bits (%s)", name, rc ? err : "ok");
}

/* Two twins; one's full pages are read out and written back swapped
 * between two page ids (its page list swapped too): both decode the same
 * next token's logits bit for bit only if the keys follow the bytes. */
static void sp_rewrite(hy_model_t *m, const char *name, const hy_kv_sparse_t *sp,
                       const int32_t *ids)
{
    size_t nv = (size_t)m->n_vocab;
    hy_runner_opts_t o;
    hy_runner_t r;
    hy_kv_seq_t a = {0}, b = {0};
    float *lg = malloc(sizeof(float) * nv * 2);
    uint8_t *pa = NULL, *pb = NULL;
    char err[HY_ERR_LEN] = "";
    int32_t i = 2, j = 15, t;
    int rc;

    sp_runner_opts(&o, sp, SP_CHUNK);
    if ((rc = hy_runner_init(&r, m, g_be, &o, err)) != HY_OK || lg == NULL) {
        HY_T_OK(0, "%s: runner for the page rewrite (%s)", name, err);
        free(lg);
        return;
    }
    pa = malloc(r.page_bytes[HY_KV_FULL]);
    pb = malloc(r.page_bytes[HY_KV_FULL]);
    for (int32_t done = 0; done < SP_N - 1 && rc == HY_OK && pa && pb; done += SP_CHUNK) {
        int32_t c = HY_MIN(SP_CHUNK, SP_N - 1 - done);
        hy_runner_item_t it[2] = {{&a, ids + done, c, false}, {&b, ids + done, c, false}};

        rc = hy_runner_step(&r, it, 2, lg, err);
    }
    if (rc == HY_OK && pa && pb &&
        (rc = g_be->i->kv_page_read(g_be, HY_KV_FULL, b.pages[i], pa, err)) == HY_OK &&
        (rc = g_be->i->kv_page_read(g_be, HY_KV_FULL, b.pages[j], pb, err)) == HY_OK &&
        (rc = g_be->i->kv_page_write(g_be, HY_KV_FULL, b.pages[i], pb, err)) == HY_OK &&
        (rc = g_be->i->kv_page_write(g_be, HY_KV_FULL, b.pages[j], pa, err)) == HY_OK) {
        hy_runner_item_t it[2] = {{&a, ids + SP_N - 1, 1, false}, {&b, ids + SP_N - 1, 1, false}};

        t = b.pages[i];
        b.pages[i] = b.pages[j];
        b.pages[j] = t;
        /* the list changed below both counts: its ids are checked and its
         * block keys averaged from the page keys again */
        b.sp_valid = b.n_checked = 0;
        rc = hy_runner_step(&r, it, 2, lg, err);
    }
    HY_T_OK(rc == HY_OK && pa && pb && memcmp(lg, lg + nv, sizeof(float) * nv) == 0,
            "%s: pages %d and %d written back swapped: the twin decodes the same bits (%s)",
            name, i, j, rc ? err : "ok");
    /* Every full page of the twin written back as it is and its block keys
     * averaged again from the rewritten pages' keys, while the other's
     * keeps the ones it wrote as the blocks filled: same bits. */
    for (int32_t p = 0; rc == HY_OK && p < SP_N / o.page_tokens && pa; p++)
        if ((rc = g_be->i->kv_page_read(g_be, HY_KV_FULL, b.pages[p], pa, err)) == HY_OK)
            rc = g_be->i->kv_page_write(g_be, HY_KV_FULL, b.pages[p], pa, err);
    b.sp_valid = 0;
    if (rc == HY_OK) {
        hy_runner_item_t it[2] = {{&a, ids, 1, false}, {&b, ids, 1, false}};

        rc = hy_runner_step(&r, it, 2, lg, err);
    }
    HY_T_OK(rc == HY_OK && memcmp(lg, lg + nv, sizeof(float) * nv) == 0,
            "%s: block keys averaged from page keys (every page written back) and kept ones "
            "choose alike: the same bits (%s)", name, rc ? err : "ok");
    /* block keys that do not cover the context are refused, not overrun */
    {
        int32_t cap = b.sp_cap;
        hy_runner_item_t it = {&b, ids, 1, false};

        b.sp_cap = 1;
        rc = hy_runner_step(&r, &it, 1, lg, err);
        b.sp_cap = cap;
        HY_T_OK(rc == HY_EINVAL && strstr(err, "block keys for 1 blocks, the context has"),
                "%s: block keys too small for the context refused (%s)", name, err);
    }
    hy_runner_seq_release(&r, &a);
    hy_runner_seq_release(&r, &b);
    hy_runner_free(&r);
    free(pa);
    free(pb);
    free(lg);
}

/* A hot window of 8 blocks (256 tokens, = sparse_min_tokens): after each
 * step the blocks older than it, but the sink, leave the pool for the out
 * arena, and the chosen ones are read from there.  Fed in steps of chunk
 * (beside other when given), every position's logits must be the all-hot
 * sparse run's bit for bit; the pool holds only the window's pages, the
 * arena the rest, and everything goes back. */
static void sp_hot_run(hy_model_t *m, const char *name, const hy_kv_sparse_t *sp,
                       const int32_t *ids, int32_t chunk, const int32_t *other, int32_t out_pages,
                       int32_t warm, const float *sparse, float *buf)
{
    size_t nv = (size_t)m->n_vocab;
    hy_runner_opts_t o;
    hy_runner_t r;
    hy_kv_seq_t a = {0}, b = {0};
    hy_pt_counts_t c[2];
    float *lg = malloc(sizeof(float) * nv * 2 * (size_t)chunk);
    char err[HY_ERR_LEN] = "";
    int32_t out = 0, hot = 0, want_out;
    int rc = HY_OK;

    hy_outstore_counts_t oc = {0};
    char dir[] = "/tmp/hy-spill-XXXXXX";

    sp_runner_opts(&o, sp, chunk);
    o.hot_blocks = 8;
    o.out_pages = out_pages;
    o.out_warm = warm;
    o.out_dir = warm > 0 ? mkdtemp(dir) : NULL;
    if (lg == NULL || (rc = hy_runner_init(&r, m, g_be, &o, err)) != HY_OK) {
        HY_T_OK(0, "%s: runner with a hot window (%s)", name, err);
        if (o.out_dir)
            rmdir(dir);
        free(lg);
        return;
    }
    for (int32_t done = 0; done < SP_N && rc == HY_OK; done += chunk) {
        int32_t n = HY_MIN(chunk, SP_N - done);
        hy_runner_item_t it[2] = {{&a, ids + done, n, true},
                                  {&b, other ? other + done : NULL, n, true}};

        if ((rc = hy_runner_step(&r, it, other ? 2 : 1, lg, err)) == HY_OK)
            memcpy(buf + (size_t)done * nv, lg, sizeof(float) * nv * (size_t)n);
    }
    for (int32_t p = 0; p < a.n_pages; p++)
        out += a.pages[p] < -1, hot += a.pages[p] >= 0;
    hy_pt_counts(r.pt, &c[0]);
    hy_outstore_sync(r.out); /* the last step's reads, still on their way up */
    hy_outstore_counts(r.out, &oc);
    /* 20 complete 32-token blocks: 8 stay hot, the sink too, 11 go (2 pages
     * each), as far as the arena holds them */
    want_out = HY_MIN(22, out_pages / (other ? 2 : 1) / 2 * 2);
    HY_T_OK(rc == HY_OK && memcmp(buf, sparse, sizeof(float) * nv * SP_N) == 0 &&
                out == want_out && hot == a.n_pages - out &&
                c[0].pages_used == hot + (other ? b.n_pages - (hy_runner_out_used(&r) - out) : 0),
            "%s: hot window of 256 tokens, steps of %d%s, arena of %d pages: the all-hot bits; "
            "%d pages out, %d hot (%d used in the table) (%s)", name, chunk,
            other ? ", beside another sequence" : "", out_pages, out, hot, c[0].pages_used,
            rc ? err : "ok");
    if (warm > 0)
        HY_T_OK(oc.warm == warm && oc.warm_used == warm && oc.cold == oc.used - warm &&
                    oc.cold > 0 && oc.spills >= (uint64_t)oc.cold && oc.promotions > 0 &&
                    oc.disk_read_bytes > 0 && oc.file_bytes == (uint64_t)out_pages *
                    r.page_bytes[HY_KV_FULL] && a.out_reads[1] > 0 &&
                    a.out_reads[1] < a.out_reads[0],
                "%s: %d of the arena's pages in RAM, the rest in a spill file: %d warm, %d cold, "
                "%llu written, %llu brought up, %llu bytes read; of %llu blocks read from the "
                "arena %llu from the file", name, warm, oc.warm_used,
                oc.cold, (unsigned long long)oc.spills, (unsigned long long)oc.promotions,
                (unsigned long long)oc.disk_read_bytes, (unsigned long long)a.out_reads[0],
                (unsigned long long)a.out_reads[1]);
    else if (out > 0)
        HY_T_OK(a.out_reads[0] > 0 && a.out_reads[1] == 0,
                "%s: the arena all in RAM: %llu blocks read from it, none from a file", name,
                (unsigned long long)a.out_reads[0]);
    hy_runner_seq_release(&r, &a);
    hy_runner_seq_release(&r, &b);
    hy_pt_counts(r.pt, &c[1]);
    HY_T_OK(c[1].pages_used == 0 && hy_runner_out_used(&r) == 0,
            "%s: released: no page used, the arena empty (%d, %d)", name, c[1].pages_used,
            hy_runner_out_used(&r));
    hy_runner_free(&r);
    if (o.out_dir)
        HY_T_OK(rmdir(dir) == 0, "%s: the spill file left nothing in its directory", name);
    free(lg);
}

/* A spill file that no longer holds what was written (every cold unit's
 * bytes overwritten), then one that cannot be read: the step that reads
 * it fails, naming the file and offset, instead of giving logits. */
static void sp_spill_faults(hy_model_t *m, const char *name, const hy_kv_sparse_t *sp,
                            const int32_t *ids)
{
    size_t nv = (size_t)m->n_vocab;
    hy_runner_opts_t o;
    hy_runner_t r;
    hy_kv_seq_t a = {0};
    float *lg = malloc(sizeof(float) * nv * 64);
    char dir[] = "/tmp/hy-spill-XXXXXX", err[HY_ERR_LEN] = "";
    int rc = HY_OK;

    sp_runner_opts(&o, sp, 64);
    o.hot_blocks = 8;
    o.out_pages = 64;
    o.out_warm = 2;
    o.out_dir = mkdtemp(dir);
    if (lg == NULL || o.out_dir == NULL || hy_runner_init(&r, m, g_be, &o, err) != HY_OK) {
        HY_T_OK(0, "%s: runner with a spill file (%s)", name, err);
        free(lg);
        return;
    }
    for (int fault = 0; fault < 2; fault++) {
        int32_t done = 0;

        rc = HY_OK;
        for (; done < 512 && rc == HY_OK; done += 64) {
            hy_runner_item_t it = {&a, ids + done, 64, false};

            rc = hy_runner_step(&r, &it, 1, lg, err);
        }
        if (fault == 0) {
            /* every unit only in the file gets other bytes */
            uint8_t junk[64];

            hy_outstore_sync(r.out);
            memset(junk, 0x5a, sizeof junk);
            for (int32_t u = 0; u < r.out->o.n_units; u++)
                if (r.out->slot[u] < 0 && r.out->on_disk[u])
                    (void)!pwrite(r.out->fd, junk, sizeof junk,
                                  (off_t)((uint64_t)u * r.out->o.unit_bytes));
        } else {
            /* the descriptor now only writes: a read fails */
            int wr = open(r.out->path, O_WRONLY | O_CREAT, 0600);

            unlink(r.out->path);
            dup2(wr, r.out->fd);
            close(wr);
        }
        for (rc = HY_OK; done < SP_N && rc == HY_OK; done++) {
            hy_runner_item_t it = {&a, ids + done, 1, false};

            rc = hy_runner_step(&r, &it, 1, lg, err);
        }
        HY_T_OK(rc == HY_EIO && strstr(err, r.out->path) && strstr(err, "offset") &&
                    strstr(err, fault == 0 ? "checksum mismatch" : "Bad file descriptor"),
                "%s: a spill file %s fails the step that reads it (%s)", name,
                fault == 0 ? "whose bytes changed" : "that cannot be read", err);
        hy_runner_seq_release(&r, &a);
    }
    hy_runner_free(&r);
    rmdir(dir);
    free(lg);
}

static void sp_hot(hy_model_t *m, const char *name, const hy_kv_sparse_t *sp,
                   const int32_t *ids, const int32_t *other, const float *sparse, float *buf)
{
    hy_runner_opts_t o;
    hy_runner_t r;
    char err[HY_ERR_LEN] = "";
    int rc;

    sp_hot_run(m, name, sp, ids, SP_CHUNK, NULL, 64, 0, sparse, buf);
    sp_hot_run(m, name, sp, ids, m->n_rec_layers > 0 ? 64 : 1, NULL, 64, 0, sparse, buf);
    sp_hot_run(m, name, sp, ids, 64, other, 64, 0, sparse, buf);
    sp_hot_run(m, name, sp, ids, SP_CHUNK, NULL, 6, 0, sparse, buf);
    /* 4 pages in RAM (2 blocks), the rest in a spill file: the same bits */
    sp_hot_run(m, name, sp, ids, m->n_rec_layers > 0 ? 64 : 1, NULL, 64, 4, sparse, buf);
    sp_hot_run(m, name, sp, ids, 64, other, 64, 4, sparse, buf);
    sp_spill_faults(m, name, sp, ids);
    /* a window a dense token would reach past is refused */
    sp_runner_opts(&o, sp, SP_CHUNK);
    o.hot_blocks = 7;
    o.out_pages = 64;
    rc = hy_runner_init(&r, m, g_be, &o, err);
    if (rc == HY_OK)
        hy_runner_free(&r);
    HY_T_OK(rc == HY_EINVAL && strstr(err, "must reach sparse_min_tokens (256)"),
            "%s: a hot window below sparse_min_tokens refused (%s)", name, err);
}

static void sp_model(const char *rel)
{
    /* 32-token blocks: top-2, the first and the last block before a
     * token's own, from position 256 */
    const hy_kv_sparse_t base = {2, 2, 1, 1, SP_MIN, 0, 0};
    const hy_kv_sparse_t all = {1, 1 << 20, 0, 0, 0, 0, 0}, off = {0, 0, 0, 0, 0, 0, 0};
    const char *name = strrchr(rel, '/') + 1;
    char err[HY_ERR_LEN] = "";
    hy_model_t *m = NULL;
    int32_t *ids = NULL, *other = NULL, nv;
    float *dense = NULL, *sparse = NULL, *buf = NULL, *buf2 = NULL;
    size_t bytes;
    int rc;

    if ((rc = hy_model_load(&m, hy_t_srcpath(rel), g_be, err)) != HY_OK) {
        HY_T_OK(0, "%s loads (%s)", rel, err);
        return;
    }
    nv = m->n_vocab;
    bytes = sizeof(float) * (size_t)nv * SP_N;
    ids = sp_tokens(SP_N, nv, 0x9e3779b97f4a7c15ull);
    other = sp_tokens(SP_N, nv, 12345);
    dense = malloc(bytes);
    sparse = malloc(bytes);
    buf = malloc(bytes);
    buf2 = malloc(bytes);
    if (!ids || !other || !dense || !sparse || !buf || !buf2) {
        HY_T_OK(0, "%s: out of memory", name);
        goto out;
    }
    rc = sp_run(m, &off, ids, SP_CHUNK, NULL, dense, err);
    HY_T_OK(rc == HY_OK, "%s: dense, %d positions (%s)", name, SP_N, rc ? err : "ok");
    if (rc != HY_OK)
        goto out;
    rc = sp_run(m, &all, ids, SP_CHUNK, NULL, buf, err);
    HY_T_OK(rc == HY_OK && memcmp(buf, dense, bytes) == 0,
            "%s: every block chosen from position 0 == dense, bit for bit (%s)", name,
            rc ? err : "ok");
    rc = sp_run(m, &base, ids, SP_CHUNK, NULL, sparse, err);
    HY_T_OK(rc == HY_OK && sp_first_diff(sparse, dense, nv, 0, SP_N) == SP_MIN,
            "%s: sparse from %d: positions below it dense bit for bit, %d of the %d after "
            "differ (%s)", name, SP_MIN, sp_n_diff(sparse, dense, nv, SP_MIN, SP_N),
            SP_N - SP_MIN, rc ? err : "ok");
    /* a recurrent layer's chunked prefill has its own bits per cut (see
     * test_bitwise): for the hybrid, cuts on its 64-token chunks */
    for (int c = 0; c < 2; c++) {
        int32_t chunk = m->n_rec_layers > 0 ? (c ? 256 : 64) : (c ? 1 : 37);

        rc = sp_run(m, &base, ids, chunk, NULL, buf, err);
        HY_T_OK(rc == HY_OK && memcmp(buf, sparse, bytes) == 0,
                "%s: sparse in steps of %d tokens: the same bits (%s)", name, chunk,
                rc ? err : "ok");
    }
    rc = sp_run(m, &base, ids, 64, other, buf, err);
    HY_T_OK(rc == HY_OK && memcmp(buf, sparse, bytes) == 0,
            "%s: sparse batched with another sequence: the same bits (%s)", name,
            rc ? err : "ok");
    sp_keys_matter(m, name, &base, ids, dense, sparse, buf);
    sp_topp(m, name, &base, ids, other, sparse, buf, buf2);
    sp_rewrite(m, name, &base, ids);
    sp_hot(m, name, &base, ids, other, sparse, buf);
out:
    free(ids);
    free(other);
    free(dense);
    free(sparse);
    free(buf);
    free(buf2);
    hy_model_free(m);
}

int main(void)
{
    hy_backend_opts_t bo = {.n_threads = 2};
    char err[HY_ERR_LEN];

    if (hy_backend_cpu_new(&g_be, &bo, err) != HY_OK) {
        HY_T_OK(0, "cpu backend (%s)", err);
        return hy_t_done();
    }
    sp_model("tests/golden/tiny/llama.gguf");
    sp_model("tests/golden/tiny/gemma3.gguf");
    sp_model("tests/golden/tiny/qwen35.gguf");
    g_be->i->free(g_be);
    return hy_t_done();
}
