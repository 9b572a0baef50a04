#!/bin/sh
# test_fuzz_api.sh - a real, time-bounded libFuzzer run on the OpenAI request
# parser (tests/fuzz/fuzz_api.c): builds the target with clang
# -fsanitize=fuzzer,address,undefined, replays the checked-in seed corpus
# (tests/fuzz/corpus/api, one valid body per endpoint and feature), then
# mutates from it for HY_FUZZ_SECONDS (default 60).  Any crash, leak, UB
# report, timeout or RSS blow-up fails the test.  TAP.  Skips only when clang
# or its fuzzer runtime (libclang-rt-14-dev) is missing.
#
# Environment: HY_SRCDIR (source tree), HY_FUZZ_CC (default clang),
# HY_FUZZ_SECONDS.  On failure the work directory (binary, log, crash input)
# is kept and named in the output, with the command that reproduces it.
src=${HY_SRCDIR:-.}
cc=${HY_FUZZ_CC:-clang}
seconds=${HY_FUZZ_SECONDS:-60}
seeds="$src/tests/fuzz/corpus/api"
# What fuzz_api.c needs from the library, compiled with instrumentation so
# that libFuzzer sees the parser's coverage.  Keep in step with the
# #includes of src/server/api.c (a missing one shows up as a link error).
lib_sources="src/server/api.c src/server/sse.c src/server/stop.c src/server/json_out.c
src/ipc/request.c src/common/hy.c"
. "$src/tests/integration/taplib.sh"

# The whole run must be bounded and numeric: a typo in the environment
# would otherwise turn into an unbounded fuzz run in CI.
case $seconds in
'' | *[!0-9]*) echo "Bail out! HY_FUZZ_SECONDS='$seconds' is not a number of seconds"; exit 1 ;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/hyserve-fuzz-api.XXXXXX") || { echo "Bail out! mktemp"; exit 1; }
keep=0
cleanup() { [ "$keep" = 1 ] || rm -rf "$work"; }
trap cleanup EXIT

# Probe: does this clang link a fuzzer with ASan and UBSan at all?
printf '%s\n' '#include <stdint.h>' '#include <stddef.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
    >"$work/probe.c"
if ! command -v "$cc" >/dev/null 2>&1; then
    echo "1..0 # SKIP $cc not found (scripts/install-deps --test installs clang-14)"
    exit 0
fi
if ! "$cc" -fsanitize=fuzzer,address,undefined "$work/probe.c" -o "$work/probe" \
    >"$work/probe.log" 2>&1; then
    why=$(head -c 160 "$work/probe.log" | tr '\n' ' ')
    echo "1..0 # SKIP $cc has no fuzzer runtime (libclang-rt-14-dev): $why"
    exit 0
fi

cjson=$(pkg-config --cflags --libs libcjson 2>/dev/null) || cjson="-I/usr/include/cjson -lcjson"
set --
for f in $lib_sources; do set -- "$@" "$src/$f"; done
# -fno-sanitize-recover: a UB report aborts the input, so libFuzzer records
# it as a crash instead of printing and carrying on.
# shellcheck disable=SC2086
"$cc" -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$src/src" "$src/tests/fuzz/fuzz_api.c" "$@" $cjson -lm -o "$work/fuzz_api" \
    >"$work/build.log" 2>&1
rc=$?
ok $rc "fuzz_api builds with $cc -fsanitize=fuzzer,address,undefined"
if [ $rc != 0 ]; then
    sed 's/^/# /' "$work/build.log" | head -40
    echo "1..$n"
    exit 1
fi

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:allocator_may_return_null=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
flags="-rss_limit_mb=2048 -timeout=10 -max_len=4096 -print_final_stats=1 -artifact_prefix=$work/"

# report LOG: the sanitizer or libFuzzer verdict, as TAP comments
report() {
    grep -aA30 -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$1" |
        sed 's/^/# /'
}

# any_report LOG: 0 when the log holds a sanitizer or libFuzzer error
any_report() {
    grep -aqE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$1" ||
        grep -aqE '==[0-9]+== ?ERROR' "$1"
}

# 1. Every seed on its own (-runs=0 only replays the given inputs).
n_seeds=$(find "$seeds" -type f | wc -l)
# shellcheck disable=SC2086
"$work/fuzz_api" $flags -runs=0 "$seeds" >"$work/replay.log" 2>&1
rc=$?
any_report "$work/replay.log" && rc=1
[ "$n_seeds" -ge 8 ] || rc=1
ok $rc "the $n_seeds seed bodies of tests/fuzz/corpus/api replay without a report"
[ $rc = 0 ] || { keep=1; report "$work/replay.log"; }

# 2. The bounded mutation run.  New inputs go to a scratch corpus (first
# directory), never into the source tree.
mkdir "$work/corpus"
# shellcheck disable=SC2086
"$work/fuzz_api" $flags -max_total_time="$seconds" "$work/corpus" "$seeds" >"$work/fuzz.log" 2>&1
rc=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz.log")
new=$(sed -n 's/^stat::new_units_added: *//p' "$work/fuzz.log")
cov=$(grep -aoE 'cov: [0-9]+' "$work/fuzz.log" | tail -1)
any_report "$work/fuzz.log" && rc=1
# A run that exits 0 without executing anything would prove nothing.
[ "${runs:-0}" -gt "$n_seeds" ] || rc=1
ok $rc "libFuzzer ${seconds}s on the request parser: ${runs:-0} inputs, ${new:-0} new," \
    "${cov:-no coverage}, no crash/leak/UB"
if [ $rc != 0 ]; then
    keep=1
    report "$work/fuzz.log"
    crash=$(find "$work" -maxdepth 1 -name 'crash-*' -o -maxdepth 1 -name 'leak-*' -o \
        -maxdepth 1 -name 'timeout-*' -o -maxdepth 1 -name 'oom-*' | head -1)
    echo "# kept $work; reproduce: $work/fuzz_api ${crash:-$work/corpus}"
fi

echo "1..$n"
[ $fail = 0 ]
