/*
 * grammar_cache.c - the request spec's wire format and the engine's cache
 * of compiled grammars (see grammar_cache.h).  The cache is a small array
 * searched linearly: it holds tens of entries and a lookup is one SHA-256
 * of the text plus compares, negligible next to a decode step.  Eviction
 * drops the least recently used entry; matchers still running on it keep
 * their own reference, so eviction never pulls a grammar from under them.
 * The model's vocabulary as the engine's grammars see it is built here too:
 * it is the one place grammar/ calls the tokenizer, so the compiler and the
 * matcher link without it (the API's validation, its fuzz target).
 */
#include "grammar/grammar_cache.h"
#include "common/sha256.h"
#include "grammar/grammar_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- the model's vocabulary ----------------------------------------------- */

int hy_gvocab_create(hy_gvocab_t **out, const hy_tok_t *tok, char *err)
{
    int32_t n = (int32_t)hy_tok_n_vocab(tok);
    hy_tok_str_t *pieces = malloc(sizeof *pieces * (size_t)n);
    bool *eog = malloc(sizeof *eog * (size_t)n);
    int rc;

    if (pieces == NULL || eog == NULL) {
        free(pieces);
        free(eog);
        return hy_err(err, HY_ENOMEM, "grammar: out of memory");
    }
    for (int32_t i = 0; i < n; i++) {
        hy_tok_type_t ty = hy_tok_type(tok, i);

        eog[i] = hy_tok_is_eog(tok, i);
        /* special and control tokens never stand for grammar text */
        if (ty == HY_TOK_TYPE_CONTROL || ty == HY_TOK_TYPE_UNKNOWN ||
            ty == HY_TOK_TYPE_UNUSED || ty == HY_TOK_TYPE_UNDEFINED)
            pieces[i] = (hy_tok_str_t){ "", 0 };
        else
            pieces[i] = hy_tok_token_piece(tok, i, false);
    }
    rc = hy_gvocab_create_pieces(out, n, pieces, eog, err);
    free(pieces);
    free(eog);
    return rc;
}

/* ---- spec ------------------------------------------------------------------- */

static void put_u32(char *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static uint32_t get_u32(const char *p)
{
    uint32_t v;

    memcpy(&v, p, 4);
    return v;
}

int hy_grammar_spec_pack(const char *gbnf, size_t len, const hy_gmatch_opts_t *o, char **out,
                         size_t *out_len, char *err)
{
    int32_t nt = o ? o->n_triggers : 0, i;
    size_t total = 4 + 4 + 4 + len, pos = 0;
    char *b;

    *out = NULL;
    if (len > HY_GRAMMAR_MAX_TEXT)
        return hy_err(err, HY_ERANGE, "grammar of %zu bytes: at most %d", len,
                      HY_GRAMMAR_MAX_TEXT);
    if (nt < 0 || nt > HY_GRAMMAR_MAX_TRIGGERS)
        return hy_err(err, HY_ERANGE, "%d grammar triggers: at most %d", (int)nt,
                      HY_GRAMMAR_MAX_TRIGGERS);
    for (i = 0; i < nt; i++) {
        if (o->trigger_len[i] == 0 || o->trigger_len[i] > HY_GRAMMAR_MAX_TRIGGER_LEN)
            return hy_err(err, HY_ERANGE, "grammar trigger %d: %zu bytes, must be 1..%d", (int)i,
                          o->trigger_len[i], HY_GRAMMAR_MAX_TRIGGER_LEN);
        total += 4 + o->trigger_len[i];
    }
    if ((b = malloc(total)) == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    memcpy(b, HY_GRAMMAR_SPEC_MAGIC, 4);
    pos = 4;
    put_u32(b + pos, (uint32_t)nt);
    pos += 4;
    for (i = 0; i < nt; i++) {
        put_u32(b + pos, (uint32_t)o->trigger_len[i]);
        memcpy(b + pos + 4, o->triggers[i], o->trigger_len[i]);
        pos += 4 + o->trigger_len[i];
    }
    put_u32(b + pos, (uint32_t)len);
    memcpy(b + pos + 4, gbnf, len);
    *out = b;
    *out_len = total;
    return HY_OK;
}

int hy_grammar_spec_unpack(const void *buf, size_t len, const char **gbnf, size_t *gbnf_len,
                           hy_gmatch_opts_t *o, char *err)
{
    const char *b = buf;
    size_t pos = 8;
    uint32_t nt, n;

    memset(o, 0, sizeof *o);
    if (len < 12 || memcmp(b, HY_GRAMMAR_SPEC_MAGIC, 4) != 0)
        return hy_err(err, HY_EFORMAT, "grammar spec: bad header (%zu bytes)", len);
    nt = get_u32(b + 4);
    if (nt > HY_GRAMMAR_MAX_TRIGGERS)
        return hy_err(err, HY_EFORMAT, "grammar spec: %u triggers", (unsigned)nt);
    for (uint32_t i = 0; i < nt; i++) {
        if (pos + 4 > len || (n = get_u32(b + pos)) == 0 || n > HY_GRAMMAR_MAX_TRIGGER_LEN ||
            pos + 4 + n > len)
            return hy_err(err, HY_EFORMAT, "grammar spec: trigger %u is truncated", (unsigned)i);
        o->triggers[i] = b + pos + 4;
        o->trigger_len[i] = n;
        pos += 4 + n;
    }
    o->n_triggers = (int32_t)nt;
    if (pos + 4 > len || (n = get_u32(b + pos)) != len - pos - 4)
        return hy_err(err, HY_EFORMAT, "grammar spec: the text length does not match");
    *gbnf = b + pos + 4;
    *gbnf_len = n;
    return HY_OK;
}

/* ---- cache ------------------------------------------------------------------- */

typedef struct {
    uint8_t hash[HY_SHA256_LEN];
    char *text;
    size_t len;
    hy_grammar_t *g;
    uint64_t used;
} entry_t;

struct hy_grammar_cache {
    const hy_gvocab_t *vocab;
    entry_t *e;
    int32_t n, cap;
    uint64_t clock;
    hy_grammar_cache_stats_t st;
};

int hy_grammar_cache_create(hy_grammar_cache_t **out, const hy_gvocab_t *vocab, int32_t capacity,
                            char *err)
{
    hy_grammar_cache_t *c = calloc(1, sizeof *c);

    *out = NULL;
    if (c == NULL || (c->e = calloc((size_t)HY_MAX(capacity, 1), sizeof *c->e)) == NULL) {
        free(c);
        return hy_err(err, HY_ENOMEM, "out of memory");
    }
    c->vocab = vocab;
    c->cap = HY_MAX(capacity, 1);
    *out = c;
    return HY_OK;
}

void hy_grammar_cache_free(hy_grammar_cache_t *c)
{
    if (c == NULL)
        return;
    for (int32_t i = 0; i < c->n; i++) {
        hy_grammar_unref(c->e[i].g);
        free(c->e[i].text);
    }
    free(c->e);
    free(c);
}

int hy_grammar_cache_get(hy_grammar_cache_t *c, const char *gbnf, size_t len, hy_grammar_t **out,
                         bool *hit, char *err)
{
    uint8_t h[HY_SHA256_LEN];
    hy_sha256_t s;
    entry_t *slot;
    hy_grammar_t *g = NULL;
    char *text;
    double t0;
    int rc;

    *out = NULL;
    *hit = false;
    c->st.lookups++;
    hy_sha256_init(&s);
    hy_sha256_update(&s, gbnf, len);
    hy_sha256_final(&s, h);
    for (int32_t i = 0; i < c->n; i++) {
        entry_t *e = &c->e[i];

        if (memcmp(e->hash, h, sizeof h) == 0 && e->len == len && memcmp(e->text, gbnf, len) == 0) {
            e->used = ++c->clock;
            c->st.hits++;
            *hit = true;
            *out = hy_grammar_ref(e->g);
            return HY_OK;
        }
    }
    t0 = hy_grammar_now_ms();
    if ((rc = hy_grammar_compile(&g, gbnf, len, c->vocab, err)) != HY_OK)
        return rc;
    c->st.compiles++;
    c->st.compile_ms += hy_grammar_now_ms() - t0;
    if ((text = malloc(len + 1)) == NULL) {
        hy_grammar_unref(g);
        return hy_err(err, HY_ENOMEM, "out of memory");
    }
    memcpy(text, gbnf, len);
    text[len] = '\0';
    if (c->n < c->cap) {
        slot = &c->e[c->n++];
    } else {
        slot = &c->e[0];
        for (int32_t i = 1; i < c->n; i++)
            if (c->e[i].used < slot->used)
                slot = &c->e[i];
        hy_grammar_unref(slot->g);
        free(slot->text);
    }
    memcpy(slot->hash, h, sizeof h);
    slot->text = text;
    slot->len = len;
    slot->g = g;
    slot->used = ++c->clock;
    *out = hy_grammar_ref(g);
    return HY_OK;
}

void hy_grammar_cache_stats(const hy_grammar_cache_t *c, hy_grammar_cache_stats_t *out)
{
    *out = c->st;
    out->entries = c->n;
}
