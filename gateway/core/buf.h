/*
 * buf.h - a growable byte buffer with a hard maximum.
 *
 * The data is always NUL-terminated (the terminator is not counted in len), so
 * a buffer of text can be handed to string functions directly. Every append
 * that would pass max fails with SB_ERR_TOOBIG and leaves the buffer as it was.
 * Not thread-safe; a buffer belongs to one owner.
 */
#ifndef SB_CORE_BUF_H
#define SB_CORE_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct buf {
	char *data; /* NULL until the first append */
	size_t len;
	size_t cap;
	size_t max; /* bytes, excluding the terminator */
};

/* Prepares an empty buffer that may grow up to max bytes. */
void buf_init(struct buf *b, size_t max);

/* Makes room for extra more bytes and the terminator, for a caller that
 * writes into data + len itself (and then adds to len and terminates).
 * Returns SB_OK, SB_ERR_TOOBIG or SB_ERR_NOMEM. */
int buf_reserve(struct buf *b, size_t extra);

/* Appends n bytes. Returns SB_OK, SB_ERR_TOOBIG or SB_ERR_NOMEM. */
int buf_append(struct buf *b, const void *p, size_t n);

/* Appends a NUL-terminated string. */
int buf_puts(struct buf *b, const char *s);

/* Appends formatted text (vsnprintf rules). Same return codes as buf_append. */
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vprintf(struct buf *b, const char *fmt, va_list ap);

/* Empties the buffer, keeping its memory. */
void buf_reset(struct buf *b);

/* Hands the data to the caller (free() it) and empties the buffer. Never
 * returns NULL unless allocation fails: an empty buffer gives "". */
char *buf_steal(struct buf *b);

/* Releases the memory. Safe on a zeroed or already freed buffer. */
void buf_free(struct buf *b);

#endif
