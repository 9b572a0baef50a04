/*
 * bench_cpu.c - times the CPU backend's matmul on SmolLM2-135M shapes for
 * decode (1 token) and prefill (512 tokens) with 1 and 2 threads, printing
 * GFLOP/s and weight GB/s; and paged attention for a 512-token prompt.
 * Built by `make check`, not run by it:
 *   tests/unit/bench_cpu [type=q8_0] [max_threads=2]
 */
#include "backend/backend.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Process CPU time: on a loaded machine wall time mostly measures the
 * queue; with one thread, CPU time is the op's own cost. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static hy_dtype_t parse_type(const char *s)
{
    for (uint32_t t = 0; t < HY_DTYPE_COUNT; t++) {
        const hy_dtype_info_t *i = hy_dtype_info(t);
        if (i && i->name && strcmp(i->name, s) == 0)
            return (hy_dtype_t)t;
    }
    return HY_DTYPE_COUNT;
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
    hy_dtype_t wt = argc > 1 ? parse_type(argv[1]) : HY_DTYPE_Q8_0;
    int max_threads = argc > 2 ? atoi(argv[2]) : 2;
    char err[HY_ERR_LEN];

    if (wt == HY_DTYPE_COUNT || !hy_quant_traits(wt)) {
        fprintf(stderr, "bench_cpu: unknown or unsupported type %s\n", argv[1]);
        return 2;
    }
    printf("isa %s\n", hy_isa_name(hy_cpu_isa()));
    for (int nth = 1; nth <= max_threads; nth++) {
        hy_backend_t *be;
        hy_backend_opts_t o = {nth};
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
            hy_weight_t wt2 = {t, {in, out, 1, 1}, rb, w, NULL, shapes[s].what};
            for (int n_tok = 1; n_tok <= 512; n_tok *= 512) {
                double t0, c0, dt, dc;
                int reps = 0;
                be->i->matmul(be, &wt2, x, y, n_tok); /* warm */
                t0 = now_s();
                c0 = cpu_s();
                do {
                    be->i->matmul(be, &wt2, x, y, n_tok);
                    reps++;
                } while ((dt = now_s() - t0) < 0.3);
                dt /= reps;
                dc = (cpu_s() - c0) / reps / nth;
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
            hy_kv_layout_t lay = {1, 3, 64, 64, 16, 64, HY_DTYPE_F16};
            int n = 512;
            float *q = malloc((size_t)n * 9 * 64 * sizeof(float));
            float *k = malloc((size_t)n * 3 * 64 * sizeof(float));
            float *v = malloc((size_t)n * 3 * 64 * sizeof(float));
            float *o = malloc((size_t)n * 9 * 64 * sizeof(float));
            int32_t pos[512], pages[64];
            for (int i = 0; i < n; i++)
                pos[i] = i;
            for (int i = 0; i < 64; i++)
                pages[i] = 63 - i;
            for (size_t i = 0; i < (size_t)n * 9 * 64; i++)
                q[i] = (float)(i % 13) / 13.0f - 0.5f;
            for (size_t i = 0; i < (size_t)n * 3 * 64; i++)
                k[i] = v[i] = (float)(i % 11) / 11.0f - 0.5f;
            hy_batch_seq_t sq = {0, n, 0, pages, 64, -1};
            hy_batch_t b = {n, NULL, pos, 1, &sq};
            hy_attn_params_t p = {9, 3, 64, 64, 0.125f, 0, 0};
            if (be->i->kv_init(be, &lay, err) == HY_OK) {
                double t0 = now_s(), dt;
                int reps = 0;
                do {
                    be->i->attention(be, 0, &b, q, k, v, o, &p);
                    reps++;
                } while ((dt = now_s() - t0) < 0.3);
                dt /= reps;
                printf("threads %d attention f16 prefill 512 tokens, 9/3 heads: %8.1f us "
                       "(%.1f GFLOP/s)\n", nth, dt * 1e6,
                       4.0 * 9 * 64 * (512.0 * 513 / 2) / dt * 1e-9);
                /* decode: one more token over a 511-token history */
                hy_batch_seq_t sd = {0, 1, 511, pages, 64, -1};
                int32_t pd = 511;
                hy_batch_t bd = {1, NULL, &pd, 1, &sd};
                t0 = now_s();
                reps = 0;
                do {
                    be->i->attention(be, 0, &bd, q, k, v, o, &p);
                    reps++;
                } while ((dt = now_s() - t0) < 0.3);
                printf("threads %d attention f16 decode at 512: %8.1f us\n", nth,
                       dt / reps * 1e6);
            }
            free(q);
            free(k);
            free(v);
            free(o);
        }
        be->i->free(be);
    }
    return 0;
}
