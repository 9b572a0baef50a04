/*
 * tokenizer_rx.h - a small backtracking regular-expression matcher for the
 * pre-tokenizer patterns that llama.cpp runs through std::regex (those it
 * has no hand-written splitter for).  It reproduces what std::regex sees:
 * a pattern that names a Unicode category (\p{L}, \p{N}, \p{P}, \p{M},
 * \p{S}, \p{Lu}, ...) runs on "collapsed" text, where every code point
 * >= 128 stands for its category alone and a category matches only its
 * ASCII members plus that stand-in; any other pattern runs on the code
 * points themselves, with non-ASCII whitespace seen as U+000B.  Matching
 * is ECMAScript's: leftmost-first alternation, greedy quantifiers with
 * backtracking, atomic lookaheads.  Internal to the tokenizer.
 */
#ifndef HY_TOKENIZER_RX_H
#define HY_TOKENIZER_RX_H

#include "common/hy.h"

typedef struct hy_tok_rx hy_tok_rx_t;

/* Backtracking stack and memo of failed states, reused across calls by one
 * thread; hy_tok_rx_work_free() releases it. */
typedef struct {
    size_t *v; /* pairs (pc, pos) */
    size_t n, cap;
    uint64_t *memo;  /* open addressing: (pc << 40 | pos) of states known to fail */
    size_t memo_n, memo_cap;
    const void *memo_rx, *memo_cp; /* what the memo is valid for */
    size_t memo_end;
    bool memo_on;    /* switched on once a match attempt runs long */
    size_t steps;    /* instructions run by the current attempt */
} hy_tok_rx_work_t;

void hy_tok_rx_work_free(hy_tok_rx_work_t *w);

/* Compiles pattern (UTF-8).  The subset: literals, [...] classes with
 * ranges and \s \d \w \p{..}, (...), (?:...), (?=...), (?!...), |, * + ?
 * {n} {n,} {n,m}, $, and \s \S \d \D \w \W \r \n \t \f \v \p{..} and
 * escaped punctuation outside classes.  Anything else is HY_EINVAL with
 * the offending offset in err. */
int hy_tok_rx_compile(hy_tok_rx_t **out, const char *pattern, char *err);
void hy_tok_rx_free(hy_tok_rx_t *rx);

/*
 * Matches at exactly pos, the text ending at end (cp = code points, fl =
 * their hy_uni_flags).  Once an attempt on a text runs long, successive
 * calls on the same text and end share a memo of the states that cannot
 * lead to a match (a state's fate does not depend on where the match
 * started), so a leftmost search over a long run of whitespace stays
 * linear instead of rescanning the run from every position; ordinary text
 * never pays for the memo.  Returns 1 and the match length in *len, 0 if no
 * match starts at pos, or HY_ENOMEM.  not_null: an empty match does not
 * count (std::regex_iterator's retry after an empty match).
 */
int hy_tok_rx_match(const hy_tok_rx_t *rx, const uint32_t *cp, const uint16_t *fl, size_t pos,
                    size_t end, bool not_null, size_t *len, hy_tok_rx_work_t *w);

/* Grows *p (of *cap elements of elem bytes) to hold at least need,
 * doubling; HY_ENOMEM leaves it as it was.  Shared by the tokenizer files. */
int hy_tok_grow(void **p, size_t *cap, size_t need, size_t elem);

#endif
