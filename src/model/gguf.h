/*
 * gguf.h - read-only access to a GGUF v2/v3 file mapped into memory.
 *
 * hy_gguf_open() maps the file and validates every count, length, offset and
 * dimension before anything is used; after it returns HY_OK every accessor
 * below is safe.  Strings in the file are not NUL terminated, so they are
 * handed out as (pointer, length) views into the mapping.  Nothing here
 * allocates memory whose size is taken from the file without first checking
 * that the file really holds that much data.
 */
#ifndef HY_GGUF_H
#define HY_GGUF_H

#include "../common/hy.h"
#include "../common/dtype.h"

typedef enum {
    HY_GGUF_U8 = 0,
    HY_GGUF_I8 = 1,
    HY_GGUF_U16 = 2,
    HY_GGUF_I16 = 3,
    HY_GGUF_U32 = 4,
    HY_GGUF_I32 = 5,
    HY_GGUF_F32 = 6,
    HY_GGUF_BOOL = 7,
    HY_GGUF_STRING = 8,
    HY_GGUF_ARRAY = 9,
    HY_GGUF_U64 = 10,
    HY_GGUF_I64 = 11,
    HY_GGUF_F64 = 12,
    HY_GGUF_TYPE_COUNT
} hy_gguf_type_t;

typedef struct {
    const char *ptr; /* into the mapping, not NUL terminated */
    uint64_t len;
} hy_gguf_str_t;

typedef struct {
    const char *name;   /* NUL-terminated copy */
    uint32_t n_dims;    /* 1..4 */
    int64_t ne[4];      /* ne[0] fastest varying; unused dims are 1 */
    uint32_t type;      /* hy_dtype_t */
    uint64_t offset;    /* from the start of the data section */
    uint64_t nbytes;    /* size of the data */
    const void *data;   /* into the mapping */
    uint8_t layout;     /* hy_weight_layout_t the loader put data in (0: the file's) */
} hy_gguf_tensor_t;

typedef struct hy_gguf hy_gguf_t;

/* Maps and validates `path`.  On error *out is NULL and err holds one line
 * naming the file, the field or tensor, and the byte offset. */
int hy_gguf_open(hy_gguf_t **out, const char *path, char *err);

/* hy_gguf_open_ex's flags.  HY_GGUF_HUGE_PAGES: read the file into
 * anonymous memory on transparent huge pages instead of mapping it (what
 * the CPU backend computes from: its weights stream faster from there); the
 * file may change or go once it is open. */
#define HY_GGUF_HUGE_PAGES 1u
int hy_gguf_open_ex(hy_gguf_t **out, const char *path, unsigned flags, char *err);

/* Same, over a caller-owned buffer that must outlive the handle (tests and
 * fuzzers).  `name` is used in error messages. */
int hy_gguf_open_buffer(hy_gguf_t **out, const void *buf, size_t size,
                        const char *name, char *err);

void hy_gguf_close(hy_gguf_t *g);

uint32_t hy_gguf_version(const hy_gguf_t *g);
const char *hy_gguf_path(const hy_gguf_t *g);
uint32_t hy_gguf_alignment(const hy_gguf_t *g);
size_t hy_gguf_file_size(const hy_gguf_t *g);
/* Bytes of a HY_GGUF_HUGE_PAGES handle's memory the kernel has placed on
 * huge pages (its AnonHugePages in /proc/self/smaps); 0 for a mapped file,
 * or where the kernel has transparent huge pages off. */
size_t hy_gguf_huge_bytes(const hy_gguf_t *g);

/* ---- metadata ---------------------------------------------------------- */

int64_t hy_gguf_n_kv(const hy_gguf_t *g);
/* Index of key or -1. */
int64_t hy_gguf_find_key(const hy_gguf_t *g, const char *key);
hy_gguf_str_t hy_gguf_kv_key(const hy_gguf_t *g, int64_t i);
hy_gguf_type_t hy_gguf_kv_type(const hy_gguf_t *g, int64_t i);

/*
 * Typed getters by key.  Return HY_OK, HY_ENOENT if the key is absent, or
 * HY_EFORMAT (with err naming key and type) if the stored type cannot be
 * represented in the requested one.  Integer getters accept any integer
 * type whose value fits; hy_gguf_get_f32 accepts f32/f64 and integers.
 */
int hy_gguf_get_u32(const hy_gguf_t *g, const char *key, uint32_t *out, char *err);
int hy_gguf_get_i64(const hy_gguf_t *g, const char *key, int64_t *out, char *err);
int hy_gguf_get_f32(const hy_gguf_t *g, const char *key, float *out, char *err);
int hy_gguf_get_bool(const hy_gguf_t *g, const char *key, bool *out, char *err);
int hy_gguf_get_str(const hy_gguf_t *g, const char *key, hy_gguf_str_t *out, char *err);

/*
 * Arrays.  hy_gguf_get_arr gives the element type and count.  For
 * fixed-size element types *data points at the packed little-endian
 * elements in the mapping (possibly unaligned: read with memcpy).  For
 * string arrays use hy_gguf_arr_str.
 */
int hy_gguf_get_arr(const hy_gguf_t *g, const char *key, hy_gguf_type_t *elem_type,
                    uint64_t *count, const void **data, char *err);
hy_gguf_str_t hy_gguf_arr_str(const hy_gguf_t *g, int64_t kv_index, uint64_t i);
/* Element i of a numeric array as i64 / f64 (any numeric element type). */
int64_t hy_gguf_arr_i64(const hy_gguf_t *g, int64_t kv_index, uint64_t i);
double hy_gguf_arr_f64(const hy_gguf_t *g, int64_t kv_index, uint64_t i);

/* Per-layer keys are either a scalar (broadcast) or an array of n values.
 * Fills out[0..n-1]; HY_ENOENT if absent; HY_EFORMAT if an array of the
 * wrong length or type. */
int hy_gguf_get_u32_layers(const hy_gguf_t *g, const char *key, uint32_t *out,
                           uint32_t n, char *err);

/* ---- tensors ----------------------------------------------------------- */

int64_t hy_gguf_n_tensors(const hy_gguf_t *g);
const hy_gguf_tensor_t *hy_gguf_tensor(const hy_gguf_t *g, int64_t i);
/* NULL if absent. */
const hy_gguf_tensor_t *hy_gguf_find_tensor(const hy_gguf_t *g, const char *name);

/* t's bytes, writable, where g holds a private copy of the file
 * (HY_GGUF_HUGE_PAGES); NULL where it maps the file.  Whoever rearranges
 * them says so in t's layout (hy_gguf_set_layout), so that every weight
 * made from t later reads them alike. */
void *hy_gguf_tensor_rw(hy_gguf_t *g, const hy_gguf_tensor_t *t);
void hy_gguf_set_layout(hy_gguf_t *g, const hy_gguf_tensor_t *t, uint8_t layout);

#endif
