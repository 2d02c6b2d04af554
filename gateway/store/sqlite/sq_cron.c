/*
 * sq_cron.c - cron jobs and their run history in SQLite (writer thread).
 */
#include "gateway/core/err.h"
#include "gateway/store/sqlite/sq.h"

static const char SQ_CRON_PUT[] =
    "INSERT INTO cron_jobs (id, spec, state, source, created_at, updated_at)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (id) DO UPDATE SET spec = excluded.spec,"
    " state = excluded.state, source = excluded.source, updated_at = excluded.updated_at";
static const char SQ_CRON_DELETE[] = "DELETE FROM cron_jobs WHERE id = ?1";
static const char SQ_CRON_DELETE_RUNS[] = "DELETE FROM cron_runs WHERE job_id = ?1";
static const char SQ_CRON_LIST[] = "SELECT id, spec, state, source, created_at, updated_at"
                                   " FROM cron_jobs ORDER BY created_at, id LIMIT ?1";
static const char SQ_CRON_RUN_INSERT[] =
    "INSERT INTO cron_runs (job_id, scheduled_at, started_at, finished_at, status, detail,"
    " session_key) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
static const char SQ_CRON_RUN_PRUNE[] =
    "DELETE FROM cron_runs WHERE job_id = ?1 AND id <= (SELECT id FROM cron_runs"
    " WHERE job_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)";
static const char SQ_CRON_RUN_LIST[] =
    "SELECT id, job_id, scheduled_at, started_at, finished_at, status, detail, session_key"
    " FROM cron_runs WHERE (?1 IS NULL OR job_id = ?1) ORDER BY id DESC LIMIT ?2";

int sq_run_cron_job_put(struct sq_store *s, struct store_op *op)
{
	const struct store_cron_job *j = &op->a.cron_job_put.j;
	sqlite3_stmt *st = NULL;
	int64_t now = clock_wall_ms();
	int rc = sq_stmt(s, SQ_CRON_PUT, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, j->id);
	sq_bind_text(st, 2, j->spec);
	sq_bind_text(st, 3, j->state);
	sq_bind_text(st, 4, j->source);
	sqlite3_bind_int64(st, 5, j->created_at > 0 ? j->created_at : now);
	sqlite3_bind_int64(st, 6, now);
	rc = sq_step_update(s, st, "cron_job_put", NULL);
out:
	sq_finish(st);
	return rc;
}

int sq_run_cron_job_delete(struct sq_store *s, struct store_op *op)
{
	const char *id = op->a.cron_job_delete.id;
	sqlite3_stmt *st = NULL;
	int changes = 0;
	int rc = sq_stmt(s, SQ_CRON_DELETE, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, id);
	rc = sq_step_update(s, st, "cron_job_delete", &changes);
	sq_finish(st);
	st = NULL;
	if (rc != SB_OK)
		goto out;
	if (changes == 0) {
		rc = SB_ERR_NOTFOUND;
		goto out;
	}
	if ((rc = sq_stmt(s, SQ_CRON_DELETE_RUNS, &st)) != SB_OK)
		goto out;
	sq_bind_text(st, 1, id);
	rc = sq_step_update(s, st, "cron_job_delete", NULL);
out:
	sq_finish(st);
	return rc;
}

static int sq_cron_job_row(struct store_op *op, sqlite3_stmt *st, void *elem)
{
	struct store_cron_job *e = elem;
	int rc;

	if ((rc = sq_column(op, st, 0, &e->id)) != SB_OK ||
	    (rc = sq_column(op, st, 1, &e->spec)) != SB_OK ||
	    (rc = sq_column(op, st, 2, &e->state)) != SB_OK ||
	    (rc = sq_column(op, st, 3, &e->source)) != SB_OK)
		return rc;
	e->created_at = sqlite3_column_int64(st, 4);
	e->updated_at = sqlite3_column_int64(st, 5);
	return SB_OK;
}

int sq_run_cron_job_list(struct sq_store *s, struct store_op *op)
{
	struct store_args_cron_job_list *a = &op->a.cron_job_list;
	sqlite3_stmt *st = NULL;
	void *v = NULL;
	int rc = sq_stmt(s, SQ_CRON_LIST, &st);

	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, STORE_LIST_MAX);
	rc = sq_rows(s, op, st, "cron_job_list", sizeof *a->v, sq_cron_job_row, &v, &a->n);
	a->v = v;
out:
	sq_finish(st);
	return rc;
}

int sq_run_cron_run_add(struct sq_store *s, struct store_op *op)
{
	struct store_args_cron_run_add *a = &op->a.cron_run_add;
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, SQ_CRON_RUN_INSERT, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, a->r.job_id);
	sqlite3_bind_int64(st, 2, a->r.scheduled_at);
	sqlite3_bind_int64(st, 3, a->r.started_at);
	sqlite3_bind_int64(st, 4, a->r.finished_at);
	sq_bind_text(st, 5, a->r.status);
	sq_bind_text(st, 6, a->r.detail);
	sq_bind_text(st, 7, a->r.session_key);
	if ((rc = sq_step_update(s, st, "cron_run_add", NULL)) != SB_OK)
		goto out;
	a->id = sqlite3_last_insert_rowid(s->db);
	sq_finish(st);
	st = NULL;
	if ((rc = sq_stmt(s, SQ_CRON_RUN_PRUNE, &st)) != SB_OK)
		goto out;
	sq_bind_text(st, 1, a->r.job_id);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)a->keep);
	rc = sq_step_update(s, st, "cron_run_prune", NULL);
out:
	sq_finish(st);
	return rc;
}

static int sq_cron_run_row(struct store_op *op, sqlite3_stmt *st, void *elem)
{
	struct store_cron_run *e = elem;
	int rc;

	e->id = sqlite3_column_int64(st, 0);
	if ((rc = sq_column(op, st, 1, &e->job_id)) != SB_OK ||
	    (rc = sq_column(op, st, 5, &e->status)) != SB_OK ||
	    (rc = sq_column(op, st, 6, &e->detail)) != SB_OK ||
	    (rc = sq_column(op, st, 7, &e->session_key)) != SB_OK)
		return rc;
	e->scheduled_at = sqlite3_column_int64(st, 2);
	e->started_at = sqlite3_column_int64(st, 3);
	e->finished_at = sqlite3_column_int64(st, 4);
	return SB_OK;
}

int sq_run_cron_run_list(struct sq_store *s, struct store_op *op)
{
	struct store_args_cron_run_list *a = &op->a.cron_run_list;
	sqlite3_stmt *st = NULL;
	void *v = NULL;
	int rc = sq_stmt(s, SQ_CRON_RUN_LIST, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, a->job_id);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)a->limit);
	rc = sq_rows(s, op, st, "cron_run_list", sizeof *a->v, sq_cron_run_row, &v, &a->n);
	a->v = v;
out:
	sq_finish(st);
	return rc;
}
