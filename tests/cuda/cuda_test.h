/*
 * cuda_test.h - what the CUDA test programs share: a seeded xorshift
 * generator (each program picks its seed, so a failure replays), the
 * relative RMS error every comparison with the CPU backend reports, and the
 * check that neither backend recorded an error.  Static functions: one
 * include per test program.
 */
#ifndef HY_CUDA_TEST_H
#define HY_CUDA_TEST_H

#include "backend/backend.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

#endif
