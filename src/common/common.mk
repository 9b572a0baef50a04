# src/common: errors, element types.
libhy_a_SOURCES += src/common/hy.c src/common/hy.h src/common/dtype.c src/common/dtype.h \
	src/common/futex.h
check_PROGRAMS += tests/unit/test_common
TESTS += tests/unit/test_common
tests_unit_test_common_SOURCES = tests/unit/test_common.c
tests_unit_test_common_LDADD = $(TEST_LDADD)
# SHA-256 (model file versions in /v1/models, /health, hyserve-ctl status).
libhy_a_SOURCES += src/common/sha256.c src/common/sha256.h
check_PROGRAMS += tests/unit/test_sha256
TESTS += tests/unit/test_sha256
tests_unit_test_sha256_SOURCES = tests/unit/test_sha256.c
tests_unit_test_sha256_LDADD = $(TEST_LDADD)
