/*
 * tokenizer_pre.c - the pre-tokenizer regexes of byte-level BPE models as
 * hand-written matchers.  A pre-tokenizer is a list of stages; like
 * llama.cpp's unicode_regex_split, each stage finds its regex's successive
 * leftmost matches in every fragment left by the previous stage, and both
 * the matches and the text between them become fragments.  A fragment's
 * end is end-of-input for the matchers, so (?!\S) and $ succeed there.
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

/* \p{N} */
static size_t match_digit(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    return (fl[pos] & N) ? 1 : 0;
}

/* \p{N}+ */
static size_t match_digits(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    return run_of(fl, pos, end, N);
}

/* \p{N}{1,3} */
static size_t match_digits3(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    return HY_MIN(run_of(fl, pos, end, N), (size_t)3);
}

/* [0-9][0-9][0-9] */
static size_t match_ascii3(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    for (size_t i = 0; i < 3; i++) {
        if (pos + i >= end || cp[pos + i] < '0' || cp[pos + i] > '9')
            return 0;
    }
    return 3;
}

static size_t run_punct(const uint32_t *cp, const uint16_t *fl, size_t pos,
                        size_t end, const char *extra)
{
    size_t q = pos;

    while (q < end && ((fl[q] & P) || (cp[q] < 128 && cp[q] && strchr(extra, (int)cp[q]))))
        q++;
    return q - pos;
}

/* [\p{P}\$\+<=>\^~\|]+ */
static size_t match_default_punct(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    return run_punct(cp, fl, pos, end, "$+<=>^~|");
}

/* [\p{P}\$\+<=>\^~\|`]+ */
static size_t match_falcon_punct(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    return run_punct(cp, fl, pos, end, "$+<=>^~|`");
}

static bool in_ranges(uint32_t c, const uint32_t (*r)[2], size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (c >= r[i][0] && c <= r[i][1])
            return true;
    }
    return false;
}

static size_t run_ranges(const uint32_t *cp, size_t pos, size_t end,
                         const uint32_t (*r)[2], size_t n)
{
    size_t q = pos;

    while (q < end && in_ranges(cp[q], r, n))
        q++;
    return q - pos;
}

/* [一-龥぀-ゟ゠-ヿ]+ */
static size_t match_ds3_cjk(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    static const uint32_t r[][2] = {{0x4E00, 0x9FA5}, {0x3040, 0x309F}, {0x30A0, 0x30FF}};
    return run_ranges(cp, pos, end, r, HY_ARRAY_LEN(r));
}

static bool ascii_punct(uint32_t c)
{
    return c < 128 && c > ' ' && c != 127 && !(c >= '0' && c <= '9') &&
           !((c | 32) >= 'a' && (c | 32) <= 'z');
}

/* [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|
 * [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t match_ds3_main(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    size_t sp, k;
    unsigned f2;

    if (ascii_punct(cp[pos]) && pos + 1 < end && cp[pos + 1] < 128 &&
        ((cp[pos + 1] | 32) >= 'a' && (cp[pos + 1] | 32) <= 'z')) {
        size_t q = pos + 1;
        while (q < end && cp[q] < 128 && (cp[q] | 32) >= 'a' && (cp[q] | 32) <= 'z')
            q++;
        return q - pos;
    }
    if (!is_crlf(cp[pos]) && !(fl[pos] & (L | P | S | M)) && pos + 1 < end &&
        (fl[pos + 1] & (L | M)))
        return 1 + run_of(fl, pos + 1, end, L | M);
    if (fl[pos] & (L | M))
        return run_of(fl, pos, end, L | M);
    sp = cp[pos] == ' ' ? 1 : 0;
    f2 = sp ? (pos + 1 < end ? fl[pos + 1] : 0) : fl[pos];
    if (f2 & (P | S)) {
        size_t q = pos + sp + run_of(fl, pos + sp, end, P | S);
        while (q < end && is_crlf(cp[q]))
            q++;
        return q - pos;
    }
    k = match_spaces(cp, fl, pos, end, true);
    return k;
}

/* deepseek-llm's literal classes, copied from its tokenizer.json. */
static const char ds_letters[] =
    "A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃";
static const char ds_punct[] = "!-/:-~！-／：-～‘-‟　-。";

/* Parsed once (lazily) from the class strings above. */
typedef struct {
    uint32_t r[160][2];
    size_t n;
} hy_tok_class_t;

static void parse_class(const char *s, hy_tok_class_t *c)
{
    size_t len = strlen(s), pos = 0;

    c->n = 0;
    while (pos < len && c->n < HY_ARRAY_LEN(c->r)) {
        uint32_t lo = hy_uni_decode_lenient(s, len, &pos), hi = lo;
        if (pos + 1 < len && s[pos] == '-') {
            pos++;
            hi = hy_uni_decode_lenient(s, len, &pos);
        }
        c->r[c->n][0] = lo;
        c->r[c->n][1] = hi;
        c->n++;
    }
}

static const hy_tok_class_t *ds_class(int which)
{
    static hy_tok_class_t cls[2];
    static int ready;

    /* Benign race: identical results from every thread. */
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        hy_tok_class_t tmp[2];
        parse_class(ds_letters, &tmp[0]);
        parse_class(ds_punct, &tmp[1]);
        memcpy(cls, tmp, sizeof tmp);
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    return &cls[which];
}

/* \s?[class]+ */
static size_t match_ds_class(const uint32_t *cp, const uint16_t *fl, size_t pos,
                             size_t end, int which)
{
    const hy_tok_class_t *c = ds_class(which);
    size_t sp = 0, k;

    if ((fl[pos] & WS) && pos + 1 < end && in_ranges(cp[pos + 1], c->r, c->n))
        sp = 1;
    k = run_ranges(cp, pos + sp, end, c->r, c->n);
    return k ? sp + k : 0;
}

static size_t match_ds_letters(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    return match_ds_class(cp, fl, pos, end, 0);
}

static size_t match_ds_punct(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    return match_ds_class(cp, fl, pos, end, 1);
}

/* [\r\n] */
static size_t match_crlf(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    return is_crlf(cp[pos]) ? 1 : 0;
}

/* \s+$ */
static size_t match_trailing_space(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    size_t k = run_of(fl, pos, end, WS);
    return pos + k == end ? k : 0;
}

/* [一-龥ࠀ-一가-퟿]+ */
static size_t match_ds_cjk(const uint32_t *cp, const uint16_t *fl, size_t pos, size_t end)
{
    static const uint32_t r[][2] = {{0x4E00, 0x9FA5}, {0x0800, 0x4E00}, {0xAC00, 0xD7FF}};
    return run_ranges(cp, pos, end, r, HY_ARRAY_LEN(r));
}

typedef struct {
    const char *name;
    hy_tok_pre_t pre;
    bool ignore_merges;
    int add_bos;
} hy_tok_pre_name_t;

/* tokenizer.ggml.pre values, as llama_vocab::load() maps them. */
static const hy_tok_pre_name_t pre_names[] = {
    {"default", HY_TOK_PRE_DEFAULT, false, -1},
    {"llama3", HY_TOK_PRE_LLAMA3, true, 1},
    {"llama-v3", HY_TOK_PRE_LLAMA3, true, 1},
    {"llama-bpe", HY_TOK_PRE_LLAMA3, true, 1},
    {"falcon3", HY_TOK_PRE_LLAMA3, true, 1},
    {"falcon-h1", HY_TOK_PRE_LLAMA3, true, 1},
    {"pixtral", HY_TOK_PRE_LLAMA3, true, 1},
    {"midm-2.0", HY_TOK_PRE_LLAMA3, true, 1},
    {"lfm2", HY_TOK_PRE_LLAMA3, true, 1},
    {"dbrx", HY_TOK_PRE_LLAMA3, false, -1},
    {"smaug-bpe", HY_TOK_PRE_LLAMA3, false, -1},
    {"glm4", HY_TOK_PRE_LLAMA3, false, -1},
    {"chatglm-bpe", HY_TOK_PRE_LLAMA3, false, -1},
    {"deepseek-llm", HY_TOK_PRE_DEEPSEEK_LLM, false, -1},
    {"deepseek-v3", HY_TOK_PRE_DEEPSEEK3, false, -1},
    {"hunyuan-dense", HY_TOK_PRE_DEEPSEEK3, false, -1},
    {"joyai-llm", HY_TOK_PRE_DEEPSEEK3, false, -1},
    {"falcon", HY_TOK_PRE_FALCON, false, -1},
    {"mpt", HY_TOK_PRE_GPT2, false, -1},
    {"gpt-2", HY_TOK_PRE_GPT2, false, -1},
    {"phi-2", HY_TOK_PRE_GPT2, false, -1},
    {"olmo", HY_TOK_PRE_GPT2, false, -1},
    {"jais", HY_TOK_PRE_GPT2, false, -1},
    {"trillion", HY_TOK_PRE_GPT2, false, -1},
    {"granite-docling", HY_TOK_PRE_GPT2, false, -1},
    {"exaone4", HY_TOK_PRE_GPT2, false, -1},
    {"gigachat", HY_TOK_PRE_GPT2, false, -1},
    {"a.x-4.0", HY_TOK_PRE_GPT2, false, -1},
    {"mellum", HY_TOK_PRE_GPT2, false, -1},
    {"modern-bert", HY_TOK_PRE_GPT2, false, -1},
    {"roberta-bpe", HY_TOK_PRE_GPT2, false, -1},
    {"jina-es", HY_TOK_PRE_GPT2, false, -1},
    {"jina-de", HY_TOK_PRE_GPT2, false, -1},
    {"jina-v1-en", HY_TOK_PRE_GPT2, false, -1},
    {"jina-v2-es", HY_TOK_PRE_GPT2, false, -1},
    {"jina-v2-de", HY_TOK_PRE_GPT2, false, -1},
    {"jina-v2-code", HY_TOK_PRE_GPT2, false, -1},
    {"starcoder", HY_TOK_PRE_STARCODER, false, -1},
    {"refact", HY_TOK_PRE_STARCODER, false, -1},
    {"command-r", HY_TOK_PRE_STARCODER, false, -1},
    {"smollm", HY_TOK_PRE_STARCODER, false, -1},
    {"codeshell", HY_TOK_PRE_STARCODER, false, -1},
    {"exaone", HY_TOK_PRE_STARCODER, false, -1},
    {"minerva-7b", HY_TOK_PRE_STARCODER, false, -1},
    {"mellum2", HY_TOK_PRE_STARCODER, false, -1},
    {"qwen2", HY_TOK_PRE_QWEN2, false, -1},
    {"deepseek-r1-qwen", HY_TOK_PRE_QWEN2, false, -1},
    {"kormo", HY_TOK_PRE_QWEN2, false, -1},
    {"f2llmv2", HY_TOK_PRE_QWEN2, false, -1},
    {"megrez", HY_TOK_PRE_QWEN2, false, -1},
    {"stablelm2", HY_TOK_PRE_QWEN2, false, -1},
    {"hunyuan", HY_TOK_PRE_QWEN2, false, -1},
    {"solar-open", HY_TOK_PRE_QWEN2, false, -1},
    {"qwen35", HY_TOK_PRE_QWEN35, false, -1},
};

int hy_tok_pre_lookup(const char *name, hy_tok_pre_info_t *out)
{
    if (!name || !*name)
        name = "default";
    for (size_t i = 0; i < HY_ARRAY_LEN(pre_names); i++) {
        if (strcmp(pre_names[i].name, name) == 0) {
            out->pre = pre_names[i].pre;
            out->ignore_merges = pre_names[i].ignore_merges;
            out->add_bos = pre_names[i].add_bos;
            return HY_OK;
        }
    }
    return HY_ENOENT;
}

static int ends_push(hy_tok_ends_t *e, size_t v)
{
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 64;
        size_t *nv = realloc(e->v, cap * sizeof *nv);
        if (!nv)
            return HY_ENOMEM;
        e->v = nv;
        e->cap = cap;
    }
    e->v[e->n++] = v;
    return HY_OK;
}

/* One stage: split every fragment of in by the matches of fn into out. */
static int apply_stage(hy_tok_match_fn fn, const uint32_t *cp, const uint16_t *fl,
                       const hy_tok_ends_t *in, hy_tok_ends_t *out)
{
    size_t start = 0;

    out->n = 0;
    for (size_t f = 0; f < in->n; f++) {
        size_t end = in->v[f], p = start, q = start;
        while (q < end) {
            size_t k = fn(cp, fl, q, end);
            if (k == 0) {
                q++;
                continue;
            }
            if (q > p && ends_push(out, q))
                return HY_ENOMEM;
            if (ends_push(out, q + k))
                return HY_ENOMEM;
            q += k;
            p = q;
        }
        if (p < end && ends_push(out, end))
            return HY_ENOMEM;
        start = end;
    }
    return HY_OK;
}

int hy_tok_pre_split(hy_tok_pre_t pre, const uint32_t *cps, const uint16_t *flags,
                     size_t n, hy_tok_ends_t *ends)
{
    hy_tok_match_fn stages[8];
    size_t n_stages = 0;
    hy_tok_ends_t tmp = {0};
    int rc = HY_OK;

    switch (pre) {
    case HY_TOK_PRE_GPT2:
        stages[n_stages++] = match_gpt2;
        break;
    case HY_TOK_PRE_LLAMA3:
        stages[n_stages++] = match_llama3;
        break;
    case HY_TOK_PRE_QWEN2:
        stages[n_stages++] = match_qwen2;
        break;
    case HY_TOK_PRE_QWEN35:
        stages[n_stages++] = match_qwen35;
        break;
    case HY_TOK_PRE_STARCODER:
        stages[n_stages++] = match_digit;
        stages[n_stages++] = match_gpt2;
        break;
    case HY_TOK_PRE_FALCON:
        stages[n_stages++] = match_falcon_punct;
        stages[n_stages++] = match_gpt2;
        stages[n_stages++] = match_ascii3;
        break;
    case HY_TOK_PRE_DEEPSEEK_LLM:
        stages[n_stages++] = match_crlf;
        stages[n_stages++] = match_ds_letters;
        stages[n_stages++] = match_ds_punct;
        stages[n_stages++] = match_trailing_space;
        stages[n_stages++] = match_ds_cjk;
        stages[n_stages++] = match_digits;
        break;
    case HY_TOK_PRE_DEEPSEEK3:
        stages[n_stages++] = match_digits3;
        stages[n_stages++] = match_ds3_cjk;
        stages[n_stages++] = match_ds3_main;
        break;
    case HY_TOK_PRE_DEFAULT:
    default:
        stages[n_stages++] = match_default_punct;
        stages[n_stages++] = match_gpt2;
        stages[n_stages++] = match_digits;
        stages[n_stages++] = match_ascii3;
        break;
    }

    ends->n = 0;
    if (n == 0)
        return HY_OK;
    if (ends_push(ends, n))
        return HY_ENOMEM;
    for (size_t s = 0; s < n_stages; s++) {
        hy_tok_ends_t t;
        rc = apply_stage(stages[s], cps, flags, ends, &tmp);
        if (rc)
            goto out;
        t = *ends;
        *ends = tmp;
        tmp = t;
    }
out:
    free(tmp.v);
    return rc;
}
