/*
 * qmm_avx512.c - qmm_avx2.c built for the AVX-512 level (this library's
 * flags): its tiles as hy_qmm_avx512_tile_*, with the many-token kernel on
 * zmm and vpdpwssd, the AVX2 level's bits.
 */
#define HY_Q2_AVX512 1
#include "qmm_avx2.c"
