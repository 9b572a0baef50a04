# src/common: errors, element types, futex calls, SHA-256, the configuration,
# logging, and sliding-window statistics.

# Errors, element types, KV page groups, futex calls.
libhy_a_SOURCES += src/common/hy.c src/common/hy.h src/common/dtype.c src/common/dtype.h \
	src/common/kvgroup.h \
	src/common/futex.h
check_PROGRAMS += tests/unit/test_common
TESTS += tests/unit/test_common
tests_unit_test_common_SOURCES = tests/unit/test_common.c
tests_unit_test_common_LDADD = $(TEST_LDADD)
# SHA-256 (model file versions in /v1/models, /health, hyserve-ctl status).
libhy_a_SOURCES += src/common/sha256.c src/common/sha256.h
# CRC-32C (the disk tier's file checksums).
libhy_a_SOURCES += src/common/crc32c.c src/common/crc32c.h
check_PROGRAMS += tests/unit/test_sha256
TESTS += tests/unit/test_sha256
tests_unit_test_sha256_SOURCES = tests/unit/test_sha256.c
tests_unit_test_sha256_LDADD = $(TEST_LDADD)

# The configuration (hyserve.ini) and key=value syslog logging.
libhy_a_SOURCES += src/common/config.c src/common/config.h src/common/log.c src/common/log.h \
	src/common/netaddr.c src/common/netaddr.h
check_PROGRAMS += tests/unit/test_config tests/unit/test_log
TESTS += tests/unit/test_config tests/unit/test_log
tests_unit_test_config_SOURCES = tests/unit/test_config.c
tests_unit_test_config_LDADD = $(TEST_LDADD)
tests_unit_test_log_SOURCES = tests/unit/test_log.c
tests_unit_test_log_LDADD = $(TEST_LDADD)
EXTRA_DIST += etc/hyserve.ini

# Sliding-window quantiles and per-second rates in shared memory (/metrics
# summaries and tokens/s gauges).
libhy_a_SOURCES += src/common/winstat.c src/common/winstat.h
check_PROGRAMS += tests/unit/test_winstat
TESTS += tests/unit/test_winstat
tests_unit_test_winstat_SOURCES = tests/unit/test_winstat.c
tests_unit_test_winstat_LDADD = $(TEST_LDADD)

# [server] listen and allow: the TCP FastCGI address and its peer allow-list.
check_PROGRAMS += tests/unit/test_netaddr
TESTS += tests/unit/test_netaddr
tests_unit_test_netaddr_SOURCES = tests/unit/test_netaddr.c
tests_unit_test_netaddr_LDADD = $(TEST_LDADD)
