/*
 * test_slack_tls.c - Socket Mode over wss://, as with real Slack: the test
 * double (tests/fakes/fake_slack.js --tls) serves its WebSocket on a TLS
 * listener with a certificate made here for 127.0.0.1.
 *  - a gateway that does not trust that certificate refuses the connection
 *    (the server sees the TLS alert; the account reports the error and
 *    never connects);
 *  - a gateway that trusts it (SSL_CERT_FILE) connects, gets hello, and
 *    answers an envelope, acknowledged by envelope_id.
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
#include <sys/wait.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "harness.h"

struct fixture {
	struct harness_peer fake;
	char dir[512], cert[700], key[700];
};

static struct fixture fx;

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

static json_t *fake(const char *method, const char *path, json_t *body_take)
{
	static const char *const hdr[] = {"Content-Type: application/json", NULL};
	char *text = body_take ? json_dumps(body_take, JSON_COMPACT) : NULL;
	struct buf resp;
	json_t *j;

	json_decref(body_take);
	buf_init(&resp, 16 << 20);
	assert_int_equal(harness_http(fx.fake.port, method, path, text ? hdr : NULL, text, &resp),
	                 200);
	free(text);
	j = json_loads(resp.data, 0, NULL);
	buf_free(&resp);
	assert_non_null(j);
	return j;
}

static int64_t state_int(const char *key)
{
	json_t *st = fake("GET", "/_test/state", NULL);
	int64_t v = json_integer_value(json_object_get(st, key));

	json_decref(st);
	return v;
}

static int make_cert(void)
{
	pid_t pid = fork();
	int st = 0;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		if (null >= 0) {
			dup2(null, STDOUT_FILENO);
			dup2(null, STDERR_FILENO);
		}
		execlp("openssl", "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
		       "-keyout", fx.key, "-out", fx.cert, "-days", "2", "-subj", "/CN=127.0.0.1",
		       "-addext", "subjectAltName=IP:127.0.0.1", (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* A home with one Socket Mode account pointed at the fake. */
static int make_home(char *home, size_t size)
{
	char path[1024], cfg[2048];
	const char *init[] = {"init", NULL};

	if (harness_tmpdir(home, size) != 0)
		return -1;
	snprintf(cfg, sizeof cfg,
	         "gateway: {bind: 127.0.0.1}\n"
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/x}\n"
	         /* The test users are the operator: their text reaches the
	          * agent as it is (others' is marked untrusted). */
	         "security: {owners: [\"slack:*\"]}\n"
	         "channels:\n"
	         "  slack:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    accounts:\n"
	         "      - {id: tls, mode: socket, bot_token: xoxb-tls, app_token: xapp-1-tls, "
	         "api_base: \"http://127.0.0.1:%d/api/\", reconnect_max: 1s}\n",
	         fx.fake.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	if (harness_write_file(path, cfg) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/script.yaml", home);
	if (harness_write_file(path, "steps:\n  - text: \"reply to: {{user_text}}\"\n") != 0)
		return -1;
	return harness_cli(home, NULL, init);
}

static int setup(void **state)
{
	const char *args[4];

	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_tmpdir(fx.dir, sizeof fx.dir) != 0)
		return -1;
	snprintf(fx.cert, sizeof fx.cert, "%s/cert.pem", fx.dir);
	snprintf(fx.key, sizeof fx.key, "%s/key.pem", fx.dir);
	if (make_cert() != 0)
		return -1;
	args[0] = "--tls";
	args[1] = fx.cert;
	args[2] = fx.key;
	args[3] = NULL;
	return harness_peer_start(&fx.fake, "fake_slack.js", args);
}

static int teardown(void **state)
{
	(void)state;
	harness_peer_stop(&fx.fake);
	harness_rmrf(fx.dir);
	return 0;
}

static void test_untrusted_certificate(void **state)
{
	struct harness_daemon d;
	char home[512], url[64];
	const char *args[] = {"status", "--url", url, NULL};
	struct buf out;
	int64_t end;

	(void)state;
	unsetenv("SSL_CERT_FILE");
	assert_int_equal(make_home(home, sizeof home), 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	end = mono_ms() + 20000;
	while (state_int("tls_errors") < 1 && mono_ms() < end)
		sleep_ms(50);
	assert_true(state_int("tls_errors") >= 1);
	assert_int_equal(state_int("hellos"), 0);
	snprintf(url, sizeof url, "ws://127.0.0.1:%d/", d.port);
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(home, &out, args), 0);
	assert_non_null(strstr(out.data, "slack/tls: socket, not connected, last error: Socket "
	                                 "Mode: cannot connect"));
	buf_free(&out);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	harness_rmrf(home);
}

static void test_trusted_certificate(void **state)
{
	struct harness_daemon d;
	char home[512];
	json_t *payload, *r, *st, *p;
	const char *id;
	int64_t end;
	bool replied = false, acked = false;
	size_t i;

	(void)state;
	setenv("SSL_CERT_FILE", fx.cert, 1);
	assert_int_equal(make_home(home, sizeof home), 0);
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	end = mono_ms() + 20000;
	while (state_int("hellos") < 1 && mono_ms() < end)
		sleep_ms(50);
	assert_true(state_int("hellos") >= 1);
	payload = json_pack("{ssssss s{ssssssssssss}}", "type", "event_callback", "team_id",
	                    "T0TEST", "event_id", "EvTLS1", "event", "type", "message", "channel",
	                    "D0TLS", "channel_type", "im", "user", "U7", "text", "over tls", "ts",
	                    "1700003000.000100");
	r = fake("POST", "/_test/envelope", json_pack("{so}", "payload", payload));
	id = json_string_value(json_object_get(r, "envelope_id"));
	end = mono_ms() + 20000;
	while ((!replied || !acked) && mono_ms() < end) {
		st = fake("GET", "/_test/state", NULL);
		json_array_foreach(json_object_get(st, "posts"), i, p) replied =
		    replied || strcmp(json_string_value(json_object_get(p, "text")),
		                      "reply to: over tls") == 0;
		json_array_foreach(json_object_get(st, "acks"), i, p) acked =
		    acked || strcmp(json_string_value(p), id) == 0;
		json_decref(st);
		if (!replied || !acked)
			sleep_ms(50);
	}
	assert_true(replied);
	assert_true(acked);
	json_decref(r);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	unsetenv("SSL_CERT_FILE");
	harness_rmrf(home);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_untrusted_certificate),
	    cmocka_unit_test(test_trusted_certificate),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
