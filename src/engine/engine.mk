# src/engine: the runner (ragged batches on a page table), the sampler, the
# scheduler's policy and the engine (batching, chunked prefill, prefix
# cache, preemption), and the in-process request source (local.c).
libhy_a_SOURCES += src/engine/runner.c src/engine/runner.h \
	src/engine/outstore.c src/engine/outstore.h \
	src/engine/sampler.c src/engine/sampler.h \
	src/engine/scheduler.c src/engine/scheduler.h \
	src/engine/engine.c src/engine/engine.h src/engine/local.c src/engine/local.h
# the out store of running sequences' pages beyond their hot window (no model)
check_PROGRAMS += tests/unit/test_outstore
TESTS += tests/unit/test_outstore
tests_unit_test_outstore_SOURCES = tests/unit/test_outstore.c
tests_unit_test_outstore_LDADD = $(TEST_LDADD)
# ... and under ThreadSanitizer (its I/O thread publishes slots the op
# reads; only in builds without ASan, which it does not mix with)
if !SANITIZERS
check_PROGRAMS += tests/unit/test_outstore_tsan
TESTS += tests/unit/test_outstore_tsan
tests_unit_test_outstore_tsan_SOURCES = tests/unit/test_outstore.c src/engine/outstore.c \
	src/backend/outview.c src/common/crc32c.c src/common/hy.c src/common/log.c \
	src/common/winstat.c src/ipc/shm.c src/ipc/pagetable.c src/ipc/ring.c src/ipc/request.c
tests_unit_test_outstore_tsan_CFLAGS = $(AM_CFLAGS) -fsanitize=thread -O1 -g
tests_unit_test_outstore_tsan_LDFLAGS = -fsanitize=thread
tests_unit_test_outstore_tsan_LDADD = -lpthread
endif
# the warm and cold tiers under the engine's page table (demote, promote, persist)
libhy_a_SOURCES += src/engine/tiering.c src/engine/tiering.h
check_PROGRAMS += tests/unit/test_tier_engine
TESTS += tests/unit/test_tier_engine
tests_unit_test_tier_engine_SOURCES = tests/unit/test_tier_engine.c
tests_unit_test_tier_engine_LDADD = $(TEST_LDADD)
# a prompt's wait for its prefix from disk always ends: a slow front block
# with a prefix longer than the warm tier, a vanished file, a thrashing warm
# tier, a read that never ends (no model: pages in memory)
check_PROGRAMS += tests/unit/test_tier_fetch
TESTS += tests/unit/test_tier_fetch
tests_unit_test_tier_fetch_SOURCES = tests/unit/test_tier_fetch.c
tests_unit_test_tier_fetch_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/unit/test_sampler tests/unit/test_engine tests/unit/test_swa \
	tests/unit/test_bitwise
TESTS += tests/unit/test_sampler tests/unit/test_engine tests/unit/test_swa tests/unit/test_bitwise
tests_unit_test_sampler_SOURCES = tests/unit/test_sampler.c
tests_unit_test_sampler_LDADD = $(TEST_LDADD)
tests_unit_test_engine_SOURCES = tests/unit/test_engine.c
tests_unit_test_engine_LDADD = $(TEST_LDADD)
# sliding-window layers' page group: equality with full KV, plan == allocation,
# prefix hits (tiny gemma3 / gemma2 / lfm2-swa)
tests_unit_test_swa_SOURCES = tests/unit/test_swa.c
tests_unit_test_swa_LDADD = $(TEST_LDADD)
EXTRA_DIST += tests/unit/local_req.h
tests_unit_test_bitwise_SOURCES = tests/unit/test_bitwise.c
tests_unit_test_bitwise_LDADD = $(TEST_LDADD)
