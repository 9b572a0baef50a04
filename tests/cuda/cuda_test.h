/*
 * cuda_test.h - what the CUDA test programs share: a seeded xorshift
 * generator (each program picks its seed, so a failure replays), the
 * relative RMS error every comparison with the CPU backend reports, the
 * check that neither backend recorded an error, and buffers and weights
 * held on both backends.  Static functions: one
 * include per test program.
 */
#ifndef HY_CUDA_TEST_H
#define HY_CUDA_TEST_H

#include "backend/backend.h"
#include "backend/cpu/quant.h"
#include "common/dtype.h"
#include "../unit/quant_fill.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef HY_CT_SEED
#define HY_CT_SEED 0x9E3779B97F4A7C15ull
#endif

static uint64_t g_rng = HY_CT_SEED;

/* uniform in [-1, 1) */
static inline float rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static inline float *rnd_vec(size_t n, float scale)
{
    float *v = malloc(sizeof(float) * (n ? n : 1));

    for (size_t i = 0; v != NULL && i < n; i++)
        v[i] = rnd() * scale;
    return v;
}

/* Relative RMS error of a against reference b; INFINITY on any NaN/inf. */
static inline double rel_err(const float *a, const float *b, size_t n)
{
    double e = 0, r = 0;

    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i]))
            return INFINITY;
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(e / r) : sqrt(e);
}

/* Both backends error-free (hy_backend_i.status); prints what each said. */
static inline bool hy_ct_both_ok(hy_backend_t *cpu, hy_backend_t *gpu, const char *what)
{
    char err[HY_ERR_LEN];
    int a = cpu->i->status(cpu, err), b;

    if (a != HY_OK)
        fprintf(stderr, "# %s: cpu: %s\n", what, err);
    b = gpu->i->status(gpu, err);
    if (b != HY_OK)
        fprintf(stderr, "# %s: gpu: %s\n", what, err);
    return a == HY_OK && b == HY_OK;
}

/* ---- buffers and weights on both backends (g_cpu, g_gpu set by main) ---- */

static hy_backend_t *g_cpu __attribute__((unused)), *g_gpu __attribute__((unused));

typedef struct {
    float *c, *g; /* cpu, gpu */
    size_t n;
} pair_t;

/* n floats on both backends, from init or zeros. */
static inline pair_t pair_new(const float *init, size_t n)
{
    pair_t p = {g_cpu->i->alloc(g_cpu, n), g_gpu->i->alloc(g_gpu, n), n};
    float *z = init ? NULL : calloc(n ? n : 1, sizeof(float));

    memcpy(p.c, init ? init : z, sizeof(float) * n);
    g_gpu->i->upload(g_gpu, p.g, init ? init : z, n);
    free(z);
    return p;
}

static inline void pair_free(pair_t *p)
{
    g_cpu->i->release(g_cpu, p->c);
    g_gpu->i->release(g_gpu, p->g);
}

/* Relative error of the GPU copy against the CPU copy (n floats from off). */
static inline double pair_err(const pair_t *p, size_t off, size_t n)
{
    float *h = malloc(sizeof(float) * (n ? n : 1));
    double e;

    g_gpu->i->download(g_gpu, h, p->g + off, n);
    e = rel_err(h, p->c + off, n);
    free(h);
    return e;
}

static inline bool both_ok(const char *what)
{
    return hy_ct_both_ok(g_cpu, g_gpu, what);
}

/* A weight on both backends from host data (the data outlives the weight). */
typedef struct {
    hy_weight_t c, g;
    void *data;
} wpair_t;

static inline wpair_t wpair_new(hy_dtype_t type, int64_t ne0, int64_t ne1, int64_t ne2,
                                void *data)
{
    wpair_t w;
    char err[HY_ERR_LEN];

    memset(&w, 0, sizeof w);
    w.c.type = type;
    w.c.ne[0] = ne0;
    w.c.ne[1] = ne1;
    w.c.ne[2] = ne2;
    w.c.ne[3] = 1;
    w.c.row_bytes = hy_dtype_row_bytes(type, ne0);
    w.c.data = data;
    w.c.name = "test";
    w.g = w.c;
    w.data = data;
    if (g_cpu->i->weight_init(g_cpu, &w.c, err) != HY_OK ||
        g_gpu->i->weight_init(g_gpu, &w.g, err) != HY_OK)
        fprintf(stderr, "# weight_init: %s\n", err);
    return w;
}

/* Random but well-formed rows of a block type: random quant bytes, sane
 * f16 scales; float types get rnd() * fscale. */
static inline void *rnd_weight_s(hy_dtype_t t, int64_t ne0, int64_t rows, float fscale)
{
    const hy_dtype_info_t *ti = hy_dtype_info(t);
    size_t rb = hy_dtype_row_bytes(t, ne0), nb = rb / ti->block_bytes;
    uint8_t *d = malloc(rb * (size_t)rows);

    for (size_t i = 0; i < rb * (size_t)rows; i++)
        d[i] = (uint8_t)(rnd() * 128 + 128);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = d + (size_t)r * rb;
        for (size_t b = 0; b < nb; b++) {
            uint8_t *blk = row + b * ti->block_bytes;
            uint16_t h1 = hy_f32_to_f16(0.01f + 0.02f * fabsf(rnd()));
            uint16_t h2 = hy_f32_to_f16(0.01f * rnd());
            switch (t) {
            case HY_DTYPE_F32: ((float *)row)[b] = rnd() * fscale; break;
            case HY_DTYPE_F16: ((uint16_t *)row)[b] = hy_f32_to_f16(rnd() * fscale); break;
            case HY_DTYPE_BF16: ((uint16_t *)row)[b] = hy_f32_to_bf16(rnd() * fscale); break;
            default:
                hy_test_block_factors(t, blk, hy_f16_to_f32(h1), hy_f16_to_f32(h2));
                break;
            }
        }
    }
    return d;
}

#endif
