# src/model: model loading and architectures.
libhy_a_SOURCES += src/model/model.c src/model/model.h src/model/arch/llama.c
