/*
 * gguf.c - the GGUF v2/v3 reader behind gguf.h.  The file is mapped
 * read-only and walked once by a bounds-checked cursor; every count, length,
 * offset and dimension is checked against the bytes that remain before it is
 * used or sized into an allocation, so a truncated or hostile file yields one
 * error line (file, field or tensor, byte offset) and never a crash.  Keys and
 * tensor names are then sorted so lookups are binary searches, and string
 * arrays get an offset index so element i is O(1).
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HY_GGUF_DEFAULT_ALIGNMENT 32u
/* Smallest possible encodings, used to bound counts before allocating:
 * a kv is key length (8) + type (4) + at least one value byte; a tensor
 * info is name length (8) + n_dims (4) + one dim (8) + type (4) + offset (8). */
#define HY_GGUF_MIN_KV_BYTES 13u
#define HY_GGUF_MIN_TINFO_BYTES 32u

typedef struct {
    hy_gguf_str_t key;
    uint64_t at;            /* file offset where the kv starts */
    hy_gguf_type_t type;
    hy_gguf_type_t elem;    /* arrays only */
    uint64_t count;         /* arrays only */
    const uint8_t *val;     /* scalar, string length prefix, or first element */
    uint64_t *str_at;       /* string arrays: file offset of element i's length */
} hy_gguf_kv_t;

struct hy_gguf {
    char *path;
    const uint8_t *base;
    size_t size;
    void *map;              /* non-NULL when we own a mapping of map_size bytes */
    size_t map_size;        /* `size` for the file's mapping, more for huge pages
                               (base is then map rounded up to a huge page) */
    bool huge;              /* map is anonymous memory on huge pages (HY_GGUF_HUGE_PAGES) */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_off;      /* start of the data section in the file */
    int64_t n_kv;
    int64_t n_tensors;
    hy_gguf_kv_t *kv;       /* [n_kv] in file order */
    hy_gguf_tensor_t *tensors; /* [n_tensors] in file order */
    uint64_t *tensor_at;    /* [n_tensors] file offset of each tensor info */
    int64_t *kv_sorted;     /* [n_kv] kv indices ordered by key bytes */
    int64_t *tensor_sorted; /* [n_tensors] tensor indices ordered by name */
    char *name_pool;        /* NUL-terminated tensor names */
};

/* The cursor: a position in the file plus what is being parsed, so that
 * every error can say where it happened without each caller spelling it. */
typedef struct {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    const char *file;
    char ctx[384];          /* "header", "key 'x' (kv at byte N)", ... */
    char *err;
} hy_gguf_rd_t;

static const char *const hy_gguf_type_names[HY_GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
    "string", "array", "u64", "i64", "f64",
};

/* Bytes per element of the fixed-size types; 0 for string and array. */
static const uint8_t hy_gguf_type_size[HY_GGUF_TYPE_COUNT] = {
    1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8,
};

static const char *hy_gguf_type_name(uint32_t t)
{
    return t < HY_GGUF_TYPE_COUNT ? hy_gguf_type_names[t] : "invalid";
}

/* ---- little-endian loads (portable, alignment-free) -------------------- */

static uint16_t hy_gguf_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static uint32_t hy_gguf_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t hy_gguf_le64(const uint8_t *p)
{
    return (uint64_t)hy_gguf_le32(p) | (uint64_t)hy_gguf_le32(p + 4) << 32;
}

/* Writes a file-provided name for an error message: printable ASCII kept,
 * the rest escaped, long names cut, so a hostile name cannot garble the
 * one-line message. */
static void hy_gguf_quote(char *dst, size_t cap, const char *p, uint64_t len)
{
    size_t o = 0;
    uint64_t i;

    for (i = 0; i < len && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)p[i];
        if (i >= 64) {
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
            dst[o++] = (char)c;
        else
            o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
    }
    dst[o] = '\0';
}

static int hy_gguf_fail(hy_gguf_rd_t *rd, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int hy_gguf_fail(hy_gguf_rd_t *rd, int code, const char *fmt, ...)
{
    char msg[HY_ERR_LEN];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return hy_err(rd->err, code, "%s: %s: %s", rd->file, rd->ctx, msg);
}

/* Fails unless n more bytes are available at the cursor. */
static int hy_gguf_need(hy_gguf_rd_t *rd, uint64_t n, const char *field)
{
    if (rd->size - rd->pos < n)
        return hy_gguf_fail(rd, HY_EFORMAT,
                            "%s at byte %" PRIu64 " needs %" PRIu64
                            " bytes but the file ends at byte %" PRIu64 " (truncated)",
                            field, rd->pos, n, rd->size);
    return HY_OK;
}

static int hy_gguf_rd_u32(hy_gguf_rd_t *rd, uint32_t *v, const char *field)
{
    int rc = hy_gguf_need(rd, 4, field);

    if (rc == HY_OK) {
        *v = hy_gguf_le32(rd->base + rd->pos);
        rd->pos += 4;
    }
    return rc;
}

static int hy_gguf_rd_u64(hy_gguf_rd_t *rd, uint64_t *v, const char *field)
{
    int rc = hy_gguf_need(rd, 8, field);

    if (rc == HY_OK) {
        *v = hy_gguf_le64(rd->base + rd->pos);
        rd->pos += 8;
    }
    return rc;
}

/* A string: u64 length + bytes.  The length is checked against the bytes
 * left, so a 2^62 length is an error, not an allocation or a wild read. */
static int hy_gguf_rd_str(hy_gguf_rd_t *rd, hy_gguf_str_t *s, const char *field)
{
    uint64_t at = rd->pos, len;
    int rc = hy_gguf_rd_u64(rd, &len, field);

    if (rc != HY_OK)
        return rc;
    if (len > rd->size - rd->pos)
        return hy_gguf_fail(rd, HY_EFORMAT,
                            "%s at byte %" PRIu64 ": string length %" PRIu64
                            " runs past end of file (size %" PRIu64 ")",
                            field, at, len, rd->size);
    s->ptr = (const char *)rd->base + rd->pos;
    s->len = len;
    rd->pos += len;
    return HY_OK;
}

/* ---- parsing ----------------------------------------------------------- */

static int hy_gguf_parse_header(hy_gguf_rd_t *rd, hy_gguf_t *g)
{
    uint64_t n_tensors, n_kv, left;
    int rc;

    snprintf(rd->ctx, sizeof rd->ctx, "header");
    if ((rc = hy_gguf_need(rd, 4, "magic")) != HY_OK)
        return rc;
    if (memcmp(rd->base, "GGUF", 4) != 0) {
        char q[40];
        hy_gguf_quote(q, sizeof q, (const char *)rd->base, 4);
        return hy_gguf_fail(rd, HY_EFORMAT,
                            "magic at byte 0 is '%s', expected 'GGUF' (not a GGUF file)", q);
    }
    rd->pos = 4;
    if ((rc = hy_gguf_rd_u32(rd, &g->version, "version")) != HY_OK)
        return rc;
    if (g->version == 1)
        return hy_gguf_fail(rd, HY_EUNSUPPORTED,
                            "version at byte 4: GGUF v1 is not supported "
                            "(re-convert the model with a current llama.cpp)");
    if (g->version != 0 && (g->version & 0xffffu) == 0)
        return hy_gguf_fail(rd, HY_EUNSUPPORTED,
                            "version at byte 4 is 0x%08" PRIx32 ": the file looks "
                            "big-endian; only little-endian GGUF is supported",
                            g->version);
    if (g->version != 2 && g->version != 3)
        return hy_gguf_fail(rd, HY_EUNSUPPORTED,
                            "version at byte 4 is %" PRIu32 ": only GGUF v2 and v3 are supported",
                            g->version);
    if ((rc = hy_gguf_rd_u64(rd, &n_tensors, "n_tensors")) != HY_OK ||
        (rc = hy_gguf_rd_u64(rd, &n_kv, "n_kv")) != HY_OK)
        return rc;
    /* Bound both counts by what the rest of the file could hold before any
     * array is sized by them. */
    left = rd->size - rd->pos;
    if (n_tensors > left / HY_GGUF_MIN_TINFO_BYTES)
        return hy_gguf_fail(rd, HY_EFORMAT,
                            "n_tensors at byte 8 is %" PRId64 ": the %" PRIu64
                            " bytes after the header cannot hold that many tensor infos",
                            (int64_t)n_tensors, left);
    left -= n_tensors * HY_GGUF_MIN_TINFO_BYTES;
    if (n_kv > left / HY_GGUF_MIN_KV_BYTES)
        return hy_gguf_fail(rd, HY_EFORMAT,
                            "n_kv at byte 16 is %" PRId64 ": the %" PRIu64
                            " bytes after the header cannot hold that many kv pairs"
                            " besides %" PRIu64 " tensor infos",
                            (int64_t)n_kv, rd->size - rd->pos, n_tensors);
    g->n_tensors = (int64_t)n_tensors;
    g->n_kv = (int64_t)n_kv;
    return HY_OK;
}

/* Reads one value of a non-array type at the cursor into kv. */
static int hy_gguf_parse_scalar(hy_gguf_rd_t *rd, hy_gguf_kv_t *kv, uint32_t type)
{
    hy_gguf_str_t s;
    int rc;

    kv->val = rd->base + rd->pos;
    if (type == HY_GGUF_STRING)
        return hy_gguf_rd_str(rd, &s, "string value");
    if ((rc = hy_gguf_need(rd, hy_gguf_type_size[type], "value")) != HY_OK)
        return rc;
    rd->pos += hy_gguf_type_size[type];
    return HY_OK;
}

static int hy_gguf_parse_array(hy_gguf_rd_t *rd, hy_gguf_kv_t *kv)
{
    uint64_t at = rd->pos, count, i;
    uint32_t elem;
    uint8_t esize;
    hy_gguf_str_t s;
    int rc;

    if ((rc = hy_gguf_rd_u32(rd, &elem, "array element type")) != HY_OK)
        return rc;
    if (elem >= HY_GGUF_TYPE_COUNT)
        return hy_gguf_fail(rd, HY_EFORMAT,
                            "array element type at byte %" PRIu64 " is %" PRIu32
                            ", not a GGUF type (0..12)", at, elem);
    if (elem == HY_GGUF_ARRAY)
        return hy_gguf_fail(rd, HY_EUNSUPPORTED,
                            "array element type at byte %" PRIu64
                            " is array: arrays of arrays are not supported", at);
    at = rd->pos;
    if ((rc = hy_gguf_rd_u64(rd, &count, "array count")) != HY_OK)
        return rc;
    kv->elem = (hy_gguf_type_t)elem;
    kv->count = count;
    kv->val = rd->base + rd->pos;
    esize = hy_gguf_type_size[elem];
    if (elem != HY_GGUF_STRING) {
        if (count > (rd->size - rd->pos) / esize)
            return hy_gguf_fail(rd, HY_EFORMAT,
                                "array count at byte %" PRIu64 " is %" PRIu64
                                ": %" PRIu64 " %s elements run past end of file (size %" PRIu64 ")",
                                at, count, count, hy_gguf_type_name(elem), rd->size);
        rd->pos += count * esize;
        return HY_OK;
    }
    /* Each string element needs at least its 8-byte length, so this bounds
     * the offset index by the file size before it is allocated. */
    if (count > (rd->size - rd->pos) / 8)
        return hy_gguf_fail(rd, HY_EFORMAT,
                            "array count at byte %" PRIu64 " is %" PRIu64
                            ": that many strings cannot fit before end of file (size %" PRIu64 ")",
                            at, count, rd->size);
    kv->str_at = malloc((count ? count : 1) * sizeof *kv->str_at);
    if (kv->str_at == NULL)
        return hy_gguf_fail(rd, HY_ENOMEM, "no memory for a %" PRIu64 "-string index", count);
    for (i = 0; i < count; i++) {
        kv->str_at[i] = rd->pos;
        if ((rc = hy_gguf_rd_str(rd, &s, "string array element")) != HY_OK)
            return rc;
    }
    return HY_OK;
}

/* Orders (ptr,len) byte strings: memcmp on the common prefix, then length. */
static int hy_gguf_cmp_bytes(const char *a, uint64_t alen, const char *b, uint64_t blen)
{
    int c = memcmp(a, b, (size_t)HY_MIN(alen, blen));

    if (c != 0)
        return c;
    return alen < blen ? -1 : alen > blen;
}

/* qsort has no context argument, so the handle being sorted is passed in
 * this thread-local; files can still be opened from several threads. */
static _Thread_local const hy_gguf_t *hy_gguf_sorting;

static int hy_gguf_cmp_kv(const void *pa, const void *pb)
{
    const hy_gguf_kv_t *a = &hy_gguf_sorting->kv[*(const int64_t *)pa];
    const hy_gguf_kv_t *b = &hy_gguf_sorting->kv[*(const int64_t *)pb];
    int c = hy_gguf_cmp_bytes(a->key.ptr, a->key.len, b->key.ptr, b->key.len);

    /* Ties broken by file order so the first occurrence is reported first. */
    return c != 0 ? c : (a->at > b->at) - (a->at < b->at);
}

static int hy_gguf_cmp_tensor_name(const void *pa, const void *pb)
{
    int64_t ia = *(const int64_t *)pa, ib = *(const int64_t *)pb;
    int c = strcmp(hy_gguf_sorting->tensors[ia].name, hy_gguf_sorting->tensors[ib].name);

    return c != 0 ? c : (ia > ib) - (ia < ib);
}

static int hy_gguf_cmp_tensor_offset(const void *pa, const void *pb)
{
    const hy_gguf_tensor_t *a = &hy_gguf_sorting->tensors[*(const int64_t *)pa];
    const hy_gguf_tensor_t *b = &hy_gguf_sorting->tensors[*(const int64_t *)pb];

    return (a->offset > b->offset) - (a->offset < b->offset);
}

static int hy_gguf_parse_kvs(hy_gguf_rd_t *rd, hy_gguf_t *g)
{
    char q[300];
    int64_t i;
    int rc;

    g->kv = calloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof *g->kv);
    g->kv_sorted = malloc((g->n_kv ? (size_t)g->n_kv : 1) * sizeof *g->kv_sorted);
    if (g->kv == NULL || g->kv_sorted == NULL)
        return hy_gguf_fail(rd, HY_ENOMEM, "no memory for %" PRId64 " kv pairs", g->n_kv);
    for (i = 0; i < g->n_kv; i++) {
        hy_gguf_kv_t *kv = &g->kv[i];
        uint64_t type_at;
        uint32_t type;

        kv->at = rd->pos;
        snprintf(rd->ctx, sizeof rd->ctx, "kv %" PRId64 " (at byte %" PRIu64 ")", i, kv->at);
        if ((rc = hy_gguf_rd_str(rd, &kv->key, "key")) != HY_OK)
            return rc;
        hy_gguf_quote(q, sizeof q, kv->key.ptr, kv->key.len);
        snprintf(rd->ctx, sizeof rd->ctx, "key '%s' (kv at byte %" PRIu64 ")", q, kv->at);
        type_at = rd->pos;
        if ((rc = hy_gguf_rd_u32(rd, &type, "value type")) != HY_OK)
            return rc;
        if (type >= HY_GGUF_TYPE_COUNT)
            return hy_gguf_fail(rd, HY_EFORMAT,
                                "value type at byte %" PRIu64 " is %" PRIu32
                                ", not a GGUF type (0..12)", type_at, type);
        kv->type = (hy_gguf_type_t)type;
        rc = type == HY_GGUF_ARRAY ? hy_gguf_parse_array(rd, kv)
                                   : hy_gguf_parse_scalar(rd, kv, type);
        if (rc != HY_OK)
            return rc;
        g->kv_sorted[i] = i;
    }
    hy_gguf_sorting = g;
    qsort(g->kv_sorted, (size_t)g->n_kv, sizeof *g->kv_sorted, hy_gguf_cmp_kv);
    for (i = 1; i < g->n_kv; i++) {
        const hy_gguf_kv_t *a = &g->kv[g->kv_sorted[i - 1]], *b = &g->kv[g->kv_sorted[i]];
        if (hy_gguf_cmp_bytes(a->key.ptr, a->key.len, b->key.ptr, b->key.len) == 0) {
            hy_gguf_quote(q, sizeof q, b->key.ptr, b->key.len);
            snprintf(rd->ctx, sizeof rd->ctx, "key '%s' (kv at byte %" PRIu64 ")", q, b->at);
            return hy_gguf_fail(rd, HY_EFORMAT,
                                "duplicate key (first defined by the kv at byte %" PRIu64 ")",
                                a->at);
        }
    }
    return HY_OK;
}

static int hy_gguf_parse_alignment(hy_gguf_rd_t *rd, hy_gguf_t *g)
{
    int64_t k = hy_gguf_find_key(g, "general.alignment");
    const hy_gguf_kv_t *kv;
    uint32_t a;

    g->alignment = HY_GGUF_DEFAULT_ALIGNMENT;
    if (k < 0)
        return HY_OK;
    kv = &g->kv[k];
    snprintf(rd->ctx, sizeof rd->ctx, "key 'general.alignment' (kv at byte %" PRIu64 ")", kv->at);
    if (kv->type != HY_GGUF_U32)
        return hy_gguf_fail(rd, HY_EFORMAT, "type is %s, must be u32",
                            hy_gguf_type_name(kv->type));
    a = hy_gguf_le32(kv->val);
    if (a == 0 || (a & (a - 1)) != 0)
        return hy_gguf_fail(rd, HY_EFORMAT,
                            "value %" PRIu32 " at byte %" PRIu64
                            " must be a nonzero power of two", a,
                            (uint64_t)(kv->val - rd->base));
    g->alignment = a;
    return HY_OK;
}

/* One tensor info: name, dims, type, offset; computes nbytes with every
 * product overflow-checked.  The name still points into the mapping here. */
static int hy_gguf_parse_tensor_info(hy_gguf_rd_t *rd, hy_gguf_t *g, int64_t i,
                                     uint64_t *name_len)
{
    hy_gguf_tensor_t *t = &g->tensors[i];
    const hy_dtype_info_t *dt;
    hy_gguf_str_t name;
    uint64_t at = rd->pos, field_at, nelem, rows, row_bytes, u;
    uint32_t d, type;
    char q[300];
    int rc;

    g->tensor_at[i] = at;
    snprintf(rd->ctx, sizeof rd->ctx, "tensor %" PRId64 " (info at byte %" PRIu64 ")", i, at);
    if ((rc = hy_gguf_rd_str(rd, &name, "name")) != HY_OK)
        return rc;
    if (name.len == 0)
        return hy_gguf_fail(rd, HY_EFORMAT, "name at byte %" PRIu64 " is empty", at);
    if (memchr(name.ptr, '\0', (size_t)name.len) != NULL)
        return hy_gguf_fail(rd, HY_EFORMAT, "name at byte %" PRIu64 " contains a NUL byte", at);
    hy_gguf_quote(q, sizeof q, name.ptr, name.len);
    snprintf(rd->ctx, sizeof rd->ctx, "tensor '%s' (info at byte %" PRIu64 ")", q, at);
    t->name = name.ptr;
    *name_len = name.len;

    field_at = rd->pos;
    if ((rc = hy_gguf_rd_u32(rd, &t->n_dims, "n_dims")) != HY_OK)
        return rc;
    if (t->n_dims < 1 || t->n_dims > 4)
        return hy_gguf_fail(rd, HY_EFORMAT, "n_dims at byte %" PRIu64 " is %" PRIu32
                            ", must be 1..4", field_at, t->n_dims);
    nelem = 1;
    for (d = 0; d < 4; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims)
            continue;
        field_at = rd->pos;
        if ((rc = hy_gguf_rd_u64(rd, &u, "dimension")) != HY_OK)
            return rc;
        if (u == 0 || u > (uint64_t)INT64_MAX)
            return hy_gguf_fail(rd, HY_EFORMAT, "ne[%" PRIu32 "] at byte %" PRIu64
                                " is %" PRId64 ", must be positive", d, field_at, (int64_t)u);
        if (hy_mul_overflow_u64(nelem, u, &nelem) || nelem > (uint64_t)INT64_MAX)
            return hy_gguf_fail(rd, HY_EFORMAT, "ne[%" PRIu32 "] at byte %" PRIu64
                                " = %" PRIu64 ": element count overflows int64", d, field_at, u);
        t->ne[d] = (int64_t)u;
    }

    field_at = rd->pos;
    if ((rc = hy_gguf_rd_u32(rd, &type, "type")) != HY_OK)
        return rc;
    dt = hy_dtype_info(type);
    if (dt == NULL)
        return hy_gguf_fail(rd, HY_EUNSUPPORTED, "type id %" PRIu32 " at byte %" PRIu64
                            " is not a known ggml type", type, field_at);
    t->type = type;
    if (t->ne[0] % dt->block != 0)
        return hy_gguf_fail(rd, HY_EFORMAT, "ne[0] = %" PRId64 " is not a multiple of the %s"
                            " block size %" PRIu32, t->ne[0], dt->name, dt->block);
    /* hy_dtype_row_bytes cannot report overflow, so bound its product first. */
    if ((uint64_t)t->ne[0] / dt->block > SIZE_MAX / dt->block_bytes)
        return hy_gguf_fail(rd, HY_EFORMAT, "ne[0] = %" PRId64 ": row size overflows", t->ne[0]);
    row_bytes = hy_dtype_row_bytes(type, t->ne[0]);
    rows = nelem / (uint64_t)t->ne[0];
    if (hy_mul_overflow_u64(row_bytes, rows, &t->nbytes))
        return hy_gguf_fail(rd, HY_EFORMAT, "data size %" PRIu64 " x %" PRIu64
                            " rows overflows", row_bytes, rows);

    field_at = rd->pos;
    if ((rc = hy_gguf_rd_u64(rd, &t->offset, "data offset")) != HY_OK)
        return rc;
    if (t->offset % g->alignment != 0)
        return hy_gguf_fail(rd, HY_EFORMAT, "data offset %" PRIu64 " at byte %" PRIu64
                            " is not a multiple of the alignment %" PRIu32,
                            t->offset, field_at, g->alignment);
    return HY_OK;
}

/* Checks each tensor's data lies inside the file and that no two overlap
 * (after sorting by offset only neighbours can). */
static int hy_gguf_check_data(hy_gguf_rd_t *rd, hy_gguf_t *g, int64_t *order)
{
    uint64_t beg, end;
    int64_t i;
    char q[300];

    for (i = 0; i < g->n_tensors; i++) {
        hy_gguf_tensor_t *t = &g->tensors[i];

        order[i] = i;
        hy_gguf_quote(q, sizeof q, t->name, strlen(t->name));
        snprintf(rd->ctx, sizeof rd->ctx, "tensor '%s' (info at byte %" PRIu64 ")",
                 q, g->tensor_at[i]);
        if (hy_add_overflow_u64(g->data_off, t->offset, &beg) ||
            hy_add_overflow_u64(beg, t->nbytes, &end))
            return hy_gguf_fail(rd, HY_EFORMAT,
                                "data offset %" PRIu64 " + %" PRIu64 " bytes runs past end of"
                                " file (size %" PRIu64 ")", t->offset, t->nbytes, rd->size);
        if (end > rd->size)
            return hy_gguf_fail(rd, HY_EFORMAT,
                                "data [%" PRIu64 ", %" PRIu64 ") runs past end of file"
                                " (size %" PRIu64 "; data section starts at byte %" PRIu64 ")",
                                beg, end, rd->size, g->data_off);
        t->data = rd->base + beg;
    }
    hy_gguf_sorting = g;
    qsort(order, (size_t)g->n_tensors, sizeof *order, hy_gguf_cmp_tensor_offset);
    for (i = 1; i < g->n_tensors; i++) {
        const hy_gguf_tensor_t *a = &g->tensors[order[i - 1]], *b = &g->tensors[order[i]];
        if (a->offset + a->nbytes > b->offset) {
            char qa[300];
            hy_gguf_quote(q, sizeof q, b->name, strlen(b->name));
            hy_gguf_quote(qa, sizeof qa, a->name, strlen(a->name));
            snprintf(rd->ctx, sizeof rd->ctx, "tensor '%s' (info at byte %" PRIu64 ")",
                     q, g->tensor_at[order[i]]);
            return hy_gguf_fail(rd, HY_EFORMAT,
                                "data [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%s' data [%"
                                PRIu64 ", %" PRIu64 ") (offsets from byte %" PRIu64 ")",
                                b->offset, b->offset + b->nbytes, qa, a->offset,
                                a->offset + a->nbytes, g->data_off);
        }
    }
    return HY_OK;
}

static int hy_gguf_parse_tensors(hy_gguf_rd_t *rd, hy_gguf_t *g)
{
    size_t n = g->n_tensors ? (size_t)g->n_tensors : 1;
    uint64_t *lens = NULL, pool_len = 0, off;
    int64_t i;
    int rc = HY_OK;

    g->tensors = calloc(n, sizeof *g->tensors);
    g->tensor_at = calloc(n, sizeof *g->tensor_at);
    g->tensor_sorted = malloc(n * sizeof *g->tensor_sorted);
    lens = malloc(n * sizeof *lens);
    if (g->tensors == NULL || g->tensor_at == NULL || g->tensor_sorted == NULL || lens == NULL) {
        rc = hy_gguf_fail(rd, HY_ENOMEM, "no memory for %" PRId64 " tensor infos", g->n_tensors);
        goto out;
    }
    for (i = 0; i < g->n_tensors; i++) {
        if ((rc = hy_gguf_parse_tensor_info(rd, g, i, &lens[i])) != HY_OK)
            goto out;
        pool_len += lens[i] + 1; /* names lie in the file, so this cannot overflow */
    }
    /* The data section starts at the next multiple of the alignment.  A
     * file without tensors may end before that padding. */
    g->data_off = rd->pos + (g->alignment - rd->pos % g->alignment) % g->alignment;

    g->name_pool = malloc(pool_len ? pool_len : 1);
    if (g->name_pool == NULL) {
        rc = hy_gguf_fail(rd, HY_ENOMEM, "no memory for %" PRIu64 " bytes of tensor names",
                          pool_len);
        goto out;
    }
    for (i = 0, off = 0; i < g->n_tensors; i++) {
        memcpy(g->name_pool + off, g->tensors[i].name, (size_t)lens[i]);
        g->name_pool[off + lens[i]] = '\0';
        g->tensors[i].name = g->name_pool + off;
        off += lens[i] + 1;
    }
    /* lens is reused as the by-offset order for the overlap check. */
    if ((rc = hy_gguf_check_data(rd, g, (int64_t *)lens)) != HY_OK)
        goto out;

    for (i = 0; i < g->n_tensors; i++)
        g->tensor_sorted[i] = i;
    hy_gguf_sorting = g;
    qsort(g->tensor_sorted, (size_t)g->n_tensors, sizeof *g->tensor_sorted,
          hy_gguf_cmp_tensor_name);
    for (i = 1; i < g->n_tensors; i++) {
        int64_t a = g->tensor_sorted[i - 1], b = g->tensor_sorted[i];
        if (strcmp(g->tensors[a].name, g->tensors[b].name) == 0) {
            char q[300];
            hy_gguf_quote(q, sizeof q, g->tensors[b].name, strlen(g->tensors[b].name));
            snprintf(rd->ctx, sizeof rd->ctx, "tensor '%s' (info at byte %" PRIu64 ")",
                     q, g->tensor_at[b]);
            rc = hy_gguf_fail(rd, HY_EFORMAT,
                              "duplicate tensor name (first defined by the info at byte %" PRIu64 ")",
                              g->tensor_at[a]);
            goto out;
        }
    }
out:
    free(lens);
    return rc;
}

static int hy_gguf_parse(hy_gguf_t *g, char *err)
{
    hy_gguf_rd_t rd = {
        .base = g->base, .size = g->size, .pos = 0, .file = g->path, .err = err,
    };
    int rc;

    if ((rc = hy_gguf_parse_header(&rd, g)) != HY_OK ||
        (rc = hy_gguf_parse_kvs(&rd, g)) != HY_OK ||
        (rc = hy_gguf_parse_alignment(&rd, g)) != HY_OK ||
        (rc = hy_gguf_parse_tensors(&rd, g)) != HY_OK)
        return rc;
    return HY_OK;
}

/* ---- open / close ------------------------------------------------------ */

static int hy_gguf_new(hy_gguf_t **out, const char *name, char *err)
{
    hy_gguf_t *g = calloc(1, sizeof *g);

    if (g == NULL || (g->path = strdup(name)) == NULL) {
        free(g);
        return hy_err(err, HY_ENOMEM, "%s: out of memory", name);
    }
    *out = g;
    return HY_OK;
}

int hy_gguf_open_buffer(hy_gguf_t **out, const void *buf, size_t size,
                        const char *name, char *err)
{
    hy_gguf_t *g = NULL;
    int rc;

    *out = NULL;
    if (name == NULL)
        name = "<buffer>";
    if (buf == NULL && size != 0)
        return hy_err(err, HY_EINVAL, "%s: NULL buffer of %zu bytes", name, size);
    if ((rc = hy_gguf_new(&g, name, err)) != HY_OK)
        return rc;
    g->base = buf != NULL ? buf : (const void *)"";
    g->size = size;
    if ((rc = hy_gguf_parse(g, err)) != HY_OK) {
        hy_gguf_close(g);
        return rc;
    }
    *out = g;
    return HY_OK;
}

/* The transparent huge page size: 2 MB on x86-64; the kernel's own figure
 * where it gives one. */
static size_t hy_gguf_huge_page(void)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", "r");
    unsigned long long v = 0;

    if (f != NULL) {
        if (fscanf(f, "%llu", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v >= 4096 && v <= (1ull << 30) && (v & (v - 1)) == 0 ? (size_t)v : (size_t)2 << 20;
}

/* The whole of fd (size bytes) read into anonymous memory aligned to and
 * rounded up to huge pages, and advised onto them: the weights then stream
 * through one TLB entry per 2 MB instead of one per 4 KB page of the file's
 * mapping, and the hardware prefetchers are not stopped at every 4 KB page
 * boundary (docs/PERFORMANCE.md section 24: Gemma 3's decode ~1.2x).  On
 * success *out is the aligned data, and *region / *map_size the mapping to
 * munmap (one huge page larger, to align; its untouched ends cost no
 * memory, and one mapping stays one munmap). */
static int hy_gguf_read_huge(int fd, const char *path, size_t size, void **out,
                             void **region, size_t *map_size, char *err)
{
    const size_t hp = hy_gguf_huge_page();
    size_t len, done = 0;
    char *raw, *p;

    if (size > SIZE_MAX - 2 * hp)
        return hy_err(err, HY_EIO, "%s: file too large to read into memory", path);
    len = (size + hp - 1) / hp * hp;
    raw = mmap(NULL, len + hp, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return hy_err(err, HY_ENOMEM, "%s: cannot allocate %zu bytes to read the weights into "
                      "huge pages: %s ([engine] weights_memory = mmap maps the file instead)",
                      path, len, strerror(errno));
    p = (char *)(((uintptr_t)raw + hp - 1) & ~(uintptr_t)(hp - 1));
    /* no huge pages (THP off in the kernel): the read still works, and
     * hy_gguf_huge_bytes says how much of it the kernel placed on them */
    (void)madvise(p, len, MADV_HUGEPAGE);
    while (done < size) {
        ssize_t n = pread(fd, p + done, HY_MIN(size - done, (size_t)1 << 30), (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int rc = n < 0 ? hy_err(err, HY_EIO, "%s: read failed at byte %zu of %zu: %s", path,
                                    done, size, strerror(errno))
                           : hy_err(err, HY_EIO, "%s: file ended at byte %zu while reading %zu "
                                    "(changed while loading)", path, done, size);
            munmap(raw, len + hp);
            return rc;
        }
        done += (size_t)n;
    }
    *out = p;
    *region = raw;
    *map_size = len + hp;
    return HY_OK;
}

int hy_gguf_open(hy_gguf_t **out, const char *path, char *err)
{
    return hy_gguf_open_ex(out, path, 0, err);
}

int hy_gguf_open_ex(hy_gguf_t **out, const char *path, unsigned flags, char *err)
{
    hy_gguf_t *g = NULL;
    struct stat st;
    void *map = NULL, *data = NULL;
    size_t map_size = 0;
    int fd, rc;

    *out = NULL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return hy_err(err, HY_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = hy_err(err, HY_EIO, "%s: cannot stat: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = hy_err(err, HY_EIO, "%s: not a regular file", path);
        goto out;
    }
    if (st.st_size == 0) {
        rc = hy_err(err, HY_EFORMAT, "%s: header: magic at byte 0 needs 4 bytes but the file"
                    " is empty (truncated)", path);
        goto out;
    }
    if ((uintmax_t)st.st_size > (uintmax_t)SIZE_MAX) {
        rc = hy_err(err, HY_EIO, "%s: file too large to map", path);
        goto out;
    }
    if (flags & HY_GGUF_HUGE_PAGES) {
        if ((rc = hy_gguf_read_huge(fd, path, (size_t)st.st_size, &data, &map, &map_size,
                                    err)) != HY_OK)
            goto out;
    } else {
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            rc = hy_err(err, HY_EIO, "%s: cannot mmap %lld bytes: %s", path,
                        (long long)st.st_size, strerror(errno));
            goto out;
        }
        map_size = (size_t)st.st_size;
        data = map;
    }
    if ((rc = hy_gguf_new(&g, path, err)) != HY_OK) {
        munmap(map, map_size);
        goto out;
    }
    g->map = map;
    g->map_size = map_size;
    g->huge = (flags & HY_GGUF_HUGE_PAGES) != 0;
    g->base = data;
    g->size = (size_t)st.st_size;
    if ((rc = hy_gguf_parse(g, err)) != HY_OK) {
        hy_gguf_close(g);
        goto out;
    }
    *out = g;
out:
    close(fd);
    return rc;
}

void hy_gguf_close(hy_gguf_t *g)
{
    int64_t i;

    if (g == NULL)
        return;
    if (g->kv != NULL)
        for (i = 0; i < g->n_kv; i++)
            free(g->kv[i].str_at);
    free(g->kv);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->tensor_at);
    free(g->tensor_sorted);
    free(g->name_pool);
    if (g->map != NULL)
        munmap(g->map, g->map_size);
    free(g->path);
    free(g);
}

uint32_t hy_gguf_version(const hy_gguf_t *g) { return g->version; }
const char *hy_gguf_path(const hy_gguf_t *g) { return g->path; }
uint32_t hy_gguf_alignment(const hy_gguf_t *g) { return g->alignment; }
size_t hy_gguf_file_size(const hy_gguf_t *g) { return g->size; }

size_t hy_gguf_huge_bytes(const hy_gguf_t *g)
{
    return g->huge ? hy_huge_bytes(g->map, g->map_size) : 0;
}

/* ---- metadata ---------------------------------------------------------- */

int64_t hy_gguf_n_kv(const hy_gguf_t *g) { return g->n_kv; }

int64_t hy_gguf_find_key(const hy_gguf_t *g, const char *key)
{
    int64_t lo = 0, hi = g->n_kv;
    uint64_t len = strlen(key);

    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const hy_gguf_kv_t *kv = &g->kv[g->kv_sorted[mid]];
        int c = hy_gguf_cmp_bytes(kv->key.ptr, kv->key.len, key, len);
        if (c == 0)
            return g->kv_sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

hy_gguf_str_t hy_gguf_kv_key(const hy_gguf_t *g, int64_t i)
{
    hy_gguf_str_t none = {NULL, 0};

    return i >= 0 && i < g->n_kv ? g->kv[i].key : none;
}

hy_gguf_type_t hy_gguf_kv_type(const hy_gguf_t *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? g->kv[i].type : HY_GGUF_TYPE_COUNT;
}

/* Loads one fixed-size value of type t as a signed/unsigned/float triple;
 * returns 0 for integers, 1 for floats, -1 for string/array. */
typedef struct {
    bool neg;       /* integer value below zero (then i holds it) */
    uint64_t u;     /* integer value when !neg */
    int64_t i;
    double f;
} hy_gguf_num_t;

static int hy_gguf_load_num(const uint8_t *p, uint32_t t, hy_gguf_num_t *n)
{
    uint32_t u32;
    uint64_t u64;
    float f;

    memset(n, 0, sizeof *n);
    switch (t) {
    case HY_GGUF_U8: case HY_GGUF_BOOL: n->u = p[0]; break;
    case HY_GGUF_I8: n->i = (int8_t)p[0]; break;
    case HY_GGUF_U16: n->u = hy_gguf_le16(p); break;
    case HY_GGUF_I16: n->i = (int16_t)hy_gguf_le16(p); break;
    case HY_GGUF_U32: n->u = hy_gguf_le32(p); break;
    case HY_GGUF_I32: n->i = (int32_t)hy_gguf_le32(p); break;
    case HY_GGUF_U64: n->u = hy_gguf_le64(p); break;
    case HY_GGUF_I64: u64 = hy_gguf_le64(p); memcpy(&n->i, &u64, 8); break;
    case HY_GGUF_F32:
        u32 = hy_gguf_le32(p);
        memcpy(&f, &u32, 4);
        n->f = f;
        return 1;
    case HY_GGUF_F64:
        u64 = hy_gguf_le64(p);
        memcpy(&n->f, &u64, 8);
        return 1;
    default:
        return -1;
    }
    if (t == HY_GGUF_I8 || t == HY_GGUF_I16 || t == HY_GGUF_I32 || t == HY_GGUF_I64) {
        n->neg = n->i < 0;
        if (!n->neg)
            n->u = (uint64_t)n->i;
    } else {
        n->i = n->u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)n->u;
    }
    n->f = n->neg ? (double)n->i : (double)n->u;
    return 0;
}

static const hy_gguf_kv_t *hy_gguf_lookup(const hy_gguf_t *g, const char *key, char *err,
                                          int *rc)
{
    int64_t k = hy_gguf_find_key(g, key);

    if (k < 0) {
        *rc = hy_err(err, HY_ENOENT, "%s: key '%s' not found", g->path, key);
        return NULL;
    }
    *rc = HY_OK;
    return &g->kv[k];
}

static int hy_gguf_type_error(const hy_gguf_t *g, const hy_gguf_kv_t *kv, const char *want,
                              char *err)
{
    char q[300];

    hy_gguf_quote(q, sizeof q, kv->key.ptr, kv->key.len);
    if (kv->type == HY_GGUF_ARRAY)
        return hy_err(err, HY_EFORMAT, "%s: key '%s' (kv at byte %" PRIu64 ") has type "
                      "array of %s, expected %s", g->path, q, kv->at,
                      hy_gguf_type_name(kv->elem), want);
    return hy_err(err, HY_EFORMAT, "%s: key '%s' (kv at byte %" PRIu64 ") has type %s, "
                  "expected %s", g->path, q, kv->at, hy_gguf_type_name(kv->type), want);
}

static int hy_gguf_range_error(const hy_gguf_t *g, const hy_gguf_kv_t *kv,
                               const hy_gguf_num_t *n, const char *want, char *err)
{
    char q[300];

    hy_gguf_quote(q, sizeof q, kv->key.ptr, kv->key.len);
    if (n->neg)
        return hy_err(err, HY_EFORMAT, "%s: key '%s' (kv at byte %" PRIu64 ") has type %s "
                      "value %" PRId64 ", which does not fit in %s", g->path, q, kv->at,
                      hy_gguf_type_name(kv->type), n->i, want);
    return hy_err(err, HY_EFORMAT, "%s: key '%s' (kv at byte %" PRIu64 ") has type %s "
                  "value %" PRIu64 ", which does not fit in %s", g->path, q, kv->at,
                  hy_gguf_type_name(kv->type), n->u, want);
}

/* An integer (not bool, not float) that fits in u32. */
static int hy_gguf_as_u32(const hy_gguf_t *g, const hy_gguf_kv_t *kv, const uint8_t *p,
                          uint32_t t, uint32_t *out, char *err)
{
    hy_gguf_num_t n;

    if (t == HY_GGUF_BOOL || hy_gguf_load_num(p, t, &n) != 0)
        return hy_gguf_type_error(g, kv, "an integer type (u32)", err);
    if (n.neg || n.u > UINT32_MAX)
        return hy_gguf_range_error(g, kv, &n, "u32", err);
    *out = (uint32_t)n.u;
    return HY_OK;
}

int hy_gguf_get_u32(const hy_gguf_t *g, const char *key, uint32_t *out, char *err)
{
    int rc;
    const hy_gguf_kv_t *kv = hy_gguf_lookup(g, key, err, &rc);

    if (kv == NULL)
        return rc;
    if (kv->type == HY_GGUF_ARRAY)
        return hy_gguf_type_error(g, kv, "an integer type (u32)", err);
    return hy_gguf_as_u32(g, kv, kv->val, kv->type, out, err);
}

int hy_gguf_get_i64(const hy_gguf_t *g, const char *key, int64_t *out, char *err)
{
    hy_gguf_num_t n;
    int rc;
    const hy_gguf_kv_t *kv = hy_gguf_lookup(g, key, err, &rc);

    if (kv == NULL)
        return rc;
    if (kv->type == HY_GGUF_BOOL || kv->type == HY_GGUF_ARRAY ||
        hy_gguf_load_num(kv->val, kv->type, &n) != 0)
        return hy_gguf_type_error(g, kv, "an integer type (i64)", err);
    if (!n.neg && n.u > (uint64_t)INT64_MAX)
        return hy_gguf_range_error(g, kv, &n, "i64", err);
    *out = n.i;
    return HY_OK;
}

int hy_gguf_get_f32(const hy_gguf_t *g, const char *key, float *out, char *err)
{
    hy_gguf_num_t n;
    int rc;
    const hy_gguf_kv_t *kv = hy_gguf_lookup(g, key, err, &rc);

    if (kv == NULL)
        return rc;
    if (kv->type == HY_GGUF_BOOL || kv->type == HY_GGUF_ARRAY ||
        hy_gguf_load_num(kv->val, kv->type, &n) < 0)
        return hy_gguf_type_error(g, kv, "a number (f32)", err);
    /* A finite f64 beyond float range would be undefined behaviour to convert. */
    if (n.f == n.f && (n.f > FLT_MAX || n.f < -FLT_MAX) && n.f - n.f == 0) {
        char q[300];
        hy_gguf_quote(q, sizeof q, kv->key.ptr, kv->key.len);
        return hy_err(err, HY_EFORMAT, "%s: key '%s' (kv at byte %" PRIu64 ") has type %s "
                      "value %g, which does not fit in f32", g->path, q, kv->at,
                      hy_gguf_type_name(kv->type), n.f);
    }
    *out = (float)n.f;
    return HY_OK;
}

int hy_gguf_get_bool(const hy_gguf_t *g, const char *key, bool *out, char *err)
{
    int rc;
    const hy_gguf_kv_t *kv = hy_gguf_lookup(g, key, err, &rc);

    if (kv == NULL)
        return rc;
    if (kv->type != HY_GGUF_BOOL)
        return hy_gguf_type_error(g, kv, "bool", err);
    *out = kv->val[0] != 0;
    return HY_OK;
}

int hy_gguf_get_str(const hy_gguf_t *g, const char *key, hy_gguf_str_t *out, char *err)
{
    int rc;
    const hy_gguf_kv_t *kv = hy_gguf_lookup(g, key, err, &rc);

    if (kv == NULL)
        return rc;
    if (kv->type != HY_GGUF_STRING)
        return hy_gguf_type_error(g, kv, "string", err);
    out->len = hy_gguf_le64(kv->val);
    out->ptr = (const char *)kv->val + 8;
    return HY_OK;
}

int hy_gguf_get_arr(const hy_gguf_t *g, const char *key, hy_gguf_type_t *elem_type,
                    uint64_t *count, const void **data, char *err)
{
    int rc;
    const hy_gguf_kv_t *kv = hy_gguf_lookup(g, key, err, &rc);

    if (kv == NULL)
        return rc;
    if (kv->type != HY_GGUF_ARRAY)
        return hy_gguf_type_error(g, kv, "array", err);
    if (elem_type != NULL)
        *elem_type = kv->elem;
    if (count != NULL)
        *count = kv->count;
    if (data != NULL)
        *data = kv->val;
    return HY_OK;
}

hy_gguf_str_t hy_gguf_arr_str(const hy_gguf_t *g, int64_t kv_index, uint64_t i)
{
    hy_gguf_str_t s = {NULL, 0};
    const hy_gguf_kv_t *kv;

    if (kv_index < 0 || kv_index >= g->n_kv)
        return s;
    kv = &g->kv[kv_index];
    if (kv->type != HY_GGUF_ARRAY || kv->elem != HY_GGUF_STRING || i >= kv->count)
        return s;
    s.len = hy_gguf_le64(g->base + kv->str_at[i]);
    s.ptr = (const char *)g->base + kv->str_at[i] + 8;
    return s;
}

/* Element i of a numeric array, or NULL (with *t untouched) if there is none. */
static const uint8_t *hy_gguf_arr_elem(const hy_gguf_t *g, int64_t kv_index, uint64_t i,
                                       uint32_t *t)
{
    const hy_gguf_kv_t *kv;

    if (kv_index < 0 || kv_index >= g->n_kv)
        return NULL;
    kv = &g->kv[kv_index];
    if (kv->type != HY_GGUF_ARRAY || hy_gguf_type_size[kv->elem] == 0 || i >= kv->count)
        return NULL;
    *t = kv->elem;
    return kv->val + i * hy_gguf_type_size[kv->elem];
}

int64_t hy_gguf_arr_i64(const hy_gguf_t *g, int64_t kv_index, uint64_t i)
{
    uint32_t t = 0;
    const uint8_t *p = hy_gguf_arr_elem(g, kv_index, i, &t);
    hy_gguf_num_t n;
    int kind;

    if (p == NULL)
        return 0;
    kind = hy_gguf_load_num(p, t, &n);
    if (kind == 0)
        return n.i;
    /* Floats: truncate toward zero, saturating (NaN gives 0). */
    if (n.f != n.f)
        return 0;
    if (n.f >= 9223372036854775807.0)
        return INT64_MAX;
    if (n.f <= -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)n.f;
}

double hy_gguf_arr_f64(const hy_gguf_t *g, int64_t kv_index, uint64_t i)
{
    uint32_t t = 0;
    const uint8_t *p = hy_gguf_arr_elem(g, kv_index, i, &t);
    hy_gguf_num_t n;

    if (p == NULL)
        return 0.0;
    hy_gguf_load_num(p, t, &n);
    return n.f;
}

int hy_gguf_get_u32_layers(const hy_gguf_t *g, const char *key, uint32_t *out,
                           uint32_t n, char *err)
{
    const hy_gguf_kv_t *kv;
    uint32_t v, i;
    char q[300];
    int rc;

    if ((kv = hy_gguf_lookup(g, key, err, &rc)) == NULL)
        return rc;
    if (kv->type != HY_GGUF_ARRAY) {
        if ((rc = hy_gguf_as_u32(g, kv, kv->val, kv->type, &v, err)) != HY_OK)
            return rc;
        for (i = 0; i < n; i++)
            out[i] = v;
        return HY_OK;
    }
    hy_gguf_quote(q, sizeof q, kv->key.ptr, kv->key.len);
    if (kv->count != n)
        return hy_err(err, HY_EFORMAT, "%s: key '%s' (kv at byte %" PRIu64 ") is an array of "
                      "%" PRIu64 " values, expected %" PRIu32 " (one per layer)", g->path, q,
                      kv->at, kv->count, n);
    if (hy_gguf_type_size[kv->elem] == 0 || kv->elem == HY_GGUF_BOOL)
        return hy_gguf_type_error(g, kv, "an integer or array of integers (u32)", err);
    for (i = 0; i < n; i++) {
        rc = hy_gguf_as_u32(g, kv, kv->val + (uint64_t)i * hy_gguf_type_size[kv->elem],
                            kv->elem, &out[i], err);
        if (rc != HY_OK) {
            char msg[HY_ERR_LEN];
            snprintf(msg, sizeof msg, "%s", err != NULL ? err : "");
            return hy_err(err, rc, "%s (element %" PRIu32 ")", msg, i);
        }
    }
    return HY_OK;
}

/* ---- tensors ----------------------------------------------------------- */

int64_t hy_gguf_n_tensors(const hy_gguf_t *g) { return g->n_tensors; }

const hy_gguf_tensor_t *hy_gguf_tensor(const hy_gguf_t *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

void *hy_gguf_tensor_rw(hy_gguf_t *g, const hy_gguf_tensor_t *t)
{
    return g->huge ? (void *)(uintptr_t)t->data : NULL;
}

void hy_gguf_set_layout(hy_gguf_t *g, const hy_gguf_tensor_t *t, uint8_t layout)
{
    g->tensors[t - g->tensors].layout = layout;
}

const hy_gguf_tensor_t *hy_gguf_find_tensor(const hy_gguf_t *g, const char *name)
{
    int64_t lo = 0, hi = g->n_tensors;

    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->tensors[g->tensor_sorted[mid]].name, name);
        if (c == 0)
            return &g->tensors[g->tensor_sorted[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
