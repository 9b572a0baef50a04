/*
 * ssd_kern_generic.c - the Mamba-2 SSD kernel (ssd_kern.h) for the
 * baseline ISA (SSE2 on x86-64); ssd.c uses it when the CPU lacks AVX2.
 */
#define HY_SSD_WORKER hy_ssd_worker_generic
#define HY_SSD_NR 16
#include "backend/cpu/ssd_kern.h"
