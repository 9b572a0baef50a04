/*
 * json_out.h - a tiny append-only JSON writer for the server's responses.
 * Responses are written by hand instead of through a cJSON tree so that key
 * order and bytes are exactly what we promise (OpenAI's shapes, SSE framing)
 * and so the per-token streaming path does no tree allocation.  Strings are
 * escaped per RFC 8259; invalid UTF-8 (a token that ends mid-character)
 * becomes U+FFFD so the output is always valid JSON.
 */
#ifndef HY_SERVER_JSON_OUT_H
#define HY_SERVER_JSON_OUT_H

#include <stddef.h>
#include <stdint.h>

#include "common/hy.h"

typedef struct {
    char *data;  /* NUL-terminated when len > 0 or after hy_jbuf_take */
    size_t len;
    size_t cap;
    int failed;  /* sticky: an allocation failed, the content is incomplete */
} hy_jbuf_t;

void hy_jbuf_init(hy_jbuf_t *b);
void hy_jbuf_free(hy_jbuf_t *b);
void hy_jbuf_reset(hy_jbuf_t *b); /* len = 0, keeps the memory */

void hy_jbuf_raw(hy_jbuf_t *b, const char *s, size_t n);
void hy_jbuf_cstr(hy_jbuf_t *b, const char *s); /* raw, no quoting */
void hy_jbuf_printf(hy_jbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "..." with escapes; s == NULL writes null. */
void hy_jbuf_str(hy_jbuf_t *b, const char *s, size_t n);
void hy_jbuf_cstr_q(hy_jbuf_t *b, const char *s); /* quoted C string or null */
void hy_jbuf_i64(hy_jbuf_t *b, int64_t v);
/* A float as JSON: shortest %g form that round-trips a float; -inf (a
 * logprob of an impossible token) becomes -9999.0 as in OpenAI/vLLM, NaN null. */
void hy_jbuf_f32(hy_jbuf_t *b, float v);

/* HY_OK, or HY_ENOMEM if any append failed.  On success *out (malloc'd,
 * NUL-terminated, free()) takes the content and b is empty again. */
int hy_jbuf_take(hy_jbuf_t *b, char **out, size_t *out_len);

/* Length of the longest prefix of s[0..n) that does not end inside a UTF-8
 * sequence which is still incomplete (bytes that can never form a valid
 * character are not held back). */
size_t hy_utf8_complete_prefix(const char *s, size_t n);

#endif
