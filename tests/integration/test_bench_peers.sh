#!/bin/sh
# test_bench_peers.sh - scripts/bench-peers refuses what it cannot run
# before it looks for a model or a peer: --ubatch outside 1..65536 or
# without --long, and the other numeric arguments out of range.  TAP.
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
finish
