/*
 * test_tools_race.c - the file tools against a workspace whose directory is
 * swapped for a symlink while they run.
 *
 * A thread flips ws/d between a real directory and a symlink to a directory
 * outside the workspace (renameat2 RENAME_EXCHANGE with ws/d.alt, so ws/d is
 * always one or the other), thousands of times, while read, ls, grep, glob,
 * write and edit run in a loop on paths through d. Outside holds a file of
 * the same name as the one inside, with secret bytes, and a file whose name
 * is a secret. No result may ever carry either, and nothing may ever be
 * written outside. Runs with openat2 and again with the component walk.
 *
 * The same for the bootstrap files the gateway reads into every system
 * prompt: SOUL.md flips between a regular file and a symlink to the secret
 * outside (RENAME_EXCHANGE again) while the prompt is built thousands of
 * times, with the workspace cache and without; the secret never reaches
 * the prompt, and both sides of the race are seen (SOUL.md included, and
 * refused as not a regular file).
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
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <uv.h>

#include "agents/tool.h"
#include "gateway/core/beneath.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "workspaces/workspace.h"

#define RACE_ROUNDS 700 /* of the six tools, per resolution mode */
#define PROMPT_ROUNDS 3000 /* prompts built, per resolution mode */
#define SECRET "gateway-token-7f3e9a"
#define SECRET_NAME "secret-name-c41d"

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

static uv_loop_t loop;
static char ws[PATH_MAX - 64], outside[PATH_MAX - 64];
static atomic_bool stop;
static atomic_long flips;
static pthread_t th;
static bool th_started;
static char cwd[PATH_MAX];

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	return remove(p);
}

static void make_tmp(char *out, const char *tag)
{
	char tmpl[PATH_MAX], *real;

	snprintf(tmpl, sizeof tmpl, "/tmp/sb-race-%s-XXXXXX", tag);
	assert_non_null(mkdtemp(tmpl));
	real = realpath(tmpl, NULL);
	assert_non_null(real);
	snprintf(out, PATH_MAX - 64, "%s", real);
	free(real);
}

static void put(const char *dir, const char *rel, const char *content)
{
	char p[PATH_MAX];
	FILE *f;

	snprintf(p, sizeof p, "%s/%s", dir, rel);
	f = fopen(p, "wb");
	assert_non_null(f);
	assert_int_equal(fputs(content, f) >= 0, 1);
	fclose(f);
}

static void *flipper(void *arg)
{
	while (!atomic_load(&stop)) {
		if (syscall(SYS_renameat2, AT_FDCWD, "d", AT_FDCWD, "d.alt", RENAME_EXCHANGE) == 0)
			atomic_fetch_add(&flips, 1);
	}
	return NULL;
}

struct result {
	int calls;
	char *content;
	bool is_error;
};

static void on_done(void *ud, int rc, char *content, bool is_error)
{
	struct result *r = ud;

	r->calls++;
	free(r->content);
	r->content = content;
	r->is_error = is_error;
}

static char *run(const struct tool_def *def, const char *input)
{
	struct tool_ctx ctx;
	struct result r = {0};
	json_t *in = json_loads(input, 0, NULL);

	assert_non_null(in);
	memset(&ctx, 0, sizeof ctx);
	ctx.loop = &loop;
	ctx.workspace = ws;
	ctx.timeout_ms = 60000;
	ctx.agent_id = "main";
	assert_int_equal(def->call(&ctx, in, on_done, &r, NULL), SB_OK);
	uv_run(&loop, UV_RUN_DEFAULT);
	json_decref(in);
	assert_int_equal(r.calls, 1);
	assert_non_null(r.content);
	return r.content;
}

/* Outside must hold exactly what the fixture put there. */
static void check_outside(const char *after)
{
	char p[PATH_MAX], data[256];
	DIR *d = opendir(outside);
	struct dirent *de;
	FILE *f;
	size_t n;

	assert_non_null(d);
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    strcmp(de->d_name, "f.txt") == 0 || strcmp(de->d_name, SECRET_NAME) == 0)
			continue;
		closedir(d);
		fail_msg("%s wrote %s outside the workspace (after %ld flips)", after, de->d_name,
		         atomic_load(&flips));
	}
	closedir(d);
	snprintf(p, sizeof p, "%s/f.txt", outside);
	f = fopen(p, "rb");
	assert_non_null(f);
	n = fread(data, 1, sizeof data - 1, f);
	fclose(f);
	data[n] = '\0';
	if (strcmp(data, SECRET "\n") != 0)
		fail_msg("%s changed the file outside the workspace: [%s]", after, data);
}

static void check(const char *tool, char *content)
{
	if (strstr(content, SECRET) || strstr(content, SECRET_NAME))
		fail_msg("%s returned what lies outside the workspace (after %ld flips): [%s]",
		         tool, atomic_load(&flips), content);
	free(content);
	check_outside(tool);
}

static void race(bool walk)
{
	char p[PATH_MAX];
	int i;

	beneath_force_walk(walk);
	assert_non_null(getcwd(cwd, sizeof cwd));
	snprintf(p, sizeof p, "%s/d", ws);
	assert_int_equal(mkdir(p, 0755), 0);
	put(ws, "d/f.txt", "harmless\n");
	put(outside, "f.txt", SECRET "\n");
	put(outside, SECRET_NAME, "x\n");
	snprintf(p, sizeof p, "%s/d.alt", ws);
	assert_int_equal(symlink(outside, p), 0);
	assert_int_equal(chdir(ws), 0);
	atomic_store(&stop, false);
	atomic_store(&flips, 0);
	assert_int_equal(pthread_create(&th, NULL, flipper, NULL), 0);
	th_started = true;
	for (i = 0; i < RACE_ROUNDS; i++) {
		check("read", run(&tool_read, "{\"path\":\"d/f.txt\"}"));
		check("ls", run(&tool_ls, "{\"path\":\"d\"}"));
		check("grep", run(&tool_grep, "{\"pattern\":\"token|harm\"}"));
		check("grep", run(&tool_grep, "{\"pattern\":\"token|harm\",\"path\":\"d/f.txt\"}"));
		check("glob", run(&tool_glob, "{\"pattern\":\"**/*\"}"));
		check("glob", run(&tool_glob, "{\"pattern\":\"*\",\"path\":\"d\"}"));
		check("write", run(&tool_write, "{\"path\":\"d/w.txt\",\"content\":\"w\"}"));
		check("write",
		      run(&tool_write, "{\"path\":\"d/f.txt\",\"content\":\"harmless\\n\"}"));
		check("edit", run(&tool_edit, "{\"path\":\"d/f.txt\",\"old_string\":\"harm\","
		                              "\"new_string\":\"HARM\"}"));
		check("edit", run(&tool_edit, "{\"path\":\"d/f.txt\",\"old_string\":\"HARM\","
		                              "\"new_string\":\"harm\"}"));
	}
	atomic_store(&stop, true);
	pthread_join(th, NULL);
	th_started = false;
	assert_int_equal(chdir(cwd), 0);
	beneath_force_walk(false);
	/* The race was run: the directory flipped all along. */
	assert_true(atomic_load(&flips) > RACE_ROUNDS);
}

static void *soul_flipper(void *arg)
{
	while (!atomic_load(&stop)) {
		if (syscall(SYS_renameat2, AT_FDCWD, "SOUL.md", AT_FDCWD, "SOUL.md.alt",
		            RENAME_EXCHANGE) == 0)
			atomic_fetch_add(&flips, 1);
	}
	return NULL;
}

static void prompt_race(bool walk)
{
	struct prompt_options opt = {.agent_id = "main", .main_session = true};
	struct workspace_cache *cache = NULL;
	char p[PATH_MAX];
	long included = 0, refused = 0;

	beneath_force_walk(walk);
	assert_non_null(getcwd(cwd, sizeof cwd));
	put(ws, "SOUL.md", "the soul of the agent\n");
	put(ws, "AGENTS.md", "how it works\n");
	put(outside, "token", SECRET "\n");
	snprintf(p, sizeof p, "%s/token", outside);
	assert_int_equal(chdir(ws), 0);
	assert_int_equal(symlink(p, "SOUL.md.alt"), 0);
	assert_int_equal(workspace_cache_new(&cache), SB_OK);
	atomic_store(&stop, false);
	atomic_store(&flips, 0);
	assert_int_equal(pthread_create(&th, NULL, soul_flipper, NULL), 0);
	th_started = true;
	for (int i = 0; i < PROMPT_ROUNDS; i++) {
		struct workspace_version ver;
		struct buf out;

		buf_init(&out, 1 << 20);
		assert_int_equal(workspace_snapshot(i % 2 ? cache : NULL, ws, &opt, &out, &ver),
		                 SB_OK);
		if (strstr(out.data, SECRET))
			fail_msg("the prompt holds the file behind the symlink (round %d, %ld "
			         "flips):\n%s",
			         i, atomic_load(&flips), out.data);
		if (strstr(out.data, "the soul of the agent"))
			included++;
		if (strstr(out.data, "[not included: SOUL.md is not a regular file"))
			refused++;
		buf_free(&out);
	}
	atomic_store(&stop, true);
	pthread_join(th, NULL);
	th_started = false;
	workspace_cache_free(cache);
	assert_int_equal(chdir(cwd), 0);
	beneath_force_walk(false);
	assert_true(atomic_load(&flips) > PROMPT_ROUNDS);
	/* Both sides of the race were hit. */
	if (!included || !refused)
		fail_msg("the race was not run: %ld prompts with SOUL.md, %ld refusing it",
		         included, refused);
}

static int setup(void **state)
{
	if (uv_loop_init(&loop) != 0)
		return -1;
	make_tmp(ws, "ws");
	make_tmp(outside, "out");
	return 0;
}

static int teardown(void **state)
{
	atomic_store(&stop, true);
	if (th_started)
		pthread_join(th, NULL);
	th_started = false;
	if (cwd[0] && chdir(cwd) != 0)
		return -1;
	beneath_force_walk(false);
	uv_run(&loop, UV_RUN_DEFAULT);
	nftw(ws, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	nftw(outside, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return uv_loop_close(&loop) == 0 ? 0 : -1;
}

static void test_race_openat2(void **state)
{
	race(false);
}

static void test_race_walk(void **state)
{
	race(true);
}

static void test_prompt_race_openat2(void **state)
{
	prompt_race(false);
}

static void test_prompt_race_walk(void **state)
{
	prompt_race(true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_race_openat2, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_race_walk, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_prompt_race_openat2, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_prompt_race_walk, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
