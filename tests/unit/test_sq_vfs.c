/*
 * test_sq_vfs.c - the store's VFS (gateway/store/sqlite/sq_vfs.c): a WAL's
 * frames reach the file in one write per commit, every committed row is
 * visible to an independent connection (SQLite's own unix VFS) as soon as
 * the commit returns, whatever the synchronous setting, and every failure
 * point of the gathered write loses nothing committed and commits nothing
 * lost: a failed write of the commit frame, a failed sync, a full disk, a
 * transaction larger than the buffer, frames rewritten in a transaction
 * that spilled, a log restarted at its start, and a kill with frames still
 * buffered.
 *
 * Under the store's VFS sits a test VFS over "unix" that counts the writes
 * each WAL receives and fails the N-th one on request.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "gateway/store/sqlite/sq.h"

/* ---- the test VFS: counts and fails WAL writes ---- */

struct tv_file {
	sqlite3_file base;
	bool wal;
	/* the unix file follows */
};

static sqlite3_vfs tv_vfs;
static sqlite3_vfs *tv_unix;
static long tv_wal_writes;      /* writes a WAL received */
static long tv_wal_bytes;       /* bytes of them */
static long tv_fail_at;         /* fail the WAL write with this number (0: none) */
static int tv_fail_rc;          /* with this code */
static bool tv_fail_sync;       /* fail the next WAL sync */
static const char *SQ_VFS_NAME; /* the store's VFS, over tv_vfs */

static sqlite3_file *tv_inner(sqlite3_file *f)
{
	return (sqlite3_file *)((struct tv_file *)f + 1);
}

static int tv_close(sqlite3_file *f)
{
	return tv_inner(f)->pMethods->xClose(tv_inner(f));
}
static int tv_read(sqlite3_file *f, void *p, int n, sqlite3_int64 o)
{
	return tv_inner(f)->pMethods->xRead(tv_inner(f), p, n, o);
}
static int tv_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 o)
{
	if (((struct tv_file *)f)->wal) {
		tv_wal_writes++;
		if (tv_fail_at && tv_wal_writes == tv_fail_at)
			return tv_fail_rc;
		tv_wal_bytes += n;
	}
	return tv_inner(f)->pMethods->xWrite(tv_inner(f), p, n, o);
}
static int tv_truncate(sqlite3_file *f, sqlite3_int64 s)
{
	return tv_inner(f)->pMethods->xTruncate(tv_inner(f), s);
}
static int tv_sync(sqlite3_file *f, int fl)
{
	if (((struct tv_file *)f)->wal && tv_fail_sync) {
		tv_fail_sync = false;
		return SQLITE_IOERR_FSYNC;
	}
	return tv_inner(f)->pMethods->xSync(tv_inner(f), fl);
}
static int tv_size(sqlite3_file *f, sqlite3_int64 *s)
{
	return tv_inner(f)->pMethods->xFileSize(tv_inner(f), s);
}
static int tv_lock(sqlite3_file *f, int l)
{
	return tv_inner(f)->pMethods->xLock(tv_inner(f), l);
}
static int tv_unlock(sqlite3_file *f, int l)
{
	return tv_inner(f)->pMethods->xUnlock(tv_inner(f), l);
}
static int tv_reserved(sqlite3_file *f, int *o)
{
	return tv_inner(f)->pMethods->xCheckReservedLock(tv_inner(f), o);
}
static int tv_fcntl(sqlite3_file *f, int op, void *a)
{
	return tv_inner(f)->pMethods->xFileControl(tv_inner(f), op, a);
}
static int tv_sector(sqlite3_file *f)
{
	return tv_inner(f)->pMethods->xSectorSize(tv_inner(f));
}
static int tv_devchar(sqlite3_file *f)
{
	return tv_inner(f)->pMethods->xDeviceCharacteristics(tv_inner(f));
}
static int tv_shm_map(sqlite3_file *f, int pg, int sz, int ext, void volatile **pp)
{
	return tv_inner(f)->pMethods->xShmMap(tv_inner(f), pg, sz, ext, pp);
}
static int tv_shm_lock(sqlite3_file *f, int off, int n, int fl)
{
	return tv_inner(f)->pMethods->xShmLock(tv_inner(f), off, n, fl);
}
static void tv_shm_barrier(sqlite3_file *f)
{
	tv_inner(f)->pMethods->xShmBarrier(tv_inner(f));
}
static int tv_shm_unmap(sqlite3_file *f, int del)
{
	return tv_inner(f)->pMethods->xShmUnmap(tv_inner(f), del);
}
static int tv_fetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp)
{
	return tv_inner(f)->pMethods->xFetch(tv_inner(f), o, n, pp);
}
static int tv_unfetch(sqlite3_file *f, sqlite3_int64 o, void *p)
{
	return tv_inner(f)->pMethods->xUnfetch(tv_inner(f), o, p);
}

static const sqlite3_io_methods tv_methods = {
    .iVersion = 3,
    .xClose = tv_close,
    .xRead = tv_read,
    .xWrite = tv_write,
    .xTruncate = tv_truncate,
    .xSync = tv_sync,
    .xFileSize = tv_size,
    .xLock = tv_lock,
    .xUnlock = tv_unlock,
    .xCheckReservedLock = tv_reserved,
    .xFileControl = tv_fcntl,
    .xSectorSize = tv_sector,
    .xDeviceCharacteristics = tv_devchar,
    .xShmMap = tv_shm_map,
    .xShmLock = tv_shm_lock,
    .xShmBarrier = tv_shm_barrier,
    .xShmUnmap = tv_shm_unmap,
    .xFetch = tv_fetch,
    .xUnfetch = tv_unfetch,
};

static int tv_open(sqlite3_vfs *v, sqlite3_filename name, sqlite3_file *f, int flags, int *of)
{
	struct tv_file *tf = (struct tv_file *)f;
	int rc;

	(void)v;
	memset(tf, 0, sizeof *tf);
	rc = tv_unix->xOpen(tv_unix, name, tv_inner(f), flags, of);
	if (tv_inner(f)->pMethods) {
		tf->base.pMethods = &tv_methods;
		tf->wal = (flags & SQLITE_OPEN_WAL) != 0;
	}
	return rc;
}
static int tv_delete(sqlite3_vfs *v, const char *n, int s)
{
	(void)v;
	return tv_unix->xDelete(tv_unix, n, s);
}
static int tv_access(sqlite3_vfs *v, const char *n, int fl, int *o)
{
	(void)v;
	return tv_unix->xAccess(tv_unix, n, fl, o);
}
static int tv_fullpath(sqlite3_vfs *v, const char *n, int k, char *o)
{
	(void)v;
	return tv_unix->xFullPathname(tv_unix, n, k, o);
}
static int tv_random(sqlite3_vfs *v, int n, char *o)
{
	(void)v;
	return tv_unix->xRandomness(tv_unix, n, o);
}
static int tv_sleep(sqlite3_vfs *v, int us)
{
	(void)v;
	return tv_unix->xSleep(tv_unix, us);
}
static int tv_time(sqlite3_vfs *v, double *o)
{
	(void)v;
	return tv_unix->xCurrentTime(tv_unix, o);
}

static int group_setup(void **state)
{
	(void)state;
	tv_unix = sqlite3_vfs_find("unix");
	assert_non_null(tv_unix);
	tv_vfs = (sqlite3_vfs){
	    .iVersion = 1,
	    .szOsFile = (int)sizeof(struct tv_file) + tv_unix->szOsFile,
	    .mxPathname = tv_unix->mxPathname,
	    .zName = "sq-vfs-test",
	    .xOpen = tv_open,
	    .xDelete = tv_delete,
	    .xAccess = tv_access,
	    .xFullPathname = tv_fullpath,
	    .xRandomness = tv_random,
	    .xSleep = tv_sleep,
	    .xCurrentTime = tv_time,
	};
	assert_int_equal(sqlite3_vfs_register(&tv_vfs, 0), SQLITE_OK);
	SQ_VFS_NAME = sq_vfs_register("sq-vfs-test");
	assert_non_null(SQ_VFS_NAME);
	/* Registered once: a different inner VFS later is refused. */
	assert_null(sq_vfs_register("unix"));
	assert_string_equal(sq_vfs_register(NULL), SQ_VFS_NAME);
	return 0;
}

/* ---- fixture ---- */

struct fx {
	char dir[64];
	char path[128];
	sqlite3 *db;    /* through the store's VFS */
	sqlite3 *plain; /* SQLite's own unix VFS: the independent reader */
};

static void exec_ok(sqlite3 *db, const char *sql)
{
	char *err = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
	if (rc != SQLITE_OK)
		fail_msg("%s: %s", sql, err ? err : sqlite3_errstr(rc));
}

static int64_t one_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	int64_t v;

	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

static void integrity_ok(sqlite3 *db)
{
	sqlite3_stmt *st = NULL;

	assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL),
	                 SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(st, 0), "ok");
	sqlite3_finalize(st);
}

static void open_db(struct fx *f, const char *synchronous)
{
	char sql[96];

	assert_int_equal(sqlite3_open_v2(f->path, &f->db,
	                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, SQ_VFS_NAME),
	                 SQLITE_OK);
	exec_ok(f->db, "PRAGMA page_size = 1024");
	exec_ok(f->db, "PRAGMA journal_mode = WAL");
	snprintf(sql, sizeof sql, "PRAGMA synchronous = %s", synchronous);
	exec_ok(f->db, sql);
	exec_ok(f->db, "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v BLOB)");
	assert_int_equal(sqlite3_open_v2(f->path, &f->plain, SQLITE_OPEN_READONLY, "unix"),
	                 SQLITE_OK);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);

	assert_non_null(f);
	snprintf(f->dir, sizeof f->dir, "/tmp/sqvfs-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof f->path, "%s/state.db", f->dir);
	tv_fail_at = 0;
	tv_fail_sync = false;
	open_db(f, "FULL");
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	char cmd[128];

	sqlite3_close(f->plain);
	sqlite3_close(f->db);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

/* Inserts rows rows of size bytes each in one transaction; returns the
 * result of its COMMIT. */
static int insert_rows(sqlite3 *db, int rows, int size)
{
	sqlite3_stmt *st = NULL;
	char *blob = malloc((size_t)size);
	int rc;

	assert_non_null(blob);
	memset(blob, 'x', (size_t)size);
	exec_ok(db, "BEGIN IMMEDIATE");
	assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO t (v) VALUES (?)", -1, &st, NULL),
	                 SQLITE_OK);
	for (int i = 0; i < rows; i++) {
		blob[0] = (char)i;
		assert_int_equal(sqlite3_bind_blob(st, 1, blob, size, SQLITE_STATIC), SQLITE_OK);
		assert_int_equal(sqlite3_step(st), SQLITE_DONE);
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	free(blob);
	rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		(void)sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	return rc;
}

/* ---- tests ---- */

/* A commit of some 30 pages reaches its WAL in one write, where the unix
 * VFS alone takes two per frame; and the reader sees it at once. */
static void test_one_write_per_commit(void **state)
{
	struct fx *f = *state;
	sqlite3 *direct = NULL;
	long before, bytes;

	assert_int_equal(insert_rows(f->db, 1, 10), SQLITE_OK); /* the WAL's header */
	for (int i = 0; i < 5; i++) {
		before = tv_wal_writes;
		bytes = tv_wal_bytes;
		assert_int_equal(insert_rows(f->db, 30, 700), SQLITE_OK);
		assert_int_equal(tv_wal_writes - before, 1);
		/* 30 rows of 700 bytes: at least 20 frames of 1,048 bytes. */
		assert_true(tv_wal_bytes - bytes >= 20 * 1048);
		assert_int_equal(one_int(f->plain, "SELECT count(*) FROM t"), 1 + 30 * (i + 1));
	}
	/* The same commit through the test VFS alone: a write per header and
	 * per page. The test can tell the two apart. */
	assert_int_equal(sqlite3_open_v2(f->path, &direct, SQLITE_OPEN_READWRITE, "sq-vfs-test"),
	                 SQLITE_OK);
	exec_ok(direct, "PRAGMA synchronous = FULL");
	before = tv_wal_writes;
	assert_int_equal(insert_rows(direct, 30, 700), SQLITE_OK);
	assert_true(tv_wal_writes - before >= 40);
	sqlite3_close(direct);
	assert_int_equal(one_int(f->plain, "SELECT count(*) FROM t"), 1 + 30 * 6);
	integrity_ok(f->plain);
	assert_int_equal(sq_vfs_late_barriers(), 0);
}

/* A transaction larger than the buffer (120 KiB): passed on in parts, in
 * order, with the commit frame's write last. */
static void test_larger_than_buffer(void **state)
{
	struct fx *f = *state;
	long before = tv_wal_writes;

	assert_int_equal(insert_rows(f->db, 400, 900), SQLITE_OK); /* some 400 KB of frames */
	assert_true(tv_wal_writes - before >= 3);
	assert_true(tv_wal_writes - before <= 10);
	assert_int_equal(one_int(f->plain, "SELECT count(*) FROM t"), 400);
	assert_int_equal(one_int(f->plain, "SELECT sum(length(v)) FROM t"), 400 * 900);
	integrity_ok(f->plain);
}

/* Rounds of transactions larger than a cache of 16 pages, so that SQLite
 * spills frames before the commit and writes some pages again at earlier
 * offsets (frames rewritten, checksums recomputed after the commit frame);
 * checkpoints restart the log at its start. A model of the table checks
 * every row through the independent reader after each commit. */
static void spill_rounds(struct fx *f, int rounds)
{
	int64_t rows = one_int(f->plain, "SELECT count(*) FROM t");
	int64_t sum = one_int(f->plain, "SELECT coalesce(sum(length(v)), 0) FROM t");

	exec_ok(f->db, "PRAGMA cache_size = 16");
	for (int round = 0; round < rounds; round++) {
		int n = 5 + (round * 37) % 200;
		exec_ok(f->db, "BEGIN IMMEDIATE");
		for (int i = 0; i < n; i++) {
			char sql[128];
			snprintf(sql, sizeof sql, "INSERT INTO t (v) VALUES (randomblob(%d))",
			         100 + (i * 53) % 800);
			exec_ok(f->db, sql);
			sum += 100 + (i * 53) % 800;
		}
		exec_ok(f->db, "UPDATE t SET v = v WHERE id % 7 = 0");
		exec_ok(f->db, "COMMIT");
		rows += n;
		assert_int_equal(one_int(f->plain, "SELECT count(*) FROM t"), rows);
		assert_int_equal(one_int(f->plain, "SELECT sum(length(v)) FROM t"), sum);
		if (round % 9 == 8)
			exec_ok(f->db, round % 2 ? "PRAGMA wal_checkpoint(RESTART)"
			                         : "PRAGMA wal_checkpoint(TRUNCATE)");
	}
	integrity_ok(f->plain);
	integrity_ok(f->db);
}

static void test_spill_rewrite_restart(void **state)
{
	struct fx *f = *state;
	unsigned long late = sq_vfs_late_barriers();

	spill_rounds(f, 40);
	assert_int_equal(sq_vfs_late_barriers(), late);
}

/* With synchronous OFF no sync passes the buffer on: the commit frame's
 * write does, before SQLite publishes the commit. */
static void test_no_sync_still_visible(void **state)
{
	struct fx *f = *state;

	exec_ok(f->db, "PRAGMA synchronous = OFF");
	for (int i = 1; i <= 20; i++) {
		assert_int_equal(insert_rows(f->db, 7, 300), SQLITE_OK);
		assert_int_equal(one_int(f->plain, "SELECT count(*) FROM t"), 7 * i);
	}
	exec_ok(f->db, "PRAGMA synchronous = NORMAL");
	assert_int_equal(insert_rows(f->db, 7, 300), SQLITE_OK);
	assert_int_equal(one_int(f->plain, "SELECT count(*) FROM t"), 7 * 21);
	integrity_ok(f->plain);
	/* The checksums rewritten after a spilled transaction's commit frame
	 * go straight to the file: nothing waits for the barrier. */
	exec_ok(f->db, "PRAGMA synchronous = OFF");
	spill_rounds(f, 20);
	assert_int_equal(sq_vfs_late_barriers(), 0);
}

/* The write that passes a commit's frames on fails (an I/O error, then a
 * full disk): the commit fails, the reader never sees the rows, and the
 * next commit works and is whole. */
static void test_failed_write_commits_nothing(void **state)
{
	struct fx *f = *state;
	int codes[] = {SQLITE_IOERR_WRITE, SQLITE_FULL};

	assert_int_equal(insert_rows(f->db, 3, 100), SQLITE_OK);
	for (size_t k = 0; k < 2; k++) {
		tv_fail_rc = codes[k];
		tv_fail_at = tv_wal_writes + 1;
		int rc = insert_rows(f->db, 25, 500);
		tv_fail_at = 0;
		assert_int_not_equal(rc, SQLITE_OK);
		assert_int_equal(rc & 0xff, codes[k] & 0xff);
		assert_int_equal(one_int(f->plain, "SELECT count(*) FROM t"), 3);
		assert_int_equal(one_int(f->db, "SELECT count(*) FROM t"), 3);
	}
	assert_int_equal(insert_rows(f->db, 4, 100), SQLITE_OK);
	assert_int_equal(one_int(f->plain, "SELECT count(*) FROM t"), 7);
	integrity_ok(f->plain);
	/* A transaction larger than the buffer failing in its middle part. */
	tv_fail_rc = SQLITE_IOERR_WRITE;
	tv_fail_at = tv_wal_writes + 2;
	assert_int_not_equal(insert_rows(f->db, 300, 900), SQLITE_OK);
	tv_fail_at = 0;
	assert_int_equal(one_int(f->plain, "SELECT count(*) FROM t"), 7);
	assert_int_equal(insert_rows(f->db, 1, 100), SQLITE_OK);
	assert_int_equal(one_int(f->plain, "SELECT count(*) FROM t"), 8);
	integrity_ok(f->plain);
	integrity_ok(f->db);
}

/* The commit's sync fails after its frames were written: SQLite reports
 * the commit failed, and nothing of it is visible. */
static void test_failed_sync(void **state)
{
	struct fx *f = *state;

	assert_int_equal(insert_rows(f->db, 2, 100), SQLITE_OK);
	tv_fail_sync = true;
	assert_int_not_equal(insert_rows(f->db, 10, 100), SQLITE_OK);
	assert_false(tv_fail_sync);
	assert_int_equal(one_int(f->plain, "SELECT count(*) FROM t"), 2);
	assert_int_equal(insert_rows(f->db, 1, 100), SQLITE_OK);
	assert_int_equal(one_int(f->plain, "SELECT count(*) FROM t"), 3);
	integrity_ok(f->plain);
}

/* A process killed with frames still buffered (a transaction larger than
 * its cache, not committed) or just after a commit: the file, opened again
 * by the unix VFS alone, holds exactly the commits that returned. */
static void test_kill_with_frames_buffered(void **state)
{
	struct fx *f = *state;

	assert_int_equal(insert_rows(f->db, 5, 100), SQLITE_OK);
	for (int mode = 0; mode < 2; mode++) {
		pid_t pid = fork();
		int status = 0;

		assert_true(pid >= 0);
		if (pid == 0) {
			sqlite3 *c = NULL;
			if (sqlite3_open_v2(f->path, &c, SQLITE_OPEN_READWRITE, SQ_VFS_NAME) !=
			    SQLITE_OK)
				_exit(3);
			sqlite3_exec(c, "PRAGMA synchronous = FULL; PRAGMA cache_size = 8", NULL,
			             NULL, NULL);
			if (mode == 1 && insert_rows(c, 11, 200) != SQLITE_OK)
				_exit(4);
			sqlite3_exec(c, "BEGIN IMMEDIATE", NULL, NULL, NULL);
			for (int i = 0; i < 200; i++)
				sqlite3_exec(c, "INSERT INTO t (v) VALUES (randomblob(600))", NULL,
				             NULL, NULL);
			kill(getpid(), SIGKILL);
			_exit(5);
		}
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFSIGNALED(status));
		assert_int_equal(WTERMSIG(status), SIGKILL);
		sqlite3_close(f->plain);
		assert_int_equal(sqlite3_open_v2(f->path, &f->plain, SQLITE_OPEN_READWRITE, "unix"),
		                 SQLITE_OK);
		assert_int_equal(one_int(f->plain, "SELECT count(*) FROM t"), mode ? 16 : 5);
		integrity_ok(f->plain);
		assert_int_equal(one_int(f->db, "SELECT count(*) FROM t"), mode ? 16 : 5);
	}
	/* The survivor writes on. */
	assert_int_equal(insert_rows(f->db, 1, 100), SQLITE_OK);
	assert_int_equal(one_int(f->plain, "SELECT count(*) FROM t"), 17);
}

/* The WAL's bytes, written through the VFS in runs of every size (some
 * adding up to exactly 128 KiB, the length the unix VFS cannot write in one
 * call), some going back to earlier offsets, are on the file exactly as
 * written once it is synced. The runs go to the WAL of a connection of
 * their own, past the frames SQLite knows of, so that its checkpoint at
 * close never reads them. */
static void test_bytes_as_written(void **state)
{
	struct fx *f = *state;
	enum { SPAN = 1 << 20, BASE = 4 << 20 };
	unsigned char *model = calloc(1, SPAN), *chunk = malloc(SPAN), *back = malloc(SPAN);
	sqlite3_file *file = NULL;
	sqlite3 *c = NULL;
	char name[160];
	int64_t end = 0, off = 0;
	uint32_t seed = 12345;
	FILE *fp;

	assert_non_null(model);
	assert_non_null(chunk);
	assert_non_null(back);
	snprintf(name, sizeof name, "%s/bytes.db", f->dir);
	assert_int_equal(
	    sqlite3_open_v2(name, &c, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, SQ_VFS_NAME),
	    SQLITE_OK);
	exec_ok(c, "PRAGMA journal_mode = WAL");
	exec_ok(c, "CREATE TABLE u (x)");
	assert_int_equal(sqlite3_file_control(c, "main", SQLITE_FCNTL_JOURNAL_POINTER, &file),
	                 SQLITE_OK);
	assert_non_null(file);
	/* 64 runs of 2,048 bytes: 128 KiB exactly, then one more byte. */
	for (int i = 0; i < 65; i++) {
		int n = i < 64 ? 2048 : 1;
		for (int k = 0; k < n; k++)
			chunk[k] = (unsigned char)((seed = seed * 1103515245u + 12345u) >> 3);
		assert_int_equal(file->pMethods->xWrite(file, chunk, n, BASE + off), SQLITE_OK);
		memcpy(model + off, chunk, (size_t)n);
		off += n;
	}
	end = off;
	for (int i = 0; i < 2000; i++) {
		seed = seed * 1103515245u + 12345u;
		int n = 1 + (int)((seed >> 8) % 20000);
		if ((seed & 0xf) == 0)
			off = (int64_t)((seed >> 4) % (uint32_t)(end + 1)); /* back, or a jump */
		if (off + n > SPAN)
			off = 0;
		for (int k = 0; k < n; k++)
			chunk[k] = (unsigned char)((seed = seed * 1103515245u + 12345u) >> 16);
		assert_int_equal(file->pMethods->xWrite(file, chunk, n, BASE + off), SQLITE_OK);
		memcpy(model + off, chunk, (size_t)n);
		off += n;
		if (off > end)
			end = off;
		if ((seed & 0x3f) == 1)
			assert_int_equal(file->pMethods->xSync(file, SQLITE_SYNC_NORMAL),
			                 SQLITE_OK);
	}
	assert_int_equal(file->pMethods->xSync(file, SQLITE_SYNC_NORMAL), SQLITE_OK);
	snprintf(name, sizeof name, "%s/bytes.db-wal", f->dir);
	assert_non_null(fp = fopen(name, "rb"));
	assert_int_equal(fseek(fp, BASE, SEEK_SET), 0);
	assert_int_equal(fread(back, 1, SPAN, fp), (size_t)end);
	fclose(fp);
	assert_memory_equal(back, model, (size_t)end);
	assert_int_equal(sqlite3_close(c), SQLITE_OK);
	free(model);
	free(chunk);
	free(back);
}

/* The VFS names itself in SQLITE_FCNTL_VFSNAME, over the inner one. */
static void test_vfs_name(void **state)
{
	struct fx *f = *state;
	char *name = NULL;

	assert_int_equal(sqlite3_file_control(f->db, "main", SQLITE_FCNTL_VFSNAME, &name),
	                 SQLITE_OK);
	assert_non_null(name);
	assert_non_null(strstr(name, "switchboard-wal"));
	sqlite3_free(name);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_one_write_per_commit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_larger_than_buffer, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_spill_rewrite_restart, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_no_sync_still_visible, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failed_write_commits_nothing, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failed_sync, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_kill_with_frames_buffered, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bytes_as_written, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_vfs_name, setup, teardown),
	};
	return cmocka_run_group_tests(tests, group_setup, NULL);
}
