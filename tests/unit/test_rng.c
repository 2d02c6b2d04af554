/*
 * test_rng.c - the batched random source (gateway/core/rng.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "gateway/core/err.h"
#include "gateway/core/rng.h"

static int rng_setup(void **state)
{
	(void)state;
	if (rng_install() != SB_OK || sodium_init() < 0)
		return -1;
	return 0;
}

/* libsodium's calls come from the batch: a hundred 16-byte ids cost a few
 * system calls, and no two of them are the same. */
static void test_batched(void **state)
{
	unsigned char ids[100][16];
	size_t before = rng_refills();

	(void)state;
	assert_string_equal(randombytes_implementation_name(), "switchboard-batched-getrandom");
	for (int i = 0; i < 100; i++)
		randombytes_buf(ids[i], sizeof ids[i]);
	assert_true(rng_refills() - before >= 1);
	assert_true(rng_refills() - before <= (sizeof ids + RNG_BATCH - 1) / RNG_BATCH + 1);
	for (int i = 0; i < 100; i++)
		for (int k = i + 1; k < 100; k++)
			assert_memory_not_equal(ids[i], ids[k], sizeof ids[i]);
	/* Larger requests, a word, a bounded number, none. */
	{
		unsigned char big[4096], zero[4096];

		memset(big, 0, sizeof big);
		memset(zero, 0, sizeof zero);
		randombytes_buf(big, sizeof big);
		assert_memory_not_equal(big, zero, sizeof big);
		randombytes_buf(big, 0);
	}
	for (int i = 0; i < 1000; i++)
		assert_true(randombytes_uniform(7) < 7);
	{
		uint32_t a = randombytes_random(), b = randombytes_random(),
		         c = randombytes_random();

		assert_false(a == b && b == c);
	}
}

/* A forked child never hands out the bytes its parent hands out next. */
static void test_fork_does_not_share(void **state)
{
	unsigned char mine[16], theirs[16];
	int fd[2], st = 0;
	pid_t pid;

	(void)state;
	/* The parent's buffer has just been filled: it holds unread bytes. */
	for (size_t r = rng_refills(); rng_refills() == r;)
		randombytes_buf(mine, 1);
	assert_int_equal(pipe(fd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		unsigned char b[16];

		randombytes_buf(b, sizeof b);
		_exit(write(fd[1], b, sizeof b) == (ssize_t)sizeof b ? 0 : 1);
	}
	close(fd[1]);
	assert_int_equal(read(fd[0], theirs, sizeof theirs), (ssize_t)sizeof theirs);
	close(fd[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	randombytes_buf(mine, sizeof mine);
	assert_memory_not_equal(mine, theirs, sizeof mine);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_batched),
	    cmocka_unit_test(test_fork_does_not_share),
	};

	return cmocka_run_group_tests(tests, rng_setup, NULL);
}
