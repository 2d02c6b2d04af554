/*
 * runner.c - see runner.h.
 *
 * A job moves through: session (store lookup, or a new session id committed
 * before anything else) → prepare (thread pool: load the transcript, build
 * the system prompt, open the transcript for appends) → turn (the state
 * machine) → flush (every transcript line written) → done. What the worker
 * builds (history, prompt) is handed over to the loop thread, never shared.
 */
#include "gateway/pipeline/runner.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agents/context/tokens.h"
#include "agents/mcp/mcp.h"
#include "agents/message.h"
#include "agents/safety/permissions.h"
#include "agents/safety/sandbox.h"
#include "agents/safety/spawn.h"
#include "bindings/bindings.h"
#include "agents/transcript.h"
#include "gateway/core/clock.h"
#include "gateway/core/crash.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/fmt.h"
#include "gateway/core/fsutil.h"
#include "gateway/core/log.h"
#include "gateway/cron/cron_tz.h"
#include "gateway/obs/metrics.h"
#include "gateway/pipeline/commands.h"
#include "workspaces/memory.h"
#include "workspaces/prompt.h"
#include "workspaces/skills.h"
#include "workspaces/workspace.h"

#define RUNNER_PROMPT_MAX (4u << 20)
/* Up to this many runs at once, a transcript kept in the store starts its
 * writeback at close (transcript_writeback_hint). */
#define RUN_WRITEBACK_HINT_RUNS 2

static const char *const runner_default_tools[] = {
    "bash",          "edit",         "glob",      "grep",       "ls",         "memory_get",
    "memory_search", "memory_write", "message",   "read",       "skill_load", "skill_patch",
    "skill_save",    "todo",         "web_fetch", "web_search", "write"};
#define RUNNER_DEFAULT_TOOLS (sizeof runner_default_tools / sizeof *runner_default_tools)

struct runner {
	struct runner_options opt;
	size_t active;
	struct workspace_cache *ws_cache;        /* the workspaces' files, shared by the jobs */
	struct turn_tools_cache *tools;          /* the agents' tool lists, shared by the jobs */
	struct tokens_text_cache *system_tokens; /* the system prompts' estimates, likewise */
	struct mcp_hub *mcp;                     /* the agents' MCP servers */
};

enum run_stage { RUN_SESSION, RUN_PREPARE, RUN_WINDOW, RUN_MCP, RUN_TURN, RUN_FLUSH, RUN_DONE };

struct run_job {
	struct runner *r;
	struct config *cfg;    /* held for the job's life (acquire) */
	struct models *models; /* likewise */
	void *token;
	const struct agent_config *agent;
	char *agent_id, *session_key, *text, *channel, *account, *target, *sender;
	bool group;
	bool main_session;
	bool redelivered;
	bool new_session;
	bool compact_only;  /* /compact: compaction, no model turn */
	char *model_choice; /* the session's /model choice (its stored meta); NULL none */
	struct session_reset_config reset;
	const struct turn_events *ev;
	run_done_cb done;
	void *ud;
	/* A preview (runner_preview): it stops after the prepare step. */
	run_preview_cb preview_done;
	enum run_stage stage;
	bool aborted;
	char *abort_why;

	char session_id[40];
	char path[PATH_MAX];
	char results_dir[PATH_MAX];
	char sessions_dir[PATH_MAX];
	struct turn_session session; /* from the transcript (last_prompt held below) */
	json_t *last_prompt;
	json_t *todo;   /* the session's todo list, from the transcript */
	json_t *repair; /* edits pairing tool calls a restart cut, to write once */
	char workspace[PATH_MAX];
	uv_work_t work;
	int prep_rc;
	char prep_err[PATH_MAX + 256]; /* for the log: may name server paths */
	const char *prep_public;       /* for the chat (no path); NULL: prep_err */
	json_t *history;
	json_t *steer; /* texts steered in before the turn started */
	struct buf prompt;
	struct workspace_version ws_version; /* what the prompt was built from */
	struct transcript *transcript;
	struct turn_budget budget;
	const char **chain;
	size_t n_chain;
	struct turn *turn;
	struct models_window_wait *wwait; /* the model's context window, being learnt */
	struct mcp_wait *mwait;           /* the agent's MCP tools, being listed */
	struct mcp_catalog *mcp;          /* held for the turn */
	bool mcp_asked;
	/* A session handed off to a new one (the context was full): the first
	 * run's session, the summary the second starts from. */
	char *seed;
	bool handed_off;
	bool restart; /* flushing the full session before the run in the new one */
	char old_session_id[40];
	/* A first message's session, not recorded yet: it is, with the
	 * reply (run_touch_session). */
	bool session_unsaved;
	int64_t received_at;
	struct model_usage first_usage; /* the full session's run */
	int first_calls, first_tools;
	int64_t window;
	char window_source[200];
	struct permissions perms;
	struct sandbox_policy sandbox;
	struct tool_web web;
	struct tool_web_search search;
	struct tool_memory memory;
	char memory_index[PATH_MAX];
	char memory_today[32], memory_yesterday[32];
	struct run_preview_note notes[2]; /* the daily notes in the prompt */
	size_t n_notes;
	char memory_label[600];
	struct tool_skills skills;
	char skills_home[PATH_MAX];              /* <home>/skills */
	const char *tools[RUNNER_DEFAULT_TOOLS]; /* the default list, web_fetch when on */
	struct tool_sends sends;                 /* the message tool's sent messages (tool.h) */
	/* The inbox entries whose text the transcript holds ("inbox_id" of
	 * its user messages and notes): {"<id>": true}; stamped: it has any. */
	json_t *recorded;
	bool stamped;
	json_t *unsent; /* inbox ids steered in and never sent (run_outcome) */
	/* A resumed run whose first attempt recorded its whole reply, which
	 * a crash kept from the user, and that goes on for a text steered in
	 * since: the recorded reply, put before this run's. */
	char *resume_prefix;
	bool steer_given; /* j->steer went to the turn */

	/* the turn's result, kept past its callback */
	struct turn_result result;
	char *result_text;
	char *result_detail;
	json_t *result_messages;
	char result_model[512]; /* "provider/model" of the last answer */
};

/* An agent's MCP tool list changed: the cached lists built with the old one
 * go, so the next run's prompt has the new one. */
static void runner_mcp_changed(void *ud, const char *agent_id, uint64_t old_key, const char *why)
{
	struct runner *r = ud;
	size_t n = turn_tools_cache_drop(r->tools, old_key);

	log_info("runner", "the agent's tool list changed; its cached lists are dropped",
	         LOG_S("agent", agent_id), LOG_S("why", why), LOG_I("dropped", n));
}

int runner_new(struct runner **out, const struct runner_options *opt)
{
	struct runner *r = calloc(1, sizeof *r);
	struct mcp_hub_options mo = {.changed = runner_mcp_changed};

	if (!r)
		return SB_ERR_NOMEM;
	r->opt = *opt;
	mo.ud = r;
	if (workspace_cache_new(&r->ws_cache) != SB_OK) {
		free(r);
		return SB_ERR_NOMEM;
	}
	if (turn_tools_cache_new(&r->tools) != SB_OK) {
		workspace_cache_free(r->ws_cache);
		free(r);
		return SB_ERR_NOMEM;
	}
	if (tokens_text_cache_new(&r->system_tokens) != SB_OK) {
		turn_tools_cache_free(r->tools);
		workspace_cache_free(r->ws_cache);
		free(r);
		return SB_ERR_NOMEM;
	}
	if (mcp_hub_new(&r->mcp, opt->loop, &mo) != SB_OK) {
		tokens_text_cache_free(r->system_tokens);
		turn_tools_cache_free(r->tools);
		workspace_cache_free(r->ws_cache);
		free(r);
		return SB_ERR_NOMEM;
	}
	*out = r;
	return SB_OK;
}

void runner_free(struct runner *r)
{
	if (r) {
		mcp_hub_close(r->mcp);
		workspace_cache_free(r->ws_cache);
		turn_tools_cache_free(r->tools);
		tokens_text_cache_free(r->system_tokens);
	}
	free(r);
}

size_t runner_stop_servers(struct runner *r)
{
	return r ? mcp_hub_stop(r->mcp) : 0;
}

size_t runner_active(const struct runner *r)
{
	return r ? r->active : 0;
}

static bool run_recorded(const struct run_job *j, int64_t inbox_id);
static bool run_steer_pending(const struct run_job *j);

static void run_job_free(struct run_job *j)
{
	if (j->cfg)
		j->r->opt.release(j->r->opt.ud, j->cfg, j->token);
	free(j->agent_id);
	free(j->session_key);
	free(j->text);
	free(j->channel);
	free(j->account);
	free(j->target);
	free(j->sender);
	free(j->abort_why);
	free(j->model_choice);
	free(j->seed);
	mcp_wait_cancel(j->mwait);
	mcp_catalog_unref(j->mcp);
	json_decref(j->history);
	json_decref(j->last_prompt);
	json_decref(j->todo);
	json_decref(j->repair);
	json_decref(j->steer);
	tool_sends_free(&j->sends);
	json_decref(j->recorded);
	json_decref(j->unsent);
	free(j->resume_prefix);
	buf_free(&j->prompt);
	free(j->chain);
	free(j->result_text);
	free(j->result_detail);
	json_decref(j->result_messages);
	free(j);
}

/* error: what the sender may be told; detail (may be NULL): the same with
 * what only the operator may see (server paths), for the log. */
static void run_touch_session(struct run_job *j);

static void run_finish_detail(struct run_job *j, int rc, const char *error, const char *detail)
{
	struct run_outcome o;

	/* A first message's session, whatever became of its run: what the
	 * transcript holds stays the key's. */
	if (j->session_unsaved)
		run_touch_session(j);
	j->stage = RUN_DONE;
	memset(&o, 0, sizeof o);
	o.rc = rc;
	o.error = error;
	o.detail = detail;
	o.result = rc == SB_OK ? &j->result : NULL;
	o.session_id = j->session_id;
	o.transcript_path = j->path;
	if (!j->steer_given && json_array_size(j->steer)) {
		/* The turn never started: every text steered in waits. */
		json_decref(j->unsent);
		j->unsent = json_array();
		for (size_t i = 0; i < json_array_size(j->steer); i++)
			json_array_append(j->unsent,
			                  json_object_get(json_array_get(j->steer, i), "inbox_id"));
	}
	o.unsent = j->unsent;
	j->r->active--;
	j->done(j->ud, &o);
	run_job_free(j);
}

static void run_finish(struct run_job *j, int rc, const char *error)
{
	if (j->preview_done) {
		j->r->active--;
		j->preview_done(j->ud, rc, error ? error : sb_strerror(rc), NULL);
		run_job_free(j);
		return;
	}
	run_finish_detail(j, rc, error, NULL);
}

/* Whether the session's reset policy says it has run its course. */
static bool run_expired(const struct run_job *j, const struct store_session *s)
{
	int64_t now_ms;
	struct tm tm;
	time_t now;

	if (j->reset.mode == SESSION_RESET_NONE || s->updated_at <= 0)
		return false;
	/* The wall clock: updated_at is a stored time. */
	now_ms = clock_wall_ms();
	now = (time_t)(now_ms / 1000);
	localtime_r(&now, &tm);
	return bindings_session_should_reset(&j->reset, s->updated_at, now_ms,
	                                     (int32_t)tm.tm_gmtoff);
}

static void run_session_touched(void *ud, int rc)
{
	(void)ud;
	if (rc)
		log_warn("agent", "cannot record the session's last activity",
		         LOG_S("error", sb_strerror(rc)));
}

/* Records the session's last activity (reset policies and listings). */
static void run_touch_session(struct run_job *j)
{
	struct store_session ns;

	memset(&ns, 0, sizeof ns);
	ns.key = j->session_key;
	ns.agent_id = j->agent_id;
	ns.session_id = j->session_id;
	j->session_unsaved = false;
	store_session_put(j->r->opt.store, &ns, run_session_touched, NULL);
}

/* ---- flush ---- */

static void run_prepare(struct run_job *j);

/* The full session is written: the message runs again in the new one. */
static void run_restart(struct run_job *j)
{
	json_decref(j->history);
	j->history = NULL;
	json_decref(j->last_prompt);
	j->last_prompt = NULL;
	json_decref(j->repair);
	j->repair = NULL;
	memset(&j->session, 0, sizeof j->session);
	/* j->todo goes on: the new session starts with the list. */
	buf_reset(&j->prompt);
	free(j->chain);
	j->chain = NULL;
	j->n_chain = 0;
	j->prep_rc = 0;
	j->prep_public = NULL;
	j->redelivered = false;
	free(j->result_text);
	free(j->result_detail);
	json_decref(j->result_messages);
	j->result_text = j->result_detail = NULL;
	j->result_messages = NULL;
	run_prepare(j);
}

/* The bytes the run wrote go to the store, to commit with its reply
 * (xsync.h); the close then syncs nothing. Without a syncer, or when the
 * store does not take them, the close syncs the file. */
static void run_keep_transcript(struct run_job *j)
{
	int64_t off;
	char *bytes = NULL;
	size_t len = 0;

	if (!j->r->opt.xsync || transcript_take_pending(j->transcript, &off, &bytes, &len) != SB_OK)
		return;
	if (len && xsync_record(j->r->opt.xsync, j->path, off, bytes, len) != SB_OK)
		transcript_sync_on_close(j->transcript);
	/* The early writeback keeps a lone message's next commit from queueing
	 * behind the batched sync (its p99); with more runs at once, that sync
	 * writes the same pages in one go, and the hint only costs CPU (3 % at
	 * 64 senders, docs/performance.md). */
	transcript_writeback_hint(j->transcript, j->r->active <= RUN_WRITEBACK_HINT_RUNS);
	free(bytes);
}

static void run_flushed(void *ud, int rc)
{
	struct run_job *j = ud;

	if (rc)
		log_warn("agent", "transcript write failed", LOG_S("path", j->path),
		         LOG_S("error", sb_strerror(rc)));
	else
		run_keep_transcript(j);
	transcript_close(j->transcript);
	j->transcript = NULL;
	if (j->restart && !j->aborted) {
		j->restart = false;
		run_restart(j);
		return;
	}
	/* After a hand-off this points the session key at the new session. */
	run_touch_session(j);
	run_finish(j, SB_OK, NULL);
}

/* The run's context figures into the gateway's metrics. */
static void run_count_context(struct run_job *j, const struct turn_result *res)
{
	struct metrics *m = j->r->opt.metrics;

	if (!m)
		return;
	for (int i = 0; i < TURN_CACHE_BREAK_COUNT && i < METRICS_CACHE_BREAK_REASONS; i++)
		m->prompt_cache_breaks[i] += res->cache_breaks[i];
	m->prompt_cache_read_tokens += res->usage.cache_read_tokens;
	m->prompt_cache_write_tokens += res->usage.cache_write_tokens;
	for (int i = 0; i < 3; i++)
		m->context_compactions[i] += res->compactions[i];
	m->context_compaction_failures += res->compaction_failures;
	m->context_reactive_retries += res->reactive_retries;
	m->tool_results_persisted += res->results_persisted;
}

/* The context of the session is full: the message runs again in a new
 * session that starts from a summary (the seeds' session split). The key
 * points at the new session only once that run is written. */
static bool run_hand_off(struct run_job *j, const struct turn_result *res)
{
	json_t *ev;

	if (!res->handoff || j->handed_off || j->aborted || !res->handoff_summary)
		return false;
	free(j->seed);
	j->seed = strdup(res->handoff_summary);
	if (!j->seed)
		return false;
	j->handed_off = true;
	j->restart = true;
	json_decref(j->todo);
	j->todo = res->todo ? json_deep_copy(res->todo) : NULL;
	j->first_usage = res->usage;
	j->first_calls = res->model_calls;
	j->first_tools = res->tool_calls;
	snprintf(j->old_session_id, sizeof j->old_session_id, "%s", j->session_id);
	transcript_new_session_id(j->session_id, sizeof j->session_id);
	ev = json_pack("{ssssss}", "event", "handoff", "to", j->session_id, "why",
	               res->detail ? res->detail : "");
	if (!ev || transcript_append(j->transcript, "event", ev, NULL, 0) != SB_OK)
		log_warn("agent", "cannot record the hand-off in the transcript",
		         LOG_S("path", j->path));
	json_decref(ev);
	log_info("agent", "the session's context is full; it goes on in a new session",
	         LOG_S("session", j->session_key), LOG_S("from", j->old_session_id),
	         LOG_S("to", j->session_id));
	return true;
}

/* The reply to /compact: what the levels did, before and after. */
static void run_compact_text(const struct run_job *j, const struct turn_result *res,
                             struct buf *text)
{
	int n = res->compactions[0] + res->compactions[1] + res->compactions[2];
	int64_t w = j->window > 0 ? j->window : 0;

	if (res->end == TURN_END_ABORTED) {
		buf_puts(text, "Compaction stopped before it finished; the context is as it was.");
		return;
	}
	if (!n && res->compaction_failures)
		buf_printf(
		    text, "Compaction failed (%s); the context is as it was: about %lld tokens",
		    res->detail && *res->detail ? res->detail : "the summary could not be made",
		    (long long)res->context_before);
	else if (!n)
		buf_printf(text, "Nothing to compact: the context holds about %lld tokens",
		           (long long)res->context_tokens);
	else
		buf_printf(text,
		           "Compacted this session's context: about %lld tokens before, %lld after",
		           (long long)res->context_before, (long long)res->context_tokens);
	if (w)
		buf_printf(text, " (%lld%% of the %lld-token window)",
		           (long long)(res->context_tokens * 100 / w), (long long)w);
	buf_puts(text, ".");
	if (n) {
		buf_puts(text, " Done:");
		if (res->compactions[0])
			buf_puts(text, " old tool results trimmed;");
		if (res->compactions[1])
			buf_puts(text, " the middle of the history archived;");
		if (res->compactions[2])
			buf_puts(text, " the older history summarised;");
		text->data[text->len - 1] = '.';
	}
	if (n && res->compaction_failures)
		buf_puts(text, " (The summary failed; the other levels were applied.)");
}

static void run_turn_done(void *ud, const struct turn_result *res)
{
	struct run_job *j = ud;
	char detail[1024];
	struct buf text;

	run_count_context(j, res);
	j->turn = NULL;
	if (json_array_size(res->unsent)) {
		if (!j->unsent)
			j->unsent = json_array();
		for (size_t i = 0; j->unsent && i < json_array_size(res->unsent); i++)
			json_array_append(
			    j->unsent, json_object_get(json_array_get(res->unsent, i), "inbox_id"));
	}
	if (run_hand_off(j, res)) {
		j->stage = RUN_FLUSH;
		if (transcript_flush(j->transcript, run_flushed, j) != SB_OK)
			run_flushed(j, SB_ERR_IO);
		return;
	}
	j->result = *res;
	j->result.handoff_summary = NULL; /* the turn's, gone after this */
	j->result.todo = NULL;
	if (j->handed_off) {
		/* The reply's cost is both runs'. */
		j->result.usage.input_tokens += j->first_usage.input_tokens;
		j->result.usage.output_tokens += j->first_usage.output_tokens;
		j->result.usage.cache_read_tokens += j->first_usage.cache_read_tokens;
		j->result.usage.cache_write_tokens += j->first_usage.cache_write_tokens;
		j->result.model_calls += j->first_calls;
		j->result.tool_calls += j->first_tools;
	}
	buf_init(&text, (size_t)64 << 20);
	if (j->compact_only)
		run_compact_text(j, res, &text);
	else if (j->resume_prefix && *j->resume_prefix)
		buf_printf(&text, "%s%s", j->resume_prefix, res->text && *res->text ? "\n\n" : "");
	if (!j->compact_only)
		buf_puts(&text, res->text ? res->text : "");
	snprintf(detail, sizeof detail, "%s", res->detail ? res->detail : "");
	if (j->handed_off && res->handoff) {
		/* Full again in a fresh session: the message alone is too long. */
		snprintf(detail, sizeof detail,
		         "your message is too long for this agent's model even in a new "
		         "conversation (about %lld tokens with the summary of the earlier one; "
		         "the window holds %lld). Send it in shorter parts",
		         (long long)res->context_tokens, (long long)j->window);
	} else if (j->handed_off && res->end != TURN_END_ERROR) {
		buf_printf(&text,
		           "%s(This conversation's context was full, so it goes on in a new "
		           "session that starts from a summary of the earlier one.)",
		           text.len ? "\n\n" : "");
	}
	j->result_text = buf_steal(&text);
	j->result_detail = strdup(detail);
	j->result_messages = json_incref((json_t *)res->messages);
	j->result.text = j->result_text ? j->result_text : "";
	j->result.detail = j->result_detail ? j->result_detail : "";
	j->result.messages = j->result_messages;
	snprintf(j->result_model, sizeof j->result_model, "%s", res->model ? res->model : "");
	j->result.model = j->result_model;
	j->stage = RUN_FLUSH;
	if (transcript_flush(j->transcript, run_flushed, j) != SB_OK)
		run_flushed(j, SB_ERR_IO);
}

/* ---- the turn ---- */

static int run_chain(struct run_job *j)
{
	const struct agent_config *a = j->agent;

	j->n_chain = (a->model ? 1 : 0) + a->n_fallbacks;
	if (!j->n_chain)
		return SB_ERR_CONFIG;
	j->chain = calloc(j->n_chain, sizeof *j->chain);
	if (!j->chain)
		return SB_ERR_NOMEM;
	j->n_chain = 0;
	if (j->model_choice) {
		/* Chosen with /model: first, then the others in their order. */
		struct commands_models m;
		int i;

		commands_models_of(&m, a->model, (const char *const *)a->fallbacks, a->n_fallbacks);
		i = commands_models_find(&m, j->model_choice, strlen(j->model_choice));
		if (i >= 0) {
			j->chain[j->n_chain++] = m.v[i];
			for (size_t k = 0; k < m.n; k++)
				if ((int)k != i)
					j->chain[j->n_chain++] = m.v[k];
			return SB_OK;
		}
		log_warn("agent",
		         "the session's chosen model is no longer configured; using the "
		         "agent's primary",
		         LOG_S("session", j->session_key), LOG_S("model", j->model_choice));
	}
	if (a->model)
		j->chain[j->n_chain++] = a->model;
	for (size_t i = 0; i < a->n_fallbacks; i++)
		j->chain[j->n_chain++] = a->fallbacks[i];
	return SB_OK;
}

/* Whether a user message holds text (not only tool results). */
static bool run_has_text(const json_t *m)
{
	const json_t *b;
	size_t i;

	json_array_foreach(json_object_get(m, "content"), i, b)
	{
		const char *type = json_string_value(json_object_get(b, "type"));

		if (type && strcmp(type, "text") == 0)
			return true;
	}
	return false;
}

/* A redelivered message whose first run was cut short is in the history
 * already: the last user message with text (what follows it is that run's
 * work: tool calls, their results, maybe the whole reply). It must not be
 * added twice. Returns the index of that message, or -1. */
static bool run_has_block(const json_t *m, const char *text)
{
	const json_t *b;
	size_t k;

	json_array_foreach(json_object_get(m, "content"), k, b)
	{
		const char *t = json_string_value(json_object_get(b, "text"));

		if (t && strcmp(t, text) == 0)
			return true;
	}
	return false;
}

static long run_resumes_at(const struct run_job *j)
{
	size_t n = json_array_size(j->history), i;

	if (!j->redelivered)
		return -1;
	if (j->stamped && j->sends.run_id > 0) {
		/* The transcript names the inbox entries it holds: the message
		 * was recorded or it was not, whatever its text (the same text
		 * sent again is another entry). Where: the last user message
		 * holding it, its own or one it was steered into. */
		if (!run_recorded(j, j->sends.run_id))
			return -1;
		for (i = n; i-- > 0;) {
			const json_t *m = json_array_get(j->history, i);
			const char *role = json_string_value(json_object_get(m, "role"));

			if (role && strcmp(role, "user") == 0 && run_has_block(m, j->text))
				return (long)i;
		}
		return -1;
	}
	for (i = n; i-- > 0;) {
		const json_t *m = json_array_get(j->history, i);
		const char *role = json_string_value(json_object_get(m, "role"));
		const json_t *b;
		const char *first;
		char *text;
		bool same;

		if (!role || strcmp(role, "user") != 0 || !run_has_text(m))
			continue;
		/* The message's first text block is what was sent (notes, such
		 * as the date, follow it). */
		text = msg_text(m);
		same = text && strcmp(text, j->text) == 0;
		free(text);
		b = json_array_get(json_object_get(m, "content"), 0);
		first = json_string_value(json_object_get(b, "text"));
		same = same || (first && strcmp(first, j->text) == 0);
		return same ? (long)i : -1;
	}
	return -1;
}

static bool run_resumes(const struct run_job *j)
{
	return run_resumes_at(j) >= 0;
}

/* The first run of a redelivered message wrote its whole reply (the last
 * message, an assistant one without tool calls) but was killed before the
 * gateway committed it: the reply is the texts after the message, and no
 * model is asked again. Returns the reply (caller frees) or NULL. */
static char *run_recorded_reply(const struct run_job *j)
{
	long at = run_resumes_at(j);
	size_t n = json_array_size(j->history);
	const json_t *last = json_array_get(j->history, n - 1);
	const char *role = json_string_value(json_object_get(last, "role"));
	struct buf b;

	if (at < 0 || (size_t)at + 1 >= n || !role || strcmp(role, "assistant") != 0 ||
	    msg_tool_use_count(last) > 0)
		return NULL;
	buf_init(&b, (size_t)64 << 20);
	for (size_t i = (size_t)at + 1; i < n; i++) {
		const json_t *m = json_array_get(j->history, i);
		char *t;

		if (strcmp(json_string_value(json_object_get(m, "role")), "assistant") != 0)
			continue;
		t = msg_text(m);
		if (t && *t) {
			if (b.len)
				buf_puts(&b, "\n\n");
			buf_puts(&b, t);
		}
		free(t);
	}
	buf_puts(&b, "");
	return buf_steal(&b);
}

/* A resumed run's answer so far: the first attempt's assistant texts after
 * its last tool round (what its reply would have begun with), which a crash
 * kept from the user. NULL when none (caller frees). */
static char *run_partial_reply(const struct run_job *j)
{
	long at = run_resumes_at(j);
	size_t n = json_array_size(j->history);
	struct buf b;

	if (at < 0)
		return NULL;
	buf_init(&b, (size_t)64 << 20);
	for (size_t i = (size_t)at + 1; i < n; i++) {
		const json_t *m = json_array_get(j->history, i);
		const char *role = json_string_value(json_object_get(m, "role"));
		char *t;

		if (!role || strcmp(role, "assistant") != 0)
			continue;
		if (msg_tool_use_count(m) > 0) {
			buf_reset(&b);
			continue;
		}
		t = msg_text(m);
		if (t && *t) {
			if (b.len)
				buf_puts(&b, "\n\n");
			buf_puts(&b, t);
		}
		free(t);
	}
	if (!b.len) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

/* The date the model is told, at day granularity, in the agent's time
 * zone: "[Today is Monday, 30 November 2026 (Europe/Berlin, UTC+01:00).]".
 * The turn adds it to the new message only when the day changed, so the
 * cached prefix is not touched. */
static void run_date_note(const struct run_job *j, char *out, size_t size)
{
	static const char *const days[] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
	                                   "Thursday", "Friday", "Saturday"};
	static const char *const months[] = {"January",   "February", "March",    "April",
	                                     "May",       "June",     "July",     "August",
	                                     "September", "October",  "November", "December"};
	const char *name = j->agent->timezone ? j->agent->timezone : "local";
	const struct cron_tz *z = NULL;
	struct cron_tm tm;
	struct timespec ts;
	int32_t off;
	char zone[200];

	out[0] = '\0';
	if (cron_tz_get(name, &z) != SB_OK)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	cron_tz_to_tm(z, ts.tv_sec, &tm);
	off = cron_tz_offset(z, ts.tv_sec);
	if (strcmp(name, "local") == 0)
		snprintf(zone, sizeof zone, "the gateway's local time");
	else
		snprintf(zone, sizeof zone, "%s", name);
	if (tm.wday < 0 || tm.wday > 6 || tm.mon < 1 || tm.mon > 12)
		return;
	snprintf(out, size, "[Today is %s, %d %s %d (%s, UTC%c%02d:%02d).]", days[tm.wday], tm.mday,
	         months[tm.mon - 1], tm.year, zone, off < 0 ? '-' : '+',
	         (off < 0 ? -off : off) / 3600, (off < 0 ? -off : off) % 3600 / 60);
}

/* Records the workspace version the turn runs with: an event with every
 * file's hash, and a stamp on each of the turn's replies. */
static void run_stamp_workspace(struct run_job *j)
{
	json_t *full = workspace_version_json(&j->ws_version, true);
	json_t *brief = workspace_version_json(&j->ws_version, false);
	json_t *ev = full ? json_pack("{s:s,s:O}", "event", "workspace", "workspace", full) : NULL;

	if (!ev || !brief || transcript_append(j->transcript, "event", ev, NULL, 0) != SB_OK ||
	    transcript_set_stamp(j->transcript, "workspace", brief) != SB_OK)
		log_warn("agent", "cannot record the workspace version in the transcript",
		         LOG_S("path", j->path));
	json_decref(ev);
	json_decref(full);
	json_decref(brief);
}

/* The permission gates and the sandbox of this run, from the agent's
 * config and who is asking. */
static void run_gates(struct run_job *j)
{
	const struct agent_config *a = j->agent;
	const char *user_home = getenv("HOME");

	memset(&j->perms, 0, sizeof j->perms);
	j->perms.security = &j->cfg->security;
	j->perms.agent.profile = a->profile ? a->profile : PERM_PROFILE_CODING;
	j->perms.agent.rules = a->permissions;
	j->perms.agent.n_rules = a->n_permissions;
	j->perms.owner = permissions_is_owner(&j->cfg->security, j->channel, j->sender);
	j->perms.group = j->group;
	j->perms.channel = j->channel;
	j->perms.sender = j->sender;
	j->perms.home = j->cfg->home;
	j->perms.workspace = j->workspace;
	j->perms.approvals = j->r->opt.approvals;
	j->perms.approval_timeout_ms = j->cfg->security.approval_timeout_ms;

	memset(&j->sandbox, 0, sizeof j->sandbox);
	j->sandbox.mode = (enum sandbox_mode)a->sandbox;
	j->sandbox.network = a->sandbox_network;
	j->sandbox.memory_bytes = a->tool_memory;
	j->sandbox.max_processes = (int)a->tool_processes;
	j->sandbox.uid = (unsigned)j->cfg->security.sandbox_uid;
	j->sandbox.gid = (unsigned)j->cfg->security.sandbox_gid;
	/* What a tool process must not see: the gateway's home, config,
	 * store and secret files wherever they are, and the home of the
	 * user the gateway runs as. The sandbox's view is an allow-list, so
	 * these matter where they lie inside it (in the workspace, say). */
	j->sandbox.hide_more = (const char *const *)j->cfg->private_paths;
	j->sandbox.n_hide_more = j->cfg->n_private_paths;
	if (user_home && user_home[0] == '/' && user_home[1])
		j->sandbox.hide[j->sandbox.n_hide++] = user_home;
	j->sandbox.hide[j->sandbox.n_hide++] = "/root";
}

static void run_start_turn(struct run_job *j);
static void run_ask_window(struct run_job *j);
static bool run_agent_has_tool(const struct run_job *j, const char *name);

/* A memory write was committed: the replies from now on name the commit
 * (the transcript's "memory" stamp), so a reply leads to what was learnt. */
static void run_memory_committed(void *ud, const char *commit, const char *path)
{
	struct run_job *j = ud;
	json_t *st = json_pack("{s:s,s:s}", "commit", commit, "path", path);
	json_t *ev = json_pack("{s:s,s:s,s:s}", "event", "memory", "commit", commit, "path", path);

	if (!st || !ev || transcript_set_stamp(j->transcript, "memory", st) != SB_OK ||
	    transcript_append(j->transcript, "event", ev, NULL, 0) != SB_OK)
		log_warn("agent", "cannot record the memory commit in the transcript",
		         LOG_S("path", j->path), LOG_S("commit", commit));
	json_decref(st);
	json_decref(ev);
	log_info("agent", "memory committed", LOG_S("session", j->session_key), LOG_S("file", path),
	         LOG_S("commit", commit));
}

/* The number of this turn in the session: user messages with text so far,
 * this one included. */
static size_t run_turn_number(const struct run_job *j)
{
	size_t n = 0, i;
	const json_t *m;

	json_array_foreach(j->history, i, m)
	{
		const char *role = json_string_value(json_object_get(m, "role"));

		if (role && strcmp(role, "user") == 0 && run_has_text(m))
			n++;
	}
	return run_resumes(j) ? n : n + 1;
}

/* The memory tools' scope (docs/memory.md). */
static void run_memory(struct run_job *j)
{
	memset(&j->memory, 0, sizeof j->memory);
	if (FMT(j->memory_index, "%s/agents/%s/memory.sqlite", j->cfg->home, j->agent_id) != SB_OK)
		return;
	j->memory.index = j->memory_index;
	if (j->agent->memory.transcripts)
		j->memory.sessions = j->sessions_dir;
	j->memory.today = j->memory_today;
	j->memory.writable = j->perms.owner;
	j->memory.committed = run_memory_committed;
	j->memory.ud = j;
	snprintf(j->memory_label, sizeof j->memory_label, "session %s (%s), turn %zu",
	         j->session_key, j->session_id, run_turn_number(j));
	j->memory.session_label = j->memory_label;
}

/* The tools the agent's turn gets: its `tools` list, or every built-in
 * one (web_fetch only where web.fetch is on). */
static void run_tool_names(struct run_job *j, const char *const **names, size_t *n)
{
	const struct agent_config *a = j->agent;

	if (a->n_tools) {
		*names = (const char *const *)a->tools;
		*n = a->n_tools;
		return;
	}
	/* Every built-in tool; web_fetch only where web.fetch is on,
	 * web_search where web.search.url is set. */
	*n = 0;
	for (size_t i = 0; i < RUNNER_DEFAULT_TOOLS; i++)
		if ((a->web.fetch || strcmp(runner_default_tools[i], "web_fetch") != 0) &&
		    (a->web.search.url || strcmp(runner_default_tools[i], "web_search") != 0))
			j->tools[(*n)++] = runner_default_tools[i];
	*names = j->tools;
}

/* The agent's MCP tools are listed (or what could be listed): the turn
 * starts. */
static void run_mcp_ready(void *ud, struct mcp_catalog *cat)
{
	struct run_job *j = ud;

	j->mwait = NULL;
	j->mcp = cat;
	if (!cat)
		log_warn(
		    "runner",
		    "out of memory listing the agent's MCP tools; the run goes on without them",
		    LOG_S("agent", j->agent_id));
	run_start_turn(j);
}

/* The agent has MCP servers: their tools join the list (starting the
 * servers that have never listed them). True when the turn waits. */
static bool run_ask_mcp(struct run_job *j)
{
	const struct agent_config *a = j->agent;
	struct mcp_env env;

	if (j->mcp_asked)
		return false;
	if (!a->mcp.n_servers) {
		mcp_hub_forget(j->r->mcp, j->agent_id); /* (dropped by a reload) */
		return false;
	}
	j->mcp_asked = true;
	run_gates(j);
	memset(&env, 0, sizeof env);
	env.workspace = j->workspace;
	env.sandbox = &j->sandbox;
	env.host = j->r->opt.host;
	env.tool_timeout_ms = a->tool_timeout_ms;
	j->stage = RUN_MCP;
	if (mcp_hub_catalog(j->r->mcp, j->agent_id, &a->mcp, &env, run_mcp_ready, j, &j->mwait) !=
	    SB_OK) {
		j->mwait = NULL;
		log_warn("runner",
		         "cannot list the agent's MCP tools; the run goes on without them",
		         LOG_S("agent", j->agent_id));
		return false;
	}
	return true;
}

static void run_start_turn(struct run_job *j)
{
	const struct agent_config *a = j->agent;
	struct turn_options to;
	char date[300];
	int rc;

	if (j->aborted) {
		transcript_close(j->transcript);
		j->transcript = NULL;
		run_finish(j, SB_ERR_ABORTED, j->abort_why);
		return;
	}
	if (run_ask_mcp(j))
		return;
	if (j->repair) {
		/* The results of the tool calls a restart cut go into the file
		 * once, before anything of this run: from then on it loads
		 * paired without a repair. */
		json_t *ev = json_pack("{sssO}", "event", "repair", "edits", j->repair);

		SB_CRASH_POINT("runner.repair.write");
		if (!ev || transcript_append(j->transcript, "event", ev, NULL, 0) != SB_OK)
			log_warn("agent", "cannot record the repair of cut tool calls",
			         LOG_S("path", j->path));
		json_decref(ev);
		json_decref(j->repair);
		j->repair = NULL;
	}
	if (j->compact_only && json_array_size(j->history) == 0) {
		memset(&j->result, 0, sizeof j->result);
		j->result.end = TURN_END_TURN;
		j->result.text = "Nothing to compact: this session has no history yet.";
		j->result.detail = "";
		j->stage = RUN_FLUSH;
		if (transcript_flush(j->transcript, run_flushed, j) != SB_OK)
			run_flushed(j, SB_ERR_IO);
		return;
	}
	if (!j->compact_only && !j->handed_off && !run_steer_pending(j) &&
	    (j->result_text = run_recorded_reply(j)) != NULL) {
		log_info("agent", "the reply was recorded before a restart; delivering it",
		         LOG_S("session", j->session_key));
		memset(&j->result, 0, sizeof j->result);
		j->result.end = TURN_END_TURN;
		j->result.text = j->result_text;
		j->result.detail = "";
		j->stage = RUN_FLUSH;
		if (transcript_flush(j->transcript, run_flushed, j) != SB_OK)
			run_flushed(j, SB_ERR_IO);
		return;
	}
	if (!j->compact_only)
		run_stamp_workspace(j);
	if (j->handed_off && json_array_size(j->todo)) {
		/* The todo list goes on with the session. */
		json_t *ev = json_pack("{sssO}", "event", "todo", "items", j->todo);

		if (!ev || transcript_append(j->transcript, "event", ev, NULL, 0) != SB_OK)
			log_warn("agent", "cannot carry the todo list into the new session",
			         LOG_S("path", j->path));
		json_decref(ev);
	}
	{
		json_t *ev = json_pack("{sssIss}", "event", "context", "window",
		                       (json_int_t)j->window, "source", j->window_source);

		if (!ev || transcript_append(j->transcript, "event", ev, NULL, 0) != SB_OK)
			log_warn("agent", "cannot record the context window in the transcript",
			         LOG_S("path", j->path));
		json_decref(ev);
	}
	turn_budget_init(&j->budget, a->budget, NULL);
	memset(&to, 0, sizeof to);
	to.models = j->models;
	to.chain = j->chain;
	to.n_chain = j->n_chain;
	to.system = j->prompt.data;
	to.history = j->history;
	to.user_text = run_resumes(j) || j->compact_only ? NULL : j->text;
	to.compact_only = j->compact_only;
	/* Resumed: what the first attempt already answered goes first. */
	free(j->resume_prefix);
	j->resume_prefix = run_resumes(j) && !j->handed_off ? run_partial_reply(j) : NULL;
	to.inbox_id = j->sends.run_id;
	run_tool_names(j, &to.tools, &to.n_tools);
	to.tools_cache = j->r->tools;
	to.system_cache = j->r->system_tokens;
	to.extra_tools = mcp_catalog_tools(j->mcp, &to.n_extra_tools, &to.extra_key);
	if (a->web.fetch) {
		j->web.allow = &a->web.policy;
		j->web.max_bytes = (size_t)a->web.max_bytes;
		j->web.timeout_ms = a->web.timeout_ms;
		j->web.max_redirects = (int)a->web.max_redirects;
		to.tool_ctx.web = &j->web;
	}
	if (a->web.search.url) {
		j->search.url = a->web.search.url;
		j->search.max_results = (int)a->web.search.max_results;
		j->search.safesearch = a->web.search.safesearch;
		j->search.language = a->web.search.language;
		j->search.timeout_ms = a->web.search.timeout_ms;
		to.tool_ctx.search = &j->search;
	}
	to.tool_ctx.loop = j->r->opt.loop;
	to.tool_ctx.host = j->r->opt.host;
	to.tool_ctx.agent_id = j->agent_id;
	to.tool_ctx.session_key = j->session_key;
	to.tool_ctx.workspace = j->workspace;
	to.tool_ctx.timeout_ms = a->tool_timeout_ms;
	to.tool_ctx.channel = j->channel;
	to.tool_ctx.account = j->account;
	to.tool_ctx.target = j->target;
	/* A resumed run: the messages its first run queued count as sent. */
	if (run_resumes(j) && j->sends.n == 0 &&
	    tool_sends_from_history(&j->sends, &to.tool_ctx, j->history,
	                            (size_t)run_resumes_at(j) + 1) != SB_OK)
		log_warn("runner",
		         "cannot read the messages a cut run sent: a replay may send them again",
		         LOG_S("session", j->session_key));
	to.tool_ctx.sends = &j->sends;
	run_gates(j);
	run_memory(j);
	to.tool_ctx.memory = j->memory.index ? &j->memory : NULL;
	j->skills.home = j->skills_home[0] ? j->skills_home : NULL;
	j->skills.path = SPAWN_PATH;
	to.tool_ctx.skills = &j->skills;
	to.tool_ctx.perms = &j->perms;
	to.tool_ctx.sandbox = &j->sandbox;
	to.tool_ctx.private_paths = (const char *const *)j->cfg->private_paths;
	to.tool_ctx.n_private_paths = j->cfg->n_private_paths;
	to.max_turns = a->max_turns;
	to.budget = &j->budget;
	to.transcript = j->transcript;
	to.model_label = a->model;
	to.ev = j->ev;
	to.tool_ctx.results_dir = j->results_dir;
	to.tool_ctx.sessions_dir = j->sessions_dir;
	to.tool_ctx.session_id = j->session_id;
	to.context.limits.window = j->window;
	to.context.limits.trim_at = (int)a->context.trim_at;
	to.context.limits.trim_to = (int)a->context.trim_to;
	to.context.limits.archive_at = (int)a->context.archive_at;
	to.context.limits.summarize_at = (int)a->context.summarize_at;
	to.context.limits.block_at = (int)a->context.block_at;
	to.context.limits.keep_results = (size_t)a->context.keep_results;
	to.context.limits.keep_head = (size_t)a->context.keep_head;
	to.context.limits.keep_messages = (size_t)a->context.keep_messages;
	to.context.budget.tool_max = (size_t)a->context.tool_result_max;
	to.context.budget.batch_max = (size_t)a->context.batch_result_max;
	to.session = j->session;
	to.session.last_prompt = j->last_prompt;
	to.session.todo = j->todo;
	run_date_note(j, date, sizeof date);
	to.date_note = date[0] ? date : NULL;
	to.seed = j->seed;
	/* The silent memory turn needs the agent to have memory_write. */
	to.memory_flush = a->memory.flush && run_agent_has_tool(j, "memory_write");
	j->stage = RUN_TURN;
	rc = turn_start(&j->turn, &to, run_turn_done, j);
	if (rc) {
		transcript_close(j->transcript);
		j->transcript = NULL;
		run_finish(j, rc, "the turn could not start");
		return;
	}
	/* Steered in while the job prepared: seen at the first model call
	 * (those the history holds already are not added again). */
	j->steer_given = true;
	for (size_t i = 0; i < json_array_size(j->steer); i++) {
		const json_t *s = json_array_get(j->steer, i);
		int64_t id = json_integer_value(json_object_get(s, "inbox_id"));

		if (!run_recorded(j, id))
			turn_steer_from(j->turn, json_string_value(json_object_get(s, "text")), id);
	}
}

/* ---- the context window ---- */

static void run_window_known(void *ud, int64_t window, const char *source)
{
	struct run_job *j = ud;

	j->wwait = NULL;
	j->window = window;
	snprintf(j->window_source, sizeof j->window_source, "%s", source ? source : "");
	run_start_turn(j);
}

/* The agent's context.window, or what the model's provider says, or the
 * family table (models_window). */
static void run_ask_window(struct run_job *j)
{
	int rc = run_chain(j);

	if (rc) {
		transcript_close(j->transcript);
		j->transcript = NULL;
		run_finish(j, rc,
		           rc == SB_ERR_CONFIG ? "the agent has no model configured"
		                               : "out of memory");
		return;
	}
	j->stage = RUN_WINDOW;
	if (j->agent->context.window > 0) {
		j->window = j->agent->context.window;
		snprintf(j->window_source, sizeof j->window_source, "config");
		run_start_turn(j);
		return;
	}
	rc = models_window(j->models, j->chain[0], run_window_known, j, &j->wwait);
	if (rc != SB_OK) {
		j->wwait = NULL;
		run_window_known(j, MODELS_WINDOW_DEFAULT, "default");
	}
}

/* ---- prepare (thread pool) ---- */

/* Today's and yesterday's daily notes in the agent's time zone. */
static void run_memory_days(struct run_job *j)
{
	const char *name = j->agent->timezone ? j->agent->timezone : "local";
	const struct cron_tz *z = NULL;
	struct timespec ts;
	int32_t off = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (cron_tz_get(name, &z) == SB_OK)
		off = cron_tz_offset(z, ts.tv_sec);
	memory_daily_path((int64_t)ts.tv_sec, off, j->memory_today, sizeof j->memory_today);
	if (cron_tz_get(name, &z) == SB_OK)
		off = cron_tz_offset(z, ts.tv_sec - 86400);
	memory_daily_path((int64_t)ts.tv_sec - 86400, off, j->memory_yesterday,
	                  sizeof j->memory_yesterday);
}

/* The operator's main session sees yesterday's and today's notes after the
 * workspace files (never a group's or someone else's session, like
 * MEMORY.md). Read beneath the workspace; a missing note is left out. */
static int run_daily_notes(struct run_job *j)
{
	const char *days[2] = {j->memory_yesterday, j->memory_today};
	bool heading = false;
	int rc = SB_OK;

	j->n_notes = 0; /* a prepare step run again (a hand-off) counts afresh */
	if (!j->main_session || !permissions_is_owner(&j->cfg->security, j->channel, j->sender))
		return SB_OK;
	for (size_t i = 0; i < 2 && rc == SB_OK; i++) {
		char why[256], *text = NULL;
		int64_t total = 0;
		size_t n, max = (size_t)j->agent->bootstrap_max_chars;

		if (memory_get(j->workspace, days[i], 1, MEMORY_GET_LINES_MAX, &text, &total, why,
		               sizeof why) != SB_OK ||
		    !text || !text[0]) {
			free(text);
			continue;
		}
		n = strlen(text);
		if (max && n > max)
			n = prompt_utf8_cut(text, n, max); /* the start of the day is kept */
		j->notes[j->n_notes].name = days[i];
		j->notes[j->n_notes].bytes = strlen(text);
		j->notes[j->n_notes].kept = n;
		j->n_notes++;
		if (!heading) {
			rc = buf_puts(&j->prompt, "\n# Daily notes\n\nYour notes of yesterday and "
			                          "today (memory_write adds to today's).\n");
			heading = true;
		}
		if (rc == SB_OK)
			rc = buf_printf(&j->prompt, "\n## %s\n\n%.*s%s", days[i], (int)n, text,
			                text[n ? n - 1 : 0] == '\n' ? "" : "\n");
		free(text);
	}
	return rc;
}

/* Whether the agent's tools include name (the default list does). */
static bool run_agent_has_tool(const struct run_job *j, const char *name)
{
	if (!j->agent->n_tools)
		return true;
	for (size_t i = 0; i < j->agent->n_tools; i++)
		if (j->agent->tools[i] && strcmp(j->agent->tools[i], name) == 0)
			return true;
	return false;
}

/* The skills' names and descriptions, after the workspace files and
 * before the daily notes: they change seldom, so the prompt's cached
 * prefix keeps them (docs/skills.md). Only when skill_load is a tool. */
static int run_skills(struct run_job *j)
{
	struct skills_env e;
	struct skill_list l;
	int rc;

	if (FMT(j->skills_home, "%s/skills", j->cfg->home) != SB_OK)
		j->skills_home[0] = '\0';
	if (!run_agent_has_tool(j, "skill_load"))
		return SB_OK;
	memset(&e, 0, sizeof e);
	e.workspace = j->workspace;
	e.home = j->skills_home[0] ? j->skills_home : NULL;
	e.path = SPAWN_PATH;
	if ((rc = skills_scan(&e, &l)) != SB_OK)
		return rc;
	for (size_t i = 0; i < l.n; i++)
		if (l.v[i].error)
			log_warn("agent", "a skill cannot be used", LOG_S("skill", l.v[i].name),
			         LOG_S("source", skill_source_name(l.v[i].source)),
			         LOG_S("why", l.v[i].error));
	rc = skills_prompt(&l, &j->prompt);
	skill_list_free(&l);
	return rc;
}

/* The inbox ids the entries name (user messages, notes). */
static void run_collect_recorded(struct run_job *j, const json_t *entries)
{
	const json_t *e;
	size_t i;

	json_decref(j->recorded);
	j->recorded = json_object();
	j->stamped = false;
	json_array_foreach(entries, i, e)
	{
		json_int_t id = json_integer_value(json_object_get(e, "inbox_id"));
		char key[32];

		if (id <= 0)
			continue;
		j->stamped = true;
		snprintf(key, sizeof key, "%lld", (long long)id);
		if (j->recorded)
			json_object_set_new(j->recorded, key, json_true());
	}
}

static bool run_recorded(const struct run_job *j, int64_t inbox_id)
{
	char key[32];

	if (inbox_id <= 0 || !j->recorded)
		return false;
	snprintf(key, sizeof key, "%lld", (long long)inbox_id);
	return json_object_get(j->recorded, key) != NULL;
}

static void run_prepare_work(uv_work_t *w)
{
	struct run_job *j = w->data;
	struct transcript_loaded tl;
	struct prompt_options po;
	struct transcript_info ti;
	char dir[PATH_MAX];
	int rc;

	if (FMT(dir, "%s/agents/%s/sessions", j->cfg->home, j->agent_id) != SB_OK) {
		j->prep_rc = SB_ERR_TOOBIG;
		snprintf(j->prep_err, sizeof j->prep_err,
		         "the sessions directory's path is too long");
		return;
	}
	if (!j->preview_done && fs_mkdirs(dir, 0700)) {
		j->prep_rc = SB_ERR_IO;
		snprintf(j->prep_err, sizeof j->prep_err, "cannot create %s", dir);
		j->prep_public =
		    "the gateway cannot store this agent's sessions (its log says why)";
		return;
	}
	memset(&tl, 0, sizeof tl);
	/* A preview of a session not started yet has no transcript. */
	rc = j->preview_done && !*j->session_id ? SB_ERR_NOTFOUND : transcript_load(j->path, &tl);
	if (rc == SB_OK) {
		j->history = json_incref(tl.messages);
		/* What the session spent and broke so far (docs/context.md). */
		j->session.spent.input_tokens = tl.spent_input;
		j->session.spent.output_tokens = tl.spent_output;
		j->session.spent.cache_read_tokens = tl.spent_cache_read;
		j->session.spent.cache_write_tokens = tl.spent_cache_write;
		j->session.compact_failures = tl.compact_failures;
		j->session.compact_failed_ms = tl.compact_failed_ms;
		j->session.cache_breaks = tl.cache_breaks;
		j->session.memory_flushed = tl.memory_flushed;
		j->last_prompt = tl.last_prompt ? json_deep_copy(tl.last_prompt) : NULL;
		json_decref(j->todo);
		j->todo = tl.todo ? json_deep_copy(tl.todo) : NULL;
		if (tl.torn)
			log_warn("agent", "ignored a torn last line in the transcript",
			         LOG_S("path", j->path));
		json_decref(j->repair);
		j->repair = json_incref(tl.repair);
		run_collect_recorded(j, tl.entries);
		if (tl.repaired)
			log_warn("agent",
			         "tool calls cut by a restart got an error result in the history",
			         LOG_S("path", j->path), LOG_I("tool_calls", (int64_t)tl.repaired));
	} else if (rc == SB_ERR_NOTFOUND) {
		j->history = json_array();
	} else {
		j->prep_rc = rc;
		j->prep_public =
		    "this conversation's history cannot be read (the gateway's log says why)";
		snprintf(j->prep_err, sizeof j->prep_err, "cannot load the transcript %s: %s",
		         j->path, sb_strerror(rc));
		transcript_loaded_free(&tl);
		return;
	}
	transcript_loaded_free(&tl);
	if (!realpath(j->agent->workspace, j->workspace)) {
		j->prep_rc = SB_ERR_NOTFOUND;
		j->prep_public = "this agent's workspace is missing; the operator can find it with "
		                 "`switchboard config check`";
		snprintf(j->prep_err, sizeof j->prep_err,
		         "the workspace %s does not exist (create it with `switchboard init`, "
		         "or fix agents[].workspace)",
		         j->agent->workspace);
		return;
	}
	memset(&po, 0, sizeof po);
	po.agent_id = j->agent_id;
	po.main_session = j->main_session;
	po.new_workspace = true; /* BOOTSTRAP.md is used for as long as it exists */
	po.file_max_chars = (size_t)j->agent->bootstrap_max_chars;
	po.total_max_chars = (size_t)j->agent->bootstrap_total_max_chars;
	/* Built once, here: a file edited while the turn runs is seen by the
	 * next turn, never half-way through this one. */
	rc = workspace_snapshot(j->r->ws_cache, j->workspace, &po, &j->prompt, &j->ws_version);
	if (rc == SB_OK)
		rc = run_skills(j);
	if (rc == SB_OK)
		rc = run_daily_notes(j);
	if (rc) {
		j->prep_rc = rc;
		snprintf(j->prep_err, sizeof j->prep_err, "cannot build the system prompt: %s",
		         sb_strerror(rc));
		return;
	}
	if (j->preview_done)
		return; /* it writes nothing */
	ti.session_id = j->session_id;
	ti.session_key = j->session_key;
	ti.agent_id = j->agent_id;
	rc = transcript_open(&j->transcript, j->r->opt.loop, j->path, &ti);
	if (rc) {
		j->prep_rc = rc;
		snprintf(j->prep_err, sizeof j->prep_err, "cannot open the transcript %s", j->path);
		j->prep_public = "this conversation's history cannot be written (the gateway's log "
		                 "says why)";
	}
}

/* A preview's prepare step is done: what the turn would send, to its
 * callback. */
static void run_preview_finish(struct run_job *j)
{
	struct run_preview p;
	struct tokens_ledger ledger;
	const char *const *names;
	const json_t *lp = j->last_prompt;
	size_t n;
	int64_t tools_tokens = 0;
	json_t *tools;

	const struct tool_def *const *extra;
	size_t n_extra = 0;
	uint64_t extra_key = 0;

	run_tool_names(j, &names, &n);
	/* The MCP tools a run listed are shown; servers are not started for
	 * a preview. */
	extra = mcp_catalog_tools(j->mcp, &n_extra, &extra_key);
	tools = turn_tools_list(j->r->tools, names, n, extra, n_extra, extra_key, &tools_tokens);
	if (!tools) {
		run_finish(j, SB_ERR_NOMEM, "out of memory");
		return;
	}
	memset(&p, 0, sizeof p);
	p.agent_id = j->agent_id;
	p.session_key = j->session_key;
	p.session_id = j->session_id;
	p.new_session = !*j->session_id;
	p.workspace = j->workspace;
	p.system = j->prompt.data ? j->prompt.data : "";
	p.system_len = j->prompt.len;
	p.version = &j->ws_version;
	p.tools = tools;
	p.model = j->agent->model;
	p.history_messages = json_array_size(j->history);
	p.notes = j->notes;
	p.n_notes = j->n_notes;
	/* Sized the way the turn sizes its first request (turn.c). */
	tokens_ledger_init(&ledger);
	tokens_ledger_set_fixed_tokens(
	    &ledger, tokens_text_cache_estimate(j->r->system_tokens, p.system, p.system_len, NULL),
	    tools_tokens);
	if (lp && json_is_number(json_object_get(lp, "calibration")))
		tokens_ledger_set_scale(&ledger,
		                        json_number_value(json_object_get(lp, "calibration")));
	if (tokens_ledger_sync(&ledger, j->history) != SB_OK) {
		tokens_ledger_free(&ledger);
		json_decref(tools);
		run_finish(j, SB_ERR_NOMEM, "out of memory");
		return;
	}
	p.calibration = ledger.scale;
	p.tokens_system = tokens_ledger_text(&ledger, p.system, p.system_len);
	p.tokens_tools = (int64_t)((double)tools_tokens * ledger.scale + 0.5);
	p.tokens_total = tokens_ledger_total(&ledger);
	p.tokens_history = p.tokens_total - p.tokens_system - p.tokens_tools;
	if (p.tokens_history < 0)
		p.tokens_history = 0;
	tokens_ledger_free(&ledger);
	j->r->active--;
	j->preview_done(j->ud, SB_OK, NULL, &p);
	json_decref(tools);
	run_job_free(j);
}

static void run_prepare_done(uv_work_t *w, int status)
{
	struct run_job *j = w->data;

	if (status != 0 && !j->prep_rc) {
		j->prep_rc = SB_ERR_ABORTED;
		snprintf(j->prep_err, sizeof j->prep_err, "cancelled");
	}
	if (j->prep_rc) {
		if (j->transcript)
			transcript_close(j->transcript);
		j->transcript = NULL;
		if (j->preview_done) {
			log_warn("agent", "prompt preview failed", LOG_S("session", j->session_key),
			         LOG_S("error", j->prep_err));
			run_finish(j, j->prep_rc, j->prep_public ? j->prep_public : j->prep_err);
			return;
		}
		run_finish_detail(j, j->prep_rc, j->prep_public ? j->prep_public : j->prep_err,
		                  j->prep_err);
		return;
	}
	if (j->preview_done) {
		run_preview_finish(j);
		return;
	}
	run_ask_window(j);
}

static void run_prepare(struct run_job *j)
{
	j->stage = RUN_PREPARE;
	if (FMT(j->path, "%s/agents/%s/sessions/%s.jsonl", j->cfg->home, j->agent_id,
	        j->session_id) != SB_OK ||
	    FMT(j->sessions_dir, "%s/agents/%s/sessions", j->cfg->home, j->agent_id) != SB_OK ||
	    FMT(j->results_dir, "%s/agents/%s/tool-results/%s", j->cfg->home, j->agent_id,
	        j->session_id) != SB_OK) {
		run_finish(j, SB_ERR_TOOBIG, "the session's paths are too long");
		return;
	}
	run_memory_days(j); /* the time zones are the loop thread's */
	j->work.data = j;
	if (uv_queue_work(j->r->opt.loop, &j->work, run_prepare_work, run_prepare_done) != 0)
		run_finish(j, SB_ERR_IO, "cannot queue work");
}

/* ---- session ---- */

static void run_session_saved(void *ud, int rc)
{
	struct run_job *j = ud;

	if (rc) {
		run_finish(j, rc, "cannot record the session in the store");
		return;
	}
	if (j->new_session && !*j->text) {
		/* "/new" alone: the fresh session is all that was asked for. */
		memset(&j->result, 0, sizeof j->result);
		j->result.end = TURN_END_TURN;
		j->result.text = "Started a new session.";
		j->result.detail = "";
		run_finish(j, SB_OK, NULL);
		return;
	}
	run_prepare(j);
}

static void run_session_found(void *ud, int rc, const struct store_session *s)
{
	struct run_job *j = ud;
	struct store_session ns;
	int prc;

	if (rc == SB_OK && s && s->meta) {
		free(j->model_choice);
		j->model_choice = commands_session_model(s->meta);
	}
	if (j->compact_only && (rc == SB_ERR_NOTFOUND || (rc == SB_OK && (!s || !s->session_id)))) {
		memset(&j->result, 0, sizeof j->result);
		j->result.end = TURN_END_TURN;
		j->result.text = "Nothing to compact: this session has no history yet.";
		j->result.detail = "";
		run_finish(j, SB_OK, NULL);
		return;
	}
	/* /compact is no activity: it never starts a session of its own. */
	if (rc == SB_OK && s && s->session_id && !j->new_session && !j->compact_only &&
	    run_expired(j, s)) {
		log_info("agent", "session expired by its reset policy; starting a new one",
		         LOG_S("session", j->session_key),
		         LOG_S("mode", j->reset.mode == SESSION_RESET_DAILY ? "daily" : "idle"));
		j->new_session = true;
	}
	if (rc == SB_OK && s && s->session_id && !j->new_session) {
		/* Cut, it would name another transcript. */
		if (FMT(j->session_id, "%s", s->session_id) != SB_OK) {
			run_finish(j, SB_ERR_TOOBIG, "the stored session id is too long");
			return;
		}
		run_prepare(j);
		return;
	}
	if (rc != SB_OK && rc != SB_ERR_NOTFOUND) {
		run_finish(j, rc, "cannot read the session from the store");
		return;
	}
	if (j->preview_done) {
		/* The next message would start a session: nothing to create. */
		j->session_id[0] = '\0';
		run_prepare(j);
		return;
	}
	if (rc == SB_ERR_NOTFOUND && !j->new_session && *j->text && j->sends.run_id > 0 &&
	    j->received_at > 0) {
		/* A first message: its session is recorded with the reply, in
		 * the reply's commit, not in one of its own before the run. Its
		 * id comes from the message, so that a run cut short before that
		 * commit finds its transcript again when the message runs
		 * again. */
		transcript_session_id_for(j->session_id, sizeof j->session_id, j->session_key,
		                          j->sends.run_id, j->received_at);
		j->session_unsaved = true;
		run_prepare(j);
		return;
	}
	transcript_new_session_id(j->session_id, sizeof j->session_id);
	memset(&ns, 0, sizeof ns);
	ns.key = j->session_key;
	ns.agent_id = j->agent_id;
	ns.session_id = j->session_id;
	prc = store_session_put(j->r->opt.store, &ns, run_session_saved, j);
	if (prc)
		run_finish(j, prc, "cannot record the session in the store");
}

static char *run_dup(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* A new job for req, not started yet. */
static int run_job_new(struct runner *r, const struct run_request *req, struct run_job **out)
{
	const struct agent_config *a;
	struct run_job *j;

	*out = NULL;
	j = calloc(1, sizeof *j);
	if (!j)
		return SB_ERR_NOMEM;
	j->r = r;
	j->models = r->opt.acquire(r->opt.ud, &j->cfg, &j->token);
	a = j->cfg ? config_agent(j->cfg, req->agent_id) : NULL;
	if (!a || !j->models) {
		run_job_free(j);
		return a ? SB_ERR_AGAIN : SB_ERR_NOTFOUND;
	}
	j->agent = a;
	j->agent_id = run_dup(req->agent_id);
	j->session_key = run_dup(req->session_key);
	j->text = run_dup(req->text ? req->text : "");
	j->channel = run_dup(req->channel);
	j->account = run_dup(req->account);
	j->target = run_dup(req->target);
	j->sender = run_dup(req->sender);
	j->group = req->group;
	j->main_session = req->main_session;
	j->compact_only = req->compact_only;
	j->redelivered = req->redelivered && !req->compact_only;
	j->sends.run_id = req->inbox_id;
	j->received_at = req->received_at;
	j->new_session = req->new_session;
	j->reset = req->reset;
	j->ev = req->ev;
	buf_init(&j->prompt, RUNNER_PROMPT_MAX);
	if (!j->agent_id || !j->session_key || !j->text) {
		run_job_free(j);
		return SB_ERR_NOMEM;
	}
	*out = j;
	return SB_OK;
}

int runner_run(struct runner *r, const struct run_request *req, run_done_cb done, void *ud,
               struct run_job **out)
{
	struct run_job *j;
	int rc;

	if (out)
		*out = NULL;
	if (!req->session_key || !req->text || !done ||
	    (!*req->text && !req->new_session && !req->compact_only))
		return SB_ERR_INVAL;
	if ((rc = run_job_new(r, req, &j)) != SB_OK)
		return rc;
	j->done = done;
	j->ud = ud;
	rc = store_session_get(r->opt.store, j->session_key, run_session_found, j);
	if (rc) {
		run_job_free(j);
		return rc;
	}
	r->active++;
	if (out)
		*out = j;
	return SB_OK;
}

int runner_preview(struct runner *r, const struct run_request *req, run_preview_cb done, void *ud)
{
	struct run_job *j;
	int rc;

	if (!req->session_key || !req->agent_id || !done)
		return SB_ERR_INVAL;
	if ((rc = run_job_new(r, req, &j)) != SB_OK)
		return rc;
	j->preview_done = done;
	j->ud = ud;
	j->new_session = false; /* a preview never starts one */
	rc = store_session_get(r->opt.store, j->session_key, run_session_found, j);
	if (rc) {
		run_job_free(j);
		return rc;
	}
	r->active++;
	return SB_OK;
}

bool runner_stoppable(const struct run_job *j)
{
	return j && !j->aborted && j->stage < RUN_FLUSH;
}

void runner_abort(struct run_job *j, const char *why)
{
	if (!j || j->aborted || j->stage >= RUN_FLUSH)
		return;
	j->aborted = true;
	j->abort_why = strdup(why ? why : "aborted");
	if (j->stage == RUN_TURN && j->turn)
		turn_abort(j->turn, j->abort_why);
	else if (j->stage == RUN_WINDOW && j->wwait) {
		models_window_cancel(j->wwait);
		j->wwait = NULL;
		run_start_turn(j); /* sees the flag and finishes */
	} else if (j->stage == RUN_MCP && j->mwait) {
		mcp_wait_cancel(j->mwait);
		j->mwait = NULL;
		run_start_turn(j); /* sees the flag and finishes */
	}
	/* Earlier stages notice the flag when their step completes. */
}

int runner_steer_from(struct run_job *j, const char *text, int64_t inbox_id)
{
	json_t *s;

	if (!j || j->aborted || j->stage > RUN_TURN)
		return SB_ERR_AGAIN;
	if (j->stage == RUN_TURN && j->turn) {
		/* Redelivered after a crash, and the history has it already
		 * (steered into this run's first attempt): answered by this
		 * run without being added twice. */
		if (run_recorded(j, inbox_id))
			return SB_OK;
		return turn_steer_from(j->turn, text, inbox_id);
	}
	/* Still preparing: held until the turn starts. */
	if (!j->steer && !(j->steer = json_array()))
		return SB_ERR_NOMEM;
	s = json_pack("{sssI}", "text", text ? text : "", "inbox_id", (json_int_t)inbox_id);
	return !s || json_array_append_new(j->steer, s) ? SB_ERR_NOMEM : SB_OK;
}

int runner_steer(struct run_job *j, const char *text)
{
	return runner_steer_from(j, text, 0);
}

/* Texts steered in while the job prepared that the history lacks. */
static bool run_steer_pending(const struct run_job *j)
{
	for (size_t i = 0; i < json_array_size(j->steer); i++)
		if (!run_recorded(j, json_integer_value(
		                         json_object_get(json_array_get(j->steer, i), "inbox_id"))))
			return true;
	return false;
}
