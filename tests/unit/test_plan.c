/*
 * test_plan.c - the memory planner quotes what the engine really allocates:
 * for a dense and a hybrid tiny model at several context lengths and
 * concurrencies, the runner's backend holds exactly the plan's KV and state
 * bytes; per-kind numbers add up to the totals; a hybrid model's cache grows
 * only with its attention layers; sliding-window layers are shown with their
 * window and keep their KV in their own page group, sized by the window and
 * the step, not by the context (with --swa-full, and when the window covers
 * the context, in the full group as before); block-sparse attention's keys
 * are quoted and allocated beside each full page.  The process bound: the
 * activations are what hy_fwd_init allocates, the runner's page table is
 * the plan's, and a sparse prefill and decode past min_tokens stays under
 * the bound in resident memory.
 */
#include "engine/runner.h"
#include "kv/plan.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the process bound ------------------------------------------------ */

static const struct hy_backend_i *hy_count_real;
static uint64_t hy_count_bytes;

/* The CPU backend's alloc, each allocation counted as the plan counts it. */
static float *hy_count_alloc(hy_backend_t *be, size_t n_floats)
{
    hy_count_bytes += hy_host_alloc_bytes((uint64_t)HY_MAX(n_floats, (size_t)1) * sizeof(float));
    return hy_count_real->alloc(be, n_floats);
}

/* This process's peak resident bytes (VmHWM), or 0. */
static uint64_t hy_peak_rss(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;

    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return (uint64_t)kb * 1024;
}

/* Runs first, with image the program measured before anything else: the
 * hybrid model behind the million-token benchmark prefills 8,192 tokens
 * with block-sparse attention (past its min_tokens, so the sparse choice's
 * O(context) scratch is live) and decodes 8, and the process's peak
 * resident memory stays under the plan's bound.  On the way the
 * activations' term is checked against every allocation hy_fwd_init makes
 * and the runner's page table against the plan's parameters. */
static void hy_plan_process_case(uint64_t image)
{
    hy_backend_opts_t bo = {.n_threads = 1};
    hy_backend_t *be = NULL;
    enum { CTX = 8192 + 8 + 16, CHUNK = 64 };
    char err[HY_ERR_LEN] = "";
    hy_config_t *cfg = malloc(sizeof *cfg);
    hy_model_t *m = NULL;
    hy_plan_opts_t po = {CTX, 1, 16, CHUNK, HY_DTYPE_F16, false, {0}, 0, 0, 0, 1, image, 0};
    struct hy_backend_i counting;
    const struct hy_backend_i *real;
    hy_runner_opts_t o;
    hy_runner_t r;
    hy_plan_t p;
    hy_fwd_t fwd;
    hy_pt_params_t pp = {0};
    hy_pt_layout_t l;
    hy_kv_seq_t s = {0};
    int32_t *ids = malloc(sizeof(int32_t) * CTX);
    uint64_t loaded, fwd_counted = 0, peak = 0, pt_runner = 0, pt_plan = 0;
    int rc;

    /* its own backend: a runner leaves the state slots it set up there */
    if (cfg == NULL || ids == NULL || hy_backend_cpu_new(&be, &bo, err) != HY_OK ||
        hy_model_load(&m, hy_t_srcpath("tests/golden/tiny/qwen35-long.gguf"), be, err) != HY_OK ||
        (loaded = hy_plan_image_bytes(err)) == 0) {
        HY_T_OK(0, "qwen35-long.gguf: load: %s", cfg && ids ? err : "out of memory");
        goto out;
    }
    po.model_bytes = loaded - image;
    hy_config_defaults(cfg);
    cfg->attention.sparse = HY_CONFIG_SPARSE_BLOCK;
    rc = hy_plan_sparse(&cfg->attention, 16, false, &po.sparse, err);
    if (rc == HY_OK)
        rc = hy_plan_make_opts(&p, m, be, &po, err);

    /* the activations: every backend allocation hy_fwd_init makes, and
     * the architecture's struct of pointers */
    real = be->i;
    counting = *real;
    counting.alloc = hy_count_alloc;
    hy_count_real = real;
    hy_count_bytes = 0;
    be->i = &counting;
    if (rc == HY_OK && (rc = hy_fwd_init(&fwd, m, be, CHUNK, 1, err)) == HY_OK)
        hy_fwd_free(&fwd);
    be->i = real;
    fwd_counted = hy_count_bytes + (m->scratch.size > 0 ? hy_host_alloc_bytes(m->scratch.size) : 0);
    HY_T_OK(rc == HY_OK && hy_count_bytes > 0 && fwd_counted == p.fwd_bytes,
            "activations: hy_fwd_init's allocations %llu bytes = plan %llu (%s)",
            (unsigned long long)fwd_counted, (unsigned long long)(rc == HY_OK ? p.fwd_bytes : 0),
            rc ? err : "ok");

    hy_runner_opts_default(&o);
    o.max_tokens = CHUNK;
    o.max_outputs = 1;
    o.max_seqs = 1;
    o.n_ctx = CTX;
    o.sparse = po.sparse;
    for (int32_t i = 0; i < CTX; i++)
        ids[i] = (int32_t)((uint32_t)i * 2654435761u % (uint32_t)m->n_vocab);
    if (rc == HY_OK && (rc = hy_runner_init(&r, m, be, &o, err)) == HY_OK) {
        pt_runner = r.pt->sh->total_size;
        rc = hy_runner_prefill(&r, &s, ids, 8192, NULL, err);
        for (int32_t i = 0; i < 8 && rc == HY_OK; i++) {
            hy_runner_item_t it = {&s, ids + 8192 + i, 1, false};

            rc = hy_runner_step(&r, &it, 1, NULL, err);
        }
        peak = hy_peak_rss();
        hy_runner_seq_release(&r, &s);
        hy_runner_free(&r);
    }
    pp.n_pages = p.n_pages;
    pp.page_tokens = p.page_tokens;
    pp.n_swa_pages = p.n_swa_pages;
    pp.n_state_slots = p.n_slots;
    if (hy_pt_layout(&pp, &l, err) == HY_OK)
        pt_plan = l.total_size;
    HY_T_OK(rc == HY_OK && pt_runner > 0 && pt_runner == pt_plan &&
                hy_host_alloc_bytes(pt_plan) < p.runner_bytes,
            "runner: its page table %llu bytes = the plan's %llu, in runner arrays %llu (%s)",
            (unsigned long long)pt_runner, (unsigned long long)pt_plan,
            (unsigned long long)p.runner_bytes, rc ? err : "ok");
    /* the bound holds, and not by a mile: it is the sum of what can be
     * resident, most of it is (the image's unused library code is the
     * slack) */
#ifdef __SANITIZE_ADDRESS__
    /* ASan's shadow memory, redzones and quarantine of freed blocks are
     * resident too and no part of the program's plan: the release build
     * (make check) checks the bound */
    HY_T_OK(rc == HY_OK, "8,192-token sparse prefill + 8 decode steps (%s) # SKIP the peak "
            "RSS under AddressSanitizer (%.2f MiB) is its own, not the plan's %.2f",
            rc ? err : "ok", (double)peak / 1048576.0, (double)p.process_total / 1048576.0);
#else
    HY_T_OK(rc == HY_OK && p.op_work_known && peak > 0 && peak <= p.process_total &&
                p.process_total < 2 * peak,
            "8,192-token sparse prefill + 8 decode steps: peak RSS %.2f MiB <= plan bound "
            "%.2f MiB (image %.2f, model %.2f, cache %.2f, working memory %.2f) (%s)",
            (double)peak / 1048576.0, (double)p.process_total / 1048576.0,
            (double)image / 1048576.0, (double)po.model_bytes / 1048576.0,
            (double)(p.kv_total + p.state_total) / 1048576.0, (double)p.work_total / 1048576.0,
            rc ? err : "ok");
#endif
out:
    hy_model_free(m);
    if (be != NULL)
        be->i->free(be);
    free(ids);
    free(cfg);
}

static void hy_plan_case(hy_backend_t *be, const char *file, int32_t ctx, int32_t seqs,
                         bool swa_full)
{
    char err[HY_ERR_LEN], rel[128];
    hy_model_t *m = NULL;
    hy_plan_t p;
    hy_plan_opts_t po = {ctx, seqs, 16, 64, HY_DTYPE_F16, swa_full, {0}, 0, 0, 0, 0, 0, 0};
    hy_runner_t r;
    hy_runner_opts_t o;
    uint64_t kv = 0, st = 0, kinds_kv = 0, kinds_st = 0;
    int32_t w = 0, swa_per_seq;
    int k, rc;

    snprintf(rel, sizeof rel, "tests/golden/tiny/%s", file);
    rc = hy_model_load(&m, hy_t_srcpath(rel), be, err);
    if (rc != HY_OK) {
        HY_T_OK(0, "%s: load: %s", file, err);
        return;
    }
    rc = hy_plan_make_opts(&p, m, be, &po, err);
    HY_T_OK(rc == HY_OK, "%s ctx %d x %d: plan (%s)", file, ctx, seqs, rc ? err : "ok");
    hy_runner_opts_default(&o);
    o.max_tokens = 64; /* the plan's chunk */
    o.max_outputs = 4;
    o.max_seqs = seqs;
    o.n_ctx = ctx;
    o.swa_full = swa_full;
    rc = hy_runner_init(&r, m, be, &o, err);
    if (rc == HY_OK) {
        be->i->mem_allocated(be, &kv, &st);
        hy_runner_free(&r);
    }
    HY_T_OK(rc == HY_OK && kv == p.kv_total && st == p.state_total,
            "%s ctx %d x %d: allocated KV %llu = plan %llu, state %llu = plan %llu", file, ctx,
            seqs, (unsigned long long)kv, (unsigned long long)p.kv_total,
            (unsigned long long)st, (unsigned long long)p.state_total);
    for (k = 0; k < HY_LAYER_KINDS; k++) {
        kinds_kv += p.kv_bytes_per_token[k] * (uint64_t)p.page_tokens;
        kinds_st += p.state_bytes_per_seq[k];
    }
    for (int32_t il = 0; il < m->n_layer; il++)
        w = HY_MAX(w, m->layers[il].window);
    /* the sliding group: a window shorter than the context, and no --swa-full */
    swa_per_seq = m->n_swa_layers > 0 && w < ctx && !swa_full
                      ? HY_MIN((ctx + 15) / 16, (16 + w + 64 - 2 + 15) / 16)
                      : 0;
    HY_T_OK(kinds_kv == p.page_bytes + p.swa_page_bytes && kinds_st == p.slot_bytes &&
                p.swa_window == (swa_per_seq ? w : 0) &&
                p.n_swa_pages == seqs * swa_per_seq &&
                (swa_per_seq == 0) == (p.swa_page_bytes == 0) &&
                p.kv_total == p.page_bytes * (uint64_t)seqs * ((ctx + 15) / 16) +
                                  p.swa_page_bytes * (uint64_t)seqs * (uint64_t)swa_per_seq,
            "%s ctx %d x %d%s: per-kind KV %llu/page and state %llu/seq add up to %llu + %llu "
            "(sliding) and %llu; %d sliding pages per sequence", file, ctx, seqs,
            swa_full ? " swa-full" : "", (unsigned long long)kinds_kv,
            (unsigned long long)kinds_st, (unsigned long long)p.page_bytes,
            (unsigned long long)p.swa_page_bytes, (unsigned long long)p.slot_bytes, swa_per_seq);
    if (swa_per_seq > 0)
        HY_T_OK(p.swa_page_bytes == p.kv_bytes_per_token[HY_LAYER_ATTN_SWA] * 16 &&
                    p.page_bytes == p.kv_bytes_per_token[HY_LAYER_ATTN_FULL] * 16 &&
                    p.kv_total < p.dense_kv_total,
                "%s ctx %d x %d: sliding layers in their own group (%llu B/page), global ones "
                "%llu B/page; KV %llu < dense %llu", file, ctx, seqs,
                (unsigned long long)p.swa_page_bytes, (unsigned long long)p.page_bytes,
                (unsigned long long)p.kv_total, (unsigned long long)p.dense_kv_total);
    if (m->n_swa_layers > 0) {
        HY_T_OK(p.n_layers[HY_LAYER_ATTN_SWA] == m->n_swa_layers && w > 0 &&
                    p.window[HY_LAYER_ATTN_SWA] == w && p.window[HY_LAYER_ATTN_FULL] == 0,
                "%s ctx %d x %d: %d sliding layers of window %d shown apart from %d global ones",
                file, ctx, seqs, p.n_layers[HY_LAYER_ATTN_SWA], p.window[HY_LAYER_ATTN_SWA],
                p.n_layers[HY_LAYER_ATTN_FULL]);
    }
    if (m->n_rec_layers > 0)
        HY_T_OK(p.dense_kv_total > p.kv_total && p.state_total > 0,
                "%s ctx %d x %d: hybrid cache %llu < dense equivalent %llu", file, ctx, seqs,
                (unsigned long long)(p.kv_total + p.state_total),
                (unsigned long long)p.dense_kv_total);
    hy_model_free(m);
}

/* A backend that only reports memory: the GPU's, when it is CUDA. */
static int hy_fake_mem_rc;
static int hy_fake_mem_info(hy_backend_t *be, uint64_t *free_b, uint64_t *total_b, char *err)
{
    (void)be;
    *free_b = 8ULL << 30;
    *total_b = 16ULL << 30;
    return hy_fake_mem_rc == HY_OK ? HY_OK : hy_err(err, hy_fake_mem_rc, "cudaMemGetInfo: no device");
}

static void hy_plan_hot_case(hy_backend_t *cpu)
{
    struct hy_backend_i fi = {.name = "fake-gpu", .mem_info = hy_fake_mem_info}, none = {.name = "bare"};
    hy_backend_t fake = {&fi, NULL}, bare = {&none, NULL};
    uint64_t b = 0, host_total = 0, host_avail = 0;
    char err[HY_ERR_LEN] = "";
    int rc;

    rc = hy_plan_hot_bytes(&fake, 0, 0.5, &b, err);
    HY_T_OK(rc == HY_OK && b == 4ULL << 30,
            "hot_mb = 0: half of the device's 8 GiB free (mem_info), not the host's (%llu)",
            (unsigned long long)b);
    rc = hy_plan_hot_bytes(&fake, 100, 0.5, &b, err);
    HY_T_OK(rc == HY_OK && b == 100ULL << 20, "hot_mb = 100: 100 MiB whatever is free");
    hy_fake_mem_rc = HY_EIO;
    rc = hy_plan_hot_bytes(&fake, 0, 0.9, &b, err);
    HY_T_OK(rc == HY_EIO && strstr(err, "no device") != NULL, "a failing mem_info is reported: %s",
            err);
    rc = hy_plan_hot_bytes(&bare, 0, 0.9, &b, err);
    HY_T_OK(rc == HY_EUNSUPPORTED && strstr(err, "set [cache] hot_mb") != NULL,
            "a backend without mem_info asks for hot_mb: %s", err);
    hy_host_memory(&host_total, &host_avail);
    rc = hy_plan_hot_bytes(cpu, 0, 1.0, &b, err);
    HY_T_OK(rc == HY_OK && b > 0 && b <= host_total,
            "the CPU backend's hot tier comes from the host's MemAvailable (%llu of %llu)",
            (unsigned long long)b, (unsigned long long)host_total);
}

/* [attention] as the KV layout's blocks, and each size that is not whole
 * pages or blocks refused naming the key (or `hyserve run`'s flag). */
static void hy_plan_sparse_case(void)
{
    hy_config_t *cfg = malloc(sizeof *cfg);
    hy_config_attention_t a;
    hy_kv_sparse_t sp;
    char err[HY_ERR_LEN] = "";
    int rc, ok = 1;

    if (cfg == NULL) {
        HY_T_OK(0, "out of memory");
        return;
    }
    hy_config_defaults(cfg);
    a = cfg->attention;
    free(cfg);
    rc = hy_plan_sparse(&a, 16, false, &sp, err);
    HY_T_OK(rc == HY_OK && a.sparse == HY_CONFIG_SPARSE_OFF && sp.block_pages == 0 &&
            sp.min_tokens == 0, "sparse = off (the default): dense (%s)", rc ? err : "ok");
    a.sparse = HY_CONFIG_SPARSE_BLOCK;
    rc = hy_plan_sparse(&a, 16, false, &sp, err);
    HY_T_OK(rc == HY_OK && sp.block_pages == 4 && sp.topk == 64 && sp.sink_blocks == 1 &&
            sp.local_blocks == 4 && sp.min_tokens == 4096,
            "sparse = block, the defaults: 4-page blocks, top-64, 1 sink, 4 local, from 4096 "
            "(%s)", rc ? err : "ok");
    a.sparse_block_tokens = 24;
    ok &= hy_plan_sparse(&a, 16, false, &sp, err) == HY_EINVAL &&
          strcmp(err, "[attention] sparse_block_tokens = 24: must be a multiple of the 16-token "
                 "KV page ([cache] page_tokens)") == 0;
    a.sparse_block_tokens = 8;
    ok &= hy_plan_sparse(&a, 16, true, &sp, err) == HY_EINVAL &&
          strcmp(err, "--sparse-block-tokens = 8: must be a multiple of the 16-token KV page "
                 "([cache] page_tokens)") == 0;
    a.sparse_block_tokens = 32;
    a.sink_tokens = 48;
    ok &= hy_plan_sparse(&a, 16, false, &sp, err) == HY_EINVAL &&
          strcmp(err, "[attention] sink_tokens = 48: must be a multiple of [attention] "
                 "sparse_block_tokens (32)") == 0;
    a.sink_tokens = 0;
    a.local_tokens = 100;
    ok &= hy_plan_sparse(&a, 16, true, &sp, err) == HY_EINVAL &&
          strcmp(err, "--sparse-local-tokens = 100: must be a multiple of --sparse-block-tokens "
                 "(32)") == 0;
    HY_T_OK(ok, "sizes that are not whole pages or blocks refused, naming the key or flag (%s)",
            err);
    a.local_tokens = 64;
    ok = hy_plan_sparse(&a, 16, false, &sp, err) == HY_OK && sp.topp == 0.99f &&
         sp.max_blocks == 512;
    a.sparse_topp = 0;
    a.sparse_max_blocks = 63;
    /* top-p off: the cap is not used, whatever it is */
    ok &= hy_plan_sparse(&a, 16, false, &sp, err) == HY_OK && sp.topp == 0;
    a.sparse_topp = 0.99;
    ok &= hy_plan_sparse(&a, 16, false, &sp, err) == HY_EINVAL &&
          strcmp(err, "[attention] sparse_max_blocks = 63: must be at least [attention] "
                 "sparse_topk (64) with [attention] sparse_topp = 0.99") == 0;
    ok &= hy_plan_sparse(&a, 16, true, &sp, err) == HY_EINVAL &&
          strcmp(err, "--sparse-max-blocks = 63: must be at least --sparse-topk (64) with "
                 "--sparse-topp = 0.99") == 0;
    a.sparse_max_blocks = 64;
    ok &= hy_plan_sparse(&a, 16, false, &sp, err) == HY_OK && sp.topp == 0.99f &&
          sp.max_blocks == 64;
    HY_T_OK(ok, "top-p: 0.99 by default with a cap of 512; a cap below the top-k refused with "
            "top-p on, naming the keys or flags, not with it off (%s)", err);
}

/* With block-sparse attention each full page carries its compressed key
 * and each sequence the keys of its context's blocks: the plan quotes
 * both (sparse_key_bytes, sparse_seq_bytes, in kv_total), the backend
 * allocates exactly the pages' share and the runner gives each sequence
 * that runs exactly its share, until the sequence is dropped. */
static void hy_plan_sparse_alloc_case(hy_backend_t *be, const char *file)
{
    char err[HY_ERR_LEN], rel[128];
    hy_config_t *cfg = malloc(sizeof *cfg);
    hy_model_t *m = NULL;
    hy_plan_opts_t po = {4096, 2, 16, 64, HY_DTYPE_F16, false, {0}, 0, 0, 0, 0, 0, 0};
    hy_runner_opts_t o;
    hy_runner_t r;
    hy_plan_t p;
    uint64_t kv = 0, st = 0, want, seq = 0;
    hy_kv_seq_t sq[2];
    bool held = false, freed = false;
    int rc;

    snprintf(rel, sizeof rel, "tests/golden/tiny/%s", file);
    if (cfg == NULL || hy_model_load(&m, hy_t_srcpath(rel), be, err) != HY_OK) {
        HY_T_OK(0, "%s: load: %s", file, cfg ? err : "out of memory");
        free(cfg);
        return;
    }
    hy_config_defaults(cfg);
    cfg->attention.sparse = HY_CONFIG_SPARSE_BLOCK;
    rc = hy_plan_sparse(&cfg->attention, 16, false, &po.sparse, err);
    if (rc == HY_OK)
        rc = hy_plan_make_opts(&p, m, be, &po, err);
    hy_runner_opts_default(&o);
    o.max_tokens = 64;
    o.max_outputs = 4;
    o.max_seqs = 2;
    o.n_ctx = 4096;
    o.sparse = po.sparse;
    memset(sq, 0, sizeof sq);
    if (rc == HY_OK && (rc = hy_runner_init(&r, m, be, &o, err)) == HY_OK) {
        int32_t tok[2] = {1, 2};
        hy_runner_item_t it[2] = {{&sq[0], tok, 1, false}, {&sq[1], tok + 1, 1, false}};

        be->i->mem_allocated(be, &kv, &st);
        seq = hy_runner_sparse_seq_bytes(&r);
        rc = hy_runner_step(&r, it, 2, NULL, err);
        held = sq[0].sp_keys && sq[1].sp_keys && sq[0].sp_cap == 4096 / 64 &&
               sq[1].sp_cap == 4096 / 64;
        hy_runner_seq_release(&r, &sq[0]);
        hy_runner_seq_release(&r, &sq[1]);
        freed = !sq[0].sp_keys && !sq[1].sp_keys;
        hy_runner_free(&r);
    }
    /* per full layer a float per KV head and dimension: one key per page,
     * one per 64-token block of the 4,096-token context per sequence */
    want = (uint64_t)m->n_head_kv * (uint64_t)m->head_dim * sizeof(float) *
           (uint64_t)(m->n_kv_layers - (rc == HY_OK ? p.n_swa_kv_layers : 0));
    HY_T_OK(rc == HY_OK && p.sparse_key_bytes == want && want > 0 &&
                p.sparse_seq_bytes == want * (4096 / 64) && seq == p.sparse_seq_bytes &&
                held && freed && kv + 2 * seq == p.kv_total &&
                p.kv_total == (p.page_bytes + want) * (uint64_t)p.n_pages + 2 * seq +
                                  p.swa_page_bytes * (uint64_t)p.n_swa_pages,
            "%s sparse: %llu bytes of keys per full page and %llu per sequence (%d full "
            "layers), allocated KV %llu + 2 sequences' %llu = plan %llu (%s)", file,
            (unsigned long long)(rc == HY_OK ? p.sparse_key_bytes : 0),
            (unsigned long long)(rc == HY_OK ? p.sparse_seq_bytes : 0),
            m->n_kv_layers - (rc == HY_OK ? p.n_swa_kv_layers : 0), (unsigned long long)kv,
            (unsigned long long)seq, (unsigned long long)(rc == HY_OK ? p.kv_total : 0),
            rc ? err : "ok");
    hy_model_free(m);
    free(cfg);
}

/* A hot window: the pool holds each sequence's window (sink, window, the
 * block being filled and a step), the out arena the rest of its context;
 * both are in kv_total, and the runner's arena for n_seqs sequences is
 * exactly the plan's out_total.  Refusals name the key. */
static void hy_plan_window_case(hy_backend_t *be)
{
    char err[HY_ERR_LEN] = "", e1[HY_ERR_LEN] = "", e2[HY_ERR_LEN] = "", e3[HY_ERR_LEN] = "";
    hy_model_t *m = NULL;
    hy_kv_sparse_t sp = {4, 32, 1, 4, 4096, 0, 0}, off = {0};
    hy_plan_opts_t po = {65536, 2, 16, 512, HY_DTYPE_F16, false, sp, 0, 0, 0, 0, 0, 0};
    hy_runner_opts_t o;
    hy_runner_t r;
    hy_plan_t p;
    int32_t hot = 0, x;
    uint64_t arena = 0;
    int rc[4];

    if (hy_model_load(&m, hy_t_srcpath("tests/golden/tiny/llama.gguf"), be, err) != HY_OK) {
        HY_T_OK(0, "llama.gguf: load: %s", err);
        return;
    }
    rc[0] = hy_plan_hot_window(10240, &sp, 16, 512, false, &hot, err);
    po.hot_blocks = hot;
    if (rc[0] == HY_OK)
        rc[0] = hy_plan_make_opts(&p, m, be, &po, err);
    hy_runner_opts_default(&o);
    o.max_tokens = 512;
    o.max_seqs = 2;
    o.n_ctx = 65536;
    o.sparse = sp;
    o.hot_blocks = hot;
    o.out_pages = rc[0] == HY_OK ? p.out_seq_pages * 2 : 1;
    o.n_pages = rc[0] == HY_OK ? p.n_pages : 1;
    if (rc[0] == HY_OK && (rc[0] = hy_runner_init(&r, m, be, &o, err)) == HY_OK) {
        arena = hy_runner_out_bytes(&r);
        hy_runner_free(&r);
    }
    /* 160 blocks of 64 tokens hot, 1 sink: 4,096 pages of the context,
     * 644 out; the pool 2 x ((1 + 160 + 1) x 4 + 32 + 1) pages */
    HY_T_OK(rc[0] == HY_OK && hot == 160 && p.n_pages == 2 * (162 * 4 + 33) &&
                p.out_seq_pages == 4096 - 161 * 4 && p.out_ram == arena &&
                p.out_total == 2 * (uint64_t)p.out_seq_pages * p.page_bytes &&
                p.out_warm_pages == 2 * p.out_seq_pages && p.out_file == 0 &&
                p.out_ram == p.out_total + hy_plan_out_index_bytes(p.out_warm_pages,
                                                                   p.out_warm_pages, 1) &&
                p.kv_total == (p.page_bytes + p.sparse_key_bytes) * (uint64_t)p.n_pages +
                                  2 * p.sparse_seq_bytes + p.out_ram,
            "hot window of 10,240 tokens at 65,536: %d pool pages, %d out pages a sequence, "
            "the runner's arena %llu = plan %llu (%s)", rc[0] == HY_OK ? p.n_pages : 0,
            rc[0] == HY_OK ? p.out_seq_pages : 0, (unsigned long long)arena,
            (unsigned long long)(rc[0] == HY_OK ? p.out_ram : 0), rc[0] ? err : "ok");
    /* 1 MiB of RAM for the arena: 256 of its 6,904 pages of 4 KiB, the
     * rest in a spill file with a place for every page; the runner's RAM
     * is the plan's */
    if (rc[0] == HY_OK) {
        hy_plan_t q;
        char dir[] = "/tmp/hy-plan-XXXXXX";
        uint64_t runs = 0; /* the store checks a head's K or V rows of a layer's page */

        po.out_warm_bytes = 1 << 20;
        rc[0] = hy_plan_make_opts(&q, m, be, &po, err);
        o.out_warm = rc[0] == HY_OK ? q.out_warm_pages : 0;
        o.out_dir = mkdtemp(dir);
        arena = 0;
        if (rc[0] == HY_OK && (rc[0] = hy_runner_init(&r, m, be, &o, err)) == HY_OK) {
            arena = hy_runner_out_bytes(&r);
            runs = r.out->runs;
            hy_runner_free(&r);
        }
        if (o.out_dir)
            rmdir(dir);
        HY_T_OK(rc[0] == HY_OK && p.page_bytes == 4096 && q.out_warm_pages == 256 &&
                    q.out_total == p.out_total && q.out_file == q.out_total &&
                    q.out_ram == 256 * q.page_bytes +
                                     hy_plan_out_index_bytes(2 * q.out_seq_pages, 256, runs) &&
                    runs == 2 * (uint64_t)m->n_kv_layers * (uint64_t)m->n_head_kv &&
                    q.out_ram == arena && q.kv_total == p.kv_total - p.out_ram + q.out_ram,
                "seq_warm_mb = 1: %d pages in RAM (%llu bytes with the index = the runner's "
                "%llu), a %llu-byte spill file (%s)", q.out_warm_pages,
                (unsigned long long)q.out_ram, (unsigned long long)arena,
                (unsigned long long)q.out_file, rc[0] ? err : "ok");
        po.out_warm_bytes = 1000;
        rc[0] = hy_plan_make_opts(&q, m, be, &po, err);
        HY_T_OK(rc[0] == HY_ERANGE && strstr(err, "1000 bytes of RAM for the out arena hold no "
                                                  "page"),
                "seq_warm_mb below a page refused (%s)", err);
        rc[0] = HY_OK;
    }
    /* one sequence: below the window every page is in the pool with its
     * key; at 20,480 tokens the 636 pages older than sink + window are out */
    HY_T_OK(rc[0] == HY_OK &&
                hy_plan_seq_kv_bytes(&p, 10240) ==
                    640 * (p.page_bytes + p.sparse_key_bytes) + p.sparse_seq_bytes &&
                hy_plan_seq_kv_bytes(&p, 20480) ==
                    644 * (p.page_bytes + p.sparse_key_bytes) + 636 * p.page_bytes +
                        p.sparse_seq_bytes,
            "one sequence's bytes with the window: all hot at 10,240 tokens, 636 pages out at "
            "20,480");
    rc[1] = hy_plan_hot_window(10240, &off, 16, 512, false, &x, e1);
    rc[2] = hy_plan_hot_window(10000, &sp, 16, 512, false, &x, e2);
    rc[3] = hy_plan_hot_window(2048, &sp, 16, 512, true, &x, e3);
    HY_T_OK(rc[1] == HY_EINVAL && strstr(e1, "[cache] hot_tokens_per_seq = 10240: needs "
                                             "block-sparse attention") &&
                rc[2] == HY_EINVAL && strstr(e2, "= 10000: must be a multiple of the 64-token") &&
                rc[3] == HY_EINVAL && strstr(e3, "--hot-tokens = 2048: must be at least "
                                                 "sparse_min_tokens (4096)"),
            "hot windows refused: without sparse (%s), not whole blocks (%s), below "
            "sparse_min_tokens (%s)", e1, e2, e3);
    {
        uint64_t b = 1;

        rc[1] = hy_plan_seq_warm(64, 0, "/tmp", false, &b, e1);
        rc[2] = hy_plan_seq_warm(64, 160, "", true, &b, e2);
        rc[3] = hy_plan_seq_warm(64, 160, "/tmp", false, &b, e3);
        HY_T_OK(rc[1] == HY_EINVAL && strstr(e1, "[cache] seq_warm_mb = 64: needs a hot window "
                                                 "([cache] hot_tokens_per_seq)") &&
                    rc[2] == HY_EINVAL && strstr(e2, "--seq-warm-mb = 64: needs --spill-dir") &&
                    rc[3] == HY_OK && b == 64u << 20,
                "seq_warm_mb: refused without a window (%s) or a directory (%s); 64 MiB", e1, e2);
    }
    hy_model_free(m);
}

int main(void)
{
    hy_backend_opts_t bo = {.n_threads = 1};
    hy_backend_t *be = NULL;
    char err[HY_ERR_LEN];
    /* the program before anything it allocates: the bound's image */
    uint64_t image = hy_plan_image_bytes(err);
    static const int32_t ctxs[] = {1, 100, 4096};
    static const int32_t seqs[] = {1, 3};
    /* models without recurrent layers first: the shared backend keeps the
     * last runner's state slots allocated (runner.c only sets them up) */
    static const char *files[] = {"llama.gguf", "gemma3.gguf", "qwen3next.gguf"};

    if (image == 0) {
        HY_T_OK(0, "image: %s", err);
        return hy_t_done();
    }
    /* first: the peak resident memory it checks is the process's */
    hy_plan_process_case(image);
    if (hy_backend_cpu_new(&be, &bo, err) != HY_OK) {
        HY_T_OK(0, "cpu backend: %s", err);
        return hy_t_done();
    }
    hy_plan_hot_case(be);
    hy_plan_sparse_case();
    hy_plan_sparse_alloc_case(be, "llama.gguf");
    hy_plan_window_case(be);
    hy_plan_sparse_alloc_case(be, "gemma3.gguf");
    for (size_t f = 0; f < HY_ARRAY_LEN(files); f++) {
        for (size_t c = 0; c < HY_ARRAY_LEN(ctxs); c++)
            for (size_t s = 0; s < HY_ARRAY_LEN(seqs); s++)
                hy_plan_case(be, files[f], ctxs[c], seqs[s], false);
        /* llama.cpp's --swa-full: every position of the sliding layers too */
        if (strcmp(files[f], "gemma3.gguf") == 0)
            hy_plan_case(be, files[f], 4096, 3, true);
    }
    be->i->free(be);
    return hy_t_done();
}
