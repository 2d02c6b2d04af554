/*
 * test_gateway.c - the real daemon: init, start on a free loopback port,
 * health/readiness/metrics, routing errors, body caps, reload on SIGHUP and on
 * file change (valid and invalid), the CLI's usage and errors, one gateway per
 * home, and a clean exit on SIGTERM (the sanitizer build turns leaks into a
 * non-zero exit, so exit code 0 also means "no leaks").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

static int wait_for_log(struct harness_daemon *d, const char *needle, int timeout_ms)
{
	for (int waited = 0; waited < timeout_ms; waited += 20) {
		struct buf log;
		int found;

		buf_init(&log, 64 << 20);
		harness_daemon_log(d, &log);
		found = log.data && strstr(log.data, needle) != NULL;
		buf_free(&log);
		if (found)
			return 0;
		usleep(20000);
	}
	return -1;
}

/* Waits until needle appears at least n times in the daemon's log. */
static int wait_for_log_count(struct harness_daemon *d, const char *needle, int n, int timeout_ms)
{
	for (int waited = 0; waited < timeout_ms; waited += 20) {
		struct buf log;
		int found = 0;

		buf_init(&log, 64 << 20);
		harness_daemon_log(d, &log);
		for (const char *p = log.data; p && (p = strstr(p, needle)); p += strlen(needle))
			found++;
		buf_free(&log);
		if (found >= n)
			return 0;
		usleep(20000);
	}
	return -1;
}

static void test_init_creates_home(void **state)
{
	char home[512], path[700];
	const char *init[] = {"init", NULL};
	struct buf out;
	struct stat st;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(home, &out, init), 0);
	assert_non_null(strstr(out.data, "switchboard.yaml   created"));
	assert_non_null(strstr(out.data, "gateway.token      created (0600)"));
	snprintf(path, sizeof path, "%s/gateway.token", home);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(st.st_size, 65); /* 64 hex characters and a newline */
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0077, 0);
	snprintf(path, sizeof path, "%s/workspaces/main/AGENTS.md", home);
	assert_int_equal(access(path, R_OK), 0);
	snprintf(path, sizeof path, "%s/workspaces/main/HEARTBEAT.md", home);
	assert_int_equal(access(path, R_OK), 0);
	snprintf(path, sizeof path, "%s/agents/main/sessions", home);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISDIR(st.st_mode));

	/* A second run keeps everything and says so. */
	snprintf(path, sizeof path, "%s/workspaces/main/SOUL.md", home);
	assert_int_equal(harness_write_file(path, "custom soul\n"), 0);
	buf_reset(&out);
	assert_int_equal(harness_cli(home, &out, init), 0);
	assert_non_null(strstr(out.data, "switchboard.yaml   kept"));
	assert_non_null(strstr(out.data, "gateway.token      kept"));
	assert_non_null(strstr(out.data, "(0 files written)"));
	buf_free(&out);
	{
		struct buf soul;
		FILE *f = fopen(path, "r");
		char tmp[64];
		size_t n;

		assert_non_null(f);
		buf_init(&soul, 1024);
		n = fread(tmp, 1, sizeof tmp, f);
		buf_append(&soul, tmp, n);
		fclose(f);
		assert_string_equal(soul.data, "custom soul\n");
		buf_free(&soul);
	}
	harness_rmrf(home);
}

/* Two homes on one machine: init sees the default port taken and gives
 * the new home another one, and says so. */
static void test_init_picks_a_free_port(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(8790)};
	const char *init[] = {"init", NULL};
	char home[512], path[700];
	struct buf out, file;
	int fd, one = 1;

	(void)state;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	/* held by us, or already by something else: taken either way */
	if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0)
		assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(home, &out, init), 0);
	close(fd);
	if (!strstr(out.data, "8790 is in use on 127.0.0.1") ||
	    !strstr(out.data, "this home listens on 87"))
		fail_msg("init said:\n%s", out.data);
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	buf_init(&file, 1 << 20);
	assert_int_equal(harness_read_file(path, &file), 0);
	assert_null(strstr(file.data, "port: 8790\n"));
	assert_non_null(strstr(file.data, "  port: 87"));
	buf_free(&file);
	buf_free(&out);
	harness_rmrf(home);
}

static void test_cli_usage(void **state)
{
	char home[512];
	struct buf out;
	const char *none[] = {NULL};
	const char *bogus[] = {"frobnicate", NULL};
	const char *help[] = {"--help", NULL};
	const char *gw_help[] = {"gateway", "--help", NULL};
	const char *gw_bad_port[] = {"gateway", "--port", "99999", NULL};
	const char *gw_extra[] = {"gateway", "extra", NULL};
	const char *cfg_bad[] = {"config", "frob", NULL};
	const char *version[] = {"version", NULL};
	const char *no_cfg[] = {"gateway", NULL};

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(home, &out, none), 2);
	assert_non_null(strstr(out.data, "usage: switchboard <command>"));
	buf_reset(&out);
	assert_int_equal(harness_cli(home, &out, bogus), 2);
	assert_non_null(strstr(out.data, "unknown command \"frobnicate\""));
	buf_reset(&out);
	{
		const char *typo[] = {"stauts", NULL};

		assert_int_equal(harness_cli(home, &out, typo), 2);
		assert_non_null(strstr(out.data, "unknown command \"stauts\" (did you mean \"status\"?)"));
		buf_reset(&out);
	}
	assert_int_equal(harness_cli(home, &out, help), 0);
	assert_non_null(strstr(out.data, "gateway"));
	assert_non_null(strstr(out.data, "init"));
	buf_reset(&out);
	assert_int_equal(harness_cli(home, &out, gw_help), 0);
	assert_non_null(strstr(out.data, "usage: switchboard gateway [--config FILE] [--port N]"));
	buf_reset(&out);
	assert_int_equal(harness_cli(home, &out, gw_bad_port), 2);
	assert_non_null(strstr(out.data, "--port wants a number from 1 to 65535, got \"99999\""));
	buf_reset(&out);
	assert_int_equal(harness_cli(home, &out, gw_extra), 2);
	buf_reset(&out);
	assert_int_equal(harness_cli(home, &out, cfg_bad), 2);
	assert_non_null(strstr(out.data, "unknown subcommand \"frob\""));
	buf_reset(&out);
	assert_int_equal(harness_cli(home, &out, version), 0);
	assert_non_null(strstr(out.data, "switchboard 0."));
	buf_reset(&out);
	/* No home yet: the gateway says how to make one, with EX_CONFIG (78)
	 * so that a service manager does not restart it in a loop. */
	assert_int_equal(harness_cli(home, &out, no_cfg), 78);
	assert_non_null(strstr(out.data, "run `switchboard init`"));
	buf_free(&out);
	harness_rmrf(home);
}

static void test_config_check_lists_every_error(void **state)
{
	char home[512], path[700];
	const char *init[] = {"init", NULL};
	const char *check[] = {"config", "check", NULL};
	struct buf out;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(home, &out, check), 0);
	assert_non_null(strstr(out.data, "ok: "));
	assert_non_null(strstr(out.data, "(1 agent)"));

	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	assert_int_equal(harness_write_file(path, "gateway:\n"
	                                          "  prot: 8080\n"
	                                          "  drain_timeout: soon\n"
	                                          "log:\n"
	                                          "  level: loud\n"
	                                          "agents:\n"
	                                          "  - id: main\n"),
	                 0);
	buf_reset(&out);
	assert_int_equal(harness_cli(home, &out, check), 1);
	/* every problem, each with file:line:col and the key */
	assert_non_null(strstr(out.data, "switchboard.yaml:2:3: gateway.prot: "));
	assert_non_null(strstr(out.data, "did you mean \"port\"?"));
	assert_non_null(strstr(out.data, "switchboard.yaml:3:18: gateway.drain_timeout: "));
	assert_non_null(strstr(out.data, "switchboard.yaml:5:10: log.level: "));
	assert_non_null(strstr(out.data, "3 errors in "));
	/* the gateway refuses the same file with each error and EX_CONFIG */
	{
		const char *gw[] = {"gateway", NULL};

		buf_reset(&out);
		assert_int_equal(harness_cli(home, &out, gw), 78);
		assert_non_null(strstr(out.data, "switchboard.yaml:2:3: gateway.prot: "));
		assert_non_null(strstr(out.data, "invalid configuration; not starting"));
	}
	buf_free(&out);
	harness_rmrf(home);
}

/* What a valid file still gets wrong here: a missing workspace is an error
 * of `config check` (every run would fail), a binding that can never match
 * is a warning; a chat user whose run fails on the missing workspace is
 * told so without the server's paths, which go to the log. */
static void test_config_check_on_this_machine(void **state)
{
	char home[512], path[700], cfg[2048], body[256];
	const char *init[] = {"init", NULL};
	const char *check[] = {"config", "check", NULL};
	const char *hdr[] = {"Authorization: Bearer lint-bearer-token-0123456789",
	                     "Content-Type: application/json", NULL};
	struct harness_daemon d;
	struct buf out, log;
	long st;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: \"builtin:offline\"}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/x, workspace: gone/main}\n"
	         "channels:\n"
	         "  webhook:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    hooks:\n"
	         "      - {name: in, verify: bearer, secret: lint-bearer-token-0123456789, "
	         "mode: sync, sync_timeout: 10s}\n"
	         "bindings:\n"
	         "  - agent: main\n"
	         "    match: {channel: webhook}\n"
	         "  - agent: main\n"
	         "    match: {channel: webhook, account: nosuch}\n"
	         "  - agent: main\n"
	         "    match: {channel: webhook, account: in}\n");
	assert_int_equal(harness_write_file(path, cfg), 0);
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(home, &out, check), 1);
	if (!strstr(out.data, "agents[0].workspace: agent \"main\": the workspace ") ||
	    !strstr(out.data, "gone/main does not exist") || !strstr(out.data, "switchboard init") ||
	    !strstr(out.data, "switchboard.yaml:12:5: bindings[0].match.account: this binding can "
	                      "never match") ||
	    !strstr(out.data, "account: \"*\" (any hook)") ||
	    !strstr(out.data, "switchboard.yaml:14:5: bindings[1].match.account: ") ||
	    !strstr(out.data, "has no account \"nosuch\"") || strstr(out.data, "bindings[2]") ||
	    !strstr(out.data, "2 warnings in ") || !strstr(out.data, "1 error in "))
		fail_msg("config check said:\n%s", out.data);

	/* The gateway runs all the same (warned); the chat user's error names
	 * no server path. */
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	snprintf(body, sizeof body, "{\"text\":\"hello\",\"sender\":\"u1\"}");
	buf_reset(&out);
	st = harness_http(d.port, "POST", "/hooks/in", hdr, body, &out);
	buf_init(&log, 64 << 20);
	harness_daemon_log(&d, &log);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	if (st != 200 || !out.data || !strstr(out.data, "workspace is missing") ||
	    strstr(out.data, home) || strstr(out.data, "gone/main"))
		fail_msg("the sender got %ld: %s", st, out.data ? out.data : "");
	if (!log.data || !strstr(log.data, "gone/main does not exist") ||
	    !strstr(log.data, "this binding can never match"))
		fail_msg("the log lacks the path or the warning:\n%s", log.data ? log.data : "");
	buf_free(&log);
	buf_free(&out);
	harness_rmrf(home);
}

static void test_gateway_serves_and_stops_cleanly(void **state)
{
	struct harness_daemon d;
	char home[512];
	struct buf body, log;
	long st;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	buf_init(&body, 1 << 20);

	assert_int_equal(harness_http(d.port, "GET", "/healthz", NULL, NULL, &body), 200);
	assert_string_equal(body.data, "{\"status\":\"ok\"}\n");
	buf_reset(&body);
	assert_int_equal(harness_http(d.port, "GET", "/readyz", NULL, NULL, &body), 200);
	assert_string_equal(body.data, "{\"status\":\"ready\"}\n");
	buf_reset(&body);
	assert_int_equal(harness_http(d.port, "GET", "/nope", NULL, NULL, &body), 404);
	assert_string_equal(body.data, "{\"error\":\"not found\"}\n");
	buf_reset(&body);
	assert_int_equal(harness_http(d.port, "POST", "/healthz", NULL, "{}", &body), 405);
	buf_reset(&body);
	/* a body over gateway.max_body (default 1 MiB) is refused by its length */
	{
		const char *hdrs[] = {"Content-Length: 2000000", NULL};

		st = harness_http(d.port, "POST", "/anything", hdrs, NULL, &body);
		assert_int_equal(st, 413);
	}
	buf_reset(&body);

	assert_int_equal(harness_http(d.port, "GET", "/metrics", NULL, NULL, &body), 200);
	assert_non_null(strstr(body.data, "# TYPE switchboard_uptime_seconds gauge\n"));
	assert_non_null(strstr(body.data, "switchboard_http_requests_total{route=\"/healthz\","
	                                  "status=\"2xx\"} 1\n"));
	assert_non_null(strstr(body.data, "switchboard_http_requests_total{route=\"/healthz\","
	                                  "status=\"4xx\"} 1\n"));
	assert_non_null(strstr(body.data, "switchboard_http_requests_total{route=\"unmatched\","
	                                  "status=\"4xx\"} 2\n"));
	assert_non_null(strstr(body.data, "# TYPE switchboard_store_commit_seconds histogram\n"));
	assert_non_null(strstr(body.data, "switchboard_inbox_depth 0\n"));
	assert_non_null(strstr(body.data, "switchboard_outbox_depth 0\n"));
	assert_non_null(strstr(body.data, "# TYPE switchboard_runs_active gauge\n"
	                                  "switchboard_runs_active 0\n"));

	/* one gateway per home */
	{
		struct harness_daemon d2;

		assert_int_equal(harness_daemon_start(&d2, home, NULL), 0);
		/* it exits by itself with status 1 */
		assert_int_equal(harness_daemon_stop(&d2, 0, 10000), 1);
		buf_init(&log, 64 << 20);
		harness_daemon_log(&d2, &log);
		assert_non_null(strstr(log.data, "another gateway is running with this home"));
		/* the first one's pid, as a number (not "<pid>\n") */
		{
			char want[48];

			snprintf(want, sizeof want, "pid=%ld ", (long)d.pid);
			if (!strstr(log.data, want))
				fail_msg("no '%s' in:\n%s", want, log.data);
		}
		buf_free(&log);
	}

	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	buf_init(&log, 64 << 20);
	harness_daemon_log(&d, &log);
	assert_non_null(strstr(log.data, "msg=draining signal=SIGTERM"));
	assert_non_null(strstr(log.data, "msg=stopped"));
	assert_null(strstr(log.data, "LeakSanitizer"));
	buf_free(&log);
	buf_free(&body);
	harness_rmrf(home);
}

/* The value of an unlabelled metric in a /metrics body; -1 if absent. */
static long metric_value(const char *body, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = body; p && (p = strstr(p, name)); p += n)
		if ((p == body || p[-1] == '\n') && p[n] == ' ')
			return strtol(p + n + 1, NULL, 10);
	return -1;
}

/* The running gateway publishes where it listens; the CLI reads that
 * first, so a broken configuration on disk, or a port edited and not yet
 * applied, does not cut the operator off. A file a kill left behind is
 * recognised (nobody holds the lock), and a clean stop removes it. */
static void test_runtime_file(void **state)
{
	const char *status[] = {"status", "--timeout", "5", NULL};
	struct harness_daemon d;
	char home[512], path[700], rpath[700], want[64];
	struct buf out, rt;
	int rc;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	snprintf(rpath, sizeof rpath, "%s/gateway.runtime.json", home);
	buf_init(&rt, 1 << 16);
	for (int i = 0; i < 100 && harness_read_file(rpath, &rt) != 0; i++)
		usleep(20000);
	snprintf(want, sizeof want, "\"pid\": %d", (int)d.pid);
	assert_non_null(rt.data);
	assert_non_null(strstr(rt.data, want));
	snprintf(want, sizeof want, "ws://127.0.0.1:%d/", d.port);
	assert_non_null(strstr(rt.data, want));
	buf_free(&rt);
	{
		struct stat st;

		assert_int_equal(stat(rpath, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0600);
	}

	/* A configuration broken on disk, and a port nobody listens on: the
	 * CLI still reaches the gateway, and says the file does not load. */
	assert_int_equal(harness_write_file(path, "gateway:\n  port: 1\n  bind: [\n"), 0);
	/* the running gateway rejects it too, and status says so and why */
	assert_int_equal(wait_for_log(&d, "reload rejected", 5000), 0);
	buf_init(&out, 1 << 20);
	rc = harness_cli(home, &out, status);
	if (rc != 0 || !out.data || !strstr(out.data, "does not load") ||
	    !strstr(out.data, "last good configuration") ||
	    !strstr(out.data, "REJECTED, still running the previous one: ") ||
	    !strstr(out.data, "switchboard.yaml:") ||
	    !strstr(out.data, "agent:       main (default): ")) {
		harness_daemon_stop(&d, SIGKILL, 5000);
		fail_msg("status with a broken file: exit %d\n%s", rc, out.data ? out.data : "");
	}
	buf_free(&out);

	/* Another home whose file names this gateway's port, without a
	 * gateway of its own: the refusal says whose gateway answered. */
	{
		char other[512], opath[700], ocfg[128];
		const char *oinit[] = {"init", NULL};

		assert_int_equal(harness_tmpdir(other, sizeof other), 0);
		assert_int_equal(harness_cli(other, NULL, oinit), 0);
		snprintf(opath, sizeof opath, "%s/switchboard.yaml", other);
		snprintf(ocfg, sizeof ocfg, "gateway:\n  port: %d\nagents:\n  - id: main\n", d.port);
		assert_int_equal(harness_write_file(opath, ocfg), 0);
		buf_init(&out, 1 << 20);
		rc = harness_cli(other, &out, status);
		if (rc != 1 || !out.data || !strstr(out.data, "UNAUTHORIZED") ||
		    !strstr(out.data, "has no gateway running; the one on 127.0.0.1:")) {
			harness_daemon_stop(&d, SIGKILL, 5000);
			fail_msg("status from another home: exit %d\n%s", rc, out.data ? out.data : "");
		}
		buf_free(&out);
		harness_rmrf(other);
	}

	/* Killed: the file stays, but names nobody; the CLI says what is
	 * wrong with the configuration instead of trying its port. */
	assert_int_equal(harness_daemon_stop(&d, SIGKILL, 20000), 128 + SIGKILL);
	assert_int_equal(access(rpath, F_OK), 0);
	buf_init(&out, 1 << 20);
	rc = harness_cli(home, &out, status);
	if (rc == 0 || !out.data || !strstr(out.data, "cannot find the gateway"))
		fail_msg("status after a kill: exit %d\n%s", rc, out.data ? out.data : "");
	buf_free(&out);

	/* A start writes it again; a clean stop removes it. */
	assert_int_equal(unlink(path), 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	buf_init(&out, 1 << 20);
	rc = harness_cli(home, &out, status);
	buf_free(&out);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	assert_int_equal(rc, 0);
	assert_int_not_equal(access(rpath, F_OK), 0);
	harness_rmrf(home);
}

static void test_reload(void **state)
{
	struct harness_daemon d;
	char home[512], path[700], tmp[720];
	struct buf log;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);

	/* An invalid file is rejected with file:line and the old config stays. */
	assert_int_equal(
	    harness_write_file(path, "gateway:\n  port: many\nagents:\n  - id: main\n"), 0);
	kill(d.pid, SIGHUP);
	assert_int_equal(wait_for_log(&d, "reload rejected", 5000), 0);
	assert_int_equal(wait_for_log(&d, "switchboard.yaml:2:9", 100), 0);
	assert_int_equal(harness_http(d.port, "GET", "/readyz", NULL, NULL, NULL), 200);

	/* A valid change applies, and a listen-port change is reported as
	 * needing a restart. Saving the file is enough (no signal). */
	assert_int_equal(harness_write_file(path, "gateway:\n  port: 1999\nlog:\n  level: debug\n"
	                                          "agents:\n  - id: main\n"),
	                 0);
	assert_int_equal(wait_for_log(&d, "msg=reloaded trigger=\"file change\"", 5000), 0);
	assert_int_equal(
	    wait_for_log(&d, "change takes effect after a restart\" key=gateway.port", 100), 0);
	/* still serving on the port it started with */
	assert_int_equal(harness_http(d.port, "GET", "/healthz", NULL, NULL, NULL), 200);

	kill(d.pid, SIGHUP);
	assert_int_equal(wait_for_log(&d, "msg=unchanged trigger=SIGHUP", 5000), 0);

	/* The watch is on the file: an editor that saves by rename replaces
	 * it, and the next save in place is still seen (the watch followed);
	 * so is a file deleted and written anew, and a save after that. */
	snprintf(tmp, sizeof tmp, "%s/switchboard.yaml.tmp", home);
	for (int i = 0; i < 4; i++) {
		char text[256];

		snprintf(text, sizeof text,
		         "gateway:\n  port: 1999\nlog:\n  level: debug\n"
		         "agents:\n  - id: main\n    max_turns: %d\n",
		         10 + i);
		if (i == 0) {
			assert_int_equal(harness_write_file(tmp, text), 0);
			assert_int_equal(rename(tmp, path), 0);
		} else if (i == 2) {
			assert_int_equal(unlink(path), 0);
			usleep(300 * 1000); /* past the debounce: the file is missing */
			assert_int_equal(harness_write_file(path, text), 0);
		} else {
			assert_int_equal(harness_write_file(path, text), 0);
		}
		assert_int_equal(
		    wait_for_log_count(&d, "msg=reloaded trigger=\"file change\"", 2 + i, 5000), 0);
	}

	buf_init(&log, 1 << 20);
	assert_int_equal(harness_http(d.port, "GET", "/metrics", NULL, NULL, &log), 200);
	/* Saving a file and sending SIGHUP may each trigger a reload (and a
	 * watcher may see a file half-written), so count at least one of each. */
	assert_true(metric_value(log.data, "switchboard_config_reloads_total") >= 1);
	assert_true(metric_value(log.data, "switchboard_config_reload_failures_total") >= 1);
	buf_free(&log);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	harness_rmrf(home);
}

/* A gateway listening on 0.0.0.0 (with auth_token) keeps its listener
 * until a restart, whatever the file says: a reload that binds 127.0.0.1
 * and drops auth_token would leave that listener with no token. It is
 * refused with a log line that says why, and the running configuration
 * stays: the token still opens the control plane. A reload that keeps the
 * token is taken. (The daemon only listens on 0.0.0.0; the test talks to
 * it on 127.0.0.1 only.) */
static void test_reload_public_to_loopback(void **state)
{
	struct harness_daemon d;
	char home[512], path[700], tpath[700], url[64];
	const char *status[] = {"status", "--url", url, "--token-file", tpath, NULL};
	struct buf out;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	snprintf(tpath, sizeof tpath, "%s/operator-token", home);
	assert_int_equal(harness_write_file(tpath, "public-bind-token-0123456789\n"), 0);
	/* no init: the home has no gateway.token, auth_token is the only one */
	assert_int_equal(harness_write_file(path, "gateway:\n  bind: 0.0.0.0\n"
	                                          "  auth_token: public-bind-token-0123456789\n"
	                                          "agents:\n  - id: main\n"),
	                 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	snprintf(url, sizeof url, "ws://127.0.0.1:%d", d.port);
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(home, &out, status), 0);
	buf_free(&out);

	assert_int_equal(harness_write_file(path, "gateway:\n  bind: 127.0.0.1\n"
	                                          "agents:\n  - id: main\n"),
	                 0);
	kill(d.pid, SIGHUP);
	for (int i = 0; i < 200 && wait_for_log(&d, "msg=reloaded", 20) != 0 &&
	                wait_for_log(&d, "reload rejected", 20) != 0;
	     i++)
		;
	/* the running configuration kept its token */
	buf_init(&out, 1 << 20);
	if (harness_cli(home, &out, status) != 0)
		fail_msg("the token no longer opens the control plane: %s",
		         out.data ? out.data : "");
	buf_free(&out);
	assert_int_equal(wait_for_log(&d,
	                              "reload rejected: the gateway listens on a non-loopback "
	                              "address and the new configuration has no gateway.auth_token",
	                              100),
	                 0);
	assert_int_equal(wait_for_log(&d, "listening_on=0.0.0.0", 100), 0);

	/* Keeping the token while moving to loopback is fine (for the next
	 * restart). */
	assert_int_equal(harness_write_file(path, "gateway:\n  bind: 127.0.0.1\n"
	                                          "  auth_token: public-bind-token-0123456789\n"
	                                          "log:\n  level: debug\n"
	                                          "agents:\n  - id: main\n"),
	                 0);
	kill(d.pid, SIGHUP);
	assert_int_equal(wait_for_log(&d, "msg=reloaded", 5000), 0);
	assert_int_equal(
	    wait_for_log(&d, "change takes effect after a restart\" key=gateway.bind", 100), 0);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	harness_rmrf(home);
}

/* With gateway.auth_token set, it is the one gateway token: the home's
 * gateway.token (written by init) no longer opens the control plane, and
 * the CLI, left to find its token in the home, uses auth_token. */
static void test_auth_token_replaces_home_token(void **state)
{
	struct harness_daemon d;
	char home[512], path[700], hpath[700], apath[700], url[64], cfg[512];
	const char *init[] = {"init", NULL};
	const char *by_home[] = {"status", "--url", url, "--token-file", hpath, NULL};
	const char *by_auth[] = {"status", "--url", url, "--token-file", apath, NULL};
	const char *plain[] = {"status", NULL};
	struct buf out;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	snprintf(hpath, sizeof hpath, "%s/gateway.token", home);
	snprintf(apath, sizeof apath, "%s/auth-token", home);
	assert_int_equal(harness_write_file(apath, "the-configured-token-0123456789\n"), 0);
	assert_int_equal(harness_write_file(path, "gateway:\n"
	                                          "  auth_token: the-configured-token-0123456789\n"
	                                          "agents:\n  - id: main\n"),
	                 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	snprintf(url, sizeof url, "ws://127.0.0.1:%d", d.port);

	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(home, &out, by_home), 1);
	assert_non_null(strstr(out.data ? out.data : "", "UNAUTHORIZED"));
	buf_free(&out);
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(home, &out, by_auth), 0);
	buf_free(&out);
	/* No --url, no token: both come from the home's configuration. */
	snprintf(cfg, sizeof cfg,
	         "gateway:\n  port: %d\n  auth_token: the-configured-token-0123456789\n"
	         "agents:\n  - id: main\n",
	         d.port);
	assert_int_equal(harness_write_file(path, cfg), 0);
	buf_init(&out, 1 << 20);
	if (harness_cli(home, &out, plain) != 0)
		fail_msg("`switchboard status` with auth_token in the home failed: %s",
		         out.data ? out.data : "");
	buf_free(&out);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	harness_rmrf(home);
}

static int write_str(int fd, const char *s)
{
	size_t n = strlen(s);

	return write(fd, s, n) == (ssize_t)n ? 0 : -1;
}

/* SIGTERM with a request in flight: /readyz turns 503, new work is refused
 * with 503 and Retry-After, the request in flight is still answered, and
 * then the gateway exits 0. */
static void test_drain_finishes_in_flight(void **state)
{
	struct harness_daemon d;
	char home[512];
	struct buf body, resp;
	int fd;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);

	/* a request whose body is still arriving */
	fd = harness_connect(d.port);
	assert_true(fd >= 0);
	assert_int_equal(write_str(fd, "POST /hooks/slow HTTP/1.1\r\nHost: x\r\n"
	                               "Connection: close\r\nContent-Length: 10\r\n\r\n12345"),
	                 0);
	usleep(100000);
	kill(d.pid, SIGTERM);
	assert_int_equal(wait_for_log(&d, "msg=draining", 5000), 0);

	buf_init(&body, 1 << 20);
	assert_int_equal(harness_http(d.port, "GET", "/readyz", NULL, NULL, &body), 503);
	assert_string_equal(body.data, "{\"status\":\"draining\"}\n");
	buf_reset(&body);
	assert_int_equal(harness_http(d.port, "GET", "/healthz", NULL, NULL, &body), 200);
	buf_reset(&body);
	/* unknown paths are still told so (work routes answer 503 + Retry-After) */
	assert_int_equal(harness_http(d.port, "GET", "/nope", NULL, NULL, &body), 404);
	buf_free(&body);
	/* the gateway is still waiting for the request in flight */
	usleep(200000);
	assert_int_equal(kill(d.pid, 0), 0);

	assert_int_equal(write_str(fd, "67890"), 0);
	buf_init(&resp, 1 << 20);
	assert_int_equal(harness_read_response(fd, &resp, 5000), 404);
	buf_free(&resp);
	close(fd);
	assert_int_equal(harness_daemon_stop(&d, 0, 20000), 0);
	harness_rmrf(home);
}

/* A request that never completes does not hold the gateway past
 * gateway.drain_timeout. */
static void test_drain_timeout(void **state)
{
	struct harness_daemon d;
	char home[512], path[700];
	const char *init[] = {"init", NULL};
	int fd;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	assert_int_equal(harness_write_file(path, "gateway:\n  drain_timeout: 300ms\n"
	                                          "agents:\n  - id: main\n"),
	                 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	fd = harness_connect(d.port);
	assert_int_equal(
	    write_str(fd, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n1"), 0);
	usleep(100000);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 10000), 0);
	assert_int_equal(wait_for_log(&d,
	                              "drain time is up; stopping with work in flight\" "
	                              "in_flight=1",
	                              100),
	                 0);
	close(fd);
	harness_rmrf(home);
}

/* gateway.max_connections bounds open connections. */
/* The table full of connections that have not sent a whole request: a
 * new one closes the oldest of them to make room and is served. */
static void test_connection_cap(void **state)
{
	struct harness_daemon d;
	char home[512], path[700];
	const char *init[] = {"init", NULL};
	struct buf out;
	int fds[2];

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	assert_int_equal(harness_write_file(path, "gateway:\n  max_connections: 2\n"
	                                          "agents:\n  - id: main\n"),
	                 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	for (int i = 0; i < 2; i++) {
		fds[i] = harness_connect(d.port);
		assert_true(fds[i] >= 0);
		assert_int_equal(write_str(fds[i], "POST /x HTTP/1.1\r\nHost: x\r\n"
		                                   "Content-Length: 5\r\n\r\n1"),
		                 0);
		usleep(50000);
	}
	usleep(100000);
	assert_int_equal(harness_http(d.port, "GET", "/healthz", NULL, NULL, NULL), 200);
	/* the oldest unfinished upload was the one closed */
	buf_init(&out, 1 << 16);
	assert_int_equal(harness_read_response(fds[0], &out, 3000), 0);
	buf_free(&out);
	close(fds[0]);
	close(fds[1]);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	harness_rmrf(home);
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* One GET /healthz on a raw connection, answered within timeout_ms. */
static long healthz_within(int port, int timeout_ms)
{
	struct buf out;
	long status;
	int fd = harness_connect(port);

	if (fd < 0)
		return -1;
	if (write_str(fd, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")) {
		close(fd);
		return -1;
	}
	buf_init(&out, 1 << 16);
	status = harness_read_response(fd, &out, timeout_ms);
	buf_free(&out);
	close(fd);
	return status;
}

/* Whether the gateway closed fd within timeout_ms (read returns 0 or an
 * error). */
static bool closed_within(int fd, int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;
	char c[512];

	while (now_ms() < deadline) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};

		if (poll(&pf, 1, 100) > 0) {
			ssize_t n = read(fd, c, sizeof c);

			if (n <= 0)
				return true;
		}
	}
	return false;
}

/* The network front under a crowd, as an attacker makes one with raw
 * sockets: 1,100 idle connections (more than max_connections), slow
 * headers, unfinished chunked and Content-Length POSTs. A plain request
 * and `switchboard status` are still answered at once, a chunked body gets
 * 411 at once, and the slow ones are closed at their deadlines. */
static void test_front_under_a_crowd(void **state)
{
	enum { IDLE = 1100, SLOW = 20 };
	static int idle[IDLE];
	struct harness_daemon d;
	char home[512], path[700], url[64], cliout[700];
	const char *init[] = {"init", NULL};
	const char *status[] = {"status", "--url", url, NULL};
	int slow_hdr[SLOW], slow_body[SLOW], chunked[SLOW];
	struct rlimit rl;
	struct buf out;
	long t0, status_code;
	pid_t cli;

	(void)state;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 4096) {
		rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	if (rl.rlim_cur < IDLE + 3 * SLOW + 200)
		HARNESS_SKIP("the machine does not allow enough file descriptors");
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	assert_int_equal(harness_write_file(path, "gateway:\n  header_timeout: 2s\n"
	                                          "  body_timeout: 2s\n"
	                                          "agents:\n  - id: main\n"),
	                 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	snprintf(url, sizeof url, "ws://127.0.0.1:%d", d.port);
	snprintf(cliout, sizeof cliout, "%s/cli.out", home);

	/* 1,100 idle sockets: more than max_connections (1024) */
	for (int i = 0; i < IDLE; i++) {
		idle[i] = harness_connect(d.port);
		assert_true(idle[i] >= 0);
	}
	usleep(200000);
	t0 = now_ms();
	status_code = healthz_within(d.port, 1500);
	if (status_code != 200)
		fail_msg("with %d idle connections GET /healthz got %ld in %ld ms", IDLE,
		         status_code, now_ms() - t0);
	cli = harness_cli_start(home, cliout, status);
	assert_true(cli > 0);
	assert_int_equal(harness_wait(cli, 5000), 0);

	/* slow headers, unfinished bodies, chunked bodies */
	for (int i = 0; i < SLOW; i++) {
		slow_hdr[i] = harness_connect(d.port);
		slow_body[i] = harness_connect(d.port);
		chunked[i] = harness_connect(d.port);
		assert_true(slow_hdr[i] >= 0 && slow_body[i] >= 0 && chunked[i] >= 0);
		assert_int_equal(write_str(slow_hdr[i], "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: "), 0);
		assert_int_equal(write_str(slow_body[i], "POST /healthz HTTP/1.1\r\nHost: x\r\n"
		                                         "Content-Length: 100\r\n\r\n{\"a\":"),
		                 0);
		assert_int_equal(write_str(chunked[i], "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
		                                       "Transfer-Encoding: chunked\r\n"
		                                       "Content-Type: application/json\r\n\r\n"
		                                       "5\r\nhello\r\n"),
		                 0);
	}
	for (int i = 0; i < SLOW; i++) {
		buf_init(&out, 1 << 16);
		t0 = now_ms();
		status_code = harness_read_response(chunked[i], &out, 1500);
		if (status_code != 411)
			fail_msg("a chunked POST got %ld in %ld ms: %s", status_code, now_ms() - t0,
			         out.data ? out.data : "");
		buf_free(&out);
		close(chunked[i]);
	}
	assert_int_equal(healthz_within(d.port, 1500), 200);
	cli = harness_cli_start(home, cliout, status);
	assert_int_equal(harness_wait(cli, 5000), 0);
	/* the slow ones are closed at their deadline (2 s, swept each second) */
	for (int i = 0; i < SLOW; i++) {
		if (!closed_within(slow_hdr[i], 4500))
			fail_msg("a connection sending its headers slowly was not closed");
		if (!closed_within(slow_body[i], 4500))
			fail_msg("a connection sending its body slowly was not closed");
		close(slow_hdr[i]);
		close(slow_body[i]);
	}
	/* a POST without Content-Length has no body: answered, not held */
	{
		int fd = harness_connect(d.port);

		assert_true(fd >= 0);
		assert_int_equal(write_str(fd, "POST /healthz HTTP/1.1\r\nHost: x\r\n"
		                               "Connection: close\r\n\r\n"),
		                 0);
		buf_init(&out, 1 << 16);
		assert_int_equal(harness_read_response(fd, &out, 1500), 405);
		buf_free(&out);
		close(fd);
	}
	for (int i = 0; i < IDLE; i++)
		close(idle[i]);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	harness_rmrf(home);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_init_creates_home),
	    cmocka_unit_test(test_init_picks_a_free_port),
	    cmocka_unit_test(test_cli_usage),
	    cmocka_unit_test(test_config_check_lists_every_error),
	    cmocka_unit_test(test_config_check_on_this_machine),
	    cmocka_unit_test(test_gateway_serves_and_stops_cleanly),
	    cmocka_unit_test(test_reload),
	    cmocka_unit_test(test_runtime_file),
	    cmocka_unit_test(test_reload_public_to_loopback),
	    cmocka_unit_test(test_auth_token_replaces_home_token),
	    cmocka_unit_test(test_drain_finishes_in_flight),
	    cmocka_unit_test(test_drain_timeout),
	    cmocka_unit_test(test_connection_cap),
	    cmocka_unit_test(test_front_under_a_crowd),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
