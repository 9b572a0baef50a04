# tests/integration/syslog.mk - the syslog-ng snippet and logrotate file
# (etc/syslog-ng/hyserve.conf, etc/logrotate.d/hyserve; EXTRA_DIST and
# installed by ops.mk and packaging/) end to end: a private foreground
# syslog-ng running the shipped snippet, hyserve behind a private nginx
# logging to it, rename + reopen and logrotate -f under load.  Skips
# without nginx or syslog-ng; needs root (a private /dev/log) until hyserve
# has a [log] socket key.  taplib.py: the TAP and stack helpers it imports.
TESTS += tests/integration/test_syslog.py
EXTRA_DIST += tests/integration/test_syslog.py tests/integration/taplib.py
