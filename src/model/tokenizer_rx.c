/*
 * tokenizer_rx.c - the pre-tokenizer regex matcher (tokenizer_rx.h).
 * A pattern is parsed into a small tree, checked, and compiled to a
 * backtracking program (CLASS / SPLIT / JMP / LOOK / EOL / MATCH) whose
 * SPLIT tries its first branch first: running it depth-first yields
 * exactly ECMAScript's first match.  Counted repeats are unrolled, so the
 * program has no counters; a loop whose body could match empty is refused
 * at compile time rather than guarded at run time.
 */
#include "model/tokenizer_rx.h"

#include <stdlib.h>
#include <string.h>

#include "model/unicode.h"

/* Collapsed text: a code point >= 128 becomes RX_PSEUDO + its category
 * (0 other, 1 N, 2 L, 3 P, 4 M, 5 S), above every real code point, so
 * that no literal or range in a pattern can match it. */
#define RX_PSEUDO 0x110000u

enum { CAT_OTHER, CAT_N, CAT_L, CAT_P, CAT_M, CAT_S, CAT_COUNT };

typedef struct {
    uint64_t ascii[2];  /* members < 128 */
    uint8_t pseudo;     /* bit k: collapsed category k */
    bool neg;
    uint32_t first, n;  /* ranges of members >= 128 in rx->ranges */
} rx_class_t;

enum { OP_CLASS, OP_SPLIT, OP_JMP, OP_LOOK, OP_NLOOK, OP_EOL, OP_MATCH };

typedef struct {
    uint8_t op;
    uint32_t a, b; /* CLASS: class; SPLIT: first, second; JMP: a; LOOK: sub, next */
} rx_inst_t;

struct hy_tok_rx {
    bool collapsed;
    rx_inst_t *code;
    size_t n_code;
    rx_class_t *cls;
    size_t n_cls;
    uint32_t (*ranges)[2];
    size_t n_ranges;
};

/* ---- parse tree -------------------------------------------------------- */

enum { N_CLASS, N_CAT, N_ALT, N_REP, N_LOOK, N_NLOOK, N_EOL };

typedef struct {
    uint8_t kind;
    int32_t first, next; /* first child, next sibling (-1: none) */
    int32_t cls;         /* N_CLASS */
    int32_t min, max;    /* N_REP; max -1 = unbounded */
} rx_node_t;

typedef struct {
    const char *s;
    size_t pos, len;
    rx_node_t *nodes;
    size_t n_nodes, cap_nodes;
    hy_tok_rx_t *rx;
    size_t cap_cls, cap_ranges, cap_code;
    char *err;
    int rc;
} rx_parse_t;

int hy_tok_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    size_t c = *cap ? *cap : 16;
    void *np;

    if (need <= *cap)
        return HY_OK;
    while (c < need)
        c *= 2;
    np = realloc(*p, c * elem);
    if (!np)
        return HY_ENOMEM;
    *p = np;
    *cap = c;
    return HY_OK;
}

static int fail(rx_parse_t *ps, const char *what)
{
    if (ps->rc == HY_OK)
        ps->rc = hy_err(ps->err, HY_EINVAL, "pre-tokenizer regex \"%s\" at offset %zu: %s",
                        ps->s, ps->pos, what);
    return -1;
}

static int32_t new_node(rx_parse_t *ps, uint8_t kind)
{
    rx_node_t *n;

    if (hy_tok_grow((void **)&ps->nodes, &ps->cap_nodes, ps->n_nodes + 1, sizeof *ps->nodes)) {
        ps->rc = hy_err(ps->err, HY_ENOMEM, "pre-tokenizer regex: out of memory");
        return -1;
    }
    n = &ps->nodes[ps->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->first = n->next = n->cls = -1;
    return (int32_t)ps->n_nodes++;
}

static int32_t new_class(rx_parse_t *ps)
{
    hy_tok_rx_t *rx = ps->rx;

    if (hy_tok_grow((void **)&rx->cls, &ps->cap_cls, rx->n_cls + 1, sizeof *rx->cls)) {
        ps->rc = hy_err(ps->err, HY_ENOMEM, "pre-tokenizer regex: out of memory");
        return -1;
    }
    memset(&rx->cls[rx->n_cls], 0, sizeof *rx->cls);
    rx->cls[rx->n_cls].first = (uint32_t)rx->n_ranges;
    return (int32_t)rx->n_cls++;
}

/* Ranges of one class are appended while it is open, so they stay
 * contiguous. */
static int class_add_range(rx_parse_t *ps, int32_t ci, uint32_t lo, uint32_t hi)
{
    hy_tok_rx_t *rx = ps->rx;
    rx_class_t *c = &rx->cls[ci];

    for (uint32_t x = lo; x <= hi && x < 128; x++)
        c->ascii[x >> 6] |= 1ull << (x & 63);
    if (hi < 128)
        return 0;
    if (rx->collapsed)
        return fail(ps, "non-ASCII characters beside a \\p{..} category (std::regex refuses those)");
    if (hy_tok_grow((void **)&rx->ranges, &ps->cap_ranges, rx->n_ranges + 1, sizeof *rx->ranges)) {
        ps->rc = hy_err(ps->err, HY_ENOMEM, "pre-tokenizer regex: out of memory");
        return -1;
    }
    rx->ranges[rx->n_ranges][0] = HY_MAX(lo, 128u);
    rx->ranges[rx->n_ranges][1] = hi;
    rx->n_ranges++;
    c->n++;
    return 0;
}

static int class_add_chars(rx_parse_t *ps, int32_t ci, const char *chars)
{
    for (size_t i = 0; chars[i]; i++) {
        if (class_add_range(ps, ci, (uint8_t)chars[i], (uint8_t)chars[i]))
            return -1;
    }
    return 0;
}

/* The ASCII members std::regex gives each collapsed category. */
static const char *const cat_ascii[CAT_COUNT] = {
    [CAT_OTHER] = "",
    [CAT_N] = "0123456789",
    [CAT_L] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    [CAT_P] = "!\"#%&'()*,-./:;?@[\\]_{}",
    [CAT_M] = "",
    [CAT_S] = "$+<=>^`|",
};

/* \p{NAME} at ps->pos (after "\p"); returns the category or -1. */
static int parse_category(rx_parse_t *ps)
{
    static const struct {
        const char *name;
        int cat;
    } names[] = {{"N", CAT_N},  {"L", CAT_L},  {"P", CAT_P},  {"M", CAT_M},  {"S", CAT_S},
                 {"Lu", CAT_L}, {"Ll", CAT_L}, {"Lt", CAT_L}, {"Lm", CAT_L}, {"Lo", CAT_L}};
    const char *close;
    size_t n;

    if (ps->pos >= ps->len || ps->s[ps->pos] != '{' ||
        !(close = memchr(ps->s + ps->pos, '}', ps->len - ps->pos)))
        return fail(ps, "\\p needs {NAME}");
    n = (size_t)(close - (ps->s + ps->pos + 1));
    for (size_t i = 0; i < HY_ARRAY_LEN(names); i++) {
        if (strlen(names[i].name) == n && memcmp(names[i].name, ps->s + ps->pos + 1, n) == 0) {
            ps->pos += n + 2;
            return names[i].cat;
        }
    }
    return fail(ps, "unknown \\p{..} category");
}

/* One escape inside or outside a class, added to class ci.  *negated is
 * set for \S \D \W (allowed only outside classes). */
static int parse_escape(rx_parse_t *ps, int32_t ci, bool in_class, bool *negated)
{
    char e;

    *negated = false;
    if (ps->pos >= ps->len)
        return fail(ps, "pattern ends in a backslash");
    e = ps->s[ps->pos++];
    switch (e) {
    case 'S':
    case 'D':
    case 'W':
        if (in_class)
            return fail(ps, "\\S, \\D and \\W inside [...] are not supported");
        *negated = true;
        e = (char)(e + ('a' - 'A'));
        /* fall through */
    case 's':
    case 'd':
    case 'w':
        if (e == 's')
            return class_add_chars(ps, ci, " \t\n\v\f\r");
        if (e == 'd')
            return class_add_range(ps, ci, '0', '9');
        return class_add_chars(ps, ci, "_0123456789") ||
               class_add_range(ps, ci, 'A', 'Z') || class_add_range(ps, ci, 'a', 'z');
    case 'p': {
        int cat = parse_category(ps);
        if (cat < 0)
            return -1;
        ps->rx->cls[ci].pseudo |= (uint8_t)(1u << cat);
        return class_add_chars(ps, ci, cat_ascii[cat]);
    }
    case 'r': return class_add_range(ps, ci, '\r', '\r');
    case 'n': return class_add_range(ps, ci, '\n', '\n');
    case 't': return class_add_range(ps, ci, '\t', '\t');
    case 'f': return class_add_range(ps, ci, '\f', '\f');
    case 'v': return class_add_range(ps, ci, '\v', '\v');
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9') ||
            (e & 0x80))
            return fail(ps, "unsupported escape");
        return class_add_range(ps, ci, (uint8_t)e, (uint8_t)e);
    }
}

static uint32_t next_cp(rx_parse_t *ps)
{
    return hy_uni_decode_lenient(ps->s, ps->len, &ps->pos);
}

/* [...] after the '['. */
static int32_t parse_bracket(rx_parse_t *ps)
{
    int32_t ci = new_class(ps), node;
    bool first = true, negated;

    if (ci < 0)
        return -1;
    if (ps->pos < ps->len && ps->s[ps->pos] == '^') {
        ps->rx->cls[ci].neg = true;
        ps->pos++;
    }
    for (;;) {
        uint32_t lo, hi;
        if (ps->pos >= ps->len)
            return fail(ps, "unterminated [...]");
        if (ps->s[ps->pos] == ']' && !first) {
            ps->pos++;
            break;
        }
        first = false;
        if (ps->s[ps->pos] == '\\') {
            size_t at = ++ps->pos;
            char e = at < ps->len ? ps->s[at] : 0;
            /* A single-character escape may start a range (\[-\]). */
            if (e && strchr("sdwpSDW", e) == NULL) {
                if (e == 'r' || e == 'n' || e == 't' || e == 'f' || e == 'v')
                    lo = (uint32_t)"\r\n\t\f\v"[strchr("rntfv", e) - "rntfv"];
                else if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
                    return fail(ps, "unsupported escape");
                else
                    lo = (uint8_t)e;
                ps->pos++;
            } else {
                if (parse_escape(ps, ci, true, &negated))
                    return -1;
                continue;
            }
        } else {
            lo = next_cp(ps);
        }
        hi = lo;
        if (ps->pos + 1 < ps->len && ps->s[ps->pos] == '-' && ps->s[ps->pos + 1] != ']') {
            ps->pos++;
            if (ps->s[ps->pos] == '\\') {
                char e = ps->pos + 1 < ps->len ? ps->s[ps->pos + 1] : 0;
                if (!e || (e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
                    return fail(ps, "unsupported range end");
                hi = (uint8_t)e;
                ps->pos += 2;
            } else {
                hi = next_cp(ps);
            }
            if (hi < lo)
                return fail(ps, "range out of order");
        }
        if (class_add_range(ps, ci, lo, hi))
            return -1;
    }
    node = new_node(ps, N_CLASS);
    if (node >= 0)
        ps->nodes[node].cls = ci;
    return node;
}

static int32_t parse_alt(rx_parse_t *ps);

static int32_t parse_atom(rx_parse_t *ps)
{
    char c = ps->s[ps->pos];
    int32_t node, ci;
    bool negated;

    if (c == '(') {
        uint8_t kind = 0; /* 0: plain group */
        int32_t inner;
        ps->pos++;
        if (ps->pos + 1 < ps->len && ps->s[ps->pos] == '?') {
            char k = ps->s[ps->pos + 1];
            if (k != ':' && k != '=' && k != '!')
                return fail(ps, "unsupported group");
            kind = k == '=' ? N_LOOK : k == '!' ? N_NLOOK : 0;
            ps->pos += 2;
        }
        inner = parse_alt(ps);
        if (inner < 0)
            return -1;
        if (ps->pos >= ps->len || ps->s[ps->pos] != ')')
            return fail(ps, "missing )");
        ps->pos++;
        if (!kind)
            return inner;
        node = new_node(ps, kind);
        if (node >= 0)
            ps->nodes[node].first = inner;
        return node;
    }
    if (c == '[') {
        ps->pos++;
        return parse_bracket(ps);
    }
    if (c == '$') {
        ps->pos++;
        return new_node(ps, N_EOL);
    }
    if (c == '.' || c == '^' || c == '*' || c == '+' || c == '?' || c == '{' || c == ')' ||
        c == '|')
        return fail(ps, "unsupported or misplaced metacharacter");
    ci = new_class(ps);
    if (ci < 0)
        return -1;
    if (c == '\\') {
        ps->pos++;
        if (parse_escape(ps, ci, false, &negated))
            return -1;
        ps->rx->cls[ci].neg = negated;
    } else {
        uint32_t cp = next_cp(ps);
        if (class_add_range(ps, ci, cp, cp))
            return -1;
    }
    node = new_node(ps, N_CLASS);
    if (node >= 0)
        ps->nodes[node].cls = ci;
    return node;
}

static bool parse_int(rx_parse_t *ps, int32_t *v)
{
    size_t start = ps->pos;

    *v = 0;
    while (ps->pos < ps->len && ps->s[ps->pos] >= '0' && ps->s[ps->pos] <= '9' && *v < 100000)
        *v = *v * 10 + (ps->s[ps->pos++] - '0');
    return ps->pos > start;
}

/* A quantifier after an atom, if any: wraps atom in an N_REP. */
static int32_t parse_quant(rx_parse_t *ps, int32_t atom)
{
    int32_t min, max, node;
    char c;

    if (ps->pos >= ps->len)
        return atom;
    c = ps->s[ps->pos];
    if (c == '*' || c == '+' || c == '?') {
        min = c == '+' ? 1 : 0;
        max = c == '?' ? 1 : -1;
        ps->pos++;
    } else if (c == '{') {
        ps->pos++;
        if (!parse_int(ps, &min))
            return fail(ps, "bad {n,m}");
        max = min;
        if (ps->pos < ps->len && ps->s[ps->pos] == ',') {
            ps->pos++;
            if (!parse_int(ps, &max))
                max = -1;
        }
        if (ps->pos >= ps->len || ps->s[ps->pos] != '}' || (max >= 0 && max < min) || max > 4096)
            return fail(ps, "bad {n,m}");
        ps->pos++;
    } else {
        return atom;
    }
    if (ps->pos < ps->len && (ps->s[ps->pos] == '?' || ps->s[ps->pos] == '+'))
        return fail(ps, "lazy and possessive quantifiers are not supported");
    node = new_node(ps, N_REP);
    if (node >= 0) {
        ps->nodes[node].first = atom;
        ps->nodes[node].min = min;
        ps->nodes[node].max = max;
    }
    return node;
}

static int32_t parse_cat(rx_parse_t *ps)
{
    int32_t node = new_node(ps, N_CAT), last = -1;

    if (node < 0)
        return -1;
    while (ps->pos < ps->len && ps->s[ps->pos] != '|' && ps->s[ps->pos] != ')') {
        int32_t a = parse_atom(ps);
        if (a < 0 || (a = parse_quant(ps, a)) < 0)
            return -1;
        if (last < 0)
            ps->nodes[node].first = a;
        else
            ps->nodes[last].next = a;
        last = a;
    }
    return node;
}

static int32_t parse_alt(rx_parse_t *ps)
{
    int32_t first = parse_cat(ps), node, last;

    if (first < 0 || ps->pos >= ps->len || ps->s[ps->pos] != '|')
        return first;
    node = new_node(ps, N_ALT);
    if (node < 0)
        return -1;
    ps->nodes[node].first = last = first;
    while (ps->pos < ps->len && ps->s[ps->pos] == '|') {
        int32_t b;
        ps->pos++;
        b = parse_cat(ps);
        if (b < 0)
            return -1;
        ps->nodes[last].next = b;
        last = b;
    }
    return node;
}

/* ---- compile ------------------------------------------------------------- */

static bool nullable(const rx_parse_t *ps, int32_t n)
{
    const rx_node_t *x = &ps->nodes[n];

    switch (x->kind) {
    case N_CLASS:
        return false;
    case N_CAT:
        for (int32_t k = x->first; k >= 0; k = ps->nodes[k].next) {
            if (!nullable(ps, k))
                return false;
        }
        return true;
    case N_ALT:
        for (int32_t k = x->first; k >= 0; k = ps->nodes[k].next) {
            if (nullable(ps, k))
                return true;
        }
        return false;
    case N_REP:
        return x->min == 0 || nullable(ps, x->first);
    default:
        return true; /* lookaheads and $ consume nothing */
    }
}

static int64_t emit(rx_parse_t *ps, uint8_t op, uint32_t a, uint32_t b)
{
    hy_tok_rx_t *rx = ps->rx;

    if (hy_tok_grow((void **)&rx->code, &ps->cap_code, rx->n_code + 1, sizeof *rx->code)) {
        ps->rc = hy_err(ps->err, HY_ENOMEM, "pre-tokenizer regex: out of memory");
        return -1;
    }
    rx->code[rx->n_code].op = op;
    rx->code[rx->n_code].a = a;
    rx->code[rx->n_code].b = b;
    return (int64_t)rx->n_code++;
}

/* Points every instruction of a chain (linked through field b for SPLIT,
 * a for JMP, UINT32_MAX-terminated) at target. */
static void patch(hy_tok_rx_t *rx, uint32_t chain, uint32_t target)
{
    while (chain != UINT32_MAX) {
        rx_inst_t *in = &rx->code[chain];
        uint32_t next;
        if (in->op == OP_SPLIT) {
            next = in->b;
            in->b = target;
        } else {
            next = in->a;
            in->a = target;
        }
        chain = next;
    }
}

static int gen(rx_parse_t *ps, int32_t n)
{
    const rx_node_t x = ps->nodes[n];
    hy_tok_rx_t *rx = ps->rx;
    uint32_t chain = UINT32_MAX;
    int64_t at, split;

    switch (x.kind) {
    case N_CLASS:
        return emit(ps, OP_CLASS, (uint32_t)x.cls, 0) < 0 ? -1 : 0;
    case N_EOL:
        return emit(ps, OP_EOL, 0, 0) < 0 ? -1 : 0;
    case N_CAT:
        for (int32_t k = x.first; k >= 0; k = ps->nodes[k].next) {
            if (gen(ps, k))
                return -1;
        }
        return 0;
    case N_ALT:
        /* SPLIT(this, next); this; JMP end; next: ...; last */
        for (int32_t k = x.first; k >= 0; k = ps->nodes[k].next) {
            if (ps->nodes[k].next < 0) {
                if (gen(ps, k))
                    return -1;
                break;
            }
            at = emit(ps, OP_SPLIT, 0, 0);
            if (at < 0 || gen(ps, k))
                return -1;
            rx->code[at].a = (uint32_t)at + 1;
            split = at;
            at = emit(ps, OP_JMP, chain, 0);
            if (at < 0)
                return -1;
            chain = (uint32_t)at;
            rx->code[split].b = (uint32_t)rx->n_code; /* the next branch */
        }
        patch(rx, chain, (uint32_t)rx->n_code);
        return 0;
    case N_REP:
        for (int32_t i = 0; i < x.min; i++) {
            if (gen(ps, x.first))
                return -1;
        }
        if (x.max < 0) {
            uint32_t loop = (uint32_t)rx->n_code;
            if (nullable(ps, x.first))
                return fail(ps, "a repeated group that can match empty");
            at = emit(ps, OP_SPLIT, loop + 1, 0);
            if (at < 0 || gen(ps, x.first) || emit(ps, OP_JMP, loop, 0) < 0)
                return -1;
            rx->code[at].b = (uint32_t)rx->n_code;
            return 0;
        }
        for (int32_t i = x.min; i < x.max; i++) {
            at = emit(ps, OP_SPLIT, 0, chain);
            if (at < 0)
                return -1;
            rx->code[at].a = (uint32_t)at + 1;
            chain = (uint32_t)at;
            if (gen(ps, x.first))
                return -1;
        }
        patch(rx, chain, (uint32_t)rx->n_code);
        return 0;
    case N_LOOK:
    case N_NLOOK:
        at = emit(ps, x.kind == N_LOOK ? OP_LOOK : OP_NLOOK, 0, 0);
        if (at < 0 || gen(ps, x.first) || emit(ps, OP_MATCH, 0, 0) < 0)
            return -1;
        rx->code[at].a = (uint32_t)at + 1;
        rx->code[at].b = (uint32_t)rx->n_code;
        return 0;
    default:
        return fail(ps, "internal: unknown node");
    }
}

/* llama.cpp runs a pattern on collapsed text exactly when it names one of
 * these categories; we decide the same way. */
static bool names_category(const char *p)
{
    static const char *const cats[] = {"\\p{N}", "\\p{L}", "\\p{P}", "\\p{M}", "\\p{S}",
                                       "\\p{Lu}", "\\p{Ll}", "\\p{Lt}", "\\p{Lm}", "\\p{Lo}"};

    for (size_t i = 0; i < HY_ARRAY_LEN(cats); i++) {
        if (strstr(p, cats[i]))
            return true;
    }
    return false;
}

void hy_tok_rx_free(hy_tok_rx_t *rx)
{
    if (!rx)
        return;
    free(rx->code);
    free(rx->cls);
    free(rx->ranges);
    free(rx);
}

int hy_tok_rx_compile(hy_tok_rx_t **out, const char *pattern, char *err)
{
    rx_parse_t ps = {0};
    int32_t root;

    *out = NULL;
    ps.s = pattern;
    ps.len = strlen(pattern);
    ps.err = err;
    ps.rx = calloc(1, sizeof *ps.rx);
    if (!ps.rx)
        return hy_err(err, HY_ENOMEM, "pre-tokenizer regex: out of memory");
    ps.rx->collapsed = names_category(pattern);
    root = parse_alt(&ps);
    if (root >= 0 && ps.pos < ps.len)
        fail(&ps, "unbalanced )");
    if (ps.rc == HY_OK && gen(&ps, root) == 0)
        emit(&ps, OP_MATCH, 0, 0);
    free(ps.nodes);
    if (ps.rc != HY_OK) {
        hy_tok_rx_free(ps.rx);
        return ps.rc;
    }
    *out = ps.rx;
    return HY_OK;
}

/* ---- matching ------------------------------------------------------------ */

/* What the pattern sees at a code point (see the file comment). */
static uint32_t symbol(const hy_tok_rx_t *rx, uint32_t cp, unsigned fl)
{
    if (cp < 128)
        return cp;
    if (fl & HY_UNI_WHITESPACE)
        return 0x0B;
    if (!rx->collapsed)
        return cp;
    switch (fl & 0xFF) {
    case HY_UNI_NUMBER: return RX_PSEUDO + CAT_N;
    case HY_UNI_LETTER: return RX_PSEUDO + CAT_L;
    case HY_UNI_PUNCT: return RX_PSEUDO + CAT_P;
    case HY_UNI_MARK: return RX_PSEUDO + CAT_M;
    case HY_UNI_SYMBOL: return RX_PSEUDO + CAT_S;
    default: return RX_PSEUDO + CAT_OTHER;
    }
}

static bool class_has(const hy_tok_rx_t *rx, const rx_class_t *c, uint32_t sym)
{
    bool in = false;

    if (sym < 128) {
        in = (c->ascii[sym >> 6] >> (sym & 63)) & 1;
    } else if (sym >= RX_PSEUDO) {
        in = (c->pseudo >> (sym - RX_PSEUDO)) & 1;
    } else {
        for (uint32_t i = 0; i < c->n && !in; i++)
            in = sym >= rx->ranges[c->first + i][0] && sym <= rx->ranges[c->first + i][1];
    }
    return in != c->neg;
}

static int push(hy_tok_rx_work_t *w, size_t pc, size_t pos)
{
    if (hy_tok_grow((void **)&w->v, &w->cap, w->n + 2, sizeof *w->v))
        return HY_ENOMEM;
    w->v[w->n++] = pc;
    w->v[w->n++] = pos;
    return HY_OK;
}

/* Beyond this many remembered states the memo is dropped and restarted:
 * matching stays correct, only slower. */
#define RX_MEMO_MAX (1u << 22)
/* An attempt that runs this many instructions switches the memo on for the
 * rest of the fragment (ordinary words take a few dozen). */
#define RX_MEMO_AFTER 2048
/* A frame whose pc has this bit set marks where a state's subtree ends. */
#define RX_MARK ((size_t)1 << (sizeof(size_t) * 8 - 1))

static uint64_t memo_key(size_t pc, size_t pos)
{
    return (uint64_t)pc << 40 | (uint64_t)pos;
}

static size_t memo_slot(uint64_t k, size_t mask)
{
    k ^= k >> 31;
    k *= 0x9e3779b97f4a7c15ull;
    return (size_t)(k >> 17) & mask;
}

static bool memo_has(const hy_tok_rx_work_t *w, size_t pc, size_t pos)
{
    uint64_t k = memo_key(pc, pos);
    size_t mask = w->memo_cap - 1;

    if (!w->memo_cap)
        return false;
    for (size_t i = memo_slot(k, mask);; i = (i + 1) & mask) {
        if (w->memo[i] == k)
            return true;
        if (w->memo[i] == UINT64_MAX)
            return false;
    }
}

/* Records that state (pc, pos) fails; an allocation failure only loses
 * the memo. */
static void memo_add(hy_tok_rx_work_t *w, size_t pc, size_t pos)
{
    uint64_t k = memo_key(pc, pos);
    size_t mask;

    if (w->memo_n * 2 >= w->memo_cap) {
        size_t cap = w->memo_cap ? w->memo_cap * 2 : 1024;
        uint64_t *old = w->memo, *nm;
        if (w->memo_n >= RX_MEMO_MAX || !(nm = malloc(cap * sizeof *nm))) {
            w->memo_n = 0;
            if (w->memo)
                memset(w->memo, 0xff, w->memo_cap * sizeof *w->memo);
            return;
        }
        memset(nm, 0xff, cap * sizeof *nm);
        for (size_t i = 0; i < w->memo_cap; i++) {
            if (old[i] != UINT64_MAX) {
                size_t j = memo_slot(old[i], cap - 1);
                while (nm[j] != UINT64_MAX)
                    j = (j + 1) & (cap - 1);
                nm[j] = old[i];
            }
        }
        free(old);
        w->memo = nm;
        w->memo_cap = cap;
    }
    mask = w->memo_cap - 1;
    for (size_t i = memo_slot(k, mask);; i = (i + 1) & mask) {
        if (w->memo[i] == k)
            return;
        if (w->memo[i] == UINT64_MAX) {
            w->memo[i] = k;
            w->memo_n++;
            return;
        }
    }
}

void hy_tok_rx_work_free(hy_tok_rx_work_t *w)
{
    free(w->v);
    free(w->memo);
    memset(w, 0, sizeof *w);
}

/*
 * Depth-first run of the program from pc at pos; the first MATCH reached
 * wins.  Frames above the entry height belong to this call, so lookaheads
 * recurse on the same stack.  With the memo on, every branch target starts
 * a new frame, and under it a mark: when the mark is popped, everything
 * reachable from that state has failed, which the memo keeps (not with
 * not_null, whose verdict depends on the start).
 */
static int run(const hy_tok_rx_t *rx, const uint32_t *cp, const uint16_t *fl, size_t pc0,
               size_t pos0, size_t end, bool not_null, size_t *out, hy_tok_rx_work_t *w)
{
    size_t base = w->n, steps = 0;
    bool memo = w->memo_on && !not_null;
    int rc = 0;

    if (push(w, pc0, pos0))
        return HY_ENOMEM;
    while (w->n > base && rc == 0) {
        size_t pos = w->v[--w->n], pc = w->v[--w->n];
        if (pc & RX_MARK) {
            if (memo)
                memo_add(w, pc & ~RX_MARK, pos);
            continue;
        }
        if (memo && (memo_has(w, pc, pos) || push(w, pc | RX_MARK, pos)))
            continue; /* known to fail; or out of memory for the mark, which only loses it */
        for (;;) {
            const rx_inst_t *in = &rx->code[pc];
            size_t sub;
            int r;
            steps++;
            if (in->op == OP_CLASS) {
                if (pos >= end || !class_has(rx, &rx->cls[in->a], symbol(rx, cp[pos], fl[pos])))
                    break;
                pc++;
                pos++;
            } else if (in->op == OP_JMP) {
                pc = in->a;
            } else if (in->op == OP_SPLIT) {
                if (push(w, in->b, pos)) {
                    rc = HY_ENOMEM;
                    break;
                }
                if (!memo) {
                    pc = in->a;
                    continue;
                }
                /* with the memo, the first branch is a frame (and a mark) too */
                if (push(w, in->a, pos))
                    rc = HY_ENOMEM;
                break;
            } else if (in->op == OP_EOL) {
                if (pos != end)
                    break;
                pc++;
            } else if (in->op == OP_MATCH) {
                if (not_null && pos == pos0)
                    break;
                w->n = base;
                *out = pos;
                rc = 1;
                break;
            } else {
                r = run(rx, cp, fl, in->a, pos, end, false, &sub, w);
                if (r < 0) {
                    rc = r;
                    break;
                }
                if ((r == 1) != (in->op == OP_LOOK))
                    break;
                pc = in->b;
            }
        }
    }
    w->n = base;
    w->steps += steps;
    return rc;
}

int hy_tok_rx_match(const hy_tok_rx_t *rx, const uint32_t *cp, const uint16_t *fl, size_t pos,
                    size_t end, bool not_null, size_t *len, hy_tok_rx_work_t *w)
{
    size_t stop = pos;
    int r;

    if (w->memo_rx != rx || w->memo_cp != cp || w->memo_end != end) {
        /* another pattern, text or fragment: what failed there says nothing
         * here.  A big table is dropped rather than cleared, so that the
         * many small fragments after it do not each pay for clearing it. */
        if (w->memo_cap > 4096) {
            free(w->memo);
            w->memo = NULL;
            w->memo_cap = 0;
        } else if (w->memo_n) {
            memset(w->memo, 0xff, w->memo_cap * sizeof *w->memo);
        }
        w->memo_n = 0;
        w->memo_on = false;
        w->memo_rx = rx;
        w->memo_cp = cp;
        w->memo_end = end;
    }
    w->steps = 0;
    r = run(rx, cp, fl, 0, pos, end, not_null, &stop, w);
    if (w->steps > RX_MEMO_AFTER)
        w->memo_on = true;

    *len = stop - pos;
    return r;
}
