/*
 * test_hybrid_ssm_load.c - the Mamba-2 hybrid loaders (granitehybrid,
 * nemotron_h) refuse GGUFs whose metadata disagrees with their tensors, with
 * a message naming the key or tensor: each case patches a copy of a tiny
 * golden model's bytes in place (same length: a key's value, one letter of
 * a tensor name), writes it to a temporary file and loads it.
 */
#include "gguf_patch.h"
#include "test.h"
#include "golden.h"

typedef struct {
    const char *model;
    const char *what;
    const char *key;    /* GGUF string to find */
    long value_off;     /* patch at (end of key + value_off) ... */
    uint32_t value;     /* ... this u32, or */
    const char *expect; /* substring the error must contain */
} patch_t;

int main(void)
{
    static const patch_t cases[] = {
        /* u32 key: type (4 bytes) then the value */
        {"granitehybrid-dense", "ssm.time_step_rank 7 does not divide ssm.inner_size 128",
         "granitehybrid.ssm.time_step_rank", 4, 7, "ssm.inner_size = 128 is not a multiple of granitehybrid.ssm.time_step_rank = 7"},
        {"granitehybrid-moe", "ssm.group_count 3 does not divide 8 heads",
         "granitehybrid.ssm.group_count", 4, 3, "ssm.group_count = 3 does not divide"},
        {"granitehybrid-dense", "ssm.state_size 8 disagrees with ssm_in's shape",
         "granitehybrid.ssm.state_size", 4, 8, "'blk.0.ssm_in.weight' has shape {64, 328"},
        {"nemotron_h", "ssm.conv_kernel 3 disagrees with ssm_conv1d's shape",
         "nemotron_h.ssm.conv_kernel", 4, 3, "'blk.0.ssm_conv1d.weight' has shape {4, 192"},
        /* array: type, elem type, u64 count, then u32 per layer */
        {"granitehybrid-moe", "head_count_kv[1] = 0 declares a Mamba layer without ssm tensors",
         "granitehybrid.attention.head_count_kv", 16 + 4, 0, "tensor 'blk.1.ssm_in.weight' is missing"},
        {"nemotron_h", "feed_forward_length[2] = 0 declares a Mamba layer without ssm tensors",
         "nemotron_h.feed_forward_length", 16 + 8, 0, "tensor 'blk.2.ssm_in.weight' is missing"},
        /* tensor name: one letter changed */
        {"granitehybrid-dense", "ssm_d of layer 2 missing", "blk.2.ssm_d", -1, 'x',
         "tensor 'blk.2.ssm_d' is missing"},
        {"nemotron_h", "ssm_norm of layer 3 missing", "blk.3.ssm_norm.weight", -1, 'X',
         "tensor 'blk.3.ssm_norm.weight' is missing"},
    };
    hy_t_golden_t models[HY_T_GOLDEN_MAX];
    int n_models = hy_t_golden_models(models, HY_T_GOLDEN_MAX), n_ssm = 0;
    hy_backend_opts_t opts = {.n_threads = 1};
    hy_backend_t *be = NULL;
    char err[HY_ERR_LEN], rel[128];

    if (hy_backend_cpu_new(&be, &opts, err) != HY_OK) {
        HY_T_OK(0, "cpu backend: %s", err);
        return hy_t_done();
    }
    /* every Mamba-2 hybrid of the manifest, unpatched */
    for (int i = 0; i < n_models; i++) {
        size_t size;
        unsigned char *buf;
        int rc;

        if (strcmp(models[i].arch, "granitehybrid") != 0 &&
            strcmp(models[i].arch, "nemotron_h") != 0)
            continue;
        n_ssm++;
        buf = hy_tp_read_all(hy_t_golden_path(&models[i]), &size);
        rc = buf ? hy_tp_load(be, buf, size, NULL, err) : HY_EIO;
        HY_T_OK(rc == HY_OK, "%s: the unpatched file loads (%s)", models[i].name,
                rc == HY_OK ? "ok" : buf ? err : "cannot read it");
        free(buf);
    }
    HY_T_OK(n_ssm >= 3, "the manifest has %d Mamba-2 hybrids (granitehybrid, nemotron_h)", n_ssm);
    for (size_t i = 0; i < HY_ARRAY_LEN(cases); i++) {
        const patch_t *c = &cases[i];
        size_t size, at;
        unsigned char *buf;
        int rc = HY_OK;

        snprintf(rel, sizeof rel, "tests/golden/tiny/%s.gguf", c->model);
        buf = hy_tp_read_all(hy_t_srcpath(rel), &size);
        at = buf ? hy_tp_find_str(buf, size, c->key) : 0;
        if (at == 0) {
            HY_T_OK(0, "%s: %s: key or tensor '%s' not found in the file", c->model, c->what,
                    c->key);
            free(buf);
            continue;
        }
        if (c->value_off < 0)
            buf[at - 1] = (unsigned char)c->value; /* last letter of the name */
        else
            memcpy(buf + at + c->value_off, &c->value, 4);
        rc = hy_tp_load(be, buf, size, NULL, err);
        HY_T_OK(rc != HY_OK && strstr(err, c->expect) != NULL, "%s: %s is refused (%s)", c->model,
                c->what, err);
        free(buf);
    }
    be->i->free(be);
    return hy_t_done();
}
