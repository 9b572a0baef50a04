/*
 * bench_attn.c - times the CPU backend's paged attention on the qwen35-bench
 * shape (8 query heads, 2 KV heads of 256, f16 KV in pages of 16 tokens):
 * one pass of 512 new tokens appended after n_past cached ones, as
 * `hyserve bench` feeds a long prompt, plus one decode token.  One thread,
 * thread CPU time, minimum over repeats (the build machine is shared);
 * with BENCH_ATTN_THREADS=N in the environment, N threads and wall time
 * (a decode token's keys shared among them: attention.c).  BENCH_ATTN_PREFILL=0
 * times the decode token only; BENCH_ATTN_COLD=1 evicts the caches before
 * each decode repeat (in a model the weights stream through them between
 * one token's attention and the next).  BENCH_ATTN_SHAPE=NH,NKV,HD times
 * another shape (query heads, KV heads, head size); BENCH_ATTN_WINDOW=W a
 * sliding layer's (the last W keys), BENCH_ATTN_SPLIT=S splits of S keys
 * instead of HY_ATTN_SPLIT, BENCH_ATTN_KV=f32|f16|q8_0 the KV type.
 * Built by `make check`, not run by it:
 *   tests/unit/bench_attn [reps=3] [isa=best|avx512|avx2|scalar] [keys...=4096 16384 32768]
 */
#include "backend/backend.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/cpu_impl.h"
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { B_PT = 16, B_NQ = 512 };
/* the shape: BENCH_ATTN_SHAPE=NH,NKV,HD overrides (SmolLM2: 9,3,64) */
static int B_NH = 8, B_NKV = 2, B_HD = 256;

/* Deterministic values in [-a, a). */
static void fill(float *x, size_t n, float a, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = a * ((float)(seed >> 8) / 8388608.0f - 1.0f);
    }
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    const char *isa = argc > 2 ? argv[2] : "best";
    int keys[16] = {4096, 16384, 32768}, n_keys = 3, max_keys = 0, rc = 1;
    hy_backend_t *be = NULL;
    long nth_l = 1;
    if (!bench_env_long("bench_attn", "BENCH_ATTN_THREADS", 1, 256, "1..256 threads", &nth_l))
        return 1;
    const int nth = (int)nth_l;
    long pf_l = 1, cold_l = 0;
    if (!bench_env_long("bench_attn", "BENCH_ATTN_PREFILL", 0, 1, "0 or 1", &pf_l) ||
        !bench_env_long("bench_attn", "BENCH_ATTN_COLD", 0, 1, "0 or 1", &cold_l))
        return 1;
    const bool do_prefill = pf_l != 0, cold = cold_l != 0;
    /* larger than any last-level cache this runs on */
    enum { B_EVICT = 256 << 20 };
    char *evict = NULL;
    /* one thread: its CPU time (a shared machine's other load falls
     * outside it); several: the wall time they take together */
    clockid_t clk = nth > 1 ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID;
    hy_backend_opts_t opts = {.n_threads = nth};
    char err[HY_ERR_LEN];
    float *q = NULL, *k = NULL, *v = NULL, *o = NULL;
    int32_t *pos = NULL, *pages = NULL;

    const char *kv_env = getenv("BENCH_ATTN_KV");
    hy_dtype_t kv = HY_DTYPE_F16;
    if (kv_env && strcmp(kv_env, "f16") != 0)
        kv = strcmp(kv_env, "f32") == 0 ? HY_DTYPE_F32
             : strcmp(kv_env, "q8_0") == 0 ? HY_DTYPE_Q8_0 : HY_DTYPE_COUNT;
    if (kv == HY_DTYPE_COUNT) {
        fprintf(stderr, "bench_attn: BENCH_ATTN_KV=%s: want f32, f16 or q8_0\n", kv_env);
        return 1;
    }
    const char *shape = getenv("BENCH_ATTN_SHAPE");
    if (shape && (sscanf(shape, "%d,%d,%d", &B_NH, &B_NKV, &B_HD) != 3 || B_NKV < 1 ||
                  B_NH < B_NKV || B_NH % B_NKV || B_HD < 1 || B_HD > 512)) {
        fprintf(stderr, "bench_attn: BENCH_ATTN_SHAPE=%s: want NH,NKV,HD\n", shape);
        return 1;
    }
    if (argc > 3) {
        n_keys = 0;
        for (int i = 3; i < argc && n_keys < 16; i++)
            keys[n_keys++] = atoi(argv[i]);
    }
    for (int i = 0; i < n_keys; i++) {
        if (keys[i] < B_NQ || keys[i] > (1 << 20)) {
            fprintf(stderr, "bench_attn: keys %d must be %d..%d\n", keys[i], B_NQ, 1 << 20);
            return 1;
        }
        max_keys = keys[i] > max_keys ? keys[i] : max_keys;
    }
    if (reps < 1)
        reps = 1;
    if (hy_backend_cpu_new(&be, &opts, err) != HY_OK) {
        fprintf(stderr, "bench_attn: %s\n", err);
        return 1;
    }
    if (strcmp(isa, "best") != 0 &&
        hy_cpu_attn_set_isa(strcmp(isa, "avx512") == 0 ? HY_ISA_AVX512
                            : strcmp(isa, "avx2") == 0 ? HY_ISA_AVX2
                                                       : HY_ISA_SCALAR) != HY_OK) {
        fprintf(stderr, "bench_attn: isa %s not supported here\n", isa);
        goto done;
    }

    int n_pages = (max_keys + B_PT - 1) / B_PT;
    hy_kv_layout_t lay = {1, B_NKV, B_HD, B_HD, B_PT, n_pages, kv, 0, NULL,
                          {0, 0, 0, 0, 0, 0, 0}};
    q = malloc((size_t)B_NQ * B_NH * B_HD * sizeof(float));
    k = malloc((size_t)B_NQ * B_NKV * B_HD * sizeof(float));
    v = malloc((size_t)B_NQ * B_NKV * B_HD * sizeof(float));
    o = malloc((size_t)B_NQ * B_NH * B_HD * sizeof(float));
    pos = malloc(B_NQ * sizeof(int32_t));
    pages = malloc((size_t)n_pages * sizeof(int32_t));
    if (!q || !k || !v || !o || !pos || !pages || be->i->kv_init(be, &lay, err) != HY_OK) {
        fprintf(stderr, "bench_attn: setup failed: %s\n", err);
        goto done;
    }
    for (int i = 0; i < n_pages; i++) /* pages in reverse: no free locality */
        pages[i] = n_pages - 1 - i;
    fill(q, (size_t)B_NQ * B_NH * B_HD, 0.25f, 1);

    /* fill the cache cheaply: passes with a window of 1 write every
     * position's K/V but attend to themselves only */
    hy_attn_params_t pw = {B_NH, B_NKV, B_HD, B_HD, 0.0625f, 1, 0};
    for (int p0 = 0; p0 < max_keys; p0 += B_NQ) {
        int n = max_keys - p0 < B_NQ ? max_keys - p0 : B_NQ;
        hy_batch_seq_t sq = {0, n, p0, pages, (p0 + n + B_PT - 1) / B_PT, -1, NULL, 0, NULL, 0, 0,
                             0, NULL, NULL};
        hy_batch_t b = {n, NULL, pos, 1, &sq};
        for (int i = 0; i < n; i++)
            pos[i] = p0 + i;
        fill(k, (size_t)n * B_NKV * B_HD, 1.0f, 7u + (uint32_t)p0);
        fill(v, (size_t)n * B_NKV * B_HD, 1.0f, 11u + (uint32_t)p0);
        be->i->attention(be, 0, &b, q, k, v, o, &pw);
    }
    if (be->i->status(be, err) != HY_OK) {
        fprintf(stderr, "bench_attn: cache fill: %s\n", err);
        goto done;
    }

    hy_attn_params_t p = {B_NH, B_NKV, B_HD, B_HD, 0.0625f, 0, 0};
    long win = 0, split = -1;
    if (!bench_env_long("bench_attn", "BENCH_ATTN_WINDOW", 0, 1 << 20,
                        "0..1048576 keys (0: none)", &win) ||
        !bench_env_long("bench_attn", "BENCH_ATTN_SPLIT", 0, 1 << 20,
                        "0..1048576 keys, a multiple of the flash tile (0: one split)", &split))
        goto done;
    p.window = (int32_t)win;
    if (split >= 0 && hy_cpu_attn_set_split((int32_t)split) != HY_OK) {
        fprintf(stderr,
                "bench_attn: BENCH_ATTN_SPLIT=%ld: want a multiple of %d keys (0: one split)\n",
                split, HY_ATTN_FLASH_TILE);
        goto done;
    }
    /* the float peak of the level the kernels run at, per core, measured
     * here (0: the scalar level, no rating) */
    double peak = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    /* the level the kernels run at: the pin above, else the engine's choice */
    hy_isa_t level = hy_cpu_attn_isa();
#if HY_BUILD_AVX512
    if (level == HY_ISA_AVX512)
        peak = bench_fma512_per_s() * 32 / 1e9;
#endif
    if (level == HY_ISA_AVX2)
        peak = bench_fma256_per_s() * 16 / 1e9;
#endif
    printf("# attention %d/%d heads of %d, f16 KV pages of %d, %d thread(s), isa %s (%s), "
           "%s, min of %d (float peak, vfmadd measured: %.1f GFLOP/s a core)\n",
           B_NH, B_NKV, B_HD, B_PT, nth, isa, hy_isa_name(hy_cpu_attn_isa()),
           nth > 1 ? "wall time" : "thread CPU time", reps, peak);
    for (int kk = 0; kk < n_keys; kk++) {
        /* the last pass of a keys[kk]-token prompt (it rewrites the last
         * 512 positions' K/V: the values do not change the cost) */
        int p0 = keys[kk] - B_NQ;
        hy_batch_seq_t sq = {0, B_NQ, p0, pages, (keys[kk] + B_PT - 1) / B_PT, -1, NULL, 0, NULL,
                             0, 0, 0, NULL, NULL};
        hy_batch_t b = {B_NQ, NULL, pos, 1, &sq};
        double best = INFINITY, flop = 0;
        for (int i = 0; i < B_NQ; i++) {
            pos[i] = p0 + i;
            flop += (double)(p0 + i + 1) * B_NH * (2.0 * B_HD + 2.0 * B_HD);
        }
        for (int r = 0; r < (do_prefill ? reps : 0); r++) {
            double t0 = bench_clock_s(clk);
            be->i->attention(be, 0, &b, q, k, v, o, &p);
            double dt = bench_clock_s(clk) - t0;
            best = dt < best ? dt : best;
        }
        double cs = 0;
        for (size_t i = 0; i < (size_t)B_NQ * B_NH * B_HD; i++)
            cs += o[i];
        if (do_prefill)
            printf("prefill 512 queries x %6d keys: %9.1f ms %7.1f GFLOP/s %5.1f%% of peak "
                   "(checksum %.6f)\n", keys[kk], best * 1e3, flop / best * 1e-9,
                   peak > 0 ? flop / best * 1e-9 / (peak * nth) * 100.0 : 0.0, cs);

        /* one decode token at the end of the same history */
        int32_t pd = keys[kk] - 1;
        hy_batch_seq_t sd = {0, 1, pd, pages, (keys[kk] + B_PT - 1) / B_PT, -1, NULL, 0, NULL, 0,
                             0, 0, NULL, NULL};
        hy_batch_t bd = {1, NULL, &pd, 1, &sd};
        best = INFINITY;
        for (int r = 0; r < 5 * reps; r++) {
            if (cold) {
                if (!evict && !(evict = calloc(1, B_EVICT))) {
                    fprintf(stderr, "bench_attn: no %d MB to evict the caches with\n",
                            B_EVICT >> 20);
                    goto done;
                }
                for (size_t i = 0; i < B_EVICT; i += 64)
                    evict[i] = (char)(evict[i] + r);
            }
            double t0 = bench_clock_s(clk);
            be->i->attention(be, 0, &bd, q + (size_t)(B_NQ - 1) * B_NH * B_HD,
                             k + (size_t)(B_NQ - 1) * B_NKV * B_HD,
                             v + (size_t)(B_NQ - 1) * B_NKV * B_HD, o, &p);
            double dt = bench_clock_s(clk) - t0;
            best = dt < best ? dt : best;
        }
        printf("decode 1 query  x %6d keys: %9.1f us%s\n", keys[kk], best * 1e6,
               cold ? " (cold caches)" : "");
    }
    rc = be->i->status(be, err) == HY_OK ? 0 : 1;
    if (rc)
        fprintf(stderr, "bench_attn: %s\n", err);
done:
    free(evict);
    free(q);
    free(k);
    free(v);
    free(o);
    free(pos);
    free(pages);
    be->i->free(be);
    return rc;
}
