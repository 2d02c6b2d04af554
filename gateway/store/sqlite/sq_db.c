/*
 * sq_db.c - statements of the SQLite backend: prepared once per connection
 * and cached by the address of their SQL text, so that each file keeps its
 * own SQL next to the code that runs it; binding, stepping, copying rows.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gateway/core/err.h"
#include "gateway/core/log.h"
#include "gateway/store/sqlite/sq.h"

int sq_rc(struct sq_store *s, int src, const char *what)
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

/* ---- the statement cache ---- */

static size_t sq_slot(const char *sql, size_t cap)
{
	uint64_t h = (uint64_t)(uintptr_t)sql;

	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return (size_t)h & (cap - 1);
}

/* Doubles the table (16 slots at first); kept at most half full. */
static int sq_stmts_grow(struct sq_store *s)
{
	size_t cap = s->capstmts ? s->capstmts * 2 : 16;
	struct sq_cached *t = calloc(cap, sizeof *t);

	if (!t)
		return SB_ERR_NOMEM;
	for (size_t i = 0; i < s->capstmts; i++) {
		size_t j;

		if (!s->stmts[i].sql)
			continue;
		for (j = sq_slot(s->stmts[i].sql, cap); t[j].sql; j = (j + 1) & (cap - 1))
			;
		t[j] = s->stmts[i];
	}
	free(s->stmts);
	s->stmts = t;
	s->capstmts = cap;
	return SB_OK;
}

int sq_stmt(struct sq_store *s, const char *sql, sqlite3_stmt **out)
{
	size_t i;
	int src;

	*out = NULL;
	if (s->nstmts * 2 >= s->capstmts && sq_stmts_grow(s) != SB_OK)
		return SB_ERR_NOMEM;
	for (i = sq_slot(sql, s->capstmts); s->stmts[i].sql; i = (i + 1) & (s->capstmts - 1))
		if (s->stmts[i].sql == sql) {
			*out = s->stmts[i].st;
			return SB_OK;
		}
	src = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->stmts[i].st, NULL);
	if (src != SQLITE_OK) {
		s->stmts[i].st = NULL;
		return sq_rc(s, src, "prepare");
	}
	s->stmts[i].sql = sql;
	s->nstmts++;
	*out = s->stmts[i].st;
	return SB_OK;
}

void sq_stmts_free(struct sq_store *s)
{
	for (size_t i = 0; i < s->capstmts; i++)
		sqlite3_finalize(s->stmts[i].st);
	free(s->stmts);
	s->stmts = NULL;
	s->nstmts = s->capstmts = 0;
}

int sq_exec(struct sq_store *s, const char *sql)
{
	sqlite3_stmt *st;
	int rc = sq_stmt(s, sql, &st);

	if (rc != SB_OK)
		return rc;
	rc = sq_rc(s, sqlite3_step(st), sql);
	sqlite3_reset(st);
	return rc;
}

void sq_finish(sqlite3_stmt *st)
{
	if (st) {
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
	}
}

/* ---- binding and stepping ---- */

int sq_bind_text(sqlite3_stmt *st, int i, const char *v)
{
	return v ? sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

int sq_bind_id(sqlite3_stmt *st, int i, int64_t v)
{
	return v > 0 ? sqlite3_bind_int64(st, i, v) : sqlite3_bind_null(st, i);
}

int sq_step_update(struct sq_store *s, sqlite3_stmt *st, const char *what, int *changes)
{
	int src = sqlite3_step(st);

	if (src != SQLITE_DONE)
		return sq_rc(s, src == SQLITE_ROW ? SQLITE_MISUSE : src, what);
	if (changes)
		*changes = sqlite3_changes(s->db);
	return SB_OK;
}

int sq_step_count(struct sq_store *s, sqlite3_stmt *st, const char *what, int64_t *out)
{
	int src = sqlite3_step(st);

	if (src != SQLITE_ROW)
		return sq_rc(s, src == SQLITE_DONE ? SQLITE_MISUSE : src, what);
	*out = sqlite3_column_int64(st, 0);
	return SB_OK;
}

int sq_column(struct store_op *op, sqlite3_stmt *st, int col, const char **out)
{
	const unsigned char *t;

	*out = NULL;
	if (sqlite3_column_type(st, col) == SQLITE_NULL)
		return SB_OK;
	t = sqlite3_column_text(st, col);
	if (!t)
		return SB_ERR_NOMEM; /* a non-NULL value failed to convert */
	return store_op_memdup(op, t, (size_t)sqlite3_column_bytes(st, col), out);
}

int sq_rows(struct sq_store *s, struct store_op *op, sqlite3_stmt *st, const char *what,
            size_t size, int (*row)(struct store_op *op, sqlite3_stmt *st, void *elem), void **v,
            size_t *n)
{
	char *arr = NULL;
	size_t len = 0, cap = 0;
	int src, rc = SB_OK;

	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		char *elem;

		if (len == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			char *na = realloc(arr, ncap * size);

			if (!na) {
				rc = SB_ERR_NOMEM;
				goto out;
			}
			arr = na;
			cap = ncap;
		}
		elem = arr + len++ * size;
		memset(elem, 0, size);
		if ((rc = row(op, st, elem)) != SB_OK)
			goto out;
	}
	rc = sq_rc(s, src, what);
out:
	/* The array is the operation's from here, whatever happened (a failed
	 * keep frees it). */
	if (arr) {
		int krc = store_op_keep(op, arr);

		if (rc == SB_OK)
			rc = krc;
	}
	if (rc == SB_OK) {
		*v = arr;
		*n = len;
	}
	return rc;
}
