/*
 * test_models.c - model routing (agents/models.c) over scripted providers
 * configured from YAML text: success, retries with backoff and
 * Retry-After, fallback, cooldown and its skipping, immediate fallback on
 * auth errors, immediate end on prompt_too_long, and cancel in every state.
 * Backoff and cooldown are shrunk by the options so that the tests run fast.
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
#include <uv.h>

#include "agents/message.h"
#include "agents/models.h"
#include "gateway/config/config.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"

struct fixture {
	char home[64];
	uv_loop_t loop;
	struct host host;
	struct config *cfg;
	struct models *m;
	struct models_options opt;
};

/* What a call reported, and what the observer saw. */
struct outcome {
	struct fixture *fx;
	int calls;
	int rc;
	char model[64];
	char text[256];
	struct model_error err;
	struct buf deltas;
	char events[1024]; /* "retry:a/m1:rate_limit cooldown:a/m1:overloaded ..." */
	int64_t delays[16];
	int n_events;
	struct models_call *call;
	bool cancel_on_retry;     /* cancel from inside the observer */
	uint64_t cancel_after_ms; /* cancel from a timer once a retry waits; 0 = no */
	uv_timer_t cancel_timer;
	uint64_t started, finished; /* uv_now */
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
	snprintf(fx->home, sizeof fx->home, "/tmp/sb-models-XXXXXX");
	assert_non_null(mkdtemp(fx->home));
	assert_int_equal(uv_loop_init(&fx->loop), 0);
	fx->host.loop = &fx->loop;
	fx->opt.backoff_base_ms = 5;
	fx->opt.backoff_max_ms = 200;
	fx->opt.cooldown_ms[0] = 10000;
	fx->opt.cooldown_ms[1] = 20000;
	fx->opt.cooldown_ms[2] = 40000;
	log_configure(LOG_ERROR, LOG_FORMAT_LOGFMT, NULL);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	models_free(fx->m);
	config_unref(fx->cfg);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&fx->loop), 0);
	nftw(fx->home, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(fx);
	return 0;
}

static void write_script(struct fixture *fx, const char *name, const char *text)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", fx->home, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Providers a (a.jsonl, max_retries ra) and b (b.jsonl, max_retries rb). */
static void load(struct fixture *fx, const char *a_script, const char *b_script, int ra, int rb)
{
	char yaml[1024];
	struct cfg_errors errs;
	int rc;

	write_script(fx, "a.jsonl", a_script);
	write_script(fx, "b.jsonl", b_script);
	snprintf(yaml, sizeof yaml,
	         "providers:\n"
	         "  - id: a\n"
	         "    api: scripted\n"
	         "    script: a.jsonl\n"
	         "    max_retries: %d\n"
	         "  - id: b\n"
	         "    api: scripted\n"
	         "    script: b.jsonl\n"
	         "    max_retries: %d\n"
	         "agents:\n"
	         "  - id: main\n"
	         "    model: a/m1\n"
	         "    fallbacks: [b/m2]\n",
	         ra, rb);
	cfg_errors_init(&errs);
	rc = config_load_text(yaml, "t.yaml", fx->home, &fx->cfg, &errs);
	if (rc != SB_OK) {
		cfg_errors_print(&errs, stderr);
		fail_msg("config: %s", sb_strerror(rc));
	}
	cfg_errors_free(&errs);
	assert_int_equal(models_new(&fx->m, fx->cfg->providers, fx->cfg->n_providers, &fx->host, &fx->opt), SB_OK);
}

static void on_event(void *ud, enum models_event what, const char *model,
                     const struct model_error *err, int64_t delay_ms)
{
	static const char *const names[] = {"retry", "fallback", "cooldown"};
	struct outcome *o = ud;
	size_t n = strlen(o->events);

	snprintf(o->events + n, sizeof o->events - n, "%s%s:%s:%s", n ? " " : "", names[what],
	         model, err ? model_error_kind_name(err->kind) : "-");
	if (o->n_events < 16)
		o->delays[o->n_events] = delay_ms;
	o->n_events++;
	if (what == MODELS_RETRY && o->cancel_on_retry)
		models_cancel(o->call);
}

static void on_delta(void *ud, const char *text, size_t len)
{
	struct outcome *o = ud;

	buf_append(&o->deltas, text, len);
}

static void on_done(void *ud, int rc, const struct model_response *resp,
                    const struct model_error *err)
{
	struct outcome *o = ud;

	o->calls++;
	o->rc = rc;
	o->finished = uv_now(&o->fx->loop);
	if (rc == SB_OK) {
		char *t = msg_text(resp->message);

		assert_null(err);
		snprintf(o->model, sizeof o->model, "%s", resp->model);
		snprintf(o->text, sizeof o->text, "%s", t);
		free(t);
	} else {
		assert_null(resp);
		assert_non_null(err);
		o->err = *err;
	}
}

static void cancel_timer_cb(uv_timer_t *t)
{
	struct outcome *o = t->data;

	models_cancel(o->call);
	/* Done ran before models_cancel returned. */
	assert_int_equal(o->calls, 1);
}

static void outcome_init(struct outcome *o, struct fixture *fx)
{
	memset(o, 0, sizeof *o);
	o->fx = fx;
	buf_init(&o->deltas, 4096);
}

/* Calls over chain and runs the loop until the call is over. */
static void run(struct fixture *fx, const char *const *chain, size_t n, struct outcome *o)
{
	struct model_request req = {.system = "sys", .max_tokens = 64, .stream = true};
	struct model_stream_events ev = {.ud = o, .text_delta = on_delta};
	struct models_observer obs = {.ud = o, .event = on_event};
	json_t *messages = json_array();

	json_array_append_new(messages, msg_user_text_new("hello"));
	req.messages = messages;
	uv_update_time(&fx->loop);
	o->started = uv_now(&fx->loop);
	assert_int_equal(models_call(fx->m, chain, n, &req, &ev, &obs, on_done, o, &o->call),
	                 SB_OK);
	assert_non_null(o->call);
	assert_int_equal(o->calls, 0); /* never inside the call */
	if (o->cancel_after_ms) {
		uv_timer_init(&fx->loop, &o->cancel_timer);
		o->cancel_timer.data = o;
		uv_timer_start(&o->cancel_timer, cancel_timer_cb, o->cancel_after_ms, 0);
	}
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	if (o->cancel_after_ms) {
		uv_close((uv_handle_t *)&o->cancel_timer, NULL);
		uv_run(&fx->loop, UV_RUN_DEFAULT);
	}
	assert_int_equal(o->calls, 1);
	json_decref(messages);
}

static const char *const ab[] = {"a/m1", "b/m2"};
static const char *const only_a[] = {"a/m1"};
static const char *const only_b[] = {"b/m2"};

static void expect_text(struct fixture *fx, const char *const *chain, size_t n, const char *model,
                        const char *text)
{
	struct outcome o;

	outcome_init(&o, fx);
	run(fx, chain, n, &o);
	if (o.rc != SB_OK)
		fail_msg("rc %s: %s", sb_strerror(o.rc), o.err.message);
	assert_string_equal(o.model, model);
	assert_string_equal(o.text, text);
	buf_free(&o.deltas);
}

static void test_success_first_try(void **state)
{
	struct fixture *fx = *state;
	struct outcome o;
	uint64_t until = 7;

	load(fx, "{\"text\": \"hello from a\"}\n", "{\"text\": \"from b\"}\n", 2, 2);
	outcome_init(&o, fx);
	run(fx, ab, 2, &o);
	assert_int_equal(o.rc, SB_OK);
	assert_string_equal(o.model, "a/m1");
	assert_string_equal(o.text, "hello from a");
	assert_string_equal(o.deltas.data, "hello from a");
	assert_string_equal(o.events, "");
	assert_int_equal(models_cooldown_until(fx->m, "a", &until), 0);
	assert_int_equal(until, 0);
	assert_int_equal(models_cooldown_until(fx->m, "nope", NULL), 0);
	buf_free(&o.deltas);
}

static void test_retry_then_success(void **state)
{
	struct fixture *fx = *state;
	struct outcome o;

	load(fx,
	     "{\"error\": \"rate_limit\"}\n{\"error\": \"overloaded\"}\n{\"text\": \"third "
	     "time\"}\n",
	     "{\"text\": \"from b\"}\n", 2, 2);
	outcome_init(&o, fx);
	run(fx, ab, 2, &o);
	assert_int_equal(o.rc, SB_OK);
	assert_string_equal(o.model, "a/m1");
	assert_string_equal(o.text, "third time");
	assert_string_equal(o.events, "retry:a/m1:rate_limit retry:a/m1:overloaded");
	/* base * 2^attempt, ±20%. */
	assert_in_range(o.delays[0], 4, 6);
	assert_in_range(o.delays[1], 8, 12);
	assert_true(o.finished - o.started >= 12);
	assert_int_equal(models_cooldown_until(fx->m, "a", NULL), 0);
	buf_free(&o.deltas);
}

static void test_backoff_capped(void **state)
{
	struct fixture *fx = *state;
	struct outcome o;

	fx->opt.backoff_base_ms = 20;
	fx->opt.backoff_max_ms = 30;
	load(fx,
	     "{\"error\": \"network\"}\n{\"error\": \"timeout\"}\n{\"error\": \"bad_response\"}\n"
	     "{\"text\": \"ok\"}\n",
	     "{\"text\": \"from b\"}\n", 3, 0);
	outcome_init(&o, fx);
	run(fx, only_a, 1, &o);
	assert_int_equal(o.rc, SB_OK);
	assert_string_equal(o.events,
	                    "retry:a/m1:network retry:a/m1:timeout retry:a/m1:bad_response");
	assert_in_range(o.delays[0], 16, 24);
	assert_in_range(o.delays[1], 24, 30);
	assert_in_range(o.delays[2], 24, 30);
	buf_free(&o.deltas);
}

static void test_exhausted_fallback_and_cooldown(void **state)
{
	struct fixture *fx = *state;
	struct outcome o;
	uint64_t until = 0;

	load(fx, "{\"error\": \"overloaded\"}\n", "{\"text\": \"from b\"}\n", 2, 2);
	outcome_init(&o, fx);
	run(fx, ab, 2, &o);
	assert_int_equal(o.rc, SB_OK);
	assert_string_equal(o.model, "b/m2");
	assert_string_equal(o.text, "from b");
	assert_string_equal(o.events, "retry:a/m1:overloaded retry:a/m1:overloaded "
	                              "cooldown:a/m1:overloaded fallback:a/m1:overloaded");
	assert_int_equal(o.delays[2], 10000);
	assert_int_equal(o.delays[3], 0);
	assert_int_equal(models_cooldown_until(fx->m, "a", &until), 1);
	assert_true(until >= uv_now(&fx->loop) + 9000);
	assert_int_equal(models_cooldown_until(fx->m, "b", NULL), 0);
	buf_free(&o.deltas);

	/* The next call skips the cooling provider without calling it. */
	outcome_init(&o, fx);
	run(fx, ab, 2, &o);
	assert_int_equal(o.rc, SB_OK);
	assert_string_equal(o.model, "b/m2");
	assert_string_equal(o.events, "fallback:a/m1:-");
	assert_in_range(o.delays[0], 9000, 10000);
	assert_true(o.finished - o.started < 100);
	buf_free(&o.deltas);

	/* Alone in its chain, it is tried anyway; failing again moves it up
	 * the cooldown ladder. */
	outcome_init(&o, fx);
	run(fx, only_a, 1, &o);
	assert_int_equal(o.rc, SB_ERR_AGAIN);
	assert_int_equal(o.err.kind, MODEL_ERR_OVERLOADED);
	assert_string_equal(o.events, "retry:a/m1:overloaded retry:a/m1:overloaded "
	                              "cooldown:a/m1:overloaded");
	assert_int_equal(o.delays[2], 20000);
	buf_free(&o.deltas);
	outcome_init(&o, fx);
	run(fx, only_a, 1, &o);
	assert_int_equal(o.delays[2], 40000);
	buf_free(&o.deltas);
	outcome_init(&o, fx);
	run(fx, only_a, 1, &o);
	assert_int_equal(o.delays[2], 40000); /* the ladder stops at its last step */
	buf_free(&o.deltas);
}

static void test_success_resets_cooldown(void **state)
{
	struct fixture *fx = *state;

	load(fx, "{\"error\": \"overloaded\"}\n{\"text\": \"a is back\"}\n",
	     "{\"text\": \"from b\"}\n", 0, 0);
	expect_text(fx, ab, 2, "b/m2", "from b");
	assert_int_equal(models_cooldown_until(fx->m, "a", NULL), 1);
	/* Only a in the chain: tried although cooling down; it answers. */
	expect_text(fx, only_a, 1, "a/m1", "a is back");
	assert_int_equal(models_cooldown_until(fx->m, "a", NULL), 0);
	expect_text(fx, ab, 2, "a/m1", "a is back");
}

/* Every entry cooling down: the one whose cooldown ends first is tried. */
static void test_all_cooling_earliest_first(void **state)
{
	struct fixture *fx = *state;
	struct outcome o;
	uint64_t ua, ub;

	load(fx, "{\"error\": \"overloaded\"}\n",
	     "{\"error\": \"overloaded\"}\n{\"text\": \"b is back\"}\n", 0, 0);
	/* b first, then a: b's cooldown ends first. */
	outcome_init(&o, fx);
	run(fx, only_b, 1, &o);
	assert_string_equal(o.events, "cooldown:b/m2:overloaded");
	buf_free(&o.deltas);
	uv_sleep(5);
	outcome_init(&o, fx);
	run(fx, only_a, 1, &o);
	assert_string_equal(o.events, "cooldown:a/m1:overloaded");
	buf_free(&o.deltas);
	assert_int_equal(models_cooldown_until(fx->m, "a", &ua), 1);
	assert_int_equal(models_cooldown_until(fx->m, "b", &ub), 1);
	assert_true(ub < ua);

	outcome_init(&o, fx);
	run(fx, ab, 2, &o);
	assert_int_equal(o.rc, SB_OK);
	assert_string_equal(o.model, "b/m2");
	assert_string_equal(o.text, "b is back");
	assert_string_equal(o.events, "fallback:a/m1:-");
	buf_free(&o.deltas);
}

static void test_auth_falls_back_at_once(void **state)
{
	struct fixture *fx = *state;
	struct outcome o;

	load(fx, "{\"error\": \"auth\"}\n{\"text\": \"second a step\"}\n",
	     "{\"text\": \"from b\"}\n", 2, 2);
	outcome_init(&o, fx);
	run(fx, ab, 2, &o);
	assert_int_equal(o.rc, SB_OK);
	assert_string_equal(o.model, "b/m2");
	assert_string_equal(o.events, "fallback:a/m1:auth");
	assert_int_equal(models_cooldown_until(fx->m, "a", NULL), 0);
	buf_free(&o.deltas);
	/* a was called once: its next step is still there. */
	expect_text(fx, ab, 2, "a/m1", "second a step");

	/* Alone: the auth error is the answer. */
	models_free(fx->m);
	config_unref(fx->cfg);
	fx->m = NULL;
	fx->cfg = NULL;
	load(fx, "{\"error\": \"auth\"}\n", "{\"text\": \"from b\"}\n", 2, 2);
	outcome_init(&o, fx);
	run(fx, only_a, 1, &o);
	assert_int_equal(o.rc, SB_ERR_PERM);
	assert_int_equal(o.err.kind, MODEL_ERR_AUTH);
	assert_int_equal(o.err.http_status, 401);
	assert_string_equal(o.events, "");
	buf_free(&o.deltas);
}

static void test_prompt_too_long_ends(void **state)
{
	struct fixture *fx = *state;
	struct outcome o;

	load(fx, "{\"error\": \"prompt_too_long\"}\n", "{\"text\": \"b1\"}\n{\"text\": \"b2\"}\n",
	     2, 2);
	outcome_init(&o, fx);
	run(fx, ab, 2, &o);
	assert_int_equal(o.rc, SB_ERR_TOOBIG);
	assert_int_equal(o.err.kind, MODEL_ERR_PROMPT_TOO_LONG);
	assert_string_equal(o.events, "");
	assert_int_equal(models_cooldown_until(fx->m, "a", NULL), 0);
	buf_free(&o.deltas);
	/* b was never called. */
	expect_text(fx, only_b, 1, "b/m2", "b1");
}

static void test_retry_after(void **state)
{
	struct fixture *fx = *state;
	struct outcome o;
	uint64_t until;

	/* Within the cap: waited for exactly. */
	load(fx,
	     "{\"error\": \"rate_limit\", \"retry_after_ms\": 120}\n{\"text\": \"after\"}\n"
	     "{\"error\": \"rate_limit\", \"retry_after_ms\": 5000}\n",
	     "{\"text\": \"from b\"}\n", 2, 2);
	outcome_init(&o, fx);
	run(fx, ab, 2, &o);
	assert_string_equal(o.text, "after");
	assert_string_equal(o.events, "retry:a/m1:rate_limit");
	assert_int_equal(o.delays[0], 120);
	assert_true(o.finished - o.started >= 120);
	buf_free(&o.deltas);

	/* Beyond the cap (200 ms): no wait, the next model, and a cooldown
	 * no shorter than the Retry-After. */
	outcome_init(&o, fx);
	run(fx, ab, 2, &o);
	assert_int_equal(o.rc, SB_OK);
	assert_string_equal(o.model, "b/m2");
	assert_string_equal(o.events, "cooldown:a/m1:rate_limit fallback:a/m1:rate_limit");
	assert_int_equal(o.delays[0], 10000); /* the ladder's 10 s beat the 5 s */
	assert_true(o.finished - o.started < 150);
	assert_int_equal(models_cooldown_until(fx->m, "a", &until), 1);
	buf_free(&o.deltas);
}

static void test_retry_after_longer_than_cooldown(void **state)
{
	struct fixture *fx = *state;
	struct outcome o;

	fx->opt.cooldown_ms[0] = 1000;
	load(fx, "{\"error\": \"overloaded\", \"retry_after_ms\": 7000}\n",
	     "{\"text\": \"from b\"}\n", 2, 2);
	outcome_init(&o, fx);
	run(fx, ab, 2, &o);
	assert_string_equal(o.model, "b/m2");
	assert_string_equal(o.events, "cooldown:a/m1:overloaded fallback:a/m1:overloaded");
	assert_int_equal(o.delays[0], 7000);
	buf_free(&o.deltas);
}

static void test_cancel_during_backoff(void **state)
{
	struct fixture *fx = *state;
	struct outcome o;

	fx->opt.backoff_base_ms = 20000;
	fx->opt.backoff_max_ms = 60000;
	load(fx, "{\"error\": \"rate_limit\"}\n", "{\"text\": \"from b\"}\n", 2, 2);
	outcome_init(&o, fx);
	o.cancel_after_ms = 30;
	run(fx, ab, 2, &o);
	assert_int_equal(o.calls, 1);
	assert_int_equal(o.rc, SB_ERR_ABORTED);
	assert_int_equal(o.err.kind, MODEL_ERR_ABORTED);
	assert_string_equal(o.events, "retry:a/m1:rate_limit");
	assert_true(o.finished - o.started < 1000);
	assert_string_equal(o.text, "");
	buf_free(&o.deltas);

	/* From inside the observer. */
	outcome_init(&o, fx);
	o.cancel_on_retry = true;
	run(fx, ab, 2, &o);
	assert_int_equal(o.rc, SB_ERR_ABORTED);
	assert_string_equal(o.events, "retry:a/m1:rate_limit");
	buf_free(&o.deltas);
}

static void test_cancel_in_flight(void **state)
{
	struct fixture *fx = *state;
	struct outcome o;

	load(fx, "{\"text\": \"slow\", \"delay_ms\": 60000}\n", "{\"text\": \"from b\"}\n", 2, 2);
	outcome_init(&o, fx);
	o.cancel_after_ms = 30;
	run(fx, ab, 2, &o);
	assert_int_equal(o.rc, SB_ERR_ABORTED);
	assert_int_equal(o.err.kind, MODEL_ERR_ABORTED);
	assert_string_equal(o.events, "");
	assert_true(o.finished - o.started < 1000);
	buf_free(&o.deltas);
}

/* Cancel before the first attempt started. */
static void test_cancel_at_once(void **state)
{
	struct fixture *fx = *state;
	struct model_request req = {.max_tokens = 64};
	struct outcome o;
	json_t *messages = json_array();

	load(fx, "{\"text\": \"a\"}\n", "{\"text\": \"b\"}\n", 2, 2);
	json_array_append_new(messages, msg_user_text_new("hello"));
	req.messages = messages;
	outcome_init(&o, fx);
	assert_int_equal(models_call(fx->m, ab, 2, &req, NULL, NULL, on_done, &o, &o.call), SB_OK);
	models_cancel(o.call);
	assert_int_equal(o.calls, 1);
	assert_int_equal(o.rc, SB_ERR_ABORTED);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(o.calls, 1);
	json_decref(messages);
	buf_free(&o.deltas);
	/* a's step was not consumed. */
	expect_text(fx, ab, 2, "a/m1", "a");
}

static void test_unknown_entries(void **state)
{
	struct fixture *fx = *state;
	static const char *const chain[] = {"nope/x", "bad", "b/m2"};
	static const char *const dead[] = {"nope/x"};
	struct model_request req = {.max_tokens = 64};
	struct outcome o;

	load(fx, "{\"text\": \"a\"}\n", "{\"text\": \"b\"}\n", 2, 2);
	outcome_init(&o, fx);
	run(fx, chain, 3, &o);
	assert_int_equal(o.rc, SB_OK);
	assert_string_equal(o.model, "b/m2");
	assert_string_equal(o.events, "fallback:nope/x:bad_request fallback:bad:bad_request");
	buf_free(&o.deltas);
	outcome_init(&o, fx);
	run(fx, dead, 1, &o);
	assert_int_equal(o.rc, SB_ERR_NOTFOUND);
	assert_int_equal(o.err.kind, MODEL_ERR_BAD_REQUEST);
	assert_string_equal(o.err.message,
	                    "\"nope/x\" names no configured provider (expected provider/model)");
	buf_free(&o.deltas);

	req.messages = json_array();
	assert_int_equal(models_call(fx->m, ab, 0, &req, NULL, NULL, on_done, &o, NULL),
	                 SB_ERR_INVAL);
	assert_int_equal(models_call(fx->m, ab, 2, &req, NULL, NULL, NULL, &o, NULL), SB_ERR_INVAL);
	json_decref(req.messages);
}

/* The table of model families: the last path segment, any case, without
 * an Ollama tag; the longest prefix wins; unknown is 0. */
static void test_window_table(void **state)
{
	const char *fam = NULL;

	(void)state;
	assert_int_equal(models_window_table("claude-sonnet-4-5", &fam), 200000);
	assert_string_equal(fam, "claude");
	assert_int_equal(models_window_table("gpt-4o-mini", NULL), 128000);
	assert_int_equal(models_window_table("gpt-4", NULL), 8192);
	assert_int_equal(models_window_table("gpt-4.1-mini", NULL), 1047576);
	assert_int_equal(models_window_table("meta-llama/Llama-3.1-70B-Instruct", NULL), 131072);
	assert_int_equal(models_window_table("llama3:8b", NULL), 8192);
	assert_int_equal(models_window_table("llama3.1:8b-instruct-q4", &fam), 131072);
	assert_string_equal(fam, "llama3.1");
	assert_int_equal(models_window_table("qwen2.5-coder:7b", NULL), 32768);
	assert_int_equal(models_window_table("mistral-nemo", NULL), 131072);
	assert_int_equal(models_window_table("phi3:mini", NULL), 4096);
	assert_int_equal(models_window_table("my-own-model", &fam), 0);
	assert_null(fam);
	assert_int_equal(models_window_table(NULL, NULL), 0);
}

struct window_seen {
	int calls;
	int64_t window;
	char source[200];
};

static void window_cb(void *ud, int64_t window, const char *source)
{
	struct window_seen *w = ud;

	w->calls++;
	w->window = window;
	snprintf(w->source, sizeof w->source, "%s", source);
}

/* A provider that cannot say (scripted): the table, else the default;
 * never from inside the call; a cancelled wait never answers. */
static void test_window_fallbacks(void **state)
{
	struct fixture *fx = *state;
	struct window_seen a = {0}, b = {0}, c = {0};
	struct models_window_wait *w = NULL;

	load(fx, "{\"text\": \"x\"}\n", "{\"text\": \"y\"}\n", 0, 0);
	assert_int_equal(models_window(fx->m, "a/claude-haiku", window_cb, &a, NULL), SB_OK);
	assert_int_equal(models_window(fx->m, "b/some-local-thing", window_cb, &b, NULL), SB_OK);
	assert_int_equal(models_window(fx->m, "b/gpt-4o", window_cb, &c, &w), SB_OK);
	models_window_cancel(w);
	assert_int_equal(a.calls + b.calls, 0);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.window, 200000);
	assert_string_equal(a.source, "table (claude)");
	assert_int_equal(b.calls, 1);
	assert_int_equal(b.window, MODELS_WINDOW_DEFAULT);
	assert_string_equal(b.source, "default");
	assert_int_equal(c.calls, 0);
	assert_int_equal(models_window(fx->m, "nosuch/m", window_cb, &b, NULL), SB_OK);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(b.calls, 2);
	assert_int_equal(b.window, MODELS_WINDOW_DEFAULT);
}

static void test_split(void **state)
{
	char p[8];
	const char *model = NULL;

	(void)state;
	assert_int_equal(models_split("openai/gpt-4o", p, sizeof p, &model), SB_OK);
	assert_string_equal(p, "openai");
	assert_string_equal(model, "gpt-4o");
	assert_int_equal(models_split("or/meta-llama/llama-3", p, sizeof p, &model), SB_OK);
	assert_string_equal(p, "or");
	assert_string_equal(model, "meta-llama/llama-3");
	assert_int_equal(models_split("x/y", p, sizeof p, NULL), SB_OK);
	assert_int_equal(models_split("nomodel", p, sizeof p, &model), SB_ERR_INVAL);
	assert_int_equal(models_split("/m", p, sizeof p, &model), SB_ERR_INVAL);
	assert_int_equal(models_split("p/", p, sizeof p, &model), SB_ERR_INVAL);
	assert_int_equal(models_split("toolongid/m", p, sizeof p, &model), SB_ERR_INVAL);
	assert_int_equal(models_split(NULL, p, sizeof p, &model), SB_ERR_INVAL);
}

static void test_bad_provider_fails_creation(void **state)
{
	struct fixture *fx = *state;
	struct cfg_errors errs;
	struct models *m = (struct models *)1;
	char yaml[512];

	/* The script file does not exist. */
	snprintf(yaml, sizeof yaml,
	         "providers:\n  - id: a\n    api: scripted\n"
	         "    script: missing.jsonl\nagents:\n  - id: main\n");
	cfg_errors_init(&errs);
	assert_int_equal(config_load_text(yaml, "t.yaml", fx->home, &fx->cfg, &errs), SB_OK);
	cfg_errors_free(&errs);
	assert_int_equal(models_new(&m, fx->cfg->providers, fx->cfg->n_providers, &fx->host, NULL), SB_ERR_CONFIG);
	assert_null(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_success_first_try, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_retry_then_success, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_backoff_capped, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_exhausted_fallback_and_cooldown, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_success_resets_cooldown, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_all_cooling_earliest_first, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_auth_falls_back_at_once, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_prompt_too_long_ends, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_retry_after, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_retry_after_longer_than_cooldown, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cancel_during_backoff, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cancel_in_flight, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cancel_at_once, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unknown_entries, setup, teardown),
	    cmocka_unit_test(test_split),
	    cmocka_unit_test(test_window_table),
	    cmocka_unit_test_setup_teardown(test_window_fallbacks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_provider_fails_creation, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
