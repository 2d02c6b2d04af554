/*
 * clock.c - the monotonic and the wall clock (see clock.h).
 */
#include "gateway/core/clock.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gateway/core/err.h"
#include "gateway/core/num.h"

static int64_t clock_read_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t clock_mono_ms(void)
{
	return clock_read_ms(CLOCK_MONOTONIC);
}

uint64_t clock_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double clock_mono_s(void)
{
	return (double)clock_mono_ns() / 1e9;
}

/* The test step (SWITCHBOARD_TEST_WALL_STEP), read once. */
static pthread_once_t clock_once = PTHREAD_ONCE_INIT;
static int64_t clock_step_at = INT64_MAX; /* CLOCK_MONOTONIC ms */
static int64_t clock_step_ms;

static void clock_init(void)
{
	const char *v = getenv("SWITCHBOARD_TEST_WALL_STEP");
	const char *colon = v ? strchr(v, ':') : NULL;
	char after[32];
	int64_t a, d;

	if (!colon || (size_t)(colon - v) >= sizeof after)
		return;
	memcpy(after, v, (size_t)(colon - v));
	after[colon - v] = '\0';
	if (num_parse_i64(after, 0, INT64_MAX / 4, &a) != SB_OK ||
	    num_parse_i64(colon + 1, -INT64_MAX / 4, INT64_MAX / 4, &d) != SB_OK)
		return;
	clock_step_ms = d;
	clock_step_at = a;
}

int64_t clock_wall_ms(void)
{
	int64_t now = clock_read_ms(CLOCK_REALTIME);

	pthread_once(&clock_once, clock_init);
	if (clock_step_ms && clock_mono_ms() >= clock_step_at)
		now += clock_step_ms;
	return now;
}
