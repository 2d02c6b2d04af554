/*
 * test_executor.c - the tool executor with instrumented fake tools (the
 * concurrency matrix, result order, refusals, abort) and the input schema
 * validator's messages.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "agents/executor.h"
#include "agents/tool.h"
#include "gateway/core/err.h"

#define WATCHDOG_MS 20000

static uv_loop_t loop;

/* ---- instrumented fake tools ------------------------------------------ */

/* What the fakes saw. Tests are single-threaded: the loop thread only. */
static struct {
	char log[128][40]; /* "start:a", "end:a", "cancel:a" */
	int n_log;
	int inflight, max_inflight, unsafe_running, violations;
	int starts, cancels;
} seen;

static void seen_reset(void)
{
	memset(&seen, 0, sizeof seen);
}

static void seen_log(const char *what, const char *tag)
{
	if (seen.n_log < 128)
		snprintf(seen.log[seen.n_log++], sizeof seen.log[0], "%s:%s", what, tag);
}

/* Index of an entry in the log, -1 if absent. */
static int seen_at(const char *entry)
{
	int i;

	for (i = 0; i < seen.n_log; i++)
		if (strcmp(seen.log[i], entry) == 0)
			return i;
	return -1;
}

struct fake_run {
	struct tool_run run; /* first */
	uv_timer_t t;
	tool_done_cb done;
	void *ud;
	bool safe;
	bool finished;
	int rc;
	char tag[16];
	char *out;
};

static void fake_closed(uv_handle_t *h)
{
	struct fake_run *fr = h->data;

	free(fr->out);
	free(fr);
}

static void fake_leave(struct fake_run *fr)
{
	seen.inflight--;
	if (!fr->safe)
		seen.unsafe_running--;
}

static void fake_fire(uv_timer_t *t)
{
	struct fake_run *fr = t->data;
	char *out;

	fr->finished = true;
	seen_log("end", fr->tag);
	fake_leave(fr);
	if (fr->out) {
		out = fr->out;
		fr->out = NULL;
	} else {
		out = malloc(32);
		snprintf(out, 32, "ok:%s", fr->tag);
	}
	if (fr->rc) {
		free(out);
		out = NULL;
	}
	fr->done(fr->ud, fr->rc, out, false);
	uv_close((uv_handle_t *)&fr->t, fake_closed);
}

static void fake_cancel(struct tool_run *run)
{
	struct fake_run *fr = (struct fake_run *)run;

	if (fr->finished)
		return;
	fr->finished = true;
	uv_timer_stop(&fr->t);
	seen_log("cancel", fr->tag);
	seen.cancels++;
	fake_leave(fr);
	fr->done(fr->ud, SB_ERR_ABORTED, NULL, true);
	uv_close((uv_handle_t *)&fr->t, fake_closed);
}

static int fake_start(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                      struct tool_run **run, bool safe, int rc)
{
	struct fake_run *fr = calloc(1, sizeof *fr);
	const char *out = json_string_value(json_object_get(input, "out"));
	const char *tag = json_string_value(json_object_get(input, "tag"));

	if (!fr)
		return SB_ERR_NOMEM;
	if (safe && seen.unsafe_running)
		seen.violations++;
	if (!safe && seen.inflight)
		seen.violations++;
	seen.starts++;
	seen.inflight++;
	if (seen.inflight > seen.max_inflight)
		seen.max_inflight = seen.inflight;
	if (!safe)
		seen.unsafe_running++;
	snprintf(fr->tag, sizeof fr->tag, "%s", tag ? tag : "?");
	seen_log("start", fr->tag);
	fr->out = out ? strdup(out) : NULL;
	fr->run.cancel = fake_cancel;
	fr->done = done;
	fr->ud = ud;
	fr->safe = safe;
	fr->rc = rc;
	uv_timer_init(ctx->loop, &fr->t);
	fr->t.data = fr;
	uv_timer_start(&fr->t, fake_fire,
	               (uint64_t)json_integer_value(json_object_get(input, "ms")), 0);
	*run = &fr->run;
	return SB_OK;
}

static bool fake_yes(const json_t *in)
{
	return true;
}

static bool fake_no(const json_t *in)
{
	return false;
}

static bool fake_unless_exclusive(const json_t *in)
{
	return !json_is_true(json_object_get(in, "exclusive"));
}

static int safe_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                     struct tool_run **run)
{
	return fake_start(ctx, input, done, ud, run, true, SB_OK);
}

static int unsafe_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                       struct tool_run **run)
{
	return fake_start(ctx, input, done, ud, run, false, SB_OK);
}

static int maybe_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                      struct tool_run **run)
{
	return fake_start(ctx, input, done, ud, run, fake_unless_exclusive(input), SB_OK);
}

static int errdone_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done,
                        void *ud, struct tool_run **run)
{
	return fake_start(ctx, input, done, ud, run, true, SB_ERR_IO);
}

static int fail_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                     struct tool_run **run)
{
	seen.starts++;
	return SB_ERR_IO;
}

#define FAKE_SCHEMA                                                                                \
	"{\"type\":\"object\",\"properties\":{\"ms\":{\"type\":\"integer\",\"minimum\":0},"        \
	"\"tag\":{\"type\":\"string\"},\"out\":{\"type\":\"string\"},"                             \
	"\"exclusive\":{\"type\":\"boolean\"}},\"required\":[\"ms\"],"                             \
	"\"additionalProperties\":false}"

static const struct tool_def fake_safe = {
    .name = "safe",
    .description = "a concurrency-safe fake",
    .input_schema = FAKE_SCHEMA,
    .read_only = fake_yes,
    .concurrency_safe = fake_yes,
    .call = safe_call,
};

static const struct tool_def fake_unsafe = {
    .name = "unsafe",
    .description = "a fake that must run alone",
    .input_schema = FAKE_SCHEMA,
    .read_only = fake_no,
    .concurrency_safe = fake_no,
    .call = unsafe_call,
};

static const struct tool_def fake_maybe = {
    .name = "maybe",
    .description = "safe unless its input says exclusive",
    .input_schema = FAKE_SCHEMA,
    .read_only = fake_yes,
    .concurrency_safe = fake_unless_exclusive,
    .call = maybe_call,
};

static const struct tool_def fake_fail = {
    .name = "fail",
    .description = "call() fails",
    .input_schema = FAKE_SCHEMA,
    .read_only = fake_yes,
    .concurrency_safe = fake_yes,
    .call = fail_call,
};

static const struct tool_def fake_errdone = {
    .name = "errdone",
    .description = "done() reports a failure without text",
    .input_schema = FAKE_SCHEMA,
    .read_only = fake_yes,
    .concurrency_safe = fake_yes,
    .call = errdone_call,
};

static const struct tool_def fake_small = {
    .name = "small",
    .description = "a 100-character result budget",
    .input_schema = FAKE_SCHEMA,
    .read_only = fake_yes,
    .concurrency_safe = fake_yes,
    .max_result_chars = 100,
    .call = safe_call,
};

static const struct tool_def *const fakes[] = {&fake_safe, &fake_unsafe,  &fake_maybe,
                                               &fake_fail, &fake_errdone, &fake_small};

/* ---- running the executor ---------------------------------------------- */

struct exec_result {
	int calls;
	int rc;
	json_t *results;
	int starts, ends;
	double min_seconds;
	struct executor *ex;
	const char *abort_why;
	int calls_after_abort;
};

static void on_done(void *ud, int rc, json_t *results)
{
	struct exec_result *r = ud;

	r->calls++;
	r->rc = rc;
	json_decref(r->results);
	r->results = results;
}

static void on_start(void *ud, const char *id, const char *name, const json_t *input)
{
	struct exec_result *r = ud;

	r->starts++;
}

static void on_end(void *ud, const char *id, const char *name, bool is_error, const char *content,
                   double seconds)
{
	struct exec_result *r = ud;

	r->ends++;
	if (r->ends == 1 || seconds < r->min_seconds)
		r->min_seconds = seconds;
}

static void abort_later(uv_timer_t *t)
{
	struct exec_result *r = t->data;

	executor_abort(r->ex, r->abort_why);
	r->calls_after_abort = r->calls; /* done must have run already */
	uv_close((uv_handle_t *)t, NULL);
}

static struct tool_ctx test_ctx(void)
{
	struct tool_ctx ctx;

	memset(&ctx, 0, sizeof ctx);
	ctx.loop = &loop;
	ctx.workspace = "/nonexistent";
	ctx.timeout_ms = 120000;
	return ctx;
}

/* Runs the tool_use blocks of msg (JSON text) to the end. abort_ms > 0 aborts
 * then. Returns the results message (decref it). */
static json_t *run_exec(const char *msg, size_t max_parallel, const char *const *allowed,
                        size_t n_allowed, int abort_ms, struct exec_result *r)
{
	struct tool_ctx ctx = test_ctx();
	struct executor_events ev = {.ud = r, .tool_start = on_start, .tool_end = on_end};
	struct executor_options opt = {
	    .ctx = &ctx,
	    .tools = fakes,
	    .n_tools = sizeof fakes / sizeof fakes[0],
	    .allowed = allowed,
	    .n_allowed = n_allowed,
	    .max_parallel = max_parallel,
	    .ev = &ev,
	};
	json_t *m = json_loads(msg, 0, NULL);
	const char *why = r->abort_why;
	uv_timer_t abort_timer;
	json_t *res;

	assert_non_null(m);
	memset(r, 0, sizeof *r);
	r->abort_why = why;
	seen_reset();
	assert_int_equal(executor_run(m, &opt, on_done, r, &r->ex), SB_OK);
	assert_int_equal(r->calls, 0); /* never from inside executor_run */
	if (abort_ms > 0) {
		uv_timer_init(&loop, &abort_timer);
		abort_timer.data = r;
		uv_timer_start(&abort_timer, abort_later, (uint64_t)abort_ms, 0);
	}
	uv_run(&loop, UV_RUN_DEFAULT);
	json_decref(m);
	assert_int_equal(r->calls, 1);
	res = r->results;
	r->results = NULL;
	assert_non_null(res);
	assert_string_equal(json_string_value(json_object_get(res, "role")), "user");
	return res;
}

static const json_t *result_at(const json_t *res, size_t i)
{
	const json_t *b = json_array_get(json_object_get(res, "content"), i);

	assert_non_null(b);
	assert_string_equal(json_string_value(json_object_get(b, "type")), "tool_result");
	return b;
}

static void expect_result(const json_t *res, size_t i, const char *id, bool is_error,
                          const char *content)
{
	const json_t *b = result_at(res, i);
	const char *c = json_string_value(json_object_get(b, "content"));

	assert_string_equal(json_string_value(json_object_get(b, "tool_use_id")), id);
	if (json_is_true(json_object_get(b, "is_error")) != is_error)
		fail_msg("result %zu (%s): is_error should be %d: %s", i, id, is_error, c);
	if (content && strcmp(c, content) != 0)
		fail_msg("result %zu (%s):\nwant [%s]\ngot  [%s]", i, id, content, c);
}

static size_t n_results(const json_t *res)
{
	return json_array_size(json_object_get(res, "content"));
}

/* An assistant message with tool_use blocks "id|name|input-json" ... */
static char *msg_of(const char *const *calls, size_t n)
{
	json_t *m = json_pack("{s:s,s:[{s:s,s:s}]}", "role", "assistant", "content", "type", "text",
	                      "text", "working");
	json_t *content = json_object_get(m, "content");
	char buf[4096], *id, *name, *input, *s;
	size_t i;

	for (i = 0; i < n; i++) {
		assert_true(strlen(calls[i]) < sizeof buf);
		snprintf(buf, sizeof buf, "%s", calls[i]);
		id = buf;
		name = strchr(id, '|');
		*name++ = '\0';
		input = strchr(name, '|');
		*input++ = '\0';
		json_array_append_new(content,
		                      json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", id,
		                                "name", name, "input", json_loads(input, 0, NULL)));
	}
	s = json_dumps(m, JSON_COMPACT);
	json_decref(m);
	return s;
}

/* ---- setup ---------------------------------------------------------------- */

static int setup(void **state)
{
	return uv_loop_init(&loop);
}

static void count_open(uv_handle_t *h, void *arg)
{
	if (!uv_is_closing(h)) {
		(*(int *)arg)++;
		uv_close(h, NULL);
	}
}

static int teardown(void **state)
{
	int open = 0;

	uv_walk(&loop, count_open, &open);
	uv_run(&loop, UV_RUN_DEFAULT);
	if (open)
		fprintf(stderr, "teardown: %d handles left open\n", open);
	return uv_loop_close(&loop) == 0 && open == 0 ? 0 : -1;
}

/* ---- the concurrency matrix ---------------------------------------------- */

static void test_safe_calls_run_together(void **state)
{
	static const char *const calls[] = {"t1|safe|{\"ms\":100,\"tag\":\"a\"}",
	                                    "t2|safe|{\"ms\":100,\"tag\":\"b\"}",
	                                    "t3|safe|{\"ms\":100,\"tag\":\"c\"}"};
	struct exec_result r = {0};
	char *msg = msg_of(calls, 3);
	json_t *res = run_exec(msg, 0, NULL, 0, 0, &r);

	assert_int_equal(seen.max_inflight, 3);
	assert_int_equal(seen.violations, 0);
	/* All three started before any ended. */
	assert_true(seen_at("start:c") < seen_at("end:a"));
	assert_true(seen_at("start:c") < seen_at("end:b"));
	assert_int_equal(n_results(res), 3);
	expect_result(res, 0, "t1", false, "ok:a");
	expect_result(res, 1, "t2", false, "ok:b");
	expect_result(res, 2, "t3", false, "ok:c");
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(r.starts, 3);
	assert_int_equal(r.ends, 3);
	assert_true(r.min_seconds >= 0.09);
	json_decref(res);
	free(msg);
}

static void test_unsafe_call_runs_alone(void **state)
{
	static const char *const calls[] = {"t1|safe|{\"ms\":30,\"tag\":\"a\"}",
	                                    "t2|unsafe|{\"ms\":30,\"tag\":\"b\"}",
	                                    "t3|safe|{\"ms\":30,\"tag\":\"c\"}"};
	static const char *const calls2[] = {
	    "t1|safe|{\"ms\":40,\"tag\":\"a\"}", "t2|safe|{\"ms\":20,\"tag\":\"b\"}",
	    "t3|unsafe|{\"ms\":10,\"tag\":\"c\"}", "t4|safe|{\"ms\":10,\"tag\":\"d\"}",
	    "t5|safe|{\"ms\":30,\"tag\":\"e\"}"};
	static const char *const order[] = {"start:a", "end:a",   "start:b",
	                                    "end:b",   "start:c", "end:c"};
	struct exec_result r = {0};
	char *msg = msg_of(calls, 3);
	json_t *res = run_exec(msg, 0, NULL, 0, 0, &r);
	int i;

	assert_int_equal(seen.violations, 0);
	assert_int_equal(seen.max_inflight, 1);
	assert_int_equal(seen.n_log, 6);
	for (i = 0; i < 6; i++)
		assert_string_equal(seen.log[i], order[i]);
	expect_result(res, 1, "t2", false, "ok:b");
	json_decref(res);
	free(msg);

	msg = msg_of(calls2, 5);
	res = run_exec(msg, 0, NULL, 0, 0, &r);
	assert_int_equal(seen.violations, 0);
	assert_int_equal(seen.max_inflight, 2);
	assert_true(seen_at("start:b") < seen_at("end:a")); /* a, b together */
	assert_true(seen_at("end:a") < seen_at("start:c")); /* c after both */
	assert_true(seen_at("end:c") < seen_at("start:d")); /* d, e after c */
	assert_true(seen_at("start:e") < seen_at("end:d")); /* d, e together */
	assert_int_equal(n_results(res), 5);
	expect_result(res, 4, "t5", false, "ok:e");
	json_decref(res);
	free(msg);
}

static void test_safety_depends_on_input(void **state)
{
	static const char *const calls[] = {"t1|maybe|{\"ms\":20,\"tag\":\"a\"}",
	                                    "t2|maybe|{\"ms\":20,\"tag\":\"b\",\"exclusive\":true}",
	                                    "t3|maybe|{\"ms\":20,\"tag\":\"c\"}",
	                                    "t4|maybe|{\"ms\":20,\"tag\":\"d\"}"};
	struct exec_result r = {0};
	char *msg = msg_of(calls, 4);
	json_t *res = run_exec(msg, 0, NULL, 0, 0, &r);

	assert_int_equal(seen.violations, 0);
	assert_int_equal(seen.max_inflight, 2); /* c and d */
	assert_true(seen_at("end:a") < seen_at("start:b"));
	assert_true(seen_at("end:b") < seen_at("start:c"));
	json_decref(res);
	free(msg);
}

static void test_max_parallel_and_order(void **state)
{
	const char *calls[15];
	char bufs[15][96], want[16];
	struct exec_result r = {0};
	char *msg;
	json_t *res;
	int i;

	/* Later calls finish first: results must still come in call order. */
	for (i = 0; i < 15; i++) {
		snprintf(bufs[i], sizeof bufs[i], "id%d|safe|{\"ms\":%d,\"tag\":\"%d\"}", i,
		         (15 - i) * 4, i);
		calls[i] = bufs[i];
	}
	msg = msg_of(calls, 15);
	res = run_exec(msg, 4, NULL, 0, 0, &r);
	assert_int_equal(seen.max_inflight, 4);
	assert_int_equal(seen.starts, 15);
	assert_int_equal(n_results(res), 15);
	for (i = 0; i < 15; i++) {
		char id[16];

		snprintf(id, sizeof id, "id%d", i);
		snprintf(want, sizeof want, "ok:%d", i);
		expect_result(res, (size_t)i, id, false, want);
	}
	json_decref(res);

	res = run_exec(msg, 0, NULL, 0, 0, &r); /* the default: 10 */
	assert_int_equal(seen.max_inflight, EXECUTOR_MAX_PARALLEL);
	assert_int_equal(n_results(res), 15);
	json_decref(res);
	free(msg);
}

/* ---- refusals and failures ----------------------------------------------- */

static void test_refusals_each_give_one_error(void **state)
{
	static const char *const calls[] = {
	    "t1|nope|{}",
	    "t2|unsafe|{\"ms\":1}",
	    "t3|safe|{\"ms\":\"x\"}",
	    "t4|fail|{\"ms\":1}",
	    "t5|safe|{\"ms\":1,\"tag\":\"ok\"}",
	    "t6|errdone|{\"ms\":1,\"tag\":\"e\"}",
	    "t7|safe|{\"tag\":\"x\"}",
	    "t8|safe|{\"ms\":1,\"pth\":\"x\"}",
	};
	static const char *const allowed[] = {"safe", "fail", "errdone", "nope"};
	struct exec_result r = {0};
	char *msg = msg_of(calls, 8);
	json_t *res = run_exec(msg, 0, allowed, 4, 0, &r);
	char want[128];
	const char *c;

	assert_int_equal(n_results(res), 8);
	expect_result(res, 0, "t1", true, "unknown tool nope");
	expect_result(res, 1, "t2", true, "tool unsafe is not allowed for this agent");
	expect_result(res, 2, "t3", true, "invalid input for safe: \"ms\": expected an integer");
	snprintf(want, sizeof want, "tool fail failed: %s", sb_strerror(SB_ERR_IO));
	expect_result(res, 3, "t4", true, want);
	expect_result(res, 4, "t5", false, "ok:ok");
	snprintf(want, sizeof want, "tool errdone failed: %s", sb_strerror(SB_ERR_IO));
	expect_result(res, 5, "t6", true, want);
	expect_result(res, 6, "t7", true, "invalid input for safe: missing required field \"ms\"");
	expect_result(res, 7, "t8", true, "invalid input for safe: unknown field \"pth\"");
	/* Only the valid calls reached a tool. */
	assert_int_equal(seen.starts, 3);
	assert_int_equal(r.starts, 8);
	assert_int_equal(r.ends, 8);
	c = json_string_value(json_object_get(result_at(res, 0), "content"));
	assert_non_null(c);
	json_decref(res);
	free(msg);
}

static void test_result_budget_and_utf8(void **state)
{
	char big[1200], call[1400];
	const char *calls[2];
	struct exec_result r = {0};
	char *msg;
	json_t *res;
	const char *c;

	memset(big, 'x', 1000);
	big[1000] = '\0';
	snprintf(call, sizeof call, "t1|small|{\"ms\":1,\"out\":\"%s\"}", big);
	calls[0] = call;
	calls[1] = "t2|small|{\"ms\":1,\"out\":\"caf\\u00e9 ok\"}";
	msg = msg_of(calls, 2);
	res = run_exec(msg, 0, NULL, 0, 0, &r);
	c = json_string_value(json_object_get(result_at(res, 0), "content"));
	assert_true(strlen(c) <= 100);
	assert_non_null(strstr(c, "characters cut"));
	assert_true(strncmp(c, "xxxxxxxx", 8) == 0);
	expect_result(res, 1, "t2", false, "caf\xc3\xa9 ok");
	json_decref(res);
	free(msg);
}

/* Text a tool read from a Latin-1 file, say: not UTF-8 (valid JSON cannot
 * carry it in "out", so the fake's text is swapped after it starts). */
static int bad_utf8_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done,
                         void *ud, struct tool_run **run)
{
	struct fake_run *fr;
	int rc = fake_start(ctx, input, done, ud, run, true, SB_OK);

	if (rc == SB_OK) {
		fr = (struct fake_run *)*run;
		free(fr->out);
		fr->out = strdup("caf\xe9 \xe2\x82 \x80 end");
	}
	return rc;
}

static void test_invalid_utf8_is_replaced(void **state)
{
	static const struct tool_def bad = {
	    .name = "bad",
	    .description = "returns bytes that are not UTF-8",
	    .input_schema = FAKE_SCHEMA,
	    .read_only = fake_yes,
	    .concurrency_safe = fake_yes,
	    .call = bad_utf8_call,
	};
	const struct tool_def *tools[] = {&bad};
	struct tool_ctx ctx = test_ctx();
	struct executor_options opt = {.ctx = &ctx, .tools = tools, .n_tools = 1};
	json_t *m =
	    json_loads("{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\","
	               "\"id\":\"b1\",\"name\":\"bad\",\"input\":{\"ms\":1,\"tag\":\"q\"}}]}",
	               0, NULL);
	struct exec_result r = {0};
	struct executor *ex;

	memset(&r, 0, sizeof r);
	seen_reset();
	assert_int_equal(executor_run(m, &opt, on_done, &r, &ex), SB_OK);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(r.calls, 1);
	expect_result(r.results, 0, "b1", false,
	              "caf\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd end");
	json_decref(r.results);
	json_decref(m);
}

/* ---- abort ---------------------------------------------------------------- */

static void test_abort_mid_batch(void **state)
{
	static const char *const calls[] = {
	    "t1|safe|{\"ms\":10000,\"tag\":\"a\"}", "t2|safe|{\"ms\":10000,\"tag\":\"b\"}",
	    "t3|unsafe|{\"ms\":1,\"tag\":\"c\"}", "t4|safe|{\"ms\":1,\"tag\":\"d\"}", "t5|nope|{}"};
	struct exec_result r = {0};
	char *msg = msg_of(calls, 5);
	struct tool_ctx ctx = test_ctx();
	struct executor_options opt = {.ctx = &ctx, .tools = fakes, .n_tools = 6};
	struct executor *ex;
	json_t *res, *m;
	uint64_t t0 = uv_hrtime();
	size_t i;

	memset(&r, 0, sizeof r);
	r.abort_why = "user stopped";
	res = run_exec(msg, 0, NULL, 0, 50, &r);
	assert_true((uv_hrtime() - t0) / 1000000 < 5000);
	assert_int_equal(r.calls_after_abort, 1); /* done ran inside executor_abort */
	assert_int_equal(r.rc, SB_ERR_ABORTED);
	assert_int_equal(seen.starts, 2);
	assert_int_equal(seen.cancels, 2);
	assert_int_equal(seen.inflight, 0);
	assert_int_equal(n_results(res), 5);
	for (i = 0; i < 5; i++) {
		char id[8];

		snprintf(id, sizeof id, "t%zu", i + 1);
		expect_result(res, i, id, true, "aborted: user stopped");
	}
	/* Events: the two started calls, not the skipped ones. */
	assert_int_equal(r.starts, 2);
	assert_int_equal(r.ends, 2);
	json_decref(res);

	/* Aborted before anything started: done at once, every call answered. */
	m = json_loads(msg, 0, NULL);
	memset(&r, 0, sizeof r);
	seen_reset();
	assert_int_equal(executor_run(m, &opt, on_done, &r, &ex), SB_OK);
	executor_abort(ex, NULL);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.rc, SB_ERR_ABORTED);
	assert_int_equal(n_results(r.results), 5);
	expect_result(r.results, 4, "t5", true, "aborted: cancelled");
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(seen.starts, 0);
	assert_int_equal(r.calls, 1);
	json_decref(r.results);
	json_decref(m);
	free(msg);
}

/* ---- odd inputs ----------------------------------------------------------- */

static void test_done_never_inside_run(void **state)
{
	static const char *const calls[] = {"x1|nope|{}", "x2|nada|{}"};
	struct exec_result r = {0};
	char *msg = msg_of(calls, 2);
	json_t *res = run_exec(msg, 0, NULL, 0, 0, &r); /* asserts calls == 0 after run */

	expect_result(res, 0, "x1", true, "unknown tool nope");
	expect_result(res, 1, "x2", true, "unknown tool nada");
	json_decref(res);
	free(msg);
}

static void test_bad_messages(void **state)
{
	struct tool_ctx ctx = test_ctx();
	struct executor_options opt = {.ctx = &ctx, .tools = fakes, .n_tools = 6};
	struct exec_result r = {0};
	struct executor *ex = NULL;
	json_t *m;

	memset(&r, 0, sizeof r);
	m = json_loads("{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}",
	               0, NULL);
	assert_int_equal(executor_run(m, &opt, on_done, &r, &ex), SB_ERR_INVAL);
	json_decref(m);
	m = json_loads("{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"name\":"
	               "\"safe\",\"input\":{}}]}",
	               0, NULL);
	assert_int_equal(executor_run(m, &opt, on_done, &r, &ex), SB_ERR_INVAL);
	json_decref(m);
	assert_int_equal(executor_run(NULL, &opt, on_done, &r, &ex), SB_ERR_INVAL);
	/* A missing input is an empty object: the schema says what lacks. */
	m = json_loads("{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\","
	               "\"name\":\"safe\"}]}",
	               0, NULL);
	assert_int_equal(executor_run(m, &opt, on_done, &r, &ex), SB_OK);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(r.calls, 1);
	expect_result(r.results, 0, "a", true,
	              "invalid input for safe: missing required field \"ms\"");
	json_decref(r.results);
	json_decref(m);
	assert_int_equal(r.calls, 1);
}

/* ---- the built-in tools through the executor -------------------------------- */

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	return remove(p);
}

static void test_builtin_tools(void **state)
{
	char tmpl[] = "/tmp/sb-exec-XXXXXX", *real;
	struct tool_ctx ctx = test_ctx();
	struct executor_options opt = {.ctx = &ctx};
	static const char *const allowed[] = {"read", "ls"};
	struct exec_result r = {0};
	struct executor *ex;
	json_t *m;

	assert_non_null(mkdtemp(tmpl));
	real = realpath(tmpl, NULL);
	ctx.workspace = real;
	opt.allowed = allowed;
	opt.n_allowed = 2;
	m = json_loads("{\"role\":\"assistant\",\"content\":["
	               "{\"type\":\"tool_use\",\"id\":\"r\",\"name\":\"read\","
	               "\"input\":{\"path\":\"missing.txt\"}},"
	               "{\"type\":\"tool_use\",\"id\":\"l\",\"name\":\"ls\",\"input\":{}},"
	               "{\"type\":\"tool_use\",\"id\":\"b\",\"name\":\"bash\","
	               "\"input\":{\"command\":\"true\"}},"
	               "{\"type\":\"tool_use\",\"id\":\"x\",\"name\":\"read\","
	               "\"input\":{\"path\":1}}]}",
	               0, NULL);
	memset(&r, 0, sizeof r);
	assert_int_equal(executor_run(m, &opt, on_done, &r, &ex), SB_OK);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(r.calls, 1);
	expect_result(r.results, 0, "r", true, "no such file or directory: missing.txt");
	expect_result(r.results, 1, "l", false, "(empty directory)");
	expect_result(r.results, 2, "b", true, "tool bash is not allowed for this agent");
	expect_result(r.results, 3, "x", true,
	              "invalid input for read: \"path\": expected a string");
	json_decref(r.results);
	json_decref(m);
	nftw(real, rm_entry, 4, FTW_DEPTH | FTW_PHYS);
	free(real);
}

/* ---- the schema validator ------------------------------------------------- */

static void expect_schema(const char *schema, const char *input, const char *want)
{
	json_t *s = json_loads(schema, 0, NULL), *i = json_loads(input, JSON_DECODE_ANY, NULL);
	char why[256] = "untouched";
	int rc;

	assert_non_null(s);
	assert_non_null(i);
	rc = tool_schema_validate(s, i, why, sizeof why);
	if (!want) {
		if (rc != SB_OK)
			fail_msg("%s should pass, got: %s", input, why);
	} else if (rc != SB_ERR_INVAL || strcmp(why, want) != 0) {
		fail_msg("%s:\nwant [%s]\ngot  (%d) [%s]", input, want, rc, why);
	}
	json_decref(s);
	json_decref(i);
}

static void test_schema_messages(void **state)
{
	static const char *S =
	    "{\"type\":\"object\",\"properties\":{"
	    "\"path\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":5},"
	    "\"offset\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":10},"
	    "\"ratio\":{\"type\":\"number\",\"minimum\":0.5},"
	    "\"flag\":{\"type\":\"boolean\"},"
	    "\"mode\":{\"type\":\"string\",\"enum\":[\"a\",\"b\"]},"
	    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":2},"
	    "\"opt\":{\"type\":[\"string\",\"null\"]},"
	    "\"sub\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},"
	    "\"required\":[\"n\"],\"additionalProperties\":false}},"
	    "\"required\":[\"path\"],\"additionalProperties\":false}";

	expect_schema(S, "{\"path\":\"a\"}", NULL);
	expect_schema(
	    S,
	    "{\"path\":\"\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\",\"offset\":10,\"ratio\":0.5,"
	    "\"flag\":false,\"mode\":\"b\",\"tags\":[\"x\",\"y\"],\"opt\":null,"
	    "\"sub\":{\"n\":3}}",
	    NULL);
	expect_schema(S, "{}", "missing required field \"path\"");
	expect_schema(S, "{\"pth\":\"a\"}", "unknown field \"pth\"");
	expect_schema(S, "{\"path\":3}", "\"path\": expected a string");
	expect_schema(S, "{\"path\":\"a\",\"offset\":\"3\"}", "\"offset\": expected an integer");
	expect_schema(S, "{\"path\":\"a\",\"offset\":1.5}", "\"offset\": expected an integer");
	expect_schema(S, "{\"path\":\"a\",\"offset\":0}", "\"offset\": must be at least 1");
	expect_schema(S, "{\"path\":\"a\",\"offset\":11}", "\"offset\": must be at most 10");
	expect_schema(S, "{\"path\":\"a\",\"ratio\":0.25}", "\"ratio\": must be at least 0.5");
	expect_schema(S, "{\"path\":\"a\",\"ratio\":\"x\"}", "\"ratio\": expected a number");
	expect_schema(S, "{\"path\":\"a\",\"flag\":1}", "\"flag\": expected a boolean");
	expect_schema(S, "{\"path\":\"\"}", "\"path\": must not be empty");
	expect_schema(S, "{\"path\":\"abcdef\"}", "\"path\": must be at most 5 characters long");
	expect_schema(S, "{\"path\":\"a\",\"mode\":\"c\"}",
	              "\"mode\": must be one of \"a\", \"b\"");
	expect_schema(S, "{\"path\":\"a\",\"tags\":\"x\"}", "\"tags\": expected an array");
	expect_schema(S, "{\"path\":\"a\",\"tags\":[\"x\",2]}", "\"tags[1]\": expected a string");
	expect_schema(S, "{\"path\":\"a\",\"tags\":[\"x\",\"y\",\"z\"]}",
	              "\"tags\": must have at most 2 items");
	expect_schema(S, "{\"path\":\"a\",\"opt\":1}", "\"opt\": expected a string or null");
	expect_schema(S, "{\"path\":\"a\",\"sub\":{}}", "missing required field \"sub.n\"");
	expect_schema(S, "{\"path\":\"a\",\"sub\":{\"n\":1,\"m\":2}}", "unknown field \"sub.m\"");
	expect_schema(S, "{\"path\":\"a\",\"sub\":{\"n\":true}}", "\"sub.n\": expected an integer");
	expect_schema(S, "[1]", "input: expected an object");
	expect_schema(S, "null", "input: expected an object");
	/* additionalProperties absent: others are allowed. */
	expect_schema("{\"type\":\"object\",\"properties\":{}}", "{\"any\":1}", NULL);
}

/* ---- the streaming executor ------------------------------------------- */

struct stream_step {
	uint64_t at_ms;    /* when the block arrives */
	const char *block; /* a tool_use block, or NULL: the answer ends (the message) */
	const char *msg;
};

struct stream_run {
	struct executor *ex;
	const struct stream_step *steps;
	size_t n, next;
	int add_rc[8];
	int end_rc;
	uv_timer_t t;
	json_t *msg;    /* borrowed by the executor until done */
	int log_at_end; /* seen.n_log when the answer ended */
};

static void stream_tick(uv_timer_t *t)
{
	struct stream_run *s = t->data;
	const struct stream_step *st = &s->steps[s->next++];

	if (st->block) {
		json_t *j = json_loads(st->block, 0, NULL);

		s->add_rc[s->next - 1] = executor_stream_add(s->ex, j);
		json_decref(j);
	} else {
		s->log_at_end = seen.n_log;
		s->msg = json_loads(st->msg, 0, NULL);
		s->end_rc = executor_stream_end(s->ex, s->msg);
	}
	if (s->next < s->n)
		uv_timer_start(&s->t, stream_tick, s->steps[s->next].at_ms - st->at_ms, 0);
	else
		uv_close((uv_handle_t *)&s->t, NULL);
}

/* Feeds the steps on a timer (the answer streaming) and runs to the end. */
static json_t *run_stream(const struct stream_step *steps, size_t n, struct exec_result *r,
                          struct stream_run *s)
{
	struct tool_ctx ctx = test_ctx();
	struct executor_events ev = {.ud = r, .tool_start = on_start, .tool_end = on_end};
	struct executor_options opt = {
	    .ctx = &ctx, .tools = fakes, .n_tools = sizeof fakes / sizeof fakes[0], .ev = &ev};
	json_t *res;

	memset(r, 0, sizeof *r);
	memset(s, 0, sizeof *s);
	seen_reset();
	s->steps = steps;
	s->n = n;
	assert_int_equal(executor_stream_new(&opt, on_done, r, &s->ex), SB_OK);
	r->ex = s->ex;
	uv_timer_init(&loop, &s->t);
	s->t.data = s;
	uv_timer_start(&s->t, stream_tick, steps[0].at_ms, 0);
	uv_run(&loop, UV_RUN_DEFAULT);
	json_decref(s->msg);
	assert_int_equal(r->calls, 1);
	res = r->results;
	r->results = NULL;
	return res;
}

#define STREAM_MSG                                                                                 \
	"{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"x\"},"                 \
	"{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"safe\",\"input\":{\"ms\":30,\"tag\":"     \
	"\"a\"}},{\"type\":\"tool_use\",\"id\":\"t2\",\"name\":\"maybe\",\"input\":{\"ms\":30,"    \
	"\"tag\":\"b\"}},{\"type\":\"tool_use\",\"id\":\"t3\",\"name\":\"unsafe\",\"input\":{"     \
	"\"ms\":10,\"tag\":\"c\"}},{\"type\":\"tool_use\",\"id\":\"t4\",\"name\":\"safe\","        \
	"\"input\":{\"ms\":10,\"tag\":\"d\"}}]}"
#define BLOCK(id, name, tag, ms)                                                                   \
	"{\"type\":\"tool_use\",\"id\":\"" id "\",\"name\":\"" name "\",\"input\":{\"ms\":" #ms    \
	",\"tag\":\"" tag "\"}}"

/* Read-only calls at the head of the answer start as they arrive, before
 * it ends; the unsafe call and everything after it wait for the whole
 * message, and the matrix and the order hold. */
static void test_stream_starts_read_only_early(void **state)
{
	static const struct stream_step steps[] = {
	    {0, BLOCK("t1", "safe", "a", 30), NULL},
	    {5, BLOCK("t2", "maybe", "b", 30), NULL},
	    {10, BLOCK("t3", "unsafe", "c", 10), NULL},
	    {15, BLOCK("t4", "safe", "d", 10), NULL},
	    {80, NULL, STREAM_MSG},
	};
	struct exec_result r;
	struct stream_run s;
	json_t *res;

	res = run_stream(steps, 5, &r, &s);
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(s.end_rc, SB_OK);
	for (int i = 0; i < 4; i++)
		assert_int_equal(s.add_rc[i], SB_OK);
	/* a and b ran (and ended) while the answer streamed; c and d not. */
	assert_true(seen_at("start:a") >= 0 && seen_at("start:a") < s.log_at_end);
	assert_true(seen_at("end:b") >= 0 && seen_at("end:b") < s.log_at_end);
	assert_true(seen_at("start:c") >= s.log_at_end);
	assert_true(seen_at("start:c") < seen_at("start:d"));
	assert_int_equal(seen.max_inflight, 2);
	assert_int_equal(seen.violations, 0);
	assert_int_equal(n_results(res), 4);
	expect_result(res, 0, "t1", false, "ok:a");
	expect_result(res, 1, "t2", false, "ok:b");
	expect_result(res, 2, "t3", false, "ok:c");
	expect_result(res, 3, "t4", false, "ok:d");
	json_decref(res);
}

/* An unsafe call first: nothing starts before the answer ends. A call the
 * answer has but the stream never announced is added at the end; refused
 * ids get their error result and never run. */
static void test_stream_unsafe_first_and_refused(void **state)
{
	static const char msg[] =
	    "{\"role\":\"assistant\",\"content\":[" BLOCK("u1", "unsafe", "u", 10) "," BLOCK(
	        "s1", "safe", "s", 10) "," BLOCK("s2", "safe", "z", 10) "]}";
	static const struct stream_step steps[] = {
	    {0, BLOCK("u1", "unsafe", "u", 10), NULL},
	    {5, BLOCK("s1", "safe", "s", 10), NULL},
	    {40, NULL, msg},
	};
	struct tool_ctx ctx = test_ctx();
	struct exec_result r;
	struct stream_run s;
	json_t *res, *refused = json_pack("{ss}", "s2", "not run: cut off");
	struct executor_events ev = {.ud = &r, .tool_start = on_start, .tool_end = on_end};
	struct executor_options opt = {.ctx = &ctx,
	                               .tools = fakes,
	                               .n_tools = sizeof fakes / sizeof fakes[0],
	                               .ev = &ev,
	                               .refused = refused};

	memset(&r, 0, sizeof r);
	memset(&s, 0, sizeof s);
	seen_reset();
	s.steps = steps;
	s.n = 3;
	assert_int_equal(executor_stream_new(&opt, on_done, &r, &s.ex), SB_OK);
	uv_timer_init(&loop, &s.t);
	s.t.data = &s;
	uv_timer_start(&s.t, stream_tick, 0, 0);
	uv_run(&loop, UV_RUN_DEFAULT);
	json_decref(s.msg);
	res = r.results;
	assert_int_equal(r.calls, 1);
	assert_int_equal(s.log_at_end, 0); /* nothing had started */
	assert_true(seen_at("start:u") < seen_at("start:s"));
	assert_int_equal(seen_at("start:z"), -1);
	assert_int_equal(n_results(res), 3);
	expect_result(res, 0, "u1", false, "ok:u");
	expect_result(res, 1, "s1", false, "ok:s");
	expect_result(res, 2, "s2", true, "not run: cut off");
	json_decref(res);
	json_decref(refused);
}

static void no_done(void *ud, int rc, json_t *results)
{
	(*(int *)ud)++;
	json_decref(results);
}

/* A message that does not start with the added calls is refused (the
 * caller cancels); cancel kills what runs and never answers; adding after
 * the end, or a duplicate id, is refused. */
static void test_stream_mismatch_and_cancel(void **state)
{
	struct tool_ctx ctx = test_ctx();
	struct executor_options opt = {
	    .ctx = &ctx, .tools = fakes, .n_tools = sizeof fakes / sizeof fakes[0]};
	struct executor *ex;
	int calls = 0;
	json_t *b1 = json_loads(BLOCK("t1", "safe", "a", 5000), 0, NULL);
	json_t *other = json_loads(
	    "{\"role\":\"assistant\",\"content\":[" BLOCK("t9", "safe", "q", 1) "]}", 0, NULL);

	seen_reset();
	assert_int_equal(executor_stream_new(&opt, no_done, &calls, &ex), SB_OK);
	assert_int_equal(executor_stream_add(ex, b1), SB_OK);
	assert_int_equal(executor_stream_add(ex, b1), SB_ERR_INVAL); /* same id */
	assert_int_equal(seen.starts, 1);
	assert_int_equal(executor_stream_end(ex, other), SB_ERR_INVAL);
	executor_cancel(ex);
	assert_int_equal(seen.cancels, 1);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(calls, 0);
	json_decref(b1);
	json_decref(other);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_safe_calls_run_together),
	    T(test_unsafe_call_runs_alone),
	    T(test_safety_depends_on_input),
	    T(test_max_parallel_and_order),
	    T(test_refusals_each_give_one_error),
	    T(test_result_budget_and_utf8),
	    T(test_invalid_utf8_is_replaced),
	    T(test_abort_mid_batch),
	    T(test_done_never_inside_run),
	    T(test_bad_messages),
	    T(test_builtin_tools),
	    T(test_schema_messages),
	    T(test_stream_starts_read_only_early),
	    T(test_stream_unsafe_first_and_refused),
	    T(test_stream_mismatch_and_cancel),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
