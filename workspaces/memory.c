/*
 * memory.c - see memory.h.
 */
#include "workspaces/memory.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gateway/core/beneath.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#define GIT_LAZY_NAMES
#include "workspaces/git_lazy.h"
#include "workspaces/workspace.h"

#define MEMORY_RACY_NS 2000000000LL
#define MEMORY_DEPTH_MAX 4
#define MEMORY_BUSY_MS 10000
#define MEMORY_TERM_MAX 64
#define MEMORY_MESSAGE_INDEX_MAX 4000 /* bytes of one transcript message indexed */

static const char memory_schema[] =
    "CREATE TABLE IF NOT EXISTS files("
    " path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime INTEGER NOT NULL,"
    " hash BLOB, indexed INTEGER NOT NULL, seen INTEGER NOT NULL DEFAULT 0);"
    "CREATE VIRTUAL TABLE IF NOT EXISTS chunks USING fts5("
    " text, path UNINDEXED, line_from UNINDEXED, line_to UNINDEXED,"
    " tokenize = 'porter unicode61');";

static int64_t memory_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

bool memory_path_ok(const char *path)
{
	size_t n;

	if (!path)
		return false;
	if (strcmp(path, MEMORY_FILE) == 0)
		return true;
	n = strlen(path);
	return strncmp(path, MEMORY_DIR "/", sizeof MEMORY_DIR) == 0 && n > sizeof MEMORY_DIR + 3 &&
	       strcmp(path + n - 3, ".md") == 0;
}

void memory_daily_path(int64_t t, int32_t off_s, char *out, size_t size)
{
	time_t local = (time_t)(t + off_s);
	struct tm tm;

	gmtime_r(&local, &tm);
	snprintf(out, size, MEMORY_DIR "/%04d-%02d-%02d.md", tm.tm_year + 1900, tm.tm_mon + 1,
	         tm.tm_mday);
}

/* ---- the database ---- */

/* The index file and its -wal and -shm are the operator's alone (0600),
 * made before SQLite opens it (SQLite gives its side files its mode). */
static void memory_private(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);

	if (fd >= 0) {
		(void)fchmod(fd, 0600);
		close(fd);
	}
}

static int memory_db_open(const char *path, sqlite3 **out)
{
	sqlite3 *db = NULL;

	*out = NULL;
	memory_private(path);
	if (sqlite3_open_v2(path, &db,
	                    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX |
	                        SQLITE_OPEN_NOFOLLOW,
	                    NULL) != SQLITE_OK)
		goto fail;
	sqlite3_busy_timeout(db, MEMORY_BUSY_MS);
	if (sqlite3_exec(db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_exec(db, memory_schema, NULL, NULL, NULL) != SQLITE_OK)
		goto fail;
	*out = db;
	return SB_OK;
fail:
	sqlite3_close(db);
	return SB_ERR_STORE;
}

/* ---- chunks ---- */

static bool memory_blank_line(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return false;
	return true;
}

static int memory_insert_chunk(sqlite3_stmt *ins, const char *path, const char *text, size_t len,
                               int64_t from, int64_t to)
{
	int rc;

	if (memory_blank_line(text, len))
		return SB_OK;
	sqlite3_reset(ins);
	sqlite3_bind_text(ins, 1, text, (int)len, SQLITE_TRANSIENT);
	sqlite3_bind_text(ins, 2, path, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(ins, 3, from);
	sqlite3_bind_int64(ins, 4, to);
	rc = sqlite3_step(ins);
	return rc == SQLITE_DONE ? SB_OK : SB_ERR_STORE;
}

/* Splits a markdown file into chunks of lines (memory.h) and inserts them. */
static int memory_index_text(sqlite3_stmt *ins, const char *path, const char *text, size_t len)
{
	size_t start = 0, pos = 0;
	int64_t line = 1, from = 1, lines_in = 0;
	int rc;

	while (pos < len) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t end = nl ? (size_t)(nl - text) : len;
		size_t next = nl ? end + 1 : len;
		bool heading = text[pos] == '#';
		bool blank = memory_blank_line(text + pos, end - pos);

		/* A heading starts a chunk; so does a full one. */
		if (lines_in > 0 && (heading || lines_in >= MEMORY_CHUNK_LINES ||
		                     end - start > MEMORY_CHUNK_BYTES)) {
			if ((rc = memory_insert_chunk(ins, path, text + start, pos - start, from,
			                              line - 1)))
				return rc;
			start = pos;
			from = line;
			lines_in = 0;
		}
		lines_in++;
		pos = next;
		line++;
		/* A blank line after a few lines ends the chunk (a paragraph). */
		if (blank && lines_in >= 4) {
			if ((rc = memory_insert_chunk(ins, path, text + start, pos - start, from,
			                              line - 1)))
				return rc;
			start = pos;
			from = line;
			lines_in = 0;
		}
	}
	if (lines_in > 0)
		return memory_insert_chunk(ins, path, text + start, len - start, from, line - 1);
	return SB_OK;
}

/* The text blocks of a user or assistant message line of a transcript. */
static char *memory_message_text(const char *line, size_t len, const char **role_out)
{
	json_t *j = json_loadb(line, len, 0, NULL), *m, *content, *b;
	const char *type, *role;
	struct buf out;
	size_t i;

	*role_out = NULL;
	if (!j)
		return NULL;
	type = json_string_value(json_object_get(j, "type"));
	m = json_object_get(j, "message");
	role = json_string_value(json_object_get(m, "role"));
	if (!type || strcmp(type, "message") != 0 || !role ||
	    (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0)) {
		json_decref(j);
		return NULL;
	}
	*role_out = strcmp(role, "user") == 0 ? "user" : "assistant";
	buf_init(&out, MEMORY_MESSAGE_INDEX_MAX);
	content = json_object_get(m, "content");
	if (json_is_string(content))
		(void)buf_puts(&out, json_string_value(content));
	json_array_foreach(content, i, b)
	{
		const char *bt = json_string_value(json_object_get(b, "type"));
		const char *t = json_string_value(json_object_get(b, "text"));

		if (bt && t && strcmp(bt, "text") == 0) {
			if (out.len)
				(void)buf_puts(&out, "\n");
			if (buf_puts(&out, t) != SB_OK)
				(void)buf_append(&out, t,
				                 out.max > out.len ? out.max - out.len : 0);
		}
	}
	json_decref(j);
	if (!out.len) {
		buf_free(&out);
		return NULL;
	}
	return buf_steal(&out);
}

/* Indexes a transcript: each user or assistant message with text is a
 * chunk named by its line. */
static int memory_index_transcript(sqlite3_stmt *ins, const char *path, const char *text,
                                   size_t len)
{
	size_t pos = 0;
	int64_t line = 0;
	int rc = SB_OK;

	while (pos < len && rc == SB_OK) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t end = nl ? (size_t)(nl - text) : len;
		const char *role;
		char *t;

		line++;
		t = memory_message_text(text + pos, end - pos, &role);
		if (t) {
			struct buf b;

			buf_init(&b, MEMORY_MESSAGE_INDEX_MAX + 32);
			if (buf_printf(&b, "%s: %s", role, t) != SB_OK)
				(void)buf_printf(&b, "%s: %.*s", role,
				                 (int)(MEMORY_MESSAGE_INDEX_MAX - 16), t);
			if (b.data)
				rc = memory_insert_chunk(ins, path, b.data, b.len, line, line);
			buf_free(&b);
			free(t);
		}
		pos = nl ? end + 1 : len;
	}
	return rc;
}

/* ---- sync ---- */

struct memory_sync {
	const struct memory_scope *s;
	sqlite3 *db;
	sqlite3_stmt *get, *put, *touch, *del_chunks, *ins;
	int64_t now;
	int64_t generation; /* files seen in this sync carry it */
	struct memory_sync_stats st;
};

static int memory_sync_file(struct memory_sync *ms, int root, const char *rel, const char *name,
                            const struct stat *st, size_t max, bool transcript)
{
	int64_t mtime = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
	unsigned char hash[32];
	char *text = NULL;
	size_t len = 0;
	bool known = false, same_stat = false, same_hash = false;
	int rc, frc;

	if (ms->s->stopped && ms->s->stopped(ms->s->stop_ud))
		return SB_ERR_ABORTED;
	ms->st.files++;
	sqlite3_reset(ms->get);
	sqlite3_bind_text(ms->get, 1, name, -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(ms->get);
	if (rc == SQLITE_ROW) {
		known = true;
		same_stat = sqlite3_column_int64(ms->get, 0) == (int64_t)st->st_size &&
		            sqlite3_column_int64(ms->get, 1) == mtime &&
		            sqlite3_column_int64(ms->get, 3) - mtime > MEMORY_RACY_NS;
		if (!same_stat && sqlite3_column_bytes(ms->get, 2) == (int)sizeof hash) {
			memcpy(hash, sqlite3_column_blob(ms->get, 2), sizeof hash);
			same_hash = true; /* candidate: compared below */
		}
	} else if (rc != SQLITE_DONE) {
		return SB_ERR_STORE;
	}
	sqlite3_reset(ms->get);
	if (same_stat) {
		sqlite3_reset(ms->touch);
		sqlite3_bind_int64(ms->touch, 1, ms->generation);
		sqlite3_bind_text(ms->touch, 2, name, -1, SQLITE_TRANSIENT);
		return sqlite3_step(ms->touch) == SQLITE_DONE ? SB_OK : SB_ERR_STORE;
	}
	frc = beneath_read_all(root, rel, max, &text, &len);
	if (frc == SB_ERR_NOTFOUND || frc == SB_ERR_PERM || frc == SB_ERR_TOOBIG) {
		/* Gone, swapped for a symlink, or grown past the bound since the
		 * stat: not indexed (its old rows go at the end of the sync). */
		ms->st.skipped++;
		return SB_OK;
	}
	if (frc)
		return frc == SB_ERR_NOMEM ? frc : SB_ERR_IO;
	ms->st.hashed++;
	{
		unsigned char now_hash[32];

		crypto_generichash(now_hash, sizeof now_hash, (const unsigned char *)text, len,
		                   NULL, 0);
		same_hash = same_hash && memcmp(now_hash, hash, sizeof hash) == 0;
		memcpy(hash, now_hash, sizeof hash);
	}
	rc = SB_OK;
	if (!known || !same_hash) {
		ms->st.indexed++;
		sqlite3_reset(ms->del_chunks);
		sqlite3_bind_text(ms->del_chunks, 1, name, -1, SQLITE_TRANSIENT);
		if (sqlite3_step(ms->del_chunks) != SQLITE_DONE)
			rc = SB_ERR_STORE;
		if (!rc)
			rc = transcript ? memory_index_transcript(ms->ins, name, text, len)
			                : memory_index_text(ms->ins, name, text, len);
	}
	free(text);
	if (rc)
		return rc;
	sqlite3_reset(ms->put);
	sqlite3_bind_text(ms->put, 1, name, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(ms->put, 2, (int64_t)st->st_size);
	sqlite3_bind_int64(ms->put, 3, mtime);
	sqlite3_bind_blob(ms->put, 4, hash, sizeof hash, SQLITE_TRANSIENT);
	sqlite3_bind_int64(ms->put, 5, ms->now);
	sqlite3_bind_int64(ms->put, 6, ms->generation);
	return sqlite3_step(ms->put) == SQLITE_DONE ? SB_OK : SB_ERR_STORE;
}

/* The markdown files of memory/ (depth-bounded), beneath root. */
static int memory_sync_dir(struct memory_sync *ms, int root, const char *rel, int depth)
{
	DIR *d = NULL;
	struct dirent *de;
	char **names = NULL;
	size_t n = 0, cap = 0;
	int rc = beneath_opendir(root, rel, &d);

	if (rc == SB_ERR_NOTFOUND || rc == SB_ERR_PERM)
		return SB_OK; /* no memory/ yet, or a symlink there: nothing to index */
	if (rc)
		return rc == SB_ERR_NOMEM ? rc : SB_ERR_IO;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 32;
			char **nn = realloc(names, nc * sizeof *names);

			if (!nn) {
				rc = SB_ERR_NOMEM;
				goto out;
			}
			names = nn;
			cap = nc;
		}
		if (!(names[n] = strdup(de->d_name))) {
			rc = SB_ERR_NOMEM;
			goto out;
		}
		n++;
	}
	for (size_t i = 0; i < n && rc == SB_OK; i++) {
		char path[BENEATH_PATH_MAX];
		struct stat st;
		size_t l = strlen(names[i]);

		if (snprintf(path, sizeof path, "%s/%s", rel, names[i]) >= (int)sizeof path) {
			ms->st.skipped++;
			continue;
		}
		if (beneath_stat(root, path, &st) != SB_OK) {
			ms->st.skipped++;
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			if (depth < MEMORY_DEPTH_MAX)
				rc = memory_sync_dir(ms, root, path, depth + 1);
			continue;
		}
		if (l < 4 || strcmp(names[i] + l - 3, ".md") != 0)
			continue;
		if (!S_ISREG(st.st_mode) || (size_t)st.st_size > MEMORY_FILE_MAX ||
		    ms->st.files >= MEMORY_FILES_MAX) {
			ms->st.skipped++;
			continue;
		}
		rc = memory_sync_file(ms, root, path, path, &st, MEMORY_FILE_MAX, false);
	}
out:
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(d);
	return rc;
}

static int memory_cmp_desc(const void *a, const void *b)
{
	return -strcmp(*(char *const *)a, *(char *const *)b);
}

/* The agent's transcripts (<id>.jsonl, not archives), newest names first
 * (ids begin with the time they were made). */
static int memory_sync_sessions(struct memory_sync *ms, const char *dir)
{
	DIR *d;
	struct dirent *de;
	char **names = NULL;
	size_t n = 0, cap = 0;
	int root = -1, rc = SB_OK;

	if (beneath_root(dir, &root) != SB_OK)
		return SB_OK; /* no sessions yet */
	if (beneath_opendir(root, ".", &d) != SB_OK) {
		close(root);
		return SB_OK;
	}
	while ((de = readdir(d)) != NULL) {
		size_t l = strlen(de->d_name);

		if (de->d_name[0] == '.' || l < 7 || strcmp(de->d_name + l - 6, ".jsonl") != 0 ||
		    strstr(de->d_name, ".archive-"))
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 32;
			char **nn = realloc(names, nc * sizeof *names);

			if (!nn) {
				rc = SB_ERR_NOMEM;
				goto out;
			}
			names = nn;
			cap = nc;
		}
		if (!(names[n] = strdup(de->d_name))) {
			rc = SB_ERR_NOMEM;
			goto out;
		}
		n++;
	}
	if (n)
		qsort(names, n, sizeof *names, memory_cmp_desc);
	for (size_t i = 0; i < n && i < MEMORY_TRANSCRIPTS_MAX && rc == SB_OK; i++) {
		char name[BENEATH_PATH_MAX];
		struct stat st;

		if (snprintf(name, sizeof name, "sessions/%s", names[i]) >= (int)sizeof name ||
		    beneath_stat(root, names[i], &st) != SB_OK || !S_ISREG(st.st_mode) ||
		    (size_t)st.st_size > MEMORY_TRANSCRIPT_MAX) {
			ms->st.skipped++;
			continue;
		}
		rc = memory_sync_file(ms, root, names[i], name, &st, MEMORY_TRANSCRIPT_MAX, true);
	}
out:
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(d);
	close(root);
	return rc;
}

/* SQLite's progress handler: a nonzero answer interrupts the statement. */
static int memory_progress(void *ud)
{
	const struct memory_scope *s = ud;

	return s->stopped(s->stop_ud) ? 1 : 0;
}

/* Has db poll s->stopped (when set) while its statements run. */
static void memory_watch_stop(sqlite3 *db, const struct memory_scope *s)
{
	if (s->stopped)
		sqlite3_progress_handler(db, 1000, memory_progress, (void *)s);
}

static int memory_sync_db(sqlite3 *db, const struct memory_scope *s,
                          struct memory_sync_stats *stats)
{
	struct memory_sync ms;
	struct stat st;
	int root = -1, rc;

	memset(&ms, 0, sizeof ms);
	ms.s = s;
	ms.db = db;
	ms.now = memory_now_ns();
	ms.generation = ms.now;
	if ((rc = beneath_root(s->workspace, &root)))
		return rc == SB_ERR_NOMEM ? rc : SB_ERR_NOTFOUND;
	/* One writer at a time: IMMEDIATE takes the write lock now, so two
	 * syncs never both decide to index the same file. */
	if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
		close(root);
		return SB_ERR_STORE;
	}
	memory_watch_stop(db, s);
	rc = SB_ERR_STORE;
	if (sqlite3_prepare_v2(db, "SELECT size, mtime, hash, indexed FROM files WHERE path = ?",
	                       -1, &ms.get, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(
	        db,
	        "INSERT OR REPLACE INTO files(path, size, mtime, hash, indexed, seen)"
	        " VALUES(?, ?, ?, ?, ?, ?)",
	        -1, &ms.put, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "UPDATE files SET seen = ? WHERE path = ?", -1, &ms.touch,
	                       NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "DELETE FROM chunks WHERE path = ?", -1, &ms.del_chunks, NULL) !=
	        SQLITE_OK ||
	    sqlite3_prepare_v2(db,
	                       "INSERT INTO chunks(text, path, line_from, line_to)"
	                       " VALUES(?, ?, ?, ?)",
	                       -1, &ms.ins, NULL) != SQLITE_OK)
		goto out;
	rc = beneath_stat(root, MEMORY_FILE, &st);
	if (rc == SB_OK && S_ISREG(st.st_mode) && (size_t)st.st_size <= MEMORY_FILE_MAX)
		rc = memory_sync_file(&ms, root, MEMORY_FILE, MEMORY_FILE, &st, MEMORY_FILE_MAX,
		                      false);
	else if (rc == SB_OK || rc == SB_ERR_NOTFOUND || rc == SB_ERR_PERM)
		rc = SB_OK;
	else
		rc = rc == SB_ERR_NOMEM ? rc : SB_ERR_IO;
	if (!rc)
		rc = memory_sync_dir(&ms, root, MEMORY_DIR, 1);
	if (!rc && s->sessions)
		rc = memory_sync_sessions(&ms, s->sessions);
	if (!rc) {
		/* What this sync did not see is gone. */
		sqlite3_stmt *gone = NULL;

		if (sqlite3_prepare_v2(db,
		                       "DELETE FROM chunks WHERE path IN"
		                       " (SELECT path FROM files WHERE seen <> ?1)",
		                       -1, &gone, NULL) != SQLITE_OK) {
			rc = SB_ERR_STORE;
		} else {
			sqlite3_bind_int64(gone, 1, ms.generation);
			if (sqlite3_step(gone) != SQLITE_DONE)
				rc = SB_ERR_STORE;
			sqlite3_finalize(gone);
			gone = NULL;
		}
		if (!rc && sqlite3_prepare_v2(db, "DELETE FROM files WHERE seen <> ?1", -1, &gone,
		                              NULL) == SQLITE_OK) {
			sqlite3_bind_int64(gone, 1, ms.generation);
			if (sqlite3_step(gone) != SQLITE_DONE)
				rc = SB_ERR_STORE;
			ms.st.removed = (size_t)sqlite3_changes(db);
		} else if (!rc) {
			rc = SB_ERR_STORE;
		}
		sqlite3_finalize(gone);
	}
out:
	sqlite3_finalize(ms.get);
	sqlite3_finalize(ms.put);
	sqlite3_finalize(ms.touch);
	sqlite3_finalize(ms.del_chunks);
	sqlite3_finalize(ms.ins);
	if (rc != SB_OK && s->stopped && s->stopped(s->stop_ud))
		rc = SB_ERR_ABORTED; /* a statement the progress handler interrupted */
	/* the transaction's end is never interrupted */
	sqlite3_progress_handler(db, 0, NULL, NULL);
	if (rc == SB_OK && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		rc = SB_ERR_STORE;
	if (rc != SB_OK)
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	close(root);
	if (stats)
		*stats = ms.st;
	return rc;
}

int memory_sync(const struct memory_scope *s, struct memory_sync_stats *stats)
{
	sqlite3 *db;
	int rc;

	if (!s || !s->workspace || !s->index)
		return SB_ERR_INVAL;
	if ((rc = memory_db_open(s->index, &db)))
		return rc;
	rc = memory_sync_db(db, s, stats);
	sqlite3_close(db);
	return rc;
}

/* ---- search ---- */

static bool memory_word_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c >= 0x80;
}

/* The FTS5 query for the words of text: "w1" OR "w2" ... (each word
 * quoted, so no FTS5 syntax in the user's text is ever interpreted). */
static int memory_fts_query(const char *text, struct buf *q)
{
	size_t terms = 0;
	const unsigned char *p = (const unsigned char *)text;

	while (*p && terms < MEMORY_QUERY_TERMS_MAX) {
		const unsigned char *w;
		size_t n;

		while (*p && !memory_word_byte(*p))
			p++;
		w = p;
		while (*p && memory_word_byte(*p))
			p++;
		n = (size_t)(p - w);
		if (!n)
			break;
		if (n > MEMORY_TERM_MAX)
			n = MEMORY_TERM_MAX;
		/* Never cut inside a UTF-8 character. */
		while (n > 0 && n < (size_t)(p - w) && (w[n] & 0xC0) == 0x80)
			n--;
		if (!n)
			continue;
		if (buf_printf(q, "%s\"%.*s\"", terms ? " OR " : "", (int)n, (const char *)w))
			return SB_ERR_NOMEM;
		terms++;
	}
	return terms ? SB_OK : SB_ERR_INVAL;
}

int memory_search(const struct memory_scope *s, const char *query, size_t limit, json_t **out,
                  struct memory_sync_stats *stats, char *why, size_t why_size)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	struct buf q;
	json_t *hits = NULL;
	int rc, src;

	*out = NULL;
	if (why_size)
		why[0] = '\0';
	if (!s || !s->workspace || !s->index || !query)
		return SB_ERR_INVAL;
	if (limit < 1)
		limit = 1;
	if (limit > MEMORY_HITS_MAX)
		limit = MEMORY_HITS_MAX;
	buf_init(&q, 8192);
	rc = memory_fts_query(query, &q);
	if (rc == SB_ERR_INVAL) {
		snprintf(why, why_size, "the query has no words to search for");
		goto out;
	}
	if (rc)
		goto out;
	if ((rc = memory_db_open(s->index, &db)))
		goto out;
	if ((rc = memory_sync_db(db, s, stats)))
		goto out;
	rc = SB_ERR_STORE;
	if (sqlite3_prepare_v2(db,
	                       "SELECT path, line_from, line_to, bm25(chunks),"
	                       " snippet(chunks, 0, '', '', ' ... ', 32)"
	                       " FROM chunks WHERE chunks MATCH ?"
	                       " ORDER BY bm25(chunks), path, line_from LIMIT ?",
	                       -1, &st, NULL) != SQLITE_OK)
		goto out;
	sqlite3_bind_text(st, 1, q.data, (int)q.len, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)limit);
	if (!(hits = json_array())) {
		rc = SB_ERR_NOMEM;
		goto out;
	}
	memory_watch_stop(db, s);
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		const char *path = (const char *)sqlite3_column_text(st, 0);
		const char *snip = (const char *)sqlite3_column_text(st, 4);
		/* bm25() is lower for better matches; the score shown is its
		 * negation, so higher is better. */
		json_t *h = json_pack("{s:s,s:I,s:I,s:f,s:s}", "path", path ? path : "", "from",
		                      (json_int_t)sqlite3_column_int64(st, 1), "to",
		                      (json_int_t)sqlite3_column_int64(st, 2), "score",
		                      -sqlite3_column_double(st, 3), "snippet", snip ? snip : "");

		if (!h || json_array_append_new(hits, h)) {
			rc = SB_ERR_NOMEM;
			goto out;
		}
	}
	if (src != SQLITE_DONE)
		goto out;
	*out = hits;
	hits = NULL;
	rc = SB_OK;
out:
	if (rc == SB_ERR_STORE && s->stopped && s->stopped(s->stop_ud))
		rc = SB_ERR_ABORTED;
	if (rc == SB_ERR_STORE && db && why_size && !why[0])
		snprintf(why, why_size, "the memory index failed: %s", sqlite3_errmsg(db));
	json_decref(hits);
	sqlite3_finalize(st);
	sqlite3_close(db);
	buf_free(&q);
	return rc;
}

/* ---- get and append ---- */

/* Normalises path and checks that it is a memory file. */
static int memory_norm(const char *path, char *out, size_t size, char *why, size_t why_size)
{
	if (beneath_normalize(path, out, size) != SB_OK || !memory_path_ok(out)) {
		snprintf(why, why_size,
		         "%s is not a memory file (MEMORY.md or memory/<name>.md in the workspace)",
		         path);
		return SB_ERR_PERM;
	}
	return SB_OK;
}

int memory_get(const char *workspace, const char *path, int64_t from, int64_t lines, char **out,
               int64_t *total, char *why, size_t why_size)
{
	return memory_get_until(workspace, path, from, lines, out, total, why, why_size, NULL,
	                        NULL);
}

int memory_get_until(const char *workspace, const char *path, int64_t from, int64_t lines,
                     char **out, int64_t *total, char *why, size_t why_size,
                     bool (*stopped)(void *), void *ud)
{
	char rel[BENEATH_PATH_MAX];
	char *text = NULL;
	size_t len = 0, pos = 0, start = 0, end = 0;
	int64_t line = 0;
	int root = -1, rc;

	*out = NULL;
	*total = 0;
	if (why_size)
		why[0] = '\0';
	if ((rc = memory_norm(path, rel, sizeof rel, why, why_size)))
		return rc;
	if (from < 1)
		from = 1;
	if (lines < 1 || lines > MEMORY_GET_LINES_MAX)
		lines = MEMORY_GET_LINES_MAX;
	if ((rc = beneath_root(workspace, &root)))
		return rc == SB_ERR_NOMEM ? rc : SB_ERR_IO;
	rc = beneath_read_all_until(root, rel, MEMORY_FILE_MAX, stopped, ud, &text, &len);
	close(root);
	if (rc == SB_ERR_ABORTED)
		return rc;
	if (rc == SB_ERR_NOTFOUND) {
		*out = strdup("");
		return *out ? SB_OK : SB_ERR_NOMEM;
	}
	if (rc == SB_ERR_PERM) {
		snprintf(why, why_size,
		         "%s is not a regular file (symbolic links are not followed)", rel);
		return rc;
	}
	if (rc == SB_ERR_TOOBIG) {
		snprintf(why, why_size, "%s is larger than %zu bytes", rel, MEMORY_FILE_MAX);
		return rc;
	}
	if (rc) {
		snprintf(why, why_size, "cannot read %s", rel);
		return rc == SB_ERR_NOMEM ? rc : SB_ERR_IO;
	}
	start = end = len;
	while (pos < len) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t next = nl ? (size_t)(nl - text) + 1 : len;

		if (++line % MEMORY_POLL_LINES == 0 && stopped && stopped(ud)) {
			free(text);
			return SB_ERR_ABORTED;
		}
		if (line >= from && line - from < lines) {
			if (line == from)
				start = pos;
			end = next;
		}
		pos = next;
	}
	*total = line;
	if (start > end)
		start = end;
	*out = strndup(text + start, end - start);
	free(text);
	return *out ? SB_OK : SB_ERR_NOMEM;
}

int memory_append(const char *workspace, const char *path, const char *text, char *why,
                  size_t why_size)
{
	return memory_append_until(workspace, path, text, why, why_size, NULL, NULL);
}

int memory_append_until(const char *workspace, const char *path, const char *text, char *why,
                        size_t why_size, bool (*stopped)(void *), void *ud)
{
	char rel[BENEATH_PATH_MAX];
	char *old = NULL;
	size_t old_len = 0, n = strlen(text);
	struct buf b;
	int root = -1, rc;

	if (why_size)
		why[0] = '\0';
	if ((rc = memory_norm(path, rel, sizeof rel, why, why_size)))
		return rc;
	if ((rc = beneath_root(workspace, &root)))
		return rc == SB_ERR_NOMEM ? rc : SB_ERR_IO;
	buf_init(&b, MEMORY_FILE_MAX);
	if (strchr(rel, '/')) {
		char dir[BENEATH_PATH_MAX];

		snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(rel, '/') - rel), rel);
		rc = beneath_mkdirs(root, dir, 0755);
		if (rc) {
			snprintf(why, why_size, "cannot create %s%s", dir,
			         rc == SB_ERR_PERM ? " (a symbolic link or a file is in the way)"
			                           : "");
			goto out;
		}
	}
	rc = beneath_read_all_until(root, rel, MEMORY_FILE_MAX, stopped, ud, &old, &old_len);
	if (rc == SB_ERR_NOTFOUND) {
		rc = SB_OK;
	} else if (rc == SB_ERR_ABORTED) {
		goto out;
	} else if (rc == SB_ERR_PERM) {
		snprintf(why, why_size,
		         "%s is not a regular file (symbolic links are not followed)", rel);
		goto out;
	} else if (rc == SB_ERR_TOOBIG) {
		snprintf(why, why_size, "%s is larger than %zu bytes already", rel,
		         MEMORY_FILE_MAX);
		goto out;
	} else if (rc) {
		snprintf(why, why_size, "cannot read %s", rel);
		goto out;
	}
	if (old_len)
		rc = buf_append(&b, old, old_len);
	if (!rc && old_len && old[old_len - 1] != '\n')
		rc = buf_puts(&b, "\n");
	if (!rc)
		rc = buf_append(&b, text, n);
	if (!rc && (n == 0 || text[n - 1] != '\n'))
		rc = buf_puts(&b, "\n");
	if (rc) {
		snprintf(why, why_size, "%s would be larger than %zu bytes", rel, MEMORY_FILE_MAX);
		rc = SB_ERR_TOOBIG;
		goto out;
	}
	rc = beneath_write_atomic_until(root, rel, b.data, b.len, 0644, stopped, ud);
	if (rc && rc != SB_ERR_ABORTED)
		snprintf(why, why_size, "cannot write %s%s", rel,
		         rc == SB_ERR_PERM ? " (not a regular file)" : "");
out:
	free(old);
	buf_free(&b);
	close(root);
	return rc;
}

/* ---- git ---- */

/* Memory commits of one process, one at a time: two sessions writing at
 * once would otherwise race for HEAD's lock. */
static pthread_mutex_t memory_git_mu = PTHREAD_MUTEX_INITIALIZER;

static void memory_git_why(char *why, size_t size, const char *what)
{
	const git_error *ge = git_error_last();

	if (why && size)
		snprintf(why, size, "%s%s%s", what, ge && ge->message ? ": " : "",
		         ge && ge->message ? ge->message : "");
}

static int memory_commit_once(git_repository *repo, int root, const char *const *paths, size_t n,
                              const char *message, char *commit, char *why, size_t why_size,
                              bool *retry)
{
	git_tree_update up[8];
	git_oid blobs[8], head_id, tree_id, commit_id, empty_id;
	git_commit *head = NULL;
	git_tree *base = NULL, *tree = NULL;
	git_treebuilder *tb = NULL;
	git_signature *sig = NULL;
	git_index *index = NULL;
	char *bytes[8] = {0};
	size_t lens[8] = {0};
	bool present[8] = {0};
	size_t nup = 0;
	int rc = SB_ERR_IO, grc;

	*retry = false;
	for (size_t i = 0; i < n; i++) {
		int frc = beneath_read_all(root, paths[i], MEMORY_FILE_MAX, &bytes[i], &lens[i]);

		if (frc == SB_ERR_NOTFOUND) {
			present[i] = false;
		} else if (frc) {
			snprintf(why, why_size, "cannot read %s to commit it", paths[i]);
			rc = frc == SB_ERR_NOMEM ? frc : SB_ERR_IO;
			goto out;
		} else {
			present[i] = true;
			if (git_blob_create_from_buffer(&blobs[i], repo, bytes[i], lens[i]) != 0) {
				memory_git_why(why, why_size, "cannot store the file in git");
				goto out;
			}
		}
	}
	if (git_reference_name_to_id(&head_id, repo, "HEAD") == 0) {
		if (git_commit_lookup(&head, repo, &head_id) != 0 ||
		    git_commit_tree(&base, head) != 0) {
			memory_git_why(why, why_size, "cannot read HEAD");
			goto out;
		}
	} else {
		/* No commit yet: the memory files start the history. */
		if (git_treebuilder_new(&tb, repo, NULL) != 0 ||
		    git_treebuilder_write(&empty_id, tb) != 0 ||
		    git_tree_lookup(&base, repo, &empty_id) != 0) {
			memory_git_why(why, why_size, "cannot make an empty tree");
			goto out;
		}
	}
	for (size_t i = 0; i < n; i++) {
		git_tree_entry *owned = NULL;

		if (!present[i]) {
			/* Removing what the tree does not hold is an error. */
			if (git_tree_entry_bypath(&owned, base, paths[i]) != 0)
				continue;
			git_tree_entry_free(owned);
		}
		memset(&up[nup], 0, sizeof up[nup]);
		up[nup].action = present[i] ? GIT_TREE_UPDATE_UPSERT : GIT_TREE_UPDATE_REMOVE;
		if (present[i])
			git_oid_cpy(&up[nup].id, &blobs[i]);
		up[nup].filemode = GIT_FILEMODE_BLOB;
		up[nup].path = paths[i];
		nup++;
	}
	if (git_tree_create_updated(&tree_id, repo, base, nup, up) != 0 ||
	    git_tree_lookup(&tree, repo, &tree_id) != 0) {
		memory_git_why(why, why_size, "cannot write the git tree");
		goto out;
	}
	if (head && git_oid_equal(&tree_id, git_tree_id(base))) {
		commit[0] = '\0'; /* nothing changed */
		rc = SB_OK;
		goto out;
	}
	if (git_signature_default(&sig, repo) != 0 &&
	    git_signature_now(&sig, "Switchboard", "switchboard@localhost") != 0) {
		memory_git_why(why, why_size, "cannot make a commit signature");
		goto out;
	}
	grc = git_commit_create(&commit_id, repo, "HEAD", sig, sig, NULL, message, tree,
	                        head ? 1 : 0, (const git_commit **)&head);
	if (grc != 0) {
		/* HEAD moved (another writer) or was locked: try again on top. */
		*retry = grc == GIT_EMODIFIED || grc == GIT_ELOCKED;
		memory_git_why(why, why_size, "git commit failed");
		goto out;
	}
	git_oid_tostr(commit, 41, &commit_id);
	/* The index follows, so the committed files do not show as changed;
	 * the operator's other staged changes are left alone. */
	if (git_repository_index(&index, repo) == 0 && git_index_read(index, 0) == 0) {
		bool ok = true;

		for (size_t i = 0; i < n && ok; i++) {
			git_index_entry e;

			if (!present[i]) {
				(void)git_index_remove_bypath(index, paths[i]);
				continue;
			}
			memset(&e, 0, sizeof e);
			e.mode = GIT_FILEMODE_BLOB;
			e.path = paths[i];
			ok = git_index_add_from_buffer(index, &e, bytes[i], lens[i]) == 0;
		}
		if (ok)
			(void)git_index_write(index);
	}
	rc = SB_OK;
out:
	for (size_t i = 0; i < n; i++)
		free(bytes[i]);
	git_index_free(index);
	git_signature_free(sig);
	git_tree_free(tree);
	git_tree_free(base);
	git_treebuilder_free(tb);
	git_commit_free(head);
	return rc;
}

int memory_commit(const char *workspace, const char *const *paths, size_t n, const char *message,
                  char *commit, char *why, size_t why_size)
{
	commit[0] = '\0';
	if (why_size)
		why[0] = '\0';
	for (size_t i = 0; i < n; i++)
		if (!memory_path_ok(paths[i]))
			return SB_ERR_INVAL;
	return memory_commit_files(workspace, paths, n, message, commit, why, why_size);
}

int memory_commit_files(const char *workspace, const char *const *paths, size_t n,
                        const char *message, char *commit, char *why, size_t why_size)
{
	git_repository *repo = NULL;
	struct stat st;
	const char *gwhy = NULL;
	int root = -1, rc = SB_ERR_IO;
	bool retry = false;

	commit[0] = '\0';
	if (why_size)
		why[0] = '\0';
	if (n == 0 || n > 8)
		return SB_ERR_INVAL;
	for (size_t i = 0; i < n; i++) {
		char norm[BENEATH_PATH_MAX];

		/* Only a normalised path below the work tree, never into .git. */
		if (beneath_normalize(paths[i], norm, sizeof norm) != SB_OK ||
		    strcmp(norm, paths[i]) != 0 || !norm[0] || strcmp(norm, ".git") == 0 ||
		    strncmp(norm, ".git/", 5) == 0)
			return SB_ERR_INVAL;
	}
	if (!workspace_git_dir_ok(workspace, &st)) {
		snprintf(why, why_size, "the workspace is not a git repository the gateway made");
		return SB_ERR_NOTFOUND;
	}
	if (!workspace_git_ready(&gwhy)) {
		snprintf(why, why_size, "%s", gwhy);
		return SB_ERR_IO;
	}
	if ((rc = beneath_root(workspace, &root)))
		return rc == SB_ERR_NOMEM ? rc : SB_ERR_IO;
	pthread_mutex_lock(&memory_git_mu);
	if (git_repository_open_ext(&repo, workspace, GIT_REPOSITORY_OPEN_NO_SEARCH, NULL) != 0) {
		memory_git_why(why, why_size, "cannot open the workspace's git repository");
		rc = SB_ERR_NOTFOUND;
		goto out;
	}
	for (int attempt = 0; attempt < 5; attempt++) {
		rc = memory_commit_once(repo, root, paths, n, message, commit, why, why_size,
		                        &retry);
		if (rc == SB_OK || !retry)
			break;
	}
out:
	pthread_mutex_unlock(&memory_git_mu);
	git_repository_free(repo);
	close(root);
	return rc;
}
