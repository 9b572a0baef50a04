/*
 * config.h - hyserve.ini as a C struct.  Every key is one row of a single
 * table in config.c {section, key, type, offset, default, min, max}; the
 * file, command-line overrides and the defaults all go through the same
 * parse-and-check path, so a bad value is refused with one message format:
 *   hyserve.ini: [cache] page_tokens = 0: must be 1..256
 * etc/hyserve.ini documents every key with its default.
 */
#ifndef HY_COMMON_CONFIG_H
#define HY_COMMON_CONFIG_H

#include "common/hy.h"

#define HY_CONFIG_PATH_LEN 4096
#define HY_CONFIG_SOCKET_LEN 108 /* sizeof(sockaddr_un.sun_path) */
#define HY_CONFIG_NAME_LEN 64
#define HY_CONFIG_ALLOW_LEN 2048

typedef enum {
    HY_CONFIG_INT,    /* int32_t, decimal */
    HY_CONFIG_UINT,   /* uint32_t, decimal */
    HY_CONFIG_SIZE,   /* uint64_t bytes; "512", "64K", "512M", "2G", "1T" (powers of 1024) */
    HY_CONFIG_FLOAT,  /* double */
    HY_CONFIG_BOOL,   /* bool; true/false, yes/no, on/off, 1/0 */
    HY_CONFIG_STRING, /* char[max + 1]; max = longest accepted length */
    HY_CONFIG_ENUM,   /* int32_t; value of the matching choice */
    HY_CONFIG_MODE,   /* uint32_t file permission bits, octal ("0660") */
    HY_CONFIG_LISTEN, /* char[max + 1]; "" or ADDRESS:PORT (common/netaddr.h) */
    HY_CONFIG_CIDRS,  /* char[max + 1]; "" or CIDR[, CIDR...] (common/netaddr.h) */
} hy_config_type_t;

/* KV cache element type ([cache] kv_type). */
enum { HY_CONFIG_KV_F16, HY_CONFIG_KV_F32, HY_CONFIG_KV_Q8_0 };
enum { HY_CONFIG_BACKEND_CPU, HY_CONFIG_BACKEND_CUDA };
/* [attention] sparse */
enum { HY_CONFIG_SPARSE_OFF, HY_CONFIG_SPARSE_BLOCK };
enum { HY_CONFIG_WEIGHTS_HUGE_PAGES, HY_CONFIG_WEIGHTS_MMAP };

/* [attention]: block-sparse attention of the full-attention layers
 * (kv/plan.h hy_plan_sparse turns it into the KV layout's blocks). */
typedef struct {
    int32_t sparse;               /* HY_CONFIG_SPARSE_* */
    uint32_t sparse_block_tokens; /* tokens per block, a multiple of [cache] page_tokens */
    uint32_t sparse_topk;         /* blocks chosen by score per KV head (with topp: at least) */
    double sparse_topp;           /* 0, or the block mass the chosen blocks reach */
    uint32_t sparse_max_blocks;   /* with sparse_topp: the most chosen by score */
    uint32_t sink_tokens;         /* the sequence's first tokens, always read (whole blocks) */
    uint32_t local_tokens;        /* the tokens before a token's own block, always read */
    uint32_t sparse_min_tokens;   /* positions below it attend densely */
} hy_config_attention_t;

typedef struct {
    struct {
        char path[HY_CONFIG_PATH_LEN];          /* GGUF file */
        char chat_template[HY_CONFIG_PATH_LEN]; /* "" = the model's own */
        uint32_t threads;                       /* 0 = all cores */
    } model;
    struct {
        uint32_t max_seqs;
        uint32_t max_batch_tokens;
        uint32_t max_context; /* 0 = the model's */
        int32_t backend;      /* HY_CONFIG_BACKEND_* */
        int32_t activation_bits; /* 16 | 8: hy_backend_opts_t.act_bits */
        int32_t weights_memory;  /* HY_CONFIG_WEIGHTS_*: hy_backend_opts_t.weights_memory */
    } engine;
    struct {
        uint32_t hot_mb;        /* the hot tier (KV pages, state slots); 0 = memory_fraction
                                   of what the backend's memory has free */
        double memory_fraction;
        uint32_t page_tokens;
        int32_t kv_type;        /* HY_CONFIG_KV_* */
        uint32_t checkpoint_interval; /* tokens between recurrent-state snapshots */
        uint32_t warm_mb;       /* host RAM under the hot tier; 0 = none */
        char disk_dir[HY_CONFIG_PATH_LEN]; /* the cold tier's files; "" = none */
        uint32_t disk_mb;       /* the cold tier's budget */
        uint32_t hot_tokens_per_seq; /* 0 = running sequences stay entirely hot */
        uint32_t seq_warm_mb;        /* out arena RAM; 0 = all of it (no spill file) */
    } cache;
    hy_config_attention_t attention;
    struct {
        char socket[HY_CONFIG_SOCKET_LEN];
        char listen[HY_CONFIG_NAME_LEN];  /* TCP ADDRESS:PORT besides socket; "" = none */
        char allow[HY_CONFIG_ALLOW_LEN];  /* CIDR list for listen's peers; "" = loopback */
        char control_socket[HY_CONFIG_SOCKET_LEN]; /* "" = none */
        uint32_t socket_mode;
        char socket_group[HY_CONFIG_NAME_LEN]; /* "" = the process's group */
        uint32_t workers;
        uint32_t threads_per_worker;
        uint32_t max_queue;
        uint32_t drain_seconds;
        uint64_t max_body_bytes;
        char instance[HY_CONFIG_NAME_LEN];
        char secret_file[HY_CONFIG_PATH_LEN]; /* "" = no FastCGI secret (server/access.h) */
        char user[HY_CONFIG_NAME_LEN];        /* "" = stay who we are started as */
        char run_dir[HY_CONFIG_PATH_LEN];     /* engine.pid; "" = the socket's directory */
        uint32_t engine_restart_max;          /* engine deaths within ... */
        uint32_t engine_restart_window_s;     /* ... this many seconds: a restart storm */
    } server;
    struct {
        int32_t facility; /* LOG_DAEMON, LOG_USER, LOG_LOCAL0..7 */
        int32_t level;    /* LOG_DEBUG..LOG_ERR */
        char ident[HY_CONFIG_NAME_LEN];
        bool to_stderr;   /* also copy each line to stderr */
        char socket[108]; /* "" = the system's /dev/log; else this AF_UNIX datagram socket */
    } log;
} hy_config_t;

typedef struct {
    const char *name;
    int32_t value;
} hy_config_choice_t;

/* One row of the table (exposed so tests and `hyserve --help-config` can
 * walk it). */
typedef struct {
    const char *section;
    const char *key;
    hy_config_type_t type;
    size_t offset;        /* into hy_config_t */
    const char *def;      /* default, in the syntax the file uses */
    double min, max;      /* numeric range; STRING: max = longest length */
    const hy_config_choice_t *choices; /* ENUM only, NULL-name terminated */
} hy_config_key_t;

const hy_config_key_t *hy_config_keys(size_t *n);

/* Fills cfg with every default (which are valid by construction: the unit
 * test checks them through the same parser). */
void hy_config_defaults(hy_config_t *cfg);

/* Defaults, then every key of the INI file at path.  Unknown sections and
 * keys are errors.  Messages start with path. */
int hy_config_load(hy_config_t *cfg, const char *path, char *err);

/* One override, "section.key" = value, as from the command line; messages
 * start with "command line". */
int hy_config_set(hy_config_t *cfg, const char *dotted_key, const char *value, char *err);

#endif
