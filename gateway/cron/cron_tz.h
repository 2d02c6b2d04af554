/*
 * cron_tz.h - local time in any IANA time zone, without the process-wide TZ.
 *
 * glibc's localtime_r follows the TZ environment variable of the whole
 * process, so it cannot answer "what time is it in Europe/Berlin" for one
 * job and "America/New_York" for the next. This module reads the zone's
 * compiled TZif file (RFC 8536) from the tz database (TZDIR, default
 * /usr/share/zoneinfo; Debian's `tzdata` package) into an immutable table of
 * transitions, and evaluates the POSIX TZ rule in the file's footer for
 * instants after the last transition. Zones are loaded once and cached for
 * the life of the process; a loaded zone is never changed or freed, so any
 * thread may use it without locks (the cache itself is guarded by a mutex).
 *
 * Local times are handled as "naive" seconds: the wall clock read as if it
 * were UTC (days since 1970-01-01 * 86400 + seconds of the day).
 */
#ifndef SB_GATEWAY_CRON_TZ_H
#define SB_GATEWAY_CRON_TZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cron_tz;

/* A broken-down wall-clock time. */
struct cron_tm {
	int year;
	int mon;  /* 1..12 */
	int mday; /* 1..31 */
	int hour, min, sec;
	int wday; /* 0 = Sunday */
};

/* The zone named name: "UTC" (also "Etc/UTC", "Z"), "local" (the host's
 * zone: $TZ when it names a zone file, else /etc/localtime, else UTC), or an
 * IANA name such as "Europe/Berlin". The result is shared and immutable.
 * Returns SB_OK, SB_ERR_INVAL (a malformed name), SB_ERR_NOTFOUND (no such
 * zone file), SB_ERR_IO or SB_ERR_NOMEM. Any thread; blocks on a small file
 * read the first time a name is asked for. */
int cron_tz_get(const char *name, const struct cron_tz **out);

/* Parses TZif data (for tests and the fuzzer). The caller frees the zone
 * with cron_tz_free. SB_ERR_INVAL when the data is not a valid TZif file. */
int cron_tz_parse(const unsigned char *data, size_t len, const char *name, struct cron_tz **out);
/* A zone from a POSIX TZ string alone ("CET-1CEST,M3.5.0,M10.5.0/3"). */
int cron_tz_posix(const char *rule, struct cron_tz **out);
void cron_tz_free(struct cron_tz *z); /* NULL is a no-op */

/* The zone's name as it was asked for. */
const char *cron_tz_name(const struct cron_tz *z);

/* The offset from UTC (seconds east) in force at utc_s. */
int32_t cron_tz_offset(const struct cron_tz *z, int64_t utc_s);

/* UTC instant -> naive local seconds, and -> broken-down local time. */
int64_t cron_tz_local(const struct cron_tz *z, int64_t utc_s);
void cron_tz_to_tm(const struct cron_tz *z, int64_t utc_s, struct cron_tm *out);

/* Naive local seconds -> the UTC instant it names. A wall-clock time that
 * happens twice (the hour repeated when clocks go back) names its first
 * occurrence; one that never happens (the hour skipped when clocks go
 * forward) names the instant of the change, so that it is not lost.
 * *kind (may be NULL) is 0 normal, 1 repeated, 2 skipped. */
int64_t cron_tz_utc(const struct cron_tz *z, int64_t naive, int *kind);

/* Civil date helpers (proleptic Gregorian). */
int64_t cron_days_from_civil(int64_t y, int m, int d);
void cron_civil_from_days(int64_t days, int *y, int *m, int *d);
/* Naive seconds <-> broken-down time. */
int64_t cron_tm_naive(const struct cron_tm *tm);
void cron_naive_tm(int64_t naive, struct cron_tm *out);

#endif
