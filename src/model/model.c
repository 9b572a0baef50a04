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

const char *hy_layer_kind_name(hy_layer_kind_t k)
{
    static const char *names[] = {"attention", "sliding_attention", "gated_deltanet",
                                  "mamba2", "shortconv", "lightning", "mlp"};

    return (unsigned)k < HY_ARRAY_LEN(names) ? names[k] : "unknown";
}

/* ---- keys (model.h) ------------------------------------------------------ */

/* The one rule: absent and required is an error naming key and file;
 * absent and optional is HY_OK with the caller's default untouched. */
static int hy_model_key_missing(hy_model_t *m, const char *key, int rc, bool optional, char *err)
{
    if (rc == HY_ENOENT && optional)
        return HY_OK;
    if (rc == HY_ENOENT)
        return hy_err(err, HY_EFORMAT, "%s: required key '%s' is missing",
                      hy_gguf_path(m->gguf), key);
    return rc;
}

int hy_model_key_u32(hy_model_t *m, const char *suffix, uint32_t *out, bool optional,
                     char *err)
{
    char key[160];
    uint32_t v;
    int rc;

    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    rc = hy_gguf_get_u32(m->gguf, key, &v, err);
    if (rc == HY_OK)
        *out = v;
    return hy_model_key_missing(m, key, rc, optional, err);
}

int hy_model_key_f32(hy_model_t *m, const char *suffix, float *out, bool optional,
                     char *err)
{
    char key[160];
    float v;
    int rc;

    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    rc = hy_gguf_get_f32(m->gguf, key, &v, err);
    if (rc == HY_OK && !isfinite(v))
        return hy_err(err, HY_EFORMAT, "%s: key '%s' is not a finite number",
                      hy_gguf_path(m->gguf), key);
    if (rc == HY_OK)
        *out = v;
    return hy_model_key_missing(m, key, rc, optional, err);
}

int hy_model_layers_u32(hy_model_t *m, const char *suffix, uint32_t *out, bool optional,
                        char *err)
{
    uint32_t tmp[HY_MODEL_MAX_LAYERS];
    char key[160];
    int rc;

    /* read into a copy so a failed read leaves the caller's defaults */
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    rc = hy_gguf_get_u32_layers(m->gguf, key, tmp, (uint32_t)m->n_layer, err);
    if (rc == HY_OK)
        memcpy(out, tmp, sizeof(uint32_t) * (size_t)m->n_layer);
    return hy_model_key_missing(m, key, rc, optional, err);
}

int hy_model_layers_flag(hy_model_t *m, const char *suffix, const char *what, bool *out,
                         char *err)
{
    char key[160];
    hy_gguf_type_t et;
    uint64_t count;
    const void *data;
    int64_t kv;

    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    if (hy_gguf_get_arr(m->gguf, key, &et, &count, &data, NULL) != HY_OK)
        return HY_ENOENT;
    if (count != (uint64_t)m->n_layer || et == HY_GGUF_STRING || et == HY_GGUF_ARRAY ||
        et == HY_GGUF_F32 || et == HY_GGUF_F64)
        return hy_err(err, HY_EFORMAT, "%s: '%s' must be %s or a bool or integer array of block_count = %d entries",
                      hy_gguf_path(m->gguf), key, what, m->n_layer);
    kv = hy_gguf_find_key(m->gguf, key);
    for (int32_t il = 0; il < m->n_layer; il++)
        out[il] = et == HY_GGUF_BOOL ? ((const uint8_t *)data)[il] != 0
                                     : hy_gguf_arr_i64(m->gguf, kv, (uint64_t)il) != 0;
    return HY_OK;
}

/* context_length when a file has none (llama.cpp requires the key; older
 * converters did not always write it) */
#define HY_MODEL_DEFAULT_CTX 4096

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
    if (u == 0 || u > HY_MODEL_MAX_LAYERS)
        return hy_err(err, HY_EFORMAT, "%s: %s.block_count = %u is out of range (1..%d)",
                      hy_gguf_path(m->gguf), m->arch_name, u, HY_MODEL_MAX_LAYERS);
    m->n_layer = (int32_t)u;
    u = HY_MODEL_DEFAULT_CTX;
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

int hy_model_load(hy_model_t **out, const char *path, hy_backend_t *be, char *err)
{
    hy_model_t *m;
    hy_gguf_str_t arch;
    int rc;

    *out = NULL;
    m = calloc(1, sizeof *m);
    if (m == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    m->be = be;
    rc = hy_gguf_open_ex(&m->gguf, path,
                         be && be->i->weights_huge_pages && be->i->weights_huge_pages(be)
                             ? HY_GGUF_HUGE_PAGES
                             : 0,
                         err);
    if (rc != HY_OK)
        goto fail;
    rc = hy_gguf_get_str(m->gguf, "general.architecture", &arch, err);
    if (rc != HY_OK) {
        if (rc == HY_ENOENT)
            rc = hy_err(err, HY_EFORMAT, "%s: key 'general.architecture' is missing", path);
        goto fail;
    }
    snprintf(m->arch_name, sizeof m->arch_name, "%.*s", (int)HY_MIN(arch.len, 31), arch.ptr);
    if ((m->arch = hy_arch_find(arch.ptr, arch.len)) == NULL) {
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
    free(m->arch_mem);
    free(m->rope_freq_factors);
    hy_gguf_close(m->gguf);
    free(m);
}

/* Region r of the architecture's scratch spans max(per_tok) x T floats,
 * rounded up to 16 floats so each starts 64-byte aligned (what a separate
 * allocation would give); region_off (may be NULL) gets where each starts.
 * Returns the floats of all of them. */
static size_t hy_fwd_scratch_floats(const hy_model_t *m, size_t T,
                                    size_t region_off[HY_SCRATCH_PARTS])
{
    const hy_scratch_desc_t *d = &m->scratch;
    int64_t need[HY_SCRATCH_PARTS] = {0};
    size_t total = 0;
    int32_t i;

    for (i = 0; i < d->n_parts; i++)
        need[d->part[i].region] = HY_MAX(need[d->part[i].region], d->part[i].per_tok);
    for (i = 0; i < HY_SCRATCH_PARTS; i++) {
        if (region_off != NULL)
            region_off[i] = total;
        total += (T * (size_t)need[i] + 15) / 16 * 16;
    }
    return HY_MAX(total, (size_t)1);
}

/* Points every member of the architecture's scratch struct into one
 * backend allocation, from m->scratch alone. */
static int hy_fwd_scratch(hy_fwd_t *f, const hy_model_t *m, size_t T)
{
    const hy_scratch_desc_t *d = &m->scratch;
    size_t region_off[HY_SCRATCH_PARTS], total;
    int32_t i;

    if (d->size == 0)
        return HY_OK;
    total = hy_fwd_scratch_floats(m, T, region_off);
    f->scratch = calloc(1, d->size);
    f->scratch_mem = f->be->i->alloc(f->be, total);
    if (f->scratch == NULL || f->scratch_mem == NULL)
        return HY_ENOMEM;
    for (i = 0; i < d->n_parts; i++)
        *(float **)((char *)f->scratch + d->part[i].member) =
            f->scratch_mem + region_off[d->part[i].region];
    return HY_OK;
}

/* The floats of each buffer hy_fwd_init allocates, in hy_fwd_t's order
 * (x .. logits, then the architecture's scratch, 0 without one): the one
 * place their sizes are written, for the allocation and the plan. */
#define HY_FWD_BUFS 11
static void hy_fwd_sizes(const hy_model_t *m, int32_t max_tokens, int32_t max_outputs,
                         size_t n[HY_FWD_BUFS])
{
    size_t T = (size_t)max_tokens, O = (size_t)max_outputs;
    int32_t n_ff = 0;

    for (int32_t i = 0; i < m->n_layer; i++)
        n_ff = HY_MAX(n_ff, m->layers[i].n_ff);
    n[0] = T * m->n_embd;                          /* x */
    n[1] = T * m->n_embd;                          /* xn */
    n[2] = T * m->n_head * m->head_dim;            /* q */
    n[3] = T * m->n_head_kv * m->head_dim;         /* k */
    n[4] = T * m->n_head_kv * m->head_dim_v;       /* v */
    n[5] = T * m->n_head * m->head_dim_v;          /* att */
    n[6] = T * (size_t)HY_MAX(n_ff, 1);            /* gate */
    n[7] = T * (size_t)HY_MAX(n_ff, 1);            /* up */
    n[8] = O * m->n_embd;                          /* out_x */
    n[9] = O * m->n_vocab;                         /* logits */
    n[10] = m->scratch.size > 0 ? hy_fwd_scratch_floats(m, T, NULL) : 0;
}

uint64_t hy_fwd_bytes(const hy_model_t *m, int32_t max_tokens, int32_t max_outputs)
{
    size_t n[HY_FWD_BUFS];
    uint64_t total = 0;

    hy_fwd_sizes(m, max_tokens, max_outputs, n);
    /* each is one backend allocation of at least a float; the scratch's
     * struct of pointers (calloc) is one more */
    for (int i = 0; i < HY_FWD_BUFS; i++)
        if (i < HY_FWD_BUFS - 1 || n[i] > 0)
            total += hy_host_alloc_bytes((uint64_t)HY_MAX(n[i], (size_t)1) * sizeof(float));
    if (m->scratch.size > 0)
        total += hy_host_alloc_bytes(m->scratch.size);
    return total;
}

int hy_fwd_init(hy_fwd_t *f, const hy_model_t *m, hy_backend_t *be, int32_t max_tokens,
                int32_t max_outputs, char *err)
{
    size_t n[HY_FWD_BUFS];

    memset(f, 0, sizeof *f);
    f->be = be;
    f->max_tokens = max_tokens;
    f->max_outputs = max_outputs;
    hy_fwd_sizes(m, max_tokens, max_outputs, n);
    f->x = be->i->alloc(be, n[0]);
    f->xn = be->i->alloc(be, n[1]);
    f->q = be->i->alloc(be, n[2]);
    f->k = be->i->alloc(be, n[3]);
    f->v = be->i->alloc(be, n[4]);
    f->att = be->i->alloc(be, n[5]);
    f->gate = be->i->alloc(be, n[6]);
    f->up = be->i->alloc(be, n[7]);
    f->out_x = be->i->alloc(be, n[8]);
    f->logits = be->i->alloc(be, n[9]);
    if (hy_fwd_scratch(f, m, (size_t)max_tokens) != HY_OK || !f->x || !f->xn || !f->q ||
        !f->k || !f->v || !f->att || !f->gate || !f->up || !f->out_x || !f->logits) {
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
    be->i->release(be, f->scratch_mem);
    free(f->scratch);
    memset(f, 0, sizeof *f);
}
