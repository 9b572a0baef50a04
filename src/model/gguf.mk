# src/model: the GGUF reader and its tests.
libhy_a_SOURCES += src/model/gguf.c src/model/gguf.h
check_PROGRAMS += tests/unit/test_gguf
TESTS += tests/unit/test_gguf
tests_unit_test_gguf_SOURCES = tests/unit/test_gguf.c tests/unit/gguf_writer.h
tests_unit_test_gguf_LDADD = $(TEST_LDADD)
# Its fuzz target is built by tests/fuzz/fuzz.mk.
