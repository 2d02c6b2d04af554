/*
 * test_crash_commands.c - every crash point a conversation of chat commands
 * reaches, enumerated, from the Telegram user's side
 * (tests/fakes/fake_telegram.js, which confirms updates by offset as
 * Telegram does).
 *
 * The user writes "/model t/other", then "/status", then "after". A first
 * run without a crash counts the points (P). Then for each N in 1..P, on a
 * fresh home and a fresh fake: SB_CRASH_AT=N, the conversation, and a start
 * without it whenever the gateway died. Per N:
 *  - each message got its answer: "This session now uses t/other.", a
 *    status naming the chosen model, "other after" from the chosen model;
 *  - no answer arrived twice beyond the documented window (a send the
 *    platform accepted in the instant before a kill, counted in
 *    switchboard_outbox_resent_after_crash_total);
 *  - no command text is in a transcript;
 *  - the inbox and outbox are empty and the stop is clean.
 *
 * SB_ENUM_ONLY=N runs that N alone.
 */
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

#define TOKEN "123456:TEST-token"
#define ALICE 4242
#define WAIT_MS 20000
#define FIRST_MSG 1000 /* the fake user's first message id */

struct run {
	long n; /* the crash point, 0 = none */
	char home[512];
	char points[700];
	struct harness_daemon d;
	struct harness_peer fake;
	int64_t next_msg;
	bool died;
	long long resent;
};

static int failures;

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

#define run_fail(r, ...)                                                                           \
	do {                                                                                       \
		failures++;                                                                        \
		fprintf(stderr, "crash point %ld: ", (r)->n);                                      \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fprintf(stderr, "\n");                                                             \
	} while (0)

static void dump_log(const struct harness_daemon *d)
{
	struct buf log;

	buf_init(&log, 64 << 20);
	harness_daemon_log(d, &log);
	fprintf(stderr, "gateway log:\n%s\n", log.data ? log.data : "");
	buf_free(&log);
}

static int home_file(struct run *r, const char *name, const char *text)
{
	char path[700];

	snprintf(path, sizeof path, "%s/%s", r->home, name);
	return harness_write_file(path, text);
}

static void prepare(struct run *r)
{
	const char *init[] = {"init", NULL};
	const char *args[] = {TOKEN, NULL};
	char cfg[2048];

	assert_int_equal(harness_tmpdir(r->home, sizeof r->home), 0);
	assert_int_equal(harness_peer_start(&r->fake, "fake_telegram.js", args), 0);
	assert_int_equal(home_file(r, "script.yaml", "steps:\n  - text: \"echo {{user_text}}\"\n"),
	                 0);
	assert_int_equal(home_file(r, "other.yaml", "steps:\n  - text: \"other {{user_text}}\"\n"),
	                 0);
	snprintf(cfg, sizeof cfg,
	         "gateway: {bind: 127.0.0.1}\n"
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "  - {id: t, api: scripted, script: other.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/echo, fallbacks: [t/other]}\n"
	         "openai_api: {enabled: true}\n"
	         "security: {owners: [\"telegram:*\"]}\n"
	         "channels:\n"
	         "  telegram:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    accounts:\n"
	         "      - id: fake\n"
	         "        token: ${SB_TEST_TG_TOKEN}\n"
	         "        api_base: http://127.0.0.1:%d\n"
	         "        poll_timeout: 1s\n",
	         r->fake.port);
	assert_int_equal(home_file(r, "switchboard.yaml", cfg), 0);
	assert_int_equal(harness_cli(r->home, NULL, init), 0);
	snprintf(r->points, sizeof r->points, "%s/points.log", r->home);
	r->next_msg = FIRST_MSG;
}

static void start(struct run *r, long crash_at)
{
	char at[32];
	int rc;

	setenv("SB_CRASH_LOG", r->points, 1);
	if (crash_at > 0) {
		snprintf(at, sizeof at, "%ld", crash_at);
		setenv("SB_CRASH_AT", at, 1);
	}
	rc = harness_daemon_start(&r->d, r->home, NULL);
	unsetenv("SB_CRASH_AT");
	unsetenv("SB_CRASH_LOG");
	assert_int_equal(rc, 0);
}

/* Whether the gateway is gone (reaped here). */
static bool gone(struct run *r)
{
	int st;

	return r->d.pid > 0 && waitpid(r->d.pid, &st, WNOHANG) == r->d.pid;
}

/* Starts it again without a crash point after it died. */
static void revive(struct run *r)
{
	r->died = true;
	r->d.pid = -1;
	start(r, 0);
	if (harness_wait_ready(&r->d, WAIT_MS) != 0) {
		dump_log(&r->d);
		fail_msg("crash point %ld: the gateway did not start again", r->n);
	}
	r->resent += harness_oai_metric(r->d.port, "switchboard_outbox_resent_after_crash_total");
}

/* Waits until the gateway is ready or died (then revived). */
static void ready(struct run *r)
{
	int64_t end = mono_ms() + WAIT_MS;

	while (mono_ms() < end) {
		if (gone(r)) {
			revive(r);
			return;
		}
		if (harness_http(r->d.port, "GET", "/readyz", NULL, NULL, NULL) == 200)
			return;
		sleep_ms(50);
	}
	dump_log(&r->d);
	fail_msg("crash point %ld: not ready", r->n);
}

static json_t *tg_state(struct run *r)
{
	struct buf resp;
	json_t *out = NULL;

	buf_init(&resp, 64 << 20);
	if (harness_http(r->fake.port, "GET", "/_ctl/state", NULL, NULL, &resp) == 200 && resp.data)
		out = json_loads(resp.data, 0, NULL);
	buf_free(&resp);
	assert_non_null(out);
	return out;
}

static int64_t says(struct run *r, const char *text)
{
	static const char *const h[] = {"Content-Type: application/json", NULL};
	int64_t mid = r->next_msg++;
	json_t *msg = json_pack("{sIs{sIsbss}s{sIss}sIss}", "message_id", (json_int_t)mid, "from",
	                        "id", (json_int_t)ALICE, "is_bot", 0, "first_name", "Alice", "chat",
	                        "id", (json_int_t)ALICE, "type", "private", "date",
	                        (json_int_t)time(NULL), "text", text);
	json_t *u = json_pack("{so}", "message", msg);
	char *body = json_dumps(u, JSON_COMPACT);

	json_decref(u);
	assert_int_equal(harness_http(r->fake.port, "POST", "/_ctl/update", h, body, NULL), 200);
	free(body);
	return mid;
}

/* The accepted replies to mid: their number, the last one's text in *text
 * (caller frees; may be NULL). */
static int replies(struct run *r, int64_t mid, char **text)
{
	json_t *st = tg_state(r), *s;
	size_t i;
	int n = 0;

	if (text)
		*text = NULL;
	json_array_foreach(json_object_get(st, "sent"), i, s)
	{
		if (json_integer_value(json_object_get(json_object_get(s, "reply_parameters"),
		                                       "message_id")) != mid ||
		    json_integer_value(json_object_get(s, "outcome")) != 200)
			continue;
		n++;
		if (text) {
			free(*text);
			*text = strdup(json_string_value(json_object_get(s, "visible")));
		}
	}
	json_decref(st);
	return n;
}

/* Sends text and waits for its answer, reviving the gateway when it dies;
 * the number of answers (the last in *text). */
static int ask(struct run *r, const char *text, char **reply)
{
	int64_t mid = says(r, text), end = mono_ms() + WAIT_MS;
	int n = 0;

	while (mono_ms() < end && (n = replies(r, mid, NULL)) == 0) {
		if (gone(r)) {
			revive(r);
			end = mono_ms() + WAIT_MS;
		}
		sleep_ms(50);
	}
	/* A second copy would come right after the first. */
	sleep_ms(300);
	if (gone(r))
		revive(r);
	return replies(r, mid, reply);
}

static long read_points(const char *path)
{
	struct buf b;
	long n = 0;

	buf_init(&b, 64 << 20);
	if (harness_read_file(path, &b) == 0)
		for (char *p = b.data; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
			n++;
	buf_free(&b);
	return n;
}

static void expect(struct run *r, const char *text, const char *want, int *dups)
{
	char *got = NULL;
	int n = ask(r, text, &got);

	if (n < 1)
		run_fail(r, "\"%s\" was never answered", text);
	else if (!got || !strstr(got, want))
		run_fail(r, "\"%s\" was answered \"%s\", not \"%s\"", text, got ? got : "", want);
	if (n > 1)
		*dups += n - 1;
	free(got);
}

/* After a crash in the armed gateway's stop: it is started again unarmed;
 * every message has its answer, once or within the resend window, and
 * nothing is left in the inbox or outbox. */
static void after_stop_crash(struct run *r)
{
	int dups = 0;

	r->died = true;
	r->d.pid = -1;
	start(r, 0);
	ready(r);
	r->resent += harness_oai_metric(r->d.port, "switchboard_outbox_resent_after_crash_total");
	/* A resend would come right after the start. */
	sleep_ms(500);
	for (int64_t mid = FIRST_MSG; mid < r->next_msg; mid++) {
		int k = replies(r, mid, NULL);

		if (k < 1)
			run_fail(r, "message %lld lost its answer after the stop", (long long)mid);
		else
			dups += k - 1;
	}
	if (dups > r->resent)
		run_fail(r,
		         "%d answers arrived twice after the stop's crash, but %lld sends were in "
		         "the window",
		         dups, r->resent);
	if (harness_oai_wait_metric(r->d.port, "switchboard_inbox_depth", 0, 3000) != 0)
		run_fail(r, "inbox entries left after the stop's crash");
	if (harness_oai_wait_metric(r->d.port, "switchboard_outbox_depth", 0, 3000) != 0)
		run_fail(r, "outbox entries left after the stop's crash");
}

static long run_one(long n)
{
	struct run r;
	struct buf tr;
	char cmd[1200];
	int dups = 0, code;
	long points;
	FILE *p;

	memset(&r, 0, sizeof r);
	r.n = n;
	r.d.pid = -1;
	prepare(&r);
	start(&r, n);
	ready(&r);
	expect(&r, "/model t/other", "This session now uses t/other.", &dups);
	expect(&r, "/status", "Model: t/other (chosen with /model", &dups);
	expect(&r, "after", "other after", &dups);
	if (dups > r.resent)
		run_fail(&r, "%d answers arrived twice, but %lld sends were in the window", dups,
		         r.resent);
	if (harness_oai_wait_metric(r.d.port, "switchboard_inbox_depth", 0, 3000) != 0)
		run_fail(&r, "inbox entries left");
	if (harness_oai_wait_metric(r.d.port, "switchboard_outbox_depth", 0, 3000) != 0)
		run_fail(&r, "outbox entries left");
	points = read_points(r.points);
	if (n && !r.died) {
		/* The conversation did not reach N (a run's count varies with
		 * timing: lazy and batched commits). The armed gateway's own
		 * stop may reach it, which is a crash like any other: it is
		 * started again unarmed, and nothing may be left or answered
		 * twice after that start. */
		code = harness_daemon_stop_expect(&r.d, SIGTERM, 20000, 128 + SIGKILL);
		if (code == 128 + SIGKILL) {
			fprintf(stderr, "crash point %ld: reached by the stop\n", n);
			after_stop_crash(&r);
		} else {
			if (code != 0) {
				dump_log(&r.d);
				run_fail(&r, "the stop ended with %d", code);
			}
			r.d.pid = -1;
		}
	}
	if (r.d.pid > 0) {
		code = harness_daemon_stop(&r.d, SIGTERM, 20000);
		if (code != 0) {
			dump_log(&r.d);
			run_fail(&r, "the stop ended with %d", code);
		}
	}
	/* Commands never enter a transcript. */
	buf_init(&tr, 64 << 20);
	snprintf(cmd, sizeof cmd, "cat %s/agents/main/sessions/*.jsonl 2>/dev/null", r.home);
	p = popen(cmd, "r");
	if (p) {
		char chunk[4096];
		size_t k;

		while ((k = fread(chunk, 1, sizeof chunk, p)) > 0)
			buf_append(&tr, chunk, k);
		pclose(p);
	}
	buf_puts(&tr, "");
	if (strstr(tr.data, "/model") || strstr(tr.data, "/status"))
		run_fail(&r, "a command is in the transcript");
	if (harness_count_user_texts(tr.data, "\"after\"}") != 1)
		run_fail(&r, "\"after\" is in the transcript %d times",
		         harness_count_user_texts(tr.data, "\"after\"}"));
	buf_free(&tr);
	if (n && !r.died)
		fprintf(stderr, "crash point %ld: not reached\n", n);
	harness_peer_stop(&r.fake);
	harness_rmrf(r.home);
	return points;
}

static void test_every_point(void **state)
{
	const char *only = getenv("SB_ENUM_ONLY");
	int64_t t0 = mono_ms();
	long p;

	(void)state;
	setenv("SB_TEST_TG_TOKEN", TOKEN, 1);
	if (only && *only) {
		run_one(strtol(only, NULL, 10));
		assert_int_equal(failures, 0);
		return;
	}
	p = run_one(0);
	fprintf(stderr, "the command conversation reaches %ld crash points\n", p);
	assert_int_equal(failures, 0);
	assert_true(p > 0);
	for (long n = 1; n <= p; n++)
		run_one(n);
	fprintf(stderr, "enumerated %ld crash points in %.1f s (%d failures)\n", p,
	        (double)(mono_ms() - t0) / 1000.0, failures);
	assert_int_equal(failures, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_point),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
