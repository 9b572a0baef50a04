/*
 * test.h - a minimal TAP producer for the unit tests.  Each HY_T_OK prints
 * one "ok N - description" or "not ok N - description" line; hy_t_done()
 * prints the plan and returns the process exit status.  Keep one line per
 * meaningful case: aggregate inner loops (e.g. 10000 random rows) into one
 * check that reports the worst error.
 */
#ifndef HY_TEST_H
#define HY_TEST_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int hy_t_count, hy_t_failed;

static void hy_t_ok(int ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), unused));
static void hy_t_ok(int ok, const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    hy_t_count++;
    if (!ok)
        hy_t_failed++;
    printf("%sok %d - ", ok ? "" : "not ", hy_t_count);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    if (!ok)
        printf(" # at %s:%d", file, line);
    printf("\n");
    fflush(stdout);
}

#define HY_T_OK(cond, ...) hy_t_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

static int hy_t_done(void) __attribute__((unused));
static int hy_t_done(void)
{
    printf("1..%d\n", hy_t_count);
    return hy_t_failed ? 1 : 0;
}

/* Path of a file in the source tree (tests run from the build tree). */
static const char *hy_t_srcpath(const char *rel) __attribute__((unused));
static const char *hy_t_srcpath(const char *rel)
{
    static char buf[4][4096];
    static int k;
    const char *top = getenv("HY_SRCDIR");

    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", top ? top : ".", rel);
    return buf[k];
}

/* The whole file in a malloc'd buffer (NULL when it cannot be read; an
 * empty file gives a 1-byte buffer and *size 0). */
static unsigned char *hy_t_read_all(const char *path, size_t *size) __attribute__((unused));
static unsigned char *hy_t_read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long n = -1;

    *size = 0;
    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n)
        *size = (size_t)n;
    else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

/* Resident bytes of this process (Linux), or 0 if unknown. */
static uint64_t hy_t_rss(void) __attribute__((unused));
static uint64_t hy_t_rss(void)
{
    unsigned long size, res;
    FILE *f = fopen("/proc/self/statm", "r");
    int ok;

    if (f == NULL)
        return 0;
    ok = fscanf(f, "%lu %lu", &size, &res) == 2;
    fclose(f);
    return ok ? (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

/* Monotonic seconds. */
static double hy_t_now(void) __attribute__((unused));
static double hy_t_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
