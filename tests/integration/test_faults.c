/*
 * test_faults.c - the gateway under failures of what it depends on.
 *
 * upstream_faults: the model server (tests/fakes/fake_llm.js, OpenAI
 * compatible) answers every call of a message with one fault: 429 with
 * Retry-After, 500, a stream error event, invalid JSON, a stream cut short,
 * the connection reset mid-response, or no answer within the provider's
 * timeout. For each, through a sync webhook:
 *  - the daemon stays up and the sender gets an answer with a clear status
 *    (the run's "error" status and a reply that says what went wrong);
 *  - retries are bounded: at most 1 + max_retries calls reach the server;
 *  - retries are spaced: three calls take at least the two backoffs;
 *  - no busy loop: the daemon's CPU time over the whole fault phase stays
 *    well under the wall time;
 *  - afterwards a healthy answer gets through again.
 *
 * store_commit_failure: the disk fills up under the gateway (a file size
 * limit, RLIMIT_FSIZE, on the daemon's process, with SIGXFSZ ignored, so
 * SQLite's writes fail with EFBIG as on a full disk; no mount needed). The
 * gateway must refuse the messages it cannot commit (5xx with Retry-After,
 * never 2xx), stay up, stop cleanly, and after a restart with room every
 * message it acknowledged is in the inbox.
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sqlite3.h>

#include "harness.h"

#define BEARER "fault-test-bearer-token-0123456789"
#define MAX_RETRIES 2
/* Long enough that a stream cut after four events stops inside the text. */
#define LONG "this answer is long enough to be cut somewhere in the middle of it"

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* utime + stime of pid, in ms. */
static int64_t cpu_ms(pid_t pid)
{
	char path[64];
	struct buf stat;
	char *p;
	long long ut = 0, st = 0;
	long hz = sysconf(_SC_CLK_TCK);

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	buf_init(&stat, 1 << 16);
	assert_int_equal(harness_read_file(path, &stat), 0);
	p = strrchr(stat.data, ')');
	assert_non_null(p);
	/* after ") ": state(3) ... utime is field 14, stime 15 */
	assert_int_equal(
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &ut, &st), 2);
	buf_free(&stat);
	return (ut + st) * 1000 / (hz > 0 ? hz : 100);
}

static void print_log(const struct harness_daemon *d)
{
	struct buf log;

	buf_init(&log, 64 << 20);
	harness_daemon_log(d, &log);
	fprintf(stderr, "daemon log (tail):\n%s\n",
	        log.data ? log.data + (log.len > 6000 ? log.len - 6000 : 0) : "");
	buf_free(&log);
}

static long post_hook(int port, const char *text, const char *conv, struct buf *resp)
{
	static const char *const hdrs[] = {"Authorization: Bearer " BEARER,
	                                   "Content-Type: application/json", NULL};
	json_t *b = json_pack("{ss ss ss}", "text", text, "sender", "u1", "conversation", conv);
	char *body = json_dumps(b, JSON_COMPACT);
	long status;

	json_decref(b);
	status = harness_http(port, "POST", "/hooks/t", hdrs, body, resp);
	free(body);
	return status;
}

static void llm_post(int port, const char *path, const char *body)
{
	assert_int_equal(harness_http(port, "POST", path, NULL, body, NULL), 200);
}

static size_t llm_requests(int port)
{
	struct buf resp;
	json_t *j;
	size_t n;

	buf_init(&resp, 64 << 20);
	assert_int_equal(harness_http(port, "GET", "/__requests", NULL, NULL, &resp), 200);
	j = json_loads(resp.data, 0, NULL);
	assert_non_null(j);
	n = json_array_size(j);
	json_decref(j);
	buf_free(&resp);
	return n;
}

/* ---- upstream faults ---- */

static void upstream_faults(void **state)
{
	static const struct {
		const char *fault;
		bool retried; /* the models router retries it */
	} faults[] = {
	    {"429", true},       {"500", true},   {"stream_error", true}, {"malformed", true},
	    {"truncated", true}, {"reset", true}, {"slow", true},
	};
	struct harness_peer llm;
	struct harness_daemon d;
	char home[512], path[1024], cfg[2048];
	int64_t wall0, cpu0, wall, cpu;
	struct buf resp;

	(void)state;
	assert_int_equal(harness_peer_start(&llm, "fake_llm.js", NULL), 0);
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	snprintf(cfg, sizeof cfg,
	         "log: {level: info}\n"
	         "providers:\n"
	         "  - {id: f, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", api_key: k,\n"
	         "     max_retries: %d, timeout: 1s}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: f/m, tools: [ls]}\n"
	         "channels:\n"
	         "  webhook:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    group_policy: open\n"
	         "    hooks:\n"
	         "      - {name: t, verify: bearer, secret: \"" BEARER "\", mode: sync}\n",
	         llm.port, MAX_RETRIES);
	{
		static const char *const init[] = {"init", NULL};

		assert_int_equal(harness_cli(home, NULL, init), 0);
	}
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	assert_int_equal(harness_write_file(path, cfg), 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	if (harness_wait_ready(&d, 20000) != 0) {
		print_log(&d);
		fail_msg("the gateway did not become ready");
	}

	wall0 = mono_ms();
	cpu0 = cpu_ms(d.pid);
	for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) {
		char script[2048], text[64], conv[32];
		int64_t t0, took;
		size_t calls;
		json_t *r;
		const char *status, *reply;
		long code;

		/* More fault steps than calls allowed: an extra call would find one. */
		snprintf(
		    script, sizeof script,
		    "[{\"fault\":\"%s\",\"retry_after\":1,\"delay_ms\":%d,\"text\":\"" LONG "\"},"
		    "{\"fault\":\"%s\",\"retry_after\":1,\"delay_ms\":%d,\"text\":\"" LONG "\"},"
		    "{\"fault\":\"%s\",\"retry_after\":1,\"delay_ms\":%d,\"text\":\"" LONG "\"},"
		    "{\"fault\":\"%s\",\"retry_after\":1,\"delay_ms\":%d,\"text\":\"" LONG "\"},"
		    "{\"fault\":\"%s\",\"retry_after\":1,\"delay_ms\":%d,\"text\":\"" LONG "\"}]",
		    faults[i].fault, strcmp(faults[i].fault, "slow") == 0 ? 3000 : 0,
		    faults[i].fault, strcmp(faults[i].fault, "slow") == 0 ? 3000 : 0,
		    faults[i].fault, strcmp(faults[i].fault, "slow") == 0 ? 3000 : 0,
		    faults[i].fault, strcmp(faults[i].fault, "slow") == 0 ? 3000 : 0,
		    faults[i].fault, strcmp(faults[i].fault, "slow") == 0 ? 3000 : 0);
		llm_post(llm.port, "/__reset", "{}");
		llm_post(llm.port, "/__script", script);
		snprintf(text, sizeof text, "fault %s please", faults[i].fault);
		snprintf(conv, sizeof conv, "c-%zu", i);
		buf_init(&resp, 1 << 20);
		t0 = mono_ms();
		code = post_hook(d.port, text, conv, &resp);
		took = mono_ms() - t0;
		if (code != 200) {
			print_log(&d);
			fail_msg("fault %s: the hook answered %ld: %s", faults[i].fault, code,
			         resp.data ? resp.data : "");
		}
		r = json_loads(resp.data, 0, NULL);
		assert_non_null(r);
		status = json_string_value(json_object_get(r, "status"));
		reply = json_string_value(json_object_get(r, "reply"));
		calls = llm_requests(llm.port);
		fprintf(stderr, "fault %-12s calls %zu in %lld ms, status %s, reply \"%.80s\"\n",
		        faults[i].fault, calls, (long long)took, status ? status : "(none)",
		        reply ? reply : "");
		assert_non_null(status);
		assert_string_equal(status, "error");
		assert_non_null(reply);
		assert_non_null(strstr(reply, "went wrong"));
		assert_true(calls >= 1);
		assert_true(calls <= 1 + MAX_RETRIES);
		if (faults[i].retried)
			assert_int_equal(calls, 1 + MAX_RETRIES);
		/* Backoffs of 500 ms and 1 s (each -20% at worst), or Retry-After 1 s. */
		if (calls == 3)
			assert_true(took >= 1100);
		json_decref(r);
		buf_free(&resp);
		assert_int_equal(kill(d.pid, 0), 0);
	}
	wall = mono_ms() - wall0;
	cpu = cpu_ms(d.pid) - cpu0;
	fprintf(stderr, "fault phase: %lld ms wall, %lld ms CPU of the gateway\n", (long long)wall,
	        (long long)cpu);
	/* A busy loop would burn about as much CPU as wall time. */
	assert_true(cpu * 4 < wall);

	/* And a healthy answer gets through again. */
	llm_post(llm.port, "/__reset", "{}");
	llm_post(llm.port, "/__script", "[{\"text\":\"all good again\"}]");
	buf_init(&resp, 1 << 20);
	assert_int_equal(post_hook(d.port, "are you well", "c-ok", &resp), 200);
	assert_non_null(strstr(resp.data, "all good again"));
	assert_null(strstr(resp.data, "\"status\":\"error\""));
	buf_free(&resp);

	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	harness_peer_stop(&llm);
	harness_rmrf(home);
}

/* ---- the disk fills up ---- */

static long long file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (long long)st.st_size : 0;
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

#define DISK_MAX_MESSAGES 4000
#define DISK_AFTER_FAILURE 20

static void store_commit_failure(void **state)
{
	struct harness_daemon d;
	char home[512], path[1024], db[1024];
	static char acked[DISK_MAX_MESSAGES];
	struct rlimit old, lim;
	int n_acked = 0, n_refused = 0, first_refusal = -1, sent = 0;
	long long limit;
	sqlite3 *sq;
	struct buf resp;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	{
		static const char *const init[] = {"init", NULL};

		assert_int_equal(harness_cli(home, NULL, init), 0);
	}
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	assert_int_equal(harness_write_file(path,
	                                    "log: {level: warn}\n"
	                                    "agents:\n"
	                                    "  - {id: main, default: true}\n"
	                                    "channels:\n"
	                                    "  webhook:\n"
	                                    "    dm_policy: open\n"
	                                    "    allow_from: [\"*\"]\n"
	                                    "    group_policy: open\n"
	                                    "    hooks:\n"
	                                    "      - {name: t, verify: bearer, secret: \"" BEARER
	                                    "\", mode: none}\n"),
	                 0);
	/* A first start creates the store; a clean stop folds the WAL back. */
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	snprintf(db, sizeof db, "%s/state.db", home);
	limit = file_size(db) + (96 << 10);

	/* The disk is full past `limit` bytes of any file the daemon writes. */
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = (rlim_t)limit;
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0); /* this process has room */
	if (harness_wait_ready(&d, 20000) != 0) {
		print_log(&d);
		fail_msg("the gateway did not start under the file size limit");
	}
	for (sent = 0; sent < DISK_MAX_MESSAGES; sent++) {
		char text[64], conv[32];
		long code;

		snprintf(text, sizeof text, "disk message %d with some padding to fill", sent);
		snprintf(conv, sizeof conv, "d-%d", sent);
		buf_init(&resp, 1 << 16);
		code = post_hook(d.port, text, conv, &resp);
		buf_free(&resp);
		if (code == 202 || code == 200) {
			acked[sent] = 1;
			n_acked++;
			/* Once the store failed, nothing more may be acknowledged
			 * unless it was really stored (checked below). */
		} else {
			if (code < 500 || code > 599) {
				print_log(&d);
				fail_msg("message %d: %ld, not 2xx or 5xx", sent, code);
			}
			n_refused++;
			if (first_refusal < 0)
				first_refusal = sent;
		}
		if (first_refusal >= 0 && sent - first_refusal >= DISK_AFTER_FAILURE)
			break;
	}
	fprintf(stderr, "limit %lld bytes: %d acknowledged, %d refused (first at %d)\n", limit,
	        n_acked, n_refused, first_refusal);
	if (first_refusal < 0) {
		print_log(&d);
		fail_msg("the store never failed under a %lld-byte file limit", limit);
	}
	assert_int_equal(kill(d.pid, 0), 0); /* still up */
	{
		/* A refusal carries Retry-After. */
		static const char *const hdrs[] = {"Authorization: Bearer " BEARER, NULL};
		int fd = harness_connect(d.port);
		char req[512];
		const char *body = "{\"text\":\"one more for the headers\",\"sender\":\"u1\"}";
		long code;
		int len;

		(void)hdrs;
		assert_true(fd >= 0);
		len = snprintf(req, sizeof req,
		               "POST /hooks/t HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " BEARER
		               "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
		               "Connection: close\r\n\r\n%s",
		               strlen(body), body);
		assert_int_equal(write(fd, req, (size_t)len), len);
		buf_init(&resp, 1 << 16);
		code = harness_read_response(fd, &resp, 10000);
		close(fd);
		if (code >= 500) {
			assert_non_null(strcasestr(resp.data, "Retry-After:"));
		} else {
			/* The store found room again (a checkpoint): then it must
			 * really be stored, which the inbox check below covers. */
			assert_true(code == 202 || code == 200);
		}
		buf_free(&resp);
	}
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 30000), 0);

	/* With room again: every acknowledged message is in the inbox. */
	assert_int_equal(sqlite3_open_v2(db, &sq, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	for (int i = 0; i <= sent && i < DISK_MAX_MESSAGES; i++) {
		char sql[256];

		if (!acked[i])
			continue;
		snprintf(sql, sizeof sql,
		         "SELECT COUNT(*) FROM inbox WHERE channel = 'webhook' AND "
		         "payload LIKE '%%disk message %d with some%%'",
		         i);
		if (sql_count(sq, sql) != 1)
			fail_msg("message %d was acknowledged but is not in the inbox once", i);
	}
	sqlite3_close(sq);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	buf_init(&resp, 1 << 16);
	assert_int_equal(post_hook(d.port, "room again", "d-room", &resp), 202);
	buf_free(&resp);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	harness_rmrf(home);
}

/* Found by fuzz_bindings: `route --json` with an argument that is not
 * UTF-8 said "out of memory"; it now says what is wrong. */
static void route_json_non_utf8(void **state)
{
	static const char *const init[] = {"init", NULL};
	static const char *const bad[] = {
	    "route", "--channel", "webchat", "--peer", "direct:al\x88ice", "--json", NULL};
	static const char *const good[] = {"route",        "--channel", "webchat", "--peer",
	                                   "direct:alice", "--json",    NULL};
	char home[512];
	struct buf out;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(home, &out, bad), 2);
	assert_non_null(strstr(out.data, "UTF-8"));
	assert_null(strstr(out.data, "out of memory"));
	buf_reset(&out);
	assert_int_equal(harness_cli(home, &out, good), 0);
	assert_non_null(strstr(out.data, "\"agent\""));
	buf_free(&out);
	harness_rmrf(home);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(upstream_faults),
	    cmocka_unit_test(store_commit_failure),
	    cmocka_unit_test(route_json_non_utf8),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
