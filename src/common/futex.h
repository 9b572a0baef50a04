/*
 * futex.h - the two Linux futex calls hyserve uses, in one place: wait while
 * a 32-bit word still holds an expected value, and wake its waiters.  The
 * shared forms work on a word in memory mapped by several processes (the
 * engine's and the workers' wake-ups in the shared segment); the private
 * forms are for words one process's threads share (the CPU thread pool),
 * which the kernel can look up without the mapping's inode.  Header-only:
 * each is one system call, and the thread pool's callers are hot.
 */
#ifndef HY_COMMON_FUTEX_H
#define HY_COMMON_FUTEX_H

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* op: FUTEX_WAIT or FUTEX_WAIT_PRIVATE.  0 when woken, the value already
 * differed, or a signal came (all mean "look again"); -1 on timeout. */
static inline int hy_futex_wait_op(_Atomic uint32_t *word, int op, uint32_t expected,
                                   int timeout_ms)
{
    struct timespec ts, *tp = NULL;
    long r;

    if (timeout_ms >= 0) {
        ts.tv_sec = timeout_ms / 1000;
        ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000L;
        tp = &ts;
    }
    r = syscall(SYS_futex, (uint32_t *)word, op, expected, tp, NULL, 0);
    return (r == -1 && errno == ETIMEDOUT) ? -1 : 0;
}

/* A word other processes map too.  timeout_ms -1 waits for ever. */
static inline int hy_futex_wait(_Atomic uint32_t *word, uint32_t expected, int timeout_ms)
{
    return hy_futex_wait_op(word, FUTEX_WAIT, expected, timeout_ms);
}

static inline void hy_futex_wake(_Atomic uint32_t *word, int n)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, n, NULL, NULL, 0);
}

/* A word only this process's threads use. */
static inline void hy_futex_wait_private(_Atomic uint32_t *word, uint32_t expected)
{
    (void)hy_futex_wait_op(word, FUTEX_WAIT_PRIVATE, expected, -1);
}

static inline void hy_futex_wake_private(_Atomic uint32_t *word, int n)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

#endif
