/*
 * lightning_kern_avx2.c - the lightning-attention kernel (lightning_kern.h)
 * with 8-lane AVX2 vectors.  The target is "avx2" without "fma" on purpose:
 * no multiply-add may be fused, so every lane rounds as the generic build
 * does (backend/lightning.h's arithmetic, bit for bit).  lightning.c calls
 * it only when the CPU has AVX2.
 */
#include "backend/cpu/lightning.h"

#if defined(__x86_64__) && HY_BUILD_AVX2
#pragma GCC push_options
#pragma GCC target("avx2")
#include <immintrin.h>

#define HY_LK_W 8
typedef __m256 hy_lk_v;
#define HY_LK_PRIM __attribute__((always_inline)) static inline
HY_LK_PRIM hy_lk_v hy_lk_zero(void) { return _mm256_setzero_ps(); }
HY_LK_PRIM hy_lk_v hy_lk_load(const float *p) { return _mm256_loadu_ps(p); }
HY_LK_PRIM void hy_lk_store(float *p, hy_lk_v v) { _mm256_storeu_ps(p, v); }
HY_LK_PRIM hy_lk_v hy_lk_set1(float x) { return _mm256_set1_ps(x); }
HY_LK_PRIM hy_lk_v hy_lk_add(hy_lk_v a, hy_lk_v b) { return _mm256_add_ps(a, b); }
HY_LK_PRIM hy_lk_v hy_lk_mul(hy_lk_v a, hy_lk_v b) { return _mm256_mul_ps(a, b); }

#define HY_LK_WORKER hy_lightning_worker_avx2
#include "backend/cpu/lightning_kern.h"

#pragma GCC pop_options
#endif
