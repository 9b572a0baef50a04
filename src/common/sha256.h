/*
 * sha256.h - SHA-256 (FIPS 180-4), streaming and over a whole file.  The
 * coordinator hashes the model file once at start so /v1/models, /health and
 * `hyserve-ctl status` can name the exact weights a colour serves
 * ("<file name>@<first 8 hex digits>"); no crypto library is linked for it.
 */
#ifndef HY_COMMON_SHA256_H
#define HY_COMMON_SHA256_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hy.h"

#define HY_SHA256_LEN 32
#define HY_SHA256_HEX_LEN 65 /* 64 hex digits + NUL */

typedef struct {
    uint32_t state[8];
    uint64_t n_bytes;   /* message length so far */
    uint8_t block[64];  /* pending partial block */
    uint32_t n_block;   /* bytes in block, 0..63 */
} hy_sha256_t;

void hy_sha256_init(hy_sha256_t *s);
void hy_sha256_update(hy_sha256_t *s, const void *data, size_t len);
/* Writes the digest; s must be re-initialised before reuse. */
void hy_sha256_final(hy_sha256_t *s, uint8_t out[HY_SHA256_LEN]);
/* Lower-case hex, NUL-terminated. */
void hy_sha256_hex(const uint8_t digest[HY_SHA256_LEN], char out[HY_SHA256_HEX_LEN]);

/* Hashes a whole file with read(2) in fixed chunks (no allocation, so it is
 * safe in a thread of a process that forks).  cancel (may be NULL) is polled
 * between chunks: when it becomes nonzero the hash stops with HY_EINVAL and
 * "cancelled" in err.  HY_EIO names the path and the system error. */
int hy_sha256_file(const char *path, const atomic_int *cancel, uint8_t out[HY_SHA256_LEN],
                   char *err);

#endif
