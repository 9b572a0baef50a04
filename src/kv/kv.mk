# src/kv: the memory planner (KV pages and recurrent-state slots of a model
# for a context and a concurrency, as the backends allocate them).
libhy_a_SOURCES += src/kv/plan.c src/kv/plan.h
check_PROGRAMS += tests/unit/test_plan
TESTS += tests/unit/test_plan
tests_unit_test_plan_SOURCES = tests/unit/test_plan.c
tests_unit_test_plan_LDADD = $(TEST_LDADD)
