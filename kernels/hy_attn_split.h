/*
 * hy_attn_split.h - one block of the decode attention kernel (a query head
 * of one token over one part of its KV length) and the merge of the parts,
 * written once for the GPU (hy_attn.cu wraps them in kernels) and for the
 * host emulation in tests/cuda/test_cuda_attn.c, like hy_attn_flash.h whose
 * portability macros (barrier, shuffles, KV element loads) it uses.
 *
 * Each block walks its part of positions lo..pos (sliding window aware) in
 * tiles of HY_AS_THREADS keys: every thread scores one key, the tile's max
 * and sum (block reductions) update an online softmax, then threads (one per
 * output dimension, HY_AS_PER_THREAD dimensions each) accumulate the tile's
 * V rows.  Part layout per (list entry y, head h, part sp): [m, l, acc[hdv]].
 */
#ifndef HY_ATTN_SPLIT_H
#define HY_ATTN_SPLIT_H

#include "hy_attn_flash.h"

#define HY_AS_THREADS 128
#define HY_AS_PER_THREAD (HY_CUK_ATTN_MAX_HEAD / HY_AS_THREADS)

/* Shared floats of a block: q[head_dim] | p[HY_AS_THREADS] | red[32]. */
HY_FA_HD size_t hy_as_smem(int hd)
{
    return sizeof(float) * ((size_t)hd + HY_AS_THREADS + 32);
}

/* Block-wide max (sum) of v: warp shuffles, then one value per warp in red.
 * The leading barrier keeps red from being overwritten while a previous
 * reduction still reads it. */
HY_FA_FN float hy_as_max(float v, float *red, int tid)
{
    const int lane = tid & 31, wid = tid >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, HY_FA_SHFL_XOR(v, o));
    HY_FA_SYNC();
    if (lane == 0)
        red[wid] = v;
    HY_FA_SYNC();
    v = red[0];
    for (int w = 1; w < HY_AS_THREADS / 32; w++)
        v = fmaxf(v, red[w]);
    return v;
}

HY_FA_FN float hy_as_sum(float v, float *red, int tid)
{
    const int lane = tid & 31, wid = tid >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v += HY_FA_SHFL_XOR(v, o);
    HY_FA_SYNC();
    if (lane == 0)
        red[wid] = v;
    HY_FA_SYNC();
    v = 0.0f;
    for (int w = 0; w < HY_AS_THREADS / 32; w++)
        v += red[w];
    return v;
}

/* Block (h, y, sp): query head h of batch row t = toks ? toks[y] : y, part
 * sp (of n_split, at least hy_cuk_parts of the row's keys) of its keys. */
HY_FA_FN void hy_as_block(const hy_cuk_attn_t a, const float *q, const int32_t *toks,
                          float *part, int n_split, int h, int y, int sp, int tid, float *sm)
{
    float *qs = sm, *ps = sm + a.head_dim, *red = ps + HY_AS_THREADS;
    const int t = toks ? toks[y] : y;
    const int g = h / (a.n_head / a.n_head_kv);
    const int pos = a.pos[t];
    const int lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
    const int len = pos - lo + 1, per = hy_cuk_part_keys(len); /* parts past the row's: empty */
    const int j_begin = lo + sp * per;
    const int j_end = pos + 1 < j_begin + per ? pos + 1 : j_begin + per; /* [begin, end) */
    const int32_t *pages = a.pages + a.page_off[a.tok_seq[t]];
    const int hd = a.head_dim, hdv = a.head_dim_v, pt = a.page_tokens;
    float acc[HY_AS_PER_THREAD];
    float m = -INFINITY, l = 0.0f;

    for (int d = tid; d < hd; d += HY_AS_THREADS)
        qs[d] = q[((size_t)t * a.n_head + h) * hd + d];
    HY_FA_UNROLL
    for (int r = 0; r < HY_AS_PER_THREAD; r++)
        acc[r] = 0.0f;
    HY_FA_SYNC();

    for (int j0 = j_begin; j0 < j_end; j0 += HY_AS_THREADS) {
        const int j = j0 + tid;
        const int n = j_end - j0 < HY_AS_THREADS ? j_end - j0 : HY_AS_THREADS;
        float s = -INFINITY;
        if (j < j_end) {
            const uint8_t *kr = a.k_pool + (size_t)pages[j / pt] * a.k_page_bytes +
                                ((size_t)g * pt + j % pt) * a.k_row_bytes;
            float dot = 0.0f;
            HY_FA_UNROLL4 /* the row's loads in flight together; the sum's order is kept */
            for (int d = 0; d < hd; d++)
                dot += qs[d] * hy_fa_kv_ld(kr, a.kv_type, d);
            s = dot * a.scale;
            if (a.softcap > 0.0f)
                s = a.softcap * tanhf(s / a.softcap);
        }
        const float mnew = fmaxf(m, hy_as_max(s, red, tid)); /* finite: the tile has a key */
        const float c = expf(m - mnew);                      /* 0 while m is -inf */
        const float p = j < j_end ? expf(s - mnew) : 0.0f;
        ps[tid] = p;
        l = l * c + hy_as_sum(p, red, tid);                  /* syncs: ps visible */
        HY_FA_UNROLL
        for (int r = 0; r < HY_AS_PER_THREAD; r++)
            acc[r] *= c;
        HY_FA_UNROLL4 /* a key's V loads do not wait for the previous key's sum */
        for (int jj = 0; jj < n; jj++) {
            const int jp = j0 + jj;
            const uint8_t *vr = a.v_pool + (size_t)pages[jp / pt] * a.v_page_bytes +
                                ((size_t)g * pt + jp % pt) * a.v_row_bytes;
            const float pj = ps[jj];
            HY_FA_UNROLL
            for (int r = 0; r < HY_AS_PER_THREAD; r++) {
                const int d = tid + r * HY_AS_THREADS;
                if (d < hdv)
                    acc[r] += pj * hy_fa_kv_ld(vr, a.kv_type, d);
            }
        }
        m = mnew;
        HY_FA_SYNC(); /* ps is rewritten by the next tile */
    }
    float *o = part + (((size_t)y * a.n_head + h) * n_split + sp) * (size_t)(2 + hdv);
    if (tid == 0) {
        o[0] = m;
        o[1] = l;
    }
    HY_FA_UNROLL
    for (int r = 0; r < HY_AS_PER_THREAD; r++) {
        const int d = tid + r * HY_AS_THREADS;
        if (d < hdv)
            o[2 + d] = acc[r];
    }
}

/* out[t][h] = sum_s e^{m_s - M} acc_s / sum_s e^{m_s - M} l_s, t = toks[y],
 * dimensions tid, tid + nth, ...  A part that saw no key has m = -inf,
 * l = 0 and is skipped; every token sees at least its own position, so M
 * is finite. */
HY_FA_FN void hy_as_merge(const float *part, float *out, const int32_t *toks, int n_head,
                          int hdv, int n_split, int h, int y, int tid, int nth)
{
    const int t = toks ? toks[y] : y;
    const float *p = part + ((size_t)y * n_head + h) * n_split * (size_t)(2 + hdv);
    float M = -INFINITY, L = 0.0f;

    for (int s = 0; s < n_split; s++)
        M = fmaxf(M, p[(size_t)s * (2 + hdv)]);
    for (int s = 0; s < n_split; s++) {
        const float ms = p[(size_t)s * (2 + hdv)];
        if (ms > -INFINITY)
            L += expf(ms - M) * p[(size_t)s * (2 + hdv) + 1];
    }
    for (int d = tid; d < hdv; d += nth) {
        float acc = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float ms = p[(size_t)s * (2 + hdv)];
            if (ms > -INFINITY)
                acc += expf(ms - M) * p[(size_t)s * (2 + hdv) + 2 + d];
        }
        out[((size_t)t * n_head + h) * hdv + d] = L > 0.0f ? acc / L : 0.0f;
    }
}

#endif
