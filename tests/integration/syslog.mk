# tests/integration/syslog.mk - (filled in by its owner)
