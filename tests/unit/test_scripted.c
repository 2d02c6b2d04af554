/*
 * test_scripted.c - the scripted provider (agents/providers/scripted.c):
 * YAML and JSONL scripts, step selection (match by substring and regex,
 * continuations, steps consumed in order), tool calls, streamed deltas,
 * delays, every error kind, the built-in offline script, and cancel.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "agents/message.h"
#include "agents/provider.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"

struct fixture {
	char dir[64];
	char script[PATH_MAX];
	uv_loop_t loop;
	struct host host;
	struct provider_config cfg;
	struct provider *p;
};

/* What one call reported. */
struct result {
	int calls;
	int rc;
	json_t *message;
	enum model_stop stop;
	char stop_raw[32];
	char model[64];
	struct model_usage usage;
	struct model_error err;
	struct buf text;
	int deltas;
	bool split_utf8;
	char tools_started[256];
	struct provider_call *cancel_in_delta; /* cancel from the first delta */
	struct fixture *fx;
};

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof *fx);

	assert_non_null(fx);
	snprintf(fx->dir, sizeof fx->dir, "/tmp/sb-scripted-XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	snprintf(fx->script, sizeof fx->script, "%s/script", fx->dir);
	assert_int_equal(uv_loop_init(&fx->loop), 0);
	fx->host.loop = &fx->loop;
	fx->cfg.id = "scripted";
	fx->cfg.api = PROVIDER_API_SCRIPTED;
	fx->cfg.script = fx->script;
	fx->cfg.timeout_ms = 120000;
	fx->cfg.max_retries = 2;
	fx->cfg.max_tokens = 4096;
	fx->cfg.stream = true;
	log_configure(LOG_ERROR, LOG_FORMAT_LOGFMT, NULL);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	if (fx->p)
		fx->p->ops->destroy(fx->p);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&fx->loop), 0);
	nftw(fx->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(fx);
	return 0;
}

static int create(struct fixture *fx, const char *script_text)
{
	if (script_text) {
		FILE *f = fopen(fx->script, "w");

		assert_non_null(f);
		fputs(script_text, f);
		fclose(f);
	}
	return provider_scripted_ops.create(&fx->p, &fx->cfg, &fx->host);
}

static void create_ok(struct fixture *fx, const char *script_text)
{
	assert_int_equal(create(fx, script_text), SB_OK);
	assert_non_null(fx->p);
	assert_ptr_equal(fx->p->ops, &provider_scripted_ops);
}

static void on_delta(void *ud, const char *text, size_t len)
{
	struct result *r = ud;

	assert_true(len > 0);
	/* Never inside a UTF-8 character: a delta neither starts nor ends
	 * in the middle of one. */
	if (((unsigned char)text[0] & 0xC0) == 0x80 || ((unsigned char)text[len] & 0xC0) == 0x80)
		r->split_utf8 = true;
	buf_append(&r->text, text, len);
	r->deltas++;
	if (r->cancel_in_delta) {
		struct provider_call *c = r->cancel_in_delta;

		r->cancel_in_delta = NULL;
		r->fx->p->ops->cancel(c);
	}
}

static void on_tool_start(void *ud, const char *id, const char *name)
{
	struct result *r = ud;
	size_t n = strlen(r->tools_started);

	snprintf(r->tools_started + n, sizeof r->tools_started - n, "%s%s=%s", n ? " " : "", id,
	         name);
}

static void on_done(void *ud, int rc, const struct model_response *resp,
                    const struct model_error *err)
{
	struct result *r = ud;

	r->calls++;
	r->rc = rc;
	if (rc == SB_OK) {
		assert_non_null(resp);
		assert_null(err);
		assert_int_equal(msg_validate(resp->message), SB_OK);
		r->message = json_deep_copy(resp->message);
		r->stop = resp->stop;
		snprintf(r->stop_raw, sizeof r->stop_raw, "%s", resp->stop_raw);
		snprintf(r->model, sizeof r->model, "%s", resp->model);
		r->usage = resp->usage;
	} else {
		assert_null(resp);
		assert_non_null(err);
		r->err = *err;
	}
}

static void result_init(struct result *r, struct fixture *fx)
{
	memset(r, 0, sizeof *r);
	buf_init(&r->text, 1 << 20);
	r->fx = fx;
}

static void result_free(struct result *r)
{
	json_decref(r->message);
	buf_free(&r->text);
	memset(r, 0, sizeof *r);
}

/* Starts a call with messages (borrowed); *pc receives the handle. */
static void start(struct fixture *fx, json_t *messages, bool stream, struct result *r,
                  struct provider_call **pc)
{
	struct model_request req = {
	    .model = "demo",
	    .system = "You are a test.",
	    .messages = messages,
	    .max_tokens = 100,
	    .stream = stream,
	};
	struct model_stream_events ev = {
	    .ud = r, .text_delta = on_delta, .tool_use_start = on_tool_start};

	result_init(r, fx);
	assert_int_equal(fx->p->ops->call(fx->p, &req, &ev, on_done, r, pc), SB_OK);
	/* Never from inside the call. */
	assert_int_equal(r->calls, 0);
}

/* One call with the user text; runs the loop until it is done. */
static void ask(struct fixture *fx, const char *text, struct result *r)
{
	json_t *messages = json_array();

	json_array_append_new(messages, msg_user_text_new(text));
	start(fx, messages, true, r, NULL);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(r->calls, 1);
	json_decref(messages);
}

/* Asks and returns the reply's text (free it); fails on an error. */
static char *ask_text(struct fixture *fx, const char *text)
{
	struct result r;
	char *t;

	ask(fx, text, &r);
	if (r.rc != SB_OK)
		fail_msg("\"%s\": %s: %s", text, sb_strerror(r.rc), r.err.message);
	t = msg_text(r.message);
	result_free(&r);
	return t;
}

static void expect_reply(struct fixture *fx, const char *ask_with, const char *reply)
{
	char *t = ask_text(fx, ask_with);

	if (strcmp(t, reply) != 0)
		fail_msg("asked \"%s\": got \"%s\", want \"%s\"", ask_with, t, reply);
	free(t);
}

static const char yaml_script[] = "# a comment\n"
                                  "steps:\n"
                                  "  - match: weather\n"
                                  "    tool_calls:\n"
                                  "      - name: get_weather\n"
                                  "        input: {city: Paris, days: 2, metric: true}\n"
                                  "  - text: It is sunny in Paris.\n"
                                  "  - match: \"/^ping( [0-9]+)?$/\"\n"
                                  "    text: pong\n"
                                  "  - match: /HELLO/i\n"
                                  "    text: \"hi, {{user_text}}!\"\n"
                                  "  - text: first in order\n"
                                  "  - text: second in order\n";

static const char jsonl_script[] =
    "{\"match\": \"weather\", \"tool_calls\": [{\"name\": \"get_weather\", \"input\": "
    "{\"city\": \"Paris\", \"days\": 2, \"metric\": true}}]}\n"
    "\n"
    "{\"text\": \"It is sunny in Paris.\"}\n"
    "{\"match\": \"/^ping( [0-9]+)?$/\", \"text\": \"pong\"}\n"
    "{\"match\": \"/HELLO/i\", \"text\": \"hi, {{user_text}}!\"}\n"
    "{\"text\": \"first in order\"}\n"
    "   {\"text\": \"second in order\"}   \n";

/* The same conversation against either format. */
static void run_selection(struct fixture *fx)
{
	struct result r;
	json_t *messages = json_array(), *results, *expected;

	/* Match by substring: a tool call. */
	json_array_append_new(messages, msg_user_text_new("what is the weather like?"));
	start(fx, messages, true, &r, NULL);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(r.stop, MODEL_STOP_TOOL_USE);
	assert_string_equal(r.stop_raw, "tool_use");
	assert_string_equal(r.model, "demo");
	expected = json_loads("{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\","
	                      "\"id\":\"call_1\",\"name\":\"get_weather\",\"input\":{\"city\":"
	                      "\"Paris\",\"days\":2,\"metric\":true}}]}",
	                      0, NULL);
	assert_true(json_equal(r.message, expected));
	json_decref(expected);
	assert_string_equal(r.tools_started, "call_1=get_weather");
	assert_int_equal(r.deltas, 0);

	/* The continuation takes the next step. */
	json_array_append(messages, r.message);
	results = msg_user_new();
	msg_add_tool_result(results, "call_1", "sunny, 24 C", false);
	json_array_append_new(messages, results);
	result_free(&r);
	start(fx, messages, true, &r, NULL);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(r.stop, MODEL_STOP_END_TURN);
	assert_string_equal(r.stop_raw, "end_turn");
	assert_string_equal(r.text.data, "It is sunny in Paris.");
	result_free(&r);
	json_decref(messages);

	/* Regex, anchored; then case-insensitive with the user text. */
	expect_reply(fx, "ping", "pong");
	expect_reply(fx, "ping 42", "pong");
	expect_reply(fx, "say hello", "hi, say hello!");
	/* Matched steps are reusable. */
	expect_reply(fx, "ping", "pong");
	/* No match: steps without one in order from after the last answer;
	 * "ping 42x" does not match the anchored regex. */
	expect_reply(fx, "ping 42x", "first in order");
	expect_reply(fx, "anything", "second in order");
	/* Exhausted: the last step without a match repeats. */
	expect_reply(fx, "more", "second in order");
	expect_reply(fx, "and more", "second in order");
	/* The substring match is case-sensitive. */
	expect_reply(fx, "WEATHER", "second in order");
}

static void test_yaml_script(void **state)
{
	struct fixture *fx = *state;

	create_ok(fx, yaml_script);
	run_selection(fx);
}

static void test_jsonl_script(void **state)
{
	struct fixture *fx = *state;

	create_ok(fx, jsonl_script);
	run_selection(fx);
}

static void test_tool_call_ids_and_stop(void **state)
{
	struct fixture *fx = *state;
	struct result r;
	json_t *c;

	create_ok(fx, "steps:\n"
	              "  - text: Two tools.\n"
	              "    tool_calls:\n"
	              "      - {name: a}\n"
	              "      - {name: b, id: mine, input: {x: [1, \"2\"], y: null}}\n"
	              "      - {name: c, input: {q: '007', e: 1.5}}\n"
	              "  - text: cut short\n"
	              "    stop: max_tokens\n");
	ask(fx, "go", &r);
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(r.stop, MODEL_STOP_TOOL_USE);
	c = json_object_get(r.message, "content");
	assert_int_equal(json_array_size(c), 4);
	assert_string_equal(json_string_value(json_object_get(json_array_get(c, 0), "text")),
	                    "Two tools.");
	assert_string_equal(json_string_value(json_object_get(json_array_get(c, 1), "id")),
	                    "call_1");
	assert_true(json_is_object(json_object_get(json_array_get(c, 1), "input")));
	assert_int_equal(json_object_size(json_object_get(json_array_get(c, 1), "input")), 0);
	assert_string_equal(json_string_value(json_object_get(json_array_get(c, 2), "id")), "mine");
	{
		json_t *want = json_loads("{\"x\":[1,\"2\"],\"y\":null}", 0, NULL);

		assert_true(json_equal(json_object_get(json_array_get(c, 2), "input"), want));
		json_decref(want);
		want = json_loads("{\"q\":\"007\",\"e\":1.5}", 0, NULL);
		assert_true(json_equal(json_object_get(json_array_get(c, 3), "input"), want));
		json_decref(want);
	}
	assert_string_equal(json_string_value(json_object_get(json_array_get(c, 3), "id")),
	                    "call_2");
	assert_string_equal(r.tools_started, "call_1=a mine=b call_2=c");
	result_free(&r);

	ask(fx, "again", &r);
	assert_int_equal(r.stop, MODEL_STOP_MAX_TOKENS);
	assert_string_equal(r.stop_raw, "max_tokens");
	result_free(&r);
}

static void test_streaming(void **state)
{
	struct fixture *fx = *state;
	static const char text[] = "Grüße aus Köln — naïve café, 日本語のテキスト and more words.";
	char script[512];
	struct result r;
	json_t *messages = json_array();
	char *t;

	snprintf(script, sizeof script, "steps:\n  - text: \"%s\"\n", text);
	create_ok(fx, script);
	ask(fx, "stream please", &r);
	assert_int_equal(r.rc, SB_OK);
	assert_true(r.deltas >= 5);
	assert_false(r.split_utf8);
	assert_string_equal(r.text.data, text);
	t = msg_text(r.message);
	assert_string_equal(t, text);
	free(t);
	/* Usage: ceil(chars / 4) of the reply and of the request. */
	assert_int_equal(r.usage.output_tokens, (int64_t)((strlen(text) + 3) / 4));
	{
		json_t *m = json_array();
		size_t n;

		json_array_append_new(m, msg_user_text_new("stream please"));
		n = json_dumpb(m, NULL, 0, JSON_COMPACT) + strlen("You are a test.");
		assert_int_equal(r.usage.input_tokens, (int64_t)((n + 3) / 4));
		json_decref(m);
	}
	result_free(&r);

	/* Without streaming: no deltas, the same message. */
	json_array_append_new(messages, msg_user_text_new("no stream"));
	start(fx, messages, false, &r, NULL);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(r.deltas, 0);
	t = msg_text(r.message);
	assert_string_equal(t, text);
	free(t);
	result_free(&r);
	json_decref(messages);
}

static void test_delay(void **state)
{
	struct fixture *fx = *state;
	struct result r;
	uint64_t t0;

	create_ok(fx, "{\"text\": \"slow\", \"delay_ms\": 80}\n{\"text\": \"fast\"}\n");
	uv_update_time(&fx->loop);
	t0 = uv_now(&fx->loop);
	ask(fx, "x", &r);
	assert_string_equal(r.text.data, "slow");
	assert_true(uv_now(&fx->loop) - t0 >= 80);
	result_free(&r);
	t0 = uv_now(&fx->loop);
	ask(fx, "x", &r);
	assert_string_equal(r.text.data, "fast");
	assert_true(uv_now(&fx->loop) - t0 < 80);
	result_free(&r);
}

static void test_delay_past_timeout(void **state)
{
	struct fixture *fx = *state;
	struct result r;
	uint64_t t0;

	fx->cfg.timeout_ms = 1000;
	create_ok(fx, "{\"text\": \"too slow\", \"delay_ms\": 60000}\n");
	uv_update_time(&fx->loop);
	t0 = uv_now(&fx->loop);
	ask(fx, "x", &r);
	assert_int_equal(r.rc, SB_ERR_TIMEOUT);
	assert_int_equal(r.err.kind, MODEL_ERR_TIMEOUT);
	assert_true(uv_now(&fx->loop) - t0 >= 1000);
	assert_true(uv_now(&fx->loop) - t0 < 5000);
	result_free(&r);
}

static void test_error_kinds(void **state)
{
	struct fixture *fx = *state;
	static const struct {
		const char *name;
		enum model_error_kind kind;
		int rc;
		int status;
	} kinds[] = {
	    {"rate_limit", MODEL_ERR_RATE_LIMIT, SB_ERR_AGAIN, 429},
	    {"overloaded", MODEL_ERR_OVERLOADED, SB_ERR_AGAIN, 529},
	    {"timeout", MODEL_ERR_TIMEOUT, SB_ERR_TIMEOUT, 0},
	    {"network", MODEL_ERR_NETWORK, SB_ERR_HTTP, 0},
	    {"prompt_too_long", MODEL_ERR_PROMPT_TOO_LONG, SB_ERR_TOOBIG, 400},
	    {"auth", MODEL_ERR_AUTH, SB_ERR_PERM, 401},
	    {"bad_request", MODEL_ERR_BAD_REQUEST, SB_ERR_INVAL, 400},
	    {"bad_response", MODEL_ERR_BAD_RESPONSE, SB_ERR_PROTO, 0},
	};
	struct buf script;
	struct result r;

	buf_init(&script, 4096);
	buf_puts(&script, "steps:\n");
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		buf_printf(&script, "  - error: %s\n%s", kinds[i].name,
		           i == 0 ? "    retry_after_ms: 1500\n" : "");
	buf_puts(&script, "  - text: recovered\n");
	create_ok(fx, script.data);
	buf_free(&script);
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
		char want[64];

		ask(fx, "x", &r);
		assert_int_equal(r.rc, kinds[i].rc);
		assert_int_equal(r.err.kind, kinds[i].kind);
		assert_int_equal(r.err.http_status, kinds[i].status);
		assert_int_equal(r.err.retry_after_ms, i == 0 ? 1500 : -1);
		snprintf(want, sizeof want, "scripted %s (step %zu)", kinds[i].name, i);
		assert_string_equal(r.err.message, want);
		result_free(&r);
	}
	expect_reply(fx, "x", "recovered");
}

static void test_builtin_offline(void **state)
{
	struct fixture *fx = *state;
	struct result r;
	char *t;

	fx->cfg.script = "builtin:offline";
	create_ok(fx, NULL);
	ask(fx, "Hello from the test, ünïcode too", &r);
	assert_int_equal(r.rc, SB_OK);
	t = msg_text(r.message);
	assert_string_equal(r.text.data, t);
	assert_non_null(strstr(t, "You said: Hello from the test, ünïcode too\n"));
	assert_non_null(strstr(t, "providers:"));
	assert_non_null(strstr(t, "api: openai-chat"));
	assert_non_null(strstr(t, "api_key: ${OPENAI_API_KEY}"));
	assert_non_null(strstr(t, "api: anthropic-messages"));
	assert_non_null(strstr(t, "$SWITCHBOARD_HOME/switchboard.yaml"));
	assert_non_null(strstr(t, "model:"));
	assert_true(strlen(t) < 1500);
	free(t);
	result_free(&r);
	/* It answers every message, again and again. */
	t = ask_text(fx, "second");
	assert_non_null(strstr(t, "You said: second\n"));
	free(t);

	fx->p->ops->destroy(fx->p);
	fx->p = NULL;
	fx->cfg.script = "builtin:nope";
	assert_int_equal(create(fx, NULL), SB_ERR_CONFIG);
	assert_null(fx->p);
}

static void test_cancel(void **state)
{
	struct fixture *fx = *state;
	struct provider_call *pc = NULL;
	struct result r;
	json_t *messages = json_array();
	uint64_t t0;

	create_ok(fx, "steps:\n  - text: never seen\n    delay_ms: 100000\n"
	              "  - text: one two three four\n");
	json_array_append_new(messages, msg_user_text_new("x"));
	start(fx, messages, true, &r, &pc);
	assert_non_null(pc);
	uv_update_time(&fx->loop);
	t0 = uv_now(&fx->loop);
	fx->p->ops->cancel(pc);
	/* Done ran before cancel returned. */
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.rc, SB_ERR_ABORTED);
	assert_int_equal(r.err.kind, MODEL_ERR_ABORTED);
	assert_int_equal(r.deltas, 0);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(r.calls, 1);
	assert_true(uv_now(&fx->loop) - t0 < 1000);
	result_free(&r);

	/* Cancel from inside a delta: no more deltas, one done. */
	start(fx, messages, true, &r, &pc);
	r.cancel_in_delta = pc;
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.rc, SB_ERR_ABORTED);
	assert_int_equal(r.deltas, 1);
	assert_string_equal(r.text.data, "one ");
	result_free(&r);

	/* Destroying the provider ends the calls in flight. */
	start(fx, messages, true, &r, &pc);
	fx->p->ops->destroy(fx->p);
	fx->p = NULL;
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.rc, SB_ERR_ABORTED);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(r.calls, 1);
	result_free(&r);
	json_decref(messages);
}

static void test_bad_scripts(void **state)
{
	struct fixture *fx = *state;
	static const char *const bad[] = {
	    "",
	    "steps: []\n",
	    "steps:\n  - text: a\n    colour: red\n",
	    "steps:\n  - match: x\n",
	    "steps:\n  - match: \"/a(/\"\n    text: x\n",
	    "steps:\n  - error: teapot\n",
	    "steps:\n  - text: a\n    stop: tool_use\n",
	    "steps:\n  - text: a\n    delay_ms: -1\n",
	    "steps:\n  - text: a\n    delay_ms: soon\n",
	    "steps:\n  - tool_calls: []\n",
	    "steps:\n  - tool_calls: [{input: {}}]\n",
	    "steps:\n  - tool_calls: [{name: a, input: [1]}]\n",
	    "steps:\n  - tool_calls: [{name: a, extra: 1}]\n",
	    "steps:\n  - [text, a]\n",
	    "steps:\n  - text: a\nother: 1\n",
	    "steps: [\n",
	    "{\"text\": \"a\"}\n{\"text\": \n",
	    "{\"text\": \"a\"}\n[1]\n",
	};

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (create(fx, bad[i]) != SB_ERR_CONFIG)
			fail_msg("accepted script %zu: %s", i, bad[i]);
		assert_null(fx->p);
	}
	unlink(fx->script);
	assert_int_equal(create(fx, NULL), SB_ERR_CONFIG);
	fx->cfg.script = NULL;
	assert_int_equal(create(fx, NULL), SB_ERR_CONFIG);
}

/* Only steps with a match: a message that matches none fails cleanly. */
static void test_no_step_answers(void **state)
{
	struct fixture *fx = *state;
	struct result r;

	create_ok(fx, "steps:\n  - match: yes\n    text: ok\n");
	expect_reply(fx, "yes", "ok");
	ask(fx, "no", &r);
	assert_int_equal(r.rc, SB_ERR_INVAL);
	assert_int_equal(r.err.kind, MODEL_ERR_BAD_REQUEST);
	assert_string_equal(r.err.message, "scripted: no step of the script answers this request");
	result_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_yaml_script, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_jsonl_script, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tool_call_ids_and_stop, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_streaming, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_delay, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_delay_past_timeout, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_error_kinds, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_builtin_offline, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_scripts, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_no_step_answers, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
