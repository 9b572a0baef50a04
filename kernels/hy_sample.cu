/*
 * hy_sample.cu - sampling on the device, one block of 1024 threads per row
 * of logits (semantics: src/backend/cuda/sample_ref.c).  Nothing is sorted:
 * the top_k and top_p cuts are found by binary search over the order-
 * preserving 32-bit keys of the logits (count / probability mass of the
 * logits at or above a key), the cut inside a group of equal logits is
 * taken by id as in the host's total order, and the draw walks the
 * vocabulary in id order: every thread owns a contiguous chunk, a block
 * scan of the chunks' weights finds the chunk the uniform lands in.
 * Every reduction has a fixed order, so results are deterministic.
 */
#include "hy_sample.h"
#include "backend/cuda/sample.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define NT HY_CUK_SAMPLE_THREADS
#define NW (NT / 32)

/* ---- block reductions (all NT threads must call them) ------------------------- */

template <typename T> __device__ __forceinline__ T warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T> __device__ T block_sum(T v, T *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    v = warp_sum(v);
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < NW ? sh[lane] : (T)0;
        v = warp_sum(v);
        if (lane == 0)
            sh[NW] = v;
    }
    __syncthreads();
    v = sh[NW];
    __syncthreads(); /* sh is reused by the next reduction */
    return v;
}

/* Better of (l, id) pairs: higher logit, then lower id. */
__device__ __forceinline__ bool better(float l, int id, float bl, int bid)
{
    return l > bl || (l == bl && id < bid);
}

/* Warp-wide best (l, id), left in every lane. */
__device__ __forceinline__ void warp_best(float *l, int *id)
{
    for (int o = 16; o > 0; o >>= 1) {
        float l2 = __shfl_xor_sync(0xffffffffu, *l, o);
        int i2 = __shfl_xor_sync(0xffffffffu, *id, o);
        if (better(l2, i2, *l, *id)) {
            *l = l2;
            *id = i2;
        }
    }
}

/* Block-wide best (l, id); returns it in *ol / *oid on every thread. */
__device__ void block_best(float l, int id, float *shl, int *shi, float *ol, int *oid)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    warp_best(&l, &id);
    if (lane == 0) {
        shl[warp] = l;
        shi[warp] = id;
    }
    __syncthreads();
    if (warp == 0) {
        l = lane < NW ? shl[lane] : -INFINITY;
        id = lane < NW ? shi[lane] : INT32_MAX;
        warp_best(&l, &id);
        if (lane == 0) {
            shl[NW] = l;
            shi[NW] = id;
        }
    }
    __syncthreads();
    *ol = shl[NW];
    *oid = shi[NW];
    __syncthreads();
}

/* Exclusive prefix sum over the block (thread order); total in *tot. */
template <typename T> __device__ T block_exscan(T v, T *sh, T *tot)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    T inc = v;

    for (int o = 1; o < 32; o <<= 1) {
        T n = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o)
            inc += n;
    }
    T ex = __shfl_up_sync(0xffffffffu, inc, 1);
    if (lane == 0)
        ex = (T)0;
    if (lane == 31)
        sh[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        T w = lane < NW ? sh[lane] : (T)0, wi = w;
        for (int o = 1; o < 32; o <<= 1) {
            T n = __shfl_up_sync(0xffffffffu, wi, o);
            if (lane >= o)
                wi += n;
        }
        if (lane < NW)
            sh[lane] = wi - w; /* exclusive prefix of the warps */
        if (lane == 31)
            sh[NW] = wi;
    }
    __syncthreads();
    T r = sh[warp] + ex;
    *tot = sh[NW];
    __syncthreads();
    return r;
}

/* -0 and +0 are one value (as the host compares them) */
__device__ __forceinline__ uint32_t key_of(float l)
{
    return hy_sample_key(__float_as_uint(l == 0.0f ? 0.0f : l));
}

__device__ __forceinline__ float val_of(uint32_t k)
{
    return __uint_as_float((k & 0x80000000u) ? k & 0x7fffffffu : ~k);
}

/* Elements with key >= k (strided: coalesced). */
__device__ int count_ge(const float *x, int n, uint32_t k, int *sh)
{
    int c = 0;

    for (int v = threadIdx.x; v < n; v += NT)
        c += key_of(x[v]) >= k;
    return block_sum(c, sh);
}

__device__ int count_eq(const float *x, int n, uint32_t k, int *sh)
{
    int c = 0;

    for (int v = threadIdx.x; v < n; v += NT)
        c += key_of(x[v]) == k;
    return block_sum(c, sh);
}

/* Probability mass (weights exp(l - maxl)) of elements with key >= k, or
 * key > k when strict. */
__device__ double mass_from(const float *x, int n, uint32_t k, bool strict, float maxl,
                            double *sh)
{
    double m = 0.0;

    for (int v = threadIdx.x; v < n; v += NT) {
        uint32_t kv = key_of(x[v]);
        if (kv > k || (!strict && kv == k))
            m += exp((double)x[v] - (double)maxl);
    }
    return block_sum(m, sh);
}

__global__ void __launch_bounds__(NT)
hy_sample_kernel(const float *__restrict__ logits, int n, const hy_cuk_sample_row_t *rows,
                 hy_cuk_sample_res_t *res)
{
    __shared__ double shd[NW + 1];
    __shared__ float shf[NW + 1];
    __shared__ int shi[NW + 1];
    __shared__ int top_ids[HY_CUK_SAMPLE_MAX_TOP];
    __shared__ float top_l[HY_CUK_SAMPLE_MAX_TOP];
    const float *x = logits + (size_t)blockIdx.x * (size_t)n;
    const hy_cuk_sample_row_t p = rows[blockIdx.x];
    hy_cuk_sample_res_t *out = res + blockIdx.x;
    const int tid = threadIdx.x;
    float maxl, l;
    int best, nan = 0, token, n_top;
    double log_z;

    /* 1. maximum (ties -> lowest id) and the NaN check */
    {
        float bl = -INFINITY;
        int bi = INT32_MAX;

        for (int v = tid; v < n; v += NT) {
            l = x[v];
            if (l != l)
                nan = 1;
            else if (better(l, v, bl, bi))
                bl = l, bi = v;
        }
        nan = block_sum(nan, shi);
        block_best(bl, bi, shf, shi, &maxl, &best);
    }
    if (nan || isinf(maxl)) {
        if (tid == 0) {
            out->token = -1;
            out->logprob = 0.0f;
            out->n_top = 0;
        }
        return; /* uniform over the block */
    }
    log_z = log(mass_from(x, n, 0u, false, maxl, shd));

    /* 2. the best n_top, one block argmax each, below the previous one */
    n_top = min(p.n_logprobs, n);
    {
        float pl = INFINITY;
        int pid = -1;

        for (int i = 0; i < n_top; i++) {
            float bl = -INFINITY;
            int bi = INT32_MAX;

            for (int v = tid; v < n; v += NT) {
                l = x[v];
                if ((l < pl || (l == pl && v > pid)) && better(l, v, bl, bi))
                    bl = l, bi = v;
            }
            block_best(bl, bi, shf, shi, &pl, &pid);
            if (tid == 0) {
                top_ids[i] = pid;
                top_l[i] = pl;
            }
        }
    }

    if (p.temperature == 0.0f || p.top_k == 1) {
        token = best;
    } else {
        /* 3. the cut: members are key > ck, plus the first c_ties (by id)
         * of those with key == ck.  ck = 0 keeps everything. */
        const uint32_t kmax = key_of(maxl);
        uint32_t ck = 0;
        int c_ties = 0;
        double mass = -1.0; /* of the members, once known */

        if (p.top_k > 0 && p.top_k < n) {
            uint32_t lo = 0, hi = kmax;

            /* largest key with at least top_k logits at or above it */
            while (lo < hi) {
                uint32_t mid = lo + (hi - lo + 1) / 2;
                if (count_ge(x, n, mid, shi) >= p.top_k)
                    lo = mid;
                else
                    hi = mid - 1;
            }
            ck = lo;
            c_ties = p.top_k - (lo == 0xffffffffu ? 0 : count_ge(x, n, lo + 1, shi));
            mass = mass_from(x, n, ck, true, maxl, shd) +
                   (double)c_ties * exp((double)val_of(ck) - (double)maxl);
        }
        if (p.top_p < 1.0f) {
            double target, m_gt, w;
            /* logits more than 60 below the max weigh < V e^-60 of the
             * mass together, far less than the (1 - top_p) >= 2^-24 the
             * cut leaves out: the cut is never below maxl - 60, so the
             * search starts there and its early, wide passes are cheap */
            uint32_t lo = max(ck, key_of(maxl - 60.0f)), hi = kmax;
            int avail, j;

            if (mass < 0.0)
                mass = exp(log_z); /* every logit */
            target = (double)p.top_p * mass;
            /* largest key whose members at or above it reach the target;
             * above ck every logit is a member */
            while (lo < hi) {
                uint32_t mid = lo + (hi - lo + 1) / 2;
                if (mass_from(x, n, mid, false, maxl, shd) >= target)
                    lo = mid;
                else
                    hi = mid - 1;
            }
            if (lo != ck || ck != 0) {
                /* the prefix ends inside the group at key lo: as many of
                 * it (lowest ids first) as the target needs */
                m_gt = mass_from(x, n, lo, true, maxl, shd);
                w = exp((double)val_of(lo) - (double)maxl);
                avail = lo == ck ? c_ties : count_eq(x, n, lo, shi);
                j = w > 0.0 ? (int)ceil((target - m_gt) / w) : avail;
                ck = lo;
                c_ties = max(1, min(j, avail));
            }
        }
        if (p.log_min_p > -INFINITY) {
            const float thr = maxl + p.log_min_p; /* as the host rounds it */
            const uint32_t kt = key_of(thr);

            if (ck < kt) {
                /* the cut rises to the lowest logit at or above thr, with
                 * all of its ties (all of them were members) */
                uint32_t lo = 0xffffffffu;
                for (int v = tid; v < n; v += NT) {
                    uint32_t kv = key_of(x[v]);
                    if (kv >= kt && kv < lo)
                        lo = kv;
                }
                /* min over the block through the max of the complement */
                {
                    float dummy;
                    int mi;
                    block_best(0.0f, (int)(lo ^ 0x80000000u), shf, shi, &dummy, &mi);
                    lo = (uint32_t)mi ^ 0x80000000u;
                }
                ck = lo;
                c_ties = count_eq(x, n, lo, shi);
            }
        }

        /* 4. the draw over the members in id order: contiguous chunks */
        {
            const int chunk = (n + NT - 1) / NT;
            const int v0 = min(n, tid * chunk), v1 = min(n, v0 + chunk);
            const double inv_t = 1.0 / (double)p.temperature;
            int ties_before, my_ties = 0, tot_ties, tok = INT32_MAX, mylast = -1, rank;
            double sum = 0.0, before, total, cum, target;

            for (int v = v0; v < v1; v++)
                my_ties += key_of(x[v]) == ck;
            ties_before = block_exscan(my_ties, shi, &tot_ties);
            rank = ties_before;
            for (int v = v0; v < v1; v++) {
                uint32_t kv = key_of(x[v]);
                if (kv > ck || (kv == ck && rank++ < c_ties)) {
                    sum += exp(((double)x[v] - (double)maxl) * inv_t);
                    mylast = v;
                }
            }
            before = block_exscan(sum, shd, &total);
            target = p.u * total;
            /* the chunk holding the target walks to it; later chunks stop
             * at their first member, so the lowest id found wins even if
             * rounding moved the target across a chunk edge */
            if (mylast >= 0 && target < before + sum) {
                cum = before;
                rank = ties_before;
                for (int v = v0; v < v1; v++) {
                    uint32_t kv = key_of(x[v]);
                    if (!(kv > ck || (kv == ck && rank++ < c_ties)))
                        continue;
                    cum += exp(((double)x[v] - (double)maxl) * inv_t);
                    if (target < cum) {
                        tok = v;
                        break;
                    }
                }
            }
            {
                float dummy;
                int first, neg_last;

                block_best(0.0f, tok, shf, shi, &dummy, &first);
                block_best(0.0f, mylast >= 0 ? -mylast : 1, shf, shi, &dummy, &neg_last);
                /* no crossing: the target fell in the rounding gap at the
                 * top, take the last member (the max is always one) */
                token = first != INT32_MAX ? first : neg_last <= 0 ? -neg_last : best;
            }
        }
    }
    if (tid == 0) {
        out->token = token;
        out->logprob = (float)((double)x[token] - (double)maxl - log_z);
        out->n_top = n_top;
        for (int i = 0; i < n_top; i++) {
            out->top_ids[i] = top_ids[i];
            out->top_logprobs[i] = (float)((double)top_l[i] - (double)maxl - log_z);
        }
    }
}

extern "C" int hy_cuk_sample(const float *logits, int32_t n_rows, int32_t n_vocab,
                             const hy_cuk_sample_row_t *rows, hy_cuk_sample_res_t *res,
                             void *stream)
{
    if (!logits || !rows || !res || n_rows <= 0 || n_rows > 65535 || n_vocab <= 0)
        return (int)cudaErrorInvalidValue;
    hy_sample_kernel<<<(unsigned)n_rows, NT, 0, (cudaStream_t)stream>>>(logits, n_vocab, rows,
                                                                        res);
    return (int)cudaGetLastError();
}
