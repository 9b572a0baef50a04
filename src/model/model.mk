# src/model: model loading and architectures.
libhy_a_SOURCES += src/model/model.c src/model/model.h src/model/arch/blocks.c \
	src/model/arch/blocks.h src/model/arch/llama.c
check_PROGRAMS += tests/unit/test_golden_tiny
TESTS += tests/unit/test_golden_tiny
tests_unit_test_golden_tiny_SOURCES = tests/unit/test_golden_tiny.c
tests_unit_test_golden_tiny_LDADD = $(TEST_LDADD)
EXTRA_DIST += tests/golden/tiny
