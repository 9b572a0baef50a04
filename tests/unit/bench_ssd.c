/*
 * bench_ssd.c - prefill speed of the CPU ssd op: the chunked SSD form
 * (chunk 32/64/128) against the token-by-token recurrent form (chunk 1)
 * for one 4096-token sequence of a Mamba-2 layer with n_head 64,
 * head_dim 64, d_state 128, n_group 1 (Granite-4.0-H / Nemotron-H sizes).
 * Not a test: run tests/unit/bench_ssd [threads] [tokens] by hand.
 */
#include "backend/backend.h"
#include "backend/cpu/ssd.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const int H = 64, P = 64, N = 128, G = 1;
    const int T = argc > 2 ? atoi(argv[2]) : 4096;
    const int stride = H * P + 2 * G * N + H;
    hy_backend_opts_t opts = {.n_threads = argc > 1 ? atoi(argv[1]) : 0};
    hy_backend_t *be;
    char err[HY_ERR_LEN];
    int64_t conv = 0, rec = (int64_t)H * P * N;
    hy_state_layout_t lay = {1, 1, &conv, &rec};
    float *rows = malloc(sizeof(float) * (size_t)T * stride), *y = malloc(sizeof(float) * (size_t)T * H * P);
    float A[64], D[64], bias[64];
    hy_weight_t wA = {.type = HY_DTYPE_F32, .ne = {1, 64, 1, 1}, .row_bytes = 4, .data = A},
                wD = {.type = HY_DTYPE_F32, .ne = {1, 64, 1, 1}, .row_bytes = 4, .data = D},
                wb = {.type = HY_DTYPE_F32, .ne = {64, 1, 1, 1}, .row_bytes = 256, .data = bias};
    hy_batch_seq_t sq = {.first = 0, .n = T, .state_slot = 0};
    hy_batch_t b = {.n_tokens = T, .n_seqs = 1, .seqs = &sq};
    static const int chunks[] = {1, 32, 64, 128};
    double t_rec = 0;

    if (hy_backend_cpu_new(&be, &opts, err) != HY_OK || be->i->state_init(be, &lay, err) != HY_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    srand(1);
    for (size_t i = 0; i < (size_t)T * stride; i++)
        rows[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int h = 0; h < H; h++) {
        A[h] = -1.0f - h / 64.0f;
        D[h] = 1.0f;
        bias[h] = -2.0f;
    }
    printf("ssd prefill: %d tokens, n_head %d, head_dim %d, d_state %d, n_group %d, isa %d\n", T, H,
           P, N, G, (int)hy_cpu_isa());
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        hy_ssd_params_t p = {H, P, G, N, chunks[c]};
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0;
            be->i->state_clear(be, 0);
            t0 = now();
            be->i->ssd(be, 0, &b, rows, stride, rows + H * P + 2 * G * N, stride, &wb, &wA,
                       rows + H * P, rows + H * P + G * N, stride, &wD, y, &p);
            t0 = now() - t0;
            if (t0 < best)
                best = t0;
        }
        if (chunks[c] == 1)
            t_rec = best;
        printf("chunk %3d: %8.1f ms  %8.0f tok/s  (%.2fx token-by-token)\n", chunks[c], best * 1e3,
               T / best, t_rec / best);
    }
    if (be->i->status(be, err) != HY_OK)
        fprintf(stderr, "%s\n", err);
    be->i->free(be);
    free(rows);
    free(y);
    return 0;
}
