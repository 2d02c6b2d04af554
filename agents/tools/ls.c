/*
 * ls.c - the ls tool: the entries of a directory of the workspace.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/beneath.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

#define LS_MAX_SHOWN 1000
#define LS_MAX_LISTED 100000 /* entries read and sorted; the rest are counted */

struct ls_job {
	struct tool_fs_spec fs;
	char *path;
};

static void ls_job_free(void *p)
{
	struct ls_job *j = p;

	tool_fs_spec_free(&j->fs);
	free(j->path);
	free(j);
}

static void ls_work(void *p, struct tool_job_result *res)
{
	struct ls_job *j = p;
	char why[512], rel[BENEATH_PATH_MAX];
	struct tool_fs fs = {.root = -1};
	int fd = -1;
	struct tool_dirent *ents = NULL;
	size_t n = 0, more = 0, i, shown = 0;
	bool cut;
	struct stat st;
	struct buf out;
	int rc;

	buf_init(&out, TOOL_OUTPUT_BUDGET);
	if ((rc = tool_fs_rel(j->path, PATHS_EXISTING, rel, sizeof rel, why, sizeof why)) ||
	    (rc = tool_fs_open(&fs, &j->fs, why, sizeof why))) {
		if (rc != SB_ERR_NOMEM)
			tool_result_errorf(res, "%s", why);
		goto out;
	}
	rc = beneath_stat(fs.root, rel, &st);
	if (rc == SB_OK && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode)) {
		tool_result_errorf(res, "%s is not a directory (use read for a file)", j->path);
		goto out;
	}
	if ((rc = tool_fs_open_dir(&fs, j->path, rel, &fd, why, sizeof why)) != SB_OK) {
		if (rc != SB_ERR_NOMEM)
			tool_result_errorf(res, "%s", why);
		goto out;
	}
	rc = tool_dir_list_fd(fd, LS_MAX_LISTED, res, &ents, &n, &more);
	if (rc == SB_ERR_NOMEM)
		goto out;
	cut = rc == SB_ERR_ABORTED;
	if (rc && !cut) {
		tool_result_errorf(res, "cannot list %s", j->path);
		goto out;
	}
	if (n == 0 && !cut) {
		tool_result_text(res, "(empty directory)");
		goto out;
	}
	for (i = 0; i < n && shown < LS_MAX_SHOWN; i++) {
		if (buf_printf(&out, "%s%s\n", ents[i].name, ents[i].kind == TOOL_DIR ? "/" : "") !=
		    SB_OK)
			break;
		shown++;
	}
	out.max += 256;
	if (shown < n + more)
		(void)buf_printf(&out, "(%zu more entries not shown)\n", n + more - shown);
	if (cut)
		(void)buf_printf(&out,
		                 "(cut at the time limit of %lld ms after reading %zu entries: the "
		                 "listing above is incomplete)\n",
		                 (long long)res->timeout_ms, n + more);
	res->content = buf_steal(&out);
	res->rc = res->content ? SB_OK : SB_ERR_NOMEM;
	res->is_error = false;
out:
	tool_dir_free(ents, n);
	if (fd >= 0)
		close(fd);
	tool_fs_close(&fs);
	buf_free(&out);
}

static int ls_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                   struct tool_run **run)
{
	struct ls_job *j = calloc(1, sizeof *j);
	int rc;

	if (!j)
		return SB_ERR_NOMEM;
	rc = tool_fs_spec_init(&j->fs, ctx);
	j->path = strdup(tool_in_str(input, "path", "."));
	if (rc || !j->path) {
		ls_job_free(j);
		return SB_ERR_NOMEM;
	}
	return tool_job_start(ctx, ls_work, j, ls_job_free, done, ud, run);
}

const struct tool_def tool_ls = {
    .name = "ls",
    .description = "Lists a directory of the workspace, sorted by name, one entry a line; "
                   "directories end with \"/\". At most 1000 entries.",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"path\":{\"type\":\"string\",\"minLength\":1,"
                    "\"description\":\"directory relative to the workspace; default \\\".\\\"\"}},"
                    "\"additionalProperties\":false}",
    .read_only = tool_always,
    .concurrency_safe = tool_always,
    .max_result_chars = 0,
    .untrusted_output = true,
    .call = ls_call,
};
