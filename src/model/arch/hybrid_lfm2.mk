# Hybrid support shared by the recurrent families (CPU state slots, conv1d,
# unary/mul/l2norm, MoE); arch/lfm2.c is built by arch/families.c.
libhy_a_SOURCES += src/backend/cpu/recurrent.c src/backend/cpu/moe.c
check_PROGRAMS += tests/unit/test_cpu_recurrent
TESTS += tests/unit/test_cpu_recurrent
tests_unit_test_cpu_recurrent_SOURCES = tests/unit/test_cpu_recurrent.c
tests_unit_test_cpu_recurrent_LDADD = $(TEST_LDADD)
