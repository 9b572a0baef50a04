/*
 * hy.c - the error-buffer helper and status names declared in hy.h, and
 * the host's memory as /proc/meminfo reports it.
 */
#include "hy.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int hy_err(char *err, int code, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL) {
        va_start(ap, fmt);
        vsnprintf(err, HY_ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* The scan below, inlined into a baseline and an AVX2 copy: it runs over
 * every page id of a sequence at each step (runner and attention op), a
 * million-token sequence's 65,536 of them, and 8 lanes halve it. */
static inline __attribute__((always_inline)) int32_t ids_scan(const int32_t *ids, int32_t n,
                                                              int32_t lim)
{
    uint32_t ulim = (uint32_t)HY_MAX(lim, 0);
    int32_t i = 0;
    bool bad = false;

    /* fixed-length chunks the compiler turns into vector compares; a
     * negative id is a huge unsigned one */
    for (; i + 64 <= n && !bad; i += 64) {
        uint32_t any = 0;

        for (int32_t j = 0; j < 64; j++)
            any |= (uint32_t)ids[i + j] >= ulim;
        bad = any != 0;
    }
    for (i = bad ? i - 64 : i; i < n; i++)
        if ((uint32_t)ids[i] >= ulim)
            return i;
    return -1;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static int32_t ids_scan_avx2(const int32_t *ids, int32_t n,
                                                             int32_t lim)
{
    return ids_scan(ids, n, lim);
}
#endif

int32_t hy_ids_first_outside(const int32_t *ids, int32_t n, int32_t lim)
{
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2"))
        return ids_scan_avx2(ids, n, lim);
#endif
    return ids_scan(ids, n, lim);
}

const char *hy_strerror(int code)
{
    switch (code) {
    case HY_OK: return "ok";
    case HY_EINVAL: return "invalid argument";
    case HY_ENOMEM: return "out of memory";
    case HY_EIO: return "i/o error";
    case HY_EFORMAT: return "malformed input";
    case HY_EUNSUPPORTED: return "unsupported";
    case HY_ENOENT: return "not found";
    case HY_ERANGE: return "out of range";
    case HY_EFULL: return "full";
    case HY_EUNAVAILABLE: return "unavailable";
    default: return "unknown error";
    }
}

void hy_host_memory(uint64_t *total, uint64_t *avail)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb;

    *total = *avail = 0;
    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
            *total = (uint64_t)kb * 1024;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            *avail = (uint64_t)kb * 1024;
    }
    fclose(f);
}

/* glibc puts a 16-byte header before a chunk and aligned_alloc up to 63
 * bytes of slack; a chunk from mmap (the large ones) is whole pages, one
 * from the heap touches its pages and the one its start straddles.  So n
 * bytes rounded up to pages plus a page holds either. */
uint64_t hy_host_alloc_bytes(uint64_t n)
{
    long p = sysconf(_SC_PAGESIZE);
    uint64_t page = p > 0 ? (uint64_t)p : 4096;

    return (n + page - 1) / page * page + page;
}

size_t hy_huge_bytes(const void *p, size_t len)
{
    char line[256];
    unsigned long long lo, hi, kb;
    size_t total = 0;
    bool in = false;
    FILE *f = fopen("/proc/self/smaps", "r");

    if (f == NULL)
        return 0;
    /* a mapping's own lines: its range, then fields up to the next range */
    while (fgets(line, sizeof line, f) != NULL) {
        if (sscanf(line, "%llx-%llx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = lo < (uintptr_t)p + len && hi > (uintptr_t)p;
        else if (in && sscanf(line, "AnonHugePages: %llu kB", &kb) == 1)
            total += (size_t)kb * 1024;
    }
    fclose(f);
    return total;
}
