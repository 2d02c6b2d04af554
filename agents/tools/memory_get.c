/*
 * memory_get.c - the memory_get tool: a range of lines of a memory file
 * (MEMORY.md, memory/<name>.md), read beneath the workspace without
 * following symlinks; a file that does not exist yet reads as empty.
 */
#include <stdlib.h>
#include <string.h>

#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "workspaces/memory.h"

struct mget_job {
	char *workspace, *path;
	int64_t from, lines;
};

static void mget_job_free(void *p)
{
	struct mget_job *j = p;

	free(j->workspace);
	free(j->path);
	free(j);
}

static void mget_work(void *p, struct tool_job_result *res)
{
	struct mget_job *j = p;
	char why[512], *text = NULL;
	int64_t total = 0;
	int rc;

	rc = memory_get_until(j->workspace, j->path, j->from, j->lines, &text, &total, why,
	                      sizeof why, tool_job_stopped_cb, res);
	if (rc == SB_ERR_NOMEM)
		return;
	if (rc == SB_ERR_ABORTED) {
		tool_result_errorf(res,
		                   "memory_get stopped at the time limit of %lld ms (or cancelled) "
		                   "before it had read %s",
		                   (long long)res->timeout_ms, j->path);
		return;
	}
	if (rc) {
		tool_result_errorf(res, "%s", why[0] ? why : sb_strerror(rc));
		return;
	}
	/* Empty for a file that does not exist yet: nothing to say more. */
	res->content = text;
	res->rc = SB_OK;
	res->is_error = false;
	if (strlen(text) > TOOL_OUTPUT_BUDGET) {
		size_t keep = tool_utf8_floor(text, TOOL_OUTPUT_BUDGET);

		text[keep] = '\0';
	}
}

static int mget_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done,
                     void *ud, struct tool_run **run)
{
	struct mget_job *j;

	if (!ctx->memory || !ctx->workspace)
		return tool_job_error(ctx->loop, "memory_get is not available to this agent", done,
		                      ud, run);
	if (!(j = calloc(1, sizeof *j)))
		return SB_ERR_NOMEM;
	j->workspace = strdup(ctx->workspace);
	j->path = strdup(tool_in_str(input, "path", ""));
	j->from = tool_in_int(input, "from", 1);
	j->lines = tool_in_int(input, "lines", 200);
	if (!j->workspace || !j->path) {
		mget_job_free(j);
		return SB_ERR_NOMEM;
	}
	return tool_job_start(ctx, mget_work, j, mget_job_free, done, ud, run);
}

const struct tool_def tool_memory_get = {
    .name = "memory_get",
    .description = "Reads lines of a memory file (MEMORY.md or memory/<name>.md, such as "
                   "memory/2026-12-02.md): from (1-based, default 1), lines (default 200). A "
                   "file that does not exist yet reads as empty.",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"path\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4096,"
                    "\"description\":\"MEMORY.md or memory/<name>.md\"},"
                    "\"from\":{\"type\":\"integer\",\"minimum\":1,"
                    "\"description\":\"first line (1-based); default 1\"},"
                    "\"lines\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":2000,"
                    "\"description\":\"how many lines; default 200\"}},"
                    "\"required\":[\"path\"],\"additionalProperties\":false}",
    .read_only = tool_always,
    .concurrency_safe = tool_always,
    .max_result_chars = 0,
    .untrusted_output = true,
    .result_pages = true,
    .call = mget_call,
};
