/*
 * mamba2.h - the Mamba-2 mixer block shared by the Mamba-2 hybrid
 * architectures (granitehybrid, nemotron_h): reading and checking its
 * ssm.* keys and blk.N.ssm_* tensors, and its forward pass
 * (in_proj -> conv1d+SiLU -> SSD scan -> gated grouped RMSNorm -> out_proj).
 */
#ifndef HY_ARCH_MAMBA2_H
#define HY_ARCH_MAMBA2_H

#include "model/model.h"

/* Prefill chunk of the SSD scan (1 = recurrent form).  32 is the fastest
 * chunked setting in bench_ssd on AVX-512 (64: 0.8x of it, 128: 0.55x). */
#define HY_MAMBA2_CHUNK 32

typedef struct {
    int32_t d_conv;    /* ssm.conv_kernel */
    int32_t d_state;   /* ssm.state_size, N */
    int32_t n_group;   /* ssm.group_count, G */
    int32_t d_inner;   /* ssm.inner_size */
    int32_t n_head;    /* ssm.time_step_rank */
    int32_t head_dim;  /* d_inner / n_head, P */
    int32_t conv_ch;   /* d_inner + 2 G N: channels of xBC */
    int32_t d_in_proj; /* 2 d_inner + 2 G N + n_head: z | xBC | dt */
} hy_mamba2_dims_t;

/* Reads and validates the <arch>.ssm.* keys. */
int hy_mamba2_read_dims(hy_model_t *m, hy_mamba2_dims_t *d, char *err);

/* The mixer's buffers, embedded in the scratch struct of every family that
 * uses it: in_proj's output, the conv output and the scan output. */
typedef struct {
    float *zxbcdt; /* (T, d_in_proj) */
    float *xbc;    /* (T, conv_ch) */
    float *y;      /* (T, d_inner) */
} hy_mamba2_scratch_t;
#define HY_MAMBA2_REGIONS 3

/* Declares the mixer's scratch: struct_size is the family's scratch
 * struct, base the offset of its hy_mamba2_scratch_t member, regions
 * region0 .. region0 + HY_MAMBA2_REGIONS - 1. */
void hy_mamba2_scratch(hy_model_t *m, const hy_mamba2_dims_t *d, size_t struct_size,
                       size_t base, int32_t region0);

/* Binds layer il's Mamba-2 tensors (exact shapes), sets its kind, its
 * rec_index (the next of m->n_rec_layers) and its state sizes. */
int hy_mamba2_load_layer(hy_model_t *m, hy_layer_t *L, int il, const hy_mamba2_dims_t *d,
                         char *err);

/* out (n, n_embd) = the Mamba-2 mixer of in; in and out may alias. */
void hy_mamba2_mixer(hy_model_t *m, hy_fwd_t *f, const hy_mamba2_scratch_t *s,
                     const hy_batch_t *b, const hy_layer_t *L, const float *in, float *out);

#endif
