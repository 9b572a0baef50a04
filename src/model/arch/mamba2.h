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

/* Binds layer il's Mamba-2 tensors (exact shapes), sets its kind, its
 * rec_index (*n_rec is the running count) and its state sizes, and raises
 * m->scratch_per_tok[0..2] to what hy_mamba2_mixer needs. */
int hy_mamba2_load_layer(hy_model_t *m, hy_layer_t *L, int il, const hy_mamba2_dims_t *d,
                         int32_t *n_rec, char *err);

/* out (n, n_embd) = the Mamba-2 mixer of in; in and out may alias.  Uses
 * f->scratch[0..2]. */
void hy_mamba2_mixer(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b, const hy_layer_t *L,
                     const float *in, float *out);

#endif
