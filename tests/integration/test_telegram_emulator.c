/*
 * test_telegram_emulator.c - the Telegram channel against the independent
 * npm emulator telegram-test-api (tests/fakes/telegram_emulator.js): a user
 * message goes in through the emulator's client API, the gateway polls it
 * with getUpdates, the bound agent (scripted model) answers, and the reply
 * is read back from the emulator, as a reply to the user's message.
 *
 * The emulator answers getUpdates at once whatever the timeout, so the
 * account sets poll_interval; it has no sendChatAction (500), which the
 * adapter must shrug off.
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

struct fixture {
	char home[512];
	struct harness_daemon d;
	struct harness_peer emu;
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
	char path[700], cfg[2048];

	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0 ||
	    harness_peer_start(&fx.emu, "telegram_emulator.js", NULL) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/script.yaml", fx.home);
	if (harness_write_file(path, "steps:\n  - text: \"echo {{user_text}}\"\n") != 0)
		return -1;
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
	         "    accounts:\n"
	         "      - id: emu\n"
	         "        token: \"%s\"\n"
	         "        api_base: http://127.0.0.1:%d\n"
	         "        poll_timeout: 0s\n"
	         "        poll_interval: 200ms\n",
	         TOKEN, fx.emu.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0 || harness_cli(fx.home, NULL, init) != 0)
		return -1;
	if (harness_daemon_start(&fx.d, fx.home, NULL) != 0 || harness_wait_ready(&fx.d, 20000))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	int code;

	(void)state;
	code = harness_daemon_stop(&fx.d, SIGTERM, 20000);
	if (code != 0) {
		struct buf log;

		buf_init(&log, 64 << 20);
		harness_daemon_log(&fx.d, &log);
		fprintf(stderr, "daemon exit %d\n%s\n", code, log.data ? log.data : "");
		buf_free(&log);
	}
	harness_peer_stop(&fx.emu);
	harness_rmrf(fx.home);
	return code == 0 ? 0 : -1;
}

static json_t *emu_post(const char *path, json_t *body_take)
{
	static const char *const h[] = {"Content-Type: application/json", NULL};
	char *text = json_dumps(body_take, JSON_COMPACT);
	struct buf resp;
	json_t *out = NULL;

	json_decref(body_take);
	buf_init(&resp, 16 << 20);
	if (harness_http(fx.emu.port, "POST", path, h, text, &resp) == 200 && resp.data)
		out = json_loads(resp.data, 0, NULL);
	free(text);
	buf_free(&resp);
	return out;
}

/* The user says text in chat; the bot's reply comes back through the
 * emulator. */
static void test_roundtrip(void **state)
{
	json_t *r, *hist, *m, *msg = NULL;
	int64_t deadline, user_mid = 0;
	size_t i;

	(void)state;
	r = emu_post("/sendMessage",
	             json_pack("{sss{sisbssss}s{siss}sIss}", "botToken", TOKEN, "from", "id", 42,
	                       "is_bot", 0, "first_name", "Alice", "username", "alice", "chat",
	                       "id", 42, "type", "private", "date", (json_int_t)time(NULL), "text",
	                       "hello emulator"));
	assert_non_null(r);
	assert_true(json_is_true(json_object_get(r, "ok")));
	json_decref(r);

	deadline = now_ms() + 30000;
	while (!msg && now_ms() < deadline) {
		r = emu_post("/getUpdates", json_pack("{sssi}", "token", TOKEN, "chatId", 42));
		json_array_foreach(json_object_get(r, "result"), i, m)
		{
			json_t *bm = json_object_get(m, "message");

			if (!msg && json_is_string(json_object_get(bm, "text")))
				msg = json_deep_copy(bm);
		}
		json_decref(r);
		if (!msg)
			usleep(100000);
	}
	assert_non_null(msg);
	assert_string_equal(json_string_value(json_object_get(msg, "text")), "echo hello emulator");
	assert_int_equal(json_integer_value(json_object_get(msg, "chat_id")), 42);
	assert_string_equal(json_string_value(json_object_get(msg, "parse_mode")), "HTML");

	/* The reply answers the user's message (its id, from the history). */
	hist = emu_post("/getUpdatesHistory", json_pack("{ss}", "token", TOKEN));
	json_array_foreach(json_object_get(hist, "result"), i, m)
	{
		json_t *um = json_object_get(m, "message");

		if (json_is_string(json_object_get(um, "text")) &&
		    strcmp(json_string_value(json_object_get(um, "text")), "hello emulator") == 0)
			user_mid = json_integer_value(json_object_get(m, "messageId"));
	}
	assert_true(user_mid > 0);
	assert_int_equal(json_integer_value(json_object_get(
	                     json_object_get(msg, "reply_parameters"), "message_id")),
	                 user_mid);
	json_decref(hist);
	json_decref(msg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_roundtrip),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
