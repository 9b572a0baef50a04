# src/backend/cpu: the CPU backend (thread pool, matmul, paged attention,
# small ops).
libhy_a_SOURCES += src/backend/backend.h src/backend/cpu/cpu.c src/backend/cpu/cpu_impl.h \
	src/backend/cpu/threadpool.c src/backend/cpu/threadpool.h \
	src/backend/cpu/matmul.c src/backend/cpu/attention.c src/backend/cpu/mem.c
# bench_cpu is built by `make check` but not run as a test: run
# tests/unit/bench_cpu [type] [threads] by hand for matmul GFLOP/s and GB/s.
check_PROGRAMS += tests/unit/test_cpu_backend tests/unit/bench_cpu
TESTS += tests/unit/test_cpu_backend
tests_unit_test_cpu_backend_SOURCES = tests/unit/test_cpu_backend.c
tests_unit_test_cpu_backend_LDADD = $(TEST_LDADD)
tests_unit_bench_cpu_SOURCES = tests/unit/bench_cpu.c
tests_unit_bench_cpu_LDADD = $(TEST_LDADD)
