# src/server: the master (`hyserve serve`: sockets, the shared segment,
# supervision), the engine process it restarts (weights, the engine loop on
# the segment), the FastCGI workers, and the OpenAI API they speak.

# OpenAI-compatible request parsing/validation, error bodies, response and
# SSE formatting, stop-string matching (pure C, no sockets).
libhy_a_SOURCES += src/server/api.c src/server/api.h src/server/api_grammar.c src/server/api_tools.c \
	src/server/toolcall.c src/server/toolcall.h src/server/toolcall_prompt.c \
	src/server/sse.c src/server/sse.h src/server/stop.c src/server/stop.h src/server/json_out.c \
	src/server/json_out.h
check_PROGRAMS += tests/unit/test_api tests/fuzz/fuzz_api_replay
TESTS += tests/unit/test_api tests/fuzz/fuzz_api_replay
tests_unit_test_api_SOURCES = tests/unit/test_api.c
tests_unit_test_api_LDADD = $(TEST_LDADD)
# Tool calling without a server: the output parser, the prompt side, the
# call grammar (toolcall.h).
check_PROGRAMS += tests/unit/test_toolcall
TESTS += tests/unit/test_toolcall
tests_unit_test_toolcall_SOURCES = tests/unit/test_toolcall.c
tests_unit_test_toolcall_LDADD = $(TEST_LDADD)
# The libFuzzer target built as a bounded random-mutation run (no clang
# needed); see the comment at the top of tests/fuzz/fuzz_api.c.
tests_fuzz_fuzz_api_replay_SOURCES = tests/fuzz/fuzz_api.c
tests_fuzz_fuzz_api_replay_CPPFLAGS = $(AM_CPPFLAGS) -DHY_FUZZ_STANDALONE
tests_fuzz_fuzz_api_replay_LDADD = $(TEST_LDADD)

# The FastCGI worker processes, the master and its engine process.
libhy_a_SOURCES += src/server/worker.c src/server/worker.h src/server/coordinator.c \
	src/server/coordinator.h src/server/engine_proc.c src/server/engine_proc.h src/server/guard.c src/server/guard.h src/server/access.c \
	src/server/access.h
# The coordinator's hold on the connections workers answer (a dead worker's
# responses are aborted, not ended), without nginx.
check_PROGRAMS += tests/unit/test_guard
TESTS += tests/unit/test_guard
tests_unit_test_guard_SOURCES = tests/unit/test_guard.c
tests_unit_test_guard_LDADD = $(TEST_LDADD)
# The instance's FastCGI secret file and the switch to [server] user.
check_PROGRAMS += tests/unit/test_access
TESTS += tests/unit/test_access
tests_unit_test_access_SOURCES = tests/unit/test_access.c
tests_unit_test_access_LDADD = $(TEST_LDADD)
# End-to-end: a real nginx in front of `hyserve serve` (skips without nginx
# or the python openai package).
TESTS += tests/integration/test_server.py
EXTRA_DIST += tests/integration/test_server.py nginx/hyserve-test.conf.in
# Tool calling with the openai client through nginx (docs/TOOLS.md).
TESTS += tests/integration/test_tools.py
EXTRA_DIST += tests/integration/test_tools.py
# What operators watch: HTTP answers by endpoint and status (nginx's own
# refusals included), latency summaries, tokens/s, memory by kind (/metrics).
libhy_a_SOURCES += src/server/metrics.c src/server/metrics.h
