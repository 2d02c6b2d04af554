/*
 * common.h - what the built-in tools share: running file work on the libuv
 * thread pool, reading lines with a bound, atomic writes, glob matching and
 * the small input accessors.
 *
 * Internal to agents/tools/ (and its tests); not part of the tool contract.
 */
#ifndef SB_AGENTS_TOOLS_COMMON_H
#define SB_AGENTS_TOOLS_COMMON_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include <sys/stat.h>
#include <sys/types.h>

#include "agents/safety/paths.h"
#include "agents/tool.h"

/* What a tool's own output aims to stay under (the executor's cut is the
 * safety net, not the plan). */
#define TOOL_OUTPUT_BUDGET (TOOL_RESULT_MAX_DEFAULT - 1000)
#define TOOL_LINE_MAX 2000       /* characters shown of one line */
#define TOOL_BINARY_PROBE 8192   /* bytes checked for a NUL byte */
#define TOOL_FILE_MAX (16 << 20) /* largest file edit loads */

/* ---- thread-pool jobs ---- */

/* A file tool's time limit when the call has none (tool_ctx.timeout_ms 0):
 * the agent's default tool_timeout. */
#define TOOL_JOB_TIMEOUT_DEFAULT 120000

/* The outcome of a job, filled by its work function on a pool thread.
 * content: malloc'd text (NULL with rc SB_ERR_NOMEM). stop and timeout_ms
 * are the job's, for the work to read. */
struct tool_job_result {
	int rc;
	char *content;
	bool is_error;
	/* Set when the call is cancelled or reaches its time limit: the work
	 * stops soon (its inner loops poll it, tool_job_stopped) and hands
	 * back what it has, saying it was cut at the time limit. */
	const atomic_bool *stop;
	int64_t timeout_ms;
};

#ifdef SB_CRASH_POINTS
/* Tests only (builds with crash points): from the n-th poll of
 * tool_job_stopped on, counted over every job, it answers true as if the
 * job's deadline had just passed, so a test can stop a tool at an exact
 * point of its work. 0 turns it off. Any thread. */
void tool_job_test_stop_after(unsigned n);
bool tool_job_test_stop_now(void);
#endif

/* Has the job been asked to stop (res NULL: no job, never)? Pool thread
 * (any thread). */
static inline bool tool_job_stopped(const struct tool_job_result *res)
{
	if (!res)
		return false;
#ifdef SB_CRASH_POINTS
	if (tool_job_test_stop_now())
		return true;
#endif
	return res->stop && atomic_load_explicit(res->stop, memory_order_relaxed);
}

/* tool_job_stopped as a callback (ud: the const struct tool_job_result *),
 * for the stop polls of gateway/core/beneath.h. */
bool tool_job_stopped_cb(void *ud);

/* Runs on a pool thread. arg is the job's own copy of everything it needs
 * (it must not touch the tool_ctx, which is the loop's). */
typedef void (*tool_job_fn)(void *arg, struct tool_job_result *res);

/* Queues fn(arg) on ctx's loop's thread pool, bounded by ctx->timeout_ms
 * (TOOL_JOB_TIMEOUT_DEFAULT when 0); done(ud, ...) runs on the loop thread
 * afterwards, never from inside this call. Only tool_job_pool_share() jobs
 * of one loop are in the pool at once; the rest wait their turn (in
 * order). At the time limit the job is asked to stop (res->stop) and its
 * partial result is done's; one that does not stop within a second more is
 * answered with a time-out error and its late result dropped. arg is handed
 * over (arg_free(arg) runs once the job is finished or could not start;
 * arg_free may be NULL). *run (if run is not NULL) cancels: done runs at
 * once with SB_ERR_ABORTED, the work is asked to stop and its late result is
 * dropped. Returns SB_OK or SB_ERR_NOMEM (arg is freed then, done never
 * runs). Loop thread only. */
int tool_job_start(const struct tool_ctx *ctx, tool_job_fn fn, void *arg, void (*arg_free)(void *),
                   tool_done_cb done, void *ud, struct tool_run **run);

/* How many pool threads one loop's tool jobs may hold: all of libuv's pool
 * (UV_THREADPOOL_SIZE, 4 by default) but one, at least one. */
unsigned tool_job_pool_share(void);

/* done(ud, SB_OK, msg, is_error = true) on the loop's next turn, never
 * from inside this call, without using the pool. For errors found on the
 * loop thread after call has to return SB_OK. */
int tool_job_error(uv_loop_t *loop, const char *msg, tool_done_cb done, void *ud,
                   struct tool_run **run);

/* Sets res to an error result with formatted text. */
void tool_result_errorf(struct tool_job_result *res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Sets res to a successful result with formatted text. */
void tool_result_textf(struct tool_job_result *res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Sets res to a successful result holding text (copied). */
void tool_result_text(struct tool_job_result *res, const char *text);

/* ---- files ---- */

/* Reads a file line by line with a bound on what is kept of each line. */
struct tool_lines {
	FILE *f;
	char *chunk; /* read buffer */
	size_t pos, len;
	bool eof;
};

/* Reads fd (handed over: tool_lines_close closes it) line by line.
 * SB_OK or SB_ERR_NOMEM (fd closed then too). */
int tool_lines_open_fd(struct tool_lines *lr, int fd);

/* The next line into line (reset first; no newline; at most keep bytes kept,
 * *cut set when more were dropped). Returns 1 for a line, 0 at the end,
 * negative SB_ERR_* on failure (as -rc). */
int tool_lines_next(struct tool_lines *lr, char **line, size_t *line_len, size_t *line_cap,
                    size_t keep, bool *cut);

void tool_lines_close(struct tool_lines *lr);

/* Does data look binary (a NUL byte in its first TOOL_BINARY_PROBE bytes)? */
bool tool_is_binary(const char *data, size_t len);

/* Reads the first TOOL_BINARY_PROBE bytes of fd (pread: its offset is
 * kept) and says if it is binary. false when it cannot be read. */
bool tool_fd_is_binary(int fd);

/* mkdir -p for the parents of abs, a trusted path (tests build fixtures
 * with it; the tools use beneath_mkdirs). Blocking. */
int tool_mkdir_parents(const char *abs, char *why, size_t why_size);

/* The largest n <= len such that s[0..n) ends on a UTF-8 character
 * boundary. */
size_t tool_utf8_floor(const char *s, size_t len);

/* One directory entry; kind is TOOL_DIR, TOOL_FILE, TOOL_LINK or TOOL_OTHER
 * (of the entry itself: symlinks are not followed). */
enum tool_kind { TOOL_FILE = 0, TOOL_DIR, TOOL_LINK, TOOL_OTHER };

struct tool_dirent {
	char *name;
	enum tool_kind kind;
};

/* Lists the directory open at dirfd (borrowed; read from its own
 * descriptor), without "." and "..", sorted by name (strcmp), keeping at
 * most max entries; *more receives how many were left out. job (may be
 * NULL): its stop flag is polled at each entry; once set, the listing ends
 * there and SB_ERR_ABORTED is returned with what was read (sorted; *more
 * counts only what was seen). *out is the caller's (tool_dir_free), also
 * with SB_ERR_ABORTED. SB_OK, SB_ERR_ABORTED, SB_ERR_IO, SB_ERR_NOMEM. */
int tool_dir_list_fd(int dir_fd, size_t max, const struct tool_job_result *job,
                     struct tool_dirent **out, size_t *n, size_t *more);

/* tool_dir_list_fd of the directory at abs, a trusted path (tests). */
int tool_dir_list(const char *abs, size_t max, struct tool_dirent **out, size_t *n, size_t *more);
void tool_dir_free(struct tool_dirent *ents, size_t n);

/* ---- the workspace, beneath its directory fd ----
 *
 * Every path operation of the file tools resolves from the workspace's
 * directory fd with gateway/core/beneath.h: no symlink is followed, no
 * path leaves the workspace, and nothing is checked by name and then opened
 * again by name. Directory walks open each child from its parent's fd with
 * O_NOFOLLOW. The gateway's private paths (its configuration, home, store
 * and secret files: config.h) that lie inside the workspace are refused by
 * identity (device and inode), reading and writing alike. */

/* What a job copies from the tool_ctx on the loop thread. */
struct tool_fs_spec {
	char *workspace;
	char **priv; /* the private paths */
	size_t n_priv;
};

/* Copies ctx's workspace and private paths. SB_OK or SB_ERR_NOMEM. */
int tool_fs_spec_init(struct tool_fs_spec *s, const struct tool_ctx *ctx);
void tool_fs_spec_free(struct tool_fs_spec *s);

struct tool_fs_id {
	dev_t dev;
	ino_t ino;
};

struct tool_fs {
	int root; /* the workspace, O_PATH */
	struct stat root_st;
	struct tool_fs_id *priv; /* the private paths that exist */
	size_t n_priv;
};

/* Opens the workspace as the root and stats the private paths. SB_OK,
 * SB_ERR_IO (why says so) or SB_ERR_NOMEM. Pool thread. */
int tool_fs_open(struct tool_fs *fs, const struct tool_fs_spec *s, char *why, size_t why_size);
void tool_fs_close(struct tool_fs *fs);

/* Folds the model's path into rel ("" for the workspace itself), with the
 * messages of paths.h: empty, absolute, climbing above the workspace, too
 * long, and (mode not PATHS_EXISTING) inside .git. SB_OK or the code. */
int tool_fs_rel(const char *path, enum paths_mode mode, char *rel, size_t size, char *why,
                size_t why_size);

/* rel for the model: "." for the workspace. */
const char *tool_fs_shown(const char *rel);

/* A sentence for the model about rc, a beneath_* failure on rel (path is
 * the model's text): a symlink on the way (which leaves the workspace, or
 * which the tools do not follow), a missing file, a file where a directory
 * must be. Looks again only to explain; decides nothing. */
void tool_fs_why(const struct tool_fs *fs, const char *path, const char *rel, int rc, char *why,
                 size_t why_size);

/* Is st one of the private paths? */
bool tool_fs_private_st(const struct tool_fs *fs, const struct stat *st);

/* Is the directory at dirfd, or one of its parents below the workspace,
 * a private path? */
bool tool_fs_private_dir(const struct tool_fs *fs, int dirfd);

/* The directory part of rel ("" when it has none) into dir (size bytes).
 * SB_ERR_TOOBIG, with why set, when it does not fit. */
int tool_fs_dirname(const struct tool_fs *fs, const char *path, const char *rel, char *dir,
                    size_t size, char *why, size_t why_size);

/* Opens the parent directory of rel (not "") beneath the root, O_PATH,
 * into *pfd (the caller closes it) and points *last at rel's last
 * component. Refuses (SB_ERR_PERM, why set) a private parent or a private
 * last component. Other failures: beneath's codes, why set. */
int tool_fs_parent(const struct tool_fs *fs, const char *path, const char *rel, int *pfd,
                   const char **last, char *why, size_t why_size);

/* Opens rel's regular file for reading beneath the root (through
 * tool_fs_parent, O_NOFOLLOW), *fd the caller's, *st its fstat. why set on
 * failure. */
int tool_fs_open_file(const struct tool_fs *fs, const char *path, const char *rel, int *fd,
                      struct stat *st, char *why, size_t why_size);

/* Opens rel's directory for reading beneath the root into *fd (the
 * caller's); refuses a private one. why set on failure. */
int tool_fs_open_dir(const struct tool_fs *fs, const char *path, const char *rel, int *fd,
                     char *why, size_t why_size);

/* Opens the child name of the directory dirfd (O_NOFOLLOW: a symlink
 * swapped in fails) as a directory (dir) or a regular file for reading;
 * -1 when it cannot be, is not what was asked, or is private. */
int tool_fs_open_child(const struct tool_fs *fs, int dirfd, const char *name, bool dir);

/* ---- glob ---- */

/* Does the relative path match pattern? Segments are separated by '/'; each
 * is an fnmatch(3) pattern (a leading '.' is matched like any character),
 * and a "**" segment matches zero or more whole segments. */
bool tool_glob_match(const char *pattern, const char *path);

/* ---- input ---- */

/* Accessors for schema-validated input: the value, or def when absent. */
const char *tool_in_str(const json_t *input, const char *key, const char *def);
int64_t tool_in_int(const json_t *input, const char *key, int64_t def);
bool tool_in_bool(const json_t *input, const char *key, bool def);

/* For tool_def.read_only / concurrency_safe. */
bool tool_always(const json_t *input);
bool tool_never(const json_t *input);

#endif
