/*
 * arch/qwen3next.c - the Gated DeltaNet hybrid family: qwen3next
 * (Qwen3-Next), qwen35 (Qwen3.5 dense) and qwen35moe (Qwen3.5 MoE).  Three
 * Gated DeltaNet layers to one gated full-attention layer (partial NEOX
 * RoPE, per-head q/k RMSNorm, output gated by sigmoid), then a SwiGLU FFN
 * (qwen35) or a softmax top-k MoE plus a sigmoid-gated shared expert.
 * The variants differ in how b/a are stored (qwen3next: one ssm_ba grouped
 * per k-head; qwen35*: ssm_beta + ssm_alpha) and in the v-head -> k-head
 * mapping (qwen3next interleaved, qwen35* tiled by the converter).
 * Conventions: /work/shared/notes/gguf-and-hybrid-architectures.md, b.1.
 */
#include "model/arch/blocks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prefill chunk of the gdn op (flash-linear-attention's choice). */
#define HY_QWEN_GDN_CHUNK 64
/* transformers' (and FLA's) l2norm: x * rsqrt(sum x^2 + 1e-6).  The op
 * computes x / max(||x||, eps); the two agree to eps/(2 ||x||^2) relative,
 * i.e. everywhere but for vectors of norm below ~1e-2. */
#define HY_QWEN_L2_EPS 1e-6f

typedef struct {
    bool moe;       /* qwen3next, qwen35moe */
    bool split_ba;  /* qwen35*: ssm_beta / ssm_alpha instead of ssm_ba */
    bool v_tiled;   /* qwen35*: v-head h reads k-head h % H_k */
} hy_qwen_variant_t;

/* GDN geometry, the same for every recurrent layer (notes b.1). */
typedef struct {
    int32_t d_conv, d, Hk, Hv, key_dim, value_dim, conv_dim;
} hy_qwen_gdn_t;

static hy_qwen_variant_t hy_qwen_variant(const hy_model_t *m)
{
    hy_qwen_variant_t v = {true, false, false};

    if (strcmp(m->arch_name, "qwen35") == 0)
        v = (hy_qwen_variant_t){false, true, true};
    else if (strcmp(m->arch_name, "qwen35moe") == 0)
        v = (hy_qwen_variant_t){true, true, true};
    return v;
}

static hy_qwen_gdn_t hy_qwen_geometry(const hy_model_t *m)
{
    const hy_layer_t *L = NULL;
    hy_qwen_gdn_t g;

    for (int32_t il = 0; il < m->n_layer && L == NULL; il++)
        if (m->layers[il].kind == HY_LAYER_GDN)
            L = &m->layers[il];
    memset(&g, 0, sizeof g);
    if (L == NULL)
        return g;
    g.d = (int32_t)L->ssm_norm.ne[0];
    g.Hv = (int32_t)L->ssm_dt_b.ne[0];
    g.conv_dim = (int32_t)L->ssm_conv1d.ne[1];
    g.d_conv = (int32_t)L->ssm_conv1d.ne[0];
    g.value_dim = g.Hv * g.d;
    g.key_dim = (g.conv_dim - g.value_dim) / 2;
    g.Hk = g.key_dim / g.d;
    return g;
}

/* Which layers are recurrent: attention.recurrent_layers (bool or integer
 * array over block_count, or a scalar) if present, else every layer but
 * each full_attention_interval-th (llama.cpp's rule). */
static int hy_qwen_read_pattern(hy_model_t *m, uint32_t n_all, bool *is_recr, char *err)
{
    const char *path = hy_gguf_path(m->gguf);
    char key[160];
    hy_gguf_type_t et;
    uint64_t count;
    const void *data;
    uint32_t interval = 4;
    bool bv;
    int rc;

    snprintf(key, sizeof key, "%s.attention.recurrent_layers", m->arch_name);
    rc = hy_gguf_get_arr(m->gguf, key, &et, &count, &data, NULL);
    if (rc == HY_OK) {
        int64_t kv = hy_gguf_find_key(m->gguf, key);

        if (count != n_all || et == HY_GGUF_STRING || et == HY_GGUF_ARRAY ||
            et == HY_GGUF_F32 || et == HY_GGUF_F64)
            return hy_err(err, HY_EFORMAT, "%s: '%s' must be a bool or integer array of block_count = %u entries",
                          path, key, n_all);
        for (uint32_t i = 0; i < n_all; i++)
            is_recr[i] = et == HY_GGUF_BOOL ? ((const uint8_t *)data)[i] != 0
                                            : hy_gguf_arr_i64(m->gguf, kv, i) != 0;
        return HY_OK;
    }
    if (hy_gguf_get_bool(m->gguf, key, &bv, NULL) == HY_OK) {
        for (uint32_t i = 0; i < n_all; i++)
            is_recr[i] = bv;
        return HY_OK;
    }
    if ((rc = hy_model_key_u32(m, "full_attention_interval", &interval, true, err)) != HY_OK)
        return rc;
    if (interval == 0)
        return hy_err(err, HY_EFORMAT, "%s: %s.full_attention_interval must be positive", path,
                      m->arch_name);
    for (uint32_t i = 0; i < n_all; i++)
        is_recr[i] = (i + 1) % interval != 0;
    return HY_OK;
}

/* qwen35's interleaved M-RoPE equals NEOX RoPE for text (t = h = w = the
 * position) as long as every rotary pair falls in the t, h or w section
 * (llama.cpp's rule: pair i uses section i % 3 while i < 3 * sections[i % 3],
 * else the fourth, whose position is 0 for text). */
static int hy_qwen_check_mrope(hy_model_t *m, char *err)
{
    uint32_t sec[4];
    char key[160];
    int rc;

    snprintf(key, sizeof key, "%s.rope.dimension_sections", m->arch_name);
    rc = hy_gguf_get_u32_layers(m->gguf, key, sec, 4, err);
    if (rc == HY_ENOENT)
        return hy_err(err, HY_EFORMAT, "%s: required key '%s' is missing", hy_gguf_path(m->gguf),
                      key);
    if (rc != HY_OK)
        return rc;
    for (int32_t i = 0; i < m->rope.n_rot / 2; i++)
        if ((uint32_t)i >= 3 * sec[i % 3])
            return hy_err(err, HY_EUNSUPPORTED,
                          "%s: '%s' = [%u, %u, %u, %u] leaves rotary pair %d outside the t/h/w sections (not text-only M-RoPE)",
                          hy_gguf_path(m->gguf), key, sec[0], sec[1], sec[2], sec[3], i);
    return HY_OK;
}

static int hy_qwen_load(hy_model_t *m, char *err)
{
    const hy_qwen_variant_t var = hy_qwen_variant(m);
    const char *path = hy_gguf_path(m->gguf);
    const int64_t E = m->n_embd;
    bool is_recr[4096];
    uint32_t n_head = 0, n_head_kv = 0, hd, hdv, n_ff = 0, nextn = 0;
    uint32_t d_conv = 0, d_state = 0, Hk = 0, Hv = 0, inner = 0;
    uint32_t n_expert = 0, n_used = 0, n_ff_exp = 0, n_ff_sh = 0;
    float w_scale = 0.0f;
    int64_t key_dim, value_dim, conv_dim, Q, KV;
    int32_t il, n_gdn = 0, n_attn = 0;
    float *diag;
    int rc;

    /* ---- hyperparameters ---- */
#define KEY(suffix, var_, opt)                                                 \
    if ((rc = hy_model_key_u32(m, suffix, &(var_), opt, err)) != HY_OK)        \
        return rc;
    KEY("attention.head_count", n_head, false)
    n_head_kv = n_head;
    KEY("attention.head_count_kv", n_head_kv, true)
    hd = n_head ? (uint32_t)E / n_head : 0;
    KEY("attention.key_length", hd, true)
    hdv = hd;
    KEY("attention.value_length", hdv, true)
    KEY("nextn_predict_layers", nextn, true)
    KEY("ssm.conv_kernel", d_conv, false)
    KEY("ssm.state_size", d_state, false)
    KEY("ssm.group_count", Hk, false)
    KEY("ssm.time_step_rank", Hv, false)
    KEY("ssm.inner_size", inner, false)
    KEY("feed_forward_length", n_ff, var.moe)
    if (var.moe) {
        KEY("expert_count", n_expert, false)
        KEY("expert_used_count", n_used, false)
        KEY("expert_feed_forward_length", n_ff_exp, true)
        KEY("expert_shared_feed_forward_length", n_ff_sh, true)
        if ((rc = hy_model_key_f32(m, "expert_weights_scale", &w_scale, true, err)) != HY_OK)
            return rc;
    }
#undef KEY
    if (n_head == 0 || n_head > 1024 || n_head_kv == 0 || n_head % n_head_kv != 0)
        return hy_err(err, HY_EFORMAT, "%s: %s.attention.head_count %u / head_count_kv %u must be positive, with head_count a multiple of head_count_kv",
                      path, m->arch_name, n_head, n_head_kv);
    if (hd == 0 || hd > 1024 || hdv != hd)
        return hy_err(err, HY_EFORMAT, "%s: %s.attention.key_length %u / value_length %u must be equal and in 1..1024 (the output gate multiplies one by the other)",
                      path, m->arch_name, hd, hdv);
    if (nextn >= (uint32_t)m->n_layer)
        return hy_err(err, HY_EFORMAT, "%s: %s.nextn_predict_layers = %u must be below block_count %d",
                      path, m->arch_name, nextn, m->n_layer);
    if (d_conv < 2 || d_conv > 64)
        return hy_err(err, HY_EFORMAT, "%s: %s.ssm.conv_kernel = %u must be 2..64", path,
                      m->arch_name, d_conv);
    if (d_state == 0 || d_state > 1024)
        return hy_err(err, HY_EFORMAT, "%s: %s.ssm.state_size = %u must be 1..1024", path,
                      m->arch_name, d_state);
    if (Hk == 0 || Hk > 1024 || Hv == 0 || Hv > 1024 || Hv % Hk != 0)
        return hy_err(err, HY_EFORMAT, "%s: %s.ssm.time_step_rank (value heads) = %u must be a positive multiple of %s.ssm.group_count (key heads) = %u",
                      path, m->arch_name, Hv, m->arch_name, Hk);
    if ((uint64_t)inner != (uint64_t)Hv * d_state)
        return hy_err(err, HY_EFORMAT, "%s: %s.ssm.inner_size = %u, expected time_step_rank x state_size = %u x %u",
                      path, m->arch_name, inner, Hv, d_state);
    if (var.moe && (n_expert == 0 || n_expert > 4096 || n_used == 0 || n_used > n_expert))
        return hy_err(err, HY_EFORMAT, "%s: %s.expert_used_count = %u must be 1..expert_count = %u",
                      path, m->arch_name, n_used, n_expert);
    if (!var.moe && (n_ff == 0 || n_ff > 1u << 20))
        return hy_err(err, HY_EFORMAT, "%s: %s.feed_forward_length = %u is out of range", path,
                      m->arch_name, n_ff);
    if (var.moe) {
        if (n_ff_exp == 0)
            n_ff_exp = n_ff ? n_ff / n_used : 0;
        if (n_ff_sh == 0)
            n_ff_sh = n_ff;
        if (n_ff_exp == 0 || n_ff_exp > 1u << 20 || n_ff_sh > 1u << 20)
            return hy_err(err, HY_EFORMAT, "%s: %s.expert_feed_forward_length = %u is out of range",
                          path, m->arch_name, n_ff_exp);
    }
    if ((rc = hy_qwen_read_pattern(m, (uint32_t)m->n_layer, is_recr, err)) != HY_OK)
        return rc;
    m->n_layer -= (int32_t)nextn; /* the MTP blocks are not part of the main pass */
    m->n_head = (int32_t)n_head;
    m->n_head_kv = (int32_t)n_head_kv;
    m->head_dim = m->head_dim_v = (int32_t)hd;
    if ((rc = hy_model_read_rope(m, HY_ROPE_NEOX, err)) != HY_OK)
        return rc;
    if (var.v_tiled && (rc = hy_qwen_check_mrope(m, err)) != HY_OK)
        return rc;

    key_dim = (int64_t)Hk * d_state;
    value_dim = (int64_t)Hv * d_state;
    conv_dim = 2 * key_dim + value_dim;
    Q = (int64_t)n_head * hd;
    KV = (int64_t)n_head_kv * hd;

    /* ---- tensors ---- */
    if ((rc = hy_model_weight(m, &m->tok_embd, "token_embd.weight", E, m->n_vocab, false,
                              err)) != HY_OK)
        return rc;
    if ((rc = hy_model_weight(m, &m->output_norm, "output_norm.weight", E, 1, false, err)) != HY_OK)
        return rc;
    if ((rc = hy_model_weight(m, &m->output, "output.weight", E, m->n_vocab, true, err)) != HY_OK)
        return rc;
    if (m->output.data == NULL)
        m->output = m->tok_embd;

    for (il = 0; il < m->n_layer; il++)
        n_gdn += is_recr[il];
    /* One allocation: the layer array, then each GDN layer's diag(A)
     * matrix (hy_model_free frees m->layers, so nothing else to track). */
    m->layers = calloc(1, sizeof(hy_layer_t) * (size_t)m->n_layer +
                              sizeof(float) * (size_t)n_gdn * Hv * Hv);
    if (m->layers == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    diag = (float *)(m->layers + m->n_layer);

    for (il = 0; il < m->n_layer; il++) {
        hy_layer_t *L = &m->layers[il];

        L->kv_index = L->rec_index = -1;
#define W(field, name, a, b, opt)                                                          \
    if ((rc = hy_model_layer_weight(m, &L->field, "blk.%d." name, il, a, b, opt, err)) != HY_OK) \
        return rc;
#define W3(field, name, a, b, c)                                                           \
    {                                                                                      \
        char nm[96];                                                                       \
        snprintf(nm, sizeof nm, "blk.%d." name, il);                                       \
        if ((rc = hy_model_weight3(m, &L->field, nm, a, b, c, false, err)) != HY_OK)       \
            return rc;                                                                     \
    }
        W(attn_norm, "attn_norm.weight", E, 1, false)
        W(ffn_norm, "post_attention_norm.weight", E, 1, false)
        if (is_recr[il]) {
            L->kind = HY_LAYER_GDN;
            L->rec_index = m->n_rec_layers++;
            L->conv_floats = (int64_t)(d_conv - 1) * conv_dim;
            L->rec_floats = (int64_t)Hv * d_state * d_state;
            W(attn_qkv, "attn_qkv.weight", E, conv_dim, false)
            W(attn_gate, "attn_gate.weight", E, value_dim, false)
            if (var.split_ba) {
                W(ssm_beta, "ssm_beta.weight", E, Hv, false)
                W(ssm_alpha, "ssm_alpha.weight", E, Hv, false)
            } else {
                W(ssm_ba, "ssm_ba.weight", E, 2 * (int64_t)Hv, false)
            }
            W(ssm_conv1d, "ssm_conv1d.weight", d_conv, conv_dim, false)
            W(ssm_dt_b, "ssm_dt.bias", Hv, 1, false)
            W(ssm_a, "ssm_a", Hv, 1, false)
            W(ssm_norm, "ssm_norm.weight", d_state, 1, false)
            W(ssm_out, "ssm_out.weight", value_dim, E, false)
            if (L->ssm_a.type != HY_DTYPE_F32)
                return hy_err(err, HY_EUNSUPPORTED, "%s: tensor 'blk.%d.ssm_a' must be f32", path,
                              il);
            /* g = A * softplus(a + dt_bias) per v-head, done as a matmul by diag(A) */
            {
                float *d = diag + (size_t)(L->rec_index) * Hv * Hv;
                L->ssm_a_diag = L->ssm_a;
                L->ssm_a_diag.ne[0] = L->ssm_a_diag.ne[1] = Hv;
                L->ssm_a_diag.row_bytes = sizeof(float) * Hv;
                L->ssm_a_diag.data = d;
                L->ssm_a_diag.dev = NULL;
                for (uint32_t h = 0; h < Hv; h++) {
                    memcpy(&d[(size_t)h * Hv + h], (const float *)L->ssm_a.data + h, sizeof(float));
                    if (!isfinite(d[(size_t)h * Hv + h]) || d[(size_t)h * Hv + h] > 0.0f)
                        return hy_err(err, HY_EFORMAT, "%s: tensor 'blk.%d.ssm_a' holds %g at %u: A = -exp(A_log) must be finite and <= 0",
                                      path, il, d[(size_t)h * Hv + h], h);
                }
                if ((rc = m->be->i->weight_init(m->be, &L->ssm_a_diag, err)) != HY_OK)
                    return rc;
            }
        } else {
            L->kind = HY_LAYER_ATTN_FULL;
            L->kv_index = n_attn++;
            L->n_head = (int32_t)n_head;
            L->n_head_kv = (int32_t)n_head_kv;
            W(wq, "attn_q.weight", E, 2 * Q, false)
            W(wk, "attn_k.weight", E, KV, false)
            W(wv, "attn_v.weight", E, KV, false)
            W(wo, "attn_output.weight", Q, E, false)
            W(q_norm, "attn_q_norm.weight", hd, 1, false)
            W(k_norm, "attn_k_norm.weight", hd, 1, false)
        }
        if (var.moe) {
            hy_moe_t *mo = &L->moe;

            L->ffn = HY_FFN_MOE;
            W(moe.gate_inp, "ffn_gate_inp.weight", E, n_expert, false)
            W3(moe.gate_exps, "ffn_gate_exps.weight", E, n_ff_exp, n_expert)
            W3(moe.up_exps, "ffn_up_exps.weight", E, n_ff_exp, n_expert)
            W3(moe.down_exps, "ffn_down_exps.weight", n_ff_exp, E, n_expert)
            mo->n_expert = (int32_t)n_expert;
            mo->n_expert_used = (int32_t)n_used;
            mo->n_ff_exp = (int32_t)n_ff_exp;
            mo->softmax_gating = true;
            mo->norm_topk = true;
            mo->weights_scale = w_scale;
            mo->norm_eps = 0.0f;
            W(ffn_up_shexp, "ffn_up_shexp.weight", E, n_ff_sh, true)
            if (L->ffn_up_shexp.data != NULL) {
                if (n_ff_sh == 0)
                    return hy_err(err, HY_EFORMAT, "%s: %s.expert_shared_feed_forward_length is missing but layer %d has a shared expert",
                                  path, m->arch_name, il);
                L->n_ff_shexp = (int32_t)n_ff_sh;
                W(ffn_gate_shexp, "ffn_gate_shexp.weight", E, n_ff_sh, false)
                W(ffn_down_shexp, "ffn_down_shexp.weight", n_ff_sh, E, false)
                W(ffn_gate_inp_shexp, "ffn_gate_inp_shexp.weight", E, 1, false)
            }
            L->n_ff = L->n_ff_shexp; /* f->gate / f->up hold the shared expert */
        } else {
            L->ffn = HY_FFN_DENSE;
            L->n_ff = (int32_t)n_ff;
            W(ffn_gate, "ffn_gate.weight", E, n_ff, false)
            W(ffn_up, "ffn_up.weight", E, n_ff, false)
            W(ffn_down, "ffn_down.weight", n_ff, E, false)
        }
#undef W
#undef W3
    }
    m->n_kv_layers = n_attn;
    {
        const int64_t cd = n_gdn ? conv_dim : 0, vd = n_gdn ? value_dim : 0;
        m->scratch_per_tok[0] = HY_MAX(HY_MAX(cd, Q), E);          /* qkv | attn gate | moe out */
        m->scratch_per_tok[1] = HY_MAX(HY_MAX(cd, 2 * Q), E);      /* conv out | q,gate | shexp */
        m->scratch_per_tok[2] = HY_MAX(vd, 1);                     /* z */
        m->scratch_per_tok[3] = vd + 5 * (int64_t)Hv + 1;          /* o, ba, alpha, beta, g, sg */
    }
    return HY_OK;
}

/* Even / odd row indices 0,2,4.. and 1,3,5..: gather_rows with them splits
 * rows that alternate [x | y] (attn_q's per-head [q | gate], ssm_ba's
 * per-k-head [b | a]) into two dense arrays. */
static int hy_qwen_split_idx(int32_t **idx, int32_t n, char *err)
{
    *idx = malloc(sizeof(int32_t) * 2 * (size_t)HY_MAX(n, 1));
    if (*idx == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    for (int32_t i = 0; i < n; i++) {
        (*idx)[i] = 2 * i;
        (*idx)[n + i] = 2 * i + 1;
    }
    return HY_OK;
}

/* Gated full attention: q and gate from one projection, per-head q/k
 * RMSNorm, partial NEOX RoPE, softmax attention, o * sigmoid(gate). */
static void hy_qwen_attention(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b,
                              const hy_layer_t *L, const int32_t *even, const int32_t *odd,
                              float *io)
{
    hy_backend_t *be = f->be;
    const struct hy_backend_i *op = be->i;
    const int32_t n = b->n_tokens, hd = m->head_dim, nq = n * L->n_head;
    float *gate = f->scratch[0], *qg = f->scratch[1];
    hy_attn_params_t ap = {
        .n_head = L->n_head, .n_head_kv = L->n_head_kv, .head_dim = hd,
        .head_dim_v = m->head_dim_v, .scale = 1.0f / sqrtf((float)hd),
    };

    op->matmul(be, &L->wq, io, qg, n);
    op->gather_rows(be, f->q, qg, even, nq, hd);
    op->gather_rows(be, gate, qg, odd, nq, hd);
    op->matmul(be, &L->wk, io, f->k, n);
    op->matmul(be, &L->wv, io, f->v, n);
    op->rmsnorm(be, f->q, &L->q_norm, f->q, nq, hd, m->norm_eps);
    op->rmsnorm(be, f->k, &L->k_norm, f->k, n * L->n_head_kv, hd, m->norm_eps);
    op->rope(be, f->q, n, L->n_head, hd, b->pos, &m->rope);
    op->rope(be, f->k, n, L->n_head_kv, hd, b->pos, &m->rope);
    op->attention(be, L->kv_index, b, f->q, f->k, f->v, f->att, &ap);
    op->unary(be, HY_UNARY_SIGMOID, gate, gate, (size_t)nq * hd);
    op->mul(be, f->att, gate, (size_t)nq * hd);
    op->matmul(be, &L->wo, f->att, io, n);
}

/* Gated DeltaNet mixer (notes b.1, equations 1-7). */
static void hy_qwen_gdn(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b, const hy_layer_t *L,
                        const hy_qwen_gdn_t *gm, const int32_t *even, const int32_t *odd,
                        float *io)
{
    hy_backend_t *be = f->be;
    const struct hy_backend_i *op = be->i;
    const hy_qwen_variant_t var = hy_qwen_variant(m);
    const int32_t n = b->n_tokens, Hv = gm->Hv, d = gm->d, T = f->max_tokens;
    float *xraw = f->scratch[0], *x = f->scratch[1], *z = f->scratch[2];
    float *o = f->scratch[3], *ba = o + (size_t)T * gm->value_dim, *alpha = ba + (size_t)T * 2 * Hv,
          *beta = alpha + (size_t)T * Hv, *g = beta + (size_t)T * Hv;
    hy_gdn_params_t gp = {gm->Hk, Hv, d, d, var.v_tiled, HY_QWEN_GDN_CHUNK};

    op->matmul(be, &L->attn_qkv, io, xraw, n);
    op->matmul(be, &L->attn_gate, io, z, n);
    if (var.split_ba) {
        op->matmul(be, &L->ssm_beta, io, beta, n);
        op->matmul(be, &L->ssm_alpha, io, alpha, n);
    } else {
        /* per k-head [b (Hv/Hk) | a (Hv/Hk)]: rows of Hv/Hk floats alternate b, a */
        const int32_t r = Hv / gm->Hk, nr = n * gm->Hk;
        op->matmul(be, &L->ssm_ba, io, ba, n);
        op->gather_rows(be, beta, ba, even, nr, r);
        op->gather_rows(be, alpha, ba, odd, nr, r);
    }
    op->unary(be, HY_UNARY_SIGMOID, beta, beta, (size_t)n * Hv);
    op->add_bias(be, alpha, &L->ssm_dt_b, n, Hv);
    op->unary(be, HY_UNARY_SOFTPLUS, alpha, alpha, (size_t)n * Hv);
    op->matmul(be, &L->ssm_a_diag, alpha, g, n);

    op->conv1d(be, L->rec_index, b, xraw, gm->conv_dim, &L->ssm_conv1d,
               L->ssm_conv1d_b.data ? &L->ssm_conv1d_b : NULL, x, gm->conv_dim, true);
    for (int32_t h = 0; h < gm->Hk; h++) {
        op->l2norm(be, x + (size_t)h * d, n, d, gm->conv_dim, HY_QWEN_L2_EPS,
                   1.0f / sqrtf((float)d));
        op->l2norm(be, x + gm->key_dim + (size_t)h * d, n, d, gm->conv_dim, HY_QWEN_L2_EPS, 1.0f);
    }
    op->gdn(be, L->rec_index, b, x, x + gm->key_dim, x + 2 * gm->key_dim, gm->conv_dim, g, beta,
            o, &gp);
    op->rmsnorm(be, o, &L->ssm_norm, o, n * Hv, d, m->norm_eps);
    op->unary(be, HY_UNARY_SILU, z, z, (size_t)n * gm->value_dim);
    op->mul(be, o, z, (size_t)n * gm->value_dim);
    op->matmul(be, &L->ssm_out, o, io, n);
}

/* Routed experts plus the shared expert scaled by sigmoid(w . h); returns
 * the buffer holding the result. */
static float *hy_qwen_moe(hy_model_t *m, hy_fwd_t *f, const hy_layer_t *L, int32_t n,
                          const float *in)
{
    hy_backend_t *be = f->be;
    const struct hy_backend_i *op = be->i;
    float *y = f->scratch[0], *sh = f->scratch[1];
    float *sg = f->scratch[3] + (size_t)f->max_tokens * (m->scratch_per_tok[3] - 1);

    op->moe(be, &L->moe, in, y, n, m->n_embd);
    if (L->ffn_up_shexp.data != NULL) {
        op->matmul(be, &L->ffn_gate_shexp, in, f->gate, n);
        op->matmul(be, &L->ffn_up_shexp, in, f->up, n);
        op->swiglu(be, f->gate, f->up, f->gate, (size_t)n * L->n_ff_shexp);
        op->matmul(be, &L->ffn_down_shexp, f->gate, sh, n);
        op->matmul(be, &L->ffn_gate_inp_shexp, in, sg, n);
        op->unary(be, HY_UNARY_SIGMOID, sg, sg, (size_t)n);
        op->scale_rows(be, sh, sg, n, m->n_embd);
        op->add(be, y, sh, (size_t)n * m->n_embd);
    }
    return y;
}

static int hy_qwen_forward(hy_model_t *m, hy_fwd_t *f, const hy_batch_t *b,
                           const int32_t *out_rows, int32_t n_out, float *logits, char *err)
{
    const struct hy_backend_i *op = f->be->i;
    const int32_t n = b->n_tokens, E = m->n_embd;
    const hy_qwen_gdn_t gm = hy_qwen_geometry(m);
    const int32_t n_idx = n * HY_MAX(m->n_head, gm.Hk);
    int32_t *idx = NULL;
    int rc;

    if ((rc = hy_blk_check(f, b, n_out, err)) != HY_OK)
        return rc;
    if ((rc = hy_qwen_split_idx(&idx, n_idx, err)) != HY_OK)
        return rc;
    hy_blk_embed(m, f, b);
    for (int32_t il = 0; il < m->n_layer; il++) {
        const hy_layer_t *L = &m->layers[il];
        float *y = f->xn;

        op->rmsnorm(f->be, f->x, &L->attn_norm, f->xn, n, E, m->norm_eps);
        if (L->kind == HY_LAYER_GDN)
            hy_qwen_gdn(m, f, b, L, &gm, idx, idx + n_idx, f->xn);
        else
            hy_qwen_attention(m, f, b, L, idx, idx + n_idx, f->xn);
        hy_blk_residual(m, f, f->xn, n);

        op->rmsnorm(f->be, f->x, &L->ffn_norm, f->xn, n, E, m->norm_eps);
        if (L->ffn == HY_FFN_MOE)
            y = hy_qwen_moe(m, f, L, n, f->xn);
        else
            hy_blk_ffn(m, f, L, n, f->xn, f->xn);
        hy_blk_residual(m, f, y, n);
    }
    free(idx);
    return hy_blk_logits(m, f, out_rows, n_out, logits, err);
}

const hy_arch_t hy_arch_qwen3next = {
    /* .name    = */ "qwen3next",
    /* .load    = */ hy_qwen_load,
    /* .forward = */ hy_qwen_forward,
};
