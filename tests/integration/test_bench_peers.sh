#!/bin/sh
# test_bench_peers.sh - scripts/bench-peers refuses what it cannot run
# before it looks for a model or a peer: --ubatch outside 1..65536 or
# without --long, and the other numeric arguments out of range; and with
# stand-ins for hyserve and both peers' llama-bench (scripts that print a
# table whose figures say how they were called), the summary puts each
# run under its column: --fa-off's peer columns run with -fa 0, the
# others without it.  TAP.
src=${HY_SRCDIR:-.}
bp="$src/scripts/bench-peers"
. "$src/tests/integration/taplib.sh"

want="bench-peers: --ubatch takes 1..65536, with --long only"
check 2 "$want" "--ubatch without --long is refused" -- python3 "$bp" --ubatch 2048
check 2 "$want" "--ubatch 0 is refused" -- python3 "$bp" --long --ubatch 0
check 2 "$want" "--ubatch 65537 is refused" -- python3 "$bp" --long --ubatch 65537
check 2 "invalid int value" "--ubatch that is not a number is refused" -- \
    python3 "$bp" --long --ubatch many
check 2 "bench-peers: -r, -R and -t must be at least 1" "-r 0 is refused" -- \
    python3 "$bp" -r 0
check 2 "bench-peers: no model /nonexistent.gguf" "a valid --ubatch gets as far as the model" -- \
    python3 "$bp" --long --ubatch 2048 -m /nonexistent.gguf

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/llama" "$tmp/ik"
: > "$tmp/model.gguf"
# A tool's figure: its base, halved when called with -fa 0; pp and tg rows
# as the arguments ask for them (-p, -n and -d; ik_llama.cpp's -gp).
stand_in() { # FILE BASE
    cat > "$1" <<EOS
#!/bin/sh
base=$2 p=0 n=0 d=0 gp=
case " \$* " in *" -fa 0 "*) base=\$((base / 2)) ;; esac
while [ \$# -gt 0 ]; do
    case "\$1" in -p) p=\$2 ;; -n) n=\$2 ;; -d) d=\$2 ;; -gp) gp=\$2 ;; esac
    shift
done
echo "| model | test | t/s |"
echo "| --- | ---: | ---: |"
[ "\$p" != 0 ] && echo "| m | pp\$p | \$base.00 ± 0.00 |"
at=; [ "\$d" != 0 ] && at=" @ d\$d"
[ "\$n" != 0 ] && echo "| m | tg\$n\$at | \$((base + 1)).00 ± 0.00 |"
[ -n "\$gp" ] && echo "| m | tg32@pp16384 | \$((base + 1)).00 ± 0.00 |"
exit 0
EOS
    chmod +x "$1"
}
stand_in "$tmp/hyserve" 1000
stand_in "$tmp/llama/llama-bench" 100
stand_in "$tmp/ik/llama-bench" 200
run_bp() { HYSERVE="$tmp/hyserve" LLAMA_BIN="$tmp/llama" IK_BIN="$tmp/ik" \
    python3 "$bp" -m "$tmp/model.gguf" -r 1 -R 1 "$@"; }
check 0 "| test | hyserve | llama.cpp | ik_llama.cpp | llama.cpp -fa 0 | ik -fa 0 |" \
    "--fa-off adds a column per peer" -- run_bp -d 0 --fa-off
check 0 "| pp512 | 1000.0 (1000.0) | 100.0 (100.0) | 200.0 (200.0) | 50.0 (50.0) | 100.0 (100.0) |" \
    "--fa-off's columns ran with -fa 0, the others without" -- run_bp -d 0 --fa-off
check 0 "| tg32 @ d16384 | 1001.0 (1001.0) | 101.0 (101.0) | 201.0 (201.0) | 51.0 (51.0) | 101.0 (101.0) |" \
    "--long --fa-off: the 16K decode of each column" -- run_bp --long --fa-off
check 0 "| pp512 | 1000.0 (1000.0) | 100.0 (100.0) | 200.0 (200.0) |" \
    "without --fa-off no -fa 0 column" -- run_bp -d 0
finish
