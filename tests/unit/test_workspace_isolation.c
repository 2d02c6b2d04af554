/*
 * test_workspace_isolation.c - two agents in one home: agent a's file tools
 * (read, write, edit, ls, grep, glob) cannot reach agent b's workspace, b's
 * transcripts or b's memory, whether by "..", an absolute path, or a symlink
 * (to a directory, to a file, with an absolute or a relative target) placed
 * in a's workspace; a's own files stay reachable. The layout is the default
 * one (home/workspaces/<id>, home/agents/<id>/sessions).
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <uv.h>

#include "agents/tool.h"
#include "gateway/core/err.h"
#include "tests/integration/harness.h"

#define SECRET_SOUL "b-soul-secret"
#define SECRET_MEMORY "b-memory-secret"
#define SECRET_TRANSCRIPT "b-transcript-secret"

static uv_loop_t loop;
static char home[PATH_MAX], ws_a[PATH_MAX + 64], ws_b[PATH_MAX + 64], sessions_b[PATH_MAX + 64];

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

static void put(const char *path, const char *text)
{
	assert_int_equal(harness_write_file(path, text), 0);
}

static int setup(void **state)
{
	char p[PATH_MAX * 2], real[PATH_MAX];

	(void)state;
	if (harness_tmpdir(home, sizeof home) != 0 || !realpath(home, real))
		return -1;
	memcpy(home, real, sizeof home);
	snprintf(ws_a, sizeof ws_a, "%s/workspaces/a", home);
	snprintf(ws_b, sizeof ws_b, "%s/workspaces/b", home);
	snprintf(sessions_b, sizeof sessions_b, "%s/agents/b/sessions", home);
	snprintf(p, sizeof p, "%s/workspaces", home);
	mkdir(p, 0700);
	mkdir(ws_a, 0700);
	mkdir(ws_b, 0700);
	snprintf(p, sizeof p, "%s/agents", home);
	mkdir(p, 0700);
	snprintf(p, sizeof p, "%s/agents/b", home);
	mkdir(p, 0700);
	mkdir(sessions_b, 0700);
	snprintf(p, sizeof p, "%s/SOUL.md", ws_a);
	put(p, "a's own soul\n");
	snprintf(p, sizeof p, "%s/SOUL.md", ws_b);
	put(p, SECRET_SOUL "\n");
	snprintf(p, sizeof p, "%s/MEMORY.md", ws_b);
	put(p, SECRET_MEMORY "\n");
	snprintf(p, sizeof p, "%s/s1.jsonl", sessions_b);
	put(p, "{\"type\":\"session\",\"note\":\"" SECRET_TRANSCRIPT "\"}\n");
	/* symlinks planted in a's workspace */
	snprintf(p, sizeof p, "%s/peer", ws_a);
	if (symlink("../b", p) != 0)
		return -1;
	snprintf(p, sizeof p, "%s/mem.md", ws_a);
	if (symlink("../b/MEMORY.md", p) != 0)
		return -1;
	snprintf(p, sizeof p, "%s/sessions", ws_a);
	if (symlink(sessions_b, p) != 0)
		return -1;
	return uv_loop_init(&loop);
}

static int teardown(void **state)
{
	(void)state;
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	harness_rmrf(home);
	return 0;
}

/* Runs tool for agent a with input; returns its content (free it). */
static char *run_a(const struct tool_def *def, const char *input, bool *is_error)
{
	struct tool_ctx ctx;
	struct result r = {0};
	json_t *in = json_loads(input, 0, NULL);

	assert_non_null(in);
	memset(&ctx, 0, sizeof ctx);
	ctx.loop = &loop;
	ctx.workspace = ws_a;
	ctx.timeout_ms = 20000;
	ctx.agent_id = "a";
	ctx.session_key = "agent:a:main";
	assert_int_equal(def->call(&ctx, in, on_done, &r, NULL), SB_OK);
	uv_run(&loop, UV_RUN_DEFAULT);
	json_decref(in);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.rc, SB_OK);
	assert_non_null(r.content);
	*is_error = r.is_error;
	return r.content;
}

/* The call fails and nothing of b's shows. */
static void refused(const struct tool_def *def, const char *input)
{
	bool err = false;
	char *c = run_a(def, input, &err);

	if (!err || strstr(c, SECRET_SOUL) || strstr(c, SECRET_MEMORY) ||
	    strstr(c, SECRET_TRANSCRIPT))
		fail_msg("%s %s was not refused: %s", def->name, input, c);
	free(c);
}

/* The call may succeed, but nothing of b's shows. */
static void nothing_of_b(const struct tool_def *def, const char *input)
{
	bool err = false;
	char *c = run_a(def, input, &err);

	if (strstr(c, SECRET_SOUL) || strstr(c, SECRET_MEMORY) || strstr(c, SECRET_TRANSCRIPT) ||
	    strstr(c, "s1.jsonl"))
		fail_msg("%s %s shows b's files: %s", def->name, input, c);
	free(c);
}

static void test_read_escapes(void **state)
{
	char input[PATH_MAX * 2];
	bool err;
	char *c;

	(void)state;
	/* a's own file */
	c = run_a(&tool_read, "{\"path\":\"SOUL.md\"}", &err);
	assert_false(err);
	assert_non_null(strstr(c, "a's own soul"));
	free(c);
	/* climbing out */
	refused(&tool_read, "{\"path\":\"../b/SOUL.md\"}");
	refused(&tool_read, "{\"path\":\"../b/MEMORY.md\"}");
	refused(&tool_read, "{\"path\":\"x/../../b/SOUL.md\"}");
	refused(&tool_read, "{\"path\":\"../../agents/b/sessions/s1.jsonl\"}");
	/* absolute */
	snprintf(input, sizeof input, "{\"path\":\"%s/SOUL.md\"}", ws_b);
	refused(&tool_read, input);
	snprintf(input, sizeof input, "{\"path\":\"%s/s1.jsonl\"}", sessions_b);
	refused(&tool_read, input);
	/* through symlinks: a directory, a file, an absolute target */
	refused(&tool_read, "{\"path\":\"peer/SOUL.md\"}");
	refused(&tool_read, "{\"path\":\"mem.md\"}");
	refused(&tool_read, "{\"path\":\"sessions/s1.jsonl\"}");
}

static void test_write_and_edit_escapes(void **state)
{
	char p[PATH_MAX * 2];
	struct stat st;
	struct buf b;

	(void)state;
	refused(&tool_write, "{\"path\":\"../b/SOUL.md\",\"content\":\"taken over\"}");
	refused(&tool_write, "{\"path\":\"peer/NEW.md\",\"content\":\"planted\"}");
	refused(&tool_write, "{\"path\":\"mem.md\",\"content\":\"overwritten\"}");
	refused(&tool_edit, "{\"path\":\"peer/SOUL.md\",\"old_string\":\"" SECRET_SOUL
	                    "\",\"new_string\":\"x\"}");
	refused(&tool_edit,
	        "{\"path\":\"mem.md\",\"old_string\":\"" SECRET_MEMORY "\",\"new_string\":\"x\"}");
	/* b's files are untouched, nothing was planted */
	snprintf(p, sizeof p, "%s/NEW.md", ws_b);
	assert_int_equal(stat(p, &st), -1);
	buf_init(&b, 1 << 20);
	snprintf(p, sizeof p, "%s/SOUL.md", ws_b);
	assert_int_equal(harness_read_file(p, &b), 0);
	assert_string_equal(b.data, SECRET_SOUL "\n");
	buf_reset(&b);
	snprintf(p, sizeof p, "%s/MEMORY.md", ws_b);
	assert_int_equal(harness_read_file(p, &b), 0);
	assert_string_equal(b.data, SECRET_MEMORY "\n");
	buf_free(&b);
}

static void test_listing_escapes(void **state)
{
	(void)state;
	refused(&tool_ls, "{\"path\":\"..\"}");
	refused(&tool_ls, "{\"path\":\"peer\"}");
	refused(&tool_ls, "{\"path\":\"sessions\"}");
	refused(&tool_grep, "{\"pattern\":\"secret\",\"path\":\"peer\"}");
	refused(&tool_grep, "{\"pattern\":\"secret\",\"path\":\"../b\"}");
	refused(&tool_glob, "{\"pattern\":\"*.md\",\"path\":\"peer\"}");
	refused(&tool_glob, "{\"pattern\":\"*\",\"path\":\"../..\"}");
	/* searching all of a's workspace does not follow the symlinks out */
	nothing_of_b(&tool_grep, "{\"pattern\":\"secret\"}");
	nothing_of_b(&tool_glob, "{\"pattern\":\"**/*\"}");
	nothing_of_b(&tool_ls, "{\"path\":\".\"}");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_read_escapes),
	    cmocka_unit_test(test_write_and_edit_escapes),
	    cmocka_unit_test(test_listing_escapes),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
