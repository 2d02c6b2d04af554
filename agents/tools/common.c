/*
 * common.c - what the built-in tools share (see common.h).
 */
#include "agents/tools/common.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/core/buf.h"
#include "gateway/core/err.h"

#define TOOL_LINES_CHUNK 65536

/* ---- thread-pool jobs ---- */

struct tool_job {
	struct tool_run run; /* first: the executor holds &job->run */
	uv_work_t req;
	tool_job_fn fn;
	void *arg;
	void (*arg_free)(void *);
	tool_done_cb done;
	void *ud;
	struct tool_job_result res;
	bool finished; /* done has run */
};

static void tool_job_work(uv_work_t *req)
{
	struct tool_job *job = req->data;

	if (job->fn)
		job->fn(job->arg, &job->res);
}

static void tool_job_free(struct tool_job *job)
{
	if (job->arg_free)
		job->arg_free(job->arg);
	free(job->res.content);
	free(job);
}

static void tool_job_after(uv_work_t *req, int status)
{
	struct tool_job *job = req->data;
	char *content;

	if (!job->finished) {
		job->finished = true;
		content = job->res.content;
		job->res.content = NULL;
		if (status == UV_ECANCELED)
			job->done(job->ud, SB_ERR_ABORTED, content, true);
		else
			job->done(job->ud, job->res.rc, content, job->res.is_error);
	}
	tool_job_free(job);
}

static void tool_job_cancel(struct tool_run *run)
{
	struct tool_job *job = (struct tool_job *)run;

	if (job->finished)
		return;
	job->finished = true;
	/* A job not yet picked up by a pool thread is dropped; one that runs
	 * finishes on its own and tool_job_after throws its result away. */
	uv_cancel((uv_req_t *)&job->req);
	job->done(job->ud, SB_ERR_ABORTED, strdup("cancelled"), true);
}

static int tool_job_queue(uv_loop_t *loop, struct tool_job *job, struct tool_run **run)
{
	int rc;

	job->run.cancel = tool_job_cancel;
	job->req.data = job;
	rc = uv_queue_work(loop, &job->req, tool_job_work, tool_job_after);
	if (rc) {
		tool_job_free(job);
		return SB_ERR_INVAL;
	}
	if (run)
		*run = &job->run;
	return SB_OK;
}

int tool_job_start(uv_loop_t *loop, tool_job_fn fn, void *arg, void (*arg_free)(void *),
                   tool_done_cb done, void *ud, struct tool_run **run)
{
	struct tool_job *job = calloc(1, sizeof *job);

	if (!job) {
		if (arg_free)
			arg_free(arg);
		return SB_ERR_NOMEM;
	}
	job->fn = fn;
	job->arg = arg;
	job->arg_free = arg_free;
	job->done = done;
	job->ud = ud;
	job->res.rc = SB_ERR_NOMEM;
	job->res.is_error = true;
	return tool_job_queue(loop, job, run);
}

int tool_job_error(uv_loop_t *loop, const char *msg, tool_done_cb done, void *ud,
                   struct tool_run **run)
{
	struct tool_job *job = calloc(1, sizeof *job);

	if (!job)
		return SB_ERR_NOMEM;
	job->done = done;
	job->ud = ud;
	tool_result_text(&job->res, msg);
	job->res.is_error = true;
	return tool_job_queue(loop, job, run);
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

/* Opens a regular file for reading. O_NONBLOCK: a FIFO swapped in after the
 * caller's stat must not hang a pool thread (it is refused below). */
static int tool_open_regular(const char *abs)
{
	struct stat st;
	int fd = open(abs, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		errno = EINVAL;
		return -1;
	}
	return fd;
}

int tool_lines_open(struct tool_lines *lr, const char *abs)
{
	int fd;

	memset(lr, 0, sizeof *lr);
	fd = tool_open_regular(abs);
	if (fd < 0)
		return errno == ENOENT ? SB_ERR_NOTFOUND : SB_ERR_IO;
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

bool tool_file_is_binary(const char *abs)
{
	char probe[TOOL_BINARY_PROBE];
	int fd = tool_open_regular(abs);
	ssize_t n;
	size_t got = 0;

	if (fd < 0)
		return false;
	while (got < sizeof probe) {
		n = read(fd, probe + got, sizeof probe - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
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

int tool_write_atomic(const char *abs, const char *data, size_t len, char *why, size_t why_size)
{
	int rc = SB_ERR_IO;
	int fd = -1, dfd;
	const char *slash = strrchr(abs, '/');
	struct buf tmp;
	struct stat st;
	mode_t mode = 0644;
	bool created = false;
	size_t done = 0;
	ssize_t n;

	buf_init(&tmp, PATH_MAX * 4);
	if (!slash) {
		errno = EINVAL;
		tool_why(why, why_size, "cannot write", abs);
		goto out;
	}
	if (buf_append(&tmp, abs, (size_t)(slash - abs) + 1) != SB_OK ||
	    buf_printf(&tmp, ".%s.sb-tmp-XXXXXX", slash + 1) != SB_OK) {
		errno = ENAMETOOLONG;
		tool_why(why, why_size, "cannot write", abs);
		goto out;
	}
	if (stat(abs, &st) == 0)
		mode = st.st_mode & 07777;
	fd = mkostemp(tmp.data, O_CLOEXEC);
	if (fd < 0) {
		tool_why(why, why_size, "cannot create a temporary file for", abs);
		goto out;
	}
	created = true;
	if (fchmod(fd, mode) != 0) {
		tool_why(why, why_size, "cannot set the mode of", abs);
		goto out;
	}
	while (done < len) {
		n = write(fd, data + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			tool_why(why, why_size, "cannot write", abs);
			goto out;
		}
		done += (size_t)n;
	}
	if (fsync(fd) != 0) {
		tool_why(why, why_size, "cannot write", abs);
		goto out;
	}
	if (close(fd) != 0) {
		fd = -1;
		tool_why(why, why_size, "cannot write", abs);
		goto out;
	}
	fd = -1;
	if (rename(tmp.data, abs) != 0) {
		tool_why(why, why_size, "cannot replace", abs);
		goto out;
	}
	created = false;
	/* The rename itself is durable once the directory is synced. */
	tmp.data[slash - abs + 1] = '\0';
	dfd = open(tmp.data, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		(void)fsync(dfd);
		close(dfd);
	}
	rc = SB_OK;
out:
	if (fd >= 0)
		close(fd);
	if (created)
		unlink(tmp.data);
	buf_free(&tmp);
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
	int rc = SB_ERR_IO;
	DIR *d = NULL;
	struct dirent *de;
	struct tool_dirent *ents = NULL, *grown;
	size_t cnt = 0, cap = 0, skipped = 0;
	struct stat st;

	*out = NULL;
	*n = 0;
	*more = 0;
	d = opendir(abs);
	if (!d)
		goto out;
	for (;;) {
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
	rc = SB_OK;
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

/* ---- glob ---- */

/* Copies the segment at p (up to '/' or the end) into out; false if it does
 * not fit. *next: after the '/', or NULL at the last segment. */
static bool tool_glob_seg(const char *p, char *out, size_t size, const char **next)
{
	const char *e = strchr(p, '/');
	size_t n = e ? (size_t)(e - p) : strlen(p);

	if (n >= size)
		return false;
	memcpy(out, p, n);
	out[n] = '\0';
	*next = e ? e + 1 : NULL;
	return true;
}

static bool tool_glob_rec(const char *pat, const char *path, int depth)
{
	char ps[NAME_MAX + 1], ss[NAME_MAX + 1];
	const char *pnext, *snext, *p;

	if (depth > 64)
		return false;
	if (!tool_glob_seg(pat, ps, sizeof ps, &pnext))
		return false;
	if (strcmp(ps, "**") == 0) {
		if (!pnext)
			return true;
		if (tool_glob_rec(pnext, path, depth + 1))
			return true;
		for (p = strchr(path, '/'); p; p = strchr(p + 1, '/'))
			if (tool_glob_rec(pnext, p + 1, depth + 1))
				return true;
		return false;
	}
	if (!tool_glob_seg(path, ss, sizeof ss, &snext))
		return false;
	if (fnmatch(ps, ss, 0) != 0)
		return false;
	if (!pnext || !snext)
		return !pnext && !snext;
	return tool_glob_rec(pnext, snext, depth + 1);
}

bool tool_glob_match(const char *pattern, const char *path)
{
	return tool_glob_rec(pattern, path, 0);
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
