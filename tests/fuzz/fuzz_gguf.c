/*
 * fuzz_gguf.c - libFuzzer entry point for the GGUF reader: every input is
 * opened with hy_gguf_open_buffer and, if it parses, every accessor is used
 * once so that a validation gap shows up as a sanitizer report.  Not built by
 * default; from the source tree:
 *
 *   clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -Isrc \
 *       tests/fuzz/fuzz_gguf.c src/model/gguf.c src/common/hy.c src/common/dtype.c \
 *       -o fuzz_gguf
 *   ./fuzz_gguf -max_len=65536 corpus_dir/
 *
 * (a corpus can start from any small .gguf, e.g. shared/testdata/tokenizer).
 */
#include "model/gguf.h"

#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[HY_ERR_LEN], key[256];
    hy_gguf_t *g = NULL;
    volatile uint64_t sink = 0;
    int64_t k;
    uint64_t i, count;

    if (hy_gguf_open_buffer(&g, data, size, "fuzz.gguf", err) != HY_OK)
        return 0;
    for (k = 0; k < hy_gguf_n_kv(g); k++) {
        hy_gguf_str_t s = hy_gguf_kv_key(g, k), v;
        hy_gguf_type_t et;
        const void *p;
        uint32_t u32, layers[4];
        int64_t i64;
        float f;
        bool b;

        snprintf(key, sizeof key, "%.*s", (int)(s.len < 200 ? s.len : 200), s.ptr);
        sink += (uint64_t)hy_gguf_get_u32(g, key, &u32, err);
        sink += (uint64_t)hy_gguf_get_i64(g, key, &i64, err);
        sink += (uint64_t)hy_gguf_get_f32(g, key, &f, err);
        sink += (uint64_t)hy_gguf_get_bool(g, key, &b, err);
        sink += (uint64_t)hy_gguf_get_u32_layers(g, key, layers, 4, err);
        if (hy_gguf_get_str(g, key, &v, err) == HY_OK && v.len > 0)
            sink += (uint8_t)v.ptr[v.len - 1];
        if (hy_gguf_get_arr(g, key, &et, &count, &p, err) == HY_OK) {
            for (i = 0; i < count; i++) {
                hy_gguf_str_t e = hy_gguf_arr_str(g, k, i);
                if (e.len > 0)
                    sink += (uint8_t)e.ptr[e.len - 1];
                sink += (uint64_t)hy_gguf_arr_i64(g, k, i);
                sink += (uint64_t)hy_gguf_arr_f64(g, k, i);
            }
        }
    }
    for (k = 0; k < hy_gguf_n_tensors(g); k++) {
        const hy_gguf_tensor_t *t = hy_gguf_tensor(g, k);
        if (hy_gguf_find_tensor(g, t->name) != t)
            __builtin_trap(); /* names are unique, so lookup must find itself */
        sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    hy_gguf_close(g);
    (void)sink;
    return 0;
}
