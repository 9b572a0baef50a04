/*
 * bench_cpu.c - times the CPU backend's matmul on SmolLM2-135M shapes for
 * decode (1 token) and prefill (512 tokens) with 1 and 2 threads, printing
 * GFLOP/s and weight GB/s; and paged attention for a 512-token prompt.
 * Built by `make check`, not run by it:
 *   tests/unit/bench_cpu [type=q8_0] [max_threads=2]
 *   tests/unit/bench_cpu decode [rounds=7]   (share of the memory bound)
 */
#include "backend/backend.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_ref.h"
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* `bench_cpu decode [rounds]`: one token through every matrix of
 * SmolLM2-135M in layer order (30 x q,k,v,o,gate,up,down in Q4_1, then the
 * 49152 x 576 Q8_0 output: 96.6 MB, each in its own buffer as in the mmap),
 * 1 thread, process CPU time; alternated with a plain read of the same
 * buffers in the same order (64-bit adds as `hyserve bench --membw` does,
 * and 64-byte loads, which read faster here).  The ratio is the share of the memory bound
 * the matmuls reach, measured the same way on the same bytes. */
static int bench_decode(int rounds)
{
    static const struct { int in, out; } lay[] = {
        {576, 576}, {576, 192}, {576, 192}, {576, 576}, {576, 1536}, {576, 1536}, {1536, 576}};
    enum { N_LAYER = 30, N_MAT = N_LAYER * 7 + 1 };
    hy_weight_t *ws = calloc(N_MAT, sizeof *ws);
    float *x = calloc(1536, sizeof(float)), *y = calloc(49152, sizeof(float));
    double *mm = calloc((size_t)rounds, sizeof(double)), *rd = calloc((size_t)rounds, sizeof(double));
    double *ratio = calloc((size_t)rounds, sizeof(double));
    double *rd5 = calloc((size_t)rounds, sizeof(double)), *ratio5 = calloc((size_t)rounds, sizeof(double));
    int wide = 0;
    hy_backend_t *be;
    hy_backend_opts_t o = {.n_threads = 1};
    char err[HY_ERR_LEN];
    size_t total = 0;
    uint64_t sink = 0;

    if (!ws || !x || !y || !mm || !rd || !ratio || hy_backend_cpu_new(&be, &o, err) != HY_OK) {
        fprintf(stderr, "bench_cpu: setup failed\n");
        return 1;
    }
    for (int i = 0; i < 1536; i++)
        x[i] = (float)(i % 97) / 48.0f - 1.0f;
    for (int m = 0; m < N_MAT; m++) {
        int last = m == N_MAT - 1;
        hy_dtype_t t = last ? HY_DTYPE_Q8_0 : HY_DTYPE_Q4_1;
        int in = last ? 576 : lay[m % 7].in, out = last ? 49152 : lay[m % 7].out;
        size_t rb = hy_dtype_row_bytes(t, in);
        uint8_t *w = malloc(rb * out);
        float row[1536];
        if (!w) {
            fprintf(stderr, "bench_cpu: out of memory\n");
            return 1;
        }
        for (int r = 0; r < out; r++) {
            for (int i = 0; i < in; i++)
                row[i] = (float)((r * 31 + i * 17 + m) % 101) / 50.0f - 1.0f;
            hy_quant_quantize_row(t, row, w + (size_t)r * rb, in);
        }
        ws[m] = (hy_weight_t){t, {in, out, 1, 1}, rb, w, NULL, "decode", HY_WLAYOUT_ROWS};
        total += rb * out;
    }
    for (int k = 0; k < rounds; k++) {
        double c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
        for (int m = 0; m < N_MAT; m++)
            be->i->matmul(be, &ws[m], x, y, 1);
        mm[k] = total / (bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / 1e9;
        c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
        for (int m = 0; m < N_MAT; m++) {
            const uint64_t *p = ws[m].data;
            size_t n = ws[m].row_bytes * (size_t)ws[m].ne[1] / 8;
            uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (size_t i = 0; i + 4 <= n; i += 4) {
                s0 += p[i];
                s1 += p[i + 1];
                s2 += p[i + 2];
                s3 += p[i + 3];
            }
            sink += s0 + s1 + s2 + s3;
        }
        rd[k] = total / (bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / 1e9;
        ratio[k] = mm[k] / rd[k];
#ifdef HAVE_READ_AVX512
        if ((wide = __builtin_cpu_supports("avx512f"))) {
            c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
            for (int m = 0; m < N_MAT; m++)
                sink += bench_read_avx512(ws[m].data, ws[m].row_bytes * (size_t)ws[m].ne[1]);
            rd5[k] = total / (bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / 1e9;
            ratio5[k] = mm[k] / rd5[k];
        }
#endif
    }
    qsort(rd5, (size_t)rounds, sizeof(double), bench_cmp_double);
    qsort(ratio5, (size_t)rounds, sizeof(double), bench_cmp_double);
    qsort(mm, (size_t)rounds, sizeof(double), bench_cmp_double);
    qsort(rd, (size_t)rounds, sizeof(double), bench_cmp_double);
    qsort(ratio, (size_t)rounds, sizeof(double), bench_cmp_double);
    printf("decode %.1f MB, 1 thread, isa %s: matmuls %.2f GB/s = %.1f tok/s, read %.2f GB/s, "
           "ratio %.0f%% (medians of %d alternated rounds, CPU time; sink %d)\n",
           total / 1e6, hy_isa_name(hy_cpu_isa()), mm[rounds / 2], mm[rounds / 2] * 1e9 / total,
           rd[rounds / 2], 100.0 * ratio[rounds / 2], rounds, (int)(sink & 1));
    if (wide)
        printf("  against a read with 64-byte loads: %.2f GB/s, ratio %.0f%%\n",
               rd5[rounds / 2], 100.0 * ratio5[rounds / 2]);
    for (int m = 0; m < N_MAT; m++)
        free((void *)ws[m].data);
    free(ws); free(x); free(y); free(mm); free(rd); free(ratio); free(rd5); free(ratio5);
    be->i->free(be);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct { int in, out; hy_dtype_t type; const char *what; } shapes[] = {
        {576, 1536, HY_DTYPE_COUNT, "ffn up/gate"},
        {1536, 576, HY_DTYPE_COUNT, "ffn down"},
        {576, 576, HY_DTYPE_COUNT, "attn q/o"},
        {576, 192, HY_DTYPE_COUNT, "attn k/v"},
        {576, 49152, HY_DTYPE_Q8_0, "output"},
    };
    if (argc > 1 && strcmp(argv[1], "decode") == 0)
        return bench_decode(argc > 2 && atoi(argv[2]) > 0 ? atoi(argv[2]) : 7);
    hy_dtype_t wt = argc > 1 ? bench_parse_type(argv[1]) : HY_DTYPE_Q8_0;
    int max_threads = argc > 2 ? atoi(argv[2]) : 2;
    char err[HY_ERR_LEN];

    if (wt == HY_DTYPE_COUNT || !hy_quant_traits(wt)) {
        fprintf(stderr, "bench_cpu: unknown or unsupported type %s\n", argv[1]);
        return 2;
    }
    printf("isa %s\n", hy_isa_name(hy_cpu_isa()));
    for (int nth = 1; nth <= max_threads; nth++) {
        hy_backend_t *be;
        hy_backend_opts_t o = {.n_threads = nth};
        if (hy_backend_cpu_new(&be, &o, err) != HY_OK) {
            fprintf(stderr, "bench_cpu: %s\n", err);
            return 1;
        }
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            hy_dtype_t t = shapes[s].type == HY_DTYPE_COUNT ? wt : shapes[s].type;
            int in = shapes[s].in, out = shapes[s].out;
            size_t rb = hy_dtype_row_bytes(t, in);
            uint8_t *w = malloc(rb * out);
            float *row = malloc(in * sizeof(float));
            float *x = malloc((size_t)512 * in * sizeof(float));
            float *y = malloc((size_t)512 * out * sizeof(float));
            for (int r = 0; r < out; r++) {
                for (int i = 0; i < in; i++)
                    row[i] = (float)((r * 31 + i * 17) % 101) / 50.0f - 1.0f;
                if (hy_quant_quantize_row(t, row, w + (size_t)r * rb, in) != HY_OK)
                    memset(w + (size_t)r * rb, 0x11, rb); /* no quantizer: any bytes */
            }
            for (size_t i = 0; i < (size_t)512 * in; i++)
                x[i] = (float)(i % 97) / 48.0f - 1.0f;
            hy_weight_t wt2 = {t, {in, out, 1, 1}, rb, w, NULL, shapes[s].what, HY_WLAYOUT_ROWS};
            for (int n_tok = 1; n_tok <= 512; n_tok *= 512) {
                double t0, c0, dt, dc;
                int reps = 0;
                be->i->matmul(be, &wt2, x, y, n_tok); /* warm */
                t0 = bench_clock_s(CLOCK_MONOTONIC);
                c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
                do {
                    be->i->matmul(be, &wt2, x, y, n_tok);
                    reps++;
                } while ((dt = bench_clock_s(CLOCK_MONOTONIC) - t0) < 0.3);
                dt /= reps;
                dc = (bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / reps / nth;
                printf("threads %d %-5s %5d->%-6d n_tok %3d: %9.1f us %7.1f GFLOP/s %6.1f GB/s"
                       " | cpu/thread %9.1f us %7.1f GFLOP/s %6.1f GB/s (%s)\n",
                       nth, hy_dtype_info(t)->name, in, out, n_tok, dt * 1e6,
                       2.0 * in * out * n_tok / dt * 1e-9, (double)rb * out / dt * 1e-9,
                       dc * 1e6, 2.0 * in * out * n_tok / dc * 1e-9,
                       (double)rb * out / dc * 1e-9, shapes[s].what);
            }
            free(w);
            free(row);
            free(x);
            free(y);
        }

        /* attention: one 512-token prompt, SmolLM2 heads (9 q / 3 kv, 64) */
        {
            hy_kv_layout_t lay = {1, 3, 64, 64, 16, 64, HY_DTYPE_F16, 0, NULL, {0, 0, 0, 0, 0, 0, 0}};
            int n = 512;
            float *q = malloc((size_t)n * 9 * 64 * sizeof(float));
            float *k = malloc((size_t)n * 3 * 64 * sizeof(float));
            float *v = malloc((size_t)n * 3 * 64 * sizeof(float));
            float *ao = malloc((size_t)n * 9 * 64 * sizeof(float));
            int32_t pos[512], pages[64];
            for (int i = 0; i < n; i++)
                pos[i] = i;
            for (int i = 0; i < 64; i++)
                pages[i] = 63 - i;
            for (size_t i = 0; i < (size_t)n * 9 * 64; i++)
                q[i] = (float)(i % 13) / 13.0f - 0.5f;
            for (size_t i = 0; i < (size_t)n * 3 * 64; i++)
                k[i] = v[i] = (float)(i % 11) / 11.0f - 0.5f;
            hy_batch_seq_t sq = {0, n, 0, pages, 64, -1, NULL, 0, NULL, 0, 0, 0, NULL, NULL};
            hy_batch_t b = {n, NULL, pos, 1, &sq};
            hy_attn_params_t p = {9, 3, 64, 64, 0.125f, 0, 0};
            if (be->i->kv_init(be, &lay, err) == HY_OK) {
                double t0 = bench_clock_s(CLOCK_MONOTONIC), dt;
                int reps = 0;
                do {
                    be->i->attention(be, 0, &b, q, k, v, ao, &p);
                    reps++;
                } while ((dt = bench_clock_s(CLOCK_MONOTONIC) - t0) < 0.3);
                dt /= reps;
                printf("threads %d attention f16 prefill 512 tokens, 9/3 heads: %8.1f us "
                       "(%.1f GFLOP/s)\n", nth, dt * 1e6,
                       4.0 * 9 * 64 * (512.0 * 513 / 2) / dt * 1e-9);
                /* decode: one more token over a 511-token history */
                hy_batch_seq_t sd = {0, 1, 511, pages, 64, -1, NULL, 0, NULL, 0, 0, 0, NULL, NULL};
                int32_t pd = 511;
                hy_batch_t bd = {1, NULL, &pd, 1, &sd};
                t0 = bench_clock_s(CLOCK_MONOTONIC);
                reps = 0;
                do {
                    be->i->attention(be, 0, &bd, q, k, v, ao, &p);
                    reps++;
                } while ((dt = bench_clock_s(CLOCK_MONOTONIC) - t0) < 0.3);
                printf("threads %d attention f16 decode at 512: %8.1f us\n", nth,
                       dt / reps * 1e6);
            }
            free(q);
            free(k);
            free(v);
            free(ao);
        }
        be->i->free(be);
    }
    return 0;
}
