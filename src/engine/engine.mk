# src/engine (runner) and src/kv (page ids).
libhy_a_SOURCES += src/engine/runner.c src/engine/runner.h src/kv/pages.c src/kv/pages.h
