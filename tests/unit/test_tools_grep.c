/*
 * test_tools_grep.c - the file tools under hostile input: a model-chosen
 * expression that backtracks without end, a search that outlives its time
 * limit, a cancel in the middle of a search, and file tools pinning the
 * thread pool while other pool work (a transcript append) must still run.
 *
 * Every call is watched: a call still running after WATCHDOG_MS is a hang,
 * which no cancel can end (a pool thread cannot be stopped from outside),
 * so the test reports it and exits instead of waiting for ever.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/err.h"

#define WATCHDOG_MS 30000

static uv_loop_t loop;
static char ws[PATH_MAX];

/* ---- workspace ---------------------------------------------------------- */

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	return remove(p);
}

static int setup(void **state)
{
	char tmpl[] = "/tmp/sb-tools-grep-XXXXXX";
	char *real;

	if (uv_loop_init(&loop) != 0 || !mkdtemp(tmpl))
		return -1;
	real = realpath(tmpl, NULL);
	if (!real)
		return -1;
	snprintf(ws, sizeof ws, "%s", real);
	free(real);
	return 0;
}

static void close_walk(uv_handle_t *h, void *arg)
{
	if (!uv_is_closing(h)) {
		(*(int *)arg)++;
		uv_close(h, NULL);
	}
}

static int teardown(void **state)
{
	int rc, left_open = 0;

	uv_run(&loop, UV_RUN_DEFAULT);
	uv_walk(&loop, close_walk, &left_open);
	uv_run(&loop, UV_RUN_DEFAULT);
	rc = uv_loop_close(&loop);
	nftw(ws, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	if (left_open)
		fprintf(stderr, "teardown: %d handles were left open\n", left_open);
	return rc == 0 && left_open == 0 ? 0 : -1;
}

static void in_ws(char *out, const char *rel)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", ws, rel);

	assert_true(n > 0 && n < PATH_MAX);
}

/* Writes ws/rel (creating its parents): n lines, each line_len times c and
 * then tail. */
static void put_lines(const char *rel, size_t n, size_t line_len, char c, const char *tail)
{
	char p[PATH_MAX], *line;
	size_t i, tl = strlen(tail);
	FILE *f;

	in_ws(p, rel);
	assert_int_equal(tool_mkdir_parents(p, NULL, 0), SB_OK);
	f = fopen(p, "wb");
	assert_non_null(f);
	line = malloc(line_len + tl + 1);
	assert_non_null(line);
	memset(line, c, line_len);
	memcpy(line + line_len, tail, tl);
	line[line_len + tl] = '\n';
	for (i = 0; i < n; i++)
		assert_int_equal(fwrite(line, 1, line_len + tl + 1, f), line_len + tl + 1);
	free(line);
	assert_int_equal(fclose(f), 0);
}

/* ---- running a tool ----------------------------------------------------- */

struct result {
	int calls;
	int rc;
	char *content;
	bool is_error;
	uint64_t t_done; /* uv_hrtime at done */
};

static void on_done(void *ud, int rc, char *content, bool is_error)
{
	struct result *r = ud;

	r->calls++;
	r->rc = rc;
	free(r->content);
	r->content = content;
	r->is_error = is_error;
	r->t_done = uv_hrtime();
}

static void watchdog_fire(uv_timer_t *t)
{
	fprintf(stderr, "FAIL: a tool call is still running after %d ms: it hangs\n", WATCHDOG_MS);
	fflush(stderr);
	_exit(1);
}

static uv_timer_t watchdog;

static void watch(void)
{
	uv_timer_init(&loop, &watchdog);
	uv_timer_start(&watchdog, watchdog_fire, WATCHDOG_MS, 0);
	uv_unref((uv_handle_t *)&watchdog);
}

static void unwatch(void)
{
	uv_close((uv_handle_t *)&watchdog, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
}

static struct tool_ctx base_ctx(int64_t timeout_ms)
{
	struct tool_ctx ctx;

	memset(&ctx, 0, sizeof ctx);
	ctx.loop = &loop;
	ctx.workspace = ws;
	ctx.timeout_ms = timeout_ms;
	ctx.agent_id = "main";
	return ctx;
}

/* Starts grep with input (JSON text) into r. */
static struct tool_run *start_grep(const struct tool_ctx *ctx, const char *input, struct result *r)
{
	json_t *in = json_loads(input, 0, NULL);
	struct tool_run *run = NULL;

	assert_non_null(in);
	assert_int_equal(tool_grep.call(ctx, in, on_done, r, &run), SB_OK);
	assert_int_equal(r->calls, 0); /* never from inside call */
	json_decref(in);
	return run;
}

/* Runs grep to completion; returns its result (content the caller's) and
 * how long it took. */
static struct result run_grep(int64_t timeout_ms, const char *input, double *seconds)
{
	struct tool_ctx ctx = base_ctx(timeout_ms);
	struct result r = {0};
	uint64_t t0 = uv_hrtime();

	(void)start_grep(&ctx, input, &r);
	watch();
	uv_run(&loop, UV_RUN_DEFAULT);
	unwatch();
	*seconds = (double)(r.t_done - t0) / 1e9;
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.rc, SB_OK);
	assert_non_null(r.content);
	return r;
}

/* ---- hostile expressions ------------------------------------------------ */

/* Expressions that backtrack without end (glibc's regexec took 9 s on one
 * line of 200 a's for the first, and grows with the power of the length),
 * on lines of a's with no way to match: each search ends at once, the
 * costly ones with an error that names the line. */
static void test_hostile_patterns(void **state)
{
	static const struct {
		const char *input;
		const char *want; /* in the result; NULL: "no matches" */
	} cases[] = {
	    {"{\"pattern\":\"(a*)*\\\\1b\",\"path\":\"aaa.txt\"}", NULL},
	    {"{\"pattern\":\"(a*)*\\\\1b\"}", NULL},
	    {"{\"pattern\":\"(a|aa)+$\",\"path\":\"bang.txt\"}",
	     "pattern too costly: match limit reached on bang.txt:1; simplify it"},
	    {"{\"pattern\":\"(a*)*\\\\1$\",\"path\":\"bang.txt\"}",
	     "pattern too costly: match limit reached on bang.txt:1; simplify it"},
	    {"{\"pattern\":\"^(([a-z])+.)+[A-Z]([a-z])+$\"}",
	     "pattern too costly: match limit reached on "},
	    {"{\"pattern\":\"(\\\\w+\\\\s?)*$\",\"path\":\"bang.txt\"}",
	     "pattern too costly: match limit reached on bang.txt:1"},
	    /* Within PCRE2's own match limit (it counts afresh at each
	     * start position): 78 s a line without the line's budget. */
	    {"{\"pattern\":\"\\\\w*\\\\w*\\\\w*!$\",\"path\":\"long.txt\"}",
	     "pattern too costly: match limit reached on long.txt:1; simplify it"},
	};
	struct result r;
	double s;
	size_t i;

	put_lines("aaa.txt", 50, 2000, 'a', "");
	put_lines("bang.txt", 50, 40, 'a', "!");
	put_lines("long.txt", 50, 1000, 'a', "!x");
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		r = run_grep(120000, cases[i].input, &s);
		if (cases[i].want ? !r.is_error || !strstr(r.content, cases[i].want)
		                  : r.is_error || strcmp(r.content, "no matches\n") != 0)
			fail_msg("grep %s: want %s, got (error %d, %.2f s): [%s]", cases[i].input,
			         cases[i].want ? cases[i].want : "no matches", r.is_error, s,
			         r.content);
		if (s > 5.0)
			fail_msg("grep %s took %.2f s", cases[i].input, s);
		free(r.content);
	}
}

/* What PCRE2 brings besides its limits, and what invalid UTF-8 in a file
 * does: the valid parts of the line still match, an invalid byte never. */
static void test_pcre2_syntax_and_invalid_utf8(void **state)
{
	struct result r;
	double s;
	char p[PATH_MAX];
	FILE *f;

	in_ws(p, "mixed.txt");
	f = fopen(p, "wb");
	assert_non_null(f);
	fputs("id 42 here\ncaf\xc3\xa9 au lait\nbad \xff\xfe byte 7\nfoo(bar)\n", f);
	assert_int_equal(fclose(f), 0);

	r = run_grep(120000, "{\"pattern\":\"\\\\bid \\\\d+\",\"path\":\"mixed.txt\"}", &s);
	assert_false(r.is_error);
	assert_string_equal(r.content, "mixed.txt:1:id 42 here\n");
	free(r.content);
	r = run_grep(120000, "{\"pattern\":\"caf\xc3\xa9\",\"path\":\"mixed.txt\"}", &s);
	assert_false(r.is_error);
	assert_string_equal(r.content, "mixed.txt:2:caf\xc3\xa9 au lait\n");
	free(r.content);
	r = run_grep(120000, "{\"pattern\":\"byte \\\\d\",\"path\":\"mixed.txt\"}", &s);
	assert_false(r.is_error);
	assert_string_equal(r.content, "mixed.txt:3:bad \xff\xfe byte 7\n");
	free(r.content);
	r = run_grep(120000, "{\"pattern\":\"bad ..\\\\s\",\"path\":\"mixed.txt\"}", &s);
	assert_false(r.is_error);
	assert_string_equal(r.content, "no matches\n"); /* "." is never an invalid byte */
	free(r.content);
	r = run_grep(120000, "{\"pattern\":\"CAF\xc3\x89\",\"case_insensitive\":true}", &s);
	assert_false(r.is_error);
	assert_string_equal(r.content, "mixed.txt:2:caf\xc3\xa9 au lait\n");
	free(r.content);
	r = run_grep(120000, "{\"pattern\":\"foo\\\\(bar\"}", &s);
	assert_false(r.is_error);
	assert_string_equal(r.content, "mixed.txt:4:foo(bar)\n");
	free(r.content);
	r = run_grep(120000, "{\"pattern\":\"(?<=foo\\\\()bar\"}", &s);
	assert_false(r.is_error);
	assert_string_equal(r.content, "mixed.txt:4:foo(bar)\n");
	free(r.content);
	r = run_grep(120000, "{\"pattern\":\"(unclosed\"}", &s);
	assert_true(r.is_error);
	assert_non_null(strstr(r.content, "invalid regular expression (unclosed: "));
	free(r.content);
}

/* grep's glob filter with many "**": each segment pair is tried once
 * (tried at every split, thirty "**" against forty segments ran for
 * ever), and the meaning is the one test_tools checks. */
static void on_alarm(int sig)
{
	static const char msg[] = "FAIL: tool_glob_match still running after 20 s\n";

	(void)sig;
	(void)!write(2, msg, sizeof msg - 1);
	_exit(1);
}

static void test_glob_filter_bounded(void **state)
{
	char pat[256], path[256];
	size_t i, n = 0, m = 0;
	uint64_t t0;
	double s;

	for (i = 0; i < 30; i++)
		n += (size_t)snprintf(pat + n, sizeof pat - n, "**/");
	snprintf(pat + n, sizeof pat - n, "x/*.c");
	for (i = 0; i < 40; i++)
		m += (size_t)snprintf(path + m, sizeof path - m, "a/");
	snprintf(path + m, sizeof path - m, "y.c");
	signal(SIGALRM, on_alarm);
	alarm(20);
	t0 = uv_hrtime();
	assert_false(tool_glob_match(pat, path));
	s = (double)(uv_hrtime() - t0) / 1e9;
	alarm(0);
	if (s > 0.5)
		fail_msg("tool_glob_match took %.2f s", s);

	assert_true(tool_glob_match("**", "a/b/c"));
	assert_true(tool_glob_match("**/x", "x"));
	assert_true(tool_glob_match("**/x", "a/b/x"));
	assert_false(tool_glob_match("**/x", "a/b/y"));
	assert_true(tool_glob_match("a/**", "a/b"));
	assert_false(tool_glob_match("a/**", "a"));
	assert_true(tool_glob_match("a/**/**/b", "a/b"));
	assert_true(tool_glob_match("a/**/c/**/e", "a/b/c/d/e"));
	assert_false(tool_glob_match("a/**/c/**/e", "a/b/d/e"));
	assert_true(tool_glob_match("a/*/b", "a/x/b"));
	assert_false(tool_glob_match("a/*/b", "a/b"));
	assert_false(tool_glob_match("a/b", "a/b/c"));
	assert_true(tool_glob_match("src/**/*.h", "src/y.h"));
	assert_true(tool_glob_match("*.[ch]", "x.h"));
}

/* ---- time limits and cancel -------------------------------------------- */

/* An expression that costs about 0.1 s a line without reaching the line's
 * budget ("\w*\w*!$" on 1000 a's and "!x"), on a tree of 200 such files of
 * 20 lines: minutes of work. */
#define SLOW_PATTERN "{\"pattern\":\"\\\\w*\\\\w*!$\",\"path\":\"tree\"}"

static void put_slow_tree(void)
{
	char rel[64];
	int d, f;

	for (d = 0; d < 10; d++)
		for (f = 0; f < 20; f++) {
			snprintf(rel, sizeof rel, "tree/d%02d/f%02d.txt", d, f);
			put_lines(rel, 20, 1000, 'a', "!x");
		}
}

static void test_time_limit_cuts_grep(void **state)
{
	struct result r;
	double s;

	put_slow_tree();
	r = run_grep(200, SLOW_PATTERN, &s);
	if (r.is_error || !strstr(r.content, "(cut at the time limit of 200 ms after searching ") ||
	    !strstr(r.content, "no matches so far"))
		fail_msg("want a result cut at the time limit, got (error %d, %.2f s): [%s]",
		         r.is_error, s, r.content);
	if (s > 1.5)
		fail_msg("cut at %.2f s, not promptly after 200 ms", s);
	free(r.content);

	/* What was found before the limit is kept. */
	put_lines("tree/a/hit.txt", 1, 10, 'b', "!");
	r = run_grep(200, SLOW_PATTERN, &s);
	assert_false(r.is_error);
	if (!strstr(r.content, "tree/a/hit.txt:1:bbbbbbbbbb!\n") ||
	    !strstr(r.content, "the matches above are those found so far"))
		fail_msg("want the match found before the limit, got (%.2f s): [%s]", s, r.content);
	assert_true(s < 1.5);
	free(r.content);
}

struct canceller {
	uv_timer_t t;
	struct tool_run *run;
	struct result *r;
	int calls_after_cancel;
	uint64_t t_cancel;
};

static void cancel_fire(uv_timer_t *t)
{
	struct canceller *c = t->data;

	c->t_cancel = uv_hrtime();
	c->run->cancel(c->run);
	c->calls_after_cancel = c->r->calls; /* done ran before cancel returned */
	uv_close((uv_handle_t *)t, NULL);
}

/* A cancel in the middle of a search answers at once and the search
 * itself ends soon after (the loop drains), freeing everything (ASan). */
static void test_cancel_running_grep(void **state)
{
	struct tool_ctx ctx = base_ctx(120000);
	struct result r = {0};
	struct canceller c = {.r = &r};
	uint64_t t_drained;

	put_slow_tree();
	c.run = start_grep(&ctx, SLOW_PATTERN, &r);
	uv_timer_init(&loop, &c.t);
	c.t.data = &c;
	uv_timer_start(&c.t, cancel_fire, 300, 0);
	watch();
	uv_run(&loop, UV_RUN_DEFAULT);
	t_drained = uv_hrtime();
	unwatch();
	assert_int_equal(c.calls_after_cancel, 1);
	assert_int_equal(r.calls, 1); /* the late result is dropped */
	assert_int_equal(r.rc, SB_ERR_ABORTED);
	assert_true(r.is_error);
	if ((double)(t_drained - c.t_cancel) / 1e9 > 1.5)
		fail_msg("the search ran on %.2f s after its cancel",
		         (double)(t_drained - c.t_cancel) / 1e9);
	free(r.content);
}

/* A job that ignores its stop flag is answered a second after its time
 * limit; what it hands back later is dropped and it is freed then. */
struct deaf {
	int frees;
};

static void deaf_work(void *arg, struct tool_job_result *res)
{
	usleep(3000 * 1000);
	tool_result_text(res, "late");
}

static void deaf_free(void *arg)
{
	((struct deaf *)arg)->frees++;
}

static void test_job_deaf_to_stop(void **state)
{
	struct tool_ctx ctx = base_ctx(100);
	struct result r = {0};
	struct deaf d = {0};
	struct tool_run *run = NULL;
	uint64_t t0 = uv_hrtime();
	double s;

	assert_int_equal(tool_job_start(&ctx, deaf_work, &d, deaf_free, on_done, &r, &run), SB_OK);
	watch();
	uv_run(&loop, UV_RUN_DEFAULT);
	unwatch();
	s = (double)(r.t_done - t0) / 1e9;
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.rc, SB_OK);
	assert_true(r.is_error);
	assert_non_null(strstr(r.content, "timed out after 100 ms: the tool did not stop"));
	if (s < 1.0 || s > 2.5)
		fail_msg("answered after %.2f s, want about 1.1 s", s);
	assert_int_equal(d.frees, 1);
	free(r.content);
}

/* ---- ls, write and edit stop where they are ----------------------------- */

#ifdef SB_CRASH_POINTS
/* Runs tool with input (taken) to completion; the result's content is the
 * caller's. */
static struct result run_tool(const struct tool_def *tool, json_t *in)
{
	struct tool_ctx ctx = base_ctx(120000);
	struct result r = {0};
	struct tool_run *run = NULL;

	assert_non_null(in);
	assert_int_equal(tool->call(&ctx, in, on_done, &r, &run), SB_OK);
	json_decref(in);
	watch();
	uv_run(&loop, UV_RUN_DEFAULT);
	unwatch();
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.rc, SB_OK);
	assert_non_null(r.content);
	return r;
}

/* The bytes of ws/rel (NULL when absent), into *len. */
static char *slurp(const char *rel, size_t *len)
{
	char path[PATH_MAX], *b = NULL;
	FILE *f;
	long n;

	in_ws(path, rel);
	f = fopen(path, "rb");
	if (!f)
		return NULL;
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	b = malloc((size_t)n + 1);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
	b[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return b;
}

/* How many entries the workspace's top directory holds (a temporary file
 * left behind shows here). */
static int top_entries(void)
{
	DIR *d = opendir(ws);
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
	closedir(d);
	return n;
}

/* The deadline (or a cancel) arriving while ls reads a large directory:
 * the listing ends there, and says it is incomplete. */
static void test_stop_cuts_ls(void **state)
{
	struct result r;
	char rel[64];
	size_t lines;

	for (int i = 0; i < 300; i++) {
		snprintf(rel, sizeof rel, "big/e%03d", i);
		put_lines(rel, 0, 0, 'a', "");
	}
	r = run_tool(&tool_ls, json_pack("{s:s}", "path", "big"));
	assert_false(r.is_error);
	assert_null(strstr(r.content, "cut at the time limit"));
	free(r.content);

	tool_job_test_stop_after(100);
	r = run_tool(&tool_ls, json_pack("{s:s}", "path", "big"));
	tool_job_test_stop_after(0);
	assert_false(r.is_error);
	lines = 0;
	for (const char *q = r.content; (q = strstr(q, "\ne")); q++)
		lines++;
	if (!strstr(r.content, "(cut at the time limit of 120000 ms after reading ") ||
	    !strstr(r.content, "the listing above is incomplete") || lines >= 300)
		fail_msg("ls did not stop at the deadline: [%.300s]", r.content);
	free(r.content);
}

/* A write stopped at any point of its work leaves the file as it was (or
 * absent) and no temporary file beside it; one that was not stopped
 * replaced it whole. */
static void test_stop_leaves_write_undone(void **state)
{
	const size_t big = (3u << 20) + 17;
	char *content = malloc(big + 1), *got;
	int stopped = 0, entries;
	struct result r;
	size_t len;

	assert_non_null(content);
	memset(content, 'x', big);
	content[big] = '\0';
	put_lines("w.txt", 1, 3, 'o', "");
	entries = top_entries();
	for (unsigned n = 1; n <= 10; n++) {
		tool_job_test_stop_after(n);
		r = run_tool(&tool_write,
		             json_pack("{s:s,s:s%}", "path", "w.txt", "content", content, big));
		tool_job_test_stop_after(0);
		got = slurp("w.txt", &len);
		assert_non_null(got);
		if (r.is_error) {
			if (!strstr(r.content, "before w.txt was written: it holds what it held "
			                       "before"))
				fail_msg("stop %u: %s", n, r.content);
			assert_int_equal(len, 4);
			assert_memory_equal(got, "ooo\n", 4);
			stopped++;
		} else {
			assert_int_equal(len, big);
			/* put it back for the next round */
			put_lines("w.txt", 1, 3, 'o', "");
		}
		assert_int_equal(top_entries(), entries);
		free(got);
		free(r.content);
	}
	/* a chunk at a time (three chunks, the fsync and the rename) */
	if (stopped < 5)
		fail_msg("the write stopped at %d of its points, want 5 or more", stopped);

	/* a new file stopped is not created; an append stopped while it
	 * reads the old part appends nothing */
	tool_job_test_stop_after(1);
	r = run_tool(&tool_write, json_pack("{s:s,s:s}", "path", "new.txt", "content", "n"));
	tool_job_test_stop_after(0);
	assert_true(r.is_error);
	assert_non_null(strstr(r.content, "it was not created"));
	assert_null(slurp("new.txt", &len));
	free(r.content);
	tool_job_test_stop_after(1);
	r = run_tool(&tool_write,
	             json_pack("{s:s,s:s,s:b}", "path", "w.txt", "content", "more", "append", 1));
	tool_job_test_stop_after(0);
	assert_true(r.is_error);
	got = slurp("w.txt", &len);
	assert_int_equal(len, 4);
	free(got);
	free(r.content);
	free(content);
}

/* An edit stopped while it reads, counts, replaces or writes leaves the
 * file as it was; one that was not stopped changed every occurrence. */
static void test_stop_leaves_edit_undone(void **state)
{
	int stopped = 0, entries;
	struct result r;
	char *got;
	size_t len;

	put_lines("e.txt", 20000, 1, 'a', "");
	entries = top_entries();
	for (unsigned n = 1; n <= 40; n++) {
		tool_job_test_stop_after(n);
		r = run_tool(&tool_edit,
		             json_pack("{s:s,s:s,s:s,s:b}", "path", "e.txt", "old_string", "a",
		                       "new_string", "bb", "replace_all", 1));
		tool_job_test_stop_after(0);
		got = slurp("e.txt", &len);
		assert_non_null(got);
		if (r.is_error) {
			if (!strstr(r.content, "before e.txt was edited: it holds what it held"))
				fail_msg("stop %u: %s", n, r.content);
			assert_int_equal(len, 40000);
			assert_null(strchr(got, 'b'));
			stopped++;
		} else {
			assert_int_equal(len, 60000);
			assert_null(strchr(got, 'a'));
			put_lines("e.txt", 20000, 1, 'a', "");
		}
		assert_int_equal(top_entries(), entries);
		free(got);
		free(r.content);
	}
	/* the read, every 4096 occurrences counted and replaced, the write's
	 * chunk, fsync and rename */
	if (stopped < 10)
		fail_msg("the edit stopped at %d of its points, want 10 or more", stopped);
}

/* memory_search stopped while it syncs the index or queries it gives up
 * with an error that says so, and leaves the index whole: the next search
 * finds what is there. */
static void test_stop_ends_memory_search(void **state)
{
	struct tool_memory mem = {0};
	struct tool_ctx ctx;
	char index[PATH_MAX], rel[64];
	int stopped = 0, found = 0;

	in_ws(index, ".memory-index.sqlite");
	mem.index = index;
	put_lines("MEMORY.md", 3, 5, 'z', " apple");
	for (int i = 0; i < 20; i++) {
		snprintf(rel, sizeof rel, "memory/2026-11-%02d.md", i + 1);
		put_lines(rel, 200, 40, 'q', " pear");
	}
	/* the first rounds stop in the first sync, which indexes every file;
	 * later ones let it finish, and then stop in later syncs or not */
	for (unsigned n = 1, round = 0; round < 26; n *= 2, round++) {
		struct result r = {0};
		struct tool_run *run = NULL;
		json_t *in = json_pack("{s:s}", "query", "apple");

		ctx = base_ctx(120000);
		ctx.memory = &mem;
		tool_job_test_stop_after(n);
		assert_int_equal(tool_memory_search.call(&ctx, in, on_done, &r, &run), SB_OK);
		json_decref(in);
		watch();
		uv_run(&loop, UV_RUN_DEFAULT);
		unwatch();
		tool_job_test_stop_after(0);
		assert_int_equal(r.calls, 1);
		assert_non_null(r.content);
		if (r.is_error) {
			if (!strstr(r.content, "memory_search stopped at the time limit"))
				fail_msg("stop %u: %s", n, r.content);
			stopped++;
		} else {
			if (!strstr(r.content, "MEMORY.md:"))
				fail_msg("stop %u: no hit: %s", n, r.content);
			found++;
			/* a changed file for the next round's sync to index */
			snprintf(rel, sizeof rel, "memory/2026-11-%02d.md", (int)(round % 20) + 1);
			put_lines(rel, 200, 40, 'q', round % 2 ? " plum" : " pear");
		}
		free(r.content);
	}
	/* a poll per file synced and per 1,000 SQLite steps */
	if (stopped < 5 || found == 0)
		fail_msg("memory_search stopped %d times and found %d times in 26", stopped, found);
}

/* A memory tool's call with the operator's memory scope. */
static struct result run_memory_tool(const struct tool_def *tool, json_t *in)
{
	struct tool_memory mem = {0};
	struct tool_ctx ctx = base_ctx(120000);
	struct result r = {0};
	struct tool_run *run = NULL;

	mem.today = "memory/2026-12-04.md";
	mem.writable = true;
	ctx.memory = &mem;
	assert_non_null(in);
	assert_int_equal(tool->call(&ctx, in, on_done, &r, &run), SB_OK);
	json_decref(in);
	watch();
	uv_run(&loop, UV_RUN_DEFAULT);
	unwatch();
	assert_int_equal(r.calls, 1);
	assert_non_null(r.content);
	return r;
}

/* memory_get stopped while it reads a large memory file or counts its
 * lines gives up with an error that says so; one that was not stopped
 * gives the lines asked for. */
static void test_stop_ends_memory_get(void **state)
{
	int stopped = 0, read = 0;

	put_lines("MEMORY.md", 30000, 99, 'm', "");
	/* from the first point on, until one is not stopped */
	for (unsigned n = 1; n <= 400 && read == 0; n++) {
		struct result r;

		tool_job_test_stop_after(n);
		r = run_memory_tool(
		    &tool_memory_get,
		    json_pack("{s:s,s:i,s:i}", "path", "MEMORY.md", "from", 29001, "lines", 3));
		tool_job_test_stop_after(0);
		if (r.is_error) {
			if (!strstr(r.content, "memory_get stopped at the time limit of 120000 ms "
			                       "(or cancelled) before it had read MEMORY.md"))
				fail_msg("stop %u: %s", n, r.content);
			stopped++;
		} else {
			assert_int_equal(strlen(r.content), 300);
			assert_int_equal(strspn(r.content, "m\n"), 300);
			read++;
		}
		free(r.content);
	}
	/* a 3 MB file: a poll per read (of up to 1 MiB) and per 4,096 lines
	 * counted, 19 in all */
	if (stopped < 10 || read == 0)
		fail_msg("memory_get stopped %d times and read %d times", stopped, read);
}

/* memory_write stopped while it reads the memory file, writes the new one,
 * before its fsync or before its rename leaves the file as it was and no
 * temporary file beside it; one that was not stopped appended the text. */
static void test_stop_leaves_memory_write_undone(void **state)
{
	int stopped = 0, written = 0, entries;
	size_t len, orig_len;
	char *orig, *got;

	put_lines("MEMORY.md", 30000, 99, 'o', "");
	orig = slurp("MEMORY.md", &orig_len);
	assert_non_null(orig);
	entries = top_entries();
	for (unsigned n = 1; n <= 400 && written == 0; n++) {
		struct result r;

		tool_job_test_stop_after(n);
		r = run_memory_tool(&tool_memory_write, json_pack("{s:s,s:s}", "text", "remember",
		                                                  "target", "long_term"));
		tool_job_test_stop_after(0);
		got = slurp("MEMORY.md", &len);
		assert_non_null(got);
		if (r.is_error) {
			if (!strstr(r.content,
			            "memory_write stopped at the time limit of 120000 ms "
			            "(or cancelled) before MEMORY.md was written: it holds "
			            "what it held before"))
				fail_msg("stop %u: %s", n, r.content);
			assert_int_equal(len, orig_len);
			assert_memory_equal(got, orig, len);
			stopped++;
		} else {
			if (!strstr(r.content, "Saved to MEMORY.md"))
				fail_msg("round %u: %s", n, r.content);
			assert_int_equal(len, orig_len + 9);
			assert_memory_equal(got, orig, orig_len);
			assert_memory_equal(got + orig_len, "remember\n", 9);
			put_lines("MEMORY.md", 30000, 99, 'o', "");
			written++;
		}
		assert_int_equal(top_entries(), entries);
		free(got);
		free(r.content);
	}
	/* a poll per read of the 3 MB (of up to 1 MiB), per MiB written,
	 * before the fsync and before the rename, 17 in all */
	if (stopped < 10 || written == 0)
		fail_msg("memory_write stopped %d times and wrote %d times", stopped, written);
	free(orig);
}
#endif

/* ---- the pool's share -------------------------------------------------- */

#define PIN_MAX 8

struct pin {
	struct result r[PIN_MAX];
	struct tool_run *runs[PIN_MAX];
	size_t n;
	uv_work_t item;
	bool item_done, cancelled;
	uint64_t t0, t_item;
	uv_timer_t limit;
	char path[PATH_MAX];
};

static void pin_cancel_all(struct pin *p)
{
	size_t i;

	if (p->cancelled)
		return;
	p->cancelled = true;
	for (i = 0; i < p->n; i++) {
		if (p->r[i].calls)
			continue;
		p->runs[i]->cancel(p->runs[i]);
		assert_int_equal(p->r[i].calls, 1);
	}
	uv_close((uv_handle_t *)&p->limit, NULL);
}

/* What a transcript append does on the pool: a line into a file. */
static void item_work(uv_work_t *w)
{
	struct pin *p = w->data;
	FILE *f = fopen(p->path, "ab");

	if (f) {
		fputs("{\"type\":\"message\"}\n", f);
		fclose(f);
	}
}

static void item_after(uv_work_t *w, int status)
{
	struct pin *p = w->data;

	p->item_done = status == 0;
	p->t_item = uv_hrtime();
	pin_cancel_all(p);
}

static void pin_limit(uv_timer_t *t)
{
	pin_cancel_all(t->data);
}

/* More slow searches than the pool has threads: a transcript append queued
 * behind them still runs at once, since tool jobs hold one thread less
 * than the pool has. */
static void test_pool_keeps_a_thread(void **state)
{
	struct tool_ctx ctx = base_ctx(120000);
	struct pin p;
	size_t i;
	double s;

	memset(&p, 0, sizeof p);
	put_slow_tree();
	in_ws(p.path, "transcript.jsonl");
	p.n = tool_job_pool_share() + 2;
	assert_true(p.n <= PIN_MAX);
	p.t0 = uv_hrtime();
	for (i = 0; i < p.n; i++)
		p.runs[i] = start_grep(&ctx, SLOW_PATTERN, &p.r[i]);
	/* Let the searches take their threads first. */
	usleep(200 * 1000);
	p.item.data = &p;
	assert_int_equal(uv_queue_work(&loop, &p.item, item_work, item_after), 0);
	uv_timer_init(&loop, &p.limit);
	p.limit.data = &p;
	uv_timer_start(&p.limit, pin_limit, 5000, 0);
	watch();
	uv_run(&loop, UV_RUN_DEFAULT);
	unwatch();
	assert_true(p.item_done);
	s = (double)(p.t_item - p.t0) / 1e9;
	if (s > 2.0)
		fail_msg("the transcript append waited %.2f s behind %zu searches", s, p.n);
	for (i = 0; i < p.n; i++) {
		assert_int_equal(p.r[i].calls, 1);
		assert_int_equal(p.r[i].rc, SB_ERR_ABORTED);
		free(p.r[i].content);
	}
}

/* A call that waits for a thread past its own time limit is answered then,
 * and says so. */
static void test_waiting_call_times_out(void **state)
{
	struct tool_ctx slow = base_ctx(120000), quick = base_ctx(300);
	struct result r[PIN_MAX + 1];
	struct tool_run *runs[PIN_MAX];
	size_t n = tool_job_pool_share(), i;
	uint64_t t0;
	double s;

	memset(r, 0, sizeof r);
	put_slow_tree();
	assert_true(n <= PIN_MAX);
	for (i = 0; i < n; i++)
		runs[i] = start_grep(&slow, SLOW_PATTERN, &r[i]);
	t0 = uv_hrtime();
	(void)start_grep(&quick, "{\"pattern\":\"x\"}", &r[n]);
	watch();
	while (r[n].calls == 0)
		uv_run(&loop, UV_RUN_ONCE);
	s = (double)(r[n].t_done - t0) / 1e9;
	for (i = 0; i < n; i++)
		runs[i]->cancel(runs[i]);
	uv_run(&loop, UV_RUN_DEFAULT);
	unwatch();
	assert_true(r[n].is_error);
	assert_non_null(strstr(r[n].content, "timed out after 300 ms before it could start"));
	if (s < 0.25 || s > 1.0)
		fail_msg("answered after %.2f s, want about 0.3 s", s);
	for (i = 0; i <= n; i++) {
		assert_int_equal(r[i].calls, 1);
		free(r[i].content);
	}
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_hostile_patterns),
	    T(test_pcre2_syntax_and_invalid_utf8),
	    T(test_glob_filter_bounded),
	    T(test_time_limit_cuts_grep),
	    T(test_cancel_running_grep),
	    T(test_job_deaf_to_stop),
#ifdef SB_CRASH_POINTS
	    T(test_stop_cuts_ls),
	    T(test_stop_leaves_write_undone),
	    T(test_stop_leaves_edit_undone),
	    T(test_stop_ends_memory_search),
	    T(test_stop_ends_memory_get),
	    T(test_stop_leaves_memory_write_undone),
#endif
	    T(test_pool_keeps_a_thread),
	    T(test_waiting_call_times_out),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
