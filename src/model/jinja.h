/*
 * jinja.h - internals of the Jinja2-subset interpreter behind chat_template.c:
 * the arena every AST node and runtime value lives in, the value type (a
 * Python-like dynamic value), the AST node, and the entry points of the
 * three stages (jinja_parse.c: lex+parse, jinja_value.c: value helpers,
 * jinja_eval.c: evaluation).  Nothing here is public API.
 */
#ifndef HY_JINJA_H
#define HY_JINJA_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "common/hy.h"

/* Limits that keep hostile templates or inputs from exhausting the stack,
 * memory or CPU.  Each one is reported by name when hit. */
#define HY_JINJA_MAX_DEPTH 128            /* parse nesting (blocks + expressions) */
#define HY_JINJA_DEPTH_STR "128"
#define HY_JINJA_MAX_CALLS 32             /* nested macro calls at render */
#define HY_JINJA_MAX_EVAL 1024            /* nested evaluation frames at render */
#define HY_JINJA_MAX_ITER 1000000         /* loop iterations per render */
#define HY_JINJA_MAX_MEM ((size_t)256 << 20) /* arena bytes per render or compile */

/* ---- arena: bump allocator, freed all at once ---- */
typedef struct hy_jinja_chunk hy_jinja_chunk_t;
typedef struct {
    hy_jinja_chunk_t *head;
    size_t used_total; /* bytes handed out from the system so far */
    size_t cap;        /* refuse to grow beyond this */
} hy_jinja_arena_t;

void *hy_jinja_alloc(hy_jinja_arena_t *a, size_t n);
void hy_jinja_arena_free(hy_jinja_arena_t *a);
char *hy_jinja_strdup(hy_jinja_arena_t *a, const char *s, size_t n);

/* ---- values ---- */
enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR,
    JV_LIST, JV_DICT, JV_LOOP, JV_MACRO, JV_FUNC,
};

typedef struct jv_list jv_list_t;
typedef struct jv_dict jv_dict_t;
typedef struct jnode jnode_t;
typedef struct jloop jloop_t;

typedef struct {
    uint8_t t;
    union {
        int64_t i;     /* JV_INT, JV_BOOL, JV_FUNC (builtin id) */
        double f;
        struct { const char *p; size_t n; } s; /* JV_STR; JV_UNDEF: its name */
        jv_list_t *l;
        jv_dict_t *d;
        jloop_t *loop;
        const jnode_t *m; /* JV_MACRO */
    } u;
} jv_t;

struct jv_list {
    jv_t *v;
    size_t n, cap;
    bool tuple; /* only changes repr(): (a, b) */
};

struct jv_dict {
    const char **k; /* keys: NUL-terminated, may not contain NUL */
    size_t *kn;
    jv_t *v;
    size_t n, cap;
    bool ns; /* a namespace(): the only mutable object */
};

struct jloop {
    jv_list_t *items;
    size_t i;
};

static inline jv_t jv_undef(const char *name)
{
    jv_t v = {.t = JV_UNDEF};
    v.u.s.p = name;
    v.u.s.n = name ? __builtin_strlen(name) : 0;
    return v;
}
static inline jv_t jv_none(void) { jv_t v = {.t = JV_NONE}; return v; }
static inline jv_t jv_bool(bool b) { jv_t v = {.t = JV_BOOL}; v.u.i = b; return v; }
static inline jv_t jv_int(int64_t i) { jv_t v = {.t = JV_INT}; v.u.i = i; return v; }
static inline jv_t jv_float(double f) { jv_t v = {.t = JV_FLOAT}; v.u.f = f; return v; }
static inline jv_t jv_str(const char *p, size_t n)
{
    jv_t v = {.t = JV_STR};
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}

/* growable byte buffer in the arena, with an output cap */
typedef struct {
    hy_jinja_arena_t *a;
    char *p;
    size_t n, cap;
    size_t limit;
} jbuf_t;

int jbuf_put(jbuf_t *b, const char *s, size_t n);
int jbuf_putc(jbuf_t *b, char c);

jv_list_t *jv_list_new(hy_jinja_arena_t *a, size_t cap);
int jv_list_push(hy_jinja_arena_t *a, jv_list_t *l, jv_t v);
jv_dict_t *jv_dict_new(hy_jinja_arena_t *a, size_t cap);
int jv_dict_set(hy_jinja_arena_t *a, jv_dict_t *d, const char *k, size_t kn, jv_t v);
jv_t *jv_dict_get(const jv_dict_t *d, const char *k, size_t kn);

bool jv_truthy(jv_t v);
bool jv_equal(jv_t a, jv_t b);
const char *jv_type_name(jv_t v);
/* Python str(v) / repr(v) appended to b. */
int jv_write_str(jbuf_t *b, jv_t v);
int jv_write_repr(jbuf_t *b, jv_t v);
/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys) into b.
 * indent < 0 means None.  Returns HY_EINVAL for values JSON cannot hold. */
int jv_write_json(jbuf_t *b, jv_t v, int indent, const char *item_sep,
                  const char *key_sep, bool sort_keys, int depth, char *err);
/* json.loads(): parses a JSON text into arena values (ints stay ints). */
int jv_parse_json(hy_jinja_arena_t *a, const char *s, size_t n, jv_t *out, char *err);
/* Python float repr */
int jv_write_float(jbuf_t *b, double f);

/* ---- AST ---- */
enum {
    /* expressions */
    JN_LIT, JN_NAME, JN_ATTR, JN_INDEX, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST,
    JN_NEG, JN_POS, JN_NOT, JN_AND, JN_OR, JN_BIN, JN_COND, JN_LIST, JN_TUPLE,
    JN_DICT,
    /* statements */
    JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SETBLOCK, JN_MACRO,
    JN_BREAK, JN_CONTINUE, JN_BODY,
};

/* binary operators (JN_BIN .op) */
enum {
    JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW,
    JOP_CONCAT, JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN,
};

struct jnode {
    int kind;
    int op;       /* JN_BIN operator; JN_FILTER/JN_TEST builtin id; JN_TEST negated in .neg */
    bool neg;
    size_t pos;   /* byte offset in the template, for line:col */
    jnode_t *a, *b, *c;
    jnode_t **list;  size_t n;    /* args, items, body, dict keys */
    jnode_t **list2; size_t n2;   /* kwarg values, else-body, dict values */
    const char **names; size_t nnames; /* kwarg names, macro params, for targets */
    const char *str; size_t len;  /* name, attribute, text */
    jv_t val;                     /* JN_LIT */
};

typedef struct {
    hy_jinja_arena_t arena;
    const char *src; /* normalised copy (\r\n -> \n, trailing \n dropped) */
    size_t len;
    jnode_t *root;   /* JN_BODY */
} jtemplate_t;

/* line:column (1-based) of byte offset pos in src */
void hy_jinja_linecol(const char *src, size_t len, size_t pos, int *line, int *col);

int hy_jinja_parse(jtemplate_t *t, const char *src, size_t len, char *err);

/* builtin filter / test / function ids, looked up at parse time */
int hy_jinja_filter_id(const char *name, size_t n);
int hy_jinja_test_id(const char *name, size_t n);

/* Render context passed in from chat_template.c. */
typedef struct {
    const char *name;
    jv_t value;
} jglobal_t;

int hy_jinja_render(const jtemplate_t *t, hy_jinja_arena_t *a, const jglobal_t *globals,
                    size_t nglobals, int64_t now, size_t max_output, char **out,
                    size_t *out_len, char *err);

#endif
