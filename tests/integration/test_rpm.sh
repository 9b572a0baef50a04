#!/bin/sh
# test_rpm.sh - packaging/rpm/hyserve.spec with Debian's rpmbuild, as CI
# builds it: from a `make dist`-style tarball in a temporary directory, with
# no systemd RPM macros defined (Debian ships none), so every %{?systemd_*}
# guard must expand to nothing; a scriptlet with a literal "%systemd_post" or
# "%{...}" would be a broken package on every install.  Then the guards are
# checked the other way: with Fedora-like macros defined, they must expand.
# Needs rpmbuild, rpm and rpmspec (Debian package rpm); any user will do.
# Environment: HY_SRCDIR, HYSERVE (set by `make check`).
set -u
export LC_ALL=C
top=${HY_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
spec_in=$top/packaging/rpm/hyserve.spec

# a missing tool or file: one failed check and the plan (rpm comes with
# scripts/install-deps --test, the spec with the source tree)
missing() { echo "not ok 1 - $*"; echo "1..1"; exit 0; }
for t in rpmbuild rpm rpmspec tar gzip; do
    command -v "$t" >/dev/null 2>&1 || missing "$t is missing (Debian package rpm: scripts/install-deps --test)"
done
[ -f "$spec_in" ] || missing "no $spec_in"

. "$top/tests/integration/taplib.sh"

T=$(mktemp -d /tmp/hyserve-rpmtest.XXXXXX) || missing "mktemp failed"
trap 'rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP

# ---- tarball ------------------------------------------------------------------
name=$(sed -n 's/^Name:[[:space:]]*//p' "$spec_in")
ver=$(sed -n 's/^Version:[[:space:]]*//p' "$spec_in")
src=$T/$name-$ver
bdir=""
[ -n "${HYSERVE:-}" ] && [ -f "$(dirname "$HYSERVE")/Makefile" ] && bdir=$(dirname "$HYSERVE")
if [ -n "$bdir" ]; then
    how="make distdir"
    cver=$(sed -n 's/^PACKAGE_VERSION = //p' "$bdir/Makefile")
    make -s -C "$bdir" distdir distdir="$src" >"$T/dist.log" 2>&1
    rc=$?
else
    how="copy of the source tree"
    cver=$ver
    mkdir -p "$src" && tar -C "$top" --exclude=./build --exclude='./build-*' --exclude=./models \
        --exclude=./.git --exclude=./autom4te.cache -cf - . | tar -C "$src" -xf - 2>"$T/dist.log"
    rc=$?
fi
mkdir -p "$T/rpmbuild/SOURCES"
[ $rc = 0 ] && tar -C "$T" -czf "$T/rpmbuild/SOURCES/$name-$ver.tar.gz" "$name-$ver" || rc=1
[ "$cver" = "$ver" ] || rc=1
ok $rc "$name-$ver.tar.gz ($how; configure says version $cver, the spec $ver)"
[ $rc = 0 ] || { tail -20 "$T/dist.log" | diag; finish; }

# ---- rpmbuild -bb without any systemd macros -----------------------------------
# --nodeps: Debian's rpm database is empty, so no BuildRequires is "installed";
# --nocheck: the unit tests run in the release build already.
arch=$(rpm --eval '%{_arch}')
start=$(date +%s)
rpmbuild --nodeps --nocheck --define "_topdir $T/rpmbuild" -bb "$src/packaging/rpm/hyserve.spec" \
    >"$T/rpmbuild.log" 2>&1
rc=$?
rpmf=""
for f in "$T/rpmbuild/RPMS/$arch/$name-$ver-"*".$arch.rpm"; do
    [ -f "$f" ] && rpmf=$f && break
done
[ -n "$rpmf" ] || rc=1
ok $rc "rpmbuild -bb builds ${rpmf:+$(basename "$rpmf")} ($(($(date +%s) - start)) s)"
[ $rc = 0 ] || { grep -E 'error|Error|warning: ' "$T/rpmbuild.log" | tail -30 | diag; finish; }

# ---- the scriptlets: nothing unexpanded, valid sh ------------------------------
rpm -qp --scripts "$rpmf" >"$T/scripts.txt" 2>"$T/rpm.err"
rc=$?
bad=$(grep -nE '%(\{|_|systemd|sysusers|[a-z_]+_(post|preun|postun))' "$T/scripts.txt")
[ -z "$bad" ] || rc=1
nscr=$(grep -c '^[a-z]* *scriptlet (using ' "$T/scripts.txt")
[ "$nscr" -gt 0 ] || rc=1
ok $rc "rpm -qp --scripts: $nscr scriptlets, no unexpanded macro${bad:+: $bad}"
[ -z "$bad" ] || diag <"$T/scripts.txt"

# one file per scriptlet, each must parse with sh -n
awk -v d="$T" '
    /^[a-z]+ *scriptlet \(using / { f = d "/scriptlet." ++i; sh[f] = $NF; next }
    f { print > f }' "$T/scripts.txt"
rc=0 msg=""
for f in "$T"/scriptlet.*; do
    [ -f "$f" ] || continue
    if ! out=$(sh -n "$f" 2>&1); then
        rc=1 msg="$msg $(basename "$f"): $out"
    fi
done
ok $rc "every scriptlet is valid sh${msg:+:$msg}"

# ---- the payload -----------------------------------------------------------
files=$(rpm -qpl "$rpmf" 2>/dev/null)
conf=$(rpm -qpc "$rpmf" 2>/dev/null)
missing=""
for f in /usr/bin/hyserve /usr/sbin/hyserve-ctl /usr/lib/systemd/system/hyserve@.service \
         /etc/hyserve/hyserve.ini /etc/hyserve/nginx/hyserve.conf /etc/logrotate.d/hyserve \
         /usr/share/hyserve/monitoring/prometheus.yml /usr/share/hyserve/monitoring/hyserve-rules.yml \
         /usr/share/hyserve/monitoring/grafana-hyserve.json; do
    echo "$files" | grep -qxF "$f" || missing="$missing $f"
done
ok "$([ -z "$missing" ] && echo 0 || echo 1)" "the rpm holds the server, hyserve-ctl, the unit, the configuration and the monitoring files${missing:+; missing:$missing}"
notconf=$(echo "$files" | grep '^/etc/' | while read -r f; do
    # directories and the disabled-site link are not config files
    case $f in /etc/hyserve | /etc/hyserve/nginx | /etc/nginx/conf.d | */hyserve.conf.disabled) continue ;; esac
    echo "$conf" | grep -qxF "$f" || echo "$f"
done)
ok "$([ -z "$notconf" ] && [ -n "$conf" ] && echo 0 || echo 1)" "every file under /etc is %config ($(echo "$conf" | wc -l) files${notconf:+; not: $notconf})"
# the packaged unit is the source's (compared by the digest rpm records)
want=$(sha256sum "$top/etc/hyserve@.service" | cut -d' ' -f1)
got=$(rpm -qp --qf '[%{FILENAMES} %{FILEDIGESTS}\n]' "$rpmf" 2>/dev/null |
    sed -n 's|^/usr/lib/systemd/system/hyserve@.service ||p')
ok "$([ "$got" = "$want" ] && echo 0 || echo 1)" "the packaged unit is etc/hyserve@.service (sha256 ${got:-none})"

# ---- the guards the other way: where the macros exist they must expand --------
# (what Fedora's systemd-rpm-macros provide, reduced to a marker)
rpmspec -P --define '_unitdir /usr/lib/systemd/system' \
    --define 'systemd_post() SYSTEMD_POST %*' --define 'systemd_preun() SYSTEMD_PREUN %*' \
    --define 'systemd_postun_with_restart() SYSTEMD_POSTUN %*' \
    "$src/packaging/rpm/hyserve.spec" >"$T/parsed.spec" 2>"$T/rpmspec.err"
rc=$?
for m in "SYSTEMD_POST hyserve@.service" "SYSTEMD_PREUN hyserve@.service" "SYSTEMD_POSTUN hyserve@.service"; do
    grep -qxF "$m" "$T/parsed.spec" || { rc=1; echo "missing: $m" | diag; }
done
ok $rc "with systemd-rpm-macros defined the guarded scriptlets call them"
[ $rc = 0 ] || diag <"$T/rpmspec.err"
finish
