/*
 * skill_save.c - the skill_save tool: writes a new skill to the workspace
 * (skills/<name>/SKILL.md) and commits it to the workspace's git with a
 * message naming the session and turn (workspaces/skills.h). Only the
 * operator's sessions may, as for memory writes: a skill becomes part of
 * every later prompt.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/err.h"
#include "workspaces/skills.h"

struct ssave_job {
	char *workspace, *home, *name, *description, *body, *label;
	char commit[41];
	char path[SKILL_NAME_MAX + 32];
	tool_done_cb done;
	void *ud;
	void (*committed)(void *ud, const char *commit, const char *path);
	void *committed_ud;
};

static void ssave_job_free(void *p)
{
	struct ssave_job *j = p;

	free(j->workspace);
	free(j->home);
	free(j->name);
	free(j->description);
	free(j->body);
	free(j->label);
	free(j);
}

static void ssave_work(void *p, struct tool_job_result *res)
{
	struct ssave_job *j = p;
	char why[600];
	bool shadows = false;
	int rc;

	rc = skills_save(j->workspace, j->home, j->name, j->description, j->body, j->label,
	                 j->commit, &shadows, why, sizeof why);
	if (rc == SB_ERR_NOMEM)
		return;
	if (rc) {
		tool_result_errorf(res, "%s", why[0] ? why : sb_strerror(rc));
		return;
	}
	snprintf(j->path, sizeof j->path, SKILLS_DIR "/%s/" SKILL_FILE, j->name);
	tool_result_textf(
	    res, "Saved the skill %s to %s (%s%.12s%s).%s", j->name, j->path,
	    j->commit[0] ? "commit " : "not committed: ", j->commit[0] ? j->commit : why, "",
	    shadows ? " It takes the place of the gateway's shared skill of that name." : "");
}

static void ssave_done(void *ud, int rc, char *content, bool is_error)
{
	struct ssave_job *j = ud;

	if (rc == SB_OK && !is_error && j->commit[0] && j->committed)
		j->committed(j->committed_ud, j->commit, j->path);
	j->done(j->ud, rc, content, is_error);
}

static int ssave_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                      struct tool_run **run)
{
	struct ssave_job *j;

	if (!ctx->skills || !ctx->memory || !ctx->workspace)
		return tool_job_error(ctx->loop, "skill_save is not available to this agent", done,
		                      ud, run);
	if (!ctx->memory->writable)
		return tool_job_error(ctx->loop,
		                      "refused: only the operator's conversations save skills "
		                      "(this one is someone else's)",
		                      done, ud, run);
	if (!(j = calloc(1, sizeof *j)))
		return SB_ERR_NOMEM;
	j->workspace = strdup(ctx->workspace);
	j->home = ctx->skills->home ? strdup(ctx->skills->home) : NULL;
	j->name = strdup(tool_in_str(input, "name", ""));
	j->description = strdup(tool_in_str(input, "description", ""));
	j->body = strdup(tool_in_str(input, "body", ""));
	j->label = ctx->memory->session_label ? strdup(ctx->memory->session_label) : NULL;
	j->done = done;
	j->ud = ud;
	j->committed = ctx->memory->committed;
	j->committed_ud = ctx->memory->ud;
	if (!j->workspace || !j->name || !j->description || !j->body ||
	    (ctx->skills->home && !j->home)) {
		ssave_job_free(j);
		return SB_ERR_NOMEM;
	}
	return tool_job_start(ctx, ssave_work, j, ssave_job_free, ssave_done, j, run);
}

const struct tool_def tool_skill_save = {
    .name = "skill_save",
    .description =
        "Saves a new skill to the workspace (skills/<name>/SKILL.md, committed to its git "
        "history): after a task of several steps that will come again, write down how to do "
        "it (when it applies, the steps, the caveats) so that later conversations can load "
        "it. To improve an existing skill, use skill_patch.",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":64,"
                    "\"description\":\"a-z, 0-9, - and _, starting with a letter or digit\"},"
                    "\"description\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":1024,"
                    "\"description\":\"one line: what the skill does and when to use it\"},"
                    "\"body\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":131072,"
                    "\"description\":\"the instructions (markdown)\"}},"
                    "\"required\":[\"name\",\"description\",\"body\"],"
                    "\"additionalProperties\":false}",
    .read_only = tool_never,
    .concurrency_safe = tool_never,
    .max_result_chars = 0,
    .call = ssave_call,
};
