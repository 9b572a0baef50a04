/*
 * act.c - sigmoid, SiLU, GELU-tanh and SwiGLU as one arithmetic on 16, 8
 * or 1 lanes.  They were libm loops (expf, tanhf): a fifth of Gemma 3's
 * prefill went to tanhf alone.  All four rest on one sigmoid,
 *
 *     e = exp(-|x|)  (vexp.h, <= 1, never overflows)
 *     sigmoid(x) = (x >= 0 ? 1 : e) / (1 + e)
 *
 * SiLU is x * sigmoid(x), SwiGLU silu(g) * u, and GELU-tanh uses
 * 0.5 x (1 + tanh(u)) = x * sigmoid(2u) (exact algebra; 2u is an exact
 * doubling), which needs no tanh and keeps full relative precision where
 * tanh(u) is near -1.  A NaN input gives NaN.  Each lane takes the same
 * IEEE operations in the same order at every level, so the SIMD bodies and
 * the scalar tails agree bit for bit and a token's activations do not
 * depend on where a vector boundary fell.  Built with -ffp-contract=off
 * (cpu.mk): a contracted multiply-add in one level would break that.
 */
#include "backend/cpu/act.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/vexp.h"

#include <math.h>

#define HY_ACT_GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define HY_ACT_GELU_A 0.044715f

static int hy_act_isa = -1;

int hy_cpu_act_set_isa(int isa)
{
    if (isa >= 0 && isa > (int)hy_cpu_isa())
        return HY_EUNSUPPORTED;
    __atomic_store_n(&hy_act_isa, isa, __ATOMIC_RELAXED);
    return HY_OK;
}

/* ---- one lane: the reference every level reproduces ---- */

static inline float hy_act_sig1(float x)
{
    if (x != x)
        return x;
    const float e = hy_vexp1(-fabsf(x));
    return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

static inline float hy_act_gelu_arg1(float x)
{
    const float u = HY_ACT_GELU_C * (x + HY_ACT_GELU_A * x * x * x);
    return u + u;
}

static inline float hy_act_op1(hy_unary_t op, float v)
{
    switch (op) {
    case HY_UNARY_SIGMOID: return hy_act_sig1(v);
    case HY_UNARY_SILU: return v * hy_act_sig1(v);
    default: return v * hy_act_sig1(hy_act_gelu_arg1(v));
    }
}

static void hy_act_scalar(hy_unary_t op, const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = hy_act_op1(op, x[i]);
}

/* The gated forms: y = op(g) * u (SwiGLU with SiLU, GeGLU with GELU-tanh). */
static void hy_act_glu_scalar(hy_unary_t op, const float *g, const float *u, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = hy_act_op1(op, g[i]) * u[i];
}

#if defined(__x86_64__) && HY_BUILD_AVX2

#if HY_BUILD_AVX512
#define HY_ACT_512 __attribute__((target("avx512f"), always_inline)) static inline

HY_ACT_512 __m512 hy_act_sig16(__m512 x)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 nabs = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
    const __m512 e = hy_vexp_avx512(nabs);
    const __mmask16 ge = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    const __m512 s = _mm512_div_ps(_mm512_mask_blend_ps(ge, e, one), _mm512_add_ps(one, e));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), s, x);
}

HY_ACT_512 __m512 hy_act_op16(hy_unary_t op, __m512 v)
{
    if (op == HY_UNARY_SIGMOID)
        return hy_act_sig16(v);
    if (op == HY_UNARY_SILU)
        return _mm512_mul_ps(v, hy_act_sig16(v));
    const __m512 c3 = _mm512_mul_ps(
        _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(HY_ACT_GELU_A), v), v), v);
    const __m512 u = _mm512_mul_ps(_mm512_set1_ps(HY_ACT_GELU_C), _mm512_add_ps(v, c3));
    return _mm512_mul_ps(v, hy_act_sig16(_mm512_add_ps(u, u)));
}

__attribute__((target("avx512f"))) static void hy_act_avx512(hy_unary_t op, const float *x,
                                                              float *y, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, hy_act_op16(op, _mm512_loadu_ps(x + i)));
    hy_act_scalar(op, x + i, y + i, n - i);
}

__attribute__((target("avx512f"))) static void hy_act_glu_avx512(hy_unary_t op,
                                                                  const float *g,
                                                                  const float *u, float *y,
                                                                  size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_mul_ps(hy_act_op16(op, _mm512_loadu_ps(g + i)),
                                              _mm512_loadu_ps(u + i)));
    hy_act_glu_scalar(op, g + i, u + i, y + i, n - i);
}
#endif

#define HY_ACT_256 __attribute__((target("avx2,fma"), always_inline)) static inline

HY_ACT_256 __m256 hy_act_sig8(__m256 x)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = hy_vexp_avx2(_mm256_or_ps(x, _mm256_set1_ps(-0.0f)));
    const __m256 ge = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
    const __m256 s = _mm256_div_ps(_mm256_blendv_ps(e, one, ge), _mm256_add_ps(one, e));
    return _mm256_blendv_ps(s, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

HY_ACT_256 __m256 hy_act_op8(hy_unary_t op, __m256 v)
{
    if (op == HY_UNARY_SIGMOID)
        return hy_act_sig8(v);
    if (op == HY_UNARY_SILU)
        return _mm256_mul_ps(v, hy_act_sig8(v));
    const __m256 c3 = _mm256_mul_ps(
        _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(HY_ACT_GELU_A), v), v), v);
    const __m256 u = _mm256_mul_ps(_mm256_set1_ps(HY_ACT_GELU_C), _mm256_add_ps(v, c3));
    return _mm256_mul_ps(v, hy_act_sig8(_mm256_add_ps(u, u)));
}

__attribute__((target("avx2,fma"))) static void hy_act_avx2(hy_unary_t op, const float *x,
                                                             float *y, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, hy_act_op8(op, _mm256_loadu_ps(x + i)));
    hy_act_scalar(op, x + i, y + i, n - i);
}

__attribute__((target("avx2,fma"))) static void hy_act_glu_avx2(hy_unary_t op,
                                                                 const float *g, const float *u,
                                                                 float *y, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(hy_act_op8(op, _mm256_loadu_ps(g + i)),
                                              _mm256_loadu_ps(u + i)));
    hy_act_glu_scalar(op, g + i, u + i, y + i, n - i);
}
#endif

static int hy_act_level(void)
{
    int isa = __atomic_load_n(&hy_act_isa, __ATOMIC_RELAXED);
    return isa < 0 ? (int)hy_cpu_isa() : isa;
}

bool hy_act(hy_unary_t op, const float *x, float *y, size_t n)
{
    if (op != HY_UNARY_SIGMOID && op != HY_UNARY_SILU && op != HY_UNARY_GELU_TANH)
        return false;
    const int isa = hy_act_level();
    (void)isa;
#if defined(__x86_64__) && HY_BUILD_AVX512
    if (isa == HY_ISA_AVX512) {
        hy_act_avx512(op, x, y, n);
        return true;
    }
#endif
#if defined(__x86_64__) && HY_BUILD_AVX2
    if (isa == HY_ISA_AVX2) {
        hy_act_avx2(op, x, y, n);
        return true;
    }
#endif
    hy_act_scalar(op, x, y, n);
    return true;
}

static void hy_act_glu(hy_unary_t op, const float *g, const float *u, float *y, size_t n)
{
    const int isa = hy_act_level();
    (void)isa;
#if defined(__x86_64__) && HY_BUILD_AVX512
    if (isa == HY_ISA_AVX512) {
        hy_act_glu_avx512(op, g, u, y, n);
        return;
    }
#endif
#if defined(__x86_64__) && HY_BUILD_AVX2
    if (isa == HY_ISA_AVX2) {
        hy_act_glu_avx2(op, g, u, y, n);
        return;
    }
#endif
    hy_act_glu_scalar(op, g, u, y, n);
}

void hy_act_swiglu(const float *g, const float *u, float *y, size_t n)
{
    hy_act_glu(HY_UNARY_SILU, g, u, y, n);
}

void hy_act_geglu(const float *g, const float *u, float *y, size_t n)
{
    hy_act_glu(HY_UNARY_GELU_TANH, g, u, y, n);
}
