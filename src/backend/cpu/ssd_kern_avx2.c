/*
 * ssd_kern_avx2.c - the Mamba-2 SSD kernel (ssd_kern.h) compiled with
 * -mavx2 -mfma; ssd.c calls it only when the CPU has both.
 */
#define HY_SSD_WORKER hy_ssd_worker_avx2
#define HY_SSD_NR 16
#include "backend/cpu/ssd_kern.h"
