/*
 * jinja_value.c - the dynamic values a chat template computes with, and
 * their Python spellings: str(), repr(), json.dumps() (as transformers'
 * tojson override calls it) and json.loads() for tools/tool_calls.  These
 * must match CPython byte for byte (float repr, dict ordering, escapes),
 * since the rendered prompt is compared with what HF/vLLM produce.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/jinja.h"

int jbuf_put(jbuf_t *b, const char *s, size_t n)
{
    if (n == 0)
        return HY_OK;
    if (b->n + n > b->limit)
        return HY_EFULL;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->n + n + 1)
            nc *= 2;
        char *np = hy_jinja_alloc(b->a, nc);
        if (!np)
            return HY_ENOMEM;
        if (b->n)
            memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return HY_OK;
}

int jbuf_putc(jbuf_t *b, char c) { return jbuf_put(b, &c, 1); }

static int jbuf_puts(jbuf_t *b, const char *s) { return jbuf_put(b, s, strlen(s)); }

jv_list_t *jv_list_new(hy_jinja_arena_t *a, size_t cap)
{
    jv_list_t *l = hy_jinja_alloc(a, sizeof(*l));
    if (!l)
        return NULL;
    memset(l, 0, sizeof(*l));
    if (cap && !(l->v = hy_jinja_alloc(a, cap * sizeof(jv_t))))
        return NULL;
    l->cap = cap;
    return l;
}

int jv_list_push(hy_jinja_arena_t *a, jv_list_t *l, jv_t v)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        jv_t *nv = hy_jinja_alloc(a, nc * sizeof(jv_t));
        if (!nv)
            return HY_ENOMEM;
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof(jv_t));
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = v;
    return HY_OK;
}

jv_dict_t *jv_dict_new(hy_jinja_arena_t *a, size_t cap)
{
    jv_dict_t *d = hy_jinja_alloc(a, sizeof(*d));
    if (!d)
        return NULL;
    memset(d, 0, sizeof(*d));
    return d;
}

jv_t *jv_dict_get(const jv_dict_t *d, const char *k, size_t kn)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->kn[i] == kn && !memcmp(d->k[i], k, kn))
            return &d->v[i];
    return NULL;
}

int jv_dict_set(hy_jinja_arena_t *a, jv_dict_t *d, const char *k, size_t kn, jv_t v)
{
    jv_t *e = jv_dict_get(d, k, kn);
    if (e) {
        *e = v; /* Python keeps the first insertion position */
        return HY_OK;
    }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4;
        const char **nk = hy_jinja_alloc(a, nc * sizeof(char *));
        size_t *nkn = hy_jinja_alloc(a, nc * sizeof(size_t));
        jv_t *nv = hy_jinja_alloc(a, nc * sizeof(jv_t));
        if (!nk || !nkn || !nv)
            return HY_ENOMEM;
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(char *));
            memcpy(nkn, d->kn, d->n * sizeof(size_t));
            memcpy(nv, d->v, d->n * sizeof(jv_t));
        }
        d->k = nk;
        d->kn = nkn;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = k;
    d->kn[d->n] = kn;
    d->v[d->n] = v;
    d->n++;
    return HY_OK;
}

bool jv_truthy(jv_t v)
{
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->ns || v.u.d->n != 0;
    default: return true;
    }
}

static bool equal_d(jv_t a, jv_t b, int depth);

bool jv_equal(jv_t a, jv_t b) { return equal_d(a, b, 0); }

/* beyond 512 levels values compare unequal rather than recurse further */
static bool equal_d(jv_t a, jv_t b, int depth)
{
    if (depth > 512)
        return false;
    bool an = a.t == JV_BOOL || a.t == JV_INT || a.t == JV_FLOAT;
    bool bn = b.t == JV_BOOL || b.t == JV_INT || b.t == JV_FLOAT;
    if (an && bn) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            return a.u.i == b.u.i;
        double x = a.t == JV_FLOAT ? a.u.f : (double)a.u.i;
        double y = b.t == JV_FLOAT ? b.u.f : (double)b.u.i;
        return x == y;
    }
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.u.s.n == b.u.s.n && !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
    case JV_LIST:
        if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal_d(a.u.l->v[i], b.u.l->v[i], depth + 1))
                return false;
        return true;
    case JV_DICT:
        if (a.u.d->ns || b.u.d->ns)
            return a.u.d == b.u.d;
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv_t *o = jv_dict_get(b.u.d, a.u.d->k[i], a.u.d->kn[i]);
            if (!o || !equal_d(a.u.d->v[i], *o, depth + 1))
                return false;
        }
        return true;
    case JV_LOOP: return a.u.loop == b.u.loop;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_FUNC: return a.u.i == b.u.i;
    }
    return false;
}

const char *jv_type_name(jv_t v)
{
    static const char *const names[] = {"undefined", "NoneType", "bool", "int", "float", "str",
                                        "list", "dict", "LoopContext", "Macro", "function"};
    if (v.t == JV_LIST && v.u.l->tuple)
        return "tuple";
    if (v.t == JV_DICT && v.u.d->ns)
        return "Namespace";
    return names[v.t];
}

/* CPython's float repr: shortest round-tripping digits, exponent form
 * outside 1e-4 <= |x| < 1e16. */
int jv_write_float(jbuf_t *b, double f)
{
    char tmp[64], digits[32], out[64];
    int exp10 = 0, nd = 0, prec;
    size_t o = 0;

    if (isnan(f))
        return jbuf_puts(b, "nan");
    if (isinf(f))
        return jbuf_puts(b, f < 0 ? "-inf" : "inf");
    if (f == 0)
        return jbuf_puts(b, signbit(f) ? "-0.0" : "0.0");
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    /* tmp = [-]d[.ddd]e[+-]XX */
    const char *p = tmp;
    if (*p == '-') {
        out[o++] = '-';
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    exp10 = atoi(p + 1);
    if (exp10 < -4 || exp10 >= 16) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, (size_t)nd - 1);
            o += (size_t)nd - 1;
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    } else if (exp10 < 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int k = 0; k < -exp10 - 1; k++)
            out[o++] = '0';
        memcpy(out + o, digits, (size_t)nd);
        o += (size_t)nd;
    } else {
        for (int k = 0; k <= exp10; k++)
            out[o++] = k < nd ? digits[k] : '0';
        out[o++] = '.';
        if (nd > exp10 + 1) {
            memcpy(out + o, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            o += (size_t)(nd - exp10 - 1);
        } else {
            out[o++] = '0';
        }
    }
    return jbuf_put(b, out, o);
}

static int write_int(jbuf_t *b, int64_t i)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)i);
    return jbuf_put(b, tmp, (size_t)n);
}

/* Python repr() of a str: prefers single quotes, escapes controls. */
static int write_str_repr(jbuf_t *b, const char *s, size_t n)
{
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = (sq && !dq) ? '"' : '\'';
    int rc = jbuf_putc(b, q);
    for (size_t i = 0; i < n && rc >= 0; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == (unsigned char)q || c == '\\') {
            char e[2] = {'\\', (char)c};
            rc = jbuf_put(b, e, 2);
        } else if (c == '\n') {
            rc = jbuf_put(b, "\\n", 2);
        } else if (c == '\r') {
            rc = jbuf_put(b, "\\r", 2);
        } else if (c == '\t') {
            rc = jbuf_put(b, "\\t", 2);
        } else if (c < 0x20 || c == 0x7f) {
            char e[8];
            snprintf(e, sizeof e, "\\x%02x", c);
            rc = jbuf_put(b, e, 4);
        } else {
            rc = jbuf_putc(b, (char)c);
        }
    }
    return rc < 0 ? rc : jbuf_putc(b, q);
}

static int write_repr(jbuf_t *b, jv_t v, int depth);

int jv_write_repr(jbuf_t *b, jv_t v) { return write_repr(b, v, 0); }

/* depth-limited: template loops can build arbitrarily nested lists */
static int write_repr(jbuf_t *b, jv_t v, int depth)
{
    int rc = HY_OK;
    if (depth > 512)
        return HY_ERANGE;
    switch (v.t) {
    case JV_STR:
        return write_str_repr(b, v.u.s.p, v.u.s.n);
    case JV_LIST: {
        const char *open = v.u.l->tuple ? "(" : "[", *close = v.u.l->tuple ? ")" : "]";
        rc = jbuf_puts(b, open);
        for (size_t i = 0; i < v.u.l->n && rc >= 0; i++) {
            if (i)
                rc = jbuf_puts(b, ", ");
            if (rc >= 0)
                rc = write_repr(b, v.u.l->v[i], depth + 1);
        }
        if (rc >= 0 && v.u.l->tuple && v.u.l->n == 1)
            rc = jbuf_putc(b, ',');
        return rc < 0 ? rc : jbuf_puts(b, close);
    }
    case JV_DICT:
        if (v.u.d->ns)
            rc = jbuf_puts(b, "<Namespace ");
        rc = jbuf_putc(b, '{');
        for (size_t i = 0; i < v.u.d->n && rc >= 0; i++) {
            if (i)
                rc = jbuf_puts(b, ", ");
            if (rc >= 0)
                rc = write_str_repr(b, v.u.d->k[i], v.u.d->kn[i]);
            if (rc >= 0)
                rc = jbuf_puts(b, ": ");
            if (rc >= 0)
                rc = write_repr(b, v.u.d->v[i], depth + 1);
        }
        if (rc >= 0)
            rc = jbuf_putc(b, '}');
        if (rc >= 0 && v.u.d->ns)
            rc = jbuf_putc(b, '>');
        return rc;
    default:
        return jv_write_str(b, v);
    }
}

int jv_write_str(jbuf_t *b, jv_t v)
{
    switch (v.t) {
    case JV_UNDEF: return HY_OK;
    case JV_NONE: return jbuf_puts(b, "None");
    case JV_BOOL: return jbuf_puts(b, v.u.i ? "True" : "False");
    case JV_INT: return write_int(b, v.u.i);
    case JV_FLOAT: return jv_write_float(b, v.u.f);
    case JV_STR: return jbuf_put(b, v.u.s.p, v.u.s.n);
    case JV_LIST: case JV_DICT: return jv_write_repr(b, v);
    case JV_LOOP: return jbuf_puts(b, "<LoopContext>");
    case JV_MACRO: return jbuf_puts(b, "<Macro>");
    default: return jbuf_puts(b, "<built-in function>");
    }
}

static int json_str(jbuf_t *b, const char *s, size_t n)
{
    int rc = jbuf_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n && rc >= 0; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *e = NULL;
        char u[8];
        switch (c) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                e = u;
            }
        }
        if (e) {
            rc = jbuf_put(b, s + run, i - run);
            if (rc >= 0)
                rc = jbuf_puts(b, e);
            run = i + 1;
        }
    }
    if (rc >= 0)
        rc = jbuf_put(b, s + run, n - run);
    return rc < 0 ? rc : jbuf_putc(b, '"');
}

static int json_nl(jbuf_t *b, int indent, int level)
{
    int rc = jbuf_putc(b, '\n');
    for (int i = 0; i < indent * level && rc >= 0; i++)
        rc = jbuf_putc(b, ' ');
    return rc;
}

int jv_write_json(jbuf_t *b, jv_t v, int indent, const char *item_sep, const char *key_sep,
                  bool sort_keys, int depth, char *err)
{
    int rc = HY_OK;

    if (depth > 512)
        return hy_err(err, HY_ERANGE, "tojson: value nested too deeply");
    switch (v.t) {
    case JV_NONE: return jbuf_puts(b, "null");
    case JV_BOOL: return jbuf_puts(b, v.u.i ? "true" : "false");
    case JV_INT: return write_int(b, v.u.i);
    case JV_FLOAT:
        if (isnan(v.u.f))
            return jbuf_puts(b, "NaN");
        if (isinf(v.u.f))
            return jbuf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        return jv_write_float(b, v.u.f);
    case JV_STR: return json_str(b, v.u.s.p, v.u.s.n);
    case JV_LIST:
        if (v.u.l->n == 0)
            return jbuf_puts(b, "[]");
        rc = jbuf_putc(b, '[');
        for (size_t i = 0; i < v.u.l->n && rc >= 0; i++) {
            if (i)
                rc = jbuf_puts(b, item_sep);
            if (rc >= 0 && indent >= 0)
                rc = json_nl(b, indent, depth + 1);
            if (rc >= 0)
                rc = jv_write_json(b, v.u.l->v[i], indent, item_sep, key_sep, sort_keys, depth + 1, err);
        }
        if (rc >= 0 && indent >= 0)
            rc = json_nl(b, indent, depth);
        return rc < 0 ? rc : jbuf_putc(b, ']');
    case JV_DICT: {
        if (v.u.d->ns)
            break;
        size_t n = v.u.d->n;
        if (n == 0)
            return jbuf_puts(b, "{}");
        size_t *ord = hy_jinja_alloc(b->a, n * sizeof(size_t));
        if (!ord)
            return HY_ENOMEM;
        for (size_t i = 0; i < n; i++)
            ord[i] = i;
        if (sort_keys) { /* insertion sort: dicts here are small */
            for (size_t i = 1; i < n; i++) {
                size_t x = ord[i], j = i;
                while (j > 0 && strcmp(v.u.d->k[ord[j - 1]], v.u.d->k[x]) > 0) {
                    ord[j] = ord[j - 1];
                    j--;
                }
                ord[j] = x;
            }
        }
        rc = jbuf_putc(b, '{');
        for (size_t k = 0; k < n && rc >= 0; k++) {
            size_t i = ord[k];
            if (k)
                rc = jbuf_puts(b, item_sep);
            if (rc >= 0 && indent >= 0)
                rc = json_nl(b, indent, depth + 1);
            if (rc >= 0)
                rc = json_str(b, v.u.d->k[i], v.u.d->kn[i]);
            if (rc >= 0)
                rc = jbuf_puts(b, key_sep);
            if (rc >= 0)
                rc = jv_write_json(b, v.u.d->v[i], indent, item_sep, key_sep, sort_keys, depth + 1, err);
        }
        if (rc >= 0 && indent >= 0)
            rc = json_nl(b, indent, depth);
        return rc < 0 ? rc : jbuf_putc(b, '}');
    }
    default:
        break;
    }
    return hy_err(err, HY_EINVAL, "tojson: Object of type %s is not JSON serializable", jv_type_name(v));
}

/* ---- json.loads ---- */
typedef struct {
    hy_jinja_arena_t *a;
    const char *s;
    size_t n, i;
    char *err;
} jjson_t;

static void jws(jjson_t *J)
{
    while (J->i < J->n && (J->s[J->i] == ' ' || J->s[J->i] == '\t' || J->s[J->i] == '\n' || J->s[J->i] == '\r'))
        J->i++;
}

static int jfail(jjson_t *J, const char *what)
{
    return hy_err(J->err, HY_EFORMAT, "invalid JSON at byte %zu: %s", J->i, what);
}

static int jhex4(jjson_t *J, uint32_t *cp)
{
    uint32_t v = 0;
    if (J->n - J->i < 4)
        return jfail(J, "bad \\u escape");
    for (int k = 0; k < 4; k++) {
        char c = J->s[J->i++];
        int h = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (h < 0)
            return jfail(J, "bad \\u escape");
        v = v * 16 + (uint32_t)h;
    }
    *cp = v;
    return HY_OK;
}

static int jstring(jjson_t *J, const char **out, size_t *outn)
{
    char *o = hy_jinja_alloc(J->a, J->n - J->i + 1);
    size_t n = 0;
    int rc;

    if (!o)
        return hy_err(J->err, HY_ENOMEM, "out of memory parsing JSON");
    J->i++;
    for (;;) {
        if (J->i >= J->n)
            return jfail(J, "unterminated string");
        unsigned char c = (unsigned char)J->s[J->i++];
        if (c == '"')
            break;
        if (c < 0x20)
            return jfail(J, "control character in string");
        if (c != '\\') {
            o[n++] = (char)c;
            continue;
        }
        if (J->i >= J->n)
            return jfail(J, "unterminated string");
        c = (unsigned char)J->s[J->i++];
        switch (c) {
        case '"': o[n++] = '"'; break;
        case '\\': o[n++] = '\\'; break;
        case '/': o[n++] = '/'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'n': o[n++] = '\n'; break;
        case 'r': o[n++] = '\r'; break;
        case 't': o[n++] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if ((rc = jhex4(J, &cp)) < 0)
                return rc;
            if (cp >= 0xD800 && cp < 0xDC00 && J->n - J->i >= 6 && J->s[J->i] == '\\' && J->s[J->i + 1] == 'u') {
                size_t save = J->i;
                J->i += 2;
                if ((rc = jhex4(J, &lo)) < 0)
                    return rc;
                if (lo >= 0xDC00 && lo < 0xE000)
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else
                    J->i = save;
            }
            if (cp < 0x80) {
                o[n++] = (char)cp;
            } else if (cp < 0x800) {
                o[n++] = (char)(0xC0 | cp >> 6);
                o[n++] = (char)(0x80 | (cp & 63));
            } else if (cp < 0x10000) {
                o[n++] = (char)(0xE0 | cp >> 12);
                o[n++] = (char)(0x80 | ((cp >> 6) & 63));
                o[n++] = (char)(0x80 | (cp & 63));
            } else {
                o[n++] = (char)(0xF0 | cp >> 18);
                o[n++] = (char)(0x80 | ((cp >> 12) & 63));
                o[n++] = (char)(0x80 | ((cp >> 6) & 63));
                o[n++] = (char)(0x80 | (cp & 63));
            }
            break;
        }
        default:
            return jfail(J, "bad escape");
        }
    }
    o[n] = 0;
    *out = o;
    *outn = n;
    return HY_OK;
}

static int jvalue(jjson_t *J, jv_t *out, int depth)
{
    int rc;

    if (depth > 256)
        return jfail(J, "nested too deeply");
    jws(J);
    if (J->i >= J->n)
        return jfail(J, "unexpected end");
    char c = J->s[J->i];
    if (c == '{') {
        jv_dict_t *d = jv_dict_new(J->a, 0);
        if (!d)
            return hy_err(J->err, HY_ENOMEM, "out of memory parsing JSON");
        J->i++;
        jws(J);
        if (J->i < J->n && J->s[J->i] == '}') {
            J->i++;
        } else {
            for (;;) {
                const char *k;
                size_t kn;
                jv_t v;
                jws(J);
                if (J->i >= J->n || J->s[J->i] != '"')
                    return jfail(J, "expected object key");
                if ((rc = jstring(J, &k, &kn)) < 0)
                    return rc;
                jws(J);
                if (J->i >= J->n || J->s[J->i] != ':')
                    return jfail(J, "expected ':'");
                J->i++;
                if ((rc = jvalue(J, &v, depth + 1)) < 0)
                    return rc;
                if (jv_dict_set(J->a, d, k, kn, v) < 0)
                    return hy_err(J->err, HY_ENOMEM, "out of memory parsing JSON");
                jws(J);
                if (J->i < J->n && J->s[J->i] == ',') {
                    J->i++;
                    continue;
                }
                if (J->i < J->n && J->s[J->i] == '}') {
                    J->i++;
                    break;
                }
                return jfail(J, "expected ',' or '}'");
            }
        }
        out->t = JV_DICT;
        out->u.d = d;
        return HY_OK;
    }
    if (c == '[') {
        jv_list_t *l = jv_list_new(J->a, 0);
        if (!l)
            return hy_err(J->err, HY_ENOMEM, "out of memory parsing JSON");
        J->i++;
        jws(J);
        if (J->i < J->n && J->s[J->i] == ']') {
            J->i++;
        } else {
            for (;;) {
                jv_t v;
                if ((rc = jvalue(J, &v, depth + 1)) < 0)
                    return rc;
                if (jv_list_push(J->a, l, v) < 0)
                    return hy_err(J->err, HY_ENOMEM, "out of memory parsing JSON");
                jws(J);
                if (J->i < J->n && J->s[J->i] == ',') {
                    J->i++;
                    continue;
                }
                if (J->i < J->n && J->s[J->i] == ']') {
                    J->i++;
                    break;
                }
                return jfail(J, "expected ',' or ']'");
            }
        }
        out->t = JV_LIST;
        out->u.l = l;
        return HY_OK;
    }
    if (c == '"') {
        const char *s;
        size_t n;
        if ((rc = jstring(J, &s, &n)) < 0)
            return rc;
        *out = jv_str(s, n);
        return HY_OK;
    }
    static const struct { const char *w; int t; } words[] = {{"true", 1}, {"false", 0}, {"null", 2}};
    for (size_t k = 0; k < 3; k++) {
        size_t wl = strlen(words[k].w);
        if (J->n - J->i >= wl && !memcmp(J->s + J->i, words[k].w, wl)) {
            J->i += wl;
            *out = words[k].t == 2 ? jv_none() : jv_bool(words[k].t);
            return HY_OK;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        size_t st = J->i;
        bool flt = false;
        char buf[64];
        if (J->s[J->i] == '-')
            J->i++;
        while (J->i < J->n) {
            char d = J->s[J->i];
            if (d == '.' || d == 'e' || d == 'E' || ((d == '+' || d == '-') && (J->s[J->i - 1] == 'e' || J->s[J->i - 1] == 'E')))
                flt = true;
            else if (!(d >= '0' && d <= '9'))
                break;
            J->i++;
        }
        size_t len = J->i - st;
        if (len == 0 || len >= sizeof buf || (len == 1 && c == '-'))
            return jfail(J, "bad number");
        memcpy(buf, J->s + st, len);
        buf[len] = 0;
        char *end;
        if (!flt) {
            long long v = strtoll(buf, &end, 10);
            if (*end)
                return jfail(J, "bad number");
            if ((v == LLONG_MAX || v == LLONG_MIN) && len > 18)
                flt = true; /* out of int64: Python keeps it exact; we degrade to float */
            else {
                *out = jv_int(v);
                return HY_OK;
            }
        }
        double f = strtod(buf, &end);
        if (*end)
            return jfail(J, "bad number");
        *out = jv_float(f);
        return HY_OK;
    }
    return jfail(J, "unexpected character");
}

int jv_parse_json(hy_jinja_arena_t *a, const char *s, size_t n, jv_t *out, char *err)
{
    jjson_t J = {.a = a, .s = s, .n = n, .err = err};
    int rc = jvalue(&J, out, 0);
    if (rc < 0)
        return rc;
    jws(&J);
    if (J.i != J.n)
        return jfail(&J, "trailing characters");
    return HY_OK;
}
