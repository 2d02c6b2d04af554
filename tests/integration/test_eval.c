/*
 * test_eval.c - `switchboard eval` end to end: the real binary, a home with
 * agents whose workspace is a git repository holding evals/NAME.yaml files,
 * the scripted model (--model scripted:FILE) and the fake model server
 * (tests/fakes/fake_llm.js) for an agent's configured model. Checks what the
 * operator sees: the table and the exit codes (all pass, a failure, bad case
 * files, bad options), the JUnit XML (parsed by xmllint, escaping included),
 * the JSON, that a case that writes files leaves the operator's workspace,
 * home and git status untouched and that no case sees another's files, that
 * a copy's symbolic link to a file outside the workspace is never read, the
 * time limits, the workspace version (commit, dirty), expectations per turn,
 * the permission rules for a case's sender, a command in the agent's
 * sandbox, and a run without any configuration file (a CI checkout).
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <git2.h>
#include <jansson.h>

#include "agents/safety/sandbox.h"
#include "harness.h"

struct fixture {
	struct harness_peer llm; /* the fake model server (tests/fakes/fake_llm.js) */
	char home[512];
	char ws[700];
	char tmp[700];    /* TMPDIR of the runs: their copies must be gone after */
	char script[700]; /* the scripted model */
	char commit[41];
};

static struct fixture fx;

static const char SCRIPT[] =
    "steps:\n"
    "  - match: hello\n"
    "    text: \"Hi <b>&\\\"'</b>\\x01 there, I am your agent.\"\n"
    "  - match: note this\n"
    "    tool_calls:\n"
    "      - {name: write, input: {path: notes.md, content: \"buy milk\\n\"}}\n"
    "  - text: \"Noted.\"\n"
    "  - match: list files\n"
    "    tool_calls:\n"
    "      - {name: ls, input: {}}\n"
    "  - text: \"Files: {{tool_result}}\"\n"
    "  - match: my name is\n"
    "    text: \"Nice to meet you.\"\n"
    "  - match: what is my name\n"
    "    text: \"You told me your name a moment ago.\"\n"
    "  - match: take your time\n"
    "    delay_ms: 20000\n"
    "    text: \"too late\"\n"
    "  - match: read the link\n"
    "    tool_calls:\n"
    "      - {name: read, input: {path: link.md}}\n"
    "  - text: \"Read: {{tool_result}}\"\n"
    "  - match: run the command\n"
    "    tool_calls:\n"
    "      - {name: bash, input: {command: \"echo made-in-box > made.txt; cat $CONFIG; "
    "echo status=$?\"}}\n"
    "  - text: \"Out: {{tool_result}}\"\n";

static const char CASES[] =
    "cases:\n"
    "  - name: greets\n"
    "    message: \"hello\"\n"
    "    expect:\n"
    "      answer_contains: [\"I am your agent\"]\n"
    "      answer_matches: [\"(?i)^hi\\\\b\"]\n"
    "      answer_not_contains: [\"sorry\"]\n"
    "      tools: [{name: write, count: 0}]\n"
    "  - name: takes-notes\n"
    "    message: \"note this: buy milk\"\n"
    "    expect:\n"
    "      tools:\n"
    "        - {name: write, count: 1, input_contains: notes.md}\n"
    "      files:\n"
    "        - {path: notes.md, contains: [\"milk\"], not_contains: [\"eggs\"]}\n"
    "      answer_contains: [\"Noted\"]\n"
    "  - name: sees-no-notes\n"
    "    message: \"list files\"\n"
    "    expect:\n"
    "      tools: [{name: ls, count: 1}]\n"
    "      files: [{path: notes.md, exists: false}]\n"
    "      answer_contains: [\"AGENTS.md\"]\n"
    "      answer_not_contains: [\"notes.md\", \"evals/\"]\n";

static const char CONVERSATION[] = "turns:\n"
                                   "  - \"my name is Ana\"\n"
                                   "  - \"what is my name?\"\n"
                                   "expect:\n"
                                   "  answer_contains: [\"told me\"]\n";

/* A tool expectation that does not hold (the model lists, never runs bash). */
static const char WRONG_TOOL[] = "name: wants-bash\n"
                                 "message: \"list files\"\n"
                                 "expect:\n"
                                 "  tools: [{name: bash}]\n"
                                 "  answer_contains: [\"Files\"]\n";

static void ws_put(const char *name, const char *text)
{
	char path[1024];

	snprintf(path, sizeof path, "%s/%s", fx.ws, name);
	assert_int_equal(harness_write_file(path, text), 0);
}

static void ws_rm(const char *name)
{
	char path[1024];

	snprintf(path, sizeof path, "%s/%s", fx.ws, name);
	assert_int_equal(unlink(path), 0);
}

static bool exists(const char *dir, const char *name)
{
	char path[1024];
	struct stat st;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	return lstat(path, &st) == 0;
}

/* Commits every file of the workspace; the new id into out (41 bytes). */
static void commit_all(char *out)
{
	git_repository *repo = NULL;
	git_index *idx = NULL;
	git_tree *tree = NULL;
	git_commit *parent = NULL;
	git_signature *sig = NULL;
	git_oid tree_id, parent_id, id;

	assert_int_equal(git_repository_open(&repo, fx.ws), 0);
	assert_int_equal(git_repository_index(&idx, repo), 0);
	assert_int_equal(git_index_add_all(idx, NULL, 0, NULL, NULL), 0);
	assert_int_equal(git_index_write(idx), 0);
	assert_int_equal(git_index_write_tree(&tree_id, idx), 0);
	assert_int_equal(git_tree_lookup(&tree, repo, &tree_id), 0);
	assert_int_equal(git_reference_name_to_id(&parent_id, repo, "HEAD"), 0);
	assert_int_equal(git_commit_lookup(&parent, repo, &parent_id), 0);
	assert_int_equal(git_signature_now(&sig, "Operator", "operator@localhost"), 0);
	assert_int_equal(
	    git_commit_create_v(&id, repo, "HEAD", sig, sig, NULL, "evals", tree, 1, parent), 0);
	git_oid_tostr(out, 41, &id);
	git_signature_free(sig);
	git_commit_free(parent);
	git_tree_free(tree);
	git_index_free(idx);
	git_repository_free(repo);
}

/* Entries of the workspace's git status (untracked included). */
static size_t git_changes(void)
{
	git_repository *repo = NULL;
	git_status_list *st = NULL;
	git_status_options so;
	size_t n;

	assert_int_equal(git_repository_open(&repo, fx.ws), 0);
	assert_int_equal(git_status_options_init(&so, GIT_STATUS_OPTIONS_VERSION), 0);
	so.flags = GIT_STATUS_OPT_INCLUDE_UNTRACKED;
	assert_int_equal(git_status_list_new(&st, repo, &so), 0);
	n = git_status_list_entrycount(st);
	git_status_list_free(st);
	git_repository_free(repo);
	return n;
}

/* How many entries dir has (but . and ..). */
static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

/* Runs `switchboard eval ARGS...` (NULL-terminated); output in out. */
static int eval(struct buf *out, ...)
{
	const char *args[32];
	size_t n = 0;
	va_list ap;

	args[n++] = "eval";
	va_start(ap, out);
	while (n < 31 && (args[n] = va_arg(ap, const char *)))
		n++;
	va_end(ap);
	args[n] = NULL;
	buf_reset(out);
	return harness_cli(fx.home, out, args);
}

static void assert_has(const struct buf *b, const char *needle)
{
	if (!b->data || !strstr(b->data, needle))
		fail_msg("expected \"%s\" in:\n%s", needle, b->data ? b->data : "");
}

static void assert_lacks(const struct buf *b, const char *needle)
{
	if (b->data && strstr(b->data, needle))
		fail_msg("did not expect \"%s\" in:\n%s", needle, b->data);
}

/* xmllint --noout file: 0 when the file is well-formed XML. */
static int xml_check(const char *file)
{
	pid_t pid;
	int status;

	if (access("/usr/bin/xmllint", X_OK) != 0) {
		fail_msg("xmllint is needed to check the JUnit XML (apt-get install "
		         "libxml2-utils)");
	}
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execl("/usr/bin/xmllint", "xmllint", "--noout", file, (char *)NULL);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int setup(void **state)
{
	char cfg[2048], path[1024];
	const char *init[] = {"workspace", "init", NULL, NULL};

	(void)state;
	memset(&fx, 0, sizeof fx);
	git_libgit2_init();
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	snprintf(fx.ws, sizeof fx.ws, "%s/ws", fx.home);
	snprintf(fx.tmp, sizeof fx.tmp, "%s/tmp", fx.home);
	snprintf(fx.script, sizeof fx.script, "%s/model.yaml", fx.home);
	if (mkdir(fx.tmp, 0700) != 0 || setenv("TMPDIR", fx.tmp, 1) != 0)
		return -1;
	if (harness_peer_start(&fx.llm, "fake_llm.js", NULL) != 0)
		return -1;
	snprintf(cfg, sizeof cfg,
	         "agents:\n"
	         "  - {id: main, default: true, workspace: ws, sandbox: full, profile: full}\n"
	         "  - {id: other, workspace: ws, model: nowhere/x}\n"
	         "  - {id: boxed, workspace: ws, sandbox: workspace-write}\n"
	         "  - {id: coder, workspace: ws, sandbox: full}\n"
	         "  - {id: remote, workspace: ws, sandbox: full, model: oa/gpt-test}\n"
	         "providers:\n"
	         "  - {id: nowhere, api: openai-chat, base_url: \"http://127.0.0.1:9/v1\", "
	         "api_key: k, max_retries: 0, timeout: 2s}\n"
	         "  - {id: oa, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: test-key, max_retries: 0, timeout: 10s}\n",
	         fx.llm.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0 || harness_write_file(fx.script, SCRIPT) != 0)
		return -1;
	init[2] = fx.ws;
	if (harness_cli(fx.home, NULL, init) != 0)
		return -1;
	if (mkdir(fx.ws, 0755) != 0 && errno != EEXIST)
		return -1;
	snprintf(path, sizeof path, "%s/evals", fx.ws);
	if (mkdir(path, 0755) != 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	harness_peer_stop(&fx.llm);
	harness_rmrf(fx.home);
	git_libgit2_shutdown();
	return 0;
}

static void test_all_pass(void **state)
{
	char model[800], junit[800];
	struct buf out, xml;
	size_t home_entries;

	(void)state;
	ws_put("evals/basic.yaml", CASES);
	ws_put("evals/conversation.yaml", CONVERSATION);
	/* Subdirectories of evals/ are not case files (a model's script). */
	{
		char sub[1024];

		snprintf(sub, sizeof sub, "%s/evals/model", fx.ws);
		assert_int_equal(mkdir(sub, 0755), 0);
	}
	ws_put("evals/model/script.yaml", "steps: [{text: not a case}]\n");
	commit_all(fx.commit);
	home_entries = (size_t)entries(fx.home);
	snprintf(model, sizeof model, "scripted:%s", fx.script);
	snprintf(junit, sizeof junit, "%s/report.xml", fx.home);
	buf_init(&out, 1 << 20);
	assert_int_equal(eval(&out, "--model", model, "--junit", junit, NULL), 0);
	assert_has(&out, "agent main, workspace ");
	assert_has(&out, fx.commit);
	assert_lacks(&out, "(dirty)");
	assert_has(&out, "greets ");
	assert_has(&out, "takes-notes ");
	assert_has(&out, "sees-no-notes ");
	assert_has(&out, "conversation ");
	assert_has(&out, "4 cases: 4 passed, 0 failed, 0 could not run");
	assert_lacks(&out, "FAIL");
	/* The operator's workspace, git status and home are as they were; the
	 * copies are gone. */
	assert_false(exists(fx.ws, "notes.md"));
	assert_int_equal(git_changes(), 0);
	assert_false(exists(fx.home, "state.db"));
	assert_false(exists(fx.home, "agents"));
	assert_int_equal((size_t)entries(fx.home), home_entries + 1); /* report.xml */
	assert_int_equal(entries(fx.tmp), 0);
	/* The JUnit XML parses and says the same. */
	assert_int_equal(xml_check(junit), 0);
	buf_init(&xml, 1 << 20);
	assert_int_equal(harness_read_file(junit, &xml), 0);
	assert_has(&xml, "tests=\"4\" failures=\"0\" errors=\"0\"");
	assert_has(&xml, " timestamp=\"20");
	assert_has(&xml, " hostname=\"");
	assert_has(&xml, "<testcase name=\"takes-notes\"");
	assert_has(&xml, fx.commit);
	assert_has(&xml, "name=\"workspace.dirty\" value=\"false\"");
	/* The reply's markup and control character, escaped. */
	assert_has(&xml, "Hi &lt;b&gt;&amp;&quot;&apos;&lt;/b&gt;\xEF\xBF\xBD there");
	assert_lacks(&xml, "<failure");
	buf_free(&xml);
	buf_free(&out);
}

static void test_failure_reported(void **state)
{
	char model[800], junit[800];
	struct buf out, xml;

	(void)state;
	ws_put("evals/wrong-tool.yaml", WRONG_TOOL);
	commit_all(fx.commit);
	snprintf(model, sizeof model, "scripted:%s", fx.script);
	snprintf(junit, sizeof junit, "%s/fail.xml", fx.home);
	buf_init(&out, 1 << 20);
	assert_int_equal(eval(&out, "--model", model, "--junit", junit, NULL), 1);
	assert_has(&out, "wants-bash ");
	assert_has(&out, "FAIL");
	assert_has(&out, "expected tool bash called; seen 0 matching calls; calls: ls {}");
	assert_has(&out, "evals/wrong-tool.yaml:1)");
	assert_has(&out, "5 cases: 4 passed, 1 failed");
	assert_int_equal(xml_check(junit), 0);
	buf_init(&xml, 1 << 20);
	assert_int_equal(harness_read_file(junit, &xml), 0);
	assert_has(&xml, "tests=\"5\" failures=\"1\" errors=\"0\"");
	assert_has(&xml, "<failure message=\"expected tool bash called\" type=\"expectation\">");
	buf_free(&xml);

	/* --case picks one; --json says the same in fields. */
	assert_int_equal(eval(&out, "--model", model, "--case", "wants-*", "--json", NULL), 1);
	{
		const char *brace = strchr(out.data, '{');
		json_t *j = json_loads(brace ? brace : "", 0, NULL), *c;

		assert_non_null(j);
		assert_int_equal(json_array_size(json_object_get(j, "cases")), 1);
		c = json_array_get(json_object_get(j, "cases"), 0);
		assert_string_equal(json_string_value(json_object_get(c, "name")), "wants-bash");
		assert_string_equal(json_string_value(json_object_get(c, "result")), "fail");
		assert_string_equal(
		    json_string_value(json_object_get(
		        json_array_get(json_object_get(c, "failures"), 0), "expectation")),
		    "tool bash called");
		assert_string_equal(json_string_value(json_object_get(
		                        json_array_get(json_object_get(c, "tools"), 0), "name")),
		                    "ls");
		assert_string_equal(
		    json_string_value(json_object_get(json_object_get(c, "workspace"), "commit")),
		    fx.commit);
		assert_int_equal(json_integer_value(json_object_get(j, "failed")), 1);
		json_decref(j);
	}

	/* A filter that matches nothing is an error of the invocation. */
	assert_int_equal(eval(&out, "--model", model, "--case", "nothing-like-it", NULL), 78);
	assert_has(&out, "no case matches --case (cases: greets takes-notes sees-no-notes");
	ws_rm("evals/wrong-tool.yaml");
	commit_all(fx.commit);
	buf_free(&out);
}

static void test_bad_case_files(void **state)
{
	char model[800];
	struct buf out;

	(void)state;
	snprintf(model, sizeof model, "scripted:%s", fx.script);
	buf_init(&out, 1 << 20);
	ws_put("evals/bad.yaml", "name: bad\n"
	                         "mesage: \"hi\"\n"
	                         "expect:\n"
	                         "  answer_matches: [\"(unclosed\"]\n"
	                         "  tools: [{name: write, count: -1}]\n"
	                         "  files: [{path: ../../etc/passwd}, {path: /etc/passwd}]\n");
	assert_int_equal(eval(&out, "--model", model, NULL), 78);
	assert_has(&out,
	           "evals/bad.yaml:2:1: mesage: unknown key (hint: did you mean \"message\"?)");
	assert_has(&out, "evals/bad.yaml:1:1: a case needs a message, turns or steps");
	assert_has(&out, "evals/bad.yaml:4:20: expect.answer_matches[0]: not a valid pattern");
	assert_has(&out, "evals/bad.yaml:5:32: expect.tools[0].count: expected an integer from 0");
	assert_has(&out, "evals/bad.yaml:6:18: expect.files[0].path: may not contain \"..\"");
	assert_has(&out, "expect.files[1].path: must be relative to the workspace");
	assert_lacks(&out, "CASE ");

	ws_put("evals/bad.yaml", "message: [\n");
	assert_int_equal(eval(&out, "--model", model, NULL), 78);
	assert_has(&out, "evals/bad.yaml:2:1: invalid YAML");

	ws_rm("evals/bad.yaml");
	ws_put("evals/dup.yaml", "cases:\n  - {name: greets, message: again}\n");
	assert_int_equal(eval(&out, "--model", model, NULL), 78);
	assert_has(&out, "evals/dup.yaml:2:5: case \"greets\" is defined twice (first at ");
	assert_has(&out, "evals/basic.yaml:2) (hint: give each case its own name)");
	ws_rm("evals/dup.yaml");

	ws_put("evals/bad.yaml", "cases:\n  - {name: other, message: again}\nmessage: top\n");
	assert_int_equal(eval(&out, "--model", model, NULL), 78);
	assert_has(&out, "evals/bad.yaml:3:10: message: a file with cases: has no case keys at "
	                 "the top (hint: move it into one of the cases)");

	ws_put("evals/bad.yaml", "message: hi\nturns: [a, b]\nexpect: {answer_contains: x}\n");
	assert_int_equal(eval(&out, "--model", model, NULL), 78);
	assert_has(&out, "a case has one of message, turns and steps");
	assert_has(
	    &out,
	    "evals/bad.yaml:3:27: expect.answer_contains: expected a list of strings, found \"x\"");
	ws_rm("evals/bad.yaml");

	/* A case file that is a symbolic link is refused, not followed. */
	{
		char link[1024];

		snprintf(link, sizeof link, "%s/evals/linked.yaml", fx.ws);
		assert_int_equal(symlink("/etc/hostname", link), 0);
		assert_int_equal(eval(&out, "--model", model, NULL), 78);
		assert_has(&out,
		           "evals/linked.yaml: not a regular file inside the workspace (hint: "
		           "make it a regular file, not a symbolic link)");
		assert_int_equal(unlink(link), 0);
	}

	/* A temporary directory inside the workspace would copy the copy. */
	{
		char inside[1024];

		snprintf(inside, sizeof inside, "%s/evals", fx.ws);
		assert_int_equal(setenv("TMPDIR", inside, 1), 0);
		assert_int_equal(eval(&out, "--model", model, NULL), 78);
		assert_has(&out, "is inside the workspace");
		assert_int_equal(setenv("TMPDIR", fx.tmp, 1), 0);
	}

	/* Options and names the configuration does not know. */
	assert_int_equal(eval(&out, "--model", "scripted:/nonexistent/model.yaml", NULL), 78);
	assert_has(&out, "no such script file");
	assert_int_equal(eval(&out, "--model", "ghost/x", NULL), 78);
	assert_has(&out, "no provider \"ghost\"");
	assert_int_equal(eval(&out, "nobody", "--model", model, NULL), 78);
	assert_has(&out, "no agent \"nobody\"");
	assert_int_equal(eval(&out, "--timeout", "soon", NULL), 2);
	assert_int_equal(eval(&out, "--frobnicate", NULL), 2);
	assert_int_equal(git_changes(), 0);
	buf_free(&out);
}

/* A link in the workspace to a file outside it: the model's read is
 * refused, and a file expectation on it never reads what it points at. */
static void test_symlink_outside(void **state)
{
	char model[800], secret[800], link[800];
	struct buf out;

	(void)state;
	snprintf(model, sizeof model, "scripted:%s", fx.script);
	snprintf(secret, sizeof secret, "%s/outside-secret.txt", fx.home);
	assert_int_equal(harness_write_file(secret, "TOPSECRET-7731\n"), 0);
	snprintf(link, sizeof link, "%s/link.md", fx.ws);
	assert_int_equal(symlink(secret, link), 0);
	ws_put("evals/link.yaml", "message: \"read the link\"\n"
	                          "expect:\n"
	                          "  files: [{path: link.md, contains: [\"TOPSECRET\"]}]\n");
	commit_all(fx.commit);
	buf_init(&out, 1 << 20);
	assert_int_equal(eval(&out, "--model", model, "--case", "link", NULL), 1);
	assert_has(&out, "expected file link.md exists; seen not a regular file inside the "
	                 "workspace");
	assert_lacks(&out, "TOPSECRET-7731");
	assert_int_equal(unlink(link), 0);
	assert_int_equal(unlink(secret), 0);
	ws_rm("evals/link.yaml");
	commit_all(fx.commit);
	buf_free(&out);
}

static void test_timeout_and_dirty(void **state)
{
	char model[800];
	struct buf out;
	int64_t t0;

	(void)state;
	snprintf(model, sizeof model, "scripted:%s", fx.script);
	/* Uncommitted: the report says so. */
	ws_put("evals/slow.yaml", "message: \"take your time\"\ntimeout: 500ms\n");
	buf_init(&out, 1 << 20);
	t0 = (int64_t)time(NULL);
	assert_int_equal(eval(&out, "--model", model, "--case", "slow", NULL), 1);
	assert_true((int64_t)time(NULL) - t0 < 10);
	assert_has(&out, "ERROR");
	assert_has(&out, "time limit (500 ms) was reached");
	assert_has(&out, "(dirty)");
	assert_has(&out, "1 case: 0 passed, 0 failed, 1 could not run");
	/* --timeout applies to cases without one of their own. */
	ws_put("evals/slow.yaml", "message: \"take your time\"\n");
	assert_int_equal(eval(&out, "--model", model, "--case", "slow", "--timeout", "300ms", NULL),
	                 1);
	assert_has(&out, "time limit (300 ms) was reached");
	ws_rm("evals/slow.yaml");
	assert_int_equal(entries(fx.tmp), 0);
	buf_free(&out);
}

/* A conversation whose turns each have expectations: each turn's tools and
 * reply are its own, the files are those after the last turn. */
static void test_steps(void **state)
{
	char model[800], junit[800];
	struct buf out;
	const char *steps = "name: steps\n"
	                    "steps:\n"
	                    "  - message: \"note this: buy milk\"\n"
	                    "    expect:\n"
	                    "      tools: [{name: write, count: 1}, {name: ls, count: 0}]\n"
	                    "      answer_contains: [Noted]\n"
	                    "  - message: \"list files\"\n"
	                    "    expect:\n"
	                    "      tools: [{name: ls, count: 1}, {name: write, count: 0}]\n"
	                    "      answer_contains: [notes.md]\n"
	                    "expect:\n"
	                    "  tools: [{name: write, count: 1}, {name: ls, count: 1}]\n"
	                    "  answer_contains: [notes.md]\n"
	                    "  files: [{path: notes.md, contains: [milk]}]\n";

	(void)state;
	snprintf(model, sizeof model, "scripted:%s", fx.script);
	snprintf(junit, sizeof junit, "%s/steps.xml", fx.home);
	ws_put("evals/steps.yaml", steps);
	buf_init(&out, 1 << 20);
	assert_int_equal(eval(&out, "--model", model, "--case", "steps", NULL), 0);
	assert_has(&out, "1 case: 1 passed");
	/* The first turn's reply does not hold what the second's does. */
	ws_put("evals/steps.yaml",
	       "name: steps\n"
	       "steps:\n"
	       "  - message: \"note this: buy milk\"\n"
	       "    expect: {answer_contains: [notes.md], tools: [{name: ls}]}\n"
	       "  - message: \"list files\"\n");
	assert_int_equal(eval(&out, "--model", model, "--case", "steps", "--junit", junit, NULL),
	                 1);
	assert_has(&out, "expected turn 1: tool ls called; seen 0 matching calls; calls: write "
	                 "{\"content\":\"buy milk\\n\",\"path\":\"notes.md\"}");
	assert_has(&out, "expected turn 1: answer contains \"notes.md\"; seen answer: \"Noted.\"");
	/* Quotes of the expectation in the failure's attribute, escaped. */
	assert_int_equal(xml_check(junit), 0);
	{
		struct buf xml;

		buf_init(&xml, 1 << 20);
		assert_int_equal(harness_read_file(junit, &xml), 0);
		assert_has(&xml, "<failure message=\"expected turn 1: tool ls called\"");
		assert_has(&xml,
		           "expected turn 1: answer contains &quot;notes.md&quot;\nseen answer: "
		           "&quot;Noted.&quot;");
		buf_free(&xml);
	}
	/* Files belong to the case: a turn's expect has none. */
	ws_put("evals/steps.yaml", "steps:\n"
	                           "  - message: hi\n"
	                           "    expect: {files: [{path: x}]}\n");
	assert_int_equal(eval(&out, "--model", model, "--case", "steps", NULL), 78);
	assert_has(&out, "evals/steps.yaml:3:14: steps[0].expect.files: unknown key");
	ws_rm("evals/steps.yaml");
	buf_free(&out);
}

/* The permission rules see the case's sender: someone other than the
 * operator cannot change files under the default profile, and nobody can
 * approve it here; the operator can. */
static void test_permissions(void **state)
{
	char model[800];
	struct buf out;

	(void)state;
	snprintf(model, sizeof model, "scripted:%s", fx.script);
	ws_put("evals/perm.yaml", "cases:\n"
	                          "  - name: stranger\n"
	                          "    channel: telegram\n"
	                          "    sender: \"555\"\n"
	                          "    message: \"note this: buy milk\"\n"
	                          "    expect:\n"
	                          "      tools: [{name: write, failed: true, count: 1},\n"
	                          "              {name: write, failed: false, count: 0}]\n"
	                          "      files: [{path: notes.md, exists: false}]\n"
	                          "  - name: operator\n"
	                          "    message: \"note this: buy milk\"\n"
	                          "    expect:\n"
	                          "      tools: [{name: write, failed: false, count: 1}]\n"
	                          "      files: [{path: notes.md, contains: [milk]}]\n");
	buf_init(&out, 1 << 20);
	assert_int_equal(
	    eval(&out, "coder", "--model", model, "--case", "stranger", "--case", "operator", NULL),
	    0);
	assert_has(&out, "2 cases: 2 passed");
	/* The same expectation the other way round fails, and says why. */
	ws_put("evals/perm.yaml", "name: stranger\n"
	                          "channel: telegram\n"
	                          "sender: \"555\"\n"
	                          "message: \"note this: buy milk\"\n"
	                          "expect: {files: [{path: notes.md}]}\n");
	assert_int_equal(eval(&out, "coder", "--model", model, "--case", "stranger", NULL), 1);
	assert_has(&out, "expected file notes.md exists; seen no such file");
	ws_rm("evals/perm.yaml");
	assert_false(exists(fx.ws, "notes.md"));
	buf_free(&out);
}

/* The agent's own sandbox runs its commands: the copy is writable, the
 * operator's configuration is out of sight. */
static void test_sandboxed_command(void **state)
{
	char model[2100], why[512], text[2048];
	struct buf out;

	(void)state;
	if (sandbox_probe(NULL, why, sizeof why) != 0) {
		fprintf(stderr, "skipping the sandboxed command: %s\n", why);
		return;
	}
	snprintf(model, sizeof model, "scripted:%s", fx.script);
	snprintf(text, sizeof text,
	         "message: \"run the command\"\n"
	         "expect:\n"
	         "  tools: [{name: bash, count: 1, input_contains: made.txt}]\n"
	         "  files: [{path: made.txt, contains: [made-in-box]}]\n"
	         "  answer_contains: [\"status=1\"]\n"
	         "  answer_not_contains: [\"nowhere\"]\n");
	ws_put("evals/boxed.yaml", text);
	{
		char cfgfile[1024], script[4096];
		struct buf s;

		/* The command reads the operator's configuration by its path. */
		snprintf(cfgfile, sizeof cfgfile, "%s/switchboard.yaml", fx.home);
		buf_init(&s, 1 << 20);
		assert_int_equal(harness_read_file(fx.script, &s), 0);
		assert_non_null(strstr(s.data, "$CONFIG"));
		snprintf(script, sizeof script, "%.*s%s%s",
		         (int)(strstr(s.data, "$CONFIG") - s.data), s.data, cfgfile,
		         strstr(s.data, "$CONFIG") + strlen("$CONFIG"));
		snprintf(text, sizeof text, "%s/boxed-model.yaml", fx.home);
		assert_int_equal(harness_write_file(text, script), 0);
		snprintf(model, sizeof model, "scripted:%s", text);
		buf_free(&s);
	}
	buf_init(&out, 1 << 20);
	assert_int_equal(eval(&out, "boxed", "--model", model, "--case", "boxed", NULL), 0);
	assert_has(&out, "agent boxed, ");
	assert_has(&out, "1 case: 1 passed");
	assert_false(exists(fx.ws, "made.txt"));
	ws_rm("evals/boxed.yaml");
	buf_free(&out);
}

/* Without --model, the agent's configured model answers (over HTTP, the
 * provider the gateway would use); a provider that cannot be reached makes
 * the case one that could not run. */
static void test_configured_model(void **state)
{
	struct buf out;

	(void)state;
	assert_int_equal(harness_http(fx.llm.port, "POST", "/__reset", NULL, "{}", NULL), 200);
	assert_int_equal(harness_http(fx.llm.port, "POST", "/__script", NULL,
	                              "[{\"match\":\"hello\",\"text\":\"Hi from afar.\"}]", NULL),
	                 200);
	buf_init(&out, 1 << 20);
	assert_int_equal(eval(&out, "remote", "--case", "greets", "--json", NULL), 1);
	{
		const char *brace = strchr(out.data, '{');
		json_t *j = json_loads(brace ? brace : "", 0, NULL), *c;

		assert_non_null(j);
		assert_string_equal(json_string_value(json_object_get(j, "model")), "oa/gpt-test");
		c = json_array_get(json_object_get(j, "cases"), 0);
		assert_string_equal(
		    json_string_value(json_array_get(json_object_get(c, "replies"), 0)),
		    "Hi from afar.");
		/* It answered, but not what greets expects. */
		assert_string_equal(json_string_value(json_object_get(c, "result")), "fail");
		json_decref(j);
	}
	/* The same through --model, naming the configuration's provider (the
	 * fake's steps are used up: a new script). */
	assert_int_equal(harness_http(fx.llm.port, "POST", "/__script", NULL,
	                              "[{\"match\":\"hello\",\"text\":\"Hi from afar.\"}]", NULL),
	                 200);
	assert_int_equal(eval(&out, "coder", "--model", "oa/gpt-test", "--case", "greets", NULL),
	                 1);
	assert_has(&out, "model oa/gpt-test");
	assert_has(&out,
	           "expected answer contains \"I am your agent\"; seen answer: \"Hi from afar.\"");
	/* Nobody listens on the provider's port: an error, not a failure. */
	assert_int_equal(eval(&out, "other", "--case", "greets", NULL), 1);
	assert_has(&out, "ERROR");
	assert_has(&out, "1 case: 0 passed, 0 failed, 1 could not run");
	buf_free(&out);
}

/* A CI checkout: no home, no configuration, only the workspace. */
static void test_without_configuration(void **state)
{
	char model[800], empty[800], keep_note[1024];
	const char *args[] = {"eval",   "--workspace", fx.ws,    "--model", NULL,
	                      "--case", "greets",      "--keep", NULL};
	struct buf out;

	(void)state;
	snprintf(model, sizeof model, "scripted:%s", fx.script);
	snprintf(empty, sizeof empty, "%s/empty-home", fx.home);
	assert_int_equal(mkdir(empty, 0700), 0);
	args[4] = model;
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(empty, &out, args), 0);
	assert_has(&out, "agent main, workspace ");
	assert_has(&out, "1 case: 1 passed");
	assert_has(&out, "kept: ");
	snprintf(keep_note, sizeof keep_note, "kept: %s/switchboard-eval.", fx.tmp);
	assert_has(&out, keep_note);
	assert_int_equal(entries(empty), 0);
	/* A configuration with an error: nothing runs, the error has its place. */
	{
		char bad_home[800], cfgfile[1024];
		const char *bare[] = {"eval", "--model", NULL, NULL};

		snprintf(bad_home, sizeof bad_home, "%s/bad-home", fx.home);
		assert_int_equal(mkdir(bad_home, 0700), 0);
		snprintf(cfgfile, sizeof cfgfile, "%s/switchboard.yaml", bad_home);
		assert_int_equal(
		    harness_write_file(cfgfile, "agents:\n  - {id: main, modle: x/y}\n"), 0);
		bare[2] = model;
		buf_reset(&out);
		assert_int_equal(harness_cli(bad_home, &out, bare), 78);
		assert_has(&out,
		           "switchboard.yaml:2:16: agents[0].modle: unknown key (hint: did you "
		           "mean \"model\"?)");
		assert_lacks(&out, "CASE ");
	}
	/* Without a workspace either, it says what to pass. */
	{
		const char *bare[] = {"eval", NULL};

		buf_reset(&out);
		assert_int_equal(harness_cli(empty, &out, bare), 78);
		assert_has(&out, "no configuration at ");
		assert_has(&out, "--workspace DIR");
	}
	buf_free(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_all_pass),          cmocka_unit_test(test_failure_reported),
	    cmocka_unit_test(test_bad_case_files),    cmocka_unit_test(test_symlink_outside),
	    cmocka_unit_test(test_timeout_and_dirty), cmocka_unit_test(test_steps),
	    cmocka_unit_test(test_permissions),       cmocka_unit_test(test_sandboxed_command),
	    cmocka_unit_test(test_configured_model),  cmocka_unit_test(test_without_configuration),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
