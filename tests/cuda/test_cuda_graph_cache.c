/*
 * test_cuda_graph_cache.c - the CUDA graph cache's policy (graph.h) on the
 * CPU: which batch shapes are eligible, warm-up before the first capture,
 * update vs instantiate counting, giving up on a shape after repeated
 * broken captures (and only after consecutive ones), and LRU eviction that
 * hands the evicted executable back to be destroyed.  Runs in every build.
 */
#include "backend/cuda/graph.h"
#include "../unit/test.h"

#include <string.h>

static hy_batch_t batch(int32_t n_tok, int32_t n_seqs)
{
    hy_batch_t b;

    memset(&b, 0, sizeof b);
    b.n_tokens = n_tok;
    b.n_seqs = n_seqs;
    return b;
}

static int g_dropped;
static void drop(void *exec, void *arg)
{
    (void)exec;
    (*(int *)arg)++;
}

int main(void)
{
    hy_cuda_graph_cache_t c;
    hy_cuda_graph_key_t k, k2;
    hy_cuda_graph_entry_t *e, *e2;
    hy_batch_t b;
    void *ev;
    bool ok;
    int i;

    memset(&c, 0, sizeof c);

    /* eligibility */
    b = batch(4, 4);
    ok = hy_cuda_graph_key(&b, 4, &k) && k.n_tok == 4 && k.n_seqs == 4 && k.n_out == 4;
    b = batch(HY_CUDA_GRAPH_MAX_TOK + 1, 1);
    ok = ok && !hy_cuda_graph_key(&b, 1, &k2);
    b = batch(0, 1);
    ok = ok && !hy_cuda_graph_key(&b, 1, &k2) && !hy_cuda_graph_key(NULL, 1, &k2);
    b = batch(HY_CUDA_GRAPH_MAX_TOK, 3);
    ok = ok && hy_cuda_graph_key(&b, 3, &k2) && !hy_cuda_graph_key(&b, -1, &k2);
    HY_T_OK(ok, "keys: decode shapes eligible, empty / oversized / negative-output steps not");

    /* first sighting warms up eagerly, later ones capture */
    e = hy_cuda_graph_get(&c, &k, &ev);
    ok = e && ev == NULL && e->used && e->seen == 0;
    ok = ok && hy_cuda_graph_plan(&c, e) == HY_CUDA_GRAPH_EAGER;
    ok = ok && hy_cuda_graph_plan(&c, e) == HY_CUDA_GRAPH_CAPTURE;
    e->exec = (void *)0x1000;
    ok = ok && !hy_cuda_graph_done(&c, e, false);
    ok = ok && hy_cuda_graph_get(&c, &k, &ev) == e && ev == NULL;
    ok = ok && hy_cuda_graph_plan(&c, e) == HY_CUDA_GRAPH_CAPTURE;
    ok = ok && !hy_cuda_graph_done(&c, e, true);
    ok = ok && c.n_eager == 1 && c.n_instantiated == 1 && c.n_updated == 1 && e->seen == 3;
    HY_T_OK(ok, "plan: warm-up step eager, then capture; instantiate and update counted "
            "(eager %llu inst %llu upd %llu)", (unsigned long long)c.n_eager,
            (unsigned long long)c.n_instantiated, (unsigned long long)c.n_updated);

    /* breaks: only consecutive ones count towards giving up */
    ok = !hy_cuda_graph_broken(&c, e) && !hy_cuda_graph_broken(&c, e);
    hy_cuda_graph_done(&c, e, true);
    ok = ok && e->breaks == 0 && !e->eager_only;
    for (i = 1; i < HY_CUDA_GRAPH_MAX_BREAKS; i++)
        ok = ok && !hy_cuda_graph_broken(&c, e);
    ok = ok && hy_cuda_graph_broken(&c, e) && e->eager_only; /* reported once ... */
    ok = ok && !hy_cuda_graph_broken(&c, e);                 /* ... not again */
    ok = ok && hy_cuda_graph_plan(&c, e) == HY_CUDA_GRAPH_EAGER;
    HY_T_OK(ok, "breaks: %d consecutive broken captures make a shape eager-only, reported once "
            "(broken %llu)", HY_CUDA_GRAPH_MAX_BREAKS, (unsigned long long)c.n_broken);

    /* rebuilds: a shape whose every capture needs a new exec goes eager,
     * an update in between resets the count */
    hy_cuda_graph_clear(&c, NULL, NULL);
    e = hy_cuda_graph_get(&c, &k, &ev);
    ok = !hy_cuda_graph_done(&c, e, false); /* the first one instantiates: no rebuild */
    for (i = 1; i < HY_CUDA_GRAPH_MAX_REBUILDS; i++)
        ok = ok && !hy_cuda_graph_done(&c, e, false);
    ok = ok && !hy_cuda_graph_done(&c, e, true) && e->rebuilds == 0;
    for (i = 1; i < HY_CUDA_GRAPH_MAX_REBUILDS; i++)
        ok = ok && !hy_cuda_graph_done(&c, e, false);
    ok = ok && hy_cuda_graph_done(&c, e, false) && e->eager_only &&
         hy_cuda_graph_plan(&c, e) == HY_CUDA_GRAPH_EAGER;
    HY_T_OK(ok, "rebuilds: %d consecutive re-instantiations make a shape eager-only, an update "
            "resets the count", HY_CUDA_GRAPH_MAX_REBUILDS);

    /* LRU: fill every slot, touch the first, a new key evicts the second */
    hy_cuda_graph_clear(&c, NULL, NULL);
    ok = true;
    for (i = 0; i < HY_CUDA_GRAPH_SLOTS; i++) {
        hy_cuda_graph_key_t ki = {i + 1, 1, 1};
        e = hy_cuda_graph_get(&c, &ki, &ev);
        ok = ok && ev == NULL;
        e->exec = (void *)(uintptr_t)(0x100 + i);
    }
    k = (hy_cuda_graph_key_t){1, 1, 1};
    e = hy_cuda_graph_get(&c, &k, &ev);
    ok = ok && ev == NULL && e->exec == (void *)0x100;
    k2 = (hy_cuda_graph_key_t){1000, 7, 2};
    e2 = hy_cuda_graph_get(&c, &k2, &ev);
    ok = ok && ev == (void *)0x101 && e2->exec == NULL && e2->seen == 0 && e2->key.n_seqs == 7;
    k2 = (hy_cuda_graph_key_t){2, 1, 1};
    e2 = hy_cuda_graph_get(&c, &k2, &ev);
    ok = ok && ev == (void *)0x102 && e2->exec == NULL; /* the old key 2 came back as new */
    HY_T_OK(ok, "lru: %d slots, the least recently used entry is evicted and its exec returned",
            HY_CUDA_GRAPH_SLOTS);

    /* clear hands every cached exec to drop */
    g_dropped = 0;
    hy_cuda_graph_clear(&c, drop, &g_dropped);
    ok = g_dropped == HY_CUDA_GRAPH_SLOTS - 2 && c.tick == 0 && !c.e[0].used;
    HY_T_OK(ok, "clear: %d cached execs dropped (want %d), cache empty", g_dropped,
            HY_CUDA_GRAPH_SLOTS - 2);

    {
        char err[HY_ERR_LEN] = "";
        bool off = true, off0 = false, off1 = true;
        int rc_unset = hy_cuda_graph_env(NULL, &off, err);
        int rc0 = hy_cuda_graph_env("0", &off0, err), rc1 = hy_cuda_graph_env("1", &off1, err);
        int rcb = hy_cuda_graph_env("off", &off, err);

        HY_T_OK(rc_unset == HY_OK && rc0 == HY_OK && off0 && rc1 == HY_OK && !off1,
                "HY_CUDA_GRAPHS: unset and 1 keep graphs on, 0 turns them off");
        HY_T_OK(rcb == HY_EINVAL &&
                    strcmp(err, "HY_CUDA_GRAPHS='off': must be 0 (graphs off) or 1 (on)") == 0,
                "HY_CUDA_GRAPHS=off refused: %s", err);
    }
    return hy_t_done();
}
