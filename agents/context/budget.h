/*
 * budget.h - output budgets: what a tool result may put into the context.
 *
 * Per result: a tool declares the most it may return (tool_def's
 * max_result_chars, default TOOL_RESULT_MAX_DEFAULT). A longer result is
 * persisted, whole, to the session's result store and replaced in the
 * context by a preview (about BUDGET_PREVIEW_BYTES of it: its head and its
 * last BUDGET_PREVIEW_TAIL, cut on line or character boundaries) plus the
 * file's name and size. Tools that read a file
 * (tool_def's result_pages, and `read`) are never persisted, which would
 * loop: their result is cut with a note to read on with offset/limit.
 *
 * Per message: the results of one batch (the user message answering one
 * assistant message) together stay under the batch budget (default
 * BUDGET_BATCH_MAX_DEFAULT) by persisting the largest results first.
 *
 * The store: $SWITCHBOARD_HOME/agents/<agent>/tool-results/<session-id>/
 * <tool_use_id>.txt (0600, directories 0700). Files are created exclusively:
 * a replayed run (a redelivered message) finds the file there and leaves it
 * as it is. "Characters" are bytes of UTF-8 text throughout, like the
 * executor's limit.
 *
 * The model reads a persisted result with the ordinary read tool, through a
 * virtual path: "@tool-results/<file>" names a file of the session's store,
 * "@archive/<file>" a level-2 archive of this session (compact.h). Both are
 * read-only; budget_read_call serves them by running read with the store (or
 * the sessions directory, for the session's own archives only) as its root,
 * so read's own confinement (no "..", no symlink out) applies there.
 *
 * Planning runs on the loop thread; writing (budget_write) is blocking and
 * runs on the thread pool.
 */
#ifndef SB_AGENTS_BUDGET_H
#define SB_AGENTS_BUDGET_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "agents/tool.h"

#define BUDGET_PREVIEW_BYTES 2000
/* Of the preview, the end of the result (where a command's errors and exit
 * status are). */
#define BUDGET_PREVIEW_TAIL 500
#define BUDGET_BATCH_MAX_DEFAULT 200000
/* What the executor keeps of a result before the budget sees it: the bound
 * of one result in memory. */
#define BUDGET_RESULT_HARD_MAX ((size_t)16 << 20)
#define BUDGET_RESULTS_PREFIX "@tool-results/"
#define BUDGET_ARCHIVE_PREFIX "@archive/"

struct budget_limits {
	size_t tool_max;  /* a tool's default maximum (0 = TOOL_RESULT_MAX_DEFAULT) */
	size_t batch_max; /* 0 = BUDGET_BATCH_MAX_DEFAULT */
};

/* A file to create (exclusively) and what to write into it. */
struct budget_file {
	char *path; /* absolute */
	char *data; /* owned */
	size_t len;
	int rc; /* after budget_write: SB_OK, SB_ERR_EXISTS (left as it was), ... */
};

/* One result to persist: its place in the results message and its file. */
struct budget_item {
	size_t block; /* index in the results message's content */
	char *name;   /* the virtual name, "@tool-results/<file>" */
	size_t size;  /* bytes of the whole result */
	struct budget_file file;
};

struct budget_plan {
	struct budget_item *items;
	size_t n;
	size_t total_before, total_after; /* bytes of the batch's results */
};

/* Whether a tool's results page instead of being persisted. */
bool budget_tool_pages(const struct tool_def *def);

/* The executor's hook (executor_options.finalise; ud: the budget_limits,
 * or NULL for the defaults): takes content and
 * returns what the executor keeps: a paging tool's result cut to its
 * maximum with a note to read on; any other result whole up to
 * BUDGET_RESULT_HARD_MAX (the plan below then persists what is too long).
 * NULL when out of memory. */
char *budget_finalise(void *ud, const struct tool_def *def, const char *id, char *content);

/* The file name for a tool_use id: its characters [A-Za-z0-9_-] (others
 * become '_'), cut to 100, then ".txt". */
void budget_file_name(const char *tool_use_id, char *out, size_t size);

/* Plans the budget of one batch: results is the user message of
 * tool_results (borrowed), assistant the message whose tool_use blocks they
 * answer (for the tool names; borrowed), tools the table the calls were
 * looked up in (NULL = the built-in ones), results_dir the session's store.
 * Results over their tool's maximum are persisted; then, while the batch is
 * over batch_max, the largest remaining result (not a paging tool's).
 * SB_OK (out->n may be 0), SB_ERR_NOMEM. */
int budget_plan(const json_t *results, const json_t *assistant, const struct tool_def *const *tools,
                size_t n_tools, const char *results_dir, const struct budget_limits *lim,
                struct budget_plan *out);

/* Writes the files (blocking: thread pool). Creates dir (0700) first. Each
 * file's rc is set; a file already there is SB_ERR_EXISTS and counts as
 * written. Returns SB_OK when every file is in place, else the first error. */
int budget_write(const char *dir, struct budget_file *files, size_t n);

/* After the plan's files are written: replaces each persisted result with
 * its preview in results (a message the caller owns and may edit); with
 * all false, only those whose file is in place (rc SB_OK or EXISTS; the
 * others stay whole), with all true every one (the write is still going on:
 * the rc fields are not read). SB_OK or SB_ERR_NOMEM. */
int budget_apply(json_t *results, const struct budget_plan *plan, bool all);

void budget_plan_free(struct budget_plan *p);

/* The preview that stands for a persisted result (caller frees): the
 * header with size and name, the head of content, and a closing line. */
char *budget_preview(const char *content, size_t len, const char *name);

/* Whether a tool_result's content is a preview of a persisted result; its
 * virtual name goes into name (size >= 160) when it is. */
bool budget_is_preview(const char *content, char *name, size_t size);

/* The read tool, able to read "@tool-results/..." and "@archive/..." too
 * (see above); other paths go to the built-in read unchanged. Use as the
 * call of a copy of tool_read. */
int budget_read_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                     struct tool_run **run);

#endif
