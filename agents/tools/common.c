/*
 * common.c - what the built-in tools share (see common.h).
 */
#include "agents/tools/common.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/core/beneath.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/num.h"

#define TOOL_LINES_CHUNK 65536

/* ---- thread-pool jobs ----
 *
 * The pool is libuv's, shared with the transcripts, a run's preparation and
 * the configuration's reload. So that file tools cannot take all of it (a
 * search pinning every thread stalled every session's transcript), a loop's
 * tool jobs hold at most tool_job_pool_share() of its threads; the others
 * wait, in order, on the loop thread, for a running one to finish. A job
 * past its deadline is asked to stop (the flag its work polls) and given a
 * grace to hand back what it found; one that still runs is answered with an
 * error then and its late result dropped, its thread still counted until it
 * returns.
 *
 * The share belongs to a loop: the gates below are found by the loop's
 * address, under a lock because tests and the CLI may have several loops
 * (the daemon has one). Only the gate's loop thread touches its counts. */

#define TOOL_JOB_GRACE_MS 1000
#define TOOL_POOL_DEFAULT 4 /* libuv's default UV_THREADPOOL_SIZE */
#define TOOL_POOL_MAX 1024  /* libuv's own cap */

enum tool_job_state {
	TOOL_JOB_WAITING = 0, /* in the gate's queue */
	TOOL_JOB_QUEUED,      /* handed to the pool (holds a share) */
	TOOL_JOB_OVER,        /* out of the pool, or never in it */
};

struct tool_gate {
	uv_loop_t *loop;
	unsigned refs;    /* jobs that hold it */
	unsigned running; /* its jobs in the pool */
	unsigned share;
	struct tool_job *head, *tail; /* waiting */
	struct tool_gate *next;
};

struct tool_job {
	struct tool_run run; /* first: the executor holds &job->run */
	uv_work_t req;
	uv_timer_t timer; /* the deadline, then the grace; the error job's turn */
	struct tool_gate *gate;
	tool_job_fn fn;
	void *arg;
	void (*arg_free)(void *);
	tool_done_cb done;
	void *ud;
	struct tool_job_result res;
	atomic_bool stop;
	int64_t timeout_ms;
	enum tool_job_state state;
	bool finished;         /* done has run */
	bool past_deadline;    /* the grace is running */
	bool ending;           /* its timer is closing */
	struct tool_job *next; /* in the gate's queue */
};

static pthread_mutex_t tool_gates_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tool_gate *tool_gates;

unsigned tool_job_pool_share(void)
{
	const char *s = getenv("UV_THREADPOOL_SIZE");
	int64_t n = TOOL_POOL_DEFAULT;

	/* libuv reads the same variable once, at the pool's first use, and
	 * makes 0 one thread and caps it at TOOL_POOL_MAX. */
	if (s && num_parse_i64(s, 0, INT32_MAX, &n) != SB_OK)
		n = TOOL_POOL_DEFAULT;
	if (n > TOOL_POOL_MAX)
		n = TOOL_POOL_MAX;
	return n > 1 ? (unsigned)n - 1 : 1;
}

static struct tool_gate *tool_gate_get(uv_loop_t *loop)
{
	struct tool_gate *g;

	pthread_mutex_lock(&tool_gates_lock);
	for (g = tool_gates; g && g->loop != loop; g = g->next)
		;
	if (!g && (g = calloc(1, sizeof *g))) {
		g->loop = loop;
		g->share = tool_job_pool_share();
		g->next = tool_gates;
		tool_gates = g;
	}
	if (g)
		g->refs++;
	pthread_mutex_unlock(&tool_gates_lock);
	return g;
}

static void tool_gate_put(struct tool_gate *g)
{
	struct tool_gate **pp;

	pthread_mutex_lock(&tool_gates_lock);
	if (--g->refs == 0) {
		for (pp = &tool_gates; *pp != g; pp = &(*pp)->next)
			;
		*pp = g->next;
		free(g);
	}
	pthread_mutex_unlock(&tool_gates_lock);
}

static void tool_gate_unlink(struct tool_gate *g, struct tool_job *job)
{
	struct tool_job **pp, *prev = NULL;

	for (pp = &g->head; *pp && *pp != job; pp = &(*pp)->next)
		prev = *pp;
	if (!*pp)
		return;
	*pp = job->next;
	if (g->tail == job)
		g->tail = prev;
	job->next = NULL;
}

#ifdef SB_CRASH_POINTS
/* Polls left before tool_job_stopped answers true (0: off, 1: from now). */
static atomic_uint tool_job_test_polls;

void tool_job_test_stop_after(unsigned n)
{
	atomic_store(&tool_job_test_polls, n);
}

bool tool_job_test_stop_now(void)
{
	unsigned v = atomic_load(&tool_job_test_polls);

	while (v > 1 && !atomic_compare_exchange_weak(&tool_job_test_polls, &v, v - 1))
		;
	return v == 1;
}
#endif

bool tool_job_stopped_cb(void *ud)
{
	return tool_job_stopped(ud);
}

static void tool_job_work(uv_work_t *req)
{
	struct tool_job *job = req->data;

	if (!atomic_load(&job->stop))
		job->fn(job->arg, &job->res);
	else /* past its deadline before a pool thread took it */
		tool_result_errorf(&job->res, "timed out after %lld ms before it could start",
		                   (long long)job->timeout_ms);
}

static void tool_job_closed(uv_handle_t *h)
{
	struct tool_job *job = h->data;

	if (job->gate)
		tool_gate_put(job->gate);
	if (job->arg_free)
		job->arg_free(job->arg);
	free(job->res.content);
	free(job);
}

/* The job is out of the pool and answered (or never will be): free it
 * once its timer has closed. */
static void tool_job_end(struct tool_job *job)
{
	if (job->ending)
		return;
	job->ending = true;
	uv_close((uv_handle_t *)&job->timer, tool_job_closed);
}

/* done, once; content is handed over (freed when done already ran). */
static void tool_job_answer(struct tool_job *job, int rc, char *content, bool is_error)
{
	if (job->finished) {
		free(content);
		return;
	}
	job->finished = true;
	atomic_store(&job->stop, true);
	uv_timer_stop(&job->timer);
	job->done(job->ud, rc, content, is_error);
}

static char *tool_job_strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *tool_job_strf(const char *fmt, ...)
{
	struct buf b;
	va_list ap;

	buf_init(&b, 1024);
	va_start(ap, fmt);
	(void)buf_vprintf(&b, fmt, ap);
	va_end(ap);
	return buf_steal(&b);
}

static void tool_job_after(uv_work_t *req, int status);

/* Hands waiting jobs to the pool while the share allows. */
static void tool_gate_pump(struct tool_gate *g)
{
	struct tool_job *job;

	while (g->head && g->running < g->share) {
		job = g->head;
		tool_gate_unlink(g, job);
		if (uv_queue_work(g->loop, &job->req, tool_job_work, tool_job_after) != 0) {
			job->state = TOOL_JOB_OVER;
			tool_job_answer(job, SB_OK, strdup("the tool could not be started"), true);
			tool_job_end(job);
			continue;
		}
		job->state = TOOL_JOB_QUEUED;
		g->running++;
	}
}

static void tool_job_after(uv_work_t *req, int status)
{
	struct tool_job *job = req->data;
	struct tool_gate *g = job->gate; /* held until the job is freed */
	char *content = job->res.content;

	job->res.content = NULL;
	job->state = TOOL_JOB_OVER;
	g->running--;
	if (status == UV_ECANCELED)
		tool_job_answer(job, SB_ERR_ABORTED, content, true);
	else
		tool_job_answer(job, job->res.rc, content, job->res.is_error);
	tool_job_end(job);
	tool_gate_pump(g);
}

static void tool_job_timer(uv_timer_t *t)
{
	struct tool_job *job = t->data;

	if (!job->fn) { /* an error job's turn */
		tool_job_answer(job, job->res.rc, job->res.content, job->res.is_error);
		job->res.content = NULL;
		tool_job_end(job);
		return;
	}
	atomic_store(&job->stop, true);
	if (job->state == TOOL_JOB_WAITING) {
		tool_gate_unlink(job->gate, job);
		job->state = TOOL_JOB_OVER;
		tool_job_answer(
		    job, SB_OK,
		    tool_job_strf("timed out after %lld ms before it could start: other "
		                  "tool calls held every thread the tools may use",
		                  (long long)job->timeout_ms),
		    true);
		tool_job_end(job);
		return;
	}
	if (!job->past_deadline) {
		job->past_deadline = true;
		uv_timer_start(&job->timer, tool_job_timer, TOOL_JOB_GRACE_MS, 0);
		return;
	}
	/* It did not stop in the grace: answer now; tool_job_after drops
	 * what it hands back later. */
	tool_job_answer(job, SB_OK,
	                tool_job_strf("timed out after %lld ms: the tool did not stop at its time "
	                              "limit, and what it has done or still does is not reported",
	                              (long long)job->timeout_ms),
	                true);
}

static void tool_job_cancel(struct tool_run *run)
{
	struct tool_job *job = (struct tool_job *)run;

	if (job->finished)
		return;
	atomic_store(&job->stop, true);
	switch (job->state) {
	case TOOL_JOB_WAITING:
		tool_gate_unlink(job->gate, job);
		job->state = TOOL_JOB_OVER;
		tool_job_answer(job, SB_ERR_ABORTED, strdup("cancelled"), true);
		tool_job_end(job);
		break;
	case TOOL_JOB_QUEUED:
		/* A job no pool thread has picked up is dropped (tool_job_after
		 * then runs with UV_ECANCELED); a running one sees stop, ends
		 * soon, and its result is dropped. */
		uv_cancel((uv_req_t *)&job->req);
		tool_job_answer(job, SB_ERR_ABORTED, strdup("cancelled"), true);
		break;
	case TOOL_JOB_OVER: /* an error job before its turn */
		tool_job_answer(job, SB_ERR_ABORTED, strdup("cancelled"), true);
		tool_job_end(job);
		break;
	}
}

static struct tool_job *tool_job_new(uv_loop_t *loop)
{
	struct tool_job *job = calloc(1, sizeof *job);

	if (!job)
		return NULL;
	atomic_init(&job->stop, false);
	job->res.stop = &job->stop;
	job->run.cancel = tool_job_cancel;
	job->req.data = job;
	uv_timer_init(loop, &job->timer);
	job->timer.data = job;
	return job;
}

/* Frees a job that never started (done never runs). */
static void tool_job_drop(struct tool_job *job)
{
	job->finished = true;
	tool_job_end(job);
}

int tool_job_start(const struct tool_ctx *ctx, tool_job_fn fn, void *arg, void (*arg_free)(void *),
                   tool_done_cb done, void *ud, struct tool_run **run)
{
	struct tool_job *job = tool_job_new(ctx->loop);
	struct tool_gate *g;

	if (!job || !(job->gate = tool_gate_get(ctx->loop))) {
		if (job)
			tool_job_drop(job);
		if (arg_free)
			arg_free(arg);
		return SB_ERR_NOMEM;
	}
	g = job->gate;
	job->fn = fn;
	job->arg = arg;
	job->arg_free = arg_free;
	job->done = done;
	job->ud = ud;
	job->res.rc = SB_ERR_NOMEM;
	job->res.is_error = true;
	job->timeout_ms = ctx->timeout_ms > 0 ? ctx->timeout_ms : TOOL_JOB_TIMEOUT_DEFAULT;
	job->res.timeout_ms = job->timeout_ms;
	if (!g->head && g->running < g->share) {
		if (uv_queue_work(ctx->loop, &job->req, tool_job_work, tool_job_after) != 0) {
			tool_job_drop(job);
			return SB_ERR_INVAL;
		}
		job->state = TOOL_JOB_QUEUED;
		g->running++;
	} else {
		job->state = TOOL_JOB_WAITING;
		if (g->tail)
			g->tail->next = job;
		else
			g->head = job;
		g->tail = job;
	}
	uv_update_time(ctx->loop); /* the limit counts from now, not the loop's last turn */
	uv_timer_start(&job->timer, tool_job_timer, (uint64_t)job->timeout_ms, 0);
	if (run)
		*run = &job->run;
	return SB_OK;
}

int tool_job_error(uv_loop_t *loop, const char *msg, tool_done_cb done, void *ud,
                   struct tool_run **run)
{
	struct tool_job *job = tool_job_new(loop);

	if (!job)
		return SB_ERR_NOMEM;
	job->done = done;
	job->ud = ud;
	job->state = TOOL_JOB_OVER;
	tool_result_text(&job->res, msg);
	job->res.is_error = true;
	if (!job->res.content) {
		tool_job_drop(job);
		return SB_ERR_NOMEM;
	}
	/* Not pool work: its answer comes on the loop's next turn. */
	uv_timer_start(&job->timer, tool_job_timer, 0, 0);
	if (run)
		*run = &job->run;
	return SB_OK;
}

static void tool_result_vf(struct tool_job_result *res, bool is_error, const char *fmt, va_list ap)
{
	struct buf b;

	buf_init(&b, TOOL_OUTPUT_BUDGET);
	res->rc = buf_vprintf(&b, fmt, ap) == SB_ERR_NOMEM ? SB_ERR_NOMEM : SB_OK;
	free(res->content);
	res->content = buf_steal(&b);
	if (!res->content)
		res->rc = SB_ERR_NOMEM;
	res->is_error = is_error;
}

void tool_result_errorf(struct tool_job_result *res, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	tool_result_vf(res, true, fmt, ap);
	va_end(ap);
}

void tool_result_textf(struct tool_job_result *res, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	tool_result_vf(res, false, fmt, ap);
	va_end(ap);
}

void tool_result_text(struct tool_job_result *res, const char *text)
{
	free(res->content);
	res->content = strdup(text);
	res->rc = res->content ? SB_OK : SB_ERR_NOMEM;
	res->is_error = false;
}

/* ---- files ---- */

int tool_lines_open_fd(struct tool_lines *lr, int fd)
{
	memset(lr, 0, sizeof *lr);
	lr->f = fdopen(fd, "rb");
	if (!lr->f) {
		close(fd);
		return SB_ERR_NOMEM;
	}
	lr->chunk = malloc(TOOL_LINES_CHUNK);
	if (!lr->chunk) {
		fclose(lr->f);
		lr->f = NULL;
		return SB_ERR_NOMEM;
	}
	return SB_OK;
}

static int tool_lines_keep(char **line, size_t *len, size_t *cap, const char *p, size_t n)
{
	size_t want = *len + n + 1;
	char *q;

	if (want > *cap) {
		q = realloc(*line, want < 256 ? 256 : want);
		if (!q)
			return SB_ERR_NOMEM;
		*line = q;
		*cap = want < 256 ? 256 : want;
	}
	memcpy(*line + *len, p, n);
	*len += n;
	(*line)[*len] = '\0';
	return SB_OK;
}

int tool_lines_next(struct tool_lines *lr, char **line, size_t *line_len, size_t *line_cap,
                    size_t keep, bool *cut)
{
	bool any = false;
	const char *start, *nl;
	size_t seg, room, n;
	int rc;

	*line_len = 0;
	*cut = false;
	if ((rc = tool_lines_keep(line, line_len, line_cap, "", 0)) != SB_OK)
		return -rc;
	for (;;) {
		if (lr->pos == lr->len) {
			if (lr->eof)
				break;
			n = fread(lr->chunk, 1, TOOL_LINES_CHUNK, lr->f);
			if (n == 0) {
				if (ferror(lr->f))
					return -SB_ERR_IO;
				lr->eof = true;
				continue;
			}
			lr->pos = 0;
			lr->len = n;
		}
		any = true;
		start = lr->chunk + lr->pos;
		nl = memchr(start, '\n', lr->len - lr->pos);
		seg = nl ? (size_t)(nl - start) : lr->len - lr->pos;
		room = keep - *line_len;
		if (seg > room)
			*cut = true;
		if ((rc = tool_lines_keep(line, line_len, line_cap, start,
		                          seg < room ? seg : room)) != SB_OK)
			return -rc;
		lr->pos += seg;
		if (nl) {
			lr->pos++;
			break;
		}
	}
	if (!any)
		return 0;
	if (*line_len > 0 && (*line)[*line_len - 1] == '\r' && !*cut)
		(*line)[--*line_len] = '\0';
	return 1;
}

void tool_lines_close(struct tool_lines *lr)
{
	if (lr->f)
		fclose(lr->f);
	free(lr->chunk);
	memset(lr, 0, sizeof *lr);
}

bool tool_is_binary(const char *data, size_t len)
{
	return memchr(data, '\0', len < TOOL_BINARY_PROBE ? len : TOOL_BINARY_PROBE) != NULL;
}

bool tool_fd_is_binary(int fd)
{
	char probe[TOOL_BINARY_PROBE];
	ssize_t n;
	size_t got = 0;

	while (got < sizeof probe) {
		n = pread(fd, probe + got, sizeof probe - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	return tool_is_binary(probe, got);
}

/* why = "what path: the errno text" (strerror_r: this runs on the thread
 * pool; _GNU_SOURCE gives the GNU one, which returns the text). */
static void tool_why(char *why, size_t size, const char *what, const char *path)
{
	char eb[128];
	int e = errno;

	if (why && size)
		snprintf(why, size, "%s %s: %s", what, path, strerror_r(e, eb, sizeof eb));
}

int tool_mkdir_parents(const char *abs, char *why, size_t why_size)
{
	int rc = SB_ERR_NOMEM;
	char *p = strdup(abs), *s;

	if (!p)
		goto out;
	for (s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		if (mkdir(p, 0755) != 0 && errno != EEXIST) {
			tool_why(why, why_size, "cannot create directory", p);
			rc = SB_ERR_IO;
			goto out;
		}
		*s = '/';
	}
	rc = SB_OK;
out:
	free(p);
	return rc;
}

size_t tool_utf8_floor(const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = len, need;

	/* Back over up to three continuation bytes to the lead byte. */
	while (i > 0 && len - i < 3 && (u[i - 1] & 0xC0) == 0x80)
		i--;
	/* ASCII, or invalid bytes that no cut can make valid. */
	if (i == 0 || u[i - 1] < 0xC0)
		return len;
	need = u[i - 1] >= 0xF0 ? 4 : u[i - 1] >= 0xE0 ? 3 : 2;
	return len - (i - 1) < need ? i - 1 : len;
}

static int tool_dirent_cmp(const void *a, const void *b)
{
	const struct tool_dirent *x = a, *y = b;

	return strcmp(x->name, y->name);
}

int tool_dir_list(const char *abs, size_t max, struct tool_dirent **out, size_t *n, size_t *more)
{
	int fd = open(abs, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;

	*out = NULL;
	*n = 0;
	*more = 0;
	if (fd < 0)
		return SB_ERR_IO;
	rc = tool_dir_list_fd(fd, max, NULL, out, n, more);
	close(fd);
	return rc;
}

int tool_dir_list_fd(int dir_fd, size_t max, const struct tool_job_result *job,
                     struct tool_dirent **out, size_t *n, size_t *more)
{
	int rc = SB_ERR_IO, done = SB_OK;
	DIR *d = NULL;
	struct dirent *de;
	struct tool_dirent *ents = NULL, *grown;
	size_t cnt = 0, cap = 0, skipped = 0;
	struct stat st;
	int fd;

	*out = NULL;
	*n = 0;
	*more = 0;
	/* Its own descriptor: readdir moves the offset, closedir closes. */
	fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		goto out;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		goto out;
	}
	for (;;) {
		if (tool_job_stopped(job)) {
			done = SB_ERR_ABORTED;
			break;
		}
		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno)
				goto out;
			break;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (cnt == max) {
			skipped++;
			continue;
		}
		if (cnt == cap) {
			cap = cap ? cap * 2 : 64;
			if (cap > max)
				cap = max;
			grown = realloc(ents, cap * sizeof *ents);
			if (!grown) {
				rc = SB_ERR_NOMEM;
				goto out;
			}
			ents = grown;
		}
		ents[cnt].name = strdup(de->d_name);
		if (!ents[cnt].name) {
			rc = SB_ERR_NOMEM;
			goto out;
		}
		switch (de->d_type) {
		case DT_DIR:
			ents[cnt].kind = TOOL_DIR;
			break;
		case DT_REG:
			ents[cnt].kind = TOOL_FILE;
			break;
		case DT_LNK:
			ents[cnt].kind = TOOL_LINK;
			break;
		case DT_UNKNOWN:
			if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
				ents[cnt].kind = TOOL_OTHER;
			else if (S_ISDIR(st.st_mode))
				ents[cnt].kind = TOOL_DIR;
			else if (S_ISREG(st.st_mode))
				ents[cnt].kind = TOOL_FILE;
			else if (S_ISLNK(st.st_mode))
				ents[cnt].kind = TOOL_LINK;
			else
				ents[cnt].kind = TOOL_OTHER;
			break;
		default:
			ents[cnt].kind = TOOL_OTHER;
			break;
		}
		cnt++;
	}
	if (cnt)
		qsort(ents, cnt, sizeof *ents, tool_dirent_cmp);
	*out = ents;
	*n = cnt;
	*more = skipped;
	ents = NULL;
	cnt = 0;
	rc = done;
out:
	tool_dir_free(ents, cnt);
	if (d)
		closedir(d);
	return rc;
}

void tool_dir_free(struct tool_dirent *ents, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(ents[i].name);
	free(ents);
}

/* ---- the workspace, beneath its directory fd ---- */

#define TOOL_FS_UP_MAX 256 /* parents looked at above a directory */

static void tool_fs_say(char *why, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void tool_fs_say(char *why, size_t size, const char *fmt, ...)
{
	va_list ap;

	if (!why || !size)
		return;
	va_start(ap, fmt);
	if (vsnprintf(why, size, fmt, ap) < 0)
		why[0] = '\0';
	va_end(ap);
}

int tool_fs_spec_init(struct tool_fs_spec *s, const struct tool_ctx *ctx)
{
	memset(s, 0, sizeof *s);
	s->workspace = strdup(ctx->workspace ? ctx->workspace : "");
	if (!s->workspace)
		return SB_ERR_NOMEM;
	if (!ctx->private_paths || !ctx->n_private_paths)
		return SB_OK;
	s->priv = calloc(ctx->n_private_paths, sizeof *s->priv);
	if (!s->priv)
		return SB_ERR_NOMEM;
	for (; s->n_priv < ctx->n_private_paths; s->n_priv++) {
		const char *p = ctx->private_paths[s->n_priv];

		s->priv[s->n_priv] = strdup(p ? p : "");
		if (!s->priv[s->n_priv])
			return SB_ERR_NOMEM;
	}
	return SB_OK;
}

void tool_fs_spec_free(struct tool_fs_spec *s)
{
	for (size_t i = 0; s->priv && i < s->n_priv; i++)
		free(s->priv[i]);
	free(s->priv);
	free(s->workspace);
	memset(s, 0, sizeof *s);
}

int tool_fs_open(struct tool_fs *fs, const struct tool_fs_spec *s, char *why, size_t why_size)
{
	struct stat st;
	int rc;

	memset(fs, 0, sizeof *fs);
	fs->root = -1;
	if (!s->workspace || !*s->workspace) {
		tool_fs_say(why, why_size, "this agent has no workspace");
		return SB_ERR_IO;
	}
	rc = beneath_root(s->workspace, &fs->root);
	if (rc == SB_OK && fstat(fs->root, &fs->root_st) != 0)
		rc = SB_ERR_IO;
	if (rc) {
		tool_fs_say(why, why_size, "the workspace is not accessible: %s", sb_strerror(rc));
		tool_fs_close(fs);
		return rc == SB_ERR_NOMEM ? rc : SB_ERR_IO;
	}
	if (s->n_priv) {
		fs->priv = calloc(s->n_priv, sizeof *fs->priv);
		if (!fs->priv) {
			tool_fs_close(fs);
			tool_fs_say(why, why_size, "out of memory");
			return SB_ERR_NOMEM;
		}
	}
	/* A private path that does not exist now has nothing to protect; one
	 * made later in the workspace is a file the agent made. */
	for (size_t i = 0; i < s->n_priv; i++) {
		if (s->priv[i][0] == '/' && stat(s->priv[i], &st) == 0) {
			fs->priv[fs->n_priv].dev = st.st_dev;
			fs->priv[fs->n_priv].ino = st.st_ino;
			fs->n_priv++;
		}
	}
	return SB_OK;
}

void tool_fs_close(struct tool_fs *fs)
{
	if (fs->root >= 0)
		close(fs->root);
	free(fs->priv);
	memset(fs, 0, sizeof *fs);
	fs->root = -1;
}

int tool_fs_rel(const char *path, enum paths_mode mode, char *rel, size_t size, char *why,
                size_t why_size)
{
	int rc;

	if (!path || !*path) {
		tool_fs_say(why, why_size, "the path is empty");
		return SB_ERR_INVAL;
	}
	if (path[0] == '/') {
		tool_fs_say(
		    why, why_size,
		    "absolute paths are not allowed: %s (give a path relative to the workspace)",
		    path);
		return SB_ERR_PERM;
	}
	rc = beneath_normalize(path, rel, size);
	if (rc == SB_ERR_PERM) {
		tool_fs_say(why, why_size, "path escapes the workspace: %s", path);
		return rc;
	}
	if (rc) {
		tool_fs_say(why, why_size, "the path is too long: %s", path);
		return SB_ERR_INVAL;
	}
	if (mode != PATHS_EXISTING && (strcmp(rel, ".git") == 0 || strncmp(rel, ".git/", 5) == 0)) {
		tool_fs_say(why, why_size,
		            "refusing to write inside the workspace's .git directory: %s (use git "
		            "through bash instead)",
		            path);
		return SB_ERR_PERM;
	}
	return SB_OK;
}

const char *tool_fs_shown(const char *rel)
{
	return rel[0] ? rel : ".";
}

/* Explains a refused rel by looking at its components one by one. */
static void tool_fs_explain(const struct tool_fs *fs, const char *path, const char *rel, char *why,
                            size_t why_size)
{
	char buf[BENEATH_PATH_MAX], target[BENEATH_PATH_MAX], joined[2 * BENEATH_PATH_MAX + 2];
	char folded[BENEATH_PATH_MAX];
	char *name, *slash;
	struct stat st;
	ssize_t n;
	int fd, next;

	snprintf(buf, sizeof buf, "%s", rel);
	fd = openat(fs->root, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	for (name = buf; fd >= 0 && name && *name; name = slash ? slash + 1 : NULL) {
		slash = strchr(name, '/');
		if (slash)
			*slash = '\0';
		if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			break;
		if (S_ISLNK(st.st_mode)) {
			n = readlinkat(fd, name, target, sizeof target - 1);
			target[n > 0 ? n : 0] = '\0';
			/* The link's directory is buf up to name. */
			snprintf(joined, sizeof joined, "%.*s%s", (int)(name - buf), buf, target);
			if (n <= 0 || target[0] == '/' ||
			    beneath_normalize(joined, folded, sizeof folded) != SB_OK)
				tool_fs_say(why, why_size,
				            "path escapes the workspace (through a symlink): %s",
				            path);
			else
				tool_fs_say(
				    why, why_size,
				    "path goes through a symlink (%s -> %s), which the file "
				    "tools do not follow: %s (give the path it points to, %s)",
				    buf, target, path, tool_fs_shown(folded));
			close(fd);
			return;
		}
		if (!slash)
			break;
		if (!S_ISDIR(st.st_mode)) {
			tool_fs_say(why, why_size, "not a directory: a parent of %s is a file",
			            path);
			close(fd);
			return;
		}
		next = openat(fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(fd);
		fd = next;
		*slash = '/';
	}
	if (fd >= 0)
		close(fd);
	tool_fs_say(why, why_size, "cannot open %s: permission denied", path);
}

void tool_fs_why(const struct tool_fs *fs, const char *path, const char *rel, int rc, char *why,
                 size_t why_size)
{
	switch (rc) {
	case SB_ERR_NOTFOUND:
		tool_fs_say(why, why_size, "no such file or directory: %s", path);
		break;
	case SB_ERR_PERM:
		tool_fs_explain(fs, path, rel, why, why_size);
		break;
	case SB_ERR_TOOBIG:
		tool_fs_say(why, why_size, "the path is too long: %s", path);
		break;
	case SB_ERR_NOMEM:
		tool_fs_say(why, why_size, "out of memory");
		break;
	default:
		tool_fs_say(why, why_size, "cannot open %s: %s", path, sb_strerror(rc));
		break;
	}
}

static void tool_fs_private_why(const char *path, char *why, size_t why_size)
{
	tool_fs_say(why, why_size,
	            "%s is one of the gateway's own files (its configuration, home, store or "
	            "secrets); the file tools neither read nor write it",
	            path);
}

bool tool_fs_private_st(const struct tool_fs *fs, const struct stat *st)
{
	for (size_t i = 0; i < fs->n_priv; i++)
		if (fs->priv[i].dev == st->st_dev && fs->priv[i].ino == st->st_ino)
			return true;
	return false;
}

bool tool_fs_private_dir(const struct tool_fs *fs, int dirfd)
{
	struct stat st, up;
	bool found = false;
	int cur, next;

	if (!fs->n_priv)
		return false;
	cur = openat(dirfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cur < 0)
		return true; /* unknown: refused */
	/* The workspace itself is not refused: it was asked for, like the
	 * sandbox's view (the private paths inside it are). */
	for (int i = 0; i < TOOL_FS_UP_MAX; i++) {
		if (fstat(cur, &st) != 0) {
			found = true;
			break;
		}
		if (st.st_dev == fs->root_st.st_dev && st.st_ino == fs->root_st.st_ino)
			break;
		if (tool_fs_private_st(fs, &st)) {
			found = true;
			break;
		}
		next = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (next < 0 || fstat(next, &up) != 0 ||
		    (up.st_dev == st.st_dev && up.st_ino == st.st_ino)) {
			if (next >= 0)
				close(next);
			break; /* the top of the file system */
		}
		close(cur);
		cur = next;
	}
	close(cur);
	return found;
}

int tool_fs_dirname(const struct tool_fs *fs, const char *path, const char *rel, char *dir,
                    size_t size, char *why, size_t why_size)
{
	const char *slash = strrchr(rel, '/');
	size_t n = slash ? (size_t)(slash - rel) : 0;

	if (n >= size) {
		tool_fs_why(fs, path, rel, SB_ERR_TOOBIG, why, why_size);
		return SB_ERR_TOOBIG;
	}
	memcpy(dir, rel, n);
	dir[n] = '\0';
	return SB_OK;
}

int tool_fs_parent(const struct tool_fs *fs, const char *path, const char *rel, int *pfd,
                   const char **last, char *why, size_t why_size)
{
	char dir[BENEATH_PATH_MAX];
	const char *slash = strrchr(rel, '/');
	struct stat st;
	int rc;

	*pfd = -1;
	*last = slash ? slash + 1 : rel;
	if ((rc = tool_fs_dirname(fs, path, rel, dir, sizeof dir, why, why_size)))
		return rc;
	rc = beneath_open(fs->root, dir, O_PATH, 0, BENEATH_DIRECTORY, pfd);
	if (rc) {
		tool_fs_why(fs, path, rel, rc, why, why_size);
		return rc;
	}
	if (tool_fs_private_dir(fs, *pfd) ||
	    (**last && fstatat(*pfd, *last, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	     tool_fs_private_st(fs, &st))) {
		close(*pfd);
		*pfd = -1;
		tool_fs_private_why(path, why, why_size);
		return SB_ERR_PERM;
	}
	return SB_OK;
}

int tool_fs_open_file(const struct tool_fs *fs, const char *path, const char *rel, int *fd,
                      struct stat *st, char *why, size_t why_size)
{
	const char *last;
	int pfd, rc;

	*fd = -1;
	if ((rc = tool_fs_parent(fs, path, rel, &pfd, &last, why, why_size)))
		return rc;
	rc = beneath_open(pfd, last, O_RDONLY, 0, BENEATH_REGULAR, fd);
	close(pfd);
	if (rc == SB_OK && fstat(*fd, st) != 0)
		rc = SB_ERR_IO;
	if (rc == SB_OK && tool_fs_private_st(fs, st)) {
		tool_fs_private_why(path, why, why_size);
		rc = SB_ERR_PERM;
	} else if (rc) {
		tool_fs_why(fs, path, rel, rc, why, why_size);
	}
	if (rc && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	return rc;
}

int tool_fs_open_dir(const struct tool_fs *fs, const char *path, const char *rel, int *fd,
                     char *why, size_t why_size)
{
	int rc = beneath_open(fs->root, rel, O_RDONLY, 0, BENEATH_DIRECTORY, fd);

	if (rc) {
		tool_fs_why(fs, path, rel, rc, why, why_size);
		return rc;
	}
	if (tool_fs_private_dir(fs, *fd)) {
		close(*fd);
		*fd = -1;
		tool_fs_private_why(path, why, why_size);
		return SB_ERR_PERM;
	}
	return SB_OK;
}

int tool_fs_open_child(const struct tool_fs *fs, int dirfd, const char *name, bool dir)
{
	struct stat st;
	int fd, fl;

	fd =
	    openat(dirfd, name,
	           O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (dir ? O_DIRECTORY : O_NONBLOCK | O_NOCTTY));
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0 || (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) ||
	    tool_fs_private_st(fs, &st)) {
		close(fd);
		return -1;
	}
	if (!dir && ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* ---- glob ---- */

#define TOOL_GLOB_SEGS 64 /* segments of a pattern or a path */

/* Cuts s (modified) at each '/' into seg; false past TOOL_GLOB_SEGS. */
static bool tool_glob_split(char *s, char **seg, size_t *n)
{
	*n = 0;
	for (;;) {
		if (*n == TOOL_GLOB_SEGS)
			return false;
		seg[(*n)++] = s;
		if (!(s = strchr(s, '/')))
			return true;
		*s++ = '\0';
	}
}

/* A table of which pattern suffix matches which path suffix, so that the
 * model's pattern costs at most segments x segments fnmatch calls ("**"
 * tried at every split was exponential: "**" thirty times against a path
 * of forty segments did not return). */
bool tool_glob_match(const char *pattern, const char *path)
{
	char *pat = strdup(pattern), *pth = strdup(path);
	char *ps[TOOL_GLOB_SEGS], *ss[TOOL_GLOB_SEGS];
	bool ok[TOOL_GLOB_SEGS + 1][TOOL_GLOB_SEGS + 1];
	size_t np, ns, i, j;
	bool r = false;

	if (!pat || !pth || !tool_glob_split(pat, ps, &np) || !tool_glob_split(pth, ss, &ns))
		goto out;
	/* ok[i][j]: segments i.. of the pattern match segments j.. of path
	 * (j < ns). A "**" stands for no segment or more, but not for all the
	 * rest of path unless it is the pattern's last. */
	for (j = 0; j <= ns; j++)
		ok[np][j] = j == ns;
	for (i = np; i-- > 0;) {
		bool any = strcmp(ps[i], "**") == 0;

		ok[i][ns] = false;
		for (j = ns; j-- > 0;) {
			if (any && i + 1 == np)
				ok[i][j] = true;
			else if (any)
				ok[i][j] = ok[i + 1][j] || ok[i][j + 1];
			else
				ok[i][j] = ok[i + 1][j + 1] && fnmatch(ps[i], ss[j], 0) == 0;
		}
	}
	r = ok[0][0];
out:
	free(pat);
	free(pth);
	return r;
}

/* ---- input ---- */

const char *tool_in_str(const json_t *input, const char *key, const char *def)
{
	const json_t *v = json_object_get(input, key);

	return json_is_string(v) ? json_string_value(v) : def;
}

int64_t tool_in_int(const json_t *input, const char *key, int64_t def)
{
	const json_t *v = json_object_get(input, key);

	return json_is_integer(v) ? (int64_t)json_integer_value(v) : def;
}

bool tool_in_bool(const json_t *input, const char *key, bool def)
{
	const json_t *v = json_object_get(input, key);

	return json_is_boolean(v) ? json_is_true(v) : def;
}

bool tool_always(const json_t *input)
{
	return true;
}

bool tool_never(const json_t *input)
{
	return false;
}
