/*
 * test_dq_chunk.c - the CUDA weight kernels' block decoders (kernels/
 * hy_dq_chunk.h, the code hy_quant.cu and hy_moe.cu run on the device) run
 * on the host against the CPU backend's reference dequantizers, bit for
 * bit: every block type, every 32-element chunk of rows of one, three and
 * sixteen blocks, random quant bytes (every bit pattern is a valid block)
 * under sane and extreme f16 factors.  Runs in every build, GPU or not.
 */
#include "backend/cpu/quant_impl.h"
#include "common/dtype.h"

#define HY_DQ_F16(p) hy_f16_to_f32((uint16_t)((p)[0] | (p)[1] << 8))
#include "hy_dq_chunk.h"

#include "../unit/quant_fill.h"
#include "../unit/test.h"

#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;

static uint32_t rng_u32(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

/* Rows of nb blocks of t decoded chunk by chunk vs the CPU reference;
 * returns the number of elements whose bits differ. */
static int check_type(hy_dtype_t t, int nb, float d, float m)
{
    const hy_dtype_info_t *info = hy_dtype_info(t);
    const int64_t n = (int64_t)nb * info->block;
    size_t rb = hy_dtype_row_bytes(t, n);
    uint8_t *row = malloc(rb);
    float *ref = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
    int bad = 0;

    for (size_t i = 0; i < rb; i++)
        row[i] = (uint8_t)rng_u32();
    for (int b = 0; b < nb; b++)
        hy_test_block_factors(t, row + (size_t)b * info->block_bytes, d, m);
    hy_quant_scalar_kernels[t].traits.to_float(row, ref, n);
    for (int64_t c = 0; c < n / 32; c++)
        if (!hy_dq_chunk_any((int)t, row, c, got + 32 * c))
            bad = (int)n;
    for (int64_t i = 0; i < n && bad < n; i++)
        if (memcmp(&ref[i], &got[i], sizeof(float)) != 0)
            bad++;
    free(row);
    free(ref);
    free(got);
    return bad;
}

int main(void)
{
    static const hy_dtype_t types[] = {HY_DTYPE_Q4_0, HY_DTYPE_Q4_1, HY_DTYPE_Q5_0,
                                       HY_DTYPE_Q5_1, HY_DTYPE_Q8_0, HY_DTYPE_IQ4_NL,
                                       HY_DTYPE_Q2_K, HY_DTYPE_Q3_K, HY_DTYPE_Q4_K,
                                       HY_DTYPE_Q5_K, HY_DTYPE_Q6_K, HY_DTYPE_IQ4_XS};
    static const int nbs[] = {1, 3, 16};
    /* (d, m): typical, negative offset, subnormal halves, large halves */
    static const float f[][2] = {{0.01f, 0.005f}, {0.02f, -0.3f}, {3e-7f, 1e-6f},
                                 {60000.0f, -50000.0f}};

    for (size_t ti = 0; ti < HY_ARRAY_LEN(types); ti++) {
        int bad = 0, rows = 0;
        for (size_t k = 0; k < HY_ARRAY_LEN(nbs); k++)
            for (size_t j = 0; j < HY_ARRAY_LEN(f); j++)
                for (int rep = 0; rep < 8; rep++, rows++)
                    bad += check_type(types[ti], nbs[k], f[j][0], f[j][1]);
        HY_T_OK(bad == 0, "%s: device chunk decoder == CPU reference bit for bit over %d rows "
                "of 1/3/16 blocks (%d elements differ)", hy_dtype_info(types[ti])->name, rows,
                bad);
    }
    {
        float v[32];
        HY_T_OK(!hy_dq_chunk_any(HY_DTYPE_F32, NULL, 0, v) &&
                    !hy_dq_chunk_any(16 /* IQ2_XXS */, NULL, 0, v) &&
                    !hy_dq_chunk_any(HY_DTYPE_Q8_K, NULL, 0, v),
                "types without a device decoder are refused");
    }
    return hy_t_done();
}
