/*
 * test_prompt.c - system prompt assembly from a workspace: order, missing and
 * blank files, per-file and total caps with head/tail truncation (exact
 * bytes), UTF-8-safe cuts, hashes, byte stability.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "gateway/core/err.h"
#include "tests/integration/harness.h"
#include "workspaces/prompt.h"
#include "workspaces/workspace.h"

static void put(const char *dir, const char *name, const char *text)
{
	char path[1024];

	snprintf(path, sizeof path, "%s/%s", dir, name);
	assert_int_equal(harness_write_file(path, text), 0);
}

static const char *after_preamble(const char *s)
{
	const char *p = strstr(s, "\n# Project Context\n");

	assert_non_null(p);
	p = strstr(p, "remember or change something.\n");
	assert_non_null(p);
	return p + strlen("remember or change something.\n");
}

static void test_order_missing_blank(void **state)
{
	char dir[512];
	struct buf out;
	struct prompt_info info;
	struct prompt_options opt = {.agent_id = "main"};
	char expect[4096];

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	put(dir, "SOUL.md", "be kind\n");
	put(dir, "AGENTS.md", "# Rules\nno secrets");
	put(dir, "TOOLS.md", "  \n\n");	       /* blank: skipped */
	put(dir, "MEMORY.md", "private memory\n"); /* not the main session: left out */
	put(dir, "BOOTSTRAP.md", "first run\n");   /* not a new workspace: left out */
	buf_init(&out, 1 << 20);
	assert_int_equal(workspace_prompt_build(dir, &opt, &out, &info), SB_OK);
	snprintf(expect, sizeof expect,
		 "\n## AGENTS.md\n\n# Rules\nno secrets\n"
		 "\n## SOUL.md\n\nbe kind\n"
		 "\n## IDENTITY.md\n\n[MISSING] Expected at: %s/IDENTITY.md\n"
		 "\n## USER.md\n\n[MISSING] Expected at: %s/USER.md\n"
		 "\n## HEARTBEAT.md\n\n[MISSING] Expected at: %s/HEARTBEAT.md\n",
		 dir, dir, dir);
	assert_string_equal(after_preamble(out.data), expect);
	assert_true(strncmp(out.data, "You are the agent \"main\", reached through Switchboard",
			    52) == 0);
	assert_null(strstr(out.data, "private memory"));
	assert_int_equal(info.n_files, 6);
	assert_string_equal(info.files[0].name, "AGENTS.md");
	assert_true(info.files[0].present && info.files[0].included && !info.files[0].truncated);
	assert_int_equal(info.files[0].bytes, 18);
	assert_true(info.files[2].present && !info.files[2].included); /* blank TOOLS.md */
	assert_false(info.files[3].present);
	{
		unsigned char h[32];

		crypto_generichash(h, sizeof h, (const unsigned char *)"be kind\n", 8, NULL, 0);
		assert_memory_equal(info.files[1].hash, h, 32);
	}

	/* main session and new workspace bring MEMORY.md and BOOTSTRAP.md */
	buf_reset(&out);
	opt.main_session = true;
	opt.new_workspace = true;
	assert_int_equal(workspace_prompt_build(dir, &opt, &out, &info), SB_OK);
	assert_int_equal(info.n_files, 8);
	assert_non_null(strstr(out.data, "\n## BOOTSTRAP.md\n\nfirst run\n\n## MEMORY.md\n\n"
					 "private memory\n"));
	buf_free(&out);
	harness_rmrf(dir);
}

static void test_truncation_exact(void **state)
{
	char dir[512], big[201];
	struct buf out;
	struct prompt_info info;
	struct prompt_options opt = {.agent_id = "a", .file_max_chars = 100};
	char expect[1024];

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	for (int i = 0; i < 200; i++)
		big[i] = (char)('a' + i % 26);
	big[200] = '\0';
	put(dir, "AGENTS.md", big);
	buf_init(&out, 1 << 20);
	assert_int_equal(workspace_prompt_build(dir, &opt, &out, &info), SB_OK);
	/* head: 70 bytes, tail: 20 bytes */
	snprintf(expect, sizeof expect,
		 "\n## AGENTS.md\n\n%.70s\n[...truncated, read AGENTS.md for full content...]\n%s\n",
		 big, big + 180);
	assert_true(strncmp(after_preamble(out.data), expect, strlen(expect)) == 0);
	assert_true(info.files[0].truncated);
	/* where it was cut, for `switchboard prompt` */
	assert_int_equal(info.files[0].cap, 100);
	assert_false(info.files[0].cut_by_total);
	assert_int_equal(info.files[0].head_bytes, 70);
	assert_int_equal(info.files[0].tail_from, 180);
	assert_false(info.files[0].left_out);
	buf_free(&out);
	harness_rmrf(dir);
}

static void test_total_budget(void **state)
{
	char dir[512];
	struct buf out;
	struct prompt_info info;
	struct prompt_options opt = {.agent_id = "a", .total_max_chars = 120};
	const char *p;

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	put(dir, "AGENTS.md", "0123456789012345678901234567890123456789"); /* 40 */
	put(dir, "SOUL.md",
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaa"); /* 99: capped at the 80 left */
	put(dir, "TOOLS.md", "tools\n");
	buf_init(&out, 1 << 20);
	assert_int_equal(workspace_prompt_build(dir, &opt, &out, &info), SB_OK);
	p = after_preamble(out.data);
	assert_non_null(strstr(p, "\n## SOUL.md\n\n"));
	assert_true(info.files[1].truncated);
	/* cut by what was left of the total, not by the per-file cap */
	assert_true(info.files[1].cut_by_total);
	assert_int_equal(info.files[1].cap, 80);
	assert_int_equal(info.files[1].head_bytes, 56);
	assert_int_equal(info.files[1].tail_from, 99 - 16);
	assert_false(info.files[0].truncated);
	assert_non_null(strstr(p, "\n## TOOLS.md\n\n[not included: the context budget for "
				  "workspace files is spent; read TOOLS.md]\n"));
	assert_false(info.files[2].included);
	assert_true(info.files[2].left_out);
	assert_false(info.files[1].left_out);
	buf_free(&out);
	harness_rmrf(dir);
}

/* The total budget, byte for byte: AGENTS.md takes 40, SOUL.md gets the 80
 * left (head 56, tail 16 around the marker), TOOLS.md is only listed. */
static void test_total_budget_exact(void **state)
{
	char dir[512], expect[4096], a56[57], a16[17];
	struct buf out;
	struct prompt_options opt = {.agent_id = "a", .total_max_chars = 120};

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	put(dir, "AGENTS.md", "0123456789012345678901234567890123456789");
	put(dir, "SOUL.md",
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "bbbbbbbbbbbbbbbbbbbb"); /* 79 a, 20 b */
	put(dir, "TOOLS.md", "tools\n");
	memset(a56, 'a', 56);
	a56[56] = '\0';
	memset(a16, 'b', 16);
	a16[16] = '\0';
	buf_init(&out, 1 << 20);
	assert_int_equal(workspace_prompt_build(dir, &opt, &out, NULL), SB_OK);
	snprintf(expect, sizeof expect,
	         "\n## AGENTS.md\n\n0123456789012345678901234567890123456789\n"
	         "\n## SOUL.md\n\n%s\n[...truncated, read SOUL.md for full content...]\n%s\n"
	         "\n## TOOLS.md\n\n[not included: the context budget for workspace files is "
	         "spent; read TOOLS.md]\n"
	         "\n## IDENTITY.md\n\n[MISSING] Expected at: %s/IDENTITY.md\n"
	         "\n## USER.md\n\n[MISSING] Expected at: %s/USER.md\n"
	         "\n## HEARTBEAT.md\n\n[MISSING] Expected at: %s/HEARTBEAT.md\n",
	         a56, a16, dir, dir, dir);
	assert_string_equal(after_preamble(out.data), expect);
	buf_free(&out);
	harness_rmrf(dir);
}

static void test_utf8_cuts(void **state)
{
	const char *s = "ab\xc3\xa9\xe2\x9c\x93"; /* a b é ✓ */

	(void)state;
	assert_int_equal(prompt_utf8_cut(s, 7, 3), 2); /* not inside é */
	assert_int_equal(prompt_utf8_cut(s, 7, 4), 4);
	assert_int_equal(prompt_utf8_cut(s, 7, 6), 4); /* not inside ✓ */
	assert_int_equal(prompt_utf8_cut(s, 7, 100), 7);
}

static void test_byte_stable(void **state)
{
	char dir[512];
	struct buf a, b;
	struct prompt_options opt = {.agent_id = "main"};

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	put(dir, "AGENTS.md", "rules\n");
	buf_init(&a, 1 << 20);
	buf_init(&b, 1 << 20);
	assert_int_equal(workspace_prompt_build(dir, &opt, &a, NULL), SB_OK);
	usleep(20000);
	assert_int_equal(workspace_prompt_build(dir, &opt, &b, NULL), SB_OK);
	assert_int_equal(a.len, b.len);
	assert_memory_equal(a.data, b.data, a.len);
	/* a change shows */
	put(dir, "AGENTS.md", "rules v2\n");
	buf_reset(&b);
	assert_int_equal(workspace_prompt_build(dir, &opt, &b, NULL), SB_OK);
	assert_non_null(strstr(b.data, "rules v2"));
	assert_int_equal(workspace_prompt_build("/nonexistent/x", &opt, &b, NULL), SB_ERR_NOTFOUND);
	buf_free(&a);
	buf_free(&b);
	harness_rmrf(dir);
}

/* Turn after turn through the per-turn path (the cached snapshot): the same
 * bytes while no file changes, whatever the clock says; a change shows at
 * the next turn and then is stable again; the prompt is the same as the
 * uncached build. */
static void test_byte_stable_across_turns(void **state)
{
	char dir[512], year[16];
	struct buf first, b, plain;
	struct prompt_options opt = {.agent_id = "main", .main_session = true};
	struct workspace_cache *c;
	struct workspace_version v;
	time_t now = time(NULL);
	struct tm tm;

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	put(dir, "AGENTS.md", "rules\n");
	put(dir, "SOUL.md", "calm\n");
	put(dir, "MEMORY.md", "remember\n");
	assert_int_equal(workspace_cache_new(&c), SB_OK);
	buf_init(&first, 1 << 20);
	buf_init(&b, 1 << 20);
	buf_init(&plain, 1 << 20);
	assert_int_equal(workspace_snapshot(c, dir, &opt, &first, &v), SB_OK);
	assert_int_equal(workspace_prompt_build(dir, &opt, &plain, NULL), SB_OK);
	assert_int_equal(first.len, plain.len);
	assert_memory_equal(first.data, plain.data, first.len);
	/* no date in it (nothing that changes per turn) */
	gmtime_r(&now, &tm);
	snprintf(year, sizeof year, "%04d", tm.tm_year + 1900);
	assert_null(strstr(first.data, year));
	for (int turn = 0; turn < 5; turn++) {
		buf_reset(&b);
		usleep(2000);
		assert_int_equal(workspace_snapshot(c, dir, &opt, &b, &v), SB_OK);
		assert_int_equal(b.len, first.len);
		assert_memory_equal(b.data, first.data, b.len);
	}
	put(dir, "SOUL.md", "warm\n");
	buf_reset(&b);
	assert_int_equal(workspace_snapshot(c, dir, &opt, &b, &v), SB_OK);
	assert_non_null(strstr(b.data, "\n## SOUL.md\n\nwarm\n"));
	buf_reset(&first);
	assert_int_equal(workspace_snapshot(c, dir, &opt, &first, &v), SB_OK);
	assert_int_equal(b.len, first.len);
	assert_memory_equal(b.data, first.data, b.len);
	workspace_cache_free(c);
	buf_free(&first);
	buf_free(&b);
	buf_free(&plain);
	harness_rmrf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_missing_blank), cmocka_unit_test(test_truncation_exact),
		cmocka_unit_test(test_total_budget),	    cmocka_unit_test(test_utf8_cuts),
		cmocka_unit_test(test_byte_stable),
		cmocka_unit_test(test_byte_stable_across_turns),
		cmocka_unit_test(test_total_budget_exact),
	};
	assert_true(sodium_init() >= 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
