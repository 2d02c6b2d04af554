/*
 * test_control.c - the WebSocket control plane end to end: the real daemon
 * with a scripted agent, driven by tests/fakes/ws_client.js (Node, the npm
 * `ws` package, Node's own Ed25519) and by the CLI verbs.
 *
 * Covered: the handshake with the gateway token (protocols 3 and 4, tick
 * events); chat.send with streamed deltas and the final reply, replayed
 * idempotency keys; the agent method's two answers with tool events;
 * chat.history; device pairing (pending -> `switchboard devices approve` ->
 * connect with the signature, then with the device token -> revoke);
 * refusals (bad token, bad signature, missing scope, a frame before
 * connect, an oversized or malformed frame, no common protocol); the CLI's
 * status, send, sessions and devices; and, last, the lockout after
 * repeated failures (it locks 127.0.0.1 out for a while).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
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
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "harness.h"
#include "harness_oai.h"

#define SCRIPT                                                                                     \
	"steps:\n"                                                                                 \
	"  - match: use a tool\n"                                                                  \
	"    tool_calls:\n"                                                                        \
	"      - name: read\n"                                                                     \
	"        input: {path: notes.txt}\n"                                                       \
	"  - text: \"Scripted reply: {{user_text}}\"\n"

#define CONFIG                                                                                     \
	"gateway:\n"                                                                               \
	"  control: {tick_interval: 1s, handshake_timeout: 1s, max_payload: 64KiB,\n"              \
	"            max_buffered: 64KiB, auth_failures: 6, auth_window: 60s, lockout: 3s}\n"      \
	"providers:\n"                                                                             \
	"  - {id: s, api: scripted, script: script.yaml}\n"                                        \
	"agents:\n"                                                                                \
	"  - {id: main, default: true, model: s/echo}\n"                                           \
	"  - {id: ops, model: s/echo}\n"

struct fixture {
	char home[512];
	char token[256];
	char url[64];
	struct harness_daemon d;
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
	int fd; /* its stdout */
};

/* Starts `node ws_client.js OPTIONS` (opts taken; url and token added). */
static struct client ws_client_start(json_t *opts)
{
	char script[1024], *arg;
	struct client cl;
	int fds[2];

	json_object_set_new(opts, "url", json_string(fx.url));
	if (!json_object_get(opts, "token"))
		json_object_set_new(opts, "token", json_string(fx.token));
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

/* Waits for the client's result line (new reference). */
static json_t *ws_client_finish(struct client cl)
{
	struct buf out;
	json_t *r = NULL;
	long waited = 0;
	int st = 0, fd = cl.fd;
	pid_t pid = cl.pid;

	buf_init(&out, 16 << 20);
	for (;;) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		char chunk[4096];
		ssize_t n;

		if (poll(&pf, 1, 1000) == 0) {
			if ((waited += 1000) > 60000)
				break;
			continue;
		}
		n = read(fd, chunk, sizeof chunk);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		buf_append(&out, chunk, (size_t)n);
	}
	close(fd);
	if (waitpid(pid, &st, WNOHANG) == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
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

/* Runs a client scenario to its end. */
static json_t *ws_client(json_t *opts)
{
	return ws_client_finish(ws_client_start(opts));
}

/* A path into a JSON value: "a.b.0.c". Borrowed. */
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

static long long jint(const json_t *j, const char *path)
{
	return json_integer_value(jget(j, path));
}

static int cli(struct buf *out, const char *const *args)
{
	buf_init(out, 16 << 20);
	return harness_cli(fx.home, out, args);
}

/* ---- fixture ---- */

static int setup(void **state)
{
	const char *init[] = {"init", NULL};
	char path[700];
	struct buf tok;

	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, CONFIG) != 0)
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
	harness_rmrf(fx.home);
	return code == 0 ? 0 : -1;
}

/* ---- the handshake ---- */

static void test_handshake(void **state)
{
	json_t *r = ws_client(json_pack("{ss sb}", "scenario", "handshake", "waitTick", 1));
	const json_t *methods = jget(r, "hello.payload.features.methods");
	bool has_chat_send = false;
	size_t i;
	const json_t *m;

	(void)state;
	assert_int_equal(strlen(jstr(r, "challenge.payload.nonce")), 64);
	assert_true(jint(r, "challenge.payload.ts") > 0);
	assert_true(json_is_true(jget(r, "hello.ok")));
	assert_string_equal(jstr(r, "hello.payload.type"), "hello-ok");
	assert_int_equal(jint(r, "hello.payload.protocol"), 4);
	assert_string_equal(jstr(r, "hello.payload.server.version"), SB_VERSION);
	assert_true(strlen(jstr(r, "hello.payload.server.connId")) > 0);
	assert_int_equal(jint(r, "hello.payload.policy.tickIntervalMs"), 1000);
	assert_int_equal(jint(r, "hello.payload.policy.maxPayload"), 64 << 10);
	assert_int_equal(jint(r, "hello.payload.policy.maxBufferedBytes"), 64 << 10);
	assert_string_equal(jstr(r, "hello.payload.snapshot.sessionDefaults.mainSessionKey"),
	                    "agent:main:main");
	assert_int_equal(json_array_size(jget(r, "hello.payload.auth.scopes")), 3);
	json_array_foreach(methods, i, m) has_chat_send |=
	    strcmp(json_string_value(m), "chat.send") == 0;
	assert_true(has_chat_send);
	assert_true(json_is_true(jget(r, "health.ok")));
	assert_string_equal(jstr(r, "health.payload.status"), "ok");
	assert_string_equal(jstr(r, "status.payload.version"), SB_VERSION);
	assert_string_equal(jstr(r, "status.payload.agents.defaultId"), "main");
	assert_string_equal(jstr(r, "tick.event"), "tick");
	assert_true(jint(r, "tick.seq") > 1);
	json_decref(r);

	/* An OpenClaw v3 client, with an extra device field it does not use. */
	r = ws_client(json_pack("{ss si si sb}", "scenario", "handshake", "minProtocol", 3,
	                        "maxProtocol", 3, "tolerateDevice", 1));
	assert_true(json_is_true(jget(r, "hello.ok")));
	assert_int_equal(jint(r, "hello.payload.protocol"), 3);
	json_decref(r);
}

/* ---- chat.send, agent, chat.history ---- */

/* A chat command over chat.send: the gateway's own answer arrives as the
 * run's final chat event, with no model turn (docs/commands.md). */
static void test_chat_command(void **state)
{
	json_t *r =
	    ws_client(json_pack("{ss ss ss ss}", "scenario", "chat", "sessionKey", "agent:main:cmd",
	                        "message", "/status", "idempotencyKey", "chat-cmd-1"));
	const char *t;

	(void)state;
	assert_true(json_is_true(jget(r, "sent.ok")));
	assert_string_equal(jstr(r, "final.state"), "final");
	assert_string_equal(jstr(r, "final.runId"), "chat-cmd-1");
	t = jstr(r, "final.message.content.0.text");
	assert_non_null(strstr(t, "Agent: main\n"));
	assert_non_null(strstr(t, "Session: agent:main:cmd"));
	assert_non_null(strstr(t, "Queue: idle"));
	assert_null(strstr(t, "Scripted reply"));
	json_decref(r);

	r = ws_client(json_pack("{ss ss ss ss}", "scenario", "chat", "sessionKey", "agent:main:cmd",
	                        "message", "/help", "idempotencyKey", "chat-cmd-2"));
	assert_non_null(strstr(jstr(r, "final.message.content.0.text"), "/compact"));
	json_decref(r);
}

static void test_chat_send(void **state)
{
	json_t *r = ws_client(json_pack("{ss ss ss ss}", "scenario", "chat", "sessionKey", "main",
	                                "message", "hello control", "idempotencyKey", "chat-1"));
	const char *expect = "Scripted reply: hello control";
	const json_t *deltas = jget(r, "deltas"), *pieces = jget(r, "assistantDeltas"), *v;
	char joined[256] = "";
	size_t i;

	(void)state;
	assert_true(json_is_true(jget(r, "sent.ok")));
	assert_string_equal(jstr(r, "sent.payload.status"), "started");
	assert_string_equal(jstr(r, "sent.payload.runId"), "chat-1");
	assert_string_equal(jstr(r, "sent.payload.sessionKey"), "agent:main:main");
	/* At least one streamed delta; each carries the text so far. */
	assert_true(json_array_size(deltas) >= 1);
	json_array_foreach(deltas, i, v)
	{
		const char *t = jstr(v, "message.content.0.text");

		assert_string_equal(jstr(v, "state"), "delta");
		assert_string_equal(jstr(v, "sessionKey"), "agent:main:main");
		assert_true(strncmp(expect, t, strlen(t)) == 0);
	}
	assert_string_equal(jstr(r, "final.state"), "final");
	assert_string_equal(jstr(r, "final.runId"), "chat-1");
	assert_string_equal(jstr(r, "final.message.role"), "assistant");
	assert_string_equal(jstr(r, "final.message.content.0.text"), expect);
	json_array_foreach(pieces, i, v)
	    strncat(joined, json_string_value(v), sizeof joined - strlen(joined) - 1);
	assert_string_equal(joined, expect);
	assert_true(json_is_true(jget(r, "seqsIncreasing")));
	/* The same idempotency key again is not run twice. */
	assert_true(json_is_true(jget(r, "again.ok")));
	assert_string_equal(jstr(r, "again.payload.status"), "in_flight");
	json_decref(r);

	/* Another agent's session by its full key. */
	r = ws_client(json_pack("{ss ss ss ss}", "scenario", "chat", "sessionKey", "agent:ops:desk",
	                        "message", "to ops", "idempotencyKey", "chat-2"));
	assert_string_equal(jstr(r, "sent.payload.sessionKey"), "agent:ops:desk");
	assert_string_equal(jstr(r, "final.message.content.0.text"), "Scripted reply: to ops");
	json_decref(r);

	/* An unknown agent is refused before anything is stored. */
	r = ws_client(json_pack("{ss ss ss ss}", "scenario", "chat", "sessionKey",
	                        "agent:nobody:main", "message", "x", "idempotencyKey", "chat-3"));
	assert_false(json_is_true(jget(r, "sent.ok")));
	assert_string_equal(jstr(r, "sent.error.code"), "INVALID_REQUEST");
	assert_string_equal(jstr(r, "sent.error.details.code"), "UNKNOWN_AGENT");
	json_decref(r);
}

static void test_agent_two_answers(void **state)
{
	json_t *r = ws_client(json_pack("{ss ss ss ss}", "scenario", "agent", "sessionKey",
	                                "agent:main:tools", "message", "use a tool please",
	                                "idempotencyKey", "agent-1"));
	const json_t *streams = jget(r, "streams"), *v;
	bool tool_start = false, tool_result = false, start = false, end = false;
	size_t i;

	(void)state;
	assert_true(json_is_true(jget(r, "first.ok")));
	assert_string_equal(jstr(r, "first.payload.status"), "accepted");
	assert_string_equal(jstr(r, "first.payload.runId"), "agent-1");
	assert_true(json_is_true(jget(r, "second.ok")));
	assert_string_equal(jstr(r, "second.id"), jstr(r, "first.id"));
	assert_string_equal(jstr(r, "second.payload.status"), "ok");
	assert_string_equal(jstr(r, "second.payload.runId"), "agent-1");
	assert_string_equal(jstr(r, "second.payload.text"), "Scripted reply: use a tool please");
	assert_string_equal(jstr(r, "second.payload.result.payloads.0.text"),
	                    "Scripted reply: use a tool please");
	assert_string_equal(jstr(r, "text"), "Scripted reply: use a tool please");
	json_array_foreach(streams, i, v)
	{
		const char *s = json_string_value(v);

		tool_start |= strcmp(s, "tool:start") == 0;
		tool_result |= strcmp(s, "tool:result") == 0;
		start |= strcmp(s, "lifecycle:start") == 0;
		end |= strcmp(s, "lifecycle:end") == 0;
	}
	assert_true(tool_start && tool_result && start && end);
	json_decref(r);
}

static void test_history(void **state)
{
	json_t *r = ws_client(json_pack("{ss ss}", "scenario", "history", "sessionKey", "main"));
	const json_t *msgs = jget(r, "history.payload.messages"), *m;
	bool user = false, assistant = false;
	size_t i;

	(void)state;
	assert_true(json_is_true(jget(r, "history.ok")));
	assert_string_equal(jstr(r, "history.payload.sessionKey"), "agent:main:main");
	json_array_foreach(msgs, i, m)
	{
		user |= strcmp(jstr(m, "role"), "user") == 0 &&
		        strcmp(jstr(m, "content.0.text"), "hello control") == 0;
		assistant |=
		    strcmp(jstr(m, "role"), "assistant") == 0 &&
		    strcmp(jstr(m, "content.0.text"), "Scripted reply: hello control") == 0;
		assert_true(jint(m, "timestamp") > 0);
	}
	assert_true(user && assistant);
	json_decref(r);

	/* A session that never ran has no history (and no error). */
	r = ws_client(json_pack("{ss ss}", "scenario", "history", "sessionKey", "agent:ops:none"));
	assert_true(json_is_true(jget(r, "history.ok")));
	assert_int_equal(json_array_size(jget(r, "history.payload.messages")), 0);
	json_decref(r);
}

/* ---- refusals ---- */

static void test_refusals(void **state)
{
	json_t *r;

	(void)state;
	/* A bad token. */
	r = ws_client(json_pack("{ss ss}", "scenario", "connect", "token", "not-the-token"));
	assert_false(json_is_true(jget(r, "hello.ok")));
	assert_string_equal(jstr(r, "hello.error.code"), "UNAUTHORIZED");
	assert_int_equal(jint(r, "closed.code"), 1008);
	json_decref(r);

	/* A missing scope: read-only may not write. */
	r = ws_client(json_pack("{ss s[s] ss s{ss ss ss}}", "scenario", "call", "scopes",
	                        "operator.read", "method", "chat.send", "params", "sessionKey",
	                        "main", "message", "x", "idempotencyKey", "scope-1"));
	assert_true(json_is_true(jget(r, "hello.ok")));
	assert_string_equal(jstr(r, "reply.error.code"), "FORBIDDEN");
	assert_string_equal(jstr(r, "reply.error.details.code"), "MISSING_SCOPE");
	assert_string_equal(jstr(r, "reply.error.details.scope"), "operator.write");
	json_decref(r);
	r = ws_client(json_pack("{ss s[s] ss}", "scenario", "call", "scopes", "operator.write",
	                        "method", "config.get"));
	assert_string_equal(jstr(r, "reply.error.code"), "FORBIDDEN");
	json_decref(r);
	/* The next turn's prompt holds the workspace (MEMORY.md too): admin
	 * only, and an answer for an admin. */
	r = ws_client(json_pack("{ss s[ss] ss}", "scenario", "call", "scopes", "operator.read",
	                        "operator.write", "method", "agent.prompt"));
	assert_string_equal(jstr(r, "reply.error.code"), "FORBIDDEN");
	assert_string_equal(jstr(r, "reply.error.details.scope"), "operator.admin");
	assert_null(jget(r, "reply.payload.system"));
	json_decref(r);
	r = ws_client(json_pack("{ss ss s{ss}}", "scenario", "call", "method", "agent.prompt",
	                        "params", "sessionKey", "agent:ops:desk"));
	assert_true(json_is_true(jget(r, "reply.ok")));
	assert_string_equal(jstr(r, "reply.payload.agentId"), "ops");
	assert_non_null(strstr(jstr(r, "reply.payload.system"), "You are the agent \"ops\""));
	json_decref(r);

	/* Admin reads the configuration, secrets redacted. */
	r = ws_client(json_pack("{ss ss}", "scenario", "call", "method", "config.get"));
	assert_true(json_is_true(jget(r, "reply.ok")));
	assert_int_equal(jint(r, "reply.payload.config.gateway.control.tick_interval"), 1000);
	assert_string_equal(jstr(r, "reply.payload.config.agents.0.id"), "main");
	json_decref(r);

	/* The routing decision for a message, as the route CLI explains it. */
	r = ws_client(json_pack("{ss ss s{ss ss ss}}", "scenario", "call", "method",
	                        "bindings.explain", "params", "channel", "webhook", "peer",
	                        "direct:alice", "sender", "alice"));
	assert_true(json_is_true(jget(r, "reply.ok")));
	assert_string_equal(jstr(r, "reply.payload.agent"), "main");
	/* alice is not the operator: her DMs are not the main session */
	assert_string_equal(jstr(r, "reply.payload.session_key"), "agent:main:webhook:direct:alice");
	assert_string_equal(jstr(r, "reply.payload.tier"), "default");
	json_decref(r);
	r = ws_client(json_pack("{ss ss s{}}", "scenario", "call", "method", "bindings.explain",
	                        "params"));
	assert_string_equal(jstr(r, "reply.error.code"), "INVALID_REQUEST");
	json_decref(r);

	/* Anything before connect. */
	r = ws_client(json_pack("{ss}", "scenario", "before-connect"));
	assert_string_equal(jstr(r, "reply.error.code"), "INVALID_REQUEST");
	assert_int_equal(jint(r, "closed.code"), 1008);
	json_decref(r);

	/* A frame over the 64 KiB pre-auth cap. */
	r = ws_client(json_pack("{ss si}", "scenario", "oversize", "bytes", 70 * 1024));
	assert_int_equal(jint(r, "closed.code"), 1009);
	json_decref(r);

	/* Not JSON. */
	r = ws_client(json_pack("{ss}", "scenario", "garbage"));
	assert_int_equal(jint(r, "closed.code"), 1008);
	json_decref(r);

	/* No common protocol version. */
	r = ws_client(
	    json_pack("{ss si si}", "scenario", "connect", "minProtocol", 5, "maxProtocol", 6));
	assert_string_equal(jstr(r, "hello.error.code"), "INVALID_REQUEST");
	assert_string_equal(jstr(r, "hello.error.details.code"), "PROTOCOL_MISMATCH");
	assert_int_equal(jint(r, "closed.code"), 1002);
	json_decref(r);

	/* Unknown methods are named. */
	r = ws_client(json_pack("{ss ss}", "scenario", "call", "method", "no.such.method"));
	assert_string_equal(jstr(r, "reply.error.details.code"), "UNKNOWN_METHOD");
	json_decref(r);
}

/* Silence before connect, and a client that stops reading. */
static void test_idle_and_slow(void **state)
{
	json_t *r = ws_client(json_pack("{ss}", "scenario", "idle"));
	struct buf log;

	(void)state;
	assert_int_equal(jint(r, "closed.code"), 1008);
	assert_string_equal(jstr(r, "closed.reason"), "handshake timeout");
	json_decref(r);

	r = ws_client(json_pack("{ss si}", "scenario", "slow", "requests", 20000));
	assert_true(jint(r, "closed.code") > 0);
	/* It was dropped long before all the answers could have arrived. */
	assert_true(jint(r, "frames") < 20000);
	json_decref(r);
	buf_init(&log, 64 << 20);
	harness_daemon_log(&fx.d, &log);
	assert_non_null(strstr(log.data, "client reads too slowly; dropping it"));
	buf_free(&log);

	/* The gateway is still fine. */
	r = ws_client(json_pack("{ss}", "scenario", "handshake"));
	assert_true(json_is_true(jget(r, "health.ok")));
	json_decref(r);
}

/* ---- devices ---- */

static bool devices_list_has(const char *json, const char *group, const char *id)
{
	json_t *j = json_loads(json, JSON_DISABLE_EOF_CHECK, NULL), *d;
	bool found = false;
	size_t i;

	json_array_foreach(json_object_get(j, group), i, d) found |=
	    strcmp(jstr(d, "deviceId"), id) == 0;
	json_decref(j);
	return found;
}

static void test_device_pairing(void **state)
{
	char keyfile[700], device_id[80], device_token[128];
	const char *list[] = {"devices", "list", "--json", "--url", fx.url, NULL};
	const char *approve[] = {"devices", "approve", device_id, "--url", fx.url, NULL};
	const char *revoke[] = {"devices", "revoke", device_id, "--url", fx.url, NULL};
	struct buf out;
	json_t *r;

	(void)state;
	snprintf(keyfile, sizeof keyfile, "%s/device-key.pem", fx.home);

	/* A new device: its signature is good, but nobody approved it yet. */
	r = ws_client(json_pack("{ss ss sb s[ss] ss}", "scenario", "connect", "keyfile", keyfile,
	                        "withDevice", 1, "scopes", "operator.read", "operator.write",
	                        "token", ""));
	assert_string_equal(jstr(r, "hello.error.code"), "NOT_PAIRED");
	assert_int_equal(jint(r, "closed.code"), 1008);
	snprintf(device_id, sizeof device_id, "%s", jstr(r, "hello.error.details.deviceId"));
	assert_int_equal(strlen(device_id), 64);
	json_decref(r);

	/* A bad signature from the same key is an authentication failure. */
	r = ws_client(json_pack("{ss ss sb sb ss}", "scenario", "connect", "keyfile", keyfile,
	                        "withDevice", 1, "badSignature", 1, "token", ""));
	assert_string_equal(jstr(r, "hello.error.code"), "UNAUTHORIZED");
	json_decref(r);

	assert_int_equal(cli(&out, list), 0);
	assert_true(devices_list_has(out.data, "pending", device_id));
	buf_free(&out);
	assert_int_equal(cli(&out, approve), 0);
	assert_non_null(strstr(out.data, "approved"));
	buf_free(&out);
	assert_int_equal(cli(&out, list), 0);
	assert_true(devices_list_has(out.data, "paired", device_id));
	buf_free(&out);

	/* Approved: the signed connect gets a device token (v3 payload here). */
	r = ws_client(json_pack("{ss ss sb si s[ss] ss}", "scenario", "connect", "keyfile", keyfile,
	                        "withDevice", 1, "sigVersion", 3, "scopes", "operator.read",
	                        "operator.admin", "token", ""));
	assert_true(json_is_true(jget(r, "hello.ok")));
	assert_string_equal(jstr(r, "hello.payload.auth.deviceId"), device_id);
	snprintf(device_token, sizeof device_token, "%s",
	         jstr(r, "hello.payload.auth.deviceToken"));
	assert_true(strlen(device_token) >= 40);
	/* Granted what was asked for at pairing and now: read, not admin. */
	assert_int_equal(json_array_size(jget(r, "hello.payload.auth.scopes")), 1);
	assert_string_equal(jstr(r, "hello.payload.auth.scopes.0"), "operator.read");
	json_decref(r);

	/* The device token alone opens a connection with the device's scopes. */
	r = ws_client(json_pack("{ss ss ss ss}", "scenario", "call", "token", "", "deviceToken",
	                        device_token, "method", "status"));
	assert_true(json_is_true(jget(r, "hello.ok")));
	assert_true(json_is_true(jget(r, "reply.ok")));
	json_decref(r);
	r = ws_client(json_pack("{ss ss ss ss}", "scenario", "call", "token", "", "deviceToken",
	                        device_token, "method", "devices.list"));
	assert_string_equal(jstr(r, "reply.error.code"), "FORBIDDEN");
	json_decref(r);

	/* Revoked: the token is worthless. */
	assert_int_equal(cli(&out, revoke), 0);
	buf_free(&out);
	r = ws_client(json_pack("{ss ss ss}", "scenario", "connect", "token", "", "deviceToken",
	                        device_token));
	assert_string_equal(jstr(r, "hello.error.code"), "UNAUTHORIZED");
	json_decref(r);
}

/* ---- the CLI ---- */

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The CLI with no gateway where it looks: nothing listening is said in
 * words that lead to the fix, and a listener that never answers ends at
 * --timeout with status 1 (it used to crash or hang there). */
static void test_cli_without_a_gateway(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof a;
	char url[64];
	const char *status[] = {"status", "--url", url, "--timeout", "1", NULL};
	struct buf out;
	int fd, rc;
	int64_t t0;

	(void)state;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	snprintf(url, sizeof url, "ws://127.0.0.1:%d/", ntohs(a.sin_port));

	/* bound, not listening: refused */
	buf_init(&out, 1 << 20);
	rc = harness_cli(fx.home, &out, status);
	if (rc != 1 || !out.data || !strstr(out.data, "is the gateway running?"))
		fail_msg("status with nothing listening: exit %d\n%s", rc, out.data ? out.data : "");
	buf_free(&out);

	/* listening, never accepting: the handshake never comes */
	assert_int_equal(listen(fd, 16), 0);
	buf_init(&out, 1 << 20);
	t0 = mono_ms();
	rc = harness_cli(fx.home, &out, status);
	if (rc != 1 || !out.data || !strstr(out.data, "no answer from the gateway within 1 s") ||
	    strstr(out.data, "Sanitizer") || mono_ms() - t0 > 10000)
		fail_msg("status against a silent listener: exit %d after %lld ms\n%s", rc,
		         (long long)(mono_ms() - t0), out.data ? out.data : "");
	buf_free(&out);
	close(fd);
}

static void test_cli(void **state)
{
	const char *status[] = {"status", "--json", "--url", fx.url, NULL};
	const char *send[] = {"send", "--agent", "main", "--url", fx.url, "hi from the cli", NULL};
	const char *send_json[] = {"send",   "--agent", "ops",  "--session", "desk",
	                           "--json", "--url",   fx.url, "again",     NULL};
	const char *sessions[] = {"sessions", "list", "--json", "--url", fx.url, NULL};
	const char *show[] = {"sessions", "show", "main", "--url", fx.url, NULL};
	const char *bad[] = {"status", "--url", fx.url, "--token", "wrong", NULL};
	const char *home_status[] = {"status", NULL};
	char cfg[8192], path[700];
	struct buf out;
	json_t *j;
	bool found = false;
	size_t i;
	const json_t *s;

	(void)state;
	/* --token-file: the token is read from the file, never the command
	 * line; an unreadable file is a clear error, not a fall-back to
	 * another token. (No wrong token here: the lockout counts failed
	 * attempts, and the cases below spend them.) */
	{
		char tf[700], tok[256];
		const char *by_file[] = {"status", "--url", fx.url, "--token-file", tf, NULL};
		const char *no_file[] = {"status",       "--url",          fx.url,
		                         "--token-file", "/nonexistent/t", NULL};

		assert_int_equal(harness_oai_token(fx.home, tok, sizeof tok), 0);
		snprintf(tf, sizeof tf, "%s/token-copy", fx.home);
		assert_int_equal(harness_write_file(tf, tok), 0);
		assert_int_equal(cli(&out, by_file), 0);
		buf_free(&out);
		assert_int_not_equal(cli(&out, no_file), 0);
		assert_non_null(
		    strstr(out.data, "--token-file /nonexistent/t: cannot read a token"));
		buf_free(&out);
	}
	assert_int_equal(cli(&out, status), 0);
	j = json_loads(out.data, JSON_DISABLE_EOF_CHECK, NULL);
	assert_non_null(j);
	assert_string_equal(jstr(j, "version"), SB_VERSION);
	assert_string_equal(jstr(j, "state"), "ready");
	json_decref(j);
	buf_free(&out);

	assert_int_equal(cli(&out, send), 0);
	assert_non_null(strstr(out.data, "Scripted reply: hi from the cli"));
	buf_free(&out);

	/* an agent that is not there is named, with the ones that are */
	{
		const char *nosuch[] = {"send", "--agent", "nosuch", "--url", fx.url, "hello", NULL};

		assert_int_equal(cli(&out, nosuch), 1);
		if (!strstr(out.data, "no agent \"nosuch\" is configured (the agents are: main, ops"))
			fail_msg("send --agent nosuch said:\n%s", out.data);
		buf_free(&out);
	}

	assert_int_equal(cli(&out, send_json), 0);
	j = json_loads(out.data, JSON_DISABLE_EOF_CHECK, NULL);
	assert_string_equal(jstr(j, "status"), "ok");
	assert_string_equal(jstr(j, "sessionKey"), "agent:ops:desk");
	assert_string_equal(jstr(j, "text"), "Scripted reply: again");
	json_decref(j);
	buf_free(&out);

	assert_int_equal(cli(&out, sessions), 0);
	j = json_loads(out.data, JSON_DISABLE_EOF_CHECK, NULL);
	json_array_foreach(jget(j, "sessions"), i, s) found |=
	    strcmp(jstr(s, "key"), "agent:main:main") == 0;
	assert_true(found);
	json_decref(j);
	buf_free(&out);

	assert_int_equal(cli(&out, show), 0);
	assert_non_null(strstr(out.data, "user: hi from the cli"));
	buf_free(&out);

	/* The plain list keeps its columns with a long key: every row's agent
	 * starts where the header's AGENT does. */
	{
		const char *longsend[] = {"send",   "--agent", "ops",
		                          "--session",
		                          "a-rather-long-session-name-for-the-column-test-0123456789",
		                          "--url",  fx.url,    "long", NULL};
		const char *plain[] = {"sessions", "list", "--url", fx.url, NULL};
		char *line, *save = NULL;
		long col = -1;

		assert_int_equal(cli(&out, longsend), 0);
		buf_free(&out);
		assert_int_equal(cli(&out, plain), 0);
		for (line = strtok_r(out.data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			char *a = strstr(line, col < 0 ? "AGENT" : " ops ");

			if (col < 0) {
				assert_non_null(a);
				col = a - line;
				continue;
			}
			if (!a)
				a = strstr(line, " main ");
			if (!a || a + 1 - line != col)
				fail_msg("a row out of line (agent at %ld, header at %ld): %s",
				         a ? (long)(a + 1 - line) : -1L, col, line);
		}
		buf_free(&out);
	}

	assert_int_equal(cli(&out, bad), 1);
	assert_non_null(strstr(out.data, "UNAUTHORIZED"));
	buf_free(&out);

	/* Without --url: the gateway and its token come from the home. */
	/* CONFIG starts with "gateway:\n"; put the port under it. */
	snprintf(cfg, sizeof cfg, "gateway:\n  port: %d\n%s", fx.d.port,
	         CONFIG + strlen("gateway:\n"));
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	assert_int_equal(harness_write_file(path, cfg), 0);
	assert_int_equal(cli(&out, home_status), 0);
	assert_non_null(strstr(out.data, "ready"));
	buf_free(&out);
}

/* ---- last: the lockout (it refuses 127.0.0.1 for a few seconds) ---- */

static void test_lockout(void **state)
{
	const char *status[] = {"status", "--url", fx.url, NULL};
	json_t *r;
	const json_t *v;
	bool unauthorized = false;
	struct buf out;
	size_t i;

	(void)state;
	/* A page of a foreign origin is closed before the challenge: it can
	 * try nothing, so it counts nothing and locks nobody out. */
	for (int k = 0; k < 7; k++) {
		r = ws_client(json_pack("{ss ss ss}", "scenario", "status", "origin",
		                        "http://evil.example", "token", "wrong-token"));
		assert_null(jget(r, "hello"));
		assert_non_null(strstr(jstr(r, "closeReason"), "origin"));
		json_decref(r);
	}
	r = ws_client(json_pack("{ss}", "scenario", "connect"));
	assert_true(json_is_true(jget(r, "hello.ok")));
	json_decref(r);

	/* A client without Origin that fails on purpose locks the address
	 * out ... */
	r = ws_client(json_pack("{ss si}", "scenario", "lockout", "attempts", 7));
	json_array_foreach(jget(r, "results"), i, v)
	{
		const char *code = json_string_value(v);

		assert_true(strcmp(code, "UNAUTHORIZED") == 0 || strcmp(code, "RATE_LIMITED") == 0);
		unauthorized |= strcmp(code, "UNAUTHORIZED") == 0;
	}
	assert_true(unauthorized);
	assert_string_equal(jstr(r, "results.6"), "RATE_LIMITED");
	/* ... but from loopback the gateway token still gets in: the
	 * operator is not locked out of their own gateway. */
	if (!json_is_true(jget(r, "last.ok")))
		fail_msg("the gateway token from loopback was refused while locked out: %s",
		         json_dumps(r, JSON_COMPACT));
	json_decref(r);
	assert_int_equal(cli(&out, status), 0);
	assert_non_null(strstr(out.data, "ready"));
	buf_free(&out);
	/* A wrong token is still refused without being tried. */
	r = ws_client(json_pack("{ss si}", "scenario", "lockout", "attempts", 1));
	assert_string_equal(jstr(r, "results.0"), "RATE_LIMITED");
	assert_true(json_is_true(jget(r, "last.ok")));
	json_decref(r);

	/* After the lockout, the token works again. */
	sleep(4);
	r = ws_client(json_pack("{ss}", "scenario", "connect"));
	assert_true(json_is_true(jget(r, "hello.ok")));
	json_decref(r);
}

/* ---- last of all: SIGTERM tells the clients ---- */

static void test_shutdown_event(void **state)
{
	struct client cl = ws_client_start(json_pack("{ss}", "scenario", "await-shutdown"));
	json_t *r;

	(void)state;
	sleep(2); /* connected and subscribed */
	assert_int_equal(harness_daemon_stop(&fx.d, SIGTERM, 20000), 0);
	fx.d.pid = 0;
	r = ws_client_finish(cl);
	assert_string_equal(jstr(r, "shutdown.event"), "shutdown");
	assert_int_equal(jint(r, "closed.code"), 1001);
	json_decref(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_handshake),
	    cmocka_unit_test(test_chat_send),
	    cmocka_unit_test(test_chat_command),
	    cmocka_unit_test(test_agent_two_answers),
	    cmocka_unit_test(test_history),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_device_pairing),
	    cmocka_unit_test(test_cli),
	    cmocka_unit_test(test_cli_without_a_gateway),
	    cmocka_unit_test(test_idle_and_slow),
	    cmocka_unit_test(test_lockout),
	    cmocka_unit_test(test_shutdown_event),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
