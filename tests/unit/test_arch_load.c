/*
 * test_arch_load.c - what the shared loader helpers and the sliding-window
 * families read from a file: Gemma 3 / Gemma 2 layer patterns (default
 * period, a u32 period, a per-layer bool array), windows, the sliding
 * layers' RoPE, soft-caps and scales; LFM2 with attention.sliding_window;
 * and, for each of those keys and for the one rule for a missing key, a
 * bad value refused with a message naming the key (or tensor) and file.
 * Each case patches or extends a copy of a committed tiny model.
 */
#include "gguf_patch.h"
#include "test.h"

#include <math.h>

static hy_backend_t *g_be;

/* "SSSSSA": one letter per layer (A attention, S sliding). */
static void hy_al_kinds(const hy_model_t *m, char *out)
{
    int32_t il;

    for (il = 0; il < m->n_layer && il < 31; il++)
        out[il] = m->layers[il].kind == HY_LAYER_ATTN_SWA    ? 'S'
                  : m->layers[il].kind == HY_LAYER_ATTN_FULL ? 'A'
                                                             : 'o';
    out[il] = '\0';
}

/* One change to a file: a u32 / f32 value set in place, a key or tensor
 * renamed (its last letter), or a key inserted (u32, string, bool array). */
typedef enum {
    P_NONE, P_SET_U32, P_SET_F32, P_RENAME, P_ADD_U32, P_ADD_STR, P_ADD_BOOLS
} hy_al_op_t;

typedef struct {
    hy_al_op_t op;
    const char *key;
    double value;      /* P_SET_*, P_ADD_U32 */
    const char *str;   /* P_ADD_STR */
    const char *bools; /* P_ADD_BOOLS: "10101" */
} hy_al_patch_t;

static int hy_al_patch(unsigned char **buf, size_t *size, const hy_al_patch_t *p)
{
    size_t at = p->op == P_NONE ? 1 : hy_tp_find_str(*buf, *size, p->key);
    uint32_t u = (uint32_t)p->value;
    float f = (float)p->value;
    hy_tw_t w;
    int rc;

    hy_tw_init(&w);
    switch (p->op) {
    case P_NONE: return 0;
    case P_SET_U32: return at ? (memcpy(*buf + at + 4, &u, 4), 0) : -1; /* after the type */
    case P_SET_F32: return at ? (memcpy(*buf + at + 4, &f, 4), 0) : -1;
    case P_RENAME: return at ? ((*buf)[at - 1] = 'X', 0) : -1;
    case P_ADD_U32: hy_tw_kv_u32(&w, p->key, u); break;
    case P_ADD_STR: hy_tw_kv_str(&w, p->key, p->str); break;
    case P_ADD_BOOLS:
        hy_tw_kv_arr(&w, p->key, HY_TW_BOOL, strlen(p->bools));
        for (const char *c = p->bools; *c; c++)
            hy_tw_u8(&w, *c == '1');
        break;
    }
    rc = w.oom ? -1 : hy_tp_insert_kv(buf, size, w.buf, w.len, 1, 32);
    hy_tw_free(&w);
    return rc;
}

/* Loads tiny model `name` changed by p; the model, or NULL (rc, err). */
static hy_model_t *hy_al_load(const char *name, const hy_al_patch_t *p, int *rc, char *err)
{
    char rel[128];
    size_t size;
    unsigned char *buf;
    hy_model_t *m = NULL;

    snprintf(rel, sizeof rel, "tests/golden/tiny/%s.gguf", name);
    buf = hy_tp_read_all(hy_t_srcpath(rel), &size);
    if (buf == NULL || hy_al_patch(&buf, &size, p) != 0) {
        snprintf(err, HY_ERR_LEN, "cannot read or patch %s", rel);
        *rc = HY_EIO;
        free(buf);
        return NULL;
    }
    *rc = hy_tp_load(g_be, buf, size, &m, err);
    free(buf);
    return m;
}

/* ---- cases ------------------------------------------------------------------ */

typedef struct {
    const char *model, *what;
    hy_al_patch_t patch;
    const char *kinds;  /* expected layer letters, or NULL: refused */
    int32_t window;     /* of the sliding layers */
    const char *expect; /* refused: substring of the error */
} hy_al_case_t;

static void hy_al_run(const hy_al_case_t *c)
{
    char err[HY_ERR_LEN], kinds[32] = "";
    int rc;
    hy_model_t *m = hy_al_load(c->model, &c->patch, &rc, err);

    if (c->kinds == NULL) {
        HY_T_OK(rc != HY_OK && strstr(err, c->expect) != NULL &&
                    strstr(err, "/tmp/hy_gguf_patch_") != NULL,
                "%s: %s is refused naming the file (%s)", c->model, c->what, err);
        hy_model_free(m);
        return;
    }
    if (m != NULL)
        hy_al_kinds(m, kinds);
    {
        const bool is_gemma = strncmp(c->model, "gemma", 5) == 0;
        bool windows_ok = m != NULL;

        for (int32_t il = 0; m != NULL && il < m->n_layer; il++) {
            const hy_layer_t *L = &m->layers[il];
            windows_ok = windows_ok &&
                         L->window == (L->kind == HY_LAYER_ATTN_SWA ? c->window : 0) &&
                         L->rope == (L->kind == HY_LAYER_ATTN_SWA && is_gemma ? &m->rope_swa
                                                                             : &m->rope);
        }
        HY_T_OK(rc == HY_OK && strcmp(kinds, c->kinds) == 0 && windows_ok,
                "%s: %s: layers %s (expected %s), window %d on the sliding ones (%s)", c->model,
                c->what, kinds, c->kinds, c->window, rc == HY_OK ? "ok" : err);
    }
    hy_model_free(m);
}

/* The scalars the tiny Gemma files declare (scripts/make-tiny-models). */
static void hy_al_gemma_scalars(void)
{
    char err[HY_ERR_LEN];
    int rc;
    static const hy_al_patch_t none = {.op = P_NONE};
    static const hy_al_patch_t no_swa_base = {.op = P_RENAME,
                                              .key = "gemma3.rope.freq_base_swa"};
    hy_model_t *m = hy_al_load("gemma3", &none, &rc, err);

    HY_T_OK(m != NULL && m->rope.freq_base == 1000000.0f && m->rope.freq_scale == 0.5f &&
                m->rope_swa.freq_base == 20000.0f && m->rope_swa.freq_scale == 1.0f &&
                m->rope.mode == HY_ROPE_NEOX && m->rope_swa.mode == HY_ROPE_NEOX &&
                m->embd_scale == 8.0f && fabsf(m->attn_scale - 1.0f / sqrtf(32.0f)) == 0.0f &&
                m->attn_softcap == 0.0f && m->final_softcap == 0.0f && m->head_dim == 32 &&
                m->n_swa_layers == 5 && m->n_kv_layers == 6,
            "gemma3: global RoPE base 1e6 x 1/2 (linear), sliding base 2e4 unscaled, "
            "embeddings x 8, scale 1/sqrt(32), no soft-caps (%s)", m ? "ok" : err);
    hy_model_free(m);
    m = hy_al_load("gemma3", &no_swa_base, &rc, err);
    HY_T_OK(m != NULL && m->rope_swa.freq_base == 10000.0f,
            "gemma3 without rope.freq_base_swa: sliding base 10000, llama.cpp's default (%s)",
            m ? "ok" : err);
    hy_model_free(m);
    m = hy_al_load("gemma2", &none, &rc, err);
    HY_T_OK(m != NULL && m->attn_softcap == 10.0f && m->final_softcap == 30.0f &&
                m->rope_swa.freq_base == m->rope.freq_base && m->rope.freq_base == 10000.0f &&
                m->output.data == m->tok_embd.data && m->n_swa_layers == 2,
            "gemma2: soft-caps 10 / 30, sliding base = global base 10000, tied output (%s)",
            m ? "ok" : err);
    hy_model_free(m);
}

int main(void)
{
#define PATTERN "gemma3.attention.sliding_window_pattern"
    static const hy_al_case_t cases[] = {
        {"gemma3", "the file as written", {.op = P_NONE}, "SSSSSA", 16, NULL},
        {"gemma3", "u32 sliding_window_pattern 3",
         {.op = P_ADD_U32, .key = PATTERN, .value = 3}, "SSASSA", 16, NULL},
        {"gemma3", "sliding_window_pattern 0 (all slide)",
         {.op = P_ADD_U32, .key = PATTERN, .value = 0}, "SSSSSS", 16, NULL},
        {"gemma3", "bool array sliding_window_pattern",
         {.op = P_ADD_BOOLS, .key = PATTERN, .bools = "101010"}, "SASASA", 16, NULL},
        {"gemma3", "sliding_window 0 (no sliding layers)",
         {.op = P_SET_U32, .key = "gemma3.attention.sliding_window", .value = 0}, "AAAAAA", 0,
         NULL},
        {"gemma2", "the file as written", {.op = P_NONE}, "SASA", 16, NULL},
        {"gemma2", "no sliding_window key (4096, llama.cpp's default)",
         {.op = P_RENAME, .key = "gemma2.attention.sliding_window"}, "SASA", 4096, NULL},
        {"lfm2", "attention.sliding_window 8 added",
         {.op = P_ADD_U32, .key = "lfm2.attention.sliding_window", .value = 8}, "oSoS", 8, NULL},
        {"lfm2-swa", "the file as written", {.op = P_NONE}, "oSoS", 16, NULL},
        {"gemma3", "a 5-entry pattern array",
         {.op = P_ADD_BOOLS, .key = PATTERN, .bools = "11111"}, NULL, 0,
         "'" PATTERN "' must be a u32 period or a bool or integer array of block_count = 6 entries"},
        {"gemma3", "a string pattern", {.op = P_ADD_STR, .key = PATTERN, .str = "every 6th"},
         NULL, 0, "key '" PATTERN "' (kv at byte 24) has type string"},
        {"gemma2", "sliding_window 0",
         {.op = P_SET_U32, .key = "gemma2.attention.sliding_window", .value = 0}, NULL, 0,
         "gemma2.attention.sliding_window = 0 is out of range"},
        {"gemma3", "rope.freq_base_swa -1",
         {.op = P_SET_F32, .key = "gemma3.rope.freq_base_swa", .value = -1}, NULL, 0,
         "gemma3.rope.freq_base_swa must be positive"},
        {"gemma2", "final_logit_softcapping -1",
         {.op = P_SET_F32, .key = "gemma2.final_logit_softcapping", .value = -1}, NULL, 0,
         "gemma2 soft-capping 10 / -1 must not be negative"},
        {"gemma3", "no attention.head_count",
         {.op = P_RENAME, .key = "gemma3.attention.head_count"}, NULL, 0,
         "required key 'gemma3.attention.head_count' is missing"},
        {"gemma3", "head_count_kv 3 with 4 heads",
         {.op = P_SET_U32, .key = "gemma3.attention.head_count_kv", .value = 3}, NULL, 0,
         "layer 0: head_count 4 / head_count_kv 3 must be positive, with head_count a multiple "
         "of head_count_kv"},
        {"gemma3", "no blk.3.post_ffw_norm.weight",
         {.op = P_RENAME, .key = "blk.3.post_ffw_norm.weight"}, NULL, 0,
         "tensor 'blk.3.post_ffw_norm.weight' is missing"},
        {"gemma3", "block_count above HY_MODEL_MAX_LAYERS",
         {.op = P_SET_U32, .key = "gemma3.block_count", .value = HY_MODEL_MAX_LAYERS + 1}, NULL,
         0, "gemma3.block_count = 4097 is out of range (1..4096)"},
        {"lfm2-swa", "sliding_window above INT32_MAX",
         {.op = P_SET_U32, .key = "lfm2.attention.sliding_window", .value = 3e9}, NULL, 0,
         "lfm2.attention.sliding_window = 3000000000 is out of range"},
    };
#undef PATTERN
    hy_backend_opts_t opts = {.n_threads = 1};
    char err[HY_ERR_LEN];

    if (hy_backend_cpu_new(&g_be, &opts, err) != HY_OK) {
        HY_T_OK(0, "cpu backend: %s", err);
        return hy_t_done();
    }
    for (size_t i = 0; i < HY_ARRAY_LEN(cases); i++)
        hy_al_run(&cases[i]);
    hy_al_gemma_scalars();
    g_be->i->free(g_be);
    return hy_t_done();
}
