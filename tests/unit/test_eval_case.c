/*
 * test_eval_case.c - the golden cases of `switchboard eval`
 * (gateway/cli/eval_case.h) and its workspace copies (eval_tree.h): loading
 * case files (one case, cases:, names, limits, links, hidden files, every
 * error with its position), each expectation against a made-up run (counts,
 * inputs, failed calls, answers, bounded patterns, files beneath the copy
 * without links), and a copy and removal that never follow a link.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gateway/cli/eval_case.h"
#include "gateway/cli/eval_tree.h"
#include "gateway/core/beneath.h"
#include "gateway/core/err.h"
#include "tests/integration/harness.h"

static char dir[512];

static void put(const char *rel, const char *text)
{
	char path[1024];

	snprintf(path, sizeof path, "%s/%s", dir, rel);
	assert_int_equal(harness_write_file(path, text), 0);
}

static void rm(const char *rel)
{
	char path[1024];

	snprintf(path, sizeof path, "%s/%s", dir, rel);
	assert_int_equal(unlink(path), 0);
}

static int setup(void **state)
{
	char path[1024];

	(void)state;
	if (harness_tmpdir(dir, sizeof dir) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/evals", dir);
	return mkdir(path, 0755);
}

static int teardown(void **state)
{
	(void)state;
	harness_rmrf(dir);
	return 0;
}

/* Loads the suite; errors printed into one string (caller frees). */
static int load(struct eval_suite **s, char **printed)
{
	struct cfg_errors errs;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int rc;

	cfg_errors_init(&errs);
	rc = eval_suite_load(dir, ".", s, &errs);
	cfg_errors_print(&errs, f);
	fclose(f);
	cfg_errors_free(&errs);
	*printed = text;
	return rc;
}

static void assert_in(const char *hay, const char *needle)
{
	if (!strstr(hay, needle))
		fail_msg("expected \"%s\" in:\n%s", needle, hay);
}

static void test_load(void **state)
{
	struct eval_suite *s = NULL;
	char *errs;

	(void)state;
	put("evals/b-one.yaml", "message: hi\nexpect: {answer_contains: [hello]}\n");
	put("evals/a-many.yml", "cases:\n"
	                        "  - {name: first, message: one}\n"
	                        "  - name: second\n"
	                        "    turns: [a, b, c]\n"
	                        "    channel: telegram\n"
	                        "    sender: \"42\"\n"
	                        "    group: true\n"
	                        "    timeout: 2s\n"
	                        "    expect:\n"
	                        "      tools: [{name: ls}, {name: bash, count: 0}]\n");
	put("evals/c-literal.yaml", "message: \"${HOME} $${x} ${file:/etc/hostname}\"\n");
	put("evals/.hidden.yaml", "this: is not read\n");
	put("evals/notes.txt", "not a case file\n");
	assert_int_equal(load(&s, &errs), SB_OK);
	assert_string_equal(errs, "");
	free(errs);
	assert_int_equal(s->n_cases, 4);
	assert_string_equal(s->cases[0].name, "first");
	assert_string_equal(s->cases[0].channel, "cli");
	assert_string_equal(s->cases[0].file, "evals/a-many.yml");
	assert_int_equal(s->cases[0].line, 2);
	assert_string_equal(s->cases[1].name, "second");
	assert_int_equal(s->cases[1].n_turns, 3);
	assert_string_equal(s->cases[1].channel, "telegram");
	assert_string_equal(s->cases[1].sender, "42");
	assert_true(s->cases[1].group);
	assert_int_equal(s->cases[1].timeout_ms, 2000);
	assert_int_equal(s->cases[1].expect.n_tools, 2);
	assert_false(s->cases[1].expect.tools[0].count_given);
	assert_true(s->cases[1].expect.tools[1].count_given);
	assert_string_equal(s->cases[2].name, "b-one");
	assert_string_equal(s->cases[2].message, "hi");
	/* Data, not configuration: nothing is interpolated. */
	assert_string_equal(s->cases[3].message, "${HOME} $${x} ${file:/etc/hostname}");
	eval_suite_free(s);
	rm("evals/a-many.yml");
	rm("evals/b-one.yaml");
	rm("evals/c-literal.yaml");
	rm("evals/.hidden.yaml");
	rm("evals/notes.txt");

	/* Nothing there yet: a suite with no cases. */
	assert_int_equal(load(&s, &errs), SB_OK);
	assert_int_equal(s->n_cases, 0);
	eval_suite_free(s);
	free(errs);
}

static void test_load_errors(void **state)
{
	struct eval_suite *s = NULL;
	char *errs, big[1100000];

	(void)state;
	put("evals/nest.yaml", "cases:\n  - name: outer\n    message: x\n"
	                       "    cases: [{name: inner, message: y}]\n");
	assert_int_equal(load(&s, &errs), SB_ERR_CONFIG);
	assert_null(s);
	assert_in(errs, "evals/nest.yaml:4:12: cases[0].cases: cases cannot nest");
	free(errs);
	rm("evals/nest.yaml");

	put("evals/bad name.yaml", "message: x\n");
	assert_int_equal(load(&s, &errs), SB_ERR_CONFIG);
	assert_in(errs, "evals/bad name.yaml: the file name is not a valid case name (hint: "
	                "rename the file, or give the case a name:)");
	free(errs);
	put("evals/bad name.yaml", "name: fine\nmessage: x\n");
	assert_int_equal(load(&s, &errs), SB_OK);
	assert_string_equal(s->cases[0].name, "fine");
	eval_suite_free(s);
	free(errs);
	rm("evals/bad name.yaml");

	put("evals/types.yaml", "message: x\n"
	                        "name: \"no spaces\"\n"
	                        "timeout: soon\n"
	                        "channel: Tele!\n"
	                        "expect:\n"
	                        "  tools: [{count: 1}]\n"
	                        "  files: [{path: a, exists: false, contains: [x]}]\n"
	                        "  colour: red\n");
	assert_int_equal(load(&s, &errs), SB_ERR_CONFIG);
	assert_in(errs, "evals/types.yaml:2:7: name: may hold only letters");
	assert_in(errs, "evals/types.yaml:3:10: timeout: ");
	assert_in(errs, "evals/types.yaml:4:10: channel: may hold only a-z");
	assert_in(errs, "expect.tools[0].name: ");
	assert_in(errs, "expect.files[0].exists: a file that must not exist cannot hold text");
	assert_in(errs, "evals/types.yaml:8:3: expect.colour: unknown key");
	free(errs);
	rm("evals/types.yaml");

	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	memcpy(big, "message: ", 9);
	put("evals/big.yaml", big);
	assert_int_equal(load(&s, &errs), SB_ERR_CONFIG);
	assert_in(errs, "evals/big.yaml: larger than 1 MiB");
	free(errs);
	rm("evals/big.yaml");

	/* evals/ itself a link: refused, not followed. */
	{
		char ev[1024], moved[1024];

		snprintf(ev, sizeof ev, "%s/evals", dir);
		snprintf(moved, sizeof moved, "%s/elsewhere", dir);
		assert_int_equal(rename(ev, moved), 0);
		assert_int_equal(symlink(moved, ev), 0);
		assert_int_equal(load(&s, &errs), SB_ERR_CONFIG);
		assert_in(errs, "evals: not a directory (hint: make evals/ a directory of the "
		                "workspace, not a symbolic link)");
		free(errs);
		assert_int_equal(unlink(ev), 0);
		assert_int_equal(load(&s, &errs), SB_ERR_NOTFOUND);
		assert_in(errs, "evals: no such directory");
		free(errs);
		assert_int_equal(rename(moved, ev), 0);
	}
}

/* ---- checks ---- */

static struct eval_case *one_case(struct eval_suite **s, const char *yaml)
{
	char *errs;

	put("evals/c.yaml", yaml);
	if (load(s, &errs) != SB_OK)
		fail_msg("the case does not load:\n%s", errs);
	free(errs);
	rm("evals/c.yaml");
	assert_int_equal((*s)->n_cases, 1);
	return &(*s)->cases[0];
}

/* Checks c against a run; returns the failures (new reference). */
static json_t *check(const struct eval_case *c, const char *answer,
                     const struct eval_tool_call *calls, size_t n)
{
	struct eval_observed o = {.answer = answer, .calls = calls, .n_calls = n};
	json_t *f = json_array();
	int root, n_failed;

	assert_int_equal(beneath_root(dir, &root), SB_OK);
	o.workspace_fd = root;
	n_failed = eval_case_check(c, &o, f);
	assert_int_equal(n_failed, (int)json_array_size(f));
	close(root);
	return f;
}

static const char *expectation(const json_t *f, size_t i)
{
	return json_string_value(json_object_get(json_array_get(f, i), "expectation"));
}

static const char *seen(const json_t *f, size_t i)
{
	return json_string_value(json_object_get(json_array_get(f, i), "seen"));
}

static void test_tools(void **state)
{
	struct eval_suite *s;
	const struct eval_case *c;
	json_t *in_w = json_pack("{ss ss}", "path", "notes/today.md", "content", "a \"quoted\" x");
	json_t *in_b = json_pack("{ss}", "command", "rm -rf /");
	struct eval_tool_call calls[] = {
	    {"write", in_w, false, 0}, {"bash", in_b, true, 0}, {"write", in_w, false, 1}};
	json_t *f;

	(void)state;
	c = one_case(&s, "message: x\n"
	                 "expect:\n"
	                 "  tools:\n"
	                 "    - {name: write}\n"
	                 "    - {name: write, count: 2, input_contains: today.md}\n"
	                 "    - {name: write, input_contains: 'a \"quoted\"'}\n"
	                 "    - {name: bash, count: 1, failed: true}\n"
	                 "    - {name: read, count: 0}\n");
	f = check(c, "", calls, 3);
	assert_int_equal(json_array_size(f), 0);
	json_decref(f);
	eval_suite_free(s);

	c = one_case(&s, "message: x\n"
	                 "expect:\n"
	                 "  tools:\n"
	                 "    - {name: write, count: 1}\n"
	                 "    - {name: bash, failed: false}\n"
	                 "    - {name: write, count: 0}\n"
	                 "    - {name: ls}\n"
	                 "    - {name: write, input_contains: yesterday}\n");
	f = check(c, "", calls, 3);
	assert_int_equal(json_array_size(f), 5);
	assert_string_equal(expectation(f, 0), "tool write called 1 time");
	assert_in(seen(f, 0), "2 matching calls; calls: write {\"content\":");
	assert_in(seen(f, 0), "bash {\"command\":\"rm -rf /\"} (failed)");
	assert_string_equal(expectation(f, 1), "tool bash called, succeeding");
	assert_string_equal(expectation(f, 2), "tool write never called");
	assert_string_equal(expectation(f, 3), "tool ls called");
	assert_string_equal(expectation(f, 4),
	                    "tool write called with input containing \"yesterday\"");
	json_decref(f);
	f = check(c, "", NULL, 0);
	assert_string_equal(seen(f, 0), "0 matching calls; no tool calls");
	json_decref(f);
	eval_suite_free(s);
	json_decref(in_w);
	json_decref(in_b);
}

static void test_answers(void **state)
{
	struct eval_suite *s;
	const struct eval_case *c;
	char long_answer[2000];
	json_t *f;
	time_t t0;

	(void)state;
	c = one_case(&s, "message: x\n"
	                 "expect:\n"
	                 "  answer_contains: [Ana, \"€\"]\n"
	                 "  answer_not_contains: [sorry]\n"
	                 "  answer_matches: [\"(?i)^hello\\\\b\", \"\\\\d{3}$\"]\n");
	f = check(c, "HELLO Ana, that is 12 € for 123", NULL, 0);
	assert_int_equal(json_array_size(f), 0);
	json_decref(f);
	f = check(c, "hello, sorry\n", NULL, 0);
	assert_int_equal(json_array_size(f), 4);
	assert_string_equal(expectation(f, 0), "answer contains \"Ana\"");
	assert_string_equal(seen(f, 0), "answer: \"hello, sorry\\n\"");
	assert_string_equal(expectation(f, 2), "answer does not contain \"sorry\"");
	assert_string_equal(expectation(f, 3), "answer matches \"\\\\d{3}$\"");
	json_decref(f);
	/* A long answer is quoted in part, cut on a character boundary. */
	memset(long_answer, 'a', sizeof long_answer - 1);
	long_answer[sizeof long_answer - 1] = '\0';
	memcpy(long_answer + 399, "\xE2\x82\xAC", 3);
	f = check(c, long_answer, NULL, 0);
	assert_in(seen(f, 0), "more bytes)");
	assert_non_null(json_string_value(json_object_get(json_array_get(f, 0), "seen")));
	json_decref(f);
	eval_suite_free(s);

	/* A pattern that backtracks without end gives up within its bounds. */
	c = one_case(&s, "message: x\nexpect: {answer_matches: [\"^(a+)+$\"]}\n");
	memset(long_answer, 'a', 60);
	long_answer[60] = 'b';
	long_answer[61] = '\0';
	t0 = time(NULL);
	f = check(c, long_answer, NULL, 0);
	assert_true(time(NULL) - t0 < 10);
	assert_int_equal(json_array_size(f), 1);
	assert_in(seen(f, 0), "matching gave up (");
	json_decref(f);
	/* Bytes that are not UTF-8 are quoted as U+FFFD, and do not break matching. */
	{
		json_t *j = eval_utf8_string("a\xFF\xC0\x80\xED\xA0\x80\xE2\x82\xAC", 10);

		assert_string_equal(json_string_value(j),
		                    "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
		                    "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xE2\x82\xAC");
		json_decref(j);
	}
	f = check(c, "aa\xFF\xFE", NULL, 0);
	assert_int_equal(json_array_size(f), 1);
	json_decref(f);
	eval_suite_free(s);
}

static void test_files(void **state)
{
	struct eval_suite *s;
	const struct eval_case *c;
	char outside[1024], path[1024];
	json_t *f;

	(void)state;
	c = one_case(&s, "message: x\n"
	                 "expect:\n"
	                 "  files:\n"
	                 "    - {path: notes/today.md, contains: [milk], not_contains: [eggs]}\n"
	                 "    - {path: gone.md, exists: false}\n"
	                 "    - {path: ./notes//today.md}\n");
	f = check(c, "", NULL, 0);
	assert_int_equal(json_array_size(f), 2);
	assert_string_equal(expectation(f, 0), "file notes/today.md exists");
	assert_string_equal(seen(f, 0), "no such file");
	json_decref(f);

	snprintf(path, sizeof path, "%s/notes", dir);
	assert_int_equal(mkdir(path, 0755), 0);
	put("notes/today.md", "buy eggs\n");
	put("gone.md", "still here\n");
	f = check(c, "", NULL, 0);
	assert_int_equal(json_array_size(f), 3);
	assert_string_equal(expectation(f, 0), "file notes/today.md contains \"milk\"");
	assert_string_equal(seen(f, 0), "notes/today.md holds: \"buy eggs\\n\"");
	assert_string_equal(expectation(f, 1), "file notes/today.md does not contain \"eggs\"");
	assert_string_equal(expectation(f, 2), "file gone.md does not exist");
	assert_string_equal(seen(f, 2), "it exists");
	json_decref(f);

	/* Links: never followed, whether the file must be there or not. */
	snprintf(outside, sizeof outside, "%s.outside", dir);
	assert_int_equal(harness_write_file(outside, "milk SECRET\n"), 0);
	rm("notes/today.md");
	rm("gone.md");
	snprintf(path, sizeof path, "%s/notes/today.md", dir);
	assert_int_equal(symlink(outside, path), 0);
	snprintf(path, sizeof path, "%s/gone.md", dir);
	assert_int_equal(symlink(outside, path), 0);
	f = check(c, "", NULL, 0);
	assert_int_equal(json_array_size(f), 3);
	assert_in(seen(f, 0), "not a regular file inside the workspace");
	assert_string_equal(seen(f, 1), "a symbolic link is there");
	for (size_t i = 0; i < json_array_size(f); i++)
		assert_null(strstr(seen(f, i), "SECRET"));
	json_decref(f);
	/* A link in the middle of the path, too. */
	rm("notes/today.md");
	rm("gone.md");
	snprintf(path, sizeof path, "%s/notes", dir);
	assert_int_equal(rmdir(path), 0);
	assert_int_equal(symlink("/etc", path), 0);
	f = check(c, "", NULL, 0);
	assert_in(seen(f, 0), "not a regular file inside the workspace");
	json_decref(f);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(unlink(outside), 0);
	eval_suite_free(s);
}

/* ---- the copy ---- */

static void test_tree(void **state)
{
	char src[1024], dst[1024], path[2048], why[512], buf[64];
	struct stat st;
	FILE *fp;

	(void)state;
	snprintf(src, sizeof src, "%s/src", dir);
	snprintf(dst, sizeof dst, "%s/dst", dir);
	assert_int_equal(mkdir(src, 0755), 0);
	snprintf(path, sizeof path, "%s/sub", src);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof path, "%s/sub/run.sh", src);
	assert_int_equal(harness_write_file(path, "#!/bin/sh\n"), 0);
	assert_int_equal(chmod(path, 04755), 0);
	snprintf(path, sizeof path, "%s/link", src);
	assert_int_equal(symlink("/etc/passwd", path), 0);
	snprintf(path, sizeof path, "%s/fifo", src);
	assert_int_equal(mkfifo(path, 0600), 0);
	snprintf(path, sizeof path, "%s/ro", src);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof path, "%s/ro/file", src);
	assert_int_equal(harness_write_file(path, "kept"), 0);
	snprintf(path, sizeof path, "%s/ro", src);
	assert_int_equal(chmod(path, 0555), 0);
	snprintf(path, sizeof path, "%s/skipped", src);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof path, "%s/.git", src);
	assert_int_equal(harness_write_file(path, "gitdir: /somewhere/else/.git/worktrees/x\n"), 0);
	snprintf(path, sizeof path, "%s/sub/skipped", src);
	assert_int_equal(harness_write_file(path, "only the top level is skipped"), 0);

	assert_int_equal(eval_tree_copy(src, dst, "skipped", why, sizeof why), SB_OK);
	snprintf(path, sizeof path, "%s/sub/run.sh", dst);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755); /* no set-id bit */
	snprintf(path, sizeof path, "%s/link", dst);
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(readlink(path, buf, sizeof buf), (ssize_t)strlen("/etc/passwd"));
	snprintf(path, sizeof path, "%s/fifo", dst);
	assert_int_not_equal(lstat(path, &st), 0);
	snprintf(path, sizeof path, "%s/ro/file", dst);
	fp = fopen(path, "r");
	assert_non_null(fp);
	assert_non_null(fgets(buf, sizeof buf, fp));
	fclose(fp);
	assert_string_equal(buf, "kept");
	snprintf(path, sizeof path, "%s/skipped", dst);
	assert_int_not_equal(lstat(path, &st), 0);
	snprintf(path, sizeof path, "%s/.git", dst);
	assert_int_not_equal(lstat(path, &st), 0);
	snprintf(path, sizeof path, "%s/sub/skipped", dst);
	assert_int_equal(lstat(path, &st), 0);
	/* A second copy to the same place is refused. */
	assert_int_equal(eval_tree_copy(src, dst, NULL, why, sizeof why), SB_ERR_EXISTS);

	/* Removal: read-only directories and links (not their targets). */
	assert_int_equal(eval_tree_remove(dst), SB_OK);
	assert_int_not_equal(lstat(dst, &st), 0);
	assert_int_equal(stat("/etc/passwd", &st), 0);
	assert_int_equal(eval_tree_remove(dst), SB_OK);
	snprintf(path, sizeof path, "%s/ro", src);
	assert_int_equal(chmod(path, 0755), 0);
	assert_int_equal(eval_tree_remove(src), SB_OK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_load),  cmocka_unit_test(test_load_errors),
	    cmocka_unit_test(test_tools), cmocka_unit_test(test_answers),
	    cmocka_unit_test(test_files), cmocka_unit_test(test_tree),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
