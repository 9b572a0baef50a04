#!/bin/sh
# test_bench_sparse.sh - the sparse benchmark's settings (docs/sparse.md
# quotes its numbers): a bad value, an unknown setting, a flag without a
# value and a reference sequence not shorter than the long one are refused
# with one precise message; --ref runs both sequences and reports their
# ratio; the blocks a decode step reads, with top-k and top-p.  TAP.
hy=${HYSERVE:-./hyserve}
src=${HY_SRCDIR:-.}
bench="$(dirname "$hy")/tests/integration/bench_sparse"
select="$(dirname "$hy")/tests/unit/bench_select"
tiny="$src/tests/golden/tiny/qwen35-long.gguf"
. "$src/tests/integration/taplib.sh"

check 2 "bench_sparse: bad value for --ref: '-3'" "a negative --ref" -- \
    "$bench" "$tiny" decode 256 2 --dense 0 --ref -3
check 2 "bench_sparse: bad value for --last: '2x'" "a --last that is not a number" -- \
    "$bench" "$tiny" decode 256 2 --dense 0 --last 2x
check 2 "bench_sparse: bad value for --topp: '1.5' (0..1)" "a --topp past 1" -- \
    "$bench" "$tiny" decode 256 2 --dense 0 --topp 1.5
check 2 "bench_sparse: unknown setting --reff" "an unknown setting" -- \
    "$bench" "$tiny" decode 256 2 --dense 0 --reff 64
check 2 "bench_sparse: --ref needs a value" "a setting without its value" -- \
    "$bench" "$tiny" decode 256 2 --dense 0 --ref
check 1 "bench_sparse: --ref 256 is not shorter than 256" "a reference as long as the sequence" -- \
    "$bench" "$tiny" decode 256 2 --dense 0 --ref 256
check 0 "sparse: decode at 128, steps alternating with the above: median" \
    "--ref decodes the shorter sequence in the same run" -- \
    "$bench" "$tiny" decode 640 4 --dense 0 --min 256 --ref 128
# the blocks a decode step reads: top-1 past the sink and 4 local blocks
# (7 with its own); of the 5 others this random model's heads spread their
# attention evenly, so 3 hold half of it (top-p 0.5 up to 3 reads the cap,
# 9) but not 0.9 (top-p 0.9 up to 3 reads the top-1's 7), and the default
# top-p (0.99 up to 512) reads them all, 11
check 0 "sparse: decode steps at 640: 7.0 blocks read a step and KV head of a full layer" \
    "a top-1 decode step reads 7 blocks per KV head" -- \
    "$bench" "$tiny" decode 640 4 --dense 0 --min 256 --topk 1 --topp 0
check 0 "sparse: decode steps at 640: 9.0 blocks read a step and KV head of a full layer" \
    "with top-p 0.5 up to 3 blocks, 9" -- \
    "$bench" "$tiny" decode 640 4 --dense 0 --min 256 --topk 1 --topp 0.5 --max-blocks 3
check 0 "sparse: decode steps at 640: 7.0 blocks read a step and KV head of a full layer" \
    "with top-p 0.9 up to 3 blocks, which cannot hold it, the top-1's 7" -- \
    "$bench" "$tiny" decode 640 4 --dense 0 --min 256 --topk 1 --topp 0.9 --max-blocks 3
check 0 "sparse: decode steps at 640: 11.0 blocks read a step and KV head of a full layer" \
    "with the default top-p every block, 11" -- \
    "$bench" "$tiny" decode 640 4 --dense 0 --min 256 --topk 1
# the choice's own benchmark (PERFORMANCE.md section 41 quotes it): a top-p
# past 1 or a cap below the top-k refused; one head on random keys at 4,096
# blocks is flat past the cap, so top-p 0.99 chooses the top-64 and 5 more
check 2 "bench_select: top-p '1.5': a number in 0..1, with max_blocks >= topk" \
    "bench_select: a top-p past 1" -- "$select" 256 8 16 1 1 1.5
check 2 "bench_select: top-p '0.9': a number in 0..1, with max_blocks >= topk" \
    "bench_select: a cap below the top-k" -- "$select" 256 8 16 1 1 0.9 8
check 0 "us per choice, 69.0 blocks" "bench_select: one head, top-p 0.99 past the cap: the top-64 and 5" -- \
    "$select" 4096 8 64 2 1 0.99
finish
