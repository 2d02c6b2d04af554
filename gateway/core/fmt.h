/*
 * fmt.h - snprintf whose truncation is an error.
 *
 * Where a cut string would mean something else - a path, a key, a session
 * key, an idempotency key, a URL, a namespace - format with fmt (or FMT for
 * an array) and handle SB_ERR_TOOBIG. Plain snprintf stays for text a person
 * reads (log lines, error messages), where a cut only shortens it.
 *
 *	char path[PATH_MAX];
 *	if ((rc = FMT(path, "%s/gateway.lock", home)) != SB_OK)
 *		goto out;
 *
 * Any thread.
 */
#ifndef SB_CORE_FMT_H
#define SB_CORE_FMT_H

#include <stddef.h>
#include <stdint.h>

/* Formats into out (size bytes, NUL-terminated whatever happens). SB_OK;
 * SB_ERR_TOOBIG when the result does not fit (out then holds ""), so that a
 * cut value is never used by mistake; SB_ERR_INVAL for an output error. */
int fmt(char *out, size_t size, const char *f, ...) __attribute__((format(printf, 3, 4)));

/* fmt into an array, its size taken from its type (a pointer does not
 * compile). */
#define FMT(arr, ...)                                                                              \
	fmt((arr),                                                                                 \
	    sizeof(arr) + 0 * sizeof(char[1 - 2 * __builtin_types_compatible_p(                   \
	                                               __typeof__(arr), __typeof__(&(arr)[0]))]), \
	    __VA_ARGS__)

/* A span of ms milliseconds as the config writes durations: "30m", "1h30m",
 * "2d4h", "45s", "1500ms" (whole units, largest first; "0s" for 0; a negative
 * span gets a '-'). out: at least 32 bytes; returns out. */
char *fmt_span(char *out, size_t size, int64_t ms);

#endif
