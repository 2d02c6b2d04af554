/*
 * sq_vfs.c - the store's SQLite VFS: the system's own ("unix"), with the
 * write-ahead log's frames gathered into one write per commit.
 *
 * SQLite writes each frame of a transaction to the WAL as two pwrite(2)
 * calls (its 24-byte header, then the page), so a commit of 25 pages of
 * 1 KiB costs 50 system calls before its fdatasync. Those writes are
 * sequential, and nothing reads them before the commit's sync: another
 * connection finds a frame only through the wal-index header, which SQLite
 * publishes after the frames (and, with synchronous=FULL, after their
 * sync), behind a memory barrier on the database file's shared memory.
 * This VFS keeps a WAL's consecutive writes in a buffer and passes them to
 * the file in one write at the first of: the page of a commit frame (a
 * frame whose header gives the database's size), a write that does not
 * follow them (a frame rewritten, the header of a restarted log), a full
 * buffer, and every other call on the file (sync, read, size, truncate,
 * lock, file control, close) or on the shared memory of its database
 * (barrier, lock, unmap). After a commit frame, writes go straight to the
 * file until the next sync or barrier (the checksums SQLite may rewrite
 * then). The bytes and their order on disk are those SQLite asked for;
 * only the number of calls changes.
 *
 * Failures. A transaction's frames are all on the file when the write of
 * its commit frame returns, so a failure is reported to that write (or to
 * the sync or read that passed the buffer on), where SQLite fails the
 * commit; the bytes are dropped, as a failed pwrite leaves them. The
 * shared-memory barrier, which publishes the commit to other connections
 * and cannot report a failure, never finds a buffer (it keeps a check:
 * should it fail to pass one on, the WAL refuses every later call).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/store/sqlite/sq.h"

/* The size of a WAL frame's header (the WAL file format). */
#define SQ_VFS_FRAME_HEADER 24

/* The largest run of frames kept before it is written: at 1 KiB pages,
 * 117 frames (a group commit of four or five messages). It must stay under
 * 128 KiB: the unix VFS writes at most 128 KiB - 1 bytes per pwrite(2) (it
 * masks the length to 17 bits) and reports a write of a multiple of
 * 128 KiB, which that mask makes 0, as a full disk. */
#define SQ_VFS_BUF_MAX (120u * 1024u)

struct sq_vfs_file {
	sqlite3_file base; /* first: SQLite's handle is this */
	/* A database file: its WAL while that is open (SQLite opens it after
	 * the database and closes it before). A WAL: its database, or NULL. */
	struct sq_vfs_file *peer;
	bool wal;
	bool commit_next; /* the next write is a commit frame's page */
	bool through;     /* after a commit frame: no buffering until a sync */
	int err;          /* a WAL's write that failed where it could not be reported */
	char *buf;
	size_t len;
	sqlite3_int64 off;
	/* The inner VFS's file follows, aligned like this struct. */
};

static sqlite3_vfs sq_vfs;
static sqlite3_vfs *sq_vfs_inner_vfs;
static const char sq_vfs_name[] = "switchboard-wal";
static pthread_mutex_t sq_vfs_mu = PTHREAD_MUTEX_INITIALIZER;
static const sqlite3_io_methods sq_vfs_db_methods;
static const sqlite3_io_methods sq_vfs_wal_methods;
/* Barriers that found a WAL's bytes still buffered (none expected). */
static atomic_ulong sq_vfs_late;

static sqlite3_file *sq_vfs_inner(sqlite3_file *f)
{
	return (sqlite3_file *)((struct sq_vfs_file *)f + 1);
}

/* Passes a WAL's buffered bytes to its file. */
static int sq_vfs_flush(struct sq_vfs_file *f)
{
	sqlite3_file *in;
	int rc;

	if (f->err != SQLITE_OK)
		return f->err;
	if (f->len == 0)
		return SQLITE_OK;
	in = sq_vfs_inner(&f->base);
	rc = in->pMethods->xWrite(in, f->buf, (int)f->len, f->off);
	f->len = 0;
	return rc;
}

/* Before a call on a database file's shared memory: its WAL's bytes are
 * on the file first. Returns what the flush returned; a caller that cannot
 * report it keeps it in the WAL (sq_vfs_flush_peer_kept). */
static int sq_vfs_flush_peer(sqlite3_file *db, bool end_commit)
{
	struct sq_vfs_file *w = ((struct sq_vfs_file *)db)->peer;

	if (!w)
		return SQLITE_OK;
	if (end_commit)
		w->through = false;
	return sq_vfs_flush(w);
}

/* The same from a call that returns nothing: a failure makes the WAL
 * refuse every later call (see the top of the file). */
static void sq_vfs_flush_peer_kept(sqlite3_file *db, bool end_commit)
{
	struct sq_vfs_file *w = ((struct sq_vfs_file *)db)->peer;
	int rc = sq_vfs_flush_peer(db, end_commit);

	if (rc != SQLITE_OK)
		w->err = rc;
}

/* ---- calls passed on as they are (the WAL's after its flush) ---- */

#define SQ_VFS_FLUSHED(f)                                                                          \
	do {                                                                                       \
		struct sq_vfs_file *vf_ = (struct sq_vfs_file *)(f);                               \
		if (vf_->wal) {                                                                    \
			int frc_ = sq_vfs_flush(vf_);                                              \
			if (frc_ != SQLITE_OK)                                                     \
				return frc_;                                                       \
		}                                                                                  \
	} while (0)

static int sq_vfs_close(sqlite3_file *f)
{
	struct sq_vfs_file *vf = (struct sq_vfs_file *)f;
	sqlite3_file *in = sq_vfs_inner(f);
	int frc = vf->wal ? sq_vfs_flush(vf) : SQLITE_OK;
	int rc = in->pMethods ? in->pMethods->xClose(in) : SQLITE_OK;

	/* A WAL and its database belong to one connection, used by one
	 * thread at a time: the link needs no lock. */
	if (vf->peer)
		vf->peer->peer = NULL;
	vf->peer = NULL;
	free(vf->buf);
	vf->buf = NULL;
	return frc != SQLITE_OK ? frc : rc;
}

static int sq_vfs_read(sqlite3_file *f, void *p, int n, sqlite3_int64 off)
{
	sqlite3_file *in = sq_vfs_inner(f);

	SQ_VFS_FLUSHED(f);
	return in->pMethods->xRead(in, p, n, off);
}

static int sq_vfs_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off)
{
	sqlite3_file *in = sq_vfs_inner(f);

	return in->pMethods->xWrite(in, p, n, off);
}

static int sq_vfs_wal_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off)
{
	struct sq_vfs_file *vf = (struct sq_vfs_file *)f;
	sqlite3_file *in = sq_vfs_inner(f);
	bool commit = vf->commit_next;
	int rc;

	if (vf->err != SQLITE_OK)
		return vf->err;
	/* A frame's header: 24 bytes, the database's size in pages after the
	 * commit at bytes 4-7 (big-endian), 0 in a frame that is not one. */
	vf->commit_next = false;
	if (n == SQ_VFS_FRAME_HEADER) {
		const unsigned char *h = p;
		vf->commit_next = (h[4] | h[5] | h[6] | h[7]) != 0;
	}
	if (vf->len > 0 && (vf->through || off != vf->off + (sqlite3_int64)vf->len ||
	                    vf->len + (size_t)n > SQ_VFS_BUF_MAX)) {
		if ((rc = sq_vfs_flush(vf)) != SQLITE_OK)
			return rc;
	}
	if (n <= 0 || vf->through || (size_t)n > SQ_VFS_BUF_MAX ||
	    (!vf->buf && !(vf->buf = malloc(SQ_VFS_BUF_MAX)))) {
		/* Straight to the file (without a buffer: as without this VFS). */
		rc = in->pMethods->xWrite(in, p, n, off);
	} else {
		if (vf->len == 0)
			vf->off = off;
		memcpy(vf->buf + vf->len, p, (size_t)n);
		vf->len += (size_t)n;
		rc = commit ? sq_vfs_flush(vf) : SQLITE_OK;
	}
	if (commit)
		vf->through = true;
	return rc;
}

static int sq_vfs_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	sqlite3_file *in = sq_vfs_inner(f);

	SQ_VFS_FLUSHED(f);
	return in->pMethods->xTruncate(in, size);
}

static int sq_vfs_sync(sqlite3_file *f, int flags)
{
	sqlite3_file *in = sq_vfs_inner(f);
	int rc;

	SQ_VFS_FLUSHED(f);
	((struct sq_vfs_file *)f)->through = false;
	if ((rc = sq_vfs_flush_peer(f, false)) != SQLITE_OK)
		return rc;
	return in->pMethods->xSync(in, flags);
}

static int sq_vfs_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
	sqlite3_file *in = sq_vfs_inner(f);

	SQ_VFS_FLUSHED(f);
	return in->pMethods->xFileSize(in, size);
}

static int sq_vfs_lock(sqlite3_file *f, int level)
{
	sqlite3_file *in = sq_vfs_inner(f);

	SQ_VFS_FLUSHED(f);
	return in->pMethods->xLock(in, level);
}

static int sq_vfs_unlock(sqlite3_file *f, int level)
{
	sqlite3_file *in = sq_vfs_inner(f);

	SQ_VFS_FLUSHED(f);
	return in->pMethods->xUnlock(in, level);
}

static int sq_vfs_check_reserved(sqlite3_file *f, int *out)
{
	sqlite3_file *in = sq_vfs_inner(f);

	SQ_VFS_FLUSHED(f);
	return in->pMethods->xCheckReservedLock(in, out);
}

static int sq_vfs_file_control(sqlite3_file *f, int op, void *arg)
{
	sqlite3_file *in = sq_vfs_inner(f);
	int rc;

	SQ_VFS_FLUSHED(f);
	if (op == SQLITE_FCNTL_VFSNAME) {
		/* SQLite's own name for the stack, then the inner's. */
		rc = in->pMethods->xFileControl(in, op, arg);
		if (rc == SQLITE_OK && *(char **)arg) {
			char *both = sqlite3_mprintf("%s/%z", sq_vfs_name, *(char **)arg);
			*(char **)arg = both;
		} else {
			*(char **)arg = sqlite3_mprintf("%s", sq_vfs_name);
			rc = SQLITE_OK;
		}
		return rc;
	}
	return in->pMethods->xFileControl(in, op, arg);
}

static int sq_vfs_sector_size(sqlite3_file *f)
{
	sqlite3_file *in = sq_vfs_inner(f);

	return in->pMethods->xSectorSize(in);
}

static int sq_vfs_device_characteristics(sqlite3_file *f)
{
	sqlite3_file *in = sq_vfs_inner(f);

	return in->pMethods->xDeviceCharacteristics(in);
}

static int sq_vfs_shm_map(sqlite3_file *f, int pg, int pgsz, int extend, void volatile **pp)
{
	sqlite3_file *in = sq_vfs_inner(f);

	if (in->pMethods->iVersion < 2 || !in->pMethods->xShmMap)
		return SQLITE_IOERR_SHMMAP;
	return in->pMethods->xShmMap(in, pg, pgsz, extend, pp);
}

static int sq_vfs_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
	sqlite3_file *in = sq_vfs_inner(f);
	int rc;

	if (in->pMethods->iVersion < 2 || !in->pMethods->xShmLock)
		return SQLITE_IOERR_SHMLOCK;
	if ((rc = sq_vfs_flush_peer(f, false)) != SQLITE_OK)
		return rc;
	return in->pMethods->xShmLock(in, offset, n, flags);
}

static void sq_vfs_shm_barrier(sqlite3_file *f)
{
	sqlite3_file *in = sq_vfs_inner(f);

	/* The WAL-index header is published after this: its frames first. A
	 * failure is kept by the WAL (see the top of the file). */
	struct sq_vfs_file *w = ((struct sq_vfs_file *)f)->peer;

	if (w && w->len > 0)
		atomic_fetch_add_explicit(&sq_vfs_late, 1, memory_order_relaxed);
	sq_vfs_flush_peer_kept(f, true);
	if (in->pMethods->iVersion >= 2 && in->pMethods->xShmBarrier)
		in->pMethods->xShmBarrier(in);
}

static int sq_vfs_shm_unmap(sqlite3_file *f, int del)
{
	sqlite3_file *in = sq_vfs_inner(f);

	sq_vfs_flush_peer_kept(f, false);
	if (in->pMethods->iVersion < 2 || !in->pMethods->xShmUnmap)
		return SQLITE_OK;
	return in->pMethods->xShmUnmap(in, del);
}

static int sq_vfs_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp)
{
	sqlite3_file *in = sq_vfs_inner(f);

	*pp = NULL;
	SQ_VFS_FLUSHED(f);
	if (in->pMethods->iVersion < 3 || !in->pMethods->xFetch)
		return SQLITE_OK;
	return in->pMethods->xFetch(in, off, n, pp);
}

static int sq_vfs_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
	sqlite3_file *in = sq_vfs_inner(f);

	if (in->pMethods->iVersion < 3 || !in->pMethods->xUnfetch)
		return SQLITE_OK;
	return in->pMethods->xUnfetch(in, off, p);
}

/* The two tables differ in their write: a WAL's gathers. */
#define SQ_VFS_METHODS(write)                                                                      \
	{                                                                                          \
		.iVersion = 3, .xClose = sq_vfs_close, .xRead = sq_vfs_read, .xWrite = (write),    \
		.xTruncate = sq_vfs_truncate, .xSync = sq_vfs_sync, .xFileSize = sq_vfs_file_size, \
		.xLock = sq_vfs_lock, .xUnlock = sq_vfs_unlock,                                    \
		.xCheckReservedLock = sq_vfs_check_reserved, .xFileControl = sq_vfs_file_control,  \
		.xSectorSize = sq_vfs_sector_size,                                                 \
		.xDeviceCharacteristics = sq_vfs_device_characteristics,                           \
		.xShmMap = sq_vfs_shm_map, .xShmLock = sq_vfs_shm_lock,                            \
		.xShmBarrier = sq_vfs_shm_barrier, .xShmUnmap = sq_vfs_shm_unmap,                  \
		.xFetch = sq_vfs_fetch, .xUnfetch = sq_vfs_unfetch,                                \
	}

static const sqlite3_io_methods sq_vfs_db_methods = SQ_VFS_METHODS(sq_vfs_write);
static const sqlite3_io_methods sq_vfs_wal_methods = SQ_VFS_METHODS(sq_vfs_wal_write);

static int sq_vfs_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *f, int flags,
                       int *out_flags)
{
	struct sq_vfs_file *vf = (struct sq_vfs_file *)f;
	sqlite3_file *in = sq_vfs_inner(f);
	int rc;

	(void)vfs;
	memset(vf, 0, sizeof *vf);
	rc = sq_vfs_inner_vfs->xOpen(sq_vfs_inner_vfs, name, in, flags, out_flags);
	/* SQLite closes a file whose methods are set even when the open
	 * failed; ours are set exactly when the inner file's are. */
	if (!in->pMethods)
		return rc;
	vf->wal = (flags & SQLITE_OPEN_WAL) != 0;
	vf->base.pMethods = vf->wal ? &sq_vfs_wal_methods : &sq_vfs_db_methods;
	/* SQLite gives a WAL the name it made for it, which leads to the
	 * database file of the same connection. */
	if (vf->wal && name) {
		sqlite3_file *db = sqlite3_database_file_object(name);
		if (db && db->pMethods == &sq_vfs_db_methods) {
			vf->peer = (struct sq_vfs_file *)db;
			vf->peer->peer = vf;
		}
	}
	return rc;
}

/* The VFS's other calls are the inner one's. */
static int sq_vfs_delete(sqlite3_vfs *v, const char *name, int sync_dir)
{
	(void)v;
	return sq_vfs_inner_vfs->xDelete(sq_vfs_inner_vfs, name, sync_dir);
}

static int sq_vfs_access(sqlite3_vfs *v, const char *name, int flags, int *out)
{
	(void)v;
	return sq_vfs_inner_vfs->xAccess(sq_vfs_inner_vfs, name, flags, out);
}

static int sq_vfs_full_pathname(sqlite3_vfs *v, const char *name, int n, char *out)
{
	(void)v;
	return sq_vfs_inner_vfs->xFullPathname(sq_vfs_inner_vfs, name, n, out);
}

static void *sq_vfs_dl_open(sqlite3_vfs *v, const char *name)
{
	(void)v;
	return sq_vfs_inner_vfs->xDlOpen(sq_vfs_inner_vfs, name);
}

static void sq_vfs_dl_error(sqlite3_vfs *v, int n, char *out)
{
	(void)v;
	sq_vfs_inner_vfs->xDlError(sq_vfs_inner_vfs, n, out);
}

static void (*sq_vfs_dl_sym(sqlite3_vfs *v, void *h, const char *sym))(void)
{
	(void)v;
	return sq_vfs_inner_vfs->xDlSym(sq_vfs_inner_vfs, h, sym);
}

static void sq_vfs_dl_close(sqlite3_vfs *v, void *h)
{
	(void)v;
	sq_vfs_inner_vfs->xDlClose(sq_vfs_inner_vfs, h);
}

static int sq_vfs_randomness(sqlite3_vfs *v, int n, char *out)
{
	(void)v;
	return sq_vfs_inner_vfs->xRandomness(sq_vfs_inner_vfs, n, out);
}

static int sq_vfs_sleep(sqlite3_vfs *v, int us)
{
	(void)v;
	return sq_vfs_inner_vfs->xSleep(sq_vfs_inner_vfs, us);
}

static int sq_vfs_current_time(sqlite3_vfs *v, double *out)
{
	(void)v;
	return sq_vfs_inner_vfs->xCurrentTime(sq_vfs_inner_vfs, out);
}

static int sq_vfs_last_error(sqlite3_vfs *v, int n, char *out)
{
	(void)v;
	return sq_vfs_inner_vfs->xGetLastError
	           ? sq_vfs_inner_vfs->xGetLastError(sq_vfs_inner_vfs, n, out)
	           : 0;
}

static int sq_vfs_current_time_int64(sqlite3_vfs *v, sqlite3_int64 *out)
{
	double d;
	int rc;

	(void)v;
	if (sq_vfs_inner_vfs->iVersion >= 2 && sq_vfs_inner_vfs->xCurrentTimeInt64)
		return sq_vfs_inner_vfs->xCurrentTimeInt64(sq_vfs_inner_vfs, out);
	rc = sq_vfs_inner_vfs->xCurrentTime(sq_vfs_inner_vfs, &d);
	*out = (sqlite3_int64)(d * 86400000.0);
	return rc;
}

const char *sq_vfs_register(const char *inner)
{
	const char *name = NULL;
	sqlite3_vfs *in;

	if (pthread_mutex_lock(&sq_vfs_mu) != 0)
		return NULL;
	if (sq_vfs_inner_vfs) {
		/* Registered once per process; a different inner later is refused. */
		name = (!inner || strcmp(inner, sq_vfs_inner_vfs->zName) == 0) ? sq_vfs_name : NULL;
		goto out;
	}
	if (!(in = sqlite3_vfs_find(inner)))
		goto out;
	sq_vfs = (sqlite3_vfs){
	    .iVersion = 2,
	    .szOsFile = (int)sizeof(struct sq_vfs_file) + in->szOsFile,
	    .mxPathname = in->mxPathname,
	    .zName = sq_vfs_name,
	    .xOpen = sq_vfs_open,
	    .xDelete = sq_vfs_delete,
	    .xAccess = sq_vfs_access,
	    .xFullPathname = sq_vfs_full_pathname,
	    .xDlOpen = sq_vfs_dl_open,
	    .xDlError = sq_vfs_dl_error,
	    .xDlSym = sq_vfs_dl_sym,
	    .xDlClose = sq_vfs_dl_close,
	    .xRandomness = sq_vfs_randomness,
	    .xSleep = sq_vfs_sleep,
	    .xCurrentTime = sq_vfs_current_time,
	    .xGetLastError = sq_vfs_last_error,
	    .xCurrentTimeInt64 = sq_vfs_current_time_int64,
	};
	sq_vfs_inner_vfs = in;
	if (sqlite3_vfs_register(&sq_vfs, 0) != SQLITE_OK) {
		sq_vfs_inner_vfs = NULL;
		goto out;
	}
	name = sq_vfs_name;
out:
	pthread_mutex_unlock(&sq_vfs_mu);
	return name;
}

unsigned long sq_vfs_late_barriers(void)
{
	return atomic_load_explicit(&sq_vfs_late, memory_order_relaxed);
}
