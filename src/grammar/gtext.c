/*
 * gtext.c - GBNF text building: buffer, literal and class quoting, code
 * point sets, and the JSON-string view of a character set (raw where JSON
 * allows the character unescaped, an escape sequence where it must be).
 */
#include "grammar/gtext.h"
#include "model/unicode.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hy_gtext_free(hy_gtext_t *t)
{
    free(t->s);
    memset(t, 0, sizeof *t);
}

void hy_gtext_put(hy_gtext_t *t, const char *s, size_t n)
{
    if (t->oom)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        char *p;

        while (cap < t->len + n + 1)
            cap *= 2;
        if ((p = realloc(t->s, cap)) == NULL) {
            t->oom = true;
            return;
        }
        t->s = p;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}

void hy_gtext_puts(hy_gtext_t *t, const char *s)
{
    /* NULL: a text or builtin whose own allocation failed; the failure
     * carries over instead of reading through the pointer */
    if (s == NULL) {
        t->oom = true;
        return;
    }
    hy_gtext_put(t, s, strlen(s));
}

void hy_gtext_printf(hy_gtext_t *t, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        t->oom = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        hy_gtext_put(t, small, (size_t)n);
        return;
    }
    {
        char *big = malloc((size_t)n + 1);

        if (big == NULL) {
            t->oom = true;
            return;
        }
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        hy_gtext_put(t, big, (size_t)n);
        free(big);
    }
}

const char *hy_gtext_of(hy_gtext_t *dst, const hy_gtext_t *sub, const char *empty)
{
    if (sub->oom)
        dst->oom = true;
    return sub->s != NULL && sub->len > 0 ? sub->s : empty;
}

char *hy_gtext_take(hy_gtext_t *t, size_t *len)
{
    char *s;

    if (t->oom) {
        hy_gtext_free(t);
        return NULL;
    }
    if (t->s == NULL)
        hy_gtext_put(t, "", 0);
    s = t->s;
    if (len != NULL)
        *len = t->len;
    if (t->oom)
        s = NULL;
    memset(t, 0, sizeof *t);
    return s;
}

void hy_gtext_cp(hy_gtext_t *t, uint32_t cp)
{
    char buf[8];

    switch (cp) {
    case '"': hy_gtext_puts(t, "\\\""); return;
    case '\\': hy_gtext_puts(t, "\\\\"); return;
    case '[': hy_gtext_puts(t, "\\["); return;
    case ']': hy_gtext_puts(t, "\\]"); return;
    case '-': hy_gtext_puts(t, "\\-"); return;
    case '^': hy_gtext_puts(t, "\\^"); return;
    case '\n': hy_gtext_puts(t, "\\n"); return;
    case '\r': hy_gtext_puts(t, "\\r"); return;
    case '\t': hy_gtext_puts(t, "\\t"); return;
    }
    if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0) || cp == 0x2028 || cp == 0x2029 ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0xFFFF) {
        /* invisible or line-breaking: keep the grammar text readable */
        if (cp > 0xFFFF)
            hy_gtext_printf(t, "\\U%08X", (unsigned)cp);
        else if (cp > 0xFF)
            hy_gtext_printf(t, "\\u%04X", (unsigned)cp);
        else
            hy_gtext_printf(t, "\\x%02X", (unsigned)cp);
        return;
    }
    hy_gtext_put(t, buf, hy_uni_encode(cp, buf));
}

void hy_gtext_literal(hy_gtext_t *t, const char *s, size_t n)
{
    size_t pos = 0;

    hy_gtext_puts(t, "\"");
    while (pos < n) {
        uint32_t cp = hy_uni_decode_lenient(s, n, &pos);

        /* '[', ']', '-' and '^' need no escape in a literal, but an escaped
         * one is still correct GBNF */
        hy_gtext_cp(t, cp);
    }
    hy_gtext_puts(t, "\"");
}

/* ---- code-point sets ---------------------------------------------------------- */

void hy_cpset_free(hy_cpset_t *s)
{
    free(s->r);
    memset(s, 0, sizeof *s);
}

int hy_cpset_add(hy_cpset_t *s, uint32_t lo, uint32_t hi)
{
    int32_t i = 0, j;

    if (lo > hi)
        return HY_OK;
    while (i < s->n && s->r[i].hi + 1 < lo)
        i++;
    /* ranges i.. that touch [lo, hi] merge into one */
    j = i;
    while (j < s->n && s->r[j].lo <= (hi == UINT32_MAX ? hi : hi + 1)) {
        if (s->r[j].lo < lo)
            lo = s->r[j].lo;
        if (s->r[j].hi > hi)
            hi = s->r[j].hi;
        j++;
    }
    if (j == i) { /* insert */
        if (s->n == s->cap) {
            int32_t cap = s->cap ? s->cap * 2 : 8;
            hy_cprange_t *r = realloc(s->r, sizeof *r * (size_t)cap);

            if (r == NULL)
                return HY_ENOMEM;
            s->r = r;
            s->cap = cap;
        }
        memmove(s->r + i + 1, s->r + i, sizeof *s->r * (size_t)(s->n - i));
        s->n++;
    } else if (j > i + 1) {
        memmove(s->r + i + 1, s->r + j, sizeof *s->r * (size_t)(s->n - j));
        s->n -= j - i - 1;
    }
    s->r[i].lo = lo;
    s->r[i].hi = hi;
    return HY_OK;
}

int hy_cpset_union(hy_cpset_t *s, const hy_cpset_t *o)
{
    for (int32_t i = 0; i < o->n; i++)
        if (hy_cpset_add(s, o->r[i].lo, o->r[i].hi) != HY_OK)
            return HY_ENOMEM;
    return HY_OK;
}

int hy_cpset_negate(hy_cpset_t *s)
{
    hy_cpset_t c = { 0 };
    uint32_t next = 0;

    for (int32_t i = 0; i < s->n; i++) {
        if (s->r[i].lo > next && hy_cpset_add(&c, next, s->r[i].lo - 1) != HY_OK)
            goto nomem;
        next = s->r[i].hi + 1;
    }
    if (next <= 0x10FFFF && hy_cpset_add(&c, next, 0x10FFFF) != HY_OK)
        goto nomem;
    hy_cpset_free(s);
    *s = c;
    return HY_OK;
nomem:
    hy_cpset_free(&c);
    return HY_ENOMEM;
}

int hy_cpset_remove(hy_cpset_t *s, uint32_t lo, uint32_t hi)
{
    if (hy_cpset_negate(s) != HY_OK || hy_cpset_add(s, lo, hi) != HY_OK)
        return HY_ENOMEM;
    return hy_cpset_negate(s);
}

bool hy_cpset_has(const hy_cpset_t *s, uint32_t cp)
{
    for (int32_t i = 0; i < s->n; i++)
        if (cp >= s->r[i].lo && cp <= s->r[i].hi)
            return true;
    return false;
}

/* ---- JSON strings ----------------------------------------------------------- */

/* The JSON escape of a character that must be escaped, as GBNF literal
 * content (the backslash itself escaped for GBNF). */
static void json_escape_cp(hy_gtext_t *t, uint32_t cp)
{
    switch (cp) {
    case '"': hy_gtext_puts(t, "\\\\\\\""); return;
    case '\\': hy_gtext_puts(t, "\\\\\\\\"); return;
    case '\n': hy_gtext_puts(t, "\\\\n"); return;
    case '\r': hy_gtext_puts(t, "\\\\r"); return;
    case '\t': hy_gtext_puts(t, "\\\\t"); return;
    case '\b': hy_gtext_puts(t, "\\\\b"); return;
    case '\f': hy_gtext_puts(t, "\\\\f"); return;
    }
    hy_gtext_printf(t, "\\\\u%04x", (unsigned)cp);
}

static bool json_needs_escape(uint32_t cp)
{
    return cp < 0x20 || cp == '"' || cp == '\\';
}

void hy_gtext_json_class(hy_gtext_t *t, const hy_cpset_t *s)
{
    bool first = true, any_raw = false;

    hy_gtext_puts(t, "(");
    /* the raw characters: the set minus what JSON must escape, i.e. its
     * intersection with the ranges JSON writes as themselves (surrogates
     * are not characters) */
    static const hy_cprange_t raw[] = { { 0x20, 0x21 }, { 0x23, 0x5B }, { 0x5D, 0xD7FF },
                                        { 0xE000, 0x10FFFF } };

    for (int32_t i = 0; i < s->n; i++) {
        for (size_t k = 0; k < HY_ARRAY_LEN(raw); k++) {
            uint32_t a = HY_MAX(s->r[i].lo, raw[k].lo), b = HY_MIN(s->r[i].hi, raw[k].hi);

            if (a > b)
                continue;
            if (!any_raw)
                hy_gtext_puts(t, "[");
            any_raw = true;
            hy_gtext_cp(t, a);
            if (b > a) {
                hy_gtext_puts(t, "-");
                hy_gtext_cp(t, b);
            }
        }
    }
    if (any_raw) {
        hy_gtext_puts(t, "]");
        first = false;
    }
    /* escape sequences for the rest */
    for (int32_t i = 0; i < s->n; i++) {
        for (uint32_t c = s->r[i].lo; c <= s->r[i].hi && c < 0x80; c++) {
            if (!json_needs_escape(c))
                continue;
            hy_gtext_puts(t, first ? "\"" : " | \"");
            json_escape_cp(t, c);
            hy_gtext_puts(t, "\"");
            first = false;
        }
    }
    hy_gtext_puts(t, ")");
}

void hy_gtext_json_literal(hy_gtext_t *t, const char *s, size_t n)
{
    size_t pos = 0;

    hy_gtext_puts(t, "\"");
    while (pos < n) {
        uint32_t cp = hy_uni_decode_lenient(s, n, &pos);

        if (json_needs_escape(cp))
            json_escape_cp(t, cp);
        else
            hy_gtext_cp(t, cp);
    }
    hy_gtext_puts(t, "\"");
}
