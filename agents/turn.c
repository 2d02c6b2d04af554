/*
 * turn.c - one agent run as a state machine on the loop thread. See turn.h.
 *
 * The run advances only from completion callbacks (model call done, tools
 * done, a zero-delay timer for the first step), so one thread carries any
 * number of runs. Every transition goes through turn_set_state with a reason,
 * which is also written to the transcript.
 */
#include "agents/turn.h"

#include <stdlib.h>
#include <string.h>

#include "agents/executor.h"
#include "agents/message.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"

#define TURN_MAX_CONTINUATIONS 3
#define TURN_TEXT_MAX (16u << 20)

static const char *const turn_state_names[] = {"starting", "calling_model", "running_tools",
                                               "compacting", "done"};
static const char *const turn_end_names[] = {"end_turn", "max_turns", "budget_exhausted", "aborted",
                                             "error"};

const char *turn_state_name(enum turn_state s)
{
	return (unsigned)s <= TURN_DONE ? turn_state_names[s] : "unknown";
}

const char *turn_end_name(enum turn_end e)
{
	return (unsigned)e <= TURN_END_ERROR ? turn_end_names[e] : "unknown";
}

void turn_budget_init(struct turn_budget *b, int64_t limit, struct turn_budget *parent)
{
	b->limit = limit;
	b->used = 0;
	b->grace_used = false;
	b->parent = parent;
}

bool turn_budget_consume(struct turn_budget *b)
{
	for (struct turn_budget *l = b; l; l = l->parent)
		if (l->used >= l->limit)
			return false;
	for (struct turn_budget *l = b; l; l = l->parent)
		l->used++;
	return true;
}

void turn_budget_refund(struct turn_budget *b, int64_t n)
{
	for (struct turn_budget *l = b; l; l = l->parent)
		l->used = l->used > n ? l->used - n : 0;
}

struct turn {
	struct turn_options opt;
	turn_done_cb done;
	void *ud;
	enum turn_state state;
	json_t *history; /* everything sent to the model: earlier + this run */
	json_t *added;   /* the messages this run added */
	json_t *tools_json;
	json_t *steer; /* texts waiting for the next model call */
	struct models_call *call;
	struct executor *exec;
	uv_timer_t timer; /* defers the first step out of turn_start */
	int model_calls;
	int tool_calls;
	int continuations;
	bool grace; /* the current call is the budget's grace call */
	bool finished;
	bool user_pending; /* the last message (a user one) is not recorded yet */
	bool streamed;     /* text deltas came (the provider streams) */
	struct model_usage usage;
	struct buf text;  /* the answer's text so far (after the last tool round) */
	size_t text_mark; /* text.len when the current model call started */
	char *detail;
	struct executor_events exec_ev;
};

static const char *turn_str(const json_t *v)
{
	const char *s = json_string_value(v);

	return s ? s : "";
}

/* ---- transcript ---- */

static json_t *turn_usage_json(const struct model_usage *u)
{
	return json_pack("{sIsIsIsI}", "input_tokens", (json_int_t)u->input_tokens, "output_tokens",
	                 (json_int_t)u->output_tokens, "cache_read_tokens",
	                 (json_int_t)u->cache_read_tokens, "cache_write_tokens",
	                 (json_int_t)u->cache_write_tokens);
}

static void turn_record(struct turn *t, const char *type, json_t *fields_take)
{
	if (t->opt.transcript && fields_take &&
	    transcript_append(t->opt.transcript, type, fields_take, NULL, 0) != SB_OK)
		log_warn("agent", "transcript append failed",
		         LOG_S("session", t->opt.tool_ctx.session_key));
	json_decref(fields_take);
}

static void turn_set_state(struct turn *t, enum turn_state to, const char *reason)
{
	enum turn_state from = t->state;

	t->state = to;
	turn_record(t, "event",
	            json_pack("{sssssssssi}", "event", "state", "from", turn_state_name(from), "to",
	                      turn_state_name(to), "reason", reason ? reason : "", "model_calls",
	                      t->model_calls));
	if (t->opt.ev && t->opt.ev->state)
		t->opt.ev->state(t->opt.ev->ud, from, to, reason ? reason : "");
}

static void turn_record_message(struct turn *t, const json_t *msg, const struct model_usage *usage,
                                const char *model)
{
	json_t *fields = json_pack("{sO}", "message", msg);

	if (fields && usage)
		json_object_set_new(fields, "usage", turn_usage_json(usage));
	if (fields && model)
		json_object_set_new(fields, "model", json_string(model));
	turn_record(t, "message", fields);
}

/* Records the last user message if it is still waiting (see below). */
static void turn_record_pending(struct turn *t)
{
	if (!t->user_pending)
		return;
	t->user_pending = false;
	turn_record_message(t, json_array_get(t->added, json_array_size(t->added) - 1), NULL, NULL);
}

/* Adds msg (taken) to the history and to this run's messages, and records
 * it. usage/model are for assistant messages. A user message is recorded
 * when it is sent (or when the run ends), because notes (the grace note,
 * steered text) may still be added to it: the transcript must hold what the
 * provider got, so that loading it rebuilds the same history. */
static int turn_add_message(struct turn *t, json_t *msg, const struct model_usage *usage,
                            const char *model)
{
	if (!msg || json_array_append(t->history, msg) || json_array_append(t->added, msg)) {
		json_decref(msg);
		return SB_ERR_NOMEM;
	}
	turn_record_pending(t);
	if (strcmp(turn_str(json_object_get(msg, "role")), "user") == 0)
		t->user_pending = true;
	else
		turn_record_message(t, msg, usage, model);
	json_decref(msg);
	return SB_OK;
}

/* ---- the end ---- */

static void turn_free_cb(uv_handle_t *h)
{
	struct turn *t = h->data;

	json_decref(t->history);
	json_decref(t->added);
	json_decref(t->tools_json);
	json_decref(t->steer);
	buf_free(&t->text);
	free(t->detail);
	free(t);
}

static json_t *turn_fill_results(const json_t *msg, const char *why);

static void turn_finish(struct turn *t, enum turn_end end, const char *detail)
{
	struct turn_result r;
	json_t *last;

	if (t->finished)
		return;
	t->finished = true;
	uv_timer_stop(&t->timer);
	if (detail && !t->detail)
		t->detail = strdup(detail);
	/* The pairing invariant on every exit: tool_use blocks that no
	 * executor answered (the run ended between the model's answer and
	 * the tools, say from inside an event) get error results. */
	last = json_array_get(t->added, json_array_size(t->added) - 1);
	if (last && strcmp(turn_str(json_object_get(last, "role")), "assistant") == 0 &&
	    msg_tool_use_count(last) > 0) {
		char why[600];

		snprintf(why, sizeof why, "not run: %s",
		         t->detail ? t->detail : turn_end_name(end));
		turn_add_message(t, turn_fill_results(last, why), NULL, NULL);
	}
	turn_record_pending(t);
	turn_set_state(t, TURN_DONE, turn_end_name(end));
	{
		json_t *ev = json_pack("{ssssss}", "event", "turn_end", "end", turn_end_name(end),
		                       "detail", t->detail ? t->detail : "");

		if (ev) {
			json_object_set_new(ev, "usage", turn_usage_json(&t->usage));
			json_object_set_new(ev, "model_calls", json_integer(t->model_calls));
			json_object_set_new(ev, "tool_calls", json_integer(t->tool_calls));
		}
		turn_record(t, "event", ev);
	}
	memset(&r, 0, sizeof r);
	r.end = end;
	r.detail = t->detail ? t->detail : "";
	r.text = t->text.data ? t->text.data : "";
	r.messages = t->added;
	r.usage = t->usage;
	r.model_calls = t->model_calls;
	r.tool_calls = t->tool_calls;
	t->done(t->ud, &r);
	uv_close((uv_handle_t *)&t->timer, turn_free_cb);
}

/* Error results for every tool_use of msg (the grace call, failures before
 * the executor ran). */
static json_t *turn_fill_results(const json_t *msg, const char *why)
{
	json_t *res = msg_user_new(), *content = json_object_get(msg, "content"), *b;
	size_t i;

	json_array_foreach(content, i, b)
	{
		if (strcmp(turn_str(json_object_get(b, "type")), "tool_use") != 0)
			continue;
		msg_add_tool_result(res, json_string_value(json_object_get(b, "id")), why, true);
	}
	return res;
}

/* ---- tool events ---- */

static void turn_on_tool_start(void *ud, const char *id, const char *name, const json_t *input)
{
	struct turn *t = ud;

	turn_record(t, "event",
	            json_pack("{sssssssO}", "event", "tool_start", "tool_use_id", id, "name", name,
	                      "input", input));
	if (t->opt.ev && t->opt.ev->tool_start)
		t->opt.ev->tool_start(t->opt.ev->ud, id, name, input);
}

static void turn_on_tool_end(void *ud, const char *id, const char *name, bool is_error,
                             const char *content, double seconds)
{
	struct turn *t = ud;

	turn_record(t, "event",
	            json_pack("{sssssssbsfsi}", "event", "tool_end", "tool_use_id", id, "name",
	                      name, "is_error", is_error, "seconds", seconds, "result_chars",
	                      (int)strlen(content ? content : "")));
	if (t->opt.ev && t->opt.ev->tool_end)
		t->opt.ev->tool_end(t->opt.ev->ud, id, name, is_error, content, seconds);
}

/* ---- the model step ---- */

static void turn_call_model(struct turn *t, const char *reason);

static void turn_on_delta(void *ud, const char *text, size_t len)
{
	struct turn *t = ud;

	t->streamed = true;
	buf_append(&t->text, text, len);
	if (t->opt.ev && t->opt.ev->text_delta)
		t->opt.ev->text_delta(t->opt.ev->ud, text, len);
}

static void turn_on_models_event(void *ud, enum models_event what, const char *model,
                                 const struct model_error *err, int64_t delay_ms)
{
	struct turn *t = ud;
	char reason[1024];
	static const char *const names[] = {"retry", "fallback", "cooldown"};

	snprintf(reason, sizeof reason, "%s after provider error (%s: %s), model %s, in %lld ms",
	         names[what], err ? model_error_kind_name(err->kind) : "?", err ? err->message : "",
	         model ? model : "?", (long long)delay_ms);
	/* Text streamed by a failed attempt is not part of the answer (what
	 * came before this call, a continuation's first part, stays). */
	if (t->text.data) {
		t->text.len = t->text_mark;
		t->text.data[t->text.len] = '\0';
	}
	turn_set_state(t, TURN_CALLING_MODEL, reason);
}

static void turn_on_tools_done(void *ud, int rc, json_t *results)
{
	struct turn *t = ud;
	size_t n = json_array_size(json_object_get(results, "content"));

	t->exec = NULL;
	t->tool_calls += (int)n;
	if (!results) {
		turn_finish(t, TURN_END_ERROR, "out of memory"); /* fills the results */
		return;
	}
	turn_add_message(t, results, NULL, NULL);
	if (rc == SB_ERR_ABORTED || t->finished) {
		turn_finish(t, TURN_END_ABORTED, t->detail ? t->detail : "aborted");
		return;
	}
	buf_reset(&t->text);
	turn_call_model(t, "tool results");
}

static void turn_on_model_done(void *ud, int rc, const struct model_response *resp,
                               const struct model_error *err)
{
	struct turn *t = ud;
	struct executor_options eo;
	json_t *msg;
	size_t n_tools;

	t->call = NULL;
	if (rc != SB_OK || !resp) {
		if (err && err->kind == MODEL_ERR_ABORTED)
			turn_finish(t, TURN_END_ABORTED, t->detail ? t->detail : "aborted");
		else if (err && err->kind == MODEL_ERR_PROMPT_TOO_LONG)
			turn_finish(t, TURN_END_ERROR, "prompt too long for the model's context");
		else
			turn_finish(t, TURN_END_ERROR, err ? err->message : sb_strerror(rc));
		return;
	}
	t->model_calls++;
	t->usage.input_tokens += resp->usage.input_tokens;
	t->usage.output_tokens += resp->usage.output_tokens;
	t->usage.cache_read_tokens += resp->usage.cache_read_tokens;
	t->usage.cache_write_tokens += resp->usage.cache_write_tokens;
	msg = json_deep_copy(resp->message);
	n_tools = msg_tool_use_count(msg);
	/* The streamed text is what the user saw; a provider that did not
	 * stream gives it only in the message (this call's part: after a
	 * continuation the text already holds the first part). */
	if (t->text.len == t->text_mark) {
		char *text = msg_text(msg);

		if (text)
			buf_puts(&t->text, text);
		free(text);
	}
	json_incref(msg);
	if (turn_add_message(t, msg, &resp->usage, resp->model) != SB_OK) {
		json_decref(msg);
		turn_finish(t, TURN_END_ERROR, "out of memory");
		return;
	}
	if (n_tools > 0 && t->grace) {
		turn_add_message(t,
		                 turn_fill_results(msg, "not run: the iteration budget is spent"),
		                 NULL, NULL);
		json_decref(msg);
		turn_finish(t, TURN_END_BUDGET_EXHAUSTED, "the iteration budget is spent");
		return;
	}
	if (n_tools > 0) {
		int erc;

		memset(&eo, 0, sizeof eo);
		eo.ctx = &t->opt.tool_ctx;
		eo.allowed = t->opt.tools;
		eo.n_allowed = t->opt.n_tools;
		eo.ev = &t->exec_ev;
		turn_set_state(t, TURN_RUNNING_TOOLS, "tool_use");
		if (t->finished) { /* aborted from inside the state event */
			json_decref(msg);
			return;
		}
		erc = executor_run(msg, &eo, turn_on_tools_done, t, &t->exec);
		if (erc != SB_OK) {
			turn_add_message(t,
			                 turn_fill_results(msg, "the tools could not be started"),
			                 NULL, NULL);
			json_decref(msg);
			turn_finish(t, TURN_END_ERROR, "the tools could not be started");
			return;
		}
		json_decref(msg);
		return;
	}
	json_decref(msg);
	if (resp->stop == MODEL_STOP_MAX_TOKENS && !t->grace &&
	    t->continuations < TURN_MAX_CONTINUATIONS) {
		t->continuations++;
		turn_add_message(t, msg_user_text_new("Continue exactly where you stopped."), NULL,
		                 NULL);
		turn_call_model(t, "continuation after the output-token limit");
		return;
	}
	if (json_array_size(t->steer) && !t->grace) {
		/* A message steered in during the final answer: the model sees
		 * it in one more call rather than it being dropped. */
		if (t->text.len) {
			if (t->streamed)
				turn_on_delta(t, "\n\n", 2);
			else
				buf_puts(&t->text, "\n\n");
		}
		turn_call_model(t, "steered by a new message");
		return;
	}
	turn_finish(t, t->grace ? TURN_END_BUDGET_EXHAUSTED : TURN_END_TURN,
	            t->grace ? "the iteration budget is spent" : NULL);
}

/* Appends text to the last message when it is a user message (so the history
 * keeps alternating), else adds a new user message. */
static void turn_add_user_note(struct turn *t, const char *text)
{
	json_t *last = json_array_get(t->history, json_array_size(t->history) - 1);

	if (last && strcmp(turn_str(json_object_get(last, "role")), "user") == 0) {
		json_t *copy = json_deep_copy(last);
		size_t n_added = json_array_size(t->added);

		/* Edit a copy, and put it wherever the message stands, so that
		 * what was recorded earlier is not changed behind its back. */
		msg_add_text(copy, text);
		if (n_added && json_array_get(t->added, n_added - 1) == last)
			json_array_set(t->added, n_added - 1, copy);
		json_array_set(t->history, json_array_size(t->history) - 1, copy);
		turn_record(t, "event", json_pack("{ssss}", "event", "note", "text", text));
		json_decref(copy);
		return;
	}
	turn_add_message(t, msg_user_text_new(text), NULL, NULL);
}

static void turn_call_model(struct turn *t, const char *reason)
{
	struct model_request req;
	struct model_stream_events ev = {.ud = t, .text_delta = turn_on_delta};
	struct models_observer obs = {.ud = t, .event = turn_on_models_event};
	size_t i;
	json_t *s;
	int rc;

	if (t->finished)
		return;
	if (t->model_calls >= t->opt.max_turns) {
		turn_finish(t, TURN_END_MAX_TURNS, "the run reached max_turns");
		return;
	}
	if (t->opt.budget && !turn_budget_consume(t->opt.budget)) {
		if (t->opt.budget->grace_used) {
			turn_finish(t, TURN_END_BUDGET_EXHAUSTED, "the iteration budget is spent");
			return;
		}
		t->opt.budget->grace_used = true;
		t->grace = true;
		turn_add_user_note(t, "[The iteration budget is spent. Do not call tools; reply "
		                      "now with your final answer.]");
		reason = "grace call after the budget was spent";
	}
	json_array_foreach(t->steer, i, s) turn_add_user_note(t, json_string_value(s));
	if (json_array_size(t->steer)) {
		json_array_clear(t->steer);
		reason = "steered by a new message";
	}
	memset(&req, 0, sizeof req);
	req.system = t->opt.system;
	req.messages = t->history;
	req.tools = json_array_size(t->tools_json) ? t->tools_json : NULL;
	/* 0: the provider's own max_tokens (its configuration's). */
	req.max_tokens = t->opt.max_tokens > 0 ? t->opt.max_tokens : 0;
	req.stream = true;
	turn_record_pending(t);
	turn_set_state(t, TURN_CALLING_MODEL, reason);
	if (t->finished) /* aborted from inside the state event */
		return;
	t->text_mark = t->text.len;
	rc = models_call(t->opt.models, t->opt.chain, t->opt.n_chain, &req, &ev, &obs,
	                 turn_on_model_done, t, &t->call);
	if (rc != SB_OK) {
		t->call = NULL;
		turn_finish(t, TURN_END_ERROR, "no model could be called");
	}
}

static void turn_first_step(uv_timer_t *timer)
{
	struct turn *t = timer->data;

	turn_call_model(t, "new message");
}

/* ---- public ---- */

int turn_start(struct turn **out, const struct turn_options *opt, turn_done_cb done, void *ud)
{
	struct turn *t;
	int rc = SB_ERR_NOMEM;

	if (out)
		*out = NULL;
	if (!opt->models || !opt->chain || !opt->n_chain || !done || !opt->tool_ctx.loop)
		return SB_ERR_INVAL;
	t = calloc(1, sizeof *t);
	if (!t)
		return SB_ERR_NOMEM;
	t->opt = *opt;
	if (t->opt.max_turns <= 0)
		t->opt.max_turns = 25;
	t->done = done;
	t->ud = ud;
	t->exec_ev.ud = t;
	t->exec_ev.tool_start = turn_on_tool_start;
	t->exec_ev.tool_end = turn_on_tool_end;
	buf_init(&t->text, TURN_TEXT_MAX);
	t->history = opt->history ? json_deep_copy(opt->history) : json_array();
	t->added = json_array();
	t->steer = json_array();
	t->tools_json = opt->n_tools || !opt->tools ? tool_list_json_new(opt->tools, opt->n_tools)
	                                            : json_array();
	if (!t->history || !t->added || !t->steer || !t->tools_json)
		goto fail;
	uv_timer_init(opt->tool_ctx.loop, &t->timer);
	t->timer.data = t;
	if (opt->user_text &&
	    turn_add_message(t, msg_user_text_new(opt->user_text), NULL, NULL) != SB_OK) {
		uv_close((uv_handle_t *)&t->timer, turn_free_cb);
		return SB_ERR_NOMEM;
	}
	uv_timer_start(&t->timer, turn_first_step, 0, 0);
	if (out)
		*out = t;
	return SB_OK;
fail:
	json_decref(t->history);
	json_decref(t->added);
	json_decref(t->steer);
	json_decref(t->tools_json);
	buf_free(&t->text);
	free(t);
	return rc;
}

void turn_abort(struct turn *t, const char *why)
{
	if (!t || t->finished)
		return;
	if (!t->detail)
		t->detail = strdup(why ? why : "aborted");
	if (t->call) {
		models_cancel(t->call); /* turn_on_model_done finishes the run */
		return;
	}
	if (t->exec) {
		executor_abort(t->exec, t->detail); /* turn_on_tools_done finishes it */
		return;
	}
	turn_finish(t, TURN_END_ABORTED, t->detail);
}

int turn_steer(struct turn *t, const char *text)
{
	if (!t || t->finished)
		return SB_ERR_CLOSED;
	return json_array_append_new(t->steer, json_string(text)) ? SB_ERR_NOMEM : SB_OK;
}

enum turn_state turn_state_of(const struct turn *t)
{
	return t->state;
}
