/*
 * test_logs.c - the operator's view of the gateway's log: the real daemon
 * with a scripted agent (and a scripted fallback model) behind a webhook
 * hook writes $HOME/logs/gateway.log; a message leaves its "message
 * accepted" and "run done" lines there with their fields, a rate-limited
 * model its "model error" and "model failover" lines; `switchboard logs -n
 * 5` prints the file's last five lines with no help from the gateway; and
 * `switchboard logs -f`, started in the background, prints a line written
 * after it started and goes on doing so after the file rotates (a reload
 * sets log.file_max to 4KiB). With --json, each line is one JSON object of
 * its fields (typed: numbers are numbers), for -n and for -f.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "harness.h"

#define TOKEN "tok-logs-0123456789abcdef"

struct fixture {
	struct harness_daemon d;
	char home[512];
	char log[700];  /* $HOME/logs/gateway.log */
	pid_t follower; /* `switchboard logs -f`, killed at teardown if still there */
};

static struct fixture fx;

static void write_home_file(const char *rel, const char *text)
{
	char path[1024];

	snprintf(path, sizeof path, "%s/%s", fx.home, rel);
	assert_int_equal(harness_write_file(path, text), 0);
}

static void write_config(const char *log_section)
{
	char cfg[4096];

	snprintf(cfg, sizeof cfg,
	         "gateway: {bind: 127.0.0.1}\n"
	         "%s"
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml, max_retries: 0}\n"
	         "  - {id: t, api: scripted, script: fallback.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/x, fallbacks: [t/y], "
	         "queue_mode: followup}\n"
	         "channels:\n"
	         "  webhook:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    group_policy: open\n"
	         "    hooks:\n"
	         "      - {name: tok, verify: bearer, secret: %s}\n",
	         log_section, TOKEN);
	write_home_file("switchboard.yaml", cfg);
}

/* Posts text to the hook from conversation conv and waits for the reply,
 * which must hold want_reply and text. */
static void send_message(const char *text, const char *conv, const char *want_reply)
{
	const char *hdrs[] = {"Authorization: Bearer " TOKEN, "Content-Type: application/json",
	                      NULL};
	char body[512];
	struct buf resp;
	long st;

	snprintf(body, sizeof body, "{\"text\":\"%s\",\"sender\":\"u-1\",\"conversation\":\"%s\"}",
	         text, conv);
	bool ok;
	char got[1024];

	buf_init(&resp, 1 << 20);
	st = harness_http(fx.d.port, "POST", "/hooks/tok", hdrs, body, &resp);
	/* The reply is "<model's prefix>[Untrusted content ...]\n<text>". */
	ok = st == 200 && resp.data && strstr(resp.data, want_reply) && strstr(resp.data, text);
	snprintf(got, sizeof got, "%s", resp.data ? resp.data : "");
	buf_free(&resp);
	if (!ok)
		fail_msg("the hook answered %ld: %s", st, got);
}

static char *read_text(const char *path)
{
	struct buf b;

	buf_init(&b, 64 << 20);
	if (harness_read_file(path, &b) != 0) {
		buf_free(&b);
		return strdup("");
	}
	return b.data ? b.data : strdup("");
}

/* The first line of text that holds every needle (NULL-terminated), copied
 * into out; false when none does. */
static bool find_line(const char *text, const char *const *needles, char *out, size_t size)
{
	const char *line = text;

	while (line && *line) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		char buf[16384];
		bool all = true;

		snprintf(buf, sizeof buf, "%.*s", (int)len, line);
		for (size_t i = 0; needles[i] && all; i++)
			all = strstr(buf, needles[i]) != NULL;
		if (all) {
			snprintf(out, size, "%s", buf);
			return true;
		}
		line = end ? end + 1 : NULL;
	}
	return false;
}

/* Waits up to timeout_ms for a line of path with every needle. */
static bool wait_line(const char *path, const char *const *needles, int timeout_ms, char *out,
                      size_t size)
{
	for (int waited = 0;; waited += 50) {
		char *text = read_text(path);
		bool found = find_line(text, needles, out, size);

		free(text);
		if (found || waited >= timeout_ms)
			return found;
		usleep(50 * 1000);
	}
}

static int setup(void **state)
{
	const char *init[] = {"init", NULL};

	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	snprintf(fx.log, sizeof fx.log, "%s/logs/gateway.log", fx.home);
	write_config("");
	write_home_file("script.yaml", "steps:\n"
	                               "  - match: fail over\n"
	                               "    error: rate_limit\n"
	                               "  - text: \"reply to: {{user_text}}\"\n");
	write_home_file("fallback.yaml", "steps:\n"
	                                 "  - text: \"fallback to: {{user_text}}\"\n");
	if (harness_cli(fx.home, NULL, init) != 0)
		return -1;
	if (harness_daemon_start(&fx.d, fx.home, NULL) != 0 || harness_wait_ready(&fx.d, 15000))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (fx.follower > 0) {
		kill(fx.follower, SIGKILL);
		harness_wait(fx.follower, 5000);
	}
	if (fx.d.pid > 0)
		assert_int_equal(harness_daemon_stop(&fx.d, SIGTERM, 20000), 0);
	harness_rmrf(fx.home);
	return 0;
}

/* A message leaves one "message accepted" line (where it goes, never its
 * text) and one "run done" line in the home's log file. */
static void test_traffic_lines(void **state)
{
	const char *accepted[] = {"level=info",
	                          "module=dispatch",
	                          "msg=\"message accepted\"",
	                          " channel=webhook",
	                          " account=",
	                          " agent=main",
	                          " session=",
	                          "room-traffic",
	                          " inbox_id=",
	                          NULL};
	const char *run[] = {"level=info",
	                     "msg=\"run done\"",
	                     " agent=main",
	                     "room-traffic",
	                     " model=s/x",
	                     " duration_ms=",
	                     " input_tokens=",
	                     " output_tokens=",
	                     " tool_calls=0",
	                     " end=end_turn",
	                     NULL};
	char line[16384];
	struct stat st;
	char *text;

	(void)state;
	send_message("hello secret-free world", "room-traffic", "\"reply to: ");
	assert_true(wait_line(fx.log, run, 5000, line, sizeof line));
	assert_null(strstr(line, " output_tokens=0 "));
	text = read_text(fx.log);
	if (!find_line(text, accepted, line, sizeof line)) {
		free(text);
		fail_msg("no accepted-message line in %s", fx.log);
	}
	/* never the message's text */
	assert_null(strstr(text, "secret-free"));
	free(text);
	assert_int_equal(stat(fx.log, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	snprintf(line, sizeof line, "%s/logs", fx.home);
	assert_int_equal(stat(line, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
}

/* A rate-limited model (no retries) hands the run to the fallback. */
static void test_model_failover_lines(void **state)
{
	const char *err[] = {"level=info",     "module=models", "msg=\"model error\"",
	                     " provider=s",    " model=x",      " kind=rate_limit",
	                     " then=failover", " failover=yes", NULL};
	const char *fo[] = {"msg=\"model failover\"", " from=s/x", " to=t/y", " kind=rate_limit",
	                    NULL};
	const char *run[] = {"msg=\"run done\"", "room-failover", " model=t/y", NULL};
	char line[16384];

	(void)state;
	send_message("please fail over", "room-failover", "\"fallback to: ");
	assert_true(wait_line(fx.log, run, 5000, line, sizeof line));
	assert_true(wait_line(fx.log, err, 1000, line, sizeof line));
	assert_true(wait_line(fx.log, fo, 1000, line, sizeof line));
}

/* `switchboard logs -n 5`: the file's last five lines, read from the file. */
static void test_logs_tail(void **state)
{
	const char *args[] = {"logs", "-n", "5", NULL};
	struct buf out;
	char *text, *want;
	size_t nl = 0;

	(void)state;
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(fx.home, &out, args), 0);
	text = read_text(fx.log);
	/* the last five lines of the file, whole */
	want = text + strlen(text);
	while (want > text && nl < 6) {
		want--;
		if (*want == '\n')
			nl++;
	}
	if (nl == 6)
		want++;
	assert_non_null(out.data);
	assert_string_equal(out.data, want);
	nl = 0;
	for (const char *p = out.data; *p; p++)
		nl += *p == '\n';
	assert_int_equal(nl, 5);
	assert_true(strncmp(out.data, "ts=", 3) == 0);
	free(text);
	buf_free(&out);
}

/* Each line of out as a JSON object; fails on a line that is not one. */
static json_t *json_lines(const char *out)
{
	json_t *all = json_array();

	while (out && *out) {
		size_t len = strcspn(out, "\n");
		json_t *j = json_loadb(out, len, 0, NULL);

		if (!json_is_object(j))
			fail_msg("logs --json printed a line that is not a JSON object: %.*s",
			         (int)len, out);
		json_array_append_new(all, j);
		out += len;
		if (*out)
			out++;
	}
	return all;
}

/* `switchboard logs --json -n 5`: the same five lines as objects, field for
 * field; and with -f, a line logged after it started. */
static void test_logs_json(void **state)
{
	const char *args[] = {"logs", "--json", "-n", "5", NULL};
	const char *follow[] = {"logs", "-f", "--json", "-n", "0", NULL};
	const char *run[] = {"\"msg\":\"run done\"", "room-json-follow", NULL};
	char out_path[700], line[16384];
	struct buf out;
	json_t *all;
	const json_t *o;
	char *text;
	size_t i;
	pid_t pid;
	bool saw_run = false;

	(void)state;
	send_message("json please", "room-json", " to: ");
	{
		const char *done[] = {"msg=\"run done\"", "room-json", NULL};

		assert_true(wait_line(fx.log, done, 5000, line, sizeof line));
	}
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(fx.home, &out, args), 0);
	text = read_text(fx.log);
	all = json_lines(out.data);
	assert_int_equal(json_array_size(all), 5);
	json_array_foreach(all, i, o)
	{
		char head[256];
		const char *msg = json_string_value(json_object_get(o, "msg"));

		/* a line of the file, its leading fields as written */
		snprintf(head, sizeof head, "ts=%s level=%s module=%s ",
		         json_string_value(json_object_get(o, "ts")),
		         json_string_value(json_object_get(o, "level")),
		         json_string_value(json_object_get(o, "module")));
		if (!strstr(text, head))
			fail_msg("no line starting \"%s\" in the log", head);
		assert_non_null(msg);
		if (strcmp(msg, "run done") == 0 &&
		    strstr(json_string_value(json_object_get(o, "session")), "room-json")) {
			saw_run = true;
			assert_string_equal(json_string_value(json_object_get(o, "agent")), "main");
			assert_true(json_is_integer(json_object_get(o, "tool_calls")));
			assert_int_equal(json_integer_value(json_object_get(o, "tool_calls")), 0);
			assert_true(json_is_integer(json_object_get(o, "duration_ms")));
			assert_string_equal(json_string_value(json_object_get(o, "end")),
			                    "end_turn");
		}
	}
	free(text);
	assert_true(saw_run);
	json_decref(all);
	buf_free(&out);

	snprintf(out_path, sizeof out_path, "%s/follow-json.out", fx.home);
	pid = fx.follower = harness_cli_start(fx.home, out_path, follow);
	assert_true(pid > 0);
	usleep(500 * 1000);
	send_message("follow json", "room-json-follow", " to: ");
	if (!wait_line(out_path, run, 5000, line, sizeof line)) {
		char *t = read_text(out_path);

		snprintf(line, sizeof line, "%s", t);
		free(t);
		fail_msg("logs -f --json did not show the run line; it printed:\n%s", line);
	}
	kill(pid, SIGINT);
	fx.follower = 0;
	assert_int_equal(harness_wait(pid, 5000), 0);
	{
		char *t = read_text(out_path);

		all = json_lines(t);
		free(t);
	}
	assert_true(json_array_size(all) >= 2); /* accepted, run done */
	json_decref(all);
}

/* `switchboard logs -f` shows what is logged after it started, and follows
 * the file across rotations. */
static void test_logs_follow_rotation(void **state)
{
	const char *args[] = {"logs", "-f", "-n", "0", NULL};
	const char *first[] = {"msg=\"message accepted\"", "room-follow-1", NULL};
	const char *reloaded[] = {"msg=reloaded", NULL};
	const char *last[] = {"msg=\"run done\"", "room-follow-last", NULL};
	char out_path[700], line[16384], rotated[720], conv[64];
	struct stat st0, st;
	char *text;
	pid_t pid;
	int rotations = 0, sent = 0;

	(void)state;
	snprintf(out_path, sizeof out_path, "%s/follow.out", fx.home);
	pid = fx.follower = harness_cli_start(fx.home, out_path, args);
	assert_true(pid > 0);
	usleep(500 * 1000); /* it has printed the (empty) tail and follows */
	text = read_text(out_path);
	assert_string_equal(text, "");
	free(text);
	send_message("first", "room-follow-1", " to: ");
	if (!wait_line(out_path, first, 5000, line, sizeof line)) {
		text = read_text(out_path);
		snprintf(line, sizeof line, "%s", text);
		free(text);
		fail_msg("logs -f did not show the new line; it printed:\n%s", line);
	}

	/* A tiny file_max: a few messages rotate it. */
	write_config("log: {file_max: 4KiB, file_keep: 2}\n");
	kill(fx.d.pid, SIGHUP);
	assert_true(wait_line(fx.log, reloaded, 5000, line, sizeof line));
	assert_int_equal(stat(fx.log, &st0), 0);
	snprintf(rotated, sizeof rotated, "%s.1", fx.log);
	for (; sent < 40 && rotations < 2; sent++) {
		snprintf(conv, sizeof conv, "room-follow-fill-%d", sent);
		send_message("fill", conv, " to: ");
		if (stat(fx.log, &st) == 0 && st.st_ino != st0.st_ino) {
			rotations++;
			st0 = st;
		}
	}
	assert_int_equal(rotations, 2);
	assert_int_equal(stat(rotated, &st), 0);
	assert_true(st.st_size <= 4096);
	snprintf(line, sizeof line, "%s.3", fx.log);
	assert_int_equal(access(line, F_OK), -1); /* file_keep: 2 */
	send_message("last", "room-follow-last", " to: ");
	if (!wait_line(out_path, last, 5000, line, sizeof line)) {
		text = read_text(out_path);
		snprintf(line, sizeof line, "%s",
		         text + (strlen(text) > 8000 ? strlen(text) - 8000 : 0));
		free(text);
		fail_msg("logs -f stopped following at a rotation; it printed (the end):\n%s",
		         line);
	}
	/* every line once, none cut at a rotation */
	text = read_text(out_path);
	for (int i = 0; i < sent; i++) {
		const char *needle[] = {"msg=\"run done\"", conv, NULL};
		char *p;
		int n = 0;

		snprintf(conv, sizeof conv, "room-follow-fill-%d ", i);
		assert_true(find_line(text, needle, line, sizeof line));
		for (p = strstr(text, conv); p; p = strstr(p + 1, conv))
			n++;
		assert_int_equal(n, 2); /* its accepted line and its run line */
	}
	for (const char *p = text; *p;) {
		const char *end = strchr(p, '\n');

		assert_non_null(end);
		assert_true(strncmp(p, "ts=", 3) == 0);
		p = end + 1;
	}
	free(text);
	kill(pid, SIGINT);
	fx.follower = 0;
	assert_int_equal(harness_wait(pid, 5000), 0);
}

/* Two rotations between two of the follower's polls (200 ms): the file in
 * between, now gateway.log.1, is printed too, in order. The "gateway" here
 * is this test, writing and renaming the files as the gateway's rotation
 * does, faster than any poll. */
static void append_line(const char *path, const char *line)
{
	FILE *f = fopen(path, "a");

	assert_non_null(f);
	fprintf(f, "%s\n", line);
	assert_int_equal(fclose(f), 0);
}

static void test_logs_follow_two_rotations_at_once(void **state)
{
	const char *args[] = {"logs", "-f", "-n", "0", NULL};
	const char *want_d[] = {"msg=D", NULL};
	char home[512], dir[600], log[700], one[720], two[720], out_path[700], line[4096];
	const char *a, *b, *c, *d;
	char *text;
	pid_t pid;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	snprintf(dir, sizeof dir, "%s/logs", home);
	assert_int_equal(mkdir(dir, 0700), 0);
	snprintf(log, sizeof log, "%s/gateway.log", dir);
	snprintf(one, sizeof one, "%s.1", log);
	snprintf(two, sizeof two, "%s.2", log);
	snprintf(out_path, sizeof out_path, "%s/follow.out", home);
	append_line(log, "ts=1 level=info module=t msg=old");
	pid = harness_cli_start(home, out_path, args);
	assert_true(pid > 0);
	usleep(600 * 1000); /* it printed the (empty) tail and follows */
	append_line(log, "ts=2 level=info module=t msg=A");
	usleep(600 * 1000); /* A is printed; the follower holds this file */
	append_line(log, "ts=3 level=info module=t msg=B");
	assert_int_equal(rename(log, one), 0);
	append_line(log, "ts=4 level=info module=t msg=C");
	assert_int_equal(rename(one, two), 0);
	assert_int_equal(rename(log, one), 0);
	append_line(log, "ts=5 level=info module=t msg=D");
	if (!wait_line(out_path, want_d, 5000, line, sizeof line)) {
		kill(pid, SIGINT);
		harness_wait(pid, 5000);
		fail_msg("logs -f did not follow two rotations: %s", read_text(out_path));
	}
	kill(pid, SIGINT);
	assert_int_equal(harness_wait(pid, 5000), 0);
	text = read_text(out_path);
	a = strstr(text, "msg=A\n");
	b = strstr(text, "msg=B\n");
	c = strstr(text, "msg=C\n");
	d = strstr(text, "msg=D\n");
	if (!a || !b || !c || !d || !(a < b && b < c && c < d) || strstr(text, "msg=old"))
		fail_msg("logs -f across two rotations printed:\n%s", text);
	free(text);
	harness_rmrf(home);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_traffic_lines),
	    cmocka_unit_test(test_model_failover_lines),
	    cmocka_unit_test(test_logs_tail),
	    cmocka_unit_test(test_logs_json),
	    cmocka_unit_test(test_logs_follow_rotation),
	    cmocka_unit_test(test_logs_follow_two_rotations_at_once),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
