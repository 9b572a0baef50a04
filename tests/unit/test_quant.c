/*
 * test_quant.c - the quant kernels against plain references: exhaustive
 * f16/bf16 conversions, known-answer blocks that check the block layouts
 * against the formulas written out independently here, and for every weight
 * type and every ISA level this CPU has: dequantization identical to the
 * scalar code, activation quantizers identical to the scalar code, vec_dot
 * within a tight tolerance of a double-precision dot, tile == vec_dot.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/attn_flash.h"
#include "backend/cpu/qmm.h"
#include "backend/cpu/quant_impl.h"
#include "backend/cpu/quant_ref.h"
#include "quant_fill.h"
#include "test.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rng_u32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static float rng_f(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rng_u32() & 0xFFFFFF) / 16777216.0f;
}

/* ---- conversions ---- */

static double ref_f16(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_f16(void)
{
    int bad_to = 0, bad_rt = 0, bad_mid = 0, bad_nan = 0;

    for (uint32_t h = 0; h < 65536; h++) {
        float f = hy_f16_to_f32((uint16_t)h);
        int e = (h >> 10) & 31;
        if (e == 31) {
            int m = h & 1023;
            if ((m ? !isnan(f) : !isinf(f)) || !!signbit(f) != !!(h & 0x8000))
                bad_to++;
            if (m && !(hy_f32_to_f16(f) & 0x3FF))
                bad_nan++;
            continue;
        }
        if (fbits(f) != fbits((float)ref_f16((uint16_t)h)))
            bad_to++;
        if (hy_f32_to_f16(f) != h)
            bad_rt++;
        /* midpoint to the next half up in magnitude: ties go to the even
         * code, one float ulp either side goes to the nearer one */
        if ((h & 0x7FFF) < 0x7BFF) {
            double a = ref_f16((uint16_t)h), b = ref_f16((uint16_t)(h + 1));
            float mid = (float)((a + b) / 2);
            uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            float lo = nextafterf(mid, (float)a), hi = nextafterf(mid, (float)b);
            if ((double)mid != (a + b) / 2 || hy_f32_to_f16(mid) != even ||
                hy_f32_to_f16(lo) != h || hy_f32_to_f16(hi) != h + 1)
                bad_mid++;
        }
    }
    HY_T_OK(bad_to == 0, "f16->f32 matches ldexp reference for all 65536 codes (%d bad)", bad_to);
    HY_T_OK(bad_rt == 0, "f32->f16 round-trips every finite half (%d bad)", bad_rt);
    HY_T_OK(bad_mid == 0, "f32->f16 ties to even, neighbours to nearest, incl. subnormals (%d bad)", bad_mid);
    HY_T_OK(bad_nan == 0 && hy_f32_to_f16(65520.0f) == 0x7C00 &&
            hy_f32_to_f16(65519.99f) == 0x7BFF && hy_f32_to_f16(-INFINITY) == 0xFC00 &&
            hy_f32_to_f16(1e-8f) == 0 && hy_f32_to_f16(-3e-8f) == 0x8001 &&
            isnan(hy_f16_to_f32(hy_f32_to_f16(NAN))),
            "f32->f16 overflow, underflow, inf and nan");
}

/* The KV cache's f16 rows at AVX2 and up (F16C) have hy_f32_to_f16's bits:
 * every half, the midpoints between neighbours and a float either side of
 * each, the overflow edge, and random bit patterns (NaN aside: both give a
 * NaN, payloads may differ), in rows of odd length (the scalar tail). */
static void test_f16_row(void)
{
#if defined(__x86_64__) && HY_BUILD_AVX2
    enum { N = 4 * 65536 + 4099 };
    float *x = malloc(N * sizeof(float));
    uint16_t *y = malloc(N * sizeof(uint16_t));
    int n = 0, bad = 0;

    if (hy_cpu_isa() < HY_ISA_AVX2) {
        HY_T_OK(1, "f16 KV rows # SKIP this CPU lacks AVX2/F16C");
        free(x);
        free(y);
        return;
    }
    for (uint32_t h = 0; h < 65536; h++) {
        float f = hy_f16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        x[n++] = f;
        if ((h & 0x7FFF) < 0x7BFF) {
            float mid = (float)(((double)f + (double)hy_f16_to_f32((uint16_t)(h + 1))) / 2);
            x[n++] = mid;
            x[n++] = nextafterf(mid, 0.0f);
            x[n++] = nextafterf(mid, 2.0f * mid);
        }
    }
    x[n++] = 65519.99f;
    x[n++] = 65520.0f;
    x[n++] = -65520.0f;
    /* a stream of its own: the other tests' data stays what it was */
    for (uint32_t u = 0x2545F491u; n < N;) {
        float f;
        u ^= u << 13;
        u ^= u >> 17;
        u ^= u << 5;
        memcpy(&f, &u, 4);
        if (!isnan(f))
            x[n++] = f;
    }
    hy_attn_f16_row_avx2(x, y, n);
    for (int i = 0; i < n; i++)
        if (y[i] != hy_f32_to_f16(x[i]))
            bad++;
    HY_T_OK(bad == 0, "f16 KV rows (F16C, %d floats): hy_f32_to_f16's bits (%d differ)", n, bad);
    free(x);
    free(y);
#endif
}

static void test_bf16(void)
{
    int bad = 0, bad_mid = 0;

    for (uint32_t h = 0; h < 65536; h++) {
        float f = hy_bf16_to_f32((uint16_t)h);
        if (fbits(f) != h << 16)
            bad++;
        if (((h >> 7) & 0xFF) == 0xFF) {
            if ((h & 0x7F) && !isnan(hy_bf16_to_f32(hy_f32_to_bf16(f))))
                bad++;
            continue;
        }
        if (hy_f32_to_bf16(f) != h)
            bad++;
        if ((h & 0x7FFF) < 0x7F7F) {
            uint32_t mid = (h << 16) | 0x8000;
            uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            float fm, fl, fh;
            uint32_t l = mid - 1, u = mid + 1;
            memcpy(&fm, &mid, 4);
            memcpy(&fl, &l, 4);
            memcpy(&fh, &u, 4);
            if (hy_f32_to_bf16(fm) != even || hy_f32_to_bf16(fl) != h ||
                hy_f32_to_bf16(fh) != h + 1)
                bad_mid++;
        }
    }
    HY_T_OK(bad == 0, "bf16<->f32 exact for all 65536 codes, nan stays nan (%d bad)", bad);
    HY_T_OK(bad_mid == 0 && hy_f32_to_bf16(3.4e38f) == 0x7F80,
            "f32->bf16 ties to even, neighbours to nearest, overflow to inf (%d bad)", bad_mid);
}

/* ---- layouts, written from the notes element by element ---- */

static void kat_scale_min(const uint8_t *s, int k, int *sc, int *m)
{
    if (k < 4) {
        *sc = s[k] & 63;
        *m = s[k + 4] & 63;
    } else {
        *sc = (s[k + 4] & 15) | ((s[k - 4] >> 6) << 4);
        *m = (s[k + 4] >> 4) | ((s[k] >> 6) << 4);
    }
}

/* Element i of a block, float arithmetic in the order the notes give. */
static float kat_elem(hy_dtype_t t, const uint8_t *b, int i)
{
    float d = hy_f16_to_f32((uint16_t)(b[0] | b[1] << 8));
    switch (t) {
    case HY_DTYPE_Q4_0: {
        int q = i < 16 ? (b[2 + i] & 15) : (b[2 + i - 16] >> 4);
        return d * (float)(q - 8);
    }
    case HY_DTYPE_Q4_1: {
        float m = hy_f16_to_f32((uint16_t)(b[2] | b[3] << 8));
        int q = i < 16 ? (b[4 + i] & 15) : (b[4 + i - 16] >> 4);
        return d * (float)q + m;
    }
    case HY_DTYPE_Q8_0:
        return d * (float)(int8_t)b[2 + i];
    case HY_DTYPE_Q4_K:
    case HY_DTYPE_Q5_K: {
        float dmin = hy_f16_to_f32((uint16_t)(b[2] | b[3] << 8));
        const uint8_t *scales = b + 4;
        const uint8_t *qh = b + 16, *qs = b + (t == HY_DTYPE_Q5_K ? 48 : 16);
        int c = i / 64, l = i % 64, k = 2 * c + (l >= 32), sc, m;
        int q = l < 32 ? (qs[32 * c + l] & 15) : (qs[32 * c + l - 32] >> 4);
        if (t == HY_DTYPE_Q5_K)
            q += (qh[l % 32] >> k) & 1 ? 16 : 0;
        kat_scale_min(scales, k, &sc, &m);
        return d * (float)sc * (float)q - dmin * (float)m;
    }
    case HY_DTYPE_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d6 = hy_f16_to_f32((uint16_t)(b[208] | b[209] << 8));
        int h = i / 128, l = i % 128, g = l / 32, ll = l % 32;
        int byte = ql[64 * h + (g & 1) * 32 + ll];
        int q = (g < 2 ? byte & 15 : byte >> 4) | (((qh[32 * h + ll] >> (2 * g)) & 3) << 4);
        return d6 * (float)sc[8 * h + 2 * g + ll / 16] * (float)(q - 32);
    }
    case HY_DTYPE_Q5_0:
    case HY_DTYPE_Q5_1: {
        /* d[, m], qh (u32 LE: bit i = 5th bit of element i), qs */
        int o = t == HY_DTYPE_Q5_1 ? 4 : 2;
        uint32_t qh = (uint32_t)b[o] | (uint32_t)b[o + 1] << 8 | (uint32_t)b[o + 2] << 16 |
                      (uint32_t)b[o + 3] << 24;
        int q = (i < 16 ? (b[o + 4 + i] & 15) : (b[o + 4 + i - 16] >> 4)) + 16 * ((qh >> i) & 1);
        if (t == HY_DTYPE_Q5_0)
            return d * (float)(q - 16);
        return d * (float)q + hy_f16_to_f32((uint16_t)(b[2] | b[3] << 8));
    }
    case HY_DTYPE_IQ4_NL: {
        static const int grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1, 13, 25, 38, 53, 69, 89, 113};
        int q = i < 16 ? (b[2 + i] & 15) : (b[2 + i - 16] >> 4);
        return d * (float)grid[q];
    }
    case HY_DTYPE_IQ4_XS: {
        static const int grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1, 13, 25, 38, 53, 69, 89, 113};
        int sb = i / 32, l = i % 32;
        int sh = (b[2] | b[3] << 8) >> (2 * sb) & 3, sl = (b[4 + sb / 2] >> (4 * (sb % 2))) & 15;
        const uint8_t *qs = b + 8 + 16 * sb;
        int q = l < 16 ? (qs[l] & 15) : (qs[l - 16] >> 4);
        return d * (float)((sl | sh << 4) - 32) * (float)grid[q];
    }
    case HY_DTYPE_Q2_K: {
        /* scales[16], qs[64], d, dmin: group i/16, 2-bit field (i%128)/32 of
         * qs[32*(i/128) + i%32] */
        float d2 = hy_f16_to_f32((uint16_t)(b[80] | b[81] << 8));
        float m2 = hy_f16_to_f32((uint16_t)(b[82] | b[83] << 8));
        int sc = b[i / 16];
        int q = (b[16 + 32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
        return d2 * (float)(sc & 15) * (float)q - m2 * (float)(sc >> 4);
    }
    case HY_DTYPE_Q3_K: {
        /* hmask[32], qs[64], scales[12], d; scale g: low nibble g/8 of
         * scales[g%8], bits 2(g/4).. of scales[8+g%4], stored +32 */
        const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
        float d3 = hy_f16_to_f32((uint16_t)(b[108] | b[109] << 8));
        int g = i / 16;
        int scale = (((sc[g % 8] >> (4 * (g / 8))) & 15) | (((sc[8 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32;
        int q = (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
        if (!((hm[i % 32] >> (i / 32)) & 1))
            q -= 4;
        return d3 * (float)scale * (float)q;
    }
    default:
        return NAN;
    }
}

/* Fill n elements of weight type t with random but meaningful data. */
static void make_weights(hy_dtype_t t, uint8_t *w, int64_t n)
{
    const hy_dtype_info_t *info = hy_dtype_info(t);
    int64_t nb = n / info->block;
    float *x = malloc((size_t)n * sizeof(float));

    for (int64_t i = 0; i < n; i++)
        x[i] = rng_f(-1.0f, 1.0f) + (t == HY_DTYPE_Q4_1 ? (float)((i / 32) % 5) * 0.3f : 0.0f);
    switch (t) {
    case HY_DTYPE_Q4_K:
    case HY_DTYPE_Q5_K:
    case HY_DTYPE_Q6_K:
    case HY_DTYPE_Q2_K:
    case HY_DTYPE_Q3_K:
    case HY_DTYPE_IQ4_XS:
    case HY_DTYPE_Q5_0:
    case HY_DTYPE_Q5_1:
    case HY_DTYPE_IQ4_NL:
        /* every bit pattern of these blocks is valid: random bytes reach
         * all scale/min/high-bit/grid combinations; only the f16 factors
         * are set */
        for (size_t i = 0; i < (size_t)nb * info->block_bytes; i++)
            w[i] = (uint8_t)rng_u32();
        for (int64_t b = 0; b < nb; b++) {
            /* Q5_1's m is an offset of either sign, K dmins positive */
            float d = rng_f(0.001f, 0.01f);
            float m = t == HY_DTYPE_Q5_1 ? rng_f(-0.2f, 0.2f) : rng_f(0.001f, 0.02f);
            hy_test_block_factors(t, w + b * info->block_bytes, d, m);
        }
        break;
    default:
        hy_quant_quantize_row(t, x, w, n);
    }
    free(x);
}

static void test_known_answers(void)
{
    static const int sc[8] = {1, 2, 3, 4, 33, 47, 63, 50};
    static const int mn[8] = {5, 6, 7, 8, 40, 41, 62, 17};
    hy_block_q4_k_t b4;
    hy_block_q5_k_t b5;
    hy_block_q6_k_t b6;
    float y[256];
    int bad = 0;

    /* Q4_K with chosen 6-bit scales/mins packed per the notes */
    memset(&b4, 0, sizeof b4);
    b4.d = hy_f32_to_f16(1.0f);
    b4.dmin = hy_f32_to_f16(0.5f);
    for (int k = 0; k < 4; k++) {
        b4.scales[k] = (uint8_t)(sc[k] | ((sc[k + 4] >> 4) << 6));
        b4.scales[k + 4] = (uint8_t)(mn[k] | ((mn[k + 4] >> 4) << 6));
        b4.scales[k + 8] = (uint8_t)((sc[k + 4] & 15) | ((mn[k + 4] & 15) << 4));
    }
    for (int j = 0; j < 128; j++)
        b4.qs[j] = (uint8_t)((j % 16) | ((15 - j % 16) << 4));
    hy_quant_scalar_kernels[HY_DTYPE_Q4_K].traits.to_float(&b4, y, 256);
    for (int i = 0; i < 256; i++) {
        int c = i / 64, l = i % 64;
        int q = l < 32 ? l % 16 : 15 - (l - 32) % 16, k = 2 * c + (l >= 32);
        if (y[i] != (float)(sc[k] * q) - 0.5f * (float)mn[k])
            bad++;
    }
    HY_T_OK(bad == 0 && y[0] == -2.5f && y[255] == -8.5f,
            "Q4_K known block: chosen scales/mins decode per the notes (%d bad)", bad);

    /* Q5_K: same scales, qh bit k set only on odd l: 5th bit lands on the
     * sub-block the brief's u1/u2 masks say */
    memset(&b5, 0, sizeof b5);
    b5.d = b4.d;
    b5.dmin = b4.dmin;
    memcpy(b5.scales, b4.scales, 12);
    memcpy(b5.qs, b4.qs, 128);
    for (int l = 0; l < 32; l++)
        b5.qh[l] = (l & 1) ? 0xA5 : 0x00;  /* bits 0,2,5,7 */
    hy_quant_scalar_kernels[HY_DTYPE_Q5_K].traits.to_float(&b5, y, 256);
    bad = 0;
    for (int i = 0; i < 256; i++) {
        int c = i / 64, l = i % 64, k = 2 * c + (l >= 32);
        int q = l < 32 ? l % 16 : 15 - (l - 32) % 16;
        if ((l % 32) & 1)
            q += (0xA5 >> k) & 1 ? 16 : 0;
        if (y[i] != (float)(sc[k] * q) - 0.5f * (float)mn[k])
            bad++;
    }
    HY_T_OK(bad == 0 && y[1] == 1.0f * (1 + 16) - 2.5f,
            "Q5_K known block: qh bit 2c/2c+1 adds 16 (%d bad)", bad);

    /* Q6_K: scale j = j-8 (negative too), ql/qh chosen so q = (i%64) */
    memset(&b6, 0, sizeof b6);
    b6.d = hy_f32_to_f16(0.25f);
    for (int j = 0; j < 16; j++)
        b6.scales[j] = (int8_t)(j - 8);
    for (int i = 0; i < 256; i++) {
        int h = i / 128, l = i % 128, g = l / 32, ll = l % 32, q = i % 64;
        uint8_t *p = &b6.ql[64 * h + (g & 1) * 32 + ll];
        *p |= (uint8_t)(g < 2 ? (q & 15) : (q & 15) << 4);
        b6.qh[32 * h + ll] |= (uint8_t)((q >> 4) << (2 * g));
    }
    hy_quant_scalar_kernels[HY_DTYPE_Q6_K].traits.to_float(&b6, y, 256);
    bad = 0;
    for (int i = 0; i < 256; i++)
        if (y[i] != 0.25f * (float)(i / 16 - 8) * (float)(i % 64 - 32))
            bad++;
    HY_T_OK(bad == 0 && y[0] == 0.25f * -8 * -32,
            "Q6_K known block: ql/qh/scales decode per the notes (%d bad)", bad);

    /* every type: random blocks decode like the element-wise formula */
    static const hy_dtype_t types[] = {HY_DTYPE_Q4_0, HY_DTYPE_Q4_1, HY_DTYPE_Q8_0,
                                       HY_DTYPE_Q4_K, HY_DTYPE_Q5_K, HY_DTYPE_Q6_K,
                                       HY_DTYPE_Q5_0, HY_DTYPE_Q5_1, HY_DTYPE_IQ4_NL,
                                       HY_DTYPE_Q2_K, HY_DTYPE_Q3_K, HY_DTYPE_IQ4_XS};
    for (size_t ti = 0; ti < HY_ARRAY_LEN(types); ti++) {
        hy_dtype_t t = types[ti];
        const hy_dtype_info_t *info = hy_dtype_info(t);
        int64_t n = 8 * 256;
        uint8_t *w = malloc(hy_dtype_row_bytes(t, n));
        float *yy = malloc((size_t)n * sizeof(float));
        make_weights(t, w, n);
        hy_quant_scalar_kernels[t].traits.to_float(w, yy, n);
        bad = 0;
        for (int64_t i = 0; i < n; i++)
            if (yy[i] != kat_elem(t, w + (i / info->block) * info->block_bytes,
                                  (int)(i % info->block)))
                bad++;
        HY_T_OK(bad == 0, "%s reference dequant == element formula from the notes (%d bad)",
                info->name, bad);
        free(w);
        free(yy);
    }
}

/* ---- per-ISA checks ---- */

static double deq_act(hy_dtype_t at, const void *x, int64_t i)
{
    switch (at) {
    case HY_DTYPE_F32: return ((const float *)x)[i];
    case HY_DTYPE_Q8_0: {
        const hy_block_q8_0_t *b = (const hy_block_q8_0_t *)x + i / 32;
        return (double)hy_f16_to_f32(b->d) * b->qs[i % 32];
    }
    case HY_DTYPE_Q8_1: {
        const hy_block_q8_1_t *b = (const hy_block_q8_1_t *)x + i / 32;
        return (double)hy_f16_to_f32(b->d) * b->qs[i % 32];
    }
    case HY_DTYPE_Q8_K: {
        const hy_block_q8_k_t *b = (const hy_block_q8_k_t *)x + i / 256;
        return (double)b->d * b->qs[i % 256];
    }
    case HY_DTYPE_Q8_2L: {
        const hy_block_q8_2l_t *b = (const hy_block_q8_2l_t *)x + i / 32;
        return (double)b->d * (255 * b->hi[i % 32] + b->lo[i % 32]);
    }
    case HY_DTYPE_Q8_K2L: {
        const hy_block_q8_k2l_t *b = (const hy_block_q8_k2l_t *)x + i / 256;
        return (double)b->d * (255 * b->hi[i % 256] + b->lo[i % 256]);
    }
    case HY_DTYPE_Q8_S: {
        const hy_block_q8_s_t *b = (const hy_block_q8_s_t *)x + i / 32;
        return (double)b->d * b->qs[i % 32];
    }
    case HY_DTYPE_Q16: {
        const hy_block_q16_t *b = (const hy_block_q16_t *)x + i / 32;
        return (double)b->d * b->v[hy_qmm_slot((int)(i % 32))];
    }
    default: return NAN;
    }
}

enum { NW = 21, NX = 6, S_STRIDE = 22, NWD = 21 }; /* NW: 16-row passes plus an edge of 5 */

/* Checks of the two-level block fields that the dots rely on: hi/lo in
 * [-127, 127], vsum/bsums the sums of v, s the float sum of the inputs,
 * and every v within d/2 of x (plus the float rounding of x*(1/d)); for
 * Q16 (the same v as int16) |v| <= 32512, s and v. */
static int check_2l(hy_dtype_t at, const void *x, const float *xf, int64_t n)
{
    int bad = 0;
    int64_t bs = at == HY_DTYPE_Q8_K2L ? 256 : 32;

    if (at == HY_DTYPE_Q16) {
        for (int64_t b = 0; b < n / 32; b++) {
            const hy_block_q16_t *q = (const hy_block_q16_t *)x + b;
            double fs = 0.0;
            for (int j = 0; j < 32; j++) {
                float xv = xf[b * 32 + j];
                int v = q->v[hy_qmm_slot(j)];
                if (v < -HY_QMM_VMAX || v > HY_QMM_VMAX || fabs((double)q->d * v - xv) > 0.51 * q->d)
                    bad++;
                fs += xv;
            }
            if (q->s != hy_quant_sum32(xf + b * 32) ||
                fabs(q->s - fs) > 1e-6 * (fabs(fs) + 32 * q->d * HY_QMM_VMAX))
                bad++;
        }
        return bad;
    }
    for (int64_t b = 0; b < n / bs; b++) {
        const int8_t *hi, *lo;
        float d;
        long gs[16] = {0}, vs = 0;
        double fs = 0.0;
        if (at == HY_DTYPE_Q8_2L) {
            const hy_block_q8_2l_t *q = (const hy_block_q8_2l_t *)x + b;
            hi = q->hi;
            lo = q->lo;
            d = q->d;
        } else {
            const hy_block_q8_k2l_t *q = (const hy_block_q8_k2l_t *)x + b;
            hi = q->hi;
            lo = q->lo;
            d = q->d;
        }
        for (int64_t j = 0; j < bs; j++) {
            int v = 255 * hi[j] + lo[j];
            float xv = xf[b * bs + j];
            if (hi[j] < -127 || lo[j] < -127 || fabs((double)d * v - xv) > 0.51 * d)
                bad++;
            gs[j / 16] += v;
            vs += v;
            fs += xv;
        }
        if (at == HY_DTYPE_Q8_2L) {
            const hy_block_q8_2l_t *q = (const hy_block_q8_2l_t *)x + b;
            if (q->vsum != vs || fabs(q->s - fs) > 1e-6 * (fabs(fs) + 32 * d * HY_Q8_2L_VMAX))
                bad++;
        } else {
            const hy_block_q8_k2l_t *q = (const hy_block_q8_k2l_t *)x + b;
            for (int g = 0; g < 16; g++)
                if (q->bsums[g] != gs[g])
                    bad++;
        }
    }
    return bad;
}

/* legacy: the single-level ggml partners of hy_quant_traits_q8 */
static void test_type_isa(hy_dtype_t t, hy_isa_t isa, int legacy)
{
    const hy_dtype_info_t *info = hy_dtype_info(t);
    const hy_quant_traits_t *tr = legacy ? hy_quant_traits_q8(t) : hy_quant_traits(t);
    const hy_quant_traits_t *ref = legacy && hy_quant_scalar_kernels_q8[t].traits.vec_dot
                                       ? &hy_quant_scalar_kernels_q8[t].traits
                                       : &hy_quant_scalar_kernels[t].traits;
    hy_quant_tile_fn_t tile = legacy ? hy_quant_vec_dot_tile_q8(t) : hy_quant_vec_dot_tile(t);
    int two = 0, fields_bad = 0;
    double worst_f = 0.0, worst_b = 0.0, worst_o = 0.0;
    /* 8224 and 8448: 257 and 264 blocks of 32, past the 256 whose planes
     * the AVX-512 one-token tiles keep (qmm_avx2.c, HY_Q2_XPL_MAX): the
     * int16 decoders take them */
    const int64_t lens_q[] = {64, 96, 4096, 8224}, lens_k[] = {512, 768, 4096, 8448},
                  lens_f[] = {67, 96, 4096};
    const int64_t *lens = info->block == 256 ? lens_k : info->block == 32 ? lens_q : lens_f;
    const int n_lens = info->block == 32 || info->block == 256 ? 4 : 3;
    int deq_bad = 0, act_bad = 0, tile_bad = 0, decode_bad = 0;
    double worst = 0.0;
    const hy_qmm_type_t *qt = hy_qmm_type(t);

    if (tr == NULL || tile == NULL) {
        HY_T_OK(0, "%s/%s: no kernels", info->name, hy_isa_name(isa));
        return;
    }
    two = tr->vec_dot_type == HY_DTYPE_Q8_2L || tr->vec_dot_type == HY_DTYPE_Q8_K2L ||
          tr->vec_dot_type == HY_DTYPE_Q16;
    if (legacy && !hy_quant_scalar_kernels_q8[t].traits.vec_dot) {
        /* float types and the types without ggml partners: the default
         * kernels, tested there */
        if (tr != hy_quant_traits(t) || tile != hy_quant_vec_dot_tile(t))
            HY_T_OK(0, "%s/%s/q8: not the default kernels", info->name, hy_isa_name(isa));
        return;
    }
    /* the long rows draw from their own stream, so the other rows' data
     * (and the accuracy bounds measured on it) stay what they were */
    const uint64_t rng_before_long = rng_state;
    for (int li = 0; li < n_lens; li++) {
        int64_t n = lens[li];
        uint64_t rng_saved = rng_state;
        if (li == 3)
            rng_state = rng_before_long ^ 0x5DEECE66Dull;
        size_t wb = hy_dtype_row_bytes(t, n), xb = hy_dtype_row_bytes(tr->vec_dot_type, n);
        uint8_t *w = malloc(wb * NW), *x = malloc(xb * NX), *xr = malloc(xb);
        float *xfa = malloc((size_t)n * NX * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
        float *yr = malloc((size_t)n * sizeof(float)), s[NX * S_STRIDE], d1;

        for (int r = 0; r < NW; r++)
            make_weights(t, w + r * wb, n);
        for (int c = 0; c < NX; c++) {
            float *xf = xfa + c * n;
            for (int64_t i = 0; i < n; i++)
                xf[i] = rng_f(-2.0f, 2.0f) * (c == 3 ? 1e-3f : 1.0f);
            if (c == 5)
                memset(xf, 0, 32 * sizeof(float)); /* an all-zero block: d = 0 */
            if (c == 4 && !legacy) /* LLM-style outlier channels: a few large values */
                for (int64_t i = 7; i < n; i += 61)
                    xf[i] = (i % 2 ? -40.0f : 55.0f) + rng_f(0.0f, 1.0f);
            tr->from_float(xf, x + c * xb, n);
            /* the reference quantizer of the level's own partner format */
            if (hy_quant_quantize_row(tr->vec_dot_type, xf, xr, n) != HY_OK)
                act_bad++;
            if (memcmp(xr, x + c * xb, xb) != 0)
                act_bad++;
            if (two)
                fields_bad += check_2l(tr->vec_dot_type, x + c * xb, xf, n);
        }
        for (int r = 0; r < NW; r++) {
            tr->to_float(w + r * wb, y, n);
            ref->to_float(w + r * wb, yr, n);
            if (memcmp(y, yr, (size_t)n * sizeof(float)) != 0)
                deq_bad++;
            for (int c = 0; c < NX; c++) {
                double dot = 0.0, mag = 0.0, slack = 0.0;
                for (int64_t i = 0; i < n; i++) {
                    double p = (double)yr[i] * deq_act(tr->vec_dot_type, x + c * xb, i);
                    dot += p;
                    mag += fabs(p);
                }
                if (t == HY_DTYPE_Q4_1 && !two) {
                    /* Q8_1's s = f16(d*sum q) with unrounded d: two f16
                     * roundings (2^-11 each, or 2^-25 absolute where d or s
                     * is a subnormal half) enter through the m*s term */
                    for (int64_t b = 0; b < n / 32; b++) {
                        const hy_block_q4_1_t *wb1 = (const hy_block_q4_1_t *)(w + r * wb) + b;
                        const hy_block_q8_1_t *xb1 = (const hy_block_q8_1_t *)(x + c * xb) + b;
                        int qsum = 0;
                        for (int j = 0; j < 32; j++)
                            qsum += xb1->qs[j];
                        slack += fabs(hy_f16_to_f32(wb1->m)) *
                                 (fabs(hy_f16_to_f32(xb1->s)) * 0x1.2p-10 +
                                  0x1p-25 * (1.0 + abs(qsum)));
                    }
                }
                if (two && qt && (qt->flags & HY_QMM_OFFSET)) {
                    /* the M*sum(x) term (Q4_1/Q5_1's m, Q4_K/Q5_K's mins:
                     * qmm.h's M per 32 elements) uses the float sum of
                     * the inputs */
                    dot = mag = 0.0;
                    for (int64_t i = 0; i < n; i++) {
                        int16_t wq[32];
                        float D, M[2];
                        double a = deq_act(tr->vec_dot_type, x + c * xb, i);
                        qt->decode(w + r * wb, i / 32, wq, &D, M);
                        dot += ((double)yr[i] - M[0]) * a + M[0] * xfa[c * n + i];
                        mag += fabs((double)yr[i] * a);
                    }
                }
                tr->vec_dot(n, &d1, w + r * wb, x + c * xb);
                double err = fabs(d1 - dot) / (1e-5 * mag + slack + 1e-30);
                if (!(err <= worst))
                    worst = err;  /* also catches nan */
                if (two && n <= 4096) {
                    /* against the unquantized activations (the rows past
                     * the planes' buffer are there for the tiles' bits):
                     * within the
                     * rounding bound sum|w|*d/2 always, and (rows without
                     * outliers) within 2e-5 of sum|w*x| (typically ~2e-6;
                     * 64-element rows of Q4_1 reach ~1.2e-5) */
                    double df = 0.0, mf = 0.0, bound = 0.0;
                    int64_t bs = tr->vec_dot_type == HY_DTYPE_Q8_K2L ? 256 : 32;
                    for (int64_t i = 0; i < n; i++) {
                        const uint8_t *xc = x + c * xb + (i / bs) * (xb / (n / bs));
                        df += (double)yr[i] * xfa[c * n + i];
                        mf += fabs((double)yr[i] * xfa[c * n + i]);
                        bound += fabs((double)yr[i]) * 0.51 * *(const float *)xc;
                    }
                    err = fabs(d1 - df) / (bound + 2e-7 * mf + 1e-30);
                    if (!(err <= worst_b))
                        worst_b = err;
                    err = fabs(d1 - df) / (2e-5 * mf + 1e-30);
                    if (c != 4 && !(err <= worst_f))
                        worst_f = err;
                    if (c == 4 && !(err <= worst_o))
                        worst_o = err;
                }
            }
        }
        /* tile over all rows must equal vec_dot bit for bit */
        for (int k = 0; k < NX * S_STRIDE; k++)
            s[k] = -1.0f;
        tile(n, s, S_STRIDE, w, wb, NW, x, xb, NX);
        for (int r = 0; r < NW; r++)
            for (int c = 0; c < NX; c++) {
                tr->vec_dot(n, &d1, w + r * wb, x + c * xb);
                if (fbits(d1) != fbits(s[c * S_STRIDE + r]))
                    tile_bad++;
            }
        for (int c = 0; c < NX; c++)
            if (s[c * S_STRIDE + NW] != -1.0f)
                tile_bad++;
        /* decode: one activation row over NWD rows takes the 8-rows-a-pass
         * kernels with software prefetch (8 + 8 + an edge of 5); also bit
         * for bit vec_dot, and nothing written past the last row */
        {
            uint8_t *wd = malloc(wb * NWD);
            float sd[NWD + 1];
            for (int r = 0; r < NWD; r++)
                make_weights(t, wd + r * wb, n);
            sd[NWD] = -1.0f;
            tile(n, sd, 0, wd, wb, NWD, x + 4 * xb, xb, 1);
            for (int r = 0; r < NWD; r++) {
                tr->vec_dot(n, &d1, wd + r * wb, x + 4 * xb);
                if (fbits(d1) != fbits(sd[r]))
                    decode_bad++;
            }
            if (sd[NWD] != -1.0f)
                decode_bad++;
            free(wd);
        }
        free(w); free(x); free(xr); free(xfa); free(y); free(yr);
        if (li == 3)
            rng_state = rng_saved;
    }
    if (two) {
        HY_T_OK(fields_bad == 0, "%s/%s: %s fields: %s, |d*v - x| <= d/2 (%d bad)",
                info->name, hy_isa_name(isa), hy_dtype_info(tr->vec_dot_type)->name,
                tr->vec_dot_type == HY_DTYPE_Q16 ? "|v| <= 32512, s the float sum"
                                                 : "|hi|,|lo| <= 127, sums exact",
                fields_bad);
        HY_T_OK(worst_b <= 1.0, "%s/%s: vec_dot vs double dot of float activations, worst "
                "error %.3g of sum|w|*d/2 + 2e-7*sum|w*x|", info->name, hy_isa_name(isa), worst_b);
        HY_T_OK(worst_f <= 1.0, "%s/%s: same, rows without outliers: worst error %.3g of "
                "2e-5*sum|w*x| (outlier row: %.3g)", info->name, hy_isa_name(isa), worst_f,
                worst_o);
    }
    if (!legacy)
        HY_T_OK(deq_bad == 0, "%s/%s: to_float == scalar reference bit for bit (%d rows differ)",
            info->name, hy_isa_name(isa), deq_bad);
    HY_T_OK(act_bad == 0, "%s/%s%s: from_float (%s) == scalar reference bytes (%d rows differ)",
            info->name, hy_isa_name(isa), legacy ? "/q8" : "", hy_dtype_info(tr->vec_dot_type)->name, act_bad);
    HY_T_OK(worst <= 1.0, "%s/%s%s: vec_dot vs double dot, worst error %.3g of tolerance "
            "(1e-5*sum|w*x|%s)", info->name, hy_isa_name(isa), legacy ? "/q8" : "", worst,
            t == HY_DTYPE_Q4_1 && !two ? " + f16 rounding of s" : "");
    HY_T_OK(tile_bad == 0, "%s/%s%s: tile 21x6 == vec_dot per element (%d differ)",
            info->name, hy_isa_name(isa), legacy ? "/q8" : "", tile_bad);
    HY_T_OK(decode_bad == 0, "%s/%s%s: decode tile %dx1 == vec_dot per element (%d differ)",
            info->name, hy_isa_name(isa), legacy ? "/q8" : "", NWD, decode_bad);
}

/* ---- float-weight tiles (F32/F16/BF16 SGEMM kernels) ----
 * Shapes that reach every path of the blocked kernels: k chunks (n > 512)
 * with a ragged tail (n % 16 != 0), token blocks past 64, edge tiles of
 * 1..3 weight rows and 1..5 token rows, in-register (nx < 3) and panel
 * conversion.  Each element must equal vec_dot bit for bit and lie within
 * 1e-5*sum|w*x| of a double-precision dot, and a token row computed alone
 * must give the bits it gets inside the batch. */
static void test_float_tile(hy_dtype_t t, hy_isa_t isa)
{
    enum { N = 1037, TW = 11, TX = 71 };
    const hy_quant_traits_t *tr = hy_quant_traits(t);
    hy_quant_tile_fn_t tile = hy_quant_vec_dot_tile(t);
    size_t wb = hy_dtype_row_bytes(t, N), xb = N * sizeof(float) + 12; /* odd stride */
    uint8_t *w = malloc(wb * TW);
    float *wf = malloc(sizeof(float) * N * TW);
    uint8_t *x = malloc(xb * TX);
    size_t ss = TW + 3;
    float *s = malloc(sizeof(float) * ss * TX), one = 0.0f, d = 0.0f;
    int dot_bad = 0, alone_bad = 0, small_bad = 0;
    double worst = 0.0;

    if (!tr || !tile || !w || !wf || !x || !s) {
        HY_T_OK(0, "%s/%s: float tile setup", hy_dtype_info(t)->name, hy_isa_name(isa));
        goto done;
    }
    for (int r = 0; r < TW; r++) {
        float *row = wf + (size_t)r * N;
        for (int i = 0; i < N; i++)
            row[i] = rng_f(-2.0f, 2.0f);
        hy_quant_quantize_row(t, row, w + (size_t)r * wb, N);
        tr->to_float(w + (size_t)r * wb, row, N); /* the values the kernel sees */
    }
    for (int c = 0; c < TX; c++)
        for (int i = 0; i < N; i++)
            ((float *)(x + (size_t)c * xb))[i] = rng_f(-1.0f, 1.0f);
    tile(N, s, ss, w, wb, TW, x, xb, TX);
    for (int c = 0; c < TX; c++) {
        const float *xr = (const float *)(x + (size_t)c * xb);
        for (int r = 0; r < TW; r++) {
            double ref = 0.0, mag = 0.0;
            for (int i = 0; i < N; i++) {
                ref += (double)wf[(size_t)r * N + i] * xr[i];
                mag += fabs((double)wf[(size_t)r * N + i] * xr[i]);
            }
            worst = fmax(worst, fabs(s[(size_t)c * ss + r] - ref) / (1e-5 * mag));
            tr->vec_dot(N, &d, w + (size_t)r * wb, xr);
            if (memcmp(&d, &s[(size_t)c * ss + r], sizeof d) != 0)
                dot_bad++;
        }
        /* alone: a 1-token tile (in-register conversion) on this row */
        for (int r = 0; r < TW; r++) {
            tile(N, &one, 1, w + (size_t)r * wb, wb, 1, xr, xb, 1);
            if (memcmp(&one, &s[(size_t)c * ss + r], sizeof one) != 0)
                alone_bad++;
        }
    }
    /* short rows (all tail) through every small tile shape */
    for (int n = 1; n <= 40; n += 13)
        for (int nw = 1; nw <= 5; nw++)
            for (int nx = 1; nx <= 7; nx++) {
                tile(n, s, ss, w, wb, nw, x, xb, nx);
                for (int c = 0; c < nx; c++)
                    for (int r = 0; r < nw; r++) {
                        tr->vec_dot(n, &d, w + (size_t)r * wb, x + (size_t)c * xb);
                        if (memcmp(&d, &s[(size_t)c * ss + r], sizeof d) != 0)
                            small_bad++;
                    }
            }
    HY_T_OK(dot_bad == 0 && alone_bad == 0 && small_bad == 0 && worst <= 1.0,
            "%s/%s: blocked tile %dx%d, n %d: == vec_dot (%d differ), == 1-token tile "
            "(%d differ), short rows (%d differ), worst %.3g of tol 1e-5*sum|w*x|",
            hy_dtype_info(t)->name, hy_isa_name(isa), TW, TX, N, dot_bad, alone_bad,
            small_bad, worst);
done:
    free(w);
    free(wf);
    free(x);
    free(s);
}

static void test_errors(void)
{
    float x[64] = {0};
    uint8_t y[64 * 4];

    HY_T_OK(hy_quant_quantize_row(HY_DTYPE_Q8_0, x, y, 48) == HY_EINVAL &&
            hy_quant_quantize_row(HY_DTYPE_Q8_K, x, y, 64) == HY_EINVAL &&
            hy_quant_quantize_row(HY_DTYPE_Q8_0, x, y, -32) == HY_EINVAL &&
            hy_quant_quantize_row(HY_DTYPE_Q5_0, x, y, 64) == HY_EUNSUPPORTED &&
            hy_quant_quantize_row(HY_DTYPE_IQ4_XS, x, y, 256) == HY_EUNSUPPORTED &&
            hy_quant_quantize_row((hy_dtype_t)77, x, y, 64) == HY_EUNSUPPORTED &&
            hy_quant_quantize_row(HY_DTYPE_Q4_0, x, y, 64) == HY_OK,
            "quantize_row rejects bad lengths and types");
    /* 16 = IQ2_XXS, a GGUF type hyserve has no kernels for */
    HY_T_OK(hy_quant_traits((hy_dtype_t)16) == NULL && hy_quant_traits((hy_dtype_t)200) == NULL &&
            hy_quant_traits(HY_DTYPE_Q8_K) == NULL && hy_quant_vec_dot_tile((hy_dtype_t)16) == NULL &&
            hy_quant_set_isa((hy_isa_t)7) == HY_EUNSUPPORTED,
            "unsupported types and ISA levels are refused");
}

int main(void)
{
    static const hy_dtype_t types[] = {HY_DTYPE_F32, HY_DTYPE_F16, HY_DTYPE_BF16,
                                       HY_DTYPE_Q4_0, HY_DTYPE_Q4_1, HY_DTYPE_Q8_0,
                                       HY_DTYPE_Q4_K, HY_DTYPE_Q5_K, HY_DTYPE_Q6_K,
                                       HY_DTYPE_Q5_0, HY_DTYPE_Q5_1, HY_DTYPE_IQ4_NL,
                                       HY_DTYPE_Q2_K, HY_DTYPE_Q3_K, HY_DTYPE_IQ4_XS};
    hy_isa_t best = hy_cpu_isa();

    test_f16();
    test_f16_row();
    test_bf16();
    test_known_answers();
    test_errors();
    for (int isa = HY_ISA_SCALAR; isa <= HY_ISA_AVX512; isa++) {
        if (hy_quant_set_isa((hy_isa_t)isa) != HY_OK) {
            HY_T_OK(isa > (int)best, "%s kernels # SKIP this CPU lacks %s",
                    hy_isa_name((hy_isa_t)isa), hy_isa_name((hy_isa_t)isa));
            continue;
        }
        for (size_t ti = 0; ti < HY_ARRAY_LEN(types); ti++) {
            test_type_isa(types[ti], (hy_isa_t)isa, 0);
            test_type_isa(types[ti], (hy_isa_t)isa, 1);
        }
        test_float_tile(HY_DTYPE_F32, (hy_isa_t)isa);
        test_float_tile(HY_DTYPE_F16, (hy_isa_t)isa);
        test_float_tile(HY_DTYPE_BF16, (hy_isa_t)isa);
    }
    return hy_t_done();
}
