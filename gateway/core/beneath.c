/*
 * beneath.c - see beneath.h.
 */
#include "gateway/core/beneath.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gateway/core/crash.h"
#include "gateway/core/err.h"

#define BENEATH_RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
/* openat2 answers EAGAIN when a rename raced the lookup; a few tries. */
#define BENEATH_AGAIN_TRIES 8

enum beneath_mode { BENEATH_UNKNOWN = 0, BENEATH_OPENAT2, BENEATH_WALK };

/* What the kernel offers: probed once per process (a property of the host,
 * not of any instance), and the tests' override. */
static atomic_int beneath_mode = BENEATH_UNKNOWN;
static atomic_bool beneath_forced_walk = false;

void beneath_force_walk(bool on)
{
	atomic_store(&beneath_forced_walk, on);
}

static int beneath_probe(void)
{
	int m = atomic_load(&beneath_mode);
	const char *env;

	if (m != BENEATH_UNKNOWN)
		return m;
	env = getenv("SWITCHBOARD_BENEATH");
	if (env && strcmp(env, "walk") == 0) {
		m = BENEATH_WALK;
	} else {
		struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
		                       .resolve = BENEATH_RESOLVE};
		long fd = syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof how);

		if (fd >= 0)
			close((int)fd);
		m = fd < 0 && (errno == ENOSYS || errno == E2BIG || errno == EINVAL)
		        ? BENEATH_WALK
		        : BENEATH_OPENAT2;
	}
	atomic_store(&beneath_mode, m);
	return m;
}

static bool beneath_walk(void)
{
	return atomic_load(&beneath_forced_walk) || beneath_probe() == BENEATH_WALK;
}

bool beneath_uses_openat2(void)
{
	return !beneath_walk();
}

static int beneath_errno(int e)
{
	switch (e) {
	case ENOENT:
		return SB_ERR_NOTFOUND;
	case EEXIST:
	case ENOTEMPTY:
		return SB_ERR_EXISTS;
	case ELOOP:  /* a symlink where none is followed */
	case EXDEV:  /* openat2: the path would leave the root */
	case EACCES: /* file permissions */
	case EPERM:
	case ENXIO:   /* a socket or a FIFO without a reader */
	case ENOTDIR: /* a file, or a symlink, where a directory must be */
		return SB_ERR_PERM;
	case ENAMETOOLONG:
		return SB_ERR_TOOBIG;
	case ENOMEM:
		return SB_ERR_NOMEM;
	case EISDIR:
		return SB_ERR_INVAL;
	default:
		return SB_ERR_IO;
	}
}

int beneath_normalize(const char *path, char *out, size_t size)
{
	size_t n = 0;
	const char *p = path;

	if (!size)
		return SB_ERR_TOOBIG;
	out[0] = '\0';
	if (!path || path[0] == '/')
		return SB_ERR_PERM;
	while (*p) {
		const char *s = p;
		size_t len;

		while (*p && *p != '/')
			p++;
		len = (size_t)(p - s);
		while (*p == '/')
			p++;
		if (len == 0 || (len == 1 && s[0] == '.'))
			continue;
		if (len == 2 && s[0] == '.' && s[1] == '.') {
			char *slash;

			if (n == 0)
				return SB_ERR_PERM; /* above the root */
			out[n] = '\0';
			slash = strrchr(out, '/');
			n = slash ? (size_t)(slash - out) : 0;
			out[n] = '\0';
			continue;
		}
		if (n + (n ? 1 : 0) + len + 1 > size)
			return SB_ERR_TOOBIG;
		if (n)
			out[n++] = '/';
		memcpy(out + n, s, len);
		n += len;
		out[n] = '\0';
	}
	return SB_OK;
}

/* A refused component: a symlink (SB_ERR_PERM) or something else
 * (the errno's code). */
static int beneath_why(int dirfd, const char *name, int e)
{
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
		return SB_ERR_PERM;
	return beneath_errno(e);
}

/* The walk: opens rel (normalised, "" = the root) beneath root, every
 * component but the last as O_PATH | O_DIRECTORY | O_NOFOLLOW, the last
 * with oflags | O_NOFOLLOW. */
static int beneath_walk_open(int root, const char *rel, int oflags, mode_t mode, int *out_fd)
{
	char buf[BENEATH_PATH_MAX];
	char *name = buf, *slash;
	int fd, rc;

	*out_fd = -1;
	if (snprintf(buf, sizeof buf, "%s", rel) >= (int)sizeof buf)
		return SB_ERR_TOOBIG;
	if (!buf[0]) {
		fd = openat(root, ".", oflags | O_CLOEXEC, mode);
		if (fd < 0)
			return beneath_errno(errno);
		*out_fd = fd;
		return SB_OK;
	}
	fd = openat(root, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return beneath_errno(errno);
	while ((slash = strchr(name, '/'))) {
		int next;

		*slash = '\0';
		next = openat(fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			rc = beneath_why(fd, name, errno);
			close(fd);
			return rc;
		}
		close(fd);
		fd = next;
		name = slash + 1;
	}
	{
		int last = openat(fd, name, oflags | O_NOFOLLOW | O_CLOEXEC, mode);

		if (last < 0) {
			rc = beneath_why(fd, name, errno);
			close(fd);
			return rc;
		}
		close(fd);
		*out_fd = last;
	}
	return SB_OK;
}

/* Opens rel (normalised) beneath root by whichever means the kernel has. */
static int beneath_open_rel(int root, const char *rel, int oflags, mode_t mode, int *out_fd)
{
	*out_fd = -1;
	if (!beneath_walk()) {
		struct open_how how = {.flags = (unsigned)(oflags | O_CLOEXEC | O_NOFOLLOW),
		                       .resolve = BENEATH_RESOLVE};
		long fd = -1;

		/* openat2 refuses a mode without O_CREAT / O_TMPFILE. */
		if (oflags & (O_CREAT | __O_TMPFILE))
			how.mode = mode;
		for (int i = 0; i < BENEATH_AGAIN_TRIES; i++) {
			fd = syscall(SYS_openat2, root, rel[0] ? rel : ".", &how, sizeof how);
			if (fd >= 0 || errno != EAGAIN)
				break;
		}
		if (fd >= 0) {
			*out_fd = (int)fd;
			return SB_OK;
		}
		if (errno != ENOSYS)
			return beneath_errno(errno);
		atomic_store(&beneath_mode, BENEATH_WALK);
	}
	return beneath_walk_open(root, rel, oflags, mode, out_fd);
}

/* Splits rel (normalised, not "") into its parent directory, opened with
 * dflags | O_DIRECTORY beneath root, and its last component. */
static int beneath_parent(int root, const char *rel, int dflags, int *parent_fd, const char **last)
{
	char dir[BENEATH_PATH_MAX];
	const char *slash = strrchr(rel, '/');
	size_t n = slash ? (size_t)(slash - rel) : 0;

	*parent_fd = -1;
	if (n >= sizeof dir)
		return SB_ERR_TOOBIG;
	memcpy(dir, rel, n);
	dir[n] = '\0';
	*last = slash ? slash + 1 : rel;
	return beneath_open_rel(root, dir, dflags | O_DIRECTORY, 0, parent_fd);
}

int beneath_root(const char *dir, int *out_fd)
{
	int fd;
	struct stat st;

	*out_fd = -1;
	fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOTDIR)
			return SB_ERR_PERM;
		return beneath_errno(errno);
	}
	if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
		close(fd);
		return SB_ERR_PERM;
	}
	*out_fd = fd;
	return SB_OK;
}

int beneath_open(int root, const char *path, int oflags, mode_t mode, unsigned bflags, int *out_fd)
{
	char rel[BENEATH_PATH_MAX];
	struct stat st;
	int fd, rc;

	*out_fd = -1;
	if ((rc = beneath_normalize(path, rel, sizeof rel)))
		return rc;
	if (bflags & BENEATH_DIRECTORY)
		oflags |= O_DIRECTORY;
	/* A FIFO would block the open: open without waiting, check, then
	 * restore what the caller asked for. */
	if (bflags & BENEATH_REGULAR)
		oflags |= O_NONBLOCK | O_NOCTTY;
	if ((rc = beneath_open_rel(root, rel, oflags, mode, &fd)))
		return rc;
	if (fstat(fd, &st) != 0) {
		close(fd);
		return SB_ERR_IO;
	}
	if (S_ISLNK(st.st_mode) || ((bflags & BENEATH_REGULAR) && !S_ISREG(st.st_mode)) ||
	    ((bflags & BENEATH_DIRECTORY) && !S_ISDIR(st.st_mode))) {
		close(fd);
		return SB_ERR_PERM;
	}
	if ((bflags & BENEATH_REGULAR) && !(oflags & O_PATH)) {
		int fl = fcntl(fd, F_GETFL);

		if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
			close(fd);
			return SB_ERR_IO;
		}
	}
	*out_fd = fd;
	return SB_OK;
}

int beneath_stat(int root, const char *path, struct stat *st)
{
	char rel[BENEATH_PATH_MAX];
	const char *last;
	int pfd, rc;

	if ((rc = beneath_normalize(path, rel, sizeof rel)))
		return rc;
	if (!rel[0])
		return fstat(root, st) == 0 ? SB_OK : beneath_errno(errno);
	/* One component (normalised: never "." or ".."): its parent is the
	 * root itself, and a symlink there is not followed. */
	if (!strchr(rel, '/'))
		return fstatat(root, rel, st, AT_SYMLINK_NOFOLLOW) == 0 ? SB_OK
		                                                        : beneath_errno(errno);
	if ((rc = beneath_parent(root, rel, O_PATH, &pfd, &last)))
		return rc;
	rc = fstatat(pfd, last, st, AT_SYMLINK_NOFOLLOW) == 0 ? SB_OK : beneath_errno(errno);
	close(pfd);
	return rc;
}

int beneath_opendir(int root, const char *path, DIR **out)
{
	int fd, rc;

	*out = NULL;
	if ((rc = beneath_open(root, path, O_RDONLY, 0, BENEATH_DIRECTORY, &fd)))
		return rc;
	*out = fdopendir(fd);
	if (!*out) {
		rc = beneath_errno(errno);
		close(fd);
		return rc;
	}
	return SB_OK;
}

int beneath_mkdir(int root, const char *path, mode_t mode)
{
	char rel[BENEATH_PATH_MAX];
	const char *last;
	int pfd, rc;

	if ((rc = beneath_normalize(path, rel, sizeof rel)))
		return rc;
	if (!rel[0])
		return SB_ERR_EXISTS;
	if ((rc = beneath_parent(root, rel, O_PATH, &pfd, &last)))
		return rc;
	rc = mkdirat(pfd, last, mode) == 0 ? SB_OK : beneath_errno(errno);
	close(pfd);
	return rc;
}

int beneath_mkdirs(int root, const char *path, mode_t mode)
{
	char rel[BENEATH_PATH_MAX];
	char *name, *slash;
	int fd, rc;

	if ((rc = beneath_normalize(path, rel, sizeof rel)))
		return rc;
	fd = openat(root, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return beneath_errno(errno);
	for (name = rel; name && *name; name = slash ? slash + 1 : NULL) {
		int next;

		slash = strchr(name, '/');
		if (slash)
			*slash = '\0';
		if (mkdirat(fd, name, mode) != 0 && errno != EEXIST) {
			rc = beneath_errno(errno);
			close(fd);
			return rc;
		}
		next = openat(fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			rc = beneath_why(fd, name, errno);
			close(fd);
			return rc == SB_ERR_INVAL ? SB_ERR_PERM : rc;
		}
		close(fd);
		fd = next;
	}
	close(fd);
	return SB_OK;
}

int beneath_unlink(int root, const char *path, bool dir)
{
	char rel[BENEATH_PATH_MAX];
	const char *last;
	int pfd, rc;

	if ((rc = beneath_normalize(path, rel, sizeof rel)))
		return rc;
	if (!rel[0])
		return SB_ERR_PERM; /* never the root itself */
	if ((rc = beneath_parent(root, rel, O_PATH, &pfd, &last)))
		return rc;
	rc = unlinkat(pfd, last, dir ? AT_REMOVEDIR : 0) == 0 ? SB_OK : beneath_errno(errno);
	close(pfd);
	return rc;
}

int beneath_rename(int root, const char *from, const char *to)
{
	char a[BENEATH_PATH_MAX], b[BENEATH_PATH_MAX];
	const char *la, *lb;
	int pa = -1, pb = -1, rc;

	if ((rc = beneath_normalize(from, a, sizeof a)) ||
	    (rc = beneath_normalize(to, b, sizeof b)))
		return rc;
	if (!a[0] || !b[0])
		return SB_ERR_PERM;
	if ((rc = beneath_parent(root, a, O_PATH, &pa, &la)))
		goto out;
	if ((rc = beneath_parent(root, b, O_PATH, &pb, &lb)))
		goto out;
	rc = renameat(pa, la, pb, lb) == 0 ? SB_OK : beneath_errno(errno);
out:
	if (pa >= 0)
		close(pa);
	if (pb >= 0)
		close(pb);
	return rc;
}

int beneath_read_all(int root, const char *path, size_t max, char **out, size_t *len)
{
	return beneath_read_all_until(root, path, max, NULL, NULL, out, len);
}

/* What one read or write of the _until functions moves at most: the
 * distance between two polls of the stop callback. */
#define BENEATH_IO_CHUNK (1 << 20)

int beneath_read_all_until(int root, const char *path, size_t max, bool (*stopped)(void *),
                           void *ud, char **out, size_t *len)
{
	size_t cap = 4096, n = 0, want;
	char *b = NULL;
	int fd, rc;

	*out = NULL;
	*len = 0;
	if ((rc = beneath_open(root, path, O_RDONLY, 0, BENEATH_REGULAR, &fd)))
		return rc;
	rc = SB_ERR_NOMEM;
	b = malloc(cap);
	if (!b)
		goto out;
	for (;;) {
		ssize_t r;

		if (n + 1 >= cap) {
			char *nb;

			if (cap > max + 1) {
				rc = SB_ERR_TOOBIG;
				goto out;
			}
			nb = realloc(b, cap * 2);
			if (!nb)
				goto out;
			b = nb;
			cap *= 2;
		}
		if (stopped && stopped(ud)) {
			rc = SB_ERR_ABORTED;
			goto out;
		}
		want = cap - 1 - n;
		r = read(fd, b + n, want < BENEATH_IO_CHUNK ? want : BENEATH_IO_CHUNK);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = SB_ERR_IO;
			goto out;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > max) {
			rc = SB_ERR_TOOBIG;
			goto out;
		}
	}
	b[n] = '\0';
	*out = b;
	*len = n;
	b = NULL;
	rc = SB_OK;
out:
	free(b);
	close(fd);
	return rc;
}

int beneath_read_in(const char *dir, const char *path, size_t max, char **out, size_t *len)
{
	int root, rc;

	*out = NULL;
	*len = 0;
	if ((rc = beneath_root(dir, &root)))
		return rc;
	rc = beneath_read_all(root, path, max, out, len);
	close(root);
	return rc;
}

int beneath_write_atomic(int root, const char *path, const void *data, size_t len, mode_t mode)
{
	return beneath_write_atomic_until(root, path, data, len, mode, NULL, NULL);
}

int beneath_write_atomic_until(int root, const char *path, const void *data, size_t len,
                               mode_t mode, bool (*stopped)(void *), void *ud)
{
	char rel[BENEATH_PATH_MAX], tmp[256];
	const char *last, *p = data;
	unsigned char rnd[6];
	struct stat st;
	int pfd = -1, fd = -1, rc;
	bool created = false;

	if ((rc = beneath_normalize(path, rel, sizeof rel)))
		return rc;
	if (!rel[0])
		return SB_ERR_PERM;
	/* O_RDONLY, not O_PATH: the directory is fsync'd after the rename. */
	if ((rc = beneath_parent(root, rel, O_RDONLY, &pfd, &last)))
		return rc;
	if (fstatat(pfd, last, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (!S_ISREG(st.st_mode)) {
			rc = SB_ERR_PERM;
			goto out;
		}
		mode = st.st_mode & 07777; /* an executable stays one */
	} else if (errno != ENOENT) {
		rc = beneath_errno(errno);
		goto out;
	}
	if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
		rc = SB_ERR_IO;
		goto out;
	}
	snprintf(tmp, sizeof tmp, ".%.200s.sb-%02x%02x%02x%02x%02x%02x", last, rnd[0], rnd[1],
	         rnd[2], rnd[3], rnd[4], rnd[5]);
	fd = openat(pfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0) {
		rc = beneath_errno(errno);
		goto out;
	}
	created = true;
	if (fchmod(fd, mode) != 0) {
		rc = SB_ERR_IO;
		goto out;
	}
	while (len) {
		ssize_t w;

		if (stopped && stopped(ud)) {
			rc = SB_ERR_ABORTED;
			goto out;
		}
		w = write(fd, p, len < BENEATH_IO_CHUNK ? len : BENEATH_IO_CHUNK);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			rc = SB_ERR_IO;
			goto out;
		}
		p += w;
		len -= (size_t)w;
	}
	if (stopped && stopped(ud)) {
		rc = SB_ERR_ABORTED;
		goto out;
	}
	if (fsync(fd) != 0 || close(fd) != 0) {
		fd = -1;
		rc = SB_ERR_IO;
		goto out;
	}
	fd = -1;
	/* the last point at which a stop leaves the old file as it was */
	if (stopped && stopped(ud)) {
		rc = SB_ERR_ABORTED;
		goto out;
	}
	SB_CRASH_POINT("beneath.atomic.rename");
	/* rename replaces what is at last now, whatever it became since the
	 * check (a symlink is replaced, never followed; a directory refuses). */
	if (renameat(pfd, tmp, pfd, last) != 0) {
		rc = beneath_errno(errno);
		goto out;
	}
	created = false;
	(void)fsync(pfd);
	rc = SB_OK;
out:
	if (fd >= 0)
		close(fd);
	if (created)
		unlinkat(pfd, tmp, 0);
	if (pfd >= 0)
		close(pfd);
	return rc;
}
