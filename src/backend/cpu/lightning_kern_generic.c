/*
 * lightning_kern_generic.c - the lightning-attention kernel
 * (lightning_kern.h) for any CPU: a "vector" of one float, so the code is
 * plain scalar C; the AVX2 build does the same operations eight lanes at a
 * time and gives the same bits.
 */
#include "backend/cpu/lightning.h"

#define HY_LK_W 1
typedef float hy_lk_v;
static inline hy_lk_v hy_lk_zero(void) { return 0.0f; }
static inline hy_lk_v hy_lk_load(const float *p) { return *p; }
static inline void hy_lk_store(float *p, hy_lk_v v) { *p = v; }
static inline hy_lk_v hy_lk_set1(float x) { return x; }
static inline hy_lk_v hy_lk_add(hy_lk_v a, hy_lk_v b) { return a + b; }
static inline hy_lk_v hy_lk_mul(hy_lk_v a, hy_lk_v b) { return a * b; }

#define HY_LK_WORKER hy_lightning_worker_generic
#include "backend/cpu/lightning_kern.h"
