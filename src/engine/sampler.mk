# src/engine/sampler: token sampling (penalties, top-k/top-p/min-p, logprobs).
libhy_a_SOURCES += src/engine/sampler.c src/engine/sampler.h
check_PROGRAMS += tests/unit/test_sampler
TESTS += tests/unit/test_sampler
tests_unit_test_sampler_SOURCES = tests/unit/test_sampler.c
tests_unit_test_sampler_LDADD = $(TEST_LDADD)
