/*
 * test_store.c - the SQLite store backend: schema, every operation, group
 * commit, bounds and close. Each test opens a fresh database in its own
 * temporary directory, drives the uv loop until the callbacks it waits for
 * have run, and checks the rows with a separate sqlite3 connection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>
#include <uv.h>

#include "gateway/core/err.h"
#include "gateway/store/store.h"

#define WAIT_MS 10000
#define MAX_ITEMS 32

struct fx {
	char dir[256];
	char path[320];
	uv_loop_t loop;
	uv_timer_t guard;
	int guard_fired;
	struct store *st;
	/* on_commit */
	size_t commits;
	size_t commit_ops;
	size_t commit_max_ops;
	size_t commit_failures;
	size_t last_commit_ops;
};

/* Incremented by every result callback; tests wait on it. */
static int g_calls;

/* ---- result records (callbacks copy what they are lent) ---- */

struct put_res {
	int calls;
	int rc;
	int64_t id;
	bool dup;
	/* When set, the callback tries one more put and records its code. */
	struct fx *reput;
	int reput_rc;
};

struct done_res {
	int calls;
	int rc;
};

/* One claimed entry, inbox or outbox. */
struct item {
	int64_t id;
	char key[64]; /* dedupe_key / idempotency_key */
	char payload[128];
	char target[64]; /* inbox: the channel; outbox: the target */
	int attempts;
	int64_t due_at; /* inbox: received_at */
	int64_t inbox_id;
};

struct claim_res {
	int calls;
	int rc;
	size_t n;
	struct item items[MAX_ITEMS];
};

struct kv_res {
	int calls;
	int rc;
	bool has_value;
	char value[128];
};

struct sess_res {
	int calls;
	int rc;
	bool present;
	char agent_id[64];
	char session_id[64];
	bool has_meta;
	char meta[128];
	int64_t updated_at;
};

struct stats_res {
	int calls;
	int rc;
	struct store_stats st;
};

static void copy_str(char *dst, size_t size, const char *src)
{
	int n = snprintf(dst, size, "%s", src ? src : "");

	assert_true(n >= 0 && (size_t)n < size);
}

static void put_cb(void *ud, int rc, int64_t id, bool dup)
{
	struct put_res *r = ud;

	r->calls++;
	r->rc = rc;
	r->id = id;
	r->dup = dup;
	if (r->reput) {
		struct store_inbox_new m = {"t", "default", "after-close", "{}", 0};

		r->reput_rc = store_inbox_put(r->reput->st, &m, put_cb, NULL);
		r->reput = NULL;
	}
	g_calls++;
}

static void done_cb(void *ud, int rc)
{
	struct done_res *r = ud;

	r->calls++;
	r->rc = rc;
	g_calls++;
}

static void inbox_cb(void *ud, int rc, const struct store_inbox_item *items, size_t n)
{
	struct claim_res *r = ud;

	r->calls++;
	r->rc = rc;
	r->n = n;
	assert_true(n <= MAX_ITEMS);
	for (size_t i = 0; i < n; i++) {
		r->items[i].id = items[i].id;
		copy_str(r->items[i].key, sizeof r->items[i].key, items[i].dedupe_key);
		copy_str(r->items[i].payload, sizeof r->items[i].payload, items[i].payload);
		copy_str(r->items[i].target, sizeof r->items[i].target, items[i].channel);
		r->items[i].attempts = items[i].attempts;
		r->items[i].due_at = items[i].received_at;
		assert_string_equal(items[i].account, "default");
	}
	g_calls++;
}

static void outbox_cb(void *ud, int rc, const struct store_outbox_item *items, size_t n)
{
	struct claim_res *r = ud;

	r->calls++;
	r->rc = rc;
	r->n = n;
	assert_true(n <= MAX_ITEMS);
	for (size_t i = 0; i < n; i++) {
		r->items[i].id = items[i].id;
		copy_str(r->items[i].key, sizeof r->items[i].key, items[i].idempotency_key);
		copy_str(r->items[i].payload, sizeof r->items[i].payload, items[i].payload);
		copy_str(r->items[i].target, sizeof r->items[i].target, items[i].target);
		r->items[i].attempts = items[i].attempts;
		r->items[i].due_at = items[i].due_at;
		r->items[i].inbox_id = items[i].inbox_id;
	}
	g_calls++;
}

static void kv_cb(void *ud, int rc, const char *value)
{
	struct kv_res *r = ud;

	r->calls++;
	r->rc = rc;
	r->has_value = value != NULL;
	copy_str(r->value, sizeof r->value, value);
	g_calls++;
}

static void sess_cb(void *ud, int rc, const struct store_session *s)
{
	struct sess_res *r = ud;

	r->calls++;
	r->rc = rc;
	r->present = s != NULL;
	if (s) {
		copy_str(r->agent_id, sizeof r->agent_id, s->agent_id);
		copy_str(r->session_id, sizeof r->session_id, s->session_id);
		r->has_meta = s->meta != NULL;
		copy_str(r->meta, sizeof r->meta, s->meta);
		r->updated_at = s->updated_at;
	}
	g_calls++;
}

static void stats_cb(void *ud, int rc, const struct store_stats *st)
{
	struct stats_res *r = ud;

	r->calls++;
	r->rc = rc;
	if (st)
		r->st = *st;
	g_calls++;
}

static void commit_cb(void *ud, double seconds, size_t ops, int rc)
{
	struct fx *f = ud;

	assert_true(seconds >= 0);
	f->commits++;
	f->commit_ops += ops;
	f->last_commit_ops = ops;
	if (ops > f->commit_max_ops)
		f->commit_max_ops = ops;
	if (rc != SB_OK)
		f->commit_failures++;
}

/* ---- fixture ---- */

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

static void guard_cb(uv_timer_t *t)
{
	struct fx *f = t->data;

	f->guard_fired = 1;
}

static int fx_open(struct fx *f, size_t batch_max, size_t queue_max, int64_t busy_ms)
{
	struct store_options o;

	memset(&o, 0, sizeof o);
	o.path = f->path;
	o.busy_timeout_ms = busy_ms;
	o.batch_max = batch_max;
	o.queue_max = queue_max;
	o.on_commit = commit_cb;
	o.on_commit_ud = f;
	return store_open(&f->st, &f->loop, &o);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	int n;

	assert_non_null(f);
	n = snprintf(f->dir, sizeof f->dir, "%s/sb-store-XXXXXX",
	             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	assert_true(n > 0 && (size_t)n < sizeof f->dir);
	assert_non_null(mkdtemp(f->dir));
	n = snprintf(f->path, sizeof f->path, "%s/state.db", f->dir);
	assert_true(n > 0 && (size_t)n < sizeof f->path);
	assert_int_equal(uv_loop_init(&f->loop), 0);
	assert_int_equal(uv_timer_init(&f->loop, &f->guard), 0);
	f->guard.data = f;
	g_calls = 0;
	*state = f;
	return 0;
}

static void fx_close(struct fx *f)
{
	if (f->st)
		store_close(f->st);
	f->st = NULL;
}

static void rm_db(const char *path)
{
	char p[400];
	static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};

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
	/* Every handle (the store's async one included) is closed and freed. */
	assert_int_equal(uv_loop_close(&f->loop), 0);
	rm_db(f->path);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* Runs the loop until g_calls reaches target; fails after WAIT_MS. */
static void wait_calls(struct fx *f, int target)
{
	f->guard_fired = 0;
	uv_timer_start(&f->guard, guard_cb, WAIT_MS, 0);
	while (g_calls < target && !f->guard_fired)
		uv_run(&f->loop, UV_RUN_ONCE);
	uv_timer_stop(&f->guard);
	assert_int_equal(g_calls, target);
}

/* ---- direct SQL checks on a separate connection ---- */

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

/* First column of the first row as text ("<null>" for NULL, "<none>" for
 * no row). */
static void q_text(const char *path, const char *sql, char *out, size_t size)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int src;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	src = sqlite3_step(st);
	if (src == SQLITE_DONE)
		copy_str(out, size, "<none>");
	else if (sqlite3_column_type(st, 0) == SQLITE_NULL)
		copy_str(out, size, "<null>");
	else
		copy_str(out, size, (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void q_exec(const char *path, const char *sql)
{
	sqlite3 *db = NULL;

	assert_int_equal(
	    sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL),
	    SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* ---- helpers that queue one operation ---- */

static void put_inbox(struct fx *f, const char *account, const char *key, const char *payload,
                      struct put_res *r)
{
	struct store_inbox_new m = {"webhook", account, key, payload, 0};

	assert_int_equal(store_inbox_put(f->st, &m, put_cb, r), SB_OK);
}

static int64_t put_inbox_wait(struct fx *f, const char *key, const char *payload)
{
	struct put_res r = {0};

	put_inbox(f, "default", key, payload, &r);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.rc, SB_OK);
	assert_false(r.dup);
	assert_true(r.id > 0);
	return r.id;
}

static void claim_inbox_wait(struct fx *f, size_t max, int64_t lease_ms, struct claim_res *r)
{
	memset(r, 0, sizeof *r);
	assert_int_equal(store_inbox_claim(f->st, max, lease_ms, inbox_cb, r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r->calls, 1);
	assert_int_equal(r->rc, SB_OK);
}

static void claim_outbox_wait(struct fx *f, size_t max, int64_t lease_ms, struct claim_res *r)
{
	memset(r, 0, sizeof *r);
	assert_int_equal(store_outbox_claim_due(f->st, max, lease_ms, outbox_cb, r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r->calls, 1);
	assert_int_equal(r->rc, SB_OK);
}

static struct store_outbox_new outbox_new(const char *key, const char *target, const char *payload,
                                          int64_t due_at, int64_t inbox_id)
{
	struct store_outbox_new m = {key,     "telegram", "default", target,
	                             payload, due_at,     inbox_id,  0};

	return m;
}

static struct put_res put_outbox_wait(struct fx *f, const struct store_outbox_new *m)
{
	struct put_res r = {0};

	assert_int_equal(store_outbox_put(f->st, m, put_cb, &r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.calls, 1);
	return r;
}

/* ---- tests ---- */

static void test_open_migrates(void **state)
{
	struct fx *f = *state;
	char text[64];

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_non_null(f->st);
	assert_string_equal(store_backend_name(f->st), "sqlite");
	assert_int_equal(q_int(f->path, "PRAGMA user_version"), STORE_SQLITE_SCHEMA_VERSION);
	q_text(f->path, "PRAGMA journal_mode", text, sizeof text);
	assert_string_equal(text, "wal");
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
	                                " AND name IN ('inbox', 'outbox', 'kv', 'sessions')"),
	                 4);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
	                                " AND name IN ('inbox_claim', 'outbox_claim')"),
	                 2);
	/* A new file has small pages (fewer bytes per commit). */
	assert_int_equal(q_int(f->path, "PRAGMA page_size"), 1024);
	put_inbox_wait(f, "kept", "{\"a\":1}");
	fx_close(f);

	/* Reopening an up-to-date database migrates nothing and keeps data. */
	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(q_int(f->path, "PRAGMA user_version"), STORE_SQLITE_SCHEMA_VERSION);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox WHERE dedupe_key = 'kept'"), 1);
}

/* A database made with 4 KiB pages (before new files got 1 KiB) keeps
 * them: it opens, migrates and stores as before. */
static void test_old_page_size_kept(void **state)
{
	struct fx *f = *state;

	q_exec(f->path, "PRAGMA page_size = 4096; CREATE TABLE older (a); DROP TABLE older;");
	assert_int_equal(q_int(f->path, "PRAGMA page_size"), 4096);
	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(q_int(f->path, "PRAGMA user_version"), STORE_SQLITE_SCHEMA_VERSION);
	assert_int_equal(q_int(f->path, "PRAGMA page_size"), 4096);
	put_inbox_wait(f, "kept", "{\"a\":1}");
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox WHERE dedupe_key = 'kept'"), 1);
}

/* Puts rounds x 100 inbox rows of 4 KB ("ckpt-<round>-<i>"), waiting for
 * each round: commits of about 5 pages a row. The results are static: when
 * an assertion ends the test with puts in flight (an allocation failing,
 * in the failalloc runs), their callbacks still find them at teardown. */
static void put_big_rounds(struct fx *f, int rounds)
{
	static char payload[4001];
	static struct put_res r[100];

	memset(payload, 'x', sizeof payload - 1);
	payload[sizeof payload - 1] = '\0';
	for (int round = 0; round < rounds; round++) {

		memset(r, 0, sizeof r);
		for (int i = 0; i < 100; i++) {
			char key[32];

			snprintf(key, sizeof key, "ckpt-%d-%d", round, i);
			put_inbox(f, "default", key, payload, &r[i]);
		}
		wait_calls(f, g_calls + 100);
		for (int i = 0; i < 100; i++)
			assert_int_equal(r[i].rc, SB_OK);
	}
}

/* The WAL is checkpointed past 10,000 pages, not SQLite's 1,000: after
 * some 1,600 pages of commits the main file has not grown (nothing was
 * copied back) and the WAL holds them all. */
static void test_checkpoint_interval(void **state)
{
	struct fx *f = *state;
	char wal[sizeof f->path + 8];
	struct stat db0, db1, w;

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	put_inbox_wait(f, "ckpt-first", "{}");
	assert_int_equal(stat(f->path, &db0), 0);
	put_big_rounds(f, 4);
	snprintf(wal, sizeof wal, "%s-wal", f->path);
	assert_int_equal(stat(f->path, &db1), 0);
	assert_int_equal(stat(wal, &w), 0);
	assert_int_equal(db1.st_size, db0.st_size);
	assert_true(w.st_size > 1500 * (1024 + 24));
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox"), 401);
}

/* Past 10,000 pages the WAL is checkpointed: the database file takes the
 * pages and the WAL starts again from its beginning; every row stays
 * readable. */
static void test_checkpoint_past_interval(void **state)
{
	struct fx *f = *state;
	struct stat db0, db1;

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	put_inbox_wait(f, "ckpt-first", "{}");
	assert_int_equal(stat(f->path, &db0), 0);
	put_big_rounds(f, 30);
	put_inbox_wait(f, "ckpt-last", "{}");
	assert_int_equal(stat(f->path, &db1), 0);
	/* 3,000 rows of 4 KB, some 13,000 pages through the WAL: most of them
	 * are in the database file now. */
	assert_true(db1.st_size > db0.st_size + 5000 * 1024);
	/* The WAL holds what came after the checkpoint, not all 13,000. */
	{
		sqlite3 *db = NULL;
		sqlite3_stmt *st = NULL;

		assert_int_equal(sqlite3_open_v2(f->path, &db, SQLITE_OPEN_READWRITE, NULL),
		                 SQLITE_OK);
		assert_int_equal(
		    sqlite3_prepare_v2(db, "PRAGMA wal_checkpoint(PASSIVE)", -1, &st, NULL),
		    SQLITE_OK);
		assert_int_equal(sqlite3_step(st), SQLITE_ROW);
		assert_true(sqlite3_column_int64(st, 1) < 8000); /* frames in the log */
		sqlite3_finalize(st);
		assert_int_equal(sqlite3_close(db), SQLITE_OK);
	}
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox"), 3002);
}

static void test_future_version_refused(void **state)
{
	struct fx *f = *state;
	char sql[64];
	char mode[32];
	int n =
	    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", STORE_SQLITE_SCHEMA_VERSION + 1);

	assert_true(n > 0 && (size_t)n < sizeof sql);
	q_exec(f->path, sql);
	{
		struct store_options o = {.path = f->path};
		int sentinel;
		struct store *st = (struct store *)&sentinel; /* reset to NULL on failure */

		assert_int_equal(store_open(&st, &f->loop, &o), SB_ERR_STORE);
		assert_null(st);
	}
	/* The file is left as it was: same version, journal mode untouched. */
	assert_int_equal(q_int(f->path, "PRAGMA user_version"), STORE_SQLITE_SCHEMA_VERSION + 1);
	q_text(f->path, "PRAGMA journal_mode", mode, sizeof mode);
	assert_string_equal(mode, "delete");
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM sqlite_master"), 0);
}

static void test_inbox_roundtrip(void **state)
{
	struct fx *f = *state;
	struct claim_res c;
	struct done_res d = {0};
	int64_t t0 = now_ms(), id;
	char text[64];

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	id = put_inbox_wait(f, "evt-1", "{\"text\":\"hello \\u00e9\"}");
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox WHERE state = 'pending'"), 1);

	claim_inbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.items[0].id, id);
	assert_string_equal(c.items[0].key, "evt-1");
	assert_string_equal(c.items[0].payload, "{\"text\":\"hello \\u00e9\"}");
	assert_string_equal(c.items[0].target, "webhook"); /* the channel */
	assert_int_equal(c.items[0].attempts, 0);
	assert_true(c.items[0].due_at >= t0 - 5 && c.items[0].due_at <= now_ms() + 5);
	assert_int_equal(q_int(f->path, "SELECT attempts FROM inbox"), 1);
	assert_true(q_int(f->path, "SELECT lease_until FROM inbox") >= t0 + 60000);

	/* Claimed with a live lease: not claimable again. */
	claim_inbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 0);

	assert_int_equal(store_inbox_done(f->st, id, NULL, 0, done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.calls, 1);
	assert_int_equal(d.rc, SB_OK);
	q_text(f->path, "SELECT state FROM inbox", text, sizeof text);
	assert_string_equal(text, "done");
	assert_true(q_int(f->path, "SELECT done_at FROM inbox") >= t0);
	claim_inbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 0);

	/* Unknown ids are reported, not ignored. */
	memset(&d, 0, sizeof d);
	assert_int_equal(store_inbox_done(f->st, id + 100, NULL, 0, done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.rc, SB_ERR_NOTFOUND);

	/* Bad arguments are refused at once; the callback never runs. */
	{
		struct store_inbox_new bad = {"webhook", "default", "k", NULL, 0};
		struct put_res r = {0};

		assert_int_equal(store_inbox_put(f->st, &bad, put_cb, &r), SB_ERR_INVAL);
		assert_int_equal(store_inbox_claim(f->st, 0, 1000, inbox_cb, &c), SB_ERR_INVAL);
		assert_int_equal(store_inbox_claim(f->st, STORE_CLAIM_MAX + 1, 1000, inbox_cb, &c),
		                 SB_ERR_INVAL);
		assert_int_equal(store_inbox_claim(f->st, 1, -1, inbox_cb, &c), SB_ERR_INVAL);
		uv_run(&f->loop, UV_RUN_NOWAIT);
		assert_int_equal(r.calls, 0);
	}
}

static void test_inbox_dedupe(void **state)
{
	struct fx *f = *state;
	struct put_res a = {0}, b = {0}, c = {0}, d = {0};
	int64_t id;

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	id = put_inbox_wait(f, "evt-7", "{\"first\":true}");

	/* A later put with the same key: the existing row, flagged. */
	put_inbox(f, "default", "evt-7", "{\"second\":true}", &a);
	wait_calls(f, g_calls + 1);
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.rc, SB_OK);
	assert_int_equal(a.id, id);
	assert_true(a.dup);

	/* Two puts of a new key queued together (most likely one batch). */
	put_inbox(f, "default", "evt-8", "{}", &b);
	put_inbox(f, "default", "evt-8", "{}", &c);
	/* Same key on another account is another message. */
	put_inbox(f, "other", "evt-7", "{}", &d);
	wait_calls(f, g_calls + 3);
	assert_int_equal(b.calls + c.calls + d.calls, 3);
	assert_int_equal(b.rc, SB_OK);
	assert_false(b.dup);
	assert_int_equal(c.rc, SB_OK);
	assert_true(c.dup);
	assert_int_equal(c.id, b.id);
	assert_false(d.dup);
	assert_true(d.id != id && d.id != b.id);

	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox"), 3);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox WHERE dedupe_key = 'evt-7'"
	                                " AND account = 'default'"),
	                 1);
	/* The first payload is kept. */
	{
		char text[64];

		q_text(f->path,
		       "SELECT payload FROM inbox WHERE dedupe_key = 'evt-7'"
		       " AND account = 'default'",
		       text, sizeof text);
		assert_string_equal(text, "{\"first\":true}");
	}
}

static void test_claim_order_and_max(void **state)
{
	struct fx *f = *state;
	struct put_res r[5];
	struct claim_res c;
	struct done_res d = {0};
	char key[16];

	memset(r, 0, sizeof r);
	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	for (int i = 0; i < 5; i++) {
		snprintf(key, sizeof key, "k%d", i);
		put_inbox(f, "default", key, key, &r[i]);
	}
	wait_calls(f, 5);
	for (int i = 1; i < 5; i++)
		assert_true(r[i].id > r[i - 1].id);

	claim_inbox_wait(f, 2, 60000, &c);
	assert_int_equal(c.n, 2);
	assert_int_equal(c.items[0].id, r[0].id);
	assert_string_equal(c.items[0].key, "k0");
	assert_int_equal(c.items[1].id, r[1].id);
	assert_string_equal(c.items[1].payload, "k1");

	claim_inbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(c.items[i].id, r[i + 2].id);
		snprintf(key, sizeof key, "k%d", i + 2);
		assert_string_equal(c.items[i].key, key);
	}

	/* Released: pending again, and claimed before the others. */
	assert_int_equal(store_inbox_release(f->st, r[1].id, done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.rc, SB_OK);
	claim_inbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.items[0].id, r[1].id);
	assert_int_equal(c.items[0].attempts, 1);

	/* Releasing what is not claimed is reported. */
	memset(&d, 0, sizeof d);
	assert_int_equal(store_inbox_done(f->st, r[0].id, NULL, 0, NULL, NULL), SB_OK);
	assert_int_equal(store_inbox_release(f->st, r[0].id, done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.calls, 1);
	assert_int_equal(d.rc, SB_ERR_NOTFOUND);
	{
		char text[32];

		q_text(f->path, "SELECT state FROM inbox WHERE dedupe_key = 'k0'", text,
		       sizeof text);
		assert_string_equal(text, "done");
	}
}

static void test_lease_expiry(void **state)
{
	struct fx *f = *state;
	struct claim_res c;
	int64_t id;

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	id = put_inbox_wait(f, "lease", "{}");
	claim_inbox_wait(f, 10, 200, &c);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.items[0].attempts, 0);
	claim_inbox_wait(f, 10, 200, &c);
	assert_int_equal(c.n, 0);

	sleep_ms(300);
	/* The claimer never finished: the entry comes back. */
	claim_inbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.items[0].id, id);
	assert_int_equal(c.items[0].attempts, 1);
	assert_int_equal(q_int(f->path, "SELECT attempts FROM inbox"), 2);

	/* A fresh process sees an expired lease left by a dead one. */
	fx_close(f);
	q_exec(f->path, "UPDATE inbox SET lease_until = 1");
	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	claim_inbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.items[0].id, id);
	assert_int_equal(c.items[0].attempts, 2);
}

static void test_inbox_done_replies(void **state)
{
	struct fx *f = *state;
	struct claim_res c;
	struct done_res d = {0};
	struct store_outbox_new replies[3];
	struct put_res pre;
	int64_t in1, in2;
	char text[128];

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	in1 = put_inbox_wait(f, "m1", "{}");
	in2 = put_inbox_wait(f, "m2", "{}");
	claim_inbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 2);

	struct store_outbox_new existing = outbox_new("reply-dup", "chat-9", "{\"orig\":1}", 0, 0);
	pre = put_outbox_wait(f, &existing);
	assert_int_equal(pre.rc, SB_OK);

	replies[0] = outbox_new("reply-1", "chat-1", "{\"text\":\"one\"}", 0, 0);
	replies[1] = outbox_new("reply-2", "chat-1", "{\"text\":\"two\"}", 0, 0);
	replies[2] = outbox_new("reply-dup", "chat-1", "{\"text\":\"dup\"}", 0, 0);
	assert_int_equal(store_inbox_done(f->st, in1, replies, 3, done_cb, &d), SB_OK);
	/* The caller's strings may go away at once: they were copied. */
	memset(replies, 0, sizeof replies);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.calls, 1);
	assert_int_equal(d.rc, SB_OK);
	q_text(f->path, "SELECT state FROM inbox WHERE dedupe_key = 'm1'", text, sizeof text);
	assert_string_equal(text, "done");
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM outbox"), 3);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM outbox WHERE inbox_id = (SELECT id"
	                                " FROM inbox WHERE dedupe_key = 'm1')"
	                                " AND idempotency_key IN ('reply-1', 'reply-2')"
	                                " AND target = 'chat-1' AND state = 'pending'"),
	                 2);
	q_text(f->path, "SELECT payload FROM outbox WHERE idempotency_key = 'reply-2'", text,
	       sizeof text);
	assert_string_equal(text, "{\"text\":\"two\"}");
	/* The duplicate was skipped: the first one stays as it was. */
	q_text(f->path, "SELECT payload || target FROM outbox WHERE idempotency_key = 'reply-dup'",
	       text, sizeof text);
	assert_string_equal(text, "{\"orig\":1}chat-9");

	/* All or nothing: a reply that cannot be stored (unknown inbox_id)
	 * leaves the entry claimed and stores no reply. */
	replies[0] = outbox_new("reply-x", "chat-2", "{}", 0, 0);
	replies[1] = outbox_new("reply-y", "chat-2", "{}", 0, in2 + 1000);
	memset(&d, 0, sizeof d);
	assert_int_equal(store_inbox_done(f->st, in2, replies, 2, done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.calls, 1);
	assert_int_equal(d.rc, SB_ERR_INVAL);
	q_text(f->path, "SELECT state FROM inbox WHERE dedupe_key = 'm2'", text, sizeof text);
	assert_string_equal(text, "claimed");
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM outbox WHERE idempotency_key IN"
	                                " ('reply-x', 'reply-y')"),
	                 0);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM outbox"), 3);
}

static void test_outbox_due_and_retry(void **state)
{
	struct fx *f = *state;
	struct claim_res c;
	struct done_res d = {0};
	struct put_res a, b, p, dup;
	int64_t t0 = now_ms();
	char text[128];

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	struct store_outbox_new ma = outbox_new("a", "chat-a", "{\"n\":\"a\"}", 0, 0);
	struct store_outbox_new mb = outbox_new("b", "chat-b", "{}", t0 + 600000, 0);
	struct store_outbox_new mp = outbox_new("p", "chat-p", "{}", t0 - 1000, 0);
	a = put_outbox_wait(f, &ma);
	b = put_outbox_wait(f, &mb);
	p = put_outbox_wait(f, &mp);
	assert_int_equal(a.rc + b.rc + p.rc, SB_OK);

	dup = put_outbox_wait(f, &ma);
	assert_int_equal(dup.rc, SB_OK);
	assert_true(dup.dup);
	assert_int_equal(dup.id, a.id);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM outbox"), 3);

	/* Due ones only, earliest due first; b is in the future. */
	claim_outbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 2);
	assert_int_equal(c.items[0].id, p.id);
	assert_int_equal(c.items[0].due_at, t0 - 1000);
	assert_int_equal(c.items[1].id, a.id);
	assert_string_equal(c.items[1].key, "a");
	assert_string_equal(c.items[1].target, "chat-a");
	assert_string_equal(c.items[1].payload, "{\"n\":\"a\"}");
	assert_int_equal(c.items[1].attempts, 0);
	assert_int_equal(c.items[1].inbox_id, 0);
	assert_true(c.items[1].due_at >= t0 && c.items[1].due_at <= now_ms());

	/* a fails and is retried later; p fails for good. */
	assert_int_equal(store_outbox_failed(f->st, a.id, "HTTP 502", now_ms() + 500, done_cb, &d),
	                 SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.rc, SB_OK);
	memset(&d, 0, sizeof d);
	assert_int_equal(store_outbox_failed(f->st, p.id, "chat not found", -1, done_cb, &d),
	                 SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.rc, SB_OK);
	q_text(f->path, "SELECT state || ':' || last_error FROM outbox WHERE idempotency_key = 'p'",
	       text, sizeof text);
	assert_string_equal(text, "failed:chat not found");
	q_text(f->path, "SELECT state || ':' || last_error FROM outbox WHERE idempotency_key = 'a'",
	       text, sizeof text);
	assert_string_equal(text, "pending:HTTP 502");

	claim_outbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 0);
	sleep_ms(600);
	claim_outbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.items[0].id, a.id);
	assert_int_equal(c.items[0].attempts, 1);

	memset(&d, 0, sizeof d);
	assert_int_equal(store_outbox_done(f->st, a.id, "msg-42", done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.rc, SB_OK);
	q_text(f->path,
	       "SELECT state || ':' || channel_msg_id FROM outbox WHERE idempotency_key = 'a'",
	       text, sizeof text);
	assert_string_equal(text, "sent:msg-42");
	assert_true(q_int(f->path, "SELECT sent_at FROM outbox WHERE idempotency_key = 'a'") >= t0);

	/* A late failure report does not undo a send. */
	memset(&d, 0, sizeof d);
	assert_int_equal(store_outbox_failed(f->st, a.id, "late", 0, done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.rc, SB_ERR_NOTFOUND);
	q_text(f->path, "SELECT state FROM outbox WHERE idempotency_key = 'a'", text, sizeof text);
	assert_string_equal(text, "sent");

	/* Nothing else is due: p failed for good, b is in the future. */
	claim_outbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 0);
	assert_int_equal(store_outbox_done(f->st, 0, NULL, done_cb, &d), SB_ERR_INVAL);
}

static void test_kv(void **state)
{
	struct fx *f = *state;
	struct kv_res g = {0};
	struct done_res d = {0};

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(store_kv_get(f->st, "telegram", "offset", kv_cb, &g), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(g.calls, 1);
	assert_int_equal(g.rc, SB_ERR_NOTFOUND);
	assert_false(g.has_value);

	assert_int_equal(store_kv_put(f->st, "telegram", "offset", "100", done_cb, &d), SB_OK);
	assert_int_equal(store_kv_put(f->st, "slack", "offset", "other", NULL, NULL), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.rc, SB_OK);
	memset(&d, 0, sizeof d);
	assert_int_equal(store_kv_put(f->st, "telegram", "offset", "101", done_cb, &d), SB_OK);
	memset(&g, 0, sizeof g);
	assert_int_equal(store_kv_get(f->st, "telegram", "offset", kv_cb, &g), SB_OK);
	wait_calls(f, g_calls + 2);
	assert_int_equal(d.calls, 1);
	assert_int_equal(d.rc, SB_OK);
	assert_int_equal(g.calls, 1);
	assert_int_equal(g.rc, SB_OK);
	assert_string_equal(g.value, "101");

	assert_int_equal(q_int(f->path, "SELECT count(*) FROM kv"), 2);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM kv WHERE ns = 'slack'"
	                                " AND value = 'other'"),
	                 1);
	/* A NULL value deletes the key, and only that key; deleting again is
	 * not an error. */
	memset(&d, 0, sizeof d);
	assert_int_equal(store_kv_put(f->st, "telegram", "offset", NULL, done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.rc, SB_OK);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM kv WHERE ns = 'telegram'"), 0);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM kv WHERE ns = 'slack'"), 1);
	memset(&d, 0, sizeof d);
	assert_int_equal(store_kv_put(f->st, "telegram", "offset", NULL, done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.rc, SB_OK);
	assert_int_equal(store_kv_put(f->st, NULL, "offset", "1", done_cb, &d), SB_ERR_INVAL);
}

static void test_sessions(void **state)
{
	struct fx *f = *state;
	struct sess_res g = {0};
	struct done_res d = {0};
	struct store_session s1 = {"agent:main:main", "main", "sess-1", "{\"model\":\"x\"}", 0};
	struct store_session s2 = {"agent:main:main", "main", "sess-2", NULL, 1234};
	int64_t t0 = now_ms();

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(store_session_get(f->st, "agent:main:main", sess_cb, &g), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(g.rc, SB_ERR_NOTFOUND);
	assert_false(g.present);

	assert_int_equal(store_session_put(f->st, &s1, done_cb, &d), SB_OK);
	memset(&g, 0, sizeof g);
	assert_int_equal(store_session_get(f->st, "agent:main:main", sess_cb, &g), SB_OK);
	wait_calls(f, g_calls + 2);
	assert_int_equal(d.rc, SB_OK);
	assert_int_equal(g.rc, SB_OK);
	assert_string_equal(g.agent_id, "main");
	assert_string_equal(g.session_id, "sess-1");
	assert_true(g.has_meta);
	assert_string_equal(g.meta, "{\"model\":\"x\"}");
	assert_true(g.updated_at >= t0 && g.updated_at <= now_ms());

	memset(&d, 0, sizeof d);
	assert_int_equal(store_session_put(f->st, &s2, done_cb, &d), SB_OK);
	memset(&g, 0, sizeof g);
	assert_int_equal(store_session_get(f->st, "agent:main:main", sess_cb, &g), SB_OK);
	wait_calls(f, g_calls + 2);
	assert_int_equal(d.calls, 1);
	assert_int_equal(g.calls, 1);
	assert_string_equal(g.session_id, "sess-2");
	/* A put without meta keeps the stored one. */
	assert_true(g.has_meta);
	assert_string_equal(g.meta, "{\"model\":\"x\"}");
	assert_int_equal(g.updated_at, 1234);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM sessions"), 1);
}

/* ---- sessions listed, devices ---- */

struct list_res {
	int calls;
	int rc;
	size_t n;
	char keys[8][64];
};

static void session_list_cb(void *ud, int rc, const struct store_session *v, size_t n)
{
	struct list_res *r = ud;

	r->calls++;
	r->rc = rc;
	r->n = n;
	for (size_t i = 0; i < n && i < 8; i++)
		copy_str(r->keys[i], sizeof r->keys[i], v[i].key);
	g_calls++;
}

static void test_session_list(void **state)
{
	struct fx *f = *state;
	struct list_res l = {0};
	struct store_session a = {"agent:main:main", "main", "s1", NULL, 1000};
	struct store_session b = {"agent:ops:x", "ops", "s2", NULL, 3000};
	struct store_session c = {"agent:main:telegram:group:-1", "main", "s3", NULL, 2000};

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(store_session_put(f->st, &a, NULL, NULL), SB_OK);
	assert_int_equal(store_session_put(f->st, &b, NULL, NULL), SB_OK);
	assert_int_equal(store_session_put(f->st, &c, NULL, NULL), SB_OK);
	assert_int_equal(store_session_list(f->st, NULL, 10, session_list_cb, &l), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(l.rc, SB_OK);
	assert_int_equal(l.n, 3);
	/* Most recent first. */
	assert_string_equal(l.keys[0], "agent:ops:x");
	assert_string_equal(l.keys[1], "agent:main:telegram:group:-1");
	assert_string_equal(l.keys[2], "agent:main:main");
	memset(&l, 0, sizeof l);
	assert_int_equal(store_session_list(f->st, "main", 1, session_list_cb, &l), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.keys[0], "agent:main:telegram:group:-1");
	assert_int_equal(store_session_list(f->st, NULL, 0, session_list_cb, &l), SB_ERR_INVAL);
}

struct dev_res {
	int calls;
	int rc;
	bool present;
	bool created;
	char id[80];
	char state[16];
	char scopes[128];
	char token_hash[80];
	char remote[64];
	int64_t approved_at;
	size_t n; /* device_list */
	char ids[40][80];
};

static void device_cb(void *ud, int rc, const struct store_device *d, bool created)
{
	struct dev_res *r = ud;

	r->calls++;
	r->rc = rc;
	r->created = created;
	r->present = d != NULL;
	if (d) {
		copy_str(r->id, sizeof r->id, d->device_id);
		copy_str(r->state, sizeof r->state, d->state);
		copy_str(r->scopes, sizeof r->scopes, d->scopes);
		copy_str(r->token_hash, sizeof r->token_hash, d->token_hash);
		copy_str(r->remote, sizeof r->remote, d->remote_addr);
		r->approved_at = d->approved_at;
	}
	g_calls++;
}

static void device_list_cb(void *ud, int rc, const struct store_device *v, size_t n)
{
	struct dev_res *r = ud;

	r->calls++;
	r->rc = rc;
	r->n = n;
	for (size_t i = 0; i < n && i < 40; i++) {
		copy_str(r->ids[i], sizeof r->ids[i], v[i].device_id);
		if (strcmp(v[i].state, "approved") == 0)
			copy_str(r->state, sizeof r->state, v[i].device_id);
	}
	g_calls++;
}

static struct dev_res device_request(struct fx *f, const char *id, const char *addr)
{
	struct store_device d = {.device_id = id,
	                         .public_key = "pk",
	                         .client_id = "app",
	                         .scopes = "operator.read,operator.write",
	                         .remote_addr = addr};
	struct dev_res r = {0};

	assert_int_equal(store_device_request(f->st, &d, device_cb, &r), SB_OK);
	wait_calls(f, g_calls + 1);
	return r;
}

static void test_devices(void **state)
{
	struct fx *f = *state;
	struct done_res d = {0};
	struct dev_res r;
	char id[16];

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	/* New: pending, with what it asked for. */
	r = device_request(f, "d1", "127.0.0.1");
	assert_int_equal(r.rc, SB_OK);
	assert_true(r.created);
	assert_string_equal(r.state, "pending");
	assert_string_equal(r.scopes, "operator.read,operator.write");
	/* Again: the same record, not a new one; the address is refreshed. */
	r = device_request(f, "d1", "10.0.0.2");
	assert_false(r.created);
	assert_string_equal(r.state, "pending");
	assert_string_equal(r.remote, "10.0.0.2");
	/* No token before approval. */
	assert_int_equal(store_device_set_token(f->st, "d1", "h1", done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.rc, SB_ERR_NOTFOUND);

	memset(&r, 0, sizeof r);
	assert_int_equal(store_device_approve(f->st, "d1", device_cb, &r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.rc, SB_OK);
	assert_string_equal(r.state, "approved");
	assert_true(r.approved_at > 0);
	memset(&r, 0, sizeof r);
	assert_int_equal(store_device_approve(f->st, "d1", device_cb, &r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.rc, SB_ERR_EXISTS);
	assert_true(r.present);
	memset(&r, 0, sizeof r);
	assert_int_equal(store_device_approve(f->st, "nope", device_cb, &r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.rc, SB_ERR_NOTFOUND);

	/* Tokens: found by hash, the latest only. */
	memset(&d, 0, sizeof d);
	assert_int_equal(store_device_set_token(f->st, "d1", "h1", done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.rc, SB_OK);
	memset(&r, 0, sizeof r);
	assert_int_equal(store_device_get(f->st, NULL, "h1", device_cb, &r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.rc, SB_OK);
	assert_string_equal(r.id, "d1");
	assert_int_equal(store_device_set_token(f->st, "d1", "h2", NULL, NULL), SB_OK);
	memset(&r, 0, sizeof r);
	assert_int_equal(store_device_get(f->st, NULL, "h1", device_cb, &r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.rc, SB_ERR_NOTFOUND);
	assert_int_equal(store_device_get(f->st, "d1", "h2", device_cb, &r), SB_ERR_INVAL);

	/* At most STORE_DEVICES_MAX_PENDING wait: the oldest goes. */
	for (int i = 0; i < STORE_DEVICES_MAX_PENDING + 2; i++) {
		snprintf(id, sizeof id, "p%02d", i);
		r = device_request(f, id, NULL);
		assert_true(r.created);
		sleep_ms(2);
	}
	memset(&r, 0, sizeof r);
	assert_int_equal(store_device_list(f->st, device_list_cb, &r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.n, STORE_DEVICES_MAX_PENDING + 1);
	assert_string_equal(r.ids[0], "p02"); /* pending first, oldest first */
	assert_string_equal(r.ids[r.n - 1], "d1");

	/* Revoked: gone, token and all. */
	memset(&d, 0, sizeof d);
	assert_int_equal(store_device_revoke(f->st, "d1", done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.rc, SB_OK);
	memset(&r, 0, sizeof r);
	assert_int_equal(store_device_get(f->st, NULL, "h2", device_cb, &r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.rc, SB_ERR_NOTFOUND);
	memset(&d, 0, sizeof d);
	assert_int_equal(store_device_revoke(f->st, "d1", done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d.rc, SB_ERR_NOTFOUND);
}

static void test_stats(void **state)
{
	struct fx *f = *state;
	struct stats_res s = {0};
	struct claim_res c;
	struct put_res o[3];
	struct done_res d = {0};
	int64_t in[3];

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(store_stats(f->st, stats_cb, &s), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(s.rc, SB_OK);
	assert_int_equal(s.st.inbox_pending, 0);
	assert_int_equal(s.st.outbox_pending, 0);
	assert_int_equal(s.st.queue_depth, 0);

	in[0] = put_inbox_wait(f, "s0", "{}");
	in[1] = put_inbox_wait(f, "s1", "{}");
	in[2] = put_inbox_wait(f, "s2", "{}");
	claim_inbox_wait(f, 1, 60000, &c); /* s0 claimed: still not done */
	assert_int_equal(store_inbox_done(f->st, in[1], NULL, 0, done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 1);
	for (int i = 0; i < 3; i++) {
		char key[8];

		snprintf(key, sizeof key, "o%d", i);
		struct store_outbox_new m = outbox_new(key, "t", "{}", 0, in[2]);
		o[i] = put_outbox_wait(f, &m);
		assert_int_equal(o[i].rc, SB_OK);
	}
	claim_outbox_wait(f, 1, 60000, &c); /* o0 claimed */
	assert_int_equal(c.items[0].inbox_id, in[2]);
	memset(&d, 0, sizeof d);
	assert_int_equal(store_outbox_failed(f->st, o[1].id, "x", -1, done_cb, &d), SB_OK);
	memset(&s, 0, sizeof s);
	assert_int_equal(store_stats(f->st, stats_cb, &s), SB_OK);
	wait_calls(f, g_calls + 2);
	assert_int_equal(d.rc, SB_OK);
	assert_int_equal(s.calls, 1);
	assert_int_equal(s.st.inbox_pending, 2);  /* s0 claimed, s2 pending */
	assert_int_equal(s.st.outbox_pending, 2); /* o0 claimed, o2 pending */
}

/* Holds the database's write lock from another connection, so that the
 * writer waits in BEGIN IMMEDIATE while the test queues operations. */
static sqlite3 *lock_db(const char *path)
{
	sqlite3 *db = NULL;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	return db;
}

static void unlock_db(sqlite3 *db)
{
	assert_int_equal(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void test_stats_queue_depth(void **state)
{
	struct fx *f = *state;
	struct stats_res s = {0};
	struct put_res r[6];
	sqlite3 *lock;

	memset(r, 0, sizeof r);
	assert_int_equal(fx_open(f, 1, 0, 10000), SB_OK);
	lock = lock_db(f->path);
	put_inbox(f, "default", "first", "{}", &r[0]); /* the writer blocks on it */
	sleep_ms(50);
	assert_int_equal(store_stats(f->st, stats_cb, &s), SB_OK);
	for (int i = 1; i < 6; i++) {
		char key[8];

		snprintf(key, sizeof key, "q%d", i);
		put_inbox(f, "default", key, "{}", &r[i]);
	}
	unlock_db(lock);
	wait_calls(f, 7);
	assert_int_equal(s.calls, 1);
	assert_int_equal(s.rc, SB_OK);
	/* batch_max 1: stats ran alone, with the five puts still queued. */
	assert_int_equal(s.st.queue_depth, 5);
	assert_int_equal(s.st.inbox_pending, 1);
	assert_int_equal(f->commits, 7);
}

static void test_queue_full(void **state)
{
	struct fx *f = *state;
	struct put_res r[4];
	struct store_inbox_new m = {"webhook", "default", "x", "{}", 0};

	memset(r, 0, sizeof r);
	assert_int_equal(fx_open(f, 0, 3, 0), SB_OK);
	put_inbox(f, "default", "q0", "{}", &r[0]);
	put_inbox(f, "default", "q1", "{}", &r[1]);
	put_inbox(f, "default", "q2", "{}", &r[2]);
	/* Three outstanding (callbacks not run): the fourth is refused at once,
	 * whatever the writer has done meanwhile. */
	sleep_ms(30);
	assert_int_equal(store_inbox_put(f->st, &m, put_cb, &r[3]), SB_ERR_AGAIN);
	assert_int_equal(store_stats(f->st, stats_cb, NULL), SB_ERR_AGAIN);
	wait_calls(f, 3);
	assert_int_equal(r[3].calls, 0);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox"), 3);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox WHERE dedupe_key = 'x'"), 0);

	/* Drained: accepted again. */
	assert_int_equal(store_inbox_put(f->st, &m, put_cb, &r[3]), SB_OK);
	wait_calls(f, 4);
	assert_int_equal(r[3].calls, 1);
	assert_int_equal(r[3].rc, SB_OK);

	/* Work already claimed is finished even while the queue is full:
	 * refusing it would leave the entries claimed until a restart. */
	{
		struct claim_res c;
		struct done_res d[2];
		struct put_res more[3];

		memset(d, 0, sizeof d);
		memset(more, 0, sizeof more);
		claim_inbox_wait(f, 2, 60000, &c);
		assert_int_equal(c.n, 2);
		put_inbox(f, "default", "q4", "{}", &more[0]);
		put_inbox(f, "default", "q5", "{}", &more[1]);
		put_inbox(f, "default", "q6", "{}", &more[2]);
		assert_int_equal(store_inbox_put(f->st, &m, put_cb, &r[3]), SB_ERR_AGAIN);
		assert_int_equal(store_inbox_done(f->st, c.items[0].id, NULL, 0, done_cb, &d[0]),
		                 SB_OK);
		assert_int_equal(store_inbox_release(f->st, c.items[1].id, done_cb, &d[1]), SB_OK);
		wait_calls(f, g_calls + 5);
		assert_int_equal(d[0].rc, SB_OK);
		assert_int_equal(d[1].rc, SB_OK);
		assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox WHERE state = 'done'"),
		                 1);
	}
}

static void test_group_commit(void **state)
{
	struct fx *f = *state;
	enum { N = 500 };
	struct put_res *r = calloc(N, sizeof *r);
	char key[16];

	assert_non_null(r);
	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof key, "g%d", i);
		put_inbox(f, "default", key, key, &r[i]);
	}
	wait_calls(f, N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(r[i].calls, 1);
		assert_int_equal(r[i].rc, SB_OK);
		assert_false(r[i].dup);
		if (i > 0)
			assert_true(r[i].id > r[i - 1].id);
	}
	print_message("group commit: %d ops in %zu commits (%.1f ops/commit, largest %zu)\n", N,
	              f->commits, (double)f->commit_ops / (double)f->commits, f->commit_max_ops);
	assert_int_equal(f->commit_ops, N);
	assert_int_equal(f->commit_failures, 0);
	assert_true(f->commits >= 2); /* batch_max defaults to 256 */
	assert_true(f->commits <= N / 10);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox"), N);
	assert_int_equal(q_int(f->path, "SELECT count(DISTINCT dedupe_key) FROM inbox"
	                                " WHERE dedupe_key = payload"),
	                 N);
	free(r);
}

/* What one callback queues shares one commit: the writer is woken after the
 * loop's callbacks, not at the first submission (before, the session update
 * and the reply a run queued together went in two commits, two fsyncs). */
struct chain {
	struct fx *f;
	struct put_res b, c;
	struct done_res kv;
};

static void chain_first(void *ud, int rc, int64_t id, bool dup)
{
	struct chain *ch = ud;
	struct store_inbox_new b = {"webhook", "default", "chain-b", "{}", 0};
	struct store_inbox_new c = {"webhook", "default", "chain-c", "{}", 0};

	(void)id;
	(void)dup;
	assert_int_equal(rc, SB_OK);
	assert_int_equal(store_inbox_put(ch->f->st, &b, put_cb, &ch->b), SB_OK);
	assert_int_equal(store_kv_put(ch->f->st, "t", "k", "v", done_cb, &ch->kv), SB_OK);
	assert_int_equal(store_inbox_put(ch->f->st, &c, put_cb, &ch->c), SB_OK);
	g_calls++;
}

static void test_one_commit_per_iteration(void **state)
{
	struct fx *f = *state;
	struct store_inbox_new a = {"webhook", "default", "chain-a", "{}", 0};
	struct chain ch = {.f = f};

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(store_inbox_put(f->st, &a, chain_first, &ch), SB_OK);
	wait_calls(f, g_calls + 4);
	assert_int_equal(ch.b.rc, SB_OK);
	assert_int_equal(ch.c.rc, SB_OK);
	assert_int_equal(ch.kv.rc, SB_OK);
	assert_true(ch.c.id > ch.b.id);
	assert_int_equal(f->commits, 2);
	assert_int_equal(f->last_commit_ops, 3);
}

/* An entry put claimed runs without a claim: a claim does not return it, a
 * duplicate keeps it claimed, and start-up recovery makes it pending. */
static void test_inbox_put_claimed(void **state)
{
	struct fx *f = *state;
	struct store_inbox_new m = {"webhook", "default", "claimed-1", "{\"n\":1}", 60000};
	struct put_res r = {0}, dup = {0};
	struct claim_res c;
	char st[32];

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(store_inbox_put(f->st, &m, put_cb, &r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.rc, SB_OK);
	assert_false(r.dup);
	q_text(f->path, "SELECT state || ':' || attempts FROM inbox WHERE dedupe_key = 'claimed-1'",
	       st, sizeof st);
	assert_string_equal(st, "claimed:1");
	assert_true(q_int(f->path, "SELECT lease_until - received_at FROM inbox") == 60000);
	claim_inbox_wait(f, 10, 1000, &c);
	assert_int_equal(c.n, 0);
	m.claim_lease_ms = 0; /* a redelivery of the same event */
	assert_int_equal(store_inbox_put(f->st, &m, put_cb, &dup), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_true(dup.dup);
	assert_int_equal(dup.id, r.id);
	q_text(f->path, "SELECT state FROM inbox WHERE dedupe_key = 'claimed-1'", st, sizeof st);
	assert_string_equal(st, "claimed");
	m.claim_lease_ms = -1;
	assert_int_equal(store_inbox_put(f->st, &m, put_cb, NULL), SB_ERR_INVAL);
}

/* The reply committed with inbox_done_claimed comes back claimed, to send
 * at once; a duplicate reply does not come back; a claim finds neither. */
static void test_inbox_done_claimed(void **state)
{
	struct fx *f = *state;
	struct store_outbox_new replies[2];
	struct claim_res got = {0}, c;
	int64_t in_id, in2;
	char st[32];

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	in_id = put_inbox_wait(f, "dc-1", "{}");
	in2 = put_inbox_wait(f, "dc-2", "{}");
	replies[0] = outbox_new("reply-dc-1", "chat-1", "{\"text\":\"one\"}", 0, 0);
	replies[0].claim_lease_ms = 600000;
	replies[1] = outbox_new("reply-dc-2", "chat-1", "{\"text\":\"two\"}", 0, 0);
	assert_int_equal(store_inbox_done_claimed(f->st, in_id, replies, 2, outbox_cb, &got),
	                 SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(got.rc, SB_OK);
	assert_int_equal(got.n, 1);
	assert_string_equal(got.items[0].key, "reply-dc-1");
	assert_string_equal(got.items[0].target, "chat-1");
	assert_string_equal(got.items[0].payload, "{\"text\":\"one\"}");
	assert_int_equal(got.items[0].attempts, 0);
	assert_int_equal(got.items[0].inbox_id, in_id);
	q_text(f->path,
	       "SELECT group_concat(state, ',') FROM (SELECT state FROM outbox ORDER BY id)", st,
	       sizeof st);
	assert_string_equal(st, "claimed,pending");
	/* only the pending one is claimable */
	claim_outbox_wait(f, 10, 1000, &c);
	assert_int_equal(c.n, 1);
	assert_string_equal(c.items[0].key, "reply-dc-2");
	/* the same reply key again: a duplicate, not handed back */
	memset(&got, 0, sizeof got);
	assert_int_equal(store_inbox_done_claimed(f->st, in2, replies, 1, outbox_cb, &got), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(got.rc, SB_OK);
	assert_int_equal(got.n, 0);
	/* an unknown inbox entry: nothing done, nothing handed back */
	memset(&got, 0, sizeof got);
	replies[0] = outbox_new("reply-dc-3", "chat-1", "{}", 0, 0);
	replies[0].claim_lease_ms = 600000;
	assert_int_equal(store_inbox_done_claimed(f->st, 999999, replies, 1, outbox_cb, &got),
	                 SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(got.rc, SB_ERR_NOTFOUND);
	assert_int_equal(got.n, 0);
	assert_int_equal(
	    q_int(f->path, "SELECT count(*) FROM outbox WHERE idempotency_key = 'reply-dc-3'"), 0);
}

/* A lazy operation waits for the next commit that writes: it does not
 * commit alone while a read runs, and it shares the next put's commit
 * (kv_put_lazy, whose bound is a second); alone, it still commits within
 * its bound (outbox_done, 2 ms). */
static void test_lazy_rides_with_next_write(void **state)
{
	struct fx *f = *state;
	struct store_outbox_new m = outbox_new("lazy-1", "chat-1", "{}", 0, 0);
	struct put_res o, p = {0};
	struct done_res d = {0}, d2 = {0};
	struct kv_res kv = {0};
	struct claim_res c;
	size_t commits;

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	commits = f->commits;
	assert_int_equal(store_kv_put_lazy(f->st, "ns", "k", "v", done_cb, &d), SB_OK);
	assert_int_equal(store_kv_get(f->st, "ns", "k", kv_cb, &kv), SB_OK);
	wait_calls(f, g_calls + 1); /* the read alone, before the put */
	assert_int_equal(kv.calls, 1);
	assert_int_equal(kv.rc, SB_ERR_NOTFOUND);
	assert_int_equal(d.calls, 0);
	assert_int_equal(f->commits, commits + 1);
	assert_int_equal(f->last_commit_ops, 1);
	put_inbox(f, "default", "lazy-next", "{}", &p);
	wait_calls(f, g_calls + 2);
	assert_int_equal(p.rc, SB_OK);
	assert_int_equal(d.calls, 1);
	assert_int_equal(d.rc, SB_OK);
	assert_int_equal(f->commits, commits + 2);
	assert_int_equal(f->last_commit_ops, 2);
	/* alone, within its bound (the guard of wait_calls is far longer) */
	o = put_outbox_wait(f, &m);
	claim_outbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 1);
	assert_int_equal(store_outbox_done(f->st, o.id, NULL, done_cb, &d2), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(d2.rc, SB_OK);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM outbox WHERE state = 'sent'"), 1);
}

static void pause_cb(uv_timer_t *t)
{
	*(int *)t->data = 1;
}

/* Runs the loop until ms have passed (every timer due by then fires). */
static void run_loop_ms(struct fx *f, uint64_t ms)
{
	uv_timer_t t;
	int fired = 0;

	uv_timer_init(&f->loop, &t);
	t.data = &fired;
	uv_timer_start(&t, pause_cb, ms, 0);
	while (!fired)
		uv_run(&f->loop, UV_RUN_ONCE);
	uv_close((uv_handle_t *)&t, NULL);
	uv_run(&f->loop, UV_RUN_NOWAIT);
}

/* Each lazy operation keeps its own bound: an outbox_done (10 ms) that
 * rode with a put leaves its timer behind, and when it fires the
 * kv_put_lazy queued since (a second) still waits for a write instead of
 * committing alone (a commit and an fdatasync per message at one sender,
 * in bench_pipeline). */
static void test_lazy_keeps_its_own_bound(void **state)
{
	struct fx *f = *state;
	struct store_outbox_new m = outbox_new("lazy-b", "chat-1", "{}", 0, 0);
	struct put_res o, p = {0}, p2 = {0};
	struct done_res d = {0}, dk = {0};
	struct kv_res kv = {0};
	struct claim_res c;
	size_t commits;

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	o = put_outbox_wait(f, &m);
	claim_outbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 1);
	assert_int_equal(store_outbox_done(f->st, o.id, NULL, done_cb, &d), SB_OK);
	put_inbox(f, "default", "lazy-b-1", "{}", &p);
	wait_calls(f, g_calls + 2); /* one commit: the put and the mark */
	assert_int_equal(d.rc, SB_OK);
	assert_int_equal(f->last_commit_ops, 2);
	commits = f->commits;
	assert_int_equal(store_kv_put_lazy(f->st, "ns", "k", "v", done_cb, &dk), SB_OK);
	run_loop_ms(f, STORE_LAZY_DONE_MS * 3); /* the outbox_done's timer fires */
	assert_int_equal(store_kv_get(f->st, "ns", "k", kv_cb, &kv), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(kv.rc, SB_ERR_NOTFOUND);
	assert_int_equal(dk.calls, 0);
	assert_int_equal(f->commits, commits + 1);
	assert_int_equal(f->last_commit_ops, 1); /* the read, alone */
	put_inbox(f, "default", "lazy-b-2", "{}", &p2);
	wait_calls(f, g_calls + 2);
	assert_int_equal(dk.rc, SB_OK);
	assert_int_equal(f->commits, commits + 2);
	assert_int_equal(f->last_commit_ops, 2);
}

static void test_failure_isolated(void **state)
{
	struct fx *f = *state;
	struct put_res a = {0}, o = {0}, b = {0}, first = {0};
	struct store_outbox_new bad = outbox_new("orphan", "t", "{}", 0, 999999);
	sqlite3 *lock;

	assert_int_equal(fx_open(f, 0, 0, 10000), SB_OK);
	/* Hold the writer in its first batch so that the next three operations
	 * are queued together and share one transaction. */
	lock = lock_db(f->path);
	put_inbox(f, "default", "first", "{}", &first);
	sleep_ms(50);
	put_inbox(f, "default", "a", "{}", &a);
	assert_int_equal(store_outbox_put(f->st, &bad, put_cb, &o), SB_OK);
	put_inbox(f, "default", "b", "{}", &b);
	unlock_db(lock);
	wait_calls(f, 4);
	/* FIFO: a commit of three or more ending with b holds a, o and b. */
	assert_true(f->last_commit_ops >= 3);
	assert_int_equal(a.rc, SB_OK);
	assert_int_equal(o.rc, SB_ERR_INVAL);
	assert_int_equal(o.id, 0);
	assert_int_equal(b.rc, SB_OK);
	assert_int_equal(
	    q_int(f->path, "SELECT count(*) FROM inbox WHERE dedupe_key IN ('a', 'b')"), 2);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM outbox"), 0);
}

static void kv_put_done(void *ud, int rc)
{
	int *r = ud;

	*r = rc == SB_OK ? 1 : -1;
	g_calls++;
}

/* An operation of one statement runs without a savepoint of its own: when
 * it fails half way (here a trigger writes, then aborts), SQLite undoes
 * that statement and nothing else; the operations around it in the same
 * transaction commit. */
static void test_one_statement_failure_isolated(void **state)
{
	struct fx *f = *state;
	struct put_res first = {0};
	int a = 0, bad = 0, b = 0;
	sqlite3 *lock;

	assert_int_equal(fx_open(f, 0, 0, 10000), SB_OK);
	q_exec(f->path,
	       "CREATE TABLE kv_log (key TEXT);"
	       "CREATE TRIGGER kv_refuse AFTER INSERT ON kv WHEN NEW.key = 'bad' BEGIN "
	       "INSERT INTO kv_log VALUES (NEW.key); SELECT RAISE(ABORT, 'refused'); END;");
	lock = lock_db(f->path);
	put_inbox(f, "default", "first", "{}", &first);
	sleep_ms(50);
	assert_int_equal(store_kv_put(f->st, "t", "a", "1", kv_put_done, &a), SB_OK);
	assert_int_equal(store_kv_put(f->st, "t", "bad", "2", kv_put_done, &bad), SB_OK);
	assert_int_equal(store_kv_put(f->st, "t", "b", "3", kv_put_done, &b), SB_OK);
	unlock_db(lock);
	wait_calls(f, 4);
	assert_true(f->last_commit_ops >= 3); /* the three shared a transaction */
	assert_int_equal(a, 1);
	assert_int_equal(bad, -1);
	assert_int_equal(b, 1);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM kv WHERE ns = 't' AND key IN "
	                                "('a', 'b')"),
	                 2);
	/* neither the row nor what its trigger wrote before it aborted */
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM kv WHERE key = 'bad'"), 0);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM kv_log"), 0);
}

static void test_begin_failure_acknowledges_nothing(void **state)
{
	struct fx *f = *state;
	struct put_res r[3];
	sqlite3 *lock;

	memset(r, 0, sizeof r);
	assert_int_equal(fx_open(f, 0, 0, 30), SB_OK); /* 30 ms busy timeout */
	lock = lock_db(f->path);
	put_inbox(f, "default", "l0", "{}", &r[0]);
	put_inbox(f, "default", "l1", "{}", &r[1]);
	put_inbox(f, "default", "l2", "{}", &r[2]);
	wait_calls(f, 3);
	unlock_db(lock);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(r[i].calls, 1);
		assert_int_equal(r[i].rc, SB_ERR_STORE);
		assert_int_equal(r[i].id, 0);
	}
	assert_true(f->commit_failures >= 1);
	assert_int_equal(f->commit_ops, 3);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox"), 0);

	/* The store carries on once the lock is gone. */
	put_inbox_wait(f, "l3", "{}");
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox"), 1);
}

static void test_close_flushes_and_refuses(void **state)
{
	struct fx *f = *state;
	enum { N = 20 };
	struct put_res r[N];
	struct kv_res g = {0};
	char key[16];

	memset(r, 0, sizeof r);
	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof key, "c%d", i);
		put_inbox(f, "default", key, "{}", &r[i]);
	}
	assert_int_equal(store_kv_get(f->st, "ns", "absent", kv_cb, &g), SB_OK);
	r[0].reput = f;
	r[0].reput_rc = -1;
	/* No loop run: close itself finishes the queue and runs every callback
	 * exactly once, on this thread. */
	fx_close(f);
	assert_int_equal(g_calls, N + 1);
	for (int i = 0; i < N; i++) {
		assert_int_equal(r[i].calls, 1);
		assert_int_equal(r[i].rc, SB_OK);
	}
	assert_int_equal(g.calls, 1);
	assert_int_equal(g.rc, SB_ERR_NOTFOUND);
	/* An operation started from a callback that close runs is refused. */
	assert_int_equal(r[0].reput_rc, SB_ERR_CLOSED);
	assert_int_equal(f->commit_ops, N + 1);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox"), N);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox WHERE dedupe_key ="
	                                " 'after-close'"),
	                 0);
	/* Nothing runs twice when the loop turns again. */
	uv_run(&f->loop, UV_RUN_NOWAIT);
	assert_int_equal(g_calls, N + 1);
}

/* ---- transcript bytes kept until their file is synced ---- */

struct tlist_res {
	int calls;
	int rc;
	size_t n;
	int64_t id[4];
	int64_t offset[4];
	char path[4][64];
	char bytes[4][64];
};

static void tlist_cb(void *ud, int rc, const struct store_transcript_lines *v, size_t n)
{
	struct tlist_res *r = ud;

	r->calls++;
	r->rc = rc;
	r->n = n;
	for (size_t i = 0; i < n && i < 4; i++) {
		r->id[i] = v[i].id;
		r->offset[i] = v[i].offset;
		copy_str(r->path[i], sizeof r->path[i], v[i].path);
		assert_true(v[i].len < sizeof r->bytes[i]);
		memcpy(r->bytes[i], v[i].bytes, v[i].len);
		r->bytes[i][v[i].len] = '\0';
	}
	g_calls++;
}

static void tlist_wait(struct fx *f, struct tlist_res *r)
{
	memset(r, 0, sizeof *r);
	assert_int_equal(store_transcript_list(f->st, tlist_cb, r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r->rc, SB_OK);
}

/* A run's transcript bytes commit with its inbox_done (one commit), come
 * back in order with their offsets, and a trim forgets those up to an id
 * lazily, with the next write. */
static void test_transcript_pending(void **state)
{
	struct fx *f = *state;
	struct store_transcript_lines a = {0, "/h/a.jsonl", 0, "{\"type\":\"session\"}\n", 19};
	struct store_transcript_lines b = {0, "/h/a.jsonl", 19, "{\"x\":1}\n", 8};
	struct put_res pa = {0}, pb = {0};
	struct done_res d = {0}, t = {0};
	struct tlist_res l;
	int64_t inbox;
	size_t commits;

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	inbox = put_inbox_wait(f, "t-1", "{}");
	commits = f->commits;

	assert_int_equal(store_transcript_put(f->st, &a, put_cb, &pa), SB_OK);
	assert_int_equal(store_inbox_done(f->st, inbox, NULL, 0, done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 2);
	assert_int_equal(pa.rc, SB_OK);
	assert_int_equal(d.rc, SB_OK);
	assert_int_equal(f->commits, commits + 1);
	assert_int_equal(store_transcript_put(f->st, &b, put_cb, &pb), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_true(pb.id > pa.id);
	tlist_wait(f, &l);
	assert_int_equal(l.n, 2);
	assert_int_equal(l.id[0], pa.id);
	assert_string_equal(l.path[0], "/h/a.jsonl");
	assert_int_equal(l.offset[0], 0);
	assert_string_equal(l.bytes[0], "{\"type\":\"session\"}\n");
	assert_int_equal(l.offset[1], 19);
	assert_string_equal(l.bytes[1], "{\"x\":1}\n");
	/* Bad arguments queue nothing. */
	b.len = 0;
	assert_int_equal(store_transcript_put(f->st, &b, put_cb, NULL), SB_ERR_INVAL);
	assert_int_equal(store_transcript_trim(f->st, 0, 0, done_cb, NULL), SB_ERR_INVAL);
	assert_int_equal(store_transcript_trim(f->st, -1, 1, done_cb, NULL), SB_ERR_INVAL);
	/* Lazy: nothing is written until another write commits. Only the
	 * rows after `after` go: those up to it stay. */
	assert_int_equal(store_transcript_trim(f->st, pa.id, pb.id, done_cb, &t), SB_OK);
	uv_run(&f->loop, UV_RUN_NOWAIT);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM transcript_pending"), 2);
	{
		struct put_res r2 = {0};

		put_inbox(f, "default", "t-2", "{}", &r2);
		wait_calls(f, g_calls + 2);
		assert_int_equal(r2.rc, SB_OK);
	}
	assert_int_equal(t.calls, 1);
	assert_int_equal(t.rc, SB_OK);
	tlist_wait(f, &l);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.id[0], pa.id);
}

/* From version 4 the step adds the table and keeps what is there. */
static void test_transcript_pending_migration(void **state)
{
	struct fx *f = *state;

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	put_inbox_wait(f, "kept", "{}");
	fx_close(f);
	q_exec(f->path, "DROP TABLE transcript_pending; PRAGMA user_version = 4;");
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM sqlite_master WHERE name ="
	                                " 'transcript_pending'"),
	                 0);
	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(q_int(f->path, "PRAGMA user_version"), STORE_SQLITE_SCHEMA_VERSION);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM transcript_pending"), 0);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox WHERE dedupe_key = 'kept'"), 1);
}

struct tbig_res {
	int calls;
	int rc;
	size_t n;
	char *bytes; /* the first row's */
	size_t len;
};

static void tbig_cb(void *ud, int rc, const struct store_transcript_lines *v, size_t n)
{
	struct tbig_res *r = ud;

	r->calls++;
	r->rc = rc;
	r->n = n;
	if (n) {
		r->bytes = malloc(v[0].len + 1);
		assert_non_null(r->bytes);
		memcpy(r->bytes, v[0].bytes, v[0].len);
		r->len = v[0].len;
	}
	g_calls++;
}

/* The whole of tests/unit/data/<name> (up to 16 KiB), NUL after it; the
 * caller frees it. */
static char *read_data(const char *name, size_t *len)
{
	char path[512];
	char *buf = malloc(16385);
	FILE *fp;

	snprintf(path, sizeof path, SB_SOURCE_DIR "/tests/unit/data/%s", name);
	assert_non_null(buf);
	assert_non_null(fp = fopen(path, "rb"));
	*len = fread(buf, 1, 16384, fp);
	assert_true(feof(fp));
	fclose(fp);
	buf[*len] = '\0';
	return buf;
}

/* A run's lines (a webhook message with one tool call, 5.3 KB, from
 * bench_pipeline) are kept compressed, in about a fifth of their size, and
 * come back byte for byte. */
static void test_transcript_pending_compressed(void **state)
{
	struct fx *f = *state;
	struct store_transcript_lines a = {0, "/h/run.jsonl", 0, NULL, 0};
	struct put_res pa = {0};
	struct tbig_res r = {0};
	size_t len = 0;
	char *run = read_data("transcript_run.jsonl", &len);

	assert_true(len > 5000 && len < 16384);
	a.bytes = run;
	a.len = len;
	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(store_transcript_put(f->st, &a, put_cb, &pa), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(pa.rc, SB_OK);
	assert_true(q_int(f->path, "SELECT length(bytes) FROM transcript_pending") < 1100);
	assert_int_equal(q_int(f->path, "SELECT codec FROM transcript_pending"), 2);
	/* A Zstandard frame (its magic number, little-endian). */
	assert_int_equal(q_int(f->path, "SELECT hex(substr(bytes, 1, 4)) = '28B52FFD'"
	                                " FROM transcript_pending"),
	                 1);
	assert_int_equal(store_transcript_list(f->st, tbig_cb, &r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(r.n, 1);
	assert_int_equal(r.len, len);
	assert_memory_equal(r.bytes, run, len);
	free(r.bytes);
	free(run);
}

/* Rows an earlier build compressed with codec 1 (raw DEFLATE with the
 * same dictionary; the fixture is such a row of transcript_run.jsonl) are
 * still read, byte for byte; a codec 2 row whose frame is damaged, cut or
 * of another length than its raw_len, and a codec unknown to this build,
 * fail the list with SB_ERR_STORE instead of restoring wrong bytes. */
static void test_transcript_pending_old_codec(void **state)
{
	struct fx *f = *state;
	struct store_transcript_lines a = {0, "/h/run.jsonl", 0, NULL, 0};
	struct put_res pa = {0};
	struct tbig_res r = {0};
	char sql[10000];
	size_t len, olen, k;
	char *run = read_data("transcript_run.jsonl", &len);
	char *old = read_data("transcript_run.deflate1", &olen);
	static const char *const damage[] = {
	    "UPDATE transcript_pending SET raw_len = raw_len + 1",
	    "UPDATE transcript_pending SET bytes = substr(bytes, 1, length(bytes) - 3)",
	    "UPDATE transcript_pending SET bytes = substr(bytes, 1, 20) || x'00' ||"
	    " substr(bytes, 22)",
	    "UPDATE transcript_pending SET bytes = bytes || x'00'",
	    /* a byte of the compressed data changed: the checksum fails */
	    "UPDATE transcript_pending SET bytes = CAST(substr(bytes, 1, 400) || CASE WHEN"
	    " substr(bytes, 401, 1) = x'00' THEN x'01' ELSE x'00' END || substr(bytes, 402)"
	    " AS BLOB)",
	    "UPDATE transcript_pending SET codec = 3",
	};

	assert_true(olen > 500 && olen < 1100);
	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	fx_close(f);
	k = (size_t)snprintf(sql, sizeof sql,
	                     "INSERT INTO transcript_pending (path, file_offset, created_at, bytes,"
	                     " codec, raw_len) VALUES ('/h/old.jsonl', 0, 1, x'");
	for (size_t i = 0; i < olen; i++)
		k += (size_t)snprintf(sql + k, sizeof sql - k, "%02x", (unsigned char)old[i]);
	snprintf(sql + k, sizeof sql - k, "', 1, %zu)", len);
	q_exec(f->path, sql);
	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(store_transcript_list(f->st, tbig_cb, &r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(r.n, 1);
	assert_int_equal(r.len, len);
	assert_memory_equal(r.bytes, run, len);
	free(r.bytes);
	fx_close(f);
	q_exec(f->path, "DELETE FROM transcript_pending");
	for (size_t d = 0; d < sizeof damage / sizeof *damage; d++) {
		struct tbig_res bad = {0};

		a.bytes = run;
		a.len = len;
		pa.calls = 0;
		assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
		assert_int_equal(store_transcript_put(f->st, &a, put_cb, &pa), SB_OK);
		wait_calls(f, g_calls + 1);
		assert_int_equal(pa.rc, SB_OK);
		fx_close(f);
		q_exec(f->path, damage[d]);
		assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
		assert_int_equal(store_transcript_list(f->st, tbig_cb, &bad), SB_OK);
		wait_calls(f, g_calls + 1);
		if (bad.rc != SB_ERR_STORE)
			fail_msg("damage %zu (%s) listed with %d", d, damage[d], bad.rc);
		free(bad.bytes);
		fx_close(f);
		q_exec(f->path, "DELETE FROM transcript_pending");
	}
	free(old);
	free(run);
}

struct tmany_res {
	int rc;
	size_t n;
	char *bytes[3];
	size_t len[3];
};

static void tmany_cb(void *ud, int rc, const struct store_transcript_lines *v, size_t n)
{
	struct tmany_res *r = ud;

	r->rc = rc;
	r->n = n;
	for (size_t i = 0; i < n && i < 3; i++) {
		r->bytes[i] = malloc(v[i].len + 1);
		assert_non_null(r->bytes[i]);
		memcpy(r->bytes[i], v[i].bytes, v[i].len);
		r->len[i] = v[i].len;
	}
	g_calls++;
}

/* The writer's compressor after a row that did not shrink (random bytes,
 * stored as written): the next row is compressed again, and both read back
 * byte for byte; so does a row of two bytes (too small to try). */
static void test_transcript_pending_after_incompressible(void **state)
{
	struct fx *f = *state;
	struct store_transcript_lines rows[3] = {{0, "/h/a.jsonl", 0, NULL, 6000},
	                                         {0, "/h/b.jsonl", 0, NULL, 0},
	                                         {0, "/h/c.jsonl", 0, "{\n", 2}};
	char *noise = malloc(6000), *run = read_data("transcript_run.jsonl", &rows[1].len);
	struct put_res pr[3] = {{0}};
	struct tmany_res r = {0};
	uint32_t seed = 7;

	assert_non_null(noise);
	for (size_t i = 0; i < 6000; i++)
		noise[i] = (char)((seed = seed * 1103515245u + 12345u) >> 16);
	rows[0].bytes = noise;
	rows[1].bytes = run;
	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(store_transcript_put(f->st, &rows[i], put_cb, &pr[i]), SB_OK);
		wait_calls(f, g_calls + 1);
		assert_int_equal(pr[i].rc, SB_OK);
	}
	assert_int_equal(q_int(f->path, "SELECT (SELECT group_concat(codec, ',') FROM"
	                                " (SELECT codec FROM transcript_pending ORDER BY id))"
	                                " = '0,2,0'"),
	                 1);
	assert_int_equal(store_transcript_list(f->st, tmany_cb, &r), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(r.n, 3);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(r.len[i], rows[i].len);
		assert_memory_equal(r.bytes[i], rows[i].bytes, rows[i].len);
		free(r.bytes[i]);
	}
	free(noise);
	free(run);
}

/* A store of schema 5 keeps the rows it holds (as written) through the
 * step to 6, and they list as they were, beside new ones. */
static void test_transcript_pending_v5_rows(void **state)
{
	struct fx *f = *state;
	struct store_transcript_lines b = {0, "/h/new.jsonl", 0, "{\"type\":\"session\"}\n", 19};
	struct put_res pb = {0};
	struct tlist_res l;

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	put_inbox_wait(f, "kept-5", "{}");
	fx_close(f);
	q_exec(f->path, "ALTER TABLE transcript_pending DROP COLUMN codec;"
	                "ALTER TABLE transcript_pending DROP COLUMN raw_len;"
	                "INSERT INTO transcript_pending (path, file_offset, created_at, bytes)"
	                " VALUES ('/h/old.jsonl', 7, 1, CAST('{\"old\":1}' || char(10) AS BLOB));"
	                "PRAGMA user_version = 5;");
	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(q_int(f->path, "PRAGMA user_version"), STORE_SQLITE_SCHEMA_VERSION);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox WHERE dedupe_key = 'kept-5'"),
	                 1);
	assert_int_equal(store_transcript_put(f->st, &b, put_cb, &pb), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(pb.rc, SB_OK);
	tlist_wait(f, &l);
	assert_int_equal(l.n, 2);
	assert_string_equal(l.path[0], "/h/old.jsonl");
	assert_int_equal(l.offset[0], 7);
	assert_string_equal(l.bytes[0], "{\"old\":1}\n");
	assert_string_equal(l.path[1], "/h/new.jsonl");
	assert_string_equal(l.bytes[1], "{\"type\":\"session\"}\n");
}

/* The claim indexes hold only what is still to do: after 300 messages
 * answered and their replies sent, each is one page (a commit changes
 * that page, not the last leaves of an index that grows with the
 * history), and what is pending is still found through them. */
static void test_claim_indexes_hold_live_rows(void **state)
{
	struct fx *f = *state;
	struct claim_res c;
	int64_t last = 0;

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	for (int round = 0; round < 10; round++) {
		struct put_res p[30];
		struct done_res d[30];
		char keys[30][32];

		memset(p, 0, sizeof p);
		memset(d, 0, sizeof d);
		for (int i = 0; i < 30; i++) {
			snprintf(keys[i], sizeof keys[i], "live-%d-%d", round, i);
			put_inbox(f, "default", keys[i], "{}", &p[i]);
		}
		wait_calls(f, g_calls + 30);
		for (int i = 0; i < 30; i++) {
			struct store_outbox_new m = outbox_new(keys[i], "chat-1", "{}", 0, 0);

			assert_int_equal(p[i].rc, SB_OK);
			assert_int_equal(store_inbox_done(f->st, p[i].id, &m, 1, done_cb, &d[i]),
			                 SB_OK);
		}
		wait_calls(f, g_calls + 30);
		claim_outbox_wait(f, 30, 60000, &c);
		assert_int_equal(c.n, 30);
		memset(d, 0, sizeof d);
		for (size_t i = 0; i < c.n; i++)
			assert_int_equal(
			    store_outbox_done(f->st, c.items[i].id, NULL, done_cb, &d[i]), SB_OK);
		wait_calls(f, g_calls + 30);
	}
	last = put_inbox_wait(f, "live-last", "{}");
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM outbox WHERE state = 'sent'"), 300);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM dbstat WHERE name = 'inbox_claim'"),
	                 1);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM dbstat WHERE name = 'outbox_claim'"),
	                 1);
	claim_inbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.items[0].id, last);
}

/* A store of schema 6 (claim indexes over every row) moves to 7 with its
 * rows: a message left pending is still claimed, once. */
static void test_claim_indexes_migration(void **state)
{
	struct fx *f = *state;
	struct claim_res c;
	int64_t pending, done;
	struct done_res d = {0};

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	done = put_inbox_wait(f, "mig-done", "{}");
	assert_int_equal(store_inbox_done(f->st, done, NULL, 0, done_cb, &d), SB_OK);
	wait_calls(f, g_calls + 1);
	pending = put_inbox_wait(f, "mig-pending", "{}");
	fx_close(f);
	q_exec(f->path, "DROP INDEX inbox_claim; CREATE INDEX inbox_claim ON inbox (state, id);"
	                "DROP INDEX outbox_claim;"
	                "CREATE INDEX outbox_claim ON outbox (state, due_at, id);"
	                "PRAGMA user_version = 6;");
	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(q_int(f->path, "PRAGMA user_version"), STORE_SQLITE_SCHEMA_VERSION);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
	                                " AND name IN ('inbox_claim', 'outbox_claim')"
	                                " AND sql LIKE '%WHERE state IN%'"),
	                 2);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM inbox"), 2);
	claim_inbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.items[0].id, pending);
	claim_inbox_wait(f, 10, 60000, &c);
	assert_int_equal(c.n, 0);
}

/* Sessions live in the b-tree of their key (schema 8: no table and key
 * index to write apart), and a store of schema 7 moves its sessions
 * there, each as it was, still listed by recency. */
static void test_sessions_without_rowid(void **state)
{
	struct fx *f = *state;
	struct store_session s1 = {"agent:main:a", "main", "sess-a", "{\"m\":1}", 1000};
	struct store_session s2 = {"agent:main:b", "main", "sess-b", NULL, 2000};
	struct done_res d1 = {0}, d2 = {0};
	struct sess_res g = {0};
	char text[64];

	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM sqlite_master WHERE name = 'sessions'"
	                                " AND sql LIKE '%WITHOUT ROWID%'"),
	                 1);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM sqlite_master"
	                                " WHERE name = 'sqlite_autoindex_sessions_1'"),
	                 0);
	fx_close(f);
	/* back to schema 7, with two sessions in a table of rowids */
	q_exec(f->path,
	       "DROP TABLE sessions;"
	       "CREATE TABLE sessions (key TEXT PRIMARY KEY NOT NULL, agent_id TEXT NOT NULL,"
	       " session_id TEXT NOT NULL, meta TEXT, updated_at INTEGER NOT NULL);"
	       "CREATE INDEX sessions_updated ON sessions (updated_at);"
	       "PRAGMA user_version = 7;");
	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(store_session_put(f->st, &s1, done_cb, &d1), SB_OK);
	assert_int_equal(store_session_put(f->st, &s2, done_cb, &d2), SB_OK);
	wait_calls(f, g_calls + 2);
	assert_int_equal(d2.rc, SB_OK);
	fx_close(f);
	q_exec(f->path, "PRAGMA user_version = 7;");
	assert_int_equal(fx_open(f, 0, 0, 0), SB_OK);
	assert_int_equal(q_int(f->path, "PRAGMA user_version"), STORE_SQLITE_SCHEMA_VERSION);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM sqlite_master WHERE name = 'sessions'"
	                                " AND sql LIKE '%WITHOUT ROWID%'"),
	                 1);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM sessions"), 2);
	q_text(f->path,
	       "SELECT group_concat(key) FROM (SELECT key FROM sessions"
	       " ORDER BY updated_at DESC)",
	       text, sizeof text);
	assert_string_equal(text, "agent:main:b,agent:main:a");
	assert_int_equal(store_session_get(f->st, "agent:main:a", sess_cb, &g), SB_OK);
	wait_calls(f, g_calls + 1);
	assert_int_equal(g.rc, SB_OK);
	assert_string_equal(g.session_id, "sess-a");
	assert_string_equal(g.meta, "{\"m\":1}");
	assert_int_equal(g.updated_at, 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_open_migrates, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_old_page_size_kept, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_checkpoint_interval, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_checkpoint_past_interval, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_future_version_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_inbox_roundtrip, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_inbox_dedupe, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_claim_order_and_max, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lease_expiry, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_inbox_done_replies, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_outbox_due_and_retry, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_kv, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sessions, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_session_list, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_devices, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stats, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stats_queue_depth, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_queue_full, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_one_commit_per_iteration, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_inbox_put_claimed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_inbox_done_claimed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lazy_rides_with_next_write, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lazy_keeps_its_own_bound, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_group_commit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failure_isolated, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_one_statement_failure_isolated, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_begin_failure_acknowledges_nothing, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_close_flushes_and_refuses, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_transcript_pending, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_transcript_pending_migration, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_transcript_pending_compressed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_transcript_pending_old_codec, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_transcript_pending_after_incompressible, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_transcript_pending_v5_rows, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_claim_indexes_hold_live_rows, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_claim_indexes_migration, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sessions_without_rowid, setup, teardown),
	};

	return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
