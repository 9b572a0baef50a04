/*
 * coordinator.c - `hyserve serve`: the process that owns the model.  It
 * loads the config, the model (CPU backend), tokenizer and chat template,
 * creates the shared segment sized by the engine, starts the engine thread,
 * opens the FastCGI socket and preforks the workers; then it supervises:
 * a dead worker is logged (with its signal), the responses it was writing
 * are aborted (guard.h), its requests are reaped and a new one is forked
 * with backoff.  SIGTERM drains (503 for new work, in-flight
 * streams finish, up to server.drain_seconds) and exits; SIGHUP reloads what
 * can change without the model (log level, facility, stderr copy).
 */
#include "server/coordinator.h"
#include "server/access.h"
#include "server/guard.h"
#include "server/worker.h"

#include "config.h" /* PACKAGE_VERSION */

#include <errno.h>
#include <fcgiapp.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/select.h"
#include "common/log.h"
#include "common/sha256.h"
#include "engine/engine.h"
#include "engine/tiering.h"
#include "ipc/tier.h"
#include "kv/plan.h"
#include "model/model.h"
#include "server/metrics.h"

#define CO_MAX_SETS 64
#define CO_BACKOFF_MIN_MS 100
#define CO_BACKOFF_MAX_MS 5000
#define CO_STABLE_MS 10000 /* a worker that lived this long resets its backoff */
#define CO_KILL_GRACE_MS 5000

typedef struct {
    pid_t pid;        /* 0 = not running */
    int64_t born_ms;
    int64_t respawn_at_ms;
    int backoff_ms;
    hy_guard_t guard; /* the connections its worker answers (guard.h) */
} co_slot_t;

typedef struct {
    const char *ini;
    const char *sets[CO_MAX_SETS];
    int n_sets;
} co_args_t;

static char co_worker_ident[HY_CONFIG_NAME_LEN + 8];

static int64_t co_now_ms(void)
{
    return hy_shm_now_ns() / 1000000;
}

/* Config file (or defaults) plus every --set, in order. */
static int co_load_config(hy_config_t *cfg, const co_args_t *a, char *err)
{
    int i, rc;

    if (a->ini != NULL) {
        if ((rc = hy_config_load(cfg, a->ini, err)) != HY_OK)
            return rc;
    } else {
        hy_config_defaults(cfg);
    }
    for (i = 0; i < a->n_sets; i++) {
        char key[256];
        const char *eq = strchr(a->sets[i], '=');

        if (eq == NULL || (size_t)(eq - a->sets[i]) >= sizeof key)
            return hy_err(err, HY_EINVAL, "--set '%s': expected section.key=value", a->sets[i]);
        memcpy(key, a->sets[i], (size_t)(eq - a->sets[i]));
        key[eq - a->sets[i]] = '\0';
        if ((rc = hy_config_set(cfg, key, eq + 1, err)) != HY_OK)
            return rc;
    }
    return HY_OK;
}

/* FCGX_OpenSocket unlinks whatever is at the path; refuse if a live server
 * answers there (a second instance started by mistake). */
static int co_socket_in_use(const char *path)
{
    struct sockaddr_un sa;
    int fd, in_use;

    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    in_use = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return in_use;
}

/* key: "socket" or "control_socket", for the messages */
static int co_open_socket(const hy_config_t *cfg, const char *path, const char *key, int *out,
                          char *err)
{
    int fd;

    if (co_socket_in_use(path))
        return hy_err(err, HY_EINVAL, "[server] %s = %s: another server is listening there",
                      key, path);
    fd = FCGX_OpenSocket(path, 128);
    if (fd < 0)
        return hy_err(err, HY_EIO, "[server] %s = %s: cannot listen: %s", key, path,
                      strerror(errno));
    /* FCGX_OpenSocket creates it under the umask and never chmods. */
    if (chmod(path, cfg->server.socket_mode) != 0) {
        close(fd);
        return hy_err(err, HY_EIO, "chmod %s: %s", path, strerror(errno));
    }
    if (cfg->server.socket_group[0]) {
        struct group *g = getgrnam(cfg->server.socket_group);

        if (g == NULL || chown(path, (uid_t)-1, g->gr_gid) != 0) {
            close(fd);
            return hy_err(err, HY_EIO, "[server] socket_group = %s: %s", cfg->server.socket_group,
                          g == NULL ? "no such group" : strerror(errno));
        }
    }
    *out = fd;
    return HY_OK;
}

/* The model's template (or [model] chat_template), compiled once and test
 * rendered so a template that cannot render fails at load, not per request. */
static int co_load_template(const hy_config_t *cfg, hy_model_t *m, hy_worker_ctx_t *w,
                            hy_chat_tmpl_t **out, char *err)
{
    hy_chat_src_t s;
    char *src = NULL, *text = NULL;
    size_t len = 0, tlen = 0;
    hy_chat_msg_t msg = {.role = "user", .content = "Hello"};
    hy_chat_opts_t o;
    int rc;

    *out = NULL;
    if (cfg->model.chat_template[0]) {
        FILE *f = fopen(cfg->model.chat_template, "rb");
        long n;

        if (f == NULL)
            return hy_err(err, HY_EIO, "[model] chat_template = %s: %s", cfg->model.chat_template,
                          strerror(errno));
        if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
            (src = malloc((size_t)n + 1)) == NULL || fread(src, 1, (size_t)n, f) != (size_t)n) {
            fclose(f);
            free(src);
            return hy_err(err, HY_EIO, "[model] chat_template = %s: cannot read",
                          cfg->model.chat_template);
        }
        fclose(f);
        len = (size_t)n;
        rc = hy_chat_compile(out, src, len, err);
        free(src);
        if (rc == HY_OK)
            hy_log(LOG_INFO, "chat_template", "model=%s source=file path=%s", m->name,
                   cfg->model.chat_template);
    } else if (hy_chat_model_source(m->gguf, &s) == HY_OK) {
        /* an operator reads here whether the file's own template or our
         * copy of the architecture's published one formats the chats */
        rc = hy_chat_compile(out, s.src, s.len, err);
        if (rc == HY_OK)
            hy_log(LOG_INFO, "chat_template", "model=%s source=%s", m->name, s.origin);
    } else {
        hy_log(LOG_WARNING, "no_chat_template",
               "model=%s detail=\"/v1/chat/completions answers 400\"", m->name);
        return HY_OK;
    }
    if (rc != HY_OK)
        return rc;
    memset(&o, 0, sizeof o);
    o.add_generation_prompt = true;
    o.enable_thinking = -1;
    o.bos_token = w->bos_text;
    o.eos_token = w->eos_text;
    rc = hy_chat_render(*out, &msg, 1, &o, &text, &tlen, err);
    free(text);
    if (rc != HY_OK) {
        hy_chat_free(*out);
        *out = NULL;
    }
    return rc;
}

static char *co_token_text(const hy_tok_t *tok, int32_t id)
{
    hy_tok_str_t t;
    char *s;

    if (id < 0)
        return NULL;
    t = hy_tok_text(tok, id);
    if ((s = malloc(t.len + 1)) != NULL) {
        memcpy(s, t.ptr, t.len);
        s[t.len] = '\0';
    }
    return s;
}

/* The kernel the backend runs for each layer kind present and for each
 * weight type the matmuls read, "kind:kernel,..." into buf: logged at load
 * so that a silent fallback to a slower path is visible (an operator's
 * first question when a new model is slow). */
static void co_kernels(const hy_model_t *m, hy_backend_t *be, char *buf, size_t cap)
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

/* The served model id: the file name without directory and ".gguf" (what
 * clients pass as "model"; GGUF general.name is free text with spaces). */
static const char *co_model_id(const char *path, char *buf, size_t cap)
{
    const char *b = strrchr(path, '/');
    size_t n;

    b = b ? b + 1 : path;
    n = strlen(b);
    if (n > 5 && strcmp(b + n - 5, ".gguf") == 0)
        n -= 5;
    snprintf(buf, cap, "%.*s", (int)n, b);
    return buf;
}

/* ---- model version: the file's SHA-256, off the serving path ---------------- */

typedef struct {
    pthread_t thread;
    bool started;
    atomic_int cancel;         /* set at shutdown: stop hashing a huge file */
    char path[PATH_MAX];       /* the resolved model file */
    hy_shm_header_t *hdr;      /* where the digest is published */
    hy_tier_t *tier;           /* the disk tier waits for the digest (or NULL) */
} co_hash_t;

/* Hashing a multi-GB model takes seconds to minutes, so it runs in its own
 * low-priority thread while the coordinator goes on to serve (/v1/models
 * says "@hashing" meanwhile).  It reads the file the model just mmapped, so
 * it mostly hits the page cache. */
static void *co_hash_main(void *arg)
{
    co_hash_t *h = arg;
    uint8_t d[HY_SHA256_LEN];
    char err[HY_ERR_LEN];
    int64_t t0 = co_now_ms();

    /* Linux: a per-thread nice value, so the engine thread keeps its core. */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    if (hy_sha256_file(h->path, &h->cancel, d, err) == HY_OK) {
        hy_sha256_hex(d, h->hdr->model_sha256);
        atomic_store_explicit(&h->hdr->model_sha256_state, HY_SHM_SHA256_DONE,
                              memory_order_release);
        if (h->tier != NULL)
            hy_tier_set_model(h->tier, d);
        hy_log(LOG_INFO, "model_hashed", "file=%s sha256=%s ms=%lld", h->path,
               h->hdr->model_sha256, (long long)(co_now_ms() - t0));
    } else if (!atomic_load(&h->cancel)) {
        atomic_store_explicit(&h->hdr->model_sha256_state, HY_SHM_SHA256_FAILED,
                              memory_order_release);
        hy_log(LOG_WARNING, "model_hash_failed", "err=%s", err);
        if (h->tier != NULL)
            hy_tier_disk_off(h->tier, "the model file could not be hashed");
    }
    return NULL;
}

/* Publishes the model's file name (symlinks resolved: the version names the
 * weights actually served) and starts the hash.  A thread that cannot start
 * is logged, not fatal: the model still serves, its version says "@unknown". */
static void co_hash_start(co_hash_t *h, const char *model_path, hy_shm_header_t *hdr,
                          hy_tier_t *tier)
{
    char id[sizeof hdr->model_file];
    int e;

    memset(h, 0, sizeof *h);
    h->hdr = hdr;
    h->tier = tier;
    if (realpath(model_path, h->path) == NULL)
        snprintf(h->path, sizeof h->path, "%s", model_path);
    snprintf(hdr->model_file, sizeof hdr->model_file, "%s", co_model_id(h->path, id, sizeof id));
    atomic_store(&hdr->model_sha256_state, HY_SHM_SHA256_PENDING);
    if ((e = pthread_create(&h->thread, NULL, co_hash_main, h)) != 0) {
        atomic_store(&hdr->model_sha256_state, HY_SHM_SHA256_FAILED);
        hy_log(LOG_WARNING, "model_hash_failed", "err=\"pthread_create: %s\"", strerror(e));
        if (tier != NULL)
            hy_tier_disk_off(tier, "the model file could not be hashed");
        return;
    }
    h->started = true;
}

static void co_hash_stop(co_hash_t *h)
{
    if (!h->started)
        return;
    atomic_store(&h->cancel, 1);
    pthread_join(h->thread, NULL);
    h->started = false;
}

/* ---- supervision ------------------------------------------------------------ */

/* Forks the worker of slots[k], with a new connection guard (a worker
 * without one still serves; only its death would look like a clean end). */
static pid_t co_fork_worker(hy_worker_ctx_t *w, co_slot_t *slots, uint32_t n, uint32_t k,
                            const sigset_t *old_mask)
{
    uint32_t threads = w->cfg->server.threads_per_worker + (w->control_fd >= 0);
    pid_t parent = getpid(), pid;
    char err[HY_ERR_LEN];

    if (hy_guard_open(&slots[k].guard, threads, &w->guard_fd, err) != HY_OK)
        hy_log(LOG_ERR, "guard_failed", "slot=%u err=%s", k, err);
    pid = fork();
    if (pid != 0) {
        if (w->guard_fd >= 0)
            close(w->guard_fd);
        w->guard_fd = -1;
        return pid;
    }
    /* Child: die with the coordinator; never outlive the model's owner. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(0);
    /* the coordinator's hold on its siblings' connections is not ours */
    for (uint32_t i = 0; i < n; i++)
        hy_guard_close(&slots[i].guard);
    signal(SIGCHLD, SIG_DFL);
    sigprocmask(SIG_SETMASK, old_mask, NULL);
    hy_log_open(co_worker_ident, w->cfg->log.facility, atomic_load(&w->ctl->log_level),
                w->cfg->log.to_stderr);
    _exit(hy_worker_main(w));
}

static void co_log_death(pid_t pid, int status, bool expected)
{
    if (WIFSIGNALED(status))
        hy_log(expected ? LOG_INFO : LOG_ERR, "worker_died", "pid=%d signal=%d name=%s",
               (int)pid, WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        hy_log(expected || WEXITSTATUS(status) == 0 ? LOG_INFO : LOG_ERR, "worker_exited",
               "pid=%d status=%d", (int)pid, WEXITSTATUS(status));
}

/* Reaps every dead child; frees its request slots. */
static int co_reap(hy_shm_t *shm, co_slot_t *slots, uint32_t n, bool expected)
{
    int status, n_dead = 0;
    pid_t pid;

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        uint32_t i;
        int reaped;

        for (i = 0; i < n && slots[i].pid != pid; i++)
            ;
        co_log_death(pid, status, expected);
        /* its clients learn first: their responses are aborted, not ended */
        if (i < n && (reaped = hy_guard_abort(&slots[i].guard, pid, status)) > 0)
            hy_log(LOG_WARNING, "worker_responses_aborted", "pid=%d connections=%d", (int)pid,
                   reaped);
        /* hy_shm_reap_owner counts them in hyserve_reaped_requests_total */
        reaped = hy_shm_reap_owner(shm, pid);
        if (reaped > 0)
            hy_log(LOG_WARNING, "worker_requests_reaped", "pid=%d requests=%d", (int)pid, reaped);
        hy_shm_engine_kick(shm);
        if (i < n) {
            int64_t now = co_now_ms();

            slots[i].pid = 0;
            if (now - slots[i].born_ms >= CO_STABLE_MS)
                slots[i].backoff_ms = CO_BACKOFF_MIN_MS;
            else
                slots[i].backoff_ms = HY_MIN(slots[i].backoff_ms * 2, CO_BACKOFF_MAX_MS);
            slots[i].respawn_at_ms = now + slots[i].backoff_ms;
            n_dead++;
        }
    }
    return n_dead;
}

static void co_spawn_due(hy_worker_ctx_t *w, co_slot_t *slots, uint32_t n,
                         const sigset_t *old_mask, bool restart)
{
    int64_t now = co_now_ms();
    uint32_t i;

    for (i = 0; i < n; i++) {
        pid_t pid;

        if (slots[i].pid != 0 || now < slots[i].respawn_at_ms)
            continue;
        pid = co_fork_worker(w, slots, n, i, old_mask);
        if (pid < 0) {
            hy_log(LOG_ERR, "fork_failed", "err=%s", strerror(errno));
            slots[i].respawn_at_ms = now + CO_BACKOFF_MAX_MS;
            continue;
        }
        slots[i].pid = pid;
        slots[i].born_ms = now;
        if (restart) {
            atomic_fetch_add(&hy_shm_stats(w->shm)->worker_restarts, 1);
            hy_log(LOG_INFO, "worker_respawned", "pid=%d slot=%u", (int)pid, i);
        }
    }
}

static uint32_t co_alive(const co_slot_t *slots, uint32_t n)
{
    uint32_t i, k = 0;

    for (i = 0; i < n; i++)
        k += slots[i].pid != 0;
    return k;
}

static void co_signal_all(const co_slot_t *slots, uint32_t n, int sig)
{
    uint32_t i;

    for (i = 0; i < n; i++)
        if (slots[i].pid != 0)
            kill(slots[i].pid, sig);
}

/* SIGHUP: re-read the file; apply what needs no restart, warn about the rest. */
static void co_reload(hy_config_t *cfg, const co_args_t *a, hy_serve_ctl_t *ctl)
{
    hy_config_t *nc = malloc(sizeof *nc);
    char err[HY_ERR_LEN];

    if (nc == NULL)
        return;
    if (co_load_config(nc, a, err) != HY_OK) {
        hy_log(LOG_ERR, "reload_failed", "err=%s", err);
        free(nc);
        return;
    }
    if (strcmp(nc->model.path, cfg->model.path) || strcmp(nc->server.socket, cfg->server.socket) ||
        strcmp(nc->server.instance, cfg->server.instance) ||
        nc->server.workers != cfg->server.workers || nc->engine.max_seqs != cfg->engine.max_seqs ||
        nc->cache.hot_mb != cfg->cache.hot_mb || nc->cache.warm_mb != cfg->cache.warm_mb ||
        strcmp(nc->cache.disk_dir, cfg->cache.disk_dir) || nc->cache.disk_mb != cfg->cache.disk_mb ||
        strcmp(nc->log.socket, cfg->log.socket) ||
        strcmp(nc->server.secret_file, cfg->server.secret_file) ||
        strcmp(nc->server.user, cfg->server.user))
        hy_log(LOG_WARNING, "reload_needs_restart",
               "detail=%s", "model, engine, cache, socket, secret_file, user and log.socket "
                            "settings apply at the next start");
    /* the workers keep the log socket they inherited, so it stays as started */
    memcpy(nc->log.socket, cfg->log.socket, sizeof nc->log.socket);
    cfg->log = nc->log;
    cfg->server.drain_seconds = nc->server.drain_seconds;
    hy_log_open(cfg->log.ident, cfg->log.facility, cfg->log.level, cfg->log.to_stderr);
    atomic_store(&ctl->log_level, cfg->log.level);
    atomic_fetch_add(&ctl->log_gen, 1);
    hy_log(LOG_INFO, "reloaded", "level=%d", cfg->log.level);
    free(nc);
}

static void co_usage(FILE *f)
{
    fprintf(f, "usage: hyserve serve [-c hyserve.ini] [--set section.key=value ...]\n"
               "  -c, --config FILE   configuration (default: built-in defaults)\n"
               "  -s, --set K=V       override one key, e.g. --set server.workers=2\n");
}

/* ---- the coordinator's life: parse, start, supervise, shut down ------------------ */

/* Everything the coordinator holds; what co_shutdown releases. */
typedef struct {
    co_args_t a;
    hy_config_t *cfg;
    hy_backend_t *be;
    hy_model_t *model;
    hy_tok_t *tok;
    hy_chat_tmpl_t *tmpl;
    hy_shm_t *shm;
    hy_engine_t *eng;
    bool engine_started;
    hy_tier_t *tier;       /* warm/cold tiers under the engine's page table, or NULL */
    hy_serve_ctl_t *ctl;   /* MAP_FAILED until mapped */
    hy_worker_ctx_t w;     /* what the workers inherit */
    hy_engine_opts_t eo;
    hy_shm_params_t sp;
    hy_api_layer_kind_t kinds[8];
    char model_id[256];
    co_slot_t *slots;      /* [n_workers] */
    uint32_t n_workers;
    co_hash_t *hash;
    int listen_fd;
    bool socket_open;
    int control_fd;        /* [server] control_socket; -1 when none */
    char secret[HY_ACCESS_SECRET_MAX + 1]; /* [server] secret_file's; "" = none */
    sigset_t mask, old_mask;
    int64_t t0;
} co_t;

/* Command line: 0 parsed, 1 --help printed, 2 a usage error (reported). */
static int co_parse(int argc, char **argv, co_args_t *a)
{
    static const struct option opts[] = {{"config", required_argument, 0, 'c'},
                                         {"set", required_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int opt;

    memset(a, 0, sizeof *a);
    optind = 1;
    while ((opt = getopt_long(argc, argv, "c:s:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'c': a->ini = optarg; break;
        case 's':
            if (a->n_sets == CO_MAX_SETS) {
                fprintf(stderr, "hyserve serve: at most %d --set options\n", CO_MAX_SETS);
                return 2;
            }
            a->sets[a->n_sets++] = optarg;
            break;
        case 'h': co_usage(stdout); return 1;
        default: co_usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "hyserve serve: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return 0;
}

/* The configuration and the log: 0, or an exit status after a message on
 * stderr (nothing is logged before the log is open). */
static int co_configure(co_t *co)
{
    char err[HY_ERR_LEN];

    if ((co->cfg = malloc(sizeof *co->cfg)) == NULL) {
        fprintf(stderr, "hyserve serve: out of memory\n");
        return 1;
    }
    if (co_load_config(co->cfg, &co->a, err) != HY_OK) {
        fprintf(stderr, "hyserve serve: %s\n", err);
        return 2;
    }
    if (!co->cfg->model.path[0]) {
        fprintf(stderr, "hyserve serve: [model] path is required\n");
        return 2;
    }
    hy_log_open(co->cfg->log.ident, co->cfg->log.facility, co->cfg->log.level,
                co->cfg->log.to_stderr);
    if (hy_log_set_socket(co->cfg->log.socket, err) != HY_OK) {
        fprintf(stderr, "hyserve serve: [log] socket: %s\n", err);
        return 2;
    }
    hy_log(LOG_INFO, "start", "version=%s config=%s model=%s", PACKAGE_VERSION,
           co->a.ini ? co->a.ini : "(defaults)", co->cfg->model.path);
    snprintf(co_worker_ident, sizeof co_worker_ident, "%s-fcgi", co->cfg->log.ident);
    return 0;
}

/* Model, tokenizer, chat template. */
static int co_load_model(co_t *co, char *err)
{
    const hy_config_t *cfg = co->cfg;
    hy_backend_opts_t bo = {.n_threads = (int)cfg->model.threads};
    int rc;

    if ((rc = hy_backend_new(&co->be, cfg->engine.backend == HY_CONFIG_BACKEND_CUDA ? "cuda" : "cpu",
                             &bo, err)) != HY_OK ||
        (rc = hy_model_load(&co->model, cfg->model.path, co->be, err)) != HY_OK ||
        (rc = hy_tok_load(&co->tok, co->model->gguf, err)) != HY_OK)
        return rc;
    co->w.bos_text = co_token_text(co->tok, hy_tok_bos(co->tok));
    co->w.eos_text = co_token_text(co->tok, hy_tok_eos(co->tok));
    return co_load_template(cfg, co->model, &co->w, &co->tmpl, err);
}

/* The engine's options from the config; the memory budget is [cache]
 * hot_mb, or memory_fraction of what the backend's memory (the GPU's with
 * CUDA) has free now, after the weights. */
static int co_engine_opts(co_t *co, char *err)
{
    const hy_config_t *cfg = co->cfg;
    hy_engine_opts_t *eo = &co->eo;

    memset(eo, 0, sizeof *eo);
    eo->max_batch_tokens = (int32_t)cfg->engine.max_batch_tokens;
    eo->max_seqs = (int32_t)cfg->engine.max_seqs;
    eo->n_ctx = (int32_t)(cfg->engine.max_context
                              ? HY_MIN(cfg->engine.max_context, (uint32_t)co->model->n_ctx_train)
                              : (uint32_t)co->model->n_ctx_train);
    eo->page_tokens = (int32_t)cfg->cache.page_tokens;
    eo->kv_type = cfg->cache.kv_type == HY_CONFIG_KV_F32    ? HY_DTYPE_F32
                  : cfg->cache.kv_type == HY_CONFIG_KV_Q8_0 ? HY_DTYPE_Q8_0
                                                            : HY_DTYPE_F16;
    eo->checkpoint_interval = (int32_t)cfg->cache.checkpoint_interval;
    eo->n_request_slots = (int32_t)HY_MIN(cfg->server.max_queue + cfg->engine.max_seqs, 65536u);
    eo->tok = co->tok;
    if (cfg->cache.hot_tokens_per_seq != 0)
        return hy_err(err, HY_EUNSUPPORTED,
                      "[cache] hot_tokens_per_seq = %u: moving a running sequence's older pages "
                      "out of the hot tier is not implemented; only 0 (every running sequence "
                      "stays hot) is accepted", cfg->cache.hot_tokens_per_seq);
    return hy_plan_hot_bytes(co->be, cfg->cache.hot_mb, cfg->cache.memory_fraction,
                             &eo->memory_bytes, err);
}

/* Which key a tier store error is about (its message says which tier). */
static int co_tier_err(const hy_config_t *cfg, int rc, const char *why, char *err)
{
    if (strncmp(why, "warm tier", 9) == 0)
        return hy_err(err, rc, "[cache] warm_mb = %u: %s", cfg->cache.warm_mb, why);
    if (strncmp(why, "disk budget", 11) == 0)
        return hy_err(err, rc, "[cache] disk_mb = %u: %s", cfg->cache.disk_mb, why);
    return hy_err(err, rc, "[cache] disk_dir = %s: %s", cfg->cache.disk_dir, why);
}

/* The warm tier's memory from the backend (pinned for a GPU's copies). */
static void *co_host_alloc(void *ctx, size_t bytes)
{
    hy_backend_t *be = ctx;

    return be->i->host_alloc(be, bytes);
}

static void co_host_free(void *ctx, void *p, size_t bytes)
{
    hy_backend_t *be = ctx;

    be->i->host_free(be, p, bytes);
}

/* The warm and cold tiers ([cache] warm_mb, disk_dir, disk_mb), sized in
 * the plan's pages and checkpoints; the disk tier comes online when the
 * model's hash is known (co_hash_main).  None when warm_mb is 0. */
static int co_start_tiers(co_t *co, char *err)
{
    const hy_config_t *cfg = co->cfg;
    hy_tier_opts_t to;
    hy_plan_opts_t po;
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
    /* on the CPU both tiers are host RAM: together they must fit */
    hy_host_memory(&total, &avail);
    if (avail > 0 && warm + (co->be->i->host_alloc == NULL ? co->eo.memory_bytes : 0) > avail)
        return hy_err(err, HY_ERANGE, "[cache] warm_mb = %u: with the hot tier's %llu MiB it "
                      "exceeds the host's %llu MiB available (lower memory_fraction or set "
                      "hot_mb)", cfg->cache.warm_mb,
                      (unsigned long long)(co->be->i->host_alloc == NULL ? co->eo.memory_bytes >> 20 : 0),
                      (unsigned long long)(avail >> 20));
    po = (hy_plan_opts_t){co->eo.n_ctx, co->eo.max_seqs, co->eo.page_tokens,
                          co->eo.max_batch_tokens, co->eo.kv_type, co->eo.swa_full};
    if ((rc = hy_plan_make_opts(&plan, co->model, co->be, &po, err)) != HY_OK)
        return rc;
    memset(&to, 0, sizeof to);
    hy_tiering_store_opts(co->model, &plan, co->sp.n_pages, co->sp.n_swa_pages, &to);
    to.warm_bytes = warm;
    to.disk_dir = cfg->cache.disk_dir;
    to.disk_bytes = (uint64_t)cfg->cache.disk_mb << 20;
    to.ident.model_bytes = stat(cfg->model.path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    to.model_path = realpath(cfg->model.path, model) ? model : cfg->model.path;
    to.stats = hy_shm_stats(co->shm);
    if (co->be->i->host_alloc != NULL && co->be->i->host_free != NULL) {
        to.host_alloc = co_host_alloc;
        to.host_free = co_host_free;
        to.host_ctx = co->be;
    }
    if ((rc = hy_tier_create(&co->tier, &to, why)) != HY_OK)
        return co_tier_err(cfg, rc, why, err);
    co->eo.tiers = co->tier;
    hy_log(LOG_INFO, "tiers", "warm_bytes=%llu disk_dir=%s disk_bytes=%llu page_bytes=%llu "
           "swa_page_bytes=%llu checkpoint_bytes=%llu warm_pages=%d warm_swa_pages=%d "
           "warm_checkpoints=%d", (unsigned long long)warm,
           cfg->cache.disk_dir[0] ? cfg->cache.disk_dir : "-",
           (unsigned long long)to.disk_bytes, (unsigned long long)to.unit_bytes[HY_TIER_PAGE],
           (unsigned long long)to.unit_bytes[HY_TIER_SWA],
           (unsigned long long)to.unit_bytes[HY_TIER_CKPT], hy_tier_slots(co->tier, HY_TIER_PAGE),
           hy_tier_slots(co->tier, HY_TIER_SWA), hy_tier_slots(co->tier, HY_TIER_CKPT));
    return HY_OK;
}

/* One line an operator reads first: what was loaded, how memory went; the
 * same memory facts go to the stats for /metrics. */
static void co_log_loaded(const co_t *co)
{
    uint64_t weights = 0, kv_bytes = 0, st_bytes = 0, page_bytes[HY_KV_GROUPS];
    char kernels[768];

    for (int64_t t = 0; t < hy_gguf_n_tensors(co->model->gguf); t++)
        weights += hy_gguf_tensor(co->model->gguf, t)->nbytes;
    co->be->i->mem_allocated(co->be, &kv_bytes, &st_bytes);
    hy_engine_page_bytes(co->eng, page_bytes);
    hy_metrics_set_memory(co->shm, weights, page_bytes[HY_KV_FULL], page_bytes[HY_KV_SWA],
                          st_bytes);
    co_kernels(co->model, co->be, kernels, sizeof kernels);
    hy_log(LOG_INFO, "model_loaded",
           "model=%s arch=%s layers=%d weights_bytes=%llu kv_bytes=%llu state_bytes=%llu "
           "pages=%d swa_pages=%d page_tokens=%d state_slots=%d checkpoint_slots=%d backend=%s "
           "kernels=%s ms=%lld",
           co->cfg->model.path, co->model->arch_name, co->model->n_layer,
           (unsigned long long)weights, (unsigned long long)kv_bytes,
           (unsigned long long)st_bytes, co->sp.n_pages, co->sp.n_swa_pages, co->sp.page_tokens,
           co->sp.n_state_slots, co->sp.n_checkpoint_slots, co->be->i->name, kernels,
           (long long)(co_now_ms() - co->t0));
}

/* The segment sized by the engine, the model's hash, the engine thread. */
static int co_start_engine(co_t *co, char *err)
{
    hy_pt_params_t pp;
    hy_req_source_t src;
    int rc;

    if ((rc = co_engine_opts(co, err)) != HY_OK ||
        (rc = hy_engine_pt_params(co->model, co->be, &co->eo, &pp, err)) != HY_OK)
        return rc;
    hy_shm_params_for(&co->sp, &pp, co->eo.n_request_slots, co->eo.n_ctx);
    if (hy_shm_remove_stale(co->cfg->server.instance, err) == HY_OK)
        hy_log(LOG_WARNING, "stale_segment_removed", "instance=%s", co->cfg->server.instance);
    if ((rc = hy_shm_create(&co->shm, co->cfg->server.instance, &co->sp, err)) != HY_OK ||
        (rc = co_start_tiers(co, err)) != HY_OK)
        return rc;
    if ((co->hash = malloc(sizeof *co->hash)) == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    co_hash_start(co->hash, co->cfg->model.path, hy_shm_header_rw(co->shm), co->tier);
    hy_ring_source(co->shm, &src);
    if ((rc = hy_engine_create(&co->eng, co->model, co->be, hy_shm_pt(co->shm), &src, &co->eo,
                               err)) != HY_OK)
        return rc;
    co_log_loaded(co);
    if ((rc = hy_engine_start(co->eng, err)) != HY_OK)
        return rc;
    co->engine_started = true;
    return HY_OK;
}

/* What the workers inherit: the control page, the listening socket (and the
 * control socket, when configured), the model's facts for /v1/models. */
static int co_prepare_workers(co_t *co, char *err)
{
    hy_worker_ctx_t *w = &co->w;
    int32_t counts[HY_LAYER_NONE + 1] = {0}, l;
    size_t k = 0;
    int rc;

    co->ctl = mmap(NULL, sizeof *co->ctl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
    if (co->ctl == MAP_FAILED)
        return hy_err(err, HY_ENOMEM, "mmap: %s", strerror(errno));
    atomic_store(&co->ctl->draining, 0);
    atomic_store(&co->ctl->log_level, co->cfg->log.level);
    atomic_store(&co->ctl->log_gen, 0);
    if (FCGX_Init() != 0)
        return hy_err(err, HY_EIO, "FCGX_Init failed");
    if ((rc = co_open_socket(co->cfg, co->cfg->server.socket, "socket", &co->listen_fd, err)) !=
        HY_OK)
        return rc;
    co->socket_open = true;
    if (co->cfg->server.control_socket[0] &&
        (rc = co_open_socket(co->cfg, co->cfg->server.control_socket, "control_socket",
                             &co->control_fd, err)) != HY_OK)
        return rc;

    w->cfg = co->cfg;
    w->ctl = co->ctl;
    w->shm = co->shm;
    w->tok = co->tok;
    w->tmpl = co->tmpl;
    w->n_ctx = co->eo.n_ctx;
    w->n_vocab = co->model->n_vocab;
    w->listen_fd = co->listen_fd;
    w->control_fd = co->control_fd;
    w->guard_fd = -1;
    w->log_ident = co_worker_ident;
    w->info.id = co_model_id(co->cfg->model.path, co->model_id, sizeof co->model_id);
    w->info.created = (int64_t)time(NULL);
    w->info.max_model_len = co->eo.n_ctx;
    w->info.architecture = co->model->arch_name;
    for (l = 0; l < co->model->n_layer; l++)
        counts[co->model->layers[l].kind]++;
    for (l = 0; l <= HY_LAYER_NONE && k < HY_ARRAY_LEN(co->kinds); l++)
        if (counts[l] > 0) {
            co->kinds[k].kind = hy_layer_kind_name((hy_layer_kind_t)l);
            co->kinds[k++].count = counts[l];
        }
    w->info.layers = co->kinds;
    w->info.n_layer_kinds = k;
    return HY_OK;
}

/* Forks the workers and says the server is up. */
static int co_start_workers(co_t *co, char *err)
{
    const hy_config_t *cfg = co->cfg;
    uint32_t i;

    co->n_workers = cfg->server.workers;
    if ((co->slots = calloc(co->n_workers, sizeof *co->slots)) == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    for (i = 0; i < co->n_workers; i++) {
        co->slots[i].backoff_ms = CO_BACKOFF_MIN_MS;
        hy_guard_init(&co->slots[i].guard);
    }
    co_spawn_due(&co->w, co->slots, co->n_workers, &co->old_mask, false);
    hy_log(LOG_INFO, "serving",
           "model=%s arch=%s socket=%s instance=%s workers=%u n_ctx=%d pages=%d "
           "request_slots=%d load_ms=%lld",
           co->w.info.id, co->model->arch_name, cfg->server.socket, cfg->server.instance,
           co->n_workers, co->eo.n_ctx, co->sp.n_pages, co->sp.n_request_slots,
           (long long)(co_now_ms() - co->t0));
    /* Each accept thread holds one request (a stream) for its whole life,
     * so the pool, not max_seqs, bounds how many streams run at once; say so
     * where an operator looks when 32 clients get 4 streams' worth. */
    if ((uint64_t)co->n_workers * cfg->server.threads_per_worker < cfg->engine.max_seqs)
        hy_log(LOG_WARNING, "concurrency_capped",
               "workers=%u threads_per_worker=%u max_seqs=%u max_concurrent_requests=%llu",
               co->n_workers, (unsigned)cfg->server.threads_per_worker,
               (unsigned)cfg->engine.max_seqs,
               (unsigned long long)co->n_workers * cfg->server.threads_per_worker);
    return HY_OK;
}

/* The instance secret, read while we may still be root (a 0600 root file,
 * or hyserve@.service's credential); without one, say what that means. */
static int co_load_secret(co_t *co, char *err)
{
    const hy_config_t *cfg = co->cfg;
    char name[HY_CONFIG_NAME_LEN];
    int rc;

    co->w.secret = co->secret;
    if (!cfg->server.secret_file[0]) {
        hy_log(LOG_WARNING, "no_secret", "detail=%s",
               "no [server] secret_file: any local process that can connect to the sockets is "
               "trusted with any key id");
        return HY_OK;
    }
    if ((rc = hy_access_load_secret(cfg->server.secret_file, co->secret, name, sizeof name,
                                    err)) != HY_OK)
        return rc;
    /* nginx sends each colour the secret filed under its name: another
     * colour's file would make every request a 403 */
    hy_log(strcmp(name, cfg->server.instance) ? LOG_NOTICE : LOG_INFO, "secret_loaded",
           "file=%s for=%s instance=%s", cfg->server.secret_file, name, cfg->server.instance);
    return HY_OK;
}

/* Once the sockets and the segment are open: run as [server] user from now
 * on (the engine thread too: the switch applies to every thread), owning
 * what we remove at shutdown. */
static int co_drop_privileges(co_t *co, char *err)
{
    const hy_config_t *cfg = co->cfg;
    char shm_path[HY_CONFIG_NAME_LEN + 32];
    const char *paths[3];
    int rc;

    if (!cfg->server.user[0]) {
        if (geteuid() == 0)
            hy_log(LOG_WARNING, "running_as_root", "detail=%s",
                   "no [server] user: the engine and the workers run as root");
        return HY_OK;
    }
    snprintf(shm_path, sizeof shm_path, "/dev/shm/hyserve-%s", cfg->server.instance);
    paths[0] = cfg->server.socket;
    paths[1] = cfg->server.control_socket;
    paths[2] = shm_path;
    if ((rc = hy_access_become(cfg->server.user, paths, 3, err)) != HY_OK)
        return rc;
    hy_log(LOG_INFO, "running_as", "user=%s uid=%d gid=%d", cfg->server.user, (int)getuid(),
           (int)getgid());
    return HY_OK;
}

/* Everything up to serving.  The signals we handle are blocked before any
 * thread exists (the engine thread inherits the mask, so they all come to
 * co_supervise's sigtimedwait). */
static int co_start(co_t *co, char *err)
{
    int rc;

    sigemptyset(&co->mask);
    sigaddset(&co->mask, SIGTERM);
    sigaddset(&co->mask, SIGINT);
    sigaddset(&co->mask, SIGHUP);
    sigaddset(&co->mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &co->mask, &co->old_mask);
    signal(SIGPIPE, SIG_IGN);
    if ((rc = co_load_secret(co, err)) != HY_OK || (rc = co_load_model(co, err)) != HY_OK ||
        (rc = co_start_engine(co, err)) != HY_OK || (rc = co_prepare_workers(co, err)) != HY_OK ||
        (rc = co_drop_privileges(co, err)) != HY_OK || (rc = co_start_workers(co, err)) != HY_OK)
        return rc;
    return HY_OK;
}

/* Until SIGTERM/SIGINT: reap and respawn workers, reload on SIGHUP, then
 * drain (new work refused, in-flight streams finish, up to drain_seconds;
 * a second signal stops at once) and stop the workers. */
static void co_supervise(co_t *co)
{
    const hy_config_t *cfg = co->cfg;
    int64_t drain_until = 0, kill_at = 0;
    bool draining = false, stopping = false;

    for (;;) {
        struct timespec ts = {0, 100 * 1000000};
        siginfo_t si;
        int sig = sigtimedwait(&co->mask, &si, &ts);

        if (sig == SIGHUP) {
            co_reload(co->cfg, &co->a, co->ctl);
        } else if ((sig == SIGTERM || sig == SIGINT) && !draining) {
            draining = true;
            atomic_store(&co->ctl->draining, 1);
            drain_until = co_now_ms() + (int64_t)cfg->server.drain_seconds * 1000;
            hy_log(LOG_INFO, "draining", "signal=%d drain_seconds=%u", sig,
                   cfg->server.drain_seconds);
        } else if ((sig == SIGTERM || sig == SIGINT) && !stopping) {
            drain_until = 0; /* a second signal: stop now */
        }
        for (uint32_t i = 0; i < co->n_workers; i++)
            hy_guard_poll(&co->slots[i].guard);
        co_reap(co->shm, co->slots, co->n_workers, stopping);
        if (draining && !stopping) {
            bool idle = atomic_load(&hy_shm_stats(co->shm)->slots_used) <= 0;

            if (idle || co_now_ms() >= drain_until) {
                /* In-flight streams are done (or out of time): workers
                 * stop accepting and exit. */
                stopping = true;
                hy_log(LOG_INFO, "stopping_workers", "idle=%d", idle);
                co_signal_all(co->slots, co->n_workers, SIGTERM);
                kill_at = co_now_ms() + CO_KILL_GRACE_MS;
            }
        }
        if (stopping) {
            if (co_alive(co->slots, co->n_workers) == 0)
                return;
            if (kill_at && co_now_ms() >= kill_at) {
                co_signal_all(co->slots, co->n_workers, SIGKILL);
                kill_at = 0;
            }
            continue;
        }
        co_spawn_due(&co->w, co->slots, co->n_workers, &co->old_mask, true);
    }
}

/* Releases everything co_start got, in reverse; after a failed start the
 * workers already forked are killed first. */
static void co_shutdown(co_t *co, bool failed)
{
    if (failed && co->slots != NULL) {
        co_signal_all(co->slots, co->n_workers, SIGKILL);
        while (waitpid(-1, NULL, 0) > 0)
            ;
    }
    for (uint32_t i = 0; co->slots != NULL && i < co->n_workers; i++)
        hy_guard_close(&co->slots[i].guard);
    if (co->socket_open) {
        close(co->listen_fd);
        unlink(co->cfg->server.socket);
    }
    if (co->control_fd >= 0) {
        close(co->control_fd);
        unlink(co->cfg->server.control_socket);
    }
    explicit_bzero(co->secret, sizeof co->secret);
    if (co->hash != NULL)
        co_hash_stop(co->hash);
    free(co->hash);
    if (co->engine_started)
        hy_engine_stop(co->eng);
    /* the hot tier's cached pages to disk, so a restart finds them */
    if (!failed)
        hy_engine_persist_tiers(co->eng);
    hy_engine_free(co->eng);
    hy_tier_free(co->tier); /* after the writes it has queued */
    if (co->shm != NULL)
        hy_shm_close(co->shm);
    if (co->ctl != MAP_FAILED)
        munmap(co->ctl, sizeof *co->ctl);
    free(co->slots);
    hy_chat_free(co->tmpl);
    free((char *)co->w.bos_text);
    free((char *)co->w.eos_text);
    hy_tok_free(co->tok);
    hy_model_free(co->model);
    if (co->be)
        co->be->i->free(co->be);
    hy_log_close();
    free(co->cfg);
}

int hy_cmd_serve(int argc, char **argv)
{
    char err[HY_ERR_LEN];
    co_t co;
    int rc;

    memset(&co, 0, sizeof co);
    co.ctl = MAP_FAILED;
    co.listen_fd = -1;
    co.control_fd = -1;
    co.t0 = co_now_ms();
    if ((rc = co_parse(argc, argv, &co.a)) != 0)
        return rc == 1 ? 0 : rc;
    if ((rc = co_configure(&co)) != 0) {
        free(co.cfg);
        return rc;
    }
    if (co_start(&co, err) != HY_OK) {
        hy_log(LOG_ERR, "start_failed", "err=%s", err);
        fprintf(stderr, "hyserve serve: %s\n", err);
        co_shutdown(&co, true);
        return 1;
    }
    co_supervise(&co);
    hy_log(LOG_INFO, "stopped", "reason=signal");
    co_shutdown(&co, false);
    return 0;
}
