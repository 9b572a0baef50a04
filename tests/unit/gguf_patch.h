/*
 * gguf_patch.h - loader tests that change a committed tiny model's bytes:
 * read it, patch a key's value or a name's letter in place (same length),
 * or insert whole key/value pairs after the header, then load the result
 * from a temporary file and look at the model or the error.
 *
 * Inserting keeps the tensor data where its offsets say it is: the data
 * section starts at the next multiple of the file's alignment after the
 * tensor infos, so the inserted bytes are padded with a filler string key
 * ("hyserve.test.pad", which no loader reads) to a multiple of it.
 */
#ifndef HY_TEST_GGUF_PATCH_H
#define HY_TEST_GGUF_PATCH_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "gguf_writer.h"
#include "model/model.h"

/* The whole file, or NULL. */
static inline unsigned char *hy_tp_read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long sz;

    *size = 0;
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (sz > 0 && (buf = malloc((size_t)sz)) != NULL && fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = buf ? (size_t)sz : 0;
    return buf;
}

/* Offset just past the first occurrence of GGUF string s (u64 length +
 * bytes), or 0. */
static inline size_t hy_tp_find_str(const unsigned char *buf, size_t size, const char *s)
{
    size_t n = strlen(s);

    for (size_t i = 8; i + n <= size; i++) {
        uint64_t len;
        memcpy(&len, buf + i - 8, 8);
        if (len == n && memcmp(buf + i, s, n) == 0)
            return i + n;
    }
    return 0;
}

/* Sets the u32 value of key (stored as a u32) in place; 0, or -1 when the
 * key is not there or not a u32. */
static inline int hy_tp_set_u32(unsigned char *buf, size_t size, const char *key, uint32_t v)
{
    size_t at = hy_tp_find_str(buf, size, key);
    uint32_t type;

    if (at == 0 || at + 8 > size)
        return -1;
    memcpy(&type, buf + at, 4);
    if (type != HY_TW_U32)
        return -1;
    memcpy(buf + at + 4, &v, 4);
    return 0;
}

/* Loads buf as a GGUF file.  With out non-NULL the model is handed over
 * (caller frees it); otherwise it is freed here.  err holds the message. */
static inline int hy_tp_load(hy_backend_t *be, const unsigned char *buf, size_t size,
                             hy_model_t **out, char *err)
{
    char path[] = "/tmp/hy_gguf_patch_XXXXXX";
    int fd = mkstemp(path), rc;
    hy_model_t *m = NULL;

    if (out)
        *out = NULL;
    if (fd < 0 || write(fd, buf, size) != (ssize_t)size) {
        if (fd >= 0) {
            close(fd);
            unlink(path);
        }
        snprintf(err, HY_ERR_LEN, "cannot write a temporary file");
        return HY_EIO;
    }
    close(fd);
    err[0] = '\0';
    rc = hy_model_load(&m, path, be, err);
    unlink(path);
    if (out)
        *out = m;
    else
        hy_model_free(m);
    return rc;
}

/* Inserts the n_kv key/value pairs encoded in kv (kv_len bytes, as
 * hy_tw_kv_* write them) after the header of the GGUF in *buf, padded to
 * `align` bytes; returns 0, or -1 when out of memory. */
static inline int hy_tp_insert_kv(unsigned char **buf, size_t *size, const uint8_t *kv,
                                  size_t kv_len, uint64_t n_kv, uint32_t align)
{
    static const char pad_key[] = "hyserve.test.pad";
    const size_t at = 24; /* magic, version, n_tensors, n_kv */
    size_t base = kv_len + 8 + sizeof pad_key - 1 + 4 + 8, fill = (align - base % align) % align;
    unsigned char *nb;
    hy_tw_t w;
    uint64_t count;
    char *val;

    hy_tw_init(&w);
    hy_tw_bytes(&w, kv, kv_len);
    val = calloc(1, fill + 1);
    if (val == NULL) {
        hy_tw_free(&w);
        return -1;
    }
    memset(val, 'x', fill);
    hy_tw_kv_str(&w, pad_key, val);
    free(val);
    nb = w.oom ? NULL : malloc(*size + w.len);
    if (nb == NULL) {
        hy_tw_free(&w);
        return -1;
    }
    memcpy(nb, *buf, at);
    memcpy(nb + at, w.buf, w.len);
    memcpy(nb + at + w.len, *buf + at, *size - at);
    memcpy(&count, nb + 16, 8);
    count += n_kv + 1;
    memcpy(nb + 16, &count, 8);
    free(*buf);
    *buf = nb;
    *size += w.len;
    hy_tw_free(&w);
    return 0;
}

#endif
