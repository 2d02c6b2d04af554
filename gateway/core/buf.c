#include "buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

void buf_init(struct buf *b, size_t max)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->max = max;
}

int buf_reserve(struct buf *b, size_t extra)
{
	size_t need, cap;
	char *p;

	if (extra > b->max || b->len > b->max - extra)
		return SB_ERR_TOOBIG;
	need = b->len + extra + 1;
	if (need <= b->cap)
		return SB_OK;
	cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	if (cap > b->max + 1)
		cap = b->max + 1;
	p = realloc(b->data, cap);
	if (!p)
		return SB_ERR_NOMEM;
	b->data = p;
	b->cap = cap;
	return SB_OK;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
	int rc = buf_reserve(b, n);

	if (rc)
		return rc;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return SB_OK;
}

int buf_puts(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

/* Formats straight into the free space: one pass when the text fits (most
 * do, with the room kept ahead), a second with the room it needs when it
 * does not. glibc's vsnprintf(NULL, 0) to measure first costs as much as
 * the formatting, through its overflow path every 64 bytes. On an error
 * the text is as it was. */
int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
	va_list cp;
	size_t room;
	int n, rc;

	if (buf_reserve(b, 256) != SB_OK && (rc = buf_reserve(b, 0)) != SB_OK)
		return rc;
	room = b->cap - b->len;
	va_copy(cp, ap);
	n = vsnprintf(b->data + b->len, room, fmt, cp);
	va_end(cp);
	if (n >= 0 && (size_t)n < room) {
		b->len += (size_t)n;
		return SB_OK;
	}
	b->data[b->len] = '\0';
	if (n < 0)
		return SB_ERR_INVAL;
	if ((rc = buf_reserve(b, (size_t)n)) != SB_OK)
		return rc;
	if (vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap) != n) {
		b->data[b->len] = '\0';
		return SB_ERR_INVAL;
	}
	b->len += (size_t)n;
	return SB_OK;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = buf_vprintf(b, fmt, ap);
	va_end(ap);
	return rc;
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

char *buf_steal(struct buf *b)
{
	char *p = b->data;

	if (!p)
		p = calloc(1, 1);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	return p;
}

void buf_free(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}
