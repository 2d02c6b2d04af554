/*
 * test_crash_chat.c - every crash point a chat conversation reaches,
 * enumerated (the chat half of the mix; test_crash_enum.c has the webhook
 * and OpenAI half).
 *
 * The conversation, driven from the Telegram user's side through
 * tests/fakes/fake_telegram.js (it confirms updates by offset, as Telegram
 * does, so an update the gateway confirmed can only be answered if it was
 * stored first):
 *  - the user writes "ping"; the agent calls the message tool ("progress
 *    report"), then answers in three pieces (chunk_limit 64);
 *  - once the progress report arrived (or the gateway died), the user writes
 *    "also this", which steers into the running turn or, when that turn is
 *    over, gets a turn of its own;
 *  - meanwhile a Slack user mentions the bot in a channel (Events API,
 *    tests/fakes/fake_slack.js; the test signs each event and sends it
 *    again, with X-Slack-Retry-Num, until it is answered 200, as Slack
 *    does), and the agent's heartbeat fires about once a second (the
 *    scheduler's test clock), its report going to the Telegram chat;
 *  - the scripted model tries a call again when its result is an error (a
 *    call a restart cut short), as a model would.
 * A first run without a crash counts the points (P). Then for each N in
 * 1..P, on a fresh home and a fresh fake: SB_CRASH_AT=N, the conversation,
 * and a start without it when the gateway died. Per N, from the user's side:
 *  - the progress report, each piece and an answer naming "also this"
 *    arrived; every message beyond one per text is a send the platform
 *    accepted in the instant before a kill (the documented window), so
 *    their number is at most switchboard_outbox_resent_after_crash_total;
 *  - the Slack mention was acknowledged and answered once in its channel;
 *  - every heartbeat the store ran reached the chat once;
 *  - every update was confirmed and the inbox and outbox are empty;
 *  - every transcript loads paired, no user text twice;
 *  - a further message is answered, and the stop is clean.
 * It prints "enumerated P crash points in S s".
 *
 * SB_ENUM_ONLY=N runs that N alone.
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sqlite3.h>

#include "agents/message.h"
#include "agents/transcript.h"
#include "channels/slack/slack_proto.h"
#include "harness.h"
#include "harness_oai.h"

#define TOKEN "123456:TEST-token"
#define CHAT 4242
#define WAIT_MS 20000
#define SLACK_SECRET "enum-slack-signing-secret-0123456789"
#define HB_TEXT "heartbeat report"

static int failures;
/* The first line of the first failures, repeated at the end: a CI log may
 * keep only the head and the tail of a long run. */
static char failed[20][240];

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct run {
	long n;
	char home[512];
	char log[700];
	struct harness_daemon d;
	struct harness_peer fake;
	struct harness_peer slack;
	bool slack_acked;
	int slack_attempts;
	bool unreached;
	long long resent;
	int next_msg;
};

static void dump_log(const struct harness_daemon *d)
{
	struct buf log;

	buf_init(&log, 64 << 20);
	harness_daemon_log(d, &log);
	fprintf(stderr, "gateway log:\n%s\n", log.data ? log.data : "");
	buf_free(&log);
}

static void enum_fail(struct run *r, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "FAIL at SB_CRASH_AT=%ld: ", r->n);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (failures < (int)(sizeof failed / sizeof *failed)) {
		char *f = failed[failures];
		int k = snprintf(f, sizeof failed[0], "SB_CRASH_AT=%ld: ", r->n);

		va_start(ap, fmt);
		vsnprintf(f + k, sizeof failed[0] - (size_t)k, fmt, ap);
		va_end(ap);
		f[strcspn(f, "\n")] = '\0';
	}
	failures++;
}

static void failures_repeat(void)
{
	for (int i = 0; i < failures && i < (int)(sizeof failed / sizeof *failed); i++)
		fprintf(stderr, "failure %d: %s\n", i + 1, failed[i]);
}

static json_t *ctl(struct run *r, const char *method, const char *path, json_t *body_take)
{
	static const char *const h[] = {"Content-Type: application/json", NULL};
	char *text = body_take ? json_dumps(body_take, JSON_COMPACT) : NULL;
	struct buf resp;
	json_t *out = NULL;

	json_decref(body_take);
	buf_init(&resp, 64 << 20);
	if (harness_http(r->fake.port, method, path, h, text, &resp) == 200 && resp.data)
		out = json_loads(resp.data, 0, NULL);
	free(text);
	buf_free(&resp);
	return out;
}

static void user_says(struct run *r, const char *text)
{
	json_t *res = ctl(r, "POST", "/_ctl/update",
	                  json_pack("{s{sIs{sIsbss}s{sIss}sIss}}", "message", "message_id",
	                            (json_int_t)(100 + r->next_msg++), "from", "id",
	                            (json_int_t)CHAT, "is_bot", 0, "first_name", "Una", "chat",
	                            "id", (json_int_t)CHAT, "type", "private", "date",
	                            (json_int_t)time(NULL), "text", text));

	if (!res)
		enum_fail(r, "the fake refused the update \"%s\"", text);
	json_decref(res);
}

/* The texts the user received (accepted sends), in order. */
static json_t *received(struct run *r, long *pending)
{
	json_t *st = ctl(r, "GET", "/_ctl/state", NULL), *out = json_array(), *s;
	size_t i;

	*pending = -1;
	if (!st)
		return out;
	*pending = (long)json_integer_value(json_object_get(st, "pending"));
	json_array_foreach(json_object_get(st, "sent"), i, s)
	if (json_integer_value(json_object_get(s, "outcome")) == 200 &&
	    json_integer_value(json_object_get(s, "chat_id")) == CHAT)
		json_array_append(out, json_object_get(s, "text"));
	json_decref(st);
	return out;
}

static int count_with(const json_t *texts, const char *needle)
{
	const json_t *t;
	size_t i;
	int c = 0;

	json_array_foreach(texts, i, t)
	c += json_is_string(t) && strstr(json_string_value(t), needle) != NULL;
	return c;
}

/* What the conversation must have produced by the end. */
static const char *const wanted[] = {"progress report", "piece one", "piece two",
                                     "piece three"};
#define N_WANTED (sizeof wanted / sizeof *wanted)

static bool all_received(const json_t *texts)
{
	for (size_t i = 0; i < N_WANTED; i++)
		if (count_with(texts, wanted[i]) == 0)
			return false;
	return true;
}

/* ---- Slack ---- */

static const char slack_event[] =
    "{\"type\":\"event_callback\",\"team_id\":\"T0TEST\",\"api_app_id\":\"A0TEST\","
    "\"event_id\":\"EvMention1\",\"event\":{\"type\":\"app_mention\",\"channel\":"
    "\"C0ENUM\",\"user\":\"U0ENUM\",\"text\":\"<@UBOT> hello slack\","
    "\"ts\":\"1700003000.000100\"}}";

/* One delivery of the mention, as Slack makes it; true once answered 200. */
static bool slack_post(struct run *r)
{
	char ts[32], sig[SLACK_SIG_SIZE], hts[64], hsig[128], hretry[64];
	const char *h[] = {"Content-Type: application/json", hts, hsig,
	                   r->slack_attempts ? hretry : NULL, NULL};

	if (r->slack_acked)
		return true;
	snprintf(ts, sizeof ts, "%ld", (long)time(NULL));
	assert_int_equal(slack_sig_compute(SLACK_SECRET, ts, slack_event, strlen(slack_event), sig),
	                 0);
	snprintf(hts, sizeof hts, "X-Slack-Request-Timestamp: %s", ts);
	snprintf(hsig, sizeof hsig, "X-Slack-Signature: %s", sig);
	snprintf(hretry, sizeof hretry, "X-Slack-Retry-Num: %d",
	         r->slack_attempts > 3 ? 3 : r->slack_attempts);
	r->slack_attempts++;
	r->slack_acked = harness_http(r->d.port, "POST", "/slack/events/ev", h, slack_event, NULL) ==
	                 200;
	return r->slack_acked;
}

/* Posts in the mention's channel that hold the answer. */
static int slack_answers(struct run *r)
{
	struct buf resp;
	json_t *st, *p;
	size_t k;
	int n = 0;

	buf_init(&resp, 16 << 20);
	if (harness_http(r->slack.port, "GET", "/_test/state", NULL, NULL, &resp) == 200 &&
	    resp.data && (st = json_loads(resp.data, 0, NULL)) != NULL) {
		json_array_foreach(json_object_get(st, "posts"), k, p)
		{
			const char *t = json_string_value(json_object_get(p, "text"));
			const char *c = json_string_value(json_object_get(p, "channel"));

			n += t && c && strcmp(c, "C0ENUM") == 0 && strstr(t, "slack answer") != NULL;
		}
		json_decref(st);
	}
	buf_free(&resp);
	return n;
}

/* Heartbeat reports in the outbox: sent, and not sent yet (one of those may
 * have reached the chat as the gateway stopped). */
static void heartbeats(struct run *r, int *reports, int *unsent)
{
	char path[700];
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;

	*reports = *unsent = -1;
	snprintf(path, sizeof path, "%s/state.db", r->home);
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
	    sqlite3_prepare_v2(db,
	                       "SELECT count(*) FILTER (WHERE state = 'sent'),"
	                       " count(*) FILTER (WHERE state IN ('pending', 'claimed'))"
	                       " FROM outbox WHERE payload LIKE '%" HB_TEXT "%'",
	                       -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW) {
		*reports = sqlite3_column_int(st, 0);
		*unsent = sqlite3_column_int(st, 1);
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
}

static void run_setup(struct run *r, long n)
{
	const char *init[] = {"init", NULL};
	const char *args[] = {TOKEN, NULL};
	char path[1024], cfg[4096];

	memset(r, 0, sizeof *r);
	r->n = n;
	assert_int_equal(harness_tmpdir(r->home, sizeof r->home), 0);
	assert_int_equal(harness_peer_start(&r->fake, "fake_telegram.js", args), 0);
	assert_int_equal(harness_peer_start(&r->slack, "fake_slack.js", NULL), 0);
	snprintf(r->log, sizeof r->log, "%s/points.log", r->home);
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - id: main\n"
	         "    default: true\n"
	         "    model: s/x\n"
	         "    sandbox: full\n"
	         "    heartbeat: {every: 30m, target: telegram, account: bot, to: \"%d\"}\n"
	         "security: {owners: [\"telegram:%d\", \"slack:*\"]}\n"
	         "channels:\n"
	         "  slack:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    group_policy: open\n"
	         "    accounts:\n"
	         "      - {id: ev, bot_token: xoxb-enum, signing_secret: \"%s\", "
	         "api_base: \"http://127.0.0.1:%d/api/\"}\n"
	         "  telegram:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    accounts:\n"
	         "      - id: bot\n"
	         "        token: \"%s\"\n"
	         "        api_base: http://127.0.0.1:%d\n"
	         "        poll_timeout: 1s\n"
	         "        typing: false\n"
	         "        parse_mode: plain\n"
	         "        chunk_limit: 64\n"
	         "        rate_limit: {chat_per_minute: 600, chat_burst: 10}\n",
	         CHAT, CHAT, SLACK_SECRET, r->slack.port, TOKEN, r->fake.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", r->home);
	assert_int_equal(harness_write_file(path, cfg), 0);
	snprintf(path, sizeof path, "%s/script.yaml", r->home);
	assert_int_equal(
	    harness_write_file(path, "steps:\n"
	                             "  - match: \"ping\"\n"
	                             "    retry_on_error: true\n"
	                             "    tool_calls:\n"
	                             "      - {name: message, input: {text: \"progress report\"}}\n"
	                             "  - match: \"@never@\"\n"
	                             "    delay_ms: 1500\n"
	                             "    text: \"piece one of the answer, long enough to be its "
	                             "own\\n\\npiece two of the answer, as long as the first\\n\\n"
	                             "piece three, for {{user_text}}\"\n"
	                             "  - match: \"also\"\n"
	                             "    text: \"noted: {{user_text}}\"\n"
	                             "  - match: \"hello slack\"\n"
	                             "    text: \"slack answer\"\n"
	                             "  - match: \"HEARTBEAT\"\n"
	                             "    text: \"" HB_TEXT "\"\n"
	                             "  - text: \"reply to: {{user_text}}\"\n"),
	    0);
	assert_int_equal(harness_cli(r->home, NULL, init), 0);
	/* A heartbeat file with something to do, so each tick asks the model. */
	snprintf(path, sizeof path, "%s/workspaces/main/HEARTBEAT.md", r->home);
	assert_int_equal(harness_write_file(path, "- Report how the conversation goes.\n"), 0);
}

static void run_start(struct run *r, long crash_at)
{
	char at[32];
	int rc;

	if (crash_at > 0) {
		snprintf(at, sizeof at, "%ld", crash_at);
		setenv("SB_CRASH_AT", at, 1);
	}
	setenv("SB_CRASH_LOG", r->log, 1);
	/* a 30-minute heartbeat about once a second */
	setenv("SWITCHBOARD_TEST_CLOCK_RATE", "1800", 1);
	rc = harness_daemon_start(&r->d, r->home, NULL);
	unsetenv("SB_CRASH_AT");
	unsetenv("SB_CRASH_LOG");
	unsetenv("SWITCHBOARD_TEST_CLOCK_RATE");
	assert_int_equal(rc, 0);
}

static bool run_gone(struct run *r)
{
	int st;

	if (r->d.pid <= 0)
		return true;
	if (waitpid(r->d.pid, &st, WNOHANG) == r->d.pid) {
		if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
			enum_fail(r, "the gateway ended with status %d, not SIGKILL", st);
		r->d.pid = 0;
		return true;
	}
	return false;
}

static bool run_ready(struct run *r)
{
	int64_t end = mono_ms() + 20000;

	while (mono_ms() < end) {
		if (run_gone(r))
			return false;
		if (harness_http(r->d.port, "GET", "/readyz", NULL, NULL, NULL) == 200)
			return true;
		usleep(10000);
	}
	enum_fail(r, "the gateway did not become ready");
	return false;
}

static void run_recover(struct run *r)
{
	if (!run_gone(r)) {
		int code = harness_daemon_stop_expect(&r->d, SIGTERM, 20000, 128 + SIGKILL);

		if (code != 0 && code != 128 + SIGKILL)
			enum_fail(r, "the armed gateway's stop ended with %d", code);
		r->d.pid = 0;
		r->unreached = true;
	}
	run_start(r, 0);
	if (!run_ready(r)) {
		dump_log(&r->d);
		enum_fail(r, "the gateway did not start after the crash");
	}
	r->resent += harness_oai_metric(r->d.port, "switchboard_outbox_resent_after_crash_total");
}

/* Waits until the user has what pred wants (or the gateway died, or the
 * time is up); returns what the user has. */
static json_t *wait_for(struct run *r, const char *needle, int64_t ms, bool *died)
{
	int64_t end = mono_ms() + ms;
	json_t *t = NULL;
	long pending;

	*died = false;
	for (;;) {
		json_decref(t);
		t = received(r, &pending);
		if (needle ? count_with(t, needle) > 0 : (all_received(t) && pending == 0))
			return t;
		if (run_gone(r)) {
			*died = true;
			return t;
		}
		if (mono_ms() > end)
			return t;
		usleep(30000);
	}
}

/* User text blocks that are exactly text, in a loaded history. */
static int user_blocks(const json_t *messages, const char *text)
{
	const json_t *m, *b;
	size_t i, k;
	int c = 0;

	json_array_foreach(messages, i, m)
	{
		const char *role = json_string_value(json_object_get(m, "role"));

		if (!role || strcmp(role, "user") != 0)
			continue;
		json_array_foreach(json_object_get(m, "content"), k, b)
		{
			const char *t = json_string_value(json_object_get(b, "text"));

			c += t && strcmp(t, text) == 0;
		}
	}
	return c;
}

/* Every transcript loads paired; each of the user's messages is in the
 * history exactly once (none lost, none twice), wherever it went: a turn
 * of its own or steered into one. */
static void check_transcripts(struct run *r)
{
	static const char *const users[] = {"ping", "also this", "further", "hello slack"};
	int seen[4] = {0};
	char dir[700], path[1200], why[512];
	struct dirent *de;
	DIR *dd;

	snprintf(dir, sizeof dir, "%s/agents/main/sessions", r->home);
	dd = opendir(dir);
	if (!dd) {
		enum_fail(r, "no sessions directory");
		return;
	}
	while ((de = readdir(dd))) {
		struct transcript_loaded tl;

		if (!strstr(de->d_name, ".jsonl") || strstr(de->d_name, ".archive-"))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		if (transcript_load(path, &tl) != 0) {
			enum_fail(r, "%s does not load", path);
			continue;
		}
		if (msg_check_pairing(tl.messages, why, sizeof why) != 0)
			enum_fail(r, "pairing broken in %s: %s", path, why);
		for (size_t i = 0; i < 4; i++)
			seen[i] += user_blocks(tl.messages, users[i]);
		transcript_loaded_free(&tl);
	}
	closedir(dd);
	for (size_t i = 0; i < 4; i++)
		if (seen[i] != 1)
			enum_fail(r, "the user's \"%s\" is %d times in the history", users[i], seen[i]);
}

static long count_points(const char *path)
{
	struct buf b;
	long n = 0;

	buf_init(&b, 64 << 20);
	if (harness_read_file(path, &b) == 0 && b.data)
		for (char *p = b.data; *p;) {
			char *nl = strchr(p, '\n');

			n = strtol(p, NULL, 10);
			if (!nl)
				break;
			p = nl + 1;
		}
	buf_free(&b);
	return n;
}

static long run_one(long n)
{
	struct run r;
	json_t *texts = NULL, *seen;
	long points, pending = -1;
	bool died = false;
	int dups = 0, code;

	run_setup(&r, n);
	run_start(&r, n);
	if (run_ready(&r)) {
		user_says(&r, "ping");
		(void)slack_post(&r);
		texts = wait_for(&r, "progress report", 5000, &died);
		json_decref(texts);
		user_says(&r, "also this");
		if (!died)
			json_decref(wait_for(&r, NULL, 5000, &died));
	} else {
		/* Died before ready: the user writes all the same. */
		user_says(&r, "ping");
		user_says(&r, "also this");
	}
	if (n > 0) {
		run_recover(&r);
		if (r.unreached)
			fprintf(stderr, "note: SB_CRASH_AT=%ld was not reached by this run\n", n);
	}
	points = count_points(r.log);
	if (r.d.pid <= 0) {
		harness_peer_stop(&r.fake);
		harness_peer_stop(&r.slack);
		harness_rmrf(r.home);
		return points;
	}
	/* Slack delivers again what was not answered 200. */
	{
		int64_t end = mono_ms() + WAIT_MS;

		while (!slack_post(&r) && mono_ms() < end)
			usleep(200000);
		if (!r.slack_acked)
			enum_fail(&r, "the Slack mention was never acknowledged (%d tries)",
			          r.slack_attempts);
		while (slack_answers(&r) == 0 && mono_ms() < end)
			usleep(50000);
	}
	texts = wait_for(&r, NULL, WAIT_MS, &died);
	for (size_t i = 0; i < N_WANTED; i++)
		if (count_with(texts, wanted[i]) == 0) {
			char *dump = json_dumps(texts, JSON_INDENT(1));

			enum_fail(&r, "the user never received \"%s\"; they have:\n%s", wanted[i],
			          dump ? dump : "");
			free(dump);
		}
	/* Copies beyond one per text. */
	seen = json_object();
	{
		json_t *t;
		size_t i;

		json_array_foreach(texts, i, t)
		{
			const char *s = json_string_value(t);

			if (!s || strcmp(s, HB_TEXT) == 0)
				continue;
			if (json_object_get(seen, s))
				dups++;
			json_object_set_new(seen, s, json_true());
		}
	}
	json_decref(seen);
	{
		int sa = slack_answers(&r);

		if (sa < 1)
			enum_fail(&r, "the Slack mention was never answered");
		else
			dups += sa - 1;
	}
	if (dups > r.resent) {
		char *dump = json_dumps(texts, JSON_INDENT(1));

		enum_fail(&r,
		          "%d messages arrived twice, but switchboard_outbox_resent_after_crash_total "
		          "is %lld:\n%s",
		          dups, r.resent, dump ? dump : "");
		free(dump);
	}
	json_decref(texts);
	json_decref(received(&r, &pending));
	if (pending != 0)
		enum_fail(&r, "%ld updates were never confirmed", pending);
	/* The session answers a further message. */
	user_says(&r, "further");
	texts = wait_for(&r, "reply to: further", WAIT_MS, &died);
	if (count_with(texts, "reply to: further") != 1) {
		char *dump = json_dumps(texts, JSON_INDENT(1));

		enum_fail(&r, "\"further\" was answered %d times:\n%s",
		          count_with(texts, "reply to: further"), dump ? dump : "");
		free(dump);
	}
	json_decref(texts);
	if (harness_oai_wait_metric(r.d.port, "switchboard_inbox_depth", 0, 3000) != 0)
		enum_fail(&r, "inbox entries left: %lld",
		          harness_oai_metric(r.d.port, "switchboard_inbox_depth"));
	if (harness_oai_wait_metric(r.d.port, "switchboard_outbox_depth", 0, 3000) != 0)
		enum_fail(&r, "outbox entries left: %lld",
		          harness_oai_metric(r.d.port, "switchboard_outbox_depth"));
	code = harness_daemon_stop(&r.d, SIGTERM, 20000);
	if (code != 0) {
		dump_log(&r.d);
		enum_fail(&r, "the stop ended with %d", code);
	}
	/* Heartbeats (they tick to the end, so counted once it stopped): each
	 * report the outbox sent reached the chat, once, beyond the window. */
	{
		int reports, unsent, got;

		texts = received(&r, &pending);
		heartbeats(&r, &reports, &unsent);
		got = count_with(texts, HB_TEXT);
		json_decref(texts);
		if (n == 0)
			fprintf(stderr, "the run without a crash: %d heartbeat reports sent, %d received; "
			                "the Slack mention answered %d time(s)\n",
			        reports, got, slack_answers(&r));
		if (reports < 0 || got < reports)
			enum_fail(&r, "%d heartbeat reports were sent but the chat has %d", reports, got);
		else if (got - reports - unsent > r.resent - dups)
			enum_fail(&r, "%d heartbeat reports reached the chat for %d sent (%d unsent)", got,
			          reports, unsent);
	}
	check_transcripts(&r);
	harness_peer_stop(&r.fake);
	harness_peer_stop(&r.slack);
	if (failures && getenv("SB_KEEP_HOME"))
		fprintf(stderr, "home kept: %s\n", r.home);
	else
		harness_rmrf(r.home);
	return points;
}

static void test_every_point(void **state)
{
	const char *only = getenv("SB_ENUM_ONLY");
	int64_t t0 = mono_ms();
	long p;

	(void)state;
	if (only && *only) {
		run_one(strtol(only, NULL, 10));
		failures_repeat();
		assert_int_equal(failures, 0);
		return;
	}
	p = run_one(0);
	fprintf(stderr, "the conversation reaches %ld crash points\n", p);
	assert_int_equal(failures, 0);
	assert_true(p > 0);
	for (long n = 1; n <= p; n++)
		run_one(n);
	fprintf(stderr, "enumerated %ld crash points in %.1f s (%d failures)\n", p,
	        (double)(mono_ms() - t0) / 1000.0, failures);
	failures_repeat();
	assert_int_equal(failures, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_point),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
