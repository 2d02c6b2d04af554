/*
 * test_load.c - the gateway under more than it is sized for.
 *
 * ws_thousand: 1,000 WebSocket clients (tests/soak/ws_swarm.js, npm `ws`)
 * connect to the control plane at once (the open-file limit is raised for
 * the test), each completes the handshake with the token and one `health`
 * request, and all stay connected together: every one is served, the
 * gateway counts them, answers HTTP meanwhile, and after they all close its
 * connection count is back to zero and its memory back near where it was.
 *
 * webhook_burst: with a small store queue (store.queue_max) a burst of
 * concurrent webhook deliveries above what the store takes at once gets
 * 503 with Retry-After for what does not fit (a bounded queue: nothing is
 * held in memory beyond it), 202 for the rest; every acknowledged delivery
 * is processed, a retry of the refused ones succeeds, and the memory
 * settles near idle afterwards.
 *
 * Memory bounds here are loose (the test build runs under ASan, whose
 * allocator keeps freed memory in quarantine); `make bench` measures the
 * same phases on an optimised build.
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
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sqlite3.h>

#include "harness.h"

#define TOKEN "load-test-token-0123456789abcdef"
#define BEARER "load-test-bearer-token-0123456789"
#define WS_CLIENTS 1000
#define BURST 400

static void print_log(const struct harness_daemon *d)
{
	struct buf log;

	buf_init(&log, 64 << 20);
	harness_daemon_log(d, &log);
	fprintf(stderr, "daemon log (tail):\n%s\n",
	        log.data ? log.data + (log.len > 6000 ? log.len - 6000 : 0) : "");
	buf_free(&log);
}

static long rss_kib(pid_t pid)
{
	char path[64], *p;
	struct buf b;
	long kb = -1;

	snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)pid);
	buf_init(&b, 1 << 16);
	if (harness_read_file(path, &b) == 0 && (p = strstr(b.data, "\nRss:")))
		kb = strtol(p + 5, NULL, 10);
	buf_free(&b);
	return kb;
}

static int64_t metric(int port, const char *name)
{
	struct buf body;
	int64_t v = -1;

	buf_init(&body, 1 << 20);
	assert_int_equal(harness_http(port, "GET", "/metrics", NULL, NULL, &body), 200);
	for (char *p = body.data; p && (p = strstr(p, name)); p += strlen(name))
		if ((p == body.data || p[-1] == '\n') && p[strlen(name)] == ' ') {
			v = strtoll(p + strlen(name) + 1, NULL, 10);
			break;
		}
	buf_free(&body);
	if (v < 0)
		fail_msg("metric %s not found", name);
	return v;
}

/* One line from fd (the peer's stdout), waiting up to timeout_ms. */
static json_t *read_line_json(int fd, int timeout_ms)
{
	char line[8192];
	size_t n = 0;

	while (n < sizeof line - 1) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		ssize_t r;

		if (poll(&pf, 1, timeout_ms) <= 0)
			break;
		r = read(fd, line + n, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (line[n] == '\n')
			break;
		n++;
	}
	line[n] = '\0';
	return json_loads(line, 0, NULL);
}

static int64_t sql_count(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	int64_t n = -1;

	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

static void raise_fd_limit(void)
{
	struct rlimit rl;

	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 8192) {
		rl.rlim_cur = rl.rlim_max < 8192 ? rl.rlim_max : 8192;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	if (rl.rlim_cur < WS_CLIENTS + 200)
		HARNESS_SKIP("the machine does not allow enough file descriptors");
}

static void start(struct harness_daemon *d, char *home, size_t size, const char *cfg)
{
	char path[1024];

	assert_int_equal(harness_tmpdir(home, size), 0);
	{
		static const char *const init[] = {"init", NULL};

		assert_int_equal(harness_cli(home, NULL, init), 0);
	}
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	assert_int_equal(harness_write_file(path, cfg), 0);
	assert_int_equal(harness_daemon_start(d, home, NULL), 0);
	if (harness_wait_ready(d, 20000) != 0) {
		print_log(d);
		fail_msg("the gateway did not become ready");
	}
}

static void ws_thousand(void **state)
{
	struct harness_daemon d;
	struct harness_peer swarm;
	char home[512], opts[512];
	const char *args[2] = {opts, NULL};
	long idle, loaded, after;
	json_t *r;
	int64_t conns = -1;

	(void)state;
	raise_fd_limit();
	start(&d, home, sizeof home,
	      "gateway: {auth_token: \"" TOKEN "\"}\n"
	      "log: {level: warn}\n"
	      "agents:\n"
	      "  - {id: main, default: true}\n");
	sleep(1);
	idle = rss_kib(d.pid);
	snprintf(opts, sizeof opts,
	         "{\"url\":\"ws://127.0.0.1:%d/\",\"token\":\"" TOKEN "\",\"clients\":%d,"
	         "\"batch\":100,\"timeoutMs\":90000}",
	         d.port, WS_CLIENTS);
	assert_int_equal(harness_peer_start(&swarm, "../soak/ws_swarm.js", args), 0);
	r = read_line_json(swarm.stdout_fd, 180000);
	if (!r) {
		print_log(&d);
		fail_msg("the swarm did not report");
	}
	{
		char *text = json_dumps(r, JSON_COMPACT);

		fprintf(stderr, "swarm: %s\n", text ? text : "");
		free(text);
	}
	assert_int_equal(json_integer_value(json_object_get(r, "hello")), WS_CLIENTS);
	assert_int_equal(json_integer_value(json_object_get(r, "health")), WS_CLIENTS);
	assert_int_equal(json_integer_value(json_object_get(r, "failures")), 0);
	json_decref(r);
	/* All of them at once, and plain HTTP still answered. */
	conns = metric(d.port, "switchboard_http_connections");
	loaded = rss_kib(d.pid);
	fprintf(stderr, "connections %lld, RSS idle %ld KiB, with %d clients %ld KiB\n",
	        (long long)conns, idle, WS_CLIENTS, loaded);
	assert_true(conns >= WS_CLIENTS);
	assert_int_equal(harness_http(d.port, "GET", "/readyz", NULL, NULL, NULL), 200);

	assert_int_equal(write(swarm.stdin_fd, "close\n", 6), 6);
	r = read_line_json(swarm.stdout_fd, 60000);
	assert_non_null(r);
	assert_int_equal(json_integer_value(json_object_get(r, "closed")), WS_CLIENTS);
	json_decref(r);
	for (int i = 0; i < 100; i++) {
		conns = metric(d.port, "switchboard_http_connections");
		if (conns <= 1) /* this request's own */
			break;
		usleep(100000);
	}
	assert_true(conns <= 1);
	after = rss_kib(d.pid);
	fprintf(stderr, "RSS after the clients left: %ld KiB\n", after);
	/* Nothing kept growing once they left. (Under ASan freed memory stays
	 * in its quarantine, so the return to idle is measured by `make
	 * bench` on an optimised build.) */
	assert_true(after <= loaded + 8 * 1024);
	harness_peer_stop(&swarm);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	harness_rmrf(home);
}

static void webhook_burst(void **state)
{
	static int fds[BURST];
	static long codes[BURST];
	static bool retry_after[BURST];
	struct harness_daemon d;
	char home[512];
	int accepted = 0, refused = 0;
	long idle, after;

	(void)state;
	raise_fd_limit();
	start(&d, home, sizeof home,
	      "log: {level: warn}\n"
	      "store: {queue_max: 8}\n"
	      "agents:\n"
	      "  - {id: main, default: true}\n"
	      "channels:\n"
	      "  webhook:\n"
	      "    dm_policy: open\n"
	      "    allow_from: [\"*\"]\n"
	      "    group_policy: open\n"
	      "    hooks:\n"
	      "      - {name: b, verify: bearer, secret: \"" BEARER "\", mode: none}\n");
	sleep(1);
	idle = rss_kib(d.pid);
	/* Every connection first, then every request, so they arrive together. */
	for (int i = 0; i < BURST; i++) {
		fds[i] = harness_connect(d.port);
		assert_true(fds[i] >= 0);
	}
	for (int i = 0; i < BURST; i++) {
		char req[512], body[128];
		int blen =
		    snprintf(body, sizeof body,
		             "{\"text\":\"burst %d\",\"sender\":\"s%d\",\"conversation\":\"b%d\"}",
		             i, i % 7, i);
		int len =
		    snprintf(req, sizeof req,
		             "POST /hooks/b HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " BEARER
		             "\r\nContent-Type: application/json\r\nIdempotency-Key: burst-%d\r\n"
		             "Content-Length: %d\r\nConnection: close\r\n\r\n%s",
		             i, blen, body);

		assert_int_equal(write(fds[i], req, (size_t)len), len);
	}
	for (int i = 0; i < BURST; i++) {
		struct buf resp;

		buf_init(&resp, 1 << 16);
		codes[i] = harness_read_response(fds[i], &resp, 30000);
		retry_after[i] = resp.data && strcasestr(resp.data, "\r\nRetry-After:") != NULL;
		close(fds[i]);
		buf_free(&resp);
		if (codes[i] == 202)
			accepted++;
		else if (codes[i] == 503 || codes[i] == 429)
			refused++;
		else
			fail_msg("delivery %d: %ld (not 202, 429 or 503)", i, codes[i]);
		if (codes[i] != 202 && !retry_after[i])
			fail_msg("delivery %d: %ld without Retry-After", i, codes[i]);
	}
	fprintf(stderr, "burst of %d: %d accepted, %d refused with Retry-After\n", BURST, accepted,
	        refused);
	assert_true(refused > 0);
	assert_true(accepted > 0);
	/* The senders retry what was refused (same idempotency key): all in. */
	for (int round = 0; round < 50 && refused > 0; round++) {
		usleep(200000);
		refused = 0;
		for (int i = 0; i < BURST; i++) {
			char hdr[64], body[128];
			const char *hdrs[] = {"Authorization: Bearer " BEARER, hdr, NULL};

			if (codes[i] == 202)
				continue;
			snprintf(hdr, sizeof hdr, "Idempotency-Key: burst-%d", i);
			snprintf(
			    body, sizeof body,
			    "{\"text\":\"burst %d\",\"sender\":\"s%d\",\"conversation\":\"b%d\"}",
			    i, i % 7, i);
			codes[i] = harness_http(d.port, "POST", "/hooks/b", hdrs, body, NULL);
			if (codes[i] != 202)
				refused++;
		}
		fprintf(stderr, "retry round %d: %d still refused\n", round + 1, refused);
	}
	if (refused) {
		print_log(&d);
		fail_msg("%d deliveries still refused after 50 retries", refused);
	}
	/* Every message processed once: the inbox drains. */
	{
		/* The store is read beside the running gateway (WAL mode). */
		char db[1024];
		sqlite3 *sq;
		int64_t done = 0;

		snprintf(db, sizeof db, "%s/state.db", home);
		assert_int_equal(sqlite3_open_v2(db, &sq, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
		sqlite3_busy_timeout(sq, 5000);
		for (int i = 0; i < 300; i++) {
			done = sql_count(sq, "SELECT COUNT(*) FROM inbox WHERE state = 'done'");
			if (done == BURST)
				break;
			usleep(100000);
		}
		sqlite3_close(sq);
		/* The store never refuses an operation that finishes claimed
		 * work, so nothing waits for a restart. */
		if (done != BURST)
			print_log(&d);
		assert_int_equal(done, BURST);
	}
	assert_int_equal(metric(d.port, "switchboard_ingest_accepted_total"), BURST);
	sleep(1);
	after = rss_kib(d.pid);
	/* Printed only: under ASan freed memory stays in its quarantine (up to
	 * 256 MiB); `make bench` measures the return to idle. */
	fprintf(stderr, "RSS idle %ld KiB, after the burst %ld KiB\n", idle, after);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	/* A restart finishes whatever was left claimed. */
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	{
		char db[1024];
		sqlite3 *sq;

		snprintf(db, sizeof db, "%s/state.db", home);
		assert_int_equal(sqlite3_open_v2(db, &sq, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
		sqlite3_busy_timeout(sq, 5000);
		for (int i = 0; i < 300; i++) {
			if (sql_count(sq, "SELECT COUNT(*) FROM inbox WHERE state = 'done'") ==
			    BURST)
				break;
			usleep(100000);
		}
		sqlite3_close(sq);
	}
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	/* In the store: each delivery once, and every one done. */
	{
		char db[1024];
		sqlite3 *sq;

		snprintf(db, sizeof db, "%s/state.db", home);
		assert_int_equal(sqlite3_open_v2(db, &sq, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
		assert_int_equal(sql_count(sq, "SELECT COUNT(*) FROM inbox"), BURST);
		assert_int_equal(sql_count(sq, "SELECT COUNT(DISTINCT dedupe_key) FROM inbox"),
		                 BURST);
		if (sql_count(sq, "SELECT COUNT(*) FROM inbox WHERE state != 'done'") != 0) {
			print_log(&d);
			fail_msg("%lld deliveries are not done (%lld claimed, %lld pending)",
			         (long long)sql_count(
			             sq, "SELECT COUNT(*) FROM inbox WHERE state != 'done'"),
			         (long long)sql_count(
			             sq, "SELECT COUNT(*) FROM inbox WHERE state = 'claimed'"),
			         (long long)sql_count(
			             sq, "SELECT COUNT(*) FROM inbox WHERE state = 'pending'"));
		}
		sqlite3_close(sq);
	}
	harness_rmrf(home);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(ws_thousand),
	    cmocka_unit_test(webhook_burst),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
