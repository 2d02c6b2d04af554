/*
 * test_turn.c - the run state machine (agents/turn.c) end to end in one
 * process: the scripted provider through models_new (configured from YAML
 * text, scripts in a temporary home), the real tools on a temporary
 * workspace, and optionally a transcript. Covers a plain end_turn, a tool
 * loop, max_turns, the iteration budget (units, parents, the grace call and
 * a grace answer that asks for tools), continuation after the output-token
 * limit (also across a retry, and with a non-streaming HTTP provider against
 * tests/fakes/fake_llm.js), steering (also into the final answer), abort in
 * every state (before the first step, during a model call, during tools) and
 * from inside the run's own events (state, tool start and end, text delta),
 * a provider error after tool calls, and the transcript's content. After every
 * run the history plus the run's messages keep the tool_use/tool_result
 * pairing.
 *
 * Callbacks only record what they see; the test bodies assert after the loop
 * returns (a cmocka assert longjmps, which must not cross libuv frames).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "agents/message.h"
#include "agents/models.h"
#include "agents/context/tokens.h"
#include "agents/tool.h"
#include "agents/transcript.h"
#include "agents/turn.h"
#include "gateway/config/config.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/httpc.h"
#include "gateway/core/log.h"
#include "tests/integration/harness.h"

#define WATCHDOG_MS 20000
#define SYSTEM_PROMPT "You are a test agent."
#define WRAP_UP                                                                                    \
	"Do not call tools. Reply now to the user: say what you did, where you got to, and what "  \
	"is "                                                                                      \
	"left to do."
#define GRACE_NOTE "[The iteration budget is spent. " WRAP_UP "]"

struct fixture {
	char home[64];
	char ws[PATH_MAX]; /* the workspace, real path */
	uv_loop_t loop;
	struct host host;
	struct config *cfg;
	struct models *m;
	struct httpc *http; /* only with the fake model server */
	struct harness_peer llm;
	bool llm_started;
};

/* One run: what its callbacks saw, and what to do along the way. */
struct run {
	struct fixture *fx;
	struct turn *t;
	/* the result, copied out of the done callback */
	int done;
	enum turn_end end;
	char *detail;
	char *text;
	json_t *messages;
	struct model_usage usage;
	int model_calls, tool_calls;
	/* events */
	struct buf deltas;
	char states[4096]; /* "from>to:reason\n" per transition */
	int n_states;
	int tool_starts, tool_ends, tool_errors;
	/* actions */
	enum turn_state abort_on_state; /* abort inside the state event entering it */
	bool abort_in_state;
	uint64_t abort_after_ms; /* abort from a timer; 0 = no */
	bool abort_after_tool_start;
	bool abort_in_tool_start;            /* abort inside the first tool_start event */
	bool abort_in_tool_end;              /* ... the first tool_end event */
	bool abort_in_delta;                 /* ... the first text delta */
	char abort_when_file[PATH_MAX + 64]; /* and not before this file exists */
	const char *steer_text;              /* steer from a timer after steer_after_ms */
	uint64_t steer_after_ms;
	int steer_rc;
	uv_timer_t timer;
	bool timer_used;
	int done_before_abort, done_after_abort; /* r->done around turn_abort */
	bool aborted;
	uint64_t started, finished; /* uv_now */
};

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static void on_closed(uv_handle_t *h)
{
	*(bool *)h->data = true;
}

/* Closes a handle that lives on the stack, and waits until libuv is done
 * with it. */
static void close_now(uv_loop_t *loop, uv_handle_t *h)
{
	bool closed = false;

	h->data = &closed;
	uv_close(h, on_closed);
	while (!closed)
		uv_run(loop, UV_RUN_NOWAIT);
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX + 64];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof *fx);
	char ws[PATH_MAX + 64];

	assert_non_null(fx);
	snprintf(fx->home, sizeof fx->home, "/tmp/sb-turn-XXXXXX");
	assert_non_null(mkdtemp(fx->home));
	snprintf(ws, sizeof ws, "%s/ws", fx->home);
	assert_int_equal(mkdir(ws, 0700), 0);
	assert_non_null(realpath(ws, fx->ws));
	write_file(fx->ws, "a.txt", "line one\nline two\n");
	snprintf(ws, sizeof ws, "%s/sub", fx->ws);
	assert_int_equal(mkdir(ws, 0700), 0);
	write_file(ws, "b.md", "# b\n");
	assert_int_equal(uv_loop_init(&fx->loop), 0);
	fx->host.ctx = fx;
	fx->host.loop = &fx->loop;
	log_configure(LOG_ERROR, LOG_FORMAT_LOGFMT, NULL);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	models_free(fx->m);
	config_unref(fx->cfg);
	httpc_close(fx->http);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&fx->loop), 0);
	if (fx->llm_started)
		harness_peer_stop(&fx->llm);
	nftw(fx->home, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(fx);
	return 0;
}

static struct httpc *fixture_http(void *ctx)
{
	return ((struct fixture *)ctx)->http;
}

/* Loads the configuration (providers: yaml; agent main on model) and
 * creates the models. */
static void load_config(struct fixture *fx, const char *providers_yaml, const char *model)
{
	static const struct models_options mopt = {
	    .backoff_base_ms = 5, .backoff_max_ms = 200, .cooldown_ms = {10000, 20000, 40000}};
	char yaml[2048];
	struct cfg_errors errs;
	int rc;

	snprintf(yaml, sizeof yaml,
	         "providers:\n%s"
	         "agents:\n"
	         "  - id: main\n"
	         "    model: %s\n",
	         providers_yaml, model);
	cfg_errors_init(&errs);
	rc = config_load_text(yaml, "t.yaml", fx->home, &fx->cfg, &errs);
	if (rc != SB_OK) {
		cfg_errors_print(&errs, stderr);
		fail_msg("config: %s", sb_strerror(rc));
	}
	cfg_errors_free(&errs);
	assert_int_equal(
	    models_new(&fx->m, fx->cfg->providers, fx->cfg->n_providers, &fx->host, &mopt), SB_OK);
}

/* A scripted provider "s" replaying script (JSONL). */
static void load_script(struct fixture *fx, const char *script, int max_retries)
{
	char yaml[512];

	write_file(fx->home, "s.jsonl", script);
	snprintf(yaml, sizeof yaml,
	         "  - id: s\n"
	         "    api: scripted\n"
	         "    script: s.jsonl\n"
	         "    max_retries: %d\n",
	         max_retries);
	load_config(fx, yaml, "s/m");
}

/* ---- the run's callbacks ---- */

static void do_abort(struct run *r, const char *why);

static void on_delta(void *ud, const char *text, size_t len)
{
	struct run *r = ud;

	buf_append(&r->deltas, text, len);
	if (r->abort_in_delta && !r->aborted)
		do_abort(r, "stopped from a text delta");
}

static void do_abort(struct run *r, const char *why)
{
	r->aborted = true;
	r->done_before_abort = r->done;
	turn_abort(r->t, why);
	r->done_after_abort = r->done;
}

static void on_timer(uv_timer_t *tm)
{
	struct run *r = tm->data;
	struct stat st;

	if (r->done)
		return;
	if (r->steer_text) {
		r->steer_rc = turn_steer(r->t, r->steer_text);
		return;
	}
	/* Wait for the file that says the tool really runs. */
	if (r->abort_when_file[0] && (stat(r->abort_when_file, &st) != 0 || st.st_size == 0)) {
		uv_timer_start(&r->timer, on_timer, 20, 0);
		return;
	}
	do_abort(r, "stopped by the test");
}

static void arm_timer(struct run *r, uint64_t ms)
{
	if (!r->timer_used) {
		uv_timer_init(&r->fx->loop, &r->timer);
		r->timer.data = r;
		r->timer_used = true;
	}
	uv_timer_start(&r->timer, on_timer, ms, 0);
}

static void on_tool_start(void *ud, const char *id, const char *name, const json_t *input)
{
	struct run *r = ud;

	(void)id;
	(void)name;
	(void)input;
	r->tool_starts++;
	if (r->abort_in_tool_start && r->tool_starts == 1)
		do_abort(r, "stopped from a tool event");
	else if (r->abort_after_tool_start && r->tool_starts == 1)
		arm_timer(r, r->abort_after_ms);
}

static void on_tool_end(void *ud, const char *id, const char *name, bool is_error,
                        const char *content, double seconds)
{
	struct run *r = ud;

	(void)id;
	(void)name;
	(void)content;
	(void)seconds;
	r->tool_ends++;
	r->tool_errors += is_error;
	if (r->abort_in_tool_end && !r->aborted)
		do_abort(r, "stopped from a tool event");
}

static void on_state(void *ud, enum turn_state from, enum turn_state to, const char *reason)
{
	struct run *r = ud;
	size_t n = strlen(r->states);

	snprintf(r->states + n, sizeof r->states - n, "%s>%s:%s\n", turn_state_name(from),
	         turn_state_name(to), reason);
	r->n_states++;
	if (r->abort_in_state && to == r->abort_on_state && !r->aborted)
		do_abort(r, "stopped from a state event");
}

static void on_done(void *ud, const struct turn_result *res)
{
	struct run *r = ud;

	r->done++;
	r->finished = uv_now(&r->fx->loop);
	r->end = res->end;
	r->detail = strdup(res->detail);
	r->text = strdup(res->text);
	r->messages = json_deep_copy(res->messages);
	r->usage = res->usage;
	r->model_calls = res->model_calls;
	r->tool_calls = res->tool_calls;
}

static const struct turn_events *run_events(struct run *r)
{
	static struct turn_events ev = {.text_delta = on_delta,
	                                .tool_start = on_tool_start,
	                                .tool_end = on_tool_end,
	                                .state = on_state};

	ev.ud = r;
	return &ev;
}

static void run_init(struct run *r, struct fixture *fx)
{
	memset(r, 0, sizeof *r);
	r->fx = fx;
	buf_init(&r->deltas, 1 << 20);
}

static void run_free(struct run *r)
{
	free(r->detail);
	free(r->text);
	json_decref(r->messages);
	buf_free(&r->deltas);
	if (r->timer_used)
		close_now(&r->fx->loop, (uv_handle_t *)&r->timer);
}

/* The options every test starts from: chain s/m, all tools, the
 * workspace, no budget, no transcript. */
static void opts_init(struct turn_options *o, struct run *r, const char *user_text)
{
	static const char *const chain[] = {"s/m"};
	struct fixture *fx = r->fx;

	memset(o, 0, sizeof *o);
	o->models = fx->m;
	o->chain = chain;
	o->n_chain = 1;
	o->system = SYSTEM_PROMPT;
	o->user_text = user_text;
	o->tool_ctx.loop = &fx->loop;
	o->tool_ctx.host = &fx->host;
	o->tool_ctx.agent_id = "main";
	o->tool_ctx.session_key = "agent:main:test";
	o->tool_ctx.workspace = fx->ws;
	o->tool_ctx.timeout_ms = 10000;
	o->max_turns = 10;
	o->ev = run_events(r);
}

static void on_tick(uv_timer_t *tm)
{
	(void)tm;
}

/* Runs the loop until the run is done (a repeating tick keeps UV_RUN_ONCE
 * from blocking past the watchdog). */
static void wait_done(struct run *r)
{
	uv_timer_t tick;
	uint64_t start;

	uv_timer_init(&r->fx->loop, &tick);
	uv_timer_start(&tick, on_tick, 50, 50);
	uv_update_time(&r->fx->loop);
	start = uv_now(&r->fx->loop);
	while (!r->done && uv_now(&r->fx->loop) - start < WATCHDOG_MS)
		uv_run(&r->fx->loop, UV_RUN_ONCE);
	close_now(&r->fx->loop, (uv_handle_t *)&tick);
	if (!r->done)
		fail_msg("the run did not end within %d ms; states:\n%s", WATCHDOG_MS, r->states);
}

static void start_run(struct run *r, const struct turn_options *o)
{
	uv_update_time(&r->fx->loop);
	r->started = uv_now(&r->fx->loop);
	assert_int_equal(turn_start(&r->t, o, on_done, r), SB_OK);
	assert_non_null(r->t);
	assert_int_equal(r->done, 0); /* never from inside turn_start */
	if (r->steer_text)
		arm_timer(r, r->steer_after_ms);
	else if (r->abort_after_ms && !r->abort_after_tool_start)
		arm_timer(r, r->abort_after_ms);
}

/* history (may be NULL) followed by the run's messages keeps the pairing. */
static void assert_pairing(const json_t *history, const json_t *messages)
{
	json_t *all = history ? json_deep_copy(history) : json_array();
	char why[256] = "";

	assert_non_null(all);
	assert_int_equal(json_array_extend(all, (json_t *)messages), 0);
	if (msg_check_pairing(all, why, sizeof why) != SB_OK)
		fail_msg("pairing: %s", why);
	json_decref(all);
}

static const json_t *msg_at(const struct run *r, size_t i)
{
	const json_t *m = json_array_get(r->messages, i);

	if (!m)
		fail_msg("no message %zu (the run added %zu)", i, json_array_size(r->messages));
	return m;
}

static const char *role_of(const json_t *m)
{
	return json_string_value(json_object_get(m, "role"));
}

static const json_t *block_at(const json_t *m, size_t i)
{
	return json_array_get(json_object_get(m, "content"), i);
}

static const char *str_of(const json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));

	return s ? s : "";
}

static void assert_text_msg(const json_t *m, const char *role, const char *text)
{
	char *t = msg_text(m);

	assert_string_equal(role_of(m), role);
	assert_string_equal(t, text);
	free(t);
}

/* The number of complete lines of r->states. */
static int state_lines(const struct run *r)
{
	int n = 0;

	for (const char *p = r->states; *p; p++)
		n += *p == '\n';
	return n;
}

/* ceil(chars / 4): the scripted provider's estimate. */
static int64_t tokens_of(size_t chars)
{
	return (int64_t)((chars + 3) / 4);
}

static size_t json_chars(const json_t *v)
{
	return json_dumpb(v, NULL, 0, JSON_COMPACT);
}

/* ---- a plain answer ---- */

static void test_end_turn(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;
	json_t *history, *sent, *tools;
	int64_t in_tokens;

	load_script(fx, "{\"text\": \"Hello there, friend.\"}\n", 0);
	run_init(&r, fx);
	opts_init(&o, &r, "hi");
	history = json_array();
	json_array_append_new(history, msg_user_text_new("earlier question"));
	json_array_append_new(history, json_pack("{ss s[{ssss}]}", "role", "assistant", "content",
	                                         "type", "text", "text", "earlier answer"));
	o.history = history;
	start_run(&r, &o);
	assert_int_equal(turn_state_of(r.t), TURN_STARTING);
	wait_done(&r);

	assert_int_equal(r.done, 1);
	assert_int_equal(r.end, TURN_END_TURN);
	assert_string_equal(r.detail, "");
	assert_string_equal(r.text, "Hello there, friend.");
	assert_string_equal(r.deltas.data, "Hello there, friend."); /* streamed word by word */
	assert_int_equal(r.model_calls, 1);
	assert_int_equal(r.tool_calls, 0);
	assert_string_equal(r.states, "starting>calling_model:new message\n"
	                              "calling_model>done:end_turn\n");
	/* Only this run's messages: the new user message and the answer. */
	assert_int_equal(json_array_size(r.messages), 2);
	assert_text_msg(msg_at(&r, 0), "user", "hi");
	assert_text_msg(msg_at(&r, 1), "assistant", "Hello there, friend.");
	/* Usage is the provider's: the request was the system prompt, the
	 * history with the new message, and the full tool list. */
	sent = json_deep_copy(history);
	json_array_append(sent, (json_t *)msg_at(&r, 0));
	tools = tool_list_json_new(NULL, 0);
	in_tokens = tokens_of(strlen(SYSTEM_PROMPT) + json_chars(sent) + json_chars(tools));
	assert_int_equal(r.usage.input_tokens, in_tokens);
	assert_int_equal(r.usage.output_tokens, tokens_of(strlen("Hello there, friend.")));
	assert_int_equal(r.usage.cache_read_tokens, 0);
	/* The caller's history was copied, not changed. */
	assert_int_equal(json_array_size(history), 2);
	assert_pairing(history, r.messages);
	json_decref(sent);
	json_decref(tools);
	json_decref(history);
	run_free(&r);
}

/* ---- tools ---- */

static void test_tool_loop(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;
	const json_t *m, *b;

	load_script(fx,
	            "{\"text\": \"Looking. \", \"tool_calls\": [{\"name\": \"ls\", \"input\": {}},"
	            " {\"name\": \"read\", \"input\": {\"path\": \"a.txt\"}}]}\n"
	            "{\"tool_calls\": [{\"name\": \"ls\", \"input\": {\"path\": \"sub\"}}]}\n"
	            "{\"text\": \"a.txt has two lines.\"}\n",
	            0);
	run_init(&r, fx);
	opts_init(&o, &r, "what is in a.txt?");
	start_run(&r, &o);
	wait_done(&r);

	assert_int_equal(r.end, TURN_END_TURN);
	assert_int_equal(r.model_calls, 3);
	assert_int_equal(r.tool_calls, 3);
	assert_int_equal(r.tool_starts, 3);
	assert_int_equal(r.tool_ends, 3);
	assert_int_equal(r.tool_errors, 0);
	/* The text before a tool round is not part of the answer. */
	assert_string_equal(r.text, "a.txt has two lines.");
	assert_string_equal(r.states, "starting>calling_model:new message\n"
	                              "calling_model>running_tools:tool_use\n"
	                              "running_tools>calling_model:tool results\n"
	                              "calling_model>running_tools:tool_use\n"
	                              "running_tools>calling_model:tool results\n"
	                              "calling_model>done:end_turn\n");
	assert_int_equal(json_array_size(r.messages), 6);
	m = msg_at(&r, 1);
	assert_string_equal(role_of(m), "assistant");
	assert_string_equal(str_of(block_at(m, 0), "text"), "Looking. ");
	assert_string_equal(str_of(block_at(m, 1), "type"), "tool_use");
	assert_string_equal(str_of(block_at(m, 1), "name"), "ls");
	assert_string_equal(str_of(block_at(m, 1), "id"), "call_1");
	assert_string_equal(str_of(block_at(m, 2), "name"), "read");
	assert_string_equal(str_of(block_at(m, 2), "id"), "call_2");
	/* The results, in order, with the tools' real output. */
	m = msg_at(&r, 2);
	assert_string_equal(role_of(m), "user");
	assert_int_equal(json_array_size(json_object_get(m, "content")), 2);
	b = block_at(m, 0);
	assert_string_equal(str_of(b, "type"), "tool_result");
	assert_string_equal(str_of(b, "tool_use_id"), "call_1");
	assert_false(json_is_true(json_object_get(b, "is_error")));
	assert_string_equal(str_of(b, "content"), "a.txt\nsub/\n");
	b = block_at(m, 1);
	assert_string_equal(str_of(b, "tool_use_id"), "call_2");
	assert_string_equal(str_of(b, "content"), "     1\tline one\n     2\tline two\n");
	b = block_at(msg_at(&r, 4), 0);
	assert_string_equal(str_of(b, "tool_use_id"), "call_3");
	assert_string_equal(str_of(b, "content"), "b.md\n");
	assert_text_msg(msg_at(&r, 5), "assistant", "a.txt has two lines.");
	assert_pairing(NULL, r.messages);
	run_free(&r);
}

/* At the step limit the model is called once more, without tools, and
 * asked where it got to: its answer is the reply (not a canned line). */
static void test_max_turns(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;
	const json_t *last, *m;

	load_script(fx,
	            "{\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]}\n"
	            "{\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]}\n"
	            "{\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]}\n"
	            "{\"text\": \"I listed the files three times; left: reading them. Saw: "
	            "{{user_text}}\"}\n",
	            0);
	run_init(&r, fx);
	opts_init(&o, &r, "loop forever");
	o.max_turns = 3;
	start_run(&r, &o);
	wait_done(&r);

	assert_int_equal(r.end, TURN_END_MAX_TURNS);
	assert_string_equal(r.detail, "the run reached max_turns");
	assert_int_equal(r.model_calls, 4);
	assert_int_equal(r.tool_calls, 3);
	assert_string_equal(r.text, "I listed the files three times; left: reading them. Saw: "
	                            "[The run reached its limit of 3 model calls. " WRAP_UP "]");
	/* user, 3 x (assistant tool_use, user tool_result + the note), answer */
	assert_int_equal(json_array_size(r.messages), 8);
	m = msg_at(&r, 6);
	assert_string_equal(str_of(block_at(m, 0), "type"), "tool_result");
	assert_string_equal(str_of(block_at(m, 1), "text"),
	                    "[The run reached its limit of 3 model calls. " WRAP_UP "]");
	assert_non_null(strstr(r.states, "running_tools>calling_model:last call after the step "
	                                 "limit\ncalling_model>done:max_turns\n"));
	assert_int_equal(state_lines(&r), 8);
	assert_pairing(NULL, r.messages);
	run_free(&r);

	/* A model that still asks for tools in that last call: they are not
	 * run, and every tool_use has its result. */
	models_free(fx->m);
	fx->m = NULL;
	config_unref(fx->cfg);
	fx->cfg = NULL;
	load_script(fx, "{\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]}\n", 0);
	run_init(&r, fx);
	opts_init(&o, &r, "loop forever");
	o.max_turns = 3;
	start_run(&r, &o);
	wait_done(&r);
	assert_int_equal(r.end, TURN_END_MAX_TURNS);
	assert_int_equal(r.model_calls, 4);
	assert_int_equal(r.tool_calls, 3);
	assert_string_equal(r.text, "");
	assert_int_equal(json_array_size(r.messages), 9);
	last = msg_at(&r, 8);
	assert_string_equal(role_of(last), "user");
	assert_string_equal(str_of(block_at(last, 0), "content"),
	                    "not run: the run reached max_turns");
	assert_pairing(NULL, r.messages);
	run_free(&r);
}

/* ---- the iteration budget ---- */

static void test_budget_units(void **state)
{
	struct turn_budget parent, child, b;

	(void)state;
	turn_budget_init(&parent, 3, NULL);
	turn_budget_init(&child, 2, &parent);
	assert_int_equal(child.limit, 2);
	assert_ptr_equal(child.parent, &parent);
	assert_false(child.grace_used);
	/* A unit from the child is a unit from every ancestor. */
	assert_true(turn_budget_consume(&child));
	assert_true(turn_budget_consume(&child));
	assert_int_equal(child.used, 2);
	assert_int_equal(parent.used, 2);
	/* The child is spent: nothing is taken anywhere. */
	assert_false(turn_budget_consume(&child));
	assert_int_equal(child.used, 2);
	assert_int_equal(parent.used, 2);
	/* The parent still has one of its own. */
	assert_true(turn_budget_consume(&parent));
	assert_int_equal(parent.used, 3);
	assert_false(turn_budget_consume(&parent));
	/* A refund gives back to every level... */
	turn_budget_refund(&child, 1);
	assert_int_equal(child.used, 1);
	assert_int_equal(parent.used, 2);
	/* ...but a spent parent stops the child even when it has units left. */
	assert_true(turn_budget_consume(&parent));
	assert_false(turn_budget_consume(&child));
	assert_int_equal(child.used, 1);
	assert_int_equal(parent.used, 3);
	/* A refund never goes below zero. */
	turn_budget_refund(&child, 100);
	assert_int_equal(child.used, 0);
	assert_int_equal(parent.used, 0);
	/* A refund of the parent leaves the child alone. */
	assert_true(turn_budget_consume(&child));
	turn_budget_refund(&parent, 1);
	assert_int_equal(child.used, 1);
	assert_int_equal(parent.used, 0);
	/* Limit 0: spent from the start. */
	turn_budget_init(&b, 0, NULL);
	assert_false(turn_budget_consume(&b));
	assert_int_equal(b.used, 0);
}

static void test_grace_call(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct turn_budget budget;
	struct run r;
	const json_t *m;

	/* The second step echoes the text of the last user message it got:
	 * the note proves that the grace call's request carried it. */
	load_script(fx,
	            "{\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]}\n"
	            "{\"text\": \"Wrapping up. Saw: {{user_text}}\"}\n",
	            0);
	turn_budget_init(&budget, 1, NULL);
	run_init(&r, fx);
	opts_init(&o, &r, "list the files");
	o.budget = &budget;
	start_run(&r, &o);
	wait_done(&r);

	assert_int_equal(r.end, TURN_END_BUDGET_EXHAUSTED);
	assert_string_equal(r.detail, "the iteration budget is spent");
	assert_int_equal(r.model_calls, 2);
	assert_int_equal(r.tool_calls, 1);
	assert_int_equal(budget.used, 1); /* the grace call takes no unit */
	assert_true(budget.grace_used);
	assert_string_equal(r.text, "Wrapping up. Saw: " GRACE_NOTE);
	assert_string_equal(r.states, "starting>calling_model:new message\n"
	                              "calling_model>running_tools:tool_use\n"
	                              "running_tools>calling_model:grace call after the budget "
	                              "was spent\n"
	                              "calling_model>done:budget_exhausted\n");
	/* The note rides on the tool results message (roles keep alternating). */
	assert_int_equal(json_array_size(r.messages), 4);
	m = msg_at(&r, 2);
	assert_string_equal(role_of(m), "user");
	assert_string_equal(str_of(block_at(m, 0), "type"), "tool_result");
	assert_string_equal(str_of(block_at(m, 1), "type"), "text");
	assert_string_equal(str_of(block_at(m, 1), "text"), GRACE_NOTE);
	assert_text_msg(msg_at(&r, 3), "assistant", "Wrapping up. Saw: " GRACE_NOTE);
	assert_pairing(NULL, r.messages);
	run_free(&r);
}

static void test_grace_answer_with_tools(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct turn_budget budget;
	struct run r;
	const json_t *m, *b;
	size_t i;

	load_script(fx,
	            "{\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]}\n"
	            "{\"text\": \"One more look.\", \"tool_calls\": [{\"name\": \"read\", "
	            "\"input\": {\"path\": \"a.txt\"}}, {\"name\": \"bash\", \"input\": "
	            "{\"command\": \"touch ran.txt\"}}]}\n",
	            0);
	turn_budget_init(&budget, 1, NULL);
	run_init(&r, fx);
	opts_init(&o, &r, "list the files");
	o.budget = &budget;
	start_run(&r, &o);
	wait_done(&r);

	assert_int_equal(r.end, TURN_END_BUDGET_EXHAUSTED);
	assert_int_equal(r.model_calls, 2);
	assert_int_equal(r.tool_calls, 1); /* only the first round ran */
	assert_int_equal(r.tool_starts, 1);
	assert_string_equal(r.text, "One more look.");
	assert_int_equal(json_array_size(r.messages), 5);
	assert_int_equal(msg_tool_use_count(msg_at(&r, 3)), 2);
	/* Every tool_use of the grace answer has an error result. */
	m = msg_at(&r, 4);
	assert_string_equal(role_of(m), "user");
	assert_int_equal(json_array_size(json_object_get(m, "content")), 2);
	for (i = 0; i < 2; i++) {
		b = block_at(m, i);
		assert_string_equal(str_of(b, "type"), "tool_result");
		assert_string_equal(str_of(b, "tool_use_id"),
		                    str_of(block_at(msg_at(&r, 3), i + 1), "id"));
		assert_true(json_is_true(json_object_get(b, "is_error")));
		assert_string_equal(str_of(b, "content"), "not run: the iteration budget is spent");
	}
	{
		char path[PATH_MAX + 64];

		snprintf(path, sizeof path, "%s/ran.txt", fx->ws);
		assert_int_equal(access(path, F_OK), -1); /* bash did not run */
	}
	assert_pairing(NULL, r.messages);
	run_free(&r);
}

/* A run that starts with its budget spent and its grace used ends at once;
 * a sub-run is bounded by its parent's budget. */
static void test_budget_spent_and_parent(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct turn_budget parent, child, spent;
	struct run r;

	load_script(fx,
	            "{\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]}\n"
	            "{\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]}\n"
	            "{\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]}\n"
	            "{\"text\": \"done\"}\n",
	            0);
	turn_budget_init(&spent, 1, NULL);
	assert_true(turn_budget_consume(&spent));
	spent.grace_used = true;
	run_init(&r, fx);
	opts_init(&o, &r, "anything");
	o.budget = &spent;
	start_run(&r, &o);
	wait_done(&r);
	assert_int_equal(r.end, TURN_END_BUDGET_EXHAUSTED);
	assert_int_equal(r.model_calls, 0);
	assert_string_equal(r.states, "starting>done:budget_exhausted\n");
	assert_int_equal(json_array_size(r.messages), 1);
	assert_pairing(NULL, r.messages);
	run_free(&r);

	/* The parent has 2 units, the child 10: the third call is the grace
	 * call, which the script answers with tools (step 3). */
	turn_budget_init(&parent, 2, NULL);
	turn_budget_init(&child, 10, &parent);
	run_init(&r, fx);
	opts_init(&o, &r, "a sub-task");
	o.budget = &child;
	start_run(&r, &o);
	wait_done(&r);
	assert_int_equal(r.end, TURN_END_BUDGET_EXHAUSTED);
	assert_int_equal(r.model_calls, 3);
	assert_int_equal(r.tool_calls, 2);
	assert_int_equal(parent.used, 2);
	assert_int_equal(child.used, 2);
	assert_true(child.grace_used);
	assert_non_null(strstr(r.states, "grace call after the budget was spent"));
	assert_pairing(NULL, r.messages);
	run_free(&r);
}

/* ---- continuation after the output-token limit ---- */

static void test_continuation(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;

	load_script(fx,
	            "{\"text\": \"The first part \", \"stop\": \"max_tokens\"}\n"
	            "{\"text\": \"and the second part.\"}\n",
	            0);
	run_init(&r, fx);
	opts_init(&o, &r, "write a long answer");
	start_run(&r, &o);
	wait_done(&r);

	assert_int_equal(r.end, TURN_END_TURN);
	assert_int_equal(r.model_calls, 2);
	assert_string_equal(r.text, "The first part and the second part.");
	assert_string_equal(r.deltas.data, r.text);
	assert_int_equal(json_array_size(r.messages), 4);
	assert_text_msg(msg_at(&r, 1), "assistant", "The first part ");
	assert_text_msg(msg_at(&r, 2), "user", "Continue exactly where you stopped.");
	assert_text_msg(msg_at(&r, 3), "assistant", "and the second part.");
	assert_string_equal(r.states, "starting>calling_model:new message\n"
	                              "calling_model>calling_model:continuation after the "
	                              "output-token limit\n"
	                              "calling_model>done:end_turn\n");
	assert_pairing(NULL, r.messages);
	run_free(&r);

	/* At most 3 continuations: a model that is always cut ends the run
	 * after 4 calls, with what it wrote. */
	models_free(fx->m);
	fx->m = NULL;
	config_unref(fx->cfg);
	fx->cfg = NULL;
	load_script(fx, "{\"text\": \"more \", \"stop\": \"max_tokens\"}\n", 0);
	run_init(&r, fx);
	opts_init(&o, &r, "never ends");
	start_run(&r, &o);
	wait_done(&r);
	assert_int_equal(r.end, TURN_END_TURN);
	assert_int_equal(r.model_calls, 4);
	assert_string_equal(r.text, "more more more more ");
	assert_int_equal(json_array_size(r.messages), 8);
	run_free(&r);
}

/* A retry of the continuation call drops only what that failed attempt
 * streamed, not the part before it. */
static void test_continuation_retry(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;

	load_script(fx,
	            "{\"text\": \"The first part \", \"stop\": \"max_tokens\"}\n"
	            "{\"error\": \"overloaded\"}\n"
	            "{\"text\": \"and the second part.\"}\n",
	            1);
	run_init(&r, fx);
	opts_init(&o, &r, "write a long answer");
	start_run(&r, &o);
	wait_done(&r);

	assert_int_equal(r.end, TURN_END_TURN);
	assert_int_equal(r.model_calls, 2);
	assert_string_equal(r.text, "The first part and the second part.");
	assert_non_null(strstr(r.states, "calling_model>calling_model:retry after provider error "
	                                 "(overloaded: scripted overloaded (step 1)), model s/m, "
	                                 "in "));
	assert_int_equal(json_array_size(r.messages), 4);
	run_free(&r);
}

/* A provider that does not stream (stream: false, so no text deltas): the
 * answer's text comes from the messages, both parts of a continuation. The
 * provider's max_tokens reaches the request. Over HTTP, against
 * tests/fakes/fake_llm.js. */
static void test_continuation_not_streamed(void **state)
{
	static const char *const chain[] = {"oa/gpt-test"};
	static const struct httpc_options ho = {.timeout_ms = 10000,
	                                        .connect_timeout_ms = 2000,
	                                        .max_connections = 4,
	                                        .max_response_bytes = 1 << 20};
	struct fixture *fx = *state;
	const char *args[] = {"--script", NULL, NULL};
	char script[PATH_MAX], yaml[512];
	struct turn_options o;
	struct run r;
	struct buf resp;
	json_t *reqs;
	size_t i;

	snprintf(script, sizeof script, "%s/fake.json", fx->home);
	write_file(fx->home, "fake.json",
	           "[{\"text\": \"The first part \", \"stop\": \"max_tokens\"},"
	           " {\"text\": \"and the second part.\"}]");
	args[1] = script;
	if (harness_peer_start(&fx->llm, "fake_llm.js", args) != 0)
		fail_msg("cannot start tests/fakes/fake_llm.js (node)");
	fx->llm_started = true;
	assert_int_equal(httpc_new(&fx->http, &fx->loop, &ho), SB_OK);
	fx->host.http_client = fixture_http;
	snprintf(yaml, sizeof yaml,
	         "  - id: oa\n"
	         "    api: openai-chat\n"
	         "    base_url: \"http://127.0.0.1:%d/v1\"\n"
	         "    api_key: test-key\n"
	         "    stream: false\n"
	         "    max_tokens: 1234\n"
	         "    max_retries: 0\n",
	         fx->llm.port);
	load_config(fx, yaml, "oa/gpt-test");
	run_init(&r, fx);
	opts_init(&o, &r, "write a long answer");
	o.chain = chain;
	start_run(&r, &o);
	wait_done(&r);

	if (r.end != TURN_END_TURN)
		fail_msg("end %s: %s", turn_end_name(r.end), r.detail);
	assert_int_equal(r.model_calls, 2);
	assert_int_equal(r.deltas.len, 0); /* nothing streamed */
	assert_string_equal(r.text, "The first part and the second part.");
	assert_int_equal(json_array_size(r.messages), 4);
	assert_text_msg(msg_at(&r, 3), "assistant", "and the second part.");
	run_free(&r);

	buf_init(&resp, 16 << 20);
	assert_int_equal(harness_http(fx->llm.port, "GET", "/__requests", NULL, NULL, &resp), 200);
	reqs = json_loads(resp.data, 0, NULL);
	assert_non_null(reqs);
	assert_int_equal(json_array_size(reqs), 2);
	for (i = 0; i < 2; i++) {
		json_t *body = json_object_get(json_array_get(reqs, i), "body");

		assert_int_equal(json_integer_value(json_object_get(body, "max_tokens")), 1234);
		assert_false(json_is_true(json_object_get(body, "stream")));
	}
	json_decref(reqs);
	buf_free(&resp);
}

/* ---- steering ---- */

static void test_steer(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;
	const json_t *m;

	load_script(fx,
	            "{\"delay_ms\": 300, \"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]}\n"
	            "{\"text\": \"Saw: {{user_text}}\"}\n",
	            0);
	run_init(&r, fx);
	opts_init(&o, &r, "list the files");
	r.steer_text = "also look in sub/";
	r.steer_after_ms = 50; /* during the slow first call */
	start_run(&r, &o);
	wait_done(&r);

	assert_int_equal(r.steer_rc, SB_OK);
	assert_int_equal(r.end, TURN_END_TURN);
	assert_int_equal(r.model_calls, 2);
	/* The next call's history had the steered text (after the results). */
	assert_string_equal(r.text, "Saw: also look in sub/");
	m = msg_at(&r, 2);
	assert_string_equal(str_of(block_at(m, 0), "type"), "tool_result");
	assert_string_equal(str_of(block_at(m, 1), "text"), "also look in sub/");
	assert_string_equal(r.states, "starting>calling_model:new message\n"
	                              "calling_model>running_tools:tool_use\n"
	                              "running_tools>calling_model:steered by a new message\n"
	                              "calling_model>done:end_turn\n");
	assert_pairing(NULL, r.messages);
	run_free(&r);
}

/* A message steered in while the model writes its final answer is not lost:
 * the model is called once more to see it. */
static void test_steer_into_final_answer(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;

	load_script(fx,
	            "{\"delay_ms\": 300, \"text\": \"First answer.\"}\n"
	            "{\"text\": \"Saw: {{user_text}}\"}\n",
	            0);
	run_init(&r, fx);
	opts_init(&o, &r, "question");
	r.steer_text = "and one more thing";
	r.steer_after_ms = 50;
	start_run(&r, &o);
	wait_done(&r);

	assert_int_equal(r.end, TURN_END_TURN);
	assert_int_equal(r.model_calls, 2);
	assert_int_equal(json_array_size(r.messages), 4);
	assert_text_msg(msg_at(&r, 1), "assistant", "First answer.");
	assert_text_msg(msg_at(&r, 2), "user", "and one more thing");
	assert_text_msg(msg_at(&r, 3), "assistant", "Saw: and one more thing");
	assert_string_equal(r.text, "First answer.\n\nSaw: and one more thing");
	assert_string_equal(r.deltas.data, r.text);
	assert_non_null(strstr(r.states, "calling_model>calling_model:steered by a new message\n"));
	assert_pairing(NULL, r.messages);
	run_free(&r);
}

/* ---- abort ---- */

static void assert_aborted(const struct run *r, const char *why)
{
	assert_int_equal(r->done, 1);
	assert_true(r->aborted);
	assert_int_equal(r->done_before_abort, 0);
	assert_int_equal(r->done_after_abort, 1); /* done ran before turn_abort returned */
	assert_int_equal(r->end, TURN_END_ABORTED);
	assert_string_equal(r->detail, why);
	assert_pairing(NULL, r->messages);
}

static void test_abort_before_first_step(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;

	load_script(fx, "{\"text\": \"never\"}\n", 0);
	run_init(&r, fx);
	opts_init(&o, &r, "hello");
	start_run(&r, &o);
	do_abort(&r, "changed my mind");
	assert_aborted(&r, "changed my mind");
	assert_int_equal(r.model_calls, 0);
	assert_string_equal(r.states, "starting>done:aborted\n");
	assert_int_equal(json_array_size(r.messages), 1);
	/* Nothing else runs later. */
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(r.done, 1);
	run_free(&r);
}

static void test_abort_during_model_call(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;

	load_script(fx, "{\"delay_ms\": 10000, \"text\": \"too late\"}\n", 0);
	run_init(&r, fx);
	opts_init(&o, &r, "hello");
	r.abort_after_ms = 50;
	start_run(&r, &o);
	wait_done(&r);

	assert_aborted(&r, "stopped by the test");
	assert_true(r.finished - r.started < 5000);
	assert_int_equal(r.model_calls, 0);
	assert_string_equal(r.text, "");
	assert_int_equal(json_array_size(r.messages), 1);
	assert_string_equal(r.states, "starting>calling_model:new message\n"
	                              "calling_model>done:aborted\n");
	run_free(&r);
}

static void test_abort_during_tools(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;
	const json_t *res;
	char path[PATH_MAX + 64];
	char *pidtext = NULL;
	long pid;
	int i;

	load_script(fx,
	            "{\"tool_calls\": [{\"name\": \"bash\", \"input\": {\"command\": "
	            "\"echo $$ > sleeper.pid; sleep 30\"}}, {\"name\": \"ls\", \"input\": {}}]}\n"
	            "{\"text\": \"never\"}\n",
	            0);
	run_init(&r, fx);
	opts_init(&o, &r, "run something slow");
	r.abort_after_tool_start = true;
	r.abort_after_ms = 100;
	snprintf(r.abort_when_file, sizeof r.abort_when_file, "%s/sleeper.pid", fx->ws);
	start_run(&r, &o);
	wait_done(&r);

	assert_aborted(&r, "stopped by the test");
	assert_true(r.finished - r.started < 5000);
	assert_int_equal(r.model_calls, 1);
	assert_int_equal(r.tool_calls, 2);
	assert_int_equal(json_array_size(r.messages), 3);
	res = msg_at(&r, 2);
	assert_int_equal(json_array_size(json_object_get(res, "content")), 2);
	for (i = 0; i < 2; i++) {
		const json_t *b = block_at(res, (size_t)i);

		assert_true(json_is_true(json_object_get(b, "is_error")));
		assert_non_null(strstr(str_of(b, "content"), "aborted: stopped by the test"));
	}
	assert_string_equal(r.states, "starting>calling_model:new message\n"
	                              "calling_model>running_tools:tool_use\n"
	                              "running_tools>done:aborted\n");
	/* The shell died with the run. */
	snprintf(path, sizeof path, "%s/sleeper.pid", fx->ws);
	{
		FILE *f = fopen(path, "r");
		size_t cap = 0;

		assert_non_null(f);
		assert_true(getline(&pidtext, &cap, f) > 0);
		fclose(f);
	}
	pid = strtol(pidtext, NULL, 10);
	free(pidtext);
	assert_true(pid > 1);
	for (i = 0; i < 100 && kill((pid_t)pid, 0) == 0; i++) {
		uv_run(&fx->loop, UV_RUN_NOWAIT);
		usleep(20000);
	}
	assert_int_equal(kill((pid_t)pid, 0), -1);
	assert_int_equal(errno, ESRCH);
	run_free(&r);
}

/* turn_abort from inside the run's own state event: the run ends there,
 * nothing is started after it, and pending tool_use blocks get results. */
static void test_abort_from_state_event(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;
	const json_t *res;

	load_script(fx,
	            "{\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}]}\n"
	            "{\"text\": \"done\"}\n",
	            0);
	run_init(&r, fx);
	opts_init(&o, &r, "hello");
	r.abort_in_state = true;
	r.abort_on_state = TURN_CALLING_MODEL;
	start_run(&r, &o);
	wait_done(&r);
	assert_aborted(&r, "stopped from a state event");
	assert_int_equal(r.model_calls, 0);
	assert_string_equal(r.states, "starting>calling_model:new message\n"
	                              "calling_model>done:aborted\n");
	uv_run(&fx->loop, UV_RUN_DEFAULT); /* no model call answers a freed run */
	assert_int_equal(r.done, 1);
	run_free(&r);

	run_init(&r, fx);
	opts_init(&o, &r, "hello");
	r.abort_in_state = true;
	r.abort_on_state = TURN_RUNNING_TOOLS;
	start_run(&r, &o);
	wait_done(&r);
	assert_aborted(&r, "stopped from a state event");
	assert_int_equal(r.model_calls, 1);
	assert_int_equal(r.tool_starts, 0);
	assert_int_equal(json_array_size(r.messages), 3);
	res = block_at(msg_at(&r, 2), 0);
	assert_true(json_is_true(json_object_get(res, "is_error")));
	assert_string_equal(str_of(res, "tool_use_id"), "call_1");
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(r.done, 1);
	run_free(&r);
}

/* turn_abort from inside a tool_start event (the executor is running). */
static void test_abort_from_tool_event(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;
	const json_t *res, *b;
	size_t i;

	load_script(fx,
	            "{\"tool_calls\": [{\"name\": \"read\", \"input\": {\"path\": \"a.txt\"}},"
	            " {\"name\": \"write\", \"input\": {\"path\": \"w.txt\", \"content\": \"x\"}},"
	            " {\"name\": \"ls\", \"input\": {}}]}\n"
	            "{\"text\": \"never\"}\n",
	            0);
	run_init(&r, fx);
	opts_init(&o, &r, "hello");
	r.abort_in_tool_start = true;
	start_run(&r, &o);
	wait_done(&r);
	assert_aborted(&r, "stopped from a tool event");
	assert_int_equal(r.tool_starts, 1);
	assert_int_equal(json_array_size(r.messages), 3);
	res = msg_at(&r, 2);
	assert_int_equal(json_array_size(json_object_get(res, "content")), 3);
	json_array_foreach(json_object_get(res, "content"), i, b)
	{
		assert_true(json_is_true(json_object_get(b, "is_error")));
		assert_non_null(strstr(str_of(b, "content"), "stopped from a tool event"));
	}
	assert_int_equal(i, 3);
	{
		char path[PATH_MAX + 64];

		snprintf(path, sizeof path, "%s/w.txt", fx->ws);
		assert_int_equal(access(path, F_OK), -1); /* write never started */
	}
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(r.done, 1);
	run_free(&r);
}

/* ... and from inside a tool_end event and a text delta. */
static void test_abort_from_end_and_delta(void **state)
{
	static const char script[] =
	    "{\"text\": \"Reading two files.\", \"tool_calls\": [{\"name\": \"read\", "
	    "\"input\": {\"path\": \"a.txt\"}}, {\"name\": \"bash\", \"input\": "
	    "{\"command\": \"touch ran.txt\"}}]}\n"
	    "{\"text\": \"never\"}\n";
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;
	const json_t *res;

	load_script(fx, script, 0);
	run_init(&r, fx);
	opts_init(&o, &r, "hello");
	r.abort_in_tool_end = true;
	start_run(&r, &o);
	wait_done(&r);
	assert_aborted(&r, "stopped from a tool event");
	assert_int_equal(r.tool_starts, 1);
	res = msg_at(&r, 2);
	assert_false(json_is_true(json_object_get(block_at(res, 0), "is_error")));
	assert_true(json_is_true(json_object_get(block_at(res, 1), "is_error")));
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(r.done, 1);
	{
		char path[PATH_MAX + 64];

		snprintf(path, sizeof path, "%s/ran.txt", fx->ws);
		assert_int_equal(access(path, F_OK), -1); /* bash never started */
	}
	run_free(&r);

	/* A fresh provider: its script starts again. */
	models_free(fx->m);
	fx->m = NULL;
	config_unref(fx->cfg);
	fx->cfg = NULL;
	load_script(fx, script, 0);
	run_init(&r, fx);
	opts_init(&o, &r, "hello");
	r.abort_in_delta = true;
	start_run(&r, &o);
	wait_done(&r);
	assert_aborted(&r, "stopped from a text delta");
	assert_int_equal(r.model_calls, 0);
	assert_string_equal(r.deltas.data, "Reading ");
	assert_int_equal(json_array_size(r.messages), 1);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(r.done, 1);
	run_free(&r);
}

/* ---- failures ---- */

static void test_provider_error_after_tools(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;
	const json_t *m;

	load_script(fx,
	            "{\"tool_calls\": [{\"name\": \"ls\", \"input\": {}}, {\"name\": \"nope\", "
	            "\"input\": {}}]}\n"
	            "{\"error\": \"auth\"}\n",
	            2);
	run_init(&r, fx);
	opts_init(&o, &r, "hello");
	start_run(&r, &o);
	wait_done(&r);

	assert_int_equal(r.end, TURN_END_ERROR);
	assert_string_equal(r.detail, "scripted auth (step 1)");
	assert_int_equal(r.model_calls, 1); /* auth is not retried */
	assert_int_equal(r.tool_calls, 2);
	assert_int_equal(r.tool_errors, 1); /* the unknown tool */
	assert_int_equal(json_array_size(r.messages), 3);
	m = msg_at(&r, 2);
	assert_string_equal(role_of(m), "user");
	assert_true(json_is_true(json_object_get(block_at(m, 1), "is_error")));
	assert_string_equal(r.states, "starting>calling_model:new message\n"
	                              "calling_model>running_tools:tool_use\n"
	                              "running_tools>calling_model:tool results\n"
	                              "calling_model>done:error\n");
	assert_pairing(NULL, r.messages);
	run_free(&r);
}

static void test_bad_start(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;
	struct turn *t = (struct turn *)&r;

	load_script(fx, "{\"text\": \"x\"}\n", 0);
	run_init(&r, fx);
	opts_init(&o, &r, "hello");
	o.n_chain = 0;
	assert_int_equal(turn_start(&t, &o, on_done, &r), SB_ERR_INVAL);
	assert_null(t);
	opts_init(&o, &r, "hello");
	assert_int_equal(turn_start(&t, &o, NULL, &r), SB_ERR_INVAL);
	o.tool_ctx.loop = NULL;
	assert_int_equal(turn_start(&t, &o, on_done, &r), SB_ERR_INVAL);
	assert_int_equal(r.done, 0);
	run_free(&r);
	assert_string_equal(turn_state_name(TURN_COMPACTING), "compacting");
	assert_string_equal(turn_end_name(TURN_END_BUDGET_EXHAUSTED), "budget_exhausted");
	assert_string_equal(turn_end_name((enum turn_end)42), "unknown");
}

/* ---- the transcript ---- */

struct flushed {
	int n;
	int rc;
};

static void on_flushed(void *ud, int rc)
{
	struct flushed *f = ud;

	f->n++;
	f->rc = rc;
}

/* Runs a tool loop whose last call is the grace call, with a transcript;
 * loads it back: the message entries are the run's messages (the grace
 * note included: what was sent is what a later run loads), assistant
 * entries carry usage and model, and the state events are there in order. */
static void test_transcript(void **state)
{
	struct fixture *fx = *state;
	struct transcript_info ti = {
	    .session_id = "s1", .session_key = "agent:main:test", .agent_id = "main"};
	struct transcript *tr = NULL;
	struct transcript_loaded l;
	struct turn_options o;
	struct turn_budget budget;
	struct flushed fl = {0};
	struct run r;
	char path[PATH_MAX + 64], states[4096] = "";
	const json_t *e;
	size_t i, n_msg = 0, n_turn_end = 0;

	load_script(
	    fx,
	    "{\"text\": \"Let me look.\", \"tool_calls\": [{\"name\": \"ls\", "
	    "\"input\": {}}, {\"name\": \"glob\", \"input\": {\"pattern\": \"**/*.md\"}}]}\n"
	    "{\"tool_calls\": [{\"name\": \"read\", \"input\": {\"path\": \"a.txt\"}}]}\n"
	    "{\"text\": \"Two lines.\"}\n",
	    0);
	snprintf(path, sizeof path, "%s/sessions/s1.jsonl", fx->home);
	assert_int_equal(transcript_open(&tr, &fx->loop, path, &ti), SB_OK);
	turn_budget_init(&budget, 2, NULL);
	run_init(&r, fx);
	opts_init(&o, &r, "how many lines has a.txt?");
	o.budget = &budget;
	o.transcript = tr;
	start_run(&r, &o);
	wait_done(&r);
	assert_int_equal(r.end, TURN_END_BUDGET_EXHAUSTED);
	assert_int_equal(r.model_calls, 3);
	assert_int_equal(transcript_flush(tr, on_flushed, &fl), SB_OK);
	while (!fl.n)
		uv_run(&fx->loop, UV_RUN_ONCE);
	assert_int_equal(fl.rc, SB_OK);
	transcript_close(tr);

	assert_int_equal(transcript_load(path, &l), SB_OK);
	assert_int_equal(l.torn, 0);
	assert_string_equal(str_of(l.header, "key"), "agent:main:test");
	assert_true(json_equal(l.messages, r.messages));
	assert_non_null(strstr(
	    json_string_value(json_object_get(block_at(json_array_get(l.messages, 4), 1), "text")),
	    "iteration budget is spent"));
	json_array_foreach(l.entries, i, e)
	{
		const char *type = str_of(e, "type"), *ev = str_of(e, "event");
		size_t n = strlen(states);

		assert_true(strlen(str_of(e, "id")) > 0);
		assert_non_null(json_object_get(e, "ts"));
		if (strcmp(type, "message") == 0) {
			const json_t *m = json_object_get(e, "message");

			if (strcmp(role_of(m), "assistant") == 0) {
				assert_string_equal(str_of(e, "model"), "s/m");
				assert_true(json_is_object(json_object_get(e, "usage")));
				assert_true(json_integer_value(json_object_get(
				                json_object_get(e, "usage"), "output_tokens")) > 0);
			}
			n_msg++;
		} else if (strcmp(type, "event") == 0 && strcmp(ev, "state") == 0) {
			snprintf(states + n, sizeof states - n, "%s>%s:%s\n", str_of(e, "from"),
			         str_of(e, "to"), str_of(e, "reason"));
		} else if (strcmp(type, "event") == 0 && strcmp(ev, "turn_end") == 0) {
			assert_string_equal(str_of(e, "end"), "budget_exhausted");
			assert_int_equal(json_integer_value(json_object_get(e, "model_calls")), 3);
			assert_int_equal(json_integer_value(json_object_get(e, "tool_calls")), 3);
			n_turn_end++;
		}
	}
	assert_int_equal(n_msg, json_array_size(r.messages));
	assert_int_equal(n_turn_end, 1);
	assert_string_equal(states, r.states);
	/* The first line of the file after the header is the user message. */
	assert_string_equal(str_of(json_array_get(l.entries, 0), "type"), "message");
	transcript_loaded_free(&l);
	run_free(&r);
}

/* The "prompt" event of a one-call run over tools/n_tools (with or without
 * a tool-list cache): its "tools" fingerprint and "tokens_estimate". */
static void prompt_of(struct fixture *fx, const char *name, const char *const *tools,
                      size_t n_tools, struct turn_tools_cache *cache, char *hash,
                      json_int_t *tokens)
{
	struct transcript_info ti = {
	    .session_id = name, .session_key = "agent:main:test", .agent_id = "main"};
	struct transcript *tr = NULL;
	struct transcript_loaded l;
	struct turn_options o;
	struct flushed fl = {0};
	struct run r;
	char path[PATH_MAX + 64];
	const json_t *e;
	size_t i;

	snprintf(path, sizeof path, "%s/sessions/%s.jsonl", fx->home, name);
	assert_int_equal(transcript_open(&tr, &fx->loop, path, &ti), SB_OK);
	run_init(&r, fx);
	opts_init(&o, &r, "hi");
	o.transcript = tr;
	o.tools = tools;
	o.n_tools = n_tools;
	o.tools_cache = cache;
	start_run(&r, &o);
	wait_done(&r);
	assert_int_equal(r.end, TURN_END_TURN);
	assert_int_equal(transcript_flush(tr, on_flushed, &fl), SB_OK);
	while (!fl.n)
		uv_run(&fx->loop, UV_RUN_ONCE);
	transcript_close(tr);
	assert_int_equal(transcript_load(path, &l), SB_OK);
	*hash = '\0';
	json_array_foreach(l.entries, i, e)
	{
		if (strcmp(str_of(e, "type"), "event") == 0 &&
		    strcmp(str_of(e, "event"), "prompt") == 0) {
			snprintf(hash, 17, "%s", str_of(e, "tools"));
			*tokens = json_integer_value(json_object_get(e, "tokens_estimate"));
			break;
		}
	}
	assert_int_equal(strlen(hash), 16);
	transcript_loaded_free(&l);
	run_free(&r);
}

/* The tool-list cache: one entry per set of tools whatever the order of the
 * names, the same bytes, fingerprint and estimate as a run without it, and
 * another entry (another fingerprint) when an agent's tools change, as a
 * configuration reload does. */
static void test_tools_cache(void **state)
{
	struct fixture *fx = *state;
	static const char *const two[] = {"read", "ls"};
	static const char *const two_again[] = {"ls", "nope", "read", "ls"};
	static const char *const three[] = {"ls", "read", "grep"};
	struct turn_tools_cache *c = NULL;
	const json_t *all, *a, *b, *none;
	json_t *fresh;
	uint64_t h_all = 0, h_two = 0, h = 0;
	int64_t k_all = 0, k = 0;
	char p0[17], p1[17], p2[17];
	json_int_t t0 = 0, t1 = 0, t2 = 0;

	assert_int_equal(turn_tools_cache_new(&c), SB_OK);
	assert_null(turn_tools_cache_get(NULL, NULL, 0, NULL, NULL));
	all = turn_tools_cache_get(c, NULL, 0, &h_all, &k_all);
	assert_non_null(all);
	fresh = tool_list_json_new(NULL, 0);
	assert_true(json_equal(all, fresh));
	assert_int_equal(k_all, tokens_estimate_json(fresh));
	json_decref(fresh);
	assert_ptr_equal(turn_tools_cache_get(c, NULL, 0, &h, &k), all);
	assert_true(h == h_all);
	assert_int_equal(k, k_all);
	a = turn_tools_cache_get(c, two, 2, &h_two, NULL);
	b = turn_tools_cache_get(c, two_again, 4, &h, NULL);
	assert_ptr_equal(a, b);
	assert_true(h == h_two && h_two != h_all);
	fresh = tool_list_json_new(two, 2);
	assert_true(json_equal(a, fresh));
	json_decref(fresh);
	/* A list of none is none, not all (turn_options.tools). */
	none = turn_tools_cache_get(c, two, 0, &h, NULL);
	assert_int_equal(json_array_size(none), 0);
	assert_true(h != h_all && h != h_two);

	load_script(fx, "{\"text\": \"Hello.\"}\n", 0);
	prompt_of(fx, "plain", two, 2, NULL, p0, &t0);
	prompt_of(fx, "cached", two_again, 4, c, p1, &t1);
	assert_string_equal(p0, p1);
	assert_int_equal(t0, t1);
	/* The agent's tools changed: another list, another fingerprint. */
	prompt_of(fx, "changed", three, 3, c, p2, &t2);
	assert_string_not_equal(p1, p2);
	assert_true(t2 > t1);
	prompt_of(fx, "changed_plain", three, 3, NULL, p0, &t0);
	assert_string_equal(p0, p2);
	assert_int_equal(t0, t2);
	turn_tools_cache_free(c);
}

/* ---- against the fake model server (tests/fakes/fake_llm.js) ---- */

/* Starts the fake with script (a JSON list of steps) and loads providers
 * "oa" (openai-chat) and "an" (anthropic-messages) on it, both streaming,
 * with max_retries retries. */
static void start_fake(struct fixture *fx, const char *script, int max_retries)
{
	static const struct httpc_options ho = {.timeout_ms = 10000,
	                                        .connect_timeout_ms = 2000,
	                                        .max_connections = 4,
	                                        .max_response_bytes = 16 << 20};
	const char *args[] = {"--script", NULL, NULL};
	char path[PATH_MAX], yaml[1024];

	snprintf(path, sizeof path, "%s/fake.json", fx->home);
	write_file(fx->home, "fake.json", script);
	args[1] = path;
	if (harness_peer_start(&fx->llm, "fake_llm.js", args) != 0)
		fail_msg("cannot start tests/fakes/fake_llm.js (node)");
	fx->llm_started = true;
	assert_int_equal(httpc_new(&fx->http, &fx->loop, &ho), SB_OK);
	fx->host.http_client = fixture_http;
	snprintf(yaml, sizeof yaml,
	         "  - {id: oa, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: k1, max_retries: %d}\n"
	         "  - {id: an, api: anthropic-messages, base_url: \"http://127.0.0.1:%d\", "
	         "api_key: k2, max_retries: %d}\n",
	         fx->llm.port, max_retries, fx->llm.port, max_retries);
	load_config(fx, yaml, "oa/gpt-test");
}

/* Replaces the fake's script. */
static void fake_script(struct fixture *fx, const char *script)
{
	assert_int_equal(harness_http(fx->llm.port, "POST", "/__reset", NULL, "{}", NULL), 200);
	assert_int_equal(harness_http(fx->llm.port, "POST", "/__script", NULL, script, NULL), 200);
}

static const char *const chain_oa[] = {"oa/gpt-test"};
static const char *const chain_an[] = {"an/claude-test"};

static char *file_text(const char *dir, const char *name)
{
	char path[PATH_MAX + 64];
	struct buf b;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	buf_init(&b, 16 << 20);
	if (harness_read_file(path, &b) != 0) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

/* Point 1: a write cut off by the output-token limit is answered with an
 * error result that says so and how to write in parts; the model writes the
 * file in two calls. No retry, no cooldown, on both APIs. */
static void test_cut_tool_call(void **state)
{
	static const char script[] =
	    "[{\"text\": \"Writing it.\", \"stop\": \"max_tokens\", \"tool_calls\": [{\"name\": "
	    "\"write\", \"raw_input\": \"{\\\"path\\\": \\\"big.txt\\\", \\\"content\\\": "
	    "\\\"aaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}]},"
	    " {\"tool_calls\": [{\"name\": \"write\", \"input\": {\"path\": \"big.txt\", "
	    "\"content\": \"part one, \"}}]},"
	    " {\"tool_calls\": [{\"name\": \"write\", \"input\": {\"path\": \"big.txt\", "
	    "\"content\": \"part two.\", \"append\": true}}]},"
	    " {\"text\": \"Written in two parts.\"}]";
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;
	const json_t *m, *b;
	char *text;
	uint64_t until;

	start_fake(fx, script, 2);
	for (int api = 0; api < 2; api++) {
		if (api)
			fake_script(fx, script);
		{
			char p[PATH_MAX + 16];

			snprintf(p, sizeof p, "%s/big.txt", fx->ws);
			unlink(p);
		}
		run_init(&r, fx);
		opts_init(&o, &r, "write a big file");
		o.chain = api ? chain_an : chain_oa;
		start_run(&r, &o);
		wait_done(&r);
		if (r.end != TURN_END_TURN)
			fail_msg("api %d: end %s: %s\n%s", api, turn_end_name(r.end), r.detail,
			         r.states);
		assert_null(strstr(r.states, "retry"));
		assert_null(strstr(r.states, "cooldown"));
		assert_int_equal(models_cooldown_until(fx->m, api ? "an" : "oa", &until), 0);
		assert_int_equal(r.model_calls, 4);
		assert_string_equal(r.text, "Written in two parts.");
		/* The cut call has its error result, saying why and what to do. */
		m = msg_at(&r, 2);
		b = block_at(m, 0);
		assert_true(json_is_true(json_object_get(b, "is_error")));
		assert_string_equal(str_of(b, "tool_use_id"),
		                    str_of(block_at(msg_at(&r, 1), 1), "id"));
		assert_non_null(strstr(str_of(b, "content"), "cut off by the output-token limit"));
		assert_non_null(strstr(str_of(b, "content"), "\"append\": true"));
		text = file_text(fx->ws, "big.txt");
		assert_non_null(text);
		assert_string_equal(text, "part one, part two.");
		free(text);
		assert_pairing(NULL, r.messages);
		run_free(&r);
	}
}

/* Point 2: a server that gives the same id to every round's call: the
 * session's ids stay unique, so each saved result is its own file and each
 * preview names the right one. Also two calls with one id in one answer. */
static void test_ids_unique_in_session(void **state)
{
	static const char script[] =
	    "[{\"tool_calls\": [{\"id\": \"call_0\", \"name\": \"bash\", \"input\": {\"command\": "
	    "\"seq 1 2000\"}}]},"
	    " {\"tool_calls\": [{\"id\": \"call_0\", \"name\": \"bash\", \"input\": {\"command\": "
	    "\"seq 5000 7000\"}}]},"
	    " {\"tool_calls\": [{\"id\": \"dup\", \"name\": \"ls\", \"input\": {}},"
	    " {\"id\": \"dup\", \"name\": \"ls\", \"input\": {\"path\": \"sub\"}}]},"
	    " {\"text\": \"done\"}]";
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;
	char results[PATH_MAX + 16], name[200];
	const char *id1, *id2, *c2;
	char *saved;

	start_fake(fx, script, 0);
	snprintf(results, sizeof results, "%s/results", fx->home);
	run_init(&r, fx);
	opts_init(&o, &r, "count twice");
	o.chain = chain_oa;
	o.tool_ctx.results_dir = results;
	o.context.budget.tool_max = 1000;
	start_run(&r, &o);
	wait_done(&r);
	if (r.end != TURN_END_TURN)
		fail_msg("end %s: %s", turn_end_name(r.end), r.detail);
	id1 = str_of(block_at(msg_at(&r, 1), 0), "id");
	id2 = str_of(block_at(msg_at(&r, 3), 0), "id");
	assert_string_equal(id1, "call_0");
	assert_string_not_equal(id1, id2);
	assert_string_equal(str_of(block_at(msg_at(&r, 4), 0), "tool_use_id"), id2);
	/* The second preview names the second call's file, which holds the
	 * second output. */
	c2 = str_of(block_at(msg_at(&r, 4), 0), "content");
	snprintf(name, sizeof name, "@tool-results/%s.txt", id2);
	assert_non_null(strstr(c2, name));
	assert_non_null(strstr(c2, "5000"));
	snprintf(name, sizeof name, "%s.txt", id2);
	saved = file_text(results, name);
	assert_non_null(saved);
	assert_non_null(strstr(saved, "\n7000\n"));
	assert_null(strstr(saved, "\n1999\n"));
	free(saved);
	assert_string_not_equal(str_of(block_at(msg_at(&r, 5), 0), "id"),
	                        str_of(block_at(msg_at(&r, 5), 1), "id"));
	assert_pairing(NULL, r.messages);
	run_free(&r);
}

/* The streaming executor in the loop: a read-only call runs (and ends)
 * while the rest of the answer still streams; a write waits for the whole
 * answer. Both APIs. */
static void test_tools_start_while_streaming(void **state)
{
	static const char script[] =
	    "[{\"chunk_delay_ms\": 150, \"tool_calls\": [{\"name\": \"read\", \"input\": "
	    "{\"path\": \"a.txt\"}}, {\"name\": \"write\", \"input\": {\"path\": \"w.txt\", "
	    "\"content\": \"x\"}}]},"
	    " {\"text\": \"ok\"}]";
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;
	struct transcript_info ti = {.session_id = "s1", .session_key = "k", .agent_id = "main"};
	struct transcript *tr = NULL;
	struct transcript_loaded l;
	struct flushed fl = {0};
	char path[PATH_MAX + 64];

	start_fake(fx, script, 0);
	for (int api = 0; api < 2; api++) {
		const json_t *e;
		size_t i;
		int read_end = -1, write_start = -1, answer = -1, k = 0;

		if (api)
			fake_script(fx, script);
		snprintf(path, sizeof path, "%s/sessions/early%d.jsonl", fx->home, api);
		assert_int_equal(transcript_open(&tr, &fx->loop, path, &ti), SB_OK);
		run_init(&r, fx);
		opts_init(&o, &r, "read then write");
		o.chain = api ? chain_an : chain_oa;
		o.transcript = tr;
		start_run(&r, &o);
		wait_done(&r);
		assert_int_equal(r.end, TURN_END_TURN);
		memset(&fl, 0, sizeof fl);
		assert_int_equal(transcript_flush(tr, on_flushed, &fl), SB_OK);
		while (!fl.n)
			uv_run(&fx->loop, UV_RUN_ONCE);
		transcript_close(tr);
		assert_int_equal(transcript_load(path, &l), SB_OK);
		json_array_foreach(l.entries, i, e)
		{
			const char *ev = str_of(e, "event");

			k++;
			if (strcmp(ev, "tool_end") == 0 && strcmp(str_of(e, "name"), "read") == 0)
				read_end = k;
			if (strcmp(ev, "tool_start") == 0 &&
			    strcmp(str_of(e, "name"), "write") == 0)
				write_start = k;
			if (strcmp(str_of(e, "type"), "message") == 0 && answer < 0 &&
			    msg_tool_use_count(json_object_get(e, "message")) == 2)
				answer = k;
		}
		/* read ended before the answer was complete; write started after. */
		assert_true(read_end > 0 && answer > 0 && write_start > 0);
		assert_true(read_end < answer);
		assert_true(write_start > answer);
		assert_true(json_equal(l.messages, r.messages));
		transcript_loaded_free(&l);
		assert_pairing(NULL, r.messages);
		run_free(&r);
	}
}

/* The budget refund: rounds that only ran code (bash) give their unit
 * back; a round with another tool does not. */
static void test_budget_refund(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct turn_budget budget;
	struct run r;

	load_script(fx,
	            "{\"tool_calls\": [{\"name\": \"bash\", \"input\": {\"command\": \"true\"}}]}\n"
	            "{\"tool_calls\": [{\"name\": \"bash\", \"input\": {\"command\": \"true\"}}]}\n"
	            "{\"tool_calls\": [{\"name\": \"bash\", \"input\": {\"command\": \"true\"}}]}\n"
	            "{\"tool_calls\": [{\"name\": \"bash\", \"input\": {\"command\": \"true\"}},"
	            " {\"name\": \"ls\", \"input\": {}}]}\n"
	            "{\"text\": \"done\"}\n",
	            0);
	turn_budget_init(&budget, 2, NULL);
	run_init(&r, fx);
	opts_init(&o, &r, "run things");
	o.budget = &budget;
	start_run(&r, &o);
	wait_done(&r);
	assert_int_equal(r.end, TURN_END_TURN);
	assert_int_equal(r.model_calls, 5);
	/* 3 bash-only rounds refunded; the mixed round and the answer count. */
	assert_int_equal(budget.used, 2);
	assert_false(budget.grace_used);
	run_free(&r);
}

/* A message steered into a resumed run (the history ends with the user
 * message, recorded before a crash) is in the reloaded history. */
static void test_steer_into_resumed_run(void **state)
{
	struct fixture *fx = *state;
	struct transcript_info ti = {.session_id = "s2", .session_key = "k", .agent_id = "main"};
	struct transcript *tr = NULL;
	struct transcript_loaded l;
	struct turn_options o;
	struct flushed fl = {0};
	struct run r;
	json_t *history, *fields;
	char path[PATH_MAX + 64];
	char *t0;

	load_script(fx, "{\"text\": \"Saw: {{user_text}}\"}\n", 0);
	snprintf(path, sizeof path, "%s/sessions/s2.jsonl", fx->home);
	assert_int_equal(transcript_open(&tr, &fx->loop, path, &ti), SB_OK);
	history = json_array();
	json_array_append_new(history, msg_user_text_new("the first message"));
	fields = json_pack("{sO}", "message", json_array_get(history, 0));
	assert_int_equal(transcript_append(tr, "message", fields, NULL, 0), SB_OK);
	json_decref(fields);
	run_init(&r, fx);
	opts_init(&o, &r, NULL); /* resumes: the user message is there */
	o.history = history;
	o.transcript = tr;
	start_run(&r, &o);
	assert_int_equal(turn_steer(r.t, "and a steered one"), SB_OK);
	wait_done(&r);
	assert_int_equal(r.end, TURN_END_TURN);
	assert_int_equal(transcript_flush(tr, on_flushed, &fl), SB_OK);
	while (!fl.n)
		uv_run(&fx->loop, UV_RUN_ONCE);
	transcript_close(tr);
	assert_int_equal(transcript_load(path, &l), SB_OK);
	assert_int_equal(json_array_size(l.messages), 2);
	t0 = msg_text(json_array_get(l.messages, 0));
	assert_string_equal(t0, "the first messageand a steered one");
	free(t0);
	transcript_loaded_free(&l);
	json_decref(history);
	run_free(&r);
}

/* The todo tool: the list replaces the last one, is recorded in the
 * transcript (and loading finds it), and is the run's at the end. */
static void test_todo_tool(void **state)
{
	struct fixture *fx = *state;
	struct transcript_info ti = {.session_id = "s3", .session_key = "k", .agent_id = "main"};
	struct transcript *tr = NULL;
	struct transcript_loaded l;
	struct turn_options o;
	struct flushed fl = {0};
	struct run r;
	char path[PATH_MAX + 64];
	const json_t *res;

	load_script(fx,
	            "{\"tool_calls\": [{\"name\": \"todo\", \"input\": {\"items\": ["
	            "{\"text\": \"read the files\", \"status\": \"in_progress\"},"
	            "{\"text\": \"write the report\", \"status\": \"pending\"}]}}]}\n"
	            "{\"tool_calls\": [{\"name\": \"todo\", \"input\": {\"items\": ["
	            "{\"text\": \"read the files\", \"status\": \"done\"},"
	            "{\"text\": \"write the report\", \"status\": \"in_progress\"}]}}]}\n"
	            "{\"tool_calls\": [{\"name\": \"todo\", \"input\": {\"items\": ["
	            "{\"text\": \"x\", \"status\": \"maybe\"}]}}]}\n"
	            "{\"text\": \"Working on the report.\"}\n",
	            0);
	snprintf(path, sizeof path, "%s/sessions/s3.jsonl", fx->home);
	assert_int_equal(transcript_open(&tr, &fx->loop, path, &ti), SB_OK);
	run_init(&r, fx);
	opts_init(&o, &r, "plan it");
	o.transcript = tr;
	start_run(&r, &o);
	wait_done(&r);
	assert_int_equal(r.end, TURN_END_TURN);
	res = block_at(msg_at(&r, 2), 0);
	assert_false(json_is_true(json_object_get(res, "is_error")));
	assert_string_equal(str_of(res, "content"), "Todo list saved (0 of 2 done):\n"
	                                            "[>] read the files\n[ ] write the report");
	res = block_at(msg_at(&r, 4), 0);
	assert_string_equal(str_of(res, "content"), "Todo list saved (1 of 2 done):\n"
	                                            "[x] read the files\n[>] write the report");
	/* A bad status is refused by the schema; the list stays. */
	res = block_at(msg_at(&r, 6), 0);
	assert_true(json_is_true(json_object_get(res, "is_error")));
	assert_int_equal(transcript_flush(tr, on_flushed, &fl), SB_OK);
	while (!fl.n)
		uv_run(&fx->loop, UV_RUN_ONCE);
	transcript_close(tr);
	assert_int_equal(transcript_load(path, &l), SB_OK);
	assert_non_null(l.todo);
	assert_int_equal(json_array_size(l.todo), 2);
	assert_string_equal(str_of(json_array_get(l.todo, 1), "status"), "in_progress");
	transcript_loaded_free(&l);
	run_free(&r);
}

/* The date: told in the new message the first time and when the day
 * changed, never twice the same day, and never in a message already sent
 * (the prefix stays byte for byte). */
static void test_date_note(void **state)
{
	struct fixture *fx = *state;
	struct turn_options o;
	struct run r;
	json_t *history = json_array();
	const char *d1 = "[Today is Monday, 30 November 2026 (UTC, UTC+00:00).]";
	const char *d2 = "[Today is Tuesday, 1 December 2026 (UTC, UTC+00:00).]";
	char *t;

	load_script(fx, "{\"text\": \"Saw: {{user_text}}\"}\n", 0);
	for (int i = 0; i < 3; i++) {
		run_init(&r, fx);
		opts_init(&o, &r, i == 0 ? "one" : i == 1 ? "two" : "three");
		o.history = history;
		o.date_note = i < 2 ? d1 : d2;
		start_run(&r, &o);
		wait_done(&r);
		assert_int_equal(r.end, TURN_END_TURN);
		/* What the user wrote is what the model sees as the text. */
		assert_string_equal(r.text, i == 0   ? "Saw: one"
		                            : i == 1 ? "Saw: two"
		                                     : "Saw: three");
		t = msg_text(msg_at(&r, 0));
		if (i == 1)
			assert_string_equal(t, "two");
		else
			assert_string_equal(
			    t, i == 0 ? "one[Today is Monday, 30 November 2026 (UTC, "
			                "UTC+00:00).]"
			              : "three[Today is Tuesday, 1 December 2026 (UTC, "
			                "UTC+00:00).]");
		free(t);
		json_array_extend(history, r.messages);
		run_free(&r);
	}
	json_decref(history);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_end_turn, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tool_loop, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_max_turns, setup, teardown),
	    cmocka_unit_test(test_budget_units),
	    cmocka_unit_test_setup_teardown(test_grace_call, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_grace_answer_with_tools, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_budget_spent_and_parent, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_continuation, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_continuation_retry, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_continuation_not_streamed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_steer, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_steer_into_final_answer, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_abort_before_first_step, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_abort_during_model_call, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_abort_during_tools, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_abort_from_state_event, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_abort_from_tool_event, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_abort_from_end_and_delta, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_provider_error_after_tools, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_start, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_transcript, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tools_cache, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cut_tool_call, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ids_unique_in_session, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tools_start_while_streaming, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_budget_refund, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_steer_into_resumed_run, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_todo_tool, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_date_note, setup, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
