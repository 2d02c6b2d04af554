/*
 * test_memory_flush_crash.c - a crash during the silent memory turn before
 * compaction: the real daemon, its OpenAI-compatible endpoint (with an
 * Idempotency-Key, so the client's retry after the restart waits for the
 * message's re-run) and tests/fakes/fake_llm.js.
 *
 * A run without a crash checks (SB_CRASH_LOG) that the conversation
 * reaches the two crash points of the silent turn:
 * turn.memory_flush.recorded (its event is on disk, no call made yet) and
 * turn.memory_flush.done (its calls and its memory write are over). For
 * each, on a fresh home: SB_CRASH_NAME there (its number varies with the
 * store writer's points), the same conversation, a restart, the client's
 * retry. From the user's side:
 * the long message is answered with the answer to it, once, nothing of the
 * silent turn; the model got the silent turn's requests at most once (none
 * after the restart), the note is in today's memory file at most once, and
 * the transcripts hold one "started" event.
 */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "harness.h"
#include "harness_oai.h"

#define FLUSH_MARK "Silent memory turn"

static struct harness_peer llm;

static const char flush_script[] =
    "["
    "{\"match\":\"hello mem\",\"text\":\"hi there\",\"usage\":\"auto\"},"
    "{\"match\":\"" FLUSH_MARK "\",\"usage\":\"auto\",\"tool_calls\":[{\"name\":"
    "\"memory_write\",\"input\":{\"text\":\"Launch code word: PAPAYA.\"}}]},"
    "{\"match\":\"" FLUSH_MARK "\",\"text\":\"NO_REPLY\",\"usage\":\"auto\"},"
    "{\"match\":\"launch document\",\"text\":\"read the document\",\"usage\":\"auto\"}"
    "]";

struct run {
	struct harness_daemon d;
	char home[512];
	char log[700];
	char token[256];
};

static int setup(void **state)
{
	(void)state;
	return harness_peer_start(&llm, "fake_llm.js", NULL);
}

static int teardown(void **state)
{
	(void)state;
	harness_peer_stop(&llm);
	return 0;
}

static void run_home(struct run *r)
{
	char cfg[2000], path[1024];
	const char *init[] = {"init", NULL};

	memset(r, 0, sizeof *r);
	assert_int_equal(harness_tmpdir(r->home, sizeof r->home), 0);
	snprintf(r->log, sizeof r->log, "%s/crash.log", r->home);
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: oa, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: test-key, max_retries: 1, timeout: 10s}\n"
	         "agents:\n"
	         "  - id: mem\n"
	         "    default: true\n"
	         "    model: oa/gpt-test\n"
	         "    timezone: UTC\n"
	         "    context: {window: 40000, trim_at: 1000, archive_at: 50, "
	         "summarize_at: 1000, block_at: 1000}\n"
	         "openai_api: {enabled: true, sync_timeout: 30s}\n",
	         llm.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", r->home);
	assert_int_equal(harness_write_file(path, cfg), 0);
	assert_int_equal(harness_cli(r->home, NULL, init), 0);
	assert_int_equal(harness_http(llm.port, "POST", "/__reset", NULL, "{}", NULL), 200);
	assert_int_equal(harness_http(llm.port, "POST", "/__script", NULL, flush_script, NULL),
	                 200);
}

static void run_start(struct run *r, const char *crash_at)
{
	int rc;

	if (crash_at)
		setenv("SB_CRASH_NAME", crash_at, 1);
	setenv("SB_CRASH_LOG", r->log, 1);
	rc = harness_daemon_start(&r->d, r->home, NULL);
	unsetenv("SB_CRASH_NAME");
	unsetenv("SB_CRASH_LOG");
	assert_int_equal(rc, 0);
	assert_int_equal(harness_wait_ready(&r->d, 20000), 0);
	assert_int_equal(harness_oai_token(r->home, r->token, sizeof r->token), 0);
}

/* Whether the daemon was killed (reaped then). */
static bool run_gone(struct run *r)
{
	int st;

	if (r->d.pid <= 0)
		return true;
	if (waitpid(r->d.pid, &st, WNOHANG) == r->d.pid) {
		if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
			fail_msg("the gateway ended with status %d, not SIGKILL", st);
		r->d.pid = 0;
		return true;
	}
	return false;
}

/* Sends text with an idempotency key; the reply's content (malloc'd), or
 * NULL when there was no 200 (the gateway died). */
static char *chat(struct run *r, const char *key, const char *text)
{
	char auth[400], idem[300];
	const char *headers[] = {auth, idem, "x-switchboard-session: crash-1",
	                         "Content-Type: application/json", NULL};
	json_t *req, *resp;
	char *body, *out = NULL;
	struct buf b;
	long status;

	snprintf(auth, sizeof auth, "Authorization: Bearer %s", r->token);
	snprintf(idem, sizeof idem, "Idempotency-Key: %s", key);
	req = json_pack("{s:s,s:[{s:s,s:s}]}", "model", "switchboard/mem", "messages", "role",
	                "user", "content", text);
	body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	buf_init(&b, 1 << 20);
	status = harness_http(r->d.port, "POST", "/v1/chat/completions", headers, body, &b);
	free(body);
	if (status == 200) {
		resp = json_loads(b.data, 0, NULL);
		assert_non_null(resp);
		out = strdup(json_string_value(json_object_get(
		    json_object_get(json_array_get(json_object_get(resp, "choices"), 0), "message"),
		    "content")));
		json_decref(resp);
	}
	buf_free(&b);
	return out;
}

static char *padding(void)
{
	struct buf b;

	buf_init(&b, 8 << 20);
	buf_puts(&b, "Here is the long launch document. The launch code word is PAPAYA. ");
	for (size_t i = 0; i < 24000; i++)
		buf_printf(&b, "w%zu ", i % 997);
	return buf_steal(&b);
}

/* How many requests the model got that hold needle in some message. */
static size_t model_requests_with(const char *needle)
{
	struct buf body;
	json_t *reqs;
	size_t n = 0;

	buf_init(&body, 256 << 20);
	assert_int_equal(harness_http(llm.port, "GET", "/__requests", NULL, NULL, &body), 200);
	reqs = json_loads(body.data, 0, NULL);
	buf_free(&body);
	assert_non_null(reqs);
	for (size_t i = 0; i < json_array_size(reqs); i++) {
		char *s = json_dumps(
		    json_object_get(json_object_get(json_array_get(reqs, i), "body"), "messages"),
		    JSON_COMPACT);

		n += s && strstr(s, needle);
		free(s);
	}
	json_decref(reqs);
	return n;
}

static size_t count_in(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = hay ? strstr(hay, needle) : NULL; p; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* Every transcript of the agent, concatenated (malloc'd). */
static char *transcripts(struct run *r)
{
	char dir[1024], path[2048];
	struct dirent *de;
	struct buf all;
	DIR *d;

	buf_init(&all, 256 << 20);
	snprintf(dir, sizeof dir, "%s/agents/mem/sessions", r->home);
	d = opendir(dir);
	assert_non_null(d);
	while ((de = readdir(d))) {
		struct buf b;

		if (!strstr(de->d_name, ".jsonl"))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		buf_init(&b, 128 << 20);
		if (harness_read_file(path, &b) == 0 && b.data)
			buf_puts(&all, b.data);
		buf_free(&b);
	}
	closedir(d);
	return all.data ? buf_steal(&all) : strdup("");
}

static char *daily_note(struct run *r)
{
	char path[1024], day[40];
	time_t now = time(NULL);
	struct tm tm;
	struct buf b;

	gmtime_r(&now, &tm);
	strftime(day, sizeof day, "%Y-%m-%d", &tm);
	snprintf(path, sizeof path, "%s/workspaces/mem/memory/%s.md", r->home, day);
	buf_init(&b, 16 << 20);
	if (harness_read_file(path, &b) != 0 || !b.data) {
		buf_free(&b);
		return strdup("");
	}
	return buf_steal(&b);
}

/* The conversation; *died: the gateway was killed on the way. */
static void converse(struct run *r, bool *died)
{
	char *reply, *pad = padding();

	*died = false;
	reply = chat(r, "k-hello", "hello mem");
	assert_non_null(reply);
	assert_string_equal(reply, "hi there");
	free(reply);
	reply = chat(r, "k-long", pad);
	if (!reply) {
		/* Killed: the gateway starts again, the client tries again. */
		for (int i = 0; i < 200 && !run_gone(r); i++)
			usleep(20000);
		assert_true(run_gone(r));
		*died = true;
		run_start(r, NULL);
		reply = chat(r, "k-long", pad);
	}
	free(pad);
	if (!reply)
		fail_msg("the long message got no answer%s", *died ? " after the restart" : "");
	assert_string_equal(reply, "read the document");
	free(reply);
}

/* Whether the crash log names the point. */
static bool point_reached(const char *log, const char *name)
{
	char want[200];
	struct buf b;
	bool hit;

	buf_init(&b, 64 << 20);
	assert_int_equal(harness_read_file(log, &b), 0);
	snprintf(want, sizeof want, " %s\n", name);
	hit = b.data && strstr(b.data, want);
	buf_free(&b);
	return hit;
}

static void run_end(struct run *r)
{
	int code = harness_daemon_stop(&r->d, SIGTERM, 20000);

	if (code != 0) {
		struct buf log;

		buf_init(&log, 64 << 20);
		harness_daemon_log(&r->d, &log);
		fprintf(stderr, "daemon exit %d; log:\n%s\n", code, log.data ? log.data : "");
		buf_free(&log);
	}
	assert_int_equal(code, 0);
	harness_rmrf(r->home);
}

static void test_crash_during_silent_turn(void **state)
{
	static const char *const points[] = {"turn.memory_flush.recorded",
	                                     "turn.memory_flush.done"};
	struct run r;
	bool died;
	char *s;

	(void)state;
	/* Without a crash: both points are on the conversation's way. */
	run_home(&r);
	run_start(&r, NULL);
	converse(&r, &died);
	assert_false(died);
	assert_int_equal(model_requests_with(FLUSH_MARK), 2);
	for (size_t i = 0; i < 2; i++)
		if (!point_reached(r.log, points[i]))
			fail_msg("the conversation does not reach %s", points[i]);
	run_end(&r);

	for (size_t i = 0; i < 2; i++) {
		run_home(&r);
		run_start(&r, points[i]);
		converse(&r, &died);
		if (!died)
			fail_msg("SB_CRASH_NAME=%s did not kill the gateway", points[i]);
		/* Killed before its first call: none; after its calls: those
		 * two, and none again after the restart. */
		assert_int_equal(model_requests_with(FLUSH_MARK), i == 0 ? 0 : 2);
		s = daily_note(&r);
		assert_int_equal(count_in(s, "Launch code word: PAPAYA."), i == 0 ? 0 : 1);
		free(s);
		s = transcripts(&r);
		assert_int_equal(count_in(s, "\"event\":\"memory_flush\",\"state\":\"started\""),
		                 1);
		/* Both points come before the "done" event is written. */
		assert_int_equal(count_in(s, "\"event\":\"memory_flush\",\"state\":\"done\""), 0);
		free(s);
		run_end(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_crash_during_silent_turn),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
