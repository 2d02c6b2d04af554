/*
 * test_budget.c - output budgets (agents/context/budget.c): a result over its tool's
 * maximum is saved whole to the result store and replaced by a preview that
 * names the file and its size; files are created exclusively (a replay
 * leaves an existing file as it is); a batch over its budget saves its
 * largest results first; read pages instead of saving; and the read tool
 * reads "@tool-results/..." and the session's own archives, nothing else.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "agents/context/budget.h"
#include "agents/message.h"
#include "agents/tool.h"
#include "gateway/core/err.h"
#include "gateway/core/fsutil.h"

static char home[64];
static char store[PATH_MAX];

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static int setup(void **state)
{
	(void)state;
	snprintf(home, sizeof home, "/tmp/sb-budget-XXXXXX");
	if (!mkdtemp(home))
		return -1;
	snprintf(store, sizeof store, "%s/agents/main/tool-results/S1", home);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	nftw(home, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

static char *filled(size_t n, char c)
{
	char *s = malloc(n + 1);

	assert_non_null(s);
	for (size_t i = 0; i < n; i++)
		s[i] = (i % 80 == 79) ? '\n' : c;
	s[n] = '\0';
	return s;
}

/* An assistant message calling names[i] with id "t<i>", and the results
 * message answering it with sizes[i] characters of 'a' + i. */
static void batch(size_t n, const char *const *names, const size_t *sizes, json_t **assistant,
                  json_t **results)
{
	*assistant = msg_assistant_new();
	*results = msg_user_new();
	for (size_t i = 0; i < n; i++) {
		char id[32];
		char *text = filled(sizes[i], (char)('a' + i));

		snprintf(id, sizeof id, "t%zu", i);
		assert_int_equal(msg_add_tool_use(*assistant, id, names[i], NULL), SB_OK);
		assert_int_equal(msg_add_tool_result(*results, id, text, false), SB_OK);
		free(text);
	}
}

static const char *result_text(const json_t *results, size_t i)
{
	return json_string_value(
	    json_object_get(json_array_get(json_object_get(results, "content"), i), "content"));
}

static char *read_all(const char *path)
{
	char *data = NULL;
	size_t len;

	if (fs_read_all(path, 64 << 20, &data, &len) != SB_OK)
		return NULL;
	return data;
}

static void test_oversized_result_saved_with_preview(void **state)
{
	static const char *const names[] = {"bash", "grep", "ls"};
	static const size_t sizes[] = {60000, 10000, 1000};
	struct budget_limits lim = {0};
	struct budget_plan plan;
	json_t *a, *r;
	char path[PATH_MAX + 64];
	char *saved, *original;
	const char *pv;

	(void)state;
	batch(3, names, sizes, &a, &r);
	original = strdup(result_text(r, 0));
	assert_int_equal(budget_plan(r, a, NULL, 0, store, &lim, &plan), SB_OK);
	assert_int_equal(plan.n, 1);
	assert_int_equal(plan.items[0].block, 0);
	assert_string_equal(plan.items[0].name, "@tool-results/t0.txt");
	assert_int_equal(budget_write(store, &plan.items[0].file, 1), SB_OK);
	assert_int_equal(budget_apply(r, &plan, false), SB_OK);

	snprintf(path, sizeof path, "%s/t0.txt", store);
	saved = read_all(path);
	assert_non_null(saved);
	assert_string_equal(saved, original); /* whole, byte for byte */
	pv = result_text(r, 0);
	assert_non_null(strstr(pv, "60000 characters"));
	assert_non_null(strstr(pv, "@tool-results/t0.txt"));
	assert_true(strlen(pv) < BUDGET_PREVIEW_BYTES + 600);
	assert_true(strlen(pv) > BUDGET_PREVIEW_BYTES - 200);
	/* The head of the result is in the preview. */
	assert_non_null(strstr(pv, "aaaaaaaaaaaaaaaaaaaa"));
	/* The others are untouched. */
	assert_int_equal(strlen(result_text(r, 1)), 10000);
	assert_int_equal(strlen(result_text(r, 2)), 1000);
	{
		char name[160];

		assert_true(budget_is_preview(pv, name, sizeof name));
		assert_string_equal(name, "@tool-results/t0.txt");
		assert_false(budget_is_preview(result_text(r, 1), name, sizeof name));
	}
	/* Directory and file modes. */
	{
		struct stat st;

		assert_int_equal(stat(path, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0600);
		assert_int_equal(stat(store, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0700);
	}
	free(saved);
	free(original);
	budget_plan_free(&plan);
	json_decref(a);
	json_decref(r);
}

static void test_create_exclusive(void **state)
{
	static const char *const names[] = {"bash"};
	static const size_t sizes[] = {70000};
	struct budget_limits lim = {0};
	struct budget_plan plan;
	json_t *a, *r;
	char path[PATH_MAX + 64];
	char *saved;

	(void)state;
	assert_int_equal(fs_mkdirs(store, 0700), SB_OK);
	snprintf(path, sizeof path, "%s/t0.txt", store);
	unlink(path);
	assert_int_equal(fs_write_new(path, "FIRST RUN", 9, 0600), SB_OK);
	batch(1, names, sizes, &a, &r);
	assert_int_equal(budget_plan(r, a, NULL, 0, store, &lim, &plan), SB_OK);
	assert_int_equal(plan.n, 1);
	/* A replay: the file is there and is not rewritten. */
	assert_int_equal(budget_write(store, &plan.items[0].file, 1), SB_OK);
	assert_int_equal(plan.items[0].file.rc, SB_ERR_EXISTS);
	saved = read_all(path);
	assert_string_equal(saved, "FIRST RUN");
	assert_int_equal(budget_apply(r, &plan, false), SB_OK);
	assert_non_null(strstr(result_text(r, 0), "@tool-results/t0.txt"));
	free(saved);
	budget_plan_free(&plan);
	json_decref(a);
	json_decref(r);
}

static void test_batch_largest_first(void **state)
{
	static const char *const names[] = {"grep", "grep", "grep", "grep", "grep"};
	/* Each under 50,000; together 215,000 > 200,000. */
	static const size_t sizes[] = {41000, 45000, 42000, 44000, 43000};
	static const size_t sizes2[] = {48000, 48000, 48000, 48000, 48000, 48000};
	static const char *const names2[] = {"ls", "ls", "ls", "ls", "ls", "ls"};
	struct budget_limits lim = {0};
	struct budget_plan plan;
	json_t *a, *r;

	(void)state;
	batch(5, names, sizes, &a, &r);
	assert_int_equal(budget_plan(r, a, NULL, 0, store, &lim, &plan), SB_OK);
	assert_int_equal(plan.n, 1);
	assert_int_equal(plan.items[0].block, 1); /* the 45,000 one */
	assert_true(plan.total_before == 215000);
	assert_true(plan.total_after <= 200000);
	budget_plan_free(&plan);
	json_decref(a);
	json_decref(r);

	/* 288,000: two must go. */
	batch(6, names2, sizes2, &a, &r);
	assert_int_equal(budget_plan(r, a, NULL, 0, store, &lim, &plan), SB_OK);
	assert_int_equal(plan.n, 2);
	assert_true(plan.total_after <= 200000);
	budget_plan_free(&plan);

	/* A smaller batch budget from the configuration. */
	lim.batch_max = 100000;
	assert_int_equal(budget_plan(r, a, NULL, 0, store, &lim, &plan), SB_OK);
	assert_int_equal(plan.n, 5);
	budget_plan_free(&plan);
	/* A smaller per-tool maximum: every result goes. */
	lim.batch_max = 0;
	lim.tool_max = 10000;
	assert_int_equal(budget_plan(r, a, NULL, 0, store, &lim, &plan), SB_OK);
	assert_int_equal(plan.n, 6);
	budget_plan_free(&plan);
	json_decref(a);
	json_decref(r);
}

static void test_read_pages(void **state)
{
	static const char *const names[] = {"read", "read", "read", "read", "read"};
	static const size_t sizes[] = {49000, 49000, 49000, 49000, 49000};
	struct budget_limits lim = {0};
	struct budget_plan plan;
	json_t *a, *r;
	char *big = filled(60000, 'r'), *cut;
	char *small = filled(100, 's');

	(void)state;
	/* read's results are never saved, not even for the batch. */
	batch(5, names, sizes, &a, &r);
	assert_int_equal(budget_plan(r, a, NULL, 0, store, &lim, &plan), SB_OK);
	assert_int_equal(plan.n, 0);
	budget_plan_free(&plan);
	json_decref(a);
	json_decref(r);
	/* The hook cuts read to its maximum with a note to read on ... */
	cut = budget_finalise(NULL, &tool_read, "t0", big);
	assert_true(strlen(cut) <= TOOL_RESULT_MAX_DEFAULT);
	assert_non_null(strstr(cut, "offset"));
	free(cut);
	/* ... and leaves any other tool's whole for the plan. */
	big = filled(60000, 'b');
	cut = budget_finalise(NULL, &tool_bash, "t0", big);
	assert_int_equal(strlen(cut), 60000);
	free(cut);
	cut = budget_finalise(NULL, &tool_bash, "t0", small);
	assert_ptr_equal(cut, small);
	free(cut);
}

static void test_file_names(void **state)
{
	char out[160];

	(void)state;
	budget_file_name("toolu_01ABC-x", out, sizeof out);
	assert_string_equal(out, "toolu_01ABC-x.txt");
	budget_file_name("../../etc/passwd", out, sizeof out);
	assert_string_equal(out, "______etc_passwd.txt");
	budget_file_name("", out, sizeof out);
	assert_string_equal(out, "result.txt");
}

/* ---- reading the store through read ---- */

struct read_out {
	int done;
	int rc;
	char *content;
	bool is_error;
};

static void on_read(void *ud, int rc, char *content, bool is_error)
{
	struct read_out *o = ud;

	o->done++;
	o->rc = rc;
	o->content = content;
	o->is_error = is_error;
}

static void read_path(uv_loop_t *loop, const char *ws, const char *sessions, const char *path,
                      struct read_out *o)
{
	struct tool_ctx ctx;
	json_t *in = json_pack("{ss}", "path", path);

	memset(&ctx, 0, sizeof ctx);
	memset(o, 0, sizeof *o);
	ctx.loop = loop;
	ctx.workspace = ws;
	ctx.results_dir = store;
	ctx.sessions_dir = sessions;
	ctx.session_id = "S1";
	assert_int_equal(budget_read_call(&ctx, in, on_read, o, NULL), SB_OK);
	json_decref(in);
	while (!o->done)
		uv_run(loop, UV_RUN_ONCE);
}

static void test_read_store(void **state)
{
	uv_loop_t loop;
	struct read_out o;
	char ws[PATH_MAX], sessions[PATH_MAX], p[PATH_MAX + 64];

	(void)state;
	assert_int_equal(uv_loop_init(&loop), 0);
	snprintf(ws, sizeof ws, "%s/ws", home);
	snprintf(sessions, sizeof sessions, "%s/agents/main/sessions", home);
	assert_int_equal(fs_mkdirs(ws, 0700), SB_OK);
	assert_int_equal(fs_mkdirs(sessions, 0700), SB_OK);
	assert_int_equal(fs_mkdirs(store, 0700), SB_OK);
	snprintf(p, sizeof p, "%s/r1.txt", store);
	unlink(p);
	assert_int_equal(fs_write_new(p, "one\ntwo\nthree\n", 14, 0600), SB_OK);
	snprintf(p, sizeof p, "%s/S1.archive-x.jsonl", sessions);
	unlink(p);
	assert_int_equal(fs_write_new(p, "{\"index\":1}\n", 12, 0600), SB_OK);
	snprintf(p, sizeof p, "%s/S1.jsonl", sessions);
	unlink(p);
	assert_int_equal(fs_write_new(p, "{\"type\":\"session\"}\n", 19, 0600), SB_OK);
	snprintf(p, sizeof p, "%s/w.txt", ws);
	unlink(p);
	assert_int_equal(fs_write_new(p, "workspace file\n", 15, 0600), SB_OK);

	read_path(&loop, ws, sessions, "@tool-results/r1.txt", &o);
	assert_false(o.is_error);
	assert_non_null(strstr(o.content, "two"));
	free(o.content);
	/* Paging works as for any file. */
	{
		struct tool_ctx ctx;
		json_t *in =
		    json_pack("{sssisi}", "path", "@tool-results/r1.txt", "offset", 3, "limit", 1);

		memset(&ctx, 0, sizeof ctx);
		memset(&o, 0, sizeof o);
		ctx.loop = &loop;
		ctx.workspace = ws;
		ctx.results_dir = store;
		assert_int_equal(budget_read_call(&ctx, in, on_read, &o, NULL), SB_OK);
		json_decref(in);
		while (!o.done)
			uv_run(&loop, UV_RUN_ONCE);
		assert_non_null(strstr(o.content, "three"));
		assert_null(strstr(o.content, "two"));
		free(o.content);
	}
	read_path(&loop, ws, sessions, "@archive/S1.archive-x.jsonl", &o);
	assert_false(o.is_error);
	assert_non_null(strstr(o.content, "index"));
	free(o.content);
	/* Not the transcript, not another session's archive, no climbing. */
	read_path(&loop, ws, sessions, "@archive/S1.jsonl", &o);
	assert_true(o.is_error);
	free(o.content);
	read_path(&loop, ws, sessions, "@archive/S2.archive-x.jsonl", &o);
	assert_true(o.is_error);
	free(o.content);
	read_path(&loop, ws, sessions, "@tool-results/../S1/r1.txt", &o);
	assert_true(o.is_error);
	free(o.content);
	read_path(&loop, ws, sessions, "@tool-results/", &o);
	assert_true(o.is_error);
	free(o.content);
	/* Ordinary paths are the workspace's, as before. */
	read_path(&loop, ws, sessions, "w.txt", &o);
	assert_false(o.is_error);
	assert_non_null(strstr(o.content, "workspace file"));
	free(o.content);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_oversized_result_saved_with_preview),
	    cmocka_unit_test(test_create_exclusive),
	    cmocka_unit_test(test_batch_largest_first),
	    cmocka_unit_test(test_read_pages),
	    cmocka_unit_test(test_file_names),
	    cmocka_unit_test(test_read_store),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
