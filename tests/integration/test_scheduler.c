/*
 * test_scheduler.c - heartbeats and cron jobs in the running gateway, with
 * the test clock (SWITCHBOARD_TEST_NOW, SWITCHBOARD_TEST_CLOCK_RATE) and a
 * scripted model. Replies go to a webhook hook in callback mode whose URL is
 * tests/fakes/callback_receiver.js, which verifies each delivery's Standard
 * Webhooks signature with the reference library.
 *
 * heartbeat: three agents wake every 30 minutes of test time (one second of
 * real time): "alert" answers with an alert, which is delivered; "calm"
 * answers HEARTBEAT_OK plus a few words, which is run (its transcript has
 * it) but not delivered; "empty" has a HEARTBEAT.md of headings only and is
 * skipped without a model call. `switchboard status --json` reports each.
 *
 * cron: a job added with `switchboard cron add` (every 6h from midnight)
 * and one declared in the config file (20:00 Berlin); the gateway stops before either is
 * due and starts again after a missed run of the API job: the missed run is
 * recorded as skipped, not replayed, and the next run of each is delivered
 * to the receiver exactly once, signed.
 *
 * at: a one-shot job announced to a channel target runs once at its time,
 * is delivered once, and has nothing more to run.
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
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "harness.h"
#include "harness_oai.h"

#define HOOK_SECRET "whsec_c3dpdGNoYm9hcmQtdGVzdC1zZWNyZXQtMDEyMzQ1Njc4OQ=="
#define CB_SECRET "whsec_Y2FsbGJhY2stc2VjcmV0LWZvci1yZXBsaWVzLTAxMjM0NQ=="

#define SCRIPT                                                                                     \
	"steps:\n"                                                                                 \
	"  - match: check alert\n"                                                                 \
	"    text: \"Disk on db1 is 97% full; rotate the logs.\"\n"                                \
	"  - match: check calm\n"                                                                  \
	"    text: \"HEARTBEAT_OK nothing to report\"\n"                                           \
	"  - match: nightly report\n"                                                              \
	"    text: \"Nightly report: all 3 backups ok\"\n"                                         \
	"  - match: config report\n"                                                               \
	"    text: \"Config job says hello\"\n"                                                    \
	"  - text: \"echo {{user_text}}\"\n"

#define HOOKS                                                                                      \
	"channels:\n"                                                                              \
	"  webhook:\n"                                                                             \
	"    hooks:\n"                                                                             \
	"      - name: reports\n"                                                                  \
	"        secret: \"" HOOK_SECRET "\"\n"                                                    \
	"        mode: callback\n"                                                                 \
	"        callback_url: http://127.0.0.1:%d/cb\n"                                           \
	"        callback_secret: \"" CB_SECRET "\"\n"

static const char heartbeat_config[] =
    "gateway: {bind: 127.0.0.1}\n"
    "providers:\n"
    "  - {id: s, api: scripted, script: script.yaml}\n"
    "agents:\n"
    "  - {id: main, default: true, model: s/x, heartbeat: {every: 0}}\n"
    "  - id: alert\n"
    "    model: s/x\n"
    "    heartbeat:\n"
    "      every: 30m\n"
    "      prompt: heartbeat check alert\n"
    "      target: webhook\n"
    "      to: reports\n"
    "      active_hours: {start: \"08:00\", end: \"22:00\", timezone: Europe/Berlin}\n"
    "  - id: calm\n"
    "    model: s/x\n"
    "    heartbeat: {every: 30m, prompt: heartbeat check calm, target: webhook, to: reports}\n"
    "  - id: empty\n"
    "    model: s/x\n"
    "    heartbeat: {every: 30m, target: webhook, to: reports}\n";

static const char cron_config[] =
    "gateway: {bind: 127.0.0.1}\n"
    "providers:\n"
    "  - {id: s, api: scripted, script: script.yaml}\n"
    "agents:\n"
    "  - {id: main, default: true, model: s/x, heartbeat: {every: 0}}\n"
    "cron:\n"
    "  - id: cfgjob\n"
    "    cron: \"0 20 * * *\"\n"
    "    tz: Europe/Berlin\n"
    "    payload: config report\n"
    "    delivery: {mode: webhook, to: reports}\n";

struct fixture {
	char home[512];
	struct harness_daemon d;
	struct harness_peer receiver;
	bool running;
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

static void write_file(const char *rel, const char *text)
{
	char path[800];

	snprintf(path, sizeof path, "%s/%s", fx.home, rel);
	assert_int_equal(harness_write_file(path, text), 0);
}

static int prepare(const char *config_head)
{
	const char *init[] = {"init", NULL};
	const char *rargs[] = {CB_SECRET, NULL};
	char config[4096], path[800];

	memset(&fx, 0, sizeof fx);
	if (harness_peer_start(&fx.receiver, "callback_receiver.js", rargs) != 0 ||
	    harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	snprintf(config, sizeof config, "%s" HOOKS, config_head, fx.receiver.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, config) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/script.yaml", fx.home);
	if (harness_write_file(path, SCRIPT) != 0)
		return -1;
	return harness_cli(fx.home, NULL, init) == 0 ? 0 : -1;
}

/* Starts the gateway with the test clock at now, rate times real time. */
static int start(const char *now, const char *rate)
{
	setenv("SWITCHBOARD_TEST_NOW", now, 1);
	setenv("SWITCHBOARD_TEST_CLOCK_RATE", rate, 1);
	if (harness_daemon_start(&fx.d, fx.home, NULL) != 0 || harness_wait_ready(&fx.d, 20000))
		return -1;
	fx.running = true;
	return 0;
}

static int stop(void)
{
	int code = 0;

	if (fx.running) {
		code = harness_daemon_stop(&fx.d, SIGTERM, 20000);
		fx.running = false;
		if (code != 0) {
			fprintf(stderr, "daemon exit %d\n", code);
			print_log();
		}
	}
	return code;
}

static int teardown(void **state)
{
	int code = stop();

	(void)state;
	harness_peer_stop(&fx.receiver);
	harness_rmrf(fx.home);
	unsetenv("SWITCHBOARD_TEST_NOW");
	unsetenv("SWITCHBOARD_TEST_CLOCK_RATE");
	return code == 0 ? 0 : -1;
}

static json_t *received(void)
{
	struct buf b;
	json_t *j = NULL;

	buf_init(&b, 16 << 20);
	if (harness_http(fx.receiver.port, "GET", "/__received", NULL, NULL, &b) == 200)
		j = json_loads(b.data ? b.data : "", 0, NULL);
	buf_free(&b);
	assert_non_null(j);
	return j;
}

/* Deliveries (answered 2xx) whose body field key contains needle. */
static size_t count_deliveries(const json_t *rec, const char *key, const char *needle)
{
	const json_t *d;
	size_t i, n = 0;

	json_array_foreach(json_object_get(rec, "deliveries"), i, d)
	{
		const char *v = json_string_value(json_object_get(json_object_get(d, "body"), key));

		if (json_integer_value(json_object_get(d, "status")) < 300 && v &&
		    strstr(v, needle))
			n++;
	}
	return n;
}

/* `switchboard ARGS --json` against the running gateway, parsed. */
static json_t *cli_json(const char *const *args)
{
	struct buf out;
	json_t *j;
	int code;

	const char *argv[32];
	char url[64];
	size_t n = 0;

	snprintf(url, sizeof url, "ws://127.0.0.1:%d/", fx.d.port);
	while (args[n] && n < 28) {
		argv[n] = args[n];
		n++;
	}
	argv[n++] = "--url";
	argv[n++] = url;
	argv[n] = NULL;
	buf_init(&out, 16 << 20);
	code = harness_cli(fx.home, &out, argv);
	j = code == 0 ? json_loads(out.data ? out.data : "", 0, NULL) : NULL;
	if (!j)
		fprintf(stderr, "cli exit %d: %s\n", code, out.data ? out.data : "");
	buf_free(&out);
	assert_non_null(j);
	return j;
}

static const json_t *heartbeat_of(const json_t *status, const char *agent)
{
	const json_t *h;
	size_t i;

	json_array_foreach(json_object_get(json_object_get(status, "scheduler"), "heartbeats"), i,
	                   h)
	{
		if (strcmp(json_string_value(json_object_get(h, "agentId")), agent) == 0)
			return h;
	}
	return NULL;
}

static bool heartbeat_status_is(const json_t *status, const char *agent, const char *want)
{
	const json_t *h = heartbeat_of(status, agent);
	const char *s = h ? json_string_value(json_object_get(h, "lastStatus")) : NULL;

	return s && strcmp(s, want) == 0;
}

static void test_heartbeat(void **state)
{
	static const char *const status_args[] = {"status", "--json", NULL};
	json_t *rec = NULL, *st = NULL;
	bool seen = false;

	(void)state;
	assert_int_equal(prepare(heartbeat_config), 0);
	write_file("workspaces/alert/HEARTBEAT.md", "# Checks\n- look at the disks\n");
	write_file("workspaces/calm/HEARTBEAT.md", "# Checks\n- look at the queue\n");
	write_file("workspaces/empty/HEARTBEAT.md", "# Heartbeat\n\n## Tasks\n- \n- [ ]\n");
	/* 10:00 in Berlin, inside alert's active hours; 30 minutes a second. */
	assert_int_equal(start("2025-06-02T08:00:00Z", "1800"), 0);

	for (int waited = 0; waited < 60000 && !seen; waited += 250) {
		usleep(250 * 1000);
		json_decref(rec);
		json_decref(st);
		rec = received();
		st = cli_json(status_args);
		seen = count_deliveries(rec, "text", "Disk on db1") >= 1 &&
		       heartbeat_status_is(st, "calm", "ok") &&
		       heartbeat_status_is(st, "empty", "skipped");
	}
	if (!seen) {
		fprintf(stderr, "status: %s\n", json_dumps(st, JSON_INDENT(1)));
		print_log();
	}
	assert_true(seen);
	/* The alert arrived signed (the receiver verified it) from alert's main session. */
	assert_int_equal(json_integer_value(json_object_get(rec, "invalid")), 0);
	assert_true(count_deliveries(rec, "session_key", "agent:alert:main") >= 1);
	assert_true(heartbeat_status_is(st, "alert", "sent"));
	/* The acknowledgement ran but was never delivered; nor was anything of empty. */
	assert_int_equal(count_deliveries(rec, "text", "HEARTBEAT_OK"), 0);
	assert_int_equal(count_deliveries(rec, "agent", "calm"), 0);
	assert_int_equal(count_deliveries(rec, "agent", "empty"), 0);
	assert_int_equal(harness_oai_wait_message(fx.home, "calm", "agent:calm:main",
	                                          "heartbeat check calm", 10000),
	                 0);
	assert_string_equal(
	    json_string_value(json_object_get(heartbeat_of(st, "empty"), "lastDetail")),
	    "empty-heartbeat-file");
	/* Status says when the next one is due, after the last one. */
	assert_true(json_integer_value(json_object_get(heartbeat_of(st, "alert"), "nextDue")) >
	            json_integer_value(json_object_get(heartbeat_of(st, "alert"), "lastAt")));
	/* and the text the operator reads says it in the config's units */
	{
		char url[64];
		const char *text_args[] = {"status", "--url", url, NULL};
		struct buf out;

		snprintf(url, sizeof url, "ws://127.0.0.1:%d/", fx.d.port);
		buf_init(&out, 1 << 20);
		assert_int_equal(harness_cli(fx.home, &out, text_args), 0);
		if (!strstr(out.data, "heartbeat:   alert: every 30m, target webhook"))
			fail_msg("status text:\n%s", out.data);
		buf_free(&out);
	}
	json_decref(rec);
	json_decref(st);
}

static const json_t *job_of(const json_t *list, const char *id)
{
	const json_t *j;
	size_t i;

	json_array_foreach(json_object_get(list, "jobs"), i, j)
	{
		if (strcmp(json_string_value(json_object_get(j, "id")), id) == 0)
			return j;
	}
	return NULL;
}

static void test_cron_webhook_restart(void **state)
{
	static const char *const add[] = {"cron",
	                                  "add",
	                                  "nightly",
	                                  "--every",
	                                  "6h",
	                                  "--anchor",
	                                  "2025-06-02T00:00:00Z",
	                                  "--payload",
	                                  "nightly report",
	                                  "--webhook",
	                                  "reports",
	                                  "--json",
	                                  NULL};
	static const char *const list[] = {"cron", "list", "--json", NULL};
	static const char *const runs[] = {"cron", "runs", "nightly", "--json", NULL};
	json_t *j, *rec = NULL;
	const json_t *r;
	size_t i;
	bool both = false, skipped = false, ok = false;

	(void)state;
	assert_int_equal(prepare(cron_config), 0);
	/* 08:00 UTC, real time: nothing is due for hours. */
	assert_int_equal(start("2025-06-02T08:00:00Z", "1"), 0);
	j = cli_json(add);
	assert_string_equal(json_string_value(json_object_get(j, "source")), "api");
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(j, "state"), "nextRunMs")),
	    1748865600000LL); /* 12:00 UTC */
	json_decref(j);
	{
		char url[64];
		const char *text_list[] = {"cron", "list", "--url", url, NULL};
		struct buf out;

		snprintf(url, sizeof url, "ws://127.0.0.1:%d/", fx.d.port);
		buf_init(&out, 1 << 20);
		assert_int_equal(harness_cli(fx.home, &out, text_list), 0);
		if (!strstr(out.data, "nightly  every 6h,") ||
		    !strstr(out.data, "    payload: nightly report\n"))
			fail_msg("cron list text:\n%s", out.data);
		buf_free(&out);
	}
	j = cli_json(list);
	assert_non_null(job_of(j, "nightly"));
	assert_non_null(job_of(j, "cfgjob"));
	assert_string_equal(json_string_value(json_object_get(job_of(j, "cfgjob"), "source")),
	                    "config");
	json_decref(j);
	assert_int_equal(stop(), 0);

	/* Down from 08:00 to 17:59:58 UTC: the 12:00 run of nightly was missed.
	 * 18:00 UTC is 20:00 in Berlin, when cfgjob runs too. */
	assert_int_equal(start("2025-06-02T17:59:58Z", "1"), 0);
	for (int waited = 0; waited < 30000 && !both; waited += 200) {
		usleep(200 * 1000);
		json_decref(rec);
		rec = received();
		both = count_deliveries(rec, "text", "Nightly report") >= 1 &&
		       count_deliveries(rec, "text", "Config job says hello") >= 1;
	}
	if (!both)
		print_log();
	assert_true(both);
	assert_int_equal(json_integer_value(json_object_get(rec, "invalid")), 0);
	assert_true(count_deliveries(rec, "session_key", "agent:main:cron:nightly") >= 1);
	/* Give a second burst a chance to show up: there must be none. */
	usleep(1500 * 1000);
	json_decref(rec);
	rec = received();
	assert_int_equal(count_deliveries(rec, "text", "Nightly report"), 1);
	assert_int_equal(count_deliveries(rec, "text", "Config job says hello"), 1);
	json_decref(rec);

	j = cli_json(runs);
	json_array_foreach(json_object_get(j, "runs"), i, r)
	{
		const char *s = json_string_value(json_object_get(r, "status"));

		skipped |= strcmp(s, "skipped") == 0 &&
		           json_integer_value(json_object_get(r, "scheduledAt")) == 1748865600000LL;
		ok |= strcmp(s, "ok") == 0 &&
		      json_integer_value(json_object_get(r, "scheduledAt")) == 1748887200000LL;
	}
	if (!skipped || !ok)
		fprintf(stderr, "runs: %s\n", json_dumps(j, JSON_INDENT(1)));
	assert_true(skipped);
	assert_true(ok);
	json_decref(j);
	j = cli_json(list);
	assert_true(
	    json_integer_value(json_object_get(json_object_get(job_of(j, "nightly"), "state"),
	                                       "nextRunMs")) == 1748908800000LL);
	json_decref(j);
}

/* A one-shot `at` job announced to a channel target: it runs once at its
 * time, its reply is delivered once, and it has no next run afterwards. */
static void test_cron_at_announce(void **state)
{
	static const char *const add[] = {
	    "cron",      "add",         "once",       "--at",    "2025-06-02T09:00:03Z",
	    "--payload", "once report", "--announce", "webhook", "--to",
	    "reports",   "--json",      NULL};
	static const char *const runs[] = {"cron", "runs", "once", "--json", NULL};
	static const char *const list[] = {"cron", "list", "--json", NULL};
	json_t *j, *rec = NULL;
	const json_t *r;
	size_t i, ok = 0;
	bool got = false;

	(void)state;
	assert_int_equal(prepare(cron_config), 0);
	assert_int_equal(start("2025-06-02T09:00:00Z", "1"), 0);
	j = cli_json(add);
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(j, "state"), "nextRunMs")),
	    1748854803000LL);
	json_decref(j);
	for (int waited = 0; waited < 30000 && !got; waited += 200) {
		usleep(200 * 1000);
		json_decref(rec);
		rec = received();
		got = count_deliveries(rec, "text", "echo once report") >= 1;
	}
	if (!got) {
		char *dump = json_dumps(rec, JSON_INDENT(1));

		print_log();
		fprintf(stderr, "received: %s\n", dump ? dump : "");
		free(dump);
	}
	assert_true(got);
	assert_int_equal(json_integer_value(json_object_get(rec, "invalid")), 0);
	usleep(1500 * 1000);
	json_decref(rec);
	rec = received();
	assert_int_equal(count_deliveries(rec, "text", "echo once report"), 1);
	json_decref(rec);
	j = cli_json(runs);
	json_array_foreach(json_object_get(j, "runs"), i, r)
	{
		ok += strcmp(json_string_value(json_object_get(r, "status")), "ok") == 0;
	}
	assert_int_equal(ok, 1);
	json_decref(j);
	j = cli_json(list);
	{
		const json_t *job = job_of(j, "once");
		const json_t *next =
		    job ? json_object_get(json_object_get(job, "state"), "nextRunMs") : NULL;

		/* Gone, or kept with nothing more to run. */
		assert_true(!job || !next || json_is_null(next) || json_integer_value(next) <= 0);
	}
	json_decref(j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_heartbeat, teardown),
	    cmocka_unit_test_teardown(test_cron_webhook_restart, teardown),
	    cmocka_unit_test_teardown(test_cron_at_announce, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
