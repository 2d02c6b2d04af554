/*
 * skill_load.c - the skill_load tool: a skill's instructions (its SKILL.md
 * after the frontmatter, and the list of its other files), or one of those
 * files, read on demand (workspaces/skills.h). The system prompt lists only
 * the skills' names and descriptions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/err.h"
#include "workspaces/skills.h"

struct sload_job {
	char *workspace, *home, *path, *name, *file;
};

static void sload_job_free(void *p)
{
	struct sload_job *j = p;

	free(j->workspace);
	free(j->home);
	free(j->path);
	free(j->name);
	free(j->file);
	free(j);
}

static void sload_work(void *p, struct tool_job_result *res)
{
	struct sload_job *j = p;
	struct skills_env e = {.workspace = j->workspace, .home = j->home, .path = j->path};
	char why[600], *text = NULL;
	int rc;

	rc = skills_load(&e, j->name, j->file, &text, why, sizeof why);
	if (rc == SB_ERR_NOMEM)
		return;
	if (rc) {
		tool_result_errorf(res, "%s", why[0] ? why : sb_strerror(rc));
		return;
	}
	res->content = text;
	res->rc = SB_OK;
	res->is_error = false;
}

static int sload_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                      struct tool_run **run)
{
	const char *file = tool_in_str(input, "file", NULL);
	struct sload_job *j;

	if (!ctx->skills || !ctx->workspace)
		return tool_job_error(ctx->loop, "skill_load is not available to this agent", done,
		                      ud, run);
	if (!(j = calloc(1, sizeof *j)))
		return SB_ERR_NOMEM;
	j->workspace = strdup(ctx->workspace);
	j->home = ctx->skills->home ? strdup(ctx->skills->home) : NULL;
	j->path = ctx->skills->path ? strdup(ctx->skills->path) : NULL;
	j->name = strdup(tool_in_str(input, "name", ""));
	j->file = file ? strdup(file) : NULL;
	if (!j->workspace || !j->name || (ctx->skills->home && !j->home) ||
	    (ctx->skills->path && !j->path) || (file && !j->file)) {
		sload_job_free(j);
		return SB_ERR_NOMEM;
	}
	return tool_job_start(ctx, sload_work, j, sload_job_free, done, ud, run);
}

const struct tool_def tool_skill_load = {
    .name = "skill_load",
    .description =
        "Loads a skill listed under Skills in your instructions: with name alone, its "
        "instructions and the list of its files; with file too, that file of the skill's "
        "folder (a path relative to it, as the list names it).",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":64,"
                    "\"description\":\"the skill's name\"},"
                    "\"file\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":1024,"
                    "\"description\":\"a file of the skill's folder, relative to it\"}},"
                    "\"required\":[\"name\"],\"additionalProperties\":false}",
    .read_only = tool_always,
    .concurrency_safe = tool_always,
    .max_result_chars = 0,
    .result_pages = false,
    .call = sload_call,
};
