# src/model/arch: one file per architecture family, the helpers their
# loaders share (load.c) and the blocks their forwards share (blocks.c).
# families.c is the table of families and compiles every family's file it
# includes - dense (llama: Llama, Qwen2/3, SmolLM2), gemma (Gemma 2 / 3),
# the Gated DeltaNet hybrids (qwen3next: qwen3next, qwen35, qwen35moe), the
# Mamba-2 hybrids (granite_hybrid, nemotron_h) and lfm2 - so a new family
# needs no line here; the wildcard ships them in `make dist`.  The Mamba-2
# mixer block they share (mamba2.c) is its own unit.  Their ops are the
# backend's (backend/cpu/cpu.mk builds the CPU ones).
libhy_a_SOURCES += src/model/arch/blocks.c src/model/arch/blocks.h \
	src/model/arch/load.c src/model/arch/load.h src/model/arch/families.c \
	src/model/arch/mamba2.c src/model/arch/mamba2.h
EXTRA_DIST += $(wildcard $(srcdir)/src/model/arch/*.c)
check_PROGRAMS += tests/unit/test_arch_load tests/unit/test_qwen3next \
	tests/unit/test_hybrid_ssm_load
TESTS += tests/unit/test_arch_load tests/unit/test_qwen3next tests/unit/test_hybrid_ssm_load
tests_unit_test_arch_load_SOURCES = tests/unit/test_arch_load.c tests/unit/gguf_patch.h
tests_unit_test_arch_load_LDADD = $(TEST_LDADD)
tests_unit_test_qwen3next_SOURCES = tests/unit/test_qwen3next.c tests/unit/gguf_patch.h
tests_unit_test_qwen3next_LDADD = $(TEST_LDADD)
tests_unit_test_hybrid_ssm_load_SOURCES = tests/unit/test_hybrid_ssm_load.c tests/unit/gguf_patch.h
tests_unit_test_hybrid_ssm_load_LDADD = $(TEST_LDADD)

# The minimax-01 loader (lightning layers) and its bad inputs.
check_PROGRAMS += tests/unit/test_minimax
TESTS += tests/unit/test_minimax
tests_unit_test_minimax_SOURCES = tests/unit/test_minimax.c tests/unit/gguf_patch.h
tests_unit_test_minimax_LDADD = $(TEST_LDADD)
