/*
 * cron.c - see cron.h.
 */
#include "gateway/cron/cron.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/core/err.h"
#include "gateway/core/num.h"

#define CRON_TEXT_MAX 256
#define CRON_SEARCH_YEARS 8

/* ---- expressions ---- */

struct cron_field {
	const char *name;
	int lo, hi;
	const char *const *names; /* indexed from lo */
};

static const char *const cron_months[] = {"jan", "feb", "mar", "apr", "may", "jun", "jul",
                                          "aug", "sep", "oct", "nov", "dec", NULL};
static const char *const cron_wdays[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL};

static const struct cron_field cron_fields[5] = {
    {"minute", 0, 59, NULL},           {"hour", 0, 23, NULL},
    {"day of month", 1, 31, NULL},     {"month", 1, 12, cron_months},
    {"day of week", 0, 7, cron_wdays},
};

static int cron_fail(struct cron_error *err, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int cron_fail(struct cron_error *err, size_t pos, const char *fmt, ...)
{
	va_list ap;

	if (err) {
		err->pos = pos;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof err->msg, fmt, ap);
		va_end(ap);
	}
	return SB_ERR_INVAL;
}

/* A number or a name at text[*i]; advances *i. */
static int cron_value(const char *text, size_t *i, const struct cron_field *f, int *out,
                      struct cron_error *err)
{
	size_t start = *i;

	if (isdigit((unsigned char)text[*i])) {
		long v = 0;

		while (isdigit((unsigned char)text[*i])) {
			v = v * 10 + (text[*i] - '0');
			if (v > 1000)
				return cron_fail(err, start, "%s: number too large", f->name);
			(*i)++;
		}
		if (v < f->lo || v > f->hi)
			return cron_fail(err, start, "%s: %ld is out of range %d-%d", f->name, v,
			                 f->lo, f->hi);
		*out = (int)v;
		return SB_OK;
	}
	if (f->names && isalpha((unsigned char)text[*i])) {
		char word[4] = {0};

		for (int k = 0; k < 3; k++) {
			if (!isalpha((unsigned char)text[*i + (size_t)k]))
				return cron_fail(err, start, "%s: unknown name", f->name);
			word[k] = (char)tolower((unsigned char)text[*i + (size_t)k]);
		}
		if (isalpha((unsigned char)text[*i + 3]))
			return cron_fail(err, start, "%s: unknown name", f->name);
		for (int k = 0; f->names[k]; k++)
			if (strcmp(f->names[k], word) == 0) {
				*out = f->lo + k;
				*i += 3;
				return SB_OK;
			}
		return cron_fail(err, start, "%s: unknown name \"%s\"", f->name, word);
	}
	if (!text[*i] || text[*i] == ' ' || text[*i] == '\t')
		return cron_fail(err, start, "%s: a value is missing", f->name);
	return cron_fail(err, start, "%s: unexpected character '%c'", f->name, text[*i]);
}

/* One field starting at text[*i] (up to a blank or the end) into bits. */
static int cron_field_parse(const char *text, size_t *i, const struct cron_field *f, uint64_t *bits,
                            bool *star, struct cron_error *err)
{
	size_t field = *i;

	*bits = 0;
	*star = text[*i] == '*' || text[*i] == '?';
	for (;;) {
		int lo, hi, step = 1;
		size_t item = *i;
		int rc;

		if (text[*i] == '*' || text[*i] == '?') {
			lo = f->lo;
			hi = f->hi == 7 ? 6 : f->hi;
			(*i)++;
		} else {
			if ((rc = cron_value(text, i, f, &lo, err)))
				return rc;
			hi = lo;
			if (text[*i] == '-') {
				(*i)++;
				if ((rc = cron_value(text, i, f, &hi, err)))
					return rc;
				if (hi < lo)
					return cron_fail(err, item, "%s: range %d-%d is backwards",
					                 f->name, lo, hi);
			}
		}
		if (text[*i] == '/') {
			size_t at = ++(*i);
			long v = 0;

			if (!isdigit((unsigned char)text[*i]))
				return cron_fail(err, at, "%s: a step must be a number", f->name);
			while (isdigit((unsigned char)text[*i])) {
				v = v * 10 + (text[*i] - '0');
				if (v > 1000)
					return cron_fail(err, at, "%s: step too large", f->name);
				(*i)++;
			}
			if (v < 1 || v > f->hi)
				return cron_fail(err, at, "%s: step %ld is out of range 1-%d",
				                 f->name, v, f->hi);
			step = (int)v;
			/* "N/S" means N to the end, every S. */
			if (hi == lo && text[item] != '*' && text[item] != '?')
				hi = f->hi == 7 ? 6 : f->hi;
		}
		for (int v = lo; v <= hi; v += step)
			*bits |= 1ull << (f->hi == 7 && v == 7 ? 0 : v);
		if (text[*i] == ',') {
			(*i)++;
			continue;
		}
		if (text[*i] && text[*i] != ' ' && text[*i] != '\t')
			return cron_fail(err, *i, "%s: unexpected character '%c'", f->name,
			                 text[*i]);
		/* "7/2" on day-of-week: a start past the end selects nothing. */
		if (!*bits)
			return cron_fail(err, field, "%s: selects no value", f->name);
		return SB_OK;
	}
}

static const struct {
	const char *name;
	const char *expr;
} cron_macros[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
    {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"},
};

int cron_expr_parse(const char *text, struct cron_expr *out, struct cron_error *err)
{
	uint64_t bits[5];
	bool star[5];
	size_t i = 0, nf = 0;
	int rc;

	memset(out, 0, sizeof *out);
	if (!text)
		return cron_fail(err, 0, "the expression is empty");
	if (strlen(text) > CRON_TEXT_MAX)
		return cron_fail(err, CRON_TEXT_MAX, "the expression is longer than %d characters",
		                 CRON_TEXT_MAX);
	while (text[i] == ' ' || text[i] == '\t')
		i++;
	if (text[i] == '@') {
		size_t n = strcspn(text + i, " \t");

		for (size_t k = 0; k < sizeof cron_macros / sizeof cron_macros[0]; k++)
			if (strlen(cron_macros[k].name) == n &&
			    strncmp(cron_macros[k].name, text + i, n) == 0) {
				size_t j = i + n;

				while (text[j] == ' ' || text[j] == '\t')
					j++;
				if (text[j])
					return cron_fail(err, j, "nothing may follow %s",
					                 cron_macros[k].name);
				return cron_expr_parse(cron_macros[k].expr, out, err);
			}
		return cron_fail(err, i,
		                 "unknown macro (use @yearly, @monthly, @weekly, @daily or "
		                 "@hourly)");
	}
	while (text[i]) {
		if (nf == 5)
			return cron_fail(err, i,
			                 "too many fields (expected 5: minute hour "
			                 "day-of-month month day-of-week)");
		if ((rc = cron_field_parse(text, &i, &cron_fields[nf], &bits[nf], &star[nf], err)))
			return rc;
		nf++;
		while (text[i] == ' ' || text[i] == '\t')
			i++;
	}
	if (nf < 5)
		return cron_fail(err, i,
		                 "expected 5 fields (minute hour day-of-month month "
		                 "day-of-week), found %zu",
		                 nf);
	out->minute = bits[0];
	out->hour = (uint32_t)bits[1];
	out->mday = (uint32_t)bits[2];
	out->month = (uint16_t)bits[3];
	out->wday = (uint8_t)bits[4];
	out->mday_star = star[2];
	out->wday_star = star[4];
	return SB_OK;
}

static bool cron_day_matches(const struct cron_expr *e, const struct cron_tm *tm)
{
	bool dom = e->mday >> tm->mday & 1, dow = e->wday >> tm->wday & 1;

	if (e->mday_star || e->wday_star)
		return dom && dow;
	return dom || dow;
}

int cron_expr_next(const struct cron_expr *e, const struct cron_tz *z, int64_t after_s,
                   int64_t *out_s)
{
	int64_t naive = cron_tz_local(z, after_s);
	struct cron_tm tm;
	int limit_year;

	/* The next whole minute of the wall clock. */
	naive = naive - ((naive % 60) + 60) % 60 + 60;
	cron_naive_tm(naive, &tm);
	limit_year = tm.year + CRON_SEARCH_YEARS;
	while (tm.year <= limit_year) {
		if (!(e->month >> tm.mon & 1)) {
			tm.mon++;
			if (tm.mon > 12) {
				tm.mon = 1;
				tm.year++;
			}
			tm.mday = 1;
			tm.hour = tm.min = 0;
			naive = cron_tm_naive(&tm);
			cron_naive_tm(naive, &tm);
			continue;
		}
		if (!cron_day_matches(e, &tm)) {
			naive = cron_days_from_civil(tm.year, tm.mon, tm.mday) * 86400 + 86400;
			cron_naive_tm(naive, &tm);
			continue;
		}
		if (!(e->hour >> tm.hour & 1)) {
			naive = naive - tm.min * 60 + 3600;
			cron_naive_tm(naive, &tm);
			continue;
		}
		if (!(e->minute >> tm.min & 1)) {
			naive += 60;
			cron_naive_tm(naive, &tm);
			continue;
		}
		{
			int64_t utc = cron_tz_utc(z, naive, NULL);

			if (utc > after_s) {
				*out_s = utc;
				return SB_OK;
			}
		}
		naive += 60;
		cron_naive_tm(naive, &tm);
	}
	return SB_ERR_NOTFOUND;
}

/* ---- times ---- */

static int cron_digits(const char *s, int n, int *out)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return SB_ERR_INVAL;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return SB_OK;
}

int cron_parse_time(const char *text, const struct cron_tz *z, int64_t *out_ms)
{
	struct cron_tm tm;
	const char *p = text;
	int64_t ms = 0, naive;
	int oh = 0, om = 0, sign = 0;

	memset(&tm, 0, sizeof tm);
	if (!text || !*text)
		return SB_ERR_INVAL;
	if (strspn(text, "0123456789") == strlen(text))
		return num_parse_i64(text, 0, INT64_MAX / 2, out_ms);
	if (cron_digits(p, 4, &tm.year) || p[4] != '-' || cron_digits(p + 5, 2, &tm.mon) ||
	    p[7] != '-' || cron_digits(p + 8, 2, &tm.mday))
		return SB_ERR_INVAL;
	p += 10;
	if (*p == 'T' || *p == 't' || *p == ' ') {
		if (cron_digits(p + 1, 2, &tm.hour) || p[3] != ':' ||
		    cron_digits(p + 4, 2, &tm.min))
			return SB_ERR_INVAL;
		p += 6;
		if (*p == ':') {
			if (cron_digits(p + 1, 2, &tm.sec))
				return SB_ERR_INVAL;
			p += 3;
			if (*p == '.' || *p == ',') {
				int scale = 100;

				p++;
				if (!isdigit((unsigned char)*p))
					return SB_ERR_INVAL;
				while (isdigit((unsigned char)*p)) {
					ms += (*p - '0') * scale;
					scale /= 10;
					p++;
				}
			}
		}
	}
	if (*p == 'Z' || *p == 'z') {
		sign = 1;
		p++;
	} else if (*p == '+' || *p == '-') {
		sign = *p == '-' ? -1 : 1;
		if (cron_digits(p + 1, 2, &oh))
			return SB_ERR_INVAL;
		p += 3;
		if (*p == ':')
			p++;
		if (cron_digits(p, 2, &om))
			return SB_ERR_INVAL;
		p += 2;
	}
	if (*p || tm.mon < 1 || tm.mon > 12 || tm.mday < 1 || tm.mday > 31 || tm.hour > 23 ||
	    tm.min > 59 || tm.sec > 60 || oh > 23 || om > 59)
		return SB_ERR_INVAL;
	{
		/* The day must exist in its month (no 31 April). */
		int y, m, d;

		cron_civil_from_days(cron_days_from_civil(tm.year, tm.mon, tm.mday), &y, &m, &d);
		if (m != tm.mon)
			return SB_ERR_INVAL;
	}
	naive = cron_tm_naive(&tm);
	if (sign)
		*out_ms = (naive - sign * (oh * 3600 + om * 60)) * 1000 + ms;
	else
		*out_ms = (z ? cron_tz_utc(z, naive, NULL) : naive) * 1000 + ms;
	return *out_ms >= 0 ? SB_OK : SB_ERR_INVAL;
}

void cron_format_time(int64_t ms, char *out, size_t size)
{
	struct cron_tm tm;
	int64_t s = ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000);

	cron_naive_tm(s, &tm);
	snprintf(out, size, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.year, tm.mon, tm.mday, tm.hour,
	         tm.min, tm.sec);
}

int64_t cron_backoff_ms(int n)
{
	static const int64_t steps[] = {30000, 60000, 300000, 900000, 3600000};

	if (n < 1)
		return 0;
	return steps[n > 5 ? 4 : n - 1];
}

/* ---- job definitions ---- */

static const char *const cron_kind_names[] = {"at", "every", "cron"};
static const char *const cron_session_names[] = {"isolated", "main"};
static const char *const cron_delivery_names[] = {"none", "announce", "webhook"};

const char *cron_kind_name(enum cron_kind k)
{
	return (unsigned)k < 3 ? cron_kind_names[k] : "?";
}

const char *cron_session_name(enum cron_session s)
{
	return (unsigned)s < 2 ? cron_session_names[s] : "?";
}

const char *cron_delivery_name(enum cron_delivery d)
{
	return (unsigned)d < 3 ? cron_delivery_names[d] : "?";
}

void cron_spec_release(struct cron_spec *s)
{
	if (!s)
		return;
	free(s->id);
	free(s->agent);
	free(s->expr_text);
	free(s->tz);
	free(s->payload);
	free(s->channel);
	free(s->to);
	free(s->account);
	memset(s, 0, sizeof *s);
}

static int cron_errf(char *err, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int cron_errf(char *err, size_t size, const char *fmt, ...)
{
	va_list ap;

	if (err && size) {
		va_start(ap, fmt);
		vsnprintf(err, size, fmt, ap);
		va_end(ap);
	}
	return SB_ERR_INVAL;
}

static bool cron_id_ok(const char *id)
{
	size_t n = strlen(id);

	if (n == 0 || n > CRON_ID_MAX || !isalnum((unsigned char)id[0]))
		return false;
	for (const char *p = id; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.')
			return false;
	return true;
}

/* Copies an optional string member; SB_ERR_INVAL when it is not a string. */
static int cron_opt_str(const json_t *o, const char *key, size_t max, char **out, char *err,
                        size_t err_size)
{
	const json_t *v = json_object_get(o, key);

	*out = NULL;
	if (!v || json_is_null(v))
		return SB_OK;
	if (!json_is_string(v) || json_string_length(v) == 0)
		return cron_errf(err, err_size, "%s: expected a non-empty string", key);
	if (json_string_length(v) > max)
		return cron_errf(err, err_size, "%s: longer than %zu characters", key, max);
	*out = strdup(json_string_value(v));
	return *out ? SB_OK : SB_ERR_NOMEM;
}

static int cron_opt_bool(const json_t *o, const char *key, bool def, bool *out, char *err,
                         size_t err_size)
{
	const json_t *v = json_object_get(o, key);

	*out = def;
	if (!v || json_is_null(v))
		return SB_OK;
	if (!json_is_boolean(v))
		return cron_errf(err, err_size, "%s: expected true or false", key);
	*out = json_is_true(v);
	return SB_OK;
}

static int cron_enum(const char *s, const char *const *names, int n, int *out)
{
	for (int i = 0; i < n; i++)
		if (strcmp(s, names[i]) == 0) {
			*out = i;
			return SB_OK;
		}
	return SB_ERR_INVAL;
}

static int cron_spec_schedule(const json_t *o, struct cron_spec *s, char *err, size_t err_size)
{
	const json_t *at = json_object_get(o, "at"), *every = json_object_get(o, "every"),
	             *cron = json_object_get(o, "cron"), *anchor = json_object_get(o, "anchor");
	const struct cron_tz *z = NULL;
	int given = (at && !json_is_null(at)) + (every && !json_is_null(every)) +
	            (cron && !json_is_null(cron));
	int rc;

	if (given != 1)
		return cron_errf(err, err_size,
		                 "give exactly one schedule: \"at\" (a time), \"every\" (a "
		                 "duration) or \"cron\" (an expression)");
	if (s->tz && (rc = cron_tz_get(s->tz, &z)))
		return cron_errf(err, err_size, "tz: unknown time zone \"%s\"", s->tz);
	if (at && !json_is_null(at)) {
		s->kind = CRON_KIND_AT;
		if (json_is_integer(at) && json_integer_value(at) >= 0)
			s->at_ms = json_integer_value(at);
		else if (!json_is_string(at) ||
		         cron_parse_time(json_string_value(at), z, &s->at_ms) != SB_OK)
			return cron_errf(err, err_size,
			                 "at: expected an ISO 8601 time such as "
			                 "2026-03-08T09:30:00Z (or unix milliseconds)");
	} else if (every && !json_is_null(every)) {
		s->kind = CRON_KIND_EVERY;
		if (json_is_integer(every))
			s->every_ms = json_integer_value(every);
		else if (!json_is_string(every) ||
		         num_parse_duration_ms(json_string_value(every), &s->every_ms) != SB_OK)
			s->every_ms = -1;
		if (s->every_ms < 1000 || s->every_ms > 366LL * 86400000)
			return cron_errf(err, err_size,
			                 "every: expected a duration from 1s to 366d, such as 30m");
		if (anchor && !json_is_null(anchor)) {
			if (json_is_integer(anchor) && json_integer_value(anchor) >= 0)
				s->anchor_ms = json_integer_value(anchor);
			else if (!json_is_string(anchor) ||
			         cron_parse_time(json_string_value(anchor), z, &s->anchor_ms))
				return cron_errf(err, err_size,
				                 "anchor: expected an ISO 8601 time (or unix ms)");
		}
	} else {
		struct cron_error ce;

		s->kind = CRON_KIND_CRON;
		if (!json_is_string(cron))
			return cron_errf(err, err_size,
			                 "cron: expected an expression such as "
			                 "\"0 9 * * 1-5\"");
		if (cron_expr_parse(json_string_value(cron), &s->expr, &ce))
			return cron_errf(err, err_size, "cron: column %zu: %s", ce.pos + 1, ce.msg);
		if (!(s->expr_text = strdup(json_string_value(cron))))
			return SB_ERR_NOMEM;
		if (!z && cron_tz_get("local", &z))
			return cron_errf(err, err_size, "tz: the host's time zone cannot be read");
		{
			int64_t next;

			if (cron_expr_next(&s->expr, z, 0, &next) == SB_ERR_NOTFOUND &&
			    cron_expr_next(&s->expr, z, 1767225600, &next) == SB_ERR_NOTFOUND)
				return cron_errf(err, err_size,
				                 "cron: the expression never matches a real date");
		}
	}
	return SB_OK;
}

int cron_spec_from_json(const json_t *o, struct cron_spec *s, char *err, size_t err_size)
{
	const json_t *del;
	const char *str;
	int v, rc;

	memset(s, 0, sizeof *s);
	if (!json_is_object(o))
		return cron_errf(err, err_size, "a job is a JSON object");
	str = json_string_value(json_object_get(o, "id"));
	if (!str || !cron_id_ok(str))
		return cron_errf(err, err_size,
		                 "id: required; letters, digits, \"_\", \"-\" and \".\", at most "
		                 "64, starting with a letter or digit");
	if (!(s->id = strdup(str)))
		return SB_ERR_NOMEM;
	if ((rc = cron_opt_str(o, "agent", 64, &s->agent, err, err_size)) ||
	    (rc = cron_opt_str(o, "tz", 128, &s->tz, err, err_size)) ||
	    (rc = cron_opt_str(o, "payload", CRON_PAYLOAD_MAX, &s->payload, err, err_size)) ||
	    (rc = cron_opt_bool(o, "enabled", true, &s->enabled, err, err_size)) ||
	    (rc = cron_opt_bool(o, "delete_after_run", false, &s->delete_after_run, err, err_size)))
		return rc;
	if (!s->payload)
		return cron_errf(err, err_size, "payload: required (the text the agent gets)");
	str = json_string_value(json_object_get(o, "session"));
	s->session = CRON_SESSION_ISOLATED;
	if (json_object_get(o, "session") && !json_is_null(json_object_get(o, "session"))) {
		if (!str || cron_enum(str, cron_session_names, 2, &v))
			return cron_errf(err, err_size, "session: expected isolated or main");
		s->session = (enum cron_session)v;
	}
	if ((rc = cron_spec_schedule(o, s, err, err_size)))
		return rc;
	del = json_object_get(o, "delivery");
	s->delivery = CRON_DELIVERY_NONE;
	if (del && !json_is_null(del)) {
		if (!json_is_object(del))
			return cron_errf(err, err_size,
			                 "delivery: expected an object with \"mode\"");
		str = json_string_value(json_object_get(del, "mode"));
		if (!str || cron_enum(str, cron_delivery_names, 3, &v))
			return cron_errf(err, err_size,
			                 "delivery.mode: expected none, announce or webhook");
		s->delivery = (enum cron_delivery)v;
		if ((rc = cron_opt_str(del, "channel", 64, &s->channel, err, err_size)) ||
		    (rc = cron_opt_str(del, "to", 2048, &s->to, err, err_size)) ||
		    (rc = cron_opt_str(del, "account", 64, &s->account, err, err_size)))
			return rc;
		if (s->delivery == CRON_DELIVERY_ANNOUNCE && !s->channel)
			return cron_errf(err, err_size,
			                 "delivery.channel: required for announce (a channel or "
			                 "\"last\")");
		if (s->delivery == CRON_DELIVERY_ANNOUNCE && strcmp(s->channel, "last") != 0 &&
		    !s->to)
			return cron_errf(err, err_size,
			                 "delivery.to: required for announce to a channel");
		if (s->delivery == CRON_DELIVERY_WEBHOOK && !s->to)
			return cron_errf(err, err_size,
			                 "delivery.to: required for webhook (the name of a "
			                 "callback hook under channels.webhook)");
	}
	return SB_OK;
}

/* Sets key to v (taken); a failure, v NULL included, clears *ok. */
static void cron_put(json_t *o, const char *key, json_t *v, bool *ok)
{
	if (json_object_set_new(o, key, v) != 0)
		*ok = false;
}

json_t *cron_spec_to_json(const struct cron_spec *s)
{
	json_t *o =
	    json_pack("{ss ss ss sb}", "id", s->id, "session", cron_session_name(s->session),
	              "payload", s->payload ? s->payload : "", "enabled", s->enabled);
	json_t *del;
	bool ok = true;
	char t[40];

	if (!o)
		return NULL;
	/* All or nothing: a definition missing a member would be stored as it
	 * is and run differently after a restart. */
	if (s->agent)
		cron_put(o, "agent", json_string(s->agent), &ok);
	if (s->tz)
		cron_put(o, "tz", json_string(s->tz), &ok);
	switch (s->kind) {
	case CRON_KIND_AT:
		cron_format_time(s->at_ms, t, sizeof t);
		cron_put(o, "at", json_string(t), &ok);
		break;
	case CRON_KIND_EVERY:
		cron_put(o, "every", json_integer(s->every_ms), &ok);
		if (s->anchor_ms)
			cron_put(o, "anchor", json_integer(s->anchor_ms), &ok);
		break;
	case CRON_KIND_CRON:
		cron_put(o, "cron", json_string(s->expr_text ? s->expr_text : ""), &ok);
		break;
	}
	if (s->delete_after_run)
		cron_put(o, "delete_after_run", json_true(), &ok);
	del = json_pack("{ss}", "mode", cron_delivery_name(s->delivery));
	if (del) {
		if (s->channel)
			cron_put(del, "channel", json_string(s->channel), &ok);
		if (s->to)
			cron_put(del, "to", json_string(s->to), &ok);
		if (s->account)
			cron_put(del, "account", json_string(s->account), &ok);
	}
	cron_put(o, "delivery", del, &ok);
	if (!ok) {
		json_decref(o);
		return NULL;
	}
	return o;
}

int cron_spec_next(const struct cron_spec *s, int64_t after_ms, int64_t created_ms, int64_t *out_ms)
{
	switch (s->kind) {
	case CRON_KIND_AT:
		if (s->at_ms <= after_ms)
			return SB_ERR_NOTFOUND;
		*out_ms = s->at_ms;
		return SB_OK;
	case CRON_KIND_EVERY: {
		int64_t anchor = s->anchor_ms ? s->anchor_ms : created_ms, k;

		if (after_ms < anchor) {
			*out_ms = anchor;
			return SB_OK;
		}
		k = (after_ms - anchor) / s->every_ms + 1;
		*out_ms = anchor + k * s->every_ms;
		return SB_OK;
	}
	case CRON_KIND_CRON: {
		const struct cron_tz *z = NULL;
		int64_t next;
		int rc = cron_tz_get(s->tz ? s->tz : "local", &z);

		if (rc)
			return rc;
		/* Seconds: the job fires at the start of its minute. */
		rc = cron_expr_next(&s->expr, z, after_ms >= 0 ? after_ms / 1000 : -1, &next);
		if (rc)
			return rc;
		*out_ms = next * 1000;
		return SB_OK;
	}
	}
	return SB_ERR_INVAL;
}

void cron_state_after_run(struct cron_state *st, const struct cron_spec *s, bool ok, int64_t now_ms,
                          int64_t created_ms)
{
	int64_t next = 0;

	st->last_run_ms = now_ms;
	if (ok) {
		st->errors = 0;
		if (s->kind == CRON_KIND_AT) {
			st->done = true;
			st->next_run_ms = 0;
			return;
		}
		st->next_run_ms = cron_spec_next(s, now_ms, created_ms, &next) == SB_OK ? next : 0;
		return;
	}
	st->errors++;
	if (st->errors >= CRON_MAX_FAILURES) {
		st->auto_disabled = true;
		st->next_run_ms = 0;
		return;
	}
	if (s->kind == CRON_KIND_AT || cron_spec_next(s, now_ms, created_ms, &next) != SB_OK)
		next = 0;
	if (next < now_ms + cron_backoff_ms(st->errors))
		next = now_ms + cron_backoff_ms(st->errors);
	st->next_run_ms = next;
}
