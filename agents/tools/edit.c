/*
 * edit.c - the edit tool: replaces an exact string in a file of the
 * workspace.
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

struct edit_job {
	char *workspace;
	char *path;
	char *old_s, *new_s;
	size_t old_len, new_len;
	bool replace_all;
};

static void edit_job_free(void *p)
{
	struct edit_job *j = p;

	free(j->workspace);
	free(j->path);
	free(j->old_s);
	free(j->new_s);
	free(j);
}

static size_t edit_count(const char *data, size_t len, const char *s, size_t n)
{
	const char *p = data, *end = data + len, *hit;
	size_t count = 0;

	while ((hit = memmem(p, (size_t)(end - p), s, n)) != NULL) {
		count++;
		p = hit + n;
	}
	return count;
}

static void edit_work(void *p, struct tool_job_result *res)
{
	struct edit_job *j = p;
	char why[512];
	char *abs = NULL, *rel = NULL, *data = NULL;
	const char *q, *end, *hit;
	size_t len = 0, count;
	struct stat st;
	struct buf out;
	int rc;

	buf_init(&out, (size_t)TOOL_FILE_MAX * 2);
	if (j->old_len == j->new_len && memcmp(j->old_s, j->new_s, j->old_len) == 0) {
		tool_result_errorf(res,
		                   "old_string and new_string are the same; nothing to change");
		goto out;
	}
	rc =
	    paths_resolve(j->workspace, j->path, PATHS_WRITE_EXISTING, &abs, &rel, why, sizeof why);
	if (rc == SB_ERR_NOMEM)
		goto out;
	if (rc) {
		tool_result_errorf(res, "%s", why);
		goto out;
	}
	if (stat(abs, &st) != 0 || !S_ISREG(st.st_mode)) {
		tool_result_errorf(res, "%s is not a regular file", j->path);
		goto out;
	}
	rc = fs_read_all(abs, TOOL_FILE_MAX, &data, &len);
	if (rc == SB_ERR_NOMEM)
		goto out;
	if (rc == SB_ERR_TOOBIG) {
		tool_result_errorf(res, "%s is too large to edit (over %d MiB); use bash", j->path,
		                   TOOL_FILE_MAX >> 20);
		goto out;
	}
	if (rc) {
		tool_result_errorf(res, "cannot read %s", j->path);
		goto out;
	}
	if (tool_is_binary(data, len)) {
		tool_result_errorf(res, "%s is a binary file; edit changes text files only",
		                   j->path);
		goto out;
	}
	count = edit_count(data, len, j->old_s, j->old_len);
	if (count == 0) {
		tool_result_errorf(
		    res,
		    "old_string was not found in %s; it must match the file exactly, "
		    "whitespace and indentation included (read the file to check)",
		    j->path);
		goto out;
	}
	if (count > 1 && !j->replace_all) {
		tool_result_errorf(
		    res,
		    "old_string was found %zu times in %s; include more of the "
		    "surrounding lines to make it unique, or set replace_all to true "
		    "to replace every occurrence",
		    count, j->path);
		goto out;
	}
	for (q = data, end = data + len;
	     (hit = memmem(q, (size_t)(end - q), j->old_s, j->old_len)) != NULL;
	     q = hit + j->old_len) {
		if ((rc = buf_append(&out, q, (size_t)(hit - q))) != SB_OK ||
		    (rc = buf_append(&out, j->new_s, j->new_len)) != SB_OK)
			break;
	}
	if (rc == SB_OK)
		rc = buf_append(&out, q, (size_t)(end - q));
	if (rc == SB_ERR_NOMEM)
		goto out;
	if (rc) {
		tool_result_errorf(res, "the edited %s would be too large", j->path);
		goto out;
	}
	if ((rc = tool_write_atomic(abs, out.data ? out.data : "", out.len, why, sizeof why)) !=
	    SB_OK) {
		tool_result_errorf(res, "%s", why);
		goto out;
	}
	tool_result_textf(res, "edited %s: replaced %zu occurrence%s", rel, count,
	                  count == 1 ? "" : "s");
out:
	buf_free(&out);
	free(data);
	free(rel);
	free(abs);
}

static char *edit_dup(const json_t *s, size_t *len)
{
	char *p;

	*len = json_string_length(s);
	p = malloc(*len + 1);
	if (!p)
		return NULL;
	memcpy(p, json_string_value(s) ? json_string_value(s) : "", *len);
	p[*len] = '\0';
	return p;
}

static int edit_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                     struct tool_run **run)
{
	struct edit_job *j = calloc(1, sizeof *j);

	if (!j)
		return SB_ERR_NOMEM;
	j->workspace = strdup(ctx->workspace ? ctx->workspace : "");
	j->path = strdup(tool_in_str(input, "path", ""));
	j->old_s = edit_dup(json_object_get(input, "old_string"), &j->old_len);
	j->new_s = edit_dup(json_object_get(input, "new_string"), &j->new_len);
	j->replace_all = tool_in_bool(input, "replace_all", false);
	if (!j->workspace || !j->path || !j->old_s || !j->new_s) {
		edit_job_free(j);
		return SB_ERR_NOMEM;
	}
	return tool_job_start(ctx->loop, edit_work, j, edit_job_free, done, ud, run);
}

const struct tool_def tool_edit = {
    .name = "edit",
    .description =
        "Replaces old_string with new_string in a file of the workspace. old_string must match "
        "the file exactly (whitespace and indentation included; without the line numbers read "
        "shows) and occur exactly once, unless replace_all is true, which replaces every "
        "occurrence. Give enough surrounding lines to make old_string unique.",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"path\":{\"type\":\"string\",\"minLength\":1,"
                    "\"description\":\"file path relative to the workspace\"},"
                    "\"old_string\":{\"type\":\"string\",\"minLength\":1,"
                    "\"description\":\"the exact text to replace\"},"
                    "\"new_string\":{\"type\":\"string\","
                    "\"description\":\"the text to put in its place\"},"
                    "\"replace_all\":{\"type\":\"boolean\","
                    "\"description\":\"replace every occurrence; default false\"}},"
                    "\"required\":[\"path\",\"old_string\",\"new_string\"],"
                    "\"additionalProperties\":false}",
    .read_only = tool_never,
    .concurrency_safe = tool_never,
    .max_result_chars = 0,
    .call = edit_call,
};
