/*
 * history.h - a workspace repository's history for the operator: commits
 * (git log, optionally of one file), the files of a version, a file's text
 * at a version, and the diff between two versions (or a version and the
 * files on disk). Everything is read from git's objects with libgit2; no
 * path of the working tree is opened except by libgit2's own work-tree diff,
 * which never follows symlinks out of the repository.
 *
 * Versions ("rev") are a commit id (4 to 40 hex digits, a unique prefix) or
 * HEAD, HEAD~N; as the second side of a diff also "WORKTREE" (the files on
 * disk). Anything else is SB_ERR_INVAL, so no revision syntax that reads
 * other state (reflogs, remotes) is reachable.
 *
 * Results are JSON (new references). Blocking: the thread pool or the CLI.
 * Returns SB_OK; SB_ERR_NOTFOUND (dir is not the top of a git repository,
 * or no such version or file); SB_ERR_INVAL (a bad rev or path); SB_ERR_IO
 * (the repository cannot be read); SB_ERR_NOMEM.
 */
#ifndef SB_WORKSPACES_HISTORY_H
#define SB_WORKSPACES_HISTORY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define WORKSPACE_WORKTREE "WORKTREE"
#define WORKSPACE_DIFF_FILES_MAX 1000             /* files one diff lists */
#define WORKSPACE_SHOW_LOAD_MAX ((size_t)8 << 20) /* a file bigger is not loaded to show */

/* {"head": id|null, "commits": [{id, parents, summary, message, author,
 * email, time (unix ms)}]}: newest first from HEAD, at most limit (1..1000);
 * with path, only commits that changed that file. */
int workspace_git_log(const char *dir, const char *path, size_t limit, json_t **out);

/* {"rev": id, "files": [{path, size, blob}]}: every file of the version
 * (rev NULL = HEAD), sorted by path, at most 10,000. */
int workspace_git_files(const char *dir, const char *rev, json_t **out);

/* {"rev": id, "path", "size", "blob", "binary", "text", "truncated"}: the
 * file's bytes at the version, text cut at max bytes (binary files: no
 * text). A file of more than WORKSPACE_SHOW_LOAD_MAX bytes is not read:
 * no text, "truncated" and "tooLarge" true. */
int workspace_git_show(const char *dir, const char *rev, const char *path, size_t max,
                       json_t **out);

/* {"from": id, "to": id|"WORKTREE", "files": [{path, oldPath, status,
 * additions, deletions, binary, tooLarge, patch}], "truncated",
 * "filesTotal"}: the unified diff (3 lines of context) between two
 * versions; to NULL = HEAD; path limits it to one file. Patches stop after
 * max bytes in all; after that, and for a file bigger than max (tooLarge),
 * no content is read (no patch, additions or deletions). At most
 * WORKSPACE_DIFF_FILES_MAX files are listed (truncated, filesTotal counts
 * them all). Paths, names and messages that are not UTF-8 come with U+FFFD
 * in place of the bad bytes (every function here). */
int workspace_git_diff(const char *dir, const char *from, const char *to, const char *path,
                       size_t max, json_t **out);

/* The version of the working tree at dir, for a report: commit receives
 * HEAD's id (40 hex digits, or "none" before the first commit) and *dirty
 * whether anything differs from it: a change staged or not, an untracked
 * file that .gitignore does not exclude, a deleted file (submodules are not
 * looked into). SB_ERR_NOTFOUND when dir is not the top of a work tree
 * (commit "none", dirty false); SB_ERR_IO when the status cannot be read. */
int workspace_git_state(const char *dir, char commit[41], bool *dirty);

#endif
