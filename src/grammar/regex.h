/*
 * regex.h - a subset of ECMA-262 regular expressions (JSON Schema's
 * "pattern") compiled to GBNF for the content of a JSON string: the
 * grammar matches the JSON *encoding* of every string whose decoded value
 * matches the pattern (so '"' in the pattern is written \" in the output).
 *
 * Supported: literals; '.' (anything but a line terminator); classes
 * [a-z], [^...] with escapes inside; \d \D \w \W \s \S; \t \n \r \v \f \0
 * \xHH \uHHHH \u{H...} \cX and escaped punctuation; groups (...), (?:...),
 * (?<name>...), (?P<name>...); alternation; quantifiers * + ? {n} {n,}
 * {n,m} and their lazy forms (same language); '^' and '$' at the start and
 * end of a top-level alternative (JSON Schema patterns are unanchored, so
 * an end without its anchor accepts any characters there).
 * Refused with an error naming the construct and its offset: lookahead and
 * lookbehind, backreferences, \b \B, \p{...}, inline flags, possessive
 * quantifiers, anchors elsewhere.
 */
#ifndef HY_GRAMMAR_REGEX_H
#define HY_GRAMMAR_REGEX_H

#include "grammar/gtext.h"

#define HY_REGEX_MAX_REPEAT 1000 /* largest n or m in {n,m} */

/* Appends a GBNF expression to out.  any_char names a GBNF rule matching
 * one JSON string character (raw or escaped), used for unanchored ends.
 * err reads e.g. "lookahead '(?=' at offset 4 is not supported". */
int hy_regex_to_gbnf(const char *pattern, size_t len, const char *any_char, hy_gtext_t *out,
                     char *err);

#endif
