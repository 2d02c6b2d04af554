/*
 * sq.h - the SQLite backend's insides, shared by its files:
 *   sq_writer.c    the writer thread, batches and group commit, open/close
 *   sq_schema.c    the connection's settings and the migrations
 *   sq_db.c        statements (cached per connection), binding, rows
 *   sq_messages.c  inbox and outbox
 *   sq_state.c     kv and sessions
 *   sq_identity.c  pairing, the allow list, devices
 *   sq_cron.c      cron jobs and runs
 *   sq_vfs.c       the VFS: the WAL's frames gathered into one write per commit
 *
 * Threads. The loop thread turns each call into an operation (struct
 * store_op, owning a copy of every string it was given) and sq_submit appends
 * it to s->queue under s->mu and signals s->cv. The writer thread owns the
 * sqlite3 connection from the moment it starts until it closes it: it takes
 * up to batch_max queued operations, runs them in one BEGIN IMMEDIATE ...
 * COMMIT with each operation in its own savepoint, moves them to s->done and
 * wakes the loop with uv_async_send. The async callback (loop thread) hands
 * each operation to store_op_finish in order, which runs its callback and
 * frees it.
 *
 * Durability. An operation's result reaches its callback only after the
 * COMMIT of its batch returned; if BEGIN or COMMIT fails, or the transaction
 * is lost mid-batch, every operation of the batch reports SB_ERR_STORE.
 *
 * Crash recovery. One gateway owns a home (gateway.lock), so at start-up the
 * daemon runs store_recover, which makes every claimed inbox and outbox entry
 * pending again: whatever is claimed then was claimed by a process that died.
 * Leases (lease_until) are what a claim would wait for without that step;
 * they are for a backend shared by several gateways, which renews them.
 */
#ifndef SB_GATEWAY_STORE_SQLITE_SQ_H
#define SB_GATEWAY_STORE_SQLITE_SQ_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gateway/core/clock.h"
#include "gateway/store/store_backend.h"

/* The loop's handles live in their own allocation: uv_close completes on a
 * later loop iteration, after the store itself is gone. The async handle
 * brings finished work back; the check handle wakes the writer once per
 * loop iteration for everything submitted during it (so the operations one
 * event queues, such as a run's session update and its reply, share one
 * commit), and the idle handle, active while a wake-up is owed, keeps the
 * loop from blocking in poll before that check runs. */
struct sq_async {
	uv_async_t handle; /* first: the close callback frees through it */
	uv_check_t check;
	uv_idle_t idle;
	uv_timer_t lazy;  /* the latest a lazy operation waits for company */
	int open_handles; /* freed when the last one is closed */
};

/* A prepared statement, found by the address of its SQL text. */
struct ZSTD_CCtx_s;
struct ZSTD_CDict_s;

struct sq_cached {
	const char *sql;
	sqlite3_stmt *st;
};

struct sq_store {
	struct store base; /* first: struct store * converts to struct sq_store * */
	uv_loop_t *loop;
	char *path;
	size_t batch_max;
	/* SWITCHBOARD_TEST_STORE_DELAY_MS: each batch waits this long first,
	 * so that tests can hold an operation in flight. 0 in production. */
	unsigned test_delay_ms;

	/* Writer thread only (after open). */
	sqlite3 *db;
	struct sq_cached *stmts; /* open addressing, capstmts a power of 2 */
	size_t nstmts, capstmts;
	/* The transcripts' compressor and its digested dictionary
	 * (sq_transcripts.c); NULL until the first row. */
	struct ZSTD_CCtx_s *tzctx;
	struct ZSTD_CDict_s *tzdict;

	/* Loop thread only. */
	struct sq_async *async;
	bool wake_owed; /* submitted since the writer was last woken */

	pthread_t writer;
	bool writer_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* Guarded by mu. */
	bool closing;
	bool lazy_due; /* a lazy operation has waited its time: they all go next */
	struct store_op *queue_head, *queue_tail;
	size_t queued; /* operations waiting for the writer */
	struct store_op *done_head, *done_tail;
};

/* Frees what sq_transcripts.c keeps (writer thread, at close). */
void sq_transcripts_close(struct sq_store *s);

/* The runs: one per operation (store_backend.h), writer thread. Each returns
 * the operation's result code and fills its results. */
#define SQ_RUN_(K, n, f) int sq_run_##n(struct sq_store *s, struct store_op *op);
STORE_OPS(SQ_RUN_)
#undef SQ_RUN_

/* ---- sq_db.c: statements (writer thread, or the loop thread while opening) ---- */

/* Maps an SQLite result to the error enum, logging real failures. */
int sq_rc(struct sq_store *s, int src, const char *what);
/* The prepared statement of sql, which must be a string of static duration:
 * the cache knows it by its address. Reset it with sq_finish after use. */
int sq_stmt(struct sq_store *s, const char *sql, sqlite3_stmt **out);
/* Runs a statement without parameters or rows (transaction control). */
int sq_exec(struct sq_store *s, const char *sql);
/* Resets a statement and clears its bindings; NULL is a no-op. */
void sq_finish(sqlite3_stmt *st);
/* Finalises every cached statement. */
void sq_stmts_free(struct sq_store *s);
/* Binds text that lives in the operation for the duration of the step
 * (NULL binds NULL). */
int sq_bind_text(sqlite3_stmt *st, int i, const char *v);
/* Binds an id, 0 meaning NULL. */
int sq_bind_id(sqlite3_stmt *st, int i, int64_t v);
/* Steps a statement that returns no row; *changes (may be NULL) gets
 * sqlite3_changes. */
int sq_step_update(struct sq_store *s, sqlite3_stmt *st, const char *what, int *changes);
/* Steps a statement that returns one row of one integer (a count). */
int sq_step_count(struct sq_store *s, sqlite3_stmt *st, const char *what, int64_t *out);
/* Copies a text column (NULL stays NULL) into op's memory. */
int sq_column(struct store_op *op, sqlite3_stmt *st, int col, const char **out);
/* Steps st to its end, appending one element of size per row to a growing
 * array kept by op: row(op, st, element) fills each (zeroed) element.
 * *v and *n are the array and its length (meaningful on SB_OK). */
int sq_rows(struct sq_store *s, struct store_op *op, sqlite3_stmt *st, const char *what,
            size_t size, int (*row)(struct store_op *op, sqlite3_stmt *st, void *elem), void **v,
            size_t *n);

/* ---- sq_schema.c (loop thread, while opening) ---- */

/* Opens s->path, sets the connection up (WAL, synchronous=FULL, foreign
 * keys) and migrates it. */
int sq_schema_open(struct sq_store *s, int64_t busy_timeout_ms);
/* Finalises the statements and closes the connection; no connection is a
 * no-op. */
void sq_db_close(struct sq_store *s);

/* ---- sq_vfs.c ---- */

/* Registers (once per process, not as the default) the store's VFS over
 * the VFS named inner (NULL: SQLite's default): the inner one's files, with
 * a write-ahead log's consecutive writes passed on in one write per commit
 * (sq_vfs.c). Returns its name for sqlite3_open_v2, or NULL (inner not
 * found, or a different inner registered before). Any thread. */
const char *sq_vfs_register(const char *inner);
/* How many times SQLite published a commit to other connections (the
 * shared memory's barrier) while frames of it were still buffered: 0
 * unless SQLite's order of writes is not the one sq_vfs.c relies on. For
 * tests. Any thread. */
unsigned long sq_vfs_late_barriers(void);

/* ---- sq_writer.c ---- */

/* The number of operations waiting for the writer (for stats). Any thread. */
size_t sq_queued(struct sq_store *s);

#endif
