/*
 * gbnf.h - the GBNF grammar language (llama.cpp's `grammar` field syntax)
 * parsed into a small syntax tree: rules of alternatives of sequences of
 * literals, character classes, rule references, groups and bounded or
 * unbounded repetitions.  Nothing here knows about bytes or tokens: the
 * tree is what grammar.c compiles into byte-level automata.  Errors name
 * the byte offset (with line and column) and the rule being parsed.
 *
 * Syntax accepted (a superset of what llama.cpp's parser takes):
 *   name ::= alternatives            one rule; names are [A-Za-z0-9_-]+
 *   a b | c                          sequence, alternation (empty alternative ok)
 *   ( ... )                          grouping; newlines are free inside
 *   x* x+ x? x{m} x{m,} x{m,n} x{,n} repetition (at most HY_GBNF_MAX_REPEAT)
 *   "lit"                            literal; escapes \n \r \t \\ \" \[ \] \- \^ \/
 *                                    \xHH \uHHHH \UHHHHHHHH (code points, UTF-8 encoded)
 *   [a-z_] [^"\\]                    character class over code points, negation, ranges
 *   .                                any code point
 *   # comment                        to the end of the line
 * A rule ends at the end of its line unless a parenthesis is open or the
 * next line starts with '|'.  The start rule is `root`.
 */
#ifndef HY_GRAMMAR_GBNF_H
#define HY_GRAMMAR_GBNF_H

#include "common/hy.h"

#define HY_GBNF_MAX_REPEAT 65535 /* largest m or n in x{m,n} */
#define HY_GBNF_MAX_DEPTH 200    /* nested groups */
#define HY_GBNF_MAX_CP 0x10FFFFu

typedef enum {
    HY_GBNF_EMPTY = 0, /* matches the empty string */
    HY_GBNF_LIT,       /* a = offset into lits, b = length (UTF-8 bytes) */
    HY_GBNF_CLASS,     /* a = offset into ranges, b = count (sorted, disjoint, negation applied) */
    HY_GBNF_REF,       /* a = rule index */
    HY_GBNF_SEQ,       /* a = offset into kids, b = count */
    HY_GBNF_ALT,       /* a = offset into kids, b = count */
    HY_GBNF_REP,       /* a = the repeated node; min..max times, max -1 = unbounded */
} hy_gbnf_kind_t;

typedef struct {
    int32_t kind; /* hy_gbnf_kind_t */
    int32_t a, b;
    int32_t min, max;
} hy_gbnf_node_t;

typedef struct {
    uint32_t lo, hi; /* inclusive code points */
} hy_gbnf_range_t;

typedef struct {
    char *name;
    int32_t expr;    /* node index; -1 while only referenced */
    int32_t def_off; /* byte offset of the definition */
    int32_t use_off; /* byte offset of the first reference (-1 none) */
} hy_gbnf_rule_t;

typedef struct {
    hy_gbnf_node_t *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t *kids;
    int32_t n_kids, cap_kids;
    uint8_t *lits;
    int32_t n_lits, cap_lits;
    hy_gbnf_range_t *ranges;
    int32_t n_ranges, cap_ranges;
    hy_gbnf_rule_t *rules;
    int32_t n_rules, cap_rules;
    int32_t root; /* index of rule "root" */
} hy_gbnf_t;

/* Parses src (len bytes, need not be NUL terminated, must be UTF-8).
 * Checks that `root` exists and that every referenced rule is defined.
 * On error g is left empty (nothing to free) and err reads e.g.
 * "grammar: offset 41 (line 3, column 9), rule 'value': expected ')'". */
int hy_gbnf_parse(hy_gbnf_t *g, const char *src, size_t len, char *err);
void hy_gbnf_free(hy_gbnf_t *g);

/* The same grammar text with every rule name (definitions and references)
 * prefixed, so that it can join another grammar's rules: "root" becomes
 * prefix "root".  Literals, classes, repetition counts and comments are
 * copied as they are.  *out is malloc'd and NUL terminated.  HY_EFORMAT
 * for a literal or class left open, HY_ENOMEM. */
int hy_gbnf_prefix(const char *src, size_t len, const char *prefix, char **out, size_t *out_len,
                   char *err);

/* Index of the rule named name, or -1. */
int32_t hy_gbnf_find(const hy_gbnf_t *g, const char *name);

/* Grows *p (an array of *cap elements of elem bytes) to hold need; for
 * the grammar files' flat arrays.  HY_OK or HY_ENOMEM. */
int hy_gbnf_grow(void **p, int32_t *cap, int32_t need, size_t elem);
#define HY_GBNF_GROW(arr, cap, need) hy_gbnf_grow((void **)&(arr), &(cap), (need), sizeof *(arr))

#endif
