/*
 * lightning.c - the lightning-attention op's shared parts (see lightning.h):
 * the decay table every backend reads, and the argument checks of the CPU
 * and CUDA ops.
 */
#include "backend/lightning.h"

#include <math.h>

void hy_lightning_decays(const float *slopes, int32_t n_head, int32_t chunk, float *out)
{
    for (int32_t h = 0; h < n_head; h++)
        for (int32_t n = 0; n <= chunk; n++)
            out[(size_t)h * (size_t)(chunk + 1) + (size_t)n] =
                (float)exp(-(double)slopes[h] * (double)n);
}

int hy_lightning_check(const hy_lightning_params_t *p, int32_t row_stride, int32_t head_stride,
                       const hy_weight_t *decay, char *err)
{
    const float *t;

    if (p->n_head < 1 || p->n_head > 65535 || p->head_dim < 1 ||
        p->head_dim > HY_LIGHTNING_MAX_DIM || p->chunk < 1 || p->chunk > HY_LIGHTNING_MAX_CHUNK)
        return hy_err(err, HY_EINVAL,
                      "lightning: bad shape: %d heads (1..65535) of %d (1..%d), chunk %d (1..%d)",
                      p->n_head, p->head_dim, HY_LIGHTNING_MAX_DIM, p->chunk,
                      HY_LIGHTNING_MAX_CHUNK);
    /* q, k and v of one head are head_dim floats each: a head stride below
     * that would make two heads share values */
    if (head_stride < p->head_dim ||
        (int64_t)row_stride < (int64_t)(p->n_head - 1) * head_stride + p->head_dim)
        return hy_err(err, HY_EINVAL,
                      "lightning: strides row %d / head %d are shorter than %d heads of %d",
                      row_stride, head_stride, p->n_head, p->head_dim);
    if (decay == NULL || decay->data == NULL || decay->type != HY_DTYPE_F32 ||
        decay->ne[0] != p->chunk + 1 || decay->ne[1] != p->n_head || decay->ne[2] > 1)
        return hy_err(err, HY_EINVAL,
                      "lightning: decay table %s must be f32 {%d, %d} (chunk + 1, heads)",
                      decay && decay->name ? decay->name : "?", p->chunk + 1, p->n_head);
    /* host data: built at load from the family's slopes, checked once per
     * call (heads x (chunk + 1) compares) rather than trusted */
    t = decay->data;
    for (int64_t e = 0; e < (int64_t)p->n_head * (p->chunk + 1); e++)
        if (!(t[e] >= 0.0f && t[e] <= 1.0f))
            return hy_err(err, HY_EINVAL,
                          "lightning: decay table %s holds %g for head %lld, power %lld (must be in [0, 1])",
                          decay->name ? decay->name : "?", t[e], (long long)(e / (p->chunk + 1)),
                          (long long)(e % (p->chunk + 1)));
    return HY_OK;
}
