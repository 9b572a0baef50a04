/*
 * bench_quant.c - micro-benchmark of the Q4_1 x Q8_1 kernels on the
 * SmolLM2-135M FFN-up shape (1536 rows of 576): GB/s of weight data streamed
 * per ISA level, for one activation row (vec_dot per row) and for 4 rows
 * (tile), timed in thread CPU time.  Built by `make check` but not run as a test:
 * ./tests/unit/bench_quant [seconds-per-case]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/cpu/quant.h"
#include "backend/cpu/quant_ref.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* the CI box is shared */
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    enum { K = 576, M = 1536, NX = 4 };
    double secs = argc > 1 ? atof(argv[1]) : 0.3;
    hy_dtype_t types[] = {HY_DTYPE_Q4_1, HY_DTYPE_Q4_0, HY_DTYPE_Q8_0};
    float *xf = malloc(sizeof(float) * K * NX), *wf = malloc(sizeof(float) * K);
    float *out = malloc(sizeof(float) * M * NX);

    for (int i = 0; i < K * NX; i++)
        xf[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    for (int i = 0; i < K; i++)
        wf[i] = (float)((i * 104729) % 997) / 498.0f - 1.0f;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        hy_dtype_t t = types[ti];
        size_t wb = hy_dtype_row_bytes(t, K);
        unsigned char *w = malloc(wb * M);
        for (int r = 0; r < M; r++)
            hy_quant_quantize_row(t, wf, w + r * wb, K);
        for (int isa = HY_ISA_SCALAR; isa <= HY_ISA_AVX512; isa++) {
            if (hy_quant_set_isa((hy_isa_t)isa) != HY_OK)
                continue;
            const hy_quant_traits_t *tr = hy_quant_traits(t);
            hy_quant_tile_fn_t tile = hy_quant_vec_dot_tile(t);
            size_t xb = hy_dtype_row_bytes(tr->vec_dot_type, K);
            unsigned char *x = malloc(xb * NX);
            for (int c = 0; c < NX; c++)
                tr->from_float(xf + c * K, x + c * xb, K);
            for (int mode = 0; mode < 2; mode++) {
                long iters = 0;
                double t0 = now(), el;
                do {
                    if (mode == 0)
                        for (int r = 0; r < M; r++)
                            tr->vec_dot(K, out + r, w + r * wb, x);
                    else
                        tile(K, out, M, w, wb, M, x, xb, NX);
                    iters++;
                    el = now() - t0;
                } while (el < secs);
                printf("%-5s %-7s %s: %7.2f GB/s weights, %8.1f us/matmul\n",
                       hy_dtype_info(t)->name, hy_isa_name((hy_isa_t)isa),
                       mode == 0 ? "1 row (vec_dot)" : "4 rows (tile)  ",
                       (double)wb * M * iters / el / 1e9, el / iters * 1e6);
            }
            free(x);
        }
        free(w);
    }
    free(xf);
    free(wf);
    free(out);
    return 0;
}
