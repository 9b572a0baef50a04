#!/bin/sh
# test_device_check.sh - scripts/device-check's settings are checked before
# it looks for a GPU (a mistyped one costs no device time), each refused
# with the variable named; without a GPU it says so and exits 3.  TAP.
src=${HY_SRCDIR:-.}
dc="$src/scripts/device-check"
. "$src/tests/integration/taplib.sh"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

check 1 "HY_DEVICE_BUDGET = '8m': must be whole seconds" "a budget that is not seconds" -- \
    env HY_DEVICE_BUDGET=8m "$dc" "$tmp/log"
check 1 "HY_JOBS = '0': must be a number of jobs" "zero jobs" -- env HY_JOBS=0 "$dc" "$tmp/log"
check 1 "HY_DEVICE_BENCH = 'yes': must be 0 or 1" "a bench switch that is not 0 or 1" -- \
    env HY_DEVICE_BENCH=yes "$dc" "$tmp/log"
check 1 "HY_DEVICE_PREBUILT = '$tmp/none': no hyserve there" "a prebuilt folder without hyserve" -- \
    env HY_DEVICE_PREBUILT="$tmp/none" "$dc" "$tmp/log"
check 1 "HY_DEVICE_TESTS: 'test_cuda_atn' is no tests/cuda program" "a misspelt test program" -- \
    env HY_DEVICE_TESTS="test_cuda_ops test_cuda_atn" "$dc" "$tmp/log"
check 1 "HY_DEVICE_SMOL = '$tmp/smol.gguf': no such file" "a model file that is not there" -- \
    env HY_DEVICE_SMOL="$tmp/smol.gguf" "$dc" "$tmp/log"
if command -v nvidia-smi >/dev/null 2>&1; then
    skip_rest "this machine has nvidia-smi: the check would run" "without a GPU: exit 3, said"
else
    check 3 "device-check: no NVIDIA GPU" "without a GPU: exit 3, said" -- "$dc" "$tmp/log"
fi
finish
