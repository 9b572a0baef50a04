#!/bin/sh
# test_fuzz_api.sh - a real, time-bounded libFuzzer run on the OpenAI request
# parser (tests/fuzz/fuzz_api.c): builds the target with clang
# -fsanitize=fuzzer,address,undefined, replays the checked-in seed corpus
# (tests/fuzz/corpus/api, one valid body per endpoint and feature), then
# mutates from it for HY_FUZZ_SECONDS (default 60).  Any crash, leak, UB
# report, timeout or RSS blow-up fails the test, and so does a missing clang
# or fuzzer runtime (scripts/install-deps --test installs them).  TAP.  The
# run itself is tests/integration/fuzzlib.sh.
#
# Environment: HY_SRCDIR (source tree), HY_FUZZ_CC (default clang),
# HY_FUZZ_SECONDS.
src=${HY_SRCDIR:-.}
. "$src/tests/integration/taplib.sh"
. "$src/tests/integration/fuzzlib.sh"
fuzz_name=fuzz_api
fuzz_sources="src/server/api.c src/server/sse.c src/server/stop.c src/server/json_out.c
src/ipc/request.c src/common/hy.c src/server/api_grammar.c src/grammar/gbnf.c
src/grammar/grammar_build.c src/grammar/grammar_match.c src/grammar/grammar_mask.c
src/grammar/gtext.c src/grammar/regex.c src/grammar/json_schema.c
src/grammar/json_schema_types.c src/model/unicode.c src/model/unicode_data.c
src/server/api_tools.c src/server/toolcall.c"
fuzz_libs=$(pkg-config --cflags --libs libcjson 2>/dev/null) || fuzz_libs="-I/usr/include/cjson -lcjson"
fuzz_seeds="$src/tests/fuzz/corpus/api"
fuzz_min_seeds=8
fuzz_max_len=4096
fuzz_run
