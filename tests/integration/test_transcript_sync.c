/*
 * test_transcript_sync.c - transcripts off the fsync path
 * (gateway/pipeline/xsync.h): the reply commit holds the transcript lines
 * of its run, the files are synced in batches, and a start restores what
 * a crash of the machine took from them.
 *
 * A kill (SIGKILL at a named crash point) keeps what the process wrote, so
 * a crash of the machine is played by taking from the files what was not
 * yet synced when the gateway died: the whole file (its directory entry
 * never reached the disk), or its tail. At each point of the sync (before
 * syncfs, after it and before the rows are trimmed) and during the
 * restore itself, the next start must end with every transcript whole,
 * each user text in it once, and the session answering with its history.
 */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
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
#include <jansson.h>
#include <sqlite3.h>

#include "agents/transcript.h"
#include "harness.h"
#include "harness_oai.h"

struct fx {
	char home[512];
	char token[256];
	struct harness_daemon d;
};

static void dump_log(const struct harness_daemon *d)
{
	struct buf log;

	buf_init(&log, 64 << 20);
	harness_daemon_log(d, &log);
	fprintf(stderr, "gateway log:\n%s\n", log.data ? log.data : "");
	buf_free(&log);
}

static void setup_home(struct fx *f)
{
	const char *init[] = {"init", NULL};
	char path[1024];

	memset(f, 0, sizeof *f);
	assert_int_equal(harness_tmpdir(f->home, sizeof f->home), 0);
	snprintf(path, sizeof path, "%s/switchboard.yaml", f->home);
	assert_int_equal(harness_write_file(path,
	                                    "providers:\n"
	                                    "  - {id: s, api: scripted, script: script.yaml}\n"
	                                    "agents:\n"
	                                    "  - {id: main, default: true, model: s/x}\n"
	                                    "openai_api: {enabled: true, sync_timeout: 20s}\n"),
	                 0);
	snprintf(path, sizeof path, "%s/script.yaml", f->home);
	assert_int_equal(
	    harness_write_file(path, "steps:\n  - text: \"reply to: {{user_text}}\"\n"), 0);
	assert_int_equal(harness_cli(f->home, NULL, init), 0);
	assert_int_equal(harness_oai_token(f->home, f->token, sizeof f->token), 0);
}

/* One chat completion as user; the HTTP status. */
static long ask(struct fx *f, const char *user, const char *text, char **reply)
{
	return harness_oai_ask(f->d.port, f->token, user, text, reply);
}

static void start(struct fx *f, const char *crash_name)
{
	int rc;

	if (crash_name)
		setenv("SB_CRASH_NAME", crash_name, 1);
	rc = harness_daemon_start(&f->d, f->home, NULL);
	unsetenv("SB_CRASH_NAME");
	assert_int_equal(rc, 0);
}

static void start_ready(struct fx *f)
{
	start(f, NULL);
	if (harness_wait_ready(&f->d, 20000) != 0) {
		dump_log(&f->d);
		fail_msg("the gateway did not start");
	}
}

static void stop(struct fx *f)
{
	long code = harness_daemon_stop(&f->d, SIGTERM, 20000);

	if (code != 0)
		dump_log(&f->d);
	assert_int_equal(code, 0);
}

/* Waits for the gateway to die of the SIGKILL of its crash point. */
static void wait_killed(struct fx *f, const char *point)
{
	long code = harness_wait(f->d.pid, 20000);

	f->d.pid = 0;
	if (code != 128 + SIGKILL)
		fail_msg("the gateway ended with %ld, not SIGKILL at %s", code, point);
}

static int64_t db_count(struct fx *f, const char *sql)
{
	char path[700];
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int64_t n = -1;

	snprintf(path, sizeof path, "%s/state.db", f->home);
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return n;
}

/* The one transcript of main (fails unless there is exactly one). */
static void transcript_path(struct fx *f, char *out, size_t size)
{
	char dir[700];
	struct dirent *de;
	DIR *dd;
	int n = 0;

	snprintf(dir, sizeof dir, "%s/agents/main/sessions", f->home);
	dd = opendir(dir);
	assert_non_null(dd);
	while ((de = readdir(dd))) {
		if (!strstr(de->d_name, ".jsonl") || strstr(de->d_name, ".archive-"))
			continue;
		snprintf(out, size, "%s/%s", dir, de->d_name);
		n++;
	}
	closedir(dd);
	assert_int_equal(n, 1);
}

/* The transcript holds each of the user texts once, with its reply, and
 * loads without a torn line. */
static void check_whole(struct fx *f, const char *const *texts, size_t n)
{
	char path[1200], needle[128];
	struct transcript_loaded tl;
	struct buf data;

	transcript_path(f, path, sizeof path);
	assert_int_equal(transcript_load(path, &tl), 0);
	assert_int_equal(tl.torn, 0);
	assert_int_equal(json_array_size(tl.messages), 2 * n);
	transcript_loaded_free(&tl);
	buf_init(&data, 64 << 20);
	assert_int_equal(harness_read_file(path, &data), 0);
	for (size_t i = 0; i < n; i++) {
		snprintf(needle, sizeof needle, "%s\"}", texts[i]);
		assert_int_equal(harness_count_user_texts(data.data, needle), 1);
	}
	buf_free(&data);
}

enum loss { LOSS_NONE, LOSS_FILE, LOSS_TAIL };

/* One message, then the gateway dies at point after its reply; the machine
 * loses what loss says; the next start (killed once more at restore_point
 * when given) must give the whole transcript back. */
static void crash_case(const char *point, enum loss loss, const char *restore_point)
{
	static const char *const one[] = {"first"}, *const two[] = {"first", "second"};
	struct fx f;
	char *reply = NULL, path[1200];

	setup_home(&f);
	start(&f, point);
	if (harness_wait_ready(&f.d, 20000) != 0) {
		dump_log(&f.d);
		fail_msg("the gateway did not start");
	}
	assert_int_equal(ask(&f, "u1", "first", &reply), 200);
	assert_non_null(strstr(reply, "reply to: first"));
	free(reply);
	wait_killed(&f, point);
	/* The reply commit kept the run's lines. */
	assert_true(db_count(&f, "SELECT count(*) FROM transcript_pending") >= 1);

	transcript_path(&f, path, sizeof path);
	if (loss == LOSS_FILE)
		assert_int_equal(unlink(path), 0);
	if (loss == LOSS_TAIL) {
		struct stat st;

		assert_int_equal(stat(path, &st), 0);
		assert_int_equal(truncate(path, st.st_size / 2), 0);
	}
	if (restore_point) {
		start(&f, restore_point);
		wait_killed(&f, restore_point);
	}

	start_ready(&f);
	check_whole(&f, one, 1);
	/* The session goes on in the same transcript, from its history. */
	assert_int_equal(ask(&f, "u1", "second", &reply), 200);
	assert_non_null(strstr(reply, "reply to: second"));
	free(reply);
	stop(&f);
	check_whole(&f, two, 2);
	harness_rmrf(f.home);
}

/* Killed after the reply commit, before the batched sync: with the file
 * gone (its directory entry not synced), with its tail lost, or intact. */
static void test_before_sync_file_lost(void **state)
{
	(void)state;
	crash_case("transcript.sync.before", LOSS_FILE, NULL);
}

static void test_before_sync_tail_lost(void **state)
{
	(void)state;
	crash_case("transcript.sync.before", LOSS_TAIL, NULL);
}

static void test_before_sync_nothing_lost(void **state)
{
	(void)state;
	crash_case("transcript.sync.before", LOSS_NONE, NULL);
}

/* Killed after the sync, before the rows were trimmed: the file has every
 * line and the restore writes none of them again. */
static void test_after_sync(void **state)
{
	(void)state;
	crash_case("transcript.sync.after", LOSS_NONE, NULL);
}

/* Killed again while the start restores a torn file: the start after that
 * finishes the restore. */
static void test_killed_during_restore(void **state)
{
	(void)state;
	crash_case("transcript.sync.before", LOSS_TAIL, "transcript.restore");
}

/* Without a crash the synced rows are forgotten: the table empties. */
static void test_rows_trimmed(void **state)
{
	struct fx f;
	char *reply = NULL;
	int64_t n = -1;

	(void)state;
	setup_home(&f);
	start_ready(&f);
	assert_int_equal(ask(&f, "u1", "first", &reply), 200);
	free(reply);
	/* The sync comes within XSYNC_INTERVAL_MS, the lazy trim within a
	 * second after it. */
	for (int i = 0; i < 100 && n != 0; i++) {
		usleep(50000);
		n = db_count(&f, "SELECT count(*) FROM transcript_pending");
	}
	assert_int_equal(n, 0);
	stop(&f);
	harness_rmrf(f.home);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_before_sync_file_lost),
	    cmocka_unit_test(test_before_sync_tail_lost),
	    cmocka_unit_test(test_before_sync_nothing_lost),
	    cmocka_unit_test(test_after_sync),
	    cmocka_unit_test(test_killed_during_restore),
	    cmocka_unit_test(test_rows_trimmed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
