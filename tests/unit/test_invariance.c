/*
 * test_invariance.c - batch invariance of the CPU backend's kernels, bit for
 * bit (memcmp, no tolerance): a token's output row of an op must not depend
 * on how many tokens share the call, where in the call it sits, or how many
 * threads run it.  Matmul: every weight type at every ISA level this CPU
 * has, each token computed alone (1 thread) against the same token inside
 * calls of 2..64 tokens at several offsets, with 1, 2 and 3 threads, on row
 * counts that leave ragged row groups, with 16- and with 8-bit
 * activations.  Attention: every query decoded
 * alone (one token per call, the decode kernel) against the same query
 * prefilled in one call and in chunks (the prefill kernel), for each KV
 * type, window, softcap, GQA shape and head size, at 1 and 3 threads.
 * Row ops (rmsnorm, rope, l2norm, gated group rmsnorm): a row alone ==
 * the row among 64.
 */
#include "backend/backend.h"
#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_impl.h"
#include "backend/cpu/quant_ref.h"
#include "quant_fill.h"
#include "test.h"
#define HY_TEST_SEED 0x51ED2701B3C4D5E6ULL
#include "cpu_test.h"

#include <math.h>
#include <string.h>

/* ---- matmul -------------------------------------------------------------- */

/* tokens of the matmul cases: calls of up to 64 within the first 64, and
 * longer ones (100, 160) that cross the kernels' 64-token passes */
enum { M_TOK = 160, M_TOK_SHORT = 64 };

/* A weight of n_out rows of k: real quantized data where a quantizer
 * exists, else random bytes with sane f16 factors (K-quants, Q5_0, Q5_1,
 * IQ4_NL, IQ4_XS: every other bit pattern is a valid block). */
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
        for (int64_t b = 0; b < k / info->block; b++)
            hy_test_block_factors(t, dst + (size_t)b * info->block_bytes,
                                  0.01f + 0.01f * (float)(rng_u32() % 100) / 100.0f, 0.005f);
    }
    free(row);
    return d;
}

/* One type at the pinned level: the row of every token alone (1 thread)
 * vs inside calls of nb tokens starting at several offsets, 1/2/3 threads. */
/* Appended to each matmul line: which activation mode the backends run. */
static const char *mm_label = "";

static void mm_type(hy_backend_t *be[3], hy_dtype_t t, int64_t k, int64_t n_out, hy_isa_t isa,
                    bool rows16)
{
    static const int sizes[] = {2, 3, 5, 8, 13, 16, 31, 32, 33, 47, 64, 100, 160};
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
    if (rows16) {
        /* as the loader leaves float weights for the AVX-512 GEMM (and for
         * a lower level pinned after loading) */
        if (data && hy_weight_to_rows16(data, t, n_out, rb) != HY_OK)
            bad++;
        w.layout = HY_WLAYOUT_ROWS16;
    }
    fill(x, (size_t)M_TOK * k, 1.0f);
    /* LLM-like outlier channels in a few tokens */
    for (int tk = 5; tk < M_TOK; tk += 11)
        x[(size_t)tk * k + (size_t)(tk * 7) % k] = 60.0f;
    for (int tk = 0; tk < M_TOK; tk++)
        be[0]->i->matmul(be[0], &w, x + (size_t)tk * k, alone + (size_t)tk * n_out, 1);
    for (size_t si = 0; si < HY_ARRAY_LEN(sizes); si++) {
        int nb = sizes[si];
        for (int off = 0; off + nb <= (nb > M_TOK_SHORT ? M_TOK : M_TOK_SHORT);
             off += nb > 64 ? 60 : nb > 16 ? 17 : 9) {
            be[calls % 3]->i->matmul(be[calls % 3], &w, x + (size_t)off * k, y, nb);
            calls++;
            if (memcmp(y, alone + (size_t)off * n_out, (size_t)nb * n_out * sizeof(float)))
                bad++;
        }
    }
    for (int i = 0; i < 3; i++)
        if (be[i]->i->status(be[i], err) != HY_OK)
            bad++;
    HY_T_OK(bad == 0, "matmul %s/%s%s %lldx%lld%s: rows alone == rows in %d calls of 2..160 "
            "tokens at offsets, 1/2/3 threads, bit for bit (%d calls differ)",
            hy_dtype_info(t)->name, hy_isa_name(isa), mm_label, (long long)k,
            (long long)n_out, rows16 ? " in 16-row groups" : "", calls, bad);
    free(data);
    free(x);
    free(alone);
    free(y);
}

static void test_matmul(hy_backend_t *be[3])
{
    static const hy_dtype_t types[] = {HY_DTYPE_F32,    HY_DTYPE_F16,  HY_DTYPE_BF16,
                                       HY_DTYPE_Q8_0,   HY_DTYPE_Q4_0, HY_DTYPE_Q4_1,
                                       HY_DTYPE_Q4_K,   HY_DTYPE_Q5_K, HY_DTYPE_Q6_K,
                                       HY_DTYPE_Q5_0,   HY_DTYPE_Q5_1, HY_DTYPE_IQ4_NL,
                                       HY_DTYPE_Q2_K,   HY_DTYPE_Q3_K, HY_DTYPE_IQ4_XS};

    for (int isa = HY_ISA_SCALAR; isa <= (int)hy_cpu_isa(); isa++) {
        if (hy_quant_set_isa((hy_isa_t)isa) != HY_OK)
            continue;
        printf("# matmul kernels pinned to %s\n", hy_isa_name((hy_isa_t)isa));
        for (size_t i = 0; i < HY_ARRAY_LEN(types); i++) {
            if (!hy_quant_traits(types[i])) {
                HY_T_OK(0, "matmul %s/%s: no kernels", hy_dtype_info(types[i])->name,
                        hy_isa_name((hy_isa_t)isa));
                continue;
            }
            /* 150 rows: ragged 8- and 16-row groups; 5: fewer than a group */
            /* k = 3 x 256: K-quant blocks and a ragged k-chunk split */
            mm_type(be, types[i], 768, 150, (hy_isa_t)isa, false);
            if (isa == (int)hy_cpu_isa())
                mm_type(be, types[i], 768, 5, (hy_isa_t)isa, false);
            /* Q2_K's half-block sums: once for the tile up to 2,048-long
             * rows, per chunk and 16 rows beyond (qmm_avx2.c's
             * HY_Q2_HS_MAX): 72 x 256 takes the second from 29 tokens */
            if (types[i] == HY_DTYPE_Q2_K && isa == (int)hy_cpu_isa())
                mm_type(be, types[i], 72 * 256, 40, (hy_isa_t)isa, false);
            /* 16-row groups: the float types' (the AVX-512 GEMM's; the
             * gathered rows elsewhere) and the quantized types' where the
             * level has a tile that reads them */
            if (types[i] == HY_DTYPE_F32 || types[i] == HY_DTYPE_F16 ||
                types[i] == HY_DTYPE_BF16 || hy_quant_vec_dot_tile_rows16(types[i]))
                mm_type(be, types[i], 768, 160, (hy_isa_t)isa, true);
        }
    }
    hy_quant_set_isa(hy_cpu_isa());
}

/* matmul_n (q/k/v, gate/up) against matmul once per matrix: the rows are
 * converted once for each run of one activation type, and the bits must
 * be those of separate calls - across a float GEMM in the list (its
 * packing reuses the conversion buffer), repeated types and types whose
 * 16-bit partner is shared but whose 8-bit partner is not (Q5_0, Q8_0). */
static void test_matmul_n(hy_backend_t *be[3])
{
    static const hy_dtype_t types[] = {HY_DTYPE_Q4_1, HY_DTYPE_Q4_1, HY_DTYPE_F16,
                                       HY_DTYPE_Q4_1, HY_DTYPE_Q5_0, HY_DTYPE_Q8_0,
                                       HY_DTYPE_Q4_K, HY_DTYPE_Q6_K, HY_DTYPE_Q5_0};
    enum { NW = HY_ARRAY_LEN(types) };
    static const int toks[] = {1, 7, 100};
    const int64_t k = 768;
    hy_weight_t w[NW];
    const hy_weight_t *wp[NW];
    uint8_t *data[NW];
    float *y1[NW], *yn[NW];
    float *x = malloc((size_t)100 * k * sizeof(float));
    char err[HY_ERR_LEN];
    int bad = 0, runs = 0;

    fill(x, (size_t)100 * k, 1.0f);
    for (int i = 0; i < NW; i++) {
        size_t rb;
        int64_t n_out = 40 + 16 * i;

        data[i] = mm_weight(types[i], k, n_out, &rb);
        w[i] = (hy_weight_t){.type = types[i], .ne = {k, n_out, 1, 1}, .row_bytes = rb,
                             .data = data[i], .name = "inv.matmul_n"};
        wp[i] = &w[i];
        y1[i] = malloc((size_t)100 * (size_t)n_out * sizeof(float));
        yn[i] = malloc((size_t)100 * (size_t)n_out * sizeof(float));
    }
    for (int b = 0; b < 3; b++)
        for (size_t ti = 0; ti < HY_ARRAY_LEN(toks); ti++) {
            for (int i = 0; i < NW; i++) {
                be[b]->i->matmul(be[b], &w[i], x, y1[i], toks[ti]);
                memset(yn[i], 0xff, (size_t)toks[ti] * (size_t)w[i].ne[1] * sizeof(float));
            }
            hy_backend_matmul_n(be[b], wp, NW, x, yn, toks[ti]);
            for (int i = 0; i < NW; i++)
                bad += memcmp(y1[i], yn[i],
                              (size_t)toks[ti] * (size_t)w[i].ne[1] * sizeof(float)) != 0;
            runs++;
            if (be[b]->i->status(be[b], err) != HY_OK)
                bad++;
        }
    HY_T_OK(bad == 0 && be[0]->i->matmul_n != NULL,
            "matmul_n of %d matrices (Q4_1 twice, F16, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K, Q5_0) == "
            "matmul per matrix, bit for bit, %d runs of 1/7/100 tokens at 1/2/3 threads%s "
            "(%d differ)", NW, runs, mm_label, bad);
    for (int i = 0; i < NW; i++) {
        free(data[i]);
        free(y1[i]);
        free(yn[i]);
    }
    free(x);
}

/* ---- attention ----------------------------------------------------------- */

enum { A_SEQS = 2, A_MAXPAGES = 64 };
static const int a_len[A_SEQS] = {250, 71};

typedef struct {
    int nkv, group, hd, hdv, pt;
    hy_dtype_t type;
    int window;
    float softcap;
} acfg_t;

/* A sequence's Q/K/V at every position and its (shuffled) pages. */
typedef struct {
    float *q, *k, *v;       /* [len][nh][hd], [len][nkv][hd], [len][nkv][hdv] */
    float *out[5];          /* per run: [len][nh][hdv] */
    int32_t pages[A_MAXPAGES];
} aseq_t;

typedef struct {
    int seq, n_past, n;
} apart_t;

/* One attention call over a ragged batch of parts; outputs into run r. */
static void a_call(hy_backend_t *be, const acfg_t *c, aseq_t *sq, const apart_t *parts,
                   int n_parts, int r)
{
    const int nh = c->nkv * c->group;
    int n_tok = 0, row = 0;
    for (int i = 0; i < n_parts; i++)
        n_tok += parts[i].n;
    float *q = calloc((size_t)n_tok * nh * c->hd, sizeof(float));
    float *k = calloc((size_t)n_tok * c->nkv * c->hd, sizeof(float));
    float *v = calloc((size_t)n_tok * c->nkv * c->hdv, sizeof(float));
    float *out = malloc((size_t)n_tok * nh * c->hdv * sizeof(float));
    int32_t *pos = malloc((size_t)n_tok * sizeof(int32_t));
    hy_batch_seq_t seqs[A_SEQS];
    hy_batch_t b = {n_tok, NULL, pos, n_parts, seqs};
    hy_attn_params_t p = {nh, c->nkv, c->hd, c->hdv, 1.0f / sqrtf((float)c->hd), c->window,
                          c->softcap};

    for (int i = 0; i < n_parts; i++) {
        aseq_t *s = &sq[parts[i].seq];
        int end = parts[i].n_past + parts[i].n;
        seqs[i] = (hy_batch_seq_t){.first = row, .n = parts[i].n, .n_past = parts[i].n_past,
                                   .pages = s->pages, .n_pages = (end + c->pt - 1) / c->pt,
                                   .state_slot = -1};
        for (int j = 0; j < parts[i].n; j++, row++) {
            int ps = parts[i].n_past + j;
            pos[row] = ps;
            memcpy(q + (size_t)row * nh * c->hd, s->q + (size_t)ps * nh * c->hd,
                   sizeof(float) * nh * c->hd);
            memcpy(k + (size_t)row * c->nkv * c->hd, s->k + (size_t)ps * c->nkv * c->hd,
                   sizeof(float) * c->nkv * c->hd);
            memcpy(v + (size_t)row * c->nkv * c->hdv, s->v + (size_t)ps * c->nkv * c->hdv,
                   sizeof(float) * c->nkv * c->hdv);
        }
    }
    be->i->attention(be, 0, &b, q, k, v, out, &p);
    row = 0;
    for (int i = 0; i < n_parts; i++)
        for (int j = 0; j < parts[i].n; j++, row++)
            memcpy(sq[parts[i].seq].out[r] + (size_t)(parts[i].n_past + j) * nh * c->hdv,
                   out + (size_t)row * nh * c->hdv, sizeof(float) * nh * c->hdv);
    free(q);
    free(k);
    free(v);
    free(out);
    free(pos);
}

static int a_kv(hy_backend_t *be, const acfg_t *c)
{
    hy_kv_layout_t lay = {.n_layers = 1, .n_head_kv = c->nkv, .head_dim_k = c->hd,
                          .head_dim_v = c->hdv, .page_tokens = c->pt,
                          .n_pages = A_SEQS * A_MAXPAGES, .type = c->type};
    char err[HY_ERR_LEN];
    int rc = be->i->kv_init(be, &lay, err);
    if (rc != HY_OK)
        printf("# kv_init: %s\n", err);
    return rc;
}

/* Runs: 0 decode (every token alone, 1 thread, sequence by sequence);
 * 1 both prompts whole in one call (3 threads); 2 chunks of 7 and 64
 * side by side (2 threads); 3 chunks of 64 and 1 (3 threads); 4 decode on
 * 3 threads (the keys of a token shared among them in whole splits). */
static void a_cfg(hy_backend_t *be[3], const acfg_t *c, hy_isa_t isa)
{
    const int nh = c->nkv * c->group;
    aseq_t sq[A_SEQS];
    int perm[A_SEQS * A_MAXPAGES], diff[5] = {0, 0, 0, 0, 0}, ok = 1;
    char err[HY_ERR_LEN] = "";

    for (int i = 0; i < A_SEQS * A_MAXPAGES; i++)
        perm[i] = i;
    for (int i = A_SEQS * A_MAXPAGES - 1; i > 0; i--) {
        int j = (int)(rng_u32() % (uint32_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int s = 0; s < A_SEQS; s++) {
        size_t L = (size_t)a_len[s];
        sq[s].q = malloc(L * nh * c->hd * sizeof(float));
        sq[s].k = malloc(L * c->nkv * c->hd * sizeof(float));
        sq[s].v = malloc(L * c->nkv * c->hdv * sizeof(float));
        fill(sq[s].q, L * nh * c->hd, 2.0f);
        fill(sq[s].k, L * c->nkv * c->hd, 1.5f);
        fill(sq[s].v, L * c->nkv * c->hdv, 1.0f);
        for (int r = 0; r < 5; r++) {
            sq[s].out[r] = malloc(L * nh * c->hdv * sizeof(float));
            memset(sq[s].out[r], 0xff, L * nh * c->hdv * sizeof(float));
        }
        for (int i = 0; i < A_MAXPAGES; i++)
            sq[s].pages[i] = perm[s * A_MAXPAGES + i];
    }
    /* run 0: decode, one token per call */
    ok = ok && a_kv(be[0], c) == HY_OK;
    for (int s = 0; s < A_SEQS && ok; s++)
        for (int p = 0; p < a_len[s]; p++) {
            apart_t one = {s, p, 1};
            a_call(be[0], c, sq, &one, 1, 0);
        }
    /* run 1: both prompts whole */
    ok = ok && a_kv(be[2], c) == HY_OK;
    if (ok) {
        apart_t both[2] = {{0, 0, a_len[0]}, {1, 0, a_len[1]}};
        a_call(be[2], c, sq, both, 2, 1);
    }
    /* runs 2 and 3: chunked prefill of both, side by side */
    for (int r = 2; r < 4 && ok; r++) {
        hy_backend_t *b = be[r == 2 ? 1 : 2];
        int step[2] = {r == 2 ? 7 : 64, r == 2 ? 64 : 1}, done[2] = {0, 0};
        ok = a_kv(b, c) == HY_OK;
        while (ok && (done[0] < a_len[0] || done[1] < a_len[1])) {
            apart_t parts[2];
            int n = 0;
            for (int s = 0; s < A_SEQS; s++)
                if (done[s] < a_len[s]) {
                    parts[n] = (apart_t){s, done[s], HY_MIN(step[s], a_len[s] - done[s])};
                    done[s] += parts[n++].n;
                }
            a_call(b, c, sq, parts, n, r);
        }
    }
    /* run 4: decode again, on 3 threads */
    ok = ok && a_kv(be[2], c) == HY_OK;
    for (int s = 0; s < A_SEQS && ok; s++)
        for (int p = 0; p < a_len[s]; p++) {
            apart_t one = {s, p, 1};
            a_call(be[2], c, sq, &one, 1, 4);
        }
    for (int i = 0; i < 3; i++)
        if (be[i]->i->status(be[i], err) != HY_OK)
            ok = 0;
    for (int s = 0; s < A_SEQS; s++)
        for (int r = 1; r < 5; r++)
            for (int p = 0; p < a_len[s]; p++)
                if (memcmp(sq[s].out[0] + (size_t)p * nh * c->hdv,
                           sq[s].out[r] + (size_t)p * nh * c->hdv, sizeof(float) * nh * c->hdv))
                    diff[r]++;
    HY_T_OK(ok && !diff[1] && !diff[2] && !diff[3] && !diff[4],
            "attention/%s %s kv %d x group %d, head %d/%d, page %d, window %d, softcap %g, "
            "splits of 64: decoded alone == prefilled whole (%d tokens differ) == chunks of "
            "7|64 (%d) == chunks of 64|1 (%d) == decoded on 3 threads (%d), bit for bit %s",
            hy_isa_name(isa), hy_dtype_info(c->type)->name, c->nkv, c->group, c->hd, c->hdv,
            c->pt, c->window, c->softcap, diff[1], diff[2], diff[3], diff[4], err);
    for (int s = 0; s < A_SEQS; s++) {
        free(sq[s].q);
        free(sq[s].k);
        free(sq[s].v);
        for (int r = 0; r < 5; r++)
            free(sq[s].out[r]);
    }
}

static void test_attention(hy_backend_t *be[3])
{
    static const acfg_t cfgs[] = {
        {3, 3, 64, 64, 16, HY_DTYPE_F16, 0, 0},      /* SmolLM2's shape */
        {1, 8, 128, 128, 7, HY_DTYPE_F32, 0, 0},
        {2, 1, 256, 256, 16, HY_DTYPE_Q8_0, 0, 0},
        {2, 2, 64, 48, 5, HY_DTYPE_F16, 37, 0},      /* sliding window */
        {1, 4, 32, 64, 16, HY_DTYPE_F16, 0, 30.0f},  /* softcap */
        {2, 3, 16, 16, 16, HY_DTYPE_F32, 0, 0},      /* small heads */
        {1, 2, 80, 80, 16, HY_DTYPE_F16, 0, 0},      /* not a multiple of 16 */
        {1, 1, 20, 12, 4, HY_DTYPE_F32, 9, 5.0f},    /* odd everything */
        {1, 16, 64, 64, 32, HY_DTYPE_Q8_0, 100, 0},  /* wide GQA, window */
    };

    /* splits of one tile: the 250- and 71-token prompts cross three and one
     * split boundaries, and run 4 shares a token's keys among threads from
     * 128 keys on */
    HY_T_OK(hy_cpu_attn_set_split(64) == HY_OK && hy_cpu_attn_set_split(100) == HY_EINVAL &&
                hy_cpu_attn_set_split(64) == HY_OK,
            "attention splits of 64 keys (100: not a multiple of the tile, refused)");
    for (int isa = HY_ISA_SCALAR; isa <= (int)hy_cpu_isa(); isa++) {
        if (hy_cpu_attn_set_isa((hy_isa_t)isa) != HY_OK)
            continue;
        for (size_t i = 0; i < HY_ARRAY_LEN(cfgs); i++)
            a_cfg(be, &cfgs[i], (hy_isa_t)isa);
    }
    hy_cpu_attn_set_isa(hy_cpu_isa());
    hy_cpu_attn_set_split(HY_ATTN_SPLIT);
}

/* ---- row ops ------------------------------------------------------------- */

/* The per-row ops with a reduction or a position in them: each row alone
 * (1 thread) == the row among 64 (3 threads). */
static void test_row_ops(hy_backend_t *be[3])
{
    enum { R = 64, D = 576, NH = 9, HD = 64 };
    float *x = malloc(sizeof(float) * R * D), *a = malloc(sizeof(float) * R * D);
    float *b = malloc(sizeof(float) * R * D), *z = malloc(sizeof(float) * R * D);
    float wv[D];
    int32_t pos[R];
    hy_weight_t w = {0};
    hy_rope_t rope = {HY_ROPE_NEOX, HD, 10000.0f, 1.0f, 0, 1, 32, 1, 8192, NULL};
    int bad[4] = {0, 0, 0, 0};
    char err[HY_ERR_LEN];

    fill(x, (size_t)R * D, 3.0f);
    fill(z, (size_t)R * D, 2.0f);
    fill(wv, D, 1.0f);
    for (int r = 0; r < R; r++)
        pos[r] = 1000 + 37 * r;
    w.type = HY_DTYPE_F32;
    w.ne[0] = D;
    w.ne[1] = w.ne[2] = w.ne[3] = 1;
    w.row_bytes = sizeof wv;
    w.data = wv;
    w.name = "inv.norm";

    be[2]->i->rmsnorm(be[2], x, &w, a, R, D, 1e-5f);
    for (int r = 0; r < R; r++)
        be[0]->i->rmsnorm(be[0], x + (size_t)r * D, &w, b + (size_t)r * D, 1, D, 1e-5f);
    bad[0] = memcmp(a, b, sizeof(float) * R * D) != 0;

    memcpy(a, x, sizeof(float) * R * D);
    memcpy(b, x, sizeof(float) * R * D);
    be[2]->i->rope(be[2], a, R, NH, HD, pos, &rope);
    for (int r = 0; r < R; r++)
        be[0]->i->rope(be[0], b + (size_t)r * NH * HD, 1, NH, HD, pos + r, &rope);
    bad[1] = memcmp(a, b, sizeof(float) * R * NH * HD) != 0;

    memcpy(a, x, sizeof(float) * R * D);
    memcpy(b, x, sizeof(float) * R * D);
    be[2]->i->l2norm(be[2], a, R, D, D, 1e-6f, 0.5f);
    for (int r = 0; r < R; r++)
        be[0]->i->l2norm(be[0], b + (size_t)r * D, 1, D, D, 1e-6f, 0.5f);
    bad[2] = memcmp(a, b, sizeof(float) * R * D) != 0;

    memcpy(a, x, sizeof(float) * R * D);
    memcpy(b, x, sizeof(float) * R * D);
    be[2]->i->group_rmsnorm_gated(be[2], a, z, D, &w, R, D, 64, 1e-5f);
    for (int r = 0; r < R; r++)
        be[0]->i->group_rmsnorm_gated(be[0], b + (size_t)r * D, z + (size_t)r * D, D, &w, 1, D,
                                      64, 1e-5f);
    bad[3] = memcmp(a, b, sizeof(float) * R * D) != 0;

    HY_T_OK(!bad[0] && !bad[1] && !bad[2] && !bad[3] &&
                be[0]->i->status(be[0], err) == HY_OK && be[2]->i->status(be[2], err) == HY_OK,
            "row ops: a row alone (1 thread) == the row among 64 (3 threads): rmsnorm %s, "
            "rope %s, l2norm %s, gated group rmsnorm %s", bad[0] ? "DIFFERS" : "same",
            bad[1] ? "DIFFERS" : "same", bad[2] ? "DIFFERS" : "same",
            bad[3] ? "DIFFERS" : "same");
    free(x);
    free(a);
    free(b);
    free(z);
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
    test_matmul_n(be);
    {
        hy_backend_t *bad = NULL;
        hy_backend_opts_t o = {.n_threads = 1, .act_bits = 7};
        char err[HY_ERR_LEN] = "";

        HY_T_OK(hy_backend_cpu_new(&bad, &o, err) == HY_EINVAL && bad == NULL &&
                strstr(err, "activation bits 7: must be 8 or 16") != NULL,
                "a backend with 7-bit activations is refused (%s)", err);
        hy_backend_opts_t w = {.n_threads = 1, .weights_memory = 5};
        HY_T_OK(hy_backend_cpu_new(&bad, &w, err) == HY_EINVAL && bad == NULL &&
                strstr(err, "weights memory 5: must be huge pages (0) or mmap (1)") != NULL,
                "a backend with weights memory 5 is refused (%s)", err);
        /* what hy_model_load asks: huge pages unless mmap was chosen */
        hy_backend_t *mm = NULL;
        w.weights_memory = HY_WEIGHTS_MMAP;
        err[0] = '\0';
        HY_T_OK(be[0]->i->weights_huge_pages(be[0]) && hy_backend_cpu_new(&mm, &w, err) == HY_OK &&
                !mm->i->weights_huge_pages(mm),
                "weights on huge pages by default, mapped with HY_WEIGHTS_MMAP (%s)", err);
        if (mm)
            mm->i->free(mm);
    }
    /* the same with 8-bit activations ([engine] activation_bits = 8) */
    {
        hy_backend_t *b8[3] = {NULL, NULL, NULL};
        char err[HY_ERR_LEN];
        int ok = 1;

        for (int i = 0; i < 3; i++) {
            hy_backend_opts_t o = {.n_threads = i + 1, .act_bits = 8};
            ok &= hy_backend_cpu_new(&b8[i], &o, err) == HY_OK;
        }
        HY_T_OK(ok, "backends with 8-bit activations, 1, 2 and 3 threads");
        if (ok) {
            /* which kernels the mode takes: the single-level tiles of Q4_1,
             * Q5_0 and the K-quants Q4_K/Q5_K/Q6_K at AVX-512 (faster
             * there), every other pair as with 16 */
            hy_weight_t w = {.name = "w", .ne = {576, 64, 1, 1}};
            char n16[96], n8[96];
            int same = 0, differ = 0;

            for (int t = 0; t < HY_DTYPE_COUNT; t++) {
                if (!hy_quant_traits((hy_dtype_t)t) || hy_dtype_info((uint32_t)t)->block == 0)
                    continue;
                w.type = (hy_dtype_t)t;
                be[0]->i->kernel_name(be[0], "matmul", &w, 0, n16, sizeof n16);
                b8[0]->i->kernel_name(b8[0], "matmul", &w, 0, n8, sizeof n8);
                if (strcmp(n16, n8) == 0)
                    same++;
                else if (hy_cpu_isa() == HY_ISA_AVX512 &&
                         ((t == HY_DTYPE_Q4_1 && strcmp(n8, "q4_1xq8_1-avx512-tiled") == 0) ||
                          (t == HY_DTYPE_Q5_0 && strcmp(n8, "q5_0xq8_s-avx512-tiled") == 0) ||
                          (t == HY_DTYPE_Q4_K && strcmp(n8, "q4_Kxq8_K-avx512-tiled") == 0) ||
                          (t == HY_DTYPE_Q5_K && strcmp(n8, "q5_Kxq8_K-avx512-tiled") == 0) ||
                          (t == HY_DTYPE_Q6_K && strcmp(n8, "q6_Kxq8_K-avx512-tiled") == 0)))
                    differ++;
                else
                    printf("# unexpected: %s with 8 bits, %s with 16\n", n8, n16);
            }
            HY_T_OK(differ == (hy_cpu_isa() == HY_ISA_AVX512 ? 5 : 0) && same > 7,
                    "8-bit activations change the kernels of Q4_1, Q5_0, Q4_K, Q5_K and Q6_K at "
                    "AVX-512 only (%d changed, %d the same; this CPU: %s)", differ, same,
                    hy_isa_name(hy_cpu_isa()));
            mm_label = " (8-bit activations)";
            test_matmul(b8);
            test_matmul_n(b8);
            mm_label = "";
        }
        for (int i = 0; i < 3; i++)
            if (b8[i])
                b8[i]->i->free(b8[i]);
    }
    test_attention(be);
    test_row_ops(be);
    for (int i = 0; i < 3; i++)
        be[i]->i->free(be[i]);
    return hy_t_done();
}
