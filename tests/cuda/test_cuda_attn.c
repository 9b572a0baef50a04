/*
 * test_cuda_attn.c - CUDA paged attention against the CPU backend: ragged
 * batches where one sequence prefills (1..1000 tokens, the flash kernel)
 * while others decode or continue a prompt (the split kernel), over
 * shuffled page ids, head sizes 64..256 (and padded / oversized ones), GQA
 * 1/4/8, F32/F16/Q8_0 KV, sliding window and softcap.  Without a GPU it
 * still checks the host-side plan (attn_plan.c): tiles cover every row once
 * with tight key ranges, and a host replica of the flash kernel's tile walk
 * and of the split kernel's merge, driven by that plan, matches a direct
 * double-precision softmax; and it runs the flash kernel's own block code
 * (kernels/hy_attn_flash.h) with one coroutine per CUDA thread, barriers
 * and warp shuffles emulated, over paged F32/F16/Q8_0 pools.
 */
#include "backend/backend.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_ref.h"
#include "backend/cuda/attn_plan.h"
#include "backend/cuda/cuda.h"
#define HY_CT_SEED 0x243F6A8885A308D3ull
#include "../unit/test.h"
#include "cuda_test.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <string.h>
#include <ucontext.h>

/* ---- the flash block code on the host: one coroutine per CUDA thread ------
 * A thread runs until a barrier: HY_FA_SYNC waits for the block, a shuffle
 * writes its value, waits for its warp, reads the source lane's, and waits
 * again (so no lane overwrites a value before all have read).  A barrier
 * that not every thread of its scope reaches is reported as a deadlock. */
enum { EMU_RUN, EMU_BLOCK, EMU_WARP, EMU_DONE };
#define EMU_T 128               /* == HY_FA_THREADS, checked below */
#define EMU_STACK (256 * 1024)
static ucontext_t emu_main, emu_ctx[EMU_T];
static char *emu_stacks;
static int emu_cur, emu_state[EMU_T];
static float emu_xbuf[EMU_T / 32][32];

__attribute__((noinline)) static void emu_yield(int state)
{
    emu_state[emu_cur] = state;
    swapcontext(&emu_ctx[emu_cur], &emu_main);
}

static float emu_shfl(float v, int src)
{
    int w = emu_cur >> 5;
    float r;

    emu_xbuf[w][emu_cur & 31] = v;
    emu_yield(EMU_WARP);
    r = emu_xbuf[w][src & 31];
    emu_yield(EMU_WARP);
    return r;
}

#define HY_FA_SYNC() emu_yield(EMU_BLOCK)
#define HY_FA_SHFL_XOR(v, o) emu_shfl((v), (emu_cur & 31) ^ (o))
#define HY_FA_SHFL(v, src) emu_shfl((v), (src))
#define HY_FA_DC 2
#define HY_FA_BQ 64
#define HY_FA_NAME hy_fa_block_2_64
#include "hy_attn_flash.h"
#define HY_FA_DC 4
#define HY_FA_BQ 64
#define HY_FA_NAME hy_fa_block_4_64
#include "hy_attn_flash.h"
#define HY_FA_DC 8
#define HY_FA_BQ 32
#define HY_FA_NAME hy_fa_block_8_32
#include "hy_attn_flash.h"
#include "hy_attn_split.h"

#define TOL_F32 1e-5   /* relative RMS error, the float32 bound */
#define TOL_HALF 1e-2  /* f16 / q8_0 KV */
#define BK 32          /* keys per tile of the flash kernel (hy_attn.cu) */

static int rnd_int(int n)
{
    return (int)((rnd() * 0.5f + 0.5f) * (float)n) % n;
}

/* ---- host reference: direct softmax in double ---------------------------- */

/* out[hdv] = softmax over keys lo..pos of (q.K[j] * scale, softcapped) of V. */
static void ref_row(const float *qv, const float *K, const float *V, int hd, int hdv, int lo,
                    int pos, float scale, float softcap, double *out)
{
    double mx = -INFINITY, sum = 0;
    double *s = malloc(sizeof(double) * (size_t)(pos + 1));

    for (int j = lo; j <= pos; j++) {
        double d = 0;
        for (int i = 0; i < hd; i++)
            d += (double)qv[i] * K[(size_t)j * hd + i];
        d *= scale;
        if (softcap > 0)
            d = softcap * tanh(d / softcap);
        s[j] = d;
        mx = d > mx ? d : mx;
    }
    for (int i = 0; i < hdv; i++)
        out[i] = 0;
    for (int j = lo; j <= pos; j++) {
        double p = exp(s[j] - mx);
        sum += p;
        for (int i = 0; i < hdv; i++)
            out[i] += p * V[(size_t)j * hdv + i];
    }
    for (int i = 0; i < hdv; i++)
        out[i] /= sum;
    free(s);
}

/* ---- host replicas of the kernels' float arithmetic ------------------------ */

/* The flash kernel's walk for one row: key tiles of BK from the tile's
 * kmin, every key outside [lo, pos] or past kmax at -inf, the guarded
 * online softmax (hy_flash_kernel). */
static void flash_row(const float *qv, const float *K, const float *V, int hd, int hdv, int lo,
                      int pos, int kmin, int kmax, float scale, float softcap, float *out)
{
    float m = -INFINITY, l = 0, *acc = calloc((size_t)hdv, sizeof(float)), x[BK];

    for (int j0 = kmin; j0 <= kmax; j0 += BK) {
        float mx = -INFINITY;
        for (int c = 0; c < BK; c++) {
            int j = j0 + c;
            x[c] = -INFINITY;
            if (j <= kmax && j <= pos && j >= lo) {
                float d = 0;
                for (int i = 0; i < hd; i++)
                    d = fmaf(qv[i], K[(size_t)j * hd + i], d);
                x[c] = d * scale;
                if (softcap > 0)
                    x[c] = softcap * tanhf(x[c] / softcap);
            }
            mx = fmaxf(mx, x[c]);
        }
        float mn = fmaxf(m, mx), c = mn == -INFINITY ? 1.0f : expf(m - mn), ps = 0;
        for (int i = 0; i < hdv; i++)
            acc[i] *= c;
        for (int cc = 0; cc < BK; cc++) {
            float p = x[cc] == -INFINITY ? 0.0f : expf(x[cc] - mn);
            ps += p;
            if (p > 0)
                for (int i = 0; i < hdv; i++)
                    acc[i] = fmaf(p, V[(size_t)(j0 + cc) * hdv + i], acc[i]);
        }
        l = l * c + ps;
        m = mn;
    }
    for (int i = 0; i < hdv; i++)
        out[i] = l > 0 ? acc[i] * (1.0f / l) : 0.0f;
    free(acc);
}

/* The split kernel for one row: part sp of n_split covers keys
 * lo + sp*per .., per = hy_cuk_part_keys(len) (hy_attn_kernel; parts past
 * the row's keys are empty), then hy_attn_merge_kernel's merge. */
static void split_row(const float *qv, const float *K, const float *V, int hd, int hdv, int lo,
                      int pos, int n_split, float scale, float softcap, float *out)
{
    int len = pos - lo + 1, per = hy_cuk_part_keys(len);
    float *pm = malloc(sizeof(float) * (size_t)n_split), *pl = malloc(sizeof(float) * n_split);
    float *pa = calloc((size_t)n_split * hdv, sizeof(float)), M = -INFINITY, L = 0;

    for (int sp = 0; sp < n_split; sp++) {
        int jb = lo + sp * per, je = HY_MIN(pos + 1, jb + per);
        pm[sp] = -INFINITY;
        pl[sp] = 0;
        for (int j = jb; j < je; j++) {
            float d = 0;
            for (int i = 0; i < hd; i++)
                d += qv[i] * K[(size_t)j * hd + i];
            d *= scale;
            if (softcap > 0)
                d = softcap * tanhf(d / softcap);
            float mn = fmaxf(pm[sp], d), c = expf(pm[sp] - mn), p = expf(d - mn);
            pl[sp] = pl[sp] * c + p;
            for (int i = 0; i < hdv; i++)
                pa[(size_t)sp * hdv + i] = pa[(size_t)sp * hdv + i] * c + p * V[(size_t)j * hdv + i];
            pm[sp] = mn;
        }
        M = fmaxf(M, pm[sp]);
    }
    for (int sp = 0; sp < n_split; sp++)
        if (pm[sp] > -INFINITY)
            L += expf(pm[sp] - M) * pl[sp];
    for (int i = 0; i < hdv; i++) {
        float a = 0;
        for (int sp = 0; sp < n_split; sp++)
            if (pm[sp] > -INFINITY)
                a += expf(pm[sp] - M) * pa[(size_t)sp * hdv + i];
        out[i] = L > 0 ? a / L : 0;
    }
    free(pm);
    free(pl);
    free(pa);
}

/* ---- CPU-only: the plan ------------------------------------------------------ */

typedef struct {
    int n_seqs, n_tok;
    hy_batch_seq_t seqs[8];
    int32_t pos[4096], tokens[4096];
} batch_t;

/* A ragged batch: sequence s has n[s] tokens after past[s] (positions in
 * order); pages are not needed by the planner. */
static hy_batch_t batch_make(batch_t *bt, int n_seqs, const int *n, const int *past)
{
    bt->n_seqs = n_seqs;
    bt->n_tok = 0;
    for (int s = 0; s < n_seqs; s++) {
        bt->seqs[s] = (hy_batch_seq_t){bt->n_tok, n[s], past[s], NULL, 0, -1, NULL, 0, NULL, 0, 0,
                                       0, NULL, NULL};
        for (int i = 0; i < n[s]; i++) {
            bt->pos[bt->n_tok] = past[s] + i;
            bt->tokens[bt->n_tok++] = 0;
        }
    }
    return (hy_batch_t){bt->n_tok, bt->tokens, bt->pos, n_seqs, bt->seqs};
}

/* Checks one plan; on failure describes the first problem in why. */
static bool plan_ok(const hy_batch_t *b, int group, int window, int rows, char *why, size_t wn)
{
    int32_t n_tiles = hy_cuda_attn_plan(b, group, window, rows, HY_CUDA_FLASH_MIN_TOK, NULL,
                                        NULL, NULL);
    hy_cuk_attn_tile_t *tl = malloc(sizeof *tl * (size_t)HY_MAX(n_tiles, 1));
    int32_t *gen = malloc(sizeof(int32_t) * (size_t)b->n_tokens), n_gen = -1;
    int *seen = calloc((size_t)b->n_tokens * group, sizeof(int));
    bool ok = true;

    if (hy_cuda_attn_plan(b, group, window, rows, HY_CUDA_FLASH_MIN_TOK, tl, gen, &n_gen) !=
        n_tiles) {
        snprintf(why, wn, "count and fill disagree");
        ok = false;
    }
    for (int32_t i = 0; ok && i < n_tiles; i++) {
        const hy_batch_seq_t *sq = &b->seqs[tl[i].seq];
        int32_t kmin = INT32_MAX, kmax = -1;
        if (tl[i].seq < 0 || tl[i].seq >= b->n_seqs || tl[i].first != sq->first ||
            tl[i].n != sq->n || sq->n < HY_CUDA_FLASH_MIN_TOK || tl[i].r0 % rows ||
            tl[i].r0 >= sq->n * group) {
            snprintf(why, wn, "tile %d: bad seq/first/n/r0", i);
            ok = false;
            break;
        }
        for (int f = tl[i].r0; f < HY_MIN(tl[i].r0 + rows, sq->n * group); f++) {
            int t = sq->first + f / group, p = b->pos[t];
            int lo = window > 0 ? HY_MAX(0, p - window + 1) : 0;
            seen[(size_t)t * group + f % group]++;
            kmin = HY_MIN(kmin, lo);
            kmax = HY_MAX(kmax, p);
        }
        if (kmin != tl[i].kmin || kmax != tl[i].kmax) {
            snprintf(why, wn, "tile %d: keys %d..%d, rows need %d..%d", i, tl[i].kmin,
                     tl[i].kmax, kmin, kmax);
            ok = false;
        }
        if (i > 0 && tl[i].kmax - tl[i].kmin > tl[i - 1].kmax - tl[i - 1].kmin) {
            snprintf(why, wn, "tile %d has a longer key range than tile %d", i, i - 1);
            ok = false;
        }
    }
    for (int32_t i = 0; ok && i < n_gen; i++) {
        if (gen[i] < 0 || gen[i] >= b->n_tokens) {
            snprintf(why, wn, "decode row %d out of range", gen[i]);
            ok = false;
            break;
        }
        for (int h = 0; h < group; h++)
            seen[(size_t)gen[i] * group + h]++;
    }
    for (int32_t i = 0; ok && i < b->n_tokens * group; i++)
        if (seen[i] != 1) {
            snprintf(why, wn, "row %d (token %d head %d) covered %d times", i, i / group,
                     i % group, seen[i]);
            ok = false;
        }
    free(tl);
    free(gen);
    free(seen);
    return ok;
}

static void test_plan(void)
{
    static const int groups[] = {1, 3, 4, 8}, rows_opts[] = {64, 32};
    static const int windows[] = {0, 5, 100};
    batch_t *bt = malloc(sizeof *bt);
    char why[160] = "";
    int n_cases = 0;
    bool ok = true;

    for (int trial = 0; ok && trial < 40; trial++) {
        int ns = 1 + rnd_int(6), n[8], past[8];
        for (int s = 0; s < ns; s++) {
            /* mix decode (1), short continuations and prefills */
            int kind = rnd_int(4);
            n[s] = kind == 0 ? 1 : kind == 1 ? 1 + rnd_int(20) : 16 + rnd_int(500);
            past[s] = rnd_int(3) == 0 ? 0 : rnd_int(2000);
        }
        hy_batch_t b = batch_make(bt, ns, n, past);
        for (size_t gi = 0; ok && gi < HY_ARRAY_LEN(groups); gi++)
            for (size_t ri = 0; ok && ri < HY_ARRAY_LEN(rows_opts); ri++)
                for (size_t wi = 0; ok && wi < HY_ARRAY_LEN(windows); wi++) {
                    ok = plan_ok(&b, groups[gi], windows[wi], rows_opts[ri], why, sizeof why);
                    n_cases++;
                }
    }
    HY_T_OK(ok, "plan: %d random ragged batches: every (token, head) row once, tight key "
            "ranges, longest first%s%s", n_cases, ok ? "" : ": ", why);

    /* exact shapes: 17 tokens x GQA 4 = 68 rows -> tiles of 64 rows (tokens
     * 0..15, keys 0..15) and 4 rows (token 16, keys 0..16), the latter
     * first as it sees more keys; the decode rows in batch order */
    {
        int n[3] = {1, 17, 3}, past[3] = {40, 0, 7};
        hy_batch_t b = batch_make(bt, 3, n, past);
        hy_cuk_attn_tile_t tl[4];
        int32_t gen[21], n_gen = 0;
        int32_t nt = hy_cuda_attn_plan(&b, 4, 0, 64, HY_CUDA_FLASH_MIN_TOK, tl, gen, &n_gen);
        HY_T_OK(nt == 2 && n_gen == 4 && gen[0] == 0 && gen[1] == 18 && gen[3] == 20 &&
                    tl[0].r0 == 64 && tl[0].kmin == 0 && tl[0].kmax == 16 && tl[1].r0 == 0 &&
                    tl[1].kmax == 15 && tl[1].kmin == 0 && tl[0].seq == 1 && tl[0].first == 1 &&
                    tl[0].n == 17,
                "plan: 17-token prefill at GQA 4 = tiles of 64 and 4 rows, keys 0..15 and "
                "0..16; decode rows 0, 18..20 (got %d tiles, %d decode rows)", nt, n_gen);
        nt = hy_cuda_attn_plan(&b, 4, 0, 0, HY_CUDA_FLASH_MIN_TOK, tl, gen, &n_gen);
        HY_T_OK(nt == 0 && n_gen == 21 && gen[20] == 20,
                "plan: tile_rows 0 (heads over 256) sends all 21 rows to the split kernel");
    }

    /* the decode kernel's KV parts: every key in exactly one of the row's
     * own parts (none of them empty), never more than the maximum, never
     * fewer for a longer row (a launch sizes its parts by the longest) */
    {
        bool cover = true;
        for (int32_t len = 1, prev = 1; len <= 300000; len += len < 10000 ? 1 : 97) {
            int32_t k = hy_cuk_part_keys(len), n = hy_cuk_parts(len);
            cover &= k >= HY_CUK_PART_KEYS && n >= 1 && n <= HY_CUK_MAX_PARTS &&
                     (int64_t)n * k >= len && (int64_t)(n - 1) * k < len && n >= prev;
            prev = n;
        }
        HY_T_OK(cover && hy_cuk_parts(64) == 1 && hy_cuk_parts(65) == 2 &&
                    hy_cuk_parts(4096) == 64 && hy_cuk_part_keys(4096) == 64 &&
                    hy_cuk_part_keys(1 << 20) == 16384 && hy_cuk_parts(1 << 20) == 64,
                "decode parts: %d keys each up to %d parts, then longer, by the row's own length",
                HY_CUK_PART_KEYS, HY_CUK_MAX_PARTS);
    }
    free(bt);
}

/* The plan driving host replicas of both kernels over a ragged batch with
 * a window, compared row by row with the direct softmax. */
static void test_replica(int window, float softcap, int group)
{
    const int hd = 40, hdv = 24, rows = 32;
    int n[3] = {70, 1, 20}, past[3] = {0, 3000, 45}, n_seqs = 3;
    batch_t *bt = malloc(sizeof *bt);
    hy_batch_t b = batch_make(bt, n_seqs, n, past);
    float *K[3], *V[3], *q = rnd_vec((size_t)b.n_tokens * group * hd, 3.0f), *o = malloc(sizeof(float) * hdv);
    double *r = malloc(sizeof(double) * hdv), worst = 0;
    int32_t nt = hy_cuda_attn_plan(&b, group, window, rows, HY_CUDA_FLASH_MIN_TOK, NULL, NULL, NULL);
    hy_cuk_attn_tile_t *tl = malloc(sizeof *tl * (size_t)HY_MAX(nt, 1));
    int32_t *gen = malloc(sizeof(int32_t) * b.n_tokens), n_gen = 0;
    int n_flash = 0, n_split_rows = 0;

    hy_cuda_attn_plan(&b, group, window, rows, HY_CUDA_FLASH_MIN_TOK, tl, gen, &n_gen);
    for (int s = 0; s < n_seqs; s++) {
        K[s] = rnd_vec((size_t)(past[s] + n[s]) * hd, 1.0f);
        V[s] = rnd_vec((size_t)(past[s] + n[s]) * hdv, 1.0f);
    }
    for (int32_t i = 0; i < nt; i++) {
        const hy_batch_seq_t *sq = &b.seqs[tl[i].seq];
        for (int f = tl[i].r0; f < HY_MIN(tl[i].r0 + rows, sq->n * group); f++) {
            int t = sq->first + f / group, p = b.pos[t], lo = window > 0 ? HY_MAX(0, p - window + 1) : 0;
            const float *qv = q + ((size_t)t * group + f % group) * hd;
            flash_row(qv, K[tl[i].seq], V[tl[i].seq], hd, hdv, lo, p, tl[i].kmin, tl[i].kmax,
                      0.3f, softcap, o);
            ref_row(qv, K[tl[i].seq], V[tl[i].seq], hd, hdv, lo, p, 0.3f, softcap, r);
            for (int d = 0; d < hdv; d++)
                worst = fmax(worst, isfinite(o[d]) ? fabs(o[d] - r[d]) : INFINITY);
            n_flash++;
        }
    }
    for (int32_t i = 0; i < n_gen; i++) {
        int t = gen[i], s = 0, p = b.pos[t], lo = window > 0 ? HY_MAX(0, p - window + 1) : 0;
        while (s + 1 < n_seqs && b.seqs[s + 1].first <= t)
            s++;
        for (int h = 0; h < group; h++) {
            const float *qv = q + ((size_t)t * group + h) * hd;
            /* two parts more than the row's own: they stay empty */
            split_row(qv, K[s], V[s], hd, hdv, lo, p, hy_cuk_parts(p - lo + 1) + 2, 0.3f,
                      softcap, o);
            ref_row(qv, K[s], V[s], hd, hdv, lo, p, 0.3f, softcap, r);
            for (int d = 0; d < hdv; d++)
                worst = fmax(worst, isfinite(o[d]) ? fabs(o[d] - r[d]) : INFINITY);
            n_split_rows++;
        }
    }
    HY_T_OK(worst < 1e-5 && n_flash == 90 * group && n_split_rows == group,
            "replica, window %d softcap %g GQA %d: %d flash rows and %d split rows match the "
            "direct softmax (worst abs err %.2e)", window, softcap, group, n_flash, n_split_rows,
            worst);
    for (int s = 0; s < n_seqs; s++) {
        free(K[s]);
        free(V[s]);
    }
    free(q);
    free(o);
    free(r);
    free(tl);
    free(gen);
    free(bt);
}

/* One block (tile, kv head g) of the flash kernel, all EMU_T threads. */
static struct {
    hy_cuk_attn_t a;
    const float *q;
    float *out;
    hy_cuk_attn_tile_t tl;
    int g, variant;               /* 2, 4, 8: flash blocks; 0: split block */
    float *sm;
    const int32_t *toks;          /* split block (h, y, sp) of n_split */
    float *part;
    int n_split, h, y, sp;
} emu_blk;

static void emu_entry(int t)
{
    if (emu_blk.variant == 0)
        hy_as_block(emu_blk.a, emu_blk.q, emu_blk.toks, emu_blk.part, emu_blk.n_split, emu_blk.h,
                    emu_blk.y, emu_blk.sp, t, emu_blk.sm);
    else if (emu_blk.variant == 2)
        hy_fa_block_2_64(emu_blk.a, emu_blk.q, emu_blk.out, emu_blk.tl, emu_blk.g, t, emu_blk.sm);
    else if (emu_blk.variant == 4)
        hy_fa_block_4_64(emu_blk.a, emu_blk.q, emu_blk.out, emu_blk.tl, emu_blk.g, t, emu_blk.sm);
    else
        hy_fa_block_8_32(emu_blk.a, emu_blk.q, emu_blk.out, emu_blk.tl, emu_blk.g, t, emu_blk.sm);
    emu_state[t] = EMU_DONE;
}

/* getcontext and swapcontext return twice: kept out of functions with
 * live locals (noinline) so nothing can be clobbered. */
__attribute__((noinline)) static void emu_make(int t)
{
    getcontext(&emu_ctx[t]);
    emu_ctx[t].uc_stack.ss_sp = emu_stacks + (size_t)t * EMU_STACK;
    emu_ctx[t].uc_stack.ss_size = EMU_STACK;
    emu_ctx[t].uc_link = &emu_main;
    makecontext(&emu_ctx[t], (void (*)(void))emu_entry, 1, t);
    emu_state[t] = EMU_RUN;
}

__attribute__((noinline)) static void emu_switch_to(int t)
{
    emu_cur = t;
    swapcontext(&emu_main, &emu_ctx[t]);
}

/* Runs emu_blk to the end; false on a barrier some threads never reach. */
static bool emu_run_block(void)
{
    for (int t = 0; t < EMU_T; t++)
        emu_make(t);
    for (;;) {
        int n_run = 0, n_done = 0, n_block = 0;
        for (int t = 0; t < EMU_T; t++)
            if (emu_state[t] == EMU_RUN)
                emu_switch_to(t);
        for (int t = 0; t < EMU_T; t++) {
            n_done += emu_state[t] == EMU_DONE;
            n_block += emu_state[t] == EMU_BLOCK;
        }
        if (n_done == EMU_T)
            return true;
        for (int w = 0; w < EMU_T / 32; w++) {
            int k = 0;
            while (k < 32 && emu_state[w * 32 + k] == EMU_WARP)
                k++;
            if (k == 32)
                for (k = 0; k < 32; k++)
                    emu_state[w * 32 + k] = EMU_RUN;
        }
        if (n_block == EMU_T)
            for (int t = 0; t < EMU_T; t++)
                emu_state[t] = EMU_RUN;
        for (int t = 0; t < EMU_T; t++)
            n_run += emu_state[t] == EMU_RUN;
        if (n_run == 0)
            return false;
    }
}

/* Stores x (n floats) as one KV row of `type` and returns the values the
 * row holds, decoded by the CPU backend's own converters. */
static void kv_store(hy_dtype_t type, const float *x, int n, uint8_t *row, float *back)
{
    if (type == HY_DTYPE_F32) {
        memcpy(row, x, sizeof(float) * (size_t)n);
        memcpy(back, x, sizeof(float) * (size_t)n);
    } else if (type == HY_DTYPE_F16) {
        for (int i = 0; i < n; i++) {
            ((uint16_t *)row)[i] = hy_f32_to_f16(x[i]);
            back[i] = hy_f16_to_f32(((uint16_t *)row)[i]);
        }
    } else {
        hy_quant_quantize_row(type, x, row, n);
        hy_quant_traits(type)->to_float(row, back, n);
    }
}

/* Two sequences (n0 tokens after past0, n1 after past1) on pages shuffled
 * in a pool, every row through the emulated flash blocks (n_split 0) or,
 * for every row but row 1 (the token list), the emulated decode blocks of
 * n_split parts and their merge; each output row against the direct
 * softmax over the values the pool holds, rows left out still NaN. */
static void test_emulated(hy_dtype_t type, int hd, int hdv, int n_head, int n_kv, int pt,
                          int window, float softcap, int n0, int past0, int n1, int past1,
                          int n_split)
{
    const int group = n_head / n_kv, rows = hy_fa_rows(hd, hdv);
    const int hmax = HY_MAX(hd, hdv), variant = hmax <= 64 ? 2 : hmax <= 128 ? 4 : 8;
    const int n[2] = {n0, n1}, past[2] = {past0, past1}, n_tok = n0 + n1;
    const size_t krow = hy_dtype_row_bytes(type, hd), vrow = hy_dtype_row_bytes(type, hdv);
    const size_t kpage = krow * pt * n_kv, vpage = vrow * pt * n_kv;
    int np[2], n_pages = 0, bad_rows = 0, n_list = 0;
    double worst = 0;
    bool flow = true;

    for (int s = 0; s < 2; s++) {
        np[s] = (past[s] + n[s] + pt - 1) / pt;
        n_pages += np[s];
    }
    int pool_pages = n_pages + 3;
    int32_t *perm = malloc(sizeof(int32_t) * pool_pages), page_off[2] = {0, np[0]};
    int32_t *pos = malloc(sizeof(int32_t) * n_tok), *tokens = calloc(n_tok, sizeof(int32_t));
    int32_t *tok_seq = malloc(sizeof(int32_t) * n_tok), *list = malloc(sizeof(int32_t) * n_tok);
    uint8_t *kp = calloc((size_t)pool_pages, kpage), *vp = calloc((size_t)pool_pages, vpage);
    float *Kd[2], *Vd[2]; /* [pos][n_kv][hd] as the pool holds them */
    float *x = malloc(sizeof(float) * HY_MAX(hd, hdv));
    float *q = rnd_vec((size_t)n_tok * n_head * hd, 3.0f);
    float *out = malloc(sizeof(float) * (size_t)n_tok * n_head * hdv);
    float *Kh = malloc(sizeof(float) * (size_t)(HY_MAX(past0 + n0, past1 + n1)) * hd);
    float *Vh = malloc(sizeof(float) * (size_t)(HY_MAX(past0 + n0, past1 + n1)) * hdv);
    double *ref = malloc(sizeof(double) * hdv);
    hy_batch_seq_t seqs[2];

    for (int i = 0; i < pool_pages; i++)
        perm[i] = i;
    for (int i = pool_pages - 1; i > 0; i--) {
        int j = rnd_int(i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < (size_t)n_tok * n_head * hdv; i++)
        out[i] = NAN; /* a row no block writes stays NaN */
    for (int s = 0, t = 0; s < 2; s++) {
        int len = past[s] + n[s];
        seqs[s] = (hy_batch_seq_t){t, n[s], past[s], perm + page_off[s], np[s], -1, NULL, 0, NULL,
                                   0, 0, 0, NULL, NULL};
        for (int i = 0; i < n[s]; i++, t++) {
            pos[t] = past[s] + i;
            tok_seq[t] = s;
            if (t != 1)
                list[n_list++] = t;
        }
        Kd[s] = malloc(sizeof(float) * (size_t)len * n_kv * hd);
        Vd[s] = malloc(sizeof(float) * (size_t)len * n_kv * hdv);
        for (int j = 0; j < len; j++)
            for (int g = 0; g < n_kv; g++) {
                size_t page = (size_t)perm[page_off[s] + j / pt], slot = (size_t)g * pt + j % pt;
                for (int i = 0; i < hd; i++)
                    x[i] = rnd();
                kv_store(type, x, hd, kp + page * kpage + slot * krow,
                         Kd[s] + ((size_t)j * n_kv + g) * hd);
                for (int i = 0; i < hdv; i++)
                    x[i] = rnd();
                kv_store(type, x, hdv, vp + page * vpage + slot * vrow,
                         Vd[s] + ((size_t)j * n_kv + g) * hdv);
            }
    }
    hy_batch_t b = {n_tok, tokens, pos, 2, seqs};
    int32_t n_tiles = hy_cuda_attn_plan(&b, group, window, rows, 1, NULL, NULL, NULL), n_gen = -1;
    hy_cuk_attn_tile_t *tl = malloc(sizeof *tl * (size_t)HY_MAX(n_tiles, 1));
    int32_t *gen = malloc(sizeof(int32_t) * n_tok);
    hy_cuda_attn_plan(&b, group, window, rows, 1, tl, gen, &n_gen);

    memset(&emu_blk, 0, sizeof emu_blk);
    emu_blk.a = (hy_cuk_attn_t){kp, vp, krow, vrow, kpage, vpage, (int32_t)type, pt, n_head,
                                n_kv, hd, hdv, window, 1.0f / sqrtf((float)hd), softcap, pos,
                                tok_seq, page_off, perm};
    emu_blk.q = q;
    emu_blk.out = out;
    emu_blk.variant = variant;
    if (n_split > 0) {
        size_t n_part;
        /* at least the parts the longest row needs, as the launch sizes them */
        for (int y = 0; y < n_list; y++) {
            int p = pos[list[y]], lo = window > 0 ? HY_MAX(0, p - window + 1) : 0;
            n_split = HY_MAX(n_split, hy_cuk_parts(p - lo + 1));
        }
        n_part = (size_t)n_list * n_head * n_split * (2 + hdv);
        emu_blk.variant = 0;
        emu_blk.toks = list;
        emu_blk.n_split = n_split;
        emu_blk.part = malloc(sizeof(float) * n_part);
        emu_blk.sm = malloc(hy_as_smem(hd));
        for (size_t e = 0; e < n_part; e++)
            emu_blk.part[e] = NAN;
        for (int y = 0; flow && y < n_list; y++)
            for (int h = 0; flow && h < n_head; h++)
                for (int sp = 0; flow && sp < n_split; sp++) {
                    for (size_t e = 0; e < hy_as_smem(hd) / sizeof(float); e++)
                        emu_blk.sm[e] = NAN;
                    emu_blk.y = y;
                    emu_blk.h = h;
                    emu_blk.sp = sp;
                    flow = emu_run_block();
                }
        for (int y = 0; flow && y < n_list; y++)
            for (int h = 0; h < n_head; h++)
                for (int t = 0; t < HY_AS_THREADS; t++)
                    hy_as_merge(emu_blk.part, out, list, n_head, hdv, n_split, h, y, t,
                                HY_AS_THREADS);
        free(emu_blk.part);
        n_tiles = 0;
    } else
        emu_blk.sm = malloc(hy_fa_smem(rows, hd, hdv)); /* exactly what the launch asks for */
    for (int32_t i = 0; flow && i < n_tiles; i++)
        for (int g = 0; flow && g < n_kv; g++) {
            for (size_t e = 0; e < hy_fa_smem(rows, hd, hdv) / sizeof(float); e++)
                emu_blk.sm[e] = NAN; /* stale shared memory must never be read */
            emu_blk.tl = tl[i];
            emu_blk.g = g;
            flow = emu_run_block();
        }
    for (int s = 0; flow && s < 2; s++)
        for (int t = seqs[s].first; t < seqs[s].first + n[s]; t++)
            for (int h = 0; h < n_head; h++) {
                int g = h / group, p = pos[t], lo = window > 0 ? HY_MAX(0, p - window + 1) : 0;
                const float *o = out + ((size_t)t * n_head + h) * hdv;
                double e = 0, r = 0;
                if (n_split > 0 && t == 1) { /* not in the list: never written */
                    for (int d = 0; d < hdv; d++)
                        bad_rows += !isnan(o[d]);
                    continue;
                }
                for (int j = 0; j <= p; j++) {
                    memcpy(Kh + (size_t)j * hd, Kd[s] + ((size_t)j * n_kv + g) * hd,
                           sizeof(float) * hd);
                    memcpy(Vh + (size_t)j * hdv, Vd[s] + ((size_t)j * n_kv + g) * hdv,
                           sizeof(float) * hdv);
                }
                ref_row(q + ((size_t)t * n_head + h) * hd, Kh, Vh, hd, hdv, lo, p,
                        1.0f / sqrtf((float)hd), softcap, ref);
                for (int d = 0; d < hdv; d++) {
                    e += (o[d] - ref[d]) * (o[d] - ref[d]);
                    r += ref[d] * ref[d];
                }
                double re = isfinite(e) ? sqrt(e / (r > 0 ? r : 1)) : INFINITY;
                bad_rows += !(re <= 1e-5);
                worst = fmax(worst, isfinite(re) ? re : INFINITY);
            }
    HY_T_OK(flow && n_gen == 0 && bad_rows == 0,
            "emulated %s blocks, kv %s, head %d/%d, GQA %d x %d kv heads, page %d, window %d, "
            "softcap %g, %d+%d tokens after %d/%d: %d tiles / %d parts, %s, worst row rel err "
            "%.2e, %d rows over 1e-5", n_split ? "decode" : "flash", hy_dtype_info(type)->name,
            hd, hdv, group, n_kv, pt, window, softcap, n0, n1, past0, past1, n_tiles, n_split,
            flow ? "barriers ok" : "BARRIER DEADLOCK", worst, bad_rows);
    for (int s = 0; s < 2; s++) {
        free(Kd[s]);
        free(Vd[s]);
    }
    free(emu_blk.sm);
    free(perm);
    free(pos);
    free(tokens);
    free(kp);
    free(vp);
    free(x);
    free(q);
    free(out);
    free(Kh);
    free(Vh);
    free(ref);
    free(tl);
    free(gen);
    free(tok_seq);
    free(list);
}

/* The launchers check their shapes before any CUDA call, so this runs
 * without a GPU: cudaErrorInvalidValue (1) and nothing launched. */
static void test_launch_checks(void)
{
    hy_cuk_attn_t a;
    bool ok = true;

    memset(&a, 0, sizeof a);
    a.n_head = 8;
    a.n_head_kv = 2;
    a.head_dim = a.head_dim_v = 64;
    a.page_tokens = 16;
    ok &= hy_cuk_attention_flash(&a, NULL, NULL, NULL, 0, 64, NULL) == 0; /* nothing to do */
    ok &= hy_cuk_attention_flash(&a, NULL, NULL, NULL, 3, 32, NULL) == 1; /* rows != 64 */
    a.head_dim = 300;
    ok &= hy_cuk_attention_flash(&a, NULL, NULL, NULL, 3, 32, NULL) == 1; /* head > 256 */
    a.head_dim = 64;
    a.n_head = 6;
    a.n_head_kv = 4;
    ok &= hy_cuk_attention_flash(&a, NULL, NULL, NULL, 3, 64, NULL) == 1; /* 6 % 4 heads */
    a.n_head = 8;
    a.page_tokens = 0;
    ok &= hy_cuk_attention_flash(&a, NULL, NULL, NULL, 3, 64, NULL) == 1;
    a.page_tokens = 16;
    ok &= hy_cuk_attention(&a, NULL, NULL, NULL, 0, 1, NULL, NULL) == 0;
    ok &= hy_cuk_attention(&a, NULL, NULL, NULL, 70000, 1, NULL, NULL) == 1;
    ok &= hy_cuk_attention(&a, NULL, NULL, NULL, 5, 0, NULL, NULL) == 1;
    a.head_dim_v = HY_CUK_ATTN_MAX_HEAD + 1;
    ok &= hy_cuk_attention(&a, NULL, NULL, NULL, 5, 1, NULL, NULL) == 1;
    ok &= hy_cuk_flash_rows(257, 64) == 0 && hy_cuk_flash_rows(64, 0) == 0 &&
          hy_cuk_flash_rows(0, 64) == 0;
    HY_T_OK(ok, "launchers refuse bad tile rows, heads over 256, uneven GQA, no pages, "
            "too many tokens, no split, heads over %d", HY_CUK_ATTN_MAX_HEAD);
}

/* ---- on the GPU ---------------------------------------------------------------- */

/* The KV store kernel alone: each (token, kv head) K and V row of a few
 * tokens, written to a pool on the device, holds the bytes the CPU's
 * quantizer gives (the CPU backend's and the tiers' layout), rows of zeros
 * and of one large element included. */
static void test_kv_store(hy_dtype_t type)
{
    enum { NT = 5, NKV = 2, HD = 64, PT = 4, NPG = 4 };
    const size_t rb = hy_dtype_row_bytes(type, HD), pb = rb * PT * NKV;
    const int32_t pos[NT] = {0, 1, 5, 6, 2}, tok_seq[NT] = {0, 0, 1, 1, 0};
    const int32_t page_off[2] = {0, 2}, pages[4] = {3, 0, 1, 2};
    float *k = rnd_vec((size_t)NT * NKV * HD, 1.0f), *v = rnd_vec((size_t)NT * NKV * HD, 2.0f);
    uint8_t *host = malloc(pb * NPG), *want = malloc(rb);
    void *d_pool[2] = {NULL, NULL}, *d_meta = NULL, *d_kv = NULL;
    char where[160] = "";
    bool ok = true;
    hy_cuk_attn_t a;

    for (int i = 0; i < HD; i++)
        k[(size_t)1 * NKV * HD + i] = 0.0f;   /* token 1, head 0: zeros */
    v[(size_t)3 * NKV * HD + HD + 7] = 300.0f; /* token 3, head 1: one large element */
    memset(&a, 0, sizeof a);
    ok &= cudaMalloc(&d_pool[0], pb * NPG) == cudaSuccess &&
          cudaMalloc(&d_pool[1], pb * NPG) == cudaSuccess &&
          cudaMalloc(&d_meta, sizeof(int32_t) * 16) == cudaSuccess &&
          cudaMalloc(&d_kv, sizeof(float) * 2 * NT * NKV * HD) == cudaSuccess;
    if (ok) {
        int32_t meta[16];
        memcpy(meta, pos, sizeof pos);
        memcpy(meta + 5, tok_seq, sizeof tok_seq);
        memcpy(meta + 10, page_off, sizeof page_off);
        memcpy(meta + 12, pages, sizeof pages);
        ok &= cudaMemcpy(d_meta, meta, sizeof meta, cudaMemcpyHostToDevice) == cudaSuccess &&
              cudaMemcpy(d_kv, k, sizeof(float) * NT * NKV * HD, cudaMemcpyHostToDevice) ==
                  cudaSuccess &&
              cudaMemcpy((float *)d_kv + NT * NKV * HD, v, sizeof(float) * NT * NKV * HD,
                         cudaMemcpyHostToDevice) == cudaSuccess &&
              cudaMemset(d_pool[0], 0xAB, pb * NPG) == cudaSuccess &&
              cudaMemset(d_pool[1], 0xAB, pb * NPG) == cudaSuccess;
        a.k_pool = d_pool[0];
        a.v_pool = d_pool[1];
        a.k_row_bytes = a.v_row_bytes = rb;
        a.k_page_bytes = a.v_page_bytes = pb;
        a.kv_type = (int32_t)type;
        a.page_tokens = PT;
        a.n_head = a.n_head_kv = NKV;
        a.head_dim = a.head_dim_v = HD;
        a.pos = (const int32_t *)d_meta;
        a.tok_seq = (const int32_t *)d_meta + 5;
        a.page_off = (const int32_t *)d_meta + 10;
        a.pages = (const int32_t *)d_meta + 12;
        ok &= ok && hy_cuk_kv_write(&a, (const float *)d_kv, (const float *)d_kv + NT * NKV * HD,
                                    NT, NULL) == 0 &&
              cudaDeviceSynchronize() == cudaSuccess;
    }
    for (int which = 0; ok && which < 2; which++) {
        ok &= cudaMemcpy(host, d_pool[which], pb * NPG, cudaMemcpyDeviceToHost) == cudaSuccess;
        for (int t = 0; ok && t < NT; t++)
            for (int g = 0; ok && g < NKV; g++) {
                const float *src = (which ? v : k) + ((size_t)t * NKV + g) * HD;
                const uint8_t *row = host + (size_t)pages[page_off[tok_seq[t]] + pos[t] / PT] * pb +
                                     ((size_t)g * PT + pos[t] % PT) * rb;
                hy_quant_quantize_row(type, src, want, HD);
                if (memcmp(row, want, rb) != 0) {
                    size_t i = 0;
                    while (row[i] == want[i])
                        i++;
                    const size_t w0 = i & ~(size_t)3; /* the 4 bytes around it */
                    snprintf(where, sizeof where, ": token %d head %d %c, byte %zu: gpu "
                             "%02x %02x %02x %02x, cpu %02x %02x %02x %02x", t, g,
                             which ? 'V' : 'K', i, row[w0], row[w0 + 1], row[w0 + 2], row[w0 + 3],
                             want[w0], want[w0 + 1], want[w0 + 2], want[w0 + 3]);
                    ok = false;
                }
            }
    }
    HY_T_OK(ok, "KV store kernel, %s rows (zeros and a large element among them): the CPU's "
            "bytes%s", hy_dtype_info(type)->name, where);
    cudaFree(d_pool[0]);
    cudaFree(d_pool[1]);
    cudaFree(d_meta);
    cudaFree(d_kv);
    free(k);
    free(v);
    free(host);
    free(want);
}

/* Relative RMS error of the whole output and the worst row's (a row is
 * one token's head of hdv floats); INFINITY on any non-finite value. */
static void out_err(const pair_t *o, int hdv, double *rms, double *row_worst)
{
    float *h = malloc(sizeof(float) * o->n);
    double e = 0, r = 0;

    g_gpu->i->download(g_gpu, h, o->g, o->n);
    *row_worst = 0;
    for (size_t i0 = 0; i0 < o->n; i0 += (size_t)hdv) {
        double re = 0, rr = 0;
        for (size_t i = i0; i < i0 + (size_t)hdv; i++) {
            if (!isfinite(h[i]) || !isfinite(o->c[i])) {
                *rms = *row_worst = INFINITY;
                free(h);
                return;
            }
            re += ((double)h[i] - o->c[i]) * ((double)h[i] - o->c[i]);
            rr += (double)o->c[i] * o->c[i];
        }
        e += re;
        r += rr;
        *row_worst = fmax(*row_worst, rr > 0 ? sqrt(re / rr) : sqrt(re));
    }
    *rms = r > 0 ? sqrt(e / r) : sqrt(e);
    free(h);
}

/* One decode row of a long sequence A computed alone, after 15 rows of
 * another sequence B, and before them: the same bits each time (the KV
 * parts follow A's length, not the batch; 32 heads x 16 rows is the size
 * at which a split by the batch would change). */
static void test_decode_invariance(void)
{
    enum { NH = 32, NKV = 4, HD = 64, PT = 16, LA = 1000, LB = 40, NB = 15 };
    const int pa = (LA + 1 + PT - 1) / PT, pb = (LB + NB + PT - 1) / PT;
    hy_kv_layout_t lay = {1, NKV, HD, HD, PT, pa + pb, HY_DTYPE_F16, 0, NULL, {0, 0, 0, 0, 0, 0, 0}};
    hy_attn_params_t ap = {NH, NKV, HD, HD, 0.125f, 0, 0};
    int32_t *pages = malloc(sizeof(int32_t) * (size_t)(pa + pb));
    float *one = malloc(sizeof(float) * NH * HD), *row = malloc(sizeof(float) * NH * HD);
    char err[HY_ERR_LEN];
    bool same = true;

    for (int i = 0; i < pa + pb; i++)
        pages[i] = (i * 7) % (pa + pb); /* 7 is prime to the pool's size */
    if (g_gpu->i->kv_init(g_gpu, &lay, err) != HY_OK) {
        HY_T_OK(0, "kv_init: %s", err);
        free(pages);
        free(one);
        free(row);
        return;
    }
    float *qa = rnd_vec(NH * HD, 3.0f), *ka = rnd_vec(NKV * HD, 1.0f), *va = rnd_vec(NKV * HD, 1.0f);
    /* step: 0 prefill A and B; 1 A alone; 2 B's rows then A's; 3 A's then B's */
    for (int step = 0; step < 4; step++) {
        int na = step == 0 ? LA : 1, nb = step == 0 ? LB : step == 1 ? 0 : NB;
        int first_a = step == 2 ? nb : 0, n_tok = na + nb;
        hy_batch_seq_t seqs[2];
        int32_t *pos = malloc(sizeof(int32_t) * n_tok), *tok = calloc(n_tok, sizeof(int32_t));
        int sa = step == 2 ? 1 : 0;
        seqs[sa] = (hy_batch_seq_t){first_a, na, step == 0 ? 0 : LA, pages, pa, -1, NULL, 0, NULL,
                                    0, 0, 0, NULL, NULL};
        seqs[1 - sa] = (hy_batch_seq_t){step == 2 ? 0 : na, nb, step == 0 ? 0 : LB, pages + pa,
                                        pb, -1, NULL, 0, NULL, 0, 0, 0, NULL, NULL};
        for (int i = 0; i < na; i++)
            pos[first_a + i] = (step == 0 ? 0 : LA) + i;
        for (int i = 0; i < nb; i++)
            pos[(step == 2 ? 0 : na) + i] = (step == 0 ? 0 : LB) + i;
        hy_batch_t b = {n_tok, tok, pos, nb > 0 ? 2 : 1, nb > 0 || sa == 0 ? seqs : seqs + 1};
        float *q = rnd_vec((size_t)n_tok * NH * HD, 3.0f), *k = rnd_vec((size_t)n_tok * NKV * HD, 1.0f);
        float *v = rnd_vec((size_t)n_tok * NKV * HD, 1.0f);
        if (step > 0) { /* A's row: the same q, k, v every time */
            memcpy(q + (size_t)first_a * NH * HD, qa, sizeof(float) * NH * HD);
            memcpy(k + (size_t)first_a * NKV * HD, ka, sizeof(float) * NKV * HD);
            memcpy(v + (size_t)first_a * NKV * HD, va, sizeof(float) * NKV * HD);
        }
        pair_t pq = pair_new(q, (size_t)n_tok * NH * HD), pk = pair_new(k, (size_t)n_tok * NKV * HD);
        pair_t pv = pair_new(v, (size_t)n_tok * NKV * HD), po = pair_new(NULL, (size_t)n_tok * NH * HD);
        g_gpu->i->attention(g_gpu, 0, &b, pq.g, pk.g, pv.g, po.g, &ap);
        if (step > 0) {
            g_gpu->i->download(g_gpu, step == 1 ? one : row, po.g + (size_t)first_a * NH * HD,
                               NH * HD);
            if (step > 1)
                same &= memcmp(one, row, sizeof(float) * NH * HD) == 0;
        }
        pair_free(&pq);
        pair_free(&pk);
        pair_free(&pv);
        pair_free(&po);
        free(q);
        free(k);
        free(v);
        free(pos);
        free(tok);
    }
    HY_T_OK(same && both_ok("decode invariance"),
            "a decode row of a %d-key sequence alone, after %d rows of another and before "
            "them: the same bits", LA + 1, NB);
    free(qa);
    free(ka);
    free(va);
    free(pages);
    free(one);
    free(row);
}

typedef struct {
    hy_dtype_t kv;
    int hd, hdv, n_head, n_kv, pt, window;
    float softcap;
    int prefill; /* tokens of the prefilling sequence */
} acase_t;

/* Step 0: A prefills `prefill` tokens, B 40, C 20 (fresh).  Step 1, rows in
 * the order C, A, B: C continues with 17 tokens (flash with history), A
 * decodes one token after its long prompt (split kernel), B decodes 3.
 * Both steps on kv layer 1 of 2, pages a shuffled permutation of the pool. */
static void test_case(const acase_t *c)
{
    const int n_head = c->n_head, n_kv = c->n_kv, hd = c->hd, hdv = c->hdv, pt = c->pt;
    int len[3] = {c->prefill + 1, 43, 37}; /* final lengths of A, B, C */
    int n_pages[3], total = 0;
    char err[HY_ERR_LEN];
    double rms_worst = 0, row_worst = 0;

    for (int s = 0; s < 3; s++) {
        n_pages[s] = (len[s] + pt - 1) / pt;
        total += n_pages[s];
    }
    hy_kv_layout_t lay = {2, n_kv, hd, hdv, pt, total + 5, c->kv, 0, NULL, {0, 0, 0, 0, 0, 0, 0}};
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)lay.n_pages);
    for (int i = 0; i < lay.n_pages; i++)
        perm[i] = i;
    for (int i = lay.n_pages - 1; i > 0; i--) {
        int j = rnd_int(i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    if (g_cpu->i->kv_init(g_cpu, &lay, err) != HY_OK || g_gpu->i->kv_init(g_gpu, &lay, err) != HY_OK) {
        HY_T_OK(0, "kv_init: %s", err);
        free(perm);
        return;
    }
    const int32_t *pages[3] = {perm, perm + n_pages[0], perm + n_pages[0] + n_pages[1]};
    hy_attn_params_t ap = {n_head, n_kv, hd, hdv, 1.0f / sqrtf((float)hd), c->window, c->softcap};
    for (int step = 0; step < 2; step++) {
        /* sequence order in the batch and their (n, past) this step */
        int order[3] = {0, 1, 2}, n[3] = {c->prefill, 40, 20}, past[3] = {0, 0, 0};
        if (step == 1) {
            order[0] = 2, order[1] = 0, order[2] = 1;
            n[0] = 1, n[1] = 3, n[2] = 17;
            past[0] = c->prefill, past[1] = 40, past[2] = 20;
        }
        hy_batch_seq_t seqs[3];
        int32_t n_tok = 0;
        for (int i = 0; i < 3; i++)
            n_tok += n[order[i]];
        int32_t *pos = malloc(sizeof(int32_t) * n_tok), *tokens = calloc(n_tok, sizeof(int32_t));
        n_tok = 0;
        for (int i = 0; i < 3; i++) {
            int s = order[i];
            seqs[i] = (hy_batch_seq_t){n_tok, n[s], past[s], pages[s], n_pages[s], -1, NULL, 0,
                                       NULL, 0, 0, 0, NULL, NULL};
            for (int k = 0; k < n[s]; k++)
                pos[n_tok + k] = past[s] + k;
            n_tok += n[s];
        }
        hy_batch_t b = {n_tok, tokens, pos, 3, seqs};
        size_t nq = (size_t)n_tok * n_head * hd, nk = (size_t)n_tok * n_kv * hd;
        size_t nv = (size_t)n_tok * n_kv * hdv, no = (size_t)n_tok * n_head * hdv;
        float *qv = rnd_vec(nq, 3.0f), *kv = rnd_vec(nk, 1.0f), *vv = rnd_vec(nv, 1.0f);
        pair_t q = pair_new(qv, nq), k = pair_new(kv, nk), v = pair_new(vv, nv),
               o = pair_new(NULL, no);
        double rms, row;
        g_cpu->i->attention(g_cpu, 1, &b, q.c, k.c, v.c, o.c, &ap);
        g_gpu->i->attention(g_gpu, 1, &b, q.g, k.g, v.g, o.g, &ap);
        out_err(&o, hdv, &rms, &row);
        rms_worst = fmax(rms_worst, rms);
        row_worst = fmax(row_worst, row);
        pair_free(&q);
        pair_free(&k);
        pair_free(&v);
        pair_free(&o);
        free(qv);
        free(kv);
        free(vv);
        free(pos);
        free(tokens);
    }
    double tol = c->kv == HY_DTYPE_F32 ? TOL_F32 : TOL_HALF;
    /* a row is a few hundred floats: allow it 10x the whole output's bound
     * at f32, which still catches one wrong row among thousands */
    double row_tol = c->kv == HY_DTYPE_F32 ? 10 * TOL_F32 : TOL_HALF;
    HY_T_OK(both_ok("attention") && rms_worst <= tol && row_worst <= row_tol,
            "prefill %d + decode, kv %s, head %d/%d, GQA %d (%d kv heads), page %d, window %d, "
            "softcap %g: rel err %.2e (limit %.0e), worst row %.2e (limit %.0e)",
            c->prefill, hy_dtype_info(c->kv)->name, hd, hdv, n_head / n_kv, n_kv, pt, c->window,
            c->softcap, rms_worst, tol, row_worst, row_tol);
    free(perm);
}

int main(void)
{
    static const acase_t cases[] = {
        /* kv, hd, hdv, heads, kv heads, page, window, softcap, prefill */
        {HY_DTYPE_F32, 64, 64, 4, 4, 16, 0, 0.0f, 1},
        {HY_DTYPE_F32, 64, 64, 4, 4, 16, 0, 0.0f, 17},
        {HY_DTYPE_F32, 128, 128, 16, 4, 32, 0, 0.0f, 64},
        {HY_DTYPE_F32, 128, 128, 16, 4, 16, 0, 0.0f, 300},
        {HY_DTYPE_F32, 256, 256, 16, 2, 64, 0, 0.0f, 1000},
        {HY_DTYPE_F32, 256, 256, 8, 8, 7, 0, 0.0f, 300},
        {HY_DTYPE_F16, 128, 128, 8, 1, 16, 0, 0.0f, 300},
        {HY_DTYPE_F16, 256, 256, 16, 4, 32, 0, 0.0f, 1000},
        {HY_DTYPE_F16, 64, 64, 32, 4, 16, 0, 0.0f, 64},
        {HY_DTYPE_Q8_0, 128, 128, 16, 2, 16, 0, 0.0f, 300},
        {HY_DTYPE_F32, 64, 64, 8, 2, 16, 40, 30.0f, 300},
        {HY_DTYPE_F32, 128, 128, 8, 1, 32, 100, 0.0f, 1000},
        {HY_DTYPE_F16, 256, 256, 8, 2, 16, 0, 50.0f, 64},
        {HY_DTYPE_F32, 80, 48, 6, 3, 16, 0, 0.0f, 100},   /* padded heads */
        {HY_DTYPE_F32, 512, 512, 4, 1, 16, 0, 0.0f, 64},  /* over 256: split kernel */
        {HY_DTYPE_F32, 64, 64, 4, 1, 16, 0, 0.0f, 4000},  /* decode split in ~15 parts */
    };
    char err[HY_ERR_LEN];
    hy_backend_opts_t bo = {.n_threads = 0};
    int rc;

    test_plan();
    test_replica(0, 0.0f, 4);
    test_replica(7, 0.0f, 8);
    test_replica(50, 20.0f, 1);
    test_launch_checks();
    emu_stacks = malloc((size_t)EMU_T * EMU_STACK);
    HY_T_OK(EMU_T == HY_FA_THREADS && emu_stacks, "emulation: %d threads a block", EMU_T);
    /* kv, hd, hdv, heads, kv heads, page, window, softcap, n0, past0, n1, past1 */
    test_emulated(HY_DTYPE_F32, 64, 64, 4, 2, 16, 0, 0.0f, 37, 30, 5, 3, 0);
    test_emulated(HY_DTYPE_F16, 256, 256, 4, 1, 7, 10, 20.0f, 12, 20, 3, 0, 0);
    test_emulated(HY_DTYPE_Q8_0, 128, 128, 2, 2, 16, 0, 0.0f, 20, 50, 1, 0, 0);
    test_emulated(HY_DTYPE_F32, 80, 48, 3, 1, 5, 0, 0.0f, 25, 0, 2, 9, 0);
    /* the decode kernel: the parts of 300 keys and more (5 and 5+), a
     * window of 5 in 4 parts (3 empty), a head over 256 */
    test_emulated(HY_DTYPE_F32, 64, 64, 4, 2, 16, 0, 0.0f, 3, 300, 1, 40, 1);
    test_emulated(HY_DTYPE_F16, 128, 96, 4, 1, 7, 0, 30.0f, 3, 300, 1, 40, 7);
    test_emulated(HY_DTYPE_Q8_0, 64, 64, 2, 2, 16, 5, 0.0f, 3, 20, 1, 2, 4);
    test_emulated(HY_DTYPE_F32, 300, 40, 2, 1, 16, 0, 0.0f, 2, 150, 1, 0, 2);
    free(emu_stacks);

    rc = hy_backend_cuda_new(&g_gpu, &bo, err);
    if (rc != HY_OK) {
        printf("ok %d - CUDA attention against the CPU backend # SKIP no GPU (%s)\n",
               ++hy_t_count, err);
        return hy_t_done();
    }
    rc = hy_backend_cpu_new(&g_cpu, &bo, err);
    if (rc != HY_OK) {
        HY_T_OK(0, "cpu backend: %s", err);
        g_gpu->i->free(g_gpu);
        return hy_t_done();
    }
    HY_T_OK(hy_cuk_flash_rows(64, 64) == 64 && hy_cuk_flash_rows(128, 128) == 64 &&
                hy_cuk_flash_rows(80, 48) == 64 && hy_cuk_flash_rows(129, 64) == 32 &&
                hy_cuk_flash_rows(256, 256) == 32 && hy_cuk_flash_rows(512, 512) == 0,
            "flash kernel takes heads up to 256 on this GPU (64 rows a tile, 32 past 128)");
    test_kv_store(HY_DTYPE_F32);
    test_kv_store(HY_DTYPE_F16);
    test_kv_store(HY_DTYPE_Q8_0);
    test_decode_invariance();
    for (size_t i = 0; i < HY_ARRAY_LEN(cases); i++)
        test_case(&cases[i]);
    g_cpu->i->free(g_cpu);
    g_gpu->i->free(g_gpu);
    return hy_t_done();
}
