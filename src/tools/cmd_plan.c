/*
 * cmd_plan.c - `hyserve plan`: what a model needs at a given context length
 * and concurrency, per layer kind, from the same layouts and backend sizes
 * the engine allocates with (src/kv/plan.c): sliding-window layers bounded
 * by their window (--chunk: the tokens per step the engine runs, which a
 * prefilling sequence also holds), next to the dense equivalent;
 * --swa-full quotes them kept for the whole context instead; --sparse adds
 * block-sparse attention's compressed keys ([attention]'s other sizes).
 */
#include <stdio.h>

#include "tools/cli.h"
#include "kv/plan.h"

#include <getopt.h>
#include <string.h>

int hy_cmd_plan(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"context", required_argument, 0, 'c'},
        {"seqs", required_argument, 0, 's'}, {"kv-type", required_argument, 0, 'k'},
        {"page-tokens", required_argument, 0, 'p'}, {"json", no_argument, 0, 'j'},
        {"backend", required_argument, 0, 'B'}, {"chunk", required_argument, 0, 'C'},
        {"swa-full", no_argument, 0, 'S'}, {"sparse", no_argument, 0, 'P'},
        {"sparse-block-tokens", required_argument, 0, 'b'},
        {"sparse-sink-tokens", required_argument, 0, 'K'},
        {"sparse-local-tokens", required_argument, 0, 'L'}, {"help", no_argument, 0, 'h'},
        {"hot-tokens", required_argument, 0, 'H'}, {"seq-warm-mb", required_argument, 0, 'W'},
        {0, 0, 0, 0}};
    const char *model = NULL, *backend = NULL;
    long ctx = 4096, seqs = 1, page = 16, chunk = HY_PLAN_CHUNK, hot = 0, warm_mb = 0;
    int32_t hot_blocks;
    hy_dtype_t kv = HY_DTYPE_F16;
    bool json = false, swa_full = false;
    hy_config_attention_t attn; /* --sparse: [attention]'s defaults otherwise */
    hy_kv_sparse_t sparse;
    hy_plan_opts_t po;
    hy_cli_ctx_t c;
    const hy_backend_opts_t bo = {.n_threads = 1};
    hy_plan_t p;
    char err[HY_ERR_LEN];
    uint64_t image, loaded;
    int opt, rc = 1;
    long lv;

    hy_cli_attn_defaults(&attn);
    optind = 1;
    while ((opt = getopt_long(argc, argv, "m:c:s:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'm': model = optarg; break;
        case 'c': if (hy_cli_int("plan", "--context", optarg, 1, 1L << 30, &ctx)) return 2; break;
        case 's': if (hy_cli_int("plan", "--seqs", optarg, 1, 1 << 20, &seqs)) return 2; break;
        case 'p': if (hy_cli_int("plan", "--page-tokens", optarg, 1, 256, &page)) return 2; break;
        case 'C': if (hy_cli_int("plan", "--chunk", optarg, 1, 1L << 30, &chunk)) return 2; break;
        case 'S': swa_full = true; break;
        case 'P': attn.sparse = HY_CONFIG_SPARSE_BLOCK; break;
        case 'b': if (hy_cli_int("plan", "--sparse-block-tokens", optarg, 1, 65536, &lv)) return 2; attn.sparse_block_tokens = (uint32_t)lv; break;
        case 'K': if (hy_cli_int("plan", "--sparse-sink-tokens", optarg, 0, 1 << 24, &lv)) return 2; attn.sink_tokens = (uint32_t)lv; break;
        case 'L': if (hy_cli_int("plan", "--sparse-local-tokens", optarg, 0, 1 << 24, &lv)) return 2; attn.local_tokens = (uint32_t)lv; break;
        case 'H': if (hy_cli_int("plan", "--hot-tokens", optarg, 0, 1L << 30, &hot)) return 2; break;
        case 'W': if (hy_cli_int("plan", "--seq-warm-mb", optarg, 0, 1L << 32, &warm_mb)) return 2; break;
        case 'k': if (hy_cli_kv_type("plan", optarg, &kv)) return 2; break;
        case 'j': json = true; break;
        case 'B': backend = optarg; break;
        case 'h':
            printf("usage: hyserve plan -m MODEL.gguf [--context N] [--seqs M] [--kv-type f16|f32|q8_0] [--page-tokens N] [--chunk TOKENS] [--swa-full] [--sparse [--sparse-block-tokens N] [--sparse-sink-tokens N] [--sparse-local-tokens N] [--hot-tokens N [--seq-warm-mb N]]] [--json] [--backend cpu|cuda]\n");
            return 0;
        default: return 2;
        }
    }
    /* the program before the model: the process bound's measured part */
    if ((image = hy_plan_image_bytes(err)) == 0) {
        fprintf(stderr, "hyserve plan: %s\n", err);
        return 1;
    }
    if (hy_cli_open(&c, "plan", model, backend, &bo, true, NULL) != 0)
        return 1;
    if ((loaded = hy_plan_image_bytes(err)) == 0) {
        fprintf(stderr, "hyserve plan: %s\n", err);
        goto out;
    }
    if (hy_plan_sparse(&attn, (int32_t)page, true, &sparse, err) != HY_OK ||
        hy_plan_hot_window((uint32_t)hot, &sparse, (int32_t)page, (int32_t)chunk, true,
                           &hot_blocks, err) != HY_OK) {
        fprintf(stderr, "hyserve plan: %s\n", err);
        rc = 2;
        goto out;
    }
    if (warm_mb > 0 && hot_blocks == 0) {
        fprintf(stderr, "hyserve plan: --seq-warm-mb needs --hot-tokens (the out arena it "
                        "limits)\n");
        rc = 2;
        goto out;
    }
    po = (hy_plan_opts_t){(int32_t)ctx, (int32_t)seqs, (int32_t)page, (int32_t)chunk, kv, swa_full,
                          sparse, hot_blocks, (uint64_t)warm_mb << 20, 0, 0, image,
                          loaded > image ? loaded - image : 0};
    if (hy_plan_make_opts(&p, c.model, c.be, &po, err) != HY_OK) {
        fprintf(stderr, "hyserve plan: %s\n", err);
        goto out;
    }
    hy_plan_print(&p, c.model, stdout, json);
    rc = 0;
out:
    hy_cli_close(&c);
    return rc;
}
