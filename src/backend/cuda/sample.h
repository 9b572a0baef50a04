/*
 * sample.h - what the device sampler (kernels/hy_sample.cu) and its plain-C
 * reference (sample_ref.c) share: the stateless uniform of one draw and the
 * float ordering key both use for thresholds.  The reference defines the
 * semantics the kernel must reproduce (backend.h, hy_sample_params_t); its
 * own test checks it against engine/sampler.c's distribution on the CPU.
 */
#ifndef HY_CUDA_SAMPLE_H
#define HY_CUDA_SAMPLE_H

#include <stdint.h>

#ifdef __CUDACC__
#define HY_SAMPLE_HD __host__ __device__
#else
#define HY_SAMPLE_HD
#endif

static inline HY_SAMPLE_HD uint64_t hy_sample_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform double in [0, 1) for draw `counter` of a request seeded `seed`:
 * splitmix64's finaliser over both, so a draw needs no state carried from
 * the previous one and the host and the device agree bit for bit. */
static inline HY_SAMPLE_HD double hy_sample_uniform(uint64_t seed, uint64_t counter)
{
    uint64_t z = hy_sample_mix(seed + 0x9E3779B97F4A7C15ull) ^
                 hy_sample_mix(counter * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull);

    return (double)(hy_sample_mix(z) >> 11) * (1.0 / 9007199254740992.0);
}

/* Order-preserving map of a float's bits to uint32 (-inf lowest, +inf
 * highest; NaN never reaches it). */
static inline HY_SAMPLE_HD uint32_t hy_sample_key(uint32_t bits)
{
    return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

#ifndef __CUDACC__
#include "backend/backend.h"

/* Checks p's fields (the ranges engine/sampler.c allows); message in err. */
int hy_sample_params_check(const hy_sample_params_t *p, char *err);

/* Samples one row on the host exactly as the device sampler does: top_k,
 * top_p over the sorted best-first order, min_p, then a draw in vocabulary
 * order.  HY_OK (res->token -1 for a row with NaN or an infinite maximum),
 * HY_ERANGE for bad parameters, HY_ENOMEM. */
int hy_sample_ref(const float *logits, int32_t n_vocab, const hy_sample_params_t *p,
                  hy_sample_result_t *res, char *err);
#endif

#endif
