/*
 * coordinator.c - `hyserve serve`: the master process, PostgreSQL's
 * postmaster or nginx's master in spirit.  It loads the config, the
 * tokenizer and chat template (GGUF metadata: never the weights), opens
 * the FastCGI sockets, drops privileges, forks the engine process
 * (engine_proc.h), creates the shared segment the first engine sizes and
 * preforks the workers; then it supervises.  A dead worker is logged (with
 * its signal), the responses it was writing are aborted (guard.h), its
 * requests are reaped and a new one is forked with backoff.  A dead engine
 * is logged, its page table emptied and its requests re-queued with what
 * they had streamed (ipc/ring.h hy_shm_engine_lost), and a new engine is
 * forked with backoff; [server] engine_restart_max deaths within
 * engine_restart_window_s seconds fail every request instead, and new ones
 * get 503 until the window has passed.  Its children die with it
 * (PR_SET_PDEATHSIG).  SIGTERM drains (503 for new work, in-flight
 * streams finish, up to server.drain_seconds) and exits; SIGHUP reloads what
 * can change without the model (log level, facility, stderr copy).
 */
#define _GNU_SOURCE /* pipe2 */
#include "server/coordinator.h"
#include "server/access.h"
#include "server/engine_proc.h"
#include "server/guard.h"
#include "server/worker.h"

#include "config.h" /* PACKAGE_VERSION */

#include <errno.h>
#include <fcgiapp.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
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

#include "common/log.h"
#include "common/sha256.h"
#include "model/model.h"
#include "server/metrics.h"

#define CO_MAX_SETS 64
#define CO_BACKOFF_MIN_MS 100
#define CO_BACKOFF_MAX_MS 5000
#define CO_STABLE_MS 10000 /* a worker that lived this long resets its backoff */
/* An engine that served this long after it came up did not die of starting:
 * the next one starts at once.  The backoff is for engines that die while
 * loading or just after (a bad model file, a driver, memory), where trying
 * again at once only spins; deaths later on are bounded by the restart
 * storm's count ([server] engine_restart_max), and each one costs every
 * client the restart itself (docs/failures.md). */
#define CO_ENGINE_PROVEN_MS 1000
#define CO_KILL_GRACE_MS 5000
#define CO_MAX_DEATHS 1000     /* [server] engine_restart_max's maximum */

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
static char co_engine_ident[HY_CONFIG_NAME_LEN + 8];

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
static int co_load_template(const hy_config_t *cfg, const hy_gguf_t *gguf, hy_worker_ctx_t *w,
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
            hy_log(LOG_INFO, "chat_template", "model=%s source=file path=%s", cfg->model.path,
                   cfg->model.chat_template);
    } else if (hy_chat_model_source(gguf, &s) == HY_OK) {
        /* an operator reads here whether the file's own template or our
         * copy of the architecture's published one formats the chats */
        rc = hy_chat_compile(out, s.src, s.len, err);
        if (rc == HY_OK)
            hy_log(LOG_INFO, "chat_template", "model=%s source=%s", cfg->model.path, s.origin);
    } else {
        hy_log(LOG_WARNING, "no_chat_template",
               "model=%s detail=\"/v1/chat/completions answers 400\"", cfg->model.path);
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
    hy_shm_header_t *hdr;      /* where the digest is published (the engine's disk
                                  tier waits for it there: engine_proc.c) */
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

    /* Linux: a per-thread nice value, so the engine process keeps its cores. */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    if (hy_sha256_file(h->path, &h->cancel, d, err) == HY_OK) {
        hy_sha256_hex(d, h->hdr->model_sha256);
        atomic_store_explicit(&h->hdr->model_sha256_state, HY_SHM_SHA256_DONE,
                              memory_order_release);
        hy_log(LOG_INFO, "model_hashed", "file=%s sha256=%s ms=%lld", h->path,
               h->hdr->model_sha256, (long long)(co_now_ms() - t0));
    } else if (!atomic_load(&h->cancel)) {
        atomic_store_explicit(&h->hdr->model_sha256_state, HY_SHM_SHA256_FAILED,
                              memory_order_release);
        hy_log(LOG_WARNING, "model_hash_failed", "err=%s", err);
    }
    return NULL;
}

/* Publishes the model's file name (symlinks resolved: the version names the
 * weights actually served) and starts the hash.  A thread that cannot start
 * is logged, not fatal: the model still serves, its version says "@unknown". */
static void co_hash_start(co_hash_t *h, const char *model_path, hy_shm_header_t *hdr)
{
    char id[sizeof hdr->model_file];
    int e;

    memset(h, 0, sizeof *h);
    h->hdr = hdr;
    if (realpath(model_path, h->path) == NULL)
        snprintf(h->path, sizeof h->path, "%s", model_path);
    snprintf(hdr->model_file, sizeof hdr->model_file, "%s", co_model_id(h->path, id, sizeof id));
    atomic_store(&hdr->model_sha256_state, HY_SHM_SHA256_PENDING);
    if ((e = pthread_create(&h->thread, NULL, co_hash_main, h)) != 0) {
        atomic_store(&hdr->model_sha256_state, HY_SHM_SHA256_FAILED);
        hy_log(LOG_WARNING, "model_hash_failed", "err=\"pthread_create: %s\"", strerror(e));
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
    uint32_t threads = w->cfg->server.threads_per_worker * (1 + (w->tcp_fd >= 0)) +
                       (w->control_fd >= 0);
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
    /* Child: die with the master (a worker left alone would wait for an
     * engine that died too; nginx answers 502 JSON instead).  SIGUSR2, not
     * SIGKILL: the worker first aborts the responses it is streaming, as no
     * guard is left to (worker.c, wk_on_master_gone); until its handler is
     * in place SIGUSR2's default action kills it just the same. */
    prctl(PR_SET_PDEATHSIG, SIGUSR2);
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

/* Reaps every dead child; frees a worker's request slots.  The engine's
 * death (pid engine) is only reported, in *engine_status (else -1): the
 * caller handles it. */
static int co_reap(hy_shm_t *shm, co_slot_t *slots, uint32_t n, bool expected, pid_t engine,
                   int *engine_status)
{
    int status, n_dead = 0;
    pid_t pid;

    *engine_status = -1;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        uint32_t i;
        int reaped;

        if (pid == engine) {
            *engine_status = status;
            continue;
        }
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
        nc->engine.activation_bits != cfg->engine.activation_bits ||
        nc->engine.weights_memory != cfg->engine.weights_memory ||
        nc->cache.hot_mb != cfg->cache.hot_mb || nc->cache.warm_mb != cfg->cache.warm_mb ||
        strcmp(nc->cache.disk_dir, cfg->cache.disk_dir) || nc->cache.disk_mb != cfg->cache.disk_mb ||
        strcmp(nc->log.socket, cfg->log.socket) ||
        strcmp(nc->server.secret_file, cfg->server.secret_file) ||
        strcmp(nc->server.user, cfg->server.user) || strcmp(nc->server.listen, cfg->server.listen) ||
        strcmp(nc->server.allow, cfg->server.allow))
        hy_log(LOG_WARNING, "reload_needs_restart",
               "detail=%s", "model, engine, cache, socket, listen, allow, secret_file, user and "
                            "log.socket settings apply at the next start");
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
    hy_gguf_t *gguf;       /* the model's metadata: tokenizer and template, never weights */
    hy_tok_t *tok;
    hy_chat_tmpl_t *tmpl;
    hy_shm_t *shm;
    hy_serve_ctl_t *ctl;   /* MAP_FAILED until mapped */
    hy_worker_ctx_t w;     /* what the workers inherit */
    hy_engine_hello_t hello; /* the first engine's numbers and model facts */
    hy_shm_params_t sp;
    /* the engine process */
    pid_t engine_pid;      /* 0 = none running */
    int64_t engine_born_ms, engine_respawn_at_ms, engine_died_ms;
    int64_t engine_ready_ms; /* when it was seen RUNNING (0: not yet) */
    int engine_backoff_ms;
    bool engine_up;        /* it said RUNNING since it was forked */
    int64_t deaths_ms[CO_MAX_DEATHS]; /* ring of the latest deaths */
    uint32_t n_deaths;
    char engine_pid_path[PATH_MAX];
    hy_api_layer_kind_t kinds[8];
    char model_id[256];
    co_slot_t *slots;      /* [n_workers] */
    uint32_t n_workers;
    co_hash_t *hash;
    int listen_fd;
    bool socket_open;
    int control_fd;        /* [server] control_socket; -1 when none */
    int tcp_fd;            /* [server] listen; -1 when none */
    hy_net_allow_t allow;  /* [server] allow, for tcp_fd's peers */
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
    snprintf(co_engine_ident, sizeof co_engine_ident, "%s-engine", co->cfg->log.ident);
    return 0;
}

/* Tokenizer and chat template from the model file's metadata: the
 * workers' share of the model.  The weights are the engine's alone. */
static int co_load_vocab(co_t *co, char *err)
{
    int rc;

    if ((rc = hy_gguf_open(&co->gguf, co->cfg->model.path, err)) != HY_OK ||
        (rc = hy_tok_load(&co->tok, co->gguf, err)) != HY_OK)
        return rc;
    co->w.bos_text = co_token_text(co->tok, hy_tok_bos(co->tok));
    co->w.eos_text = co_token_text(co->tok, hy_tok_eos(co->tok));
    return co_load_template(co->cfg, co->gguf, &co->w, &co->tmpl, err);
}

/* engine.pid in [server] run_dir, or next to the socket. */
static void co_engine_pid_path(co_t *co)
{
    const hy_config_t *cfg = co->cfg;
    const char *slash = strrchr(cfg->server.socket, '/');

    if (cfg->server.run_dir[0])
        snprintf(co->engine_pid_path, sizeof co->engine_pid_path, "%.4000s/engine.pid",
                 cfg->server.run_dir);
    else if (slash != NULL)
        snprintf(co->engine_pid_path, sizeof co->engine_pid_path, "%.*s/engine.pid",
                 (int)(slash - cfg->server.socket), cfg->server.socket);
    else
        snprintf(co->engine_pid_path, sizeof co->engine_pid_path, "engine.pid");
}

/* Written on every fork (renamed into place: a reader never sees half a
 * pid); a failure is logged, the engine runs regardless. */
static void co_write_engine_pid(co_t *co)
{
    char tmp[PATH_MAX + 8];
    FILE *f;
    bool ok;

    snprintf(tmp, sizeof tmp, "%s.tmp", co->engine_pid_path);
    if ((f = fopen(tmp, "w")) == NULL)
        goto fail;
    ok = fprintf(f, "%d\n", (int)co->engine_pid) > 0;
    if (fclose(f) != 0 || !ok || rename(tmp, co->engine_pid_path) != 0)
        goto fail;
    return;
fail:
    hy_log(LOG_WARNING, "engine_pid_file", "path=%s err=\"%s\"", co->engine_pid_path,
           strerror(errno));
}

/* Forks an engine process; the first one (hello_fd/go_fd >= 0) sizes the
 * segment, and the master's ends of those pipes (mine[2], -1 = none) are
 * closed in it, so that it reads EOF if the master goes away.  HY_OK with
 * co->engine_pid set. */
static int co_fork_engine(co_t *co, int hello_fd, int go_fd, const int mine[2], char *err)
{
    hy_engine_proc_args_t a = {.cfg = co->cfg, .master = getpid(), .hello_fd = hello_fd,
                               .go_fd = go_fd, .t0_ms = co_now_ms(),
                               .log_ident = co_engine_ident, .log_level = &co->ctl->log_level,
                               .log_gen = &co->ctl->log_gen};
    pid_t pid;

    pid = fork();
    if (pid < 0)
        return hy_err(err, HY_EIO, "fork: %s", strerror(errno));
    if (pid == 0) {
        for (int i = 0; i < 2; i++)
            if (mine[i] >= 0)
                close(mine[i]);
        /* not the engine's business: the sockets and the workers' guards */
        if (co->listen_fd >= 0)
            close(co->listen_fd);
        if (co->control_fd >= 0)
            close(co->control_fd);
        if (co->tcp_fd >= 0)
            close(co->tcp_fd);
        for (uint32_t i = 0; co->slots != NULL && i < co->n_workers; i++)
            hy_guard_close(&co->slots[i].guard);
        hy_log_open(co_engine_ident, co->cfg->log.facility, atomic_load(&co->ctl->log_level),
                    co->cfg->log.to_stderr);
        _exit(hy_engine_proc_main(&a));
    }
    co->engine_pid = pid;
    co->engine_born_ms = co_now_ms();
    co->engine_ready_ms = 0;
    co->engine_up = false;
    if (co->shm != NULL)
        atomic_store(&hy_shm_header_rw(co->shm)->engine_pid, (int32_t)pid);
    co_write_engine_pid(co);
    return HY_OK;
}

/* The first engine's second hello, after it attached: HY_OK when its
 * engine runs, else its reason (or that it died). */
static int co_engine_started(co_t *co, int fd, char *err)
{
    hy_engine_hello_t h;

    if (hy_engine_proc_pipe_io(fd, &h, sizeof h, false) != HY_OK)
        return hy_err(err, HY_EIO, "the engine process (pid %d) died while starting",
                      (int)co->engine_pid);
    h.err[sizeof h.err - 1] = '\0';
    return h.err[0] ? hy_err(err, HY_EINVAL, "%s", h.err) : HY_OK;
}

/* The first engine: fork it, take its numbers, create the segment it
 * sized, let it attach.  The segment is created here, by the master,
 * so it outlives every engine. */
static int co_start_engine(co_t *co, char *err)
{
    int hello[2] = {-1, -1}, go[2] = {-1, -1}, rc;

    co_engine_pid_path(co);
    if (pipe2(hello, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0) {
        rc = hy_err(err, HY_EIO, "pipe: %s", strerror(errno));
        goto out;
    }
    if ((rc = co_fork_engine(co, hello[1], go[0], (const int[2]){hello[0], go[1]}, err)) !=
        HY_OK)
        goto out;
    close(hello[1]);
    close(go[0]);
    hello[1] = go[0] = -1;
    if (hy_engine_proc_pipe_io(hello[0], &co->hello, sizeof co->hello, false) != HY_OK) {
        rc = hy_err(err, HY_EIO, "the engine process (pid %d) died while loading the model",
                    (int)co->engine_pid);
        goto out;
    }
    co->hello.err[sizeof co->hello.err - 1] = '\0';
    co->hello.arch[sizeof co->hello.arch - 1] = '\0';
    if (co->hello.err[0]) {
        rc = hy_err(err, HY_EINVAL, "%s", co->hello.err);
        goto out;
    }
    co->sp = co->hello.sp;
    if ((rc = hy_shm_create(&co->shm, co->cfg->server.instance, &co->sp, err)) != HY_OK)
        goto out;
    atomic_store(&hy_shm_header_rw(co->shm)->engine_state, HY_SHM_ENGINE_STARTING);
    atomic_store(&hy_shm_header_rw(co->shm)->engine_pid, (int32_t)co->engine_pid);
    /* before the go: the engine's disk tier comes online with the digest */
    if ((co->hash = malloc(sizeof *co->hash)) == NULL) {
        rc = hy_err(err, HY_ENOMEM, "out of memory");
        goto out;
    }
    co_hash_start(co->hash, co->cfg->model.path, hy_shm_header_rw(co->shm));
    if (write(go[1], "y", 1) != 1) {
        rc = hy_err(err, HY_EIO, "the engine process (pid %d) is gone", (int)co->engine_pid);
        goto out;
    }
    /* What it builds on the segment ([cache] warm_mb, disk_dir: the tier
     * store) can still be misconfigured: its second hello says it runs,
     * or why not, so that a bad key fails the start instead of a restart
     * loop. */
    if ((rc = co_engine_started(co, hello[0], err)) != HY_OK)
        goto out;
    co->engine_backoff_ms = 0;
    rc = HY_OK;
out:
    for (int i = 0; i < 2; i++) {
        if (hello[i] >= 0)
            close(hello[i]);
        if (go[i] >= 0)
            close(go[i]);
    }
    return rc;
}

/* [server] listen: bound here, before privileges are dropped (a port
 * below 1024), with its allow-list built by the parsers that accepted both
 * values when the configuration was read. */
static int co_open_tcp(co_t *co, char *err)
{
    const hy_config_t *cfg = co->cfg;
    struct sockaddr_storage ss;
    socklen_t len;
    char why[200];
    int rc;

    if (hy_net_parse_listen(cfg->server.listen, &ss, &len, why, sizeof why) != HY_OK)
        return hy_err(err, HY_EINVAL, "[server] listen = %s: %s", cfg->server.listen, why);
    if (hy_net_parse_allow(cfg->server.allow, &co->allow, why, sizeof why) != HY_OK)
        return hy_err(err, HY_EINVAL, "[server] allow = %s: %s", cfg->server.allow, why);
    if ((rc = hy_net_listen(&ss, len, cfg->server.listen, 128, &co->tcp_fd, err)) != HY_OK)
        return rc;
    /* without a secret, every allowed peer is believed for any key id */
    hy_log(co->secret[0] ? LOG_INFO : LOG_WARNING, "listening",
           "listen=%s allow=%s secret=%s", cfg->server.listen,
           cfg->server.allow[0] ? cfg->server.allow : "127.0.0.0/8, ::1/128",
           co->secret[0] ? "yes" : "none");
    return HY_OK;
}

/* The control page, the listening socket (and the control socket and the
 * TCP socket, when configured): opened before privileges are dropped. */
static int co_open_sockets(co_t *co, char *err)
{
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
    return co->cfg->server.listen[0] ? co_open_tcp(co, err) : HY_OK;
}

/* What the workers inherit: the above, the segment, the model's facts
 * for /v1/models (the first engine's hello). */
static void co_prepare_workers(co_t *co)
{
    hy_worker_ctx_t *w = &co->w;
    size_t k = 0;
    int32_t l;

    w->cfg = co->cfg;
    w->ctl = co->ctl;
    w->shm = co->shm;
    w->tok = co->tok;
    w->tmpl = co->tmpl;
    w->n_ctx = co->hello.n_ctx;
    w->n_vocab = co->hello.n_vocab;
    w->listen_fd = co->listen_fd;
    w->control_fd = co->control_fd;
    w->tcp_fd = co->tcp_fd;
    w->allow = &co->allow;
    w->guard_fd = -1;
    w->log_ident = co_worker_ident;
    w->info.id = co_model_id(co->cfg->model.path, co->model_id, sizeof co->model_id);
    w->info.created = (int64_t)time(NULL);
    w->info.max_model_len = co->hello.n_ctx;
    w->info.architecture = co->hello.arch;
    for (l = 0; l <= HY_LAYER_NONE && k < HY_ARRAY_LEN(co->kinds); l++)
        if (co->hello.layer_counts[l] > 0) {
            co->kinds[k].kind = hy_layer_kind_name((hy_layer_kind_t)l);
            co->kinds[k++].count = co->hello.layer_counts[l];
        }
    w->info.layers = co->kinds;
    w->info.n_layer_kinds = k;
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
           co->w.info.id, co->hello.arch, cfg->server.socket, cfg->server.instance,
           co->n_workers, co->hello.n_ctx, co->sp.n_pages, co->sp.n_request_slots,
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

/* Once the sockets are open, before any child exists: run as [server]
 * user from now on (the engine and the workers too; the segment is then
 * created as that user), owning what we remove at shutdown. */
/* A segment of this instance that no live master owns is removed before
 * privileges are dropped: one left by a run as root (a version or setup that
 * never dropped them) could not be removed, nor replaced, afterwards.  A live
 * owner is not an error here: creating the segment reports it. */
static int co_remove_stale(co_t *co, char *err)
{
    char why[HY_ERR_LEN];
    int rc = hy_shm_remove_stale(co->cfg->server.instance, why);

    if (rc == HY_OK)
        hy_log(LOG_WARNING, "stale_segment_removed", "instance=%s", co->cfg->server.instance);
    else if (rc == HY_EIO)
        return hy_err(err, rc, "%s", why);
    return HY_OK;
}

static int co_drop_privileges(co_t *co, char *err)
{
    const hy_config_t *cfg = co->cfg;
    const char *paths[2];
    int rc;

    if (!cfg->server.user[0]) {
        if (geteuid() == 0)
            hy_log(LOG_WARNING, "running_as_root", "detail=%s",
                   "no [server] user: the engine and the workers run as root");
        return HY_OK;
    }
    paths[0] = cfg->server.socket;
    paths[1] = cfg->server.control_socket;
    if ((rc = hy_access_become(cfg->server.user, paths, 2, err)) != HY_OK)
        return rc;
    hy_log(LOG_INFO, "running_as", "user=%s uid=%d gid=%d", cfg->server.user, (int)getuid(),
           (int)getgid());
    return HY_OK;
}

/* Everything up to serving.  The signals we handle are blocked before any
 * thread exists (the hash thread inherits the mask, so they all come to
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
    if ((rc = co_load_secret(co, err)) != HY_OK || (rc = co_load_vocab(co, err)) != HY_OK ||
        (rc = co_open_sockets(co, err)) != HY_OK || (rc = co_remove_stale(co, err)) != HY_OK ||
        (rc = co_drop_privileges(co, err)) != HY_OK ||
        (rc = co_start_engine(co, err)) != HY_OK)
        return rc;
    co_prepare_workers(co);
    return co_start_workers(co, err);
}

/* ---- the engine's life after the first start -------------------------------- */

/* Deaths within the last [server] engine_restart_window_s, this one included. */
static uint32_t co_recent_deaths(const co_t *co, int64_t now)
{
    int64_t window = (int64_t)co->cfg->server.engine_restart_window_s * 1000;
    uint32_t k, n = HY_MIN(co->n_deaths, (uint32_t)CO_MAX_DEATHS), recent = 0;

    for (k = 0; k < n; k++)
        recent += now - co->deaths_ms[k] < window;
    return recent;
}

/* The engine is gone.  Its requests resume on the next engine (forked
 * after a backoff that grows while engines die young), or, in a restart
 * storm, end with an error; then no engine is tried until the window has
 * passed, and new requests get 503 with Retry-After meanwhile. */
static void co_engine_died(co_t *co, int status, bool stopping)
{
    const hy_config_t *cfg = co->cfg;
    hy_shm_header_t *h = hy_shm_header_rw(co->shm);
    int64_t now = co_now_ms();
    int requeued = 0, failed = 0;
    uint32_t recent;
    char msg[HY_REQ_ERRMSG_LEN];

    if (WIFSIGNALED(status))
        hy_log(stopping ? LOG_INFO : LOG_ERR, "engine_died", "pid=%d signal=%d name=%s lived_ms=%lld",
               (int)co->engine_pid, WTERMSIG(status), strsignal(WTERMSIG(status)),
               (long long)(now - co->engine_born_ms));
    else
        hy_log(stopping ? LOG_INFO : LOG_ERR, "engine_exited", "pid=%d status=%d lived_ms=%lld",
               (int)co->engine_pid, WEXITSTATUS(status), (long long)(now - co->engine_born_ms));
    co->engine_pid = 0;
    co->engine_died_ms = now;
    atomic_store(&h->engine_pid, 0);
    unlink(co->engine_pid_path);
    if (stopping) {
        hy_shm_engine_lost(co->shm, "the server is shutting down", NULL, NULL);
        return;
    }
    co->deaths_ms[co->n_deaths++ % CO_MAX_DEATHS] = now;
    recent = co_recent_deaths(co, now);
    if (recent >= cfg->server.engine_restart_max) {
        snprintf(msg, sizeof msg,
                 "the engine process died %u times within %u s ([server] engine_restart_max); "
                 "retry later", recent, cfg->server.engine_restart_window_s);
        atomic_store(&h->engine_retry_at_ns,
                     hy_shm_now_ns() + (int64_t)cfg->server.engine_restart_window_s * 1000000000);
        atomic_store(&h->engine_state, HY_SHM_ENGINE_FAILED);
        if (hy_shm_engine_lost(co->shm, msg, &requeued, &failed) != HY_OK)
            hy_log(LOG_ERR, "engine_recovery_failed", "detail=%s", "the segment mutex is unrecoverable");
        co->engine_respawn_at_ms = now + (int64_t)cfg->server.engine_restart_window_s * 1000;
        hy_log(LOG_ERR, "engine_restart_storm",
               "deaths=%u window_s=%u failed_requests=%d retry_in_s=%u", recent,
               cfg->server.engine_restart_window_s, failed, cfg->server.engine_restart_window_s);
        return;
    }
    atomic_store(&h->engine_state, HY_SHM_ENGINE_RESTARTING);
    if (hy_shm_engine_lost(co->shm, NULL, &requeued, &failed) != HY_OK)
        hy_log(LOG_ERR, "engine_recovery_failed", "detail=%s", "the segment mutex is unrecoverable");
    /* at once after a stable run or an engine that served a while (not
     * one dying of its start: CO_ENGINE_PROVEN_MS) */
    if (now - co->engine_born_ms >= CO_STABLE_MS ||
        (co->engine_ready_ms > 0 && now - co->engine_ready_ms >= CO_ENGINE_PROVEN_MS))
        co->engine_backoff_ms = 0;
    else
        co->engine_backoff_ms = HY_MIN(HY_MAX(co->engine_backoff_ms * 2, CO_BACKOFF_MIN_MS),
                                       CO_BACKOFF_MAX_MS);
    co->engine_respawn_at_ms = now + co->engine_backoff_ms;
    hy_log(LOG_WARNING, "engine_restarting", "requeued_requests=%d backoff_ms=%d deaths=%u",
           requeued, co->engine_backoff_ms, recent);
}

/* Each supervision pass: note an engine that came up, refuse what was
 * queued while FAILED, fork a new engine when one is due. */
static void co_engine_tick(co_t *co)
{
    hy_shm_header_t *h = hy_shm_header_rw(co->shm);
    uint32_t state = atomic_load(&h->engine_state);
    int64_t now = co_now_ms();
    char err[HY_ERR_LEN];

    if (co->engine_pid != 0 && !co->engine_up && state == HY_SHM_ENGINE_RUNNING) {
        co->engine_up = true;
        co->engine_ready_ms = now;
        hy_log(LOG_INFO, "engine_ready", "pid=%d load_ms=%lld restart_ms=%lld",
               (int)co->engine_pid, (long long)(now - co->engine_born_ms),
               (long long)(co->engine_died_ms ? now - co->engine_died_ms : 0));
    }
    if (state == HY_SHM_ENGINE_FAILED) {
        int n = hy_shm_fail_queued(co->shm, "the engine process is restarting too often; "
                                            "retry later");
        if (n > 0)
            hy_log(LOG_WARNING, "requests_refused", "requests=%d reason=engine_restart_storm", n);
    }
    if (co->engine_pid != 0 || now < co->engine_respawn_at_ms)
        return;
    atomic_store(&h->engine_state, HY_SHM_ENGINE_RESTARTING);
    if (co_fork_engine(co, -1, -1, (const int[2]){-1, -1}, err) != HY_OK) {
        hy_log(LOG_ERR, "engine_fork_failed", "err=%s", err);
        co->engine_respawn_at_ms = now + CO_BACKOFF_MAX_MS;
        return;
    }
    atomic_fetch_add(&hy_shm_stats(co->shm)->engine_restarts, 1);
    hy_log(LOG_INFO, "engine_respawned", "pid=%d", (int)co->engine_pid);
}

/* At shutdown, after the workers: SIGTERM (the engine cancels what it
 * holds), SIGKILL after the grace period. */
static void co_stop_engine(co_t *co)
{
    int64_t kill_at = co_now_ms() + CO_KILL_GRACE_MS;
    int status;

    if (co->engine_pid == 0)
        return;
    kill(co->engine_pid, SIGTERM);
    for (;;) {
        pid_t r = waitpid(co->engine_pid, &status, WNOHANG);

        if (r == co->engine_pid || (r < 0 && errno != EINTR))
            break;
        if (kill_at != 0 && co_now_ms() >= kill_at) {
            kill(co->engine_pid, SIGKILL);
            kill_at = 0;
        }
        usleep(10000);
    }
    co->engine_pid = 0;
    unlink(co->engine_pid_path);
}

/* Until SIGTERM/SIGINT: reap and respawn workers, reload on SIGHUP, then
 * drain (new work refused, in-flight streams finish, up to drain_seconds;
 * a second signal stops at once) and stop the workers. */
static void co_supervise(co_t *co)
{
    const hy_config_t *cfg = co->cfg;
    int64_t drain_until = 0, kill_at = 0;
    bool draining = false, stopping = false;
    int engine_status;

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
        co_reap(co->shm, co->slots, co->n_workers, stopping, co->engine_pid, &engine_status);
        if (engine_status >= 0)
            co_engine_died(co, engine_status, stopping);
        if (!stopping)
            co_engine_tick(co);
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
    if (failed && co->slots != NULL)
        co_signal_all(co->slots, co->n_workers, SIGKILL);
    if (failed && co->engine_pid != 0)
        kill(co->engine_pid, SIGKILL);
    if (failed)
        while (waitpid(-1, NULL, 0) > 0)
            ;
    else
        co_stop_engine(co);
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
    if (co->tcp_fd >= 0)
        close(co->tcp_fd);
    explicit_bzero(co->secret, sizeof co->secret);
    if (co->hash != NULL)
        co_hash_stop(co->hash);
    free(co->hash);
    if (co->engine_pid_path[0])
        unlink(co->engine_pid_path);
    if (co->shm != NULL)
        hy_shm_close(co->shm);
    if (co->ctl != MAP_FAILED)
        munmap(co->ctl, sizeof *co->ctl);
    free(co->slots);
    hy_chat_free(co->tmpl);
    free((char *)co->w.bos_text);
    free((char *)co->w.eos_text);
    hy_tok_free(co->tok);
    hy_gguf_close(co->gguf);
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
    co.tcp_fd = -1;
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
