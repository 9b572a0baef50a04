#!/bin/sh
# check-golden-gemma3.sh - check-golden.py against tests/golden/gemma3/: Gemma
# 3 270M (sliding-window layers; one prompt of 1,746 tokens, past the
# 512-token window) against transformers' float32 logits.  The model comes
# from scripts/fetch-model gemma3-270m; without it the check fails and says so.
src=${HY_SRCDIR:-.}
exec python3 "$src/tests/golden/check-golden.py" --golden "$src/tests/golden/gemma3" "$@"
