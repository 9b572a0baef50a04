/*
 * test_tier.c - the warm and cold tier store (ipc/tier.h) and its file
 * format (ipc/tier_file.h) without a model: CRC-32C vectors; a file's
 * round trip; every way a file goes bad (flipped payload or header byte,
 * truncation, another model, another geometry, a file under another
 * block's name) detected with the reason; warm LRU order; write-through to
 * disk and promotion back; the disk budget's LRU; a restart re-indexing
 * the directory, dropping what is bad and serving the rest; a lookup by
 * name while the indexer is still busy; a fetch while the only slot waits
 * for a write on its way (busy, then served); injected write and read failures
 * counted and never served; two stores on one directory refused; the
 * remembered model identity; pages persisted the moment the model's hash
 * arrives written, not skipped.  hy_tier_check (used + free + cached = total
 * per tier, lists, index, the directory) after every scenario.
 */
#define _GNU_SOURCE
#include "common/crc32c.h"
#include "ipc/tier.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PT 4        /* tokens per page */
#define PAGE 1000   /* bytes of a page */
#define CKPT 3000   /* bytes of a checkpoint */
#define SWAB 2000   /* bytes of a sliding-window group's page */

static char tdir[256];

static void ident(hy_tier_ident_t *id, uint8_t sha_byte)
{
    memset(id, 0, sizeof *id);
    memset(id->model_sha256, sha_byte, 32);
    id->model_bytes = 123456;
    id->kv_type = 1;
    id->n_kv_layers = 2;
    id->n_head_kv = 1;
    id->head_dim_k = id->head_dim_v = 8;
    id->n_rec_layers = 1;
    id->page_tokens = PT;
    id->page_bytes = PAGE;
    id->slot_bytes = CKPT;
}

static void opts(hy_tier_opts_t *o, hy_stats_t *st, uint64_t warm, const char *dir, uint64_t disk)
{
    memset(o, 0, sizeof *o);
    o->unit_bytes[HY_TIER_PAGE] = PAGE;
    o->unit_bytes[HY_TIER_CKPT] = CKPT;
    o->warm_bytes = warm;
    o->disk_dir = dir;
    o->disk_bytes = disk;
    o->stats = st;
    ident(&o->ident, 7);
    o->sha_known = true;
}

/* Block b's tokens and bytes: distinct per (b, salt). */
static void block(int32_t b, uint32_t salt, int32_t *tok, uint8_t *bytes, size_t n)
{
    for (int i = 0; i < PT; i++)
        tok[i] = b * 100 + i + (int32_t)salt;
    for (size_t i = 0; i < n; i++)
        bytes[i] = (uint8_t)(i * 31 + (size_t)b * 7 + salt);
}

static uint64_t hash_of(int32_t b, uint32_t salt) { return 0x1000 + (uint64_t)b * 17 + salt; }

static int put(hy_tier_t *t, int32_t kind, int32_t b, uint32_t salt)
{
    int32_t tok[PT];
    uint8_t bytes[CKPT];
    hy_tier_put_t p;
    size_t n = kind == HY_TIER_PAGE ? PAGE : kind == HY_TIER_SWA ? SWAB : CKPT;
    int rc;

    block(b, salt, tok, bytes, n);
    rc = hy_tier_put_begin(t, kind, hash_of(b, salt), b, tok, &p);
    if (rc == HY_OK) {
        memcpy(p.dst, bytes, n);
        hy_tier_put_end(t, &p, true);
    }
    return rc;
}

static int where(hy_tier_t *t, int32_t kind, int32_t b, uint32_t salt)
{
    int32_t tok[PT];
    uint8_t bytes[CKPT];

    block(b, salt, tok, bytes, 0);
    (void)bytes;
    return hy_tier_where(t, kind, hash_of(b, salt), b, tok);
}

/* Brings (kind, b) up to warm and compares its bytes; true when they are
 * the ones put. */
static bool fetch_same(hy_tier_t *t, int32_t kind, int32_t b, uint32_t salt, bool promote)
{
    int32_t tok[PT];
    uint8_t bytes[CKPT];
    size_t n = kind == HY_TIER_PAGE ? PAGE : kind == HY_TIER_SWA ? SWAB : CKPT;
    hy_tier_pin_t p;
    int rc, k;
    bool same;

    block(b, salt, tok, bytes, n);
    for (k = 0; k < 1000 && (rc = hy_tier_fetch(t, kind, hash_of(b, salt))) > 0; k++)
        hy_tier_sync(t);
    if (rc != 0 || hy_tier_pin(t, kind, hash_of(b, salt), &p) != HY_OK)
        return false;
    same = memcmp(p.src, bytes, n) == 0;
    hy_tier_unpin(t, &p, promote);
    return same;
}

static void check(hy_tier_t *t, const char *what)
{
    char err[HY_ERR_LEN];
    hy_tier_counts_t c;
    int rc;
    bool sums = true;

    hy_tier_sync(t);
    rc = hy_tier_check(t, true, err);
    hy_tier_counts(t, &c);
    for (int k = 0; k < HY_TIER_KINDS; k++)
        sums &= c.n[HY_TIER_WARM][k][HY_TIER_USED] + c.n[HY_TIER_WARM][k][HY_TIER_FREE] +
                    c.n[HY_TIER_WARM][k][HY_TIER_CACHED] == c.total[HY_TIER_WARM][k] &&
                c.n[HY_TIER_WARM][k][HY_TIER_USED] == 0;
    for (int l = HY_TIER_WARM; l < HY_TIER_LEVELS; l++)
        sums &= c.bytes[l][HY_TIER_USED] + c.bytes[l][HY_TIER_FREE] + c.bytes[l][HY_TIER_CACHED] ==
                c.total_bytes[l];
    HY_T_OK(rc == HY_OK && sums, "%s: accounting (%s; warm pages %lld used %lld cached %lld free; "
            "cold %llu used %llu cached %llu free bytes)", what, rc == HY_OK ? "ok" : err,
            (long long)c.n[HY_TIER_WARM][0][HY_TIER_USED], (long long)c.n[HY_TIER_WARM][0][HY_TIER_CACHED],
            (long long)c.n[HY_TIER_WARM][0][HY_TIER_FREE], (unsigned long long)c.bytes[HY_TIER_COLD][HY_TIER_USED],
            (unsigned long long)c.bytes[HY_TIER_COLD][HY_TIER_CACHED],
            (unsigned long long)c.bytes[HY_TIER_COLD][HY_TIER_FREE]);
}

static int n_files(void)
{
    char cmd[512];
    FILE *f;
    int n = -1;

    snprintf(cmd, sizeof cmd, "ls %s | grep -c hykv", tdir);
    if ((f = popen(cmd, "r")) != NULL) {
        if (fscanf(f, "%d", &n) != 1)
            n = -1;
        pclose(f);
    }
    return n;
}

static void path_of(char *buf, size_t cap, int32_t kind, int32_t b, uint32_t salt)
{
    char name[HY_TIER_NAME_LEN];

    hy_tier_file_name(name, sizeof name, (uint32_t)kind, hash_of(b, salt));
    snprintf(buf, cap, "%s/%s", tdir, name);
}

/* ---- CRC and the file format ---------------------------------------------------- */

static void t_crc(void)
{
    const char *s = "123456789";
    uint8_t big[4099];

    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 7 + 3);
    HY_T_OK(hy_crc32c(0, s, 9) == 0xe3069283u, "crc32c(\"123456789\") = 0xe3069283");
    HY_T_OK(hy_crc32c(hy_crc32c(0, big, 1001), big + 1001, sizeof big - 1001) ==
                hy_crc32c(0, big, sizeof big),
            "crc32c continues across pieces (unaligned split)");
}

static int corrupt_case(const char *what, void (*mangle)(const char *path), int want_rc,
                        const char *want_why)
{
    hy_tier_ident_t id;
    hy_tier_rec_t r = {0}, back;
    int32_t tok[PT], tback[PT];
    uint8_t bytes[PAGE], out[PAGE];
    char why[HY_ERR_LEN] = "", name[HY_TIER_NAME_LEN], path[512];
    int dfd = open(tdir, O_RDONLY | O_DIRECTORY), rc;

    ident(&id, 7);
    block(3, 0, tok, bytes, PAGE);
    r.kind = HY_TIER_PAGE;
    r.hash = hash_of(3, 0);
    r.depth = 3;
    r.n_tokens = PT;
    r.payload_bytes = PAGE;
    hy_tier_file_name(name, sizeof name, HY_TIER_PAGE, r.hash);
    rc = hy_tier_file_write(dfd, name, 1, &id, &r, tok, bytes, 0, why);
    snprintf(path, sizeof path, "%s/%s", tdir, name);
    if (rc == HY_OK && mangle != NULL)
        mangle(path);
    rc = hy_tier_file_read(dfd, name, &id, &back, tback, out, sizeof out, why);
    if (mangle == NULL)
        HY_T_OK(rc == HY_OK && memcmp(out, bytes, PAGE) == 0 && memcmp(tok, tback, sizeof tok) == 0 &&
                    back.depth == 3 && back.hash == r.hash,
                "file round trip: header, tokens and payload come back (%s)", rc ? why : "ok");
    else
        HY_T_OK(rc == want_rc && strstr(why, want_why) != NULL, "%s detected: %s", what, why);
    unlink(path);
    close(dfd);
    return rc;
}

static void flip_payload(const char *path)
{
    int fd = open(path, O_RDWR);
    uint8_t c;
    off_t off = (off_t)hy_tier_file_header_bytes(PT) + 500;

    if (pread(fd, &c, 1, off) == 1) {
        c ^= 0x10;
        (void)!pwrite(fd, &c, 1, off);
    }
    close(fd);
}

static void flip_header(const char *path)
{
    int fd = open(path, O_RDWR);
    uint8_t c;

    if (pread(fd, &c, 1, 20) == 1) { /* inside the hash */
        c ^= 1;
        (void)!pwrite(fd, &c, 1, 20);
    }
    close(fd);
}

static void cut(const char *path) { (void)!truncate(path, (off_t)hy_tier_file_header_bytes(PT) + 10); }
static void cut_header(const char *path) { (void)!truncate(path, 60); }
static void add_byte(const char *path)
{
    int fd = open(path, O_WRONLY | O_APPEND);
    (void)!write(fd, "x", 1);
    close(fd);
}

static void t_format(void)
{
    hy_tier_ident_t id, other;
    hy_tier_rec_t r = {0}, back;
    uint8_t hdr[512];
    int32_t tok[PT] = {1, 2, 3, 4};
    char why[HY_ERR_LEN], name[HY_TIER_NAME_LEN];
    uint32_t kind;
    uint64_t hash;
    size_t hb = hy_tier_file_header_bytes(PT);

    hy_tier_file_name(name, sizeof name, HY_TIER_CKPT, 0xabcdef0123456789ULL);
    HY_T_OK(strcmp(name, "c-abcdef0123456789.hykv") == 0 &&
                hy_tier_file_parse_name(name, &kind, &hash) && kind == HY_TIER_CKPT &&
                hash == 0xabcdef0123456789ULL &&
                !hy_tier_file_parse_name("p-abcdef0123456789.hykv.3.tmp", &kind, &hash) &&
                !hy_tier_file_parse_name("p-abcdeg0123456789.hykv", &kind, &hash),
            "file names: %s parses back, temporaries and bad hex do not", name);
    corrupt_case("round trip", NULL, 0, "");
    corrupt_case("a flipped payload bit", flip_payload, HY_EFORMAT, "payload checksum mismatch");
    corrupt_case("a flipped header bit", flip_header, HY_EFORMAT, "header checksum mismatch");
    corrupt_case("a truncated payload", cut, HY_EFORMAT, "truncated");
    corrupt_case("a truncated header", cut_header, HY_EFORMAT, "truncated");
    corrupt_case("a byte too many", add_byte, HY_EFORMAT, "too long");
    /* identity: decode the same header against other identities */
    ident(&id, 7);
    r.kind = HY_TIER_PAGE;
    r.hash = 99;
    r.depth = 0;
    r.n_tokens = PT;
    r.payload_bytes = PAGE;
    hy_tier_file_encode(hdr, &id, &r, tok);
    ident(&other, 8);
    HY_T_OK(hy_tier_file_decode(hdr, hb, hb + PAGE, &other, -1, 0, &back, NULL, why) ==
                    HY_EUNSUPPORTED && strstr(why, "foreign: model SHA-256") != NULL,
            "another model's file is foreign: %s", why);
    ident(&other, 7);
    other.head_dim_v = 16;
    HY_T_OK(hy_tier_file_decode(hdr, hb, hb + PAGE, &other, -1, 0, &back, NULL, why) ==
                    HY_EUNSUPPORTED && strstr(why, "KV geometry") != NULL,
            "another KV geometry is foreign: %s", why);
    ident(&other, 7);
    other.model_bytes++;
    HY_T_OK(hy_tier_file_decode(hdr, hb, hb + PAGE, &other, -1, 0, &back, NULL, why) ==
                    HY_EUNSUPPORTED && strstr(why, "model size") != NULL,
            "another model size is foreign: %s", why);
    HY_T_OK(hy_tier_file_decode(hdr, hb, hb + PAGE, &id, HY_TIER_PAGE, 98, &back, NULL, why) ==
                    HY_EFORMAT && strstr(why, "another block") != NULL,
            "a file under another block's name: %s", why);
}

/* ---- page groups: the sliding-window group's pages as a kind of their own ------------ */

static void ident_swa(hy_tier_ident_t *id)
{
    ident(id, 7);
    id->n_kv_layers = 3;
    id->n_swa_layers = 2;
    id->swa_window = 40;
    id->swa_page_bytes = SWAB;
    id->swa_map_crc = 0x5eed;
}

static void put32le(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64le(uint8_t *p, uint64_t v)
{
    put32le(p, (uint32_t)v);
    put32le(p + 4, (uint32_t)(v >> 32));
}

/* A version-1 header (no group fields, 144 fixed bytes) for a page of
 * hash 42, block 3, as that version wrote and checksummed it; its size. */
static size_t v1_header(uint8_t *hdr, const int32_t *tok)
{
    size_t hb1 = (144 + 4 * PT + 63) & ~(size_t)63;

    memset(hdr, 0, hb1);
    memcpy(hdr, "HYKVTIER", 8);
    put32le(hdr + 8, 1);
    put32le(hdr + 12, HY_TIER_PAGE);
    put64le(hdr + 16, 42);
    put32le(hdr + 24, 3);
    put32le(hdr + 28, PT);
    put64le(hdr + 32, PAGE);
    memset(hdr + 48, 7, 32);
    for (int i = 0; i < PT; i++)
        put32le(hdr + 144 + 4 * i, (uint32_t)tok[i]);
    put32le(hdr + 44, hy_crc32c(0, hdr, hb1));
    return hb1;
}

static void t_format_groups(void)
{
    hy_tier_ident_t id, other;
    hy_tier_rec_t r = {0}, back;
    uint8_t hdr[512];
    int32_t tok[PT] = {5, 6, 7, 8}, tback[PT];
    char why[HY_ERR_LEN] = "", name[HY_TIER_NAME_LEN];
    uint32_t kind;
    uint64_t hash;
    size_t hb = hy_tier_file_header_bytes(PT), hb1;

    hy_tier_file_name(name, sizeof name, HY_TIER_SWA, 0x0123456789abcdefULL);
    HY_T_OK(strcmp(name, "s-0123456789abcdef.hykv") == 0 &&
                hy_tier_file_parse_name(name, &kind, &hash) && kind == HY_TIER_SWA &&
                hash == 0x0123456789abcdefULL,
            "a sliding-window page's file name %s parses back to its group", name);
    ident_swa(&id);
    r.kind = HY_TIER_SWA;
    r.hash = 42;
    r.depth = 3;
    r.n_tokens = PT;
    r.payload_bytes = SWAB;
    hy_tier_file_encode(hdr, &id, &r, tok);
    HY_T_OK(hy_tier_file_decode(hdr, hb, hb + SWAB, &id, HY_TIER_SWA, 42, &back, tback, why) ==
                    HY_OK && back.kind == HY_TIER_SWA && back.depth == 3 &&
                    memcmp(tok, tback, sizeof tok) == 0,
            "a sliding-window page's header records its group and decodes (%s)", why);
    HY_T_OK(hy_tier_file_decode(hdr, hb, hb + PAGE, &id, -1, 0, &back, NULL, why) == HY_EFORMAT &&
                strstr(why, "truncated") != NULL,
            "a sliding page's file is sized by the sliding group's page: %s", why);
    ident_swa(&other);
    other.swa_window = 48;
    HY_T_OK(hy_tier_file_decode(hdr, hb, hb + SWAB, &other, -1, 0, &back, NULL, why) ==
                    HY_EUNSUPPORTED && strstr(why, "sliding-window page group") != NULL,
            "another window is foreign: %s", why);
    ident_swa(&other);
    other.swa_map_crc ^= 1;
    HY_T_OK(hy_tier_file_decode(hdr, hb, hb + SWAB, &other, -1, 0, &back, NULL, why) ==
                    HY_EUNSUPPORTED && strstr(why, "sliding-window page group") != NULL,
            "other layers in the sliding group are foreign: %s", why);
    ident_swa(&other);
    other.swa_page_bytes = SWAB + 64;
    HY_T_OK(hy_tier_file_decode(hdr, hb, hb + SWAB, &other, -1, 0, &back, NULL, why) ==
                    HY_EUNSUPPORTED && strstr(why, "page or state size") != NULL,
            "another sliding page size is foreign: %s", why);
    ident(&other, 7); /* the same model's files from a build without page groups */
    HY_T_OK(hy_tier_file_decode(hdr, hb, hb + SWAB, &other, -1, 0, &back, NULL, why) ==
                    HY_EUNSUPPORTED,
            "a sliding page for a geometry without a sliding group is foreign: %s", why);
    /* a version-1 file (no group fields, 144 fixed bytes), checksummed as
     * that version wrote it: refused for its version, not called corrupt */
    hb1 = v1_header(hdr, tok);
    HY_T_OK(hy_tier_file_decode(hdr, hb1, hb1 + PAGE, &id, -1, 0, &back, NULL, why) ==
                    HY_EUNSUPPORTED && strstr(why, "format version 1") != NULL &&
                    strstr(why, "reads 2") != NULL,
            "a version-1 file is refused by its version: %s", why);
    hdr[100] ^= 1;
    HY_T_OK(hy_tier_file_decode(hdr, hb1, hb1 + PAGE, &id, -1, 0, &back, NULL, why) ==
                    HY_EFORMAT && strstr(why, "header checksum") != NULL,
            "a damaged version-1 header is corrupt: %s", why);
}

/* A store for both page groups: each kind its own slots, units and files;
 * a full page and a sliding page of the same block are separate entries. */
static void t_groups(void)
{
    hy_stats_t *st = calloc(1, sizeof *st);
    hy_tier_opts_t o;
    hy_tier_t *t;
    char err[HY_ERR_LEN], gdir[sizeof tdir], *saved = NULL;
    int32_t full, swa, ckpt;
    bool ok = true;
    int rc;

    if (snprintf(gdir, sizeof gdir, "%s/groups", tdir) >= (int)sizeof gdir) {
        HY_T_OK(0, "%s/groups: path too long", tdir);
        free(st);
        return;
    }
    /* 4 checkpoints (a quarter), then pages split 1:3 by bytes */
    opts(&o, st, 16 * CKPT, gdir, 1 << 20);
    ident_swa(&o.ident);
    o.unit_bytes[HY_TIER_SWA] = SWAB;
    o.swa_share = 0.25;
    rc = hy_tier_create(&t, &o, err);
    HY_T_OK(rc == HY_OK, "a store with a sliding-window kind (%s)", rc ? err : "ok");
    if (rc != HY_OK)
        return;
    hy_tier_sync(t);
    full = hy_tier_slots(t, HY_TIER_PAGE);
    swa = hy_tier_slots(t, HY_TIER_SWA);
    ckpt = hy_tier_slots(t, HY_TIER_CKPT);
    HY_T_OK(ckpt == 4 && swa == 12 * CKPT / 4 / SWAB && full == (12 * CKPT - swa * SWAB) / PAGE &&
                hy_tier_unit_bytes(t, HY_TIER_SWA) == SWAB,
            "warm slots: %d checkpoints, %d sliding pages (a quarter of the page bytes), %d "
            "full pages", ckpt, swa, full);
    ok &= put(t, HY_TIER_PAGE, 3, 0) == HY_OK && put(t, HY_TIER_SWA, 3, 0) == HY_OK;
    hy_tier_sync(t);
    HY_T_OK(ok && where(t, HY_TIER_PAGE, 3, 0) == HY_TIER_WARM &&
                where(t, HY_TIER_SWA, 3, 0) == HY_TIER_WARM && where(t, HY_TIER_SWA, 4, 0) < 0 &&
                fetch_same(t, HY_TIER_SWA, 3, 0, false) && fetch_same(t, HY_TIER_PAGE, 3, 0, false),
            "a block's full and sliding pages are two entries, each with its own bytes");
    check(t, "two page groups");
    hy_tier_free(t);
    /* a file an older hyserve left (format version 1) */
    {
        uint8_t hdr[512], payload[PAGE] = {0};
        int32_t tok[PT] = {5, 6, 7, 8};
        size_t hb1 = v1_header(hdr, tok);
        char path[600];
        FILE *f;

        snprintf(path, sizeof path, "%s/p-000000000000002a.hykv", gdir);
        f = fopen(path, "wb");
        ok = f != NULL && fwrite(hdr, 1, hb1, f) == hb1 && fwrite(payload, 1, PAGE, f) == PAGE;
        if (f != NULL)
            fclose(f);
        HY_T_OK(ok, "an old-format file is in %s", gdir);
    }
    /* a restart finds both files, each under its group */
    saved = strdup(tdir);
    snprintf(tdir, sizeof tdir, "%s", gdir);
    rc = hy_tier_create(&t, &o, err);
    if (rc == HY_OK) {
        hy_tier_sync(t);
        int32_t tok[PT] = {5, 6, 7, 8};

        HY_T_OK(hy_tier_where(t, HY_TIER_PAGE, 42, 3, tok) < 0 &&
                    atomic_load(&st->tiers.dropped[HY_TIER_DROP_FOREIGN]) == 1,
                "the version-1 file is dropped at indexing (reason foreign), never served");
        HY_T_OK(n_files() == 2 && where(t, HY_TIER_PAGE, 3, 0) == HY_TIER_COLD &&
                    where(t, HY_TIER_SWA, 3, 0) == HY_TIER_COLD &&
                    fetch_same(t, HY_TIER_SWA, 3, 0, true) && fetch_same(t, HY_TIER_PAGE, 3, 0, true),
                "after a restart both groups' pages come back from their files, byte for byte");
        check(t, "two page groups, restarted");
        hy_tier_free(t);
    }
    HY_T_OK(rc == HY_OK, "restart (%s)", rc ? err : "ok");
    snprintf(tdir, sizeof tdir, "%s", saved);
    free(saved);
    free(st);
}

/* ---- the store ---------------------------------------------------------------------- */

static void t_warm_lru(void)
{
    hy_stats_t *st = calloc(1, sizeof *st);
    hy_tier_opts_t o;
    hy_tier_t *t;
    char err[HY_ERR_LEN];
    bool ok = true;
    int rc;

    /* 4 pages (+ one checkpoint: a quarter of 4*PAGE+CKPT is < CKPT) */
    opts(&o, st, 4 * PAGE + CKPT, NULL, 0);
    rc = hy_tier_create(&t, &o, err);
    HY_T_OK(rc == HY_OK, "warm-only store (%s)", rc ? err : "ok");
    if (rc != HY_OK)
        return;
    for (int b = 0; b < 4; b++)
        ok &= put(t, HY_TIER_PAGE, b, 0) == HY_OK;
    ok &= put(t, HY_TIER_PAGE, 1, 0) == 1; /* held already: touches it */
    ok &= put(t, HY_TIER_PAGE, 4, 0) == HY_OK; /* evicts the LRU: block 0 */
    ok &= put(t, HY_TIER_PAGE, 5, 0) == HY_OK; /* then block 2 (1 was touched) */
    HY_T_OK(ok && where(t, HY_TIER_PAGE, 0, 0) < 0 && where(t, HY_TIER_PAGE, 2, 0) < 0 &&
                where(t, HY_TIER_PAGE, 1, 0) == HY_TIER_WARM &&
                where(t, HY_TIER_PAGE, 3, 0) == HY_TIER_WARM &&
                where(t, HY_TIER_PAGE, 5, 0) == HY_TIER_WARM,
            "warm LRU: the least recently used go first, a touch counts");
    HY_T_OK(where(t, HY_TIER_PAGE, 1, 1) < 0, "a block with other tokens under a lookup misses");
    HY_T_OK(fetch_same(t, HY_TIER_PAGE, 3, 0, true) && where(t, HY_TIER_PAGE, 3, 0) < 0,
            "promotion copies the bytes put, and frees the warm slot (hot and warm exclusive)");
    HY_T_OK(put(t, HY_TIER_CKPT, 9, 0) == HY_OK && fetch_same(t, HY_TIER_CKPT, 9, 0, false) &&
                where(t, HY_TIER_CKPT, 9, 0) == HY_TIER_WARM,
            "a checkpoint has its own slots; a copy without promotion keeps it warm");
    HY_T_OK(atomic_load(&st->tiers.demotions[HY_TIER_WARM]) == 7 &&
                atomic_load(&st->tiers.promotions[HY_TIER_WARM]) == 1,
            "demotions 7, promotions 1 counted");
    check(t, "warm LRU");
    hy_tier_free(t);
    free(st);
}

static void t_disk(void)
{
    hy_stats_t *st = calloc(1, sizeof *st);
    hy_tier_opts_t o;
    hy_tier_t *t;
    char err[HY_ERR_LEN];
    uint64_t fb = hy_tier_file_header_bytes(PT) + PAGE;
    bool ok = true;
    int rc;

    /* 2 warm pages, 1 checkpoint; 4 page files on disk */
    opts(&o, st, 2 * PAGE + CKPT, tdir, 4 * fb + hy_tier_file_header_bytes(0) + CKPT);
    rc = hy_tier_create(&t, &o, err);
    HY_T_OK(rc == HY_OK, "store with a disk tier in %s (%s)", tdir, rc ? err : "ok");
    if (rc != HY_OK)
        return;
    hy_tier_sync(t);
    for (int b = 0; b < 3; b++) {
        ok &= put(t, HY_TIER_PAGE, b, 0) == HY_OK;
        hy_tier_sync(t);
    }
    ok &= put(t, HY_TIER_CKPT, 2, 0) == HY_OK;
    hy_tier_sync(t);
    HY_T_OK(ok && n_files() == 4 && where(t, HY_TIER_PAGE, 0, 0) == HY_TIER_COLD &&
                where(t, HY_TIER_PAGE, 2, 0) == HY_TIER_WARM,
            "written through to disk (%d files); the LRU warm page left for cold", n_files());
    HY_T_OK(hy_tier_fetch(t, HY_TIER_PAGE, hash_of(0, 0)) == 1 &&
                fetch_same(t, HY_TIER_PAGE, 0, 0, true),
            "a cold page comes back to warm on an I/O thread, byte for byte");
    HY_T_OK(atomic_load(&st->tiers.promotions[HY_TIER_COLD]) == 1 &&
                atomic_load(&st->tiers.read_time[HY_TIER_COLD].count) == 1 &&
                atomic_load(&st->tiers.write_bytes[HY_TIER_COLD]) == 3 * fb + hy_tier_file_header_bytes(0) + CKPT,
            "disk reads, writes and their bytes counted");
    check(t, "write-through and promotion");
    /* the budget holds 4 page files: 3 more pages evict the oldest files */
    for (int b = 3; b < 6; b++) {
        put(t, HY_TIER_PAGE, b, 0);
        hy_tier_sync(t);
    }
    HY_T_OK(where(t, HY_TIER_PAGE, 1, 0) < 0 && where(t, HY_TIER_PAGE, 2, 0) < 0 &&
                where(t, HY_TIER_PAGE, 0, 0) == HY_TIER_COLD &&
                where(t, HY_TIER_PAGE, 5, 0) == HY_TIER_WARM &&
                where(t, HY_TIER_PAGE, 3, 0) == HY_TIER_COLD,
            "the disk budget evicts the least recently used files (a read counts as a use)");
    check(t, "disk budget");
    hy_tier_free(t);
    free(st);
}

/* A second store on the same directory (a restarted server). */
static void t_restart(void)
{
    hy_stats_t *st = calloc(1, sizeof *st);
    hy_tier_opts_t o;
    hy_tier_t *t;
    char err[HY_ERR_LEN], path[512], foreign[512];
    bool ok = true;
    int rc;

    /* before: files for pages 0, 3, 4, 5 and checkpoint 2 (t_disk) */
    path_of(path, sizeof path, HY_TIER_PAGE, 4, 0);
    (void)!truncate(path, 100);
    path_of(path, sizeof path, HY_TIER_PAGE, 5, 0);
    flip_payload(path);
    /* a foreign file: another model's store writes it */
    {
        hy_stats_t *st2 = calloc(1, sizeof *st2);
        char fdir[300];
        hy_tier_t *t2;
        hy_tier_opts_t o2;

        snprintf(fdir, sizeof fdir, "%s/other", tdir);
        opts(&o2, st2, 2 * PAGE + CKPT, fdir, 1 << 20);
        memset(o2.ident.model_sha256, 9, 32);
        if (hy_tier_create(&t2, &o2, err) == HY_OK) {
            put(t2, HY_TIER_PAGE, 7, 0);
            hy_tier_free(t2);
        }
        path_of(path, sizeof path, HY_TIER_PAGE, 7, 0);
        snprintf(foreign, sizeof foreign, "%s/other/%s", tdir, strrchr(path, '/') + 1);
        ok &= rename(foreign, path) == 0;
        free(st2);
    }
    opts(&o, st, 2 * PAGE + CKPT, tdir, 1 << 20);
    rc = hy_tier_create(&t, &o, err);
    HY_T_OK(rc == HY_OK && ok, "restart on the same directory (%s)", rc ? err : "ok");
    if (rc != HY_OK)
        return;
    hy_tier_sync(t);
    HY_T_OK(where(t, HY_TIER_PAGE, 0, 0) == HY_TIER_COLD && where(t, HY_TIER_PAGE, 3, 0) == HY_TIER_COLD &&
                where(t, HY_TIER_CKPT, 2, 0) == HY_TIER_COLD && fetch_same(t, HY_TIER_PAGE, 3, 0, true) &&
                fetch_same(t, HY_TIER_CKPT, 2, 0, true),
            "re-indexed: pages and a checkpoint of the last run served, byte for byte");
    HY_T_OK(where(t, HY_TIER_PAGE, 4, 0) < 0 && where(t, HY_TIER_PAGE, 7, 0) < 0 &&
                atomic_load(&st->tiers.dropped[HY_TIER_DROP_CORRUPT]) == 1 &&
                atomic_load(&st->tiers.dropped[HY_TIER_DROP_FOREIGN]) == 1,
            "indexing drops the truncated file and the foreign one (counted by reason)");
    rc = hy_tier_fetch(t, HY_TIER_PAGE, hash_of(5, 0));
    hy_tier_sync(t);
    HY_T_OK(rc == 1 && hy_tier_fetch(t, HY_TIER_PAGE, hash_of(5, 0)) == HY_ENOENT &&
                where(t, HY_TIER_PAGE, 5, 0) < 0 && atomic_load(&st->disk_errors) == 1 &&
                atomic_load(&st->tiers.dropped[HY_TIER_DROP_CORRUPT]) == 2,
            "a payload that fails its checksum is dropped on read, counted as a disk error");
    check(t, "restart");
    hy_tier_free(t);
    free(st);
}

/* ---- injected failures ------------------------------------------------------------- */

static int fail_op = -1, fail_errno;

static int fault(void *ctx, int op, const char *name)
{
    (void)ctx;
    (void)name;
    return op == fail_op ? fail_errno : 0;
}

static void t_faults(void)
{
    hy_stats_t *st = calloc(1, sizeof *st);
    hy_tier_opts_t o;
    hy_tier_t *t;
    char err[HY_ERR_LEN];
    int before = n_files(), rc;

    opts(&o, st, 2 * PAGE + CKPT, tdir, 1 << 20);
    o.fault = fault;
    rc = hy_tier_create(&t, &o, err);
    if (rc != HY_OK) {
        HY_T_OK(0, "store for faults: %s", err);
        return;
    }
    hy_tier_sync(t);
    fail_op = HY_TIER_OP_WRITE;
    fail_errno = ENOSPC;
    put(t, HY_TIER_PAGE, 20, 0);
    hy_tier_sync(t);
    HY_T_OK(atomic_load(&st->disk_errors) == 1 && n_files() == before &&
                where(t, HY_TIER_PAGE, 20, 0) == HY_TIER_WARM,
            "a failed write (ENOSPC) is counted, leaves no file, the page stays warm");
    fail_op = -1;
    put(t, HY_TIER_PAGE, 21, 0);
    put(t, HY_TIER_PAGE, 22, 0); /* 20 leaves warm: lost, it had no file */
    hy_tier_sync(t);
    fail_op = HY_TIER_OP_READ;
    fail_errno = EIO;
    put(t, HY_TIER_PAGE, 23, 0); /* 21 leaves warm for its file */
    hy_tier_sync(t);
    rc = hy_tier_fetch(t, HY_TIER_PAGE, hash_of(21, 0));
    hy_tier_sync(t);
    HY_T_OK(rc == 1 && where(t, HY_TIER_PAGE, 21, 0) < 0 && where(t, HY_TIER_PAGE, 20, 0) < 0 &&
                atomic_load(&st->disk_errors) == 2 &&
                atomic_load(&st->tiers.dropped[HY_TIER_DROP_UNREADABLE]) == 1,
            "a read error (EIO) drops the file and is counted; nothing is served");
    fail_op = -1;
    HY_T_OK(hy_tier_persist(t, HY_TIER_PAGE, hash_of(30, 0), 30, (int32_t[PT]){3000, 3001, 3002, 3003},
                            (uint8_t[PAGE]){0}) == HY_OK &&
                hy_tier_persist(t, HY_TIER_PAGE, hash_of(30, 0), 30, (int32_t[PT]){3000, 3001, 3002, 3003},
                                (uint8_t[PAGE]){0}) == 1,
            "persist writes a hot page once, then has it");
    check(t, "injected failures");
    {
        hy_tier_t *t2;
        hy_tier_opts_t o2;

        opts(&o2, st, 2 * PAGE + CKPT, tdir, 1 << 20);
        rc = hy_tier_create(&t2, &o2, err);
        HY_T_OK(rc == HY_EINVAL && strstr(err, "in use by another hyserve") != NULL,
                "a second store on the same directory is refused: %s", err);
        if (rc == HY_OK)
            hy_tier_free(t2);
    }
    hy_tier_free(t);
    free(st);
}

/* ---- indexing in the background ------------------------------------------------------ */

static void t_errors(void)
{
    hy_tier_opts_t o;
    hy_tier_t *t = NULL;
    char err[HY_ERR_LEN];
    int rc;

    opts(&o, NULL, 0, tdir, 1 << 20);
    rc = hy_tier_create(&t, &o, err);
    HY_T_OK(rc == HY_EINVAL && strstr(err, "needs a warm tier") != NULL,
            "a disk tier without a warm tier is refused: %s", err);
    opts(&o, NULL, PAGE - 1, NULL, 0);
    o.unit_bytes[HY_TIER_CKPT] = 0;
    rc = hy_tier_create(&t, &o, err);
    HY_T_OK(rc == HY_ERANGE && strstr(err, "no KV page") != NULL,
            "a warm tier smaller than a page is refused: %s", err);
    opts(&o, NULL, 2 * PAGE + CKPT, "/proc/hyserve-no-such-dir", 1 << 20);
    rc = hy_tier_create(&t, &o, err);
    HY_T_OK(rc == HY_EIO && strstr(err, "cannot create") != NULL,
            "a directory that cannot be made is refused: %s", err);
    opts(&o, NULL, 2 * PAGE + CKPT, tdir, 100);
    rc = hy_tier_create(&t, &o, err);
    HY_T_OK(rc == HY_ERANGE && strstr(err, "no page file") != NULL,
            "a disk budget smaller than one file is refused: %s", err);
}

/* The model's hash arrives later; model.id lets the next store start at once. */
static void t_model_id(void)
{
    hy_stats_t *st = calloc(1, sizeof *st);
    hy_tier_opts_t o;
    hy_tier_t *t;
    char err[HY_ERR_LEN], model[512];
    uint8_t sha[32];
    FILE *f;

    snprintf(model, sizeof model, "%s/model.gguf", tdir);
    f = fopen(model, "w");
    fputs("not really a model", f);
    fclose(f);
    opts(&o, st, 2 * PAGE + CKPT, tdir, 1 << 20);
    o.sha_known = false;
    o.model_path = model;
    if (hy_tier_create(&t, &o, err) != HY_OK) {
        HY_T_OK(0, "store for model.id: %s", err);
        return;
    }
    HY_T_OK(atomic_load(&st->tiers.disk_state) == HY_TIER_DISK_WAITING &&
                put(t, HY_TIER_PAGE, 40, 0) == HY_OK && where(t, HY_TIER_PAGE, 3, 0) < 0,
            "without the model's hash the disk waits: nothing read, nothing written");
    memset(sha, 7, 32);
    hy_tier_set_model(t, sha);
    hy_tier_sync(t);
    HY_T_OK(atomic_load(&st->tiers.disk_state) == HY_TIER_DISK_READY &&
                where(t, HY_TIER_PAGE, 3, 0) == HY_TIER_COLD,
            "the hash arrives: indexed, and the page demoted while waiting is written");
    hy_tier_free(t);
    if (hy_tier_create(&t, &o, err) != HY_OK) {
        HY_T_OK(0, "second store for model.id: %s", err);
        return;
    }
    hy_tier_sync(t);
    HY_T_OK(atomic_load(&st->tiers.disk_state) == HY_TIER_DISK_READY &&
                where(t, HY_TIER_PAGE, 40, 0) == HY_TIER_COLD,
            "model.id remembers the hash of the same file: online without waiting");
    memset(sha, 8, 32);
    hy_tier_set_model(t, sha);
    HY_T_OK(atomic_load(&st->tiers.disk_state) == HY_TIER_DISK_FAILED &&
                where(t, HY_TIER_PAGE, 40, 0) < 0,
            "a hash that disagrees with model.id turns the disk tier off");
    check(t, "model.id");
    hy_tier_free(t);
    unlink(model);
    free(st);
}

/* A stop right after the model's hash came in (a first start's quick
 * restart): the pages persisted then are written, not skipped while the
 * indexer is still clearing the directory's leftovers. */
static void t_persist_on_hash(void)
{
    hy_stats_t *st = calloc(1, sizeof *st);
    hy_tier_opts_t o;
    hy_tier_t *t;
    char err[HY_ERR_LEN], dir[300], model[400];
    int32_t tok[PT];
    uint8_t bytes[PAGE], sha[32];
    int rc[3];
    FILE *f;

    snprintf(dir, sizeof dir, "%s/hash", tdir);
    snprintf(model, sizeof model, "%s/model.gguf", dir);
    if (mkdir(dir, 0700) != 0 || (f = fopen(model, "w")) == NULL) {
        HY_T_OK(0, "directory for the persist on hash: %s", strerror(errno));
        free(st);
        return;
    }
    fputs("another model", f);
    fclose(f);
    opts(&o, st, 2 * PAGE + CKPT, dir, 1 << 20);
    o.sha_known = false;
    o.model_path = model;
    if (hy_tier_create(&t, &o, err) != HY_OK) {
        HY_T_OK(0, "store for the persist on hash: %s", err);
        free(st);
        return;
    }
    memset(sha, 9, 32);
    hy_tier_set_model(t, sha);
    for (int b = 0; b < 3; b++) {
        block(50 + b, 0, tok, bytes, PAGE);
        rc[b] = hy_tier_persist(t, HY_TIER_PAGE, hash_of(50 + b, 0), 50 + b, tok, bytes);
    }
    hy_tier_sync(t);
    HY_T_OK(rc[0] == HY_OK && rc[1] == HY_OK && rc[2] == HY_OK &&
                where(t, HY_TIER_PAGE, 50, 0) == HY_TIER_COLD &&
                where(t, HY_TIER_PAGE, 52, 0) == HY_TIER_COLD,
            "pages persisted the moment the hash arrives are written (%d %d %d)", rc[0], rc[1],
            rc[2]);
    check(t, "persist on hash");
    hy_tier_free(t);
    unlink(model);
    free(st);
}

/* An I/O thread held inside its first file of one kind of operation (the
 * indexer's, a write): what the store answers meanwhile. */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_state; /* 0 open, 1 closed, 2 a thread waits at it */
static int gate_op;    /* the operation held */

static int gate(void *ctx, int op, const char *name)
{
    (void)ctx;
    (void)name;
    if (op != gate_op)
        return 0;
    pthread_mutex_lock(&gate_mu);
    if (gate_state == 1) {
        gate_state = 2;
        pthread_cond_broadcast(&gate_cv);
        while (gate_state == 2)
            pthread_cond_wait(&gate_cv, &gate_mu);
    }
    pthread_mutex_unlock(&gate_mu);
    return 0;
}

static void gate_wait(void)
{
    pthread_mutex_lock(&gate_mu);
    while (gate_state != 2)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
}

static void gate_open(void)
{
    pthread_mutex_lock(&gate_mu);
    gate_state = 0;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

static void t_probe(void)
{
    hy_stats_t *st = calloc(1, sizeof *st);
    hy_tier_opts_t o;
    hy_tier_t *t;
    char err[HY_ERR_LEN];
    int w1, w2;

    opts(&o, st, 2 * PAGE + CKPT, tdir, 1 << 20);
    o.fault = gate;
    gate_op = HY_TIER_OP_INDEX;
    gate_state = 1;
    if (hy_tier_create(&t, &o, err) != HY_OK) {
        HY_T_OK(0, "store for the probe: %s", err);
        return;
    }
    gate_wait();
    w1 = where(t, HY_TIER_PAGE, 3, 0);
    w2 = where(t, HY_TIER_PAGE, 3, 0);
    HY_T_OK(atomic_load(&st->tiers.disk_state) == HY_TIER_DISK_INDEXING && w1 == HY_TIER_COLD &&
                w2 == HY_TIER_COLD,
            "while indexing, a lookup finds a file by its name (state %u)",
            atomic_load(&st->tiers.disk_state));
    gate_open();
    hy_tier_sync(t);
    HY_T_OK(fetch_same(t, HY_TIER_PAGE, 3, 0, true), "the probed page is served after indexing");
    check(t, "probe during indexing");
    hy_tier_free(t);
    free(st);
}

/* A store of `slots` warm page slots on tdir whose writes go through the
 * gate (open); NULL, reported, when it cannot be made. */
static hy_tier_t *write_gated(hy_stats_t *st, int32_t slots, const char *what)
{
    hy_tier_opts_t o;
    hy_tier_t *t;
    char err[HY_ERR_LEN];

    opts(&o, st, (uint64_t)slots * PAGE + CKPT, tdir, 1 << 20);
    o.fault = gate;
    gate_op = HY_TIER_OP_WRITE;
    gate_state = 0;
    if (hy_tier_create(&t, &o, err) != HY_OK) {
        HY_T_OK(0, "store for %s: %s", what, err);
        return NULL;
    }
    hy_tier_sync(t);
    if (hy_tier_slots(t, HY_TIER_PAGE) != slots) {
        HY_T_OK(0, "store for %s: %d warm page slots, not %d", what,
                hy_tier_slots(t, HY_TIER_PAGE), slots);
        hy_tier_free(t);
        return NULL;
    }
    return t;
}

/* One warm page slot, held by a write the writer thread is in the middle
 * of (it took the last queued one, so nobody can run it here): a fetch
 * says "busy, ask again" - not "no slot", which a prefix wait takes for a
 * full store and gives up on - and is served once the write ends. */
static void t_busy(void)
{
    hy_stats_t *st = calloc(1, sizeof *st);
    hy_tier_t *t = write_gated(st, 1, "the busy slot");
    bool ok = true;
    int rc;

    if (t == NULL) {
        free(st);
        return;
    }
    ok &= put(t, HY_TIER_PAGE, 60, 0) == HY_OK; /* written through, then pushed out */
    hy_tier_sync(t);
    ok &= put(t, HY_TIER_PAGE, 61, 0) == HY_OK;
    hy_tier_sync(t);
    ok &= where(t, HY_TIER_PAGE, 60, 0) == HY_TIER_COLD;
    gate_state = 1;
    ok &= put(t, HY_TIER_PAGE, 62, 0) == HY_OK; /* its write holds the slot */
    gate_wait();
    rc = hy_tier_fetch(t, HY_TIER_PAGE, hash_of(60, 0));
    HY_T_OK(ok && rc == HY_TIER_FETCH_BUSY,
            "a fetch while the only warm slot waits for the write on its way: busy (%d)", rc);
    gate_open();
    HY_T_OK(fetch_same(t, HY_TIER_PAGE, 60, 0, true) && where(t, HY_TIER_PAGE, 62, 0) ==
                HY_TIER_COLD, "once the write ends, the fetch is served and the write is on disk");
    check(t, "busy slot");
    hy_tier_free(t);
    free(st);
}

/* Warm eviction stays LRU when the writer is behind: an older entry that
 * waits for its queued write-through is written (by the caller) and taken
 * before a newer idle one - the entry a waiting prefix has just read. */
static void t_lru_writes(void)
{
    hy_stats_t *st = calloc(1, sizeof *st);
    hy_tier_t *t = write_gated(st, 3, "LRU under a slow writer");
    bool ok = true;
    int rc, k;

    if (t == NULL) {
        free(st);
        return;
    }
    for (int b = 70; b <= 74; b++)
        ok &= put(t, HY_TIER_PAGE, b, 0) == HY_OK;
    hy_tier_sync(t); /* 70 and 71 on disk only; 72, 73, 74 warm and written */
    gate_state = 1;
    ok &= put(t, HY_TIER_PAGE, 75, 0) == HY_OK; /* takes 72's slot; the writer holds it */
    gate_wait();
    ok &= put(t, HY_TIER_PAGE, 76, 0) == HY_OK; /* takes 73's; its write is queued */
    ok &= put(t, HY_TIER_PAGE, 75, 0) == 1;      /* touched: LRU 74, 76, 75 */
    ok &= hy_tier_fetch(t, HY_TIER_PAGE, hash_of(70, 0)) == HY_TIER_FETCH_QUEUED; /* 74's */
    for (k = 0; k < 5000 && where(t, HY_TIER_PAGE, 70, 0) != HY_TIER_WARM; k++)
        usleep(1000);
    /* LRU now 76 (queued write), 75 (write running), 70 (just read) */
    rc = hy_tier_fetch(t, HY_TIER_PAGE, hash_of(71, 0));
    HY_T_OK(ok && rc == HY_TIER_FETCH_QUEUED && where(t, HY_TIER_PAGE, 70, 0) == HY_TIER_WARM &&
                where(t, HY_TIER_PAGE, 76, 0) == HY_TIER_COLD,
            "a slow writer: the fetch writes the older queued entry and takes its slot, the "
            "entry just read stays warm (fetch %d)", rc);
    rc = hy_tier_fetch(t, HY_TIER_PAGE, hash_of(72, 0));
    HY_T_OK(rc == HY_TIER_FETCH_BUSY && where(t, HY_TIER_PAGE, 70, 0) == HY_TIER_WARM,
            "the oldest entry's write is running: busy, not the newer entry's slot (%d)", rc);
    gate_open();
    HY_T_OK(fetch_same(t, HY_TIER_PAGE, 72, 0, true) && fetch_same(t, HY_TIER_PAGE, 71, 0, true) &&
                where(t, HY_TIER_PAGE, 75, 0) >= 0,
            "once the write ends, both are served and the written page is kept");
    check(t, "LRU under a slow writer");
    hy_tier_free(t);
    free(st);
}

int main(void)
{
    char cmd[600];

    snprintf(tdir, sizeof tdir, "/tmp/hyserve-test-tier-%ld", (long)getpid());
    if (mkdir(tdir, 0700) != 0) {
        HY_T_OK(0, "mkdir %s: %s", tdir, strerror(errno));
        return hy_t_done();
    }
    t_crc();
    t_format();
    t_format_groups();
    t_warm_lru();
    t_disk();
    t_restart();
    t_faults();
    t_errors();
    t_model_id();
    t_persist_on_hash();
    t_probe();
    t_busy();
    t_lru_writes();
    t_groups();
    snprintf(cmd, sizeof cmd, "rm -rf %s", tdir);
    if (system(cmd) != 0)
        HY_T_OK(0, "cleanup of %s", tdir);
    return hy_t_done();
}
