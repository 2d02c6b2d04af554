/*
 * skill_patch.c - the skill_patch tool: replaces one passage of a
 * workspace skill's instructions, counts the patch in its frontmatter
 * (patches: N) and commits it like skill_save (workspaces/skills.h). The
 * operator's sessions only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/err.h"
#include "workspaces/skills.h"

struct spatch_job {
	char *workspace, *home, *name, *old, *new_text, *label;
	char commit[41];
	char path[SKILL_NAME_MAX + 32];
	tool_done_cb done;
	void *ud;
	void (*committed)(void *ud, const char *commit, const char *path);
	void *committed_ud;
};

static void spatch_job_free(void *p)
{
	struct spatch_job *j = p;

	free(j->workspace);
	free(j->home);
	free(j->name);
	free(j->old);
	free(j->new_text);
	free(j->label);
	free(j);
}

static void spatch_work(void *p, struct tool_job_result *res)
{
	struct spatch_job *j = p;
	int64_t patches = 0;
	char why[600];
	int rc;

	rc = skills_patch(j->workspace, j->home, j->name, j->old, j->new_text, j->label, j->commit,
	                  &patches, why, sizeof why);
	if (rc == SB_ERR_NOMEM)
		return;
	if (rc) {
		tool_result_errorf(res, "%s", why[0] ? why : sb_strerror(rc));
		return;
	}
	snprintf(j->path, sizeof j->path, SKILLS_DIR "/%s/" SKILL_FILE, j->name);
	if (j->commit[0])
		tool_result_textf(res, "Patched the skill %s (patch %lld, commit %.12s).", j->name,
		                  (long long)patches, j->commit);
	else
		tool_result_textf(res, "Patched the skill %s (patch %lld, not committed: %s).",
		                  j->name, (long long)patches, why[0] ? why : "unchanged");
}

static void spatch_done(void *ud, int rc, char *content, bool is_error)
{
	struct spatch_job *j = ud;

	if (rc == SB_OK && !is_error && j->commit[0] && j->committed)
		j->committed(j->committed_ud, j->commit, j->path);
	j->done(j->ud, rc, content, is_error);
}

static int spatch_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                       struct tool_run **run)
{
	struct spatch_job *j;

	if (!ctx->skills || !ctx->memory || !ctx->workspace)
		return tool_job_error(ctx->loop, "skill_patch is not available to this agent", done,
		                      ud, run);
	if (!ctx->memory->writable)
		return tool_job_error(ctx->loop,
		                      "refused: only the operator's conversations change skills "
		                      "(this one is someone else's)",
		                      done, ud, run);
	if (!(j = calloc(1, sizeof *j)))
		return SB_ERR_NOMEM;
	j->workspace = strdup(ctx->workspace);
	j->home = ctx->skills->home ? strdup(ctx->skills->home) : NULL;
	j->name = strdup(tool_in_str(input, "name", ""));
	j->old = strdup(tool_in_str(input, "old", ""));
	j->new_text = strdup(tool_in_str(input, "new", ""));
	j->label = ctx->memory->session_label ? strdup(ctx->memory->session_label) : NULL;
	j->done = done;
	j->ud = ud;
	j->committed = ctx->memory->committed;
	j->committed_ud = ctx->memory->ud;
	if (!j->workspace || !j->name || !j->old || !j->new_text ||
	    (ctx->skills->home && !j->home)) {
		spatch_job_free(j);
		return SB_ERR_NOMEM;
	}
	return tool_job_start(ctx, spatch_work, j, spatch_job_free, spatch_done, j, run);
}

const struct tool_def tool_skill_patch = {
    .name = "skill_patch",
    .description =
        "Improves a skill of the workspace that proved incomplete or wrong: replaces the one "
        "passage old (copied exactly from what skill_load gave) of its instructions with new. "
        "The change is committed to the workspace's git history and counted in the skill.",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":64},"
                    "\"old\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":131072,"
                    "\"description\":\"the passage to replace; it must occur once\"},"
                    "\"new\":{\"type\":\"string\",\"maxLength\":131072,"
                    "\"description\":\"what takes its place\"}},"
                    "\"required\":[\"name\",\"old\",\"new\"],\"additionalProperties\":false}",
    .read_only = tool_never,
    .concurrency_safe = tool_never,
    .max_result_chars = 0,
    .call = spatch_call,
};
