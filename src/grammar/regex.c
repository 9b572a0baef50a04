/*
 * regex.c - recursive-descent compiler from the ECMA-262 subset described
 * in regex.h to GBNF text.  Each atom is written as GBNF as soon as it is
 * parsed; a quantifier wraps the atom's text in a group.  Character sets
 * are kept as code-point ranges until written, so negation, \d inside
 * classes and JSON escaping are exact.
 */
#include "grammar/regex.h"
#include "model/unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t len, pos;
    const char *any_char;
    char *err;
    int rc;
    int depth;
} rx_t;

static int rx_fail(rx_t *r, size_t at, const char *what)
{
    if (r->rc == HY_OK)
        r->rc = hy_err(r->err, HY_EUNSUPPORTED, "%s at offset %zu is not supported", what, at);
    return r->rc;
}

static int rx_bad(rx_t *r, size_t at, const char *what)
{
    if (r->rc == HY_OK)
        r->rc = hy_err(r->err, HY_EFORMAT, "invalid regular expression: %s at offset %zu", what,
                       at);
    return r->rc;
}

/* An allocation failed: the server's fault, not the pattern's. */
static int rx_nomem(rx_t *r)
{
    if (r->rc == HY_OK)
        r->rc = hy_err(r->err, HY_ENOMEM, "out of memory");
    return r->rc;
}

static int rx_peek(const rx_t *r)
{
    return r->pos < r->len ? (unsigned char)r->s[r->pos] : -1;
}

/* Next code point (the pattern is UTF-8 from a JSON string). */
static int64_t rx_next(rx_t *r)
{
    if (r->pos >= r->len)
        return -1;
    return hy_uni_decode_lenient(r->s, r->len, &r->pos);
}

static int rx_hex(rx_t *r, int n, uint32_t *out)
{
    uint32_t v = 0;

    for (int i = 0; i < n; i++) {
        int c = rx_peek(r), d;

        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return HY_EFORMAT;
        v = v * 16 + (uint32_t)d;
        r->pos++;
    }
    *out = v;
    return HY_OK;
}

/* The class escapes \d \w \s (negated forms when upper case). */
static int class_escape(int c, hy_cpset_t *set)
{
    static const hy_cprange_t space[] = {
        { 0x09, 0x0D }, { 0x20, 0x20 }, { 0xA0, 0xA0 }, { 0x1680, 0x1680 }, { 0x2000, 0x200A },
        { 0x2028, 0x2029 }, { 0x202F, 0x202F }, { 0x205F, 0x205F }, { 0x3000, 0x3000 },
        { 0xFEFF, 0xFEFF },
    };
    hy_cpset_t s = { 0 };
    int rc = HY_OK;

    switch (c | 0x20) {
    case 'd':
        rc = hy_cpset_add(&s, '0', '9');
        break;
    case 'w':
        rc = hy_cpset_add(&s, '0', '9') | hy_cpset_add(&s, 'A', 'Z') | hy_cpset_add(&s, '_', '_') |
             hy_cpset_add(&s, 'a', 'z');
        break;
    case 's':
        for (size_t i = 0; i < HY_ARRAY_LEN(space) && rc == HY_OK; i++)
            rc = hy_cpset_add(&s, space[i].lo, space[i].hi);
        break;
    }
    if (rc == HY_OK && c >= 'A' && c <= 'Z')
        rc = hy_cpset_negate(&s);
    if (rc == HY_OK)
        rc = hy_cpset_union(set, &s);
    hy_cpset_free(&s);
    return rc;
}

/* After a backslash: one code point (*cp) or a set added to set (*cp = -1).
 * in_class: \b is backspace there, a word boundary outside. */
static int rx_escape(rx_t *r, bool in_class, int64_t *cp, hy_cpset_t *set)
{
    size_t at = r->pos - 1;
    int c = rx_peek(r);
    uint32_t v;

    if (c < 0)
        return rx_bad(r, at, "a trailing backslash");
    r->pos++;
    *cp = -1;
    switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        return class_escape(c, set) == HY_OK ? HY_OK : rx_nomem(r);
    case 't': *cp = '\t'; return HY_OK;
    case 'n': *cp = '\n'; return HY_OK;
    case 'r': *cp = '\r'; return HY_OK;
    case 'v': *cp = '\v'; return HY_OK;
    case 'f': *cp = '\f'; return HY_OK;
    case 'b':
        if (in_class) {
            *cp = '\b';
            return HY_OK;
        }
        return rx_fail(r, at, "word boundary '\\b'");
    case 'B': return rx_fail(r, at, "word boundary '\\B'");
    case '0':
        if (rx_peek(r) >= '0' && rx_peek(r) <= '9')
            return rx_fail(r, at, "octal escape");
        *cp = 0;
        return HY_OK;
    case 'x':
        if (rx_hex(r, 2, &v) != HY_OK)
            return rx_bad(r, at, "'\\x' needs 2 hex digits");
        *cp = v;
        return HY_OK;
    case 'u':
        if (rx_peek(r) == '{') {
            size_t start = ++r->pos;

            v = 0;
            while (rx_peek(r) != '}') {
                uint32_t d;

                if (r->pos - start >= 6 || rx_hex(r, 1, &d) != HY_OK)
                    return rx_bad(r, at, "malformed '\\u{...}'");
                v = v * 16 + d;
            }
            r->pos++;
        } else if (rx_hex(r, 4, &v) != HY_OK) {
            return rx_bad(r, at, "'\\u' needs 4 hex digits");
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return rx_fail(r, at, "a surrogate or out-of-range '\\u' escape");
        *cp = v;
        return HY_OK;
    case 'c':
        c = rx_peek(r);
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
            return rx_bad(r, at, "'\\c' needs a letter");
        r->pos++;
        *cp = c % 32;
        return HY_OK;
    case 'p': case 'P': return rx_fail(r, at, "Unicode property escape '\\p'");
    case 'k': return rx_fail(r, at, "backreference '\\k'");
    }
    if (c >= '1' && c <= '9')
        return rx_fail(r, at, "backreference");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return rx_bad(r, at, "unknown escape");
    r->pos--;
    *cp = rx_next(r); /* escaped punctuation (or any other character) */
    return HY_OK;
}

static void emit_set(rx_t *r, hy_gtext_t *out, const hy_cpset_t *set)
{
    hy_cpset_t s = { 0 };

    /* surrogates are not characters */
    if (hy_cpset_union(&s, set) != HY_OK || hy_cpset_negate(&s) != HY_OK ||
        hy_cpset_add(&s, 0xD800, 0xDFFF) != HY_OK || hy_cpset_negate(&s) != HY_OK) {
        rx_nomem(r);
    } else if (s.n == 0) {
        rx_fail(r, r->pos, "a character class that matches nothing");
    } else {
        hy_gtext_json_class(out, &s);
    }
    hy_cpset_free(&s);
}

static int parse_class(rx_t *r, hy_gtext_t *out)
{
    size_t at = r->pos - 1;
    hy_cpset_t set = { 0 };
    bool negate = false;

    if (rx_peek(r) == '^') {
        negate = true;
        r->pos++;
    }
    while (rx_peek(r) != ']' && r->rc == HY_OK) {
        int64_t lo, hi;

        if (rx_peek(r) < 0) {
            rx_bad(r, at, "unterminated character class");
            break;
        }
        lo = rx_next(r);
        if (lo == '\\' && rx_escape(r, true, &lo, &set) != HY_OK)
            break;
        if (lo < 0)
            continue; /* a class escape added its set */
        hi = lo;
        if (rx_peek(r) == '-' && r->pos + 1 < r->len && r->s[r->pos + 1] != ']') {
            size_t rat = r->pos;

            r->pos++;
            hi = rx_next(r);
            if (hi == '\\' && rx_escape(r, true, &hi, &set) != HY_OK)
                break;
            if (hi < 0) {
                rx_fail(r, rat, "a range ending in a class escape");
                break;
            }
            if (hi < lo) {
                rx_bad(r, rat, "reversed range in a character class");
                break;
            }
        }
        if (hy_cpset_add(&set, (uint32_t)lo, (uint32_t)hi) != HY_OK)
            rx_nomem(r);
    }
    if (r->rc == HY_OK) {
        r->pos++; /* ']' */
        if (negate && hy_cpset_negate(&set) != HY_OK)
            rx_nomem(r);
        else
            emit_set(r, out, &set);
    }
    hy_cpset_free(&set);
    return r->rc;
}

static int parse_alt(rx_t *r, hy_gtext_t *out, bool top);

/* x{n}, x{n,}, x{n,m}: false (and pos unchanged) when the brace does not
 * start a quantifier, in which case it is a literal '{' (Annex B). */
static bool parse_braces(rx_t *r, long *min, long *max)
{
    size_t save = r->pos;
    long a = -1, b;

    r->pos++;
    while (rx_peek(r) >= '0' && rx_peek(r) <= '9') {
        a = (a < 0 ? 0 : a) * 10 + (rx_peek(r) - '0');
        if (a > 100000)
            a = 100000;
        r->pos++;
    }
    if (a < 0)
        goto literal;
    b = a;
    if (rx_peek(r) == ',') {
        r->pos++;
        b = -1;
        while (rx_peek(r) >= '0' && rx_peek(r) <= '9') {
            b = (b < 0 ? 0 : b) * 10 + (rx_peek(r) - '0');
            if (b > 100000)
                b = 100000;
            r->pos++;
        }
    }
    if (rx_peek(r) != '}')
        goto literal;
    r->pos++;
    *min = a;
    *max = b;
    return true;
literal:
    r->pos = save;
    return false;
}

/* One atom and its quantifier, appended to out. */
static int parse_piece(rx_t *r, hy_gtext_t *out)
{
    hy_gtext_t atom = { 0 };
    size_t at = r->pos;
    int c = rx_peek(r);
    long min = 1, max = 1;
    bool quant = true;

    if (c == '(') {
        r->pos++;
        if (rx_peek(r) == '?') {
            const char *q = r->s + r->pos;
            size_t left = r->len - r->pos;

            if (left >= 2 && q[1] == ':')
                r->pos += 2;
            else if (left >= 2 && (q[1] == '=' || q[1] == '!'))
                return rx_fail(r, at, q[1] == '=' ? "lookahead '(?='" : "lookahead '(?!'");
            else if (left >= 3 && q[1] == '<' && (q[2] == '=' || q[2] == '!'))
                return rx_fail(r, at, "lookbehind '(?<'");
            else if (left >= 2 && (q[1] == '<' || (q[1] == 'P' && left >= 3 && q[2] == '<'))) {
                r->pos += q[1] == 'P' ? 3 : 2;
                while (rx_peek(r) >= 0 && rx_peek(r) != '>')
                    r->pos++;
                if (rx_peek(r) != '>')
                    return rx_bad(r, at, "unterminated group name");
                r->pos++;
            } else {
                return rx_fail(r, at, "inline flags or other '(?' group");
            }
        }
        if (++r->depth > 100)
            return rx_bad(r, at, "groups nested deeper than 100");
        hy_gtext_puts(&atom, "(");
        if (parse_alt(r, &atom, false) != HY_OK)
            goto done;
        if (rx_peek(r) != ')') {
            rx_bad(r, at, "unclosed group");
            goto done;
        }
        r->pos++;
        r->depth--;
        hy_gtext_puts(&atom, ")");
    } else if (c == '[') {
        r->pos++;
        if (parse_class(r, &atom) != HY_OK)
            goto done;
    } else if (c == '.') {
        hy_cpset_t dot = { 0 };

        r->pos++;
        if (hy_cpset_add(&dot, '\n', '\n') || hy_cpset_add(&dot, '\r', '\r') ||
            hy_cpset_add(&dot, 0x2028, 0x2029) || hy_cpset_negate(&dot))
            rx_nomem(r);
        else
            emit_set(r, &atom, &dot);
        hy_cpset_free(&dot);
    } else if (c == '*' || c == '+' || c == '?') {
        return rx_bad(r, at, "a quantifier with nothing to repeat");
    } else if (c == '^' || c == '$') {
        return rx_fail(r, at, c == '^' ? "anchor '^' inside the pattern"
                                       : "anchor '$' inside the pattern");
    } else {
        hy_cpset_t set = { 0 };
        int64_t cp = rx_next(r);

        if (cp == '\\' && rx_escape(r, false, &cp, &set) != HY_OK) {
            hy_cpset_free(&set);
            goto done;
        }
        if (cp >= 0) {
            char buf[4];

            hy_gtext_json_literal(&atom, buf, hy_uni_encode((uint32_t)cp, buf));
        } else {
            emit_set(r, &atom, &set);
        }
        hy_cpset_free(&set);
    }
    if (r->rc != HY_OK)
        goto done;
    c = rx_peek(r);
    if (c == '*')
        min = 0, max = -1, r->pos++;
    else if (c == '+')
        min = 1, max = -1, r->pos++;
    else if (c == '?')
        min = 0, max = 1, r->pos++;
    else if (c != '{' || !parse_braces(r, &min, &max))
        quant = false;
    if (quant) {
        if (max >= 0 && max < min) {
            rx_bad(r, at, "a {n,m} quantifier with m < n");
            goto done;
        }
        if (min > HY_REGEX_MAX_REPEAT || max > HY_REGEX_MAX_REPEAT) {
            char what[96];

            snprintf(what, sizeof what, "a repetition count over %d", HY_REGEX_MAX_REPEAT);
            rx_fail(r, at, what);
            goto done;
        }
        if (rx_peek(r) == '?')
            r->pos++; /* lazy: the same set of strings */
        else if (rx_peek(r) == '+') {
            rx_fail(r, r->pos, "possessive quantifier");
            goto done;
        }
    }
    if (!quant) {
        hy_gtext_puts(out, hy_gtext_of(out, &atom, ""));
    } else {
        hy_gtext_printf(out, "(%s)", hy_gtext_of(out, &atom, "\"\""));
        if (min == 0 && max == -1)
            hy_gtext_puts(out, "*");
        else if (min == 1 && max == -1)
            hy_gtext_puts(out, "+");
        else if (min == 0 && max == 1)
            hy_gtext_puts(out, "?");
        else if (max == -1)
            hy_gtext_printf(out, "{%ld,}", min);
        else
            hy_gtext_printf(out, "{%ld,%ld}", min, max);
    }
done:
    hy_gtext_free(&atom);
    return r->rc;
}

/* A sequence up to '|', ')' or the end.  At the top level a leading '^'
 * and a trailing '$' anchor it; without them any characters may come
 * before or after. */
static int parse_seq(rx_t *r, hy_gtext_t *out, bool top)
{
    bool start = false, end = false, empty = true;
    hy_gtext_t body = { 0 };

    if (top && rx_peek(r) == '^') {
        start = true;
        r->pos++;
    }
    while (r->rc == HY_OK) {
        int c = rx_peek(r);

        if (c < 0 || c == '|' || c == ')')
            break;
        if (top && c == '$' && (r->pos + 1 == r->len || r->s[r->pos + 1] == '|')) {
            end = true;
            r->pos++;
            break;
        }
        hy_gtext_puts(&body, " ");
        parse_piece(r, &body);
        empty = false;
    }
    if (r->rc == HY_OK) {
        if (top && !start)
            hy_gtext_printf(out, "%s* ", r->any_char);
        hy_gtext_puts(out, empty ? "\"\"" : hy_gtext_of(out, &body, "\"\""));
        if (top && !end)
            hy_gtext_printf(out, " %s*", r->any_char);
    }
    hy_gtext_free(&body);
    return r->rc;
}

static int parse_alt(rx_t *r, hy_gtext_t *out, bool top)
{
    bool first = true;

    for (;;) {
        hy_gtext_puts(out, first ? "(" : " | (");
        first = false;
        if (parse_seq(r, out, top) != HY_OK)
            return r->rc;
        hy_gtext_puts(out, ")");
        if (rx_peek(r) != '|')
            break;
        r->pos++;
    }
    return r->rc;
}

int hy_regex_to_gbnf(const char *pattern, size_t len, const char *any_char, hy_gtext_t *out,
                     char *err)
{
    rx_t r = { .s = pattern, .len = len, .any_char = any_char, .err = err };

    hy_gtext_puts(out, "(");
    if (parse_alt(&r, out, true) != HY_OK)
        return r.rc;
    if (r.pos < r.len)
        return rx_bad(&r, r.pos, "unbalanced ')'");
    hy_gtext_puts(out, ")");
    return out->oom ? hy_err(err, HY_ENOMEM, "out of memory") : HY_OK;
}
