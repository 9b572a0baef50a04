/*
 * test_sparse_attn.c - block-sparse attention (backend/cpu/sparse_attn.h)
 * on a paged KV cache with shuffled page ids, GQA (4 query heads to one of
 * 2 KV heads), F32 and F16 rows: each page's compressed key and each
 * block's (4 pages of 16 tokens) are the means of their keys; the choice
 * is the sink, the local blocks and exactly the top-k others by the
 * group's summed scores, finds a planted "needle" block, and ascends; the
 * attention over the chosen blocks equals dense attention in double with
 * every other block masked, for the portable and the AVX2 decode kernels;
 * choosing every block gives the dense kernel's very bits, and so do the
 * pages read where a list of addresses says they lie; bad units and block
 * lists are refused.
 */
#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/sparse_attn.h"
#include "backend/cpu/quant.h"
#include "test.h"
#define HY_TEST_SEED 0x9E3779B97F4A7C15ULL
#include "cpu_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HD 64
#define NKV 2
#define GRP 4      /* query heads per KV head */
#define KVH 1      /* the KV head under test */
#define PT 16
#define BP 4       /* pages per block */
#define T 1000     /* positions: 15 full blocks of 64, then 40 in the 16th */
#define NEEDLE 7   /* the block planted to score highest */

typedef struct {
    hy_dtype_t type;
    size_t esz;                 /* bytes per element */
    int32_t n_pages, pages[T / PT + 1];
    uint8_t *kp, *vp;           /* pools: page p, head g, slot s at (p*NKV + g)*PT + s rows */
    float k[T][HD], v[T][HD];   /* the KV head's keys and values as the pool holds them */
    float q[GRP * HD];
    float out[GRP * HD];
} kv_t;

static void put_row(kv_t *c, uint8_t *pool, int32_t t, const float *x, float *held)
{
    int32_t p = c->pages[t / PT];
    uint8_t *row = pool + (((size_t)p * NKV + KVH) * PT + (size_t)(t % PT)) * HD * c->esz;

    if (c->type == HY_DTYPE_F32) {
        memcpy(row, x, sizeof(float) * HD);
        memcpy(held, x, sizeof(float) * HD);
    } else {
        uint16_t *h = (uint16_t *)(void *)row;

        for (int i = 0; i < HD; i++) {
            h[i] = hy_f32_to_f16(x[i]);
            held[i] = hy_f16_to_f32(h[i]);
        }
    }
}

/* Random keys and values, a query group, and block NEEDLE's keys turned
 * towards the queries (so its mean scores highest of all blocks). */
static void kv_fill(kv_t *c, hy_dtype_t type)
{
    float x[HD], qm[HD] = {0};

    c->type = type;
    c->esz = type == HY_DTYPE_F32 ? 4 : 2;
    c->n_pages = T / PT + 1;
    for (int32_t i = 0; i < c->n_pages; i++)
        c->pages[i] = i;
    for (int32_t i = c->n_pages - 1; i > 0; i--) {
        int32_t j = (int32_t)(rng_u32() % (uint32_t)(i + 1)), s = c->pages[i];

        c->pages[i] = c->pages[j];
        c->pages[j] = s;
    }
    c->kp = calloc((size_t)c->n_pages * NKV * PT * HD, c->esz);
    c->vp = calloc((size_t)c->n_pages * NKV * PT * HD, c->esz);
    fill(c->q, GRP * HD, 1.0f);
    for (int h = 0; h < GRP; h++)
        for (int i = 0; i < HD; i++)
            qm[i] += c->q[h * HD + i] / GRP;
    for (int32_t t = 0; t < T; t++) {
        fill(x, HD, 1.0f);
        if (t / (PT * BP) == NEEDLE)
            for (int i = 0; i < HD; i++)
                x[i] = 0.25f * x[i] + 2.0f * qm[i];
        put_row(c, c->kp, t, x, c->k[t]);
        fill(x, HD, 1.0f);
        put_row(c, c->vp, t, x, c->v[t]);
    }
}

static void kv_free(kv_t *c)
{
    free(c->kp);
    free(c->vp);
}

/* The kernels' view of the token at position pos, heads 0..GRP of KVH. */
static hy_attn_flash_t unit(kv_t *c, const int32_t *pos)
{
    size_t row = HD * c->esz, page = (size_t)NKV * PT * row;
    hy_attn_flash_t f = {
        c->kp + (size_t)KVH * PT * row, c->vp + (size_t)KVH * PT * row, page, page, row, row,
        c->pages, PT, c->type == HY_DTYPE_F32, c->type == HY_DTYPE_F16,
        c->type == HY_DTYPE_Q8_0, NULL,
        c->q, c->out, pos, GRP * HD, GRP * HD, 0, 1, 0, GRP, HD, HD, 0,
        1.0f / sqrtf((float)HD), 0, HY_ATTN_SPLIT, NULL, 0, 0, 0, 0, 0, NULL, NULL,
    };
    return f;
}

/* Dense attention in double of head h at position pos over the positions
 * whose block is in sel[0..n) or is pos's own (the rest masked). */
static void ref(const kv_t *c, int h, int32_t pos, const int32_t *sel, int32_t n, double *o)
{
    static double s[T];
    int32_t bt = PT * BP, cur = pos / bt;
    double mx = -INFINITY, sum = 0;

    for (int32_t j = 0; j <= pos; j++) {
        bool in = j / bt == cur;
        double d = 0;

        for (int32_t i = 0; i < n && !in; i++)
            in = sel[i] == j / bt;
        s[j] = -INFINITY;
        if (!in)
            continue;
        for (int i = 0; i < HD; i++)
            d += (double)c->q[h * HD + i] * c->k[j][i];
        s[j] = d / sqrt((double)HD);
        mx = fmax(mx, s[j]);
    }
    for (int i = 0; i < HD; i++)
        o[i] = 0;
    for (int32_t j = 0; j <= pos; j++) {
        double e = s[j] == -INFINITY ? 0 : exp(s[j] - mx);

        sum += e;
        for (int i = 0; i < HD; i++)
            o[i] += e * c->v[j][i];
    }
    for (int i = 0; i < HD; i++)
        o[i] /= sum;
}

/* Page and block keys; returns the block keys [cur][HD]. */
static float *keys(kv_t *c, const hy_attn_flash_t *f, int32_t cur, const char *name)
{
    float *pk = calloc((size_t)c->n_pages * HD, sizeof(float));
    float *bk = calloc((size_t)cur * HD, sizeof(float));
    double worst_p = 0, worst_b = 0;

    for (int32_t b = 0; b < T / PT; b++)
        hy_sparse_page_key(f, c->pages[b], pk + (size_t)c->pages[b] * HD);
    for (int32_t b = 0; b < T / PT; b++)
        for (int i = 0; i < HD; i++) {
            double m = 0;

            for (int s = 0; s < PT; s++)
                m += c->k[b * PT + s][i];
            worst_p = fmax(worst_p, fabs(m / PT - pk[(size_t)c->pages[b] * HD + i]));
        }
    for (int32_t b = 0; b < cur; b++) {
        hy_sparse_block_key(pk, HD, c->pages + b * BP, BP, HD, bk + (size_t)b * HD);
        for (int i = 0; i < HD; i++) {
            double m = 0;

            for (int s = 0; s < PT * BP; s++)
                m += c->k[b * PT * BP + s][i];
            worst_b = fmax(worst_b, fabs(m / (PT * BP) - bk[(size_t)b * HD + i]));
        }
    }
    HY_T_OK(worst_p < 1e-5 && worst_b < 1e-5,
            "%s: page keys and block keys are the means of their keys (worst %.2g, %.2g)", name,
            worst_p, worst_b);
    free(pk);
    return bk;
}

/* The documented score in double: one head's q . key; several heads'
 * log sum_h p_h(b), p_h the softmax over blocks b0..b1-1 of head h's
 * logits scale * q_h . key (a NaN key counts as -inf). */
static void ref_group(const float *q, int32_t heads, int32_t hd, double scale, const float *keys,
                      size_t stride, int32_t b0, int32_t b1, double *out)
{
    static double lg[8][8192];
    double mx[8], lz[8];

    for (int32_t h = 0; h < heads; h++) {
        mx[h] = -INFINITY;
        for (int32_t b = b0; b < b1; b++) {
            double d = 0;

            for (int32_t i = 0; i < hd; i++)
                d += (double)q[h * hd + i] * keys[(size_t)b * stride + i];
            lg[h][b] = isnan(d) ? -INFINITY : (heads > 1 ? scale : 1.0) * d;
            mx[h] = fmax(mx[h], lg[h][b]);
        }
        lz[h] = 0;
        for (int32_t b = b0; b < b1; b++)
            lz[h] += exp(lg[h][b] - mx[h]);
        lz[h] = mx[h] + log(lz[h]);
    }
    for (int32_t b = b0; b < b1; b++) {
        double s = 0;

        if (heads == 1) {
            out[b] = lg[0][b];
            continue;
        }
        for (int32_t h = 0; h < heads; h++)
            s += exp(lg[h][b] - lz[h]);
        out[b] = s > 0 ? log(s) : -INFINITY;
    }
}

static void t_select(kv_t *c, const float *bk, int32_t cur, const char *name)
{
    hy_sparse_params_t sp = {BP, 3, 1, 2, 0.125f, 0, 0, 0};
    int32_t sel[T], n, best[3] = {-1, -1, -1};
    static float scr[(GRP + 3) * (T + 4)];
    static double score[T];
    bool asc = true, has = true;

    n = hy_sparse_select(c->q, HD, GRP, HD, bk, HD, cur, &sp, sel, scr);
    /* the top 3 of blocks 1 .. cur-3 by the group's score, brute force */
    ref_group(c->q, GRP, HD, 0.125, bk, HD, 1, cur - 2, score);
    for (int32_t b = 1; b < cur - 2; b++) {
        for (int k = 0; k < 3; k++) {
            if (best[k] < 0 || score[b] > score[best[k]]) {
                for (int j = 2; j > k; j--)
                    best[j] = best[j - 1];
                best[k] = b;
                break;
            }
        }
    }
    for (int32_t i = 1; i < n; i++)
        asc &= sel[i] > sel[i - 1];
    for (int k = 0; k < 3; k++) {
        bool in = false;

        for (int32_t i = 0; i < n; i++)
            in |= sel[i] == best[k];
        has &= in;
    }
    HY_T_OK(n == 6 && asc && sel[0] == 0 && sel[4] == cur - 2 && sel[5] == cur - 1 && has &&
                best[0] == NEEDLE,
            "%s: sink 0, local %d..%d and exactly the top 3 by score (%d %d %d, the needle %d "
            "first), ascending: %d %d %d %d %d %d", name, cur - 2, cur - 1, best[0], best[1],
            best[2], NEEDLE, sel[0], sel[1], sel[2], sel[3], sel[4], sel[5]);
    sp.topk = 1000;
    n = hy_sparse_select(c->q, HD, GRP, HD, bk, HD, cur, &sp, sel, scr);
    HY_T_OK(n == cur && sel[0] == 0 && sel[cur - 1] == cur - 1,
            "%s: a top-k past the block count takes every block once (%d)", name, n);
    sp = (hy_sparse_params_t){BP, 0, 0, 0, 0.125f, 0, 0, 0};
    HY_T_OK(hy_sparse_select(c->q, HD, GRP, HD, bk, HD, cur, &sp, sel, scr) == 0 &&
                hy_sparse_select(c->q, HD, GRP, HD, bk, HD, 0, &sp, sel, scr) == 0,
            "%s: nothing asked, nothing chosen (only the token's own block is read)", name);
}

/* The group's log sum exp: no overflow for large logits, no underflow to
 * -inf for small ones, -inf only when every term is, the stride obeyed. */
static void t_lse(void)
{
    const float big[2] = {1000.0f, 1000.0f}, apart[2] = {-1000.0f, 0.0f};
    const float none[3] = {-INFINITY, -INFINITY, -INFINITY};
    const float strided[6] = {0.0f, 99.0f, 1.0f, 99.0f, 2.0f, 99.0f};
    double want = log(exp(0.0) + exp(1.0) + exp(2.0));
    float a = hy_sparse_logsumexp(big, 1, 2), b = hy_sparse_logsumexp(apart, 1, 2);
    float c = hy_sparse_logsumexp(none, 1, 3), d = hy_sparse_logsumexp(strided, 2, 3);
    float e = hy_sparse_logsumexp(apart, 1, 1);

    HY_T_OK(fabs(a - (1000.0 + log(2.0))) < 1e-3 && fabs(b) < 1e-6 && c == -INFINITY &&
                fabs(d - want) < 1e-6 && e == -1000.0f,
            "log sum exp: 1000 twice %.6g, -1000 and 0 %.3g, all -inf %g, every other of "
            "0..2 %.7g (%.7g), one term %g", a, b, c, d, want, e);
}

/* Why several heads each get their softmax: a block head 0 wants
 * (q0 . key 10) and head 1 shuns (-10) sums to 0 with the queries added
 * first, below blocks both find mildly good (0.1 each): the summed query
 * (the rule of one head) leaves it out, the group's rule takes it. */
static void t_select_heads(void)
{
    enum { NB = 40, D = 8, WANT = 20 };
    static float keys[NB][D], scr[(2 + 3) * (NB + 4)];
    float q[2 * D] = {0}, qs[D];
    int32_t sel[NB], n1, n2;
    hy_sparse_params_t sp = {BP, 1, 1, 1, 1.0f / sqrtf((float)D), 0, 0, 0};

    q[0] = 10.0f;
    q[1] = 1.0f;
    q[D] = -10.0f;
    q[D + 1] = 1.0f;
    for (int32_t i = 0; i < D; i++)
        qs[i] = q[i] + q[D + i];
    for (int32_t b = 0; b < NB; b++)
        keys[b][1] = 0.1f + 0.001f * (float)b;
    memset(keys[WANT], 0, sizeof keys[WANT]);
    keys[WANT][0] = 1.0f;
    n1 = hy_sparse_select(qs, D, 1, D, &keys[0][0], D, NB, &sp, sel, scr);
    n1 = n1 == 3 ? sel[1] : -1;
    n2 = hy_sparse_select(q, D, 2, D, &keys[0][0], D, NB, &sp, sel, scr);
    n2 = n2 == 3 ? sel[1] : -1;
    HY_T_OK(n2 == WANT && n1 == NB - 2,
            "two heads: the block one head wants and the other shuns is chosen (block %d; the "
            "summed query takes block %d)", n2, n1);
}

/* Top-p past the top-k: the blocks ranked by the group's probability
 * (each head's softmax over the blocks, averaged; double here), the choice
 * is the shortest prefix of that ranking that holds topp of the mass, at
 * least topk long, where the first max_blocks of the ranking hold it; where
 * they do not, the top-k's own choice - for one head and four, queries
 * from flat (every block about as likely: more than the cap would hold) to
 * pointed (the top-k hold it all), and a top-p of 0 is the top-k's own
 * choice. */
static void t_select_topp(void)
{
    enum { NB = 3000, D = 16, K0 = 8, CAP = 600 };
    static float keys[NB][D], scr[(4 + 3) * (NB + 4)];
    static double p[NB], lg[4][NB];
    static int32_t sel[NB], rank[NB], plain[NB];
    static const float temps[] = {0.05f, 1.0f, 3.0f, 12.0f};
    static const float topps[] = {0.5f, 0.9f, 0.99f};
    float q[4 * D];
    int32_t bad = 0, runs = 0, at_floor = 0, flat = 0, between = 0;
    char what[200] = "";

    for (int32_t b = 0; b < NB; b++)
        fill(keys[b], D, 1.0f);
    for (int heads = 1; heads <= 4; heads += 3)
        for (size_t ti = 0; ti < HY_ARRAY_LEN(temps); ti++)
            for (size_t pi = 0; pi < HY_ARRAY_LEN(topps); pi++) {
                hy_sparse_params_t sp = {BP, K0, 1, 2, 1.0f / sqrtf((float)D), 0,
                                         topps[pi], CAP};
                int32_t sink = 1, local = NB - 2, nc = local - sink, n, c, np;
                double acc = 0, before = 0, capm = 0;
                bool ok = true;

                fill(q, (size_t)heads * D, temps[ti]);
                /* double: each head's softmax over the candidates, averaged */
                for (int32_t b = sink; b < local; b++)
                    p[b] = 0;
                for (int h = 0; h < heads; h++) {
                    double mx = -INFINITY, z = 0;

                    for (int32_t b = sink; b < local; b++) {
                        double d = 0;

                        for (int32_t i = 0; i < D; i++)
                            d += (double)q[h * D + i] * keys[b][i];
                        lg[h][b] = d * sp.scale;
                        mx = fmax(mx, lg[h][b]);
                    }
                    for (int32_t b = sink; b < local; b++)
                        z += exp(lg[h][b] - mx);
                    for (int32_t b = sink; b < local; b++)
                        p[b] += exp(lg[h][b] - mx) / z / heads;
                }
                /* the ranking, best first, ties to the earlier block */
                for (int32_t i = 0; i < nc; i++)
                    rank[i] = sink + i;
                for (int32_t i = 1; i < nc; i++) {
                    int32_t v = rank[i], j = i;

                    for (; j > 0 && p[rank[j - 1]] < p[v]; j--)
                        rank[j] = rank[j - 1];
                    rank[j] = v;
                }
                n = hy_sparse_select(q, D, heads, D, &keys[0][0], D, NB, &sp, sel, scr);
                c = n - sink - 2;
                /* the chosen scored blocks are the ranking's first c, up to
                 * rounding between near-equal neighbours */
                for (int32_t i = 0; i < c; i++)
                    acc += p[rank[i]];
                before = acc - (c > 0 ? p[rank[c - 1]] : 0);
                for (int32_t i = sink; i < sink + c && ok; i++) {
                    double lo = p[sel[i]];

                    ok = lo >= p[rank[c]] * (1 - 1e-4) && sel[i] > sel[i - 1];
                }
                ok &= sel[0] == 0 && sel[n - 2] == NB - 2 && sel[n - 1] == NB - 1;
                ok &= c >= K0 && c <= CAP;
                for (int32_t i = 0; i < CAP; i++)
                    capm += p[rank[i]];
                /* the cap short of the mass: the top-k (float sums: 1e-4
                 * of slack either way) */
                if (capm < topps[pi] - 1e-4)
                    ok &= c == K0;
                /* else the fewest that reach topp */
                else
                    ok &= c == K0 ||
                          (acc >= topps[pi] - 1e-4 && before < topps[pi] + 1e-4);
                ok &= capm < topps[pi] + 1e-4 || acc >= topps[pi] - 1e-4;
                at_floor += c == K0 && capm >= topps[pi];
                flat += c == K0 && capm < topps[pi];
                between += c > K0 && c <= CAP;
                /* with top-p off: the top-k, which the top-p choice holds */
                sp.topp = 0;
                np = hy_sparse_select(q, D, heads, D, &keys[0][0], D, NB, &sp, plain, scr);
                for (int32_t i = 0, j = 0; i < np && ok; i++) {
                    while (j < n && sel[j] < plain[i])
                        j++;
                    ok = j < n && sel[j] == plain[i];
                }
                ok &= np == sink + K0 + 2;
                /* a top-k choice is the top-k's, bit for bit */
                ok &= c != K0 || (np == n && memcmp(sel, plain, sizeof(int32_t) * (size_t)n) == 0);
                runs++;
                if (!ok && bad++ == 0)
                    snprintf(what, sizeof what, "%d head(s), query scale %g, top-p %g: %d chosen "
                             "by score, mass %.6f (%.6f without the last)", heads,
                             (double)temps[ti], (double)topps[pi], c, acc, before);
            }
    HY_T_OK(bad == 0 && at_floor > 0 && flat > 0 && between > 0,
            "top-p: %d of %d choices the shortest prefix of the ranking holding top-p of the "
            "mass, between top-%d and %d, or the top-k where %d cannot hold it (%d at the "
            "floor, %d flat, %d between)%s%s",
            runs - bad, runs, K0, CAP, CAP, at_floor, flat, between, bad ? "; first wrong: " : "",
            what);
}

/* Top-p where the bound from the top-k's own mass lets the cap through and
 * the cap still falls short: 20 blocks of 2% each and the rest sharing
 * 60% evenly - the best 8 and 592 more at 2% would hold 0.99, the best 600
 * hold ~0.52.  So 0.99 is the top-k's choice, bit for bit, and 0.5 the
 * fewest of the 20 and the rest that hold it; every block equally likely
 * is the top-k's choice too (the bound alone rules the cap out). */
static void t_select_topp_short(void)
{
    enum { NB = 3000, D = 16, K0 = 8, CAP = 600, HOT = 20 };
    static float keys[NB][D], scr[(4 + 3) * (NB + 4)];
    static int32_t sel[NB], plain[NB];
    float q[D] = {1.0f};
    int32_t n[3], np[3], c[3];

    for (int pass = 0; pass < 3; pass++) {
        /* one head, scale 1/4: a block's logit is its key[0]; hot blocks
         * spread over the sequence, the others at logit 0 */
        float lhot = pass < 2 ? logf(0.02f / (0.6f / (NB - 3 - HOT))) : 0.0f;
        hy_sparse_params_t sp = {BP, K0, 1, 2, 0.25f, 0, pass == 1 ? 0.5f : 0.99f, CAP};

        memset(keys, 0, sizeof keys);
        for (int32_t b = 0; b < HOT; b++)
            keys[1 + b * 149][0] = 4.0f * lhot;
        n[pass] = hy_sparse_select(q, D, 1, D, &keys[0][0], D, NB, &sp, sel, scr);
        c[pass] = n[pass] - 3;
        sp.topp = 0;
        np[pass] = hy_sparse_select(q, D, 1, D, &keys[0][0], D, NB, &sp, plain, scr);
        if (pass != 1 &&
            !(n[pass] == np[pass] && memcmp(sel, plain, sizeof(int32_t) * (size_t)n[pass]) == 0))
            c[pass] = -1;
    }
    /* 0.5: 20 hot (0.4) and ~500 of the rest at ~0.0002 */
    HY_T_OK(c[0] == K0 && c[1] > HOT + 400 && c[1] < CAP && c[2] == K0,
            "top-p when the cap falls short: 0.99 takes the top-%d's choice (%d), 0.5 %d "
            "blocks, a flat group the top-k's (%d)", K0, c[0], c[1], c[2]);
}

/* The choice over many blocks (several of its scoring chunks, head dims
 * with and without a tail of fewer than 8): every chosen block scores at
 * least as high as every block left out (in double, up to float
 * rounding), equal keys go to the earlier block, a NaN key is never
 * chosen over a number, and the count is hy_kv_sparse_blocks_before's. */
static void t_select_many(void)
{
    enum { NB = 1500, MAXD = 13, TOPK = 40 };
    static const int32_t dims[] = {8, 13, 3};
    static float keys[NB][MAXD];
    static float scr[(3 + 3) * (NB + 4)];
    static int32_t sel[NB];
    static double score[NB];
    float q[3 * MAXD];
    hy_sparse_params_t sp = {BP, TOPK, 2, 3, 0.3f, 0, 0, 0};

    for (size_t di = 0; di < HY_ARRAY_LEN(dims); di++) {
        int32_t hd = dims[di], n, worst_in = -1, best_out = -1, count = 0;
        double lo_in = INFINITY, hi_out = -INFINITY;
        bool in[NB] = {false}, asc = true;

        fill(q, 3 * hd, 1.0f);
        /* rows MAXD floats apart: a key stride other than the head dim */
        for (int32_t b = 0; b < NB; b++)
            fill(keys[b], hd, 1.0f);
        /* block 700 repeats block 900's key; block 333 is NaN */
        for (int32_t i = 0; i < hd; i++) {
            keys[900][i] = 4.0f * q[i];
            keys[700][i] = keys[900][i];
        }
        keys[333][0] = NAN;
        n = hy_sparse_select(q, hd, 3, hd, &keys[0][0], MAXD, NB, &sp, sel, scr);
        ref_group(q, 3, hd, 0.3, &keys[0][0], MAXD, sp.sink_blocks, NB - sp.local_blocks, score);
        for (int32_t i = 0; i < n; i++) {
            in[sel[i]] = true;
            asc &= i == 0 || sel[i] > sel[i - 1];
        }
        for (int32_t b = sp.sink_blocks; b < NB - sp.local_blocks; b++) {
            double d = score[b];

            if (b == 333)
                continue;
            count += in[b];
            if (in[b] && d < lo_in)
                lo_in = d, worst_in = b;
            if (!in[b] && d > hi_out)
                hi_out = d, best_out = b;
        }
        HY_T_OK(n == hy_kv_sparse_blocks_before(NB, 2, 3, TOPK) && asc && in[0] && in[1] &&
                    in[NB - 1] && in[NB - 3] && count == TOPK && !in[333] && in[700] &&
                    in[900] && lo_in >= hi_out - 1e-5 * fabs(hi_out),
                "head dim %d, %d blocks: sink, local and the top %d by score (worst chosen %d "
                "%.6g, best left out %d %.6g), ties and NaN as specified", hd, NB, TOPK,
                worst_in, lo_in, best_out, hi_out);
    }
    /* ties: with every key equal the earliest blocks win */
    for (int32_t b = 0; b < NB; b++)
        for (int32_t i = 0; i < 8; i++)
            keys[b][i] = 0.5f;
    {
        int32_t n = hy_sparse_select(q, 8, 3, 8, &keys[0][0], MAXD, NB, &sp, sel, scr);
        bool first = n == 2 + TOPK + 3;

        for (int32_t i = 0; i < 2 + TOPK && first; i++)
            first = sel[i] == i;
        HY_T_OK(first, "equal scores: the %d earliest blocks after the sink are chosen", TOPK);
    }
}

/* The documented q . key of a block (heads queries summed in head order:
 * one in the choice's rule), as eight running products over i mod 8
 * (lanes j and j + 4 added), finished as ((s0 + s4) + (s2 + s6)) +
 * ((s1 + s5) + (s3 + s7)) */
static float ref_score(const float *q, int32_t heads, int32_t hd, const float *key)
{
    float qs[64], lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0}, p[4];

    for (int32_t i = 0; i < hd; i++) {
        qs[i] = 0;
        for (int32_t h = 0; h < heads; h++)
            qs[i] += q[h * hd + i];
    }
    for (int32_t i0 = 0; i0 < hd; i0 += 8)
        for (int32_t j = 0; j < 4; j++) {
            float a = i0 + j < hd ? qs[i0 + j] * key[i0 + j] : 0.0f;
            float b = i0 + j + 4 < hd ? qs[i0 + j + 4] * key[i0 + j + 4] : 0.0f;

            lo[j] += a;
            hi[j] += b;
        }
    for (int32_t j = 0; j < 4; j++)
        p[j] = lo[j] + hi[j];
    return (p[0] + p[2]) + (p[1] + p[3]);
}

/* The documented score of several heads, in float as the choice computes
 * it: each head's own ref_score times scale, soft-capped, NaN as -inf,
 * minus its log sum exp over blocks b0..b1-1; then the log sum exp over
 * the heads, in head order (hy_sparse_logsumexp's order, its own test
 * below). */
static void ref_group_f(const float *q, int32_t heads, int32_t hd, float scale, float softcap,
                        const float *keys, size_t stride, int32_t b0, int32_t b1, float *out)
{
    static float lg[4][8192];

    for (int32_t h = 0; h < heads; h++) {
        float lz;

        for (int32_t b = b0; b < b1; b++) {
            float x = ref_score(q + h * hd, 1, hd, keys + (size_t)b * stride) * scale;

            if (softcap > 0)
                x = softcap * tanhf(x / softcap);
            lg[h][b] = isnan(x) ? -INFINITY : x;
        }
        lz = hy_sparse_logsumexp(lg[h] + b0, 1, b1 - b0);
        for (int32_t b = b0; b < b1; b++)
            lg[h][b] = lz == -INFINITY ? -INFINITY : lg[h][b] - lz;
    }
    for (int32_t b = b0; b < b1; b++)
        out[b] = hy_sparse_logsumexp(&lg[0][b], 8192, heads);
}

#if defined(__x86_64__) && HY_BUILD_AVX2
#include "backend/cpu/vexp.h"

__attribute__((target("avx2,fma"))) static void exp8(const float *x, float *y)
{
    _mm256_storeu_ps(y, hy_vexp_avx2(_mm256_loadu_ps(x)));
}

__attribute__((target("avx2,fma"))) static void log8(const float *x, float *y)
{
    _mm256_storeu_ps(y, hy_vlog_avx2(_mm256_loadu_ps(x)));
}
#endif

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* The choice's exponentials and logs on 8 lanes give the scalar bits, and
 * so does every step that uses them: a log sum exp and the choice of
 * several heads are the same at the AVX2 level and the scalar one (random
 * keys: no block stands out, near ties everywhere) */
static void t_levels(void)
{
#if defined(__x86_64__) && HY_BUILD_AVX2
    enum { N = 4096, NB = 2000, D = 16 };
    static float x[N], y[N], keys[NB * D], q[9 * D], scr[(9 + 3) * (NB + 4)];
    static int32_t sel[2][NB];
    static const int32_t heads[] = {2, 3, 8, 9}, nbs[] = {37, 300, NB}, ks[] = {16, 64};
    uint32_t r = 7;
    int bad_exp = 0, bad_log = 0, bad_lse = 0, bad_sel = 0, runs = 0, bad_grp = 0, grp = 0;

    if (hy_cpu_isa() < HY_ISA_AVX2) {
        HY_T_OK(1, "the choice at every level # SKIP this CPU lacks AVX2");
        return;
    }
    for (int i = 0; i < N; i++)
        x[i] = i == 0 ? -INFINITY : -100.0f * (float)(lcg(&r) & 0xffff) / 65536.0f;
    for (int i = 0; i < N; i += 8)
        exp8(x + i, y + i);
    for (int i = 0; i < N; i++) {
        float e = hy_vexp1(x[i]);
        bad_exp += memcmp(&e, &y[i], sizeof e) != 0;
    }
    /* the sums a log takes: 1 to n, and the edges of its range cut */
    for (int i = 0; i < N; i++)
        x[i] = i < 8 ? (float[]){1.0f, 2.0f, 0.70710677f * 2, 0.70710683f * 2, 1.4142135f,
                                 1.0000001f, 3.0f, 65536.0f}[i]
                     : 1.0f + 1e5f * (float)(lcg(&r) & 0xffffff) / 16777216.0f;
    for (int i = 0; i < N; i += 8)
        log8(x + i, y + i);
    for (int i = 0; i < N; i++) {
        float l = hy_vlog1(x[i]);
        bad_log += memcmp(&l, &y[i], sizeof l) != 0;
    }
    for (int n = 1; n <= 41; n++) {
        float a, b, v[82];
        for (int i = 0; i < n; i++)
            v[2 * i] = x[i] = (lcg(&r) & 7) == 0
                                  ? -INFINITY
                                  : 20.0f * (float)(lcg(&r) & 0xffff) / 65536.0f;
        hy_quant_set_isa(HY_ISA_SCALAR);
        a = hy_sparse_logsumexp(v, 2, n);
        hy_quant_set_isa(hy_cpu_isa());
        b = hy_sparse_logsumexp(x, 1, n);
        bad_lse += memcmp(&a, &b, sizeof a) != 0;
    }
    for (int i = 0; i < NB * D; i++)
        keys[i] = (float)(lcg(&r) & 0xffff) / 65536.0f - 0.5f;
    for (int i = 0; i < 9 * D; i++)
        q[i] = (float)(lcg(&r) & 0xffff) / 8192.0f - 4.0f;
    for (size_t h = 0; h < HY_ARRAY_LEN(heads); h++)
        for (size_t b = 0; b < HY_ARRAY_LEN(nbs); b++)
            for (size_t k = 0; k < HY_ARRAY_LEN(ks); k++) {
                hy_sparse_params_t sp = {BP, ks[k], 1, 2, 0.25f, 0, 0, 0};
                int32_t n[2];

                for (int l = 0; l < 2; l++) {
                    hy_quant_set_isa(l ? hy_cpu_isa() : HY_ISA_SCALAR);
                    n[l] = hy_sparse_select(q, D, heads[h], D, keys, D, nbs[b], &sp, sel[l], scr);
                }
                bad_sel += n[0] != n[1] || memcmp(sel[0], sel[1], sizeof(int32_t) * (size_t)n[0]);
                runs++;
            }
    /* the group's scores themselves, bit for bit, at both levels */
    for (size_t h = 0; h < HY_ARRAY_LEN(heads); h++)
        for (size_t b = 0; b < HY_ARRAY_LEN(nbs); b++) {
            hy_sparse_params_t sp = {BP, 64, 1, 2, 0.25f, 0, 0, 0};
            int32_t np = (nbs[b] + 3) & ~3;
            float *out = scr + (size_t)heads[h] * (size_t)np;

            hy_quant_set_isa(HY_ISA_SCALAR);
            hy_sparse_group_scores(q, D, heads[h], D, &sp, keys, D, nbs[b], scr, out);
            memcpy(y, out, sizeof(float) * (size_t)np);
            hy_quant_set_isa(hy_cpu_isa());
            hy_sparse_group_scores(q, D, heads[h], D, &sp, keys, D, nbs[b], scr, out);
            bad_grp += memcmp(y, out, sizeof(float) * (size_t)np) != 0;
            grp++;
        }
    hy_quant_set_isa(hy_cpu_isa());
    HY_T_OK(bad_exp == 0 && bad_log == 0 && bad_lse == 0 && bad_sel == 0 && bad_grp == 0,
            "8 lanes give the scalar bits: exp (%d of %d differ), log (%d of %d), log sum exp "
            "(%d of 41), the scores of 2-9 heads (%d of %d), their choice (%d of %d)", bad_exp,
            N, bad_log, N, bad_lse, bad_grp, grp, bad_sel, runs);
#else
    HY_T_OK(1, "the choice at every level # SKIP built without AVX2");
#endif
}

static const float *g_sc;

static int by_rule(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

    if (g_sc[x] != g_sc[y])
        return g_sc[x] > g_sc[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* The choice over long sequences (where it first takes each chunk's best
 * score as a floor) is exactly the rule: the k best by the documented
 * score, NaN as -inf, equal scores to the earlier block; with keys drawn
 * from a few values (many ties), NaN keys among them, needles, every
 * block equal, and top-k from 1 to past the block count. */
static void t_select_rule(void)
{
    enum { NB = 6000, MAXD = 64 };
    static float keys[NB][MAXD], sc[NB];
    static float scr[(3 + 3) * (NB + 4)];
    static int32_t order[NB];
    static int32_t sel[NB], want[NB];
    static const int32_t dims[] = {8, 13, 64}, topks[] = {1, 7, 40, 64, 100, 1499, 7000};
    static const int32_t lens[] = {NB, 4097, 300};
    float q[4 * MAXD];
    int32_t bad = 0, runs = 0, bad_scores = 0, scored = 0;
    char what[160] = "";

    for (size_t di = 0; di < HY_ARRAY_LEN(dims); di++)
        for (int kind = 0; kind < 4; kind++)
            for (size_t li = 0; li < HY_ARRAY_LEN(lens); li++)
                for (size_t ki = 0; ki < HY_ARRAY_LEN(topks); ki++) {
                    int32_t hd = dims[di], nb = lens[li], heads = 1 + kind % 3, n, m = 0;
                    /* a soft-cap with the needles: saturated, they tie */
                    hy_sparse_params_t sp = {BP, topks[ki], 3, 5, 1.0f / sqrtf((float)hd),
                                             kind == 3 ? 2.0f : 0.0f, 0, 0};
                    int32_t sink = HY_MIN(3, nb), local = HY_MAX(nb - 5, sink);
                    int32_t k = HY_MIN(topks[ki], local - sink), w = 0;

                    fill(q, (size_t)(heads * hd), 1.0f);
                    for (int32_t b = 0; b < nb; b++)
                        for (int32_t i = 0; i < hd; i++)
                            /* 0: continuous; 1: three values; 2: all equal;
                             * 3: continuous with NaN and needles */
                            keys[b][i] = kind == 1   ? (float)(rng_u32() % 3) * 0.25f
                                         : kind == 2 ? 0.5f
                                                     : rng_f(1.0f);
                    if (kind == 3)
                        for (int32_t b = 7; b < nb; b += 97) {
                            keys[b][rng_u32() % (uint32_t)hd] = NAN;
                            keys[(b * 31) % nb][0] = 40.0f * (q[0] > 0 ? 1.0f : -1.0f);
                        }
                    n = hy_sparse_select(q, hd, heads, hd, &keys[0][0], MAXD, nb, &sp, sel,
                                         scr);
                    if (heads > 1 && k > 0) {
                        int32_t nbk = local - sink, np = (nbk + 3) & ~3;

                        ref_group_f(q, heads, hd, sp.scale, sp.softcap, &keys[0][0], MAXD, sink,
                                    local, sc);
                        /* the scores themselves, bit for bit */
                        hy_sparse_group_scores(q, hd, heads, hd, &sp, &keys[sink][0], MAXD, nbk,
                                               scr, scr + (size_t)heads * (size_t)np);
                        bad_scores += memcmp(scr + (size_t)heads * (size_t)np, sc + sink,
                                             sizeof(float) * (size_t)nbk) != 0;
                        scored++;
                    }
                    for (int32_t b = sink; b < local && !(heads > 1 && k > 0); b++) {
                        sc[b] = ref_score(q, heads, hd, keys[b]);
                        sc[b] = isnan(sc[b]) ? -INFINITY : sc[b];
                    }
                    for (int32_t b = 0; b < sink; b++)
                        want[w++] = b;
                    /* the rule: by score, best first, then by block */
                    for (int32_t b = sink; b < local; b++)
                        order[b - sink] = b;
                    g_sc = sc;
                    qsort(order, (size_t)(local - sink), sizeof *order, by_rule);
                    for (int32_t j = 0; j < k; j++, m++)
                        want[w++] = order[j];
                    for (int32_t b = local; b < nb; b++)
                        want[w++] = b;
                    /* ascending: sort the chosen middle */
                    for (int32_t i = sink + 1; i < sink + m; i++)
                        for (int32_t j = i; j > sink && want[j - 1] > want[j]; j--) {
                            int32_t t = want[j];

                            want[j] = want[j - 1];
                            want[j - 1] = t;
                        }
                    runs++;
                    if (n != w || memcmp(sel, want, sizeof(int32_t) * (size_t)w) != 0) {
                        if (bad++ == 0)
                            snprintf(what, sizeof what, "head dim %d, %d heads, %d blocks, "
                                     "kind %d, top-%d: %d chosen, the rule %d", hd, heads, nb,
                                     kind, topks[ki], n, w);
                    }
                }
    HY_T_OK(bad == 0, "the choice equals the rule in %d of %d runs (keys continuous, from "
            "three values, all equal, with NaN and needles; 300-6,000 blocks; top-1 to past "
            "the count)%s%s", runs - bad, runs, bad ? ": first differing " : "", what);
    HY_T_OK(bad_scores == 0 && scored > 0, "the group's scores are the rule's bit for bit in "
            "%d of %d runs of 2 and 3 heads", scored - bad_scores, scored);
}

/* The page-id check every step runs over a long sequence's list: the first
 * id outside [0, lim) wherever it lies against the 64-id chunks, -1 for a
 * list that is all inside or empty. */
static void t_ids(void)
{
    static const int32_t at[] = {0, 1, 63, 64, 65, 127, 128, 190, 199};
    int32_t ids[200];
    bool ok = true;

    for (int32_t i = 0; i < 200; i++)
        ids[i] = i % 50;
    ok &= hy_ids_first_outside(ids, 200, 50) == -1 && hy_ids_first_outside(ids, 0, 50) == -1;
    for (size_t k = 0; k < HY_ARRAY_LEN(at); k++) {
        ids[at[k]] = k % 2 ? -1 : 50;
        ok &= hy_ids_first_outside(ids, 200, 50) == at[k];
        ids[199] = 50; /* a later bad id does not hide the first */
        ok &= hy_ids_first_outside(ids, 200, 50) == at[k];
        ids[at[k]] = at[k] % 50;
        ids[199] = 199 % 50;
    }
    HY_T_OK(ok, "hy_ids_first_outside: the first id outside the pool at any offset, -1 when none");
}

typedef void (*kernel_fn)(const hy_attn_flash_t *f, float *scratch);

/* The unit's pages read where a list of addresses says they lie (k_at,
 * v_at; no page ids): copies of them in reverse order in other buffers
 * give the dense kernel's bits (want). */
static void t_at(kv_t *c, const hy_attn_flash_t *f, kernel_fn kernel, const float *want,
                 const char *kname, const char *name)
{
    static float scratch[1 << 16];
    static uint8_t kc[T / PT + 1][PT * HD * sizeof(float)], vc[T / PT + 1][PT * HD * sizeof(float)];
    const uint8_t *kat[T / PT + 1], *vat[T / PT + 1];
    size_t pb = (size_t)PT * HD * c->esz;
    int32_t np = f->pos[f->t0] / PT + 1;
    hy_attn_flash_t g = *f;

    for (int32_t i = 0; i < np; i++) {
        memcpy(kc[np - 1 - i], f->k_base + (size_t)f->pages[i] * f->k_page_bytes, pb);
        memcpy(vc[np - 1 - i], f->v_base + (size_t)f->pages[i] * f->v_page_bytes, pb);
        kat[i] = kc[np - 1 - i];
        vat[i] = vc[np - 1 - i];
    }
    g.k_at = kat;
    g.v_at = vat;
    g.pages = NULL;
    memset(c->out, 0, sizeof c->out);
    kernel(&g, scratch);
    HY_T_OK(memcmp(want, c->out, sizeof c->out) == 0,
            "%s, %s: the pages read at the addresses listed (copies, another order) give the "
            "bits read by page id", name, kname);
}

static void t_attend(kv_t *c, const float *bk, int32_t cur, kernel_fn kernel, const char *kname,
                     const char *name)
{
    static float scratch[1 << 16];
    hy_sparse_params_t sp = {BP, 3, 1, 2, 0.125f, 0, 0, 0};
    int32_t pos = T - 1, sel[T], n, pages[T / PT + 1];
    static float scr[(GRP + 3) * (T + 4)];
    float dense[GRP * HD];
    double o[HD], worst = 0;
    hy_attn_flash_t f = unit(c, &pos);
    int rc;

    n = hy_sparse_select(c->q, HD, GRP, HD, bk, HD, cur, &sp, sel, scr);
    rc = hy_sparse_attend(&f, sel, n, BP, pages, kernel, scratch);
    for (int h = 0; h < GRP; h++) {
        ref(c, h, pos, sel, n, o);
        for (int i = 0; i < HD; i++)
            worst = fmax(worst, fabs(o[i] - c->out[h * HD + i]));
    }
    HY_T_OK(rc == HY_OK && worst < 2e-5,
            "%s, %s: attention over the %d chosen blocks and its own = dense attention with the "
            "others masked (worst %.2g)", name, kname, n, worst);
    /* every block chosen: the dense kernel's own call, bit for bit */
    for (int32_t b = 0; b < cur; b++)
        sel[b] = b;
    rc = hy_sparse_attend(&f, sel, cur, BP, pages, kernel, scratch);
    memcpy(dense, c->out, sizeof dense);
    kernel(&f, scratch);
    HY_T_OK(rc == HY_OK && memcmp(dense, c->out, sizeof dense) == 0,
            "%s, %s: with every block chosen the output is the dense kernel's, bit for bit", name,
            kname);
    t_at(c, &f, kernel, dense, kname, name);
}

static void t_bad(kv_t *c, int32_t cur)
{
    static float scratch[1 << 16];
    int32_t pos[2] = {T - 2, T - 1}, pages[T / PT + 1];
    int32_t twice[2] = {3, 3}, late[1] = {cur}, ok[1] = {2};
    hy_attn_flash_t f = unit(c, pos);

    HY_T_OK(hy_sparse_attend(&f, twice, 2, BP, pages, hy_attn_decode_generic, scratch) == HY_EINVAL &&
                hy_sparse_attend(&f, late, 1, BP, pages, hy_attn_decode_generic, scratch) ==
                    HY_EINVAL &&
                hy_sparse_attend(&f, ok, 1, 0, pages, hy_attn_decode_generic, scratch) == HY_EINVAL,
            "refused: a block twice, the token's own or a later block, blocks of 0 pages");
    f.t1 = 2;
    HY_T_OK(hy_sparse_attend(&f, ok, 1, BP, pages, hy_attn_decode_generic, scratch) == HY_EINVAL,
            "refused: a unit of two tokens");
    f.t1 = 1;
    f.window = 512;
    HY_T_OK(hy_sparse_attend(&f, ok, 1, BP, pages, hy_attn_decode_generic, scratch) == HY_EINVAL,
            "refused: a sliding-window unit");
}

int main(void)
{
    static kv_t c;
    static const hy_dtype_t types[] = {HY_DTYPE_F32, HY_DTYPE_F16};
    int32_t pos = T - 1, cur = pos / (PT * BP);

    for (size_t i = 0; i < HY_ARRAY_LEN(types); i++) {
        const char *name = types[i] == HY_DTYPE_F32 ? "f32" : "f16";
        hy_attn_flash_t f;
        float *bk;

        kv_fill(&c, types[i]);
        f = unit(&c, &pos);
        bk = keys(&c, &f, cur, name);
        t_select(&c, bk, cur, name);
        t_attend(&c, bk, cur, hy_attn_decode_generic, "portable decode", name);
        t_attend(&c, bk, cur, hy_attn_flash_generic, "portable flash", name);
#if defined(__x86_64__) && HY_BUILD_AVX2
        if (hy_cpu_isa() >= HY_ISA_AVX2)
            t_attend(&c, bk, cur, hy_attn_decode_avx2, "avx2 decode", name);
#endif
        if (i == 0) {
            t_bad(&c, cur);
            t_select_many();
            t_lse();
            t_levels();
            t_select_heads();
            t_select_rule();
            t_select_topp();
            t_select_topp_short();
            t_ids();
        }
        free(bk);
        kv_free(&c);
    }
    return hy_t_done();
}
