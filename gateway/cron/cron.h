/*
 * cron.h - schedules of cron jobs: 5-field cron expressions, "every"
 * intervals, one-shot "at" times; the job definition (struct cron_spec) as
 * the control plane, the CLI, the config file and the store carry it; the
 * error backoff. Pure functions (no loop, no I/O besides loading a time
 * zone through cron_tz_get); any thread.
 */
#ifndef SB_GATEWAY_CRON_H
#define SB_GATEWAY_CRON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/cron/cron_tz.h"

/* A parsed 5-field expression: minute hour day-of-month month day-of-week. */
struct cron_expr {
	uint64_t minute; /* bits 0..59 */
	uint32_t hour;   /* bits 0..23 */
	uint32_t mday;   /* bits 1..31 */
	uint16_t month;  /* bits 1..12 */
	uint8_t wday;    /* bits 0..6, 0 = Sunday */
	bool mday_star;  /* the field began with "*" or "?" (Vixie cron's rule) */
	bool wday_star;
};

/* Where a parse failed: pos is the 0-based offset in the text. */
struct cron_error {
	size_t pos;
	char msg[128];
};

/* Parses "m h dom mon dow" (fields separated by blanks). Each field is a
 * comma list of "*", "N", "N-M", each optionally "/STEP"; months and days
 * also by English three-letter names (jan, mon); day-of-week 7 is Sunday.
 * "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight" and
 * "@hourly" stand for their usual expressions. When both day-of-month and
 * day-of-week are restricted (neither starts with "*"), a day matches when
 * either does. Returns SB_OK or SB_ERR_INVAL with err filled (may be NULL). */
int cron_expr_parse(const char *text, struct cron_expr *out, struct cron_error *err);

/* The first instant (unix seconds) strictly after after_s whose wall-clock
 * time in zone z matches e. Wall-clock times skipped by a DST change fire
 * at the instant of the change; repeated ones fire at their first
 * occurrence only. SB_ERR_NOTFOUND when nothing matches within 8 years
 * (e.g. "0 0 30 2 *"). */
int cron_expr_next(const struct cron_expr *e, const struct cron_tz *z, int64_t after_s,
                   int64_t *out_s);

enum cron_kind { CRON_KIND_AT = 0, CRON_KIND_EVERY, CRON_KIND_CRON };
enum cron_session { CRON_SESSION_ISOLATED = 0, CRON_SESSION_MAIN };
enum cron_delivery { CRON_DELIVERY_NONE = 0, CRON_DELIVERY_ANNOUNCE, CRON_DELIVERY_WEBHOOK };

#define CRON_ID_MAX 64
#define CRON_PAYLOAD_MAX (64u << 10)
/* Error backoff, and the consecutive failures after which a job is
 * disabled. */
#define CRON_MAX_FAILURES 10

/* A job's definition. Strings are owned (cron_spec_release). */
struct cron_spec {
	char *id;    /* [A-Za-z0-9][A-Za-z0-9_.-]{0,63} */
	char *agent; /* NULL: the default agent */
	enum cron_kind kind;
	int64_t at_ms;     /* at */
	int64_t every_ms;  /* every (>= 1 s) */
	int64_t anchor_ms; /* every: runs at anchor + k * every; 0 = when the job was added */
	char *expr_text;   /* cron */
	struct cron_expr expr;
	char *tz; /* cron (and at without an offset): zone name; NULL = "local" for cron, UTC for at
	           */
	enum cron_session session;
	char *payload;
	enum cron_delivery delivery;
	char *channel; /* announce: a channel name or "last" */
	char *to;      /* announce: the channel's target; webhook: the hook's name */
	char *account; /* announce: the channel account; NULL = "default" */
	bool enabled;
	bool delete_after_run; /* at: remove the job after its run */
};

/* Reads a job from JSON:
 *   {"id", "agent"?, one of "at" (ISO 8601 / unix ms) | "every" (duration
 *    or ms) with "anchor"? | "cron" (expression), "tz"?, "session"?
 *    ("isolated" | "main"), "payload", "delivery"? ({"mode": "none" |
 *    "announce" | "webhook", "channel"?, "to"?, "account"?}), "enabled"?,
 *    "delete_after_run"?}
 * On SB_ERR_INVAL err (may be NULL) says what is wrong. out is zeroed first
 * and must be released either way. */
int cron_spec_from_json(const json_t *o, struct cron_spec *out, char *err, size_t err_size);
/* The job as JSON in the same shape (new reference; NULL on NOMEM). */
json_t *cron_spec_to_json(const struct cron_spec *s);
void cron_spec_release(struct cron_spec *s);

/* The job's next run strictly after after_ms (unix ms); created_ms anchors
 * "every" jobs without an anchor. SB_ERR_NOTFOUND when there is none (an
 * "at" time that passed, an expression that never matches). */
int cron_spec_next(const struct cron_spec *s, int64_t after_ms, int64_t created_ms,
                   int64_t *out_ms);

/* Parses "2026-03-08T09:30:00Z", "...+01:00", "2026-03-08 09:30" (no offset:
 * local time in zone z, or UTC when z is NULL), or unix milliseconds. */
int cron_parse_time(const char *text, const struct cron_tz *z, int64_t *out_ms);
/* Formats unix ms as "2026-03-08T09:30:00Z" into out (at least 32 bytes). */
void cron_format_time(int64_t ms, char *out, size_t size);

/* The delay before retrying after the n-th consecutive failure (n >= 1):
 * 30 s, 1 min, 5 min, 15 min, then 60 min. */
int64_t cron_backoff_ms(int consecutive_failures);

/* What the scheduler keeps of a job between runs (persisted with it). */
struct cron_state {
	int64_t next_run_ms; /* 0: none (a finished "at" job, or disabled) */
	int64_t last_run_ms;
	int errors;         /* consecutive failures */
	bool auto_disabled; /* CRON_MAX_FAILURES failures in a row */
	bool done;          /* an "at" job that ran */
};

/* Applies the outcome of a run that finished at now_ms: success clears the
 * error count and schedules the next run after now; a failure counts, and
 * the next run is the later of the schedule's next and now + backoff; at
 * CRON_MAX_FAILURES consecutive failures the job is disabled. An "at" job
 * is done after a success. */
void cron_state_after_run(struct cron_state *st, const struct cron_spec *s, bool ok, int64_t now_ms,
                          int64_t created_ms);

/* The names of the enums. */
const char *cron_kind_name(enum cron_kind k);
const char *cron_session_name(enum cron_session s);
const char *cron_delivery_name(enum cron_delivery d);

#endif
