# src/server/shm + src/kv/pagetable + src/server/ring: the coordinator/worker
# shared-memory segment, page table + prefix cache, request slots and token rings.
libhy_a_SOURCES += src/server/shm.c src/server/shm.h src/kv/pagetable.c src/kv/pagetable.h \
	src/server/ring.c src/server/ring.h
check_PROGRAMS += tests/unit/test_shm tests/unit/test_pagetable tests/unit/test_ring
TESTS += tests/unit/test_shm tests/unit/test_pagetable tests/unit/test_ring
tests_unit_test_shm_SOURCES = tests/unit/test_shm.c
tests_unit_test_shm_LDADD = $(TEST_LDADD)
tests_unit_test_pagetable_SOURCES = tests/unit/test_pagetable.c
tests_unit_test_pagetable_LDADD = $(TEST_LDADD)
tests_unit_test_ring_SOURCES = tests/unit/test_ring.c
tests_unit_test_ring_LDADD = $(TEST_LDADD)
