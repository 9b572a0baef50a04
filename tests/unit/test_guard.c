/*
 * test_guard.c - the connection guard (src/server/guard.h) without nginx:
 * a socketpair stands for nginx's FastCGI connection, a forked child for the
 * worker.  A worker killed while it holds the connection leaves, after the
 * records it wrote, a FastCGI stderr record naming the signal and a header
 * with version 0 (what makes nginx abort); a worker that dropped it leaves
 * nothing; an abort that finds the connection full waits, then goes out
 * once nginx reads; holds still queued when the worker dies count too.
 */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/guard.h"
#include "test.h"

/* A complete FCGI_STDOUT record with 8 content bytes, as libfcgi writes. */
static const unsigned char k_record[16] = {1, 6, 0, 1, 0, 8, 0, 0, 'd', 'a', 't', 'a', ':', ' ',
                                           'x', '\n'};

/* Everything the "nginx" end receives until EOF (the test's end is
 * blocking; every other holder of the connection has closed by then). */
static size_t read_all(int fd, unsigned char *buf, size_t cap)
{
    size_t n = 0;
    ssize_t r;

    while (n < cap && (r = read(fd, buf + n, cap - n)) > 0)
        n += (size_t)r;
    return n;
}

/* Forks a "worker" that holds conn for accept thread `thread`, writes one
 * record, optionally drops it, then dies by SIGKILL or exits. */
static pid_t worker(int wend, uint32_t thread, int conn, bool drop, bool kill_self)
{
    pid_t pid = fork();
    char err[HY_ERR_LEN];

    if (pid != 0)
        return pid;
    if (hy_guard_hold(wend, thread, conn, err) != HY_OK)
        _exit(3);
    if (write(conn, k_record, sizeof k_record) != (ssize_t)sizeof k_record)
        _exit(4);
    if (drop) {
        shutdown(conn, SHUT_WR); /* what libfcgi's close does first */
        if (hy_guard_drop(wend, thread, err) != HY_OK)
            _exit(5);
    }
    if (kill_self)
        raise(SIGKILL);
    _exit(0);
}

/* Checks buf = k_record, a stderr record whose text contains want, and a
 * version-0 header, nothing else. */
static bool aborted_after_record(const unsigned char *buf, size_t n, const char *want)
{
    size_t len, pad;

    if (n < sizeof k_record + 16 || memcmp(buf, k_record, sizeof k_record) != 0)
        return false;
    buf += sizeof k_record;
    n -= sizeof k_record;
    if (buf[0] != 1 || buf[1] != 7 || buf[2] != 0 || buf[3] != 1)
        return false;
    len = (size_t)buf[4] << 8 | buf[5];
    pad = buf[6];
    if (n != 8 + len + pad + 8 || (len + pad) % 8 != 0)
        return false;
    if (memmem(buf + 8, len, want, strlen(want)) == NULL)
        return false;
    for (size_t i = 0; i < 8; i++)
        if (buf[8 + len + pad + i] != 0)
            return false;
    return true;
}

int main(void)
{
    unsigned char buf[1 << 16];
    char err[HY_ERR_LEN];
    hy_guard_t g;
    int wend, cv[2], status;
    pid_t pid;
    size_t n;

    signal(SIGPIPE, SIG_IGN);
    hy_guard_init(&g);

    /* 1: killed while holding: the record, then the abort */
    HY_T_OK(hy_guard_open(&g, 3, &wend, err) == HY_OK && wend >= 0, "open gives the worker its end of a new socketpair%s", err);
    socketpair(AF_UNIX, SOCK_STREAM, 0, cv);
    pid = worker(wend, 2, cv[1], false, true);
    close(wend);
    close(cv[1]);
    waitpid(pid, &status, 0);
    HY_T_OK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the worker died by SIGKILL");
    /* the hold was never read before the death: it is still queued */
    HY_T_OK(hy_guard_abort(&g, pid, status) == 1, "one held connection is aborted");
    n = read_all(cv[0], buf, sizeof buf);
    HY_T_OK(aborted_after_record(buf, n, "killed by signal 9"),
            "nginx reads the worker's record, a stderr record naming signal 9, then a version 0 "
            "header (%zu bytes)",
            n);
    close(cv[0]);

    /* 2: a finished request (dropped) gets nothing after the worker exits */
    HY_T_OK(hy_guard_open(&g, 3, &wend, err) == HY_OK, "a new socketpair for the next worker");
    socketpair(AF_UNIX, SOCK_STREAM, 0, cv);
    pid = worker(wend, 0, cv[1], true, false);
    close(wend);
    close(cv[1]);
    waitpid(pid, &status, 0);
    hy_guard_poll(&g);
    HY_T_OK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && g.conns[0] == -1,
            "a drop releases the held connection");
    HY_T_OK(hy_guard_abort(&g, pid, status) == 0, "a worker that held nothing aborts nothing");
    n = read_all(cv[0], buf, sizeof buf);
    HY_T_OK(n == sizeof k_record && memcmp(buf, k_record, n) == 0,
            "nginx reads the record, then a clean end (%zu bytes)", n);
    close(cv[0]);

    /* 3: a full connection: the abort waits for room, then goes out */
    HY_T_OK(hy_guard_open(&g, 1, &wend, err) == HY_OK, "open for one thread");
    socketpair(AF_UNIX, SOCK_STREAM, 0, cv);
    {
        int small = 4096;
        size_t filled = 0;
        ssize_t w;

        setsockopt(cv[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
        pid = worker(wend, 0, cv[1], false, true);
        close(wend);
        waitpid(pid, &status, 0);
        hy_guard_poll(&g);
        /* fill what nginx has not read (the test still has a descriptor) */
        while ((w = send(cv[1], buf, 512, MSG_DONTWAIT)) > 0)
            filled += (size_t)w;
        close(cv[1]);
        HY_T_OK(hy_guard_abort(&g, pid, status) == 1 && g.n_pending == 1,
                "an abort that finds no room waits (%zu bytes queued)", filled);
        n = 0;
        while (n < sizeof k_record + filled) {
            ssize_t r = read(cv[0], buf + n, sizeof k_record + filled - n);
            if (r <= 0)
                break;
            n += (size_t)r;
        }
        hy_guard_poll(&g);
        HY_T_OK(g.n_pending == 0, "once nginx read, the next poll writes it");
        n = read_all(cv[0], buf, sizeof buf);
        HY_T_OK(n >= 16 && buf[0] == 1 && buf[1] == 7 && buf[n - 8] == 0 &&
                    memmem(buf, n, "killed by signal 9", 18) != NULL,
                "and nginx then reads the stderr record and the version 0 header");
        close(cv[0]);
    }

    /* 4: a connection nginx already closed: nothing to write, nothing waits */
    HY_T_OK(hy_guard_open(&g, 2, &wend, err) == HY_OK, "open again");
    socketpair(AF_UNIX, SOCK_STREAM, 0, cv);
    close(cv[0]);
    pid = worker(wend, 1, cv[1], false, true);
    close(wend);
    close(cv[1]);
    waitpid(pid, &status, 0);
    HY_T_OK(hy_guard_abort(&g, pid, status) == 1 && g.n_pending == 0,
            "a closed connection is let go, not kept pending");

    /* 5: a hold naming a thread out of range is refused */
    HY_T_OK(hy_guard_open(&g, 1, &wend, err) == HY_OK, "open for one thread again");
    socketpair(AF_UNIX, SOCK_STREAM, 0, cv);
    HY_T_OK(hy_guard_hold(wend, 7, cv[1], err) == HY_OK, "a hold for thread 7 is sent");
    hy_guard_poll(&g);
    HY_T_OK(g.conns[0] == -1, "and ignored (its descriptor closed)");
    close(cv[0]);
    close(cv[1]);
    close(wend);
    hy_guard_close(&g);
    HY_T_OK(g.fd == -1 && g.conns == NULL && g.n_pending == 0, "close releases everything");
    return hy_t_done();
}
