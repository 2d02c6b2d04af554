/*
 * store_sqlite.c - the SQLite store backend: one writer thread, group commit.
 *
 * Threads. The loop thread turns each call into an operation (struct sq_op,
 * owning a copy of every string it was given), appends it to s->queue under
 * s->mu and signals s->cv. The writer thread owns the sqlite3 connection from
 * the moment it starts until it closes it: it takes up to batch_max queued
 * operations, runs them in one BEGIN IMMEDIATE ... COMMIT with each operation
 * in its own savepoint, moves them to s->done and wakes the loop with
 * uv_async_send. The async callback (loop thread) runs each operation's
 * callback in order, then frees the operation.
 *
 * Durability. An operation's result reaches its callback only after the
 * COMMIT of its batch returned; if BEGIN or COMMIT fails, or the transaction
 * is lost mid-batch, every operation of the batch reports SB_ERR_STORE.
 *
 * Crash recovery needs nothing at open: an entry claimed by a process that
 * died is claimable again once its lease_until has passed.
 */
#include "gateway/store/store.h"

#include <ctype.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gateway/core/err.h"
#include "gateway/core/log.h"

#define SQ_DEFAULT_BUSY_TIMEOUT_MS 5000
#define SQ_DEFAULT_BATCH_MAX 256
#define SQ_DEFAULT_QUEUE_MAX 10000
/* A lease longer than a year is a caller bug, and keeps now + lease finite. */
#define SQ_LEASE_MAX_MS (366LL * 24 * 3600 * 1000)

/* ---- schema ---- */

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
};

_Static_assert(sizeof sq_migrations / sizeof *sq_migrations == STORE_SQLITE_SCHEMA_VERSION,
               "STORE_SQLITE_SCHEMA_VERSION must equal the number of migration steps");

/* ---- prepared statements, cached on the writer's connection ---- */

enum sq_stmt {
	SQ_ST_BEGIN,
	SQ_ST_COMMIT,
	SQ_ST_ROLLBACK,
	SQ_ST_SAVEPOINT,
	SQ_ST_RELEASE,
	SQ_ST_ROLLBACK_TO,
	SQ_ST_INBOX_INSERT,
	SQ_ST_INBOX_FIND,
	SQ_ST_INBOX_CLAIM,
	SQ_ST_INBOX_DONE,
	SQ_ST_INBOX_RELEASE,
	SQ_ST_RECOVER_INBOX,
	SQ_ST_RECOVER_OUTBOX,
	SQ_ST_OUTBOX_INSERT,
	SQ_ST_OUTBOX_FIND,
	SQ_ST_OUTBOX_CLAIM,
	SQ_ST_OUTBOX_DONE,
	SQ_ST_OUTBOX_RETRY,
	SQ_ST_OUTBOX_FAIL,
	SQ_ST_KV_GET,
	SQ_ST_KV_PUT,
	SQ_ST_KV_DELETE,
	SQ_ST_SESSION_GET,
	SQ_ST_SESSION_PUT,
	SQ_ST_STATS_INBOX,
	SQ_ST_STATS_OUTBOX,
	SQ_ST_PAIR_EXPIRE,
	SQ_ST_PAIR_FIND_SENDER,
	SQ_ST_PAIR_COUNT,
	SQ_ST_PAIR_INSERT,
	SQ_ST_PAIR_LIST,
	SQ_ST_PAIR_CANDIDATES,
	SQ_ST_PAIR_DELETE,
	SQ_ST_ALLOW_FIND,
	SQ_ST_ALLOW_INSERT,
	SQ_ST_ALLOW_LIST,
	SQ_ST_ALLOW_DELETE,
	SQ_ST_SESSION_LIST,
	SQ_ST_DEV_EXPIRE,
	SQ_ST_DEV_FIND,
	SQ_ST_DEV_FIND_TOKEN,
	SQ_ST_DEV_COUNT_PENDING,
	SQ_ST_DEV_DROP_OLDEST,
	SQ_ST_DEV_INSERT,
	SQ_ST_DEV_TOUCH,
	SQ_ST_DEV_LIST,
	SQ_ST_DEV_APPROVE,
	SQ_ST_DEV_SET_TOKEN,
	SQ_ST_DEV_DELETE,
	SQ_ST_CRON_PUT,
	SQ_ST_CRON_DELETE,
	SQ_ST_CRON_DELETE_RUNS,
	SQ_ST_CRON_LIST,
	SQ_ST_CRON_RUN_INSERT,
	SQ_ST_CRON_RUN_PRUNE,
	SQ_ST_CRON_RUN_LIST,
	SQ_ST__COUNT
};

#define SQ_DEVICE_COLUMNS                                                                          \
	"device_id, public_key, state, client_id, platform, scopes, token_hash, remote_addr,"      \
	" created_at, approved_at, last_seen_at"

static const char *const sq_sql[SQ_ST__COUNT] = {
    [SQ_ST_BEGIN] = "BEGIN IMMEDIATE",
    [SQ_ST_COMMIT] = "COMMIT",
    [SQ_ST_ROLLBACK] = "ROLLBACK",
    [SQ_ST_SAVEPOINT] = "SAVEPOINT op",
    [SQ_ST_RELEASE] = "RELEASE op",
    [SQ_ST_ROLLBACK_TO] = "ROLLBACK TO op",
    [SQ_ST_INBOX_INSERT] =
        "INSERT INTO inbox (channel, account, dedupe_key, payload, state, attempts,"
        " received_at) VALUES (?1, ?2, ?3, ?4, 'pending', 0, ?5)"
        " ON CONFLICT (channel, account, dedupe_key) DO NOTHING",
    [SQ_ST_INBOX_FIND] =
        "SELECT id FROM inbox WHERE channel = ?1 AND account = ?2 AND dedupe_key = ?3",
    /* ?1 now, ?2 lease_until, ?3 max. RETURNING order is unspecified:
     * the caller sorts. attempts comes back already incremented. */
    [SQ_ST_INBOX_CLAIM] =
        "UPDATE inbox SET state = 'claimed', lease_until = ?2, attempts = attempts + 1"
        " WHERE id IN (SELECT id FROM inbox WHERE state = 'pending'"
        "  OR (state = 'claimed' AND lease_until < ?1) ORDER BY id LIMIT ?3)"
        " RETURNING id, channel, account, dedupe_key, payload, attempts, received_at",
    [SQ_ST_INBOX_DONE] = "UPDATE inbox SET state = 'done', done_at = ?2, lease_until = NULL"
                         " WHERE id = ?1",
    [SQ_ST_INBOX_RELEASE] = "UPDATE inbox SET state = 'pending', lease_until = NULL"
                            " WHERE id = ?1 AND state = 'claimed'",
    [SQ_ST_RECOVER_INBOX] = "UPDATE inbox SET state = 'pending', lease_until = NULL"
                            " WHERE state = 'claimed'",
    [SQ_ST_RECOVER_OUTBOX] = "UPDATE outbox SET state = 'pending', lease_until = NULL,"
                             " due_at = MIN(due_at, ?1) WHERE state = 'claimed'",
    [SQ_ST_OUTBOX_INSERT] =
        "INSERT INTO outbox (idempotency_key, channel, account, target, payload, state,"
        " attempts, due_at, inbox_id, created_at)"
        " VALUES (?1, ?2, ?3, ?4, ?5, 'pending', 0, ?6, ?7, ?8)"
        " ON CONFLICT (idempotency_key) DO NOTHING",
    [SQ_ST_OUTBOX_FIND] = "SELECT id FROM outbox WHERE idempotency_key = ?1",
    [SQ_ST_OUTBOX_CLAIM] =
        "UPDATE outbox SET state = 'claimed', lease_until = ?2, attempts = attempts + 1"
        " WHERE id IN (SELECT id FROM outbox WHERE (state = 'pending' AND due_at <= ?1)"
        "  OR (state = 'claimed' AND lease_until < ?1) ORDER BY due_at, id LIMIT ?3)"
        " RETURNING id, idempotency_key, channel, account, target, payload, attempts,"
        " due_at, inbox_id",
    [SQ_ST_OUTBOX_DONE] = "UPDATE outbox SET state = 'sent', channel_msg_id = ?2, sent_at = ?3,"
                          " lease_until = NULL WHERE id = ?1",
    /* A late failure report never turns a sent entry back. */
    [SQ_ST_OUTBOX_RETRY] = "UPDATE outbox SET state = 'pending', due_at = ?2, last_error = ?3,"
                           " lease_until = NULL WHERE id = ?1 AND state <> 'sent'",
    [SQ_ST_OUTBOX_FAIL] = "UPDATE outbox SET state = 'failed', last_error = ?2,"
                          " lease_until = NULL WHERE id = ?1 AND state <> 'sent'",
    [SQ_ST_KV_GET] = "SELECT value FROM kv WHERE ns = ?1 AND key = ?2",
    [SQ_ST_KV_DELETE] = "DELETE FROM kv WHERE ns = ?1 AND key = ?2",
    [SQ_ST_KV_PUT] = "INSERT INTO kv (ns, key, value, updated_at) VALUES (?1, ?2, ?3, ?4)"
                     " ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value,"
                     " updated_at = excluded.updated_at",
    [SQ_ST_SESSION_GET] = "SELECT agent_id, session_id, meta, updated_at FROM sessions"
                          " WHERE key = ?1",
    [SQ_ST_SESSION_PUT] = "INSERT INTO sessions (key, agent_id, session_id, meta, updated_at)"
                          " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (key) DO UPDATE SET"
                          " agent_id = excluded.agent_id, session_id = excluded.session_id,"
                          " meta = excluded.meta, updated_at = excluded.updated_at",
    [SQ_ST_STATS_INBOX] = "SELECT count(*) FROM inbox WHERE state IN ('pending', 'claimed')",
    [SQ_ST_STATS_OUTBOX] = "SELECT count(*) FROM outbox WHERE state IN ('pending', 'claimed')",
    [SQ_ST_PAIR_EXPIRE] = "DELETE FROM pairing_requests WHERE expires_at <= ?1",
    [SQ_ST_PAIR_FIND_SENDER] = "SELECT code, created_at, expires_at FROM pairing_requests"
                               " WHERE channel = ?1 AND account = ?2 AND sender_id = ?3"
                               " AND expires_at > ?4",
    [SQ_ST_PAIR_COUNT] = "SELECT count(*) FROM pairing_requests"
                         " WHERE channel = ?1 AND account = ?2 AND expires_at > ?3",
    /* A code taken on the channel changes nothing; the caller draws again. */
    [SQ_ST_PAIR_INSERT] =
        "INSERT INTO pairing_requests (channel, account, sender_id, code, created_at,"
        " expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
    [SQ_ST_PAIR_LIST] =
        "SELECT channel, account, sender_id, code, created_at, expires_at"
        " FROM pairing_requests WHERE (?1 IS NULL OR channel = ?1) AND expires_at > ?2"
        " ORDER BY created_at, channel, account, sender_id LIMIT ?3",
    [SQ_ST_PAIR_CANDIDATES] = "SELECT account, sender_id, code, created_at, expires_at"
                              " FROM pairing_requests WHERE channel = ?1 AND expires_at > ?2",
    [SQ_ST_PAIR_DELETE] = "DELETE FROM pairing_requests"
                          " WHERE channel = ?1 AND account = ?2 AND sender_id = ?3",
    [SQ_ST_ALLOW_FIND] = "SELECT 1 FROM allow_entries"
                         " WHERE channel = ?1 AND account = ?2 AND sender_id = ?3",
    [SQ_ST_ALLOW_INSERT] =
        "INSERT INTO allow_entries (channel, account, sender_id, approved_at)"
        " VALUES (?1, ?2, ?3, ?4) ON CONFLICT (channel, account, sender_id) DO NOTHING",
    [SQ_ST_ALLOW_LIST] = "SELECT channel, account, sender_id, approved_at FROM allow_entries"
                         " WHERE (?1 IS NULL OR channel = ?1)"
                         " ORDER BY approved_at, channel, account, sender_id LIMIT ?2",
    [SQ_ST_ALLOW_DELETE] = "DELETE FROM allow_entries WHERE channel = ?1"
                           " AND (?2 IS NULL OR account = ?2) AND sender_id = ?3",
    [SQ_ST_SESSION_LIST] = "SELECT key, agent_id, session_id, meta, updated_at FROM sessions"
                           " WHERE (?1 IS NULL OR agent_id = ?1)"
                           " ORDER BY updated_at DESC, key LIMIT ?2",
    [SQ_ST_DEV_EXPIRE] = "DELETE FROM devices WHERE state = 'pending' AND created_at <= ?1",
    [SQ_ST_DEV_FIND] = "SELECT " SQ_DEVICE_COLUMNS " FROM devices WHERE device_id = ?1",
    [SQ_ST_DEV_FIND_TOKEN] = "SELECT " SQ_DEVICE_COLUMNS " FROM devices"
                             " WHERE token_hash = ?1 AND state = 'approved'",
    [SQ_ST_DEV_COUNT_PENDING] = "SELECT count(*) FROM devices WHERE state = 'pending'",
    [SQ_ST_DEV_DROP_OLDEST] = "DELETE FROM devices WHERE device_id = (SELECT device_id FROM"
                              " devices WHERE state = 'pending' ORDER BY created_at, device_id"
                              " LIMIT 1)",
    [SQ_ST_DEV_INSERT] =
        "INSERT INTO devices (device_id, public_key, state, client_id, platform, scopes,"
        " remote_addr, created_at, approved_at, last_seen_at)"
        " VALUES (?1, ?2, 'pending', ?3, ?4, coalesce(?5, ''), ?6, ?7, 0, ?7)",
    [SQ_ST_DEV_TOUCH] = "UPDATE devices SET last_seen_at = ?2,"
                        " remote_addr = coalesce(?3, remote_addr) WHERE device_id = ?1",
    [SQ_ST_DEV_LIST] = "SELECT " SQ_DEVICE_COLUMNS " FROM devices"
                       " ORDER BY state = 'approved', created_at, device_id LIMIT ?1",
    [SQ_ST_DEV_APPROVE] = "UPDATE devices SET state = 'approved', approved_at = ?2"
                          " WHERE device_id = ?1 AND state = 'pending'",
    [SQ_ST_DEV_SET_TOKEN] = "UPDATE devices SET token_hash = ?2, last_seen_at = ?3"
                            " WHERE device_id = ?1 AND state = 'approved'",
    [SQ_ST_DEV_DELETE] = "DELETE FROM devices WHERE device_id = ?1",
    [SQ_ST_CRON_PUT] =
        "INSERT INTO cron_jobs (id, spec, state, source, created_at, updated_at)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (id) DO UPDATE SET spec = excluded.spec,"
        " state = excluded.state, source = excluded.source, updated_at = excluded.updated_at",
    [SQ_ST_CRON_DELETE] = "DELETE FROM cron_jobs WHERE id = ?1",
    [SQ_ST_CRON_DELETE_RUNS] = "DELETE FROM cron_runs WHERE job_id = ?1",
    [SQ_ST_CRON_LIST] = "SELECT id, spec, state, source, created_at, updated_at FROM cron_jobs"
                        " ORDER BY created_at, id LIMIT ?1",
    [SQ_ST_CRON_RUN_INSERT] =
        "INSERT INTO cron_runs (job_id, scheduled_at, started_at, finished_at, status, detail,"
        " session_key) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [SQ_ST_CRON_RUN_PRUNE] = "DELETE FROM cron_runs WHERE job_id = ?1 AND id <= (SELECT id FROM"
                             " cron_runs WHERE job_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
    [SQ_ST_CRON_RUN_LIST] =
        "SELECT id, job_id, scheduled_at, started_at, finished_at, status, detail, session_key"
        " FROM cron_runs WHERE (?1 IS NULL OR job_id = ?1) ORDER BY id DESC LIMIT ?2",
};

/* ---- operations ---- */

enum sq_op_type {
	SQ_OP_INBOX_PUT,
	SQ_OP_INBOX_CLAIM,
	SQ_OP_INBOX_DONE,
	SQ_OP_INBOX_RELEASE,
	SQ_OP_OUTBOX_PUT,
	SQ_OP_OUTBOX_CLAIM,
	SQ_OP_OUTBOX_DONE,
	SQ_OP_OUTBOX_FAILED,
	SQ_OP_KV_GET,
	SQ_OP_KV_PUT,
	SQ_OP_SESSION_GET,
	SQ_OP_SESSION_PUT,
	SQ_OP_STATS,
	SQ_OP_RECOVER,
	SQ_OP_PAIRING_REQUEST,
	SQ_OP_PAIRING_LIST,
	SQ_OP_PAIRING_APPROVE,
	SQ_OP_PAIRING_DENY,
	SQ_OP_ALLOW_CHECK,
	SQ_OP_ALLOW_LIST,
	SQ_OP_ALLOW_REMOVE,
	SQ_OP_SESSION_LIST,
	SQ_OP_DEVICE_REQUEST,
	SQ_OP_DEVICE_GET,
	SQ_OP_DEVICE_LIST,
	SQ_OP_DEVICE_APPROVE,
	SQ_OP_DEVICE_SET_TOKEN,
	SQ_OP_DEVICE_REVOKE,
	SQ_OP_CRON_PUT,
	SQ_OP_CRON_DELETE,
	SQ_OP_CRON_LIST,
	SQ_OP_CRON_RUN_ADD,
	SQ_OP_CRON_RUN_LIST,
};

struct sq_op {
	struct sq_op *next;
	enum sq_op_type type;
	int rc; /* set by the writer */
	void *ud;
	union {
		store_put_cb put;
		store_done_cb done;
		store_inbox_cb inbox;
		store_outbox_cb outbox;
		store_kv_cb kv;
		store_session_cb session;
		store_stats_cb stats;
		store_recover_cb recover;
		store_pairing_cb pairing;
		store_pairing_list_cb pairing_list;
		store_allow_cb allow;
		store_allow_list_cb allow_list;
		store_session_list_cb session_list;
		store_device_cb device;
		store_device_list_cb device_list;
		store_cron_jobs_cb cron_jobs;
		store_cron_runs_cb cron_runs;
	} cb;

	/* Inputs; every string is a copy owned through mem. */
	int64_t id;       /* inbox/outbox entry */
	size_t max;       /* claims */
	int64_t lease_ms; /* claims */
	int64_t retry_at; /* outbox_failed */
	const char *text; /* outbox_done: channel_msg_id; outbox_failed: error */
	const char *ns, *key, *value;
	struct store_inbox_new in;
	struct store_outbox_new out;
	struct store_outbox_new *replies;
	size_t nreplies;
	struct store_session sess; /* session_put input, session_get result */
	/* pairing and allow list: inputs, and the request as result */
	struct store_pairing pairing;
	/* devices: inputs, and the device as result */
	struct store_device dev;
	/* cron: inputs */
	struct store_cron_job cj;
	struct store_cron_run cr;

	/* Results, filled by the writer. */
	int64_t res_id;
	bool duplicate;
	struct store_inbox_item *inbox_items;
	struct store_outbox_item *outbox_items;
	size_t nitems;
	const char *res_value;
	struct store_stats stats;
	bool created; /* pairing_request */
	bool allowed; /* allow_check */
	struct store_pairing *pairings;
	struct store_allow_entry *allows;
	struct store_session *sessions;
	struct store_device *devices;
	struct store_cron_job *cron_jobs;
	struct store_cron_run *cron_runs;

	/* On the last operation of a batch: the commit, for on_commit. */
	bool commit_end;
	int commit_rc;
	size_t commit_ops;
	double commit_seconds;

	/* Every allocation the operation owns, released by sq_op_free. */
	void **mem;
	size_t nmem, capmem;
};

/* The async handle lives in its own allocation: uv_close completes on a later
 * loop iteration, after the store itself is gone. */
struct sq_async {
	uv_async_t handle; /* first: the close callback frees through it */
};

struct sq_store {
	struct store base; /* first: struct store * converts to struct sq_store * */
	uv_loop_t *loop;
	char *path;
	size_t batch_max;
	size_t queue_max;
	store_commit_cb on_commit;
	void *on_commit_ud;

	/* Writer thread only (after open). */
	sqlite3 *db;
	sqlite3_stmt *stmts[SQ_ST__COUNT];

	/* Loop thread only. */
	size_t outstanding; /* accepted, callback not yet run */
	struct sq_async *async;

	pthread_t writer;
	bool writer_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* Guarded by mu. */
	bool closing;
	struct sq_op *queue_head, *queue_tail;
	size_t queued; /* operations waiting for the writer */
	struct sq_op *done_head, *done_tail;
};

static int64_t sq_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double sq_mono_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sq_op_free(struct sq_op *op)
{
	if (!op)
		return;
	for (size_t i = 0; i < op->nmem; i++)
		free(op->mem[i]);
	free(op->mem);
	free(op);
}

/* Records p as owned by op. On failure p is freed. NULL p is SB_ERR_NOMEM
 * so that an allocation can be passed straight in. */
static int sq_op_keep(struct sq_op *op, void *p)
{
	int rc = SB_ERR_NOMEM;

	if (!p)
		goto out;
	if (op->nmem == op->capmem) {
		size_t cap = op->capmem ? op->capmem * 2 : 8;
		void **mem = realloc(op->mem, cap * sizeof *mem);

		if (!mem) {
			free(p);
			goto out;
		}
		op->mem = mem;
		op->capmem = cap;
	}
	op->mem[op->nmem++] = p;
	rc = SB_OK;
out:
	return rc;
}

/* Copies s (NULL stays NULL) into op's memory. */
static int sq_op_strdup(struct sq_op *op, const char *s, const char **out)
{
	int rc;
	char *p;

	*out = NULL;
	if (!s)
		return SB_OK;
	p = strdup(s);
	rc = sq_op_keep(op, p);
	if (rc == SB_OK)
		*out = p;
	return rc;
}

static int sq_op_calloc(struct sq_op *op, size_t n, size_t size, void **out)
{
	void *p = calloc(n ? n : 1, size);
	int rc = sq_op_keep(op, p);

	*out = rc == SB_OK ? p : NULL;
	return rc;
}

/* Copies a text column (NULL stays NULL) into op's memory. */
static int sq_op_column(struct sq_op *op, sqlite3_stmt *st, int col, const char **out)
{
	const unsigned char *t;
	size_t n;
	char *p;
	int rc;

	*out = NULL;
	if (sqlite3_column_type(st, col) == SQLITE_NULL)
		return SB_OK;
	t = sqlite3_column_text(st, col);
	if (!t)
		return SB_ERR_NOMEM; /* a non-NULL value failed to convert */
	n = (size_t)sqlite3_column_bytes(st, col);
	p = malloc(n + 1);
	if (p) {
		memcpy(p, t, n);
		p[n] = '\0';
	}
	rc = sq_op_keep(op, p);
	if (rc == SB_OK)
		*out = p;
	return rc;
}

/* ---- writer thread: statements ---- */

/* Maps an SQLite result to the error enum, logging real failures. */
static int sq_rc(struct sq_store *s, int src, const char *what)
{
	switch (src & 0xff) {
	case SQLITE_OK:
	case SQLITE_ROW:
	case SQLITE_DONE:
		return SB_OK;
	case SQLITE_CONSTRAINT:
		log_warn("store", "constraint violated", LOG_S("op", what),
		         LOG_S("error", sqlite3_errmsg(s->db)));
		return SB_ERR_INVAL;
	case SQLITE_NOMEM:
		return SB_ERR_NOMEM;
	default:
		log_error("store", "sqlite failed", LOG_S("op", what),
		          LOG_S("error", sqlite3_errmsg(s->db)), LOG_I("code", src));
		return SB_ERR_STORE;
	}
}

static int sq_stmt(struct sq_store *s, enum sq_stmt id, sqlite3_stmt **out)
{
	int src;

	if (!s->stmts[id]) {
		src = sqlite3_prepare_v3(s->db, sq_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
		                         &s->stmts[id], NULL);
		if (src != SQLITE_OK) {
			s->stmts[id] = NULL;
			*out = NULL;
			return sq_rc(s, src, "prepare");
		}
	}
	*out = s->stmts[id];
	return SB_OK;
}

/* Runs a statement without parameters or rows (transaction control). */
static int sq_exec(struct sq_store *s, enum sq_stmt id)
{
	sqlite3_stmt *st;
	int rc = sq_stmt(s, id, &st);

	if (rc != SB_OK)
		return rc;
	rc = sq_rc(s, sqlite3_step(st), sq_sql[id]);
	sqlite3_reset(st);
	return rc;
}

static void sq_finish(sqlite3_stmt *st)
{
	if (st) {
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
	}
}

/* Binds text that lives in the operation for the duration of the step. */
static int sq_bind_text(sqlite3_stmt *st, int i, const char *v)
{
	return v ? sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

/* Binds an id, 0 meaning NULL. */
static int sq_bind_id(sqlite3_stmt *st, int i, int64_t v)
{
	return v > 0 ? sqlite3_bind_int64(st, i, v) : sqlite3_bind_null(st, i);
}

/* Steps a statement that returns no row and reports sqlite3_changes. */
static int sq_step_update(struct sq_store *s, sqlite3_stmt *st, const char *what, int *changes)
{
	int src = sqlite3_step(st);

	if (src != SQLITE_DONE)
		return sq_rc(s, src == SQLITE_ROW ? SQLITE_MISUSE : src, what);
	if (changes)
		*changes = sqlite3_changes(s->db);
	return SB_OK;
}

/* ---- writer thread: operations ---- */

static int sq_run_inbox_put(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	int changes = 0, src;
	int rc = sq_stmt(s, SQ_ST_INBOX_INSERT, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->in.channel);
	sq_bind_text(st, 2, op->in.account);
	sq_bind_text(st, 3, op->in.dedupe_key);
	sq_bind_text(st, 4, op->in.payload);
	sqlite3_bind_int64(st, 5, sq_now_ms());
	rc = sq_step_update(s, st, "inbox_put", &changes);
	if (rc != SB_OK)
		goto out;
	if (changes == 1) {
		op->res_id = sqlite3_last_insert_rowid(s->db);
		op->duplicate = false;
		goto out;
	}
	sq_finish(st);
	rc = sq_stmt(s, SQ_ST_INBOX_FIND, &st);
	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->in.channel);
	sq_bind_text(st, 2, op->in.account);
	sq_bind_text(st, 3, op->in.dedupe_key);
	src = sqlite3_step(st);
	if (src != SQLITE_ROW) {
		rc = src == SQLITE_DONE ? SB_ERR_STORE : sq_rc(s, src, "inbox_put");
		goto out;
	}
	op->res_id = sqlite3_column_int64(st, 0);
	op->duplicate = true;
out:
	sq_finish(st);
	return rc;
}

static int sq_cmp_inbox(const void *a, const void *b)
{
	const struct store_inbox_item *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

static int sq_cmp_outbox(const void *a, const void *b)
{
	const struct store_outbox_item *x = a, *y = b;

	if (x->due_at != y->due_at)
		return (x->due_at > y->due_at) - (x->due_at < y->due_at);
	return (x->id > y->id) - (x->id < y->id);
}

static int sq_run_inbox_claim(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	int64_t now = sq_now_ms();
	void *items = NULL;
	int src;
	int rc = sq_op_calloc(op, op->max, sizeof *op->inbox_items, &items);

	if (rc != SB_OK)
		goto out;
	op->inbox_items = items;
	rc = sq_stmt(s, SQ_ST_INBOX_CLAIM, &st);
	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, now);
	sqlite3_bind_int64(st, 2, now + op->lease_ms);
	sqlite3_bind_int64(st, 3, (int64_t)op->max);
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_inbox_item *it;

		if (op->nitems == op->max) {
			rc = SB_ERR_STORE; /* LIMIT broken: never acknowledge more */
			goto out;
		}
		it = &op->inbox_items[op->nitems++];
		it->id = sqlite3_column_int64(st, 0);
		if ((rc = sq_op_column(op, st, 1, &it->channel)) != SB_OK ||
		    (rc = sq_op_column(op, st, 2, &it->account)) != SB_OK ||
		    (rc = sq_op_column(op, st, 3, &it->dedupe_key)) != SB_OK ||
		    (rc = sq_op_column(op, st, 4, &it->payload)) != SB_OK)
			goto out;
		/* The column holds this claim too; callers see earlier ones. */
		it->attempts = sqlite3_column_int(st, 5) - 1;
		it->received_at = sqlite3_column_int64(st, 6);
	}
	rc = sq_rc(s, src, "inbox_claim");
	if (rc != SB_OK)
		goto out;
	qsort(op->inbox_items, op->nitems, sizeof *op->inbox_items, sq_cmp_inbox);
out:
	sq_finish(st);
	return rc;
}

/* Inserts one outbox entry; a known idempotency key reports the existing id.
 * default_inbox_id replaces an inbox_id of 0. */
static int sq_outbox_insert(struct sq_store *s, const struct store_outbox_new *m,
                            int64_t default_inbox_id, int64_t *id, bool *duplicate)
{
	sqlite3_stmt *st = NULL;
	int64_t now = sq_now_ms();
	int changes = 0, src;
	int rc = sq_stmt(s, SQ_ST_OUTBOX_INSERT, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, m->idempotency_key);
	sq_bind_text(st, 2, m->channel);
	sq_bind_text(st, 3, m->account);
	sq_bind_text(st, 4, m->target);
	sq_bind_text(st, 5, m->payload);
	sqlite3_bind_int64(st, 6, m->due_at > 0 ? m->due_at : now);
	sq_bind_id(st, 7, m->inbox_id > 0 ? m->inbox_id : default_inbox_id);
	sqlite3_bind_int64(st, 8, now);
	rc = sq_step_update(s, st, "outbox_put", &changes);
	if (rc != SB_OK)
		goto out;
	if (changes == 1) {
		*id = sqlite3_last_insert_rowid(s->db);
		*duplicate = false;
		goto out;
	}
	sq_finish(st);
	rc = sq_stmt(s, SQ_ST_OUTBOX_FIND, &st);
	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, m->idempotency_key);
	src = sqlite3_step(st);
	if (src != SQLITE_ROW) {
		rc = src == SQLITE_DONE ? SB_ERR_STORE : sq_rc(s, src, "outbox_put");
		goto out;
	}
	*id = sqlite3_column_int64(st, 0);
	*duplicate = true;
out:
	sq_finish(st);
	return rc;
}

static int sq_run_inbox_done(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	int changes = 0;
	int rc = sq_stmt(s, SQ_ST_INBOX_DONE, &st);

	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, op->id);
	sqlite3_bind_int64(st, 2, sq_now_ms());
	rc = sq_step_update(s, st, "inbox_done", &changes);
	if (rc != SB_OK)
		goto out;
	if (changes == 0) {
		rc = SB_ERR_NOTFOUND;
		goto out;
	}
	sq_finish(st);
	st = NULL;
	for (size_t i = 0; i < op->nreplies; i++) {
		int64_t id;
		bool dup;

		rc = sq_outbox_insert(s, &op->replies[i], op->id, &id, &dup);
		if (rc != SB_OK)
			goto out;
	}
out:
	sq_finish(st);
	return rc;
}

/* Runs an UPDATE on one entry by id; no row touched is SB_ERR_NOTFOUND. */
static int sq_run_update_one(struct sq_store *s, struct sq_op *op, enum sq_stmt id,
                             const char *what)
{
	sqlite3_stmt *st = NULL;
	int changes = 0;
	int rc = sq_stmt(s, id, &st);

	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, op->id);
	switch (id) {
	case SQ_ST_OUTBOX_DONE:
		sq_bind_text(st, 2, op->text);
		sqlite3_bind_int64(st, 3, sq_now_ms());
		break;
	case SQ_ST_OUTBOX_RETRY:
		sqlite3_bind_int64(st, 2, op->retry_at);
		sq_bind_text(st, 3, op->text);
		break;
	case SQ_ST_OUTBOX_FAIL:
		sq_bind_text(st, 2, op->text);
		break;
	default:
		break;
	}
	rc = sq_step_update(s, st, what, &changes);
	if (rc == SB_OK && changes == 0)
		rc = SB_ERR_NOTFOUND;
out:
	sq_finish(st);
	return rc;
}

static int sq_run_outbox_claim(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	int64_t now = sq_now_ms();
	void *items = NULL;
	int src;
	int rc = sq_op_calloc(op, op->max, sizeof *op->outbox_items, &items);

	if (rc != SB_OK)
		goto out;
	op->outbox_items = items;
	rc = sq_stmt(s, SQ_ST_OUTBOX_CLAIM, &st);
	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, now);
	sqlite3_bind_int64(st, 2, now + op->lease_ms);
	sqlite3_bind_int64(st, 3, (int64_t)op->max);
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_outbox_item *it;

		if (op->nitems == op->max) {
			rc = SB_ERR_STORE;
			goto out;
		}
		it = &op->outbox_items[op->nitems++];
		it->id = sqlite3_column_int64(st, 0);
		if ((rc = sq_op_column(op, st, 1, &it->idempotency_key)) != SB_OK ||
		    (rc = sq_op_column(op, st, 2, &it->channel)) != SB_OK ||
		    (rc = sq_op_column(op, st, 3, &it->account)) != SB_OK ||
		    (rc = sq_op_column(op, st, 4, &it->target)) != SB_OK ||
		    (rc = sq_op_column(op, st, 5, &it->payload)) != SB_OK)
			goto out;
		it->attempts = sqlite3_column_int(st, 6) - 1;
		it->due_at = sqlite3_column_int64(st, 7);
		it->inbox_id = sqlite3_column_int64(st, 8); /* NULL reads as 0 */
	}
	rc = sq_rc(s, src, "outbox_claim_due");
	if (rc != SB_OK)
		goto out;
	qsort(op->outbox_items, op->nitems, sizeof *op->outbox_items, sq_cmp_outbox);
out:
	sq_finish(st);
	return rc;
}

static int sq_run_kv_get(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	int src;
	int rc = sq_stmt(s, SQ_ST_KV_GET, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->ns);
	sq_bind_text(st, 2, op->key);
	src = sqlite3_step(st);
	if (src == SQLITE_DONE) {
		rc = SB_ERR_NOTFOUND;
		goto out;
	}
	if (src != SQLITE_ROW) {
		rc = sq_rc(s, src, "kv_get");
		goto out;
	}
	rc = sq_op_column(op, st, 0, &op->res_value);
out:
	sq_finish(st);
	return rc;
}

static int sq_run_kv_put(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, op->value ? SQ_ST_KV_PUT : SQ_ST_KV_DELETE, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->ns);
	sq_bind_text(st, 2, op->key);
	if (op->value) {
		sq_bind_text(st, 3, op->value);
		sqlite3_bind_int64(st, 4, sq_now_ms());
	}
	rc = sq_step_update(s, st, "kv_put", NULL);
out:
	sq_finish(st);
	return rc;
}

static int sq_run_session_get(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	int src;
	int rc = sq_stmt(s, SQ_ST_SESSION_GET, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->sess.key);
	src = sqlite3_step(st);
	if (src == SQLITE_DONE) {
		rc = SB_ERR_NOTFOUND;
		goto out;
	}
	if (src != SQLITE_ROW) {
		rc = sq_rc(s, src, "session_get");
		goto out;
	}
	if ((rc = sq_op_column(op, st, 0, &op->sess.agent_id)) != SB_OK ||
	    (rc = sq_op_column(op, st, 1, &op->sess.session_id)) != SB_OK ||
	    (rc = sq_op_column(op, st, 2, &op->sess.meta)) != SB_OK)
		goto out;
	op->sess.updated_at = sqlite3_column_int64(st, 3);
out:
	sq_finish(st);
	return rc;
}

static int sq_run_session_put(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, SQ_ST_SESSION_PUT, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->sess.key);
	sq_bind_text(st, 2, op->sess.agent_id);
	sq_bind_text(st, 3, op->sess.session_id);
	sq_bind_text(st, 4, op->sess.meta);
	sqlite3_bind_int64(st, 5, op->sess.updated_at > 0 ? op->sess.updated_at : sq_now_ms());
	rc = sq_step_update(s, st, "session_put", NULL);
out:
	sq_finish(st);
	return rc;
}

static int sq_count(struct sq_store *s, enum sq_stmt id, int64_t *out)
{
	sqlite3_stmt *st = NULL;
	int src;
	int rc = sq_stmt(s, id, &st);

	if (rc != SB_OK)
		goto out;
	src = sqlite3_step(st);
	if (src != SQLITE_ROW) {
		rc = sq_rc(s, src == SQLITE_DONE ? SQLITE_MISUSE : src, "stats");
		goto out;
	}
	*out = sqlite3_column_int64(st, 0);
out:
	sq_finish(st);
	return rc;
}

/* Releases every claim: only one gateway uses the store (gateway.lock), so
 * whatever is claimed at start-up was claimed by a process that died. */
static int sq_run_recover(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	int rc, src;

	if ((rc = sq_stmt(s, SQ_ST_RECOVER_INBOX, &st)) != SB_OK)
		return rc;
	src = sqlite3_step(st);
	rc = sq_rc(s, src, "recover inbox");
	op->stats.inbox_pending = sqlite3_changes(s->db);
	sq_finish(st);
	if (rc != SB_OK)
		return rc;
	if ((rc = sq_stmt(s, SQ_ST_RECOVER_OUTBOX, &st)) != SB_OK)
		return rc;
	sqlite3_bind_int64(st, 1, sq_now_ms());
	src = sqlite3_step(st);
	rc = sq_rc(s, src, "recover outbox");
	op->stats.outbox_pending = sqlite3_changes(s->db);
	sq_finish(st);
	return rc;
}

static int sq_run_stats(struct sq_store *s, struct sq_op *op)
{
	int rc;

	if ((rc = sq_count(s, SQ_ST_STATS_INBOX, &op->stats.inbox_pending)) != SB_OK ||
	    (rc = sq_count(s, SQ_ST_STATS_OUTBOX, &op->stats.outbox_pending)) != SB_OK)
		return rc;
	pthread_mutex_lock(&s->mu);
	op->stats.queue_depth = (int64_t)s->queued;
	pthread_mutex_unlock(&s->mu);
	return SB_OK;
}

/* ---- writer thread: pairing ---- */

/* A fresh code from STORE_PAIRING_ALPHABET (libsodium's uniform draw). */
static void sq_pairing_code(char out[STORE_PAIRING_CODE_LEN + 1])
{
	static const char alphabet[] = STORE_PAIRING_ALPHABET;

	for (size_t i = 0; i < STORE_PAIRING_CODE_LEN; i++)
		out[i] = alphabet[randombytes_uniform((uint32_t)(sizeof alphabet - 1))];
	out[STORE_PAIRING_CODE_LEN] = '\0';
}

static int sq_bind_triple(sqlite3_stmt *st, const struct store_pairing *p)
{
	sq_bind_text(st, 1, p->channel);
	sq_bind_text(st, 2, p->account);
	sq_bind_text(st, 3, p->sender_id);
	return SB_OK;
}

/* Whether (channel, account, sender) is on the allow list. */
static int sq_allow_find(struct sq_store *s, const struct store_pairing *p, bool *found)
{
	sqlite3_stmt *st = NULL;
	int src;
	int rc = sq_stmt(s, SQ_ST_ALLOW_FIND, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_triple(st, p);
	src = sqlite3_step(st);
	*found = src == SQLITE_ROW;
	rc = src == SQLITE_ROW ? SB_OK : sq_rc(s, src, "allow_find");
out:
	sq_finish(st);
	return rc;
}

static int sq_run_pairing_request(struct sq_store *s, struct sq_op *op)
{
	struct store_pairing *p = &op->pairing;
	sqlite3_stmt *st = NULL;
	int64_t now = sq_now_ms(), pending;
	bool allowed = false;
	int src, changes = 0;
	int rc = sq_stmt(s, SQ_ST_PAIR_EXPIRE, &st);

	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, now);
	if ((rc = sq_step_update(s, st, "pairing_expire", NULL)) != SB_OK)
		goto out;
	sq_finish(st);
	if ((rc = sq_allow_find(s, p, &allowed)) != SB_OK)
		goto out;
	if (allowed) {
		rc = SB_ERR_EXISTS;
		goto out;
	}
	/* The sender's pending code, if any: asking again changes nothing. */
	if ((rc = sq_stmt(s, SQ_ST_PAIR_FIND_SENDER, &st)) != SB_OK)
		goto out;
	sq_bind_triple(st, p);
	sqlite3_bind_int64(st, 4, now);
	src = sqlite3_step(st);
	if (src == SQLITE_ROW) {
		rc = sq_op_column(op, st, 0, &p->code);
		p->created_at = sqlite3_column_int64(st, 1);
		p->expires_at = sqlite3_column_int64(st, 2);
		op->created = false;
		goto out;
	}
	if ((rc = sq_rc(s, src, "pairing_find")) != SB_OK)
		goto out;
	sq_finish(st);
	if ((rc = sq_stmt(s, SQ_ST_PAIR_COUNT, &st)) != SB_OK)
		goto out;
	sq_bind_text(st, 1, p->channel);
	sq_bind_text(st, 2, p->account);
	sqlite3_bind_int64(st, 3, now);
	src = sqlite3_step(st);
	if (src != SQLITE_ROW) {
		rc = sq_rc(s, src == SQLITE_DONE ? SQLITE_MISUSE : src, "pairing_count");
		goto out;
	}
	pending = sqlite3_column_int64(st, 0);
	sq_finish(st);
	if (pending >= STORE_PAIRING_MAX_PENDING) {
		rc = SB_ERR_AGAIN;
		goto out;
	}
	if ((rc = sq_stmt(s, SQ_ST_PAIR_INSERT, &st)) != SB_OK)
		goto out;
	/* 32^8 codes: a clash with another pending code is rare; draw again. */
	for (int attempt = 0; attempt < 8 && changes == 0; attempt++) {
		char code[STORE_PAIRING_CODE_LEN + 1];

		sq_pairing_code(code);
		sq_finish(st);
		sq_bind_triple(st, p);
		sqlite3_bind_text(st, 4, code, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 5, now);
		sqlite3_bind_int64(st, 6, now + STORE_PAIRING_TTL_MS);
		if ((rc = sq_step_update(s, st, "pairing_insert", &changes)) != SB_OK)
			goto out;
		if (changes == 1 && (rc = sq_op_strdup(op, code, &p->code)) != SB_OK)
			goto out;
		sodium_memzero(code, sizeof code);
	}
	if (changes != 1) {
		rc = SB_ERR_STORE;
		goto out;
	}
	p->created_at = now;
	p->expires_at = now + STORE_PAIRING_TTL_MS;
	op->created = true;
out:
	sq_finish(st);
	return rc;
}

/* Finds the unexpired request with op->pairing.code on the channel. Every
 * candidate is compared, in constant time, whatever matched before it. */
static int sq_pairing_find_code(struct sq_store *s, struct sq_op *op)
{
	struct store_pairing *p = &op->pairing;
	sqlite3_stmt *st = NULL;
	bool found = false;
	size_t given = strlen(p->code);
	int src;
	int rc = sq_stmt(s, SQ_ST_PAIR_CANDIDATES, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, p->channel);
	sqlite3_bind_int64(st, 2, sq_now_ms());
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		const unsigned char *code = sqlite3_column_text(st, 2);
		bool same = code && given == STORE_PAIRING_CODE_LEN &&
		            (size_t)sqlite3_column_bytes(st, 2) == STORE_PAIRING_CODE_LEN &&
		            sodium_memcmp(code, p->code, STORE_PAIRING_CODE_LEN) == 0;

		if (!same || found)
			continue;
		found = true;
		if ((rc = sq_op_column(op, st, 0, &p->account)) != SB_OK ||
		    (rc = sq_op_column(op, st, 1, &p->sender_id)) != SB_OK)
			goto out;
		p->created_at = sqlite3_column_int64(st, 3);
		p->expires_at = sqlite3_column_int64(st, 4);
	}
	if ((rc = sq_rc(s, src, "pairing_candidates")) != SB_OK)
		goto out;
	rc = found ? SB_OK : SB_ERR_NOTFOUND;
out:
	sq_finish(st);
	return rc;
}

static int sq_run_pairing_decide(struct sq_store *s, struct sq_op *op, bool approve)
{
	sqlite3_stmt *st = NULL;
	int rc = sq_pairing_find_code(s, op);

	if (rc != SB_OK)
		goto out;
	if (approve) {
		if ((rc = sq_stmt(s, SQ_ST_ALLOW_INSERT, &st)) != SB_OK)
			goto out;
		sq_bind_triple(st, &op->pairing);
		sqlite3_bind_int64(st, 4, sq_now_ms());
		if ((rc = sq_step_update(s, st, "allow_insert", NULL)) != SB_OK)
			goto out;
		sq_finish(st);
	}
	if ((rc = sq_stmt(s, SQ_ST_PAIR_DELETE, &st)) != SB_OK)
		goto out;
	sq_bind_triple(st, &op->pairing);
	rc = sq_step_update(s, st, "pairing_delete", NULL);
out:
	sq_finish(st);
	return rc;
}

static int sq_run_allow_remove(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	int changes = 0;
	int rc = sq_stmt(s, SQ_ST_ALLOW_DELETE, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->pairing.channel);
	sq_bind_text(st, 2, op->pairing.account);
	sq_bind_text(st, 3, op->pairing.sender_id);
	rc = sq_step_update(s, st, "allow_remove", &changes);
	if (rc == SB_OK && changes == 0)
		rc = SB_ERR_NOTFOUND;
out:
	sq_finish(st);
	return rc;
}

static int sq_run_allow_check(struct sq_store *s, struct sq_op *op)
{
	return sq_allow_find(s, &op->pairing, &op->allowed);
}

/* Grows a result array by one element; the array is kept by op once the
 * caller is done (sq_op_keep), so a failure here frees nothing of op's. */
static int sq_grow(void **v, size_t *cap, size_t n, size_t size)
{
	void *nv;
	size_t ncap;

	if (n < *cap)
		return SB_OK;
	ncap = *cap ? *cap * 2 : 16;
	nv = realloc(*v, ncap * size);
	if (!nv)
		return SB_ERR_NOMEM;
	*v = nv;
	*cap = ncap;
	return SB_OK;
}

static int sq_run_pairing_list(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	struct store_pairing *v = NULL;
	size_t cap = 0;
	int src;
	int rc = sq_stmt(s, SQ_ST_PAIR_LIST, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->pairing.channel);
	sqlite3_bind_int64(st, 2, sq_now_ms());
	sqlite3_bind_int64(st, 3, STORE_LIST_MAX);
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_pairing *p;

		if ((rc = sq_grow((void **)&v, &cap, op->nitems, sizeof *v)) != SB_OK)
			goto out;
		p = &v[op->nitems++];
		memset(p, 0, sizeof *p);
		if ((rc = sq_op_column(op, st, 0, &p->channel)) != SB_OK ||
		    (rc = sq_op_column(op, st, 1, &p->account)) != SB_OK ||
		    (rc = sq_op_column(op, st, 2, &p->sender_id)) != SB_OK ||
		    (rc = sq_op_column(op, st, 3, &p->code)) != SB_OK)
			goto out;
		p->created_at = sqlite3_column_int64(st, 4);
		p->expires_at = sqlite3_column_int64(st, 5);
	}
	rc = sq_rc(s, src, "pairing_list");
out:
	sq_finish(st);
	if (v && sq_op_keep(op, v) == SB_OK)
		op->pairings = v;
	else if (v && rc == SB_OK)
		rc = SB_ERR_NOMEM; /* sq_op_keep freed v */
	return rc;
}

static int sq_run_allow_list(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	struct store_allow_entry *v = NULL;
	size_t cap = 0;
	int src;
	int rc = sq_stmt(s, SQ_ST_ALLOW_LIST, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->pairing.channel);
	sqlite3_bind_int64(st, 2, STORE_LIST_MAX);
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_allow_entry *a;

		if ((rc = sq_grow((void **)&v, &cap, op->nitems, sizeof *v)) != SB_OK)
			goto out;
		a = &v[op->nitems++];
		memset(a, 0, sizeof *a);
		if ((rc = sq_op_column(op, st, 0, &a->channel)) != SB_OK ||
		    (rc = sq_op_column(op, st, 1, &a->account)) != SB_OK ||
		    (rc = sq_op_column(op, st, 2, &a->sender_id)) != SB_OK)
			goto out;
		a->approved_at = sqlite3_column_int64(st, 3);
	}
	rc = sq_rc(s, src, "allow_list");
out:
	sq_finish(st);
	if (v && sq_op_keep(op, v) == SB_OK)
		op->allows = v;
	else if (v && rc == SB_OK)
		rc = SB_ERR_NOMEM;
	return rc;
}

static int sq_run_session_list(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	struct store_session *v = NULL;
	size_t cap = 0;
	int src;
	int rc = sq_stmt(s, SQ_ST_SESSION_LIST, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->sess.agent_id);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)op->max);
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_session *e;

		if ((rc = sq_grow((void **)&v, &cap, op->nitems, sizeof *v)) != SB_OK)
			goto out;
		e = &v[op->nitems++];
		memset(e, 0, sizeof *e);
		if ((rc = sq_op_column(op, st, 0, &e->key)) != SB_OK ||
		    (rc = sq_op_column(op, st, 1, &e->agent_id)) != SB_OK ||
		    (rc = sq_op_column(op, st, 2, &e->session_id)) != SB_OK ||
		    (rc = sq_op_column(op, st, 3, &e->meta)) != SB_OK)
			goto out;
		e->updated_at = sqlite3_column_int64(st, 4);
	}
	rc = sq_rc(s, src, "session_list");
out:
	sq_finish(st);
	if (v && sq_op_keep(op, v) == SB_OK)
		op->sessions = v;
	else if (v && rc == SB_OK)
		rc = SB_ERR_NOMEM;
	return rc;
}

/* Copies a row of SQ_DEVICE_COLUMNS into d (strings owned by op). */
static int sq_device_row(struct sq_op *op, sqlite3_stmt *st, struct store_device *d)
{
	int rc;

	memset(d, 0, sizeof *d);
	if ((rc = sq_op_column(op, st, 0, &d->device_id)) != SB_OK ||
	    (rc = sq_op_column(op, st, 1, &d->public_key)) != SB_OK ||
	    (rc = sq_op_column(op, st, 2, &d->state)) != SB_OK ||
	    (rc = sq_op_column(op, st, 3, &d->client_id)) != SB_OK ||
	    (rc = sq_op_column(op, st, 4, &d->platform)) != SB_OK ||
	    (rc = sq_op_column(op, st, 5, &d->scopes)) != SB_OK ||
	    (rc = sq_op_column(op, st, 6, &d->token_hash)) != SB_OK ||
	    (rc = sq_op_column(op, st, 7, &d->remote_addr)) != SB_OK)
		return rc;
	d->created_at = sqlite3_column_int64(st, 8);
	d->approved_at = sqlite3_column_int64(st, 9);
	d->last_seen_at = sqlite3_column_int64(st, 10);
	return SB_OK;
}

/* Reads one device (by id, or by token hash when by_token) into op->dev. */
static int sq_device_find(struct sq_store *s, struct sq_op *op, const char *key, bool by_token)
{
	sqlite3_stmt *st = NULL;
	int src;
	int rc = sq_stmt(s, by_token ? SQ_ST_DEV_FIND_TOKEN : SQ_ST_DEV_FIND, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, key);
	src = sqlite3_step(st);
	if (src == SQLITE_DONE) {
		rc = SB_ERR_NOTFOUND;
		goto out;
	}
	if (src != SQLITE_ROW) {
		rc = sq_rc(s, src, "device_find");
		goto out;
	}
	rc = sq_device_row(op, st, &op->dev);
out:
	sq_finish(st);
	return rc;
}

/* Runs a statement whose only parameters are ?1 id, ?2 and ?3 as given. */
static int sq_device_exec(struct sq_store *s, enum sq_stmt id, const char *a, int64_t n,
                          const char *b, int *changes)
{
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, id, &st);

	if (rc != SB_OK)
		goto out;
	switch (id) {
	case SQ_ST_DEV_EXPIRE:
		sqlite3_bind_int64(st, 1, n);
		break;
	case SQ_ST_DEV_DROP_OLDEST:
		break;
	case SQ_ST_DEV_TOUCH:
		sq_bind_text(st, 1, a);
		sqlite3_bind_int64(st, 2, n);
		sq_bind_text(st, 3, b);
		break;
	case SQ_ST_DEV_APPROVE:
		sq_bind_text(st, 1, a);
		sqlite3_bind_int64(st, 2, n);
		break;
	case SQ_ST_DEV_SET_TOKEN:
		sq_bind_text(st, 1, a);
		sq_bind_text(st, 2, b);
		sqlite3_bind_int64(st, 3, n);
		break;
	default: /* SQ_ST_DEV_DELETE */
		sq_bind_text(st, 1, a);
		break;
	}
	rc = sq_step_update(s, st, sq_sql[id], changes);
out:
	sq_finish(st);
	return rc;
}

static int sq_run_device_request(struct sq_store *s, struct sq_op *op)
{
	const struct store_device in = op->dev;
	sqlite3_stmt *st = NULL;
	int64_t now = sq_now_ms(), pending = 0;
	int rc = sq_device_exec(s, SQ_ST_DEV_EXPIRE, NULL, now - STORE_DEVICE_PENDING_TTL_MS, NULL,
	                        NULL);

	if (rc != SB_OK)
		goto out;
	rc = sq_device_find(s, op, in.device_id, false);
	if (rc == SB_OK) {
		rc = sq_device_exec(s, SQ_ST_DEV_TOUCH, in.device_id, now, in.remote_addr, NULL);
		op->dev.last_seen_at = now;
		if (in.remote_addr)
			op->dev.remote_addr = in.remote_addr;
		goto out;
	}
	if (rc != SB_ERR_NOTFOUND)
		goto out;
	if ((rc = sq_count(s, SQ_ST_DEV_COUNT_PENDING, &pending)) != SB_OK)
		goto out;
	for (; pending >= STORE_DEVICES_MAX_PENDING; pending--)
		if ((rc = sq_device_exec(s, SQ_ST_DEV_DROP_OLDEST, NULL, 0, NULL, NULL)) != SB_OK)
			goto out;
	if ((rc = sq_stmt(s, SQ_ST_DEV_INSERT, &st)) != SB_OK)
		goto out;
	sq_bind_text(st, 1, in.device_id);
	sq_bind_text(st, 2, in.public_key);
	sq_bind_text(st, 3, in.client_id);
	sq_bind_text(st, 4, in.platform);
	sq_bind_text(st, 5, in.scopes);
	sq_bind_text(st, 6, in.remote_addr);
	sqlite3_bind_int64(st, 7, now);
	if ((rc = sq_step_update(s, st, "device_insert", NULL)) != SB_OK)
		goto out;
	op->dev = in;
	op->dev.state = "pending";
	op->dev.scopes = in.scopes ? in.scopes : "";
	op->dev.created_at = op->dev.last_seen_at = now;
	op->dev.approved_at = 0;
	op->dev.token_hash = NULL;
	op->created = true;
out:
	sq_finish(st);
	return rc;
}

static int sq_run_device_list(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	struct store_device *v = NULL;
	size_t cap = 0;
	int src;
	int rc = sq_stmt(s, SQ_ST_DEV_LIST, &st);

	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, STORE_LIST_MAX);
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		if ((rc = sq_grow((void **)&v, &cap, op->nitems, sizeof *v)) != SB_OK)
			goto out;
		if ((rc = sq_device_row(op, st, &v[op->nitems++])) != SB_OK)
			goto out;
	}
	rc = sq_rc(s, src, "device_list");
out:
	sq_finish(st);
	if (v && sq_op_keep(op, v) == SB_OK)
		op->devices = v;
	else if (v && rc == SB_OK)
		rc = SB_ERR_NOMEM;
	return rc;
}

static int sq_run_device_approve(struct sq_store *s, struct sq_op *op)
{
	const char *id = op->dev.device_id;
	int changes = 0;
	int rc = sq_device_exec(s, SQ_ST_DEV_APPROVE, id, sq_now_ms(), NULL, &changes);

	if (rc != SB_OK)
		return rc;
	rc = sq_device_find(s, op, id, false);
	if (rc == SB_OK && changes == 0)
		rc = SB_ERR_EXISTS; /* it was approved before */
	return rc;
}

static int sq_run_device_change(struct sq_store *s, struct sq_op *op, enum sq_stmt id)
{
	int changes = 0;
	int rc =
	    sq_device_exec(s, id, op->dev.device_id, sq_now_ms(), op->dev.token_hash, &changes);

	if (rc == SB_OK && changes == 0)
		rc = SB_ERR_NOTFOUND;
	return rc;
}

/* ---- cron ---- */

static int sq_run_cron_put(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	int64_t now = sq_now_ms();
	int rc = sq_stmt(s, SQ_ST_CRON_PUT, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->cj.id);
	sq_bind_text(st, 2, op->cj.spec);
	sq_bind_text(st, 3, op->cj.state);
	sq_bind_text(st, 4, op->cj.source);
	sqlite3_bind_int64(st, 5, op->cj.created_at > 0 ? op->cj.created_at : now);
	sqlite3_bind_int64(st, 6, now);
	rc = sq_step_update(s, st, "cron_job_put", NULL);
out:
	sq_finish(st);
	return rc;
}

static int sq_run_cron_delete(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	int changes = 0;
	int rc = sq_stmt(s, SQ_ST_CRON_DELETE, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->cj.id);
	rc = sq_step_update(s, st, "cron_job_delete", &changes);
	sq_finish(st);
	st = NULL;
	if (rc != SB_OK)
		goto out;
	if (changes == 0) {
		rc = SB_ERR_NOTFOUND;
		goto out;
	}
	if ((rc = sq_stmt(s, SQ_ST_CRON_DELETE_RUNS, &st)) != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->cj.id);
	rc = sq_step_update(s, st, "cron_job_delete", NULL);
out:
	sq_finish(st);
	return rc;
}

static int sq_run_cron_list(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	struct store_cron_job *v = NULL;
	size_t cap = 0;
	int src;
	int rc = sq_stmt(s, SQ_ST_CRON_LIST, &st);

	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, STORE_LIST_MAX);
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_cron_job *e;

		if ((rc = sq_grow((void **)&v, &cap, op->nitems, sizeof *v)) != SB_OK)
			goto out;
		e = &v[op->nitems++];
		memset(e, 0, sizeof *e);
		if ((rc = sq_op_column(op, st, 0, &e->id)) != SB_OK ||
		    (rc = sq_op_column(op, st, 1, &e->spec)) != SB_OK ||
		    (rc = sq_op_column(op, st, 2, &e->state)) != SB_OK ||
		    (rc = sq_op_column(op, st, 3, &e->source)) != SB_OK)
			goto out;
		e->created_at = sqlite3_column_int64(st, 4);
		e->updated_at = sqlite3_column_int64(st, 5);
	}
	rc = sq_rc(s, src, "cron_job_list");
out:
	sq_finish(st);
	if (v && sq_op_keep(op, v) == SB_OK)
		op->cron_jobs = v;
	else if (v && rc == SB_OK)
		rc = SB_ERR_NOMEM;
	return rc;
}

static int sq_run_cron_run_add(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, SQ_ST_CRON_RUN_INSERT, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->cr.job_id);
	sqlite3_bind_int64(st, 2, op->cr.scheduled_at);
	sqlite3_bind_int64(st, 3, op->cr.started_at);
	sqlite3_bind_int64(st, 4, op->cr.finished_at);
	sq_bind_text(st, 5, op->cr.status);
	sq_bind_text(st, 6, op->cr.detail);
	sq_bind_text(st, 7, op->cr.session_key);
	if ((rc = sq_step_update(s, st, "cron_run_add", NULL)) != SB_OK)
		goto out;
	op->res_id = sqlite3_last_insert_rowid(s->db);
	sq_finish(st);
	st = NULL;
	if ((rc = sq_stmt(s, SQ_ST_CRON_RUN_PRUNE, &st)) != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->cr.job_id);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)op->max);
	rc = sq_step_update(s, st, "cron_run_prune", NULL);
out:
	sq_finish(st);
	return rc;
}

static int sq_run_cron_run_list(struct sq_store *s, struct sq_op *op)
{
	sqlite3_stmt *st = NULL;
	struct store_cron_run *v = NULL;
	size_t cap = 0;
	int src;
	int rc = sq_stmt(s, SQ_ST_CRON_RUN_LIST, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, op->cr.job_id);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)op->max);
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_cron_run *e;

		if ((rc = sq_grow((void **)&v, &cap, op->nitems, sizeof *v)) != SB_OK)
			goto out;
		e = &v[op->nitems++];
		memset(e, 0, sizeof *e);
		e->id = sqlite3_column_int64(st, 0);
		if ((rc = sq_op_column(op, st, 1, &e->job_id)) != SB_OK ||
		    (rc = sq_op_column(op, st, 5, &e->status)) != SB_OK ||
		    (rc = sq_op_column(op, st, 6, &e->detail)) != SB_OK ||
		    (rc = sq_op_column(op, st, 7, &e->session_key)) != SB_OK)
			goto out;
		e->scheduled_at = sqlite3_column_int64(st, 2);
		e->started_at = sqlite3_column_int64(st, 3);
		e->finished_at = sqlite3_column_int64(st, 4);
	}
	rc = sq_rc(s, src, "cron_run_list");
out:
	sq_finish(st);
	if (v && sq_op_keep(op, v) == SB_OK)
		op->cron_runs = v;
	else if (v && rc == SB_OK)
		rc = SB_ERR_NOMEM;
	return rc;
}

static int sq_run_op(struct sq_store *s, struct sq_op *op)
{
	switch (op->type) {
	case SQ_OP_INBOX_PUT:
		return sq_run_inbox_put(s, op);
	case SQ_OP_INBOX_CLAIM:
		return sq_run_inbox_claim(s, op);
	case SQ_OP_INBOX_DONE:
		return sq_run_inbox_done(s, op);
	case SQ_OP_INBOX_RELEASE:
		return sq_run_update_one(s, op, SQ_ST_INBOX_RELEASE, "inbox_release");
	case SQ_OP_OUTBOX_PUT:
		return sq_outbox_insert(s, &op->out, 0, &op->res_id, &op->duplicate);
	case SQ_OP_OUTBOX_CLAIM:
		return sq_run_outbox_claim(s, op);
	case SQ_OP_OUTBOX_DONE:
		return sq_run_update_one(s, op, SQ_ST_OUTBOX_DONE, "outbox_done");
	case SQ_OP_OUTBOX_FAILED:
		return sq_run_update_one(s, op,
		                         op->retry_at >= 0 ? SQ_ST_OUTBOX_RETRY : SQ_ST_OUTBOX_FAIL,
		                         "outbox_failed");
	case SQ_OP_KV_GET:
		return sq_run_kv_get(s, op);
	case SQ_OP_KV_PUT:
		return sq_run_kv_put(s, op);
	case SQ_OP_SESSION_GET:
		return sq_run_session_get(s, op);
	case SQ_OP_SESSION_PUT:
		return sq_run_session_put(s, op);
	case SQ_OP_STATS:
		return sq_run_stats(s, op);
	case SQ_OP_RECOVER:
		return sq_run_recover(s, op);
	case SQ_OP_PAIRING_REQUEST:
		return sq_run_pairing_request(s, op);
	case SQ_OP_PAIRING_LIST:
		return sq_run_pairing_list(s, op);
	case SQ_OP_PAIRING_APPROVE:
		return sq_run_pairing_decide(s, op, true);
	case SQ_OP_PAIRING_DENY:
		return sq_run_pairing_decide(s, op, false);
	case SQ_OP_ALLOW_CHECK:
		return sq_run_allow_check(s, op);
	case SQ_OP_ALLOW_LIST:
		return sq_run_allow_list(s, op);
	case SQ_OP_ALLOW_REMOVE:
		return sq_run_allow_remove(s, op);
	case SQ_OP_SESSION_LIST:
		return sq_run_session_list(s, op);
	case SQ_OP_DEVICE_REQUEST:
		return sq_run_device_request(s, op);
	case SQ_OP_DEVICE_GET:
		return op->dev.device_id ? sq_device_find(s, op, op->dev.device_id, false)
		                         : sq_device_find(s, op, op->dev.token_hash, true);
	case SQ_OP_DEVICE_LIST:
		return sq_run_device_list(s, op);
	case SQ_OP_DEVICE_APPROVE:
		return sq_run_device_approve(s, op);
	case SQ_OP_DEVICE_SET_TOKEN:
		return sq_run_device_change(s, op, SQ_ST_DEV_SET_TOKEN);
	case SQ_OP_DEVICE_REVOKE:
		return sq_run_device_change(s, op, SQ_ST_DEV_DELETE);
	case SQ_OP_CRON_PUT:
		return sq_run_cron_put(s, op);
	case SQ_OP_CRON_DELETE:
		return sq_run_cron_delete(s, op);
	case SQ_OP_CRON_LIST:
		return sq_run_cron_list(s, op);
	case SQ_OP_CRON_RUN_ADD:
		return sq_run_cron_run_add(s, op);
	case SQ_OP_CRON_RUN_LIST:
		return sq_run_cron_run_list(s, op);
	}
	return SB_ERR_INVAL;
}

/* ---- writer thread: batches ---- */

/* Runs one batch in one transaction and records the commit on its last op. */
static void sq_run_batch(struct sq_store *s, struct sq_op *head, size_t n)
{
	double t0 = sq_mono_seconds();
	bool lost = false; /* the transaction is gone: nothing of it is stored */
	struct sq_op *op, *last = NULL;
	int rc = sq_exec(s, SQ_ST_BEGIN);

	if (rc != SB_OK) {
		lost = true;
		goto report;
	}
	for (op = head; op && !lost; op = op->next) {
		if (sq_exec(s, SQ_ST_SAVEPOINT) != SB_OK) {
			lost = true;
			break;
		}
		op->rc = sq_run_op(s, op);
		/* Some errors (SQLITE_FULL, IOERR, ...) roll the whole
		 * transaction back on their own. */
		if (sqlite3_get_autocommit(s->db)) {
			lost = true;
			break;
		}
		if (op->rc != SB_OK && sq_exec(s, SQ_ST_ROLLBACK_TO) != SB_OK) {
			lost = true;
			break;
		}
		if (sq_exec(s, SQ_ST_RELEASE) != SB_OK)
			lost = true;
	}
	if (!lost && sq_exec(s, SQ_ST_COMMIT) != SB_OK)
		lost = true;
	if (lost && !sqlite3_get_autocommit(s->db))
		sq_exec(s, SQ_ST_ROLLBACK);
report:
	if (lost)
		log_error("store", "commit failed; batch not stored", LOG_I("ops", n),
		          LOG_S("error", sqlite3_errmsg(s->db)));
	for (op = head; op; op = op->next) {
		if (lost)
			op->rc = SB_ERR_STORE;
		last = op;
	}
	if (last) {
		last->commit_end = true;
		last->commit_rc = lost ? SB_ERR_STORE : SB_OK;
		last->commit_ops = n;
		last->commit_seconds = sq_mono_seconds() - t0;
	}
}

static void sq_db_close(struct sq_store *s)
{
	int src;

	if (!s->db)
		return;
	for (size_t i = 0; i < SQ_ST__COUNT; i++) {
		sqlite3_finalize(s->stmts[i]);
		s->stmts[i] = NULL;
	}
	src = sqlite3_close(s->db);
	if (src != SQLITE_OK)
		log_error("store", "close failed", LOG_S("path", s->path),
		          LOG_S("error", sqlite3_errmsg(s->db)), LOG_I("code", src));
	s->db = NULL;
}

static void *sq_writer_main(void *arg)
{
	struct sq_store *s = arg;

	for (;;) {
		struct sq_op *head, *tail;
		size_t n = 0;

		pthread_mutex_lock(&s->mu);
		while (!s->queue_head && !s->closing)
			pthread_cond_wait(&s->cv, &s->mu);
		if (!s->queue_head) {
			pthread_mutex_unlock(&s->mu);
			break;
		}
		/* Everything queued so far, up to batch_max, goes in one commit. */
		head = tail = s->queue_head;
		n = 1;
		while (tail->next && n < s->batch_max) {
			tail = tail->next;
			n++;
		}
		s->queue_head = tail->next;
		if (!s->queue_head)
			s->queue_tail = NULL;
		tail->next = NULL;
		s->queued -= n;
		pthread_mutex_unlock(&s->mu);

		sq_run_batch(s, head, n);

		pthread_mutex_lock(&s->mu);
		if (s->done_tail)
			s->done_tail->next = head;
		else
			s->done_head = head;
		s->done_tail = tail;
		pthread_mutex_unlock(&s->mu);
		uv_async_send(&s->async->handle);
	}
	sq_db_close(s);
	return NULL;
}

/* ---- loop thread: delivery ---- */

static void sq_op_callback(struct sq_op *op)
{
	bool ok = op->rc == SB_OK;

	switch (op->type) {
	case SQ_OP_INBOX_PUT:
	case SQ_OP_OUTBOX_PUT:
		if (op->cb.put)
			op->cb.put(op->ud, op->rc, ok ? op->res_id : 0, ok && op->duplicate);
		break;
	case SQ_OP_INBOX_CLAIM:
		if (op->cb.inbox)
			op->cb.inbox(op->ud, op->rc, ok ? op->inbox_items : NULL,
			             ok ? op->nitems : 0);
		break;
	case SQ_OP_OUTBOX_CLAIM:
		if (op->cb.outbox)
			op->cb.outbox(op->ud, op->rc, ok ? op->outbox_items : NULL,
			              ok ? op->nitems : 0);
		break;
	case SQ_OP_KV_GET:
		if (op->cb.kv)
			op->cb.kv(op->ud, op->rc, ok ? op->res_value : NULL);
		break;
	case SQ_OP_SESSION_GET:
		if (op->cb.session)
			op->cb.session(op->ud, op->rc, ok ? &op->sess : NULL);
		break;
	case SQ_OP_STATS:
		if (op->cb.stats)
			op->cb.stats(op->ud, op->rc, ok ? &op->stats : NULL);
		break;
	case SQ_OP_RECOVER:
		if (op->cb.recover)
			op->cb.recover(op->ud, op->rc, ok ? op->stats.inbox_pending : 0,
			               ok ? op->stats.outbox_pending : 0);
		break;
	case SQ_OP_PAIRING_REQUEST:
	case SQ_OP_PAIRING_APPROVE:
	case SQ_OP_PAIRING_DENY:
		if (op->cb.pairing)
			op->cb.pairing(op->ud, op->rc, ok ? &op->pairing : NULL, ok && op->created);
		break;
	case SQ_OP_PAIRING_LIST:
		if (op->cb.pairing_list)
			op->cb.pairing_list(op->ud, op->rc, ok ? op->pairings : NULL,
			                    ok ? op->nitems : 0);
		break;
	case SQ_OP_ALLOW_CHECK:
		if (op->cb.allow)
			op->cb.allow(op->ud, op->rc, ok && op->allowed);
		break;
	case SQ_OP_ALLOW_LIST:
		if (op->cb.allow_list)
			op->cb.allow_list(op->ud, op->rc, ok ? op->allows : NULL,
			                  ok ? op->nitems : 0);
		break;
	case SQ_OP_SESSION_LIST:
		if (op->cb.session_list)
			op->cb.session_list(op->ud, op->rc, ok ? op->sessions : NULL,
			                    ok ? op->nitems : 0);
		break;
	case SQ_OP_DEVICE_REQUEST:
	case SQ_OP_DEVICE_GET:
	case SQ_OP_DEVICE_APPROVE:
		if (op->cb.device)
			op->cb.device(op->ud, op->rc,
			              ok || op->rc == SB_ERR_EXISTS ? &op->dev : NULL,
			              ok && op->created);
		break;
	case SQ_OP_DEVICE_LIST:
		if (op->cb.device_list)
			op->cb.device_list(op->ud, op->rc, ok ? op->devices : NULL,
			                   ok ? op->nitems : 0);
		break;
	case SQ_OP_CRON_LIST:
		if (op->cb.cron_jobs)
			op->cb.cron_jobs(op->ud, op->rc, ok ? op->cron_jobs : NULL,
			                 ok ? op->nitems : 0);
		break;
	case SQ_OP_CRON_RUN_LIST:
		if (op->cb.cron_runs)
			op->cb.cron_runs(op->ud, op->rc, ok ? op->cron_runs : NULL,
			                 ok ? op->nitems : 0);
		break;
	case SQ_OP_CRON_RUN_ADD:
		if (op->cb.put)
			op->cb.put(op->ud, op->rc, ok ? op->res_id : 0, false);
		break;
	case SQ_OP_CRON_PUT:
	case SQ_OP_CRON_DELETE:
	case SQ_OP_INBOX_DONE:
	case SQ_OP_INBOX_RELEASE:
	case SQ_OP_OUTBOX_DONE:
	case SQ_OP_OUTBOX_FAILED:
	case SQ_OP_KV_PUT:
	case SQ_OP_SESSION_PUT:
	case SQ_OP_DEVICE_SET_TOKEN:
	case SQ_OP_DEVICE_REVOKE:
	case SQ_OP_ALLOW_REMOVE:
		if (op->cb.done)
			op->cb.done(op->ud, op->rc);
		break;
	}
}

/* Runs the callbacks of every finished operation, in order. */
static void sq_deliver(struct sq_store *s)
{
	struct sq_op *op;

	pthread_mutex_lock(&s->mu);
	op = s->done_head;
	s->done_head = s->done_tail = NULL;
	pthread_mutex_unlock(&s->mu);

	while (op) {
		struct sq_op *next = op->next;

		/* Before the callback, so that it may queue a follow-up at the
		 * bound. */
		s->outstanding--;
		sq_op_callback(op);
		if (op->commit_end && s->on_commit)
			s->on_commit(s->on_commit_ud, op->commit_seconds, op->commit_ops,
			             op->commit_rc);
		sq_op_free(op);
		op = next;
	}
}

static void sq_async_cb(uv_async_t *h)
{
	struct sq_store *s = h->data;

	if (s)
		sq_deliver(s);
}

static void sq_async_free(uv_handle_t *h)
{
	free(h); /* the handle is the first member of struct sq_async */
}

/* ---- loop thread: submission ---- */

/* Checks that a new operation may be accepted. */
static int sq_admit(struct sq_store *s)
{
	if (s->closing)
		return SB_ERR_CLOSED;
	if (s->outstanding >= s->queue_max)
		return SB_ERR_AGAIN;
	return SB_OK;
}

/* Operations that finish work already claimed (an inbox entry done or
 * released, a delivery's outcome) are never refused for a full queue:
 * refusing them would strand what was claimed until a restart, and they
 * are bounded anyway by how much can be claimed at once. */
static bool sq_finishing(enum sq_op_type t)
{
	return t == SQ_OP_INBOX_DONE || t == SQ_OP_INBOX_RELEASE || t == SQ_OP_OUTBOX_DONE ||
	       t == SQ_OP_OUTBOX_FAILED;
}

static int sq_admit_op(struct sq_store *s, enum sq_op_type t)
{
	if (sq_finishing(t))
		return s->closing ? SB_ERR_CLOSED : SB_OK;
	return sq_admit(s);
}

static int sq_op_new(enum sq_op_type type, void *ud, struct sq_op **out)
{
	struct sq_op *op = calloc(1, sizeof *op);

	*out = op;
	if (!op)
		return SB_ERR_NOMEM;
	op->type = type;
	op->ud = ud;
	return SB_OK;
}

/* Queues op for the writer; takes ownership of op whatever the result. */
static int sq_submit(struct sq_store *s, struct sq_op *op)
{
	int rc = sq_admit_op(s, op->type);

	if (rc != SB_OK) {
		sq_op_free(op);
		return rc;
	}
	pthread_mutex_lock(&s->mu);
	if (s->queue_tail)
		s->queue_tail->next = op;
	else
		s->queue_head = op;
	s->queue_tail = op;
	s->queued++;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	s->outstanding++;
	return SB_OK;
}

static int sq_copy_outbox_new(struct sq_op *op, const struct store_outbox_new *m,
                              struct store_outbox_new *dst)
{
	int rc;

	*dst = *m;
	if ((rc = sq_op_strdup(op, m->idempotency_key, &dst->idempotency_key)) != SB_OK ||
	    (rc = sq_op_strdup(op, m->channel, &dst->channel)) != SB_OK ||
	    (rc = sq_op_strdup(op, m->account, &dst->account)) != SB_OK ||
	    (rc = sq_op_strdup(op, m->target, &dst->target)) != SB_OK ||
	    (rc = sq_op_strdup(op, m->payload, &dst->payload)) != SB_OK)
		return rc;
	return SB_OK;
}

static bool sq_outbox_new_valid(const struct store_outbox_new *m)
{
	return m && m->idempotency_key && m->channel && m->account && m->target && m->payload &&
	       m->inbox_id >= 0;
}

static bool sq_claim_valid(size_t max, int64_t lease_ms)
{
	return max > 0 && max <= STORE_CLAIM_MAX && lease_ms >= 0 && lease_ms <= SQ_LEASE_MAX_MS;
}

static int sq_inbox_put(struct store *base, const struct store_inbox_new *m, store_put_cb cb,
                        void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_INVAL;
	if (!m || !m->channel || !m->account || !m->dedupe_key || !m->payload)
		goto out;
	if ((rc = sq_op_new(SQ_OP_INBOX_PUT, ud, &op)) != SB_OK)
		goto out;
	op->cb.put = cb;
	if ((rc = sq_op_strdup(op, m->channel, &op->in.channel)) != SB_OK ||
	    (rc = sq_op_strdup(op, m->account, &op->in.account)) != SB_OK ||
	    (rc = sq_op_strdup(op, m->dedupe_key, &op->in.dedupe_key)) != SB_OK ||
	    (rc = sq_op_strdup(op, m->payload, &op->in.payload)) != SB_OK)
		goto out;
	rc = sq_submit(s, op);
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

static int sq_inbox_claim(struct store *base, size_t max, int64_t lease_ms, store_inbox_cb cb,
                          void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_INVAL;
	if (!sq_claim_valid(max, lease_ms))
		goto out;
	if ((rc = sq_op_new(SQ_OP_INBOX_CLAIM, ud, &op)) != SB_OK)
		goto out;
	op->cb.inbox = cb;
	op->max = max;
	op->lease_ms = lease_ms;
	rc = sq_submit(s, op);
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

static int sq_inbox_done(struct store *base, int64_t inbox_id,
                         const struct store_outbox_new *replies, size_t n, store_done_cb cb,
                         void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	void *copies = NULL;
	int rc = sq_admit_op(s, SQ_OP_INBOX_DONE);

	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_INVAL;
	if (inbox_id <= 0 || (n > 0 && !replies) || n > STORE_CLAIM_MAX)
		goto out;
	for (size_t i = 0; i < n; i++)
		if (!sq_outbox_new_valid(&replies[i]))
			goto out;
	if ((rc = sq_op_new(SQ_OP_INBOX_DONE, ud, &op)) != SB_OK)
		goto out;
	op->cb.done = cb;
	op->id = inbox_id;
	if (n > 0) {
		if ((rc = sq_op_calloc(op, n, sizeof *op->replies, &copies)) != SB_OK)
			goto out;
		op->replies = copies;
		op->nreplies = n;
		for (size_t i = 0; i < n; i++)
			if ((rc = sq_copy_outbox_new(op, &replies[i], &op->replies[i])) != SB_OK)
				goto out;
	}
	rc = sq_submit(s, op);
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

/* Queues an operation that carries an id and an optional string. */
static int sq_submit_id(struct sq_store *s, enum sq_op_type type, int64_t id, const char *text,
                        int64_t retry_at, store_done_cb cb, void *ud)
{
	struct sq_op *op = NULL;
	int rc = sq_admit_op(s, type);

	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_INVAL;
	if (id <= 0)
		goto out;
	if ((rc = sq_op_new(type, ud, &op)) != SB_OK)
		goto out;
	op->cb.done = cb;
	op->id = id;
	op->retry_at = retry_at;
	if ((rc = sq_op_strdup(op, text, &op->text)) != SB_OK)
		goto out;
	rc = sq_submit(s, op);
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

static int sq_inbox_release(struct store *base, int64_t inbox_id, store_done_cb cb, void *ud)
{
	return sq_submit_id((struct sq_store *)base, SQ_OP_INBOX_RELEASE, inbox_id, NULL, 0, cb,
	                    ud);
}

static int sq_outbox_put(struct store *base, const struct store_outbox_new *m, store_put_cb cb,
                         void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_INVAL;
	if (!sq_outbox_new_valid(m))
		goto out;
	if ((rc = sq_op_new(SQ_OP_OUTBOX_PUT, ud, &op)) != SB_OK)
		goto out;
	op->cb.put = cb;
	if ((rc = sq_copy_outbox_new(op, m, &op->out)) != SB_OK)
		goto out;
	rc = sq_submit(s, op);
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

static int sq_outbox_claim_due(struct store *base, size_t max, int64_t lease_ms, store_outbox_cb cb,
                               void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_INVAL;
	if (!sq_claim_valid(max, lease_ms))
		goto out;
	if ((rc = sq_op_new(SQ_OP_OUTBOX_CLAIM, ud, &op)) != SB_OK)
		goto out;
	op->cb.outbox = cb;
	op->max = max;
	op->lease_ms = lease_ms;
	rc = sq_submit(s, op);
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

static int sq_outbox_done(struct store *base, int64_t id, const char *channel_msg_id,
                          store_done_cb cb, void *ud)
{
	return sq_submit_id((struct sq_store *)base, SQ_OP_OUTBOX_DONE, id, channel_msg_id, 0, cb,
	                    ud);
}

static int sq_outbox_failed(struct store *base, int64_t id, const char *error, int64_t retry_at,
                            store_done_cb cb, void *ud)
{
	return sq_submit_id((struct sq_store *)base, SQ_OP_OUTBOX_FAILED, id, error,
	                    retry_at < 0 ? -1 : retry_at, cb, ud);
}

static int sq_kv_op(struct sq_store *s, enum sq_op_type type, const char *ns, const char *key,
                    const char *value, struct sq_op **out)
{
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	*out = NULL;
	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_INVAL;
	if (!ns || !key)
		goto out;
	if ((rc = sq_op_new(type, NULL, &op)) != SB_OK)
		goto out;
	if ((rc = sq_op_strdup(op, ns, &op->ns)) != SB_OK ||
	    (rc = sq_op_strdup(op, key, &op->key)) != SB_OK ||
	    (rc = sq_op_strdup(op, value, &op->value)) != SB_OK)
		goto out;
	*out = op;
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

static int sq_kv_get(struct store *base, const char *ns, const char *key, store_kv_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_kv_op(s, SQ_OP_KV_GET, ns, key, NULL, &op);

	if (rc != SB_OK)
		return rc;
	op->cb.kv = cb;
	op->ud = ud;
	return sq_submit(s, op);
}

static int sq_kv_put(struct store *base, const char *ns, const char *key, const char *value,
                     store_done_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_kv_op(s, SQ_OP_KV_PUT, ns, key, value, &op);

	if (rc != SB_OK)
		return rc;
	op->cb.done = cb;
	op->ud = ud;
	return sq_submit(s, op);
}

static int sq_session_get(struct store *base, const char *key, store_session_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_INVAL;
	if (!key)
		goto out;
	if ((rc = sq_op_new(SQ_OP_SESSION_GET, ud, &op)) != SB_OK)
		goto out;
	op->cb.session = cb;
	if ((rc = sq_op_strdup(op, key, &op->sess.key)) != SB_OK)
		goto out;
	rc = sq_submit(s, op);
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

static int sq_session_put(struct store *base, const struct store_session *sess, store_done_cb cb,
                          void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_INVAL;
	if (!sess || !sess->key || !sess->agent_id || !sess->session_id)
		goto out;
	if ((rc = sq_op_new(SQ_OP_SESSION_PUT, ud, &op)) != SB_OK)
		goto out;
	op->cb.done = cb;
	op->sess.updated_at = sess->updated_at;
	if ((rc = sq_op_strdup(op, sess->key, &op->sess.key)) != SB_OK ||
	    (rc = sq_op_strdup(op, sess->agent_id, &op->sess.agent_id)) != SB_OK ||
	    (rc = sq_op_strdup(op, sess->session_id, &op->sess.session_id)) != SB_OK ||
	    (rc = sq_op_strdup(op, sess->meta, &op->sess.meta)) != SB_OK)
		goto out;
	rc = sq_submit(s, op);
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

static int sq_recover(struct store *base, store_recover_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	if (rc != SB_OK)
		goto out;
	if ((rc = sq_op_new(SQ_OP_RECOVER, ud, &op)) != SB_OK)
		goto out;
	op->cb.recover = cb;
	rc = sq_submit(s, op);
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

static int sq_stats(struct store *base, store_stats_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	if (rc != SB_OK)
		goto out;
	if ((rc = sq_op_new(SQ_OP_STATS, ud, &op)) != SB_OK)
		goto out;
	op->cb.stats = cb;
	rc = sq_submit(s, op);
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

/* Queues a pairing or allow-list operation. channel is required unless
 * list is set; account and sender_id when given; code is upper-cased. */
static int sq_pairing_op(struct sq_store *s, enum sq_op_type type, const char *channel,
                         const char *account, const char *sender_id, const char *code,
                         struct sq_op **out)
{
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	*out = NULL;
	if (rc != SB_OK)
		goto out;
	if ((rc = sq_op_new(type, NULL, &op)) != SB_OK)
		goto out;
	if ((rc = sq_op_strdup(op, channel, &op->pairing.channel)) != SB_OK ||
	    (rc = sq_op_strdup(op, account, &op->pairing.account)) != SB_OK ||
	    (rc = sq_op_strdup(op, sender_id, &op->pairing.sender_id)) != SB_OK ||
	    (rc = sq_op_strdup(op, code, &op->pairing.code)) != SB_OK)
		goto out;
	if (op->pairing.code)
		for (char *c = (char *)op->pairing.code; *c; c++)
			*c = (char)toupper((unsigned char)*c);
	*out = op;
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

static int sq_pairing_request(struct store *base, const char *channel, const char *account,
                              const char *sender_id, store_pairing_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc;

	if (!channel || !account || !sender_id)
		return SB_ERR_INVAL;
	rc = sq_pairing_op(s, SQ_OP_PAIRING_REQUEST, channel, account, sender_id, NULL, &op);
	if (rc != SB_OK)
		return rc;
	op->cb.pairing = cb;
	op->ud = ud;
	return sq_submit(s, op);
}

static int sq_pairing_list(struct store *base, const char *channel, store_pairing_list_cb cb,
                           void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_pairing_op(s, SQ_OP_PAIRING_LIST, channel, NULL, NULL, NULL, &op);

	if (rc != SB_OK)
		return rc;
	op->cb.pairing_list = cb;
	op->ud = ud;
	return sq_submit(s, op);
}

static int sq_pairing_decide(struct store *base, enum sq_op_type type, const char *channel,
                             const char *code, store_pairing_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc;

	if (!channel || !code)
		return SB_ERR_INVAL;
	rc = sq_pairing_op(s, type, channel, NULL, NULL, code, &op);
	if (rc != SB_OK)
		return rc;
	op->cb.pairing = cb;
	op->ud = ud;
	return sq_submit(s, op);
}

static int sq_pairing_approve(struct store *base, const char *channel, const char *code,
                              store_pairing_cb cb, void *ud)
{
	return sq_pairing_decide(base, SQ_OP_PAIRING_APPROVE, channel, code, cb, ud);
}

static int sq_pairing_deny(struct store *base, const char *channel, const char *code,
                           store_pairing_cb cb, void *ud)
{
	return sq_pairing_decide(base, SQ_OP_PAIRING_DENY, channel, code, cb, ud);
}

static int sq_allow_check(struct store *base, const char *channel, const char *account,
                          const char *sender_id, store_allow_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc;

	if (!channel || !account || !sender_id)
		return SB_ERR_INVAL;
	rc = sq_pairing_op(s, SQ_OP_ALLOW_CHECK, channel, account, sender_id, NULL, &op);
	if (rc != SB_OK)
		return rc;
	op->cb.allow = cb;
	op->ud = ud;
	return sq_submit(s, op);
}

static int sq_allow_remove(struct store *base, const char *channel, const char *account,
                           const char *sender_id, store_done_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc;

	if (!channel || !sender_id)
		return SB_ERR_INVAL;
	rc = sq_pairing_op(s, SQ_OP_ALLOW_REMOVE, channel, account, sender_id, NULL, &op);
	if (rc != SB_OK)
		return rc;
	op->cb.done = cb;
	op->ud = ud;
	return sq_submit(s, op);
}

static int sq_allow_list(struct store *base, const char *channel, store_allow_list_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_pairing_op(s, SQ_OP_ALLOW_LIST, channel, NULL, NULL, NULL, &op);

	if (rc != SB_OK)
		return rc;
	op->cb.allow_list = cb;
	op->ud = ud;
	return sq_submit(s, op);
}

static int sq_session_list(struct store *base, const char *agent_id, size_t limit,
                           store_session_list_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_INVAL;
	if (limit < 1 || limit > STORE_LIST_MAX)
		goto out;
	if ((rc = sq_op_new(SQ_OP_SESSION_LIST, ud, &op)) != SB_OK)
		goto out;
	op->cb.session_list = cb;
	op->max = limit;
	if ((rc = sq_op_strdup(op, agent_id, &op->sess.agent_id)) != SB_OK)
		goto out;
	rc = sq_submit(s, op);
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

/* Queues a device operation with copies of the given strings. */
static int sq_device_op(struct sq_store *s, enum sq_op_type type, const struct store_device *d,
                        void *ud, struct sq_op **out)
{
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	*out = NULL;
	if (rc != SB_OK)
		goto out;
	if ((rc = sq_op_new(type, ud, &op)) != SB_OK)
		goto out;
	if ((rc = sq_op_strdup(op, d->device_id, &op->dev.device_id)) != SB_OK ||
	    (rc = sq_op_strdup(op, d->public_key, &op->dev.public_key)) != SB_OK ||
	    (rc = sq_op_strdup(op, d->client_id, &op->dev.client_id)) != SB_OK ||
	    (rc = sq_op_strdup(op, d->platform, &op->dev.platform)) != SB_OK ||
	    (rc = sq_op_strdup(op, d->scopes, &op->dev.scopes)) != SB_OK ||
	    (rc = sq_op_strdup(op, d->token_hash, &op->dev.token_hash)) != SB_OK ||
	    (rc = sq_op_strdup(op, d->remote_addr, &op->dev.remote_addr)) != SB_OK)
		goto out;
	*out = op;
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

static int sq_device_request(struct store *base, const struct store_device *d, store_device_cb cb,
                             void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc;

	if (!d || !d->device_id || !d->public_key)
		return SB_ERR_INVAL;
	rc = sq_device_op(s, SQ_OP_DEVICE_REQUEST, d, ud, &op);
	if (rc != SB_OK)
		return rc;
	op->cb.device = cb;
	return sq_submit(s, op);
}

static int sq_device_get(struct store *base, const char *device_id, const char *token_hash,
                         store_device_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct store_device d = {.device_id = device_id, .token_hash = token_hash};
	struct sq_op *op = NULL;
	int rc;

	if (!device_id == !token_hash)
		return SB_ERR_INVAL;
	rc = sq_device_op(s, SQ_OP_DEVICE_GET, &d, ud, &op);
	if (rc != SB_OK)
		return rc;
	op->cb.device = cb;
	return sq_submit(s, op);
}

static int sq_device_list(struct store *base, store_device_list_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct store_device d = {0};
	struct sq_op *op = NULL;
	int rc = sq_device_op(s, SQ_OP_DEVICE_LIST, &d, ud, &op);

	if (rc != SB_OK)
		return rc;
	op->cb.device_list = cb;
	return sq_submit(s, op);
}

static int sq_device_approve(struct store *base, const char *device_id, store_device_cb cb,
                             void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct store_device d = {.device_id = device_id};
	struct sq_op *op = NULL;
	int rc;

	if (!device_id)
		return SB_ERR_INVAL;
	rc = sq_device_op(s, SQ_OP_DEVICE_APPROVE, &d, ud, &op);
	if (rc != SB_OK)
		return rc;
	op->cb.device = cb;
	return sq_submit(s, op);
}

static int sq_device_set_token(struct store *base, const char *device_id, const char *token_hash,
                               store_done_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct store_device d = {.device_id = device_id, .token_hash = token_hash};
	struct sq_op *op = NULL;
	int rc;

	if (!device_id || !token_hash)
		return SB_ERR_INVAL;
	rc = sq_device_op(s, SQ_OP_DEVICE_SET_TOKEN, &d, ud, &op);
	if (rc != SB_OK)
		return rc;
	op->cb.done = cb;
	return sq_submit(s, op);
}

static int sq_device_revoke(struct store *base, const char *device_id, store_done_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct store_device d = {.device_id = device_id};
	struct sq_op *op = NULL;
	int rc;

	if (!device_id)
		return SB_ERR_INVAL;
	rc = sq_device_op(s, SQ_OP_DEVICE_REVOKE, &d, ud, &op);
	if (rc != SB_OK)
		return rc;
	op->cb.done = cb;
	return sq_submit(s, op);
}

/* ---- open and close ---- */

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

static int sq_open_db(struct sq_store *s, int64_t busy_timeout_ms)
{
	char mode[16];
	int64_t version = 0;
	int src, rc = SB_ERR_STORE;

	/* NOMUTEX: one thread at a time uses the connection (the loop thread
	 * during open, then the writer until it closes it). */
	src =
	    sqlite3_open_v2(s->path, &s->db,
	                    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
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
	/* WAL before the first migration, so that it is a WAL transaction. */
	if ((rc = sq_pragma(s, "PRAGMA journal_mode = WAL", NULL, mode, sizeof mode)) != SB_OK)
		goto out;
	if (strcmp(mode, "wal") != 0) {
		log_error("store", "WAL mode refused", LOG_S("path", s->path),
		          LOG_S("journal_mode", mode));
		rc = SB_ERR_STORE;
		goto out;
	}
	if ((rc = sq_exec_text(s, "PRAGMA synchronous = FULL", "synchronous")) != SB_OK)
		goto out;
	rc = sq_migrate(s);
out:
	return rc;
}

static void sq_store_free(struct sq_store *s)
{
	if (!s)
		return;
	sq_db_close(s);
	free(s->path);
	free(s);
}

static int sq_open(struct store **out, uv_loop_t *loop, const struct store_options *opt)
{
	struct sq_store *s = NULL;
	bool sync_init = false;
	sigset_t all, old;
	int rc = SB_ERR_INVAL;

	if (out)
		*out = NULL;
	if (!out || !loop || !opt || !opt->path || !*opt->path)
		goto out;
	rc = SB_ERR_NOMEM;
	if (sodium_init() < 0) /* pairing codes come from randombytes_uniform */
		goto out;
	s = calloc(1, sizeof *s);
	if (!s)
		goto out;
	s->base.ops = &store_sqlite_ops;
	s->loop = loop;
	s->batch_max = opt->batch_max ? opt->batch_max : SQ_DEFAULT_BATCH_MAX;
	s->queue_max = opt->queue_max ? opt->queue_max : SQ_DEFAULT_QUEUE_MAX;
	s->on_commit = opt->on_commit;
	s->on_commit_ud = opt->on_commit_ud;
	s->path = strdup(opt->path);
	if (!s->path)
		goto out;
	rc = sq_open_db(s, opt->busy_timeout_ms > 0 ? opt->busy_timeout_ms
	                                            : SQ_DEFAULT_BUSY_TIMEOUT_MS);
	if (rc != SB_OK)
		goto out;

	rc = SB_ERR_NOMEM;
	s->async = calloc(1, sizeof *s->async);
	if (!s->async)
		goto out;
	if (pthread_mutex_init(&s->mu, NULL) != 0)
		goto out;
	if (pthread_cond_init(&s->cv, NULL) != 0) {
		pthread_mutex_destroy(&s->mu);
		goto out;
	}
	sync_init = true;
	if (uv_async_init(loop, &s->async->handle, sq_async_cb) != 0) {
		log_error("store", "uv_async_init failed", LOG_S("path", s->path));
		rc = SB_ERR_IO;
		goto out;
	}
	s->async->handle.data = s;
	/* The writer takes no signals: they belong to the loop thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	s->writer_started = pthread_create(&s->writer, NULL, sq_writer_main, s) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!s->writer_started) {
		log_error("store", "cannot start the writer thread", LOG_S("path", s->path));
		s->async->handle.data = NULL;
		uv_close((uv_handle_t *)&s->async->handle, sq_async_free);
		s->async = NULL; /* freed by the loop */
		goto out;
	}
	log_info("store", "opened", LOG_S("path", s->path),
	         LOG_I("schema", STORE_SQLITE_SCHEMA_VERSION), LOG_I("batch_max", s->batch_max),
	         LOG_I("queue_max", s->queue_max));
	*out = &s->base;
	s = NULL;
	rc = SB_OK;
out:
	if (s) {
		free(s->async);
		if (sync_init) {
			pthread_cond_destroy(&s->cv);
			pthread_mutex_destroy(&s->mu);
		}
	}
	sq_store_free(s);
	return rc;
}

static void sq_close(struct store *base)
{
	struct sq_store *s = (struct sq_store *)base;

	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->closing = true; /* from here every new operation is SB_ERR_CLOSED */
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	/* The writer runs what is queued, closes the database and exits. */
	pthread_join(s->writer, NULL);
	sq_deliver(s);

	s->async->handle.data = NULL;
	uv_close((uv_handle_t *)&s->async->handle, sq_async_free);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	log_info("store", "closed", LOG_S("path", s->path));
	sq_store_free(s);
}

static int sq_cron_job_put(struct store *base, const struct store_cron_job *j, store_done_cb cb,
                           void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_INVAL;
	if (!j || !j->id || !j->spec || !j->state || !j->source)
		goto out;
	if ((rc = sq_op_new(SQ_OP_CRON_PUT, ud, &op)) != SB_OK)
		goto out;
	op->cb.done = cb;
	op->cj.created_at = j->created_at;
	if ((rc = sq_op_strdup(op, j->id, &op->cj.id)) != SB_OK ||
	    (rc = sq_op_strdup(op, j->spec, &op->cj.spec)) != SB_OK ||
	    (rc = sq_op_strdup(op, j->state, &op->cj.state)) != SB_OK ||
	    (rc = sq_op_strdup(op, j->source, &op->cj.source)) != SB_OK)
		goto out;
	rc = sq_submit(s, op);
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

static int sq_cron_job_delete(struct store *base, const char *id, store_done_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_INVAL;
	if (!id)
		goto out;
	if ((rc = sq_op_new(SQ_OP_CRON_DELETE, ud, &op)) != SB_OK)
		goto out;
	op->cb.done = cb;
	if ((rc = sq_op_strdup(op, id, &op->cj.id)) != SB_OK)
		goto out;
	rc = sq_submit(s, op);
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

static int sq_cron_job_list(struct store *base, store_cron_jobs_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	if (rc != SB_OK)
		return rc;
	if ((rc = sq_op_new(SQ_OP_CRON_LIST, ud, &op)) != SB_OK)
		return rc;
	op->cb.cron_jobs = cb;
	return sq_submit(s, op);
}

static int sq_cron_run_add(struct store *base, const struct store_cron_run *r, size_t keep,
                           store_put_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_INVAL;
	if (!r || !r->job_id || !r->status || keep < 1 || keep > STORE_LIST_MAX)
		goto out;
	if ((rc = sq_op_new(SQ_OP_CRON_RUN_ADD, ud, &op)) != SB_OK)
		goto out;
	op->cb.put = cb;
	op->max = keep;
	op->cr = *r;
	if ((rc = sq_op_strdup(op, r->job_id, &op->cr.job_id)) != SB_OK ||
	    (rc = sq_op_strdup(op, r->status, &op->cr.status)) != SB_OK ||
	    (rc = sq_op_strdup(op, r->detail, &op->cr.detail)) != SB_OK ||
	    (rc = sq_op_strdup(op, r->session_key, &op->cr.session_key)) != SB_OK)
		goto out;
	rc = sq_submit(s, op);
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

static int sq_cron_run_list(struct store *base, const char *job_id, size_t limit,
                            store_cron_runs_cb cb, void *ud)
{
	struct sq_store *s = (struct sq_store *)base;
	struct sq_op *op = NULL;
	int rc = sq_admit(s);

	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_INVAL;
	if (limit < 1 || limit > STORE_LIST_MAX)
		goto out;
	if ((rc = sq_op_new(SQ_OP_CRON_RUN_LIST, ud, &op)) != SB_OK)
		goto out;
	op->cb.cron_runs = cb;
	op->max = limit;
	if ((rc = sq_op_strdup(op, job_id, &op->cr.job_id)) != SB_OK)
		goto out;
	rc = sq_submit(s, op);
	op = NULL;
out:
	sq_op_free(op);
	return rc;
}

const struct store_ops store_sqlite_ops = {
    .name = "sqlite",
    .open = sq_open,
    .close = sq_close,
    .inbox_put = sq_inbox_put,
    .inbox_claim = sq_inbox_claim,
    .inbox_done = sq_inbox_done,
    .inbox_release = sq_inbox_release,
    .outbox_put = sq_outbox_put,
    .outbox_claim_due = sq_outbox_claim_due,
    .outbox_done = sq_outbox_done,
    .outbox_failed = sq_outbox_failed,
    .kv_get = sq_kv_get,
    .kv_put = sq_kv_put,
    .session_get = sq_session_get,
    .session_put = sq_session_put,
    .stats = sq_stats,
    .recover = sq_recover,
    .pairing_request = sq_pairing_request,
    .pairing_list = sq_pairing_list,
    .pairing_approve = sq_pairing_approve,
    .pairing_deny = sq_pairing_deny,
    .allow_check = sq_allow_check,
    .allow_list = sq_allow_list,
    .allow_remove = sq_allow_remove,
    .session_list = sq_session_list,
    .device_request = sq_device_request,
    .device_get = sq_device_get,
    .device_list = sq_device_list,
    .device_approve = sq_device_approve,
    .device_set_token = sq_device_set_token,
    .device_revoke = sq_device_revoke,
    .cron_job_put = sq_cron_job_put,
    .cron_job_delete = sq_cron_job_delete,
    .cron_job_list = sq_cron_job_list,
    .cron_run_add = sq_cron_run_add,
    .cron_run_list = sq_cron_run_list,
};
