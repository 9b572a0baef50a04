/*
 * cpu_test.h - what the CPU backend's tests share: a seeded xorshift
 * generator (each program sets HY_TEST_SEED before the include, so a
 * failure replays) and a CPU backend with a given thread count.  Static
 * inline: include once per test program, after test.h.
 */
#ifndef HY_CPU_TEST_H
#define HY_CPU_TEST_H

#include "backend/backend.h"

#include <stdint.h>
#include <stdio.h>

#ifndef HY_TEST_SEED
#define HY_TEST_SEED 0x2545F4914F6CDD1DULL
#endif

static uint64_t rng_state = HY_TEST_SEED;

static inline uint32_t rng_u32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* uniform in [-a, a] */
static inline float rng_f(float a)
{
    return ((float)(rng_u32() & 0xFFFFFF) / 16777215.0f * 2.0f - 1.0f) * a;
}

static inline void fill(float *x, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rng_f(a);
}

/* NULL (and the reason printed as a TAP comment) if it cannot be made. */
static inline hy_backend_t *new_backend(int threads)
{
    hy_backend_t *be = NULL;
    hy_backend_opts_t o = {.n_threads = threads};
    char err[HY_ERR_LEN];

    if (hy_backend_cpu_new(&be, &o, err) != HY_OK) {
        printf("# backend: %s\n", err);
        return NULL;
    }
    return be;
}

#endif
