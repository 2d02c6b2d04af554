/*
 * edit.c - the edit tool: replaces an exact string in a file of the
 * workspace.
 */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/beneath.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

struct edit_job {
	struct tool_fs_spec fs;
	char *path;
	char *old_s, *new_s;
	size_t old_len, new_len;
	bool replace_all;
};

static void edit_job_free(void *p)
{
	struct edit_job *j = p;

	tool_fs_spec_free(&j->fs);
	free(j->path);
	free(j->old_s);
	free(j->new_s);
	free(j);
}

/* Occurrences polled between two looks at the stop flag. */
#define EDIT_POLL_EVERY 4096

/* Occurrences of s in data; *stopped set (and the count cut) when the job
 * was told to stop. */
static size_t edit_count(const char *data, size_t len, const char *s, size_t n,
                         const struct tool_job_result *res, bool *stopped)
{
	const char *p = data, *end = data + len, *hit;
	size_t count = 0;

	*stopped = tool_job_stopped(res);
	while (!*stopped && (hit = memmem(p, (size_t)(end - p), s, n)) != NULL) {
		count++;
		p = hit + n;
		if (count % EDIT_POLL_EVERY == 0)
			*stopped = tool_job_stopped(res);
	}
	return count;
}

static void edit_work(void *p, struct tool_job_result *res)
{
	struct edit_job *j = p;
	char why[512], rel[BENEATH_PATH_MAX];
	char *data = NULL;
	struct tool_fs fs = {.root = -1};
	const char *last;
	int pfd = -1;
	const char *q, *end, *hit;
	size_t len = 0, count, i;
	bool cut;
	struct stat st;
	struct buf out;
	int rc;

	buf_init(&out, (size_t)TOOL_FILE_MAX * 2);
	if (j->old_len == j->new_len && memcmp(j->old_s, j->new_s, j->old_len) == 0) {
		tool_result_errorf(res,
		                   "old_string and new_string are the same; nothing to change");
		goto out;
	}
	if ((rc = tool_fs_rel(j->path, PATHS_WRITE_EXISTING, rel, sizeof rel, why, sizeof why)) ||
	    (rc = tool_fs_open(&fs, &j->fs, why, sizeof why))) {
		if (rc != SB_ERR_NOMEM)
			tool_result_errorf(res, "%s", why);
		goto out;
	}
	rc = beneath_stat(fs.root, rel, &st);
	if (rc == SB_OK && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
		tool_result_errorf(res, "%s is not a regular file", j->path);
		goto out;
	}
	/* One directory fd for the read and the atomic write. */
	if (rc == SB_OK)
		rc = tool_fs_parent(&fs, j->path, rel, &pfd, &last, why, sizeof why);
	else
		tool_fs_why(&fs, j->path, rel, rc, why, sizeof why);
	if (rc == SB_OK)
		rc = beneath_read_all_until(pfd, last, TOOL_FILE_MAX, tool_job_stopped_cb, res,
		                            &data, &len);
	if (rc == SB_ERR_NOMEM)
		goto out;
	if (rc == SB_ERR_ABORTED)
		goto stopped;
	if (rc == SB_ERR_TOOBIG) {
		tool_result_errorf(res, "%s is too large to edit (over %d MiB); use bash", j->path,
		                   TOOL_FILE_MAX >> 20);
		goto out;
	}
	if (rc == SB_ERR_PERM && pfd >= 0)
		tool_fs_why(&fs, j->path, rel, rc, why, sizeof why);
	if (rc == SB_ERR_PERM || (rc == SB_ERR_NOTFOUND && pfd < 0)) {
		tool_result_errorf(res, "%s", why);
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
	count = edit_count(data, len, j->old_s, j->old_len, res, &cut);
	if (cut)
		goto stopped;
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
	for (q = data, end = data + len, i = 0;
	     (hit = memmem(q, (size_t)(end - q), j->old_s, j->old_len)) != NULL;
	     q = hit + j->old_len) {
		if (++i % EDIT_POLL_EVERY == 0 && tool_job_stopped(res))
			goto stopped;
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
	if ((rc = beneath_write_atomic_until(pfd, last, out.data ? out.data : "", out.len, 0644,
	                                     tool_job_stopped_cb, res)) != SB_OK) {
		if (rc == SB_ERR_ABORTED)
			goto stopped;
		if (rc == SB_ERR_PERM)
			tool_fs_why(&fs, j->path, rel, rc, why, sizeof why);
		else
			snprintf(why, sizeof why, "cannot write %s: %s", j->path, sb_strerror(rc));
		tool_result_errorf(res, "%s", why);
		goto out;
	}
	tool_result_textf(res, "edited %s: replaced %zu occurrence%s", rel, count,
	                  count == 1 ? "" : "s");
	goto out;
stopped:
	tool_result_errorf(res,
	                   "stopped at the time limit of %lld ms (or cancelled) before %s was "
	                   "edited: it holds what it held before",
	                   (long long)res->timeout_ms, j->path);
out:
	buf_free(&out);
	free(data);
	if (pfd >= 0)
		close(pfd);
	tool_fs_close(&fs);
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
	int rc;

	if (!j)
		return SB_ERR_NOMEM;
	rc = tool_fs_spec_init(&j->fs, ctx);
	j->path = strdup(tool_in_str(input, "path", ""));
	j->old_s = edit_dup(json_object_get(input, "old_string"), &j->old_len);
	j->new_s = edit_dup(json_object_get(input, "new_string"), &j->new_len);
	j->replace_all = tool_in_bool(input, "replace_all", false);
	if (rc || !j->path || !j->old_s || !j->new_s) {
		edit_job_free(j);
		return SB_ERR_NOMEM;
	}
	return tool_job_start(ctx, edit_work, j, edit_job_free, done, ud, run);
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
