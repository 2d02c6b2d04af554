/*
 * write.c - the write tool: creates or replaces a file of the workspace, or
 * appends to it (a long file written in parts, each call small enough for
 * the model's output-token limit).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agents/safety/paths.h"
#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/fsutil.h"

struct write_job {
	char *workspace;
	char *path;
	char *content;
	size_t len;
	bool append;
};

static void write_job_free(void *p)
{
	struct write_job *j = p;

	free(j->workspace);
	free(j->path);
	free(j->content);
	free(j);
}

static void write_work(void *p, struct tool_job_result *res)
{
	struct write_job *j = p;
	char why[512];
	char *abs = NULL, *rel = NULL;
	struct stat st;
	bool existed;
	int rc;

	rc = paths_resolve(j->workspace, j->path, PATHS_WRITE, &abs, &rel, why, sizeof why);
	if (rc == SB_ERR_NOMEM)
		goto out;
	if (rc) {
		tool_result_errorf(res, "%s", why);
		goto out;
	}
	existed = stat(abs, &st) == 0;
	if (existed && S_ISDIR(st.st_mode)) {
		tool_result_errorf(res, "%s is a directory", j->path);
		goto out;
	}
	if (j->append && existed) {
		/* The old content and the new part, replaced atomically like
		 * any write: a reader never sees half a part. */
		char *old = NULL;
		size_t old_len = 0;
		struct buf all;

		rc = fs_read_all(abs, TOOL_FILE_MAX, &old, &old_len);
		if (rc == SB_ERR_NOMEM)
			goto out;
		if (rc) {
			tool_result_errorf(res, "cannot append to %s: %s", j->path,
			                   rc == SB_ERR_TOOBIG ? "the file is over 16 MiB"
			                                       : "it cannot be read");
			goto out;
		}
		buf_init(&all, TOOL_FILE_MAX + j->len + 1);
		rc = buf_append(&all, old ? old : "", old_len);
		if (rc == SB_OK)
			rc = buf_append(&all, j->content, j->len);
		free(old);
		if (rc == SB_OK)
			rc = tool_write_atomic(abs, all.data ? all.data : "", all.len, why,
			                       sizeof why);
		if (rc == SB_OK)
			tool_result_textf(res, "appended %zu bytes to %s (now %zu bytes)", j->len,
			                  rel, all.len);
		buf_free(&all);
		if (rc == SB_ERR_NOMEM)
			goto out;
		if (rc)
			tool_result_errorf(res, "%s", why);
		goto out;
	}
	if ((rc = tool_mkdir_parents(abs, why, sizeof why)) != SB_OK ||
	    (rc = tool_write_atomic(abs, j->content, j->len, why, sizeof why)) != SB_OK) {
		if (rc == SB_ERR_NOMEM)
			goto out;
		tool_result_errorf(res, "%s", why);
		goto out;
	}
	tool_result_textf(res, "wrote %zu bytes to %s (%s)", j->len, rel,
	                  existed ? "replaced the old content" : "new file");
out:
	free(rel);
	free(abs);
}

static int write_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                      struct tool_run **run)
{
	struct write_job *j = calloc(1, sizeof *j);
	const json_t *content = json_object_get(input, "content");

	if (!j)
		return SB_ERR_NOMEM;
	j->workspace = strdup(ctx->workspace ? ctx->workspace : "");
	j->path = strdup(tool_in_str(input, "path", ""));
	j->len = json_string_length(content);
	j->append = tool_in_bool(input, "append", false);
	j->content = malloc(j->len + 1);
	if (!j->workspace || !j->path || !j->content) {
		write_job_free(j);
		return SB_ERR_NOMEM;
	}
	memcpy(j->content, json_string_value(content) ? json_string_value(content) : "", j->len);
	j->content[j->len] = '\0';
	return tool_job_start(ctx->loop, write_work, j, write_job_free, done, ud, run);
}

const struct tool_def tool_write = {
    .name = "write",
    .description = "Writes a file of the workspace, replacing it whole if it exists (read it "
                   "first; for small changes prefer edit), or with append: true adds content "
                   "at its end (a long file is written in parts: the first with write, the "
                   "others appended, a few thousand characters per call). Missing parent "
                   "directories are created. The write is atomic: readers see the old or the "
                   "new file, never a part. Files inside .git cannot be written.",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"path\":{\"type\":\"string\",\"minLength\":1,"
                    "\"description\":\"file path relative to the workspace\"},"
                    "\"content\":{\"type\":\"string\","
                    "\"description\":\"the whole new content of the file, or the part to "
                    "append\"},"
                    "\"append\":{\"type\":\"boolean\","
                    "\"description\":\"add content at the end of the file (created when "
                    "missing) instead of replacing it\"}},"
                    "\"required\":[\"path\",\"content\"],\"additionalProperties\":false}",
    .read_only = tool_never,
    .concurrency_safe = tool_never,
    .max_result_chars = 0,
    .call = write_call,
};
