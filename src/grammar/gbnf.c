/*
 * gbnf.c - recursive-descent parser for GBNF (see gbnf.h for the syntax).
 * It builds the tree into flat growable arrays (nodes, kid lists, literal
 * bytes, code-point ranges) so that the whole result is freed with one
 * call and copied around without pointer fixing.  Character classes are
 * normalised here (sorted, merged, negation applied) so that later stages
 * only ever see positive, disjoint code-point ranges.
 */
#include "grammar/gbnf.h"
#include "model/unicode.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    hy_gbnf_t *g;
    const char *src;
    size_t len, pos;
    int32_t rule; /* rule being defined, -1 between rules */
    int depth;
    char *err;
    int rc;       /* first error (sticky) */
} gp_t;

/* ---- growable arrays ------------------------------------------------------- */

int hy_gbnf_grow(void **p, int32_t *cap, int32_t need, size_t elem)
{
    int32_t c = *cap ? *cap : 16;
    void *q;

    if (need <= *cap)
        return HY_OK;
    while (c < need) {
        if (c > INT32_MAX / 2)
            return HY_ENOMEM;
        c *= 2;
    }
    q = realloc(*p, (size_t)c * elem);
    if (q == NULL)
        return HY_ENOMEM;
    *p = q;
    *cap = c;
    return HY_OK;
}

/* ---- errors ---------------------------------------------------------------- */

static int gp_fail(gp_t *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int gp_fail(gp_t *p, size_t at, const char *fmt, ...)
{
    char msg[HY_ERR_LEN / 2], where[160];
    size_t line = 1, col = 1;
    va_list ap;

    if (p->rc != HY_OK)
        return p->rc;
    for (size_t i = 0; i < at && i < p->len; i++) {
        if (p->src[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (p->rule >= 0)
        snprintf(where, sizeof where, ", rule '%.64s'", p->g->rules[p->rule].name);
    else
        where[0] = '\0';
    p->rc = hy_err(p->err, HY_EFORMAT, "grammar: offset %zu (line %zu, column %zu)%s: %s", at,
                   line, col, where, msg);
    return p->rc;
}

static int gp_nomem(gp_t *p)
{
    if (p->rc == HY_OK)
        p->rc = hy_err(p->err, HY_ENOMEM, "grammar: out of memory");
    return p->rc;
}

/* ---- tree building --------------------------------------------------------- */

static int32_t node_add(gp_t *p, int kind, int32_t a, int32_t b)
{
    hy_gbnf_t *g = p->g;

    if (HY_GBNF_GROW(g->nodes, g->cap_nodes, g->n_nodes + 1) != HY_OK)
        return gp_nomem(p), -1;
    g->nodes[g->n_nodes] = (hy_gbnf_node_t){ .kind = kind, .a = a, .b = b };
    return g->n_nodes++;
}

/* A SEQ/ALT node over kids[0..n); a single kid is returned as itself. */
static int32_t node_list(gp_t *p, int kind, const int32_t *kids, int32_t n)
{
    hy_gbnf_t *g = p->g;
    int32_t off = g->n_kids;

    if (n == 0)
        return node_add(p, HY_GBNF_EMPTY, 0, 0);
    if (n == 1)
        return kids[0];
    if (HY_GBNF_GROW(g->kids, g->cap_kids, g->n_kids + n) != HY_OK)
        return gp_nomem(p), -1;
    memcpy(g->kids + off, kids, sizeof *kids * (size_t)n);
    g->n_kids += n;
    return node_add(p, kind, off, n);
}

int32_t hy_gbnf_find(const hy_gbnf_t *g, const char *name)
{
    for (int32_t i = 0; i < g->n_rules; i++)
        if (strcmp(g->rules[i].name, name) == 0)
            return i;
    return -1;
}

static int32_t rule_get(gp_t *p, const char *name, size_t n, size_t at)
{
    hy_gbnf_t *g = p->g;
    int32_t i;

    for (i = 0; i < g->n_rules; i++)
        if (strlen(g->rules[i].name) == n && memcmp(g->rules[i].name, name, n) == 0)
            return i;
    if (HY_GBNF_GROW(g->rules, g->cap_rules, g->n_rules + 1) != HY_OK)
        return gp_nomem(p), -1;
    g->rules[i].name = malloc(n + 1);
    if (g->rules[i].name == NULL)
        return gp_nomem(p), -1;
    memcpy(g->rules[i].name, name, n);
    g->rules[i].name[n] = '\0';
    g->rules[i].expr = -1;
    g->rules[i].def_off = -1;
    g->rules[i].use_off = (int32_t)at;
    g->n_rules++;
    return i;
}

/* ---- lexing ------------------------------------------------------------------ */

static int peek(const gp_t *p)
{
    return p->pos < p->len ? (unsigned char)p->src[p->pos] : -1;
}

static bool is_word(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

/* Skips blanks and comments; newlines only when newline_ok. */
static void skip_space(gp_t *p, bool newline_ok)
{
    while (p->pos < p->len) {
        int c = peek(p);

        if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->src[p->pos] != '\n')
                p->pos++;
        } else {
            break;
        }
    }
}

/* Decodes one UTF-8 code point at pos (advancing); -1 on invalid bytes. */
static int64_t utf8_next(gp_t *p)
{
    int n = hy_uni_check_utf8((const unsigned char *)p->src + p->pos, p->len - p->pos);
    size_t at = p->pos;

    if (n <= 0)
        return -1;
    return hy_uni_decode_lenient(p->src, at + (size_t)n, &p->pos);
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class (escape sequences resolved) as a
 * code point; -1 after reporting an error. */
static int64_t read_char(gp_t *p)
{
    size_t at = p->pos;
    int64_t cp;
    int c, n = 0, v;

    if (peek(p) != '\\') {
        cp = utf8_next(p);
        if (cp < 0)
            return gp_fail(p, at, "invalid UTF-8 byte 0x%02x", (unsigned char)p->src[at]), -1;
        return cp;
    }
    p->pos++;
    c = peek(p);
    p->pos++;
    switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'':
        return c;
    case 'x': n = 2; break;
    case 'u': n = 4; break;
    case 'U': n = 8; break;
    case -1: return gp_fail(p, at, "unfinished escape at the end of the grammar"), -1;
    default:
        return gp_fail(p, at, "unknown escape '\\%c'", c), -1;
    }
    cp = 0;
    for (int i = 0; i < n; i++) {
        if ((v = hexval(peek(p))) < 0)
            return gp_fail(p, at, "escape '\\%c' needs %d hex digits", c, n), -1;
        cp = cp * 16 + v;
        p->pos++;
    }
    if (cp > HY_GBNF_MAX_CP || (cp >= 0xD800 && cp <= 0xDFFF))
        return gp_fail(p, at, "escape gives U+%llX, which is not a Unicode scalar value",
                       (unsigned long long)cp), -1;
    return cp;
}

/* ---- primaries --------------------------------------------------------------- */

static int32_t parse_literal(gp_t *p)
{
    hy_gbnf_t *g = p->g;
    size_t at = p->pos;
    int32_t off = g->n_lits;

    p->pos++; /* the opening quote */
    while (peek(p) != '"') {
        char buf[4];
        int64_t cp;
        int n;

        if (peek(p) < 0 || peek(p) == '\n')
            return gp_fail(p, at, "unterminated string literal"), -1;
        if ((cp = read_char(p)) < 0)
            return -1;
        n = (int)hy_uni_encode((uint32_t)cp, buf);
        if (HY_GBNF_GROW(g->lits, g->cap_lits, g->n_lits + n) != HY_OK)
            return gp_nomem(p), -1;
        memcpy(g->lits + g->n_lits, buf, (size_t)n);
        g->n_lits += n;
    }
    p->pos++;
    if (g->n_lits == off)
        return node_add(p, HY_GBNF_EMPTY, 0, 0);
    return node_add(p, HY_GBNF_LIT, off, g->n_lits - off);
}

static int range_cmp(const void *a, const void *b)
{
    const hy_gbnf_range_t *x = a, *y = b;

    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges g->ranges[off..) in place, complementing them over
 * 0..U+10FFFF when negate; returns the new count. */
static int32_t ranges_normalise(gp_t *p, int32_t off, bool negate)
{
    hy_gbnf_t *g = p->g;
    int32_t n = g->n_ranges - off, m = 0;
    /* an empty class ([] or [^]) first in the grammar: ranges is still NULL */
    hy_gbnf_range_t *r = n > 0 ? g->ranges + off : NULL;

    if (n > 1)
        qsort(r, (size_t)n, sizeof *r, range_cmp);
    for (int32_t i = 0; i < n; i++) {
        if (m > 0 && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi)
                r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    if (negate) {
        /* the complement of m disjoint ranges has at most m + 1 */
        hy_gbnf_range_t *tmp = malloc(sizeof *tmp * (size_t)(m + 1));
        uint32_t next = 0;
        int32_t k = 0;

        if (tmp == NULL)
            return gp_nomem(p), -1;
        for (int32_t i = 0; i < m; i++) {
            if (r[i].lo > next)
                tmp[k++] = (hy_gbnf_range_t){ next, r[i].lo - 1 };
            next = r[i].hi + 1;
        }
        if (next <= HY_GBNF_MAX_CP)
            tmp[k++] = (hy_gbnf_range_t){ next, HY_GBNF_MAX_CP };
        if (HY_GBNF_GROW(g->ranges, g->cap_ranges, off + k) != HY_OK) {
            free(tmp);
            return gp_nomem(p), -1;
        }
        memcpy(g->ranges + off, tmp, sizeof *tmp * (size_t)k);
        free(tmp);
        m = k;
    }
    g->n_ranges = off + m;
    return m;
}

static int32_t parse_class(gp_t *p)
{
    hy_gbnf_t *g = p->g;
    size_t at = p->pos;
    int32_t off = g->n_ranges, n;
    bool negate = false;

    p->pos++; /* '[' */
    if (peek(p) == '^') {
        negate = true;
        p->pos++;
    }
    while (peek(p) != ']') {
        int64_t lo, hi;

        if (peek(p) < 0 || peek(p) == '\n')
            return gp_fail(p, at, "unterminated character class"), -1;
        if ((lo = read_char(p)) < 0)
            return -1;
        hi = lo;
        if (peek(p) == '-' && p->pos + 1 < p->len && p->src[p->pos + 1] != ']') {
            size_t rat = p->pos;

            p->pos++;
            if ((hi = read_char(p)) < 0)
                return -1;
            if (hi < lo)
                return gp_fail(p, rat, "range U+%04llX-U+%04llX is reversed",
                               (unsigned long long)lo, (unsigned long long)hi), -1;
        }
        if (HY_GBNF_GROW(g->ranges, g->cap_ranges, g->n_ranges + 1) != HY_OK)
            return gp_nomem(p), -1;
        g->ranges[g->n_ranges++] = (hy_gbnf_range_t){ (uint32_t)lo, (uint32_t)hi };
    }
    p->pos++;
    if ((n = ranges_normalise(p, off, negate)) < 0)
        return -1;
    if (n == 0)
        return gp_fail(p, at, "character class matches nothing"), -1;
    return node_add(p, HY_GBNF_CLASS, off, n);
}

static int32_t parse_alts(gp_t *p, bool nested);

/* An unsigned decimal for {m,n}; -1 when absent. */
static int64_t parse_count(gp_t *p)
{
    int64_t v = -1;

    while (peek(p) >= '0' && peek(p) <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (peek(p) - '0');
        if (v > HY_GBNF_MAX_REPEAT)
            v = HY_GBNF_MAX_REPEAT + 1; /* reported by the caller */
        p->pos++;
    }
    return v;
}

/* x{m}, x{m,}, x{m,n}, x{,n} after the '{'. */
static int parse_braces(gp_t *p, size_t at, int32_t *min, int32_t *max)
{
    int64_t m, n;

    skip_space(p, false);
    m = parse_count(p);
    skip_space(p, false);
    if (peek(p) == '}') {
        if (m < 0)
            return gp_fail(p, at, "empty repetition count {}");
        n = m;
    } else if (peek(p) == ',') {
        p->pos++;
        skip_space(p, false);
        n = parse_count(p);
        skip_space(p, false);
        if (m < 0)
            m = 0;
        if (peek(p) != '}')
            return gp_fail(p, p->pos, "expected '}' to close the repetition count");
    } else {
        return gp_fail(p, p->pos, "expected a number, ',' or '}' in a repetition count");
    }
    p->pos++;
    if (m > HY_GBNF_MAX_REPEAT || n > HY_GBNF_MAX_REPEAT)
        return gp_fail(p, at, "repetition count over %d", HY_GBNF_MAX_REPEAT);
    if (n >= 0 && n < m)
        return gp_fail(p, at, "repetition {%lld,%lld}: the maximum is below the minimum",
                       (long long)m, (long long)n);
    *min = (int32_t)m;
    *max = (int32_t)n;
    return HY_OK;
}

static int32_t parse_primary(gp_t *p, bool nested)
{
    size_t at = p->pos;
    int c = peek(p);
    int32_t e;

    if (c == '"')
        return parse_literal(p);
    if (c == '[')
        return parse_class(p);
    if (c == '.') {
        hy_gbnf_t *g = p->g;
        int32_t off = g->n_ranges;

        p->pos++;
        if (HY_GBNF_GROW(g->ranges, g->cap_ranges, off + 1) != HY_OK)
            return gp_nomem(p), -1;
        g->ranges[g->n_ranges++] = (hy_gbnf_range_t){ 0, HY_GBNF_MAX_CP };
        return node_add(p, HY_GBNF_CLASS, off, 1);
    }
    if (c == '(') {
        if (++p->depth > HY_GBNF_MAX_DEPTH)
            return gp_fail(p, at, "groups nested deeper than %d", HY_GBNF_MAX_DEPTH), -1;
        p->pos++;
        skip_space(p, true);
        e = parse_alts(p, true);
        if (e < 0)
            return -1;
        skip_space(p, true);
        if (peek(p) != ')')
            return gp_fail(p, p->pos, "expected ')' to close the group opened at offset %zu", at),
                   -1;
        p->pos++;
        p->depth--;
        return e;
    }
    if (is_word(c)) {
        size_t start = p->pos;
        int32_t r;

        while (is_word(peek(p)))
            p->pos++;
        r = rule_get(p, p->src + start, p->pos - start, start);
        if (r < 0)
            return -1;
        return node_add(p, HY_GBNF_REF, r, 0);
    }
    (void)nested;
    if (c < 0)
        return gp_fail(p, at, "unexpected end of the grammar"), -1;
    if (c >= 0x20 && c < 0x7F)
        return gp_fail(p, at, "unexpected '%c'", c), -1;
    return gp_fail(p, at, "unexpected byte 0x%02x", c), -1;
}

/* Items until '|', ')', the end of the line (outside groups) or the end. */
static int32_t parse_seq(gp_t *p, bool nested)
{
    int32_t *items = NULL, n = 0, cap = 0, e = -1;

    for (;;) {
        int c;
        int32_t item;

        skip_space(p, nested);
        c = peek(p);
        if (c < 0 || c == '|' || c == ')' || c == '\n')
            break;
        if ((item = parse_primary(p, nested)) < 0)
            goto done;
        for (;;) {
            size_t at = p->pos;
            int32_t min = 0, max = 0, r;

            c = peek(p);
            if (c == '*')
                min = 0, max = -1;
            else if (c == '+')
                min = 1, max = -1;
            else if (c == '?')
                min = 0, max = 1;
            else if (c != '{')
                break;
            p->pos++;
            if (c == '{' && parse_braces(p, at, &min, &max) != HY_OK)
                goto done;
            if ((r = node_add(p, HY_GBNF_REP, item, 0)) < 0)
                goto done;
            p->g->nodes[r].min = min;
            p->g->nodes[r].max = max;
            item = r;
        }
        if (HY_GBNF_GROW(items, cap, n + 1) != HY_OK) {
            gp_nomem(p);
            goto done;
        }
        items[n++] = item;
    }
    e = node_list(p, HY_GBNF_SEQ, items, n);
done:
    free(items);
    return p->rc == HY_OK ? e : -1;
}

/* At a top-level newline: does the rule continue with '|' on a later line? */
static bool continues(gp_t *p)
{
    size_t save = p->pos;

    skip_space(p, true);
    if (peek(p) == '|')
        return true;
    p->pos = save;
    return false;
}

static int32_t parse_alts(gp_t *p, bool nested)
{
    int32_t *alts = NULL, n = 0, cap = 0, e = -1, s;

    for (;;) {
        if ((s = parse_seq(p, nested)) < 0)
            goto done;
        if (HY_GBNF_GROW(alts, cap, n + 1) != HY_OK) {
            gp_nomem(p);
            goto done;
        }
        alts[n++] = s;
        skip_space(p, nested);
        if (peek(p) == '\n' && !nested && !continues(p))
            break;
        if (peek(p) != '|')
            break;
        p->pos++;
        skip_space(p, true);
    }
    e = node_list(p, HY_GBNF_ALT, alts, n);
done:
    free(alts);
    return p->rc == HY_OK ? e : -1;
}

static int parse_rule(gp_t *p)
{
    size_t start = p->pos;
    int32_t r, e;

    if (!is_word(peek(p)))
        return gp_fail(p, start, "expected a rule name");
    while (is_word(peek(p)))
        p->pos++;
    if ((r = rule_get(p, p->src + start, p->pos - start, start)) < 0)
        return p->rc;
    if (p->g->rules[r].expr >= 0)
        return gp_fail(p, start, "rule '%.64s' is defined twice (first at offset %d)",
                       p->g->rules[r].name, p->g->rules[r].def_off);
    p->rule = r;
    p->g->rules[r].def_off = (int32_t)start;
    skip_space(p, false);
    if (p->len - p->pos < 3 || memcmp(p->src + p->pos, "::=", 3) != 0)
        return gp_fail(p, p->pos, "expected '::=' after the rule name");
    p->pos += 3;
    skip_space(p, true);
    if ((e = parse_alts(p, false)) < 0)
        return p->rc;
    p->g->rules[r].expr = e;
    skip_space(p, false);
    if (peek(p) >= 0 && peek(p) != '\n')
        return gp_fail(p, p->pos, peek(p) == ')' ? "unbalanced ')'" : "unexpected '%c'", peek(p));
    p->rule = -1;
    return HY_OK;
}

/* The end of the quoted literal or class starting at i (its closing byte
 * included), or len when it is left open. */
static size_t quoted_end(const char *src, size_t len, size_t i, char close)
{
    for (i++; i < len && src[i] != close; i++)
        if (src[i] == '\\' && i + 1 < len)
            i++;
    return i < len ? i + 1 : len + 1;
}

int hy_gbnf_prefix(const char *src, size_t len, const char *prefix, char **out, size_t *out_len,
                   char *err)
{
    size_t pl = strlen(prefix), cap = len * (pl + 1) + 1, n = 0, i = 0;
    char *o;

    /* every name is at least one byte, so at most len names grow */
    if ((o = malloc(cap)) == NULL)
        return hy_err(err, HY_ENOMEM, "grammar: out of memory");
    while (i < len) {
        char c = src[i];
        size_t j = i + 1;

        if (c == '"' || c == '[') {
            if ((j = quoted_end(src, len, i, c == '"' ? '"' : ']')) > len) {
                free(o);
                return hy_err(err, HY_EFORMAT, "grammar: offset %zu: %s left open", i,
                              c == '"' ? "literal" : "character class");
            }
        } else if (c == '#') {
            while (j < len && src[j] != '\n')
                j++;
        } else if (c == '{') {
            while (j < len && src[j] != '}')
                j++;
        } else if (is_word((unsigned char)c)) {
            while (j < len && is_word((unsigned char)src[j]))
                j++;
            memcpy(o + n, prefix, pl);
            n += pl;
        }
        memcpy(o + n, src + i, j - i);
        n += j - i;
        i = j;
    }
    o[n] = '\0';
    *out = o;
    *out_len = n;
    return HY_OK;
}

int hy_gbnf_parse(hy_gbnf_t *g, const char *src, size_t len, char *err)
{
    gp_t p = { .g = g, .src = src, .len = len, .rule = -1, .err = err };
    int32_t i;

    memset(g, 0, sizeof *g);
    g->root = -1;
    for (;;) {
        skip_space(&p, true);
        if (p.pos >= len)
            break;
        if (parse_rule(&p) != HY_OK)
            goto fail;
    }
    for (i = 0; i < g->n_rules; i++) {
        if (g->rules[i].expr < 0) {
            p.rule = -1;
            gp_fail(&p, (size_t)g->rules[i].use_off, "rule '%.64s' is used but never defined",
                    g->rules[i].name);
            goto fail;
        }
    }
    g->root = hy_gbnf_find(g, "root");
    if (g->root < 0) {
        p.rc = hy_err(err, HY_EFORMAT, "grammar: no rule named 'root' (the start rule)");
        goto fail;
    }
    return HY_OK;
fail:
    hy_gbnf_free(g);
    return p.rc;
}

void hy_gbnf_free(hy_gbnf_t *g)
{
    if (g == NULL)
        return;
    for (int32_t i = 0; i < g->n_rules; i++)
        free(g->rules[i].name);
    free(g->rules);
    free(g->nodes);
    free(g->kids);
    free(g->lits);
    free(g->ranges);
    memset(g, 0, sizeof *g);
    g->root = -1;
}
