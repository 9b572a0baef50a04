# src/backend/cpu: quant kernels.  Each ISA variant is compiled in its own
# convenience library with its own flags (so baseline objects contain no
# AVX) and the objects are folded into libhy.a.  All three use
# -ffp-contract=off: dequantization must be the same float arithmetic in
# every variant (the tests compare them exactly), and explicit FMAs are
# written where wanted.
noinst_LIBRARIES += libhy_quant.a libhy_quant_avx2.a libhy_quant_avx512.a
libhy_quant_a_SOURCES = src/backend/cpu/quant.c src/backend/cpu/quant.h \
	src/backend/cpu/quant_impl.h src/backend/cpu/quant_ref.h \
	src/backend/cpu/qmm.c src/backend/cpu/qmm.h
libhy_quant_a_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
libhy_quant_avx2_a_SOURCES = src/backend/cpu/quant_avx2.c src/backend/cpu/quant_x86.h \
	src/backend/cpu/qmm_avx2.c
libhy_quant_avx2_a_CFLAGS = $(AM_CFLAGS) -ffp-contract=off -mavx2 -mfma -mf16c
libhy_quant_avx512_a_SOURCES = src/backend/cpu/quant_avx512.c
libhy_quant_avx512_a_CFLAGS = $(AM_CFLAGS) -ffp-contract=off -mavx2 -mfma -mf16c \
	-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
HY_QUANT_OBJECTS = $(libhy_quant_a_OBJECTS) $(libhy_quant_avx2_a_OBJECTS) \
	$(libhy_quant_avx512_a_OBJECTS)
libhy_a_LIBADD += $(HY_QUANT_OBJECTS)
# automake cannot see through the variable above, so name the objects as
# prerequisites of libhy.a explicitly.  (If another fragment needs this
# variable too, move a plain `EXTRA_libhy_a_DEPENDENCIES =` to Makefile.am
# and use += in both.)
EXTRA_libhy_a_DEPENDENCIES = $(HY_QUANT_OBJECTS)

check_PROGRAMS += tests/unit/test_quant tests/unit/bench_quant tests/unit/bench_mm
TESTS += tests/unit/test_quant
tests_unit_test_quant_SOURCES = tests/unit/test_quant.c
tests_unit_test_quant_LDADD = $(TEST_LDADD)
tests_unit_bench_quant_SOURCES = tests/unit/bench_quant.c
tests_unit_bench_quant_LDADD = $(TEST_LDADD)
# bench_mm (built, not run): GFLOP/s of the tiles per batch size against the
# measured peak: tests/unit/bench_mm [seconds] [isa] [rows] [k].
tests_unit_bench_mm_SOURCES = tests/unit/bench_mm.c
tests_unit_bench_mm_LDADD = $(TEST_LDADD)
