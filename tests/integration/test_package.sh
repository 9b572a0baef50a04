#!/bin/sh
# test_package.sh - the Debian package end to end, as CI does it on a
# throwaway Debian 12 (as root): build hyserve_*.deb from a `make distdir`
# copy in a temporary directory, lintian (no E: tags), install it, start the
# installed hyserve@blue unit the way systemd would (User=, groups, the
# *Directory= trees, UMask=, limits, no new privileges, empty capability
# bounding set), serve the default model through the installed nginx site
# over HTTPS with a key made by the installed hyserve-ctl, stop it, purge it,
# and check that nothing the package or the service made is left behind.
#
# It never touches the machine it runs on: the whole test runs in a
# throw-away root, an overlay of / whose writes go to a tmpfs, chrooted into
# in private mount and network namespaces (unshare -m -n).  So dpkg -i/-r/
# --purge, adduser/deluser, /etc/hyserve, /run, /var/{lib,cache,log}/hyserve,
# /dev/shm and the loopback port all belong to the test and vanish with it,
# and a hyserve already installed or running here (scripts/quickstart, a
# real deployment, another copy of this test) is neither seen nor disturbed:
# inside the root every trace of one is removed first (in the overlay only),
# so the result is the same before and after the quick start.  Needs root
# and mount namespaces with overlayfs (skips without them: a privilege, not
# a missing tool); every tool it uses is installed by scripts/install-deps
# --test and the model by scripts/fetch-default-model, so a missing one is a
# failure.
# Environment: HY_SRCDIR, HYSERVE (set by `make check`), HY_MODEL (default
# $HY_SRCDIR/models/SmolLM2-135M-Instruct.Q4_1.gguf), HY_PACKAGE_CHECK=1 to
# also run the unit tests inside dpkg-buildpackage (CI runs them elsewhere).
set -u
export LC_ALL=C
top=${HY_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
model=${HY_MODEL:-$top/models/SmolLM2-135M-Instruct.Q4_1.gguf}
inst=blue
unit=/lib/systemd/system/hyserve@.service
. "$top/tests/integration/taplib.sh"

skip() { echo "1..0 # SKIP $*"; exit 0; }
# a missing tool or file: one failed line and the plan
missing() { ok 1 "$*"; finish; }

# ---- the throw-away root -------------------------------------------------------
# Outside (HY_PKG_STAGE unset): check what cannot be fixed from inside, then
# re-run this script in new mount and network namespaces.  There
# (HY_PKG_STAGE=root): build the root and chroot into it.  In the root
# (HY_PKG_STAGE=test): the test proper.
case ${HY_PKG_STAGE:-} in
"")
    [ "$(id -u)" = 0 ] || skip "needs root (installs and purges the package in a throw-away root)"
    for t in dpkg-buildpackage dpkg-checkbuilddeps nginx openssl curl setpriv setsid \
             adduser deluser python3 unshare chroot ip findmnt; do
        command -v "$t" >/dev/null 2>&1 || missing "$t is missing (scripts/install-deps --test)"
    done
    [ -f "$model" ] || missing "default model $model missing (scripts/fetch-default-model)"
    getent group www-data >/dev/null || missing "no www-data group (nginx's user; install-deps --test)"
    root=$(mktemp -d /tmp/hyserve-pkgroot.XXXXXX) || missing "mktemp failed"
    unshare -m -n --propagation private sh -c \
        'mount -t tmpfs t "$1" && mkdir "$1/u" "$1/w" "$1/r" &&
         mount -t overlay o -o "lowerdir=/,upperdir=$1/u,workdir=$1/w" "$1/r"' sh "$root" \
        >/dev/null 2>&1 || { rmdir "$root"; skip "no mount namespace with overlayfs here (unshare -m -n)"; }
    # What the test reads from the machine, by absolute path: the source
    # tree (this script too), the build directory, the model's directory.
    top=$(cd "$top" && pwd)
    self=$top/tests/integration/test_package.sh
    bdir=""
    [ -n "${HYSERVE:-}" ] && bdir=$(cd "$(dirname "$HYSERVE")" 2>/dev/null && pwd)
    mdir=$(dirname "$(readlink -f "$model")")
    HY_PKG_STAGE=root HY_PKG_ROOT=$root HY_PKG_BINDS="$top $bdir $mdir" HY_SRCDIR=$top \
        unshare -m -n --propagation private sh "$self"
    rc=$?
    rmdir "$root"
    exit $rc
    ;;
root)
    # The root: / as the lower layer of an overlay whose upper layer is a
    # tmpfs, the kernel's trees bound in, fresh /dev/shm, /run and /tmp, the
    # paths above bound in (the overlay does not cross mount points), and a
    # loopback of its own.
    r=$HY_PKG_ROOT/r
    # (the messages go to a variable: a file would land on the host's disk
    # under the tmpfs about to be mounted there)
    if ! out=$({ mount -t tmpfs -o mode=0755 hyserve-pkgroot "$HY_PKG_ROOT" &&
           mkdir "$HY_PKG_ROOT/u" "$HY_PKG_ROOT/w" "$r" &&
           mount -t overlay hyserve-pkgroot -o "lowerdir=/,upperdir=$HY_PKG_ROOT/u,workdir=$HY_PKG_ROOT/w" "$r" &&
           mount --rbind /proc "$r/proc" && mount --rbind /sys "$r/sys" &&
           mount --rbind /dev "$r/dev" &&
           mount -t tmpfs -o mode=1777,nosuid,nodev hyserve-shm "$r/dev/shm" &&
           mount -t tmpfs -o mode=0755,nosuid,nodev hyserve-run "$r/run" &&
           mkdir -m 1777 "$r/run/lock" &&
           mount -t tmpfs -o mode=1777,nosuid,nodev hyserve-tmp "$r/tmp" &&
           bound=0 && for d in $HY_PKG_BINDS; do
               mkdir -p "$r$d" && mount --rbind "$d" "$r$d" && bound=$((bound + 1))
           done && [ "$bound" = "$(echo $HY_PKG_BINDS | wc -w)" ] &&
           ip link set lo up; } 2>&1); then
        ok 1 "throw-away root: $(echo "$out" | tr '\n' ' ')"
        finish
    fi
    # What the machine has of hyserve is not the test's: gone from the root
    # (whiteouts in the overlay, nothing on the host).  A package installed
    # here is purged inside the root, which also takes its user away.
    st=$(chroot "$r" dpkg-query -W -f='${db:Status-Status}' hyserve 2>/dev/null)
    [ -z "$st" ] || [ "$st" = not-installed ] ||
        chroot "$r" dpkg --purge --force-all hyserve hyserve-cuda >/dev/null 2>&1
    for p in /etc/hyserve /usr/bin/hyserve /usr/bin/hyserve-cuda /usr/sbin/hyserve-ctl \
             /lib/systemd/system/hyserve@.service /etc/systemd/system/hyserve@.service \
             /etc/systemd/system/multi-user.target.wants/hyserve@blue.service \
             /etc/nginx/sites-available/hyserve /etc/nginx/sites-enabled/hyserve \
             /var/lib/hyserve /var/cache/hyserve /var/log/hyserve; do
        rm -rf "${r:?}$p"
    done
    chroot "$r" sh -c 'getent passwd hyserve >/dev/null && deluser --quiet --system hyserve
                       getent group hyserve >/dev/null && delgroup --quiet --system hyserve' \
        >/dev/null 2>&1
    exec chroot "$r" env HY_PKG_STAGE=test sh -c 'cd "$1" 2>/dev/null || cd /; exec sh "$2"' \
        sh "$PWD" "$0"
    ;;
esac

# ---- in the root: a clean slate? ------------------------------------------------
# Checked, not assumed: the purge at the end must find exactly what the
# package made.
left=""
for p in /etc/hyserve /usr/bin/hyserve /usr/sbin/hyserve-ctl "$unit" \
         /etc/nginx/sites-available/hyserve /etc/nginx/sites-enabled/hyserve \
         /run/hyserve /var/lib/hyserve /var/cache/hyserve /var/log/hyserve \
         /dev/shm/hyserve-$inst; do
    { [ -e "$p" ] || [ -L "$p" ]; } && left="$left $p"
done
st=$(dpkg-query -W -f='${db:Status-Status}' hyserve 2>/dev/null)
[ -z "$st" ] || [ "$st" = not-installed ] || left="$left dpkg:$st"
getent passwd hyserve >/dev/null && left="$left user:hyserve"
getent group hyserve >/dev/null && left="$left group:hyserve"
ok "$([ -z "$left" ] && echo 0 || echo 1)" "a throw-away root (overlay of /, private mounts and network) with no hyserve in it${left:+; left:$left}"
[ -z "$left" ] || finish

# ---- TAP and cleanup ---------------------------------------------------------
T=$(mktemp -d /tmp/hyserve-pkgtest.XXXXXX) || missing "mktemp failed"
chmod 0755 "$T" # nginx workers (www-data) use temp paths below it
srv_pid="" ngx_pid=""

stop_server() {
    [ -n "$srv_pid" ] || return 0
    kill -TERM "$srv_pid" 2>/dev/null
    i=0
    while kill -0 "$srv_pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.2; i=$((i + 1)); done
    # KillMode=mixed: whatever is left of the unit gets SIGKILL
    kill -KILL -- "-$srv_pid" 2>/dev/null
    wait "$srv_pid" 2>/dev/null
    srv_pid=""
}
stop_nginx() {
    [ -n "$ngx_pid" ] || return 0
    kill -QUIT "$ngx_pid" 2>/dev/null
    i=0
    while kill -0 "$ngx_pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
    kill -KILL "$ngx_pid" 2>/dev/null
    wait "$ngx_pid" 2>/dev/null
    ngx_pid=""
}
# Every exit path: stop what we started.  The package, its user and every
# file it made live in the throw-away root, which goes with the namespace.
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    set +e
    stop_server
    stop_nginx
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP


# ---- 1. source copy and .deb -------------------------------------------------
ver=$(sed -n '1s/^hyserve (\([^)]*\)).*/\1/p' "$top/packaging/debian/changelog")
upver=${ver%-*}
src=$T/src/hyserve-$upver
mkdir -p "$T/src"
bdir=""
[ -n "${HYSERVE:-}" ] && [ -f "$(dirname "$HYSERVE")/Makefile" ] && bdir=$(dirname "$HYSERVE")
if [ -n "$bdir" ]; then
    # exactly what a release tarball holds: also checks EXTRA_DIST
    how="make distdir"
    make -s -C "$bdir" distdir distdir="$src" >"$T/dist.log" 2>&1
    rc=$?
elif [ -d "$top/.git" ] && command -v git >/dev/null; then
    how="git ls-files copy"
    mkdir -p "$src" && (cd "$top" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 cp --parents -p -t "$src") >"$T/dist.log" 2>&1
    rc=$?
else
    how="copy of the source tree"
    mkdir -p "$src" && tar -C "$top" --exclude=./build --exclude='./build-*' --exclude=./models \
        --exclude=./.git --exclude=./autom4te.cache -cf - . | tar -C "$src" -xf - 2>"$T/dist.log"
    rc=$?
fi
[ $rc = 0 ] && [ -f "$src/packaging/debian/control" ] || rc=1
ok $rc "source copy for the package ($how, version $ver)"
[ $rc = 0 ] || { tail -20 "$T/dist.log" | diag; finish; }

cp -R "$src/packaging/debian" "$src/debian"
deps=$(cd "$src" && dpkg-checkbuilddeps 2>&1)
if [ -n "$deps" ]; then
    echo "$deps" | diag
    missing "build dependencies missing (scripts/install-deps --test): $(echo "$deps" | tr '\n' ' ')"
fi
opts="parallel=$(nproc 2>/dev/null || echo 2)"
[ "${HY_PACKAGE_CHECK:-0}" = 1 ] || opts="nocheck $opts"
start=$(date +%s)
(cd "$src" && DEB_BUILD_OPTIONS="$opts" dpkg-buildpackage -us -uc -b) >"$T/build.log" 2>&1
rc=$?
deb=$T/src/hyserve_${ver}_$(dpkg --print-architecture).deb
[ $rc = 0 ] && [ -f "$deb" ] || rc=1
ok $rc "dpkg-buildpackage -us -uc -b builds $(basename "$deb") ($(($(date +%s) - start)) s, $opts)"
[ $rc = 0 ] || { grep -E 'error|Error|dh_[a-z_]+: ' "$T/build.log" | tail -30 | diag; finish; }

# ---- 2. lintian -------------------------------------------------------------
if command -v lintian >/dev/null; then
    changes=$T/src/hyserve_${ver}_$(dpkg --print-architecture).changes
    lintian --pedantic "$changes" >"$T/lintian.log" 2>&1
    grep -E '^[WEXIP]: ' "$T/lintian.log" | diag
    errs=$(grep -c '^E: ' "$T/lintian.log")
    ok "$([ "$errs" = 0 ] && echo 0 || echo 1)" "lintian: no errors on the .deb and .changes ($errs E: tags)"
else
    ok 1 "lintian is missing (scripts/install-deps --test)"
fi

# ---- 3. install ---------------------------------------------------------------
# dpkg -i does not pull dependencies: check them first so that a missing one
# reads as what it is, and dpkg never leaves a half-configured package.
need=""
for d in $(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/|.*//; s/(.*//; s/:any//' | tr -d ' '); do
    s=$(dpkg-query -W -f='${db:Status-Status}' "$d" 2>/dev/null)
    [ "$s" = installed ] || need="$need $d"
done
[ -z "$need" ] || missing "runtime dependencies not installed (scripts/install-deps --test):$need"
dpkg -i "$deb" >"$T/install.log" 2>&1
rc=$?
ok $rc "dpkg -i installs the package"
[ $rc = 0 ] || { diag <"$T/install.log"; finish; }
dpkg-query -L hyserve | sort >"$T/files.list"

# the user postinst creates: a system account without a login, in www-data
uid=$(id -u hyserve 2>/dev/null)
sh_=$(getent passwd hyserve | cut -d: -f7)
grp=$(id -nG hyserve 2>/dev/null)
rc=1
[ -n "$uid" ] && [ "$uid" -lt 1000 ] && [ "$sh_" = /usr/sbin/nologin ] &&
    echo " $grp " | grep -q ' www-data ' && echo " $grp " | grep -q ' hyserve ' && rc=0
ok $rc "postinst made system user hyserve (uid ${uid:-none}, shell ${sh_:-none}, groups: $grp)"

# every file the package puts under /etc is a conffile (the admin's edits
# survive upgrades; purge removes them)
etc_files=$(while read -r f; do [ -f "$f" ] && [ ! -L "$f" ] && echo "$f"; done <"$T/files.list" | grep '^/etc/')
conf=$(dpkg-query -W -f='${Conffiles}\n' hyserve | awk 'NF { print $1 }' | sort)
notconf=$(echo "$etc_files" | sort | comm -23 - "$(printf '%s\n' "$conf" >"$T/conf.list"; echo "$T/conf.list")")
ok "$([ -z "$notconf" ] && [ -n "$conf" ] && echo 0 || echo 1)" \
    "every file under /etc is a conffile ($(echo "$conf" | wc -l) conffiles${notconf:+; not: $notconf})"
rc=1
[ -f /etc/hyserve/nginx/api-keys.map ] && [ "$(stat -c %a /etc/hyserve/nginx/api-keys.map)" = 640 ] &&
    [ "$(readlink /etc/hyserve/nginx/upstream-active.conf)" = upstream-$inst.conf ] && rc=0
ok $rc "postinst made api-keys.map (0640) and upstream-active.conf -> upstream-$inst.conf"
sm=$(stat -c '%U:%G %a' /etc/hyserve/nginx/secret-blue.map /etc/hyserve/nginx/secret-green.map 2>&1 | paste -sd' ')
ok "$([ "$sm" = "root:root 600 root:root 600" ] && echo 0 || echo 1)" \
    "postinst made each colour's instance secret, root-only: $sm"

# ---- 4. configure as an admin would (packaging/debian/README.Debian) ----------
install -d -m 0700 /etc/hyserve/tls
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
    -keyout /etc/hyserve/tls/key.pem -out /etc/hyserve/tls/cert.pem >"$T/openssl.log" 2>&1
rc=$?
[ $rc = 0 ] || diag <"$T/openssl.log"
models=/var/lib/hyserve/models
install -d -m 0755 /var/lib/hyserve && install -d -m 0755 $models &&
    cp "$model" "$models/" && chmod 0644 "$models/$(basename "$model")" || rc=1
cat >"/etc/hyserve/$inst.ini" <<EOF
; hyserve@$inst, written by test_package.sh
[model]
path = $models/$(basename "$model")
threads = 2
[engine]
max_seqs = 4
max_context = 1024
[cache]
hot_mb = 128
[server]
socket_group = www-data
socket_mode = 0660
workers = 2
[log]
stderr = true
EOF
chgrp hyserve "/etc/hyserve/$inst.ini" && chmod 0640 "/etc/hyserve/$inst.ini" || rc=1
key=$(HYSERVE_NO_RELOAD=1 /usr/sbin/hyserve-ctl key add pkgtest 2>"$T/ctl.log")
[ ${#key} -ge 20 ] || { rc=1; diag <"$T/ctl.log"; }
ok $rc "admin setup: self-signed certificate, $inst.ini, model in $models, key from hyserve-ctl"

# ---- 5. the unit, run as systemd would --------------------------------------
# unit_get KEY: the last KEY= of the unit, continuation lines joined, %i and
# %I replaced by the instance; status 1 when the key is absent.
unit_get() {
    awk -v k="$1" -v inst="$inst" '
        !cont && /^[ \t]*[#;]/ { next }
        { cur = cont ? cur " " $0 : $0 }
        cur ~ /\\$/ { sub(/\\$/, "", cur); cont = 1; next }
        { cont = 0 }
        index(cur, k "=") == 1 { v = substr(cur, length(k) + 2); found = 1 }
        END {
            if (!found) exit 1
            gsub(/%[iI]/, inst, v); gsub(/[ \t]+/, " ", v); sub(/^ /, "", v); sub(/ $/, "", v)
            print v
        }' "$unit"
}
exec_start=$(unit_get ExecStart) || exec_start=""
exec_start=${exec_start#-}
u=$(unit_get User || echo root)
g=$(unit_get Group || id -gn "$u")
umask_=$(unit_get UMask || echo 0022)
cond=$(unit_get ConditionPathExists || true)
rc=0 why=""
# LoadCredential=ID:PATH: systemd copies PATH into the unit's credentials
# directory, which only the service user may read, names the directory in
# $CREDENTIALS_DIRECTORY (ExecStart may use it), and fails the start when
# PATH is missing.
creds=/run/credentials/hyserve@$inst.service
lc=$(unit_get LoadCredential || true)
if [ -n "$lc" ]; then
    if [ -f "${lc#*:}" ] && install -d -m 0755 /run/credentials &&
        install -d -m 0500 -o "$u" "$creds" &&
        install -m 0400 -o "$u" "${lc#*:}" "$creds/${lc%%:*}"; then
        exec_start=$(printf '%s' "$exec_start" | sed "s|\${CREDENTIALS_DIRECTORY}|$creds|g")
        echo "CREDENTIALS_DIRECTORY=$creds" >"$T/creds.env"
    else
        rc=1 why="LoadCredential=$lc: no such file"
    fi
fi
case $exec_start in
"") rc=1 why="no ExecStart" ;;
*[\'\"\$%\;]*) rc=1 why="ExecStart uses quoting, variables or specifiers this emulation does not: $exec_start" ;;
esac
[ -n "$cond" ] && [ ! -e "$cond" ] && { rc=1; why="ConditionPathExists=$cond does not hold"; }
uid=$(id -u "$u" 2>/dev/null) || { rc=1; why="User=$u does not exist"; }
gid=$(getent group "$g" | cut -d: -f3)
[ -n "$gid" ] || { rc=1; why="Group=$g does not exist"; }
ok $rc "installed unit parsed: User=$u Group=$g ExecStart=$exec_start${why:+ ($why)}"
if [ $rc != 0 ]; then skip_rest "the unit cannot be run" "service" "HTTPS" "purge"; finish; fi

# supplementary groups: the user's own (initgroups) plus SupplementaryGroups=
groups=$( { id -G "$u"; for sg in $(unit_get SupplementaryGroups || true); do getent group "$sg" | cut -d: -f3; done; } |
    tr ' ' '\n' | grep . | sort -un | paste -sd, -)
# RuntimeDirectory= etc.: parents root-owned 0755, the innermost owned by the
# service user with the *DirectoryMode= (systemd.exec(5))
mkdirs() { # BASE KEY ENVVAR
    dirs=$(unit_get "$2" || true)
    mode=$(unit_get "${2}Mode" || echo 0755)
    list=""
    for d in $dirs; do
        install -d -m 0755 "$1/$(dirname "$d")" && install -d -m "$mode" -o "$u" -g "$g" "$1/$d" || return 1
        chown -R "$u:$g" "$1/$d"
        list="$list${list:+:}$1/$d"
        rwdirs="$rwdirs $1/$d"
    done
    [ -z "$list" ] || echo "$3=$list" >>"$T/unit.env"
}
: >"$T/unit.env"
[ -f "$T/creds.env" ] || : >"$T/creds.env"
rwdirs=$(unit_get ReadWritePaths || true)
rc=0
mkdirs /run RuntimeDirectory RUNTIME_DIRECTORY && mkdirs /var/lib StateDirectory STATE_DIRECTORY &&
    mkdirs /var/cache CacheDirectory CACHE_DIRECTORY && mkdirs /var/log LogsDirectory LOGS_DIRECTORY || rc=1
nofile=$(unit_get LimitNOFILE || true)
memlock=$(unit_get LimitMEMLOCK || true)
[ "$memlock" = infinity ] && memlock=unlimited
nnp=""
[ "$(unit_get NoNewPrivileges || true)" = yes ] && nnp=--no-new-privs
caps=""
cbs=$(unit_get CapabilityBoundingSet) && [ -z "$cbs" ] && caps="--inh-caps=-all --bounding-set=-all"
# The file-system sandbox (ProtectSystem=strict, PrivateTmp=, ProtectHome=)
# in a private mount namespace: only the unit's own directories writable, a
# private /tmp, no homes.  Where the machine allows no mount namespace (an
# unprivileged container), the service runs without it and we say so.
sbx="" sbx_note="no mount namespace here: file-system sandbox not emulated"
cat >"$T/sandbox.sh" <<'EOF'
# sandbox.sh CMD...: in the mount namespace unshare(1) made, set up what
# HY_PROTECT_SYSTEM, HY_PRIVATE_TMP and HY_PROTECT_HOME ask for, leaving
# HY_RW_DIRS writable, then exec CMD.  Every remount is "bind,remount":
# per mount point, so nothing outside this namespace changes.
set -e
if [ "$HY_PROTECT_SYSTEM" = strict ]; then
    for d in $HY_RW_DIRS; do mount --bind "$d" "$d"; done
fi
if [ "$HY_PRIVATE_TMP" = yes ]; then
    for t in /tmp /var/tmp; do mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$t"; done
fi
if [ "$HY_PROTECT_SYSTEM" = strict ]; then
    findmnt -rn -o TARGET | sort -u | while read -r m; do
        case $m in /dev | /dev/* | /proc | /proc/* | /sys | /sys/*) continue ;; esac
        [ "$HY_PRIVATE_TMP" = yes ] && case $m in /tmp | /var/tmp) continue ;; esac
        case " $HY_RW_DIRS " in *" $m "*) continue ;; esac
        mount -o remount,bind,ro "$m"
    done
fi
if [ "$HY_PROTECT_HOME" = yes ]; then
    for h in /home /root /run/user; do
        [ ! -d "$h" ] || mount -t tmpfs -o ro,mode=0755,nosuid,nodev tmpfs "$h"
    done
fi
exec "$@"
EOF
if unshare -m --propagation private sh -c 'mount -t tmpfs tmpfs /tmp && mount -o remount,bind,ro /' 2>/dev/null; then
    sbx="unshare -m --propagation private sh $T/sandbox.sh"
    sbx_note="ProtectSystem=$(unit_get ProtectSystem || echo no) PrivateTmp=$(unit_get PrivateTmp || echo no) ProtectHome=$(unit_get ProtectHome || echo no)"
fi
home=$(getent passwd "$u" | cut -d: -f6)
shell=$(getent passwd "$u" | cut -d: -f7)
set -f
# ExecStart and the *_DIRECTORY= list are split into words as systemd does
# (no quotes in them, checked above); dash and bash both have ulimit -n/-l
# shellcheck disable=SC2086,SC2046,SC3045
(
    umask "$umask_"
    [ -z "$nofile" ] || ulimit -n "$nofile"
    [ -z "$memlock" ] || ulimit -l "$memlock"
    cd /
    HY_RW_DIRS="$rwdirs" HY_PROTECT_SYSTEM=$(unit_get ProtectSystem || echo no)
    HY_PRIVATE_TMP=$(unit_get PrivateTmp || echo no) HY_PROTECT_HOME=$(unit_get ProtectHome || echo no)
    export HY_RW_DIRS HY_PROTECT_SYSTEM HY_PRIVATE_TMP HY_PROTECT_HOME
    exec $sbx setsid setpriv --reuid="$uid" --regid="$gid" --groups="$groups" $nnp $caps -- \
        env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin LANG=C.UTF-8 \
        USER="$u" LOGNAME="$u" HOME="$home" SHELL="$shell" $(cat "$T/unit.env" "$T/creds.env") $exec_start
) >"$T/service.log" 2>&1 </dev/null &
srv_pid=$!
set +f
sock=/run/hyserve/$inst/fcgi.sock
i=0
while [ ! -S "$sock" ] && kill -0 "$srv_pid" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.2; i=$((i + 1)); done
[ -S "$sock" ] || rc=1
ok $rc "hyserve@$inst started as the unit says: socket $sock ($groups, umask $umask_${nnp:+, $nnp})"
if [ $rc != 0 ]; then tail -30 "$T/service.log" | diag; skip_rest "the service did not start" "HTTPS" "purge"; finish; fi
pu=$(ps -o user= -p "$srv_pid" | tr -d ' ')
sm=$(stat -c '%U:%G %a' "$sock")
rc=1
[ "$pu" = "$u" ] && [ "$sm" = "$u:www-data 660" ] && rc=0
ok $rc "server runs as $pu; socket owner and mode $sm (nginx's www-data may connect)"
csock=/run/hyserve/$inst/ctl.sock
i=0
while [ ! -S "$csock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
cm=$(stat -c '%U:%G %a' "$csock" 2>/dev/null)
ok "$([ "$cm" = "$sm" ] && echo 0 || echo 1)" "the unit's control socket $csock: ${cm:-missing} like the FastCGI socket"
if [ -n "$sbx" ]; then
    # what the running server sees: / read-only, its own /tmp
    ro=$(awk '$5 == "/" { print $6 }' "/proc/$srv_pid/mountinfo" | tail -n 1)
    tmp=$(awk '$5 == "/tmp" { print $9 }' "/proc/$srv_pid/mountinfo" | tail -n 1)
    rc=1
    case $ro in ro,* | ro) [ "$tmp" = tmpfs ] && rc=0 ;; esac
    ok $rc "the server runs sandboxed: / mounted ${ro%%,*}, /tmp on ${tmp:-the host (shared)}, writable:$rwdirs ($sbx_note)"
else
    n=$((n + 1)); printf 'ok %d - file-system sandbox # SKIP %s\n' $n "$sbx_note"
fi

# ---- 6. nginx with the installed site, HTTPS ---------------------------------
port_free() { ! ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
port=8443
if ! port_free $port; then
    port=18443
    while ! port_free $port && [ $port -lt 18543 ]; do port=$((port + 1)); done
fi
site=/etc/nginx/sites-available/hyserve
if [ $port != 8443 ] || [ ! -e /proc/net/if_inet6 ]; then
    # the installed site with only the port changed (and no IPv6 listener
    # where the kernel has no IPv6)
    sed "s/:8443 /:$port /; s/listen 8443 /listen $port /" "$site" >"$T/site.conf"
    [ -e /proc/net/if_inet6 ] || sed -i '/listen[ \t]*\[::\]/d' "$T/site.conf"
    site=$T/site.conf
fi
mkdir -p "$T/nginx"
chmod 0755 "$T/nginx"
cat >"$T/nginx/nginx.conf" <<EOF
user www-data;
worker_processes 2;
pid $T/nginx/nginx.pid;
error_log $T/nginx/error.log notice;
events { worker_connections 256; }
http {
    include /etc/nginx/mime.types;
    access_log off;
    client_body_temp_path $T/nginx/body;
    fastcgi_temp_path $T/nginx/fastcgi;
    proxy_temp_path $T/nginx/proxy;
    uwsgi_temp_path $T/nginx/uwsgi;
    scgi_temp_path $T/nginx/scgi;
    include $site;
}
EOF
ngx="nginx -e $T/nginx/error.log -p $T/nginx/ -c $T/nginx/nginx.conf"
out=$($ngx -t -q 2>&1)
rc=$?
[ $rc = 0 ] || echo "$out" | diag
if [ $rc = 0 ]; then
    $ngx -g 'daemon off;' >>"$T/nginx/error.log" 2>&1 &
    ngx_pid=$!
    i=0
    while ! curl -s -o /dev/null --max-time 2 --cacert /etc/hyserve/tls/cert.pem \
            "https://localhost:$port/health" 2>/dev/null && kill -0 "$ngx_pid" 2>/dev/null && [ $i -lt 100 ]; do
        sleep 0.2; i=$((i + 1))
    done
    kill -0 "$ngx_pid" 2>/dev/null || rc=1
fi
ok $rc "nginx -t and start with the installed site on port $port"
if [ $rc != 0 ]; then tail -20 "$T/nginx/error.log" | diag; skip_rest "nginx did not start" "HTTPS" "purge"; finish; fi

url=https://localhost:$port
c() { curl -sS --max-time 120 --cacert /etc/hyserve/tls/cert.pem "$@"; }
code=$(c -o "$T/health.json" -w '%{http_code}' "$url/health" 2>"$T/curl.log")
ok "$([ "$code" = 200 ] && echo 0 || echo 1)" "GET /health over verified TLS: HTTP $code"
code=$(c -o "$T/nokey.json" -w '%{http_code}' "$url/v1/models" 2>>"$T/curl.log")
rc=1
[ "$code" = 401 ] && grep -q '"invalid_api_key"' "$T/nokey.json" && rc=0
ok $rc "no API key: HTTP $code with an OpenAI-shaped error"
# nginx handed that 401 to the instance (control socket), which counted it
hdr=$(c -s -D - -o /dev/null "$url/v1/models" 2>>"$T/curl.log" | tr -d '\r')
code=$(c -o "$T/metrics.txt" -w '%{http_code}' "$url/metrics/$inst" 2>>"$T/curl.log")
n401=$(sed -n 's/^hyserve_http_requests_total{origin="nginx",endpoint="\/v1\/models",code="401"} //p' "$T/metrics.txt")
rc=1
echo "$hdr" | grep -qi "^x-hyserve-colour: $inst" && [ "$code" = 200 ] && [ "$n401" = 2 ] && rc=0
ok $rc "nginx's 401s answered by hyserve@$inst and counted in /metrics/$inst (HTTP $code, ${n401:-no} count)"

code=$(c -o "$T/models.json" -w '%{http_code}' -H "Authorization: Bearer $key" "$url/v1/models" 2>>"$T/curl.log")
mid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["data"][0]["id"])' "$T/models.json" 2>/dev/null)
ok "$([ "$code" = 200 ] && [ -n "$mid" ] && echo 0 || echo 1)" "GET /v1/models with the key: HTTP $code, model '$mid'"

body='{"model":"'$mid'","prompt":"The capital of France is","max_tokens":8,"temperature":0}'
code=$(c -o "$T/compl.json" -w '%{http_code}' -H "Authorization: Bearer $key" \
    -H 'Content-Type: application/json' -d "$body" "$url/v1/completions" 2>>"$T/curl.log")
text=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
c = r["choices"][0]
assert r["object"] == "text_completion" and r["usage"]["completion_tokens"] > 0
print(repr(c["text"]))' "$T/compl.json" 2>"$T/py.log")
rc=1
[ "$code" = 200 ] && [ -n "$text" ] && [ "$text" != "''" ] && rc=0
ok $rc "POST /v1/completions through nginx: HTTP $code, text $text"
[ $rc = 0 ] || { cat "$T/compl.json" "$T/py.log" "$T/curl.log" | head -20 | diag; }

body='{"model":"'$mid'","messages":[{"role":"user","content":"Say hi."}],"max_tokens":8,"stream":true}'
code=$(c -N -o "$T/stream.txt" -w '%{http_code}' -H "Authorization: Bearer $key" \
    -H 'Content-Type: application/json' -d "$body" "$url/v1/chat/completions" 2>>"$T/curl.log")
ev=$(grep -c '^data: {' "$T/stream.txt")
rc=1
[ "$code" = 200 ] && [ "$ev" -ge 2 ] && [ "$(grep '^data: ' "$T/stream.txt" | tail -n 1)" = "data: [DONE]" ] && rc=0
ok $rc "streaming chat completion through nginx: HTTP $code, $ev events, ends with [DONE]"

# the installed hyserve-ctl revokes the key and reloads this nginx
out=$(HYSERVE_NGINX="$ngx" HYSERVE_NGINX_PID="$T/nginx/nginx.pid" /usr/sbin/hyserve-ctl key revoke pkgtest 2>&1)
rc=$?
code=$(c -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $key" "$url/v1/models" 2>>"$T/curl.log")
ok "$([ $rc = 0 ] && [ "$code" = 401 ] && echo 0 || echo 1)" "hyserve-ctl key revoke + reload: the key now gets HTTP $code ($out)"

# nginx is the only way in: www-data (nginx's user, allowed to connect to
# the socket) speaking FastCGI itself and claiming a key id gets 403
out=$(printf '{}' | setpriv --reuid=www-data --regid=www-data --clear-groups \
    env -i PATH=/usr/bin:/bin REQUEST_METHOD=POST DOCUMENT_URI=/v1/completions \
    REQUEST_URI=/v1/completions CONTENT_LENGTH=2 HYSERVE_KEY_ID=admin \
    cgi-fcgi -bind -connect "$sock" 2>&1)
rc=1
case $out in "Status: 403"*'"permission_error"'*) rc=0 ;; esac
ok $rc "cgi-fcgi as www-data on $sock claiming HYSERVE_KEY_ID=admin: $(printf '%s' "$out" | head -n 1 | tr -d '\r')"

# the monitoring files, where the scrape config says they are
mon=/usr/share/hyserve/monitoring
rc=0
for f in prometheus.yml hyserve-rules.yml hyserve-rules.test.yml grafana-hyserve.json; do
    grep -qx "$mon/$f" "$T/files.list" || rc=1
done
if [ $rc = 0 ] && command -v promtool >/dev/null 2>&1; then
    promtool check config "$mon/prometheus.yml" >"$T/promtool.log" 2>&1 || rc=1
    (cd "$mon" && promtool test rules hyserve-rules.test.yml) >>"$T/promtool.log" 2>&1 || rc=1
fi
ok $rc "the package ships $mon (scrape config, rules, their tests, dashboard)$(command -v promtool >/dev/null || echo '; promtool absent, not run')"
[ $rc = 0 ] || diag <"$T/promtool.log"

# ---- 7. stop as systemd would: SIGTERM, then the runtime directory goes ----
stop_nginx
kill -TERM "$srv_pid"
i=0
tos=$(unit_get TimeoutStopSec || echo 90)
tos=${tos%s}
case $tos in '' | *[!0-9]*) tos=90 ;; esac
while kill -0 "$srv_pid" 2>/dev/null && [ $i -lt $((tos * 5)) ]; do sleep 0.2; i=$((i + 1)); done
if kill -0 "$srv_pid" 2>/dev/null; then
    rc=1 st="still running after ${tos} s"
else
    wait "$srv_pid"
    rc=$? st="exit status $rc"
fi
srv_pid_was=$srv_pid
stop_server
left=$(pgrep -g "$srv_pid_was" 2>/dev/null | paste -sd' ' -)
[ -e "/dev/shm/hyserve-$inst" ] && { rc=1; st="$st, /dev/shm/hyserve-$inst left behind"; }
[ -z "$left" ] || { rc=1; st="$st, processes left: $left"; }
ok $rc "SIGTERM stops the service cleanly ($st)"
[ $rc = 0 ] || tail -20 "$T/service.log" | diag
for d in $(unit_get RuntimeDirectory || true); do rm -rf "/run/${d:?}"; done
rm -rf "$creds"

# ---- 8. remove, then purge ----------------------------------------------------
# The site enabled as README.Debian says; `dpkg -r` takes sites-available/
# hyserve away, so the enabled link must go too (nginx would not start with
# a dangling include), while the conffiles and the user stay until purge.
ln -s /etc/nginx/sites-available/hyserve /etc/nginx/sites-enabled/hyserve
dpkg -r hyserve >"$T/remove.log" 2>&1
rc=$?
st=$(dpkg-query -W -f='${db:Status-Status}' hyserve 2>/dev/null)
why="status $st"
[ "$st" = config-files ] || rc=1
{ [ -e /etc/nginx/sites-enabled/hyserve ] || [ -L /etc/nginx/sites-enabled/hyserve ]; } &&
    { rc=1; why="$why, sites-enabled/hyserve left dangling"; }
[ -f /etc/hyserve/hyserve.ini ] || { rc=1; why="$why, conffile hyserve.ini gone"; }
[ -e /usr/bin/hyserve ] && { rc=1; why="$why, /usr/bin/hyserve still there"; }
getent passwd hyserve >/dev/null || { rc=1; why="$why, user removed before purge"; }
ok $rc "dpkg -r hyserve keeps the configuration, drops the enabled site ($why)"
[ $rc = 0 ] || diag <"$T/remove.log"
rm -f /etc/nginx/sites-enabled/hyserve

# what the admin made is the admin's to remove (postrm keeps it)
rm -rf "/etc/hyserve/$inst.ini" /etc/hyserve/tls
dpkg --purge hyserve >"$T/purge.log" 2>&1
rc=$?
st=$(dpkg-query -W -f='${db:Status-Status}' hyserve 2>/dev/null)
[ -z "$st" ] || [ "$st" = not-installed ] || rc=1
ok $rc "dpkg --purge hyserve (status now: ${st:-not installed})"
[ $rc = 0 ] || diag <"$T/purge.log"
left=""
while read -r f; do
    [ "$f" = /. ] && continue
    { [ -e "$f" ] || [ -L "$f" ]; } || continue
    # directories the package shares with others (/etc/nginx, /usr/bin, and
    # /lib, a link to usr/lib on Debian 12) stay with their other owners
    dpkg -S "$f" >/dev/null 2>&1 && continue
    left="$left $f"
done <"$T/files.list"
for f in /etc/hyserve /run/hyserve /var/lib/hyserve /var/cache/hyserve /var/log/hyserve \
         /etc/nginx/sites-enabled/hyserve "/dev/shm/hyserve-$inst"; do
    { [ -e "$f" ] || [ -L "$f" ]; } && left="$left $f"
done
ok "$([ -z "$left" ] && echo 0 || echo 1)" "purge leaves no file of the package, /etc/hyserve or state behind${left:+:$left}"
rc=0
getent passwd hyserve >/dev/null && rc=1
getent group hyserve >/dev/null && rc=1
getent group www-data | cut -d: -f4 | tr ',' '\n' | grep -qx hyserve && rc=1
ok $rc "purge removed user and group hyserve (postrm promises it)"

# ---- 7. hyserve-cuda (build profile pkg.hyserve.cuda; needs nvcc) -------------
# Built and checked, not installed: this machine may have no GPU.  With one,
# the binary must also serve; without, it must refuse cleanly.
nvcc=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })
if [ -z "$nvcc" ]; then
    skip_rest "no nvcc" "hyserve-cuda built with the CUDA profile" "hyserve-cuda contents" \
        "hyserve-cuda lintian" "hyserve-cuda refuses or runs"
    finish
fi
start=$(date +%s)
(cd "$src" && DEB_BUILD_PROFILES=pkg.hyserve.cuda CUDA_DIR="$(dirname "$(dirname "$nvcc")")" \
    DEB_BUILD_OPTIONS="$opts" dpkg-buildpackage -us -uc -b) >"$T/build-cuda.log" 2>&1
rc=$?
cdeb=$T/src/hyserve-cuda_${ver}_$(dpkg --print-architecture).deb
[ $rc = 0 ] && [ -f "$cdeb" ] || rc=1
ok $rc "DEB_BUILD_PROFILES=pkg.hyserve.cuda builds $(basename "$cdeb") ($(($(date +%s) - start)) s)"
[ $rc = 0 ] || { grep -E 'error|Error|dh_[a-z_]+: ' "$T/build-cuda.log" | tail -30 | diag; finish; }
rm -rf "$T/cx" && dpkg-deb -x "$cdeb" "$T/cx"
rc=0 why=""
[ -x "$T/cx/usr/bin/hyserve-cuda" ] || { rc=1; why="$why no /usr/bin/hyserve-cuda;"; }
grep -q -- '--set engine.backend=cuda' "$T/cx/usr/lib/systemd/system/hyserve@.service.d/cuda.conf" 2>/dev/null ||
    { rc=1; why="$why no drop-in running the CUDA backend;"; }
objdump -p "$T/cx/usr/bin/hyserve-cuda" 2>/dev/null | grep -q 'NEEDED.*libcudart' ||
    { rc=1; why="$why binary does not link libcudart;"; }
dpkg-deb -f "$cdeb" Depends | grep -q "hyserve (= $ver)" || { rc=1; why="$why no Depends on hyserve (= $ver);"; }
ok $rc "hyserve-cuda: /usr/bin/hyserve-cuda linking libcudart, the hyserve@ drop-in, Depends on hyserve (= $ver)${why:+ -$why}"
if command -v lintian >/dev/null; then
    lintian "$cdeb" >"$T/lintian-cuda.log" 2>&1
    grep -E '^[WEXIP]: ' "$T/lintian-cuda.log" | diag
    errs=$(grep -c '^E: ' "$T/lintian-cuda.log")
    ok "$([ "$errs" = 0 ] && echo 0 || echo 1)" "lintian: no errors on hyserve-cuda ($errs E: tags)"
else
    ok 1 "lintian is missing (scripts/install-deps --test)"
fi
out=$("$T/cx/usr/bin/hyserve-cuda" run -m "$model" -p "The capital of France is" -n 4 --temp 0 \
    --backend cuda 2>&1 >"$T/cuda-run.out")
rc=$?
case "$rc:$out" in
0:*) ok 0 "hyserve-cuda run --backend cuda on the GPU: '$(cat "$T/cuda-run.out")'" ;;
"1:hyserve run: no CUDA device: "*) ok 0 "hyserve-cuda run --backend cuda without a GPU refuses cleanly ($out)" ;;
*) ok 1 "hyserve-cuda run --backend cuda: rc $rc, $out" ;;
esac
finish
