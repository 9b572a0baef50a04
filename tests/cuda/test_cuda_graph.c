/*
 * test_cuda_graph.c - decode steps replayed as CUDA graphs.  Each golden
 * tiny model (every one tests/golden/tiny/manifest.json lists) runs the same ragged multi-sequence schedule (a prefill of
 * three prompts, repeated 3-sequence decodes, 2-sequence decodes, a step
 * with two tokens for one sequence, and back) on the CPU backend, on the
 * CUDA backend with graphs and on one with HY_CUDA_GRAPHS=0.  Every logit
 * row must agree (graphs vs eager GPU <= 1e-6, GPU vs CPU <= 1e-4 with F32
 * KV), and the backend's counters must show the graphs were used: captured,
 * updated in place on repeats, never broken - MoE models included, since
 * their decode steps route and run the experts on the device with no host
 * synchronisation (kernels/hy_moe.cu).  Without a GPU it skips.
 */
#include "backend/backend.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/graph.h"
#include "engine/runner.h"
#include "model/model.h"
#include "../unit/test.h"
#include "../unit/golden.h"
#include "cuda_test.h"

#include <math.h>
#include <string.h>

#define MAX_ROWS 512

typedef struct {
    int32_t seqs[3];   /* which sequences take part */
    int32_t n_tok[3];  /* tokens each */
    int32_t n;         /* sequences in the step */
} step_t;

/* The schedule: prefill, then shapes that repeat (so graphs replay), change
 * (so they are looked up again) and come back (so the LRU entry is reused). */
static int build_schedule(step_t *s)
{
    int n = 0, i;

    s[n++] = (step_t){{0, 1, 2}, {5, 9, 3}, 3};
    for (i = 0; i < 6; i++)
        s[n++] = (step_t){{0, 1, 2}, {1, 1, 1}, 3};
    for (i = 0; i < 4; i++)
        s[n++] = (step_t){{0, 2, 0}, {1, 1, 0}, 2};
    for (i = 0; i < 3; i++)
        s[n++] = (step_t){{0, 1, 2}, {1, 2, 1}, 3};
    for (i = 0; i < 5; i++)
        s[n++] = (step_t){{0, 1, 2}, {1, 1, 1}, 3};
    return n;
}


/* Runs the schedule on be; logit rows (one per sequence per step) into out.
 * Returns the number of rows, or -1 with err set. */
static int run_schedule(hy_backend_t *be, const char *path, float *out, int32_t *n_vocab,
                        char *err)
{
    hy_model_t *m = NULL;
    hy_runner_t r;
    hy_runner_opts_t o;
    hy_kv_seq_t seq[3];
    step_t st[32];
    int n_steps = build_schedule(st), rows = -1;
    int32_t toks[3][16];

    memset(seq, 0, sizeof seq);
    if (hy_model_load(&m, path, be, err) != HY_OK)
        return -1;
    hy_runner_opts_default(&o);
    o.max_tokens = 64;
    o.max_outputs = 8;
    o.max_seqs = 4;
    o.n_ctx = 64;
    o.kv_type = HY_DTYPE_F32;
    if (hy_runner_init(&r, m, be, &o, err) != HY_OK) {
        hy_model_free(m);
        return -1;
    }
    *n_vocab = m->n_vocab;
    rows = 0;
    for (int s = 0; s < n_steps && rows >= 0; s++) {
        hy_runner_item_t it[3];

        for (int i = 0; i < st[s].n; i++) {
            int q = st[s].seqs[i];
            for (int j = 0; j < st[s].n_tok[i]; j++) /* deterministic ids, same on every backend */
                toks[q][j] = (int32_t)((7u * (unsigned)(seq[q].n_tokens + j) + 13u * (unsigned)q + 1u) %
                                       (unsigned)m->n_vocab);
            it[i] = (hy_runner_item_t){&seq[q], toks[q], st[s].n_tok[i], false};
        }
        if (rows + st[s].n > MAX_ROWS ||
            hy_runner_step(&r, it, st[s].n, out + (size_t)rows * m->n_vocab, err) != HY_OK) {
            rows = -1;
            break;
        }
        rows += st[s].n;
    }
    for (int q = 0; q < 3; q++)
        hy_runner_seq_release(&r, &seq[q]);
    hy_runner_free(&r);
    hy_model_free(m);
    return rows;
}

/* A fresh CUDA backend per model, so each starts with an empty graph cache;
 * eager: with HY_CUDA_GRAPHS=0 (read when the backend is created). */
static hy_backend_t *gpu_new(bool eager, char *err)
{
    hy_backend_opts_t bo = {.n_threads = 2};
    hy_backend_t *be = NULL;

    if (eager)
        setenv("HY_CUDA_GRAPHS", "0", 1);
    if (hy_backend_cuda_new(&be, &bo, err) != HY_OK)
        be = NULL;
    unsetenv("HY_CUDA_GRAPHS");
    return be;
}

static void test_model(hy_backend_t *cpu, const char *name, bool moe)
{
    hy_backend_t *gpu = NULL, *eager = NULL;
    char rel[256], err[HY_ERR_LEN] = "";
    const char *path;
    hy_cuda_graph_cache_t before, after, eb, ea;
    float *oc, *og, *oe;
    int32_t nv = 0;
    int rc_c, rc_g, rc_e;
    double e_ge = INFINITY, e_gc = INFINITY;
    uint64_t inst, upd, brk;

    snprintf(rel, sizeof rel, "tests/golden/tiny/%.63s.gguf", name); /* a manifest name */
    path = hy_t_srcpath(rel);
    oc = calloc((size_t)MAX_ROWS * 4096, sizeof(float));
    og = calloc((size_t)MAX_ROWS * 4096, sizeof(float));
    oe = calloc((size_t)MAX_ROWS * 4096, sizeof(float));
    if (!(gpu = gpu_new(false, err)) || !(eager = gpu_new(true, err))) {
        HY_T_OK(0, "%s: CUDA backends: %s", name, err);
        goto out;
    }
    hy_cuda_graph_stats(gpu, &before);
    hy_cuda_graph_stats(eager, &eb);
    rc_c = run_schedule(cpu, path, oc, &nv, err);
    rc_g = rc_c > 0 && nv <= 4096 ? run_schedule(gpu, path, og, &nv, err) : -1;
    rc_e = rc_g > 0 ? run_schedule(eager, path, oe, &nv, err) : -1;
    hy_cuda_graph_stats(gpu, &after);
    hy_cuda_graph_stats(eager, &ea);
    if (rc_c > 0 && rc_c == rc_g && rc_g == rc_e) {
        e_ge = rel_err(og, oe, (size_t)rc_g * nv);
        e_gc = rel_err(og, oc, (size_t)rc_g * nv);
    }
    inst = after.n_instantiated - before.n_instantiated;
    upd = after.n_updated - before.n_updated;
    brk = after.n_broken - before.n_broken;
    HY_T_OK(e_ge <= 1e-6 && e_gc <= 1e-4,
            "%s: %d logit rows of a ragged schedule, graphs vs eager GPU rel err %.1e, vs CPU "
            "%.1e%s%s", name, rc_g, e_ge, e_gc, err[0] ? ": " : "", err);
    HY_T_OK(inst >= 2 && upd >= 8 && brk == 0 && ea.n_instantiated == eb.n_instantiated &&
                ea.n_updated == eb.n_updated,
            "%s: graphs captured for each repeating shape%s (%llu instantiated, %llu updated "
            "in place, %llu broken); HY_CUDA_GRAPHS=0 captured none", name,
            moe ? ", MoE decode routed on the device" : "", (unsigned long long)inst,
            (unsigned long long)upd, (unsigned long long)brk);
out:
    if (gpu)
        gpu->i->free(gpu);
    if (eager)
        eager->i->free(eager);
    free(oc);
    free(og);
    free(oe);
}

int main(void)
{
    hy_t_golden_t models[HY_T_GOLDEN_MAX];
    int n_models = hy_t_golden_models(models, HY_T_GOLDEN_MAX);
    hy_backend_opts_t bo = {.n_threads = 2};
    hy_backend_t *cpu = NULL, *gpu = NULL;
    char err[HY_ERR_LEN];

    if (!(gpu = gpu_new(false, err))) {
        printf("ok %d - CUDA graph tests # SKIP no GPU (%s)\n", ++hy_t_count, err);
        return hy_t_done();
    }
    if (hy_backend_cpu_new(&cpu, &bo, err) != HY_OK) {
        HY_T_OK(0, "CPU backend: %s", err);
        return hy_t_done();
    }
    HY_T_OK(gpu->i->step_begin && gpu->i->step_end && !cpu->i->step_begin && !cpu->i->step_end,
            "step hooks: provided by the CUDA backend, absent on the CPU");
    gpu->i->free(gpu);
    for (int i = 0; i < n_models; i++)
        test_model(cpu, models[i].name, models[i].moe);
    cpu->i->free(cpu);
    return hy_t_done();
}
