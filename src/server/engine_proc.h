/*
 * engine_proc.h - the engine process of `hyserve serve`: the one child of
 * the master (coordinator.c) that loads the weights and runs the engine
 * loop on the shared segment's request slots.  It can crash (a backend
 * fault, the OOM killer, kill -9) without taking the service down: the
 * master starts a new one, which attaches to the same segment and resumes
 * the requests the dead one held (ipc/ring.h hy_shm_engine_lost).
 *
 * The first engine sizes the segment: it loads the model, works out the
 * page table the memory budget holds and sends those numbers to the master
 * over a pipe (hy_engine_hello_t); the master, which never loads a model,
 * creates the segment and answers one byte, and only then does the engine
 * attach.  Later engines attach at once and take the page table's numbers
 * from the segment, so a restart never resizes what workers have mapped.
 */
#ifndef HY_SERVER_ENGINE_PROC_H
#define HY_SERVER_ENGINE_PROC_H

#include <stdatomic.h>
#include <sys/types.h>

#include "common/config.h"
#include "ipc/shm.h"
#include "model/model.h"

/* What the first engine tells the master: the segment's numbers and the
 * model facts the workers report (/v1/models). */
typedef struct {
    hy_shm_params_t sp;
    int32_t n_ctx;   /* per sequence */
    int32_t n_vocab; /* the model's (token_embd rows) */
    int32_t layer_counts[HY_LAYER_NONE + 1];
    char arch[32];
    char err[256];   /* non-empty: the engine could not start, and why */
} hy_engine_hello_t;

typedef struct {
    const hy_config_t *cfg;
    pid_t master;  /* the parent: gone means exit (PR_SET_PDEATHSIG) */
    int hello_fd;  /* the first engine writes its hello here; -1 for later ones */
    int go_fd;     /* ... and reads the master's one byte here ('y': attach) */
    int64_t t0_ms; /* when the master forked it, for the load time */
    const char *log_ident;           /* "<ident>-engine" */
    const _Atomic int32_t *log_level; /* the master's, changed by SIGHUP ... */
    const _Atomic int32_t *log_gen;   /* ... which bumps this: reopen the log */
} hy_engine_proc_args_t;

/* All n bytes through the hello pipe (EINTR retried): HY_OK, or HY_EIO
 * at EOF or an error (the other side is gone). */
int hy_engine_proc_pipe_io(int fd, void *buf, size_t n, bool write_it);

/* The child's whole life after fork; returns its exit status (0 after a
 * SIGTERM from the master, 1 when it could not start). */
int hy_engine_proc_main(const hy_engine_proc_args_t *a);

#endif
