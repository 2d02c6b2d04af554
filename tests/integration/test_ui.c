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
#include <sodium.h>

#include <git2.h>

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
	"  - text: \"I made it.\"\n"                                                               \
	"  - match: hostile\n"                                                                     \
	"    text: \"<img src=x onerror=alert('reply')> \"\n"                                      \
	"    tool_calls:\n"                                                                        \
	"      - {name: bash, input: {command: \"cat 'evil<img src=x onerror=alert(1)>.md'\"}}\n"  \
	"  - text: \"done <script>alert('done')</script>\"\n"                                      \
	"  - match: approve-me\n"                                                                  \
	"    tool_calls:\n"                                                                        \
	"      - {name: bash, input: {command: \"touch '<img src=x onerror=alert(9)>'\"}}\n"       \
	"  - text: \"approved\"\n"

/* Values a non-owner controls, planted through the real channels for the
 * hostile browser test (tests/browser/ui_hostile.js). */
#define HOSTILE_SENDER "<img src=x onerror=alert('sender')>"
/* The sender as the untrusted-content label in the transcript carries it:
 * a safe alphabet only (gateway/pipeline/dispatcher.c). */
#define HOSTILE_SENDER_LABEL "_img_src_x_onerror_alert__sender___"
#define HOSTILE_PENDING "\"><svg/onload=alert('pending')>"
#define HOSTILE_CONV "<img/src=x/onerror=alert('conv')>"
#define HOSTILE_TEXT "hostile <img src=x onerror=alert('text')>"
#define HOSTILE_FILE "evil<img src=x onerror=alert(1)>.md"
#define HOSTILE_FILE_TEXT "<script>alert(\"file\")</script>"
#define HOSTILE_UNTRACKED "untracked<svg onload=alert(2)>.txt"
#define HOSTILE_COMMIT "<img src=x onerror=alert(\"commit\")> subject"
#define HOSTILE_DEVICE "<img src=x onerror=alert('device')>"
#define HOOK_SECRET "hook-secret-for-the-ui-tests-0123456789"

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

static json_t *ws_client(json_t *opts);

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
	snprintf(
	    cfg, sizeof cfg,
	    "providers:\n"
	    "  - {id: s, api: scripted, script: script.yaml}\n"
	    "agents:\n"
	    "  - id: main\n"
	    "    default: true\n"
	    "    model: s/scripted-ui\n"
	    "    sandbox: %s\n"
	    "    permissions:\n"
	    "      - {ask_commands: [touch]}\n"
	    "channels:\n"
	    "  webhook:\n"
	    "    dm_policy: pairing\n"
	    "    group_policy: open\n"
	    "    hooks:\n"
	    "      - {name: h, verify: bearer, secret: \"${file:secrets/hook}\"}\n"
	    "      - {name: bg, verify: bearer, secret: \"${file:secrets/hook}\", mode: none}\n"
	    "security:\n"
	    "  approval_timeout: 90s\n"
	    "cron:\n"
	    "  - {id: nightly, cron: \"0 3 * * *\", payload: \"nightly check\"}\n",
	    sandbox_probe(NULL, why, sizeof why) == 0 ? "workspace-write" : "full");
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/secrets", fx.home);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/secrets/hook", fx.home);
	if (harness_write_file(path, HOOK_SECRET "\n") != 0 || chmod(path, 0600) != 0)
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

/* Every answer on the port, whatever its status or route, carries the
 * headers that keep a browser from rendering, framing or sniffing it:
 * errors and 304s included (a 404 or a 403 is a page too). */
static void assert_policy(const struct resp *r, const char *what)
{
	char v[1024];

	if (!resp_header(r, "content-security-policy", v, sizeof v) ||
	    !strstr(v, "default-src 'none'") || !strstr(v, "frame-ancestors 'none'"))
		fail_msg("%s (%ld): no strict Content-Security-Policy: %s", what, r->status, v);
	if (!resp_header(r, "x-content-type-options", v, sizeof v) || strcmp(v, "nosniff") != 0)
		fail_msg("%s (%ld): no nosniff", what, r->status);
	if (!resp_header(r, "x-frame-options", v, sizeof v) || strcmp(v, "DENY") != 0)
		fail_msg("%s (%ld): no X-Frame-Options: DENY", what, r->status);
	if (!resp_header(r, "referrer-policy", v, sizeof v) || strcmp(v, "no-referrer") != 0)
		fail_msg("%s (%ld): no Referrer-Policy", what, r->status);
}

static void test_every_answer_carries_the_policy(void **state)
{
	char host[64], etag[128], req[1024], v[256];
	struct resp r;
	struct {
		const char *what, *path, *host, *extra;
		long status;
	} gets[] = {
	    {"the page", "/", host, NULL, 200},
	    {"a script", "/ui/app.js", host, NULL, 200},
	    {"an unknown file", "/ui/nope.js", host, NULL, 404},
	    {"a foreign Host", "/", "attacker.example:1", NULL, 403},
	    {"an unknown path", "/nope", host, NULL, 404},
	    {"the session check", "/auth/session", host, NULL, 200},
	    {"the session check, foreign Origin", "/auth/session", host,
	     "Origin: http://evil.example\r\n", 403},
	    {"health", "/healthz", host, NULL, 200},
	    {"metrics", "/metrics", host, NULL, 200},
	};

	(void)state;
	snprintf(host, sizeof host, "127.0.0.1:%d", fx.d.port);
	for (size_t i = 0; i < sizeof gets / sizeof *gets; i++) {
		r = get(gets[i].path, gets[i].host, gets[i].extra);
		assert_int_equal(r.status, gets[i].status);
		assert_policy(&r, gets[i].what);
		if (i == 0)
			assert_non_null(resp_header(&r, "etag", etag, sizeof etag));
		buf_free(&r.raw);
	}
	/* a revalidated file (304) */
	snprintf(req, sizeof req, "If-None-Match: %s\r\n", etag);
	r = get("/", host, req);
	assert_int_equal(r.status, 304);
	assert_policy(&r, "not modified");
	buf_free(&r.raw);
	/* a method the route does not take */
	snprintf(req, sizeof req,
	         "POST / HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
	         host);
	r = http_raw(req);
	assert_int_equal(r.status, 405);
	assert_policy(&r, "method not allowed");
	buf_free(&r.raw);
	/* a body over gateway.max_body */
	snprintf(req, sizeof req,
	         "POST /auth/login HTTP/1.1\r\nHost: %s\r\nOrigin: %s\r\nContent-Type: "
	         "application/json\r\nContent-Length: 99999999\r\nConnection: close\r\n\r\n",
	         host, fx.origin);
	r = http_raw(req);
	assert_int_equal(r.status, 413);
	assert_policy(&r, "too large");
	buf_free(&r.raw);
	/* sign-in answers: refused origin, wrong type, bad body */
	r = post("/auth/login", "http://evil.example", "application/json", "{}", NULL);
	assert_int_equal(r.status, 403);
	assert_policy(&r, "sign-in from a foreign origin");
	buf_free(&r.raw);
	r = post("/auth/login", fx.origin, "text/plain", "{}", NULL);
	assert_int_equal(r.status, 415);
	assert_policy(&r, "sign-in as text/plain");
	buf_free(&r.raw);
	/* only application/json itself (with parameters) is JSON */
	r = post("/auth/login", fx.origin, "application/jsonp", "[]", NULL);
	assert_int_equal(r.status, 415);
	buf_free(&r.raw);
	r = post("/auth/login", fx.origin, "application/json; charset=utf-8", "[]", NULL);
	assert_int_equal(r.status, 400);
	assert_policy(&r, "a bad sign-in body");
	assert_null(resp_header(&r, "set-cookie", v, sizeof v));
	buf_free(&r.raw);
}

/* A browser's upgrade from any origin but the gateway's own is closed
 * before the challenge, whatever the spelling; the gateway's own origin in
 * any case and on every loopback name gets in. An Origin too long to be
 * read is not taken for "no Origin" (a script): it is refused too. */
static void test_foreign_origins_are_closed_before_the_challenge(void **state)
{
	char refused[8][700], allowed[4][128];
	json_t *c;

	(void)state;
	snprintf(refused[0], sizeof refused[0], "null");
	snprintf(refused[1], sizeof refused[1], "http://127.0.0.1:%d", fx.d.port + 1);
	snprintf(refused[2], sizeof refused[2], "https://127.0.0.1:%d", fx.d.port);
	snprintf(refused[3], sizeof refused[3], "http://127.0.0.1:%d.evil.example", fx.d.port);
	snprintf(refused[4], sizeof refused[4], "http://localhost.:%d", fx.d.port);
	snprintf(refused[5], sizeof refused[5], "http://127.0.0.1");
	snprintf(refused[6], sizeof refused[6], "file://");
	memset(refused[7], 'a', 600);
	memcpy(refused[7], "http://", 7);
	snprintf(refused[7] + 600, sizeof refused[7] - 600, ".example:%d", fx.d.port);
	for (size_t i = 0; i < 8; i++) {
		c = ws_client(json_pack("{ss ss ss}", "scenario", "status", "origin", refused[i],
		                        "token", fx.token));
		if (json_integer_value(json_object_get(c, "closeCode")) != 1008 ||
		    json_object_get(c, "hello"))
			fail_msg("origin %.60s was let in: %s", refused[i], json_dumps(c, 0));
		assert_non_null(
		    strstr(json_string_value(json_object_get(c, "closeReason")), "origin"));
		json_decref(c);
	}
	snprintf(allowed[0], sizeof allowed[0], "%s", fx.origin);
	snprintf(allowed[1], sizeof allowed[1], "HTTP://LOCALHOST:%d", fx.d.port);
	snprintf(allowed[2], sizeof allowed[2], "http://[::1]:%d/", fx.d.port);
	snprintf(allowed[3], sizeof allowed[3], "127.0.0.1:%d",
	         fx.d.port); /* lws' own, not a browser's */
	for (size_t i = 0; i < 4; i++) {
		c = ws_client(json_pack("{ss ss ss}", "scenario", "status", "origin", allowed[i],
		                        "token", fx.token));
		if (!json_is_true(json_object_get(json_object_get(c, "hello"), "ok")))
			fail_msg("origin %s was refused: %s", allowed[i], json_dumps(c, 0));
		json_decref(c);
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

/* A web session's key, as the page makes one: an Ed25519 pair. seed_hex
 * goes to ws_client.js (webKey), pub_b64 to POST /auth/login (key). */
struct web_key {
	char seed_hex[65];
	char pub_b64[64];
};

static void web_key_new(struct web_key *k)
{
	unsigned char seed[32], pk[32], sk[64];

	randombytes_buf(seed, sizeof seed);
	crypto_sign_seed_keypair(pk, sk, seed);
	sodium_bin2hex(k->seed_hex, sizeof k->seed_hex, seed, sizeof seed);
	sodium_bin2base64(k->pub_b64, sizeof k->pub_b64, pk, sizeof pk,
	                  sodium_base64_VARIANT_URLSAFE_NO_PADDING);
}

/* ws_client.js running in the background: its pid and the read end of its
 * stdout. */
struct ws_run {
	pid_t pid;
	int fd;
};

/* Starts ws_client.js against the control plane with extra options. */
static struct ws_run ws_client_start(json_t *opts)
{
	char script[1024], *arg;
	struct ws_run w;
	int fds[2];

	if (!json_object_get(opts, "url"))
		json_object_set_new(opts, "url", json_sprintf("ws://127.0.0.1:%d/ws", fx.d.port));
	if (!json_object_get(opts, "timeoutMs"))
		json_object_set_new(opts, "timeoutMs", json_integer(15000));
	arg = json_dumps(opts, JSON_COMPACT);
	json_decref(opts);
	snprintf(script, sizeof script, "%s/tests/fakes/ws_client.js", SB_SOURCE_DIR);
	assert_int_equal(pipe(fds), 0);
	w.pid = fork();
	if (w.pid == 0) {
		const char *argv[] = {"node", script, arg, NULL};

		dup2(fds[1], STDOUT_FILENO);
		close(fds[0]);
		close(fds[1]);
		execvp("node", (char *const *)argv);
		_exit(127);
	}
	free(arg);
	close(fds[1]);
	w.fd = fds[0];
	return w;
}

/* Waits for it and returns the JSON line it printed. */
static json_t *ws_client_finish(struct ws_run w)
{
	char chunk[4096];
	struct buf out;
	json_t *r;
	ssize_t n;
	int st;

	buf_init(&out, 1 << 20);
	while ((n = read(w.fd, chunk, sizeof chunk)) > 0 || (n < 0 && errno == EINTR))
		if (n > 0)
			buf_append(&out, chunk, (size_t)n);
	close(w.fd);
	waitpid(w.pid, &st, 0);
	r = out.data ? json_loads(out.data, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
	if (!r)
		fprintf(stderr, "ws_client: %s\n", out.data ? out.data : "(nothing)");
	buf_free(&out);
	assert_non_null(r);
	return r;
}

/* Runs ws_client.js against the control plane with extra options. */
static json_t *ws_client(json_t *opts)
{
	return ws_client_finish(ws_client_start(opts));
}

/* How many times the daemon's log holds needle. */
static int log_count(const struct harness_daemon *d, const char *needle)
{
	struct buf log;
	int n = 0;

	buf_init(&log, 64 << 20);
	harness_daemon_log(d, &log);
	for (const char *p = log.data; p && (p = strstr(p, needle)); p += strlen(needle))
		n++;
	buf_free(&log);
	return n;
}

/* Until the log holds needle more than `before` times (or timeout_ms). */
static bool log_grows(const struct harness_daemon *d, const char *needle, int before,
                      int timeout_ms)
{
	for (int waited = 0; waited <= timeout_ms; waited += 50) {
		if (log_count(d, needle) > before)
			return true;
		usleep(50 * 1000);
	}
	return false;
}

static void test_sign_in_with_a_code_once(void **state)
{
	char code[128], body[512], cookie[256], v[512], bad_origin[] = "http://127.0.0.1:1";
	struct web_key key, other;
	struct resp r;
	json_t *c;

	(void)state;
	web_key_new(&key);
	web_key_new(&other);
	dashboard_code(code, sizeof code);
	/* without the page's key: refused, the code not spent */
	snprintf(body, sizeof body, "{\"code\":\"%s\"}", code);
	r = post("/auth/login", fx.origin, "application/json", body, NULL);
	assert_int_equal(r.status, 400);
	assert_null(resp_header(&r, "set-cookie", v, sizeof v));
	assert_non_null(strstr(resp_body(&r), "key"));
	buf_free(&r.raw);
	snprintf(body, sizeof body, "{\"code\":\"%s\",\"key\":\"not-a-key\"}", code);
	r = post("/auth/login", fx.origin, "application/json", body, NULL);
	assert_int_equal(r.status, 400);
	buf_free(&r.raw);
	snprintf(body, sizeof body, "{\"code\":\"%s\",\"key\":\"%s\"}", code, key.pub_b64);
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
	/* the cookie and the page's signature open the control plane, with no
	 * token */
	c = ws_client(json_pack("{ss ss ss ss}", "scenario", "status", "cookie", cookie, "origin",
	                        fx.origin, "webKey", key.seed_hex));
	assert_null(json_object_get(c, "fail"));
	assert_true(json_is_true(json_object_get(json_object_get(c, "hello"), "ok")));
	json_decref(c);
	/* the cookie alone does not: browsers send it to every port of the host,
	 * so another program listening on 127.0.0.1 can read it */
	c = ws_client(json_pack("{ss ss}", "scenario", "status", "cookie", cookie));
	assert_string_equal(json_string_value(json_object_get(
	                        json_object_get(json_object_get(c, "hello"), "error"), "code")),
	                    "UNAUTHORIZED");
	assert_int_equal(json_integer_value(json_object_get(c, "closeCode")), 1008);
	json_decref(c);
	/* nor with another key's signature, nor with a signature of another
	 * connection's challenge */
	c = ws_client(json_pack("{ss ss ss}", "scenario", "status", "cookie", cookie, "webKey",
	                        other.seed_hex));
	assert_string_equal(json_string_value(json_object_get(
	                        json_object_get(json_object_get(c, "hello"), "error"), "code")),
	                    "UNAUTHORIZED");
	json_decref(c);
	c = ws_client(json_pack(
	    "{ss ss ss ss}", "scenario", "status", "cookie", cookie, "webKey", key.seed_hex,
	    "webNonce", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
	assert_string_equal(json_string_value(json_object_get(
	                        json_object_get(json_object_get(c, "hello"), "error"), "code")),
	                    "UNAUTHORIZED");
	json_decref(c);
	/* a cookie of the same name planted for a longer path (cookie tossing,
	 * from another port of the host) comes first; the real one still works */
	{
		char tossed[600];

		snprintf(tossed, sizeof tossed, "sb_session_%d=planted-by-someone-else; %s",
		         fx.d.port, cookie);
		c = ws_client(json_pack("{ss ss ss ss}", "scenario", "status", "cookie", tossed,
		                        "origin", fx.origin, "webKey", key.seed_hex));
		assert_true(json_is_true(json_object_get(json_object_get(c, "hello"), "ok")));
		json_decref(c);
	}
	/* ... but not from a page of another origin */
	c = ws_client(json_pack("{ss ss ss ss}", "scenario", "status", "cookie", cookie, "origin",
	                        bad_origin, "webKey", key.seed_hex));
	assert_int_equal(json_integer_value(json_object_get(c, "closeCode")), 1008);
	assert_non_null(strstr(json_string_value(json_object_get(c, "closeReason")), "origin"));
	json_decref(c);
	/* sign out: the session's live connection is closed, and the cookie
	 * stops working */
	{
		const char *connected = "msg=\"client connected\"";
		int before = log_count(&fx.d, connected);
		struct ws_run held =
		    ws_client_start(json_pack("{ss ss ss ss}", "scenario", "hold", "cookie", cookie,
		                              "origin", fx.origin, "webKey", key.seed_hex));

		/* the connect is in the log once the gateway has answered it */
		assert_true(log_grows(&fx.d, connected, before, 10000));
		r = post("/auth/logout", fx.origin, "application/json", "{}", cookie);
		assert_int_equal(r.status, 200);
		assert_non_null(strstr(resp_body(&r), "\"signedOut\":true"));
		assert_non_null(resp_header(&r, "set-cookie", v, sizeof v));
		assert_non_null(strstr(v, "Max-Age=0"));
		buf_free(&r.raw);
		c = ws_client_finish(held);
		assert_true(json_is_true(json_object_get(json_object_get(c, "hello"), "ok")));
		assert_int_equal(json_integer_value(json_object_get(c, "closeCode")), 1008);
		assert_string_equal(json_string_value(json_object_get(c, "closeReason")),
		                    "signed out");
		json_decref(c);
	}
	c = ws_client(json_pack("{ss ss ss ss}", "scenario", "status", "cookie", cookie, "origin",
	                        fx.origin, "webKey", key.seed_hex));
	assert_string_equal(json_string_value(json_object_get(json_object_get(
	                        json_object_get(c, "hello"), "error"), "code")),
	                    "UNAUTHORIZED");
	json_decref(c);
	/* a bad token is refused; the real one signs in */
	snprintf(body, sizeof body, "{\"token\":\"%s-not\",\"key\":\"%s\"}", fx.token, key.pub_b64);
	r = post("/auth/login", fx.origin, "application/json", body, NULL);
	assert_int_equal(r.status, 401);
	buf_free(&r.raw);
	snprintf(body, sizeof body, "{\"token\":\"%s\",\"key\":\"%s\"}", fx.token, key.pub_b64);
	r = post("/auth/login", fx.origin, "application/json", body, NULL);
	assert_int_equal(r.status, 200);
	buf_free(&r.raw);
}

/* A browser paired as a device proves itself with its non-extractable key
 * on every connection; it is never handed a device token, a bearer
 * credential its page's scripts could read and use elsewhere. A signed
 * connect captured on one connection is worthless on another. A device
 * approved for reading cannot write or administer. */
static void test_a_browser_device_gets_no_bearer_token(void **state)
{
	char keyfile[700], device_id[80], url[64];
	const char *approve[] = {"devices", "approve", device_id, "--url", url, NULL};
	const json_t *auth;
	json_t *c;

	(void)state;
	snprintf(keyfile, sizeof keyfile, "%s/browser-device.pem", fx.home);
	snprintf(url, sizeof url, "ws://127.0.0.1:%d/", fx.d.port);
	c = ws_client(json_pack("{ss ss sb s[s] ss}", "scenario", "connect", "keyfile", keyfile,
	                        "withDevice", 1, "scopes", "operator.read", "origin", fx.origin));
	assert_string_equal(json_string_value(json_object_get(
	                        json_object_get(json_object_get(c, "hello"), "error"), "code")),
	                    "NOT_PAIRED");
	snprintf(
	    device_id, sizeof device_id, "%s",
	    json_string_value(json_object_get(
	        json_object_get(json_object_get(json_object_get(c, "hello"), "error"), "details"),
	        "deviceId")));
	json_decref(c);
	assert_int_equal(strlen(device_id), 64);
	assert_int_equal(harness_cli(fx.home, NULL, approve), 0);
	/* from a page: in, with no token */
	c = ws_client(json_pack("{ss ss sb s[s] ss}", "scenario", "connect", "keyfile", keyfile,
	                        "withDevice", 1, "scopes", "operator.read", "origin", fx.origin));
	auth = json_object_get(json_object_get(json_object_get(c, "hello"), "payload"), "auth");
	assert_true(json_is_true(json_object_get(json_object_get(c, "hello"), "ok")));
	assert_string_equal(json_string_value(json_object_get(auth, "deviceId")), device_id);
	assert_null(json_object_get(auth, "deviceToken"));
	json_decref(c);
	/* a program (no Origin) still gets one */
	c = ws_client(json_pack("{ss ss sb s[s]}", "scenario", "connect", "keyfile", keyfile,
	                        "withDevice", 1, "scopes", "operator.read"));
	auth = json_object_get(json_object_get(json_object_get(c, "hello"), "payload"), "auth");
	assert_true(json_string_length(json_object_get(auth, "deviceToken")) >= 40);
	json_decref(c);
	/* a captured signed connect, sent again on a new connection */
	c = ws_client(json_pack("{ss ss sb s[s] ss}", "scenario", "device-replay", "keyfile",
	                        keyfile, "withDevice", 1, "scopes", "operator.read", "origin",
	                        fx.origin));
	assert_true(json_is_true(json_object_get(json_object_get(c, "first"), "ok")));
	for (size_t i = 0; i < 2; i++) {
		const json_t *rp = json_array_get(json_object_get(c, "replays"), i);

		assert_string_equal(
		    json_string_value(json_object_get(
		        json_object_get(json_object_get(rp, "hello"), "error"), "code")),
		    "UNAUTHORIZED");
		assert_int_equal(
		    json_integer_value(json_object_get(json_object_get(rp, "closed"), "code")),
		    1008);
	}
	json_decref(c);
	/* read only: write and admin methods are refused */
	{
		static const char *const methods[] = {"chat.send", "heartbeat.run",
		                                      "dashboard.code", "workspace.file",
		                                      "pairing.approve"};
		for (size_t i = 0; i < sizeof methods / sizeof *methods; i++) {
			c = ws_client(json_pack("{ss ss sb s[s] ss ss}", "scenario", "call",
			                        "keyfile", keyfile, "withDevice", 1, "scopes",
			                        "operator.read", "origin", fx.origin, "method",
			                        methods[i]));
			assert_true(
			    json_is_true(json_object_get(json_object_get(c, "hello"), "ok")));
			assert_string_equal(
			    json_string_value(json_object_get(
			        json_object_get(json_object_get(c, "reply"), "error"), "code")),
			    "FORBIDDEN");
			json_decref(c);
		}
	}
}

/* Signs in to the gateway on port with the token of home and key: the
 * cookie ("sb_session_PORT=VALUE") into cookie. */
static void sign_in_at(int port, const char *home, const struct web_key *key, char *cookie,
                       size_t size)
{
	char path[700], body[512], origin[64], req[1024];
	struct buf tok;
	struct resp r = {0};
	int fd;

	snprintf(path, sizeof path, "%s/gateway.token", home);
	buf_init(&tok, 4096);
	assert_int_equal(harness_read_file(path, &tok), 0);
	snprintf(origin, sizeof origin, "http://127.0.0.1:%d", port);
	snprintf(body, sizeof body, "{\"token\":\"%.*s\",\"key\":\"%s\"}",
	         (int)strcspn(tok.data, "\r\n"), tok.data, key->pub_b64);
	buf_free(&tok);
	snprintf(req, sizeof req,
	         "POST /auth/login HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nOrigin: %s\r\nContent-Type: "
	         "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
	         port, origin, strlen(body), body);
	fd = harness_connect(port);
	assert_true(fd >= 0);
	buf_init(&r.raw, 1 << 20);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	r.status = harness_read_response(fd, &r.raw, 10000);
	close(fd);
	assert_int_equal(r.status, 200);
	cookie_of(&r, cookie, size);
	buf_free(&r.raw);
}

/* GET /auth/session at port with a Cookie header: whether signed in. */
static bool signed_in_at(int port, const char *cookies)
{
	char req[2048];
	struct resp r = {0};
	bool in;
	int fd;

	snprintf(req, sizeof req,
	         "GET /auth/session HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nCookie: %s\r\n"
	         "Connection: close\r\n\r\n",
	         port, cookies);
	fd = harness_connect(port);
	assert_true(fd >= 0);
	buf_init(&r.raw, 1 << 20);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	r.status = harness_read_response(fd, &r.raw, 10000);
	close(fd);
	assert_int_equal(r.status, 200);
	in = strstr(resp_body(&r), "\"signedIn\":true") != NULL;
	buf_free(&r.raw);
	return in;
}

/* A second gateway on the same host (another port; browsers send both
 * gateways' cookies to each): each knows only its own session. Sessions
 * and codes end on time, live connections included: a connection opened
 * by a session is closed when the session expires, with nobody calling
 * /auth. At most 64 sessions: the oldest goes. */
static void test_sessions_end_on_time_and_stay_with_their_gateway(void **state)
{
	const char *init[] = {"init", NULL};
	char home[512], path[700], code[128], body[512], url[64], both[1200];
	char cookie_a[256], cookie_b[256], first[256], last[256];
	const char *dash[] = {"dashboard", "--json", "--no-open", "--url", url, NULL};
	struct harness_daemon b = {0};
	struct web_key key;
	struct resp r;
	struct buf out;
	json_t *c;

	(void)state;
	web_key_new(&key);
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	assert_int_equal(
	    harness_write_file(path, "gateway:\n"
	                             "  ui: {session_ttl: 15s, code_ttl: 10s}\n"
	                             "  control: {tick_interval: 1s}\n"
	                             "providers:\n"
	                             "  - {id: offline, api: scripted, script: builtin:offline}\n"
	                             "agents:\n"
	                             "  - {id: main, default: true, workspace: workspaces/main, "
	                             "model: offline/demo}\n"),
	    0);
	assert_int_equal(harness_daemon_start(&b, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&b, 20000), 0);
	snprintf(url, sizeof url, "ws://127.0.0.1:%d/", b.port);

	/* each gateway's cookie is its own */
	sign_in_at(fx.d.port, fx.home, &key, cookie_a, sizeof cookie_a);
	sign_in_at(b.port, home, &key, cookie_b, sizeof cookie_b);
	assert_string_not_equal(cookie_a, cookie_b);
	snprintf(both, sizeof both, "%s; %s", cookie_a, cookie_b);
	assert_true(signed_in_at(fx.d.port, both));
	assert_true(signed_in_at(b.port, both));
	assert_false(signed_in_at(b.port, cookie_a));
	assert_false(signed_in_at(fx.d.port, cookie_b));
	/* A's cookie value under B's name is nothing at B */
	{
		char renamed[300];

		snprintf(renamed, sizeof renamed, "sb_session_%d=%s", b.port,
		         strchr(cookie_a, '=') + 1);
		assert_false(signed_in_at(b.port, renamed));
	}

	/* a live connection of B's session, held until the session expires */
	{
		struct ws_run held = ws_client_start(
		    json_pack("{ss ss ss ss sI}", "url", url, "scenario", "hold", "cookie",
		              cookie_b, "webKey", key.seed_hex, "timeoutMs", (json_int_t)100000));

		/* meanwhile: a code is good for code_ttl only */
		buf_init(&out, 1 << 20);
		assert_int_equal(harness_cli(home, &out, dash), 0);
		{
			json_t *j = json_loads(out.data, JSON_DISABLE_EOF_CHECK, NULL);

			assert_non_null(j);
			snprintf(code, sizeof code, "%s",
			         json_string_value(json_object_get(j, "code")));
			json_decref(j);
		}
		buf_free(&out);
		sleep(11);
		snprintf(body, sizeof body, "{\"code\":\"%s\",\"key\":\"%s\"}", code, key.pub_b64);
		{
			char req[1024], origin[64];
			int fd = harness_connect(b.port);

			snprintf(origin, sizeof origin, "http://127.0.0.1:%d", b.port);
			snprintf(req, sizeof req,
			         "POST /auth/login HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nOrigin: %s\r\n"
			         "Content-Type: application/json\r\nContent-Length: %zu\r\n"
			         "Connection: close\r\n\r\n%s",
			         b.port, origin, strlen(body), body);
			buf_init(&r.raw, 1 << 20);
			assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
			r.status = harness_read_response(fd, &r.raw, 10000);
			close(fd);
			assert_int_equal(r.status, 401);
			buf_free(&r.raw);
		}
		c = ws_client_finish(held);
		if (json_object_get(c, "fail"))
			fail_msg("the session's connection outlived the session: %s",
			         json_string_value(json_object_get(c, "fail")));
		assert_true(json_is_true(json_object_get(json_object_get(c, "hello"), "ok")));
		assert_int_equal(json_integer_value(json_object_get(c, "closeCode")), 1008);
		assert_non_null(
		    strstr(json_string_value(json_object_get(c, "closeReason")), "expired"));
		/* the session lasted its 15 s, and was closed within a few ticks of it */
		assert_true(json_integer_value(json_object_get(c, "heldMs")) < 25000);
		json_decref(c);
		assert_false(signed_in_at(b.port, cookie_b));
	}

	/* 64 sessions at most: the oldest goes */
	sign_in_at(b.port, home, &key, first, sizeof first);
	for (int i = 0; i < 64; i++)
		sign_in_at(b.port, home, &key, last, sizeof last);
	assert_false(signed_in_at(b.port, first));
	assert_true(signed_in_at(b.port, last));

	assert_int_equal(harness_daemon_stop(&b, SIGTERM, 20000), 0);
	harness_rmrf(home);
}

/* ---- 3. the browser ---- */

/* Skips (fails under CI=true) when chromium or playwright-core is missing. */
static void need_browser(void)
{
	char p[1024];
	const char *ci = getenv("CI");

	snprintf(p, sizeof p, "%s/tests/fakes/node_modules/playwright-core/package.json",
	         SB_SOURCE_DIR);
	if (access("/usr/bin/chromium", X_OK) == 0 && access(p, R_OK) == 0)
		return;
	if (ci && strcmp(ci, "true") == 0)
		fail_msg("chromium (/usr/bin/chromium, scripts/deps.sh test) or playwright-core "
		         "(tests/fakes, npm ci) is missing");
	fprintf(stderr, "skipped: chromium or playwright-core is not installed (make test "
	                "installs both)\n");
	skip();
}

/* Runs tests/browser/NAME with opts (taken); its JSON line, after checking
 * that it passed and ran steps steps. */
static json_t *run_browser(const char *name, json_t *opts, size_t steps)
{
	char script[1024], chunk[4096], *arg;
	struct buf out;
	json_t *res;
	int fds[2], st = 0;
	pid_t pid;
	ssize_t n;

	snprintf(script, sizeof script, "%s/tests/browser/%s", SB_SOURCE_DIR, name);
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
		fprintf(stderr, "%s: %s\n", name, out.data ? out.data : "(no output)");
		print_log();
	}
	buf_free(&out);
	assert_non_null(res);
	assert_null(json_object_get(res, "fail"));
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(json_array_size(json_object_get(res, "steps")), steps);
	return res;
}

/* The screenshot directory under the build directory. */
static void shots_dir(char *out, size_t size)
{
	size_t l;

	if (!getcwd(out, size - 32))
		fail();
	l = strlen(out);
	snprintf(out + l, size - l, "/ui-screenshots");
}

static void test_the_pages_in_a_browser(void **state)
{
	char shots[1024], profile[700], code[128];
	json_t *res;

	(void)state;
	need_browser();
	dashboard_code(code, sizeof code);
	shots_dir(shots, sizeof shots);
	snprintf(profile, sizeof profile, "%s/chromium-profile", fx.home);
	mkdir(profile, 0700);
	res = run_browser("ui_browser.js",
	                  json_pack("{ss ss ss s{ss ss ss} ss ss sI}", "url", fx.origin, "code",
	                            code, "commit", fx.commit, "pairing", "channel", PAIR_CHANNEL,
	                            "code", fx.pair_code, "sender", PAIR_SENDER, "shots", shots,
	                            "profile", profile, "timeoutMs", (json_int_t)240000),
	                  9);
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

/* ---- 4. hostile values, in the browser ---- */

/* Commits one file on top of HEAD with message and author as given (what a
 * workspace cloned from elsewhere may hold); its id into id. */
static void commit_file(const char *dir, const char *name, const char *data, const char *message,
                        const char *author, char id[41])
{
	git_repository *repo = NULL;
	git_index *index = NULL;
	git_oid tree_id, commit_id, parent_id;
	git_tree *tree = NULL;
	git_commit *parent = NULL;
	git_signature *sig = NULL;
	char path[1024];

	snprintf(path, sizeof path, "%s/%s", dir, name);
	assert_int_equal(harness_write_file(path, data), 0);
	assert_int_equal(git_repository_open(&repo, dir), 0);
	assert_int_equal(git_repository_index(&index, repo), 0);
	assert_int_equal(git_index_add_bypath(index, name), 0);
	assert_int_equal(git_index_write_tree(&tree_id, index), 0);
	assert_int_equal(git_index_write(index), 0);
	assert_int_equal(git_tree_lookup(&tree, repo, &tree_id), 0);
	assert_int_equal(git_reference_name_to_id(&parent_id, repo, "HEAD"), 0);
	assert_int_equal(git_commit_lookup(&parent, repo, &parent_id), 0);
	assert_int_equal(git_signature_now(&sig, author, "x@example.com"), 0);
	assert_int_equal(
	    git_commit_create_v(&commit_id, repo, "HEAD", sig, sig, NULL, message, tree, 1, parent),
	    0);
	git_oid_tostr(id, 41, &commit_id);
	git_signature_free(sig);
	git_commit_free(parent);
	git_tree_free(tree);
	git_index_free(index);
	git_repository_free(repo);
}

/* POSTs a webhook delivery (bearer) to hook; the status, the body in out. */
static long hook_send(const char *hook, const char *sender, const char *conv, const char *text,
                      const char *id, struct buf *out)
{
	char path[64], idem[128];
	const char *hdrs[] = {"Authorization: Bearer " HOOK_SECRET,
	                      "Content-Type: application/json", idem, NULL};
	json_t *b = conv ? json_pack("{ss ss ss ss}", "text", text, "sender", sender, "sender_name",
	                             "<script>alert('name')</script>", "conversation", conv)
	                 : json_pack("{ss ss ss}", "text", text, "sender", sender, "sender_name",
	                             "<script>alert('name')</script>");
	char *body = json_dumps(b, JSON_COMPACT);
	long status;

	snprintf(path, sizeof path, "/hooks/%s", hook);
	snprintf(idem, sizeof idem, "Idempotency-Key: %s", id);
	status = harness_http(fx.d.port, "POST", path, hdrs, body, out);
	free(body);
	json_decref(b);
	return status;
}

/* Every value a non-owner (or a workspace from elsewhere) can put on a page,
 * planted through the real channels, then every page in chromium: nothing
 * planted runs or becomes markup, each shows as text; the CSP blocks what
 * would run if something got in; the browser keeps only a non-extractable
 * key; the cookie the browser also sends to any other port of 127.0.0.1
 * opens nothing; sign-out forgets the key. Neither the token nor a session
 * cookie reaches the log. */
static void test_hostile_values_stay_text_in_a_browser(void **state)
{
	char shots[1024], profile[700], code[128], ws[700], commit[41], session[256], p[1024];
	char pair_code[16] = "";
	const char *approve[] = {"pairing", "approve", "webhook", pair_code, NULL};
	struct buf out, log;
	json_t *res;

	(void)state;
	need_browser();
	/* the workspace: a hostile file name, contents, commit message; a
	 * hostile name on disk, not committed */
	snprintf(ws, sizeof ws, "%s/workspaces/main", fx.home);
	commit_file(ws, HOSTILE_FILE, HOSTILE_FILE_TEXT "\n<img src=x onerror=alert(\"c\")>\n",
	            HOSTILE_COMMIT "\n\n<script>alert(\"body\")</script>\n",
	            "\"onmouseover=alert(1) x", commit);
	snprintf(p, sizeof p, "%s/" HOSTILE_UNTRACKED, ws);
	assert_int_equal(harness_write_file(p, "<iframe src=javascript:alert(3)>\n"), 0);
	/* a sender asks to pair (its code in the reply) and is approved */
	buf_init(&out, 1 << 20);
	assert_int_equal(hook_send("h", HOSTILE_SENDER, NULL, "hi", "hostile-1", &out), 200);
	{
		const char *c = strstr(out.data, "code is ");

		assert_non_null(c);
		snprintf(pair_code, sizeof pair_code, "%.8s", c + 8);
	}
	buf_free(&out);
	assert_int_equal(harness_cli(fx.home, NULL, approve), 0);
	/* another one stays pending */
	buf_init(&out, 1 << 20);
	assert_int_equal(hook_send("h", HOSTILE_PENDING, NULL, "hi", "hostile-2", &out), 200);
	assert_non_null(strstr(out.data, "\"status\":\"pairing\""));
	buf_free(&out);
	/* a message in a conversation: the agent answers, with a tool call that
	 * prints the hostile file */
	buf_init(&out, 1 << 20);
	assert_int_equal(
	    hook_send("h", HOSTILE_SENDER, HOSTILE_CONV, HOSTILE_TEXT, "hostile-3", &out), 200);
	assert_non_null(strstr(out.data, "done <script>"));
	buf_free(&out);
	/* and one whose command waits for the operator */
	buf_init(&out, 1 << 20);
	assert_int_equal(
	    hook_send("bg", HOSTILE_SENDER, "other-conv", "approve-me", "hostile-4", &out), 202);
	buf_free(&out);
	snprintf(session, sizeof session, "agent:main:webhook:channel:%s", HOSTILE_CONV);
	/* a device (any local program may ask) with a hostile client id and
	 * platform, waiting for approval */
	{
		char keyfile[700];
		json_t *c;

		snprintf(keyfile, sizeof keyfile, "%s/hostile-device.pem", fx.home);
		c = ws_client(json_pack("{ss ss sb ss ss}", "scenario", "connect", "keyfile",
		                        keyfile, "withDevice", 1, "clientId", HOSTILE_DEVICE,
		                        "platform", "<b onmouseover=alert(4)>"));
		assert_string_equal(
		    json_string_value(json_object_get(
		        json_object_get(json_object_get(c, "hello"), "error"), "code")),
		    "NOT_PAIRED");
		json_decref(c);
	}

	dashboard_code(code, sizeof code);
	shots_dir(shots, sizeof shots);
	snprintf(profile, sizeof profile, "%s/chromium-hostile", fx.home);
	mkdir(profile, 0700);
	res = run_browser("ui_hostile.js",
	                  json_pack("{ss ss ss ss ss sI s{ss ss ss ss ss ss ss ss ss ss ss ss ss ss}}",
	                            "url", fx.origin, "code", code, "token", fx.token, "profile",
	                            profile, "shots", shots, "timeoutMs", (json_int_t)240000,
	                            "expect", "session", session, "text", HOSTILE_TEXT, "reply",
	                            "done <script>alert('done')</script>", "sender", HOSTILE_SENDER,
	                            "senderLabel", HOSTILE_SENDER_LABEL, "pending", HOSTILE_PENDING, "command",
	                            "touch '<img src=x onerror=alert(9)>'", "file", HOSTILE_FILE,
	                            "fileText", HOSTILE_FILE_TEXT, "commit", HOSTILE_COMMIT,
	                            "commitId", commit, "untracked", HOSTILE_UNTRACKED, "logged",
	                            "<svg/onload=alert('pending')>", "device", HOSTILE_DEVICE),
	                  6);
	/* what left the browser reached no log */
	buf_init(&log, 64 << 20);
	harness_daemon_log(&fx.d, &log);
	assert_null(strstr(log.data, fx.token));
	assert_null(strstr(log.data, code));
	{
		const char *stolen = json_string_value(json_object_get(res, "stolen"));
		const char *v = stolen ? strstr(stolen, "sb_session_") : NULL;
		char value[128];

		assert_non_null(v);
		v = strchr(v, '=') + 1;
		snprintf(value, sizeof value, "%.*s", (int)strcspn(v, "; "), v);
		assert_true(strlen(value) >= 40);
		assert_null(strstr(log.data, value));
	}
	buf_free(&log);
	json_decref(res);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_page_is_served_with_its_policy),
	    cmocka_unit_test(test_every_answer_carries_the_policy),
	    cmocka_unit_test(test_foreign_origins_are_closed_before_the_challenge),
	    cmocka_unit_test(test_sign_in_with_a_code_once),
	    cmocka_unit_test(test_a_browser_device_gets_no_bearer_token),
	    cmocka_unit_test(test_sessions_end_on_time_and_stay_with_their_gateway),
	    cmocka_unit_test(test_the_pages_in_a_browser),
	    cmocka_unit_test(test_hostile_values_stay_text_in_a_browser),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, setup, teardown);
}
