/*
 * unicode.h - the small amount of Unicode the tokenizer needs: per code
 * point category flags (the \p{L}/\p{N}/... classes and \s of the
 * pre-tokenizer regexes), a lenient UTF-8 decoder that behaves like
 * llama.cpp's (so token ids match it on invalid input), a strict UTF-8
 * validator for the streaming detokenizer, and the GPT-2 byte<->code point
 * table of byte-level BPE.  The category table is generated: see
 * scripts/gen-unicode-tables and unicode_data.c.
 */
#ifndef HY_UNICODE_H
#define HY_UNICODE_H

#include "common/hy.h"

/* Category flags.  Exactly one of the first eight is set for any code point
 * (UNDEFINED for unassigned ones and for values above 0x10FFFF);
 * WHITESPACE is the Unicode White_Space property, i.e. the regex \s. */
enum {
    HY_UNI_UNDEFINED = 0x01,
    HY_UNI_NUMBER = 0x02,    /* \p{N} */
    HY_UNI_LETTER = 0x04,    /* \p{L} */
    HY_UNI_SEPARATOR = 0x08, /* \p{Z} */
    HY_UNI_MARK = 0x10,      /* \p{M} */
    HY_UNI_PUNCT = 0x20,     /* \p{P} */
    HY_UNI_SYMBOL = 0x40,    /* \p{S} */
    HY_UNI_CONTROL = 0x80,   /* \p{C} other than Cn */
    HY_UNI_WHITESPACE = 0x100,
};

typedef struct {
    uint32_t lo, hi; /* inclusive */
    uint16_t flags;
} hy_uni_range_t;

/* Generated (unicode_data.c). */
extern const hy_uni_range_t hy_uni_ranges[];
extern const size_t hy_uni_n_ranges;

/* HY_UNI_* flags of code point cp. */
unsigned hy_uni_flags(uint32_t cp);

/* Decodes one code point at s[*pos] (n bytes in all) the way llama.cpp's
 * unicode_cpt_from_utf8 does: lengths come from the lead byte, only the
 * continuation bytes' top bits are checked, and a byte that does not start
 * a well-formed sequence yields U+FFFD and advances one byte.  Never reads
 * past n. */
uint32_t hy_uni_decode_lenient(const char *s, size_t n, size_t *pos);

/* Encodes cp (any value < 2^21) into out (4 bytes); returns the length. */
size_t hy_uni_encode(uint32_t cp, char *out);

/* Strict UTF-8 check of the sequence starting at s[0] (n bytes available).
 * Returns its length (1..4) if it is complete and valid; 0 if it is a
 * valid but incomplete prefix (more bytes could complete it); or -k if it
 * is invalid, where k >= 1 is the length of the maximal ill-formed subpart
 * to replace with one U+FFFD. */
int hy_uni_check_utf8(const unsigned char *s, size_t n);

/* GPT-2 byte-level BPE table: byte b is written in the vocabulary as code
 * point hy_uni_byte_to_cp(b); hy_uni_cp_to_byte() inverts it (-1 if cp is
 * not one of the 256). */
uint32_t hy_uni_byte_to_cp(uint8_t b);
int hy_uni_cp_to_byte(uint32_t cp);

#endif
