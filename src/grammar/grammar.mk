# src/grammar: grammar-constrained decoding (GBNF parser, byte-level
# automata, the pushdown matcher and vocabulary masks; JSON Schema and
# regular expressions compiled to GBNF).  Depends on common/ and the
# tokenizer only.
libhy_a_SOURCES += src/grammar/gbnf.c src/grammar/gbnf.h src/grammar/grammar.h \
	src/grammar/grammar_impl.h src/grammar/grammar_build.c src/grammar/grammar_match.c \
	src/grammar/grammar_mask.c src/grammar/grammar_budget.c src/grammar/gtext.c src/grammar/gtext.h src/grammar/regex.c \
	src/grammar/regex.h src/grammar/json_schema.c src/grammar/json_schema.h \
	src/grammar/json_schema_impl.h src/grammar/json_schema_types.c src/grammar/grammar_cache.c \
	src/grammar/grammar_cache.h
check_PROGRAMS += tests/unit/test_gbnf tests/unit/test_grammar tests/unit/test_json_schema
TESTS += tests/unit/test_gbnf tests/unit/test_grammar tests/unit/test_json_schema
tests_unit_test_gbnf_SOURCES = tests/unit/test_gbnf.c
tests_unit_test_gbnf_LDADD = $(TEST_LDADD)
tests_unit_test_grammar_SOURCES = tests/unit/test_grammar.c
tests_unit_test_grammar_LDADD = $(TEST_LDADD)
tests_unit_test_json_schema_SOURCES = tests/unit/test_json_schema.c
tests_unit_test_json_schema_LDADD = $(TEST_LDADD)
# bench_grammar (built by make check, not run): mask cost per token when a
# JSON document is replayed through a schema's matcher with a real
# vocabulary: tests/unit/bench_grammar MODEL.gguf SCHEMA.json DOC.json.
check_PROGRAMS += tests/unit/bench_grammar
tests_unit_bench_grammar_SOURCES = tests/unit/bench_grammar.c
tests_unit_bench_grammar_LDADD = $(TEST_LDADD)
# Structured outputs end to end through nginx with the default model: the
# schema corpus (scripts/make-schema-corpus writes tests/data/schemas/),
# the openai client's parse with Pydantic models, the API's 400s.
TESTS += tests/integration/test_structured.py
EXTRA_DIST += tests/integration/test_structured.py tests/integration/structlib.py tests/data/schemas \
	scripts/make-schema-corpus scripts/bench-structured
# hyserve run --grammar/--json-schema/--json and bench --offline --json-schema.
TESTS += tests/integration/test_cli_grammar.sh
EXTRA_DIST += tests/integration/test_cli_grammar.sh
