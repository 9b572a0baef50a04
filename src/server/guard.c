/*
 * guard.c - the connection guard declared in guard.h: workers pass the
 * FastCGI connections they accept to the supervisor as SCM_RIGHTS messages
 * on a SOCK_SEQPACKET pair, and the supervisor writes an abort nginx cannot
 * mistake for the end of a response onto those a dead worker still held.
 */
#define _GNU_SOURCE /* MSG_CMSG_CLOEXEC */
#include "server/guard.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"

/* One message: a hold carries the connection as SCM_RIGHTS. */
typedef struct {
    uint8_t op; /* GD_HOLD or GD_DROP */
    uint8_t pad[3];
    uint32_t thread;
} gd_msg_t;

enum { GD_HOLD = '+', GD_DROP = '-' };

/* A worker blocked this long on a supervisor that does not read serves the
 * request unguarded instead (the supervisor reads every 100 ms). */
#define GD_SEND_TIMEOUT_MS 1000

/* FastCGI (fcgi spec 3.3): version 1, FCGI_STDERR = 7; nginx numbers its
 * only request 1 and refuses any other id, version or type. */
#define GD_FCGI_VERSION 1
#define GD_FCGI_STDERR 7
#define GD_FCGI_REQUEST_ID 1

/* ---- worker side -------------------------------------------------------------- */

static int gd_send(int fd, uint8_t op, uint32_t thread, int conn_fd, char *err)
{
    gd_msg_t m = {.op = op, .thread = thread};
    struct iovec iov = {.iov_base = &m, .iov_len = sizeof m};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    ssize_t n;

    if (conn_fd >= 0) {
        struct cmsghdr *c;

        memset(&ctl, 0, sizeof ctl);
        mh.msg_control = ctl.buf;
        mh.msg_controllen = sizeof ctl.buf;
        c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &conn_fd, sizeof(int));
    }
    do
        n = sendmsg(fd, &mh, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof m)
        return hy_err(err, HY_EIO, "connection guard: %s", n < 0 ? strerror(errno) : "short send");
    return HY_OK;
}

int hy_guard_hold(int worker_end, uint32_t thread, int conn_fd, char *err)
{
    return gd_send(worker_end, GD_HOLD, thread, conn_fd, err);
}

int hy_guard_drop(int worker_end, uint32_t thread, char *err)
{
    return gd_send(worker_end, GD_DROP, thread, -1, err);
}

/* ---- supervisor side -------------------------------------------------------------- */

void hy_guard_init(hy_guard_t *g)
{
    memset(g, 0, sizeof *g);
    g->fd = -1;
}

static void gd_close_conns(hy_guard_t *g)
{
    for (uint32_t i = 0; g->conns != NULL && i < g->n_threads; i++) {
        if (g->conns[i] >= 0)
            close(g->conns[i]);
        g->conns[i] = -1;
    }
}

int hy_guard_open(hy_guard_t *g, uint32_t n_threads, int *worker_end, char *err)
{
    struct timeval tv = {GD_SEND_TIMEOUT_MS / 1000, GD_SEND_TIMEOUT_MS % 1000 * 1000};
    int sv[2];

    *worker_end = -1;
    gd_close_conns(g);
    if (g->fd >= 0)
        close(g->fd);
    g->fd = -1;
    if (n_threads != g->n_threads) {
        int *c = realloc(g->conns, (n_threads ? n_threads : 1) * sizeof *c);

        if (c == NULL)
            return hy_err(err, HY_ENOMEM, "connection guard: out of memory");
        g->conns = c;
        g->n_threads = n_threads;
    }
    for (uint32_t i = 0; i < n_threads; i++)
        g->conns[i] = -1;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return hy_err(err, HY_EIO, "connection guard: socketpair: %s", strerror(errno));
    (void)setsockopt(sv[1], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    g->fd = sv[0];
    *worker_end = sv[1];
    return HY_OK;
}

/* One abort onto conn: all of it or, when nginx has not read what the
 * connection already holds, nothing (HY_EFULL: try again later).  A
 * connection nginx has closed, or one the worker had finished (its write
 * side shut), refuses it; nothing is left to abort then. */
size_t hy_guard_abort_record(unsigned char *rec, size_t cap, const char *why)
{
    size_t len = strlen(why), pad;

    if (len > 256)
        len = 256;
    pad = (8 - len % 8) % 8;
    if (cap < 8 + len + pad + 8)
        return 0;
    rec[0] = GD_FCGI_VERSION;
    rec[1] = GD_FCGI_STDERR;
    rec[2] = 0;
    rec[3] = GD_FCGI_REQUEST_ID;
    rec[4] = (unsigned char)(len >> 8);
    rec[5] = (unsigned char)(len & 0xff);
    rec[6] = (unsigned char)pad;
    rec[7] = 0;
    memcpy(rec + 8, why, len);
    memset(rec + 8 + len, 0, pad);
    /* then a header with version 0: nginx stops reading and aborts */
    memset(rec + 8 + len + pad, 0, 8);
    return 8 + len + pad + 8;
}

static int gd_write_abort(int conn, const char *why)
{
    unsigned char rec[HY_GUARD_ABORT_MAX];
    size_t n = hy_guard_abort_record(rec, sizeof rec, why);
    ssize_t w;

    /* MSG_DONTWAIT, not O_NONBLOCK: the descriptor shares its file status
     * flags with the worker's */
    do
        w = send(conn, rec, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return HY_EFULL;
    return w == (ssize_t)n ? HY_OK : HY_EIO;
}

static void gd_retry_pending(hy_guard_t *g)
{
    uint32_t i = 0;

    while (i < g->n_pending) {
        if (gd_write_abort(g->pending[i], g->why) == HY_EFULL) {
            i++;
            continue;
        }
        close(g->pending[i]);
        g->pending[i] = g->pending[--g->n_pending];
    }
}

void hy_guard_poll(hy_guard_t *g)
{
    for (;;) {
        gd_msg_t m;
        struct iovec iov = {.iov_base = &m, .iov_len = sizeof m};
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(sizeof(int))];
        } ctl;
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                            .msg_controllen = sizeof ctl.buf};
        struct cmsghdr *c;
        int conn = -1;
        ssize_t n;

        if (g->fd < 0)
            break;
        n = recvmsg(g->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* nothing more now, or the worker's end is closed */
        for (c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
                c->cmsg_len >= CMSG_LEN(sizeof(int)))
                memcpy(&conn, CMSG_DATA(c), sizeof(int));
        if (mh.msg_flags & MSG_CTRUNC)
            /* the kernel could not give us the descriptor (RLIMIT_NOFILE) */
            hy_log(LOG_WARNING, "guard_lost", "thread=%u detail=%s", m.thread,
                   "a connection is served unguarded: no descriptor to spare");
        if (n != (ssize_t)sizeof m || m.thread >= g->n_threads ||
            (m.op != GD_HOLD && m.op != GD_DROP)) {
            if (conn >= 0)
                close(conn);
            continue;
        }
        if (g->conns[m.thread] >= 0)
            close(g->conns[m.thread]);
        g->conns[m.thread] = m.op == GD_HOLD ? conn : -1;
        if (m.op == GD_DROP && conn >= 0)
            close(conn);
    }
    gd_retry_pending(g);
}

int hy_guard_abort(hy_guard_t *g, pid_t pid, int status)
{
    int n = 0;

    /* holds still queued on the socketpair carry their connection with
     * them, so a worker killed right after accepting is covered too */
    hy_guard_poll(g);
    if (WIFSIGNALED(status))
        snprintf(g->why, sizeof g->why,
                 "hyserve: worker %d was killed by signal %d (%s) while answering; the "
                 "response is aborted",
                 (int)pid, WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(g->why, sizeof g->why,
                 "hyserve: worker %d exited (status %d) while answering; the response is "
                 "aborted",
                 (int)pid, WEXITSTATUS(status));
    for (uint32_t i = 0; g->conns != NULL && i < g->n_threads; i++) {
        int conn = g->conns[i];

        if (conn < 0)
            continue;
        g->conns[i] = -1;
        n++;
        if (gd_write_abort(conn, g->why) == HY_EFULL) {
            if (g->n_pending == g->cap_pending) {
                uint32_t cap = g->cap_pending ? g->cap_pending * 2 : 8;
                int *p = realloc(g->pending, cap * sizeof *p);

                if (p == NULL) {
                    close(conn);
                    continue;
                }
                g->pending = p;
                g->cap_pending = cap;
            }
            g->pending[g->n_pending++] = conn;
            continue;
        }
        close(conn);
    }
    if (g->fd >= 0)
        close(g->fd);
    g->fd = -1;
    return n;
}

void hy_guard_close(hy_guard_t *g)
{
    gd_close_conns(g);
    for (uint32_t i = 0; i < g->n_pending; i++)
        close(g->pending[i]);
    if (g->fd >= 0)
        close(g->fd);
    free(g->conns);
    free(g->pending);
    hy_guard_init(g);
}
