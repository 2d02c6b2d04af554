/*
 * test_outbox.c - the outbox sender against the real SQLite store and a
 * test-double channel that holds each send's callback until the test
 * answers it: confirmation, retry with the channel's hint, and an outcome
 * that arrives after the outbox was freed (a forced stop).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>
#include <uv.h>

#include "gateway/core/err.h"
#include "gateway/pipeline/outbox.h"
#include "gateway/store/store.h"

struct held {
	channel_send_cb cb;
	void *ud;
	char key[64];
	int attempt;
};

struct fx {
	char dir[256];
	char path[320];
	uv_loop_t loop;
	struct store *st;
	struct outbox *ob;
	struct channel ch;
	struct held held[8];
	int n_held;
	int puts;
};

static struct fx *g_fx;

static int fake_send(struct channel *c, const struct channel_outbound *msg, channel_send_cb cb,
                     void *ud)
{
	struct held *h;

	(void)c;
	assert_true(g_fx->n_held < 8);
	h = &g_fx->held[g_fx->n_held++];
	h->cb = cb;
	h->ud = ud;
	h->attempt = msg->attempt;
	snprintf(h->key, sizeof h->key, "%s", msg->idempotency_key);
	return SB_OK;
}

static void fake_destroy(struct channel *c)
{
	(void)c;
}

static const struct channel_ops fake_ops = {
    .name = "fake",
    .destroy = fake_destroy,
    .send = fake_send,
};

static struct channel *fx_channel(void *ud, const char *name, const char *account)
{
	struct fx *f = ud;

	(void)account;
	return strcmp(name, "fake") == 0 ? &f->ch : NULL;
}

static void put_cb(void *ud, int rc, int64_t id, bool dup)
{
	struct fx *f = ud;

	(void)id;
	(void)dup;
	assert_int_equal(rc, SB_OK);
	f->puts++;
}

static void run_until(struct fx *f, int *counter, int target)
{
	for (int i = 0; i < 2000 && *counter < target; i++)
		uv_run(&f->loop, UV_RUN_NOWAIT), usleep(1000);
	assert_int_equal(*counter, target);
}

static void run_a_while(struct fx *f, int ms)
{
	for (int i = 0; i < ms; i++)
		uv_run(&f->loop, UV_RUN_NOWAIT), usleep(1000);
}

static void q_text(const char *path, const char *sql, char *out, size_t size)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	snprintf(out, size, "%s",
	         sqlite3_column_text(st, 0) ? (const char *)sqlite3_column_text(st, 0) : "(null)");
	sqlite3_finalize(st);
	sqlite3_close(db);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	struct store_options so = {0};
	struct outbox_options oo = {0};
	struct store_outbox_new m = {"reply-1",           "fake", "default", "peer-1",
	                             "{\"text\":\"hi\"}", 0,      0,         0};

	assert_non_null(f);
	g_fx = f;
	snprintf(f->dir, sizeof f->dir, "%s/sb-outbox-XXXXXX",
	         getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof f->path, "%s/state.db", f->dir);
	assert_int_equal(uv_loop_init(&f->loop), 0);
	so.path = f->path;
	assert_int_equal(store_open(&f->st, &f->loop, &so), SB_OK);
	f->ch.ops = &fake_ops;
	oo.loop = &f->loop;
	oo.store = f->st;
	oo.ud = f;
	oo.channel = fx_channel;
	oo.backoff_base_ms = 1000;
	oo.poll_ms = 50;
	assert_int_equal(outbox_new(&f->ob, &oo), SB_OK);
	assert_int_equal(store_outbox_put(f->st, &m, put_cb, f), SB_OK);
	run_until(f, &f->puts, 1);
	outbox_start(f->ob);
	run_until(f, &f->n_held, 1);
	assert_string_equal(f->held[0].key, "reply-1");
	assert_int_equal(f->held[0].attempt, 1);
	/* Counted while out (a poll's empty claim may add one briefly). */
	for (int i = 0; i < 2000 && outbox_in_flight(f->ob) != 1; i++)
		uv_run(&f->loop, UV_RUN_NOWAIT), usleep(1000);
	assert_int_equal(outbox_in_flight(f->ob), 1);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	char p[400];

	outbox_free(f->ob);
	store_close(f->st);
	uv_run(&f->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&f->loop), 0);
	for (int i = 0; i < 4; i++) {
		static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};

		snprintf(p, sizeof p, "%s%s", f->path, sfx[i]);
		unlink(p);
	}
	rmdir(f->dir);
	free(f);
	return 0;
}

static void answer(struct fx *f, int i, const struct channel_send_result *res)
{
	f->held[i].cb(f->held[i].ud, res);
}

static void test_confirmed_is_recorded(void **state)
{
	struct fx *f = *state;
	struct channel_send_result ok = {
	    .rc = SB_OK, .retry_after_ms = -1, .channel_msg_id = "m-42"};
	char text[128];

	answer(f, 0, &ok);
	for (int i = 0; i < 2000 && outbox_in_flight(f->ob); i++)
		uv_run(&f->loop, UV_RUN_NOWAIT), usleep(1000);
	assert_int_equal(outbox_in_flight(f->ob), 0);
	q_text(f->path, "SELECT state || ':' || channel_msg_id FROM outbox", text, sizeof text);
	assert_string_equal(text, "sent:m-42");
	/* Confirmed once: never offered to the channel again. */
	run_a_while(f, 200);
	assert_int_equal(f->n_held, 1);
}

static void test_retry_honours_hint(void **state)
{
	struct fx *f = *state;
	struct channel_send_result busy = {
	    .rc = SB_ERR_HTTP, .retryable = true, .retry_after_ms = 60000, .error = "429"};
	char text[128];
	int64_t now = (int64_t)time(NULL) * 1000;

	answer(f, 0, &busy);
	for (int i = 0; i < 2000 && outbox_in_flight(f->ob); i++)
		uv_run(&f->loop, UV_RUN_NOWAIT), usleep(1000);
	q_text(f->path, "SELECT state || ':' || attempts || ':' || last_error FROM outbox", text,
	       sizeof text);
	assert_string_equal(text, "pending:1:429");
	q_text(f->path, "SELECT due_at FROM outbox", text, sizeof text);
	assert_true(strtoll(text, NULL, 10) >= now + 59000);
	/* Not due yet: the poll does not offer it again. */
	run_a_while(f, 200);
	assert_int_equal(f->n_held, 1);
}

/* A forced stop frees the outbox while a send is out; the channel's late
 * answer must be dropped (not touch freed memory) and the entry stay
 * unconfirmed, so the next start sends it again with the same key. */
static void test_outcome_after_free(void **state)
{
	struct fx *f = *state;
	struct channel_send_result ok = {
	    .rc = SB_OK, .retry_after_ms = -1, .channel_msg_id = "late"};
	char text[128];

	outbox_free(f->ob);
	f->ob = NULL;
	run_a_while(f, 20);
	answer(f, 0, &ok);
	run_a_while(f, 50);
	q_text(f->path, "SELECT state || ':' || idempotency_key FROM outbox", text, sizeof text);
	assert_string_equal(text, "claimed:reply-1");
}

struct taken {
	struct fx *f;
	size_t leased;
	int calls;
	int rc;
	int held_after; /* sends the channel had when the commit's callback ended */
};

static void taken_cb(void *ud, int rc, const struct store_outbox_item *items, size_t n)
{
	struct taken *t = ud;

	t->calls++;
	t->rc = rc;
	outbox_put_done(t->f->ob, t->leased, rc, items, n);
	t->held_after = t->f->n_held;
}

static void inbox_put_cb(void *ud, int rc, int64_t id, bool dup)
{
	int64_t *out = ud;

	(void)dup;
	assert_int_equal(rc, SB_OK);
	*out = id;
}

/* Commits a reply to a new inbox entry with the given lease. */
static void commit_reply(struct fx *f, const char *key, int64_t lease, struct taken *t)
{
	struct store_inbox_new in = {"fake", "default", key, "{}", 0};
	struct store_outbox_new m = {key, "fake", "default", "peer-1", "{\"text\":\"hi\"}",
	                             0,   0,      lease};
	int64_t id = 0;
	int calls = t->calls;

	assert_int_equal(store_inbox_put(f->st, &in, inbox_put_cb, &id), SB_OK);
	for (int i = 0; i < 2000 && !id; i++)
		uv_run(&f->loop, UV_RUN_NOWAIT), usleep(1000);
	assert_true(id > 0);
	t->f = f;
	t->leased = lease > 0;
	assert_int_equal(store_inbox_done_claimed(f->st, id, &m, 1, taken_cb, t), SB_OK);
	run_until(f, &t->calls, calls + 1);
	assert_int_equal(t->rc, SB_OK);
}

/* Once a claim has come back short, a reply is inserted claimed and goes to
 * the channel from the commit's callback, with no claim of its own; a kick
 * (an entry put pending) stops that until a claim has found the rest. */
static void test_reply_sent_from_its_commit(void **state)
{
	struct fx *f = *state;
	struct channel_send_result ok = {.rc = SB_OK, .retry_after_ms = -1, .channel_msg_id = "m"};
	struct taken t = {0};
	int64_t lease;
	char text[128];

	answer(f, 0, &ok);
	for (int i = 0; i < 2000 && outbox_in_flight(f->ob); i++)
		uv_run(&f->loop, UV_RUN_NOWAIT), usleep(1000);
	lease = outbox_put_lease(f->ob);
	assert_true(lease > 0);
	commit_reply(f, "reply-2", lease, &t);
	/* sent from the callback itself */
	assert_int_equal(t.held_after, 2);
	assert_string_equal(f->held[1].key, "reply-2");
	assert_int_equal(f->held[1].attempt, 1);
	q_text(f->path,
	       "SELECT state || ':' || attempts FROM outbox WHERE idempotency_key = 'reply-2'",
	       text, sizeof text);
	assert_string_equal(text, "claimed:1");
	answer(f, 1, &ok);
	for (int i = 0; i < 2000 && outbox_in_flight(f->ob); i++)
		uv_run(&f->loop, UV_RUN_NOWAIT), usleep(1000);
	run_a_while(f, 20); /* the lazy "sent" mark */
	q_text(f->path, "SELECT state FROM outbox WHERE idempotency_key = 'reply-2'", text,
	       sizeof text);
	assert_string_equal(text, "sent");
	/* an entry put pending: claims take over until one comes back short */
	outbox_kick(f->ob);
	assert_int_equal(outbox_put_lease(f->ob), 0);
	run_a_while(f, 100);
	assert_true(outbox_put_lease(f->ob) > 0);
	outbox_put_done(f->ob, 1, SB_ERR_STORE, NULL, 0); /* give the reservation back */
}

/* Leases are counted against max_in_flight with the sends out. */
static void test_lease_bounded_by_in_flight(void **state)
{
	struct fx *f = *state;
	struct channel_send_result ok = {.rc = SB_OK, .retry_after_ms = -1, .channel_msg_id = "m"};
	struct taken t = {0};
	int64_t lease;

	answer(f, 0, &ok);
	for (int i = 0; i < 2000 && outbox_in_flight(f->ob); i++)
		uv_run(&f->loop, UV_RUN_NOWAIT), usleep(1000);
	/* 32 in flight by default: 32 leases, then none */
	for (int i = 0; i < 32; i++)
		assert_true(outbox_put_lease(f->ob) > 0);
	assert_int_equal(outbox_put_lease(f->ob), 0);
	outbox_put_done(f->ob, 32, SB_ERR_STORE, NULL, 0);
	lease = outbox_put_lease(f->ob);
	assert_true(lease > 0);
	/* a reply put pending (lease 0) is claimed as before */
	outbox_put_done(f->ob, 1, SB_ERR_STORE, NULL, 0);
	commit_reply(f, "reply-3", 0, &t);
	outbox_kick(f->ob);
	run_until(f, &f->n_held, 2);
	assert_string_equal(f->held[1].key, "reply-3");
	answer(f, 1, &ok);
	for (int i = 0; i < 2000 && outbox_in_flight(f->ob); i++)
		uv_run(&f->loop, UV_RUN_NOWAIT), usleep(1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_confirmed_is_recorded, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_retry_honours_hint, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_outcome_after_free, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reply_sent_from_its_commit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lease_bounded_by_in_flight, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
