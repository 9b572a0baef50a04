/*
 * test_cuda_tiercopy.c - the CUDA backend's side of the KV tiers against
 * the CPU's (backend.h, "the tiers below the hot pool"): a page of each
 * page group (a KV layout with a sliding-window layer between two global
 * ones) written by the attention op on both backends reads back as the
 * same bytes (one layout for both, so a page one demoted the other can
 * promote), each group's page holding only its own layers; host
 * bytes written into a page and a state slot come back unchanged; the hot
 * tier's memory is the device's (mem_info), and the warm tier's pinned
 * host memory can be had and given back.  Without a GPU it checks that the
 * backend says so and skips.
 */
#include "backend/backend.h"
#include "backend/cuda/cuda.h"
#include "common/kvgroup.h"
#include "../unit/test.h"
#include "cuda_test.h"

#include <string.h>

#define NL 3   /* KV layers: global, sliding, global */
#define NKV 2
#define HD 64
#define PT 16
#define NP 8
#define NSP 4  /* sliding-group pages */
#define WIN 8  /* the sliding layer's window */

/* Where two pages differ first: byte offset and both bytes, for the message. */
static void first_diff(const uint8_t *a, const uint8_t *b, size_t n, char *buf, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            snprintf(buf, len, "first difference at byte %zu: cpu %02x, gpu %02x", i, a[i], b[i]);
            return;
        }
}

static void t_pages(hy_dtype_t type)
{
    static const uint8_t layer_swa[NL] = {0, 1, 0};
    hy_kv_layout_t lay = {NL, NKV, HD, HD, PT, NP, type, NSP, layer_swa, {0, 0, 0, 0, 0, 0, 0}};
    hy_attn_params_t ap = {4, NKV, HD, HD, 0.125f, 0, 0};
    size_t layer_bytes = (size_t)2 * NKV * PT * hy_dtype_row_bytes(type, HD);
    const char *tn = hy_dtype_info(type)->name;
    char diff[128] = "ok";
    size_t gbytes[HY_KV_GROUPS] = {2 * layer_bytes, layer_bytes}; /* its layers, K and V */
    uint8_t *a = malloc(2 * layer_bytes), *b = malloc(2 * layer_bytes), *in = malloc(2 * layer_bytes);
    char err[HY_ERR_LEN] = "";
    const int32_t pages[2] = {5, 2}, swa_pages[2] = {3, 1};
    const int32_t *ids[HY_KV_GROUPS] = {pages, swa_pages};
    int32_t pos[20], tok[20] = {0};
    bool same = true;

    if (g_cpu->i->kv_init(g_cpu, &lay, err) != HY_OK || g_gpu->i->kv_init(g_gpu, &lay, err) != HY_OK) {
        HY_T_OK(0, "kv_init: %s", err);
        return;
    }
    for (int i = 0; i < 20; i++)
        pos[i] = i;
    hy_batch_seq_t seq = {0, 20, 0, pages, 2, -1, swa_pages, 2, NULL, 0, 0, 0, NULL, NULL};
    hy_batch_t batch = {20, tok, pos, 1, &seq};
    size_t nq = 20 * 4 * HD, nk = 20 * NKV * HD;
    float *qv = rnd_vec(nq, 1), *kv = rnd_vec(nk, 1), *vv = rnd_vec(nk, 1);
    pair_t q = pair_new(qv, nq), k = pair_new(kv, nk), v = pair_new(vv, nk), o = pair_new(NULL, nq);

    for (int l = 0; l < NL; l++) {
        ap.window = layer_swa[l] ? WIN : 0;
        g_cpu->i->attention(g_cpu, l, &batch, q.c, k.c, v.c, o.c, &ap);
        g_gpu->i->attention(g_gpu, l, &batch, q.g, k.g, v.g, o.g, &ap);
    }
    for (int g = 0; g < HY_KV_GROUPS; g++)
        for (int p = 0; p < 2; p++) {
            bool rd = g_cpu->i->kv_page_read(g_cpu, g, ids[g][p], a, err) == HY_OK &&
                      g_gpu->i->kv_page_read(g_gpu, g, ids[g][p], b, err) == HY_OK;
            if (!rd && same)
                snprintf(diff, sizeof diff, "%s", err);
            else if (same && memcmp(a, b, gbytes[g]) != 0)
                first_diff(a, b, gbytes[g], diff, sizeof diff);
            same &= rd && memcmp(a, b, gbytes[g]) == 0;
        }
    HY_T_OK(same && hy_ct_both_ok(g_cpu, g_gpu, "pages"),
            "%s KV: pages of both groups the attention op filled read back byte for byte alike "
            "on CPU and GPU (%s)", tn, diff);
    /* the GPU attends over the bytes the CPU wrote (a page promoted from a
     * CPU tier) as the CPU does: one more token at position 20 */
    {
        int32_t pos1 = 20, tok1 = 0;
        bool moved = true;
        hy_batch_seq_t s1 = {0, 1, 20, pages, 2, -1, swa_pages, 2, NULL, 0, 0, 0, NULL, NULL};
        hy_batch_t b1 = {1, &tok1, &pos1, 1, &s1};
        float *q1 = rnd_vec(4 * HD, 1), *k1 = rnd_vec(NKV * HD, 1), *v1 = rnd_vec(NKV * HD, 1);
        pair_t pq = pair_new(q1, 4 * HD), pk = pair_new(k1, NKV * HD), pv = pair_new(v1, NKV * HD);
        pair_t po = pair_new(NULL, 4 * HD);
        double worst = 0;

        for (int g = 0; g < HY_KV_GROUPS; g++)
            for (int p = 0; p < 2; p++)
                moved &= g_cpu->i->kv_page_read(g_cpu, g, ids[g][p], a, err) == HY_OK &&
                         g_gpu->i->kv_page_write(g_gpu, g, ids[g][p], a, err) == HY_OK;
        for (int l = 0; l < NL; l++) {
            ap.window = layer_swa[l] ? WIN : 0;
            g_cpu->i->attention(g_cpu, l, &b1, pq.c, pk.c, pv.c, po.c, &ap);
            g_gpu->i->attention(g_gpu, l, &b1, pq.g, pk.g, pv.g, po.g, &ap);
            worst = HY_MAX(worst, pair_err(&po, 0, 4 * HD));
        }
        HY_T_OK(moved && hy_ct_both_ok(g_cpu, g_gpu, "pages") && worst <= 1e-5,
                "%s KV: a decode step over the CPU's page bytes on the GPU: rel err %.2e "
                "(limit 1e-5)", tn, worst);
        pair_free(&pq);
        pair_free(&pk);
        pair_free(&pv);
        pair_free(&po);
        free(q1);
        free(k1);
        free(v1);
    }
    for (size_t i = 0; i < 2 * layer_bytes; i++)
        in[i] = (uint8_t)(i * 13 + 7);
    for (int g = 0; g < HY_KV_GROUPS; g++)
        HY_T_OK(g_gpu->i->kv_page_write(g_gpu, g, g == HY_KV_SWA ? 0 : 7, in, err) == HY_OK &&
                    g_gpu->i->kv_page_read(g_gpu, g, g == HY_KV_SWA ? 0 : 7, b, err) == HY_OK &&
                    g_cpu->i->kv_page_write(g_cpu, g, g == HY_KV_SWA ? 0 : 7, in, err) == HY_OK &&
                    g_cpu->i->kv_page_read(g_cpu, g, g == HY_KV_SWA ? 0 : 7, a, err) == HY_OK &&
                    memcmp(in, b, gbytes[g]) == 0 && memcmp(a, b, gbytes[g]) == 0,
                "group %d: host bytes written to a GPU page read back unchanged", g);
    HY_T_OK(g_gpu->i->kv_page_read(g_gpu, HY_KV_FULL, NP, b, err) == HY_ERANGE &&
                strstr(err, "outside") != NULL,
            "a page outside the pool is refused: %s", err);
    HY_T_OK(g_gpu->i->kv_page_read(g_gpu, HY_KV_SWA, NSP, b, err) == HY_ERANGE &&
                strstr(err, "outside 0..3") != NULL,
            "a sliding page outside its own (smaller) pool is refused: %s", err);
    pair_free(&q);
    pair_free(&k);
    pair_free(&v);
    pair_free(&o);
    free(qv);
    free(kv);
    free(vv);
    free(a);
    free(b);
    free(in);
}

static void t_state(void)
{
    int64_t conv[1] = {10}, rec[1] = {100};
    hy_state_layout_t lay = {1, 4, conv, rec};
    uint64_t pb = 0, sb = 0;
    char err[HY_ERR_LEN] = "";
    float *in, *out;

    if (g_gpu->i->state_init(g_gpu, &lay, err) != HY_OK ||
        g_gpu->i->mem_sizes(g_gpu, NULL, &lay, &pb, &sb, err) != HY_OK) {
        HY_T_OK(0, "state_init: %s", err);
        return;
    }
    in = rnd_vec(sb / sizeof(float), 1);
    out = calloc(1, sb);
    HY_T_OK(g_gpu->i->state_write(g_gpu, 2, in, err) == HY_OK &&
                g_gpu->i->state_read(g_gpu, 2, out, err) == HY_OK && memcmp(in, out, sb) == 0,
            "a state slot (%llu bytes) written from the host reads back unchanged (%s)",
            (unsigned long long)sb, err);
    free(in);
    free(out);
}

static void t_memory(void)
{
    uint64_t f = 0, t = 0, hf = 0, ht = 0;
    char err[HY_ERR_LEN] = "";
    void *p;

    /* called before the check: the message's arguments are read with it */
    int rc = g_gpu->i->mem_info(g_gpu, &f, &t, err);

    HY_T_OK(rc == HY_OK && f > 0 && f <= t, "mem_info is the device's: %llu of %llu bytes free",
            (unsigned long long)f, (unsigned long long)t);
    g_cpu->i->mem_info(g_cpu, &hf, &ht, err);
    HY_T_OK(t != ht, "... not the host's (%llu)", (unsigned long long)ht);
    p = g_gpu->i->host_alloc(g_gpu, 1 << 20);
    HY_T_OK(p != NULL, "pinned host memory for the warm tier");
    if (p != NULL) {
        memset(p, 1, 1 << 20);
        g_gpu->i->host_free(g_gpu, p, 1 << 20);
    }
}

int main(void)
{
    hy_backend_opts_t bo = {.n_threads = 2};
    char err[HY_ERR_LEN];
    int rc = hy_backend_cuda_new(&g_gpu, &bo, err);

    if (rc != HY_OK) {
        HY_T_OK(rc == HY_EUNSUPPORTED && strncmp(err, "no CUDA device: ", 16) == 0,
                "no GPU: hy_backend_cuda_new fails cleanly: %s", err);
        printf("ok %d - CUDA tier copies # SKIP no GPU\n", ++hy_t_count);
        return hy_t_done();
    }
    if (hy_backend_cpu_new(&g_cpu, &bo, err) != HY_OK) {
        HY_T_OK(0, "cpu backend: %s", err);
        return hy_t_done();
    }
    t_pages(HY_DTYPE_F32);
    t_pages(HY_DTYPE_F16);
    t_pages(HY_DTYPE_Q8_0);
    t_state();
    t_memory();
    g_cpu->i->free(g_cpu);
    g_gpu->i->free(g_gpu);
    return hy_t_done();
}
