/*
 * test_pairing.c - the store's pairing operations (SQLite backend): the
 * schema step that adds them, codes (alphabet, length, expiry, reuse), the
 * cap of pending requests per channel account, approve and deny (codes
 * compared whatever their case), and the allow list. Each test opens a
 * fresh database in its own directory, drives the uv loop until the
 * callbacks have run, and checks rows with a separate sqlite3 connection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>
#include <uv.h>

#include "gateway/core/err.h"
#include "gateway/core/log.h"
#include "gateway/store/store.h"

#define WAIT_MS 10000
#define MAX_ROWS 16

struct fx {
	char dir[256];
	char path[320];
	uv_loop_t loop;
	uv_timer_t guard;
	int guard_fired;
	struct store *st;
};

static int g_calls;

struct pair_res {
	int calls, rc;
	bool present, created;
	char channel[32], account[32], sender[32], code[16];
	int64_t created_at, expires_at;
};

struct list_res {
	int calls, rc;
	size_t n;
	struct pair_res rows[MAX_ROWS];
};

struct allow_res {
	int calls, rc;
	bool allowed;
};

struct allow_list_res {
	int calls, rc;
	size_t n;
	char sender[MAX_ROWS][32];
	char channel[MAX_ROWS][32];
	int64_t approved_at[MAX_ROWS];
};

static void copy_str(char *dst, size_t size, const char *src)
{
	int n = snprintf(dst, size, "%s", src ? src : "");

	assert_true(n >= 0 && (size_t)n < size);
}

static void copy_pairing(struct pair_res *r, const struct store_pairing *p)
{
	copy_str(r->channel, sizeof r->channel, p->channel);
	copy_str(r->account, sizeof r->account, p->account);
	copy_str(r->sender, sizeof r->sender, p->sender_id);
	copy_str(r->code, sizeof r->code, p->code);
	r->created_at = p->created_at;
	r->expires_at = p->expires_at;
}

static void pair_cb(void *ud, int rc, const struct store_pairing *p, bool created)
{
	struct pair_res *r = ud;

	r->calls++;
	r->rc = rc;
	r->present = p != NULL;
	r->created = created;
	if (p)
		copy_pairing(r, p);
	g_calls++;
}

static void list_cb(void *ud, int rc, const struct store_pairing *v, size_t n)
{
	struct list_res *r = ud;

	r->calls++;
	r->rc = rc;
	r->n = n;
	assert_true(n <= MAX_ROWS);
	for (size_t i = 0; i < n; i++)
		copy_pairing(&r->rows[i], &v[i]);
	g_calls++;
}

static void allow_cb(void *ud, int rc, bool allowed)
{
	struct allow_res *r = ud;

	r->calls++;
	r->rc = rc;
	r->allowed = allowed;
	g_calls++;
}

static void allow_list_cb(void *ud, int rc, const struct store_allow_entry *v, size_t n)
{
	struct allow_list_res *r = ud;

	r->calls++;
	r->rc = rc;
	r->n = n;
	assert_true(n <= MAX_ROWS);
	for (size_t i = 0; i < n; i++) {
		copy_str(r->sender[i], sizeof r->sender[i], v[i].sender_id);
		copy_str(r->channel[i], sizeof r->channel[i], v[i].channel);
		r->approved_at[i] = v[i].approved_at;
	}
	g_calls++;
}

/* ---- fixture ---- */

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void guard_cb(uv_timer_t *t)
{
	struct fx *f = t->data;

	f->guard_fired = 1;
}

static void fx_open(struct fx *f)
{
	struct store_options o = {.path = f->path};

	assert_int_equal(store_open(&f->st, &f->loop, &o), SB_OK);
}

static void fx_close(struct fx *f)
{
	if (f->st)
		store_close(f->st);
	f->st = NULL;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	int n;

	assert_non_null(f);
	log_configure(LOG_WARN, LOG_FORMAT_LOGFMT, NULL);
	n = snprintf(f->dir, sizeof f->dir, "%s/sb-pairing-XXXXXX",
	             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	assert_true(n > 0 && (size_t)n < sizeof f->dir);
	assert_non_null(mkdtemp(f->dir));
	n = snprintf(f->path, sizeof f->path, "%s/state.db", f->dir);
	assert_true(n > 0 && (size_t)n < sizeof f->path);
	assert_int_equal(uv_loop_init(&f->loop), 0);
	assert_int_equal(uv_timer_init(&f->loop, &f->guard), 0);
	f->guard.data = f;
	g_calls = 0;
	fx_open(f);
	*state = f;
	return 0;
}

static void rm_db(const char *path)
{
	static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
	char p[400];

	for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
		int n = snprintf(p, sizeof p, "%s%s", path, suffix[i]);

		if (n > 0 && (size_t)n < sizeof p)
			unlink(p);
	}
}

static int teardown(void **state)
{
	struct fx *f = *state;

	fx_close(f);
	uv_close((uv_handle_t *)&f->guard, NULL);
	uv_run(&f->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&f->loop), 0);
	rm_db(f->path);
	rmdir(f->dir);
	free(f);
	return 0;
}

static void wait_calls(struct fx *f, int target)
{
	f->guard_fired = 0;
	uv_timer_start(&f->guard, guard_cb, WAIT_MS, 0);
	while (g_calls < target && !f->guard_fired)
		uv_run(&f->loop, UV_RUN_ONCE);
	uv_timer_stop(&f->guard);
	assert_int_equal(g_calls, target);
}

static int64_t q_int(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int64_t v;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
	return v;
}

static void q_exec(const char *path, const char *sql)
{
	sqlite3 *db = NULL;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* ---- one operation, waited for ---- */

static struct pair_res request(struct fx *f, const char *channel, const char *account,
                               const char *sender)
{
	struct pair_res r = {0};

	assert_int_equal(store_pairing_request(f->st, channel, account, sender, pair_cb, &r),
	                 SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.calls, 1);
	return r;
}

static struct pair_res decide(struct fx *f, bool approve, const char *channel, const char *code)
{
	struct pair_res r = {0};
	int rc = approve ? store_pairing_approve(f->st, channel, code, pair_cb, &r)
	                 : store_pairing_deny(f->st, channel, code, pair_cb, &r);

	assert_int_equal(rc, SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.calls, 1);
	return r;
}

static bool allowed(struct fx *f, const char *channel, const char *account, const char *sender)
{
	struct allow_res r = {0};

	assert_int_equal(store_allow_check(f->st, channel, account, sender, allow_cb, &r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.rc, SB_OK);
	return r.allowed;
}

static struct list_res *list(struct fx *f, const char *channel)
{
	struct list_res *r = calloc(1, sizeof *r);

	assert_non_null(r);
	assert_int_equal(store_pairing_list(f->st, channel, list_cb, r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r->rc, SB_OK);
	return r;
}

static void assert_code_shape(const char *code)
{
	assert_int_equal(strlen(code), STORE_PAIRING_CODE_LEN);
	for (const char *c = code; *c; c++) {
		assert_non_null(strchr(STORE_PAIRING_ALPHABET, *c));
		assert_null(strchr("0O1I", *c));
	}
}

/* ---- tests ---- */

static void test_schema(void **state)
{
	struct fx *f = *state;

	assert_true(STORE_SQLITE_SCHEMA_VERSION >= 3);
	assert_int_equal(q_int(f->path, "PRAGMA user_version"), STORE_SQLITE_SCHEMA_VERSION);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
	                                " AND name IN ('pairing_requests', 'allow_entries')"),
	                 2);
	/* From version 1: the step adds the tables and keeps what is there. */
	fx_close(f);
	q_exec(f->path, "DROP TABLE pairing_requests; DROP TABLE allow_entries;"
	                "DROP TABLE devices; DROP INDEX sessions_updated;"
	                "ALTER TABLE transcript_pending DROP COLUMN codec;"
	                "ALTER TABLE transcript_pending DROP COLUMN raw_len;"
	                "INSERT INTO kv (ns, key, value, updated_at) VALUES ('t', 'k', 'v', 1);"
	                "PRAGMA user_version = 1;");
	fx_open(f);
	assert_int_equal(q_int(f->path, "PRAGMA user_version"), STORE_SQLITE_SCHEMA_VERSION);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM pairing_requests"), 0);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM kv WHERE value = 'v'"), 1);
	assert_false(allowed(f, "telegram", "default", "1"));
}

static void test_request_creates_then_reuses(void **state)
{
	struct fx *f = *state;
	int64_t before = now_ms();
	struct pair_res a = request(f, "telegram", "default", "123"), b;

	assert_int_equal(a.rc, SB_OK);
	assert_true(a.created);
	assert_string_equal(a.channel, "telegram");
	assert_string_equal(a.account, "default");
	assert_string_equal(a.sender, "123");
	assert_code_shape(a.code);
	assert_true(a.created_at >= before && a.created_at <= now_ms());
	assert_int_equal(a.expires_at - a.created_at, STORE_PAIRING_TTL_MS);
	/* Writing again: the same code, not a new one (and no new reply). */
	b = request(f, "telegram", "default", "123");
	assert_int_equal(b.rc, SB_OK);
	assert_false(b.created);
	assert_string_equal(b.code, a.code);
	assert_int_equal(b.expires_at, a.expires_at);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM pairing_requests"), 1);
}

static void test_pending_cap(void **state)
{
	struct fx *f = *state;
	struct pair_res r;
	char sender[16];

	for (int i = 0; i < STORE_PAIRING_MAX_PENDING; i++) {
		snprintf(sender, sizeof sender, "s%d", i);
		r = request(f, "telegram", "default", sender);
		assert_int_equal(r.rc, SB_OK);
		assert_true(r.created);
	}
	r = request(f, "telegram", "default", "s9");
	assert_int_equal(r.rc, SB_ERR_AGAIN);
	assert_false(r.present);
	/* A pending sender still gets their code back. */
	r = request(f, "telegram", "default", "s1");
	assert_int_equal(r.rc, SB_OK);
	assert_false(r.created);
	/* The cap is per channel account. */
	assert_int_equal(request(f, "telegram", "bot2", "s9").rc, SB_OK);
	assert_int_equal(request(f, "slack", "default", "s9").rc, SB_OK);
	/* An expired request frees its place. */
	q_exec(f->path, "UPDATE pairing_requests SET expires_at = 1 WHERE sender_id = 's0'");
	r = request(f, "telegram", "default", "s9");
	assert_int_equal(r.rc, SB_OK);
	assert_true(r.created);
	assert_int_equal(
	    q_int(f->path, "SELECT count(*) FROM pairing_requests WHERE sender_id = 's0'"), 0);
}

static void test_expired_code_is_replaced(void **state)
{
	struct fx *f = *state;
	struct pair_res a = request(f, "telegram", "default", "123"), b, c;
	struct list_res *l;

	q_exec(f->path, "UPDATE pairing_requests SET expires_at = 1");
	l = list(f, NULL);
	assert_int_equal(l->n, 0);
	free(l);
	c = decide(f, true, "telegram", a.code);
	assert_int_equal(c.rc, SB_ERR_NOTFOUND);
	b = request(f, "telegram", "default", "123");
	assert_int_equal(b.rc, SB_OK);
	assert_true(b.created);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM pairing_requests"), 1);
	assert_false(allowed(f, "telegram", "default", "123"));
}

static void test_approve(void **state)
{
	struct fx *f = *state;
	struct pair_res a = request(f, "telegram", "bot2", "123"), r;
	char lower[16];

	request(f, "telegram", "bot2", "456");
	assert_false(allowed(f, "telegram", "bot2", "123"));
	/* The code belongs to telegram: another channel does not know it. */
	r = decide(f, true, "slack", a.code);
	assert_int_equal(r.rc, SB_ERR_NOTFOUND);
	assert_false(r.present);
	/* Codes are compared whatever their case. */
	for (size_t i = 0; i <= strlen(a.code); i++)
		lower[i] =
		    (char)(a.code[i] >= 'A' && a.code[i] <= 'Z' ? a.code[i] + 32 : a.code[i]);
	r = decide(f, true, "telegram", lower);
	assert_int_equal(r.rc, SB_OK);
	assert_string_equal(r.channel, "telegram");
	assert_string_equal(r.account, "bot2");
	assert_string_equal(r.sender, "123");
	assert_string_equal(r.code, a.code);
	assert_true(allowed(f, "telegram", "bot2", "123"));
	/* Per channel account. */
	assert_false(allowed(f, "telegram", "default", "123"));
	assert_false(allowed(f, "telegram", "bot2", "456"));
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM pairing_requests"), 1);
	/* The code is spent; an approved sender asking again is told so. */
	assert_int_equal(decide(f, true, "telegram", a.code).rc, SB_ERR_NOTFOUND);
	assert_int_equal(request(f, "telegram", "bot2", "123").rc, SB_ERR_EXISTS);
	/* Wrong codes: another length, and one letter off. */
	assert_int_equal(decide(f, true, "telegram", "ABC").rc, SB_ERR_NOTFOUND);
	lower[0] = a.code[0] == 'A' ? 'B' : 'A';
	memcpy(lower + 1, a.code + 1, sizeof a.code - 1);
	assert_int_equal(decide(f, true, "telegram", lower).rc, SB_ERR_NOTFOUND);
}

static void test_deny(void **state)
{
	struct fx *f = *state;
	struct pair_res a = request(f, "slack", "default", "U1"), r;

	r = decide(f, false, "slack", a.code);
	assert_int_equal(r.rc, SB_OK);
	assert_string_equal(r.sender, "U1");
	assert_false(allowed(f, "slack", "default", "U1"));
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM pairing_requests"), 0);
	assert_int_equal(decide(f, false, "slack", a.code).rc, SB_ERR_NOTFOUND);
	/* Denied senders may ask again, and get a new code. */
	r = request(f, "slack", "default", "U1");
	assert_int_equal(r.rc, SB_OK);
	assert_true(r.created);
}

static void test_lists(void **state)
{
	struct fx *f = *state;
	struct allow_list_res al = {0};
	struct pair_res a, b;
	struct list_res *l;

	a = request(f, "telegram", "default", "1");
	b = request(f, "slack", "default", "U2");
	request(f, "telegram", "default", "3");
	/* Oldest first (within one millisecond they would sort by channel). */
	q_exec(f->path, "UPDATE pairing_requests SET created_at = CASE sender_id WHEN '1' THEN 1000"
	                " WHEN 'U2' THEN 2000 ELSE 3000 END");
	l = list(f, NULL);
	assert_int_equal(l->n, 3);
	assert_string_equal(l->rows[0].sender, "1");
	assert_string_equal(l->rows[0].code, a.code);
	free(l);
	l = list(f, "slack");
	assert_int_equal(l->n, 1);
	assert_string_equal(l->rows[0].code, b.code);
	assert_string_equal(l->rows[0].channel, "slack");
	free(l);
	l = list(f, "webchat");
	assert_int_equal(l->n, 0);
	free(l);

	assert_int_equal(decide(f, true, "telegram", a.code).rc, SB_OK);
	assert_int_equal(decide(f, true, "slack", b.code).rc, SB_OK);
	q_exec(f->path, "UPDATE allow_entries SET approved_at = approved_at + 1"
	                " WHERE sender_id = 'U2'");
	assert_int_equal(store_allow_list(f->st, NULL, allow_list_cb, &al), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(al.rc, SB_OK);
	assert_int_equal(al.n, 2);
	assert_string_equal(al.sender[0], "1");
	assert_string_equal(al.sender[1], "U2");
	assert_true(al.approved_at[0] > 0 && al.approved_at[0] <= al.approved_at[1]);
	memset(&al, 0, sizeof al);
	assert_int_equal(store_allow_list(f->st, "slack", allow_list_cb, &al), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(al.n, 1);
	assert_string_equal(al.channel[0], "slack");
}

static void test_codes_are_random(void **state)
{
	struct fx *f = *state;
	char seen[64][STORE_PAIRING_CODE_LEN + 1];

	for (int i = 0; i < 64; i++) {
		struct pair_res r = request(f, "webchat", "default", "u");

		assert_int_equal(r.rc, SB_OK);
		assert_true(r.created);
		assert_code_shape(r.code);
		for (int j = 0; j < i; j++)
			assert_string_not_equal(seen[j], r.code);
		memcpy(seen[i], r.code, sizeof seen[i]);
		assert_int_equal(decide(f, false, "webchat", r.code).rc, SB_OK);
	}
}

static void test_bad_arguments(void **state)
{
	struct fx *f = *state;

	assert_int_equal(store_pairing_request(f->st, NULL, "default", "1", pair_cb, NULL),
	                 SB_ERR_INVAL);
	assert_int_equal(store_pairing_request(f->st, "telegram", "default", NULL, pair_cb, NULL),
	                 SB_ERR_INVAL);
	assert_int_equal(store_pairing_approve(f->st, "telegram", NULL, pair_cb, NULL),
	                 SB_ERR_INVAL);
	assert_int_equal(store_pairing_deny(f->st, NULL, "ABCDEFGH", pair_cb, NULL), SB_ERR_INVAL);
	assert_int_equal(store_allow_check(f->st, "telegram", NULL, "1", allow_cb, NULL),
	                 SB_ERR_INVAL);
	fx_close(f);
	fx_open(f);
	/* A callback may be NULL. */
	assert_int_equal(store_pairing_request(f->st, "telegram", "default", "1", NULL, NULL),
	                 SB_OK);
	fx_close(f);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM pairing_requests"), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_schema, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_request_creates_then_reuses, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pending_cap, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_expired_code_is_replaced, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_approve, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_deny, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lists, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_codes_are_random, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
