/*
 * lightning_kern.h - the lightning-attention kernel body, compiled once per
 * ISA by lightning_kern_{generic,avx2}.c, each of which first defines a
 * vector of HY_LK_W floats (hy_lk_v and its load / store / set1 / add /
 * mul) and HY_LK_WORKER.  Every loop that the vectors widen runs over
 * independent output elements (value columns j, score columns r), and a
 * vector lane performs exactly the scalar code's operations on its element
 * in the same order; products and sums are separate instructions (the
 * objects are built with -ffp-contract=off and the AVX2 build enables no
 * FMA), so both builds produce the same bits: the arithmetic of
 * backend/lightning.h.
 *
 * Per unit (one sequence, one head) the kernel walks the sequence's rows in
 * blocks at absolute positions [bC, (b+1)C): it appends the rows to the
 * block kept in the slot, computes their outputs from the state at the
 * block's start and the block's rows so far, and folds the block into the
 * state once it is complete.  A prefill of many blocks and a one-token
 * decode step go through the same functions, row by row the same sums.
 */
#include <string.h>

/* Rows whose outputs share one pass over S (the inter-block product), and
 * the accumulators a pass keeps (rows x vectors of columns): enough
 * independent sums to hide the add latency also for a single decode row. */
#define HY_LK_ROWS 4
#define HY_LK_ACC 8

#define HY_LK_INLINE static inline __attribute__((always_inline))
/* The tiles' row and vector loops have literal bounds (at most 8): fully
 * unrolled, their accumulators live in registers, not in a stack array. */
#define HY_LK_UNROLL _Pragma("GCC unroll 8")

/* Columns j..j+JV*W-1 of o_r = (sum_i q_r[i] S[i][j]) * lt[r] for NR rows
 * (NR, JV literals at every call: the loops unroll into registers). */
HY_LK_INLINE void hy_lk_inter_cols(const float *restrict S, int d, const float *const *q,
                                   float *const *o, const float *lt, int j, const int NR,
                                   const int JV)
{
    hy_lk_v a[HY_LK_ROWS][HY_LK_ACC];

    HY_LK_UNROLL
    for (int r = 0; r < NR; r++)
        HY_LK_UNROLL
        for (int c = 0; c < JV; c++)
            a[r][c] = hy_lk_zero();
    for (int i = 0; i < d; i++) {
        const float *s = S + (size_t)i * d + j;
        hy_lk_v sv[HY_LK_ACC];
        HY_LK_UNROLL
        for (int c = 0; c < JV; c++)
            sv[c] = hy_lk_load(s + c * HY_LK_W);
        HY_LK_UNROLL
        for (int r = 0; r < NR; r++) {
            const hy_lk_v qv = hy_lk_set1(q[r][i]);
            HY_LK_UNROLL
            for (int c = 0; c < JV; c++)
                a[r][c] = hy_lk_add(a[r][c], hy_lk_mul(qv, sv[c]));
        }
    }
    HY_LK_UNROLL
    for (int r = 0; r < NR; r++)
        HY_LK_UNROLL
        for (int c = 0; c < JV; c++)
            hy_lk_store(o[r] + j + c * HY_LK_W, hy_lk_mul(a[r][c], hy_lk_set1(lt[r])));
}

/* o_r[j] = (sum_i q_r[i] S[i][j]) * lt[r] for the NR rows r: register
 * tiles of NR rows x JV vectors, so a decode row (NR 1) reads S once, in
 * column strips of 8 vectors. */
HY_LK_INLINE void hy_lk_inter(const float *restrict S, int d, const float *const *q,
                              float *const *o, const float *lt, const int NR)
{
    const int JV = HY_LK_ACC / NR;
    int j = 0;

    for (; j + JV * HY_LK_W <= d; j += JV * HY_LK_W)
        hy_lk_inter_cols(S, d, q, o, lt, j, NR, JV);
    for (; j + HY_LK_W <= d; j += HY_LK_W)
        hy_lk_inter_cols(S, d, q, o, lt, j, NR, 1);
    for (; j < d; j++)
        HY_LK_UNROLL
        for (int r = 0; r < NR; r++) {
            float x = 0.0f;
            for (int i = 0; i < d; i++)
                x = x + q[r][i] * S[(size_t)i * d + j];
            o[r][j] = x * lt[r];
        }
}

/* Score columns r..r+RV*W-1 of sc_t[r] = sum_i q_t[i] KT[i][r] for NR rows
 * (sc rows of HY_LIGHTNING_MAX_CHUNK). */
HY_LK_INLINE void hy_lk_dots_cols(const float *const *q, const float *restrict KT, int d, int C,
                                  int r, float (*sc)[HY_LIGHTNING_MAX_CHUNK], const int NR,
                                  const int RV)
{
    hy_lk_v a[HY_LK_ROWS][HY_LK_ACC];

    HY_LK_UNROLL
    for (int t = 0; t < NR; t++)
        HY_LK_UNROLL
        for (int c = 0; c < RV; c++)
            a[t][c] = hy_lk_zero();
    for (int i = 0; i < d; i++) {
        const float *k = KT + (size_t)i * C + r;
        hy_lk_v kv[HY_LK_ACC];
        HY_LK_UNROLL
        for (int c = 0; c < RV; c++)
            kv[c] = hy_lk_load(k + c * HY_LK_W);
        HY_LK_UNROLL
        for (int t = 0; t < NR; t++) {
            const hy_lk_v qv = hy_lk_set1(q[t][i]);
            HY_LK_UNROLL
            for (int c = 0; c < RV; c++)
                a[t][c] = hy_lk_add(a[t][c], hy_lk_mul(qv, kv[c]));
        }
    }
    HY_LK_UNROLL
    for (int t = 0; t < NR; t++)
        HY_LK_UNROLL
        for (int c = 0; c < RV; c++)
            hy_lk_store(sc[t] + r + c * HY_LK_W, a[t][c]);
}

/* sc_t[r] = sum_i q_t[i] KT[i][r] for r = 0..n-1 and NR rows (KT rows of
 * C floats); each score is its own sum in i order, however grouped. */
HY_LK_INLINE void hy_lk_dots(const float *const *q, const float *restrict KT, int d, int C, int n,
                             float (*sc)[HY_LIGHTNING_MAX_CHUNK], const int NR)
{
    const int RV = HY_LK_ACC / NR;
    /* vectors may run past n up to C: those columns hold other rows (or the
     * zeroed slot), and their scores are never read */
    const int nv = HY_MIN(C, (n + HY_LK_W - 1) / HY_LK_W * HY_LK_W);
    int r = 0;

    for (; r + RV * HY_LK_W <= nv; r += RV * HY_LK_W)
        hy_lk_dots_cols(q, KT, d, C, r, sc, NR, RV);
    if (RV > 2)
        for (; r + 2 * HY_LK_W <= nv; r += 2 * HY_LK_W)
            hy_lk_dots_cols(q, KT, d, C, r, sc, NR, 2);
    for (; r + HY_LK_W <= nv; r += HY_LK_W)
        hy_lk_dots_cols(q, KT, d, C, r, sc, NR, 1);
    for (; r < n; r++)
        HY_LK_UNROLL
        for (int t = 0; t < NR; t++) {
            float x = 0.0f;
            for (int i = 0; i < d; i++)
                x = x + q[t][i] * KT[(size_t)i * C + r];
            sc[t][r] = x;
        }
}

/* Columns j..j+JV*W-1 of o[j] = o[j] + w[r] V[r][j], r = 0..n-1 ascending. */
HY_LK_INLINE void hy_lk_intra_cols(float *restrict o, const float *restrict w,
                                   const float *restrict V, int d, int n, int j, const int JV)
{
    hy_lk_v a[HY_LK_ACC];

    HY_LK_UNROLL
    for (int c = 0; c < JV; c++)
        a[c] = hy_lk_load(o + j + c * HY_LK_W);
    for (int r = 0; r < n; r++) {
        const hy_lk_v wv = hy_lk_set1(w[r]);
        const float *vr = V + (size_t)r * d + j;
        HY_LK_UNROLL
        for (int c = 0; c < JV; c++)
            a[c] = hy_lk_add(a[c], hy_lk_mul(wv, hy_lk_load(vr + c * HY_LK_W)));
    }
    HY_LK_UNROLL
    for (int c = 0; c < JV; c++)
        hy_lk_store(o + j + c * HY_LK_W, a[c]);
}

/* o[j] = o[j] + w[r] V[r][j], r = 0..n-1 ascending (V rows of d). */
static void hy_lk_intra(float *restrict o, const float *restrict w, const float *restrict V, int d,
                        int n)
{
    int j = 0;

    for (; j + HY_LK_ACC * HY_LK_W <= d; j += HY_LK_ACC * HY_LK_W)
        hy_lk_intra_cols(o, w, V, d, n, j, HY_LK_ACC);
    for (; j + HY_LK_W <= d; j += HY_LK_W)
        hy_lk_intra_cols(o, w, V, d, n, j, 1);
    for (; j < d; j++) {
        float x = o[j];
        for (int r = 0; r < n; r++)
            x = x + w[r] * V[(size_t)r * d + j];
        o[j] = x;
    }
}

/* S rows i0..i0+NR-1: S = S lam[C], then + (KT[i][r] lam[C-1-r]) V[r] for
 * r ascending. */
HY_LK_INLINE void hy_lk_fold_rows(float *restrict S, const float *restrict KT,
                                  const float *restrict V, int d, int C,
                                  const float *restrict lam, int i0, const int NR)
{
    float kw[HY_LK_ROWS][HY_LIGHTNING_MAX_CHUNK];
    const float lc = lam[C];
    int j = 0;

    HY_LK_UNROLL
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < C; c++)
            kw[r][c] = KT[(size_t)(i0 + r) * C + c] * lam[C - 1 - c];
    for (; j + 2 * HY_LK_W <= d; j += 2 * HY_LK_W) {
        hy_lk_v a[HY_LK_ROWS][2];
        HY_LK_UNROLL
        for (int r = 0; r < NR; r++) {
            const float *s = S + (size_t)(i0 + r) * d + j;
            a[r][0] = hy_lk_mul(hy_lk_load(s), hy_lk_set1(lc));
            a[r][1] = hy_lk_mul(hy_lk_load(s + HY_LK_W), hy_lk_set1(lc));
        }
        for (int c = 0; c < C; c++) {
            const float *vr = V + (size_t)c * d + j;
            const hy_lk_v v0 = hy_lk_load(vr), v1 = hy_lk_load(vr + HY_LK_W);
            HY_LK_UNROLL
            for (int r = 0; r < NR; r++) {
                const hy_lk_v kv = hy_lk_set1(kw[r][c]);
                a[r][0] = hy_lk_add(a[r][0], hy_lk_mul(kv, v0));
                a[r][1] = hy_lk_add(a[r][1], hy_lk_mul(kv, v1));
            }
        }
        HY_LK_UNROLL
        for (int r = 0; r < NR; r++) {
            float *s = S + (size_t)(i0 + r) * d + j;
            hy_lk_store(s, a[r][0]);
            hy_lk_store(s + HY_LK_W, a[r][1]);
        }
    }
    for (; j + HY_LK_W <= d; j += HY_LK_W) {
        hy_lk_v a[HY_LK_ROWS];
        HY_LK_UNROLL
        for (int r = 0; r < NR; r++)
            a[r] = hy_lk_mul(hy_lk_load(S + (size_t)(i0 + r) * d + j), hy_lk_set1(lc));
        for (int c = 0; c < C; c++) {
            const hy_lk_v v0 = hy_lk_load(V + (size_t)c * d + j);
            HY_LK_UNROLL
            for (int r = 0; r < NR; r++)
                a[r] = hy_lk_add(a[r], hy_lk_mul(hy_lk_set1(kw[r][c]), v0));
        }
        HY_LK_UNROLL
        for (int r = 0; r < NR; r++)
            hy_lk_store(S + (size_t)(i0 + r) * d + j, a[r]);
    }
    for (; j < d; j++)
        HY_LK_UNROLL
        for (int r = 0; r < NR; r++) {
            float x = S[(size_t)(i0 + r) * d + j] * lc;
            for (int c = 0; c < C; c++)
                x = x + kw[r][c] * V[(size_t)c * d + j];
            S[(size_t)(i0 + r) * d + j] = x;
        }
}

/* The chunk-1 recurrence for one token: S = S lam1 + k v^T, o = S^T q. */
static void hy_lk_step(float *restrict S, const float *restrict q, const float *restrict k,
                       const float *restrict v, float lam1, float *restrict o, int d)
{
    const hy_lk_v lv = hy_lk_set1(lam1);

    memset(o, 0, sizeof(float) * (size_t)d);
    for (int i = 0; i < d; i++) {
        float *restrict row = S + (size_t)i * d;
        const float ki = k[i], qi = q[i];
        const hy_lk_v kv = hy_lk_set1(ki), qv = hy_lk_set1(qi);
        int j = 0;

        for (; j + HY_LK_W <= d; j += HY_LK_W) {
            const hy_lk_v s = hy_lk_add(hy_lk_mul(hy_lk_load(row + j), lv),
                                        hy_lk_mul(kv, hy_lk_load(v + j)));
            hy_lk_store(row + j, s);
            hy_lk_store(o + j, hy_lk_add(hy_lk_load(o + j), hy_lk_mul(s, qv)));
        }
        for (; j < d; j++) {
            const float s = row[j] * lam1 + ki * v[j];
            row[j] = s;
            o[j] = o[j] + s * qi;
        }
    }
}

/* One (sequence, head): the sequence's rows, block by block. */
static void hy_lk_unit(const hy_lightning_job_t *j, const hy_batch_seq_t *sq, int h)
{
    const int d = j->d, C = j->chunk;
    const int64_t ldo = (int64_t)j->n_head * d;
    const float *lam = j->lam + (size_t)h * (size_t)(C + 1);
    float *S = hy_cpu_state_rec(j->cpu, sq->state_slot, j->rec_layer) +
               (size_t)h * (size_t)hy_lightning_head_floats(d, C);
    float *KT = S + (size_t)d * d, *V = KT + (size_t)d * C;
    float sc[HY_LK_ROWS][HY_LIGHTNING_MAX_CHUNK], w[HY_LIGHTNING_MAX_CHUNK];
    int m, t0;

#define HY_LK_ROW(ptr, r) ((ptr) + (int64_t)(r) * j->row_stride + (int64_t)h * j->head_stride)
    if (C <= 1) {
        for (int32_t t = 0; t < sq->n; t++) {
            const int64_t r = (int64_t)sq->first + t;
            hy_lk_step(S, HY_LK_ROW(j->q, r), HY_LK_ROW(j->k, r), HY_LK_ROW(j->v, r), lam[1],
                       j->o + r * ldo + (int64_t)h * d, d);
        }
        return;
    }
    m = (int)(sq->n_past % C);
    for (t0 = 0; t0 < sq->n;) {
        /* rows a..b-1 of the block are this call's rows t0.. */
        const int a = m, b = (int)HY_MIN((int64_t)C, (int64_t)m + (sq->n - t0));
        const int64_t row0 = (int64_t)sq->first + t0 - a; /* batch row of block row 0 */
        int t;

        for (t = a; t < b; t++) {
            const float *kr = HY_LK_ROW(j->k, row0 + t);
            for (int i = 0; i < d; i++)
                KT[(size_t)i * C + t] = kr[i];
            memcpy(V + (size_t)t * d, HY_LK_ROW(j->v, row0 + t), sizeof(float) * (size_t)d);
        }
        for (t = a; t < b;) {
            const float *q[HY_LK_ROWS];
            float *o[HY_LK_ROWS], lt[HY_LK_ROWS];
            const int nr = b - t >= HY_LK_ROWS ? HY_LK_ROWS : 1;

            for (int r = 0; r < nr; r++) {
                q[r] = HY_LK_ROW(j->q, row0 + t + r);
                o[r] = j->o + (row0 + t + r) * ldo + (int64_t)h * d;
                lt[r] = lam[t + r + 1];
            }
            /* the rows' part from the block's entering state, then their
             * scores against the block's rows 0..t+nr-1 (a row uses only
             * those up to itself) and the block's part */
            if (nr == HY_LK_ROWS) {
                hy_lk_inter(S, d, q, o, lt, HY_LK_ROWS);
                hy_lk_dots(q, KT, d, C, t + nr, sc, HY_LK_ROWS);
            } else {
                hy_lk_inter(S, d, q, o, lt, 1);
                hy_lk_dots(q, KT, d, C, t + nr, sc, 1);
            }
            for (int r = 0; r < nr; r++) {
                for (int c = 0; c <= t + r; c++)
                    w[c] = sc[r][c] * lam[t + r - c];
                hy_lk_intra(o[r], w, V, d, t + r + 1);
            }
            t += nr;
        }
        if (b == C) {
            int i = 0;
            for (; i + HY_LK_ROWS <= d; i += HY_LK_ROWS)
                hy_lk_fold_rows(S, KT, V, d, C, lam, i, HY_LK_ROWS);
            for (; i < d; i++)
                hy_lk_fold_rows(S, KT, V, d, C, lam, i, 1);
        }
        m = b == C ? 0 : b;
        t0 += b - a;
    }
#undef HY_LK_ROW
}

void HY_LK_WORKER(void *arg, int ith, int nth)
{
    hy_lightning_job_t *j = arg;
    int32_t unit;

    (void)ith;
    (void)nth;
    while ((unit = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n_units)
        hy_lk_unit(j, &j->b->seqs[unit / j->n_head], unit % j->n_head);
}
