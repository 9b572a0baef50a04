/*
 * load.c - the loading steps every architecture shares (see load.h):
 * hyperparameter checks, tensors bound only after their exact
 * shape is checked (so a file whose metadata and tensors disagree fails here
 * with the tensor's name instead of reading out of bounds later), the
 * common tensors, attention geometry and the scratch description.
 */
#include "model/arch/load.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- hyperparameters ---------------------------------------------------- */

int hy_model_recurrent_pattern(hy_model_t *m, uint32_t interval, bool *is_recr, char *err)
{
    char key[160];
    bool bv;
    int rc;

    rc = hy_model_layers_flag(m, "attention.recurrent_layers", "a scalar bool", is_recr, err);
    if (rc != HY_ENOENT)
        return rc;
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", m->arch_name);
    if (hy_gguf_get_bool(m->gguf, key, &bv, NULL) == HY_OK) {
        for (int32_t i = 0; i < m->n_layer; i++)
            is_recr[i] = bv;
        return HY_OK;
    }
    if ((rc = hy_model_key_u32(m, "full_attention_interval", &interval, true, err)) != HY_OK)
        return rc;
    if (interval == 0)
        return hy_err(err, HY_EFORMAT, "%s: %s.full_attention_interval must be positive",
                      hy_gguf_path(m->gguf), m->arch_name);
    for (int32_t i = 0; i < m->n_layer; i++)
        is_recr[i] = (uint32_t)(i + 1) % interval != 0;
    return HY_OK;
}

int hy_model_attn_heads(hy_model_t *m, uint32_t max_hd, uint32_t *n_head, uint32_t *n_head_kv,
                        uint32_t *hd, char *err)
{
    const char *path = hy_gguf_path(m->gguf), *a = m->arch_name;
    uint32_t hdv;
    int rc;

    *n_head = 0;
    if ((rc = hy_model_key_u32(m, "attention.head_count", n_head, false, err)) != HY_OK)
        return rc;
    *n_head_kv = *n_head;
    *hd = *n_head ? (uint32_t)m->n_embd / *n_head : 0;
    if ((rc = hy_model_key_u32(m, "attention.head_count_kv", n_head_kv, true, err)) != HY_OK ||
        (rc = hy_model_key_u32(m, "attention.key_length", hd, true, err)) != HY_OK)
        return rc;
    hdv = *hd;
    if ((rc = hy_model_key_u32(m, "attention.value_length", &hdv, true, err)) != HY_OK)
        return rc;
    if (*n_head == 0 || *n_head > 1024 || *n_head_kv == 0 || *n_head % *n_head_kv != 0)
        return hy_err(err, HY_EFORMAT, "%s: %s.attention.head_count %u / head_count_kv %u must be positive, with head_count a multiple of head_count_kv",
                      path, a, *n_head, *n_head_kv);
    if (*hd == 0 || *hd > max_hd || hdv != *hd)
        return hy_err(err, HY_EFORMAT, "%s: %s.attention.key_length %u / value_length %u must be equal and in 1..%u",
                      path, a, *hd, hdv, max_hd);
    return HY_OK;
}

int hy_model_check_ff(hy_model_t *m, const uint32_t *n_ff, bool allow_zero, char *err)
{
    for (int32_t il = 0; il < m->n_layer; il++)
        if ((n_ff[il] == 0 && !allow_zero) || n_ff[il] > 1u << 20)
            return hy_err(err, HY_EFORMAT, "%s: layer %d: %s.feed_forward_length = %u is out of range (%u..%u)",
                          hy_gguf_path(m->gguf), il, m->arch_name, n_ff[il], allow_zero ? 0u : 1u,
                          1u << 20);
    return HY_OK;
}

int hy_model_attn_dims(hy_model_t *m, const uint32_t *n_head, const uint32_t *n_head_kv,
                       const bool *is_attn, char *err)
{
    const char *path = hy_gguf_path(m->gguf);
    int32_t il, att = -1;
    uint32_t hd, hdv;
    int rc;

    for (il = 0; il < m->n_layer; il++) {
        if (is_attn != NULL && !is_attn[il])
            continue;
        if (n_head[il] == 0 || n_head_kv[il] == 0 || n_head[il] > 1024 ||
            n_head[il] % n_head_kv[il] != 0)
            return hy_err(err, HY_EFORMAT,
                          "%s: layer %d: head_count %u / head_count_kv %u must be positive, with head_count a multiple of head_count_kv",
                          path, il, n_head[il], n_head_kv[il]);
        if (att >= 0 && (n_head[il] != n_head[att] || n_head_kv[il] != n_head_kv[att]))
            return hy_err(err, HY_EUNSUPPORTED, "%s: attention layers %d and %d have different head counts (%u/%u and %u/%u)",
                          path, att, il, n_head[att], n_head_kv[att], n_head[il], n_head_kv[il]);
        att = att < 0 ? il : att;
    }
    if (att < 0) {
        m->n_head = m->n_head_kv = m->head_dim = m->head_dim_v = 1;
        return HY_OK;
    }
    m->n_head = (int32_t)n_head[att];
    m->n_head_kv = (int32_t)n_head_kv[att];
    hd = (uint32_t)(m->n_embd / m->n_head);
    if ((rc = hy_model_key_u32(m, "attention.key_length", &hd, true, err)) != HY_OK)
        return rc;
    hdv = hd;
    if ((rc = hy_model_key_u32(m, "attention.value_length", &hdv, true, err)) != HY_OK)
        return rc;
    if (hd == 0 || hd > 1024 || hdv == 0 || hdv > 1024)
        return hy_err(err, HY_EFORMAT, "%s: attention head size %u/%u is out of range (1..1024)",
                      path, hd, hdv);
    m->head_dim = (int32_t)hd;
    m->head_dim_v = (int32_t)hdv;
    return HY_OK;
}

/* RoPE keys: base, dimension count and the scaling variants llama.cpp reads. */
int hy_model_read_rope(hy_model_t *m, hy_rope_mode_t mode, char *err)
{
    char key[160];
    hy_gguf_str_t s;
    uint32_t u;
    float factor = 0.0f;
    int rc;

    memset(&m->rope, 0, sizeof m->rope);
    m->rope.mode = mode;
    m->rope.freq_base = 10000.0f;
    m->rope.freq_scale = 1.0f;
    m->rope.attn_factor = 1.0f;
    m->rope.beta_fast = 32.0f;
    m->rope.beta_slow = 1.0f;
    u = (uint32_t)m->head_dim;
    if ((rc = hy_model_key_u32(m, "rope.dimension_count", &u, true, err)) != HY_OK)
        return rc;
    if (u == 0 || u > (uint32_t)m->head_dim || u % 2 != 0)
        return hy_err(err, HY_EFORMAT, "%s: %s.rope.dimension_count = %u must be even and at most the head size %d",
                      hy_gguf_path(m->gguf), m->arch_name, u, m->head_dim);
    m->rope.n_rot = (int32_t)u;
    if ((rc = hy_model_key_f32(m, "rope.freq_base", &m->rope.freq_base, true, err)) != HY_OK)
        return rc;
    if (!(m->rope.freq_base > 0.0f))
        return hy_err(err, HY_EFORMAT, "%s: %s.rope.freq_base must be positive",
                      hy_gguf_path(m->gguf), m->arch_name);
    m->rope.n_ctx_orig = m->n_ctx_train;
    if ((rc = hy_model_key_f32(m, "rope.scaling.factor", &factor, true, err)) != HY_OK)
        return rc;
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
    if (hy_gguf_get_str(m->gguf, key, &s, NULL) == HY_OK &&
        !(s.len == 4 && memcmp(s.ptr, "none", 4) == 0)) {
        if (!(factor > 0.0f))
            return hy_err(err, HY_EFORMAT, "%s: %s.rope.scaling.factor must be positive when scaling is on",
                          hy_gguf_path(m->gguf), m->arch_name);
        m->rope.freq_scale = 1.0f / factor;
        if (s.len == 4 && memcmp(s.ptr, "yarn", 4) == 0) {
            m->rope.ext_factor = 1.0f;
            u = (uint32_t)m->n_ctx_train;
            if ((rc = hy_model_key_u32(m, "rope.scaling.original_context_length", &u, true,
                                       err)) != HY_OK)
                return rc;
            m->rope.n_ctx_orig = (int32_t)u;
            if ((rc = hy_model_key_f32(m, "rope.scaling.attn_factor", &m->rope.attn_factor,
                                       true, err)) != HY_OK)
                return rc;
        } else if (!(s.len == 6 && memcmp(s.ptr, "linear", 6) == 0)) {
            return hy_err(err, HY_EUNSUPPORTED, "%s: %s = '%.*s' is not supported (none, linear, yarn)",
                          hy_gguf_path(m->gguf), key, (int)HY_MIN(s.len, 32), s.ptr);
        }
    }
    /* llama3-style per-frequency factors */
    {
        const hy_gguf_tensor_t *t = hy_gguf_find_tensor(m->gguf, "rope_freqs.weight");

        if (t != NULL) {
            if (t->type != HY_DTYPE_F32 || t->ne[0] != m->rope.n_rot / 2 || t->ne[1] != 1)
                return hy_err(err, HY_EFORMAT, "%s: tensor 'rope_freqs.weight' must be f32 {%d}",
                              hy_gguf_path(m->gguf), m->rope.n_rot / 2);
            m->rope_freq_factors = malloc(sizeof(float) * (size_t)t->ne[0]);
            if (m->rope_freq_factors == NULL)
                return hy_err(err, HY_ENOMEM, "out of memory");
            memcpy(m->rope_freq_factors, t->data, sizeof(float) * (size_t)t->ne[0]);
            m->rope.freq_factors = m->rope_freq_factors;
        }
    }
    m->rope_swa = m->rope;
    return HY_OK;
}

/* ---- tensors -------------------------------------------------------------- */

int hy_model_weight(hy_model_t *m, hy_weight_t *w, const char *name, int64_t ne0, int64_t ne1,
                    bool optional, char *err)
{
    return hy_model_weight3(m, w, name, ne0, ne1, 1, optional, err);
}

/* w (made from t) in the layout the backend asks for, where the loader
 * holds the file's bytes privately; once per tensor, since a tensor may
 * make several weights (a tied output matrix). */
static int hy_model_weight_layout(hy_model_t *m, const hy_gguf_tensor_t *t, hy_weight_t *w,
                                  char *err)
{
    hy_backend_t *be = m->be;
    void *rw;

    if (t->layout == HY_WLAYOUT_ROWS && be->i->weight_rows16 && be->i->weight_rows16(be, w) &&
        (rw = hy_gguf_tensor_rw(m->gguf, t)) != NULL) {
        if (hy_weight_to_rows16(rw, w->type, w->ne[1] * w->ne[2], w->row_bytes) != HY_OK)
            return hy_err(err, HY_ENOMEM, "%s: out of memory rearranging tensor '%s'",
                          hy_gguf_path(m->gguf), t->name);
        hy_gguf_set_layout(m->gguf, t, HY_WLAYOUT_ROWS16);
    }
    w->layout = t->layout;
    return HY_OK;
}

int hy_model_weight3(hy_model_t *m, hy_weight_t *w, const char *name, int64_t ne0,
                     int64_t ne1, int64_t ne2, bool optional, char *err)
{
    const hy_gguf_tensor_t *t = hy_gguf_find_tensor(m->gguf, name);
    const hy_dtype_info_t *ti;
    int rc;

    memset(w, 0, sizeof *w);
    if (t == NULL) {
        if (optional)
            return HY_OK;
        return hy_err(err, HY_EFORMAT, "%s: tensor '%s' is missing",
                      hy_gguf_path(m->gguf), name);
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1)
        return hy_err(err, HY_EFORMAT,
                      "%s: tensor '%s' has shape {%lld, %lld, %lld, %lld}, expected {%lld, %lld, %lld}",
                      hy_gguf_path(m->gguf), name, (long long)t->ne[0], (long long)t->ne[1],
                      (long long)t->ne[2], (long long)t->ne[3], (long long)ne0,
                      (long long)ne1, (long long)ne2);
    ti = hy_dtype_info(t->type);
    if (ti == NULL || !ti->supported)
        return hy_err(err, HY_EUNSUPPORTED, "%s: tensor '%s' has type %s, which hyserve cannot compute with",
                      hy_gguf_path(m->gguf), name, ti ? ti->name : "unknown");
    w->type = (hy_dtype_t)t->type;
    w->ne[0] = t->ne[0];
    w->ne[1] = t->ne[1];
    w->ne[2] = t->ne[2];
    w->ne[3] = 1;
    w->row_bytes = hy_dtype_row_bytes(t->type, t->ne[0]);
    w->data = t->data;
    w->name = t->name;
    if ((rc = hy_model_weight_layout(m, t, w, err)) != HY_OK)
        return rc;
    return m->be->i->weight_init(m->be, w, err);
}

int hy_model_layer_tensors(hy_model_t *m, hy_layer_t *L, int32_t il, const hy_layer_tensor_t *t,
                           size_t n, char *err)
{
    char name[128];
    int rc;

    for (size_t i = 0; i < n; i++) {
        hy_weight_t *w = (hy_weight_t *)((char *)L + t[i].field);

        snprintf(name, sizeof name, "blk.%d.%s", il, t[i].name);
        rc = hy_model_weight3(m, w, name, t[i].ne[0], t[i].ne[1] ? t[i].ne[1] : 1,
                              t[i].ne[2] ? t[i].ne[2] : 1, t[i].optional, err);
        if (rc != HY_OK)
            return rc;
    }
    return HY_OK;
}

int hy_model_load_common(hy_model_t *m, const char *norm_name, char *err)
{
    const int64_t E = m->n_embd;
    int rc;

    if ((rc = hy_model_weight(m, &m->tok_embd, "token_embd.weight", E, m->n_vocab, false,
                              err)) != HY_OK ||
        (rc = hy_model_weight(m, &m->output_norm, norm_name, E, 1, false, err)) != HY_OK ||
        (rc = hy_model_weight(m, &m->output, "output.weight", E, m->n_vocab, true, err)) != HY_OK)
        return rc;
    if (m->output.data == NULL)
        m->output = m->tok_embd; /* tied embeddings */
    m->layers = calloc((size_t)m->n_layer, sizeof *m->layers);
    if (m->layers == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory for %d layers", m->n_layer);
    for (int32_t il = 0; il < m->n_layer; il++) {
        m->layers[il].kv_index = -1;
        m->layers[il].rec_index = -1;
        m->layers[il].rope = &m->rope;
    }
    return HY_OK;
}

int hy_model_load_attention(hy_model_t *m, hy_layer_t *L, int32_t il, int32_t n_head,
                            int32_t n_head_kv, char *err)
{
    const int64_t E = m->n_embd, hd = m->head_dim, hdv = m->head_dim_v, Q = n_head * hd,
                  K = n_head_kv * hd, V = n_head_kv * hdv;
    const hy_layer_tensor_t t[] = {
        {HY_LT(wq), "attn_q.weight", {E, Q}, false},
        {HY_LT(wk), "attn_k.weight", {E, K}, false},
        {HY_LT(wv), "attn_v.weight", {E, V}, false},
        {HY_LT(wo), "attn_output.weight", {n_head * hdv, E}, false},
        {HY_LT(bq), "attn_q.bias", {Q}, true},
        {HY_LT(bk), "attn_k.bias", {K}, true},
        {HY_LT(bv), "attn_v.bias", {V}, true},
    };

    L->kind = HY_LAYER_ATTN_FULL;
    L->kv_index = m->n_kv_layers++;
    L->n_head = n_head;
    L->n_head_kv = n_head_kv;
    return hy_model_layer_tensors(m, L, il, t, HY_ARRAY_LEN(t), err);
}

int hy_model_load_ffn(hy_model_t *m, hy_layer_t *L, int32_t il, int32_t n_ff, char *err)
{
    const int64_t E = m->n_embd, F = n_ff;
    const hy_layer_tensor_t t[] = {
        {HY_LT(ffn_gate), "ffn_gate.weight", {E, F}, false},
        {HY_LT(ffn_up), "ffn_up.weight", {E, F}, false},
        {HY_LT(ffn_down), "ffn_down.weight", {F, E}, false},
    };

    L->ffn = HY_FFN_DENSE;
    L->n_ff = n_ff;
    return hy_model_layer_tensors(m, L, il, t, HY_ARRAY_LEN(t), err);
}

int hy_model_load_experts(hy_model_t *m, hy_layer_t *L, int32_t il, int32_t n_expert,
                          int32_t n_expert_used, int32_t n_ff_exp, char *err)
{
    const int64_t E = m->n_embd, F = n_ff_exp, X = n_expert;
    const hy_layer_tensor_t t[] = {
        {HY_LT(moe.gate_inp), "ffn_gate_inp.weight", {E, X}, false},
        {HY_LT(moe.gate_exps), "ffn_gate_exps.weight", {E, F, X}, false},
        {HY_LT(moe.up_exps), "ffn_up_exps.weight", {E, F, X}, false},
        {HY_LT(moe.down_exps), "ffn_down_exps.weight", {F, E, X}, false},
    };

    L->ffn = HY_FFN_MOE;
    L->moe.n_expert = n_expert;
    L->moe.n_expert_used = n_expert_used;
    L->moe.n_ff_exp = n_ff_exp;
    return hy_model_layer_tensors(m, L, il, t, HY_ARRAY_LEN(t), err);
}

/* ---- scratch -------------------------------------------------------------- */

void hy_model_scratch(hy_model_t *m, size_t struct_size, size_t member, int32_t region,
                      int64_t per_tok)
{
    hy_scratch_desc_t *d = &m->scratch;
    int32_t i;

    /* the description is code, not input: a wrong one is a bug */
    assert(region >= 0 && region < HY_SCRATCH_PARTS && per_tok >= 0);
    assert(member + sizeof(float *) <= struct_size && member % sizeof(float *) == 0);
    assert(d->size == 0 || d->size == struct_size);
    d->size = struct_size;
    for (i = 0; i < d->n_parts && d->part[i].member != member; i++)
        ;
    if (i == d->n_parts) {
        assert(d->n_parts < HY_SCRATCH_PARTS);
        d->part[d->n_parts++] = (hy_scratch_part_t){member, region, per_tok};
        return;
    }
    assert(d->part[i].region == region);
    d->part[i].per_tok = HY_MAX(d->part[i].per_tok, per_tok);
}
