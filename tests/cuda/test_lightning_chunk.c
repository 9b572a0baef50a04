/*
 * test_lightning_chunk.c - the CUDA backend's lightning-attention code
 * (kernels/hy_lightning.h) run on the host against the CPU backend's op,
 * which it must equal bit for bit (both follow backend/lightning.h's
 * arithmetic without fused multiply-adds; this file is built with
 * -ffp-contract=off).  Each block of the blocked kernel runs on 1 or 3
 * host threads with a real barrier (so a phase that read what another
 * thread of it writes, or a work split that missed an element, would show)
 * and shared memory sized exactly as planned and filled with NaN; the
 * key write-back runs after all tiles, as its launch does.  Slots are
 * compared where they are live (same_live).  Cases: ragged
 * batches of prefill continuations and decode steps at odd positions,
 * head sizes across tile boundaries (16, 40, 128), chunks 16 and 5, and
 * the chunk-1 recurrence; plus the shared-memory plan per device class.
 */
#include "backend/backend.h"
#include "backend/cpu/lightning.h"

#include <pthread.h>

static pthread_barrier_t emu_bar;
#define HY_LA_SYNC() pthread_barrier_wait(&emu_bar)
#include "hy_lightning.h"

#include "../unit/test.h"
#define HY_TEST_SEED 0x1234ABCDULL
#include "../unit/cpu_test.h"

#include <math.h>
#include <string.h>

/* Shared memory a block may opt into: A100 (sm_80) and H100/H200 (sm_90). */
#define OPTIN_SM80 166912
#define OPTIN_SM90 232448

enum { N_SLOTS = 3, MAX_STEPS = 4 };

typedef struct {
    const hy_la_args_t *a;
    int64_t row0, n_past;
    int n, h, j0, tv, tid, nth;
    float *St, *sm;
} emu_block_t;

static void *emu_thread(void *arg)
{
    emu_block_t *b = arg;

    hy_la_block(b->a, b->row0, b->n, b->n_past, b->St, b->h, b->j0, b->tv, b->sm, b->tid, b->nth);
    return NULL;
}

/* One block on nth host threads. */
static void emu_block(emu_block_t blk, int nth)
{
    pthread_t th[4];
    emu_block_t bs[4];

    pthread_barrier_init(&emu_bar, NULL, (unsigned)nth);
    for (int t = 0; t < nth; t++) {
        bs[t] = blk;
        bs[t].tid = t;
        bs[t].nth = nth;
        if (t > 0)
            pthread_create(&th[t], NULL, emu_thread, &bs[t]);
    }
    emu_thread(&bs[0]);
    for (int t = 1; t < nth; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&emu_bar);
}

/* The launcher's work for one batch, on the emulated slots st. */
static void emu_call(const hy_la_args_t *a, const hy_batch_t *b, float *st, int64_t slot_floats,
                     int nth)
{
    const int d = a->d, C = a->chunk;
    const int64_t hf = hy_la_head_floats(d, C);

    for (int s = 0; s < b->n_seqs; s++) {
        const hy_batch_seq_t *q = &b->seqs[s];
        for (int h = 0; h < a->n_head; h++) {
            float *St = st + (int64_t)q->state_slot * slot_floats + (int64_t)h * hf;
            if (C == 1) {
                /* the recurrent kernel: one "thread" per column, q|k staged */
                float qk[2 * 256];
                for (int t = 0; t < q->n; t++) {
                    const int64_t off = ((int64_t)q->first + t) * a->row_stride +
                                        (int64_t)h * a->head_stride;
                    const float lam1 = a->decay[h * 2 + 1];
                    memcpy(qk, a->q + off, sizeof(float) * (size_t)d);
                    memcpy(qk + d, a->k + off, sizeof(float) * (size_t)d);
                    for (int j = 0; j < d; j++)
                        hy_la_rec_column(St, qk, a->v[off + j], lam1, d, j,
                                         &a->o[((int64_t)q->first + t) * a->n_head * d +
                                               (int64_t)h * d + j]);
                }
                continue;
            }
            for (int j0 = 0; j0 < d; j0 += HY_LA_TV) {
                const size_t nf = hy_la_smem_floats(d, C);
                float *sm = malloc(sizeof(float) * nf);
                emu_block_t blk = {a, q->first, q->n_past, q->n, h, j0, HY_MIN(HY_LA_TV, d - j0),
                                   0, 1, St, sm};
                for (size_t e = 0; e < nf; e++)
                    sm[e] = NAN;
                emu_block(blk, nth);
                free(sm);
            }
        }
    }
    if (C == 1)
        return;
    for (int s = 0; s < b->n_seqs; s++) { /* the second launch */
        const hy_batch_seq_t *q = &b->seqs[s];
        const int pend = (int)((q->n_past + q->n) % C), keep = HY_MIN(pend, q->n);
        for (int h = 0; h < a->n_head; h++)
            for (int e = 0; e < keep * d; e++)
                hy_la_keys_back(a, q->first, q->n, q->n_past,
                                st + (int64_t)q->state_slot * slot_floats + (int64_t)h * hf, h, e);
    }
}

/* Whether two slots of a layer hold the same state after n rows: S, and of
 * the current block only its n % C live rows (the columns past them hold
 * rows already folded into S, which neither implementation reads, and
 * which the CPU keeps while the GPU's tiles do not write them back). */
static bool same_live(const float *a, const float *b, int H, int d, int C, int n)
{
    const int64_t hf = hy_la_head_floats(d, C);
    const int m = C > 1 ? n % C : 0;

    for (int h = 0; h < H; h++) {
        const float *ah = a + h * hf, *bh = b + h * hf;
        if (memcmp(ah, bh, sizeof(float) * (size_t)d * d) != 0)
            return false;
        for (int i = 0; i < d && C > 1; i++)
            if (memcmp(ah + (size_t)d * d + (size_t)i * C, bh + (size_t)d * d + (size_t)i * C,
                       sizeof(float) * (size_t)m) != 0)
                return false;
        if (C > 1 && memcmp(ah + (size_t)d * d + (size_t)d * C, bh + (size_t)d * d + (size_t)d * C,
                            sizeof(float) * (size_t)m * d) != 0)
            return false;
    }
    return true;
}

/* A schedule: per call, rows per sequence (0: not in the call). */
typedef struct {
    int n_calls;
    int rows[MAX_STEPS][N_SLOTS];
} sched_t;

/* Runs the schedule on the CPU op and on the emulation, comparing outputs
 * and all slots after every call. */
static void check(hy_backend_t *be, int H, int d, int C, const sched_t *sc, int nth)
{
    const hy_lightning_params_t p = {H, d, C};
    const int hs = 3 * d + 1, stride = H * hs + 3, O = H * d;
    int64_t rec = hy_lightning_state_floats(&p), conv = 0;
    hy_state_layout_t lay = {1, N_SLOTS, &conv, &rec};
    float slope[8], table[8 * (HY_LIGHTNING_MAX_CHUNK + 1)];
    float *emu_st = calloc((size_t)N_SLOTS * (size_t)rec, sizeof(float));
    hy_weight_t sw = {HY_DTYPE_F32, {C + 1, H, 1, 1}, sizeof(float) * (size_t)(C + 1), table,
                      NULL, "decay", HY_WLAYOUT_ROWS};
    int n_past[N_SLOTS] = {0};
    char err[HY_ERR_LEN];
    bool same = true;
    int calls = 0;

    for (int h = 0; h < H; h++)
        slope[h] = h == H - 1 ? 0.0f : 0.5f * powf(0.3f, (float)h);
    hy_lightning_decays(slope, H, C, table);
    if (be->i->state_init(be, &lay, err) != HY_OK) {
        HY_T_OK(0, "state_init: %s", err);
        free(emu_st);
        return;
    }
    for (int s = 0; s < N_SLOTS; s++)
        be->i->state_clear(be, s);
    for (int c = 0; c < sc->n_calls && same; c++) {
        hy_batch_seq_t seqs[N_SLOTS];
        hy_batch_t b = {0, NULL, NULL, 0, seqs};
        float *x, *o_cpu, *o_emu;
        hy_la_args_t a;

        for (int s = 0; s < N_SLOTS; s++)
            if (sc->rows[c][s] > 0) {
                /* slots in reverse: not the row order */
                seqs[b.n_seqs++] = (hy_batch_seq_t){b.n_tokens, sc->rows[c][s], n_past[s], NULL,
                                                    0, N_SLOTS - 1 - s, NULL, 0, NULL, 0, 0, 0,
                                                    NULL, NULL};
                b.n_tokens += sc->rows[c][s];
            }
        x = malloc(sizeof(float) * (size_t)b.n_tokens * stride);
        o_cpu = malloc(sizeof(float) * (size_t)b.n_tokens * O);
        o_emu = malloc(sizeof(float) * (size_t)b.n_tokens * O);
        fill(x, (size_t)b.n_tokens * stride, 1.0f);
        be->i->lightning(be, 0, &b, x, x + d, x + 2 * d, stride, hs, &sw, o_cpu, &p);
        same = be->i->status(be, err) == HY_OK;
        a = (hy_la_args_t){x, x + d, x + 2 * d, stride, hs, table, o_emu, H, d, C};
        emu_call(&a, &b, emu_st, rec, nth);
        same = same && memcmp(o_cpu, o_emu, sizeof(float) * (size_t)b.n_tokens * O) == 0;
        for (int i = 0; i < b.n_seqs; i++)
            n_past[N_SLOTS - 1 - seqs[i].state_slot] += seqs[i].n;
        for (int s = 0; s < N_SLOTS; s++)
            same = same && same_live(hy_cpu_state_rec(be->ctx, N_SLOTS - 1 - s, 0),
                                     emu_st + (size_t)(N_SLOTS - 1 - s) * rec, H, d, C, n_past[s]);
        free(x);
        free(o_cpu);
        free(o_emu);
        calls++;
    }
    HY_T_OK(same, "H %d d %d chunk %d, %d call(s), %d thread(s) per block: outputs and slots "
            "equal the CPU op bit for bit (%d calls compared)", H, d, C, sc->n_calls, nth, calls);
    free(emu_st);
}

int main(void)
{
    /* prefill of 37 / 1 / 20 rows, then continuations and decode steps */
    static const sched_t mixed = {4, {{37, 1, 20}, {1, 1, 13}, {30, 0, 1}, {1, 17, 1}}};
    static const sched_t one = {1, {{100, 0, 0}}};
    hy_backend_t *be = new_backend(2);

    if (be == NULL) {
        HY_T_OK(0, "cpu backend");
        return hy_t_done();
    }
    /* the CPU builds give the same bits (test_lightning); pin one */
    hy_cpu_lightning_set_isa(0);
    check(be, 4, 16, 16, &mixed, 1);
    check(be, 4, 16, 16, &mixed, 3);
    check(be, 2, 40, 5, &mixed, 3);
    check(be, 3, 16, 1, &mixed, 1);
    check(be, 1, 128, 16, &one, 3);
    check(be, 2, 128, 16, &mixed, 1);
    hy_cpu_lightning_set_isa(-1);

    HY_T_OK(sizeof(float) * hy_la_smem_floats(128, 16) <= 48 * 1024,
            "plan: MiniMax's head 128 with chunk 16 takes %zu bytes of shared memory, under the "
            "48 KB every device gives", sizeof(float) * hy_la_smem_floats(128, 16));
    HY_T_OK(sizeof(float) * hy_la_smem_floats(256, 64) > OPTIN_SM80 &&
                sizeof(float) * hy_la_smem_floats(256, 64) <= OPTIN_SM90,
            "plan: the largest (head 256, chunk 64: %zu bytes) fits an H100/H200 block, not an "
            "A100's (the op refuses it there)", sizeof(float) * hy_la_smem_floats(256, 64));
    be->i->free(be);
    return hy_t_done();
}
