/*
 * grep.c - the grep tool: lines of workspace files matching a regular
 * expression (PCRE2 syntax), as file:line:text.
 *
 * The walk is sorted (the same tree gives the same output), skips .git,
 * binary files and symlinks (a symlinked file could point out of the
 * workspace), and stops at the caps below with a note saying so.
 *
 * The model chooses the expression, so matching it is bounded: PCRE2 (not
 * glibc's regexec, which backtracks without limit on "(a*)*\1b") with a
 * match limit, a depth limit and a heap limit for the interpreter and a
 * stack of fixed size for the JIT. PCRE2's match limit counts afresh at
 * each start position and not the scans of a repeated character, so
 * "\w*\w*\w*!$" ran 78 s on one line of 1000 a's inside it; the pattern is
 * therefore compiled with automatic callouts, and the callout counts the
 * steps of the whole line (GREP_LINE_STEPS) and polls the job's stop flag,
 * which also ends a match in progress at the time limit or a cancel. A line
 * that reaches a limit ends the search with an error that names the file
 * and line.
 */
#include <fnmatch.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

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
/* What one line may cost the expression. An ordinary expression takes a
 * few steps a line (one per item tried where a match may start), and a
 * 16 KiB line of prose stays under 100,000; "(a|aa)+$" on a line of 40 a's
 * reaches GREP_LINE_STEPS in about a tenth of a second. */
#define GREP_LINE_STEPS 5000000
#define GREP_MATCH_LIMIT 10000000
#define GREP_DEPTH_LIMIT 10000
#define GREP_HEAP_LIMIT_KIB 16384
#define GREP_JIT_STACK_MAX (1 << 20)

struct grep_job {
	struct tool_fs_spec fs;
	char *pattern;
	char *path;
	char *glob; /* or NULL */
	bool icase;
};

struct grep_state {
	const struct tool_fs *fs;
	pcre2_code *re;
	pcre2_match_data *md;
	pcre2_match_context *mctx;
	char *costly;      /* "match limit reached on FILE:LINE", or NULL */
	uint64_t steps;    /* callouts on the current line */
	bool steps_capped; /* the line reached GREP_LINE_STEPS */
	const char *glob;
	bool glob_path; /* the filter has a '/': match the path, not the name */
	struct buf out;
	char *line;
	size_t line_len, line_cap;
	size_t matches, files_matched, files_scanned, skipped_large;
	bool cap_matches, cap_files, cap_scan, cap_budget;
	const struct tool_job_result *job; /* its stop flag */
	bool cut_time;                     /* stopped at the time limit (or cancelled) */
	int rc;                            /* SB_ERR_NOMEM stops everything */
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

/* Polled per line and per directory entry: one line costs at most the
 * match limit, so the search ends soon after the flag is set. */
static bool grep_stopped(struct grep_state *g)
{
	if (!g->cut_time && tool_job_stopped(g->job))
		g->cut_time = true;
	return g->rc != SB_OK || g->costly || g->cut_time || g->cap_matches || g->cap_files ||
	       g->cap_scan || g->cap_budget;
}

static const char *grep_limit_name(int r)
{
	switch (r) {
	case PCRE2_ERROR_MATCHLIMIT:
		return "match limit";
	case PCRE2_ERROR_DEPTHLIMIT:
		return "depth limit";
	case PCRE2_ERROR_HEAPLIMIT:
		return "memory limit";
	case PCRE2_ERROR_JIT_STACKLIMIT:
		return "JIT stack limit";
	default:
		return NULL;
	}
}

/* Before each item of the pattern the matcher tries: the line's budget
 * and the stop flag. A negative return abandons the match. */
static int grep_callout(pcre2_callout_block *cb, void *ud)
{
	struct grep_state *g = ud;

	if (++g->steps > GREP_LINE_STEPS) {
		g->steps_capped = true;
		return PCRE2_ERROR_CALLOUT;
	}
	if ((g->steps & 255) == 0 && tool_job_stopped(g->job)) {
		g->cut_time = true;
		return PCRE2_ERROR_CALLOUT;
	}
	return 0;
}

/* Does the current line match? false with g->costly set when the
 * expression reached a limit (or failed) on it, or with g->cut_time set
 * when the job was told to stop. */
static bool grep_match(struct grep_state *g, const char *rel, long long lineno)
{
	char msg[256];
	const char *limit;
	size_t n;
	int r;

	g->steps = 0;
	g->steps_capped = false;
	r = pcre2_match(g->re, (PCRE2_SPTR)g->line, g->line_len, 0, 0, g->md, g->mctx);
	if (r >= 0)
		return true;
	if (r == PCRE2_ERROR_NOMATCH || (r == PCRE2_ERROR_CALLOUT && g->cut_time))
		return false;
	if (r == PCRE2_ERROR_CALLOUT && g->steps_capped)
		r = PCRE2_ERROR_MATCHLIMIT; /* the line's budget is the match limit too */
	n = strlen(rel) + 320;
	g->costly = malloc(n);
	if (!g->costly) {
		g->rc = SB_ERR_NOMEM;
		return false;
	}
	if ((limit = grep_limit_name(r)))
		snprintf(g->costly, n, "pattern too costly: %s reached on %s:%lld; simplify it",
		         limit, rel, lineno);
	else {
		if (pcre2_get_error_message(r, (PCRE2_UCHAR *)msg, sizeof msg) < 0)
			snprintf(msg, sizeof msg, "error %d", r);
		snprintf(g->costly, n, "matching failed on %s:%lld: %s", rel, lineno, msg);
	}
	return false;
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
		if (!grep_match(g, rel, lineno))
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

	if (depth > GREP_MAX_DEPTH)
		return;
	if (tool_dir_list_fd(dirfd, GREP_MAX_SCANNED, g->job, &ents, &n, &more) != SB_OK) {
		tool_dir_free(ents, n); /* what a stop left */
		return;
	}
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
	pcre2_jit_stack *jit = NULL;
	PCRE2_SIZE erroff;
	int fd = -1;
	struct stat st;
	int rc, err;

	memset(&g, 0, sizeof g);
	buf_init(&g.out, TOOL_OUTPUT_BUDGET - 1000);
	g.job = res;
	g.glob = j->glob;
	g.glob_path = j->glob && strchr(j->glob, '/');
	/* Files are not always valid UTF-8: PCRE2_MATCH_INVALID_UTF matches
	 * the valid runs of a line and never lets an invalid byte match. */
	g.re = pcre2_compile((PCRE2_SPTR)j->pattern, PCRE2_ZERO_TERMINATED,
	                     PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_AUTO_CALLOUT |
	                         (j->icase ? PCRE2_CASELESS : 0),
	                     &err, &erroff, NULL);
	if (!g.re) {
		if (err == PCRE2_ERROR_NOMEMORY) {
			res->rc = SB_ERR_NOMEM;
			goto out;
		}
		if (pcre2_get_error_message(err, (PCRE2_UCHAR *)why, sizeof why) < 0)
			snprintf(why, sizeof why, "error %d", err);
		tool_result_errorf(res, "invalid regular expression %s: %s (at offset %zu)",
		                   j->pattern, why, (size_t)erroff);
		goto out;
	}
	g.md = pcre2_match_data_create(1, NULL);
	g.mctx = pcre2_match_context_create(NULL);
	if (!g.md || !g.mctx)
		goto out;
	pcre2_set_match_limit(g.mctx, GREP_MATCH_LIMIT);
	pcre2_set_depth_limit(g.mctx, GREP_DEPTH_LIMIT);
	pcre2_set_heap_limit(g.mctx, GREP_HEAP_LIMIT_KIB);
	pcre2_set_callout(g.mctx, grep_callout, &g);
	/* The JIT honours the match limit, and its stack stands for the depth
	 * and heap limits. Without it (no JIT on this build or machine, or no
	 * memory for its stack) the interpreter runs, bounded the same way. */
	if (pcre2_jit_compile(g.re, PCRE2_JIT_COMPLETE) == 0) {
		jit = pcre2_jit_stack_create(32 * 1024, GREP_JIT_STACK_MAX, NULL);
		if (jit)
			pcre2_jit_stack_assign(g.mctx, NULL, jit);
	}
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
	if (g.costly) {
		tool_result_errorf(res, "%s", g.costly);
		goto out;
	}
	g.out.max += 1000; /* room for the notes */
	if (g.matches == 0 && !g.cut_time)
		(void)buf_puts(&g.out, "no matches\n");
	if (g.cut_time)
		(void)buf_printf(&g.out,
		                 "(cut at the time limit of %lld ms after searching %zu files: %s; "
		                 "narrow the path or glob)\n",
		                 (long long)res->timeout_ms, g.files_scanned,
		                 g.matches ? "the matches above are those found so far"
		                           : "no matches so far");
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
	pcre2_match_context_free(g.mctx);
	pcre2_jit_stack_free(jit);
	pcre2_match_data_free(g.md);
	pcre2_code_free(g.re);
	free(g.costly);
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
	return tool_job_start(ctx, grep_work, j, grep_job_free, done, ud, run);
}

const struct tool_def tool_grep = {
    .name = "grep",
    .description =
        "Searches the files of the workspace for lines matching a regular expression in "
        "PCRE2 (Perl-compatible) syntax, as grep -P: \\d, \\b, (?i), lookarounds and "
        "backreferences work. An expression too costly to match (nested repeats that "
        "backtrack without end) is refused with an error naming the line. Output: path:line:text, "
        "paths relative to the workspace, "
        "sorted. glob limits the files searched (\"*.c\" by name, \"src/**/*.h\" by path). "
        ".git and binary files are skipped. At most 500 matches from 200 files.",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"pattern\":{\"type\":\"string\",\"minLength\":1,"
                    "\"description\":\"regular expression (PCRE2 syntax)\"},"
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
