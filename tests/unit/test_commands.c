/*
 * test_commands.c - recognising chat commands (/cmd, /cmd@bot args,
 * leading blanks, any case, paths and unknown words that are not commands),
 * the model names /model accepts, the session meta it stores, and what
 * /status reads from a transcript.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/pipeline/commands.h"

static void expect_cmd(const char *text, enum command_kind kind, const char *args)
{
	struct command c;

	assert_int_equal(commands_parse(text, &c), kind);
	assert_int_equal(c.kind, kind);
	if (args) {
		assert_int_equal(c.args_len, strlen(args));
		assert_memory_equal(c.args, args, c.args_len);
	}
}

static void test_parse(void **state)
{
	struct command c;

	(void)state;
	expect_cmd("/help", COMMAND_HELP, "");
	expect_cmd("/status", COMMAND_STATUS, "");
	expect_cmd("/stop", COMMAND_STOP, "");
	expect_cmd("/compact", COMMAND_COMPACT, "");
	expect_cmd("/model", COMMAND_MODEL, "");
	/* leading and trailing blanks, any case */
	expect_cmd("   /STATUS  ", COMMAND_STATUS, "");
	expect_cmd("\n\t/Help\n", COMMAND_HELP, "");
	/* addressed to a bot (Telegram): the name is kept for the caller */
	assert_int_equal(commands_parse("/status@my_bot", &c), COMMAND_STATUS);
	assert_int_equal(c.addressed_len, 6);
	assert_memory_equal(c.addressed, "my_bot", 6);
	assert_string_equal(c.name, "status");
	expect_cmd("/model@my_bot  openai/gpt-4o  ", COMMAND_MODEL, "openai/gpt-4o");
	expect_cmd("/model fast", COMMAND_MODEL, "fast");
	assert_int_equal(commands_parse("/model@bot", &c), COMMAND_MODEL);
	assert_int_equal(c.args_len, 0);
	/* a bare "@" is no address */
	expect_cmd("/status@", COMMAND_NONE, NULL);
	expect_cmd("/status@ x", COMMAND_NONE, NULL);
	/* commands without arguments are commands only alone */
	expect_cmd("/stop the server on port 80", COMMAND_NONE, NULL);
	expect_cmd("/help me write a poem", COMMAND_NONE, NULL);
	expect_cmd("/status?", COMMAND_NONE, NULL);
	/* paths, unknown words and text are for the agent */
	expect_cmd("/etc/hosts", COMMAND_NONE, NULL);
	expect_cmd("/usr/bin/env python", COMMAND_NONE, NULL);
	expect_cmd("/stop/now", COMMAND_NONE, NULL);
	expect_cmd("/foo", COMMAND_NONE, NULL);
	assert_int_equal(commands_parse("/foo bar", &c), COMMAND_NONE);
	assert_string_equal(c.name, "foo");
	expect_cmd("/", COMMAND_NONE, NULL);
	expect_cmd("", COMMAND_NONE, NULL);
	expect_cmd("status", COMMAND_NONE, NULL);
	expect_cmd("please /stop", COMMAND_NONE, NULL);
	expect_cmd("//stop", COMMAND_NONE, NULL);
	expect_cmd("/stop-it", COMMAND_NONE, NULL);
	assert_int_equal(commands_parse(NULL, &c), COMMAND_NONE);
	/* a name longer than any command is not one, whatever it starts with */
	expect_cmd("/statusstatusstatusstatusstatusstatus", COMMAND_NONE, NULL);
	/* /new and /reset are the reset triggers' (bindings), not these */
	expect_cmd("/new", COMMAND_NONE, NULL);
	expect_cmd("/reset", COMMAND_NONE, NULL);
	assert_string_equal(commands_name(COMMAND_COMPACT), "compact");
}

static void test_models(void **state)
{
	const char *fb[] = {"anthropic/claude", "openai/gpt-4o", "openai/gpt-4o-mini",
	                    "other/gpt-4o-mini"};
	struct commands_models m;
	struct buf b;

	(void)state;
	commands_models_of(&m, "openai/gpt-4o", fb, 4);
	/* the primary once, even when also a fallback */
	assert_int_equal(m.n, 4);
	assert_string_equal(m.v[0], "openai/gpt-4o");
	assert_string_equal(m.v[1], "anthropic/claude");
	assert_int_equal(commands_models_find(&m, "openai/gpt-4o", 13), 0);
	assert_int_equal(commands_models_find(&m, "ANTHROPIC/Claude", 16), 1);
	assert_int_equal(commands_models_find(&m, "claude", 6), 1);
	/* two providers serve gpt-4o-mini: only the full name says which */
	assert_int_equal(commands_models_find(&m, "gpt-4o-mini", 11), -1);
	assert_int_equal(commands_models_find(&m, "other/gpt-4o-mini", 17), 3);
	assert_int_equal(commands_models_find(&m, "gpt", 3), -1);
	assert_int_equal(commands_models_find(&m, "", 0), -1);
	assert_int_equal(commands_models_find(&m, "openai/gpt-4o/../x", 18), -1);

	buf_init(&b, 4096);
	assert_int_equal(commands_models_list(&b, &m, "anthropic/claude"), SB_OK);
	assert_non_null(strstr(b.data, "- openai/gpt-4o (primary)\n"));
	assert_non_null(strstr(b.data, "* anthropic/claude (fallback) <- in use\n"));
	buf_reset(&b);
	assert_int_equal(commands_models_list(&b, &m, NULL), SB_OK);
	assert_non_null(strstr(b.data, "* openai/gpt-4o (primary) <- in use\n"));
	buf_free(&b);

	commands_models_of(&m, NULL, NULL, 0);
	assert_int_equal(m.n, 0);
}

static void test_meta(void **state)
{
	char *s, *m;

	(void)state;
	assert_null(commands_session_model(NULL));
	assert_null(commands_session_model("not json"));
	assert_null(commands_session_model("{\"model\":3}"));
	assert_null(commands_session_model("{\"model\":\"\"}"));
	m = commands_session_model("{\"model\":\"a/b\",\"x\":1}");
	assert_string_equal(m, "a/b");
	free(m);
	s = commands_session_meta_with("{\"x\":1}", "a/b");
	assert_string_equal(s, "{\"model\":\"a/b\",\"x\":1}");
	free(s);
	s = commands_session_meta_with("{\"model\":\"a/b\",\"x\":1}", NULL);
	assert_string_equal(s, "{\"x\":1}");
	free(s);
	s = commands_session_meta_with("[1]", "c/d");
	assert_string_equal(s, "{\"model\":\"c/d\"}");
	free(s);
	/* a name with quotes stays inside its string */
	s = commands_session_meta_with(NULL, "a\",\"model\":\"b");
	m = commands_session_model(s);
	assert_string_equal(m, "a\",\"model\":\"b");
	free(m);
	free(s);
}

static void test_quote(void **state)
{
	char out[8];

	(void)state;
	commands_quote("a\nb\x1b[c", 6, out, sizeof out);
	assert_string_equal(out, "a?b?[c");
	/* cut on a character boundary: "caf\xc3\xa9s" in 5 bytes keeps "caf" */
	commands_quote("xcaf\xc3\xa9s", 7, out, 5);
	assert_string_equal(out, "xcaf");
	commands_quote("abcdefghij", 10, out, sizeof out);
	assert_string_equal(out, "abcdefg");
}

static void test_help(void **state)
{
	const char *t[] = {"/new", "/reset"};
	struct buf b;

	(void)state;
	buf_init(&b, 1 << 16);
	assert_int_equal(commands_help(&b, t, 2), SB_OK);
	assert_non_null(strstr(b.data, "/help"));
	assert_non_null(strstr(b.data, "/status"));
	assert_non_null(strstr(b.data, "/stop"));
	assert_non_null(strstr(b.data, "/compact"));
	assert_non_null(strstr(b.data, "/model [NAME]"));
	assert_non_null(strstr(b.data, "/new - start a new session"));
	assert_non_null(strstr(b.data, "/reset - start a new session"));
	buf_reset(&b);
	/* resets off: not offered */
	assert_int_equal(commands_help(&b, NULL, 0), SB_OK);
	assert_null(strstr(b.data, "/new"));
	buf_free(&b);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_status_read(void **state)
{
	char dir[] = "/tmp/sbtest.cmdXXXXXX", path[256];
	struct commands_status_facts f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/s.jsonl", dir);
	/* no transcript: found false, not an error */
	assert_int_equal(commands_status_read(path, &f), SB_OK);
	assert_false(f.found);

	write_file(
	    path,
	    "{\"type\":\"session\",\"version\":1,\"id\":\"s\",\"key\":\"k\",\"agent\":\"a\"}\n"
	    "{\"type\":\"event\",\"id\":\"e1\",\"event\":\"workspace\",\"workspace\":"
	    "{\"commit\":\"0123456789abcdef\",\"dirty\":true,\"hash\":\"aabbccddeeff00112233\"}}\n"
	    "{\"type\":\"event\",\"id\":\"e2\",\"event\":\"context\",\"window\":1000}\n"
	    "{\"type\":\"message\",\"id\":\"m1\",\"message\":{\"role\":\"user\",\"content\":"
	    "[{\"type\":\"text\",\"text\":\"hello\"}]}}\n"
	    "{\"type\":\"event\",\"id\":\"e3\",\"event\":\"prompt\",\"messages\":1,"
	    "\"tokens_estimate\":500,\"calibration\":1.0}\n"
	    "{\"type\":\"message\",\"id\":\"m2\",\"ts\":\"2026-12-03T10:00:00.000Z\","
	    "\"model\":\"scripted/a\",\"message\":{\"role\":\"assistant\",\"content\":"
	    "[{\"type\":\"text\",\"text\":\"hi there\"}]}}\n");
	assert_int_equal(commands_status_read(path, &f), SB_OK);
	assert_true(f.found);
	assert_int_equal(f.messages, 2);
	assert_int_equal(f.user_turns, 1);
	assert_int_equal(f.window, 1000);
	assert_true(f.tokens_reported);
	/* the anchor, plus the reply after it */
	if (!(f.tokens > 500 && f.tokens < 540))
		fail_msg("tokens %lld", (long long)f.tokens);
	assert_string_equal(f.commit, "0123456789abcdef");
	assert_string_equal(f.hash, "aabbccddeeff0011");
	assert_true(f.dirty);
	assert_string_equal(f.last_model, "scripted/a");
	assert_string_equal(f.last_at, "2026-12-03T10:00:00.000Z");

	/* not a transcript: the error comes back */
	write_file(path, "garbage\n");
	assert_int_not_equal(commands_status_read(path, &f), SB_OK);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse), cmocka_unit_test(test_models),
	    cmocka_unit_test(test_meta),  cmocka_unit_test(test_quote),
	    cmocka_unit_test(test_help),  cmocka_unit_test(test_status_read),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
