/*
 * test_telegram.c - the Telegram channel against tests/fakes/fake_telegram.js,
 * a Bot API double that does what the npm emulator cannot: long polls that
 * block and confirm by offset, 409, 429 with retry_after, sendChatAction,
 * HTML entity validation and stalled polls. One daemon with two bots: "fake"
 * polls, "hook" takes webhooks (POSTed straight at the gateway here, with
 * and without the secret header). The scripted model answers
 * "echo <text>" (slow ones after 5 s; "long" with a long text).
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

#include "harness.h"

#define TOKEN "123456:TEST-token"
#define HOOK_TOKEN "654321:HOOK-token"
#define HOOK_SECRET "hook-secret-0123456789_abc"
#define LONG_TEXT_REPEAT 12

struct fixture {
	char home[512];
	struct harness_daemon d;
	struct harness_peer fake;
	int64_t next_msg;
};

static struct fixture fx;

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void print_log(void)
{
	struct buf log;

	buf_init(&log, 64 << 20);
	harness_daemon_log(&fx.d, &log);
	fprintf(stderr, "daemon log:\n%s\n", log.data ? log.data : "");
	buf_free(&log);
}

/* The long reply: multi-byte text, characters outside the BMP, and the
 * characters HTML needs escaped. */
static void long_text(struct buf *b)
{
	for (int i = 0; i < LONG_TEXT_REPEAT; i++)
		buf_printf(b,
		           "Part %d: caf\xc3\xa9 <b> & \"q\" \xf0\x9f\x98\x80\xf0\x9f\x8e\x89 "
		           "x < y > z, one two three four five six seven.%s",
		           i, i % 3 == 2 ? "\n\n" : " ");
}

static int prepare_home(void)
{
	const char *init[] = {"init", NULL};
	char path[700], cfg[4096];
	struct buf script;

	buf_init(&script, 1 << 20);
	buf_puts(&script,
	         "steps:\n  - match: slow\n    delay_ms: 5000\n    text: \"done {{user_text}}\"\n"
	         "  - match: long\n    text: |-\n      ");
	{
		struct buf t;

		buf_init(&t, 1 << 20);
		long_text(&t);
		/* A literal block: every line indented, blank lines kept. */
		for (const char *c = t.data; *c; c++) {
			buf_append(&script, c, 1);
			if (*c == '\n' && c[1] && c[1] != '\n')
				buf_puts(&script, "      ");
		}
		buf_free(&t);
	}
	buf_puts(&script, "\n  - text: \"echo {{user_text}}\"\n");
	snprintf(path, sizeof path, "%s/script.yaml", fx.home);
	if (harness_write_file(path, script.data) != 0) {
		buf_free(&script);
		return -1;
	}
	buf_free(&script);
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/echo}\n"
	         /* The test users are the operator: their text reaches the
	          * agent as it is (others' is marked untrusted). */
	         "security: {owners: [\"telegram:*\"]}\n"
	         "channels:\n"
	         "  telegram:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    group_policy: open\n"
	         "    accounts:\n"
	         "      - id: fake\n"
	         "        token: ${SB_TEST_TG_TOKEN}\n"
	         "        api_base: http://127.0.0.1:%d\n"
	         "        poll_timeout: 2s\n"
	         "        chunk_limit: 300\n"
	         "        rate_limit: {chat_per_minute: 600, chat_burst: 20}\n"
	         "      - id: hook\n"
	         "        token: \"%s\"\n"
	         "        mode: webhook\n"
	         "        api_base: http://127.0.0.1:%d\n"
	         "        webhook: {secret: %s}\n",
	         fx.fake.port, HOOK_TOKEN, fx.fake.port, HOOK_SECRET);
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0)
		return -1;
	return harness_cli(fx.home, NULL, init) == 0 ? 0 : -1;
}

static int setup(void **state)
{
	const char *args[] = {TOKEN "," HOOK_TOKEN, NULL};

	(void)state;
	memset(&fx, 0, sizeof fx);
	fx.next_msg = 100;
	setenv("SB_TEST_TG_TOKEN", TOKEN, 1);
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0 ||
	    harness_peer_start(&fx.fake, "fake_telegram.js", args) != 0 || prepare_home() != 0)
		return -1;
	if (harness_daemon_start(&fx.d, fx.home, NULL) != 0 || harness_wait_ready(&fx.d, 20000))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	struct buf log;
	int code;

	(void)state;
	code = harness_daemon_stop(&fx.d, SIGTERM, 20000);
	buf_init(&log, 64 << 20);
	harness_daemon_log(&fx.d, &log);
	/* The tokens never reach the log. */
	if (log.data && (strstr(log.data, "TEST-token") || strstr(log.data, "HOOK-token") ||
	                 strstr(log.data, HOOK_SECRET))) {
		fprintf(stderr, "a token or secret was logged\n");
		code = 99;
	}
	buf_free(&log);
	if (code != 0) {
		fprintf(stderr, "daemon exit %d\n", code);
		print_log();
	}
	harness_peer_stop(&fx.fake);
	harness_rmrf(fx.home);
	return code == 0 ? 0 : -1;
}

static json_t *ctl(const char *method, const char *path, json_t *body_take)
{
	static const char *const h[] = {"Content-Type: application/json", NULL};
	char *text = body_take ? json_dumps(body_take, JSON_COMPACT) : NULL;
	struct buf resp;
	json_t *out = NULL;
	long st;

	json_decref(body_take);
	buf_init(&resp, 64 << 20);
	st = harness_http(fx.fake.port, method, path, h, text, &resp);
	if (st == 200 && resp.data)
		out = json_loads(resp.data, 0, NULL);
	free(text);
	buf_free(&resp);
	return out;
}

static json_t *state_get(void)
{
	return ctl("GET", "/_ctl/state", NULL);
}

/* Queues a message update for the polling bot; returns its message id. */
static int64_t user_says(int64_t chat, const char *chat_type, const char *text, json_t *extra)
{
	int64_t mid = fx.next_msg++ + 100000;
	json_t *msg =
	    json_pack("{sIs{sIsbssssss}s{sIss}sIss}", "message_id", (json_int_t)mid, "from", "id",
	              (json_int_t)4242, "is_bot", 0, "first_name", "Alice", "last_name", "Liddell",
	              "username", "alice", "chat", "id", (json_int_t)chat, "type", chat_type,
	              "date", (json_int_t)time(NULL), "text", text);
	json_t *r;

	if (extra)
		json_object_update(msg, extra);
	json_decref(extra);
	r = ctl("POST", "/_ctl/update", json_pack("{so}", "message", msg));
	assert_non_null(r);
	json_decref(r);
	return mid;
}

/* The sent records answering message mid (reply_parameters), and all of
 * them for chat (mid 0). */
static size_t sent_for(json_t *st, int64_t chat, int64_t mid, int outcome, json_t **first)
{
	json_t *sent = json_object_get(st, "sent"), *s;
	size_t i, n = 0;

	json_array_foreach(sent, i, s)
	{
		json_t *rp = json_object_get(s, "reply_parameters");

		if (json_integer_value(json_object_get(s, "chat_id")) != chat)
			continue;
		if (mid && json_integer_value(json_object_get(rp, "message_id")) != mid)
			continue;
		if (outcome && json_integer_value(json_object_get(s, "outcome")) != outcome)
			continue;
		if (first && !n)
			*first = s;
		n++;
	}
	return n;
}

/* Waits until a reply to mid was accepted; the state then (caller frees). */
static json_t *wait_reply(int64_t chat, int64_t mid, int timeout_ms)
{
	int64_t deadline = now_ms() + timeout_ms;

	while (now_ms() < deadline) {
		json_t *st = state_get();

		if (st && sent_for(st, chat, mid, 200, NULL) > 0)
			return st;
		json_decref(st);
		usleep(50000);
	}
	print_log();
	fail_msg("no reply to message %lld in chat %lld", (long long)mid, (long long)chat);
	return NULL;
}

static bool log_has(const char *needle)
{
	struct buf log;
	bool found;

	buf_init(&log, 64 << 20);
	harness_daemon_log(&fx.d, &log);
	found = log.data && strstr(log.data, needle);
	buf_free(&log);
	return found;
}

static bool wait_log(const char *needle, int timeout_ms)
{
	int64_t deadline = now_ms() + timeout_ms;

	while (now_ms() < deadline) {
		if (log_has(needle))
			return true;
		usleep(100000);
	}
	return false;
}

/* A private message is answered as a reply to it; the poll long-waits with
 * the configured timeout and confirms by offset; the offset survives in the
 * store. */
static void test_poll_roundtrip(void **state)
{
	json_t *st, *s = NULL, *polls, *p;
	int64_t mid;
	size_t i, n_before;
	int64_t confirmed;

	(void)state;
	mid = user_says(4242, "private", "hello one", NULL);
	st = wait_reply(4242, mid, 30000);
	assert_int_equal(sent_for(st, 4242, mid, 200, &s), 1);
	assert_string_equal(json_string_value(json_object_get(s, "visible")), "echo hello one");
	assert_string_equal(json_string_value(json_object_get(s, "parse_mode")), "HTML");
	assert_int_equal(json_integer_value(json_object_get(s, "bot")), 123456);
	polls = json_object_get(st, "polls");
	json_array_foreach(polls, i, p)
	{
		assert_int_equal(json_integer_value(json_object_get(p, "timeout")), 2);
		assert_string_equal(
		    json_string_value(json_array_get(json_object_get(p, "allowed_updates"), 0)),
		    "message");
	}
	n_before = json_array_size(polls);
	json_decref(st);

	/* The update was confirmed: a later poll carries an offset past it. */
	for (int k = 0; k < 100; k++) {
		st = state_get();
		confirmed = json_integer_value(json_object_get(st, "confirmed"));
		json_decref(st);
		if (confirmed > 1000)
			break;
		usleep(50000);
	}
	assert_true(confirmed > 1000);

	/* Idle for 3 s: long polls of 2 s each, not a spinning loop. */
	sleep(3);
	st = state_get();
	assert_true(json_array_size(json_object_get(st, "polls")) <= n_before + 4);
	json_decref(st);
}

/* A supergroup forum topic: the mention is recognised (the agent runs), the
 * reply goes into the topic. */
static void test_forum_topic(void **state)
{
	json_t *st, *s = NULL;
	int64_t mid;

	(void)state;
	mid = user_says(-1001234, "supergroup", "@sb_test_bot topic question",
	                json_pack("{sisbs[{sisiss}]}", "message_thread_id", 77, "is_topic_message",
	                          1, "entities", "offset", 0, "length", 12, "type", "mention"));
	st = wait_reply(-1001234, mid, 30000);
	sent_for(st, -1001234, mid, 200, &s);
	assert_non_null(s);
	assert_int_equal(json_integer_value(json_object_get(s, "message_thread_id")), 77);
	assert_string_equal(json_string_value(json_object_get(s, "visible")),
	                    "echo @sb_test_bot topic question");
	json_decref(st);
}

/* 429 with retry_after: the send is retried, not before retry_after. */
static void test_429_retry_after(void **state)
{
	json_t *st, *sent, *s;
	int64_t mid, t429 = 0, tok = 0;
	size_t i;

	(void)state;
	json_decref(ctl("POST", "/_ctl/set", json_pack("{sisi}", "fail429", 1, "retryAfter", 2)));
	mid = user_says(5001, "private", "rate me", NULL);
	st = wait_reply(5001, mid, 40000);
	sent = json_object_get(st, "sent");
	json_array_foreach(sent, i, s)
	{
		if (json_integer_value(json_object_get(s, "chat_id")) != 5001)
			continue;
		if (json_integer_value(json_object_get(s, "outcome")) == 429)
			t429 = json_integer_value(json_object_get(s, "at"));
		if (json_integer_value(json_object_get(s, "outcome")) == 200)
			tok = json_integer_value(json_object_get(s, "at"));
	}
	assert_true(t429 > 0);
	assert_true(tok - t429 >= 2000);
	assert_int_equal(sent_for(st, 5001, mid, 200, NULL), 1);
	json_decref(st);
}

/* "can't parse entities": sent once more as plain text, and only once. */
static void test_parse_fallback(void **state)
{
	json_t *st, *sent, *s;
	size_t i, html = 0, plain = 0;
	int64_t mid;

	(void)state;
	json_decref(ctl("POST", "/_ctl/set", json_pack("{si}", "parseErrors", 5)));
	mid = user_says(5002, "private", "format me", NULL);
	st = wait_reply(5002, mid, 30000);
	json_decref(ctl("POST", "/_ctl/set", json_pack("{si}", "parseErrors", 0)));
	sent = json_object_get(st, "sent");
	json_array_foreach(sent, i, s)
	{
		if (json_integer_value(json_object_get(s, "chat_id")) != 5002)
			continue;
		if (json_is_string(json_object_get(s, "parse_mode")))
			html++;
		else
			plain++;
	}
	assert_int_equal(html, 1);
	assert_int_equal(plain, 1);
	assert_true(wait_log("sending as plain text", 5000));
	json_decref(st);
}

/* A long reply: several messages, none over the limit as Telegram counts,
 * valid HTML each, the whole text intact, only the first one a reply. */
static void test_chunks_and_escaping(void **state)
{
	struct buf want, got;
	json_t *st, *sent, *s;
	size_t i, n = 0, replies = 0;
	int64_t mid;

	(void)state;
	mid = user_says(5003, "private", "long", NULL);
	st = wait_reply(5003, mid, 30000);
	json_decref(st);
	usleep(1500000); /* the other chunks follow the first */
	st = state_get();
	sent = json_object_get(st, "sent");
	buf_init(&want, 1 << 20);
	buf_init(&got, 1 << 20);
	long_text(&want);
	json_array_foreach(sent, i, s)
	{
		const char *v = json_string_value(json_object_get(s, "visible"));

		if (json_integer_value(json_object_get(s, "chat_id")) != 5003)
			continue;
		assert_int_equal(json_integer_value(json_object_get(s, "outcome")), 200);
		assert_non_null(v);
		if (json_object_get(s, "reply_parameters") &&
		    !json_is_null(json_object_get(s, "reply_parameters")))
			replies++;
		n++;
		buf_puts(&got, v);
	}
	assert_true(n >= 3);
	assert_int_equal(replies, 1);
	/* The same text, apart from the whitespace at the cuts. */
	{
		char *a = want.data, *b = got.data;
		size_t ia = 0, ib = 0;

		while (a[ia] || b[ib]) {
			if (a[ia] == ' ' || a[ia] == '\n') {
				ia++;
				continue;
			}
			if (b[ib] == ' ' || b[ib] == '\n') {
				ib++;
				continue;
			}
			assert_int_equal(a[ia], b[ib]);
			ia++;
			ib++;
		}
	}
	buf_free(&want);
	buf_free(&got);
	json_decref(st);
}

/* sendChatAction "typing" while the turn runs, repeated. */
static void test_typing(void **state)
{
	json_t *st, *acts, *a;
	size_t i, n = 0;
	int64_t mid;

	(void)state;
	mid = user_says(5004, "private", "slow one", NULL);
	st = wait_reply(5004, mid, 40000);
	acts = json_object_get(st, "actions");
	json_array_foreach(acts, i, a)
	{
		if (json_integer_value(json_object_get(a, "chat_id")) != 5004)
			continue;
		assert_string_equal(json_string_value(json_object_get(a, "action")), "typing");
		n++;
	}
	assert_true(n >= 2); /* at once, then every 4 s of a 5 s turn */
	json_decref(st);
}

/* 409: reported in the log and the status; polling resumes after it. */
static void test_conflict(void **state)
{
	char url[64];
	const char *args[] = {"status", "--url", url, NULL};
	struct buf out;
	json_t *st;
	int64_t mid;

	(void)state;
	json_decref(ctl("POST", "/_ctl/set", json_pack("{sb}", "conflict", 1)));
	assert_true(wait_log("getUpdates conflict (409)", 20000));
	snprintf(url, sizeof url, "ws://127.0.0.1:%d/", fx.d.port);
	buf_init(&out, 1 << 20);
	if (harness_cli(fx.home, &out, args) != 0)
		fail_msg("switchboard status failed: %s", out.data ? out.data : "");
	assert_non_null(strstr(out.data, "telegram/fake: polling, not connected"));
	assert_non_null(strstr(out.data, "409 Conflict"));
	buf_free(&out);
	json_decref(ctl("POST", "/_ctl/set", json_pack("{sb}", "conflict", 0)));
	mid = user_says(5005, "private", "after the conflict", NULL);
	st = wait_reply(5005, mid, 60000);
	json_decref(st);
}

/* A poll that never answers: the watchdog gives up on it and polls again. */
static void test_stalled_poll(void **state)
{
	json_t *st;
	int64_t mid;

	(void)state;
	json_decref(ctl("POST", "/_ctl/set", json_pack("{si}", "stall", 1)));
	assert_true(wait_log("getUpdates stalled; polling again", 30000));
	mid = user_says(5006, "private", "after the stall", NULL);
	st = wait_reply(5006, mid, 30000);
	json_decref(st);
}

static long hook_post(const char *secret, const char *body)
{
	char hdr[300];
	const char *with[] = {"Content-Type: application/json", hdr, NULL};
	const char *without[] = {"Content-Type: application/json", NULL};

	snprintf(hdr, sizeof hdr, "X-Telegram-Bot-Api-Secret-Token: %s", secret ? secret : "");
	return harness_http(fx.d.port, "POST", "/telegram/hook", secret ? with : without, body,
	                    NULL);
}

/* Webhook mode: the secret header is required (401, logged), a good
 * update is committed then acknowledged, a redelivery is processed once,
 * and the reply goes out with the webhook bot's token. */
static void test_webhook_secret(void **state)
{
	const char *update = "{\"update_id\":777001,\"message\":{\"message_id\":9001,"
	                     "\"from\":{\"id\":31337,\"is_bot\":false,\"first_name\":\"Bob\"},"
	                     "\"chat\":{\"id\":31337,\"type\":\"private\"},\"date\":1700000000,"
	                     "\"text\":\"via hook\"}}";
	json_t *st, *s = NULL;

	(void)state;
	assert_int_equal(hook_post(NULL, update), 401);
	assert_int_equal(hook_post("wrong-secret-0123456789", update), 401);
	assert_int_equal(hook_post(HOOK_SECRET "x", update), 401);
	assert_true(wait_log("webhook request refused: bad secret token", 5000));
	assert_int_equal(hook_post(HOOK_SECRET, update), 200);
	assert_int_equal(hook_post(HOOK_SECRET, update), 200); /* Telegram's redelivery */
	assert_int_equal(hook_post(HOOK_SECRET, "{\"no\":1}"), 400);
	st = wait_reply(31337, 9001, 30000);
	sleep(1);
	json_decref(st);
	st = state_get();
	assert_int_equal(sent_for(st, 31337, 0, 0, &s), 1);
	assert_int_equal(json_integer_value(json_object_get(s, "bot")), 654321);
	assert_string_equal(json_string_value(json_object_get(s, "visible")), "echo via hook");
	json_decref(st);
}

/* A reload that removes the webhook bot: it stops taking updates at once
 * (503, so Telegram keeps them), the polling bot goes on answering, and the
 * removed bot's settings stay valid for what it still has to send (the
 * gateway's clean exit under ASan shows nothing was used after the old
 * configuration went away). */
static void test_account_removed_by_reload(void **state)
{
	const char *update = "{\"update_id\":777101,\"message\":{\"message_id\":9101,"
	                     "\"from\":{\"id\":31337,\"is_bot\":false,\"first_name\":\"Bob\"},"
	                     "\"chat\":{\"id\":31337,\"type\":\"private\"},\"date\":1700000000,"
	                     "\"text\":\"after removal\"}}";
	char path[600];
	struct buf cfg;
	char *cut;
	int64_t mid;
	json_t *st, *s = NULL;

	(void)state;
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	buf_init(&cfg, 1 << 16);
	assert_int_equal(harness_read_file(path, &cfg), 0);
	cut = strstr(cfg.data, "      - id: hook\n");
	assert_non_null(cut);
	*cut = '\0';
	assert_int_equal(harness_write_file(path, cfg.data), 0);
	buf_free(&cfg);
	kill(fx.d.pid, SIGHUP);
	assert_true(wait_log("the account was removed from the configuration", 10000));
	assert_int_equal(hook_post(HOOK_SECRET, update), 503);
	mid = user_says(4242, "private", "still polling", NULL);
	st = wait_reply(4242, mid, 30000);
	assert_int_equal(sent_for(st, 4242, mid, 200, &s), 1);
	assert_string_equal(json_string_value(json_object_get(s, "visible")), "echo still polling");
	json_decref(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_poll_roundtrip),
	    cmocka_unit_test(test_forum_topic),
	    cmocka_unit_test(test_429_retry_after),
	    cmocka_unit_test(test_parse_fallback),
	    cmocka_unit_test(test_chunks_and_escaping),
	    cmocka_unit_test(test_typing),
	    cmocka_unit_test(test_webhook_secret),
	    cmocka_unit_test(test_stalled_poll),
	    cmocka_unit_test(test_conflict),
	    cmocka_unit_test(test_account_removed_by_reload),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
