/*
 * engine_proc.c - the engine process (engine_proc.h): loads the backend
 * and the model, attaches to the master's segment, runs the engine thread
 * on its request slots until the master says stop (SIGTERM) or dies
 * (PR_SET_PDEATHSIG: SIGKILL, so an engine never outlives its master and
 * never serves a segment nobody supervises).  The KV tiers below the page
 * table live here too ([cache] hot_mb / memory_fraction size the hot tier,
 * warm_mb, disk_dir and disk_mb the tier store): a new engine builds its
 * store afresh, and its disk tier re-indexes the directory, so prefixes
 * written there survive an engine crash.
 */
#include "server/engine_proc.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/select.h"
#include "common/log.h"
#include "common/sha256.h"
#include "engine/engine.h"
#include "engine/tiering.h"
#include "ipc/ring.h"
#include "ipc/tier.h"
#include "kv/plan.h"
#include "server/metrics.h"

typedef struct {
    const hy_engine_proc_args_t *a;
    hy_backend_t *be;
    hy_model_t *model;
    hy_engine_opts_t eo;
    hy_shm_t *shm;
    hy_tier_t *tier;  /* warm/cold tiers under the page table, or NULL */
    bool sha_seen;    /* the master's hash result was handed to the disk tier */
    hy_engine_t *eng;
} ep_t;

static int64_t ep_now_ms(void)
{
    return hy_shm_now_ns() / 1000000;
}

/* With a hot window the runner's out arena holds every sequence's old
 * pages at the full context, in host memory committed as they arrive: the
 * first engine refuses one the host could never hold (a later one has
 * the same config; what happens to be free at a restart must not turn it
 * into a restart loop). */
static int ep_check_out_arena(ep_t *ep, char *err)
{
    const hy_engine_opts_t *eo = &ep->eo;
    uint64_t total = 0, avail = 0;
    hy_plan_t plan;
    char sub[HY_ERR_LEN];
    int rc;

    if (eo->hot_blocks == 0 || ep->a->hello_fd < 0)
        return HY_OK;
    if ((rc = hy_engine_plan(ep->model, ep->be, eo, &plan, sub)) != HY_OK)
        return hy_err(err, rc, "[cache] seq_warm_mb = %u: %s", ep->a->cfg->cache.seq_warm_mb,
                      sub);
    hy_host_memory(&total, &avail);
    if (avail > 0 && plan.out_ram > avail)
        return hy_err(err, HY_ERANGE, "[cache] hot_tokens_per_seq = %u: the out arena of %d "
                      "sequences at %d tokens (%llu MiB in RAM) exceeds the host's %llu MiB "
                      "available (lower [engine] max_seqs or max_context, or set [cache] "
                      "seq_warm_mb)",
                      ep->a->cfg->cache.hot_tokens_per_seq, eo->max_seqs, eo->n_ctx,
                      (unsigned long long)(plan.out_ram >> 20),
                      (unsigned long long)(avail >> 20));
    return HY_OK;
}

/* The engine's options from the config; the memory budget (the hot
 * tier) is [cache] hot_mb, or memory_fraction of what the backend's memory
 * (the GPU's with CUDA) has free now, after the weights.  Only the first
 * engine sizes the page table with it; later ones take the segment's. */
static int ep_engine_opts(ep_t *ep, char *err)
{
    const hy_config_t *cfg = ep->a->cfg;
    hy_engine_opts_t *eo = &ep->eo;
    int rc;

    memset(eo, 0, sizeof *eo);
    eo->max_batch_tokens = (int32_t)cfg->engine.max_batch_tokens;
    eo->max_seqs = (int32_t)cfg->engine.max_seqs;
    eo->n_ctx = (int32_t)(cfg->engine.max_context
                              ? HY_MIN(cfg->engine.max_context, (uint32_t)ep->model->n_ctx_train)
                              : (uint32_t)ep->model->n_ctx_train);
    eo->page_tokens = (int32_t)cfg->cache.page_tokens;
    eo->kv_type = cfg->cache.kv_type == HY_CONFIG_KV_F32    ? HY_DTYPE_F32
                  : cfg->cache.kv_type == HY_CONFIG_KV_Q8_0 ? HY_DTYPE_Q8_0
                                                            : HY_DTYPE_F16;
    eo->checkpoint_interval = (int32_t)cfg->cache.checkpoint_interval;
    eo->n_request_slots = (int32_t)HY_MIN(cfg->server.max_queue + cfg->engine.max_seqs, 65536u);
    eo->tok = NULL; /* the engine loads its own (grammar masks) */
    eo->out_dir = cfg->cache.disk_dir;
    if ((rc = hy_plan_sparse(&cfg->attention, eo->page_tokens, false, &eo->sparse, err)) != HY_OK)
        return rc;
    if ((rc = hy_plan_hot_window(cfg->cache.hot_tokens_per_seq, &eo->sparse, eo->page_tokens,
                                 eo->max_batch_tokens, false, &eo->hot_blocks, err)) != HY_OK ||
        (rc = hy_plan_seq_warm(cfg->cache.seq_warm_mb, eo->hot_blocks, cfg->cache.disk_dir,
                               false, &eo->out_warm_bytes, err)) != HY_OK ||
        (rc = ep_check_out_arena(ep, err)) != HY_OK)
        return rc;
    return hy_plan_hot_bytes(ep->be, cfg->cache.hot_mb, cfg->cache.memory_fraction,
                             &eo->memory_bytes, err);
}

/* Which key a tier store error is about (its message says which tier). */
static int ep_tier_err(const hy_config_t *cfg, int rc, const char *why, char *err)
{
    if (strncmp(why, "warm tier", 9) == 0)
        return hy_err(err, rc, "[cache] warm_mb = %u: %s", cfg->cache.warm_mb, why);
    if (strncmp(why, "disk budget", 11) == 0)
        return hy_err(err, rc, "[cache] disk_mb = %u: %s", cfg->cache.disk_mb, why);
    return hy_err(err, rc, "[cache] disk_dir = %s: %s", cfg->cache.disk_dir, why);
}

/* The warm tier's memory from the backend (pinned for a GPU's copies). */
static void *ep_host_alloc(void *ctx, size_t bytes)
{
    hy_backend_t *be = ctx;

    return be->i->host_alloc(be, bytes);
}

static void ep_host_free(void *ctx, void *p, size_t bytes)
{
    hy_backend_t *be = ctx;

    be->i->host_free(be, p, bytes);
}

/* The warm and cold tiers ([cache] warm_mb, disk_dir, disk_mb), sized in
 * the plan's pages and checkpoints for the segment's page table; the disk
 * tier comes online when the model's hash is known (ep_tier_hash).  None
 * when warm_mb is 0. */
static int ep_start_tiers(ep_t *ep, char *err)
{
    const hy_config_t *cfg = ep->a->cfg;
    const hy_shm_params_t *sp = &hy_shm_header(ep->shm)->params;
    const hy_engine_opts_t *eo = &ep->eo;
    bool on_host = ep->be->i->host_alloc == NULL;
    hy_tier_opts_t to;
    hy_plan_t plan;
    uint64_t total = 0, avail = 0, warm = (uint64_t)cfg->cache.warm_mb << 20;
    struct stat sb;
    char why[HY_ERR_LEN], model[PATH_MAX];
    int rc;

    if (cfg->cache.warm_mb == 0) {
        if (cfg->cache.disk_dir[0])
            return hy_err(err, HY_EINVAL, "[cache] disk_dir = %s: needs [cache] warm_mb > 0 "
                          "(pages are staged in warm on their way to and from disk)",
                          cfg->cache.disk_dir);
        return HY_OK;
    }
    /* On the CPU both tiers are host RAM: together they must fit.  Checked
     * by the first engine only: a later one has the same config, and what
     * happens to be free at a restart must not turn it into a restart loop. */
    hy_host_memory(&total, &avail);
    if (ep->a->hello_fd >= 0 && avail > 0 && warm + (on_host ? eo->memory_bytes : 0) > avail)
        return hy_err(err, HY_ERANGE, "[cache] warm_mb = %u: with the hot tier's %llu MiB it "
                      "exceeds the host's %llu MiB available (lower memory_fraction or set "
                      "hot_mb)", cfg->cache.warm_mb,
                      (unsigned long long)(on_host ? eo->memory_bytes >> 20 : 0),
                      (unsigned long long)(avail >> 20));
    if ((rc = hy_engine_plan(ep->model, ep->be, eo, &plan, err)) != HY_OK)
        return rc;
    memset(&to, 0, sizeof to);
    hy_tiering_store_opts(ep->model, &plan, sp->n_pages, sp->n_swa_pages, &to);
    to.warm_bytes = warm;
    to.disk_dir = cfg->cache.disk_dir;
    to.disk_bytes = (uint64_t)cfg->cache.disk_mb << 20;
    to.ident.model_bytes = stat(cfg->model.path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    to.model_path = realpath(cfg->model.path, model) ? model : cfg->model.path;
    to.stats = hy_shm_stats(ep->shm);
    if (!on_host && ep->be->i->host_free != NULL) {
        to.host_alloc = ep_host_alloc;
        to.host_free = ep_host_free;
        to.host_ctx = ep->be;
    }
    if ((rc = hy_tier_create(&ep->tier, &to, why)) != HY_OK)
        return ep_tier_err(cfg, rc, why, err);
    ep->eo.tiers = ep->tier;
    hy_log(LOG_INFO, "tiers", "warm_bytes=%llu disk_dir=%s disk_bytes=%llu page_bytes=%llu "
           "swa_page_bytes=%llu checkpoint_bytes=%llu warm_pages=%d warm_swa_pages=%d "
           "warm_checkpoints=%d", (unsigned long long)warm,
           cfg->cache.disk_dir[0] ? cfg->cache.disk_dir : "-",
           (unsigned long long)to.disk_bytes, (unsigned long long)to.unit_bytes[HY_TIER_PAGE],
           (unsigned long long)to.unit_bytes[HY_TIER_SWA],
           (unsigned long long)to.unit_bytes[HY_TIER_CKPT], hy_tier_slots(ep->tier, HY_TIER_PAGE),
           hy_tier_slots(ep->tier, HY_TIER_SWA), hy_tier_slots(ep->tier, HY_TIER_CKPT));
    return HY_OK;
}

static int ep_hex_nibble(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The model's SHA-256 is the master's (its hash thread publishes it in the
 * segment header, coordinator.c); the disk tier waits for it.  Polled from
 * the engine process's main loop until the master has an answer; an engine
 * started after it takes it at once and re-indexes the directory. */
static void ep_tier_hash(ep_t *ep)
{
    const hy_shm_header_t *h = hy_shm_header(ep->shm);
    uint32_t st = atomic_load_explicit(&h->model_sha256_state, memory_order_acquire);
    uint8_t d[HY_SHA256_LEN];

    if (ep->tier == NULL || ep->sha_seen || st == HY_SHM_SHA256_PENDING)
        return;
    ep->sha_seen = true;
    for (int i = 0; st == HY_SHM_SHA256_DONE && i < HY_SHA256_LEN; i++) {
        int hi = ep_hex_nibble(h->model_sha256[2 * i]);
        int lo = ep_hex_nibble(h->model_sha256[2 * i + 1]);

        if (hi < 0 || lo < 0)
            st = HY_SHM_SHA256_FAILED;
        d[i] = (uint8_t)(hi << 4 | lo);
    }
    if (st == HY_SHM_SHA256_DONE)
        hy_tier_set_model(ep->tier, d);
    else
        hy_tier_disk_off(ep->tier, "the model file could not be hashed");
}

/* A stop soon after a first start (no model.id in the disk directory
 * yet) can come before the master has hashed the model: the disk tier is
 * still waiting for it and the hot tier's pages would not be written down,
 * so the next start would miss them.  The hash gets a bounded while
 * (HY_EP_HASH_WAIT_MS, polled like the main loop does: well inside the 5 s
 * the master grants a stopping engine before SIGKILL, CO_KILL_GRACE_MS, so
 * the writes still fit); past it the pages are dropped with a log line. */
#define HY_EP_HASH_WAIT_MS 3000

static void ep_tier_hash_wait(ep_t *ep)
{
    struct timespec step = {0, 10 * 1000000};

    for (int waited = 0; ep->tier != NULL && !ep->sha_seen && waited < HY_EP_HASH_WAIT_MS;
         waited += 10) {
        ep_tier_hash(ep);
        if (!ep->sha_seen)
            nanosleep(&step, NULL);
    }
    if (ep->tier != NULL && !ep->sha_seen)
        hy_log(LOG_WARNING, "tier_persist_skipped",
               "reason=\"the model's hash was not known within %d ms: the disk tier never came "
               "online\"", HY_EP_HASH_WAIT_MS);
}

/* The kernel the backend runs for each layer kind present and for each
 * weight type the matmuls read, "kind:kernel,..." into buf: logged at load
 * so that a silent fallback to a slower path is visible (an operator's
 * first question when a new model is slow). */
static void ep_kernels(const hy_model_t *m, hy_backend_t *be, char *buf, size_t cap)
{
    static const struct { hy_layer_kind_t kind; const char *op; } ops[] = {
        {HY_LAYER_ATTN_FULL, "attention"}, {HY_LAYER_ATTN_SWA, "attention"},
        {HY_LAYER_GDN, "gdn"},             {HY_LAYER_MAMBA2, "ssd"},
        {HY_LAYER_SHORTCONV, "conv"},      {HY_LAYER_LIGHTNING, "lightning"},
    };
    bool seen_kind[HY_LAYER_NONE + 1] = {false}, seen_type[HY_DTYPE_COUNT] = {false};
    size_t len = 0;
    char k[96];
    int64_t t;

    buf[0] = '\0';
    if (be->i->kernel_name == NULL) {
        snprintf(buf, cap, "backend:%s", be->i->name);
        return;
    }
    for (int32_t l = 0; l < m->n_layer; l++)
        seen_kind[m->layers[l].kind] = true;
    for (size_t i = 0; i < HY_ARRAY_LEN(ops); i++) {
        if (!seen_kind[ops[i].kind])
            continue;
        be->i->kernel_name(be, ops[i].op, NULL, m->head_dim, k, sizeof k);
        len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, "%s%s:%s", len ? "," : "",
                                hy_layer_kind_name(ops[i].kind), k);
        if (len >= cap)
            return;
    }
    /* matmul kernels by the weight types of 2-D tensors (the matmuls) */
    for (t = 0; t < hy_gguf_n_tensors(m->gguf); t++) {
        const hy_gguf_tensor_t *ti = hy_gguf_tensor(m->gguf, t);
        hy_weight_t w = {0};

        if (ti->n_dims < 2 || ti->type >= HY_DTYPE_COUNT || seen_type[ti->type])
            continue;
        seen_type[ti->type] = true;
        w.type = (hy_dtype_t)ti->type;
        be->i->kernel_name(be, "matmul", &w, 0, k, sizeof k);
        len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, "%smatmul:%s",
                                len ? "," : "", k);
        if (len >= cap)
            return;
    }
}

/* One line an operator reads first: what was loaded, how memory went; the
 * same memory facts go to the stats for /metrics. */
static void ep_log_loaded(const ep_t *ep)
{
    const hy_shm_params_t *sp = &hy_shm_header(ep->shm)->params;
    uint64_t weights = 0, kv_bytes = 0, st_bytes = 0, page_bytes[HY_KV_GROUPS];
    char kernels[768];

    for (int64_t t = 0; t < hy_gguf_n_tensors(ep->model->gguf); t++)
        weights += hy_gguf_tensor(ep->model->gguf, t)->nbytes;
    ep->be->i->mem_allocated(ep->be, &kv_bytes, &st_bytes);
    hy_engine_page_bytes(ep->eng, page_bytes);
    hy_metrics_set_memory(ep->shm, weights, page_bytes[HY_KV_FULL], page_bytes[HY_KV_SWA],
                          st_bytes);
    ep_kernels(ep->model, ep->be, kernels, sizeof kernels);
    const bool huge = ep->be->i->weights_huge_pages && ep->be->i->weights_huge_pages(ep->be);
    const size_t huge_bytes = hy_gguf_huge_bytes(ep->model->gguf);
    /* asked for and not given: THP off in the kernel (or no memory to
     * compact), and the copy then only costs the page cache's sharing */
    if (huge && huge_bytes < hy_gguf_file_size(ep->model->gguf) / 2)
        hy_log(LOG_WARNING, "weights_not_on_huge_pages",
               "model=%s file_bytes=%zu huge_page_bytes=%zu detail=%s", ep->a->cfg->model.path,
               hy_gguf_file_size(ep->model->gguf), huge_bytes,
               "the kernel placed less than half the weights on huge pages: see "
               "/sys/kernel/mm/transparent_hugepage/enabled (madvise or always), or set "
               "[engine] weights_memory = mmap");
    hy_log(LOG_INFO, "model_loaded",
           "model=%s arch=%s layers=%d weights_bytes=%llu weights_memory=%s "
           "huge_page_bytes=%zu kv_bytes=%llu state_bytes=%llu "
           "pages=%d swa_pages=%d page_tokens=%d state_slots=%d checkpoint_slots=%d backend=%s "
           "kernels=%s pid=%d ms=%lld",
           ep->a->cfg->model.path, ep->model->arch_name, ep->model->n_layer,
           (unsigned long long)weights, huge ? "huge_pages" : "mmap", huge_bytes,
           (unsigned long long)kv_bytes,
           (unsigned long long)st_bytes, sp->n_pages, sp->n_swa_pages, sp->page_tokens,
           sp->n_state_slots, sp->n_checkpoint_slots, ep->be->i->name, kernels, (int)getpid(),
           (long long)(ep_now_ms() - ep->a->t0_ms));
}

int hy_engine_proc_pipe_io(int fd, void *buf, size_t n, bool write_it)
{
    char *p = buf;

    while (n > 0) {
        ssize_t k = write_it ? write(fd, p, n) : read(fd, p, n);

        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return HY_EIO;
        p += k;
        n -= (size_t)k;
    }
    return HY_OK;
}

/* The first engine: the segment's numbers (and the model's facts) to the
 * master, then wait for its go.  EOF: the master is gone or refused. */
static int ep_hello(ep_t *ep, char *err)
{
    const hy_engine_proc_args_t *a = ep->a;
    hy_engine_hello_t h;
    hy_pt_params_t pp;
    char go = 0;
    ssize_t k;
    int rc;

    memset(&h, 0, sizeof h);
    if ((rc = hy_engine_pt_params(ep->model, ep->be, &ep->eo, &pp, err)) != HY_OK)
        return rc;
    hy_shm_params_for(&h.sp, &pp, ep->eo.n_request_slots, hy_engine_n_ctx(ep->model, &ep->eo));
    h.n_ctx = hy_engine_n_ctx(ep->model, &ep->eo);
    h.n_vocab = ep->model->n_vocab;
    for (int32_t l = 0; l < ep->model->n_layer; l++)
        h.layer_counts[ep->model->layers[l].kind]++;
    snprintf(h.arch, sizeof h.arch, "%s", ep->model->arch_name);
    if (hy_engine_proc_pipe_io(a->hello_fd, &h, sizeof h, true) != HY_OK)
        return hy_err(err, HY_EIO, "cannot reach the master: %s", strerror(errno));
    do
        k = read(a->go_fd, &go, 1);
    while (k < 0 && errno == EINTR);
    if (k != 1 || go != 'y')
        return hy_err(err, HY_EIO, "the master did not create the segment");
    return HY_OK;
}

/* Tells a waiting master why the first engine cannot start (its log line
 * says it too, but the master prints the reason on `hyserve serve`'s stderr);
 * why "" says it runs (the second hello, after the segment's go). */
static void ep_tell_master(const ep_t *ep, const char *why)
{
    hy_engine_hello_t h;

    if (ep->a->hello_fd < 0)
        return;
    memset(&h, 0, sizeof h);
    snprintf(h.err, sizeof h.err, "%.255s", why);
    (void)hy_engine_proc_pipe_io(ep->a->hello_fd, &h, sizeof h, true);
}

/* Backend, model, the segment (sized by us the first time), the engine. */
static int ep_start(ep_t *ep, char *err)
{
    const hy_config_t *cfg = ep->a->cfg;
    hy_backend_opts_t bo = {.n_threads = (int)cfg->model.threads,
                            .act_bits = cfg->engine.activation_bits,
                            .weights_memory = cfg->engine.weights_memory ==
                                                      HY_CONFIG_WEIGHTS_MMAP
                                                  ? HY_WEIGHTS_MMAP
                                                  : HY_WEIGHTS_HUGE_PAGES};
    hy_req_source_t src;
    int rc;

    if ((rc = hy_backend_new(&ep->be, cfg->engine.backend == HY_CONFIG_BACKEND_CUDA ? "cuda"
                                                                                     : "cpu",
                             &bo, err)) != HY_OK ||
        (rc = hy_model_load(&ep->model, cfg->model.path, ep->be, err)) != HY_OK)
        return rc;
    if ((rc = ep_engine_opts(ep, err)) != HY_OK)
        return rc;
    if (ep->a->hello_fd >= 0 && (rc = ep_hello(ep, err)) != HY_OK)
        return rc;
    if ((rc = hy_shm_attach(&ep->shm, cfg->server.instance, err)) != HY_OK)
        return rc;
    /* a restarted engine runs on the page table the segment has */
    ep->eo.n_request_slots = hy_shm_header(ep->shm)->params.n_request_slots;
    ep->eo.page_tokens = hy_shm_header(ep->shm)->params.page_tokens;
    ep->eo.stats = hy_shm_stats(ep->shm);
    if ((rc = ep_start_tiers(ep, err)) != HY_OK)
        return rc;
    ep_tier_hash(ep);
    hy_ring_source(ep->shm, &src);
    if ((rc = hy_engine_create(&ep->eng, ep->model, ep->be, hy_shm_pt(ep->shm), &src, &ep->eo,
                               err)) != HY_OK)
        return rc;
    ep_log_loaded(ep);
    return hy_engine_start(ep->eng, err);
}

int hy_engine_proc_main(const hy_engine_proc_args_t *a)
{
    char err[HY_ERR_LEN];
    sigset_t mask;
    ep_t ep;
    int sig = 0;
    int32_t log_gen = atomic_load(a->log_gen);

    memset(&ep, 0, sizeof ep);
    ep.a = a;
    /* Never outlive the master: SIGKILL, not SIGTERM, because nothing
     * would be left to supervise or drain what we hold. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != a->master)
        return 1;
    prctl(PR_SET_NAME, "hyserve-engine");
    /* SIGTERM/SIGINT come to the sigtimedwait below; the engine thread
     * inherits the mask. */
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_SETMASK, &mask, NULL);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    if (ep_start(&ep, err) != HY_OK) {
        hy_log(LOG_ERR, "engine_start_failed", "pid=%d err=%s", (int)getpid(), err);
        ep_tell_master(&ep, err);
        return 1;
    }
    if (a->hello_fd >= 0) {
        ep_tell_master(&ep, "");
        close(a->hello_fd);
    }
    /* the master reads this to say the restart is over (and how long it took) */
    atomic_store(&hy_shm_header_rw(ep.shm)->engine_state, HY_SHM_ENGINE_RUNNING);
    hy_shm_engine_kick(ep.shm);
    while (sig != SIGTERM && sig != SIGINT) {
        /* every 10 ms until the disk tier has the model's hash: pages
         * demoted before it is online are never written down, and a short
         * run (a test, a quick restart) would lose them */
        struct timespec ts = {0, (ep.tier != NULL && !ep.sha_seen ? 10 : 200) * 1000000};
        int32_t gen = atomic_load(a->log_gen);

        if (gen != log_gen) { /* the master reloaded: its log level */
            hy_log_open(a->log_ident, a->cfg->log.facility, atomic_load(a->log_level),
                        a->cfg->log.to_stderr);
            log_gen = gen;
        }
        sig = sigtimedwait(&mask, NULL, &ts);
        ep_tier_hash(&ep);
        /* the death signal covers a master that dies from now on; this
         * covers one that died before prctl took effect */
        if (getppid() != a->master)
            break;
    }
    hy_log(LOG_INFO, "engine_stopping", "pid=%d signal=%d", (int)getpid(), sig);
    hy_engine_stop(ep.eng);
    ep_tier_hash_wait(&ep);
    /* the hot tier's cached pages to disk, so a restart finds them */
    hy_engine_persist_tiers(ep.eng);
    hy_engine_free(ep.eng);
    hy_tier_free(ep.tier); /* after the writes it has queued */
    hy_shm_close(ep.shm);
    hy_model_free(ep.model);
    ep.be->i->free(ep.be);
    return 0;
}
