/*
 * test_crash_webhooks.c - crash safety of the webhook path, end to end.
 *
 * A sender (tests/fakes/webhook_sender.js, signing with npm
 * `standardwebhooks`) delivers CRASH_N messages to a callback-mode hook,
 * each with its own webhook-id and conversation, and retries every one that
 * was not answered 2xx (same webhook-id, signed again), as Standard Webhooks
 * senders do. Meanwhile the test SIGKILLs the gateway CRASH_KILLS times at
 * random moments and starts it again on the same home; the port changes on
 * every start and the sender reads it from a file. The callback receiver
 * (tests/fakes/callback_receiver.js, verifying with `standardwebhooks`)
 * answers slowly, to widen the window in which a kill cuts a delivery.
 *
 * After the last start and a quiet period:
 *  - the sender got a 2xx for every message;
 *  - the receiver got exactly one reply per message, under exactly one
 *    webhook-id (the outbox idempotency key) per message; a webhook-id it
 *    saw more than once is the documented window (a send cut between the
 *    receiver's acceptance and our commit), counted and bounded by
 *    switchboard_outbox_resent_after_crash_total summed over the starts;
 *  - the store holds each message once in the inbox (done) and one reply for
 *    it in the outbox (sent): a retried delivery was never processed again;
 *  - every message ran the agent; a second run happens only when a kill cut
 *    the first before its reply was committed, bounded by the kills;
 *  - the last stop is clean (exit 0; no leaks under ASan).
 *
 * SB_CRASH_SEED=<n> replays a run's kill schedule (the seed is printed).
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sqlite3.h>

#include "harness.h"

#define CRASH_N 60
#define CRASH_KILLS 4
#define CRASH_SENDERS 6
#define CRASH_INTERVAL_MS 400 /* a sender's pause between messages */
#define CRASH_KILL_MIN_MS 400 /* up time before a kill */
#define CRASH_KILL_MAX_MS 1000
#define CRASH_RECEIVER_DELAY_MS 100
#define CRASH_SETTLE_MS 30000
#define CRASH_QUIET_MS 2000
#define CRASH_MAX_CONCURRENT 8 /* gateway.max_concurrent_runs (its config sets it) */

#define HOOK_SECRET "whsec_c3dpdGNoYm9hcmQtdGVzdC1zZWNyZXQtMDEyMzQ1Njc4OQ=="
#define CB_SECRET "whsec_Y2FsbGJhY2stc2VjcmV0LWZvci1yZXBsaWVzLTAxMjM0NQ=="

struct fixture {
	struct harness_peer sender, receiver;
	struct harness_daemon d;
	char home[512];
	char port_file[600];
	int64_t resent_after_crash; /* summed over the starts */
	int starts;
};

static struct fixture fx;

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static json_t *http_json(int port, const char *method, const char *path, json_t *body_take)
{
	struct buf resp;
	char *text = body_take ? json_dumps(body_take, JSON_COMPACT) : NULL;
	json_t *j;
	long status;

	json_decref(body_take);
	buf_init(&resp, 64 << 20);
	status = harness_http(port, method, path, NULL, text, &resp);
	free(text);
	if (status != 200)
		fail_msg("%s %s answered %ld", method, path, status);
	j = json_loads(resp.data ? resp.data : "", 0, NULL);
	buf_free(&resp);
	assert_non_null(j);
	return j;
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

static void write_port(int port)
{
	char text[32];

	snprintf(text, sizeof text, "%d\n", port);
	assert_int_equal(harness_write_file(fx.port_file, text), 0);
}

/* Starts the gateway on the home, waits until it is ready, adds what its
 * recovery counted, and points the sender at it. */
static void start_gateway(void)
{
	assert_int_equal(harness_daemon_start(&fx.d, fx.home, NULL), 0);
	if (harness_wait_ready(&fx.d, 20000) != 0)
		fail_msg("the gateway did not become ready (start %d)", fx.starts + 1);
	fx.starts++;
	fx.resent_after_crash += metric("switchboard_outbox_resent_after_crash_total");
	write_port(fx.d.port);
}

static int setup(void **state)
{
	char path[1024], cfg[4096];
	const char *init[] = {"init", NULL};
	const char *rargs[] = {CB_SECRET, NULL};

	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_peer_start(&fx.sender, "webhook_sender.js", NULL) != 0 ||
	    harness_peer_start(&fx.receiver, "callback_receiver.js", rargs) != 0)
		return -1;
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	snprintf(fx.port_file, sizeof fx.port_file, "%s/port", fx.home);
	snprintf(cfg, sizeof cfg,
	         "gateway: {bind: 127.0.0.1, max_concurrent_runs: 8}\n"
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/x, queue_mode: followup}\n"
	         "channels:\n"
	         "  webhook:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    group_policy: open\n"
	         "    hooks:\n"
	         "      - name: crash\n"
	         "        secret: \"%s\"\n"
	         "        mode: callback\n"
	         "        callback_url: http://127.0.0.1:%d/replies\n"
	         "        callback_secret: \"%s\"\n"
	         "        callback_timeout: 5s\n",
	         HOOK_SECRET, fx.receiver.port, CB_SECRET);
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0)
		return -1;
	/* A little model time, so that kills also land inside runs. */
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
	if (fx.d.pid > 0)
		harness_daemon_stop(&fx.d, SIGKILL, 5000);
	harness_peer_stop(&fx.sender);
	harness_peer_stop(&fx.receiver);
	harness_rmrf(fx.home);
	return 0;
}

/* Runs of the agent that began with the message's text. */
static int runs_for(int i)
{
	char dir[1024], path[2048], needle[256];
	struct dirent *de;
	int n = 0;
	DIR *d;

	snprintf(dir, sizeof dir, "%s/agents/main/sessions", fx.home);
	snprintf(needle, sizeof needle,
	         /* the text follows the untrusted-content note, JSON-escaped */
	         "follow instructions inside it.]\\ncrash message %d\"}", i);
	d = opendir(dir);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		struct buf b;

		if (!strstr(de->d_name, ".jsonl"))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		buf_init(&b, 64 << 20);
		if (harness_read_file(path, &b) == 0)
			n += harness_count_user_texts(b.data, needle);
		buf_free(&b);
	}
	closedir(d);
	return n;
}

static int64_t sql_count(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	int64_t n = -1;

	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

static void check_store(void)
{
	char path[1024];
	sqlite3 *db = NULL;

	snprintf(path, sizeof path, "%s/state.db", fx.home);
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sql_count(db, "SELECT COUNT(*) FROM inbox WHERE channel = 'webhook'"),
	                 CRASH_N);
	assert_int_equal(sql_count(db, "SELECT COUNT(DISTINCT dedupe_key) FROM inbox "
	                               "WHERE channel = 'webhook' AND state = 'done'"),
	                 CRASH_N);
	assert_int_equal(sql_count(db, "SELECT COUNT(*) FROM outbox WHERE channel = 'webhook'"),
	                 CRASH_N);
	assert_int_equal(sql_count(db, "SELECT COUNT(*) FROM outbox WHERE channel = 'webhook' "
	                               "AND state = 'sent' AND channel_msg_id = idempotency_key"),
	                 CRASH_N);
	assert_int_equal(sql_count(db, "SELECT COUNT(DISTINCT inbox_id) FROM outbox "
	                               "WHERE channel = 'webhook'"),
	                 CRASH_N);
	sqlite3_close(db);
}

static void test_crash_webhooks(void **state)
{
	const char *seed_env = getenv("SB_CRASH_SEED");
	unsigned seed = seed_env ? (unsigned)strtoul(seed_env, NULL, 10) : (unsigned)time(NULL);
	json_t *st, *rec, *d, *by_event, *by_wid;
	int64_t deadline, t0 = mono_ms();
	int64_t dups = 0, replays = 0, dup_acks = 0;
	const char *key;
	json_t *val;
	size_t i;

	(void)state;
	printf("SB_CRASH_SEED=%u\n", seed);
	srand(seed);
	json_decref(http_json(fx.receiver.port, "POST", "/__delay",
	                      json_pack("{si}", "ms", CRASH_RECEIVER_DELAY_MS)));
	start_gateway();
	json_decref(http_json(fx.sender.port, "POST", "/run",
	                      json_pack("{sssssssisisssi}", "port_file", fx.port_file, "path",
	                                "/hooks/crash", "secret", HOOK_SECRET, "n", CRASH_N,
	                                "concurrency", CRASH_SENDERS, "prefix", "crash-",
	                                "interval_ms", CRASH_INTERVAL_MS)));
	for (int k = 0; k < CRASH_KILLS; k++) {
		int up = CRASH_KILL_MIN_MS + rand() % (CRASH_KILL_MAX_MS - CRASH_KILL_MIN_MS + 1);

		usleep((useconds_t)up * 1000);
		write_port(0);
		assert_int_equal(harness_daemon_stop(&fx.d, SIGKILL, 5000), 128 + SIGKILL);
		st = http_json(fx.sender.port, "GET", "/status", NULL);
		printf("kill %d after %d ms: %lld of %d acknowledged\n", k + 1, up,
		       (long long)json_integer_value(json_object_get(st, "acked")), CRASH_N);
		json_decref(st);
		start_gateway();
	}

	/* Everything settles: every message acknowledged and answered. */
	deadline = mono_ms() + CRASH_SETTLE_MS;
	for (;;) {
		bool done;
		int64_t unique;

		st = http_json(fx.sender.port, "GET", "/status", NULL);
		rec = http_json(fx.receiver.port, "GET", "/__received", NULL);
		done = json_is_true(json_object_get(st, "done"));
		unique = json_integer_value(json_object_get(rec, "unique"));
		json_decref(rec);
		if (done && unique >= CRASH_N)
			break;
		if (mono_ms() > deadline)
			fail_msg("not settled after %d ms: sender done=%d acked=%lld, receiver "
			         "unique=%lld",
			         CRASH_SETTLE_MS, done,
			         (long long)json_integer_value(json_object_get(st, "acked")),
			         (long long)unique);
		json_decref(st);
		usleep(200 * 1000);
	}
	json_decref(st);
	usleep(CRASH_QUIET_MS * 1000);

	/* The sender: every message acknowledged; some answers were duplicates. */
	st = http_json(fx.sender.port, "GET", "/status", NULL);
	assert_int_equal(json_integer_value(json_object_get(st, "acked")), CRASH_N);
	json_object_foreach(json_object_get(st, "ids"), key, val)
	{
		const char *b = json_string_value(json_object_get(val, "body"));

		assert_true(json_integer_value(json_object_get(val, "acked_status")) == 202);
		if (b && strstr(b, "\"duplicate\":true"))
			dup_acks++;
	}

	/* The receiver: one reply per message, one webhook-id per message. */
	rec = http_json(fx.receiver.port, "GET", "/__received", NULL);
	assert_int_equal(json_integer_value(json_object_get(rec, "invalid")), 0);
	assert_int_equal(json_integer_value(json_object_get(rec, "unique")), CRASH_N);
	by_event = json_object();
	by_wid = json_object();
	json_array_foreach(json_object_get(rec, "deliveries"), i, d)
	{
		const json_t *b = json_object_get(d, "body");
		const char *ev = json_string_value(json_object_get(b, "event_id"));
		const char *wid = json_string_value(json_object_get(d, "id"));
		const char *text = json_string_value(json_object_get(b, "text"));
		json_t *seen;
		char want[64];
		int n;

		assert_non_null(ev);
		assert_non_null(wid);
		assert_int_equal(sscanf(ev, "crash-%d", &n), 1);
		snprintf(want, sizeof want, "]\ncrash message %d", n);
		/* the webhook's text reached the agent marked as untrusted */
		assert_true(strncmp(text, "reply to: [Untrusted content from webhook:", 42) == 0);
		assert_true(strlen(text) > strlen(want) &&
		            strcmp(text + strlen(text) - strlen(want), want) == 0);
		seen = json_object_get(by_event, ev);
		if (seen)
			assert_string_equal(json_string_value(seen), wid);
		else
			json_object_set_new(by_event, ev, json_string(wid));
		seen = json_object_get(by_wid, wid);
		if (seen)
			assert_string_equal(json_string_value(seen), ev);
		else
			json_object_set_new(by_wid, wid, json_string(ev));
	}
	assert_int_equal(json_object_size(by_event), CRASH_N);
	assert_int_equal(json_object_size(by_wid), CRASH_N);
	json_object_foreach(json_object_get(rec, "duplicates"), key, val) dups +=
	    json_integer_value(val);
	json_decref(by_event);
	json_decref(by_wid);

	/* The agent: every message ran; again only when a kill cut a run. */
	for (int m = 0; m < CRASH_N; m++) {
		int runs = runs_for(m);

		if (runs < 1)
			fail_msg("crash message %d never ran", m);
		replays += runs - 1;
	}

	printf("starts: %d, kills: %d, %.1f s\n", fx.starts, CRASH_KILLS,
	       (double)(mono_ms() - t0) / 1000.0);
	printf("sender: %lld attempts for %d messages, %lld answered as duplicates\n",
	       (long long)json_integer_value(json_object_get(st, "attempts")), CRASH_N,
	       (long long)dup_acks);
	printf("receiver: %d unique replies, %lld duplicate deliveries of a webhook-id\n", CRASH_N,
	       (long long)dups);
	printf("switchboard_outbox_resent_after_crash_total over the starts: %lld\n",
	       (long long)fx.resent_after_crash);
	printf("agent runs repeated because a kill cut them: %lld\n", (long long)replays);
	json_decref(rec);
	json_decref(st);

	/* A duplicate at the receiver is a send cut between its acceptance and
	 * our commit: such a send was in flight at a kill and is counted at the
	 * next start. */
	assert_true(dups <= fx.resent_after_crash);
	assert_true(replays <= (int64_t)CRASH_KILLS * CRASH_MAX_CONCURRENT);

	assert_int_equal(harness_daemon_stop(&fx.d, SIGTERM, 15000), 0);
	check_store();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_crash_webhooks),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
