/*
 * cmd_bench_offline.c - `hyserve bench --offline -m MODEL --concurrency N
 * --requests M`: the engine with an in-process request source and a private
 * page table (engine/local.h), driven step by step from this thread, which
 * keeps N requests submitted (random prompts, greedy, ignore_eos so each
 * generates exactly --max-tokens) and measures TTFT, TPOT and generation
 * tokens/s from the times the engine handed each request's tokens over.
 * `--ttft-prefix[=N]` instead measures the prefix cache: time to first
 * token of an N-token prompt cold, repeated exactly, and sharing all but a
 * short suffix with an earlier prompt, one request at a time.
 * `--json-schema FILE` / `--grammar FILE` constrain every request (sampled
 * at --temperature, so the grammar ends each one) and report what the
 * grammar cost the engine: its share of CPU time and of a quiet machine's
 * wall time.
 */
#include "backend/select.h"
#include "tools/bench_offline.h"
#include "tools/cli.h"
#include "engine/local.h"
#include "model/tokenizer.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int32_t id;
    bool live;
} hy_bo_req_t;

static int hy_bo_long(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);

    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "hyserve bench: %s = %s: must be an integer in %ld..%ld\n", flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int hy_bo_dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double hy_bo_pct(double *v, int n, double p)
{
    int k;

    if (n == 0)
        return 0;
    k = (int)(p / 100.0 * (n - 1) + 0.5);
    return v[HY_MIN(k, n - 1)];
}

/* ---- --ttft-prefix ---------------------------------------------------------- */

typedef struct {
    int32_t *ids; /* token ids a prompt draws from: the vocabulary's normal tokens */
    int32_t n;
} hy_bo_vocab_t;

/* Prompts are drawn from the model's own vocabulary (normal tokens only:
 * no control, byte or unused ids, which real prompts rarely contain and
 * some models never trained), so the forward pass sees plausible ids. */
static int hy_bo_vocab(hy_bo_vocab_t *v, const hy_model_t *m, char *err)
{
    hy_tok_t *tok = NULL;
    int32_t id, n_vocab = m->n_vocab;
    int rc;

    v->n = 0;
    v->ids = malloc(sizeof(int32_t) * (size_t)n_vocab);
    if (v->ids == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    if ((rc = hy_tok_load(&tok, m->gguf, err)) != HY_OK)
        return rc;
    for (id = 0; id < n_vocab && (size_t)id < hy_tok_n_vocab(tok); id++)
        if (hy_tok_type(tok, id) == HY_TOK_TYPE_NORMAL && !hy_tok_is_eog(tok, id))
            v->ids[v->n++] = id;
    hy_tok_free(tok);
    if (v->n < 2)
        return hy_err(err, HY_EFORMAT, "the vocabulary has %d normal tokens: cannot build prompts",
                      v->n);
    return HY_OK;
}

/* n deterministic tokens for seed (xorshift64 over the normal tokens). */
static void hy_bo_fill(const hy_bo_vocab_t *v, int32_t *out, int32_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 0x2545f4914f6cdd1dULL;
    int32_t i;

    for (i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        out[i] = v->ids[x % (uint64_t)v->n];
    }
}

/* One request alone, greedy, one generated token: milliseconds from
 * submit to the first token, and the engine's hit count. */
static int hy_bo_first(hy_local_engine_t *le, const int32_t *prompt, int32_t n, double *ms,
                       int32_t *hit, char *err)
{
    const hy_local_status_t *st;
    hy_req_params_t p;
    int32_t id;
    int rc;

    memset(&p, 0, sizeof p);
    hy_sampling_default(&p.sampling);
    p.sampling.temperature = 0;
    p.max_tokens = 1;
    p.flags = HY_REQ_F_IGNORE_EOS;
    if ((rc = hy_local_submit(le->local, &p, prompt, n, &id, err)) != HY_OK)
        return rc;
    if ((rc = hy_local_engine_wait(le, id, err)) == HY_OK) {
        st = hy_local_status(le->local, id);
        if (st->finish_reason == HY_FINISH_ERROR)
            rc = hy_err(err, HY_EIO, "request failed: %s", st->error_msg);
        else if (st->n_generated == 0)
            rc = hy_err(err, HY_EIO, "request finished without a token");
        *ms = (double)(st->first_token_ns - st->submit_ns) / 1e6;
        *hit = st->n_cached;
    }
    hy_local_release(le->local, id);
    return rc;
}

static double hy_bo_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, hy_bo_dcmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One phase's line: median, every run, and the hit range. */
static double hy_bo_report(const char *phase, double *ms, const int32_t *hit, int n, double cold)
{
    int32_t lo = INT32_MAX, hi = 0;
    double med;
    int i;

    printf("ttft %s runs_ms=", phase);
    for (i = 0; i < n; i++) {
        printf("%s%.1f", i ? "," : "", ms[i]);
        lo = HY_MIN(lo, hit[i]);
        hi = HY_MAX(hi, hit[i]);
    }
    med = hy_bo_median(ms, n);
    printf(" median_ms=%.1f hit_tokens=%d", med, lo);
    if (hi != lo)
        printf("..%d", hi);
    if (cold > 0)
        printf(" speedup=%.1fx", cold / med);
    printf("\n");
    fflush(stdout); /* a slow run shows each phase as it ends */
    return med;
}

/* Cold: reps different prompts of n tokens (nothing cached: fresh random
 * blocks).  Repeat: one prompt, then reps exact repeats.  Shared: a prefix
 * of n - suffix tokens with one suffix, then reps new suffixes (the same
 * long system prompt, new questions); the first of those is reported on
 * its own, because on a hybrid model it is the one that snapshots the
 * state where the prompts branch. */
static int hy_bo_ttft(hy_local_engine_t *le, const hy_model_t *m, int32_t n, int32_t suffix,
                      int reps, char *err)
{
    hy_bo_vocab_t v = {0};
    int32_t *prompt = NULL, *hit = NULL, first_hit = 0;
    double *ms = NULL, cold, rep, shared, first_ms = 0, warm_ms;
    int rc, r;

    prompt = malloc(sizeof(int32_t) * (size_t)n);
    hit = malloc(sizeof(int32_t) * (size_t)reps);
    ms = malloc(sizeof(double) * (size_t)reps);
    if (!prompt || !hit || !ms) {
        rc = hy_err(err, HY_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = hy_bo_vocab(&v, m, err)) != HY_OK)
        goto out;
    /* page the weights in and start the threads: not measured */
    hy_bo_fill(&v, prompt, HY_MIN(n, 64), 1);
    if ((rc = hy_bo_first(le, prompt, HY_MIN(n, 64), &warm_ms, &first_hit, err)) != HY_OK)
        goto out;
    for (r = 0; r < reps; r++) {
        hy_bo_fill(&v, prompt, n, 100 + (uint64_t)r);
        if ((rc = hy_bo_first(le, prompt, n, &ms[r], &hit[r], err)) != HY_OK)
            goto out;
    }
    cold = hy_bo_report("cold", ms, hit, reps, 0);
    hy_bo_fill(&v, prompt, n, 200);
    if ((rc = hy_bo_first(le, prompt, n, &warm_ms, &first_hit, err)) != HY_OK)
        goto out;
    for (r = 0; r < reps; r++)
        if ((rc = hy_bo_first(le, prompt, n, &ms[r], &hit[r], err)) != HY_OK)
            goto out;
    rep = hy_bo_report("repeat", ms, hit, reps, cold);
    hy_bo_fill(&v, prompt, n - suffix, 300);
    hy_bo_fill(&v, prompt + n - suffix, suffix, 400);
    if ((rc = hy_bo_first(le, prompt, n, &warm_ms, &first_hit, err)) != HY_OK)
        goto out;
    for (r = 0; r < reps; r++) {
        hy_bo_fill(&v, prompt + n - suffix, suffix, 401 + (uint64_t)r);
        if ((rc = hy_bo_first(le, prompt, n, &ms[r], &hit[r], err)) != HY_OK)
            goto out;
        if (r == 0)
            first_ms = ms[0], first_hit = hit[0];
    }
    shared = hy_bo_report("shared", ms, hit, reps, cold);
    printf("ttft shared_first ms=%.1f hit_tokens=%d speedup=%.1fx\n", first_ms, first_hit,
           cold / first_ms);
    printf("ttft target=10x repeat=%s shared=%s\n", cold >= 10 * rep ? "met" : "missed",
           cold >= 10 * shared ? "met" : "missed");
out:
    free(v.ids);
    free(prompt);
    free(hit);
    free(ms);
    return rc;
}

/* ---- throughput --------------------------------------------------------------- */

typedef struct {
    const char *model_path, *backend;
    long threads, conc, n_req, n_prompt, n_gen, mbt;
    long ttft_n, suffix, reps, ckpt_interval;
    double temperature;
    int act_bits;                           /* --act-bits (0: the default) */
    int weights_memory;                     /* --weights-memory */
    const char *schema_file, *grammar_file; /* --json-schema, --grammar */
    char *gspec;                            /* their grammar spec (malloc'd), or NULL */
    size_t gspec_len;
} hy_bo_opts_t;

static double hy_bo_cpu_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* What constrained decoding cost the engine in this run.  Masks are
 * computed on the engine thread while the compute threads wait, so their
 * share of a quiet machine's wall time is mask / (mask + rest / threads),
 * with CPU times (robust to other load on the machine): cpu_ms is the
 * process's CPU time over the run. */
static void hy_bo_grammar_report(const hy_grammar_counts_t *g, double wall_s, double cpu_ms,
                                 long threads, uint64_t gen_tokens)
{
    double mask_ms = (double)g->mask_us / 1e3, fill_ms = (double)g->fill_us / 1e3;
    double rest = cpu_ms - mask_ms;

    if (threads <= 0)
        threads = sysconf(_SC_NPROCESSORS_ONLN);
    printf("grammar requests=%llu compiles=%llu compile_ms=%.2f masks=%llu mask_ms=%.1f "
           "token_set_fill_ms=%.1f mask_ms_per_token=%.4f warm_mask_ms_per_token=%.4f "
           "process_cpu_ms=%.0f mask_share_of_cpu=%.2f%% mask_share_of_quiet_wall=%.2f%% "
           "wall_s=%.1f gen_tokens=%llu\n",
           (unsigned long long)g->requests, (unsigned long long)g->compiles,
           (double)g->compile_us / 1e3, (unsigned long long)g->masks, mask_ms, fill_ms,
           g->masks ? mask_ms / (double)g->masks : 0.0,
           g->masks ? (mask_ms - fill_ms) / (double)g->masks : 0.0, cpu_ms,
           cpu_ms > 0 ? 100.0 * mask_ms / cpu_ms : 0.0,
           100.0 * mask_ms / (mask_ms + (rest > 0 ? rest : 0) / (double)HY_MAX(threads, 1)),
           wall_s, (unsigned long long)gen_tokens);
}

/* One finished request's numbers into ttft/tpot; false if it failed. */
static bool hy_bo_done(const hy_local_status_t *st, double *ttft, int *n_ttft, double *tpot,
                       int *n_tpot, uint64_t *gen_tokens, char *err)
{
    if (st->finish_reason == HY_FINISH_ERROR) {
        hy_err(err, HY_EIO, "request failed: %s", st->error_msg);
        return false;
    }
    if (st->n_generated > 0)
        ttft[(*n_ttft)++] = (double)(st->first_token_ns - st->submit_ns) / 1e6;
    if (st->n_generated > 1)
        tpot[(*n_tpot)++] = (double)(st->finish_ns - st->first_token_ns) / 1e6 /
                            (st->n_generated - 1);
    *gen_tokens += (uint64_t)st->n_generated;
    return true;
}

/* Keeps o->conc random-prompt requests in flight until o->n_req are done,
 * stepping the engine in between; prints the throughput and latency lines. */
static int hy_bo_throughput(hy_local_engine_t *le, const hy_model_t *m, const hy_bo_opts_t *o,
                            char *err)
{
    hy_bo_req_t *reqs = calloc((size_t)o->conc, sizeof *reqs);
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)o->n_prompt);
    double *ttft = malloc(sizeof(double) * (size_t)o->n_req);
    double *tpot = malloc(sizeof(double) * (size_t)o->n_req);
    uint64_t rng = 0x2545f4914f6cdd1dULL, gen_tokens = 0;
    long submitted = 0, done = 0, i, j;
    int n_ttft = 0, n_tpot = 0, rc = HY_OK;
    struct timespec t0, t1;
    hy_req_params_t p;
    double wall, cpu0;

    if (!reqs || !prompt || !ttft || !tpot) {
        rc = hy_err(err, HY_ENOMEM, "out of memory");
        goto out;
    }
    memset(&p, 0, sizeof p);
    hy_sampling_default(&p.sampling);
    p.sampling.temperature = (float)o->temperature;
    p.max_tokens = (int32_t)o->n_gen;
    /* as an API request without "logprobs" */
    p.flags = HY_REQ_F_IGNORE_EOS | HY_REQ_F_NO_LOGPROBS;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cpu0 = hy_bo_cpu_ms();
    while (done < o->n_req) {
        for (i = 0; i < o->conc && submitted < o->n_req; i++) {
            if (reqs[i].live)
                continue;
            for (j = 0; j < o->n_prompt; j++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                prompt[j] = (int32_t)(rng % (uint64_t)m->n_vocab);
            }
            p.sampling.seed = (uint64_t)submitted + 1;
            if ((rc = hy_local_submit_grammar(le->local, &p, prompt, (int32_t)o->n_prompt,
                                              o->gspec, o->gspec_len, &reqs[i].id, err)) != HY_OK)
                goto out;
            reqs[i].live = true;
            submitted++;
        }
        if (hy_engine_poll(le->engine) == 0) {
            rc = hy_err(err, HY_EIO, "the engine cannot run the requests (too few KV pages)");
            goto out;
        }
        for (i = 0; i < o->conc; i++) {
            const hy_local_status_t *st = reqs[i].live ? hy_local_status(le->local, reqs[i].id)
                                                        : NULL;

            if (st == NULL || !st->done)
                continue;
            if (!hy_bo_done(st, ttft, &n_ttft, tpot, &n_tpot, &gen_tokens, err)) {
                rc = HY_EIO;
                goto out;
            }
            hy_local_release(le->local, reqs[i].id);
            reqs[i].live = false;
            done++;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    qsort(ttft, (size_t)n_ttft, sizeof *ttft, hy_bo_dcmp);
    qsort(tpot, (size_t)n_tpot, sizeof *tpot, hy_bo_dcmp);
    hy_engine_describe(le->engine, stdout);
    printf("bench offline model=%s requests=%ld concurrency=%ld prompt_tokens=%ld max_tokens=%ld "
           "wall_s=%.3f gen_tokens=%llu gen_tok_s=%.1f prompt_tok_s=%.1f\n",
           o->model_path, o->n_req, o->conc, o->n_prompt, o->n_gen, wall,
           (unsigned long long)gen_tokens, (double)gen_tokens / wall,
           (double)(o->n_req * o->n_prompt) / wall);
    printf("ttft_ms p50=%.2f p90=%.2f p99=%.2f  tpot_ms p50=%.2f p90=%.2f p99=%.2f\n",
           hy_bo_pct(ttft, n_ttft, 50), hy_bo_pct(ttft, n_ttft, 90), hy_bo_pct(ttft, n_ttft, 99),
           hy_bo_pct(tpot, n_tpot, 50), hy_bo_pct(tpot, n_tpot, 90), hy_bo_pct(tpot, n_tpot, 99));
    if (o->gspec != NULL) {
        hy_grammar_counts_t gc;

        hy_local_grammar_counts(le->local, &gc);
        hy_bo_grammar_report(&gc, wall, hy_bo_cpu_ms() - cpu0, o->threads, gen_tokens);
    }
out:
    free(reqs);
    free(prompt);
    free(ttft);
    free(tpot);
    return rc;
}

/* ---- the command ---------------------------------------------------------------- */

static void hy_bo_usage(void)
{
    printf("usage: hyserve bench --offline -m MODEL.gguf [--concurrency 8] [--requests 32]\n"
           "       [--prompt-tokens 128] [--max-tokens 64] [--max-batch-tokens 512] [-t THREADS]\n"
           "       [--checkpoint-interval 512] [--backend cpu|cuda] [--temperature 0]\n"
           "       [--act-bits 16|8] [--weights-memory huge_pages|mmap]\n"
           "       [--json-schema FILE | --grammar FILE]  (constrained: generation ends\n"
           "       where the grammar does; the grammar's cost is reported)\n"
           "   or: hyserve bench --offline -m MODEL.gguf --ttft-prefix[=2000] [--suffix-tokens 37]\n"
           "       [--repeat 5] [--max-batch-tokens 512] [--checkpoint-interval 512] [-t THREADS]\n"
           "       time to first token of an N-token prompt: cold, exact repeat, shared prefix\n");
}

/* 0: parsed; 1: --help printed; 2: a bad option (reported). */
static int hy_bo_parse(int argc, char **argv, hy_bo_opts_t *o)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"threads", required_argument, 0, 't'},
        {"concurrency", required_argument, 0, 'c'}, {"requests", required_argument, 0, 'r'},
        {"prompt-tokens", required_argument, 0, 'p'}, {"max-tokens", required_argument, 0, 'n'},
        {"max-batch-tokens", required_argument, 0, 'b'}, {"offline", no_argument, 0, 'o'},
        {"ttft-prefix", optional_argument, 0, 'T'}, {"suffix-tokens", required_argument, 0, 'S'},
        {"repeat", required_argument, 0, 'R'}, {"checkpoint-interval", required_argument, 0, 'k'},
        {"backend", required_argument, 0, 'B'}, {"json-schema", required_argument, 0, 'J'},
        {"grammar", required_argument, 0, 'G'}, {"temperature", required_argument, 0, 'e'},
        {"act-bits", required_argument, 0, 'A'}, {"weights-memory", required_argument, 0, 'W'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    char err[HY_ERR_LEN];
    int opt;

    *o = (hy_bo_opts_t){.conc = 8, .n_req = 32, .n_prompt = 128, .n_gen = 64, .mbt = 512,
                        .suffix = 37, .reps = 5, .ckpt_interval = 512};
    optind = 1;
    while ((opt = getopt_long(argc, argv, "m:t:c:r:p:n:b:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'm': o->model_path = optarg; break;
        case 't': if (hy_bo_long("--threads", optarg, 0, 1024, &o->threads)) return 2; break;
        case 'c': if (hy_bo_long("--concurrency", optarg, 1, 1024, &o->conc)) return 2; break;
        case 'r': if (hy_bo_long("--requests", optarg, 1, 1000000, &o->n_req)) return 2; break;
        case 'p': if (hy_bo_long("--prompt-tokens", optarg, 1, 65536, &o->n_prompt)) return 2; break;
        case 'n': if (hy_bo_long("--max-tokens", optarg, 1, 65536, &o->n_gen)) return 2; break;
        case 'b': if (hy_bo_long("--max-batch-tokens", optarg, 1, 65536, &o->mbt)) return 2; break;
        case 'T':
            o->ttft_n = 2000;
            if (optarg != NULL && hy_bo_long("--ttft-prefix", optarg, 32, 65536, &o->ttft_n))
                return 2;
            break;
        case 'S': if (hy_bo_long("--suffix-tokens", optarg, 1, 65535, &o->suffix)) return 2; break;
        case 'R': if (hy_bo_long("--repeat", optarg, 1, 1000, &o->reps)) return 2; break;
        case 'k': if (hy_bo_long("--checkpoint-interval", optarg, 0, 1 << 24, &o->ckpt_interval)) return 2; break;
        case 'o': break;
        case 'B': o->backend = optarg; break;
        case 'J': o->schema_file = optarg; break;
        case 'G': o->grammar_file = optarg; break;
        case 'e':
            if (hy_cli_float("bench", "--temperature", optarg, 0, 2, &o->temperature))
                return 2;
            break;
        case 'A': if (hy_cli_act_bits("bench", optarg, &o->act_bits)) return 2; break;
        case 'W':
            if (hy_cli_weights_memory("bench", optarg, &o->weights_memory))
                return 2;
            break;
        case 'h': hy_bo_usage(); return 1;
        default: return 2;
        }
    }
    if (o->model_path == NULL) {
        fprintf(stderr, "hyserve bench: --offline needs -m MODEL.gguf\n");
        return 2;
    }
    if (o->ttft_n > 0 && o->suffix > o->ttft_n - 16) {
        fprintf(stderr, "hyserve bench: --suffix-tokens = %ld: must leave at least one 16-token "
                        "block of the %ld-token prompt shared (1..%ld)\n",
                o->suffix, o->ttft_n, o->ttft_n - 16);
        return 2;
    }
    if (o->ttft_n > 0 && (o->schema_file != NULL || o->grammar_file != NULL)) {
        fprintf(stderr, "hyserve bench: --ttft-prefix measures unconstrained prompts: drop "
                        "--json-schema / --grammar\n");
        return 2;
    }
    if (o->schema_file != NULL && o->grammar_file != NULL) {
        fprintf(stderr, "hyserve bench: give at most one of --json-schema and --grammar\n");
        return 2;
    }
    /* a bad schema or grammar is reported before the model loads */
    if (hy_cli_grammar_spec(o->grammar_file, o->schema_file, false, &o->gspec, &o->gspec_len,
                            err) != HY_OK) {
        fprintf(stderr, "hyserve bench: %s\n", err);
        return 2;
    }
    return 0;
}

int hy_cmd_bench_offline(int argc, char **argv)
{
    char err[HY_ERR_LEN];
    hy_backend_opts_t bo = {0};
    hy_backend_t *be = NULL;
    hy_model_t *m = NULL;
    hy_local_engine_t le = {0};
    hy_engine_opts_t eo;
    hy_bo_opts_t o;
    int rc;

    if ((rc = hy_bo_parse(argc, argv, &o)) != 0)
        return rc == 1 ? 0 : rc;
    bo.n_threads = (int)o.threads;
    bo.act_bits = o.act_bits;
    bo.weights_memory = o.weights_memory;
    memset(&eo, 0, sizeof eo);
    eo.max_batch_tokens = (int32_t)o.mbt;
    eo.max_seqs = (int32_t)o.conc;
    eo.n_ctx = (int32_t)(o.ttft_n > 0 ? o.ttft_n + 2 : o.n_prompt + o.n_gen + 1);
    eo.page_tokens = 16;
    eo.kv_type = HY_DTYPE_F16;
    eo.checkpoint_interval = (int32_t)o.ckpt_interval;
    eo.n_request_slots = (int32_t)o.conc;
    rc = 1;
    if (hy_backend_new(&be, o.backend, &bo, err) != HY_OK ||
        hy_model_load(&m, o.model_path, be, err) != HY_OK ||
        hy_local_engine_open(&le, m, be, &eo, NULL, NULL, err) != HY_OK)
        goto fail;
    if (o.ttft_n > 0) {
        hy_engine_describe(le.engine, stdout);
        printf("ttft model=%s arch=%s prompt_tokens=%ld suffix_tokens=%ld repeat=%ld threads=%ld "
               "max_batch_tokens=%ld checkpoint_interval=%ld\n",
               o.model_path, m->arch_name, o.ttft_n, o.suffix, o.reps, o.threads, o.mbt,
               o.ckpt_interval);
        fflush(stdout);
        if (hy_bo_ttft(&le, m, (int32_t)o.ttft_n, (int32_t)o.suffix, (int)o.reps, err) != HY_OK)
            goto fail;
    } else if (hy_bo_throughput(&le, m, &o, err) != HY_OK) {
        goto fail;
    }
    if (hy_local_engine_close(&le, err) != HY_OK)
        goto fail;
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "hyserve bench: %s\n", err);
out:
    hy_local_engine_close(&le, NULL);
    hy_model_free(m);
    if (be != NULL)
        be->i->free(be);
    free(o.gspec);
    return rc;
}
