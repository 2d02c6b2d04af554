/*
 * memory_write.c - the memory_write tool: appends to today's daily note
 * (memory/YYYY-MM-DD.md) or to MEMORY.md, then commits the file to the
 * workspace's git repository with a message naming the session and turn
 * (workspaces/memory.h). Only the operator's sessions may write: a
 * non-owner's text never becomes part of the owner's prompt.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/err.h"
#include "workspaces/memory.h"

struct mwrite_job {
	char *workspace, *path, *text, *label;
	char commit[41];
	tool_done_cb done;
	void *ud;
	void (*committed)(void *ud, const char *commit, const char *path);
	void *committed_ud;
};

static void mwrite_job_free(void *p)
{
	struct mwrite_job *j = p;

	free(j->workspace);
	free(j->path);
	free(j->text);
	free(j->label);
	free(j);
}

static void mwrite_work(void *p, struct tool_job_result *res)
{
	struct mwrite_job *j = p;
	const char *paths[1] = {j->path};
	char why[512], msg[1024];
	int rc;

	/* Stopped up to the rename, the file is as it was; the commit after
	 * it (one file, bounded) is not cut short. */
	rc = memory_append_until(j->workspace, j->path, j->text, why, sizeof why,
	                         tool_job_stopped_cb, res);
	if (rc == SB_ERR_NOMEM)
		return;
	if (rc == SB_ERR_ABORTED) {
		tool_result_errorf(
		    res,
		    "memory_write stopped at the time limit of %lld ms (or cancelled) "
		    "before %s was written: it holds what it held before",
		    (long long)res->timeout_ms, j->path);
		return;
	}
	if (rc) {
		tool_result_errorf(res, "%s", why[0] ? why : sb_strerror(rc));
		return;
	}
	snprintf(msg, sizeof msg, "memory: %s\n\nWritten by the agent in %s.\n", j->path,
	         j->label ? j->label : "a session");
	rc = memory_commit(j->workspace, paths, 1, msg, j->commit, why, sizeof why);
	if (rc == SB_OK && j->commit[0])
		tool_result_textf(res, "Saved to %s (commit %.12s).", j->path, j->commit);
	else if (rc == SB_OK)
		tool_result_textf(res, "Saved to %s (unchanged).", j->path);
	else
		tool_result_textf(res, "Saved to %s (not committed: %s).", j->path,
		                  why[0] ? why : sb_strerror(rc));
}

static void mwrite_done(void *ud, int rc, char *content, bool is_error)
{
	struct mwrite_job *j = ud;

	if (rc == SB_OK && !is_error && j->commit[0] && j->committed)
		j->committed(j->committed_ud, j->commit, j->path);
	j->done(j->ud, rc, content, is_error);
}

static int mwrite_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done,
                       void *ud, struct tool_run **run)
{
	const char *target = tool_in_str(input, "target", "daily");
	struct mwrite_job *j;

	if (!ctx->memory || !ctx->workspace || !ctx->memory->today)
		return tool_job_error(ctx->loop, "memory_write is not available to this agent",
		                      done, ud, run);
	if (!ctx->memory->writable)
		return tool_job_error(ctx->loop,
		                      "refused: only the operator's conversations write to memory "
		                      "(this one is someone else's)",
		                      done, ud, run);
	if (!(j = calloc(1, sizeof *j)))
		return SB_ERR_NOMEM;
	j->workspace = strdup(ctx->workspace);
	j->path = strdup(strcmp(target, "long_term") == 0 ? MEMORY_FILE : ctx->memory->today);
	j->text = strdup(tool_in_str(input, "text", ""));
	j->label = ctx->memory->session_label ? strdup(ctx->memory->session_label) : NULL;
	j->done = done;
	j->ud = ud;
	j->committed = ctx->memory->committed;
	j->committed_ud = ctx->memory->ud;
	if (!j->workspace || !j->path || !j->text) {
		mwrite_job_free(j);
		return SB_ERR_NOMEM;
	}
	return tool_job_start(ctx, mwrite_work, j, mwrite_job_free, mwrite_done, j, run);
}

const struct tool_def tool_memory_write = {
    .name = "memory_write",
    .description =
        "Saves something to your memory, committed to the workspace's git history. target "
        "\"daily\" (default) appends to today's note (memory/YYYY-MM-DD.md: what happened, "
        "what you were told today); \"long_term\" appends to MEMORY.md (durable facts and "
        "preferences). Today's and yesterday's notes and MEMORY.md come back to you in the "
        "operator's private conversation; memory_search finds the rest.",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"text\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":65536,"
                    "\"description\":\"what to remember (markdown)\"},"
                    "\"target\":{\"type\":\"string\",\"enum\":[\"daily\",\"long_term\"],"
                    "\"description\":\"daily (default) or long_term (MEMORY.md)\"}},"
                    "\"required\":[\"text\"],\"additionalProperties\":false}",
    .read_only = tool_never,
    .concurrency_safe = tool_never,
    .max_result_chars = 0,
    .call = mwrite_call,
};
