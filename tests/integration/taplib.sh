# taplib.sh - the TAP helpers the shell integration tests share (the Python
# ones use taplib.py).  Sourced: `. "$top/tests/integration/taplib.sh"`.
# The plan goes last ("1..N" after the results), as TAP allows.
n=0 fail=0

ok() { # STATUS WHAT...: one TAP line, passing when STATUS is 0; failures are counted
    ok_rc_=$1
    shift
    n=$((n + 1))
    # printf, not echo: dash's echo would expand backslashes in the text
    if [ "$ok_rc_" = 0 ]; then
        printf 'ok %d - %s\n' $n "$*"
    else
        fail=$((fail + 1))
        printf 'not ok %d - %s\n' $n "$*"
    fi
}

check() { # WANT_RC "substring" WHAT -- COMMAND...: the command's exit status and
    # output (stdout and stderr together) hold what is wanted; a failure shows both
    ck_want_rc_=$1 ck_want_=$2 ck_what_=$3
    shift 4
    ck_out_=$("$@" 2>&1 </dev/null)
    ck_rc_=$?
    case "$ck_out_" in
    *"$ck_want_"*) [ "$ck_rc_" = "$ck_want_rc_" ] && { ok 0 "$ck_what_"; return; } ;;
    esac
    ok 1 "$ck_what_ (rc $ck_rc_, output: $ck_out_)"
}

diag() { sed 's/^/# /'; } # stdin as TAP comments

skip_rest() { # WHY WHAT...: the checks that depend on a failed step, skipped
    sr_why_=$1
    shift
    for sr_w_; do n=$((n + 1)); printf 'ok %d - %s # SKIP %s\n' $n "$sr_w_" "$sr_why_"; done
}

finish() { echo "1..$n"; exit 0; } # the plan; the "not ok" lines carry the failures
