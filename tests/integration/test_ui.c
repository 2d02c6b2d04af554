/*
 * test_ui.c - the web UI on the gateway's port, end to end: the real daemon
 * with a scripted agent on 127.0.0.1.
 *
 * 1. The page: / and its files come from the binary with a CSP, nosniff,
 *    no framing, gzip when asked for and ETags (304); a foreign Host (DNS
 *    rebinding) gets 403; unknown files 404; HEAD has no body.
 * 2. Signing in over HTTP: a one-time code from `switchboard dashboard`
 *    becomes an HttpOnly, SameSite=Strict cookie once, never twice; a wrong
 *    Origin, a missing JSON content type, a bad token are refused; the
 *    cookie opens the control plane (tests/fakes/ws_client.js) and stops
 *    working at sign-out.
 * 3. The browser: tests/browser/ui_browser.js drives Debian's chromium
 *    (playwright-core) through every page: sign in with a code, a replayed
 *    code and a wrong origin refused, chat with a streamed reply and a tool
 *    call, an approval answered on the Approvals page, a pairing code
 *    approved on the Channels page, a transcript showing the commit that
 *    answered; screenshots of each page land in ui-screenshots/ under the
 *    build directory. Without chromium the test is skipped, except under
 *    CI=true, where it fails.
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
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "agents/safety/sandbox.h"
#include "gateway/core/err.h"
#include "gateway/store/store.h"
#include "harness.h"
#include "workspaces/history.h"

#define SCRIPT                                                                                     \
	"steps:\n"                                                                                 \
	"  - match: hello\n"                                                                       \
	"    text: \"Let me look. \"\n"                                                            \
	"    tool_calls:\n"                                                                        \
	"      - {name: ls, input: {}}\n"                                                          \
	"  - text: \"Here are the files of the workspace, as you asked, listed one by one.\"\n"    \
	"  - match: make\n"                                                                        \
	"    tool_calls:\n"                                                                        \
	"      - {name: bash, input: {command: \"touch made.txt\"}}\n"                             \
	"  - text: \"I made it.\"\n"

#define PAIR_CHANNEL "telegram"
#define PAIR_SENDER "4242"

struct fixture {
	char home[512];
	char token[256];
	char origin[64];
	char commit[41];
	char pair_code[16];
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

/* ---- a pairing request, made through the store as the dispatcher does ---- */

struct pair_op {
	bool done;
	int rc;
	char code[16];
};

static void pair_cb(void *ud, int rc, const struct store_pairing *p, bool created)
{
	struct pair_op *o = ud;

	(void)created;
	o->done = true;
	o->rc = rc;
	if (p)
		snprintf(o->code, sizeof o->code, "%s", p->code);
}

static int pairing_request(const char *db, char *code, size_t size)
{
	struct store_options opt = {.path = db, .busy_timeout_ms = 5000};
	struct store *st = NULL;
	struct pair_op o = {0};
	uv_loop_t loop;

	if (uv_loop_init(&loop) || store_open(&st, &loop, &opt) != SB_OK)
		return -1;
	if (store_pairing_request(st, PAIR_CHANNEL, "default", PAIR_SENDER, pair_cb, &o) != SB_OK)
		o.rc = -1;
	while (!o.done && o.rc == 0 && uv_run(&loop, UV_RUN_ONCE))
		;
	store_close(st);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	snprintf(code, size, "%s", o.code);
	return o.done && o.rc == SB_OK ? 0 : -1;
}

/* ---- HTTP with headers out and in ---- */

struct resp {
	long status;
	struct buf raw; /* head and body */
};

/* A raw request, so that the test sets Host and sees every header. */
static struct resp http_raw(const char *req)
{
	struct resp r = {0};
	int fd = harness_connect(fx.d.port);

	buf_init(&r.raw, 4 << 20);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	r.status = harness_read_response(fd, &r.raw, 10000);
	close(fd);
	return r;
}

/* The value of header name in r (case-insensitive), copied into out. */
static const char *resp_header(const struct resp *r, const char *name, char *out, size_t size)
{
	const char *p = r->raw.data, *end = p ? strstr(p, "\r\n\r\n") : NULL;
	size_t n = strlen(name);

	out[0] = '\0';
	while (p && end && p < end) {
		const char *nl = strstr(p, "\r\n");

		if (!nl)
			break;
		if ((size_t)(nl - p) > n && strncasecmp(p, name, n) == 0 && p[n] == ':') {
			const char *v = p + n + 1;

			while (*v == ' ')
				v++;
			snprintf(out, size, "%.*s", (int)(nl - v), v);
			return out;
		}
		p = nl + 2;
	}
	return NULL;
}

static const char *resp_body(const struct resp *r)
{
	const char *b = r->raw.data ? strstr(r->raw.data, "\r\n\r\n") : NULL;

	return b ? b + 4 : "";
}

static struct resp get(const char *path, const char *host, const char *extra)
{
	char req[2048];

	snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n", path,
	         host, extra ? extra : "");
	return http_raw(req);
}

static struct resp post(const char *path, const char *origin, const char *type, const char *body,
                        const char *cookie)
{
	char req[4096], o[200] = "", t[200] = "", c[600] = "";

	if (origin)
		snprintf(o, sizeof o, "Origin: %s\r\n", origin);
	if (type)
		snprintf(t, sizeof t, "Content-Type: %s\r\n", type);
	if (cookie)
		snprintf(c, sizeof c, "Cookie: %s\r\n", cookie);
	snprintf(req, sizeof req,
	         "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s%s%sContent-Length: %zu\r\n"
	         "Connection: close\r\n\r\n%s",
	         path, fx.d.port, o, t, c, strlen(body), body);
	return http_raw(req);
}

/* A fresh one-time code from `switchboard dashboard --json`. */
static void dashboard_code(char *code, size_t size)
{
	char url[64];
	const char *args[] = {"dashboard", "--json", "--no-open", "--url", url, NULL};
	struct buf out;
	json_t *j;

	snprintf(url, sizeof url, "ws://127.0.0.1:%d/", fx.d.port);
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(fx.home, &out, args), 0);
	j = json_loads(out.data, JSON_DISABLE_EOF_CHECK, NULL);
	assert_non_null(j);
	snprintf(code, size, "%s", json_string_value(json_object_get(j, "code")));
	assert_true(strlen(code) >= 32);
	assert_non_null(strstr(json_string_value(json_object_get(j, "url")), "/#code="));
	assert_int_equal(strncmp(json_string_value(json_object_get(j, "url")), fx.origin,
	                         strlen(fx.origin)),
	                 0);
	json_decref(j);
	buf_free(&out);
}

/* ---- fixture ---- */

static int setup(void **state)
{
	const char *init[] = {"init", NULL};
	char path[700], cfg[2048], why[512], db[700];
	struct buf tok;
	json_t *log = NULL;

	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - id: main\n"
	         "    default: true\n"
	         "    model: s/scripted-ui\n"
	         "    sandbox: %s\n"
	         "    permissions:\n"
	         "      - {ask_commands: [touch]}\n"
	         "security:\n"
	         "  approval_timeout: 90s\n"
	         "cron:\n"
	         "  - {id: nightly, cron: \"0 3 * * *\", payload: \"nightly check\"}\n",
	         sandbox_probe(NULL, why, sizeof why) == 0 ? "workspace-write" : "full");
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/script.yaml", fx.home);
	if (harness_write_file(path, SCRIPT) != 0 || harness_cli(fx.home, NULL, init) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/gateway.token", fx.home);
	buf_init(&tok, 4096);
	if (harness_read_file(path, &tok) != 0 || !tok.data) {
		buf_free(&tok);
		return -1;
	}
	snprintf(fx.token, sizeof fx.token, "%.*s", (int)strcspn(tok.data, "\r\n"), tok.data);
	buf_free(&tok);
	/* the commit `init` made in the workspace: the one every turn answers with */
	snprintf(path, sizeof path, "%s/workspaces/main", fx.home);
	if (workspace_git_log(path, NULL, 1, &log) != SB_OK ||
	    !json_string_value(json_object_get(log, "head")))
		return -1;
	snprintf(fx.commit, sizeof fx.commit, "%s", json_string_value(json_object_get(log, "head")));
	json_decref(log);
	/* a sender waiting for the operator to approve their code */
	snprintf(db, sizeof db, "%s/state.db", fx.home);
	if (pairing_request(db, fx.pair_code, sizeof fx.pair_code) != 0)
		return -1;
	if (harness_daemon_start(&fx.d, fx.home, NULL) != 0 || harness_wait_ready(&fx.d, 20000))
		return -1;
	snprintf(fx.origin, sizeof fx.origin, "http://127.0.0.1:%d", fx.d.port);
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

/* ---- 1. the page ---- */

static void test_page_is_served_with_its_policy(void **state)
{
	char host[64], v[1024], etag[128], cond[256];
	struct resp r;

	(void)state;
	snprintf(host, sizeof host, "127.0.0.1:%d", fx.d.port);
	r = get("/", host, NULL);
	assert_int_equal(r.status, 200);
	assert_non_null(resp_header(&r, "content-type", v, sizeof v));
	assert_string_equal(v, "text/html; charset=utf-8");
	assert_non_null(strstr(resp_body(&r), "<script type=\"module\" src=\"/ui/app.js\">"));
	assert_non_null(resp_header(&r, "content-security-policy", v, sizeof v));
	assert_non_null(strstr(v, "default-src 'none'"));
	assert_non_null(strstr(v, "script-src 'self';"));
	assert_non_null(strstr(v, "frame-ancestors 'none'"));
	assert_non_null(strstr(v, "connect-src 'self' ws://127.0.0.1:"));
	assert_null(strstr(v, "unsafe"));
	assert_non_null(resp_header(&r, "x-content-type-options", v, sizeof v));
	assert_string_equal(v, "nosniff");
	assert_non_null(resp_header(&r, "x-frame-options", v, sizeof v));
	assert_non_null(resp_header(&r, "referrer-policy", v, sizeof v));
	assert_string_equal(v, "no-referrer");
	assert_null(resp_header(&r, "content-encoding", v, sizeof v));
	assert_non_null(resp_header(&r, "etag", etag, sizeof etag));
	buf_free(&r.raw);

	/* gzip when the browser takes it, not when it refuses it */
	r = get("/ui/app.js", host, "Accept-Encoding: gzip, deflate, br\r\n");
	assert_int_equal(r.status, 200);
	assert_non_null(resp_header(&r, "content-encoding", v, sizeof v));
	assert_string_equal(v, "gzip");
	assert_non_null(resp_header(&r, "content-type", v, sizeof v));
	assert_string_equal(v, "text/javascript; charset=utf-8");
	assert_int_equal((unsigned char)resp_body(&r)[0], 0x1f);
	buf_free(&r.raw);
	r = get("/ui/app.js", host, "Accept-Encoding: gzip;q=0, identity\r\n");
	assert_int_equal(r.status, 200);
	assert_null(resp_header(&r, "content-encoding", v, sizeof v));
	assert_non_null(strstr(resp_body(&r), "import"));
	buf_free(&r.raw);

	/* revalidation */
	snprintf(cond, sizeof cond, "If-None-Match: %s\r\n", etag);
	r = get("/", host, cond);
	assert_int_equal(r.status, 304);
	assert_string_equal(resp_body(&r), "");
	buf_free(&r.raw);

	/* a name pointed at the gateway (DNS rebinding) gets no page */
	r = get("/", "attacker.example:8790", NULL);
	assert_int_equal(r.status, 403);
	buf_free(&r.raw);
	r = get("/ui/app.js", "", NULL);
	assert_int_equal(r.status, 403);
	buf_free(&r.raw);
	/* localhost is the same gateway */
	snprintf(host, sizeof host, "localhost:%d", fx.d.port);
	r = get("/", host, NULL);
	assert_int_equal(r.status, 200);
	buf_free(&r.raw);

	/* unknown files, paths that climb, HEAD */
	snprintf(host, sizeof host, "127.0.0.1:%d", fx.d.port);
	r = get("/ui/nope.js", host, NULL);
	assert_int_equal(r.status, 404);
	buf_free(&r.raw);
	r = get("/ui/../switchboard.yaml", host, NULL);
	assert_true(r.status == 404 || r.status == 400 || r.status == 403);
	assert_null(strstr(resp_body(&r), "providers"));
	buf_free(&r.raw);
	{
		char req[256];

		snprintf(req, sizeof req, "HEAD / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
		         host);
		r = http_raw(req);
		assert_int_equal(r.status, 200);
		assert_string_equal(resp_body(&r), "");
		buf_free(&r.raw);
	}
}

/* ---- 2. signing in ---- */

/* "sb_session_PORT=VALUE" from a Set-Cookie header. */
static void cookie_of(const struct resp *r, char *out, size_t size)
{
	char v[512];

	assert_non_null(resp_header(r, "set-cookie", v, sizeof v));
	snprintf(out, size, "%.*s", (int)strcspn(v, ";"), v);
}

/* Runs ws_client.js against the control plane with extra options. */
static json_t *ws_client(json_t *opts)
{
	char script[1024], *arg, chunk[4096];
	struct buf out;
	json_t *r;
	int fds[2], st;
	pid_t pid;
	ssize_t n;

	json_object_set_new(opts, "url", json_sprintf("ws://127.0.0.1:%d/ws", fx.d.port));
	json_object_set_new(opts, "timeoutMs", json_integer(15000));
	arg = json_dumps(opts, JSON_COMPACT);
	json_decref(opts);
	snprintf(script, sizeof script, "%s/tests/fakes/ws_client.js", SB_SOURCE_DIR);
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	if (pid == 0) {
		const char *argv[] = {"node", script, arg, NULL};

		dup2(fds[1], STDOUT_FILENO);
		close(fds[0]);
		close(fds[1]);
		execvp("node", (char *const *)argv);
		_exit(127);
	}
	free(arg);
	close(fds[1]);
	buf_init(&out, 1 << 20);
	while ((n = read(fds[0], chunk, sizeof chunk)) > 0 || (n < 0 && errno == EINTR))
		if (n > 0)
			buf_append(&out, chunk, (size_t)n);
	close(fds[0]);
	waitpid(pid, &st, 0);
	r = out.data ? json_loads(out.data, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
	if (!r)
		fprintf(stderr, "ws_client: %s\n", out.data ? out.data : "(nothing)");
	buf_free(&out);
	assert_non_null(r);
	return r;
}

static void test_sign_in_with_a_code_once(void **state)
{
	char code[128], body[512], cookie[256], v[512], bad_origin[] = "http://127.0.0.1:1";
	struct resp r;
	json_t *c;

	(void)state;
	dashboard_code(code, sizeof code);
	snprintf(body, sizeof body, "{\"code\":\"%s\"}", code);
	/* refusals that do not spend the code */
	r = post("/auth/login", bad_origin, "application/json", body, NULL);
	assert_int_equal(r.status, 403);
	assert_null(resp_header(&r, "set-cookie", v, sizeof v));
	buf_free(&r.raw);
	r = post("/auth/login", NULL, "application/json", body, NULL);
	assert_int_equal(r.status, 403);
	buf_free(&r.raw);
	r = post("/auth/login", fx.origin, "text/plain", body, NULL);
	assert_int_equal(r.status, 415);
	buf_free(&r.raw);
	/* the exchange */
	r = post("/auth/login", fx.origin, "application/json", body, NULL);
	assert_int_equal(r.status, 200);
	assert_non_null(resp_header(&r, "set-cookie", v, sizeof v));
	assert_non_null(strstr(v, "; HttpOnly"));
	assert_non_null(strstr(v, "; SameSite=Strict"));
	assert_non_null(strstr(v, "; Path=/"));
	assert_null(strstr(v, code));
	assert_null(strstr(resp_body(&r), fx.token));
	cookie_of(&r, cookie, sizeof cookie);
	assert_int_equal(strncmp(cookie, "sb_session_", 11), 0);
	buf_free(&r.raw);
	/* replayed: refused */
	r = post("/auth/login", fx.origin, "application/json", body, NULL);
	assert_int_equal(r.status, 401);
	assert_null(resp_header(&r, "set-cookie", v, sizeof v));
	assert_non_null(strstr(resp_body(&r), "used already"));
	buf_free(&r.raw);
	/* the session says so */
	{
		char req[1024];

		snprintf(req, sizeof req,
		         "GET /auth/session HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nCookie: other=1; %s\r\n"
		         "Connection: close\r\n\r\n",
		         fx.d.port, cookie);
		r = http_raw(req);
		assert_int_equal(r.status, 200);
		assert_non_null(strstr(resp_body(&r), "\"signedIn\":true"));
		assert_non_null(strstr(resp_body(&r), "operator.admin"));
		buf_free(&r.raw);
	}
	/* the cookie opens the control plane, with no token */
	c = ws_client(json_pack("{ss ss ss}", "scenario", "status", "cookie", cookie, "origin",
	                        fx.origin));
	assert_null(json_object_get(c, "fail"));
	assert_true(json_is_true(json_object_get(json_object_get(c, "hello"), "ok")));
	json_decref(c);
	/* ... but not from a page of another origin */
	c = ws_client(json_pack("{ss ss ss}", "scenario", "status", "cookie", cookie, "origin",
	                        bad_origin));
	assert_int_equal(json_integer_value(json_object_get(c, "closeCode")), 1008);
	assert_non_null(strstr(json_string_value(json_object_get(c, "closeReason")), "origin"));
	json_decref(c);
	/* sign out: the cookie stops working */
	r = post("/auth/logout", fx.origin, "application/json", "{}", cookie);
	assert_int_equal(r.status, 200);
	assert_non_null(resp_header(&r, "set-cookie", v, sizeof v));
	assert_non_null(strstr(v, "Max-Age=0"));
	buf_free(&r.raw);
	c = ws_client(json_pack("{ss ss ss}", "scenario", "status", "cookie", cookie, "origin",
	                        fx.origin));
	assert_string_equal(json_string_value(json_object_get(json_object_get(
	                        json_object_get(c, "hello"), "error"), "code")),
	                    "UNAUTHORIZED");
	json_decref(c);
	/* a bad token is refused; the real one signs in */
	snprintf(body, sizeof body, "{\"token\":\"%s-not\"}", fx.token);
	r = post("/auth/login", fx.origin, "application/json", body, NULL);
	assert_int_equal(r.status, 401);
	buf_free(&r.raw);
	snprintf(body, sizeof body, "{\"token\":\"%s\"}", fx.token);
	r = post("/auth/login", fx.origin, "application/json", body, NULL);
	assert_int_equal(r.status, 200);
	buf_free(&r.raw);
}

/* ---- 3. the browser ---- */

static void test_the_pages_in_a_browser(void **state)
{
	char script[1024], shots[1024], profile[700], code[128], *arg, chunk[4096];
	const char *ci = getenv("CI");
	bool in_ci = ci && strcmp(ci, "true") == 0;
	struct buf out;
	json_t *opts, *res;
	int fds[2], st = 0;
	pid_t pid;
	ssize_t n;

	(void)state;
	snprintf(script, sizeof script, "%s/tests/fakes/node_modules/playwright-core/package.json",
	         SB_SOURCE_DIR);
	if (access("/usr/bin/chromium", X_OK) != 0 || access(script, R_OK) != 0) {
		if (in_ci)
			fail_msg("chromium (/usr/bin/chromium, scripts/deps.sh test) or playwright-core "
			         "(tests/fakes, npm ci) is missing");
		fprintf(stderr, "skipped: chromium or playwright-core is not installed (make test "
		                "installs both)\n");
		skip();
	}
	dashboard_code(code, sizeof code);
	if (!getcwd(shots, sizeof shots - 32))
		fail();
	{
		size_t l = strlen(shots);

		snprintf(shots + l, sizeof shots - l, "/ui-screenshots");
	}
	snprintf(profile, sizeof profile, "%s/chromium-profile", fx.home);
	mkdir(profile, 0700);
	snprintf(script, sizeof script, "%s/tests/browser/ui_browser.js", SB_SOURCE_DIR);
	opts = json_pack("{ss ss ss s{ss ss ss} ss ss sI}", "url", fx.origin, "code", code, "commit",
	                 fx.commit, "pairing", "channel", PAIR_CHANNEL, "code", fx.pair_code,
	                 "sender", PAIR_SENDER, "shots", shots, "profile", profile, "timeoutMs",
	                 (json_int_t)240000);
	arg = json_dumps(opts, JSON_COMPACT);
	json_decref(opts);
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	if (pid == 0) {
		const char *argv[] = {"node", script, arg, NULL};

		dup2(fds[1], STDOUT_FILENO);
		close(fds[0]);
		close(fds[1]);
		execvp("node", (char *const *)argv);
		_exit(127);
	}
	free(arg);
	close(fds[1]);
	buf_init(&out, 4 << 20);
	while ((n = read(fds[0], chunk, sizeof chunk)) > 0 || (n < 0 && errno == EINTR))
		if (n > 0)
			buf_append(&out, chunk, (size_t)n);
	close(fds[0]);
	waitpid(pid, &st, 0);
	res = out.data ? json_loads(out.data, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
	if (!res || json_object_get(res, "fail") || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "ui_browser: %s\n", out.data ? out.data : "(no output)");
		print_log();
	}
	buf_free(&out);
	assert_non_null(res);
	assert_null(json_object_get(res, "fail"));
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(json_array_size(json_object_get(res, "steps")), 9);
	json_decref(res);
	/* what the clicks did, seen from outside the browser: the approved
	 * command ran; the sender is on the allow list */
	{
		char path[1024];
		const char *approved[] = {"pairing", "approved", PAIR_CHANNEL, "--json", NULL};

		struct buf o;

		snprintf(path, sizeof path, "%s/workspaces/main/made.txt", fx.home);
		assert_int_equal(access(path, F_OK), 0);
		buf_init(&o, 1 << 20);
		assert_int_equal(harness_cli(fx.home, &o, approved), 0);
		assert_non_null(strstr(o.data, PAIR_SENDER));
		buf_free(&o);
	}
	/* screenshots of each page */
	{
		static const char *const pages[] = {"chat",    "approvals",  "channels",
		                                    "sessions", "workspaces", "schedules",
		                                    "health",  "mobile-chat"};
		for (size_t i = 0; i < sizeof pages / sizeof *pages; i++) {
			char p[1100];
			struct stat sb;

			snprintf(p, sizeof p, "%s/%s.png", shots, pages[i]);
			assert_int_equal(stat(p, &sb), 0);
			assert_true(sb.st_size > 1000);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_page_is_served_with_its_policy),
	    cmocka_unit_test(test_sign_in_with_a_code_once),
	    cmocka_unit_test(test_the_pages_in_a_browser),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, setup, teardown);
}
