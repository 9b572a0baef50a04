/*
 * json_schema.c - the structural half of JSON Schema -> GBNF: keyword
 * checking (anything unknown is refused by name), dispatch on type,
 * objects (ordered properties with optional ones skippable, extra keys
 * that can never repeat a declared name), arrays (prefix items, counts),
 * local $refs (one rule per target, so recursion works) and allOf merging.
 * Scalars are in json_schema_types.c.  Every error carries the JSON
 * pointer of the schema it is about.
 */
#include "grammar/json_schema_impl.h"
#include "model/unicode.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_annotations[] = {
    "title", "description", "examples", "example", "default", "$comment", "$schema", "$id",
    "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding",
    "discriminator", "$defs", "definitions", NULL};
static const char *const k_object_kw[] = {"properties", "required", "additionalProperties",
                                          "unevaluatedProperties", "minProperties",
                                          "maxProperties", NULL};
static const char *const k_array_kw[] = {"items", "prefixItems", "additionalItems", "minItems",
                                         "maxItems", "uniqueItems", NULL};
static const char *const k_string_kw[] = {"minLength", "maxLength", "pattern", "format", NULL};
static const char *const k_number_kw[] = {"minimum", "maximum", "exclusiveMinimum",
                                          "exclusiveMaximum", "multipleOf", NULL};
static const char *const k_general_kw[] = {"type", "enum", "const", "anyOf", "oneOf",
                                           "allOf", "$ref", "nullable", NULL};

static bool in_list(const char *const *l, const char *s)
{
    for (; *l != NULL; l++)
        if (strcmp(*l, s) == 0)
            return true;
    return false;
}

static bool is_annotation(const char *k)
{
    return in_list(k_annotations, k) || strncmp(k, "x-", 2) == 0;
}

static int conv(hy_jsg_t *g, const cJSON *s, hy_gtext_t *out);

/* ---- errors, names, rules ------------------------------------------------- */

int hy_jsg_fail(hy_jsg_t *g, int code, const char *fmt, ...)
{
    char msg[HY_ERR_LEN / 2];
    va_list ap;

    if (g->rc != HY_OK)
        return g->rc;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    g->rc = hy_err(g->err, code, "%s: %s", g->path_len ? g->path : "/", msg);
    return g->rc;
}

static int jsg_nomem(hy_jsg_t *g)
{
    return hy_jsg_fail(g, HY_ENOMEM, "out of memory");
}

/* Appends "/seg" (JSON pointer escaping) to the path; returns the old
 * length for path_pop. */
static size_t path_push(hy_jsg_t *g, const char *seg)
{
    size_t old = g->path_len;
    char *p = g->path + g->path_len, *end = g->path + sizeof g->path - 4;

    *p++ = '/';
    for (; *seg && p < end; seg++) {
        if (*seg == '~' || *seg == '/') {
            *p++ = '~';
            *p++ = *seg == '~' ? '0' : '1';
        } else {
            *p++ = *seg;
        }
    }
    *p = '\0';
    g->path_len = (size_t)(p - g->path);
    return old;
}

static size_t path_push_index(hy_jsg_t *g, const char *seg, int i)
{
    char b[32];
    size_t old = path_push(g, seg);

    snprintf(b, sizeof b, "%d", i);
    path_push(g, b);
    return old;
}

static void path_pop(hy_jsg_t *g, size_t old)
{
    g->path_len = old;
    g->path[old] = '\0';
}

static bool name_used(const hy_jsg_t *g, const char *n)
{
    for (int32_t i = 0; i < g->n_names; i++)
        if (strcmp(g->names[i], n) == 0)
            return true;
    return false;
}

static int name_add(hy_jsg_t *g, const char *n)
{
    char *d = strdup(n);

    if (d != NULL && g->n_names == g->cap_names) {
        int32_t cap = g->cap_names ? g->cap_names * 2 : 32;
        char **v = realloc(g->names, sizeof *v * (size_t)cap);

        if (v != NULL) {
            g->names = v;
            g->cap_names = cap;
        }
    }
    if (d == NULL || g->n_names == g->cap_names) {
        free(d);
        return jsg_nomem(g);
    }
    g->names[g->n_names++] = d;
    return HY_OK;
}

void hy_jsg_name(hy_jsg_t *g, const char *hint, char *out)
{
    char base[48];
    size_t n = 0;

    for (; *hint && n < sizeof base - 1; hint++) {
        char c = *hint;

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
            base[n++] = c;
        else if (n > 0 && base[n - 1] != '-')
            base[n++] = '-';
    }
    while (n > 0 && base[n - 1] == '-')
        n--;
    base[n] = '\0';
    snprintf(out, 64, "%s", n ? base : "r");
    for (int i = 2; name_used(g, out); i++)
        snprintf(out, 64, "%s-%d", n ? base : "r", i);
    name_add(g, out);
}

void hy_jsg_define(hy_jsg_t *g, const char *name, const char *body)
{
    hy_gtext_printf(&g->rules, "%s ::= %s\n", name, body);
    if (g->rules.oom)
        jsg_nomem(g);
}

/* A rule whose body was written into a text: a body cut short by a failed
 * append is never defined (it would parse as a different grammar). */
static void define_text(hy_jsg_t *g, const char *name, const hy_gtext_t *body)
{
    if (body->oom)
        jsg_nomem(g);
    else
        hy_jsg_define(g, name, body->s != NULL ? body->s : "");
}

/* The shared rules: name, what they use, body (one or more rules). */
static const struct {
    unsigned which, uses;
    const char *name, *rules;
} k_builtins[] = {
    {HY_JSG_WS, 0, "json-ws", "json-ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"},
    /* a \u escape never writes a surrogate, so every json-char is one code
     * point: minLength/maxLength count right; the two kinds of escape share
     * their last two hex digits, which keeps unrolled strings small */
    {HY_JSG_CHAR, 0, "json-char",
     "json-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-ce-fA-CE-F] "
     "[0-9a-fA-F] | [dD] [0-7] ) [0-9a-fA-F]{2} )\n"},
    {HY_JSG_STRING, HY_JSG_CHAR, "json-string", "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"},
    {HY_JSG_INT, 0, "json-int", "json-int ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"},
    {HY_JSG_NUMBER, 0, "json-number",
     "json-number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? "
     "( [eE] [-+]? [0-9]{1,2} )?\n"},
    {HY_JSG_VALUE, HY_JSG_WS | HY_JSG_STRING | HY_JSG_NUMBER, "json-value",
     "json-value ::= json-object | json-array | json-string | json-number | \"true\" | "
     "\"false\" | \"null\"\n"
     "json-object ::= \"{\" json-ws ( json-string json-ws \":\" json-ws json-value json-ws "
     "( \",\" json-ws json-string json-ws \":\" json-ws json-value json-ws )* )? \"}\"\n"
     "json-array ::= \"[\" json-ws ( json-value json-ws ( \",\" json-ws json-value json-ws )* )? "
     "\"]\"\n"},
};

const char *hy_jsg_builtin(hy_jsg_t *g, unsigned which)
{
    for (size_t i = 0; i < HY_ARRAY_LEN(k_builtins); i++) {
        if (k_builtins[i].which != which)
            continue;
        if (!(g->builtins & which)) {
            g->builtins |= which;
            for (unsigned u = 1; u <= HY_JSG_VALUE; u <<= 1)
                if (k_builtins[i].uses & u)
                    hy_jsg_builtin(g, u);
            hy_gtext_puts(&g->rules, k_builtins[i].rules);
            if (g->rules.oom)
                jsg_nomem(g);
        }
        return k_builtins[i].name;
    }
    return "json-value";
}

/* ---- small cJSON helpers -------------------------------------------------- */

static const cJSON *get(const cJSON *s, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(s, k);
}

static const char *json_kind(const cJSON *v)
{
    if (cJSON_IsObject(v)) return "an object";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    return "null";
}

/* A non-negative integer keyword (minItems, ...); -1 when absent. */
static int get_count(hy_jsg_t *g, const cJSON *s, const char *k, long *out)
{
    const cJSON *v = get(s, k);

    *out = -1;
    if (v == NULL)
        return HY_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble > 1e9)
        return hy_jsg_fail(g, HY_EINVAL, "'%s' must be a non-negative integer", k);
    *out = (long)v->valuedouble;
    return HY_OK;
}

/* Keeps merged schemas alive until g is freed. */
static cJSON *own(hy_jsg_t *g, cJSON *s)
{
    if (s == NULL) {
        jsg_nomem(g);
        return NULL;
    }
    if (g->n_owned == g->cap_owned) {
        int32_t cap = g->cap_owned ? g->cap_owned * 2 : 16;
        cJSON **o = realloc(g->owned, sizeof *o * (size_t)cap);

        if (o == NULL) {
            cJSON_Delete(s);
            jsg_nomem(g);
            return NULL;
        }
        g->owned = o;
        g->cap_owned = cap;
    }
    g->owned[g->n_owned++] = s;
    return s;
}

/* ---- $ref ------------------------------------------------------------------ */

/* The schema a local JSON pointer ("#/$defs/x") names in g->doc. */
static const cJSON *resolve(hy_jsg_t *g, const char *ref)
{
    const cJSON *cur = g->doc;
    const char *p = ref + 1;

    if (ref[0] != '#')
        return hy_jsg_fail(g, HY_EUNSUPPORTED,
                           "$ref '%.200s': only references inside the schema ('#/...') are "
                           "supported",
                           ref), NULL;
    if (*p != '\0' && *p != '/')
        return hy_jsg_fail(g, HY_EUNSUPPORTED, "$ref '%.200s': anchors are not supported", ref),
               NULL;
    while (*p == '/' && cur != NULL) {
        char seg[256];
        size_t n = 0;

        for (p++; *p && *p != '/' && n < sizeof seg - 1; p++) {
            if (*p == '~' && (p[1] == '0' || p[1] == '1')) {
                seg[n++] = p[1] == '0' ? '~' : '/';
                p++;
            } else if (*p == '%' && p[1] && p[2]) {
                char hex[3] = { p[1], p[2], 0 };

                seg[n++] = (char)strtol(hex, NULL, 16);
                p += 2;
            } else {
                seg[n++] = *p;
            }
        }
        seg[n] = '\0';
        if (cJSON_IsArray(cur)) {
            char *end;
            long i = strtol(seg, &end, 10);

            cur = *end == '\0' && n > 0 ? cJSON_GetArrayItem(cur, (int)i) : NULL;
        } else {
            cur = cJSON_IsObject(cur) ? get(cur, seg) : NULL;
        }
    }
    if (cur == NULL)
        hy_jsg_fail(g, HY_EINVAL, "$ref '%.200s' does not resolve", ref);
    return cur;
}

/* A rule per $ref target: recursion refers to the rule being defined. */
static int conv_ref(hy_jsg_t *g, const char *ref, hy_gtext_t *out)
{
    const cJSON *target;
    hy_gtext_t body = { 0 };
    char name[64];
    const char *last = strrchr(ref, '/');

    for (int32_t i = 0; i < g->n_refs; i++) {
        if (strcmp(g->refs[i].ptr, ref) == 0) {
            hy_gtext_puts(out, g->refs[i].rule);
            return HY_OK;
        }
    }
    if ((target = resolve(g, ref)) == NULL)
        return g->rc;
    hy_jsg_name(g, last && last[1] ? last + 1 : "ref", name);
    if (g->n_refs == g->cap_refs) {
        int32_t cap = g->cap_refs ? g->cap_refs * 2 : 8;
        hy_jsg_ref_t *r = realloc(g->refs, sizeof *r * (size_t)cap);

        if (r == NULL)
            return jsg_nomem(g);
        g->refs = r;
        g->cap_refs = cap;
    }
    g->refs[g->n_refs].ptr = strdup(ref);
    g->refs[g->n_refs].rule = strdup(name);
    if (!g->refs[g->n_refs].ptr || !g->refs[g->n_refs].rule) {
        free(g->refs[g->n_refs].ptr);
        free(g->refs[g->n_refs].rule);
        return jsg_nomem(g);
    }
    g->n_refs++;
    /* the target is converted with its own location as the path */
    {
        char saved[sizeof g->path];
        size_t saved_len = g->path_len;

        memcpy(saved, g->path, sizeof saved);
        snprintf(g->path, sizeof g->path, "%s", ref + 1);
        g->path_len = strlen(g->path);
        if (conv(g, target, &body) == HY_OK)
            define_text(g, name, &body);
        hy_gtext_free(&body);
        if (g->rc != HY_OK)
            return g->rc; /* the error names the target's path */
        memcpy(g->path, saved, sizeof saved);
        g->path_len = saved_len;
    }
    hy_gtext_puts(out, name);
    return HY_OK;
}

const char *hy_jsg_shared(hy_jsg_t *g, const char *key, const char *body)
{
    char name[64], k[600];

    snprintf(k, sizeof k, "@%.590s", key); /* never a $ref: those start with '#' */
    for (int32_t i = 0; i < g->n_refs; i++)
        if (strcmp(g->refs[i].ptr, k) == 0)
            return g->refs[i].rule;
    if (g->n_refs == g->cap_refs) {
        int32_t cap = g->cap_refs ? g->cap_refs * 2 : 8;
        hy_jsg_ref_t *r = realloc(g->refs, sizeof *r * (size_t)cap);

        if (r == NULL)
            return jsg_nomem(g), NULL;
        g->refs = r;
        g->cap_refs = cap;
    }
    hy_jsg_name(g, key, name);
    g->refs[g->n_refs].ptr = strdup(k);
    g->refs[g->n_refs].rule = strdup(name);
    if (!g->refs[g->n_refs].ptr || !g->refs[g->n_refs].rule) {
        free(g->refs[g->n_refs].ptr);
        free(g->refs[g->n_refs].rule);
        return jsg_nomem(g), NULL;
    }
    hy_jsg_define(g, name, body);
    return g->refs[g->n_refs++].rule;
}

/* ---- allOf: merging schemas ------------------------------------------------ */

static cJSON *normalize(hy_jsg_t *g, const cJSON *s, int depth);

/* Whether type value t (absent: every type) admits values of type name;
 * "number" admits integers. */
static bool type_has(const cJSON *t, const char *name)
{
    const cJSON *x;
    bool integer = strcmp(name, "integer") == 0;

    if (t == NULL)
        return true;
    if (cJSON_IsString(t))
        return strcmp(t->valuestring, name) == 0 ||
               (integer && strcmp(t->valuestring, "number") == 0);
    cJSON_ArrayForEach(x, t)
        if (cJSON_IsString(x) && (strcmp(x->valuestring, name) == 0 ||
                                  (integer && strcmp(x->valuestring, "number") == 0)))
            return true;
    return false;
}

/* The intersection of two "type" values ("number" includes integers). */
static cJSON *merge_type(hy_jsg_t *g, const cJSON *a, const cJSON *b)
{
    static const char *const plain[] = {"null", "boolean", "object", "array", "string", NULL};
    cJSON *r = cJSON_CreateArray();

    if (r == NULL)
        return jsg_nomem(g), NULL;
    for (const char *const *t = plain; *t; t++)
        if (type_has(a, *t) && type_has(b, *t))
            cJSON_AddItemToArray(r, cJSON_CreateString(*t));
    if (type_has(a, "number") && type_has(b, "number"))
        cJSON_AddItemToArray(r, cJSON_CreateString("number"));
    else if (type_has(a, "integer") && type_has(b, "integer"))
        cJSON_AddItemToArray(r, cJSON_CreateString("integer"));
    if (cJSON_GetArraySize(r) == 0) {
        cJSON_Delete(r);
        return hy_jsg_fail(g, HY_EINVAL, "allOf: the branches' types do not intersect"), NULL;
    }
    return r;
}

static bool is_bound(const char *k, bool *upper)
{
    static const char *const lower[] = {"minimum", "exclusiveMinimum", "minLength", "minItems",
                                        "minProperties", NULL};
    static const char *const up[] = {"maximum", "exclusiveMaximum", "maxLength", "maxItems",
                                     "maxProperties", NULL};

    if (in_list(lower, k))
        return *upper = false, true;
    if (in_list(up, k))
        return *upper = true, true;
    return false;
}

static bool in_required(const cJSON *req, const char *name)
{
    const cJSON *x;

    cJSON_ArrayForEach(x, req)
        if (cJSON_IsString(x) && strcmp(x->valuestring, name) == 0)
            return true;
    return false;
}

static cJSON *all_of2(const cJSON *a, const cJSON *b)
{
    cJSON *r = cJSON_CreateObject(), *l = cJSON_AddArrayToObject(r, "allOf");

    cJSON_AddItemToArray(l, cJSON_Duplicate(a, true));
    cJSON_AddItemToArray(l, cJSON_Duplicate(b, true));
    return r;
}

/* Properties of `from` that `other` (with additionalProperties ap) does not
 * declare: forbidden when ap is false, constrained by ap when a schema. */
static int merge_props(hy_jsg_t *g, cJSON *m, const cJSON *from, const cJSON *other)
{
    const cJSON *fp = get(from, "properties"), *op = get(other, "properties"),
                *ap = get(other, "additionalProperties"), *req = get(m, "required"), *p;
    cJSON *mp = cJSON_GetObjectItemCaseSensitive(m, "properties");

    cJSON_ArrayForEach(p, fp) {
        const cJSON *o = op ? get(op, p->string) : NULL;
        cJSON *item;

        if (o != NULL) {
            if (cJSON_GetObjectItemCaseSensitive(mp, p->string) == NULL)
                cJSON_AddItemToObject(mp, p->string, all_of2(p, o));
            continue;
        }
        if (cJSON_IsFalse(ap)) {
            if (in_required(req, p->string))
                return hy_jsg_fail(g, HY_EINVAL,
                                   "allOf: property '%.64s' is required by one branch and "
                                   "forbidden by another's additionalProperties: false",
                                   p->string);
            continue;
        }
        item = cJSON_IsObject(ap) ? all_of2(p, ap) : cJSON_Duplicate(p, true);
        cJSON_AddItemToObject(mp, p->string, item);
    }
    return g->rc;
}

/* Conjunction of two normalised object schemas as one schema. */
static cJSON *merge2(hy_jsg_t *g, const cJSON *a, const cJSON *b)
{
    cJSON *m = cJSON_CreateObject(), *req;
    const cJSON *k, *o;
    bool upper;

    if (m == NULL)
        return jsg_nomem(g), NULL;
    cJSON_ArrayForEach(k, a) {
        if (get(b, k->string) == NULL && strcmp(k->string, "properties") != 0 &&
            strcmp(k->string, "required") != 0)
            cJSON_AddItemToObject(m, k->string, cJSON_Duplicate(k, true));
    }
    cJSON_ArrayForEach(k, b) {
        const char *n = k->string;

        o = get(a, n);
        if (strcmp(n, "properties") == 0 || strcmp(n, "required") == 0)
            continue;
        if (o == NULL) {
            cJSON_AddItemToObject(m, n, cJSON_Duplicate(k, true));
        } else if (is_annotation(n) || cJSON_Compare(o, k, true)) {
            cJSON_AddItemToObject(m, n, cJSON_Duplicate(o, true));
        } else if (strcmp(n, "type") == 0) {
            cJSON *t = merge_type(g, o, k);

            if (t == NULL)
                goto fail;
            cJSON_AddItemToObject(m, n, t);
        } else if (is_bound(n, &upper) && cJSON_IsNumber(o) && cJSON_IsNumber(k)) {
            bool first = upper ? o->valuedouble < k->valuedouble
                               : o->valuedouble > k->valuedouble;

            cJSON_AddItemToObject(m, n, cJSON_Duplicate(first ? o : k, true));
        } else if (strcmp(n, "enum") == 0 && cJSON_IsArray(o) && cJSON_IsArray(k)) {
            cJSON *e = cJSON_AddArrayToObject(m, n);
            const cJSON *x, *y;

            cJSON_ArrayForEach(x, o) {
                cJSON_ArrayForEach(y, k) {
                    if (cJSON_Compare(x, y, true)) {
                        cJSON_AddItemToArray(e, cJSON_Duplicate(x, true));
                        break;
                    }
                }
            }
            if (cJSON_GetArraySize(e) == 0) {
                hy_jsg_fail(g, HY_EINVAL, "allOf: the branches' enum values do not intersect");
                goto fail;
            }
        } else if (strcmp(n, "additionalProperties") == 0 || strcmp(n, "items") == 0) {
            if (cJSON_IsFalse(o) || cJSON_IsFalse(k))
                cJSON_AddFalseToObject(m, n);
            else if (cJSON_IsTrue(o))
                cJSON_AddItemToObject(m, n, cJSON_Duplicate(k, true));
            else if (cJSON_IsTrue(k))
                cJSON_AddItemToObject(m, n, cJSON_Duplicate(o, true));
            else
                cJSON_AddItemToObject(m, n, all_of2(o, k));
        } else if (strcmp(n, "nullable") == 0) {
            cJSON_AddBoolToObject(m, n, cJSON_IsTrue(o) && cJSON_IsTrue(k));
        } else {
            hy_jsg_fail(g, HY_EUNSUPPORTED, "allOf: the branches have different '%s'", n);
            goto fail;
        }
    }
    /* required: the union */
    req = cJSON_AddArrayToObject(m, "required");
    for (int side = 0; side < 2; side++) {
        const cJSON *r = get(side ? b : a, "required"), *x;

        cJSON_ArrayForEach(x, r)
            if (cJSON_IsString(x) && !in_required(req, x->valuestring))
                cJSON_AddItemToArray(req, cJSON_CreateString(x->valuestring));
    }
    if (cJSON_GetArraySize(req) == 0)
        cJSON_DeleteItemFromObject(m, "required");
    if (get(a, "properties") || get(b, "properties")) {
        cJSON_AddObjectToObject(m, "properties");
        if (merge_props(g, m, a, b) != HY_OK || merge_props(g, m, b, a) != HY_OK)
            goto fail;
    }
    return m;
fail:
    cJSON_Delete(m);
    return NULL;
}

/* s without its $ref and allOf, as one merged schema (s itself when it has
 * neither).  The result is owned by g. */
static cJSON *normalize(hy_jsg_t *g, const cJSON *s, int depth)
{
    const cJSON *ref = get(s, "$ref"), *all = get(s, "allOf"), *x;
    cJSON *acc, *rest;
    int i = 0;

    if (depth > HY_JSG_MAX_DEPTH)
        return hy_jsg_fail(g, HY_ERANGE, "$ref/allOf nested deeper than %d", HY_JSG_MAX_DEPTH),
               NULL;
    if (cJSON_IsTrue(s))
        return own(g, cJSON_CreateObject());
    if (!cJSON_IsObject(s))
        return hy_jsg_fail(g, HY_EINVAL, "allOf/$ref: a branch is %s, not a schema object",
                           json_kind(s)), NULL;
    rest = own(g, cJSON_Duplicate(s, true));
    if (rest == NULL)
        return NULL;
    cJSON_DeleteItemFromObject(rest, "$ref");
    cJSON_DeleteItemFromObject(rest, "allOf");
    acc = rest;
    if (ref != NULL) {
        const cJSON *t;

        if (!cJSON_IsString(ref))
            return hy_jsg_fail(g, HY_EINVAL, "'$ref' must be a string"), NULL;
        if ((t = resolve(g, ref->valuestring)) == NULL || (t = normalize(g, t, depth + 1)) == NULL)
            return NULL;
        if ((acc = own(g, merge2(g, acc, t))) == NULL)
            return NULL;
    }
    if (all != NULL && !cJSON_IsArray(all))
        return hy_jsg_fail(g, HY_EINVAL, "'allOf' must be an array"), NULL;
    cJSON_ArrayForEach(x, all) {
        const cJSON *n = normalize(g, x, depth + 1);

        if (n == NULL || (acc = own(g, merge2(g, acc, n))) == NULL)
            return g->rc ? NULL : (hy_jsg_fail(g, HY_EINVAL, "allOf[%d] cannot be merged", i),
                                   NULL);
        i++;
    }
    return acc;
}

/* ---- objects ----------------------------------------------------------------- */

typedef struct {
    const char *name;
    const cJSON *schema;
    bool required;
} prop_t;

/* "name" ws ":" ws value ws, for declared property p (path pushed). */
static int kv_expr(hy_jsg_t *g, const prop_t *p, const char *ws, hy_gtext_t *out)
{
    size_t old = path_push(g, "properties");

    path_push(g, p->name);
    hy_gtext_puts(out, "\"\\\"\" ");
    hy_gtext_json_literal(out, p->name, strlen(p->name));
    hy_gtext_printf(out, " \"\\\"\" %s \":\" %s ", ws, ws);
    conv(g, p->schema, out);
    hy_gtext_printf(out, " %s", ws);
    path_pop(g, old);
    return g->rc;
}

/* Byte length of the UTF-8 character at s (1 for a stray byte). */
static size_t char_len(const char *s)
{
    unsigned char c = (unsigned char)*s;
    size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;

    for (size_t i = 1; i < n; i++)
        if (s[i] == '\0')
            return 1;
    return n;
}

/* The rest of a JSON string (closing quote included) after `depth` bytes
 * that names[0..n) share, such that the whole string is none of them: the
 * complement of the names' trie.  An extra key therefore never repeats a
 * declared one.  Characters that leave every name are unescaped ones. */
static void not_names(hy_jsg_t *g, const char **names, int32_t n, size_t depth, hy_gtext_t *out)
{
    hy_cpset_t other = { 0 };
    const char **sub = malloc(sizeof *sub * (size_t)(n + 1));
    bool first = true;
    int32_t i, j;

    if (sub == NULL) {
        jsg_nomem(g);
        return;
    }
    hy_gtext_puts(out, "( ");
    for (i = 0; i < n && strlen(names[i]) != depth; i++)
        ;
    if (i == n) { /* the prefix itself is no name: it may end here */
        hy_gtext_puts(out, "\"\\\"\"");
        first = false;
    }
    /* a character that continues no name, then anything */
    hy_cpset_add(&other, 0x20, 0x10FFFF);
    hy_cpset_remove(&other, '"', '"');
    hy_cpset_remove(&other, '\\', '\\');
    for (i = 0; i < n; i++) {
        if (strlen(names[i]) > depth) {
            size_t pos = depth;
            uint32_t cp = hy_uni_decode_lenient(names[i], strlen(names[i]), &pos);

            hy_cpset_remove(&other, cp, cp);
        }
    }
    if (other.n > 0) {
        hy_gtext_puts(out, first ? "" : " | ");
        hy_gtext_json_class(out, &other);
        hy_gtext_puts(out, " [^\"\\\\\\x00-\\x1F]* \"\\\"\"");
        first = false;
    }
    hy_cpset_free(&other);
    /* a character some names continue with: it, then their complement */
    for (i = 0; i < n; i++) {
        size_t li = strlen(names[i]), cl;
        int32_t ns = 0;
        bool seen = false;

        if (li <= depth)
            continue;
        cl = char_len(names[i] + depth);
        for (j = 0; j < i && !seen; j++)
            seen = strlen(names[j]) >= depth + cl &&
                   memcmp(names[j] + depth, names[i] + depth, cl) == 0;
        if (seen)
            continue;
        for (j = i; j < n; j++)
            if (strlen(names[j]) >= depth + cl && memcmp(names[j] + depth, names[i] + depth, cl) == 0)
                sub[ns++] = names[j];
        hy_gtext_puts(out, first ? "" : " | ");
        first = false;
        hy_gtext_json_literal(out, names[i] + depth, cl);
        hy_gtext_puts(out, " ");
        not_names(g, sub, ns, depth + cl, out);
    }
    hy_gtext_puts(out, " )");
    free(sub);
}

/* The object keywords' own shapes and the combinations not supported. */
static int conv_object_check(hy_jsg_t *g, const cJSON *props, const cJSON *req,
                             const cJSON *ap, const cJSON *up)
{
    const cJSON *x;

    if (props != NULL && !cJSON_IsObject(props))
        return hy_jsg_fail(g, HY_EINVAL, "'properties' must be an object, got %s",
                           json_kind(props));
    if (req != NULL && !cJSON_IsArray(req))
        return hy_jsg_fail(g, HY_EINVAL, "'required' must be an array");
    cJSON_ArrayForEach(x, req)
        if (!cJSON_IsString(x))
            return hy_jsg_fail(g, HY_EINVAL, "'required' must hold strings");
    if (ap != NULL && !cJSON_IsBool(ap) && !cJSON_IsObject(ap))
        return hy_jsg_fail(g, HY_EINVAL, "'additionalProperties' must be a boolean or a schema");
    if (up != NULL && !cJSON_IsFalse(up))
        return hy_jsg_fail(g, HY_EUNSUPPORTED, "'unevaluatedProperties' other than false is not "
                                              "supported");
    if (up != NULL && ap != NULL && !cJSON_IsFalse(ap))
        return hy_jsg_fail(g, HY_EUNSUPPORTED,
                           "'unevaluatedProperties': false with additionalProperties allowed is "
                           "not supported");
    return HY_OK;
}

/* The keys an object may hold, declared ones first, then required keys
 * that only additionalProperties describes, into p[0..*n). */
static int conv_object_props(hy_jsg_t *g, const cJSON *props, const cJSON *req,
                             const cJSON *ap, prop_t *p, int32_t *n, int32_t *n_req)
{
    static const cJSON any = { .type = cJSON_True };
    const cJSON *x;

    cJSON_ArrayForEach(x, props) {
        bool r = in_required(req, x->string);

        if (cJSON_IsFalse(x)) {
            if (r)
                return hy_jsg_fail(g, HY_EINVAL,
                                   "property '%.64s' is required but its schema is false",
                                   x->string);
            continue; /* may never appear */
        }
        p[(*n)++] = (prop_t){ x->string, x, r };
        *n_req += r;
    }
    cJSON_ArrayForEach(x, req) {
        bool dup = false;

        if (props != NULL && get(props, x->valuestring) != NULL)
            continue;
        for (int32_t i = 0; i < *n; i++)
            dup |= strcmp(p[i].name, x->valuestring) == 0;
        if (dup)
            continue;
        /* required but not declared: its schema is additionalProperties' */
        if (cJSON_IsFalse(ap))
            return hy_jsg_fail(g, HY_EINVAL,
                               "property '%.64s' is required but additionalProperties is false "
                               "and 'properties' does not declare it: no value can validate",
                               x->valuestring);
        p[(*n)++] = (prop_t){ x->valuestring, cJSON_IsObject(ap) ? ap : &any, true };
        (*n_req)++;
    }
    return HY_OK;
}

/* One key-value pair of a key the object does not declare (any string but
 * the declared names), into extra_kv. */
static int conv_object_extra(hy_jsg_t *g, const prop_t *p, int32_t n, const cJSON *ap,
                             const char *ws, hy_gtext_t *extra_kv)
{
    size_t old = path_push(g, "additionalProperties");
    const char **names = malloc(sizeof *names * (size_t)(n + 1));

    if (names == NULL) {
        path_pop(g, old);
        return jsg_nomem(g);
    }
    for (int32_t i = 0; i < n; i++)
        names[i] = p[i].name;
    if (n == 0) {
        hy_gtext_puts(extra_kv, hy_jsg_builtin(g, HY_JSG_STRING));
    } else {
        hy_gtext_puts(extra_kv, "\"\\\"\" ");
        not_names(g, names, n, 0, extra_kv);
    }
    free(names);
    hy_gtext_printf(extra_kv, " %s \":\" %s ", ws, ws);
    if (ap == NULL || cJSON_IsTrue(ap))
        hy_gtext_puts(extra_kv, hy_jsg_builtin(g, HY_JSG_VALUE));
    else
        conv(g, ap, extra_kv);
    hy_gtext_printf(extra_kv, " %s", ws);
    path_pop(g, old);
    return g->rc;
}

/*
 * The declared keys in order, each optional one skippable, commas right:
 * after(i) = what may follow once a key was written, with keys i.. left;
 * first(i) = the same when nothing was written yet.
 *   after(i) = ("," kv_i)? after(i+1)  (optional) | "," kv_i after(i+1)
 *   first(i) = kv_i after(i+1) | first(i+1)  (optional) | kv_i after(i+1)
 * after(n) = ("," extra)*, first(n) = (extra ("," extra)*)?
 * Each after(i) is a rule, so the text stays linear in n.  The object's
 * own rule is defined as name; extra_kv is NULL when no other key may
 * appear.
 */
static void conv_object_rules(hy_jsg_t *g, const prop_t *p, const hy_gtext_t *kv, int32_t n,
                              const hy_gtext_t *extra_kv, const char *ws, const char *name)
{
    hy_gtext_t f = { 0 }, body = { 0 };

    for (int32_t i = n; i >= 1 && g->rc == HY_OK; i--) {
        hy_gtext_t a = { 0 };
        char an[80];

        snprintf(an, sizeof an, "%s-a%d", name, i);
        name_add(g, an);
        if (i == n && extra_kv)
            hy_gtext_printf(&a, "( \",\" %s %s )*", ws, hy_gtext_of(&a, extra_kv, ""));
        else if (i == n)
            hy_gtext_puts(&a, "\"\"");
        else
            hy_gtext_printf(&a, "%s\",\" %s %s %s%s-a%d", p[i].required ? "" : "( ", ws,
                            hy_gtext_of(&a, &kv[i], ""), p[i].required ? "" : ")? ", name, i + 1);
        define_text(g, an, &a);
        hy_gtext_free(&a);
    }
    /* first(0), written out as one expression from the back */
    if (extra_kv)
        hy_gtext_printf(&f, "( %s ( \",\" %s %s )* )?", hy_gtext_of(&f, extra_kv, ""), ws,
                        hy_gtext_of(&f, extra_kv, ""));
    else
        hy_gtext_puts(&f, "\"\"");
    for (int32_t i = n - 1; i >= 0 && g->rc == HY_OK; i--) {
        hy_gtext_t t = { 0 };

        if (p[i].required)
            hy_gtext_printf(&t, "%s %s-a%d", hy_gtext_of(&t, &kv[i], ""), name, i + 1);
        else
            hy_gtext_printf(&t, "( %s %s-a%d | %s )", hy_gtext_of(&t, &kv[i], ""), name, i + 1,
                            hy_gtext_of(&t, &f, "\"\""));
        hy_gtext_free(&f);
        f = t;
    }
    hy_gtext_printf(&body, "\"{\" %s %s \"}\"", ws, hy_gtext_of(&body, &f, "\"\""));
    hy_gtext_free(&f);
    if (g->rc == HY_OK)
        define_text(g, name, &body);
    hy_gtext_free(&body);
}

static int conv_object(hy_jsg_t *g, const cJSON *s, hy_gtext_t *out)
{
    const cJSON *props = get(s, "properties"), *req = get(s, "required"),
                *ap = get(s, "additionalProperties"), *up = get(s, "unevaluatedProperties");
    const char *ws = hy_jsg_builtin(g, HY_JSG_WS);
    prop_t *p = NULL;
    int32_t n = 0, n_req = 0, i;
    long min_p, max_p;
    bool extra;
    char name[64];
    hy_gtext_t extra_kv = { 0 }, *kv = NULL;

    if (conv_object_check(g, props, req, ap, up) != HY_OK)
        return g->rc;
    p = calloc((size_t)(cJSON_GetArraySize(props) + cJSON_GetArraySize(req) + 1), sizeof *p);
    if (p == NULL)
        return jsg_nomem(g);
    if (conv_object_props(g, props, req, ap, p, &n, &n_req) != HY_OK)
        goto done;
    /* absent additionalProperties: free-form when nothing is declared,
     * else only the declared keys (a subset of what validates) */
    extra = ap == NULL ? (n == 0 && up == NULL) : !cJSON_IsFalse(ap);
    if (get_count(g, s, "minProperties", &min_p) != HY_OK ||
        get_count(g, s, "maxProperties", &max_p) != HY_OK)
        goto done;
    if ((min_p > n_req) || (max_p >= 0 && (extra || max_p < n))) {
        hy_jsg_fail(g, HY_EUNSUPPORTED,
                    "'%s' is not supported unless the %s keys already satisfy it",
                    min_p > n_req ? "minProperties" : "maxProperties",
                    min_p > n_req ? "required" : "declared");
        goto done;
    }
    if (extra && conv_object_extra(g, p, n, ap, ws, &extra_kv) != HY_OK)
        goto done;
    /* each key-value pair converted once */
    if ((kv = calloc((size_t)n + 1, sizeof *kv)) == NULL) {
        jsg_nomem(g);
        goto done;
    }
    for (i = 0; i < n && g->rc == HY_OK; i++)
        kv_expr(g, &p[i], ws, &kv[i]);
    hy_jsg_name(g, g->path_len ? g->path : "object", name);
    conv_object_rules(g, p, kv, n, extra ? &extra_kv : NULL, ws, name);
    if (g->rc == HY_OK)
        hy_gtext_puts(out, name);
done:
    for (i = 0; kv != NULL && i < n; i++)
        hy_gtext_free(&kv[i]);
    free(kv);
    free(p);
    hy_gtext_free(&extra_kv);
    return g->rc;
}

/* ---- arrays ------------------------------------------------------------------- */

static int conv_array(hy_jsg_t *g, const cJSON *s, hy_gtext_t *out)
{
    const cJSON *items = get(s, "items"), *prefix = get(s, "prefixItems"),
                *addl = get(s, "additionalItems"), *uniq = get(s, "uniqueItems"), *rest;
    const char *ws = hy_jsg_builtin(g, HY_JSG_WS);
    long min, max, n_prefix, k;
    hy_gtext_t body = { 0 }, el = { 0 };
    char name[64];
    int closes = 0;

    if (uniq != NULL && !cJSON_IsFalse(uniq))
        return hy_jsg_fail(g, HY_EUNSUPPORTED, "'uniqueItems': true is not supported");
    if (get_count(g, s, "minItems", &min) != HY_OK || get_count(g, s, "maxItems", &max) != HY_OK)
        return g->rc;
    if (min < 0)
        min = 0;
    if (cJSON_IsArray(items)) { /* draft 4-2019: items as a tuple */
        if (prefix != NULL)
            return hy_jsg_fail(g, HY_EINVAL, "'items' as an array together with 'prefixItems'");
        prefix = items;
        rest = addl;
    } else {
        if (addl != NULL)
            return hy_jsg_fail(g, HY_EUNSUPPORTED, "'additionalItems' without an 'items' array "
                                                  "is not supported");
        if (prefix != NULL && !cJSON_IsArray(prefix))
            return hy_jsg_fail(g, HY_EINVAL, "'prefixItems' must be an array");
        rest = items;
    }
    n_prefix = cJSON_GetArraySize(prefix);
    /* after a tuple with no schema for the rest, extra items are allowed
     * but generated only as far as minItems needs */
    if (rest == NULL && n_prefix > 0 && (max < 0 || max > HY_MAX(min, n_prefix)))
        max = HY_MAX(min, n_prefix);
    if (cJSON_IsFalse(rest))
        max = max < 0 ? n_prefix : HY_MIN(max, n_prefix);
    if (max >= 0 && max < min)
        return hy_jsg_fail(g, HY_EINVAL, "maxItems %ld is below minItems %ld (or the items "
                                         "allowed)", max, min);
    if (max > 10000 || min > 10000)
        return hy_jsg_fail(g, HY_ERANGE, "more than 10000 items is not supported");
    hy_jsg_name(g, g->path_len ? g->path : "array", name);
    hy_gtext_printf(&body, "\"[\" %s ", ws);
    if (max == 0)
        goto close;
    /* the prefix: item k is optional from k = min on (nested, so that a
     * later item implies the earlier ones) */
    for (k = 0; k < n_prefix && (max < 0 || k < max) && g->rc == HY_OK; k++) {
        size_t old = path_push_index(g, cJSON_IsArray(items) ? "items" : "prefixItems", (int)k);

        el.len = 0;
        conv(g, cJSON_GetArrayItem(prefix, (int)k), &el);
        path_pop(g, old);
        if (k >= min) {
            hy_gtext_puts(&body, "( ");
            closes++;
        }
        hy_gtext_printf(&body, "%s%s %s ", k ? "\",\" " : "", k ? ws : "", hy_gtext_of(&body, &el, ""));
        hy_gtext_printf(&body, "%s ", ws);
    }
    if (k == n_prefix && !cJSON_IsFalse(rest) && (max < 0 || max > n_prefix)) {
        long lo = HY_MAX(min - n_prefix, 0), hi = max < 0 ? -1 : max - n_prefix;
        size_t old = path_push(g, cJSON_IsArray(items) ? "additionalItems" : "items");

        el.len = 0;
        if (rest == NULL || cJSON_IsTrue(rest))
            hy_gtext_puts(&el, hy_jsg_builtin(g, HY_JSG_VALUE));
        else
            conv(g, rest, &el);
        path_pop(g, old);
        if (g->rc != HY_OK)
            goto done;
        if (n_prefix == 0) {
            /* the first item has no comma */
            hy_gtext_printf(&body, "%s%s %s", lo == 0 ? "( " : "", hy_gtext_of(&body, &el, ""), ws);
            lo = lo > 0 ? lo - 1 : 0;
            hi = hi < 0 ? -1 : hi - 1;
        }
        if (hi < 0)
            hy_gtext_printf(&body, " ( \",\" %s %s %s ){%ld,}", ws, hy_gtext_of(&body, &el, ""), ws,
                            lo);
        else if (hi > 0)
            hy_gtext_printf(&body, " ( \",\" %s %s %s ){%ld,%ld}", ws,
                            hy_gtext_of(&body, &el, ""), ws, lo, hi);
        if (n_prefix == 0 && min == 0)
            hy_gtext_puts(&body, " )?");
    }
    for (; closes > 0; closes--)
        hy_gtext_puts(&body, ")? ");
close:
    hy_gtext_puts(&body, "\"]\"");
    if (g->rc == HY_OK) {
        define_text(g, name, &body);
        hy_gtext_puts(out, name);
    }
done:
    hy_gtext_free(&body);
    hy_gtext_free(&el);
    return g->rc;
}

/* ---- dispatch ------------------------------------------------------------------ */

static bool has_any(const cJSON *s, const char *const *kw)
{
    for (; *kw; kw++)
        if (get(s, *kw) != NULL)
            return true;
    return false;
}

/* Keywords other than annotations. */
static bool has_constraints(const cJSON *s, const char *skip1, const char *skip2)
{
    const cJSON *k;

    cJSON_ArrayForEach(k, s)
        if (!is_annotation(k->string) && strcmp(k->string, skip1) != 0 &&
            strcmp(k->string, skip2) != 0)
            return true;
    return false;
}

static int check_keywords(hy_jsg_t *g, const cJSON *s)
{
    const cJSON *k;

    cJSON_ArrayForEach(k, s) {
        const char *n = k->string;

        if (is_annotation(n) || in_list(k_general_kw, n) || in_list(k_object_kw, n) ||
            in_list(k_array_kw, n) || in_list(k_string_kw, n) || in_list(k_number_kw, n))
            continue;
        return hy_jsg_fail(g, HY_EUNSUPPORTED, "keyword '%.64s' is not supported", n);
    }
    return HY_OK;
}

static int conv_type(hy_jsg_t *g, const cJSON *s, const char *t, hy_gtext_t *out)
{
    if (strcmp(t, "null") == 0)
        hy_gtext_puts(out, "\"null\"");
    else if (strcmp(t, "boolean") == 0)
        hy_gtext_puts(out, "( \"true\" | \"false\" )");
    else if (strcmp(t, "integer") == 0 || strcmp(t, "number") == 0)
        return hy_jsg_number(g, s, t[0] == 'i', out);
    else if (strcmp(t, "string") == 0)
        return hy_jsg_string(g, s, out);
    else if (strcmp(t, "array") == 0)
        return conv_array(g, s, out);
    else if (strcmp(t, "object") == 0)
        return conv_object(g, s, out);
    else
        return hy_jsg_fail(g, HY_EINVAL, "type '%.64s' is not a JSON Schema type", t);
    return HY_OK;
}

/* enum/const: the values whose JSON type the schema's "type" allows. */
static int conv_enum(hy_jsg_t *g, const cJSON *s, hy_gtext_t *out)
{
    const cJSON *e = get(s, "enum"), *c = get(s, "const"), *t = get(s, "type"), *v;
    static const char *const allowed[] = {"type", "enum", "const", "nullable", NULL};
    const cJSON *k;
    int n = 0;

    cJSON_ArrayForEach(k, s)
        if (!is_annotation(k->string) && !in_list(allowed, k->string))
            return hy_jsg_fail(g, HY_EUNSUPPORTED,
                               "'%.64s' together with enum/const is not supported", k->string);
    if (e != NULL && !cJSON_IsArray(e))
        return hy_jsg_fail(g, HY_EINVAL, "'enum' must be an array");
    hy_gtext_puts(out, "( ");
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *list = pass == 0 ? c : e;

        if (list == NULL)
            continue;
        for (v = pass == 0 ? c : e->child; v != NULL; v = pass == 0 ? NULL : v->next) {
            const char *kind = cJSON_IsNull(v) ? "null" : cJSON_IsBool(v) ? "boolean"
                               : cJSON_IsString(v) ? "string" : cJSON_IsArray(v) ? "array"
                               : cJSON_IsObject(v) ? "object"
                               : v->valuedouble == floor(v->valuedouble) ? "integer" : "number";
            bool ok = t == NULL || type_has(t, kind) ||
                      (strcmp(kind, "integer") == 0 && type_has(t, "number"));

            if (c != NULL && e != NULL && pass == 1 && !cJSON_Compare(v, c, true))
                continue; /* enum and const together: const must be in enum */
            if (!ok || (pass == 1 && c != NULL))
                continue;
            hy_gtext_puts(out, n++ ? " | " : "");
            hy_jsg_literal(g, v, out);
        }
    }
    if (cJSON_IsTrue(get(s, "nullable")))
        hy_gtext_puts(out, n++ ? " | \"null\"" : "\"null\"");
    hy_gtext_puts(out, " )");
    if (n == 0)
        return hy_jsg_fail(g, HY_EINVAL, "no enum/const value has an allowed type");
    return g->rc;
}

/* anyOf/oneOf: one alternative per branch, each merged with the keywords
 * beside the anyOf (X and (A or B) = (X and A) or (X and B)). */
static int conv_any_of(hy_jsg_t *g, const cJSON *s, const char *kw, hy_gtext_t *out)
{
    const cJSON *list = get(s, kw), *b;
    cJSON *base = NULL;
    int i = 0;

    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0)
        return hy_jsg_fail(g, HY_EINVAL, "'%s' must be a non-empty array", kw);
    if (has_constraints(s, kw, "nullable")) {
        if ((base = own(g, cJSON_Duplicate(s, true))) == NULL)
            return g->rc;
        cJSON_DeleteItemFromObject(base, kw);
        cJSON_DeleteItemFromObject(base, "nullable");
    }
    hy_gtext_puts(out, "( ");
    cJSON_ArrayForEach(b, list) {
        size_t old = path_push_index(g, kw, i);
        const cJSON *branch = b;

        if (base != NULL) {
            const cJSON *nb = normalize(g, b, 0);

            branch = nb ? own(g, merge2(g, base, nb)) : NULL;
        }
        hy_gtext_puts(out, i ? " | " : "");
        if (branch != NULL)
            conv(g, branch, out);
        path_pop(g, old);
        if (g->rc != HY_OK)
            return g->rc;
        i++;
    }
    if (cJSON_IsTrue(get(s, "nullable")))
        hy_gtext_puts(out, " | \"null\"");
    hy_gtext_puts(out, " )");
    return g->rc;
}

static int conv(hy_jsg_t *g, const cJSON *s, hy_gtext_t *out)
{
    static const char *const order[] = {"object", "array", "string", "integer", "number",
                                        "boolean", "null"};
    const cJSON *t, *ref;
    const char *types[8];
    int nt = 0, rc, written = 0;

    if (g->rc != HY_OK)
        return g->rc;
    if (g->depth >= HY_JSG_MAX_DEPTH)
        return hy_jsg_fail(g, HY_ERANGE, "schema nested deeper than %d", HY_JSG_MAX_DEPTH);
    if (cJSON_IsTrue(s)) {
        hy_gtext_puts(out, hy_jsg_builtin(g, HY_JSG_VALUE));
        return HY_OK;
    }
    if (cJSON_IsFalse(s))
        return hy_jsg_fail(g, HY_EINVAL, "the schema false accepts no value");
    if (!cJSON_IsObject(s))
        return hy_jsg_fail(g, HY_EINVAL, "a schema must be an object or a boolean, got %s",
                           json_kind(s));
    if (check_keywords(g, s) != HY_OK)
        return g->rc;
    g->depth++;
    ref = get(s, "$ref");
    if (get(s, "allOf") != NULL || (ref != NULL && has_constraints(s, "$ref", "$defs"))) {
        const cJSON *n = normalize(g, s, 0);

        rc = n != NULL ? conv(g, n, out) : g->rc;
        goto done;
    }
    if (ref != NULL) {
        rc = cJSON_IsString(ref) ? conv_ref(g, ref->valuestring, out)
                                 : hy_jsg_fail(g, HY_EINVAL, "'$ref' must be a string");
        goto done;
    }
    if (get(s, "anyOf") != NULL && get(s, "oneOf") != NULL) {
        rc = hy_jsg_fail(g, HY_EUNSUPPORTED, "anyOf and oneOf in one schema are not supported");
        goto done;
    }
    if (get(s, "anyOf") != NULL || get(s, "oneOf") != NULL) {
        rc = conv_any_of(g, s, get(s, "anyOf") ? "anyOf" : "oneOf", out);
        goto done;
    }
    if (get(s, "enum") != NULL || get(s, "const") != NULL) {
        rc = conv_enum(g, s, out);
        goto done;
    }
    t = get(s, "type");
    if (cJSON_IsString(t)) {
        types[nt++] = t->valuestring;
    } else if (cJSON_IsArray(t)) {
        const cJSON *x;

        cJSON_ArrayForEach(x, t) {
            if (!cJSON_IsString(x) || nt == 7) {
                rc = hy_jsg_fail(g, HY_EINVAL, "'type' must be a string or an array of strings");
                goto done;
            }
            types[nt++] = x->valuestring;
        }
    } else if (t != NULL) {
        rc = hy_jsg_fail(g, HY_EINVAL, "'type' must be a string or an array of strings");
        goto done;
    } else {
        /* no type: the types its keywords constrain, or any value */
        if (has_any(s, k_object_kw))
            types[nt++] = order[0];
        if (has_any(s, k_array_kw))
            types[nt++] = order[1];
        if (has_any(s, k_string_kw))
            types[nt++] = order[2];
        if (has_any(s, k_number_kw))
            types[nt++] = order[4];
        if (nt == 0) {
            hy_gtext_puts(out, hy_jsg_builtin(g, HY_JSG_VALUE));
            rc = HY_OK;
            goto done;
        }
    }
    if (nt == 0) {
        rc = hy_jsg_fail(g, HY_EINVAL, "'type' is an empty array");
        goto done;
    }
    hy_gtext_puts(out, "( ");
    for (int i = 0; i < nt && g->rc == HY_OK; i++) {
        bool dup = false;

        for (int j = 0; j < i; j++)
            dup |= strcmp(types[i], types[j]) == 0;
        /* "integer" next to "number" adds nothing */
        for (int j = 0; j < nt && !dup; j++)
            dup = strcmp(types[i], "integer") == 0 && strcmp(types[j], "number") == 0;
        if (dup)
            continue;
        hy_gtext_puts(out, written++ ? " | " : "");
        conv_type(g, s, types[i], out);
    }
    if (cJSON_IsTrue(get(s, "nullable")))
        hy_gtext_puts(out, " | \"null\"");
    hy_gtext_puts(out, " )");
    rc = g->rc;
done:
    g->depth--;
    return rc;
}

/* ---- public --------------------------------------------------------------------- */

int hy_jsg_create(hy_jsg_t **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? HY_OK : HY_ENOMEM;
}

void hy_jsg_free(hy_jsg_t *g)
{
    if (g == NULL)
        return;
    hy_gtext_free(&g->rules);
    for (int32_t i = 0; i < g->n_names; i++)
        free(g->names[i]);
    free(g->names);
    for (int32_t i = 0; i < g->n_refs; i++) {
        free(g->refs[i].ptr);
        free(g->refs[i].rule);
    }
    free(g->refs);
    for (int32_t i = 0; i < g->n_owned; i++)
        cJSON_Delete(g->owned[i]);
    free(g->owned);
    free(g);
}

static bool valid_name(const char *n)
{
    if (*n == '\0')
        return false;
    for (; *n; n++)
        if (!((*n >= 'a' && *n <= 'z') || (*n >= 'A' && *n <= 'Z') || (*n >= '0' && *n <= '9') ||
              *n == '-'))
            return false;
    return true;
}

int hy_jsg_add_rule(hy_jsg_t *g, const char *name, const char *body, char *err)
{
    g->err = err;
    if (!valid_name(name) || name_used(g, name))
        return hy_err(err, HY_EINVAL, "grammar rule name '%.64s' is invalid or already used",
                      name);
    if (name_add(g, name) != HY_OK)
        return g->rc;
    hy_jsg_define(g, name, body);
    return g->rc;
}

int hy_jsg_add_schema(hy_jsg_t *g, const char *name, const cJSON *schema, char *err)
{
    hy_gtext_t body = { 0 };
    int rc;

    g->err = err;
    g->rc = HY_OK;
    if (!valid_name(name) || name_used(g, name))
        return hy_err(err, HY_EINVAL, "grammar rule name '%.64s' is invalid or already used",
                      name);
    /* $refs of an earlier schema meant that schema's document */
    for (int32_t i = 0; i < g->n_refs; i++) {
        free(g->refs[i].ptr);
        free(g->refs[i].rule);
    }
    g->n_refs = 0;
    g->doc = schema;
    g->path[0] = '\0';
    g->path_len = 0;
    g->depth = 0;
    if (name_add(g, name) != HY_OK)
        return g->rc;
    if (conv(g, schema, &body) == HY_OK) {
        if (body.oom)
            jsg_nomem(g);
        else
            define_text(g, name, &body);
    }
    rc = g->rc;
    hy_gtext_free(&body);
    return rc;
}

const char *hy_jsg_ws(hy_jsg_t *g)
{
    return hy_jsg_builtin(g, HY_JSG_WS);
}

int hy_jsg_text(hy_jsg_t *g, char **text, size_t *len, char *err)
{
    hy_gtext_t copy = { 0 };

    hy_gtext_put(&copy, g->rules.s ? g->rules.s : "", g->rules.len);
    if (g->rules.oom || (*text = hy_gtext_take(&copy, len)) == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    return HY_OK;
}

int hy_json_schema_to_gbnf(const cJSON *schema, char **gbnf, size_t *len, char *err)
{
    hy_jsg_t *g = NULL;
    int rc;

    *gbnf = NULL;
    if (hy_jsg_create(&g) != HY_OK)
        return hy_err(err, HY_ENOMEM, "out of memory");
    rc = hy_jsg_add_schema(g, "root", schema, err);
    if (rc == HY_OK)
        rc = hy_jsg_text(g, gbnf, len, err);
    hy_jsg_free(g);
    return rc;
}
