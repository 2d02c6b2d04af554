/*
 * grep.c - the grep tool: lines of workspace files matching a POSIX extended
 * regular expression, as file:line:text.
 *
 * The walk is sorted (the same tree gives the same output), skips .git,
 * binary files and symlinks (a symlinked file could point out of the
 * workspace), and stops at the caps below with a note saying so.
 */
#include <fnmatch.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/beneath.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

#define GREP_MAX_MATCHES 500
#define GREP_MAX_FILES 200       /* files with matches */
#define GREP_MAX_SCANNED 20000   /* files searched */
#define GREP_FILE_MAX (64 << 20) /* larger files are skipped */
#define GREP_LINE_KEEP 16384     /* bytes of a line the expression sees */
#define GREP_LINE_SHOWN 500      /* bytes of a matching line shown */
#define GREP_MAX_DEPTH 64

struct grep_job {
	struct tool_fs_spec fs;
	char *pattern;
	char *path;
	char *glob; /* or NULL */
	bool icase;
};

struct grep_state {
	const struct tool_fs *fs;
	regex_t re;
	const char *glob;
	bool glob_path; /* the filter has a '/': match the path, not the name */
	struct buf out;
	char *line;
	size_t line_len, line_cap;
	size_t matches, files_matched, files_scanned, skipped_large;
	bool cap_matches, cap_files, cap_scan, cap_budget;
	int rc; /* SB_ERR_NOMEM stops everything */
};

static void grep_job_free(void *p)
{
	struct grep_job *j = p;

	tool_fs_spec_free(&j->fs);
	free(j->pattern);
	free(j->path);
	free(j->glob);
	free(j);
}

static bool grep_stopped(const struct grep_state *g)
{
	return g->rc != SB_OK || g->cap_matches || g->cap_files || g->cap_scan || g->cap_budget;
}

/* fd: the regular file at rel, handed over. */
static void grep_file(struct grep_state *g, int fd, const char *rel)
{
	struct tool_lines lr;
	struct stat st;
	long long lineno = 0;
	bool cut, matched = false;
	size_t shown;
	int r;

	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return;
	}
	if (st.st_size > GREP_FILE_MAX) {
		g->skipped_large++;
		close(fd);
		return;
	}
	if (tool_fd_is_binary(fd)) {
		close(fd);
		return;
	}
	if ((r = tool_lines_open_fd(&lr, fd)) != SB_OK) {
		if (r == SB_ERR_NOMEM)
			g->rc = r;
		return;
	}
	while (!grep_stopped(g) && (r = tool_lines_next(&lr, &g->line, &g->line_len, &g->line_cap,
	                                                GREP_LINE_KEEP, &cut)) == 1) {
		lineno++;
		if (regexec(&g->re, g->line, 0, NULL, 0) != 0)
			continue;
		if (!matched && g->files_matched == GREP_MAX_FILES) {
			g->cap_files = true;
			break;
		}
		if (g->matches == GREP_MAX_MATCHES) {
			g->cap_matches = true;
			break;
		}
		shown = g->line_len > GREP_LINE_SHOWN ? tool_utf8_floor(g->line, GREP_LINE_SHOWN)
		                                      : g->line_len;
		if (buf_printf(&g->out, "%s:%lld:%.*s%s\n", rel, lineno, (int)shown, g->line,
		               shown < g->line_len || cut ? " [...]" : "") != SB_OK) {
			g->cap_budget = true;
			break;
		}
		if (!matched)
			g->files_matched++;
		matched = true;
		g->matches++;
	}
	if (r < 0 && -r == SB_ERR_NOMEM)
		g->rc = SB_ERR_NOMEM;
	tool_lines_close(&lr);
}

static char *grep_join(const char *a, const char *b)
{
	size_t n = strlen(a) + strlen(b) + 2;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s%s%s", a, *a ? "/" : "", b);
	return p;
}

/* rel: relative to the workspace (shown); under: relative to the search
 * root (for a glob filter with a '/'). */
static void grep_dir(struct grep_state *g, int dirfd, const char *rel, const char *under, int depth)
{
	struct tool_dirent *ents = NULL;
	size_t n = 0, more = 0, i;
	char *sub_rel, *sub_under;
	bool want;
	int sub;

	if (depth > GREP_MAX_DEPTH || tool_dir_list_fd(dirfd, GREP_MAX_SCANNED, &ents, &n, &more))
		return;
	for (i = 0; i < n && !grep_stopped(g); i++) {
		if (strcmp(ents[i].name, ".git") == 0)
			continue;
		if (ents[i].kind != TOOL_DIR && ents[i].kind != TOOL_FILE)
			continue;
		sub_rel = grep_join(rel, ents[i].name);
		sub_under = grep_join(under, ents[i].name);
		if (!sub_rel || !sub_under) {
			g->rc = SB_ERR_NOMEM;
		} else if (ents[i].kind == TOOL_DIR) {
			/* From this directory's fd, O_NOFOLLOW: a symlink swapped
			 * in since the listing is skipped, as is a private one. */
			sub = tool_fs_open_child(g->fs, dirfd, ents[i].name, true);
			if (sub >= 0) {
				grep_dir(g, sub, sub_rel, sub_under, depth + 1);
				close(sub);
			}
		} else {
			want = !g->glob || (g->glob_path ? tool_glob_match(g->glob, sub_under)
			                                 : fnmatch(g->glob, ents[i].name, 0) == 0);
			if (want && g->files_scanned == GREP_MAX_SCANNED)
				g->cap_scan = true;
			else if (want) {
				g->files_scanned++;
				sub = tool_fs_open_child(g->fs, dirfd, ents[i].name, false);
				if (sub >= 0)
					grep_file(g, sub, sub_rel);
			}
		}
		free(sub_rel);
		free(sub_under);
	}
	tool_dir_free(ents, n);
}

static void grep_work(void *p, struct tool_job_result *res)
{
	struct grep_job *j = p;
	struct grep_state g;
	char why[512], rel[BENEATH_PATH_MAX];
	struct tool_fs fs = {.root = -1};
	bool compiled = false;
	int fd = -1;
	struct stat st;
	int rc;

	memset(&g, 0, sizeof g);
	buf_init(&g.out, TOOL_OUTPUT_BUDGET - 1000);
	g.glob = j->glob;
	g.glob_path = j->glob && strchr(j->glob, '/');
	rc = regcomp(&g.re, j->pattern, REG_EXTENDED | REG_NOSUB | (j->icase ? REG_ICASE : 0));
	if (rc != 0) {
		regerror(rc, &g.re, why, sizeof why);
		tool_result_errorf(res, "invalid regular expression %s: %s", j->pattern, why);
		goto out;
	}
	compiled = true;
	if ((rc = tool_fs_rel(j->path, PATHS_EXISTING, rel, sizeof rel, why, sizeof why)) ||
	    (rc = tool_fs_open(&fs, &j->fs, why, sizeof why))) {
		if (rc != SB_ERR_NOMEM)
			tool_result_errorf(res, "%s", why);
		goto out;
	}
	g.fs = &fs;
	rc = beneath_stat(fs.root, rel, &st);
	if (rc == SB_OK && S_ISDIR(st.st_mode)) {
		if ((rc = tool_fs_open_dir(&fs, j->path, rel, &fd, why, sizeof why)) == SB_OK)
			grep_dir(&g, fd, rel, "", 0);
	} else if (rc == SB_OK && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
		tool_result_errorf(res, "%s is not a regular file", j->path);
		goto out;
	} else if ((rc = tool_fs_open_file(&fs, j->path, rel, &fd, &st, why, sizeof why)) ==
	           SB_OK) {
		if (tool_fd_is_binary(fd)) {
			tool_result_errorf(res, "%s is a binary file", j->path);
			goto out;
		}
		grep_file(&g, fd, rel);
		fd = -1;
	}
	if (rc) {
		if (rc != SB_ERR_NOMEM)
			tool_result_errorf(res, "%s", why);
		goto out;
	}
	if (g.rc != SB_OK || res->content)
		goto out;
	g.out.max += 1000; /* room for the notes */
	if (g.matches == 0)
		(void)buf_puts(&g.out, "no matches\n");
	if (g.cap_matches)
		(void)buf_printf(&g.out, "(stopped at %d matches; narrow the pattern or path)\n",
		                 GREP_MAX_MATCHES);
	if (g.cap_files)
		(void)buf_printf(
		    &g.out,
		    "(stopped after %d files with matches; narrow the pattern, path or "
		    "glob)\n",
		    GREP_MAX_FILES);
	if (g.cap_scan)
		(void)buf_printf(&g.out,
		                 "(searched the first %d files only; narrow path or glob)\n",
		                 GREP_MAX_SCANNED);
	if (g.cap_budget)
		(void)buf_printf(&g.out,
		                 "(output cut after %zu matches: too long; narrow the pattern or "
		                 "path)\n",
		                 g.matches);
	if (g.skipped_large)
		(void)buf_printf(&g.out, "(skipped %zu files larger than %d MiB)\n",
		                 g.skipped_large, GREP_FILE_MAX >> 20);
	res->content = buf_steal(&g.out);
	res->rc = res->content ? SB_OK : SB_ERR_NOMEM;
	res->is_error = false;
out:
	if (compiled)
		regfree(&g.re);
	free(g.line);
	buf_free(&g.out);
	if (fd >= 0)
		close(fd);
	tool_fs_close(&fs);
}

static int grep_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                     struct tool_run **run)
{
	struct grep_job *j = calloc(1, sizeof *j);
	const char *glob = tool_in_str(input, "glob", NULL);
	int rc;

	if (!j)
		return SB_ERR_NOMEM;
	rc = tool_fs_spec_init(&j->fs, ctx);
	j->pattern = strdup(tool_in_str(input, "pattern", ""));
	j->path = strdup(tool_in_str(input, "path", "."));
	j->glob = glob ? strdup(glob) : NULL;
	j->icase = tool_in_bool(input, "case_insensitive", false);
	if (rc || !j->pattern || !j->path || (glob && !j->glob)) {
		grep_job_free(j);
		return SB_ERR_NOMEM;
	}
	return tool_job_start(ctx->loop, grep_work, j, grep_job_free, done, ud, run);
}

const struct tool_def tool_grep = {
    .name = "grep",
    .description =
        "Searches the files of the workspace for lines matching a POSIX extended regular "
        "expression (as grep -E). Output: path:line:text, paths relative to the workspace, "
        "sorted. glob limits the files searched (\"*.c\" by name, \"src/**/*.h\" by path). "
        ".git and binary files are skipped. At most 500 matches from 200 files.",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"pattern\":{\"type\":\"string\",\"minLength\":1,"
                    "\"description\":\"POSIX extended regular expression\"},"
                    "\"path\":{\"type\":\"string\",\"minLength\":1,"
                    "\"description\":\"file or directory to search, relative to the "
                    "workspace; default \\\".\\\"\"},"
                    "\"glob\":{\"type\":\"string\",\"minLength\":1,"
                    "\"description\":\"only files matching this pattern\"},"
                    "\"case_insensitive\":{\"type\":\"boolean\","
                    "\"description\":\"ignore case; default false\"}},"
                    "\"required\":[\"pattern\"],\"additionalProperties\":false}",
    .read_only = tool_always,
    .concurrency_safe = tool_always,
    .max_result_chars = 0,
    .untrusted_output = true,
    .call = grep_call,
};
