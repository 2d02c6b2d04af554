/*
 * test_fsutil.c - gateway/core/fsutil.h: fs_mkdirs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "gateway/core/err.h"
#include "gateway/core/fsutil.h"

/* The calls fs_mkdirs makes, counted: this definition wins over libc's for
 * the gateway's code linked into this test. */
static size_t mkdir_calls;

int mkdir(const char *path, mode_t mode)
{
	mkdir_calls++;
	return (int)syscall(SYS_mkdirat, AT_FDCWD, path, mode);
}

static void test_mkdirs(void **state)
{
	char root[] = "/tmp/sbtest.fsutil.XXXXXX", deep[PATH_MAX], file[PATH_MAX];
	struct stat st;

	(void)state;
	assert_non_null(mkdtemp(root));
	snprintf(deep, sizeof deep, "%s/agents/main/sessions/", root);
	/* Missing parents are made, each with the mode. */
	assert_int_equal(fs_mkdirs(deep, 0700), SB_OK);
	assert_int_equal(stat(deep, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0700);
	snprintf(file, sizeof file, "%s/agents/main", root);
	assert_int_equal(stat(file, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	/* There already: one call, however deep. */
	mkdir_calls = 0;
	assert_int_equal(fs_mkdirs(deep, 0700), SB_OK);
	assert_int_equal(mkdir_calls, 1);
	/* A parent that is a file: refused. */
	snprintf(file, sizeof file, "%s/plain", root);
	{
		int fd = open(file, O_WRONLY | O_CREAT | O_EXCL, 0600);

		assert_true(fd >= 0);
		close(fd);
	}
	snprintf(deep, sizeof deep, "%s/plain/below", root);
	assert_int_equal(fs_mkdirs(deep, 0700), SB_ERR_IO);
	snprintf(deep, sizeof deep, "rm -rf '%s'", root);
	assert_int_equal(system(deep), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mkdirs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
