/*
 * gdn_kern_avx2.c - the Gated DeltaNet kernel (gdn_kern.h) compiled with
 * -mavx2 -mfma; gdn.c calls it only when the CPU has both.
 */
#define HY_GDN_WORKER hy_gdn_worker_avx2
#define HY_GDN_NR 16
#include "backend/cpu/gdn_kern.h"
