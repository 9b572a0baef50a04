/*
 * config.c - the hyserve.ini table and its one parse-and-check path.
 * iniparser only splits the file into strings: its own number getters
 * accept "12abc" as 12, so every value is parsed here with strtoll/strtod
 * and rejected unless the whole string is consumed.  Adding a key means
 * adding one table row, one struct field and one documented line in
 * etc/hyserve.ini (the unit test checks the three agree).
 */
#include "common/config.h"
#include "common/netaddr.h"

#include <ctype.h>
#include <errno.h>
#include <iniparser/iniparser.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <syslog.h>

static const hy_config_choice_t kv_types[] = {
    { "f16", HY_CONFIG_KV_F16 }, { "f32", HY_CONFIG_KV_F32 }, { "q8_0", HY_CONFIG_KV_Q8_0 },
    { NULL, 0 },
};

static const hy_config_choice_t backends[] = {
    { "cpu", HY_CONFIG_BACKEND_CPU }, { "cuda", HY_CONFIG_BACKEND_CUDA }, { NULL, 0 },
};

static const hy_config_choice_t act_bits[] = {
    { "16", 16 }, { "8", 8 }, { NULL, 0 },
};

static const hy_config_choice_t weights_memories[] = {
    { "huge_pages", HY_CONFIG_WEIGHTS_HUGE_PAGES }, { "mmap", HY_CONFIG_WEIGHTS_MMAP }, { NULL, 0 },
};

static const hy_config_choice_t sparse_modes[] = {
    { "off", HY_CONFIG_SPARSE_OFF }, { "block", HY_CONFIG_SPARSE_BLOCK }, { NULL, 0 },
};

static const hy_config_choice_t facilities[] = {
    { "daemon", LOG_DAEMON }, { "user", LOG_USER },     { "local0", LOG_LOCAL0 },
    { "local1", LOG_LOCAL1 }, { "local2", LOG_LOCAL2 }, { "local3", LOG_LOCAL3 },
    { "local4", LOG_LOCAL4 }, { "local5", LOG_LOCAL5 }, { "local6", LOG_LOCAL6 },
    { "local7", LOG_LOCAL7 }, { NULL, 0 },
};

static const hy_config_choice_t levels[] = {
    { "debug", LOG_DEBUG }, { "info", LOG_INFO }, { "notice", LOG_NOTICE },
    { "warning", LOG_WARNING }, { "err", LOG_ERR }, { NULL, 0 },
};

#define OFF(f) offsetof(hy_config_t, f)
#define STR(f) (double)(sizeof(((hy_config_t *)0)->f) - 1)
#define U32_MAX 4294967295.0

static const hy_config_key_t keys[] = {
    /* section  key                   type               offset                         default                  min     max */
    { "model",  "path",               HY_CONFIG_STRING,  OFF(model.path),               "",                      0,      STR(model.path), NULL },
    { "model",  "chat_template",      HY_CONFIG_STRING,  OFF(model.chat_template),      "",                      0,      STR(model.chat_template), NULL },
    { "model",  "threads",            HY_CONFIG_UINT,    OFF(model.threads),            "0",                     0,      4096, NULL },
    { "engine", "max_seqs",           HY_CONFIG_UINT,    OFF(engine.max_seqs),          "64",                    1,      4096, NULL },
    { "engine", "max_batch_tokens",   HY_CONFIG_UINT,    OFF(engine.max_batch_tokens),  "2048",                  1,      1048576, NULL },
    { "engine", "max_context",        HY_CONFIG_UINT,    OFF(engine.max_context),       "0",                     0,      16777216, NULL },
    { "engine", "backend",            HY_CONFIG_ENUM,    OFF(engine.backend),           "cpu",                   0,      0, backends },
    { "engine", "activation_bits",    HY_CONFIG_ENUM,    OFF(engine.activation_bits),   "16",                    0,      0, act_bits },
    { "engine", "weights_memory",     HY_CONFIG_ENUM,    OFF(engine.weights_memory),    "huge_pages",            0,      0, weights_memories },
    { "cache",  "hot_mb",             HY_CONFIG_UINT,    OFF(cache.hot_mb),             "0",                     0,      U32_MAX, NULL },
    { "cache",  "memory_fraction",    HY_CONFIG_FLOAT,   OFF(cache.memory_fraction),    "0.9",                   0.01,   1, NULL },
    { "cache",  "page_tokens",        HY_CONFIG_UINT,    OFF(cache.page_tokens),        "16",                    1,      256, NULL },
    { "cache",  "kv_type",            HY_CONFIG_ENUM,    OFF(cache.kv_type),            "f16",                   0,      0, kv_types },
    { "cache",  "checkpoint_interval", HY_CONFIG_UINT,   OFF(cache.checkpoint_interval), "1024",                 1,      16777216, NULL },
    { "cache",  "warm_mb",            HY_CONFIG_UINT,    OFF(cache.warm_mb),            "0",                     0,      U32_MAX, NULL },
    { "cache",  "disk_dir",           HY_CONFIG_STRING,  OFF(cache.disk_dir),           "",                      0,      STR(cache.disk_dir), NULL },
    { "cache",  "disk_mb",            HY_CONFIG_UINT,    OFF(cache.disk_mb),            "4096",                  1,      U32_MAX, NULL },
    { "cache",  "hot_tokens_per_seq", HY_CONFIG_UINT,    OFF(cache.hot_tokens_per_seq), "0",                     0,      16777216, NULL },
    { "cache",  "seq_warm_mb",        HY_CONFIG_UINT,    OFF(cache.seq_warm_mb),        "0",                     0,      4294967295, NULL },
    { "attention", "sparse",          HY_CONFIG_ENUM,    OFF(attention.sparse),         "off",                   0,      0, sparse_modes },
    { "attention", "sparse_block_tokens", HY_CONFIG_UINT, OFF(attention.sparse_block_tokens), "64",              1,      65536, NULL },
    { "attention", "sparse_topk",     HY_CONFIG_UINT,    OFF(attention.sparse_topk),    "64",                    0,      1048576, NULL },
    { "attention", "sparse_topp",     HY_CONFIG_FLOAT,   OFF(attention.sparse_topp),    "0.99",                  0,      1, NULL },
    { "attention", "sparse_max_blocks", HY_CONFIG_UINT,  OFF(attention.sparse_max_blocks), "512",                1,      1048576, NULL },
    { "attention", "sink_tokens",     HY_CONFIG_UINT,    OFF(attention.sink_tokens),    "64",                    0,      16777216, NULL },
    { "attention", "local_tokens",    HY_CONFIG_UINT,    OFF(attention.local_tokens),   "256",                   0,      16777216, NULL },
    { "attention", "sparse_min_tokens", HY_CONFIG_UINT,  OFF(attention.sparse_min_tokens), "4096",               0,      16777216, NULL },
    { "server", "socket",             HY_CONFIG_STRING,  OFF(server.socket),            "/run/hyserve/blue.sock", 1,     STR(server.socket), NULL },
    { "server", "listen",             HY_CONFIG_LISTEN,  OFF(server.listen),            "",                      0,      STR(server.listen), NULL },
    { "server", "allow",              HY_CONFIG_CIDRS,   OFF(server.allow),             "",                      0,      STR(server.allow), NULL },
    { "server", "control_socket",     HY_CONFIG_STRING,  OFF(server.control_socket),    "",                      0,      STR(server.control_socket), NULL },
    { "server", "socket_mode",        HY_CONFIG_MODE,    OFF(server.socket_mode),       "0660",                  0,      0777, NULL },
    { "server", "socket_group",       HY_CONFIG_STRING,  OFF(server.socket_group),      "",                      0,      STR(server.socket_group), NULL },
    { "server", "workers",            HY_CONFIG_UINT,    OFF(server.workers),           "4",                     1,      256, NULL },
    { "server", "threads_per_worker", HY_CONFIG_UINT,    OFF(server.threads_per_worker), "16",                   1,      64, NULL },
    { "server", "max_queue",          HY_CONFIG_UINT,    OFF(server.max_queue),         "256",                   1,      65536, NULL },
    { "server", "drain_seconds",      HY_CONFIG_UINT,    OFF(server.drain_seconds),     "30",                    0,      3600, NULL },
    { "server", "max_body_bytes",     HY_CONFIG_SIZE,    OFF(server.max_body_bytes),    "1M",                    1024,   1073741824.0, NULL },
    { "server", "instance",           HY_CONFIG_STRING,  OFF(server.instance),          "blue",                  1,      32, NULL },
    { "server", "secret_file",        HY_CONFIG_STRING,  OFF(server.secret_file),       "",                      0,      STR(server.secret_file), NULL },
    { "server", "user",               HY_CONFIG_STRING,  OFF(server.user),              "",                      0,      STR(server.user), NULL },
    { "server", "run_dir",            HY_CONFIG_STRING,  OFF(server.run_dir),           "",                      0,      STR(server.run_dir), NULL },
    { "server", "engine_restart_max", HY_CONFIG_UINT,    OFF(server.engine_restart_max), "5",                    1,      1000, NULL },
    { "server", "engine_restart_window_s", HY_CONFIG_UINT, OFF(server.engine_restart_window_s), "60",            1,      86400, NULL },
    { "log",    "facility",           HY_CONFIG_ENUM,    OFF(log.facility),             "daemon",                0,      0, facilities },
    { "log",    "level",              HY_CONFIG_ENUM,    OFF(log.level),                "info",                  0,      0, levels },
    { "log",    "ident",              HY_CONFIG_STRING,  OFF(log.ident),                "hyserve",               1,      STR(log.ident), NULL },
    { "log",    "stderr",             HY_CONFIG_BOOL,    OFF(log.to_stderr),            "false",                 0,      0, NULL },
    { "log",    "socket",             HY_CONFIG_STRING,  OFF(log.socket),               "",                      0,      STR(log.socket), NULL },
};

const hy_config_key_t *hy_config_keys(size_t *n)
{
    *n = HY_ARRAY_LEN(keys);
    return keys;
}

/* Keys an older release read, under their new names: a config written for
 * it fails with the name to use instead of a bare "unknown key". */
static const struct {
    const char *section, *old, *now;
} k_renamed[] = {
    {"cache", "memory_mb", "hot_mb"},
};

static int unknown_key(const char *where, const char *section, const char *key, char *err)
{
    for (size_t i = 0; i < HY_ARRAY_LEN(k_renamed); i++)
        if (strcmp(section, k_renamed[i].section) == 0 && strcmp(key, k_renamed[i].old) == 0)
            return hy_err(err, HY_ENOENT, "%s: [%s] %s: unknown key (renamed to %s)", where,
                          section, key, k_renamed[i].now);
    return hy_err(err, HY_ENOENT, "%s: [%s] %s: unknown key", where, section, key);
}

static const hy_config_key_t *find_key(const char *section, const char *key)
{
    for (size_t i = 0; i < HY_ARRAY_LEN(keys); i++) {
        if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].key, key) == 0)
            return &keys[i];
    }
    return NULL;
}

static bool known_section(const char *section)
{
    for (size_t i = 0; i < HY_ARRAY_LEN(keys); i++) {
        if (strcmp(keys[i].section, section) == 0)
            return true;
    }
    return false;
}

/* Every value error goes through here: "<src>: [sec] key = value: <why>". */
static int bad(char *err, const char *src, const hy_config_key_t *k, const char *value,
               const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int bad(char *err, const char *src, const hy_config_key_t *k, const char *value,
               const char *fmt, ...)
{
    char why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return hy_err(err, HY_ERANGE, "%s: [%s] %s = %s: %s", src, k->section, k->key, value, why);
}

/* "1048576" -> "1M": ranges read the way users write sizes. */
static void fmt_size(char *buf, size_t cap, uint64_t v)
{
    static const char units[] = "KMGT";
    int u = -1;

    while (u < 3 && v >= 1024 && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, cap, "%llu", (unsigned long long)v);
    else
        snprintf(buf, cap, "%llu%c", (unsigned long long)v, units[u]);
}

/* Whole-string decimal integer; false on empty input or trailing garbage. */
static bool parse_int(const char *s, long long *out)
{
    char *end;

    errno = 0;
    *out = strtoll(s, &end, 10);
    return end != s && *end == '\0' && errno == 0 && !isspace((unsigned char)*s);
}

static bool parse_size(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;
    int shift = 0;

    if (!isdigit((unsigned char)*s)) /* strtoull would wrap "-1" */
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0)
        return false;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift > 0 && (strcasecmp(end, "B") == 0 || strcasecmp(end, "iB") == 0))
        end += strlen(end);
    if (*end != '\0' || (shift > 0 && v > (UINT64_MAX >> shift)))
        return false;
    *out = (uint64_t)v << shift;
    return true;
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = { "true", "yes", "on", "1" };
    static const char *const no[] = { "false", "no", "off", "0" };

    for (size_t i = 0; i < HY_ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

/* The one path from a string to a checked field value. */
static int apply(hy_config_t *cfg, const hy_config_key_t *k, const char *value,
                 const char *src, char *err)
{
    char *field = (char *)cfg + k->offset;
    long long iv;
    uint64_t sv;
    double dv;
    char *end;

    switch (k->type) {
    case HY_CONFIG_INT:
    case HY_CONFIG_UINT:
        if (!parse_int(value, &iv))
            return bad(err, src, k, value, "not an integer");
        if ((double)iv < k->min || (double)iv > k->max)
            return bad(err, src, k, value, "must be %.0f..%.0f", k->min, k->max);
        if (k->type == HY_CONFIG_INT)
            *(int32_t *)field = (int32_t)iv;
        else
            *(uint32_t *)field = (uint32_t)iv;
        return HY_OK;
    case HY_CONFIG_SIZE: {
        char lo[32], hi[32];

        fmt_size(lo, sizeof lo, (uint64_t)k->min);
        fmt_size(hi, sizeof hi, (uint64_t)k->max);
        if (!parse_size(value, &sv))
            return bad(err, src, k, value, "not a size (bytes, or with K, M, G, T: e.g. 512K, 1M)");
        if ((double)sv < k->min || (double)sv > k->max)
            return bad(err, src, k, value, "must be %s..%s", lo, hi);
        *(uint64_t *)field = sv;
        return HY_OK;
    }
    case HY_CONFIG_FLOAT:
        errno = 0;
        dv = strtod(value, &end);
        if (end == value || *end != '\0' || errno != 0 || !isfinite(dv) ||
            isspace((unsigned char)*value))
            return bad(err, src, k, value, "not a number");
        if (dv < k->min || dv > k->max)
            return bad(err, src, k, value, "must be %g..%g", k->min, k->max);
        *(double *)field = dv;
        return HY_OK;
    case HY_CONFIG_BOOL:
        if (!parse_bool(value, (bool *)field))
            return bad(err, src, k, value, "must be true or false");
        return HY_OK;
    case HY_CONFIG_LISTEN:
    case HY_CONFIG_CIDRS:
    case HY_CONFIG_STRING: {
        size_t len = strlen(value);

        if (k->type != HY_CONFIG_STRING && value[0] && (double)len <= k->max) {
            char why[200];
            struct sockaddr_storage ss;
            socklen_t sl;
            hy_net_allow_t allow;

            if ((k->type == HY_CONFIG_LISTEN ? hy_net_parse_listen(value, &ss, &sl, why, sizeof why)
                                             : hy_net_parse_allow(value, &allow, why, sizeof why)) !=
                HY_OK)
                return bad(err, src, k, value, "%s", why);
        }
        if ((double)len < k->min)
            return bad(err, src, k, value, "must not be empty");
        if ((double)len > k->max)
            return bad(err, src, k, value, "longer than %.0f bytes", k->max);
        memcpy(field, value, len + 1);
        return HY_OK;
    }
    case HY_CONFIG_ENUM: {
        char list[256] = "";

        for (const hy_config_choice_t *c = k->choices; c->name != NULL; c++) {
            if (strcmp(value, c->name) == 0) {
                *(int32_t *)field = c->value;
                return HY_OK;
            }
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                     c == k->choices ? "" : "|", c->name);
        }
        return bad(err, src, k, value, "must be one of %s", list);
    }
    case HY_CONFIG_MODE:
        errno = 0;
        iv = strtoll(value, &end, 8);
        if (!isdigit((unsigned char)*value) || *end != '\0' || errno != 0 || iv < k->min ||
            iv > k->max)
            return bad(err, src, k, value, "must be an octal mode 0000..0777 (e.g. 0660)");
        *(uint32_t *)field = (uint32_t)iv;
        return HY_OK;
    }
    return hy_err(err, HY_EINVAL, "%s: [%s] %s: bad table type", src, k->section, k->key);
}

void hy_config_defaults(hy_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < HY_ARRAY_LEN(keys); i++)
        (void)apply(cfg, &keys[i], keys[i].def, "defaults", NULL);
}

int hy_config_set(hy_config_t *cfg, const char *dotted_key, const char *value, char *err)
{
    const char *dot = strchr(dotted_key, '.');
    char section[64];
    const hy_config_key_t *k;

    if (dot == NULL || (size_t)(dot - dotted_key) >= sizeof section)
        return hy_err(err, HY_EINVAL, "command line: %s: expected section.key", dotted_key);
    memcpy(section, dotted_key, (size_t)(dot - dotted_key));
    section[dot - dotted_key] = '\0';
    if (!known_section(section))
        return hy_err(err, HY_ENOENT, "command line: [%s]: unknown section", section);
    k = find_key(section, dot + 1);
    if (k == NULL)
        return unknown_key("command line", section, dot + 1, err);
    return apply(cfg, k, value, "command line", err);
}

/* iniparser reports syntax errors through a global callback with no user
 * pointer; this buffer catches the message for the duration of one load. */
static _Thread_local char ini_error[512];

static int catch_ini_error(const char *fmt, ...)
{
    va_list ap;
    size_t used = strlen(ini_error);

    va_start(ap, fmt);
    vsnprintf(ini_error + used, sizeof ini_error - used, fmt, ap);
    va_end(ap);
    return 0;
}

int hy_config_load(hy_config_t *cfg, const char *path, char *err)
{
    dictionary *d = NULL;
    FILE *f;
    int rc = HY_OK;

    hy_config_defaults(cfg);
    f = fopen(path, "r");
    if (f == NULL)
        return hy_err(err, HY_EIO, "%s: cannot open: %s", path, strerror(errno));
    fclose(f);
    ini_error[0] = '\0';
    iniparser_set_error_callback(catch_ini_error);
    d = iniparser_load(path);
    iniparser_set_error_callback(NULL);
    if (d == NULL) {
        /* iniparser's text is "iniparser: syntax error in F (N):\n-> line\n" */
        size_t len;

        for (char *p = ini_error; *p; p++)
            if (*p == '\n')
                *p = ' ';
        len = strlen(ini_error);
        while (len > 0 && ini_error[len - 1] == ' ')
            ini_error[--len] = '\0';
        rc = hy_err(err, HY_EFORMAT, "%s: cannot parse: %s", path,
                    ini_error[0] ? ini_error : "iniparser failed");
        goto out;
    }
    /* Walk the raw entries in file order: sections are stored as "name"
     * with a NULL value, keys as "section:key" (":key" before any section). */
    for (ssize_t i = 0; i < d->size; i++) {
        const char *full = d->key[i], *colon;
        char section[64];
        const hy_config_key_t *k;
        size_t slen;

        if (full == NULL)
            continue;
        colon = strchr(full, ':');
        slen = colon ? (size_t)(colon - full) : strlen(full);
        if (slen >= sizeof section) {
            rc = hy_err(err, HY_ENOENT, "%s: [%.*s]: unknown section", path, (int)slen, full);
            goto out;
        }
        memcpy(section, full, slen);
        section[slen] = '\0';
        if (colon == NULL) {
            if (!known_section(section)) {
                rc = hy_err(err, HY_ENOENT, "%s: [%s]: unknown section", path, section);
                goto out;
            }
            continue;
        }
        if (slen == 0) {
            rc = hy_err(err, HY_ENOENT, "%s: %s: key outside any section", path, colon + 1);
            goto out;
        }
        k = find_key(section, colon + 1);
        if (k == NULL) {
            rc = unknown_key(path, section, colon + 1, err);
            goto out;
        }
        rc = apply(cfg, k, d->val[i] ? d->val[i] : "", path, err);
        if (rc != HY_OK)
            goto out;
    }
out:
    if (d != NULL)
        iniparser_freedict(d);
    return rc;
}
