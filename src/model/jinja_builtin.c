/*
 * jinja_builtin.c - the library a chat template calls into: jinja2's
 * filters and tests, and the Python str/dict methods (split, strip,
 * startswith, get, items, ...) that templates use as if they were Python.
 * Each mirrors CPython/jinja2 semantics, including their error cases.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/jinja.h"
#include "model/jinja_rt.h"

enum {
    F_TRIM, F_LENGTH, F_COUNT, F_UPPER, F_LOWER, F_TOJSON, F_STRING, F_INT, F_FLOAT, F_JOIN,
    F_DEFAULT, F_D, F_FIRST, F_LAST, F_LIST, F_ITEMS, F_REPLACE, F_SAFE, F_CAPITALIZE,
    F_INDENT, F_SELECTATTR, F_REJECTATTR, F_SELECT, F_REJECT, F_MAP, F_REVERSE, F_TITLE,
    F_ABS, F_ROUND, F_ESCAPE, F_E, F_SORT, F_DICTSORT, F_SUM,
};
static const char *const filter_names[] = {
    "trim", "length", "count", "upper", "lower", "tojson", "string", "int", "float", "join",
    "default", "d", "first", "last", "list", "items", "replace", "safe", "capitalize",
    "indent", "selectattr", "rejectattr", "select", "reject", "map", "reverse", "title",
    "abs", "round", "escape", "e", "sort", "dictsort", "sum",
};

enum {
    T_DEFINED, T_UNDEFINED, T_NONE, T_STRING, T_MAPPING, T_ITERABLE, T_NUMBER, T_SEQUENCE,
    T_BOOLEAN, T_TRUE, T_FALSE, T_INTEGER, T_FLOAT, T_CALLABLE, T_EVEN, T_ODD,
    T_DIVISIBLEBY, T_EQ, T_EQUALTO, T_EQEQ, T_NE, T_LT, T_GT, T_LE, T_GE, T_IN, T_SAMEAS,
    T_LOWER, T_UPPER,
};
static const char *const test_names[] = {
    "defined", "undefined", "none", "string", "mapping", "iterable", "number", "sequence",
    "boolean", "true", "false", "integer", "float", "callable", "even", "odd",
    "divisibleby", "eq", "equalto", "==", "ne", "lt", "gt", "le", "ge", "in", "sameas",
    "lower", "upper",
};


int hy_jrt_lookup_id(const char *const *tab, size_t nt, const char *s, size_t n)
{
    for (size_t i = 0; i < nt; i++)
        if (strlen(tab[i]) == n && !memcmp(tab[i], s, n))
            return (int)i;
    return -1;
}

int hy_jinja_filter_id(const char *s, size_t n) { return hy_jrt_lookup_id(filter_names, HY_ARRAY_LEN(filter_names), s, n); }
int hy_jinja_test_id(const char *s, size_t n) { return hy_jrt_lookup_id(test_names, HY_ARRAY_LEN(test_names), s, n); }


static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* str.strip/lstrip/rstrip with chars (None = whitespace); chars are bytes,
 * which is exact for the ASCII sets templates pass */
static jv_t strip(jv_t s, jv_t chars, bool left, bool right)
{
    const char *p = s.u.s.p;
    size_t b = 0, e = s.u.s.n;
    bool ws = chars.t != JV_STR;
#define IN_SET(c) (ws ? is_ws(c) : memchr(chars.u.s.p, (c), chars.u.s.n) != NULL)
    while (left && b < e && IN_SET(p[b]))
        b++;
    while (right && e > b && IN_SET(p[e - 1]))
        e--;
#undef IN_SET
    return jv_str(p + b, e - b);
}

static int str_split(jctx_t *C, const jnode_t *n, jv_t s, jv_t sep, int64_t maxsplit, jv_t *out)
{
    jv_list_t *l = jv_list_new(C->a, 0);
    const char *p = s.u.s.p;
    size_t len = s.u.s.n, i = 0;
    int64_t splits = 0;

    if (!l)
        return OOM(n);
    if (sep.t != JV_STR) {
        for (;;) {
            while (i < len && is_ws(p[i]))
                i++;
            if (i >= len)
                break;
            size_t st = i;
            if (maxsplit >= 0 && splits >= maxsplit) {
                size_t e = len;
                while (e > st && is_ws(p[e - 1]))
                    e--;
                if (jv_list_push(C->a, l, jv_str(p + st, e - st)) < 0)
                    return OOM(n);
                break;
            }
            while (i < len && !is_ws(p[i]))
                i++;
            if (jv_list_push(C->a, l, jv_str(p + st, i - st)) < 0)
                return OOM(n);
            splits++;
        }
    } else {
        if (sep.u.s.n == 0)
            return hy_jrt_err(C, n, HY_EINVAL, "split: empty separator");
        size_t st = 0;
        while (i + sep.u.s.n <= len && (maxsplit < 0 || splits < maxsplit)) {
            if (!memcmp(p + i, sep.u.s.p, sep.u.s.n)) {
                if (jv_list_push(C->a, l, jv_str(p + st, i - st)) < 0)
                    return OOM(n);
                i += sep.u.s.n;
                st = i;
                splits++;
            } else {
                i++;
            }
        }
        if (jv_list_push(C->a, l, jv_str(p + st, len - st)) < 0)
            return OOM(n);
    }
    out->t = JV_LIST;
    out->u.l = l;
    return HY_OK;
}

static int str_replace(jctx_t *C, const jnode_t *n, jv_t s, jv_t old, jv_t new, int64_t count, jv_t *out)
{
    jbuf_t b = hy_jrt_newbuf(C);
    int rc = HY_OK;
    size_t i = 0, st = 0;
    int64_t done = 0;

    if (old.t != JV_STR || new.t != JV_STR)
        return hy_jrt_err(C, n, HY_EINVAL, "replace() arguments must be str");
    if (old.u.s.n == 0) { /* Python inserts `new` between every character */
        size_t cnt, *off = hy_jrt_u8_offsets(C, s.u.s.p, s.u.s.n, &cnt);
        if (!off)
            return OOM(n);
        for (size_t k = 0; k <= cnt && rc >= 0; k++) {
            if (count < 0 || done < count) {
                rc = jbuf_put(&b, new.u.s.p, new.u.s.n);
                done++;
            }
            if (k < cnt && rc >= 0)
                rc = jbuf_put(&b, s.u.s.p + off[k], off[k + 1] - off[k]);
        }
    } else {
        while (rc >= 0 && i + old.u.s.n <= s.u.s.n && (count < 0 || done < count)) {
            if (!memcmp(s.u.s.p + i, old.u.s.p, old.u.s.n)) {
                rc = jbuf_put(&b, s.u.s.p + st, i - st);
                if (rc >= 0)
                    rc = jbuf_put(&b, new.u.s.p, new.u.s.n);
                i += old.u.s.n;
                st = i;
                done++;
            } else {
                i++;
            }
        }
        if (rc >= 0)
            rc = jbuf_put(&b, s.u.s.p + st, s.u.s.n - st);
    }
    if ((rc = hy_jrt_chk(C, n, rc)) < 0)
        return rc;
    *out = jv_str(b.p ? b.p : "", b.n);
    return HY_OK;
}

/* Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek and
 * Cyrillic -- the scripts chat templates meet in practice.  Python's
 * special cases (e.g. 'ß'.upper() == 'SS') are not reproduced. */
static uint32_t cp_upper(uint32_t c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7) ||
        (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) || (c >= 0x430 && c <= 0x44F))
        return c - 32;
    if (c == 0xFF)
        return 0x178;
    if (c >= 0x450 && c <= 0x45F)
        return c - 80;
    if (((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) && (c & 1))
        return c - 1;
    if (((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) && !(c & 1))
        return c - 1;
    return c;
}

static uint32_t cp_lower(uint32_t c)
{
    if ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) ||
        (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) || (c >= 0x410 && c <= 0x42F))
        return c + 32;
    if (c == 0x178)
        return 0xFF;
    if (c >= 0x400 && c <= 0x40F)
        return c + 80;
    if (((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) && !(c & 1))
        return c + 1;
    if (((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) && (c & 1))
        return c + 1;
    return c;
}

/* decodes one UTF-8 sequence at p (len >= 1); invalid bytes map to themselves */
static uint32_t u8_decode(const unsigned char *p, size_t len, size_t *adv)
{
    if (p[0] >= 0xC2 && p[0] < 0xE0 && len >= 2 && (p[1] & 0xC0) == 0x80) {
        *adv = 2;
        return ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    }
    if (p[0] >= 0xE0 && p[0] < 0xF0 && len >= 3 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80) {
        *adv = 3;
        return ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    }
    *adv = 1;
    return p[0] < 0x80 ? p[0] : 0xFFFFFFFFu; /* 4-byte and invalid: copied unchanged */
}

/* mode 0 upper, 1 lower, 2 capitalize, 3 str.title(), 4 |title */
static int str_case(jctx_t *C, const jnode_t *n, jv_t s, int mode, jv_t *out)
{
    char *o = hy_jinja_alloc(C->a, s.u.s.n + 1);
    const unsigned char *p = (const unsigned char *)s.u.s.p;
    size_t i = 0, k = 0;
    bool prev_cased = false, first = true;

    if (!o)
        return OOM(n);
    while (i < s.u.s.n) {
        size_t adv;
        uint32_t c = u8_decode(p + i, s.u.s.n - i, &adv);
        if (c == 0xFFFFFFFFu) {
            memcpy(o + k, p + i, adv);
            k += adv;
            i += adv;
            prev_cased = false;
            first = false;
            continue;
        }
        bool up = mode == 0 || (mode == 2 && first) || (mode >= 3 && !prev_cased);
        uint32_t m = up ? cp_upper(c) : cp_lower(c);
        /* case mapping keeps the encoded length in these ranges */
        if (m < 0x80 && adv == 1) {
            o[k++] = (char)m;
        } else if (m >= 0x80 && m < 0x800 && adv == 2) {
            o[k++] = (char)(0xC0 | m >> 6);
            o[k++] = (char)(0x80 | (m & 63));
        } else {
            memcpy(o + k, p + i, adv);
            k += adv;
        }
        if (mode == 3) /* str.title(): a word is a run of cased letters */
            prev_cased = cp_upper(c) != c || cp_lower(c) != c;
        else if (mode == 4) /* jinja2's title filter: words split at whitespace and -({[< */
            prev_cased = !((c < 0x80 && is_ws((char)c)) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<');
        first = false;
        i += adv;
    }
    o[k] = 0;
    *out = jv_str(o, k);
    return HY_OK;
}

int hy_jrt_method(jctx_t *C, const jnode_t *n, jv_t obj, const char *m, const jargs_t *A, jv_t *out)
{
    jv_t none = jv_none();
    if (obj.t == JV_STR) {
        if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
            jv_t ch = hy_jrt_arg(A, 0, "chars", none);
            if (ch.t != JV_STR && ch.t != JV_NONE)
                return hy_jrt_err(C, n, HY_EINVAL, "%s arg must be None or str", m);
            *out = strip(obj, ch, m[0] != 'r', m[0] != 'l');
            return HY_OK;
        }
        if (!strcmp(m, "split")) {
            jv_t sep = hy_jrt_arg(A, 0, "sep", none), mx = hy_jrt_arg(A, 1, "maxsplit", jv_int(-1));
            if ((sep.t != JV_STR && sep.t != JV_NONE) || mx.t != JV_INT)
                return hy_jrt_err(C, n, HY_EINVAL, "split() arguments must be (str|None, int)");
            return str_split(C, n, obj, sep, mx.u.i, out);
        }
        if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
            jv_t p = hy_jrt_arg(A, 0, "prefix", jv_undef(NULL));
            jv_list_t one = {.v = &p, .n = 1};
            jv_list_t *cands = p.t == JV_LIST ? p.u.l : &one;
            bool r = false;
            for (size_t i = 0; i < cands->n; i++) {
                jv_t c = cands->v[i];
                if (c.t != JV_STR)
                    return hy_jrt_err(C, n, HY_EINVAL, "%s first arg must be str or a tuple of str, not %s", m, jv_type_name(c));
                if (c.u.s.n <= obj.u.s.n &&
                    !memcmp(obj.u.s.p + (m[0] == 's' ? 0 : obj.u.s.n - c.u.s.n), c.u.s.p, c.u.s.n))
                    r = true;
            }
            *out = jv_bool(r);
            return HY_OK;
        }
        if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "capitalize") || !strcmp(m, "title"))
            return str_case(C, n, obj, m[0] == 'u' ? 0 : m[0] == 'l' ? 1 : m[0] == 'c' ? 2 : 3, out);
        if (!strcmp(m, "replace")) {
            jv_t cnt = hy_jrt_arg(A, 2, "count", jv_int(-1));
            return str_replace(C, n, obj, hy_jrt_arg(A, 0, "old", none), hy_jrt_arg(A, 1, "new", none),
                               cnt.t == JV_INT ? cnt.u.i : -1, out);
        }
        if (!strcmp(m, "find")) {
            jv_t sub = hy_jrt_arg(A, 0, "sub", none);
            if (sub.t != JV_STR)
                return hy_jrt_err(C, n, HY_EINVAL, "find() argument must be str");
            int64_t r = -1;
            for (size_t i = 0; r < 0 && i + sub.u.s.n <= obj.u.s.n; i++)
                if (!memcmp(obj.u.s.p + i, sub.u.s.p, sub.u.s.n))
                    r = (int64_t)hy_jrt_u8_len(obj.u.s.p, i);
            *out = jv_int(r);
            return HY_OK;
        }
        if (!strcmp(m, "join")) {
            jv_list_t *l;
            jbuf_t b = hy_jrt_newbuf(C);
            int rc = hy_jrt_iterate(C, n, hy_jrt_arg(A, 0, "iterable", none), &l);
            for (size_t i = 0; rc >= 0 && i < l->n; i++) {
                if (l->v[i].t != JV_STR)
                    return hy_jrt_err(C, n, HY_EINVAL, "sequence item %zu: expected str instance, %s found", i, jv_type_name(l->v[i]));
                if (i)
                    rc = hy_jrt_chk(C, n, jbuf_put(&b, obj.u.s.p, obj.u.s.n));
                if (rc >= 0)
                    rc = hy_jrt_chk(C, n, jbuf_put(&b, l->v[i].u.s.p, l->v[i].u.s.n));
            }
            if (rc < 0)
                return rc;
            *out = jv_str(b.p ? b.p : "", b.n);
            return HY_OK;
        }
    } else if (obj.t == JV_DICT && !obj.u.d->ns) {
        if (!strcmp(m, "get")) {
            jv_t k = hy_jrt_arg(A, 0, "key", none), *v;
            v = k.t == JV_STR ? jv_dict_get(obj.u.d, k.u.s.p, k.u.s.n) : NULL;
            *out = v ? *v : hy_jrt_arg(A, 1, "default", none);
            return HY_OK;
        }
        if (!strcmp(m, "items") || !strcmp(m, "keys") || !strcmp(m, "values")) {
            jv_list_t *l = jv_list_new(C->a, obj.u.d->n);
            if (!l)
                return OOM(n);
            for (size_t i = 0; i < obj.u.d->n; i++) {
                jv_t k = jv_str(obj.u.d->k[i], obj.u.d->kn[i]);
                if (m[0] == 'i') {
                    jv_list_t *t = jv_list_new(C->a, 2);
                    if (!t)
                        return OOM(n);
                    t->tuple = true;
                    t->v[0] = k;
                    t->v[1] = obj.u.d->v[i];
                    t->n = 2;
                    l->v[l->n].t = JV_LIST;
                    l->v[l->n++].u.l = t;
                } else {
                    l->v[l->n++] = m[0] == 'k' ? k : obj.u.d->v[i];
                }
            }
            out->t = JV_LIST;
            out->u.l = l;
            return HY_OK;
        }
    } else if (obj.t == JV_LOOP && !strcmp(m, "cycle")) {
        if (A->na == 0)
            return hy_jrt_err(C, n, HY_EINVAL, "no items for cycling given");
        *out = A->args[obj.u.loop->i % A->na];
        return HY_OK;
    } else if (obj.t == JV_UNDEF) {
        return hy_jrt_undef(C, n, obj);
    }
    return hy_jrt_err(C, n, HY_EUNSUPPORTED, "'%s' object has no supported method '%s'", jv_type_name(obj), m);
}

/* ---- filters ---- */
static int filter_seq(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A, jv_t *out)
{
    jv_list_t *l, *r;
    int rc;
    if ((rc = hy_jrt_iterate(C, n, v, &l)) < 0)
        return rc;
    if (!(r = jv_list_new(C->a, l->n)))
        return OOM(n);
    for (size_t i = 0; i < l->n; i++) {
        jv_t item = l->v[i], x = item;
        size_t a0 = 0;
        if (id == F_SELECTATTR || id == F_REJECTATTR || id == F_MAP) {
            jv_t attr = hy_jrt_arg(A, 0, "attribute", jv_undef(NULL));
            if (id == F_MAP && A->na == 0 && attr.t == JV_UNDEF)
                return hy_jrt_err(C, n, HY_EINVAL, "map requires a filter name or attribute=");
            if (id == F_MAP && A->na > 0) {
                /* map('filter', args...) */
                if (attr.t != JV_STR || hy_jinja_filter_id(attr.u.s.p, attr.u.s.n) < 0)
                    return hy_jrt_err(C, n, HY_EINVAL, "map: unknown filter");
                if ((rc = hy_jrt_filter(C, f, n, hy_jinja_filter_id(attr.u.s.p, attr.u.s.n), item, A->args + 1,
                                       A->na - 1, NULL, NULL, 0, &x)) < 0)
                    return rc;
                r->v[r->n++] = x;
                continue;
            }
            if (attr.t != JV_STR)
                return hy_jrt_err(C, n, HY_EINVAL, "%s: attribute must be a string", filter_names[id]);
            /* dotted paths: attribute='function.name' */
            const char *p = attr.u.s.p, *end = p + attr.u.s.n;
            while (p <= end) {
                const char *dot = memchr(p, '.', (size_t)(end - p));
                size_t len = (size_t)((dot ? dot : end) - p);
                if (x.t == JV_UNDEF) {
                    break;
                }
                if ((rc = hy_jrt_getattr(C, n, x, hy_jinja_strdup(C->a, p, len), len, &x)) < 0)
                    return rc;
                if (!dot)
                    break;
                p = dot + 1;
            }
            if (id == F_MAP) {
                if (x.t == JV_UNDEF)
                    x = hy_jrt_arg(A, 99, "default", x);
                r->v[r->n++] = x;
                continue;
            }
            a0 = 1;
        }
        bool keep;
        if (A->na > a0) {
            jv_t tn = A->args[a0];
            int tid = tn.t == JV_STR ? hy_jinja_test_id(tn.u.s.p, tn.u.s.n) : -1;
            if (tid < 0)
                return hy_jrt_err(C, n, HY_EINVAL, "%s: unknown test", filter_names[id]);
            if ((rc = hy_jrt_test(C, n, tid, x, A->args + a0 + 1, A->na - a0 - 1, &keep)) < 0)
                return rc;
        } else {
            keep = jv_truthy(x);
        }
        if (keep == (id == F_SELECTATTR || id == F_SELECT))
            r->v[r->n++] = item;
    }
    out->t = JV_LIST;
    out->u.l = r;
    return HY_OK;
}

/* default(value, boolean=False) / d */
static int flt_default(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                       jv_t *out)
{
    jv_t boolean = hy_jrt_arg(A, 1, "boolean", jv_bool(false));
    bool use = v.t == JV_UNDEF || (jv_truthy(boolean) && !jv_truthy(v));
    *out = use ? hy_jrt_arg(A, 0, "default_value", jv_str("", 0)) : v;
    return HY_OK;
}

/* safe, escape / e (HTML escaping) */
static int flt_escape(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                      jv_t *out)
{
    int rc;

    if (id != F_SAFE && v.t == JV_STR) {
        /* html escaping; chat templates rarely use it, but keep it exact */
        jbuf_t b = hy_jrt_newbuf(C);
        for (size_t i = 0; i < v.u.s.n; i++) {
            const char *r = NULL;
            switch (v.u.s.p[i]) {
            case '&': r = "&amp;"; break;
            case '<': r = "&lt;"; break;
            case '>': r = "&gt;"; break;
            case '"': r = "&#34;"; break;
            case '\'': r = "&#39;"; break;
            }
            if ((rc = hy_jrt_chk(C, n, r ? jbuf_put(&b, r, strlen(r)) : jbuf_putc(&b, v.u.s.p[i]))) < 0)
                return rc;
        }
        *out = jv_str(b.p ? b.p : "", b.n);
        return HY_OK;
    }
    *out = v;
    return HY_OK;
}

/* length / count */
static int flt_length(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                      jv_t *out)
{

    if (v.t == JV_STR)
        *out = jv_int((int64_t)hy_jrt_u8_len(v.u.s.p, v.u.s.n));
    else if (v.t == JV_LIST)
        *out = jv_int((int64_t)v.u.l->n);
    else if (v.t == JV_DICT)
        *out = jv_int((int64_t)v.u.d->n);
    else if (v.t == JV_UNDEF)
        *out = jv_int(0);
    else
        return hy_jrt_err(C, n, HY_EINVAL, "object of type '%s' has no len()", jv_type_name(v));
    return HY_OK;
}

/* tojson, as transformers defines it (ensure_ascii=False) */
static int flt_tojson(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                      jv_t *out)
{
    jv_t none = jv_none();
    int rc;

    jv_t ind = hy_jrt_arg(A, 0, "indent", none), sep = hy_jrt_arg(A, 2, "separators", none);
    jv_t sk = hy_jrt_arg(A, 3, "sort_keys", jv_bool(false)), ea = hy_jrt_arg(A, 1, "ensure_ascii", jv_bool(false));
    const char *isep = ", ", *ksep = ": ";
    if (ind.t != JV_NONE && ind.t != JV_INT)
        return hy_jrt_err(C, n, HY_EINVAL, "tojson: indent must be an integer or None");
    if (jv_truthy(ea))
        return hy_jrt_err(C, n, HY_EUNSUPPORTED, "tojson: ensure_ascii=True is not supported");
    if (ind.t == JV_INT)
        isep = ",";
    if (sep.t == JV_LIST && sep.u.l->n == 2 && sep.u.l->v[0].t == JV_STR && sep.u.l->v[1].t == JV_STR) {
        isep = hy_jinja_strdup(C->a, sep.u.l->v[0].u.s.p, sep.u.l->v[0].u.s.n);
        ksep = hy_jinja_strdup(C->a, sep.u.l->v[1].u.s.p, sep.u.l->v[1].u.s.n);
        if (!isep || !ksep)
            return OOM(n);
    } else if (sep.t != JV_NONE) {
        return hy_jrt_err(C, n, HY_EINVAL, "tojson: separators must be a pair of strings");
    }
    jbuf_t b = hy_jrt_newbuf(C);
    rc = jv_write_json(&b, v, ind.t == JV_INT ? (int)HY_MAX(0, HY_MIN(ind.u.i, 64)) : -1, isep, ksep,
                       jv_truthy(sk), 0, C->err);
    if (rc == HY_EINVAL || (rc == HY_ERANGE && b.n < b.limit)) {
        char msg[HY_ERR_LEN];
        snprintf(msg, sizeof msg, "%s", C->err);
        return hy_jrt_err(C, n, rc, "%s", msg);
    }
    if ((rc = hy_jrt_chk(C, n, rc)) < 0)
        return rc;
    *out = jv_str(b.p ? b.p : "", b.n);
    return HY_OK;
}

/* first / last */
static int flt_first_last(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                          jv_t *out)
{
    int rc;

    jv_list_t *l;
    if (v.t == JV_LIST) {
        l = v.u.l;
    } else if ((rc = hy_jrt_iterate(C, n, v, &l)) < 0) {
        return rc;
    }
    *out = l->n ? l->v[id == F_FIRST ? 0 : l->n - 1] : jv_undef(NULL);
    return HY_OK;
}

/* list / reverse */
static int flt_list_reverse(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                            jv_t *out)
{
    int rc;

    jv_list_t *l, *r;
    if (id == F_REVERSE && v.t == JV_STR) {
        jv_t sv[3] = {jv_none(), jv_none(), jv_int(-1)};
        return hy_jrt_slice(C, n, v, sv, out);
    }
    if ((rc = hy_jrt_iterate(C, n, v, &l)) < 0)
        return rc;
    if (!(r = jv_list_new(C->a, l->n)))
        return OOM(n);
    for (size_t i = 0; i < l->n; i++)
        r->v[r->n++] = l->v[id == F_LIST ? i : l->n - 1 - i];
    out->t = JV_LIST;
    out->u.l = r;
    return HY_OK;
}

/* sort / dictsort: stable insertion sort; comparisons count against the iteration cap */
static int flt_sort(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                    jv_t *out)
{
    jv_t none = jv_none();
    jv_t s;
    int rc;

    /* stable insertion sort; comparisons count against the iteration cap */
    jv_t rev = hy_jrt_arg(A, 0, "reverse", jv_bool(false)), cs = hy_jrt_arg(A, 1, "case_sensitive", jv_bool(false));
    jv_t attr = hy_jrt_arg(A, 2, "attribute", none), by = hy_jrt_arg(A, 2, "by", jv_str("key", 3));
    jv_list_t *l, *r;
    if (id == F_DICTSORT) {
        if (v.t != JV_DICT || v.u.d->ns)
            return hy_jrt_err(C, n, HY_EINVAL, "dictsort: can only sort a mapping, not %s", jv_type_name(v));
        cs = hy_jrt_arg(A, 0, "case_sensitive", jv_bool(false));
        rev = hy_jrt_arg(A, 2, "reverse", jv_bool(false));
        by = hy_jrt_arg(A, 1, "by", jv_str("key", 3));
        jargs_t none_args = {0};
        if ((rc = hy_jrt_method(C, n, v, "items", &none_args, &s)) < 0)
            return rc;
        l = s.u.l;
    } else if ((rc = hy_jrt_iterate(C, n, v, &l)) < 0) {
        return rc;
    }
    if (!(r = jv_list_new(C->a, l->n)))
        return OOM(n);
    jv_t *keys = hy_jinja_alloc(C->a, (l->n + 1) * sizeof(jv_t));
    if (!keys)
        return OOM(n);
    for (size_t i = 0; i < l->n; i++) {
        jv_t k = l->v[i];
        if (id == F_DICTSORT)
            k = k.u.l->v[by.t == JV_STR && by.u.s.n && by.u.s.p[0] == 'v' ? 1 : 0];
        else if (attr.t == JV_STR && (rc = hy_jrt_getitem(C, n, k, attr, &k)) < 0)
            return rc;
        if (!jv_truthy(cs) && k.t == JV_STR && (rc = str_case(C, n, k, 1, &k)) < 0)
            return rc;
        size_t j = r->n;
        for (; j > 0; j--) {
            int c;
            if (++C->iters > HY_JINJA_MAX_ITER)
                return hy_jrt_err(C, n, HY_ERANGE, "more than %d loop iterations", HY_JINJA_MAX_ITER);
            if ((rc = hy_jrt_compare(C, n, keys[j - 1], k, &c)) < 0)
                return rc;
            if (jv_truthy(rev) ? c >= 0 : c <= 0)
                break;
            keys[j] = keys[j - 1];
            r->v[j] = r->v[j - 1];
        }
        keys[j] = k;
        r->v[j] = l->v[i];
        r->n++;
    }
    out->t = JV_LIST;
    out->u.l = r;
    return HY_OK;
}

/* sum(attribute=None, start=0) */
static int flt_sum(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                   jv_t *out)
{
    jv_t none = jv_none();
    int rc;

    jv_t attr = hy_jrt_arg(A, 0, "attribute", none), acc = hy_jrt_arg(A, 1, "start", jv_int(0));
    jv_list_t *l;
    if ((rc = hy_jrt_iterate(C, n, v, &l)) < 0)
        return rc;
    for (size_t i = 0; i < l->n; i++) {
        jv_t x = l->v[i];
        if (attr.t == JV_STR && (rc = hy_jrt_getitem(C, n, x, attr, &x)) < 0)
            return rc;
        if ((rc = hy_jrt_binop(C, n, JOP_ADD, acc, x, &acc)) < 0)
            return rc;
    }
    *out = acc;
    return HY_OK;
}

/* items */
static int flt_items(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                     jv_t *out)
{

    if (v.t == JV_UNDEF) {
        if (!(out->u.l = jv_list_new(C->a, 0)))
            return OOM(n);
        out->t = JV_LIST;
        return HY_OK;
    }
    if (v.t != JV_DICT || v.u.d->ns)
        return hy_jrt_err(C, n, HY_EINVAL, "items: can only get item pairs from a mapping, not %s", jv_type_name(v));
    return hy_jrt_method(C, n, v, "items", A, out);
}

/* int / float, with their default on failure */
static int flt_number(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                      jv_t *out)
{

    jv_t d = hy_jrt_arg(A, 0, "default", id == F_INT ? jv_int(0) : jv_float(0));
    double x;
    if (v.t == JV_INT || v.t == JV_BOOL) {
        *out = id == F_INT ? jv_int(v.u.i) : jv_float((double)v.u.i);
        return HY_OK;
    }
    if (v.t == JV_FLOAT) {
        x = v.u.f;
    } else if (v.t == JV_STR) {
        char *end, *t = hy_jinja_strdup(C->a, v.u.s.p, v.u.s.n);
        if (!t)
            return OOM(n);
        if (id == F_INT) {
            long long i = strtoll(t, &end, 10);
            while (*end && is_ws(*end))
                end++;
            if (end != t && !*end) {
                *out = jv_int(i);
                return HY_OK;
            }
        }
        x = strtod(t, &end);
        while (*end && is_ws(*end))
            end++;
        if (end == t || *end) {
            *out = d;
            return HY_OK;
        }
    } else {
        *out = d;
        return HY_OK;
    }
    if (id == F_FLOAT) {
        *out = jv_float(x);
    } else if (isfinite(x) && fabs(x) < 9.2e18) {
        *out = jv_int((int64_t)x);
    } else {
        *out = d;
    }
    return HY_OK;
}

/* abs */
static int flt_abs(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                   jv_t *out)
{

    if (v.t == JV_INT || v.t == JV_BOOL)
        *out = jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    else if (v.t == JV_FLOAT)
        *out = jv_float(fabs(v.u.f));
    else
        return hy_jrt_err(C, n, HY_EINVAL, "bad operand type for abs(): '%s'", jv_type_name(v));
    return HY_OK;
}

/* round(precision, method) */
static int flt_round(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                     jv_t *out)
{

    jv_t prec = hy_jrt_arg(A, 0, "precision", jv_int(0)), meth = hy_jrt_arg(A, 1, "method", jv_str("common", 6));
    if (!hy_jrt_is_num(v) || prec.t != JV_INT || meth.t != JV_STR)
        return hy_jrt_err(C, n, HY_EINVAL, "round: bad arguments");
    double m = pow(10, (double)prec.u.i), x = hy_jrt_num(v) * m;
    x = meth.u.s.n && meth.u.s.p[0] == 'f' ? floor(x) : meth.u.s.n && meth.u.s.p[0] == 'c' && meth.u.s.p[1] == 'e' ? ceil(x) : round(x);
    *out = jv_float(x / m);
    return HY_OK;
}

/* string */
static int flt_string(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                      jv_t *out)
{
    jv_t s;
    int rc = hy_jrt_to_str(C, n, v, &s);

    if (rc < 0)
        return rc;
    *out = s;
    return HY_OK;
}

/* trim(chars=None) */
static int flt_trim(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                    jv_t *out)
{
    jv_t none = jv_none();
    jv_t s;
    int rc = hy_jrt_to_str(C, n, v, &s);

    if (rc < 0)
        return rc;
    jv_t ch = hy_jrt_arg(A, 0, "chars", none);
    *out = strip(s, ch, true, true);
    return HY_OK;
}

/* replace(old, new, count=None) */
static int flt_replace(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                       jv_t *out)
{
    jv_t none = jv_none();
    jv_t s;
    int rc = hy_jrt_to_str(C, n, v, &s);

    if (rc < 0)
        return rc;
    jv_t cnt = hy_jrt_arg(A, 2, "count", none), o, w;
    if ((rc = hy_jrt_to_str(C, n, hy_jrt_arg(A, 0, "old", jv_str("", 0)), &o)) < 0 ||
        (rc = hy_jrt_to_str(C, n, hy_jrt_arg(A, 1, "new", jv_str("", 0)), &w)) < 0)
        return rc;
    return str_replace(C, n, s, o, w, cnt.t == JV_INT ? cnt.u.i : -1, out);
}

/* join(d="", attribute=None) */
static int flt_join(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                    jv_t *out)
{
    jv_t sep = hy_jrt_arg(A, 0, "d", jv_str("", 0)), attr = hy_jrt_arg(A, 1, "attribute", jv_none());
    jv_list_t *l;
    jbuf_t b = hy_jrt_newbuf(C);
    /* a string joins over its characters */
    int rc = hy_jrt_iterate(C, n, v, &l);

    if (rc < 0)
        return rc;
    if ((rc = hy_jrt_to_str(C, n, sep, &sep)) < 0)
        return rc;
    for (size_t i = 0; i < l->n; i++) {
        jv_t x = l->v[i];
        if (attr.t == JV_STR && (rc = hy_jrt_getattr(C, n, x, attr.u.s.p, attr.u.s.n, &x)) < 0)
            return rc;
        if (i && (rc = hy_jrt_chk(C, n, jbuf_put(&b, sep.u.s.p, sep.u.s.n))) < 0)
            return rc;
        if ((rc = hy_jrt_chk(C, n, jv_write_str(&b, x))) < 0)
            return rc;
    }
    *out = jv_str(b.p ? b.p : "", b.n);
    return HY_OK;
}

/* indent(width=4, first=False, blank=False) */
static int flt_indent(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                      jv_t *out)
{
    jv_t s;
    int rc = hy_jrt_to_str(C, n, v, &s);

    if (rc < 0)
        return rc;
    jv_t w = hy_jrt_arg(A, 0, "width", jv_int(4)), first = hy_jrt_arg(A, 1, "first", jv_bool(false));
    jv_t blank = hy_jrt_arg(A, 2, "blank", jv_bool(false));
    jbuf_t ind = hy_jrt_newbuf(C), b = hy_jrt_newbuf(C);
    if (w.t == JV_STR) {
        if ((rc = hy_jrt_chk(C, n, jbuf_put(&ind, w.u.s.p, w.u.s.n))) < 0)
            return rc;
    } else if (w.t == JV_INT) {
        for (int64_t i = 0; i < w.u.i && i < 256; i++)
            if ((rc = hy_jrt_chk(C, n, jbuf_putc(&ind, ' '))) < 0)
                return rc;
    } else {
        return rc = hy_jrt_err(C, n, HY_EINVAL, "indent: width must be int or str");
    }
    if (jv_truthy(first) && (rc = hy_jrt_chk(C, n, jbuf_put(&b, ind.p, ind.n))) < 0)
        return rc;
    /* jinja2: lines = (s + "\n").splitlines(); join with "\n" + indent on non-blank lines */
    size_t i = 0, line = 0;
    const char *p = s.u.s.p;
    while (i < s.u.s.n) {
        size_t st = i;
        while (i < s.u.s.n && p[i] != '\n' && p[i] != '\r')
            i++;
        size_t e = i;
        if (i < s.u.s.n && p[i] == '\r' && i + 1 < s.u.s.n && p[i + 1] == '\n')
            i++;
        if (i < s.u.s.n)
            i++;
        if (line > 0) {
            if ((rc = hy_jrt_chk(C, n, jbuf_putc(&b, '\n'))) < 0)
                return rc;
            if ((e > st || jv_truthy(blank)) && (rc = hy_jrt_chk(C, n, jbuf_put(&b, ind.p, ind.n))) < 0)
                return rc;
        }
        if ((rc = hy_jrt_chk(C, n, jbuf_put(&b, p + st, e - st))) < 0)
            return rc;
        line++;
    }
    *out = jv_str(b.p ? b.p : "", b.n);
    return HY_OK;
}

/* upper / lower / capitalize / title */
static int flt_case(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, const jargs_t *A,
                    jv_t *out)
{
    jv_t s;
    int rc = hy_jrt_to_str(C, n, v, &s);

    if (rc < 0)
        return rc;
    return str_case(C, n, s, id == F_UPPER ? 0 : id == F_LOWER ? 1 : id == F_CAPITALIZE ? 2 : 4, out);
}

typedef int (*jfilter_fn)(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v,
                          const jargs_t *A, jv_t *out);

/* Each filter id's implementation; ids sharing one tell it apart by id. */
static const jfilter_fn filters[] = {
    [F_TRIM] = flt_trim,
    [F_LENGTH] = flt_length,
    [F_COUNT] = flt_length,
    [F_UPPER] = flt_case,
    [F_LOWER] = flt_case,
    [F_TOJSON] = flt_tojson,
    [F_STRING] = flt_string,
    [F_INT] = flt_number,
    [F_FLOAT] = flt_number,
    [F_JOIN] = flt_join,
    [F_DEFAULT] = flt_default,
    [F_D] = flt_default,
    [F_FIRST] = flt_first_last,
    [F_LAST] = flt_first_last,
    [F_LIST] = flt_list_reverse,
    [F_ITEMS] = flt_items,
    [F_REPLACE] = flt_replace,
    [F_SAFE] = flt_escape,
    [F_CAPITALIZE] = flt_case,
    [F_INDENT] = flt_indent,
    [F_SELECTATTR] = filter_seq,
    [F_REJECTATTR] = filter_seq,
    [F_SELECT] = filter_seq,
    [F_REJECT] = filter_seq,
    [F_MAP] = filter_seq,
    [F_REVERSE] = flt_list_reverse,
    [F_TITLE] = flt_case,
    [F_ABS] = flt_abs,
    [F_ROUND] = flt_round,
    [F_ESCAPE] = flt_escape,
    [F_E] = flt_escape,
    [F_SORT] = flt_sort,
    [F_DICTSORT] = flt_sort,
    [F_SUM] = flt_sum,
};

int hy_jrt_filter(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, jv_t *args,
                        size_t na, const char **kwn, jv_t *kwv, size_t nk, jv_t *out)
{
    jargs_t A = {.args = args, .na = na, .kwn = kwn, .kwv = kwv, .nk = nk};

    if (id < 0 || (size_t)id >= HY_ARRAY_LEN(filters) || !filters[id])
        return hy_jrt_err(C, n, HY_EUNSUPPORTED, "filter '%s' not implemented",
                          id >= 0 && (size_t)id < HY_ARRAY_LEN(filter_names) ? filter_names[id] : "?");
    return filters[id](C, f, n, id, v, &A, out);
}

/* ---- tests ---- */
int hy_jrt_test(jctx_t *C, const jnode_t *n, int id, jv_t v, jv_t *args, size_t na, bool *res)
{
    jv_t a = na ? args[0] : jv_undef(NULL);
    int rc, c;
    bool is_str = v.t == JV_STR, is_dict = v.t == JV_DICT && !v.u.d->ns;

    switch (id) {
    case T_DEFINED: *res = v.t != JV_UNDEF; return HY_OK;
    case T_UNDEFINED: *res = v.t == JV_UNDEF; return HY_OK;
    case T_NONE: *res = v.t == JV_NONE; return HY_OK;
    case T_STRING: *res = is_str; return HY_OK;
    case T_MAPPING: *res = is_dict; return HY_OK;
    case T_ITERABLE: *res = is_str || is_dict || v.t == JV_LIST || v.t == JV_UNDEF; return HY_OK;
    case T_SEQUENCE: *res = is_str || is_dict || v.t == JV_LIST; return HY_OK;
    case T_NUMBER: *res = hy_jrt_is_num(v); return HY_OK;
    case T_BOOLEAN: *res = v.t == JV_BOOL; return HY_OK;
    case T_TRUE: *res = v.t == JV_BOOL && v.u.i; return HY_OK;
    case T_FALSE: *res = v.t == JV_BOOL && !v.u.i; return HY_OK;
    case T_INTEGER: *res = v.t == JV_INT; return HY_OK;
    case T_FLOAT: *res = v.t == JV_FLOAT; return HY_OK;
    case T_CALLABLE: *res = v.t == JV_MACRO || v.t == JV_FUNC; return HY_OK;
    case T_EVEN: case T_ODD:
        if (v.t != JV_INT && v.t != JV_BOOL)
            return hy_jrt_err(C, n, HY_EINVAL, "'%s' test needs an integer, got %s", test_names[id], jv_type_name(v));
        *res = ((v.u.i % 2) != 0) == (id == T_ODD);
        return HY_OK;
    case T_DIVISIBLEBY:
        if ((v.t != JV_INT && v.t != JV_BOOL) || a.t != JV_INT || a.u.i == 0)
            return hy_jrt_err(C, n, HY_EINVAL, "divisibleby needs non-zero integers");
        *res = v.u.i % a.u.i == 0;
        return HY_OK;
    case T_EQ: case T_EQUALTO: case T_EQEQ: *res = jv_equal(v, a); return HY_OK;
    case T_NE: *res = !jv_equal(v, a); return HY_OK;
    case T_SAMEAS:
        *res = v.t == a.t && (v.t == JV_NONE || v.t == JV_UNDEF ? true : jv_equal(v, a));
        if (v.t == JV_LIST || v.t == JV_DICT)
            *res = v.t == a.t && v.u.l == a.u.l;
        return HY_OK;
    case T_IN: return hy_jrt_contains(C, n, v, a, res);
    case T_LT: case T_GT: case T_LE: case T_GE:
        if ((rc = hy_jrt_compare(C, n, v, a, &c)) < 0)
            return rc;
        *res = id == T_LT ? c < 0 : id == T_GT ? c > 0 : id == T_LE ? c <= 0 : c >= 0;
        return HY_OK;
    case T_LOWER: case T_UPPER: {
        jv_t s, t;
        if ((rc = hy_jrt_to_str(C, n, v, &s)) < 0 || (rc = str_case(C, n, s, id == T_UPPER ? 0 : 1, &t)) < 0)
            return rc;
        *res = jv_equal(s, t);
        return HY_OK;
    }
    }
    return hy_jrt_err(C, n, HY_EUNSUPPORTED, "test not implemented");
}

