/*
 * worker.h - one preforked FastCGI worker process: an FCGX_Accept_r loop
 * (optionally several accept threads) that parses OpenAI requests, tokenizes
 * them, submits them to the engine through the shared-memory request ring and
 * streams the tokens back.  Workers are forked by the master once the first
 * engine has sized the segment, so everything in hy_worker_ctx_t (tokenizer,
 * compiled chat template, model facts) is inherited read-only; they never
 * touch weights, and they outlive engine restarts.
 */
#ifndef HY_SERVER_WORKER_H
#define HY_SERVER_WORKER_H

#include <stdatomic.h>

#include "common/config.h"
#include "common/netaddr.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "ipc/ring.h"
#include "ipc/shm.h"
#include "server/sse.h"

/* State the coordinator shares with every worker through a MAP_SHARED
 * anonymous page created before the first fork (not in the segment, whose
 * layout belongs to the engine side). */
typedef struct {
    _Atomic int32_t draining;  /* 1: refuse new generations, /health 503 */
    _Atomic int32_t log_level; /* changed by SIGHUP; workers re-open the log */
    _Atomic int32_t log_gen;   /* bumped on every reload */
} hy_serve_ctl_t;

typedef struct {
    const hy_config_t *cfg;
    hy_serve_ctl_t *ctl;
    hy_shm_t *shm;
    const hy_tok_t *tok;
    const hy_chat_tmpl_t *tmpl; /* NULL: the model has no chat template */
    const char *bos_text;       /* for the template, NULL when none */
    const char *eos_text;
    hy_api_model_info_t info;   /* /v1/models; info.id is the served model id */
    int32_t n_ctx;              /* longest prompt + completion */
    int32_t n_vocab;
    int listen_fd;
    int control_fd;             /* [server] control_socket, -1 = none */
    int tcp_fd;                 /* [server] listen, -1 = none */
    const hy_net_allow_t *allow; /* [server] allow: tcp_fd's peers */
    int guard_fd;               /* the coordinator's connection guard (guard.h), -1 = none */
    const char *secret;         /* HYSERVE_SECRET every request must carry; "" = none (access.h) */
    const char *log_ident;      /* "<ident>-fcgi" */
} hy_worker_ctx_t;

/* The worker process body: returns when shut down (SIGTERM / SIGUSR1 from
 * the coordinator, after in-flight requests finished).  Returns an exit
 * status. */
int hy_worker_main(hy_worker_ctx_t *w);

#endif
