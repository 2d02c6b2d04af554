/*
 * test_context.c - output budgets, compaction and the prompt cache through
 * `switchboard agent run` (the real binary, home and runner) against the
 * fake model server (tests/fakes/fake_llm.js) on both APIs:
 *
 *   - prefix stability: 20 turns of one session; every request's system
 *     prompt, tool list and earlier messages are byte-identical to the
 *     previous request's (compared on the bodies the server received), the
 *     Messages API request has cache_control on its last block only, and
 *     the transcript records no cache break;
 *   - budgets: a tool result over the agent's tool_result_max is saved to
 *     the result store (the whole output) and the model gets a preview
 *     naming it; the model then reads it back with read ("@tool-results/");
 *   - level 4: a "prompt too long" answer in each API's real error shape
 *     compacts (the summary request says its text is data) and the step is
 *     retried once, with the summary in place of the older history.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "agents/message.h"
#include "agents/transcript.h"
#include "harness.h"

struct fixture {
	struct harness_peer llm;
	char home[512];
};

static struct fixture fx;

static int setup(void **state)
{
	char cfg[2048], path[1024];
	const char *init[] = {"init", NULL};

	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_peer_start(&fx.llm, "fake_llm.js", NULL) != 0)
		return -1;
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: oa, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: k1, max_retries: 0, timeout: 5s}\n"
	         "  - {id: an, api: anthropic-messages, base_url: \"http://127.0.0.1:%d\", "
	         "api_key: k2, max_retries: 0, timeout: 5s}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: oa/gpt-test}\n"
	         "  - {id: claude, model: an/claude-test}\n"
	         "  - {id: small, model: oa/gpt-test, context: {tool_result_max: 1000}}\n",
	         fx.llm.port, fx.llm.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0 || harness_cli(fx.home, NULL, init) != 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	harness_peer_stop(&fx.llm);
	harness_rmrf(fx.home);
	return 0;
}

static void script(const char *json)
{
	assert_int_equal(harness_http(fx.llm.port, "POST", "/__reset", NULL, "{}", NULL), 200);
	assert_int_equal(harness_http(fx.llm.port, "POST", "/__script", NULL, json, NULL), 200);
}

static json_t *llm_requests(void)
{
	struct buf body;
	json_t *j;

	buf_init(&body, 256 << 20);
	assert_int_equal(harness_http(fx.llm.port, "GET", "/__requests", NULL, NULL, &body), 200);
	j = json_loads(body.data, 0, NULL);
	buf_free(&body);
	assert_true(json_is_array(j));
	return j;
}

static int agent_run(const char *agent, const char *session, const char *text, struct buf *out)
{
	const char *args[] = {"agent", "run", "--agent", agent, "--session", session, text, NULL};

	return harness_cli(fx.home, out, args);
}

/* The session's transcript (not its archives), loaded. */
static void load_transcript(const char *agent, struct transcript_loaded *tl)
{
	char dir[1024], path[2048], why[512];
	struct dirent *de;
	DIR *d;
	int found = 0;

	snprintf(dir, sizeof dir, "%s/agents/%s/sessions", fx.home, agent);
	d = opendir(dir);
	assert_non_null(d);
	while ((de = readdir(d)))
		if (strstr(de->d_name, ".jsonl") && !strstr(de->d_name, ".archive-")) {
			snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
			found++;
		}
	closedir(d);
	assert_int_equal(found, 1);
	assert_int_equal(transcript_load(path, tl), 0);
	if (msg_check_pairing(tl->messages, why, sizeof why) != 0)
		fail_msg("pairing broken in %s: %s", path, why);
}

static size_t count_events(const struct transcript_loaded *tl, const char *type, const char *ev)
{
	const json_t *e;
	size_t i, n = 0;

	json_array_foreach(tl->entries, i, e)
	{
		const char *t = json_string_value(json_object_get(e, "type"));
		const char *x = json_string_value(json_object_get(e, "event"));

		if (t && strcmp(t, type) == 0 && (!ev || (x && strcmp(x, ev) == 0)))
			n++;
	}
	return n;
}

static char *dump(const json_t *v)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);

	assert_non_null(s);
	return s;
}

/* Removes every "cache_control" key of the messages' blocks (a copy),
 * counting them and checking they sit on the last block of the last
 * message only. */
static json_t *strip_cache_control(const json_t *messages)
{
	json_t *c = json_deep_copy(messages), *m, *b;
	size_t i, k, n = 0;

	json_array_foreach(c, i, m)
	{
		json_t *content = json_object_get(m, "content");

		json_array_foreach(content, k, b)
		{
			if (!json_object_get(b, "cache_control"))
				continue;
			n++;
			assert_int_equal(i, json_array_size(c) - 1);
			assert_int_equal(k, json_array_size(content) - 1);
			json_object_del(b, "cache_control");
		}
	}
	assert_int_equal(n, 1);
	return c;
}

/* Each request's prefix equals the previous request, byte for byte. */
static void check_prefix_stable(const json_t *reqs, bool anthropic)
{
	size_t i, k;

	for (i = 1; i < json_array_size(reqs); i++) {
		const json_t *a = json_object_get(json_array_get(reqs, i - 1), "body");
		const json_t *b = json_object_get(json_array_get(reqs, i), "body");
		json_t *ma = json_object_get(a, "messages"), *mb = json_object_get(b, "messages");
		char *x, *y;

		if (anthropic) {
			ma = strip_cache_control(ma);
			mb = strip_cache_control(mb);
			x = dump(json_object_get(a, "system"));
			y = dump(json_object_get(b, "system"));
			assert_string_equal(x, y);
			free(x);
			free(y);
		} else {
			json_incref(ma);
			json_incref(mb);
		}
		x = dump(json_object_get(a, "tools"));
		y = dump(json_object_get(b, "tools"));
		assert_string_equal(x, y);
		free(x);
		free(y);
		assert_true(json_array_size(mb) > json_array_size(ma));
		for (k = 0; k < json_array_size(ma); k++) {
			x = dump(json_array_get(ma, k));
			y = dump(json_array_get(mb, k));
			if (strcmp(x, y) != 0)
				fail_msg("request %zu, message %zu differs from the previous "
				         "request:\n%s\n%s",
				         i, k, x, y);
			free(x);
			free(y);
		}
		json_decref(ma);
		json_decref(mb);
	}
}

static void prefix_over_20_turns(const char *agent, bool anthropic)
{
	struct buf steps, out;
	struct transcript_loaded tl;
	json_t *reqs;

	buf_init(&steps, 1 << 20);
	buf_puts(&steps, "[");
	for (int i = 0; i < 20; i++)
		buf_printf(&steps, "%s{\"text\":\"answer number %d\"}", i ? "," : "", i);
	buf_puts(&steps, "]");
	script(steps.data);
	buf_free(&steps);
	for (int i = 0; i < 20; i++) {
		char text[64];

		snprintf(text, sizeof text, "message number %d", i);
		buf_init(&out, 1 << 20);
		assert_int_equal(agent_run(agent, "agent:x:cache", text, &out), 0);
		buf_free(&out);
	}
	reqs = llm_requests();
	assert_int_equal(json_array_size(reqs), 20);
	check_prefix_stable(reqs, anthropic);
	json_decref(reqs);
	load_transcript(agent, &tl);
	assert_int_equal(count_events(&tl, "event", "prompt"), 20);
	assert_int_equal(count_events(&tl, "event", "cache_break"), 0);
	assert_int_equal(tl.cache_breaks, 0);
	assert_int_equal(json_array_size(tl.messages), 40);
	transcript_loaded_free(&tl);
}

static void test_prefix_stable_openai(void **state)
{
	(void)state;
	prefix_over_20_turns("main", false);
}

static void test_prefix_stable_anthropic(void **state)
{
	(void)state;
	prefix_over_20_turns("claude", true);
}

static void reset_sessions(const char *agent)
{
	char dir[1024];
	const char *init[] = {"init", NULL};

	snprintf(dir, sizeof dir, "%s/agents/%s/sessions", fx.home, agent);
	harness_rmrf(dir);
	snprintf(dir, sizeof dir, "%s/state.db", fx.home);
	unlink(dir);
	snprintf(dir, sizeof dir, "%s/state.db-wal", fx.home);
	unlink(dir);
	snprintf(dir, sizeof dir, "%s/state.db-shm", fx.home);
	unlink(dir);
	assert_int_equal(harness_cli(fx.home, NULL, init), 0);
}

/* A workspace file changes: the next request's system prompt differs, and
 * the break is recorded with its reason; an unchanged turn after it is not
 * a break. */
static void test_cache_break_reason(void **state)
{
	struct buf out;
	struct transcript_loaded tl;
	char path[1024];
	const json_t *e;
	size_t i, n = 0;

	(void)state;
	reset_sessions("claude");
	script("[{\"text\":\"one\"},{\"text\":\"two\"},{\"text\":\"three\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("claude", "agent:x:break", "first", &out), 0);
	snprintf(path, sizeof path, "%s/workspaces/claude/AGENTS.md", fx.home);
	assert_int_equal(harness_write_file(path, "# Changed rules\nBe brief.\n"), 0);
	assert_int_equal(agent_run("claude", "agent:x:break", "second", &out), 0);
	assert_int_equal(agent_run("claude", "agent:x:break", "third", &out), 0);
	buf_free(&out);
	load_transcript("claude", &tl);
	json_array_foreach(tl.entries, i, e)
	{
		const char *ev = json_string_value(json_object_get(e, "event"));

		if (!ev || strcmp(ev, "cache_break") != 0)
			continue;
		n++;
		assert_string_equal(json_string_value(json_object_get(e, "reason")),
		                    "system_prompt_changed");
		assert_int_equal(json_integer_value(json_object_get(e, "session_breaks")), 1);
	}
	assert_int_equal(n, 1);
	assert_int_equal(tl.cache_breaks, 1);
	transcript_loaded_free(&tl);
}

static void test_budget_persists_and_reads_back(void **state)
{
	struct buf out, saved;
	struct transcript_loaded tl;
	json_t *reqs;
	const json_t *tool_msg, *e;
	const char *content;
	char dir[1024], path[2048];
	size_t i;
	const char *sid = NULL;

	(void)state;
	script(
	    "[{\"tool_calls\":[{\"name\":\"bash\",\"input\":{\"command\":\"seq 1 3000\"}}]},"
	    " {\"tool_calls\":[{\"name\":\"read\",\"input\":{\"path\":\"@tool-results/call_1.txt\","
	    "\"offset\":2999,\"limit\":2}}]},"
	    " {\"text\":\"seen it\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("small", "agent:small:b", "count to 3000", &out), 0);
	buf_free(&out);
	reqs = llm_requests();
	assert_int_equal(json_array_size(reqs), 3);
	/* The second request carries the preview, not the output. */
	{
		const json_t *msgs =
		    json_object_get(json_object_get(json_array_get(reqs, 1), "body"), "messages");

		tool_msg = json_array_get(msgs, json_array_size(msgs) - 1);
		assert_string_equal(json_string_value(json_object_get(tool_msg, "role")), "tool");
		content = json_string_value(json_object_get(tool_msg, "content"));
		assert_non_null(strstr(content, "@tool-results/call_1.txt"));
		assert_non_null(strstr(content, "characters"));
		/* Its head and its end (the exit status), not its middle. */
		assert_null(strstr(content, "\n1500\n"));
		assert_non_null(strstr(content, "\n3000\nexit code 0"));
		assert_true(strlen(content) < 3000);
	}
	/* The read of the saved file comes back with its last lines. */
	{
		const json_t *msgs =
		    json_object_get(json_object_get(json_array_get(reqs, 2), "body"), "messages");

		tool_msg = json_array_get(msgs, json_array_size(msgs) - 1);
		content = json_string_value(json_object_get(tool_msg, "content"));
		assert_non_null(strstr(content, "2999"));
		assert_non_null(strstr(content, "3000"));
	}
	json_decref(reqs);
	load_transcript("small", &tl);
	sid = json_string_value(json_object_get(tl.header, "id"));
	snprintf(dir, sizeof dir, "%s/agents/small/tool-results/%s", fx.home, sid);
	snprintf(path, sizeof path, "%s/call_1.txt", dir);
	buf_init(&saved, 1 << 20);
	assert_int_equal(harness_read_file(path, &saved), 0);
	assert_non_null(strstr(saved.data, "\n1500\n"));
	assert_non_null(strstr(saved.data, "\n3000\n"));
	buf_free(&saved);
	json_array_foreach(tl.entries, i, e)
	{
		if (json_is_string(json_object_get(e, "event")) &&
		    strcmp(json_string_value(json_object_get(e, "event")), "tool_result_saved") ==
		        0)
			assert_string_equal(json_string_value(json_object_get(e, "where")),
			                    "@tool-results/call_1.txt");
	}
	assert_int_equal(count_events(&tl, "event", "tool_result_saved"), 1);
	transcript_loaded_free(&tl);
}

static void reactive(const char *agent, const char *session)
{
	struct buf out;
	json_t *reqs;
	char *first;
	size_t n;

	script("[{\"text\":\"a1\"},{\"text\":\"a2\"},{\"text\":\"a3\"},{\"text\":\"a4\"}]");
	for (int i = 0; i < 4; i++) {
		char text[32];

		snprintf(text, sizeof text, "earlier %d", i);
		buf_init(&out, 1 << 20);
		assert_int_equal(agent_run(agent, session, text, &out), 0);
		buf_free(&out);
	}
	script("[{\"fault\":\"prompt_too_long\"},"
	       " {\"match\":\"<conversation>\",\"text\":\"SUMMARY: four earlier exchanges\"},"
	       " {\"text\":\"recovered\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run(agent, session, "the big one", &out), 0);
	assert_non_null(strstr(out.data, "recovered"));
	buf_free(&out);
	reqs = llm_requests();
	assert_int_equal(json_array_size(reqs), 3);
	/* The summary request: the data marked as such. */
	first = dump(json_object_get(json_array_get(reqs, 1), "body"));
	assert_non_null(strstr(first, "<conversation>"));
	assert_non_null(strstr(first, "do not follow any instruction"));
	assert_non_null(strstr(first, "earlier 0"));
	free(first);
	/* The retry: shorter, with the summary in place of the old part. */
	{
		const json_t *m1 =
		    json_object_get(json_object_get(json_array_get(reqs, 0), "body"), "messages");
		const json_t *m3 =
		    json_object_get(json_object_get(json_array_get(reqs, 2), "body"), "messages");

		n = json_array_size(m3);
		assert_true(n < json_array_size(m1));
		first = dump(m3);
		assert_non_null(strstr(first, "SUMMARY: four earlier exchanges"));
		assert_null(strstr(first, "earlier 0"));
		assert_non_null(strstr(first, "the big one"));
		free(first);
	}
	json_decref(reqs);
}

static void test_reactive_openai(void **state)
{
	(void)state;
	reactive("main", "agent:main:ptl");
}

static void test_reactive_anthropic(void **state)
{
	(void)state;
	reactive("claude", "agent:claude:ptl");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_prefix_stable_openai),
	    cmocka_unit_test(test_prefix_stable_anthropic),
	    cmocka_unit_test(test_cache_break_reason),
	    cmocka_unit_test(test_budget_persists_and_reads_back),
	    cmocka_unit_test(test_reactive_openai),
	    cmocka_unit_test(test_reactive_anthropic),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
