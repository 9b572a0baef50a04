# Lightning attention (the LIGHTNING layer kind; minimax-01): the op's
# shared checks (backend/lightning.c), the CPU op (backend/cpu/lightning.c)
# and its kernel, and the tests.  The kernel source lightning_kern.h is
# compiled twice (generic, and AVX2 through a target pragma) in one
# convenience library built with -ffp-contract=off: the two builds must do
# the same separately rounded products and sums (the tests compare them
# bit for bit), so no multiply-add may be fused.  The architecture
# (arch/minimax.c) is built by arch/families.c; the CUDA kernels live in
# kernels/hy_rec.cu with the other recurrent kernels.
libhy_a_SOURCES += src/backend/lightning.c src/backend/lightning.h \
	src/backend/cpu/lightning.c src/backend/cpu/lightning.h
noinst_LIBRARIES += libhy_lightning.a
libhy_lightning_a_SOURCES = src/backend/cpu/lightning_kern_generic.c \
	src/backend/cpu/lightning_kern_avx2.c src/backend/cpu/lightning_kern.h
libhy_lightning_a_CFLAGS = $(AM_CFLAGS) -O3 -ffp-contract=off
libhy_a_LIBADD += $(libhy_lightning_a_OBJECTS)
EXTRA_libhy_a_DEPENDENCIES += $(libhy_lightning_a_OBJECTS)

# the op against a double-precision reference, blocked vs recurrent, cuts,
# ISA builds, bad arguments; the minimax-01 loader and its bad inputs
check_PROGRAMS += tests/unit/test_lightning tests/unit/test_minimax
TESTS += tests/unit/test_lightning tests/unit/test_minimax
tests_unit_test_lightning_SOURCES = tests/unit/test_lightning.c
tests_unit_test_lightning_LDADD = $(TEST_LDADD)
tests_unit_test_minimax_SOURCES = tests/unit/test_minimax.c tests/unit/gguf_patch.h
tests_unit_test_minimax_LDADD = $(TEST_LDADD)

# bench_lightning (built, not run): prefill and decode CPU time per token
# at MiniMax's shape for several block lengths and the plain recurrence:
# tests/unit/bench_lightning [tokens] [heads] [d] [isa]
check_PROGRAMS += tests/unit/bench_lightning
tests_unit_bench_lightning_SOURCES = tests/unit/bench_lightning.c
tests_unit_bench_lightning_LDADD = $(TEST_LDADD)

# the CUDA kernel's algorithm (kernels/hy_lightning.h) run on the host
# against the CPU op, bit for bit, in every build
check_PROGRAMS += tests/cuda/test_lightning_chunk
TESTS += tests/cuda/test_lightning_chunk
HY_CUDA_TESTS += tests/cuda/test_lightning_chunk
tests_cuda_test_lightning_chunk_SOURCES = tests/cuda/test_lightning_chunk.c \
	kernels/hy_lightning.h
tests_cuda_test_lightning_chunk_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/kernels
tests_cuda_test_lightning_chunk_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
tests_cuda_test_lightning_chunk_LDADD = $(TEST_LDADD)
if HAVE_CUDA
kernels/hy_rec.$(OBJEXT): $(top_srcdir)/kernels/hy_lightning.h
endif
