/*
 * gdn_kern_generic.c - the Gated DeltaNet kernel (gdn_kern.h) for any CPU:
 * baseline flags, so it runs where no AVX exists.
 */
#define HY_GDN_WORKER hy_gdn_worker_generic
#define HY_GDN_NR 16
#include "backend/cpu/gdn_kern.h"
