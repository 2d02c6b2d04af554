/*
 * failalloc.c - allocation-failure injection for the unit tests, in the
 * manner of curl's torture tests: the N-th allocation fails, once.
 *
 * Linked into the failalloc_<test> binaries with -Wl,--wrap for malloc,
 * calloc, realloc, strdup and strndup, so that every allocation the
 * gateway's own code makes (and, through json_set_alloc_funcs, every one
 * jansson makes for it) goes through here; the C library's, SQLite's and
 * libuv's internal ones do not. The sanitizers still see every block:
 * __real_malloc is their malloc.
 *
 * SB_FAILALLOC=N fails the N-th allocation (counting from 1) and no other;
 * SB_FAILALLOC=0 fails none and prints the count at exit, for the driver
 * (tests/failalloc/run.sh) to choose its N.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

static unsigned long failalloc_count;
static unsigned long failalloc_nth;
static int failalloc_on;

/* Whether this allocation is the one to fail. */
static int failalloc_fail(void)
{
	failalloc_count++;
	if (failalloc_on && failalloc_count == failalloc_nth) {
		fprintf(stderr, "failalloc: failing allocation %lu\n", failalloc_count);
		return 1;
	}
	return 0;
}

void *__wrap_malloc(size_t n)
{
	return failalloc_fail() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
	return failalloc_fail() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
	return failalloc_fail() ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
	return failalloc_fail() ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
	return failalloc_fail() ? NULL : __real_strndup(s, n);
}

static void failalloc_report(void)
{
	fprintf(stderr, "failalloc: %lu allocations\n", failalloc_count);
}

__attribute__((constructor)) static void failalloc_init(void)
{
	const char *v = getenv("SB_FAILALLOC");
	char *end = NULL;

	if (!v)
		return;
	failalloc_nth = strtoul(v, &end, 10);
	failalloc_on = failalloc_nth > 0;
	json_set_alloc_funcs(__wrap_malloc, free);
	if (!failalloc_on)
		atexit(failalloc_report);
}
