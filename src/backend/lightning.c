/*
 * lightning.c - the argument checks of the lightning-attention op, shared
 * by the CPU and CUDA backends (see lightning.h for the op's arithmetic).
 */
#include "backend/lightning.h"

int hy_lightning_check(const hy_lightning_params_t *p, int32_t row_stride, int32_t head_stride,
                       const hy_weight_t *slope, char *err)
{
    const float *s;

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
    if (slope == NULL || slope->data == NULL || slope->type != HY_DTYPE_F32 ||
        slope->ne[0] * HY_MAX(slope->ne[1], 1) != p->n_head)
        return hy_err(err, HY_EINVAL, "lightning: slope weight %s must be f32 with %d values",
                      slope && slope->name ? slope->name : "?", p->n_head);
    s = slope->data;
    for (int32_t h = 0; h < p->n_head; h++)
        if (!(s[h] >= 0.0f && isfinite(s[h])))
            return hy_err(err, HY_EINVAL, "lightning: slope of head %d is %g (must be finite, >= 0)",
                          h, s[h]);
    return HY_OK;
}
