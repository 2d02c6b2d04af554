/*
 * memory.h - an agent's memory: the files it writes (MEMORY.md for durable
 * facts, memory/YYYY-MM-DD.md for daily notes), a full-text index over them
 * and, where configured, over the agent's past transcripts, and the reads
 * and writes its memory tools make.
 *
 * The index is an SQLite database with an FTS5 table (BM25 ranking) kept
 * in the gateway's home (agents/<id>/memory.sqlite, 0600), never in the
 * workspace. It is brought up to date at each search: every memory file is
 * stat'ed beneath the workspace's directory fd (beneath.h: no symlink is
 * followed, regular files only); a file whose size and mtime are what the
 * index recorded, and whose mtime is more than two seconds older than the
 * time it was indexed, is taken as it is; any other is read and hashed
 * (BLAKE2b-256), and re-indexed when the hash differs. Files that are gone
 * leave the index. A search therefore always sees the files as they are at
 * that moment, whoever changed them (the agent, the operator, git).
 *
 * Files are indexed in chunks of consecutive lines (a heading starts a new
 * one, a blank line may end one; at most MEMORY_CHUNK_LINES lines or
 * MEMORY_CHUNK_BYTES bytes), so a hit names the lines it came from.
 *
 * Blocking (files, SQLite): the thread pool or the CLI. Each call opens its
 * own connection; concurrent calls on one index are safe (WAL, a busy
 * timeout, one write transaction at a time).
 */
#ifndef SB_WORKSPACES_MEMORY_H
#define SB_WORKSPACES_MEMORY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MEMORY_FILE "MEMORY.md"
#define MEMORY_DIR "memory"
#define MEMORY_FILE_MAX ((size_t)4 << 20)        /* a bigger memory file is not indexed */
#define MEMORY_FILES_MAX 5000                    /* memory files indexed */
#define MEMORY_TRANSCRIPTS_MAX 2000              /* transcripts indexed (the newest by name) */
#define MEMORY_TRANSCRIPT_MAX ((size_t)32 << 20) /* a bigger transcript is not indexed */
#define MEMORY_CHUNK_LINES 12
#define MEMORY_CHUNK_BYTES 1200
#define MEMORY_QUERY_TERMS_MAX 32
#define MEMORY_HITS_MAX 50
#define MEMORY_GET_LINES_MAX 2000
#define MEMORY_WRITE_MAX ((size_t)64 << 10) /* one write's text */

/* What the index covers and where it lives. */
struct memory_scope {
	const char *workspace; /* absolute path of the workspace (trusted: config) */
	const char *index;     /* the SQLite file (trusted: the gateway's home) */
	const char *sessions;  /* the agent's transcripts' directory, or NULL: not indexed */
	/* Polled per file synced and every 1,000 SQLite steps (may be NULL):
	 * once it answers true, memory_sync and memory_search give up with
	 * SB_ERR_ABORTED, the index as it was before. Runs on the caller's
	 * thread. */
	bool (*stopped)(void *ud);
	void *stop_ud;
};

/* What a sync did (tests, logs). */
struct memory_sync_stats {
	size_t files;   /* files looked at */
	size_t indexed; /* files (re)indexed */
	size_t hashed;  /* files read and hashed, reindexed or not */
	size_t removed; /* files gone from the index */
	size_t skipped; /* too big, not regular, over the count */
};

/* Brings the index up to date (as described above). SB_OK, SB_ERR_NOTFOUND
 * (no workspace), SB_ERR_STORE (the database), SB_ERR_IO, SB_ERR_NOMEM,
 * SB_ERR_ABORTED (s->stopped). stats may be NULL. */
int memory_sync(const struct memory_scope *s, struct memory_sync_stats *stats);

/* Syncs, then searches: query's words (letters, digits, '_' and any
 * non-ASCII bytes; at most MEMORY_QUERY_TERMS_MAX) are matched with FTS5
 * (any of them; BM25 ranks the chunks with more, and rarer, words first).
 * *out receives [{"path", "from", "to", "score", "snippet"}], best first, at
 * most limit (1..MEMORY_HITS_MAX); paths are relative to the workspace
 * ("MEMORY.md", "memory/2026-12-02.md") or "sessions/<id>.jsonl" for a
 * transcript (from/to are then its line numbers). SB_ERR_INVAL: no word in
 * query (why says so). Other codes as memory_sync. */
int memory_search(const struct memory_scope *s, const char *query, size_t limit, json_t **out,
                  struct memory_sync_stats *stats, char *why, size_t why_size);

/* Whether path (already normalised: beneath_normalize) names a memory
 * file: "MEMORY.md" or "memory/<...>.md". */
bool memory_path_ok(const char *path);

/* Reads lines [from, from + lines) (1-based) of the memory file at path
 * beneath the workspace into *out (the caller frees), *total the file's
 * line count. A file that does not exist yet gives "" and *total 0 (SB_OK).
 * SB_ERR_PERM: path is not a memory file or not a regular file (a symlink
 * anywhere on it); SB_ERR_TOOBIG: bigger than MEMORY_FILE_MAX; SB_ERR_IO. */
int memory_get(const char *workspace, const char *path, int64_t from, int64_t lines, char **out,
               int64_t *total, char *why, size_t why_size);

/* memory_get that calls stopped(ud) (may be NULL) before each read of at
 * most 1 MiB and every MEMORY_POLL_LINES lines counted, and gives up with
 * SB_ERR_ABORTED (nothing in *out) once it answers true. Any thread
 * (stopped runs on the caller's). */
#define MEMORY_POLL_LINES 4096
int memory_get_until(const char *workspace, const char *path, int64_t from, int64_t lines,
                     char **out, int64_t *total, char *why, size_t why_size,
                     bool (*stopped)(void *), void *ud);

/* Appends text (a newline added when it lacks one) to the memory file at
 * path beneath the workspace, creating it and memory/ when absent; the file
 * is replaced atomically (beneath_write_atomic). SB_ERR_PERM (not a memory
 * path, a symlink), SB_ERR_TOOBIG (the file would pass MEMORY_FILE_MAX),
 * SB_ERR_IO. */
int memory_append(const char *workspace, const char *path, const char *text, char *why,
                  size_t why_size);

/* memory_append that calls stopped(ud) (may be NULL) before each read of
 * the old file and each write of the new one (at most 1 MiB each), before
 * the fsync and before the rename (beneath_write_atomic_until); once it
 * answers true it gives up with SB_ERR_ABORTED, the file is as it was and
 * no temporary file is left. Any thread. */
int memory_append_until(const char *workspace, const char *path, const char *text, char *why,
                        size_t why_size, bool (*stopped)(void *), void *ud);

/* "memory/YYYY-MM-DD.md" for the day that unix time t is in, at UTC
 * offset off_s, into out (>= 24 bytes). */
void memory_daily_path(int64_t t, int32_t off_s, char *out, size_t size);

/* Commits the memory files at paths (normalised memory paths, at most 8)
 * as they are on disk now to the workspace's git repository, on top of
 * HEAD, with message; nothing else of the work tree or the operator's
 * staged changes goes into the commit (the tree is HEAD's with these
 * files replaced), and the index's entries for these paths are updated to
 * match, so `git status` stays as it was. A file that is gone is removed
 * from the tree. commit (41 bytes) receives the new commit's id, or "" when
 * nothing changed. SB_OK; SB_ERR_NOTFOUND: the workspace is not the top of
 * a git repository (nothing committed; why says so); SB_ERR_IO (why says
 * what failed); SB_ERR_NOMEM. Commits in one process are serialised; a
 * HEAD moved by someone else meanwhile is retried on top of it. */
int memory_commit(const char *workspace, const char *const *paths, size_t n, const char *message,
                  char *commit, char *why, size_t why_size);

/* memory_commit for any files of the work tree (paths normalised, none in
 * .git: SB_ERR_INVAL otherwise), for the caller that has checked what it
 * commits (skills.h). */
int memory_commit_files(const char *workspace, const char *const *paths, size_t n,
                        const char *message, char *commit, char *why, size_t why_size);

#endif
