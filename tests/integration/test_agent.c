/*
 * test_agent.c - `switchboard agent run` end to end: the real binary, a real
 * home and workspace, the real HTTP providers (Chat Completions and Messages)
 * against the fake model server (tests/fakes/fake_llm.js, a separate
 * process). A multi-step task on both APIs; then each fault: rate limit with
 * Retry-After, server errors with fallback to the other API, a truncated
 * stream, a failing tool, a tool timeout, an abort (Ctrl-C) during a tool, a
 * provider failure after tool calls, max_turns. After every run the
 * transcript is loaded and the tool_use/tool_result pairing checked.
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "agents/message.h"
#include "agents/safety/sandbox.h"
#include "agents/transcript.h"
#include "harness.h"

struct fixture {
	struct harness_peer llm;
	char home[512];
};

static struct fixture fx;

static void path_in(char *out, size_t size, const char *rel)
{
	snprintf(out, size, "%s/%s", fx.home, rel);
}

static void write_home_file(const char *rel, const char *text)
{
	char path[1024];

	path_in(path, sizeof path, rel);
	assert_int_equal(harness_write_file(path, text), 0);
}

static int setup(void **state)
{
	char cfg[2048], why[512];
	const char *init[] = {"init", NULL};
	/* claude's commands run in the sandbox where bwrap works (test_sandbox
	 * covers the sandbox itself); main runs unsandboxed because the abort
	 * test reads its command's process id, which a PID namespace hides;
	 * resilient too, so the timeout test runs on hosts without bwrap. */
	const char *claude_sandbox =
	    sandbox_probe(NULL, why, sizeof why) == 0 ? "workspace-write" : "full";

	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_peer_start(&fx.llm, "fake_llm.js", NULL) != 0)
		return -1;
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: oa, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: test-key-openai, max_retries: 1, timeout: 5s}\n"
	         "  - {id: an, api: anthropic-messages, base_url: \"http://127.0.0.1:%d\", "
	         "api_key: test-key-anthropic, max_retries: 1, timeout: 5s}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: oa/gpt-test, sandbox: full}\n"
	         "  - {id: claude, model: an/claude-test, sandbox: %s}\n"
	         "  - {id: resilient, model: oa/gpt-test, fallbacks: [an/claude-test], "
	         "tool_timeout: 1s, max_turns: 3, sandbox: full}\n",
	         fx.llm.port, fx.llm.port, claude_sandbox);
	write_home_file("switchboard.yaml", cfg);
	if (harness_cli(fx.home, NULL, init) != 0)
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

/* The requests the fake received, as JSON (new reference). */
static json_t *llm_requests(void)
{
	struct buf body;
	json_t *j;

	buf_init(&body, 64 << 20);
	assert_int_equal(harness_http(fx.llm.port, "GET", "/__requests", NULL, NULL, &body), 200);
	j = json_loads(body.data, 0, NULL);
	buf_free(&body);
	assert_true(json_is_array(j));
	return j;
}

/* Runs the CLI; returns the exit code, output in out. */
static int agent_run(const char *agent, const char *session, const char *text, struct buf *out)
{
	const char *args[10];
	size_t n = 0;

	args[n++] = "agent";
	args[n++] = "run";
	args[n++] = "--agent";
	args[n++] = agent;
	if (session) {
		args[n++] = "--session";
		args[n++] = session;
	}
	args[n++] = "-v";
	args[n++] = text;
	args[n] = NULL;
	return harness_cli(fx.home, out, args);
}

/* Loads the one transcript of agent whose name holds session_hint, checks
 * the pairing invariant, and returns the loaded data. */
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
		if (strstr(de->d_name, ".jsonl")) {
			snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
			found++;
		}
	closedir(d);
	assert_int_equal(found, 1);
	assert_int_equal(transcript_load(path, tl), 0);
	assert_int_equal(tl->torn, 0);
	if (msg_check_pairing(tl->messages, why, sizeof why) != 0)
		fail_msg("pairing broken in %s: %s", path, why);
}

static const char *msg_role(const json_t *m)
{
	return json_string_value(json_object_get(m, "role"));
}

/* The last turn_end event's "end". */
static const char *last_end(const struct transcript_loaded *tl)
{
	const char *end = NULL;
	size_t i;
	json_t *e;

	json_array_foreach(tl->entries, i, e)
	{
		if (json_is_string(json_object_get(e, "event")) &&
		    strcmp(json_string_value(json_object_get(e, "event")), "turn_end") == 0)
			end = json_string_value(json_object_get(e, "end"));
	}
	return end ? end : "";
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

static const char multi_step[] =
    "[{\"tool_calls\":[{\"name\":\"read\",\"input\":{\"path\":\"notes.txt\"}}]},"
    " {\"tool_calls\":[{\"name\":\"edit\",\"input\":{\"path\":\"notes.txt\","
    "\"old_string\":\"teh\",\"new_string\":\"the\"}}]},"
    " {\"tool_calls\":[{\"name\":\"bash\",\"input\":{\"command\":\"cat notes.txt; echo "
    "checked-$((6*7))\"}}]},"
    " {\"text\":\"Fixed the typo in notes.txt — ✓.\"}]";

static void check_multi_step(const char *agent, const char *api_path)
{
	struct buf out, file;
	struct transcript_loaded tl;
	json_t *reqs, *last;
	char rel[256], *dump;

	reset_sessions(agent);
	snprintf(rel, sizeof rel, "workspaces/%s/notes.txt", agent);
	write_home_file(rel, "teh quick fox\n");
	script(multi_step);
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run(agent, NULL, "please fix the typo", &out), 0);
	assert_non_null(strstr(out.data, "Fixed the typo in notes.txt — ✓.\n"));
	/* -v shows the tool activity */
	assert_non_null(strstr(out.data, "[tool read "));
	assert_non_null(strstr(out.data, "[tool edit "));
	assert_non_null(strstr(out.data, "[tool bash "));

	buf_init(&file, 4096);
	{
		char path[1024];

		snprintf(path, sizeof path, "%s/workspaces/%s/notes.txt", fx.home, agent);
		assert_int_equal(harness_read_file(path, &file), 0);
	}
	assert_string_equal(file.data, "the quick fox\n");
	buf_free(&file);

	reqs = llm_requests();
	assert_int_equal(json_array_size(reqs), 4);
	last = json_array_get(reqs, 3);
	assert_string_equal(json_string_value(json_object_get(last, "path")), api_path);
	dump = json_dumps(json_object_get(last, "body"), JSON_COMPACT);
	/* the bash result reached the model */
	assert_non_null(strstr(dump, "checked-42"));
	assert_non_null(strstr(dump, "the quick fox"));
	/* the workspace's AGENTS.md is in the system prompt */
	assert_non_null(strstr(dump, "## AGENTS.md"));
	free(dump);
	json_decref(reqs);

	load_transcript(agent, &tl);
	assert_int_equal(json_array_size(tl.messages), 8);
	assert_string_equal(msg_role(json_array_get(tl.messages, 0)), "user");
	assert_string_equal(msg_role(json_array_get(tl.messages, 7)), "assistant");
	{
		char key[128];

		snprintf(key, sizeof key, "agent:%s:main", agent);
		assert_string_equal(json_string_value(json_object_get(tl.header, "key")), key);
	}
	assert_string_equal(last_end(&tl), "end_turn");
	transcript_loaded_free(&tl);
	buf_free(&out);
}

static void test_multi_step_openai(void **state)
{
	(void)state;
	check_multi_step("main", "/v1/chat/completions");
}

static void test_multi_step_anthropic(void **state)
{
	(void)state;
	check_multi_step("claude", "/v1/messages");
}

/* The session continues: a second run sends the first run's history. */
static void test_history_carries_over(void **state)
{
	struct buf out;
	json_t *reqs;
	char *dump;

	(void)state;
	reset_sessions("main");
	script("[{\"text\":\"first answer\"},{\"text\":\"second answer\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("main", NULL, "remember the word pelican", &out), 0);
	assert_int_equal(agent_run("main", NULL, "what was the word?", &out), 0);
	reqs = llm_requests();
	assert_int_equal(json_array_size(reqs), 2);
	dump = json_dumps(json_object_get(json_array_get(reqs, 1), "body"), JSON_COMPACT);
	assert_non_null(strstr(dump, "remember the word pelican"));
	assert_non_null(strstr(dump, "first answer"));
	free(dump);
	json_decref(reqs);
	buf_free(&out);
}

static void test_rate_limit_then_success(void **state)
{
	struct buf out;
	json_t *reqs;
	struct timespec a, b;

	(void)state;
	reset_sessions("main");
	script("[{\"fault\":\"429\",\"retry_after\":1},{\"text\":\"ok after the retry\"}]");
	buf_init(&out, 1 << 20);
	clock_gettime(CLOCK_MONOTONIC, &a);
	assert_int_equal(agent_run("main", NULL, "hi", &out), 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	assert_non_null(strstr(out.data, "ok after the retry"));
	assert_non_null(strstr(out.data, "retry after provider error (rate_limit"));
	/* Retry-After: 1 was honoured */
	assert_true((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 >= 900);
	reqs = llm_requests();
	assert_int_equal(json_array_size(reqs), 2);
	json_decref(reqs);
	buf_free(&out);
}

static void test_server_errors_fall_back(void **state)
{
	struct buf out;
	json_t *reqs;

	(void)state;
	reset_sessions("resilient");
	script("[{\"fault\":\"500\"},{\"fault\":\"500\"},{\"text\":\"answered by the fallback\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("resilient", NULL, "hi", &out), 0);
	assert_non_null(strstr(out.data, "answered by the fallback"));
	reqs = llm_requests();
	assert_int_equal(json_array_size(reqs), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(reqs, 1), "path")),
	                    "/v1/chat/completions");
	assert_string_equal(json_string_value(json_object_get(json_array_get(reqs, 2), "path")),
	                    "/v1/messages");
	json_decref(reqs);
	buf_free(&out);
}

static void test_truncated_stream_is_retried(void **state)
{
	struct buf out;
	struct transcript_loaded tl;

	(void)state;
	reset_sessions("main");
	script("[{\"text\":\"this answer is cut off half way\",\"fault\":\"truncated\"},"
	       "{\"text\":\"recovered\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("main", NULL, "hi", &out), 0);
	assert_non_null(strstr(out.data, "recovered"));
	load_transcript("main", &tl);
	/* only the complete answer is in the history */
	assert_int_equal(json_array_size(tl.messages), 2);
	transcript_loaded_free(&tl);
	buf_free(&out);
}

static void test_tool_error_goes_back_to_the_model(void **state)
{
	struct buf out;
	json_t *reqs;
	char *dump;

	(void)state;
	reset_sessions("main");
	script("[{\"tool_calls\":[{\"name\":\"edit\",\"input\":{\"path\":\"notes.txt\","
	       "\"old_string\":\"no such text\",\"new_string\":\"x\"}},"
	       "{\"name\":\"read\",\"input\":{\"path\":\"../../switchboard.yaml\"}},"
	       "{\"name\":\"nonexistent_tool\",\"input\":{}}]},"
	       "{\"text\":\"I could not do it.\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("main", NULL, "edit something", &out), 0);
	reqs = llm_requests();
	dump = json_dumps(json_object_get(json_array_get(reqs, 1), "body"), JSON_COMPACT);
	assert_non_null(strstr(dump, "not found"));
	assert_non_null(strstr(dump, "escapes the workspace"));
	assert_non_null(strstr(dump, "nonexistent_tool"));
	/* the gateway's own config never reached the model */
	assert_null(strstr(dump, "test-key-openai"));
	free(dump);
	json_decref(reqs);
	{
		struct transcript_loaded tl;

		load_transcript("main", &tl);
		assert_int_equal(json_array_size(tl.messages), 4);
		transcript_loaded_free(&tl);
	}
	buf_free(&out);
}

static void test_tool_timeout(void **state)
{
	struct buf out;
	json_t *reqs;
	char *dump;
	struct timespec a, b;

	(void)state;
	reset_sessions("resilient");
	script("[{\"tool_calls\":[{\"name\":\"bash\",\"input\":{\"command\":\"sleep 30\"}}]},"
	       "{\"text\":\"that was too slow\"}]");
	buf_init(&out, 1 << 20);
	clock_gettime(CLOCK_MONOTONIC, &a);
	assert_int_equal(agent_run("resilient", NULL, "sleep", &out), 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	assert_true(b.tv_sec - a.tv_sec < 15);
	reqs = llm_requests();
	dump = json_dumps(json_object_get(json_array_get(reqs, 1), "body"), JSON_COMPACT);
	assert_non_null(strstr(dump, "timed out"));
	free(dump);
	json_decref(reqs);
	buf_free(&out);
}

/* The file tools under the agent's tool_timeout (1 s for resilient): a
 * search that would take minutes comes back cut at the limit, and an
 * expression that backtracks without end is refused, in one round. */
static void test_grep_bounded(void **state)
{
	char rel[128], *lines;
	struct buf out;
	json_t *reqs;
	char *dump;
	struct timespec a, b;
	size_t i, n = 0;
	int f;

	(void)state;
	reset_sessions("resilient");
	lines = malloc(20 * 1003 + 1);
	assert_non_null(lines);
	for (i = 0; i < 20; i++) {
		memset(lines + n, 'a', 1000);
		memcpy(lines + n + 1000, "!x\n", 3);
		n += 1003;
	}
	lines[n] = '\0';
	path_in(rel, sizeof rel, "workspaces/resilient/slow");
	assert_true(mkdir(rel, 0700) == 0 || errno == EEXIST);
	for (f = 0; f < 40; f++) {
		snprintf(rel, sizeof rel, "workspaces/resilient/slow/f%02d.txt", f);
		write_home_file(rel, lines);
	}
	free(lines);
	write_home_file("workspaces/resilient/bang.txt",
	                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!\n");
	script("[{\"tool_calls\":["
	       "{\"name\":\"grep\",\"input\":{\"pattern\":\"\\\\w*\\\\w*!$\",\"path\":\"slow\"}},"
	       "{\"name\":\"grep\",\"input\":{\"pattern\":\"(a|aa)+$\",\"path\":\"bang.txt\"}}]},"
	       "{\"text\":\"searched\"}]");
	buf_init(&out, 1 << 20);
	clock_gettime(CLOCK_MONOTONIC, &a);
	assert_int_equal(agent_run("resilient", NULL, "search", &out), 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	assert_true(b.tv_sec - a.tv_sec < 15);
	reqs = llm_requests();
	dump = json_dumps(json_object_get(json_array_get(reqs, 1), "body"), JSON_COMPACT);
	if (!strstr(dump, "cut at the time limit of 1000 ms") ||
	    !strstr(dump, "pattern too costly: match limit reached on bang.txt:1"))
		fail_msg("the second request lacks the cut search or the refused pattern: %s",
		         dump);
	free(dump);
	json_decref(reqs);
	buf_free(&out);
}

static void test_abort_during_tool(void **state)
{
	char out_path[1024], pid_path[1024];
	const char *args[] = {"agent", "run", "--agent", "main", "run a long command", NULL};
	struct transcript_loaded tl;
	struct buf pidtxt;
	pid_t pid, child = 0;
	int code;

	(void)state;
	reset_sessions("main");
	script("[{\"tool_calls\":[{\"name\":\"bash\",\"input\":{\"command\":\"echo $$ > "
	       "child.pid; sleep 30\"}}]},{\"text\":\"never sent\"}]");
	path_in(out_path, sizeof out_path, "abort.out");
	path_in(pid_path, sizeof pid_path, "workspaces/main/child.pid");
	pid = harness_cli_start(fx.home, out_path, args);
	assert_true(pid > 0);
	buf_init(&pidtxt, 64);
	for (int i = 0; i < 500 && !child; i++) {
		buf_reset(&pidtxt);
		if (harness_read_file(pid_path, &pidtxt) == 0 && pidtxt.len > 1)
			child = (pid_t)strtol(pidtxt.data, NULL, 10);
		usleep(20000);
	}
	assert_true(child > 0);
	assert_int_equal(kill(child, 0), 0);
	kill(pid, SIGINT);
	code = harness_wait(pid, 10000);
	assert_int_equal(code, 5);
	/* the tool's process died with the run */
	for (int i = 0; i < 100 && kill(child, 0) == 0; i++)
		usleep(20000);
	assert_int_not_equal(kill(child, 0), 0);
	load_transcript("main", &tl);
	assert_int_equal(json_array_size(tl.messages), 3); /* user, tool_use, tool_result */
	assert_string_equal(last_end(&tl), "aborted");
	{
		char *dump = json_dumps(json_array_get(tl.messages, 2), JSON_COMPACT);

		assert_non_null(strstr(dump, "\"is_error\":true"));
		free(dump);
	}
	transcript_loaded_free(&tl);
	buf_free(&pidtxt);
}

static void test_provider_fails_after_tool_calls(void **state)
{
	struct buf out;
	struct transcript_loaded tl;

	(void)state;
	reset_sessions("main");
	script("[{\"tool_calls\":[{\"name\":\"ls\",\"input\":{}}]},{\"fault\":\"auth\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("main", NULL, "list files", &out), 1);
	assert_non_null(strstr(out.data, "[error"));
	/* the key never appears in what the operator sees */
	assert_null(strstr(out.data, "test-key-openai"));
	load_transcript("main", &tl);
	assert_int_equal(json_array_size(tl.messages), 3);
	assert_string_equal(last_end(&tl), "error");
	transcript_loaded_free(&tl);
	buf_free(&out);
}

static void test_max_turns(void **state)
{
	struct buf out;
	struct transcript_loaded tl;

	(void)state;
	reset_sessions("resilient");
	script("[{\"tool_calls\":[{\"name\":\"ls\",\"input\":{}}]},"
	       "{\"tool_calls\":[{\"name\":\"ls\",\"input\":{}}]},"
	       "{\"tool_calls\":[{\"name\":\"ls\",\"input\":{}}]},"
	       "{\"text\":\"Stopped after three listings.\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("resilient", NULL, "loop", &out), 3);
	assert_non_null(strstr(out.data, "[max_turns"));
	/* The last call, without tools, says where the run got to. */
	assert_non_null(strstr(out.data, "Stopped after three listings."));
	load_transcript("resilient", &tl);
	assert_int_equal(json_array_size(tl.messages), 8);
	transcript_loaded_free(&tl);
	buf_free(&out);
}

static void test_offline_demo(void **state)
{
	char home[512];
	const char *init[] = {"init", NULL};
	const char *run[] = {"agent", "run", "hello there", NULL};
	struct buf out;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(home, &out, run), 0);
	assert_non_null(strstr(out.data, "You said: hello there"));
	assert_non_null(strstr(out.data, "providers:"));
	buf_free(&out);
	harness_rmrf(home);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_multi_step_openai),
	    cmocka_unit_test(test_multi_step_anthropic),
	    cmocka_unit_test(test_history_carries_over),
	    cmocka_unit_test(test_rate_limit_then_success),
	    cmocka_unit_test(test_server_errors_fall_back),
	    cmocka_unit_test(test_truncated_stream_is_retried),
	    cmocka_unit_test(test_tool_error_goes_back_to_the_model),
	    cmocka_unit_test(test_tool_timeout),
	    cmocka_unit_test(test_grep_bounded),
	    cmocka_unit_test(test_abort_during_tool),
	    cmocka_unit_test(test_provider_fails_after_tool_calls),
	    cmocka_unit_test(test_max_turns),
	    cmocka_unit_test(test_offline_demo),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
