/*
 * paths.h - confines the paths a model gives to the agent's workspace.
 *
 * A tool's path argument is untrusted text. paths_resolve turns it into an
 * absolute path that is inside the workspace's real path, or refuses it with a
 * message for the model:
 *
 *   - absolute paths are refused (paths are relative to the workspace);
 *   - ".." that climbs above the workspace is refused ("path escapes the
 *     workspace: ../x"); "." and ".." inside it are folded lexically first;
 *   - symlinks are resolved (realpath) and the result compared with the
 *     workspace's real path, so a symlink, or a symlinked parent directory,
 *     whose target leaves the workspace is refused;
 *   - a path that does not exist yet (PATHS_WRITE) is resolved through its
 *     deepest existing parent; a dangling symlink on the way is refused (its
 *     target could be anywhere);
 *   - PATHS_WRITE refuses anything inside the workspace's .git directory.
 *
 * This is a check for the gates (matching rules, wording refusals), not what
 * the file tools open: they open every path beneath the workspace's
 * directory fd without following symlinks (agents/tools/common.h,
 * gateway/core/beneath.h), so a symlink swapped in after this check leads
 * nowhere.
 *
 * Blocking (realpath, lstat): call it from the thread pool, not the loop.
 * Thread-safe.
 */
#ifndef SB_AGENTS_PATHS_H
#define SB_AGENTS_PATHS_H

#include <stddef.h>

enum paths_mode {
	PATHS_EXISTING = 0,  /* the path must exist (read, ls, grep, glob, edit) */
	PATHS_WRITE,         /* may not exist yet; never inside .git (write, edit) */
	PATHS_WRITE_EXISTING /* must exist, never inside .git (edit) */
};

/* Resolves path (relative to workspace) per the rules above.
 * workspace: the workspace directory (borrowed). path: the model's text.
 * On SB_OK, *out_abs receives the absolute, resolved path and *out_rel (if
 * out_rel is not NULL) the same path relative to the workspace's real path
 * ("." for the workspace itself); both are the caller's to free.
 * Returns SB_OK; SB_ERR_INVAL (empty path); SB_ERR_PERM (absolute, escapes,
 * .git); SB_ERR_NOTFOUND (PATHS_EXISTING and it does not exist); SB_ERR_IO
 * (the workspace or a parent cannot be resolved); SB_ERR_NOMEM. On every
 * error why holds a sentence for the model. */
int paths_resolve(const char *workspace, const char *path, enum paths_mode mode, char **out_abs,
                  char **out_rel, char *why, size_t why_size);

/* paths_resolve with the workspace's real path (paths_workspace_real) given:
 * no realpath of it again. */
int paths_resolve_real(const char *ws_real, const char *path, enum paths_mode mode, char **out_abs,
                       char **out_rel, char *why, size_t why_size);

/* The workspace's real path (realpath) in *out (caller frees). SB_OK,
 * SB_ERR_IO (why says so) or SB_ERR_NOMEM. */
int paths_workspace_real(const char *workspace, char **out, char *why, size_t why_size);

#endif
