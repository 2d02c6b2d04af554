/*
 * workspace.h - a workspace's prompt and the version it was built from.
 *
 * workspace_snapshot builds the system prompt of one turn (prompt.h) and
 * says which version of the workspace produced it:
 *
 *   - commit: the git commit id of HEAD (40 hex digits), or "none" when the
 *     workspace directory is not the top of a git repository (it is never
 *     searched for upwards) or the repository has no commit yet;
 *   - dirty: whether a bootstrap file considered for this prompt differs
 *     from HEAD: its bytes (as read for the prompt) are not the blob that
 *     HEAD's tree holds under its name, it is there but not committed, or
 *     committed but gone. Other files of the repository do not count. The
 *     comparison hashes the bytes as a git blob, so it needs no index and
 *     no scan of the working tree; checkout filters (autocrlf) are not
 *     applied. Without a commit, dirty is true when any file is present;
 *     outside git it is false;
 *   - hash: a BLAKE2b-256 of every present file considered, in prompt
 *     order: for each, its name, a NUL byte and the file's own BLAKE2b-256.
 *     Each file's own hash is in info.
 *
 * A cache keeps, per workspace, each file's bytes with the stat identity
 * (device, inode, size, mtime, ctime) they were read with; a turn stats the
 * files and reads only those whose identity changed. A file modified less
 * than two seconds before it was read could change again within the same
 * timestamp tick without its identity changing, so it is read again at the
 * next turn until it is older (git's "racily clean" rule). HEAD's tree
 * entries are cached by commit id; the repository stays open.
 *
 * libgit2 is initialised once per process on first use and shut down at
 * exit (atexit).
 *
 * Blocking: call from the thread pool or the CLI. The cache is thread-safe
 * (one lock per workspace).
 */
#ifndef SB_WORKSPACES_WORKSPACE_H
#define SB_WORKSPACES_WORKSPACE_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <stdint.h>

#include "gateway/core/buf.h"
#include "workspaces/prompt.h"

#define WORKSPACE_COMMIT_NONE "none"

/* Where one file of the prompt came from (present files only). */
struct workspace_file_version {
	char blob[41];    /* its bytes as a git blob id (hex), whether in git or not */
	bool committed;   /* HEAD's tree holds these very bytes under its name */
	int64_t mtime_ns; /* its modification time, unix nanoseconds */
};

struct workspace_version {
	char commit[41]; /* hex, or "none" */
	bool git;        /* the directory is a git repository */
	bool dirty;
	unsigned char hash[PROMPT_HASH_BYTES]; /* the combined hash */
	struct prompt_info info;               /* each file: present, size, hash, ... */
	struct workspace_file_version files[PROMPT_FILES_MAX]; /* as info.files */
};

struct workspace_cache;

struct workspace_cache_stats {
	uint64_t file_reads;  /* files read from disk */
	uint64_t file_reuses; /* files whose cached bytes were used */
	uint64_t tree_reads;  /* HEAD trees looked up */
	uint64_t head_reuses; /* HEAD taken from the cache (its files unchanged) */
};

/* A new, empty cache. SB_OK or SB_ERR_NOMEM. */
int workspace_cache_new(struct workspace_cache **out);
/* Frees the cache and closes its repositories. NULL is a no-op. */
void workspace_cache_free(struct workspace_cache *c);
/* Counters since the cache was made (for tests and status). */
void workspace_cache_stats(struct workspace_cache *c, struct workspace_cache_stats *out);

/* Appends the system prompt of the workspace at dir to out (as
 * workspace_prompt_build) and fills ver. c may be NULL (nothing cached).
 * Returns SB_OK, SB_ERR_NOTFOUND (dir is not a directory), SB_ERR_IO,
 * SB_ERR_TOOBIG, SB_ERR_NOMEM. A repository that cannot be read is treated
 * as no repository (commit "none"), never as an error. */
int workspace_snapshot(struct workspace_cache *c, const char *dir, const struct prompt_options *opt,
                       struct buf *out, struct workspace_version *ver);

/* Loads (workspaces/git_lazy.h) and initialises libgit2 for this process if
 * it is not yet (once, thread safe; the first failure is logged). false when
 * it cannot be, with *why (static text, why may be NULL) saying why. Any
 * thread. */
bool workspace_git_ready(const char **why);

/* Whether the gateway may open dir's repository: dir/.git is a directory,
 * not a link and not a "gitdir:" file, owned by the gateway's own uid, and
 * names no other directory as its common one (.git/commondir). A command
 * in the sandbox can write a workspace that has no .git: what it made there
 * must not lead the gateway's libgit2 to a repository on the host (to stamp
 * replies with its commit, or to commit a memory file into it). On false,
 * *st is unchanged. */
bool workspace_git_dir_ok(const char *dir, struct stat *st);

/* Lower-case hex of a 32-byte hash into out (65 bytes). */
void workspace_hash_hex(const unsigned char *hash, char *out);

/* The version as JSON (new reference, NULL on no memory):
 *   {"commit": "...", "dirty": false, "hash": "<hex>",
 *    "files": {"AGENTS.md": "<hex>", ...}}   (present files only)
 * With files false, only commit, dirty and hash. */
json_t *workspace_version_json(const struct workspace_version *v, bool files);

/* Scaffolds dir from the templates (scaffold.h) and, unless it is a git
 * repository already, runs git init and commits the bootstrap files present
 * ("Start the workspace"). The author is the repository's git configuration
 * (user.name, user.email) or "Switchboard <switchboard@localhost>". agent_id
 * (may be NULL) names the agent in IDENTITY.md. *created: files written;
 * commit (41 bytes, may be NULL): the new commit id, or "" when none was
 * made. Returns SB_OK, SB_ERR_IO (why says what failed), SB_ERR_NOMEM. */
int workspace_init(const char *dir, const char *agent_id, size_t *created, char *commit, char *why,
                   size_t why_size);

#endif
