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

#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
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
	};
	struct result r;
	double s;
	size_t i;

	put_lines("aaa.txt", 50, 2000, 'a', "");
	put_lines("bang.txt", 50, 40, 'a', "!");
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

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_hostile_patterns),
	    T(test_pcre2_syntax_and_invalid_utf8),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
