/*
 * jinja_parse.c - lexer and recursive-descent parser for the Jinja2 subset
 * that chat templates use.  The lexer reproduces jinja2's whitespace rules
 * exactly as Hugging Face configures them (trim_blocks and lstrip_blocks on,
 * `-`/`+` modifiers, trailing newline dropped), because one stray byte in a
 * prompt changes the model's output.  Everything a template cannot do is
 * rejected here, at compile time, with line:column and the construct.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/jinja.h"

/* ---- arena ---- */
struct hy_jinja_chunk {
    hy_jinja_chunk_t *next;
    size_t size, used;
    max_align_t data[];
};

void *hy_jinja_alloc(hy_jinja_arena_t *a, size_t n)
{
    hy_jinja_chunk_t *c = a->head;

    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    if (!c || c->size - c->used < n) {
        size_t sz = n > 65536 ? n : 65536;
        if (a->used_total + sz > a->cap)
            return NULL;
        c = malloc(sizeof(*c) + sz);
        if (!c)
            return NULL;
        c->size = sz;
        c->used = 0;
        c->next = a->head;
        a->head = c;
        a->used_total += sz;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

void hy_jinja_arena_free(hy_jinja_arena_t *a)
{
    while (a->head) {
        hy_jinja_chunk_t *n = a->head->next;
        free(a->head);
        a->head = n;
    }
    a->used_total = 0;
}

char *hy_jinja_strdup(hy_jinja_arena_t *a, const char *s, size_t n)
{
    char *p = hy_jinja_alloc(a, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

void hy_jinja_linecol(const char *src, size_t len, size_t pos, int *line, int *col)
{
    int l = 1, c = 1;
    for (size_t i = 0; i < pos && i < len; i++) {
        if (src[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

/* ---- lexer ---- */
enum {
    TK_EOF, TK_TEXT, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
    TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP,
};

typedef struct {
    int type;
    size_t pos;
    const char *s; /* TEXT/NAME/STRING (decoded) / OP spelling */
    size_t n;
    int64_t i;
    double f;
} jtok_t;

typedef struct {
    jtemplate_t *t;
    hy_jinja_arena_t *a;
    const char *src;
    size_t len;
    jtok_t *tok;
    size_t ntok, cap;
    size_t p; /* parser cursor */
    int depth;
    char *err;
} jparse_t;

static int perr(jparse_t *P, size_t pos, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int perr(jparse_t *P, size_t pos, int code, const char *fmt, ...)
{
    int line, col;
    char msg[256];
    va_list ap;

    hy_jinja_linecol(P->src, P->len, pos, &line, &col);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return hy_err(P->err, code, "chat template %d:%d: %s", line, col, msg);
}

static int push_tok(jparse_t *P, jtok_t t)
{
    if (P->ntok == P->cap) {
        size_t nc = P->cap ? P->cap * 2 : 256;
        jtok_t *nt = hy_jinja_alloc(P->a, nc * sizeof(*nt));
        if (!nt)
            return hy_err(P->err, HY_ENOMEM, "chat template: out of memory");
        if (P->ntok)
            memcpy(nt, P->tok, P->ntok * sizeof(*nt));
        P->tok = nt;
        P->cap = nc;
    }
    P->tok[P->ntok++] = t;
    return HY_OK;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static bool is_ident(char c, bool first)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (!first && c >= '0' && c <= '9');
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63)); return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* A string literal with Python's unicode-escape rules (what jinja2 applies). */
static int lex_string(jparse_t *P, size_t *ip)
{
    size_t i = *ip, start = i;
    char q = P->src[i++];
    char *o = hy_jinja_alloc(P->a, P->len - i + 1);
    size_t n = 0;

    if (!o)
        return hy_err(P->err, HY_ENOMEM, "chat template: out of memory");
    for (;;) {
        if (i >= P->len)
            return perr(P, start, HY_EFORMAT, "unterminated string literal");
        char c = P->src[i++];
        if (c == q)
            break;
        if (c != '\\') {
            o[n++] = c;
            continue;
        }
        if (i >= P->len)
            return perr(P, start, HY_EFORMAT, "unterminated string literal");
        c = P->src[i++];
        int nd = 0;
        switch (c) {
        case 'n': o[n++] = '\n'; break;
        case 't': o[n++] = '\t'; break;
        case 'r': o[n++] = '\r'; break;
        case 'a': o[n++] = '\a'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'v': o[n++] = '\v'; break;
        case '\\': o[n++] = '\\'; break;
        case '\'': o[n++] = '\''; break;
        case '"': o[n++] = '"'; break;
        case '\n': break;
        case 'x': nd = 2; break;
        case 'u': nd = 4; break;
        case 'U': nd = 8; break;
        default:
            if (c >= '0' && c <= '7') {
                uint32_t v = (uint32_t)(c - '0');
                for (int k = 0; k < 2 && i < P->len && P->src[i] >= '0' && P->src[i] <= '7'; k++)
                    v = v * 8 + (uint32_t)(P->src[i++] - '0');
                n += put_utf8(o + n, v);
            } else {
                o[n++] = '\\';
                o[n++] = c;
            }
        }
        if (nd) {
            uint32_t v = 0;
            for (int k = 0; k < nd; k++) {
                int h = i < P->len ? hexval(P->src[i]) : -1;
                if (h < 0)
                    return perr(P, i, HY_EFORMAT, "bad \\%c escape in string literal", c);
                v = v * 16 + (uint32_t)h;
                i++;
            }
            if (v > 0x10FFFF)
                return perr(P, i, HY_EFORMAT, "bad \\U escape in string literal");
            n += put_utf8(o + n, v);
        }
    }
    o[n] = 0;
    *ip = i;
    return push_tok(P, (jtok_t){.type = TK_STRING, .pos = start, .s = o, .n = n});
}

static const char *const two_ops[] = {"//", "**", "==", "!=", "<=", ">="};

/* Tokens of one {{ }} or {% %} tag; returns the index just after its end. */
static int lex_tag(jparse_t *P, size_t *ip, bool block, size_t tag_pos, bool *ate_nl)
{
    size_t i = *ip;
    int bal = 0;
    int rc;

    for (;;) {
        while (i < P->len && is_space(P->src[i]))
            i++;
        if (i >= P->len)
            return perr(P, tag_pos, HY_EFORMAT, "unterminated %s", block ? "'{%' tag" : "'{{' tag");
        const char *s = P->src + i;
        size_t rem = P->len - i;
        if (bal == 0) {
            char e = block ? '%' : '}';
            size_t k = 0;
            int sign = 0;
            if ((s[0] == '-' || (block && s[0] == '+')) && rem >= 3 && s[1] == e && s[2] == '}') {
                sign = s[0];
                k = 1;
            }
            if (rem >= k + 2 && s[k] == e && s[k + 1] == '}') {
                size_t end_pos = i;
                i += k + 2;
                *ate_nl = false;
                if (sign == '-') {
                    while (i < P->len && is_space(P->src[i])) {
                        *ate_nl = P->src[i] == '\n';
                        i++;
                    }
                } else if (!sign && block && i < P->len && P->src[i] == '\n') {
                    i++; /* trim_blocks */
                    *ate_nl = true;
                }
                *ip = i;
                return push_tok(P, (jtok_t){.type = block ? TK_BLOCK_END : TK_VAR_END, .pos = end_pos});
            }
        }
        if (s[0] == '"' || s[0] == '\'') {
            if ((rc = lex_string(P, &i)) < 0)
                return rc;
            continue;
        }
        if (is_ident(s[0], true)) {
            size_t k = 1;
            while (k < rem && is_ident(s[k], false))
                k++;
            if ((rc = push_tok(P, (jtok_t){.type = TK_NAME, .pos = i, .s = s, .n = k})) < 0)
                return rc;
            i += k;
            continue;
        }
        if (s[0] >= '0' && s[0] <= '9') {
            char buf[64];
            size_t k = 0, bn = 0;
            bool flt = false;
            while (k < rem && ((s[k] >= '0' && s[k] <= '9') || s[k] == '_')) {
                if (s[k] != '_' && bn < 60) buf[bn++] = s[k];
                k++;
            }
            if (k + 1 < rem && s[k] == '.' && s[k + 1] >= '0' && s[k + 1] <= '9') {
                flt = true;
                buf[bn++] = s[k++];
                while (k < rem && ((s[k] >= '0' && s[k] <= '9') || s[k] == '_')) {
                    if (s[k] != '_' && bn < 60) buf[bn++] = s[k];
                    k++;
                }
            }
            if (k < rem && (s[k] == 'e' || s[k] == 'E')) {
                size_t m = k + 1;
                if (m < rem && (s[m] == '+' || s[m] == '-'))
                    m++;
                if (m < rem && s[m] >= '0' && s[m] <= '9') {
                    flt = true;
                    buf[bn++] = 'e';
                    for (size_t q = k + 1; q < m; q++) buf[bn++] = s[q];
                    k = m;
                    while (k < rem && s[k] >= '0' && s[k] <= '9') {
                        if (bn < 62) buf[bn++] = s[k];
                        k++;
                    }
                }
            }
            buf[bn] = 0;
            jtok_t t = {.type = flt ? TK_FLOAT : TK_INT, .pos = i, .s = s, .n = k};
            if (flt) {
                t.f = strtod(buf, NULL);
            } else {
                char *end;
                unsigned long long v = strtoull(buf, &end, 10);
                if (bn > 18 && (v > INT64_MAX || bn > 19))
                    return perr(P, i, HY_EFORMAT, "integer literal too large");
                t.i = (int64_t)v;
            }
            if ((rc = push_tok(P, t)) < 0)
                return rc;
            i += k;
            continue;
        }
        size_t k = 0;
        for (size_t q = 0; q < HY_ARRAY_LEN(two_ops); q++)
            if (rem >= 2 && s[0] == two_ops[q][0] && s[1] == two_ops[q][1])
                k = 2;
        if (!k && strchr("+-*/%~<>=()[]{}.,:|", s[0]))
            k = 1;
        if (!k)
            return perr(P, i, HY_EFORMAT, "unexpected character '%s'", (char[]){s[0], 0});
        if (s[0] == '(' || s[0] == '[' || s[0] == '{')
            bal++;
        if (s[0] == ')' || s[0] == ']' || s[0] == '}') {
            if (--bal < 0)
                return perr(P, i, HY_EFORMAT, "unexpected '%s'", (char[]){s[0], 0});
        }
        if ((rc = push_tok(P, (jtok_t){.type = TK_OP, .pos = i, .s = s, .n = k})) < 0)
            return rc;
        i += k;
    }
}

static int lex(jparse_t *P)
{
    size_t i = 0;
    bool line_starting = true;
    int rc;

    while (i < P->len) {
        size_t k = i;
        int kind = 0; /* '{', '%', '#' */
        while (k + 1 < P->len) {
            if (P->src[k] == '{' && (P->src[k + 1] == '{' || P->src[k + 1] == '%' || P->src[k + 1] == '#')) {
                kind = P->src[k + 1];
                break;
            }
            k++;
        }
        if (!kind)
            k = P->len;
        size_t tlen = k - i;
        char sign = (kind && k + 2 < P->len && (P->src[k + 2] == '-' || P->src[k + 2] == '+')) ? P->src[k + 2] : 0;
        if (kind == '{' && sign == '+')
            sign = 0;
        if (sign == '-') {
            while (tlen > 0 && is_space(P->src[i + tlen - 1]))
                tlen--;
        } else if (kind && kind != '{' && sign != '+') {
            /* lstrip_blocks: drop indentation before a block/comment tag */
            size_t l = tlen;
            while (l > 0 && P->src[i + l - 1] != '\n')
                l--;
            bool ws = true;
            for (size_t q = l; q < tlen; q++)
                if (!is_space(P->src[i + q]))
                    ws = false;
            if ((l > 0 || line_starting) && ws)
                tlen = l;
        }
        if (tlen > 0 && (rc = push_tok(P, (jtok_t){.type = TK_TEXT, .pos = i, .s = P->src + i, .n = tlen})) < 0)
            return rc;
        if (!kind)
            break;
        size_t tag = k;
        i = k + 2 + (sign ? 1 : 0);
        bool ate_nl = false;
        if (kind == '#') {
            size_t e = i;
            while (e + 1 < P->len && !(P->src[e] == '#' && P->src[e + 1] == '}'))
                e++;
            if (e + 1 >= P->len)
                return perr(P, tag, HY_EFORMAT, "unterminated comment '{#'");
            char csign = e > i && (P->src[e - 1] == '-' || P->src[e - 1] == '+') ? P->src[e - 1] : 0;
            i = e + 2;
            if (csign == '-') {
                while (i < P->len && is_space(P->src[i])) {
                    ate_nl = P->src[i] == '\n';
                    i++;
                }
            } else if (!csign && i < P->len && P->src[i] == '\n') {
                i++;
                ate_nl = true;
            }
        } else {
            bool block = kind == '%';
            if ((rc = push_tok(P, (jtok_t){.type = block ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, .pos = tag})) < 0)
                return rc;
            /* {% raw %} must be handled before tokenizing its body */
            size_t q = i;
            while (q < P->len && is_space(P->src[q]))
                q++;
            if (block && P->len - q >= 3 && !memcmp(P->src + q, "raw", 3) &&
                (q + 3 >= P->len || !is_ident(P->src[q + 3], false)))
                return perr(P, tag, HY_EUNSUPPORTED, "unsupported tag '%s'", "raw");
            if ((rc = lex_tag(P, &i, block, tag, &ate_nl)) < 0)
                return rc;
        }
        line_starting = ate_nl;
    }
    return push_tok(P, (jtok_t){.type = TK_EOF, .pos = P->len});
}

/* ---- parser ---- */
static jtok_t *cur(jparse_t *P) { return &P->tok[P->p]; }

static bool is_op(jtok_t *t, const char *op)
{
    return t->type == TK_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n);
}

static bool is_name(jtok_t *t, const char *nm)
{
    return t->type == TK_NAME && t->n == strlen(nm) && !memcmp(t->s, nm, t->n);
}

static const char *tok_desc(jtok_t *t, char *buf, size_t bn)
{
    switch (t->type) {
    case TK_EOF: return "end of template";
    case TK_TEXT: return "template text";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_END: return "'%}'";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_STRING: return "string literal";
    default:
        snprintf(buf, bn, "'%.*s'", (int)HY_MIN(t->n, 40), t->s);
        return buf;
    }
}

static int unexpected(jparse_t *P, const char *expected)
{
    char b[64], m[160];
    snprintf(m, sizeof m, "expected %s, got %s", expected, tok_desc(cur(P), b, sizeof b));
    return perr(P, cur(P)->pos, HY_EFORMAT, "%s", m);
}

static int expect_op(jparse_t *P, const char *op)
{
    char e[16];
    if (!is_op(cur(P), op)) {
        snprintf(e, sizeof e, "'%s'", op);
        return unexpected(P, e);
    }
    P->p++;
    return HY_OK;
}

static jnode_t *node(jparse_t *P, int kind, size_t pos)
{
    jnode_t *n = hy_jinja_alloc(P->a, sizeof(*n));
    if (n) {
        memset(n, 0, sizeof(*n));
        n->kind = kind;
        n->pos = pos;
    }
    return n;
}

#define NEWNODE(var, kind, pos)                                                   \
    do {                                                                          \
        if (!((var) = node(P, (kind), (pos))))                                    \
            return hy_err(P->err, HY_ENOMEM, "chat template: out of memory");     \
    } while (0)

/* list builder */
typedef struct { jnode_t **v; size_t n, cap; } nvec_t;
typedef struct { const char **v; size_t n, cap; } svec_t;

static int nvec_push(jparse_t *P, nvec_t *v, jnode_t *x)
{
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 4;
        jnode_t **nv = hy_jinja_alloc(P->a, nc * sizeof(*nv));
        if (!nv)
            return hy_err(P->err, HY_ENOMEM, "chat template: out of memory");
        if (v->n) memcpy(nv, v->v, v->n * sizeof(*nv));
        v->v = nv;
        v->cap = nc;
    }
    v->v[v->n++] = x;
    return HY_OK;
}

static int svec_push(jparse_t *P, svec_t *v, const char *s, size_t n)
{
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 4;
        const char **nv = hy_jinja_alloc(P->a, nc * sizeof(*nv));
        if (!nv)
            return hy_err(P->err, HY_ENOMEM, "chat template: out of memory");
        if (v->n) memcpy(nv, v->v, v->n * sizeof(*nv));
        v->v = nv;
        v->cap = nc;
    }
    if (!(v->v[v->n++] = hy_jinja_strdup(P->a, s, n)))
        return hy_err(P->err, HY_ENOMEM, "chat template: out of memory");
    return HY_OK;
}

static int parse_expr(jparse_t *P, jnode_t **out, bool with_cond);
static int parse_unary(jparse_t *P, jnode_t **out, bool with_filter);

/* (args, kw=args) after '(' has been seen; stores into n->list / names+list2 */
static int parse_call_args(jparse_t *P, jnode_t *n)
{
    nvec_t args = {0}, kwv = {0};
    svec_t kwn = {0};
    int rc;

    if ((rc = expect_op(P, "(")) < 0)
        return rc;
    while (!is_op(cur(P), ")")) {
        if (args.n + kwv.n > 0 && (rc = expect_op(P, ",")) < 0)
            return rc;
        if (is_op(cur(P), ")"))
            break;
        jnode_t *e;
        if (cur(P)->type == TK_NAME && is_op(&P->tok[P->p + 1], "=")) {
            jtok_t *t = cur(P);
            P->p += 2;
            if ((rc = parse_expr(P, &e, true)) < 0 || (rc = svec_push(P, &kwn, t->s, t->n)) < 0 ||
                (rc = nvec_push(P, &kwv, e)) < 0)
                return rc;
        } else {
            if (kwv.n)
                return perr(P, cur(P)->pos, HY_EFORMAT, "positional argument after keyword argument");
            if ((rc = parse_expr(P, &e, true)) < 0 || (rc = nvec_push(P, &args, e)) < 0)
                return rc;
        }
    }
    P->p++;
    n->list = args.v;
    n->n = args.n;
    n->list2 = kwv.v;
    n->n2 = kwv.n;
    n->names = kwn.v;
    n->nnames = kwn.n;
    return HY_OK;
}

static int parse_primary(jparse_t *P, jnode_t **out)
{
    jtok_t *t = cur(P);
    jnode_t *n;
    int rc;

    if (t->type == TK_NAME) {
        P->p++;
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
            NEWNODE(n, JN_LIT, t->pos);
            n->val = jv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (is_name(t, "none") || is_name(t, "None")) {
            NEWNODE(n, JN_LIT, t->pos);
            n->val = jv_none();
        } else {
            NEWNODE(n, JN_NAME, t->pos);
            if (!(n->str = hy_jinja_strdup(P->a, t->s, t->n)))
                return hy_err(P->err, HY_ENOMEM, "chat template: out of memory");
            n->len = t->n;
        }
    } else if (t->type == TK_STRING) {
        /* adjacent string literals concatenate, as in Python */
        NEWNODE(n, JN_LIT, t->pos);
        n->val = jv_str(t->s, t->n);
        P->p++;
        while (cur(P)->type == TK_STRING) {
            jtok_t *u = cur(P);
            char *c = hy_jinja_alloc(P->a, n->val.u.s.n + u->n + 1);
            if (!c)
                return hy_err(P->err, HY_ENOMEM, "chat template: out of memory");
            memcpy(c, n->val.u.s.p, n->val.u.s.n);
            memcpy(c + n->val.u.s.n, u->s, u->n);
            n->val = jv_str(c, n->val.u.s.n + u->n);
            P->p++;
        }
    } else if (t->type == TK_INT || t->type == TK_FLOAT) {
        NEWNODE(n, JN_LIT, t->pos);
        n->val = t->type == TK_INT ? jv_int(t->i) : jv_float(t->f);
        P->p++;
    } else if (is_op(t, "(")) {
        P->p++;
        if (is_op(cur(P), ")")) {
            P->p++;
            NEWNODE(n, JN_TUPLE, t->pos);
        } else {
            if ((rc = parse_expr(P, &n, true)) < 0)
                return rc;
            if (is_op(cur(P), ",")) {
                nvec_t items = {0};
                jnode_t *tn;
                NEWNODE(tn, JN_TUPLE, t->pos);
                if ((rc = nvec_push(P, &items, n)) < 0)
                    return rc;
                while (is_op(cur(P), ",")) {
                    P->p++;
                    if (is_op(cur(P), ")"))
                        break;
                    if ((rc = parse_expr(P, &n, true)) < 0 || (rc = nvec_push(P, &items, n)) < 0)
                        return rc;
                }
                tn->list = items.v;
                tn->n = items.n;
                n = tn;
            }
            if ((rc = expect_op(P, ")")) < 0)
                return rc;
        }
    } else if (is_op(t, "[")) {
        nvec_t items = {0};
        P->p++;
        NEWNODE(n, JN_LIST, t->pos);
        while (!is_op(cur(P), "]")) {
            jnode_t *e;
            if (items.n && (rc = expect_op(P, ",")) < 0)
                return rc;
            if (is_op(cur(P), "]"))
                break;
            if ((rc = parse_expr(P, &e, true)) < 0 || (rc = nvec_push(P, &items, e)) < 0)
                return rc;
        }
        P->p++;
        n->list = items.v;
        n->n = items.n;
    } else if (is_op(t, "{")) {
        nvec_t ks = {0}, vs = {0};
        P->p++;
        NEWNODE(n, JN_DICT, t->pos);
        while (!is_op(cur(P), "}")) {
            jnode_t *k, *v;
            if (ks.n && (rc = expect_op(P, ",")) < 0)
                return rc;
            if (is_op(cur(P), "}"))
                break;
            if ((rc = parse_expr(P, &k, true)) < 0 || (rc = expect_op(P, ":")) < 0 ||
                (rc = parse_expr(P, &v, true)) < 0 || (rc = nvec_push(P, &ks, k)) < 0 ||
                (rc = nvec_push(P, &vs, v)) < 0)
                return rc;
        }
        P->p++;
        n->list = ks.v;
        n->n = ks.n;
        n->list2 = vs.v;
        n->n2 = vs.n;
    } else {
        return unexpected(P, "an expression");
    }
    *out = n;
    return HY_OK;
}

/* attribute access, subscripts, slices and calls after a primary */
static int parse_postfix(jparse_t *P, jnode_t **io)
{
    int rc;
    for (;;) {
        jtok_t *t = cur(P);
        jnode_t *n;
        if (is_op(t, ".")) {
            P->p++;
            jtok_t *nm = cur(P);
            if (nm->type == TK_INT) {
                jnode_t *lit;
                NEWNODE(n, JN_INDEX, t->pos);
                NEWNODE(lit, JN_LIT, nm->pos);
                lit->val = jv_int(nm->i);
                n->a = *io;
                n->b = lit;
            } else if (nm->type == TK_NAME) {
                NEWNODE(n, JN_ATTR, t->pos);
                n->a = *io;
                if (!(n->str = hy_jinja_strdup(P->a, nm->s, nm->n)))
                    return hy_err(P->err, HY_ENOMEM, "chat template: out of memory");
                n->len = nm->n;
            } else {
                return unexpected(P, "an attribute name");
            }
            P->p++;
        } else if (is_op(t, "[")) {
            jnode_t *parts[3] = {0};
            int np = 0;
            bool slice = false;
            P->p++;
            for (;;) {
                if (is_op(cur(P), ":")) {
                    slice = true;
                    if (np >= 2)
                        return unexpected(P, "']'");
                    np++;
                    P->p++;
                    continue;
                }
                if (is_op(cur(P), "]"))
                    break;
                if (parts[np])
                    return unexpected(P, "']' or ':'");
                if ((rc = parse_expr(P, &parts[np], true)) < 0)
                    return rc;
            }
            P->p++;
            if (slice) {
                NEWNODE(n, JN_SLICE, t->pos);
                n->b = parts[0];
                n->c = parts[1];
                n->list = hy_jinja_alloc(P->a, sizeof(jnode_t *));
                if (!n->list)
                    return hy_err(P->err, HY_ENOMEM, "chat template: out of memory");
                n->list[0] = parts[2];
            } else {
                if (!parts[0])
                    return perr(P, t->pos, HY_EFORMAT, "empty subscript");
                NEWNODE(n, JN_INDEX, t->pos);
                n->b = parts[0];
            }
            n->a = *io;
        } else if (is_op(t, "(")) {
            NEWNODE(n, JN_CALL, t->pos);
            n->a = *io;
            if ((rc = parse_call_args(P, n)) < 0)
                return rc;
        } else {
            return HY_OK;
        }
        *io = n;
    }
}

/* `| filter(args)` and `is [not] test(args)` chains */
static int parse_filters(jparse_t *P, jnode_t **io)
{
    int rc;
    for (;;) {
        jtok_t *t = cur(P);
        jnode_t *n;
        if (is_op(t, "|")) {
            P->p++;
            jtok_t *nm = cur(P);
            if (nm->type != TK_NAME)
                return unexpected(P, "a filter name");
            NEWNODE(n, JN_FILTER, nm->pos);
            n->op = hy_jinja_filter_id(nm->s, nm->n);
            if (n->op < 0) {
                char b[64];
                snprintf(b, sizeof b, "%.*s", (int)HY_MIN(nm->n, 40), nm->s);
                return perr(P, nm->pos, HY_EUNSUPPORTED, "unknown filter '%s'", b);
            }
            n->str = hy_jinja_strdup(P->a, nm->s, nm->n);
            P->p++;
            n->a = *io;
            if (is_op(cur(P), "(") && (rc = parse_call_args(P, n)) < 0)
                return rc;
        } else if (is_name(t, "is")) {
            P->p++;
            NEWNODE(n, JN_TEST, t->pos);
            if (is_name(cur(P), "not")) {
                n->neg = true;
                P->p++;
            }
            jtok_t *nm = cur(P);
            if (nm->type != TK_NAME)
                return unexpected(P, "a test name");
            n->op = hy_jinja_test_id(nm->s, nm->n);
            if (n->op < 0) {
                char b[64];
                snprintf(b, sizeof b, "%.*s", (int)HY_MIN(nm->n, 40), nm->s);
                return perr(P, nm->pos, HY_EUNSUPPORTED, "unknown test '%s'", b);
            }
            n->str = hy_jinja_strdup(P->a, nm->s, nm->n);
            P->p++;
            n->a = *io;
            jtok_t *nx = cur(P);
            if (is_op(nx, "(")) {
                if ((rc = parse_call_args(P, n)) < 0)
                    return rc;
            } else if (nx->type == TK_STRING || nx->type == TK_INT || nx->type == TK_FLOAT ||
                       is_op(nx, "[") || is_op(nx, "{") ||
                       (nx->type == TK_NAME && !is_name(nx, "else") && !is_name(nx, "or") &&
                        !is_name(nx, "and"))) {
                /* one bare argument: `is sameas none`, `is divisibleby 3`;
                 * like jinja2, any other name (even `if`) is taken as one */
                if (is_name(nx, "is"))
                    return perr(P, nx->pos, HY_EFORMAT, "cannot chain multiple tests with '%s'", "is");
                jnode_t *arg;
                if ((rc = parse_primary(P, &arg)) < 0 || (rc = parse_postfix(P, &arg)) < 0)
                    return rc;
                n->list = hy_jinja_alloc(P->a, sizeof(jnode_t *));
                if (!n->list)
                    return hy_err(P->err, HY_ENOMEM, "chat template: out of memory");
                n->list[0] = arg;
                n->n = 1;
            }
        } else {
            return HY_OK;
        }
        *io = n;
    }
}

static int parse_unary(jparse_t *P, jnode_t **out, bool with_filter)
{
    jtok_t *t = cur(P);
    int rc;

    if (++P->depth > HY_JINJA_MAX_DEPTH)
        return perr(P, t->pos, HY_ERANGE, "expression nested too deeply (limit %s)", HY_JINJA_DEPTH_STR);
    if (is_op(t, "-") || is_op(t, "+")) {
        jnode_t *n;
        P->p++;
        NEWNODE(n, t->s[0] == '-' ? JN_NEG : JN_POS, t->pos);
        if ((rc = parse_unary(P, &n->a, false)) < 0)
            return rc;
        *out = n;
    } else {
        if ((rc = parse_primary(P, out)) < 0 || (rc = parse_postfix(P, out)) < 0)
            return rc;
    }
    if (with_filter && (rc = parse_filters(P, out)) < 0)
        return rc;
    P->depth--;
    return HY_OK;
}

static int mkbin(jparse_t *P, jnode_t **io, int kind, int op, size_t pos, jnode_t *rhs)
{
    jnode_t *n;
    NEWNODE(n, kind, pos);
    n->op = op;
    n->a = *io;
    n->b = rhs;
    *io = n;
    return HY_OK;
}

static int parse_pow(jparse_t *P, jnode_t **out)
{
    int rc = parse_unary(P, out, true);
    while (rc >= 0 && is_op(cur(P), "**")) {
        jnode_t *r;
        size_t pos = cur(P)->pos;
        P->p++;
        if ((rc = parse_unary(P, &r, true)) >= 0)
            rc = mkbin(P, out, JN_BIN, JOP_POW, pos, r);
    }
    return rc;
}

static int parse_math2(jparse_t *P, jnode_t **out)
{
    int rc = parse_pow(P, out);
    for (;;) {
        jtok_t *t = cur(P);
        int op = is_op(t, "*") ? JOP_MUL : is_op(t, "/") ? JOP_DIV : is_op(t, "//") ? JOP_FLOORDIV
               : is_op(t, "%") ? JOP_MOD : -1;
        if (rc < 0 || op < 0)
            return rc;
        jnode_t *r;
        P->p++;
        if ((rc = parse_pow(P, &r)) >= 0)
            rc = mkbin(P, out, JN_BIN, op, t->pos, r);
    }
}

static int parse_concat(jparse_t *P, jnode_t **out)
{
    int rc = parse_math2(P, out);
    while (rc >= 0 && is_op(cur(P), "~")) {
        jnode_t *r;
        size_t pos = cur(P)->pos;
        P->p++;
        if ((rc = parse_math2(P, &r)) >= 0)
            rc = mkbin(P, out, JN_BIN, JOP_CONCAT, pos, r);
    }
    return rc;
}

static int parse_math1(jparse_t *P, jnode_t **out)
{
    int rc = parse_concat(P, out);
    for (;;) {
        jtok_t *t = cur(P);
        int op = is_op(t, "+") ? JOP_ADD : is_op(t, "-") ? JOP_SUB : -1;
        if (rc < 0 || op < 0)
            return rc;
        jnode_t *r;
        P->p++;
        if ((rc = parse_concat(P, &r)) >= 0)
            rc = mkbin(P, out, JN_BIN, op, t->pos, r);
    }
}

/* Python chains comparisons: `a < b < c` is `a < b and b < c` (b is
 * side-effect free here, so evaluating it twice is harmless). */
static int parse_compare(jparse_t *P, jnode_t **out)
{
    jnode_t *last = NULL; /* the most recent comparison in the chain */
    int rc = parse_math1(P, out);
    for (;;) {
        jtok_t *t = cur(P);
        int op = is_op(t, "==") ? JOP_EQ : is_op(t, "!=") ? JOP_NE : is_op(t, "<") ? JOP_LT
               : is_op(t, "<=") ? JOP_LE : is_op(t, ">") ? JOP_GT : is_op(t, ">=") ? JOP_GE
               : is_name(t, "in") ? JOP_IN : -1;
        if (op < 0 && is_name(t, "not") && is_name(&P->tok[P->p + 1], "in")) {
            op = JOP_NOTIN;
            P->p++;
        }
        if (rc < 0 || op < 0)
            return rc;
        jnode_t *r;
        P->p++;
        if ((rc = parse_math1(P, &r)) < 0)
            return rc;
        if (!last) {
            rc = mkbin(P, out, JN_BIN, op, t->pos, r);
            last = *out;
        } else {
            jnode_t *cmp = last->b;
            if ((rc = mkbin(P, &cmp, JN_BIN, op, t->pos, r)) < 0)
                return rc;
            rc = mkbin(P, out, JN_AND, 0, t->pos, cmp);
            last = cmp;
        }
    }
}

static int parse_not(jparse_t *P, jnode_t **out)
{
    jtok_t *t = cur(P);
    if (is_name(t, "not")) {
        jnode_t *n;
        int rc;
        if (++P->depth > HY_JINJA_MAX_DEPTH)
            return perr(P, t->pos, HY_ERANGE, "expression nested too deeply (limit %s)", HY_JINJA_DEPTH_STR);
        P->p++;
        NEWNODE(n, JN_NOT, t->pos);
        if ((rc = parse_not(P, &n->a)) < 0)
            return rc;
        P->depth--;
        *out = n;
        return HY_OK;
    }
    return parse_compare(P, out);
}

static int parse_and(jparse_t *P, jnode_t **out)
{
    int rc = parse_not(P, out);
    while (rc >= 0 && is_name(cur(P), "and")) {
        jnode_t *r;
        size_t pos = cur(P)->pos;
        P->p++;
        if ((rc = parse_not(P, &r)) >= 0)
            rc = mkbin(P, out, JN_AND, 0, pos, r);
    }
    return rc;
}

static int parse_or(jparse_t *P, jnode_t **out)
{
    int rc = parse_and(P, out);
    while (rc >= 0 && is_name(cur(P), "or")) {
        jnode_t *r;
        size_t pos = cur(P)->pos;
        P->p++;
        if ((rc = parse_and(P, &r)) >= 0)
            rc = mkbin(P, out, JN_OR, 0, pos, r);
    }
    return rc;
}

/* conditional expression: `a if cond else b` (else optional -> undefined) */
static int parse_expr(jparse_t *P, jnode_t **out, bool with_cond)
{
    int rc;
    if (++P->depth > HY_JINJA_MAX_DEPTH)
        return perr(P, cur(P)->pos, HY_ERANGE, "expression nested too deeply (limit %s)", HY_JINJA_DEPTH_STR);
    if ((rc = parse_or(P, out)) < 0)
        return rc;
    while (with_cond && is_name(cur(P), "if")) {
        jnode_t *n;
        NEWNODE(n, JN_COND, cur(P)->pos);
        P->p++;
        n->a = *out;
        if ((rc = parse_or(P, &n->b)) < 0)
            return rc;
        if (is_name(cur(P), "else")) {
            P->p++;
            if ((rc = parse_or(P, &n->c)) < 0)
                return rc;
        }
        *out = n;
    }
    P->depth--;
    return HY_OK;
}

/* an expression that may be an unparenthesised tuple: `a, b` */
static int parse_tuple_expr(jparse_t *P, jnode_t **out)
{
    int rc = parse_expr(P, out, true);
    if (rc < 0 || !is_op(cur(P), ","))
        return rc;
    nvec_t items = {0};
    jnode_t *tn;
    NEWNODE(tn, JN_TUPLE, (*out)->pos);
    if ((rc = nvec_push(P, &items, *out)) < 0)
        return rc;
    while (is_op(cur(P), ",")) {
        P->p++;
        if (cur(P)->type == TK_BLOCK_END || cur(P)->type == TK_VAR_END)
            break;
        jnode_t *e;
        if ((rc = parse_expr(P, &e, true)) < 0 || (rc = nvec_push(P, &items, e)) < 0)
            return rc;
    }
    tn->list = items.v;
    tn->n = items.n;
    *out = tn;
    return HY_OK;
}

static int expect_block_end(jparse_t *P)
{
    if (cur(P)->type != TK_BLOCK_END)
        return unexpected(P, "'%}'");
    P->p++;
    return HY_OK;
}

static int parse_body(jparse_t *P, jnode_t **out, const char *const *ends, size_t nends,
                      size_t open_pos, const char *open_name);

static int parse_name_tok(jparse_t *P, const char **s, size_t *n)
{
    if (cur(P)->type != TK_NAME)
        return unexpected(P, "a name");
    if (!(*s = hy_jinja_strdup(P->a, cur(P)->s, cur(P)->n)))
        return hy_err(P->err, HY_ENOMEM, "chat template: out of memory");
    *n = cur(P)->n;
    P->p++;
    return HY_OK;
}

static int parse_if(jparse_t *P, jnode_t **out, size_t pos)
{
    static const char *const ends[] = {"elif", "else", "endif"};
    jnode_t *n;
    int rc;

    NEWNODE(n, JN_IF, pos);
    if ((rc = parse_tuple_expr(P, &n->a)) < 0 || (rc = expect_block_end(P)) < 0 ||
        (rc = parse_body(P, &n->b, ends, 3, pos, "if")) < 0)
        return rc;
    /* parse_body leaves the cursor on the end name */
    jtok_t *t = cur(P);
    P->p++;
    if (is_name(t, "elif")) {
        if ((rc = parse_if(P, &n->c, t->pos)) < 0)
            return rc;
        *out = n;
        return HY_OK; /* the nested if consumed endif */
    }
    if (is_name(t, "else")) {
        static const char *const e2[] = {"endif"};
        if ((rc = expect_block_end(P)) < 0 || (rc = parse_body(P, &n->c, e2, 1, pos, "if")) < 0)
            return rc;
        P->p++;
    }
    *out = n;
    return expect_block_end(P);
}

/* {% for a, b in expr if cond %}...{% else %}...{% endfor %} (after the tag name) */
static int parse_for(jparse_t *P, jnode_t **out, size_t pos)
{
    jnode_t *n;
    int rc;

    static const char *const ends[] = {"else", "endfor"};
    svec_t tg = {0};
    NEWNODE(n, JN_FOR, pos);
    do {
        const char *s;
        size_t sn;
        if (tg.n)
            P->p++;
        if ((rc = parse_name_tok(P, &s, &sn)) < 0 || (rc = svec_push(P, &tg, s, sn)) < 0)
            return rc;
    } while (is_op(cur(P), ","));
    n->names = tg.v;
    n->nnames = tg.n;
    if (!is_name(cur(P), "in"))
        return unexpected(P, "'in'");
    P->p++;
    if ((rc = parse_expr(P, &n->a, false)) < 0)
        return rc;
    if (is_name(cur(P), "if") && (P->p++, (rc = parse_expr(P, &n->c, true)) < 0))
        return rc;
    if (is_name(cur(P), "recursive"))
        return perr(P, cur(P)->pos, HY_EUNSUPPORTED, "unsupported construct '%s'", "for ... recursive");
    if ((rc = expect_block_end(P)) < 0 || (rc = parse_body(P, &n->b, ends, 2, pos, "for")) < 0)
        return rc;
    if (is_name(cur(P), "else")) {
        static const char *const e2[] = {"endfor"};
        jnode_t *eb;
        P->p++;
        if ((rc = expect_block_end(P)) < 0 || (rc = parse_body(P, &eb, e2, 1, pos, "for")) < 0)
            return rc;
        n->list2 = eb->list;
        n->n2 = eb->n;
    }
    P->p++;
    *out = n;
    return expect_block_end(P);
}

/* {% set x = expr %}, {% set ns.attr = expr %}, {% set a, b = expr %} and {% set x %}...{% endset %} (after the tag name) */
static int parse_set(jparse_t *P, jnode_t **out, size_t pos)
{
    jnode_t *n;
    int rc;

    const char *s;
    size_t sn;
    NEWNODE(n, JN_SET, pos);
    if ((rc = parse_name_tok(P, &s, &sn)) < 0)
        return rc;
    n->str = s;
    n->len = sn;
    if (is_op(cur(P), ".")) {
        P->p++;
        const char *attr;
        size_t an;
        if ((rc = parse_name_tok(P, &attr, &an)) < 0) /* `set ns.attr = ...` */
            return rc;
        n->names = (const char **)hy_jinja_alloc(P->a, sizeof(char *));
        if (!n->names)
            return hy_err(P->err, HY_ENOMEM, "chat template: out of memory");
        n->names[0] = attr;
        n->nnames = 1;
    } else if (is_op(cur(P), ",")) {
        /* `set a, b = ...`: names holds every target, neg marks unpacking */
        svec_t tg = {0};
        if ((rc = svec_push(P, &tg, s, sn)) < 0)
            return rc;
        while (is_op(cur(P), ",")) {
            P->p++;
            if ((rc = parse_name_tok(P, &s, &sn)) < 0 || (rc = svec_push(P, &tg, s, sn)) < 0)
                return rc;
        }
        n->names = tg.v;
        n->nnames = tg.n;
        n->neg = true;
    }
    if (cur(P)->type == TK_BLOCK_END && !n->nnames) { /* {% set x %}...{% endset %} */
        static const char *const ends[] = {"endset"};
        n->kind = JN_SETBLOCK;
        P->p++;
        if ((rc = parse_body(P, &n->b, ends, 1, pos, "set")) < 0)
            return rc;
        P->p++;
        *out = n;
        return expect_block_end(P);
    }
    if ((rc = expect_op(P, "=")) < 0 || (rc = parse_tuple_expr(P, &n->a)) < 0)
        return rc;
    *out = n;
    return expect_block_end(P);
}

/* {% macro name(a, b=default) %}...{% endmacro %} (after the tag name) */
static int parse_macro(jparse_t *P, jnode_t **out, size_t pos)
{
    jnode_t *n;
    int rc;

    static const char *const ends[] = {"endmacro"};
    svec_t params = {0};
    nvec_t defs = {0};
    NEWNODE(n, JN_MACRO, pos);
    if ((rc = parse_name_tok(P, &n->str, &n->len)) < 0 || (rc = expect_op(P, "(")) < 0)
        return rc;
    while (!is_op(cur(P), ")")) {
        const char *s;
        size_t sn;
        jnode_t *d = NULL;
        if (params.n && (rc = expect_op(P, ",")) < 0)
            return rc;
        if ((rc = parse_name_tok(P, &s, &sn)) < 0)
            return rc;
        if (is_op(cur(P), "=")) {
            P->p++;
            if ((rc = parse_expr(P, &d, true)) < 0)
                return rc;
        } else if (defs.n && defs.v[defs.n - 1]) {
            return perr(P, cur(P)->pos, HY_EFORMAT, "non-default macro argument follows default argument");
        }
        if ((rc = svec_push(P, &params, s, sn)) < 0 || (rc = nvec_push(P, &defs, d)) < 0)
            return rc;
    }
    P->p++;
    n->names = params.v;
    n->nnames = params.n;
    n->list2 = defs.v;
    n->n2 = defs.n;
    if ((rc = expect_block_end(P)) < 0 || (rc = parse_body(P, &n->b, ends, 1, pos, "macro")) < 0)
        return rc;
    P->p++;
    if (cur(P)->type == TK_NAME)
        P->p++; /* {% endmacro name %} */
    *out = n;
    return expect_block_end(P);
}

static int parse_stmt(jparse_t *P, jnode_t **out)
{
    jtok_t *t = cur(P);
    size_t pos = P->tok[P->p - 1].pos; /* the '{%' */
    jnode_t *n;
    int rc;

    if (t->type != TK_NAME)
        return unexpected(P, "a tag name");
    P->p++;
    if (is_name(t, "if"))
        return parse_if(P, out, pos);
    if (is_name(t, "for"))
        return parse_for(P, out, pos);
    if (is_name(t, "set"))
        return parse_set(P, out, pos);
    if (is_name(t, "macro"))
        return parse_macro(P, out, pos);
    if (is_name(t, "break") || is_name(t, "continue")) {
        NEWNODE(n, is_name(t, "break") ? JN_BREAK : JN_CONTINUE, pos);
        *out = n;
        return expect_block_end(P);
    }
    if (is_name(t, "generation")) {
        /* transformers' AssistantTracker tag: renders its body unchanged */
        static const char *const ends[] = {"endgeneration"};
        if ((rc = expect_block_end(P)) < 0 || (rc = parse_body(P, out, ends, 1, pos, "generation")) < 0)
            return rc;
        P->p++;
        return expect_block_end(P);
    }
    {
        char b[64];
        snprintf(b, sizeof b, "%.*s", (int)HY_MIN(t->n, 40), t->s);
        return perr(P, t->pos, HY_EUNSUPPORTED, "unknown or unsupported tag '%s'", b);
    }
}

/* Statements until `{% <one of ends> ...`; leaves the cursor on that name. */
static int parse_body(jparse_t *P, jnode_t **out, const char *const *ends, size_t nends,
                      size_t open_pos, const char *open_name)
{
    nvec_t body = {0};
    jnode_t *n;
    int rc;

    if (++P->depth > HY_JINJA_MAX_DEPTH)
        return perr(P, cur(P)->pos, HY_ERANGE, "blocks nested too deeply (limit %s)", HY_JINJA_DEPTH_STR);
    NEWNODE(*out, JN_BODY, cur(P)->pos);
    for (;;) {
        jtok_t *t = cur(P);
        if (t->type == TK_EOF) {
            if (!open_name)
                break;
            char m[96];
            snprintf(m, sizeof m, "'%s' block never closed (missing '{%% end%s %%}')", open_name, open_name);
            return perr(P, open_pos, HY_EFORMAT, "%s", m);
        }
        if (t->type == TK_TEXT) {
            NEWNODE(n, JN_TEXT, t->pos);
            n->str = t->s;
            n->len = t->n;
            P->p++;
        } else if (t->type == TK_VAR_BEGIN) {
            P->p++;
            NEWNODE(n, JN_OUTPUT, t->pos);
            if ((rc = parse_tuple_expr(P, &n->a)) < 0)
                return rc;
            if (cur(P)->type != TK_VAR_END)
                return unexpected(P, "'}}'");
            P->p++;
        } else if (t->type == TK_BLOCK_BEGIN) {
            jtok_t *nm = &P->tok[P->p + 1];
            for (size_t k = 0; k < nends; k++) {
                if (is_name(nm, ends[k])) {
                    P->p++;
                    (*out)->list = body.v;
                    (*out)->n = body.n;
                    P->depth--;
                    return HY_OK;
                }
            }
            if (nm->type == TK_NAME && nm->n > 3 && !memcmp(nm->s, "end", 3)) {
                char b[64];
                snprintf(b, sizeof b, "%.*s", (int)HY_MIN(nm->n, 40), nm->s);
                return perr(P, nm->pos, HY_EFORMAT, "unexpected '%s'", b);
            }
            if ((nm->type == TK_NAME) && (is_name(nm, "else") || is_name(nm, "elif")))
                return perr(P, nm->pos, HY_EFORMAT, "unexpected '%s'", is_name(nm, "else") ? "else" : "elif");
            P->p++;
            if ((rc = parse_stmt(P, &n)) < 0)
                return rc;
        } else {
            return unexpected(P, "template text or a tag");
        }
        if ((rc = nvec_push(P, &body, n)) < 0)
            return rc;
    }
    (*out)->list = body.v;
    (*out)->n = body.n;
    P->depth--;
    return HY_OK;
}

int hy_jinja_parse(jtemplate_t *t, const char *src, size_t len, char *err)
{
    jparse_t P = {.t = t, .a = &t->arena, .err = err};
    char *s;
    size_t n = 0;
    int rc;

    /* jinja2 normalises every newline to \n and drops one trailing newline */
    if (!(s = hy_jinja_alloc(&t->arena, len + 1)))
        return hy_err(err, HY_ENOMEM, "chat template: out of memory");
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n > 0 && s[n - 1] == '\n')
        n--;
    s[n] = 0;
    t->src = s;
    t->len = n;
    P.src = s;
    P.len = n;
    if ((rc = lex(&P)) < 0)
        return rc;
    if ((rc = parse_body(&P, &t->root, NULL, 0, 0, NULL)) < 0)
        return rc;
    return HY_OK;
}
