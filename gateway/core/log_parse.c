/*
 * log_parse.c - one written log line back into its fields (log.h,
 * log_line_json), for `switchboard logs --json`.
 */
#include "log.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "err.h"

#define LOG_PARSE_MAX ((size_t)1 << 20)

/* The length of the valid UTF-8 sequence at s (n bytes left), 0 when the
 * bytes there are not one. */
static size_t log_utf8_seq(const unsigned char *s, size_t n)
{
	size_t len;
	unsigned cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

/* Appends s[0..n) to out with every byte that is not valid UTF-8 (and
 * every NUL) replaced by U+FFFD, so that the result is a JSON string. */
static int log_put_utf8(struct buf *out, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	int rc = SB_OK;

	for (size_t i = 0; i < n && rc == SB_OK;) {
		size_t len = p[i] ? log_utf8_seq(p + i, n - i) : 0;

		if (len) {
			rc = buf_append(out, p + i, len);
			i += len;
		} else {
			rc = buf_puts(out, "\xef\xbf\xbd");
			i++;
		}
	}
	return rc;
}

static json_t *log_string(const char *s, size_t n)
{
	struct buf b;
	json_t *j;

	buf_init(&b, LOG_PARSE_MAX * 3 + 16);
	if (log_put_utf8(&b, s, n) != SB_OK) {
		buf_free(&b);
		return NULL;
	}
	j = json_stringn(b.data ? b.data : "", b.len);
	buf_free(&b);
	return j;
}

static int log_hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A bare value the writer prints for an integer or a double field (an
 * optional sign, digits, and for a double a fraction or an exponent, or
 * inf/nan) as a JSON number; NULL for anything else. */
static json_t *log_number(const char *s, size_t n)
{
	char tmp[64], *end;
	size_t i = 0;
	bool digits = false, real = false;

	if (n == 0 || n >= sizeof tmp)
		return NULL;
	if (s[i] == '-')
		i++;
	for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
		digits = true;
	if (!digits)
		return NULL;
	if (i < n && s[i] == '.') {
		real = true;
		for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++)
			;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		real = true;
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		if (i >= n || s[i] < '0' || s[i] > '9')
			return NULL;
		for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
			;
	}
	if (i != n)
		return NULL;
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	errno = 0;
	if (!real) {
		long long v = strtoll(tmp, &end, 10);

		/* Too large for an integer: kept as the text it is. */
		return errno || *end ? NULL : json_integer((json_int_t)v);
	}
	{
		double d = strtod(tmp, &end);

		return errno || *end ? NULL : json_real(d);
	}
}

/* Parses a logfmt line into o. Returns SB_OK, SB_ERR_INVAL when the line is
 * not logfmt (a key without a name, bytes after a quoted value), or
 * SB_ERR_TOOBIG when the line ends inside a quoted value (a line cut at the
 * writer's limit): what came before it is in o. */
static int log_parse_logfmt(const char *s, size_t n, json_t *o)
{
	size_t i = 0;
	int rc = SB_OK;

	while (i < n && rc == SB_OK) {
		size_t k0, k1;
		json_t *v = NULL;
		char key[256];

		while (i < n && s[i] == ' ')
			i++;
		if (i == n)
			break;
		k0 = i;
		while (i < n && s[i] != '=' && s[i] != ' ' && s[i] != '"')
			i++;
		k1 = i;
		if (k1 == k0 || k1 - k0 >= sizeof key || (i < n && s[i] == '"'))
			return SB_ERR_INVAL;
		memcpy(key, s + k0, k1 - k0);
		key[k1 - k0] = '\0';
		if (i == n || s[i] == ' ') {
			v = json_true(); /* a bare key: a flag */
		} else if (++i < n && s[i] == '"') {
			struct buf b;
			bool closed = false;

			buf_init(&b, LOG_PARSE_MAX);
			for (i++; i < n && rc == SB_OK; i++) {
				char c = s[i];

				if (c == '"') {
					closed = true;
					i++;
					break;
				}
				if (c != '\\' || i + 1 >= n) {
					rc = buf_append(&b, &c, 1);
					continue;
				}
				c = s[++i];
				switch (c) {
				case 'n':
					rc = buf_puts(&b, "\n");
					break;
				case 'r':
					rc = buf_puts(&b, "\r");
					break;
				case 't':
					rc = buf_puts(&b, "\t");
					break;
				case 'u': {
					int h[4];
					unsigned cp = 0;
					bool ok = i + 4 < n;

					for (int d = 0; ok && d < 4; d++)
						ok = (h[d] = log_hex(s[i + 1 + (size_t)d])) >= 0;
					if (!ok) {
						rc = buf_puts(&b, "\\u");
						break;
					}
					for (int d = 0; d < 4; d++)
						cp = cp << 4 | (unsigned)h[d];
					i += 4;
					/* The writer escapes only control bytes. */
					if (cp < 0x80) {
						char ch = (char)cp;

						rc = buf_append(&b, &ch, 1);
					} else {
						rc = buf_puts(&b, "\xef\xbf\xbd");
					}
					break;
				}
				default:
					rc = buf_append(&b, &c, 1);
				}
			}
			if (rc == SB_OK && closed && i < n && s[i] != ' ')
				rc = SB_ERR_INVAL;
			if (rc == SB_OK || rc == SB_ERR_INVAL)
				v = log_string(b.data ? b.data : "", b.len);
			buf_free(&b);
			if (rc == SB_OK && !closed)
				rc = SB_ERR_TOOBIG;
		} else {
			size_t v0 = i;

			while (i < n && s[i] != ' ')
				i++;
			v = log_number(s + v0, i - v0);
			if (!v)
				v = log_string(s + v0, i - v0);
		}
		if (!v)
			return SB_ERR_NOMEM;
		if (rc == SB_ERR_INVAL) {
			json_decref(v);
			return rc;
		}
		/* A key written twice keeps its first value (the writer's own
		 * ts, level, module and msg come first). */
		if (json_object_get(o, key))
			json_decref(v);
		else if (json_object_set_new(o, key, v) != 0)
			return SB_ERR_NOMEM;
	}
	return rc;
}

json_t *log_line_json(const char *line, size_t len)
{
	json_t *o;
	int rc;

	if (len > LOG_PARSE_MAX)
		len = LOG_PARSE_MAX;
	while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
		len--;
	if (len && line[0] == '{') {
		/* log.format: json writes the object itself. */
		json_error_t err;

		o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &err);
		if (json_is_object(o))
			return o;
		json_decref(o);
	}
	o = json_object();
	if (!o)
		return NULL;
	rc = log_parse_logfmt(line, len, o);
	if (rc == SB_OK && json_object_get(o, "ts") && json_object_get(o, "msg"))
		return o;
	if (rc == SB_ERR_TOOBIG) {
		if (json_object_set_new(o, "truncated", json_true()) != 0) {
			json_decref(o);
			return NULL;
		}
		return o;
	}
	if (rc == SB_ERR_NOMEM) {
		json_decref(o);
		return NULL;
	}
	/* Not one of the gateway's lines (or not logfmt): the text as it is. */
	json_object_clear(o);
	if (json_object_set_new(o, "raw", log_string(line, len)) != 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}
