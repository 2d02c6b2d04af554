/*
 * executor.h - runs the tool calls of one assistant message.
 *
 * Calls run in the order the model gave them, under one rule (the seeds'
 * concurrency matrix): consecutive calls that are concurrency-safe for their
 * input run together (at most max_parallel at once); any other call runs
 * alone, after everything before it finished and before anything after it
 * starts. So a safe call never runs while an unsafe one runs.
 *
 * Every tool_use gets exactly one tool_result, in order, on every path:
 * unknown or disallowed tool, invalid input (the schema error), tool failure,
 * timeout, and abort (calls not started and calls cancelled get an error
 * result saying so). Results longer than the tool's budget are cut with a
 * note of what was cut.
 *
 * When the context carries permissions (ctx->perms, agents/safety/permissions.h),
 * every call passes the gates first: a denial is the call's error result
 * ("permission denied: why"), an ask waits for the operator
 * (agents/safety/approvals.h) unless an earlier scope approval covers it, and the
 * tool gets the rewritten input (resolved paths). The output of tools that
 * return outside text (tool_def.untrusted_output) is labelled untrusted.
 *
 * Loop thread only.
 */
#ifndef SB_AGENTS_EXECUTOR_H
#define SB_AGENTS_EXECUTOR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "agents/tool.h"

#define EXECUTOR_MAX_PARALLEL 10

struct executor;

struct executor_events {
	void *ud;
	void (*tool_start)(void *ud, const char *id, const char *name, const json_t *input);
	void (*tool_end)(void *ud, const char *id, const char *name, bool is_error,
	                 const char *content, double seconds);
};

struct executor_options {
	const struct tool_ctx *ctx; /* borrowed until done */
	/* The tools that calls are looked up in (borrowed until done); NULL = the
	 * built-in ones (tool_find). Lets a caller add tools or wrap them. */
	const struct tool_def *const *tools;
	size_t n_tools;
	const char *const *allowed; /* tool names the agent may use; NULL = all */
	size_t n_allowed;
	size_t max_parallel;              /* 0 = EXECUTOR_MAX_PARALLEL */
	const struct executor_events *ev; /* may be NULL */
	/* Finalises each result before it enters the context (the output
	 * budget, budget.h's budget_finalise): takes content (valid UTF-8),
	 * returns what is kept, NULL when out of memory. NULL hook: results are
	 * cut to the tool's max_result_chars. */
	char *(*finalise)(void *ud, const struct tool_def *def, const char *id, char *content);
	void *finalise_ud;
	/* Calls that must not run (borrowed until done; may be NULL): an
	 * object mapping a tool_use id to the error result it gets instead
	 * (a call the output-token limit cut, say). Read when each call is
	 * prepared, so a streaming executor's caller may fill it in up to
	 * executor_stream_end. */
	const json_t *refused;
};

/* results: a new user message holding one tool_result per tool_use of the
 * assistant message, in order (handed over: the callee decrefs). rc is SB_OK,
 * or SB_ERR_ABORTED when executor_abort ended it (results are complete all
 * the same); SB_ERR_NOMEM with results NULL if the message could not be
 * built. The executor frees itself after done returns: the struct executor
 * pointer is invalid from the moment done runs. */
typedef void (*executor_done_cb)(void *ud, int rc, json_t *results);

/* Starts running the tool_use blocks of assistant_msg (borrowed until done).
 * opt is copied; what it points to (ctx, tools, allowed, ev) is borrowed
 * until done.
 * done runs later, never from inside this call. A message without tool_use
 * blocks, or with one that lacks a string id or name, is SB_ERR_INVAL;
 * SB_ERR_NOMEM. On any error done never runs. *out (may be NULL) is for
 * executor_abort until done runs. Tool results are text cut to the tool's
 * max_result_chars (bytes, on a character boundary) and made valid UTF-8
 * (invalid bytes and NULs become U+FFFD). tool_start/tool_end events come
 * for every call that started (also those refused before running); calls
 * skipped by an abort have neither. */
int executor_run(const json_t *assistant_msg, const struct executor_options *opt,
                 executor_done_cb done, void *ud, struct executor **out);

/* The streaming executor (the seeds' "tools start while the answer
 * streams"): calls are added one by one as the model's answer completes
 * them, and run at once when they may: a call that is read-only and
 * concurrency-safe for its input (tool_def.read_only and concurrency_safe;
 * refused calls count as such), while every call before it in the answer
 * is one too. Anything else waits for executor_stream_end, so the order
 * and the concurrency rule are exactly those of executor_run.
 *
 * executor_stream_new: no calls yet; opt as for executor_run. done runs only
 * after executor_stream_end (or executor_abort). SB_OK, SB_ERR_INVAL,
 * SB_ERR_NOMEM. */
int executor_stream_new(const struct executor_options *opt, executor_done_cb done, void *ud,
                        struct executor **out);

/* Adds one complete tool_use block (copied). SB_OK; SB_ERR_INVAL (no string
 * id or name, a duplicate id, already ended); SB_ERR_NOMEM. May run
 * tool_start/tool_end events (a refused call) before it returns, never
 * done. */
int executor_stream_add(struct executor *ex, const json_t *block);

/* The answer is complete: assistant_msg (borrowed until done) holds every
 * tool_use, the added ones first, in the order added, then those still to
 * come, which are added now; the rest runs as executor_run would. done runs
 * later, never from inside this call. SB_ERR_INVAL when the message does not
 * start with the added calls (nothing changes then: cancel or abort the
 * executor). */
int executor_stream_end(struct executor *ex, const json_t *assistant_msg);

/* Drops the executor without an answer: running calls are cancelled, done
 * never runs (a streamed answer that failed and is retried). Tools that
 * started have had their tool_start events (and tool_end, as they end).
 * NULL is a no-op. */
void executor_cancel(struct executor *ex);

/* Cancels running calls and skips the rest; every call still gets its result
 * ("aborted: why"). done runs before this returns (ex is invalid then). A
 * no-op once done has run (from inside done, say). */
void executor_abort(struct executor *ex, const char *why);

/* Validates input against a JSON Schema (the subset tools use: type, properties,
 * required, additionalProperties, items, enum, minimum, maximum, minLength,
 * maxLength). Returns SB_OK or SB_ERR_INVAL with a message for the model in
 * why, such as `"path": expected a string`. */
int tool_schema_validate(const json_t *schema, const json_t *input, char *why, size_t size);

#endif
