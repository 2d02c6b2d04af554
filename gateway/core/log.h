/*
 * log.h - structured logs, one event per line, to stderr (or any FILE) and
 * optionally to a file rotated by size.
 *
 * An event has a level, a module, a message and typed fields:
 *
 *	log_info("store", "opened", LOG_S("path", path), LOG_I("schema", 3));
 *
 * logfmt:  ts=2026-11-30T01:02:03.456Z level=info module=store msg=opened path=/x schema=3
 * json:    {"ts":"...","level":"info","module":"store","msg":"opened","path":"/x","schema":3}
 *
 * Every configured secret value is replaced by "[REDACTED]" wherever it
 * appears, in the message and in every string field. All functions are
 * thread-safe (one mutex); a line is written with a single write, to the
 * sink and to the log file when one is open (log_file_open).
 */
#ifndef SB_CORE_LOG_H
#define SB_CORE_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };
enum log_format { LOG_FORMAT_LOGFMT = 0, LOG_FORMAT_JSON };

enum log_field_type { LOG_FIELD_END = 0, LOG_FIELD_STR, LOG_FIELD_INT, LOG_FIELD_DBL };

struct log_field {
	const char *key;
	enum log_field_type type;
	const char *s;
	int64_t i;
	double d;
};

#define LOG_S(k, v) ((struct log_field){.key = (k), .type = LOG_FIELD_STR, .s = (v)})
#define LOG_I(k, v) ((struct log_field){.key = (k), .type = LOG_FIELD_INT, .i = (int64_t)(v)})
#define LOG_D(k, v) ((struct log_field){.key = (k), .type = LOG_FIELD_DBL, .d = (double)(v)})
#define LOG_END ((struct log_field){.key = NULL, .type = LOG_FIELD_END})

/* Sets the minimum level, the format and the sink (NULL = stderr). */
void log_configure(enum log_level min, enum log_format fmt, FILE *sink);

/* Also appends every line to the file at path (created 0600, opened
 * O_APPEND|O_CLOEXEC; its directory must exist). When a line would take it
 * past max bytes, it is renamed path.1 first (path.1 to path.2, ... up to
 * path.KEEP, the oldest removed; with keep 0 it is removed) and a new one
 * opened, so that a line is never split across files and there are at most
 * keep + 1 of them. Called again with the same path, only max and keep
 * change; max <= 0 closes the file. SB_OK, SB_ERR_NOTFOUND (no directory),
 * SB_ERR_IO, SB_ERR_TOOBIG (path too long). Any thread. */
int log_file_open(const char *path, int64_t max, int keep);
/* Stops writing to the file (a no-op when none is open). */
void log_file_close(void);

/* Replaces the list of secret values to redact (copied; values shorter than 4
 * bytes are ignored as they would redact ordinary words). NULL/0 clears it. */
int log_set_secrets(const char *const *secrets, size_t n);

/* Parses "debug|info|warn|error" / "logfmt|json". SB_ERR_INVAL if unknown. */
int log_level_parse(const char *s, enum log_level *out);
int log_format_parse(const char *s, enum log_format *out);

/* Emits one event. The variadic part is struct log_field values ended by
 * LOG_END; use the macros below, which add LOG_END. */
void log_emit(enum log_level lvl, const char *module, const char *msg, ...);

/* The same with the fields as an array. */
void log_emit_fields(enum log_level lvl, const char *module, const char *msg,
                     const struct log_field *fields, size_t n);
/* Reads struct log_field values from ap up to LOG_END into fields (at most
 * max kept); returns how many were kept. For functions that take fields. */
size_t log_collect(va_list ap, struct log_field *fields, size_t max);

/* Formats one event into out (NUL-terminated, truncated to size) exactly as
 * it would be written, without the newline. For tests. */
void log_format_event(char *out, size_t size, enum log_level lvl, const char *module,
                      const char *msg, const struct log_field *fields, size_t n);

/* The most recent lines are also kept in memory (for the control plane's
 * logs.tail): LOG_RING_LINES of them, each cut at LOG_RING_LINE - 1 bytes.
 * Lines are numbered from 1 in the order written. */
#define LOG_RING_LINES 500
#define LOG_RING_LINE 512

typedef void (*log_ring_cb)(void *ud, uint64_t seq, const char *line);

/* Calls cb, oldest first, for each kept line numbered above after (at most
 * the newest max; 0 = all), under the log's lock: cb must not log. Returns
 * the number of the newest line written (0 before the first). */
uint64_t log_ring_read(uint64_t after, size_t max, log_ring_cb cb, void *ud);

/* One line of the log as written (logfmt or json; a trailing newline is
 * ignored; at most 1 MiB of it is read) as a JSON object, a new reference
 * (NULL on no memory):
 *   - a json line: the object itself;
 *   - a logfmt line: one member per field in the order written, the value
 *     a string, or a number where the writer printed one bare (an integer
 *     or a double field; a string field that looks like a number reads as
 *     a number too); a key written twice keeps its first value; a bare key
 *     is true; a line cut inside a quoted value (the writer's line limit)
 *     keeps what it has and gets "truncated": true;
 *   - anything else (no ts and msg, not logfmt): {"raw": the line}.
 * Bytes that are not UTF-8 become U+FFFD. Any thread. */
struct json_t *log_line_json(const char *line, size_t len);

#define log_debug(mod, ...) log_emit(LOG_DEBUG, (mod), __VA_ARGS__, LOG_END)
#define log_info(mod, ...) log_emit(LOG_INFO, (mod), __VA_ARGS__, LOG_END)
#define log_warn(mod, ...) log_emit(LOG_WARN, (mod), __VA_ARGS__, LOG_END)
#define log_error(mod, ...) log_emit(LOG_ERROR, (mod), __VA_ARGS__, LOG_END)

#endif
