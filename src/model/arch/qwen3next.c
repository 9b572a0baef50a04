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
#include "model/arch/load.h"
#include "backend/layout.h"

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

/* The hyperparameters, read and checked once. */
typedef struct {
    uint32_t n_head, n_head_kv, hd, n_ff, nextn;
    uint32_t d_conv, d_state, Hk, Hv;          /* GDN: Hk key heads, Hv value heads */
    uint32_t n_expert, n_used, n_ff_exp, n_ff_sh;
    float w_scale;
    int64_t key_dim, value_dim, conv_dim, Q, KV;
} hy_qwen_hp_t;

/* The forward pass's buffers.  A layer is GDN or attention and its FFN
 * runs after its mixer, so each of regions A and B holds one buffer of
 * whichever runs; the GDN's z, o, b|a, alpha, beta and g are live at once. */
typedef struct {
    float *qkv, *attn_gate, *moe_out;   /* region A: (T, conv_dim) | (T, Q) | (T, n_embd) */
    float *conv, *qg, *shexp;           /* region B: (T, conv_dim) | (T, 2Q) | (T, n_embd) */
    float *z, *o;                       /* (T, value_dim) each */
    float *ba;                          /* qwen3next: (T, 2 Hv) per k-head [b | a] */
    float *alpha, *beta, *g;            /* (T, Hv) each */
    float *shexp_gate;                  /* (T, 1) sigmoid(w . h) of the shared expert */
} hy_qwen_scratch_t;
enum { HY_QWEN_R_A, HY_QWEN_R_B, HY_QWEN_R_Z, HY_QWEN_R_O, HY_QWEN_R_BA, HY_QWEN_R_ALPHA,
       HY_QWEN_R_BETA, HY_QWEN_R_G, HY_QWEN_R_SHEXP_GATE };
#define HY_QWEN_SCRATCH(member, region, per_tok)                                          \
    hy_model_scratch(m, sizeof(hy_qwen_scratch_t), offsetof(hy_qwen_scratch_t, member),    \
                     region, per_tok)

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

/* Reads and checks the hyperparameters (scalar keys: every layer of a
 * kind has the same geometry in this family). */
static int hy_qwen_read_hp(hy_model_t *m, const hy_qwen_variant_t *var, hy_qwen_hp_t *h,
                           char *err)
{
    const char *path = hy_gguf_path(m->gguf), *a = m->arch_name;
    uint32_t inner = 0;
    int rc;

    memset(h, 0, sizeof *h);
    /* the output gate multiplies values by a query-sized gate */
    if ((rc = hy_model_attn_heads(m, 1024, &h->n_head, &h->n_head_kv, &h->hd, err)) != HY_OK)
        return rc;
#define KEY(suffix, var_, opt)                                                 \
    if ((rc = hy_model_key_u32(m, suffix, &(var_), opt, err)) != HY_OK)        \
        return rc;
    KEY("nextn_predict_layers", h->nextn, true)
    KEY("ssm.conv_kernel", h->d_conv, false)
    KEY("ssm.state_size", h->d_state, false)
    KEY("ssm.group_count", h->Hk, false)
    KEY("ssm.time_step_rank", h->Hv, false)
    KEY("ssm.inner_size", inner, false)
    KEY("feed_forward_length", h->n_ff, var->moe)
    if (var->moe) {
        KEY("expert_count", h->n_expert, false)
        KEY("expert_used_count", h->n_used, false)
        KEY("expert_feed_forward_length", h->n_ff_exp, true)
        KEY("expert_shared_feed_forward_length", h->n_ff_sh, true)
        if ((rc = hy_model_key_f32(m, "expert_weights_scale", &h->w_scale, true, err)) != HY_OK)
            return rc;
    }
#undef KEY
    if (h->nextn >= (uint32_t)m->n_layer)
        return hy_err(err, HY_EFORMAT, "%s: %s.nextn_predict_layers = %u must be below block_count %d",
                      path, a, h->nextn, m->n_layer);
    if (h->d_conv < 2 || h->d_conv > 64)
        return hy_err(err, HY_EFORMAT, "%s: %s.ssm.conv_kernel = %u must be 2..64", path, a,
                      h->d_conv);
    if (h->d_state == 0 || h->d_state > 1024)
        return hy_err(err, HY_EFORMAT, "%s: %s.ssm.state_size = %u must be 1..1024", path, a,
                      h->d_state);
    if (h->Hk == 0 || h->Hk > 1024 || h->Hv == 0 || h->Hv > 1024 || h->Hv % h->Hk != 0)
        return hy_err(err, HY_EFORMAT, "%s: %s.ssm.time_step_rank (value heads) = %u must be a positive multiple of %s.ssm.group_count (key heads) = %u",
                      path, a, h->Hv, a, h->Hk);
    if ((uint64_t)inner != (uint64_t)h->Hv * h->d_state)
        return hy_err(err, HY_EFORMAT, "%s: %s.ssm.inner_size = %u, expected time_step_rank x state_size = %u x %u",
                      path, a, inner, h->Hv, h->d_state);
    if (var->moe && (h->n_expert == 0 || h->n_expert > HY_MODEL_MAX_EXPERTS || h->n_used == 0 ||
                     h->n_used > h->n_expert))
        return hy_err(err, HY_EFORMAT, "%s: %s.expert_used_count = %u must be 1..expert_count = %u",
                      path, a, h->n_used, h->n_expert);
    if (!var->moe && (h->n_ff == 0 || h->n_ff > 1u << 20))
        return hy_err(err, HY_EFORMAT, "%s: %s.feed_forward_length = %u is out of range", path,
                      a, h->n_ff);
    if (var->moe) {
        if (h->n_ff_exp == 0)
            h->n_ff_exp = h->n_ff ? h->n_ff / h->n_used : 0;
        if (h->n_ff_sh == 0)
            h->n_ff_sh = h->n_ff;
        if (h->n_ff_exp == 0 || h->n_ff_exp > 1u << 20 || h->n_ff_sh > 1u << 20)
            return hy_err(err, HY_EFORMAT, "%s: %s.expert_feed_forward_length = %u is out of range",
                          path, a, h->n_ff_exp);
    }
    h->key_dim = (int64_t)h->Hk * h->d_state;
    h->value_dim = (int64_t)h->Hv * h->d_state;
    h->conv_dim = 2 * h->key_dim + h->value_dim;
    h->Q = (int64_t)h->n_head * h->hd;
    h->KV = (int64_t)h->n_head_kv * h->hd;
    return HY_OK;
}

/* A Gated DeltaNet layer.  g = A * softplus(a + dt_bias) per v-head is
 * computed as a matmul by diag(A): diag (Hv x Hv floats, in m->arch_mem)
 * is built here from ssm_a, which must be f32, finite and <= 0. */
static int hy_qwen_load_gdn(hy_model_t *m, hy_layer_t *L, int32_t il, const hy_qwen_variant_t *var,
                            const hy_qwen_hp_t *h, float *diag, char *err)
{
    const int64_t E = m->n_embd, Hv = h->Hv;
    const hy_layer_tensor_t in[] = {
        {HY_LT(attn_qkv), "attn_qkv.weight", {E, h->conv_dim}, false},
        {HY_LT(attn_gate), "attn_gate.weight", {E, h->value_dim}, false},
    };
    const hy_layer_tensor_t ba_split[] = {
        {HY_LT(ssm_beta), "ssm_beta.weight", {E, Hv}, false},
        {HY_LT(ssm_alpha), "ssm_alpha.weight", {E, Hv}, false},
    };
    const hy_layer_tensor_t ba_fused[] = {{HY_LT(ssm_ba), "ssm_ba.weight", {E, 2 * Hv}, false}};
    const hy_layer_tensor_t rest[] = {
        {HY_LT(ssm_conv1d), "ssm_conv1d.weight", {h->d_conv, h->conv_dim}, false},
        {HY_LT(ssm_dt_b), "ssm_dt.bias", {Hv}, false},
        {HY_LT(ssm_a), "ssm_a", {Hv}, false},
        {HY_LT(ssm_norm), "ssm_norm.weight", {h->d_state}, false},
        {HY_LT(ssm_out), "ssm_out.weight", {h->value_dim, E}, false},
    };
    int rc;

    L->kind = HY_LAYER_GDN;
    L->rec_index = m->n_rec_layers++;
    L->conv_floats = (int64_t)(h->d_conv - 1) * h->conv_dim;
    /* the state and the canonical block's rows (docs/determinism.md) */
    L->gdn = (hy_gdn_params_t){(int32_t)h->Hk, (int32_t)Hv, (int32_t)h->d_state,
                               (int32_t)h->d_state, var->v_tiled, HY_QWEN_GDN_CHUNK};
    L->rec_floats = hy_gdn_state_floats(&L->gdn);
    if ((rc = hy_model_layer_tensors(m, L, il, in, HY_ARRAY_LEN(in), err)) != HY_OK ||
        (rc = var->split_ba ? hy_model_layer_tensors(m, L, il, ba_split, 2, err)
                            : hy_model_layer_tensors(m, L, il, ba_fused, 1, err)) != HY_OK ||
        (rc = hy_model_layer_tensors(m, L, il, rest, HY_ARRAY_LEN(rest), err)) != HY_OK)
        return rc;
    if (L->ssm_a.type != HY_DTYPE_F32)
        return hy_err(err, HY_EUNSUPPORTED, "%s: tensor 'blk.%d.ssm_a' must be f32",
                      hy_gguf_path(m->gguf), il);
    L->ssm_a_diag = L->ssm_a;
    L->ssm_a_diag.ne[0] = L->ssm_a_diag.ne[1] = Hv;
    L->ssm_a_diag.row_bytes = sizeof(float) * (size_t)Hv;
    L->ssm_a_diag.data = diag;
    L->ssm_a_diag.dev = NULL;
    for (int64_t i = 0; i < Hv; i++) {
        float *d = &diag[i * Hv + i];

        memcpy(d, (const float *)L->ssm_a.data + i, sizeof(float));
        if (!isfinite(*d) || *d > 0.0f)
            return hy_err(err, HY_EFORMAT, "%s: tensor 'blk.%d.ssm_a' holds %g at %lld: A = -exp(A_log) must be finite and <= 0",
                          hy_gguf_path(m->gguf), il, *d, (long long)i);
    }
    return m->be->i->weight_init(m->be, &L->ssm_a_diag, err);
}

/* A gated attention layer: attn_q holds per head [q | gate] rows (2Q). */
static int hy_qwen_load_attn(hy_model_t *m, hy_layer_t *L, int32_t il, const hy_qwen_hp_t *h,
                             char *err)
{
    const int64_t E = m->n_embd;
    const hy_layer_tensor_t t[] = {
        {HY_LT(wq), "attn_q.weight", {E, 2 * h->Q}, false},
        {HY_LT(wk), "attn_k.weight", {E, h->KV}, false},
        {HY_LT(wv), "attn_v.weight", {E, h->KV}, false},
        {HY_LT(wo), "attn_output.weight", {h->Q, E}, false},
        {HY_LT(q_norm), "attn_q_norm.weight", {h->hd}, false},
        {HY_LT(k_norm), "attn_k_norm.weight", {h->hd}, false},
    };

    L->kind = HY_LAYER_ATTN_FULL;
    L->kv_index = m->n_kv_layers++;
    L->n_head = (int32_t)h->n_head;
    L->n_head_kv = (int32_t)h->n_head_kv;
    return hy_model_layer_tensors(m, L, il, t, HY_ARRAY_LEN(t), err);
}

/* Softmax top-k experts plus, where the file has one, the shared expert
 * with its sigmoid gate. */
static int hy_qwen_load_moe(hy_model_t *m, hy_layer_t *L, int32_t il, const hy_qwen_hp_t *h,
                            char *err)
{
    const int64_t E = m->n_embd, S = h->n_ff_sh;
    const hy_layer_tensor_t up[] = {{HY_LT(ffn_up_shexp), "ffn_up_shexp.weight", {E, S}, true}};
    const hy_layer_tensor_t rest[] = {
        {HY_LT(ffn_gate_shexp), "ffn_gate_shexp.weight", {E, S}, false},
        {HY_LT(ffn_down_shexp), "ffn_down_shexp.weight", {S, E}, false},
        {HY_LT(ffn_gate_inp_shexp), "ffn_gate_inp_shexp.weight", {E}, false},
    };
    hy_moe_t *mo = &L->moe;
    int rc;

    if ((rc = hy_model_load_experts(m, L, il, (int32_t)h->n_expert, (int32_t)h->n_used,
                                    (int32_t)h->n_ff_exp, err)) != HY_OK)
        return rc;
    mo->softmax_gating = true;
    mo->norm_topk = true;
    mo->weights_scale = h->w_scale;
    mo->norm_eps = 0.0f;
    if ((rc = hy_model_layer_tensors(m, L, il, up, 1, err)) != HY_OK)
        return rc;
    if (L->ffn_up_shexp.data != NULL) {
        if (h->n_ff_sh == 0)
            return hy_err(err, HY_EFORMAT, "%s: %s.expert_shared_feed_forward_length is missing but layer %d has a shared expert",
                          hy_gguf_path(m->gguf), m->arch_name, il);
        L->n_ff_shexp = (int32_t)h->n_ff_sh;
        if ((rc = hy_model_layer_tensors(m, L, il, rest, HY_ARRAY_LEN(rest), err)) != HY_OK)
            return rc;
    }
    L->n_ff = L->n_ff_shexp; /* f->gate / f->up hold the shared expert */
    return HY_OK;
}

/* The scratch description: what each kind of layer present needs. */
static void hy_qwen_scratch(hy_model_t *m, const hy_qwen_variant_t *var, const hy_qwen_hp_t *h)
{
    const int64_t E = m->n_embd, Hv = h->Hv;

    if (m->n_rec_layers > 0) {
        HY_QWEN_SCRATCH(qkv, HY_QWEN_R_A, h->conv_dim);
        HY_QWEN_SCRATCH(conv, HY_QWEN_R_B, h->conv_dim);
        HY_QWEN_SCRATCH(z, HY_QWEN_R_Z, h->value_dim);
        HY_QWEN_SCRATCH(o, HY_QWEN_R_O, h->value_dim);
        if (!var->split_ba)
            HY_QWEN_SCRATCH(ba, HY_QWEN_R_BA, 2 * Hv);
        HY_QWEN_SCRATCH(alpha, HY_QWEN_R_ALPHA, Hv);
        HY_QWEN_SCRATCH(beta, HY_QWEN_R_BETA, Hv);
        HY_QWEN_SCRATCH(g, HY_QWEN_R_G, Hv);
    }
    if (m->n_kv_layers > 0) {
        HY_QWEN_SCRATCH(attn_gate, HY_QWEN_R_A, h->Q);
        HY_QWEN_SCRATCH(qg, HY_QWEN_R_B, 2 * h->Q);
    }
    if (var->moe) {
        HY_QWEN_SCRATCH(moe_out, HY_QWEN_R_A, E);
        HY_QWEN_SCRATCH(shexp, HY_QWEN_R_B, E);
        HY_QWEN_SCRATCH(shexp_gate, HY_QWEN_R_SHEXP_GATE, 1);
    }
}

static int hy_qwen_load(hy_model_t *m, char *err)
{
    const hy_qwen_variant_t var = hy_qwen_variant(m);
    const int64_t E = m->n_embd;
    bool is_recr[HY_MODEL_MAX_LAYERS];
    hy_qwen_hp_t h;
    int32_t il, n_gdn = 0;
    float *diag;
    int rc;

    if ((rc = hy_qwen_read_hp(m, &var, &h, err)) != HY_OK ||
        (rc = hy_model_recurrent_pattern(m, 4, is_recr, err)) != HY_OK)
        return rc;
    m->n_layer -= (int32_t)h.nextn; /* the MTP blocks are not part of the main pass */
    m->n_head = (int32_t)h.n_head;
    m->n_head_kv = (int32_t)h.n_head_kv;
    m->head_dim = m->head_dim_v = (int32_t)h.hd;
    if ((rc = hy_model_read_rope(m, HY_ROPE_NEOX, err)) != HY_OK ||
        (var.v_tiled && (rc = hy_qwen_check_mrope(m, err)) != HY_OK) ||
        (rc = hy_model_load_common(m, "output_norm.weight", err)) != HY_OK)
        return rc;
    for (il = 0; il < m->n_layer; il++)
        n_gdn += is_recr[il];
    /* each GDN layer's diag(A) matrix, freed with the model */
    m->arch_mem = calloc((size_t)HY_MAX(n_gdn, 1) * h.Hv * h.Hv, sizeof(float));
    if (m->arch_mem == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    diag = m->arch_mem;

    for (il = 0; il < m->n_layer; il++) {
        hy_layer_t *L = &m->layers[il];
        const hy_layer_tensor_t norms[] = {
            {HY_LT(attn_norm), "attn_norm.weight", {E}, false},
            {HY_LT(ffn_norm), "post_attention_norm.weight", {E}, false},
        };

        if ((rc = hy_model_layer_tensors(m, L, il, norms, HY_ARRAY_LEN(norms), err)) != HY_OK)
            return rc;
        rc = is_recr[il] ? hy_qwen_load_gdn(m, L, il, &var, &h,
                                            diag + (size_t)m->n_rec_layers * h.Hv * h.Hv, err)
                         : hy_qwen_load_attn(m, L, il, &h, err);
        if (rc != HY_OK)
            return rc;
        rc = var.moe ? hy_qwen_load_moe(m, L, il, &h, err)
                     : hy_model_load_ffn(m, L, il, (int32_t)h.n_ff, err);
        if (rc != HY_OK)
            return rc;
    }
    hy_qwen_scratch(m, &var, &h);
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
    const hy_qwen_scratch_t *s = f->scratch;
    float *gate = s->attn_gate, *qg = s->qg;
    hy_attn_params_t ap = {
        .n_head = L->n_head, .n_head_kv = L->n_head_kv, .head_dim = hd,
        .head_dim_v = m->head_dim_v, .scale = 1.0f / sqrtf((float)hd),
    };

    const hy_weight_t *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *const qkv_y[3] = {qg, f->k, f->v};

    hy_backend_matmul_n(be, qkv, 3, io, qkv_y, n);
    op->gather_rows(be, f->q, qg, even, nq, hd);
    op->gather_rows(be, gate, qg, odd, nq, hd);
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
    const int32_t n = b->n_tokens, Hv = gm->Hv, d = gm->d;
    const hy_qwen_scratch_t *s = f->scratch;
    float *xraw = s->qkv, *x = s->conv, *z = s->z, *o = s->o, *ba = s->ba, *alpha = s->alpha,
          *beta = s->beta, *g = s->g;
    hy_gdn_params_t gp = {gm->Hk, Hv, d, d, var.v_tiled, HY_QWEN_GDN_CHUNK};

    /* the in-projections all read io */
    const hy_weight_t *in_w[4] = {&L->attn_qkv, &L->attn_gate, &L->ssm_beta, &L->ssm_alpha};
    float *in_y[4] = {xraw, z, beta, alpha};

    if (!var.split_ba) {
        in_w[2] = &L->ssm_ba;
        in_y[2] = ba;
    }
    hy_backend_matmul_n(be, in_w, var.split_ba ? 4 : 3, io, in_y, n);
    if (!var.split_ba) {
        /* per k-head [b (Hv/Hk) | a (Hv/Hk)]: rows of Hv/Hk floats alternate b, a */
        const int32_t r = Hv / gm->Hk, nr = n * gm->Hk;
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
    const hy_qwen_scratch_t *s = f->scratch;
    float *y = s->moe_out, *sh = s->shexp, *sg = s->shexp_gate;

    op->moe(be, &L->moe, in, y, n, m->n_embd);
    if (L->ffn_up_shexp.data != NULL) {
        const hy_weight_t *in_w[3] = {&L->ffn_gate_shexp, &L->ffn_up_shexp,
                                      &L->ffn_gate_inp_shexp};
        float *const in_y[3] = {f->gate, f->up, sg};

        hy_backend_matmul_n(be, in_w, 3, in, in_y, n);
        op->swiglu(be, f->gate, f->up, f->gate, (size_t)n * L->n_ff_shexp);
        op->matmul(be, &L->ffn_down_shexp, f->gate, sh, n);
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

static const hy_arch_t hy_arch_qwen3next = {
    /* .name    = */ "qwen3next",
    /* .load    = */ hy_qwen_load,
    /* .forward = */ hy_qwen_forward,
};
