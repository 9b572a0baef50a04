# tests/unit/fault.mk - the allocation fault-injection tests (fault.h): each
# links fault.c and wraps the allocator (and pread, for the loader's read
# errors) at link time, so libhy.a is the library as shipped.  Built and run where configure has
# --enable-fault-injection, which --enable-sanitizers implies: the sanitizer
# build (make check-unit) runs them under ASan + LSan.
HY_FAULT_WRAP = -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free \
	-Wl,--wrap=strdup,--wrap=strndup,--wrap=aligned_alloc,--wrap=posix_memalign \
	-Wl,--wrap=mmap,--wrap=munmap,--wrap=pread
EXTRA_DIST += tests/unit/fault.c tests/unit/fault.h tests/unit/golden.h
if FAULT_INJECTION
check_PROGRAMS += tests/unit/test_fault_model tests/unit/test_fault_api
TESTS += tests/unit/test_fault_model tests/unit/test_fault_api
tests_unit_test_fault_model_SOURCES = tests/unit/test_fault_model.c tests/unit/fault.c
tests_unit_test_fault_model_LDFLAGS = $(HY_FAULT_WRAP)
tests_unit_test_fault_model_LDADD = $(TEST_LDADD)
tests_unit_test_fault_api_SOURCES = tests/unit/test_fault_api.c tests/unit/fault.c
tests_unit_test_fault_api_LDFLAGS = $(HY_FAULT_WRAP)
tests_unit_test_fault_api_LDADD = $(TEST_LDADD)
endif
