# src/ipc: what the engine and the workers share across processes - the
# shared-memory segment, its page table + prefix cache, request slots and
# token rings - and the request parameters they carry.
libhy_a_SOURCES += src/ipc/request.c src/ipc/request.h src/ipc/source.h src/ipc/shm.c src/ipc/shm.h \
	src/ipc/pagetable.c src/ipc/pagetable.h src/ipc/ring.c src/ipc/ring.h
# The warm and cold tiers under the page table (host RAM, checksummed
# files under [cache] disk_dir) and their I/O threads.
libhy_a_SOURCES += src/ipc/tier.c src/ipc/tier.h src/ipc/tier_file.c src/ipc/tier_file.h
check_PROGRAMS += tests/unit/test_tier tests/unit/bench_tier
TESTS += tests/unit/test_tier
tests_unit_test_tier_SOURCES = tests/unit/test_tier.c
tests_unit_test_tier_LDADD = $(TEST_LDADD)
# built by make check, not run: tests/unit/bench_tier [pages] [page_bytes]
# [dir] [reps] writes and reads pages with 1, 2 and 4 I/O threads
tests_unit_bench_tier_SOURCES = tests/unit/bench_tier.c tests/unit/bench.h
tests_unit_bench_tier_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/unit/test_shm tests/unit/test_pagetable tests/unit/test_ring
TESTS += tests/unit/test_shm tests/unit/test_pagetable tests/unit/test_ring
tests_unit_test_shm_SOURCES = tests/unit/test_shm.c
tests_unit_test_shm_LDADD = $(TEST_LDADD)
tests_unit_test_pagetable_SOURCES = tests/unit/test_pagetable.c
tests_unit_test_pagetable_LDADD = $(TEST_LDADD)
tests_unit_test_ring_SOURCES = tests/unit/test_ring.c
tests_unit_test_ring_LDADD = $(TEST_LDADD)
