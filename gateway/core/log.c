#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "err.h"

#define LOG_LINE_MAX 16384
#define LOG_FIELDS_MAX 32
#define LOG_SECRET_MIN 4
#define LOG_REDACTED "[REDACTED]"

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static enum log_level log_min = LOG_INFO;
static enum log_format log_fmt = LOG_FORMAT_LOGFMT;
static FILE *log_sink;
static char **log_secrets;
static size_t log_nsecrets;

/* The log file (log_file_open): every line is also appended to it. */
static int log_fd = -1;
static char log_path[PATH_MAX];
static int64_t log_file_size; /* bytes in the file as this process sees it */
static int64_t log_file_max;
static int log_file_keep;

static const char *const log_level_names[] = {"debug", "info", "warn", "error"};

/* The last LOG_RING_LINES lines written, each cut at LOG_RING_LINE - 1
 * bytes (log_ring_read). */
static char log_ring[LOG_RING_LINES][LOG_RING_LINE];
static uint64_t log_ring_seq; /* lines written so far; line k is slot (k - 1) % N */

/* Caller holds log_mu. line has no newline. */
static void log_ring_put(const char *line, size_t len)
{
	char *slot = log_ring[log_ring_seq % LOG_RING_LINES];

	if (len >= LOG_RING_LINE) {
		/* cut on a character boundary */
		len = LOG_RING_LINE - 1;
		while (len && ((unsigned char)line[len] & 0xC0) == 0x80)
			len--;
	}
	memcpy(slot, line, len);
	slot[len] = '\0';
	log_ring_seq++;
}

uint64_t log_ring_read(uint64_t after, size_t max, log_ring_cb cb, void *ud)
{
	uint64_t first, last;

	pthread_mutex_lock(&log_mu);
	last = log_ring_seq;
	first = last > LOG_RING_LINES ? last - LOG_RING_LINES + 1 : 1;
	if (after + 1 > first)
		first = after + 1;
	if (max && last >= first && last - first + 1 > max)
		first = last - max + 1;
	for (uint64_t k = first; k <= last && k > 0; k++)
		cb(ud, k, log_ring[(k - 1) % LOG_RING_LINES]);
	pthread_mutex_unlock(&log_mu);
	return last;
}

void log_configure(enum log_level min, enum log_format fmt, FILE *sink)
{
	pthread_mutex_lock(&log_mu);
	log_min = min;
	log_fmt = fmt;
	log_sink = sink;
	pthread_mutex_unlock(&log_mu);
}

static int log_file_reopen_locked(void)
{
	struct stat st;
	int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

	if (fd < 0)
		return errno == ENOENT ? SB_ERR_NOTFOUND : SB_ERR_IO;
	if (fstat(fd, &st) != 0) {
		close(fd);
		return SB_ERR_IO;
	}
	log_fd = fd;
	log_file_size = (int64_t)st.st_size;
	return SB_OK;
}

int log_file_open(const char *path, int64_t max, int keep)
{
	int rc = SB_OK;

	if (max <= 0 || !path) {
		log_file_close();
		return SB_OK;
	}
	if (strlen(path) + 8 >= sizeof log_path)
		return SB_ERR_TOOBIG;
	pthread_mutex_lock(&log_mu);
	if (log_fd < 0 || strcmp(path, log_path) != 0) {
		if (log_fd >= 0)
			close(log_fd);
		log_fd = -1;
		snprintf(log_path, sizeof log_path, "%s", path);
		rc = log_file_reopen_locked();
	}
	log_file_max = max;
	log_file_keep = keep < 0 ? 0 : keep;
	pthread_mutex_unlock(&log_mu);
	return rc;
}

void log_file_close(void)
{
	pthread_mutex_lock(&log_mu);
	if (log_fd >= 0)
		close(log_fd);
	log_fd = -1;
	log_path[0] = '\0';
	pthread_mutex_unlock(&log_mu);
}

/* path.N for N > 0, path for 0. */
static void log_file_name(char *out, size_t size, int n)
{
	if (n == 0)
		snprintf(out, size, "%s", log_path);
	else
		snprintf(out, size, "%s.%d", log_path, n);
}

/* Caller holds log_mu. Shifts path.(k-1) to path.k, the oldest (path.keep)
 * dropped, path to path.1 (or removes it when keep is 0), and opens a new
 * path. A line is written whole to one file: this runs between lines. */
static void log_file_rotate_locked(void)
{
	char from[PATH_MAX + 16], to[PATH_MAX + 16];

	close(log_fd);
	log_fd = -1;
	if (log_file_keep == 0) {
		unlink(log_path);
	} else {
		log_file_name(to, sizeof to, log_file_keep);
		unlink(to);
		for (int k = log_file_keep; k > 0; k--) {
			log_file_name(from, sizeof from, k - 1);
			log_file_name(to, sizeof to, k);
			if (rename(from, to) != 0 && errno != ENOENT)
				break;
		}
	}
	/* If it cannot be opened again, lines go on to the sink alone. */
	(void)log_file_reopen_locked();
}

/* Caller holds log_mu. line ends with its newline. */
static void log_file_put_locked(const char *line, size_t len)
{
	ssize_t w;

	if (log_fd < 0)
		return;
	if (log_file_size > 0 && log_file_size + (int64_t)len > log_file_max)
		log_file_rotate_locked();
	if (log_fd < 0)
		return;
	/* One write per line (O_APPEND): a reader never sees half of one
	 * unless the disk is full, and then the rest is lost, not mixed. */
	w = write(log_fd, line, len);
	if (w > 0)
		log_file_size += w;
}

static void log_secrets_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

int log_set_secrets(const char *const *secrets, size_t n)
{
	char **v = NULL;
	size_t k = 0;

	if (n) {
		v = calloc(n, sizeof *v);
		if (!v)
			return SB_ERR_NOMEM;
		for (size_t i = 0; i < n; i++) {
			if (!secrets[i] || strlen(secrets[i]) < LOG_SECRET_MIN)
				continue;
			v[k] = strdup(secrets[i]);
			if (!v[k]) {
				log_secrets_free(v, k);
				return SB_ERR_NOMEM;
			}
			k++;
		}
	}
	pthread_mutex_lock(&log_mu);
	log_secrets_free(log_secrets, log_nsecrets);
	log_secrets = v;
	log_nsecrets = k;
	pthread_mutex_unlock(&log_mu);
	return SB_OK;
}

int log_level_parse(const char *s, enum log_level *out)
{
	for (size_t i = 0; i < sizeof log_level_names / sizeof *log_level_names; i++)
		if (strcmp(s, log_level_names[i]) == 0) {
			*out = (enum log_level)i;
			return SB_OK;
		}
	return SB_ERR_INVAL;
}

int log_format_parse(const char *s, enum log_format *out)
{
	if (strcmp(s, "logfmt") == 0)
		*out = LOG_FORMAT_LOGFMT;
	else if (strcmp(s, "json") == 0)
		*out = LOG_FORMAT_JSON;
	else
		return SB_ERR_INVAL;
	return SB_OK;
}

/* Copies s into b with every secret replaced. Caller holds log_mu. */
static void log_redacted(struct buf *b, const char *s)
{
	while (*s) {
		size_t best = 0;

		for (size_t i = 0; i < log_nsecrets; i++) {
			size_t n = strlen(log_secrets[i]);

			if (n > best && strncmp(s, log_secrets[i], n) == 0)
				best = n;
		}
		if (best) {
			buf_puts(b, LOG_REDACTED);
			s += best;
		} else {
			buf_append(b, s, 1);
			s++;
		}
	}
}

static int log_needs_quotes(const char *s)
{
	if (!*s)
		return 1;
	for (; *s; s++)
		if (*s <= ' ' || *s == '"' || *s == '=' || *s == '\\' || *s == 0x7f)
			return 1;
	return 0;
}

/* Escapes s for a logfmt quoted value or a JSON string (same rules). */
static void log_escaped(struct buf *out, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		switch (c) {
		case '"':
			buf_puts(out, "\\\"");
			break;
		case '\\':
			buf_puts(out, "\\\\");
			break;
		case '\n':
			buf_puts(out, "\\n");
			break;
		case '\r':
			buf_puts(out, "\\r");
			break;
		case '\t':
			buf_puts(out, "\\t");
			break;
		default:
			if (c < 0x20 || c == 0x7f)
				buf_printf(out, "\\u%04x", c);
			else
				buf_append(out, s, 1);
		}
	}
}

static void log_put_str(struct buf *out, enum log_format fmt, const char *raw)
{
	struct buf red;

	buf_init(&red, LOG_LINE_MAX);
	log_redacted(&red, raw ? raw : "");
	if (fmt == LOG_FORMAT_JSON || log_needs_quotes(red.data ? red.data : "")) {
		buf_puts(out, "\"");
		log_escaped(out, red.data ? red.data : "");
		buf_puts(out, "\"");
	} else {
		buf_puts(out, red.data);
	}
	buf_free(&red);
}

static void log_put_key(struct buf *out, enum log_format fmt, const char *key)
{
	if (fmt == LOG_FORMAT_JSON)
		buf_printf(out, ",\"%s\":", key);
	else
		buf_printf(out, " %s=", key);
}

static void log_timestamp(char *ts, size_t size)
{
	struct timeval tv;
	struct tm tm;
	char base[32];

	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(ts, size, "%s.%03dZ", base, (int)(tv.tv_usec / 1000));
}

/* Caller holds log_mu. */
static void log_format_locked(struct buf *out, enum log_format fmt, enum log_level lvl,
                              const char *module, const char *msg, const struct log_field *f,
                              size_t n)
{
	char ts[48];

	log_timestamp(ts, sizeof ts);
	if (fmt == LOG_FORMAT_JSON)
		buf_printf(out, "{\"ts\":\"%s\",\"level\":\"%s\"", ts, log_level_names[lvl]);
	else
		buf_printf(out, "ts=%s level=%s", ts, log_level_names[lvl]);
	log_put_key(out, fmt, "module");
	log_put_str(out, fmt, module);
	log_put_key(out, fmt, "msg");
	log_put_str(out, fmt, msg);
	for (size_t i = 0; i < n; i++) {
		log_put_key(out, fmt, f[i].key);
		switch (f[i].type) {
		case LOG_FIELD_STR:
			log_put_str(out, fmt, f[i].s);
			break;
		case LOG_FIELD_INT:
			buf_printf(out, "%lld", (long long)f[i].i);
			break;
		case LOG_FIELD_DBL:
			buf_printf(out, "%.6g", f[i].d);
			break;
		case LOG_FIELD_END:
			break;
		}
	}
	if (fmt == LOG_FORMAT_JSON)
		buf_puts(out, "}");
}

void log_format_event(char *out, size_t size, enum log_level lvl, const char *module,
                      const char *msg, const struct log_field *fields, size_t n)
{
	struct buf b;

	buf_init(&b, LOG_LINE_MAX);
	pthread_mutex_lock(&log_mu);
	log_format_locked(&b, log_fmt, lvl, module, msg, fields, n);
	pthread_mutex_unlock(&log_mu);
	snprintf(out, size, "%s", b.data ? b.data : "");
	buf_free(&b);
}

void log_emit(enum log_level lvl, const char *module, const char *msg, ...)
{
	struct log_field fields[LOG_FIELDS_MAX];
	size_t n = 0;
	va_list ap;

	if (lvl < log_min)
		return;
	va_start(ap, msg);
	n = log_collect(ap, fields, LOG_FIELDS_MAX);
	va_end(ap);
	log_emit_fields(lvl, module, msg, fields, n);
}

size_t log_collect(va_list ap, struct log_field *fields, size_t max)
{
	size_t n = 0;

	for (;;) {
		struct log_field f = va_arg(ap, struct log_field);

		if (f.type == LOG_FIELD_END || !f.key)
			break;
		if (n < max)
			fields[n++] = f;
	}
	return n;
}

void log_emit_fields(enum log_level lvl, const char *module, const char *msg,
                     const struct log_field *fields, size_t n)
{
	struct buf b;
	FILE *sink;

	if (lvl < log_min)
		return;
	buf_init(&b, LOG_LINE_MAX);
	pthread_mutex_lock(&log_mu);
	log_format_locked(&b, log_fmt, lvl, module, msg, fields, n);
	/* A line cut at LOG_LINE_MAX still ends with a newline. */
	if (b.len >= LOG_LINE_MAX - 1)
		b.len = LOG_LINE_MAX - 2;
	if (b.data) {
		log_ring_put(b.data, b.len);
		b.data[b.len++] = '\n';
		sink = log_sink ? log_sink : stderr;
		fwrite(b.data, 1, b.len, sink);
		fflush(sink);
		log_file_put_locked(b.data, b.len);
	}
	pthread_mutex_unlock(&log_mu);
	buf_free(&b);
}
