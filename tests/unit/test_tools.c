/*
 * test_tools.c - the built-in tools on a temporary workspace, on a real libuv
 * loop: what each one returns, its caps and notes, and that every file tool
 * refuses paths that leave the workspace.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
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

#include "agents/executor.h"
#include "agents/safety/paths.h"
#include "agents/safety/spawn.h"
#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/err.h"
#include "gateway/core/host.h"
#include "gateway/core/num.h"

#define WATCHDOG_MS 20000

static uv_loop_t loop;
static char ws[PATH_MAX];      /* the workspace (real path) */
static char outside[PATH_MAX]; /* a directory beside it */

/* ---- workspace ---------------------------------------------------------- */

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	return remove(p);
}

static void rm_rf(const char *p)
{
	if (p[0])
		nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void make_tmp(char *out, const char *tag)
{
	char tmpl[PATH_MAX];
	char *real;

	snprintf(tmpl, sizeof tmpl, "/tmp/sb-tools-%s-XXXXXX", tag);
	assert_non_null(mkdtemp(tmpl));
	real = realpath(tmpl, NULL);
	assert_non_null(real);
	snprintf(out, PATH_MAX, "%s", real);
	free(real);
}

static int setup(void **state)
{
	if (uv_loop_init(&loop) != 0)
		return -1;
	make_tmp(ws, "ws");
	make_tmp(outside, "out");
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

	uv_run(&loop, UV_RUN_NOWAIT);
	uv_walk(&loop, close_walk, &left_open);
	uv_run(&loop, UV_RUN_DEFAULT);
	rc = uv_loop_close(&loop);
	rm_rf(ws);
	rm_rf(outside);
	if (left_open)
		fprintf(stderr, "teardown: %d handles were left open\n", left_open);
	return rc == 0 && left_open == 0 ? 0 : -1;
}

static void in_dir(char *out, const char *dir, const char *rel)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", dir, rel);

	assert_true(n > 0 && n < PATH_MAX);
}

/* Writes dir/rel (creating its parents). */
static void put_in(const char *dir, const char *rel, const char *content, size_t len)
{
	char p[PATH_MAX];
	int fd;

	in_dir(p, dir, rel);
	assert_int_equal(tool_mkdir_parents(p, NULL, 0), SB_OK);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, content, len), (ssize_t)len);
	close(fd);
}

static void put(const char *rel, const char *content)
{
	put_in(ws, rel, content, strlen(content));
}

/* The content of ws/rel, or NULL if it does not exist. */
static char *slurp(const char *dir, const char *rel)
{
	char p[PATH_MAX], *data;
	struct stat st;
	FILE *f;

	in_dir(p, dir, rel);
	if (stat(p, &st) != 0)
		return NULL;
	data = calloc(1, (size_t)st.st_size + 1);
	assert_non_null(data);
	f = fopen(p, "rb");
	assert_non_null(f);
	assert_int_equal(fread(data, 1, (size_t)st.st_size, f), (size_t)st.st_size);
	fclose(f);
	return data;
}

static void link_in_ws(const char *rel, const char *target)
{
	char p[PATH_MAX];

	in_dir(p, ws, rel);
	assert_int_equal(symlink(target, p), 0);
}

/* ---- running a tool ----------------------------------------------------- */

struct result {
	int calls;
	int rc;
	char *content;
	bool is_error;
};

static void on_done(void *ud, int rc, char *content, bool is_error)
{
	struct result *r = ud;

	r->calls++;
	r->rc = rc;
	free(r->content);
	r->content = content;
	r->is_error = is_error;
}

struct watchdog {
	uv_timer_t t;
	struct tool_run *run;
	bool fired;
};

static void watchdog_fire(uv_timer_t *t)
{
	struct watchdog *w = t->data;

	w->fired = true;
	if (w->run)
		w->run->cancel(w->run);
}

static struct tool_ctx base_ctx(void)
{
	struct tool_ctx ctx;

	memset(&ctx, 0, sizeof ctx);
	ctx.loop = &loop;
	ctx.workspace = ws;
	ctx.timeout_ms = 120000;
	ctx.agent_id = "main";
	return ctx;
}

/* Runs def with input (JSON text, which must satisfy the tool's schema) to
 * completion; returns the content (free it). */
static char *run_ctx(const struct tool_def *def, const struct tool_ctx *ctx, const char *input,
                     bool *is_error, double *seconds)
{
	struct result r = {0};
	struct watchdog w = {0};
	json_t *in = json_loads(input, 0, NULL), *schema = json_loads(def->input_schema, 0, NULL);
	char why[256];
	uint64_t t0;

	assert_non_null(in);
	assert_non_null(schema);
	if (tool_schema_validate(schema, in, why, sizeof why) != SB_OK)
		fail_msg("%s: test input %s is invalid: %s", def->name, input, why);
	json_decref(schema);
	t0 = uv_hrtime();
	assert_int_equal(def->call(ctx, in, on_done, &r, &w.run), SB_OK);
	assert_int_equal(r.calls, 0); /* never from inside call */
	uv_timer_init(&loop, &w.t);
	w.t.data = &w;
	uv_timer_start(&w.t, watchdog_fire, WATCHDOG_MS, 0);
	uv_unref((uv_handle_t *)&w.t);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_close((uv_handle_t *)&w.t, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	json_decref(in);
	if (seconds)
		*seconds = (double)(uv_hrtime() - t0) / 1e9;
	assert_false(w.fired);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.rc, SB_OK);
	assert_non_null(r.content);
	*is_error = r.is_error;
	return r.content;
}

static char *run(const struct tool_def *def, const char *input, bool *is_error)
{
	struct tool_ctx ctx = base_ctx();

	return run_ctx(def, &ctx, input, is_error, NULL);
}

static void expect_ok(const struct tool_def *def, const char *input, const char *want)
{
	bool err;
	char *c = run(def, input, &err);

	if (err || strcmp(c, want) != 0)
		fail_msg("%s %s:\nwant: [%s]\ngot (error %d): [%s]", def->name, input, want, err,
		         c);
	free(c);
}

static void expect_error(const struct tool_def *def, const char *input, const char *needle)
{
	bool err;
	char *c = run(def, input, &err);

	if (!err || !strstr(c, needle))
		fail_msg("%s %s: want an error containing [%s], got (error %d): [%s]", def->name,
		         input, needle, err, c);
	free(c);
}

static void expect_contains(const char *text, const char *needle)
{
	if (!strstr(text, needle))
		fail_msg("[%s] not in:\n%s", needle, text);
}

/* ---- read --------------------------------------------------------------- */

static void test_read_numbers_lines(void **state)
{
	put("a.txt", "alpha\nbeta\r\ngamma");
	expect_ok(&tool_read, "{\"path\":\"a.txt\"}",
	          "     1\talpha\n     2\tbeta\n     3\tgamma\n");
	expect_ok(&tool_read, "{\"path\":\"./sub/../a.txt\"}",
	          "     1\talpha\n     2\tbeta\n     3\tgamma\n");
}

static void test_read_offset_limit(void **state)
{
	char text[256] = "";
	size_t n = 0;
	int i;

	for (i = 1; i <= 10; i++)
		n += (size_t)snprintf(text + n, sizeof text - n, "line %d\n", i);
	put("ten.txt", text);
	expect_ok(&tool_read, "{\"path\":\"ten.txt\",\"offset\":3,\"limit\":2}",
	          "     3\tline 3\n     4\tline 4\n\n(6 more lines; use offset=5 to read on)");
	expect_ok(&tool_read, "{\"path\":\"ten.txt\",\"offset\":10}", "    10\tline 10\n");
	expect_error(&tool_read, "{\"path\":\"ten.txt\",\"offset\":11}", "past the end");
}

static void test_read_default_limit_and_long_lines(void **state)
{
	char *big = malloc(3000 * 8 + 1), *c, *line = malloc(5001);
	size_t n = 0;
	bool err;
	int i;

	assert_non_null(big);
	assert_non_null(line);
	for (i = 1; i <= 3000; i++)
		n += (size_t)snprintf(big + n, 3000 * 8 + 1 - n, "%d\n", i);
	put("big.txt", big);
	c = run(&tool_read, "{\"path\":\"big.txt\"}", &err);
	assert_false(err);
	expect_contains(c, "  2000\t2000\n");
	assert_null(strstr(c, "\t2001\n"));
	expect_contains(c, "(1000 more lines; use offset=2001 to read on)");
	free(c);

	memset(line, 'x', 5000);
	line[5000] = '\0';
	put("long.txt", line);
	c = run(&tool_read, "{\"path\":\"long.txt\"}", &err);
	assert_false(err);
	expect_contains(c, "[line cut at 2000 characters]");
	assert_true(strlen(c) < 2100);
	free(c);
	free(line);
	free(big);
}

static void test_read_missing_binary_dir_empty(void **state)
{
	static const char bin[] = "\x7f"
	                          "ELF\0\0\1\2binary";

	expect_error(&tool_read, "{\"path\":\"nope.txt\"}", "no such file");
	put_in(ws, "prog.bin", bin, sizeof bin);
	expect_error(&tool_read, "{\"path\":\"prog.bin\"}", "binary");
	put("d/x.txt", "x");
	expect_error(&tool_read, "{\"path\":\"d\"}", "is a directory");
	put("empty.txt", "");
	expect_ok(&tool_read, "{\"path\":\"empty.txt\"}", "(the file is empty)");

	/* A FIFO would block a pool thread forever: refused, or skipped. */
	{
		char p[PATH_MAX];

		in_dir(p, ws, "fifo");
		assert_int_equal(mkfifo(p, 0600), 0);
	}
	expect_error(&tool_read, "{\"path\":\"fifo\"}", "not a regular file");
	expect_error(&tool_grep, "{\"pattern\":\"x\",\"path\":\"fifo\"}", "not a regular file");
	expect_ok(&tool_grep, "{\"pattern\":\"nothing\"}", "no matches\n");
}

/* ---- write -------------------------------------------------------------- */

/* append: true adds to the end (a long file written in parts), atomically
 * like any write; a missing file is created; the result says the size. */
static void test_write_append(void **state)
{
	char *c;

	expect_ok(&tool_write, "{\"path\":\"parts.txt\",\"content\":\"one \"}",
	          "wrote 4 bytes to parts.txt (new file)");
	expect_ok(&tool_write, "{\"path\":\"parts.txt\",\"content\":\"two \",\"append\":true}",
	          "appended 4 bytes to parts.txt (now 8 bytes)");
	expect_ok(&tool_write, "{\"path\":\"parts.txt\",\"content\":\"three\",\"append\":true}",
	          "appended 5 bytes to parts.txt (now 13 bytes)");
	c = slurp(ws, "parts.txt");
	assert_string_equal(c, "one two three");
	free(c);
	expect_ok(&tool_write, "{\"path\":\"new/fresh.txt\",\"content\":\"x\",\"append\":true}",
	          "wrote 1 bytes to new/fresh.txt (new file)");
	expect_error(&tool_write, "{\"path\":\"new\",\"content\":\"x\",\"append\":true}",
	             "is a directory");
	expect_error(&tool_write, "{\"path\":\"../out.txt\",\"content\":\"x\",\"append\":true}",
	             "escapes the workspace");
}

static void test_write_creates_nested_atomic(void **state)
{
	char p[PATH_MAX], *c;
	struct stat before, after;
	bool err;
	size_t n;
	struct tool_dirent *ents;
	size_t more;

	c = run(&tool_write, "{\"path\":\"d1/d2/new.txt\",\"content\":\"hello\"}", &err);
	assert_false(err);
	assert_string_equal(c, "wrote 5 bytes to d1/d2/new.txt (new file)");
	free(c);
	c = slurp(ws, "d1/d2/new.txt");
	assert_string_equal(c, "hello");
	free(c);

	/* Replacing: a new inode renamed over the old one (readers never see a
	 * half-written file), the old mode kept, no temporary file left. */
	in_dir(p, ws, "d1/d2/new.txt");
	assert_int_equal(chmod(p, 0600), 0);
	assert_int_equal(stat(p, &before), 0);
	c = run(&tool_write, "{\"path\":\"d1/d2/new.txt\",\"content\":\"bye\\n\"}", &err);
	assert_false(err);
	expect_contains(c, "replaced");
	free(c);
	assert_int_equal(stat(p, &after), 0);
	assert_int_not_equal(before.st_ino, after.st_ino);
	assert_int_equal(after.st_mode & 0777, 0600);
	c = slurp(ws, "d1/d2/new.txt");
	assert_string_equal(c, "bye\n");
	free(c);
	in_dir(p, ws, "d1/d2");
	assert_int_equal(tool_dir_list(p, 100, &ents, &n, &more), SB_OK);
	assert_int_equal(n, 1);
	assert_string_equal(ents[0].name, "new.txt");
	tool_dir_free(ents, n);

	expect_error(&tool_write, "{\"path\":\"d1\",\"content\":\"x\"}", "is a directory");
}

/* ---- edit --------------------------------------------------------------- */

static void test_edit(void **state)
{
	char *c;

	put("e.txt", "one two\nthree two\nfour\n");
	expect_ok(&tool_edit, "{\"path\":\"e.txt\",\"old_string\":\"four\",\"new_string\":\"4\"}",
	          "edited e.txt: replaced 1 occurrence");
	c = slurp(ws, "e.txt");
	assert_string_equal(c, "one two\nthree two\n4\n");
	free(c);

	expect_error(&tool_edit,
	             "{\"path\":\"e.txt\",\"old_string\":\"five\",\"new_string\":\"5\"}",
	             "not found");
	expect_error(&tool_edit, "{\"path\":\"e.txt\",\"old_string\":\"two\",\"new_string\":\"2\"}",
	             "found 2 times");
	expect_error(&tool_edit, "{\"path\":\"e.txt\",\"old_string\":\"two\",\"new_string\":\"2\"}",
	             "replace_all");
	c = slurp(ws, "e.txt");
	assert_string_equal(c, "one two\nthree two\n4\n"); /* untouched */
	free(c);
	expect_error(&tool_edit,
	             "{\"path\":\"e.txt\",\"old_string\":\"two\",\"new_string\":\"two\"}",
	             "the same");

	expect_ok(&tool_edit,
	          "{\"path\":\"e.txt\",\"old_string\":\"two\",\"new_string\":\"2\","
	          "\"replace_all\":true}",
	          "edited e.txt: replaced 2 occurrences");
	c = slurp(ws, "e.txt");
	assert_string_equal(c, "one 2\nthree 2\n4\n");
	free(c);
	expect_error(&tool_edit,
	             "{\"path\":\"none.txt\",\"old_string\":\"a\",\"new_string\":\"b\"}",
	             "no such file");
}

/* ---- ls ----------------------------------------------------------------- */

static void test_ls(void **state)
{
	char name[64];
	char *c;
	bool err;
	int i;

	put("c.txt", "c");
	put("a.txt", "a");
	put("b/inner.txt", "i");
	put(".hidden", "h");
	expect_ok(&tool_ls, "{}", ".hidden\na.txt\nb/\nc.txt\n");
	expect_ok(&tool_ls, "{\"path\":\"b\"}", "inner.txt\n");
	expect_error(&tool_ls, "{\"path\":\"a.txt\"}", "not a directory");
	{
		char p[PATH_MAX];

		in_dir(p, ws, "emptydir");
		assert_int_equal(mkdir(p, 0755), 0);
		expect_ok(&tool_ls, "{\"path\":\"emptydir\"}", "(empty directory)");
	}

	for (i = 0; i < 1005; i++) {
		snprintf(name, sizeof name, "many/f%04d", i);
		put(name, "");
	}
	c = run(&tool_ls, "{\"path\":\"many\"}", &err);
	assert_false(err);
	expect_contains(c, "f0000\nf0001\n");
	expect_contains(c, "f0999\n(5 more entries not shown)");
	assert_null(strstr(c, "f1000"));
	free(c);
}

/* ---- glob --------------------------------------------------------------- */

static void test_glob(void **state)
{
	char name[64];
	char *c;
	bool err;
	int i;

	put("top.md", "");
	put("docs/a.md", "");
	put("docs/sub/b.md", "");
	put("docs/sub/c.txt", "");
	put("src/x.c", "");
	put("src/deep/y.c", "");
	put(".git/HEAD.md", "");
	expect_ok(&tool_glob, "{\"pattern\":\"**/*.md\"}", "docs/a.md\ndocs/sub/b.md\ntop.md\n");
	expect_ok(&tool_glob, "{\"pattern\":\"src/*.c\"}", "src/x.c\n");
	expect_ok(&tool_glob, "{\"pattern\":\"src/**/*.c\"}", "src/deep/y.c\nsrc/x.c\n");
	expect_ok(&tool_glob, "{\"pattern\":\"**/sub/*\"}", "docs/sub/b.md\ndocs/sub/c.txt\n");
	expect_ok(&tool_glob, "{\"pattern\":\"*.md\",\"path\":\"docs\"}", "docs/a.md\n");
	expect_ok(&tool_glob, "{\"pattern\":\"docs/**\"}",
	          "docs/a.md\ndocs/sub/\ndocs/sub/b.md\ndocs/sub/c.txt\n");
	expect_ok(&tool_glob, "{\"pattern\":\"**/*.none\"}", "no matches");

	for (i = 0; i < 1010; i++) {
		snprintf(name, sizeof name, "many/f%04d.log", i);
		put(name, "");
	}
	c = run(&tool_glob, "{\"pattern\":\"many/*.log\"}", &err);
	assert_false(err);
	expect_contains(c, "many/f0000.log\n");
	expect_contains(c, "(results capped at 1000 paths; narrow the pattern)");
	free(c);

	assert_true(tool_glob_match("**/*.c", "a.c"));
	assert_true(tool_glob_match("**/*.c", "a/b/c.c"));
	assert_false(tool_glob_match("*.c", "a/b.c"));
	assert_true(tool_glob_match("a/**/b", "a/b"));
	assert_true(tool_glob_match("a/**/b", "a/x/y/b"));
	assert_false(tool_glob_match("a/**/b", "a/x/y/c"));
}

/* ---- grep --------------------------------------------------------------- */

static void test_grep(void **state)
{
	static const char bin[] = "int main\0binary";
	char *many, *c;
	size_t i, n = 0;
	bool err;

	put("src/x.c", "#include <stdio.h>\nint main(void)\n{\n\treturn 0;\n}\n");
	put("src/y.h", "int Main;\n");
	put("notes.md", "main street\n");
	put(".git/objects/z", "int main\n");
	put_in(ws, "prog.o", bin, sizeof bin);
	expect_ok(&tool_grep, "{\"pattern\":\"int m[a-z]+\"}", "src/x.c:2:int main(void)\n");
	expect_ok(&tool_grep, "{\"pattern\":\"int main\",\"case_insensitive\":true}",
	          "src/x.c:2:int main(void)\nsrc/y.h:1:int Main;\n");
	expect_ok(&tool_grep, "{\"pattern\":\"main\",\"glob\":\"*.md\"}",
	          "notes.md:1:main street\n");
	expect_ok(&tool_grep,
	          "{\"pattern\":\"main\",\"glob\":\"src/**/*.h\",\"case_insensitive\":true}",
	          "src/y.h:1:int Main;\n");
	expect_ok(&tool_grep, "{\"pattern\":\"return\",\"path\":\"src/x.c\"}",
	          "src/x.c:4:\treturn 0;\n");
	expect_ok(&tool_grep, "{\"pattern\":\"nothing-here\"}", "no matches\n");
	expect_error(&tool_grep, "{\"pattern\":\"(unclosed\"}", "invalid regular expression");

	many = malloc(600 * 16);
	assert_non_null(many);
	for (i = 0; i < 600; i++)
		n += (size_t)snprintf(many + n, 600 * 16 - n, "hit %zu\n", i);
	put("many.txt", many);
	free(many);
	c = run(&tool_grep, "{\"pattern\":\"^hit\",\"path\":\"many.txt\"}", &err);
	assert_false(err);
	expect_contains(c, "many.txt:1:hit 0\n");
	expect_contains(c, "many.txt:500:hit 499\n");
	assert_null(strstr(c, "hit 500\n"));
	expect_contains(c, "(stopped at 500 matches");
	free(c);

	for (i = 0; i < 205; i++) {
		char name[64];

		snprintf(name, sizeof name, "files/f%03zu.txt", i);
		put(name, "needle\n");
	}
	c = run(&tool_grep, "{\"pattern\":\"needle\",\"path\":\"files\"}", &err);
	assert_false(err);
	expect_contains(c, "files/f199.txt:1:needle\n");
	assert_null(strstr(c, "f200.txt"));
	expect_contains(c, "(stopped after 200 files with matches");
	free(c);
}

/* ---- bash --------------------------------------------------------------- */

static bool pid_gone(long pid)
{
	char p[64], stat_line[512];
	FILE *f;
	char *rp;
	bool zombie = false;

	if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
		return true;
	/* Killed but not yet reaped by whoever adopted it. */
	snprintf(p, sizeof p, "/proc/%ld/stat", pid);
	f = fopen(p, "r");
	if (!f)
		return true;
	if (fgets(stat_line, sizeof stat_line, f)) {
		rp = strrchr(stat_line, ')');
		zombie = rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
	}
	fclose(f);
	return zombie;
}

static long first_line_pid(const char *out)
{
	char line[32];
	size_t n = strcspn(out, "\n");
	int64_t pid;

	assert_true(n > 0 && n < sizeof line);
	memcpy(line, out, n);
	line[n] = '\0';
	assert_int_equal(num_parse_i64(line, 2, INT32_MAX, &pid), SB_OK);
	return (long)pid;
}

static void wait_gone(long pid)
{
	int i;

	for (i = 0; i < 300 && !pid_gone(pid); i++)
		usleep(10000);
	if (!pid_gone(pid)) {
		kill((pid_t)pid, SIGKILL);
		fail_msg("process %ld outlived the call", pid);
	}
}

static void test_bash_output_and_exit(void **state)
{
	char *c;
	bool err;

	expect_ok(&tool_bash, "{\"command\":\"echo hello; echo oops >&2; exit 3\"}",
	          "hello\noops\nexit code 3");
	expect_ok(&tool_bash, "{\"command\":\"true\"}", "(no output)\nexit code 0");
	expect_ok(&tool_bash, "{\"command\":\"printf 'no newline'\"}", "no newline\nexit code 0");
	expect_ok(&tool_bash, "{\"command\":\"printf 'a\\\\0b'\"}",
	          "a\xef\xbf\xbd"
	          "b\nexit code 0");
	c = run(&tool_bash, "{\"command\":\"pwd; echo $HOME; echo $PATH; cat\"}", &err);
	assert_false(err);
	{
		char want[PATH_MAX * 2 + 128];

		snprintf(want, sizeof want, "%s\n%s\n/usr/local/bin:/usr/bin:/bin\nexit code 0", ws,
		         ws);
		assert_string_equal(c, want);
	}
	free(c);
	put("f.txt", "from a file\n");
	expect_ok(&tool_bash, "{\"command\":\"cat f.txt\",\"description\":\"show f\"}",
	          "from a file\nexit code 0");
	expect_ok(&tool_bash, "{\"command\":\"kill -TERM $$\"}",
	          "(no output)\nkilled by signal 15 (Terminated)");
}

static void test_bash_long_output_head_tail(void **state)
{
	char *c;
	bool err;

	/* 100000 bytes: kept whole, for the output budget to save (the budget,
	 * not the tool, decides what reaches the context). */
	c = run(&tool_bash,
	        "{\"command\":\"i=0; while [ $i -lt 1000 ]; do printf '%099d\\\\n' $i; "
	        "i=$((i+1)); done\"}",
	        &err);
	assert_false(err);
	assert_null(strstr(c, "bytes cut"));
	assert_true(strncmp(c, "000000", 6) == 0);
	expect_contains(c, "0000000500\n");
	expect_contains(c, "0999\nexit code 0");
	assert_int_equal(strlen(c), 100000 + strlen("exit code 0"));
	free(c);
	/* Past the hard cap (4 MiB): its head, what was cut, its last 256 KiB. */
	c = run(&tool_bash,
	        "{\"command\":\"head -c 6000000 /dev/zero | tr '\\\\000' a; echo; echo END\"}",
	        &err);
	assert_false(err);
	expect_contains(c, "bytes cut ...]\n");
	expect_contains(c, "\nEND\nexit code 0");
	assert_true(strlen(c) > (4u << 20) && strlen(c) < (4u << 20) + (300u << 10));
	free(c);
}

static void test_bash_timeout_kills_group(void **state)
{
	struct tool_ctx ctx = base_ctx();
	double secs;
	char *c;
	bool err;
	long pid;

	c = run_ctx(&tool_bash, &ctx,
	            "{\"command\":\"sleep 30 & echo $!; sleep 30\",\"timeout_ms\":300}", &err,
	            &secs);
	assert_true(err);
	expect_contains(c, "killed: timed out after 300 ms");
	assert_true(secs < 5.0);
	pid = first_line_pid(c);
	wait_gone(pid);
	free(c);

	/* A timeout_ms above the agent's limit is capped to it. */
	ctx.timeout_ms = 200;
	c = run_ctx(&tool_bash, &ctx, "{\"command\":\"sleep 30\",\"timeout_ms\":60000}", &err,
	            &secs);
	assert_true(err);
	expect_contains(c, "timed out after 200 ms");
	assert_true(secs < 5.0);
	free(c);
}

static void test_bash_background_does_not_outlive(void **state)
{
	struct tool_ctx ctx = base_ctx();
	double secs;
	char *c;
	bool err;
	long pid;

	/* The shell exits at once; its child keeps the pipe open. */
	c = run_ctx(&tool_bash, &ctx, "{\"command\":\"sleep 30 & echo $!\"}", &err, &secs);
	assert_false(err);
	expect_contains(c, "exit code 0");
	assert_true(secs < TOOL_SPAWN_DRAIN_MS / 1000.0 + 3);
	pid = first_line_pid(c);
	wait_gone(pid);
	free(c);
}

static void test_bash_cancel(void **state)
{
	struct tool_ctx ctx = base_ctx();
	struct result r = {0};
	struct tool_run *trun = NULL;
	json_t *in = json_pack("{s:s}", "command", "sleep 30");
	uint64_t t0 = uv_hrtime();

	assert_int_equal(tool_bash.call(&ctx, in, on_done, &r, &trun), SB_OK);
	assert_non_null(trun);
	uv_run(&loop, UV_RUN_NOWAIT);
	trun->cancel(trun);
	assert_int_equal(r.calls, 1); /* done before cancel returns */
	assert_int_equal(r.rc, SB_ERR_ABORTED);
	uv_run(&loop, UV_RUN_DEFAULT); /* the child is reaped, handles closed */
	assert_true((uv_hrtime() - t0) / 1000000 < 5000);
	assert_int_equal(r.calls, 1);
	free(r.content);
	json_decref(in);
}

static void spawn_never(void *ud, int rc, const struct tool_spawn_result *res)
{
	(*(int *)ud)++;
}

static void test_spawn_failures(void **state)
{
	static const char *const missing[] = {"/nonexistent/prog", NULL};
	static const char *const sh[] = {"/bin/sh", "-c", "true", NULL};
	struct tool_spawn_options o;
	struct tool_spawn *sp = NULL;
	int calls = 0;

	memset(&o, 0, sizeof o);
	o.argv = missing;
	o.cwd = ws;
	o.timeout_ms = 1000;
	o.max_output = 100;
	assert_int_equal(tool_spawn(&loop, &o, spawn_never, &calls, &sp), SB_ERR_NOTFOUND);
	assert_null(sp);
	o.argv = sh;
	o.timeout_ms = 0;
	assert_int_equal(tool_spawn(&loop, &o, spawn_never, &calls, &sp), SB_ERR_INVAL);
	o.timeout_ms = 1000;
	o.cwd = NULL;
	assert_int_equal(tool_spawn(&loop, &o, spawn_never, &calls, &sp), SB_ERR_INVAL);
	uv_run(&loop, UV_RUN_DEFAULT); /* the failed spawn's handles close */
	assert_int_equal(calls, 0);
}

struct spawn_seen {
	int calls;
	char out[64];
	size_t dropped, tail_len;
};

static void spawn_record(void *ud, int rc, const struct tool_spawn_result *res)
{
	struct spawn_seen *s = ud;

	s->calls++;
	snprintf(s->out, sizeof s->out, "%.*s|%.*s", (int)res->output_len, res->output,
	         (int)res->tail_len, res->tail ? res->tail : "");
	s->dropped = res->output_dropped;
	s->tail_len = res->tail_len;
}

static void test_spawn_head_and_tail(void **state)
{
	static const char *const sh[] = {"/bin/sh", "-c", "printf 0123456789abcdefghij", NULL};
	struct tool_spawn_options o;
	struct spawn_seen s;

	memset(&s, 0, sizeof s);
	memset(&o, 0, sizeof o);
	o.argv = sh;
	o.cwd = ws;
	o.timeout_ms = 5000;
	o.max_output = 4;
	o.keep_tail = 3;
	assert_int_equal(tool_spawn(&loop, &o, spawn_record, &s, NULL), SB_OK);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(s.calls, 1);
	assert_string_equal(s.out, "0123|hij");
	assert_int_equal(s.dropped, 13);

	/* Everything fits: no tail, nothing dropped. */
	memset(&s, 0, sizeof s);
	o.max_output = 100;
	assert_int_equal(tool_spawn(&loop, &o, spawn_record, &s, NULL), SB_OK);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_string_equal(s.out, "0123456789abcdefghij|");
	assert_int_equal(s.dropped, 0);
}

static void test_spawn_env(void **state)
{
	static const char *const sh[] = {"/bin/sh", "-c", "echo $EXTRA; env | wc -l", NULL};
	static const char *const extra[] = {"EXTRA=given", NULL};
	struct tool_spawn_options o;
	struct spawn_seen s;
	int64_t n;

	memset(&s, 0, sizeof s);
	memset(&o, 0, sizeof o);
	o.argv = sh;
	o.cwd = ws;
	o.env = extra;
	o.timeout_ms = 5000;
	o.max_output = 100;
	assert_int_equal(setenv("SB_TEST_LEAK", "should not pass", 1), 0);
	assert_int_equal(tool_spawn(&loop, &o, spawn_record, &s, NULL), SB_OK);
	uv_run(&loop, UV_RUN_DEFAULT);
	unsetenv("SB_TEST_LEAK");
	assert_int_equal(s.calls, 1);
	/* given, and only PATH HOME LANG EXTRA plus what sh sets (PWD). */
	assert_true(strncmp(s.out, "given\n", 6) == 0);
	s.out[6 + strcspn(s.out + 6, " \n|")] = '\0';
	assert_int_equal(num_parse_i64(s.out + 6 + strspn(s.out + 6, " "), 1, 6, &n), SB_OK);
}

/* ---- message ------------------------------------------------------------ */

struct fake_host {
	int calls;
	char key[128], channel[64], account[64], target[64], payload[256];
	int rc;
	uv_timer_t t;
	host_deliver_cb cb;
	void *ud;
};

static void copy_or_empty(char *dst, size_t size, const char *s)
{
	snprintf(dst, size, "%s", s ? s : "(null)");
}

static void fake_host_answer(uv_timer_t *t)
{
	struct fake_host *fh = t->data;

	fh->cb(fh->ud, SB_OK, 40 + fh->calls, false);
	uv_close((uv_handle_t *)t, NULL);
}

static int fake_deliver(void *hctx, const struct host_outbound *m, host_deliver_cb cb, void *ud)
{
	struct fake_host *fh = hctx;

	if (fh->rc)
		return fh->rc;
	fh->calls++;
	copy_or_empty(fh->key, sizeof fh->key, m->idempotency_key);
	copy_or_empty(fh->channel, sizeof fh->channel, m->channel);
	copy_or_empty(fh->account, sizeof fh->account, m->account);
	copy_or_empty(fh->target, sizeof fh->target, m->target);
	copy_or_empty(fh->payload, sizeof fh->payload, m->payload);
	fh->cb = cb;
	fh->ud = ud;
	uv_timer_init(&loop, &fh->t);
	fh->t.data = fh;
	uv_timer_start(&fh->t, fake_host_answer, 0, 0);
	return SB_OK;
}

static void test_message(void **state)
{
	struct fake_host fh;
	struct host host;
	struct tool_ctx ctx = base_ctx();
	char first_key[128];
	char *c;
	bool err;
	size_t i;

	memset(&fh, 0, sizeof fh);
	memset(&host, 0, sizeof host);
	host.ctx = &fh;
	host.loop = &loop;
	host.deliver = fake_deliver;
	ctx.host = &host;
	ctx.channel = "telegram";
	ctx.account = "bot1";
	ctx.target = "12345";

	c = run_ctx(&tool_message, &ctx, "{\"text\":\"working on it\"}", &err, NULL);
	assert_false(err);
	assert_string_equal(c, "sent to telegram:12345 (outbox id 41)");
	free(c);
	assert_int_equal(fh.calls, 1);
	assert_string_equal(fh.channel, "telegram");
	assert_string_equal(fh.account, "bot1");
	assert_string_equal(fh.target, "12345");
	assert_string_equal(fh.payload, "{\"text\":\"working on it\"}");
	assert_int_equal(strlen(fh.key), 32);
	for (i = 0; i < 32; i++)
		assert_non_null(strchr("0123456789abcdef", fh.key[i]));
	snprintf(first_key, sizeof first_key, "%s", fh.key);

	c = run_ctx(&tool_message, &ctx, "{\"text\":\"hi\",\"target\":\"slack:C42\"}", &err, NULL);
	assert_false(err);
	assert_string_equal(c, "sent to slack:C42 (outbox id 42)");
	free(c);
	assert_string_equal(fh.channel, "slack");
	assert_string_equal(fh.target, "C42");
	assert_string_equal(fh.account, "(null)"); /* not the run's channel */
	assert_string_not_equal(fh.key, first_key);

	c = run_ctx(&tool_message, &ctx, "{\"text\":\"hi\",\"target\":\"nocolon\"}", &err, NULL);
	assert_true(err);
	expect_contains(c, "channel:destination");
	free(c);

	fh.rc = SB_ERR_AGAIN;
	c = run_ctx(&tool_message, &ctx, "{\"text\":\"hi\"}", &err, NULL);
	assert_true(err);
	expect_contains(c, "could not queue the message");
	free(c);

	ctx.host = NULL;
	c = run_ctx(&tool_message, &ctx, "{\"text\":\"hi\"}", &err, NULL);
	assert_true(err);
	assert_string_equal(c, "no channel to send to");
	free(c);
	host.deliver = NULL;
	ctx.host = &host;
	c = run_ctx(&tool_message, &ctx, "{\"text\":\"hi\"}", &err, NULL);
	assert_true(err);
	assert_string_equal(c, "no channel to send to");
	free(c);
	assert_int_equal(fh.calls, 2);
}

/* ---- confinement -------------------------------------------------------- */

static void escape_fixture(void)
{
	char p[PATH_MAX];

	put_in(outside, "secret.txt", "top secret\n", 11);
	put(".git/config", "[core]\n");
	put("inside.txt", "inside\n");
	link_in_ws("etc", "/etc");
	link_in_ws("out", outside);
	in_dir(p, outside, "secret.txt");
	link_in_ws("secret", p);
	in_dir(p, outside, "made-through-link.txt");
	link_in_ws("dangling", p);
	link_in_ws("ok_link", "inside.txt");
}

static void test_refuses_escapes_read_ls_glob_grep(void **state)
{
	char *c;
	bool err;

	escape_fixture();
	expect_error(&tool_read, "{\"path\":\"../x\"}", "path escapes the workspace: ../x");
	expect_error(&tool_read, "{\"path\":\"a/../../x\"}", "escapes the workspace");
	expect_error(&tool_read, "{\"path\":\"/etc/passwd\"}", "absolute paths are not allowed");
	expect_error(&tool_read, "{\"path\":\"etc/passwd\"}", "escapes the workspace");
	expect_error(&tool_read, "{\"path\":\"out/secret.txt\"}", "escapes the workspace");
	expect_error(&tool_read, "{\"path\":\"secret\"}", "escapes the workspace");
	/* No symlink is followed, even one that stays inside: the kernel
	 * resolves the path in one step without following any, so a link
	 * swapped in between a check and a use cannot lead out. */
	expect_error(&tool_read, "{\"path\":\"ok_link\"}",
	             "path goes through a symlink (ok_link -> inside.txt), which the file tools "
	             "do not follow: ok_link (give the path it points to, inside.txt)");

	expect_error(&tool_ls, "{\"path\":\"..\"}", "escapes the workspace");
	expect_error(&tool_ls, "{\"path\":\"/etc\"}", "absolute");
	expect_error(&tool_ls, "{\"path\":\"etc\"}", "escapes the workspace");
	expect_error(&tool_ls, "{\"path\":\"out\"}", "escapes the workspace");

	expect_error(&tool_glob, "{\"pattern\":\"*\",\"path\":\"../\"}", "escapes the workspace");
	expect_error(&tool_glob, "{\"pattern\":\"*\",\"path\":\"/etc\"}", "absolute");
	expect_error(&tool_glob, "{\"pattern\":\"*\",\"path\":\"etc\"}", "escapes the workspace");
	expect_error(&tool_glob, "{\"pattern\":\"*\",\"path\":\"out\"}", "escapes the workspace");
	expect_error(&tool_glob, "{\"pattern\":\"../*\"}", "\"..\"");
	expect_error(&tool_glob, "{\"pattern\":\"/etc/*\"}", "absolute");
	c = run(&tool_glob, "{\"pattern\":\"**/*.txt\"}", &err);
	assert_false(err);
	assert_null(strstr(c, "secret.txt")); /* the symlinked directory is not entered */
	expect_contains(c, "inside.txt");
	free(c);

	expect_error(&tool_grep, "{\"pattern\":\"x\",\"path\":\"..\"}", "escapes the workspace");
	expect_error(&tool_grep, "{\"pattern\":\"root\",\"path\":\"/etc/passwd\"}", "absolute");
	expect_error(&tool_grep, "{\"pattern\":\"x\",\"path\":\"etc\"}", "escapes the workspace");
	expect_error(&tool_grep, "{\"pattern\":\"x\",\"path\":\"out\"}", "escapes the workspace");
	expect_error(&tool_grep, "{\"pattern\":\"x\",\"path\":\"secret\"}",
	             "escapes the workspace");
	expect_ok(&tool_grep, "{\"pattern\":\"top secret\"}", "no matches\n");
}

static void test_refuses_escapes_write_edit(void **state)
{
	char *c;

	escape_fixture();
	expect_error(&tool_write, "{\"path\":\"../x\",\"content\":\"x\"}",
	             "path escapes the workspace: ../x");
	expect_error(&tool_write, "{\"path\":\"/tmp/x\",\"content\":\"x\"}", "absolute");
	expect_error(&tool_write, "{\"path\":\"etc/evil\",\"content\":\"x\"}",
	             "escapes the workspace");
	expect_error(&tool_write, "{\"path\":\"out/new.txt\",\"content\":\"x\"}",
	             "escapes the workspace");
	expect_error(&tool_write, "{\"path\":\"out/deeper/new.txt\",\"content\":\"x\"}",
	             "escapes the workspace");
	expect_error(&tool_write, "{\"path\":\"secret\",\"content\":\"x\"}",
	             "escapes the workspace");
	expect_error(&tool_write, "{\"path\":\"dangling\",\"content\":\"x\"}", "symlink");
	expect_error(&tool_write, "{\"path\":\".git/config\",\"content\":\"x\"}", ".git");
	expect_error(&tool_write, "{\"path\":\".git/hooks/pre-commit\",\"content\":\"x\"}", ".git");
	expect_error(&tool_write, "{\"path\":\"sub/../.git/new\",\"content\":\"x\"}", ".git");

	expect_error(&tool_edit, "{\"path\":\"../x\",\"old_string\":\"a\",\"new_string\":\"b\"}",
	             "escapes the workspace");
	expect_error(&tool_edit,
	             "{\"path\":\"/etc/passwd\",\"old_string\":\"root\",\"new_string\":\"b\"}",
	             "absolute");
	expect_error(&tool_edit,
	             "{\"path\":\"etc/passwd\",\"old_string\":\"root\",\"new_string\":\"b\"}",
	             "escapes the workspace");
	expect_error(&tool_edit,
	             "{\"path\":\"out/secret.txt\",\"old_string\":\"top\",\"new_string\":\"b\"}",
	             "escapes the workspace");
	expect_error(&tool_edit,
	             "{\"path\":\"secret\",\"old_string\":\"top\",\"new_string\":\"b\"}",
	             "escapes the workspace");
	expect_error(&tool_edit,
	             "{\"path\":\".git/config\",\"old_string\":\"core\",\"new_string\":\"b\"}",
	             ".git");

	/* Nothing changed outside, nothing made through the links. */
	c = slurp(outside, "secret.txt");
	assert_string_equal(c, "top secret\n");
	free(c);
	assert_null(slurp(outside, "new.txt"));
	assert_null(slurp(outside, "deeper/new.txt"));
	assert_null(slurp(outside, "made-through-link.txt"));
	c = slurp(ws, ".git/config");
	assert_string_equal(c, "[core]\n");
	free(c);
}

/* The gateway's private paths inside the workspace (its configuration,
 * token, secrets): refused to every file tool, reading and writing, as the
 * sandbox hides them from commands; so no tool writes the configuration
 * the watcher reloads. */
static void ctx_error(const struct tool_ctx *ctx, const struct tool_def *def, const char *input)
{
	bool err;
	char *c = run_ctx(def, ctx, input, &err, NULL);

	if (!err || !strstr(c, "one of the gateway's own files"))
		fail_msg("%s %s: want the private-path refusal, got (error %d): [%s]", def->name,
		         input, err, c);
	free(c);
}

static void test_private_paths(void **state)
{
	struct tool_ctx ctx = base_ctx();
	char cfg[PATH_MAX], sec[PATH_MAX], tok[PATH_MAX], *c;
	const char *priv[4];
	bool err;

	put("switchboard.yaml", "agents: []\n");
	put("home/secrets/key", "k3y\n");
	put("home/gateway.token", "tok3n\n");
	put("notes.txt", "hello\n");
	in_dir(cfg, ws, "switchboard.yaml");
	in_dir(sec, ws, "home/secrets");
	in_dir(tok, ws, "home/gateway.token");
	priv[0] = cfg;
	priv[1] = sec;
	priv[2] = tok;
	priv[3] = "/nonexistent/private";
	ctx.private_paths = priv;
	ctx.n_private_paths = 4;

	ctx_error(&ctx, &tool_write, "{\"path\":\"switchboard.yaml\",\"content\":\"x\"}");
	ctx_error(&ctx, &tool_write,
	          "{\"path\":\"./switchboard.yaml\",\"content\":\"x\",\"append\":true}");
	ctx_error(&ctx, &tool_edit,
	          "{\"path\":\"switchboard.yaml\",\"old_string\":\"agents\",\"new_string\":\"x\"}");
	ctx_error(&ctx, &tool_read, "{\"path\":\"switchboard.yaml\"}");
	ctx_error(&ctx, &tool_read, "{\"path\":\"home/gateway.token\"}");
	ctx_error(&ctx, &tool_read, "{\"path\":\"home/secrets/key\"}");
	ctx_error(&ctx, &tool_write, "{\"path\":\"home/secrets/new\",\"content\":\"x\"}");
	ctx_error(&ctx, &tool_ls, "{\"path\":\"home/secrets\"}");
	ctx_error(&ctx, &tool_grep, "{\"pattern\":\"x\",\"path\":\"home/gateway.token\"}");
	ctx_error(&ctx, &tool_glob, "{\"pattern\":\"*\",\"path\":\"home/secrets\"}");

	/* Walks step over them. */
	c = run_ctx(&tool_grep, &ctx, "{\"pattern\":\"k3y|tok3n|agents\"}", &err, NULL);
	assert_false(err);
	assert_string_equal(c, "no matches\n");
	free(c);
	c = run_ctx(&tool_glob, &ctx, "{\"pattern\":\"**/*\"}", &err, NULL);
	assert_false(err);
	assert_null(strstr(c, "home/secrets/key"));
	expect_contains(c, "notes.txt");
	free(c);

	/* The rest of the workspace is as before. */
	c = run_ctx(&tool_write, &ctx, "{\"path\":\"notes.txt\",\"content\":\"bye\\n\"}", &err,
	            NULL);
	assert_false(err);
	free(c);
	c = run_ctx(&tool_read, &ctx, "{\"path\":\"notes.txt\"}", &err, NULL);
	assert_false(err);
	assert_string_equal(c, "     1\tbye\n");
	free(c);
	c = slurp(ws, "switchboard.yaml");
	assert_string_equal(c, "agents: []\n");
	free(c);
	assert_null(slurp(ws, "home/secrets/new"));
}

static void test_paths_resolve(void **state)
{
	char *abs = NULL, *rel = NULL, why[256], want[PATH_MAX];

	put("a/b.txt", "");
	assert_int_equal(
	    paths_resolve(ws, "a/../a/./b.txt", PATHS_EXISTING, &abs, &rel, why, sizeof why),
	    SB_OK);
	in_dir(want, ws, "a/b.txt");
	assert_string_equal(abs, want);
	assert_string_equal(rel, "a/b.txt");
	free(abs);
	free(rel);
	assert_int_equal(paths_resolve(ws, ".", PATHS_EXISTING, &abs, &rel, why, sizeof why),
	                 SB_OK);
	assert_string_equal(abs, ws);
	assert_string_equal(rel, ".");
	free(abs);
	free(rel);
	assert_int_equal(paths_resolve(ws, "new/dir/f", PATHS_WRITE, &abs, &rel, why, sizeof why),
	                 SB_OK);
	assert_string_equal(rel, "new/dir/f");
	free(abs);
	free(rel);
	assert_int_equal(paths_resolve(ws, "x/..", PATHS_WRITE, &abs, NULL, why, sizeof why),
	                 SB_OK);
	free(abs);
	assert_int_equal(paths_resolve(ws, "..", PATHS_EXISTING, &abs, NULL, why, sizeof why),
	                 SB_ERR_PERM);
	assert_string_equal(why, "path escapes the workspace: ..");
	assert_null(abs);
	assert_int_equal(paths_resolve(ws, "", PATHS_EXISTING, &abs, NULL, why, sizeof why),
	                 SB_ERR_INVAL);
	assert_int_equal(paths_resolve(ws, "a/b.txt/c", PATHS_WRITE, &abs, NULL, why, sizeof why),
	                 SB_ERR_NOTFOUND);
	assert_int_equal(paths_resolve(ws, ".git", PATHS_WRITE, &abs, NULL, why, sizeof why),
	                 SB_ERR_PERM);
}

/* ---- jobs and the registry ---------------------------------------------- */

static void test_cancel_file_job(void **state)
{
	struct tool_ctx ctx = base_ctx();
	struct result r = {0};
	struct tool_run *trun = NULL;
	json_t *in = json_pack("{s:s}", "pattern", "x");

	put("a.txt", "x\n");
	assert_int_equal(tool_grep.call(&ctx, in, on_done, &r, &trun), SB_OK);
	trun->cancel(trun);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.rc, SB_ERR_ABORTED);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(r.calls, 1); /* the late result is dropped */
	free(r.content);
	json_decref(in);
}

static void test_registry(void **state)
{
	static const char *const names[] = {"bash",          "edit",         "glob",    "grep",
	                                    "ls",            "memory_get",   "memory_search",
	                                    "memory_write",  "message",      "read",    "skill_load",
	                                    "skill_patch",   "skill_save",   "todo",
	                                    "web_fetch",     "web_search",   "write"};
	static const char *const some[] = {"write", "read", "nope", "read"};
	static const char *const some_sorted[] = {"read", "write"};
	const struct tool_def *const *all;
	json_t *a, *b, *c, *d;
	char *sa, *sb, *sc, *sd;
	size_t n, i;

	all = tool_all(&n);
	assert_int_equal(n, 17);
	for (i = 0; i < n; i++) {
		assert_string_equal(all[i]->name, names[i]);
		assert_ptr_equal(tool_find(names[i]), all[i]);
		assert_non_null(all[i]->call);
		assert_non_null(all[i]->read_only);
		assert_non_null(all[i]->concurrency_safe);
		assert_true(strlen(all[i]->description) > 20);
	}
	assert_null(tool_find("nope"));
	assert_true(tool_read.concurrency_safe(NULL) && tool_read.read_only(NULL));
	assert_true(tool_grep.concurrency_safe(NULL) && tool_glob.concurrency_safe(NULL) &&
	            tool_ls.concurrency_safe(NULL));
	assert_false(tool_bash.concurrency_safe(NULL) || tool_bash.read_only(NULL));
	assert_false(tool_write.concurrency_safe(NULL) || tool_edit.concurrency_safe(NULL));

	a = tool_list_json_new(NULL, 0);
	b = tool_list_json_new(names, 17);
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(json_array_size(a), 17);
	for (i = 0; i < 17; i++) {
		json_t *t = json_array_get(a, i);

		assert_string_equal(json_string_value(json_object_get(t, "name")), names[i]);
		assert_true(json_is_object(json_object_get(t, "input_schema")));
		assert_string_equal(
		    json_string_value(json_object_get(json_object_get(t, "input_schema"), "type")),
		    "object");
	}
	sa = json_dumps(a, JSON_SORT_KEYS | JSON_COMPACT);
	sb = json_dumps(b, JSON_SORT_KEYS | JSON_COMPACT);
	assert_string_equal(sa, sb);
	c = tool_list_json_new(some, 4);
	d = tool_list_json_new(some_sorted, 2);
	sc = json_dumps(c, JSON_SORT_KEYS | JSON_COMPACT);
	sd = json_dumps(d, JSON_SORT_KEYS | JSON_COMPACT);
	assert_int_equal(json_array_size(c), 2);
	assert_string_equal(sc, sd);
	free(sa);
	free(sb);
	free(sc);
	free(sd);
	json_decref(a);
	json_decref(b);
	json_decref(c);
	json_decref(d);
	/* Byte-identical every time. */
	a = tool_list_json_new(NULL, 0);
	sa = json_dumps(a, JSON_SORT_KEYS | JSON_COMPACT);
	b = tool_list_json_new(NULL, 0);
	sb = json_dumps(b, JSON_SORT_KEYS | JSON_COMPACT);
	assert_string_equal(sa, sb);
	free(sa);
	free(sb);
	json_decref(a);
	json_decref(b);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_read_numbers_lines),
	    T(test_read_offset_limit),
	    T(test_read_default_limit_and_long_lines),
	    T(test_read_missing_binary_dir_empty),
	    T(test_write_creates_nested_atomic),
	    T(test_write_append),
	    T(test_edit),
	    T(test_ls),
	    T(test_glob),
	    T(test_grep),
	    T(test_bash_output_and_exit),
	    T(test_bash_long_output_head_tail),
	    T(test_bash_timeout_kills_group),
	    T(test_bash_background_does_not_outlive),
	    T(test_bash_cancel),
	    T(test_spawn_failures),
	    T(test_spawn_head_and_tail),
	    T(test_spawn_env),
	    T(test_message),
	    T(test_refuses_escapes_read_ls_glob_grep),
	    T(test_refuses_escapes_write_edit),
	    T(test_private_paths),
	    T(test_paths_resolve),
	    T(test_cancel_file_job),
	    T(test_registry),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
