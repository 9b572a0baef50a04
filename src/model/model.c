/*
 * model.c - loading a model: open the GGUF, pick the architecture from
 * general.architecture, read the hyperparameters every architecture shares,
 * and let the architecture bind its tensors.  Every tensor is checked for
 * its exact shape before use, so a file whose metadata and tensors disagree
 * fails here with the tensor's name instead of reading out of bounds later.
 */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *gguf_name;
    const hy_arch_t *arch;
} hy_arch_table[] = {
    {"llama", &hy_arch_llama},
    {"qwen2", &hy_arch_llama},
    {"qwen3", &hy_arch_llama},
    {"lfm2", &hy_arch_lfm2},
    {"lfm2moe", &hy_arch_lfm2},
    {"qwen3next", &hy_arch_qwen3next},
    {"qwen35", &hy_arch_qwen3next},
    {"qwen35moe", &hy_arch_qwen3next},
    {"granitehybrid", &hy_arch_granite_hybrid},
    {"nemotron_h", &hy_arch_nemotron_h},
};

const char *hy_layer_kind_name(hy_layer_kind_t k)
{
    static const char *names[] = {"attention", "sliding_attention", "gated_deltanet",
                                  "mamba2", "shortconv", "lightning", "mlp"};

    return (unsigned)k < HY_ARRAY_LEN(names) ? names[k] : "unknown";
}

int hy_model_key_u32(hy_model_t *m, const char *suffix, uint32_t *out, bool optional,
                     char *err)
{
    char key[160];
    int rc;

    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    rc = hy_gguf_get_u32(m->gguf, key, out, err);
    if (rc == HY_ENOENT && optional)
        return HY_OK;
    if (rc == HY_ENOENT)
        return hy_err(err, HY_EFORMAT, "%s: required key '%s' is missing",
                      hy_gguf_path(m->gguf), key);
    return rc;
}

int hy_model_key_f32(hy_model_t *m, const char *suffix, float *out, bool optional,
                     char *err)
{
    char key[160];
    int rc;

    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    rc = hy_gguf_get_f32(m->gguf, key, out, err);
    if (rc == HY_ENOENT && optional)
        return HY_OK;
    if (rc == HY_ENOENT)
        return hy_err(err, HY_EFORMAT, "%s: required key '%s' is missing",
                      hy_gguf_path(m->gguf), key);
    if (rc == HY_OK && !isfinite(*out))
        return hy_err(err, HY_EFORMAT, "%s: key '%s' is not a finite number",
                      hy_gguf_path(m->gguf), key);
    return rc;
}

int hy_model_weight(hy_model_t *m, hy_weight_t *w, const char *name, int64_t ne0,
                    int64_t ne1, bool optional, char *err)
{
    return hy_model_weight3(m, w, name, ne0, ne1, 1, optional, err);
}

int hy_model_weight3(hy_model_t *m, hy_weight_t *w, const char *name, int64_t ne0,
                     int64_t ne1, int64_t ne2, bool optional, char *err)
{
    const hy_gguf_tensor_t *t = hy_gguf_find_tensor(m->gguf, name);
    const hy_dtype_info_t *ti;

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
    return m->be->i->weight_init(m->be, w, err);
}

int hy_model_layer_weight(hy_model_t *m, hy_weight_t *w, const char *fmt, int layer,
                          int64_t ne0, int64_t ne1, bool optional, char *err)
{
    char name[128];

    snprintf(name, sizeof name, fmt, layer);
    return hy_model_weight(m, w, name, ne0, ne1, optional, err);
}

/* Reads the keys all our architectures share (DESIGN §3, notes b.0). */
static int hy_model_read_common(hy_model_t *m, char *err)
{
    uint32_t u;
    hy_gguf_str_t s;
    int rc;

    if ((rc = hy_model_key_u32(m, "embedding_length", &u, false, err)) != HY_OK)
        return rc;
    if (u == 0 || u > 65536)
        return hy_err(err, HY_EFORMAT, "%s: %s.embedding_length = %u is out of range",
                      hy_gguf_path(m->gguf), m->arch_name, u);
    m->n_embd = (int32_t)u;
    if ((rc = hy_model_key_u32(m, "block_count", &u, false, err)) != HY_OK)
        return rc;
    if (u == 0 || u > 4096)
        return hy_err(err, HY_EFORMAT, "%s: %s.block_count = %u is out of range",
                      hy_gguf_path(m->gguf), m->arch_name, u);
    m->n_layer = (int32_t)u;
    u = 4096;
    if ((rc = hy_model_key_u32(m, "context_length", &u, true, err)) != HY_OK)
        return rc;
    m->n_ctx_train = (int32_t)HY_MIN(u, (uint32_t)INT32_MAX);
    m->norm_eps = 1e-5f;
    if ((rc = hy_model_key_f32(m, "attention.layer_norm_rms_epsilon", &m->norm_eps, true,
                               err)) != HY_OK)
        return rc;
    if (!(m->norm_eps > 0.0f && m->norm_eps < 1.0f))
        return hy_err(err, HY_EFORMAT, "%s: %s.attention.layer_norm_rms_epsilon = %g is out of range",
                      hy_gguf_path(m->gguf), m->arch_name, m->norm_eps);
    if (hy_gguf_get_str(m->gguf, "general.name", &s, NULL) == HY_OK)
        snprintf(m->name, sizeof m->name, "%.*s", (int)HY_MIN(s.len, 127), s.ptr);

    /* the vocabulary size is the number of rows of the embedding */
    {
        const hy_gguf_tensor_t *t = hy_gguf_find_tensor(m->gguf, "token_embd.weight");

        if (t == NULL)
            return hy_err(err, HY_EFORMAT, "%s: tensor 'token_embd.weight' is missing",
                          hy_gguf_path(m->gguf));
        if (t->ne[1] <= 0 || t->ne[1] > INT32_MAX)
            return hy_err(err, HY_EFORMAT, "%s: tensor 'token_embd.weight' has a bad vocabulary size",
                          hy_gguf_path(m->gguf));
        m->n_vocab = (int32_t)t->ne[1];
    }
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
    return HY_OK;
}

int hy_model_load(hy_model_t **out, const char *path, hy_backend_t *be, char *err)
{
    hy_model_t *m;
    hy_gguf_str_t arch;
    size_t i;
    int rc;

    *out = NULL;
    m = calloc(1, sizeof *m);
    if (m == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    m->be = be;
    rc = hy_gguf_open(&m->gguf, path, err);
    if (rc != HY_OK)
        goto fail;
    rc = hy_gguf_get_str(m->gguf, "general.architecture", &arch, err);
    if (rc != HY_OK) {
        if (rc == HY_ENOENT)
            rc = hy_err(err, HY_EFORMAT, "%s: key 'general.architecture' is missing", path);
        goto fail;
    }
    snprintf(m->arch_name, sizeof m->arch_name, "%.*s", (int)HY_MIN(arch.len, 31), arch.ptr);
    for (i = 0; i < HY_ARRAY_LEN(hy_arch_table); i++) {
        if (strlen(hy_arch_table[i].gguf_name) == arch.len &&
            memcmp(hy_arch_table[i].gguf_name, arch.ptr, arch.len) == 0)
            m->arch = hy_arch_table[i].arch;
    }
    if (m->arch == NULL) {
        rc = hy_err(err, HY_EUNSUPPORTED, "%s: architecture '%s' is not supported", path,
                    m->arch_name);
        goto fail;
    }
    if ((rc = hy_model_read_common(m, err)) != HY_OK)
        goto fail;
    if ((rc = m->arch->load(m, err)) != HY_OK)
        goto fail;
    *out = m;
    return HY_OK;
fail:
    hy_model_free(m);
    return rc;
}

void hy_model_free(hy_model_t *m)
{
    if (m == NULL)
        return;
    free(m->layers);
    free(m->rope_freq_factors);
    hy_gguf_close(m->gguf);
    free(m);
}

int hy_fwd_init(hy_fwd_t *f, const hy_model_t *m, hy_backend_t *be, int32_t max_tokens,
                int32_t max_outputs, char *err)
{
    int32_t n_ff = 0, i;
    size_t T = (size_t)max_tokens;
    bool scratch_ok = true;

    memset(f, 0, sizeof *f);
    f->be = be;
    f->max_tokens = max_tokens;
    f->max_outputs = max_outputs;
    for (i = 0; i < m->n_layer; i++)
        n_ff = HY_MAX(n_ff, m->layers[i].n_ff);
    f->x = be->i->alloc(be, T * m->n_embd);
    f->xn = be->i->alloc(be, T * m->n_embd);
    f->q = be->i->alloc(be, T * m->n_head * m->head_dim);
    f->k = be->i->alloc(be, T * m->n_head_kv * m->head_dim);
    f->v = be->i->alloc(be, T * m->n_head_kv * m->head_dim_v);
    f->att = be->i->alloc(be, T * m->n_head * m->head_dim_v);
    f->gate = be->i->alloc(be, T * (size_t)HY_MAX(n_ff, 1));
    f->up = be->i->alloc(be, T * (size_t)HY_MAX(n_ff, 1));
    f->out_x = be->i->alloc(be, (size_t)max_outputs * m->n_embd);
    f->logits = be->i->alloc(be, (size_t)max_outputs * m->n_vocab);
    for (i = 0; i < 4; i++) {
        if (m->scratch_per_tok[i] > 0) {
            f->scratch[i] = be->i->alloc(be, T * (size_t)m->scratch_per_tok[i]);
            scratch_ok = scratch_ok && f->scratch[i] != NULL;
        }
    }
    if (!scratch_ok || !f->x || !f->xn || !f->q || !f->k || !f->v || !f->att || !f->gate || !f->up ||
        !f->out_x || !f->logits) {
        hy_fwd_free(f);
        return hy_err(err, HY_ENOMEM, "out of memory for %d-token activation buffers",
                      max_tokens);
    }
    return HY_OK;
}

void hy_fwd_free(hy_fwd_t *f)
{
    hy_backend_t *be = f->be;

    if (be == NULL)
        return;
    be->i->release(be, f->x);
    be->i->release(be, f->xn);
    be->i->release(be, f->q);
    be->i->release(be, f->k);
    be->i->release(be, f->v);
    be->i->release(be, f->att);
    be->i->release(be, f->gate);
    be->i->release(be, f->up);
    be->i->release(be, f->out_x);
    be->i->release(be, f->logits);
    for (int i = 0; i < 4; i++)
        be->i->release(be, f->scratch[i]);
    memset(f, 0, sizeof *f);
}
