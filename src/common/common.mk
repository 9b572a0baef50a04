# src/common: errors, element types.
libhy_a_SOURCES += src/common/hy.c src/common/hy.h src/common/dtype.c src/common/dtype.h
check_PROGRAMS += tests/unit/test_common
TESTS += tests/unit/test_common
tests_unit_test_common_SOURCES = tests/unit/test_common.c
tests_unit_test_common_LDADD = $(TEST_LDADD)
