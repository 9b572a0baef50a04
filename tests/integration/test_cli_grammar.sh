#!/bin/sh
# test_cli_grammar.sh - the offline constrained-decoding flags: hyserve run
# --grammar / --json-schema / --json refuse bad input with one precise
# message, constrain the tiny model's sampled output, and hyserve bench
# --offline reports the grammar's cost.  TAP.
hy=${HYSERVE:-./hyserve}
src=${HY_SRCDIR:-.}
tiny="$src/tests/golden/tiny/llama.gguf"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$src/tests/integration/taplib.sh"

printf '{"type":"string","foo":1}' >"$tmp/unsupported.json"
printf '{"type":' >"$tmp/broken.json"
printf 'root ::= [a-c]{5} tail\n' >"$tmp/undefined.gbnf"
printf 'root ::= [a-c]{5}\n' >"$tmp/five.gbnf"
printf '{"type":"object","properties":{"n":{"type":"integer","minimum":10,"maximum":99}},"required":["n"],"additionalProperties":false}' >"$tmp/n.json"
printf '{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"}}},"required":["tags"],"additionalProperties":false}' >"$tmp/tags.json"

check 1 "hyserve run: cannot open $tmp/missing.json" "run: --json-schema of a missing file" -- \
    "$hy" run -m "$tiny" -p hi --json-schema "$tmp/missing.json"
check 1 "hyserve run: $tmp/broken.json: not valid JSON" "run: --json-schema that is not JSON" -- \
    "$hy" run -m "$tiny" -p hi --json-schema "$tmp/broken.json"
check 1 "hyserve run: $tmp/unsupported.json: /: keyword 'foo' is not supported" \
    "run: --json-schema with an unsupported keyword" -- \
    "$hy" run -m "$tiny" -p hi --json-schema "$tmp/unsupported.json"
check 1 "offset 18 (line 1, column 19): rule 'tail' is used but never defined" \
    "run: --grammar with an undefined rule" -- \
    "$hy" run -m "$tiny" -p hi --grammar "$tmp/undefined.gbnf"
check 1 "give at most one of --grammar, --json-schema and --json" "run: two constraints" -- \
    "$hy" run -m "$tiny" -p hi --json --grammar "$tmp/five.gbnf"

# sampled at temperature 1 from the tiny random model: only the grammar
# can make these outputs what they are
for seed in 1 2 3; do
    n=$((n + 1))
    out=$("$hy" run -m "$tiny" -p hi --grammar "$tmp/five.gbnf" --temp 1 --top-k 0 --top-p 1 \
          --min-p 0 --seed $seed -n 20 -t 1 2>"$tmp/err")
    if printf '%s' "$out" | grep -qx '[a-c]\{5\}' && grep -q "grammar complete" "$tmp/err"; then
        echo "ok $n - run --grammar, seed $seed: '$out', complete"
    else
        fail=$((fail + 1))
        echo "not ok $n - run --grammar, seed $seed: '$out' ($(cat "$tmp/err"))"
    fi
done
n=$((n + 1))
out=$("$hy" run -m "$tiny" -p hi --json-schema "$tmp/n.json" --temp 1 --seed 4 -n 40 -t 1 2>"$tmp/err" |
      tr '\n\t' '  ')
if grep -q "grammar complete" "$tmp/err" && printf '%s' "$out" | tr -d ' ' | grep -Eqx '\{"n":[1-9][0-9]\}'; then
    echo "ok $n - run --json-schema: '$out'"
else
    fail=$((fail + 1))
    echo "not ok $n - run --json-schema: '$out' ($(cat "$tmp/err"))"
fi
n=$((n + 1))
out=$("$hy" run -m "$tiny" -p hi --grammar "$tmp/five.gbnf" --temp 1 --seed 5 -n 3 -t 1 2>&1 >/dev/null)
case "$out" in
*"grammar incomplete (cut at --n-predict)"*) echo "ok $n - run --grammar cut by -n says so" ;;
*) fail=$((fail + 1)); echo "not ok $n - run --grammar cut by -n: $out" ;;
esac

# an open array the random model rarely ends by itself within 12 tokens
# (the shortest answer, {"tags":[]}, takes 11): the token budget closes it
# in time - a valid document either way, and closed (not the model's own
# end) for at least one of the seeds
closed=0
for seed in 1 3 5; do
    n=$((n + 1))
    "$hy" run -m "$tiny" -p hi --json-schema "$tmp/tags.json" --temp 1 --seed $seed -n 12 -t 1 \
        >"$tmp/out" 2>"$tmp/err"
    grep -q "grammar closed early to fit --n-predict" "$tmp/err" && closed=$((closed + 1))
    if grep -Eq "grammar (closed early to fit --n-predict|complete)" "$tmp/err" &&
       python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert isinstance(d["tags"], list)' "$tmp/out" 2>/dev/null; then
        echo "ok $n - run --json-schema -n 12, seed $seed: a valid document within the budget: '$(cat "$tmp/out" | tr '\n\t' '  ')'"
    else
        fail=$((fail + 1))
        echo "not ok $n - run --json-schema -n 12, seed $seed: '$(cat "$tmp/out")' ($(cat "$tmp/err"))"
    fi
done
n=$((n + 1))
if [ "$closed" -ge 1 ]; then
    echo "ok $n - $closed of 3 of those were closed by the token budget"
else
    fail=$((fail + 1))
    echo "not ok $n - none of the 3 was closed by the token budget"
fi

check 0 "grammar requests=4 compiles=1" "bench --offline --json-schema reports the grammar's cost" -- \
    "$hy" bench --offline -m "$tiny" --json-schema "$tmp/n.json" --temperature 1 --concurrency 2 \
    --requests 4 --prompt-tokens 8 --max-tokens 16 -t 1
check 2 "hyserve bench: $tmp/unsupported.json: /: keyword 'foo' is not supported" \
    "bench --offline refuses a bad schema before loading" -- \
    "$hy" bench --offline -m "$tiny" --json-schema "$tmp/unsupported.json"

finish
