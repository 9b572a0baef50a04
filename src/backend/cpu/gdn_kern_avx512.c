/*
 * gdn_kern_avx512.c - the Gated DeltaNet kernel (gdn_kern.h) compiled with
 * AVX-512 flags; 32-wide micro-kernel rows (two zmm per row, eight
 * accumulators) so the FMA pipes stay busy.  gdn.c calls it only when the
 * CPU and OS support AVX-512.
 */
#define HY_GDN_WORKER hy_gdn_worker_avx512
#define HY_GDN_NR 32
#include "backend/cpu/gdn_kern.h"
