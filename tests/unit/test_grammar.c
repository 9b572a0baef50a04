/*
 * test_grammar.c - compiled grammars and their matcher: strings each
 * grammar must accept, reject or accept as a prefix only (UTF-8 classes,
 * bounded repetitions, recursion, nullable loops), the left-recursion and
 * size refusals (a long repetition of a nullable item, the fuzzer's 11 s
 * input, refused within the work budget), lazy (triggered) grammars, and
 * the vocabulary mask checked against brute force (every token tried one
 * by one) on random walks through several grammars over a synthetic
 * vocabulary built to stress the trie (shared prefixes, duplicate pieces,
 * split UTF-8 sequences, special and end-of-generation tokens), plus the
 * vocabulary of a real tokenizer.
 */
#include "grammar/grammar.h"
#include "grammar/grammar_cache.h"
#include "model/gguf.h"
#include "test.h"

#include <string.h>

static const char *k_json =
    "root   ::= value\n"
    "value  ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( member ( \",\" ws member )* )? \"}\" ws\n"
    "member ::= string \":\" ws value\n"
    "array  ::= \"[\" ws ( value ( \",\" ws value )* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* "
    "\"\\\"\" ws\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )? ws\n"
    "ws     ::= [ \\t\\n]{0,4}\n";

static const char *k_arith =
    "root   ::= expr\n"
    "expr   ::= term ((\"+\" | \"-\") term)*\n"
    "term   ::= factor ((\"*\" | \"/\") factor)*\n"
    "factor ::= [0-9]+ | \"(\" expr \")\" | \"-\" factor\n";

static hy_grammar_t *compile(const char *src, const hy_gvocab_t *v)
{
    char err[HY_ERR_LEN];
    hy_grammar_t *g = NULL;

    if (hy_grammar_compile(&g, src, strlen(src), v, err) != HY_OK)
        printf("# compile failed: %s\n", err);
    return g;
}

/* 2 = accepted as a whole, 1 = a valid prefix only, 0 = rejected. */
static int match(hy_grammar_t *g, const char *s)
{
    char err[HY_ERR_LEN];
    hy_gmatch_t *m = NULL;
    int r;

    if (g == NULL || hy_gmatch_create(&m, g, NULL, err) != HY_OK)
        return -1;
    if (hy_gmatch_accept_bytes(m, s, strlen(s), err) != HY_OK)
        r = 0;
    else
        r = hy_gmatch_can_end(m) ? 2 : 1;
    hy_gmatch_free(m);
    return r;
}

typedef struct {
    const char *s;
    int want;
} case_t;

static void check_cases(const char *name, const char *src, const case_t *c, int n)
{
    hy_grammar_t *g = compile(src, NULL);
    int bad = 0, first = -1;

    for (int i = 0; i < n; i++) {
        if (match(g, c[i].s) != c[i].want) {
            if (first < 0)
                first = i;
            bad++;
        }
    }
    HY_T_OK(g != NULL && bad == 0, "%s: %d strings accepted/prefix/rejected as expected%s%s",
            name, n, first >= 0 ? "; first wrong: " : "", first >= 0 ? c[first].s : "");
    hy_grammar_unref(g);
}

static void test_matching(void)
{
    static const case_t json[] = {
        { "{}", 2 }, { "{\"a\": 1}", 2 }, { "[1, 2.5, -3e10, true, null]", 2 },
        { "{\"k\": [\"\\u00e9\\n\", {\"x\": false}]}", 2 }, { "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"", 2 },
        { "{\"a\": 1", 1 }, { "[", 1 }, { "\"\\u00", 1 }, { "-", 1 }, { "tr", 1 },
        { "{\"a\" 1}", 0 }, { "[1,]", 0 }, { "01", 0 }, { "\"\\x\"", 0 }, { "\"a\x01\"", 0 },
        { "\"\xc3\"", 0 }, { "\"\xed\xa0\x80\"", 0 }, { "{}     ", 0 }, { "{}    ", 2 },
        { "nul", 1 }, { "nulll", 0 }, { "1234567890123456", 2 }, { "12345678901234567", 0 },
    };
    static const case_t arith[] = {
        { "1+2*3", 2 }, { "(1+2)*3", 2 }, { "((((7))))", 2 }, { "--5", 2 }, { "(1+", 1 },
        { "1+*2", 0 }, { ")", 0 }, { "", 1 },
    };
    static const case_t reps[] = {
        { "ab", 0 }, { "aab", 2 }, { "aaab", 2 }, { "aaaab", 2 }, { "aaaaab", 0 }, { "aa", 1 },
    };
    static const case_t utf8[] = {
        { "\xc3\xa9", 2 }, { "\xe2\x82\xac", 2 }, { "\xf0\x9f\x98\x80", 2 }, { "\xc3", 1 },
        { "a", 0 }, { "\xc0\x80", 0 }, { "\xed\xa0\x80", 0 }, { "\xf4\x90\x80\x80", 0 },
        { "\xdf\xbf", 2 }, { "\xef\xbf\xbf", 2 }, { "\xf4\x8f\xbf\xbf", 2 },
    };
    static const case_t nullable[] = {
        { "", 2 }, { "x", 2 }, { "xxyx", 2 }, { "z", 2 }, { "xz", 2 }, { "zx", 0 },
    };
    static const case_t anyc[] = {
        { "ab", 2 }, { "\xe6\x97\xa5\xe6\x9c\xac", 2 }, { "a", 1 }, { "abc", 0 }, { "\n\t", 2 },
    };

    check_cases("JSON", k_json, json, (int)HY_ARRAY_LEN(json));
    check_cases("arithmetic (recursion)", k_arith, arith, (int)HY_ARRAY_LEN(arith));
    check_cases("bounded repetition a{2,4} b", "root ::= \"a\"{2,4} \"b\"", reps,
                (int)HY_ARRAY_LEN(reps));
    check_cases("negated class over UTF-8", "root ::= [^\\x00-\\x7F]", utf8,
                (int)HY_ARRAY_LEN(utf8));
    check_cases("nullable loop", "root ::= item* \"z\"?\nitem ::= \"x\"? | \"y\"", nullable,
                (int)HY_ARRAY_LEN(nullable));
    check_cases("'.' any character", "root ::= . .", anyc, (int)HY_ARRAY_LEN(anyc));
}

static void test_refusals(void)
{
    char err[HY_ERR_LEN] = "";
    hy_grammar_t *g = NULL;
    const char *lr = "root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]";
    const char *ilr = "root ::= a\na ::= b? c \"x\"\nb ::= \"y\"\nc ::= a | \"z\"";
    const char *big = "root ::= ([a-z]{1000}){300}";
    const char *nullrep = "root ::= (\"yes\" | \"no\") [.!]?{0,20000}";
    const char *nonnull = "root ::= (\"yes\" | \"no\") [.!]{0,20000}";
    double t0;
    int rc;

    HY_T_OK(hy_grammar_compile(&g, lr, strlen(lr), NULL, err) == HY_EFORMAT &&
                strstr(err, "rule 'expr' is left-recursive (expr -> expr)") != NULL,
            "direct left recursion refused: %s", err);
    HY_T_OK(hy_grammar_compile(&g, ilr, strlen(ilr), NULL, err) == HY_EFORMAT &&
                strstr(err, "left-recursive (a -> c -> a)") != NULL,
            "indirect left recursion through a nullable prefix refused: %s", err);
    HY_T_OK(hy_grammar_compile(&g, big, strlen(big), NULL, err) == HY_ERANGE &&
                strstr(err, "too large") != NULL,
            "a grammar too large to expand is refused: %s", err);
    t0 = hy_grammar_now_ms();
    rc = hy_grammar_compile(&g, nullrep, strlen(nullrep), NULL, err);
    t0 = hy_grammar_now_ms() - t0;
    HY_T_OK(rc == HY_ERANGE && strstr(err, "can match nothing") != NULL,
            "a long repetition of a nullable item (the fuzzer's 11 s input) is refused in "
            "%.0f ms: %s", t0, err);
    t0 = hy_grammar_now_ms();
    rc = hy_grammar_compile(&g, nonnull, strlen(nonnull), NULL, err);
    t0 = hy_grammar_now_ms() - t0;
    HY_T_OK(rc == HY_OK, "the same count of a non-empty item compiles in %.0f ms (%s)", t0,
            rc == HY_OK ? "ok" : err);
    hy_grammar_unref(g);
    g = NULL;
    HY_T_OK(hy_grammar_compile(&g, "root ::= x", 10, NULL, err) == HY_EFORMAT &&
                strstr(err, "rule 'x' is used but never defined") != NULL,
            "parser errors come through");
}

/* ---- a synthetic vocabulary ---------------------------------------------------- */

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

#define SYN_VOCAB 2600
static char syn_buf[SYN_VOCAB][12];
static hy_tok_str_t syn_pieces[SYN_VOCAB];
static bool syn_eog[SYN_VOCAB];

static hy_gvocab_t *synthetic_vocab(void)
{
    static const char *frags[] = {
        "{", "}", "[", "]", "\"", ":", ",", " ", "\n", "\t", "\\", "u", "0", "1", "9", "-",
        "+", ".", "e", "E", "true", "false", "null", "a", "b", "x", "(", ")", "*", "/",
        "\xc3\xa9", "\xf0\x9f\x98\x80", "\xc3", "\xa9", "\xf0\x9f", "\x98\x80", "\", \"",
        "\": ", "{\"", "\"}", "},", "],", "nu", "ll", "tr", "ue", "\\n", "\\u00", "e9", "12",
    };
    char err[HY_ERR_LEN];
    hy_gvocab_t *v = NULL;
    int32_t i = 0;

    for (; i < 256; i++) { /* every single byte */
        syn_buf[i][0] = (char)i;
        syn_pieces[i] = (hy_tok_str_t){ syn_buf[i], 1 };
    }
    for (; i < SYN_VOCAB - 8; i++) {
        size_t len = 0;
        int parts = 1 + (int)rnd(3);

        for (int k = 0; k < parts; k++) {
            const char *f = frags[rnd((uint32_t)HY_ARRAY_LEN(frags))];
            size_t fl = strlen(f);

            if (len + fl > sizeof syn_buf[i])
                break;
            memcpy(syn_buf[i] + len, f, fl);
            len += fl;
        }
        syn_pieces[i] = (hy_tok_str_t){ syn_buf[i], len };
    }
    /* duplicates of existing pieces, specials (no text) and two EOG tokens */
    for (; i < SYN_VOCAB - 4; i++)
        syn_pieces[i] = syn_pieces[300 + i % 7];
    syn_pieces[i++] = (hy_tok_str_t){ "", 0 };
    syn_pieces[i++] = (hy_tok_str_t){ "", 0 };
    syn_pieces[i] = (hy_tok_str_t){ "<eos>", 5 };
    syn_eog[i++] = true;
    syn_pieces[i] = (hy_tok_str_t){ "", 0 };
    syn_eog[i++] = true;
    if (hy_gvocab_create_pieces(&v, SYN_VOCAB, syn_pieces, syn_eog, err) != HY_OK)
        printf("# vocab: %s\n", err);
    return v;
}

/* Random walks through g; at every step the mask must equal trying every
 * token.  Returns the number of disagreeing (state, token) pairs. */
static long mask_vs_brute(hy_grammar_t *g, const hy_gvocab_t *v, int steps, int *n_states,
                          long *n_allowed)
{
    char err[HY_ERR_LEN];
    int32_t nv = hy_gvocab_n_vocab(v), nw = (nv + 63) / 64;
    uint64_t *bits = calloc((size_t)nw, sizeof *bits);
    int32_t *allowed = malloc(sizeof *allowed * (size_t)nv);
    hy_gmatch_t *m = NULL;
    long bad = 0;

    *n_states = 0;
    *n_allowed = 0;
    for (int s = 0; s < steps && bits && allowed; s++) {
        int32_t count, n_ok = 0, n_pick = 0;

        if (m == NULL && hy_gmatch_create(&m, g, NULL, err) != HY_OK)
            break;
        count = hy_gmatch_fill_mask(m, bits, true);
        for (int32_t t = 0; t < nv; t++) {
            bool in_mask = (bits[t / 64] >> (t % 64)) & 1, ok = hy_gmatch_try_token(m, t);

            bad += in_mask != ok;
            n_ok += ok;
            if (ok && !hy_gvocab_is_eog(v, t))
                allowed[n_pick++] = t;
        }
        bad += count != n_ok;
        (*n_states)++;
        *n_allowed += n_ok;
        /* the mask again from the matcher's memo must be the same */
        if (s % 5 == 0) {
            uint64_t *again = calloc((size_t)nw, sizeof *again);

            bad += again == NULL || hy_gmatch_fill_mask(m, again, true) != count ||
                   memcmp(again, bits, sizeof *bits * (size_t)nw) != 0;
            free(again);
        }
        if (n_pick == 0 || rnd(40) == 0) {
            hy_gmatch_free(m);
            m = NULL;
            continue;
        }
        if (hy_gmatch_accept_token(m, allowed[rnd((uint32_t)n_pick)], err) != HY_OK) {
            printf("# accept failed: %s\n", err);
            bad++;
        }
    }
    hy_gmatch_free(m);
    free(bits);
    free(allowed);
    return bad;
}

static void test_masks(hy_gvocab_t *v)
{
    static const struct {
        const char *name, *src;
    } grammars[] = {
        { "JSON", NULL },
        { "arithmetic", NULL },
        { "UTF-8 classes", "root ::= [^a-z\"]{0,5} \"\xc3\xa9\" [\xc3\xa0-\xc3\xbf]* \"!\"" },
        { "nullable calls", "root ::= a* b\na ::= \"x\"? | c\nc ::= \"{\" a* \"}\"\nb ::= \"\" | \"e\"+" },
        { "bounded object", "root ::= \"{\" (\"\\\"\" [a-z]{1,3} \"\\\": \" [0-9]{1,2}){0,3} \"}\"" },
    };

    for (size_t i = 0; i < HY_ARRAY_LEN(grammars); i++) {
        const char *src = grammars[i].src ? grammars[i].src : i == 0 ? k_json : k_arith;
        hy_grammar_t *g = compile(src, v);
        hy_grammar_stats_t st;
        int n_states = 0;
        long allowed = 0, bad = g ? mask_vs_brute(g, v, 160, &n_states, &allowed) : -1;

        if (g)
            hy_grammar_stats(g, &st);
        HY_T_OK(g != NULL && bad == 0 && n_states == 160,
                "%s: mask = brute force over %d tokens at %d states (%ld allowed in all, "
                "%d automaton states, %d cached, %ld disagreements)",
                grammars[i].name, hy_gvocab_n_vocab(v), n_states, allowed, g ? st.n_states : 0,
                g ? st.n_cached : 0, bad);
        hy_grammar_unref(g);
    }
}

static void test_eog_and_specials(hy_gvocab_t *v)
{
    char err[HY_ERR_LEN];
    hy_grammar_t *g = compile("root ::= \"a\" \"b\"?", v);
    hy_gmatch_t *m = NULL;
    int32_t nw = (SYN_VOCAB + 63) / 64;
    uint64_t bits[(SYN_VOCAB + 63) / 64];
    bool eog_before, eog_after, eog_off, special;

    if (g == NULL || hy_gmatch_create(&m, g, NULL, err) != HY_OK) {
        HY_T_OK(0, "matcher: %s", err);
        return;
    }
    hy_gmatch_fill_mask(m, bits, true);
    eog_before = (bits[(SYN_VOCAB - 2) / 64] >> ((SYN_VOCAB - 2) % 64)) & 1;
    special = (bits[(SYN_VOCAB - 4) / 64] >> ((SYN_VOCAB - 4) % 64)) & 1;
    hy_gmatch_accept_token(m, 'a', err);
    hy_gmatch_fill_mask(m, bits, true);
    eog_after = ((bits[(SYN_VOCAB - 2) / 64] >> ((SYN_VOCAB - 2) % 64)) & 1) &&
                ((bits[(SYN_VOCAB - 1) / 64] >> ((SYN_VOCAB - 1) % 64)) & 1);
    hy_gmatch_fill_mask(m, bits, false);
    eog_off = (bits[(SYN_VOCAB - 2) / 64] >> ((SYN_VOCAB - 2) % 64)) & 1;
    HY_T_OK(!eog_before && eog_after && !eog_off && !special,
            "EOG only where the grammar accepts (and allow_eog), special tokens never");
    HY_T_OK(hy_gmatch_accept_token(m, SYN_VOCAB - 4, err) == HY_EINVAL &&
                strstr(err, "special or empty") != NULL,
            "a special token is refused: %s", err);
    HY_T_OK(hy_gmatch_accept_token(m, 'c', err) == HY_EINVAL &&
                strstr(err, "byte 1 (0x63) is not allowed here") != NULL,
            "a wrong byte is refused with its offset: %s", err);
    HY_T_OK(hy_gmatch_accept_token(m, 'b', err) == HY_OK && hy_gmatch_done(m) &&
                hy_gmatch_fill_mask(m, bits, true) == 2,
            "after the last byte only the two EOG tokens remain");
    HY_T_OK(hy_gmatch_accept_token(m, SYN_VOCAB - 2, err) == HY_OK &&
                hy_gmatch_accept_token(m, 'a', err) == HY_EINVAL,
            "nothing after end of generation");
    (void)nw;
    hy_gmatch_free(m);
    hy_grammar_unref(g);
}

static void test_lazy(void)
{
    char err[HY_ERR_LEN];
    hy_grammar_t *g = compile("root ::= \"<call>\" \"{\" [a-z]+ \"}\"", NULL);
    hy_gmatch_opts_t o = { .n_triggers = 2, .triggers = { "<call>", "<other>" },
                           .trigger_len = { 6, 7 } };
    hy_gmatch_t *m = NULL;
    bool ok;

    if (g == NULL || hy_gmatch_create(&m, g, &o, err) != HY_OK) {
        HY_T_OK(0, "lazy matcher: %s", err);
        return;
    }
    ok = !hy_gmatch_constrained(m) && hy_gmatch_can_end(m);
    ok &= hy_gmatch_accept_bytes(m, "Hello <ca", 9, err) == HY_OK && !hy_gmatch_constrained(m);
    ok &= hy_gmatch_accept_bytes(m, "ll>{ab", 6, err) == HY_OK && hy_gmatch_constrained(m) &&
          !hy_gmatch_can_end(m);
    HY_T_OK(ok, "free text until the trigger, constrained from the trigger on (%s)", err);
    HY_T_OK(hy_gmatch_accept_bytes(m, "1", 1, err) == HY_EINVAL &&
                strstr(err, "byte 15 (0x31) is not allowed") != NULL,
            "inside the triggered part the grammar holds (%s)", err);
    ok = hy_gmatch_accept_bytes(m, "c}", 2, err) == HY_OK && !hy_gmatch_constrained(m) &&
         hy_gmatch_can_end(m);
    ok &= hy_gmatch_accept_bytes(m, " then <call>{z}", 15, err) == HY_OK &&
          !hy_gmatch_constrained(m);
    HY_T_OK(ok, "complete: free again, and the trigger re-arms (%s)", err);
    HY_T_OK(hy_gmatch_accept_bytes(m, "<other>", 7, err) == HY_EINVAL &&
                strstr(err, "does not start with trigger 1") != NULL,
            "a trigger the grammar does not start with is an error (%s)", err);
    hy_gmatch_free(m);
    hy_grammar_unref(g);
}

/* The spec a request carries, and the engine's cache of compiled grammars. */
static void test_spec_and_cache(hy_gvocab_t *v)
{
    char err[HY_ERR_LEN], *packed = NULL;
    size_t len = 0, glen = 0;
    const char *gbnf = NULL;
    hy_gmatch_opts_t o = { .n_triggers = 2, .triggers = { "<a>", "[call]" },
                           .trigger_len = { 3, 6 } }, back;
    hy_grammar_cache_t *c = NULL;
    hy_grammar_t *g1 = NULL, *g2 = NULL, *g3 = NULL, *g4 = NULL;
    hy_gmatch_t *m = NULL;
    hy_grammar_cache_stats_t st;
    bool hit1 = true, hit2 = false, hit3 = true, ok;

    ok = hy_grammar_spec_pack("root ::= \"x\"", 12, &o, &packed, &len, err) == HY_OK &&
         hy_grammar_spec_unpack(packed, len, &gbnf, &glen, &back, err) == HY_OK && glen == 12 &&
         memcmp(gbnf, "root ::= \"x\"", 12) == 0 && back.n_triggers == 2 &&
         back.trigger_len[1] == 6 && memcmp(back.triggers[1], "[call]", 6) == 0;
    HY_T_OK(ok, "spec: GBNF and triggers round-trip (%s)", err);
    HY_T_OK(packed && hy_grammar_spec_unpack(packed, len - 1, &gbnf, &glen, &back, err) ==
                              HY_EFORMAT &&
                strstr(err, "the text length does not match"),
            "spec: a truncated spec is refused (%s)", err);
    if (packed)
        packed[0] = 'X';
    HY_T_OK(packed && hy_grammar_spec_unpack(packed, len, &gbnf, &glen, &back, err) == HY_EFORMAT &&
                strstr(err, "bad header"),
            "spec: a wrong magic is refused (%s)", err);
    free(packed);

    ok = hy_grammar_cache_create(&c, v, 2, err) == HY_OK &&
         hy_grammar_cache_get(c, "root ::= \"a\"", 12, &g1, &hit1, err) == HY_OK &&
         hy_grammar_cache_get(c, "root ::= \"a\"", 12, &g2, &hit2, err) == HY_OK;
    HY_T_OK(ok && !hit1 && hit2 && g1 == g2, "cache: the same text compiles once");
    ok = ok && hy_gmatch_create(&m, g1, NULL, err) == HY_OK;
    hy_grammar_unref(g1);
    hy_grammar_unref(g2);
    /* two more grammars evict the first while a matcher still uses it */
    ok = ok && hy_grammar_cache_get(c, "root ::= \"b\"", 12, &g1, &hit1, err) == HY_OK &&
         hy_grammar_cache_get(c, "root ::= \"c\"", 12, &g2, &hit2, err) == HY_OK &&
         hy_grammar_cache_get(c, "root ::= \"a\"", 12, &g3, &hit3, err) == HY_OK;
    hy_grammar_cache_stats(c, &st);
    HY_T_OK(ok && !hit3 && st.entries == 2 && st.compiles == 4 && st.hits == 1 &&
                hy_gmatch_accept_bytes(m, "a", 1, err) == HY_OK && hy_gmatch_done(m),
            "cache: LRU eviction; a matcher keeps its evicted grammar alive (%s)", err);
    HY_T_OK(c && hy_grammar_cache_get(c, "root ::= x", 10, &g4, &hit2, err) == HY_EFORMAT &&
                g4 == NULL,
            "cache: a bad grammar is the caller's error (%s)", err);
    hy_gmatch_free(m);
    hy_grammar_unref(g1);
    hy_grammar_unref(g2);
    hy_grammar_unref(g3);
    hy_grammar_cache_free(c);
}

/* ---- the token budget ---------------------------------------------------------- */

static int32_t distance_after(hy_grammar_t *g, const char *text)
{
    char err[HY_ERR_LEN];
    hy_gmatch_t *m = NULL;
    int32_t d = -1;

    if (g != NULL && hy_gmatch_create(&m, g, NULL, err) == HY_OK &&
        hy_gmatch_accept_bytes(m, text, strlen(text), err) == HY_OK)
        d = hy_gmatch_distance(m);
    hy_gmatch_free(m);
    return d;
}

static int32_t pick(const uint64_t *bits, int32_t nv, int32_t count, bool skip_eog,
                    const hy_gvocab_t *v)
{
    int32_t k = (int32_t)rnd((uint32_t)HY_MAX(count, 1));

    for (int32_t t = 0; t < nv; t++)
        if (((bits[t / 64] >> (t % 64)) & 1) && !(skip_eog && hy_gvocab_is_eog(v, t)) &&
            k-- == 0)
            return t;
    return -1;
}

/* One budgeted walk as the engine runs it: a random allowed token (never
 * the end while more may follow, so the walks run long), drawn again among
 * the closing tokens when it does not fit.  Returns the tokens it took to
 * end, or -1 when it broke a promise (a closing set empty or with a token
 * the mask refuses or that does not fit; an end beyond the budget). */
static int budget_walk(hy_grammar_t *g, const hy_gvocab_t *v, int32_t budget, int *closings)
{
    char err[HY_ERR_LEN];
    int32_t nv = hy_gvocab_n_vocab(v), nw = (nv + 63) / 64;
    uint64_t bits[(SYN_VOCAB + 63) / 64], close[(SYN_VOCAB + 63) / 64];
    hy_gmatch_t *m = NULL;
    int used = -1;

    if (hy_gmatch_create(&m, g, NULL, err) != HY_OK || nw > (int32_t)HY_ARRAY_LEN(bits))
        goto out;
    for (int32_t n = 0; n < budget; n++) {
        int32_t left = budget - n - 1, count = hy_gmatch_fill_mask(m, bits, false), t;

        if (hy_gmatch_done(m) || (count == 0 && hy_gmatch_can_end(m))) {
            used = n;
            goto out;
        }
        t = pick(bits, nv, count, true, v);
        if (t < 0)
            goto out;
        if (!hy_gmatch_fits(m, t, left)) {
            int32_t nc = hy_gmatch_fill_closing_mask(m, close, true);

            ++*closings;
            if (nc <= 0 || (t = pick(close, nv, nc, false, v)) < 0)
                goto out;
            if (!hy_gvocab_is_eog(v, t) &&
                (!((bits[t / 64] >> (t % 64)) & 1) || !hy_gmatch_fits(m, t, left)))
                goto out;
        }
        if (hy_gvocab_is_eog(v, t)) {
            used = n;
            goto out;
        }
        if (hy_gmatch_accept_token(m, t, err) != HY_OK)
            goto out;
    }
    if (hy_gmatch_can_end(m))
        used = budget;
out:
    hy_gmatch_free(m);
    return used;
}

static void test_budget(hy_gvocab_t *v)
{
    static const char *k_obj =
        "root ::= \"{\" (\"\\\"\" [a-z]{1,3} \"\\\": \" [0-9]{1,2}){0,3} \"}\"";
    static const char *k_req =
        "root ::= \"{\\\"name\\\":\" str \",\\\"tags\\\":[\" (str (\",\" str)*)? \"]}\"\n"
        "str ::= \"\\\"\" [a-z ]* \"\\\"\"";
    static const struct {
        const char *name, *src;
    } grammars[] = {
        { "JSON", NULL }, { "arithmetic", NULL }, { "bounded object", NULL },
        { "required fields", NULL },
        { "nested", "root ::= \"<\" root* \">\" | \"x\"" },
    };
    hy_grammar_t *g = compile(k_obj, v), *r = compile(k_req, v);

    /* exact distances, by hand */
    HY_T_OK(distance_after(g, "") == 2 && distance_after(g, "{\"ab") == 5 &&
                distance_after(g, "{\"ab\": 1") == 1 && distance_after(g, "{}") == 0,
            "distance: '{}' 2 bytes away, '{\"ab' 5 ('\": 0}'), '{\"ab\": 1' 1, '{}' 0 "
            "(%d %d %d %d)", distance_after(g, ""), distance_after(g, "{\"ab"),
            distance_after(g, "{\"ab\": 1"), distance_after(g, "{}"));
    HY_T_OK(distance_after(r, "") == 21 && distance_after(r, "{\"name\":\"bob") == 12,
            "distance through rule calls: %d from the start (21: {\"name\":\"\",\"tags\":[]}), "
            "%d inside the first string (12)", distance_after(r, ""),
            distance_after(r, "{\"name\":\"bob"));
    hy_grammar_unref(g);
    hy_grammar_unref(r);

    for (size_t i = 0; i < HY_ARRAY_LEN(grammars); i++) {
        const char *src = grammars[i].src ? grammars[i].src
                          : i == 0        ? k_json
                          : i == 1        ? k_arith
                          : i == 2        ? k_obj
                                          : k_req;
        int32_t d0 = (g = compile(src, v)) ? distance_after(g, "") : -1;
        int walks = 0, broken = 0, closings = 0, longest = 0;

        for (int w = 0; g != NULL && w < 150; w++) {
            /* budgets from exactly the shortest answer to generous */
            int32_t budget = d0 + (int32_t)rnd(w < 50 ? 3 : 40);
            int used = budget_walk(g, v, budget, &closings);

            walks++;
            broken += used < 0 || used > budget;
            longest = HY_MAX(longest, used);
        }
        HY_T_OK(g != NULL && walks == 150 && broken == 0 && closings > 0,
                "budget, %s: %d random walks with %d..%d tokens each end in time (%d broken; "
                "%d draws replaced by closing tokens; longest %d tokens)",
                grammars[i].name, walks, d0, d0 + 39, broken, closings, longest);
        hy_grammar_unref(g);
    }
}

/* The vocabulary of a real tokenizer (the tiny llama golden model). */
static void test_real_vocab(void)
{
    char err[HY_ERR_LEN];
    hy_gguf_t *gg = NULL;
    hy_tok_t *tok = NULL;
    hy_gvocab_t *v = NULL;
    hy_grammar_t *g = NULL;
    int n_states = 0;
    long allowed = 0, bad = -1;

    if (hy_gguf_open(&gg, hy_t_srcpath("tests/golden/tiny/llama.gguf"), err) != HY_OK ||
        hy_tok_load(&tok, gg, err) != HY_OK || hy_gvocab_create(&v, tok, err) != HY_OK) {
        HY_T_OK(0, "tiny tokenizer: %s", err);
        goto done;
    }
    if ((g = compile(k_json, v)) != NULL)
        bad = mask_vs_brute(g, v, 60, &n_states, &allowed);
    HY_T_OK(bad == 0 && allowed > 0,
            "tiny llama vocabulary (%d tokens): JSON mask = brute force at %d states",
            hy_gvocab_n_vocab(v), n_states);
done:
    hy_grammar_unref(g);
    hy_gvocab_free(v);
    hy_tok_free(tok);
    hy_gguf_close(gg);
}

int main(void)
{
    hy_gvocab_t *v;

    test_matching();
    test_refusals();
    v = synthetic_vocab();
    HY_T_OK(v != NULL, "synthetic vocabulary of %d tokens", SYN_VOCAB);
    if (v != NULL) {
        test_masks(v);
        test_eog_and_specials(v);
        test_spec_and_cache(v);
        test_budget(v);
    }
    hy_gvocab_free(v);
    test_lazy();
    test_real_vocab();
    return hy_t_done();
}
