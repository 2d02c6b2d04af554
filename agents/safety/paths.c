/*
 * paths.c - workspace path confinement (see paths.h).
 */
#include "agents/safety/paths.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gateway/core/buf.h"
#include "gateway/core/err.h"

#define PATHS_MAX_COMPONENTS 256

static void paths_why(char *why, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void paths_why(char *why, size_t size, const char *fmt, ...)
{
	va_list ap;

	if (!why || !size)
		return;
	va_start(ap, fmt);
	if (vsnprintf(why, size, fmt, ap) < 0)
		why[0] = '\0';
	va_end(ap);
}

/* strerror is not thread-safe and this runs on the thread pool
 * (_GNU_SOURCE: the GNU strerror_r, which returns the text). */
static const char *paths_strerror(int e, char *buf, size_t size)
{
	return strerror_r(e, buf, size);
}

int paths_workspace_real(const char *workspace, char **out, char *why, size_t why_size)
{
	char *real, eb[128];

	*out = NULL;
	if (!workspace || !*workspace) {
		paths_why(why, why_size, "this agent has no workspace");
		return SB_ERR_IO;
	}
	real = realpath(workspace, NULL);
	if (!real) {
		if (errno == ENOMEM)
			return SB_ERR_NOMEM;
		paths_why(why, why_size, "the workspace is not accessible: %s",
		          paths_strerror(errno, eb, sizeof eb));
		return SB_ERR_IO;
	}
	*out = real;
	return SB_OK;
}

/* Is p the directory root or below it? root has no trailing slash (realpath
 * output), except "/" itself. */
static bool paths_inside(const char *root, const char *p)
{
	size_t n = strlen(root);

	if (n == 1 && root[0] == '/')
		return p[0] == '/';
	return strncmp(p, root, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

/* ws + "/" + comps[0..k) into b. */
static int paths_join(struct buf *b, const char *ws, char *const *comps, size_t k)
{
	int rc;
	size_t i;

	buf_reset(b);
	if ((rc = buf_puts(b, ws)) != SB_OK)
		return rc;
	for (i = 0; i < k; i++) {
		if (b->len > 0 && b->data[b->len - 1] != '/' && (rc = buf_puts(b, "/")) != SB_OK)
			return rc;
		if ((rc = buf_puts(b, comps[i])) != SB_OK)
			return rc;
	}
	return SB_OK;
}

int paths_resolve(const char *workspace, const char *path, enum paths_mode mode, char **out_abs,
                  char **out_rel, char *why, size_t why_size)
{
	char *ws = NULL;
	int rc;

	*out_abs = NULL;
	if (out_rel)
		*out_rel = NULL;
	if (path && path[0] == '/') {
		paths_why(
		    why, why_size,
		    "absolute paths are not allowed: %s (give a path relative to the workspace)",
		    path);
		return SB_ERR_PERM;
	}
	if (path && *path && (rc = paths_workspace_real(workspace, &ws, why, why_size)) != SB_OK)
		return rc;
	rc = paths_resolve_real(ws, path, mode, out_abs, out_rel, why, why_size);
	free(ws);
	return rc;
}

int paths_resolve_real(const char *ws, const char *path, enum paths_mode mode, char **out_abs,
                       char **out_rel, char *why, size_t why_size)
{
	int rc = SB_ERR_NOMEM;
	char *copy = NULL, *real = NULL, *rel = NULL, eb[128];
	char *comps[PATHS_MAX_COMPONENTS];
	size_t n = 0, k, wslen;
	char *p, *s;
	struct buf b;
	struct stat st;
	bool write = mode != PATHS_EXISTING;

	buf_init(&b, PATH_MAX * 4);
	*out_abs = NULL;
	if (out_rel)
		*out_rel = NULL;
	if (!path || !*path) {
		paths_why(why, why_size, "the path is empty");
		rc = SB_ERR_INVAL;
		goto out;
	}
	if (path[0] == '/') {
		paths_why(
		    why, why_size,
		    "absolute paths are not allowed: %s (give a path relative to the workspace)",
		    path);
		rc = SB_ERR_PERM;
		goto out;
	}
	if (!ws || !*ws) {
		paths_why(why, why_size, "this agent has no workspace");
		rc = SB_ERR_IO;
		goto out;
	}
	rc = SB_ERR_NOMEM;
	if (!(copy = strdup(path)))
		goto out;

	/* Fold "." and ".." lexically; climbing above the root is an escape
	 * whatever the file system holds. */
	for (p = copy; p;) {
		s = strchr(p, '/');
		if (s)
			*s++ = '\0';
		if (*p == '\0' || strcmp(p, ".") == 0) {
			/* nothing */
		} else if (strcmp(p, "..") == 0) {
			if (n == 0) {
				paths_why(why, why_size, "path escapes the workspace: %s", path);
				rc = SB_ERR_PERM;
				goto out;
			}
			n--;
		} else {
			if (n == PATHS_MAX_COMPONENTS) {
				paths_why(why, why_size, "the path is too deep: %s", path);
				rc = SB_ERR_INVAL;
				goto out;
			}
			comps[n++] = p;
		}
		p = s;
	}

	/* The deepest existing prefix, resolved. k == 0 is the workspace,
	 * already real. */
	for (k = n;; k--) {
		if (k == 0) {
			if (!(real = strdup(ws)))
				goto out;
			break;
		}
		if ((rc = paths_join(&b, ws, comps, k)) != SB_OK) {
			if (rc == SB_ERR_TOOBIG) {
				paths_why(why, why_size, "the path is too long: %s", path);
				rc = SB_ERR_INVAL;
			}
			goto out;
		}
		real = realpath(b.data, NULL);
		if (real)
			break;
		if (errno == ENOMEM) {
			rc = SB_ERR_NOMEM;
			goto out;
		}
		if (errno == ENOTDIR) {
			paths_why(why, why_size, "not a directory: a parent of %s is a file", path);
			rc = SB_ERR_NOTFOUND;
			goto out;
		}
		if (errno != ENOENT || k == 0) {
			paths_why(why, why_size, "cannot resolve %s: %s", path,
			          paths_strerror(errno, eb, sizeof eb));
			rc = SB_ERR_IO;
			goto out;
		}
	}
	if (!paths_inside(ws, real)) {
		paths_why(why, why_size, "path escapes the workspace (through a symlink): %s",
		          path);
		rc = SB_ERR_PERM;
		goto out;
	}
	if (k < n) {
		if (!write || mode == PATHS_WRITE_EXISTING) {
			paths_why(why, why_size, "no such file or directory: %s", path);
			rc = SB_ERR_NOTFOUND;
			goto out;
		}
		/* The first missing component: a dangling symlink there points
		 * somewhere we cannot check, and creating through it would
		 * follow it. */
		if ((rc = paths_join(&b, real, comps + k, 1)) != SB_OK)
			goto out;
		if (lstat(b.data, &st) == 0) {
			paths_why(why, why_size,
			          "path goes through a symlink whose target does not exist: %s",
			          path);
			rc = SB_ERR_PERM;
			goto out;
		}
		if ((rc = paths_join(&b, real, comps + k, n - k)) != SB_OK) {
			if (rc == SB_ERR_TOOBIG) {
				paths_why(why, why_size, "the path is too long: %s", path);
				rc = SB_ERR_INVAL;
			}
			goto out;
		}
		free(real);
		real = buf_steal(&b);
		rc = SB_ERR_NOMEM;
		if (!real)
			goto out;
	}

	wslen = strlen(ws);
	if (strcmp(real, ws) == 0)
		rel = strdup(".");
	else
		rel = strdup(real + (wslen == 1 ? 1 : wslen + 1));
	rc = SB_ERR_NOMEM;
	if (!rel)
		goto out;
	if (write && (strcmp(rel, ".git") == 0 || strncmp(rel, ".git/", 5) == 0)) {
		paths_why(why, why_size,
		          "refusing to write inside the workspace's .git directory: %s (use git "
		          "through bash instead)",
		          path);
		rc = SB_ERR_PERM;
		goto out;
	}
	*out_abs = real;
	real = NULL;
	if (out_rel) {
		*out_rel = rel;
		rel = NULL;
	}
	rc = SB_OK;
out:
	if (rc == SB_ERR_NOMEM)
		paths_why(why, why_size, "out of memory");
	buf_free(&b);
	free(rel);
	free(real);
	free(copy);
	return rc;
}
