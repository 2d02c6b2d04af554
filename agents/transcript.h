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
 * on the libuv thread pool, one at a time, in order. Nothing is synced on
 * the way: the close syncs the file (and a new file's directory), unless
 * the caller took the bytes to keep them durable itself
 * (transcript_take_pending: the gateway's store, until a batched sync). Entry ids are 24 random
 * hex characters; "parent_id" is null for the first entry; "ts" is RFC 3339
 * UTC with milliseconds. A crash can leave at most the last line torn;
 * loading detects and ignores it. The file is never cut: a later append
 * starts on a fresh line and carries "follows_torn": true, which tells
 * loading to skip the line before it (and invalid lines right before that).
 * Loading rebuilds the exact message history that was sent to the provider:
 * the "message" entries in order, with the edits of each "compaction" entry
 * applied where it stands (compact.h), and the one edit of a "note" event
 * that carries one (a note added to a message recorded before):
 *
 *   {"type":"compaction","level":1|2|3,"reason":"...","edits":[...],
 *    "tokens_before":N,"tokens_after":N,"removed":...,"where":"...",
 *    "usage":{...}}      (usage: the summary call's, level 3)
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

/* Opens (creating with its header if absent or empty) the transcript at path,
 * for appends on loop; missing parent directories are created (0700), the
 * file is 0600. Blocking (opens the file and reads its tail to continue the
 * parent chain and to know whether a torn last line must be closed): call it
 * from the CLI or the thread pool. A file whose header itself was torn (no
 * whole line) is started again. info's strings are copied into the header
 * (key and agent may be NULL). Returns SB_OK, SB_ERR_IO, SB_ERR_INVAL (bad
 * arguments, or whole lines of which none is valid: not a transcript),
 * SB_ERR_NOMEM. */
int transcript_open(struct transcript **out, uv_loop_t *loop, const char *path,
                    const struct transcript_info *info);

/* Appends one entry of type ("message", "event", ...). fields (an object, or
 * NULL) is borrowed; "type", "id", "parent_id" (the previous entry's id) and
 * "ts" are added and win over keys of the same name in fields. The new
 * entry's id is copied into id_out when not NULL (size >= 40). Loop thread
 * only; the write happens later, in order. SB_OK; SB_ERR_INVAL (closing, bad
 * arguments); SB_ERR_AGAIN when 64 MiB are already waiting; SB_ERR_IO once a
 * write has failed (later entries are refused, so the file never has a
 * hole); SB_ERR_NOMEM. */
int transcript_append(struct transcript *t, const char *type, const json_t *fields, char *id_out,
                      size_t id_size);

/* From now on, every "message" entry whose message has the role
 * "assistant" carries "key": value (a copy; fields of the same name given to
 * transcript_append win). value NULL stops it. Used for the workspace
 * version each reply was produced with. Loop thread only. SB_OK,
 * SB_ERR_INVAL, SB_ERR_NOMEM. */
int transcript_set_stamp(struct transcript *t, const char *key, const json_t *value);

/* Calls cb (later, on the loop) once every append made so far is written,
 * with SB_OK or the first write error. SB_ERR_INVAL after close. */
int transcript_flush(struct transcript *t, void (*cb)(void *ud, int rc), void *ud);

/* Hands over what this open wrote to the file: the bytes from *offset
 * (the file's size when it was opened, 0 for a file it started, header
 * included) to its end, in *bytes (the caller frees it; NULL when *len is
 * 0). Call it after transcript_flush reported every append written and
 * just before transcript_close, which then syncs nothing: the caller
 * keeps the bytes durable (the store's copy, gateway/pipeline/xsync.h)
 * until the file is synced. SB_OK; SB_ERR_INVAL (appends still queued,
 * closing); SB_ERR_TOOBIG (over 8 MiB, or no memory for the copy: nothing
 * kept, the close syncs);
 * the first write error (the close syncs what there is). Loop thread. */
int transcript_take_pending(struct transcript *t, int64_t *offset, char **bytes, size_t *len);

/* Undoes transcript_take_pending's promise: the close syncs the file (the
 * caller could not keep the bytes). Loop thread. */
void transcript_sync_on_close(struct transcript *t);

/* Whether the close of a transcript kept durable elsewhere starts its file's
 * writeback (sync_file_range, a hint; on by default). Loop thread. */
void transcript_writeback_hint(struct transcript *t, bool on);

/* Makes [offset, offset + len) of the file at path hold bytes, the kept
 * copy of what a run wrote (transcript_take_pending): a missing file is
 * created (and its directories), what the file holds of them already is
 * kept, the rest written; a tail that differs (torn, or not what was
 * kept) is written over. A file shorter than offset gets the bytes at its
 * end, on a fresh line. Syncs nothing (the caller syncs the file system).
 * *restored: bytes written (0 when the file held them all). Blocking
 * (start-up). SB_OK, SB_ERR_INVAL, SB_ERR_IO, SB_ERR_NOMEM. */
int transcript_restore(const char *path, int64_t offset, const char *bytes, size_t len,
                       size_t *restored);

/* Flushes, closes and frees (asynchronously; the loop must run). */
void transcript_close(struct transcript *t);

/* How many write jobs the transcripts of this process have put on the thread
 * pool so far (each carries the batches of every transcript of its loop that
 * had lines waiting). For tests and benchmarks. */
unsigned long long transcript_jobs_submitted(void);

struct transcript_loaded {
	json_t *header;   /* the session line */
	json_t *messages; /* the history, canonical messages in order */
	json_t *entries;  /* every entry, in order */
	char last_id[40]; /* id of the last entry ("" when none) */
	size_t torn;      /* ignored torn lines: the last one, and isolated ones */
	size_t repaired;  /* tool_use blocks without a result (a kill while a tool
	                   * ran): given an error result in messages */
	json_t *repair;   /* the edits that gave them (NULL when none): the run
	                   * that resumes the session appends them as the event
	                   * {"event": "repair", "edits": ...}, once, so that the
	                   * file itself is paired from then on */
	/* Context bookkeeping (compact.h, docs/context.md): tokens the session
	 * has spent (the "usage" of every message entry and compaction entry,
	 * also of messages a compaction removed since), consecutive failed
	 * summaries since the last successful one, prompt-cache breaks, and
	 * the last "prompt" event (borrowed from entries; NULL when none). */
	int64_t spent_input, spent_output, spent_cache_read, spent_cache_write;
	int compact_failures;      /* failed summaries (level 3) only */
	int64_t compact_failed_ms; /* when the last of them failed (unix ms; 0: none) */
	int64_t cache_breaks;
	const json_t *last_prompt;
	/* The session's todo list (the todo tool): the items of the last
	 * "todo" event, borrowed from entries; NULL when none. */
	const json_t *todo;
	/* The silent memory turn ran in the current compaction cycle: a
	 * "memory_flush" event comes after the last compaction entry of
	 * level 2 or 3 (turn.h: turn_options.memory_flush). */
	bool memory_flushed;
};

/* Reads a transcript (blocking: CLI, or the thread pool). Line 1 must be a
 * header of a version up to TRANSCRIPT_VERSION; every other line an entry
 * (an object with a string "type" and "id"; "message" entries with a
 * "message" object), except torn lines: the last line when it lacks "\n" or
 * is not valid, and lines isolated by "follows_torn" (see above). SB_OK,
 * SB_ERR_NOTFOUND (also for a file without one whole line: empty, or its
 * header torn at creation, which transcript_open starts again), SB_ERR_IO,
 * SB_ERR_TOOBIG (over 512 MiB), SB_ERR_NOMEM, or
 * SB_ERR_INVAL for anything else that is not valid; out is zeroed on
 * failure. Release with transcript_loaded_free (twice is harmless). */
int transcript_load(const char *path, struct transcript_loaded *out);
void transcript_loaded_free(struct transcript_loaded *l);

/* A new random session id: a ULID in lower case (26 characters of
 * Crockford base32: 48 bits of Unix milliseconds, then 80 random bits), so
 * ids sort by creation time. Truncated to size - 1. Any thread. */
void transcript_new_session_id(char *out, size_t size);
/* The id of the session a message starts (its first under the key): the
 * same for the same key, inbox entry and receipt time, so that a run cut
 * by a crash before its session was recorded finds its transcript again;
 * a ULID of received_at (unix ms) and a hash of the three. */
void transcript_session_id_for(char *out, size_t size, const char *session_key, int64_t inbox_id,
                               int64_t received_at);

#endif
