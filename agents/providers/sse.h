/*
 * sse.h - an incremental parser of Server-Sent Events (the WHATWG
 * "text/event-stream" format), independent of any transport, so that it can
 * be fed from curl, from a test or from a fuzzer alike.
 *
 * Bytes go in as they arrive, split anywhere (inside a field name, between
 * the CR and LF of a line end, inside a multi-byte UTF-8 character); each
 * complete event (ended by a blank line) comes out as one callback with its
 * name and data. Lines end with CRLF, LF or CR; "data:" lines of one event are
 * joined with "\n"; ":" lines are comments; "event:" names the event; "id:"
 * sets the last event id; one leading U+FEFF is dropped; other fields are
 * ignored. An event that is larger than the parser's bound (one line, or the
 * data of one event) is an error, as is anything the callback refuses; both
 * stick: every later sse_feed returns the same code.
 *
 * A parser belongs to one owner and one thread; it holds no global state.
 */
#ifndef SB_AGENTS_SSE_H
#define SB_AGENTS_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include "gateway/core/buf.h"

/* The default bound of one event (its longest line, and its data). */
#define SSE_MAX_EVENT_DEFAULT ((size_t)4 * 1024 * 1024)

/* One complete event. name: the "event:" field, or "message" when there was
 * none; data: the data lines joined with "\n", NUL-terminated (len does not
 * count the terminator; the data may itself hold NUL bytes). Both are
 * borrowed for the duration of the call. Return SB_OK to go on; any other
 * code stops the parser, and sse_feed returns it. */
typedef int (*sse_event_cb)(void *ud, const char *name, const char *data, size_t len);

struct sse {
	sse_event_cb cb;
	void *ud;
	size_t max_event;
	struct buf line; /* the line being read */
	struct buf data; /* the event's data so far, each line followed by "\n" */
	struct buf name; /* the event's name so far */
	struct buf id;   /* the last event id */
	int bom;         /* bytes of a leading UTF-8 BOM matched so far */
	bool started;    /* past the place where a BOM may stand */
	bool after_cr;   /* the last byte was CR: a following LF ends nothing */
	bool in_comment; /* the line being read is a comment (not kept) */
	int rc;          /* the sticky error, SB_OK until something failed */
};

/* Prepares a parser. max_event: the bound of one line and of one event's
 * data, in bytes (0 = SSE_MAX_EVENT_DEFAULT). cb and ud are kept. */
void sse_init(struct sse *s, size_t max_event, sse_event_cb cb, void *ud);

/* Parses n more bytes of the stream (p may be NULL when n is 0) and calls cb
 * for every event they complete, in order. Returns SB_OK, SB_ERR_TOOBIG (an
 * event beyond the bound), SB_ERR_NOMEM, or the non-zero code of cb. After
 * an error the parser stays failed and returns that code again. */
int sse_feed(struct sse *s, const char *p, size_t n);

/* The end of the stream. An event that no blank line ended is discarded, as
 * the format requires. Returns the sticky error if any; SB_ERR_PROTO when
 * such an unfinished event (or line) was discarded; else SB_OK. */
int sse_finish(struct sse *s);

/* The last event id seen ("" when none); borrowed, valid until the next feed
 * or free. */
const char *sse_last_id(const struct sse *s);

/* Releases the buffers. The parser may be initialised again afterwards. Safe
 * on a parser that was only initialised, and twice. */
void sse_free(struct sse *s);

#endif
