/*
 * test_crash_enum.c - every crash point a fixed conversation mix reaches,
 * enumerated, not sampled (gateway/core/crash.h).
 *
 * The mix, driven from the senders' side:
 *  - a webhook in sync mode (bearer, Idempotency-Key): the reply is the answer;
 *  - a webhook in callback mode: the reply goes to tests/fakes/
 *    callback_receiver.js, verified there with npm `standardwebhooks`;
 *  - an OpenAI chat completion with an Idempotency-Key;
 *  - an OpenAI turn with a tool call (bash), answered after the result.
 * A first run without a crash counts the points the mix reaches (P, from
 * SB_CRASH_LOG). Then for each N in 1..P: the gateway starts with
 * SB_CRASH_AT=N on a fresh home, the mix is driven, and when the gateway dies
 * it is started again without SB_CRASH_AT; every sender retries what was not
 * acknowledged, under the same key, as real senders do. Then, per N:
 *  - every message is answered: the sync sender and the OpenAI client get
 *    their reply, the callback receiver got one reply per message (a second
 *    delivery under the same webhook-id is the documented window, counted
 *    apart and checked against switchboard_outbox_resent_after_crash_total);
 *  - every transcript loads with every tool_use paired, no user text twice;
 *  - the session answers one further message;
 *  - no inbox entry or outbox entry is left (switchboard_inbox_depth,
 *    switchboard_outbox_depth), and the stop is clean (exit 0).
 * It prints "enumerated P crash points in S s".
 *
 * SB_ENUM_ONLY=N runs that N alone (to replay a failure).
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

#include "agents/message.h"
#include "agents/transcript.h"
#include "harness.h"
#include "harness_oai.h"

#define CB_SECRET "whsec_Y2FsbGJhY2stc2VjcmV0LWZvci1yZXBsaWVzLTAxMjM0NQ=="
#define HOOK_TOKEN "enum-bearer-token-0123456789"
#define ENUM_RETRY_MS 20000

struct enum_fx {
	struct harness_peer receiver;
	char token[256];
	int failures;
};

static struct enum_fx fx;

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct run {
	long n; /* SB_CRASH_AT (0: none) */
	char home[512];
	char log[700];
	struct harness_daemon d;
	bool died;
	bool unreached; /* the mix did not reach SB_CRASH_AT */
	int starts;
	long long resent;
};

static void dump_log(const struct harness_daemon *d)
{
	struct buf log;

	buf_init(&log, 64 << 20);
	harness_daemon_log(d, &log);
	fprintf(stderr, "gateway log:\n%s\n", log.data ? log.data : "");
	buf_free(&log);
}

/* A failure of one N: reported, counted, the enumeration goes on. */
static void enum_fail(struct run *r, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "FAIL at SB_CRASH_AT=%ld: ", r->n);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fx.failures++;
}

static void run_setup(struct run *r, long n)
{
	const char *init[] = {"init", NULL};
	char path[1024], cfg[4096];

	memset(r, 0, sizeof *r);
	r->n = n;
	assert_int_equal(harness_tmpdir(r->home, sizeof r->home), 0);
	snprintf(r->log, sizeof r->log, "%s/points.log", r->home);
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/x, queue_mode: followup, sandbox: full}\n"
	         "openai_api: {enabled: true, sync_timeout: 20s}\n"
	         "channels:\n"
	         "  webhook:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    hooks:\n"
	         "      - {name: sync, verify: bearer, secret: \"%s\", mode: sync, "
	         "sync_timeout: 20s}\n"
	         "      - {name: cb, verify: bearer, secret: \"%s\", mode: callback, "
	         "callback_url: \"http://127.0.0.1:%d/replies\", callback_secret: \"%s\", "
	         "callback_timeout: 5s}\n",
	         HOOK_TOKEN, HOOK_TOKEN, fx.receiver.port, CB_SECRET);
	snprintf(path, sizeof path, "%s/switchboard.yaml", r->home);
	assert_int_equal(harness_write_file(path, cfg), 0);
	snprintf(path, sizeof path, "%s/script.yaml", r->home);
	assert_int_equal(harness_write_file(path, "steps:\n"
	                                          "  - match: \"use the tool\"\n"
	                                          "    tool_calls:\n"
	                                          "      - {name: bash, input: {command: \"echo tooled\"}}\n"
	                                          "  - match: \"use the tool\"\n"
	                                          "    text: \"tool done\"\n"
	                                          "  - text: \"reply to: {{user_text}}\"\n"),
	                 0);
	assert_int_equal(harness_cli(r->home, NULL, init), 0);
	if (!fx.token[0] || 1)
		assert_int_equal(harness_oai_token(r->home, fx.token, sizeof fx.token), 0);
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
	rc = harness_daemon_start(&r->d, r->home, NULL);
	unsetenv("SB_CRASH_AT");
	unsetenv("SB_CRASH_LOG");
	assert_int_equal(rc, 0);
	r->starts++;
}

/* Whether the gateway is gone (it killed itself); reaps it. */
static bool run_gone(struct run *r)
{
	int st;

	if (r->d.pid <= 0)
		return true;
	if (waitpid(r->d.pid, &st, WNOHANG) == r->d.pid) {
		if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
			enum_fail(r, "the gateway ended with status %d, not SIGKILL", st);
		r->d.pid = 0;
		r->died = true;
		return true;
	}
	return false;
}

/* Waits for ready; false when the gateway died first. */
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

/* After a crash: start again without SB_CRASH_AT. */
static void run_recover(struct run *r)
{
	if (!run_gone(r)) {
		/* Still up: this N was not reached by the mix (the count of a
		 * run varies with timing: batched commits, the order of the
		 * senders). The checks run unarmed: it is stopped (its own stop
		 * may reach N, which is a crash like any other) and started
		 * again without SB_CRASH_AT. */
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

/* ---- the senders ---- */

static long hook_post(struct run *r, const char *hook, const char *key, const char *text,
                      struct buf *resp)
{
	char auth[128], idem[128], body[256];
	const char *h[] = {auth, idem, "Content-Type: application/json", NULL};

	snprintf(auth, sizeof auth, "Authorization: Bearer %s", HOOK_TOKEN);
	snprintf(idem, sizeof idem, "Idempotency-Key: %s", key);
	snprintf(body, sizeof body, "{\"text\":\"%s\",\"sender\":\"s-%s\"}", text, key);
	char path[64];
	snprintf(path, sizeof path, "/hooks/%s", hook);
	return harness_http(r->d.port, "POST", path, h, body, resp);
}

static long oai_post(struct run *r, const char *user, const char *key, const char *text,
                     char **reply)
{
	char auth[400], idem[128], *body;
	const char *h[] = {auth, "Content-Type: application/json", key ? idem : NULL, NULL};
	struct buf resp;
	json_t *req, *res;
	long status;

	*reply = NULL;
	snprintf(auth, sizeof auth, "Authorization: Bearer %s", fx.token);
	snprintf(idem, sizeof idem, "Idempotency-Key: %s", key ? key : "");
	req = json_pack("{sssss[{ssss}]}", "model", "switchboard/main", "user", user, "messages",
	                "role", "user", "content", text);
	body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	buf_init(&resp, 1 << 20);
	status = harness_http(r->d.port, "POST", "/v1/chat/completions", h, body, &resp);
	free(body);
	res = resp.data ? json_loads(resp.data, 0, NULL) : NULL;
	if (status == 200) {
		const char *c = json_string_value(json_object_get(
		    json_object_get(json_array_get(json_object_get(res, "choices"), 0), "message"),
		    "content"));

		*reply = c ? strdup(c) : NULL;
	}
	json_decref(res);
	buf_free(&resp);
	return status;
}

/* The mix's messages, each tried until its sender has what it waits for
 * (or, while the crash is armed, until the gateway dies). */
enum { M_SYNC, M_CB, M_OAI, M_TOOL, M_COUNT };

struct outcome {
	bool acked[M_COUNT];
	char *reply[M_COUNT];
};

static const char *const m_text[M_COUNT] = {"sync one", "callback one", "oai one",
                                             "use the tool"};
/* What the reply holds (webhook text reaches the model marked untrusted). */
static const char *const m_want[M_COUNT] = {"sync one", NULL, "reply to: oai one",
                                             "tool done"};

/* One attempt of message i; true when its sender is satisfied. */
static bool send_one(struct run *r, int i, struct outcome *o)
{
	char key[64];
	long st;

	snprintf(key, sizeof key, "enum-%ld-%d", r->n, i);
	if (i == M_SYNC || i == M_CB) {
		struct buf resp;
		json_t *j;
		bool ok = false;

		buf_init(&resp, 1 << 20);
		st = hook_post(r, i == M_SYNC ? "sync" : "cb", key, m_text[i], &resp);
		j = resp.data ? json_loads(resp.data, 0, NULL) : NULL;
		if (i == M_CB && (st == 200 || st == 202)) {
			ok = true;
		} else if (i == M_SYNC && st == 200 && json_string_value(json_object_get(j, "reply"))) {
			free(o->reply[i]);
			o->reply[i] = strdup(json_string_value(json_object_get(j, "reply")));
			ok = true;
		} else if (i == M_SYNC && st == 202) {
			/* Stored, not answered in time (a redelivery after a
			 * crash): the sender asks again under its key. */
			o->acked[i] = true;
		}
		json_decref(j);
		buf_free(&resp);
		if (ok)
			o->acked[i] = true;
		return ok;
	}
	{
		char *reply = NULL;

		st = oai_post(r, i == M_TOOL ? "u-tool" : "u-oai", key, m_text[i], &reply);
		if (st == 200 && reply) {
			free(o->reply[i]);
			o->reply[i] = reply;
			o->acked[i] = true;
			return true;
		}
		free(reply);
		return false;
	}
}

/* How many replies the callback receiver holds for this N's callback
 * message: distinct webhook-ids, and deliveries beyond one per id. */
static void receiver_count(struct run *r, int *ids, int *again)
{
	struct buf resp;
	json_t *j, *dl, *d, *seen = json_object();
	char want[128];
	size_t k;

	*ids = *again = 0;
	snprintf(want, sizeof want, "reply to: %s", m_text[M_CB]);
	buf_init(&resp, 16 << 20);
	if (harness_http(fx.receiver.port, "GET", "/__received", NULL, NULL, &resp) != 200) {
		buf_free(&resp);
		json_decref(seen);
		return;
	}
	j = json_loads(resp.data ? resp.data : "", 0, NULL);
	dl = json_object_get(j, "deliveries");
	json_array_foreach(dl, k, d)
	{
		const char *id = json_string_value(json_object_get(d, "id"));
		json_t *body = json_object_get(d, "body");
		const char *b = json_is_string(body) ? json_string_value(body) : NULL;
		char *dump = NULL;
		char mark[64];

		if (!b && body)
			b = dump = json_dumps(body, JSON_COMPACT);
		snprintf(mark, sizeof mark, "enum-%ld-%d\"", r->n, M_CB);
		/* This N's message: its event id is in the body. */
		if (id && b && strstr(b, mark) && json_integer_value(json_object_get(d, "status")) / 100 == 2) {
			if (json_object_get(seen, id))
				(*again)++;
			else
				(*ids)++;
			json_object_set_new(seen, id, json_true());
		}
		free(dump);
	}
	json_decref(j);
	json_decref(seen);
	buf_free(&resp);
}

/* Every transcript of main loads paired, no user text twice. */
static void check_transcripts(struct run *r)
{
	char dir[700], path[1200], why[512];
	struct dirent *de;
	DIR *dd;

	snprintf(dir, sizeof dir, "%s/agents/main/sessions", r->home);
	dd = opendir(dir);
	if (!dd)
		return;
	while ((de = readdir(dd))) {
		struct transcript_loaded tl;
		struct buf data;

		if (!strstr(de->d_name, ".jsonl") || strstr(de->d_name, ".archive-"))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		if (transcript_load(path, &tl) != 0) {
			enum_fail(r, "%s does not load", path);
			continue;
		}
		if (msg_check_pairing(tl.messages, why, sizeof why) != 0)
			enum_fail(r, "pairing broken in %s: %s", path, why);
		transcript_loaded_free(&tl);
		buf_init(&data, 64 << 20);
		if (harness_read_file(path, &data) == 0) {
			for (int i = 0; i < M_COUNT; i++) {
				char needle[128];
				int c;

				snprintf(needle, sizeof needle, "%s\"", m_text[i]);
				c = harness_count_user_texts(data.data ? data.data : "", needle);
				if (c > 1)
					enum_fail(r, "the user turn \"%s\" is %d times in %s", m_text[i], c,
					          path);
			}
		}
		buf_free(&data);
	}
	closedir(dd);
}

/* Points the log holds (the last number). */
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

/* One N (0: the count run). Returns the points the log holds. */
static long run_one(long n)
{
	struct run r;
	struct outcome o;
	int64_t end;
	bool done[M_COUNT] = {false};
	long points;
	int code, ids = 0, again = 0;

	memset(&o, 0, sizeof o);
	run_setup(&r, n);
	run_start(&r, n);
	/* Armed: drive the mix once, in order, until the gateway dies. */
	if (run_ready(&r)) {
		for (int i = 0; i < M_COUNT && !run_gone(&r); i++)
			done[i] = send_one(&r, i, &o);
		/* Let the callback reply and the outbox finish (or die). */
		end = mono_ms() + 3000;
		while (mono_ms() < end && !run_gone(&r)) {
			receiver_count(&r, &ids, &again);
			if (ids >= 1 && harness_oai_metric(r.d.port, "switchboard_outbox_depth") == 0 &&
			    harness_oai_metric(r.d.port, "switchboard_inbox_depth") == 0)
				break;
			usleep(20000);
		}
	}
	if (n > 0) {
		/* The points reached before the crash end here. */
		run_recover(&r);
		if (r.unreached)
			fprintf(stderr, "note: SB_CRASH_AT=%ld was not reached by this run\n", n);
	}
	points = count_points(r.log);
	if (r.d.pid <= 0) {
		harness_rmrf(r.home);
		return points;
	}
	/* Every sender retries, under its key, until satisfied. */
	end = mono_ms() + ENUM_RETRY_MS;
	for (int i = 0; i < M_COUNT; i++)
		while (!done[i] && mono_ms() < end) {
			done[i] = send_one(&r, i, &o);
			if (!done[i])
				usleep(100000);
		}
	end = mono_ms() + ENUM_RETRY_MS;
	for (;;) {
		receiver_count(&r, &ids, &again);
		if ((ids >= 1 && harness_oai_metric(r.d.port, "switchboard_outbox_depth") == 0 &&
		     harness_oai_metric(r.d.port, "switchboard_inbox_depth") == 0) ||
		    mono_ms() > end)
			break;
		usleep(50000);
	}
	/* From the receivers' side. */
	for (int i = 0; i < M_COUNT; i++) {
		if (!done[i])
			enum_fail(&r, "\"%s\" was never answered to its sender", m_text[i]);
		else if (m_want[i] && (!o.reply[i] || !strstr(o.reply[i], m_want[i])))
			enum_fail(&r, "\"%s\" was answered \"%s\"", m_text[i],
			          o.reply[i] ? o.reply[i] : "(nothing)");
	}
	if (ids != 1)
		enum_fail(&r, "the callback receiver got %d distinct replies for \"%s\"", ids,
		          m_text[M_CB]);
	if (again > r.resent)
		enum_fail(&r, "the callback reply arrived %d more times under its id, "
		              "but switchboard_outbox_resent_after_crash_total is %lld",
		          again, r.resent);
	/* The session answers one further message. */
	{
		char *reply = NULL;

		if (oai_post(&r, "u-oai", NULL, "further", &reply) != 200 || !reply ||
		    strcmp(reply, "reply to: further") != 0)
			enum_fail(&r, "a further message was answered \"%s\"",
			          reply ? reply : "(nothing)");
		free(reply);
	}
	/* No inbox or outbox entry left behind. */
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
	check_transcripts(&r);
	for (int i = 0; i < M_COUNT; i++)
		free(o.reply[i]);
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
		assert_int_equal(fx.failures, 0);
		return;
	}
	p = run_one(0);
	fprintf(stderr, "the mix reaches %ld crash points\n", p);
	assert_int_equal(fx.failures, 0);
	assert_true(p > 0);
	for (long n = 1; n <= p; n++)
		run_one(n);
	fprintf(stderr, "enumerated %ld crash points in %.1f s (%d failures)\n", p,
	        (double)(mono_ms() - t0) / 1000.0, fx.failures);
	assert_int_equal(fx.failures, 0);
}

static int setup(void **state)
{
	const char *rargs[] = {CB_SECRET, NULL};

	(void)state;
	memset(&fx, 0, sizeof fx);
	return harness_peer_start(&fx.receiver, "callback_receiver.js", rargs);
}

static int teardown(void **state)
{
	(void)state;
	harness_peer_stop(&fx.receiver);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_point),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
