/*
 * json_out.c - the append-only JSON writer declared in json_out.h.  The one
 * subtle part is the string escaper: it validates UTF-8 as it copies (so a
 * token that is only half of a character cannot produce invalid JSON) and
 * escapes control characters the way RFC 8259 requires.
 */
#include "server/json_out.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hy_jbuf_init(hy_jbuf_t *b)
{
    memset(b, 0, sizeof *b);
}

void hy_jbuf_free(hy_jbuf_t *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

void hy_jbuf_reset(hy_jbuf_t *b)
{
    b->len = 0;
    b->failed = 0;
    if (b->data != NULL)
        b->data[0] = '\0';
}

/* Makes room for n more bytes plus the terminating NUL. */
static int jbuf_reserve(hy_jbuf_t *b, size_t n)
{
    size_t need, cap;
    char *p;

    if (b->failed)
        return HY_ENOMEM;
    if (n > SIZE_MAX / 2 - b->len - 1)
        goto fail;
    need = b->len + n + 1;
    if (need <= b->cap)
        return HY_OK;
    cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    p = realloc(b->data, cap);
    if (p == NULL)
        goto fail;
    b->data = p;
    b->cap = cap;
    return HY_OK;
fail:
    b->failed = 1;
    return HY_ENOMEM;
}

void hy_jbuf_raw(hy_jbuf_t *b, const char *s, size_t n)
{
    if (jbuf_reserve(b, n) != HY_OK)
        return;
    if (n > 0)
        memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void hy_jbuf_cstr(hy_jbuf_t *b, const char *s)
{
    hy_jbuf_raw(b, s, strlen(s));
}

void hy_jbuf_printf(hy_jbuf_t *b, const char *fmt, ...)
{
    va_list ap;
    char tmp[128];
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if ((size_t)n < sizeof tmp) {
        hy_jbuf_raw(b, tmp, (size_t)n);
        return;
    }
    if (jbuf_reserve(b, (size_t)n) != HY_OK)
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Length of the valid UTF-8 sequence at s (n bytes available), or 0 when
 * the bytes there are not a complete, valid, shortest-form sequence. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len, i;
    uint32_t cp;

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

size_t hy_utf8_complete_prefix(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i, back, need;

    /* Look at most 3 bytes back for the lead byte of the last character. */
    for (back = 1; back <= 4 && back <= n; back++) {
        unsigned c = u[n - back];

        if ((c & 0xC0) == 0x80)
            continue;
        if (c >= 0xC2 && c <= 0xDF)
            need = 2;
        else if (c >= 0xE0 && c <= 0xEF)
            need = 3;
        else if (c >= 0xF0 && c <= 0xF4)
            need = 4;
        else
            return n; /* ASCII or a byte that never starts a character */
        if (back >= need)
            return n; /* complete (or over-long: invalid, emitted as U+FFFD) */
        /* Incomplete: hold it back only if what is there can still become valid. */
        for (i = 1; i < back; i++)
            if ((u[n - back + i] & 0xC0) != 0x80)
                return n;
        return n - back;
    }
    return n;
}

void hy_jbuf_str(hy_jbuf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run;

    if (s == NULL) {
        hy_jbuf_raw(b, "null", 4);
        return;
    }
    hy_jbuf_raw(b, "\"", 1);
    while (i < n) {
        unsigned c = u[i];
        size_t l;

        /* Copy runs of plain printable ASCII in one go. */
        run = i;
        while (run < n && u[run] >= 0x20 && u[run] < 0x80 && u[run] != '"' && u[run] != '\\')
            run++;
        if (run > i) {
            hy_jbuf_raw(b, s + i, run - i);
            i = run;
            continue;
        }
        switch (c) {
        case '"': hy_jbuf_raw(b, "\\\"", 2); i++; continue;
        case '\\': hy_jbuf_raw(b, "\\\\", 2); i++; continue;
        case '\n': hy_jbuf_raw(b, "\\n", 2); i++; continue;
        case '\r': hy_jbuf_raw(b, "\\r", 2); i++; continue;
        case '\t': hy_jbuf_raw(b, "\\t", 2); i++; continue;
        case '\b': hy_jbuf_raw(b, "\\b", 2); i++; continue;
        case '\f': hy_jbuf_raw(b, "\\f", 2); i++; continue;
        default: break;
        }
        if (c < 0x20) {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            hy_jbuf_raw(b, esc, 6);
            i++;
            continue;
        }
        l = utf8_seq_len(u + i, n - i);
        if (l == 0) {
            hy_jbuf_raw(b, "\xEF\xBF\xBD", 3); /* U+FFFD for each bad byte */
            i++;
        } else {
            hy_jbuf_raw(b, s + i, l);
            i += l;
        }
    }
    hy_jbuf_raw(b, "\"", 1);
}

void hy_jbuf_cstr_q(hy_jbuf_t *b, const char *s)
{
    hy_jbuf_str(b, s, s ? strlen(s) : 0);
}

void hy_jbuf_i64(hy_jbuf_t *b, int64_t v)
{
    hy_jbuf_printf(b, "%lld", (long long)v);
}

void hy_jbuf_f32(hy_jbuf_t *b, float v)
{
    char tmp[32];
    int prec;

    if (isnan(v)) {
        hy_jbuf_raw(b, "null", 4);
        return;
    }
    if (isinf(v)) {
        hy_jbuf_cstr(b, v < 0 ? "-9999.0" : "9999.0");
        return;
    }
    /* Shortest of %.6g..%.9g that reads back as the same float. */
    for (prec = 6; prec <= 9; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, (double)v);
        if (strtof(tmp, NULL) == v)
            break;
    }
    hy_jbuf_cstr(b, tmp);
}

int hy_jbuf_take(hy_jbuf_t *b, char **out, size_t *out_len)
{
    *out = NULL;
    if (out_len != NULL)
        *out_len = 0;
    if (b->failed || jbuf_reserve(b, 0) != HY_OK) {
        hy_jbuf_free(b);
        return HY_ENOMEM;
    }
    b->data[b->len] = '\0';
    *out = b->data;
    if (out_len != NULL)
        *out_len = b->len;
    memset(b, 0, sizeof *b);
    return HY_OK;
}
