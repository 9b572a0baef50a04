/*
 * json_schema_impl.h - what json_schema.c (structure: dispatch, objects,
 * arrays, references, allOf merging) and json_schema_types.c (scalars:
 * strings, formats, patterns, numeric ranges, enum values) share.
 */
#ifndef HY_GRAMMAR_JSON_SCHEMA_IMPL_H
#define HY_GRAMMAR_JSON_SCHEMA_IMPL_H

#include "grammar/gtext.h"
#include "grammar/json_schema.h"

/* Rules defined once per grammar, on first use. */
enum {
    HY_JSG_WS = 1 << 0,     /* json-ws: bounded whitespace */
    HY_JSG_CHAR = 1 << 1,   /* json-char: one character of a JSON string */
    HY_JSG_STRING = 1 << 2, /* json-string */
    HY_JSG_NUMBER = 1 << 3, /* json-number */
    HY_JSG_INT = 1 << 4,    /* json-int */
    HY_JSG_VALUE = 1 << 5,  /* json-value, json-object, json-array: any JSON */
};

typedef struct {
    char *ptr;  /* the $ref string */
    char *rule;
} hy_jsg_ref_t;

struct hy_jsg {
    hy_gtext_t rules;     /* "name ::= body\n" lines */
    char **names;         /* every rule name used */
    int32_t n_names, cap_names;
    hy_jsg_ref_t *refs;   /* $ref string -> rule */
    int32_t n_refs, cap_refs;
    cJSON **owned;        /* schemas built by merging, freed with g */
    int32_t n_owned, cap_owned;
    const cJSON *doc;     /* the document $refs resolve in */
    unsigned builtins;    /* HY_JSG_* emitted */
    char path[512];       /* JSON pointer of the schema being converted */
    size_t path_len;
    int depth;
    char *err;
    int rc;
};

/* Fails the conversion (sticky) with "<path>: <message>". */
int hy_jsg_fail(hy_jsg_t *g, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A builtin rule's name, defining it (and what it uses) on first use. */
const char *hy_jsg_builtin(hy_jsg_t *g, unsigned which);
/* A fresh rule name from hint (sanitised, made unique) into out[64]. */
void hy_jsg_name(hy_jsg_t *g, const char *hint, char *out);
/* Defines rule name ::= body. */
void hy_jsg_define(hy_jsg_t *g, const char *name, const char *body);
/* The rule for body, defined once per key ("string-0-300", "format-email"):
 * properties with the same bounded string or format share one automaton
 * instead of each unrolling its own.  NULL after an error. */
const char *hy_jsg_shared(hy_jsg_t *g, const char *key, const char *body);

/* json_schema_types.c: each appends a GBNF expression to out */
int hy_jsg_string(hy_jsg_t *g, const cJSON *s, hy_gtext_t *out);
int hy_jsg_number(hy_jsg_t *g, const cJSON *s, bool integer, hy_gtext_t *out);
/* The JSON text of value v as a GBNF literal. */
int hy_jsg_literal(hy_jsg_t *g, const cJSON *v, hy_gtext_t *out);

#endif
