/*
 * eval_tree.h - the workspace copies of `switchboard eval`: a directory tree
 * copied without following symbolic links, and removed the same way.
 *
 * Blocking: the CLI only, while no loop serves.
 */
#ifndef SB_CLI_EVAL_TREE_H
#define SB_CLI_EVAL_TREE_H

#include <stddef.h>
#include <stdint.h>

#define EVAL_TREE_ENTRIES_MAX 200000           /* files, directories and links */
#define EVAL_TREE_BYTES_MAX ((int64_t)4 << 30) /* bytes of regular files */
#define EVAL_TREE_DEPTH_MAX 128

/* Copies the tree at src into dst (which must not exist; created 0700):
 * directories, regular files (their permission bits, without set-id bits)
 * and symbolic links as links (their targets are not read, so a link that
 * points outside src copies nothing from there). Other kinds (sockets,
 * FIFOs, devices) are left out, and so are the entry of src's top level named
 * skip (may be NULL) and a top-level ".git" that is a file (a link to a
 * repository elsewhere, which the copy must not write to). Past a limit above, or on any error, the partial copy
 * stays for the caller to remove and why says what failed. Returns SB_OK,
 * SB_ERR_TOOBIG, SB_ERR_EXISTS (dst exists), SB_ERR_IO, SB_ERR_NOMEM. */
int eval_tree_copy(const char *src, const char *dst, const char *skip, char *why,
                   size_t why_size);

/* Removes the tree at path, never following a symbolic link; directories a
 * run made read-only are made writable first. A missing path is SB_OK.
 * SB_OK or SB_ERR_IO (some entry could not be removed). */
int eval_tree_remove(const char *path);

#endif
