/*
 * sse.c - the incremental Server-Sent Events parser (see sse.h).
 *
 * It follows the WHATWG "event stream interpretation": bytes collect into a
 * line until CR, LF or CRLF; a blank line dispatches the event; every other
 * line is a field. Nothing here assumes where the chunks were split: the only
 * state that spans chunks is the partial line, the partial event, a pending
 * CR (whose LF may start the next chunk) and a partial BOM.
 */
#include "agents/providers/sse.h"

#include <stdlib.h>
#include <string.h>

#include "gateway/core/err.h"

/* After an event this large its buffer is released rather than kept. */
#define SSE_KEEP_BYTES ((size_t)64 * 1024)

static const unsigned char sse_bom[3] = {0xEF, 0xBB, 0xBF};

void sse_init(struct sse *s, size_t max_event, sse_event_cb cb, void *ud)
{
	memset(s, 0, sizeof(*s));
	s->cb = cb;
	s->ud = ud;
	s->max_event = max_event ? max_event : SSE_MAX_EVENT_DEFAULT;
	buf_init(&s->line, s->max_event);
	buf_init(&s->data, s->max_event);
	buf_init(&s->name, s->max_event);
	buf_init(&s->id, s->max_event);
}

void sse_free(struct sse *s)
{
	buf_free(&s->line);
	buf_free(&s->data);
	buf_free(&s->name);
	buf_free(&s->id);
}

const char *sse_last_id(const struct sse *s)
{
	return s->id.len ? s->id.data : "";
}

static void sse_shrink(struct buf *b)
{
	size_t max = b->max;

	if (b->cap > SSE_KEEP_BYTES) {
		buf_free(b);
		buf_init(b, max);
	} else {
		buf_reset(b);
	}
}

static int sse_dispatch(struct sse *s)
{
	int rc = SB_OK;

	/* No data line since the last event: nothing to dispatch. */
	if (s->data.len > 0) {
		/* Every data line was stored with a "\n" after it; the last
		 * one goes. */
		s->data.len--;
		s->data.data[s->data.len] = '\0';
		rc = s->cb(s->ud, s->name.len ? s->name.data : "message",
		           s->data.len ? s->data.data : "", s->data.len);
	}
	sse_shrink(&s->data);
	buf_reset(&s->name);
	return rc;
}

static int sse_field(struct sse *s, const char *line, size_t len)
{
	const char *colon = memchr(line, ':', len);
	const char *value = "";
	size_t flen = len, vlen = 0;
	int rc;

	if (colon) {
		flen = (size_t)(colon - line);
		value = colon + 1;
		vlen = len - flen - 1;
		if (vlen > 0 && *value == ' ') {
			value++;
			vlen--;
		}
	}
	if (flen == 4 && memcmp(line, "data", 4) == 0) {
		/* The bound is on the data of one event, not on one line. */
		if (vlen + 1 > s->max_event - s->data.len)
			return SB_ERR_TOOBIG;
		rc = buf_append(&s->data, value, vlen);
		if (rc == SB_OK)
			rc = buf_append(&s->data, "\n", 1);
		return rc;
	}
	if (flen == 5 && memcmp(line, "event", 5) == 0) {
		buf_reset(&s->name);
		return buf_append(&s->name, value, vlen);
	}
	if (flen == 2 && memcmp(line, "id", 2) == 0) {
		/* An id holding NUL is ignored, as the format requires. */
		if (memchr(value, '\0', vlen))
			return SB_OK;
		buf_reset(&s->id);
		return buf_append(&s->id, value, vlen);
	}
	/* "retry" (we never reconnect) and unknown fields. */
	return SB_OK;
}

static int sse_line(struct sse *s)
{
	int rc = SB_OK;

	if (s->in_comment)
		s->in_comment = false;
	else if (s->line.len == 0)
		rc = sse_dispatch(s);
	else
		rc = sse_field(s, s->line.data, s->line.len);
	sse_shrink(&s->line);
	return rc;
}

/* Adds bytes to the line being read; comment lines are not kept. */
static int sse_line_append(struct sse *s, const char *p, size_t n)
{
	if (n == 0 || s->in_comment)
		return SB_OK;
	if (s->line.len == 0 && p[0] == ':') {
		s->in_comment = true;
		return SB_OK;
	}
	return buf_append(&s->line, p, n);
}

/* Consumes the bytes of a leading BOM; returns how many of p it used. */
static size_t sse_skip_bom(struct sse *s, const char *p, size_t n, int *rc)
{
	size_t i = 0;

	while (i < n && s->bom < 3 && (unsigned char)p[i] == sse_bom[s->bom]) {
		s->bom++;
		i++;
	}
	if (s->bom == 3) {
		s->started = true;
	} else if (i < n) {
		/* Not a BOM after all: what matched so far is line content. */
		s->started = true;
		*rc = sse_line_append(s, (const char *)sse_bom, (size_t)s->bom);
	}
	return i;
}

int sse_feed(struct sse *s, const char *p, size_t n)
{
	size_t i = 0, j;
	int rc = s->rc;

	if (rc)
		return rc;
	if (!s->started) {
		i = sse_skip_bom(s, p, n, &rc);
		if (rc)
			goto out;
	}
	while (i < n) {
		if (s->after_cr) {
			s->after_cr = false;
			if (p[i] == '\n') {
				i++;
				continue;
			}
		}
		for (j = i; j < n && p[j] != '\n' && p[j] != '\r'; j++)
			;
		rc = sse_line_append(s, p + i, j - i);
		if (rc || j == n)
			goto out;
		s->after_cr = p[j] == '\r';
		i = j + 1;
		rc = sse_line(s);
		if (rc)
			goto out;
	}
out:
	s->rc = rc;
	return rc;
}

int sse_finish(struct sse *s)
{
	if (s->rc)
		return s->rc;
	if (s->line.len > 0 || s->data.len > 0 || s->in_comment || (!s->started && s->bom > 0))
		return SB_ERR_PROTO;
	return SB_OK;
}
