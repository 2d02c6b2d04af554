/*
 * test_providers.c - the openai-chat and anthropic-messages providers against
 * tests/fakes/fake_llm.js, over the real httpc on a real libuv loop: answers
 * (text, tool calls, usage), streamed and not; the requests as the server saw
 * them; every fault classified; cancel; UTF-8 split at the byte level.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/integration/harness.h"

#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "agents/provider.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/httpc.h"
#include "gateway/core/num.h"

#define WATCHDOG_MS 20000

enum { OAI = 0, ANT = 1, N_API = 2 };

static const char *const api_names[N_API] = {"openai-chat", "anthropic-messages"};
static const char *const api_labels[N_API] = {"provider \"oai\" (OpenAI API at http://",
                                              "provider \"ant\" (Anthropic API at http://"};
static const char *const api_keys[N_API] = {"sk-test-secret-key-123", "ant-test-secret-key-456"};

/* cmocka's asserts longjmp; from inside a libuv or curl callback that would
 * leave both in a broken state. Callbacks record their first failure here
 * and the test body asserts it after the loop returns. */
static char check_failure[512];

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond) && !check_failure[0])                                                  \
			snprintf(check_failure, sizeof(check_failure), "%s:%d: %s", __FILE__,      \
			         __LINE__, #cond);                                                 \
	} while (0)

static void assert_no_check_failure(void)
{
	if (check_failure[0])
		fail_msg("in a callback: %s", check_failure);
}

/* ---- the fake server, shared by the group ----------------------------- */

/* The fake model server (tests/fakes/fake_llm.js), shared by the group. */
static struct harness_peer fake;
static char fake_script[64];

static int fake_start(void **state)
{
	static const char script[] = "[{\"text\": \"from the script file\"}]";
	const char *args[] = {"--script", fake_script, NULL};
	int fd;

	(void)state;
	snprintf(fake_script, sizeof fake_script, "/tmp/sb-fake-llm-XXXXXX");
	fd = mkstemp(fake_script);
	if (fd < 0 || write(fd, script, sizeof(script) - 1) != (ssize_t)(sizeof(script) - 1))
		return -1;
	close(fd);
	return harness_peer_start(&fake, "fake_llm.js", args);
}

static int fake_stop(void **state)
{
	(void)state;
	harness_peer_stop(&fake);
	if (fake_script[0])
		unlink(fake_script);
	httpc_global_cleanup();
	return 0;
}

/* ---- per-test loop, client, host and providers ------------------------ */

struct tctx {
	uv_loop_t loop;
	struct httpc *http;
	struct host host;
	char base[N_API][64];
	struct provider_config cfg[N_API];
	struct provider *prov[N_API];
	const struct provider_ops *ops[N_API];
	uv_timer_t timer;
	bool timer_used;
};

static struct httpc *test_http_client(void *ctx)
{
	struct tctx *t = ctx;

	return t->http;
}

static const struct httpc_options http_opts = {
    .timeout_ms = 10000,
    .connect_timeout_ms = 2000,
    .max_connections = 8,
    .max_response_bytes = 64 * 1024 * 1024,
};

static int setup(void **state)
{
	struct tctx *t = calloc(1, sizeof(*t));
	int i;

	check_failure[0] = '\0';
	if (!t || uv_loop_init(&t->loop) != 0)
		return -1;
	if (httpc_new(&t->http, &t->loop, &http_opts) != SB_OK)
		return -1;
	t->host.ctx = t;
	t->host.loop = &t->loop;
	t->host.http_client = test_http_client;
	snprintf(t->base[OAI], sizeof(t->base[OAI]), "http://127.0.0.1:%d/v1", fake.port);
	snprintf(t->base[ANT], sizeof(t->base[ANT]), "http://127.0.0.1:%d", fake.port);
	for (i = 0; i < N_API; i++) {
		t->cfg[i].id = i == OAI ? "oai" : "ant";
		t->cfg[i].api = i == OAI ? PROVIDER_API_OPENAI_CHAT : PROVIDER_API_ANTHROPIC;
		t->cfg[i].base_url = t->base[i];
		t->cfg[i].api_key = (char *)api_keys[i];
		t->cfg[i].timeout_ms = 5000;
		t->cfg[i].max_retries = 0;
		t->cfg[i].max_tokens = 256;
		t->cfg[i].stream = true;
		t->cfg[i].anthropic_version = i == ANT ? "2023-06-01" : NULL;
		t->ops[i] = provider_ops_for(api_names[i]);
		if (!t->ops[i] || t->ops[i]->create(&t->prov[i], &t->cfg[i], &t->host) != SB_OK)
			return -1;
	}
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct tctx *t = *state;
	int i, rc;

	for (i = 0; i < N_API; i++)
		t->ops[i]->destroy(t->prov[i]);
	httpc_close(t->http);
	if (t->timer_used)
		uv_close((uv_handle_t *)&t->timer, NULL);
	uv_run(&t->loop, UV_RUN_DEFAULT);
	rc = uv_loop_close(&t->loop);
	free(t);
	return rc == 0 ? 0 : -1;
}

static void run_until(struct tctx *t, const int *counter, int target)
{
	uint64_t start;

	uv_update_time(&t->loop);
	start = uv_now(&t->loop);
	while (*counter < target) {
		uv_run(&t->loop, UV_RUN_ONCE);
		assert_no_check_failure();
		if (uv_now(&t->loop) - start > WATCHDOG_MS)
			fail_msg("timed out waiting for %d completions (have %d)", target,
			         *counter);
	}
	assert_no_check_failure();
}

/* ---- the fake's control routes ---------------------------------------- */

struct ctl {
	int done;
	int rc;
	long status;
	json_t *j;
};

static void ctl_done(void *ud, int rc, const struct httpc_response *resp)
{
	struct ctl *c = ud;

	c->done++;
	c->rc = rc;
	c->status = resp->status;
	if (rc == SB_OK)
		c->j = json_loadb(resp->body.data ? resp->body.data : "", resp->body.len, 0, NULL);
}

static json_t *ctl(struct tctx *t, const char *method, const char *path, const char *body)
{
	char url[128];
	struct httpc_request req = {.method = method, .url = url};
	struct ctl c = {0};

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", fake.port, path);
	if (body) {
		req.body = body;
		req.body_len = strlen(body);
	}
	assert_int_equal(httpc_request(t->http, &req, ctl_done, &c, NULL), SB_OK);
	run_until(t, &c.done, 1);
	assert_int_equal(c.rc, SB_OK);
	if (c.status != 200)
		fail_msg("%s %s: HTTP %ld", method, path, c.status);
	assert_non_null(c.j);
	return c.j;
}

static void load_script(struct tctx *t, const char *script)
{
	json_decref(ctl(t, "POST", "/__reset", NULL));
	json_decref(ctl(t, "POST", "/__script", script));
}

/* The requests the fake received since the last load_script (new ref). */
static json_t *fake_requests(struct tctx *t)
{
	json_t *j = ctl(t, "GET", "/__requests", NULL);

	assert_true(json_is_array(j));
	return j;
}

/* ---- one model call --------------------------------------------------- */

struct result {
	struct tctx *t;
	int api;
	int calls;
	int rc;
	json_t *msg;
	enum model_stop stop;
	char stop_raw[32];
	char model[64];
	struct model_usage usage;
	struct model_error err;
	struct buf text;
	int deltas;
	bool bad_utf8;
	int n_starts;
	char start_ids[8][32];
	char start_names[8][32];
	/* tool calls complete while streaming (tool_use_done) */
	int n_ready;
	char ready_ids[8][40];
	json_t *ready_inputs;
	int ready_deltas[8]; /* text deltas seen before each */
	/* broken tool calls of the answer (model_bad_call) */
	int n_bad;
	char bad_ids[8][40];
	bool bad_cut[8];
	size_t bad_bytes[8];
	struct provider_call *pc;
	int cancel_at_delta; /* cancel from inside this delta (1-based) */
	int calls_after_cancel;
};

static void result_init(struct result *r, struct tctx *t, int api)
{
	memset(r, 0, sizeof(*r));
	r->t = t;
	r->api = api;
	r->rc = -1;
	r->calls_after_cancel = -1;
	buf_init(&r->text, 1 << 20);
	r->ready_inputs = json_array();
}

static void result_free(struct result *r)
{
	json_decref(r->ready_inputs);
	json_decref(r->msg);
	buf_free(&r->text);
}

/* Whether s is whole, valid UTF-8. */
static bool utf8_whole(const unsigned char *s, size_t n)
{
	size_t i = 0, k, need;

	while (i < n) {
		if (s[i] < 0x80)
			need = 0;
		else if ((s[i] & 0xE0) == 0xC0)
			need = 1;
		else if ((s[i] & 0xF0) == 0xE0)
			need = 2;
		else if ((s[i] & 0xF8) == 0xF0)
			need = 3;
		else
			return false;
		if (need > n - i - 1)
			return false;
		for (k = 1; k <= need; k++)
			if ((s[i + k] & 0xC0) != 0x80)
				return false;
		i += need + 1;
	}
	return true;
}

static void on_delta(void *ud, const char *text, size_t len)
{
	struct result *r = ud;

	CHECK(r->calls == 0);
	CHECK(len > 0);
	if (!utf8_whole((const unsigned char *)text, len))
		r->bad_utf8 = true;
	CHECK(buf_append(&r->text, text, len) == SB_OK);
	r->deltas++;
	if (r->cancel_at_delta && r->deltas == r->cancel_at_delta) {
		r->t->ops[r->api]->cancel(r->pc);
		/* done ran before cancel returned. */
		r->calls_after_cancel = r->calls;
	}
}

static void on_tool_start(void *ud, const char *id, const char *name)
{
	struct result *r = ud;

	CHECK(r->calls == 0);
	CHECK(r->n_starts < 8);
	if (r->n_starts >= 8)
		return;
	snprintf(r->start_ids[r->n_starts], sizeof(r->start_ids[0]), "%s", id);
	snprintf(r->start_names[r->n_starts], sizeof(r->start_names[0]), "%s", name);
	r->n_starts++;
}

static void on_done(void *ud, int rc, const struct model_response *resp,
                    const struct model_error *err)
{
	struct result *r = ud;

	r->calls++;
	CHECK(r->calls == 1);
	r->rc = rc;
	if (rc == SB_OK) {
		CHECK(resp != NULL && err == NULL);
		if (!resp)
			return;
		CHECK(json_is_object(resp->message));
		r->msg = json_deep_copy(resp->message);
		r->stop = resp->stop;
		CHECK(resp->stop_raw != NULL && resp->model != NULL);
		snprintf(r->stop_raw, sizeof(r->stop_raw), "%s", resp->stop_raw);
		snprintf(r->model, sizeof(r->model), "%s", resp->model);
		r->usage = resp->usage;
		CHECK(resp->n_bad_calls <= 8);
		for (size_t i = 0; i < resp->n_bad_calls && i < 8; i++) {
			snprintf(r->bad_ids[i], sizeof r->bad_ids[i], "%s", resp->bad_calls[i].id);
			r->bad_cut[i] = resp->bad_calls[i].cut;
			r->bad_bytes[i] = resp->bad_calls[i].input_bytes;
			r->n_bad++;
		}
	} else {
		CHECK(resp == NULL && err != NULL);
		if (err)
			r->err = *err;
	}
}

static void on_tool_ready(void *ud, const json_t *block)
{
	struct result *r = ud;

	CHECK(r->calls == 0);
	CHECK(r->n_ready < 8);
	if (r->n_ready >= 8)
		return;
	snprintf(r->ready_ids[r->n_ready], sizeof(r->ready_ids[0]), "%s",
	         json_string_value(json_object_get(block, "id")));
	json_array_append(r->ready_inputs, json_object_get(block, "input"));
	r->ready_deltas[r->n_ready] = r->deltas;
	r->n_ready++;
}

static const struct model_stream_events events_tmpl = {
    .text_delta = on_delta,
    .tool_use_start = on_tool_start,
    .tool_use_done = on_tool_ready,
};

/* Starts a call and runs the loop until it is done. */
static void run_call(struct tctx *t, int api, const struct model_request *req, struct result *r)
{
	struct model_stream_events ev = events_tmpl;
	int i;

	ev.ud = r;
	assert_int_equal(t->ops[api]->call(t->prov[api], req, &ev, on_done, r, &r->pc), SB_OK);
	/* Never from inside the call. */
	assert_int_equal(r->calls, 0);
	run_until(t, &r->calls, 1);
	/* And only once. */
	for (i = 0; i < 5; i++)
		uv_run(&t->loop, UV_RUN_NOWAIT);
	assert_no_check_failure();
	assert_int_equal(r->calls, 1);
}

static json_t *jparse(const char *text)
{
	json_error_t e;
	json_t *j = json_loads(text, 0, &e);

	if (!j)
		fail_msg("bad JSON in the test: %s: %s", e.text, text);
	return j;
}

/* got equals the JSON text want. */
static void assert_json_eq(const json_t *got, const char *want)
{
	json_t *w = jparse(want);
	char *g;

	if (!json_equal(got, w)) {
		g = got ? json_dumps(got, JSON_SORT_KEYS | JSON_ENCODE_ANY) : NULL;
		json_decref(w);
		fail_msg("got %s, want %s", g ? g : "(null)", want);
	}
	json_decref(w);
}

static json_t *user_text_history(const char *text)
{
	return json_pack("[{s:s, s:[{s:s, s:s}]}]", "role", "user", "content", "type", "text",
	                 "text", text);
}

static const char tools_json[] =
    "[{\"name\": \"read\", \"description\": \"Read a file\", \"input_schema\": {\"type\": "
    "\"object\", \"properties\": {\"path\": {\"type\": \"string\"}}, \"required\": [\"path\"]}},"
    " {\"name\": \"ls\", \"description\": \"List a directory\", \"input_schema\": {\"type\": "
    "\"object\", \"properties\": {\"dir\": {\"type\": \"string\"}}}}]";

static void simple_call(struct tctx *t, int api, bool stream, const char *user, struct result *r)
{
	json_t *msgs = user_text_history(user);
	struct model_request req = {.model = "fake-model",
	                            .system = "You are terse.",
	                            .messages = msgs,
	                            .max_tokens = 100,
	                            .stream = stream};

	assert_non_null(msgs);
	result_init(r, t, api);
	run_call(t, api, &req, r);
	json_decref(msgs);
}

/* The content blocks of an answer. */
static json_t *content_of(const struct result *r)
{
	json_t *c;

	assert_int_equal(r->rc, SB_OK);
	assert_non_null(r->msg);
	assert_string_equal(json_string_value(json_object_get(r->msg, "role")), "assistant");
	c = json_object_get(r->msg, "content");
	assert_true(json_is_array(c));
	return c;
}

/* ---- tests ------------------------------------------------------------ */

static void test_registry(void **state)
{
	assert_ptr_equal(provider_ops_for("openai-chat"), &provider_openai_ops);
	assert_ptr_equal(provider_ops_for("anthropic-messages"), &provider_anthropic_ops);
	assert_ptr_equal(provider_ops_for("scripted"), &provider_scripted_ops);
	assert_null(provider_ops_for("openai"));
	assert_null(provider_ops_for(NULL));
	assert_string_equal(model_error_kind_name(MODEL_ERR_RATE_LIMIT), "rate_limit");
	assert_string_equal(model_error_kind_name(MODEL_ERR_PROMPT_TOO_LONG), "prompt_too_long");
	assert_string_equal(model_error_kind_name(MODEL_ERR_ABORTED), "aborted");
	assert_string_equal(model_error_kind_name((enum model_error_kind)99), "unknown");
	assert_true(model_error_retryable(MODEL_ERR_RATE_LIMIT));
	assert_true(model_error_retryable(MODEL_ERR_OVERLOADED));
	assert_true(model_error_retryable(MODEL_ERR_TIMEOUT));
	assert_true(model_error_retryable(MODEL_ERR_NETWORK));
	assert_false(model_error_retryable(MODEL_ERR_AUTH));
	assert_false(model_error_retryable(MODEL_ERR_PROMPT_TOO_LONG));
	assert_false(model_error_retryable(MODEL_ERR_BAD_REQUEST));
	assert_false(model_error_retryable(MODEL_ERR_ABORTED));
}

/* The fake started with --script: its first answer comes from the file. */
static void test_script_file(void **state)
{
	struct tctx *t = *state;
	struct result r;
	json_t *c;

	simple_call(t, OAI, false, "hello", &r);
	c = content_of(&r);
	assert_int_equal(json_array_size(c), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(c, 0), "text")),
	                    "from the script file");
	result_free(&r);
}

static void test_text_answer(void **state)
{
	struct tctx *t = *state;
	static const char text[] = "Hello there, this is the answer in several deltas.";
	struct result r;
	json_t *c, *b;
	int api, stream;

	for (api = 0; api < N_API; api++) {
		for (stream = 0; stream < 2; stream++) {
			load_script(t, "[{\"text\": \"Hello there, this is the answer in several "
			               "deltas.\", \"usage\": {\"input\": 30, \"output\": 11, "
			               "\"cache_read\": 8, \"cache_write\": 3}}]");
			simple_call(t, api, stream, "hi", &r);
			c = content_of(&r);
			assert_int_equal(json_array_size(c), 1);
			b = json_array_get(c, 0);
			assert_string_equal(json_string_value(json_object_get(b, "type")), "text");
			assert_string_equal(json_string_value(json_object_get(b, "text")), text);
			assert_int_equal(r.stop, MODEL_STOP_END_TURN);
			assert_string_equal(r.stop_raw, api == OAI ? "stop" : "end_turn");
			assert_string_equal(r.model, "fake-model");
			assert_int_equal(r.usage.output_tokens, 11);
			assert_int_equal(r.usage.cache_read_tokens, 8);
			if (api == OAI) {
				/* prompt_tokens 30 include the 8 cached ones. */
				assert_int_equal(r.usage.input_tokens, 22);
				assert_int_equal(r.usage.cache_write_tokens, 0);
			} else {
				assert_int_equal(r.usage.input_tokens, 19);
				assert_int_equal(r.usage.cache_write_tokens, 3);
			}
			if (stream) {
				assert_true(r.deltas >= 5);
				assert_int_equal(r.text.len, strlen(text));
				assert_string_equal(r.text.data, text);
				assert_false(r.bad_utf8);
			} else {
				assert_int_equal(r.deltas, 0);
			}
			result_free(&r);
		}
	}
}

static void test_tool_answer(void **state)
{
	struct tctx *t = *state;
	struct result r;
	json_t *c, *b, *want_a, *want_b;
	const char *ids[N_API][2] = {{"call_1", "call_2"}, {"toolu_1", "toolu_2"}};
	int api, stream;

	want_a = jparse("{\"path\": \"a.txt\", \"lines\": [1, 2], \"opts\": {\"x\": \"\\u00e9\"}}");
	want_b = jparse("{\"dir\": \"/tmp\", \"all\": true}");
	for (api = 0; api < N_API; api++) {
		for (stream = 0; stream < 2; stream++) {
			load_script(t, "[{\"text\": \"Let me look.\", \"tool_calls\": ["
			               "{\"name\": \"read\", \"input\": {\"path\": \"a.txt\", "
			               "\"lines\": [1, 2], \"opts\": {\"x\": \"\\u00e9\"}}},"
			               "{\"name\": \"ls\", \"input\": {\"dir\": \"/tmp\", \"all\": "
			               "true}}]}]");
			simple_call(t, api, stream, "look around", &r);
			c = content_of(&r);
			assert_int_equal(json_array_size(c), 3);
			b = json_array_get(c, 0);
			assert_string_equal(json_string_value(json_object_get(b, "type")), "text");
			assert_string_equal(json_string_value(json_object_get(b, "text")),
			                    "Let me look.");
			b = json_array_get(c, 1);
			assert_string_equal(json_string_value(json_object_get(b, "type")),
			                    "tool_use");
			assert_string_equal(json_string_value(json_object_get(b, "id")),
			                    ids[api][0]);
			assert_string_equal(json_string_value(json_object_get(b, "name")), "read");
			assert_true(json_equal(json_object_get(b, "input"), want_a));
			b = json_array_get(c, 2);
			assert_string_equal(json_string_value(json_object_get(b, "type")),
			                    "tool_use");
			assert_string_equal(json_string_value(json_object_get(b, "id")),
			                    ids[api][1]);
			assert_string_equal(json_string_value(json_object_get(b, "name")), "ls");
			assert_true(json_equal(json_object_get(b, "input"), want_b));
			assert_int_equal(r.stop, MODEL_STOP_TOOL_USE);
			assert_string_equal(r.stop_raw, api == OAI ? "tool_calls" : "tool_use");
			if (stream) {
				assert_int_equal(r.n_starts, 2);
				assert_string_equal(r.start_ids[0], ids[api][0]);
				assert_string_equal(r.start_names[0], "read");
				assert_string_equal(r.start_ids[1], ids[api][1]);
				assert_string_equal(r.start_names[1], "ls");
				assert_string_equal(r.text.data, "Let me look.");
			}
			result_free(&r);
		}
	}
	json_decref(want_a);
	json_decref(want_b);
}

/* Tool calls without text and without arguments; the output limit. */
static void test_tool_only_and_max_tokens(void **state)
{
	struct tctx *t = *state;
	struct result r;
	json_t *c, *b;
	int api, stream;

	for (api = 0; api < N_API; api++) {
		for (stream = 0; stream < 2; stream++) {
			load_script(t, "[{\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]},"
			               " {\"text\": \"cut sho\", \"stop\": \"max_tokens\"}]");
			simple_call(t, api, stream, "go", &r);
			c = content_of(&r);
			assert_int_equal(json_array_size(c), 1);
			b = json_array_get(c, 0);
			assert_string_equal(json_string_value(json_object_get(b, "name")), "ls");
			assert_true(json_is_object(json_object_get(b, "input")));
			assert_int_equal(json_object_size(json_object_get(b, "input")), 0);
			assert_int_equal(r.stop, MODEL_STOP_TOOL_USE);
			result_free(&r);

			simple_call(t, api, stream, "go on", &r);
			c = content_of(&r);
			assert_int_equal(json_array_size(c), 1);
			assert_string_equal(
			    json_string_value(json_object_get(json_array_get(c, 0), "text")),
			    "cut sho");
			assert_int_equal(r.stop, MODEL_STOP_MAX_TOKENS);
			assert_string_equal(r.stop_raw, api == OAI ? "length" : "max_tokens");
			result_free(&r);
		}
	}
}

/* A history with every kind of block. */
static const char history_json[] =
    "[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"read a.txt and "
    "b.txt\"}]},"
    " {\"role\": \"assistant\", \"content\": [{\"type\": \"text\", \"text\": \"Reading.\"},"
    "  {\"type\": \"tool_use\", \"id\": \"call_a\", \"name\": \"read\", \"input\": {\"path\": "
    "\"a.txt\"}},"
    "  {\"type\": \"tool_use\", \"id\": \"call_b\", \"name\": \"read\", \"input\": {\"path\": "
    "\"b.txt\"}}]},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": "
    "\"call_a\", \"content\": \"alpha\", \"is_error\": false},"
    "  {\"type\": \"tool_result\", \"tool_use_id\": \"call_b\", \"content\": \"no such file\", "
    "\"is_error\": true},"
    "  {\"type\": \"text\", \"text\": \"and summarise\"}]}]";

static json_t *request_body(json_t *reqs, size_t i, const char *path)
{
	json_t *rq = json_array_get(reqs, i);

	assert_non_null(rq);
	assert_string_equal(json_string_value(json_object_get(rq, "method")), "POST");
	assert_string_equal(json_string_value(json_object_get(rq, "path")), path);
	assert_true(json_is_object(json_object_get(rq, "body")));
	return rq;
}

static const char *header(json_t *rq, const char *name)
{
	return json_string_value(json_object_get(json_object_get(rq, "headers"), name));
}

static void test_openai_request_shape(void **state)
{
	struct tctx *t = *state;
	json_t *hist = jparse(history_json), *tools = jparse(tools_json), *reqs, *rq, *body, *m,
	       *tc, *args, *tl;
	char *before = json_dumps(hist, JSON_SORT_KEYS), *after;
	struct model_request req = {.model = "gpt-test",
	                            .system = "SYS PROMPT",
	                            .messages = hist,
	                            .tools = tools,
	                            .max_tokens = 123,
	                            .stream = true};
	struct result r;

	load_script(t, "[{\"text\": \"ok\"}, {\"text\": \"ok again\"}]");
	result_init(&r, t, OAI);
	run_call(t, OAI, &req, &r);
	assert_int_equal(r.rc, SB_OK);
	result_free(&r);

	/* The caller's history is untouched. */
	after = json_dumps(hist, JSON_SORT_KEYS);
	assert_string_equal(before, after);
	free(after);

	reqs = fake_requests(t);
	assert_int_equal(json_array_size(reqs), 1);
	rq = request_body(reqs, 0, "/v1/chat/completions");
	assert_string_equal(header(rq, "authorization"), "Bearer sk-test-secret-key-123");
	assert_string_equal(header(rq, "content-type"), "application/json");
	body = json_object_get(rq, "body");
	assert_string_equal(json_string_value(json_object_get(body, "model")), "gpt-test");
	assert_int_equal(json_integer_value(json_object_get(body, "max_tokens")), 123);
	assert_true(json_is_true(json_object_get(body, "stream")));
	assert_true(json_is_true(
	    json_object_get(json_object_get(body, "stream_options"), "include_usage")));

	m = json_object_get(body, "messages");
	assert_int_equal(json_array_size(m), 6);
	assert_json_eq(json_array_get(m, 0), "{\"role\": \"system\", \"content\": \"SYS PROMPT\"}");
	assert_string_equal(json_string_value(json_object_get(json_array_get(m, 1), "role")),
	                    "user");
	assert_string_equal(json_string_value(json_object_get(json_array_get(m, 1), "content")),
	                    "read a.txt and b.txt");
	/* The assistant's text and its tool calls, arguments as JSON text. */
	assert_string_equal(json_string_value(json_object_get(json_array_get(m, 2), "role")),
	                    "assistant");
	assert_string_equal(json_string_value(json_object_get(json_array_get(m, 2), "content")),
	                    "Reading.");
	tc = json_object_get(json_array_get(m, 2), "tool_calls");
	assert_int_equal(json_array_size(tc), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(tc, 0), "id")),
	                    "call_a");
	assert_string_equal(json_string_value(json_object_get(json_array_get(tc, 0), "type")),
	                    "function");
	assert_string_equal(json_string_value(json_object_get(
	                        json_object_get(json_array_get(tc, 1), "function"), "name")),
	                    "read");
	args = jparse(json_string_value(
	    json_object_get(json_object_get(json_array_get(tc, 1), "function"), "arguments")));
	assert_string_equal(json_string_value(json_object_get(args, "path")), "b.txt");
	json_decref(args);
	/* One role "tool" message per result, errors marked. */
	assert_string_equal(json_string_value(json_object_get(json_array_get(m, 3), "role")),
	                    "tool");
	assert_string_equal(
	    json_string_value(json_object_get(json_array_get(m, 3), "tool_call_id")), "call_a");
	assert_string_equal(json_string_value(json_object_get(json_array_get(m, 3), "content")),
	                    "alpha");
	assert_string_equal(
	    json_string_value(json_object_get(json_array_get(m, 4), "tool_call_id")), "call_b");
	assert_string_equal(json_string_value(json_object_get(json_array_get(m, 4), "content")),
	                    "Error: no such file");
	assert_string_equal(json_string_value(json_object_get(json_array_get(m, 5), "role")),
	                    "user");
	assert_string_equal(json_string_value(json_object_get(json_array_get(m, 5), "content")),
	                    "and summarise");
	/* Tools as functions. */
	tl = json_object_get(body, "tools");
	assert_int_equal(json_array_size(tl), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(tl, 0), "type")),
	                    "function");
	assert_string_equal(json_string_value(json_object_get(
	                        json_object_get(json_array_get(tl, 0), "function"), "name")),
	                    "read");
	assert_string_equal(json_string_value(json_object_get(
	                        json_object_get(json_array_get(tl, 0), "function"), "description")),
	                    "Read a file");
	assert_true(json_equal(
	    json_object_get(json_object_get(json_array_get(tl, 0), "function"), "parameters"),
	    json_object_get(json_array_get(tools, 0), "input_schema")));
	json_decref(reqs);

	/* No key (a local server): no Authorization. Not streamed: no
	 * stream_options. An assistant message with only tool calls has
	 * content null. */
	t->cfg[OAI].api_key = NULL;
	json_array_remove(hist, 2);
	json_array_remove(json_object_get(json_array_get(hist, 1), "content"), 0);
	json_array_remove(json_object_get(json_array_get(hist, 1), "content"), 0);
	json_array_append_new(hist, jparse("{\"role\": \"user\", \"content\": [{\"type\": "
	                                   "\"tool_result\", \"tool_use_id\": \"call_b\", "
	                                   "\"content\": [{\"type\": \"text\", \"text\": \"x\"}, "
	                                   "{\"type\": \"text\", \"text\": \"y\"}]}]}"));
	req.stream = false;
	req.tools = NULL;
	req.system = NULL;
	result_init(&r, t, OAI);
	run_call(t, OAI, &req, &r);
	if (r.rc != SB_OK)
		fail_msg("%s", r.err.message);
	result_free(&r);
	reqs = fake_requests(t);
	assert_int_equal(json_array_size(reqs), 2);
	rq = request_body(reqs, 1, "/v1/chat/completions");
	assert_null(header(rq, "authorization"));
	body = json_object_get(rq, "body");
	assert_true(json_is_false(json_object_get(body, "stream")));
	assert_null(json_object_get(body, "stream_options"));
	assert_null(json_object_get(body, "tools"));
	m = json_object_get(body, "messages");
	assert_int_equal(json_array_size(m), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(m, 0), "role")),
	                    "user");
	assert_true(json_is_null(json_object_get(json_array_get(m, 1), "content")));
	assert_int_equal(json_array_size(json_object_get(json_array_get(m, 1), "tool_calls")), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(m, 2), "content")),
	                    "x\ny");
	json_decref(reqs);

	free(before);
	json_decref(hist);
	json_decref(tools);
}

/* Counts occurrences of needle in the body's JSON text. */
static int count_in(json_t *j, const char *needle)
{
	char *s = json_dumps(j, JSON_COMPACT);
	const char *p = s;
	int n = 0;

	assert_non_null(s);
	while ((p = strstr(p, needle)) != NULL) {
		n++;
		p += strlen(needle);
	}
	free(s);
	return n;
}

static void test_anthropic_request_shape(void **state)
{
	struct tctx *t = *state;
	json_t *hist = jparse(history_json), *tools = jparse(tools_json), *reqs, *rq, *body, *m, *b,
	       *tl;
	char *before = json_dumps(hist, JSON_SORT_KEYS), *after;
	struct model_request req = {.model = "claude-test",
	                            .system = "SYS PROMPT",
	                            .messages = hist,
	                            .tools = tools,
	                            .max_tokens = 321,
	                            .stream = true};
	struct result r;

	load_script(t, "[{\"text\": \"ok\"}, {\"text\": \"ok again\"}]");
	result_init(&r, t, ANT);
	run_call(t, ANT, &req, &r);
	assert_int_equal(r.rc, SB_OK);
	result_free(&r);
	after = json_dumps(hist, JSON_SORT_KEYS);
	assert_string_equal(before, after);
	free(after);

	reqs = fake_requests(t);
	assert_int_equal(json_array_size(reqs), 1);
	rq = request_body(reqs, 0, "/v1/messages");
	assert_string_equal(header(rq, "x-api-key"), "ant-test-secret-key-456");
	assert_string_equal(header(rq, "anthropic-version"), "2023-06-01");
	assert_string_equal(header(rq, "content-type"), "application/json");
	assert_null(header(rq, "authorization"));
	body = json_object_get(rq, "body");
	assert_string_equal(json_string_value(json_object_get(body, "model")), "claude-test");
	assert_int_equal(json_integer_value(json_object_get(body, "max_tokens")), 321);
	assert_string_equal(json_string_value(json_object_get(body, "system")), "SYS PROMPT");
	assert_true(json_is_true(json_object_get(body, "stream")));

	m = json_object_get(body, "messages");
	assert_int_equal(json_array_size(m), 3);
	assert_json_eq(
	    json_array_get(m, 0),
	    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"read a.txt "
	    "and b.txt\"}]}");
	assert_json_eq(
	    json_array_get(m, 1),
	    "{\"role\": \"assistant\", \"content\": [{\"type\": \"text\", \"text\": "
	    "\"Reading.\"}, {\"type\": \"tool_use\", \"id\": \"call_a\", \"name\": \"read\", "
	    "\"input\": {\"path\": \"a.txt\"}}, {\"type\": \"tool_use\", \"id\": \"call_b\", "
	    "\"name\": \"read\", \"input\": {\"path\": \"b.txt\"}}]}");
	b = json_object_get(json_array_get(m, 2), "content");
	assert_int_equal(json_array_size(b), 3);
	assert_json_eq(json_array_get(b, 0),
	               "{\"type\": \"tool_result\", \"tool_use_id\": \"call_a\", "
	               "\"content\": \"alpha\"}");
	assert_json_eq(json_array_get(b, 1),
	               "{\"type\": \"tool_result\", \"tool_use_id\": \"call_b\", "
	               "\"content\": \"no such file\", \"is_error\": true}");
	/* Prompt caching: the last block of the last message, and only it. */
	assert_json_eq(json_array_get(b, 2), "{\"type\": \"text\", \"text\": \"and summarise\", "
	                                     "\"cache_control\": {\"type\": \"ephemeral\"}}");
	assert_int_equal(count_in(body, "cache_control"), 1);
	tl = json_object_get(body, "tools");
	assert_int_equal(json_array_size(tl), 2);
	assert_true(json_equal(json_array_get(tl, 1), json_array_get(tools, 1)));
	json_decref(reqs);

	/* A last message whose content is a plain string gets a block with
	 * the breakpoint; not streamed. */
	json_array_append_new(hist, jparse("{\"role\": \"assistant\", \"content\": \"fine\"}"));
	json_array_append_new(hist, jparse("{\"role\": \"user\", \"content\": \"thanks\"}"));
	req.stream = false;
	req.system = NULL;
	result_init(&r, t, ANT);
	run_call(t, ANT, &req, &r);
	if (r.rc != SB_OK)
		fail_msg("%s", r.err.message);
	result_free(&r);
	reqs = fake_requests(t);
	rq = request_body(reqs, 1, "/v1/messages");
	body = json_object_get(rq, "body");
	assert_true(json_is_false(json_object_get(body, "stream")));
	assert_null(json_object_get(body, "system"));
	m = json_object_get(body, "messages");
	assert_int_equal(json_array_size(m), 5);
	assert_json_eq(json_array_get(m, 4),
	               "{\"role\": \"user\", \"content\": [{\"type\": \"text\", "
	               "\"text\": \"thanks\", \"cache_control\": {\"type\": "
	               "\"ephemeral\"}}]}");
	assert_int_equal(count_in(body, "cache_control"), 1);
	json_decref(reqs);

	free(before);
	json_decref(hist);
	json_decref(tools);
}

/* A malformed history is refused at once; done never runs. */
static void test_invalid_request(void **state)
{
	struct tctx *t = *state;
	json_t *bad_role = jparse("[{\"role\": \"system\", \"content\": \"x\"}]");
	json_t *not_array = jparse("{\"role\": \"user\"}");
	struct model_request req = {.model = "m", .max_tokens = 10};
	struct result r;
	int api;

	for (api = 0; api < N_API; api++) {
		result_init(&r, t, api);
		req.messages = bad_role;
		assert_int_equal(t->ops[api]->call(t->prov[api], &req, NULL, on_done, &r, NULL),
		                 SB_ERR_INVAL);
		req.messages = not_array;
		assert_int_equal(t->ops[api]->call(t->prov[api], &req, NULL, on_done, &r, NULL),
		                 SB_ERR_INVAL);
		uv_run(&t->loop, UV_RUN_NOWAIT);
		assert_int_equal(r.calls, 0);
		result_free(&r);
	}
	json_decref(bad_role);
	json_decref(not_array);
}

struct fault_case {
	const char *step;
	enum model_error_kind kind;
	int status;
	int rc;
	int64_t retry_after_ms;
	int only_stream; /* 1: streamed only, -1: not streamed only */
};

static const struct fault_case fault_cases[] = {
    {"{\"fault\": \"429\", \"retry_after\": 3}", MODEL_ERR_RATE_LIMIT, 429, SB_ERR_HTTP, 3000, 0},
    {"{\"fault\": \"500\"}", MODEL_ERR_OVERLOADED, 500, SB_ERR_HTTP, -1, 0},
    {"{\"fault\": \"529\"}", MODEL_ERR_OVERLOADED, 529, SB_ERR_HTTP, -1, 0},
    {"{\"fault\": \"malformed\", \"text\": \"some text to stream first\"}", MODEL_ERR_BAD_RESPONSE,
     -1, SB_ERR_PROTO, -1, 0},
    {"{\"fault\": \"truncated\", \"text\": \"some text to stream first\"}", MODEL_ERR_BAD_RESPONSE,
     -1, SB_ERR_PROTO, -1, 0},
    {"{\"fault\": \"reset\", \"text\": \"some text to stream first\"}", MODEL_ERR_NETWORK, 0,
     SB_ERR_HTTP, -1, 0},
    {"{\"fault\": \"prompt_too_long\"}", MODEL_ERR_PROMPT_TOO_LONG, 400, SB_ERR_HTTP, -1, 0},
    {"{\"fault\": \"auth\"}", MODEL_ERR_AUTH, 401, SB_ERR_HTTP, -1, 0},
    {"{\"fault\": \"bad_request\"}", MODEL_ERR_BAD_REQUEST, 400, SB_ERR_HTTP, -1, 0},
    {"{\"fault\": \"stream_error\", \"text\": \"some text to stream first\"}", MODEL_ERR_OVERLOADED,
     0, SB_ERR_HTTP, -1, 1},
    {"{\"fault\": \"stream_error\"}", MODEL_ERR_OVERLOADED, 500, SB_ERR_HTTP, -1, -1},
};

static void test_faults(void **state)
{
	struct tctx *t = *state;
	char script[256];
	struct result r;
	size_t i;
	int api, stream;

	for (i = 0; i < sizeof(fault_cases) / sizeof(fault_cases[0]); i++) {
		const struct fault_case *fc = &fault_cases[i];

		for (api = 0; api < N_API; api++) {
			for (stream = 0; stream < 2; stream++) {
				if ((fc->only_stream == 1 && !stream) ||
				    (fc->only_stream == -1 && stream))
					continue;
				snprintf(script, sizeof(script), "[%s]", fc->step);
				load_script(t, script);
				simple_call(t, api, stream, "hi", &r);
				if (r.rc == SB_OK || r.err.kind != fc->kind)
					fail_msg("%s, %s, stream %d: got rc %d kind %s (%s)",
					         fc->step, api_names[api], stream, r.rc,
					         model_error_kind_name(r.err.kind), r.err.message);
				assert_int_equal(r.rc, fc->rc);
				if (fc->status >= 0)
					assert_int_equal(r.err.http_status, fc->status);
				assert_int_equal(r.err.retry_after_ms, fc->retry_after_ms);
				assert_true(strncmp(r.err.message, api_labels[api],
				                    strlen(api_labels[api])) == 0);
				/* The key never shows, even when the server echoes it. */
				assert_null(strstr(r.err.message, api_keys[api]));
				if (fc->kind == MODEL_ERR_AUTH)
					assert_non_null(strstr(r.err.message, "[REDACTED]"));
				if (fc->kind == MODEL_ERR_RATE_LIMIT)
					assert_non_null(strcasestr(r.err.message, "rate limit"));
				assert_null(r.msg);
				result_free(&r);
			}
		}
	}
}

static void test_timeout(void **state)
{
	struct tctx *t = *state;
	struct result r;
	uint64_t t0, ms;
	int api, stream;

	for (api = 0; api < N_API; api++) {
		for (stream = 0; stream < 2; stream++) {
			/* Long enough for a loaded machine to deliver the first
			 * chunk, far shorter than the whole answer. */
			t->cfg[api].timeout_ms = 1000;
			load_script(t, stream
			                   ? "[{\"text\": \"a slow stream of many small words "
			                     "here\", \"delta_chars\": 1, \"chunk_delay_ms\": 150}]"
			                   : "[{\"fault\": \"slow\", \"delay_ms\": 10000}]");
			t0 = uv_hrtime();
			simple_call(t, api, stream, "hi", &r);
			ms = (uv_hrtime() - t0) / 1000000;
			if (r.rc != SB_ERR_TIMEOUT || r.err.kind != MODEL_ERR_TIMEOUT)
				fail_msg("got rc %d kind %s (%s)", r.rc,
				         model_error_kind_name(r.err.kind), r.err.message);
			assert_true(ms >= 950 && ms < 8000);
			/* A stream that was cut by the deadline had begun. */
			if (stream)
				assert_true(r.deltas >= 1);
			result_free(&r);
		}
	}
}

static void test_cancel_in_delta(void **state)
{
	struct tctx *t = *state;
	struct model_stream_events ev = events_tmpl;
	json_t *msgs = user_text_history("hi");
	struct model_request req = {
	    .model = "m", .messages = msgs, .max_tokens = 50, .stream = true};
	struct result r, r2;
	int api;

	for (api = 0; api < N_API; api++) {
		load_script(t,
		            "[{\"text\": \"one two three four five six seven\", "
		            "\"chunk_delay_ms\": 30, \"delta_chars\": 3}, {\"text\": \"next\"}]");
		result_init(&r, t, api);
		r.cancel_at_delta = 2;
		ev.ud = &r;
		assert_int_equal(t->ops[api]->call(t->prov[api], &req, &ev, on_done, &r, &r.pc),
		                 SB_OK);
		run_until(t, &r.calls, 1);
		assert_int_equal(r.calls_after_cancel, 1);
		assert_int_equal(r.rc, SB_ERR_ABORTED);
		assert_int_equal(r.err.kind, MODEL_ERR_ABORTED);
		assert_int_equal(r.deltas, 2);

		/* The loop goes on; the cancelled call never reports again. */
		simple_call(t, api, true, "again", &r2);
		assert_int_equal(r2.rc, SB_OK);
		assert_string_equal(r2.text.data, "next");
		result_free(&r2);
		assert_int_equal(r.calls, 1);
		assert_int_equal(r.deltas, 2);
		result_free(&r);
	}
	json_decref(msgs);
}

static void cancel_timer_cb(uv_timer_t *tm)
{
	struct result *r = tm->data;

	CHECK(r->calls == 0);
	r->t->ops[r->api]->cancel(r->pc);
	r->calls_after_cancel = r->calls;
}

static void test_cancel_from_timer(void **state)
{
	struct tctx *t = *state;
	struct model_stream_events ev = events_tmpl;
	json_t *msgs = user_text_history("hi");
	struct model_request req = {.model = "m", .messages = msgs, .max_tokens = 50};
	struct result r;
	int api, stream;

	assert_int_equal(uv_timer_init(&t->loop, &t->timer), 0);
	t->timer_used = true;
	for (api = 0; api < N_API; api++) {
		for (stream = 0; stream < 2; stream++) {
			load_script(t, "[{\"text\": \"late\", \"delay_ms\": 3000}]");
			result_init(&r, t, api);
			ev.ud = &r;
			req.stream = stream;
			assert_int_equal(
			    t->ops[api]->call(t->prov[api], &req, &ev, on_done, &r, &r.pc), SB_OK);
			t->timer.data = &r;
			assert_int_equal(uv_timer_start(&t->timer, cancel_timer_cb, 50, 0), 0);
			run_until(t, &r.calls, 1);
			assert_int_equal(r.calls_after_cancel, 1);
			assert_int_equal(r.rc, SB_ERR_ABORTED);
			assert_int_equal(r.err.kind, MODEL_ERR_ABORTED);
			assert_int_equal(r.deltas, 0);
			result_free(&r);
		}
	}
	json_decref(msgs);
}

/* Every byte of the stream arrives on its own: text split inside UTF-8
 * characters on the wire still comes out whole. */
static void test_utf8_byte_split(void **state)
{
	struct tctx *t = *state;
	static const char text[] = "h\xC3\xA9llo w\xC3\xB6rld \xE2\x80\x94 \xE2\x9C\x93 "
	                           "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x8E\x89"
	                           "\xF0\x9F\x8E\x89 fin";
	char script[256];
	struct result r;
	json_t *c;
	int api;

	snprintf(script, sizeof(script),
	         "[{\"text\": \"%s\", \"chunk_bytes\": 1, \"delta_chars\": 2, \"tool_calls\": "
	         "[{\"name\": \"read\", \"input\": {\"path\": \"\xC3\xA9t\xC3\xA9.txt\"}}]}]",
	         text);
	for (api = 0; api < N_API; api++) {
		load_script(t, script);
		simple_call(t, api, true, "hi", &r);
		c = content_of(&r);
		assert_string_equal(
		    json_string_value(json_object_get(json_array_get(c, 0), "text")), text);
		assert_string_equal(r.text.data, text);
		assert_false(r.bad_utf8);
		assert_true(r.deltas >= 10);
		assert_string_equal(json_string_value(json_object_get(
		                        json_object_get(json_array_get(c, 1), "input"), "path")),
		                    "\xC3\xA9t\xC3\xA9.txt");
		result_free(&r);
	}
}

/* Tool input that is not a JSON object is the model's broken call, not the
 * provider's failure: the answer stands, the call has an empty input and is
 * reported as a bad call (not cut). Anthropic's non-streamed shape carries
 * the input as an object, so a string there is a broken response. */
static void test_bad_tool_input(void **state)
{
	struct tctx *t = *state;
	struct result r;
	int api, stream, k;

	for (api = 0; api < N_API; api++) {
		for (stream = 0; stream < 2; stream++) {
			load_script(t, "[{\"tool_calls\": [{\"name\": \"read\", \"raw_input\": "
			               "\"{\\\"path\\\": \\\"a.txt\\\"\"}]},"
			               " {\"tool_calls\": [{\"name\": \"read\", \"raw_input\": "
			               "\"[1, 2]\"}]}]");
			for (k = 0; k < 2; k++) {
				const json_t *b;

				simple_call(t, api, stream, "hi", &r);
				if (api == ANT && !stream) {
					assert_int_equal(r.rc, SB_ERR_PROTO);
					assert_int_equal(r.err.kind, MODEL_ERR_BAD_RESPONSE);
					assert_non_null(
					    strstr(r.err.message, "without an input object"));
					result_free(&r);
					continue;
				}
				assert_int_equal(r.rc, SB_OK);
				b = json_array_get(content_of(&r), 0);
				assert_string_equal(json_string_value(json_object_get(b, "type")),
				                    "tool_use");
				assert_int_equal(json_object_size(json_object_get(b, "input")), 0);
				assert_int_equal(r.n_bad, 1);
				assert_false(r.bad_cut[0]);
				assert_string_equal(r.bad_ids[0],
				                    json_string_value(json_object_get(b, "id")));
				assert_int_equal(r.bad_bytes[0], k == 0 ? 16 : 6);
				assert_int_equal(r.n_ready, 0); /* never announced as complete */
				result_free(&r);
			}
		}
	}
}

/* A tool call cut off by the output-token limit (finish_reason "length",
 * stop_reason "max_tokens") while its input is incomplete: the answer
 * stands with the call marked cut, and the complete call before it is kept
 * whole. Never a failure of the call. */
static void test_cut_tool_call(void **state)
{
	struct tctx *t = *state;
	struct result r;
	int api, stream;
	const json_t *c;

	for (api = 0; api < N_API; api++) {
		for (stream = 0; stream < 2; stream++) {
			if (api == ANT && !stream)
				continue; /* the whole-body shape cannot carry half an input */
			load_script(t, "[{\"text\": \"Writing it.\", \"stop\": \"max_tokens\", "
			               "\"tool_calls\": [{\"name\": \"ls\", \"input\": {}},"
			               " {\"name\": \"write\", \"raw_input\": "
			               "\"{\\\"path\\\": \\\"big.txt\\\", \\\"content\\\": "
			               "\\\"aaaaaaaaaaaaaaaa\"}]}]");
			simple_call(t, api, stream, "write a big file", &r);
			assert_int_equal(r.rc, SB_OK);
			assert_int_equal(r.stop, MODEL_STOP_MAX_TOKENS);
			c = content_of(&r);
			assert_int_equal(json_array_size(c), 3);
			assert_string_equal(
			    json_string_value(json_object_get(json_array_get(c, 2), "name")),
			    "write");
			assert_int_equal(
			    json_object_size(json_object_get(json_array_get(c, 2), "input")), 0);
			assert_int_equal(r.n_bad, 1);
			assert_true(r.bad_cut[0]);
			assert_int_equal(r.bad_bytes[0], 48);
			assert_string_equal(r.bad_ids[0], json_string_value(json_object_get(
			                                      json_array_get(c, 2), "id")));
			/* Streamed: ls was announced complete, the cut write never. */
			assert_int_equal(r.n_ready, stream ? 1 : 0);
			result_free(&r);
		}
	}
}

/* A server that sends no tool-call ids: each call gets a random one of
 * ours, different from one answer to the next. */
static void test_missing_ids(void **state)
{
	struct tctx *t = *state;
	struct result r;
	char first[2][64];
	int stream, k;

	for (stream = 0; stream < 2; stream++) {
		load_script(t,
		            "[{\"omit_ids\": true, \"tool_calls\": [{\"name\": \"ls\", "
		            "\"input\": {}}, {\"name\": \"read\", \"input\": {\"path\": \"a\"}}]},"
		            " {\"omit_ids\": true, \"tool_calls\": [{\"name\": \"ls\", "
		            "\"input\": {}}]}]");
		for (k = 0; k < 2; k++) {
			const json_t *c;
			const char *id;

			simple_call(t, OAI, stream, "hi", &r);
			c = content_of(&r);
			id = json_string_value(json_object_get(json_array_get(c, 0), "id"));
			assert_non_null(id);
			assert_int_equal(strncmp(id, "call_sb_", 8), 0);
			assert_int_equal(strlen(id), 8 + 16);
			if (k == 0) {
				snprintf(first[0], sizeof first[0], "%s", id);
				snprintf(
				    first[1], sizeof first[1], "%s",
				    json_string_value(json_object_get(json_array_get(c, 1), "id")));
				assert_string_not_equal(first[0], first[1]);
			} else {
				assert_string_not_equal(id, first[0]);
				assert_string_not_equal(id, first[1]);
			}
			result_free(&r);
		}
	}
}

/* Tool calls are announced complete while the answer streams (for the
 * streaming tool executor): Anthropic at the block's end, OpenAI once the
 * arguments parse as an object, even when the pieces of several calls
 * interleave; with the id and input of the final message, before the
 * answer ends. */
static void test_tool_ready_while_streaming(void **state)
{
	struct tctx *t = *state;
	struct result r;
	int api;

	for (api = 0; api < N_API; api++) {
		const json_t *c;

		load_script(t, "[{\"tool_calls\": [{\"name\": \"read\", \"input\": {\"path\": "
		               "\"a.txt\"}}, {\"name\": \"ls\", \"input\": {\"dir\": \"sub\"}}]}]");
		simple_call(t, api, true, "hi", &r);
		c = content_of(&r);
		assert_int_equal(r.n_ready, 2);
		assert_string_equal(r.ready_ids[0],
		                    json_string_value(json_object_get(json_array_get(c, 0), "id")));
		assert_string_equal(r.ready_ids[1],
		                    json_string_value(json_object_get(json_array_get(c, 1), "id")));
		assert_true(json_equal(json_array_get(r.ready_inputs, 0),
		                       json_object_get(json_array_get(c, 0), "input")));
		assert_true(json_equal(json_array_get(r.ready_inputs, 1),
		                       json_object_get(json_array_get(c, 1), "input")));
		result_free(&r);
		/* Not streamed: nothing is announced. */
		simple_call(t, api, false, "hi", &r);
		assert_int_equal(r.n_ready, 0);
		result_free(&r);
	}
}

/* ---- the context window a server reports ------------------------------ */

struct window_result {
	int calls;
	int64_t window;
	char source[160];
};

static void on_window(void *ud, int64_t window, const char *source)
{
	struct window_result *w = ud;

	w->calls++;
	w->window = window;
	snprintf(w->source, sizeof w->source, "%s", source);
}

/* Asks the openai-chat provider for model's window with the fake's metadata
 * set to server (JSON text). */
static void probe(struct tctx *t, const char *server, const char *model, struct window_result *w)
{
	struct provider_probe *pr = NULL;

	json_decref(ctl(t, "POST", "/__reset", NULL));
	json_decref(ctl(t, "POST", "/__server", server));
	memset(w, 0, sizeof *w);
	assert_int_equal(t->ops[OAI]->window(t->prov[OAI], model, on_window, w, &pr), SB_OK);
	assert_non_null(pr);
	assert_int_equal(w->calls, 0); /* never from inside */
	run_until(t, &w->calls, 1);
	assert_int_equal(w->calls, 1);
}

/* vLLM's max_model_len, OpenRouter's context_length (and top_provider's),
 * llama.cpp's meta.n_ctx (over n_ctx_train), then /props, and the training
 * size as the last resort; Ollama's /api/show (num_ctx over the model's
 * context_length); a one-model server whose id differs; nothing said. */
static void test_window_from_server(void **state)
{
	struct tctx *t = *state;
	struct window_result w;
	json_t *reqs;

	probe(t,
	      "{\"models\": {\"object\": \"list\", \"data\": [{\"id\": \"other\", "
	      "\"max_model_len\": 4096}, {\"id\": \"qwen\", \"object\": \"model\", "
	      "\"owned_by\": \"vllm\", \"max_model_len\": 16384}]}}",
	      "qwen", &w);
	assert_int_equal(w.window, 16384);
	assert_string_equal(w.source, "GET /models max_model_len");
	reqs = ctl(t, "GET", "/__meta_requests", NULL);
	assert_string_equal(json_string_value(json_object_get(json_array_get(reqs, 0), "path")),
	                    "/v1/models");
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(json_array_get(reqs, 0), "headers"),
	                                      "authorization")),
	    "Bearer sk-test-secret-key-123");
	json_decref(reqs);

	probe(t,
	      "{\"models\": {\"data\": [{\"id\": \"meta-llama/llama-3.1-8b-instruct\", "
	      "\"context_length\": 131072, \"top_provider\": {\"context_length\": 65536}}]}}",
	      "meta-llama/llama-3.1-8b-instruct", &w);
	assert_int_equal(w.window, 131072);
	probe(t,
	      "{\"models\": {\"data\": [{\"id\": \"x\", \"top_provider\": {\"context_length\": "
	      "65536}}, {\"id\": \"y\"}]}}",
	      "x", &w);
	assert_int_equal(w.window, 65536);
	assert_string_equal(w.source, "GET /models top_provider.context_length");

	/* llama.cpp: a one-model server names it by its file. */
	probe(t,
	      "{\"models\": {\"data\": [{\"id\": \"qwen2.5-7b-instruct-q4_k_m.gguf\", "
	      "\"owned_by\": \"llamacpp\", \"meta\": {\"n_ctx\": 8192, \"n_ctx_train\": "
	      "32768}}]}}",
	      "local", &w);
	assert_int_equal(w.window, 8192);
	assert_string_equal(w.source, "GET /models meta.n_ctx");
	probe(t,
	      "{\"models\": {\"data\": [{\"id\": \"m.gguf\", \"owned_by\": \"llamacpp\", "
	      "\"meta\": {\"n_ctx_train\": 32768}}]}, \"props\": "
	      "{\"default_generation_settings\": {\"n_ctx\": 4096}}}",
	      "m", &w);
	assert_int_equal(w.window, 4096);
	assert_string_equal(w.source, "GET /props n_ctx");
	probe(t,
	      "{\"models\": {\"data\": [{\"id\": \"m.gguf\", \"owned_by\": \"llamacpp\", "
	      "\"meta\": {\"n_ctx_train\": 32768}}]}}",
	      "m", &w);
	assert_int_equal(w.window, 32768);
	assert_string_equal(w.source, "GET /models meta.n_ctx_train");

	/* Ollama: its /v1/models says nothing; /api/show does. */
	probe(t,
	      "{\"models\": {\"data\": [{\"id\": \"qwen2.5:7b\", \"owned_by\": \"library\"}]}, "
	      "\"show\": {\"parameters\": \"stop \\\"<|im_end|>\\\"\\nnum_ctx 12288\", "
	      "\"model_info\": {\"general.architecture\": \"qwen2\", \"qwen2.context_length\": "
	      "32768}}}",
	      "qwen2.5:7b", &w);
	assert_int_equal(w.window, 12288);
	assert_string_equal(w.source, "POST /api/show num_ctx");
	reqs = ctl(t, "GET", "/__meta_requests", NULL);
	assert_string_equal(json_string_value(json_object_get(json_array_get(reqs, 1), "path")),
	                    "/api/show");
	assert_string_equal(json_string_value(json_object_get(json_array_get(reqs, 1), "body")),
	                    "{\"model\":\"qwen2.5:7b\"}");
	json_decref(reqs);
	probe(t,
	      "{\"models\": {\"data\": [{\"id\": \"llama3.1\", \"owned_by\": \"library\"}]}, "
	      "\"show\": {\"model_info\": {\"general.architecture\": \"llama\", "
	      "\"llama.context_length\": 131072}}}",
	      "llama3.1", &w);
	assert_int_equal(w.window, 131072);
	assert_string_equal(w.source, "POST /api/show llama.context_length");

	/* Nothing said (the official API), and a server that fails. */
	probe(t,
	      "{\"models\": {\"data\": [{\"id\": \"gpt-4o\", \"owned_by\": \"system\"}, "
	      "{\"id\": \"gpt-4o-mini\", \"owned_by\": \"system\"}]}}",
	      "gpt-4o", &w);
	assert_int_equal(w.window, 0);
	probe(t, "{\"status\": {\"models\": 500}, \"models\": {\"error\": \"boom\"}}", "gpt-4o",
	      &w);
	assert_int_equal(w.window, 0);
}

/* A server that answers a streaming request with one JSON body. */
static void test_stream_ignored(void **state)
{
	struct tctx *t = *state;
	struct result r;
	int api;

	for (api = 0; api < N_API; api++) {
		load_script(t, "[{\"text\": \"all at once\", \"no_stream\": true}]");
		simple_call(t, api, true, "hi", &r);
		assert_int_equal(r.rc, SB_OK);
		assert_string_equal(
		    json_string_value(json_object_get(json_array_get(content_of(&r), 0), "text")),
		    "all at once");
		assert_int_equal(r.deltas, 1);
		assert_string_equal(r.text.data, "all at once");
		assert_int_equal(r.usage.output_tokens, 9);
		result_free(&r);
	}
}

/* Steps with "match" are taken by the user's words, others in order. */
static void test_script_match(void **state)
{
	struct tctx *t = *state;
	struct result r;

	load_script(t, "[{\"match\": \"weather\", \"text\": \"sunny\"}, {\"text\": \"first\"}, "
	               "{\"text\": \"second\"}]");
	simple_call(t, ANT, false, "hello", &r);
	assert_string_equal(
	    json_string_value(json_object_get(json_array_get(content_of(&r), 0), "text")), "first");
	result_free(&r);
	simple_call(t, OAI, true, "the weather today?", &r);
	assert_string_equal(r.text.data, "sunny");
	result_free(&r);
	simple_call(t, OAI, false, "the weather again?", &r);
	assert_string_equal(
	    json_string_value(json_object_get(json_array_get(content_of(&r), 0), "text")),
	    "second");
	result_free(&r);
	/* The script is used up: the fake says so, as a bad request. */
	simple_call(t, ANT, false, "more", &r);
	assert_int_equal(r.err.kind, MODEL_ERR_BAD_REQUEST);
	assert_non_null(strstr(r.err.message, "no script step left"));
	result_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_registry),
	    cmocka_unit_test_setup_teardown(test_script_file, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_text_answer, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tool_answer, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tool_only_and_max_tokens, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_openai_request_shape, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_anthropic_request_shape, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_invalid_request, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_faults, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cancel_in_delta, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cancel_from_timer, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_utf8_byte_split, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_tool_input, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cut_tool_call, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_missing_ids, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tool_ready_while_streaming, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_window_from_server, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stream_ignored, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_script_match, setup, teardown),
	};

	return cmocka_run_group_tests(tests, fake_start, fake_stop);
}
