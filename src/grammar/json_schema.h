/*
 * json_schema.h - JSON Schema -> GBNF.  The grammar matches JSON text
 * (bounded whitespace between tokens: none, one space, or a newline and
 * up to 20 spaces/tabs of indentation) whose value validates against the
 * schema.  What is enforced, and how (docs/STRUCTURED_OUTPUTS.md has the
 * user-facing version):
 *
 *   type (string or array), nullable     alternatives of the types
 *   enum, const                          the values' JSON text (filtered by type)
 *   properties, required                 in the order given; optional ones may be
 *                                        skipped; required names not declared
 *                                        are added as any-value properties
 *   additionalProperties                 absent with properties: no extra keys
 *                                        (a subset of what validates); true or a
 *                                        schema: extra keys, never equal to a
 *                                        declared name, after the declared ones
 *   unevaluatedProperties: false         as additionalProperties: false
 *   minProperties, maxProperties         only when the declared/required keys
 *                                        already satisfy them
 *   items, prefixItems, additionalItems, exact counts
 *   minItems, maxItems, uniqueItems: false
 *   $defs, definitions, $ref             local JSON pointers, recursion included
 *   anyOf, oneOf                         alternatives (oneOf's exclusivity is not
 *                                        checked: write disjoint branches)
 *   allOf, $ref with siblings            merged into one schema where keywords
 *                                        combine (types intersect, bounds tighten,
 *                                        properties and required unite); refused
 *                                        where they cannot
 *   integer minimum/maximum/exclusive*   an exact decimal range grammar
 *   number bounds                        exact for the decimal values of the bounds;
 *                                        bounded numbers are written without exponent
 *   minLength, maxLength                 counted in code points (escapes count one)
 *   pattern                              regex.h's subset
 *   format                               date, time, date-time, duration, email,
 *                                        hostname, ipv4, ipv6, uuid, uri
 * Annotations (title, description, examples, default, $comment, $schema,
 * $id, deprecated, readOnly, writeOnly, contentMediaType, contentEncoding,
 * discriminator, x-*) are accepted.  Any other keyword is refused with an
 * error naming it and where it is: "/properties/tags: 'uniqueItems': true
 * is not supported".  Numbers have at most 16 integer digits.
 */
#ifndef HY_GRAMMAR_JSON_SCHEMA_H
#define HY_GRAMMAR_JSON_SCHEMA_H

#include <cjson/cJSON.h>

#include "common/hy.h"

#define HY_JSG_MAX_DEPTH 64 /* nested schemas */

typedef struct hy_jsg hy_jsg_t;

/* The whole grammar for one schema: `root` matches a JSON value that
 * validates.  *gbnf is malloc'd (free() it).  Errors start with the JSON
 * pointer of the offending (sub)schema. */
int hy_json_schema_to_gbnf(const cJSON *schema, char **gbnf, size_t *len, char *err);

/* Building a grammar from several schemas (tool calls): each schema gets
 * a rule; the caller writes the rules around them (root included). */
int hy_jsg_create(hy_jsg_t **out);
void hy_jsg_free(hy_jsg_t *g);
/* Defines rule `name` ([A-Za-z0-9-]+, unused so far) as a JSON value of
 * schema; $refs resolve inside schema. */
int hy_jsg_add_schema(hy_jsg_t *g, const char *name, const cJSON *schema, char *err);
/* Defines rule `name` with GBNF body text. */
int hy_jsg_add_rule(hy_jsg_t *g, const char *name, const char *body, char *err);
/* The name of the bounded-whitespace rule (defined on first use), for
 * rules written around the schemas. */
const char *hy_jsg_ws(hy_jsg_t *g);
/* Every rule defined so far; *text is malloc'd. */
int hy_jsg_text(hy_jsg_t *g, char **text, size_t *len, char *err);

#endif
