/*
 * test_xsync.c - the store's copy of transcript lines until their files
 * are synced (gateway/pipeline/xsync.h), with a real SQLite store in a
 * temporary directory: a recorded row is trimmed after the batched sync
 * (also when the file's directory was removed since), and a start-up
 * repair writes back what a file lost and then trims.
 */
#include <ftw.h>
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
#include <sqlite3.h>
#include <uv.h>

#include "gateway/core/err.h"
#include "gateway/core/fsutil.h"
#include "gateway/pipeline/xsync.h"
#include "gateway/store/store.h"

struct fx {
	char dir[64];
	char db[128];
	char sessions[128];
	char path[192];
	uv_loop_t loop;
	struct store *st;
	struct xsync *x;
};

static const char LINES[] = "{\"type\":\"session\",\"version\":1,\"id\":\"a\"}\n"
                            "{\"type\":\"message\",\"id\":\"b\",\"parent_id\":null}\n";

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	struct store_options o;

	assert_non_null(f);
	snprintf(f->dir, sizeof f->dir, "/tmp/sb-xsync-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->db, sizeof f->db, "%s/state.db", f->dir);
	snprintf(f->sessions, sizeof f->sessions, "%s/sessions", f->dir);
	snprintf(f->path, sizeof f->path, "%s/s1.jsonl", f->sessions);
	assert_int_equal(fs_mkdirs(f->sessions, 0700), SB_OK);
	assert_int_equal(uv_loop_init(&f->loop), 0);
	memset(&o, 0, sizeof o);
	o.path = f->db;
	assert_int_equal(store_open(&f->st, &f->loop, &o), SB_OK);
	assert_int_equal(xsync_new(&f->x, &f->loop, f->st), SB_OK);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	xsync_close(f->x);
	store_close(f->st);
	uv_run(&f->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&f->loop), 0);
	nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

static int64_t rows(struct fx *f)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int64_t n = -1;

	assert_int_equal(sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(
	    sqlite3_prepare_v2(db, "SELECT count(*) FROM transcript_pending", -1, &st, NULL),
	    SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return n;
}

static void ran(uv_timer_t *t)
{
	*(bool *)t->data = true;
}

/* Turns the loop for about ms (timers and the pool's completions). The
 * timer repeats until it is seen: a one-shot timer that is already due
 * when an iteration starts (the loop's cached time can be old on a slow
 * machine) fires before the poll, and the poll then waits for ever when
 * nothing else is pending. */
static void run_for(struct fx *f, int ms)
{
	uv_timer_t t;
	bool fired = false;

	uv_timer_init(&f->loop, &t);
	t.data = &fired;
	uv_update_time(&f->loop);
	uv_timer_start(&t, ran, (uint64_t)ms, (uint64_t)ms);
	while (!fired)
		uv_run(&f->loop, UV_RUN_ONCE);
	uv_close((uv_handle_t *)&t, NULL);
	uv_run(&f->loop, UV_RUN_NOWAIT);
}

/* Waits until the table holds want rows: the put's commit, or the sync
 * (within XSYNC_INTERVAL_MS) and the lazy trim after it (within
 * STORE_LAZY_KV_MS when nothing else writes). */
static void wait_rows(struct fx *f, int64_t want)
{
	for (int i = 0; i < 60 && rows(f) != want; i++)
		run_for(f, 50);
	assert_int_equal(rows(f), want);
}

static void test_record_sync_trim(void **state)
{
	struct fx *f = *state;

	assert_int_equal(fs_write_new(f->path, LINES, strlen(LINES), 0600), SB_OK);
	assert_int_equal(xsync_record(f->x, f->path, 0, LINES, strlen(LINES)), SB_OK);
	wait_rows(f, 1);
	wait_rows(f, 0);
}

/* A directory removed before its sync: nothing to sync, the row goes. */
static void test_removed_directory(void **state)
{
	struct fx *f = *state;

	assert_int_equal(fs_write_new(f->path, LINES, strlen(LINES), 0600), SB_OK);
	assert_int_equal(xsync_record(f->x, f->path, 0, LINES, strlen(LINES)), SB_OK);
	wait_rows(f, 1);
	nftw(f->sessions, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	wait_rows(f, 0);
}

/* A stop does not wait for a sync that takes its time (syncfs waits for
 * every dirty page of the file system): the loop ends while the sync
 * thread still waits, the row stays for the next start, and the thread
 * finishes on its own afterwards. */
static void test_stop_does_not_wait_for_sync(void **state)
{
	struct fx *f = *state;
	uv_loop_t *loop = &f->loop;

	xsync_test_hold(true);
	assert_int_equal(fs_write_new(f->path, LINES, strlen(LINES), 0600), SB_OK);
	assert_int_equal(xsync_record(f->x, f->path, 0, LINES, strlen(LINES)), SB_OK);
	wait_rows(f, 1);
	for (int i = 0; i < 100 && xsync_test_held() == 0; i++)
		run_for(f, 20); /* the timer starts the sync thread */
	assert_int_equal(xsync_test_held(), 1);
	xsync_close(f->x);
	f->x = NULL;
	store_close(f->st);
	f->st = NULL;
	uv_run(loop, UV_RUN_DEFAULT); /* returns: nothing waits for the thread */
	assert_int_equal(xsync_test_held(), 1);
	assert_int_equal(rows(f), 1); /* kept for the next start's repair */
	xsync_test_hold(false);
	for (int i = 0; i < 1000 && xsync_test_held() != 0; i++)
		usleep(1000);
	assert_int_equal(xsync_test_held(), 0);
}

static void put_done(void *ud, int rc, int64_t id, bool duplicate)
{
	int *r = ud;

	(void)id;
	(void)duplicate;
	*r = rc == SB_OK ? 1 : -1;
}

static void repaired(void *ud, int rc)
{
	int *r = ud;

	*r = rc == SB_OK ? 1 : -1;
}

/* A row left by the last run brings a lost file back, then is trimmed;
 * with no row left the repair is done at once. */
static void test_repair(void **state)
{
	struct fx *f = *state;
	int done = 0;
	char *data = NULL;
	size_t len = 0;

	assert_int_equal(fs_write_new(f->path, LINES, strlen(LINES), 0600), SB_OK);
	/* What the last run committed and never synced. */
	{
		struct store_transcript_lines l = {0, f->path, 0, LINES, strlen(LINES)};

		assert_int_equal(store_transcript_put(f->st, &l, put_done, &done), SB_OK);
		while (!done)
			uv_run(&f->loop, UV_RUN_ONCE);
		assert_int_equal(done, 1);
		done = 0;
	}
	assert_int_equal(rows(f), 1);
	assert_int_equal(unlink(f->path), 0);

	assert_int_equal(xsync_repair(f->x, repaired, &done), SB_OK);
	while (!done)
		uv_run(&f->loop, UV_RUN_ONCE);
	assert_int_equal(done, 1);
	assert_int_equal(fs_read_all(f->path, 1 << 20, &data, &len), SB_OK);
	assert_string_equal(data, LINES);
	free(data);
	wait_rows(f, 0);

	done = 0;
	assert_int_equal(xsync_repair(f->x, repaired, &done), SB_OK);
	while (!done)
		uv_run(&f->loop, UV_RUN_ONCE);
	assert_int_equal(done, 1);
}

/* A row the repair could not restore (its directory cannot be made) is
 * kept for the next start: the syncer's later trims leave it alone. */
static void test_unrestored_row_kept(void **state)
{
	struct fx *f = *state;
	struct store_transcript_lines l = {0, "/proc/self/no-such/s.jsonl", 0, LINES,
	                                   strlen(LINES)};
	int done = 0;

	assert_int_equal(store_transcript_put(f->st, &l, put_done, &done), SB_OK);
	while (!done)
		uv_run(&f->loop, UV_RUN_ONCE);
	done = 0;
	assert_int_equal(xsync_repair(f->x, repaired, &done), SB_OK);
	while (!done)
		uv_run(&f->loop, UV_RUN_ONCE);
	assert_int_equal(done, 1);
	assert_int_equal(rows(f), 1);
	/* A run's row after it is synced and trimmed; the other stays. */
	assert_int_equal(fs_write_new(f->path, LINES, strlen(LINES), 0600), SB_OK);
	assert_int_equal(xsync_record(f->x, f->path, 0, LINES, strlen(LINES)), SB_OK);
	wait_rows(f, 2);
	wait_rows(f, 1);
	run_for(f, 300);
	assert_int_equal(rows(f), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_record_sync_trim, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_removed_directory, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stop_does_not_wait_for_sync, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_repair, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unrestored_row_kept, setup, teardown),
	};
	return cmocka_run_group_tests_name("xsync", tests, NULL, NULL);
}
