# cuda.mk - the CUDA backend (configure --with-cuda) and backend selection.
# select.c is in every build; it calls hy_backend_cuda_new, which is the
# real backend (cuda.c, cuda_ops.c, the kernels/ .cu files) in CUDA builds and a stub
# that says "built without CUDA" otherwise.  .cu files go through nvcc by
# the suffix rule below (sm_90a + sm_80 + compute_80 PTX, see configure.ac).

libhy_a_SOURCES += src/backend/select.c src/backend/select.h src/backend/cuda/cuda.h
EXTRA_DIST += scripts/device-check

# selection by name, in every build (the test learns which build it is in)
check_PROGRAMS += tests/cuda/test_backend_select
TESTS += tests/cuda/test_backend_select
tests_cuda_test_backend_select_SOURCES = tests/cuda/test_backend_select.c
tests_cuda_test_backend_select_LDADD = $(TEST_LDADD)

if HAVE_CUDA
AM_CPPFLAGS += -I$(top_srcdir)/kernels $(CUDA_CFLAGS)
libhy_a_SOURCES += src/backend/cuda/cuda.c src/backend/cuda/cuda_ops.c \
	src/backend/cuda/cuda_impl.h kernels/hy_kernels.h \
	kernels/hy_quant.cu kernels/hy_ops.cu kernels/hy_attn.cu kernels/hy_rec.cu

SUFFIXES = .cu
NVCC_FLAGS = -O3 -std=c++17 --expt-relaxed-constexpr -Xcompiler -fPIC $(CUDA_GENCODE) $(NVCCFLAGS)
.cu.o:
	@$(MKDIR_P) $(@D)
	$(AM_V_GEN)$(NVCC) $(NVCC_FLAGS) -I$(top_srcdir)/kernels -I$(top_srcdir)/src -c -o $@ $<
# nvcc objects get no automatic dependency tracking: name their one header
kernels/hy_quant.$(OBJEXT) kernels/hy_ops.$(OBJEXT) kernels/hy_attn.$(OBJEXT) \
	kernels/hy_rec.$(OBJEXT): $(top_srcdir)/kernels/hy_kernels.h

# The CUDA build links and, on a machine without a GPU, reports a clear
# error instead of crashing; with a GPU it checks every op against the CPU.
check_PROGRAMS += tests/cuda/test_cuda_ops
TESTS += tests/cuda/test_cuda_ops
tests_cuda_test_cuda_ops_SOURCES = tests/cuda/test_cuda_ops.c
tests_cuda_test_cuda_ops_LDADD = $(TEST_LDADD)
tests_cuda_test_backend_select_CPPFLAGS = $(AM_CPPFLAGS) -DHY_TEST_CUDA_BUILT=1
else
libhy_a_SOURCES += src/backend/cuda/stub.c
tests_cuda_test_backend_select_CPPFLAGS = $(AM_CPPFLAGS) -DHY_TEST_CUDA_BUILT=0
endif
EXTRA_DIST += tests/cuda/test_cuda_ops.c

# What CI runs in its CUDA build (scripts/run-tests, when nvcc is present):
# only the CUDA tests, built alone, since the other builds run the rest.
HY_CUDA_TESTS = tests/cuda/test_backend_select
if HAVE_CUDA
HY_CUDA_TESTS += tests/cuda/test_cuda_ops
endif
check-cuda:
	$(MAKE) $(AM_MAKEFLAGS) check TESTS='$(HY_CUDA_TESTS)' check_PROGRAMS='$(HY_CUDA_TESTS)'
.PHONY: check-cuda
