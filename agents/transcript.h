/*
 * transcript.h - a session's append-only JSONL transcript.
 *
 * $SWITCHBOARD_HOME/agents/<agent>/sessions/<session-id>.jsonl. The first
 * line is a header; every later line is one entry:
 *
 *   {"type":"session","version":1,"id":"<session-id>","key":"agent:main:main",
 *    "agent":"main","created":"<RFC 3339>"}
 *   {"type":"message","id":"...","parent_id":"...","ts":"...","message":{...},
 *    "usage":{...},"model":"provider/model"}
 *   {"type":"event","id":"...","parent_id":"...","ts":"...","event":"tool_end",...}
 *
 * Each entry is one write(2) of a whole line to a file opened O_APPEND, done
 * on the libuv thread pool, one at a time, in order. A crash can leave at
 * most the last line torn; loading detects and ignores it (and a later append
 * starts on a fresh line). Loading rebuilds the exact message history that was
 * sent to the provider: the "message" entries in order.
 */
#ifndef SB_AGENTS_TRANSCRIPT_H
#define SB_AGENTS_TRANSCRIPT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#define TRANSCRIPT_VERSION 1

struct transcript;

struct transcript_info {
	const char *session_id;
	const char *session_key;
	const char *agent_id;
};

/* Opens (creating with its header if absent) the transcript at path, for
 * appends on loop. Blocking (opens the file and reads its tail to continue the
 * parent chain and to know whether a torn last line must be closed): call it
 * from the CLI or the thread pool. Returns SB_OK or SB_ERR_IO. */
int transcript_open(struct transcript **out, uv_loop_t *loop, const char *path,
                    const struct transcript_info *info);

/* Appends one entry of type ("message", "event", ...). fields is borrowed;
 * "type", "id", "parent_id" (the previous entry's id) and "ts" are added.
 * The new entry's id is copied into id_out when not NULL (size >= 40).
 * Loop thread only; the write happens later, in order. */
int transcript_append(struct transcript *t, const char *type, const json_t *fields, char *id_out,
                      size_t id_size);

/* Calls cb once every append made so far is written (or failed: rc). */
int transcript_flush(struct transcript *t, void (*cb)(void *ud, int rc), void *ud);

/* Flushes, closes and frees (asynchronously; the loop must run). */
void transcript_close(struct transcript *t);

struct transcript_loaded {
	json_t *header;   /* the session line */
	json_t *messages; /* the history, canonical messages in order */
	json_t *entries;  /* every entry, in order */
	char last_id[40]; /* id of the last entry ("" when none) */
	size_t torn;      /* ignored lines: 0 or 1 (the torn last line) */
};

/* Reads a transcript (blocking: CLI, or the thread pool). SB_OK,
 * SB_ERR_NOTFOUND, SB_ERR_IO, or SB_ERR_INVAL when a line other than the
 * last is not valid JSON. Release with transcript_loaded_free. */
int transcript_load(const char *path, struct transcript_loaded *out);
void transcript_loaded_free(struct transcript_loaded *l);

/* A new random session id (26 characters, time-ordered). */
void transcript_new_session_id(char *out, size_t size);

#endif
