/*
 * fmt.c - checked formatting (see fmt.h).
 */
#include "gateway/core/fmt.h"

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
