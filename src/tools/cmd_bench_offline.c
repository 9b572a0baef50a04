/*
 * cmd_bench_offline.c - `hyserve bench --offline -m MODEL --concurrency N
 * --requests M`: a private shared-memory segment, the engine thread, and
 * this thread acting as the workers: it keeps N requests submitted (random
 * prompts, greedy, ignore_eos so each generates exactly --max-tokens),
 * reads their rings and measures TTFT, TPOT and generation tokens/s.
 * `--ttft-prefix[=N]` instead measures the prefix cache: time to first
 * token of an N-token prompt cold, repeated exactly, and sharing all but a
 * short suffix with an earlier prompt, one request at a time.
 */
#include "backend/select.h"
#include "tools/bench_offline.h"
#include "engine/engine.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"
#include "model/tokenizer.h"
#include "server/ring.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    hy_req_handle_t h;
    bool live;
    int64_t submit_ns, first_ns;
    int32_t n;
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
 * submit to the first token in this thread, and the engine's hit count. */
static int hy_bo_first(hy_shm_t *shm, const int32_t *prompt, int32_t n, double *ms,
                       int32_t *hit, char *err)
{
    hy_req_params_t p;
    hy_req_handle_t h;
    hy_ring_tok_t tok;
    hy_req_status_t st;
    int64_t t0, t1 = 0;
    int rc, got;

    memset(&st, 0, sizeof st);
    memset(&p, 0, sizeof p);
    hy_sampling_default(&p.sampling);
    p.sampling.temperature = 0;
    p.max_tokens = 1;
    p.flags = HY_REQ_F_IGNORE_EOS;
    t0 = hy_shm_now_ns();
    if ((rc = hy_req_submit(shm, &p, prompt, n, &h, err)) != HY_OK)
        return rc;
    hy_shm_engine_kick(shm);
    for (;;) {
        got = hy_req_read(shm, h, &tok, 1, 1000, &st, err);
        if (got < 0) {
            rc = got;
            break;
        }
        if (got > 0 && t1 == 0)
            t1 = hy_shm_now_ns();
        if (st.done) {
            if (st.finish_reason == HY_FINISH_ERROR)
                rc = hy_err(err, HY_EIO, "request failed: %s", st.error_msg);
            else if (t1 == 0)
                rc = hy_err(err, HY_EIO, "request finished without a token");
            break;
        }
    }
    hy_req_release(shm, h, err);
    *ms = (double)(t1 - t0) / 1e6;
    *hit = st.n_cached;
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
static int hy_bo_ttft(hy_shm_t *shm, const hy_model_t *m, int32_t n, int32_t suffix, int reps,
                      char *err)
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
    if ((rc = hy_bo_first(shm, prompt, HY_MIN(n, 64), &warm_ms, &first_hit, err)) != HY_OK)
        goto out;
    for (r = 0; r < reps; r++) {
        hy_bo_fill(&v, prompt, n, 100 + (uint64_t)r);
        if ((rc = hy_bo_first(shm, prompt, n, &ms[r], &hit[r], err)) != HY_OK)
            goto out;
    }
    cold = hy_bo_report("cold", ms, hit, reps, 0);
    hy_bo_fill(&v, prompt, n, 200);
    if ((rc = hy_bo_first(shm, prompt, n, &warm_ms, &first_hit, err)) != HY_OK)
        goto out;
    for (r = 0; r < reps; r++)
        if ((rc = hy_bo_first(shm, prompt, n, &ms[r], &hit[r], err)) != HY_OK)
            goto out;
    rep = hy_bo_report("repeat", ms, hit, reps, cold);
    hy_bo_fill(&v, prompt, n - suffix, 300);
    hy_bo_fill(&v, prompt + n - suffix, suffix, 400);
    if ((rc = hy_bo_first(shm, prompt, n, &warm_ms, &first_hit, err)) != HY_OK)
        goto out;
    for (r = 0; r < reps; r++) {
        hy_bo_fill(&v, prompt + n - suffix, suffix, 401 + (uint64_t)r);
        if ((rc = hy_bo_first(shm, prompt, n, &ms[r], &hit[r], err)) != HY_OK)
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

/* --json-schema FILE / --grammar FILE: the spec every request carries. */
static int hy_bo_grammar(const char *schema_file, const char *grammar_file, char **spec,
                         size_t *spec_len, char *err)
{
    const char *path = schema_file ? schema_file : grammar_file;
    FILE *f = fopen(path, "rb");
    char *text = NULL, *gbnf = NULL, sub[HY_ERR_LEN];
    size_t len = 0, glen = 0;
    cJSON *schema = NULL;
    long n;
    int rc;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0 || (text = malloc((size_t)n + 1)) == NULL ||
        fread(text, 1, (size_t)n, f) != (size_t)n) {
        rc = hy_err(err, HY_EIO, "cannot read %s", path);
        goto out;
    }
    len = (size_t)n;
    text[len] = '\0';
    if (schema_file != NULL) {
        if ((schema = cJSON_ParseWithLength(text, len)) == NULL) {
            rc = hy_err(err, HY_EFORMAT, "%s: not valid JSON", path);
            goto out;
        }
        if ((rc = hy_json_schema_to_gbnf(schema, &gbnf, &glen, sub)) != HY_OK) {
            hy_err(err, rc, "%s: %s", path, sub);
            goto out;
        }
    }
    rc = hy_grammar_spec_pack(gbnf ? gbnf : text, gbnf ? glen : len, NULL, spec, spec_len, err);
out:
    if (f != NULL)
        fclose(f);
    cJSON_Delete(schema);
    free(text);
    free(gbnf);
    return rc;
}

/* What constrained decoding cost the engine in this run.  Masks are
 * computed on the engine thread while the compute threads wait, so their
 * share of a quiet machine's wall time is mask / (mask + rest / threads),
 * with CPU times (robust to other load on the machine): cpu_ms is the
 * process's CPU time over the run. */
static void hy_bo_grammar_report(hy_shm_t *shm, double wall_s, double cpu_ms, int threads,
                                 uint64_t gen_tokens)
{
    const hy_stats_t *s = hy_shm_stats(shm);
    double mask_ms = (double)atomic_load(&s->grammar_mask_us) / 1e3;
    double fill_ms = (double)atomic_load(&s->grammar_fill_us) / 1e3;
    uint64_t masks = atomic_load(&s->grammar_masks);
    double rest = cpu_ms - mask_ms;

    printf("grammar requests=%llu compiles=%llu compile_ms=%.2f masks=%llu mask_ms=%.1f "
           "token_set_fill_ms=%.1f mask_ms_per_token=%.4f warm_mask_ms_per_token=%.4f "
           "process_cpu_ms=%.0f mask_share_of_cpu=%.2f%% mask_share_of_quiet_wall=%.2f%% "
           "wall_s=%.1f gen_tokens=%llu\n",
           (unsigned long long)atomic_load(&s->grammar_requests),
           (unsigned long long)atomic_load(&s->grammar_compiles),
           (double)atomic_load(&s->grammar_compile_us) / 1e3, (unsigned long long)masks,
           mask_ms, fill_ms, masks ? mask_ms / (double)masks : 0.0,
           masks ? (mask_ms - fill_ms) / (double)masks : 0.0, cpu_ms,
           cpu_ms > 0 ? 100.0 * mask_ms / cpu_ms : 0.0,
           100.0 * mask_ms / (mask_ms + (rest > 0 ? rest : 0) / HY_MAX(threads, 1)), wall_s,
           (unsigned long long)gen_tokens);
}

static double hy_bo_cpu_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int hy_cmd_bench_offline(int argc, char **argv)
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
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *model_path = NULL, *backend = NULL, *schema_file = NULL, *grammar_file = NULL;
    char *gspec = NULL;
    size_t gspec_len = 0;
    double temperature = 0;
    long threads = 0, conc = 8, n_req = 32, n_prompt = 128, n_gen = 64, mbt = 512;
    long ttft_n = 0, suffix = 37, reps = 5, ckpt_interval = 512;
    char err[HY_ERR_LEN], inst[64];
    hy_backend_opts_t bo = {0};
    hy_backend_t *be = NULL;
    hy_model_t *m = NULL;
    hy_shm_t *shm = NULL;
    hy_engine_t *e = NULL;
    hy_engine_opts_t eo;
    hy_shm_params_t sp;
    hy_bo_req_t *reqs = NULL;
    hy_ring_tok_t *buf = NULL;
    int32_t *prompt = NULL;
    double *ttft = NULL, *tpot = NULL;
    int opt, rc = 1, n_ttft = 0, n_tpot = 0;
    long submitted = 0, done = 0, i, j;
    uint64_t rng = 0x2545f4914f6cdd1dULL, gen_tokens = 0;
    int64_t t0, t1;
    double cpu0 = 0;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "m:t:c:r:p:n:b:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'm': model_path = optarg; break;
        case 't': if (hy_bo_long("--threads", optarg, 0, 1024, &threads)) return 2; break;
        case 'c': if (hy_bo_long("--concurrency", optarg, 1, 1024, &conc)) return 2; break;
        case 'r': if (hy_bo_long("--requests", optarg, 1, 1000000, &n_req)) return 2; break;
        case 'p': if (hy_bo_long("--prompt-tokens", optarg, 1, 65536, &n_prompt)) return 2; break;
        case 'n': if (hy_bo_long("--max-tokens", optarg, 1, 65536, &n_gen)) return 2; break;
        case 'b': if (hy_bo_long("--max-batch-tokens", optarg, 1, 65536, &mbt)) return 2; break;
        case 'T':
            ttft_n = 2000;
            if (optarg != NULL && hy_bo_long("--ttft-prefix", optarg, 32, 65536, &ttft_n))
                return 2;
            break;
        case 'S': if (hy_bo_long("--suffix-tokens", optarg, 1, 65535, &suffix)) return 2; break;
        case 'R': if (hy_bo_long("--repeat", optarg, 1, 1000, &reps)) return 2; break;
        case 'k': if (hy_bo_long("--checkpoint-interval", optarg, 0, 1 << 24, &ckpt_interval)) return 2; break;
        case 'o': break;
        case 'B': backend = optarg; break;
        case 'J': schema_file = optarg; break;
        case 'G': grammar_file = optarg; break;
        case 'e': {
            char *end;

            temperature = strtod(optarg, &end);
            if (*optarg == '\0' || *end != '\0' || !(temperature >= 0 && temperature <= 2)) {
                fprintf(stderr, "hyserve bench: --temperature = %s: must be in 0..2\n", optarg);
                return 2;
            }
            break;
        }
        case 'h':
            printf("usage: hyserve bench --offline -m MODEL.gguf [--concurrency 8] [--requests 32]\n"
                   "       [--prompt-tokens 128] [--max-tokens 64] [--max-batch-tokens 512] [-t THREADS]\n"
                   "       [--checkpoint-interval 512] [--backend cpu|cuda] [--temperature 0]\n"
                   "       [--json-schema FILE | --grammar FILE]  (constrained: generation ends\n"
                   "       where the grammar does; the grammar's cost is reported)\n"
                   "   or: hyserve bench --offline -m MODEL.gguf --ttft-prefix[=2000] [--suffix-tokens 37]\n"
                   "       [--repeat 5] [--max-batch-tokens 512] [--checkpoint-interval 512] [-t THREADS]\n"
                   "       time to first token of an N-token prompt: cold, exact repeat, shared prefix\n");
            return 0;
        default: return 2;
        }
    }
    if (model_path == NULL) {
        fprintf(stderr, "hyserve bench: --offline needs -m MODEL.gguf\n");
        return 2;
    }
    if (schema_file != NULL && grammar_file != NULL) {
        fprintf(stderr, "hyserve bench: give at most one of --json-schema and --grammar\n");
        return 2;
    }
    if ((schema_file != NULL || grammar_file != NULL) &&
        hy_bo_grammar(schema_file, grammar_file, &gspec, &gspec_len, err) != HY_OK) {
        fprintf(stderr, "hyserve bench: %s\n", err);
        return 2;
    }
    if (ttft_n > 0 && suffix > ttft_n - 16) {
        fprintf(stderr, "hyserve bench: --suffix-tokens = %ld: must leave at least one 16-token "
                        "block of the %ld-token prompt shared (1..%ld)\n",
                suffix, ttft_n, ttft_n - 16);
        return 2;
    }
    bo.n_threads = (int)threads;
    if (hy_backend_new(&be, backend, &bo, err) != HY_OK ||
        hy_model_load(&m, model_path, be, err) != HY_OK)
        goto fail;
    memset(&eo, 0, sizeof eo);
    eo.max_batch_tokens = (int32_t)mbt;
    eo.max_seqs = (int32_t)conc;
    eo.n_ctx = (int32_t)(ttft_n > 0 ? ttft_n + 2 : n_prompt + n_gen + 1);
    /* the grammar spec travels in the prompt's arena, which holds n_ctx ids */
    eo.n_ctx += (int32_t)((gspec_len + 3) / 4);
    eo.page_tokens = 16;
    eo.kv_type = HY_DTYPE_F16;
    eo.checkpoint_interval = (int32_t)ckpt_interval;
    eo.n_request_slots = (int32_t)conc;
    if (hy_engine_shm_params(m, be, &eo, &sp, err) != HY_OK)
        goto fail;
    snprintf(inst, sizeof inst, "bench-%ld", (long)getpid());
    if (hy_shm_create(&shm, inst, &sp, err) != HY_OK)
        goto fail;
    if (hy_engine_create(&e, m, be, shm, &eo, err) != HY_OK || hy_engine_start(e, err) != HY_OK)
        goto fail;
    if (ttft_n > 0) {
        hy_engine_describe(e, stdout);
        printf("ttft model=%s arch=%s prompt_tokens=%ld suffix_tokens=%ld repeat=%ld threads=%ld "
               "max_batch_tokens=%ld checkpoint_interval=%ld\n",
               model_path, m->arch_name, ttft_n, suffix, reps, threads, mbt, ckpt_interval);
        fflush(stdout);
        if (hy_bo_ttft(shm, m, (int32_t)ttft_n, (int32_t)suffix, (int)reps, err) != HY_OK)
            goto fail;
        rc = 0;
        goto out;
    }
    reqs = calloc((size_t)conc, sizeof *reqs);
    buf = malloc(sizeof *buf * 64);
    prompt = malloc(sizeof(int32_t) * (size_t)n_prompt);
    ttft = malloc(sizeof(double) * (size_t)n_req);
    tpot = malloc(sizeof(double) * (size_t)n_req);
    if (!reqs || !buf || !prompt || !ttft || !tpot) {
        hy_err(err, HY_ENOMEM, "out of memory");
        goto fail;
    }
    t0 = hy_shm_now_ns();
    cpu0 = hy_bo_cpu_ms();
    while (done < n_req) {
        bool progress = false;

        for (i = 0; i < conc; i++) {
            hy_bo_req_t *r = &reqs[i];
            hy_req_status_t st;
            int n;

            if (!r->live && submitted < n_req) {
                hy_req_params_t p;

                memset(&p, 0, sizeof p);
                hy_sampling_default(&p.sampling);
                p.sampling.temperature = (float)temperature;
                p.sampling.seed = (uint64_t)submitted + 1;
                p.max_tokens = (int32_t)n_gen;
                p.flags = HY_REQ_F_IGNORE_EOS;
                for (j = 0; j < n_prompt; j++) {
                    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                    prompt[j] = (int32_t)(rng % (uint64_t)m->n_vocab);
                }
                if (hy_req_submit_grammar(shm, &p, prompt, (int32_t)n_prompt, gspec, gspec_len,
                                          &r->h, err) != HY_OK)
                    goto fail;
                hy_shm_engine_kick(shm);
                r->live = true;
                r->submit_ns = hy_shm_now_ns();
                r->first_ns = 0;
                r->n = 0;
                submitted++;
                progress = true;
            }
            if (!r->live)
                continue;
            n = hy_req_read(shm, r->h, buf, 64, 0, &st, err);
            if (n < 0)
                goto fail;
            if (n > 0 && r->first_ns == 0)
                r->first_ns = hy_shm_now_ns();
            r->n += n;
            progress |= n > 0;
            if (st.done) {
                int64_t end = hy_shm_now_ns();

                if (st.finish_reason == HY_FINISH_ERROR) {
                    hy_err(err, HY_EIO, "request failed: %s", st.error_msg);
                    goto fail;
                }
                if (r->n > 0)
                    ttft[n_ttft++] = (double)(r->first_ns - r->submit_ns) / 1e6;
                if (r->n > 1)
                    tpot[n_tpot++] = (double)(end - r->first_ns) / 1e6 / (r->n - 1);
                gen_tokens += (uint64_t)r->n;
                hy_req_release(shm, r->h, err);
                r->live = false;
                done++;
                progress = true;
            }
        }
        if (!progress) {
            struct timespec ts = {0, 100000};

            nanosleep(&ts, NULL);
        }
    }
    t1 = hy_shm_now_ns();
    qsort(ttft, (size_t)n_ttft, sizeof *ttft, hy_bo_dcmp);
    qsort(tpot, (size_t)n_tpot, sizeof *tpot, hy_bo_dcmp);
    hy_engine_describe(e, stdout);
    printf("bench offline model=%s requests=%ld concurrency=%ld prompt_tokens=%ld max_tokens=%ld "
           "wall_s=%.3f gen_tokens=%llu gen_tok_s=%.1f prompt_tok_s=%.1f\n",
           model_path, n_req, conc, n_prompt, n_gen, (double)(t1 - t0) / 1e9,
           (unsigned long long)gen_tokens, (double)gen_tokens / ((double)(t1 - t0) / 1e9),
           (double)(n_req * n_prompt) / ((double)(t1 - t0) / 1e9));
    printf("ttft_ms p50=%.2f p90=%.2f p99=%.2f  tpot_ms p50=%.2f p90=%.2f p99=%.2f\n",
           hy_bo_pct(ttft, n_ttft, 50), hy_bo_pct(ttft, n_ttft, 90), hy_bo_pct(ttft, n_ttft, 99),
           hy_bo_pct(tpot, n_tpot, 50), hy_bo_pct(tpot, n_tpot, 90), hy_bo_pct(tpot, n_tpot, 99));
    if (gspec != NULL)
        hy_bo_grammar_report(shm, (double)(t1 - t0) / 1e9, hy_bo_cpu_ms() - cpu0,
                             threads > 0 ? (int)threads : (int)sysconf(_SC_NPROCESSORS_ONLN),
                             gen_tokens);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "hyserve bench: %s\n", err);
out:
    hy_engine_free(e);
    hy_shm_close(shm);
    hy_model_free(m);
    if (be != NULL)
        be->i->free(be);
    free(reqs);
    free(buf);
    free(prompt);
    free(ttft);
    free(tpot);
    free(gspec);
    return rc;
}
