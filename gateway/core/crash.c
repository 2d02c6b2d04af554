/*
 * crash.c - the crash-point counter (see crash.h). Compiled to nothing
 * unless SB_CRASH_POINTS is defined.
 */
#include "gateway/core/crash.h"

#ifdef SB_CRASH_POINTS

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t crash_once = PTHREAD_ONCE_INIT;
static atomic_ullong crash_count;
static unsigned long long crash_at; /* 0: never */
static int crash_log_fd = -1;
static char crash_name[128]; /* "": none */

static void crash_init(void)
{
	const char *at = getenv("SB_CRASH_AT");
	const char *path = getenv("SB_CRASH_LOG");
	const char *name = getenv("SB_CRASH_NAME");

	if (at && *at) {
		char *end = NULL;
		errno = 0;
		unsigned long long n = strtoull(at, &end, 10);
		if (errno == 0 && end && *end == '\0' && at[0] != '-')
			crash_at = n;
	}
	if (name && *name && strlen(name) < sizeof crash_name)
		memcpy(crash_name, name, strlen(name) + 1);
	if (path && *path)
		crash_log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

void sb_crash_arm(void)
{
	pthread_once(&crash_once, crash_init);
	unsetenv("SB_CRASH_AT");
	unsetenv("SB_CRASH_LOG");
	unsetenv("SB_CRASH_NAME");
}

void sb_crash_point(const char *name)
{
	pthread_once(&crash_once, crash_init);
	unsigned long long n = atomic_fetch_add(&crash_count, 1) + 1;

	if (crash_log_fd >= 0) {
		char line[256];
		int len = snprintf(line, sizeof line, "%llu %s\n", n, name);
		if (len > 0) {
			size_t w = (size_t)len < sizeof line ? (size_t)len : sizeof line - 1;
			/* One write per line with O_APPEND: lines of two threads never mix. */
			ssize_t r = write(crash_log_fd, line, w);
			(void)r;
		}
	}
	if ((crash_at && n == crash_at) || (crash_name[0] && strcmp(name, crash_name) == 0)) {
		/* SIGKILL cannot be caught: the process stops here, mid-step. */
		kill(getpid(), SIGKILL);
		for (;;)
			pause();
	}
}

#endif
