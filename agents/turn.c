/*
 * turn.c - one agent run as a state machine on the loop thread. See turn.h.
 *
 * The run advances only from completion callbacks (model call done, tools
 * done, a zero-delay timer for the first step), so one thread carries any
 * number of runs. Every transition goes through turn_set_state with a reason,
 * which is also written to the transcript.
 */
#include "agents/turn.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agents/context/budget.h"
#include "agents/context/compact.h"
#include "agents/executor.h"
#include "agents/message.h"
#include "agents/context/tokens.h"
#include "agents/transcript.h"
#include "gateway/core/clock.h"
#include "gateway/core/buf.h"
#include "gateway/core/crash.h"
#include "gateway/core/err.h"
#include "gateway/core/jsonw.h"
#include "gateway/core/log.h"

#define TURN_MAX_CONTINUATIONS 3
/* The notes of the last call at a limit: the model may not call tools and
 * says where it got to. */
#define TURN_WRAP_UP                                                                               \
	"Do not call tools. Reply now to the user: say what you did, where you got to, and what "  \
	"is left to do."
#define TURN_NOTE_BUDGET "[The iteration budget is spent. " TURN_WRAP_UP "]"
#define TURN_NOTE_MAX_TURNS "[The run reached its limit of %lld model calls. " TURN_WRAP_UP "]"
#define TURN_DATE_PREFIX "[Today is "
#define TURN_RANDOM_ID_HEX 8
#define TURN_TEXT_MAX (16u << 20)
#define TURN_TOOLS_MAX 256 /* the built-in tools and MCP_AGENT_TOOLS_MAX */
#define TURN_REASON_MAX 1024
#define TURN_MODEL_MAX 512

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

static const char *const turn_cache_break_names[] = {"system_prompt_changed", "tools_changed",
                                                     "compaction", "history_changed"};

const char *turn_cache_break_name(enum turn_cache_break r)
{
	return (unsigned)r < TURN_CACHE_BREAK_COUNT ? turn_cache_break_names[r] : "unknown";
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
	struct executor *early; /* tools started while the answer streams */
	json_t *refused;        /* tool_use id -> error result, for the current answer */
	json_t *id_map;         /* the provider's id -> the session's, for the current call */
	uv_timer_t timer;       /* defers the first step out of turn_start */
	int model_calls;
	int tool_calls;
	char model[TURN_MODEL_MAX]; /* the model that gave the last answer */
	int continuations;
	bool grace; /* the current call is the last one at a limit (no tools) */
	enum turn_end grace_end;
	const char *grace_detail;
	int refunds;
	int bad_calls;
	bool finished;
	bool user_pending; /* the last message (a user one) is not recorded yet */
	/* The inbox entry whose text the pending user message is (0: none):
	 * its entry carries "inbox_id", so a redelivery finds it. */
	int64_t pending_inbox;
	bool streamed;     /* text deltas came (the provider streams) */
	struct model_usage usage;
	struct buf text;  /* the answer's text so far (after the last tool round) */
	size_t text_mark; /* text.len when the current model call started */
	char *detail;
	struct executor_events exec_ev;

	/* output budgets */
	const struct tool_def *tools_tab[TURN_TOOLS_MAX];
	size_t n_tools_tab;
	const char **allowed_tab; /* opt.tools and the extra tools' names */
	size_t n_allowed_tab;
	struct tool_def read_def; /* read, able to read the result store */
	struct budget_plan bplan;
	json_t *pending_results; /* tool results waiting for their files */

	/* context levels */
	struct compact_limits limits;
	struct tokens_ledger ledger;
	size_t sent_n; /* messages in the last request */
	char send_reason[TURN_REASON_MAX];
	bool reactive_used; /* level 4 for the current step */
	bool cp_forced;
	bool cp_summary_failed;
	bool cp_changed; /* a compaction changed the history since the last send */
	int64_t cp_before;
	struct compact_plan plans[2];
	struct models_call *sum_call;
	json_t *sum_msgs; /* the summary request's messages, held for the call */
	size_t sum_cut;
	int compact_failures;
	struct model_usage session_spent;
	char *handoff;         /* the summary a full session hands off with */
	struct tool_plan plan; /* the session's todo list (tool_ctx.plan) */
	bool plan_reinject;    /* a compaction removed messages: show the list again */

	/* blocking writes on the thread pool, one at a time */
	uv_work_t io;
	bool io_busy;
	bool free_after_io;
	int io_rc;
	void (*io_after)(struct turn *t, int rc);

	/* the prompt cache: the previous request's prefix */
	bool have_prev;
	uint64_t prev_system, prev_tools, prev_prefix;
	size_t prev_n;
	uint64_t tools_hash;
	int64_t tools_tokens; /* tokens_estimate_json(tools_json), when tools_cached */
	bool tools_cached;    /* tools_json, tools_hash and tools_tokens from opt.tools_cache */
	size_t tools_chars;   /* tools_json's compact JSON length (model_request) */
	size_t history_chars; /* the history's, as of the last turn_check_prefix */
	int64_t session_breaks;

	struct turn_result counts; /* the context fields of the result */

	/* the silent memory turn before compaction */
	bool mf_done;          /* ran in this compaction cycle */
	bool abort_asked;      /* turn_abort was called */
	struct turn *mf_child; /* the nested run, while it runs */
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

static void turn_usage_add(struct model_usage *to, const struct model_usage *u)
{
	to->input_tokens += u->input_tokens;
	to->output_tokens += u->output_tokens;
	to->cache_read_tokens += u->cache_read_tokens;
	to->cache_write_tokens += u->cache_write_tokens;
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
	const json_t *msg;
	json_t *fields;

	if (!t->user_pending)
		return;
	t->user_pending = false;
	msg = json_array_get(t->added, json_array_size(t->added) - 1);
	fields = json_pack("{sO}", "message", msg);
	if (fields && t->pending_inbox > 0)
		json_object_set_new(fields, "inbox_id", json_integer(t->pending_inbox));
	t->pending_inbox = 0;
	turn_record(t, "message", fields);
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
	free(t->allowed_tab);
	json_decref(t->steer);
	json_decref(t->refused);
	json_decref(t->id_map);
	json_decref(t->pending_results);
	json_decref(t->sum_msgs);
	budget_plan_free(&t->bplan);
	compact_plan_free(&t->plans[0]);
	compact_plan_free(&t->plans[1]);
	tokens_ledger_free(&t->ledger);
	buf_free(&t->text);
	free(t->detail);
	free(t->handoff);
	json_decref(t->plan.items);
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
	executor_cancel(t->early); /* read-only tools of an answer never used */
	t->early = NULL;
	if (detail && !t->detail)
		t->detail = strdup(detail);
	/* Results whose files are still being written: their previews go in
	 * (the write completes all the same). */
	if (t->pending_results) {
		json_t *res = t->pending_results;

		t->pending_results = NULL;
		budget_apply(res, &t->bplan, true);
		turn_add_message(t, res, NULL, NULL);
	}
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
	r.model = t->model;
	memcpy(r.compactions, t->counts.compactions, sizeof r.compactions);
	memcpy(r.cache_breaks, t->counts.cache_breaks, sizeof r.cache_breaks);
	r.compaction_failures = t->counts.compaction_failures;
	r.reactive_retries = t->counts.reactive_retries;
	r.results_persisted = t->counts.results_persisted;
	r.context_tokens = t->counts.context_tokens;
	r.context_before = t->counts.context_before;
	r.budget_refunds = t->refunds;
	r.handoff = t->handoff != NULL;
	r.handoff_summary = t->handoff;
	r.todo = t->plan.items;
	r.unsent = t->steer;
	r.bad_calls = t->bad_calls;
	r.final_call = t->grace;
	r.session_usage = t->session_spent;
	turn_usage_add(&r.session_usage, &t->usage);
	t->done(t->ud, &r);
	if (t->io_busy)
		t->free_after_io = true; /* closed when the write is over */
	else
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

/* ---- tool-call ids ---- */

/* Whether id names a tool_use of the history, or one this call already
 * gave out. */
static bool turn_id_used(const struct turn *t, const char *id)
{
	const json_t *m, *b, *v;
	const char *k;
	size_t i, j;

	json_object_foreach((json_t *)t->id_map, k, v)
	{
		if (strcmp(json_string_value(v), id) == 0)
			return true;
	}
	json_array_foreach(t->history, i, m)
	{
		json_array_foreach(json_object_get(m, "content"), j, b)
		{
			if (strcmp(turn_str(json_object_get(b, "type")), "tool_use") == 0 &&
			    strcmp(turn_str(json_object_get(b, "id")), id) == 0)
				return true;
		}
	}
	return false;
}

/* The session's id for the provider's id of a tool call in the current
 * answer: the same unless the session used it already (a server that
 * numbers calls per answer, or repeats one id), then with a random suffix.
 * Saved results are named after ids, so they must be unique in a session.
 * Borrowed from t->id_map; NULL when out of memory. */
static const char *turn_session_id_as(struct turn *t, const char *id, const char *key,
                                      bool fresh_only)
{
	const char *have = json_string_value(json_object_get(t->id_map, key));
	char fresh[256];

	if (have)
		return have;
	snprintf(fresh, sizeof fresh, "%.200s", id);
	if (fresh_only || turn_id_used(t, fresh)) {
		do {
			unsigned char r[TURN_RANDOM_ID_HEX / 2];
			char hex[TURN_RANDOM_ID_HEX + 1];

			randombytes_buf(r, sizeof r);
			for (size_t i = 0; i < sizeof r; i++)
				snprintf(hex + 2 * i, 3, "%02x", r[i]);
			snprintf(fresh, sizeof fresh, "%.200s_%s", id, hex);
		} while (turn_id_used(t, fresh));
	}
	if (json_object_set_new(t->id_map, key, json_string(fresh)))
		return NULL;
	return json_string_value(json_object_get(t->id_map, key));
}

static const char *turn_session_id(struct turn *t, const char *id)
{
	return turn_session_id_as(t, id, id, false);
}

/* A copy of a tool_use block with the session's id. */
static json_t *turn_block_with_id(struct turn *t, const json_t *block)
{
	const char *id = turn_session_id(t, turn_str(json_object_get(block, "id")));
	json_t *copy = id ? json_deep_copy(block) : NULL;

	if (copy && json_object_set_new(copy, "id", json_string(id))) {
		json_decref(copy);
		copy = NULL;
	}
	return copy;
}

/* Gives every tool_use of msg (a copy the turn owns) the session's id; a
 * provider id that stands twice in the answer gets a fresh id the second
 * time (kept in the map under "<id>#<k>" so that it counts as used). */
static int turn_map_ids(struct turn *t, json_t *msg)
{
	json_t *b, *seen = json_object();
	size_t i;
	int rc = SB_ERR_NOMEM;

	if (!seen)
		return rc;
	json_array_foreach(json_object_get(msg, "content"), i, b)
	{
		const char *pid = turn_str(json_object_get(b, "id")), *id;
		char key[300];

		if (strcmp(turn_str(json_object_get(b, "type")), "tool_use") != 0)
			continue;
		id = turn_session_id(t, pid);
		if (id && json_object_get(seen, id)) {
			snprintf(key, sizeof key, "%.200s#%zu", pid, i);
			id = turn_session_id_as(t, pid, key, true);
		}
		if (!id || json_object_set_new(seen, id, json_true()) ||
		    json_object_set_new(b, "id", json_string(id)))
			goto out;
	}
	rc = SB_OK;
out:
	json_decref(seen);
	return rc;
}

/* The error result of a call the model broke (model_bad_call). */
static void turn_refuse_bad(struct turn *t, const struct model_bad_call *bc)
{
	char text[1024];
	const char *id = turn_session_id(t, bc->id ? bc->id : "");

	if (!id)
		return;
	if (bc->cut)
		snprintf(text, sizeof text,
		         "not run: this call to %s was cut off by the output-token limit after "
		         "%zu bytes of input, so its input is incomplete; nothing was done. Send "
		         "smaller calls instead: for a long file, write its first part with "
		         "write, then add each further part with write and \"append\": true, a "
		         "few thousand characters per call.",
		         bc->name ? bc->name : "a tool", bc->input_bytes);
	else
		snprintf(text, sizeof text,
		         "not run: the input of this call to %s is not a valid JSON object "
		         "(%.200s); nothing was done. Send the call again with a JSON object as "
		         "its input.",
		         bc->name ? bc->name : "a tool", bc->why ? bc->why : "not valid JSON");
	json_object_set_new(t->refused, id, json_string(text));
	t->bad_calls++;
}

/* ---- the model step ---- */

static void turn_call_model(struct turn *t, const char *reason);
static void turn_context_step(struct turn *t, bool forced, const char *why);
static void turn_maybe_refund(struct turn *t, const json_t *assistant);
static void turn_context_full(struct turn *t, int64_t tokens, const char *cause);
static void turn_plan_reinject(struct turn *t);

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
	/* Tools started from a failed attempt's answer are dropped (they
	 * only read), and so are its ids. */
	executor_cancel(t->early);
	t->early = NULL;
	json_object_clear(t->id_map);
	/* Text streamed by a failed attempt is not part of the answer (what
	 * came before this call, a continuation's first part, stays). */
	if (t->text.data) {
		t->text.len = t->text_mark;
		t->text.data[t->text.len] = '\0';
	}
	turn_set_state(t, TURN_CALLING_MODEL, reason);
}

/* ---- blocking writes ---- */

struct turn_io_set {
	const char *dir;
	struct budget_file *files;
	size_t n;
};

static void turn_io_work(uv_work_t *w)
{
	struct turn *t = w->data;
	struct turn_io_set sets[3];
	size_t n = 0, i;
	int rc = SB_OK, r;

	/* What to write is fixed before the work starts; the loop does not
	 * touch it until turn_io_done. */
	if (t->bplan.n) {
		/* budget_plan keeps files inside items: write them one by one. */
		for (i = 0; i < t->bplan.n; i++) {
			r = budget_write(t->opt.tool_ctx.results_dir, &t->bplan.items[i].file, 1);
			if (r && !rc)
				rc = r;
		}
	}
	for (i = 0; i < 2; i++)
		if (t->plans[i].n_files)
			sets[n++] = (struct turn_io_set){t->plans[i].files_dir, t->plans[i].files,
			                                 t->plans[i].n_files};
	for (i = 0; i < n; i++) {
		r = budget_write(sets[i].dir, sets[i].files, sets[i].n);
		if (r && !rc)
			rc = r;
	}
	t->io_rc = rc;
}

static void turn_io_done(uv_work_t *w, int status)
{
	struct turn *t = w->data;

	t->io_busy = false;
	if (status != 0 && t->io_rc == SB_OK)
		t->io_rc = SB_ERR_ABORTED;
	if (t->finished) {
		if (t->free_after_io)
			uv_close((uv_handle_t *)&t->timer, turn_free_cb);
		return;
	}
	t->io_after(t, t->io_rc);
}

static int turn_io_start(struct turn *t, void (*after)(struct turn *t, int rc))
{
	t->io.data = t;
	t->io_after = after;
	t->io_rc = SB_OK;
	if (uv_queue_work(t->opt.tool_ctx.loop, &t->io, turn_io_work, turn_io_done) != 0)
		return SB_ERR_IO;
	t->io_busy = true;
	return SB_OK;
}

/* ---- tool results into the context ---- */

static void turn_results_ready(struct turn *t, json_t *results)
{
	turn_add_message(t, results, NULL, NULL);
	buf_reset(&t->text);
	turn_call_model(t, "tool results");
}

static void turn_budget_written(struct turn *t, int rc)
{
	json_t *res = t->pending_results;

	t->pending_results = NULL;
	if (rc != SB_OK)
		log_warn("agent", "cannot save a large tool result; it stays cut in the context",
		         LOG_S("session", t->opt.tool_ctx.session_key),
		         LOG_S("error", sb_strerror(rc)));
	for (size_t i = 0; i < t->bplan.n; i++) {
		const struct budget_item *it = &t->bplan.items[i];

		if (it->file.rc != SB_OK && it->file.rc != SB_ERR_EXISTS)
			continue;
		t->counts.results_persisted++;
		turn_record(
		    t, "event",
		    json_pack("{sssssssIsb}", "event", "tool_result_saved", "tool_use_id",
		              json_string_value(json_object_get(
		                  json_array_get(json_object_get(res, "content"), it->block),
		                  "tool_use_id")),
		              "where", it->name, "chars", (json_int_t)it->size, "existed",
		              it->file.rc == SB_ERR_EXISTS));
	}
	if (budget_apply(res, &t->bplan, false) != SB_OK) {
		json_decref(res);
		turn_finish(t, TURN_END_ERROR, "out of memory");
		return;
	}
	budget_plan_free(&t->bplan);
	turn_results_ready(t, res);
}

/* Cuts a result that could not be saved to the tool's maximum. */
static void turn_budget_cut(json_t *results, const struct budget_plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		json_t *b = json_array_get(json_object_get(results, "content"), p->items[i].block);
		char *pv = budget_preview(p->items[i].file.data, p->items[i].file.len,
		                          "(nowhere: the result store is not available)");

		if (pv)
			json_object_set_new(b, "content", json_string(pv));
		free(pv);
	}
}

static void turn_on_tools_done(void *ud, int rc, json_t *results)
{
	struct turn *t = ud;
	size_t n = json_array_size(json_object_get(results, "content"));
	const json_t *assistant;
	int prc;

	t->exec = NULL;
	t->tool_calls += (int)n;
	if (!results) {
		turn_finish(t, TURN_END_ERROR, "out of memory"); /* fills the results */
		return;
	}
	if (rc == SB_ERR_ABORTED || t->finished) {
		turn_add_message(t, results, NULL, NULL);
		turn_finish(t, TURN_END_ABORTED, t->detail ? t->detail : "aborted");
		return;
	}
	/* The output budget: results over their tool's maximum, then the
	 * largest while the batch is over its own, go to the result store. */
	assistant = json_array_get(t->history, json_array_size(t->history) - 1);
	turn_maybe_refund(t, assistant);
	prc = budget_plan(results, assistant, t->n_tools_tab ? t->tools_tab : NULL, t->n_tools_tab,
	                  t->opt.tool_ctx.results_dir, &t->opt.context.budget, &t->bplan);
	if (prc != SB_OK || t->bplan.n == 0) {
		budget_plan_free(&t->bplan);
		turn_results_ready(t, results);
		return;
	}
	t->pending_results = results;
	if (turn_io_start(t, turn_budget_written) != SB_OK) {
		t->pending_results = NULL;
		turn_budget_cut(results, &t->bplan);
		budget_plan_free(&t->bplan);
		turn_results_ready(t, results);
	}
}

/* The executor's options for this run's tools. */
static void turn_exec_options(struct turn *t, struct executor_options *eo)
{
	memset(eo, 0, sizeof *eo);
	eo->ctx = &t->opt.tool_ctx;
	eo->allowed = t->allowed_tab ? t->allowed_tab : t->opt.tools;
	eo->n_allowed = t->allowed_tab ? t->n_allowed_tab : t->opt.n_tools;
	eo->ev = &t->exec_ev;
	eo->refused = t->refused;
	if (t->opt.n_extra_tools) {
		eo->tools = t->tools_tab;
		eo->n_tools = t->n_tools_tab;
	}
	if (t->opt.tool_ctx.results_dir) {
		/* Whole results to the budget (budget.h); read reads the
		 * result store too. */
		eo->tools = t->tools_tab;
		eo->n_tools = t->n_tools_tab;
		eo->finalise = budget_finalise;
		eo->finalise_ud = &t->opt.context.budget;
	}
}

/* A tool call is complete while the answer streams: read-only calls start
 * now (executor_stream_add decides which may). */
static void turn_on_tool_ready(void *ud, const json_t *block)
{
	struct turn *t = ud;
	struct executor_options eo;
	json_t *b;

	if (t->finished || t->grace || !json_array_size(t->tools_json))
		return;
	b = turn_block_with_id(t, block);
	if (!b)
		return;
	if (!t->early) {
		turn_exec_options(t, &eo);
		if (executor_stream_new(&eo, turn_on_tools_done, t, &t->early) != SB_OK)
			t->early = NULL;
	}
	if (t->early && executor_stream_add(t->early, b) != SB_OK) {
		executor_cancel(t->early); /* the answer's tools run when it ends */
		t->early = NULL;
	}
	json_decref(b);
}

/* The round's calls all ran code (tool_def.runs_code): the iteration was
 * work, not thinking, and goes back to the budget. */
static void turn_maybe_refund(struct turn *t, const json_t *assistant)
{
	const json_t *b;
	size_t i, n = 0;

	if (!t->opt.budget)
		return;
	json_array_foreach(json_object_get(assistant, "content"), i, b)
	{
		const struct tool_def *def = NULL;
		const char *name = turn_str(json_object_get(b, "name"));

		if (strcmp(turn_str(json_object_get(b, "type")), "tool_use") != 0)
			continue;
		for (size_t k = 0; k < t->n_tools_tab; k++)
			if (strcmp(t->tools_tab[k]->name, name) == 0)
				def = t->tools_tab[k];
		if (!def || !def->runs_code ||
		    json_object_get(t->refused, turn_str(json_object_get(b, "id"))))
			return;
		n++;
	}
	if (n == 0)
		return;
	turn_budget_refund(t->opt.budget, 1);
	t->refunds++;
	turn_record(t, "event",
	            json_pack("{sssiss}", "event", "budget_refund", "units", 1, "why",
	                      "the round only ran code"));
}

static void turn_on_model_done(void *ud, int rc, const struct model_response *resp,
                               const struct model_error *err)
{
	struct turn *t = ud;
	struct executor_options eo;
	struct executor *early = t->early;
	json_t *msg;
	size_t n_tools;

	t->call = NULL;
	t->early = NULL;
	if (rc != SB_OK || !resp) {
		executor_cancel(early);
		if (err && err->kind == MODEL_ERR_ABORTED) {
			turn_finish(t, TURN_END_ABORTED, t->detail ? t->detail : "aborted");
		} else if (err && err->kind == MODEL_ERR_PROMPT_TOO_LONG && t->opt.no_compaction) {
			turn_finish(t, TURN_END_ERROR, err->message);
		} else if (err && err->kind == MODEL_ERR_PROMPT_TOO_LONG && !t->reactive_used) {
			/* Level 4: compact once, whatever the thresholds, and
			 * send the same step again once. */
			t->reactive_used = true;
			t->counts.reactive_retries++;
			snprintf(
			    t->send_reason, sizeof t->send_reason,
			    "retry after compaction (the provider said the prompt is too long)");
			turn_context_step(t, true, err->message);
		} else if (err && err->kind == MODEL_ERR_PROMPT_TOO_LONG) {
			char cause[600];

			snprintf(
			    cause, sizeof cause,
			    "the prompt is too long for the model even after compaction (%.400s)",
			    err->message);
			tokens_ledger_sync(&t->ledger, t->history);
			turn_context_full(t, tokens_ledger_total(&t->ledger), cause);
		} else {
			turn_finish(t, TURN_END_ERROR, err ? err->message : sb_strerror(rc));
		}
		return;
	}
	t->model_calls++;
	/* After a fallback this is not the agent's first model. */
	snprintf(t->model, sizeof t->model, "%s", resp->model ? resp->model : "");
	t->reactive_used = false;
	turn_usage_add(&t->usage, &resp->usage);
	/* The provider's count of the prompt wins over the estimate. */
	tokens_ledger_report(&t->ledger, t->sent_n,
	                     resp->usage.input_tokens + resp->usage.cache_read_tokens +
	                         resp->usage.cache_write_tokens,
	                     resp->usage.output_tokens);
	msg = json_deep_copy(resp->message);
	/* Ids unique in the session; broken calls answered, never run. */
	if (!msg || turn_map_ids(t, msg) != SB_OK) {
		json_decref(msg);
		executor_cancel(early);
		turn_finish(t, TURN_END_ERROR, "out of memory");
		return;
	}
	for (size_t i = 0; i < resp->n_bad_calls; i++)
		turn_refuse_bad(t, &resp->bad_calls[i]);
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
		executor_cancel(early);
		turn_finish(t, TURN_END_ERROR, "out of memory");
		return;
	}
	if (n_tools > 0 && t->grace) {
		char why[600];

		executor_cancel(early);
		snprintf(why, sizeof why, "not run: %s", t->grace_detail);
		turn_add_message(t, turn_fill_results(msg, why), NULL, NULL);
		json_decref(msg);
		turn_finish(t, t->grace_end, t->grace_detail);
		return;
	}
	if (n_tools > 0) {
		int erc = SB_ERR_INVAL;

		turn_exec_options(t, &eo);
		turn_set_state(t, TURN_RUNNING_TOOLS, "tool_use");
		if (t->finished) { /* aborted from inside the state event */
			executor_cancel(early);
			json_decref(msg);
			return;
		}
		if (early) {
			/* Some calls started while the answer streamed. */
			erc = executor_stream_end(early, msg);
			if (erc == SB_OK)
				t->exec = early;
			else
				executor_cancel(early);
		}
		if (erc != SB_OK)
			erc = executor_run(msg, &eo, turn_on_tools_done, t, &t->exec);
		if (erc != SB_OK) {
			t->exec = NULL;
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
	executor_cancel(early);
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
	turn_finish(t, t->grace ? t->grace_end : TURN_END_TURN, t->grace ? t->grace_detail : NULL);
}

/* Appends text to the last message when it is a user message (so the history
 * keeps alternating), else adds a new user message. inbox_id (0: none) is
 * the inbox entry the text came from, recorded with it. */
static void turn_add_user_note_from(struct turn *t, const char *text, int64_t inbox_id)
{
	json_t *last = json_array_get(t->history, json_array_size(t->history) - 1);

	if (last && strcmp(turn_str(json_object_get(last, "role")), "user") == 0) {
		json_t *copy = json_deep_copy(last), *ev;
		size_t n_added = json_array_size(t->added);
		bool recorded =
		    !(t->user_pending && n_added && json_array_get(t->added, n_added - 1) == last);

		/* Edit a copy, and put it wherever the message stands, so that
		 * what was recorded earlier is not changed behind its back. */
		msg_add_text(copy, text);
		if (n_added && json_array_get(t->added, n_added - 1) == last)
			json_array_set(t->added, n_added - 1, copy);
		json_array_set(t->history, json_array_size(t->history) - 1, copy);
		ev = json_pack("{ssss}", "event", "note", "text", text);
		if (ev && inbox_id > 0)
			json_object_set_new(ev, "inbox_id", json_integer(inbox_id));
		/* A message recorded before (the last one of a resumed run's
		 * history) is not recorded again: the note carries its edit, which
		 * loading applies, so the reloaded history has the text too. */
		if (ev && recorded)
			json_object_set_new(ev, "edit",
			                    json_pack("{sssIss}", "op", "add_text", "message",
			                              (json_int_t)json_array_size(t->history) - 1,
			                              "text", text));
		turn_record(t, "event", ev);
		json_decref(copy);
		return;
	}
	if (turn_add_message(t, msg_user_text_new(text), NULL, NULL) == SB_OK)
		t->pending_inbox = inbox_id;
}

static void turn_add_user_note(struct turn *t, const char *text)
{
	turn_add_user_note_from(t, text, 0);
}

/* Adds the steered texts ({"text", "inbox_id"}) and forgets them. */
static void turn_add_steered(struct turn *t)
{
	size_t i;
	json_t *s;

	json_array_foreach(t->steer, i, s)
	turn_add_user_note_from(t, json_string_value(json_object_get(s, "text")),
	                        json_integer_value(json_object_get(s, "inbox_id")));
	json_array_clear(t->steer);
}

/* The last call at a limit: no tools, and a note asking the model to say
 * where it got to; its answer ends the run with the limit's reason. */
static void turn_wrap_up(struct turn *t, enum turn_end end, const char *detail, const char *note,
                         const char *reason)
{

	t->grace = true;
	t->grace_end = end;
	t->grace_detail = detail;
	turn_add_user_note(t, note);
	turn_add_steered(t);
	snprintf(t->send_reason, sizeof t->send_reason, "%s", reason);
	turn_context_step(t, false, NULL);
}

static void turn_call_model(struct turn *t, const char *reason)
{

	if (t->finished)
		return;
	if (t->grace) {
		/* The wrap-up was made: nothing more to call. */
		turn_finish(t, t->grace_end, t->grace_detail);
		return;
	}
	if (t->model_calls >= t->opt.max_turns) {
		char note[512];

		snprintf(note, sizeof note, TURN_NOTE_MAX_TURNS, (long long)t->opt.max_turns);
		turn_wrap_up(t, TURN_END_MAX_TURNS, "the run reached max_turns", note,
		             "last call after the step limit");
		return;
	}
	if (t->opt.budget && !turn_budget_consume(t->opt.budget)) {
		if (t->opt.budget->grace_used) {
			turn_finish(t, TURN_END_BUDGET_EXHAUSTED, "the iteration budget is spent");
			return;
		}
		t->opt.budget->grace_used = true;
		turn_wrap_up(t, TURN_END_BUDGET_EXHAUSTED, "the iteration budget is spent",
		             TURN_NOTE_BUDGET, "grace call after the budget was spent");
		return;
	}
	if (json_array_size(t->steer)) {
		turn_add_steered(t);
		reason = "steered by a new message";
	}
	snprintf(t->send_reason, sizeof t->send_reason, "%s", reason);
	turn_context_step(t, false, NULL);
}

/* ---- the prompt cache ---- */

#define TURN_FNV_OFFSET 1469598103934665603ull
#define TURN_FNV_PRIME 1099511628211ull

static uint64_t turn_fnv(uint64_t h, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)p[i];
		h *= TURN_FNV_PRIME;
	}
	return h;
}

struct turn_fnv_acc {
	uint64_t h;
	size_t len;
};

static int turn_fnv_cb(const char *buffer, size_t size, void *data)
{
	struct turn_fnv_acc *acc = data;

	acc->h = turn_fnv(acc->h, buffer, size);
	acc->len += size;
	return 0;
}

/* h extended by v's compact JSON and a newline; *len (may be NULL) receives
 * the length of that JSON. Only an object or an array has JSON here (as
 * with json_dumps without JSON_ENCODE_ANY); what cannot be written counts
 * as nothing, as before. */
static uint64_t turn_json_hash_len(uint64_t h, const json_t *v, size_t *len)
{
	struct turn_fnv_acc acc = {.h = h};
	struct buf b;

	buf_init(&b, SIZE_MAX - 1);
	if ((json_is_object(v) || json_is_array(v)) && jsonw_append(&b, v, 0) == SB_OK)
		turn_fnv_cb(b.data, b.len, &acc);
	buf_free(&b);
	if (len)
		*len = acc.len;
	return turn_fnv(acc.h, "\n", 1);
}

/* ---- the tool-list cache ---- */

struct turn_tools_entry {
	uint64_t set;       /* bit i: tool_all()[i] */
	uint64_t extra_key; /* the extra tools' fingerprint; 0: none */
	uint64_t used;      /* the lookup that used it last */
	json_t *json;
	uint64_t hash;
	int64_t tokens;
	size_t chars; /* its compact JSON's length */
};

struct turn_tools_cache {
	struct turn_tools_entry v[TURN_TOOLS_CACHE_MAX];
	size_t n;
	uint64_t clock;
};

int turn_tools_cache_new(struct turn_tools_cache **out)
{
	*out = calloc(1, sizeof **out);
	return *out ? SB_OK : SB_ERR_NOMEM;
}

void turn_tools_cache_free(struct turn_tools_cache *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		json_decref(c->v[i].json);
	free(c);
}

size_t turn_tools_cache_drop(struct turn_tools_cache *c, uint64_t extra_key)
{
	size_t i = 0, dropped = 0;

	if (!c || !extra_key)
		return 0;
	while (i < c->n) {
		if (c->v[i].extra_key != extra_key) {
			i++;
			continue;
		}
		json_decref(c->v[i].json); /* runs that hold it keep their reference */
		c->v[i] = c->v[--c->n];
		dropped++;
	}
	return dropped;
}

/* The set of built-in tools a run with names/n lists, the way turn_start
 * reads them: NULL is all of them, a list of none is none; unknown names
 * fall out (tool_list_json_new). False when the set does not fit a mask. */
static bool turn_tools_set(const char *const *names, size_t n, uint64_t *set)
{
	size_t k, i, j;
	const struct tool_def *const *all = tool_all(&k);

	if (k > 64)
		return false;
	*set = 0;
	for (i = 0; i < k; i++) {
		bool listed = !names;

		for (j = 0; names && j < n && !listed; j++)
			listed = names[j] && strcmp(names[j], all[i]->name) == 0;
		if (listed)
			*set |= (uint64_t)1 << i;
	}
	return true;
}

static json_t *turn_tools_json_new(const char *const *names, size_t n,
                                   const struct tool_def *const *extra, size_t n_extra)
{
	if (!n && names && !n_extra)
		return json_array();
	/* A list of none keeps none of the built-in tools: a name no tool has. */
	if (!n && names) {
		static const char *const none[] = {""};

		return tool_list_json_merge(none, 1, extra, n_extra);
	}
	return tool_list_json_merge(names, n, extra, n_extra);
}

/* turn_tools_cache_get, and the list's compact JSON length into *chars. */
static const json_t *turn_tools_cache_get_chars(struct turn_tools_cache *c,
                                                const char *const *names, size_t n,
                                                const struct tool_def *const *extra, size_t n_extra,
                                                uint64_t extra_key, uint64_t *hash, int64_t *tokens,
                                                size_t *chars)
{
	struct turn_tools_entry *e = NULL;
	uint64_t set;
	size_t i;

	if (!c || !turn_tools_set(names, n, &set) || (n_extra && !extra_key))
		return NULL;
	if (!n_extra)
		extra_key = 0;
	for (i = 0; i < c->n && !e; i++)
		if (c->v[i].set == set && c->v[i].extra_key == extra_key)
			e = &c->v[i];
	if (!e) {
		json_t *json = turn_tools_json_new(names, n, extra, n_extra);

		if (!json)
			return NULL;
		if (c->n == TURN_TOOLS_CACHE_MAX) {
			size_t lru = 0;

			for (i = 1; i < c->n; i++)
				if (c->v[i].used < c->v[lru].used)
					lru = i;
			json_decref(c->v[lru].json);
			c->v[lru] = c->v[--c->n];
		}
		e = &c->v[c->n];
		e->json = json;
		e->set = set;
		e->extra_key = extra_key;
		e->hash = turn_json_hash_len(TURN_FNV_OFFSET, e->json, &e->chars);
		e->tokens = tokens_estimate_json(e->json);
		c->n++;
	}
	e->used = ++c->clock;
	if (hash)
		*hash = e->hash;
	if (tokens)
		*tokens = e->tokens;
	if (chars)
		*chars = e->chars;
	return e->json;
}

const json_t *turn_tools_cache_get(struct turn_tools_cache *c, const char *const *names, size_t n,
                                   uint64_t *hash, int64_t *tokens)
{
	return turn_tools_cache_get_chars(c, names, n, NULL, 0, 0, hash, tokens, NULL);
}

json_t *turn_tools_list(struct turn_tools_cache *c, const char *const *names, size_t n,
                        const struct tool_def *const *extra, size_t n_extra, uint64_t extra_key,
                        int64_t *tokens)
{
	const json_t *cached =
	    turn_tools_cache_get_chars(c, names, n, extra, n_extra, extra_key, NULL, tokens, NULL);
	json_t *own;

	if (cached)
		return json_incref((json_t *)cached);
	own = turn_tools_json_new(names, n, extra, n_extra);
	if (own && tokens)
		*tokens = tokens_estimate_json(own);
	return own;
}

static uint64_t turn_hex_value(const json_t *v)
{
	const char *s = json_string_value(v);

	return s ? strtoull(s, NULL, 16) : 0;
}

/* Compares this request's prefix with the previous one's, records a break
 * with its reason, and records this request's fingerprint. */
static void turn_check_prefix(struct turn *t, int64_t tokens)
{
	size_t n = json_array_size(t->history), i;
	uint64_t sys = turn_fnv(TURN_FNV_OFFSET, t->opt.system ? t->opt.system : "",
	                        t->opt.system ? strlen(t->opt.system) : 0);
	uint64_t h = TURN_FNV_OFFSET, at_prev = TURN_FNV_OFFSET;
	size_t len;
	int why = -1;
	char hs[17], ht[17], hp[17];

	/* The history's compact JSON: "[", the messages between commas, "]". */
	t->history_chars = n ? 1 + n : 2;
	for (i = 0; i < n; i++) {
		if (i == t->prev_n)
			at_prev = h;
		h = turn_json_hash_len(h, json_array_get(t->history, i), &len);
		t->history_chars += len;
	}
	if (t->prev_n == n)
		at_prev = h;
	if (t->have_prev) {
		if (sys != t->prev_system)
			why = TURN_CACHE_SYSTEM;
		else if (t->tools_hash != t->prev_tools)
			why = TURN_CACHE_TOOLS;
		else if (t->cp_changed)
			why = TURN_CACHE_COMPACTION;
		else if (t->prev_n > n || at_prev != t->prev_prefix)
			why = TURN_CACHE_HISTORY;
	}
	if (why >= 0) {
		t->counts.cache_breaks[why]++;
		t->session_breaks++;
		turn_record(t, "event",
		            json_pack("{sssssI}", "event", "cache_break", "reason",
		                      turn_cache_break_name((enum turn_cache_break)why),
		                      "session_breaks", (json_int_t)t->session_breaks));
	}
	snprintf(hs, sizeof hs, "%016llx", (unsigned long long)sys);
	snprintf(ht, sizeof ht, "%016llx", (unsigned long long)t->tools_hash);
	snprintf(hp, sizeof hp, "%016llx", (unsigned long long)h);
	turn_record(t, "event",
	            json_pack("{sssssssssIsIsf}", "event", "prompt", "system", hs, "tools", ht,
	                      "prefix", hp, "messages", (json_int_t)n, "tokens_estimate",
	                      (json_int_t)tokens, "calibration", t->ledger.scale));
	t->have_prev = true;
	t->prev_system = sys;
	t->prev_tools = t->tools_hash;
	t->prev_prefix = h;
	t->prev_n = n;
	t->cp_changed = false;
}

/* Sends the request (after the context step). */
static void turn_send(struct turn *t)
{
	struct model_request req;
	struct model_stream_events ev = {
	    .ud = t, .text_delta = turn_on_delta, .tool_use_done = turn_on_tool_ready};
	struct models_observer obs = {.ud = t, .event = turn_on_models_event};
	int rc;

	if (t->finished)
		return;
	if (t->opt.compact_only) {
		/* The compaction was all that was asked for: its figure is the
		 * context's size from now on (commands_status_read). */
		turn_record_pending(t);
		tokens_ledger_sync(&t->ledger, t->history);
		t->counts.context_tokens = tokens_ledger_total(&t->ledger);
		turn_record(t, "event",
		            json_pack("{sssIsIsIsf}", "event", "compacted", "tokens_before",
		                      (json_int_t)t->counts.context_before, "tokens_estimate",
		                      (json_int_t)t->counts.context_tokens, "messages",
		                      (json_int_t)json_array_size(t->history), "calibration",
		                      t->ledger.scale));
		turn_finish(t, TURN_END_TURN, NULL);
		return;
	}
	memset(&req, 0, sizeof req);
	req.system = t->opt.system;
	req.messages = t->history;
	req.tools = json_array_size(t->tools_json) ? t->tools_json : NULL;
	/* 0: the provider's own max_tokens (its configuration's). */
	req.max_tokens = t->opt.max_tokens > 0 ? t->opt.max_tokens : 0;
	req.stream = true;
	req.no_tools = t->grace && req.tools;
	json_object_clear(t->id_map);
	json_object_clear(t->refused);
	turn_plan_reinject(t);
	req.messages = t->history;
	turn_record_pending(t);
	tokens_ledger_sync(&t->ledger, t->history);
	t->counts.context_tokens = tokens_ledger_total(&t->ledger);
	turn_check_prefix(t, t->counts.context_tokens);
	req.messages_chars = t->history_chars;
	req.tools_chars = req.tools ? t->tools_chars : 0;
	t->sent_n = json_array_size(t->history);
	turn_set_state(t, TURN_CALLING_MODEL, t->send_reason);
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

/* ---- the context levels ---- */

static int64_t turn_estimate_of(const struct turn *t, const json_t *history)
{
	return tokens_ledger_estimate(&t->ledger, history);
}

static int64_t turn_estimate_text(void *ud, const char *s, size_t n)
{
	return tokens_ledger_text(&((struct turn *)ud)->ledger, s, n);
}

static int64_t turn_pct(const struct turn *t, int64_t tokens)
{
	return t->limits.window > 0 ? tokens * 100 / t->limits.window : 0;
}

static void turn_context_after(struct turn *t);
static void turn_summary_step(struct turn *t);

/* Records a compaction that was applied to the history. */
static void turn_record_compaction(struct turn *t, const struct compact_plan *p, int64_t before,
                                   int64_t after, const struct model_usage *usage)
{
	json_t *f = json_deep_copy(p->record);
	char reason[256];

	if (!f)
		return;
	if (t->cp_forced)
		snprintf(reason, sizeof reason, "the provider said the prompt is too long");
	else
		snprintf(reason, sizeof reason, "the context reached %lld%% of the window",
		         (long long)turn_pct(t, before));
	json_object_set_new(f, "reason", json_string(reason));
	json_object_set(f, "edits", p->edits);
	json_object_set_new(f, "tokens_before", json_integer(before));
	json_object_set_new(f, "tokens_after", json_integer(after));
	json_object_set_new(f, "window", json_integer(t->limits.window));
	if (usage)
		json_object_set_new(f, "usage", turn_usage_json(usage));
	{
		/* Budget accounting survives compaction: what the session spent
		 * so far, this run included, is written next to what was cut. */
		struct model_usage spent = t->session_spent;

		turn_usage_add(&spent, &t->usage);
		json_object_set_new(f, "session_usage", turn_usage_json(&spent));
	}
	turn_record(t, "compaction", f);
	t->counts.compactions[p->level - 1]++;
	t->cp_changed = true;
	if (p->level >= 2) {
		t->plan_reinject = true;
		t->mf_done = false; /* a new compaction cycle */
	}
}

/* Levels 1 and 2 are written (or failed): apply them, then level 3. */
static void turn_levels_written(struct turn *t, int rc)
{
	int64_t before = t->cp_before;

	for (int i = 0; i < 2; i++) {
		struct compact_plan *p = &t->plans[i];
		int64_t after;

		if (!p->edits)
			continue;
		if (rc != SB_OK) {
			turn_record(t, "event",
			            json_pack("{sssiss}", "event", "compaction_failed", "level",
			                      p->level, "error", sb_strerror(rc)));
			continue;
		}
		if (compact_apply(t->history, p->edits) != SB_OK) {
			turn_record(t, "event",
			            json_pack("{sssiss}", "event", "compaction_failed", "level",
			                      p->level, "error",
			                      "the edits do not fit the history"));
			continue;
		}
		after = turn_estimate_of(t, t->history);
		turn_record_compaction(t, p, before, after, NULL);
		before = after;
	}
	compact_plan_free(&t->plans[0]);
	compact_plan_free(&t->plans[1]);
	turn_summary_step(t);
}

static void turn_on_summary(void *ud, int rc, const struct model_response *resp,
                            const struct model_error *err)
{
	struct turn *t = ud;
	struct compact_plan p;
	char *text = NULL;
	const char *why = NULL;
	int64_t before;

	t->sum_call = NULL;
	json_decref(t->sum_msgs);
	t->sum_msgs = NULL;
	if (t->finished)
		return;
	if (err && err->kind == MODEL_ERR_ABORTED) {
		turn_finish(t, TURN_END_ABORTED, t->detail ? t->detail : "aborted");
		return;
	}
	memset(&p, 0, sizeof p);
	if (rc == SB_OK && resp) {
		turn_usage_add(&t->usage, &resp->usage);
		text = msg_text(resp->message);
		if (!text || !*text)
			why = "the summary came back empty";
	} else {
		why = err ? err->message : sb_strerror(rc);
	}
	before = tokens_ledger_total(&t->ledger);
	if (!why && (compact_plan_summary(t->history, t->sum_cut, text, &p) != SB_OK ||
	             compact_apply(t->history, p.edits) != SB_OK))
		why = "the summary could not be applied";
	if (why) {
		t->compact_failures++;
		t->counts.compaction_failures++;
		t->cp_summary_failed = true;
		turn_record(t, "event",
		            json_pack("{sssisssi}", "event", "compaction_failed", "level", 3,
		                      "error", why, "consecutive", t->compact_failures));
		log_warn("agent", "context summary failed",
		         LOG_S("session", t->opt.tool_ctx.session_key), LOG_S("error", why));
	} else {
		t->compact_failures = 0;
		t->cp_summary_failed = false;
		turn_record_compaction(t, &p, before, turn_estimate_of(t, t->history),
		                       rc == SB_OK && resp ? &resp->usage : NULL);
	}
	compact_plan_free(&p);
	free(text);
	turn_context_after(t);
}

/* Level 3, when the context is still over its threshold (or forced). */
static void turn_summary_step(struct turn *t)
{
	struct model_request req;
	json_t *msgs = NULL, *msg;
	int64_t tokens;
	int rc;

	if (t->finished)
		return;
	tokens_ledger_sync(&t->ledger, t->history);
	tokens = tokens_ledger_total(&t->ledger);
	t->cp_summary_failed = false;
	if (!t->cp_forced && turn_pct(t, tokens) < t->limits.summarize_at &&
	    turn_pct(t, tokens) < t->limits.block_at) {
		turn_context_after(t);
		return;
	}
	if (t->compact_failures >= COMPACT_BREAKER) {
		turn_context_after(t); /* the breaker is open */
		return;
	}
	t->sum_cut = compact_summary_cut(t->history, t->cp_forced && t->limits.keep_messages > 2
	                                                 ? t->limits.keep_messages / 2
	                                                 : t->limits.keep_messages);
	if (t->sum_cut == 0) {
		turn_context_after(t);
		return;
	}
	/* The request holds at most about 3/4 of the window. */
	msg = compact_summary_request(t->history, t->sum_cut, (size_t)t->limits.window * 3);
	msgs = msg ? json_array() : NULL;
	if (!msgs || json_array_append_new(msgs, msg)) {
		if (!msgs)
			json_decref(msg);
		json_decref(msgs);
		turn_finish(t, TURN_END_ERROR, "out of memory");
		return;
	}
	memset(&req, 0, sizeof req);
	req.system = compact_summary_system;
	req.messages = msgs;
	req.stream = false;
	if (t->state != TURN_COMPACTING)
		turn_set_state(t, TURN_COMPACTING, "summarising the older history");
	if (t->finished) {
		json_decref(msgs);
		return;
	}
	/* The request is borrowed until the call is over (retries). */
	json_decref(t->sum_msgs);
	t->sum_msgs = msgs;
	rc = models_call(t->opt.models, t->opt.chain, t->opt.n_chain, &req, NULL, NULL,
	                 turn_on_summary, t, &t->sum_call);
	if (rc != SB_OK) {
		struct model_error e;

		t->sum_call = NULL;
		memset(&e, 0, sizeof e);
		e.kind = MODEL_ERR_BAD_REQUEST;
		snprintf(e.message, sizeof e.message, "the summary call could not start: %s",
		         sb_strerror(rc));
		turn_on_summary(t, rc, NULL, &e);
	}
}

#define TURN_HANDOFF_ITEM 600
#define TURN_HANDOFF_MAX ((size_t)16 * 1024)

/* Appends up to max bytes of s (whole characters) to b, with "..." when
 * cut. */
static void turn_put_cut(struct buf *b, const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n <= max) {
		buf_puts(b, s);
		return;
	}
	while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
		max--;
	buf_append(b, s, max);
	buf_puts(b, " [...]");
}

/* The summary a full session hands off with, built without the model
 * (which may be what failed): the earlier summary if the history starts
 * with one, the last messages' text, and the todo list. */
static char *turn_handoff_summary(struct turn *t)
{
	struct buf b;
	const json_t *first = json_array_get(t->history, 0), *m, *blk;
	char *text = first ? msg_text(first) : NULL;
	size_t i, k, n = json_array_size(t->history), from, shown = 0;

	buf_init(&b, TURN_HANDOFF_MAX + 1024);
	buf_printf(&b,
	           "[This conversation goes on from an earlier session (%s) whose context was "
	           "full. What it held, in short:]\n",
	           t->opt.tool_ctx.session_id ? t->opt.tool_ctx.session_id : "not named");
	if (text && strncmp(text, "[Summary of the ", 16) == 0) {
		buf_puts(&b, "\nIts summary:\n");
		turn_put_cut(&b, text, TURN_HANDOFF_MAX / 2);
		buf_puts(&b, "\n");
	}
	free(text);
	/* The last dozen messages' text, oldest first. */
	from = n > 12 ? n - 12 : 0;
	for (i = from; i < n; i++) {
		m = json_array_get(t->history, i);
		json_array_foreach(json_object_get(m, "content"), k, blk)
		{
			const char *s = json_string_value(json_object_get(blk, "text"));

			if (!s || !*s || strncmp(s, "[Summary of the ", 16) == 0 ||
			    b.len > TURN_HANDOFF_MAX)
				continue;
			if (!shown++)
				buf_puts(&b, "\nThe last messages:\n");
			buf_printf(&b, "- %s: ", turn_str(json_object_get(m, "role")));
			turn_put_cut(&b, s, TURN_HANDOFF_ITEM);
			buf_puts(&b, "\n");
		}
	}
	text = tool_todo_render(t->plan.items, "\nThe todo list");
	if (text)
		buf_printf(&b, "%s\n", text);
	free(text);
	return buf_steal(&b);
}

/* The context is full and compaction could not make room: the run ends
 * and the session should go on in a new one (the seeds' session split).
 * A system prompt and tools that alone do not fit need the operator. */
static void turn_context_full(struct turn *t, int64_t tokens, const char *cause)
{
	char why[600];
	int64_t fixed = (int64_t)((double)t->ledger.fixed * t->ledger.scale);

	if (fixed * 100 >= t->limits.window * t->limits.block_at) {
		snprintf(why, sizeof why,
		         "this agent's instructions and tools alone take about %lld tokens, more "
		         "than its model's %lld-token context window leaves room for. The operator "
		         "must act: shorten the workspace files, give the agent fewer tools, or "
		         "give it a model with a larger window (agents[].model, "
		         "agents[].context.window)",
		         (long long)fixed, (long long)t->limits.window);
		turn_finish(t, TURN_END_ERROR, why);
		return;
	}
	free(t->handoff);
	t->handoff = turn_handoff_summary(t);
	if (cause)
		snprintf(why, sizeof why, "%s", cause);
	else
		snprintf(why, sizeof why,
		         "the context is full (%lld%% of the %lld-token window) and compaction "
		         "could not make room",
		         (long long)turn_pct(t, tokens), (long long)t->limits.window);
	turn_record(t, "event", json_pack("{ssss}", "event", "handoff", "why", why));
	turn_finish(t, TURN_END_ERROR, why);
}

/* After the levels: send, try the summary again, or give up. */
static void turn_context_after(struct turn *t)
{
	int64_t tokens, pct;

	if (t->finished)
		return;
	tokens_ledger_sync(&t->ledger, t->history);
	tokens = tokens_ledger_total(&t->ledger);
	pct = turn_pct(t, tokens);
	if (pct >= t->limits.block_at && !t->cp_forced) {
		/* Blocked: no call until compaction makes room; a failed
		 * summary is tried again until the breaker opens. */
		if (t->cp_summary_failed && t->compact_failures < COMPACT_BREAKER) {
			turn_summary_step(t);
			return;
		}
		turn_context_full(t, tokens, NULL);
		return;
	}
	turn_send(t);
}

/* ---- the silent memory turn before compaction ---- */

/* The memory tools the silent turn may use: nothing else runs in it. */
static const char *const turn_flush_tools[] = {"memory_get", "memory_search", "memory_write"};
#define TURN_FLUSH_TOOLS (sizeof turn_flush_tools / sizeof *turn_flush_tools)
#define TURN_FLUSH_MAX_TURNS 6

static const char turn_flush_note[] =
    "[Silent memory turn: this conversation's context is nearly full, and its older part "
    "is about to be archived or summarised, so details in it will be out of your sight. "
    "Before that happens, save what must outlast it with memory_write: decisions made, "
    "facts and preferences the user told you, open tasks and where they stand (target "
    "\"daily\" for what happened today, \"long_term\" for durable facts). Do not repeat "
    "what your memory already holds. No one sees this turn or its answer. When you are "
    "done, or if there is nothing worth keeping, answer with exactly NO_REPLY.]";

/* Whether the silent turn runs before this context step: the session may
 * write memory, it did not run in this cycle, and the context reached the
 * first level that takes messages out of the model's sight. */
static bool turn_flush_due(const struct turn *t, int64_t tokens)
{
	const struct tool_memory *m = t->opt.tool_ctx.memory;
	int lossy = t->limits.archive_at < t->limits.summarize_at ? t->limits.archive_at
	                                                          : t->limits.summarize_at;

	if (!t->opt.memory_flush || t->mf_done || !m || !m->writable || !m->today)
		return false;
	if (lossy > t->limits.block_at)
		lossy = t->limits.block_at;
	return lossy > 0 && turn_pct(t, tokens) >= lossy;
}

static void turn_flush_resume(uv_timer_t *h)
{
	struct turn *t = h->data;

	if (!t->finished)
		turn_context_step(t, false, NULL);
}

static void turn_flush_done(void *ud, const struct turn_result *r)
{
	struct turn *t = ud;
	const char *text = r->text ? r->text : "";
	size_t n = strlen(text);
	bool no_reply;
	json_t *ev;

	t->mf_child = NULL;
	SB_CRASH_POINT("turn.memory_flush.done");
	/* What it cost counts like any call of this run. */
	turn_usage_add(&t->usage, &r->usage);
	while (n && (text[n - 1] == ' ' || text[n - 1] == '\n' || text[n - 1] == '\r'))
		n--;
	while (n && (*text == ' ' || *text == '\n')) {
		text++;
		n--;
	}
	no_reply = n == 8 && memcmp(text, "NO_REPLY", 8) == 0;
	ev = json_pack("{sssssssisisbss%}", "event", "memory_flush", "state", "done", "end",
	               turn_end_name(r->end), "model_calls", r->model_calls, "tool_calls",
	               r->tool_calls, "no_reply", no_reply, "reply", text, n > 200 ? (size_t)200 : n);
	if (ev && r->end != TURN_END_TURN)
		json_object_set_new(ev, "detail", json_string(r->detail ? r->detail : ""));
	if (ev)
		json_object_set_new(ev, "usage", turn_usage_json(&r->usage));
	turn_record(t, "event", ev);
	log_info("agent", "silent memory turn done", LOG_S("session", t->opt.tool_ctx.session_key),
	         LOG_S("end", turn_end_name(r->end)), LOG_I("tool_calls", (int64_t)r->tool_calls),
	         LOG_I("no_reply", no_reply));
	if (t->finished)
		return;
	if (t->abort_asked) {
		turn_finish(t, TURN_END_ABORTED, t->detail ? t->detail : "aborted");
		return;
	}
	/* Deferred: the nested run frees itself after this returns, and the
	 * step may finish this run. */
	uv_timer_start(&t->timer, turn_flush_resume, 0, 0);
}

/* The "memory_flush" event is written: the silent turn may run (a crash
 * from here on finds the event and does not run it again this cycle). */
static void turn_flush_recorded(void *ud, int rc)
{
	struct turn *t = ud;
	struct turn_options o;
	json_t *hist, *last;
	int src;

	t->io_busy = false;
	if (t->free_after_io) {
		uv_close((uv_handle_t *)&t->timer, turn_free_cb);
		return;
	}
	if (t->finished)
		return;
	if (t->abort_asked) {
		turn_finish(t, TURN_END_ABORTED, t->detail ? t->detail : "aborted");
		return;
	}
	if (rc != SB_OK) {
		/* Not recorded, so not run: a crash could run it twice. */
		log_warn("agent", "cannot record the silent memory turn; compacting without it",
		         LOG_S("session", t->opt.tool_ctx.session_key), LOG_S("error", sb_strerror(rc)));
		turn_context_step(t, false, NULL);
		return;
	}
	SB_CRASH_POINT("turn.memory_flush.recorded");
	memset(&o, 0, sizeof o);
	o.models = t->opt.models;
	o.chain = t->opt.chain;
	o.n_chain = t->opt.n_chain;
	o.system = t->opt.system;
	/* The note joins the last message when it is the user's (the APIs
	 * want roles to alternate), else it is a user message of its own. */
	hist = json_deep_copy(t->history);
	last = hist ? json_array_get(hist, json_array_size(hist) - 1) : NULL;
	if (last && strcmp(turn_str(json_object_get(last, "role")), "user") == 0 &&
	    msg_add_text(last, turn_flush_note) == SB_OK) {
		o.user_text = NULL;
	} else {
		o.user_text = turn_flush_note;
	}
	o.history = hist;
	o.tools = turn_flush_tools;
	o.n_tools = TURN_FLUSH_TOOLS;
	o.tools_cache = t->opt.tools_cache;
	o.tool_ctx = t->opt.tool_ctx;
	o.tool_ctx.plan = NULL;
	o.tool_ctx.sends = NULL;
	o.max_turns = TURN_FLUSH_MAX_TURNS;
	o.max_tokens = t->opt.max_tokens;
	o.context = t->opt.context;
	o.no_compaction = true;
	src = hist ? turn_start(&t->mf_child, &o, turn_flush_done, t) : SB_ERR_NOMEM;
	json_decref(hist); /* turn_start copies it */
	if (src != SB_OK) {
		t->mf_child = NULL;
		log_warn("agent", "the silent memory turn could not start",
		         LOG_S("session", t->opt.tool_ctx.session_key), LOG_S("error", sb_strerror(src)));
		turn_context_step(t, false, NULL);
	}
}

static void turn_flush_start(struct turn *t, int64_t tokens)
{
	json_t *ev;

	t->mf_done = true;
	turn_set_state(t, TURN_COMPACTING, "saving memory before compaction");
	if (t->finished)
		return;
	ev = json_pack("{sssssIsIsi}", "event", "memory_flush", "state", "started", "tokens",
	               (json_int_t)tokens, "window", (json_int_t)t->limits.window, "percent",
	               (int)turn_pct(t, tokens));
	turn_record(t, "event", ev);
	if (!t->opt.transcript) {
		turn_flush_recorded(t, SB_OK);
		return;
	}
	t->io_busy = true;
	if (transcript_flush(t->opt.transcript, turn_flush_recorded, t) != SB_OK)
		turn_flush_recorded(t, SB_ERR_IO);
}

/* The context step before a model call: levels 1 and 2 when their
 * thresholds are reached (or forced, level 4), written on the thread pool,
 * then level 3; then the call. */
static void turn_context_step(struct turn *t, bool forced, const char *why)
{
	json_t *scratch = NULL;
	int64_t tokens, est;
	bool any = false;

	if (t->finished)
		return;
	turn_record_pending(t);
	if (t->opt.no_compaction) {
		turn_send(t);
		return;
	}
	t->cp_forced = forced;
	tokens_ledger_sync(&t->ledger, t->history);
	tokens = tokens_ledger_total(&t->ledger);
	if (!forced && turn_flush_due(t, tokens)) {
		turn_flush_start(t, tokens);
		return;
	}
	t->cp_before = tokens;
	if (t->opt.compact_only && !t->counts.context_before)
		t->counts.context_before = tokens;
	if (!forced && turn_pct(t, tokens) < t->limits.trim_at &&
	    turn_pct(t, tokens) < t->limits.archive_at &&
	    turn_pct(t, tokens) < t->limits.summarize_at &&
	    turn_pct(t, tokens) < t->limits.block_at) {
		turn_send(t);
		return;
	}
	scratch = json_copy(t->history);
	if (!scratch) {
		turn_finish(t, TURN_END_ERROR, "out of memory");
		return;
	}
	est = tokens;
	if (forced || turn_pct(t, est) >= t->limits.trim_at) {
		/* One batch down to the low-water mark: the prefix changes once
		 * for many calls. A batch too small to be worth a cache break
		 * waits, unless the next level is due anyway. */
		int64_t target = forced ? 0 : tokens - t->limits.window * t->limits.trim_to / 100;
		int64_t worth = t->limits.window *
		                (t->limits.trim_at > t->limits.trim_to
		                     ? (t->limits.trim_at - t->limits.trim_to) / 2
		                     : 0) /
		                100;

		/* At the block (or told the prompt is too long) even the most
		 * recent results give way to their notes: the model can read them
		 * back from the store, which beats a full context. */
		size_t keep =
		    forced || turn_pct(t, est) >= t->limits.block_at ? 0 : t->limits.keep_results;

		if (compact_plan_trim(scratch, keep, t->opt.tool_ctx.results_dir,
		                      target > 0 ? target : 0, turn_estimate_text, t,
		                      &t->plans[0]) == SB_OK &&
		    t->plans[0].edits &&
		    (forced || t->plans[0].freed >= worth ||
		     turn_pct(t, est) >= t->limits.archive_at) &&
		    compact_apply(scratch, t->plans[0].edits) == SB_OK) {
			any = true;
			est = turn_estimate_of(t, scratch);
		} else {
			compact_plan_free(&t->plans[0]);
		}
	}
	if ((forced || turn_pct(t, est) >= t->limits.archive_at) && t->opt.tool_ctx.sessions_dir &&
	    t->opt.tool_ctx.session_id) {
		char id[40], name[128];

		transcript_new_session_id(id, sizeof id);
		snprintf(name, sizeof name, "%s.archive-%s.jsonl", t->opt.tool_ctx.session_id, id);
		if (compact_plan_archive(
		        scratch, t->limits.keep_head,
		        forced && t->limits.keep_messages > 2 ? t->limits.keep_messages / 2
		                                              : t->limits.keep_messages,
		        t->opt.tool_ctx.sessions_dir, name, &t->plans[1]) == SB_OK &&
		    t->plans[1].edits)
			any = true;
	}
	json_decref(scratch);
	if (!any && !forced && turn_pct(t, tokens) < t->limits.summarize_at &&
	    turn_pct(t, tokens) < t->limits.block_at) {
		turn_send(t); /* nothing worth changing the prefix for yet */
		return;
	}
	turn_set_state(t, TURN_COMPACTING,
	               forced ? (why && *why ? why : "the prompt is too long")
	                      : "the context is over a compaction threshold");
	if (t->finished)
		return;
	if (!any) {
		turn_summary_step(t);
		return;
	}
	if (turn_io_start(t, turn_levels_written) != SB_OK)
		turn_levels_written(t, SB_ERR_IO);
}

/* The todo tool replaced the list: keep it and record it. */
static void turn_plan_set(void *ud, const json_t *items)
{
	struct turn *t = ud;
	json_t *copy = json_deep_copy(items);

	if (!copy)
		return;
	json_decref(t->plan.items);
	t->plan.items = copy;
	turn_record(t, "event", json_pack("{sssO}", "event", "todo", "items", copy));
}

/* After a compaction removed messages, the todo list goes back into the
 * newest message (compactly), so a long task keeps its plan; the prefix
 * changed already, and the note changes only the newest message. */
static void turn_plan_reinject(struct turn *t)
{
	char *text;

	if (!t->plan_reinject)
		return;
	t->plan_reinject = false;
	text = tool_todo_render(t->plan.items, "[Your todo list, kept across the compaction");
	if (!text)
		return;
	{
		struct buf b;

		buf_init(&b, strlen(text) + 8);
		buf_puts(&b, text);
		buf_puts(&b, "]");
		free(text);
		text = buf_steal(&b);
	}
	if (text)
		turn_add_user_note(t, text);
	free(text);
}

/* Limits, the ledger, the tool table and what the session's transcript
 * says about the prompt cache. */
static void turn_setup_context(struct turn *t)
{
	const struct tool_def *const *all;
	const json_t *lp = t->opt.session.last_prompt;
	size_t n, i;

	t->limits = t->opt.context.limits;
	if (t->limits.window <= 0)
		compact_limits_default(&t->limits);
	tokens_ledger_init(&t->ledger);
	if (t->tools_cached)
		tokens_ledger_set_fixed_tokens(
		    &t->ledger,
		    tokens_text_cache_estimate(t->opt.system_cache, t->opt.system,
		                               t->opt.system ? strlen(t->opt.system) : 0, NULL),
		    t->tools_tokens);
	else
		tokens_ledger_set_fixed(&t->ledger, t->opt.system, t->tools_json);
	if (lp && json_is_number(json_object_get(lp, "calibration")))
		tokens_ledger_set_scale(&t->ledger,
		                        json_number_value(json_object_get(lp, "calibration")));
	if (!t->tools_cached)
		t->tools_hash = turn_json_hash_len(TURN_FNV_OFFSET, t->tools_json, &t->tools_chars);
	t->compact_failures = t->opt.session.compact_failures;
	t->mf_done = t->opt.session.memory_flushed;
	if (t->compact_failures >= COMPACT_BREAKER) {
		/* Open for long enough: one more summary may be tried. */
		/* The wall clock: compact_failed_ms is a stored time. */
		if (clock_wall_ms() - t->opt.session.compact_failed_ms >=
		    COMPACT_BREAKER_RESET_MS) {
			t->compact_failures = COMPACT_BREAKER - 1;
			turn_record(t, "event",
			            json_pack("{sssi}", "event", "compaction_breaker_reset",
			                      "consecutive", t->compact_failures));
		}
	}
	t->session_breaks = t->opt.session.cache_breaks;
	t->session_spent = t->opt.session.spent;
	if (lp) {
		t->have_prev = true;
		t->prev_system = turn_hex_value(json_object_get(lp, "system"));
		t->prev_tools = turn_hex_value(json_object_get(lp, "tools"));
		t->prev_prefix = turn_hex_value(json_object_get(lp, "prefix"));
		t->prev_n = (size_t)json_integer_value(json_object_get(lp, "messages"));
	}
	t->plan.items =
	    json_is_array(t->opt.session.todo) ? json_deep_copy(t->opt.session.todo) : json_array();
	t->plan.set = turn_plan_set;
	t->plan.ud = t;
	t->opt.tool_ctx.plan = &t->plan;
	t->read_def = tool_read;
	t->read_def.call = budget_read_call;
	all = tool_all(&n);
	for (i = 0; i < n && i < TURN_TOOLS_MAX; i++)
		t->tools_tab[i] = strcmp(all[i]->name, "read") == 0 ? &t->read_def : all[i];
	for (size_t k = 0; k < t->opt.n_extra_tools && i < TURN_TOOLS_MAX; k++)
		t->tools_tab[i++] = t->opt.extra_tools[k];
	t->n_tools_tab = i;
}

/* The names the executor allows: the agent's list and every extra tool. */
static int turn_allowed_names(struct turn *t)
{
	size_t k;

	if (!t->opt.tools || !t->opt.n_extra_tools)
		return SB_OK;
	t->allowed_tab = calloc(t->opt.n_tools + t->opt.n_extra_tools, sizeof *t->allowed_tab);
	if (!t->allowed_tab)
		return SB_ERR_NOMEM;
	for (k = 0; k < t->opt.n_tools; k++)
		t->allowed_tab[t->n_allowed_tab++] = t->opt.tools[k];
	for (k = 0; k < t->opt.n_extra_tools; k++)
		t->allowed_tab[t->n_allowed_tab++] = t->opt.extra_tools[k]->name;
	return SB_OK;
}

/* The date note of the newest message, when the history's last one says
 * another day (or there is none): the model knows the date, and the cached
 * prefix changes only in the newest message, at most once a day. */
static void turn_add_date(struct turn *t, json_t *msg)
{
	const char *date = t->opt.date_note;
	size_t i = json_array_size(t->history);

	if (!date || !*date || !msg)
		return;
	while (i-- > 0) {
		const json_t *m = json_array_get(t->history, i), *b;
		size_t k = json_array_size(json_object_get(m, "content"));

		if (m == msg)
			continue;
		while (k-- > 0) {
			const char *text;

			b = json_array_get(json_object_get(m, "content"), k);
			text = json_string_value(json_object_get(b, "text"));
			if (text &&
			    strncmp(text, TURN_DATE_PREFIX, strlen(TURN_DATE_PREFIX)) == 0) {
				if (strcmp(text, date) == 0)
					return; /* told already */
				i = 0;          /* another day: tell it */
				break;
			}
		}
	}
	msg_add_text(msg, date);
}

static void turn_first_step(uv_timer_t *timer)
{
	struct turn *t = timer->data;

	if (t->opt.compact_only) {
		snprintf(t->send_reason, sizeof t->send_reason, "compaction asked for");
		turn_context_step(t, true, "compaction asked for with /compact");
		return;
	}
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
	t->refused = json_object();
	t->id_map = json_object();
	/* The list is never changed once built, so runs share the cache's. */
	t->tools_json = (json_t *)turn_tools_cache_get_chars(
	    opt->tools_cache, opt->tools, opt->n_tools, opt->extra_tools, opt->n_extra_tools,
	    opt->extra_key, &t->tools_hash, &t->tools_tokens, &t->tools_chars);
	t->tools_cached = t->tools_json != NULL;
	t->tools_json = t->tools_cached ? json_incref(t->tools_json)
	                                : turn_tools_list(NULL, opt->tools, opt->n_tools,
	                                                  opt->extra_tools, opt->n_extra_tools,
	                                                  opt->extra_key, NULL);
	if (!t->history || !t->added || !t->steer || !t->tools_json || !t->refused || !t->id_map ||
	    turn_allowed_names(t) != SB_OK)
		goto fail;
	turn_setup_context(t);
	uv_timer_init(opt->tool_ctx.loop, &t->timer);
	t->timer.data = t;
	if (opt->user_text) {
		json_t *msg = opt->seed && *opt->seed ? msg_user_text_new(opt->seed)
		                                      : msg_user_text_new(opt->user_text);

		if (msg && opt->seed && *opt->seed && msg_add_text(msg, opt->user_text) != SB_OK) {
			json_decref(msg);
			msg = NULL;
		}
		/* Not recorded yet (user_pending): the note may still go in. */
		if (msg)
			turn_add_date(t, msg);
		if (turn_add_message(t, msg, NULL, NULL) != SB_OK) {
			uv_close((uv_handle_t *)&t->timer, turn_free_cb);
			return SB_ERR_NOMEM;
		}
		t->pending_inbox = opt->inbox_id;
	}
	uv_timer_start(&t->timer, turn_first_step, 0, 0);
	if (out)
		*out = t;
	return SB_OK;
fail:
	json_decref(t->history);
	json_decref(t->added);
	json_decref(t->steer);
	json_decref(t->refused);
	json_decref(t->id_map);
	json_decref(t->tools_json);
	free(t->allowed_tab);
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
	t->abort_asked = true;
	if (t->mf_child) {
		turn_abort(t->mf_child, t->detail); /* turn_flush_done finishes the run */
		return;
	}
	if (t->call) {
		models_cancel(t->call); /* turn_on_model_done finishes the run */
		return;
	}
	if (t->exec) {
		executor_abort(t->exec, t->detail); /* turn_on_tools_done finishes it */
		return;
	}
	if (t->sum_call) {
		models_cancel(t->sum_call); /* turn_on_summary finishes the run */
		return;
	}
	turn_finish(t, TURN_END_ABORTED, t->detail);
}

int turn_steer_from(struct turn *t, const char *text, int64_t inbox_id)
{
	json_t *s;

	if (!t || t->finished)
		return SB_ERR_CLOSED;
	s = json_pack("{sssI}", "text", text ? text : "", "inbox_id", (json_int_t)inbox_id);
	return !s || json_array_append_new(t->steer, s) ? SB_ERR_NOMEM : SB_OK;
}

int turn_steer(struct turn *t, const char *text)
{
	return turn_steer_from(t, text, 0);
}

enum turn_state turn_state_of(const struct turn *t)
{
	return t->state;
}
