/*
 * cmd_bench_offline.c - `hyserve bench --offline -m MODEL --concurrency N
 * --requests M`: a private shared-memory segment, the engine thread, and
 * this thread acting as the workers: it keeps N requests submitted (random
 * prompts, greedy, ignore_eos so each generates exactly --max-tokens),
 * reads their rings and measures TTFT, TPOT and generation tokens/s.
 */
#include "tools/bench_offline.h"
#include "engine/engine.h"
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

int hy_cmd_bench_offline(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"threads", required_argument, 0, 't'},
        {"concurrency", required_argument, 0, 'c'}, {"requests", required_argument, 0, 'r'},
        {"prompt-tokens", required_argument, 0, 'p'}, {"max-tokens", required_argument, 0, 'n'},
        {"max-batch-tokens", required_argument, 0, 'b'}, {"offline", no_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *model_path = NULL;
    long threads = 0, conc = 8, n_req = 32, n_prompt = 128, n_gen = 64, mbt = 512;
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
        case 'o': break;
        case 'h':
            printf("usage: hyserve bench --offline -m MODEL.gguf [--concurrency 8] [--requests 32]\n"
                   "       [--prompt-tokens 128] [--max-tokens 64] [--max-batch-tokens 512] [-t THREADS]\n");
            return 0;
        default: return 2;
        }
    }
    if (model_path == NULL) {
        fprintf(stderr, "hyserve bench: --offline needs -m MODEL.gguf\n");
        return 2;
    }
    bo.n_threads = (int)threads;
    if (hy_backend_cpu_new(&be, &bo, err) != HY_OK || hy_model_load(&m, model_path, be, err) != HY_OK)
        goto fail;
    memset(&eo, 0, sizeof eo);
    eo.max_batch_tokens = (int32_t)mbt;
    eo.max_seqs = (int32_t)conc;
    eo.n_ctx = (int32_t)(n_prompt + n_gen + 1);
    eo.page_tokens = 16;
    eo.kv_type = HY_DTYPE_F16;
    eo.checkpoint_interval = 512;
    eo.n_request_slots = (int32_t)conc;
    if (hy_engine_shm_params(m, be, &eo, &sp, err) != HY_OK)
        goto fail;
    snprintf(inst, sizeof inst, "bench-%ld", (long)getpid());
    if (hy_shm_create(&shm, inst, &sp, err) != HY_OK)
        goto fail;
    if (hy_engine_create(&e, m, be, shm, &eo, err) != HY_OK || hy_engine_start(e, err) != HY_OK)
        goto fail;
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
                p.sampling.temperature = 0;
                p.max_tokens = (int32_t)n_gen;
                p.flags = HY_REQ_F_IGNORE_EOS;
                for (j = 0; j < n_prompt; j++) {
                    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                    prompt[j] = (int32_t)(rng % (uint64_t)m->n_vocab);
                }
                if (hy_req_submit(shm, &p, prompt, (int32_t)n_prompt, &r->h, err) != HY_OK)
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
    return rc;
}
