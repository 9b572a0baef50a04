/*
 * hy_attn_flash.h - one block of the flash-attention (prefill) kernel,
 * written once for the GPU and for a host emulation: hy_attn.cu includes
 * the block body once per instantiation (HY_FA_DC, HY_FA_BQ, HY_FA_NAME
 * defined before each inclusion) inside its CUDA kernels, and
 * tests/cuda/test_cuda_attn.c runs the very same code with one host
 * coroutine per CUDA thread (HY_FA_SYNC and the warp shuffles emulated),
 * which checks its indexing, shared-memory layout, barriers and shuffles
 * against a reference softmax on a machine without a GPU.
 *
 * Block = HY_FA_THREADS threads = 4 warps, BQ rows (a row is one (token,
 * query head) pair of a tile, see hy_cuk_attn_tile_t).  Warp w owns rows
 * w, w+4, w+8, ...: it scores them (lane c against key c of the tile),
 * updates their running max m and sum l with warp reductions, and
 * accumulates their output (lane owns dimensions lane, lane+32, ...), so a
 * row's state never leaves its warp and only the K/V tile loads need a
 * block barrier.  Heads are zero-padded to a multiple of 32 in shared
 * memory, which leaves the dot products unchanged.  Float32 throughout.
 */
#ifndef HY_ATTN_FLASH_COMMON_H
#define HY_ATTN_FLASH_COMMON_H

#include "hy_kernels.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define HY_FA_FN __device__ __forceinline__
#define HY_FA_HD __host__ __device__ __forceinline__
#define HY_FA_SYNC() __syncthreads()
#define HY_FA_SHFL_XOR(v, o) __shfl_xor_sync(0xffffffffu, (v), (o))
#define HY_FA_SHFL(v, src) __shfl_sync(0xffffffffu, (v), (src))
#define HY_FA_UNROLL _Pragma("unroll")
#define HY_FA_UNROLL4 _Pragma("unroll 4")
typedef float4 hy_fa_f4_t;
#else
/* the host test defines HY_FA_SYNC, HY_FA_SHFL_XOR and HY_FA_SHFL */
#define HY_FA_FN static inline
#define HY_FA_HD static inline
#define HY_FA_UNROLL
#define HY_FA_UNROLL4
typedef struct {
    float x, y, z, w;
} hy_fa_f4_t;
#endif

#define HY_FA_THREADS 128
#define HY_FA_WARPS (HY_FA_THREADS / 32)
#define HY_FA_BK 32                     /* keys per tile: one per lane */
#define HY_FA_MAX_HEAD 256
#define HY_FA_KV_F32 0                  /* hy_dtype_t ids of the KV types */
#define HY_FA_KV_F16 1
#define HY_FA_KV_Q8_0 8

/* Rows per block for heads (hd, hdv): 64, or 32 past 128 dimensions so the
 * accumulator stays at 64 registers a thread. */
HY_FA_HD int hy_fa_rows(int hd, int hdv)
{
    return (hd > 128 || hdv > 128) ? 32 : 64;
}

/* Shared floats for a block: Q [BQ][hdp] | K [BK][hdp + 4] | V [BK][hvp].
 * K rows get 4 floats of padding: lane c reads row c as float4, and a
 * stride of 4 (mod 32) words puts each quarter-warp on distinct banks. */
HY_FA_HD size_t hy_fa_smem(int bq, int hd, int hdv)
{
    const size_t hdp = (size_t)(hd + 31) / 32 * 32, hvp = (size_t)(hdv + 31) / 32 * 32;
    return sizeof(float) * ((size_t)bq * hdp + HY_FA_BK * (hdp + 4) + HY_FA_BK * hvp);
}

/* IEEE half bits -> float (host: no cuda_fp16). */
HY_FA_FN float hy_fa_half(uint16_t h)
{
#ifdef __CUDACC__
    return __half2float(__ushort_as_half(h));
#else
    const int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24)
                     : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
#endif
}

/* Element d of a KV row of type F32, F16 or Q8_0 (blocks of 34 bytes:
 * f16 scale, 32 int8). */
HY_FA_FN float hy_fa_kv_ld(const uint8_t *row, int type, int d)
{
    if (type == HY_FA_KV_F32)
        return ((const float *)row)[d];
    if (type == HY_FA_KV_F16)
        return hy_fa_half(((const uint16_t *)row)[d]);
    const uint8_t *b = row + (d / 32) * 34;
    return (float)(int8_t)b[2 + d % 32] * hy_fa_half((uint16_t)(b[0] | (b[1] << 8)));
}

#endif /* HY_ATTN_FLASH_COMMON_H */

/* ---- the block body: once per (HY_FA_DC, HY_FA_BQ) ---------------------------
 * HY_FA_DC: 32-float chunks of the (padded) head a lane holds (2, 4, 8);
 * HY_FA_BQ: rows per block.  Registers a thread: acc[BQ/4][DC]. */
#if defined(HY_FA_DC) && defined(HY_FA_BQ) && defined(HY_FA_NAME)

HY_FA_FN void HY_FA_NAME(const hy_cuk_attn_t a, const float *q, float *out,
                         const hy_cuk_attn_tile_t tl, int g, int tid, float *sm)
{
    enum { RW = HY_FA_BQ / HY_FA_WARPS };         /* rows per warp */
    const int hd = a.head_dim, hdv = a.head_dim_v;
    const int hdp = (hd + 31) / 32 * 32, hvp = (hdv + 31) / 32 * 32, ks = hdp + 4;
    float *const Qs = sm;                         /* [BQ][hdp] */
    float *const Ks = Qs + (size_t)HY_FA_BQ * hdp; /* [BK][ks] */
    float *const Vs = Ks + (size_t)HY_FA_BK * ks; /* [BK][hvp] */
    const int group = a.n_head / a.n_head_kv, pt = a.page_tokens;
    const int lane = tid & 31, w = tid >> 5;
    const int nrows = tl.n * group;
    const int32_t *pages = a.pages + a.page_off[tl.seq];
    int qp[RW], ql[RW];
    float m[RW], l[RW], acc[RW][HY_FA_DC];

    /* the tile's queries, zero rows past the sequence's end */
    for (int e = tid; e < HY_FA_BQ * hdp; e += HY_FA_THREADS) {
        const int r = e / hdp, d = e - r * hdp, f = tl.r0 + r;
        float x = 0.0f;
        if (f < nrows && d < hd) {
            const int t = tl.first + f / group, h = g * group + f % group;
            x = q[((size_t)t * a.n_head + h) * hd + d];
        }
        Qs[e] = x;
    }
HY_FA_UNROLL
    for (int i = 0; i < RW; i++) {
        const int f = tl.r0 + w + HY_FA_WARPS * i;
        qp[i] = -1;                               /* padding row: sees no key */
        ql[i] = 0;
        if (f < nrows) {
            qp[i] = a.pos[tl.first + f / group];
            ql[i] = a.window > 0 && qp[i] - a.window + 1 > 0 ? qp[i] - a.window + 1 : 0;
        }
        m[i] = -INFINITY;
        l[i] = 0.0f;
HY_FA_UNROLL
        for (int k = 0; k < HY_FA_DC; k++)
            acc[i][k] = 0.0f;
    }

    for (int j0 = tl.kmin; j0 <= tl.kmax; j0 += HY_FA_BK) {
        /* the previous tile's K/V are consumed (first pass: Qs is written) */
        HY_FA_SYNC();
        /* warp w loads keys w, w+4, ...: one page lookup per key, lanes
         * along the row; keys past kmax (the last tile) are zeros */
        for (int c = w; c < HY_FA_BK; c += HY_FA_WARPS) {
            const int j = j0 + c;
            float *const kd = Ks + c * ks, *const vd = Vs + c * hvp;
            if (j <= tl.kmax) {
                const size_t page = (size_t)pages[j / pt], slot = (size_t)g * pt + j % pt;
                const uint8_t *kr = a.k_pool + page * a.k_page_bytes + slot * a.k_row_bytes;
                const uint8_t *vr = a.v_pool + page * a.v_page_bytes + slot * a.v_row_bytes;
                for (int d = lane; d < hdp; d += 32)
                    kd[d] = d < hd ? hy_fa_kv_ld(kr, a.kv_type, d) : 0.0f;
                for (int d = lane; d < hvp; d += 32)
                    vd[d] = d < hdv ? hy_fa_kv_ld(vr, a.kv_type, d) : 0.0f;
            } else {
                for (int d = lane; d < hdp; d += 32)
                    kd[d] = 0.0f;
                for (int d = lane; d < hvp; d += 32)
                    vd[d] = 0.0f;
            }
        }
        HY_FA_SYNC();

        /* s[i] = q_row . k_lane for this warp's rows */
        float s[RW];
HY_FA_UNROLL
        for (int i = 0; i < RW; i++)
            s[i] = 0.0f;
        for (int d = 0; d < hdp; d += 4) {
            const hy_fa_f4_t kv = *(const hy_fa_f4_t *)(Ks + lane * ks + d);
HY_FA_UNROLL
            for (int i = 0; i < RW; i++) {
                const hy_fa_f4_t qv = *(const hy_fa_f4_t *)(Qs + (w + HY_FA_WARPS * i) * hdp + d);
                s[i] = fmaf(qv.x, kv.x, s[i]);
                s[i] = fmaf(qv.y, kv.y, s[i]);
                s[i] = fmaf(qv.z, kv.z, s[i]);
                s[i] = fmaf(qv.w, kv.w, s[i]);
            }
        }

        /* online softmax per row; s[i] becomes the weight of key lane */
        const int j = j0 + lane;
HY_FA_UNROLL
        for (int i = 0; i < RW; i++) {
            float x = s[i] * a.scale;
            if (a.softcap > 0.0f)
                x = a.softcap * tanhf(x / a.softcap);
            if (j > tl.kmax || j > qp[i] || j < ql[i])
                x = -INFINITY;
            float mx = x;
HY_FA_UNROLL
            for (int o = 16; o > 0; o >>= 1)
                mx = fmaxf(mx, HY_FA_SHFL_XOR(mx, o));
            const float mn = fmaxf(m[i], mx);
            /* a row that has seen no key yet (mn = -inf) keeps l = 0, acc = 0 */
            const float c = mn == -INFINITY ? 1.0f : expf(m[i] - mn);
            const float p = x == -INFINITY ? 0.0f : expf(x - mn);
            float ps = p;
HY_FA_UNROLL
            for (int o = 16; o > 0; o >>= 1)
                ps += HY_FA_SHFL_XOR(ps, o);
            l[i] = l[i] * c + ps;
            m[i] = mn;
            s[i] = p;
HY_FA_UNROLL
            for (int k = 0; k < HY_FA_DC; k++)
                acc[i][k] *= c;
        }

        /* acc[i][k] += sum_c p_c(row i) * V[c][lane + 32k] */
HY_FA_UNROLL4
        for (int c = 0; c < HY_FA_BK; c++) {
            float vv[HY_FA_DC];
HY_FA_UNROLL
            for (int k = 0; k < HY_FA_DC; k++)
                vv[k] = 32 * k < hvp ? Vs[c * hvp + lane + 32 * k] : 0.0f;
HY_FA_UNROLL
            for (int i = 0; i < RW; i++) {
                const float pc = HY_FA_SHFL(s[i], c);
HY_FA_UNROLL
                for (int k = 0; k < HY_FA_DC; k++)
                    acc[i][k] = fmaf(pc, vv[k], acc[i][k]);
            }
        }
    }

HY_FA_UNROLL
    for (int i = 0; i < RW; i++) {
        const int f = tl.r0 + w + HY_FA_WARPS * i;
        if (f < nrows) {
            const int t = tl.first + f / group, h = g * group + f % group;
            float *o = out + ((size_t)t * a.n_head + h) * hdv;
            const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
HY_FA_UNROLL
            for (int k = 0; k < HY_FA_DC; k++)
                if (lane + 32 * k < hdv)
                    o[lane + 32 * k] = acc[i][k] * inv;
        }
    }
}

#undef HY_FA_DC
#undef HY_FA_BQ
#undef HY_FA_NAME
#endif
