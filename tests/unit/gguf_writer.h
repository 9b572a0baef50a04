/*
 * gguf_writer.h - a tiny in-memory GGUF builder for tests.  It writes raw
 * little-endian fields into a growing buffer and knows nothing about
 * validity, so tests can build both well-formed files and deliberately
 * broken ones (wrong counts, bad lengths, overlapping tensors).  Typical use:
 *
 *     hy_tw_t w; hy_tw_init(&w);
 *     hy_tw_header(&w, 3, 1, 2);                     // version, n_tensors, n_kv
 *     hy_tw_kv_str(&w, "general.architecture", "llama");
 *     hy_tw_kv_u32(&w, "general.alignment", 32);
 *     hy_tw_tensor_info(&w, "x", 1, (int64_t[]){8}, 0, 0);
 *     hy_tw_pad(&w, 32);                             // data section starts here
 *     hy_tw_zeros(&w, 32);                           // tensor data
 *     ... hy_gguf_open_buffer(&g, w.buf, w.len, "t.gguf", err) ...
 *     hy_tw_free(&w);
 *
 * Allocation failure sets w.oom and makes every later call a no-op.
 */
#ifndef HY_TEST_GGUF_WRITER_H
#define HY_TEST_GGUF_WRITER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *buf;
    size_t len;
    size_t cap;
    int oom;
} hy_tw_t;

/* GGUF metadata value type ids (same numbers as hy_gguf_type_t). */
enum {
    HY_TW_U8 = 0, HY_TW_I8, HY_TW_U16, HY_TW_I16, HY_TW_U32, HY_TW_I32, HY_TW_F32,
    HY_TW_BOOL, HY_TW_STRING, HY_TW_ARRAY, HY_TW_U64, HY_TW_I64, HY_TW_F64,
};

static inline void hy_tw_init(hy_tw_t *w)
{
    memset(w, 0, sizeof *w);
}

static inline void hy_tw_free(hy_tw_t *w)
{
    free(w->buf);
    memset(w, 0, sizeof *w);
}

static inline void hy_tw_bytes(hy_tw_t *w, const void *p, size_t n)
{
    if (w->oom)
        return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        uint8_t *nb;
        while (cap < w->len + n)
            cap *= 2;
        nb = realloc(w->buf, cap);
        if (nb == NULL) {
            w->oom = 1;
            return;
        }
        w->buf = nb;
        w->cap = cap;
    }
    if (n != 0)
        memcpy(w->buf + w->len, p, n);
    w->len += n;
}

/* Little-endian integer of `n` bytes. */
static inline void hy_tw_le(hy_tw_t *w, uint64_t v, int n)
{
    uint8_t b[8];
    int i;

    for (i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    hy_tw_bytes(w, b, (size_t)n);
}

static inline void hy_tw_u8(hy_tw_t *w, uint8_t v) { hy_tw_le(w, v, 1); }
static inline void hy_tw_u16(hy_tw_t *w, uint16_t v) { hy_tw_le(w, v, 2); }
static inline void hy_tw_u32(hy_tw_t *w, uint32_t v) { hy_tw_le(w, v, 4); }
static inline void hy_tw_u64(hy_tw_t *w, uint64_t v) { hy_tw_le(w, v, 8); }
static inline void hy_tw_i32(hy_tw_t *w, int32_t v) { hy_tw_le(w, (uint32_t)v, 4); }
static inline void hy_tw_i64(hy_tw_t *w, int64_t v) { hy_tw_le(w, (uint64_t)v, 8); }

static inline void hy_tw_f32(hy_tw_t *w, float v)
{
    uint32_t u;

    memcpy(&u, &v, 4);
    hy_tw_u32(w, u);
}

static inline void hy_tw_f64(hy_tw_t *w, double v)
{
    uint64_t u;

    memcpy(&u, &v, 8);
    hy_tw_u64(w, u);
}

static inline void hy_tw_zeros(hy_tw_t *w, size_t n)
{
    static const uint8_t z[64];

    while (n > 0) {
        size_t k = n < sizeof z ? n : sizeof z;
        hy_tw_bytes(w, z, k);
        n -= k;
    }
}

/* GGUF string: u64 length, bytes, no NUL. */
static inline void hy_tw_strn(hy_tw_t *w, const char *s, size_t n)
{
    hy_tw_u64(w, n);
    hy_tw_bytes(w, s, n);
}

static inline void hy_tw_str(hy_tw_t *w, const char *s)
{
    hy_tw_strn(w, s, strlen(s));
}

static inline void hy_tw_header(hy_tw_t *w, uint32_t version, int64_t n_tensors, int64_t n_kv)
{
    hy_tw_bytes(w, "GGUF", 4);
    hy_tw_u32(w, version);
    hy_tw_i64(w, n_tensors);
    hy_tw_i64(w, n_kv);
}

/* Key and type of a kv; the value follows with the raw writers. */
static inline void hy_tw_kv(hy_tw_t *w, const char *key, uint32_t type)
{
    hy_tw_str(w, key);
    hy_tw_u32(w, type);
}

static inline void hy_tw_kv_u8(hy_tw_t *w, const char *k, uint8_t v) { hy_tw_kv(w, k, HY_TW_U8); hy_tw_u8(w, v); }
static inline void hy_tw_kv_i8(hy_tw_t *w, const char *k, int8_t v) { hy_tw_kv(w, k, HY_TW_I8); hy_tw_u8(w, (uint8_t)v); }
static inline void hy_tw_kv_u16(hy_tw_t *w, const char *k, uint16_t v) { hy_tw_kv(w, k, HY_TW_U16); hy_tw_u16(w, v); }
static inline void hy_tw_kv_i16(hy_tw_t *w, const char *k, int16_t v) { hy_tw_kv(w, k, HY_TW_I16); hy_tw_u16(w, (uint16_t)v); }
static inline void hy_tw_kv_u32(hy_tw_t *w, const char *k, uint32_t v) { hy_tw_kv(w, k, HY_TW_U32); hy_tw_u32(w, v); }
static inline void hy_tw_kv_i32(hy_tw_t *w, const char *k, int32_t v) { hy_tw_kv(w, k, HY_TW_I32); hy_tw_i32(w, v); }
static inline void hy_tw_kv_u64(hy_tw_t *w, const char *k, uint64_t v) { hy_tw_kv(w, k, HY_TW_U64); hy_tw_u64(w, v); }
static inline void hy_tw_kv_i64(hy_tw_t *w, const char *k, int64_t v) { hy_tw_kv(w, k, HY_TW_I64); hy_tw_i64(w, v); }
static inline void hy_tw_kv_f32(hy_tw_t *w, const char *k, float v) { hy_tw_kv(w, k, HY_TW_F32); hy_tw_f32(w, v); }
static inline void hy_tw_kv_f64(hy_tw_t *w, const char *k, double v) { hy_tw_kv(w, k, HY_TW_F64); hy_tw_f64(w, v); }
static inline void hy_tw_kv_bool(hy_tw_t *w, const char *k, int v) { hy_tw_kv(w, k, HY_TW_BOOL); hy_tw_u8(w, v ? 1 : 0); }
static inline void hy_tw_kv_str(hy_tw_t *w, const char *k, const char *v) { hy_tw_kv(w, k, HY_TW_STRING); hy_tw_str(w, v); }

/* Array header; write `count` elements of elem_type after it. */
static inline void hy_tw_kv_arr(hy_tw_t *w, const char *key, uint32_t elem_type, uint64_t count)
{
    hy_tw_kv(w, key, HY_TW_ARRAY);
    hy_tw_u32(w, elem_type);
    hy_tw_u64(w, count);
}

static inline void hy_tw_kv_arr_str(hy_tw_t *w, const char *key, const char *const *v, size_t n)
{
    size_t i;

    hy_tw_kv_arr(w, key, HY_TW_STRING, n);
    for (i = 0; i < n; i++)
        hy_tw_str(w, v[i]);
}

static inline void hy_tw_kv_arr_i32(hy_tw_t *w, const char *key, const int32_t *v, size_t n)
{
    size_t i;

    hy_tw_kv_arr(w, key, HY_TW_I32, n);
    for (i = 0; i < n; i++)
        hy_tw_i32(w, v[i]);
}

static inline void hy_tw_kv_arr_f32(hy_tw_t *w, const char *key, const float *v, size_t n)
{
    size_t i;

    hy_tw_kv_arr(w, key, HY_TW_F32, n);
    for (i = 0; i < n; i++)
        hy_tw_f32(w, v[i]);
}

/* One tensor info: name, n_dims, ne[0..n_dims-1], ggml type, data offset
 * (relative to the data section). */
static inline void hy_tw_tensor_info(hy_tw_t *w, const char *name, uint32_t n_dims,
                                     const int64_t *ne, uint32_t type, uint64_t offset)
{
    uint32_t d;

    hy_tw_str(w, name);
    hy_tw_u32(w, n_dims);
    for (d = 0; d < n_dims; d++)
        hy_tw_i64(w, ne[d]);
    hy_tw_u32(w, type);
    hy_tw_u64(w, offset);
}

/* Zero padding up to a multiple of `alignment` (the start of the data
 * section after the tensor infos, or between tensors). */
static inline void hy_tw_pad(hy_tw_t *w, size_t alignment)
{
    hy_tw_zeros(w, (alignment - w->len % alignment) % alignment);
}

/* Writes the buffer to a file; 0 on success. */
static inline int hy_tw_write_file(const hy_tw_t *w, const char *path)
{
    FILE *f = fopen(path, "wb");
    int ok;

    if (f == NULL)
        return -1;
    ok = fwrite(w->buf, 1, w->len, f) == w->len;
    ok = (fclose(f) == 0) && ok;
    return ok ? 0 : -1;
}

#endif
