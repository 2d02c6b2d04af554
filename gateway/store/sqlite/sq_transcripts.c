/*
 * sq_transcripts.c - transcript bytes kept until their file is synced, in
 * SQLite (writer thread).
 */
#include "gateway/core/err.h"
#include "gateway/store/sqlite/sq.h"

static const char SQ_TRANSCRIPT_PUT[] =
    "INSERT INTO transcript_pending (path, file_offset, created_at, bytes) VALUES (?1, ?2, ?3, ?4)";
static const char SQ_TRANSCRIPT_TRIM[] =
    "DELETE FROM transcript_pending WHERE id > ?1 AND id <= ?2";
static const char SQ_TRANSCRIPT_LIST[] =
    "SELECT id, path, file_offset, bytes FROM transcript_pending"
    " ORDER BY id LIMIT ?1";

int sq_run_transcript_put(struct sq_store *s, struct store_op *op)
{
	struct store_args_transcript_put *a = &op->a.transcript_put;
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, SQ_TRANSCRIPT_PUT, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, a->l.path);
	sqlite3_bind_int64(st, 2, a->l.offset);
	sqlite3_bind_int64(st, 3, clock_wall_ms());
	sqlite3_bind_blob64(st, 4, a->l.bytes, (sqlite3_uint64)a->l.len, SQLITE_STATIC);
	rc = sq_step_update(s, st, "transcript_put", NULL);
	if (rc == SB_OK)
		a->id = sqlite3_last_insert_rowid(s->db);
out:
	sq_finish(st);
	return rc;
}

int sq_run_transcript_trim(struct sq_store *s, struct store_op *op)
{
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, SQ_TRANSCRIPT_TRIM, &st);

	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, op->a.transcript_trim.after);
	sqlite3_bind_int64(st, 2, op->a.transcript_trim.upto);
	rc = sq_step_update(s, st, "transcript_trim", NULL);
out:
	sq_finish(st);
	return rc;
}

static int sq_transcript_row(struct store_op *op, sqlite3_stmt *st, void *elem)
{
	struct store_transcript_lines *e = elem;
	const void *b;
	int rc;

	e->id = sqlite3_column_int64(st, 0);
	if ((rc = sq_column(op, st, 1, &e->path)) != SB_OK)
		return rc;
	e->offset = sqlite3_column_int64(st, 2);
	b = sqlite3_column_blob(st, 3);
	e->len = (size_t)sqlite3_column_bytes(st, 3);
	if (!b && e->len)
		return SB_ERR_NOMEM;
	return store_op_memdup(op, b ? b : "", e->len, &e->bytes);
}

int sq_run_transcript_list(struct sq_store *s, struct store_op *op)
{
	struct store_args_transcript_list *a = &op->a.transcript_list;
	sqlite3_stmt *st = NULL;
	void *v = NULL;
	int rc = sq_stmt(s, SQ_TRANSCRIPT_LIST, &st);

	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)STORE_LIST_MAX);
	rc = sq_rows(s, op, st, "transcript_list", sizeof *a->v, sq_transcript_row, &v, &a->n);
	a->v = v;
out:
	sq_finish(st);
	return rc;
}
