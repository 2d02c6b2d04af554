/*
 * fsutil.h - small blocking file helpers for the CLI and start-up paths
 * (never the loop thread while it serves).
 */
#ifndef SB_CORE_FSUTIL_H
#define SB_CORE_FSUTIL_H

#include <stddef.h>
#include <sys/types.h>

/* mkdir -p with mode for each created directory; a directory that exists
 * costs one system call. SB_OK or SB_ERR_IO. */
int fs_mkdirs(const char *path, mode_t mode);

/* Creates path with mode and writes data, durably (fsync); SB_ERR_EXISTS if
 * it is already there (never overwrites), SB_ERR_IO on failure. */
int fs_write_new(const char *path, const void *data, size_t len, mode_t mode);

/* Reads a whole file (at most max bytes) into *out (NUL-terminated; free it).
 * SB_ERR_NOTFOUND, SB_ERR_TOOBIG, SB_ERR_IO. */
int fs_read_all(const char *path, size_t max, char **out, size_t *len);

#endif
