/*
 * tokenizer.h - text <-> token ids for the vocabularies llama.cpp's GGUF
 * files carry: byte-level BPE ("gpt2", with the pre-tokenizer named by
 * tokenizer.ggml.pre) and SentencePiece ("llama", score-merged with <0xNN>
 * byte fallback).  Output matches llama.cpp's llama_tokenize for the same
 * file.  A loaded hy_tok_t is immutable and owns copies of everything, so
 * it may be shared by threads and outlive the hy_gguf_t it came from.
 */
#ifndef HY_TOKENIZER_H
#define HY_TOKENIZER_H

#include "common/hy.h"
#include "model/gguf.h"

typedef struct hy_tok hy_tok_t;

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
typedef enum {
    HY_TOK_TYPE_UNDEFINED = 0,
    HY_TOK_TYPE_NORMAL = 1,
    HY_TOK_TYPE_UNKNOWN = 2,
    HY_TOK_TYPE_CONTROL = 3,
    HY_TOK_TYPE_USER_DEFINED = 4,
    HY_TOK_TYPE_UNUSED = 5,
    HY_TOK_TYPE_BYTE = 6,
} hy_tok_type_t;

typedef struct {
    const char *ptr;
    size_t len;
} hy_tok_str_t;

/*
 * Everything a tokenizer is built from, as plain arrays (what
 * hy_tok_load() reads out of GGUF; tests build small ones by hand).
 * Special ids are -1 when absent; the add_* flags are -1 for "the model
 * type's default" (SPM: add BOS and a space prefix; BPE: neither, except
 * the llama3 pre-tokenizer family, which adds BOS).
 */
typedef struct {
    const char *model;          /* "gpt2" or "llama" */
    const char *pre;            /* tokenizer.ggml.pre or NULL */
    size_t n_vocab;
    const hy_tok_str_t *tokens; /* [n_vocab] */
    const int32_t *types;       /* [n_vocab] hy_tok_type_t, or NULL: all NORMAL */
    const float *scores;        /* [n_vocab] or NULL: all 0 */
    size_t n_merges;
    const hy_tok_str_t *merges; /* [n_merges] "left right", BPE only */
    int64_t bos, eos, eot, eom, pad, unk;
    int add_bos, add_eos, add_space_prefix;
} hy_tok_spec_t;

int hy_tok_build(hy_tok_t **out, const hy_tok_spec_t *spec, char *err);

/* Reads the tokenizer.ggml.* keys of g into *sp (arrays view g's strings;
 * g must outlive sp).  Errors name the key at fault.  hy_tok_spec_free()
 * releases what it allocated; a caller may change scalar fields between
 * the two (tests swap sp->pre, keeping the pointer to restore it). */
int hy_tok_spec_read(hy_tok_spec_t *sp, const hy_gguf_t *g, char *err);
void hy_tok_spec_free(hy_tok_spec_t *sp);

/* hy_tok_spec_read() then hy_tok_build(). */
int hy_tok_load(hy_tok_t **out, const hy_gguf_t *g, char *err);
void hy_tok_free(hy_tok_t *tok);

size_t hy_tok_n_vocab(const hy_tok_t *tok);
int32_t hy_tok_bos(const hy_tok_t *tok); /* -1 if none */
int32_t hy_tok_eos(const hy_tok_t *tok);
int32_t hy_tok_eot(const hy_tok_t *tok);
bool hy_tok_add_bos(const hy_tok_t *tok);
bool hy_tok_is_spm(const hy_tok_t *tok);
hy_tok_type_t hy_tok_type(const hy_tok_t *tok, int32_t id);
/* The token's text as stored in the vocabulary (not unmapped). */
hy_tok_str_t hy_tok_text(const hy_tok_t *tok, int32_t id);
/* Token id whose vocabulary text is exactly s, or -1. */
int32_t hy_tok_find(const hy_tok_t *tok, const char *s, size_t len);

/* End of generation: eos, eot, eom and the end-of-turn tokens llama.cpp
 * recognises by text (<|im_end|>, <|endoftext|>, <|eot_id|>, ...). */
bool hy_tok_is_eog(const hy_tok_t *tok, int32_t id);

/*
 * Text -> ids.  add_special: prepend BOS / append EOS as the model's
 * add_bos / add_eos flags say.  parse_special: CONTROL (and UNKNOWN)
 * tokens written literally in the text become those tokens; when false
 * they are tokenized as plain text.  USER_DEFINED tokens are matched in
 * both cases, as llama.cpp and Hugging Face tokenizers do.
 * The _alloc form returns a malloc'd array (free() it).  The capped form
 * writes at most cap ids and returns HY_EFULL, with *n_out set to the
 * number needed, when they do not fit.
 */
int hy_tok_encode_alloc(const hy_tok_t *tok, const char *text, size_t len,
                        bool add_special, bool parse_special, int32_t **ids,
                        size_t *n_out, char *err);
int hy_tok_encode(const hy_tok_t *tok, const char *text, size_t len,
                  bool add_special, bool parse_special, int32_t *ids,
                  size_t cap, size_t *n_out, char *err);

/* The raw bytes token id stands for (byte-level BPE unmapped, SPM "▁" as
 * space, <0xNN> as the byte).  CONTROL and UNKNOWN tokens give their text
 * when special is true, nothing otherwise.  Unknown id: empty.  The bytes
 * are not NUL terminated and may be any part of a UTF-8 sequence. */
hy_tok_str_t hy_tok_token_piece(const hy_tok_t *tok, int32_t id, bool special);

/*
 * Ids -> bytes, the concatenation of the pieces.  For SentencePiece
 * vocabularies with add_space_prefix, the one space that encoding added in
 * front of the text is removed from the first non-empty piece, so that
 * decode(encode(x)) == x.  No other clean-up (no "clean_up_tokenization_
 * spaces"): it would make decoding lossy.  Returns a malloc'd buffer
 * (NUL terminated for convenience; free() it) in *out.  Ids out of range
 * are an error.
 */
int hy_tok_decode(const hy_tok_t *tok, const int32_t *ids, size_t n,
                  bool special, char **out, size_t *len, char *err);

/*
 * Streaming detokenizer: feed ids one at a time, get back only complete,
 * valid UTF-8.  A trailing incomplete sequence is held until later bytes
 * complete it; bytes that can never become valid UTF-8 come out as U+FFFD,
 * and hy_tok_stream_flush() turns whatever is still held into U+FFFD.
 * The returned view stays valid until the next call on the stream.
 */
typedef struct {
    const hy_tok_t *tok;
    bool special;       /* render CONTROL tokens' text */
    bool strip_space;   /* strip SPM's prefix space from the first piece */
    unsigned char held[8];
    size_t n_held;
    char *buf;          /* output of the last call */
    size_t cap;
} hy_tok_stream_t;

/* strip_leading_space: true when the stream decodes a whole encoded text
 * (as hy_tok_decode does); false for a continuation such as generated
 * tokens after a prompt. */
void hy_tok_stream_init(hy_tok_stream_t *s, const hy_tok_t *tok, bool special,
                        bool strip_leading_space);
int hy_tok_stream_feed(hy_tok_stream_t *s, int32_t id, const char **out,
                       size_t *len, char *err);
int hy_tok_stream_flush(hy_tok_stream_t *s, const char **out, size_t *len,
                        char *err);
void hy_tok_stream_free(hy_tok_stream_t *s);

#endif
