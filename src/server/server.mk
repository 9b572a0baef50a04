# src/server: the FastCGI worker processes and the coordinator (`hyserve
# serve`) that loads the model, runs the engine thread and supervises them.
libhy_a_SOURCES += src/server/worker.c src/server/worker.h src/server/coordinator.c
# End-to-end: a real nginx in front of `hyserve serve` (skips without nginx
# or the python openai package).
TESTS += tests/integration/test_server.py
EXTRA_DIST += tests/integration/test_server.py nginx/hyserve-test.conf.in
# What operators watch: HTTP answers by endpoint and status (nginx's own
# refusals included), latency summaries, tokens/s, memory by kind (/metrics).
libhy_a_SOURCES += src/server/metrics.c src/server/metrics.h
