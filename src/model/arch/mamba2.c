/*
 * mamba2.c - the Mamba-2 mixer shared by granitehybrid and nemotron_h (see
 * mamba2.h).  Keys and tensors follow llama.cpp's converter (notes b.3);
 * the math is llama.cpp's build_mamba2_layer / transformers' torch_forward:
 *   z | xBC | dt = W_in h;  xBC = SiLU(conv1d(xBC) + b);  x | B | C = xBC;
 *   y = SSD(x, softplus(dt + dt_bias), A, B, C) + D x;
 *   y = RMSNorm_per_group(y * SiLU(z)) * w;  out = W_out y.
 */
#include "model/arch/mamba2.h"
#include "model/arch/load.h"
#include "backend/layout.h"

#include <stdio.h>

int hy_mamba2_read_dims(hy_model_t *m, hy_mamba2_dims_t *d, char *err)
{
    static const char *const keys[] = {"ssm.conv_kernel", "ssm.state_size", "ssm.group_count",
                                       "ssm.inner_size", "ssm.time_step_rank"};
    static const uint32_t max[] = {64, 4096, 1024, 1u << 20, 4096};
    uint32_t v[5];
    int rc;

    for (int i = 0; i < 5; i++) {
        if ((rc = hy_model_key_u32(m, keys[i], &v[i], false, err)) != HY_OK)
            return rc;
        if (v[i] == 0 || v[i] > max[i])
            return hy_err(err, HY_EFORMAT, "%s: %s.%s = %u is out of range (1..%u)",
                          hy_gguf_path(m->gguf), m->arch_name, keys[i], v[i], max[i]);
    }
    d->d_conv = (int32_t)v[0];
    d->d_state = (int32_t)v[1];
    d->n_group = (int32_t)v[2];
    d->d_inner = (int32_t)v[3];
    d->n_head = (int32_t)v[4];
    if (d->d_inner % d->n_head != 0)
        return hy_err(err, HY_EFORMAT, "%s: %s.ssm.inner_size = %d is not a multiple of %s.ssm.time_step_rank = %d (the SSM head count)",
                      hy_gguf_path(m->gguf), m->arch_name, d->d_inner, m->arch_name, d->n_head);
    if (d->n_head % d->n_group != 0)
        return hy_err(err, HY_EFORMAT, "%s: %s.ssm.group_count = %d does not divide %s.ssm.time_step_rank = %d",
                      hy_gguf_path(m->gguf), m->arch_name, d->n_group, m->arch_name, d->n_head);
    d->head_dim = d->d_inner / d->n_head;
    d->conv_ch = d->d_inner + 2 * d->n_group * d->d_state;
    d->d_in_proj = d->d_inner + d->conv_ch + d->n_head;
    return HY_OK;
}

void hy_mamba2_scratch(hy_model_t *m, const hy_mamba2_dims_t *d, size_t struct_size,
                       size_t base, int32_t region0)
{
    hy_model_scratch(m, struct_size, base + offsetof(hy_mamba2_scratch_t, zxbcdt), region0,
                     d->d_in_proj);
    hy_model_scratch(m, struct_size, base + offsetof(hy_mamba2_scratch_t, xbc), region0 + 1,
                     d->conv_ch);
    hy_model_scratch(m, struct_size, base + offsetof(hy_mamba2_scratch_t, y), region0 + 2,
                     d->d_inner);
}

int hy_mamba2_load_layer(hy_model_t *m, hy_layer_t *L, int il, const hy_mamba2_dims_t *d,
                         char *err)
{
    const int64_t E = m->n_embd;
    const hy_layer_tensor_t t[] = {
        {HY_LT(ssm_in), "ssm_in.weight", {E, d->d_in_proj}, false},
        {HY_LT(ssm_conv1d), "ssm_conv1d.weight", {d->d_conv, d->conv_ch}, false},
        {HY_LT(ssm_conv1d_b), "ssm_conv1d.bias", {d->conv_ch}, true},
        {HY_LT(ssm_dt_b), "ssm_dt.bias", {d->n_head}, false},
        {HY_LT(ssm_a), "ssm_a", {1, d->n_head}, false},
        {HY_LT(ssm_d), "ssm_d", {1, d->n_head}, false},
        {HY_LT(ssm_norm), "ssm_norm.weight", {d->d_inner / d->n_group, d->n_group}, false},
        {HY_LT(ssm_out), "ssm_out.weight", {d->d_inner, E}, false},
    };
    int rc;

    if ((rc = hy_model_layer_tensors(m, L, il, t, HY_ARRAY_LEN(t), err)) != HY_OK)
        return rc;
    L->kind = HY_LAYER_MAMBA2;
    L->kv_index = -1;
    L->rec_index = m->n_rec_layers++;
    L->conv_floats = (int64_t)(d->d_conv - 1) * d->conv_ch;
    /* the state and the canonical block's rows (docs/determinism.md) */
    L->ssd = (hy_ssd_params_t){d->n_head, d->head_dim, d->n_group, d->d_state, HY_MAMBA2_CHUNK};
    L->rec_floats = hy_ssd_state_floats(&L->ssd);
    return HY_OK;
}

void hy_mamba2_mixer(hy_model_t *m, hy_fwd_t *f, const hy_mamba2_scratch_t *s,
                     const hy_batch_t *b, const hy_layer_t *L, const float *in, float *out)
{
    hy_backend_t *be = f->be;
    const struct hy_backend_i *op = be->i;
    const int32_t n = b->n_tokens;
    /* dimensions from the tensor shapes checked at load */
    const int32_t d_inner = (int32_t)L->ssm_out.ne[0], n_head = (int32_t)L->ssm_dt_b.ne[0],
                  G = (int32_t)L->ssm_norm.ne[1], conv_ch = (int32_t)L->ssm_conv1d.ne[1],
                  d_in_proj = (int32_t)L->ssm_in.ne[1], N = (conv_ch - d_inner) / (2 * G);
    const hy_ssd_params_t sp = {n_head, d_inner / n_head, G, N, HY_MAMBA2_CHUNK};
    float *zxbcdt = s->zxbcdt, *xbc = s->xbc, *y = s->y;

    op->matmul(be, &L->ssm_in, in, zxbcdt, n);
    op->conv1d(be, L->rec_index, b, zxbcdt + d_inner, d_in_proj, &L->ssm_conv1d,
               &L->ssm_conv1d_b, xbc, conv_ch, true);
    op->ssd(be, L->rec_index, b, xbc, conv_ch, zxbcdt + d_inner + conv_ch, d_in_proj,
            &L->ssm_dt_b, &L->ssm_a, xbc + d_inner, xbc + d_inner + G * N, conv_ch, &L->ssm_d,
            y, &sp);
    op->group_rmsnorm_gated(be, y, zxbcdt, d_in_proj, &L->ssm_norm, n, d_inner, d_inner / G,
                            m->norm_eps);
    op->matmul(be, &L->ssm_out, y, out, n);
}
