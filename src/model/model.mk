# src/model: model loading and architectures.  families.c compiles every
# arch/<family>.c it includes (the table of families), so a new family needs
# no line here; the wildcard ships them in `make dist`.
libhy_a_SOURCES += src/model/model.c src/model/model.h src/model/arch/blocks.c \
	src/model/arch/blocks.h src/model/arch/load.c src/model/arch/load.h \
	src/model/arch/families.c
EXTRA_DIST += $(wildcard $(srcdir)/src/model/arch/*.c)
check_PROGRAMS += tests/unit/test_golden_tiny
TESTS += tests/unit/test_golden_tiny
tests_unit_test_golden_tiny_SOURCES = tests/unit/test_golden_tiny.c
tests_unit_test_golden_tiny_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/unit/test_arch_load
TESTS += tests/unit/test_arch_load
tests_unit_test_arch_load_SOURCES = tests/unit/test_arch_load.c tests/unit/gguf_patch.h
tests_unit_test_arch_load_LDADD = $(TEST_LDADD)
EXTRA_DIST += tests/golden/tiny
