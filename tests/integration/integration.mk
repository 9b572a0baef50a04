# tests/integration/integration.mk - end-to-end tests that take longer than a
# unit test (tens of seconds in the optimised build).  They are in TESTS but
# not under tests/unit/, so `make check-unit` (the sanitizer build) skips them.
check_PROGRAMS += tests/integration/test_long_context
TESTS += tests/integration/test_long_context
tests_integration_test_long_context_SOURCES = tests/integration/test_long_context.c
tests_integration_test_long_context_LDADD = $(TEST_LDADD)
# its model and goldens (tests/golden/tiny/qwen35-long.*) ship with
# tests/golden/tiny (model.mk)
# sliding-window layers to 32K (tiny gemma3 with Gemma 3's window) and the
# real Gemma 3 270M's plan and pool (models/, scripts/fetch-model gemma3-270m)
check_PROGRAMS += tests/integration/test_swa_context
TESTS += tests/integration/test_swa_context
tests_integration_test_swa_context_SOURCES = tests/integration/test_swa_context.c
tests_integration_test_swa_context_LDADD = $(TEST_LDADD)
# block-sparse attention through the runner on the tiny llama, gemma3 and
# qwen35: all blocks == dense, dense below the threshold, batching and
# chunking, each [attention] key, pages written back by the tiers
check_PROGRAMS += tests/integration/test_sparse_context
TESTS += tests/integration/test_sparse_context
tests_integration_test_sparse_context_SOURCES = tests/integration/test_sparse_context.c
tests_integration_test_sparse_context_LDADD = $(TEST_LDADD)
# its benchmark (docs/sparse.md): pass key, KL and decode cost on a real
# model; built by make check, not run (minutes per case)
check_PROGRAMS += tests/integration/bench_sparse
tests_integration_bench_sparse_SOURCES = tests/integration/bench_sparse.c
tests_integration_bench_sparse_LDADD = $(TEST_LDADD)
# and its settings refused with the flag named
TESTS += tests/integration/test_bench_sparse.sh
EXTRA_DIST += tests/integration/test_bench_sparse.sh
# scripts/device-model's copies of a model (for a lent GPU machine) and
# device-check's settings; bench-peers' refusals
TESTS += tests/integration/test_device_model.sh tests/integration/test_device_check.sh \
	tests/integration/test_bench_peers.sh
EXTRA_DIST += tests/integration/test_device_model.sh tests/integration/test_device_check.sh \
	tests/integration/test_bench_peers.sh
# TAP helpers shared by the shell integration tests
EXTRA_DIST += tests/integration/taplib.sh
# the warm and cold KV tiers end to end (restart hits with SmolLM2 and a GDN
# hybrid, bad files, a full disk, bad values); its benchmark script
TESTS += tests/integration/test_tiers.py
EXTRA_DIST += tests/integration/test_tiers.py scripts/bench-tiers
# Same seed, same text through nginx: alone, after a cache hit, among 16
# concurrent requests (the engine's bitwise checks: tests/unit/test_bitwise)
TESTS += tests/integration/test_seed.py
EXTRA_DIST += tests/integration/test_seed.py
# Several hosts behind one nginx: three instances in their own network
# namespaces (ip netns: root, as in CI) with [server] listen, the secret and
# an allow-list; hyserve-ctl pool, key spread, session affinity, a canary and
# a switch with a pool, a host removed and added under load, a host killed
# mid-stream (~100 s).  `test_pool.py --bench`: docs/PERFORMANCE.md section 8.
TESTS += tests/integration/test_pool.py
EXTRA_DIST += tests/integration/test_pool.py
