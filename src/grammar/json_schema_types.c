/*
 * json_schema_types.c - the scalar half of JSON Schema -> GBNF: strings
 * (length bounds, patterns, formats), numbers and integers with exact
 * range grammars, and enum/const values as literals.
 *
 * Ranges are built digit by digit, the way one compares decimal numbers:
 * an integer range splits by digit count, then each same-length range
 * [lo, hi] splits at the first differing digit into "lo's digit then
 * >= the rest of lo", "a digit strictly between, then anything", "hi's
 * digit then <= the rest of hi".  Fractions compare the same way after the
 * integer part.  Numbers with bounds are written without an exponent.
 */
#include "grammar/json_schema_impl.h"
#include "grammar/regex.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INT_DIGITS 16  /* integer digits of any generated number */
#define MAX_FRAC_DIGITS 16 /* fraction digits of an unconstrained fraction */

static const cJSON *get(const cJSON *s, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(s, k);
}

/* ---- literals ---------------------------------------------------------------- */

int hy_jsg_literal(hy_jsg_t *g, const cJSON *v, hy_gtext_t *out)
{
    char *text = cJSON_PrintUnformatted(v);

    if (text == NULL)
        return hy_jsg_fail(g, HY_ENOMEM, "out of memory");
    hy_gtext_literal(out, text, strlen(text));
    free(text);
    return HY_OK;
}

/* ---- strings ------------------------------------------------------------------ */

typedef struct {
    const char *name, *gbnf;
} format_t;

#define F_DATE                                                                                  \
    "( [1-9] [0-9]{3} | \"0\" [1-9] [0-9]{2} | \"00\" [1-9] [0-9] | \"000\" [1-9] ) \"-\" ( "   \
    "( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | "        \
    "( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "                    \
    "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )"
#define F_TIME                                                                                  \
    "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "   \
    "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"
#define F_NUM "[0-9]{1,4}"
#define F_DUR_TIME                                                                              \
    "\"T\" ( " F_NUM " \"H\" ( " F_NUM " \"M\" )? ( " F_NUM " \"S\" )? | " F_NUM               \
    " \"M\" ( " F_NUM " \"S\" )? | " F_NUM " \"S\" )"
#define F_LABEL "[a-zA-Z0-9] ( [a-zA-Z0-9-]{0,30} [a-zA-Z0-9] )?"
#define F_HOST F_LABEL " ( \".\" " F_LABEL " ){0,4}"

/* Formats as GBNF for the string content (all ASCII, nothing to escape).
 * Each is a subset of its RFC's syntax that every validator accepts:
 * dates exist (no February 29), times have a zone, no leap seconds,
 * IPv6 is the full eight-group form. */
static const format_t k_formats[] = {
    {"date", F_DATE},
    {"time", F_TIME},
    {"date-time", F_DATE " \"T\" " F_TIME},
    {"duration", "\"P\" ( ( " F_NUM " \"Y\" ( " F_NUM " \"M\" )? ( " F_NUM " \"D\" )? | " F_NUM
                 " \"M\" ( " F_NUM " \"D\" )? | " F_NUM " \"D\" ) ( " F_DUR_TIME " )? | " F_NUM
                 " \"W\" | " F_DUR_TIME " )"},
    {"email", "[a-zA-Z0-9_%+-]{1,32} ( \".\" [a-zA-Z0-9_%+-]{1,32} ){0,3} \"@\" " F_LABEL
              " ( \".\" " F_LABEL " ){0,3} \".\" [a-zA-Z]{2,10}"},
    {"hostname", F_HOST},
    {"ipv4", "( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9]{2} | [1-9] [0-9] | [0-9] ) "
             "( \".\" ( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9]{2} | [1-9] [0-9] | [0-9] ) "
             "){3}"},
    {"ipv6", "[0-9a-fA-F]{1,4} ( \":\" [0-9a-fA-F]{1,4} ){7}"},
    {"uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} "
             "\"-\" [0-9a-fA-F]{12}"},
    {"uri", "[a-zA-Z] [a-zA-Z0-9+.-]{0,15} \"://\" " F_HOST " ( \":\" [0-9]{1,5} )? "
            "( \"/\" [a-zA-Z0-9._~%!$&'()*+,;=:@-]{0,32} ){0,8} "
            "( \"?\" [a-zA-Z0-9._~%!$&'()*+,;=:@/?-]{0,64} )?"},
};

/* A non-negative integer keyword, -1 when absent. */
static int count_kw(hy_jsg_t *g, const cJSON *s, const char *k, long *out)
{
    const cJSON *v = get(s, k);

    *out = -1;
    if (v == NULL)
        return HY_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
        return hy_jsg_fail(g, HY_EINVAL, "'%s' must be a non-negative integer", k);
    if (v->valuedouble > 100000)
        return hy_jsg_fail(g, HY_ERANGE, "'%s' = %.0f: at most 100000 is supported", k,
                           v->valuedouble);
    *out = (long)v->valuedouble;
    return HY_OK;
}

int hy_jsg_string(hy_jsg_t *g, const cJSON *s, hy_gtext_t *out)
{
    const cJSON *fmt = get(s, "format"), *pat = get(s, "pattern");
    long min, max;

    if (count_kw(g, s, "minLength", &min) != HY_OK || count_kw(g, s, "maxLength", &max) != HY_OK)
        return g->rc;
    if (max >= 0 && min > max)
        return hy_jsg_fail(g, HY_EINVAL, "maxLength %ld is below minLength %ld", max, min);
    if (fmt != NULL && pat != NULL)
        return hy_jsg_fail(g, HY_EUNSUPPORTED, "'format' together with 'pattern' is not supported");
    if ((fmt != NULL || pat != NULL) && (min >= 0 || max >= 0))
        return hy_jsg_fail(g, HY_EUNSUPPORTED,
                           "'%s' together with minLength/maxLength is not supported",
                           fmt ? "format" : "pattern");
    if (fmt != NULL) {
        if (!cJSON_IsString(fmt))
            return hy_jsg_fail(g, HY_EINVAL, "'format' must be a string");
        for (size_t i = 0; i < HY_ARRAY_LEN(k_formats); i++) {
            if (strcmp(fmt->valuestring, k_formats[i].name) == 0) {
                char key[64];
                hy_gtext_t body = { 0 };
                const char *rule;

                snprintf(key, sizeof key, "format-%s", k_formats[i].name);
                hy_gtext_printf(&body, "\"\\\"\" %s \"\\\"\"", k_formats[i].gbnf);
                rule = body.oom ? NULL : hy_jsg_shared(g, key, body.s);
                hy_gtext_free(&body);
                if (rule == NULL)
                    return hy_jsg_fail(g, HY_ENOMEM, "out of memory");
                hy_gtext_puts(out, rule);
                return HY_OK;
            }
        }
        return hy_jsg_fail(g, HY_EUNSUPPORTED,
                           "format '%.64s' is not supported (supported: date, time, date-time, "
                           "duration, email, hostname, ipv4, ipv6, uuid, uri)",
                           fmt->valuestring);
    }
    if (pat != NULL) {
        char err[HY_ERR_LEN], key[600];
        hy_gtext_t body = { 0 };
        const char *rule;
        int rc;

        if (!cJSON_IsString(pat))
            return hy_jsg_fail(g, HY_EINVAL, "'pattern' must be a string");
        hy_gtext_puts(&body, "\"\\\"\" ");
        rc = hy_regex_to_gbnf(pat->valuestring, strlen(pat->valuestring),
                              hy_jsg_builtin(g, HY_JSG_CHAR), &body, err);
        if (rc != HY_OK) {
            hy_gtext_free(&body);
            return hy_jsg_fail(g, rc == HY_ENOMEM ? HY_ENOMEM : HY_EUNSUPPORTED, "pattern: %s", err);
        }
        hy_gtext_puts(&body, " \"\\\"\"");
        snprintf(key, sizeof key, "pattern %s", pat->valuestring);
        rule = body.oom ? NULL : hy_jsg_shared(g, key, body.s);
        hy_gtext_free(&body);
        if (rule == NULL)
            return hy_jsg_fail(g, HY_ENOMEM, "out of memory");
        hy_gtext_puts(out, rule);
        return HY_OK;
    }
    if (min <= 0 && max < 0) {
        hy_gtext_puts(out, hy_jsg_builtin(g, HY_JSG_STRING));
        return HY_OK;
    }
    {
        char key[64], body[160];
        const char *rule;

        min = min < 0 ? 0 : min;
        snprintf(key, sizeof key, "string-%ld-%ld", min, max);
        snprintf(body, sizeof body, "\"\\\"\" %s{%ld,%s} \"\\\"\"", hy_jsg_builtin(g, HY_JSG_CHAR),
                 min, max >= 0 ? "" : "");
        if (max >= 0)
            snprintf(body, sizeof body, "\"\\\"\" %s{%ld,%ld} \"\\\"\"",
                     hy_jsg_builtin(g, HY_JSG_CHAR), min, max);
        if ((rule = hy_jsg_shared(g, key, body)) == NULL)
            return hy_jsg_fail(g, HY_ENOMEM, "out of memory");
        hy_gtext_puts(out, rule);
    }
    return HY_OK;
}

/* ---- integer ranges ------------------------------------------------------------- */

/* Same-length digit strings lo <= hi (n digits): every string between. */
static void same_len(hy_gtext_t *o, const char *lo, const char *hi, size_t n)
{
    size_t i = 0, r;
    bool lo_zero = true, hi_nine = true;
    char a, b, start, end, nines[MAX_INT_DIGITS + 1], zeros[MAX_INT_DIGITS + 1];
    bool first = true;

    while (i < n && lo[i] == hi[i])
        i++;
    if (i > 0)
        hy_gtext_printf(o, "\"%.*s\" ", (int)i, lo);
    if (i == n)
        return;
    r = n - i - 1;
    for (size_t k = i + 1; k < n; k++) {
        lo_zero &= lo[k] == '0';
        hi_nine &= hi[k] == '9';
    }
    a = lo[i];
    b = hi[i];
    start = lo_zero ? a : (char)(a + 1);
    end = hi_nine ? b : (char)(b - 1);
    memset(nines, '9', r);
    memset(zeros, '0', r);
    hy_gtext_puts(o, "( ");
    if (!lo_zero) {
        hy_gtext_printf(o, "\"%c\" ", a);
        same_len(o, lo + i + 1, nines, r);
        first = false;
    }
    if (start <= end) {
        hy_gtext_printf(o, "%s[%c-%c]", first ? "" : " | ", start, end);
        if (r > 0)
            hy_gtext_printf(o, " [0-9]{%zu}", r);
        first = false;
    }
    if (!hi_nine) {
        hy_gtext_printf(o, "%s\"%c\" ", first ? "" : " | ", b);
        same_len(o, zeros, hi + i + 1, r);
    }
    hy_gtext_puts(o, " )");
}

static int n_digits(int64_t v)
{
    int d = 1;

    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* Unsigned integers in [a, b] (b < 0: no upper bound), no leading zeros;
 * appends alternatives, each preceded by " | " unless *first. */
static void uint_range(hy_gtext_t *o, int64_t a, int64_t b, bool *first)
{
    int da = n_digits(a), db = b < 0 ? MAX_INT_DIGITS : n_digits(b);
    int64_t p10 = 1;

    for (int i = 1; i < da; i++)
        p10 *= 10;
    for (int d = da; d <= db; d++, p10 *= 10) {
        int64_t lo = d == 1 ? 0 : p10, hi = p10 * 10 - 1;
        char ls[24], hs[24];

        if (lo < a)
            lo = a;
        if (b >= 0 && hi > b)
            hi = b;
        if (lo > hi)
            continue;
        hy_gtext_puts(o, *first ? "" : " | ");
        *first = false;
        if (b < 0 && d > da && lo == p10) {
            /* every longer number: one alternative for all lengths left */
            hy_gtext_printf(o, "[1-9] [0-9]{%d,%d}", d - 1, MAX_INT_DIGITS - 1);
            return;
        }
        snprintf(ls, sizeof ls, "%lld", (long long)lo);
        snprintf(hs, sizeof hs, "%lld", (long long)hi);
        hy_gtext_puts(o, "( ");
        same_len(o, ls, hs, strlen(ls));
        hy_gtext_puts(o, " )");
    }
}

#define INT_LIMIT 10000000000000000LL /* 10^16: no generated number reaches it */

/* Integers in [lo, hi]; has_* false: unbounded on that side. */
static void int_range(hy_gtext_t *o, bool has_lo, int64_t lo, bool has_hi, int64_t hi)
{
    bool first = true;

    hy_gtext_puts(o, "( ");
    if (!has_lo || lo < 0) {
        int64_t mlo = has_hi && hi < 0 ? -hi : 1, mhi = has_lo ? -lo : -1;
        bool f2 = true;

        hy_gtext_puts(o, "\"-\" ( ");
        uint_range(o, mlo, mhi, &f2);
        hy_gtext_puts(o, " )");
        first = false;
    }
    if (!has_hi || hi >= 0)
        uint_range(o, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1, &first);
    hy_gtext_puts(o, " )");
}

/* ---- decimal ranges ----------------------------------------------------------------- */

typedef struct {
    char ip[24]; /* integer digits, no leading zeros ("0" for zero) */
    char fp[40]; /* fraction digits, no trailing zeros */
    bool big;    /* |v| >= 10^16 */
} dec_t;

/* |v| as decimal digits, with the shortest representation that reads
 * back as v (so 0.1 is "0" and "1", not 0.1000000000000000055...). */
static void dec_from(double v, dec_t *d)
{
    char buf[64], digits[32];
    int p, e, nd = 0;

    memset(d, 0, sizeof *d);
    v = fabs(v);
    if (v >= 1e16) {
        d->big = true;
        return;
    }
    for (p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    for (const char *c = buf; *c && *c != 'e'; c++)
        if (*c >= '0' && *c <= '9')
            digits[nd++] = *c;
    digits[nd] = '\0';
    e = atoi(strchr(buf, 'e') + 1);
    if (e >= 0) {
        int k;

        for (k = 0; k <= e; k++)
            d->ip[k] = k < nd ? digits[k] : '0';
        d->ip[k] = '\0';
        snprintf(d->fp, sizeof d->fp, "%s", e + 1 < nd ? digits + e + 1 : "");
    } else {
        int z = -e - 1;

        strcpy(d->ip, "0");
        if (z + nd < (int)sizeof d->fp) {
            memset(d->fp, '0', (size_t)z);
            memcpy(d->fp + z, digits, (size_t)nd + 1);
        }
    }
    /* normalise: "0" for zero integer parts, no trailing fraction zeros */
    {
        size_t i = 0, n = strlen(d->fp);

        while (d->ip[i] == '0' && d->ip[i + 1])
            i++;
        memmove(d->ip, d->ip + i, strlen(d->ip + i) + 1);
        while (n > 0 && d->fp[n - 1] == '0')
            d->fp[--n] = '\0';
    }
}

static const char k_empty[] = "";

typedef struct {
    bool ok;
    const char *lo, *hi; /* the bounds left for the following digits */
} succ_t;

/* Where the bounds stand after fraction digit c. */
static succ_t after_digit(const char *lo, const char *hi, bool ls, bool hs, char c)
{
    succ_t r = { true, NULL, NULL };

    if (lo != NULL) {
        if (*lo == '\0')
            r.lo = ls && c == '0' ? k_empty : NULL; /* strict: a nonzero digit must come */
        else if (c == *lo)
            r.lo = lo + 1;
        else if (c < *lo)
            r.ok = false;
    }
    if (hi != NULL) {
        if (*hi == '\0') {
            r.ok = r.ok && !hs && c == '0'; /* only zeros stay <= hi */
            r.hi = k_empty;
        } else if (c == *hi) {
            r.hi = hi + 1;
        } else if (c > *hi) {
            r.ok = false;
        }
    }
    return r;
}

/*
 * Fraction digits f (what follows the point; possibly none, meaning
 * zeros) with 0.f >= 0.lo (> when ls) and 0.f <= 0.hi (< when hs); lo/hi
 * NULL: that side is free.  need: at least one digit.  Returns false when
 * no string qualifies.
 */
static bool frac(hy_gtext_t *o, const char *lo, const char *hi, bool ls, bool hs, int depth,
                 bool need)
{
    bool stop = !need && (lo == NULL || (*lo == '\0' && !ls)) &&
                (hi == NULL || !hs || *hi != '\0');
    bool any = false;
    succ_t next[10];

    if (lo == NULL && hi == NULL) {
        hy_gtext_printf(o, "[0-9]{%d,%d}", need ? 1 : 0, MAX_FRAC_DIGITS);
        return true;
    }
    if (depth > 2 * MAX_FRAC_DIGITS + 8) {
        if (stop)
            hy_gtext_puts(o, "\"\"");
        return stop;
    }
    for (int c = 0; c < 10; c++)
        next[c] = after_digit(lo, hi, ls, hs, (char)('0' + c));
    hy_gtext_puts(o, "( ");
    if (stop) {
        hy_gtext_puts(o, "\"\"");
        any = true;
    }
    for (int c = 0, c2; c < 10; c = c2 + 1) {
        hy_gtext_t sub = { 0 };

        /* digits with the same successor form one class */
        for (c2 = c; c2 < 9 && next[c2 + 1].ok == next[c].ok && next[c2 + 1].lo == next[c].lo &&
                     next[c2 + 1].hi == next[c].hi;
             c2++)
            ;
        if (next[c].ok && frac(&sub, next[c].lo, next[c].hi, ls, hs, depth + 1, false)) {
            hy_gtext_puts(o, any ? " | " : "");
            if (c2 > c)
                hy_gtext_printf(o, "[%c-%c] ", '0' + c, '0' + c2);
            else
                hy_gtext_printf(o, "\"%c\" ", '0' + c);
            hy_gtext_puts(o, hy_gtext_of(o, &sub, ""));
            any = true;
        }
        hy_gtext_free(&sub);
    }
    hy_gtext_puts(o, " )");
    return any;
}

/* The optional fraction part ("." digits) of a number whose integer part
 * is fixed. */
static bool frac_part(hy_gtext_t *o, const char *lo, const char *hi, bool ls, bool hs)
{
    hy_gtext_t d = { 0 };
    bool none = (lo == NULL || (*lo == '\0' && !ls)) && (hi == NULL || !hs || *hi != '\0');
    bool digits = frac(&d, lo, hi, ls, hs, 0, true);

    if (digits && none)
        hy_gtext_printf(o, "( \".\" %s )?", hy_gtext_of(o, &d, ""));
    else if (digits)
        hy_gtext_printf(o, "\".\" %s", hy_gtext_of(o, &d, ""));
    else if (none)
        hy_gtext_puts(o, "\"\"");
    hy_gtext_free(&d);
    return digits || none;
}

static int64_t ip_value(const char *ip)
{
    return strtoll(ip, NULL, 10);
}

/* Magnitudes y with A <= y <= B (strict per flag; B NULL: unbounded),
 * A and B not big.  Appends alternatives; false when none. */
static bool mag_range(hy_gtext_t *o, const dec_t *A, const dec_t *B, bool sa, bool sb, bool *first)
{
    int64_t ai = ip_value(A->ip), bi = B ? ip_value(B->ip) : -1;
    bool any = false;
    hy_gtext_t t = { 0 };

#define ALT(text)                                  \
    do {                                           \
        hy_gtext_puts(o, *first ? "" : " | ");     \
        *first = false;                            \
        hy_gtext_puts(o, hy_gtext_of(o, &(text), "")); \
        any = true;                                \
    } while (0)

    if (B != NULL && ai == bi) {
        hy_gtext_printf(&t, "\"%s\" ", A->ip);
        if (frac_part(&t, A->fp, B->fp, sa, sb))
            ALT(t);
        hy_gtext_free(&t);
        return any;
    }
    hy_gtext_printf(&t, "\"%s\" ", A->ip);
    if (frac_part(&t, A->fp, NULL, sa, false))
        ALT(t);
    hy_gtext_free(&t);
    if (B == NULL || bi - ai >= 2) {
        bool f = true;

        hy_gtext_puts(&t, "( ");
        uint_range(&t, ai + 1, B ? bi - 1 : -1, &f);
        hy_gtext_printf(&t, " ) ( \".\" [0-9]{1,%d} )?", MAX_FRAC_DIGITS);
        ALT(t);
        hy_gtext_free(&t);
    }
    if (B != NULL) {
        hy_gtext_printf(&t, "\"%s\" ", B->ip);
        if (frac_part(&t, NULL, B->fp, false, sb))
            ALT(t);
        hy_gtext_free(&t);
    }
#undef ALT
    return any;
}

/* ---- numbers ------------------------------------------------------------------------ */

typedef struct {
    bool has;
    double v;
    bool strict;
} bound_t;

/* minimum/exclusiveMinimum (or the maxima) as one bound, the tighter one
 * when both are given; draft 4's boolean exclusive* makes the other strict. */
static int read_bound(hy_jsg_t *g, const cJSON *s, bool upper, bound_t *b)
{
    const char *inc = upper ? "maximum" : "minimum";
    const char *exc = upper ? "exclusiveMaximum" : "exclusiveMinimum";
    const cJSON *i = get(s, inc), *e = get(s, exc);

    memset(b, 0, sizeof *b);
    if (i != NULL) {
        if (!cJSON_IsNumber(i) || !isfinite(i->valuedouble))
            return hy_jsg_fail(g, HY_EINVAL, "'%s' must be a number", inc);
        b->has = true;
        b->v = i->valuedouble;
    }
    if (cJSON_IsBool(e)) {
        if (cJSON_IsTrue(e) && !b->has)
            return hy_jsg_fail(g, HY_EINVAL, "'%s': true needs '%s'", exc, inc);
        b->strict = cJSON_IsTrue(e);
    } else if (e != NULL) {
        double v;

        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble))
            return hy_jsg_fail(g, HY_EINVAL, "'%s' must be a number", exc);
        v = e->valuedouble;
        if (!b->has || (upper ? v <= b->v : v >= b->v)) {
            b->has = true;
            b->v = v;
            b->strict = true;
        }
    }
    return HY_OK;
}

int hy_jsg_number(hy_jsg_t *g, const cJSON *s, bool integer, hy_gtext_t *out)
{
    const cJSON *mult = get(s, "multipleOf");
    bound_t lo, hi;

    if (mult != NULL) {
        if (!cJSON_IsNumber(mult) || mult->valuedouble != 1.0)
            return hy_jsg_fail(g, HY_EUNSUPPORTED,
                               "'multipleOf' other than 1 is not supported");
        integer = true; /* multipleOf 1 = an integer */
    }
    if (read_bound(g, s, false, &lo) != HY_OK || read_bound(g, s, true, &hi) != HY_OK)
        return g->rc;
    if (lo.has && hi.has && (lo.v > hi.v || (lo.v == hi.v && (lo.strict || hi.strict))))
        return hy_jsg_fail(g, HY_EINVAL, "the range of values is empty");
    if (integer) {
        int64_t a = 0, b = 0;
        bool ha = lo.has, hb = hi.has;

        if (ha) {
            double f = lo.strict ? floor(lo.v) + 1 : ceil(lo.v);

            if (f >= (double)INT_LIMIT)
                return hy_jsg_fail(g, HY_ERANGE, "minimum %g is beyond the 16-digit integers "
                                                 "generated", lo.v);
            /* below every generated integer: no lower bound (and no
             * conversion: 1e61 has no int64_t) */
            ha = f > -(double)INT_LIMIT;
            a = ha ? (int64_t)f : 0;
        }
        if (hb) {
            double f = hi.strict ? ceil(hi.v) - 1 : floor(hi.v);

            if (f <= -(double)INT_LIMIT)
                return hy_jsg_fail(g, HY_ERANGE, "maximum %g is beyond the 16-digit integers "
                                                 "generated", hi.v);
            hb = f < (double)INT_LIMIT;
            b = hb ? (int64_t)f : 0;
        }
        if (!ha && !hb) {
            hy_gtext_puts(out, hy_jsg_builtin(g, HY_JSG_INT));
            return HY_OK;
        }
        if (ha && hb && a > b)
            return hy_jsg_fail(g, HY_EINVAL, "no integer lies in the range");
        int_range(out, ha, a, hb, b);
        return HY_OK;
    }
    if (!lo.has && !hi.has) {
        hy_gtext_puts(out, hy_jsg_builtin(g, HY_JSG_NUMBER));
        return HY_OK;
    }
    {
        bool first = true, any = false;
        dec_t A, B;

        hy_gtext_puts(out, "( ");
        /* negative values: "-" then a magnitude in [max(0, -hi), -lo] */
        if (!lo.has || lo.v < 0) {
            bool f2 = true, a_strict = true;
            hy_gtext_t neg = { 0 };

            memset(&A, 0, sizeof A);
            strcpy(A.ip, "0");
            if (hi.has && hi.v < 0) {
                dec_from(hi.v, &A);
                a_strict = hi.strict;
                if (A.big)
                    return hy_jsg_fail(g, HY_ERANGE, "maximum %g is beyond the 16-digit numbers "
                                                     "generated", hi.v);
            }
            if (lo.has)
                dec_from(lo.v, &B);
            if (mag_range(&neg, &A, lo.has && !B.big ? &B : NULL, a_strict, lo.strict, &f2)) {
                hy_gtext_printf(out, "\"-\" ( %s )", hy_gtext_of(out, &neg, ""));
                first = false;
                any = true;
            }
            hy_gtext_free(&neg);
        }
        /* zero and positive values */
        if (!hi.has || hi.v > 0 || (hi.v == 0 && !hi.strict)) {
            bool a_strict = lo.has && lo.v >= 0 && lo.strict;

            memset(&A, 0, sizeof A);
            strcpy(A.ip, "0");
            if (lo.has && lo.v > 0) {
                dec_from(lo.v, &A);
                if (A.big)
                    return hy_jsg_fail(g, HY_ERANGE, "minimum %g is beyond the 16-digit numbers "
                                                     "generated", lo.v);
            }
            if (hi.has)
                dec_from(hi.v, &B);
            any |= mag_range(out, &A, hi.has && !B.big ? &B : NULL, a_strict, hi.strict, &first);
        }
        hy_gtext_puts(out, " )");
        if (!any)
            return hy_jsg_fail(g, HY_EINVAL, "the range of values is empty");
    }
    return HY_OK;
}
