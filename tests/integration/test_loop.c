/*
 * test_loop.c - the agent loop under what real models and chats do, from
 * the outside: the real binary (`switchboard agent run`, and the gateway
 * with its OpenAI-compatible endpoint driven by the official SDK) against
 * the fake model server (tests/fakes/fake_llm.js, both APIs). Each test is
 * one point of the loop's known failures:
 *
 *   1. a tool call cut off by the output-token limit is answered, the file
 *      gets written in parts, the provider is not cooled down;
 *   2. tool-call ids stay unique in a session when the server repeats or
 *      omits them (each saved result is its own file);
 *   3. (the long run: test_longrun.c)
 *   4. at the step limit the model says where it got to (tool_choice none),
 *      through the gateway too: no canned line;
 *   5. a full context hands off to a new session seeded with a summary, and
 *      the user is told;
 *   6. the context window is learnt from the server's /v1/models;
 *   7. bash output is saved whole;
 *   8. a reply over 1 MiB reaches the client, cut with a note, not empty;
 *   9. the model is told the date, once a day, in the newest message;
 *  and the todo list shows in `switchboard sessions show`.
 */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "agents/message.h"
#include "agents/transcript.h"
#include "harness.h"
#include "harness_oai.h"

struct fixture {
	struct harness_peer llm;
	char home[512];
	struct harness_daemon d; /* when a test started the gateway */
	bool daemon;
};

static struct fixture fx;

static int setup(void **state)
{
	char cfg[4096], path[1024];
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
	         "api_key: k1, max_retries: 2, timeout: 10s}\n"
	         "  - {id: an, api: anthropic-messages, base_url: \"http://127.0.0.1:%d\", "
	         "api_key: k2, max_retries: 2, timeout: 10s}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: oa/gpt-test, timezone: UTC, "
	         "context: {tool_result_max: 1000}}\n"
	         "  - {id: claude, model: an/claude-test}\n"
	         "  - {id: lim, model: oa/gpt-test, max_turns: 2}\n"
	         "  - {id: tiny, model: oa/gpt-test, context: {window: 3000},\n"
	         "     tools: [bash, edit, glob, grep, ls, message, read, todo, write]}\n"
	         "  - {id: learn, model: oa/qwen-local, memory: {flush: false}}\n"
	         "openai_api: {enabled: true, sync_timeout: 30s}\n",
	         fx.llm.port, fx.llm.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0 || harness_cli(fx.home, NULL, init) != 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (fx.daemon)
		harness_daemon_stop(&fx.d, SIGTERM, 20000);
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

/* The API requests only (not /v1/models and the like). */
static json_t *api_requests(void)
{
	json_t *all = llm_requests(), *out = json_array(), *r;
	size_t i;

	json_array_foreach(all, i, r)
	{
		const char *p = json_string_value(json_object_get(r, "path"));

		if (p && (strcmp(p, "/v1/chat/completions") == 0 || strcmp(p, "/v1/messages") == 0))
			json_array_append(out, r);
	}
	json_decref(all);
	return out;
}

static int agent_run(const char *agent, const char *session, const char *text, struct buf *out)
{
	const char *args[] = {"agent", "run", "--agent", agent, "--session", session, text, NULL};

	return harness_cli(fx.home, out, args);
}

/* The newest transcript of agent whose header key is key, loaded. */
static void load_session(const char *agent, const char *key, struct transcript_loaded *tl)
{
	char dir[1024], path[2048], best[2048] = "", why[512];
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof dir, "%s/agents/%s/sessions", fx.home, agent);
	d = opendir(dir);
	assert_non_null(d);
	while ((de = readdir(d))) {
		struct transcript_loaded t;

		if (!strstr(de->d_name, ".jsonl") || strstr(de->d_name, ".archive-"))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		if (transcript_load(path, &t) != 0)
			continue;
		if (strcmp(json_string_value(json_object_get(t.header, "key")), key) == 0 &&
		    strcmp(path, best) > 0) /* ULIDs sort by time */
			snprintf(best, sizeof best, "%s", path);
		transcript_loaded_free(&t);
	}
	closedir(d);
	assert_true(best[0] != '\0');
	assert_int_equal(transcript_load(best, tl), 0);
	if (msg_check_pairing(tl->messages, why, sizeof why) != 0)
		fail_msg("pairing broken in %s: %s", best, why);
}

static int count_sessions(const char *agent, const char *key)
{
	return harness_oai_transcripts(fx.home, agent, key);
}

static const json_t *find_event(const struct transcript_loaded *tl, const char *ev, size_t nth)
{
	const json_t *e;
	size_t i;

	json_array_foreach(tl->entries, i, e)
	{
		const char *x = json_string_value(json_object_get(e, "event"));

		if (x && strcmp(x, ev) == 0 && nth-- == 0)
			return e;
	}
	return NULL;
}

static char *read_text(const char *path)
{
	struct buf b;

	buf_init(&b, 64 << 20);
	if (harness_read_file(path, &b) != 0) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

static const char *last_user_text(const json_t *req_body, bool anthropic)
{
	const json_t *msgs = json_object_get(req_body, "messages");
	const json_t *m = json_array_get(msgs, json_array_size(msgs) - 1);
	const json_t *c = json_object_get(m, "content");

	(void)anthropic;
	if (json_is_string(c))
		return json_string_value(c);
	return json_string_value(
	    json_object_get(json_array_get(c, json_array_size(c) - 1), "text"));
}

/* ---- 1 ---- */

static void cut_call(const char *agent, const char *session, const char *file)
{
	char steps[2048], path[1024];
	struct buf out;
	char *text;
	int rc;

	snprintf(steps, sizeof steps,
	         "[{\"text\": \"Writing it.\", \"stop\": \"max_tokens\", \"tool_calls\": "
	         "[{\"name\": \"write\", \"raw_input\": \"{\\\"path\\\": \\\"%s\\\", "
	         "\\\"content\\\": \\\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}]},"
	         " {\"tool_calls\": [{\"name\": \"write\", \"input\": {\"path\": \"%s\", "
	         "\"content\": \"first part, \"}}]},"
	         " {\"tool_calls\": [{\"name\": \"write\", \"input\": {\"path\": \"%s\", "
	         "\"content\": \"second part.\", \"append\": true}}]},"
	         " {\"text\": \"Written in two parts.\"}]",
	         file, file, file);
	script(steps);
	buf_init(&out, 1 << 20);
	rc = agent_run(agent, session, "write the long file", &out);
	if (rc != 0)
		fail_msg("agent run exited %d:\n%s", rc, out.data ? out.data : "");
	assert_non_null(strstr(out.data, "Written in two parts."));
	buf_free(&out);
	snprintf(path, sizeof path, "%s/workspaces/%s/%s", fx.home, agent, file);
	text = read_text(path);
	assert_non_null(text);
	assert_string_equal(text, "first part, second part.");
	free(text);
	/* Four calls: no retry of the cut answer. */
	{
		json_t *reqs = api_requests();

		assert_int_equal(json_array_size(reqs), 4);
		json_decref(reqs);
	}
}

static void test_cut_tool_call(void **state)
{
	struct transcript_loaded tl;
	const json_t *res;

	(void)state;
	cut_call("main", "agent:main:cut", "long.txt");
	load_session("main", "agent:main:cut", &tl);
	res = json_array_get(json_object_get(json_array_get(tl.messages, 2), "content"), 0);
	assert_true(json_is_true(json_object_get(res, "is_error")));
	assert_non_null(strstr(json_string_value(json_object_get(res, "content")),
	                       "cut off by the output-token limit"));
	transcript_loaded_free(&tl);
	cut_call("claude", "agent:claude:cut", "long.txt");
}

/* ---- 2 ---- */

static void test_ids_unique_in_session(void **state)
{
	struct buf out;
	struct transcript_loaded tl;
	const json_t *e;
	char path[2048], *saved;
	const char *sid, *w1, *w2, *w3;

	(void)state;
	/* The same id twice across rounds, then ids omitted in two answers. */
	script("[{\"tool_calls\": [{\"id\": \"call_0\", \"name\": \"bash\", \"input\": "
	       "{\"command\": \"seq 1 2000\"}}]},"
	       " {\"tool_calls\": [{\"id\": \"call_0\", \"name\": \"bash\", \"input\": "
	       "{\"command\": \"seq 5000 7000\"}}]},"
	       " {\"omit_ids\": true, \"tool_calls\": [{\"name\": \"bash\", \"input\": "
	       "{\"command\": \"seq 8000 9000\"}}]},"
	       " {\"text\": \"counted\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("main", "agent:main:ids", "count", &out), 0);
	buf_free(&out);
	load_session("main", "agent:main:ids", &tl);
	sid = json_string_value(json_object_get(tl.header, "id"));
	e = find_event(&tl, "tool_result_saved", 0);
	assert_non_null(e);
	w1 = json_string_value(json_object_get(e, "where"));
	e = find_event(&tl, "tool_result_saved", 1);
	assert_non_null(e);
	w2 = json_string_value(json_object_get(e, "where"));
	assert_false(json_is_true(json_object_get(e, "existed")));
	e = find_event(&tl, "tool_result_saved", 2);
	assert_non_null(e);
	w3 = json_string_value(json_object_get(e, "where"));
	assert_string_not_equal(w1, w2);
	assert_string_not_equal(w2, w3);
	/* The second file holds the second output, and its preview names it. */
	snprintf(path, sizeof path, "%s/agents/main/tool-results/%s/%s", fx.home, sid,
	         w2 + strlen("@tool-results/"));
	saved = read_text(path);
	assert_non_null(saved);
	assert_non_null(strstr(saved, "\n6000\n"));
	assert_null(strstr(saved, "\n1000\n"));
	free(saved);
	assert_non_null(strstr(
	    json_string_value(json_object_get(
	        json_array_get(json_object_get(json_array_get(tl.messages, 4), "content"), 0),
	        "content")),
	    w2));
	transcript_loaded_free(&tl);
}

/* ---- 4 ---- */

static void test_step_limit_wraps_up(void **state)
{
	struct buf out;
	json_t *reqs;
	const json_t *last;
	int rc;

	(void)state;
	script("[{\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]},"
	       " {\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]},"
	       " {\"text\": \"I listed the workspace twice; left to do: read the files.\"}]");
	buf_init(&out, 1 << 20);
	rc = agent_run("lim", "agent:lim:steps", "look around", &out);
	assert_int_equal(rc, 3); /* max_turns */
	assert_non_null(strstr(out.data, "left to do: read the files"));
	buf_free(&out);
	reqs = api_requests();
	assert_int_equal(json_array_size(reqs), 3);
	last = json_object_get(json_array_get(reqs, 2), "body");
	assert_string_equal(json_string_value(json_object_get(last, "tool_choice")), "none");
	assert_non_null(strstr(last_user_text(last, false), "limit of 2 model calls"));
	assert_non_null(json_object_get(last, "tools")); /* still listed: the prefix holds */
	json_decref(reqs);
}

/* ---- 5 ---- */

static void test_full_context_hands_off(void **state)
{
	struct buf out;
	struct transcript_loaded tl;
	char *first;
	int rc;

	(void)state;
	script("[{\"text\": \"hello\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("tiny", "agent:tiny:full", "a first message", &out), 0);
	buf_free(&out);
	/* The provider says the prompt is too long, also after compacting. */
	script("[{\"fault\": \"prompt_too_long\"},"
	       " {\"match\": \"<conversation>\", \"text\": \"SUMMARY of the first exchange\"},"
	       " {\"fault\": \"prompt_too_long\"},"
	       " {\"text\": \"Fresh start, carrying on.\"}]");
	buf_init(&out, 1 << 20);
	rc = agent_run("tiny", "agent:tiny:full", "the second message", &out);
	if (rc != 0)
		fail_msg("agent run exited %d:\n%s", rc, out.data ? out.data : "");
	assert_non_null(strstr(out.data, "Fresh start, carrying on."));
	buf_free(&out);
	assert_int_equal(count_sessions("tiny", "agent:tiny:full"), 2);
	/* The new session starts from the summary, then the message. */
	load_session("tiny", "agent:tiny:full", &tl);
	first = msg_text(json_array_get(tl.messages, 0));
	assert_non_null(strstr(first, "goes on from an earlier session"));
	assert_non_null(strstr(first, "the second message"));
	free(first);
	transcript_loaded_free(&tl);
	/* The session key now leads to the new session. */
	script("[{\"text\": \"third answer\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("tiny", "agent:tiny:full", "a third message", &out), 0);
	buf_free(&out);
	load_session("tiny", "agent:tiny:full", &tl);
	assert_int_equal(json_array_size(tl.messages), 4);
	transcript_loaded_free(&tl);
}

/* ---- 6 ---- */

static void test_window_learnt(void **state)
{
	struct buf out, steps;
	struct transcript_loaded tl;
	const json_t *e, *c;
	size_t i, n = 0;

	(void)state;
	/* 8 rounds of about 550 tokens each, with usage counted from the
	 * requests: level 1 runs in an 8k window, never in the 32k default. */
	buf_init(&steps, 1 << 20);
	buf_puts(&steps, "[");
	for (int k = 0; k < 8; k++)
		buf_printf(&steps,
		           "{\"usage\": \"auto\", \"tool_calls\": [{\"name\": \"bash\", \"input\": "
		           "{\"command\": \"seq %d %d\"}}]},",
		           k * 1000, k * 1000 + 250);
	buf_puts(&steps, "{\"usage\": \"auto\", \"text\": \"done\"}]");
	script(steps.data);
	buf_free(&steps);
	assert_int_equal(
	    harness_http(fx.llm.port, "POST", "/__server", NULL,
	                 "{\"models\": {\"object\": \"list\", \"data\": [{\"id\": \"qwen-local\", "
	                 "\"owned_by\": \"vllm\", \"max_model_len\": 8192}]}}",
	                 NULL),
	    200);
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("learn", "agent:learn:w", "count eight times", &out), 0);
	buf_free(&out);
	assert_int_equal(count_sessions("learn", "agent:learn:w"), 1);
	load_session("learn", "agent:learn:w", &tl);
	e = find_event(&tl, "context", 0);
	assert_non_null(e);
	assert_int_equal(json_integer_value(json_object_get(e, "window")), 8192);
	assert_string_equal(json_string_value(json_object_get(e, "source")),
	                    "provider (GET /models max_model_len)");
	json_array_foreach(tl.entries, i, c)
	{
		if (strcmp(json_string_value(json_object_get(c, "type")), "compaction") == 0) {
			assert_int_equal(json_integer_value(json_object_get(c, "window")), 8192);
			n++;
		}
	}
	assert_true(n >= 1);
	transcript_loaded_free(&tl);
}

/* ---- 7 ---- */

static void test_bash_output_saved_whole(void **state)
{
	struct buf out;
	struct transcript_loaded tl;
	char path[2048], *saved;
	const json_t *e;

	(void)state;
	script("[{\"tool_calls\": [{\"name\": \"bash\", \"input\": {\"command\": "
	       "\"seq 1 100000\"}}]}, {\"text\": \"many\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("main", "agent:main:bash", "count far", &out), 0);
	buf_free(&out);
	load_session("main", "agent:main:bash", &tl);
	e = find_event(&tl, "tool_result_saved", 0);
	assert_non_null(e);
	snprintf(path, sizeof path, "%s/agents/main/tool-results/%s/%s", fx.home,
	         json_string_value(json_object_get(tl.header, "id")),
	         json_string_value(json_object_get(e, "where")) + strlen("@tool-results/"));
	saved = read_text(path);
	assert_non_null(saved);
	/* The middle is there, and the end with the exit status. */
	assert_non_null(strstr(saved, "\n50000\n"));
	assert_non_null(strstr(saved, "\n100000\nexit code 0"));
	free(saved);
	/* The preview shows the end too. */
	assert_non_null(strstr(
	    json_string_value(json_object_get(
	        json_array_get(json_object_get(json_array_get(tl.messages, 2), "content"), 0),
	        "content")),
	    "exit code 0"));
	transcript_loaded_free(&tl);
}

/* ---- 9 ---- */

static void test_date_told_once_a_day(void **state)
{
	struct buf out;
	json_t *reqs;
	char want[64];
	time_t now = time(NULL);
	struct tm tm;

	(void)state;
	gmtime_r(&now, &tm);
	strftime(want, sizeof want, "%Y (UTC, UTC+00:00).]", &tm);
	script("[{\"text\": \"one\"}, {\"text\": \"two\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("main", "agent:main:date", "first", &out), 0);
	assert_int_equal(agent_run("main", "agent:main:date", "second", &out), 0);
	buf_free(&out);
	reqs = api_requests();
	assert_int_equal(json_array_size(reqs), 2);
	{
		const json_t *b0 = json_object_get(json_array_get(reqs, 0), "body");
		const json_t *b1 = json_object_get(json_array_get(reqs, 1), "body");
		const json_t *m0 = json_array_get(json_object_get(b0, "messages"), 1);
		const char *t0 = json_string_value(json_object_get(m0, "content"));
		char *a, *b;

		/* In the first message, after what the user wrote. */
		assert_non_null(strstr(t0, "first\n[Today is "));
		assert_non_null(strstr(t0, want));
		/* Not again the same day; the earlier messages are unchanged. */
		assert_null(strstr(last_user_text(b1, false), "Today is"));
		a = json_dumps(m0, JSON_COMPACT);
		b = json_dumps(json_array_get(json_object_get(b1, "messages"), 1), JSON_COMPACT);
		assert_string_equal(a, b);
		free(a);
		free(b);
	}
	json_decref(reqs);
}

/* ---- through the gateway: 4 and 8, and the todo list ---- */

static int start_daemon(void)
{
	if (harness_daemon_start(&fx.d, fx.home, NULL) != 0)
		return -1;
	fx.daemon = true;
	return harness_wait_ready(&fx.d, 20000);
}

static void test_gateway_replies(void **state)
{
	struct harness_daemon *d = &fx.d;
	char token[256], plan[1024];
	struct buf big, out;
	json_t *r;
	const char *text;
	char url[64];
	const char *show[] = {"sessions", "show", "agent:main:http:todo", "--url", url, NULL};

	(void)state;
	assert_int_equal(start_daemon(), 0);
	snprintf(url, sizeof url, "ws://127.0.0.1:%d/", d->port);
	assert_int_equal(harness_oai_token(fx.home, token, sizeof token), 0);

	/* 8: a reply of 1.2 MiB (streamed in large deltas). */
	buf_init(&big, 4 << 20);
	buf_puts(&big, "[{\"delta_chars\": 65536, \"text\": \"");
	for (int i = 0; i < 1200 * 1024 / 64; i++)
		buf_puts(&big, "0123456789abcdef0123456789abcdef0123456789abcdef012345678901234 ");
	buf_puts(&big, "\"}]");
	script(big.data);
	buf_free(&big);
	snprintf(plan, sizeof plan,
	         "{\"ops\": [{\"op\": \"chat\", \"model\": \"switchboard/main\", \"text\": "
	         "\"write a lot\", \"session\": \"big\", \"timeout_ms\": 60000}]}");
	assert_int_equal(harness_oai_run(fx.home, d->port, token, plan, 90000, &r), 0);
	text = json_string_value(json_object_get(json_array_get(r, 0), "text"));
	assert_non_null(text);
	assert_true(strlen(text) > 1000000);
	assert_true(strlen(text) <= 1024 * 1024);
	assert_non_null(strstr(text, "were cut to fit the 1048576-byte limit of one reply"));
	json_decref(r);

	/* 4: the step limit's reply is the model's own account. */
	script("[{\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]},"
	       " {\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]},"
	       " {\"text\": \"Listed twice; next I would read them.\"}]");
	snprintf(plan, sizeof plan,
	         "{\"ops\": [{\"op\": \"chat\", \"model\": \"switchboard/lim\", \"text\": "
	         "\"look\", \"session\": \"steps\"}]}");
	assert_int_equal(harness_oai_run(fx.home, d->port, token, plan, 60000, &r), 0);
	text = json_string_value(json_object_get(json_array_get(r, 0), "text"));
	assert_non_null(text);
	assert_string_equal(text, "Listed twice; next I would read them.");
	json_decref(r);

	/* The todo list, shown to the operator. */
	script("[{\"tool_calls\": [{\"name\": \"todo\", \"input\": {\"items\": ["
	       "{\"text\": \"gather the numbers\", \"status\": \"done\"},"
	       "{\"text\": \"write the report\", \"status\": \"in_progress\"}]}}]},"
	       " {\"text\": \"On it.\"}]");
	snprintf(plan, sizeof plan,
	         "{\"ops\": [{\"op\": \"chat\", \"model\": \"switchboard/main\", \"text\": "
	         "\"plan the report\", \"session\": \"todo\"}]}");
	assert_int_equal(harness_oai_run(fx.home, d->port, token, plan, 60000, &r), 0);
	json_decref(r);
	buf_init(&out, 1 << 20);
	if (harness_cli(fx.home, &out, show) != 0)
		fail_msg("sessions show:\n%s", out.data ? out.data : "");
	assert_non_null(
	    strstr(out.data, "todo:\n  [x] gather the numbers\n  [>] write the report\n"));
	buf_free(&out);

	fx.daemon = false;
	assert_int_equal(harness_daemon_stop(d, SIGTERM, 20000), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cut_tool_call),
	    cmocka_unit_test(test_ids_unique_in_session),
	    cmocka_unit_test(test_step_limit_wraps_up),
	    cmocka_unit_test(test_full_context_hands_off),
	    cmocka_unit_test(test_window_learnt),
	    cmocka_unit_test(test_bash_output_saved_whole),
	    cmocka_unit_test(test_date_told_once_a_day),
	    cmocka_unit_test(test_gateway_replies),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
