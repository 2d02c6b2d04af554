/*
 * invariant.c - the crash report of a broken invariant (see invariant.h).
 */
#include "gateway/core/invariant.h"

#include <execinfo.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SB_ASSERT_FIELDS 16
#define SB_ASSERT_FRAMES 32

/* Writes s to stderr without allocating (the heap may be what broke). */
static void sb_assert_raw(const char *s)
{
	size_t n = strlen(s);

	while (n > 0) {
		ssize_t w = write(STDERR_FILENO, s, n);

		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

_Noreturn void sb_assert_fail(const char *expr, const char *file, int line, const char *func,
                              ...)
{
	struct log_field f[SB_ASSERT_FIELDS + 3];
	void *frames[SB_ASSERT_FRAMES];
	char where[512], num[32];
	size_t n;
	int depth;
	va_list ap;

	snprintf(where, sizeof where, "%s:%d", file, line);
	f[0] = LOG_S("expr", expr);
	f[1] = LOG_S("at", where);
	f[2] = LOG_S("function", func);
	va_start(ap, func);
	n = log_collect(ap, f + 3, SB_ASSERT_FIELDS);
	va_end(ap);
	/* First the bare facts, which need no memory; then the structured
	 * line with the state (to the configured sink and the log ring). */
	snprintf(num, sizeof num, "%d", line);
	sb_assert_raw("switchboard: invariant broken: ");
	sb_assert_raw(expr);
	sb_assert_raw(" at ");
	sb_assert_raw(file);
	sb_assert_raw(":");
	sb_assert_raw(num);
	sb_assert_raw("\n");
	log_emit_fields(LOG_ERROR, "crash", "invariant broken", f, n + 3);
	depth = backtrace(frames, SB_ASSERT_FRAMES);
	sb_assert_raw("backtrace:\n");
	backtrace_symbols_fd(frames, depth, STDERR_FILENO);
	abort();
}
