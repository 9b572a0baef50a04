/*
 * tier_file.c - encode, check, read and write one disk-tier file (see
 * tier_file.h for the layout).  Every field is written little-endian byte
 * by byte, so a file is the same whatever wrote it; every check names the
 * field that failed, because "dropped with a log line naming it" is what
 * an operator needs to trust a cache directory.
 */
#define _GNU_SOURCE
#include "ipc/tier_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/crc32c.h"

static const char tier_magic[8] = {'H', 'Y', 'K', 'V', 'T', 'I', 'E', 'R'};

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;

    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Fixed header bytes of a format version: version 1 had no group fields. */
static size_t fixed_bytes(uint32_t version)
{
    return version == 1 ? 144 : HY_TIER_FILE_FIXED;
}

static size_t header_bytes_v(uint32_t version, uint32_t n_tokens)
{
    return (fixed_bytes(version) + 4 * (size_t)n_tokens + 63) & ~(size_t)63;
}

size_t hy_tier_file_header_bytes(uint32_t n_tokens)
{
    return header_bytes_v(HY_TIER_FILE_VERSION, n_tokens);
}

uint64_t hy_tier_file_unit(const hy_tier_ident_t *id, uint32_t kind)
{
    return kind == HY_TIER_PAGE ? id->page_bytes
           : kind == HY_TIER_SWA ? id->swa_page_bytes
           : kind == HY_TIER_CKPT ? id->slot_bytes
                                  : 0;
}

static const char kind_letter[HY_TIER_KINDS] = {'p', 'c', 's'};

static const char *kind_name(uint32_t kind)
{
    return kind == HY_TIER_CKPT ? "checkpoint" : kind == HY_TIER_SWA ? "sliding-window page" : "page";
}

void hy_tier_file_name(char *buf, size_t cap, uint32_t kind, uint64_t hash)
{
    snprintf(buf, cap, "%c-%016llx.hykv", kind < HY_TIER_KINDS ? kind_letter[kind] : 'p',
             (unsigned long long)hash);
}

bool hy_tier_file_parse_name(const char *name, uint32_t *kind, uint64_t *hash)
{
    uint64_t h = 0;
    int i;

    if (strlen(name) != 23 || (name[0] != 'p' && name[0] != 'c' && name[0] != 's') ||
        name[1] != '-' ||
        strcmp(name + 18, ".hykv") != 0)
        return false;
    for (i = 2; i < 18; i++) {
        char c = name[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return false;
        h = h << 4 | (uint64_t)d;
    }
    *kind = name[0] == 'c' ? HY_TIER_CKPT : name[0] == 's' ? HY_TIER_SWA : HY_TIER_PAGE;
    *hash = h;
    return true;
}

static void ident_encode(uint8_t *p, const hy_tier_ident_t *id)
{
    memcpy(p, id->model_sha256, 32);
    put64(p + 32, id->model_bytes);
    put32(p + 40, id->kv_type);
    put32(p + 44, id->n_kv_layers);
    put32(p + 48, id->n_head_kv);
    put32(p + 52, id->head_dim_k);
    put32(p + 56, id->head_dim_v);
    put32(p + 60, id->n_rec_layers);
    put32(p + 64, id->page_tokens);
    put32(p + 68, 0);
    put64(p + 72, id->page_bytes);
    put64(p + 80, id->slot_bytes);
    put64(p + 88, 0);
    put32(p + 96, id->n_swa_layers);
    put32(p + 100, id->swa_window);
    put64(p + 104, id->swa_page_bytes);
    put32(p + 112, id->swa_map_crc);
}

void hy_tier_file_encode(uint8_t *hdr, const hy_tier_ident_t *id, const hy_tier_rec_t *r,
                         const int32_t *tokens)
{
    size_t hb = hy_tier_file_header_bytes(r->n_tokens);

    memset(hdr, 0, hb);
    memcpy(hdr, tier_magic, 8);
    put32(hdr + 8, HY_TIER_FILE_VERSION);
    put32(hdr + 12, r->kind);
    put64(hdr + 16, r->hash);
    put32(hdr + 24, (uint32_t)r->depth);
    put32(hdr + 28, r->n_tokens);
    put64(hdr + 32, r->payload_bytes);
    put32(hdr + 40, r->payload_crc);
    ident_encode(hdr + 48, id);
    for (uint32_t i = 0; i < r->n_tokens; i++)
        put32(hdr + HY_TIER_FILE_FIXED + 4 * i, (uint32_t)tokens[i]);
    put32(hdr + 44, hy_crc32c(0, hdr, hb));
}

/* Which identity field differs, or NULL. */
static const char *ident_diff(const uint8_t *p, const hy_tier_ident_t *id)
{
    if (memcmp(p, id->model_sha256, 32) != 0)
        return "model SHA-256";
    if (get64(p + 32) != id->model_bytes)
        return "model size";
    if (get32(p + 40) != id->kv_type)
        return "KV type";
    if (get32(p + 44) != id->n_kv_layers || get32(p + 48) != id->n_head_kv ||
        get32(p + 52) != id->head_dim_k || get32(p + 56) != id->head_dim_v)
        return "KV geometry";
    if (get32(p + 60) != id->n_rec_layers)
        return "recurrent layers";
    if (get32(p + 64) != id->page_tokens)
        return "page tokens";
    if (get32(p + 96) != id->n_swa_layers || get32(p + 100) != id->swa_window ||
        get32(p + 112) != id->swa_map_crc)
        return "sliding-window page group (layers or window)";
    if (get64(p + 72) != id->page_bytes || get64(p + 80) != id->slot_bytes ||
        get64(p + 104) != id->swa_page_bytes)
        return "page or state size";
    return NULL;
}

int hy_tier_file_decode(const uint8_t *hdr, size_t hdr_len, uint64_t file_bytes,
                        const hy_tier_ident_t *id, int64_t want_kind, uint64_t want_hash,
                        hy_tier_rec_t *r, int32_t *tokens, char *why)
{
    uint8_t crc_field[4];
    uint32_t version, stored, crc;
    size_t hb;
    const char *d;
    uint64_t unit;

    if (hdr_len < fixed_bytes(1) || file_bytes < fixed_bytes(1))
        return hy_err(why, HY_EFORMAT, "truncated: %llu bytes, shorter than a header",
                      (unsigned long long)file_bytes);
    if (memcmp(hdr, tier_magic, 8) != 0)
        return hy_err(why, HY_EFORMAT, "bad magic");
    version = get32(hdr + 8);
    r->kind = get32(hdr + 12);
    r->hash = get64(hdr + 16);
    r->depth = (int32_t)get32(hdr + 24);
    r->n_tokens = get32(hdr + 28);
    r->payload_bytes = get64(hdr + 32);
    r->payload_crc = get32(hdr + 40);
    if (r->n_tokens > 4096)
        return hy_err(why, HY_EFORMAT, "header says %u tokens", r->n_tokens);
    /* an older version's header is checked as that version wrote it, so
     * it is refused for its version, not taken for corruption */
    hb = header_bytes_v(version, r->n_tokens);
    if (hb > hdr_len || hb > file_bytes)
        return hy_err(why, HY_EFORMAT, "truncated: %llu bytes, the header alone needs %zu",
                      (unsigned long long)file_bytes, hb);
    /* the CRC first: a flipped bit anywhere in the header is corruption,
     * not a foreign file */
    stored = get32(hdr + 44);
    memcpy(crc_field, hdr + 44, 4);
    memset((uint8_t *)hdr + 44, 0, 4);
    crc = hy_crc32c(0, hdr, hb);
    memcpy((uint8_t *)hdr + 44, crc_field, 4);
    if (crc != stored)
        return hy_err(why, HY_EFORMAT, "header checksum mismatch");
    if (version == 1)
        return hy_err(why, HY_EUNSUPPORTED, "format version 1 (a page of every KV layer, written "
                      "before sliding-window page groups), this build reads %u",
                      HY_TIER_FILE_VERSION);
    if (version != HY_TIER_FILE_VERSION)
        return hy_err(why, HY_EUNSUPPORTED, "format version %u, this build reads %u", version,
                      HY_TIER_FILE_VERSION);
    if ((d = ident_diff(hdr + 48, id)) != NULL)
        return hy_err(why, HY_EUNSUPPORTED, "foreign: %s differs from this model's", d);
    if (r->kind >= HY_TIER_KINDS)
        return hy_err(why, HY_EFORMAT, "kind %u", r->kind);
    if (r->kind == HY_TIER_SWA && id->n_swa_layers == 0)
        return hy_err(why, HY_EUNSUPPORTED, "foreign: a sliding-window page, this model has no "
                      "sliding-window page group");
    unit = hy_tier_file_unit(id, r->kind);
    if (r->payload_bytes != unit ||
        r->n_tokens != (hy_tier_kind_is_page(r->kind) ? id->page_tokens : 0u))
        return hy_err(why, HY_EFORMAT, "payload of %llu bytes and %u tokens for a %s",
                      (unsigned long long)r->payload_bytes, r->n_tokens, kind_name(r->kind));
    if (want_kind >= 0 && ((int64_t)r->kind != want_kind || r->hash != want_hash))
        return hy_err(why, HY_EFORMAT, "header is for another block than its name");
    if (file_bytes != hb + r->payload_bytes)
        return hy_err(why, HY_EFORMAT, "%s: %llu bytes, the header says %llu",
                      file_bytes < hb + r->payload_bytes ? "truncated" : "too long",
                      (unsigned long long)file_bytes,
                      (unsigned long long)(hb + r->payload_bytes));
    for (uint32_t i = 0; i < r->n_tokens && tokens != NULL; i++)
        tokens[i] = (int32_t)get32(hdr + HY_TIER_FILE_FIXED + 4 * i);
    return HY_OK;
}

/* pread until n bytes or EOF; -1 on error (errno). */
static ssize_t read_full(int fd, void *buf, size_t n, off_t off)
{
    size_t got = 0;

    while (got < n) {
        ssize_t k = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

int hy_tier_file_read(int dirfd, const char *name, const hy_tier_ident_t *id,
                      hy_tier_rec_t *r, int32_t *tokens, void *payload, uint64_t payload_cap,
                      char *why)
{
    uint8_t hdr[HY_TIER_FILE_FIXED + 4 * 256 + 64];
    uint32_t kind;
    uint64_t hash;
    struct stat st;
    size_t want, hb;
    ssize_t got;
    int fd, rc;

    if (!hy_tier_file_parse_name(name, &kind, &hash))
        return hy_err(why, HY_EFORMAT, "not a cache file name");
    fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return hy_err(why, errno == ENOENT ? HY_ENOENT : HY_EIO, "open: %s", strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = hy_err(why, HY_EIO, "fstat: %s", strerror(errno));
        goto out;
    }
    /* the header of the largest page a table allows (256 tokens) */
    want = HY_MIN(sizeof hdr, (size_t)st.st_size);
    if ((got = read_full(fd, hdr, want, 0)) < 0) {
        rc = hy_err(why, HY_EIO, "read: %s", strerror(errno));
        goto out;
    }
    if ((rc = hy_tier_file_decode(hdr, (size_t)got, (uint64_t)st.st_size, id, kind, hash, r,
                                  tokens, why)) != HY_OK || payload == NULL)
        goto out;
    if (r->payload_bytes > payload_cap) {
        rc = hy_err(why, HY_EFORMAT, "payload of %llu bytes, room for %llu",
                    (unsigned long long)r->payload_bytes, (unsigned long long)payload_cap);
        goto out;
    }
    hb = hy_tier_file_header_bytes(r->n_tokens);
    if ((got = read_full(fd, payload, (size_t)r->payload_bytes, (off_t)hb)) < 0) {
        rc = hy_err(why, HY_EIO, "read: %s", strerror(errno));
        goto out;
    }
    if ((uint64_t)got != r->payload_bytes) {
        rc = hy_err(why, HY_EFORMAT, "truncated while reading: %zd of %llu payload bytes", got,
                    (unsigned long long)r->payload_bytes);
        goto out;
    }
    if (hy_crc32c(0, payload, (size_t)r->payload_bytes) != r->payload_crc)
        rc = hy_err(why, HY_EFORMAT, "payload checksum mismatch");
out:
    close(fd);
    return rc;
}

static void tmp_name(char *buf, size_t cap, const char *name, unsigned tag)
{
    snprintf(buf, cap, "%s.%u.tmp", name, tag);
}

int hy_tier_file_write(int dirfd, const char *name, unsigned tag, const hy_tier_ident_t *id,
                       hy_tier_rec_t *r, const int32_t *tokens, const void *payload, int inject,
                       char *why)
{
    uint8_t hdr[HY_TIER_FILE_FIXED + 4 * 256 + 64];
    char tmp[HY_TIER_NAME_LEN + 16];
    size_t hb = hy_tier_file_header_bytes(r->n_tokens), total, done = 0;
    struct iovec iov[2];
    int fd, e = 0;

    if (hb > sizeof hdr)
        return hy_err(why, HY_EINVAL, "%u tokens per block: more than a header holds", r->n_tokens);
    r->payload_crc = hy_crc32c(0, payload, (size_t)r->payload_bytes);
    hy_tier_file_encode(hdr, id, r, tokens);
    tmp_name(tmp, sizeof tmp, name, tag);
    fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return hy_err(why, HY_EIO, "create %s: %s", tmp, strerror(errno));
    total = hb + (size_t)r->payload_bytes;
    while (done < total && e == 0) {
        ssize_t k;
        int n = 0;

        if (done < hb) {
            iov[n].iov_base = hdr + done;
            iov[n++].iov_len = hb - done;
        }
        iov[n].iov_base = (char *)payload + (done > hb ? done - hb : 0);
        iov[n++].iov_len = total - HY_MAX(done, hb);
        if (inject != 0) {
            errno = inject;
            k = -1;
        } else {
            k = pwritev(fd, iov, n, (off_t)done);
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            e = k < 0 ? errno : ENOSPC;
        else
            done += (size_t)k;
    }
    if (close(fd) != 0 && e == 0)
        e = errno;
    if (e != 0) {
        unlinkat(dirfd, tmp, 0);
        return hy_err(why, HY_EIO, "write %s: %s", tmp, strerror(e));
    }
    if (renameat(dirfd, tmp, dirfd, name) != 0) {
        e = errno;
        unlinkat(dirfd, tmp, 0);
        return hy_err(why, HY_EIO, "rename %s: %s", tmp, strerror(e));
    }
    return HY_OK;
}
