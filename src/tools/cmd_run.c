/*
 * cmd_run.c - `hyserve run`: one prompt, one sequence, text streamed to
 * stdout as it is generated (only whole UTF-8 characters), timing summary on
 * stderr.  It drives the same runner and sampler as the server.
 */
#include <stdio.h>

#include "tools/cli.h"
#include "engine/sampler.h"
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
            "  -c, --ctx N             context length (default: model's, at most 8192)\n"
            "      --ignore-eos        keep generating past end-of-generation tokens\n"
            "      --chat              wrap the prompt as a user message in the model's chat template\n"
            "      --system TEXT       system message (with --chat)\n"
            "      --grammar FILE      constrain the output to a GBNF grammar\n"
            "      --json-schema FILE  constrain the output to JSON valid against a JSON Schema\n"
            "      --json              constrain the output to a JSON object\n");
}

int hy_cmd_run(int argc, char **argv)
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
        {"json", no_argument, 0, 15}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *grammar_file = NULL, *schema_file = NULL;
    bool json = false;
    hy_cli_grammar_t cg = {0};
    const char *model = NULL, *prompt = NULL, *file = NULL, *backend = NULL;
    long n_predict = 128, threads = 0, ctx = 8192, lv;
    double dv;
    bool seeded = false, ignore_eos = false, chat = false;
    const char *system_msg = NULL;
    char *rendered = NULL;
    hy_sampling_t sp;
    hy_runner_opts_t ro;
    hy_cli_ctx_t c;
    hy_sampler_t *smp = NULL;
    hy_kv_seq_t seq = {0};
    hy_tok_stream_t stream;
    int32_t *ids = NULL;
    size_t n_ids = 0, plen = 0;
    char *pbuf = NULL, err[HY_ERR_LEN];
    float *logits = NULL;
    double t_prompt = 0, t_gen = 0, t0;
    int32_t n_gen = 0;
    int opt, rc = 1;

    hy_sampling_default(&sp);
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.min_p = 0.05f;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "m:p:f:n:t:c:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'm': model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'f': file = optarg; break;
        case 'n': if (hy_cli_int("run", "--n-predict", optarg, 0, 1 << 20, &n_predict)) return 2; break;
        case 't': if (hy_cli_int("run", "--threads", optarg, 0, 1024, &threads)) return 2; break;
        case 'c': if (hy_cli_int("run", "--ctx", optarg, 16, 1 << 20, &ctx)) return 2; break;
        case 1: if (hy_cli_float("run", "--temp", optarg, 0, 100, &dv)) return 2; sp.temperature = (float)dv; break;
        case 2: if (hy_cli_int("run", "--top-k", optarg, 0, 1 << 30, &lv)) return 2; sp.top_k = (int32_t)lv; break;
        case 3: if (hy_cli_float("run", "--top-p", optarg, 0, 1, &dv)) return 2; sp.top_p = (float)dv; break;
        case 4: if (hy_cli_float("run", "--min-p", optarg, 0, 1, &dv)) return 2; sp.min_p = (float)dv; break;
        case 5: if (hy_cli_float("run", "--repeat-penalty", optarg, 0, 10, &dv)) return 2; sp.repetition_penalty = (float)dv; break;
        case 6: if (hy_cli_float("run", "--presence-penalty", optarg, -2, 2, &dv)) return 2; sp.presence_penalty = (float)dv; break;
        case 7: if (hy_cli_float("run", "--frequency-penalty", optarg, -2, 2, &dv)) return 2; sp.frequency_penalty = (float)dv; break;
        case 8: {
            char *end;
            unsigned long long s = strtoull(optarg, &end, 10);

            if (end == optarg || *end) {
                fprintf(stderr, "hyserve run: --seed = '%s': must be a non-negative integer\n", optarg);
                return 2;
            }
            sp.seed = s;
            seeded = true;
            break;
        }
        case 9: ignore_eos = true; break;
        case 10: chat = true; break;
        case 11: system_msg = optarg; break;
        case 12: backend = optarg; break;
        case 13: grammar_file = optarg; break;
        case 14: schema_file = optarg; break;
        case 15: json = true; break;
        case 'h': hy_run_usage(stdout); return 0;
        default: hy_run_usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "hyserve run: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if ((prompt == NULL) == (file == NULL)) {
        fprintf(stderr, "hyserve run: give the prompt with exactly one of -p TEXT or -f FILE\n");
        return 2;
    }
    if (file != NULL) {
        FILE *fp = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");

        if (fp == NULL || hy_cli_read_all(fp, &pbuf, &plen) != 0) {
            fprintf(stderr, "hyserve run: cannot read prompt file %s\n", file);
            if (fp && fp != stdin)
                fclose(fp);
            return 1;
        }
        if (fp != stdin)
            fclose(fp);
        prompt = pbuf;
    } else {
        plen = strlen(prompt);
    }
    if (!seeded) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        sp.seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
    }

    hy_runner_opts_default(&ro);
    ro.max_seqs = 1;
    ro.max_outputs = 1;
    ro.n_ctx = (int32_t)ctx;
    if (hy_cli_open(&c, "run", model, backend, (int)threads, true, &ro) != 0) {
        free(pbuf);
        return 1;
    }
    if (hy_sampler_create(&smp, &sp, c.model->n_vocab, err) != HY_OK ||
        hy_cli_grammar_open(&cg, c.tok, grammar_file, schema_file, json, err) != HY_OK)
        goto fail;
    if (chat) {
        if (hy_cli_chat_render(&c, system_msg, prompt, &rendered, &plen, err) != HY_OK)
            goto fail;
        prompt = rendered;
    }
    if (hy_tok_encode_alloc(c.tok, prompt, plen, true, true, &ids, &n_ids, err) != HY_OK)
        goto fail;
    if (n_ids == 0) {
        snprintf(err, sizeof err, "the prompt is empty after tokenization");
        goto fail;
    }
    if ((long)n_ids + n_predict > c.runner.opts.n_ctx) {
        snprintf(err, sizeof err, "prompt (%zu tokens) + %ld to generate exceeds the context of %d tokens",
                 n_ids, n_predict, c.runner.opts.n_ctx);
        goto fail;
    }
    logits = malloc(sizeof(float) * (size_t)c.model->n_vocab);
    if (logits == NULL) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    hy_sampler_accept_prompt(smp, ids, n_ids);
    hy_tok_stream_init(&stream, c.tok, false, false);

    t0 = hy_cli_now_ms();
    if (hy_runner_prefill(&c.runner, &seq, ids, (int32_t)n_ids, logits, err) != HY_OK)
        goto fail_stream;
    t_prompt = hy_cli_now_ms() - t0;

    t0 = hy_cli_now_ms();
    while (n_gen < n_predict) {
        const char *piece;
        size_t plen2;
        int32_t tok;
        hy_runner_item_t it = {&seq, &tok, 1, false};

        if (hy_cli_grammar_mask(&cg, logits, c.model->n_vocab, !ignore_eos, err) != HY_OK)
            goto fail_stream;
        tok = hy_sampler_sample(smp, logits, NULL);
        if (tok < 0) {
            snprintf(err, sizeof err, "sampling failed: %s", hy_strerror(tok));
            goto fail_stream;
        }
        n_gen++;
        if (!ignore_eos && hy_tok_is_eog(c.tok, tok))
            break;
        if (cg.match != NULL && hy_gmatch_accept_token(cg.match, tok, err) != HY_OK)
            goto fail_stream;
        hy_sampler_accept(smp, tok);
        if (hy_tok_stream_feed(&stream, tok, &piece, &plen2, err) != HY_OK)
            goto fail_stream;
        fwrite(piece, 1, plen2, stdout);
        fflush(stdout);
        /* a complete grammar with nothing allowed after it ends the text */
        if (n_gen == n_predict || (cg.match != NULL && hy_gmatch_done(cg.match)))
            break;
        if (hy_runner_step(&c.runner, &it, 1, logits, err) != HY_OK)
            goto fail_stream;
    }
    t_gen = hy_cli_now_ms() - t0;
    {
        const char *piece;
        size_t plen2;

        if (hy_tok_stream_flush(&stream, &piece, &plen2, err) == HY_OK)
            fwrite(piece, 1, plen2, stdout);
    }
    printf("\n");
    fflush(stdout);
    fprintf(stderr,
            "hyserve run: load %.0f ms | prompt %zu tokens, %.1f ms, %.2f tok/s | generation %d tokens, %.1f ms, %.2f tok/s\n",
            c.load_ms, n_ids, t_prompt, n_ids * 1e3 / (t_prompt > 0 ? t_prompt : 1e-9), n_gen,
            t_gen, n_gen * 1e3 / (t_gen > 0 ? t_gen : 1e-9));
    if (cg.match != NULL) {
        hy_grammar_stats_t gs;
        uint64_t ns, calls;

        hy_grammar_stats(cg.grammar, &gs);
        hy_gmatch_mask_time(cg.match, &ns, &calls);
        fprintf(stderr,
                "hyserve run: grammar %s | compile %.1f ms, %d states | masks %llu, %.3f ms/token, "
                "token sets %.1f ms\n",
                hy_gmatch_can_end(cg.match) ? "complete" : "incomplete (cut at --n-predict)",
                gs.compile_ms, gs.n_states, (unsigned long long)calls,
                calls ? (double)ns / 1e6 / (double)calls : 0.0, gs.precompute_ms);
    }
    rc = 0;
    hy_tok_stream_free(&stream);
    goto out;
fail_stream:
    hy_tok_stream_free(&stream);
fail:
    fprintf(stderr, "hyserve run: %s\n", err);
out:
    if (c.runner_ready)
        hy_runner_seq_release(&c.runner, &seq);
    hy_sampler_free(smp);
    hy_cli_grammar_close(&cg);
    free(ids);
    free(logits);
    free(pbuf);
    free(rendered);
    hy_cli_close(&c);
    return rc;
}
