/*
 * test_git_lazy.c - libgit2 is loaded on first use (workspaces/git_lazy.c),
 * with the real daemon and its built-in offline model on 127.0.0.1:
 *
 *   - a gateway that is ready has not mapped libgit2; its first turn, which
 *     reads the workspace's HEAD, loads it, and the turn is answered;
 *   - with no loadable libgit2 (a file that is not a library, first on
 *     LD_LIBRARY_PATH, under libgit2's soname), `switchboard workspace init`
 *     and `switchboard init` fail saying which library is missing and what
 *     to install; the gateway still starts, answers /readyz and a turn
 *     (its workspace then has no git version), logs why once, and exits
 *     cleanly.
 */
#include <setjmp.h>
#include <signal.h>
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

#include "harness.h"
#include "harness_oai.h"

struct fixture {
	struct harness_daemon d;
	char home[512];
	char token[256];
	bool running;
};

static struct fixture fx;

/* A fresh home made by `switchboard init` (with the real libgit2), with the
 * OpenAI-compatible endpoint on to drive a turn. */
static int setup(void **state)
{
	const char *init[] = {"init", NULL};
	char path[700];
	FILE *f;

	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0 || harness_cli(fx.home, NULL, init) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	f = fopen(path, "a");
	if (!f)
		return -1;
	fputs("\nopenai_api: {enabled: true, sync_timeout: 20s}\n", f);
	if (fclose(f) != 0)
		return -1;
	return harness_oai_token(fx.home, fx.token, sizeof fx.token);
}

static int teardown(void **state)
{
	(void)state;
	unsetenv("LD_LIBRARY_PATH");
	if (fx.running)
		harness_daemon_stop(&fx.d, SIGKILL, 5000);
	harness_rmrf(fx.home);
	return 0;
}

static void start(void)
{
	assert_int_equal(harness_daemon_start(&fx.d, fx.home, NULL), 0);
	fx.running = true;
	assert_int_equal(harness_wait_ready(&fx.d, 20000), 0);
}

static void stop_cleanly(void)
{
	fx.running = false;
	/* 0: a clean exit, and no leaks under the sanitizer build. */
	assert_int_equal(harness_daemon_stop(&fx.d, SIGTERM, 20000), 0);
}

/* Whether the daemon has a file whose name contains what mapped. */
static bool maps_has(pid_t pid, const char *what)
{
	char path[64];
	struct buf maps;
	bool found;

	snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
	buf_init(&maps, 16u << 20);
	assert_int_equal(harness_read_file(path, &maps), 0);
	found = maps.data && strstr(maps.data, what) != NULL;
	buf_free(&maps);
	return found;
}

static void ask(const char *text)
{
	char *reply = NULL;

	assert_int_equal(harness_oai_ask(fx.d.port, fx.token, "operator", text, &reply), 200);
	assert_non_null(reply);
	assert_true(reply[0] != '\0');
	free(reply);
}

static void test_loaded_at_first_turn(void **state)
{
	(void)state;
	start();
	assert_false(maps_has(fx.d.pid, "libgit2"));
	/* Nothing it needs is missing either: the Kerberos stack came with it. */
	assert_false(maps_has(fx.d.pid, "libkrb5"));
	ask("hello");
	assert_true(maps_has(fx.d.pid, SB_GIT2_SONAME));
	stop_cleanly();
}

static void test_missing_library(void **state)
{
	const char *ws_init[] = {"workspace", "init", NULL, NULL};
	const char *init[] = {"init", NULL};
	char lib[700], ws[1024], *p;
	struct buf out, log;
	size_t n = 0;

	(void)state;
	snprintf(lib, sizeof lib, "%s/lib", fx.home);
	assert_int_equal(mkdir(lib, 0700), 0);
	snprintf(ws, sizeof ws, "%s/%s", lib, SB_GIT2_SONAME);
	assert_int_equal(harness_write_file(ws, "not a library\n"), 0);
	assert_int_equal(setenv("LD_LIBRARY_PATH", lib, 1), 0);

	/* A new workspace needs git init: a clear error, and no repository. */
	snprintf(ws, sizeof ws, "%s/new-workspace", fx.home);
	ws_init[2] = ws;
	buf_init(&out, 1 << 16);
	assert_int_equal(harness_cli(fx.home, &out, ws_init), 1);
	assert_non_null(out.data);
	assert_non_null(strstr(out.data, "switchboard workspace init: cannot load " SB_GIT2_SONAME
	                                 " (install libgit2, the version the gateway was built "
	                                 "with)\n"));
	buf_free(&out);
	snprintf(ws, sizeof ws, "%s/new-workspace/.git", fx.home);
	assert_int_equal(access(ws, F_OK), -1);

	/* `switchboard init` of a home whose workspace is not a repository yet. */
	snprintf(ws, sizeof ws, "%s/workspaces/main/.git", fx.home);
	harness_rmrf(ws);
	buf_init(&out, 1 << 16);
	assert_int_equal(harness_cli(fx.home, &out, init), 1);
	assert_non_null(out.data);
	assert_non_null(strstr(out.data, ": cannot load " SB_GIT2_SONAME " (install libgit2"));
	buf_free(&out);

	/* The gateway needs no git to start or to answer. */
	start();
	ask("hello without git");
	ask("and again");
	assert_false(maps_has(fx.d.pid, "libgit2"));
	stop_cleanly();

	buf_init(&log, 1 << 20);
	assert_int_equal(harness_daemon_log(&fx.d, &log), 0);
	assert_non_null(log.data);
	/* Said once, at the first use. */
	for (p = log.data; (p = strstr(p, "msg=\"no git\"")) != NULL; p++)
		n++;
	assert_int_equal(n, 1);
	assert_non_null(strstr(log.data, "error=\"cannot load " SB_GIT2_SONAME));
	buf_free(&log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_loaded_at_first_turn, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_missing_library, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
