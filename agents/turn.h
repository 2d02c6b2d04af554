/*
 * turn.h - one agent run: the model/tool loop as an explicit state machine
 * on the loop thread.
 *
 * A run starts from the session's history plus the new user message and
 * calls the model; while the model asks for tools it runs them (executor.h)
 * and calls the model again with their results. Every transition has a
 * recorded reason (tool use, retry after a provider error, continuation after
 * the output-token limit, ...), and the run ends with one terminal reason:
 * end_turn, max_turns, budget_exhausted, aborted, error.
 *
 * Invariant: every tool_use the model emits gets exactly one tool_result in
 * the next message, on every exit path (tool error, timeout, abort, provider
 * failure mid-run, shutdown). On abort or failure after tool calls were
 * emitted, the missing results are written as error results before the run
 * ends, so the transcript is always consistent and loadable.
 *
 * Loop thread only.
 */
#ifndef SB_AGENTS_TURN_H
#define SB_AGENTS_TURN_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agents/context/budget.h"
#include "agents/context/compact.h"
#include "agents/models.h"
#include "agents/tool.h"
#include "agents/transcript.h"

enum turn_state {
	TURN_STARTING = 0,
	TURN_CALLING_MODEL,
	TURN_RUNNING_TOOLS,
	TURN_COMPACTING,
	TURN_DONE,
};

enum turn_end {
	TURN_END_TURN = 0,         /* "end_turn": the model finished */
	TURN_END_MAX_TURNS,        /* "max_turns" */
	TURN_END_BUDGET_EXHAUSTED, /* "budget_exhausted" (after the grace call) */
	TURN_END_ABORTED,          /* "aborted" */
	TURN_END_ERROR,            /* "error" */
};

const char *turn_state_name(enum turn_state s);
const char *turn_end_name(enum turn_end e);

/* An iteration budget shared by a run and the runs it starts (sub-runs point
 * at their parent). Each model call consumes one unit from every level;
 * steps that should not count are refunded. When a run finds its budget
 * spent, the model gets one grace call to wrap up: a note asks it not to use
 * tools (the tool list is still sent, so the request prefix stays cacheable
 * and the API accepts the tool_use blocks in the history); tool calls it makes
 * anyway get error results and the run ends budget_exhausted. */
struct turn_budget {
	int64_t limit;
	int64_t used;
	bool grace_used;
	struct turn_budget *parent;
};

void turn_budget_init(struct turn_budget *b, int64_t limit, struct turn_budget *parent);
/* Takes one unit from b and its ancestors; false (nothing taken) if any is spent. */
bool turn_budget_consume(struct turn_budget *b);
void turn_budget_refund(struct turn_budget *b, int64_t n);

struct turn_events {
	void *ud;
	void (*text_delta)(void *ud, const char *text, size_t len);
	void (*tool_start)(void *ud, const char *id, const char *name, const json_t *input);
	void (*tool_end)(void *ud, const char *id, const char *name, bool is_error,
	                 const char *content, double seconds);
	void (*state)(void *ud, enum turn_state from, enum turn_state to, const char *reason);
};

/* Why a request's prefix (system prompt, tool list, earlier messages)
 * differs from the previous call's, so the provider's prompt cache misses. */
enum turn_cache_break {
	TURN_CACHE_SYSTEM = 0, /* "system_prompt_changed" (a workspace file changed) */
	TURN_CACHE_TOOLS,      /* "tools_changed" */
	TURN_CACHE_COMPACTION, /* "compaction" */
	TURN_CACHE_HISTORY,    /* "history_changed" (anything else) */
	TURN_CACHE_BREAK_COUNT,
};

const char *turn_cache_break_name(enum turn_cache_break r);

/* What the session's transcript says so far (transcript_loaded). */
struct turn_session {
	struct model_usage spent;  /* tokens spent by the session before this run */
	int compact_failures;      /* consecutive failed summaries */
	int64_t compact_failed_ms; /* when the last of them failed (unix ms) */
	int64_t cache_breaks;
	const json_t *last_prompt; /* the last "prompt" event (borrowed), or NULL */
	const json_t *todo;        /* the session's todo list (borrowed), or NULL */
	/* The silent memory turn ran in this compaction cycle already (a
	 * "memory_flush" event since the last compaction of level 2 or 3). */
	bool memory_flushed;
};

/* Context levels and output budgets (compact.h, budget.h). A zero window
 * means the defaults of compact_limits_default. */
struct turn_context {
	struct compact_limits limits;
	struct budget_limits budget;
};

/* What a run derives from its tool list and would otherwise rebuild at every
 * start: the list's JSON (tool_list_json_new), its fingerprint in the
 * "prompt" event and its token estimate. One entry per set of tools, at most
 * TURN_TOOLS_CACHE_MAX (past that the least recently used goes). The
 * built-in tools never change while the process runs; a set with extra
 * tools is keyed by their fingerprint too, and turn_tools_cache_drop
 * forgets one whose server said its list changed.
 * Loop thread only. */
struct turn_tools_cache;

#define TURN_TOOLS_CACHE_MAX 32

/* *out: an empty cache. SB_OK or SB_ERR_NOMEM. */
int turn_tools_cache_new(struct turn_tools_cache **out);
/* Frees c; runs still holding an entry's JSON keep their reference. NULL is a no-op. */
void turn_tools_cache_free(struct turn_tools_cache *c);
/* The cached tool list for names (turn_options.tools/n_tools): a borrowed
 * reference valid until c is freed, or NULL when out of memory or c is full.
 * *hash receives its fingerprint (the "prompt" event's "tools") and *tokens
 * its tokens_estimate_json; either may be NULL. */
const json_t *turn_tools_cache_get(struct turn_tools_cache *c, const char *const *names, size_t n,
                                   uint64_t *hash, int64_t *tokens);
/* Drops the entries built with extra tools of fingerprint extra_key (an MCP
 * server's list changed): the next run builds its list again. Returns how
 * many went. */
size_t turn_tools_cache_drop(struct turn_tools_cache *c, uint64_t extra_key);

/* The tool list a turn started with these options sends to the model (the
 * cache's, or one of its own when c is NULL or full), a new reference, NULL
 * when out of memory; *tokens (may be NULL) its tokens_estimate_json. The
 * same list turn_start uses (extra: the agent's MCP tools, extra_key their
 * fingerprint): `switchboard prompt` shows it. */
json_t *turn_tools_list(struct turn_tools_cache *c, const char *const *names, size_t n,
                        const struct tool_def *const *extra, size_t n_extra, uint64_t extra_key,
                        int64_t *tokens);

struct turn_options {
	struct models *models;
	const char *const *chain; /* "provider/model" names: model then fallbacks */
	size_t n_chain;
	const char *system;       /* the system prompt (borrowed until done) */
	const json_t *history;    /* earlier messages (borrowed; copied at start) */
	const char *user_text;    /* the new user message */
	/* The inbox entry user_text came from (0: none): its transcript entry
	 * carries "inbox_id", so that a redelivery after a crash finds it. */
	int64_t inbox_id;
	const char *const *tools; /* tool names the agent may use; NULL = all */
	size_t n_tools;
	struct turn_tools_cache *tools_cache; /* borrowed; NULL = build the list per run */
	/* The system prompt's estimate, looked up here first (loop thread
	 * only); borrowed; NULL = estimated per run. */
	struct tokens_text_cache *system_cache;
	/* Tools besides the built-in ones (the agent's MCP servers',
	 * agents/mcp/mcp.h): sorted by name, none named like a built-in one,
	 * borrowed until done. Always offered and allowed (the gates still
	 * run). extra_key fingerprints the set for tools_cache. */
	const struct tool_def *const *extra_tools;
	size_t n_extra_tools;
	uint64_t extra_key;
	struct tool_ctx tool_ctx; /* copied; its strings borrowed until done */
	int64_t max_turns;
	int max_tokens;
	struct turn_budget *budget;    /* borrowed; NULL = no budget */
	struct transcript *transcript; /* borrowed; NULL = none */
	const char *model_label;       /* for the transcript; may be NULL */
	const struct turn_events *ev;  /* may be NULL */
	/* Output budgets and compaction: the result store and archives are
	 * tool_ctx.results_dir / sessions_dir (NULL: results are cut, no
	 * archive). */
	struct turn_context context;
	struct turn_session session;
	/* A note with today's date and time zone ("[Today is ...]", day
	 * granularity): added to the new user message when the history does
	 * not hold the same note already, so the model knows the date and the
	 * cached prefix changes at most once a day, and only in the newest
	 * message. NULL: none. */
	const char *date_note;
	/* Text put before the user text in the new user message: the summary
	 * a session handed off with (see turn_result.handoff). NULL: none. */
	const char *seed;
	/* The silent memory turn before compaction (docs/memory.md): when the
	 * context reaches the first level that takes messages out of it
	 * (archive_at or summarize_at) and the session may write memory
	 * (tool_ctx.memory->writable), once per compaction cycle, the run
	 * first records a "memory_flush" event (written before anything
	 * else happens), then runs a nested run on the same history plus a
	 * note asking the model to save what it must keep with the memory
	 * tools and to answer NO_REPLY. That run records nothing in the
	 * transcript but its events, streams nothing, and its answer is
	 * dropped: nothing of it reaches the chat or the history. */
	bool memory_flush;
	/* A run that never compacts (the silent memory turn itself): no
	 * level runs, and "prompt too long" ends it with an error. */
	bool no_compaction;
	/* Compact the history now (every level, as when the provider says the
	 * prompt is too long) and end without a model turn; user_text should
	 * be NULL. The result's context_before and context_tokens are the
	 * estimates before and after; a "compacted" event records the latter. */
	bool compact_only;
};

struct turn_result {
	enum turn_end end;
	const char *detail;       /* why, in words (the error, the abort reason) */
	const char *text;         /* the final assistant text ("" when none) */
	const json_t *messages;   /* the messages this run added, in order */
	struct model_usage usage; /* summed over the run's model calls */
	int model_calls;
	int tool_calls;
	const char *model; /* "provider/model" of the last answer ("" before one) */
	/* context bookkeeping */
	struct model_usage session_usage; /* the session's, this run included */
	int compactions[3];               /* by level - 1 */
	int compaction_failures;          /* failed summaries in this run */
	int reactive_retries;             /* level 4 */
	int results_persisted;            /* tool results saved to the store */
	int cache_breaks[TURN_CACHE_BREAK_COUNT];
	int64_t context_tokens; /* the estimate of the last request */
	int64_t context_before; /* compact_only: the estimate before compacting */
	int budget_refunds;     /* rounds that only ran code (refunded) */
	int bad_calls;          /* tool calls cut off or not valid JSON */
	bool final_call;        /* a limit was reached and the model wrapped up */
	/* The context is full and compaction could not make room (end error):
	 * the session should go on in a new one, seeded with handoff_summary
	 * (the earlier summary if any, the recent messages, the todo list). */
	bool handoff;
	const char *handoff_summary;
	const json_t *todo; /* the session's todo list at the end (borrowed) */
	/* Steered texts no model call carried (the run ended first: an
	 * error, an abort, the time limit): [{"text", "inbox_id"}], borrowed.
	 * They were not answered; the caller carries them into a next run. */
	const json_t *unsent;
};

typedef void (*turn_done_cb)(void *ud, const struct turn_result *r);

struct turn;

/* Starts a run; done runs once, later (never from inside this call); the
 * turn frees itself after done returns. */
int turn_start(struct turn **out, const struct turn_options *opt, turn_done_cb done, void *ud);

/* Aborts the run: the model call or the tools in flight are cancelled (child
 * processes die), missing tool results are filled in, done runs (end
 * aborted) before this returns. */
void turn_abort(struct turn *t, const char *why);

/* Adds a user message that the run sees at its next model call (the steer
 * queue mode). */
int turn_steer(struct turn *t, const char *text);
/* The same, for the text of inbox entry inbox_id: recorded with it (the
 * "note" event or the new user message carries "inbox_id"). */
int turn_steer_from(struct turn *t, const char *text, int64_t inbox_id);

enum turn_state turn_state_of(const struct turn *t);

#endif
