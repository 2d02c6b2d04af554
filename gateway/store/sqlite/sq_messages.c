/*
 * sq_messages.c - the inbox and the outbox in SQLite (writer thread): puts
 * that dedupe, claims with leases, done/failed marks, start-up recovery and
 * the counts of what is pending.
 */
#include <stdlib.h>

#include "gateway/core/err.h"
#include "gateway/store/sqlite/sq.h"

static const char SQ_INBOX_INSERT[] =
    "INSERT INTO inbox (channel, account, dedupe_key, payload, state, lease_until, attempts,"
    " received_at) VALUES (?1, ?2, ?3, ?4, CASE WHEN ?6 > 0 THEN 'claimed' ELSE 'pending' END,"
    " CASE WHEN ?6 > 0 THEN ?5 + ?6 END, CASE WHEN ?6 > 0 THEN 1 ELSE 0 END, ?5)"
    " ON CONFLICT (channel, account, dedupe_key) DO NOTHING";
static const char SQ_INBOX_FIND[] =
    "SELECT id FROM inbox WHERE channel = ?1 AND account = ?2 AND dedupe_key = ?3";
/* The claim indexes (schema 7) hold only the rows whose state is pending
 * or claimed: every statement that looks for such rows says so in those
 * words, so that SQLite may use them. */
#define SQ_LIVE "state IN ('pending', 'claimed')"
/* ?1 now, ?2 lease_until, ?3 max. RETURNING order is unspecified: the caller
 * sorts. attempts comes back already incremented. */
static const char SQ_INBOX_CLAIM[] =
    "UPDATE inbox SET state = 'claimed', lease_until = ?2, attempts = attempts + 1"
    " WHERE id IN (SELECT id FROM inbox WHERE " SQ_LIVE " AND (state = 'pending'"
    "  OR (state = 'claimed' AND lease_until < ?1)) ORDER BY id LIMIT ?3)"
    " RETURNING id, channel, account, dedupe_key, payload, attempts, received_at";
static const char SQ_INBOX_DONE[] = "UPDATE inbox SET state = 'done', done_at = ?2,"
                                    " lease_until = NULL WHERE id = ?1";
static const char SQ_INBOX_RELEASE[] = "UPDATE inbox SET state = 'pending', lease_until = NULL"
                                       " WHERE id = ?1 AND state = 'claimed'";
static const char SQ_RECOVER_INBOX[] = "UPDATE inbox SET state = 'pending', lease_until = NULL"
                                       " WHERE " SQ_LIVE " AND state = 'claimed'";
static const char SQ_RECOVER_OUTBOX[] =
    "UPDATE outbox SET state = 'pending', lease_until = NULL,"
    " due_at = MIN(due_at, ?1) WHERE " SQ_LIVE " AND state = 'claimed'";
static const char SQ_OUTBOX_INSERT[] =
    "INSERT INTO outbox (idempotency_key, channel, account, target, payload, state,"
    " lease_until, attempts, due_at, inbox_id, created_at)"
    " VALUES (?1, ?2, ?3, ?4, ?5, CASE WHEN ?9 > 0 THEN 'claimed' ELSE 'pending' END,"
    " CASE WHEN ?9 > 0 THEN ?8 + ?9 END, CASE WHEN ?9 > 0 THEN 1 ELSE 0 END, ?6, ?7, ?8)"
    " ON CONFLICT (idempotency_key) DO NOTHING";
static const char SQ_INBOX_REPLY[] =
    "SELECT i.state, (SELECT o.payload FROM outbox o WHERE o.inbox_id = i.id ORDER BY o.id"
    " LIMIT 1) FROM inbox i WHERE i.id = ?1";
static const char SQ_OUTBOX_FIND[] = "SELECT id FROM outbox WHERE idempotency_key = ?1";
static const char SQ_OUTBOX_CLAIM[] =
    "UPDATE outbox SET state = 'claimed', lease_until = ?2, attempts = attempts + 1"
    " WHERE id IN (SELECT id FROM outbox WHERE " SQ_LIVE " AND ((state = 'pending'"
    "  AND due_at <= ?1) OR (state = 'claimed' AND lease_until < ?1)) ORDER BY due_at, id"
    "  LIMIT ?3)"
    " RETURNING id, idempotency_key, channel, account, target, payload, attempts,"
    " due_at, inbox_id";
static const char SQ_OUTBOX_DONE[] = "UPDATE outbox SET state = 'sent', channel_msg_id = ?2,"
                                     " sent_at = ?3, lease_until = NULL WHERE id = ?1";
/* A late failure report never turns a sent entry back. */
static const char SQ_OUTBOX_RETRY[] = "UPDATE outbox SET state = 'pending', due_at = ?2,"
                                      " last_error = ?3, lease_until = NULL"
                                      " WHERE id = ?1 AND state <> 'sent'";
static const char SQ_OUTBOX_FAIL[] = "UPDATE outbox SET state = 'failed', last_error = ?2,"
                                     " lease_until = NULL WHERE id = ?1 AND state <> 'sent'";
static const char SQ_STATS_INBOX[] = "SELECT count(*) FROM inbox WHERE " SQ_LIVE;
static const char SQ_STATS_OUTBOX[] = "SELECT count(*) FROM outbox WHERE " SQ_LIVE;

/* Reads the id of the row a put found already there (the ON CONFLICT). */
static int sq_find_id(struct sq_store *s, sqlite3_stmt *st, const char *what, int64_t *id)
{
	int src = sqlite3_step(st);

	if (src != SQLITE_ROW)
		return src == SQLITE_DONE ? SB_ERR_STORE : sq_rc(s, src, what);
	*id = sqlite3_column_int64(st, 0);
	return SB_OK;
}

/* Steps an UPDATE of one entry by id: no row touched is SB_ERR_NOTFOUND. */
static int sq_update_one(struct sq_store *s, sqlite3_stmt *st, const char *what)
{
	int changes = 0;
	int rc = sq_step_update(s, st, what, &changes);

	if (rc == SB_OK && changes == 0)
		rc = SB_ERR_NOTFOUND;
	return rc;
}

/* ---- inbox ---- */

int sq_run_inbox_put(struct sq_store *s, struct store_op *op)
{
	struct store_args_inbox_put *a = &op->a.inbox_put;
	sqlite3_stmt *st = NULL;
	int changes = 0;
	int rc = sq_stmt(s, SQ_INBOX_INSERT, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, a->m.channel);
	sq_bind_text(st, 2, a->m.account);
	sq_bind_text(st, 3, a->m.dedupe_key);
	sq_bind_text(st, 4, a->m.payload);
	sqlite3_bind_int64(st, 5, clock_wall_ms());
	sqlite3_bind_int64(st, 6, a->m.claim_lease_ms);
	rc = sq_step_update(s, st, "inbox_put", &changes);
	if (rc != SB_OK)
		goto out;
	if (changes == 1) {
		a->id = sqlite3_last_insert_rowid(s->db);
		a->duplicate = false;
		goto out;
	}
	sq_finish(st);
	rc = sq_stmt(s, SQ_INBOX_FIND, &st);
	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, a->m.channel);
	sq_bind_text(st, 2, a->m.account);
	sq_bind_text(st, 3, a->m.dedupe_key);
	if ((rc = sq_find_id(s, st, "inbox_put", &a->id)) != SB_OK)
		goto out;
	a->duplicate = true;
out:
	sq_finish(st);
	return rc;
}

static int sq_cmp_inbox(const void *a, const void *b)
{
	const struct store_inbox_item *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

int sq_run_inbox_claim(struct sq_store *s, struct store_op *op)
{
	struct store_args_inbox_claim *a = &op->a.inbox_claim;
	sqlite3_stmt *st = NULL;
	int64_t now = clock_wall_ms();
	void *items = NULL;
	int src;
	int rc = store_op_calloc(op, a->max, sizeof *a->items, &items);

	if (rc != SB_OK)
		goto out;
	a->items = items;
	rc = sq_stmt(s, SQ_INBOX_CLAIM, &st);
	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, now);
	sqlite3_bind_int64(st, 2, now + a->lease_ms);
	sqlite3_bind_int64(st, 3, (int64_t)a->max);
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_inbox_item *it;

		if (a->n == a->max) {
			rc = SB_ERR_STORE; /* LIMIT broken: never acknowledge more */
			goto out;
		}
		it = &a->items[a->n++];
		it->id = sqlite3_column_int64(st, 0);
		if ((rc = sq_column(op, st, 1, &it->channel)) != SB_OK ||
		    (rc = sq_column(op, st, 2, &it->account)) != SB_OK ||
		    (rc = sq_column(op, st, 3, &it->dedupe_key)) != SB_OK ||
		    (rc = sq_column(op, st, 4, &it->payload)) != SB_OK)
			goto out;
		/* The column holds this claim too; callers see earlier ones. */
		it->attempts = sqlite3_column_int(st, 5) - 1;
		it->received_at = sqlite3_column_int64(st, 6);
	}
	rc = sq_rc(s, src, "inbox_claim");
	if (rc != SB_OK)
		goto out;
	qsort(a->items, a->n, sizeof *a->items, sq_cmp_inbox);
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
	int64_t now = clock_wall_ms();
	int changes = 0;
	int rc = sq_stmt(s, SQ_OUTBOX_INSERT, &st);

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
	sqlite3_bind_int64(st, 9, m->claim_lease_ms);
	rc = sq_step_update(s, st, "outbox_put", &changes);
	if (rc != SB_OK)
		goto out;
	if (changes == 1) {
		*id = sqlite3_last_insert_rowid(s->db);
		*duplicate = false;
		goto out;
	}
	sq_finish(st);
	rc = sq_stmt(s, SQ_OUTBOX_FIND, &st);
	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, m->idempotency_key);
	if ((rc = sq_find_id(s, st, "outbox_put", id)) != SB_OK)
		goto out;
	*duplicate = true;
out:
	sq_finish(st);
	return rc;
}

int sq_run_inbox_done(struct sq_store *s, struct store_op *op)
{
	struct store_args_inbox_done *a = &op->a.inbox_done;
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, SQ_INBOX_DONE, &st);

	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, a->inbox_id);
	sqlite3_bind_int64(st, 2, clock_wall_ms());
	rc = sq_update_one(s, st, "inbox_done");
	sq_finish(st);
	st = NULL;
	if (rc != SB_OK)
		goto out;
	if (a->items_cb && a->n) {
		void *items = NULL;

		if ((rc = store_op_calloc(op, a->n, sizeof *a->claimed, &items)) != SB_OK)
			goto out;
		a->claimed = items;
	}
	for (size_t i = 0; i < a->n; i++) {
		const struct store_outbox_new *m = &a->replies[i];
		int64_t id;
		bool dup;

		rc = sq_outbox_insert(s, m, a->inbox_id, &id, &dup);
		if (rc != SB_OK)
			goto out;
		if (a->claimed && !dup && m->claim_lease_ms > 0) {
			struct store_outbox_item *it = &a->claimed[a->n_claimed++];

			it->id = id;
			it->idempotency_key = m->idempotency_key;
			it->channel = m->channel;
			it->account = m->account;
			it->target = m->target;
			it->payload = m->payload;
			it->attempts = 0;
			it->due_at = m->due_at;
			it->inbox_id = m->inbox_id > 0 ? m->inbox_id : a->inbox_id;
		}
	}
out:
	sq_finish(st);
	return rc;
}

int sq_run_inbox_release(struct sq_store *s, struct store_op *op)
{
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, SQ_INBOX_RELEASE, &st);

	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, op->a.inbox_release.inbox_id);
	rc = sq_update_one(s, st, "inbox_release");
out:
	sq_finish(st);
	return rc;
}

/* ---- outbox ---- */

int sq_run_inbox_reply(struct sq_store *s, struct store_op *op)
{
	struct store_args_inbox_reply *a = &op->a.inbox_reply;
	sqlite3_stmt *st = NULL;
	int src;
	int rc = sq_stmt(s, SQ_INBOX_REPLY, &st);

	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, a->inbox_id);
	src = sqlite3_step(st);
	if (src == SQLITE_DONE) {
		rc = SB_ERR_NOTFOUND;
		goto out;
	}
	if (src != SQLITE_ROW) {
		rc = sq_rc(s, src, "inbox_reply");
		goto out;
	}
	if ((rc = sq_column(op, st, 0, &a->state)) == SB_OK)
		rc = sq_column(op, st, 1, &a->payload); /* NULL: no reply */
out:
	sq_finish(st);
	return rc;
}

int sq_run_outbox_put(struct sq_store *s, struct store_op *op)
{
	struct store_args_outbox_put *a = &op->a.outbox_put;

	return sq_outbox_insert(s, &a->m, 0, &a->id, &a->duplicate);
}

static int sq_cmp_outbox(const void *a, const void *b)
{
	const struct store_outbox_item *x = a, *y = b;

	if (x->due_at != y->due_at)
		return (x->due_at > y->due_at) - (x->due_at < y->due_at);
	return (x->id > y->id) - (x->id < y->id);
}

int sq_run_outbox_claim_due(struct sq_store *s, struct store_op *op)
{
	struct store_args_outbox_claim_due *a = &op->a.outbox_claim_due;
	sqlite3_stmt *st = NULL;
	int64_t now = clock_wall_ms();
	void *items = NULL;
	int src;
	int rc = store_op_calloc(op, a->max, sizeof *a->items, &items);

	if (rc != SB_OK)
		goto out;
	a->items = items;
	rc = sq_stmt(s, SQ_OUTBOX_CLAIM, &st);
	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, now);
	sqlite3_bind_int64(st, 2, now + a->lease_ms);
	sqlite3_bind_int64(st, 3, (int64_t)a->max);
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_outbox_item *it;

		if (a->n == a->max) {
			rc = SB_ERR_STORE;
			goto out;
		}
		it = &a->items[a->n++];
		it->id = sqlite3_column_int64(st, 0);
		if ((rc = sq_column(op, st, 1, &it->idempotency_key)) != SB_OK ||
		    (rc = sq_column(op, st, 2, &it->channel)) != SB_OK ||
		    (rc = sq_column(op, st, 3, &it->account)) != SB_OK ||
		    (rc = sq_column(op, st, 4, &it->target)) != SB_OK ||
		    (rc = sq_column(op, st, 5, &it->payload)) != SB_OK)
			goto out;
		it->attempts = sqlite3_column_int(st, 6) - 1;
		it->due_at = sqlite3_column_int64(st, 7);
		it->inbox_id = sqlite3_column_int64(st, 8); /* NULL reads as 0 */
	}
	rc = sq_rc(s, src, "outbox_claim_due");
	if (rc != SB_OK)
		goto out;
	qsort(a->items, a->n, sizeof *a->items, sq_cmp_outbox);
out:
	sq_finish(st);
	return rc;
}

int sq_run_outbox_done(struct sq_store *s, struct store_op *op)
{
	const struct store_args_outbox_done *a = &op->a.outbox_done;
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, SQ_OUTBOX_DONE, &st);

	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, a->id);
	sq_bind_text(st, 2, a->channel_msg_id);
	sqlite3_bind_int64(st, 3, clock_wall_ms());
	rc = sq_update_one(s, st, "outbox_done");
out:
	sq_finish(st);
	return rc;
}

int sq_run_outbox_failed(struct sq_store *s, struct store_op *op)
{
	const struct store_args_outbox_failed *a = &op->a.outbox_failed;
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, a->retry_at >= 0 ? SQ_OUTBOX_RETRY : SQ_OUTBOX_FAIL, &st);

	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, a->id);
	if (a->retry_at >= 0) {
		sqlite3_bind_int64(st, 2, a->retry_at);
		sq_bind_text(st, 3, a->error);
	} else {
		sq_bind_text(st, 2, a->error);
	}
	rc = sq_update_one(s, st, "outbox_failed");
out:
	sq_finish(st);
	return rc;
}

/* ---- both ---- */

static int sq_count(struct sq_store *s, const char *sql, int64_t *out)
{
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, sql, &st);

	if (rc == SB_OK)
		rc = sq_step_count(s, st, "stats", out);
	sq_finish(st);
	return rc;
}

int sq_run_stats(struct sq_store *s, struct store_op *op)
{
	struct store_stats *st = &op->a.stats.st;
	int rc;

	if ((rc = sq_count(s, SQ_STATS_INBOX, &st->inbox_pending)) != SB_OK ||
	    (rc = sq_count(s, SQ_STATS_OUTBOX, &st->outbox_pending)) != SB_OK)
		return rc;
	st->queue_depth = (int64_t)sq_queued(s);
	return SB_OK;
}

/* Releases every claim: only one gateway uses the store (gateway.lock), so
 * whatever is claimed at start-up was claimed by a process that died. */
int sq_run_recover(struct sq_store *s, struct store_op *op)
{
	struct store_args_recover *a = &op->a.recover;
	sqlite3_stmt *st = NULL;
	int rc, src;

	if ((rc = sq_stmt(s, SQ_RECOVER_INBOX, &st)) != SB_OK)
		return rc;
	src = sqlite3_step(st);
	rc = sq_rc(s, src, "recover inbox");
	a->inbox = sqlite3_changes(s->db);
	sq_finish(st);
	if (rc != SB_OK)
		return rc;
	if ((rc = sq_stmt(s, SQ_RECOVER_OUTBOX, &st)) != SB_OK)
		return rc;
	sqlite3_bind_int64(st, 1, clock_wall_ms());
	src = sqlite3_step(st);
	rc = sq_rc(s, src, "recover outbox");
	a->outbox = sqlite3_changes(s->db);
	sq_finish(st);
	return rc;
}
