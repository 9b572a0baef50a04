/*
 * moe.c - the CPU backend's mixture-of-experts FFN: router matmul, per-token
 * top-k selection (softmax or sigmoid gating, optional selection bias,
 * renormalisation and scale, see hy_moe_t), then the chosen experts' SwiGLU
 * FFNs.  Tokens are grouped by expert so each expert's three matrices are
 * read once per call and multiplied against all of its tokens by the
 * ordinary matmul path (a 2-D view of the expert's slice of the 3-D stack).
 */
#include "backend/cpu/cpu_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Router work per token is tiny: share it only over many tokens. */
#define HY_MOE_ROUTE_PAR_MIN 64

typedef struct {
    const hy_moe_t *moe;
    const float *logits;   /* [n_tok][n_expert] */
    const float *bias;     /* [n_expert] selection bias or NULL */
    int32_t *sel;          /* [n_tok][k] chosen experts */
    float *wsel;           /* [n_tok][k] their weights */
    int32_t n_tok;
} hy_route_job_t;

static void hy_route_worker(void *arg, int ith, int nth)
{
    hy_route_job_t *j = arg;
    const hy_moe_t *m = j->moe;
    int32_t E = m->n_expert, K = m->n_expert_used;
    int64_t lo, hi;
    float *p = malloc((size_t)E * sizeof(float));
    uint8_t *taken = malloc((size_t)E);

    hy_cpu_split(j->n_tok, ith, nth, &lo, &hi);
    if (!p || !taken) {
        /* the caller sees -1 and reports it (ops cannot fail otherwise) */
        for (int64_t t = lo; t < hi; t++)
            for (int32_t k = 0; k < K; k++)
                j->sel[t * K + k] = -1;
        goto out;
    }
    for (int64_t t = lo; t < hi; t++)
        hy_moe_route_one(m, j->logits + t * E, j->bias, p, taken, j->sel + t * K,
                         j->wsel + t * K);
out:
    free(p);
    free(taken);
}

/* Expert e's 2-D matrix inside a 3-D stack. */
static hy_weight_t hy_moe_slice(const hy_weight_t *stack, int32_t e)
{
    hy_weight_t v = *stack;

    v.data = (const uint8_t *)stack->data + (size_t)e * (size_t)stack->ne[1] * stack->row_bytes;
    v.ne[2] = 1;
    v.ne[3] = 1;
    v.dev = NULL;
    return v;
}

static bool hy_moe_check(hy_cpu_t *cpu, const hy_moe_t *m, int32_t n_embd)
{
    const hy_weight_t *st[3] = {&m->gate_exps, &m->up_exps, &m->down_exps};
    int64_t want[3][2] = {{n_embd, m->n_ff_exp}, {n_embd, m->n_ff_exp}, {m->n_ff_exp, n_embd}};
    char err[HY_ERR_LEN];

    if (m->n_expert <= 0 || m->n_expert_used <= 0 || m->n_expert_used > m->n_expert ||
        m->n_ff_exp <= 0) {
        hy_cpu_fail(cpu, HY_EINVAL, "moe: %d of %d experts with n_ff_exp %d", m->n_expert_used,
                    m->n_expert, m->n_ff_exp);
        return false;
    }
    if (m->gate_inp.ne[0] != n_embd || m->gate_inp.ne[1] != m->n_expert ||
        hy_cpu_weight_check(&m->gate_inp, err) != HY_OK) {
        hy_cpu_fail(cpu, HY_EINVAL, "moe: router %s is %lld x %lld, want %d x %d",
                    m->gate_inp.name ? m->gate_inp.name : "?", (long long)m->gate_inp.ne[0],
                    (long long)m->gate_inp.ne[1], n_embd, m->n_expert);
        return false;
    }
    for (int i = 0; i < 3; i++) {
        hy_weight_t v = hy_moe_slice(st[i], 0);
        if (st[i]->ne[0] != want[i][0] || st[i]->ne[1] != want[i][1] ||
            st[i]->ne[2] != m->n_expert || hy_cpu_weight_check(&v, err) != HY_OK) {
            hy_cpu_fail(cpu, HY_EINVAL, "moe: expert stack %s is %lld x %lld x %lld, want "
                        "%lld x %lld x %d", st[i]->name ? st[i]->name : "?",
                        (long long)st[i]->ne[0], (long long)st[i]->ne[1],
                        (long long)st[i]->ne[2], (long long)want[i][0],
                        (long long)want[i][1], m->n_expert);
            return false;
        }
    }
    return true;
}

size_t hy_cpu_moe_scratch_bytes(const hy_moe_t *m, int32_t n_tok, int32_t n_embd)
{
    size_t E = (size_t)m->n_expert, nk = (size_t)n_tok * (size_t)m->n_expert_used, need;

    /* one block: logits | wsel | we | sel | cnt | start | tok | xe | ge | ue | de */
    need = ((size_t)n_tok * E + 2 * nk) * sizeof(float) + (nk + 2 * E + 2 + nk) *
           sizeof(int32_t) + 64;
    need = (need + 63) / 64 * 64;
    return need + ((size_t)n_tok * n_embd * 2 + (size_t)n_tok * m->n_ff_exp * 2) * sizeof(float);
}

void hy_cpu_moe(hy_backend_t *be, const hy_moe_t *m, const float *x, float *y,
                int32_t n_tok, int32_t n_embd)
{
    hy_cpu_t *cpu = be->ctx;
    hy_route_job_t rj;
    float *btmp = NULL;
    int32_t E = m->n_expert, K = m->n_expert_used, F = m->n_ff_exp;
    size_t nk, need;
    uint8_t *buf;
    float *logits, *wsel, *xe, *ge, *ue, *de, *we;
    int32_t *sel, *cnt, *start, *tok;

    if (n_tok <= 0)
        return;
    memset(y, 0, (size_t)n_tok * (size_t)HY_MAX(n_embd, 0) * sizeof(float));
    if (n_embd <= 0 || !hy_moe_check(cpu, m, n_embd))
        return;
    memset(&rj, 0, sizeof rj);
    if (m->exp_bias.data) {
        rj.bias = hy_cpu_weight_floats(cpu, "moe selection bias", &m->exp_bias, E, &btmp);
        if (!rj.bias)
            return;
    }

    nk = (size_t)n_tok * (size_t)K;
    need = hy_cpu_moe_scratch_bytes(m, n_tok, n_embd);
    if (hy_cpu_scratch(&cpu->moe_buf, &cpu->moe_buf_size, need) != 0) {
        hy_cpu_fail(cpu, HY_ENOMEM, "moe: cannot allocate %zu bytes of scratch", need);
        goto out;
    }
    buf = cpu->moe_buf;
    logits = (float *)buf;
    wsel = logits + (size_t)n_tok * E;
    we = wsel + nk;
    sel = (int32_t *)(we + nk);
    cnt = sel + nk;
    start = cnt + E + 1;
    tok = start + E + 1;
    xe = (float *)(buf + ((((uint8_t *)(tok + nk) - buf) + 63) / 64 * 64));
    ge = xe + (size_t)n_tok * n_embd;
    ue = ge + (size_t)n_tok * F;
    de = ue + (size_t)n_tok * F;

    /* 1. route */
    hy_cpu_matmul(be, &m->gate_inp, x, logits, n_tok);
    rj.moe = m;
    rj.logits = logits;
    rj.sel = sel;
    rj.wsel = wsel;
    rj.n_tok = n_tok;
    hy_pool_run_n(cpu->pool,
                  n_tok >= HY_MOE_ROUTE_PAR_MIN ? HY_MIN(cpu->n_threads, n_tok / 32) : 1,
                  hy_route_worker, &rj);

    /* 2. group (token, weight) pairs by expert (counting sort keeps token
     * order inside each expert) */
    memset(cnt, 0, (size_t)(E + 1) * sizeof(int32_t));
    for (size_t i = 0; i < nk; i++) {
        if (sel[i] < 0) {
            hy_cpu_fail(cpu, HY_ENOMEM, "moe: routing ran out of memory");
            goto out;
        }
        cnt[sel[i]]++;
    }
    start[0] = 0;
    for (int32_t e = 0; e < E; e++)
        start[e + 1] = start[e] + cnt[e];
    memset(cnt, 0, (size_t)(E + 1) * sizeof(int32_t));
    for (size_t i = 0; i < nk; i++) {
        int32_t e = sel[i], at = start[e] + cnt[e]++;
        tok[at] = (int32_t)(i / (size_t)K);
        we[at] = wsel[i];
    }

    /* 3. each used expert over its tokens */
    for (int32_t e = 0; e < E; e++) {
        int32_t n = start[e + 1] - start[e];
        const int32_t *te = tok + start[e];
        const float *wte = we + start[e];
        hy_weight_t wg, wu, wd;

        if (n == 0)
            continue;
        for (int32_t i = 0; i < n; i++)
            memcpy(xe + (size_t)i * n_embd, x + (size_t)te[i] * n_embd,
                   (size_t)n_embd * sizeof(float));
        wg = hy_moe_slice(&m->gate_exps, e);
        wu = hy_moe_slice(&m->up_exps, e);
        wd = hy_moe_slice(&m->down_exps, e);
        hy_cpu_matmul(be, &wg, xe, ge, n);
        hy_cpu_matmul(be, &wu, xe, ue, n);
        be->i->swiglu(be, ge, ue, ge, (size_t)n * F);
        hy_cpu_matmul(be, &wd, ge, de, n);
        for (int32_t i = 0; i < n; i++) {
            float *yt = y + (size_t)te[i] * n_embd;
            const float *d = de + (size_t)i * n_embd;
            float w = wte[i];
            for (int32_t c = 0; c < n_embd; c++)
                yt[c] += w * d[c];
        }
    }
out:
    free(btmp);
}
