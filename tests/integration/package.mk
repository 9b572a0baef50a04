# tests/integration/package.mk - the packages end to end (packaging/): the
# .deb built, lintian-clean, installed, its hyserve@blue unit run as systemd
# would behind the installed nginx site over HTTPS, then purged without a
# trace (root only; skips elsewhere or where hyserve is already installed);
# and the .rpm built with Debian's rpmbuild with every systemd macro guarded.
TESTS += tests/integration/test_package.sh tests/integration/test_rpm.sh
EXTRA_DIST += tests/integration/test_package.sh tests/integration/test_rpm.sh
