/*
 * xsync.c - transcripts off the fsync path. See xsync.h.
 *
 * The order that makes a trim safe: a row is put after its bytes were
 * written to the file (the runner flushes first), and registered here when
 * its put has committed. A sync job takes the highest id registered so far
 * and the directories of the files; a row with a smaller id committed in
 * the same or an earlier commit, whose callbacks all ran in one loop pass
 * before this one, so its bytes were written too. After syncfs every row up
 * to that id is on disk in its file, and only then is the trim queued.
 */
#include "gateway/pipeline/xsync.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agents/transcript.h"
#include "gateway/core/crash.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"

/* Distinct directories one sync remembers (one sessions directory per
 * agent); with more, that sync is sync(2), every file system. */
#define XSYNC_DIRS_MAX 64

struct xsync_dirs {
	char *v[XSYNC_DIRS_MAX];
	size_t n;
	bool overflow; /* a directory did not fit */
};

struct xsync_job {
	uv_work_t work;
	struct xsync *x;
	/* A sync runs on a thread of its own (syncfs waits for every dirty
	 * page of the file system, other programs' too, which can take
	 * seconds): it never holds a pool thread, and a stop does not wait
	 * for it. mu guards finished and abandoned. */
	pthread_t thread;
	pthread_mutex_t mu;
	bool finished;  /* the thread is done and has woken the loop */
	bool abandoned; /* closed while it ran: the thread frees the job */
	struct xsync_dirs dirs;
	int64_t upto;
	int rc;
	/* repair */
	struct store_transcript_lines *rows;
	size_t n_rows;
	size_t restored_files;
	size_t restored_bytes;
	size_t failed;
	void (*cb)(void *ud, int rc);
	void *ud;
};

struct xsync {
	uv_loop_t *loop;
	struct store *store;
	uv_timer_t timer;
	uv_async_t done;           /* a sync thread finished */
	struct xsync_job *syncing; /* the sync thread's job, or NULL */
	bool timer_open;
	bool closing;
	size_t refs;    /* the two handles, store callbacks and a repair in flight */
	int64_t max_id; /* highest committed row not yet given to a job */
	/* The highest row the start-up repair saw: only a repair trims rows
	 * up to it, so that one it could not restore stays for the next. */
	int64_t floor;
	struct xsync_dirs waiting;
};

static void xsync_dirs_free(struct xsync_dirs *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->v[i]);
	d->n = 0;
	d->overflow = false;
}

/* Adds the directory dir[0, len) to d (once). SB_OK, SB_ERR_NOMEM. */
static int xsync_dirs_put(struct xsync_dirs *d, const char *dir, size_t len)
{
	for (size_t i = 0; i < d->n; i++)
		if (strlen(d->v[i]) == len && memcmp(d->v[i], dir, len) == 0)
			return SB_OK;
	if (d->n == XSYNC_DIRS_MAX) {
		d->overflow = true;
		return SB_OK;
	}
	d->v[d->n] = strndup(dir, len);
	if (!d->v[d->n])
		return SB_ERR_NOMEM;
	d->n++;
	return SB_OK;
}

/* Adds the directory that holds the file at path. */
static int xsync_dirs_add(struct xsync_dirs *d, const char *path)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		return xsync_dirs_put(d, ".", 1);
	return xsync_dirs_put(d, path, slash == path ? 1 : (size_t)(slash - path));
}

static void xsync_unref(struct xsync *x)
{
	if (--x->refs)
		return;
	xsync_dirs_free(&x->waiting);
	free(x);
}

/* Thread pool: one syncfs per file system among the directories. */
static int xsync_sync_dirs(const struct xsync_dirs *d)
{
	dev_t devs[XSYNC_DIRS_MAX];
	size_t n_devs = 0;
	int rc = SB_OK;

	if (d->overflow) {
		sync();
		return SB_OK;
	}
	for (size_t i = 0; i < d->n; i++) {
		struct stat st;
		bool done = false, known;
		int fd = open(d->v[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (fd < 0) {
			/* Removed since (by the operator): nothing of it to sync. */
			if (errno != ENOENT)
				rc = SB_ERR_IO;
			continue;
		}
		known = fstat(fd, &st) == 0;
		for (size_t k = 0; known && k < n_devs; k++)
			done = done || devs[k] == st.st_dev;
		if (!done) {
			if (syncfs(fd) != 0)
				rc = SB_ERR_IO;
			else if (known && n_devs < XSYNC_DIRS_MAX)
				devs[n_devs++] = st.st_dev;
		}
		close(fd);
	}
	return rc;
}

static void xsync_job_free(struct xsync_job *j)
{
	xsync_dirs_free(&j->dirs);
	for (size_t i = 0; i < j->n_rows; i++) {
		free((char *)j->rows[i].path);
		free((char *)j->rows[i].bytes);
	}
	free(j->rows);
	free(j);
}

static void xsync_trimmed(void *ud, int rc)
{
	(void)ud;
	if (rc)
		log_warn("transcript", "cannot forget the synced transcript lines; they are kept",
		         LOG_S("error", sb_strerror(rc)));
}

/* ---- the batched sync ---- */

/* Tests: a sync thread waits here while held (a file system that takes
 * its time); held counts the threads waiting or not yet returned. */
static atomic_bool xsync_hold;
static atomic_int xsync_held;

void xsync_test_hold(bool on)
{
	atomic_store(&xsync_hold, on);
}

int xsync_test_held(void)
{
	return atomic_load(&xsync_held);
}

static void *xsync_sync_thread(void *arg)
{
	struct xsync_job *j = arg;
	bool abandoned;

	if (atomic_load(&xsync_hold)) {
		atomic_fetch_add(&xsync_held, 1);
		while (atomic_load(&xsync_hold))
			usleep(1000);
	} else {
		atomic_fetch_add(&xsync_held, 1);
	}

	/* Written, not yet on disk: a crash of the machine here loses them
	 * from the files, and the store's rows bring them back. */
	SB_CRASH_POINT("transcript.sync.before");
	j->rc = xsync_sync_dirs(&j->dirs);
	if (j->rc == SB_OK)
		SB_CRASH_POINT("transcript.sync.after");
	pthread_mutex_lock(&j->mu);
	abandoned = j->abandoned;
	if (!abandoned) {
		j->finished = true;
		uv_async_send(&j->x->done); /* x lives: its close takes mu first */
	}
	pthread_mutex_unlock(&j->mu);
	if (abandoned) {
		/* The gateway stopped while this ran: the rows stay in the
		 * store, and the next start checks them against the files. */
		pthread_mutex_destroy(&j->mu);
		xsync_job_free(j);
	}
	atomic_fetch_sub(&xsync_held, 1);
	return NULL;
}

static void xsync_timer_cb(uv_timer_t *t);

static void xsync_sync_done(uv_async_t *a)
{
	struct xsync *x = a->data;
	struct xsync_job *j = x->syncing;
	bool finished;

	if (!j)
		return;
	pthread_mutex_lock(&j->mu);
	finished = j->finished;
	pthread_mutex_unlock(&j->mu);
	if (!finished)
		return; /* a wake-up left over from an earlier job */
	pthread_join(j->thread, NULL);
	pthread_mutex_destroy(&j->mu);
	x->syncing = NULL;
	if (j->rc == SB_OK) {
		if (!x->closing && j->upto > x->floor &&
		    store_transcript_trim(x->store, x->floor, j->upto, xsync_trimmed, NULL) !=
		        SB_OK)
			log_warn("transcript", "cannot queue the trim of synced transcript lines");
	} else {
		/* Kept, and tried again with the next sync. */
		log_error("transcript",
		          "cannot sync the transcripts; their lines stay in the store",
		          LOG_S("error", sb_strerror(j->rc)));
		if (j->upto > x->max_id)
			x->max_id = j->upto;
		for (size_t i = 0; i < j->dirs.n; i++)
			if (xsync_dirs_put(&x->waiting, j->dirs.v[i], strlen(j->dirs.v[i])) !=
			    SB_OK)
				x->waiting.overflow = true;
		if (j->dirs.overflow)
			x->waiting.overflow = true;
	}
	xsync_job_free(j);
	if (!x->closing && x->max_id && !uv_is_active((uv_handle_t *)&x->timer))
		uv_timer_start(&x->timer, xsync_timer_cb, XSYNC_INTERVAL_MS, 0);
}

static void xsync_timer_cb(uv_timer_t *t)
{
	struct xsync *x = t->data;
	struct xsync_job *j;

	if (x->syncing || x->closing || !x->max_id)
		return;
	j = calloc(1, sizeof *j);
	if (!j)
		goto again;
	j->x = x;
	j->upto = x->max_id;
	/* The job owns the directories from now on. */
	j->dirs = x->waiting;
	memset(&x->waiting, 0, sizeof x->waiting);
	if (pthread_mutex_init(&j->mu, NULL) != 0) {
		x->waiting = j->dirs;
		memset(&j->dirs, 0, sizeof j->dirs);
		xsync_job_free(j);
		goto again;
	}
	if (pthread_create(&j->thread, NULL, xsync_sync_thread, j) != 0) {
		pthread_mutex_destroy(&j->mu);
		x->waiting = j->dirs;
		memset(&j->dirs, 0, sizeof j->dirs);
		xsync_job_free(j);
		goto again;
	}
	x->syncing = j;
	x->max_id = 0;
	return;
again:
	uv_timer_start(&x->timer, xsync_timer_cb, XSYNC_INTERVAL_MS, 0);
}

struct xsync_put {
	struct xsync *x;
	char path[];
};

static void xsync_put_cb(void *ud, int rc, int64_t id, bool duplicate)
{
	struct xsync_put *p = ud;
	struct xsync *x = p->x;

	(void)duplicate;
	if (rc == SB_OK && !x->closing) {
		if (xsync_dirs_add(&x->waiting, p->path) != SB_OK)
			x->waiting.overflow = true;
		if (id > x->max_id)
			x->max_id = id;
		if (!x->syncing && !uv_is_active((uv_handle_t *)&x->timer))
			uv_timer_start(&x->timer, xsync_timer_cb, XSYNC_INTERVAL_MS, 0);
	} else if (rc != SB_OK) {
		log_error("transcript", "cannot keep the transcript lines in the store",
		          LOG_S("path", p->path), LOG_S("error", sb_strerror(rc)));
	}
	free(p);
	xsync_unref(x);
}

int xsync_record(struct xsync *x, const char *path, int64_t offset, const char *bytes, size_t len)
{
	struct store_transcript_lines l = {
	    .path = path, .offset = offset, .bytes = bytes, .len = len};
	struct xsync_put *p;
	size_t plen;
	int rc;

	if (!x || !path || x->closing)
		return SB_ERR_INVAL;
	plen = strlen(path);
	p = malloc(sizeof *p + plen + 1);
	if (!p)
		return SB_ERR_NOMEM;
	p->x = x;
	memcpy(p->path, path, plen + 1);
	rc = store_transcript_put(x->store, &l, xsync_put_cb, p);
	if (rc != SB_OK) {
		free(p);
		return rc;
	}
	x->refs++;
	return SB_OK;
}

/* ---- start-up repair ---- */

static void xsync_repair_work(uv_work_t *w)
{
	struct xsync_job *j = w->data;
	const char *last = NULL;

	for (size_t i = 0; i < j->n_rows; i++) {
		const struct store_transcript_lines *r = &j->rows[i];
		size_t restored = 0;
		int rc = transcript_restore(r->path, r->offset, r->bytes, r->len, &restored);

		if (rc != SB_OK) {
			j->failed++;
			continue;
		}
		if (restored) {
			j->restored_bytes += restored;
			if (!last || strcmp(last, r->path) != 0)
				j->restored_files++;
			last = r->path;
		}
		if (xsync_dirs_add(&j->dirs, r->path) != SB_OK)
			j->failed++;
	}
	if (j->restored_bytes)
		SB_CRASH_POINT("transcript.restore.written");
	j->rc = xsync_sync_dirs(&j->dirs);
}

static void xsync_repair_done(uv_work_t *w, int status)
{
	struct xsync_job *j = w->data;
	struct xsync *x = j->x;
	int rc = SB_OK;

	if (x->closing) {
		/* Stopped while it ran: the store may be gone, and nobody waits. */
		xsync_job_free(j);
		xsync_unref(x);
		return;
	}
	if (status != 0 || j->rc != SB_OK || j->failed) {
		/* The rows stay: the next start tries again. */
		log_error("transcript",
		          "cannot restore every transcript from the store; its lines "
		          "are kept for the next start",
		          LOG_I("failed", (int64_t)j->failed));
	} else {
		if (j->restored_bytes)
			log_warn("transcript",
			         "restored transcript lines a crash had lost from their "
			         "files",
			         LOG_I("files", (int64_t)j->restored_files),
			         LOG_I("bytes", (int64_t)j->restored_bytes));
		if (store_transcript_trim(x->store, 0, j->upto, xsync_trimmed, NULL) != SB_OK)
			log_warn("transcript",
			         "cannot queue the trim of restored transcript lines");
	}
	if (j->cb)
		j->cb(j->ud, rc);
	xsync_job_free(j);
	xsync_unref(x);
}

static void xsync_listed(void *ud, int rc, const struct store_transcript_lines *v, size_t n)
{
	struct xsync_job *j = ud;
	struct xsync *x = j->x;

	if (rc != SB_OK || !n || x->closing) {
		if (j->cb && !x->closing)
			j->cb(j->ud, rc);
		xsync_job_free(j);
		xsync_unref(x);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (v[i].id > x->floor)
			x->floor = v[i].id;
	j->rows = calloc(n, sizeof *j->rows);
	if (!j->rows)
		goto nomem;
	for (size_t i = 0; i < n; i++) {
		struct store_transcript_lines *r = &j->rows[j->n_rows];

		r->id = v[i].id;
		r->offset = v[i].offset;
		r->len = v[i].len;
		r->path = strdup(v[i].path);
		r->bytes = malloc(v[i].len ? v[i].len : 1);
		if (!r->path || !r->bytes) {
			free((char *)r->path);
			free((char *)r->bytes);
			goto nomem;
		}
		memcpy((char *)r->bytes, v[i].bytes, v[i].len);
		j->n_rows++;
		if (r->id > j->upto)
			j->upto = r->id;
	}
	j->work.data = j;
	if (uv_queue_work(x->loop, &j->work, xsync_repair_work, xsync_repair_done) == 0)
		return;
nomem:
	if (j->cb && !x->closing)
		j->cb(j->ud, SB_ERR_NOMEM);
	xsync_job_free(j);
	xsync_unref(x);
}

int xsync_repair(struct xsync *x, void (*cb)(void *ud, int rc), void *ud)
{
	struct xsync_job *j;
	int rc;

	if (!x || x->closing)
		return SB_ERR_INVAL;
	j = calloc(1, sizeof *j);
	if (!j)
		return SB_ERR_NOMEM;
	j->x = x;
	j->cb = cb;
	j->ud = ud;
	rc = store_transcript_list(x->store, xsync_listed, j);
	if (rc != SB_OK) {
		free(j);
		return rc;
	}
	x->refs++;
	return SB_OK;
}

/* ---- life ---- */

static void xsync_handle_closed(uv_handle_t *h)
{
	xsync_unref(h->data);
}

int xsync_new(struct xsync **out, uv_loop_t *loop, struct store *store)
{
	struct xsync *x;

	*out = NULL;
	if (!loop || !store)
		return SB_ERR_INVAL;
	x = calloc(1, sizeof *x);
	if (!x)
		return SB_ERR_NOMEM;
	x->loop = loop;
	x->store = store;
	if (uv_timer_init(loop, &x->timer) != 0) {
		free(x);
		return SB_ERR_NOMEM;
	}
	x->timer.data = x;
	x->timer_open = true;
	if (uv_async_init(loop, &x->done, xsync_sync_done) != 0) {
		/* freed once the loop has closed the timer */
		x->refs = 1;
		x->closing = true;
		uv_close((uv_handle_t *)&x->timer, xsync_handle_closed);
		return SB_ERR_NOMEM;
	}
	x->done.data = x;
	x->refs = 2; /* the two handles' */
	*out = x;
	return SB_OK;
}

void xsync_close(struct xsync *x)
{
	if (!x || x->closing)
		return;
	x->closing = true;
	uv_timer_stop(&x->timer);
	uv_close((uv_handle_t *)&x->timer, xsync_handle_closed);
	if (x->syncing) {
		struct xsync_job *j = x->syncing;
		bool finished;

		/* A stop does not wait for a sync: the thread finishes (or the
		 * process ends) on its own. */
		pthread_mutex_lock(&j->mu);
		finished = j->finished;
		if (!finished)
			j->abandoned = true;
		pthread_mutex_unlock(&j->mu);
		if (finished) {
			pthread_join(j->thread, NULL); /* it has only to return */
			pthread_mutex_destroy(&j->mu);
			xsync_job_free(j);
		} else {
			pthread_detach(j->thread);
		}
		x->syncing = NULL;
	}
	uv_close((uv_handle_t *)&x->done, xsync_handle_closed);
}
