/*
 * tokenizer_pre.h - byte-level BPE pre-tokenizers: split text (as code
 * points) into the words BPE merges within.  Each tokenizer.ggml.pre name
 * maps to the sequence of regexes llama.cpp applies (LLAMA_VOCAB_PRE_TYPE_*),
 * each implemented as a hand-written matcher with the same leftmost-first
 * semantics.  Internal to the tokenizer.
 */
#ifndef HY_TOKENIZER_PRE_H
#define HY_TOKENIZER_PRE_H

#include "common/hy.h"

typedef enum {
    HY_TOK_PRE_DEFAULT,
    HY_TOK_PRE_GPT2,      /* gpt-2, mpt, olmo, ... */
    HY_TOK_PRE_LLAMA3,    /* llama3, llama-bpe, smaug-bpe, dbrx, lfm2, ... */
    HY_TOK_PRE_QWEN2,     /* qwen2, stablelm2, ... */
    HY_TOK_PRE_QWEN35,
    HY_TOK_PRE_STARCODER, /* starcoder, refact, command-r, smollm, ... */
    HY_TOK_PRE_FALCON,
    HY_TOK_PRE_DEEPSEEK_LLM,
    HY_TOK_PRE_DEEPSEEK3,
} hy_tok_pre_t;

typedef struct {
    hy_tok_pre_t pre;
    bool ignore_merges; /* a word that is itself a token is not merged */
    int add_bos;        /* -1: model default, else forced */
} hy_tok_pre_info_t;

/* Looks up a tokenizer.ggml.pre value (NULL or "" = default).  HY_ENOENT
 * if the name is unknown. */
int hy_tok_pre_lookup(const char *name, hy_tok_pre_info_t *out);

/* A growable array of word end offsets. */
typedef struct {
    size_t *v;
    size_t n, cap;
} hy_tok_ends_t;

/*
 * Splits cps[0..n) (flags[i] = hy_uni_flags(cps[i])) into words; on
 * success ends->v[0..ends->n) are the exclusive end offsets of the words in
 * order (the last is n).  ends is reset first; its memory is reused.
 */
int hy_tok_pre_split(hy_tok_pre_t pre, const uint32_t *cps, const uint16_t *flags,
                     size_t n, hy_tok_ends_t *ends);

#endif
