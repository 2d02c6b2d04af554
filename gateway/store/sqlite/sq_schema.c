/*
 * sq_schema.c - the SQLite backend's file: opening it, the connection's
 * settings (WAL, synchronous=FULL, the checkpoint interval, foreign keys)
 * and the migrations.
 * Loop thread, while the store opens; sq_db_close runs on the writer.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/core/err.h"
#include "gateway/core/log.h"
#include "gateway/store/sqlite/sq.h"

/* The page size of a new database. Every commit writes each page it
 * changed to the WAL whole (and the checkpoint again to the file), and a
 * message's commits change a few rows in many b-trees (the tables, their
 * indexes, sqlite_sequence): with 1 KiB pages instead of SQLite's 4 KiB
 * the store wrote 40 % fewer bytes per message at one sender
 * (bench_pipeline: 136 KB -> 80 KB), for about 10 % more system calls (a
 * pwrite per page) and no measurable CPU (docs/performance.md). */
#define SQ_PAGE_SIZE 1024
#define SQ_PAGE_SIZE_TEXT "1024"

/* The WAL size, in pages, past which a commit checkpoints (SQLite's
 * default is 1,000). A checkpoint writes each page the WAL holds once,
 * however many commits changed it, and a message's commits change the same
 * few pages again and again (the last leaf of each table and index, the
 * pages the transcript rows use and free): checkpointing every 10,000
 * pages instead of every 1,000 writes those once per some 280 messages
 * instead of once per 28 (bench_pipeline at one sender: 87 KB -> 67 KB
 * written per message, docs/performance.md). Nothing is less durable: a
 * commit is on disk when the WAL is; the WAL file keeps its largest size
 * (about 10 MiB) and a start replays it. */
#define SQ_WAL_CHECKPOINT_PAGES_TEXT "10000"

/* Each step moves the schema from version i to i + 1 in one transaction.
 * Append only: a step that has shipped is never edited. */
static const char *const sq_migrations[] = {
    /* 1: inbox, outbox, kv, sessions */
    "CREATE TABLE inbox ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  channel TEXT NOT NULL,"
    "  account TEXT NOT NULL,"
    "  dedupe_key TEXT NOT NULL,"
    "  payload TEXT NOT NULL,"
    "  state TEXT NOT NULL DEFAULT 'pending'"
    "    CHECK (state IN ('pending', 'claimed', 'done')),"
    "  attempts INTEGER NOT NULL DEFAULT 0,"
    "  lease_until INTEGER,"
    "  received_at INTEGER NOT NULL,"
    "  done_at INTEGER,"
    "  UNIQUE (channel, account, dedupe_key)"
    ");"
    "CREATE INDEX inbox_claim ON inbox (state, id);"
    "CREATE TABLE outbox ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  idempotency_key TEXT NOT NULL UNIQUE,"
    "  channel TEXT NOT NULL,"
    "  account TEXT NOT NULL,"
    "  target TEXT NOT NULL,"
    "  payload TEXT NOT NULL,"
    "  state TEXT NOT NULL DEFAULT 'pending'"
    "    CHECK (state IN ('pending', 'claimed', 'sent', 'failed')),"
    "  attempts INTEGER NOT NULL DEFAULT 0,"
    "  due_at INTEGER NOT NULL,"
    "  lease_until INTEGER,"
    "  inbox_id INTEGER REFERENCES inbox (id) ON DELETE SET NULL,"
    "  channel_msg_id TEXT,"
    "  last_error TEXT,"
    "  created_at INTEGER NOT NULL,"
    "  sent_at INTEGER"
    ");"
    "CREATE INDEX outbox_claim ON outbox (state, due_at, id);"
    "CREATE INDEX outbox_inbox ON outbox (inbox_id);"
    "CREATE TABLE kv ("
    "  ns TEXT NOT NULL,"
    "  key TEXT NOT NULL,"
    "  value TEXT NOT NULL,"
    "  updated_at INTEGER NOT NULL,"
    "  PRIMARY KEY (ns, key)"
    ") WITHOUT ROWID;"
    "CREATE TABLE sessions ("
    "  key TEXT PRIMARY KEY NOT NULL,"
    "  agent_id TEXT NOT NULL,"
    "  session_id TEXT NOT NULL,"
    "  meta TEXT,"
    "  updated_at INTEGER NOT NULL"
    ");",
    /* 2: pairing requests and the allow list they feed */
    "CREATE TABLE pairing_requests ("
    "  channel TEXT NOT NULL,"
    "  account TEXT NOT NULL,"
    "  sender_id TEXT NOT NULL,"
    "  code TEXT NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  expires_at INTEGER NOT NULL,"
    "  PRIMARY KEY (channel, account, sender_id)"
    ") WITHOUT ROWID;"
    "CREATE UNIQUE INDEX pairing_code ON pairing_requests (channel, code);"
    "CREATE TABLE allow_entries ("
    "  channel TEXT NOT NULL,"
    "  account TEXT NOT NULL,"
    "  sender_id TEXT NOT NULL,"
    "  approved_at INTEGER NOT NULL,"
    "  PRIMARY KEY (channel, account, sender_id)"
    ") WITHOUT ROWID;",
    /* 3: control-plane devices; sessions listed by recency */
    "CREATE TABLE devices ("
    "  device_id TEXT PRIMARY KEY NOT NULL,"
    "  public_key TEXT NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN ('pending', 'approved')),"
    "  client_id TEXT,"
    "  platform TEXT,"
    "  scopes TEXT NOT NULL DEFAULT '',"
    "  token_hash TEXT,"
    "  remote_addr TEXT,"
    "  created_at INTEGER NOT NULL,"
    "  approved_at INTEGER NOT NULL DEFAULT 0,"
    "  last_seen_at INTEGER NOT NULL"
    ") WITHOUT ROWID;"
    "CREATE INDEX devices_token ON devices (token_hash);"
    "CREATE INDEX sessions_updated ON sessions (updated_at);",
    /* 4: cron jobs and their run history */
    "CREATE TABLE IF NOT EXISTS cron_jobs ("
    "  id TEXT PRIMARY KEY NOT NULL,"
    "  spec TEXT NOT NULL,"
    "  state TEXT NOT NULL,"
    "  source TEXT NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL"
    ") WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS cron_runs ("
    "  id INTEGER PRIMARY KEY,"
    "  job_id TEXT NOT NULL,"
    "  scheduled_at INTEGER NOT NULL,"
    "  started_at INTEGER NOT NULL,"
    "  finished_at INTEGER NOT NULL,"
    "  status TEXT NOT NULL,"
    "  detail TEXT,"
    "  session_key TEXT"
    ");"
    "CREATE INDEX IF NOT EXISTS cron_runs_job ON cron_runs (job_id, id);",
    /* 5: transcript bytes kept until their file is synced */
    "CREATE TABLE IF NOT EXISTS transcript_pending ("
    "  id INTEGER PRIMARY KEY,"
    "  path TEXT NOT NULL,"
    "  file_offset INTEGER NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  bytes BLOB NOT NULL"
    ");",
    /* 6: transcript bytes compressed (sq_transcripts.c); rows before are
     * codec 0, as written */
    "ALTER TABLE transcript_pending ADD COLUMN codec INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE transcript_pending ADD COLUMN raw_len INTEGER NOT NULL DEFAULT 0;",
    /* 7: the claim indexes hold the rows still to do, not the history:
     * each message's commits change one small page of each instead of the
     * last leaves of indexes that grew with every message (sq_messages.c's
     * claims, recoveries and counts name the same condition) */
    "DROP INDEX IF EXISTS inbox_claim;"
    "CREATE INDEX inbox_claim ON inbox (id) WHERE state IN ('pending', 'claimed');"
    "DROP INDEX IF EXISTS outbox_claim;"
    "CREATE INDEX outbox_claim ON outbox (due_at, id) WHERE state IN ('pending', 'claimed');",
    /* 8: sessions kept in the b-tree of their key (WITHOUT ROWID): a
     * session's row is written in one b-tree instead of a table and the
     * index of its key */
    "CREATE TABLE sessions_8 ("
    "  key TEXT PRIMARY KEY NOT NULL,"
    "  agent_id TEXT NOT NULL,"
    "  session_id TEXT NOT NULL,"
    "  meta TEXT,"
    "  updated_at INTEGER NOT NULL"
    ") WITHOUT ROWID;"
    "INSERT INTO sessions_8 (key, agent_id, session_id, meta, updated_at)"
    "  SELECT key, agent_id, session_id, meta, updated_at FROM sessions;"
    "DROP TABLE sessions;"
    "ALTER TABLE sessions_8 RENAME TO sessions;"
    "CREATE INDEX sessions_updated ON sessions (updated_at);",
};

_Static_assert(sizeof sq_migrations / sizeof *sq_migrations == STORE_SQLITE_SCHEMA_VERSION,
               "STORE_SQLITE_SCHEMA_VERSION must equal the number of migration steps");

void sq_db_close(struct sq_store *s)
{
	int src;

	sq_transcripts_close(s);
	if (!s->db)
		return;
	sq_stmts_free(s);
	src = sqlite3_close(s->db);
	if (src != SQLITE_OK)
		log_error("store", "close failed", LOG_S("path", s->path),
		          LOG_S("error", sqlite3_errmsg(s->db)), LOG_I("code", src));
	s->db = NULL;
}

/* Runs SQL text without results (open time, loop thread). */
static int sq_exec_text(struct sq_store *s, const char *sql, const char *what)
{
	char *err = NULL;
	int src = sqlite3_exec(s->db, sql, NULL, NULL, &err);

	if (src != SQLITE_OK) {
		log_error("store", "open step failed", LOG_S("step", what), LOG_S("path", s->path),
		          LOG_S("error", err ? err : sqlite3_errstr(src)), LOG_I("code", src));
		sqlite3_free(err);
		return SB_ERR_STORE;
	}
	return SB_OK;
}

/* Reads a one-row, one-column pragma. text may be NULL when not wanted. */
static int sq_pragma(struct sq_store *s, const char *sql, int64_t *num, char *text,
                     size_t text_size)
{
	sqlite3_stmt *st = NULL;
	int rc = SB_ERR_STORE;
	int src = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);

	if (src != SQLITE_OK)
		goto out;
	src = sqlite3_step(st);
	if (src != SQLITE_ROW)
		goto out;
	if (num)
		*num = sqlite3_column_int64(st, 0);
	if (text) {
		const unsigned char *t = sqlite3_column_text(st, 0);
		int n = snprintf(text, text_size, "%s", t ? (const char *)t : "");

		if (n < 0 || (size_t)n >= text_size)
			goto out;
	}
	rc = SB_OK;
out:
	if (rc != SB_OK)
		log_error("store", "pragma failed", LOG_S("sql", sql), LOG_S("path", s->path),
		          LOG_S("error", sqlite3_errmsg(s->db)), LOG_I("code", src));
	sqlite3_finalize(st);
	return rc;
}

/* Reads the schema version; a database newer than this code is refused. */
static int sq_schema_version(struct sq_store *s, int64_t *version)
{
	int rc = sq_pragma(s, "PRAGMA user_version", version, NULL, 0);

	if (rc == SB_OK && *version > STORE_SQLITE_SCHEMA_VERSION) {
		log_error("store", "database schema is newer than this build",
		          LOG_S("path", s->path), LOG_I("db_version", *version),
		          LOG_I("known_version", STORE_SQLITE_SCHEMA_VERSION));
		rc = SB_ERR_STORE;
	}
	return rc;
}

/* Applies every migration step the database has not seen, one transaction
 * each. */
static int sq_migrate(struct sq_store *s)
{
	const int64_t known = STORE_SQLITE_SCHEMA_VERSION;
	int64_t version = 0;
	char sql[64];
	int n, rc = sq_schema_version(s, &version);

	if (rc != SB_OK)
		goto out;
	while (version < known) {
		if ((rc = sq_exec_text(s, "BEGIN IMMEDIATE", "migrate begin")) != SB_OK)
			goto out;
		/* Read again under the write lock: another process may have
		 * migrated meanwhile. */
		if ((rc = sq_schema_version(s, &version)) != SB_OK)
			goto rollback;
		if (version == known) {
			rc = sq_exec_text(s, "COMMIT", "migrate commit");
			goto out;
		}
		n = snprintf(sql, sizeof sql, "PRAGMA user_version = %lld",
		             (long long)(version + 1));
		rc = SB_ERR_STORE;
		if (n < 0 || (size_t)n >= sizeof sql)
			goto rollback;
		if ((rc = sq_exec_text(s, sq_migrations[version], "migrate")) != SB_OK ||
		    (rc = sq_exec_text(s, sql, "migrate version")) != SB_OK ||
		    (rc = sq_exec_text(s, "COMMIT", "migrate commit")) != SB_OK)
			goto rollback;
		log_info("store", "migrated", LOG_S("path", s->path), LOG_I("from", version),
		         LOG_I("to", version + 1));
		version++;
	}
	rc = SB_OK;
	goto out;
rollback:
	if (!sqlite3_get_autocommit(s->db))
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
out:
	return rc;
}

/* state.db and its -wal and -shm files are the operator's alone (0600),
 * whatever the umask: the file is made (or tightened) before SQLite opens
 * it, and SQLite gives the -wal and -shm files it creates the database
 * file's mode. Ones left by an older version are tightened too. */
static void sq_schema_private(const char *path)
{
	static const char *const suffix[] = {"-wal", "-shm"};
	char side[4096];
	int fd;

	if (!path[0] || path[0] == ':' || strncmp(path, "file:", 5) == 0)
		return;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
	if (fd >= 0) {
		(void)fchmod(fd, 0600);
		close(fd);
	}
	for (size_t i = 0; i < 2; i++)
		if (snprintf(side, sizeof side, "%s%s", path, suffix[i]) < (int)sizeof side)
			(void)chmod(side, 0600);
}

int sq_schema_open(struct sq_store *s, int64_t busy_timeout_ms)
{
	char mode[16];
	const char *vfs;
	int64_t version = 0;
	int src, rc = SB_ERR_STORE;

	sq_schema_private(s->path);
	if (!(vfs = sq_vfs_register(NULL)))
		log_warn("store", "the WAL's write gathering is off (its VFS was not registered)",
		         LOG_S("path", s->path));
	/* NOMUTEX: one thread at a time uses the connection (the loop thread
	 * during open, then the writer until it closes it). */
	src =
	    sqlite3_open_v2(s->path, &s->db,
	                    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, vfs);
	if (src != SQLITE_OK) {
		log_error("store", "open failed", LOG_S("path", s->path),
		          LOG_S("error", s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(src)),
		          LOG_I("code", src));
		goto out;
	}
	sqlite3_extended_result_codes(s->db, 1);
	if (busy_timeout_ms > INT32_MAX)
		busy_timeout_ms = INT32_MAX;
	sqlite3_busy_timeout(s->db, (int)busy_timeout_ms);
	if ((rc = sq_exec_text(s, "PRAGMA foreign_keys = ON", "foreign_keys")) != SB_OK)
		goto out;
	/* Refuse a newer schema before changing anything in the file. */
	if ((rc = sq_schema_version(s, &version)) != SB_OK)
		goto out;
	/* A new file gets SQ_PAGE_SIZE pages (a file that has any is left as
	 * it is: SQLite changes the size of an empty database only). */
	if (version == 0 &&
	    (rc = sq_exec_text(s, "PRAGMA page_size = " SQ_PAGE_SIZE_TEXT, "page_size")) != SB_OK)
		goto out;
	/* WAL before the first migration, so that it is a WAL transaction. */
	if ((rc = sq_pragma(s, "PRAGMA journal_mode = WAL", NULL, mode, sizeof mode)) != SB_OK)
		goto out;
	if (strcmp(mode, "wal") != 0) {
		log_error("store", "WAL mode refused", LOG_S("path", s->path),
		          LOG_S("journal_mode", mode));
		rc = SB_ERR_STORE;
		goto out;
	}
	if ((rc = sq_exec_text(s, "PRAGMA synchronous = FULL", "synchronous")) != SB_OK ||
	    (rc = sq_exec_text(s, "PRAGMA wal_autocheckpoint = " SQ_WAL_CHECKPOINT_PAGES_TEXT,
	                       "wal_autocheckpoint")) != SB_OK)
		goto out;
	rc = sq_migrate(s);
out:
	return rc;
}
