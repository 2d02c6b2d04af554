/*
 * test_doctor_providers.c - `switchboard doctor`'s provider checks against
 * doubles on 127.0.0.1: a model server that takes the key (200), one that
 * rejects it (401), a port nothing listens on, a server that accepts the
 * connection and never answers, and an Anthropic-style provider. Each is
 * reported under its id and URL with the right verdict, in text and in
 * --json; the key reaches the server in its header and never the output;
 * --no-network sends nothing.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "harness.h"

#define KEY_GOOD "sk-good-0123456789abcdef"
#define KEY_BAD "sk-bad-fedcba9876543210"
#define KEY_ANT "sk-ant-aaaabbbbccccdddd"

struct fixture {
	char home[512];
	struct harness_peer good; /* answers GET /v1/models with 200 */
	struct harness_peer bad;  /* answers it with 401 */
	int closed_port;          /* nothing listens there */
	int silent_fd;            /* listens, never answers */
	int silent_port;
};

static struct fixture fx;

/* The config with these providers; the agent uses the first one. */
static void write_config(const char *providers)
{
	char model[64];
	const char *id = strstr(providers, "id: ");

	snprintf(model, sizeof model, "%.*s/m", id ? (int)strcspn(id + 4, ",") : 1,
	         id ? id + 4 : "x");
	char path[700], cfg[4096];

	snprintf(cfg, sizeof cfg,
	         "gateway: {bind: 127.0.0.1, port: %d}\n"
	         "providers:\n"
	         "%s"
	         "agents:\n"
	         "  - {id: main, default: true, model: %s, sandbox: full}\n",
	         harness_free_port(), providers, model);
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	assert_int_equal(harness_write_file(path, cfg), 0);
}

static int listen_silent(int *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 8) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
		close(fd);
		return -1;
	}
	*port = ntohs(a.sin_port);
	return fd;
}

static int setup(void **state)
{
	const char *init[] = {"init", NULL};
	struct buf out;

	(void)state;
	memset(&fx, 0, sizeof fx);
	fx.silent_fd = -1;
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	if (harness_cli(fx.home, NULL, init) != 0)
		return -1;
	if (harness_peer_start(&fx.good, "fake_llm.js", NULL) != 0 ||
	    harness_peer_start(&fx.bad, "fake_llm.js", NULL) != 0)
		return -1;
	buf_init(&out, 1 << 16);
	if (harness_http(
	        fx.good.port, "POST", "/__server", NULL,
	        "{\"models\":{\"object\":\"list\",\"data\":[{\"id\":\"m\"},{\"id\":\"n\"}]}}",
	        &out) != 200 ||
	    harness_http(fx.bad.port, "POST", "/__server", NULL,
	                 "{\"models\":{\"error\":{\"message\":\"Incorrect API key provided: "
	                 "sk-bad-fedcba9876543210\"}},\"status\":{\"models\":401}}",
	                 &out) != 200) {
		buf_free(&out);
		return -1;
	}
	buf_free(&out);
	fx.closed_port = harness_free_port();
	fx.silent_fd = listen_silent(&fx.silent_port);
	return fx.silent_fd >= 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	harness_peer_stop(&fx.good);
	harness_peer_stop(&fx.bad);
	if (fx.silent_fd >= 0)
		close(fx.silent_fd);
	harness_rmrf(fx.home);
	return 0;
}

/* The --json findings of area "provider ID". Borrowed from all. */
static const json_t *finding(const json_t *all, const char *id)
{
	char area[128];
	size_t i;
	const json_t *f;

	snprintf(area, sizeof area, "provider %s", id);
	json_array_foreach(all, i, f)
	{
		if (strcmp(json_string_value(json_object_get(f, "area")), area) == 0)
			return f;
	}
	fail_msg("no finding for provider %s", id);
	return NULL;
}

/* Runs doctor with args (after "doctor") and parses its --json lines. */
static json_t *doctor_json(const char *const *more, int *code, struct buf *out)
{
	const char *args[16] = {"doctor", "--json"};
	json_t *all = json_array();
	size_t n = 2;
	const char *line;

	for (size_t i = 0; more && more[i]; i++)
		args[n++] = more[i];
	args[n] = NULL;
	buf_init(out, 1 << 20);
	*code = harness_cli(fx.home, out, args);
	line = out->data ? out->data : "";
	while (*line) {
		size_t len = strcspn(line, "\n");
		json_t *j = json_loadb(line, len, 0, NULL);

		if (!j)
			fail_msg("doctor --json printed a line that is not JSON: %.*s\n%s",
			         (int)len, line, out->data);
		json_array_append_new(all, j);
		line += len;
		if (*line)
			line++;
	}
	return all;
}

static void test_doctor_providers(void **state)
{
	char providers[2048], url[256];
	struct buf out, meta;
	json_t *all, *reqs;
	const json_t *f;
	int code;

	(void)state;
	snprintf(providers, sizeof providers,
	         "  - {id: good, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: %s}\n"
	         "  - {id: bad, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: %s}\n"
	         "  - {id: gone, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: %s}\n"
	         "  - {id: ant, api: anthropic-messages, base_url: \"http://127.0.0.1:%d\", "
	         "api_key: %s}\n"
	         "  - {id: s, api: scripted, script: \"builtin:offline\"}\n",
	         fx.good.port, KEY_GOOD, fx.bad.port, KEY_BAD, fx.closed_port, KEY_GOOD,
	         fx.good.port, KEY_ANT);
	write_config(providers);
	all = doctor_json(NULL, &code, &out);
	if (code != 1)
		fail_msg("doctor with a rejected key and a closed port exited %d:\n%s", code,
		         out.data);
	assert_null(strstr(out.data, KEY_GOOD));
	assert_null(strstr(out.data, KEY_BAD));
	assert_null(strstr(out.data, KEY_ANT));

	f = finding(all, "good");
	assert_string_equal(json_string_value(json_object_get(f, "level")), "ok");
	assert_string_equal(json_string_value(json_object_get(f, "result")), "ok");
	assert_int_equal(json_integer_value(json_object_get(f, "http_status")), 200);
	snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/models", fx.good.port);
	assert_string_equal(json_string_value(json_object_get(f, "url")), url);
	assert_non_null(strstr(json_string_value(json_object_get(f, "text")), "2 models"));

	f = finding(all, "bad");
	assert_string_equal(json_string_value(json_object_get(f, "level")), "fail");
	assert_string_equal(json_string_value(json_object_get(f, "result")), "key_rejected");
	assert_int_equal(json_integer_value(json_object_get(f, "http_status")), 401);
	snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/models", fx.bad.port);
	assert_string_equal(json_string_value(json_object_get(f, "url")), url);

	f = finding(all, "gone");
	assert_string_equal(json_string_value(json_object_get(f, "level")), "fail");
	assert_string_equal(json_string_value(json_object_get(f, "result")), "unreachable");
	assert_null(json_object_get(f, "http_status"));
	assert_non_null(strstr(json_string_value(json_object_get(f, "text")), "onnect"));

	f = finding(all, "ant");
	assert_string_equal(json_string_value(json_object_get(f, "result")), "ok");
	snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/models", fx.good.port);
	assert_string_equal(json_string_value(json_object_get(f, "url")), url);

	f = finding(all, "s");
	assert_string_equal(json_string_value(json_object_get(f, "level")), "ok");
	json_decref(all);
	buf_free(&out);

	/* Each server got its own key in the header its API uses. */
	buf_init(&meta, 1 << 20);
	assert_int_equal(harness_http(fx.good.port, "GET", "/__meta_requests", NULL, NULL, &meta),
	                 200);
	reqs = json_loadb(meta.data, meta.len, 0, NULL);
	assert_int_equal(json_array_size(reqs), 2);
	{
		bool bearer = false, xkey = false;
		size_t i;
		const json_t *r;

		json_array_foreach(reqs, i, r)
		{
			const json_t *h = json_object_get(r, "headers");
			const char *auth = json_string_value(json_object_get(h, "authorization"));
			const char *x = json_string_value(json_object_get(h, "x-api-key"));

			assert_string_equal(json_string_value(json_object_get(r, "path")),
			                    "/v1/models");
			bearer |= auth && strcmp(auth, "Bearer " KEY_GOOD) == 0;
			xkey |= x && strcmp(x, KEY_ANT) == 0 &&
			        json_object_get(h, "anthropic-version") && !auth;
		}
		assert_true(bearer);
		assert_true(xkey);
	}
	json_decref(reqs);
	buf_free(&meta);

	/* The text form names each provider and its URL, never the key. */
	{
		const char *args[] = {"doctor", NULL};

		buf_init(&out, 1 << 20);
		code = harness_cli(fx.home, &out, args);
		assert_int_equal(code, 1);
		assert_non_null(
		    strstr(out.data, "fail  provider bad: key rejected: http://127.0.0.1:"));
		assert_non_null(strstr(out.data, "HTTP 401"));
		assert_non_null(
		    strstr(out.data, "fail  provider gone: unreachable: http://127.0.0.1:"));
		assert_non_null(strstr(out.data, "ok    provider good: http://127.0.0.1:"));
		assert_null(strstr(out.data, KEY_BAD));
		assert_null(strstr(out.data, "Incorrect API key"));
		buf_free(&out);
	}
}

/* Only a provider that works: exit code 0. */
static void test_doctor_all_good(void **state)
{
	char providers[512];
	struct buf out;
	json_t *all;
	int code;

	(void)state;
	snprintf(providers, sizeof providers,
	         "  - {id: good, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: %s}\n",
	         fx.good.port, KEY_GOOD);
	write_config(providers);
	all = doctor_json(NULL, &code, &out);
	if (code != 0)
		fail_msg("doctor with a good provider exited %d:\n%s", code, out.data);
	assert_string_equal(json_string_value(json_object_get(finding(all, "good"), "result")),
	                    "ok");
	json_decref(all);
	buf_free(&out);
}

/* A server that never answers is unreachable within --timeout, and the
 * whole check takes about that long, not the provider's own timeout. */
static void test_doctor_timeout(void **state)
{
	char providers[512];
	const char *more[] = {"--timeout", "1", NULL};
	struct buf out;
	json_t *all;
	const json_t *f;
	int code;
	time_t t0;

	(void)state;
	snprintf(providers, sizeof providers,
	         "  - {id: mute, api: openai-chat, base_url: \"http://user:pw@127.0.0.1:%d/v1\", "
	         "api_key: %s}\n",
	         fx.silent_port, KEY_GOOD);
	write_config(providers);
	t0 = time(NULL);
	all = doctor_json(more, &code, &out);
	assert_true(time(NULL) - t0 <= 4);
	assert_int_equal(code, 1);
	f = finding(all, "mute");
	assert_string_equal(json_string_value(json_object_get(f, "result")), "unreachable");
	assert_non_null(strstr(json_string_value(json_object_get(f, "text")), "1000 ms"));
	/* user:password of a base_url is not shown. */
	assert_null(strstr(out.data, "user:pw"));
	assert_null(strstr(out.data, KEY_GOOD));
	json_decref(all);
	buf_free(&out);
}

/* --no-network: no request leaves; the findings say the providers were
 * not checked, and a provider that would fail does not fail doctor. */
static void test_doctor_no_network(void **state)
{
	char providers[512];
	const char *more[] = {"--no-network", NULL};
	struct buf out, meta;
	json_t *all, *reqs;
	int code;
	size_t i;
	const json_t *f;
	bool said = false;

	(void)state;
	assert_int_equal(harness_http(fx.bad.port, "POST", "/__reset", NULL, "", NULL), 200);
	assert_int_equal(harness_http(fx.bad.port, "POST", "/__server", NULL,
	                              "{\"status\":{\"models\":401}}", NULL),
	                 200);
	snprintf(providers, sizeof providers,
	         "  - {id: bad, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: %s}\n",
	         fx.bad.port, KEY_BAD);
	write_config(providers);
	all = doctor_json(more, &code, &out);
	if (code != 0)
		fail_msg("doctor --no-network exited %d:\n%s", code, out.data);
	json_array_foreach(all, i, f)
	{
		const char *area = json_string_value(json_object_get(f, "area"));

		assert_true(strncmp(area, "provider ", 9) != 0);
		said |= strcmp(area, "providers") == 0 &&
		        strstr(json_string_value(json_object_get(f, "text")), "--no-network");
	}
	assert_true(said);
	json_decref(all);
	buf_free(&out);
	buf_init(&meta, 1 << 16);
	assert_int_equal(harness_http(fx.bad.port, "GET", "/__meta_requests", NULL, NULL, &meta),
	                 200);
	reqs = json_loadb(meta.data, meta.len, 0, NULL);
	assert_int_equal(json_array_size(reqs), 0);
	json_decref(reqs);
	buf_free(&meta);
}

static void test_doctor_bad_timeout(void **state)
{
	const char *args[] = {"doctor", "--timeout", "0", NULL};
	struct buf out;

	(void)state;
	buf_init(&out, 1 << 16);
	assert_int_equal(harness_cli(fx.home, &out, args), 2);
	assert_non_null(strstr(out.data, "--timeout wants seconds from 1 to 120"));
	buf_free(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_doctor_providers),   cmocka_unit_test(test_doctor_all_good),
	    cmocka_unit_test(test_doctor_timeout),     cmocka_unit_test(test_doctor_no_network),
	    cmocka_unit_test(test_doctor_bad_timeout),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
