/*
 * beneath.h - path operations confined beneath a directory fd.
 *
 * Every path the gateway takes from a workspace (the bootstrap files, the
 * file tools' arguments) is untrusted: a sandboxed command may have replaced
 * any component with a symbolic link, and may do so again between a check
 * and a use. These functions never check-then-open. Each resolves the path
 * from a directory fd (the root) in one step, in the kernel:
 *
 *   openat2(root, path, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 *                       RESOLVE_NO_MAGICLINKS)
 *
 * and, where the kernel has no openat2 (ENOSYS), by a walk that opens each
 * component with openat(parent, name, O_NOFOLLOW) from the fd of the one
 * before. Either way:
 *
 *   - an absolute path is refused (SB_ERR_PERM);
 *   - "." and empty components are skipped; ".." is folded lexically
 *     ("a/../b" is "b") and refused (SB_ERR_PERM) when it would climb above
 *     the root; no ".." reaches the kernel;
 *   - a symbolic link at any component, the last included, is refused
 *     (SB_ERR_PERM), and so are /proc-style magic links;
 *   - BENEATH_REGULAR refuses anything but a regular file (a FIFO is opened
 *     without blocking first, then refused); BENEATH_DIRECTORY anything but
 *     a directory (SB_ERR_PERM for both);
 *   - a file where a directory must be is SB_ERR_PERM too (the kernel does
 *     not say whether it was a symlink); a directory opened for writing
 *     SB_ERR_INVAL;
 *   - a missing component is SB_ERR_NOTFOUND, an existing one where
 *     O_EXCL asked for none SB_ERR_EXISTS, other failures SB_ERR_IO.
 *
 * Every fd these functions open is O_CLOEXEC. All of them block (file
 * system calls): the thread pool, a tool thread or the CLI, never the loop
 * while it serves. Thread-safe.
 */
#ifndef SB_CORE_BENEATH_H
#define SB_CORE_BENEATH_H

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

enum beneath_flags {
	BENEATH_REGULAR = 1 << 0,   /* the result must be a regular file */
	BENEATH_DIRECTORY = 1 << 1, /* the result must be a directory */
};

/* The longest path (bytes) these functions take. */
#define BENEATH_PATH_MAX 4096

/* Opens dir (a trusted path: the operator's configuration names it) as a
 * root for the functions below, O_PATH | O_DIRECTORY | O_CLOEXEC, following
 * symlinks in it as the operator wrote it. *out_fd is the caller's to
 * close. SB_OK, SB_ERR_NOTFOUND, SB_ERR_PERM (not a directory), SB_ERR_IO. */
int beneath_root(const char *dir, int *out_fd);

/* Opens path beneath root with oflags (O_RDONLY, O_WRONLY | O_CREAT, ...;
 * O_CLOEXEC and O_NOFOLLOW are always added; mode for O_CREAT) and bflags
 * (enum beneath_flags). *out_fd is the caller's to close. The codes above. */
int beneath_open(int root, const char *path, int oflags, mode_t mode, unsigned bflags, int *out_fd);

/* lstat of path beneath root: the parent directories are resolved without
 * following symlinks; the last component is not followed either (a
 * symlink's own stat comes back, S_ISLNK). path "" or "." is the root. */
int beneath_stat(int root, const char *path, struct stat *st);

/* Opens the directory at path beneath root for reading (readdir); *out is
 * the caller's to closedir. */
int beneath_opendir(int root, const char *path, DIR **out);

/* mkdir of path's last component beneath root (its parents must exist).
 * SB_ERR_EXISTS if something is there. */
int beneath_mkdir(int root, const char *path, mode_t mode);

/* mkdir -p beneath root: every missing directory of path is created with
 * mode; an existing symlink or non-directory on the way is SB_ERR_PERM. */
int beneath_mkdirs(int root, const char *path, mode_t mode);

/* Removes path's last component beneath root (a directory when dir). A
 * symlink there is removed itself, never its target. */
int beneath_unlink(int root, const char *path, bool dir);

/* Renames from to to, both beneath root (renameat; never across roots). */
int beneath_rename(int root, const char *from, const char *to);

/* Reads the regular file at path beneath root, at most max bytes, into
 * *out (NUL-terminated, the caller's to free) and *len. SB_ERR_TOOBIG when
 * it holds more than max. */
int beneath_read_all(int root, const char *path, size_t max, char **out, size_t *len);

/* beneath_read_all that calls stopped(ud) (may be NULL) before each read
 * of at most 1 MiB, and gives up with SB_ERR_ABORTED (nothing in *out)
 * once it answers true. Any thread (stopped runs on the caller's). */
int beneath_read_all_until(int root, const char *path, size_t max, bool (*stopped)(void *),
                           void *ud, char **out, size_t *len);

/* beneath_read_all from a fresh root at dir (beneath_root): for a caller
 * that reads one file of a workspace (HEARTBEAT.md, BOOT.md). */
int beneath_read_in(const char *dir, const char *path, size_t max, char **out, size_t *len);

/* Replaces (or creates) the regular file at path beneath root atomically:
 * a temporary file in the same directory, written, fsync'd, then
 * renameat over path, then the directory fsync'd. A reader sees the old
 * bytes or the new ones, never a mix; a crash leaves one or the other. What
 * is at path now must be absent or a regular file (a symlink or a
 * directory there: SB_ERR_PERM). The parents must exist. */
int beneath_write_atomic(int root, const char *path, const void *data, size_t len, mode_t mode);

/* beneath_write_atomic that calls stopped(ud) (may be NULL) before each
 * write of at most 1 MiB, before the fsync and before the rename; once it
 * answers true the temporary file is removed, path is left as it was, and
 * SB_ERR_ABORTED is returned. */
int beneath_write_atomic_until(int root, const char *path, const void *data, size_t len,
                               mode_t mode, bool (*stopped)(void *), void *ud);

/* Folds path lexically as described above into out (size bytes): no
 * leading "/", no ".", no "..", no empty components; "" for the root.
 * SB_ERR_PERM (absolute or climbing above the root), SB_ERR_TOOBIG. */
int beneath_normalize(const char *path, char *out, size_t size);

/* Whether openat2 is in use (false: the component walk). The first call
 * probes the kernel; SWITCHBOARD_BENEATH=walk in the environment forces the
 * walk (tests run both). */
bool beneath_uses_openat2(void);

/* Tests only: force the component walk (true) or return to the probe. */
void beneath_force_walk(bool on);

#endif
