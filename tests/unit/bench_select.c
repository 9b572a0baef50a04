/*
 * bench_select.c - times block-sparse attention's choice of blocks
 * (hy_sparse_select) alone: one query group of heads (4 by default: each
 * head's softmax over the blocks; 1: the raw score) scoring every block
 * key of a sequence and keeping the top-k, as a decode token does per full
 * layer and KV head.  Keys and queries are deterministic pseudo-random
 * values (no block stands out: the most keeping work); thread CPU time,
 * the best of 5 rounds of reps choices (the build machine is shared).
 * Built by `make check`, not run by it:
 *   tests/unit/bench_select [blocks=16384] [head_dim=8] [topk=64] [reps=2000] [heads=4]
 *                           [topp=0] [max_blocks=512]
 */
#include "backend/cpu/sparse_attn.h"
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static uint32_t next(uint32_t *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

static int arg(int argc, char **argv, int i, int def, int lo)
{
    char *end;
    long v = i < argc ? strtol(argv[i], &end, 10) : def;

    if (i < argc && (*end != '\0' || v < lo || v > 1 << 24)) {
        fprintf(stderr, "bench_select: argument %d: '%s' is not a whole number >= %d\n", i,
                argv[i], lo);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv)
{
    int nb = arg(argc, argv, 1, 16384, 16), hd = arg(argc, argv, 2, 8, 1);
    int k = arg(argc, argv, 3, 64, 1), reps = arg(argc, argv, 4, 2000, 1);
    int heads = arg(argc, argv, 5, 4, 1), cap = arg(argc, argv, 7, 512, 1);
    char *end = NULL;
    float topp = argc > 6 ? strtof(argv[6], &end) : 0.0f;
    float *keys = malloc(sizeof(float) * (size_t)nb * (size_t)hd);
    float *q = malloc(sizeof(float) * (size_t)heads * (size_t)hd);
    float *scr = malloc(sizeof(float) * hy_sparse_select_floats(heads, nb));
    int32_t *out = malloc(sizeof(int32_t) * ((size_t)nb + 1));
    hy_sparse_params_t sp = {4, k, 1, 4, 1.0f / sqrtf((float)hd), 0, topp, cap};
    uint32_t s = 1;
    double best = 1e30;
    long check = 0, chosen = 0;

    if (argc > 6 && (*end != '\0' || !(topp >= 0 && topp <= 1) || (topp > 0 && cap < k))) {
        fprintf(stderr, "bench_select: top-p '%s': a number in 0..1, with max_blocks >= topk\n",
                argv[6]);
        return 2;
    }

    if (!keys || !q || !scr || !out || hd > HY_ATTN_MAX_HEAD_DIM) {
        fprintf(stderr, "bench_select: out of memory or head dim over %d\n",
                HY_ATTN_MAX_HEAD_DIM);
        return 1;
    }
    for (size_t i = 0; i < (size_t)nb * (size_t)hd; i++)
        keys[i] = (float)(next(&s) & 0xffff) / 65536.0f - 0.5f;
    for (int r = 0; r < 5; r++) {
        double t0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID), t;

        for (int i = 0; i < reps; i++) {
            int32_t n;

            for (int j = 0; j < heads * hd; j++)
                q[j] = (float)(next(&s) & 0xffff) / 65536.0f - 0.5f;
            n = hy_sparse_select(q, hd, heads, hd, keys, (size_t)hd, nb, &sp, out, scr);
            check += out[n / 2];
            chosen += n;
        }
        t = (bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - t0) / reps;
        best = t < best ? t : best;
    }
    /* the check sum: the same choices give the same number on any build */
    printf("blocks %d head dim %d top-%d top-p %g (at most %d) heads %d: %.2f us per choice, "
           "%.1f blocks (check %ld)\n", nb, hd, k, (double)topp, cap, heads, best * 1e6,
           (double)chosen / (5.0 * reps), check);
    free(keys);
    free(q);
    free(scr);
    free(out);
    return 0;
}
