# src/backend: the interface every backend implements (backend.h), what the
# backends compute alike (layout.c: KV/state sizes and checks, op argument
# checks, MoE routing), weight layouts (weight.c) and selection by name
# (select.c).  The backends themselves are built by cpu/cpu.mk and
# cuda/cuda.mk.
libhy_a_SOURCES += src/backend/backend.h src/backend/layout.c src/backend/layout.h \
	src/backend/select.c src/backend/select.h src/backend/outview.c \
	src/backend/weight.c

# Lightning attention (the LIGHTNING layer kind; minimax-01): the op's
# checks and reference arithmetic, shared by the CPU and CUDA backends.
libhy_a_SOURCES += src/backend/lightning.c src/backend/lightning.h
