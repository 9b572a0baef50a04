/*
 * tokenizer_pre.h - BPE pre-tokenizers: split text (as code points) into
 * the words BPE merges within.  Every tokenizer.ggml.pre name llama.cpp's
 * vocabulary loader accepts maps to its list of split stages; a stage is
 * one of the hand-written splitters of llama.cpp's own fast paths (GPT-2,
 * Llama 3, Qwen 2, Qwen 3.5, Kimi K2, digit groups, newline runs) or a
 * regex run by tokenizer_rx.c the way std::regex runs it there.  The name
 * also sets how words become BPE symbols (byte-level or raw UTF-8 with
 * "▁" for spaces) and a few flags.  Internal to the tokenizer.
 */
#ifndef HY_TOKENIZER_PRE_H
#define HY_TOKENIZER_PRE_H

#include "common/hy.h"
#include "model/tokenizer_rx.h"

typedef struct hy_tok_pre hy_tok_pre_t;

typedef struct {
    bool ignore_merges; /* a word that is itself a token is not merged */
    int add_bos;        /* -1: model default, else forced */
    bool force_bos;     /* add BOS even when the file says not to (Gemma 4) */
    bool raw_utf8;      /* words stay UTF-8, unknown bytes become <0xNN>
                         * (else GPT-2 byte-level code points) */
    bool escape_spaces; /* ' ' becomes U+2581 before splitting */
    bool newline_words; /* a word of only '\n' is looked up whole first */
} hy_tok_pre_flags_t;

/* Builds the pre-tokenizer tokenizer.ggml.pre names (NULL or "" = the
 * default).  HY_ENOENT if the name is unknown. */
int hy_tok_pre_new(hy_tok_pre_t **out, const char *name, hy_tok_pre_flags_t *flags, char *err);
void hy_tok_pre_free(hy_tok_pre_t *pre);

/* Every accepted name, NULL-terminated (for tests and messages). */
const char *const *hy_tok_pre_names(void);

/* A growable array of word end offsets. */
typedef struct {
    size_t *v;
    size_t n, cap;
} hy_tok_ends_t;

/*
 * Splits cps[0..n) (flags[i] = hy_uni_flags(cps[i])) into words; on
 * success ends->v[0..ends->n) are the exclusive end offsets of the
 * non-empty words in order (the last is n).  ends is reset first; its
 * memory and w's are reused across calls.
 */
int hy_tok_pre_split(const hy_tok_pre_t *pre, const uint32_t *cps, const uint16_t *flags,
                     size_t n, hy_tok_ends_t *ends, hy_tok_rx_work_t *w);

#endif
