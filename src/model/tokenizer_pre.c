/*
 * tokenizer_pre.c - the pre-tokenizers of BPE vocabularies (tokenizer_pre.h).
 * A pre-tokenizer is a list of stages; like llama.cpp's unicode_regex_split,
 * each stage finds its pattern's successive leftmost matches in every
 * fragment left by the previous stage, and both the matches and the text
 * between them become fragments.  A fragment's end is end-of-input for the
 * matchers, so (?!\S) and $ succeed there.  The patterns are those of each
 * model's tokenizer.json as llama.cpp rewrites them for std::regex (no
 * (?i:...), lookaheads for \p{Lu}/\p{Ll}); where llama.cpp replaces a
 * pattern with a hand-written splitter we do too, with the same results,
 * and run every other pattern through tokenizer_rx.c.
 */
#include "model/tokenizer_pre.h"

#include <stdlib.h>
#include <string.h>

#include "model/unicode.h"

enum {
    L = HY_UNI_LETTER,
    N = HY_UNI_NUMBER,
    M = HY_UNI_MARK,
    P = HY_UNI_PUNCT,
    S = HY_UNI_SYMBOL,
    WS = HY_UNI_WHITESPACE,
};

/* Length of the match of a stage's regex at cp[pos], the fragment ending
 * at end; 0 for no match at pos. */
typedef size_t (*hy_tok_match_fn)(const uint32_t *cp, const uint16_t *fl,
                                  size_t pos, size_t end);

static size_t run_of(const uint16_t *fl, size_t pos, size_t end, unsigned mask)
{
    size_t q = pos;

    while (q < end && (fl[q] & mask))
        q++;
    return q - pos;
}

static bool is_crlf(uint32_t c)
{
    return c == '\r' || c == '\n';
}

static uint32_t ascii_lower(uint32_t c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive.  Only ASCII
 * letters lower-case to these, so ASCII folding is exact. */
static size_t match_contraction(const uint32_t *cp, size_t pos, size_t end, bool fold)
{
    uint32_t a, b;

    if (cp[pos] != '\'' || pos + 1 >= end)
        return 0;
    a = fold ? ascii_lower(cp[pos + 1]) : cp[pos + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if (pos + 2 >= end)
        return 0;
    b = fold ? ascii_lower(cp[pos + 2]) : cp[pos + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* \s*[\r\n]+|\s+(?!\S)|\s+ (with_crlf) or \s+(?!\S)|\s+ at pos. */
static size_t match_spaces(const uint32_t *cp, const uint16_t *fl, size_t pos,
                           size_t end, bool with_crlf)
{
    size_t k = 0, last_nl = 0;

    while (pos + k < end && (fl[pos + k] & WS)) {
        if (is_crlf(cp[pos + k]))
            last_nl = k + 1;
        k++;
    }
    if (with_crlf && last_nl > 0)
        return last_nl;
    /* \s+(?!\S): leave the last space to prefix the following word. */
    if (k > 1 && pos + k < end)
        return k - 1;
    return k;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t match_gpt2(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    size_t k = match_contraction(cp, pos, end, false);
    size_t sp = cp[pos] == ' ' ? 1 : 0;
    unsigned f2;

    if (k)
        return k;
    f2 = sp ? (pos + 1 < end ? fl[pos + 1] : 0) : fl[pos];
    if (f2 & L)
        return sp + run_of(fl, pos + sp, end, L);
    if (f2 & N)
        return sp + run_of(fl, pos + sp, end, N);
    if (f2 && !(f2 & (WS | L | N))) {
        size_t q = pos + sp;
        while (q < end && !(fl[q] & (WS | L | N)))
            q++;
        return q - pos;
    }
    return match_spaces(cp, fl, pos, end, false);
}

/*
 * The llama3 family:
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?LETTER+|\p{N}{1,max}|
 *  ?[^\s LETTER \p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * where LETTER is \p{L} (llama3, qwen2) or [\p{L}\p{M}] (qwen35) and max
 * is 3 (llama3) or 1 (qwen2, qwen35).
 */
static size_t match_llama3_family(const uint32_t *cp, const uint16_t *fl, size_t pos,
                                  size_t end, unsigned letter, size_t max_digits)
{
    size_t k = match_contraction(cp, pos, end, true);
    size_t sp;
    unsigned f2;

    if (k)
        return k;
    if (!is_crlf(cp[pos]) && !(fl[pos] & (N | L)) && pos + 1 < end && (fl[pos + 1] & letter))
        return 1 + run_of(fl, pos + 1, end, letter);
    if (fl[pos] & letter)
        return run_of(fl, pos, end, letter);
    if (fl[pos] & N)
        return HY_MIN(run_of(fl, pos, end, N), max_digits);
    sp = cp[pos] == ' ' ? 1 : 0;
    f2 = sp ? (pos + 1 < end ? fl[pos + 1] : 0) : fl[pos];
    if (f2 && !(f2 & (WS | letter | N))) {
        size_t q = pos + sp;
        while (q < end && !(fl[q] & (WS | letter | N)))
            q++;
        while (q < end && is_crlf(cp[q]))
            q++;
        return q - pos;
    }
    return match_spaces(cp, fl, pos, end, true);
}

static size_t match_llama3(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    return match_llama3_family(cp, fl, pos, end, L, 3);
}

static size_t match_qwen2(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    return match_llama3_family(cp, fl, pos, end, L, 1);
}

static size_t match_qwen35(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    return match_llama3_family(cp, fl, pos, end, L | M, 1);
}

/* [\p{Han}]+ | letters (no Han) with an optional lead and contraction |
 * \p{N}{1,3} |  ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 * (Kimi K2's pattern; \p{Han} as llama.cpp's unicode_cpt_is_han). */
static bool is_han(uint32_t c)
{
    static const uint32_t r[][2] = {{0x4E00, 0x9FFF},   {0x3400, 0x4DBF},   {0x20000, 0x2A6DF},
                                    {0x2A700, 0x2B73F}, {0x2B740, 0x2B81F}, {0x2B820, 0x2CEAF},
                                    {0x2CEB0, 0x2EBEF}, {0xF900, 0xFAFF},   {0x2F800, 0x2FA1F}};

    for (size_t i = 0; i < HY_ARRAY_LEN(r); i++) {
        if (c >= r[i][0] && c <= r[i][1])
            return true;
    }
    return false;
}

static bool kimi_letter(const uint32_t *cp, const uint16_t *fl, size_t q, size_t end)
{
    return q < end && (fl[q] & L) && !is_han(cp[q]);
}

static size_t match_kimi_k2(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    size_t q = pos;
    bool lead = !is_crlf(cp[pos]) && !(fl[pos] & (L | N));

    if (is_han(cp[pos])) {
        while (q < end && is_han(cp[q]))
            q++;
        return q - pos;
    }
    if (kimi_letter(cp, fl, pos, end) || (lead && kimi_letter(cp, fl, pos + 1, end))) {
        q += lead;
        while (kimi_letter(cp, fl, q, end))
            q++;
        return q - pos + match_contraction(cp, q, end, true);
    }
    if (fl[pos] & N)
        return HY_MIN(run_of(fl, pos, end, N), (size_t)3);
    if (cp[pos] == ' ')
        q++;
    if (q < end && !(fl[q] & (WS | L | N))) {
        while (q < end && !(fl[q] & (WS | L | N)))
            q++;
        while (q < end && is_crlf(cp[q]))
            q++;
        return q - pos;
    }
    return match_spaces(cp, fl, pos, end, true);
}

/* [^\n]+|[\n]+ */
static size_t match_newlines(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    size_t q = pos;
    bool nl = cp[pos] == '\n';

    (void)fl;
    while (q < end && (cp[q] == '\n') == nl)
        q++;
    return q - pos;
}

static int ends_push(hy_tok_ends_t *e, size_t v)
{
    if (hy_tok_grow((void **)&e->v, &e->cap, e->n + 1, sizeof *e->v))
        return HY_ENOMEM;
    e->v[e->n++] = v;
    return HY_OK;
}

/* Stage kinds: llama.cpp's hand-written splitters, and regexes. */
typedef enum {
    ST_REGEX,
    ST_GPT2,
    ST_LLAMA3,
    ST_QWEN2,
    ST_QWEN35,
    ST_KIMI_K2,
    ST_NEWLINES,
    ST_DIGITS_MOD3,
} hy_tok_stage_kind_t;

typedef struct {
    hy_tok_stage_kind_t kind;
    hy_tok_rx_t *rx; /* ST_REGEX */
} hy_tok_stage_t;

#define HY_TOK_MAX_STAGES 6

struct hy_tok_pre {
    hy_tok_stage_t stage[HY_TOK_MAX_STAGES];
    size_t n_stages;
};

/*
 * Digit runs split into groups of three counted from the right
 * (1234567 -> 1|234|567).  As in llama.cpp's AFMoE splitter, the text
 * before a run is not cut off from the run's first group: it becomes one
 * fragment with it, and later stages split it again.
 */
static int digits_mod3(const uint16_t *fl, size_t start, size_t end, hy_tok_ends_t *out)
{
    size_t pos = start, prev = start;

    while (pos < end) {
        size_t run, cut;
        if (!(fl[pos] & N)) {
            pos++;
            continue;
        }
        run = run_of(fl, pos, end, N);
        cut = pos + run % 3;
        if (cut > prev) {
            if (ends_push(out, cut))
                return HY_ENOMEM;
            prev = cut;
        }
        for (; cut < pos + run; cut += 3) {
            if (ends_push(out, cut + 3))
                return HY_ENOMEM;
            prev = cut + 3;
        }
        pos += run;
    }
    if (prev < end && ends_push(out, end))
        return HY_ENOMEM;
    return HY_OK;
}

/*
 * A regex stage on one fragment, as std::regex_iterator walks it: the
 * leftmost match from the current position; after an empty match, a
 * non-empty match at the same place, else the search moves on one code
 * point.  Empty matches only cut (an empty word tokenizes to nothing).
 */
static int regex_fragment(const hy_tok_rx_t *rx, const uint32_t *cp, const uint16_t *fl,
                          size_t start, size_t end, hy_tok_ends_t *out, hy_tok_rx_work_t *w)
{
    size_t p = start, q = start, len = 0;
    bool after_empty = false;

    while (q <= end) {
        int r = 0;
        if (after_empty) {
            r = hy_tok_rx_match(rx, cp, fl, q, end, true, &len, w);
            if (r == 0)
                q++;
        }
        for (; r == 0 && q <= end; q += r == 0) {
            r = hy_tok_rx_match(rx, cp, fl, q, end, false, &len, w);
            if (r < 0)
                return r;
        }
        if (r < 0)
            return r;
        if (r == 0)
            break;
        if (q > p && ends_push(out, q))
            return HY_ENOMEM;
        if (len > 0 && ends_push(out, q + len))
            return HY_ENOMEM;
        p = q + len;
        after_empty = len == 0;
        if (after_empty && q == end)
            break;
        q += len;
    }
    if (p < end && ends_push(out, end))
        return HY_ENOMEM;
    return HY_OK;
}

typedef size_t (*hy_tok_match_fn)(const uint32_t *cp, const uint16_t *fl, size_t pos,
                                  size_t end);

/* A hand-written splitter on one fragment; it matches at every position
 * (what none of its alternatives takes becomes a one-character word). */
static int matcher_fragment(hy_tok_match_fn fn, const uint32_t *cp, const uint16_t *fl,
                            size_t start, size_t end, hy_tok_ends_t *out)
{
    size_t q = start;

    while (q < end) {
        size_t k = fn(cp, fl, q, end);
        q += k ? k : 1;
        if (ends_push(out, q))
            return HY_ENOMEM;
    }
    return HY_OK;
}

static int apply_stage(const hy_tok_stage_t *st, const uint32_t *cp, const uint16_t *fl,
                       const hy_tok_ends_t *in, hy_tok_ends_t *out, hy_tok_rx_work_t *w)
{
    static const hy_tok_match_fn fns[] = {
        [ST_GPT2] = match_gpt2,         [ST_LLAMA3] = match_llama3, [ST_QWEN2] = match_qwen2,
        [ST_QWEN35] = match_qwen35,     [ST_KIMI_K2] = match_kimi_k2,
        [ST_NEWLINES] = match_newlines,
    };
    size_t start = 0;
    int rc = HY_OK;

    out->n = 0;
    for (size_t f = 0; f < in->n && rc == HY_OK; f++) {
        size_t end = in->v[f];
        if (st->kind == ST_REGEX)
            rc = regex_fragment(st->rx, cp, fl, start, end, out, w);
        else if (st->kind == ST_DIGITS_MOD3)
            rc = digits_mod3(fl, start, end, out);
        else
            rc = matcher_fragment(fns[st->kind], cp, fl, start, end, out);
        start = end;
    }
    return rc;
}

int hy_tok_pre_split(const hy_tok_pre_t *pre, const uint32_t *cps, const uint16_t *flags,
                     size_t n, hy_tok_ends_t *ends, hy_tok_rx_work_t *w)
{
    hy_tok_ends_t tmp = {0};
    int rc = HY_OK;

    ends->n = 0;
    if (n == 0)
        return HY_OK;
    if (ends_push(ends, n))
        return HY_ENOMEM;
    for (size_t s = 0; s < pre->n_stages; s++) {
        hy_tok_ends_t t;
        rc = apply_stage(&pre->stage[s], cps, flags, ends, &tmp, w);
        if (rc)
            break;
        t = *ends;
        *ends = tmp;
        tmp = t;
    }
    free(tmp.v);
    return rc;
}

/* ---- the pre-tokenizers ----------------------------------------------- */

/* Patterns llama.cpp answers with a hand-written splitter instead of
 * std::regex; matched by their exact text, as there. */
#define RX_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RX_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RX_LLAMA3                                                                              \
    RX_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_QWEN2                                                                            \
    RX_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_QWEN35                                                                         \
    RX_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+" \
                    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_HAN "\\p{Han}+"
#define RX_AFMOE_DIGITS "\\p{AFMoE_digits}"
#define RX_DIGITS_RIGHT3 "\\d{1,3}(?=(?:\\d{3})*\\b)"
#define RX_NEWLINES "[^\\n]+|[\\n]+"

static const struct {
    const char *rx;
    hy_tok_stage_kind_t kind;
} hand_written[] = {
    {RX_GPT2, ST_GPT2},         {RX_LLAMA3, ST_LLAMA3},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
     "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", ST_LLAMA3},
    {RX_QWEN2, ST_QWEN2},       {RX_QWEN35, ST_QWEN35},
    {RX_HAN, ST_KIMI_K2},       {RX_AFMOE_DIGITS, ST_DIGITS_MOD3},
    {RX_DIGITS_RIGHT3, ST_DIGITS_MOD3}, {RX_NEWLINES, ST_NEWLINES},
};

/* Upper/lower-case letter runs as std::regex sees them (any letter is
 * both when it is not ASCII): GPT-4o, Tekken and their relatives. */
#define RX_UPPER_LOWER(LM, TAIL)                                                        \
    "[^\\r\\n\\p{L}\\p{N}]?((?=[" LM "])([^a-z]))*((?=[" LM "])([^A-Z]))+" TAIL       \
    "|[^\\r\\n\\p{L}\\p{N}]?((?=[" LM "])([^a-z]))+((?=[" LM "])([^A-Z]))*" TAIL
#define RX_CASED_WORDS                                                                     \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" \
    RX_CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"             \
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" RX_CONTRACTIONS "?"
#define RX_TAIL_SLASH "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_NO_POPEN "[^(\\s|.,!?\xe2\x80\xa6\xe3\x80\x82\xef\xbc\x8c\xe3\x80\x81\xe0\xa5\xa4\xdb\x94\xd8\x8c)]"

/* One pre-tokenizer family: its stages (regex texts, hand-written ones
 * by the texts above) and how its words become symbols. */
typedef struct {
    const char *stages[HY_TOK_MAX_STAGES];
    bool raw_utf8, escape_spaces, newline_words, force_bos;
} hy_tok_pre_type_t;

enum {
    T_DEFAULT, T_LLAMA3, T_JAIS2, T_DEEPSEEK_LLM, T_DEEPSEEK3, T_YOUTU, T_DEEPSEEK_CODER,
    T_FALCON, T_STARCODER, T_GPT2, T_QWEN2, T_QWEN35, T_PORO, T_VIKING, T_TEKKEN,
    T_CHAMELEON, T_GPT4O, T_GRANITE_EMB_MULTI, T_TINY_AYA, T_KIMI_K2, T_SUPERBPE,
    T_BAILINGMOE, T_SEED_CODER, T_AFMOE, T_LAGUNA, T_EXAONE_MOE, T_GEMMA4, T_SARVAM,
    T_MINICPM5, T_WHITESPACE, T_COUNT
};

static const hy_tok_pre_type_t pre_types[T_COUNT] = {
    [T_DEFAULT] = {{"[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    [T_LLAMA3] = {{RX_LLAMA3}},
    [T_JAIS2] = {{RX_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
                  "[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|"
                  "\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|"
                  "\\s{1,2}(?!\\S)|\\s{1}"}},
    [T_DEEPSEEK_LLM] = {{"[\r\n]",
                         "\\s?[A-Za-z\xc2\xb5\xc3\x80-\xc3\x96\xc3\x98-\xc3\xb6\xc3\xb8-\xc6\xba"
                         "\xc6\xbc-\xc6\xbf\xc7\x84-\xca\x93\xca\x95-\xca\xaf\xcd\xb0-\xcd\xb3"
                         "\xcd\xb6\xcd\xb7\xcd\xbb-\xcd\xbd\xcd\xbf\xce\x86\xce\x88-\xce\x8a\xce\x8c"
                         "\xce\x8e-\xce\xa1\xce\xa3-\xcf\xb5\xcf\xb7-\xd2\x81\xd2\x8a-\xd4\xaf"
                         "\xd4\xb1-\xd5\x96\xe1\x82\xa0-\xe1\x83\x85\xe1\x8e\xa0-\xe1\x8f\xb5"
                         "\xe1\x8f\xb8-\xe1\x8f\xbd\xe1\xb2\x90-\xe1\xb2\xba\xe1\xb2\xbd-\xe1\xb2\xbf"
                         "\xe1\xb4\x80-\xe1\xb4\xab\xe1\xb5\xab-\xe1\xb5\xb7\xe1\xb5\xb9-\xe1\xb6\x9a"
                         "\xe1\xb8\x80-\xe1\xbc\x95\xe1\xbc\x98-\xe1\xbc\x9d\xe1\xbc\xa0-\xe1\xbd\x85"
                         "\xe1\xbd\x88-\xe1\xbd\x8d\xe1\xbd\x90-\xe1\xbd\x97\xe1\xbd\x99\xe1\xbd\x9b"
                         "\xe1\xbd\x9d\xe1\xbd\x9f-\xe1\xbd\xbd\xe1\xbe\x80-\xe1\xbe\xb4"
                         "\xe1\xbe\xb6-\xe1\xbe\xbc\xe1\xbe\xbe\xe1\xbf\x82-\xe1\xbf\x84"
                         "\xe1\xbf\x86-\xe1\xbf\x8c\xe1\xbf\x90-\xe1\xbf\x93\xe1\xbf\x96-\xe1\xbf\x9b"
                         "\xe1\xbf\xa0-\xe1\xbf\xac\xe1\xbf\xb2-\xe1\xbf\xb4\xe1\xbf\xb6-\xe1\xbf\xbc"
                         "\xe2\x84\x82\xe2\x84\x87\xe2\x84\x8a-\xe2\x84\x93\xe2\x84\x95"
                         "\xe2\x84\x99-\xe2\x84\x9d\xe2\x84\xa4\xe2\x84\xa6\xe2\x84\xa8"
                         "\xe2\x84\xaa-\xe2\x84\xad\xe2\x84\xaf-\xe2\x84\xb4\xe2\x84\xb9"
                         "\xe2\x84\xbc-\xe2\x84\xbf\xe2\x85\x85-\xe2\x85\x89\xe2\x85\x8e"
                         "\xe2\x86\x83\xe2\x86\x84\xe2\xb0\x80-\xe2\xb1\xbb\xe2\xb1\xbe-\xe2\xb3\xa4"
                         "\xe2\xb3\xab-\xe2\xb3\xae\xe2\xb3\xb2\xe2\xb3\xb3\xea\x99\x80-\xea\x99\xad"
                         "\xea\x9a\x80-\xea\x9a\x9b\xea\x9c\xa2-\xea\x9d\xaf\xea\x9d\xb1-\xea\x9e\x87"
                         "\xea\x9e\x8b-\xea\x9e\x8e\xea\xad\xb0-\xea\xae\xbf\xef\xac\x80-\xef\xac\x86"
                         "\xef\xac\x93-\xef\xac\x97\xef\xbc\xa1-\xef\xbc\xba\xef\xbd\x81-\xef\xbd\x9a"
                         "\xf0\x90\x90\x80-\xf0\x90\x91\x8f\xf0\x90\x92\xb0-\xf0\x90\x93\x93"
                         "\xf0\x90\x93\x98-\xf0\x90\x93\xbb\xf0\x90\xb2\x80-\xf0\x90\xb2\xb2"
                         "\xf0\x90\xb3\x80-\xf0\x90\xb3\xb2\xf0\x91\xa2\xa0-\xf0\x91\xa3\x9f"
                         "\xf0\x9e\xa4\x80-\xf0\x9e\xa5\x83]+",
                         "\\s?[!-/:-~\xef\xbc\x81-\xef\xbc\x8f\xef\xbc\x9a-\xef\xbd\x9e"
                         "\xe2\x80\x98-\xe2\x80\x9f\xe3\x80\x80-\xe3\x80\x82]+",
                         "\\s+$", "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+",
                         "\\p{N}+"}},
    [T_DEEPSEEK3] = {{"\\p{N}{1,3}", "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+",
                      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
                      "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}},
    [T_YOUTU] = {{"[\xea\xb0\x80-\xed\x9e\xa3\xe3\x84\xb1-\xe3\x86\x8e]+|[\xef\xbc\x81\xe2\x80\xa6"
                  "\xe2\x80\x9c\xe2\x80\x9d\xe2\x80\x98\xe2\x80\x99\xe2\x80\x94\xef\xbc\x9a\xef\xbc\x9b"
                  "\xef\xbc\x8c\xe3\x80\x81-\xe3\x80\xbf\xef\xb8\xb0-\xef\xb9\x8f]+|[\xe3\x84\x85-\xe3\x84\xaf]+|"
                  "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+",
                  RX_CASED_WORDS "|\\p{N}" RX_TAIL_SLASH}},
    [T_DEEPSEEK_CODER] = {{"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
                           "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+",
                           "\\p{N}"}},
    [T_FALCON] = {{"[\\p{P}\\$\\+<=>\\^~\\|`]+", RX_GPT2, "[0-9][0-9][0-9]"}},
    [T_STARCODER] = {{"\\p{N}", RX_GPT2}},
    [T_GPT2] = {{RX_GPT2}},
    [T_QWEN2] = {{RX_QWEN2}},
    [T_QWEN35] = {{RX_QWEN35}},
    [T_PORO] = {{" ?" RX_NO_POPEN "+"}},
    [T_VIKING] = {{" ?" RX_NO_POPEN "+", "\\p{N}"}},
    [T_TEKKEN] = {{RX_UPPER_LOWER("\\p{L}", "") "|\\p{N}" RX_TAIL_SLASH}},
    [T_CHAMELEON] = {{"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                      "([\\t\\n]|    |  )", "\\p{N}", "[\\p{P}!-/:-@\\[-`{-~]", RX_GPT2}},
    [T_GPT4O] = {{RX_UPPER_LOWER("\\p{L}", RX_CONTRACTIONS "?") "|\\p{N}{1,3}" RX_TAIL_SLASH}},
    [T_GRANITE_EMB_MULTI] = {{RX_UPPER_LOWER("\\p{L}\\p{M}", RX_CONTRACTIONS "?")
                              "|\\p{N}{1,3}" RX_TAIL_SLASH}},
    [T_TINY_AYA] = {{RX_DIGITS_RIGHT3, RX_CASED_WORDS "|\\p{N}{1,3}" RX_TAIL_SLASH}},
    [T_KIMI_K2] = {{RX_HAN}},
    [T_SUPERBPE] = {{"\\p{N}+", "(?=(\\d{3})+(?!\\d))"}},
    [T_BAILINGMOE] = {{"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                       "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"}},
    [T_SEED_CODER] = {{RX_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|"
                       "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    [T_AFMOE] = {{RX_AFMOE_DIGITS,
                  "[\xe4\xb8\x80-\xe9\xbf\xbf\xe3\x90\x80-\xe4\xb6\xbf\xe8\xb1\x88-\xef\xab\xbf"
                  "\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf\xef\xbd\xa5-\xef\xbe\x9f"
                  "\xe2\xbc\x80-\xe2\xbf\x9f\xe0\xb9\x80-\xe0\xb9\xbf\xe0\xba\x80-\xe0\xbb\xbf"
                  "\xe1\x9e\x80-\xe1\x9f\xbf\xe1\x80\x80-\xe1\x82\x9f\xea\xa9\xa0-\xea\xa9\xbf"
                  "\xea\xa7\xa0-\xea\xa7\xbf\xea\xb0\x80-\xed\x9e\xaf\xe1\x84\x80-\xe1\x87\xbf]+",
                  "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"
                  "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    [T_LAGUNA] = {{RX_NEWLINES, RX_QWEN2}},
    [T_EXAONE_MOE] = {{RX_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|"
                       "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"}},
    /* SentencePiece-style BPE: spaces as U+2581, merges over whole lines. */
    [T_GEMMA4] = {{RX_NEWLINES}, true, true, true, true},
    [T_SARVAM] = {{RX_NEWLINES}, true, true, false, false},
    [T_MINICPM5] = {{"\\p{N}{1,3}", RX_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+|"
                     " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    [T_WHITESPACE] = {{"\\S+"}, true, false, false, false},
};

enum { F_IGNORE_MERGES = 1, F_ADD_BOS = 2 };

/* tokenizer.ggml.pre values, as llama.cpp's vocabulary loader maps them. */
static const struct {
    const char *name;
    uint8_t type, flags;
} pre_names[] = {
    {"default", T_DEFAULT, 0},
    {"llama3", T_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"llama-v3", T_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"llama-bpe", T_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"falcon3", T_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"falcon-h1", T_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"pixtral", T_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"midm-2.0", T_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"lfm2", T_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"jina-v5-nano", T_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"dbrx", T_LLAMA3, 0},
    {"smaug-bpe", T_LLAMA3, 0},
    {"glm4", T_LLAMA3, 0},
    {"chatglm-bpe", T_LLAMA3, 0},
    {"jais-2", T_JAIS2, 0},
    {"minicpm5", T_MINICPM5, F_IGNORE_MERGES},
    {"deepseek-llm", T_DEEPSEEK_LLM, 0},
    {"deepseek-coder", T_DEEPSEEK_CODER, 0},
    {"deepseek-v3", T_DEEPSEEK3, 0},
    {"hunyuan-dense", T_DEEPSEEK3, 0},
    {"joyai-llm", T_DEEPSEEK3, 0},
    {"youtu", T_YOUTU, F_IGNORE_MERGES},
    {"falcon", T_FALCON, 0},
    {"mpt", T_GPT2, 0},
    {"gpt-2", T_GPT2, 0},
    {"phi-2", T_GPT2, 0},
    {"jina-es", T_GPT2, 0},
    {"jina-de", T_GPT2, 0},
    {"gigachat", T_GPT2, 0},
    {"jina-v2-es", T_GPT2, 0},
    {"jina-v2-de", T_GPT2, 0},
    {"a.x-4.0", T_GPT2, 0},
    {"mellum", T_GPT2, 0},
    {"modern-bert", T_GPT2, 0},
    {"jina-v1-en", T_GPT2, 0},
    {"jina-v2-code", T_GPT2, 0},
    {"roberta-bpe", T_GPT2, 0},
    {"olmo", T_GPT2, 0},
    {"jais", T_GPT2, 0},
    {"exaone4", T_GPT2, 0},
    {"trillion", T_GPT2, 0},
    {"granite-docling", T_GPT2, 0},
    {"starcoder", T_STARCODER, 0},
    {"refact", T_STARCODER, 0},
    {"command-r", T_STARCODER, 0},
    {"smollm", T_STARCODER, 0},
    {"codeshell", T_STARCODER, 0},
    {"exaone", T_STARCODER, 0},
    {"minerva-7b", T_STARCODER, 0},
    {"mellum2", T_STARCODER, 0},
    {"qwen2", T_QWEN2, 0},
    {"deepseek-r1-qwen", T_QWEN2, 0},
    {"kormo", T_QWEN2, 0},
    {"f2llmv2", T_QWEN2, 0},
    {"megrez", T_QWEN2, 0},
    {"stablelm2", T_QWEN2, 0},
    {"hunyuan", T_QWEN2, 0},
    {"solar-open", T_QWEN2, 0},
    {"grok-2", T_QWEN2, 0},
    {"qwen35", T_QWEN35, 0},
    {"poro-chat", T_PORO, 0},
    {"bloom", T_PORO, 0},
    {"gpt3-finnish", T_PORO, 0},
    {"viking", T_VIKING, 0},
    {"tekken", T_TEKKEN, F_IGNORE_MERGES | F_ADD_BOS},
    {"chameleon", T_CHAMELEON, F_ADD_BOS},
    {"gpt-4o", T_GPT4O, 0},
    {"llama4", T_GPT4O, 0},
    {"kanana2", T_GPT4O, 0},
    {"talkie", T_GPT4O, 0},
    {"minimax-m2", T_GPT4O, 0},
    {"granite-embed-multi-97m", T_GRANITE_EMB_MULTI, F_IGNORE_MERGES},
    {"tiny_aya", T_TINY_AYA, 0},
    {"cohere2moe", T_TINY_AYA, 0},
    {"kimi-k2", T_KIMI_K2, 0},
    {"superbpe", T_SUPERBPE, 0},
    {"bailingmoe", T_BAILINGMOE, 0},
    {"bailingmoe2", T_BAILINGMOE, 0},
    {"llada-moe", T_BAILINGMOE, 0},
    {"seed-coder", T_SEED_CODER, 0},
    {"afmoe", T_AFMOE, 0},
    {"laguna", T_LAGUNA, 0},
    {"exaone-moe", T_EXAONE_MOE, 0},
    {"gemma4", T_GEMMA4, 0},
    {"granite-embed-multi-311m", T_GEMMA4, 0},
    {"sarvam-moe", T_SARVAM, 0},
    {"whitespace", T_WHITESPACE, 0},
};

const char *const *hy_tok_pre_names(void)
{
    static const char *names[HY_ARRAY_LEN(pre_names) + 1];
    static int ready;

    /* Benign race: every thread writes the same pointers. */
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        for (size_t i = 0; i < HY_ARRAY_LEN(pre_names); i++)
            names[i] = pre_names[i].name;
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    return names;
}

void hy_tok_pre_free(hy_tok_pre_t *pre)
{
    if (!pre)
        return;
    for (size_t i = 0; i < pre->n_stages; i++)
        hy_tok_rx_free(pre->stage[i].rx);
    free(pre);
}

int hy_tok_pre_new(hy_tok_pre_t **out, const char *name, hy_tok_pre_flags_t *flags, char *err)
{
    const hy_tok_pre_type_t *ty = NULL;
    hy_tok_pre_t *pre;
    uint8_t f = 0;
    int rc = HY_OK;

    *out = NULL;
    if (!name || !*name)
        name = "default";
    for (size_t i = 0; i < HY_ARRAY_LEN(pre_names) && !ty; i++) {
        if (strcmp(pre_names[i].name, name) == 0) {
            ty = &pre_types[pre_names[i].type];
            f = pre_names[i].flags;
        }
    }
    if (!ty)
        return hy_err(err, HY_ENOENT, "tokenizer.ggml.pre = \"%s\": unknown pre-tokenizer", name);
    pre = calloc(1, sizeof *pre);
    if (!pre)
        return hy_err(err, HY_ENOMEM, "tokenizer: out of memory");
    for (size_t s = 0; s < HY_TOK_MAX_STAGES && ty->stages[s] && rc == HY_OK; s++) {
        hy_tok_stage_t *st = &pre->stage[pre->n_stages++];
        st->kind = ST_REGEX;
        for (size_t h = 0; h < HY_ARRAY_LEN(hand_written); h++) {
            if (strcmp(hand_written[h].rx, ty->stages[s]) == 0)
                st->kind = hand_written[h].kind;
        }
        if (st->kind == ST_REGEX)
            rc = hy_tok_rx_compile(&st->rx, ty->stages[s], err);
    }
    if (rc != HY_OK) {
        hy_tok_pre_free(pre);
        return rc;
    }
    flags->ignore_merges = f & F_IGNORE_MERGES;
    flags->add_bos = (f & F_ADD_BOS) ? 1 : -1;
    flags->force_bos = ty->force_bos;
    flags->raw_utf8 = ty->raw_utf8;
    flags->escape_spaces = ty->escape_spaces;
    flags->newline_words = ty->newline_words;
    *out = pre;
    return HY_OK;
}
