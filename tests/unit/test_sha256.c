/*
 * test_sha256.c - SHA-256 against the FIPS 180-4 / NIST example vectors, the
 * padding boundaries (55, 56, 63, 64, 119, 120 bytes, checked against
 * Python's hashlib), split updates, and the file hasher (content, missing
 * file, cancellation).
 */
#include "common/sha256.h"
#include "test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void t_hex(const void *data, size_t len, char out[HY_SHA256_HEX_LEN])
{
    hy_sha256_t s;
    uint8_t d[HY_SHA256_LEN];

    hy_sha256_init(&s);
    hy_sha256_update(&s, data, len);
    hy_sha256_final(&s, d);
    hy_sha256_hex(d, out);
}

static uint8_t t_pattern(size_t i)
{
    return (uint8_t)((i * 7 + 3) & 255);
}

int main(void)
{
    static const struct {
        const char *msg;
        const char *hex;
    } nist[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmno"
         "pqrlmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
    };
    static const struct {
        size_t n;
        const char *hex;
    } edge[] = {
        {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
        {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
        {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
    };
    static const char pattern_hex[] =
        "aaa1137a572394ab285096ae86aa5e48fac554adfe277fe868729e38f469329d";
    enum { N_PATTERN = 200003 };
    char hex[HY_SHA256_HEX_LEN], err[HY_ERR_LEN], path[64];
    uint8_t d[HY_SHA256_LEN], *big;
    hy_sha256_t s;
    size_t i, j, bad;
    atomic_int cancel = 0;
    FILE *f;
    int rc;

    for (i = 0; i < HY_ARRAY_LEN(nist); i++) {
        t_hex(nist[i].msg, strlen(nist[i].msg), hex);
        HY_T_OK(strcmp(hex, nist[i].hex) == 0, "NIST vector %zu (%zu bytes): %s", i,
                strlen(nist[i].msg), hex);
    }

    /* one million 'a' in uneven pieces: the long-message vector and the
     * partial-block carry between updates */
    hy_sha256_init(&s);
    {
        char a[997];

        memset(a, 'a', sizeof a);
        for (i = 0; i < 1000000; i += j) {
            j = HY_MIN(sizeof a - i % 13, 1000000 - i);
            hy_sha256_update(&s, a, j);
        }
    }
    hy_sha256_final(&s, d);
    hy_sha256_hex(d, hex);
    HY_T_OK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0,
            "one million 'a' in uneven updates: %s", hex);

    bad = 0;
    for (i = 0; i < HY_ARRAY_LEN(edge); i++) {
        char m[128];

        memset(m, 'a', edge[i].n);
        t_hex(m, edge[i].n, hex);
        bad += strcmp(hex, edge[i].hex) != 0;
    }
    HY_T_OK(bad == 0, "padding boundaries 55/56/63/64/119/120 bytes: %zu wrong", bad);

    big = malloc(N_PATTERN);
    if (big == NULL)
        return hy_t_done();
    for (i = 0; i < N_PATTERN; i++)
        big[i] = t_pattern(i);
    /* every split point of the first 130 bytes gives the same digest */
    bad = 0;
    for (j = 0; j <= 130; j++) {
        char whole[HY_SHA256_HEX_LEN];

        t_hex(big, 130, whole);
        hy_sha256_init(&s);
        hy_sha256_update(&s, big, j);
        hy_sha256_update(&s, big + j, 130 - j);
        hy_sha256_final(&s, d);
        hy_sha256_hex(d, hex);
        bad += strcmp(hex, whole) != 0;
    }
    HY_T_OK(bad == 0, "two-part updates at every split of 130 bytes agree: %zu differ", bad);

    snprintf(path, sizeof path, "/tmp/hy-sha256-%ld", (long)getpid());
    f = fopen(path, "wb");
    rc = f != NULL && fwrite(big, 1, N_PATTERN, f) == N_PATTERN;
    if (f != NULL)
        rc = (fclose(f) == 0) && rc;
    HY_T_OK(rc, "wrote %s", path);
    rc = hy_sha256_file(path, NULL, d, err);
    hy_sha256_hex(d, hex);
    HY_T_OK(rc == HY_OK && strcmp(hex, pattern_hex) == 0, "file of %d bytes: %s", N_PATTERN,
            rc == HY_OK ? hex : err);
    atomic_store(&cancel, 1);
    rc = hy_sha256_file(path, &cancel, d, err);
    HY_T_OK(rc == HY_EINVAL && strstr(err, "cancelled") != NULL, "cancelled hash: %s", err);
    unlink(path);
    rc = hy_sha256_file(path, NULL, d, err);
    HY_T_OK(rc == HY_EIO && strstr(err, path) != NULL && strstr(err, "No such file") != NULL,
            "missing file: %s", err);
    rc = hy_sha256_file("/", NULL, d, err);
    HY_T_OK(rc == HY_EIO && strstr(err, "read") != NULL, "a directory: %s", err);
    free(big);
    return hy_t_done();
}
