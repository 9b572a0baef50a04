/*
 * tokenizer.c - vocabulary loading, encoding and decoding (tokenizer.h).
 * Encoding follows llama.cpp's llama_vocab::tokenize step by step so ids
 * match it: special tokens are cut out of the text first (longest first),
 * then each remaining stretch is pre-tokenized and BPE-merged by rank
 * (gpt2) or merged by score over the whole stretch (SentencePiece).
 * The pre-tokenizer regexes live in tokenizer_pre.c.
 */
#define _GNU_SOURCE /* memmem */
#include "model/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer_pre.h"
#include "model/unicode.h"

#define HY_TOK_MAX_VOCAB (1u << 24)

struct hy_tok {
    bool spm;                 /* SentencePiece ("llama"), else byte-level BPE */
    hy_tok_pre_t *pre;        /* BPE only: the word splitter */
    hy_tok_pre_flags_t pf;    /* BPE only: how words become symbols */
    size_t n_vocab;
    char *arena;              /* token texts then pieces, back to back */
    uint64_t *text_off;       /* [n_vocab] into arena */
    uint32_t *text_len;       /* [n_vocab] */
    uint64_t *piece_off;      /* [n_vocab] bytes the token stands for */
    uint32_t *piece_len;      /* [n_vocab] */
    uint8_t *type;            /* [n_vocab] hy_tok_type_t */
    float *score;             /* [n_vocab] */
    bool *eog;                /* [n_vocab] */
    int32_t *text_hash;       /* [text_cap] open addressing, -1 empty */
    size_t text_cap;          /* power of two */
    uint64_t *merge_key;      /* [merge_cap] (left id << 32 | right id), ~0 empty */
    int32_t *merge_rank;      /* [merge_cap] */
    int32_t *merge_result;    /* [merge_cap] id of left+right, or -1 */
    size_t merge_cap;
    int32_t byte_tok[256];    /* token for a lone byte, or -1 */
    int32_t *specials;        /* ids matched literally, longest text first */
    size_t n_specials;
    int32_t bos, eos, eot, eom, pad, unk;
    bool add_bos, add_eos, add_space_prefix;
};

/* ---- hashing ----------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;

    while (c < n)
        c <<= 1;
    return c;
}

static const char *tok_text(const hy_tok_t *t, int32_t id, size_t *len)
{
    *len = t->text_len[id];
    return t->arena + t->text_off[id];
}

int32_t hy_tok_find(const hy_tok_t *t, const char *s, size_t len)
{
    size_t mask = t->text_cap - 1;

    for (size_t i = hash_bytes(s, len) & mask;; i = (i + 1) & mask) {
        int32_t id = t->text_hash[i];
        size_t l;
        const char *p;
        if (id < 0)
            return -1;
        p = tok_text(t, id, &l);
        if (l == len && memcmp(p, s, len) == 0)
            return id;
    }
}

/* Returns the merge slot of (l, r), or -1. */
static ptrdiff_t merge_slot(const hy_tok_t *t, int32_t l, int32_t r)
{
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    size_t mask = t->merge_cap - 1;

    if (t->merge_cap == 0)
        return -1;
    for (size_t i = hash_u64(key) & mask;; i = (i + 1) & mask) {
        if (t->merge_key[i] == key)
            return (ptrdiff_t)i;
        if (t->merge_key[i] == UINT64_MAX)
            return -1;
    }
}

/* ---- building ---------------------------------------------------------- */

void hy_tok_free(hy_tok_t *t)
{
    if (!t)
        return;
    free(t->arena);
    free(t->text_off);
    free(t->text_len);
    free(t->piece_off);
    free(t->piece_len);
    free(t->type);
    free(t->score);
    free(t->eog);
    free(t->text_hash);
    free(t->merge_key);
    free(t->merge_rank);
    free(t->merge_result);
    free(t->specials);
    hy_tok_pre_free(t->pre);
    free(t);
}

/* The bytes a NORMAL/BYTE/... token stands for, written to out (at most
 * 4 * len bytes are needed).  Mirrors llama.cpp's token_to_piece. */
static size_t make_piece(const hy_tok_t *t, int32_t id, char *out)
{
    size_t len, n = 0, pos = 0;
    const char *s = tok_text(t, id, &len);

    switch (t->type[id]) {
    case HY_TOK_TYPE_CONTROL:
    case HY_TOK_TYPE_UNKNOWN:
    case HY_TOK_TYPE_USER_DEFINED:
        memcpy(out, s, len);
        return len;
    case HY_TOK_TYPE_BYTE: {
        unsigned v;
        char tail;
        if (len == 6 && sscanf(s, "<0x%2x%c", &v, &tail) == 2 && tail == '>') {
            out[0] = (char)v;
            return 1;
        }
        memcpy(out, s, len); /* malformed byte token: keep its text */
        return len;
    }
    case HY_TOK_TYPE_NORMAL:
        break;
    default:
        return 0; /* UNUSED / UNDEFINED render as nothing, as in llama.cpp */
    }
    if (t->spm || t->pf.escape_spaces) {
        for (size_t i = 0; i < len; i++) {
            if (i + 2 < len && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                out[n++] = ' ';
                i += 2;
            } else {
                out[n++] = s[i];
            }
        }
        return n;
    }
    while (pos < len) {
        size_t at = pos;
        uint32_t cp = hy_uni_decode_lenient(s, len, &pos);
        int b = hy_uni_cp_to_byte(cp);
        if (b >= 0) {
            out[n++] = (char)b;
        } else {
            memcpy(out + n, s + at, pos - at);
            n += pos - at;
        }
    }
    return n;
}

typedef struct {
    uint32_t len;
    int32_t id;
} hy_tok_special_key_t;

/* Longer text first; equal lengths by id, so the order is deterministic. */
static int cmp_special(const void *a, const void *b)
{
    const hy_tok_special_key_t *x = a, *y = b;

    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static bool in_list(const char *s, size_t len, const char *const *list)
{
    for (size_t i = 0; list[i]; i++) {
        if (strlen(list[i]) == len && memcmp(list[i], s, len) == 0)
            return true;
    }
    return false;
}

/* Token texts llama.cpp treats as end-of-turn / end-of-generation. */
static const char *const eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<end_of_utterance>", NULL};
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
    "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
    "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
    "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[", NULL};

static int check_id(int64_t id, size_t n_vocab, const char *what, int32_t *out, char *err)
{
    if (id < -1 || id >= (int64_t)n_vocab)
        return hy_err(err, HY_ERANGE, "tokenizer.ggml.%s = %lld: token id out of range 0..%zu",
                      what, (long long)id, n_vocab - 1);
    *out = (int32_t)id;
    return HY_OK;
}

static int build_merges(hy_tok_t *t, const hy_tok_spec_t *sp, char *err)
{
    t->merge_cap = sp->n_merges ? pow2_at_least(sp->n_merges * 2) : 0;
    if (!t->merge_cap)
        return HY_OK;
    t->merge_key = malloc(t->merge_cap * sizeof *t->merge_key);
    t->merge_rank = malloc(t->merge_cap * sizeof *t->merge_rank);
    t->merge_result = malloc(t->merge_cap * sizeof *t->merge_result);
    if (!t->merge_key || !t->merge_rank || !t->merge_result)
        return hy_err(err, HY_ENOMEM, "tokenizer: out of memory for %zu merges", sp->n_merges);
    memset(t->merge_key, 0xff, t->merge_cap * sizeof *t->merge_key);
    for (size_t r = 0; r < sp->n_merges; r++) {
        const char *m = sp->merges[r].ptr, *space;
        size_t len = sp->merges[r].len, mask = t->merge_cap - 1;
        int32_t l, rt, res;
        uint64_t key;
        char *cat;

        /* The separator is the first space after the first byte, so a left
         * part may itself be a space (llama.cpp does the same). */
        space = len > 1 ? memchr(m + 1, ' ', len - 1) : NULL;
        if (!space)
            return hy_err(err, HY_EFORMAT,
                          "tokenizer.ggml.merges[%zu] = \"%.*s\": no space between the two parts",
                          r, (int)HY_MIN(len, 64), m);
        l = hy_tok_find(t, m, (size_t)(space - m));
        rt = hy_tok_find(t, space + 1, len - (size_t)(space - m) - 1);
        /* A merge whose parts are not tokens can never apply to token
         * symbols; Hugging Face refuses such files, we skip the entry. */
        if (l < 0 || rt < 0)
            continue;
        cat = malloc(len);
        if (!cat)
            return hy_err(err, HY_ENOMEM, "tokenizer: out of memory");
        memcpy(cat, m, (size_t)(space - m));
        memcpy(cat + (space - m), space + 1, len - (size_t)(space - m) - 1);
        res = hy_tok_find(t, cat, len - 1);
        free(cat);
        key = (uint64_t)(uint32_t)l << 32 | (uint32_t)rt;
        for (size_t i = hash_u64(key) & mask;; i = (i + 1) & mask) {
            if (t->merge_key[i] == key)
                break; /* first (lowest) rank wins */
            if (t->merge_key[i] == UINT64_MAX) {
                t->merge_key[i] = key;
                t->merge_rank[i] = (int32_t)r;
                t->merge_result[i] = res;
                break;
            }
        }
    }
    return HY_OK;
}

/* The model kind and, for BPE, its pre-tokenizer. */
static int build_model(hy_tok_t *t, const hy_tok_spec_t *sp, char *err)
{
    int rc;

    if (strcmp(sp->model, "llama") == 0) {
        t->spm = true;
        return HY_OK;
    }
    if (strcmp(sp->model, "gpt2") != 0)
        return hy_err(err, HY_EUNSUPPORTED,
                      "tokenizer.ggml.model = \"%s\": unsupported (gpt2 and llama are)", sp->model);
    rc = hy_tok_pre_new(&t->pre, sp->pre, &t->pf, err);
    if (rc == HY_ENOENT)
        rc = HY_EUNSUPPORTED; /* err already names the key and value */
    if (rc)
        return rc;
    if (!sp->merges || sp->n_merges == 0)
        return hy_err(err, HY_ENOENT, "tokenizer.ggml.merges: missing (required for gpt2)");
    return HY_OK;
}

/* Every per-token array; the arena holds the texts (*text_total bytes)
 * and then the pieces. */
static int build_arrays(hy_tok_t *t, const hy_tok_spec_t *sp, uint64_t *text_total, char *err)
{
    size_t n = sp->n_vocab;

    *text_total = 0;
    for (size_t i = 0; i < n; i++) {
        if (sp->tokens[i].len > UINT32_MAX / 4)
            return hy_err(err, HY_ERANGE, "tokenizer.ggml.tokens[%zu]: too long", i);
        *text_total += sp->tokens[i].len;
    }
    /* byte-level unmapping never grows a piece past 4x its text */
    t->arena = malloc(*text_total * 5 + 1);
    t->text_off = malloc(n * sizeof *t->text_off);
    t->text_len = malloc(n * sizeof *t->text_len);
    t->piece_off = malloc(n * sizeof *t->piece_off);
    t->piece_len = malloc(n * sizeof *t->piece_len);
    t->type = malloc(n);
    t->score = malloc(n * sizeof *t->score);
    t->eog = calloc(n, sizeof *t->eog);
    t->text_cap = pow2_at_least(n * 2);
    t->text_hash = malloc(t->text_cap * sizeof *t->text_hash);
    t->specials = malloc(n * sizeof *t->specials);
    if (!t->arena || !t->text_off || !t->text_len || !t->piece_off || !t->piece_len ||
        !t->type || !t->score || !t->eog || !t->text_hash || !t->specials)
        return hy_err(err, HY_ENOMEM, "tokenizer: out of memory for %zu tokens", n);
    memset(t->text_hash, 0xff, t->text_cap * sizeof *t->text_hash);
    return HY_OK;
}

/* Texts, types, scores and the text -> id hash. */
static int build_texts(hy_tok_t *t, const hy_tok_spec_t *sp, char *err)
{
    uint64_t off = 0;
    size_t mask = t->text_cap - 1;

    for (size_t i = 0; i < t->n_vocab; i++) {
        int32_t ty = sp->types ? sp->types[i] : HY_TOK_TYPE_NORMAL;
        if (ty < HY_TOK_TYPE_UNDEFINED || ty > HY_TOK_TYPE_BYTE)
            return hy_err(err, HY_EFORMAT, "tokenizer.ggml.token_type[%zu] = %d: must be 0..6", i,
                          (int)ty);
        t->type[i] = (uint8_t)ty;
        t->score[i] = sp->scores ? sp->scores[i] : 0.0f;
        t->text_off[i] = off;
        t->text_len[i] = (uint32_t)sp->tokens[i].len;
        if (sp->tokens[i].len)
            memcpy(t->arena + off, sp->tokens[i].ptr, sp->tokens[i].len);
        off += sp->tokens[i].len;
        /* Duplicate texts: the first id keeps the text (llama.cpp's
         * token_to_id ends up with the last; real vocabularies have none
         * that matter). */
        for (size_t h = hash_bytes(sp->tokens[i].ptr, sp->tokens[i].len) & mask;;
             h = (h + 1) & mask) {
            int32_t o = t->text_hash[h];
            if (o < 0) {
                t->text_hash[h] = (int32_t)i;
                break;
            }
            if (t->text_len[o] == sp->tokens[i].len &&
                memcmp(t->arena + t->text_off[o], sp->tokens[i].ptr, sp->tokens[i].len) == 0)
                break;
        }
    }
    return HY_OK;
}

/* Special ids and the add_* flags, with the model kind's defaults. */
static int build_flags(hy_tok_t *t, const hy_tok_spec_t *sp, char *err)
{
    size_t n = t->n_vocab;
    int rc;

    if ((rc = check_id(sp->bos, n, "bos_token_id", &t->bos, err)) ||
        (rc = check_id(sp->eos, n, "eos_token_id", &t->eos, err)) ||
        (rc = check_id(sp->eot, n, "eot_token_id", &t->eot, err)) ||
        (rc = check_id(sp->eom, n, "eom_token_id", &t->eom, err)) ||
        (rc = check_id(sp->pad, n, "padding_token_id", &t->pad, err)) ||
        (rc = check_id(sp->unk, n, "unknown_token_id", &t->unk, err)))
        return rc;
    t->add_bos = sp->add_bos >= 0 ? sp->add_bos
                 : t->spm         ? true
                 : t->pf.add_bos >= 0 ? t->pf.add_bos : false;
    if (!t->spm && t->pf.force_bos)
        t->add_bos = true; /* as llama.cpp overrides the file for Gemma 4 */
    t->add_eos = sp->add_eos > 0;
    t->add_space_prefix = sp->add_space_prefix >= 0 ? sp->add_space_prefix : t->spm;
    if (t->add_bos && t->bos < 0)
        return hy_err(err, HY_EFORMAT,
                      "tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is missing");
    if (t->add_eos && t->eos < 0)
        return hy_err(err, HY_EFORMAT,
                      "tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is missing");
    return HY_OK;
}

/* End of generation, as llama.cpp infers it from token texts; such tokens
 * become CONTROL so they are never rendered as plain text. */
static void mark_eog(hy_tok_t *t)
{
    for (size_t i = 0; i < t->n_vocab; i++) {
        size_t len;
        const char *s = tok_text(t, (int32_t)i, &len);
        if (t->eot < 0 && in_list(s, len, eot_texts))
            t->eot = (int32_t)i;
        if (t->eom < 0 && len == 10 && memcmp(s, "<|eom_id|>", 10) == 0)
            t->eom = (int32_t)i;
        if (in_list(s, len, eog_texts)) {
            t->eog[i] = true;
            t->type[i] = HY_TOK_TYPE_CONTROL;
        }
    }
    if (t->eos >= 0)
        t->eog[t->eos] = true;
    if (t->eot >= 0)
        t->eog[t->eot] = true;
    if (t->eom >= 0)
        t->eog[t->eom] = true;
}

/* Pieces (after the texts in the arena) and the lone-byte tokens: the
 * byte's GPT-2 code point, or <0xNN> where text stays UTF-8
 * (SentencePiece, and BPE over raw UTF-8). */
static void build_pieces(hy_tok_t *t, uint64_t text_total)
{
    uint64_t off = text_total;

    for (size_t i = 0; i < t->n_vocab; i++) {
        t->piece_off[i] = off;
        t->piece_len[i] = (uint32_t)make_piece(t, (int32_t)i, t->arena + off);
        off += t->piece_len[i];
    }
    for (unsigned b = 0; b < 256; b++) {
        char buf[8];
        size_t len;
        if (t->spm || t->pf.raw_utf8)
            len = (size_t)snprintf(buf, sizeof buf, "<0x%02X>", b);
        else
            len = hy_uni_encode(hy_uni_byte_to_cp((uint8_t)b), buf);
        t->byte_tok[b] = hy_tok_find(t, buf, len);
    }
}

/* Tokens matched literally in text, longest first. */
static int build_specials(hy_tok_t *t, char *err)
{
    hy_tok_special_key_t *keys = malloc(t->n_vocab * sizeof *keys);

    if (!keys)
        return hy_err(err, HY_ENOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < t->n_vocab; i++) {
        uint8_t ty = t->type[i];
        if ((ty == HY_TOK_TYPE_CONTROL || ty == HY_TOK_TYPE_USER_DEFINED ||
             ty == HY_TOK_TYPE_UNKNOWN) && t->text_len[i] > 0) {
            keys[t->n_specials].len = t->text_len[i];
            keys[t->n_specials++].id = (int32_t)i;
        }
    }
    qsort(keys, t->n_specials, sizeof *keys, cmp_special);
    for (size_t i = 0; i < t->n_specials; i++)
        t->specials[i] = keys[i].id;
    free(keys);
    return HY_OK;
}

int hy_tok_build(hy_tok_t **out, const hy_tok_spec_t *sp, char *err)
{
    hy_tok_t *t = NULL;
    uint64_t text_total = 0;
    int rc;

    *out = NULL;
    if (!sp->model)
        return hy_err(err, HY_ENOENT, "tokenizer.ggml.model: missing");
    if (sp->n_vocab == 0 || !sp->tokens)
        return hy_err(err, HY_ENOENT, "tokenizer.ggml.tokens: missing or empty");
    if (sp->n_vocab > HY_TOK_MAX_VOCAB)
        return hy_err(err, HY_ERANGE, "tokenizer.ggml.tokens: %zu tokens, at most %u supported",
                      sp->n_vocab, HY_TOK_MAX_VOCAB);
    t = calloc(1, sizeof *t);
    if (!t)
        return hy_err(err, HY_ENOMEM, "tokenizer: out of memory");
    t->n_vocab = sp->n_vocab;
    if ((rc = build_model(t, sp, err)) || (rc = build_arrays(t, sp, &text_total, err)) ||
        (rc = build_texts(t, sp, err)) || (rc = build_flags(t, sp, err)))
        goto fail;
    mark_eog(t);
    build_pieces(t, text_total);
    if ((rc = build_specials(t, err)) || (!t->spm && (rc = build_merges(t, sp, err))))
        goto fail;
    *out = t;
    return HY_OK;
fail:
    hy_tok_free(t);
    return rc;
}

/* ---- loading from GGUF ------------------------------------------------- */

static int get_opt_id(const hy_gguf_t *g, const char *key, int64_t *out, char *err)
{
    int rc = hy_gguf_get_i64(g, key, out, err);

    if (rc == HY_ENOENT)
        return HY_OK;
    return rc;
}

static int get_opt_flag(const hy_gguf_t *g, const char *key, int *out, char *err)
{
    bool v;
    int rc = hy_gguf_get_bool(g, key, &v, err);

    if (rc == HY_ENOENT)
        return HY_OK;
    if (rc)
        return rc;
    *out = v;
    return HY_OK;
}

static char *dup_str(hy_gguf_str_t s)
{
    char *p = malloc(s.len + 1);

    if (p) {
        memcpy(p, s.ptr, s.len);
        p[s.len] = 0;
    }
    return p;
}

/* A string array key as (ptr, len) views into g: tokens and merges. */
static int read_str_arr(const hy_gguf_t *g, const char *key, bool required, size_t max,
                        hy_tok_str_t **out, size_t *n, char *err)
{
    hy_gguf_type_t et;
    uint64_t count;
    const void *data;
    int64_t ki;
    int rc = hy_gguf_get_arr(g, key, &et, &count, &data, err);

    *out = NULL;
    *n = 0;
    if (rc == HY_ENOENT && !required)
        return HY_OK;
    if (rc == HY_ENOENT)
        return hy_err(err, HY_ENOENT, "%s: missing", key);
    if (rc)
        return rc;
    if (et != HY_GGUF_STRING || (required && count == 0) || count > max)
        return hy_err(err, HY_EFORMAT,
                      "%s: must be a%s string array of at most %zu, is type %d count %llu", key,
                      required ? " non-empty" : "", max, (int)et, (unsigned long long)count);
    *out = malloc((count ? count : 1) * sizeof **out);
    if (!*out)
        return hy_err(err, HY_ENOMEM, "tokenizer: out of memory for %s", key);
    ki = hy_gguf_find_key(g, key);
    for (size_t i = 0; i < count; i++) {
        hy_gguf_str_t s = hy_gguf_arr_str(g, ki, i);
        (*out)[i].ptr = s.ptr;
        (*out)[i].len = (size_t)s.len;
    }
    *n = (size_t)count;
    return HY_OK;
}

/* token_type (as int32) or scores (as float): optional, but one number
 * per token when present.  *out stays NULL when the key is absent. */
static int read_num_arr(const hy_gguf_t *g, const char *key, size_t n_vocab, bool as_type,
                        void **out, char *err)
{
    hy_gguf_type_t et;
    uint64_t count;
    const void *data;
    int64_t ki;
    int rc = hy_gguf_get_arr(g, key, &et, &count, &data, err);

    *out = NULL;
    if (rc == HY_ENOENT)
        return HY_OK;
    if (rc)
        return rc;
    if (count != n_vocab || et == HY_GGUF_STRING || et == HY_GGUF_ARRAY)
        return hy_err(err, HY_EFORMAT, "%s: %llu entries of type %d, need %zu %s", key,
                      (unsigned long long)count, (int)et, n_vocab, as_type ? "integers" : "numbers");
    *out = malloc(n_vocab * 4);
    if (!*out)
        return hy_err(err, HY_ENOMEM, "tokenizer: out of memory for %s", key);
    ki = hy_gguf_find_key(g, key);
    for (size_t i = 0; i < n_vocab; i++) {
        if (as_type) {
            int64_t v = hy_gguf_arr_i64(g, ki, i);
            ((int32_t *)*out)[i] = v < 0 || v > 6 ? -1 : (int32_t)v;
        } else {
            ((float *)*out)[i] = (float)hy_gguf_arr_f64(g, ki, i);
        }
    }
    return HY_OK;
}

/* A string key as a malloc'd C string; *out NULL when absent. */
static int read_str(const hy_gguf_t *g, const char *key, char **out, char *err)
{
    hy_gguf_str_t v;
    int rc = hy_gguf_get_str(g, key, &v, err);

    *out = NULL;
    if (rc == HY_ENOENT)
        return HY_OK;
    if (rc)
        return rc;
    *out = dup_str(v);
    return *out ? HY_OK : hy_err(err, HY_ENOMEM, "tokenizer: out of memory");
}

void hy_tok_spec_free(hy_tok_spec_t *sp)
{
    free((void *)sp->tokens);
    free((void *)sp->merges);
    free((void *)sp->types);
    free((void *)sp->scores);
    free((void *)sp->model);
    free((void *)sp->pre);
    memset(sp, 0, sizeof *sp);
}

int hy_tok_spec_read(hy_tok_spec_t *sp, const hy_gguf_t *g, char *err)
{
    char *model = NULL, *pre = NULL;
    hy_tok_str_t *tokens = NULL, *merges = NULL;
    void *types = NULL, *scores = NULL;
    int rc;

    memset(sp, 0, sizeof *sp);
    sp->bos = sp->eos = sp->eot = sp->eom = sp->pad = sp->unk = -1;
    sp->add_bos = sp->add_eos = sp->add_space_prefix = -1;
    if ((rc = read_str(g, "tokenizer.ggml.model", &model, err)) ||
        (rc = read_str(g, "tokenizer.ggml.pre", &pre, err)))
        goto fail;
    if (!model) {
        rc = hy_err(err, HY_ENOENT, "tokenizer.ggml.model: missing");
        goto fail;
    }
    if ((rc = read_str_arr(g, "tokenizer.ggml.tokens", true, HY_TOK_MAX_VOCAB, &tokens,
                           &sp->n_vocab, err)) ||
        (rc = read_num_arr(g, "tokenizer.ggml.token_type", sp->n_vocab, true, &types, err)) ||
        (rc = read_num_arr(g, "tokenizer.ggml.scores", sp->n_vocab, false, &scores, err)) ||
        (rc = read_str_arr(g, "tokenizer.ggml.merges", false, SIZE_MAX / sizeof *merges, &merges,
                           &sp->n_merges, err)))
        goto fail;
    sp->model = model;
    sp->pre = pre;
    sp->tokens = tokens;
    sp->merges = merges;
    sp->types = types;
    sp->scores = scores;
    /* SentencePiece defaults, as llama.cpp sets them before reading keys. */
    if (strcmp(model, "llama") == 0) {
        sp->bos = sp->n_vocab > 1 ? 1 : -1;
        sp->eos = sp->n_vocab > 2 ? 2 : -1;
        sp->unk = 0;
    }
    if ((rc = get_opt_id(g, "tokenizer.ggml.bos_token_id", &sp->bos, err)) ||
        (rc = get_opt_id(g, "tokenizer.ggml.eos_token_id", &sp->eos, err)) ||
        (rc = get_opt_id(g, "tokenizer.ggml.eot_token_id", &sp->eot, err)) ||
        (rc = get_opt_id(g, "tokenizer.ggml.eom_token_id", &sp->eom, err)) ||
        (rc = get_opt_id(g, "tokenizer.ggml.padding_token_id", &sp->pad, err)) ||
        (rc = get_opt_id(g, "tokenizer.ggml.unknown_token_id", &sp->unk, err)) ||
        (rc = get_opt_flag(g, "tokenizer.ggml.add_bos_token", &sp->add_bos, err)) ||
        (rc = get_opt_flag(g, "tokenizer.ggml.add_eos_token", &sp->add_eos, err)) ||
        (rc = get_opt_flag(g, "tokenizer.ggml.add_space_prefix", &sp->add_space_prefix, err))) {
        hy_tok_spec_free(sp);
        return rc;
    }
    if (err)
        err[0] = 0; /* drop "not found" text left by optional keys */
    return HY_OK;
fail:
    free(model);
    free(pre);
    free(tokens);
    free(merges);
    free(types);
    free(scores);
    memset(sp, 0, sizeof *sp);
    return rc;
}

int hy_tok_load(hy_tok_t **out, const hy_gguf_t *g, char *err)
{
    hy_tok_spec_t sp;
    int rc = hy_tok_spec_read(&sp, g, err);

    *out = NULL;
    if (rc)
        return rc;
    rc = hy_tok_build(out, &sp, err);
    hy_tok_spec_free(&sp);
    return rc;
}

/* ---- accessors --------------------------------------------------------- */

size_t hy_tok_n_vocab(const hy_tok_t *t) { return t->n_vocab; }
int32_t hy_tok_bos(const hy_tok_t *t) { return t->bos; }
int32_t hy_tok_eos(const hy_tok_t *t) { return t->eos; }
int32_t hy_tok_eot(const hy_tok_t *t) { return t->eot; }
bool hy_tok_add_bos(const hy_tok_t *t) { return t->add_bos; }
bool hy_tok_is_spm(const hy_tok_t *t) { return t->spm; }

hy_tok_type_t hy_tok_type(const hy_tok_t *t, int32_t id)
{
    if (id < 0 || (size_t)id >= t->n_vocab)
        return HY_TOK_TYPE_UNDEFINED;
    return (hy_tok_type_t)t->type[id];
}

hy_tok_str_t hy_tok_text(const hy_tok_t *t, int32_t id)
{
    hy_tok_str_t s = {"", 0};

    if (id >= 0 && (size_t)id < t->n_vocab)
        s.ptr = tok_text(t, id, &s.len);
    return s;
}

bool hy_tok_is_eog(const hy_tok_t *t, int32_t id)
{
    return id >= 0 && (size_t)id < t->n_vocab && t->eog[id];
}

hy_tok_str_t hy_tok_token_piece(const hy_tok_t *t, int32_t id, bool special)
{
    hy_tok_str_t s = {"", 0};

    if (id < 0 || (size_t)id >= t->n_vocab)
        return s;
    if (!special && (t->type[id] == HY_TOK_TYPE_CONTROL || t->type[id] == HY_TOK_TYPE_UNKNOWN))
        return s;
    s.ptr = t->arena + t->piece_off[id];
    s.len = t->piece_len[id];
    return s;
}

/* ---- encoding ---------------------------------------------------------- */

typedef struct {
    int32_t *v;
    size_t n, cap;
} hy_tok_ids_t;

static int ids_push(hy_tok_ids_t *o, int32_t id)
{
    if (hy_tok_grow((void **)&o->v, &o->cap, o->n + 1, sizeof *o->v))
        return HY_ENOMEM;
    o->v[o->n++] = id;
    return HY_OK;
}

/* A stretch of the input: raw text (tok < 0) or one special token. */
typedef struct {
    size_t off, len;
    int32_t tok;
} hy_tok_frag_t;

typedef struct {
    hy_tok_frag_t *v;
    size_t n, cap;
} hy_tok_frags_t;

static int frags_push(hy_tok_frags_t *f, size_t off, size_t len, int32_t tok)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        hy_tok_frag_t *nv = realloc(f->v, cap * sizeof *nv);
        if (!nv)
            return HY_ENOMEM;
        f->v = nv;
        f->cap = cap;
    }
    f->v[f->n].off = off;
    f->v[f->n].len = len;
    f->v[f->n].tok = tok;
    f->n++;
    return HY_OK;
}

/* BPE symbol (a run of input bytes) and candidate merge. */
typedef struct {
    int32_t id, prev, next;
    uint32_t start, len;
} hy_tok_sym_t;

typedef struct {
    float score;     /* SPM: higher first */
    int32_t rank;    /* BPE: lower first */
    int32_t left, right;
    int32_t id;      /* token the merge makes */
    int32_t idl, idr; /* BPE: ids of the parts when queued */
    uint32_t size;   /* SPM: bytes of the merged text when queued */
} hy_tok_pair_t;

/* Scratch reused across the words of one encode call. */
typedef struct {
    hy_tok_sym_t *sym;
    size_t sym_cap;
    hy_tok_pair_t *heap;
    size_t n_heap, heap_cap;
    char *buf;
    size_t buf_cap;
    hy_tok_rx_work_t rx; /* pre-tokenizer regex stack */
} hy_tok_work_t;

/* true if a should be popped before b */
static bool pair_before(const hy_tok_pair_t *a, const hy_tok_pair_t *b, bool spm)
{
    if (spm) {
        if (a->score != b->score)
            return a->score > b->score;
    } else if (a->rank != b->rank) {
        return a->rank < b->rank;
    }
    return a->left < b->left;
}

static int heap_push(hy_tok_work_t *w, const hy_tok_pair_t *p, bool spm)
{
    size_t i;

    if (hy_tok_grow((void **)&w->heap, &w->heap_cap, w->n_heap + 1, sizeof *w->heap))
        return HY_ENOMEM;
    i = w->n_heap++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!pair_before(p, &w->heap[up], spm))
            break;
        w->heap[i] = w->heap[up];
        i = up;
    }
    w->heap[i] = *p;
    return HY_OK;
}

static hy_tok_pair_t heap_pop(hy_tok_work_t *w, bool spm)
{
    hy_tok_pair_t top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;

    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && pair_before(&w->heap[c + 1], &w->heap[c], spm))
            c++;
        if (!pair_before(&w->heap[c], &last, spm))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n)
        w->heap[i] = last;
    return top;
}

static int bpe_add_pair(const hy_tok_t *t, hy_tok_work_t *w, int32_t l, int32_t r)
{
    hy_tok_pair_t p = {0};
    ptrdiff_t slot;

    if (l < 0 || r < 0 || w->sym[l].id < 0 || w->sym[r].id < 0)
        return HY_OK;
    slot = merge_slot(t, w->sym[l].id, w->sym[r].id);
    if (slot < 0)
        return HY_OK;
    p.rank = t->merge_rank[slot];
    p.id = t->merge_result[slot];
    p.left = l;
    p.right = r;
    p.idl = w->sym[l].id;
    p.idr = w->sym[r].id;
    return heap_push(w, &p, false);
}

/* A whole word emitted as one token when the vocabulary has it: with
 * ignore_merges (Llama 3 and kin), and for runs of newlines (Gemma 4).
 * Returns 1 if it did, 0 if the word must be merged, or HY_ENOMEM. */
static int bpe_whole_word(const hy_tok_t *t, hy_tok_work_t *w, const char *s, size_t n,
                          hy_tok_ids_t *out)
{
    int32_t id = -1;

    if (t->pf.ignore_merges && !t->pf.raw_utf8) {
        size_t k = 0;
        if (hy_tok_grow((void **)&w->buf, &w->buf_cap, n * 2, 1))
            return HY_ENOMEM;
        for (size_t i = 0; i < n; i++)
            k += hy_uni_encode(hy_uni_byte_to_cp((uint8_t)s[i]), w->buf + k);
        id = hy_tok_find(t, w->buf, k);
    } else if (t->pf.ignore_merges ||
               (t->pf.newline_words && strspn(s, "\n") >= n)) {
        id = hy_tok_find(t, s, n);
    }
    if (id < 0)
        return 0;
    return ids_push(out, id) ? HY_ENOMEM : 1;
}

/* One pre-tokenized word (raw bytes) -> ids, merging the pair of lowest
 * rank (leftmost on ties) until none applies, like llm_tokenizer_bpe.  The
 * first symbols are the word's bytes (byte-level BPE: each is a token)
 * or its UTF-8 characters (raw_utf8: looked up as they are). */
static int bpe_word(const hy_tok_t *t, hy_tok_work_t *w, const char *s, size_t n,
                    hy_tok_ids_t *out)
{
    static const uint8_t utf8_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    size_t nsym = 0;
    int rc;

    if (n == 0)
        return HY_OK;
    rc = bpe_whole_word(t, w, s, n, out);
    if (rc != 0)
        return rc < 0 ? rc : HY_OK;
    if (n > INT32_MAX || hy_tok_grow((void **)&w->sym, &w->sym_cap, n, sizeof *w->sym))
        return HY_ENOMEM;
    for (size_t i = 0; i < n; nsym++) {
        hy_tok_sym_t *y = &w->sym[nsym];
        size_t len = t->pf.raw_utf8 ? HY_MIN((size_t)utf8_len[(uint8_t)s[i] >> 4], n - i) : 1;
        y->id = t->pf.raw_utf8 ? hy_tok_find(t, s + i, len) : t->byte_tok[(uint8_t)s[i]];
        y->prev = (int32_t)nsym - 1;
        y->start = (uint32_t)i;
        y->len = (uint32_t)len;
        i += len;
        y->next = i < n ? (int32_t)nsym + 1 : -1;
    }
    w->n_heap = 0;
    for (size_t i = 1; i < nsym; i++) {
        if (bpe_add_pair(t, w, (int32_t)i - 1, (int32_t)i))
            return HY_ENOMEM;
    }
    while (w->n_heap) {
        hy_tok_pair_t p = heap_pop(w, false);
        hy_tok_sym_t *l = &w->sym[p.left], *r = &w->sym[p.right];
        /* Stale: a part has been merged into something else since. */
        if (l->len == 0 || r->len == 0 || l->id != p.idl || r->id != p.idr)
            continue;
        l->len += r->len;
        l->id = p.id;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = p.left;
        if (bpe_add_pair(t, w, l->prev, p.left) || bpe_add_pair(t, w, p.left, l->next))
            return HY_ENOMEM;
    }
    for (int32_t i = 0; i != -1; i = w->sym[i].next) {
        const hy_tok_sym_t *y = &w->sym[i];
        if (y->id >= 0) {
            if (ids_push(out, y->id))
                return HY_ENOMEM;
            continue;
        }
        /* Not a token (only in malformed vocabularies): its bytes. */
        for (uint32_t k = 0; k < y->len; k++) {
            int32_t b = t->byte_tok[(uint8_t)s[y->start + k]];
            if (b >= 0 && ids_push(out, b))
                return HY_ENOMEM;
        }
    }
    return HY_OK;
}

/* Spaces become U+2581 before splitting, as SentencePiece does; returns
 * a malloc'd copy (NULL: out of memory) with its length in *n. */
static char *escape_spaces(const char *s, size_t *n)
{
    char *esc = *n < SIZE_MAX / 3 ? malloc(*n * 3 + 1) : NULL;
    size_t k = 0;

    if (!esc)
        return NULL;
    for (size_t i = 0; i < *n; i++) {
        if (s[i] == ' ') {
            memcpy(esc + k, "\xe2\x96\x81", 3);
            k += 3;
        } else {
            esc[k++] = s[i];
        }
    }
    *n = k;
    return esc;
}

static int bpe_fragment(const hy_tok_t *t, hy_tok_work_t *w, const char *s, size_t n,
                        hy_tok_ids_t *out)
{
    char *esc = t->pf.escape_spaces ? escape_spaces(s, &n) : NULL;
    uint32_t *cps = malloc((n + 1) * sizeof *cps);
    uint16_t *fl = malloc((n + 1) * sizeof *fl);
    size_t *boff = malloc((n + 2) * sizeof *boff);
    char *norm = malloc(n * 4 + 1);
    hy_tok_ends_t ends = {0};
    size_t ncp = 0, pos = 0, nb = 0, start = 0;
    int rc = HY_ENOMEM;

    if (!cps || !fl || !boff || !norm || (t->pf.escape_spaces && !esc))
        goto out;
    if (esc)
        s = esc;
    /* Decode as llama.cpp does (a bad byte becomes U+FFFD) and work on the
     * re-encoded text, so invalid input gets the same ids as there. */
    while (pos < n) {
        uint32_t cp = hy_uni_decode_lenient(s, n, &pos);
        boff[ncp] = nb;
        cps[ncp] = cp;
        fl[ncp] = (uint16_t)hy_uni_flags(cp);
        nb += hy_uni_encode(cp, norm + nb);
        ncp++;
    }
    boff[ncp] = nb;
    rc = hy_tok_pre_split(t->pre, cps, fl, ncp, &ends, &w->rx);
    if (rc)
        goto out;
    for (size_t i = 0; i < ends.n; i++) {
        size_t end = ends.v[i];
        rc = bpe_word(t, w, norm + boff[start], boff[end] - boff[start], out);
        if (rc)
            goto out;
        start = end;
    }
    rc = HY_OK;
out:
    free(cps);
    free(fl);
    free(boff);
    free(norm);
    free(esc);
    free(ends.v);
    return rc;
}

static int spm_add_pair(const hy_tok_t *t, hy_tok_work_t *w, int32_t l, int32_t r)
{
    hy_tok_pair_t p = {0};
    const hy_tok_sym_t *a, *b;
    int32_t id;

    if (l < 0 || r < 0)
        return HY_OK;
    a = &w->sym[l];
    b = &w->sym[r];
    id = hy_tok_find(t, w->buf + a->start, a->len + b->len);
    if (id < 0)
        return HY_OK;
    p.score = t->score[id];
    p.left = l;
    p.right = r;
    p.id = id;
    p.size = a->len + b->len;
    return heap_push(w, &p, true);
}

/* SentencePiece: the whole fragment, spaces as U+2581, characters merged
 * by best token score (leftmost on ties) like llm_tokenizer_spm; what
 * stays unknown falls back to <0xNN> byte tokens. */
static int spm_fragment(const hy_tok_t *t, hy_tok_work_t *w, const char *s, size_t n,
                        bool prefix_space, hy_tok_ids_t *out)
{
    static const uint8_t utf8_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    size_t m = 0, nsym = 0;

    if (n > (SIZE_MAX - 8) / 3 || hy_tok_grow((void **)&w->buf, &w->buf_cap, n * 3 + 3, 1))
        return HY_ENOMEM;
    if (prefix_space) {
        memcpy(w->buf, "\xe2\x96\x81", 3);
        m = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(w->buf + m, "\xe2\x96\x81", 3);
            m += 3;
        } else {
            w->buf[m++] = s[i];
        }
    }
    if (m == 0)
        return HY_OK;
    if (m > INT32_MAX || hy_tok_grow((void **)&w->sym, &w->sym_cap, m, sizeof *w->sym))
        return HY_ENOMEM;
    for (size_t off = 0; off < m; nsym++) {
        hy_tok_sym_t *y = &w->sym[nsym];
        size_t len = HY_MIN((size_t)utf8_len[(uint8_t)w->buf[off] >> 4], m - off);
        y->start = (uint32_t)off;
        y->len = (uint32_t)len;
        y->id = hy_tok_find(t, w->buf + off, len);
        y->prev = (int32_t)nsym - 1;
        off += len;
        y->next = off < m ? (int32_t)nsym + 1 : -1;
    }
    w->n_heap = 0;
    for (size_t i = 1; i < nsym; i++) {
        if (spm_add_pair(t, w, (int32_t)i - 1, (int32_t)i))
            return HY_ENOMEM;
    }
    while (w->n_heap) {
        hy_tok_pair_t p = heap_pop(w, true);
        hy_tok_sym_t *l = &w->sym[p.left], *r = &w->sym[p.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != p.size)
            continue;
        l->len += r->len;
        l->id = p.id;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = p.left;
        if (spm_add_pair(t, w, l->prev, p.left) || spm_add_pair(t, w, p.left, l->next))
            return HY_ENOMEM;
    }
    for (int32_t i = 0; i != -1; i = w->sym[i].next) {
        const hy_tok_sym_t *y = &w->sym[i];
        if (y->id >= 0) {
            if (ids_push(out, y->id))
                return HY_ENOMEM;
            continue;
        }
        for (uint32_t k = 0; k < y->len; k++) {
            int32_t b = t->byte_tok[(uint8_t)w->buf[y->start + k]];
            if (b < 0)
                b = t->unk;
            if (b >= 0 && ids_push(out, b))
                return HY_ENOMEM;
        }
    }
    return HY_OK;
}

/* Cuts special tokens out of text, longest token first over the whole
 * text, then the next longest in what is left (llama.cpp's
 * tokenizer_st_partition). */
static int partition(const hy_tok_t *t, const char *text, size_t len, bool parse_special,
                     hy_tok_frags_t *f)
{
    hy_tok_frags_t next = {0};
    bool present[256] = {false};
    int rc = HY_OK;

    f->n = 0;
    if (len == 0)
        return HY_OK;
    if (frags_push(f, 0, len, -1))
        return HY_ENOMEM;
    for (size_t i = 0; i < len; i++)
        present[(uint8_t)text[i]] = true;
    for (size_t k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        size_t sl;
        const char *st = tok_text(t, id, &sl);
        bool hit = false;

        if (!parse_special &&
            (t->type[id] == HY_TOK_TYPE_CONTROL || t->type[id] == HY_TOK_TYPE_UNKNOWN))
            continue;
        if (!present[(uint8_t)st[0]] || sl > len)
            continue;
        next.n = 0;
        for (size_t i = 0; i < f->n; i++) {
            hy_tok_frag_t fr = f->v[i];
            size_t p = fr.off, end = fr.off + fr.len;
            if (fr.tok >= 0) {
                if (frags_push(&next, fr.off, fr.len, fr.tok))
                    goto nomem;
                continue;
            }
            for (;;) {
                const char *m = end - p >= sl ? memmem(text + p, end - p, st, sl) : NULL;
                if (!m)
                    break;
                hit = true;
                if ((size_t)(m - text) > p && frags_push(&next, p, (size_t)(m - text) - p, -1))
                    goto nomem;
                if (frags_push(&next, (size_t)(m - text), sl, id))
                    goto nomem;
                p = (size_t)(m - text) + sl;
            }
            if (p < end && frags_push(&next, p, end - p, -1))
                goto nomem;
        }
        if (hit) {
            hy_tok_frags_t tmp = *f;
            *f = next;
            next = tmp;
        }
    }
    goto out;
nomem:
    rc = HY_ENOMEM;
out:
    free(next.v);
    return rc;
}

static int encode_ids(const hy_tok_t *t, const char *text, size_t len, bool add_special,
                      bool parse_special, hy_tok_ids_t *out, char *err)
{
    hy_tok_frags_t f = {0};
    hy_tok_work_t w = {0};
    bool prev_special = true; /* SPM: the text start counts as after a special */
    int rc;

    if (!text && len)
        return hy_err(err, HY_EINVAL, "tokenize: NULL text");
    rc = partition(t, text, len, parse_special, &f);
    if (rc)
        goto out;
    if (add_special && t->add_bos && (rc = ids_push(out, t->bos)))
        goto out;
    for (size_t i = 0; i < f.n; i++) {
        if (f.v[i].tok >= 0) {
            rc = ids_push(out, f.v[i].tok);
            prev_special = true;
        } else if (t->spm) {
            rc = spm_fragment(t, &w, text + f.v[i].off, f.v[i].len,
                              t->add_space_prefix && prev_special, out);
            prev_special = false;
        } else {
            rc = bpe_fragment(t, &w, text + f.v[i].off, f.v[i].len, out);
        }
        if (rc)
            goto out;
    }
    if (add_special && t->add_eos)
        rc = ids_push(out, t->eos);
out:
    if (rc == HY_ENOMEM)
        hy_err(err, rc, "tokenize: out of memory (%zu bytes of text)", len);
    free(f.v);
    free(w.sym);
    free(w.heap);
    free(w.buf);
    hy_tok_rx_work_free(&w.rx);
    return rc;
}

int hy_tok_encode_alloc(const hy_tok_t *t, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t **ids, size_t *n_out, char *err)
{
    hy_tok_ids_t o = {0};
    int rc = encode_ids(t, text, len, add_special, parse_special, &o, err);

    *ids = NULL;
    *n_out = 0;
    if (rc) {
        free(o.v);
        return rc;
    }
    if (!o.v && !(o.v = malloc(sizeof *o.v)))
        return hy_err(err, HY_ENOMEM, "tokenize: out of memory");
    *ids = o.v;
    *n_out = o.n;
    return HY_OK;
}

int hy_tok_encode(const hy_tok_t *t, const char *text, size_t len, bool add_special,
                  bool parse_special, int32_t *ids, size_t cap, size_t *n_out, char *err)
{
    hy_tok_ids_t o = {0};
    int rc = encode_ids(t, text, len, add_special, parse_special, &o, err);

    *n_out = 0;
    if (rc == HY_OK) {
        *n_out = o.n;
        if (o.n > cap)
            rc = hy_err(err, HY_EFULL, "tokenize: %zu tokens do not fit in %zu", o.n, cap);
        else if (o.n)
            memcpy(ids, o.v, o.n * sizeof *ids);
    }
    free(o.v);
    return rc;
}

/* ---- decoding ---------------------------------------------------------- */

int hy_tok_decode(const hy_tok_t *t, const int32_t *ids, size_t n, bool special, char **out,
                  size_t *len, char *err)
{
    size_t total = 0, k = 0;
    bool strip = t->spm && t->add_space_prefix;
    char *buf;

    *out = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (size_t)ids[i] >= t->n_vocab)
            return hy_err(err, HY_ERANGE, "detokenize: token id %d at position %zu out of range 0..%zu",
                          (int)ids[i], i, t->n_vocab - 1);
        total += hy_tok_token_piece(t, ids[i], special).len;
    }
    buf = malloc(total + 1);
    if (!buf)
        return hy_err(err, HY_ENOMEM, "detokenize: out of memory (%zu bytes)", total);
    for (size_t i = 0; i < n; i++) {
        hy_tok_str_t p = hy_tok_token_piece(t, ids[i], special);
        if (p.len == 0)
            continue;
        if (strip) {
            strip = false;
            if (p.ptr[0] == ' ') {
                p.ptr++;
                p.len--;
            }
        }
        memcpy(buf + k, p.ptr, p.len);
        k += p.len;
    }
    buf[k] = 0;
    *out = buf;
    *len = k;
    return HY_OK;
}

void hy_tok_stream_init(hy_tok_stream_t *s, const hy_tok_t *tok, bool special,
                        bool strip_leading_space)
{
    memset(s, 0, sizeof *s);
    s->tok = tok;
    s->special = special;
    s->strip_space = strip_leading_space && tok->spm && tok->add_space_prefix;
}

/* Emits the complete UTF-8 in held + (p, n), keeping a trailing incomplete
 * sequence back; at_end turns that remainder into U+FFFD too. */
static int stream_emit(hy_tok_stream_t *s, const char *p, size_t n, bool at_end,
                       const char **out, size_t *len, char *err)
{
    size_t total = s->n_held + n, i = 0, k = 0;
    unsigned char *in;

    /* Every input byte becomes at most 3 output bytes (U+FFFD). */
    if (hy_tok_grow((void **)&s->buf, &s->cap, total * 3 + 1, 1))
        return hy_err(err, HY_ENOMEM, "detokenize: out of memory");
    in = malloc(total + 1);
    if (!in)
        return hy_err(err, HY_ENOMEM, "detokenize: out of memory");
    memcpy(in, s->held, s->n_held);
    if (n)
        memcpy(in + s->n_held, p, n);
    s->n_held = 0;
    while (i < total) {
        int r = hy_uni_check_utf8(in + i, total - i);
        if (r > 0) {
            memcpy(s->buf + k, in + i, (size_t)r);
            k += (size_t)r;
            i += (size_t)r;
        } else if (r < 0 || at_end) {
            memcpy(s->buf + k, "\xef\xbf\xbd", 3);
            k += 3;
            i += r < 0 ? (size_t)-r : total - i;
        } else {
            s->n_held = total - i; /* < 4: a valid prefix of one sequence */
            memcpy(s->held, in + i, s->n_held);
            break;
        }
    }
    free(in);
    *out = s->buf;
    *len = k;
    return HY_OK;
}

int hy_tok_stream_feed(hy_tok_stream_t *s, int32_t id, const char **out, size_t *len,
                       char *err)
{
    hy_tok_str_t p;

    *out = "";
    *len = 0;
    if (id < 0 || (size_t)id >= s->tok->n_vocab)
        return hy_err(err, HY_ERANGE, "detokenize: token id %d out of range 0..%zu", (int)id,
                      s->tok->n_vocab - 1);
    p = hy_tok_token_piece(s->tok, id, s->special);
    if (p.len && s->strip_space) {
        s->strip_space = false;
        if (p.ptr[0] == ' ') {
            p.ptr++;
            p.len--;
        }
    }
    return stream_emit(s, p.ptr, p.len, false, out, len, err);
}

int hy_tok_stream_flush(hy_tok_stream_t *s, const char **out, size_t *len, char *err)
{
    return stream_emit(s, NULL, 0, true, out, len, err);
}

void hy_tok_stream_free(hy_tok_stream_t *s)
{
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}
