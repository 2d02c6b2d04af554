/*
 * transcript.c - a session's append-only JSONL transcript. See transcript.h.
 *
 * Appends are serialised on the loop thread into a queue of lines. The
 * transcripts of one loop share a lane (below): one uv_queue_work job at a
 * time takes, from every transcript with lines waiting, its queue up to the
 * first flush marker as a batch, and writes each batch in order, in one
 * writev(2) where it can, to a descriptor opened O_APPEND; the next job is
 * submitted from the completion callback. Flush requests are markers in the
 * same queue, so they complete exactly when everything queued before them is
 * written. Closing is the last marker: the job syncs (unless the store keeps
 * the bytes) and closes the descriptor and the completion callback frees the
 * transcript.
 *
 * Torn lines: a crash in the middle of a write leaves a last line without
 * "\n" (or, rarely, an invalid last line). The file is append-only, so the
 * fragment is never cut off: transcript_open notices it, and the first later
 * append writes "\n" first when needed (in the same write(2)) and carries
 * "follows_torn": true. transcript_load then skips the line just before such
 * an entry, and any invalid lines right before that one (a crash while the
 * fragment was being isolated). Any other invalid line is corruption
 * (SB_ERR_INVAL).
 */
#include "agents/transcript.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "agents/context/compact.h"
#include "gateway/core/buf.h"
#include "gateway/core/crash.h"
#include "gateway/core/err.h"
#include "gateway/core/fsutil.h"
#include "gateway/core/jsonw.h"
#include "gateway/core/log.h"

/* The longest line transcript_open looks back over to find the last entry,
 * and the largest file transcript_load reads. */
#define TRANSCRIPT_LINE_MAX ((size_t)16 << 20)
#define TRANSCRIPT_FILE_MAX ((size_t)512 << 20)
/* Bytes waiting in the queue before transcript_append says SB_ERR_AGAIN. */
#define TRANSCRIPT_QUEUE_MAX ((size_t)64 << 20)
#define TRANSCRIPT_ID_BYTES 12
/* The most bytes one open keeps for transcript_take_pending; beyond it the
 * close syncs the file itself. */
#define TRANSCRIPT_PENDING_MAX ((size_t)8 << 20)

enum transcript_item_kind { TRANSCRIPT_LINE, TRANSCRIPT_FLUSH, TRANSCRIPT_CLOSE };

struct transcript_item {
	struct transcript_item *next;
	enum transcript_item_kind kind;
	char *line; /* TRANSCRIPT_LINE: the bytes to write, "\n" included */
	size_t len;
	void (*cb)(void *ud, int rc); /* TRANSCRIPT_FLUSH */
	void *ud;
};

/* The transcripts of one loop share a lane: one job at a time on the thread
 * pool writes the batches of every transcript that had lines waiting when it
 * was submitted, so that many conversations at once cost one hand-off, not
 * one each. A transcript is in at most one job at a time (its order holds);
 * what is appended meanwhile waits on the ready list for the next job, which
 * the completion submits. */
struct transcript_lane {
	uv_loop_t *loop;
	struct transcript_lane *next;
	size_t refs;                           /* transcripts, and a completion running */
	bool busy;                             /* a job is on the pool */
	bool completing;                       /* in lane_after: submit at its end */
	struct transcript *ready, *ready_tail; /* waiting for the next job */
	struct transcript *job;                /* in the job */
	uv_work_t work;
};

struct transcript {
	int fd;
	char *path;
	char last_id[40];
	bool need_nl;  /* the file does not end with "\n": the next append starts one */
	bool torn;     /* the file ends in torn line(s): mark the next append */
	bool closing;  /* transcript_close was called: no more appends */
	bool busy;     /* a batch is on the thread pool */
	bool ready;    /* on its lane's ready list */
	int err;       /* first write error (sticky): later lines are refused */
	int batch_err; /* the worker's copy of err while busy */
	size_t queued_bytes;
	struct transcript_item *head, *tail; /* waiting for the next batch */
	struct transcript_item *batch;       /* owned by the job while busy */
	struct transcript_lane *lane;
	struct transcript *lane_next; /* on the ready list, then in the job */
	char *stamp_key;              /* transcript_set_stamp */
	json_t *stamp;
	/* What this open wrote, from the file offset base: the bytes
	 * transcript_take_pending hands over (header included for a file it
	 * started). */
	int64_t base;
	char *pending;
	size_t pending_len, pending_cap;
	bool pending_over; /* more than TRANSCRIPT_PENDING_MAX: not kept */
	bool created;      /* this open created the file (its directory entry is new) */
	bool recorded;     /* taken: the caller keeps the bytes durable, close syncs nothing */
	bool no_hint;      /* the close of a recorded one starts no writeback */
};

/* Gives up keeping what this open writes: the close syncs the file. */
static void transcript_keep_none(struct transcript *t)
{
	free(t->pending);
	t->pending = NULL;
	t->pending_len = t->pending_cap = 0;
	t->pending_over = true;
}

/* Keeps a copy of bytes about to be written (loop thread, or open). Beyond
 * TRANSCRIPT_PENDING_MAX, or without memory for the copy, nothing more is
 * kept and the append goes on: the close then syncs the file. */
static int transcript_keep(struct transcript *t, const char *p, size_t len)
{
	if (t->pending_over)
		return SB_OK;
	if (t->pending_len + len > TRANSCRIPT_PENDING_MAX) {
		transcript_keep_none(t);
		return SB_OK;
	}
	if (t->pending_len + len > t->pending_cap) {
		size_t cap = t->pending_cap ? t->pending_cap : 4096;
		char *np;

		while (cap < t->pending_len + len)
			cap *= 2;
		np = realloc(t->pending, cap);
		if (!np) {
			transcript_keep_none(t);
			return SB_OK;
		}
		t->pending = np;
		t->pending_cap = cap;
	}
	memcpy(t->pending + t->pending_len, p, len);
	t->pending_len += len;
	return SB_OK;
}

/* ---- time and ids ---- */

/* Writes n decimal digits of v at p (zero-padded). */
static void transcript_digits(char *p, unsigned v, int n)
{
	while (n-- > 0) {
		p[n] = (char)('0' + v % 10u);
		v /= 10u;
	}
}

/* "YYYY-MM-DDTHH:MM:SS.mmmZ" (24 characters and a NUL: size >= 25). The
 * digits are placed by hand: strftime and snprintf cost more than the rest
 * of an entry's framing, and every entry has a time. */
static void transcript_now_rfc3339(char *out, size_t size)
{
	struct timespec ts;
	struct tm tm;
	unsigned year;

	if (size < 25) {
		if (size)
			out[0] = '\0';
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	/* Years past 9999 are not RFC 3339; they saturate. */
	year = tm.tm_year + 1900 < 0      ? 0u
	       : tm.tm_year + 1900 > 9999 ? 9999u
	                                  : (unsigned)tm.tm_year + 1900u;
	memcpy(out, "0000-00-00T00:00:00.000Z", 25);
	transcript_digits(out, year, 4);
	transcript_digits(out + 5, (unsigned)tm.tm_mon + 1u, 2);
	transcript_digits(out + 8, (unsigned)tm.tm_mday, 2);
	transcript_digits(out + 11, (unsigned)tm.tm_hour, 2);
	transcript_digits(out + 14, (unsigned)tm.tm_min, 2);
	transcript_digits(out + 17, (unsigned)tm.tm_sec, 2);
	transcript_digits(out + 20, (unsigned)(ts.tv_nsec / 1000000) % 1000u, 3);
}

static void transcript_new_entry_id(char *out, size_t size)
{
	unsigned char raw[TRANSCRIPT_ID_BYTES];
	char hex[2 * TRANSCRIPT_ID_BYTES + 1];

	randombytes_buf(raw, sizeof raw);
	sodium_bin2hex(hex, sizeof hex, raw, sizeof raw);
	if (size > sizeof hex - 1) {
		memcpy(out, hex, sizeof hex);
	} else if (size) {
		memcpy(out, hex, size - 1);
		out[size - 1] = '\0';
	}
}

/* A ULID in lower case from ms and 10 bytes: 48 bits of milliseconds in
 * 10 characters (the top 2 bits are 0), then the 80 bits in 16. */
static void transcript_ulid(char *out, size_t size, uint64_t ms, const unsigned char rnd[10])
{
	static const char alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz"; /* Crockford */
	char id[27];
	unsigned acc = 0, bits = 0;
	size_t k = 0;

	for (int i = 9; i >= 0; i--) {
		id[i] = alphabet[ms & 31u];
		ms >>= 5;
	}
	k = 10;
	for (size_t i = 0; i < 10; i++) {
		acc = (acc << 8) | rnd[i];
		bits += 8;
		while (bits >= 5) {
			id[k++] = alphabet[(acc >> (bits - 5)) & 31u];
			bits -= 5;
		}
	}
	id[k] = '\0';
	snprintf(out, size, "%s", id);
}

void transcript_new_session_id(char *out, size_t size)
{
	unsigned char rnd[10];
	struct timespec ts;

	if (sodium_init() < 0)
		abort(); /* libsodium cannot work without a random source */
	clock_gettime(CLOCK_REALTIME, &ts);
	randombytes_buf(rnd, sizeof rnd);
	transcript_ulid(out, size, (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u,
	                rnd);
}

void transcript_session_id_for(char *out, size_t size, const char *session_key, int64_t inbox_id,
                               int64_t received_at)
{
	crypto_generichash_state st;
	unsigned char h[16];
	char num[48];

	if (sodium_init() < 0)
		abort();
	snprintf(num, sizeof num, "%lld:%lld", (long long)inbox_id, (long long)received_at);
	crypto_generichash_init(&st, NULL, 0, sizeof h);
	crypto_generichash_update(&st, (const unsigned char *)"switchboard-session\0", 20);
	crypto_generichash_update(&st, (const unsigned char *)session_key, strlen(session_key) + 1);
	crypto_generichash_update(&st, (const unsigned char *)num, strlen(num));
	crypto_generichash_final(&st, h, sizeof h);
	transcript_ulid(out, size, received_at > 0 ? (uint64_t)received_at : 0, h);
}

/* ---- the writer ---- */

static void transcript_items_free(struct transcript_item *it)
{
	while (it) {
		struct transcript_item *next = it->next;

		free(it->line);
		free(it);
		it = next;
	}
}

/* After a failed append: cuts off the `written` bytes of it that reached the
 * file (only this open appends to it), so that the file still ends on a whole
 * line. SB_ERR_IO either way: if the cut fails, the torn line stays and load
 * skips it. */
static int transcript_cut_back(int fd, size_t written)
{
	off_t end;

	if (written && (end = lseek(fd, 0, SEEK_END)) >= (off_t)written &&
	    ftruncate(fd, end - (off_t)written) != 0)
		return SB_ERR_IO; /* the torn line stays; load skips it */
	return SB_ERR_IO;
}

/* Writes all of p with as few write(2) calls as the kernel allows (one for a
 * regular file unless the disk is full). On failure the partial line is cut
 * off again so that the file still ends on a whole line. */
static int transcript_write_line(int fd, const char *p, size_t len)
{
	size_t written = 0;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return transcript_cut_back(fd, written);
		p += n;
		len -= (size_t)n;
		written += (size_t)n;
	}
	return SB_OK;
}

/* Writes the lines of a batch from it on, up to its first item that is not
 * a line, in as few writev(2) calls as the kernel allows (one for a regular
 * file unless the disk is full, IOV_MAX lines at most per call); *next is the
 * item after them. On failure what was written of the batch is cut off again
 * so that the file still ends on a whole line. */
static int transcript_write_lines(int fd, struct transcript_item *it, struct transcript_item **next)
{
	struct iovec iov[64];
	size_t written = 0;
	int rc = SB_OK;

	while (it && it->kind == TRANSCRIPT_LINE) {
		size_t n = 0, skip;

		for (; it && it->kind == TRANSCRIPT_LINE && n < sizeof iov / sizeof iov[0];
		     it = it->next) {
			iov[n].iov_base = it->line;
			iov[n++].iov_len = it->len;
		}
		SB_CRASH_POINT("transcript.append");
		for (skip = 0; skip < n;) {
			ssize_t w = writev(fd, iov + skip, (int)(n - skip));

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				rc = SB_ERR_IO;
				break;
			}
			written += (size_t)w;
			while (skip < n && (size_t)w >= iov[skip].iov_len)
				w -= (ssize_t)iov[skip++].iov_len;
			if (skip < n) {
				iov[skip].iov_base = (char *)iov[skip].iov_base + w;
				iov[skip].iov_len -= (size_t)w;
			}
		}
		if (rc != SB_OK)
			break;
	}
	if (rc != SB_OK) {
		rc = transcript_cut_back(fd, written);
		while (it && it->kind == TRANSCRIPT_LINE)
			it = it->next;
	}
	*next = it;
	return rc;
}

/* Syncs the directory that holds path (its new entry). Blocking. */
static int transcript_sync_dir(const char *path)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];
	int fd, rc = SB_OK;

	if (!slash)
		snprintf(dir, sizeof dir, ".");
	else if (snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path) >=
	         (int)sizeof dir)
		return SB_ERR_TOOBIG;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return SB_ERR_IO;
	if (fsync(fd) != 0)
		rc = SB_ERR_IO;
	close(fd);
	return rc;
}

/* Thread pool: writes the batch in order. Touches only the batch, fd and
 * batch_err, which the loop thread leaves alone while busy. */
static void transcript_work(struct transcript *t)
{
	for (struct transcript_item *it = t->batch, *next; it; it = next) {
		next = it->next;
		if (it->kind == TRANSCRIPT_LINE) {
			if (t->batch_err == SB_OK)
				t->batch_err = transcript_write_lines(t->fd, it, &next);
			else
				continue;
		}
		if (it->kind == TRANSCRIPT_CLOSE && t->fd >= 0) {
			/* Unless the caller keeps the bytes durable elsewhere
			 * (transcript_take_pending), they are synced here, and a
			 * new file's directory entry with them. */
			if (!t->recorded && fdatasync(t->fd) != 0 && t->batch_err == SB_OK)
				t->batch_err = SB_ERR_IO;
			if (!t->recorded && t->created && t->batch_err == SB_OK &&
			    transcript_sync_dir(t->path) != SB_OK)
				t->batch_err = SB_ERR_IO;
			/* Kept durable in the store: start the file's writeback
			 * now (a hint, nothing waits), so that the batched sync
			 * finds little left and its burst of writes does not
			 * queue the store's next commit behind it (the p99 at
			 * one sender, docs/performance.md). */
			if (t->recorded && !t->no_hint)
				(void)sync_file_range(t->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
			if (close(t->fd) != 0 && t->batch_err == SB_OK)
				t->batch_err = SB_ERR_IO;
			t->fd = -1;
		}
	}
}

/* ---- lanes ---- */

static pthread_mutex_t transcript_lanes_mu = PTHREAD_MUTEX_INITIALIZER;
static struct transcript_lane *transcript_lanes;
static atomic_ullong transcript_jobs;

unsigned long long transcript_jobs_submitted(void)
{
	return atomic_load(&transcript_jobs);
}

/* The lane of loop, with a reference (any thread: transcript_open runs on
 * the pool). NULL without memory. */
static struct transcript_lane *lane_get(uv_loop_t *loop)
{
	struct transcript_lane *l;

	pthread_mutex_lock(&transcript_lanes_mu);
	for (l = transcript_lanes; l && l->loop != loop; l = l->next)
		;
	if (!l && (l = calloc(1, sizeof *l))) {
		l->loop = loop;
		l->next = transcript_lanes;
		transcript_lanes = l;
	}
	if (l)
		l->refs++;
	pthread_mutex_unlock(&transcript_lanes_mu);
	return l;
}

static void lane_put(struct transcript_lane *l)
{
	struct transcript_lane **pp;

	if (!l)
		return;
	pthread_mutex_lock(&transcript_lanes_mu);
	if (--l->refs == 0) {
		for (pp = &transcript_lanes; *pp && *pp != l; pp = &(*pp)->next)
			;
		if (*pp)
			*pp = l->next;
		free(l);
	}
	pthread_mutex_unlock(&transcript_lanes_mu);
}

static void lane_unready(struct transcript_lane *l, struct transcript *t)
{
	struct transcript **pp, *prev = NULL;

	if (!t->ready)
		return;
	for (pp = &l->ready; *pp && *pp != t; pp = &(*pp)->lane_next)
		prev = *pp;
	if (*pp)
		*pp = t->lane_next;
	if (l->ready_tail == t)
		l->ready_tail = prev;
	t->lane_next = NULL;
	t->ready = false;
}

static void transcript_free(struct transcript *t)
{
	if (t->lane)
		lane_unready(t->lane, t);
	lane_put(t->lane);
	transcript_items_free(t->head);
	if (t->fd >= 0)
		close(t->fd);
	free(t->path);
	free(t->pending);
	free(t->stamp_key);
	json_decref(t->stamp);
	free(t);
}

/* Takes t's queue up to its first flush marker as its batch, so that the
 * marker's callback runs as soon as what came before it is written. */
static void transcript_cut_batch(struct transcript *t)
{
	struct transcript_item *last;

	for (last = t->head; last->next && last->kind == TRANSCRIPT_LINE; last = last->next)
		t->queued_bytes -= last->len;
	if (last->kind == TRANSCRIPT_LINE)
		t->queued_bytes -= last->len;
	t->batch = t->head;
	t->head = last->next;
	if (!t->head)
		t->tail = NULL;
	last->next = NULL;
	t->busy = true;
	t->batch_err = t->err;
}

static void lane_work(uv_work_t *w)
{
	struct transcript_lane *l = w->data;

	for (struct transcript *t = l->job; t; t = t->lane_next)
		transcript_work(t);
}

static void lane_after(uv_work_t *w, int status);

/* Submits one job with every ready transcript's batch, unless one is on the
 * pool already (its completion submits). Loop thread. */
static void lane_submit(struct transcript_lane *l)
{
	if (l->busy || l->completing || !l->ready)
		return;
	l->job = l->ready;
	l->ready = l->ready_tail = NULL;
	for (struct transcript *t = l->job; t; t = t->lane_next) {
		t->ready = false;
		transcript_cut_batch(t);
	}
	l->busy = true;
	l->work.data = l;
	atomic_fetch_add(&transcript_jobs, 1);
	if (uv_queue_work(l->loop, &l->work, lane_work, lane_after) != 0) {
		/* Only fails for a NULL callback; keep the contract anyway: run it here. */
		lane_work(&l->work);
		lane_after(&l->work, 0);
	}
}

static void transcript_submit(struct transcript *t)
{
	if (t->busy || t->ready || !t->head)
		return;
	t->ready = true;
	t->lane_next = NULL;
	if (t->lane->ready_tail)
		t->lane->ready_tail->lane_next = t;
	else
		t->lane->ready = t;
	t->lane->ready_tail = t;
	lane_submit(t->lane);
}

/* One transcript's batch is written: its flush callbacks, its close. */
static void transcript_after_work(struct transcript *t)
{
	struct transcript_item *batch = t->batch;
	bool closed = false;

	t->batch = NULL;
	t->busy = false;
	if (t->err == SB_OK && t->batch_err != SB_OK)
		log_error("transcript", "write failed, later entries are refused",
		          LOG_S("path", t->path));
	t->err = t->batch_err;
	for (struct transcript_item *it = batch; it; it = it->next) {
		if (it->kind == TRANSCRIPT_FLUSH && it->cb)
			it->cb(it->ud, t->err);
		if (it->kind == TRANSCRIPT_CLOSE)
			closed = true;
	}
	transcript_items_free(batch);
	if (closed) {
		transcript_free(t);
		return;
	}
	transcript_submit(t);
}

static void lane_after(uv_work_t *w, int status)
{
	struct transcript_lane *l = w->data;
	struct transcript *t = l->job, *next;

	(void)status;
	/* Held through the callbacks: the last close may drop the others. */
	pthread_mutex_lock(&transcript_lanes_mu);
	l->refs++;
	pthread_mutex_unlock(&transcript_lanes_mu);
	l->job = NULL;
	l->busy = false;
	l->completing = true;
	for (; t; t = next) {
		next = t->lane_next;
		t->lane_next = NULL;
		transcript_after_work(t);
	}
	l->completing = false;
	lane_submit(l);
	lane_put(l);
}

static int transcript_enqueue(struct transcript *t, enum transcript_item_kind kind, char *line,
                              size_t len, void (*cb)(void *, int), void *ud)
{
	struct transcript_item *it = calloc(1, sizeof *it);

	if (!it)
		return SB_ERR_NOMEM;
	it->kind = kind;
	it->line = line;
	it->len = len;
	it->cb = cb;
	it->ud = ud;
	if (t->tail)
		t->tail->next = it;
	else
		t->head = it;
	t->tail = it;
	t->queued_bytes += len;
	transcript_submit(t);
	return SB_OK;
}

/* ---- open ---- */

/* Reads [off, off + len) of fd. */
static int transcript_pread_all(int fd, char *dst, size_t len, off_t off)
{
	while (len) {
		ssize_t n = pread(fd, dst, len, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return SB_ERR_IO;
		dst += n;
		len -= (size_t)n;
		off += n;
	}
	return SB_OK;
}

/* What the end of an existing file says: whether it lacks a final "\n",
 * whether it ends in torn lines (unterminated or invalid), the id of the last
 * entry ("" after only the header), and whether it holds no "\n" at all (its
 * header was torn at creation). */
struct transcript_tail {
	bool need_nl;
	bool torn;
	bool no_line;
	char last_id[40];
};

/* Looks at the last whole lines of buf (the file's last len bytes; at_start:
 * buf begins at the file's first byte). SB_OK when decided, SB_ERR_AGAIN
 * when more of the file is needed, SB_ERR_INVAL when no line is valid. */
static int transcript_tail_scan(const char *buf, size_t len, bool at_start,
                                struct transcript_tail *tail)
{
	size_t end = len;

	tail->need_nl = len > 0 && buf[len - 1] != '\n';
	tail->torn = tail->need_nl;
	/* Skip the torn fragment, then walk back line by line past isolated
	 * fragments to the last line that parses. */
	while (end > 0 && buf[end - 1] != '\n')
		end--;
	if (end == 0) {
		if (!at_start)
			return SB_ERR_AGAIN;
		tail->no_line = true;
		return SB_OK;
	}
	for (;;) {
		size_t start = end - 1; /* buf[end - 1] is the line's "\n" */
		json_t *j;
		const char *id, *type;

		while (start > 0 && buf[start - 1] != '\n')
			start--;
		if (start == 0 && !at_start)
			return SB_ERR_AGAIN;
		j = json_loadb(buf + start, end - 1 - start, 0, NULL);
		type = json_string_value(json_object_get(j, "type"));
		id = json_string_value(json_object_get(j, "id"));
		if (type && strcmp(type, "session") == 0) {
			tail->last_id[0] = '\0';
			json_decref(j);
			return SB_OK;
		}
		if (type && id) {
			snprintf(tail->last_id, sizeof tail->last_id, "%s", id);
			json_decref(j);
			return SB_OK;
		}
		json_decref(j);
		tail->torn = true;
		if (start == 0)
			return SB_ERR_INVAL; /* whole lines, none valid: not a transcript */
		end = start;
	}
}

static int transcript_read_tail(int fd, off_t size, struct transcript_tail *tail)
{
	size_t want = 64 * 1024;
	char *buf = NULL;
	int rc = SB_ERR_IO;

	memset(tail, 0, sizeof *tail);
	for (;;) {
		size_t n = (off_t)want < size ? want : (size_t)size;
		char *p = realloc(buf, n ? n : 1);

		rc = SB_ERR_NOMEM;
		if (!p)
			goto out;
		buf = p;
		rc = transcript_pread_all(fd, buf, n, size - (off_t)n);
		if (rc != SB_OK)
			goto out;
		rc = transcript_tail_scan(buf, n, (off_t)n == size, tail);
		if (rc != SB_ERR_AGAIN)
			goto out;
		rc = SB_ERR_TOOBIG;
		if (want >= TRANSCRIPT_LINE_MAX * 4)
			goto out;
		want *= 2;
	}
out:
	free(buf);
	return rc;
}

static char *transcript_dirname(const char *path)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		return NULL;
	return strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

static int transcript_write_header(int fd, const struct transcript_info *info, struct transcript *t)
{
	char created[40], *line = NULL;
	json_t *h;
	int rc = SB_ERR_NOMEM;

	transcript_now_rfc3339(created, sizeof created);
	h = json_pack("{s:s,s:i,s:s,s:s?,s:s?,s:s}", "type", "session", "version",
	              TRANSCRIPT_VERSION, "id", info->session_id, "key", info->session_key, "agent",
	              info->agent_id, "created", created);
	if (!h)
		goto out;
	line = jsonw_dumps(h, 0, NULL);
	if (!line)
		goto out;
	/* The terminator of the dump becomes the newline: one write. */
	{
		size_t len = strlen(line);
		char *withnl = realloc(line, len + 2);

		if (!withnl)
			goto out;
		line = withnl;
		line[len] = '\n';
		line[len + 1] = '\0';
		rc = transcript_keep(t, line, len + 1);
		if (rc == SB_OK)
			rc = transcript_write_line(fd, line, len + 1);
	}
out:
	free(line);
	json_decref(h);
	return rc;
}

/* Creates path with its header, in one write(2), when it does not exist:
 * SB_OK with t->fd open, SB_ERR_EXISTS when it does (t->fd stays -1). A
 * kill cannot cut one write in two; a machine crash can leave the file empty
 * or its header torn, which transcript_load reads as no transcript and the
 * next open starts again (the store keeps the bytes of a run it recorded,
 * header included). Nothing is synced here: the close syncs the file and its
 * directory, or the caller keeps the bytes durable in the store
 * (transcript_take_pending), off the message's critical path. */
static int transcript_create(const char *path, const char *dir, const struct transcript_info *info,
                             struct transcript *t)
{
	int rc;

	t->fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
	if (t->fd < 0 && errno == ENOENT && dir && fs_mkdirs(dir, 0700) == SB_OK)
		t->fd =
		    open(path, O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
	if (t->fd < 0)
		return errno == EEXIST ? SB_ERR_EXISTS : SB_ERR_IO;
	t->created = true;
	rc = transcript_write_header(t->fd, info, t);
	if (rc == SB_OK)
		SB_CRASH_POINT("transcript.create");
	return rc;
}

int transcript_open(struct transcript **out, uv_loop_t *loop, const char *path,
                    const struct transcript_info *info)
{
	struct transcript *t = NULL;
	struct transcript_tail tail;
	struct stat st;
	char *dir = NULL;
	int rc = SB_ERR_INVAL;

	*out = NULL;
	if (!loop || !path || !info || !info->session_id)
		goto out;
	rc = SB_ERR_NOMEM;
	t = calloc(1, sizeof *t);
	if (!t)
		goto out;
	t->fd = -1;
	t->path = strdup(path);
	t->lane = lane_get(loop);
	if (!t->path || !t->lane)
		goto out;
	if (sodium_init() < 0)
		goto out;
	dir = transcript_dirname(path);
	/* Most opens are of a new conversation: one open and one write. */
	rc = transcript_create(path, dir, info, t);
	if (rc == SB_OK) {
		*out = t;
		t = NULL;
		goto out;
	}
	if (rc != SB_ERR_EXISTS)
		goto out;
	rc = SB_ERR_IO;
	t->fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
	if (t->fd < 0 || fstat(t->fd, &st) != 0)
		goto out;
	if (st.st_size > 0) {
		rc = transcript_read_tail(t->fd, st.st_size, &tail);
		if (rc != SB_OK)
			goto out;
		if (tail.no_line) {
			/* Not one whole line: the header itself was torn at
			 * creation. Nothing valid to keep; start again. */
			rc = SB_ERR_IO;
			if (ftruncate(t->fd, 0) != 0)
				goto out;
			st.st_size = 0;
			t->pending_len = 0;
			t->pending_over = false;
		} else {
			t->need_nl = tail.need_nl;
			t->torn = tail.torn;
			memcpy(t->last_id, tail.last_id, sizeof t->last_id);
		}
	}
	if (st.st_size == 0) {
		/* Left empty by a crash: whether its directory entry reached
		 * the disk is not known, so it is treated as new. */
		t->created = true;
		t->pending_len = 0;
		rc = transcript_write_header(t->fd, info, t);
		if (rc != SB_OK)
			goto out;
	} else if (!t->created) {
		t->base = (int64_t)st.st_size;
	}
	*out = t;
	t = NULL;
	rc = SB_OK;
out:
	free(dir);
	if (t)
		transcript_free(t);
	return rc;
}

/* ---- append, flush, close ---- */

/* The keys the transcript sets on every entry; fields cannot override
 * them. */
static bool transcript_reserved_key(const struct transcript *t, const char *key)
{
	return strcmp(key, "type") == 0 || strcmp(key, "id") == 0 ||
	       strcmp(key, "parent_id") == 0 || strcmp(key, "ts") == 0 ||
	       (t->torn && strcmp(key, "follows_torn") == 0);
}

/* The entry's line, written straight into b: the newline a torn tail
 * lacks, {"type","id","parent_id","ts"[,"follows_torn"], the fields in
 * their order (but the reserved keys), the stamp on an assistant message
 * that has none}, its newline. */
static int transcript_line(struct buf *b, const struct transcript *t, const char *type,
                           const char *id, const char *ts, const json_t *fields)
{
	const char *key;
	json_t *v;
	int rc;

	rc = buf_reserve(b, 1024);
	if (rc == SB_OK && t->need_nl)
		rc = buf_append(b, "\n", 1);
	if (rc == SB_OK)
		rc = buf_puts(b, "{\"type\":");
	if (rc == SB_OK)
		rc = jsonw_append_string(b, type, strlen(type));
	if (rc == SB_OK)
		rc = buf_puts(b, ",\"id\":\"");
	if (rc == SB_OK)
		rc = buf_puts(b, id);
	if (rc == SB_OK)
		rc = buf_puts(b, "\",\"parent_id\":");
	if (rc == SB_OK)
		rc = t->last_id[0] ? jsonw_append_string(b, t->last_id, strlen(t->last_id))
		                   : buf_puts(b, "null");
	if (rc == SB_OK)
		rc = buf_puts(b, ",\"ts\":\"");
	if (rc == SB_OK)
		rc = buf_puts(b, ts);
	if (rc == SB_OK)
		rc = buf_puts(b, t->torn ? "\",\"follows_torn\":true" : "\"");
	json_object_foreach((json_t *)fields, key, v)
	{
		if (rc != SB_OK)
			break;
		if (transcript_reserved_key(t, key))
			continue;
		rc = buf_append(b, ",", 1);
		if (rc == SB_OK)
			rc = jsonw_append_member(b, key, strlen(key), v, 0);
	}
	if (rc == SB_OK && t->stamp && strcmp(type, "message") == 0 &&
	    !transcript_reserved_key(t, t->stamp_key) && !json_object_get(fields, t->stamp_key)) {
		const char *role =
		    json_string_value(json_object_get(json_object_get(fields, "message"), "role"));

		if (role && strcmp(role, "assistant") == 0) {
			rc = buf_append(b, ",", 1);
			if (rc == SB_OK)
				rc = jsonw_append_member(b, t->stamp_key, strlen(t->stamp_key),
				                         t->stamp, 0);
		}
	}
	if (rc == SB_OK)
		rc = buf_append(b, "}\n", 2);
	return rc;
}

int transcript_append(struct transcript *t, const char *type, const json_t *fields, char *id_out,
                      size_t id_size)
{
	char id[40], ts[40], *line = NULL;
	struct buf lb;
	size_t len;
	int rc = SB_ERR_INVAL;

	if (!t || !type || (fields && !json_is_object(fields)) || t->closing)
		goto out;
	rc = t->err ? t->err : SB_ERR_AGAIN;
	if (t->err || t->queued_bytes > TRANSCRIPT_QUEUE_MAX)
		goto out;
	transcript_new_entry_id(id, sizeof id);
	transcript_now_rfc3339(ts, sizeof ts);
	buf_init(&lb, SIZE_MAX - 1);
	rc = transcript_line(&lb, t, type, id, ts, fields);
	if (rc != SB_OK) {
		buf_free(&lb);
		/* A field that cannot be written (not UTF-8) is the caller's
		 * error; anything else is memory. */
		rc = rc == SB_ERR_INVAL ? SB_ERR_INVAL : SB_ERR_NOMEM;
		goto out;
	}
	len = lb.len;
	line = buf_steal(&lb);
	rc = SB_ERR_NOMEM;
	if (!line)
		goto out;
	{
		size_t kept = t->pending_len;

		rc = transcript_keep(t, line, len);
		if (rc != SB_OK)
			goto out;
		rc = transcript_enqueue(t, TRANSCRIPT_LINE, line, len, NULL, NULL);
		if (rc != SB_OK) {
			if (!t->pending_over)
				t->pending_len = kept;
			goto out;
		}
	}
	line = NULL;
	t->need_nl = t->torn = false;
	memcpy(t->last_id, id, sizeof id);
	if (id_out && id_size)
		snprintf(id_out, id_size, "%s", id);
	rc = SB_OK;
out:
	free(line);
	return rc;
}

int transcript_set_stamp(struct transcript *t, const char *key, const json_t *value)
{
	char *k = NULL;
	json_t *v = NULL;

	if (!t || !key)
		return SB_ERR_INVAL;
	if (value) {
		k = strdup(key);
		v = json_deep_copy(value);
		if (!k || !v) {
			free(k);
			json_decref(v);
			return SB_ERR_NOMEM;
		}
	}
	free(t->stamp_key);
	json_decref(t->stamp);
	t->stamp_key = k;
	t->stamp = v;
	return SB_OK;
}

int transcript_flush(struct transcript *t, void (*cb)(void *ud, int rc), void *ud)
{
	if (!t || t->closing)
		return SB_ERR_INVAL;
	return transcript_enqueue(t, TRANSCRIPT_FLUSH, NULL, 0, cb, ud);
}

int transcript_take_pending(struct transcript *t, int64_t *offset, char **bytes, size_t *len)
{
	*offset = 0;
	*bytes = NULL;
	*len = 0;
	if (!t || t->closing || t->busy || t->head)
		return SB_ERR_INVAL;
	if (t->err)
		return t->err;
	if (t->pending_over)
		return SB_ERR_TOOBIG;
	*offset = t->base;
	*bytes = t->pending;
	*len = t->pending_len;
	t->base += (int64_t)t->pending_len;
	t->pending = NULL;
	t->pending_len = t->pending_cap = 0;
	t->recorded = true;
	return SB_OK;
}

void transcript_sync_on_close(struct transcript *t)
{
	if (t)
		t->recorded = false;
}

void transcript_writeback_hint(struct transcript *t, bool on)
{
	if (t)
		t->no_hint = !on;
}

void transcript_close(struct transcript *t)
{
	if (!t || t->closing)
		return;
	t->closing = true;
	if (transcript_enqueue(t, TRANSCRIPT_CLOSE, NULL, 0, NULL, NULL) != SB_OK) {
		/* No memory for the marker: wait for nothing and close here. */
		if (!t->busy)
			transcript_free(t);
		else
			log_error("transcript", "close failed (out of memory)",
			          LOG_S("path", t->path));
	}
}

/* ---- restore ---- */

int transcript_restore(const char *path, int64_t offset, const char *bytes, size_t len,
                       size_t *restored)
{
	struct stat st;
	char *dir = NULL, *have = NULL;
	size_t n = 0, from = 0;
	off_t at;
	int fd = -1, rc = SB_ERR_INVAL;

	*restored = 0;
	if (!path || !bytes || offset < 0 || !len || len > TRANSCRIPT_FILE_MAX)
		goto out;
	rc = SB_ERR_IO;
	dir = transcript_dirname(path);
	if (dir && fs_mkdirs(dir, 0700) != SB_OK)
		goto out;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
	if (fd < 0 || fstat(fd, &st) != 0)
		goto out;
	at = (off_t)offset;
	if (st.st_size < at) {
		/* Bytes before these are gone and the store does not hold
		 * them: what it holds goes at the end, on a line of its own. */
		char last = '\n';

		if (st.st_size > 0 && transcript_pread_all(fd, &last, 1, st.st_size - 1) != SB_OK)
			goto out;
		at = st.st_size;
		if (last != '\n') {
			SB_CRASH_POINT("transcript.restore");
			if (pwrite(fd, "\n", 1, at) != 1)
				goto out;
			at++;
		}
		log_warn("transcript",
		         "bytes before the stored ones are missing; appended at the end",
		         LOG_S("path", path), LOG_I("offset", offset), LOG_I("size", st.st_size));
	} else {
		n = (size_t)(st.st_size - at) < len ? (size_t)(st.st_size - at) : len;
		rc = SB_ERR_NOMEM;
		have = malloc(n ? n : 1);
		if (!have)
			goto out;
		rc = transcript_pread_all(fd, have, n, at);
		if (rc != SB_OK)
			goto out;
		rc = SB_ERR_IO;
		/* What the file holds of them is kept; a different tail (torn,
		 * or not what was committed) is written over. */
		from = memcmp(have, bytes, n) == 0 ? n : 0;
	}
	if (from < len) {
		const char *p = bytes + from;
		size_t left = len - from;
		off_t pos = at + (off_t)from;

		SB_CRASH_POINT("transcript.restore");
		while (left) {
			ssize_t w = pwrite(fd, p, left, pos);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				goto out;
			p += w;
			left -= (size_t)w;
			pos += w;
		}
		*restored = len - from;
	}
	rc = SB_OK;
out:
	if (fd >= 0 && close(fd) != 0 && rc == SB_OK)
		rc = SB_ERR_IO;
	free(have);
	free(dir);
	return rc;
}

/* ---- load ---- */

/* "2026-11-30T01:02:03.456Z" -> unix ms; 0 when it does not parse. */
static int64_t transcript_ts_ms(const char *ts)
{
	struct tm tm;
	int ms = 0;

	if (!ts)
		return 0;
	memset(&tm, 0, sizeof tm);
	if (sscanf(ts, "%4d-%2d-%2dT%2d:%2d:%2d.%3d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
	           &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) < 6)
		return 0;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t)timegm(&tm) * 1000 + ms;
}

static void transcript_add_usage(struct transcript_loaded *out, const json_t *u)
{
	out->spent_input += json_integer_value(json_object_get(u, "input_tokens"));
	out->spent_output += json_integer_value(json_object_get(u, "output_tokens"));
	out->spent_cache_read += json_integer_value(json_object_get(u, "cache_read_tokens"));
	out->spent_cache_write += json_integer_value(json_object_get(u, "cache_write_tokens"));
}

void transcript_loaded_free(struct transcript_loaded *l)
{
	if (!l)
		return;
	json_decref(l->header);
	json_decref(l->messages);
	json_decref(l->entries);
	json_decref(l->repair);
	memset(l, 0, sizeof *l);
}

struct transcript_line {
	const char *p;
	size_t len;
	bool nl;   /* ends with "\n" */
	bool skip; /* torn: ignored */
	json_t *j; /* parsed when whole; NULL when not valid JSON */
};

/* Whether a line is an object with a string "type". */
static bool transcript_is_entry(const json_t *j)
{
	return json_is_object(j) && json_is_string(json_object_get(j, "type"));
}

/* Marks the torn lines, from the end backwards (see the top of the file).
 * A line is torn when it is the last and lacks "\n" or is not an entry; when
 * the next line is an entry marked "follows_torn"; or when it is not an entry
 * and the next line is torn for one of the two first reasons (or this one).
 * Returns SB_OK, or SB_ERR_INVAL at the first other line that is not an
 * entry. Line 0, the header, is checked by the caller. */
static int transcript_mark_torn(struct transcript_line *lines, size_t n, size_t *torn)
{
	bool propagate = false; /* the next line is torn, by a reason that extends back */

	*torn = 0;
	for (size_t i = n; i-- > 1;) {
		struct transcript_line *l = &lines[i], *next = i + 1 < n ? &lines[i + 1] : NULL;
		bool entry = transcript_is_entry(l->j);

		if (!next) {
			l->skip = !l->nl || !entry;
			propagate = !l->nl;
		} else if (!next->skip && json_is_true(json_object_get(next->j, "follows_torn"))) {
			l->skip = true;
			propagate = true;
		} else if (!entry && propagate) {
			l->skip = true;
		} else if (!entry) {
			return SB_ERR_INVAL;
		} else {
			l->skip = false;
			propagate = false;
		}
		*torn += l->skip;
	}
	return SB_OK;
}

/* Whether content holds a tool_result for id. */
static bool transcript_has_result(const json_t *content, const char *id)
{
	const json_t *b;
	size_t i;

	json_array_foreach(content, i, b)
	{
		const char *type = json_string_value(json_object_get(b, "type"));
		const char *for_id = json_string_value(json_object_get(b, "tool_use_id"));

		if (type && strcmp(type, "tool_result") == 0 && for_id && strcmp(for_id, id) == 0)
			return true;
	}
	return false;
}

/* Appends to edits a splice replacing messages [from, to) with m (taken). */
static int transcript_add_splice(json_t *edits, size_t from, size_t to, json_t *m)
{
	json_t *e = m ? json_pack("{sssIsIs[o]}", "op", "splice", "from", (json_int_t)from, "to",
	                          (json_int_t)to, "insert", m)
	              : NULL;

	return e && json_array_append_new(edits, e) == 0 ? SB_OK : SB_ERR_NOMEM;
}

/* A process killed while a tool ran leaves a tool_use without its result;
 * every provider refuses such a history. The edits that pair them: each
 * missing result as an error result, in the user message after the
 * tool_use (made when there is none), results first as the turn writes
 * them. Splices, applied in order by compact_apply; *edits is NULL when
 * every tool_use has its result, *added the number of results made. */
static int transcript_repair_edits(const json_t *messages, json_t **edits, size_t *added)
{
	json_t *work = json_copy((json_t *)messages), *one;
	int rc = SB_ERR_NOMEM;

	*edits = NULL;
	*added = 0;
	if (!work)
		goto out;
	for (size_t i = 0; i < json_array_size(work); i++) {
		json_t *m = json_array_get(work, i), *next, *results = NULL, *b, *fixed, *e;
		const char *role = json_string_value(json_object_get(m, "role"));
		const char *next_role;
		size_t k;

		if (!role || strcmp(role, "assistant") != 0)
			continue;
		next = json_array_get(work, i + 1);
		next_role = json_string_value(json_object_get(next, "role"));
		if (next && (!next_role || strcmp(next_role, "user") != 0))
			next = NULL; /* another assistant message: the results go between */
		json_array_foreach(json_object_get(m, "content"), k, b)
		{
			const char *type = json_string_value(json_object_get(b, "type"));
			const char *id = json_string_value(json_object_get(b, "id"));

			if (!type || strcmp(type, "tool_use") != 0 || !id ||
			    (next && transcript_has_result(json_object_get(next, "content"), id)))
				continue;
			if (!results && !(results = json_array()))
				goto out;
			if (json_array_append_new(
			        results,
			        json_pack("{sssssssb}", "type", "tool_result", "tool_use_id", id,
			                  "content",
			                  "interrupted by a restart of the gateway: this tool "
			                  "call may or may not have taken effect; check before "
			                  "doing it again",
			                  "is_error", 1)) != 0) {
				json_decref(results);
				goto out;
			}
		}
		if (!results)
			continue;
		*added += json_array_size(results);
		if (next) {
			fixed = json_deep_copy(next);
			if (!fixed ||
			    json_array_extend(results, json_object_get(next, "content")) != 0 ||
			    json_object_set(fixed, "content", results) != 0) {
				json_decref(fixed);
				json_decref(results);
				goto out;
			}
		} else {
			fixed = json_pack("{sssO}", "role", "user", "content", results);
		}
		json_decref(results);
		if (!*edits && !(*edits = json_array())) {
			json_decref(fixed);
			goto out;
		}
		if (transcript_add_splice(*edits, i + 1, next ? i + 2 : i + 1, fixed) != SB_OK)
			goto out;
		e = json_array_get(*edits, json_array_size(*edits) - 1);
		one = json_pack("[O]", e);
		if (!one || compact_apply(work, one) != SB_OK) {
			json_decref(one);
			goto out;
		}
		json_decref(one);
	}
	rc = SB_OK;
out:
	json_decref(work);
	if (rc != SB_OK) {
		json_decref(*edits);
		*edits = NULL;
	}
	return rc;
}

int transcript_load(const char *path, struct transcript_loaded *out)
{
	struct transcript_line *lines = NULL;
	size_t n = 0, size = 0, nlines = 0, i;
	char *data = NULL;
	json_int_t version;
	int rc;

	memset(out, 0, sizeof *out);
	rc = fs_read_all(path, TRANSCRIPT_FILE_MAX, &data, &size);
	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_NOMEM;
	for (i = 0; i < size; i++)
		if (data[i] == '\n')
			nlines++;
	lines = calloc(nlines + 1, sizeof *lines);
	if (!lines)
		goto out;
	for (size_t start = 0; start < size;) {
		const char *nl = memchr(data + start, '\n', size - start);
		size_t end = nl ? (size_t)(nl - data) : size;

		lines[n].p = data + start;
		lines[n].len = end - start;
		lines[n].nl = nl != NULL;
		lines[n].j = lines[n].nl ? json_loadb(lines[n].p, lines[n].len, 0, NULL) : NULL;
		n++;
		start = end + 1;
	}
	/* Empty, or a header torn at creation (no whole line): nothing was
	 * ever recorded, the session is new (transcript_open starts it). */
	rc = SB_ERR_NOTFOUND;
	if (n == 0 || (n == 1 && !lines[0].nl))
		goto out;
	/* Line 1: the header. */
	rc = SB_ERR_INVAL;
	if (!transcript_is_entry(lines[0].j) ||
	    strcmp(json_string_value(json_object_get(lines[0].j, "type")), "session") != 0)
		goto out;
	version = json_integer_value(json_object_get(lines[0].j, "version"));
	if (!json_is_integer(json_object_get(lines[0].j, "version")) || version < 1 ||
	    version > TRANSCRIPT_VERSION)
		goto out;
	rc = SB_ERR_NOMEM;
	out->header = json_incref(lines[0].j);
	out->messages = json_array();
	out->entries = json_array();
	if (!out->messages || !out->entries)
		goto out;
	rc = transcript_mark_torn(lines, n, &out->torn);
	if (rc != SB_OK)
		goto out;
	for (i = 1; i < n; i++) {
		json_t *j = lines[i].j;
		const char *type, *id;

		if (lines[i].skip)
			continue;
		type = json_string_value(json_object_get(j, "type"));
		id = json_string_value(json_object_get(j, "id"));
		rc = SB_ERR_INVAL;
		if (!id || strcmp(type, "session") == 0)
			goto out;
		if (strcmp(type, "message") == 0) {
			json_t *m = json_object_get(j, "message");

			if (!json_is_object(m))
				goto out;
			rc = SB_ERR_NOMEM;
			if (json_array_append(out->messages, m) != 0)
				goto out;
			transcript_add_usage(out, json_object_get(j, "usage"));
		} else if (strcmp(type, "compaction") == 0) {
			/* The history from here on is the compacted one. */
			rc = compact_apply(out->messages, json_object_get(j, "edits"));
			if (rc != SB_OK)
				goto out;
			transcript_add_usage(out, json_object_get(j, "usage"));
			if (json_integer_value(json_object_get(j, "level")) == 3)
				out->compact_failures = 0;
			if (json_integer_value(json_object_get(j, "level")) >= 2)
				out->memory_flushed = false; /* a new cycle */
		} else if (strcmp(type, "event") == 0) {
			const char *ev = json_string_value(json_object_get(j, "event"));

			if (ev && strcmp(ev, "memory_flush") == 0)
				out->memory_flushed = true;
			if (ev && strcmp(ev, "compaction_failed") == 0 &&
			    json_integer_value(json_object_get(j, "level")) == 3) {
				/* The breaker counts failed summaries; a failed archive
				 * write is not one. */
				out->compact_failures++;
				out->compact_failed_ms =
				    transcript_ts_ms(json_string_value(json_object_get(j, "ts")));
			} else if (ev && strcmp(ev, "note") == 0 &&
			           json_is_object(json_object_get(j, "edit"))) {
				json_t *edits = json_pack("[O]", json_object_get(j, "edit"));

				rc = edits ? compact_apply(out->messages, edits) : SB_ERR_NOMEM;
				if (rc == SB_ERR_INVAL) {
					/* A file from before "repair" events: its
					 * resumed run's note may edit a result only
					 * the repair in memory makes. */
					json_t *fix = NULL;
					size_t fixed = 0;

					rc = transcript_repair_edits(out->messages, &fix, &fixed);
					if (rc == SB_OK && fix)
						rc = compact_apply(out->messages, fix);
					if (rc == SB_OK)
						rc = compact_apply(out->messages, edits);
					out->repaired += fixed;
					json_decref(fix);
				}
				json_decref(edits);
				if (rc != SB_OK)
					goto out;
			} else if (ev && strcmp(ev, "repair") == 0) {
				/* Results for tool calls a restart cut, written once
				 * by the run that resumed the session. */
				rc = compact_apply(out->messages, json_object_get(j, "edits"));
				if (rc != SB_OK)
					goto out;
			} else if (ev && strcmp(ev, "todo") == 0 &&
			           json_is_array(json_object_get(j, "items"))) {
				out->todo = json_object_get(j, "items"); /* entries holds it */
			} else if (ev && strcmp(ev, "cache_break") == 0)
				out->cache_breaks++;
			else if (ev && strcmp(ev, "prompt") == 0)
				out->last_prompt = j; /* entries holds it */
		}
		rc = SB_ERR_NOMEM;
		if (json_array_append(out->entries, j) != 0)
			goto out;
		snprintf(out->last_id, sizeof out->last_id, "%s", id);
	}
	/* Tool calls still without a result: a file no run resumed since the
	 * cut. Repaired here in memory; the resuming run writes the same
	 * edits (out->repair) as a "repair" event, so this happens once. */
	{
		size_t fixed = 0;

		rc = transcript_repair_edits(out->messages, &out->repair, &fixed);
		out->repaired += fixed;
		if (rc == SB_OK && out->repair)
			rc = compact_apply(out->messages, out->repair);
	}
out:
	for (i = 0; i < n; i++)
		json_decref(lines[i].j);
	free(lines);
	free(data);
	if (rc != SB_OK)
		transcript_loaded_free(out);
	return rc;
}
