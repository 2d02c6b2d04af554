/*
 * sq_identity.c - who may talk to the gateway, in SQLite (writer thread):
 * pairing requests and their codes, the allow list, control-plane devices.
 */
#include <sodium.h>
#include <string.h>

#include "gateway/core/err.h"
#include "gateway/store/sqlite/sq.h"

static const char SQ_PAIR_EXPIRE[] = "DELETE FROM pairing_requests WHERE expires_at <= ?1";
static const char SQ_PAIR_FIND_SENDER[] =
    "SELECT code, created_at, expires_at FROM pairing_requests"
    " WHERE channel = ?1 AND account = ?2 AND sender_id = ?3 AND expires_at > ?4";
static const char SQ_PAIR_COUNT[] = "SELECT count(*) FROM pairing_requests"
                                    " WHERE channel = ?1 AND account = ?2 AND expires_at > ?3";
/* A code taken on the channel changes nothing; the caller draws again. */
static const char SQ_PAIR_INSERT[] =
    "INSERT INTO pairing_requests (channel, account, sender_id, code, created_at,"
    " expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING";
static const char SQ_PAIR_LIST[] =
    "SELECT channel, account, sender_id, code, created_at, expires_at"
    " FROM pairing_requests WHERE (?1 IS NULL OR channel = ?1) AND expires_at > ?2"
    " ORDER BY created_at, channel, account, sender_id LIMIT ?3";
static const char SQ_PAIR_CANDIDATES[] =
    "SELECT account, sender_id, code, created_at, expires_at"
    " FROM pairing_requests WHERE channel = ?1 AND expires_at > ?2";
static const char SQ_PAIR_DELETE[] = "DELETE FROM pairing_requests"
                                     " WHERE channel = ?1 AND account = ?2 AND sender_id = ?3";
static const char SQ_ALLOW_FIND[] = "SELECT 1 FROM allow_entries"
                                    " WHERE channel = ?1 AND account = ?2 AND sender_id = ?3";
static const char SQ_ALLOW_INSERT[] =
    "INSERT INTO allow_entries (channel, account, sender_id, approved_at)"
    " VALUES (?1, ?2, ?3, ?4) ON CONFLICT (channel, account, sender_id) DO NOTHING";
static const char SQ_ALLOW_LIST[] = "SELECT channel, account, sender_id, approved_at"
                                    " FROM allow_entries WHERE (?1 IS NULL OR channel = ?1)"
                                    " ORDER BY approved_at, channel, account, sender_id LIMIT ?2";
static const char SQ_ALLOW_DELETE[] = "DELETE FROM allow_entries WHERE channel = ?1"
                                      " AND (?2 IS NULL OR account = ?2) AND sender_id = ?3";

#define SQ_DEVICE_COLUMNS                                                                          \
	"device_id, public_key, state, client_id, platform, scopes, token_hash, remote_addr,"      \
	" created_at, approved_at, last_seen_at"

static const char SQ_DEV_EXPIRE[] = "DELETE FROM devices WHERE state = 'pending'"
                                    " AND created_at <= ?1";
static const char SQ_DEV_FIND[] = "SELECT " SQ_DEVICE_COLUMNS " FROM devices WHERE device_id = ?1";
static const char SQ_DEV_FIND_TOKEN[] = "SELECT " SQ_DEVICE_COLUMNS " FROM devices"
                                        " WHERE token_hash = ?1 AND state = 'approved'";
static const char SQ_DEV_COUNT_PENDING[] = "SELECT count(*) FROM devices WHERE state = 'pending'";
static const char SQ_DEV_DROP_OLDEST[] =
    "DELETE FROM devices WHERE device_id = (SELECT device_id FROM devices"
    " WHERE state = 'pending' ORDER BY created_at, device_id LIMIT 1)";
static const char SQ_DEV_INSERT[] =
    "INSERT INTO devices (device_id, public_key, state, client_id, platform, scopes,"
    " remote_addr, created_at, approved_at, last_seen_at)"
    " VALUES (?1, ?2, 'pending', ?3, ?4, coalesce(?5, ''), ?6, ?7, 0, ?7)";
static const char SQ_DEV_TOUCH[] = "UPDATE devices SET last_seen_at = ?2,"
                                   " remote_addr = coalesce(?3, remote_addr) WHERE device_id = ?1";
static const char SQ_DEV_LIST[] = "SELECT " SQ_DEVICE_COLUMNS " FROM devices"
                                  " ORDER BY state = 'approved', created_at, device_id LIMIT ?1";
static const char SQ_DEV_APPROVE[] = "UPDATE devices SET state = 'approved', approved_at = ?2"
                                     " WHERE device_id = ?1 AND state = 'pending'";
static const char SQ_DEV_SET_TOKEN[] = "UPDATE devices SET token_hash = ?2, last_seen_at = ?3"
                                       " WHERE device_id = ?1 AND state = 'approved'";
static const char SQ_DEV_DELETE[] = "DELETE FROM devices WHERE device_id = ?1";

/* Binds ?1 channel, ?2 account, ?3 sender_id. */
static void sq_bind_sender(sqlite3_stmt *st, const char *channel, const char *account,
                           const char *sender_id)
{
	sq_bind_text(st, 1, channel);
	sq_bind_text(st, 2, account);
	sq_bind_text(st, 3, sender_id);
}

/* Runs a statement whose only parameter is ?1 = n. */
static int sq_exec_int(struct sq_store *s, const char *sql, int64_t n, const char *what)
{
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, sql, &st);

	if (rc == SB_OK) {
		sqlite3_bind_int64(st, 1, n);
		rc = sq_step_update(s, st, what, NULL);
	}
	sq_finish(st);
	return rc;
}

/* ---- the allow list ---- */

/* Whether (channel, account, sender) is on the allow list. */
static int sq_allow_find(struct sq_store *s, const char *channel, const char *account,
                         const char *sender_id, bool *found)
{
	sqlite3_stmt *st = NULL;
	int src;
	int rc = sq_stmt(s, SQ_ALLOW_FIND, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_sender(st, channel, account, sender_id);
	src = sqlite3_step(st);
	*found = src == SQLITE_ROW;
	rc = src == SQLITE_ROW ? SB_OK : sq_rc(s, src, "allow_find");
out:
	sq_finish(st);
	return rc;
}

int sq_run_allow_check(struct sq_store *s, struct store_op *op)
{
	struct store_args_allow_check *a = &op->a.allow_check;

	return sq_allow_find(s, a->channel, a->account, a->sender_id, &a->allowed);
}

static int sq_allow_row(struct store_op *op, sqlite3_stmt *st, void *elem)
{
	struct store_allow_entry *e = elem;
	int rc;

	if ((rc = sq_column(op, st, 0, &e->channel)) != SB_OK ||
	    (rc = sq_column(op, st, 1, &e->account)) != SB_OK ||
	    (rc = sq_column(op, st, 2, &e->sender_id)) != SB_OK)
		return rc;
	e->approved_at = sqlite3_column_int64(st, 3);
	return SB_OK;
}

int sq_run_allow_list(struct sq_store *s, struct store_op *op)
{
	struct store_args_allow_list *a = &op->a.allow_list;
	sqlite3_stmt *st = NULL;
	void *v = NULL;
	int rc = sq_stmt(s, SQ_ALLOW_LIST, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, a->channel);
	sqlite3_bind_int64(st, 2, STORE_LIST_MAX);
	rc = sq_rows(s, op, st, "allow_list", sizeof *a->v, sq_allow_row, &v, &a->n);
	a->v = v;
out:
	sq_finish(st);
	return rc;
}

int sq_run_allow_remove(struct sq_store *s, struct store_op *op)
{
	const struct store_args_allow_remove *a = &op->a.allow_remove;
	sqlite3_stmt *st = NULL;
	int changes = 0;
	int rc = sq_stmt(s, SQ_ALLOW_DELETE, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_sender(st, a->channel, a->account, a->sender_id);
	rc = sq_step_update(s, st, "allow_remove", &changes);
	if (rc == SB_OK && changes == 0)
		rc = SB_ERR_NOTFOUND;
out:
	sq_finish(st);
	return rc;
}

/* ---- pairing ---- */

/* A fresh code from STORE_PAIRING_ALPHABET (libsodium's uniform draw). */
static void sq_pairing_code(char out[STORE_PAIRING_CODE_LEN + 1])
{
	static const char alphabet[] = STORE_PAIRING_ALPHABET;

	for (size_t i = 0; i < STORE_PAIRING_CODE_LEN; i++)
		out[i] = alphabet[randombytes_uniform((uint32_t)(sizeof alphabet - 1))];
	out[STORE_PAIRING_CODE_LEN] = '\0';
}

int sq_run_pairing_request(struct sq_store *s, struct store_op *op)
{
	struct store_args_pairing_request *a = &op->a.pairing_request;
	struct store_pairing *p = &a->p;
	sqlite3_stmt *st = NULL;
	int64_t now = clock_wall_ms(), pending;
	bool allowed = false;
	int src, changes = 0;
	int rc = sq_exec_int(s, SQ_PAIR_EXPIRE, now, "pairing_expire");

	if (rc != SB_OK)
		goto out;
	if ((rc = sq_allow_find(s, p->channel, p->account, p->sender_id, &allowed)) != SB_OK)
		goto out;
	if (allowed) {
		rc = SB_ERR_EXISTS;
		goto out;
	}
	/* The sender's pending code, if any: asking again changes nothing. */
	if ((rc = sq_stmt(s, SQ_PAIR_FIND_SENDER, &st)) != SB_OK)
		goto out;
	sq_bind_sender(st, p->channel, p->account, p->sender_id);
	sqlite3_bind_int64(st, 4, now);
	src = sqlite3_step(st);
	if (src == SQLITE_ROW) {
		rc = sq_column(op, st, 0, &p->code);
		p->created_at = sqlite3_column_int64(st, 1);
		p->expires_at = sqlite3_column_int64(st, 2);
		a->created = false;
		goto out;
	}
	if ((rc = sq_rc(s, src, "pairing_find")) != SB_OK)
		goto out;
	sq_finish(st);
	if ((rc = sq_stmt(s, SQ_PAIR_COUNT, &st)) != SB_OK)
		goto out;
	sq_bind_text(st, 1, p->channel);
	sq_bind_text(st, 2, p->account);
	sqlite3_bind_int64(st, 3, now);
	if ((rc = sq_step_count(s, st, "pairing_count", &pending)) != SB_OK)
		goto out;
	sq_finish(st);
	if (pending >= STORE_PAIRING_MAX_PENDING) {
		rc = SB_ERR_AGAIN;
		goto out;
	}
	if ((rc = sq_stmt(s, SQ_PAIR_INSERT, &st)) != SB_OK)
		goto out;
	/* 32^8 codes: a clash with another pending code is rare; draw again. */
	for (int attempt = 0; attempt < 8 && changes == 0; attempt++) {
		char code[STORE_PAIRING_CODE_LEN + 1];

		sq_pairing_code(code);
		sq_finish(st);
		sq_bind_sender(st, p->channel, p->account, p->sender_id);
		sqlite3_bind_text(st, 4, code, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 5, now);
		sqlite3_bind_int64(st, 6, now + STORE_PAIRING_TTL_MS);
		if ((rc = sq_step_update(s, st, "pairing_insert", &changes)) != SB_OK)
			goto out;
		if (changes == 1 && (rc = store_op_strdup(op, code, &p->code)) != SB_OK)
			goto out;
		sodium_memzero(code, sizeof code);
	}
	if (changes != 1) {
		rc = SB_ERR_STORE;
		goto out;
	}
	p->created_at = now;
	p->expires_at = now + STORE_PAIRING_TTL_MS;
	a->created = true;
out:
	sq_finish(st);
	return rc;
}

static int sq_pairing_row(struct store_op *op, sqlite3_stmt *st, void *elem)
{
	struct store_pairing *p = elem;
	int rc;

	if ((rc = sq_column(op, st, 0, &p->channel)) != SB_OK ||
	    (rc = sq_column(op, st, 1, &p->account)) != SB_OK ||
	    (rc = sq_column(op, st, 2, &p->sender_id)) != SB_OK ||
	    (rc = sq_column(op, st, 3, &p->code)) != SB_OK)
		return rc;
	p->created_at = sqlite3_column_int64(st, 4);
	p->expires_at = sqlite3_column_int64(st, 5);
	return SB_OK;
}

int sq_run_pairing_list(struct sq_store *s, struct store_op *op)
{
	struct store_args_pairing_list *a = &op->a.pairing_list;
	sqlite3_stmt *st = NULL;
	void *v = NULL;
	int rc = sq_stmt(s, SQ_PAIR_LIST, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, a->channel);
	sqlite3_bind_int64(st, 2, clock_wall_ms());
	sqlite3_bind_int64(st, 3, STORE_LIST_MAX);
	rc = sq_rows(s, op, st, "pairing_list", sizeof *a->v, sq_pairing_row, &v, &a->n);
	a->v = v;
out:
	sq_finish(st);
	return rc;
}

/* Finds the unexpired request with p->code on p->channel and fills the rest
 * of p. Every candidate is compared, in constant time, whatever matched
 * before it. */
static int sq_pairing_find_code(struct sq_store *s, struct store_op *op, struct store_pairing *p)
{
	sqlite3_stmt *st = NULL;
	bool found = false;
	size_t given = strlen(p->code);
	int src;
	int rc = sq_stmt(s, SQ_PAIR_CANDIDATES, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, p->channel);
	sqlite3_bind_int64(st, 2, clock_wall_ms());
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		const unsigned char *code = sqlite3_column_text(st, 2);
		bool same = code && given == STORE_PAIRING_CODE_LEN &&
		            (size_t)sqlite3_column_bytes(st, 2) == STORE_PAIRING_CODE_LEN &&
		            sodium_memcmp(code, p->code, STORE_PAIRING_CODE_LEN) == 0;

		if (!same || found)
			continue;
		found = true;
		if ((rc = sq_column(op, st, 0, &p->account)) != SB_OK ||
		    (rc = sq_column(op, st, 1, &p->sender_id)) != SB_OK)
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

/* Approve or deny: the request goes either way; approve puts the sender on
 * the allow list first. */
static int sq_pairing_decide(struct sq_store *s, struct store_op *op, struct store_pairing *p,
                             bool approve)
{
	sqlite3_stmt *st = NULL;
	int rc = sq_pairing_find_code(s, op, p);

	if (rc != SB_OK)
		goto out;
	if (approve) {
		if ((rc = sq_stmt(s, SQ_ALLOW_INSERT, &st)) != SB_OK)
			goto out;
		sq_bind_sender(st, p->channel, p->account, p->sender_id);
		sqlite3_bind_int64(st, 4, clock_wall_ms());
		if ((rc = sq_step_update(s, st, "allow_insert", NULL)) != SB_OK)
			goto out;
		sq_finish(st);
	}
	if ((rc = sq_stmt(s, SQ_PAIR_DELETE, &st)) != SB_OK)
		goto out;
	sq_bind_sender(st, p->channel, p->account, p->sender_id);
	rc = sq_step_update(s, st, "pairing_delete", NULL);
out:
	sq_finish(st);
	return rc;
}

int sq_run_pairing_approve(struct sq_store *s, struct store_op *op)
{
	return sq_pairing_decide(s, op, &op->a.pairing_approve.p, true);
}

int sq_run_pairing_deny(struct sq_store *s, struct store_op *op)
{
	return sq_pairing_decide(s, op, &op->a.pairing_deny.p, false);
}

/* ---- devices ---- */

/* Copies a row of SQ_DEVICE_COLUMNS into elem (a struct store_device). */
static int sq_device_row(struct store_op *op, sqlite3_stmt *st, void *elem)
{
	struct store_device *d = elem;
	int rc;

	memset(d, 0, sizeof *d);
	if ((rc = sq_column(op, st, 0, &d->device_id)) != SB_OK ||
	    (rc = sq_column(op, st, 1, &d->public_key)) != SB_OK ||
	    (rc = sq_column(op, st, 2, &d->state)) != SB_OK ||
	    (rc = sq_column(op, st, 3, &d->client_id)) != SB_OK ||
	    (rc = sq_column(op, st, 4, &d->platform)) != SB_OK ||
	    (rc = sq_column(op, st, 5, &d->scopes)) != SB_OK ||
	    (rc = sq_column(op, st, 6, &d->token_hash)) != SB_OK ||
	    (rc = sq_column(op, st, 7, &d->remote_addr)) != SB_OK)
		return rc;
	d->created_at = sqlite3_column_int64(st, 8);
	d->approved_at = sqlite3_column_int64(st, 9);
	d->last_seen_at = sqlite3_column_int64(st, 10);
	return SB_OK;
}

/* Reads one device (by id, or by token hash when by_token) into d. */
static int sq_device_find(struct sq_store *s, struct store_op *op, const char *key, bool by_token,
                          struct store_device *d)
{
	sqlite3_stmt *st = NULL;
	int src;
	int rc = sq_stmt(s, by_token ? SQ_DEV_FIND_TOKEN : SQ_DEV_FIND, &st);

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
	rc = sq_device_row(op, st, d);
out:
	sq_finish(st);
	return rc;
}

/* Runs an UPDATE or DELETE of one device: ?1 device_id, ?2 and ?3 as the
 * statement wants them (bind NULL for none). */
static int sq_device_update(struct sq_store *s, const char *sql, const char *device_id, int64_t now,
                            const char *text, const char *what, int *changes)
{
	sqlite3_stmt *st = NULL;
	int rc = sq_stmt(s, sql, &st);

	if (rc != SB_OK)
		goto out;
	sq_bind_text(st, 1, device_id);
	if (sql == SQ_DEV_TOUCH) {
		sqlite3_bind_int64(st, 2, now);
		sq_bind_text(st, 3, text);
	} else if (sql == SQ_DEV_APPROVE) {
		sqlite3_bind_int64(st, 2, now);
	} else if (sql == SQ_DEV_SET_TOKEN) {
		sq_bind_text(st, 2, text);
		sqlite3_bind_int64(st, 3, now);
	}
	rc = sq_step_update(s, st, what, changes);
out:
	sq_finish(st);
	return rc;
}

int sq_run_device_request(struct sq_store *s, struct store_op *op)
{
	struct store_args_device_request *a = &op->a.device_request;
	const struct store_device in = a->d;
	sqlite3_stmt *st = NULL;
	int64_t now = clock_wall_ms(), pending = 0;
	int rc = sq_exec_int(s, SQ_DEV_EXPIRE, now - STORE_DEVICE_PENDING_TTL_MS, "device_expire");

	if (rc != SB_OK)
		goto out;
	rc = sq_device_find(s, op, in.device_id, false, &a->d);
	if (rc == SB_OK) {
		rc = sq_device_update(s, SQ_DEV_TOUCH, in.device_id, now, in.remote_addr,
		                      "device_touch", NULL);
		a->d.last_seen_at = now;
		if (in.remote_addr)
			a->d.remote_addr = in.remote_addr;
		goto out;
	}
	if (rc != SB_ERR_NOTFOUND)
		goto out;
	if ((rc = sq_stmt(s, SQ_DEV_COUNT_PENDING, &st)) != SB_OK)
		goto out;
	rc = sq_step_count(s, st, "device_count", &pending);
	sq_finish(st);
	st = NULL;
	if (rc != SB_OK)
		goto out;
	for (; pending >= STORE_DEVICES_MAX_PENDING; pending--)
		if ((rc = sq_exec(s, SQ_DEV_DROP_OLDEST)) != SB_OK)
			goto out;
	if ((rc = sq_stmt(s, SQ_DEV_INSERT, &st)) != SB_OK)
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
	a->d = in;
	a->d.state = "pending";
	a->d.scopes = in.scopes ? in.scopes : "";
	a->d.created_at = a->d.last_seen_at = now;
	a->d.approved_at = 0;
	a->d.token_hash = NULL;
	a->created = true;
out:
	sq_finish(st);
	return rc;
}

int sq_run_device_get(struct sq_store *s, struct store_op *op)
{
	struct store_args_device_get *a = &op->a.device_get;

	return a->device_id ? sq_device_find(s, op, a->device_id, false, &a->d)
	                    : sq_device_find(s, op, a->token_hash, true, &a->d);
}

int sq_run_device_list(struct sq_store *s, struct store_op *op)
{
	struct store_args_device_list *a = &op->a.device_list;
	sqlite3_stmt *st = NULL;
	void *v = NULL;
	int rc = sq_stmt(s, SQ_DEV_LIST, &st);

	if (rc != SB_OK)
		goto out;
	sqlite3_bind_int64(st, 1, STORE_LIST_MAX);
	rc = sq_rows(s, op, st, "device_list", sizeof *a->v, sq_device_row, &v, &a->n);
	a->v = v;
out:
	sq_finish(st);
	return rc;
}

int sq_run_device_approve(struct sq_store *s, struct store_op *op)
{
	struct store_args_device_approve *a = &op->a.device_approve;
	int changes = 0;
	int rc = sq_device_update(s, SQ_DEV_APPROVE, a->device_id, clock_wall_ms(), NULL,
	                          "device_approve", &changes);

	if (rc != SB_OK)
		return rc;
	rc = sq_device_find(s, op, a->device_id, false, &a->d);
	if (rc == SB_OK && changes == 0)
		rc = SB_ERR_EXISTS; /* it was approved before */
	return rc;
}

int sq_run_device_set_token(struct sq_store *s, struct store_op *op)
{
	const struct store_args_device_set_token *a = &op->a.device_set_token;
	int changes = 0;
	int rc = sq_device_update(s, SQ_DEV_SET_TOKEN, a->device_id, clock_wall_ms(), a->token_hash,
	                          "device_set_token", &changes);

	if (rc == SB_OK && changes == 0)
		rc = SB_ERR_NOTFOUND;
	return rc;
}

int sq_run_device_revoke(struct sq_store *s, struct store_op *op)
{
	int changes = 0;
	int rc = sq_device_update(s, SQ_DEV_DELETE, op->a.device_revoke.device_id, 0, NULL,
	                          "device_revoke", &changes);

	if (rc == SB_OK && changes == 0)
		rc = SB_ERR_NOTFOUND;
	return rc;
}
