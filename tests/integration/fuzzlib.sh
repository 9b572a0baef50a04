# fuzzlib.sh - a real, time-bounded libFuzzer run on one fuzz target of
# tests/fuzz/, shared by test_fuzz_api.sh and test_fuzz_gguf.sh.  Source it
# after taplib.sh, set the variables below, then call fuzz_run.  It builds
# the target with clang -fsanitize=fuzzer,address,undefined from the source
# tree, replays the checked-in seed corpus, then mutates from it for
# HY_FUZZ_SECONDS (default 60).  Any crash, leak, UB report, timeout or RSS
# blow-up fails the test.  clang and its fuzzer runtime come from
# `scripts/install-deps --test` (clang, libclang-rt-14-dev), so a missing one
# is a failure that names them, not a skip.
#
#   fuzz_name     the target: tests/fuzz/$fuzz_name.c
#   fuzz_sources  what it needs from src/ (instrumented, so libFuzzer sees
#                 their coverage); keep in step with their #includes (a
#                 missing file shows up as a link error)
#   fuzz_libs     extra link flags (e.g. cJSON's)
#   fuzz_seeds    the seed corpus directory, fuzz_min_seeds files at least
#   fuzz_max_len  libFuzzer's -max_len
#
# Environment: HY_SRCDIR (source tree), HY_FUZZ_CC (default clang),
# HY_FUZZ_SECONDS.  On failure the work directory (binary, log, crash input)
# is kept and named in the output, with the command that reproduces it.

fuzz_run() {
    cc=${HY_FUZZ_CC:-clang}
    seconds=${HY_FUZZ_SECONDS:-60}
    # The whole run must be bounded and numeric: a typo in the environment
    # would otherwise turn into an unbounded fuzz run in CI.
    case $seconds in
    '' | *[!0-9]*) echo "Bail out! HY_FUZZ_SECONDS='$seconds' is not a number of seconds"; exit 1 ;;
    esac
    work=$(mktemp -d "${TMPDIR:-/tmp}/hyserve-$fuzz_name.XXXXXX") || { echo "Bail out! mktemp"; exit 1; }
    keep=0
    trap '[ "$keep" = 1 ] || rm -rf "$work"' EXIT

    # Does this clang link a fuzzer with ASan and UBSan at all?
    printf '%s\n' '#include <stdint.h>' '#include <stddef.h>' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
        >"$work/probe.c"
    if ! command -v "$cc" >/dev/null 2>&1; then
        ok 1 "$cc not found (scripts/install-deps --test installs clang)"
        finish
    fi
    if ! "$cc" -fsanitize=fuzzer,address,undefined "$work/probe.c" -o "$work/probe" \
        >"$work/probe.log" 2>&1; then
        ok 1 "$cc has no fuzzer runtime (scripts/install-deps --test installs libclang-rt-14-dev):" \
            "$(head -c 160 "$work/probe.log" | tr '\n' ' ')"
        finish
    fi

    set --
    for f in $fuzz_sources; do set -- "$@" "$src/$f"; done
    # -fno-sanitize-recover: a UB report aborts the input, so libFuzzer
    # records it as a crash instead of printing and carrying on.
    # shellcheck disable=SC2086
    "$cc" -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -I"$src/src" "$src/tests/fuzz/$fuzz_name.c" "$@" $fuzz_libs -lm -o "$work/$fuzz_name" \
        >"$work/build.log" 2>&1
    rc=$?
    ok $rc "$fuzz_name builds with $cc -fsanitize=fuzzer,address,undefined"
    if [ $rc != 0 ]; then
        sed 's/^/# /' "$work/build.log" | head -40
        finish
    fi

    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:allocator_may_return_null=0"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
    flags="-rss_limit_mb=2048 -timeout=10 -max_len=$fuzz_max_len -print_final_stats=1 -artifact_prefix=$work/"

    # 1. Every seed on its own (-runs=0 only replays the given inputs).
    n_seeds=$(find "$fuzz_seeds" -type f | wc -l)
    # shellcheck disable=SC2086
    "$work/$fuzz_name" $flags -runs=0 "$fuzz_seeds" >"$work/replay.log" 2>&1
    rc=$?
    fuzz_any_report "$work/replay.log" && rc=1
    [ "$n_seeds" -ge "$fuzz_min_seeds" ] || rc=1
    ok $rc "the $n_seeds seeds of ${fuzz_seeds#"$src"/} replay without a report"
    [ $rc = 0 ] || { keep=1; fuzz_report "$work/replay.log"; }

    # 2. The bounded mutation run.  New inputs go to a scratch corpus (first
    # directory), never into the source tree.
    mkdir "$work/corpus"
    # shellcheck disable=SC2086
    "$work/$fuzz_name" $flags -max_total_time="$seconds" "$work/corpus" "$fuzz_seeds" \
        >"$work/fuzz.log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz.log")
    new=$(sed -n 's/^stat::new_units_added: *//p' "$work/fuzz.log")
    cov=$(grep -aoE 'cov: [0-9]+' "$work/fuzz.log" | tail -1)
    fuzz_any_report "$work/fuzz.log" && rc=1
    # A run that exits 0 without executing anything would prove nothing.
    [ "${runs:-0}" -gt "$n_seeds" ] || rc=1
    ok $rc "libFuzzer ${seconds}s on $fuzz_name: ${runs:-0} inputs, ${new:-0} new," \
        "${cov:-no coverage}, no crash/leak/UB"
    if [ $rc != 0 ]; then
        keep=1
        fuzz_report "$work/fuzz.log"
        crash=$(find "$work" -maxdepth 1 -name 'crash-*' -o -maxdepth 1 -name 'leak-*' -o \
            -maxdepth 1 -name 'timeout-*' -o -maxdepth 1 -name 'oom-*' | head -1)
        echo "# kept $work; reproduce: $work/$fuzz_name ${crash:-$work/corpus}"
    fi
    finish
}

# fuzz_report LOG: the sanitizer or libFuzzer verdict, as TAP comments
fuzz_report() {
    grep -aA30 -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$1" |
        sed 's/^/# /'
}

# fuzz_any_report LOG: 0 when the log holds a sanitizer or libFuzzer error
fuzz_any_report() {
    grep -aqE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$1" ||
        grep -aqE '==[0-9]+== ?ERROR' "$1"
}
