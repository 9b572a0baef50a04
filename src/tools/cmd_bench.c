/*
 * cmd_bench.c - `hyserve bench`: prompt processing and generation speed with
 * llama-bench's definitions, so the two can be compared line by line:
 * ppN = N prompt tokens in one batch on an empty context; tgN = N tokens
 * decoded one at a time starting from an empty context; with -d D (llama-
 * bench's --n-depth) both start after D tokens already in the context,
 * prefilled untimed before each repetition ("pp512 @ d16384").  Token ids
 * are random (the speed does not depend on them).  Each test is repeated and the
 * median reported, because shared machines are noisy.
 */
#include <stdio.h>

#include "tools/cli.h"
#include "tools/bench_offline.h"
#include "tools/bench_url.h"
#include "kv/plan.h"

#include <getopt.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

/*
 * Read bandwidth, to put tg numbers next to the memory bound.  Decode reads
 * every weight once per token, so tokens/s can never exceed bandwidth /
 * weight bytes.  The bound is measured the way decode reads: T threads each
 * stream their share of a buffer as large as the weights, again and again,
 * with the widest loads the CPU has (target_clones picks 64-byte AVX-512
 * loads where present, as the kernels use), from memory of the weights'
 * kind (huge pages unless they are the file's mapping: on this repository's
 * Xeon a stream over 4 KB pages reads 5-10% slower, PERFORMANCE.md
 * section 42), best of several passes.  The
 * footprint matters: on a CPU whose last-level cache holds part of the
 * weights, a 1 GiB buffer would measure DRAM alone and understate what a
 * model of this size can be fed with; that figure is printed as well.
 */
typedef uint64_t hy_bw_vec_t __attribute__((vector_size(64)));

typedef struct {
    const hy_bw_vec_t *p;
    size_t n;
    uint64_t sum;
} hy_bw_part_t;

__attribute__((target_clones("avx512f", "avx2", "default")))
static void *hy_bw_worker(void *arg)
{
    hy_bw_part_t *w = arg;
    hy_bw_vec_t s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    size_t i;

    for (i = 0; i + 4 <= w->n; i += 4) {
        s0 += w->p[i];
        s1 += w->p[i + 1];
        s2 += w->p[i + 2];
        s3 += w->p[i + 3];
    }
    s0 += s1 + s2 + s3;
    w->sum = s0[0] + s0[1] + s0[2] + s0[3] + s0[4] + s0[5] + s0[6] + s0[7];
    return NULL;
}

/* GB/s reading `bytes` with `threads` threads, best of `passes` passes
 * after one warm-up pass, the buffer advised onto huge pages when `huge`
 * (*on_huge, unless NULL: the share the kernel placed there, 0..1); 0 if
 * the buffer cannot be had. */
static double hy_bench_read_bw(int threads, size_t bytes, int passes, bool huge, double *on_huge)
{
    const size_t n = bytes / sizeof(hy_bw_vec_t), hp = (size_t)2 << 20;
    const size_t len = n * sizeof(hy_bw_vec_t) + hp;
    void *map = n ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                  : MAP_FAILED;
    hy_bw_vec_t *buf;
    hy_bw_part_t parts[256];
    pthread_t tid[256];
    double best = 0;
    int pass, t;

    if (map == MAP_FAILED)
        return 0;
    /* aligned to a huge page, as the weights' copy is (gguf.c) */
    buf = (hy_bw_vec_t *)(((uintptr_t)map + hp - 1) & ~(uintptr_t)(hp - 1));
    (void)madvise(buf, n * sizeof *buf, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 8; k++)
            buf[i][k] = i * 8 + (size_t)k;
    if (threads < 1)
        threads = 1;
    if (threads > 256)
        threads = 256;
    for (pass = 0; pass <= passes; pass++) {
        double t0 = hy_cli_now_ms(), dt;

        for (t = 0; t < threads; t++) {
            parts[t].p = buf + n / (size_t)threads * (size_t)t;
            parts[t].n = n / (size_t)threads;
            pthread_create(&tid[t], NULL, hy_bw_worker, &parts[t]);
        }
        for (t = 0; t < threads; t++)
            pthread_join(tid[t], NULL);
        dt = hy_cli_now_ms() - t0;
        if (pass > 0 && n * sizeof *buf / dt / 1e6 > best)
            best = (double)(n * sizeof *buf) / dt / 1e6;
    }
    /* keep the sums alive */
    if (parts[0].sum == 42)
        fprintf(stderr, " ");
    if (on_huge != NULL)
        *on_huge = (double)hy_huge_bytes(buf, n * sizeof *buf) / (double)(n * sizeof *buf);
    munmap(map, len);
    return best; /* GB/s */
}

/* The KV bytes a token decoded at position pos reads: each attention
 * kind's bytes a position (the plan's, for ro's KV type) times the
 * positions its layers attend to, all or the window (the kind's largest). */
static int hy_bench_kv_read(const hy_cli_ctx_t *c, const hy_runner_opts_t *ro, int64_t pos,
                            uint64_t *out, char *err)
{
    hy_plan_opts_t po = {0};
    hy_plan_t p;

    po.n_ctx = ro->n_ctx;
    po.n_seqs = 1;
    po.page_tokens = ro->page_tokens;
    po.chunk = ro->max_tokens;
    po.kv_type = ro->kv_type;
    if (hy_plan_make_opts(&p, c->model, c->be, &po, err) != HY_OK)
        return -1;
    *out = 0;
    for (int k = 0; k < HY_LAYER_KINDS; k++)
        *out += p.kv_bytes_per_token[k] *
                (uint64_t)(p.window[k] > 0 ? HY_MIN(pos, (int64_t)p.window[k]) : pos);
    return 0;
}

static int hy_bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* One repetition of n tokens after depth untimed ones; returns tokens/s
 * or a negative value on error. */
static double hy_bench_once(hy_cli_ctx_t *c, bool prompt, int32_t depth, int32_t n, uint64_t *rng,
                            float *logits)
{
    hy_kv_seq_t seq = {0};
    int32_t *all = malloc(sizeof(int32_t) * (size_t)(depth + n)), *toks = all + depth, i;
    char err[HY_ERR_LEN];
    double t0, dt = -1;

    if (all == NULL)
        return -1;
    for (i = 0; i < depth + n; i++) {
        *rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
        all[i] = (int32_t)((*rng >> 33) % (uint64_t)c->model->n_vocab);
    }
    if (depth > 0 && hy_runner_prefill(&c->runner, &seq, all, depth, logits, err) != HY_OK)
        goto fail;
    t0 = hy_cli_now_ms();
    if (prompt) {
        if (hy_runner_prefill(&c->runner, &seq, toks, n, logits, err) != HY_OK)
            goto fail;
    } else {
        for (i = 0; i < n; i++) {
            hy_runner_item_t it = {&seq, &toks[i], 1, false};

            if (hy_runner_step(&c->runner, &it, 1, logits, err) != HY_OK)
                goto fail;
        }
    }
    dt = hy_cli_now_ms() - t0;
    hy_runner_seq_release(&c->runner, &seq);
    free(all);
    return n * 1e3 / dt;
fail:
    fprintf(stderr, "hyserve bench: %s\n", err);
    hy_runner_seq_release(&c->runner, &seq);
    free(all);
    return -1;
}

int hy_cmd_bench(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"threads", required_argument, 0, 't'},
        {"n-prompt", required_argument, 0, 'p'}, {"n-gen", required_argument, 0, 'n'},
        {"repetitions", required_argument, 0, 'r'}, {"membw", no_argument, 0, 'b'},
        {"backend", required_argument, 0, 'B'}, {"ubatch", required_argument, 0, 'u'},
        {"n-depth", required_argument, 0, 'd'}, {"act-bits", required_argument, 0, 'A'},
        {"weights-memory", required_argument, 0, 'W'}, {"kv-type", required_argument, 0, 'K'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *model = NULL, *threads_list = "0", *backend = NULL;
    long n_prompt = 512, n_gen = 128, reps = 5, ubatch = 512, depth = 0;
    char depth_tag[32] = "";
    char tl[256], *tok, *save;
    int opt, rc = 1;
    bool membw = false;
    int act_bits = 0, weights_memory = HY_WEIGHTS_HUGE_PAGES;
    hy_dtype_t kv_type = HY_DTYPE_F16;
    uint64_t bw_note_wbytes = 0, bw_note_kvbytes = 0, bw_note_huge = 0, bw_note_wfile = 1;
    char err[HY_ERR_LEN];
    double bw_note_tg = 0;

    for (opt = 1; opt < argc; opt++)
        if (strcmp(argv[opt], "--offline") == 0)
            return hy_cmd_bench_offline(argc, argv); /* the engine, in process */
    for (opt = 1; opt < argc; opt++)
        if (strcmp(argv[opt], "--url") == 0 || strncmp(argv[opt], "--url=", 6) == 0)
            return hy_cmd_bench_url(argc, argv); /* a running server over HTTP */
    optind = 1;
    while ((opt = getopt_long(argc, argv, "m:t:p:n:r:u:d:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'm': model = optarg; break;
        case 't': threads_list = optarg; break;
        case 'p': if (hy_cli_int("bench", "--n-prompt", optarg, 0, 65536, &n_prompt)) return 2; break;
        case 'n': if (hy_cli_int("bench", "--n-gen", optarg, 0, 65536, &n_gen)) return 2; break;
        case 'r': if (hy_cli_int("bench", "--repetitions", optarg, 1, 1000, &reps)) return 2; break;
        case 'b': membw = true; break;
        case 'B': backend = optarg; break;
        case 'u': if (hy_cli_int("bench", "--ubatch", optarg, 1, 65536, &ubatch)) return 2; break;
        case 'd': if (hy_cli_int("bench", "--n-depth", optarg, 0, 1048576, &depth)) return 2; break;
        case 'A': if (hy_cli_act_bits("bench", optarg, &act_bits)) return 2; break;
        case 'W': if (hy_cli_weights_memory("bench", optarg, &weights_memory)) return 2; break;
        case 'K': if (hy_cli_kv_type("bench", optarg, &kv_type)) return 2; break;
        case 'h':
            printf("usage: hyserve bench -m MODEL.gguf [-t 1,2] [-p 512] [-n 128] [-d 0] [-r 5] [-u 512] [--membw] [--act-bits 16|8] [--weights-memory huge_pages|mmap] [--kv-type f16|f32|q8_0] [--backend cpu|cuda]\n"
                   "  -u N     prompt tokens per forward pass (llama-bench's -ub, default 512)\n"
                   "  -d N     N tokens in the context before each test (llama-bench's -d), untimed\n"
                   "  -t LIST  comma-separated thread counts (0 = all cores)\n"
                   "  --membw  also measure read bandwidth and tg's share of the memory bound\n"
                   "  --kv-type T  the KV cache's element type (llama-bench's -ctk/-ctv; [cache] kv_type)\n"
                   HY_CLI_ACT_BITS_HELP
                   HY_CLI_WEIGHTS_MEMORY_HELP
                   "       hyserve bench --url http://HOST:PORT ...  (load a running server; --url --help)\n");
            return 0;
        default: return 2;
        }
    }
    snprintf(tl, sizeof tl, "%s", threads_list);
    if (depth > 0)
        snprintf(depth_tag, sizeof depth_tag, " @ d%ld", depth);
    printf("| model | threads | test | t/s (median) | min | max | reps |\n");
    printf("| ----- | ------: | ---- | -----------: | --: | --: | ---: |\n");
    for (tok = strtok_r(tl, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long threads;
        hy_runner_opts_t ro;
        hy_cli_ctx_t c;
        int pass;

        if (hy_cli_int("bench", "--threads", tok, 0, 1024, &threads))
            return 2;
        hy_runner_opts_default(&ro);
        ro.max_seqs = 1;
        ro.max_outputs = 1;
        /* the prompt (and the depth) go through in passes of ubatch tokens,
         * as llama-bench's n_ubatch does and as the server's chunked prefill
         * would */
        ro.max_tokens = (int32_t)HY_MAX(HY_MIN(HY_MAX(n_prompt, depth), ubatch), 1);
        ro.n_ctx = (int32_t)(depth + HY_MAX(n_prompt, n_gen) + 1);
        ro.kv_type = kv_type;
        const hy_backend_opts_t bo = {.n_threads = (int)threads, .act_bits = act_bits,
                                      .weights_memory = weights_memory};

        if (hy_cli_open(&c, "bench", model, backend, &bo, false, &ro) != 0)
            return 1;
        for (pass = 0; pass < 2; pass++) {
            long n = pass == 0 ? n_prompt : n_gen;
            double *v = malloc(sizeof(double) * (size_t)reps);
            float *logits = malloc(sizeof(float) * (size_t)c.model->n_vocab);
            uint64_t rng = 42;
            long r;

            if (n == 0 || v == NULL || logits == NULL) {
                free(v);
                free(logits);
                continue;
            }
            /* warm-up run, as llama-bench does */
            if (hy_bench_once(&c, pass == 0, 0, (int32_t)HY_MIN(n, 16), &rng, logits) < 0)
                goto fail;
            for (r = 0; r < reps; r++) {
                v[r] = hy_bench_once(&c, pass == 0, (int32_t)depth, (int32_t)n, &rng, logits);
                if (v[r] < 0) {
                    free(v);
                    free(logits);
                    hy_cli_close(&c);
                    return 1;
                }
            }
            qsort(v, (size_t)reps, sizeof *v, hy_bench_cmp);
            if (pass == 1) {
                /* every matrix is read once per decoded token; the
                 * embedding contributes one row */
                uint64_t wbytes = 0;
                double med = reps % 2 ? v[reps / 2] : (v[reps / 2 - 1] + v[reps / 2]) / 2;

                for (int64_t ti = 0; ti < hy_gguf_n_tensors(c.model->gguf); ti++) {
                    const hy_gguf_tensor_t *tt = hy_gguf_tensor(c.model->gguf, ti);

                    if (strcmp(tt->name, "token_embd.weight") != 0 ||
                        c.model->output.data == c.model->tok_embd.data)
                        wbytes += tt->nbytes;
                }
                bw_note_wbytes = wbytes;
                bw_note_tg = med;
                bw_note_huge = hy_gguf_huge_bytes(c.model->gguf);
                bw_note_wfile = HY_MAX(hy_gguf_file_size(c.model->gguf), 1);
                /* the timed tokens' mean position */
                if (hy_bench_kv_read(&c, &ro, depth + n / 2, &bw_note_kvbytes, err) != 0) {
                    fprintf(stderr, "hyserve bench: %s\n", err);
                    goto fail;
                }
            }
            printf("| %s | %ld | %s%ld%s | %.2f | %.2f | %.2f | %ld |\n", c.model->name,
                   threads, pass == 0 ? "pp" : "tg", n, depth_tag,
                   reps % 2 ? v[reps / 2] : (v[reps / 2 - 1] + v[reps / 2]) / 2, v[0],
                   v[reps - 1], reps);
            fflush(stdout);
            free(v);
            free(logits);
            continue;
fail:
            free(v);
            free(logits);
            hy_cli_close(&c);
            return 1;
        }
        hy_cli_close(&c);
        if (membw && bw_note_tg > 0) {
            int nt = threads > 0 ? (int)threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
            const bool huge = weights_memory == HY_WEIGHTS_HUGE_PAGES;
            const double bytes = (double)(bw_note_wbytes + bw_note_kvbytes);
            double on_huge = 0;
            double bw = hy_bench_read_bw(nt, (size_t)bytes, 20, huge, &on_huge);
            double dram = hy_bench_read_bw(nt, (size_t)1 << 30, 3, huge, NULL);

            printf("\nthreads %ld: read per token %.1f MB (weights %.1f MB, %.0f%% of them on huge "
                   "pages; KV %.2f MB: %s at the tokens' mean position %ld); read bandwidth %.2f "
                   "GB/s (%s threads streaming a buffer of that size, %.0f%% of it on huge pages, "
                   "with the widest loads, best of 20 passes); bound %.1f tok/s; tg achieves "
                   "%.0f%% of it\n"
                   "  (1 GiB buffer, DRAM alone: %.2f GB/s, tg %.0f%% of that bound)\n\n",
                   threads, bytes / 1e6, bw_note_wbytes / 1e6,
                   100.0 * (double)bw_note_huge / (double)bw_note_wfile,
                   bw_note_kvbytes / 1e6, hy_dtype_info(kv_type)->name, depth + n_gen / 2, bw,
                   tok, 100.0 * on_huge, bw * 1e9 / bytes,
                   100.0 * bw_note_tg * bytes / (bw * 1e9), dram,
                   100.0 * bw_note_tg * bytes / (dram * 1e9));
        }
    }
    rc = 0;
    return rc;
}
