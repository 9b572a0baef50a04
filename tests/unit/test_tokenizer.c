/*
 * test_tokenizer.c - the tokenizer against llama.cpp's reference vectors
 * (ggml-vocab-*.gguf with .inp/.out, kept outside the repository in
 * ../shared/testdata/tokenizer; skipped when absent), plus round trips,
 * streaming detokenization, special-token parsing, pre-tokenizer splits
 * on hand-built vocabularies and metadata errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gguf.h"
#include "model/tokenizer.h"
#include "model/unicode.h"
#include "test.h"
#include "gguf_writer.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;

    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        if (buf) {
            buf[n] = 0;
            *len = (size_t)n;
        }
    }
    fclose(f);
    return buf;
}

static bool utf8_valid(const char *s, size_t n)
{
    size_t i = 0;

    while (i < n) {
        int r = hy_uni_check_utf8((const unsigned char *)s + i, n - i);
        if (r <= 0)
            return false;
        i += (size_t)r;
    }
    return true;
}

/* Runs every vector of one vocabulary; one TAP line for the ids and one
 * for the round trip. */
static void check_vocab(const char *name, bool round_trip)
{
    char path[256], err[HY_ERR_LEN] = "";
    static const char sep[] = "\n__ggml_vocab_test__\n";
    hy_gguf_t *g = NULL;
    hy_tok_t *tok = NULL;
    char *inp = NULL, *outp = NULL, *p, *q;
    size_t inp_len, out_len;
    int n = 0, ok = 0, rt_ok = 0, n_out = 0;
    char first_bad[300] = "", first_rt_bad[200] = "";

    snprintf(path, sizeof path, "../shared/testdata/tokenizer/ggml-vocab-%s.gguf", name);
    if (hy_gguf_open(&g, hy_t_srcpath(path), err) != HY_OK) {
        HY_T_OK(1, "# SKIP %s: %s", name, err);
        return;
    }
    if (hy_tok_load(&tok, g, err) != HY_OK) {
        HY_T_OK(0, "%s: load: %s", name, err);
        goto out;
    }
    snprintf(path, sizeof path, "../shared/testdata/tokenizer/ggml-vocab-%s.gguf.inp", name);
    inp = slurp(hy_t_srcpath(path), &inp_len);
    snprintf(path, sizeof path, "../shared/testdata/tokenizer/ggml-vocab-%s.gguf.out", name);
    outp = slurp(hy_t_srcpath(path), &out_len);
    if (!inp || !outp) {
        HY_T_OK(0, "%s: cannot read .inp/.out", name);
        goto out;
    }
    for (size_t i = 0; i < out_len; i++)
        n_out += outp[i] == '\n';
    p = inp;
    q = outp;
    while ((size_t)(p - inp) < inp_len) {
        char *e = strstr(p, sep), *line_end, *tokp;
        int32_t *ids = NULL;
        size_t n_ids = 0, k = 0;
        bool match = true;
        if (!e)
            break;
        line_end = strchr(q, '\n');
        if (!line_end)
            line_end = q + strlen(q);
        *line_end = 0;
        n++;
        if (hy_tok_encode_alloc(tok, p, (size_t)(e - p), false, false, &ids, &n_ids, err)) {
            match = false;
        } else {
            tokp = q;
            while (*tokp) {
                char *endp;
                long v = strtol(tokp, &endp, 10);
                if (endp == tokp)
                    break;
                if (k >= n_ids || ids[k] != v)
                    match = false;
                k++;
                tokp = endp;
            }
            if (k != n_ids)
                match = false;
        }
        if (match) {
            ok++;
        } else if (!first_bad[0]) {
            size_t w = 0;
            w += (size_t)snprintf(first_bad, sizeof first_bad, "#%d \"%.*s\" got", n,
                                  (int)HY_MIN(e - p, 40), p);
            for (size_t i = 0; i < n_ids && i < 12 && w < sizeof first_bad - 16; i++)
                w += (size_t)snprintf(first_bad + w, sizeof first_bad - w, " %d", (int)ids[i]);
            snprintf(first_bad + w, sizeof first_bad - w, " want %.60s", q);
        }
        if (round_trip && ids) {
            char *dec = NULL;
            size_t dl = 0;
            if (hy_tok_decode(tok, ids, n_ids, false, &dec, &dl, err) == HY_OK &&
                dl == (size_t)(e - p) && memcmp(dec, p, dl) == 0)
                rt_ok++;
            else if (!first_rt_bad[0])
                snprintf(first_rt_bad, sizeof first_rt_bad, "#%d \"%.*s\" -> \"%.*s\"", n,
                         (int)HY_MIN(e - p, 40), p, (int)HY_MIN(dl, 40), dec ? dec : "");
            free(dec);
        }
        free(ids);
        p = e + sizeof sep - 1;
        q = line_end + ((size_t)(line_end - outp) < out_len ? 1 : 0);
    }
    /* The files hold 46 strings (the README's 47 counts the empty piece
     * after the last separator). */
    HY_T_OK(n >= 46 && n == n_out && ok == n, "%s: %d/%d vectors match llama.cpp%s%s", name, ok, n,
            first_bad[0] ? "; first mismatch " : "", first_bad);
    if (round_trip)
        HY_T_OK(rt_ok == n && n > 0, "%s: decode(encode(x)) == x for %d/%d%s%s", name, rt_ok, n,
                first_rt_bad[0] ? "; first failure " : "", first_rt_bad);
out:
    free(inp);
    free(outp);
    hy_tok_free(tok);
    hy_gguf_close(g);
}

static hy_tok_t *load_named(const char *name, hy_gguf_t **g)
{
    char path[256], err[HY_ERR_LEN];
    hy_tok_t *tok = NULL;

    snprintf(path, sizeof path, "../shared/testdata/tokenizer/ggml-vocab-%s.gguf", name);
    if (hy_gguf_open(g, hy_t_srcpath(path), err) != HY_OK)
        return NULL;
    if (hy_tok_load(&tok, *g, err) != HY_OK) {
        hy_gguf_close(*g);
        *g = NULL;
        return NULL;
    }
    return tok;
}

/* Emoji and CJK (4- and 3-byte sequences) decoded one id at a time: every
 * chunk the stream hands out must be valid UTF-8 on its own, and the
 * chunks must add up to the text. */
static void check_stream(const char *name)
{
    static const char text[] = "Hi \xf0\x9f\x98\x80\xf0\x9f\xa6\x99 \xe4\xbd\xa0\xe5\xa5\xbd"
                               "\xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f"
                               "\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 \xe3\x81\x93\xf0\x9f\x8e\x89";
    char err[HY_ERR_LEN], all[512];
    hy_gguf_t *g = NULL;
    hy_tok_t *tok = load_named(name, &g);
    int32_t *ids = NULL;
    size_t n = 0, total = 0, bytes_split = 0;
    bool valid = true;
    hy_tok_stream_t s;
    const char *o;
    size_t ol;

    if (!tok) {
        HY_T_OK(1, "# SKIP stream %s: vocabulary absent", name);
        return;
    }
    hy_tok_encode_alloc(tok, text, sizeof text - 1, false, false, &ids, &n, err);
    hy_tok_stream_init(&s, tok, false, true);
    for (size_t i = 0; i < n; i++) {
        hy_tok_str_t p = hy_tok_token_piece(tok, ids[i], false);
        if (!utf8_valid(p.ptr, p.len))
            bytes_split++; /* this token alone is a broken sequence */
        if (hy_tok_stream_feed(&s, ids[i], &o, &ol, err) || !utf8_valid(o, ol))
            valid = false;
        if (total + ol < sizeof all)
            memcpy(all + total, o, ol);
        total += ol;
    }
    if (hy_tok_stream_flush(&s, &o, &ol, err) || ol != 0)
        valid = false;
    HY_T_OK(valid && bytes_split > 0 && total == sizeof text - 1 && memcmp(all, text, total) == 0,
            "%s stream: %zu ids (%zu split inside a character), every chunk valid UTF-8, "
            "output == input", name, n, bytes_split);

    /* A truncated sequence at the end comes out as U+FFFD on flush. */
    hy_tok_stream_free(&s);
    hy_tok_stream_init(&s, tok, false, false);
    {
        int32_t b = hy_tok_find(tok, "\xc3\xb0", 2); /* GPT-2 code point of 0xF0 */
        if (hy_tok_is_spm(tok))
            b = hy_tok_find(tok, "<0xF0>", 6);
        bool ok = b >= 0 && hy_tok_stream_feed(&s, b, &o, &ol, err) == HY_OK && ol == 0 &&
                  hy_tok_stream_flush(&s, &o, &ol, err) == HY_OK && ol == 3 &&
                  memcmp(o, "\xef\xbf\xbd", 3) == 0;
        HY_T_OK(ok, "%s stream: dangling lead byte held back, flushed as U+FFFD", name);
    }
    hy_tok_stream_free(&s);
    free(ids);
    hy_tok_free(tok);
    hy_gguf_close(g);
}

/* parse_special on and off, BOS, EOG, pieces of control tokens. */
static void check_special(void)
{
    char err[HY_ERR_LEN];
    hy_gguf_t *g = NULL;
    hy_tok_t *tok = load_named("starcoder", &g);
    static const char text[] = "a<|endoftext|>b";
    int32_t *on = NULL, *off = NULL;
    size_t n_on = 0, n_off = 0;
    int32_t eot;

    if (!tok) {
        HY_T_OK(1, "# SKIP special tokens: starcoder vocabulary absent");
        return;
    }
    eot = hy_tok_find(tok, "<|endoftext|>", 13);
    hy_tok_encode_alloc(tok, text, sizeof text - 1, false, true, &on, &n_on, err);
    hy_tok_encode_alloc(tok, text, sizeof text - 1, false, false, &off, &n_off, err);
    HY_T_OK(eot >= 0 && n_on == 3 && on[1] == eot && n_off > 3,
            "parse_special: on gives [a, <|endoftext|>=%d, b] (%zu ids), off spells it (%zu ids)",
            (int)eot, n_on, n_off);
    HY_T_OK(hy_tok_is_eog(tok, eot) && !hy_tok_is_eog(tok, on ? on[0] : 0),
            "<|endoftext|> is end-of-generation, 'a' is not");
    HY_T_OK(hy_tok_token_piece(tok, eot, false).len == 0 &&
                hy_tok_token_piece(tok, eot, true).len == 13,
            "control token renders only when asked");
    free(on);
    free(off);
    hy_tok_free(tok);
    hy_gguf_close(g);

    tok = load_named("llama-spm", &g);
    if (tok) {
        int32_t ids[8];
        size_t n = 0;
        int rc = hy_tok_encode(tok, "Hello", 5, true, false, ids, 8, &n, err);
        char *dec = NULL;
        size_t dl = 0;
        HY_T_OK(rc == HY_OK && n >= 2 && ids[0] == hy_tok_bos(tok) && hy_tok_bos(tok) == 1,
                "spm: BOS 1 prepended when add_special");
        rc = hy_tok_decode(tok, ids, n, false, &dec, &dl, err);
        HY_T_OK(rc == HY_OK && dl == 5 && memcmp(dec, "Hello", 5) == 0,
                "spm: decode strips the prefix space: \"%s\"", dec ? dec : "");
        free(dec);
        rc = hy_tok_encode(tok, "Hello world, how are you", 24, true, false, ids, 2, &n, err);
        HY_T_OK(rc == HY_EFULL && n > 2, "encode into a small buffer: HY_EFULL, %zu needed", n);
        hy_tok_free(tok);
        hy_gguf_close(g);
    }
}

/* A hand-built byte-level vocabulary: the 256 byte tokens plus a few
 * merges, to pin down the pre-tokenizer splits and merge order. */
static hy_tok_t *tiny_bpe(const char *pre, char *err, int *rc)
{
    static char store[256][4];
    static const char *extra[] = {"\xc4\xa0" "1", "12", "123", "ab", "abc", "\xc4\xa0" "a"};
    static const char *merges[] = {"1 2", "12 3", "a b", "ab c", "\xc4\xa0 1", "\xc4\xa0 a"};
    hy_tok_str_t toks[256 + 6], mg[6];
    hy_tok_spec_t sp = {0};
    hy_tok_t *tok = NULL;

    for (int b = 0; b < 256; b++) {
        size_t l = hy_uni_encode(hy_uni_byte_to_cp((uint8_t)b), store[b]);
        toks[b].ptr = store[b];
        toks[b].len = l;
    }
    for (int i = 0; i < 6; i++) {
        toks[256 + i].ptr = extra[i];
        toks[256 + i].len = strlen(extra[i]);
        mg[i].ptr = merges[i];
        mg[i].len = strlen(merges[i]);
    }
    sp.model = "gpt2";
    sp.pre = pre;
    sp.n_vocab = 262;
    sp.tokens = toks;
    sp.n_merges = 6;
    sp.merges = mg;
    sp.bos = sp.eos = sp.eot = sp.eom = sp.pad = sp.unk = -1;
    sp.add_bos = 0;
    sp.add_eos = sp.add_space_prefix = -1;
    *rc = hy_tok_build(&tok, &sp, err);
    return tok;
}

static void check_pre_splits(void)
{
    char err[HY_ERR_LEN];
    int rc;
    int32_t ids[64];
    size_t n;
    hy_tok_t *gpt2 = tiny_bpe("gpt-2", err, &rc);
    hy_tok_t *sc = tiny_bpe("smollm", err, &rc);
    hy_tok_t *l3 = tiny_bpe("llama-bpe", err, &rc);

    HY_T_OK(gpt2 && sc && l3, "hand-built BPE vocabularies load (%s)", rc ? err : "ok");
    if (!gpt2 || !sc || !l3)
        goto out;
    /* gpt2: " 123" is one word -> "Ġ1" + "2" + "3"? merges go by rank:
     * "1 2" (0) first, then "12 3" (1): Ġ,123 since "Ġ 1" (4) lost the 1. */
    hy_tok_encode(gpt2, " 123", 4, false, false, ids, 64, &n, err);
    HY_T_OK(n == 2 && ids[0] == hy_tok_find(gpt2, "\xc4\xa0", 2) && ids[1] == 258,
            "gpt2: lowest rank merges first (\" 123\" -> [\xc4\xa0, 123])");
    /* smollm: digits split one by one before BPE, so no "12". */
    hy_tok_encode(sc, "123", 3, false, false, ids, 64, &n, err);
    HY_T_OK(n == 3 && ids[0] == hy_tok_find(sc, "1", 1) && ids[2] == hy_tok_find(sc, "3", 1),
            "smollm: \\p{N} splits digits individually (%zu ids)", n);
    /* llama3: \p{N}{1,3} keeps "123" together but splits the 4th digit;
     * ignore_merges emits whole-word tokens directly. */
    hy_tok_encode(l3, "1231", 4, false, false, ids, 64, &n, err);
    HY_T_OK(n == 2 && ids[0] == 258 && ids[1] == hy_tok_find(l3, "1", 1),
            "llama3: digits in groups of three");
    hy_tok_encode(l3, "abc's", 5, false, false, ids, 64, &n, err);
    HY_T_OK(n == 3 && ids[0] == 260, "llama3: contraction 's split off after a word");
    hy_tok_encode(gpt2, "a  a", 4, false, false, ids, 64, &n, err);
    HY_T_OK(n == 3 && ids[1] == hy_tok_find(gpt2, "\xc4\xa0", 2) && ids[2] == 261,
            "gpt2: \\s+(?!\\S) leaves the last space to the next word");
out:
    hy_tok_free(gpt2);
    hy_tok_free(sc);
    hy_tok_free(l3);
}

static void check_errors(void)
{
    char err[HY_ERR_LEN] = "";
    hy_tok_t *tok = NULL;
    hy_gguf_t *g = NULL;
    int rc;
    hy_tw_t w;
    static const char *toks[] = {"a", "b", "ab"};
    static const char *bad_merge[] = {"ab"};
    static const char *good_merge[] = {"a b"};

    /* tokens array missing */
    hy_tw_init(&w);
    hy_tw_header(&w, 3, 0, 1);
    hy_tw_kv_str(&w, "tokenizer.ggml.model", "gpt2");
    rc = hy_gguf_open_buffer(&g, w.buf, w.len, "t.gguf", err);
    if (rc == HY_OK)
        rc = hy_tok_load(&tok, g, err);
    HY_T_OK(rc == HY_ENOENT && strstr(err, "tokenizer.ggml.tokens"),
            "missing tokens array: %s", err);
    hy_gguf_close(g);
    g = NULL;
    hy_tw_free(&w);

    /* merge without a space */
    hy_tw_init(&w);
    hy_tw_header(&w, 3, 0, 3);
    hy_tw_kv_str(&w, "tokenizer.ggml.model", "gpt2");
    hy_tw_kv_arr_str(&w, "tokenizer.ggml.tokens", toks, 3);
    hy_tw_kv_arr_str(&w, "tokenizer.ggml.merges", bad_merge, 1);
    rc = hy_gguf_open_buffer(&g, w.buf, w.len, "t.gguf", err);
    if (rc == HY_OK)
        rc = hy_tok_load(&tok, g, err);
    HY_T_OK(rc == HY_EFORMAT && strstr(err, "tokenizer.ggml.merges[0]"),
            "merge without a space: %s", err);
    hy_gguf_close(g);
    g = NULL;
    hy_tw_free(&w);

    /* token id out of range */
    hy_tw_init(&w);
    hy_tw_header(&w, 3, 0, 4);
    hy_tw_kv_str(&w, "tokenizer.ggml.model", "gpt2");
    hy_tw_kv_arr_str(&w, "tokenizer.ggml.tokens", toks, 3);
    hy_tw_kv_arr_str(&w, "tokenizer.ggml.merges", good_merge, 1);
    hy_tw_kv_u32(&w, "tokenizer.ggml.eos_token_id", 3);
    rc = hy_gguf_open_buffer(&g, w.buf, w.len, "t.gguf", err);
    if (rc == HY_OK)
        rc = hy_tok_load(&tok, g, err);
    HY_T_OK(rc == HY_ERANGE && strstr(err, "eos_token_id"), "eos id out of range: %s", err);
    hy_gguf_close(g);
    g = NULL;
    hy_tw_free(&w);

    /* unknown pre-tokenizer, wrong token_type count */
    hy_tw_init(&w);
    hy_tw_header(&w, 3, 0, 4);
    hy_tw_kv_str(&w, "tokenizer.ggml.model", "gpt2");
    hy_tw_kv_str(&w, "tokenizer.ggml.pre", "no-such-pre");
    hy_tw_kv_arr_str(&w, "tokenizer.ggml.tokens", toks, 3);
    hy_tw_kv_arr_str(&w, "tokenizer.ggml.merges", good_merge, 1);
    rc = hy_gguf_open_buffer(&g, w.buf, w.len, "t.gguf", err);
    if (rc == HY_OK)
        rc = hy_tok_load(&tok, g, err);
    HY_T_OK(rc == HY_EUNSUPPORTED && strstr(err, "tokenizer.ggml.pre"),
            "unknown pre-tokenizer: %s", err);
    hy_gguf_close(g);
    g = NULL;
    hy_tw_free(&w);

    hy_tw_init(&w);
    hy_tw_header(&w, 3, 0, 3);
    hy_tw_kv_str(&w, "tokenizer.ggml.model", "llama");
    hy_tw_kv_arr_str(&w, "tokenizer.ggml.tokens", toks, 3);
    hy_tw_kv_arr_i32(&w, "tokenizer.ggml.token_type", (const int32_t[]){1, 1}, 2);
    rc = hy_gguf_open_buffer(&g, w.buf, w.len, "t.gguf", err);
    if (rc == HY_OK)
        rc = hy_tok_load(&tok, g, err);
    HY_T_OK(rc == HY_EFORMAT && strstr(err, "tokenizer.ggml.token_type"),
            "token_type count mismatch: %s", err);
    hy_gguf_close(g);
    g = NULL;
    hy_tw_free(&w);
    hy_tok_free(tok);
}

/* 100 KB of English through the gpt-2 vocabulary in one call.  The time
 * is printed for whoever tunes the encoder (the budget is 50 ms), not
 * asserted: on a loaded or sanitizer build a duration proves nothing. */
static void check_speed(void)
{
    char err[HY_ERR_LEN];
    hy_gguf_t *g = NULL;
    hy_tok_t *tok = load_named("gpt-2", &g);
    static const char para[] =
        "The quick brown fox jumps over the lazy dog. It's 2024, and we've got 1,234 "
        "reasons to test tokenizers: speed, correctness (exactness!), and Unicode. ";
    size_t n = 100 * 1024, len = 0, n_ids = 0;
    char *text;
    int32_t *ids = NULL;
    struct timespec a, b;
    double ms;

    if (!tok) {
        HY_T_OK(1, "# SKIP speed: gpt-2 vocabulary absent");
        return;
    }
    text = malloc(n);
    while (len + sizeof para - 1 <= n) {
        memcpy(text + len, para, sizeof para - 1);
        len += sizeof para - 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &a);
    hy_tok_encode_alloc(tok, text, len, false, true, &ids, &n_ids, err);
    clock_gettime(CLOCK_MONOTONIC, &b);
    ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
    HY_T_OK(n_ids > len / 8, "encode %zu bytes: %zu ids (%.1f ms)", len, n_ids, ms);
    free(ids);
    free(text);
    hy_tok_free(tok);
    hy_gguf_close(g);
}

/* The default model's vocabulary (pre "smollm"); expected ids from
 * Hugging Face transformers' GGUF tokenizer for the same file. */
static void check_smollm(void)
{
    static const char text[] = "Hello world 12345, <|im_start|>user\nWhat's up?  \n\n "
                               "\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\xa6\x99 na\xc3\xafve";
    static const int32_t want[] = {19556, 905, 216, 33, 34, 35, 36, 37, 28, 216, 1, 4093, 198,
                                   1780, 506, 614, 47, 256, 1116, 216, 18645, 250, 48392, 138,
                                   15107, 116, 243, 15486, 46494};
    char err[HY_ERR_LEN] = "";
    hy_gguf_t *g = NULL;
    hy_tok_t *tok = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    bool same;

    if (hy_gguf_open(&g, hy_t_srcpath("models/SmolLM2-135M-Instruct.Q4_1.gguf"), err)) {
        HY_T_OK(0, "smollm: %s (scripts/fetch-default-model)", err);
        return;
    }
    if (hy_tok_load(&tok, g, err) == HY_OK)
        hy_tok_encode_alloc(tok, text, sizeof text - 1, false, true, &ids, &n, err);
    same = n == HY_ARRAY_LEN(want) && memcmp(ids, want, sizeof want) == 0;
    HY_T_OK(same && hy_tok_is_eog(tok, hy_tok_find(tok, "<|im_end|>", 10)),
            "smollm (SmolLM2 GGUF): %zu ids match transformers, <|im_end|> ends generation%s%s",
            n, err[0] ? ": " : "", err);
    free(ids);
    hy_tok_free(tok);
    hy_gguf_close(g);
}

int main(void)
{
    check_vocab("gpt-2", true);
    check_vocab("starcoder", true);
    check_vocab("mpt", true);
    check_vocab("llama-spm", false);
    check_stream("gpt-2");
    check_stream("llama-spm");
    check_special();
    check_pre_splits();
    check_errors();
    check_speed();
    check_smollm();
    return hy_t_done();
}
