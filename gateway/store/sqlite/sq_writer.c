/*
 * sq_writer.c - the SQLite backend's writer thread: the queue the loop
 * thread fills, batches run in one transaction (a savepoint per operation
 * that makes more than one change),
 * group commit, the hand-back to the loop; open and close. See sq.h.
 */
#include <signal.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gateway/core/crash.h"
#include "gateway/core/err.h"
#include "gateway/core/invariant.h"
#include "gateway/core/log.h"
#include "gateway/store/sqlite/sq.h"

#define SQ_DEFAULT_BUSY_TIMEOUT_MS 5000
#define SQ_DEFAULT_BATCH_MAX 256

static const char SQ_BEGIN[] = "BEGIN IMMEDIATE";
static const char SQ_COMMIT[] = "COMMIT";
static const char SQ_ROLLBACK[] = "ROLLBACK";
static const char SQ_SAVEPOINT[] = "SAVEPOINT op";
static const char SQ_RELEASE[] = "RELEASE op";
static const char SQ_ROLLBACK_TO[] = "ROLLBACK TO op";

/* How this backend runs each kind (the other half of store_backend.h's
 * table). */
#define SQ_RUN_ROW_(K, n, f) [STORE_OP_##K] = sq_run_##n,
static int (*const sq_runs[STORE_OP__COUNT])(struct sq_store *,
                                             struct store_op *) = {STORE_OPS(SQ_RUN_ROW_)};
#undef SQ_RUN_ROW_

/* The kinds whose run makes at most one change, with its last statement:
 * SQLite undoes a statement that fails (its statement journal), so such an
 * operation needs no savepoint of its own to leave nothing when it fails,
 * nor does one that writes nothing (STORE_OP_READS). A savepoint and its
 * release cost two statements; a message's commits are mostly these. */
static const bool sq_one_change[STORE_OP__COUNT] = {
    [STORE_OP_INBOX_PUT] = true,   /* an insert; a duplicate only reads */
    [STORE_OP_OUTBOX_DONE] = true, /* one update by id */
    [STORE_OP_KV_PUT] = true,      /* one upsert or delete */
    [STORE_OP_SESSION_PUT] = true, /* one upsert */
    [STORE_OP_TRANSCRIPT_PUT] = true, [STORE_OP_TRANSCRIPT_TRIM] = true, /* one delete */
};

static bool sq_needs_savepoint(enum store_op_kind kind)
{
	return !sq_one_change[kind] && !store_op_reads_only(kind);
}

size_t sq_queued(struct sq_store *s)
{
	size_t n;

	pthread_mutex_lock(&s->mu);
	n = s->queued;
	pthread_mutex_unlock(&s->mu);
	return n;
}

/* ---- writer thread: batches ---- */

/* Runs one batch in one transaction and records the commit on its last op. */
static void sq_run_batch(struct sq_store *s, struct store_op *head, size_t n)
{
	double t0 = clock_mono_s();
	bool lost = false; /* the transaction is gone: nothing of it is stored */
	struct store_op *op, *last = NULL;
	int rc;

	if (s->test_delay_ms)
		usleep(s->test_delay_ms * 1000u);
	rc = sq_exec(s, SQ_BEGIN);

	if (rc != SB_OK) {
		lost = true;
		goto report;
	}
	for (op = head; op && !lost; op = op->next) {
		bool sp = sq_needs_savepoint(op->kind);

		if (sp && sq_exec(s, SQ_SAVEPOINT) != SB_OK) {
			lost = true;
			break;
		}
		op->rc = sq_runs[op->kind](s, op);
		/* Some errors (SQLITE_FULL, IOERR, ...) roll the whole
		 * transaction back on their own. */
		if (sqlite3_get_autocommit(s->db)) {
			lost = true;
			break;
		}
		if (!sp)
			continue;
		if (op->rc != SB_OK && sq_exec(s, SQ_ROLLBACK_TO) != SB_OK) {
			lost = true;
			break;
		}
		if (sq_exec(s, SQ_RELEASE) != SB_OK)
			lost = true;
	}
	if (!lost)
		SB_CRASH_POINT("store.commit.before");
	if (!lost && sq_exec(s, SQ_COMMIT) != SB_OK)
		lost = true;
	if (!lost)
		SB_CRASH_POINT("store.commit.after");
	if (lost && !sqlite3_get_autocommit(s->db))
		sq_exec(s, SQ_ROLLBACK);
report:
	if (lost)
		log_error("store", "commit failed; batch not stored", LOG_I("ops", n),
		          LOG_S("error", sqlite3_errmsg(s->db)));
	for (op = head; op; op = op->next) {
		if (lost)
			op->rc = SB_ERR_STORE;
		last = op;
	}
	if (last) {
		last->commit.end = true;
		last->commit.rc = lost ? SB_ERR_STORE : SB_OK;
		last->commit.ops = n;
		last->commit.seconds = clock_mono_s() - t0;
	}
}

/* Takes the next batch off the queue (mu held): up to batch_max
 * operations in order. Lazy ones come along only with an operation that
 * writes, once their time is up, or at close; otherwise they stay queued,
 * in order. NULL when nothing may run yet. */
static struct store_op *sq_take_batch(struct sq_store *s, struct store_op **tail_out, size_t *n_out)
{
	struct store_op *op, *head = NULL, *tail = NULL, *keep = NULL, *keep_tail = NULL;
	bool with_lazy = s->lazy_due || s->closing;
	size_t n = 0, seen = 0;

	for (op = s->queue_head; op && !with_lazy && seen < s->batch_max; op = op->next, seen++)
		if (!op->lazy_ms && !store_op_reads_only(op->kind))
			with_lazy = true;
	if (with_lazy)
		s->lazy_due = false;
	while ((op = s->queue_head) && n < s->batch_max) {
		s->queue_head = op->next;
		op->next = NULL;
		if (op->lazy_ms && !with_lazy) {
			if (keep_tail)
				keep_tail->next = op;
			else
				keep = op;
			keep_tail = op;
			continue;
		}
		if (tail)
			tail->next = op;
		else
			head = op;
		tail = op;
		n++;
	}
	/* What stays: the lazy ones set aside, then the rest, in order. */
	if (keep) {
		keep_tail->next = s->queue_head;
		if (!s->queue_head)
			s->queue_tail = keep_tail;
		s->queue_head = keep;
	} else if (!s->queue_head) {
		s->queue_tail = NULL;
	}
	SB_ASSERT(s->queued >= n, LOG_I("queued", s->queued), LOG_I("batch", n));
	s->queued -= n;
	*tail_out = tail;
	*n_out = n;
	return head;
}

static void *sq_writer_main(void *arg)
{
	struct sq_store *s = arg;

	for (;;) {
		struct store_op *head = NULL, *tail = NULL;
		size_t n = 0;

		pthread_mutex_lock(&s->mu);
		for (;;) {
			while (!s->queue_head && !s->closing)
				pthread_cond_wait(&s->cv, &s->mu);
			if (!s->queue_head)
				break;
			if ((head = sq_take_batch(s, &tail, &n)))
				break;
			/* only lazy operations, not due yet */
			pthread_cond_wait(&s->cv, &s->mu);
		}
		pthread_mutex_unlock(&s->mu);
		if (!head)
			break;

		sq_run_batch(s, head, n);

		pthread_mutex_lock(&s->mu);
		if (s->done_tail)
			s->done_tail->next = head;
		else
			s->done_head = head;
		s->done_tail = tail;
		pthread_mutex_unlock(&s->mu);
		uv_async_send(&s->async->handle);
	}
	sq_db_close(s);
	return NULL;
}

/* ---- loop thread: delivery ---- */

/* Hands every finished operation back, in order. */
static void sq_deliver(struct sq_store *s)
{
	struct store_op *op;

	pthread_mutex_lock(&s->mu);
	op = s->done_head;
	s->done_head = s->done_tail = NULL;
	pthread_mutex_unlock(&s->mu);

	while (op) {
		struct store_op *next = op->next;

		store_op_finish(&s->base, op);
		op = next;
	}
}

static void sq_async_cb(uv_async_t *h)
{
	struct sq_store *s = h->data;

	if (s)
		sq_deliver(s);
}

static void sq_async_closed(uv_handle_t *h)
{
	struct sq_async *a = h->data;

	if (--a->open_handles == 0)
		free(a);
}

/* Closes the handles that were started; the struct goes with the last. */
static void sq_async_close(struct sq_async *a)
{
	uv_handle_t *hs[] = {(uv_handle_t *)&a->handle, (uv_handle_t *)&a->check,
	                     (uv_handle_t *)&a->idle, (uv_handle_t *)&a->lazy};
	int n = a->open_handles;

	if (n == 0) {
		free(a);
		return;
	}
	for (int i = 0; i < n; i++) {
		hs[i]->data = a;
		uv_close(hs[i], sq_async_closed);
	}
}

/* Once per loop iteration: the writer learns of everything submitted. */
static void sq_wake_writer(struct sq_store *s)
{
	if (!s->wake_owed)
		return;
	s->wake_owed = false;
	uv_idle_stop(&s->async->idle);
	pthread_mutex_lock(&s->mu);
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static void sq_check_cb(uv_check_t *h)
{
	struct sq_store *s = h->data;

	if (s)
		sq_wake_writer(s);
}

static void sq_idle_cb(uv_idle_t *h)
{
	(void)h; /* its being active is what counts: poll does not block */
}

/* The timer of the earliest queued lazy operation fired: when one has
 * waited its time they all commit, alone if need be. Otherwise the one the
 * timer was armed for left with a commit that wrote, and the timer is
 * armed again for the earliest left: a kv_put_lazy (a second) must not
 * commit alone at the bound of an outbox_done (10 ms) that already went,
 * which cost a commit and an fdatasync for every other message at one
 * sender. */
static void sq_lazy_cb(uv_timer_t *h)
{
	struct sq_store *s = h->data;
	uint64_t now, first = UINT64_MAX;

	if (!s)
		return;
	now = uv_now(s->loop);
	pthread_mutex_lock(&s->mu);
	for (const struct store_op *op = s->queue_head; op; op = op->next)
		if (op->lazy_ms && op->lazy_due_at < first)
			first = op->lazy_due_at;
	if (first <= now) {
		s->lazy_due = true;
		pthread_cond_signal(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	if (first > now && first != UINT64_MAX)
		uv_timer_start(h, sq_lazy_cb, first - now, 0);
}

/* ---- loop thread: submission ---- */

static int sq_submit(struct store *base, struct store_op *op)
{
	struct sq_store *s = (struct sq_store *)base;

	op->next = NULL;
	if (op->lazy_ms)
		op->lazy_due_at = uv_now(s->loop) + op->lazy_ms;
	pthread_mutex_lock(&s->mu);
	if (s->queue_tail)
		s->queue_tail->next = op;
	else
		s->queue_head = op;
	s->queue_tail = op;
	s->queued++;
	pthread_mutex_unlock(&s->mu);
	if (op->lazy_ms) {
		/* It rides with the next commit that writes; the timer
		 * bounds how long that may take. */
		uv_timer_t *t = &s->async->lazy;

		if (!uv_is_active((uv_handle_t *)t) || uv_timer_get_due_in(t) > op->lazy_ms)
			uv_timer_start(t, sq_lazy_cb, op->lazy_ms, 0);
		return SB_OK;
	}
	if (s->wake_owed)
		return SB_OK;
	s->wake_owed = true;
	uv_idle_start(&s->async->idle, sq_idle_cb);
	return SB_OK;
}

/* ---- open and close ---- */

static void sq_store_free(struct sq_store *s)
{
	if (!s)
		return;
	sq_db_close(s);
	free(s->path);
	free(s);
}

static int sq_open(struct store **out, uv_loop_t *loop, const struct store_options *opt)
{
	struct sq_store *s = NULL;
	bool sync_init = false;
	sigset_t all, old;
	int rc = SB_ERR_INVAL;

	if (out)
		*out = NULL;
	if (!out || !loop || !opt || !opt->path || !*opt->path)
		goto out;
	rc = SB_ERR_NOMEM;
	if (sodium_init() < 0) /* pairing codes come from randombytes_uniform */
		goto out;
	s = calloc(1, sizeof *s);
	if (!s)
		goto out;
	store_base_init(&s->base, &store_sqlite_backend, opt);
	s->loop = loop;
	s->batch_max = opt->batch_max ? opt->batch_max : SQ_DEFAULT_BATCH_MAX;
	{
		const char *delay = getenv("SWITCHBOARD_TEST_STORE_DELAY_MS");

		if (delay && *delay) {
			s->test_delay_ms = (unsigned)strtoul(delay, NULL, 10) % 10000u;
			log_warn("store", "test delay in use (SWITCHBOARD_TEST_STORE_DELAY_MS)",
			         LOG_I("delay_ms", s->test_delay_ms));
		}
	}
	s->path = strdup(opt->path);
	if (!s->path)
		goto out;
	rc = sq_schema_open(s, opt->busy_timeout_ms > 0 ? opt->busy_timeout_ms
	                                                : SQ_DEFAULT_BUSY_TIMEOUT_MS);
	if (rc != SB_OK)
		goto out;

	rc = SB_ERR_NOMEM;
	s->async = calloc(1, sizeof *s->async);
	if (!s->async)
		goto out;
	if (pthread_mutex_init(&s->mu, NULL) != 0)
		goto out;
	if (pthread_cond_init(&s->cv, NULL) != 0) {
		pthread_mutex_destroy(&s->mu);
		goto out;
	}
	sync_init = true;
	if (uv_async_init(loop, &s->async->handle, sq_async_cb) != 0) {
		log_error("store", "uv_async_init failed", LOG_S("path", s->path));
		rc = SB_ERR_IO;
		goto out;
	}
	s->async->open_handles = 1;
	s->async->handle.data = s;
	if (uv_check_init(loop, &s->async->check) == 0)
		s->async->open_handles = 2;
	if (s->async->open_handles == 2 && uv_idle_init(loop, &s->async->idle) == 0)
		s->async->open_handles = 3;
	if (s->async->open_handles == 3 && uv_timer_init(loop, &s->async->lazy) == 0)
		s->async->open_handles = 4;
	if (s->async->open_handles < 4 || uv_check_start(&s->async->check, sq_check_cb) != 0) {
		log_error("store", "cannot set up the loop's handles", LOG_S("path", s->path));
		s->async->handle.data = NULL;
		sq_async_close(s->async);
		s->async = NULL;
		rc = SB_ERR_IO;
		goto out;
	}
	s->async->check.data = s;
	s->async->idle.data = s;
	s->async->lazy.data = s;
	uv_unref((uv_handle_t *)&s->async->check);
	/* The writer takes no signals: they belong to the loop thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	s->writer_started = pthread_create(&s->writer, NULL, sq_writer_main, s) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!s->writer_started) {
		log_error("store", "cannot start the writer thread", LOG_S("path", s->path));
		s->async->handle.data = NULL;
		s->async->check.data = NULL;
		sq_async_close(s->async);
		s->async = NULL; /* freed by the loop */
		goto out;
	}
	log_info("store", "opened", LOG_S("path", s->path),
	         LOG_I("schema", STORE_SQLITE_SCHEMA_VERSION), LOG_I("batch_max", s->batch_max),
	         LOG_I("queue_max", s->base.queue_max));
	*out = &s->base;
	s = NULL;
	rc = SB_OK;
out:
	if (s) {
		free(s->async);
		if (sync_init) {
			pthread_cond_destroy(&s->cv);
			pthread_mutex_destroy(&s->mu);
		}
	}
	sq_store_free(s);
	return rc;
}

static void sq_close(struct store *base)
{
	struct sq_store *s = (struct sq_store *)base;

	pthread_mutex_lock(&s->mu);
	s->closing = true;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	/* The writer runs what is queued, closes the database and exits. */
	pthread_join(s->writer, NULL);
	sq_deliver(s);

	s->async->handle.data = NULL;
	s->async->check.data = NULL;
	s->async->lazy.data = NULL;
	sq_async_close(s->async);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	log_info("store", "closed", LOG_S("path", s->path));
	sq_store_free(s);
}

const struct store_backend store_sqlite_backend = {
    .name = "sqlite",
    .open = sq_open,
    .submit = sq_submit,
    .close = sq_close,
};
