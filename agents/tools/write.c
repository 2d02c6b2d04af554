/*
 * write.c - the write tool: creates or replaces a file of the workspace, or
 * appends to it (a long file written in parts, each call small enough for
 * the model's output-token limit).
 */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agents/safety/paths.h"
#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/beneath.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

struct write_job {
	struct tool_fs_spec fs;
	char *path;
	char *content;
	size_t len;
	bool append;
};

static void write_job_free(void *p)
{
	struct write_job *j = p;

	tool_fs_spec_free(&j->fs);
	free(j->path);
	free(j->content);
	free(j);
}

/* The parent directories of rel (not ""), made beneath the root. */
static int write_parents(const struct tool_fs *fs, const char *path, const char *rel, char *why,
                         size_t why_size)
{
	char dir[BENEATH_PATH_MAX];
	int rc;

	if ((rc = tool_fs_dirname(fs, path, rel, dir, sizeof dir, why, why_size)))
		return rc;
	if (!dir[0])
		return SB_OK;
	rc = beneath_mkdirs(fs->root, dir, 0755);
	if (rc == SB_ERR_PERM || rc == SB_ERR_NOMEM)
		tool_fs_why(fs, path, rel, rc, why, why_size);
	else if (rc)
		snprintf(why, why_size, "cannot create the directories of %s: %s", path,
		         sb_strerror(rc));
	return rc;
}

static void write_work(void *p, struct tool_job_result *res)
{
	struct write_job *j = p;
	char why[512], rel[BENEATH_PATH_MAX];
	struct tool_fs fs = {.root = -1};
	const char *last;
	struct stat st;
	bool existed;
	int rc, pfd = -1;

	if ((rc = tool_fs_rel(j->path, PATHS_WRITE, rel, sizeof rel, why, sizeof why)) ||
	    (rc = tool_fs_open(&fs, &j->fs, why, sizeof why)))
		goto fail;
	rc = beneath_stat(fs.root, rel, &st);
	existed = rc == SB_OK;
	if (!rel[0] || (existed && S_ISDIR(st.st_mode))) {
		tool_result_errorf(res, "%s is a directory", j->path);
		goto out;
	}
	if (rc && rc != SB_ERR_NOTFOUND) {
		tool_fs_why(&fs, j->path, rel, rc, why, sizeof why);
		goto fail;
	}
	if (!existed && (rc = write_parents(&fs, j->path, rel, why, sizeof why)))
		goto fail;
	/* From here on one directory fd: the read, the temporary file and the
	 * rename all happen in it, whatever its path becomes. */
	if ((rc = tool_fs_parent(&fs, j->path, rel, &pfd, &last, why, sizeof why)))
		goto fail;
	if (j->append && existed) {
		/* The old content and the new part, replaced atomically like
		 * any write: a reader never sees half a part. */
		char *old = NULL;
		size_t old_len = 0;
		struct buf all;

		rc = beneath_read_all_until(pfd, last, TOOL_FILE_MAX, tool_job_stopped_cb, res,
		                            &old, &old_len);
		if (rc == SB_ERR_NOMEM)
			goto out;
		if (rc == SB_ERR_ABORTED)
			goto stopped;
		if (rc == SB_ERR_PERM || rc == SB_ERR_NOTFOUND) {
			tool_fs_why(&fs, j->path, rel, rc, why, sizeof why);
			goto fail;
		}
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
			rc = beneath_write_atomic_until(pfd, last, all.data ? all.data : "",
			                                all.len, 0644, tool_job_stopped_cb, res);
		if (rc == SB_OK)
			tool_result_textf(res, "appended %zu bytes to %s (now %zu bytes)", j->len,
			                  rel, all.len);
		buf_free(&all);
		if (rc == SB_OK || rc == SB_ERR_NOMEM)
			goto out;
		goto fail_write;
	}
	rc = beneath_write_atomic_until(pfd, last, j->content, j->len, 0644, tool_job_stopped_cb,
	                                res);
	if (rc)
		goto fail_write;
	tool_result_textf(res, "wrote %zu bytes to %s (%s)", j->len, rel,
	                  existed ? "replaced the old content" : "new file");
	goto out;
fail_write:
	if (rc == SB_ERR_ABORTED) {
	stopped:
		tool_result_errorf(res,
		                   "stopped at the time limit of %lld ms (or cancelled) before %s "
		                   "was written: %s",
		                   (long long)res->timeout_ms, j->path,
		                   existed ? "it holds what it held before" : "it was not created");
		goto out;
	}
	if (rc == SB_ERR_PERM)
		tool_fs_why(&fs, j->path, rel, rc, why, sizeof why);
	else
		snprintf(why, sizeof why, "cannot write %s: %s", j->path, sb_strerror(rc));
fail:
	if (rc != SB_ERR_NOMEM)
		tool_result_errorf(res, "%s", why);
out:
	if (pfd >= 0)
		close(pfd);
	tool_fs_close(&fs);
}

static int write_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                      struct tool_run **run)
{
	struct write_job *j = calloc(1, sizeof *j);
	const json_t *content = json_object_get(input, "content");
	int rc;

	if (!j)
		return SB_ERR_NOMEM;
	rc = tool_fs_spec_init(&j->fs, ctx);
	j->path = strdup(tool_in_str(input, "path", ""));
	j->len = json_string_length(content);
	j->append = tool_in_bool(input, "append", false);
	j->content = malloc(j->len + 1);
	if (rc || !j->path || !j->content) {
		write_job_free(j);
		return SB_ERR_NOMEM;
	}
	memcpy(j->content, json_string_value(content) ? json_string_value(content) : "", j->len);
	j->content[j->len] = '\0';
	return tool_job_start(ctx, write_work, j, write_job_free, done, ud, run);
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
