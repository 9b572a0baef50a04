/*
 * cmd_run.c - `hyserve run`: one prompt, one request, text streamed to
 * stdout as it is generated (only whole UTF-8 characters), timing and KV
 * memory summary on stderr.  The request goes through the server's engine, scheduler, sampler
 * and page allocator, with an in-process request source (engine/local.h)
 * instead of the shared segment; this thread steps the engine.
 */
#include <stdio.h>

#include "tools/cli.h"
#include "engine/local.h"
#include "common/config.h"
#include "kv/plan.h"
#include "model/chat_template.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void hy_run_usage(FILE *f)
{
    fprintf(f,
            "usage: hyserve run -m MODEL.gguf -p PROMPT [-n N] [options]\n"
            "  -m, --model FILE        GGUF model\n"
            "  -p, --prompt TEXT       prompt (special tokens like <|im_start|> are parsed)\n"
            "  -f, --file FILE         read the prompt from FILE ('-' = stdin)\n"
            "  -n, --n-predict N       tokens to generate (default 128)\n"
            "      --temp T            temperature, 0 = greedy (default 0.8)\n"
            "      --top-k K           (default 40, 0 = off)\n"
            "      --top-p P           (default 0.95)\n"
            "      --min-p P           (default 0.05)\n"
            "      --repeat-penalty R  (default 1.0 = off)\n"
            "      --presence-penalty P, --frequency-penalty P  (default 0)\n"
            "      --seed S            sampling seed (default: random)\n"
            "  -t, --threads N         CPU threads (default: all cores)\n"
            "      --backend NAME      cpu | cuda (default cpu)\n"
            "      --act-bits 16|8     integer activations of the quantized matmuls (default 16;\n"
            "                          [engine] activation_bits)\n"
            "      --weights-memory huge_pages|mmap  where the CPU reads the weights from\n"
            "                          (default huge_pages; [engine] weights_memory)\n"
            "      --kv-type f16|f32|q8_0  the KV cache's element type (default f16; [cache] kv_type)\n"
            "  -c, --ctx N             context length (default: model's, at most 8192)\n"
            "      --ignore-eos        keep generating past end-of-generation tokens\n"
            "      --chat              wrap the prompt as a user message in the model's chat template\n"
            "      --system TEXT       system message (with --chat)\n"
            "      --swa-full          sliding-window layers keep every position (no sliding page group)\n"
            "      --sparse            block-sparse attention in the full-attention layers\n"
            "                          ([attention] sparse = block; docs/sparse.md), with\n"
            "      --sparse-block-tokens N, --sparse-topk N, --sparse-topp P,\n"
            "      --sparse-max-blocks N, --sparse-sink-tokens N, --sparse-local-tokens N,\n"
            "      --sparse-min-tokens N  (defaults: etc/hyserve.ini's [attention]\n"
            "                          sparse_block_tokens, sparse_topk, sparse_topp,\n"
            "                          sparse_max_blocks, sink_tokens, local_tokens,\n"
            "                          sparse_min_tokens)\n"
            "      --hot-tokens N      keep only the last N tokens' blocks in the page pool, the\n"
            "                          older ones in host memory ([cache] hot_tokens_per_seq;\n"
            "                          needs --sparse; docs/tiers.md)\n"
            "      --seq-warm-mb N     with it, hold at most N MiB of those in RAM, the rest in\n"
            "                          a spill file under --spill-dir ([cache] seq_warm_mb)\n"
            "      --spill-dir DIR     the spill file's directory ([cache] disk_dir)\n"
            "      --grammar FILE      constrain the output to a GBNF grammar\n"
            "      --json-schema FILE  constrain the output to JSON valid against a JSON Schema\n"
            "      --json              constrain the output to a JSON object\n");
}

typedef struct {
    const char *model, *prompt, *file, *backend, *system_msg;
    const char *grammar_file, *schema_file; /* --grammar, --json-schema */
    const char *spill_dir;
    long n_predict, threads, ctx, hot, seq_warm_mb;
    int act_bits;     /* --act-bits (0: the default) */
    int weights_memory; /* --weights-memory */
    hy_dtype_t kv_type; /* --kv-type */
    bool ignore_eos, chat, json, swa_full;
    hy_config_attention_t attn; /* --sparse*: [attention]'s defaults otherwise */
    hy_sampling_t sp;
    char *gspec;      /* the grammar spec the request carries (malloc'd), or NULL */
    size_t gspec_len;
} hy_run_opts_t;

/* 0: parsed; 1: --help printed; 2: a bad option (reported). */
static int hy_run_parse(int argc, char **argv, hy_run_opts_t *o)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"prompt", required_argument, 0, 'p'},
        {"file", required_argument, 0, 'f'}, {"n-predict", required_argument, 0, 'n'},
        {"temp", required_argument, 0, 1}, {"top-k", required_argument, 0, 2},
        {"top-p", required_argument, 0, 3}, {"min-p", required_argument, 0, 4},
        {"repeat-penalty", required_argument, 0, 5},
        {"presence-penalty", required_argument, 0, 6},
        {"frequency-penalty", required_argument, 0, 7}, {"seed", required_argument, 0, 8},
        {"threads", required_argument, 0, 't'}, {"ctx", required_argument, 0, 'c'},
        {"ignore-eos", no_argument, 0, 9}, {"chat", no_argument, 0, 10},
        {"system", required_argument, 0, 11}, {"backend", required_argument, 0, 12},
        {"grammar", required_argument, 0, 13}, {"json-schema", required_argument, 0, 14},
        {"json", no_argument, 0, 15}, {"swa-full", no_argument, 0, 16},
        {"sparse", no_argument, 0, 17}, {"sparse-block-tokens", required_argument, 0, 18},
        {"sparse-topk", required_argument, 0, 19}, {"sparse-sink-tokens", required_argument, 0, 20},
        {"sparse-local-tokens", required_argument, 0, 21},
        {"sparse-min-tokens", required_argument, 0, 22},
        {"hot-tokens", required_argument, 0, 23}, {"seq-warm-mb", required_argument, 0, 24},
        {"spill-dir", required_argument, 0, 25}, {"act-bits", required_argument, 0, 26},
        {"weights-memory", required_argument, 0, 27},
        {"sparse-topp", required_argument, 0, 28}, {"sparse-max-blocks", required_argument, 0, 29},
        {"kv-type", required_argument, 0, 30},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    hy_sampling_t *sp = &o->sp;
    bool seeded = false;
    double dv;
    long lv;
    int opt;

    memset(o, 0, sizeof *o);
    hy_cli_attn_defaults(&o->attn);
    o->n_predict = 128;
    o->ctx = 8192;
    o->kv_type = HY_DTYPE_F16;
    hy_sampling_default(sp);
    sp->temperature = 0.8f;
    sp->top_k = 40;
    sp->top_p = 0.95f;
    sp->min_p = 0.05f;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "m:p:f:n:t:c:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'm': o->model = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'f': o->file = optarg; break;
        case 'n': if (hy_cli_int("run", "--n-predict", optarg, 0, 1 << 20, &o->n_predict)) return 2; break;
        case 't': if (hy_cli_int("run", "--threads", optarg, 0, 1024, &o->threads)) return 2; break;
        case 'c': if (hy_cli_int("run", "--ctx", optarg, 16, 1 << 20, &o->ctx)) return 2; break;
        case 1: if (hy_cli_float("run", "--temp", optarg, 0, 100, &dv)) return 2; sp->temperature = (float)dv; break;
        case 2: if (hy_cli_int("run", "--top-k", optarg, 0, 1 << 30, &lv)) return 2; sp->top_k = (int32_t)lv; break;
        case 3: if (hy_cli_float("run", "--top-p", optarg, 0, 1, &dv)) return 2; sp->top_p = (float)dv; break;
        case 4: if (hy_cli_float("run", "--min-p", optarg, 0, 1, &dv)) return 2; sp->min_p = (float)dv; break;
        case 5: if (hy_cli_float("run", "--repeat-penalty", optarg, 0, 10, &dv)) return 2; sp->repetition_penalty = (float)dv; break;
        case 6: if (hy_cli_float("run", "--presence-penalty", optarg, -2, 2, &dv)) return 2; sp->presence_penalty = (float)dv; break;
        case 7: if (hy_cli_float("run", "--frequency-penalty", optarg, -2, 2, &dv)) return 2; sp->frequency_penalty = (float)dv; break;
        case 8: {
            char *end;
            unsigned long long v = strtoull(optarg, &end, 10);

            if (end == optarg || *end) {
                fprintf(stderr, "hyserve run: --seed = '%s': must be a non-negative integer\n", optarg);
                return 2;
            }
            sp->seed = v;
            seeded = true;
            break;
        }
        case 9: o->ignore_eos = true; break;
        case 10: o->chat = true; break;
        case 11: o->system_msg = optarg; break;
        case 12: o->backend = optarg; break;
        case 13: o->grammar_file = optarg; break;
        case 14: o->schema_file = optarg; break;
        case 15: o->json = true; break;
        case 16: o->swa_full = true; break;
        case 17: o->attn.sparse = HY_CONFIG_SPARSE_BLOCK; break;
        case 18: if (hy_cli_int("run", "--sparse-block-tokens", optarg, 1, 65536, &lv)) return 2; o->attn.sparse_block_tokens = (uint32_t)lv; break;
        case 19: if (hy_cli_int("run", "--sparse-topk", optarg, 0, 1 << 20, &lv)) return 2; o->attn.sparse_topk = (uint32_t)lv; break;
        case 20: if (hy_cli_int("run", "--sparse-sink-tokens", optarg, 0, 1 << 24, &lv)) return 2; o->attn.sink_tokens = (uint32_t)lv; break;
        case 21: if (hy_cli_int("run", "--sparse-local-tokens", optarg, 0, 1 << 24, &lv)) return 2; o->attn.local_tokens = (uint32_t)lv; break;
        case 22: if (hy_cli_int("run", "--sparse-min-tokens", optarg, 0, 1 << 24, &lv)) return 2; o->attn.sparse_min_tokens = (uint32_t)lv; break;
        case 23: if (hy_cli_int("run", "--hot-tokens", optarg, 0, 1 << 24, &o->hot)) return 2; break;
        case 24: if (hy_cli_int("run", "--seq-warm-mb", optarg, 0, 1L << 32, &o->seq_warm_mb)) return 2; break;
        case 25: o->spill_dir = optarg; break;
        case 26: if (hy_cli_act_bits("run", optarg, &o->act_bits)) return 2; break;
        case 27: if (hy_cli_weights_memory("run", optarg, &o->weights_memory)) return 2; break;
        case 28: if (hy_cli_float("run", "--sparse-topp", optarg, 0, 1, &o->attn.sparse_topp)) return 2; break;
        case 29: if (hy_cli_int("run", "--sparse-max-blocks", optarg, 1, 1 << 20, &lv)) return 2; o->attn.sparse_max_blocks = (uint32_t)lv; break;
        case 30: if (hy_cli_kv_type("run", optarg, &o->kv_type)) return 2; break;
        case 'h': hy_run_usage(stdout); return 1;
        default: hy_run_usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "hyserve run: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if ((o->prompt == NULL) == (o->file == NULL)) {
        fprintf(stderr, "hyserve run: give the prompt with exactly one of -p TEXT or -f FILE\n");
        return 2;
    }
    if (!seeded) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        sp->seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
    }
    return 0;
}

/* -f FILE ('-' = stdin) into *buf, or -p TEXT as it is. */
static int hy_run_read_prompt(const hy_run_opts_t *o, char **buf, const char **text, size_t *len)
{
    FILE *fp;

    if (o->file == NULL) {
        *text = o->prompt;
        *len = strlen(o->prompt);
        return 0;
    }
    fp = strcmp(o->file, "-") == 0 ? stdin : fopen(o->file, "rb");
    if (fp == NULL || hy_cli_read_all(fp, buf, len) != 0) {
        fprintf(stderr, "hyserve run: cannot read prompt file %s\n", o->file);
        if (fp && fp != stdin)
            fclose(fp);
        return -1;
    }
    if (fp != stdin)
        fclose(fp);
    *text = *buf;
    return 0;
}

/* What the token callback needs: it prints each token's text as it comes. */
typedef struct {
    hy_tok_stream_t stream;
    hy_local_t *local;
    hy_pt_t *pt;
    bool print; /* -n 0 asks for the prompt alone: the one token is not shown */
    int rc;
    char err[HY_ERR_LEN];
    hy_pt_counts_t held; /* the pages in use when the last token came (the sequence's) */
} hy_run_out_t;

static void hy_run_on_token(void *user, int32_t id, const hy_ring_tok_t *t)
{
    hy_run_out_t *out = user;
    const char *piece;
    size_t n;

    /* the engine calls this after the step that drew the token, its
     * sliding pages trimmed: what one sequence holds at this length */
    hy_pt_counts(out->pt, &out->held);
    if (!out->print || out->rc != HY_OK)
        return;
    if ((out->rc = hy_tok_stream_feed(&out->stream, t->token, &piece, &n, out->err)) != HY_OK) {
        hy_local_cancel(out->local, id);
        return;
    }
    fwrite(piece, 1, n, stdout);
    fflush(stdout);
}

/* What the grammar cost the engine, and whether the text is a complete
 * sentence of it (the engine stops as soon as the grammar allows nothing
 * more, or at an end-of-generation token where it may end) or was cut. */
static void hy_run_grammar_report(const hy_local_t *l, const hy_local_status_t *st)
{
    hy_grammar_counts_t gc;

    hy_local_grammar_counts(l, &gc);
    fprintf(stderr,
            "hyserve run: grammar %s | compile %.1f ms%s | masks %llu, %.3f ms/token, token sets "
            "%.1f ms\n",
            st->finish_reason == HY_FINISH_STOP ? "complete"
            : gc.closed ? "closed early to fit --n-predict (finish length)"
                        : "incomplete (cut at --n-predict)",
            (double)gc.compile_us / 1e3, gc.cache_hits ? " (cached)" : "",
            (unsigned long long)gc.masks,
            gc.masks ? (double)gc.mask_us / 1e3 / (double)gc.masks : 0.0,
            (double)gc.fill_us / 1e3);
}

/* One line on what the KV cache took: the pool, and the pages the
 * sequence held when its last token came (n positions computed), per
 * page group. */
static void hy_run_kv_summary(hy_backend_t *be, const hy_engine_t *e,
                              const hy_pt_counts_t *held, int32_t n)
{
    uint64_t pb[HY_KV_GROUPS], pool = 0, st = 0, bytes;

    hy_engine_page_bytes(e, pb);
    bytes = (uint64_t)held->pages_used * pb[HY_KV_FULL] + (uint64_t)held->swa_used * pb[HY_KV_SWA];
    be->i->mem_allocated(be, &pool, &st);
    fprintf(stderr,
            "hyserve run: kv pool %.2f MiB (%d pages x %llu B + %d sliding-window pages x %llu "
            "B) | the sequence held %d + %d pages = %.2f MiB at %d positions\n",
            (double)pool / 1048576.0, held->pages_total, (unsigned long long)pb[HY_KV_FULL],
            held->swa_total, (unsigned long long)pb[HY_KV_SWA], held->pages_used, held->swa_used,
            (double)bytes / 1048576.0, n);
}

/* The request through the engine, text on stdout, timings on stderr. */
static int hy_run_generate(hy_cli_ctx_t *c, const hy_run_opts_t *o, int32_t n_ctx,
                           const int32_t *ids, int32_t n_ids, char *err)
{
    hy_run_out_t out = {.print = o->n_predict > 0, .rc = HY_OK};
    hy_local_engine_t le = {0};
    const hy_local_status_t *st;
    hy_engine_opts_t eo;
    hy_req_params_t rp;
    double t_open = hy_cli_now_ms(), t_prompt, t_gen;
    int32_t id, n_gen;
    const char *piece;
    size_t plen;
    int rc;

    memset(&eo, 0, sizeof eo);
    eo.max_batch_tokens = 512;
    eo.max_seqs = 1;
    /* -n 0 with a prompt that fills the context: room for the one token
     * the engine draws and nobody sees */
    eo.n_ctx = n_ctx + (o->n_predict == 0 && n_ids == n_ctx);
    eo.page_tokens = 16;
    eo.kv_type = o->kv_type;
    eo.n_request_slots = 1;
    eo.no_checkpoints = true;
    eo.swa_full = o->swa_full;
    eo.tok = c->tok;
    if ((rc = hy_plan_sparse(&o->attn, eo.page_tokens, true, &eo.sparse, err)) != HY_OK ||
        (rc = hy_plan_hot_window((uint32_t)o->hot, &eo.sparse, eo.page_tokens,
                                 eo.max_batch_tokens, true, &eo.hot_blocks, err)) != HY_OK ||
        (rc = hy_plan_seq_warm((uint64_t)o->seq_warm_mb, eo.hot_blocks, o->spill_dir, true,
                               &eo.out_warm_bytes, err)) != HY_OK)
        return rc;
    eo.out_dir = o->spill_dir;
    memset(&rp, 0, sizeof rp);
    rp.sampling = o->sp;
    rp.max_tokens = (int32_t)HY_MAX(o->n_predict, 1);
    /* run prints text, never logprobs */
    rp.flags = (o->ignore_eos ? HY_REQ_F_IGNORE_EOS : 0) | HY_REQ_F_NO_LOGPROBS;
    hy_tok_stream_init(&out.stream, c->tok, false, false);
    if ((rc = hy_local_engine_open(&le, c->model, c->be, &eo, hy_run_on_token, &out, err)) != HY_OK)
        goto out;
    out.local = le.local;
    out.pt = le.pt;
    c->load_ms += hy_cli_now_ms() - t_open;
    if ((rc = hy_local_submit_grammar(le.local, &rp, ids, n_ids, o->gspec, o->gspec_len, &id,
                                      err)) != HY_OK ||
        (rc = hy_local_engine_wait(&le, id, err)) != HY_OK)
        goto out;
    st = hy_local_status(le.local, id);
    if (out.rc != HY_OK) {
        rc = hy_err(err, out.rc, "%s", out.err);
        goto out;
    }
    if (st->finish_reason == HY_FINISH_ERROR) {
        rc = hy_err(err, HY_EIO, "%s", st->error_msg);
        goto out;
    }
    if (out.print && hy_tok_stream_flush(&out.stream, &piece, &plen, err) == HY_OK)
        fwrite(piece, 1, plen, stdout);
    printf("\n");
    fflush(stdout);
    /* an end-of-generation token was drawn too, though never shown */
    n_gen = out.print ? st->n_generated + (st->finish_reason == HY_FINISH_STOP) : 0;
    t_prompt = (double)((st->n_generated > 0 ? st->first_token_ns : st->finish_ns) -
                        st->submit_ns) / 1e6;
    t_gen = out.print && st->n_generated > 0 ? (double)(st->finish_ns - st->first_token_ns) / 1e6
                                             : 0;
    fprintf(stderr,
            "hyserve run: load %.0f ms | prompt %d tokens, %.1f ms, %.2f tok/s | generation %d tokens, %.1f ms, %.2f tok/s\n",
            c->load_ms, n_ids, t_prompt, n_ids * 1e3 / (t_prompt > 0 ? t_prompt : 1e-9), n_gen,
            t_gen, n_gen * 1e3 / (t_gen > 0 ? t_gen : 1e-9));
    if (o->gspec != NULL)
        hy_run_grammar_report(le.local, st);
    if (o->attn.sparse == HY_CONFIG_SPARSE_BLOCK) {
        hy_attn_counts_t ac;

        hy_local_attn_counts(le.local, &ac);
        fprintf(stderr, "hyserve run: attention: %llu tokens dense, %llu block-sparse, %llu "
                        "blocks read (%llu from the pool, %llu from the out arena's RAM, %llu with a page from "
                        "its spill file)\n",
                (unsigned long long)ac.dense_tokens, (unsigned long long)ac.sparse_tokens,
                (unsigned long long)(ac.blocks_hot + ac.blocks_warm + ac.blocks_cold),
                (unsigned long long)ac.blocks_hot, (unsigned long long)ac.blocks_warm,
                (unsigned long long)ac.blocks_cold);
    }
    if (o->hot > 0) {
        hy_outstore_counts_t oc;

        hy_engine_out_counts(le.engine, &oc);
        fprintf(stderr, "hyserve run: out arena: %d pages, %d of them in RAM; spill file "
                        "%.2f MiB, %llu pages written to it, %llu brought up\n", oc.units,
                oc.warm, (double)oc.file_bytes / 1048576.0, (unsigned long long)oc.spills,
                (unsigned long long)oc.promotions);
    }
    hy_run_kv_summary(c->be, le.engine, &out.held, n_ids + st->n_generated - 1);
    hy_local_release(le.local, id);
out:
    if (hy_local_engine_close(&le, rc == HY_OK ? err : NULL) != HY_OK && rc == HY_OK)
        rc = HY_EFORMAT;
    hy_tok_stream_free(&out.stream);
    return rc;
}

int hy_cmd_run(int argc, char **argv)
{
    hy_run_opts_t o;
    hy_cli_ctx_t c;
    const char *prompt;
    char *pbuf = NULL, *rendered = NULL, err[HY_ERR_LEN];
    int32_t *ids = NULL, n_ctx;
    size_t n_ids = 0, plen = 0;
    int rc;

    if ((rc = hy_run_parse(argc, argv, &o)) != 0)
        return rc == 1 ? 0 : rc;
    /* a bad grammar or schema is reported before the model loads */
    if (hy_cli_grammar_spec(o.grammar_file, o.schema_file, o.json, &o.gspec, &o.gspec_len,
                            err) != HY_OK) {
        fprintf(stderr, "hyserve run: %s\n", err);
        return 1;
    }
    if (hy_run_read_prompt(&o, &pbuf, &prompt, &plen) != 0 ||
        hy_cli_open(&c, "run", o.model, o.backend,
                    &(hy_backend_opts_t){.n_threads = (int)o.threads, .act_bits = o.act_bits,
                                         .weights_memory = o.weights_memory},
                    true, NULL) != 0) {
        free(pbuf);
        free(o.gspec);
        return 1;
    }
    rc = 1;
    n_ctx = (int32_t)HY_MIN(o.ctx, (long)c.model->n_ctx_train);
    if ((rc = hy_sampling_validate(&o.sp, c.model->n_vocab, err)) != HY_OK)
        goto fail;
    if (o.chat) {
        if (hy_cli_chat_render(&c, o.system_msg, prompt, &rendered, &plen, err) != HY_OK)
            goto fail;
        prompt = rendered;
    }
    /* the template prints its own BOS (as the server tokenizes chats) */
    if (hy_tok_encode_alloc(c.tok, prompt, plen, !o.chat, true, &ids, &n_ids, err) != HY_OK)
        goto fail;
    if (n_ids == 0) {
        snprintf(err, sizeof err, "the prompt is empty after tokenization");
        goto fail;
    }
    if ((long)n_ids + o.n_predict > n_ctx) {
        snprintf(err, sizeof err, "prompt (%zu tokens) + %ld to generate exceeds the context of %d tokens",
                 n_ids, o.n_predict, n_ctx);
        goto fail;
    }
    if (hy_run_generate(&c, &o, n_ctx, ids, (int32_t)n_ids, err) != HY_OK)
        goto fail;
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "hyserve run: %s\n", err);
    rc = 1;
out:
    free(ids);
    free(pbuf);
    free(rendered);
    free(o.gspec);
    hy_cli_close(&c);
    return rc;
}
