/*
 * test_openai_api.c - the OpenAI-compatible endpoint end to end: the real
 * daemon with a scripted agent, driven by the official OpenAI SDK
 * (tests/fakes/openai_client.js, a separate node process) and by raw HTTP.
 * Completions plain and streamed (the deltas concatenate to the scripted
 * reply), the models list, sessions (user, x-switchboard-session, fresh),
 * idempotency keys, refusals (token, unknown agent, bad requests), the
 * endpoint switched off and on by a reload, a stream whose client leaves,
 * and a clean exit (no leaks under the sanitizer build).
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

#define SCRIPT                                                                                     \
	"steps:\n"                                                                                 \
	"  - match: tell me a story\n"                                                             \
	"    text: \"Once upon a time a small gateway carried every message to the right "         \
	"agent, and nothing was lost — not even one ✓.\"\n"                                    \
	"  - match: sleepy\n"                                                                      \
	"    delay_ms: 20000\n"                                                                    \
	"    text: \"never sent\"\n"                                                               \
	"  - match: take your time\n"                                                              \
	"    delay_ms: 1500\n"                                                                     \
	"    text: \"slow answer to: {{user_text}}\"\n"                                            \
	"  - text: \"You said: {{user_text}}\"\n"

#define STORY                                                                                      \
	"Once upon a time a small gateway carried every message to the right agent, and "          \
	"nothing was lost — not even one ✓."

struct fixture {
	char home[512];
	char token[256];
	struct harness_daemon d;
};

static struct fixture fx;

static void write_home(const char *home, const char *rel, const char *text)
{
	char path[1024];

	snprintf(path, sizeof path, "%s/%s", home, rel);
	assert_int_equal(harness_write_file(path, text), 0);
}

static int start_home(const char *home, const char *openai_section, struct harness_daemon *d)
{
	const char *init[] = {"init", NULL};
	char cfg[2048];

	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/echo}\n"
	         "  - {id: ops, model: s/echo}\n"
	         "%s",
	         openai_section);
	write_home(home, "switchboard.yaml", cfg);
	write_home(home, "script.yaml", SCRIPT);
	if (harness_cli(home, NULL, init) != 0)
		return -1;
	if (harness_daemon_start(d, home, NULL) != 0)
		return -1;
	return harness_wait_ready(d, 20000);
}

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	if (start_home(fx.home, "openai_api: {enabled: true, sync_timeout: 20s}\n", &fx.d) != 0)
		return -1;
	return harness_oai_token(fx.home, fx.token, sizeof fx.token);
}

static int teardown(void **state)
{
	int code;

	(void)state;
	/* SIGTERM: a clean exit, and no leaks (ASan makes a leak exit non-zero). */
	code = harness_daemon_stop(&fx.d, SIGTERM, 20000);
	if (code != 0) {
		struct buf log;

		buf_init(&log, 64 << 20);
		harness_daemon_log(&fx.d, &log);
		fprintf(stderr, "daemon exit %d; log:\n%s\n", code, log.data ? log.data : "");
		buf_free(&log);
	}
	harness_rmrf(fx.home);
	return code == 0 ? 0 : -1;
}

/* Runs a plan with the SDK client; returns its results (new reference). */
static json_t *run_plan(const char *plan)
{
	json_t *r = NULL;

	assert_int_equal(harness_oai_run(fx.home, fx.d.port, fx.token, plan, 60000, &r), 0);
	return r;
}

static const char *sget(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

static const char *err_class(const json_t *result)
{
	return sget(json_object_get(result, "error"), "class");
}

static void test_completion(void **state)
{
	json_t *r, *res, *usage;

	(void)state;
	r = run_plan("{\"ops\":[{\"op\":\"chat\",\"model\":\"switchboard/main\","
	             "\"text\":\"hello there\"}]}");
	res = json_array_get(r, 0);
	assert_true(json_is_true(json_object_get(res, "ok")));
	assert_string_equal(sget(res, "text"), "You said: hello there");
	assert_string_equal(sget(res, "role"), "assistant");
	assert_string_equal(sget(res, "finish_reason"), "stop");
	assert_string_equal(sget(res, "object"), "chat.completion");
	assert_string_equal(sget(res, "model"), "switchboard/main");
	assert_int_equal(strncmp(sget(res, "id"), "chatcmpl-", 9), 0);
	usage = json_object_get(res, "usage");
	/* The run's real usage (the scripted model counts tokens too). */
	assert_true(json_integer_value(json_object_get(usage, "prompt_tokens")) > 0);
	assert_true(json_integer_value(json_object_get(usage, "completion_tokens")) > 0);
	assert_int_equal(json_integer_value(json_object_get(usage, "total_tokens")),
	                 json_integer_value(json_object_get(usage, "prompt_tokens")) +
	                     json_integer_value(json_object_get(usage, "completion_tokens")));
	/* a fresh session per request when neither user nor header says */
	assert_int_equal(strncmp(sget(json_object_get(res, "switchboard"), "session_key"),
	                         "agent:main:http:run:oai-", 24),
	                 0);
	json_decref(r);
}

/* A chat command as the last user message: the gateway's own answer, as
 * the completion, streamed or not (docs/commands.md). */
static void test_chat_command(void **state)
{
	json_t *r, *res;

	(void)state;
	r = run_plan("{\"ops\":[{\"op\":\"chat\",\"model\":\"switchboard/main\","
	             "\"text\":\"/status\"},{\"op\":\"chat\",\"model\":\"switchboard/main\","
	             "\"stream\":true,\"text\":\"/help\"}]}");
	res = json_array_get(r, 0);
	assert_true(json_is_true(json_object_get(res, "ok")));
	assert_non_null(strstr(sget(res, "text"), "Agent: main\n"));
	assert_non_null(strstr(sget(res, "text"), "Session: agent:main:http:run:oai-"));
	assert_null(strstr(sget(res, "text"), "You said"));
	assert_string_equal(sget(res, "finish_reason"), "stop");
	res = json_array_get(r, 1);
	assert_true(json_is_true(json_object_get(res, "ok")));
	assert_non_null(strstr(sget(res, "text"), "/model [NAME]"));
	assert_string_equal(sget(res, "finish_reason"), "stop");
	json_decref(r);
}

static void test_stream(void **state)
{
	json_t *r, *res, *deltas;

	(void)state;
	r = run_plan("{\"ops\":[{\"op\":\"chat\",\"model\":\"switchboard/main\",\"stream\":true,"
	             "\"include_usage\":true,\"text\":\"tell me a story\"}]}");
	res = json_array_get(r, 0);
	assert_true(json_is_true(json_object_get(res, "ok")));
	deltas = json_object_get(res, "deltas");
	/* streamed word by word, not in one piece */
	assert_true(json_array_size(deltas) > 10);
	assert_string_equal(sget(res, "text"), STORY);
	assert_string_equal(sget(res, "role"), "assistant");
	assert_string_equal(sget(res, "finish_reason"), "stop");
	assert_string_equal(sget(res, "object"), "chat.completion.chunk");
	assert_string_equal(sget(res, "model"), "switchboard/main");
	assert_int_equal(json_array_size(json_object_get(res, "ids")), 1);
	assert_true(json_integer_value(
	                json_object_get(json_object_get(res, "usage"), "completion_tokens")) > 0);
	json_decref(r);
}

/* The wire format itself: SSE lines, the final chunk and [DONE]. */
static void test_stream_wire(void **state)
{
	char auth[300];
	const char *hdrs[] = {auth, "Content-Type: application/json", NULL};
	struct buf body;

	(void)state;
	snprintf(auth, sizeof auth, "Authorization: Bearer %s", fx.token);
	buf_init(&body, 1 << 20);
	assert_int_equal(harness_http(fx.d.port, "POST", "/v1/chat/completions", hdrs,
	                              "{\"model\":\"main\",\"stream\":true,\"messages\":"
	                              "[{\"role\":\"user\",\"content\":\"wire check\"}]}",
	                              &body),
	                 200);
	assert_non_null(strstr(body.data, "data: {\"id\":\"chatcmpl-"));
	assert_non_null(strstr(body.data, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}"));
	assert_non_null(strstr(body.data, "\"finish_reason\":\"stop\"}]}\n\n"));
	/* [DONE] is the last event */
	assert_true(body.len > 14);
	assert_string_equal(body.data + body.len - 14, "data: [DONE]\n\n");
	buf_free(&body);
}

static void test_models(void **state)
{
	json_t *r, *list, *ids;
	size_t i;
	bool main_seen = false, ops_seen = false;
	json_t *id;

	(void)state;
	r = run_plan("{\"ops\":[{\"op\":\"models\"},"
	             "{\"op\":\"model\",\"id\":\"switchboard/ops\"},"
	             "{\"op\":\"model\",\"id\":\"switchboard/nobody\"}]}");
	list = json_array_get(r, 0);
	assert_true(json_is_true(json_object_get(list, "ok")));
	ids = json_object_get(list, "ids");
	assert_int_equal(json_array_size(ids), 2);
	json_array_foreach(ids, i, id)
	{
		main_seen |= strcmp(json_string_value(id), "switchboard/main") == 0;
		ops_seen |= strcmp(json_string_value(id), "switchboard/ops") == 0;
	}
	assert_true(main_seen && ops_seen);
	assert_true(json_is_true(json_object_get(json_array_get(r, 1), "ok")));
	assert_string_equal(sget(json_array_get(r, 1), "id"), "switchboard/ops");
	assert_string_equal(sget(json_array_get(r, 1), "object"), "model");
	assert_string_equal(sget(json_array_get(r, 1), "owned_by"), "switchboard");
	assert_string_equal(err_class(json_array_get(r, 2)), "NotFoundError");
	json_decref(r);
}

static void test_refusals(void **state)
{
	json_t *r, *e;

	(void)state;
	r = run_plan("{\"ops\":["
	             "{\"op\":\"chat\",\"model\":\"switchboard/main\",\"text\":\"hi\","
	             "\"api_key\":\"not-the-token\"},"
	             "{\"op\":\"models\",\"api_key\":\"not-the-token\"},"
	             "{\"op\":\"chat\",\"model\":\"switchboard/nobody\",\"text\":\"hi\"},"
	             "{\"op\":\"chat\",\"model\":\"switchboard/main\",\"messages\":"
	             "[{\"role\":\"system\",\"content\":\"only a system message\"}]}]}");
	assert_string_equal(err_class(json_array_get(r, 0)), "AuthenticationError");
	e = json_object_get(json_array_get(r, 0), "error");
	assert_int_equal(json_integer_value(json_object_get(e, "status")), 401);
	assert_string_equal(sget(e, "code"), "invalid_api_key");
	assert_string_equal(err_class(json_array_get(r, 1)), "AuthenticationError");
	e = json_object_get(json_array_get(r, 2), "error");
	assert_string_equal(sget(e, "class"), "NotFoundError");
	assert_string_equal(sget(e, "code"), "model_not_found");
	e = json_object_get(json_array_get(r, 3), "error");
	assert_string_equal(sget(e, "class"), "BadRequestError");
	assert_string_equal(sget(e, "type"), "invalid_request_error");
	json_decref(r);
}

/* Raw HTTP: the error shape, the challenge, and bad inputs. */
static void test_refusals_raw(void **state)
{
	char auth[300];
	const char *no_auth[] = {"Content-Type: application/json", NULL};
	const char *hdrs[] = {auth, NULL};
	const char *other_agent[] = {auth, "x-switchboard-session: agent:ops:main", NULL};
	const char *bad_key[] = {auth, "Idempotency-Key: has blanks in it", NULL};
	struct buf body;
	json_t *j;

	(void)state;
	snprintf(auth, sizeof auth, "Authorization: Bearer %s", fx.token);
	buf_init(&body, 1 << 20);
	assert_int_equal(harness_http(fx.d.port, "POST", "/v1/chat/completions", no_auth,
	                              "{\"model\":\"main\",\"messages\":[]}", &body),
	                 401);
	j = json_loads(body.data, 0, NULL);
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
	                    "invalid_api_key");
	assert_non_null(json_object_get(json_object_get(j, "error"), "message"));
	assert_non_null(json_object_get(json_object_get(j, "error"), "type"));
	json_decref(j);
	buf_reset(&body);
	assert_int_equal(
	    harness_http(fx.d.port, "POST", "/v1/chat/completions", hdrs, "{nope", &body), 400);
	assert_non_null(strstr(body.data, "\"type\":\"invalid_request_error\""));
	buf_reset(&body);
	assert_int_equal(harness_http(fx.d.port, "POST", "/v1/chat/completions", hdrs,
	                              "{\"model\":\"main\",\"messages\":[]}", &body),
	                 400);
	buf_reset(&body);
	assert_int_equal(harness_http(fx.d.port, "POST", "/v1/chat/completions", other_agent,
	                              "{\"model\":\"main\",\"messages\":[{\"role\":\"user\","
	                              "\"content\":\"hi\"}]}",
	                              &body),
	                 400);
	assert_non_null(strstr(body.data, "another agent"));
	buf_reset(&body);
	assert_int_equal(harness_http(fx.d.port, "POST", "/v1/chat/completions", bad_key,
	                              "{\"model\":\"main\",\"messages\":[{\"role\":\"user\","
	                              "\"content\":\"hi\"}]}",
	                              &body),
	                 400);
	buf_reset(&body);
	/* wrong method: the server's own 405 */
	assert_int_equal(harness_http(fx.d.port, "GET", "/v1/chat/completions", hdrs, NULL, &body),
	                 405);
	buf_free(&body);
}

/* user and x-switchboard-session give stable sessions; model names. */
static void test_sessions(void **state)
{
	json_t *r, *msgs;
	char *t;

	(void)state;
	r = run_plan("{\"ops\":[{\"op\":\"chat\",\"model\":\"switchboard/main\","
	             "\"user\":\"alice\",\"text\":\"remember pelican\"}]}");
	assert_true(json_is_true(json_object_get(json_array_get(r, 0), "ok")));
	json_decref(r);
	/* the bare agent id and a content list work too */
	r = run_plan("{\"ops\":[{\"op\":\"chat\",\"model\":\"main\",\"user\":\"alice\","
	             "\"messages\":[{\"role\":\"system\",\"content\":\"ignored\"},"
	             "{\"role\":\"user\",\"content\":\"an old question\"},"
	             "{\"role\":\"assistant\",\"content\":\"an old answer\"},"
	             "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"what was "
	             "it?\"}]}]}]}");
	assert_string_equal(sget(json_array_get(r, 0), "text"), "You said: what was it?");
	assert_string_equal(
	    sget(json_object_get(json_array_get(r, 0), "switchboard"), "session_key"),
	    "agent:main:http:user:alice");
	json_decref(r);
	/* one session, both turns, only the last user message of each request */
	assert_int_equal(harness_oai_transcripts(fx.home, "main", "agent:main:http:user:alice"), 1);
	msgs = harness_oai_transcript(fx.home, "main", "agent:main:http:user:alice");
	assert_int_equal(json_array_size(msgs), 4);
	t = harness_oai_message_text(json_array_get(msgs, 0));
	assert_string_equal(t, "remember pelican");
	free(t);
	t = harness_oai_message_text(json_array_get(msgs, 2));
	assert_string_equal(t, "what was it?");
	free(t);
	json_decref(msgs);

	/* a header names the session: a short name, or a full key of the agent */
	r = run_plan("{\"ops\":[{\"op\":\"chat\",\"model\":\"switchboard/ops\","
	             "\"session\":\"desk-7\",\"text\":\"one\"},"
	             "{\"op\":\"chat\",\"model\":\"switchboard/ops\","
	             "\"session\":\"agent:ops:main\",\"text\":\"two\",\"at_ms\":50},"
	             "{\"op\":\"chat\",\"model\":\"switchboard\",\"text\":\"default\"}]}");
	assert_string_equal(
	    sget(json_object_get(json_array_get(r, 0), "switchboard"), "session_key"),
	    "agent:ops:http:desk-7");
	assert_string_equal(
	    sget(json_object_get(json_array_get(r, 1), "switchboard"), "session_key"),
	    "agent:ops:main");
	assert_string_equal(sget(json_array_get(r, 2), "model"), "switchboard/main");
	json_decref(r);
	assert_int_equal(harness_oai_transcripts(fx.home, "ops", "agent:ops:http:desk-7"), 1);
	assert_int_equal(harness_oai_transcripts(fx.home, "ops", "agent:ops:main"), 1);
}

/* A retry with the same Idempotency-Key is the same message: one run, the
 * same answer (while it runs, and after). */
static void test_idempotency(void **state)
{
	json_t *r;
	long long dup0 = harness_oai_metric(fx.d.port, "switchboard_ingest_duplicates_total");
	long long acc0 = harness_oai_metric(fx.d.port, "switchboard_ingest_accepted_total");

	(void)state;
	r = run_plan("{\"ops\":["
	             "{\"op\":\"chat\",\"model\":\"main\",\"user\":\"bob\","
	             "\"idempotency_key\":\"same-key-1\",\"text\":\"take your time\"},"
	             "{\"op\":\"chat\",\"model\":\"main\",\"user\":\"bob\",\"stream\":true,"
	             "\"idempotency_key\":\"same-key-1\",\"text\":\"take your time\","
	             "\"at_ms\":300}]}");
	assert_string_equal(sget(json_array_get(r, 0), "text"), "slow answer to: take your time");
	assert_string_equal(sget(json_array_get(r, 1), "text"), "slow answer to: take your time");
	assert_string_equal(sget(json_array_get(r, 0), "id"), sget(json_array_get(r, 1), "id"));
	json_decref(r);
	/* after the answer: remembered */
	r = run_plan("{\"ops\":[{\"op\":\"chat\",\"model\":\"main\",\"user\":\"bob\","
	             "\"idempotency_key\":\"same-key-1\",\"text\":\"take your time\"}]}");
	assert_string_equal(sget(json_array_get(r, 0), "text"), "slow answer to: take your time");
	json_decref(r);
	assert_int_equal(harness_oai_metric(fx.d.port, "switchboard_ingest_duplicates_total"),
	                 dup0 + 2);
	assert_int_equal(harness_oai_metric(fx.d.port, "switchboard_ingest_accepted_total"),
	                 acc0 + 1);
	{
		json_t *msgs = harness_oai_transcript(fx.home, "main", "agent:main:http:user:bob");

		assert_int_equal(json_array_size(msgs), 2); /* one run */
		json_decref(msgs);
	}
}

/* A stream whose client leaves: the run still finishes, and the gateway is
 * fine (no crash; the exit at teardown is checked for leaks). */
static void test_stream_client_gone(void **state)
{
	char req[1024];
	const char *body = "{\"model\":\"main\",\"stream\":true,\"user\":\"carol\",\"messages\":"
	                   "[{\"role\":\"user\",\"content\":\"take your time\"}]}";
	struct buf in;
	int fd, n;

	(void)state;
	n = snprintf(req, sizeof req,
	             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
	             "Authorization: Bearer %s\r\nContent-Length: %zu\r\n\r\n%s",
	             fx.token, strlen(body), body);
	fd = harness_connect(fx.d.port);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, req, (size_t)n), n);
	buf_init(&in, 1 << 20);
	/* the headers and the first chunk come at once */
	harness_read_response(fd, &in, 500);
	assert_non_null(strstr(in.data, "text/event-stream"));
	assert_non_null(strstr(in.data, "\"role\":\"assistant\""));
	close(fd);
	buf_free(&in);
	/* the run ends anyway, its reply in the session */
	for (int i = 0; i < 100; i++) {
		json_t *msgs =
		    harness_oai_transcript(fx.home, "main", "agent:main:http:user:carol");
		size_t len = json_array_size(msgs);

		json_decref(msgs);
		if (len == 2)
			break;
		usleep(50000);
	}
	{
		json_t *msgs =
		    harness_oai_transcript(fx.home, "main", "agent:main:http:user:carol");

		assert_int_equal(json_array_size(msgs), 2);
		json_decref(msgs);
	}
	assert_int_equal(harness_http(fx.d.port, "GET", "/healthz", NULL, NULL, NULL), 200);
}

/* Off by default: 404; a reload turns it on without a restart. */
static void test_disabled_then_enabled(void **state)
{
	struct harness_daemon d;
	char home[512], token[256], path[700], cfg[1024];
	json_t *r;
	struct buf body;
	const char *plan = "{\"ops\":[{\"op\":\"chat\",\"model\":\"switchboard/main\","
	                   "\"text\":\"anyone?\"},{\"op\":\"models\"}]}";

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(start_home(home, "", &d), 0);
	assert_int_equal(harness_oai_token(home, token, sizeof token), 0);
	assert_int_equal(harness_oai_run(home, d.port, token, plan, 60000, &r), 0);
	assert_string_equal(err_class(json_array_get(r, 0)), "NotFoundError");
	assert_string_equal(sget(json_object_get(json_array_get(r, 0), "error"), "code"),
	                    "endpoint_disabled");
	assert_string_equal(err_class(json_array_get(r, 1)), "NotFoundError");
	json_decref(r);
	buf_init(&body, 1 << 20);
	assert_int_equal(harness_http(d.port, "GET", "/v1/models", NULL, NULL, &body), 404);
	buf_free(&body);

	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/echo}\n"
	         "  - {id: ops, model: s/echo}\n"
	         "openai_api:\n"
	         "  enabled: true\n");
	assert_int_equal(harness_write_file(path, cfg), 0);
	kill(d.pid, SIGHUP);
	for (int i = 0; i < 100; i++) {
		if (harness_http(d.port, "GET", "/v1/models", NULL, NULL, NULL) == 401)
			break;
		usleep(50000);
	}
	assert_int_equal(harness_oai_run(home, d.port, token, plan, 60000, &r), 0);
	assert_string_equal(sget(json_array_get(r, 0), "text"), "You said: anyone?");
	assert_int_equal(json_array_size(json_object_get(json_array_get(r, 1), "ids")), 2);
	json_decref(r);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	harness_rmrf(home);
}

/* SIGTERM while a plain and a streamed request wait for long runs: the
 * drain gives up after drain_timeout, the runs are aborted (their messages
 * go back to the inbox), both clients are told 503 shutting_down before
 * the connections close, and the gateway exits 0 without leaks. */
static void test_stop_with_requests_in_flight(void **state)
{
	struct harness_daemon d;
	struct harness_oai_client c;
	char home[512], token[256], out[700];
	json_t *r, *e;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(start_home(home,
	                            "gateway: {drain_timeout: 1s}\n"
	                            "openai_api: {enabled: true}\n",
	                            &d),
	                 0);
	assert_int_equal(harness_oai_token(home, token, sizeof token), 0);
	snprintf(out, sizeof out, "%s/client.out", home);
	assert_int_equal(harness_oai_start(&c, d.port, token,
	                                   "{\"ops\":[{\"op\":\"chat\",\"model\":\"main\","
	                                   "\"user\":\"a\",\"text\":\"sleepy one\"},"
	                                   "{\"op\":\"chat\",\"model\":\"main\",\"user\":\"b\","
	                                   "\"stream\":true,\"text\":\"sleepy two\"}]}",
	                                   out),
	                 0);
	assert_int_equal(
	    harness_oai_wait_message(home, "main", "agent:main:http:user:a", "sleepy one", 30000),
	    0);
	assert_int_equal(
	    harness_oai_wait_message(home, "main", "agent:main:http:user:b", "sleepy two", 30000),
	    0);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	assert_int_equal(harness_oai_finish(&c, 30000, &r), 0);
	/* both heard why, the stream in its own event */
	e = json_object_get(json_array_get(r, 0), "error");
	assert_int_equal(json_integer_value(json_object_get(e, "status")), 503);
	assert_string_equal(sget(e, "code"), "shutting_down");
	e = json_object_get(json_array_get(r, 1), "error");
	assert_string_equal(sget(e, "class"), "APIError");
	assert_string_equal(sget(e, "code"), "shutting_down");
	json_decref(r);
	harness_rmrf(home);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_completion),
	    cmocka_unit_test(test_chat_command),
	    cmocka_unit_test(test_stream),
	    cmocka_unit_test(test_stream_wire),
	    cmocka_unit_test(test_models),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_refusals_raw),
	    cmocka_unit_test(test_sessions),
	    cmocka_unit_test(test_idempotency),
	    cmocka_unit_test(test_stream_client_gone),
	    cmocka_unit_test(test_disabled_then_enabled),
	    cmocka_unit_test(test_stop_with_requests_in_flight),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
