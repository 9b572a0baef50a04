# cuda.mk - the CUDA backend (configure --with-cuda).  hy_backend_cuda_new
# (cuda.h), which backend/select.c calls in every build, is the real backend
# (cuda.c, cuda_ops.c, the kernels/ .cu files) in CUDA builds and a stub that
# says "built without CUDA" otherwise.  .cu files go through nvcc by the
# suffix rule below (sm_90a + sm_80 + compute_80 PTX, see configure.ac).

libhy_a_SOURCES += src/backend/cuda/cuda.h
# CUDA graph cache policy and the device sampler's host reference: plain C,
# in every build so their tests run without a GPU
libhy_a_SOURCES += src/backend/cuda/graph.c src/backend/cuda/graph.h \
	src/backend/cuda/sample.h src/backend/cuda/sample_ref.c
check_PROGRAMS += tests/cuda/test_cuda_graph_cache
TESTS += tests/cuda/test_cuda_graph_cache
tests_cuda_test_cuda_graph_cache_SOURCES = tests/cuda/test_cuda_graph_cache.c
tests_cuda_test_cuda_graph_cache_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/cuda/test_cuda_sample
TESTS += tests/cuda/test_cuda_sample
tests_cuda_test_cuda_sample_SOURCES = tests/cuda/test_cuda_sample.c
tests_cuda_test_cuda_sample_LDADD = $(TEST_LDADD)
EXTRA_DIST += scripts/device-check scripts/device-prebuild scripts/device-model

# selection by name, in every build (the test learns which build it is in)
check_PROGRAMS += tests/cuda/test_backend_select
TESTS += tests/cuda/test_backend_select
tests_cuda_test_backend_select_SOURCES = tests/cuda/test_backend_select.c
tests_cuda_test_backend_select_LDADD = $(TEST_LDADD)

# the chunked GDN / SSD kernels' code (kernels/hy_rec_chunk.h) run on the
# host against the CPU backend, in every build
check_PROGRAMS += tests/cuda/test_rec_chunk
TESTS += tests/cuda/test_rec_chunk
tests_cuda_test_rec_chunk_SOURCES = tests/cuda/test_rec_chunk.c tests/cuda/rec_cases.h \
	kernels/hy_rec_chunk.h
tests_cuda_test_rec_chunk_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/kernels
tests_cuda_test_rec_chunk_LDADD = $(TEST_LDADD)

# the weight kernels' block decoders (kernels/hy_dq_chunk.h) run on the
# host against the CPU reference dequantizers, in every build
check_PROGRAMS += tests/cuda/test_dq_chunk
TESTS += tests/cuda/test_dq_chunk
tests_cuda_test_dq_chunk_SOURCES = tests/cuda/test_dq_chunk.c kernels/hy_dq_chunk.h \
	tests/unit/quant_fill.h
tests_cuda_test_dq_chunk_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/kernels
tests_cuda_test_dq_chunk_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
tests_cuda_test_dq_chunk_LDADD = $(TEST_LDADD)

# the MoE routing kernel's code (kernels/hy_moe_route.h) run on the host
# against the CPU's hy_moe_route_one, in every build
check_PROGRAMS += tests/cuda/test_moe_route
TESTS += tests/cuda/test_moe_route
tests_cuda_test_moe_route_SOURCES = tests/cuda/test_moe_route.c kernels/hy_moe_route.h
tests_cuda_test_moe_route_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/kernels
tests_cuda_test_moe_route_LDADD = $(TEST_LDADD)

if HAVE_CUDA
AM_CPPFLAGS += -I$(top_srcdir)/kernels $(CUDA_CFLAGS)
libhy_a_SOURCES += src/backend/cuda/cuda.c src/backend/cuda/cuda_ops.c \
	src/backend/cuda/cuda_impl.h kernels/hy_kernels.h \
	kernels/hy_quant.cu kernels/hy_ops.cu kernels/hy_attn.cu kernels/hy_rec.cu
libhy_a_SOURCES += src/backend/cuda/attn_plan.c src/backend/cuda/attn_plan.h \
	kernels/hy_attn_flash.h kernels/hy_attn_split.h
# KV pages and state slots as host bytes for the warm and cold tiers
libhy_a_SOURCES += src/backend/cuda/tiercopy.c
kernels/hy_attn.$(OBJEXT): $(top_srcdir)/kernels/hy_attn_flash.h \
	$(top_srcdir)/kernels/hy_attn_split.h
libhy_a_SOURCES += kernels/hy_sample.h kernels/hy_sample.cu
libhy_a_SOURCES += kernels/hy_moe.cu kernels/hy_moe_route.h kernels/hy_quant_dev.h \
	kernels/hy_dq_chunk.h

SUFFIXES = .cu
NVCC_FLAGS = -O3 -std=c++17 --expt-relaxed-constexpr -Xcompiler -fPIC $(CUDA_GENCODE) $(NVCCFLAGS)
.cu.o:
	@$(MKDIR_P) $(@D)
	$(AM_V_GEN)$(NVCC) $(NVCC_FLAGS) -I$(top_srcdir)/kernels -I$(top_srcdir)/src -c -o $@ $<
# nvcc objects get no automatic dependency tracking: name their one header
kernels/hy_quant.$(OBJEXT) kernels/hy_ops.$(OBJEXT) kernels/hy_attn.$(OBJEXT) \
	kernels/hy_rec.$(OBJEXT): $(top_srcdir)/kernels/hy_kernels.h
kernels/hy_sample.$(OBJEXT): $(top_srcdir)/kernels/hy_sample.h $(top_srcdir)/src/backend/cuda/sample.h
kernels/hy_rec.$(OBJEXT): $(top_srcdir)/kernels/hy_rec_chunk.h
kernels/hy_quant.$(OBJEXT) kernels/hy_moe.$(OBJEXT): $(top_srcdir)/kernels/hy_quant_dev.h \
	$(top_srcdir)/kernels/hy_dq_chunk.h
kernels/hy_quant.$(OBJEXT) kernels/hy_ops.$(OBJEXT) kernels/hy_attn.$(OBJEXT) \
	kernels/hy_rec.$(OBJEXT) kernels/hy_moe.$(OBJEXT): $(top_srcdir)/kernels/hy_moe_route.h
kernels/hy_moe.$(OBJEXT): $(top_srcdir)/kernels/hy_kernels.h

# The CUDA build links and, on a machine without a GPU, reports a clear
# error instead of crashing; with a GPU it checks every op against the CPU.
check_PROGRAMS += tests/cuda/test_cuda_ops
TESTS += tests/cuda/test_cuda_ops
tests_cuda_test_cuda_ops_SOURCES = tests/cuda/test_cuda_ops.c
tests_cuda_test_cuda_ops_LDADD = $(TEST_LDADD)
# paged attention (flash prefill + split decode) against the CPU; the plan without a GPU
check_PROGRAMS += tests/cuda/test_cuda_attn
TESTS += tests/cuda/test_cuda_attn
tests_cuda_test_cuda_attn_SOURCES = tests/cuda/test_cuda_attn.c
tests_cuda_test_cuda_attn_LDADD = $(TEST_LDADD)
# GDN / SSD chunked prefill and recurrent decode against the CPU
check_PROGRAMS += tests/cuda/test_cuda_rec
TESTS += tests/cuda/test_cuda_rec
tests_cuda_test_cuda_rec_SOURCES = tests/cuda/test_cuda_rec.c tests/cuda/rec_cases.h
tests_cuda_test_cuda_rec_LDADD = $(TEST_LDADD)
# decode steps as CUDA graphs: graphs vs eager vs CPU on ragged schedules
check_PROGRAMS += tests/cuda/test_cuda_graph
TESTS += tests/cuda/test_cuda_graph
tests_cuda_test_cuda_graph_SOURCES = tests/cuda/test_cuda_graph.c
tests_cuda_test_cuda_graph_LDADD = $(TEST_LDADD)
# MoE on the device (routing, indexed mat-vec, grouped prefill) against the CPU
check_PROGRAMS += tests/cuda/test_cuda_moe
TESTS += tests/cuda/test_cuda_moe
tests_cuda_test_cuda_moe_SOURCES = tests/cuda/test_cuda_moe.c
tests_cuda_test_cuda_moe_LDADD = $(TEST_LDADD)
# the tier copies (pages and state slots as host bytes, device memory,
# pinned host memory) against the CPU's layout
check_PROGRAMS += tests/cuda/test_cuda_tiercopy
TESTS += tests/cuda/test_cuda_tiercopy
tests_cuda_test_cuda_tiercopy_SOURCES = tests/cuda/test_cuda_tiercopy.c
tests_cuda_test_cuda_tiercopy_LDADD = $(TEST_LDADD)
tests_cuda_test_backend_select_CPPFLAGS = $(AM_CPPFLAGS) -DHY_TEST_CUDA_BUILT=1
else
libhy_a_SOURCES += src/backend/cuda/stub.c
tests_cuda_test_backend_select_CPPFLAGS = $(AM_CPPFLAGS) -DHY_TEST_CUDA_BUILT=0
endif
EXTRA_DIST += tests/cuda/test_cuda_ops.c tests/cuda/cuda_test.h
EXTRA_DIST += tests/cuda/test_cuda_graph.c kernels/hy_sample.cu kernels/hy_sample.h
EXTRA_DIST += tests/cuda/test_cuda_rec.c kernels/hy_rec_chunk.h
EXTRA_DIST += tests/cuda/test_cuda_moe.c kernels/hy_moe.cu kernels/hy_quant_dev.h
EXTRA_DIST += tests/cuda/test_cuda_attn.c src/backend/cuda/attn_plan.c src/backend/cuda/attn_plan.h
EXTRA_DIST += src/backend/cuda/tiercopy.c tests/cuda/test_cuda_tiercopy.c

# What CI runs in its CUDA build (scripts/run-tests, when nvcc is present):
# only the CUDA tests, built alone, since the other builds run the rest.
HY_CUDA_TESTS = tests/cuda/test_backend_select
HY_CUDA_TESTS += tests/cuda/test_cuda_graph_cache
HY_CUDA_TESTS += tests/cuda/test_cuda_sample
HY_CUDA_TESTS += tests/cuda/test_rec_chunk
HY_CUDA_TESTS += tests/cuda/test_moe_route
HY_CUDA_TESTS += tests/cuda/test_dq_chunk
if HAVE_CUDA
HY_CUDA_TESTS += tests/cuda/test_cuda_ops
HY_CUDA_TESTS += tests/cuda/test_cuda_graph
HY_CUDA_TESTS += tests/cuda/test_cuda_rec
HY_CUDA_TESTS += tests/cuda/test_cuda_attn
HY_CUDA_TESTS += tests/cuda/test_cuda_moe
HY_CUDA_TESTS += tests/cuda/test_cuda_tiercopy
endif
check-cuda:
	$(MAKE) $(AM_MAKEFLAGS) check TESTS='$(HY_CUDA_TESTS)' check_PROGRAMS='$(HY_CUDA_TESTS)'
.PHONY: check-cuda

# The lightning kernel's algorithm (kernels/hy_lightning.h) run on the host
# against the CPU op, bit for bit, in every build.
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
