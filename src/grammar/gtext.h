/*
 * gtext.h - a growable text buffer for writing GBNF, with the quoting the
 * GBNF syntax needs (literals, character classes) and the JSON string
 * escaping that grammars for JSON text need (a character inside a JSON
 * string is either itself or an escape sequence).  Used by the JSON Schema
 * and regular-expression compilers, which produce GBNF text.
 */
#ifndef HY_GRAMMAR_GTEXT_H
#define HY_GRAMMAR_GTEXT_H

#include "common/hy.h"

typedef struct {
    char *s;
    size_t len, cap;
    bool oom; /* an append failed: the text is incomplete */
} hy_gtext_t;

void hy_gtext_free(hy_gtext_t *t);
void hy_gtext_put(hy_gtext_t *t, const char *s, size_t n);
void hy_gtext_puts(hy_gtext_t *t, const char *s);
void hy_gtext_printf(hy_gtext_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* sub's text for writing into dst ("empty" when sub has none): an append
 * that failed in sub makes dst incomplete too, so one OOM check at the end
 * of a conversion sees every nested text's failure. */
const char *hy_gtext_of(hy_gtext_t *dst, const hy_gtext_t *sub, const char *empty);
/* Hands the text over (NUL terminated) and resets t; NULL after an OOM. */
char *hy_gtext_take(hy_gtext_t *t, size_t *len);

/* A GBNF literal "..." matching exactly bytes s[0, n) (UTF-8 text). */
void hy_gtext_literal(hy_gtext_t *t, const char *s, size_t n);
/* One code point written inside a GBNF literal or class (escaped when it
 * is a quote, backslash, bracket, dash, caret or a control character). */
void hy_gtext_cp(hy_gtext_t *t, uint32_t cp);

/* A code-point set as sorted, disjoint, inclusive ranges. */
typedef struct {
    uint32_t lo, hi;
} hy_cprange_t;

typedef struct {
    hy_cprange_t *r;
    int32_t n, cap;
} hy_cpset_t;

void hy_cpset_free(hy_cpset_t *s);
int hy_cpset_add(hy_cpset_t *s, uint32_t lo, uint32_t hi); /* keeps it normalised */
int hy_cpset_union(hy_cpset_t *s, const hy_cpset_t *o);
int hy_cpset_negate(hy_cpset_t *s); /* complement over 0..U+10FFFF */
int hy_cpset_remove(hy_cpset_t *s, uint32_t lo, uint32_t hi);
bool hy_cpset_has(const hy_cpset_t *s, uint32_t cp);

/* GBNF for one character of a JSON string whose decoded value is in s:
 * the raw character where JSON allows it, the escape sequence for '"',
 * '\\' and control characters.  Writes "" (matches nothing is impossible in
 * GBNF) only for an empty set: callers check hy_cpset_t.n first. */
void hy_gtext_json_class(hy_gtext_t *t, const hy_cpset_t *s);
/* A GBNF literal for the JSON encoding of the decoded text s[0, n) (no
 * surrounding quotes): '"', '\\' and control characters escaped. */
void hy_gtext_json_literal(hy_gtext_t *t, const char *s, size_t n);

#endif
