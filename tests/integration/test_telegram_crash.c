/*
 * test_telegram_crash.c - crash safety of the Telegram polling path.
 *
 * Updates keep arriving at tests/fakes/fake_telegram.js (each from its own
 * chat) while the gateway is SIGKILLed CRASH_KILLS times at random moments
 * and started again on the same home. The fake forgets an update once a
 * getUpdates call carries an offset past it (as Telegram does), so an
 * update whose offset the gateway advanced can only be answered if it was
 * committed to the inbox first. After the last start and a quiet period:
 *  - every update the gateway confirmed was answered (a sendMessage
 *    accepted with reply_parameters pointing at it);
 *  - the inbox holds each message once, done;
 *  - a message answered more than once is a reply whose send was cut
 *    between Telegram's acceptance and our commit; those are counted,
 *    printed, and bounded by the kills.
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sqlite3.h>

#include "harness.h"

#define TOKEN "123456:TEST-token"
#define CRASH_N 48
#define CRASH_KILLS 4
#define CRASH_SETTLE_MS 45000

struct fixture {
	char home[512];
	struct harness_daemon d;
	struct harness_peer fake;
};

static struct fixture fx;

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int setup(void **state)
{
	const char *init[] = {"init", NULL};
	const char *args[] = {TOKEN, NULL};
	char path[700], cfg[2048];

	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0 ||
	    harness_peer_start(&fx.fake, "fake_telegram.js", args) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/script.yaml", fx.home);
	if (harness_write_file(path,
	                       "steps:\n  - delay_ms: 150\n    text: \"echo {{user_text}}\"\n"))
		return -1;
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/echo}\n"
	         "session: {dm_scope: per-account-channel-peer}\n"
	         "channels:\n"
	         "  telegram:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    accounts:\n"
	         "      - id: bot\n"
	         "        token: \"%s\"\n"
	         "        api_base: http://127.0.0.1:%d\n"
	         "        poll_timeout: 1s\n"
	         "        typing: false\n",
	         TOKEN, fx.fake.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0 || harness_cli(fx.home, NULL, init) != 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	harness_peer_stop(&fx.fake);
	if (!getenv("SB_KEEP_HOME"))
		harness_rmrf(fx.home);
	else
		fprintf(stderr, "home kept: %s\n", fx.home);
	return 0;
}

static json_t *ctl(const char *method, const char *path, json_t *body_take)
{
	static const char *const h[] = {"Content-Type: application/json", NULL};
	char *text = body_take ? json_dumps(body_take, JSON_COMPACT) : NULL;
	struct buf resp;
	json_t *out = NULL;

	json_decref(body_take);
	buf_init(&resp, 64 << 20);
	if (harness_http(fx.fake.port, method, path, h, text, &resp) == 200 && resp.data)
		out = json_loads(resp.data, 0, NULL);
	free(text);
	buf_free(&resp);
	return out;
}

static void post_update(int i)
{
	char text[32];
	json_t *r;

	snprintf(text, sizeof text, "m%d", i);
	r = ctl("POST", "/_ctl/update",
	        json_pack("{s{sIs{sIsbss}s{sIss}sIss}}", "message", "message_id",
	                  (json_int_t)(10000 + i), "from", "id", (json_int_t)(7000 + i), "is_bot",
	                  0, "first_name", "U", "chat", "id", (json_int_t)(7000 + i), "type",
	                  "private", "date", (json_int_t)time(NULL), "text", text));
	assert_non_null(r);
	json_decref(r);
}

/* Replies accepted per message (index i: message 10000+i). */
static void count_replies(json_t *st, int *count)
{
	json_t *s;
	size_t k;

	memset(count, 0, CRASH_N * sizeof *count);
	json_array_foreach(json_object_get(st, "sent"), k, s)
	{
		int64_t mid = json_integer_value(
		    json_object_get(json_object_get(s, "reply_parameters"), "message_id"));

		if (json_integer_value(json_object_get(s, "outcome")) == 200 && mid >= 10000 &&
		    mid < 10000 + CRASH_N)
			count[mid - 10000]++;
	}
}

static int inbox_rows(int *done)
{
	char path[700];
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int n = -1;

	snprintf(path, sizeof path, "%s/state.db", fx.home);
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
	    sqlite3_prepare_v2(db,
	                       "SELECT count(*), count(DISTINCT dedupe_key), "
	                       "sum(state = 'done') FROM inbox WHERE channel = 'telegram'",
	                       -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW) {
		n = sqlite3_column_int(st, 0);
		assert_int_equal(n, sqlite3_column_int(st, 1));
		*done = sqlite3_column_int(st, 2);
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	return n;
}

static void test_sigkill_while_updates_arrive(void **state)
{
	unsigned seed = getenv("SB_CRASH_SEED")
	                    ? (unsigned)strtoul(getenv("SB_CRASH_SEED"), NULL, 10)
	                    : (unsigned)time(NULL);
	int count[CRASH_N], posted = 0, dups = 0, done = 0, rows;
	int64_t confirmed = 0, deadline;
	json_t *st = NULL;
	bool all;

	(void)state;
	fprintf(stderr, "telegram crash test seed %u\n", seed);
	srand(seed);
	for (int k = 0; k <= CRASH_KILLS; k++) {
		int64_t up;

		assert_int_equal(harness_daemon_start(&fx.d, fx.home, NULL), 0);
		assert_int_equal(harness_wait_ready(&fx.d, 30000), 0);
		if (k == CRASH_KILLS)
			break;
		up = now_ms() + 600 + rand() % 1400;
		while (now_ms() < up) {
			if (posted < CRASH_N)
				post_update(posted++);
			usleep(60000);
		}
		assert_int_equal(harness_daemon_stop(&fx.d, SIGKILL, 10000), 128 + SIGKILL);
	}
	while (posted < CRASH_N)
		post_update(posted++);

	/* Settle: every update confirmed to the fake, every one answered. */
	deadline = now_ms() + CRASH_SETTLE_MS;
	do {
		json_decref(st);
		usleep(200000);
		st = ctl("GET", "/_ctl/state", NULL);
		assert_non_null(st);
		confirmed = json_integer_value(json_object_get(st, "confirmed"));
		count_replies(st, count);
		all = json_integer_value(json_object_get(st, "pending")) == 0;
		for (int i = 0; i < CRASH_N; i++)
			all = all && count[i] > 0;
	} while (!all && now_ms() < deadline);
	sleep(1);
	json_decref(st);
	st = ctl("GET", "/_ctl/state", NULL);
	count_replies(st, count);
	confirmed = json_integer_value(json_object_get(st, "confirmed"));
	json_decref(st);

	/* Update ids start at 1000: every one below the confirmed offset was
	 * acknowledged by the gateway, and all CRASH_N were. */
	assert_true(confirmed >= 1000 + CRASH_N);
	for (int i = 0; i < CRASH_N; i++) {
		if (count[i] == 0)
			fail_msg("message m%d (update %d) was confirmed but never answered", i,
			         1000 + i);
		dups += count[i] - 1;
	}
	rows = inbox_rows(&done);
	assert_int_equal(rows, CRASH_N);
	assert_int_equal(done, CRASH_N);
	fprintf(stderr,
	        "telegram crash test: %d updates, %d SIGKILLs, %d duplicate replies (sends cut "
	        "between Telegram's acceptance and our commit)\n",
	        CRASH_N, CRASH_KILLS, dups);
	assert_true(dups <= CRASH_KILLS * 8);
	assert_int_equal(harness_daemon_stop(&fx.d, SIGTERM, 20000), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sigkill_while_updates_arrive),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
