/*
 * test_telegram_clock.c - a wall clock set back by an hour stalls neither
 * Telegram polling nor sending.
 *
 * The daemon runs with SWITCHBOARD_TEST_WALL_STEP (gateway/core/clock.h): a
 * few seconds after it starts, its wall clock jumps one hour back, as when
 * NTP or an operator sets it; the monotonic clock does not move. Two bots against
 * tests/fakes/fake_telegram.js: "fake" long-polls (2 s polls, so the step lands inside one), "hook"
 * takes webhooks. Each is answered once before the step, which fills its rate limiter's buckets,
 * and once after it: the poll that was in flight when the clock moved must be followed by the next
 * one at once, and the reply after the step must go out without waiting for the hour to pass again.
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
/* When the wall clock steps, after the daemon is started. */
#define STEP_AFTER_MS 6000
#define STEP_MS "-3600000"

struct fixture {
	char home[512];
	struct harness_daemon d;
	struct harness_peer fake;
	int64_t step_at_ms; /* CLOCK_MONOTONIC ms of the step */
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

static int prepare_home(void)
{
	const char *init[] = {"init", NULL};
	char path[700], cfg[2048];
	int n;

	snprintf(path, sizeof path, "%s/script.yaml", fx.home);
	if (harness_write_file(path, "steps:\n  - text: \"echo {{user_text}}\"\n") != 0)
		return -1;
	n = snprintf(cfg, sizeof cfg,
	             "providers:\n"
	             "  - {id: s, api: scripted, script: script.yaml}\n"
	             "agents:\n"
	             "  - {id: main, default: true, model: s/echo}\n"
	             "security: {owners: [\"telegram:*\"]}\n"
	             /* one session per bot and sender: the two exchanges stay apart */
	             "session: {dm_scope: per-account-channel-peer}\n"
	             "channels:\n"
	             "  telegram:\n"
	             "    dm_policy: open\n"
	             "    allow_from: [\"*\"]\n"
	             "    accounts:\n"
	             "      - id: fake\n"
	             "        token: \"%s\"\n"
	             "        api_base: http://127.0.0.1:%d\n"
	             "        poll_timeout: 2s\n"
	             "      - id: hook\n"
	             "        token: \"%s\"\n"
	             "        mode: webhook\n"
	             "        api_base: http://127.0.0.1:%d\n"
	             "        webhook: {secret: %s}\n",
	             TOKEN, fx.fake.port, HOOK_TOKEN, fx.fake.port, HOOK_SECRET);
	if (n < 0 || (size_t)n >= sizeof cfg)
		return -1;
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0)
		return -1;
	return harness_cli(fx.home, NULL, init) == 0 ? 0 : -1;
}

static int setup(void **state)
{
	const char *args[] = {TOKEN "," HOOK_TOKEN, NULL};
	char step[64];

	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0 ||
	    harness_peer_start(&fx.fake, "fake_telegram.js", args) != 0 || prepare_home() != 0)
		return -1;
	fx.step_at_ms = now_ms() + STEP_AFTER_MS;
	snprintf(step, sizeof step, "%lld:%s", (long long)fx.step_at_ms, STEP_MS);
	setenv("SWITCHBOARD_TEST_WALL_STEP", step, 1);
	if (harness_daemon_start(&fx.d, fx.home, NULL) != 0 || harness_wait_ready(&fx.d, 20000))
		return -1;
	unsetenv("SWITCHBOARD_TEST_WALL_STEP");
	return 0;
}

static int teardown(void **state)
{
	int code;

	(void)state;
	code = harness_daemon_stop(&fx.d, SIGTERM, 20000);
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

static json_t *message(int64_t mid, int64_t chat, const char *text)
{
	return json_pack("{sIs{sIsbss}s{sIss}sIss}", "message_id", (json_int_t)mid, "from", "id",
	                 (json_int_t)chat, "is_bot", 0, "first_name", "Alice", "chat", "id",
	                 (json_int_t)chat, "type", "private", "date", (json_int_t)time(NULL),
	                 "text", text);
}

/* Queues an update for the polling bot. */
static void poll_says(int64_t mid, int64_t chat, const char *text)
{
	json_t *r =
	    ctl("POST", "/_ctl/update", json_pack("{so}", "message", message(mid, chat, text)));

	assert_non_null(r);
	json_decref(r);
}

/* Posts an update to the webhook bot, as Telegram would. */
static void hook_says(int64_t uid, int64_t mid, int64_t chat, const char *text)
{
	char hdr[300], *body;
	const char *h[] = {"Content-Type: application/json", hdr, NULL};
	json_t *u =
	    json_pack("{sIso}", "update_id", (json_int_t)uid, "message", message(mid, chat, text));

	snprintf(hdr, sizeof hdr, "X-Telegram-Bot-Api-Secret-Token: %s", HOOK_SECRET);
	body = json_dumps(u, JSON_COMPACT);
	json_decref(u);
	assert_non_null(body);
	assert_int_equal(harness_http(fx.d.port, "POST", "/telegram/hook", h, body, NULL), 200);
	free(body);
}

/* Whether the fake accepted a reply to message mid in chat. */
static bool replied(int64_t chat, int64_t mid)
{
	json_t *st = ctl("GET", "/_ctl/state", NULL), *s;
	bool found = false;
	size_t i;

	json_array_foreach(json_object_get(st, "sent"), i, s)
	{
		json_t *rp = json_object_get(s, "reply_parameters");

		if (json_integer_value(json_object_get(s, "chat_id")) == chat &&
		    json_integer_value(json_object_get(rp, "message_id")) == mid &&
		    json_integer_value(json_object_get(s, "outcome")) == 200)
			found = true;
	}
	json_decref(st);
	return found;
}

static void wait_reply(int64_t chat, int64_t mid, int timeout_ms)
{
	int64_t deadline = now_ms() + timeout_ms;

	while (now_ms() < deadline) {
		if (replied(chat, mid))
			return;
		usleep(50000);
	}
	print_log();
	{
		json_t *st = ctl("GET", "/_ctl/state", NULL);
		char *t = json_dumps(st, JSON_COMPACT);

		fprintf(stderr, "fake state: %s\n", t ? t : "(none)");
		free(t);
		json_decref(st);
	}
	fail_msg("no reply to message %lld in chat %lld within %d ms", (long long)mid,
	         (long long)chat, timeout_ms);
}

static void test_wall_clock_set_back(void **state)
{
	int64_t wait;

	(void)state;
	/* Before the step: both bots answer, their buckets hold fewer tokens. */
	poll_says(201, 5001, "before poll");
	hook_says(880001, 301, 5002, "before hook");
	wait_reply(5001, 201, 20000);
	wait_reply(5002, 301, 20000);
	/* A slow machine may take longer than the step's delay for this; the
	 * messages below come after the step all the same. */
	wait = fx.step_at_ms + 500 - now_ms();
	if (wait > 0)
		usleep((useconds_t)wait * 1000);

	/* After it: the next poll follows (2 s polls), the replies go out. */
	poll_says(202, 5001, "after poll");
	hook_says(880002, 302, 5002, "after hook");
	wait_reply(5002, 302, 10000);
	wait_reply(5001, 202, 10000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_wall_clock_set_back),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
