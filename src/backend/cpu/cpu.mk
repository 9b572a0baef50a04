# src/backend/cpu: the CPU backend (thread pool, matmul, paged attention,
# small ops).
libhy_a_SOURCES += src/backend/backend.h src/backend/cpu/cpu.c src/backend/cpu/cpu_impl.h \
	src/backend/cpu/threadpool.c src/backend/cpu/threadpool.h \
	src/backend/cpu/matmul.c src/backend/cpu/attention.c src/backend/cpu/mem.c \
	src/backend/cpu/attn_flash.h src/backend/cpu/attn_flash_impl.h \
	src/backend/cpu/attn_avx512.c src/backend/cpu/attn_avx2.c src/backend/cpu/attn_generic.c
# bench_cpu and bench_attn are built by `make check` but not run as tests:
# tests/unit/bench_cpu [type] [threads] for matmul GFLOP/s and GB/s,
# tests/unit/bench_attn [reps] [isa] [keys...] for long-context attention.
check_PROGRAMS += tests/unit/test_cpu_backend tests/unit/bench_cpu tests/unit/bench_attn
TESTS += tests/unit/test_cpu_backend
tests_unit_test_cpu_backend_SOURCES = tests/unit/test_cpu_backend.c
tests_unit_test_cpu_backend_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/unit/test_attn_flash
TESTS += tests/unit/test_attn_flash
# test_invariance: a token's row of matmul and attention is the same bits
# alone, in any batch, at any offset, prefill or decode, on 1..3 threads.
check_PROGRAMS += tests/unit/test_invariance
TESTS += tests/unit/test_invariance
tests_unit_test_invariance_SOURCES = tests/unit/test_invariance.c
tests_unit_test_invariance_LDADD = $(TEST_LDADD)
tests_unit_test_attn_flash_SOURCES = tests/unit/test_attn_flash.c
tests_unit_test_attn_flash_LDADD = $(TEST_LDADD)
tests_unit_bench_cpu_SOURCES = tests/unit/bench_cpu.c
tests_unit_bench_cpu_LDADD = $(TEST_LDADD)
tests_unit_bench_attn_SOURCES = tests/unit/bench_attn.c
tests_unit_bench_attn_LDADD = $(TEST_LDADD)
# The float-weight GEMM (prefill) is AVX-512 code: built in the AVX-512
# quant library (quant.mk), with its flags.
libhy_quant_avx512_a_SOURCES += src/backend/cpu/gemm_avx512.c src/backend/cpu/gemm_avx512.h \
	src/backend/cpu/x86_transpose.h
# test_gemm: float-weight matmul at every ISA level and the GEMM itself vs a
# double reference; bench_gemm (built, not run): its GFLOP/s at the
# qwen35-bench shapes: tests/unit/bench_gemm [f16|f32|bf16] [threads] [reps] [n_tok].
check_PROGRAMS += tests/unit/test_gemm tests/unit/bench_gemm
TESTS += tests/unit/test_gemm
tests_unit_test_gemm_SOURCES = tests/unit/test_gemm.c
tests_unit_test_gemm_LDADD = $(TEST_LDADD)
tests_unit_bench_gemm_SOURCES = tests/unit/bench_gemm.c
tests_unit_bench_gemm_LDADD = $(TEST_LDADD)
# The thread pool under ThreadSanitizer: its own objects with
# -fsanitize=thread, so only in builds without ASan (the two do not mix).
if !SANITIZERS
check_PROGRAMS += tests/unit/test_pool_tsan
TESTS += tests/unit/test_pool_tsan
tests_unit_test_pool_tsan_SOURCES = tests/unit/test_pool_tsan.c \
	src/backend/cpu/threadpool.c src/common/hy.c
tests_unit_test_pool_tsan_CFLAGS = $(AM_CFLAGS) -fsanitize=thread -O1 -g
tests_unit_test_pool_tsan_LDFLAGS = -fsanitize=thread
tests_unit_test_pool_tsan_LDADD = -lpthread
endif
EXTRA_DIST += tests/unit/test_pool_tsan.c
