/*
 * eval_tree.c - copying and removing the workspace copies of `switchboard
 * eval` (eval_tree.h). Every entry is opened from its parent's fd with
 * O_NOFOLLOW, so no symbolic link in the tree is ever followed.
 */
#include "gateway/cli/eval_tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/core/err.h"

struct eval_tree {
	size_t entries;
	int64_t bytes;
	char *why;
	size_t why_size;
	const char *skip; /* a name left out of the top level */
};

static int eval_tree_fail(struct eval_tree *t, int rc, const char *what, const char *name)
{
	if (!t->why[0])
		snprintf(t->why, t->why_size, "%s %s: %s", what, name,
		         rc == SB_ERR_TOOBIG ? "over the limit" : strerror(errno));
	return rc;
}

static int eval_copy_file(struct eval_tree *t, int sfd, int dfd, const char *name,
                          const struct stat *st)
{
	char chunk[1 << 16];
	int in = -1, out = -1, rc = SB_ERR_IO;
	bool copied = false;
	ssize_t n;

	in = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (in < 0)
		return eval_tree_fail(t, SB_ERR_IO, "cannot read", name);
	out = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
	             (st->st_mode & 0777) | 0600);
	if (out < 0) {
		eval_tree_fail(t, SB_ERR_IO, "cannot create", name);
		goto out;
	}
	/* In the kernel where it can (no copy through user space; a reflink
	 * on file systems that share extents); by reading where it cannot. */
	for (;;) {
		ssize_t c = copy_file_range(in, NULL, out, NULL, (size_t)1 << 30, 0);

		if (c > 0) {
			t->bytes += c;
			if (t->bytes > EVAL_TREE_BYTES_MAX) {
				rc = eval_tree_fail(t, SB_ERR_TOOBIG,
				                    "the workspace is larger than 4 GiB at", name);
				goto out;
			}
			copied = true;
			continue;
		}
		if (c == 0) {
			rc = SB_OK;
			goto out;
		}
		if (errno == EINTR)
			continue;
		if (copied || (errno != EXDEV && errno != ENOSYS && errno != EINVAL &&
		               errno != EOPNOTSUPP && errno != EPERM)) {
			eval_tree_fail(t, SB_ERR_IO, "cannot copy", name);
			goto out;
		}
		break;
	}
	while ((n = read(in, chunk, sizeof chunk)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			eval_tree_fail(t, SB_ERR_IO, "cannot read", name);
			goto out;
		}
		t->bytes += n;
		if (t->bytes > EVAL_TREE_BYTES_MAX) {
			rc = eval_tree_fail(t, SB_ERR_TOOBIG,
			                    "the workspace is larger than 4 GiB at", name);
			goto out;
		}
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(out, chunk + off, (size_t)(n - off));

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				eval_tree_fail(t, SB_ERR_IO, "cannot write", name);
				goto out;
			}
			off += w;
		}
	}
	rc = SB_OK;
out:
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out) != 0 && rc == SB_OK)
		rc = eval_tree_fail(t, SB_ERR_IO, "cannot write", name);
	return rc;
}

/* Copies the directory sfd's entries into dfd. */
static int eval_copy_dir(struct eval_tree *t, int sfd, int dfd, int depth)
{
	DIR *d;
	struct dirent *de;
	int dup_fd, rc = SB_OK;

	if (depth > EVAL_TREE_DEPTH_MAX) {
		errno = ELOOP;
		return eval_tree_fail(t, SB_ERR_TOOBIG, "directories nested deeper than 128 at",
		                      ".");
	}
	dup_fd = dup(sfd);
	if (dup_fd < 0 || !(d = fdopendir(dup_fd))) {
		if (dup_fd >= 0)
			close(dup_fd);
		return eval_tree_fail(t, SB_ERR_IO, "cannot list", ".");
	}
	while (rc == SB_OK && (errno = 0, de = readdir(d))) {
		const char *name = de->d_name;
		struct stat st;

		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			continue;
		if (depth == 0 && t->skip && strcmp(name, t->skip) == 0)
			continue;
		if (++t->entries > EVAL_TREE_ENTRIES_MAX) {
			rc = eval_tree_fail(t, SB_ERR_TOOBIG,
			                    "the workspace has more than 200000 entries at", name);
			break;
		}
		if (fstatat(sfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			rc = eval_tree_fail(t, SB_ERR_IO, "cannot stat", name);
			break;
		}
		if (S_ISDIR(st.st_mode)) {
			int s2, d2;

			if (mkdirat(dfd, name, 0700) != 0) {
				rc = eval_tree_fail(t, SB_ERR_IO, "cannot create", name);
				break;
			}
			s2 = openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			d2 = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (s2 < 0 || d2 < 0)
				rc = eval_tree_fail(t, SB_ERR_IO, "cannot open", name);
			else
				rc = eval_copy_dir(t, s2, d2, depth + 1);
			if (rc == SB_OK && fchmod(d2, (st.st_mode & 0777) | 0700) != 0)
				rc = eval_tree_fail(t, SB_ERR_IO, "cannot set the mode of", name);
			if (s2 >= 0)
				close(s2);
			if (d2 >= 0)
				close(d2);
		} else if (S_ISREG(st.st_mode)) {
			/* A ".git" file names the repository's real directory
			 * elsewhere (a linked worktree, a submodule): a copy of
			 * it would let the copy write to the operator's
			 * repository. */
			if (depth == 0 && strcmp(name, ".git") == 0)
				continue;
			rc = eval_copy_file(t, sfd, dfd, name, &st);
		} else if (S_ISLNK(st.st_mode)) {
			char target[4097];
			ssize_t n = readlinkat(sfd, name, target, sizeof target - 1);

			if (n < 0) {
				rc = eval_tree_fail(t, SB_ERR_IO, "cannot read the link", name);
				break;
			}
			target[n] = '\0';
			if (symlinkat(target, dfd, name) != 0)
				rc = eval_tree_fail(t, SB_ERR_IO, "cannot create the link", name);
		}
		/* Sockets, FIFOs and devices are not part of a workspace's content. */
	}
	if (rc == SB_OK && errno != 0)
		rc = eval_tree_fail(t, SB_ERR_IO, "cannot list", ".");
	closedir(d);
	return rc;
}

int eval_tree_copy(const char *src, const char *dst, const char *skip, char *why, size_t why_size)
{
	struct eval_tree t = {.why = why, .why_size = why_size, .skip = skip};
	int sfd = -1, dfd = -1, rc;

	why[0] = '\0';
	/* src is the operator's own path (the configuration names it). */
	sfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0) {
		snprintf(why, why_size, "cannot open %s: %s", src, strerror(errno));
		return SB_ERR_IO;
	}
	if (mkdir(dst, 0700) != 0) {
		rc = errno == EEXIST ? SB_ERR_EXISTS : SB_ERR_IO;
		snprintf(why, why_size, "cannot create %s: %s", dst, strerror(errno));
		close(sfd);
		return rc;
	}
	dfd = open(dst, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		snprintf(why, why_size, "cannot open %s: %s", dst, strerror(errno));
		close(sfd);
		return SB_ERR_IO;
	}
	rc = eval_copy_dir(&t, sfd, dfd, 0);
	close(sfd);
	close(dfd);
	return rc;
}

/* Removes the entries of the directory fd (made writable first). */
static int eval_remove_dir(int fd, int depth)
{
	DIR *d;
	struct dirent *de;
	int dup_fd, rc = SB_OK;

	if (depth > EVAL_TREE_DEPTH_MAX * 4)
		return SB_ERR_IO;
	(void)fchmod(fd, 0700);
	dup_fd = dup(fd);
	if (dup_fd < 0 || !(d = fdopendir(dup_fd))) {
		if (dup_fd >= 0)
			close(dup_fd);
		return SB_ERR_IO;
	}
	while ((de = readdir(d))) {
		const char *name = de->d_name;
		struct stat st;
		int sub;

		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			continue;
		if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0 || eval_remove_dir(sub, depth + 1) != SB_OK)
				rc = SB_ERR_IO;
			if (sub >= 0)
				close(sub);
			if (unlinkat(fd, name, AT_REMOVEDIR) != 0)
				rc = SB_ERR_IO;
		} else if (unlinkat(fd, name, 0) != 0) {
			rc = SB_ERR_IO;
		}
	}
	closedir(d);
	return rc;
}

int eval_tree_remove(const char *path)
{
	struct stat st;
	int fd, rc;

	if (lstat(path, &st) != 0)
		return errno == ENOENT ? SB_OK : SB_ERR_IO;
	if (!S_ISDIR(st.st_mode))
		return unlink(path) == 0 ? SB_OK : SB_ERR_IO;
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return SB_ERR_IO;
	rc = eval_remove_dir(fd, 0);
	close(fd);
	if (rmdir(path) != 0)
		rc = SB_ERR_IO;
	return rc;
}
