#!/bin/sh
# test_cli.sh - every hyserve subcommand refuses bad flags and bad input with
# its exit status (2 = usage, 1 = runtime) and one precise message.  TAP.
hy=${HYSERVE:-./hyserve}
src=${HY_SRCDIR:-.}
tiny="$src/tests/golden/tiny/llama.gguf"
n=0 fail=0

# check WANT_RC "expected stderr substring" what -- command...
check() {
    want_rc=$1 want=$2 what=$3
    shift 4
    err=$("$@" 2>&1 >/dev/null </dev/null)
    rc=$?
    n=$((n + 1))
    case "$err" in
    *"$want"*) [ "$rc" = "$want_rc" ] && { echo "ok $n - $what"; return; } ;;
    esac
    fail=$((fail + 1))
    echo "not ok $n - $what (rc $rc, stderr: $err)"
}

check 2 "hyserve run: --temp = 'abc': must be a number in 0..100" "run: non-numeric --temp" -- \
    "$hy" run -m "$tiny" -p hi --temp abc
check 2 "hyserve run: --top-p = '2': must be a number in 0..1" "run: --top-p out of range" -- \
    "$hy" run -m "$tiny" -p hi --top-p 2
check 2 "hyserve run: --n-predict = '12abc': must be an integer" "run: trailing garbage in -n" -- \
    "$hy" run -m "$tiny" -p hi -n 12abc
check 2 "give the prompt with exactly one of -p TEXT or -f FILE" "run: no prompt" -- \
    "$hy" run -m "$tiny"
check 1 "hyserve run: /nonexistent.gguf: cannot open" "run: missing model file" -- \
    "$hy" run -m /nonexistent.gguf -p hi
check 1 "has no tokenizer.chat_template; --chat needs one" "run: --chat without a template" -- \
    "$hy" run -m "$tiny" -p hi --chat -n 1
check 2 "hyserve plan: --kv-type = 'q4': must be f16, f32 or q8_0" "plan: unknown --kv-type" -- \
    "$hy" plan -m "$tiny" --kv-type q4
check 2 "hyserve plan: --chunk = '0': must be an integer in 1..1073741824" "plan: zero --chunk" -- \
    "$hy" plan -m "$tiny" --chunk 0
check 2 "hyserve bench: --repetitions = '0': must be an integer in 1..1000" "bench: zero repetitions" -- \
    "$hy" bench -m "$tiny" -r 0
check 2 "hyserve bench: --act-bits = '4': must be 8 or 16" "bench: --act-bits 4" -- \
    "$hy" bench -m "$tiny" --act-bits 4
check 2 "hyserve run: --act-bits = '': must be 8 or 16" "run: empty --act-bits" -- \
    "$hy" run -m "$tiny" -p hi --act-bits ""
check 2 "hyserve bench: --weights-memory = 'thp': must be huge_pages or mmap" \
    "bench: --weights-memory thp" -- "$hy" bench -m "$tiny" --weights-memory thp
check 2 "hyserve run: --weights-memory = '': must be huge_pages or mmap" \
    "run: empty --weights-memory" -- "$hy" run -m "$tiny" -p hi --weights-memory ""
check 2 "hyserve eval: --ids FILE and --out FILE are required" "eval: missing --out" -- \
    "$hy" eval -m "$tiny" --ids /dev/null
check 2 "hyserve eval: --rows = '3,1': expected ascending positions separated by commas, at byte 2" \
    "eval: --rows out of order" -- "$hy" eval -m "$tiny" --ids /dev/null --out /dev/null --rows 3,1
check 1 "hyserve eval: --rows: position 9 is past the last of 2 ids" "eval: --rows past the end" -- \
    sh -c 'echo "5 7" | "$0" eval -m "$1" --ids /dev/stdin --out /dev/null --rows 0,9' "$hy" "$tiny"
check 1 "'99999' at byte 2 is not a token id (0..263)" "detokenize: id outside the vocabulary" -- \
    sh -c 'echo "5 99999" | "$0" detokenize -m "$1"' "$hy" "$tiny"
check 1 "'x7' at byte 2 is not a token id (0..263)" "detokenize: quotes only the bad word" -- \
    sh -c 'printf "5 x7 8\\n" | "$0" detokenize -m "$1"' "$hy" "$tiny"
check 2 "hyserve: unknown command 'frob'" "unknown subcommand" -- "$hy" frob
check 1 "hyserve run: backend 'tpu': must be one of cpu|cuda" "run: unknown --backend" -- \
    "$hy" run -m "$tiny" -p hi -n 1 --backend tpu
check 2 "[engine] backend = gpu: must be one of cpu|cuda" "serve: unknown engine.backend" -- \
    "$hy" serve --set engine.backend=gpu --set model.path="$tiny"
check 1 "hyserve run: --sparse-block-tokens = 24: must be a multiple of the 16-token KV page" \
    "run: --sparse-block-tokens not whole pages" -- \
    "$hy" run -m "$tiny" -p hi -n 1 --sparse --sparse-block-tokens 24
check 2 "hyserve run: --sparse-topk = '-1': must be an integer in 0..1048576" "run: negative --sparse-topk" -- \
    "$hy" run -m "$tiny" -p hi -n 1 --sparse --sparse-topk -1
check 2 "hyserve run: --sparse-topp = '2': must be a number in 0..1" "run: --sparse-topp past 1" -- \
    "$hy" run -m "$tiny" -p hi -n 1 --sparse --sparse-topp 2
check 1 "hyserve run: --sparse-max-blocks = 8: must be at least --sparse-topk (64) with --sparse-topp = 0.5" \
    "run: --sparse-max-blocks below --sparse-topk with --sparse-topp" -- \
    "$hy" run -m "$tiny" -p hi -n 1 --sparse --sparse-topp 0.5 --sparse-max-blocks 8
sp_tmp=$(mktemp -d)
check 1 "[attention] sink_tokens = 48: must be a multiple of [attention] sparse_block_tokens (64)" \
    "serve: [attention] sink_tokens not whole blocks, refused at start" -- \
    "$hy" serve --set attention.sparse=block --set attention.sink_tokens=48 \
    --set model.path="$tiny" --set server.socket="$sp_tmp/s.sock" \
    --set server.instance="clisparse$$" --set server.workers=1 --set log.socket="$sp_tmp/nolog"
# through the engine (hyserve run): every block chosen from position 0
# writes the dense text; one block of 16 tokens past 64 writes another
sp_p=$(for i in $(seq 1 20); do printf "cat sat %d. " "$i"; done)
"$hy" run -m "$tiny" -p "$sp_p" -n 24 --temp 0 --ignore-eos >"$sp_tmp/dense" 2>/dev/null
"$hy" run -m "$tiny" -p "$sp_p" -n 24 --temp 0 --ignore-eos --sparse --sparse-min-tokens 0 \
    --sparse-topk 1048576 --sparse-topp 0 --sparse-block-tokens 16 --sparse-sink-tokens 0 \
    --sparse-local-tokens 0 >"$sp_tmp/all" 2>"$sp_tmp/all.err"
"$hy" run -m "$tiny" -p "$sp_p" -n 24 --temp 0 --ignore-eos --sparse --sparse-min-tokens 64 \
    --sparse-topk 1 --sparse-topp 0 --sparse-block-tokens 16 --sparse-sink-tokens 16 \
    --sparse-local-tokens 16 >"$sp_tmp/few" 2>"$sp_tmp/few.err"
"$hy" run -m "$tiny" -p "$sp_p" -n 24 --temp 0 --ignore-eos --sparse --sparse-min-tokens 64 \
    --sparse-topk 1 --sparse-topp 0.9 --sparse-max-blocks 3 --sparse-block-tokens 16 \
    --sparse-sink-tokens 16 --sparse-local-tokens 16 >"$sp_tmp/topp" 2>"$sp_tmp/topp.err"
# the attention line counts each computed position (the prompt and all but
# the last generated token) on its path, and the blocks it read: every
# earlier block and its own in the first run; sink + local + top-1 and its
# own (4) past position 64 in the second; per layer and KV head alike; with
# top-p past the top-1 more, at most top-3's (this random model's heads
# spread their attention: it reads more where 3 blocks hold 0.9 of it, the
# top-1 where they cannot)
n=$((n + 1))
if python3 - "$sp_tmp/all.err" "$sp_tmp/few.err" "$sp_tmp/topp.err" <<'PY'
import re, sys
def counts(path):
    t = open(path).read()
    p = int(re.search(r"prompt (\d+) tokens", t).group(1))
    d, s, b = map(int, re.search(r"attention: (\d+) tokens dense, (\d+) block-sparse, (\d+) blocks", t).groups())
    return p + 23, d, s, b
n, d, s, b = counts(sys.argv[1])
every = sum(q // 16 + 1 for q in range(n))
assert d == 0 and s == n and b % every == 0, (n, d, s, b, every)
units = b // every
n2, d2, s2, b2 = counts(sys.argv[2])
assert n2 == n and d2 == 64 and s2 == n - 64 and b2 == 4 * units * s2, (n2, d2, s2, b2, units)
n3, d3, s3, b3 = counts(sys.argv[3])
cap = sum(min(q // 16, 1 + 1 + 3) + 1 for q in range(64, n))
assert n3 == n and d3 == 64 and s3 == s2 and b2 < b3 <= cap * units, (n3, d3, s3, b3, b2, cap)
PY
then
    echo "ok $n - run --sparse: the attention line counts dense and sparse positions and the blocks they read (top-k and top-p)"
else
    fail=$((fail + 1))
    echo "not ok $n - run --sparse attention line: $(grep attention "$sp_tmp/all.err") / $(grep attention "$sp_tmp/few.err") / $(grep attention "$sp_tmp/topp.err")"
fi
n=$((n + 1))
if [ -s "$sp_tmp/dense" ] && cmp -s "$sp_tmp/dense" "$sp_tmp/all" && ! cmp -s "$sp_tmp/dense" "$sp_tmp/few"; then
    echo "ok $n - run: --sparse choosing every block writes the dense text, a few blocks another"
else
    fail=$((fail + 1))
    echo "not ok $n - run: --sparse choosing every block writes the dense text, a few blocks another"
fi
# --hot-tokens: a ~5,500-token prompt on the tiny long-context hybrid with a
# 576-token hot window writes the all-hot text from a pool of a few windows
long="$src/tests/golden/tiny/qwen35-long.gguf"
head -c 6000 "$src/docs/tiers.md" >"$sp_tmp/long.txt"
for h in 0 576; do
    "$hy" run -m "$long" -f "$sp_tmp/long.txt" -n 16 --ctx 8192 --temp 0 --ignore-eos --sparse \
        --sparse-min-tokens 64 --hot-tokens $h >"$sp_tmp/hot$h" 2>"$sp_tmp/hot$h.err"
done
# and with the out arena's RAM limited (1 MiB holds all of this one: the
# spill file is there, unused; test_tiers.py spills through the server)
"$hy" run -m "$long" -f "$sp_tmp/long.txt" -n 16 --ctx 8192 --temp 0 --ignore-eos --sparse \
    --sparse-min-tokens 64 --hot-tokens 576 --seq-warm-mb 1 --spill-dir "$sp_tmp/spill" \
    >"$sp_tmp/spill.out" 2>"$sp_tmp/spill.err"
n=$((n + 1))
pool() { sed -n 's/.*kv pool [0-9.]* MiB (\([0-9]*\) pages.*/\1/p' "$1"; }
# the same blocks read in both runs; with the window most from the out arena
# (all of them from the arena's RAM: no spill file)
reads() { sed -n "s/.* \\([0-9]*\\) blocks read (\\([0-9]*\\) from the pool, \\([0-9]*\\) from the out arena's RAM, \\([0-9]*\\) with a page from its spill file).*/\\1 \\2 \\3 \\4/p" "$1"; }
set -- $(reads "$sp_tmp/hot0.err") $(reads "$sp_tmp/hot576.err")
if [ -s "$sp_tmp/hot0" ] && cmp -s "$sp_tmp/hot0" "$sp_tmp/hot576" &&
    [ "$(pool "$sp_tmp/hot576.err")" -lt "$(pool "$sp_tmp/hot0.err")" ] &&
    [ $# = 8 ] && [ "$1" = "$5" ] && [ "$3" = 0 ] && [ "$4" = 0 ] && [ "$7" -gt "$6" ] &&
    [ "$8" = 0 ]; then
    echo "ok $n - run --hot-tokens 576: the all-hot text from a pool of $(pool "$sp_tmp/hot576.err") pages (all hot: $(pool "$sp_tmp/hot0.err")); of $5 blocks read, $7 from the out arena's RAM, $8 from disk"
else
    fail=$((fail + 1))
    echo "not ok $n - run --hot-tokens: $(tail -2 "$sp_tmp/hot576.err") / $(tail -1 "$sp_tmp/hot0.err")"
fi
n=$((n + 1))
if [ -s "$sp_tmp/hot0" ] && cmp -s "$sp_tmp/hot0" "$sp_tmp/spill.out" &&
    grep -q "out arena: 472 pages, 472 of them in RAM; spill file 0.00 MiB" "$sp_tmp/hot576.err" &&
    grep -q "out arena: 472 pages, 472 of them in RAM; spill file 0.00 MiB" "$sp_tmp/spill.err"; then
    echo "ok $n - run --seq-warm-mb 1 --spill-dir: the all-hot text; the arena's line"
else
    fail=$((fail + 1))
    echo "not ok $n - run --seq-warm-mb: $(grep 'out arena' "$sp_tmp/hot576.err") / $(tail -2 "$sp_tmp/spill.err")"
fi
check 1 "hyserve run: --seq-warm-mb = 1: needs --spill-dir" \
    "run: --seq-warm-mb without --spill-dir is refused" -- \
    "$hy" run -m "$long" -p hi -n 1 --sparse --sparse-min-tokens 64 --hot-tokens 576 --seq-warm-mb 1
check 1 "hyserve run: --hot-tokens = 576: needs block-sparse attention (--sparse" \
    "run: --hot-tokens without --sparse is refused" -- \
    "$hy" run -m "$long" -p hi -n 1 --hot-tokens 576
rm -rf "$sp_tmp"
# without CUDA built: says so; with CUDA built on a machine without a GPU:
# names the missing device.  Either way a clear refusal, not a crash.
n=$((n + 1))
err=$("$hy" run -m "$tiny" -p hi -n 1 --backend cuda 2>&1 >/dev/null)
rc=$?
case "$rc:$err" in
"1:hyserve run: hyserve was built without CUDA (configure --with-cuda)" | "1:hyserve run: no CUDA device: "*)
    echo "ok $n - run --backend cuda refuses cleanly ($err)" ;;
*)
    fail=$((fail + 1))
    echo "not ok $n - run --backend cuda: rc $rc, stderr: $err" ;;
esac
check 2 "hyserve bench: --ubatch = '0': must be an integer in 1..65536" "bench: zero --ubatch" -- \
    "$hy" bench -m "$tiny" -u 0
check 2 "hyserve bench: --n-depth = 'x': must be an integer in 0..1048576" "bench: bad --n-depth" -- \
    "$hy" bench -m "$tiny" -d x
n=$((n + 1))
out=$("$hy" bench -m "$tiny" -p 8 -n 2 -d 20 -r 1 -t 1 2>&1)
case "$out" in
*"| pp8 @ d20 |"*"| tg2 @ d20 |"*) echo "ok $n - bench -d: tests named pp8 @ d20, tg2 @ d20" ;;
*)
    fail=$((fail + 1))
    echo "not ok $n - bench -d: $out" ;;
esac
check 2 "hyserve bench: --kv-type = 'q4_0': must be f16, f32 or q8_0" "bench: unknown --kv-type" -- \
    "$hy" bench -m "$tiny" --kv-type q4_0
check 2 "hyserve run: --kv-type = '': must be f16, f32 or q8_0" "run: empty --kv-type" -- \
    "$hy" run -m "$tiny" -p hi --kv-type ""
# the flag reaches the cache: the tiny llama's 16-wide heads cannot take q8_0
check 1 "kv: q8_0 cache needs head sizes that are multiples of 32 (k 16, v 16)" \
    "run: --kv-type q8_0 on 16-wide heads" -- "$hy" run -m "$tiny" -p hi -n 2 --kv-type q8_0
n=$((n + 1))
a=$("$hy" run -m "$src/tests/golden/tiny/gemma3.gguf" -p "hello there" -n 8 --temp 0 -t 1 \
    --kv-type q8_0 2>/dev/null)
rc=$?
if [ "$rc" = 0 ] && [ -n "$a" ]; then
    echo "ok $n - run --kv-type q8_0 on the tiny Gemma 3 (32-wide heads): 8 tokens"
else
    fail=$((fail + 1))
    echo "not ok $n - run --kv-type q8_0: rc $rc, '$a'"
fi
# --membw counts the KV a token reads: the tiny Gemma 3 has one global layer
# (256 bytes a position in f16, 136 in q8_0) and five sliding ones of window
# 16 (1,280 and 680 bytes a position): at the tokens' mean position 402,
# 256 * 402 + 1280 * 16 = 0.12 MB in f16, 136 * 402 + 680 * 16 = 0.07 MB in q8_0
for kv in f16:0.12 q8_0:0.07; do
    n=$((n + 1))
    out=$("$hy" bench -m "$src/tests/golden/tiny/gemma3.gguf" -p 0 -n 4 -d 400 -r 1 -t 1 \
        --membw --kv-type "${kv%:*}" 2>&1)
    case "$out" in
    *"| tg4 @ d400 |"*"KV ${kv#*:} MB: ${kv%:*} at the tokens' mean position 402"*"on huge pages"*)
        echo "ok $n - bench --membw --kv-type ${kv%:*}: the KV read at 402 positions, ${kv#*:} MB" ;;
    *)
        fail=$((fail + 1))
        echo "not ok $n - bench --membw --kv-type ${kv%:*}: $out" ;;
    esac
done
check 1 "hyserve bench: backend 'gpu': must be one of cpu|cuda" "bench: unknown --backend" -- \
    "$hy" bench -m "$tiny" -p 16 -n 0 -r 1 --backend gpu
check 2 "hyserve bench: --ttft-prefix = 0: must be an integer in 32..65536" "bench: --ttft-prefix too small" -- \
    "$hy" bench --offline -m "$src/tests/golden/tiny/lfm2.gguf" --ttft-prefix=0

# hyserve plan on a model with sliding-window layers (tiny gemma3: five of
# window 16, one global): at 4096 tokens they have their own page group of
# the window + one chunk; with --swa-full they keep every position.
n=$((n + 1))
g3="$src/tests/golden/tiny/gemma3.gguf"
out=$("$hy" plan -m "$g3" --context 4096 --chunk 64 --json 2>&1)
full=$("$hy" plan -m "$g3" --context 4096 --chunk 64 --swa-full --json 2>&1)
case "$out|$full" in
*'"pages":256,'*'"swa_window":16,"swa_layers":5,'*'"swa_pages":6,'*'"seq_swa_tokens":16,'*'|'*'"swa_full":true,"swa_window":0,"swa_layers":0,'*'"swa_pages":0,'*)
    echo "ok $n - plan: the sliding layers' own page group (6 pages of window + chunk), none with --swa-full" ;;
*)
    fail=$((fail + 1))
    echo "not ok $n - plan --json on gemma3: $out / $full" ;;
esac
n=$((n + 1))
out=$("$hy" plan -m "$g3" --context 4096 2>&1)
case "$out" in
*"sliding window     16 tokens in 5 of 6 layers: their own page group"*"sliding KV pages"*"dense equivalent"*)
    echo "ok $n - plan: the table shows the sliding page group next to the dense equivalent" ;;
*)
    fail=$((fail + 1))
    echo "not ok $n - plan on gemma3: $out" ;;
esac
# --sparse: the page keys beside each global layer's page and each
# sequence's block keys (a 64-token block's key per page's), in the totals
n=$((n + 1))
out=$("$hy" plan -m "$g3" --context 4096 --sparse --json 2>&1)
if printf '%s' "$out" | python3 -c 'import json, sys
p = json.load(sys.stdin)
assert p["sparse_key_bytes"] > 0
assert p["sparse_seq_bytes"] == 4096 // 64 * p["sparse_key_bytes"]
assert p["kv_total"] == (p["page_bytes"] + p["sparse_key_bytes"]) * p["pages"] + p["sparse_seq_bytes"] * p["sequences"] + p["swa_page_bytes"] * p["swa_pages"]' 2>/dev/null; then
    echo "ok $n - plan --sparse: page keys per full page and block keys per sequence, counted in kv_total"
else
    fail=$((fail + 1))
    echo "not ok $n - plan --sparse on gemma3: $out"
fi
# --hot-tokens: the pool holds the windows, the out arena the rest, both in the totals
n=$((n + 1))
out=$("$hy" plan -m "$g3" --context 65536 --seqs 2 --sparse --hot-tokens 10240 --json 2>&1)
if printf '%s' "$out" | python3 -c 'import json, sys
p = json.load(sys.stdin)
assert p["hot_blocks"] == 160 and p["pages"] == 2 * ((1 + 160 + 1) * 4 + 33)
assert p["out_seq_pages"] == 65536 // 16 - 161 * 4
assert p["out_total"] == 2 * p["out_seq_pages"] * p["page_bytes"]
assert p["out_warm_pages"] == 2 * p["out_seq_pages"] and p["out_file"] == 0
# per page 18 bytes of index and 29 of its slot, one unused CRC (no file)
assert p["out_ram"] == p["out_total"] + 47 * p["out_warm_pages"] + 4
assert p["kv_total"] == (p["page_bytes"] + p["sparse_key_bytes"]) * p["pages"] + p["sparse_seq_bytes"] * 2 + p["out_ram"] + p["swa_page_bytes"] * p["swa_pages"]' 2>/dev/null; then
    echo "ok $n - plan --hot-tokens: the pool holds the hot windows, the out arena the rest, in kv_total"
else
    fail=$((fail + 1))
    echo "not ok $n - plan --hot-tokens on gemma3: $out"
fi
# --seq-warm-mb: RAM holds that much of the arena, a spill file all of it
n=$((n + 1))
out=$("$hy" plan -m "$g3" --context 65536 --seqs 2 --sparse --hot-tokens 10240 --seq-warm-mb 1 --json 2>&1)
if printf '%s' "$out" | python3 -c 'import json, sys
p = json.load(sys.stdin)
n = 2 * p["out_seq_pages"]
assert p["out_warm_pages"] == (1 << 20) // p["page_bytes"] < n
# a CRC per run of every page: the K or V rows of one KV head, 16 tokens (head size 32, f16)
runs = p["page_bytes"] // p["out_run_bytes"]
assert p["out_run_bytes"] == 16 * 32 * 2 and runs * p["out_run_bytes"] == p["page_bytes"]
assert p["out_ram"] == p["out_warm_pages"] * p["page_bytes"] + 18 * n + 4 * runs * n + 29 * p["out_warm_pages"]
assert p["out_file"] == p["out_total"]' 2>/dev/null; then
    echo "ok $n - plan --seq-warm-mb 1: that much RAM and its index, a spill file for all"
else
    fail=$((fail + 1))
    echo "not ok $n - plan --seq-warm-mb on gemma3: $out"
fi
# the process bound: the measured image and model plus the cache and a
# step's working memory (test_plan checks it holds for a real run)
n=$((n + 1))
out=$("$hy" plan -m "$g3" --context 65536 --seqs 2 --sparse --hot-tokens 10240 --json 2>&1)
txt=$("$hy" plan -m "$g3" --context 65536 --seqs 2 --sparse --hot-tokens 10240 2>&1)
if printf '%s' "$out" | python3 -c 'import json, sys
p = json.load(sys.stdin)
assert p["image_bytes"] > 1 << 20 and p["model_bytes"] > 0 and p["op_work_known"]
assert p["fwd_bytes"] > 0 and p["op_work_bytes"] > 0 and p["runner_bytes"] > 0
assert p["token_bytes"] >= 2 * 65536 * 4 and p["cache_round_bytes"] > 0
assert p["work_total"] == p["fwd_bytes"] + p["op_work_bytes"] + p["runner_bytes"] + p["token_bytes"]
assert p["process_total"] == p["image_bytes"] + max(p["model_bytes"], p["weights_total"]) + p["kv_total"] + p["state_total"] + p["cache_round_bytes"] + p["work_total"]' 2>/dev/null &&
    case "$txt" in *"op scratch"*"working memory"*"program image"*"process bound"*) true ;; *) false ;; esac; then
    echo "ok $n - plan: the process bound is the image, the model, the cache and a step's working memory"
else
    fail=$((fail + 1))
    echo "not ok $n - plan process bound on gemma3: $out / $txt"
fi
check 2 "plan: --hot-tokens = 10240: needs block-sparse attention (--sparse" \
    "plan: --hot-tokens without --sparse is refused" -- \
    "$hy" plan -m "$g3" --context 65536 --hot-tokens 10240
check 2 "plan: --sparse-local-tokens = '-5': must be an integer in 0..16777216" \
    "plan --sparse: a negative --sparse-local-tokens is refused" -- \
    "$hy" plan -m "$g3" --sparse --sparse-local-tokens -5
check 2 "plan: --sparse-block-tokens = 'x': must be an integer in 1..65536" \
    "plan --sparse: a --sparse-block-tokens that is not a number is refused" -- \
    "$hy" plan -m "$g3" --sparse --sparse-block-tokens x
check 2 "hyserve plan: --sparse-sink-tokens = 64: must be a multiple of --sparse-block-tokens (48)" \
    "plan --sparse: sizes that are not whole blocks are refused naming the flag" -- \
    "$hy" plan -m "$g3" --sparse --sparse-block-tokens 48

# The same with sliding-window layers (tiny gemma3, window 16): a repeat
# resumes at 192 too, which needs the window's sliding pages before it.
n=$((n + 1))
out=$("$hy" bench --offline -m "$g3" --ttft-prefix=200 --repeat 2 -t 1 2>&1)
case "$out" in
*"ttft cold "*"hit_tokens=0"*"ttft repeat "*"hit_tokens=192 "*)
    echo "ok $n - bench --offline --ttft-prefix on gemma3: a repeat hits 192 of 200 through the sliding pages" ;;
*)
    fail=$((fail + 1))
    echo "not ok $n - bench --offline --ttft-prefix on gemma3: $out" ;;
esac

# The TTFT mode end to end on a tiny hybrid: an exact repeat of a 200-token
# prompt resumes at the last whole block before its final token (192), the
# cold runs hit nothing.
n=$((n + 1))
out=$("$hy" bench --offline -m "$src/tests/golden/tiny/lfm2.gguf" --ttft-prefix=200 --repeat 2 -t 1 2>&1)
case "$out" in
*"ttft cold "*"hit_tokens=0"*"ttft repeat "*"hit_tokens=192 "*)
    echo "ok $n - bench --offline --ttft-prefix: cold hits 0, a repeat hits 192 of 200" ;;
*)
    fail=$((fail + 1))
    echo "not ok $n - bench --offline --ttft-prefix: $out" ;;
esac

# Where the weights live changes nothing a token gets: greedy text and its
# logprob stats are the same from huge pages and from the mapped file.
n=$((n + 1))
a=$("$hy" run -m "$tiny" -p "one two three" -n 12 --temp 0 -t 2 --weights-memory huge_pages 2>/dev/null)
b=$("$hy" run -m "$tiny" -p "one two three" -n 12 --temp 0 -t 2 --weights-memory mmap 2>/dev/null)
if [ -n "$a" ] && [ "$a" = "$b" ]; then
    echo "ok $n - run: --weights-memory huge_pages and mmap give the same greedy text"
else
    fail=$((fail + 1))
    echo "not ok $n - run: huge_pages '$a' vs mmap '$b'"
fi

echo "1..$n"
[ "$fail" = 0 ]
