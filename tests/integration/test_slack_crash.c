/*
 * test_slack_crash.c - crash safety of the Slack channel, end to end.
 *
 * While events arrive on both paths, the gateway is SIGKILLed CRASH_KILLS
 * times at random moments and started again on the same home:
 *  - Events API: the test plays Slack, POSTing CRASH_EV signed events and
 *    sending again (same body, X-Slack-Retry-Num) every one that was not
 *    answered 200, as Slack does;
 *  - Socket Mode: tests/fakes/fake_slack.js delivers CRASH_SOCK envelopes
 *    and delivers again, on the next socket, every one that was not acked.
 * After the last start and a quiet period:
 *  - every event was acknowledged (200 / envelope ack) in the end, and
 *    every acknowledged event got a reply (read back from the fake);
 *  - the inbox holds each message once: a retried event was never stored
 *    twice;
 *  - duplicate replies (a message answered more than once) are counted:
 *    they can only come from a send cut between Slack's acceptance and our
 *    commit, so they are bounded by switchboard_outbox_resent_after_crash
 *    summed over the starts; the count is printed;
 *  - the last stop is clean (exit 0; no leaks under ASan).
 *
 * SB_CRASH_SEED=<n> replays a run's kill schedule (the seed is printed).
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
#include <sqlite3.h>

#include "channels/slack/slack_proto.h"
#include "harness.h"

#define CRASH_EV 50
#define CRASH_SOCK 30
#define CRASH_KILLS 4
#define CRASH_KILL_MIN_MS 300
#define CRASH_KILL_MAX_MS 900
#define CRASH_SETTLE_MS 60000
#define CRASH_QUIET_MS 2000
#define SECRET "crash-test-signing-secret-0123456789"
#define PATH "/slack/events/ev"

struct fixture {
	struct harness_peer fake;
	struct harness_daemon d;
	char home[512];
	int starts, kills, killed;
	int64_t resent_after_crash;
	pid_t killer;
	bool dead; /* the gateway was killed and not started again yet */
};

static struct fixture fx;

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

static int64_t metric(const char *name)
{
	struct buf body;
	int64_t v = -1;

	buf_init(&body, 1 << 20);
	assert_int_equal(harness_http(fx.d.port, "GET", "/metrics", NULL, NULL, &body), 200);
	for (char *p = body.data; p && (p = strstr(p, name)); p += strlen(name))
		if ((p == body.data || p[-1] == '\n') && p[strlen(name)] == ' ') {
			v = strtoll(p + strlen(name) + 1, NULL, 10);
			break;
		}
	buf_free(&body);
	if (v < 0)
		fail_msg("metric %s not found", name);
	return v;
}

static json_t *fake(const char *method, const char *path, json_t *body_take)
{
	static const char *const hdr[] = {"Content-Type: application/json", NULL};
	char *text = body_take ? json_dumps(body_take, JSON_COMPACT) : NULL;
	struct buf resp;
	json_t *j;

	json_decref(body_take);
	buf_init(&resp, 64 << 20);
	assert_int_equal(harness_http(fx.fake.port, method, path, text ? hdr : NULL, text, &resp),
	                 200);
	free(text);
	j = json_loads(resp.data, 0, NULL);
	buf_free(&resp);
	assert_non_null(j);
	return j;
}

/* Kills the gateway after a random time, from a child process. */
static void schedule_kill(void)
{
	int ms = CRASH_KILL_MIN_MS + rand() % (CRASH_KILL_MAX_MS - CRASH_KILL_MIN_MS + 1);
	pid_t target = fx.d.pid;

	fx.killer = fork();
	assert_true(fx.killer >= 0);
	if (fx.killer == 0) {
		sleep_ms(ms);
		kill(target, SIGKILL);
		_exit(0);
	}
}

static void start_gateway(void)
{
	assert_int_equal(harness_daemon_start(&fx.d, fx.home, NULL), 0);
	if (harness_wait_ready(&fx.d, 30000) != 0)
		fail_msg("the gateway did not become ready (start %d)", fx.starts + 1);
	fx.starts++;
	fx.dead = false;
	fx.resent_after_crash += metric("switchboard_outbox_resent_after_crash_total");
	if (fx.kills < CRASH_KILLS) {
		fx.kills++;
		schedule_kill();
	}
}

/* Restarts the gateway when the killer got it. */
static void reap(void)
{
	int st;

	if (waitpid(fx.d.pid, &st, WNOHANG) == fx.d.pid) {
		assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
		fx.killed++;
		if (fx.killer > 0) {
			waitpid(fx.killer, NULL, 0);
			fx.killer = 0;
		}
		fx.d.pid = -1;
		start_gateway();
	}
}

static char *event_body(int i)
{
	char channel[32], ts[32], text[64], eid[32], user[32];
	json_t *o;
	char *out;

	snprintf(user, sizeof user, "UE%03d", i);
	snprintf(channel, sizeof channel, "D0EV%03d", i);
	snprintf(ts, sizeof ts, "1700001000.%06d", i);
	snprintf(text, sizeof text, "crash ev %03d", i);
	snprintf(eid, sizeof eid, "EvC%03d", i);
	o = json_pack("{ssssssss s{ssssssssssss}}", "type", "event_callback", "team_id", "T0TEST",
	              "api_app_id", "A0TEST", "event_id", eid, "event", "type", "message",
	              "channel", channel, "channel_type", "im", "user", user, "text", text, "ts",
	              ts);
	out = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return out;
}

static long post_event(const char *body, int attempt)
{
	char ts[32], sig[SLACK_SIG_SIZE], hts[64], hsig[128], hretry[64];
	const char *headers[] = {"Content-Type: application/json", hts, hsig,
	                         attempt ? hretry : NULL, NULL};

	snprintf(ts, sizeof ts, "%ld", (long)time(NULL));
	assert_int_equal(slack_sig_compute(SECRET, ts, body, strlen(body), sig), 0);
	snprintf(hts, sizeof hts, "X-Slack-Request-Timestamp: %s", ts);
	snprintf(hsig, sizeof hsig, "X-Slack-Signature: %s", sig);
	snprintf(hretry, sizeof hretry, "X-Slack-Retry-Num: %d", attempt > 3 ? 3 : attempt);
	return harness_http(fx.d.port, "POST", PATH, headers, body, NULL);
}

static void send_envelope(int i)
{
	char channel[32], ts[32], text[64], eid[32], user[32];
	json_t *payload;

	snprintf(user, sizeof user, "UK%03d", i);
	snprintf(channel, sizeof channel, "D0SK%03d", i);
	snprintf(ts, sizeof ts, "1700002000.%06d", i);
	snprintf(text, sizeof text, "crash sock %03d", i);
	snprintf(eid, sizeof eid, "EvK%03d", i);
	payload = json_pack("{ssssssss s{ssssssssssss}}", "type", "event_callback", "team_id",
	                    "T0TEST", "api_app_id", "A0TEST", "event_id", eid, "event", "type",
	                    "message", "channel", channel, "channel_type", "im", "user", user,
	                    "text", text, "ts", ts);
	json_decref(fake("POST", "/_test/envelope", json_pack("{so}", "payload", payload)));
}

/* Replies per message: counts[i] for "reply to: <prefix> %03d". */
static void count_replies(const char *prefix, int n, int *counts)
{
	json_t *st = fake("GET", "/_test/state", NULL), *p;
	size_t k;
	char head[64];

	memset(counts, 0, sizeof(int) * (size_t)n);
	snprintf(head, sizeof head, "reply to: %s ", prefix);
	json_array_foreach(json_object_get(st, "posts"), k, p)
	{
		const char *t = json_string_value(json_object_get(p, "text"));

		if (t && strncmp(t, head, strlen(head)) == 0) {
			int i = (int)strtol(t + strlen(head), NULL, 10);

			if (i >= 0 && i < n)
				counts[i]++;
		}
	}
	json_decref(st);
}

static int setup(void **state)
{
	char path[1024], cfg[4096];
	const char *init[] = {"init", NULL};
	const char *seed_env = getenv("SB_CRASH_SEED");
	unsigned seed = seed_env ? (unsigned)strtoul(seed_env, NULL, 10) : (unsigned)time(NULL);

	(void)state;
	printf("SB_CRASH_SEED=%u\n", seed);
	srand(seed);
	memset(&fx, 0, sizeof fx);
	if (harness_peer_start(&fx.fake, "fake_slack.js", NULL) != 0)
		return -1;
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	snprintf(cfg, sizeof cfg,
	         "gateway: {bind: 127.0.0.1}\n"
	         "session: {dm_scope: per-channel-peer}\n"
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/x, queue_mode: followup}\n"
	         /* The test users are the operator: their text reaches the
	          * agent as it is (others' is marked untrusted). */
	         "security: {owners: [\"slack:*\"]}\n"
	         "channels:\n"
	         "  slack:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    accounts:\n"
	         "      - {id: ev, bot_token: xoxb-crash-ev, signing_secret: \"%s\", "
	         "api_base: \"http://127.0.0.1:%d/api/\"}\n"
	         "      - {id: sock, mode: socket, bot_token: xoxb-crash-sock, app_token: "
	         "xapp-1-crash, api_base: \"http://127.0.0.1:%d/api/\", reconnect_max: 1s}\n",
	         SECRET, fx.fake.port, fx.fake.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/script.yaml", fx.home);
	if (harness_write_file(path, "steps:\n"
	                             "  - text: \"reply to: {{user_text}}\"\n"
	                             "    delay_ms: 30\n") != 0)
		return -1;
	if (harness_cli(fx.home, NULL, init) != 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (fx.killer > 0) {
		kill(fx.killer, SIGKILL);
		waitpid(fx.killer, NULL, 0);
	}
	if (fx.d.pid > 0)
		harness_daemon_stop(&fx.d, SIGKILL, 5000);
	harness_peer_stop(&fx.fake);
	if (getenv("SB_KEEP"))
		fprintf(stderr, "home kept: %s\n", fx.home);
	else
		harness_rmrf(fx.home);
	return 0;
}

static void test_crash(void **state)
{
	int ev_counts[CRASH_EV], sock_counts[CRASH_SOCK], dup = 0, retries = 0;
	bool acked[CRASH_EV];
	int64_t end;
	char path[700];
	sqlite3 *db;
	sqlite3_stmt *st;
	int code;

	(void)state;
	memset(acked, 0, sizeof acked);
	start_gateway();
	for (int i = 0, k = 0; i < CRASH_EV || k < CRASH_SOCK;) {
		if (i < CRASH_EV) {
			char *body = event_body(i);
			int attempt = 0;

			while (!acked[i]) {
				long status = post_event(body, attempt);

				if (status == 200) {
					acked[i] = true;
					break;
				}
				attempt++;
				retries++;
				reap();
				sleep_ms(50);
			}
			free(body);
			i++;
		}
		if (k < CRASH_SOCK && (i % 2 == 0 || i >= CRASH_EV))
			send_envelope(k++);
		reap();
		sleep_ms(40);
	}
	/* Keep the gateway up: wait out a pending kill, then start again. */
	fx.kills = CRASH_KILLS;
	if (fx.killer > 0) {
		waitpid(fx.killer, NULL, 0);
		fx.killer = 0;
		sleep_ms(100);
		reap();
	}

	/* Every event and envelope answered; every envelope acked. */
	end = mono_ms() + CRASH_SETTLE_MS;
	for (;;) {
		json_t *s = fake("GET", "/_test/state", NULL);
		int64_t pending = json_integer_value(json_object_get(s, "pending"));
		bool all = pending == 0;

		json_decref(s);
		count_replies("crash ev", CRASH_EV, ev_counts);
		count_replies("crash sock", CRASH_SOCK, sock_counts);
		for (int i = 0; i < CRASH_EV; i++)
			all = all && ev_counts[i] >= 1;
		for (int i = 0; i < CRASH_SOCK; i++)
			all = all && sock_counts[i] >= 1;
		if (all || mono_ms() > end)
			break;
		sleep_ms(200);
	}
	sleep_ms(CRASH_QUIET_MS);
	count_replies("crash ev", CRASH_EV, ev_counts);
	count_replies("crash sock", CRASH_SOCK, sock_counts);
	for (int i = 0; i < CRASH_EV; i++) {
		assert_true(acked[i]);
		if (ev_counts[i] < 1)
			fail_msg("event %d was acknowledged but never answered", i);
		dup += ev_counts[i] - 1;
	}
	for (int i = 0; i < CRASH_SOCK; i++) {
		if (sock_counts[i] < 1)
			fail_msg("envelope %d was never answered", i);
		dup += sock_counts[i] - 1;
	}
	{
		json_t *s = fake("GET", "/_test/state", NULL);

		assert_int_equal(json_integer_value(json_object_get(s, "pending")), 0);
		assert_true(json_integer_value(json_object_get(s, "peak")) == 1);
		json_decref(s);
	}

	/* The inbox holds each message once. */
	snprintf(path, sizeof path, "%s/state.db", fx.home);
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	assert_int_equal(
	    sqlite3_prepare_v2(db,
	                       "SELECT count(*), count(DISTINCT dedupe_key) FROM inbox "
	                       "WHERE channel = 'slack'",
	                       -1, &st, NULL),
	    SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(st, 0), CRASH_EV + CRASH_SOCK);
	assert_int_equal(sqlite3_column_int(st, 1), CRASH_EV + CRASH_SOCK);
	sqlite3_finalize(st);
	sqlite3_close(db);

	printf("slack crash: %d events + %d envelopes, %d kills, %d starts, %d event retries, "
	       "%d duplicate replies, %lld outbox entries resent after a crash\n",
	       CRASH_EV, CRASH_SOCK, fx.killed, fx.starts, retries, dup,
	       (long long)fx.resent_after_crash);
	assert_true(fx.killed >= 1);
	assert_true(dup <= fx.resent_after_crash);

	code = harness_daemon_stop(&fx.d, SIGTERM, 20000);
	if (code != 0) {
		struct buf log;

		buf_init(&log, 64 << 20);
		harness_daemon_log(&fx.d, &log);
		fprintf(stderr, "%s\n", log.data ? log.data : "");
		buf_free(&log);
	}
	fx.d.pid = -1;
	assert_int_equal(code, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_crash),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
