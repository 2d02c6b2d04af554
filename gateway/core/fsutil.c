/*
 * fsutil.c - see fsutil.h.
 */
#include "gateway/core/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/core/crash.h"
#include "gateway/core/err.h"

int fs_mkdirs(const char *path, mode_t mode)
{
	char tmp[PATH_MAX];
	size_t n;

	if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
		return SB_ERR_TOOBIG;
	n = strlen(tmp);
	while (n > 1 && tmp[n - 1] == '/')
		tmp[--n] = '\0';
	/* Mostly the directory is there already (a run's sessions directory,
	 * asked for per message): one call says so. Only a missing parent
	 * sends it down the path. */
	if (mkdir(tmp, mode) == 0 || errno == EEXIST)
		return SB_OK;
	if (errno != ENOENT)
		return SB_ERR_IO;
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, mode) != 0 && errno != EEXIST)
			return SB_ERR_IO;
		*p = '/';
	}
	if (mkdir(tmp, mode) != 0 && errno != EEXIST)
		return SB_ERR_IO;
	return SB_OK;
}

int fs_write_new(const char *path, const void *data, size_t len, mode_t mode)
{
	char tmp[PATH_MAX];
	const char *p = data;
	int fd, rc = SB_ERR_IO;

	if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
		return SB_ERR_TOOBIG;
	if (access(path, F_OK) == 0)
		return SB_ERR_EXISTS;
	/* The data goes to path.tmp first and is linked to path only when it
	 * is whole and synced: a crash never leaves a partial file at path,
	 * which a later run would take as written. A path.tmp left by such a
	 * crash is replaced. */
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (fd < 0)
		return SB_ERR_IO;
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			goto out;
		p += n;
		len -= (size_t)n;
	}
	if (fsync(fd) != 0)
		goto out;
	rc = SB_OK;
out:
	if (close(fd) != 0)
		rc = SB_ERR_IO;
	if (rc == SB_OK) {
		SB_CRASH_POINT("fs.write_new.synced");
		/* link, unlike rename, never replaces: the O_EXCL of path. */
		if (link(tmp, path) != 0)
			rc = errno == EEXIST ? SB_ERR_EXISTS : SB_ERR_IO;
		else
			SB_CRASH_POINT("fs.write_new.linked");
	}
	unlink(tmp);
	return rc;
}

int fs_read_all(const char *path, size_t max, char **out, size_t *len)
{
	FILE *f = fopen(path, "rbe");
	char *data = NULL;
	size_t n = 0, cap = 0;
	int rc = SB_ERR_IO;

	*out = NULL;
	if (!f)
		return errno == ENOENT ? SB_ERR_NOTFOUND : SB_ERR_IO;
	for (;;) {
		size_t got;

		if (n + 4096 + 1 > cap) {
			char *p;

			cap = cap ? cap * 2 : 8192;
			p = realloc(data, cap);
			if (!p) {
				rc = SB_ERR_NOMEM;
				goto out;
			}
			data = p;
		}
		got = fread(data + n, 1, cap - n - 1, f);
		n += got;
		if (n > max) {
			rc = SB_ERR_TOOBIG;
			goto out;
		}
		if (got == 0)
			break;
	}
	if (ferror(f))
		goto out;
	data[n] = '\0';
	*out = data;
	data = NULL;
	if (len)
		*len = n;
	rc = SB_OK;
out:
	free(data);
	fclose(f);
	return rc;
}
