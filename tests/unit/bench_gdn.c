/*
 * bench_gdn.c - speed of the CPU gdn op on one sequence: a prefill in one
 * call (the block form, chunk 64, against the token-by-token recurrence,
 * chunk 1) and a decode of the same tokens one call per token (the block
 * form's decode reprocesses its block's earlier rows; the recurrence does
 * not).  Times are process CPU time (robust to a loaded machine; with one
 * thread, the work itself), the best of 3.  Not a test; run by hand:
 *   tests/unit/bench_gdn [tokens=4096] [heads=16] [d=128] [threads=1] [chunk]
 * (chunk 64 or 1: only that form, e.g. for instruction counts under callgrind).
 */
#include "backend/backend.h"
#include "backend/layout.h"
#include "test.h"

#include <math.h>
#include <string.h>
#include <time.h>

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    hy_backend_t *be;
    const float *x, *g, *b;
    float *out;
    int T, H, d;
    int64_t stride;
} bench_t;

/* CPU seconds of the T tokens through the op: in one call, or one call per token. */
static double run(const bench_t *w, int chunk, bool decode, char *err)
{
    const int64_t hd = (int64_t)w->H * w->d;
    hy_gdn_params_t p = {w->H, w->H, w->d, w->d, false, chunk};
    int64_t rec = hy_gdn_state_floats(&p), conv = 0;
    hy_state_layout_t lay = {1, 1, &conv, &rec};
    double t0;

    if (w->be->i->state_init(w->be, &lay, err) != HY_OK)
        return -1;
    w->be->i->state_clear(w->be, 0);
    t0 = cpu_now();
    for (int t = 0; t < w->T; t += decode ? 1 : w->T) {
        const int n = decode ? 1 : w->T;
        hy_batch_seq_t sq = {0, n, t, NULL, 0, 0, NULL, 0, NULL, 0, 0, 0, NULL, NULL};
        hy_batch_t batch = {n, NULL, NULL, 1, &sq};
        const float *x = w->x + (int64_t)t * w->stride;

        w->be->i->gdn(w->be, 0, &batch, x, x + hd, x + 2 * hd, (int32_t)w->stride,
                      w->g + (int64_t)t * w->H, w->b + (int64_t)t * w->H,
                      w->out + (int64_t)t * hd, &p);
    }
    t0 = cpu_now() - t0;
    return w->be->i->status(w->be, err) == HY_OK ? t0 : -1;
}

int main(int argc, char **argv)
{
    const int T = argc > 1 ? atoi(argv[1]) : 4096, H = argc > 2 ? atoi(argv[2]) : 16,
              d = argc > 3 ? atoi(argv[3]) : 128, thr = argc > 4 ? atoi(argv[4]) : 1,
              only = argc > 5 ? atoi(argv[5]) : 0;
    const int64_t stride = 3 * (int64_t)H * d;
    hy_backend_opts_t o = {.n_threads = thr};
    char err[HY_ERR_LEN];
    bench_t w = {NULL, NULL, NULL, NULL, NULL, T, H, d, stride};
    float *x = malloc(sizeof(float) * (size_t)T * stride), *g = malloc(sizeof(float) * (size_t)T * H),
          *b = malloc(sizeof(float) * (size_t)T * H);
    double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}};
    uint32_t s = 12345;

    w.out = malloc(sizeof(float) * (size_t)T * H * d);
    if (hy_backend_cpu_new(&w.be, &o, err) != HY_OK) {
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
    w.x = x;
    w.g = g;
    w.b = b;
    for (int rep = 0; rep < 3; rep++)
        for (int form = 0; form < 2; form++)
            for (int dec = 0; dec < 2 && (only == 0 || only == (form == 0 ? 64 : 1)); dec++) {
                double t = run(&w, form == 0 ? 64 : 1, dec == 1, err);
                if (t < 0) {
                    fprintf(stderr, "%s\n", err);
                    return 1;
                }
                best[form][dec] = fmin(best[form][dec], t);
            }
    printf("gdn, %d tokens, %d heads, d_k = d_v = %d, %d thread(s), CPU time:\n", T, H, d, thr);
    printf("  prefill, block form (64):  %8.2f ms  %8.0f tokens/s\n", best[0][0] * 1e3,
           T / best[0][0]);
    printf("  prefill, recurrent (1):    %8.2f ms  %8.0f tokens/s\n", best[1][0] * 1e3,
           T / best[1][0]);
    printf("  decode, block form (64):   %8.2f us/token\n", best[0][1] * 1e6 / T);
    printf("  decode, recurrent (1):     %8.2f us/token\n", best[1][1] * 1e6 / T);
    w.be->i->free(w.be);
    free(x);
    free(g);
    free(b);
    free(w.out);
    return 0;
}
