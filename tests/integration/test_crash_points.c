/*
 * test_crash_points.c - the crash-point build (gateway/core/crash.h).
 *
 * With SB_CRASH_LOG the gateway appends "<count> <name>" for every crash
 * point it reaches; with SB_CRASH_AT=N it dies of SIGKILL at the N-th. One
 * chat completion over the OpenAI endpoint (a scripted model) is counted
 * first; then the gateway is started with SB_CRASH_AT set to the first point
 * of a request and to 1, and must die of SIGKILL with exactly N points in
 * its log, the last one numbered N. A start without SB_CRASH_AT on the same
 * home then answers.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "harness.h"
#include "harness_oai.h"

struct fx {
	char home[512];
	char token[256];
	char log[700];
	struct harness_daemon d;
};

static void dump_log(const struct harness_daemon *d)
{
	struct buf log;

	buf_init(&log, 64 << 20);
	harness_daemon_log(d, &log);
	fprintf(stderr, "gateway log:\n%s\n", log.data ? log.data : "");
	buf_free(&log);
}

static void setup_home(struct fx *f)
{
	const char *init[] = {"init", NULL};
	char path[1024];

	memset(f, 0, sizeof *f);
	assert_int_equal(harness_tmpdir(f->home, sizeof f->home), 0);
	snprintf(path, sizeof path, "%s/switchboard.yaml", f->home);
	assert_int_equal(harness_write_file(path, "providers:\n"
	                                          "  - {id: s, api: scripted, script: script.yaml}\n"
	                                          "agents:\n"
	                                          "  - {id: main, default: true, model: s/x}\n"
	                                          "openai_api: {enabled: true, sync_timeout: 20s}\n"),
	                 0);
	snprintf(path, sizeof path, "%s/script.yaml", f->home);
	assert_int_equal(harness_write_file(path, "steps:\n  - text: \"reply to: {{user_text}}\"\n"),
	                 0);
	assert_int_equal(harness_cli(f->home, NULL, init), 0);
	assert_int_equal(harness_oai_token(f->home, f->token, sizeof f->token), 0);
	snprintf(f->log, sizeof f->log, "%s/points.log", f->home);
}

/* One chat completion; the HTTP status (0 when the connection broke). */
static long ask(struct fx *f, const char *user, const char *text, char **reply)
{
	return harness_oai_ask(f->d.port, f->token, user, text, reply);
}

/* The points in the log: their count; fails unless numbered 1..count in
 * order. last receives the last line's name. */
static long read_points(const char *path, char *last, size_t size)
{
	struct buf b;
	long n = 0;

	buf_init(&b, 64 << 20);
	if (harness_read_file(path, &b) != 0) {
		buf_free(&b);
		return 0;
	}
	for (char *p = b.data; p && *p;) {
		char *nl = strchr(p, '\n'), *end = NULL;
		long k = strtol(p, &end, 10);

		assert_non_null(nl);
		if (k != n + 1 || !end || *end != ' ')
			fail_msg("crash log line %ld reads \"%.*s\"", n + 1, (int)(nl - p), p);
		n = k;
		if (last)
			snprintf(last, size, "%.*s", (int)(nl - end - 1), end + 1);
		p = nl + 1;
	}
	buf_free(&b);
	return n;
}

static void start(struct fx *f, long crash_at)
{
	char at[32];

	setenv("SB_CRASH_LOG", f->log, 1);
	if (crash_at > 0) {
		snprintf(at, sizeof at, "%ld", crash_at);
		setenv("SB_CRASH_AT", at, 1);
	} else {
		unsetenv("SB_CRASH_AT");
	}
	int rc = harness_daemon_start(&f->d, f->home, NULL);
	unsetenv("SB_CRASH_AT");
	unsetenv("SB_CRASH_LOG");
	assert_int_equal(rc, 0);
}

static void test_counts_and_kills(void **state)
{
	struct fx f;
	char name[128], *reply = NULL;
	long ready_points, total, code;

	(void)state;
	setup_home(&f);

	/* Count: the points up to ready, and those of one request. */
	start(&f, 0);
	if (harness_wait_ready(&f.d, 20000) != 0) {
		dump_log(&f.d);
		fail_msg("the gateway did not start");
	}
	ready_points = read_points(f.log, NULL, 0);
	assert_int_equal(ask(&f, "u1", "first", &reply), 200);
	assert_string_equal(reply, "reply to: first");
	free(reply);
	total = read_points(f.log, name, sizeof name);
	code = harness_daemon_stop(&f.d, SIGTERM, 20000);
	if (code != 0)
		dump_log(&f.d);
	assert_int_equal(code, 0);
	fprintf(stderr, "%ld crash points up to ready, %ld after one request\n", ready_points,
	        total);
	if (total <= ready_points)
		fail_msg("a chat completion reached no crash point (%ld before, %ld after)",
		         ready_points, total);

	/* SB_CRASH_AT=N: SIGKILL at exactly the N-th point. N = 1 dies
	 * during start-up; N = the first point after ready dies inside the
	 * request (or whatever reaches a point first). */
	long ns[] = {1, ready_points + 1};
	for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
		unlink(f.log);
		start(&f, ns[i]);
		/* Start-up commits race with readiness (a second start has no
		 * migrations to commit): the N-th point may come before ready,
		 * during the request, or in a later one. Requests are made while
		 * the gateway lives and answers; a request may die with it, so
		 * only how the gateway ended is asserted. The gateway is reaped
		 * here, not by a readiness helper that would reap it unseen. */
		code = -1;
		time_t until = time(NULL) + 20;
		for (int asked = 0; ns[i] > 1 && asked < 20 && time(NULL) < until;) {
			int st;
			pid_t r = waitpid(f.d.pid, &st, WNOHANG);

			if (r == f.d.pid) {
				code = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
				break;
			}
			if (harness_http(f.d.port, "GET", "/readyz", NULL, NULL, NULL) == 200) {
				char user[16];

				snprintf(user, sizeof user, "u%d", 2 + asked++);
				ask(&f, user, "second", NULL);
			} else {
				usleep(10000);
			}
		}
		if (code == -1)
			code = harness_wait(f.d.pid, 20000);
		f.d.pid = 0;
		if (code != 128 + SIGKILL)
			fail_msg("SB_CRASH_AT=%ld: the gateway ended with %ld, not SIGKILL", ns[i],
			         code);
		assert_int_equal(read_points(f.log, name, sizeof name), ns[i]);
		fprintf(stderr, "SB_CRASH_AT=%ld killed the gateway at \"%s\"\n", ns[i], name);
	}

	/* The home starts and answers again. */
	unlink(f.log);
	start(&f, 0);
	if (harness_wait_ready(&f.d, 20000) != 0) {
		dump_log(&f.d);
		fail_msg("the gateway did not start after the kills");
	}
	assert_int_equal(ask(&f, "u3", "third", &reply), 200);
	assert_string_equal(reply, "reply to: third");
	free(reply);
	code = harness_daemon_stop(&f.d, SIGTERM, 20000);
	if (code != 0)
		dump_log(&f.d);
	assert_int_equal(code, 0);
	harness_rmrf(f.home);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_counts_and_kills),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
