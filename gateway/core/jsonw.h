/*
 * jsonw.h - compact JSON text of a jansson value, written straight into a
 * buffer.
 *
 * The output is byte for byte what json_dumps(v, JSON_COMPACT |
 * JSON_ENCODE_ANY) gives with the installed jansson (with JSON_SORT_KEYS
 * when asked): keys in insertion order or sorted, no space, UTF-8 left as it is, '"' and '\\' and
 * the control characters escaped (\b \f \n \r \t, the others as \u00XX), reals in jansson's own
 * format (they are handed to jansson, which owns that format). What differs is the cost: jansson
 * checks each container for a cycle with a hash table keyed by its address printed as text, walks
 * strings one code point at a time through a callback and copies the
 * result once more at the end; this writer copies runs of plain bytes and
 * bounds the nesting instead (a cycle is deeper than any bound). It is the
 * message path's serialiser (transcript lines, envelopes), where jansson's
 * dump was the largest single cost (docs/performance.md).
 *
 * Like json_dumps, it fails on a string that is not valid UTF-8 (made with
 * json_stringn_nocheck) and on a cycle; it also fails on such a key (which
 * json_dumps writes out unchecked) and past JSONW_DEPTH_MAX levels of
 * nesting. Thread-safe (it only reads the value).
 */
#ifndef SB_CORE_JSONW_H
#define SB_CORE_JSONW_H

#include <jansson.h>
#include <stddef.h>

#include "gateway/core/buf.h"

#define JSONW_DEPTH_MAX 2048

/* Flags. JSONW_SORT_KEYS: each object's keys in the order of their bytes
 * (jansson's JSON_SORT_KEYS: memcmp, then the shorter first). */
#define JSONW_SORT_KEYS 1u

/* Appends v's compact text to b. Returns SB_OK, SB_ERR_INVAL (invalid
 * UTF-8, too deep or a cycle, NULL), SB_ERR_TOOBIG (past b's max) or
 * SB_ERR_NOMEM; on an error b is left as it was. */
int jsonw_append(struct buf *b, const json_t *v, unsigned flags);

/* The parts of an object written by hand: a string (quoted, escaped), and
 * "key":value. Same return codes; on an error b is left as it was. */
int jsonw_append_string(struct buf *b, const char *s, size_t len);
int jsonw_append_member(struct buf *b, const char *key, size_t key_len, const json_t *v,
                        unsigned flags);

/* The compact text in a new string (free() it), its length in *len_out
 * when that is not NULL; NULL on an error (as json_dumps). */
char *jsonw_dumps(const json_t *v, unsigned flags, size_t *len_out);

#endif
