/*
 * jinja_rt.h - what the evaluator (jinja_eval.c) and the builtin library
 * (jinja_builtin.c) share at render time: the render context, scopes,
 * call arguments, and the Python-semantics helpers both sides need
 * (errors with line:col, str(), attribute/item access, iteration,
 * comparison, arithmetic).  Internal to the chat template interpreter.
 */
#ifndef HY_JINJA_RT_H
#define HY_JINJA_RT_H

#include "model/jinja.h"

typedef struct jframe jframe_t;
struct jframe {
    jframe_t *parent;
    jv_dict_t vars;
};

typedef struct {
    hy_jinja_arena_t *a;
    const jtemplate_t *t;
    jbuf_t *out;
    jframe_t *root;
    int depth; /* exec_body + eval nesting: bounds C stack use */
    int calls; /* macro call nesting */
    size_t iters;
    int64_t now;
    char *err;
} jctx_t;

/* evaluated call arguments: positional, then keyword (names parallel to kwv) */
typedef struct {
    jv_t *args;
    size_t na;
    const char **kwn;
    jv_t *kwv;
    size_t nk;
} jargs_t;

#define OOM(n) hy_jrt_err(C, (n), HY_ENOMEM, "render memory limit exceeded")

static inline bool hy_jrt_is_num(jv_t v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static inline double hy_jrt_num(jv_t v) { return v.t == JV_FLOAT ? v.u.f : (double)v.u.i; }

/* "chat template L:C: msg" for node n; returns code */
int hy_jrt_err(jctx_t *C, const jnode_t *n, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* turns a jbuf/alloc status into a reported error; passes >= 0 through */
int hy_jrt_chk(jctx_t *C, const jnode_t *n, int rc);
jbuf_t hy_jrt_newbuf(jctx_t *C);
int hy_jrt_to_str(jctx_t *C, const jnode_t *n, jv_t v, jv_t *out);
int hy_jrt_undef(jctx_t *C, const jnode_t *n, jv_t v);
size_t hy_jrt_u8_len(const char *s, size_t n);
size_t *hy_jrt_u8_offsets(jctx_t *C, const char *s, size_t n, size_t *count);
int hy_jrt_lookup_id(const char *const *tab, size_t nt, const char *s, size_t n);

int hy_jrt_getattr(jctx_t *C, const jnode_t *n, jv_t obj, const char *name, size_t nl, jv_t *out);
int hy_jrt_getitem(jctx_t *C, const jnode_t *n, jv_t obj, jv_t key, jv_t *out);
int hy_jrt_slice(jctx_t *C, const jnode_t *n, jv_t obj, jv_t *sv, jv_t *out);
int hy_jrt_iterate(jctx_t *C, const jnode_t *n, jv_t v, jv_list_t **out);
int hy_jrt_compare(jctx_t *C, const jnode_t *n, jv_t a, jv_t b, int *res);
int hy_jrt_contains(jctx_t *C, const jnode_t *n, jv_t needle, jv_t hay, bool *res);
int hy_jrt_binop(jctx_t *C, const jnode_t *n, int op, jv_t a, jv_t b, jv_t *out);
/* positional i, else keyword `name`, else dflt */
jv_t hy_jrt_arg(const jargs_t *A, size_t i, const char *name, jv_t dflt);

/* jinja_builtin.c */
int hy_jrt_method(jctx_t *C, const jnode_t *n, jv_t obj, const char *m, const jargs_t *A, jv_t *out);
int hy_jrt_filter(jctx_t *C, jframe_t *f, const jnode_t *n, int id, jv_t v, jv_t *args,
                  size_t na, const char **kwn, jv_t *kwv, size_t nk, jv_t *out);
int hy_jrt_test(jctx_t *C, const jnode_t *n, int id, jv_t v, jv_t *args, size_t na, bool *res);

#endif
