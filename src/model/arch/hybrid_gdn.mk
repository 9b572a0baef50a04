# Gated DeltaNet hybrid family (qwen3next, qwen35, qwen35moe): the CPU gdn
# op (the architecture, arch/qwen3next.c, is built by arch/families.c).  The kernel source gdn_kern.h is compiled
# three times, each in its own convenience library with its own target
# flags (baseline, AVX2+FMA, AVX-512), like the quant kernels; gdn.c picks
# one at run time.  -O3 so the vectoriser also handles the loops whose trip
# count is only known at run time (head sizes).
libhy_a_SOURCES += src/backend/cpu/gdn.c src/backend/cpu/gdn.h
noinst_LIBRARIES += libhy_gdn.a libhy_gdn_avx2.a libhy_gdn_avx512.a
libhy_gdn_a_SOURCES = src/backend/cpu/gdn_kern_generic.c src/backend/cpu/gdn_kern.h
libhy_gdn_a_CFLAGS = $(AM_CFLAGS) -O3
libhy_gdn_avx2_a_SOURCES = src/backend/cpu/gdn_kern_avx2.c
libhy_gdn_avx2_a_CFLAGS = $(AM_CFLAGS) -O3 -mavx2 -mfma
libhy_gdn_avx512_a_SOURCES = src/backend/cpu/gdn_kern_avx512.c
libhy_gdn_avx512_a_CFLAGS = $(AM_CFLAGS) -O3 -mavx2 -mfma -mavx512f -mavx512vl -mavx512dq \
	-mavx512bw -mprefer-vector-width=512
HY_GDN_OBJECTS = $(libhy_gdn_a_OBJECTS) $(libhy_gdn_avx2_a_OBJECTS) $(libhy_gdn_avx512_a_OBJECTS)
libhy_a_LIBADD += $(HY_GDN_OBJECTS)
EXTRA_libhy_a_DEPENDENCIES += $(HY_GDN_OBJECTS)


check_PROGRAMS += tests/unit/test_gdn
TESTS += tests/unit/test_gdn
tests_unit_test_gdn_SOURCES = tests/unit/test_gdn.c
tests_unit_test_gdn_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/unit/test_qwen3next
TESTS += tests/unit/test_qwen3next
tests_unit_test_qwen3next_SOURCES = tests/unit/test_qwen3next.c tests/unit/gguf_patch.h
tests_unit_test_qwen3next_LDADD = $(TEST_LDADD)
# bench_gdn: chunked vs recurrent prefill speed (run by hand, not a test)
check_PROGRAMS += tests/unit/bench_gdn
tests_unit_bench_gdn_SOURCES = tests/unit/bench_gdn.c
tests_unit_bench_gdn_LDADD = $(TEST_LDADD)
