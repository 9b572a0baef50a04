/*
 * hy.h - the few definitions every hyserve file needs: status codes, the
 * caller-owned error buffer convention and its one helper, and checked
 * size arithmetic.  Library code returns HY_OK or a negative HY_E* code and
 * writes one human-readable line into `char err[HY_ERR_LEN]`; only main()
 * and the supervisor decide to log and exit.
 */
#ifndef HY_H
#define HY_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define HY_ERR_LEN 512

enum {
    HY_OK = 0,
    HY_EINVAL = -1,       /* bad argument or bad input value */
    HY_ENOMEM = -2,       /* allocation failed */
    HY_EIO = -3,          /* open/read/mmap/write failed */
    HY_EFORMAT = -4,      /* file or message is malformed */
    HY_EUNSUPPORTED = -5, /* well formed, but not something we implement */
    HY_ENOENT = -6,       /* key / tensor / item not present */
    HY_ERANGE = -7,       /* value out of the allowed range */
    HY_EFULL = -8,        /* pool, queue or ring is full */
    HY_EUNAVAILABLE = -9, /* the engine is gone for now (HTTP 503, retry later) */
};

/* Formats one line into err (may be NULL) and returns code, so error paths
 * read `return hy_err(err, HY_EFORMAT, "...", ...)`. */
int hy_err(char *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

const char *hy_strerror(int code);

/* The host's MemTotal and MemAvailable (/proc/meminfo) in bytes; 0 when
 * unknown. */
void hy_host_memory(uint64_t *total, uint64_t *avail);
/* The most resident memory one malloc (or aligned_alloc) of n bytes can
 * take: what the plan counts for each allocation it knows of. */
uint64_t hy_host_alloc_bytes(uint64_t n);
/* The bytes of the mappings overlapping [p, p + len) that the kernel holds
 * on transparent huge pages (their AnonHugePages in /proc/self/smaps); 0
 * where it cannot say. */
size_t hy_huge_bytes(const void *p, size_t len);

/* The index of the first of ids[0..n) outside [0, lim), or -1 when all
 * are inside.  Page lists of a million-token sequence are checked every
 * step, so the common all-valid case is a branch-free pass. */
int32_t hy_ids_first_outside(const int32_t *ids, int32_t n, int32_t lim);

/* Overflow-checked arithmetic for sizes that come from files or requests. */
static inline bool hy_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *r)
{
    return __builtin_mul_overflow(a, b, r);
}
static inline bool hy_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *r)
{
    return __builtin_add_overflow(a, b, r);
}

#define HY_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define HY_MIN(a, b) ((a) < (b) ? (a) : (b))
#define HY_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
