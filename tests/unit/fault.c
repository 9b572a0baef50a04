/*
 * fault.c - the allocation wrappers and the fault loop of fault.h.  Linked
 * only into the fault-injection test programs, whose link line wraps the
 * allocator (-Wl,--wrap=malloc,...: tests/unit/fault.mk), so the library
 * code under test is compiled exactly as shipped: no allocation site knows
 * about this file.  The counters are atomics because the code under test
 * may allocate from more than one thread (the engine thread).
 */
#include "fault.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cjson/cJSON.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __real_munmap(void *addr, size_t len);
ssize_t __real_pread(int fd, void *buf, size_t count, off_t off);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
void *__wrap_aligned_alloc(size_t align, size_t n);
int __wrap_posix_memalign(void **p, size_t align, size_t n);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __wrap_munmap(void *addr, size_t len);
ssize_t __wrap_pread(int fd, void *buf, size_t count, off_t off);

static atomic_long g_count, g_fail_at, g_live;
static atomic_bool g_fired, g_paused;
/* hy_fault_pread: bytes preads may still deliver (< 0: disarmed), and how
 * the read after them ends */
static atomic_long g_io_left = -1;
static atomic_int g_io_err;

/* One more allocation: false when it is the one that must fail. */
static bool hy_fault_pass(void)
{
    long k;

    if (atomic_load(&g_paused))
        return true;
    k = atomic_fetch_add(&g_count, 1) + 1;
    if (k == atomic_load(&g_fail_at)) {
        atomic_store(&g_fired, true);
        errno = ENOMEM;
        return false;
    }
    return true;
}

static void *hy_fault_track(void *p)
{
    if (p != NULL)
        atomic_fetch_add(&g_live, 1);
    return p;
}

void *__wrap_malloc(size_t n)
{
    return hy_fault_pass() ? hy_fault_track(__real_malloc(n)) : NULL;
}

void *__wrap_calloc(size_t k, size_t n)
{
    return hy_fault_pass() ? hy_fault_track(__real_calloc(k, n)) : NULL;
}

/* realloc(p, n) keeps p on failure, so the live count moves only when p is
 * NULL (an allocation) or n is 0 (glibc frees p and returns NULL). */
void *__wrap_realloc(void *p, size_t n)
{
    void *q;

    if (p != NULL && n == 0) {
        q = __real_realloc(p, 0);
        if (q == NULL)
            atomic_fetch_sub(&g_live, 1);
        return q;
    }
    if (!hy_fault_pass())
        return NULL;
    q = __real_realloc(p, n);
    if (p == NULL)
        hy_fault_track(q);
    return q;
}

void __wrap_free(void *p)
{
    if (p != NULL)
        atomic_fetch_sub(&g_live, 1);
    __real_free(p);
}

char *__wrap_strdup(const char *s)
{
    return hy_fault_pass() ? hy_fault_track(__real_strdup(s)) : NULL;
}

char *__wrap_strndup(const char *s, size_t n)
{
    return hy_fault_pass() ? hy_fault_track(__real_strndup(s, n)) : NULL;
}

void *__wrap_aligned_alloc(size_t align, size_t n)
{
    return hy_fault_pass() ? hy_fault_track(__real_aligned_alloc(align, n)) : NULL;
}

int __wrap_posix_memalign(void **p, size_t align, size_t n)
{
    int rc;

    if (!hy_fault_pass())
        return ENOMEM;
    rc = __real_posix_memalign(p, align, n);
    if (rc == 0)
        hy_fault_track(*p);
    return rc;
}

/* Mappings count as allocations too (the GGUF file, KV pages, the shared
 * segment): an mmap that fails with ENOMEM is an out-of-memory path. */
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    void *p;

    if (!hy_fault_pass())
        return MAP_FAILED;
    p = __real_mmap(addr, len, prot, flags, fd, off);
    if (p != MAP_FAILED)
        atomic_fetch_add(&g_live, 1);
    return p;
}

int __wrap_munmap(void *addr, size_t len)
{
    int rc = __real_munmap(addr, len);

    if (rc == 0)
        atomic_fetch_sub(&g_live, 1);
    return rc;
}

/* Reads deliver what hy_fault_pread allows, then end as it says. */
ssize_t __wrap_pread(int fd, void *buf, size_t count, off_t off)
{
    long left = atomic_load(&g_io_left);
    ssize_t n;

    if (left < 0)
        return __real_pread(fd, buf, count, off);
    if (left == 0) {
        int e = atomic_load(&g_io_err);

        if (e == 0)
            return 0;
        if (e == EINTR)
            atomic_store(&g_io_left, -1);
        errno = e;
        return -1;
    }
    n = __real_pread(fd, buf, count < (size_t)left ? count : (size_t)left, off);
    if (n > 0)
        atomic_fetch_sub(&g_io_left, (long)n);
    return n;
}

void hy_fault_pread(long after, int err)
{
    atomic_store(&g_io_err, err);
    atomic_store(&g_io_left, after);
}

void hy_fault_init(void)
{
    cJSON_Hooks h = {__wrap_malloc, __wrap_free};

    cJSON_InitHooks(&h);
}

void hy_fault_arm(long nth)
{
    atomic_store(&g_fail_at, 0);
    atomic_store(&g_paused, false);
    atomic_store(&g_fired, false);
    atomic_store(&g_count, 0);
    atomic_store(&g_fail_at, nth);
}

void hy_fault_pause(bool paused)
{
    atomic_store(&g_paused, paused);
}

long hy_fault_count(void)
{
    return atomic_load(&g_count);
}

bool hy_fault_fired(void)
{
    return atomic_load(&g_fired);
}

long hy_fault_live(void)
{
    return atomic_load(&g_live);
}

/* Counts a broken rule; the first one's story is kept. */
static void hy_fault_bad(hy_fault_result_t *res, long nth, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void hy_fault_bad(hy_fault_result_t *res, long nth, const char *fmt, ...)
{
    va_list ap;
    size_t at;

    if (res->bad++ > 0)
        return;
    snprintf(res->first_bad, sizeof res->first_bad, "allocation %ld: ", nth);
    at = strlen(res->first_bad);
    va_start(ap, fmt);
    vsnprintf(res->first_bad + at, sizeof res->first_bad - at, fmt, ap);
    va_end(ap);
}

/* One armed run (nth = 0: unarmed) with the rules of fault.h; returns the
 * allocations it made. */
static long hy_fault_run(hy_fault_fn_t fn, void *ctx, long nth, hy_fault_result_t *res)
{
    char why[512] = "";
    long live0 = hy_fault_live(), count;
    bool fired;
    int rc;

    hy_fault_arm(nth);
    rc = fn(ctx, why, sizeof why);
    hy_fault_pause(false);
    count = hy_fault_count();
    fired = hy_fault_fired();
    atomic_store(&g_fail_at, 0);
    if (nth > 0)
        res->runs++;
    if (rc > 0)
        hy_fault_bad(res, nth, "%s", why);
    else if (rc < 0 && nth == 0)
        hy_fault_bad(res, nth, "the unarmed run failed: %s", why);
    else if (rc < 0 && !fired)
        hy_fault_bad(res, nth, "an error although nothing failed: %s", why);
    else if (rc < 0 && why[0] == '\0')
        hy_fault_bad(res, nth, "an error without a message");
    else if (rc < 0)
        res->errors++;
    else if (fired)
        res->absorbed++;
    if (hy_fault_live() != live0)
        hy_fault_bad(res, nth, "%ld block(s) or mapping(s) left allocated",
                     hy_fault_live() - live0);
    return count;
}

void hy_fault_loop(hy_fault_fn_t fn, void *ctx, long max_runs, hy_fault_result_t *res)
{
    long n, stride = 1;

    memset(res, 0, sizeof *res);
    res->allocations = hy_fault_run(fn, ctx, 0, res);
    if (res->bad)
        return;
    if (max_runs > 0 && res->allocations > max_runs)
        stride = (res->allocations + max_runs - 1) / max_runs;
    for (n = 1; n <= res->allocations; n += stride)
        hy_fault_run(fn, ctx, n, res);
    if (stride > 1 && (res->allocations - 1) % stride != 0)
        hy_fault_run(fn, ctx, res->allocations, res);
}
