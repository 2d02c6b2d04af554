/*
 * test_slack.c - the Slack channel end to end: the real daemon with a
 * scripted agent, Slack played by tests/fakes/fake_slack.js (checked
 * against Slack's official clients by test_slack_fake).
 *
 * Account "ev" (Events API): signed events POSTed at the gateway; replies
 * read back from the fake's chat.postMessage record. url_verification,
 * bad and stale signatures (401 and a log line), retries and the
 * app_mention + message pair of one message deduped, threads, own and
 * other bots' messages dropped, chunking and mrkdwn, 429 honoured, an
 * ok:false error recorded in the outbox.
 *
 * Account "sock" (Socket Mode): envelopes acked after the commit, a socket
 * dropped in the middle of a stream loses nothing and answers everything
 * once, refresh_requested reconnects, a silent link is dropped by the
 * watchdog, one socket at a time, link_disabled stops and is reported.
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

#include "channels/slack/slack_proto.h"
#include "harness.h"

#define SECRET "8f742231b10e8888abcd99yyyzzz85a5-test"
#define BOT_TOKEN "xoxb-1111-secret-bot-token-ev"
#define PATH "/slack/events/ev"

struct fixture {
	struct harness_peer fake;
	struct harness_daemon d;
	char home[512];
	char url[64];
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

static json_t *fake_get(const char *path)
{
	struct buf resp;
	json_t *j;

	buf_init(&resp, 64 << 20);
	assert_int_equal(harness_http(fx.fake.port, "GET", path, NULL, NULL, &resp), 200);
	j = json_loads(resp.data, 0, NULL);
	buf_free(&resp);
	assert_non_null(j);
	return j;
}

static json_t *fake_post(const char *path, json_t *body_take)
{
	static const char *const hdr[] = {"Content-Type: application/json", NULL};
	char *text = json_dumps(body_take, JSON_COMPACT);
	struct buf resp;
	json_t *j;

	json_decref(body_take);
	buf_init(&resp, 1 << 20);
	assert_int_equal(harness_http(fx.fake.port, "POST", path, hdr, text, &resp), 200);
	free(text);
	j = json_loads(resp.data, 0, NULL);
	buf_free(&resp);
	assert_non_null(j);
	return j;
}

static json_t *fake_state(void)
{
	return fake_get("/_test/state");
}

/* Posts whose text contains needle (and, when channel is set, to it). */
static int count_posts(const char *needle, const char *channel, json_t **last)
{
	json_t *st = fake_state(), *p;
	size_t i;
	int n = 0;

	json_array_foreach(json_object_get(st, "posts"), i, p)
	{
		const char *t = json_string_value(json_object_get(p, "text"));
		const char *c = json_string_value(json_object_get(p, "channel"));

		if (t && strstr(t, needle) && (!channel || (c && strcmp(c, channel) == 0))) {
			n++;
			if (last) {
				json_decref(*last);
				*last = json_incref(p);
			}
		}
	}
	json_decref(st);
	return n;
}

static int wait_posts(const char *needle, const char *channel, int want, int timeout_ms,
                      json_t **last)
{
	int64_t end = mono_ms() + timeout_ms;
	int n;

	while ((n = count_posts(needle, channel, last)) < want && mono_ms() < end)
		sleep_ms(50);
	return n;
}

static int64_t state_int(const char *key)
{
	json_t *st = fake_state();
	int64_t v = json_integer_value(json_object_get(st, key));

	json_decref(st);
	return v;
}

static bool acked(const char *envelope_id)
{
	json_t *st = fake_state(), *a;
	size_t i;
	bool found = false;

	json_array_foreach(json_object_get(st, "acks"), i, a) found =
	    found || strcmp(json_string_value(a), envelope_id) == 0;
	json_decref(st);
	return found;
}

/* An event_callback body with one message-like event. */
static char *event_body(const char *type, const char *ctype, const char *channel, const char *user,
                        const char *bot_id, const char *text, const char *ts, const char *thread_ts,
                        const char *event_id)
{
	json_t *ev =
	    json_pack("{ssssssss}", "type", type, "channel", channel, "text", text, "ts", ts);
	json_t *o;
	char *out;

	if (ctype)
		json_object_set_new(ev, "channel_type", json_string(ctype));
	if (user)
		json_object_set_new(ev, "user", json_string(user));
	if (bot_id)
		json_object_set_new(ev, "bot_id", json_string(bot_id));
	if (thread_ts)
		json_object_set_new(ev, "thread_ts", json_string(thread_ts));
	json_object_set_new(ev, "event_ts", json_string(ts));
	o = json_pack("{sssssssssssIso}", "token", "XXYYZZ", "team_id", "T0TEST", "api_app_id",
	              "A0TEST", "type", "event_callback", "event_id", event_id, "event_time",
	              (json_int_t)time(NULL), "event", ev);
	out = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return out;
}

/* POSTs body to the events path, signed with secret at now + skew. */
static long post_signed(const char *body, const char *secret, long skew, const char *extra,
                        struct buf *resp)
{
	char ts[32], sig[SLACK_SIG_SIZE], hts[64], hsig[128];
	const char *headers[] = {"Content-Type: application/json", hts, hsig, extra, NULL};

	snprintf(ts, sizeof ts, "%ld", (long)time(NULL) + skew);
	assert_int_equal(slack_sig_compute(secret, ts, body, strlen(body), sig), 0);
	snprintf(hts, sizeof hts, "X-Slack-Request-Timestamp: %s", ts);
	snprintf(hsig, sizeof hsig, "X-Slack-Signature: %s", sig);
	return harness_http(fx.d.port, "POST", PATH, headers, body, resp);
}

static long post_event(const char *body)
{
	return post_signed(body, SECRET, 0, NULL, NULL);
}

static int setup(void **state)
{
	char path[1024], cfg[4096];
	const char *init[] = {"init", NULL};

	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_peer_start(&fx.fake, "fake_slack.js", NULL) != 0)
		return -1;
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	setenv("SB_TEST_SLACK_BOT", BOT_TOKEN, 1);
	snprintf(cfg, sizeof cfg,
	         "gateway: {bind: 127.0.0.1}\n"
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
	         "    group_policy: open\n"
	         "    accounts:\n"
	         "      - id: ev\n"
	         "        bot_token: \"${SB_TEST_SLACK_BOT}\"\n"
	         "        signing_secret: \"%s\"\n"
	         "        api_base: http://127.0.0.1:%d/api\n"
	         "        chunk_limit: 400\n"
	         "      - id: sock\n"
	         "        mode: socket\n"
	         "        bot_token: xoxb-2222-sock\n"
	         "        app_token: xapp-1-A0TEST-2222-sock\n"
	         "        api_base: http://127.0.0.1:%d/api/\n"
	         "        ping_interval: 300ms\n"
	         "        ping_timeout: 2s\n"
	         "        reconnect_max: 1s\n",
	         SECRET, fx.fake.port, fx.fake.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/script.yaml", fx.home);
	if (harness_write_file(path, "steps:\n  - text: \"reply to: {{user_text}}\"\n") != 0)
		return -1;
	if (harness_cli(fx.home, NULL, init) != 0)
		return -1;
	if (harness_daemon_start(&fx.d, fx.home, NULL) != 0 || harness_wait_ready(&fx.d, 20000))
		return -1;
	snprintf(fx.url, sizeof fx.url, "ws://127.0.0.1:%d/", fx.d.port);
	return 0;
}

static int teardown(void **state)
{
	struct buf log;
	int rc;

	(void)state;
	rc = fx.d.pid > 0 ? harness_daemon_stop(&fx.d, SIGTERM, 20000) : 0;
	buf_init(&log, 64 << 20);
	harness_daemon_log(&fx.d, &log);
	if (rc != 0)
		fprintf(stderr, "%s\n", log.data ? log.data : "");
	buf_free(&log);
	harness_peer_stop(&fx.fake);
	if (getenv("SB_KEEP"))
		fprintf(stderr, "home kept: %s\n", fx.home);
	else
		harness_rmrf(fx.home);
	return rc == 0 ? 0 : -1;
}

/* ---- Events API ---- */

/* Case: events that arrive before auth.test has answered. They are not
 * acknowledged (503: Slack sends them again) instead of being stored as not
 * mentioning the bot and dropped; the retry after sign-in is answered. */
static void test_events_before_identity(void **state)
{
	char *m = event_body("message", "channel", "C0EARLY", "U2", NULL, "<@UBOT> early bird",
	                     "1700000009.000100", NULL, "EvEARLY1");
	int64_t end;
	long code;

	(void)state;
	assert_int_equal(harness_daemon_stop(&fx.d, SIGTERM, 20000), 0);
	/* auth.test fails for both accounts for a while (backoff 1 s, 2 s) */
	json_decref(fake_post("/_test/script",
	                      json_pack("{ss s[{si}{si}{si}{si}]}", "method", "auth.test",
	                                "responses", "status", 500, "status", 500, "status", 500,
	                                "status", 500)));
	assert_int_equal(harness_daemon_start(&fx.d, fx.home, NULL), 0);
	assert_int_equal(harness_wait_ready(&fx.d, 20000), 0);
	assert_int_equal(post_event(m), 503);
	/* Slack's retries, until the identity is known */
	end = mono_ms() + 20000;
	do {
		sleep_ms(200);
		code = post_signed(m, SECRET, 0, "X-Slack-Retry-Num: 1", NULL);
	} while (code == 503 && mono_ms() < end);
	assert_int_equal(code, 200);
	assert_int_equal(wait_posts("reply to: early bird", "C0EARLY", 1, 20000, NULL), 1);
	snprintf(fx.url, sizeof fx.url, "ws://127.0.0.1:%d/", fx.d.port);
	free(m);
}


static void test_url_verification(void **state)
{
	const char *body = "{\"token\":\"x\",\"challenge\":"
	                   "\"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P\","
	                   "\"type\":\"url_verification\"}";
	const char *hdr[] = {"Content-Type: application/json", NULL};
	struct buf resp;

	(void)state;
	buf_init(&resp, 1 << 16);
	assert_int_equal(post_signed(body, SECRET, 0, NULL, &resp), 200);
	assert_non_null(strstr(
	    resp.data, "\"challenge\":\"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P\""));
	buf_reset(&resp);
	/* Unsigned: refused before the body is looked at. */
	assert_int_equal(harness_http(fx.d.port, "POST", PATH, hdr, body, &resp), 401);
	assert_null(strstr(resp.data ? resp.data : "", "3eZbrw"));
	buf_free(&resp);
}

static void test_bad_signatures(void **state)
{
	char *body = event_body("message", "im", "D0BAD", "U1", NULL, "must not run",
	                        "1700000001.000100", NULL, "EvBAD1");
	struct buf log;

	(void)state;
	assert_int_equal(post_signed(body, "another-secret-entirely", 0, NULL, NULL), 401);
	assert_int_equal(post_signed(body, SECRET, -301, NULL, NULL), 401);
	assert_int_equal(post_signed(body, SECRET, 301, NULL, NULL), 401);
	/* Signed, then one byte of the body changed. */
	{
		char ts[32], sig[SLACK_SIG_SIZE], hts[64], hsig[128], *tampered = strdup(body);
		const char *headers[] = {"Content-Type: application/json", hts, hsig, NULL};

		snprintf(ts, sizeof ts, "%ld", (long)time(NULL));
		assert_int_equal(slack_sig_compute(SECRET, ts, body, strlen(body), sig), 0);
		snprintf(hts, sizeof hts, "X-Slack-Request-Timestamp: %s", ts);
		snprintf(hsig, sizeof hsig, "X-Slack-Signature: %s", sig);
		*strstr(tampered, "must not run") = 'M';
		assert_int_equal(harness_http(fx.d.port, "POST", PATH, headers, tampered, NULL),
		                 401);
		free(tampered);
	}
	sleep_ms(500);
	assert_int_equal(count_posts("must not run", NULL, NULL), 0);
	buf_init(&log, 64 << 20);
	assert_int_equal(harness_daemon_log(&fx.d, &log), 0);
	assert_non_null(strstr(log.data, "event request refused"));
	assert_non_null(strstr(log.data, "signature does not match"));
	assert_non_null(strstr(log.data, "outside the allowed window"));
	buf_free(&log);
	free(body);
}

static void test_dm_reply_and_retries(void **state)
{
	char *body = event_body("message", "im", "D0DM", "U1", NULL, "hello dm",
	                        "1700000002.000100", NULL, "EvDM1");
	json_t *last = NULL;

	(void)state;
	assert_int_equal(post_event(body), 200);
	assert_int_equal(wait_posts("reply to: hello dm", "D0DM", 1, 20000, &last), 1);
	assert_null(json_object_get(last, "thread_ts"));
	assert_non_null(
	    strstr(json_string_value(json_object_get(last, "content_type")), "application/json"));
	/* Slack's retries of the same event: acked, not run again. */
	assert_int_equal(post_signed(body, SECRET, 0, "X-Slack-Retry-Num: 1", NULL), 200);
	assert_int_equal(post_signed(body, SECRET, 0, "X-Slack-Retry-Num: 2", NULL), 200);
	sleep_ms(1500);
	assert_int_equal(count_posts("reply to: hello dm", NULL, NULL), 1);
	json_decref(last);
	free(body);
}

static void test_thread_mention_once(void **state)
{
	char *m = event_body("message", "channel", "C0CHAN", "U2", NULL, "<@UBOT> hi thread",
	                     "1700000003.000200", "1700000003.000100", "EvTH1");
	char *a = event_body("app_mention", NULL, "C0CHAN", "U2", NULL, "<@UBOT> hi thread",
	                     "1700000003.000200", "1700000003.000100", "EvTH2");
	json_t *last = NULL;

	(void)state;
	assert_int_equal(post_event(a), 200);
	assert_int_equal(post_event(m), 200);
	assert_int_equal(wait_posts("reply to: hi thread", "C0CHAN", 1, 20000, &last), 1);
	assert_string_equal(json_string_value(json_object_get(last, "thread_ts")),
	                    "1700000003.000100");
	sleep_ms(1500);
	/* app_mention and message of one message: one run, one reply. */
	assert_int_equal(count_posts("reply to: hi thread", NULL, NULL), 1);
	json_decref(last);
	free(m);
	free(a);
}

static void test_bots_dropped(void **state)
{
	char *own = event_body("message", "im", "D0DM", "UBOT", NULL, "own words",
	                       "1700000004.000100", NULL, "EvB1");
	char *other = event_body("message", "im", "D0DM", NULL, "B999", "other bot",
	                         "1700000004.000200", NULL, "EvB2");
	char *edit;
	char *marker = event_body("message", "im", "D0DM", "U1", NULL, "after the bots",
	                          "1700000004.000300", NULL, "EvB3");
	json_t *o;

	(void)state;
	o = json_pack("{sssssss{sssssssss{ss}}}", "type", "event_callback", "team_id", "T0TEST",
	              "event_id", "EvB4", "event", "type", "message", "subtype", "message_changed",
	              "channel", "D0DM", "channel_type", "im", "message", "text", "edited words");
	assert_non_null(o);
	json_object_set_new(json_object_get(json_object_get(o, "event"), "message"), "user",
	                    json_string("U1"));
	json_object_set_new(json_object_get(json_object_get(o, "event"), "message"), "ts",
	                    json_string("1700000004.000050"));
	edit = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	assert_int_equal(post_event(own), 200);
	assert_int_equal(post_event(other), 200);
	assert_int_equal(post_event(edit), 200);
	assert_int_equal(post_event(marker), 200);
	assert_int_equal(wait_posts("reply to: after the bots", NULL, 1, 20000, NULL), 1);
	sleep_ms(500);
	assert_int_equal(count_posts("own words", NULL, NULL), 0);
	assert_int_equal(count_posts("other bot", NULL, NULL), 0);
	assert_int_equal(count_posts("edited words", NULL, NULL), 0);
	free(own);
	free(other);
	free(edit);
	free(marker);
}

static void test_chunks_and_mrkdwn(void **state)
{
	char text[4096], *body;
	json_t *st, *p;
	size_t i, n = 0, pos = 0;
	struct buf joined;

	(void)state;
	pos += (size_t)snprintf(text + pos, sizeof text - pos,
	                        "**bold** and [a link](https://example.com/x?a=1&b=2) a < b\n\n");
	for (int k = 0; k < 20; k++)
		pos +=
		    (size_t)snprintf(text + pos, sizeof text - pos,
		                     "paragraph %02d with some words to fill the line up to about "
		                     "eighty chars.\n\n",
		                     k);
	snprintf(text + pos, sizeof text - pos, "END-OF-LONG");
	body = event_body("message", "im", "D0LONG", "U1", NULL, text, "1700000005.000100", NULL,
	                  "EvL1");
	assert_int_equal(post_event(body), 200);
	assert_int_equal(wait_posts("END-OF-LONG", "D0LONG", 1, 20000, NULL), 1);
	st = fake_state();
	buf_init(&joined, 1 << 20);
	json_array_foreach(json_object_get(st, "posts"), i, p)
	{
		const char *t = json_string_value(json_object_get(p, "text"));

		if (strcmp(json_string_value(json_object_get(p, "channel")), "D0LONG") != 0)
			continue;
		n++;
		assert_true(slack_utf8_len(t, strlen(t)) <= 400);
		buf_puts(&joined, t);
		buf_puts(&joined, "\n\n");
	}
	assert_true(n >= 4);
	assert_non_null(
	    strstr(joined.data,
	           "reply to: *bold* and <https://example.com/x?a=1&amp;b=2|a link> a &lt; b"));
	for (int k = 0; k < 20; k++) {
		char needle[32];

		snprintf(needle, sizeof needle, "paragraph %02d ", k);
		assert_non_null(strstr(joined.data, needle));
	}
	buf_free(&joined);
	json_decref(st);
	free(body);
}

static void test_rate_limit_and_errors(void **state)
{
	char *body;
	int64_t before;
	sqlite3 *db;
	sqlite3_stmt *st;
	char path[700];
	int64_t end;
	bool found = false;

	(void)state;
	json_decref(
	    fake_post("/_test/script", json_pack("{ss s[{sisi}]}", "method", "chat.postMessage",
	                                         "responses", "status", 429, "retry_after", 1)));
	before = state_int("opens");
	(void)before;
	body = event_body("message", "im", "D0RL", "U1", NULL, "rate me", "1700000006.000100", NULL,
	                  "EvR1");
	assert_int_equal(post_event(body), 200);
	assert_int_equal(wait_posts("reply to: rate me", "D0RL", 1, 20000, NULL), 1);
	free(body);

	/* A permanent error: recorded in the outbox entry, not retried. */
	body = event_body("message", "im", "CNOTFOUND", "U1", NULL, "nowhere", "1700000006.000200",
	                  NULL, "EvR2");
	assert_int_equal(post_event(body), 200);
	free(body);
	snprintf(path, sizeof path, "%s/state.db", fx.home);
	end = mono_ms() + 20000;
	while (!found && mono_ms() < end) {
		assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
		sqlite3_busy_timeout(db, 2000);
		if (sqlite3_prepare_v2(db,
		                       "SELECT state, attempts, last_error FROM outbox WHERE "
		                       "target = 'CNOTFOUND'",
		                       -1, &st, NULL) == SQLITE_OK) {
			if (sqlite3_step(st) == SQLITE_ROW &&
			    strcmp((const char *)sqlite3_column_text(st, 0), "failed") == 0) {
				assert_int_equal(sqlite3_column_int(st, 1), 1);
				assert_string_equal((const char *)sqlite3_column_text(st, 2),
				                    "chat.postMessage: channel_not_found");
				found = true;
			}
			sqlite3_finalize(st);
		}
		sqlite3_close(db);
		if (!found)
			sleep_ms(100);
	}
	assert_true(found);
}

/* A reply in pieces whose second piece fails: the retry posts only the
 * pieces still missing (the progress is in the store). */
static void test_resume_after_partial_failure(void **state)
{
	char text[2048], *body;
	size_t pos = 0;
	json_t *st, *p;
	size_t i;
	int n = 0, first = 0;
	struct buf log;

	(void)state;
	for (int k = 0; k < 12; k++)
		pos +=
		    (size_t)snprintf(text + pos, sizeof text - pos,
		                     "resume %02d: some words to fill the line up to about seventy "
		                     "characters.\n\n",
		                     k);
	snprintf(text + pos, sizeof text - pos, "RESUME-END");
	json_decref(
	    fake_post("/_test/script", json_pack("{ss s[{}{ss}]}", "method", "chat.postMessage",
	                                         "responses", "error", "internal_error")));
	body = event_body("message", "im", "D0RES", "U1", NULL, text, "1700000008.000100", NULL,
	                  "EvRES");
	assert_int_equal(post_event(body), 200);
	free(body);
	assert_int_equal(wait_posts("RESUME-END", "D0RES", 1, 30000, NULL), 1);
	sleep_ms(500);
	st = fake_state();
	json_array_foreach(json_object_get(st, "posts"), i, p)
	{
		const char *t = json_string_value(json_object_get(p, "text"));

		if (strcmp(json_string_value(json_object_get(p, "channel")), "D0RES") != 0)
			continue;
		n++;
		if (strstr(t, "resume 00:"))
			first++;
	}
	json_decref(st);
	assert_int_equal(first, 1); /* the first piece was not posted again */
	assert_true(n >= 3);
	assert_int_equal(count_posts("RESUME-END", "D0RES", NULL), 1);
	buf_init(&log, 64 << 20);
	assert_int_equal(harness_daemon_log(&fx.d, &log), 0);
	assert_non_null(strstr(log.data, "resuming a reply after the pieces already posted"));
	assert_non_null(strstr(log.data, "chat.postMessage: internal_error"));
	buf_free(&log);
	/* Complete: its progress record is gone from the store. */
	{
		char path[600];
		sqlite3 *db;
		sqlite3_stmt *q;
		int left = -1;

		snprintf(path, sizeof path, "%s/state.db", fx.home);
		for (int waited = 0; waited < 5000 && left != 0; waited += 100) {
			assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
			                 SQLITE_OK);
			sqlite3_busy_timeout(db, 2000);
			assert_int_equal(sqlite3_prepare_v2(db,
			                                    "SELECT count(*) FROM kv WHERE ns LIKE "
			                                    "'slack:%'",
			                                    -1, &q, NULL),
			                 SQLITE_OK);
			assert_int_equal(sqlite3_step(q), SQLITE_ROW);
			left = sqlite3_column_int(q, 0);
			sqlite3_finalize(q);
			sqlite3_close(db);
			if (left)
				sleep_ms(100);
		}
		assert_int_equal(left, 0);
	}
}

/* ---- Socket Mode ---- */

static json_t *sock_payload(const char *text, const char *ts, const char *eid)
{
	char *b = event_body("message", "im", "D0SOCK", "U3", NULL, text, ts, NULL, eid);
	json_t *j = json_loads(b, 0, NULL);

	free(b);
	return j;
}

static char *send_envelope(const char *text, const char *ts, const char *eid)
{
	json_t *r =
	    fake_post("/_test/envelope", json_pack("{so}", "payload", sock_payload(text, ts, eid)));
	char *id = strdup(json_string_value(json_object_get(r, "envelope_id")));

	json_decref(r);
	return id;
}

static void wait_hellos(int64_t want)
{
	int64_t end = mono_ms() + 20000;

	while (state_int("hellos") < want && mono_ms() < end)
		sleep_ms(50);
	assert_true(state_int("hellos") >= want);
}

static void test_socket_mode(void **state)
{
	char *id;
	int64_t end;

	(void)state;
	wait_hellos(1);
	id = send_envelope("sock one", "1700000007.000100", "EvS1");
	assert_int_equal(wait_posts("reply to: sock one", "D0SOCK", 1, 20000, NULL), 1);
	end = mono_ms() + 10000;
	while (!acked(id) && mono_ms() < end)
		sleep_ms(50);
	assert_true(acked(id));
	free(id);
}

#define STREAM_N 24

static void test_socket_drop_mid_stream(void **state)
{
	char *ids[STREAM_N], text[64], ts[64], eid[32];
	int64_t hellos = state_int("hellos"), end;

	(void)state;
	for (int i = 0; i < STREAM_N; i++) {
		snprintf(text, sizeof text, "stream %02d", i);
		snprintf(ts, sizeof ts, "1700000100.%06d", i);
		snprintf(eid, sizeof eid, "EvST%02d", i);
		ids[i] = send_envelope(text, ts, eid);
		if (i == STREAM_N / 2)
			json_decref(fake_post("/_test/drop", json_object()));
	}
	wait_hellos(hellos + 1);
	for (int i = 0; i < STREAM_N; i++) {
		snprintf(text, sizeof text, "reply to: stream %02d", i);
		assert_int_equal(wait_posts(text, "D0SOCK", 1, 30000, NULL), 1);
	}
	end = mono_ms() + 20000;
	for (int i = 0; i < STREAM_N; i++) {
		while (!acked(ids[i]) && mono_ms() < end)
			sleep_ms(50);
		assert_true(acked(ids[i]));
	}
	sleep_ms(1000);
	for (int i = 0; i < STREAM_N; i++) {
		snprintf(text, sizeof text, "reply to: stream %02d", i);
		assert_int_equal(count_posts(text, NULL, NULL), 1);
		free(ids[i]);
	}
	assert_int_equal(state_int("pending"), 0);
	assert_int_equal(state_int("peak"), 1);
}

static void test_socket_refresh_and_watchdog(void **state)
{
	int64_t opens = state_int("opens"), hellos = state_int("hellos");

	(void)state;
	json_decref(
	    fake_post("/_test/disconnect", json_pack("{ss}", "reason", "refresh_requested")));
	wait_hellos(hellos + 1);
	assert_true(state_int("opens") > opens);
	/* A link that goes silent (no pongs, no frames) is dropped and made
	 * again by the watchdog. */
	opens = state_int("opens");
	hellos = state_int("hellos");
	json_decref(fake_post("/_test/mute", json_pack("{sb}", "on", 1)));
	{
		int64_t end = mono_ms() + 20000;

		while (state_int("opens") <= opens && mono_ms() < end)
			sleep_ms(100);
	}
	json_decref(fake_post("/_test/mute", json_pack("{sb}", "on", 0)));
	assert_true(state_int("opens") > opens);
	wait_hellos(hellos + 1);
	assert_int_equal(state_int("peak"), 1);
}

/* A Socket Mode URL with a host name: the client looks it up off the loop,
 * then connects, and envelopes flow as before. */
static void test_socket_host_name(void **state)
{
	int64_t hellos = state_int("hellos");
	char *id;
	int64_t end;

	(void)state;
	json_decref(fake_post("/_test/link_host", json_pack("{ss}", "host", "localhost")));
	json_decref(
	    fake_post("/_test/disconnect", json_pack("{ss}", "reason", "refresh_requested")));
	wait_hellos(hellos + 1);
	id = send_envelope("by name", "1700000009.000100", "EvS9");
	assert_int_equal(wait_posts("reply to: by name", "D0SOCK", 1, 20000, NULL), 1);
	end = mono_ms() + 10000;
	while (!acked(id) && mono_ms() < end)
		sleep_ms(50);
	assert_true(acked(id));
	free(id);
	json_decref(fake_post("/_test/link_host", json_pack("{ss}", "host", "127.0.0.1")));
	assert_int_equal(state_int("peak"), 1);
}

static void test_status_and_secrets(void **state)
{
	const char *args[] = {"status", "--url", fx.url, NULL};
	struct buf out, log;

	(void)state;
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(fx.home, &out, args), 0);
	assert_non_null(strstr(out.data, "slack/ev: events, connected, last event"));
	assert_non_null(strstr(out.data, "slack/sock: socket, connected, last event"));
	buf_free(&out);
	buf_init(&log, 64 << 20);
	assert_int_equal(harness_daemon_log(&fx.d, &log), 0);
	assert_null(strstr(log.data, BOT_TOKEN));
	assert_null(strstr(log.data, SECRET));
	assert_null(strstr(log.data, "xapp-1-A0TEST-2222-sock"));
	buf_free(&log);
}

static void test_link_disabled(void **state)
{
	const char *args[] = {"status", "--url", fx.url, NULL};
	struct buf out;
	int64_t opens, end;

	(void)state;
	json_decref(fake_post("/_test/disconnect", json_pack("{ss}", "reason", "link_disabled")));
	end = mono_ms() + 10000;
	while (state_int("live") > 0 && mono_ms() < end)
		sleep_ms(50);
	assert_int_equal(state_int("live"), 0);
	opens = state_int("opens");
	sleep_ms(2500);
	assert_int_equal(state_int("opens"), opens); /* no reconnect loop */
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(fx.home, &out, args), 0);
	assert_non_null(strstr(out.data, "slack/sock: socket, not connected"));
	assert_non_null(strstr(out.data, "link_disabled"));
	buf_free(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_url_verification),
	    cmocka_unit_test(test_bad_signatures),
	    cmocka_unit_test(test_events_before_identity),
	    cmocka_unit_test(test_dm_reply_and_retries),
	    cmocka_unit_test(test_thread_mention_once),
	    cmocka_unit_test(test_bots_dropped),
	    cmocka_unit_test(test_chunks_and_mrkdwn),
	    cmocka_unit_test(test_rate_limit_and_errors),
	    cmocka_unit_test(test_resume_after_partial_failure),
	    cmocka_unit_test(test_socket_mode),
	    cmocka_unit_test(test_socket_drop_mid_stream),
	    cmocka_unit_test(test_socket_refresh_and_watchdog),
	    cmocka_unit_test(test_socket_host_name),
	    cmocka_unit_test(test_status_and_secrets),
	    cmocka_unit_test(test_link_disabled),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
