# src/model/chat: Jinja2-subset interpreter for tokenizer.chat_template.
libhy_a_SOURCES += src/model/chat_template.c src/model/chat_template.h src/model/jinja.h \
	src/model/jinja_rt.h src/model/jinja_parse.c src/model/jinja_value.c src/model/jinja_eval.c \
	src/model/jinja_builtin.c
check_PROGRAMS += tests/unit/test_chat_template
TESTS += tests/unit/test_chat_template
tests_unit_test_chat_template_SOURCES = tests/unit/test_chat_template.c
tests_unit_test_chat_template_LDADD = $(TEST_LDADD)
EXTRA_DIST += tests/unit/chat
dist_noinst_SCRIPTS += tests/unit/chat/make-expected.py
