/*
 * test_beneath.c - path operations beneath a directory fd
 * (gateway/core/beneath.h), each case run twice: with openat2 and with the
 * component walk the gateway falls back to when the kernel has no openat2.
 *
 * The tree: root/a/b/c/f (the workspace) and out/a/b/c/f (outside, holding
 * "SECRET"). Each case replaces one component of root's path with a symlink
 * to the same component outside, and every operation must refuse it and
 * leave outside untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/core/beneath.h"
#include "gateway/core/err.h"

struct tree {
	char base[256];
	char root[300];
	char out[300];
	int rootfd;
};

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static char *slurp(const char *path)
{
	static char buf[256];
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return NULL;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

static void mk_side(const char *top, const char *content)
{
	char p[400];

	assert_int_equal(mkdir(top, 0700), 0);
	snprintf(p, sizeof p, "%s/a", top);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof p, "%s/a/b", top);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof p, "%s/a/b/c", top);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof p, "%s/a/b/c/f", top);
	put(p, content);
}

static int tree_setup(void **state)
{
	struct tree *t = calloc(1, sizeof *t);
	const char *tmp = getenv("TMPDIR");

	assert_non_null(t);
	snprintf(t->base, sizeof t->base, "%s/beneathXXXXXX", tmp && *tmp ? tmp : "/tmp");
	assert_non_null(mkdtemp(t->base));
	snprintf(t->root, sizeof t->root, "%s/root", t->base);
	snprintf(t->out, sizeof t->out, "%s/out", t->base);
	mk_side(t->root, "inside");
	mk_side(t->out, "SECRET");
	assert_int_equal(beneath_root(t->root, &t->rootfd), SB_OK);
	*state = t;
	return 0;
}

static int tree_teardown(void **state)
{
	struct tree *t = *state;
	char cmd[400];

	close(t->rootfd);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->base);
	assert_int_equal(system(cmd), 0);
	free(t);
	beneath_force_walk(false);
	return 0;
}

static int walk_setup(void **state)
{
	beneath_force_walk(true);
	return tree_setup(state);
}

/* Replaces root's component at depth (1 = a, 2 = a/b, 3 = a/b/c, 4 =
 * a/b/c/f) with a symlink to the same path outside. */
static void swap_for_symlink(struct tree *t, int depth)
{
	static const char *const rel[] = {"", "a", "a/b", "a/b/c", "a/b/c/f"};
	char in[400], target[400], cmd[900];

	snprintf(in, sizeof in, "%s/%s", t->root, rel[depth]);
	snprintf(target, sizeof target, "%s/%s", t->out, rel[depth]);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", in);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(symlink(target, in), 0);
}

static void test_mode(void **state)
{
	(void)state;
	/* This kernel has openat2 (5.6+); the walk is what the override gives. */
	beneath_force_walk(false);
	assert_true(beneath_uses_openat2());
	beneath_force_walk(true);
	assert_false(beneath_uses_openat2());
	beneath_force_walk(false);
}

static void test_normalize(void **state)
{
	char out[64];

	(void)state;
	assert_int_equal(beneath_normalize("a/./b//c/", out, sizeof out), SB_OK);
	assert_string_equal(out, "a/b/c");
	assert_int_equal(beneath_normalize("a/../b", out, sizeof out), SB_OK);
	assert_string_equal(out, "b");
	assert_int_equal(beneath_normalize(".", out, sizeof out), SB_OK);
	assert_string_equal(out, "");
	assert_int_equal(beneath_normalize("a/..", out, sizeof out), SB_OK);
	assert_string_equal(out, "");
	assert_int_equal(beneath_normalize("..", out, sizeof out), SB_ERR_PERM);
	assert_int_equal(beneath_normalize("a/../../x", out, sizeof out), SB_ERR_PERM);
	assert_int_equal(beneath_normalize("/etc/passwd", out, sizeof out), SB_ERR_PERM);
	assert_int_equal(beneath_normalize("abcdefghij/abcdefghij/abcdefghij/abcdefghij/"
	                                   "abcdefghij/abcdefghij/abcdefghij",
	                                   out, sizeof out),
	                 SB_ERR_TOOBIG);
}

static void test_plain(void **state)
{
	struct tree *t = *state;
	char *text = NULL, p[400];
	size_t len = 0;
	struct stat st;
	DIR *d = NULL;

	assert_int_equal(beneath_read_all(t->rootfd, "a/b/c/f", 100, &text, &len), SB_OK);
	assert_string_equal(text, "inside");
	free(text);
	assert_int_equal(beneath_read_all(t->rootfd, "a/x/../b/c/f", 100, &text, &len), SB_OK);
	free(text);
	assert_int_equal(beneath_read_all(t->rootfd, "a/b/c/f", 3, &text, &len), SB_ERR_TOOBIG);
	assert_null(text);
	assert_int_equal(beneath_read_all(t->rootfd, "a/b/c/none", 100, &text, &len),
	                 SB_ERR_NOTFOUND);
	assert_int_equal(beneath_stat(t->rootfd, "a/b", &st), SB_OK);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(beneath_stat(t->rootfd, "", &st), SB_OK);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(beneath_opendir(t->rootfd, "a/b/c", &d), SB_OK);
	closedir(d);
	/* a directory is not a regular file, nor a file a directory */
	assert_int_equal(beneath_read_all(t->rootfd, "a/b", 100, &text, &len), SB_ERR_PERM);
	assert_int_equal(beneath_opendir(t->rootfd, "a/b/c/f", &d), SB_ERR_PERM);

	assert_int_equal(beneath_mkdirs(t->rootfd, "n/m/o", 0700), SB_OK);
	assert_int_equal(beneath_mkdirs(t->rootfd, "n/m/o", 0700), SB_OK);
	assert_int_equal(beneath_mkdir(t->rootfd, "n/m/o", 0700), SB_ERR_EXISTS);
	assert_int_equal(beneath_write_atomic(t->rootfd, "n/m/o/w", "one", 3, 0600), SB_OK);
	assert_int_equal(beneath_write_atomic(t->rootfd, "n/m/o/w", "two", 3, 0600), SB_OK);
	snprintf(p, sizeof p, "%s/n/m/o/w", t->root);
	assert_string_equal(slurp(p), "two");
	/* the mode of what is replaced is kept (an executable stays one) */
	assert_int_equal(chmod(p, 0750), 0);
	assert_int_equal(beneath_write_atomic(t->rootfd, "n/m/o/w", "three", 5, 0600), SB_OK);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0750);
	/* no temporary file is left behind */
	assert_int_equal(beneath_opendir(t->rootfd, "n/m/o", &d), SB_OK);
	{
		struct dirent *de;
		int n = 0;

		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				n++;
		assert_int_equal(n, 1);
	}
	closedir(d);
	assert_int_equal(beneath_rename(t->rootfd, "n/m/o/w", "n/w2"), SB_OK);
	assert_int_equal(beneath_stat(t->rootfd, "n/w2", &st), SB_OK);
	assert_int_equal(beneath_unlink(t->rootfd, "n/w2", false), SB_OK);
	assert_int_equal(beneath_stat(t->rootfd, "n/w2", &st), SB_ERR_NOTFOUND);
	assert_int_equal(beneath_unlink(t->rootfd, "n/m/o", true), SB_OK);
	assert_int_equal(beneath_unlink(t->rootfd, "", true), SB_ERR_PERM);
	/* a directory where a file is written is refused */
	assert_int_equal(beneath_write_atomic(t->rootfd, "n/m", "x", 1, 0600), SB_ERR_PERM);
}

static void test_escapes(void **state)
{
	struct tree *t = *state;
	char *text = NULL;
	size_t len;
	struct stat st;
	int fd = -1;

	assert_int_equal(beneath_read_all(t->rootfd, "../out/a/b/c/f", 100, &text, &len),
	                 SB_ERR_PERM);
	assert_int_equal(beneath_read_all(t->rootfd, "a/../../out/a/b/c/f", 100, &text, &len),
	                 SB_ERR_PERM);
	assert_int_equal(beneath_open(t->rootfd, "/etc/passwd", O_RDONLY, 0, 0, &fd), SB_ERR_PERM);
	assert_int_equal(fd, -1);
	assert_int_equal(beneath_stat(t->rootfd, "/etc", &st), SB_ERR_PERM);
	assert_int_equal(beneath_write_atomic(t->rootfd, "../out/x", "x", 1, 0600), SB_ERR_PERM);
	assert_int_equal(beneath_rename(t->rootfd, "a/b/c/f", "../out/g"), SB_ERR_PERM);
	assert_int_equal(beneath_mkdirs(t->rootfd, "../out/z", 0700), SB_ERR_PERM);
	assert_int_equal(beneath_unlink(t->rootfd, "../out/a/b/c/f", false), SB_ERR_PERM);
	assert_null(text);
	/* One component (the stat's short way): ".." is refused, "x/.." is
	 * the root, a link is seen as a link and not followed. */
	assert_int_equal(beneath_stat(t->rootfd, "..", &st), SB_ERR_PERM);
	assert_int_equal(beneath_stat(t->rootfd, "a/..", &st), SB_OK);
	assert_true(S_ISDIR(st.st_mode));
	{
		char lnk[400], outf[400];

		snprintf(lnk, sizeof lnk, "%s/top", t->root);
		snprintf(outf, sizeof outf, "%s/a/b/c/f", t->out);
		assert_int_equal(symlink(outf, lnk), 0);
		assert_int_equal(beneath_stat(t->rootfd, "top", &st), SB_OK);
		assert_true(S_ISLNK(st.st_mode));
		assert_int_equal(beneath_stat(t->rootfd, "./top", &st), SB_OK);
		assert_true(S_ISLNK(st.st_mode));
		assert_int_equal(unlink(lnk), 0);
		assert_int_equal(beneath_stat(t->rootfd, "top", &st), SB_ERR_NOTFOUND);
	}
	/* A link to a directory outside, named with a trailing "/" or "/."
	 * (which make the kernel follow a link): still the link, not the
	 * directory it points to. */
	{
		char lnk[400];
		struct stat out;

		snprintf(lnk, sizeof lnk, "%s/dtop", t->root);
		assert_int_equal(symlink(t->out, lnk), 0);
		assert_int_equal(stat(t->out, &out), 0);
		static const char *const names[] = {"dtop/", "dtop/.", "dtop//", "./dtop/./",
		                                    "a/../dtop/"};
		for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
			memset(&st, 0, sizeof st);
			assert_int_equal(beneath_stat(t->rootfd, names[i], &st), SB_OK);
			assert_true(S_ISLNK(st.st_mode));
			assert_false(st.st_ino == out.st_ino && st.st_dev == out.st_dev);
		}
		assert_int_equal(unlink(lnk), 0);
	}
}

/* A symlink at each component, and every operation through it. */
static void test_symlink_each_component(void **state)
{
	struct tree *t = *state;
	static const char *const probe[] = {"", "a/b/c/f", "a/b/c/f", "a/b/c/f", "a/b/c/f"};
	static const char *const dirs[] = {"", "a", "a/b", "a/b/c", "a/b/c"};

	for (int depth = 1; depth <= 4; depth++) {
		char *text = NULL, outf[400], cmd[1200];
		size_t len = 0;
		struct stat st;
		DIR *d = NULL;
		int fd = -1;

		/* a fresh tree for each depth */
		snprintf(cmd, sizeof cmd,
		         "rm -rf '%s/a' && mkdir -p '%s/a/b/c' && echo inside > "
		         "'%s/a/b/c/f'",
		         t->root, t->root, t->root);
		assert_int_equal(system(cmd), 0);
		swap_for_symlink(t, depth);
		snprintf(outf, sizeof outf, "%s/a/b/c/f", t->out);

		assert_int_equal(beneath_read_all(t->rootfd, probe[depth], 100, &text, &len),
		                 SB_ERR_PERM);
		assert_null(text);
		assert_int_equal(beneath_open(t->rootfd, probe[depth], O_RDONLY, 0, 0, &fd),
		                 SB_ERR_PERM);
		assert_int_equal(beneath_open(t->rootfd, probe[depth], O_WRONLY | O_TRUNC, 0,
		                              BENEATH_REGULAR, &fd),
		                 SB_ERR_PERM);
		assert_int_equal(beneath_open(t->rootfd, probe[depth], O_PATH, 0, 0, &fd),
		                 SB_ERR_PERM);
		assert_int_equal(fd, -1);
		assert_int_equal(beneath_write_atomic(t->rootfd, "a/b/c/new", "pwned", 5, 0600),
		                 depth == 4 ? SB_OK : SB_ERR_PERM);
		if (depth < 4) {
			assert_int_equal(beneath_opendir(t->rootfd, dirs[depth], &d), SB_ERR_PERM);
			assert_int_equal(beneath_mkdirs(t->rootfd, "a/b/c/d", 0700), SB_ERR_PERM);
			assert_int_equal(beneath_stat(t->rootfd, "a/b/c/f", &st), SB_ERR_PERM);
			assert_int_equal(beneath_unlink(t->rootfd, "a/b/c/f", false), SB_ERR_PERM);
			assert_int_equal(beneath_rename(t->rootfd, "a/b/c/f", "g"), SB_ERR_PERM);
		} else {
			/* the last component: lstat sees the link; a write replaces
			 * the link itself, never its target; unlink removes the link */
			assert_int_equal(beneath_stat(t->rootfd, "a/b/c/f", &st), SB_OK);
			assert_true(S_ISLNK(st.st_mode));
			assert_int_equal(
			    beneath_write_atomic(t->rootfd, "a/b/c/f", "pwned", 5, 0600),
			    SB_ERR_PERM);
			assert_int_equal(beneath_unlink(t->rootfd, "a/b/c/f", false), SB_OK);
		}
		/* outside is untouched */
		assert_string_equal(slurp(outf), "SECRET");
		snprintf(outf, sizeof outf, "%s/a/b/c/new", t->out);
		assert_null(slurp(outf));
		snprintf(outf, sizeof outf, "%s/a/b/c/d", t->out);
		assert_int_equal(stat(outf, &st), -1);
	}
}

/* /proc's magic links (fd/N, cwd, root, exe) are never followed. */
static void test_magic_links(void **state)
{
	int proc = -1, fd = -1, secret;
	char path[64], *text = NULL;
	size_t len;
	struct stat st;

	(void)state;
	secret = open("/etc/hostname", O_RDONLY | O_CLOEXEC);
	assert_true(secret >= 0);
	assert_int_equal(beneath_root("/proc/self", &proc), SB_OK);
	snprintf(path, sizeof path, "fd/%d", secret);
	assert_int_equal(beneath_read_all(proc, path, 4096, &text, &len), SB_ERR_PERM);
	assert_int_equal(beneath_open(proc, path, O_RDONLY, 0, 0, &fd), SB_ERR_PERM);
	assert_int_equal(beneath_read_all(proc, "root/etc/hostname", 4096, &text, &len),
	                 SB_ERR_PERM);
	assert_int_equal(beneath_read_all(proc, "cwd/CMakeCache.txt", 4096, &text, &len),
	                 SB_ERR_PERM);
	assert_int_equal(beneath_open(proc, "exe", O_RDONLY, 0, 0, &fd), SB_ERR_PERM);
	assert_int_equal(beneath_stat(proc, "root/etc", &st), SB_ERR_PERM);
	assert_null(text);
	assert_int_equal(fd, -1);
	close(proc);
	close(secret);
}

/* BENEATH_REGULAR: a FIFO is refused without blocking (no writer ever
 * comes), and so is a socket-like or directory target. */
static void test_regular_only(void **state)
{
	struct tree *t = *state;
	char p[400], *text = NULL;
	size_t len;
	int fd = -1;

	snprintf(p, sizeof p, "%s/fifo", t->root);
	assert_int_equal(mkfifo(p, 0600), 0);
	assert_int_equal(beneath_read_all(t->rootfd, "fifo", 100, &text, &len), SB_ERR_PERM);
	assert_int_equal(beneath_open(t->rootfd, "fifo", O_RDONLY, 0, BENEATH_REGULAR, &fd),
	                 SB_ERR_PERM);
	assert_int_equal(beneath_write_atomic(t->rootfd, "fifo", "x", 1, 0600), SB_ERR_PERM);
	assert_int_equal(beneath_open(t->rootfd, "a", O_RDONLY, 0, BENEATH_REGULAR, &fd),
	                 SB_ERR_PERM);
	assert_int_equal(beneath_open(t->rootfd, "a/b/c/f", O_RDONLY, 0, BENEATH_DIRECTORY, &fd),
	                 SB_ERR_PERM);
	assert_int_equal(fd, -1);
	/* and a regular file opened with BENEATH_REGULAR blocks normally again */
	assert_int_equal(beneath_open(t->rootfd, "a/b/c/f", O_RDONLY, 0, BENEATH_REGULAR, &fd),
	                 SB_OK);
	assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
	close(fd);
	assert_null(text);
}

#define BOTH(fn)                                                                                   \
	cmocka_unit_test_setup_teardown(fn, tree_setup, tree_teardown),                            \
	    cmocka_unit_test_setup_teardown(fn, walk_setup, tree_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mode), cmocka_unit_test(test_normalize),  BOTH(test_plain),
	    BOTH(test_escapes),          BOTH(test_symlink_each_component), BOTH(test_magic_links),
	    BOTH(test_regular_only),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
