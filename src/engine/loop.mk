# src/engine/engine + scheduler: the coordinator's engine thread (batching,
# chunked prefill, prefix cache, preemption) and `hyserve bench --offline`.
libhy_a_SOURCES += src/engine/engine.c src/engine/engine.h src/engine/local.c src/engine/local.h \
	src/engine/scheduler.c \
	src/engine/scheduler.h src/tools/cmd_bench_offline.c src/tools/bench_offline.h
check_PROGRAMS += tests/unit/test_engine
TESTS += tests/unit/test_engine
tests_unit_test_engine_SOURCES = tests/unit/test_engine.c
tests_unit_test_engine_LDADD = $(TEST_LDADD)
