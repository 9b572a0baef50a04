# src/server: the FastCGI worker processes and the coordinator (`hyserve
# serve`) that loads the model, runs the engine thread and supervises them.
libhy_a_SOURCES += src/server/worker.c src/server/worker.h src/server/coordinator.c \
	src/server/coordinator.h
# End-to-end: a real nginx in front of `hyserve serve` (skips without nginx
# or the python openai package).
TESTS += tests/integration/test_server.py
EXTRA_DIST += tests/integration/test_server.py nginx/hyserve-test.conf.in
