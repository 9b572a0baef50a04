/*
 * test_gbnf.c - the GBNF parser: the tree it builds for each construct
 * (literals with every escape, classes with ranges and negation, groups,
 * each repetition form, comments, continuation lines) and the exact error
 * for each kind of bad input (offset, line, column and rule named).
 */
#include "grammar/gbnf.h"
#include "test.h"

#include <string.h>

/* HY_T_OK that also returns the condition (evaluated once), to stop a
 * case early. */
#define HY_T_OK_RET(cond, ...)                 \
    ({                                         \
        int c_ = !!(cond);                     \
        HY_T_OK(c_, __VA_ARGS__);              \
        c_;                                    \
    })

static int parse(const char *src, hy_gbnf_t *g, char *err)
{
    return hy_gbnf_parse(g, src, strlen(src), err);
}

/* The root rule's expression node. */
static const hy_gbnf_node_t *root_expr(const hy_gbnf_t *g)
{
    return &g->nodes[g->rules[g->root].expr];
}

static void expect_error(const char *src, const char *want)
{
    char err[HY_ERR_LEN] = "", shown[29];
    hy_gbnf_t g;
    int rc = parse(src, &g, err);
    size_t i;

    /* one TAP line: newlines of the source shown as '/' */
    for (i = 0; i + 1 < sizeof shown && src[i]; i++)
        shown[i] = src[i] == '\n' ? '/' : src[i];
    shown[i] = '\0';
    HY_T_OK(rc != HY_OK && strstr(err, want) != NULL, "error for %s -> %s (got: %s)", shown,
            want, err);
}

static void test_literals(void)
{
    char err[HY_ERR_LEN];
    hy_gbnf_t g;
    const hy_gbnf_node_t *n;
    static const uint8_t want[] = { 'a', '\n', '\r', '\t', '\\', '"', '[', ']', 'A',
                                    0xC3, 0xA9, 0xF0, 0x9F, 0x98, 0x80, 0xC3, 0xA9 };

    HY_T_OK(parse("root ::= \"a\\n\\r\\t\\\\\\\"\\[\\]\\x41\\u00e9\\U0001F600\xC3\xA9\"", &g,
                  err) == HY_OK,
            "literal with every escape parses (%s)", err);
    n = root_expr(&g);
    HY_T_OK(n->kind == HY_GBNF_LIT && n->b == (int32_t)sizeof want &&
                memcmp(g.lits + n->a, want, sizeof want) == 0,
            "escapes decode to code points and are stored as UTF-8");
    hy_gbnf_free(&g);

    HY_T_OK(parse("root ::= \"\"", &g, err) == HY_OK && root_expr(&g)->kind == HY_GBNF_EMPTY,
            "empty literal is the empty string");
    hy_gbnf_free(&g);
}

static void test_classes(void)
{
    char err[HY_ERR_LEN];
    hy_gbnf_t g;
    const hy_gbnf_node_t *n;

    HY_T_OK(parse("root ::= [c-ea-bz_]", &g, err) == HY_OK, "class parses");
    n = root_expr(&g);
    HY_T_OK(n->kind == HY_GBNF_CLASS && n->b == 3 && g.ranges[n->a].lo == '_' &&
                g.ranges[n->a + 1].lo == 'a' && g.ranges[n->a + 1].hi == 'e' &&
                g.ranges[n->a + 2].lo == 'z',
            "class ranges sorted and adjacent ones merged (a-b + c-e = a-e)");
    hy_gbnf_free(&g);

    HY_T_OK(parse("root ::= [^\"\\\\\\x00-\\x1F]", &g, err) == HY_OK, "negated class parses");
    n = root_expr(&g);
    HY_T_OK(n->kind == HY_GBNF_CLASS && n->b == 3 && g.ranges[n->a].lo == 0x20 &&
                g.ranges[n->a].hi == 0x21 && g.ranges[n->a + 1].lo == 0x23 &&
                g.ranges[n->a + 1].hi == 0x5B && g.ranges[n->a + 2].lo == 0x5D &&
                g.ranges[n->a + 2].hi == HY_GBNF_MAX_CP,
            "negation complements over all code points");
    hy_gbnf_free(&g);

    HY_T_OK(parse("root ::= [-a] [a-] .", &g, err) == HY_OK && root_expr(&g)->kind == HY_GBNF_SEQ,
            "'-' first or last in a class is literal; '.' is a class");
    n = &g.nodes[g.kids[root_expr(&g)->a + 2]];
    HY_T_OK(n->kind == HY_GBNF_CLASS && g.ranges[n->a].lo == 0 &&
                g.ranges[n->a].hi == HY_GBNF_MAX_CP,
            "'.' is every code point");
    hy_gbnf_free(&g);
}

static void test_structure(void)
{
    char err[HY_ERR_LEN];
    hy_gbnf_t g;
    const hy_gbnf_node_t *n;
    const char *src =
        "# a comment line\n"
        "root ::= item (\",\" item)* # trailing comment\n"
        "item ::= | \"x\"{2}\n"
        "  | \"y\"{1,} | \"z\"{,3} | \"w\"{2,4}\n"
        "  | \"v\"? | \"u\"+\n"
        "grp ::= (\n  \"a\"\n  | \"b\"\n)\n";

    if (!HY_T_OK_RET(parse(src, &g, err) == HY_OK, "multi-line grammar parses (%s)", err))
        return;
    HY_T_OK(g.n_rules == 3 && hy_gbnf_find(&g, "item") == 1 && hy_gbnf_find(&g, "grp") == 2,
            "three rules in order of appearance");
    n = &g.nodes[g.rules[1].expr];
    HY_T_OK(n->kind == HY_GBNF_ALT && n->b == 7,
            "continuation lines starting with '|' join the rule; a leading '|' adds an empty "
            "alternative (%d alternatives)",
            n->b);
    {
        static const int32_t mins[] = { 2, 1, 0, 2, 0, 1 }, maxs[] = { 2, -1, 3, 4, 1, -1 };
        bool good = true;

        for (int i = 0; i < 6; i++) {
            const hy_gbnf_node_t *r = &g.nodes[g.kids[n->a + i + 1]];

            good &= r->kind == HY_GBNF_REP && r->min == mins[i] && r->max == maxs[i];
        }
        HY_T_OK(good, "{2} {1,} {,3} {2,4} ? + give the right bounds");
        HY_T_OK(g.nodes[g.kids[n->a]].kind == HY_GBNF_EMPTY, "empty alternative");
    }
    n = &g.nodes[g.rules[2].expr];
    HY_T_OK(n->kind == HY_GBNF_ALT && n->b == 2, "newlines are free inside parentheses");
    hy_gbnf_free(&g);

    HY_T_OK(parse("root ::= \"a\"*?+", &g, err) == HY_OK &&
                root_expr(&g)->kind == HY_GBNF_REP && root_expr(&g)->min == 1,
            "postfix operators chain");
    hy_gbnf_free(&g);
    HY_T_OK(parse("root ::= later\nlater ::= \"x\"", &g, err) == HY_OK,
            "a rule may be used before it is defined");
    hy_gbnf_free(&g);
}

static void test_errors(void)
{
    expect_error("root ::= foo", "offset 9 (line 1, column 10): rule 'foo' is used but never defined");
    expect_error("a ::= \"x\"", "no rule named 'root'");
    expect_error("root ::= \"abc", "offset 9 (line 1, column 10), rule 'root': unterminated string literal");
    expect_error("root ::= [a-", "rule 'root': unterminated character class");
    expect_error("root ::= (\"a\"", "expected ')' to close the group opened at offset 9");
    expect_error("root ::= \"a\"{3,1}", "repetition {3,1}: the maximum is below the minimum");
    expect_error("root ::= \"a\"{70000}", "repetition count over 65535");
    expect_error("root ::= \"a\"{x}", "expected a number, ',' or '}' in a repetition count");
    expect_error("root ::= \"a\"{}", "empty repetition count {}");
    expect_error("root ::= \"\\q\"", "offset 10 (line 1, column 11), rule 'root': unknown escape '\\q'");
    expect_error("root ::= \"\\u12\"", "escape '\\u' needs 4 hex digits");
    expect_error("root ::= \"\\uD800\"", "U+D800, which is not a Unicode scalar value");
    expect_error("root ::= \"x\"\nroot ::= \"y\"",
                 "offset 13 (line 2, column 1): rule 'root' is defined twice (first at offset 0)");
    expect_error("root = \"a\"", "rule 'root': expected '::=' after the rule name");
    expect_error("root ::= \"a\" )", "unbalanced ')'");
    expect_error("root ::= [z-a]", "range U+007A-U+0061 is reversed");
    expect_error("root ::= []", "character class matches nothing");
    expect_error("root ::= \"\xff\"", "invalid UTF-8 byte 0xff");
    expect_error("root ::= \"a\" @", "offset 13 (line 1, column 14), rule 'root': unexpected '@'");
    expect_error("::= \"a\"", "offset 0 (line 1, column 1): expected a rule name");
    {
        char deep[1000];
        size_t n = 0;

        n += (size_t)snprintf(deep, sizeof deep, "root ::= ");
        for (int i = 0; i < 300; i++)
            deep[n++] = '(';
        deep[n] = '\0';
        expect_error(deep, "groups nested deeper than 200");
    }
}

/* Rule names prefixed, nothing else touched: literals and classes holding
 * word characters and escapes, repetition counts, comments. */
static void test_prefix(void)
{
    static const char src[] =
        "root ::= a-b (x_1 | \"x_1 \\\" y\")+ [a-z\\]] x_1{2,3} # a comment x_1\n"
        "a-b ::= \"root\" | [^root]\n"
        "x_1 ::= a-b*\n";
    static const char want[] =
        "p-root ::= p-a-b (p-x_1 | \"x_1 \\\" y\")+ [a-z\\]] p-x_1{2,3} # a comment x_1\n"
        "p-a-b ::= \"root\" | [^root]\n"
        "p-x_1 ::= p-a-b*\n";
    char err[HY_ERR_LEN], *out = NULL;
    size_t len = 0;
    hy_gbnf_t g;
    int rc;

    memset(&g, 0, sizeof g);
    rc = hy_gbnf_prefix(src, strlen(src), "p-", &out, &len, err);
    HY_T_OK(rc == HY_OK && len == strlen(want) && strcmp(out, want) == 0,
            "prefix: every rule name and nothing else (%s)", out ? out : err);
    HY_T_OK(rc == HY_OK && hy_gbnf_parse(&g, out, len, err) != HY_OK &&
                strstr(err, "root") != NULL,
            "prefix: the result has no root of its own (%s)", err);
    hy_gbnf_free(&g);
    free(out);
    HY_T_OK(hy_gbnf_prefix("root ::= \"abc", 13, "p-", &out, &len, err) == HY_EFORMAT &&
                strcmp(err, "grammar: offset 9: literal left open") == 0,
            "prefix: an open literal is an error (%s)", err);
}

int main(void)
{
    test_prefix();
    test_literals();
    test_classes();
    test_structure();
    test_errors();
    return hy_t_done();
}
