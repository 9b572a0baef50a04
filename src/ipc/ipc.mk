# src/ipc: what the engine and the workers share across processes - the
# shared-memory segment, its page table + prefix cache, request slots and
# token rings - and the request parameters they carry.
libhy_a_SOURCES += src/ipc/request.c src/ipc/request.h src/ipc/source.h src/ipc/shm.c src/ipc/shm.h \
	src/ipc/pagetable.c src/ipc/pagetable.h src/ipc/ring.c src/ipc/ring.h
check_PROGRAMS += tests/unit/test_shm tests/unit/test_pagetable tests/unit/test_ring
TESTS += tests/unit/test_shm tests/unit/test_pagetable tests/unit/test_ring
tests_unit_test_shm_SOURCES = tests/unit/test_shm.c
tests_unit_test_shm_LDADD = $(TEST_LDADD)
tests_unit_test_pagetable_SOURCES = tests/unit/test_pagetable.c
tests_unit_test_pagetable_LDADD = $(TEST_LDADD)
tests_unit_test_ring_SOURCES = tests/unit/test_ring.c
tests_unit_test_ring_LDADD = $(TEST_LDADD)
