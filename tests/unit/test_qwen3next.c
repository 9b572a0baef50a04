/*
 * test_qwen3next.c - loading the Gated DeltaNet family: the tiny qwen3next
 * and qwen35 GGUFs load with the right layer pattern and state sizes, and
 * copies of them whose metadata disagrees with their tensors (a GDN tensor
 * missing from a recurrent layer, wrong conv kernel, H_v not a multiple of
 * H_k, inner size, layer pattern, head counts, M-RoPE sections) are
 * refused with a message naming the key or tensor.  Each broken copy is
 * the original file with one value or one character patched in place.
 */
#include "gguf_patch.h"
#include "test.h"

/* 4 value heads of 16x16 state, then per head the canonical block's rows
 * since the last multiple of 64 (docs/determinism.md): k^T 16x64, delta
 * 64x16, G 64 */
#define QN_REC_FLOATS (4 * 16 * 16 + 4 * (16 * 64 + 64 * 16 + 64))

#include <stdint.h>
#include <string.h>

static unsigned char *find(unsigned char *buf, size_t size, const char *s)
{
    size_t n = strlen(s);

    for (size_t i = 0; i + n <= size; i++)
        if (memcmp(buf + i, s, n) == 0)
            return buf + i;
    return NULL;
}

typedef enum { PATCH_U32, PATCH_ARR0, PATCH_CHAR } patch_kind_t;

/* Loads a patched copy: PATCH_U32 sets the u32 value of metadata key
 * `what`; PATCH_ARR0 the first element of u32/i32 array key `what`;
 * PATCH_CHAR replaces the last character of string `what` (a tensor name)
 * by `val`.  Returns the load status, message in err. */
static int load_patched(const unsigned char *orig, size_t size, const char *what,
                        patch_kind_t kind, uint32_t val, char *err)
{
    unsigned char *buf = malloc(size), *p;
    hy_backend_t *be = NULL;
    hy_backend_opts_t o = {.n_threads = 1};
    int rc;

    memcpy(buf, orig, size);
    p = find(buf, size, what);
    if (p == NULL) {
        free(buf);
        snprintf(err, HY_ERR_LEN, "test: '%s' not in the file", what);
        return HY_OK + 1000;
    }
    p += strlen(what);
    if (kind == PATCH_U32)
        memcpy(p + 4, &val, 4); /* after the u32 type tag */
    else if (kind == PATCH_ARR0)
        memcpy(p + 4 + 4 + 8, &val, 4); /* type, element type, u64 count */
    else
        p[-1] = (unsigned char)val;
    hy_backend_cpu_new(&be, &o, err);
    rc = hy_tp_load(be, buf, size, NULL, err);
    be->i->free(be);
    free(buf);
    return rc;
}

static void expect_refused(const unsigned char *buf, size_t size, const char *what,
                           patch_kind_t kind, uint32_t val, const char *needle,
                           const char *desc)
{
    char err[HY_ERR_LEN] = "";
    int rc = load_patched(buf, size, what, kind, val, err);

    HY_T_OK(rc < 0 && strstr(err, needle) != NULL, "%s: refused naming '%s' (%s)", desc, needle,
            err);
}

int main(void)
{
    static const char *const models[] = {"qwen3next", "qwen35"};

    for (size_t mi = 0; mi < HY_ARRAY_LEN(models); mi++) {
        const char *name = models[mi];
        char rel[128], key[128], err[HY_ERR_LEN];
        unsigned char *buf;
        size_t size;
        hy_backend_t *be = NULL;
        hy_backend_opts_t o = {.n_threads = 1};
        hy_model_t *m = NULL;
        int rc;

        snprintf(rel, sizeof rel, "tests/golden/tiny/%s.gguf", name);
        buf = hy_tp_read_all(hy_t_srcpath(rel), &size);
        HY_T_OK(buf != NULL, "%s: read %s", name, rel);
        if (buf == NULL)
            continue;
        hy_backend_cpu_new(&be, &o, err);
        rc = hy_model_load(&m, hy_t_srcpath(rel), be, err);
        HY_T_OK(rc == HY_OK && m->n_layer == 4 && m->n_rec_layers == 3 && m->n_kv_layers == 1 &&
                    m->layers[0].kind == HY_LAYER_GDN && m->layers[2].kind == HY_LAYER_GDN &&
                    m->layers[3].kind == HY_LAYER_ATTN_FULL && m->layers[3].kv_index == 0 &&
                    m->layers[2].rec_index == 2 && m->layers[1].conv_floats == 3 * 128 &&
                    m->layers[1].rec_floats == QN_REC_FLOATS && m->rope.n_rot == 8 &&
                    m->layers[0].ffn == (mi == 0 ? HY_FFN_MOE : HY_FFN_DENSE),
                "%s: loads as 3 GDN + 1 attention, conv 3x128, 4x16x16 state floats + the block's "
                "rows (%s)",
                name, rc == HY_OK ? "ok" : err);
        hy_model_free(m);
        be->i->free(be);

        expect_refused(buf, size, "blk.2.attn_qkv.weight", PATCH_CHAR, 'W',
                       "blk.2.attn_qkv.weight", "GDN tensor renamed in recurrent layer 2");
        expect_refused(buf, size, "blk.1.ssm_out.weight", PATCH_CHAR, 'W', "blk.1.ssm_out.weight",
                       "ssm_out missing in layer 1");
        snprintf(key, sizeof key, "%s.ssm.conv_kernel", name);
        expect_refused(buf, size, key, PATCH_U32, 3, "ssm_conv1d.weight",
                       "conv_kernel 3 vs {4, 128} conv weights");
        snprintf(key, sizeof key, "%s.ssm.time_step_rank", name);
        expect_refused(buf, size, key, PATCH_U32, 3, "time_step_rank",
                       "H_v = 3 not a multiple of H_k = 2");
        snprintf(key, sizeof key, "%s.ssm.group_count", name);
        expect_refused(buf, size, key, PATCH_U32, 4, "attn_qkv.weight",
                       "H_k = 4 vs the qkv tensor's rows");
        snprintf(key, sizeof key, "%s.ssm.inner_size", name);
        expect_refused(buf, size, key, PATCH_U32, 65, "inner_size", "inner_size 65 != H_v x d");
        snprintf(key, sizeof key, "%s.full_attention_interval", name);
        expect_refused(buf, size, key, PATCH_U32, 2, "blk.1.attn_q.weight",
                       "interval 2 makes layer 1 attention, which has no attn_q");
        snprintf(key, sizeof key, "%s.attention.head_count_kv", name);
        expect_refused(buf, size, key, PATCH_U32, 3, "head_count_kv", "4 heads over 3 kv heads");
        snprintf(key, sizeof key, "%s.attention.head_count", name);
        expect_refused(buf, size, key, PATCH_U32, 2, "blk.3.attn_q.weight",
                       "head_count 2 vs attn_q rows");
        if (mi == 1)
            expect_refused(buf, size, "qwen35.rope.dimension_sections", PATCH_ARR0, 1,
                           "dimension_sections", "M-RoPE section leaving a rotary pair out");
        else
            expect_refused(buf, size, "blk.0.ffn_gate_inp_shexp.weight", PATCH_CHAR, 'W',
                           "blk.0.ffn_gate_inp_shexp.weight",
                           "shared expert without its gate");
        free(buf);
    }
    return hy_t_done();
}
