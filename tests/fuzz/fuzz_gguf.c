/*
 * fuzz_gguf.c - fuzz target for the GGUF reader: every input is opened with
 * hy_gguf_open_buffer and, if it parses, every accessor is used once so that
 * a validation gap shows up as a sanitizer report.  Two builds from one file:
 *
 *   libFuzzer (needs clang), from the source tree (what
 *   tests/integration/test_fuzz_gguf.sh does for a bounded time):
 *     clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -Isrc \
 *         tests/fuzz/fuzz_gguf.c src/model/gguf.c src/common/hy.c \
 *         src/common/dtype.c -o fuzz_gguf
 *     ./fuzz_gguf -max_len=65536 corpus_dir/ tests/fuzz/corpus/gguf
 *
 *   standalone (-DHY_FUZZ_STANDALONE, what `make check` runs as
 *   tests/fuzz/fuzz_gguf_replay): the seed corpus tests/fuzz/corpus/gguf
 *   (made by tests/fuzz/make-gguf-seeds.py: valid-* files must open, from
 *   a buffer and from the file, trunc-* files must be refused with a message
 *   naming the file), then a fixed-seed mutation loop over the valid seeds,
 *   HY_FUZZ_ITERS iterations (default 20000), whose mutants must land on
 *   both sides.  Bounded and deterministic; under ASan in the sanitizer
 *   build.
 */
#include "model/gguf.h"

#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t g_accepted; /* inputs that opened (the standalone run's tally) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[HY_ERR_LEN], key[256];
    hy_gguf_t *g = NULL;
    volatile uint64_t sink = 0;
    int64_t k;
    uint64_t i, count;

    if (hy_gguf_open_buffer(&g, data, size, "fuzz.gguf", err) != HY_OK)
        return 0;
    g_accepted++;
    for (k = 0; k < hy_gguf_n_kv(g); k++) {
        hy_gguf_str_t s = hy_gguf_kv_key(g, k), v;
        hy_gguf_type_t et;
        const void *p;
        uint32_t u32, layers[4];
        int64_t i64;
        float f;
        bool b;

        snprintf(key, sizeof key, "%.*s", (int)(s.len < 200 ? s.len : 200), s.ptr);
        sink += (uint64_t)hy_gguf_get_u32(g, key, &u32, err);
        sink += (uint64_t)hy_gguf_get_i64(g, key, &i64, err);
        sink += (uint64_t)hy_gguf_get_f32(g, key, &f, err);
        sink += (uint64_t)hy_gguf_get_bool(g, key, &b, err);
        sink += (uint64_t)hy_gguf_get_u32_layers(g, key, layers, 4, err);
        if (hy_gguf_get_str(g, key, &v, err) == HY_OK && v.len > 0)
            sink += (uint8_t)v.ptr[v.len - 1];
        if (hy_gguf_get_arr(g, key, &et, &count, &p, err) == HY_OK) {
            for (i = 0; i < count; i++) {
                hy_gguf_str_t e = hy_gguf_arr_str(g, k, i);
                if (e.len > 0)
                    sink += (uint8_t)e.ptr[e.len - 1];
                double d = hy_gguf_arr_f64(g, k, i);
                uint64_t bits;

                memcpy(&bits, &d, sizeof bits); /* any double, NaN or 1e300 too */
                sink += (uint64_t)hy_gguf_arr_i64(g, k, i) + bits;
            }
        }
    }
    for (k = 0; k < hy_gguf_n_tensors(g); k++) {
        const hy_gguf_tensor_t *t = hy_gguf_tensor(g, k);
        if (hy_gguf_find_tensor(g, t->name) != t)
            __builtin_trap(); /* names are unique, so lookup must find itself */
        sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    hy_gguf_close(g);
    (void)sink;
    return 0;
}

#ifdef HY_FUZZ_STANDALONE
#include <dirent.h>
#include <stdlib.h>

#include "../unit/test.h"
#include "mutate.h"

#define FG_MAX_SEEDS 64
#define FG_CAP 65536

typedef struct {
    char name[256];
    uint8_t *data;
    size_t size;
} fg_seed_t;

/* One random edit aimed at a binary format: flip a bit, write a value that
 * breaks counts, lengths and offsets (0, 1, all-ones, a huge 64-bit value,
 * a type id out of range), cut the tail, or delete/duplicate a slice. */
static size_t mutate(uint8_t *buf, size_t n, size_t cap)
{
    static const uint64_t values[] = {0, 1, 2, 7, 12, 13, 31, 32, 255, 0xFFFF, 0x7FFFFFFF,
                                      0xFFFFFFFFull, 0x100000000ull, 0x7FFFFFFFFFFFFFFFull,
                                      0xFFFFFFFFFFFFFFFFull};
    size_t pos, len;
    uint64_t v;

    switch (hy_fz_rnd() % 6) {
    case 0:
        return hy_fz_flip(buf, n);
    case 1:
    case 2:
        pos = n ? (size_t)(hy_fz_rnd() % n) : 0;
        v = values[hy_fz_rnd() % HY_ARRAY_LEN(values)];
        len = (hy_fz_rnd() & 1) ? 8 : 4;
        if (pos + len <= n)
            memcpy(buf + pos, &v, len);
        return n;
    case 3:
        return n ? (size_t)(hy_fz_rnd() % n) : 0;
    case 4:
        return hy_fz_delete(buf, n, 16);
    default:
        return hy_fz_dup_slice(buf, n, cap, 32);
    }
}

static int load_seeds(const char *dir, fg_seed_t *seeds)
{
    char path[4096];
    struct dirent *d;
    DIR *dp = opendir(dir);
    int n = 0;
    FILE *f;

    if (dp == NULL)
        return 0;
    while ((d = readdir(dp)) != NULL && n < FG_MAX_SEEDS) {
        fg_seed_t *s = &seeds[n];

        if (d->d_name[0] == '.' || strlen(d->d_name) >= sizeof s->name)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, d->d_name);
        if ((f = fopen(path, "rb")) == NULL)
            continue;
        snprintf(s->name, sizeof s->name, "%s", d->d_name);
        s->data = malloc(FG_CAP);
        s->size = s->data ? fread(s->data, 1, FG_CAP, f) : 0;
        fclose(f);
        n++;
    }
    closedir(dp);
    return n;
}

/* The seed's verdict from the buffer and from the file must agree with its
 * name, and a refusal must name the input. */
static bool check_seed(const char *dir, const fg_seed_t *s, char *why, size_t why_len)
{
    char err[HY_ERR_LEN] = "", ferr[HY_ERR_LEN] = "", path[4096];
    bool valid = strncmp(s->name, "valid-", 6) == 0;
    hy_gguf_t *g = NULL;
    int rb, rf;

    rb = hy_gguf_open_buffer(&g, s->data, s->size, s->name, err);
    hy_gguf_close(g);
    g = NULL;
    snprintf(path, sizeof path, "%s/%.255s", dir, s->name);
    rf = hy_gguf_open(&g, path, ferr);
    hy_gguf_close(g);
    LLVMFuzzerTestOneInput(s->data, s->size);
    snprintf(why, why_len, "%.255s: buffer %s, file %s", s->name, rb ? err : "opens",
             rf ? ferr : "opens");
    if (valid)
        return rb == HY_OK && rf == HY_OK;
    return rb < 0 && rf < 0 && strstr(err, s->name) != NULL && strstr(ferr, s->name) != NULL;
}

int main(int argc, char **argv)
{
    static fg_seed_t seeds[FG_MAX_SEEDS];
    static uint8_t buf[FG_CAP];
    const char *dir = argc > 1 ? argv[1] : hy_t_srcpath("tests/fuzz/corpus/gguf");
    const char *env = getenv("HY_FUZZ_ITERS");
    long iters = env ? strtol(env, NULL, 10) : 20000, i;
    int n = load_seeds(dir, seeds), n_valid = 0, n_trunc = 0, k, bad = 0, m;
    char why[2 * HY_ERR_LEN + 300], first_bad[2 * HY_ERR_LEN + 300] = "";
    size_t len = 0, accepted;

    for (k = 0; k < n; k++) {
        n_valid += strncmp(seeds[k].name, "valid-", 6) == 0;
        n_trunc += strncmp(seeds[k].name, "trunc-", 6) == 0;
        if (!check_seed(dir, &seeds[k], why, sizeof why) && bad++ == 0)
            snprintf(first_bad, sizeof first_bad, "%s", why);
    }
    HY_T_OK(n_valid >= 4 && n_trunc >= 8 && n_valid + n_trunc == n && bad == 0,
            "seed corpus %s: %d valid files open, %d truncated ones are refused naming the "
            "file, from a buffer and from the file (%d wrong%s%s)", dir, n_valid, n_trunc, bad,
            bad ? ": " : "", first_bad);
    if (n_valid == 0)
        return hy_t_done();
    g_accepted = 0;
    for (i = 0; i < iters; i++) {
        /* back to a valid seed every 4 steps, so edits stay near the format */
        if (i % 4 == 0) {
            const fg_seed_t *s;

            do
                s = &seeds[hy_fz_rnd() % (uint64_t)n];
            while (strncmp(s->name, "valid-", 6) != 0);
            len = s->size;
            memcpy(buf, s->data, len);
        }
        for (m = 1 + (int)(hy_fz_rnd() % 3); m > 0; m--)
            len = mutate(buf, len, FG_CAP);
        LLVMFuzzerTestOneInput(buf, len);
    }
    accepted = g_accepted;
    HY_T_OK(accepted > 0 && accepted < (size_t)iters,
            "%ld mutated files: %zu opened and were read through every accessor, %zu refused, "
            "no crash", iters, accepted, (size_t)iters - accepted);
    for (k = 0; k < n; k++)
        free(seeds[k].data);
    return hy_t_done();
}
#endif
