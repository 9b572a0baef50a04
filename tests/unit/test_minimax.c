/*
 * test_minimax.c - loading the lightning-attention family (minimax-01): the
 * tiny model loads with its layer pattern, state sizes (as the planner
 * quotes them), MoE routing, residual alpha and decay slopes; copies whose metadata disagrees with
 * the tensors or the rules (a lightning tensor missing, the layer pattern
 * flipped or absent, a required key absent, head counts, head sizes,
 * expert counts, alpha) are refused with a message naming the key or
 * tensor; and the pattern's fallback, full_attention_interval, loads the
 * same model.  Each broken copy is the committed file with one value or one
 * character patched in place, or a key inserted.
 */
#include "gguf_patch.h"
#include "kv/plan.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MODEL "tests/golden/tiny/minimax.gguf"

typedef enum { PATCH_U32, PATCH_F32, PATCH_BOOL2, PATCH_CHAR } patch_kind_t;

/* A patched copy of the file: PATCH_U32 / PATCH_F32 set the value of
 * metadata key `what`; PATCH_BOOL2 sets element 2 of bool array `what`;
 * PATCH_CHAR replaces the last character of string `what` (a key or tensor
 * name) by `val`.  NULL if `what` is not in the file. */
static unsigned char *patched(const unsigned char *orig, size_t size, const char *what,
                              patch_kind_t kind, double val)
{
    size_t at = hy_tp_find_str(orig, size, what);
    unsigned char *buf, *p;
    uint32_t u = (uint32_t)val;
    float f = (float)val;

    if (at == 0 || (buf = malloc(size)) == NULL)
        return NULL;
    memcpy(buf, orig, size);
    p = buf + at;
    if (kind == PATCH_U32)
        memcpy(p + 4, &u, 4); /* after the type tag */
    else if (kind == PATCH_F32)
        memcpy(p + 4, &f, 4);
    else if (kind == PATCH_BOOL2)
        p[4 + 4 + 8 + 2] = (unsigned char)u; /* type, element type, count, elements */
    else
        p[-1] = (unsigned char)u;
    return buf;
}

static hy_backend_t *be;

static void expect_refused(const unsigned char *orig, size_t size, const char *what,
                           patch_kind_t kind, double val, const char *needle, const char *desc)
{
    unsigned char *buf = patched(orig, size, what, kind, val);
    char err[HY_ERR_LEN] = "";
    int rc = buf ? hy_tp_load(be, buf, size, NULL, err) : HY_OK;

    HY_T_OK(buf != NULL && rc < 0 && strstr(err, needle) != NULL,
            "%s: refused naming \"%s\" (%s)", desc, needle, buf ? err : "not in the file");
    free(buf);
}

/* The committed model as loaded: pattern L L A L, sizes, routing, slopes. */
static void check_loaded(void)
{
    hy_model_t *m = NULL;
    char err[HY_ERR_LEN];
    const float *s0, *s3;
    int rc = hy_model_load(&m, hy_t_srcpath(MODEL), be, err);
    bool kinds, slopes;

    HY_T_OK(rc == HY_OK, "minimax loads (%s)", rc == HY_OK ? "ok" : err);
    if (rc != HY_OK)
        return;
    kinds = m->n_layer == 4 && m->n_rec_layers == 3 && m->n_kv_layers == 1 &&
            m->layers[0].kind == HY_LAYER_LIGHTNING && m->layers[1].kind == HY_LAYER_LIGHTNING &&
            m->layers[2].kind == HY_LAYER_ATTN_FULL && m->layers[3].kind == HY_LAYER_LIGHTNING &&
            m->layers[2].kv_index == 0 && m->layers[3].rec_index == 2 &&
            m->layers[1].conv_floats == 0 && m->layers[1].rec_floats == 4 * (16 * 16 + 2 * 16 * 16);
    HY_T_OK(kinds, "layers lightning, lightning, attention, lightning; 4 x (16x16 + 2x16x16) "
            "state floats per lightning layer (the state and the current block of 16)");
    HY_T_OK(m->layers[0].ffn == HY_FFN_MOE && m->layers[2].moe.n_expert == 4 &&
                m->layers[2].moe.n_expert_used == 2 && m->layers[2].moe.n_ff_exp == 24 &&
                m->layers[2].moe.softmax_gating && m->layers[2].moe.norm_topk &&
                m->residual_scale == 1.5f && m->rope.n_rot == 16 && m->rope.mode == HY_ROPE_NEOX,
            "every layer a softmax top-2 of 4 experts, renormalised; alpha 1.5; NEOX RoPE on 16");
    /* the decay tables {17, 4}: lambda^n with transformers' get_slope_rate,
     * s_h = 2^(-8(h+1)/H) * (1 - il/(L-1+1e-5) + 1e-5) */
    s0 = m->layers[0].ssm_a.data;
    s3 = m->layers[3].ssm_a.data;
    slopes = m->layers[0].ssm_a.ne[0] == 17 && m->layers[0].ssm_a.ne[1] == 4 &&
             m->layers[0].ssm_a.type == HY_DTYPE_F32;
    for (int h = 0; slopes && h < 4; h++) {
        const double b = pow(2.0, -2.0 * (h + 1));
        for (int n = 0; n <= 16; n++)
            slopes = slopes &&
                     fabs(s0[h * 17 + n] - exp(-b * 1.00001 * n)) <= 1e-7 &&
                     fabs(s3[h * 17 + n] - exp(-b * (1.0 - 3.0 / 3.00001 + 1e-5) * n)) <= 1e-7;
    }
    HY_T_OK(slopes, "decay tables of layers 0 and 3 follow transformers' slope formula "
            "(lambda %.6g %.6g %.6g %.6g; layer 3: %.8g)", s0[1], s0[18], s0[35], s0[52], s3[1]);
    {
        /* the planner sees the kind: state per sequence, no KV per token */
        hy_plan_t p;
        rc = hy_plan_make(&p, m, be, 1024, 2, 16, HY_DTYPE_F16, err);
        HY_T_OK(rc == HY_OK && p.n_layers[HY_LAYER_LIGHTNING] == 3 &&
                    p.state_bytes_per_seq[HY_LAYER_LIGHTNING] == 3 * 3072 * sizeof(float) &&
                    p.kv_bytes_per_token[HY_LAYER_LIGHTNING] == 0 && p.slot_bytes == 36864 &&
                    p.n_slots == 2 && hy_plan_kind_letter(HY_LAYER_LIGHTNING) == 'L',
                "plan: 3 lightning layers keep %llu state bytes per sequence and no KV (%s)",
                (unsigned long long)p.state_bytes_per_seq[HY_LAYER_LIGHTNING],
                rc == HY_OK ? "ok" : err);
    }
    hy_model_free(m);
}

/* Without attention.recurrent_layers the pattern comes from
 * full_attention_interval: 3 gives the same model; absent, llama.cpp's 8
 * makes layer 2 a lightning layer, which has no attn_qkv. */
static void check_interval(const unsigned char *orig, size_t size)
{
    unsigned char *buf = patched(orig, size, "minimax-01.attention.recurrent_layers", PATCH_CHAR,
                                 'Z');
    size_t sz = size;
    char err[HY_ERR_LEN] = "";
    hy_model_t *m = NULL;
    hy_tw_t w;
    int rc;

    rc = buf ? hy_tp_load(be, buf, sz, NULL, err) : HY_OK;
    HY_T_OK(buf && rc < 0 && strstr(err, "tensor 'blk.2.attn_qkv.weight' is missing"),
            "no pattern key: the default interval 8 makes layer 2 lightning, refused (%s)", err);
    hy_tw_init(&w);
    hy_tw_kv_u32(&w, "minimax-01.full_attention_interval", 3);
    rc = buf && !w.oom && hy_tp_insert_kv(&buf, &sz, w.buf, w.len, 1, 32) == 0
             ? hy_tp_load(be, buf, sz, &m, err)
             : HY_ENOMEM;
    HY_T_OK(rc == HY_OK && m->n_rec_layers == 3 && m->layers[2].kind == HY_LAYER_ATTN_FULL &&
                m->layers[3].kind == HY_LAYER_LIGHTNING,
            "full_attention_interval 3 instead: layer 2 attention, the others lightning (%s)",
            rc == HY_OK ? "ok" : err);
    hy_model_free(m);
    hy_tw_free(&w);
    free(buf);
}

int main(void)
{
    hy_backend_opts_t o = {.n_threads = 1};
    unsigned char *buf;
    size_t size;
    char err[HY_ERR_LEN];

    if (hy_backend_cpu_new(&be, &o, err) != HY_OK) {
        HY_T_OK(0, "backend: %s", err);
        return hy_t_done();
    }
    buf = hy_tp_read_all(hy_t_srcpath(MODEL), &size);
    HY_T_OK(buf != NULL, "read %s", MODEL);
    if (buf == NULL) {
        be->i->free(be);
        return hy_t_done();
    }
    check_loaded();
    expect_refused(buf, size, "blk.0.attn_qkv.weight", PATCH_CHAR, 'W',
                   "tensor 'blk.0.attn_qkv.weight' is missing", "lightning layer 0 without attn_qkv");
    expect_refused(buf, size, "blk.3.attn_norm_2.weight", PATCH_CHAR, 'W',
                   "tensor 'blk.3.attn_norm_2.weight' is missing",
                   "lightning layer 3 without its output norm");
    expect_refused(buf, size, "blk.1.attn_gate.weight", PATCH_CHAR, 'W',
                   "tensor 'blk.1.attn_gate.weight' is missing",
                   "lightning layer 1 without its output gate");
    expect_refused(buf, size, "blk.2.ffn_down_exps.weight", PATCH_CHAR, 'W',
                   "tensor 'blk.2.ffn_down_exps.weight' is missing", "attention layer 2 without experts");
    expect_refused(buf, size, "minimax-01.attention.recurrent_layers", PATCH_BOOL2, 1,
                   "tensor 'blk.2.attn_qkv.weight' is missing",
                   "pattern flipped: layer 2 marked lightning");
    expect_refused(buf, size, "minimax-01.expert_count", PATCH_CHAR, 'Z',
                   "required key 'minimax-01.expert_count' is missing", "expert_count absent");
    expect_refused(buf, size, "minimax-01.feed_forward_length", PATCH_CHAR, 'Z',
                   "required key 'minimax-01.feed_forward_length' is missing",
                   "feed_forward_length absent");
    expect_refused(buf, size, "minimax-01.attention.head_count", PATCH_CHAR, 'Z',
                   "required key 'minimax-01.attention.head_count' is missing",
                   "head_count absent");
    expect_refused(buf, size, "minimax-01.attention.head_count_kv", PATCH_U32, 3,
                   "minimax-01.attention.head_count 4 / head_count_kv 3 must be positive",
                   "4 heads over 3 kv heads");
    expect_refused(buf, size, "minimax-01.attention.key_length", PATCH_U32, 20,
                   "minimax-01.attention.key_length 20 / value_length 16 must be equal and in 1..256",
                   "key and value head sizes differ");
    expect_refused(buf, size, "minimax-01.attention.head_count", PATCH_U32, 2,
                   "tensor 'blk.0.attn_qkv.weight' has shape {64, 192, 1, 1}, expected {64, 96, 1}",
                   "head_count 2 vs the qkv tensor's rows");
    expect_refused(buf, size, "minimax-01.expert_used_count", PATCH_U32, 5,
                   "minimax-01.expert_used_count = 5 must be 1..expert_count = 4",
                   "5 of 4 experts");
    expect_refused(buf, size, "minimax-01.residual_scale", PATCH_F32, -1.0,
                   "minimax-01.residual_scale = -1 must be positive", "negative alpha");
    check_interval(buf, size);
    free(buf);
    be->i->free(be);
    return hy_t_done();
}
