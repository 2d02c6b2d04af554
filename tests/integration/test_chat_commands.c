/*
 * test_chat_commands.c - the chat commands from the user's side: what a
 * Telegram user (tests/fakes/fake_telegram.js) and a Slack user
 * (tests/fakes/fake_slack.js) receive for /help, /status, /stop, /compact
 * and /model, against the real daemon with scripted models. The agent's
 * primary model s/echo answers "echo <text>" ("done <text>" after 8 s for
 * a text with "slow"); its fallback t/other answers "other <text>".
 *
 * Cases: commands are answered without a model turn and never enter the
 * transcript; /cmd@thisbot works and /cmd@otherbot is ignored; unknown
 * /words and commands with words after them reach the model; in groups
 * only an allowed, mentioning sender is answered; /stop during a slow turn
 * stops it and the message steered into it is still answered; /model
 * switches the session and the choice survives a restart; /compact reports
 * the token counts before and after, and waits behind a running turn.
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

#include "channels/slack/slack_proto.h"
#include "harness.h"

#define TOKEN "123456:TEST-token"
#define SECRET "8f742231b10e8888abcd99yyyzzz85a5-test"
#define BOT_TOKEN "xoxb-1111-secret-bot-token-ev"
#define SLACK_PATH "/slack/events/ev"
#define ALICE 4242
#define GROUP -100777
#define OTHER_GROUP -100888

struct fixture {
	char home[512];
	struct harness_daemon d;
	struct harness_peer tg;
	struct harness_peer slack;
	int64_t next_msg;
};

static struct fixture fx;

static int64_t now_ms(void)
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

static void print_log(void)
{
	struct buf log;

	buf_init(&log, 64 << 20);
	harness_daemon_log(&fx.d, &log);
	fprintf(stderr, "daemon log:\n%s\n", log.data ? log.data : "");
	buf_free(&log);
}

static int write_home_file(const char *name, const char *text)
{
	char path[700];

	snprintf(path, sizeof path, "%s/%s", fx.home, name);
	return harness_write_file(path, text);
}

static int prepare_home(void)
{
	const char *init[] = {"init", NULL};
	char cfg[4096];

	if (write_home_file("script.yaml", "steps:\n"
	                                   "  - match: \"Summarise the conversation below\"\n"
	                                   "    text: \"SUMMARY: the user sent fill messages.\"\n"
	                                   "  - match: slow\n"
	                                   "    delay_ms: 8000\n"
	                                   "    text: \"done {{user_text}}\"\n"
	                                   "  - text: \"echo {{user_text}}\"\n") != 0 ||
	    write_home_file("other.yaml", "steps:\n  - text: \"other {{user_text}}\"\n") != 0 ||
	    write_home_file("tools.yaml", "steps:\n"
	                                  "  - match: twostep\n"
	                                  "    delay_ms: 2000\n"
	                                  "    tool_calls:\n"
	                                  "      - {name: ls, input: {path: \".\"}}\n"
	                                  "  - delay_ms: 6000\n"
	                                  "    text: \"done {{user_text}}\"\n") != 0)
		return -1;
	snprintf(cfg, sizeof cfg,
	         "gateway: {bind: 127.0.0.1}\n"
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "  - {id: t, api: scripted, script: other.yaml}\n"
	         "  - {id: u, api: scripted, script: tools.yaml}\n"
	         "agents:\n"
	         "  - id: main\n"
	         "    default: true\n"
	         "    model: s/echo\n"
	         "    fallbacks: [t/other, u/tools]\n"
	         "    context: {window: 100000}\n"
	         "security: {owners: [\"telegram:%d\", \"slack:*\"]}\n"
	         "channels:\n"
	         "  telegram:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    group_policy: allowlist\n"
	         "    groups:\n"
	         "      - {id: \"%d\", require_mention: true}\n"
	         "    accounts:\n"
	         "      - id: fake\n"
	         "        token: ${SB_TEST_TG_TOKEN}\n"
	         "        api_base: http://127.0.0.1:%d\n"
	         "        poll_timeout: 2s\n"
	         "        rate_limit: {chat_per_minute: 600, chat_burst: 20}\n"
	         "  slack:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    group_policy: open\n"
	         "    accounts:\n"
	         "      - id: ev\n"
	         "        bot_token: \"${SB_TEST_SLACK_BOT}\"\n"
	         "        signing_secret: \"%s\"\n"
	         "        api_base: http://127.0.0.1:%d/api\n",
	         ALICE, GROUP, fx.tg.port, SECRET, fx.slack.port);
	if (write_home_file("switchboard.yaml", cfg) != 0)
		return -1;
	return harness_cli(fx.home, NULL, init) == 0 ? 0 : -1;
}

static int start_daemon(void)
{
	if (harness_daemon_start(&fx.d, fx.home, NULL) != 0 || harness_wait_ready(&fx.d, 20000))
		return -1;
	return 0;
}

static int setup(void **state)
{
	const char *args[] = {TOKEN, NULL};

	(void)state;
	memset(&fx, 0, sizeof fx);
	fx.next_msg = 100;
	setenv("SB_TEST_TG_TOKEN", TOKEN, 1);
	setenv("SB_TEST_SLACK_BOT", BOT_TOKEN, 1);
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0 ||
	    harness_peer_start(&fx.tg, "fake_telegram.js", args) != 0 ||
	    harness_peer_start(&fx.slack, "fake_slack.js", NULL) != 0 || prepare_home() != 0)
		return -1;
	return start_daemon();
}

static int teardown(void **state)
{
	int code;

	(void)state;
	code = fx.d.pid > 0 ? harness_daemon_stop(&fx.d, SIGTERM, 20000) : 0;
	if (code != 0) {
		fprintf(stderr, "daemon exit %d\n", code);
		print_log();
	}
	harness_peer_stop(&fx.tg);
	harness_peer_stop(&fx.slack);
	if (getenv("SB_KEEP"))
		fprintf(stderr, "home kept: %s\n", fx.home);
	else
		harness_rmrf(fx.home);
	return code == 0 ? 0 : -1;
}

/* ---- Telegram ---- */

static json_t *tg_ctl(const char *method, const char *path, json_t *body_take)
{
	static const char *const h[] = {"Content-Type: application/json", NULL};
	char *text = body_take ? json_dumps(body_take, JSON_COMPACT) : NULL;
	struct buf resp;
	json_t *out = NULL;
	long st;

	json_decref(body_take);
	buf_init(&resp, 64 << 20);
	st = harness_http(fx.tg.port, method, path, h, text, &resp);
	if (st == 200 && resp.data)
		out = json_loads(resp.data, 0, NULL);
	free(text);
	buf_free(&resp);
	return out;
}

/* A message from user `from` in chat (private when chat == from), with a
 * bot_command entity when the text starts with "/"; its message id. */
static int64_t tg_says_from(int64_t from, int64_t chat, const char *text)
{
	int64_t mid = fx.next_msg++ + 100000;
	json_t *msg = json_pack("{sIs{sIsbssss}s{sIss}sIss}", "message_id", (json_int_t)mid, "from",
	                        "id", (json_int_t)from, "is_bot", 0, "first_name", "Alice",
	                        "username", "alice", "chat", "id", (json_int_t)chat, "type",
	                        chat == from ? "private" : "supergroup", "date",
	                        (json_int_t)time(NULL), "text", text);
	json_t *r;

	if (text[0] == '/') {
		size_t n = strcspn(text, " \n");

		json_object_set_new(
		    msg, "entities",
		    json_pack("[{sssisi}]", "type", "bot_command", "offset", 0, "length", (int)n));
	} else if (strstr(text, "@sb_test_bot")) {
		/* ASCII text: UTF-16 offsets are byte offsets */
		json_object_set_new(msg, "entities",
		                    json_pack("[{sssisi}]", "type", "mention", "offset",
		                              (int)(strstr(text, "@sb_test_bot") - text), "length",
		                              12));
	}
	r = tg_ctl("POST", "/_ctl/update", json_pack("{so}", "message", msg));
	assert_non_null(r);
	json_decref(r);
	return mid;
}

static int64_t tg_says(const char *text)
{
	return tg_says_from(ALICE, ALICE, text);
}

/* The text of the accepted reply to mid in chat, or NULL (caller frees). */
static char *tg_reply_text(int64_t chat, int64_t mid)
{
	json_t *st = tg_ctl("GET", "/_ctl/state", NULL), *s;
	size_t i;
	char *out = NULL;

	json_array_foreach(json_object_get(st, "sent"), i, s)
	{
		json_t *rp = json_object_get(s, "reply_parameters");

		if (json_integer_value(json_object_get(s, "chat_id")) != chat ||
		    json_integer_value(json_object_get(rp, "message_id")) != mid ||
		    json_integer_value(json_object_get(s, "outcome")) != 200)
			continue;
		if (out) {
			fail_msg("two replies to message %lld: %s / %s", (long long)mid, out,
			         json_string_value(json_object_get(s, "visible")));
		}
		out = strdup(json_string_value(json_object_get(s, "visible")));
	}
	json_decref(st);
	return out;
}

/* How many messages went to chat. */
static size_t tg_sent_to(int64_t chat)
{
	json_t *st = tg_ctl("GET", "/_ctl/state", NULL), *s;
	size_t i, n = 0;

	json_array_foreach(json_object_get(st, "sent"), i, s)
	{
		if (json_integer_value(json_object_get(s, "chat_id")) == chat &&
		    json_integer_value(json_object_get(s, "outcome")) == 200)
			n++;
	}
	json_decref(st);
	return n;
}

static char *tg_wait_reply(int64_t chat, int64_t mid, int timeout_ms)
{
	int64_t end = now_ms() + timeout_ms;
	char *t;

	while (!(t = tg_reply_text(chat, mid)) && now_ms() < end)
		sleep_ms(50);
	if (!t) {
		print_log();
		fail_msg("no reply to message %lld in chat %lld", (long long)mid, (long long)chat);
	}
	return t;
}

/* Sends text and returns the reply (caller frees). */
static char *tg_ask(const char *text)
{
	return tg_wait_reply(ALICE, tg_says(text), 20000);
}

/* Waits until every update sent so far was taken by the gateway. */
static void tg_wait_confirmed(void)
{
	int64_t end = now_ms() + 20000;

	while (now_ms() < end) {
		json_t *st = tg_ctl("GET", "/_ctl/state", NULL);
		int64_t pending = json_integer_value(json_object_get(st, "pending"));

		json_decref(st);
		if (!pending)
			return;
		sleep_ms(50);
	}
	fail_msg("updates still pending");
}

static void assert_has(const char *text, const char *needle)
{
	if (!text || !strstr(text, needle))
		fail_msg("expected \"%s\" in:\n%s", needle, text ? text : "(null)");
}

static void assert_lacks(const char *text, const char *needle)
{
	if (text && strstr(text, needle))
		fail_msg("did not expect \"%s\" in:\n%s", needle, text);
}

/* The transcript of the session key (all of its files), as one text. */
static void transcripts(struct buf *out)
{
	char cmd[1200];
	FILE *p;
	char chunk[4096];
	size_t n;

	snprintf(cmd, sizeof cmd, "cat %s/agents/main/sessions/*.jsonl 2>/dev/null", fx.home);
	p = popen(cmd, "r");
	assert_non_null(p);
	while ((n = fread(chunk, 1, sizeof chunk, p)) > 0)
		buf_append(out, chunk, n);
	pclose(p);
	buf_puts(out, "");
}

/* /help lists the commands and the reset triggers; /status describes the
 * DM session; neither runs a model nor enters the transcript. */
static void test_help_and_status(void **state)
{
	char *t;
	struct buf tr;

	(void)state;
	t = tg_ask("/help");
	assert_has(t, "/status");
	assert_has(t, "/stop");
	assert_has(t, "/compact");
	assert_has(t, "/model [NAME]");
	assert_has(t, "/new - start a new session");
	assert_lacks(t, "echo");
	free(t);

	/* Before any turn: an empty session. */
	t = tg_ask("   /STATUS  ");
	assert_has(t, "Agent: main");
	assert_has(t, "Session: agent:main:main");
	assert_has(t, "Model: s/echo (primary)");
	assert_has(t, "Context: empty");
	assert_has(t, "Queue: idle");
	free(t);

	t = tg_ask("hello there");
	assert_string_equal(t, "echo hello there");
	free(t);

	t = tg_ask("/status@sb_test_bot");
	assert_has(t, "Session: agent:main:main (");
	assert_has(t, "Last answer: s/echo at ");
	assert_has(t, "Workspace: commit ");
	assert_has(t, "tokens (");
	assert_has(t, "of 100000 tokens");
	assert_has(t, "2 messages, 1 user turn, 0 compactions");
	free(t);

	buf_init(&tr, 64 << 20);
	transcripts(&tr);
	assert_non_null(strstr(tr.data, "hello there"));
	assert_null(strstr(tr.data, "/status"));
	assert_null(strstr(tr.data, "/help"));
	assert_null(strstr(tr.data, "/STATUS"));
	buf_free(&tr);
}

/* What is not a command reaches the model as text: unknown /words, paths,
 * and commands with words after them. A command for another bot is
 * ignored altogether. */
static void test_not_commands(void **state)
{
	char *t;
	int64_t mid;
	size_t before;

	(void)state;
	t = tg_ask("/foo bar");
	assert_string_equal(t, "echo /foo bar");
	free(t);
	t = tg_ask("/etc/hosts is missing");
	assert_string_equal(t, "echo /etc/hosts is missing");
	free(t);
	t = tg_ask("/stop the server on port 80");
	assert_string_equal(t, "echo /stop the server on port 80");
	free(t);

	before = tg_sent_to(ALICE);
	mid = tg_says("/status@some_other_bot");
	tg_wait_confirmed();
	/* The next message is answered, the one for the other bot never. */
	t = tg_ask("after");
	assert_string_equal(t, "echo after");
	free(t);
	assert_null(tg_reply_text(ALICE, mid));
	assert_int_equal(tg_sent_to(ALICE), before + 1);
}

/* Groups: only an allowed group, and with the mention the group needs;
 * the group's own session. */
static void test_groups(void **state)
{
	char *t;
	int64_t m1, m2, m3;

	(void)state;
	m1 = tg_says_from(ALICE, OTHER_GROUP, "/status@sb_test_bot");
	m2 = tg_says_from(5555, GROUP, "/status");
	m3 = tg_says_from(5555, GROUP, "/status@sb_test_bot");
	t = tg_wait_reply(GROUP, m3, 20000);
	assert_has(t, "Session: agent:main:telegram:group:-100777");
	assert_has(t, "Context: empty");
	free(t);
	sleep_ms(1000);
	/* not allowed, not mentioned: nothing */
	assert_null(tg_reply_text(OTHER_GROUP, m1));
	assert_int_equal(tg_sent_to(OTHER_GROUP), 0);
	assert_null(tg_reply_text(GROUP, m2));
	assert_int_equal(tg_sent_to(GROUP), 1);
}

/* Another DM sender (not the operator) has a session of their own: their
 * /model and /stop never reach the operator's main session. */
static void test_other_sender_own_session(void **state)
{
	char *t;

	(void)state;
	t = tg_wait_reply(5555, tg_says_from(5555, 5555, "/status"), 20000);
	assert_has(t, "Session: agent:main:telegram:");
	assert_lacks(t, "agent:main:main");
	free(t);
	t = tg_wait_reply(5555, tg_says_from(5555, 5555, "/model t/other"), 20000);
	assert_string_equal(t, "This session now uses t/other.");
	free(t);
	t = tg_wait_reply(5555, tg_says_from(5555, 5555, "/stop"), 20000);
	assert_string_equal(t, "Nothing is running in this session.");
	free(t);
	t = tg_ask("/status");
	assert_has(t, "Session: agent:main:main");
	assert_has(t, "Model: s/echo (primary)");
	free(t);
}

/* /stop during a slow turn: the reply says what was stopped, the slow
 * reply never comes, and the message sent during the turn is answered. */
static void test_stop(void **state)
{
	int64_t slow, mid, stop;
	char *t;

	(void)state;
	t = tg_ask("/stop");
	assert_string_equal(t, "Nothing is running in this session.");
	free(t);

	slow = tg_says("a slow question");
	sleep_ms(1500); /* the turn is calling the model */
	mid = tg_says("meanwhile hello");
	sleep_ms(500);
	t = tg_ask("/status");
	assert_has(t, "Queue: a turn is running");
	assert_has(t, "1 message steered into it");
	free(t);
	stop = tg_says("/stop");
	t = tg_wait_reply(ALICE, stop, 5000);
	assert_has(t, "Stopped the turn answering \"a slow question\"");
	assert_has(t, "1 message sent during it will be answered next.");
	free(t);
	t = tg_wait_reply(ALICE, mid, 5000);
	assert_string_equal(t, "echo meanwhile hello");
	free(t);
	/* Well past the slow step's 8 s: its answer never came. */
	sleep_ms(7000);
	assert_null(tg_reply_text(ALICE, slow));
	t = tg_ask("/status");
	assert_has(t, "Queue: idle");
	free(t);
}

/* /stop after a message steered into the turn was carried into a model
 * call (the turn called a tool, then the model again): the steered message
 * is answered after the stop, and its text is in the history once. */
static void test_stop_carried(void **state)
{
	int64_t first, steered, stop;
	struct buf tr;
	char *t;
	int n = 0;

	(void)state;
	t = tg_ask("/model u/tools");
	assert_string_equal(t, "This session now uses u/tools.");
	free(t);
	first = tg_says("twostep please");
	sleep_ms(800); /* the first model call takes 2 s */
	steered = tg_says("meanwhile two");
	sleep_ms(3200); /* the tool ran; the second call (6 s) carries it */
	stop = tg_says("/stop");
	t = tg_wait_reply(ALICE, stop, 5000);
	assert_has(t, "Stopped the turn answering \"twostep please\"");
	assert_has(t, "1 message sent during it will be answered next.");
	free(t);
	t = tg_wait_reply(ALICE, steered, 20000);
	assert_string_equal(t, "done meanwhile two");
	free(t);
	assert_null(tg_reply_text(ALICE, first));
	buf_init(&tr, 64 << 20);
	transcripts(&tr);
	/* (the "note" event that recorded the steer names it too) */
	for (const char *p = tr.data;
	     (p = strstr(p, "{\"type\":\"text\",\"text\":\"meanwhile two\"}")); p++)
		n++;
	buf_free(&tr);
	assert_int_equal(n, 1);
	t = tg_ask("/model s/echo");
	free(t);
}

/* /model lists and switches; unknown names are refused with the list; the
 * choice is the session's and survives a restart. */
static void test_model_and_restart(void **state)
{
	char *t;

	(void)state;
	t = tg_ask("/model");
	assert_has(t, "* s/echo (primary) <- in use");
	assert_has(t, "- t/other (fallback)");
	free(t);
	t = tg_ask("/model gpt-9");
	assert_has(t, "Unknown model \"gpt-9\"");
	assert_has(t, "* s/echo (primary) <- in use");
	assert_has(t, "Nothing changed.");
	free(t);
	t = tg_ask("what model");
	assert_string_equal(t, "echo what model");
	free(t);

	t = tg_ask("/model other");
	assert_string_equal(t, "This session now uses t/other.");
	free(t);
	t = tg_ask("which now");
	assert_string_equal(t, "other which now");
	free(t);

	/* Another session (the group's) keeps the primary. */
	{
		int64_t m = tg_says_from(5555, GROUP, "hi @sb_test_bot");

		t = tg_wait_reply(GROUP, m, 20000);
		/* (not an owner: the model is told the text is data) */
		assert_true(strncmp(t, "echo ", 5) == 0);
		assert_has(t, "hi @sb_test_bot");
		free(t);
	}

	assert_int_equal(harness_daemon_stop(&fx.d, SIGTERM, 20000), 0);
	assert_int_equal(start_daemon(), 0);

	t = tg_ask("/status");
	assert_has(t, "Model: t/other (chosen with /model; primary s/echo)");
	free(t);
	t = tg_ask("after restart");
	assert_string_equal(t, "other after restart");
	free(t);
	/* /new keeps the choice; /model with the primary's name returns to it. */
	t = tg_ask("/new");
	assert_string_equal(t, "Started a new session.");
	free(t);
	t = tg_ask("fresh");
	assert_string_equal(t, "other fresh");
	free(t);
	t = tg_ask("/model s/echo");
	assert_string_equal(t, "This session now uses s/echo.");
	free(t);
	t = tg_ask("back");
	assert_string_equal(t, "echo back");
	free(t);
}

/* /compact: the counts before and after, a smaller context, and a history
 * that goes on. */
static void test_compact(void **state)
{
	char *t, fill[2200];
	long long before = 0, after = 0;
	const char *p;

	(void)state;
	t = tg_ask("/new");
	free(t);
	t = tg_ask("/compact");
	assert_string_equal(t, "Nothing to compact: this session has no history yet.");
	free(t);
	for (int i = 0; i < 12; i++) {
		memset(fill, 0, sizeof fill);
		snprintf(fill, sizeof fill, "fill %d ", i);
		for (size_t k = strlen(fill); k < sizeof fill - 1; k += 5)
			memcpy(fill + k, "word ", k + 5 < sizeof fill ? 5 : sizeof fill - 1 - k);
		t = tg_ask(fill);
		assert_non_null(strstr(t, "echo fill"));
		free(t);
	}
	t = tg_ask("/compact");
	assert_has(t, "Compacted this session's context: about ");
	p = strstr(t, "about ");
	assert_int_equal(sscanf(p, "about %lld tokens before, %lld after", &before, &after), 2);
	assert_true(before > 5000);
	assert_true(after < before / 2);
	assert_has(t, "of the 100000-token window");
	free(t);
	t = tg_ask("/status");
	assert_has(t, "compaction");
	assert_lacks(t, "0 compactions");
	free(t);
	t = tg_ask("still there?");
	assert_string_equal(t, "echo still there?");
	free(t);
}

/* The position of the reply to mid among everything sent, or -1. */
static long tg_reply_index(int64_t mid)
{
	json_t *st = tg_ctl("GET", "/_ctl/state", NULL), *s;
	size_t i;
	long at = -1;

	json_array_foreach(json_object_get(st, "sent"), i, s)
	{
		if (json_integer_value(json_object_get(json_object_get(s, "reply_parameters"),
		                                       "message_id")) == mid &&
		    json_integer_value(json_object_get(s, "outcome")) == 200)
			at = (long)i;
	}
	json_decref(st);
	return at;
}

/* /compact while a turn runs: it waits behind the turn (not steered into
 * it, not interrupting it), and /status shows it waiting. */
static void test_compact_waits(void **state)
{
	int64_t slow, compact;
	char *t;

	(void)state;
	slow = tg_says("another slow one");
	sleep_ms(1500);
	compact = tg_says("/compact");
	sleep_ms(500);
	t = tg_ask("/status");
	assert_has(t, "Queue: a turn is running");
	assert_has(t, "1 message waiting");
	free(t);
	t = tg_wait_reply(ALICE, compact, 30000);
	assert_has(t, "Compacted this session's context");
	free(t);
	t = tg_wait_reply(ALICE, slow, 1000);
	assert_string_equal(t, "done another slow one");
	free(t);
	assert_true(tg_reply_index(slow) < tg_reply_index(compact));
}

/* ---- Slack ---- */

static json_t *slack_state(void)
{
	struct buf resp;
	json_t *j;

	buf_init(&resp, 64 << 20);
	assert_int_equal(harness_http(fx.slack.port, "GET", "/_test/state", NULL, NULL, &resp),
	                 200);
	j = json_loads(resp.data, 0, NULL);
	buf_free(&resp);
	assert_non_null(j);
	return j;
}

/* The last post to channel whose text has needle, after waiting (caller
 * frees), or NULL. */
static char *slack_wait_post(const char *needle, const char *channel, int timeout_ms)
{
	int64_t end = now_ms() + timeout_ms;

	do {
		json_t *st = slack_state(), *p;
		size_t i;
		char *out = NULL;

		json_array_foreach(json_object_get(st, "posts"), i, p)
		{
			const char *tx = json_string_value(json_object_get(p, "text"));
			const char *c = json_string_value(json_object_get(p, "channel"));

			if (tx && strstr(tx, needle) && c && strcmp(c, channel) == 0) {
				free(out);
				out = strdup(tx);
			}
		}
		json_decref(st);
		if (out)
			return out;
		sleep_ms(50);
	} while (now_ms() < end);
	return NULL;
}

static void slack_post(const char *channel, const char *ctype, const char *text, const char *ts,
                       const char *eid)
{
	json_t *ev = json_pack("{ssssssssssss}", "type", "message", "channel", channel, "text",
	                       text, "ts", ts, "event_ts", ts, "user", "U1");
	json_t *o;
	char *body, tsh[32], sig[SLACK_SIG_SIZE], hts[64], hsig[128];
	const char *headers[] = {"Content-Type: application/json", hts, hsig, NULL};

	json_object_set_new(ev, "channel_type", json_string(ctype));
	o = json_pack("{sssssssssssIso}", "token", "XXYYZZ", "team_id", "T0TEST", "api_app_id",
	              "A0TEST", "type", "event_callback", "event_id", eid, "event_time",
	              (json_int_t)time(NULL), "event", ev);
	body = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	snprintf(tsh, sizeof tsh, "%ld", (long)time(NULL));
	assert_int_equal(slack_sig_compute(SECRET, tsh, body, strlen(body), sig), 0);
	snprintf(hts, sizeof hts, "X-Slack-Request-Timestamp: %s", tsh);
	snprintf(hsig, sizeof hsig, "X-Slack-Signature: %s", sig);
	assert_int_equal(harness_http(fx.d.port, "POST", SLACK_PATH, headers, body, NULL), 200);
	free(body);
}

/* A DM "/status" and a channel mention "@bot /help" are answered; a
 * channel message without the mention is not; "/model" in the DM. */
static void test_slack(void **state)
{
	char *t;

	(void)state;
	slack_post("D0DM", "im", "/status", "1700000100.000100", "EvC1");
	t = slack_wait_post("Agent: main", "D0DM", 20000);
	assert_non_null(t);
	/* A DM is the agent's main session, whichever channel it comes on. */
	assert_has(t, "Session: agent:main:main (");
	assert_has(t, "Model: s/echo (primary)");
	assert_has(t, "Queue: idle");
	free(t);

	slack_post("C0CHAN", "channel", "<@UBOT> /help", "1700000101.000100", "EvC2");
	t = slack_wait_post("/compact", "C0CHAN", 20000);
	assert_non_null(t);
	assert_has(t, "/model [NAME]");
	free(t);

	slack_post("D0DM", "im", "/model t/other", "1700000102.000100", "EvC3");
	t = slack_wait_post("now uses", "D0DM", 20000);
	assert_non_null(t);
	assert_has(t, "This session now uses t/other.");
	free(t);
	slack_post("D0DM", "im", "hello slack", "1700000103.000100", "EvC4");
	t = slack_wait_post("hello slack", "D0DM", 20000);
	assert_non_null(t);
	assert_string_equal(t, "other hello slack");
	free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_help_and_status),
	    cmocka_unit_test(test_not_commands),
	    cmocka_unit_test(test_groups),
	    cmocka_unit_test(test_other_sender_own_session),
	    cmocka_unit_test(test_stop),
	    cmocka_unit_test(test_stop_carried),
	    cmocka_unit_test(test_model_and_restart),
	    cmocka_unit_test(test_compact),
	    cmocka_unit_test(test_compact_waits),
	    cmocka_unit_test(test_slack),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
