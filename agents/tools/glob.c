/*
 * glob.c - the glob tool: workspace paths matching a pattern (segments
 * separated by slashes, each an fnmatch pattern, "**" for any depth).
 *
 * The pattern is split at '/'; each segment is matched with fnmatch(3)
 * against the entries of one directory level, and a "**" segment stands for
 * zero or more directories, so the walk only descends where the pattern can
 * still match. .git is never entered and symlinked directories are not
 * followed (no loops, no way out of the workspace).
 */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/beneath.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

#define GLOB_MAX_RESULTS 1000
#define GLOB_MAX_SCANNED 200000 /* directory entries looked at */
#define GLOB_MAX_DEPTH 64
#define GLOB_MAX_SEGMENTS 64

struct glob_job {
	struct tool_fs_spec fs;
	char *pattern;
	char *path;
};

struct glob_walk {
	const struct tool_fs *fs;
	char *segs[GLOB_MAX_SEGMENTS];
	size_t nseg;
	char **results;
	size_t n, cap;
	size_t scanned;
	bool capped, scan_capped;
	const struct tool_job_result *job; /* its stop flag */
	bool cut_time;                     /* stopped at the time limit (or cancelled) */
	int rc;                            /* SB_ERR_NOMEM stops the walk */
};

static void glob_job_free(void *p)
{
	struct glob_job *j = p;

	tool_fs_spec_free(&j->fs);
	free(j->pattern);
	free(j->path);
	free(j);
}

/* Polled per directory entry. */
static bool glob_stopped(struct glob_walk *g)
{
	if (!g->cut_time && tool_job_stopped(g->job))
		g->cut_time = true;
	return g->rc != SB_OK || g->cut_time || g->capped || g->scan_capped;
}

static char *glob_join(const char *a, const char *b, const char *suffix)
{
	size_t n = strlen(a) + strlen(b) + strlen(suffix) + 2;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s%s%s%s", a, *a ? "/" : "", b, suffix);
	return p;
}

static void glob_add(struct glob_walk *g, const char *rel, const char *name, bool dir)
{
	char **grown;

	if (g->n == GLOB_MAX_RESULTS) {
		g->capped = true;
		return;
	}
	if (g->n == g->cap) {
		g->cap = g->cap ? g->cap * 2 : 64;
		grown = realloc(g->results, g->cap * sizeof *grown);
		if (!grown) {
			g->rc = SB_ERR_NOMEM;
			return;
		}
		g->results = grown;
	}
	g->results[g->n] = glob_join(rel, name, dir ? "/" : "");
	if (!g->results[g->n]) {
		g->rc = SB_ERR_NOMEM;
		return;
	}
	g->n++;
}

/* dirfd: the directory at rel, borrowed. Each subdirectory is opened from
 * it with O_NOFOLLOW, never by its path. */
static void glob_walk_dir(struct glob_walk *g, int dirfd, const char *rel, size_t si, int depth)
{
	struct tool_dirent *ents = NULL;
	size_t n = 0, more = 0, i;
	const char *seg = g->segs[si];
	bool last = si + 1 == g->nseg, any = strcmp(seg, "**") == 0, dir;
	char *sub_rel = NULL;
	int sub;

	if (glob_stopped(g) || depth > GLOB_MAX_DEPTH)
		return;
	if (any && !last)
		glob_walk_dir(g, dirfd, rel, si + 1, depth); /* "**" as no directory */
	if (glob_stopped(g))
		return;
	if (tool_dir_list_fd(dirfd, GLOB_MAX_SCANNED, g->job, &ents, &n, &more) != SB_OK) {
		/* unreadable directories are skipped; a stop ends the walk */
		tool_dir_free(ents, n);
		return;
	}
	g->scanned += n + more;
	for (i = 0; i < n && !glob_stopped(g); i++) {
		if (strcmp(ents[i].name, ".git") == 0)
			continue;
		dir = ents[i].kind == TOOL_DIR;
		if (!any && fnmatch(seg, ents[i].name, 0) != 0)
			continue;
		if (last)
			glob_add(g, rel, ents[i].name, dir);
		if (!dir || (!any && last) || glob_stopped(g))
			continue;
		/* A directory swapped for a symlink since the listing fails
		 * to open and is skipped, as is a private one. */
		sub = tool_fs_open_child(g->fs, dirfd, ents[i].name, true);
		if (sub < 0)
			continue;
		sub_rel = glob_join(rel, ents[i].name, "");
		if (!sub_rel)
			g->rc = SB_ERR_NOMEM;
		else
			glob_walk_dir(g, sub, sub_rel, any ? si : si + 1, depth + 1);
		close(sub);
		free(sub_rel);
	}
	if (g->scanned > GLOB_MAX_SCANNED)
		g->scan_capped = true;
	tool_dir_free(ents, n);
}

static int glob_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void glob_work(void *p, struct tool_job_result *res)
{
	struct glob_job *j = p;
	struct glob_walk g = {.rc = SB_OK};
	char why[512], rel[BENEATH_PATH_MAX];
	char *s, *next;
	struct tool_fs fs = {.root = -1};
	int fd = -1;
	struct stat st;
	struct buf out;
	size_t i, shown = 0;
	int rc;

	buf_init(&out, TOOL_OUTPUT_BUDGET);
	if (j->pattern[0] == '/') {
		tool_result_errorf(
		    res,
		    "absolute patterns are not allowed: %s (patterns are relative to "
		    "path, which is relative to the workspace)",
		    j->pattern);
		goto out;
	}
	for (s = j->pattern; s; s = next) {
		next = strchr(s, '/');
		if (next)
			*next++ = '\0';
		if (*s == '\0' || strcmp(s, ".") == 0)
			continue;
		if (strcmp(s, "..") == 0) {
			tool_result_errorf(res,
			                   "patterns may not contain \"..\"; give path to search "
			                   "another directory of the workspace");
			goto out;
		}
		if (g.nseg == GLOB_MAX_SEGMENTS) {
			tool_result_errorf(res, "the pattern has too many segments");
			goto out;
		}
		g.segs[g.nseg++] = s;
	}
	if (g.nseg == 0) {
		tool_result_errorf(res, "the pattern is empty");
		goto out;
	}
	if ((rc = tool_fs_rel(j->path, PATHS_EXISTING, rel, sizeof rel, why, sizeof why)) ||
	    (rc = tool_fs_open(&fs, &j->fs, why, sizeof why))) {
		if (rc != SB_ERR_NOMEM)
			tool_result_errorf(res, "%s", why);
		goto out;
	}
	rc = beneath_stat(fs.root, rel, &st);
	if (rc == SB_OK && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode)) {
		tool_result_errorf(res, "%s is not a directory", j->path);
		goto out;
	}
	if ((rc = tool_fs_open_dir(&fs, j->path, rel, &fd, why, sizeof why)) != SB_OK) {
		if (rc != SB_ERR_NOMEM)
			tool_result_errorf(res, "%s", why);
		goto out;
	}
	g.fs = &fs;
	g.job = res;
	glob_walk_dir(&g, fd, rel, 0, 0);
	if (g.rc != SB_OK)
		goto out;
	if (g.n == 0 && g.cut_time) {
		tool_result_textf(
		    res,
		    "no matches so far (cut at the time limit of %lld ms; narrow path "
		    "or the pattern)",
		    (long long)res->timeout_ms);
		goto out;
	}
	if (g.n == 0) {
		tool_result_text(res, g.scan_capped
		                          ? "no matches (the search stopped early: too many "
		                            "entries; narrow path or the pattern)"
		                          : "no matches");
		goto out;
	}
	qsort(g.results, g.n, sizeof *g.results, glob_cmp);
	for (i = 0; i < g.n; i++) {
		if (i > 0 && strcmp(g.results[i], g.results[i - 1]) == 0)
			continue; /* "**" twice can find a path twice */
		if (buf_printf(&out, "%s\n", g.results[i]) != SB_OK) {
			g.capped = true;
			break;
		}
		shown++;
	}
	out.max += 256;
	if (g.cut_time)
		(void)buf_printf(
		    &out,
		    "(cut at the time limit of %lld ms: the paths found so far; narrow "
		    "path or the pattern)\n",
		    (long long)res->timeout_ms);
	else if (g.capped)
		(void)buf_printf(&out, "(results capped at %zu paths; narrow the pattern)\n",
		                 shown);
	else if (g.scan_capped)
		(void)buf_printf(
		    &out, "(the search stopped after %d entries; narrow path or the pattern)\n",
		    GLOB_MAX_SCANNED);
	res->content = buf_steal(&out);
	res->rc = res->content ? SB_OK : SB_ERR_NOMEM;
	res->is_error = false;
out:
	for (i = 0; i < g.n; i++)
		free(g.results[i]);
	free(g.results);
	if (fd >= 0)
		close(fd);
	tool_fs_close(&fs);
	buf_free(&out);
}

static int glob_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                     struct tool_run **run)
{
	struct glob_job *j = calloc(1, sizeof *j);
	int rc;

	if (!j)
		return SB_ERR_NOMEM;
	rc = tool_fs_spec_init(&j->fs, ctx);
	j->pattern = strdup(tool_in_str(input, "pattern", ""));
	j->path = strdup(tool_in_str(input, "path", "."));
	if (rc || !j->pattern || !j->path) {
		glob_job_free(j);
		return SB_ERR_NOMEM;
	}
	return tool_job_start(ctx, glob_work, j, glob_job_free, done, ud, run);
}

const struct tool_def tool_glob = {
    .name = "glob",
    .description =
        "Finds files of the workspace by name pattern, such as \"**/*.md\" or \"src/*.c\": "
        "segments separated by \"/\" match one directory level each (*, ?, [abc]), and \"**\" "
        "matches any number of directories. Paths come back relative to the workspace, "
        "sorted; directories end with \"/\". .git is skipped. At most 1000 paths.",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"pattern\":{\"type\":\"string\",\"minLength\":1,"
                    "\"description\":\"the pattern, relative to path\"},"
                    "\"path\":{\"type\":\"string\",\"minLength\":1,"
                    "\"description\":\"directory to search, relative to the workspace; "
                    "default \\\".\\\"\"}},"
                    "\"required\":[\"pattern\"],\"additionalProperties\":false}",
    .read_only = tool_always,
    .concurrency_safe = tool_always,
    .max_result_chars = 0,
    .untrusted_output = true,
    .call = glob_call,
};
