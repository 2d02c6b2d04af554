/*
 * test_message.c - canonical messages (agents/message.c): the builders, the
 * text accessor, the shape check and the tool_use/tool_result pairing
 * checker, whose messages are compared exactly.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "agents/message.h"
#include "gateway/core/err.h"

static json_t *parse(const char *text)
{
	json_error_t e;
	json_t *j = json_loads(text, 0, &e);

	if (!j)
		fail_msg("bad JSON in the test: %s: %s", e.text, text);
	return j;
}

static void assert_json(const json_t *got, const char *expected)
{
	json_t *want = parse(expected);

	if (!json_equal(got, want)) {
		char *g = json_dumps(got, JSON_COMPACT);

		fail_msg("got %s\nwant %s", g, expected);
	}
	json_decref(want);
}

static void test_builders(void **state)
{
	json_t *u = msg_user_text_new("hello"), *a = msg_assistant_new(), *r = msg_user_new();
	json_t *input = parse("{\"path\":\"a.txt\",\"n\":[1,2]}");

	(void)state;
	assert_json(u, "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hello\"}]}");
	assert_json(a, "{\"role\":\"assistant\",\"content\":[]}");
	assert_json(r, "{\"role\":\"user\",\"content\":[]}");

	assert_int_equal(msg_add_text(a, "Reading it."), SB_OK);
	assert_int_equal(msg_add_tool_use(a, "t1", "read", input), SB_OK);
	assert_int_equal(msg_add_tool_use(a, "t2", "ls", NULL), SB_OK);
	/* The input is copied: changing the caller's object leaves the message alone. */
	json_object_set_new(input, "path", json_string("changed"));
	assert_json(a, "{\"role\":\"assistant\",\"content\":["
	               "{\"type\":\"text\",\"text\":\"Reading it.\"},"
	               "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"read\","
	               "\"input\":{\"path\":\"a.txt\",\"n\":[1,2]}},"
	               "{\"type\":\"tool_use\",\"id\":\"t2\",\"name\":\"ls\",\"input\":{}}]}");
	assert_int_equal(msg_tool_use_count(a), 2);
	assert_int_equal(msg_tool_use_count(u), 0);

	assert_int_equal(msg_add_tool_result(r, "t1", "contents", false), SB_OK);
	assert_int_equal(msg_add_tool_result(r, "t2", "denied", true), SB_OK);
	assert_json(r, "{\"role\":\"user\",\"content\":["
	               "{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"contents\","
	               "\"is_error\":false},"
	               "{\"type\":\"tool_result\",\"tool_use_id\":\"t2\",\"content\":\"denied\","
	               "\"is_error\":true}]}");

	assert_int_equal(msg_validate(u), SB_OK);
	assert_int_equal(msg_validate(a), SB_OK);
	assert_int_equal(msg_validate(r), SB_OK);

	/* Bad arguments. */
	assert_int_equal(msg_add_text(a, NULL), SB_ERR_INVAL);
	assert_int_equal(msg_add_tool_use(a, NULL, "x", NULL), SB_ERR_INVAL);
	assert_int_equal(msg_add_tool_result(r, "t1", NULL, false), SB_ERR_INVAL);
	{
		json_t *not_obj = json_array();

		assert_int_equal(msg_add_tool_use(a, "t3", "x", not_obj), SB_ERR_INVAL);
		assert_int_equal(msg_add_text(not_obj, "x"), SB_ERR_INVAL);
		json_decref(not_obj);
	}
	assert_int_equal(msg_tool_use_count(a), 2);
	json_decref(input);
	json_decref(u);
	json_decref(a);
	json_decref(r);
}

static void test_text(void **state)
{
	json_t *a = msg_assistant_new(), *r = msg_user_new();
	char *t;

	(void)state;
	t = msg_text(a);
	assert_string_equal(t, "");
	free(t);
	msg_add_text(a, "Hello, ");
	msg_add_tool_use(a, "t1", "x", NULL);
	msg_add_text(a, "wörld.");
	t = msg_text(a);
	assert_string_equal(t, "Hello, wörld.");
	free(t);
	msg_add_tool_result(r, "t1", "not text", false);
	t = msg_text(r);
	assert_string_equal(t, "");
	free(t);
	t = msg_text(NULL);
	assert_string_equal(t, "");
	free(t);
	json_decref(a);
	json_decref(r);
}

static void test_validate_rejects(void **state)
{
	static const char *const bad[] = {
	    "[]",
	    "{\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}",
	    "{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}",
	    "{\"role\":\"user\",\"content\":\"x\"}",
	    "{\"role\":\"user\",\"content\":[]}",
	    "{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}",
	    "{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}",
	    "{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"b\","
	    "\"input\":{}}]}",
	    "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":"
	    "\"b\",\"input\":[]}]}",
	    "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"\",\"name\":"
	    "\"b\",\"input\":{}}]}",
	    "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"a\","
	    "\"content\":\"x\"}]}",
	    "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"a\"}]}",
	    "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"a\","
	    "\"content\":\"x\",\"is_error\":1}]}",
	};

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		json_t *m = parse(bad[i]);

		if (msg_validate(m) != SB_ERR_INVAL)
			fail_msg("accepted: %s", bad[i]);
		json_decref(m);
	}
	assert_int_equal(msg_validate(NULL), SB_ERR_INVAL);
}

/* Builds a history from a compact spec, one word a message: "U" (user
 * text), "T" (assistant text), "A:t1,t2" (assistant with those tool_use
 * ids), "R:t1,t2" (user with those tool_result ids). */
static json_t *history(const char *spec)
{
	json_t *h = json_array();
	const char *p = spec;

	while (*p) {
		char kind = *p, id[32];
		json_t *m;

		if (kind == 'U')
			m = msg_user_text_new("hi");
		else if (kind == 'T')
			m = msg_assistant_new();
		else
			m = kind == 'A' ? msg_assistant_new() : msg_user_new();
		if (kind == 'T')
			msg_add_text(m, "plain answer");
		p++;
		if (*p == ':')
			p++;
		while (*p && *p != ' ') {
			size_t n = strcspn(p, ", ");

			assert_true(n < sizeof id);
			memcpy(id, p, n);
			id[n] = '\0';
			if (kind == 'A')
				msg_add_tool_use(m, id, "tool", NULL);
			else
				msg_add_tool_result(m, id, "ok", false);
			p += n;
			if (*p == ',')
				p++;
		}
		while (*p == ' ')
			p++;
		json_array_append_new(h, m);
	}
	return h;
}

static void expect_pairing(const char *spec, int rc, const char *why)
{
	json_t *h = history(spec);
	char got[256] = "untouched";
	int r = msg_check_pairing(h, got, sizeof got);

	if (r != rc)
		fail_msg("%s: rc %d, want %d (%s)", spec, r, rc, got);
	if (why)
		assert_string_equal(got, why);
	json_decref(h);
}

static void test_pairing_valid(void **state)
{
	(void)state;
	expect_pairing("", SB_OK, NULL);
	expect_pairing("U", SB_OK, NULL);
	expect_pairing("U T", SB_OK, NULL);
	expect_pairing("U A:t1 R:t1 T", SB_OK, NULL);
	/* Results in any order; several rounds. */
	expect_pairing("U A:t1,t2,t3 R:t3,t1,t2 A:t4 R:t4 T U T", SB_OK, NULL);
	/* why may be NULL. */
	{
		json_t *h = history("U A:t1");

		assert_int_equal(msg_check_pairing(h, NULL, 0), SB_ERR_INVAL);
		json_decref(h);
	}
}

static void test_pairing_violations(void **state)
{
	(void)state;
	/* Positions are indexes into the history array. */
	expect_pairing("U T U A:t1 R:t2", SB_ERR_INVAL,
	               "message 3: tool_use \"t1\" has no tool_result in message 4");
	expect_pairing("U A:t1,t2 R:t1", SB_ERR_INVAL,
	               "message 1: tool_use \"t2\" has no tool_result in message 2");
	expect_pairing("U A:t1 T", SB_ERR_INVAL,
	               "message 1: tool_use \"t1\" has no tool_result in message 2");
	expect_pairing("U A:t1 U", SB_ERR_INVAL,
	               "message 1: tool_use \"t1\" has no tool_result in message 2");
	expect_pairing("U A:t1", SB_ERR_INVAL,
	               "message 1: tool_use \"t1\" has no tool_result (the history ends there)");
	expect_pairing("U T U A:t1 R:t1,t9", SB_ERR_INVAL,
	               "message 4: tool_result \"t9\" answers no tool_use");
	expect_pairing("U T U A:t1 R:t1,t1", SB_ERR_INVAL,
	               "message 4: duplicate tool_result \"t1\"");
	expect_pairing("R:t1", SB_ERR_INVAL, "message 0: tool_result \"t1\" answers no tool_use");
	expect_pairing("U A:t1 R:t1 R:t1", SB_ERR_INVAL,
	               "message 3: tool_result \"t1\" answers no tool_use");
	/* A result two messages after its tool_use is not a pairing. */
	expect_pairing("U A:t1 U R:t1", SB_ERR_INVAL,
	               "message 1: tool_use \"t1\" has no tool_result in message 2");
	expect_pairing("U A:t1,t1 R:t1", SB_ERR_INVAL, "message 1: duplicate tool_use id \"t1\"");
	/* Shape problems are reported with their position too. */
	{
		json_t *h = history("U T");
		char why[256];

		json_array_append_new(h, parse("{\"role\":\"user\",\"content\":[{\"type\":"
		                               "\"tool_use\",\"id\":\"a\",\"name\":\"b\","
		                               "\"input\":{}}]}"));
		assert_int_equal(msg_check_pairing(h, why, sizeof why), SB_ERR_INVAL);
		assert_string_equal(why, "message 2: content[0]: tool_use in a user message");
		json_decref(h);
	}
	{
		char why[256];
		json_t *notarray = json_object();

		assert_int_equal(msg_check_pairing(notarray, why, sizeof why), SB_ERR_INVAL);
		assert_string_equal(why, "the history is not an array");
		json_decref(notarray);
	}
	/* A small buffer gets a truncated but terminated message. */
	{
		json_t *h = history("U A:t1");
		char why[8];

		assert_int_equal(msg_check_pairing(h, why, sizeof why), SB_ERR_INVAL);
		assert_string_equal(why, "message");
		json_decref(h);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_builders),           cmocka_unit_test(test_text),
	    cmocka_unit_test(test_validate_rejects),   cmocka_unit_test(test_pairing_valid),
	    cmocka_unit_test(test_pairing_violations),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
