/*
 * jinja_eval.c - tree-walking evaluator for the AST built by jinja_parse.c:
 * scopes, loops, macros, operators with Python semantics, attribute and
 * item access, and transformers' globals (raise_exception, strftime_now,
 * namespace); filters, tests and str/dict methods are in jinja_builtin.c.  Undefined follows
 * jinja2's default Undefined: it renders empty and is falsy, and only
 * errors where jinja2 errors (attribute/item of it, arithmetic, calls).
 * All values live in one per-render arena; limits on depth, iterations
 * and output keep a hostile template from hanging or crashing the server.
 */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/jinja.h"
#include "model/jinja_rt.h"

/* ---- context ---- */
enum { FN_RANGE, FN_NAMESPACE, FN_RAISE, FN_STRFTIME, FN_DICT };
static const char *const func_names[] = {"range", "namespace", "raise_exception", "strftime_now", "dict"};

enum { EX_OK = 0, EX_BREAK = 1, EX_CONTINUE = 2 };

int hy_jrt_err(jctx_t *C, const jnode_t *n, int code, const char *fmt, ...)
{
    char msg[400];
    int line, col;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    hy_jinja_linecol(C->t->src, C->t->len, n ? n->pos : 0, &line, &col);
    return hy_err(C->err, code, "chat template %d:%d: %s", line, col, msg);
}

/* converts a jbuf/alloc status into a reported error */
int hy_jrt_chk(jctx_t *C, const jnode_t *n, int rc)
{
    if (rc >= 0)
        return rc;
    if (rc == HY_EFULL)
        return hy_jrt_err(C, n, HY_ERANGE, "rendered output exceeds the %zu-byte limit", C->out->limit);
    if (rc == HY_ENOMEM)
        return hy_jrt_err(C, n, HY_ENOMEM, "render memory limit exceeded");
    if (rc == HY_ERANGE)
        return hy_jrt_err(C, n, HY_ERANGE, "value nested too deeply to print");
    return rc;
}


jbuf_t hy_jrt_newbuf(jctx_t *C)
{
    jbuf_t b = {.a = C->a, .limit = C->out->limit};
    return b;
}

/* str(v) as a value */
int hy_jrt_to_str(jctx_t *C, const jnode_t *n, jv_t v, jv_t *out)
{
    if (v.t == JV_STR) {
        *out = v;
        return HY_OK;
    }
    jbuf_t b = hy_jrt_newbuf(C);
    int rc = hy_jrt_chk(C, n, jv_write_str(&b, v));
    if (rc < 0)
        return rc;
    *out = jv_str(b.p ? b.p : "", b.n);
    return HY_OK;
}


int hy_jrt_undef(jctx_t *C, const jnode_t *n, jv_t v)
{
    if (v.u.s.p && v.u.s.n)
        return hy_jrt_err(C, n, HY_EINVAL, "'%.*s' is undefined", (int)HY_MIN(v.u.s.n, 80), v.u.s.p);
    return hy_jrt_err(C, n, HY_EINVAL, "value is undefined");
}

/* ---- UTF-8 helpers: Python strings index by code point ---- */
size_t hy_jrt_u8_len(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            c++;
    return c;
}

/* byte offsets of each code point (plus n at the end) */
size_t *hy_jrt_u8_offsets(jctx_t *C, const char *s, size_t n, size_t *count)
{
    size_t c = hy_jrt_u8_len(s, n), k = 0;
    size_t *off = hy_jinja_alloc(C->a, (c + 1) * sizeof(size_t));
    if (!off)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            off[k++] = i;
    off[k] = n;
    *count = c;
    return off;
}

/* ---- scopes ---- */
static jv_t lookup(jctx_t *C, jframe_t *f, const char *name, size_t n)
{
    for (; f; f = f->parent) {
        jv_t *v = jv_dict_get(&f->vars, name, n);
        if (v)
            return *v;
    }
    int id = hy_jrt_lookup_id(func_names, HY_ARRAY_LEN(func_names), name, n);
    if (id >= 0) {
        jv_t v = {.t = JV_FUNC};
        v.u.i = id;
        return v;
    }
    return jv_undef(name);
}

static int assign(jctx_t *C, jframe_t *f, const jnode_t *n, const char *name, jv_t v)
{
    if (jv_dict_set(C->a, &f->vars, name, strlen(name), v) < 0)
        return OOM(n);
    return HY_OK;
}

static int eval(jctx_t *C, jframe_t *f, const jnode_t *n, jv_t *out);
static int exec_body(jctx_t *C, jframe_t *f, jnode_t *const *list, size_t cnt);

/* ---- attribute and item access ---- */
int hy_jrt_getattr(jctx_t *C, const jnode_t *n, jv_t obj, const char *name, size_t nl, jv_t *out)
{
    if (obj.t == JV_UNDEF)
        return hy_jrt_undef(C, n, obj);
    if (obj.t == JV_DICT) {
        jv_t *v = jv_dict_get(obj.u.d, name, nl);
        *out = v ? *v : jv_undef(name);
        return HY_OK;
    }
    if (obj.t == JV_LOOP) {
        jloop_t *L = obj.u.loop;
        size_t i = L->i, len = L->items->n;
        static const char *const k[] = {"index", "index0", "revindex", "revindex0", "first",
                                        "last", "length", "previtem", "nextitem", "depth", "depth0"};
        int id = hy_jrt_lookup_id(k, HY_ARRAY_LEN(k), name, nl);
        switch (id) {
        case 0: *out = jv_int((int64_t)i + 1); return HY_OK;
        case 1: *out = jv_int((int64_t)i); return HY_OK;
        case 2: *out = jv_int((int64_t)(len - i)); return HY_OK;
        case 3: *out = jv_int((int64_t)(len - i - 1)); return HY_OK;
        case 4: *out = jv_bool(i == 0); return HY_OK;
        case 5: *out = jv_bool(i + 1 == len); return HY_OK;
        case 6: *out = jv_int((int64_t)len); return HY_OK;
        case 7: *out = i > 0 ? L->items->v[i - 1] : jv_undef("previtem"); return HY_OK;
        case 8: *out = i + 1 < len ? L->items->v[i + 1] : jv_undef("nextitem"); return HY_OK;
        case 9: *out = jv_int(1); return HY_OK;
        case 10: *out = jv_int(0); return HY_OK;
        }
    }
    *out = jv_undef(name);
    return HY_OK;
}

int hy_jrt_getitem(jctx_t *C, const jnode_t *n, jv_t obj, jv_t key, jv_t *out)
{
    if (obj.t == JV_UNDEF)
        return hy_jrt_undef(C, n, obj);
    if (key.t == JV_STR)
        return hy_jrt_getattr(C, n, obj, key.u.s.p, key.u.s.n, out);
    *out = jv_undef(NULL);
    if ((key.t == JV_INT || key.t == JV_BOOL) && (obj.t == JV_LIST || obj.t == JV_STR)) {
        int64_t i = key.u.i;
        if (obj.t == JV_LIST) {
            int64_t len = (int64_t)obj.u.l->n;
            if (i < 0)
                i += len;
            if (i >= 0 && i < len)
                *out = obj.u.l->v[i];
        } else {
            size_t cnt, *off = hy_jrt_u8_offsets(C, obj.u.s.p, obj.u.s.n, &cnt);
            if (!off)
                return OOM(n);
            if (i < 0)
                i += (int64_t)cnt;
            if (i >= 0 && i < (int64_t)cnt)
                *out = jv_str(obj.u.s.p + off[i], off[i + 1] - off[i]);
        }
    }
    return HY_OK;
}

/* Python slice semantics (PySlice_AdjustIndices) on a list or str */
int hy_jrt_slice(jctx_t *C, const jnode_t *n, jv_t obj, jv_t *sv, jv_t *out)
{
    int64_t idx[3];
    bool has[3];
    for (int k = 0; k < 3; k++) {
        has[k] = sv[k].t != JV_UNDEF && sv[k].t != JV_NONE;
        if (has[k] && sv[k].t != JV_INT && sv[k].t != JV_BOOL)
            return hy_jrt_err(C, n, HY_EINVAL, "slice indices must be integers or None");
        idx[k] = has[k] ? sv[k].u.i : 0;
    }
    int64_t step = has[2] ? idx[2] : 1;
    if (step == 0)
        return hy_jrt_err(C, n, HY_EINVAL, "slice step cannot be zero");
    if (obj.t == JV_UNDEF)
        return hy_jrt_undef(C, n, obj);
    size_t cnt = 0, *off = NULL;
    if (obj.t == JV_LIST) {
        cnt = obj.u.l->n;
    } else if (obj.t == JV_STR) {
        if (!(off = hy_jrt_u8_offsets(C, obj.u.s.p, obj.u.s.n, &cnt)))
            return OOM(n);
    } else {
        return hy_jrt_err(C, n, HY_EINVAL, "'%s' object is not subscriptable", jv_type_name(obj));
    }
    int64_t len = (int64_t)cnt, start, stop;
    if (step > 0) {
        start = has[0] ? idx[0] : 0;
        stop = has[1] ? idx[1] : len;
        if (start < 0) start = start + len < 0 ? 0 : start + len;
        if (start > len) start = len;
        if (stop < 0) stop = stop + len < 0 ? 0 : stop + len;
        if (stop > len) stop = len;
    } else {
        start = has[0] ? idx[0] : len - 1;
        stop = has[1] ? idx[1] : -1 - len;
        if (start < 0) start = start + len < 0 ? -1 : start + len;
        if (start >= len) start = len - 1;
        if (stop < 0) stop = stop + len < 0 ? -1 : stop + len;
        if (stop >= len) stop = len - 1;
    }
    if (obj.t == JV_LIST) {
        jv_list_t *l = jv_list_new(C->a, 0);
        if (!l)
            return OOM(n);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            if (jv_list_push(C->a, l, obj.u.l->v[i]) < 0)
                return OOM(n);
        out->t = JV_LIST;
        out->u.l = l;
        return HY_OK;
    }
    jbuf_t b = hy_jrt_newbuf(C);
    int rc = HY_OK;
    for (int64_t i = start; rc >= 0 && (step > 0 ? i < stop : i > stop); i += step)
        rc = jbuf_put(&b, obj.u.s.p + off[i], off[i + 1] - off[i]);
    if ((rc = hy_jrt_chk(C, n, rc)) < 0)
        return rc;
    *out = jv_str(b.p ? b.p : "", b.n);
    return HY_OK;
}

/* the items a for loop / filter iterates over */
int hy_jrt_iterate(jctx_t *C, const jnode_t *n, jv_t v, jv_list_t **out)
{
    jv_list_t *l;
    switch (v.t) {
    case JV_LIST:
        *out = v.u.l;
        return HY_OK;
    case JV_UNDEF:
        if (!(*out = jv_list_new(C->a, 0)))
            return OOM(n);
        return HY_OK;
    case JV_DICT:
        if (v.u.d->ns)
            break;
        if (!(l = jv_list_new(C->a, v.u.d->n)))
            return OOM(n);
        for (size_t i = 0; i < v.u.d->n; i++)
            l->v[l->n++] = jv_str(v.u.d->k[i], v.u.d->kn[i]);
        *out = l;
        return HY_OK;
    case JV_STR: {
        size_t cnt, *off = hy_jrt_u8_offsets(C, v.u.s.p, v.u.s.n, &cnt);
        if (!off || !(l = jv_list_new(C->a, cnt)))
            return OOM(n);
        for (size_t i = 0; i < cnt; i++)
            l->v[l->n++] = jv_str(v.u.s.p + off[i], off[i + 1] - off[i]);
        *out = l;
        return HY_OK;
    }
    default:
        break;
    }
    return hy_jrt_err(C, n, HY_EINVAL, "'%s' object is not iterable", jv_type_name(v));
}

/* ---- operators ---- */
int hy_jrt_compare(jctx_t *C, const jnode_t *n, jv_t a, jv_t b, int *res)
{
    if (hy_jrt_is_num(a) && hy_jrt_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            *res = a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
        else
            *res = hy_jrt_num(a) < hy_jrt_num(b) ? -1 : hy_jrt_num(a) > hy_jrt_num(b);
        return HY_OK;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t m = HY_MIN(a.u.s.n, b.u.s.n);
        int c = memcmp(a.u.s.p, b.u.s.p, m);
        *res = c ? (c < 0 ? -1 : 1) : (a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n);
        return HY_OK;
    }
    if (a.t == JV_UNDEF)
        return hy_jrt_undef(C, n, a);
    if (b.t == JV_UNDEF)
        return hy_jrt_undef(C, n, b);
    return hy_jrt_err(C, n, HY_EINVAL, "comparison not supported between instances of '%s' and '%s'",
                jv_type_name(a), jv_type_name(b));
}

int hy_jrt_contains(jctx_t *C, const jnode_t *n, jv_t needle, jv_t hay, bool *res)
{
    *res = false;
    if (hay.t == JV_STR) {
        if (needle.t != JV_STR)
            return hy_jrt_err(C, n, HY_EINVAL, "'in <string>' requires string as left operand, not %s", jv_type_name(needle));
        if (needle.u.s.n == 0)
            *res = true;
        for (size_t i = 0; !*res && i + needle.u.s.n <= hay.u.s.n; i++)
            if (!memcmp(hay.u.s.p + i, needle.u.s.p, needle.u.s.n))
                *res = true;
        return HY_OK;
    }
    if (hay.t == JV_LIST) {
        for (size_t i = 0; i < hay.u.l->n && !*res; i++)
            *res = jv_equal(needle, hay.u.l->v[i]);
        return HY_OK;
    }
    if (hay.t == JV_DICT && !hay.u.d->ns) {
        *res = needle.t == JV_STR && jv_dict_get(hay.u.d, needle.u.s.p, needle.u.s.n);
        return HY_OK;
    }
    if (hay.t == JV_UNDEF)
        return HY_OK;
    return hy_jrt_err(C, n, HY_EINVAL, "argument of type '%s' is not iterable", jv_type_name(hay));
}

/* + and * on strings and lists (concatenation, repetition); 1 if the
 * operands are not such a pair. */
static int seq_binop(jctx_t *C, const jnode_t *n, int op, jv_t a, jv_t b, jv_t *out)
{
    int rc;

    if (op == JOP_ADD && a.t == JV_STR && b.t == JV_STR) {
        char *p = hy_jinja_alloc(C->a, a.u.s.n + b.u.s.n + 1);
        if (!p)
            return OOM(n);
        memcpy(p, a.u.s.p, a.u.s.n);
        memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n);
        if (a.u.s.n + b.u.s.n > C->out->limit)
            return hy_jrt_err(C, n, HY_ERANGE, "string exceeds the %zu-byte output limit", C->out->limit);
        *out = jv_str(p, a.u.s.n + b.u.s.n);
        return HY_OK;
    }
    if (op == JOP_ADD && a.t == JV_LIST && b.t == JV_LIST) {
        jv_list_t *l = jv_list_new(C->a, a.u.l->n + b.u.l->n);
        if (!l)
            return OOM(n);
        for (size_t i = 0; i < a.u.l->n; i++) l->v[l->n++] = a.u.l->v[i];
        for (size_t i = 0; i < b.u.l->n; i++) l->v[l->n++] = b.u.l->v[i];
        out->t = JV_LIST;
        out->u.l = l;
        return HY_OK;
    }
    if (op == JOP_MUL && ((a.t == JV_STR && b.t == JV_INT) || (a.t == JV_INT && b.t == JV_STR))) {
        jv_t s = a.t == JV_STR ? a : b;
        int64_t k = a.t == JV_INT ? a.u.i : b.u.i;
        jbuf_t buf = hy_jrt_newbuf(C);
        for (int64_t i = 0; i < k; i++)
            if ((rc = hy_jrt_chk(C, n, jbuf_put(&buf, s.u.s.p, s.u.s.n))) < 0)
                return rc;
        *out = jv_str(buf.p ? buf.p : "", buf.n);
        return HY_OK;
    }
    if (op == JOP_MUL && ((a.t == JV_LIST && b.t == JV_INT) || (a.t == JV_INT && b.t == JV_LIST))) {
        jv_list_t *src = a.t == JV_LIST ? a.u.l : b.u.l, *l;
        int64_t k = a.t == JV_INT ? a.u.i : b.u.i;
        if (k < 0)
            k = 0;
        if ((double)k * (double)src->n > HY_JINJA_MAX_ITER)
            return hy_jrt_err(C, n, HY_ERANGE, "list repetition exceeds %d items", HY_JINJA_MAX_ITER);
        if (!(l = jv_list_new(C->a, (size_t)k * src->n)))
            return OOM(n);
        for (int64_t i = 0; i < k; i++)
            for (size_t j = 0; j < src->n; j++)
                l->v[l->n++] = src->v[j];
        out->t = JV_LIST;
        out->u.l = l;
        return HY_OK;
    }
    return 1;
}

/* Arithmetic with Python's semantics (floor division and modulo round
 * toward negative infinity; ints stop at 64 bits with an error). */
static int num_binop(jctx_t *C, const jnode_t *n, int op, jv_t a, jv_t b, jv_t *out)
{
    static const char *const opname[] = {"+", "-", "*", "/", "//", "%", "**"};

    if (!hy_jrt_is_num(a) || !hy_jrt_is_num(b) || op > JOP_POW)
        return hy_jrt_err(C, n, HY_EINVAL, "unsupported operand type(s) for %s: '%s' and '%s'",
                    op <= JOP_POW ? opname[op] : "?", jv_type_name(a), jv_type_name(b));
    bool ints = a.t != JV_FLOAT && b.t != JV_FLOAT;
    int64_t x = a.u.i, y = b.u.i, z;
    double fx = hy_jrt_num(a), fy = hy_jrt_num(b);
    switch (op) {
    case JOP_ADD:
        if (ints) {
            if (__builtin_add_overflow(x, y, &z))
                return hy_jrt_err(C, n, HY_ERANGE, "integer overflow (Python ints are unbounded; we stop at 64 bits)");
            *out = jv_int(z);
            return HY_OK;
        }
        *out = jv_float(fx + fy);
        return HY_OK;
    case JOP_SUB:
        if (ints) {
            if (__builtin_sub_overflow(x, y, &z))
                return hy_jrt_err(C, n, HY_ERANGE, "integer overflow (Python ints are unbounded; we stop at 64 bits)");
            *out = jv_int(z);
            return HY_OK;
        }
        *out = jv_float(fx - fy);
        return HY_OK;
    case JOP_MUL:
        if (ints) {
            if (__builtin_mul_overflow(x, y, &z))
                return hy_jrt_err(C, n, HY_ERANGE, "integer overflow (Python ints are unbounded; we stop at 64 bits)");
            *out = jv_int(z);
            return HY_OK;
        }
        *out = jv_float(fx * fy);
        return HY_OK;
    case JOP_DIV:
        if (fy == 0)
            return hy_jrt_err(C, n, HY_EINVAL, "division by zero");
        *out = jv_float(fx / fy);
        return HY_OK;
    case JOP_FLOORDIV: case JOP_MOD:
        if (fy == 0)
            return hy_jrt_err(C, n, HY_EINVAL, "integer division or modulo by zero");
        if (ints && !(x == INT64_MIN && y == -1)) {
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q--;
                m += y;
            }
            *out = jv_int(op == JOP_FLOORDIV ? q : m);
        } else {
            double m = fmod(fx, fy);
            if (m != 0 && ((m < 0) != (fy < 0)))
                m += fy;
            *out = jv_float(op == JOP_FLOORDIV ? floor(fx / fy) : m);
        }
        return HY_OK;
    default: /* JOP_POW */
        if (ints && y >= 0) {
            /* square-and-multiply: bounded steps even for huge exponents */
            int64_t r = 1, base = x, e = y;
            bool ovf = false;
            while (e > 0 && !ovf) {
                if (e & 1)
                    ovf = __builtin_mul_overflow(r, base, &r);
                e >>= 1;
                if (e > 0 && !ovf)
                    ovf = __builtin_mul_overflow(base, base, &base);
            }
            if (ovf)
                return hy_jrt_err(C, n, HY_ERANGE, "integer overflow (Python ints are unbounded; we stop at 64 bits)");
            *out = jv_int(r);
            return HY_OK;
        }
        *out = jv_float(pow(fx, fy));
        return HY_OK;
    }
}

int hy_jrt_binop(jctx_t *C, const jnode_t *n, int op, jv_t a, jv_t b, jv_t *out)
{
    int rc, c;
    bool r;

    switch (op) {
    case JOP_CONCAT: {
        jbuf_t buf = hy_jrt_newbuf(C);
        if ((rc = hy_jrt_chk(C, n, jv_write_str(&buf, a))) < 0 || (rc = hy_jrt_chk(C, n, jv_write_str(&buf, b))) < 0)
            return rc;
        *out = jv_str(buf.p ? buf.p : "", buf.n);
        return HY_OK;
    }
    case JOP_EQ: *out = jv_bool(jv_equal(a, b)); return HY_OK;
    case JOP_NE: *out = jv_bool(!jv_equal(a, b)); return HY_OK;
    case JOP_LT: case JOP_LE: case JOP_GT: case JOP_GE:
        if ((rc = hy_jrt_compare(C, n, a, b, &c)) < 0)
            return rc;
        *out = jv_bool(op == JOP_LT ? c < 0 : op == JOP_LE ? c <= 0 : op == JOP_GT ? c > 0 : c >= 0);
        return HY_OK;
    case JOP_IN: case JOP_NOTIN:
        if ((rc = hy_jrt_contains(C, n, a, b, &r)) < 0)
            return rc;
        *out = jv_bool(op == JOP_IN ? r : !r);
        return HY_OK;
    }
    if (a.t == JV_UNDEF)
        return hy_jrt_undef(C, n, a);
    if (b.t == JV_UNDEF)
        return hy_jrt_undef(C, n, b);
    rc = seq_binop(C, n, op, a, b, out);
    if (rc != 1)
        return rc;
    return num_binop(C, n, op, a, b, out);
}

/* ---- calls ---- */

static int eval_args(jctx_t *C, jframe_t *f, const jnode_t *n, jargs_t *A)
{
    int rc;
    A->na = n->n;
    A->nk = n->n2;
    A->kwn = n->names;
    A->args = hy_jinja_alloc(C->a, (n->n + 1) * sizeof(jv_t));
    A->kwv = hy_jinja_alloc(C->a, (n->n2 + 1) * sizeof(jv_t));
    if (!A->args || !A->kwv)
        return OOM(n);
    for (size_t i = 0; i < n->n; i++)
        if ((rc = eval(C, f, n->list[i], &A->args[i])) < 0)
            return rc;
    for (size_t i = 0; i < n->n2; i++)
        if ((rc = eval(C, f, n->list2[i], &A->kwv[i])) < 0)
            return rc;
    return HY_OK;
}

/* positional i or keyword `name`, else dflt */
jv_t hy_jrt_arg(const jargs_t *A, size_t i, const char *name, jv_t dflt)
{
    if (i < A->na)
        return A->args[i];
    for (size_t k = 0; k < A->nk; k++)
        if (!strcmp(A->kwn[k], name))
            return A->kwv[k];
    return dflt;
}

static int call_macro(jctx_t *C, const jnode_t *n, const jnode_t *m, const jargs_t *A, jv_t *out)
{
    jframe_t fr = {.parent = C->root};
    int rc;

    if (A->na > m->nnames)
        return hy_jrt_err(C, n, HY_EINVAL, "macro '%s' takes not more than %zu argument(s)", m->str, m->nnames);
    if (++C->calls > HY_JINJA_MAX_CALLS)
        return hy_jrt_err(C, n, HY_ERANGE, "macro calls nested too deeply (limit %d)", HY_JINJA_MAX_CALLS);
    for (size_t k = 0; k < A->nk; k++) {
        bool found = false;
        for (size_t i = 0; i < m->nnames; i++)
            found |= !strcmp(m->names[i], A->kwn[k]);
        if (!found)
            return hy_jrt_err(C, n, HY_EINVAL, "macro '%s' has no argument '%s'", m->str, A->kwn[k]);
    }
    for (size_t i = 0; i < m->nnames; i++) {
        jv_t v = hy_jrt_arg(A, i, m->names[i], jv_undef(m->names[i]));
        if (v.t == JV_UNDEF && i >= A->na && m->list2[i] && (rc = eval(C, &fr, m->list2[i], &v)) < 0)
            return rc;
        if ((rc = assign(C, &fr, n, m->names[i], v)) < 0)
            return rc;
    }
    jbuf_t b = hy_jrt_newbuf(C), *saved = C->out;
    b.limit = saved->limit - saved->n;
    C->out = &b;
    rc = exec_body(C, &fr, m->b->list, m->b->n);
    C->out = saved;
    if (rc < 0)
        return rc;
    C->calls--;
    *out = jv_str(b.p ? b.p : "", b.n);
    return HY_OK;
}

static int call_func(jctx_t *C, const jnode_t *n, int id, const jargs_t *A, jv_t *out)
{
    int rc;
    switch (id) {
    case FN_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (A->na < 1 || A->na > 3)
            return hy_jrt_err(C, n, HY_EINVAL, "range expected 1 to 3 arguments, got %zu", A->na);
        for (size_t i = 0; i < A->na; i++) {
            if (A->args[i].t != JV_INT && A->args[i].t != JV_BOOL)
                return hy_jrt_err(C, n, HY_EINVAL, "range: '%s' object cannot be interpreted as an integer", jv_type_name(A->args[i]));
        }
        if (A->na == 1) {
            v[1] = A->args[0].u.i;
        } else {
            v[0] = A->args[0].u.i;
            v[1] = A->args[1].u.i;
            if (A->na == 3)
                v[2] = A->args[2].u.i;
        }
        if (v[2] == 0)
            return hy_jrt_err(C, n, HY_EINVAL, "range() arg 3 must not be zero");
        double cnt = ceil(((double)v[1] - (double)v[0]) / (double)v[2]);
        if (cnt > HY_JINJA_MAX_ITER)
            return hy_jrt_err(C, n, HY_ERANGE, "range() of %.0f items exceeds the %d limit", cnt, HY_JINJA_MAX_ITER);
        jv_list_t *l = jv_list_new(C->a, cnt > 0 ? (size_t)cnt : 0);
        if (!l)
            return OOM(n);
        for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2])
            l->v[l->n++] = jv_int(i);
        out->t = JV_LIST;
        out->u.l = l;
        return HY_OK;
    }
    case FN_NAMESPACE: case FN_DICT: {
        jv_dict_t *d = jv_dict_new(C->a, 0);
        if (!d)
            return OOM(n);
        d->ns = id == FN_NAMESPACE;
        for (size_t i = 0; i < A->na; i++) {
            jv_t src = A->args[i];
            if (src.t != JV_DICT || src.u.d->ns)
                return hy_jrt_err(C, n, HY_EINVAL, "%s() positional argument must be a mapping", func_names[id]);
            for (size_t k = 0; k < src.u.d->n; k++)
                if (jv_dict_set(C->a, d, src.u.d->k[k], src.u.d->kn[k], src.u.d->v[k]) < 0)
                    return OOM(n);
        }
        for (size_t k = 0; k < A->nk; k++)
            if (jv_dict_set(C->a, d, A->kwn[k], strlen(A->kwn[k]), A->kwv[k]) < 0)
                return OOM(n);
        out->t = JV_DICT;
        out->u.d = d;
        return HY_OK;
    }
    case FN_RAISE: {
        jv_t m;
        if ((rc = hy_jrt_to_str(C, n, hy_jrt_arg(A, 0, "message", jv_str("", 0)), &m)) < 0)
            return rc;
        return hy_jrt_err(C, n, HY_EINVAL, "raise_exception: %.*s", (int)HY_MIN(m.u.s.n, 300), m.u.s.p);
    }
    case FN_STRFTIME: {
        jv_t fmt = hy_jrt_arg(A, 0, "format", jv_undef("format"));
        struct tm tm;
        time_t t = C->now ? (time_t)C->now : time(NULL);
        char buf[512];
        if (fmt.t != JV_STR)
            return hy_jrt_err(C, n, HY_EINVAL, "strftime_now() argument must be str, not %s", jv_type_name(fmt));
        /* a fixed `now` is UTC so tests do not depend on the machine's zone;
         * the live clock is local time, like Python's datetime.now() */
        if (C->now ? !gmtime_r(&t, &tm) : !localtime_r(&t, &tm))
            return hy_jrt_err(C, n, HY_EINVAL, "strftime_now: cannot convert time");
        char *f = hy_jinja_strdup(C->a, fmt.u.s.p, fmt.u.s.n);
        if (!f)
            return OOM(n);
        /* the template's own format: strftime takes no variadic arguments,
         * so a format it does not know prints itself, nothing is misread */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        size_t len = fmt.u.s.n ? strftime(buf, sizeof buf, f, &tm) : 0;
#pragma GCC diagnostic pop
        if (fmt.u.s.n && len == 0)
            return hy_jrt_err(C, n, HY_EINVAL, "strftime_now: format produced nothing or is too long");
        char *s = hy_jinja_strdup(C->a, buf, len);
        if (!s)
            return OOM(n);
        *out = jv_str(s, len);
        return HY_OK;
    }
    }
    return hy_jrt_err(C, n, HY_EINVAL, "unknown function");
}

static int eval_call(jctx_t *C, jframe_t *f, const jnode_t *n, jv_t *out)
{
    jargs_t A;
    jv_t callee;
    int rc;

    if (n->a->kind == JN_ATTR) {
        jv_t obj;
        if ((rc = eval(C, f, n->a->a, &obj)) < 0)
            return rc;
        if (obj.t == JV_STR || (obj.t == JV_DICT && !obj.u.d->ns) || obj.t == JV_LOOP || obj.t == JV_UNDEF) {
            jv_t *member = obj.t == JV_DICT ? jv_dict_get(obj.u.d, n->a->str, n->a->len) : NULL;
            if (!member || (member->t != JV_MACRO && member->t != JV_FUNC)) {
                if ((rc = eval_args(C, f, n, &A)) < 0)
                    return rc;
                return hy_jrt_method(C, n, obj, n->a->str, &A, out);
            }
        }
        if ((rc = hy_jrt_getattr(C, n->a, obj, n->a->str, n->a->len, &callee)) < 0)
            return rc;
    } else if ((rc = eval(C, f, n->a, &callee)) < 0) {
        return rc;
    }
    if ((rc = eval_args(C, f, n, &A)) < 0)
        return rc;
    if (callee.t == JV_MACRO)
        return call_macro(C, n, callee.u.m, &A, out);
    if (callee.t == JV_FUNC)
        return call_func(C, n, (int)callee.u.i, &A, out);
    if (callee.t == JV_UNDEF)
        return hy_jrt_undef(C, n, callee);
    return hy_jrt_err(C, n, HY_EINVAL, "'%s' object is not callable", jv_type_name(callee));
}

/* ---- expressions ---- */
static int eval_node(jctx_t *C, jframe_t *f, const jnode_t *n, jv_t *out);

static int eval(jctx_t *C, jframe_t *f, const jnode_t *n, jv_t *out)
{
    int rc;
    if (++C->depth > HY_JINJA_MAX_EVAL)
        return hy_jrt_err(C, n, HY_ERANGE, "evaluation nested too deeply (limit %d)", HY_JINJA_MAX_EVAL);
    rc = eval_node(C, f, n, out);
    C->depth--;
    return rc;
}

static int eval_node(jctx_t *C, jframe_t *f, const jnode_t *n, jv_t *out)
{
    jv_t a, b;
    int rc;

    switch (n->kind) {
    case JN_LIT: *out = n->val; return HY_OK;
    case JN_NAME: *out = lookup(C, f, n->str, n->len); return HY_OK;
    case JN_ATTR:
        if ((rc = eval(C, f, n->a, &a)) < 0)
            return rc;
        return hy_jrt_getattr(C, n, a, n->str, n->len, out);
    case JN_INDEX:
        if ((rc = eval(C, f, n->a, &a)) < 0 || (rc = eval(C, f, n->b, &b)) < 0)
            return rc;
        return hy_jrt_getitem(C, n, a, b, out);
    case JN_SLICE: {
        jv_t sv[3] = {jv_none(), jv_none(), jv_none()};
        const jnode_t *parts[3] = {n->b, n->c, n->list[0]};
        if ((rc = eval(C, f, n->a, &a)) < 0)
            return rc;
        for (int k = 0; k < 3; k++)
            if (parts[k] && (rc = eval(C, f, parts[k], &sv[k])) < 0)
                return rc;
        return hy_jrt_slice(C, n, a, sv, out);
    }
    case JN_CALL: return eval_call(C, f, n, out);
    case JN_FILTER: {
        jargs_t A;
        if ((rc = eval(C, f, n->a, &a)) < 0 || (rc = eval_args(C, f, n, &A)) < 0)
            return rc;
        return hy_jrt_filter(C, f, n, n->op, a, A.args, A.na, A.kwn, A.kwv, A.nk, out);
    }
    case JN_TEST: {
        jargs_t A;
        bool r;
        if ((rc = eval(C, f, n->a, &a)) < 0 || (rc = eval_args(C, f, n, &A)) < 0 ||
            (rc = hy_jrt_test(C, n, n->op, a, A.args, A.na, &r)) < 0)
            return rc;
        *out = jv_bool(r != n->neg);
        return HY_OK;
    }
    case JN_NEG: case JN_POS:
        if ((rc = eval(C, f, n->a, &a)) < 0)
            return rc;
        if (a.t == JV_UNDEF)
            return hy_jrt_undef(C, n, a);
        if (!hy_jrt_is_num(a))
            return hy_jrt_err(C, n, HY_EINVAL, "bad operand type for unary %c: '%s'", n->kind == JN_NEG ? '-' : '+', jv_type_name(a));
        if (n->kind == JN_POS)
            *out = a.t == JV_BOOL ? jv_int(a.u.i) : a;
        else
            *out = a.t == JV_FLOAT ? jv_float(-a.u.f) : jv_int(-a.u.i);
        return HY_OK;
    case JN_NOT:
        if ((rc = eval(C, f, n->a, &a)) < 0)
            return rc;
        *out = jv_bool(!jv_truthy(a));
        return HY_OK;
    case JN_AND: case JN_OR:
        if ((rc = eval(C, f, n->a, &a)) < 0)
            return rc;
        if (jv_truthy(a) == (n->kind == JN_OR)) {
            *out = a;
            return HY_OK;
        }
        return eval(C, f, n->b, out);
    case JN_BIN:
        if ((rc = eval(C, f, n->a, &a)) < 0 || (rc = eval(C, f, n->b, &b)) < 0)
            return rc;
        return hy_jrt_binop(C, n, n->op, a, b, out);
    case JN_COND:
        if ((rc = eval(C, f, n->b, &a)) < 0)
            return rc;
        if (jv_truthy(a))
            return eval(C, f, n->a, out);
        if (n->c)
            return eval(C, f, n->c, out);
        *out = jv_undef(NULL);
        return HY_OK;
    case JN_LIST: case JN_TUPLE: {
        jv_list_t *l = jv_list_new(C->a, n->n);
        if (!l)
            return OOM(n);
        l->tuple = n->kind == JN_TUPLE;
        for (size_t i = 0; i < n->n; i++)
            if ((rc = eval(C, f, n->list[i], &l->v[l->n++])) < 0)
                return rc;
        out->t = JV_LIST;
        out->u.l = l;
        return HY_OK;
    }
    case JN_DICT: {
        jv_dict_t *d = jv_dict_new(C->a, n->n);
        if (!d)
            return OOM(n);
        for (size_t i = 0; i < n->n; i++) {
            if ((rc = eval(C, f, n->list[i], &a)) < 0 || (rc = eval(C, f, n->list2[i], &b)) < 0)
                return rc;
            if (a.t != JV_STR)
                return hy_jrt_err(C, n->list[i], HY_EUNSUPPORTED, "dict keys must be strings here, not %s", jv_type_name(a));
            if (jv_dict_set(C->a, d, a.u.s.p, a.u.s.n, b) < 0)
                return OOM(n);
        }
        out->t = JV_DICT;
        out->u.d = d;
        return HY_OK;
    }
    }
    return hy_jrt_err(C, n, HY_EINVAL, "internal: bad expression node %d", n->kind);
}

/* ---- statements ---- */
static int bind_target(jctx_t *C, jframe_t *f, const jnode_t *n, jv_t item)
{
    if (n->nnames == 1)
        return assign(C, f, n, n->names[0], item);
    if (item.t != JV_LIST || item.u.l->n != n->nnames)
        return hy_jrt_err(C, n, HY_EINVAL, "cannot unpack %s into %zu loop variables", jv_type_name(item), n->nnames);
    for (size_t k = 0; k < n->nnames; k++) {
        int rc = assign(C, f, n, n->names[k], item.u.l->v[k]);
        if (rc < 0)
            return rc;
    }
    return HY_OK;
}

static int exec_for(jctx_t *C, jframe_t *f, const jnode_t *n)
{
    jv_t it;
    jv_list_t *items;
    int rc;

    if ((rc = eval(C, f, n->a, &it)) < 0 || (rc = hy_jrt_iterate(C, n->a, it, &items)) < 0)
        return rc;
    if (n->c) { /* `for x in xs if cond`: loop.* counts only kept items */
        jv_list_t *kept = jv_list_new(C->a, items->n);
        if (!kept)
            return OOM(n);
        for (size_t i = 0; i < items->n; i++) {
            jframe_t fr = {.parent = f};
            jv_t c;
            if (++C->iters > HY_JINJA_MAX_ITER)
                return hy_jrt_err(C, n, HY_ERANGE, "more than %d loop iterations", HY_JINJA_MAX_ITER);
            if ((rc = bind_target(C, &fr, n, items->v[i])) < 0 || (rc = eval(C, &fr, n->c, &c)) < 0)
                return rc;
            if (jv_truthy(c))
                kept->v[kept->n++] = items->v[i];
        }
        items = kept;
    }
    jloop_t L = {.items = items};
    jv_t lv = {.t = JV_LOOP};
    lv.u.loop = &L;
    for (L.i = 0; L.i < items->n; L.i++) {
        jframe_t fr = {.parent = f};
        if (++C->iters > HY_JINJA_MAX_ITER)
            return hy_jrt_err(C, n, HY_ERANGE, "more than %d loop iterations", HY_JINJA_MAX_ITER);
        if ((rc = bind_target(C, &fr, n, items->v[L.i])) < 0 || (rc = assign(C, &fr, n, "loop", lv)) < 0)
            return rc;
        rc = exec_body(C, &fr, n->b->list, n->b->n);
        if (rc < 0)
            return rc;
        if (rc == EX_BREAK)
            break;
    }
    if (items->n == 0 && n->n2)
        return exec_body(C, f, n->list2, n->n2);
    return EX_OK;
}

static int exec_node(jctx_t *C, jframe_t *f, const jnode_t *n)
{
    jv_t v;
    int rc;

    switch (n->kind) {
    case JN_TEXT:
        return hy_jrt_chk(C, n, jbuf_put(C->out, n->str, n->len));
    case JN_OUTPUT:
        if ((rc = eval(C, f, n->a, &v)) < 0)
            return rc;
        return hy_jrt_chk(C, n, jv_write_str(C->out, v));
    case JN_IF:
        if ((rc = eval(C, f, n->a, &v)) < 0)
            return rc;
        if (jv_truthy(v))
            return exec_body(C, f, n->b->list, n->b->n);
        if (!n->c)
            return EX_OK;
        if (n->c->kind == JN_IF)
            return exec_node(C, f, n->c);
        return exec_body(C, f, n->c->list, n->c->n);
    case JN_FOR:
        return exec_for(C, f, n);
    case JN_SET:
        if ((rc = eval(C, f, n->a, &v)) < 0)
            return rc;
        if (n->neg) { /* set a, b = pair */
            if (v.t != JV_LIST || v.u.l->n != n->nnames)
                return hy_jrt_err(C, n, HY_EINVAL, "cannot unpack %s into %zu variables", jv_type_name(v), n->nnames);
            for (size_t k = 0; k < n->nnames; k++)
                if ((rc = assign(C, f, n, n->names[k], v.u.l->v[k])) < 0)
                    return rc;
            return EX_OK;
        }
        if (n->nnames) {
            jv_t ns = lookup(C, f, n->str, n->len);
            if (ns.t != JV_DICT || !ns.u.d->ns)
                return hy_jrt_err(C, n, HY_EINVAL, "cannot assign attribute on non-namespace object '%s'", n->str);
            if (n->names[0][0] == '_')
                return hy_jrt_err(C, n, HY_EINVAL, "cannot store underscore-prefixed attribute '%s' on a namespace", n->names[0]);
            if (jv_dict_set(C->a, ns.u.d, n->names[0], strlen(n->names[0]), v) < 0)
                return OOM(n);
            return EX_OK;
        }
        return assign(C, f, n, n->str, v);
    case JN_SETBLOCK: {
        jbuf_t b = hy_jrt_newbuf(C), *saved = C->out;
        b.limit = saved->limit - saved->n;
        C->out = &b;
        rc = exec_body(C, f, n->b->list, n->b->n);
        C->out = saved;
        if (rc < 0)
            return rc;
        return assign(C, f, n, n->str, jv_str(b.p ? b.p : "", b.n));
    }
    case JN_MACRO:
        v.t = JV_MACRO;
        v.u.m = n;
        return assign(C, f, n, n->str, v);
    case JN_BREAK: return EX_BREAK;
    case JN_CONTINUE: return EX_CONTINUE;
    case JN_BODY: return exec_body(C, f, n->list, n->n);
    }
    return hy_jrt_err(C, n, HY_EINVAL, "internal: bad statement node %d", n->kind);
}

static int exec_body(jctx_t *C, jframe_t *f, jnode_t *const *list, size_t cnt)
{
    int rc = EX_OK;
    if (++C->depth > HY_JINJA_MAX_EVAL)
        return hy_jrt_err(C, cnt ? list[0] : NULL, HY_ERANGE, "blocks nested too deeply (limit %d)", HY_JINJA_MAX_EVAL);
    for (size_t i = 0; i < cnt; i++) {
        rc = list[i]->kind == JN_BODY ? exec_body(C, f, list[i]->list, list[i]->n) : exec_node(C, f, list[i]);
        if (rc != EX_OK)
            break;
    }
    C->depth--;
    return rc;
}

int hy_jinja_render(const jtemplate_t *t, hy_jinja_arena_t *a, const jglobal_t *globals,
                    size_t nglobals, int64_t now, size_t max_output, char **out,
                    size_t *out_len, char *err)
{
    jbuf_t b = {.a = a, .limit = max_output};
    jframe_t root = {0};
    jctx_t C = {.a = a, .t = t, .out = &b, .root = &root, .now = now, .err = err};
    int rc;

    for (size_t i = 0; i < nglobals; i++)
        if ((rc = assign(&C, &root, t->root, globals[i].name, globals[i].value)) < 0)
            return rc;
    rc = exec_body(&C, &root, t->root->list, t->root->n);
    if (rc < 0)
        return rc;
    *out = b.p ? b.p : "";
    *out_len = b.n;
    return HY_OK;
}
