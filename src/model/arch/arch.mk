# src/model/arch: one file per architecture family, and the blocks they
# share - dense (llama: Llama, Qwen2/3, SmolLM2, gemma), the Gated DeltaNet
# hybrids (qwen3next: qwen3next, qwen35, qwen35moe), the Mamba-2 hybrids
# (granitehybrid = Granite-4.0-H / Bamba, nemotron_h, with their shared
# mixer block mamba2.c) and LFM2.  Their ops are the backend's
# (backend/cpu/cpu.mk builds the CPU ones).
libhy_a_SOURCES += src/model/arch/blocks.c src/model/arch/blocks.h src/model/arch/llama.c \
	src/model/arch/qwen3next.c src/model/arch/mamba2.c src/model/arch/mamba2.h \
	src/model/arch/granite_hybrid.c src/model/arch/nemotron_h.c src/model/arch/lfm2.c
check_PROGRAMS += tests/unit/test_qwen3next tests/unit/test_hybrid_ssm_load
TESTS += tests/unit/test_qwen3next tests/unit/test_hybrid_ssm_load
tests_unit_test_qwen3next_SOURCES = tests/unit/test_qwen3next.c
tests_unit_test_qwen3next_LDADD = $(TEST_LDADD)
tests_unit_test_hybrid_ssm_load_SOURCES = tests/unit/test_hybrid_ssm_load.c
tests_unit_test_hybrid_ssm_load_LDADD = $(TEST_LDADD)
