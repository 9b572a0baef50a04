/*
 * bench_ssd.c - speed of the CPU ssd op on one sequence of a Mamba-2 layer
 * with n_head 64, head_dim 64, d_state 128, n_group 1 (Granite-4.0-H /
 * Nemotron-H sizes): a prefill in one call (the block form, chunk
 * 32/64/128, against the token-by-token recurrence, chunk 1) and a decode
 * of the same tokens one call per token.  Times are process CPU time
 * (robust to a loaded machine; with one thread, the work itself), the best
 * of 3.  Not a test: run tests/unit/bench_ssd [threads=1] [tokens=4096] [chunk] by
 * hand (chunk: only that one, e.g. for instruction counts under callgrind).
 */
#include "backend/backend.h"
#include "backend/cpu/ssd.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { H = 64, P = 64, N = 128, G = 1, STRIDE = H * P + 2 * G * N + H };

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    hy_backend_t *be;
    const float *rows;
    float *y;
    hy_weight_t wA, wD, wb;
    int T;
} bench_t;

/* Best CPU seconds of 3 runs of the T tokens: in one call, or one call per token. */
static double run(bench_t *w, int chunk, bool decode, char *err)
{
    hy_ssd_params_t p = {H, P, G, N, chunk};
    int64_t conv = 0, rec = hy_ssd_state_floats(&p);
    hy_state_layout_t lay = {1, 1, &conv, &rec};
    double best = 1e30;

    if (w->be->i->state_init(w->be, &lay, err) != HY_OK)
        return -1;
    for (int rep = 0; rep < 3; rep++) {
        double t0;

        w->be->i->state_clear(w->be, 0);
        t0 = cpu_now();
        for (int t = 0; t < w->T; t += decode ? 1 : w->T) {
            const int n = decode ? 1 : w->T;
            hy_batch_seq_t sq = {.first = 0, .n = n, .n_past = t, .state_slot = 0};
            hy_batch_t b = {.n_tokens = n, .n_seqs = 1, .seqs = &sq};
            const float *r = w->rows + (size_t)t * STRIDE;

            w->be->i->ssd(w->be, 0, &b, r, STRIDE, r + H * P + 2 * G * N, STRIDE, &w->wb, &w->wA,
                          r + H * P, r + H * P + G * N, STRIDE, &w->wD,
                          w->y + (size_t)t * H * P, &p);
        }
        t0 = cpu_now() - t0;
        if (t0 < best)
            best = t0;
    }
    return w->be->i->status(w->be, err) == HY_OK ? best : -1;
}

int main(int argc, char **argv)
{
    const int T = argc > 2 ? atoi(argv[2]) : 4096;
    hy_backend_opts_t opts = {.n_threads = argc > 1 ? atoi(argv[1]) : 1};
    char err[HY_ERR_LEN];
    float *rows = malloc(sizeof(float) * (size_t)T * STRIDE);
    float A[H], D[H], bias[H];
    bench_t w = {.rows = rows, .y = malloc(sizeof(float) * (size_t)T * H * P), .T = T};
    static const int chunks[] = {1, 32, 64, 128};
    double t_rec = 0;

    w.wA = (hy_weight_t){.type = HY_DTYPE_F32, .ne = {1, H, 1, 1}, .row_bytes = 4, .data = A};
    w.wD = (hy_weight_t){.type = HY_DTYPE_F32, .ne = {1, H, 1, 1}, .row_bytes = 4, .data = D};
    w.wb = (hy_weight_t){.type = HY_DTYPE_F32, .ne = {H, 1, 1, 1}, .row_bytes = 4 * H, .data = bias};
    if (hy_backend_cpu_new(&w.be, &opts, err) != HY_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    srand(1);
    for (size_t i = 0; i < (size_t)T * STRIDE; i++)
        rows[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int h = 0; h < H; h++) {
        A[h] = -1.0f - h / 64.0f;
        D[h] = 1.0f;
        bias[h] = -2.0f;
    }
    printf("ssd: %d tokens, n_head %d, head_dim %d, d_state %d, n_group %d, isa %d, %d thread(s), CPU time\n",
           T, H, P, N, G, (int)hy_cpu_isa(), opts.n_threads);
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        if (argc > 3 && chunks[c] != atoi(argv[3]))
            continue;
        double pre = run(&w, chunks[c], false, err), dec = run(&w, chunks[c], true, err);

        if (pre < 0 || dec < 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        if (chunks[c] == 1)
            t_rec = pre;
        printf("chunk %3d: prefill %8.1f ms  %8.0f tok/s  (%.2fx token-by-token); decode %8.1f us/token\n",
               chunks[c], pre * 1e3, T / pre, t_rec / pre, dec * 1e6 / T);
    }
    w.be->i->free(w.be);
    free(rows);
    free(w.y);
    return 0;
}
