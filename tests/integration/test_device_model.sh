#!/bin/sh
# test_device_model.sh - scripts/device-model (a model of another's shapes
# for a lent GPU machine, docs/PERFORMANCE.md section 20): the copy keeps
# the source's size and header byte for byte, hyserve plans it as the
# source and runs it; a truncated file and a file that is not GGUF are
# refused with the offset named.  TAP.
hy=${HYSERVE:-./hyserve}
src=${HY_SRCDIR:-.}
tiny="$src/tests/golden/tiny/qwen35-long.gguf"
dm="$src/scripts/device-model"
. "$src/tests/integration/taplib.sh"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

check 0 "56 tensors of $tiny, header 8352 bytes, 183936 bytes" "the copy is written" -- \
    python3 "$dm" "$tiny" "$tmp/copy.gguf"
[ "$(wc -c <"$tmp/copy.gguf")" = "$(wc -c <"$tiny")" ] && cmp -s -n 8352 "$tiny" "$tmp/copy.gguf"
ok $? "same size, the header (metadata, tokenizer, tensor table) byte for byte"
! cmp -s "$tiny" "$tmp/copy.gguf"
ok $? "the tensor data is not the source's (repeated from each tensor's first 4 KB)"
# The image and the model as loaded are measured from this process's own
# mappings (they move by a page between runs), and the bound adds them:
# everything planned from the file must be the same.
planned() { grep -v -e '(measured:' -e '^process bound' "$1"; }
"$hy" plan -m "$tiny" --context 4096 >"$tmp/plan.src" 2>&1 &&
    "$hy" plan -m "$tmp/copy.gguf" --context 4096 >"$tmp/plan.copy" 2>&1 &&
    grep -q '^process bound' "$tmp/plan.copy" &&
    [ "$(planned "$tmp/plan.src")" = "$(planned "$tmp/plan.copy")" ]
ok $? "hyserve plans the copy as the source (all but the measured image)"
check 0 "" "hyserve runs the copy" -- "$hy" run -m "$tmp/copy.gguf" -p "hello" -n 4 --temp 0
head -c 5000 "$tiny" >"$tmp/short.gguf"
check 1 "the file ends at 5000" "a truncated file is refused with the offset" -- \
    python3 "$dm" "$tmp/short.gguf" "$tmp/out.gguf"
printf 'not a model at all' >"$tmp/text.gguf"
check 1 "offset 0: not a GGUF file (magic)" "a file that is not GGUF is refused" -- \
    python3 "$dm" "$tmp/text.gguf" "$tmp/out.gguf"
finish
