/*
 * cli.h - what the hyserve subcommands share: parsing numeric flags with
 * precise errors, and bringing up a model with its backend, tokenizer and
 * runner in one call.
 */
#ifndef HY_TOOLS_CLI_H
#define HY_TOOLS_CLI_H

#include <stdio.h>

#include "backend/backend.h"
#include "common/config.h"
#include "engine/runner.h"
#include "model/tokenizer.h"

typedef struct {
    hy_backend_t *be;
    hy_model_t *model;
    hy_tok_t *tok;
    hy_runner_t runner;
    bool runner_ready;
    double load_ms;
} hy_cli_ctx_t;

/* Parse flag values; on error print "hyserve CMD: --flag: ..." and return -1. */
int hy_cli_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out);
/* [attention]'s defaults, from the one table etc/hyserve.ini documents
 * (zeros, i.e. sparse off, when out of memory). */
void hy_cli_attn_defaults(hy_config_attention_t *a);
int hy_cli_float(const char *cmd, const char *flag, const char *s, double lo, double hi,
                 double *out);

/* Loads model (and tokenizer if want_tok) on the named backend ("cpu" or
 * "cuda", NULL = cpu) with options bo; runner sized by ro (NULL: no
 * runner). */
int hy_cli_open(hy_cli_ctx_t *c, const char *cmd, const char *model_path, const char *backend,
                const hy_backend_opts_t *bo, bool want_tok, const hy_runner_opts_t *ro);
/* --act-bits 8|16 (hy_backend_opts_t.act_bits); reports a bad value. */
int hy_cli_act_bits(const char *cmd, const char *s, int *out);
#define HY_CLI_ACT_BITS_HELP \
    "  --act-bits 16|8  integer activations of the quantized matmuls ([engine] activation_bits)\n"
/* --kv-type f16|f32|q8_0 (the [cache] kv_type choices); reports a bad value. */
int hy_cli_kv_type(const char *cmd, const char *s, hy_dtype_t *out);
/* --weights-memory huge_pages|mmap (hy_backend_opts_t.weights_memory). */
int hy_cli_weights_memory(const char *cmd, const char *s, int *out);
#define HY_CLI_WEIGHTS_MEMORY_HELP \
    "  --weights-memory huge_pages|mmap  where the CPU reads the weights from (default huge_pages;\n" \
    "                   [engine] weights_memory)\n"

void hy_cli_close(hy_cli_ctx_t *c);

/* Renders [system?, user] through the model's tokenizer.chat_template with
 * the generation prompt; *out is malloc'd. */
int hy_cli_chat_render(hy_cli_ctx_t *c, const char *system_msg, const char *user,
                       char **out, size_t *out_len, char *err);

/* --grammar FILE / --json-schema FILE / --json (cli_grammar.c, at most one):
 * the grammar spec (grammar/grammar_cache.h) a request hands the engine,
 * malloc'd; NULL when none of the three is given.  The grammar is compiled
 * once to check it, and every mistake names the file. */
int hy_cli_grammar_spec(const char *grammar_file, const char *schema_file, bool json,
                        char **spec, size_t *spec_len, char *err);

double hy_cli_now_ms(void);
/* Reads all of a stream into a malloc'd buffer. */
int hy_cli_read_all(FILE *f, char **buf, size_t *len);

int hy_cmd_run(int argc, char **argv);
int hy_cmd_tokenize(int argc, char **argv);
int hy_cmd_detokenize(int argc, char **argv);
int hy_cmd_eval(int argc, char **argv);
int hy_cmd_bench(int argc, char **argv);
int hy_cmd_plan(int argc, char **argv);

#endif
