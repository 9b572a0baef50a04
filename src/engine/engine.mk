# src/engine (runner) and src/kv (page ids).
libhy_a_SOURCES += src/engine/runner.c src/engine/runner.h \
	src/kv/plan.c src/kv/plan.h
check_PROGRAMS += tests/unit/test_plan
TESTS += tests/unit/test_plan
tests_unit_test_plan_SOURCES = tests/unit/test_plan.c
tests_unit_test_plan_LDADD = $(TEST_LDADD)
