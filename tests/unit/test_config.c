/*
 * test_config.c - the hyserve.ini table: defaults, the shipped
 * etc/hyserve.ini (every key present with its default), each type's bad
 * values with the exact message, unknown sections and keys, missing files,
 * and command-line overrides.
 */
#include "common/config.h"
#include "test.h"

#include <iniparser/iniparser.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

static char tmp_path[64];

/* Writes text to a fresh temporary file named like the real one. */
static const char *write_ini(const char *text)
{
    FILE *f;

    snprintf(tmp_path, sizeof tmp_path, "/tmp/hytest-%ld-hyserve.ini", (long)getpid());
    f = fopen(tmp_path, "w");
    if (f == NULL)
        return NULL;
    fputs(text, f);
    fclose(f);
    return tmp_path;
}

/* hy_config_set(key, value) must fail with exactly want. */
static int set_fails(const char *key, const char *value, const char *want)
{
    hy_config_t cfg;
    char err[HY_ERR_LEN] = "";
    int rc;

    hy_config_defaults(&cfg);
    rc = hy_config_set(&cfg, key, value, err);
    if (rc == HY_OK || strcmp(err, want) != 0) {
        printf("# %s=%s: rc %d, got \"%s\", want \"%s\"\n", key, value, rc, err, want);
        return 0;
    }
    return 1;
}

/* Loading text must fail with "<file>: " + want. */
static int load_fails(const char *text, const char *want)
{
    hy_config_t cfg;
    char err[HY_ERR_LEN] = "", full[HY_ERR_LEN];
    const char *path = write_ini(text);
    int rc;

    if (path == NULL)
        return 0;
    rc = hy_config_load(&cfg, path, err);
    unlink(path);
    snprintf(full, sizeof full, "%s: %s", path, want);
    if (rc == HY_OK || strcmp(err, full) != 0) {
        printf("# rc %d, got \"%s\", want \"%s\"\n", rc, err, full);
        return 0;
    }
    return 1;
}

static void test_defaults_and_shipped_file(void)
{
    hy_config_t def, shipped;
    char err[HY_ERR_LEN] = "";
    size_t n;
    const hy_config_key_t *keys = hy_config_keys(&n);
    dictionary *d;
    int missing = 0;

    hy_config_defaults(&def);
    HY_T_OK(def.engine.max_seqs == 64 && def.engine.max_batch_tokens == 2048 &&
            def.cache.page_tokens == 16 && def.cache.memory_fraction == 0.9 &&
            def.cache.kv_type == HY_CONFIG_KV_F16 && def.cache.checkpoint_interval == 1024 &&
            def.engine.activation_bits == 16 &&
            def.engine.weights_memory == HY_CONFIG_WEIGHTS_HUGE_PAGES &&
            strcmp(def.server.socket, "/run/hyserve/blue.sock") == 0 &&
            def.server.socket_mode == 0660 && def.server.workers == 4 &&
            def.server.max_body_bytes == 1048576 && strcmp(def.server.instance, "blue") == 0 &&
            def.log.facility == LOG_DAEMON && def.log.level == LOG_INFO &&
            strcmp(def.log.ident, "hyserve") == 0 && !def.log.to_stderr,
            "defaults are the documented ones");

    /* every default must pass its own row's checks */
    hy_config_defaults(&shipped);
    for (size_t i = 0; i < n; i++) {
        char key[128];

        snprintf(key, sizeof key, "%s.%s", keys[i].section, keys[i].key);
        if (hy_config_set(&shipped, key, keys[i].def, err) != HY_OK) {
            printf("# default %s: %s\n", key, err);
            missing++;
        }
    }
    HY_T_OK(missing == 0, "every default passes its own range check");

    missing = 0;
    d = iniparser_load(hy_t_srcpath("etc/hyserve.ini"));
    for (size_t i = 0; d != NULL && i < n; i++) {
        char key[128];
        const char *v;

        snprintf(key, sizeof key, "%s:%s", keys[i].section, keys[i].key);
        v = iniparser_getstring(d, key, NULL);
        if (v == NULL || strcmp(v, keys[i].def) != 0) {
            printf("# etc/hyserve.ini: [%s] %s = %s, default %s\n", keys[i].section,
                   keys[i].key, v ? v : "(missing)", keys[i].def);
            missing++;
        }
    }
    HY_T_OK(d != NULL && missing == 0, "etc/hyserve.ini lists every key with its default");
    if (d)
        iniparser_freedict(d);
    HY_T_OK(hy_config_load(&shipped, hy_t_srcpath("etc/hyserve.ini"), err) == HY_OK &&
            memcmp(&shipped, &def, sizeof def) == 0,
            "loading etc/hyserve.ini gives the defaults (%s)", err);
}

static void test_good_values(void)
{
    hy_config_t cfg;
    char err[HY_ERR_LEN] = "";
    const char *path = write_ini(
        "; comment\n[cache]\npage_tokens = 256\nmemory_fraction = 0.5 ; inline\n"
        "kv_type = q8_0\n"
        "[engine]\nactivation_bits = 8\nweights_memory = mmap\n"
        "[server]\nmax_body_bytes = 64k\nsocket_mode = 600\n"
        "[LOG]\nFacility = local3\nlevel = err\nstderr = yes\nsocket = \"/run/hy serve/log\"\n");
    int rc = hy_config_load(&cfg, path, err);

    unlink(path);
    HY_T_OK(rc == HY_OK && cfg.cache.page_tokens == 256 && cfg.cache.memory_fraction == 0.5 &&
            cfg.cache.kv_type == HY_CONFIG_KV_Q8_0 &&
            strcmp(cfg.log.socket, "/run/hy serve/log") == 0 &&
            cfg.server.max_body_bytes == 65536 && cfg.server.socket_mode == 0600 &&
            cfg.log.facility == LOG_LOCAL3 && cfg.log.level == LOG_ERR && cfg.log.to_stderr &&
            cfg.engine.max_seqs == 64 && cfg.engine.activation_bits == 8 &&
            cfg.engine.weights_memory == HY_CONFIG_WEIGHTS_MMAP,
            "a file sets every type and leaves other keys at their defaults (%s)", err);
    hy_config_defaults(&cfg);
    HY_T_OK(hy_config_set(&cfg, "server.max_body_bytes", "2MiB", err) == HY_OK &&
            cfg.server.max_body_bytes == 2097152 &&
            hy_config_set(&cfg, "model.path", "/m/x.gguf", err) == HY_OK &&
            strcmp(cfg.model.path, "/m/x.gguf") == 0,
            "command-line overrides set sizes and strings");
    hy_config_defaults(&cfg);
    HY_T_OK(hy_config_set(&cfg, "server.listen", "[fd00::2]:9000", err) == HY_OK &&
            strcmp(cfg.server.listen, "[fd00::2]:9000") == 0 &&
            hy_config_set(&cfg, "server.allow", " 10.0.0.0/8 , fd00::/64,192.168.1.7", err) ==
                HY_OK &&
            strcmp(cfg.server.allow, " 10.0.0.0/8 , fd00::/64,192.168.1.7") == 0 &&
            hy_config_set(&cfg, "server.listen", "", err) == HY_OK && !cfg.server.listen[0],
            "listen and allow take IPv4, IPv6 and empty (%s)", err);
}

static void test_bad_values(void)
{
    int ok = 1;

    ok &= load_fails("[cache]\npage_tokens = 0\n", "[cache] page_tokens = 0: must be 1..256");
    HY_T_OK(ok, "the documented message, from a file");

    ok = set_fails("cache.page_tokens", "12abc", "command line: [cache] page_tokens = 12abc: not an integer");
    ok &= set_fails("cache.page_tokens", "", "command line: [cache] page_tokens = : not an integer");
    ok &= set_fails("cache.page_tokens", "257", "command line: [cache] page_tokens = 257: must be 1..256");
    ok &= set_fails("cache.page_tokens", "-1", "command line: [cache] page_tokens = -1: must be 1..256");
    ok &= set_fails("cache.page_tokens", "99999999999999999999",
                    "command line: [cache] page_tokens = 99999999999999999999: not an integer");
    HY_T_OK(ok, "uint: trailing garbage, empty, out of range, negative, overflow");

    ok = set_fails("cache.memory_fraction", "0.9x", "command line: [cache] memory_fraction = 0.9x: not a number");
    ok &= set_fails("cache.memory_fraction", "nan", "command line: [cache] memory_fraction = nan: not a number");
    ok &= set_fails("cache.memory_fraction", "1.5", "command line: [cache] memory_fraction = 1.5: must be 0.01..1");
    HY_T_OK(ok, "float: garbage, nan, out of range");

    ok = set_fails("server.max_body_bytes", "1Q", "command line: [server] max_body_bytes = 1Q: not a size (bytes, or with K, M, G, T: e.g. 512K, 1M)");
    ok &= set_fails("server.max_body_bytes", "-1M", "command line: [server] max_body_bytes = -1M: not a size (bytes, or with K, M, G, T: e.g. 512K, 1M)");
    ok &= set_fails("server.max_body_bytes", "2G", "command line: [server] max_body_bytes = 2G: must be 1K..1G");
    ok &= set_fails("server.max_body_bytes", "99999999999T", "command line: [server] max_body_bytes = 99999999999T: not a size (bytes, or with K, M, G, T: e.g. 512K, 1M)");
    HY_T_OK(ok, "size: bad unit, negative, out of range, overflow");

    ok = set_fails("log.stderr", "maybe", "command line: [log] stderr = maybe: must be true or false");
    HY_T_OK(ok, "bool: not a boolean");

    ok = set_fails("cache.kv_type", "q4_0", "command line: [cache] kv_type = q4_0: must be one of f16|f32|q8_0");
    ok &= set_fails("engine.activation_bits", "4", "command line: [engine] activation_bits = 4: must be one of 16|8");
    ok &= set_fails("engine.weights_memory", "huge", "command line: [engine] weights_memory = huge: must be one of huge_pages|mmap");
    ok &= set_fails("log.level", "warn", "command line: [log] level = warn: must be one of debug|info|notice|warning|err");
    ok &= set_fails("attention.sparse", "on", "command line: [attention] sparse = on: must be one of off|block");
    ok &= set_fails("attention.sparse_block_tokens", "0", "command line: [attention] sparse_block_tokens = 0: must be 1..65536");
    ok &= set_fails("attention.sparse_topk", "-3", "command line: [attention] sparse_topk = -3: must be 0..1048576");
    ok &= set_fails("attention.sparse_topp", "1.5", "command line: [attention] sparse_topp = 1.5: must be 0..1");
    ok &= set_fails("attention.sparse_max_blocks", "0", "command line: [attention] sparse_max_blocks = 0: must be 1..1048576");
    ok &= set_fails("attention.sink_tokens", "x", "command line: [attention] sink_tokens = x: not an integer");
    ok &= set_fails("attention.local_tokens", "16777217", "command line: [attention] local_tokens = 16777217: must be 0..16777216");
    ok &= set_fails("attention.sparse_min_tokens", "1e3", "command line: [attention] sparse_min_tokens = 1e3: not an integer");
    HY_T_OK(ok, "enum: names the allowed values");

    ok = set_fails("server.socket_mode", "0778", "command line: [server] socket_mode = 0778: must be an octal mode 0000..0777 (e.g. 0660)");
    ok &= set_fails("server.socket_mode", "1777", "command line: [server] socket_mode = 1777: must be an octal mode 0000..0777 (e.g. 0660)");
    HY_T_OK(ok, "mode: non-octal digit, out of range");

    ok = set_fails("server.listen", "10.0.0.1", "command line: [server] listen = 10.0.0.1: expected ADDRESS:PORT (e.g. 10.0.0.2:9000, [fd00::2]:9000)");
    ok &= set_fails("server.listen", "10.0.0.300:9000", "command line: [server] listen = 10.0.0.300:9000: '10.0.0.300' is not an IP address (names are not resolved)");
    ok &= set_fails("server.listen", "localhost:9000", "command line: [server] listen = localhost:9000: 'localhost' is not an IP address (names are not resolved)");
    ok &= set_fails("server.listen", "10.0.0.1:65536", "command line: [server] listen = 10.0.0.1:65536: port '65536' is not 1..65535");
    ok &= set_fails("server.listen", "10.0.0.1:0", "command line: [server] listen = 10.0.0.1:0: port '0' is not 1..65535");
    ok &= set_fails("server.listen", "10.0.0.1:+80", "command line: [server] listen = 10.0.0.1:+80: port '+80' is not 1..65535");
    ok &= set_fails("server.listen", "::1:9000", "command line: [server] listen = ::1:9000: an IPv6 address is written in brackets: [ADDRESS]:PORT");
    ok &= set_fails("server.listen", "[10.0.0.1]:9000", "command line: [server] listen = [10.0.0.1]:9000: '10.0.0.1' is not an IP address (names are not resolved)");
    HY_T_OK(ok, "listen: no port, bad address, a name, port out of range, IPv6 without brackets");

    ok = set_fails("server.allow", "10.0.0.0/33", "command line: [server] allow = 10.0.0.0/33: '10.0.0.0/33': prefix length must be 0..32");
    ok &= set_fails("server.allow", "fd00::/129", "command line: [server] allow = fd00::/129: 'fd00::/129': prefix length must be 0..128");
    ok &= set_fails("server.allow", "10.0.0.0/8, 10.0.0.x", "command line: [server] allow = 10.0.0.0/8, 10.0.0.x: '10.0.0.x' is not an IP address");
    ok &= set_fails("server.allow", "10.0.0.0/8,,::1", "command line: [server] allow = 10.0.0.0/8,,::1: empty item in the list");
    ok &= set_fails("server.allow", "10.0.0.0/", "command line: [server] allow = 10.0.0.0/: '10.0.0.0/': prefix length must be 0..32");
    ok &= load_fails("[server]\nallow = 10.1.0.0/16 x\n", "[server] allow = 10.1.0.0/16 x: '10.1.0.0/16 x': prefix length must be 0..32");
    HY_T_OK(ok, "allow: prefix out of range, bad address, empty item, from a file too");

    ok = set_fails("log.ident", "", "command line: [log] ident = : must not be empty");
    ok &= set_fails("server.instance", "abcdefghijabcdefghijabcdefghijabc",
                    "command line: [server] instance = abcdefghijabcdefghijabcdefghijabc: longer than 32 bytes");
    HY_T_OK(ok, "string: empty where required, too long");
}

static void test_structure_errors(void)
{
    hy_config_t cfg;
    char err[HY_ERR_LEN] = "";
    int ok;

    ok = load_fails("[cache]\npage_token = 16\n", "[cache] page_token: unknown key");
    ok &= set_fails("cache.page_token", "16", "command line: [cache] page_token: unknown key");
    HY_T_OK(ok, "unknown keys are named");
    ok = load_fails("[cache]\nmemory_mb = 64\n", "[cache] memory_mb: unknown key (renamed to hot_mb)");
    ok &= set_fails("cache.memory_mb", "64",
                    "command line: [cache] memory_mb: unknown key (renamed to hot_mb)");
    HY_T_OK(ok, "a key an older release read names its new name");
    ok = load_fails("[caches]\npage_tokens = 16\n", "[caches]: unknown section");
    ok &= set_fails("caches.page_tokens", "16", "command line: [caches]: unknown section");
    ok &= set_fails("page_tokens", "16", "command line: page_tokens: expected section.key");
    HY_T_OK(ok, "unknown sections are named");
    ok = load_fails("workers = 4\n[server]\n", "workers: key outside any section");
    HY_T_OK(ok, "keys before the first section are refused");

    HY_T_OK(hy_config_load(&cfg, "/nonexistent/hyserve.ini", err) == HY_EIO &&
            strcmp(err, "/nonexistent/hyserve.ini: cannot open: No such file or directory") == 0,
            "a missing file is named (%s)", err);
    {
        const char *path = write_ini("[cache\npage_tokens = 16\n");
        int rc = hy_config_load(&cfg, path, err);

        unlink(path);
        HY_T_OK(rc == HY_EFORMAT && strncmp(err, path, strlen(path)) == 0 &&
                strstr(err, "syntax error") != NULL,
                "a syntax error names the file (%s)", err);
    }
}

int main(void)
{
    test_defaults_and_shipped_file();
    test_good_values();
    test_bad_values();
    test_structure_errors();
    return hy_t_done();
}
