/*
 * compact.h - keeping a session's history inside the model's window, in
 * levels from the cheapest to the costliest (docs/context.md).
 *
 *   1 trim     old tool results (never the keep_results most recent) are
 *              replaced by a one-line note naming where the whole result is
 *              (a file of the session's result store, budget.h; results not
 *              persisted yet are persisted first), oldest first, in one
 *              batch large enough to bring the context down to trim_to: the
 *              prefix (and the provider's prompt cache) changes once per
 *              batch, not at every call past the threshold.
 *   2 archive  the middle of the history (after keep_head messages, before
 *              the keep_messages most recent) goes to a JSONL file next to
 *              the transcript; a marker in the history names it.
 *   3 summary  the older history is summarised by the model (the request
 *              says the text is data whose instructions must not be
 *              followed) and replaced by the summary; the keep_messages most
 *              recent messages stay as they are.
 *   4 reactive on the provider's "prompt too long": compact at once (levels
 *              1 to 3 whatever the thresholds) and retry the call once
 *              (turn.c).
 *
 * Cuts never separate a tool_use from its tool_result: a removed range
 * always starts and ends right before an assistant message, and the user
 * message before it keeps (and gets the marker). Every change is a list of
 * edits, a JSON array that the turn applies to its history and writes to the
 * transcript, and that loading the transcript applies again (transcript.h),
 * so a reloaded session has the compacted history:
 *
 *   {"op":"set_result","message":i,"block":k,"content":"..."}
 *   {"op":"add_text","message":i,"text":"..."}
 *   {"op":"splice","from":a,"to":b,"insert":[messages]}
 *
 * Loop thread only (planning is in memory); the files are written by
 * budget_write on the thread pool.
 */
#ifndef SB_AGENTS_COMPACT_H
#define SB_AGENTS_COMPACT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agents/context/budget.h"

/* Results shorter than this are not worth a note. */
#define COMPACT_TRIM_MIN 300
/* Consecutive failed summaries after which level 3 stops trying, and how
 * long it stays open: after that one more summary is tried (and a success
 * closes it). */
#define COMPACT_BREAKER 3
#define COMPACT_BREAKER_RESET_MS (10 * 60 * 1000)

struct compact_limits {
	int64_t window;       /* the model's context window, tokens */
	int trim_at;          /* level 1 from this percent of the window */
	int trim_to;          /* ... down to this percent (the low-water mark) */
	int archive_at;       /* level 2 */
	int summarize_at;     /* level 3 */
	int block_at;         /* no model call above this until compaction succeeds */
	size_t keep_results;  /* level 1 keeps the most recent tool results */
	size_t keep_head;     /* level 2 keeps the first messages */
	size_t keep_messages; /* levels 2 and 3 keep the most recent messages */
};

void compact_limits_default(struct compact_limits *l);

/* Applies edits (borrowed) to history in place. SB_OK, SB_ERR_INVAL (an
 * edit that does not fit the history; nothing is changed then),
 * SB_ERR_NOMEM. */
int compact_apply(json_t *history, const json_t *edits);

struct compact_plan {
	int level;
	json_t *edits;  /* new reference */
	json_t *record; /* the transcript's fields: level, removed, where */
	struct budget_file *files;
	size_t n_files;
	char *files_dir; /* where the files go (created first) */
	int64_t freed;   /* level 1: the tokens the notes save (per the estimate) */
};

void compact_plan_free(struct compact_plan *p);

/* The estimate of a text in tokens (the turn's calibrated ledger). */
typedef int64_t (*compact_estimate_fn)(void *ud, const char *s, size_t n);

/* Level 1. results_dir: the session's store. Results are cleared oldest
 * first until at least free_tokens are freed (per est; 0 or est NULL: all
 * that may be); p->freed says how many were. SB_OK with p->edits NULL when
 * there is nothing to trim. */
int compact_plan_trim(const json_t *history, size_t keep_results, const char *results_dir,
                      int64_t free_tokens, compact_estimate_fn est, void *est_ud,
                      struct compact_plan *p);

/* Level 2: archive_dir/archive_name is the archive file (its virtual name
 * "@archive/<archive_name>"). SB_OK with p->edits NULL when there is no
 * middle to archive. */
int compact_plan_archive(const json_t *history, size_t keep_head, size_t keep_messages,
                         const char *archive_dir, const char *archive_name, struct compact_plan *p);

/* Level 3, first half: where the summarised part ends (an assistant
 * message's index, >= 2), or 0 when there is not enough to summarise. */
size_t compact_summary_cut(const json_t *history, size_t keep_messages);

/* The system prompt of the summary request. */
extern const char compact_summary_system[];

/* The summary request's one user message for history[0, cut) (new
 * reference; NULL when out of memory). The text is bounded by max_bytes
 * (older parts are dropped first). */
json_t *compact_summary_request(const json_t *history, size_t cut, size_t max_bytes);

/* Level 3, second half: the plan that replaces history[0, cut) by the
 * summary. */
int compact_plan_summary(const json_t *history, size_t cut, const char *summary,
                         struct compact_plan *p);

#endif
