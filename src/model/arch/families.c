/*
 * families.c - the table of families: which general.architecture names
 * hyserve reads, and with which architecture.  Each family's file is
 * compiled here, as part of this one translation unit (the way redis'
 * ae.c includes its ae_epoll.c), so that adding a family touches its arch
 * file, this table and its tiny-model spec in scripts/make-tiny-models -
 * no build fragment, header or test list (README "Adding a family").
 * The arch files keep their functions static and prefixed by family
 * (hy_llama_, hy_gemma_, ...), so sharing a unit cannot mix them up.
 */
#include "model/model.h"

#include <string.h>

#include "model/arch/llama.c"
#include "model/arch/gemma.c"
#include "model/arch/lfm2.c"
#include "model/arch/qwen3next.c"
#include "model/arch/granite_hybrid.c"
#include "model/arch/nemotron_h.c"
#include "model/arch/minimax.c"

static const struct {
    const char *gguf_name;
    const hy_arch_t *arch;
} hy_families[] = {
    {"llama", &hy_arch_llama},
    {"qwen2", &hy_arch_llama},
    {"qwen3", &hy_arch_llama},
    {"gemma2", &hy_arch_gemma},
    {"gemma3", &hy_arch_gemma},
    {"lfm2", &hy_arch_lfm2},
    {"lfm2moe", &hy_arch_lfm2},
    {"qwen3next", &hy_arch_qwen3next},
    {"qwen35", &hy_arch_qwen3next},
    {"qwen35moe", &hy_arch_qwen3next},
    {"granitehybrid", &hy_arch_granite_hybrid},
    {"nemotron_h", &hy_arch_nemotron_h},
    {"minimax-01", &hy_arch_minimax},
};

const hy_arch_t *hy_arch_find(const char *name, size_t len)
{
    for (size_t i = 0; i < HY_ARRAY_LEN(hy_families); i++)
        if (strlen(hy_families[i].gguf_name) == len &&
            memcmp(hy_families[i].gguf_name, name, len) == 0)
            return hy_families[i].arch;
    return NULL;
}
