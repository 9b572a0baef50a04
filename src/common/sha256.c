/*
 * sha256.c - a small portable SHA-256 (FIPS 180-4, section 6.2): the 64-round
 * compression function over 64-byte blocks, Merkle-Damgard padding with the
 * bit length, and a chunked file hasher.  Speed is secondary (a few hundred
 * MB/s is plenty: the model is hashed once, off the serving path).
 */
#include "common/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static const uint32_t hy_sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2,
};

static inline uint32_t hy_sha256_ror(uint32_t x, int n)
{
    return (x >> n) | (x << (32 - n));
}

/* One compression of a 64-byte block into the state (FIPS 180-4 6.2.2). */
static void hy_sha256_block(uint32_t st[8], const uint8_t *p)
{
    uint32_t w[64], a, b, c, d, e, f, g, h, t1, t2;
    int i;

    for (i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (i = 16; i < 64; i++) {
        uint32_t s0 = hy_sha256_ror(w[i - 15], 7) ^ hy_sha256_ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = hy_sha256_ror(w[i - 2], 17) ^ hy_sha256_ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = st[0], b = st[1], c = st[2], d = st[3], e = st[4], f = st[5], g = st[6], h = st[7];
    for (i = 0; i < 64; i++) {
        t1 = h + (hy_sha256_ror(e, 6) ^ hy_sha256_ror(e, 11) ^ hy_sha256_ror(e, 25)) +
             ((e & f) ^ (~e & g)) + hy_sha256_k[i] + w[i];
        t2 = (hy_sha256_ror(a, 2) ^ hy_sha256_ror(a, 13) ^ hy_sha256_ror(a, 22)) +
             ((a & b) ^ (a & c) ^ (b & c));
        h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    st[0] += a, st[1] += b, st[2] += c, st[3] += d;
    st[4] += e, st[5] += f, st[6] += g, st[7] += h;
}

void hy_sha256_init(hy_sha256_t *s)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

    memcpy(s->state, iv, sizeof iv);
    s->n_bytes = 0;
    s->n_block = 0;
}

void hy_sha256_update(hy_sha256_t *s, const void *data, size_t len)
{
    const uint8_t *p = data;

    s->n_bytes += len;
    if (s->n_block > 0) {
        size_t take = HY_MIN(len, 64 - (size_t)s->n_block);

        memcpy(s->block + s->n_block, p, take);
        s->n_block += (uint32_t)take;
        p += take;
        len -= take;
        if (s->n_block < 64)
            return;
        hy_sha256_block(s->state, s->block);
        s->n_block = 0;
    }
    for (; len >= 64; p += 64, len -= 64)
        hy_sha256_block(s->state, p);
    memcpy(s->block, p, len);
    s->n_block = (uint32_t)len;
}

void hy_sha256_final(hy_sha256_t *s, uint8_t out[HY_SHA256_LEN])
{
    uint64_t bits = s->n_bytes * 8;
    int i;

    /* 0x80, zeros up to 56 mod 64, then the 64-bit big-endian bit length;
     * a block with no room for the length spills into one more. */
    s->block[s->n_block++] = 0x80;
    if (s->n_block > 56) {
        memset(s->block + s->n_block, 0, 64 - s->n_block);
        hy_sha256_block(s->state, s->block);
        s->n_block = 0;
    }
    memset(s->block + s->n_block, 0, 56 - s->n_block);
    for (i = 0; i < 8; i++)
        s->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    hy_sha256_block(s->state, s->block);
    for (i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(s->state[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->state[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->state[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->state[i];
    }
}

void hy_sha256_hex(const uint8_t digest[HY_SHA256_LEN], char out[HY_SHA256_HEX_LEN])
{
    static const char hex[] = "0123456789abcdef";
    int i;

    for (i = 0; i < HY_SHA256_LEN; i++) {
        out[2 * i] = hex[digest[i] >> 4];
        out[2 * i + 1] = hex[digest[i] & 15];
    }
    out[2 * HY_SHA256_LEN] = '\0';
}

int hy_sha256_file(const char *path, const atomic_int *cancel, uint8_t out[HY_SHA256_LEN],
                   char *err)
{
    uint8_t buf[64 * 1024]; /* on the stack: no malloc in a thread of a forking process */
    hy_sha256_t s;
    int fd, rc = HY_OK;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return hy_err(err, HY_EIO, "%s: %s", path, strerror(errno));
    /* A one-pass sequential read: let the kernel read ahead. */
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    hy_sha256_init(&s);
    for (;;) {
        ssize_t n;

        if (cancel != NULL && atomic_load_explicit(cancel, memory_order_relaxed)) {
            rc = hy_err(err, HY_EINVAL, "%s: cancelled", path);
            goto out;
        }
        n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = hy_err(err, HY_EIO, "%s: read: %s", path, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        hy_sha256_update(&s, buf, (size_t)n);
    }
    hy_sha256_final(&s, out);
out:
    close(fd);
    return rc;
}
