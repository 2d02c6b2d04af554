/*
 * test_approvals.c - gate 3 end to end: the real daemon with a scripted
 * agent whose rules ask for approval before `touch`; control-plane clients
 * (tests/fakes/ws_client.js, a separate Node process) chat with it and
 * answer as the operator; the CLI lists and denies.
 *
 * 1. A chat asks the agent to make a file: the tool call waits; an operator
 *    client sees `approval.requested` (tool, scope, summary), approves it
 *    for the session, sees `approval.resolved`; the command runs and the
 *    reply arrives. The operator's configured channel (a webhook in
 *    callback mode, received by tests/fakes/callback_receiver.js) got the
 *    request as a message.
 * 2. A second chat in the same session runs a command of the same scope:
 *    no request is made (the scope is cached), the file appears.
 * 3. In another session the same command is asked for again; the operator
 *    denies it with `switchboard approvals deny`; the file never appears,
 *    the model gets the denial as a tool result and still answers.
 * 4. Two Telegram bots (two fakes): a call approved for the agent at user
 *    555's request through one bot is not asked again through it; user 555
 *    through the other bot is asked again.
 */
#include <errno.h>
#include <poll.h>
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
#include <dirent.h>
#include <jansson.h>

#include "agents/safety/sandbox.h"
#include "harness.h"

#define SCRIPT                                                                                     \
	"steps:\n"                                                                                 \
	"  - match: first\n"                                                                       \
	"    tool_calls:\n"                                                                        \
	"      - {name: bash, input: {command: \"touch one.txt\"}}\n"                              \
	"  - text: done first\n"                                                                   \
	"  - match: second\n"                                                                      \
	"    tool_calls:\n"                                                                        \
	"      - {name: bash, input: {command: \"touch two.txt && ls\"}}\n"                        \
	"  - text: done second\n"                                                                  \
	"  - match: third\n"                                                                       \
	"    tool_calls:\n"                                                                        \
	"      - {name: bash, input: {command: \"touch three.txt\"}}\n"                            \
	"  - text: done third\n"

#define HOOK_SECRET "whsec_c3dpdGNoYm9hcmQtdGVzdC1zZWNyZXQtMDEyMzQ1Njc4OQ=="
#define CB_SECRET "whsec_Y2FsbGJhY2stc2VjcmV0LWZvci1yZXBsaWVzLTAxMjM0NQ=="

struct fixture {
	char home[512];
	char token[256];
	char url[64];
	struct harness_daemon d;
	struct harness_peer receiver; /* the operator's channel: a webhook callback */
};

static struct fixture fx;

static void print_log(void)
{
	struct buf log;

	buf_init(&log, 64 << 20);
	harness_daemon_log(&fx.d, &log);
	fprintf(stderr, "daemon log:\n%s\n", log.data ? log.data : "");
	buf_free(&log);
}

struct client {
	pid_t pid;
	int fd;
};

static struct client ws_client_start(json_t *opts)
{
	char script[1024], *arg;
	struct client cl;
	int fds[2];

	json_object_set_new(opts, "url", json_string(fx.url));
	json_object_set_new(opts, "token", json_string(fx.token));
	if (!json_object_get(opts, "timeoutMs"))
		json_object_set_new(opts, "timeoutMs", json_integer(25000));
	arg = json_dumps(opts, JSON_COMPACT);
	json_decref(opts);
	assert_non_null(arg);
	snprintf(script, sizeof script, "%s/tests/fakes/ws_client.js", SB_SOURCE_DIR);
	assert_int_equal(pipe(fds), 0);
	cl.pid = fork();
	if (cl.pid == 0) {
		const char *argv[] = {"node", script, arg, NULL};

		dup2(fds[1], STDOUT_FILENO);
		close(fds[0]);
		close(fds[1]);
		execvp("node", (char *const *)argv);
		_exit(127);
	}
	free(arg);
	close(fds[1]);
	cl.fd = fds[0];
	return cl;
}

static json_t *ws_client_finish(struct client cl)
{
	struct buf out;
	json_t *r = NULL;
	long waited = 0;
	int st = 0;

	buf_init(&out, 16 << 20);
	for (;;) {
		struct pollfd pf = {.fd = cl.fd, .events = POLLIN};
		char chunk[4096];
		ssize_t n;

		if (poll(&pf, 1, 1000) == 0) {
			if ((waited += 1000) > 60000)
				break;
			continue;
		}
		n = read(cl.fd, chunk, sizeof chunk);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		buf_append(&out, chunk, (size_t)n);
	}
	close(cl.fd);
	if (waitpid(cl.pid, &st, WNOHANG) == 0) {
		kill(cl.pid, SIGKILL);
		waitpid(cl.pid, &st, 0);
	}
	if (out.data)
		r = json_loads(out.data, JSON_DISABLE_EOF_CHECK, NULL);
	if (!r || json_object_get(r, "fail")) {
		fprintf(stderr, "ws_client: %s\n", out.data ? out.data : "(no output)");
		print_log();
	}
	buf_free(&out);
	assert_non_null(r);
	assert_null(json_object_get(r, "fail"));
	return r;
}

static json_t *ws_client(json_t *opts)
{
	return ws_client_finish(ws_client_start(opts));
}

static const json_t *jget(const json_t *j, const char *path)
{
	char part[128];

	while (j && *path) {
		size_t n = strcspn(path, ".");
		char *end;
		long idx;

		snprintf(part, sizeof part, "%.*s", (int)n, path);
		idx = strtol(part, &end, 10);
		j = (json_is_array(j) && *end == '\0') ? json_array_get(j, (size_t)idx)
		                                       : json_object_get(j, part);
		path += n;
		if (*path == '.')
			path++;
	}
	return j;
}

static const char *jstr(const json_t *j, const char *path)
{
	const char *s = json_string_value(jget(j, path));

	return s ? s : "";
}

static bool ws_file(const char *name)
{
	char path[1024];

	snprintf(path, sizeof path, "%s/workspaces/main/%s", fx.home, name);
	return access(path, F_OK) == 0;
}

/* How many times the daemon logged that a call waits for approval. */
static int requests_logged(void)
{
	struct buf log;
	int n = 0;

	buf_init(&log, 64 << 20);
	harness_daemon_log(&fx.d, &log);
	for (const char *p = log.data; p && (p = strstr(p, "a tool call waits for approval")); p++)
		n++;
	buf_free(&log);
	return n;
}

static json_t *chat_opts(const char *session, const char *message, const char *key)
{
	return json_pack("{ss ss ss ss}", "scenario", "chat", "sessionKey", session, "message",
	                 message, "idempotencyKey", key);
}

static int setup(void **state)
{
	const char *init[] = {"init", NULL};
	char path[700], cfg[2048], why[512];
	const char *rargs[] = {CB_SECRET, NULL};
	struct buf tok;

	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_peer_start(&fx.receiver, "callback_receiver.js", rargs) != 0)
		return -1;
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	/* the approval flow does not depend on the sandbox; it is used where
	 * it works (test_sandbox checks it, and fails where bwrap is broken) */
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - id: main\n"
	         "    default: true\n"
	         "    model: s/echo\n"
	         "    sandbox: %s\n"
	         "    permissions:\n"
	         "      - {ask_commands: [touch]}\n"
	         "channels:\n"
	         "  webhook:\n"
	         "    hooks:\n"
	         "      - {name: ops, secret: \"%s\", mode: callback,\n"
	         "         callback_url: \"http://127.0.0.1:%d/cb\", callback_secret: \"%s\"}\n"
	         "security:\n"
	         "  approval_timeout: 30s\n"
	         "  approval_channel: webhook\n"
	         "  approval_account: ops\n"
	         "  approval_target: operator\n",
	         sandbox_probe(NULL, why, sizeof why) == 0 ? "workspace-write" : "full",
	         HOOK_SECRET, fx.receiver.port, CB_SECRET);
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/script.yaml", fx.home);
	if (harness_write_file(path, SCRIPT) != 0)
		return -1;
	if (harness_cli(fx.home, NULL, init) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/gateway.token", fx.home);
	buf_init(&tok, 4096);
	if (harness_read_file(path, &tok) != 0 || !tok.data) {
		buf_free(&tok);
		return -1;
	}
	snprintf(fx.token, sizeof fx.token, "%.*s", (int)strcspn(tok.data, "\r\n"), tok.data);
	buf_free(&tok);
	if (harness_daemon_start(&fx.d, fx.home, NULL) != 0 || harness_wait_ready(&fx.d, 20000))
		return -1;
	snprintf(fx.url, sizeof fx.url, "ws://127.0.0.1:%d/", fx.d.port);
	return 0;
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
	harness_peer_stop(&fx.receiver);
	harness_rmrf(fx.home);
	return code == 0 ? 0 : -1;
}

static void test_approve_for_the_session_then_cached(void **state)
{
	struct client chat, op;
	json_t *c, *o;

	(void)state;
	/* 1: the call waits; the operator approves for the session */
	op = ws_client_start(json_pack("{ss ss ss}", "scenario", "approver", "answer", "approve",
	                               "scope", "session"));
	chat = ws_client_start(chat_opts("main", "first: make a file", "run-first"));
	o = ws_client_finish(op);
	c = ws_client_finish(chat);
	assert_string_equal(jstr(o, "requested.tool"), "bash");
	assert_string_equal(jstr(o, "requested.scope"), "bash:cmd:touch");
	assert_string_equal(jstr(o, "requested.sessionKey"), "agent:main:main");
	assert_string_equal(jstr(o, "requested.channel"), "webchat");
	assert_non_null(strstr(jstr(o, "requested.summary"), "touch one.txt"));
	assert_true(json_is_true(jget(o, "answer.ok")));
	assert_string_equal(jstr(o, "answer.payload.decision"), "approved-session");
	assert_string_equal(jstr(o, "resolved.decision"), "approved-session");
	assert_int_equal(json_array_size(jget(o, "after.approvals")), 0);
	assert_string_equal(jstr(c, "final.state"), "final");
	assert_non_null(strstr(jstr(c, "final.message.content.0.text"), "done first"));
	assert_true(ws_file("one.txt"));
	assert_int_equal(requests_logged(), 1);
	json_decref(o);
	json_decref(c);
	/* the operator's channel got the request as a message */
	{
		json_t *got = NULL;
		const char *text = "";

		for (int i = 0; i < 100; i++) {
			struct buf body;

			buf_init(&body, 1 << 20);
			if (harness_http(fx.receiver.port, "GET", "/__received", NULL, NULL,
			                 &body) == 200 &&
			    body.data)
				got = json_loads(body.data, 0, NULL);
			buf_free(&body);
			if (json_array_size(json_object_get(got, "deliveries")))
				break;
			json_decref(got);
			got = NULL;
			usleep(50000);
		}
		assert_non_null(got);
		assert_int_equal(json_array_size(json_object_get(got, "deliveries")), 1);
		{
			const json_t *b = jget(got, "deliveries.0.body");
			json_t *parsed = json_is_string(b)
			                     ? json_loads(json_string_value(b), 0, NULL)
			                     : json_incref((json_t *)b);

			text = jstr(parsed, "text");
			assert_non_null(strstr(text, "Approval needed"));
			assert_non_null(strstr(text, "touch one.txt"));
			assert_non_null(strstr(text, "switchboard approvals approve"));
			assert_string_equal(jstr(parsed, "status"), "approval");
			json_decref(parsed);
		}
		json_decref(got);
	}

	/* 2: same session, same scope: runs without asking */
	c = ws_client(chat_opts("main", "second: another file", "run-second"));
	assert_string_equal(jstr(c, "final.state"), "final");
	assert_non_null(strstr(jstr(c, "final.message.content.0.text"), "done second"));
	assert_true(ws_file("two.txt"));
	assert_int_equal(requests_logged(), 1);
	json_decref(c);
}

static void test_deny_from_the_cli_in_another_session(void **state)
{
	struct client chat;
	struct buf out;
	json_t *list = NULL, *c;
	char id[64] = "";
	const char *ls[] = {"approvals", "list", "--json", "--url", fx.url, NULL};
	char sessions[1024];
	bool denial_seen = false;
	DIR *dir;
	struct dirent *de;

	(void)state;
	chat = ws_client_start(chat_opts("other", "third: one more", "run-third"));
	/* the request shows up in the CLI's list */
	for (int i = 0; i < 200 && !*id; i++) {
		buf_init(&out, 1 << 20);
		if (harness_cli(fx.home, &out, ls) == 0 && out.data) {
			list = json_loads(out.data, 0, NULL);
			if (json_array_size(json_object_get(list, "approvals")) == 1)
				snprintf(id, sizeof id, "%s", jstr(list, "approvals.0.id"));
			if (*id) {
				assert_string_equal(jstr(list, "approvals.0.sessionKey"),
				                    "agent:main:other");
				assert_string_equal(jstr(list, "approvals.0.scope"),
				                    "bash:cmd:touch");
			}
			json_decref(list);
		}
		buf_free(&out);
		if (!*id)
			usleep(100000);
	}
	assert_true(*id);
	{
		const char *deny[] = {"approvals", "deny", id, "--url", fx.url, NULL};

		buf_init(&out, 1 << 20);
		assert_int_equal(harness_cli(fx.home, &out, deny), 0);
		assert_non_null(strstr(out.data, "denied"));
		buf_free(&out);
		/* answered already */
		buf_init(&out, 1 << 20);
		assert_int_equal(harness_cli(fx.home, &out, deny), 1);
		buf_free(&out);
	}
	c = ws_client_finish(chat);
	/* the loop did not abort: the model got the denial and answered */
	assert_string_equal(jstr(c, "final.state"), "final");
	assert_non_null(strstr(jstr(c, "final.message.content.0.text"), "done third"));
	json_decref(c);
	assert_false(ws_file("three.txt"));
	assert_int_equal(requests_logged(), 2);
	/* the denial is in the session's transcript, as a tool result */
	snprintf(sessions, sizeof sessions, "%s/agents/main/sessions", fx.home);
	dir = opendir(sessions);
	assert_non_null(dir);
	while ((de = readdir(dir))) {
		char path[2048];
		struct buf t;

		if (!strstr(de->d_name, ".jsonl"))
			continue;
		snprintf(path, sizeof path, "%s/%s", sessions, de->d_name);
		buf_init(&t, 16 << 20);
		if (harness_read_file(path, &t) == 0 && t.data &&
		    strstr(t.data, "permission denied: denied by the operator"))
			denial_seen = true;
		buf_free(&t);
	}
	closedir(dir);
	assert_true(denial_seen);
}

/* ---- the Telegram sender is told that the call waits ---- */

static json_t *tg_ctl(int port, const char *method, const char *path, json_t *body_take)
{
	static const char *const h[] = {"Content-Type: application/json", NULL};
	char *text = body_take ? json_dumps(body_take, JSON_COMPACT) : NULL;
	struct buf resp;
	json_t *out = NULL;

	json_decref(body_take);
	buf_init(&resp, 16 << 20);
	if (harness_http(port, method, path, h, text, &resp) == 200 && resp.data)
		out = json_loads(resp.data, 0, NULL);
	free(text);
	buf_free(&resp);
	return out;
}

/* Index of the first accepted send to chat 555 holding needle, or -1. */
static int tg_sent_index(int port, const char *needle)
{
	json_t *st = tg_ctl(port, "GET", "/_ctl/state", NULL), *m;
	size_t i;
	int at = -1, k = 0;

	json_array_foreach(json_object_get(st, "sent"), i, m)
	{
		const char *t = json_string_value(json_object_get(m, "text"));

		if (json_integer_value(json_object_get(m, "outcome")) != 200 ||
		    json_integer_value(json_object_get(m, "chat_id")) != 555)
			continue;
		if (at < 0 && t && strstr(t, needle))
			at = k;
		k++;
	}
	json_decref(st);
	return at;
}

static void test_telegram_sender_told_it_waits(void **state)
{
	const char *init[] = {"init", NULL};
	const char *targs[] = {"123456:TEST-token", NULL};
	const char *ls[] = {"approvals", "list", "--json", NULL};
	struct harness_peer tg;
	struct harness_daemon d;
	char home[512], path[700], cfg[2048], id[64] = "";
	struct buf out;
	int wait_at = -1, done_at = -1;
	json_t *r;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_peer_start(&tg, "fake_telegram.js", targs), 0);
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - id: main\n"
	         "    default: true\n"
	         "    model: s/x\n"
	         "    sandbox: full\n"
	         "    permissions:\n"
	         "      - {ask_commands: [touch]}\n"
	         "security: {approval_timeout: 60s}\n"
	         "channels:\n"
	         "  telegram:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    accounts:\n"
	         "      - {id: bot, token: \"123456:TEST-token\", api_base: "
	         "\"http://127.0.0.1:%d\", poll_timeout: 1s, typing: false, parse_mode: plain}\n",
	         tg.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	assert_int_equal(harness_write_file(path, cfg), 0);
	snprintf(path, sizeof path, "%s/script.yaml", home);
	assert_int_equal(harness_write_file(path, "steps:\n"
	                                          "  - match: \"make the file\"\n"
	                                          "    tool_calls:\n"
	                                          "      - {name: bash, input: {command: "
	                                          "\"touch made.txt\"}}\n"
	                                          "  - match: \"@never@\"\n"
	                                          "    text: \"made it\"\n"),
	                 0);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	r = tg_ctl(tg.port, "POST", "/_ctl/update",
	           json_pack("{s{sIs{sIsbss}s{sIss}sIss}}", "message", "message_id", (json_int_t)900,
	                     "from", "id", (json_int_t)555, "is_bot", 0, "first_name", "Ana",
	                     "chat", "id", (json_int_t)555, "type", "private", "date",
	                     (json_int_t)time(NULL), "text", "please make the file"));
	json_decref(r);
	/* The user hears that it waits, before anyone answered. */
	for (int i = 0; i < 200 && wait_at < 0; i++) {
		wait_at = tg_sent_index(tg.port, "Waiting for the operator's approval to run bash");
		if (wait_at < 0)
			usleep(50000);
	}
	/* The operator approves it from the CLI (the home's gateway, found by
	 * its runtime file). */
	for (int i = 0; i < 100 && !*id; i++) {
		json_t *list;

		buf_init(&out, 1 << 20);
		if (harness_cli(home, &out, ls) == 0 && out.data &&
		    (list = json_loads(out.data, 0, NULL)) != NULL) {
			const char *v = json_string_value(json_object_get(
			    json_array_get(json_object_get(list, "approvals"), 0), "id"));

			if (v)
				snprintf(id, sizeof id, "%s", v);
			json_decref(list);
		}
		buf_free(&out);
		if (!*id)
			usleep(100000);
	}
	if (*id) {
		const char *approve[] = {"approvals", "approve", id, NULL};

		buf_init(&out, 1 << 20);
		(void)harness_cli(home, &out, approve);
		buf_free(&out);
	}
	for (int i = 0; i < 200 && done_at < 0; i++) {
		done_at = tg_sent_index(tg.port, "made it");
		if (done_at < 0)
			usleep(50000);
	}
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	harness_peer_stop(&tg);
	if (wait_at < 0 || !*id || done_at < 0 || wait_at > done_at)
		fail_msg("wait notice at %d, approval \"%s\", reply at %d", wait_at, id, done_at);
	harness_rmrf(home);
}

/* How many accepted sends to chat 555 hold needle. */
static int tg_sent_count(int port, const char *needle)
{
	json_t *st = tg_ctl(port, "GET", "/_ctl/state", NULL), *m;
	size_t i;
	int n = 0;

	json_array_foreach(json_object_get(st, "sent"), i, m)
	{
		const char *t = json_string_value(json_object_get(m, "text"));

		n += json_integer_value(json_object_get(m, "outcome")) == 200 &&
		     json_integer_value(json_object_get(m, "chat_id")) == 555 && t &&
		     strstr(t, needle);
	}
	json_decref(st);
	return n;
}

/* A private message from user 555 to the bot behind the fake at port. */
static void tg_say(int port, json_int_t message_id, const char *text)
{
	json_decref(tg_ctl(port, "POST", "/_ctl/update",
	                   json_pack("{s{sIs{sIsbss}s{sIss}sIss}}", "message", "message_id",
	                             message_id, "from", "id", (json_int_t)555, "is_bot", 0,
	                             "first_name", "Ana", "chat", "id", (json_int_t)555, "type",
	                             "private", "date", (json_int_t)time(NULL), "text", text)));
}

/* Waits (up to 10 s) for a send to 555 holding needle; its index or -1. */
static int tg_wait_sent(int port, const char *needle)
{
	int at = -1;

	for (int i = 0; i < 200 && at < 0; i++) {
		at = tg_sent_index(port, needle);
		if (at < 0)
			usleep(50000);
	}
	return at;
}

/* The id of the oldest pending approval (up to 10 s), into id ("" when
 * none came), and its sender. */
static void first_pending(const char *home, char *id, size_t size, char *sender, size_t ssize)
{
	const char *ls[] = {"approvals", "list", "--json", NULL};
	struct buf out;

	id[0] = sender[0] = '\0';
	for (int i = 0; i < 100 && !*id; i++) {
		json_t *list, *a;

		buf_init(&out, 1 << 20);
		if (harness_cli(home, &out, ls) == 0 && out.data &&
		    (list = json_loads(out.data, 0, NULL)) != NULL) {
			a = json_array_get(json_object_get(list, "approvals"), 0);
			if (json_string_value(json_object_get(a, "id"))) {
				snprintf(id, size, "%s",
				         json_string_value(json_object_get(a, "id")));
				snprintf(sender, ssize, "%s",
				         json_string_value(json_object_get(a, "sender"))
				             ? json_string_value(json_object_get(a, "sender"))
				             : "");
			}
			json_decref(list);
		}
		buf_free(&out);
		if (!*id)
			usleep(100000);
	}
}

/* An approval for the agent at user 555's request, through one Telegram
 * bot, covers 555's later calls through that bot; the same user id
 * through a second bot of the gateway is another person, and is asked
 * again: they hear that it waits, and the operator gets a request. */
static void test_agent_scope_is_per_account(void **state)
{
	const char *init[] = {"init", NULL};
	const char *targs1[] = {"111111:TEST-one", NULL}, *targs2[] = {"222222:TEST-two", NULL};
	struct harness_peer one, two;
	struct harness_daemon d;
	char home[512], path[700], cfg[2048], id[64], sender[64];
	struct buf out;
	int made_one, made_two, asked_one, wait_b, made_b;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_peer_start(&one, "fake_telegram.js", targs1), 0);
	assert_int_equal(harness_peer_start(&two, "fake_telegram.js", targs2), 0);
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - id: main\n"
	         "    default: true\n"
	         "    model: s/x\n"
	         "    sandbox: full\n"
	         "    permissions:\n"
	         "      - {ask_commands: [touch]}\n"
	         "security: {approval_timeout: 60s}\n"
	         "channels:\n"
	         "  telegram:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    accounts:\n"
	         "      - {id: one, token: \"111111:TEST-one\", api_base: "
	         "\"http://127.0.0.1:%d\", poll_timeout: 1s, typing: false, parse_mode: plain}\n"
	         "      - {id: two, token: \"222222:TEST-two\", api_base: "
	         "\"http://127.0.0.1:%d\", poll_timeout: 1s, typing: false, parse_mode: plain}\n",
	         one.port, two.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	assert_int_equal(harness_write_file(path, cfg), 0);
	snprintf(path, sizeof path, "%s/script.yaml", home);
	assert_int_equal(harness_write_file(
	                     path, "steps:\n"
	                           "  - match: \"make a\"\n"
	                           "    tool_calls: [{name: bash, input: {command: \"touch a\"}}]\n"
	                           "  - {match: \"@never@\", text: \"made a\"}\n"
	                           "  - match: \"make b\"\n"
	                           "    tool_calls: [{name: bash, input: {command: \"touch b\"}}]\n"
	                           "  - {match: \"@never@\", text: \"made b\"}\n"),
	                 0);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);

	/* through bot one: asked, approved for the agent */
	tg_say(one.port, 900, "please make a");
	first_pending(home, id, sizeof id, sender, sizeof sender);
	if (*id) {
		const char *approve[] = {"approvals", "approve", id, "--scope", "agent", NULL};

		buf_init(&out, 1 << 20);
		(void)harness_cli(home, &out, approve);
		buf_free(&out);
	}
	made_one = tg_wait_sent(one.port, "made a");
	/* through bot one again: not asked */
	tg_say(one.port, 901, "please make b");
	made_two = tg_wait_sent(one.port, "made b");
	asked_one = tg_sent_count(one.port, "Waiting for the operator's approval");
	/* the same user id through bot two: asked again */
	tg_say(two.port, 902, "please make b");
	wait_b = tg_wait_sent(two.port, "Waiting for the operator's approval to run bash");
	first_pending(home, id, sizeof id, sender, sizeof sender);
	made_b = tg_sent_index(two.port, "made b");
	if (*id) {
		const char *deny[] = {"approvals", "deny", id, NULL};

		buf_init(&out, 1 << 20);
		(void)harness_cli(home, &out, deny);
		buf_free(&out);
	}
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	harness_peer_stop(&one);
	harness_peer_stop(&two);
	if (made_one < 0 || made_two < 0)
		fail_msg("through bot one: reply a at %d, reply b at %d", made_one, made_two);
	/* one wait notice on bot one: for the first call only */
	if (asked_one != 1)
		fail_msg("%d wait notices through bot one, want 1 (the second call was covered)",
		         asked_one);
	if (wait_b < 0 || !*id || strcmp(sender, "555") != 0 || made_b >= 0)
		fail_msg("user 555 through bot two was not asked again: wait notice at %d, "
		         "approval \"%s\" of \"%s\", reply before an answer at %d",
		         wait_b, id, sender, made_b);
	harness_rmrf(home);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_approve_for_the_session_then_cached),
	    cmocka_unit_test(test_deny_from_the_cli_in_another_session),
	    cmocka_unit_test(test_telegram_sender_told_it_waits),
	    cmocka_unit_test(test_agent_scope_is_per_account),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
