/*
 * test_tokenizer.c - the tokenizer against llama.cpp's reference vectors
 * (ggml-vocab-*.gguf with .inp/.out in tests/data/tokenizer; a missing
 * file is a failure), plus round trips,
 * streaming detokenization, special-token parsing, pre-tokenizer splits
 * on hand-built vocabularies and metadata errors.
 */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gguf.h"
#include "model/tokenizer.h"
#include "model/tokenizer_pre.h"
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

/* Runs every vector of inp_rel (texts) against out_rel (ids, one line per
 * text) with tok; one TAP line for the ids and, if asked, one for the
 * round trip.  Returns the number of vectors. */
static int check_vectors(const char *label, hy_tok_t *tok, const char *inp_rel,
                         const char *out_rel, bool round_trip)
{
    char err[HY_ERR_LEN] = "";
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *inp = NULL, *outp = NULL, *p, *q;
    size_t inp_len, out_len;
    int n = 0, ok = 0, rt_ok = 0, n_out = 0, n_aborts = 0;
    char first_bad[300] = "", first_rt_bad[200] = "";

    inp = slurp(hy_t_srcpath(inp_rel), &inp_len);
    outp = slurp(hy_t_srcpath(out_rel), &out_len);
    if (!inp || !outp) {
        HY_T_OK(0, "%s: cannot read %s or %s", label, inp_rel, out_rel);
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
        } else if (q[0] == '#') {
            n_aborts++; /* llama.cpp aborts on this text: nothing to compare */
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
    HY_T_OK(n > 0 && n == n_out && ok == n && n_aborts < n,
            "%s: %d/%d vectors match llama.cpp%s%s%s", label, ok - n_aborts, n - n_aborts,
            n_aborts ? " (it aborts on the others)" : "", first_bad[0] ? "; first mismatch " : "",
            first_bad);
    if (round_trip)
        HY_T_OK(rt_ok == n && n > 0, "%s: decode(encode(x)) == x for %d/%d%s%s", label, rt_ok, n,
                first_rt_bad[0] ? "; first failure " : "", first_rt_bad);
out:
    free(inp);
    free(outp);
    return n - n_aborts;
}

/* llama.cpp's own vectors for one of its reference vocabularies (46
 * strings each; the README's 47 counts the empty piece after the last
 * separator). */
static void check_vocab(const char *name, bool round_trip)
{
    char path[256], inp[300], outp[300], err[HY_ERR_LEN] = "";
    hy_gguf_t *g = NULL;
    hy_tok_t *tok = NULL;

    snprintf(path, sizeof path, "tests/data/tokenizer/ggml-vocab-%s.gguf", name);
    if (hy_gguf_open(&g, hy_t_srcpath(path), err) != HY_OK) {
        HY_T_OK(0, "%s: %s", name, err);
        return;
    }
    if (hy_tok_load(&tok, g, err) != HY_OK) {
        HY_T_OK(0, "%s: load: %s", name, err);
    } else {
        snprintf(inp, sizeof inp, "%s.inp", path);
        snprintf(outp, sizeof outp, "%s.out", path);
        HY_T_OK(check_vectors(name, tok, inp, outp, round_trip) >= 46, "%s: all 46 strings read",
                name);
    }
    hy_tok_free(tok);
    hy_gguf_close(g);
}

/* Patterns the regex matcher refuses, each with the reason and offset. */
static void check_rx_errors(void)
{
    static const struct {
        const char *rx, *why;
    } bad[] = {
        {"(ab", "missing )"},
        {"ab)", "unbalanced )"},
        {"\\p{Han}+", "unknown \\p{..} category"},
        {"a+?", "lazy and possessive"},
        {"(a*)*", "can match empty"},
        {"\\p{L}|\xc3\xa9", "non-ASCII characters beside a \\p{..}"},
        {"[z-a]", "range out of order"},
        {"a{3,1}", "bad {n,m}"},
        {"\\q", "unsupported escape"},
        {"[\\S]", "inside [...]"},
        {".", "unsupported or misplaced"},
    };
    int ok = 0;

    for (size_t i = 0; i < HY_ARRAY_LEN(bad); i++) {
        char err[HY_ERR_LEN] = "";
        hy_tok_rx_t *rx = NULL;
        int rc = hy_tok_rx_compile(&rx, bad[i].rx, err);
        if (rc == HY_EINVAL && rx == NULL && strstr(err, bad[i].why) && strstr(err, "at offset"))
            ok++;
        else
            HY_T_OK(0, "regex \"%s\": rc %d, \"%s\"", bad[i].rx, rc, err);
        hy_tok_rx_free(rx);
    }
    HY_T_OK(ok == (int)HY_ARRAY_LEN(bad), "%d/%zu malformed regexes refused with their reason",
            ok, HY_ARRAY_LEN(bad));
}

/*
 * A long whitespace run through Jais 2's cascade (\s{512}(?!\S)|\s{256}(?!\S)
 * ...|\s{1,2}(?!\S)|\s{1}): the run is long enough for the regex matcher to
 * switch its memo of failed states on, and the split must be the one the
 * pattern defines (as Python's re gives it too): 5 x 512, 256, 128, 32,
 * 16, 4, 2, 1, then " x" (the last space leads the word).  Unknown names
 * are refused.
 */
static void check_rx_long_run(void)
{
    static const size_t want[] = {512, 512, 512, 512, 512, 256, 128, 32, 16, 4, 2, 1, 2};
    enum { N = 3001 };
    uint32_t *cp = malloc(N * sizeof *cp);
    uint16_t *fl = malloc(N * sizeof *fl);
    hy_tok_ends_t ends = {0};
    hy_tok_rx_work_t w = {0};
    hy_tok_pre_flags_t pf;
    hy_tok_pre_t *pre = NULL;
    char err[HY_ERR_LEN] = "";
    bool same;
    int rc;

    for (size_t i = 0; i < N; i++) {
        cp[i] = i + 1 < N ? ' ' : 'x';
        fl[i] = (uint16_t)hy_uni_flags(cp[i]);
    }
    rc = hy_tok_pre_new(&pre, "jais-2", &pf, err);
    if (rc == HY_OK)
        rc = hy_tok_pre_split(pre, cp, fl, N, &ends, &w);
    same = rc == HY_OK && ends.n == HY_ARRAY_LEN(want);
    for (size_t i = 0, prev = 0; same && i < ends.n; prev = ends.v[i++])
        same = ends.v[i] - prev == want[i];
    HY_T_OK(same && w.memo_on, "jais-2: 3000 spaces + x split 5x512, 256, 128, 32, 16, 4, 2, 1, \" x\" "
            "with the memo on (%zu words)%s%s", ends.n, err[0] ? ": " : "", err);
    hy_tok_pre_free(pre);
    pre = NULL;
    rc = hy_tok_pre_new(&pre, "no-such-pre", &pf, err);
    HY_T_OK(rc == HY_ENOENT && pre == NULL && strstr(err, "\"no-such-pre\""),
            "unknown pre-tokenizer name: %s", err);
    hy_tok_rx_work_free(&w);
    free(ends.v);
    free(cp);
    free(fl);
}

/*
 * Every pre-tokenizer name on pre-corpus.inp, with llama.cpp's ids from
 * tests/data/tokenizer/pre/NAME.out (make-pre-vectors.py): the GPT-2
 * vocabulary with tokenizer.ggml.pre swapped, or the raw-UTF-8 BPE one for
 * the families that do not byte-encode.  A name without vectors fails.
 */
static void check_pre_vectors(void)
{
    static const char *const raw_utf8[] = {"gemma4", "granite-embed-multi-311m", "sarvam-moe",
                                           "whitespace"};
    static const char *const files[2] = {"tests/data/tokenizer/ggml-vocab-gpt-2.gguf",
                                         "tests/data/tokenizer/ggml-vocab-utf8-bpe.gguf"};
    const char *const *names = hy_tok_pre_names();
    char err[HY_ERR_LEN] = "";
    hy_gguf_t *g[2] = {NULL, NULL};
    hy_tok_spec_t sp[2];
    int n_names = 0, total = 0;

    memset(sp, 0, sizeof sp);
    for (int i = 0; i < 2; i++) {
        if (hy_gguf_open(&g[i], hy_t_srcpath(files[i]), err) != HY_OK ||
            hy_tok_spec_read(&sp[i], g[i], err) != HY_OK) {
            HY_T_OK(0, "%s: %s", files[i], err);
            goto out;
        }
    }
    for (; names[n_names]; n_names++) {
        const char *name = names[n_names], *file_pre;
        char label[96], out_rel[256];
        bool raw = false;
        hy_tok_t *tok = NULL;
        int k;
        for (size_t i = 0; i < HY_ARRAY_LEN(raw_utf8); i++)
            raw = raw || strcmp(name, raw_utf8[i]) == 0;
        k = raw ? 1 : 0;
        file_pre = sp[k].pre;
        sp[k].pre = name;
        snprintf(label, sizeof label, "pre %s", name);
        if (hy_tok_build(&tok, &sp[k], err) != HY_OK) {
            HY_T_OK(0, "%s: %s", label, err);
        } else {
            snprintf(out_rel, sizeof out_rel, "tests/data/tokenizer/pre/%s.out", name);
            total += check_vectors(label, tok, "tests/data/tokenizer/pre-corpus.inp", out_rel, !raw);
        }
        sp[k].pre = file_pre;
        hy_tok_free(tok);
    }
    HY_T_OK(n_names >= 87, "%d pre-tokenizer names, %d vectors in all", n_names, total);
out:
    for (int i = 0; i < 2; i++) {
        hy_tok_spec_free(&sp[i]);
        hy_gguf_close(g[i]);
    }
}

/* A committed vocabulary; NULL (and a failed test line naming the file)
 * when it cannot be opened or loaded. */
static hy_tok_t *load_named(const char *name, hy_gguf_t **g)
{
    char path[256], err[HY_ERR_LEN];
    hy_tok_t *tok = NULL;

    snprintf(path, sizeof path, "tests/data/tokenizer/ggml-vocab-%s.gguf", name);
    if (hy_gguf_open(g, hy_t_srcpath(path), err) != HY_OK) {
        HY_T_OK(0, "%s", err);
        return NULL;
    }
    if (hy_tok_load(&tok, *g, err) != HY_OK) {
        HY_T_OK(0, "%s: %s", path, err);
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

    if (!tok)
        return;
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

    if (!tok)
        return;
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

    if (!tok)
        return;
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

/* Feeds ids one at a time to a streaming detokenizer: every chunk must be
 * valid UTF-8 and the chunks must add up to want.  *n_byte counts the ids
 * that are byte-fallback tokens. */
static bool stream_matches(hy_tok_t *tok, const int32_t *ids, size_t n, const char *want,
                           size_t want_len, size_t *n_byte)
{
    char err[HY_ERR_LEN];
    hy_tok_stream_t s;
    size_t total = 0;
    bool ok = true;
    const char *o;
    size_t ol;

    hy_tok_stream_init(&s, tok, false, true);
    for (size_t i = 0; i < n && ok; i++) {
        *n_byte += hy_tok_type(tok, ids[i]) == HY_TOK_TYPE_BYTE;
        ok = hy_tok_stream_feed(&s, ids[i], &o, &ol, err) == HY_OK && utf8_valid(o, ol) &&
             total + ol <= want_len && memcmp(want + total, o, ol) == 0;
        total += ol;
    }
    ok = ok && hy_tok_stream_flush(&s, &o, &ol, err) == HY_OK && ol == 0 && total == want_len;
    hy_tok_stream_free(&s);
    return ok;
}

/*
 * Gemma 3's SentencePiece vocabulary (262,144 tokens with byte fallback,
 * tokenizer.ggml.model "llama", no space prefix) from the 270M GGUF that
 * scripts/fetch-model gemma3-270m puts in models/ (run-tests fetches it;
 * the weights are under the Gemma terms and are not committed, only the
 * ids llama.cpp gives for pre-corpus.inp).  Then the streaming detokenizer
 * over the same texts, byte-fallback pieces included.
 */
static void check_gemma3(void)
{
    static const char corpus[] = "tests/data/tokenizer/pre-corpus.inp";
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char err[HY_ERR_LEN] = "";
    hy_gguf_t *g = NULL;
    hy_tok_t *tok = NULL;
    char *inp = NULL, *p, *e;
    size_t len = 0, n_byte = 0;
    int n = 0, ok = 0;

    if (hy_gguf_open(&g, hy_t_srcpath("models/gemma-3-270m-q4_k_m.gguf"), err)) {
        HY_T_OK(1, "# SKIP gemma3: %s (scripts/fetch-model gemma3-270m)", err);
        return;
    }
    if (hy_tok_load(&tok, g, err) != HY_OK) {
        HY_T_OK(0, "gemma3: load: %s", err);
        goto out;
    }
    HY_T_OK(hy_tok_is_spm(tok) && hy_tok_n_vocab(tok) == 262144 && hy_tok_add_bos(tok) &&
                hy_tok_bos(tok) == 2 && hy_tok_is_eog(tok, hy_tok_find(tok, "<end_of_turn>", 13)),
            "gemma3: SentencePiece, 262144 tokens, BOS 2 added, <end_of_turn> ends generation");
    check_vectors("gemma3", tok, corpus, "tests/data/tokenizer/gemma3.out", false);
    inp = slurp(hy_t_srcpath(corpus), &len);
    for (p = inp; p && (e = strstr(p, sep)); p = e + sizeof sep - 1) {
        int32_t *ids = NULL;
        size_t n_ids = 0;
        /* U+2581 in the text comes back as a space: SentencePiece's own
         * escape, so such a text cannot round-trip (nor in llama.cpp). */
        if (memmem(p, (size_t)(e - p), "\xe2\x96\x81", 3))
            continue;
        n++;
        if (hy_tok_encode_alloc(tok, p, (size_t)(e - p), false, false, &ids, &n_ids, err) == HY_OK &&
            stream_matches(tok, ids, n_ids, p, (size_t)(e - p), &n_byte)) {
            char *dec = NULL;
            size_t dl = 0;
            ok += hy_tok_decode(tok, ids, n_ids, false, &dec, &dl, err) == HY_OK &&
                  dl == (size_t)(e - p) && memcmp(dec, p, dl) == 0;
            free(dec);
        }
        free(ids);
    }
    HY_T_OK(n > 0 && ok == n && n_byte > 0,
            "gemma3: %d/%d texts decode back whole and chunk by chunk as valid UTF-8 "
            "(%zu byte-fallback ids)", ok, n, n_byte);
out:
    free(inp);
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
    check_pre_vectors();
    check_rx_long_run();
    check_rx_errors();
    check_stream("gpt-2");
    check_stream("llama-spm");
    check_special();
    check_pre_splits();
    check_errors();
    check_speed();
    check_smollm();
    check_gemma3();
    return hy_t_done();
}
