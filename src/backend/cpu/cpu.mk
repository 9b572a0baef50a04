# src/backend/cpu: the CPU backend - thread pool, matmul (quantized dot
# products, the float GEMM), paged and flash attention, recurrent-state
# slots, short conv and small ops, MoE, and the Gated DeltaNet and Mamba-2
# SSD scans - and its tests.
libhy_a_SOURCES += src/backend/cpu/cpu.c src/backend/cpu/cpu_impl.h \
	src/backend/cpu/threadpool.c src/backend/cpu/threadpool.h \
	src/backend/cpu/matmul.c src/backend/cpu/attention.c \
	src/backend/cpu/attn_flash.h src/backend/cpu/attn_flash_impl.h src/backend/cpu/attn_generic.c \
	src/backend/cpu/recurrent.c src/backend/cpu/moe.c \
	src/backend/cpu/gdn.c src/backend/cpu/gdn.h src/backend/cpu/ssd.c src/backend/cpu/ssd.h
# KV pages and state slots as host bytes for the warm and cold tiers
libhy_a_SOURCES += src/backend/cpu/tiercopy.c
# block-sparse attention's block keys, block choice and attention over the
# chosen blocks (issue 14; not routed from the engine yet)
libhy_a_SOURCES += src/backend/cpu/sparse_attn.c src/backend/cpu/sparse_attn.h
check_PROGRAMS += tests/unit/test_sparse_attn
TESTS += tests/unit/test_sparse_attn
tests_unit_test_sparse_attn_SOURCES = tests/unit/test_sparse_attn.c
tests_unit_test_sparse_attn_LDADD = $(TEST_LDADD)

# The SIMD kernels.  Each ISA variant is compiled in its own convenience
# library with its own target flags (so baseline objects contain no AVX),
# and only where configure found the compiler able to (HY_AVX2, HY_AVX512;
# hy_cpu_isa() never picks a variant this build lacks); the objects are
# folded into libhy.a.  The quant kernels use -ffp-contract=off:
# dequantization must be the same float arithmetic in every variant (the
# tests compare them exactly), and explicit FMAs are written where wanted.
# gdn_kern.h and ssd_kern.h are compiled once per variant at -O3, so the
# vectoriser also handles the loops whose trip count is only known at run
# time (head and state sizes), and with -ffp-contract=off: their block form
# must give a product's element the same bits in a vector tile and in a
# scalar tail, whatever the number of rows a step brings (docs/determinism.md).  The flash-attention kernels select their ISA
# with a pragma, in libhy.a itself.
noinst_LIBRARIES += libhy_quant.a libhy_gdn.a libhy_ssd.a
libhy_quant_a_SOURCES = src/backend/cpu/quant.c src/backend/cpu/quant.h \
	src/backend/cpu/quant_impl.h src/backend/cpu/quant_ref.h \
	src/backend/cpu/qmm.c src/backend/cpu/qmm.h
libhy_quant_a_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
libhy_gdn_a_SOURCES = src/backend/cpu/gdn_kern_generic.c src/backend/cpu/gdn_kern.h
libhy_gdn_a_CFLAGS = $(AM_CFLAGS) -O3 -ffp-contract=off
libhy_ssd_a_SOURCES = src/backend/cpu/ssd_kern_generic.c src/backend/cpu/ssd_kern.h
libhy_ssd_a_CFLAGS = $(AM_CFLAGS) -O3 -ffp-contract=off
# the activations (act.c) hold their SIMD levels to the scalar level's
# bits, which a contracted multiply-add in one of them would break
noinst_LIBRARIES += libhy_act.a
libhy_act_a_SOURCES = src/backend/cpu/act.c src/backend/cpu/act.h src/backend/cpu/vexp.h
libhy_act_a_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
HY_SIMD_OBJECTS = $(libhy_quant_a_OBJECTS) $(libhy_gdn_a_OBJECTS) $(libhy_ssd_a_OBJECTS) \
	$(libhy_act_a_OBJECTS)
if HY_AVX2
libhy_a_SOURCES += src/backend/cpu/attn_avx2.c
noinst_LIBRARIES += libhy_quant_avx2.a libhy_gdn_avx2.a libhy_ssd_avx2.a
libhy_quant_avx2_a_SOURCES = src/backend/cpu/quant_avx2.c src/backend/cpu/quant_x86.h \
	src/backend/cpu/quant_scales_x86.h src/backend/cpu/qmm_avx2.c
libhy_quant_avx2_a_CFLAGS = $(AM_CFLAGS) -ffp-contract=off -mavx2 -mfma -mf16c
libhy_gdn_avx2_a_SOURCES = src/backend/cpu/gdn_kern_avx2.c
libhy_gdn_avx2_a_CFLAGS = $(AM_CFLAGS) -O3 -ffp-contract=off -mavx2 -mfma
libhy_ssd_avx2_a_SOURCES = src/backend/cpu/ssd_kern_avx2.c
libhy_ssd_avx2_a_CFLAGS = $(AM_CFLAGS) -O3 -ffp-contract=off -mavx2 -mfma
HY_SIMD_OBJECTS += $(libhy_quant_avx2_a_OBJECTS) $(libhy_gdn_avx2_a_OBJECTS) \
	$(libhy_ssd_avx2_a_OBJECTS)
endif
if HY_AVX512
libhy_a_SOURCES += src/backend/cpu/attn_avx512.c
noinst_LIBRARIES += libhy_quant_avx512.a libhy_gdn_avx512.a libhy_ssd_avx512.a
# the float-weight GEMM (prefill) is AVX-512 code: built with the quant flags
libhy_quant_avx512_a_SOURCES = src/backend/cpu/quant_avx512.c src/backend/cpu/qmm_avx512.c \
	src/backend/cpu/gemm_avx512.c src/backend/cpu/gemm_avx512.h src/backend/cpu/x86_transpose.h
libhy_quant_avx512_a_CFLAGS = $(AM_CFLAGS) -ffp-contract=off -mavx2 -mfma -mf16c \
	-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
libhy_gdn_avx512_a_SOURCES = src/backend/cpu/gdn_kern_avx512.c
libhy_gdn_avx512_a_CFLAGS = $(AM_CFLAGS) -O3 -ffp-contract=off -mavx2 -mfma -mavx512f -mavx512vl -mavx512dq \
	-mavx512bw -mprefer-vector-width=512
libhy_ssd_avx512_a_SOURCES = src/backend/cpu/ssd_kern_avx512.c
libhy_ssd_avx512_a_CFLAGS = $(AM_CFLAGS) -O3 -ffp-contract=off -mavx2 -mfma -mavx512f -mavx512vl -mavx512dq \
	-mavx512bw -mprefer-vector-width=512
HY_SIMD_OBJECTS += $(libhy_quant_avx512_a_OBJECTS) $(libhy_gdn_avx512_a_OBJECTS) \
	$(libhy_ssd_avx512_a_OBJECTS)
endif
libhy_a_LIBADD += $(HY_SIMD_OBJECTS)
# automake cannot see through the variable above: the objects are named as
# prerequisites of libhy.a (EXTRA_libhy_a_DEPENDENCIES starts in Makefile.am)
EXTRA_libhy_a_DEPENDENCIES += $(HY_SIMD_OBJECTS)

# Unit tests, and benchmarks that `make check` builds but does not run:
# tests/unit/bench_cpu [type] [threads] for matmul GFLOP/s and GB/s,
# tests/unit/bench_attn [reps] [isa] [keys...] for long-context attention,
# tests/unit/bench_quant for the dot products, tests/unit/bench_gemm
# [f16|f32|bf16] [threads] [reps] [n_tok] for the GEMM at the qwen35-bench
# shapes, bench_gdn and bench_ssd [threads] [tokens] for chunked vs
# recurrent prefill, tests/unit/bench_mm [seconds] [isa] [rows] [k] for the
# matmul tiles' GFLOP/s per batch size against the measured peak,
# tests/unit/bench_select [blocks] [head_dim] [topk] [reps] for the choice of
# block-sparse attention.
# test_invariance: a token's row of matmul and attention is the same bits
# alone, in any batch, at any offset, prefill or decode, on 1..3 threads.
check_PROGRAMS += tests/unit/test_cpu_backend tests/unit/test_attn_flash tests/unit/test_gemm \
	tests/unit/test_quant tests/unit/test_cpu_recurrent tests/unit/test_gdn tests/unit/test_ssd \
	tests/unit/test_invariance \
	tests/unit/bench_cpu tests/unit/bench_attn tests/unit/bench_quant tests/unit/bench_gemm \
	tests/unit/bench_gdn tests/unit/bench_ssd tests/unit/bench_mm tests/unit/bench_select
TESTS += tests/unit/test_cpu_backend tests/unit/test_attn_flash tests/unit/test_gemm \
	tests/unit/test_quant tests/unit/test_cpu_recurrent tests/unit/test_gdn tests/unit/test_ssd \
	tests/unit/test_invariance
tests_unit_test_cpu_backend_SOURCES = tests/unit/test_cpu_backend.c
tests_unit_test_cpu_backend_LDADD = $(TEST_LDADD)
tests_unit_test_attn_flash_SOURCES = tests/unit/test_attn_flash.c
tests_unit_test_attn_flash_LDADD = $(TEST_LDADD)
tests_unit_test_gemm_SOURCES = tests/unit/test_gemm.c
tests_unit_test_gemm_LDADD = $(TEST_LDADD)
tests_unit_test_quant_SOURCES = tests/unit/test_quant.c
tests_unit_test_quant_LDADD = $(TEST_LDADD)
tests_unit_test_cpu_recurrent_SOURCES = tests/unit/test_cpu_recurrent.c
tests_unit_test_cpu_recurrent_LDADD = $(TEST_LDADD)
tests_unit_test_gdn_SOURCES = tests/unit/test_gdn.c
tests_unit_test_gdn_LDADD = $(TEST_LDADD)
tests_unit_test_ssd_SOURCES = tests/unit/test_ssd.c
tests_unit_test_ssd_LDADD = $(TEST_LDADD)
tests_unit_test_invariance_SOURCES = tests/unit/test_invariance.c
tests_unit_test_invariance_LDADD = $(TEST_LDADD)
tests_unit_bench_cpu_SOURCES = tests/unit/bench_cpu.c
tests_unit_bench_cpu_LDADD = $(TEST_LDADD)
tests_unit_bench_attn_SOURCES = tests/unit/bench_attn.c
tests_unit_bench_attn_LDADD = $(TEST_LDADD)
tests_unit_bench_select_SOURCES = tests/unit/bench_select.c
tests_unit_bench_select_LDADD = $(TEST_LDADD)
tests_unit_bench_quant_SOURCES = tests/unit/bench_quant.c
tests_unit_bench_quant_LDADD = $(TEST_LDADD)
tests_unit_bench_gemm_SOURCES = tests/unit/bench_gemm.c
tests_unit_bench_gemm_LDADD = $(TEST_LDADD)
tests_unit_bench_mm_SOURCES = tests/unit/bench_mm.c
tests_unit_bench_mm_LDADD = $(TEST_LDADD)
tests_unit_bench_gdn_SOURCES = tests/unit/bench_gdn.c
tests_unit_bench_gdn_LDADD = $(TEST_LDADD)
tests_unit_bench_ssd_SOURCES = tests/unit/bench_ssd.c
tests_unit_bench_ssd_LDADD = $(TEST_LDADD)
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

# the quantized weight types against llama.cpp's own quantized files and
# dequantization (tests/data/quant, scripts/make-quant-vectors)
check_PROGRAMS += tests/unit/test_quant_vectors
TESTS += tests/unit/test_quant_vectors
tests_unit_test_quant_vectors_SOURCES = tests/unit/test_quant_vectors.c
tests_unit_test_quant_vectors_LDADD = $(TEST_LDADD)
EXTRA_DIST += scripts/make-quant-vectors tests/data/quant

# Lightning attention on the CPU: the op (lightning.c) and its kernel.  The
# kernel source lightning_kern.h is compiled twice (generic, and AVX2 through
# a target pragma where the compiler builds AVX2) in one convenience library
# built with -ffp-contract=off: the two builds must do the same separately
# rounded products and sums (the tests compare them bit for bit), so no
# multiply-add may be fused.
libhy_a_SOURCES += src/backend/cpu/lightning.c src/backend/cpu/lightning.h
noinst_LIBRARIES += libhy_lightning.a
libhy_lightning_a_SOURCES = src/backend/cpu/lightning_kern_generic.c \
	src/backend/cpu/lightning_kern_avx2.c src/backend/cpu/lightning_kern.h
libhy_lightning_a_CFLAGS = $(AM_CFLAGS) -O3 -ffp-contract=off
libhy_a_LIBADD += $(libhy_lightning_a_OBJECTS)
EXTRA_libhy_a_DEPENDENCIES += $(libhy_lightning_a_OBJECTS)
# the op against a double-precision reference, blocked vs recurrent, cuts,
# ISA builds, bad arguments; bench_lightning (built, not run): prefill and
# decode CPU time per token at MiniMax's shape for several block lengths and
# the plain recurrence: tests/unit/bench_lightning [tokens] [heads] [d] [isa]
check_PROGRAMS += tests/unit/test_lightning tests/unit/bench_lightning
TESTS += tests/unit/test_lightning
tests_unit_test_lightning_SOURCES = tests/unit/test_lightning.c
tests_unit_test_lightning_LDADD = $(TEST_LDADD)
tests_unit_bench_lightning_SOURCES = tests/unit/bench_lightning.c
tests_unit_bench_lightning_LDADD = $(TEST_LDADD)
