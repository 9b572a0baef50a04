# Mamba-2 hybrid families (granitehybrid = Granite-4.0-H / Bamba, nemotron_h):
# their shared Mamba-2 mixer block and the CPU ssd and group_rmsnorm_gated
# ops (the architectures are built by arch/families.c).  The SSD kernel
# source ssd_kern.h is compiled three times, each in its own convenience
# library with its own target flags (baseline, AVX2+FMA, AVX-512), like the
# quant and gdn kernels; ssd.c picks one at run time.  -O3 so the
# vectoriser also handles loops whose trip count is only known at run time
# (head and state sizes).
libhy_a_SOURCES += src/backend/cpu/ssd.c src/backend/cpu/ssd.h \
	src/model/arch/mamba2.c src/model/arch/mamba2.h
noinst_LIBRARIES += libhy_ssd.a libhy_ssd_avx2.a libhy_ssd_avx512.a
libhy_ssd_a_SOURCES = src/backend/cpu/ssd_kern_generic.c src/backend/cpu/ssd_kern.h
libhy_ssd_a_CFLAGS = $(AM_CFLAGS) -O3
libhy_ssd_avx2_a_SOURCES = src/backend/cpu/ssd_kern_avx2.c
libhy_ssd_avx2_a_CFLAGS = $(AM_CFLAGS) -O3 -mavx2 -mfma
libhy_ssd_avx512_a_SOURCES = src/backend/cpu/ssd_kern_avx512.c
libhy_ssd_avx512_a_CFLAGS = $(AM_CFLAGS) -O3 -mavx2 -mfma -mavx512f -mavx512vl -mavx512dq \
	-mavx512bw -mprefer-vector-width=512
HY_SSD_OBJECTS = $(libhy_ssd_a_OBJECTS) $(libhy_ssd_avx2_a_OBJECTS) $(libhy_ssd_avx512_a_OBJECTS)
libhy_a_LIBADD += $(HY_SSD_OBJECTS)
EXTRA_libhy_a_DEPENDENCIES += $(HY_SSD_OBJECTS)

check_PROGRAMS += tests/unit/test_ssd
TESTS += tests/unit/test_ssd
tests_unit_test_ssd_SOURCES = tests/unit/test_ssd.c
tests_unit_test_ssd_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/unit/test_hybrid_ssm_load
TESTS += tests/unit/test_hybrid_ssm_load
tests_unit_test_hybrid_ssm_load_SOURCES = tests/unit/test_hybrid_ssm_load.c tests/unit/gguf_patch.h
tests_unit_test_hybrid_ssm_load_LDADD = $(TEST_LDADD)
# bench_ssd is built by `make check` but not run as a test: run
# tests/unit/bench_ssd [threads] [tokens] by hand (chunked vs recurrent prefill).
check_PROGRAMS += tests/unit/bench_ssd
tests_unit_bench_ssd_SOURCES = tests/unit/bench_ssd.c
tests_unit_bench_ssd_LDADD = $(TEST_LDADD)
