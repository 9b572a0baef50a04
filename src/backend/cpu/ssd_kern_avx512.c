/*
 * ssd_kern_avx512.c - the Mamba-2 SSD kernel (ssd_kern.h) compiled for
 * AVX-512 with 512-bit vectors preferred (micro-tiles 4 x 32 floats);
 * ssd.c calls it only when the CPU has AVX-512 F/BW/VL.
 */
#define HY_SSD_WORKER hy_ssd_worker_avx512
#define HY_SSD_NR 32
#include "backend/cpu/ssd_kern.h"
