/*
 * bench_gdn.c - prefill speed of the CPU gdn op: the chunked form (chunk
 * 64) against the token-by-token recurrence (chunk 1) on one sequence.
 * Not a test; run by hand:
 *   tests/unit/bench_gdn [tokens=4096] [heads=16] [d=128] [threads=0 (all)]
 */
#include "backend/backend.h"
#include "test.h"

#include <math.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const int T = argc > 1 ? atoi(argv[1]) : 4096, H = argc > 2 ? atoi(argv[2]) : 16,
              d = argc > 3 ? atoi(argv[3]) : 128, thr = argc > 4 ? atoi(argv[4]) : 0;
    const int64_t stride = 3 * (int64_t)H * d;
    hy_backend_opts_t o = {thr};
    hy_backend_t *be;
    char err[HY_ERR_LEN];
    int64_t rec = (int64_t)H * d * d, conv = 0;
    hy_state_layout_t lay = {1, 1, &conv, &rec};
    float *x = malloc(sizeof(float) * (size_t)T * stride), *g = malloc(sizeof(float) * (size_t)T * H),
          *b = malloc(sizeof(float) * (size_t)T * H), *out = malloc(sizeof(float) * (size_t)T * H * d);
    hy_batch_seq_t sq = {0, T, 0, NULL, 0, 0, NULL, 0};
    hy_batch_t batch = {T, NULL, NULL, 1, &sq};
    double best[2] = {1e30, 1e30};
    uint32_t s = 12345;

    if (hy_backend_cpu_new(&be, &o, err) != HY_OK || be->i->state_init(be, &lay, err) != HY_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    for (size_t i = 0; i < (size_t)T * stride; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((s >> 8) / 16777216.0f - 0.5f) * 0.2f;
    }
    for (size_t i = 0; i < (size_t)T * H; i++) {
        g[i] = -0.05f;
        b[i] = 0.5f;
    }
    for (int rep = 0; rep < 3; rep++) {
        for (int form = 0; form < 2; form++) {
            hy_gdn_params_t p = {H, H, d, d, false, form == 0 ? 64 : 1};
            double t0;

            be->i->state_clear(be, 0);
            t0 = now();
            be->i->gdn(be, 0, &batch, x, x + (int64_t)H * d, x + 2 * (int64_t)H * d, (int32_t)stride,
                       g, b, out, &p);
            best[form] = fmin(best[form], now() - t0);
            if (be->i->status(be, err) != HY_OK) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
        }
    }
    printf("gdn prefill, %d tokens, %d heads, d_k = d_v = %d:\n", T, H, d);
    printf("  chunked (64):   %8.2f ms  %8.0f tokens/s\n", best[0] * 1e3, T / best[0]);
    printf("  recurrent (1):  %8.2f ms  %8.0f tokens/s\n", best[1] * 1e3, T / best[1]);
    printf("  speed-up %.2fx\n", best[1] / best[0]);
    be->i->free(be);
    free(x);
    free(g);
    free(b);
    free(out);
    return 0;
}
