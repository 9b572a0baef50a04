#!/bin/sh
# test_fuzz_gguf.sh - a real, time-bounded libFuzzer run on the GGUF reader
# (tests/fuzz/fuzz_gguf.c): builds the target with clang
# -fsanitize=fuzzer,address,undefined, replays the checked-in seed corpus
# (tests/fuzz/corpus/gguf: small valid files of every metadata and several
# tensor types, and truncated copies), then mutates from it for
# HY_FUZZ_SECONDS (default 60).  Any crash, leak, UB report, timeout or RSS
# blow-up fails the test, and so does a missing clang or fuzzer runtime
# (scripts/install-deps --test installs them).  TAP.  The run itself is
# tests/integration/fuzzlib.sh.
#
# Environment: HY_SRCDIR (source tree), HY_FUZZ_CC (default clang),
# HY_FUZZ_SECONDS.
src=${HY_SRCDIR:-.}
. "$src/tests/integration/taplib.sh"
. "$src/tests/integration/fuzzlib.sh"
fuzz_name=fuzz_gguf
fuzz_sources="src/model/gguf.c src/common/hy.c src/common/dtype.c"
fuzz_libs=
fuzz_seeds="$src/tests/fuzz/corpus/gguf"
fuzz_min_seeds=12
fuzz_max_len=65536
fuzz_run
