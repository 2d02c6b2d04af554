/*
 * fmt.c - checked formatting (see fmt.h).
 */
#include "gateway/core/fmt.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "gateway/core/err.h"

int fmt(char *out, size_t size, const char *f, ...)
{
	va_list ap;
	int n;

	if (!out || size == 0)
		return SB_ERR_INVAL;
	va_start(ap, f);
	n = vsnprintf(out, size, f, ap);
	va_end(ap);
	if (n < 0) {
		out[0] = '\0';
		return SB_ERR_INVAL;
	}
	if ((size_t)n >= size) {
		out[0] = '\0';
		return SB_ERR_TOOBIG;
	}
	return SB_OK;
}

char *fmt_span(char *out, size_t size, int64_t ms)
{
	static const struct {
		int64_t ms;
		const char *unit;
	} units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
	size_t len = 0;
	uint64_t left;

	if (!out || size == 0)
		return out;
	out[0] = '\0';
	if (ms < 0 && size > 1) {
		out[len++] = '-';
		out[len] = '\0';
	}
	left = ms < 0 ? (uint64_t)0 - (uint64_t)ms : (uint64_t)ms;
	if (left == 0) {
		snprintf(out + len, size - len, "0s");
		return out;
	}
	if (left % 1000 != 0) {
		snprintf(out + len, size - len, "%" PRIu64 "ms", left);
		return out;
	}
	for (size_t i = 0; i < sizeof units / sizeof units[0] && len < size; i++) {
		uint64_t n = left / (uint64_t)units[i].ms;
		int w;

		if (!n)
			continue;
		left -= n * (uint64_t)units[i].ms;
		w = snprintf(out + len, size - len, "%" PRIu64 "%s", n, units[i].unit);
		if (w < 0 || (size_t)w >= size - len) {
			out[len] = '\0'; /* cut at a whole unit */
			break;
		}
		len += (size_t)w;
	}
	return out;
}
