/*
 * sq_state.c - keyed state in SQLite (writer thread): the kv table and
 * sessions.
 */
#include "gateway/core/err.h"
#include "gateway/store/sqlite/sq.h"

static const char SQ_KV_GET[] = "SELECT value FROM kv WHERE ns = ?1 AND key = ?2";
static const char SQ_KV_DELETE[] = "DELETE FROM kv WHERE ns = ?1 AND key = ?2";
static const char SQ_KV_PUT[] = "INSERT INTO kv (ns, key, value, updated_at) VALUES (?1, ?2, ?3,"
                                " ?4) ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value,"
                                " updated_at = excluded.updated_at";
static const char SQ_SESSION_GET[] = "SELECT agent_id, session_id, meta, updated_at FROM sessions"
                                     " WHERE key = ?1";
static const char SQ_SESSION_PUT[] =
    "INSERT INTO sessions (key, agent_id, session_id, meta, updated_at)"
    " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (key) DO UPDATE SET"
    " agent_id = excluded.agent_id, session_id = excluded.session_id,"
    " meta = COALESCE(excluded.meta, sessions.meta), updated_at = excluded.updated_at";
static const char SQ_SESSION_LIST[] =
    "SELECT key, agent_id, session_id, meta, updated_at FROM sessions"
    " WHERE (?1 IS NULL OR agent_id = ?1) ORDER BY updated_at DESC, key LIMIT ?2";

/* ---- kv ---- */

int sq_run_kv_get(struct sq_store *s, struct store_op *op)
{
	struct store_args_kv_get *a = &op->a.kv_get;
	sqlite3_stmt *st = NULL;
	int src;
	int rc = sq_stmt(s, SQ_KV_GET, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, a->ns);
	sq_bind_text(st, 2, a->key);
	src = sqlite3_step(st);
	if (src == SQLITE_DONE) {
		rc = SB_ERR_NOTFOUND;
		goto out;
	}
	if (src != SQLITE_ROW) {
		rc = sq_rc(s, src, "kv_get");
		goto out;
	}
	rc = sq_column(op, st, 0, &a->value);
out:
	sq_finish(st);
	return rc;
}

int sq_run_kv_put(struct sq_store *s, struct store_op *op)
{
	const struct store_args_kv_put *a = &op->a.kv_put;
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, a->value ? SQ_KV_PUT : SQ_KV_DELETE, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, a->ns);
	sq_bind_text(st, 2, a->key);
	if (a->value) {
		sq_bind_text(st, 3, a->value);
		sqlite3_bind_int64(st, 4, clock_wall_ms());
	}
	rc = sq_step_update(s, st, "kv_put", NULL);
out:
	sq_finish(st);
	return rc;
}

/* ---- sessions ---- */

int sq_run_session_get(struct sq_store *s, struct store_op *op)
{
	struct store_session *sess = &op->a.session_get.sess;
	sqlite3_stmt *st = NULL;
	int src;
	int rc = sq_stmt(s, SQ_SESSION_GET, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, sess->key);
	src = sqlite3_step(st);
	if (src == SQLITE_DONE) {
		rc = SB_ERR_NOTFOUND;
		goto out;
	}
	if (src != SQLITE_ROW) {
		rc = sq_rc(s, src, "session_get");
		goto out;
	}
	if ((rc = sq_column(op, st, 0, &sess->agent_id)) != SB_OK ||
	    (rc = sq_column(op, st, 1, &sess->session_id)) != SB_OK ||
	    (rc = sq_column(op, st, 2, &sess->meta)) != SB_OK)
		goto out;
	sess->updated_at = sqlite3_column_int64(st, 3);
out:
	sq_finish(st);
	return rc;
}

int sq_run_session_put(struct sq_store *s, struct store_op *op)
{
	const struct store_session *sess = &op->a.session_put.sess;
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, SQ_SESSION_PUT, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, sess->key);
	sq_bind_text(st, 2, sess->agent_id);
	sq_bind_text(st, 3, sess->session_id);
	sq_bind_text(st, 4, sess->meta);
	sqlite3_bind_int64(st, 5, sess->updated_at > 0 ? sess->updated_at : clock_wall_ms());
	rc = sq_step_update(s, st, "session_put", NULL);
out:
	sq_finish(st);
	return rc;
}

static int sq_session_row(struct store_op *op, sqlite3_stmt *st, void *elem)
{
	struct store_session *e = elem;
	int rc;

	if ((rc = sq_column(op, st, 0, &e->key)) != SB_OK ||
	    (rc = sq_column(op, st, 1, &e->agent_id)) != SB_OK ||
	    (rc = sq_column(op, st, 2, &e->session_id)) != SB_OK ||
	    (rc = sq_column(op, st, 3, &e->meta)) != SB_OK)
		return rc;
	e->updated_at = sqlite3_column_int64(st, 4);
	return SB_OK;
}

int sq_run_session_list(struct sq_store *s, struct store_op *op)
{
	struct store_args_session_list *a = &op->a.session_list;
	sqlite3_stmt *st = NULL;
	void *v = NULL;
	int rc = sq_stmt(s, SQ_SESSION_LIST, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, a->agent_id);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)a->limit);
	rc = sq_rows(s, op, st, "session_list", sizeof *a->v, sq_session_row, &v, &a->n);
	a->v = v;
out:
	sq_finish(st);
	return rc;
}
