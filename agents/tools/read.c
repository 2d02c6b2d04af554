/*
 * read.c - the read tool: a text file of the workspace, with line numbers.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agents/safety/paths.h"
#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/beneath.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

#define READ_LIMIT_DEFAULT 2000
/* Past this size the lines after the shown ones are not counted. */
#define READ_COUNT_MAX ((off_t)64 << 20)

struct read_job {
	struct tool_fs_spec fs;
	char *path;
	int64_t offset; /* 1-based */
	int64_t limit;
};

static void read_job_free(void *p)
{
	struct read_job *j = p;

	tool_fs_spec_free(&j->fs);
	free(j->path);
	free(j);
}

static void read_work(void *p, struct tool_job_result *res)
{
	struct read_job *j = p;
	char why[512], rel[BENEATH_PATH_MAX];
	char *line = NULL;
	struct tool_fs fs = {.root = -1};
	int fd = -1;
	size_t line_len = 0, line_cap = 0, keep;
	struct tool_lines lr = {0};
	struct stat st;
	struct buf out, one;
	int64_t lineno = 0, shown = 0, more = 0;
	bool cut, stopped = false, counted = true, timed_out = false;
	int rc, r;

	buf_init(&out, TOOL_OUTPUT_BUDGET);
	buf_init(&one, TOOL_LINE_MAX + 64);
	if ((rc = tool_fs_rel(j->path, PATHS_EXISTING, rel, sizeof rel, why, sizeof why)) ||
	    (rc = tool_fs_open(&fs, &j->fs, why, sizeof why))) {
		if (rc != SB_ERR_NOMEM)
			tool_result_errorf(res, "%s", why);
		goto out;
	}
	/* The stat words the message; the open decides (a swap in between
	 * is refused by it). */
	rc = beneath_stat(fs.root, rel, &st);
	if (rc == SB_OK && S_ISDIR(st.st_mode)) {
		tool_result_errorf(res, "%s is a directory; use ls to list it", j->path);
		goto out;
	}
	if (rc == SB_OK && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
		tool_result_errorf(res, "%s is not a regular file", j->path);
		goto out;
	}
	if ((rc = tool_fs_open_file(&fs, j->path, rel, &fd, &st, why, sizeof why)) != SB_OK) {
		if (rc != SB_ERR_NOMEM)
			tool_result_errorf(res, "%s", why);
		goto out;
	}
	if (tool_fd_is_binary(fd)) {
		tool_result_errorf(res,
		                   "%s is a binary file (%lld bytes); read shows text files only",
		                   j->path, (long long)st.st_size);
		goto out;
	}
	rc = tool_lines_open_fd(&lr, fd);
	fd = -1;
	if (rc != SB_OK)
		goto out;
	while ((r = tool_lines_next(&lr, &line, &line_len, &line_cap, TOOL_LINE_MAX, &cut)) == 1) {
		if (tool_job_stopped(res)) {
			timed_out = true;
			break;
		}
		lineno++;
		if (lineno < j->offset)
			continue;
		if (stopped || shown >= j->limit) {
			if (st.st_size > READ_COUNT_MAX) {
				counted = false;
				more = 1;
				break;
			}
			more++;
			continue;
		}
		keep = cut ? tool_utf8_floor(line, line_len) : line_len;
		buf_reset(&one);
		if (buf_printf(&one, "%6lld\t%.*s%s\n", (long long)lineno, (int)keep, line,
		               cut ? " [line cut at 2000 characters]" : "") != SB_OK ||
		    buf_append(&out, one.data, one.len) != SB_OK) {
			/* The output budget is spent: stop showing, keep counting. */
			stopped = true;
			more++;
			continue;
		}
		shown++;
	}
	if (r < 0) {
		if (-r == SB_ERR_NOMEM)
			goto out;
		tool_result_errorf(res, "cannot read %s", j->path);
		goto out;
	}
	if (timed_out && shown == 0) {
		/* Cut while reading on to the offset. */
		tool_result_errorf(
		    res,
		    "cut at the time limit of %lld ms while reading %s (at line %lld); "
		    "read a smaller part with offset and limit",
		    (long long)res->timeout_ms, j->path, (long long)lineno);
		goto out;
	}
	if (timed_out) { /* what is shown stands; the count of the rest is unknown */
		counted = false;
		more = 1;
	}
	if (lineno == 0) {
		tool_result_text(res, "(the file is empty)");
		goto out;
	}
	if (j->offset > lineno) {
		tool_result_errorf(res, "offset %lld is past the end of %s, which has %lld lines",
		                   (long long)j->offset, j->path, (long long)lineno);
		goto out;
	}
	if (more) {
		buf_free(&one);
		buf_init(&one, 256);
		if (counted)
			(void)buf_printf(&one, "\n(%lld more lines; use offset=%lld to read on)",
			                 (long long)more, (long long)(j->offset + shown));
		else
			(void)buf_printf(&one, "\n(more lines follow; use offset=%lld to read on)",
			                 (long long)(j->offset + shown));
		/* The budget leaves room for this note. */
		out.max += one.len;
		(void)buf_append(&out, one.data, one.len);
		buf_free(&one);
	}
	res->content = buf_steal(&out);
	res->rc = res->content ? SB_OK : SB_ERR_NOMEM;
	res->is_error = false;
out:
	tool_lines_close(&lr);
	if (fd >= 0)
		close(fd);
	tool_fs_close(&fs);
	free(line);
	buf_free(&one);
	buf_free(&out);
}

static int read_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                     struct tool_run **run)
{
	struct read_job *j = calloc(1, sizeof *j);
	int rc;

	if (!j)
		return SB_ERR_NOMEM;
	rc = tool_fs_spec_init(&j->fs, ctx);

	j->path = strdup(tool_in_str(input, "path", ""));
	j->offset = tool_in_int(input, "offset", 1);
	j->limit = tool_in_int(input, "limit", READ_LIMIT_DEFAULT);
	if (rc || !j->path) {
		read_job_free(j);
		return SB_ERR_NOMEM;
	}
	return tool_job_start(ctx, read_work, j, read_job_free, done, ud, run);
}

const struct tool_def tool_read = {
    .name = "read",
    .description =
        "Reads a text file of the workspace. Lines come numbered (\"     1\\tfirst line\"); "
        "the numbers are not part of the file. By default the first 2000 lines; give offset "
        "(1-based line) and limit to read a part of a long file. Lines longer than 2000 "
        "characters are cut. Binary files are refused.",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"path\":{\"type\":\"string\",\"minLength\":1,"
                    "\"description\":\"file path relative to the workspace\"},"
                    "\"offset\":{\"type\":\"integer\",\"minimum\":1,"
                    "\"description\":\"first line to show (1-based); default 1\"},"
                    "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":100000,"
                    "\"description\":\"how many lines to show; default 2000\"}},"
                    "\"required\":[\"path\"],\"additionalProperties\":false}",
    .read_only = tool_always,
    .concurrency_safe = tool_always,
    .max_result_chars = 0,
    .untrusted_output = true,
    .result_pages = true,
    .call = read_call,
};
