# tests/integration/package.mk - the packages end to end (packaging/): the
# .deb built, lintian-clean, installed, its hyserve@blue unit run as systemd
# would behind the installed nginx site over HTTPS, then purged without a
# trace - all in a throw-away root (overlay of /, private mount and network
# namespaces), so the machine's own hyserve, if any, is never seen or
# touched (root only; skips elsewhere); and the .rpm built with Debian's
# rpmbuild with every systemd macro guarded.
TESTS += tests/integration/test_package.sh tests/integration/test_rpm.sh
EXTRA_DIST += tests/integration/test_package.sh tests/integration/test_rpm.sh
