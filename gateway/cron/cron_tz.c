/*
 * cron_tz.c - see cron_tz.h.
 *
 * TZif layout (RFC 8536): a v1 header and 32-bit block, then (version 2 and
 * later) a second header with a 64-bit block, then a footer line holding a
 * POSIX TZ string for instants after the last transition. Only the 64-bit
 * block is read when there is one. Leap-second records are skipped: the
 * gateway's clock is POSIX time.
 */
#include "gateway/cron/cron_tz.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/core/err.h"
#include "gateway/core/fmt.h"

#define TZ_FILE_MAX (256u << 10)
#define TZ_NAME_MAX 128
#define TZ_TYPES_MAX 256
#define TZ_TRANS_MAX 4096
#define TZ_DEFAULT_DIR "/usr/share/zoneinfo"

/* The offsets accepted from tzdata, seconds east of UTC. */
#define TZ_OFF_MIN (-25 * 3600)
#define TZ_OFF_MAX (26 * 3600)

/* A POSIX rule date: Jn (1..365, no Feb 29), n (0..365), Mm.w.d. */
struct tz_rule_date {
	char kind; /* 'J', 'D' (zero-based day), 'M' */
	int a, b, c;
	int32_t time; /* seconds after local midnight (may be negative or > 24h) */
};

struct tz_rule {
	bool valid;
	int32_t std_off; /* seconds east */
	int32_t dst_off;
	bool has_dst;
	struct tz_rule_date start, end;
};

struct cron_tz {
	char *name;
	int64_t *trans; /* transition instants, ascending */
	uint8_t *idx;   /* type index after each transition */
	int32_t *utoff; /* per type */
	size_t ntrans, ntypes;
	struct tz_rule rule; /* after the last transition (and alone, for posix zones) */
};

/* ---- civil dates ---- */

int64_t cron_days_from_civil(int64_t y, int m, int d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

void cron_civil_from_days(int64_t z, int *y, int *m, int *d)
{
	int64_t era, doe, yoe, doy, mp, yy;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	yy = yoe + era * 400;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = (int)(yy + (*m <= 2));
}

static int64_t tz_floor_div(int64_t a, int64_t b)
{
	return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

void cron_naive_tm(int64_t naive, struct cron_tm *out)
{
	int64_t days = tz_floor_div(naive, 86400), secs = naive - days * 86400;

	cron_civil_from_days(days, &out->year, &out->mon, &out->mday);
	out->hour = (int)(secs / 3600);
	out->min = (int)(secs / 60 % 60);
	out->sec = (int)(secs % 60);
	out->wday = (int)((days % 7 + 11) % 7); /* 1970-01-01 was a Thursday */
}

int64_t cron_tm_naive(const struct cron_tm *tm)
{
	return cron_days_from_civil(tm->year, tm->mon, tm->mday) * 86400 + tm->hour * 3600 +
	       tm->min * 60 + tm->sec;
}

static bool tz_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* ---- POSIX TZ rules ---- */

static const char *tz_rule_name(const char *p)
{
	if (*p == '<') {
		while (*p && *p != '>')
			p++;
		return *p == '>' ? p + 1 : NULL;
	}
	const char *s = p;

	while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z'))
		p++;
	return p - s >= 3 ? p : NULL;
}

/* [+-]hh[:mm[:ss]] -> seconds; hours up to 167 (RFC 8536 extension). */
static const char *tz_rule_time(const char *p, int32_t *out)
{
	int sign = 1;
	long v[3] = {0, 0, 0};

	if (*p == '+' || *p == '-')
		sign = *p++ == '-' ? -1 : 1;
	for (int i = 0; i < 3; i++) {
		int digits = 0;

		if (i > 0) {
			if (*p != ':')
				break;
			p++;
		}
		while (*p >= '0' && *p <= '9' && digits < 3) {
			v[i] = v[i] * 10 + (*p++ - '0');
			digits++;
		}
		if (!digits || (i == 0 && v[0] > 167) || (i > 0 && v[i] > 59))
			return NULL;
	}
	*out = (int32_t)(sign * (v[0] * 3600 + v[1] * 60 + v[2]));
	return p;
}

static const char *tz_rule_num(const char *p, int lo, int hi, int *out)
{
	int v = 0, digits = 0;

	while (*p >= '0' && *p <= '9' && digits < 4) {
		v = v * 10 + (*p++ - '0');
		digits++;
	}
	if (!digits || v < lo || v > hi)
		return NULL;
	*out = v;
	return p;
}

static const char *tz_rule_date_parse(const char *p, struct tz_rule_date *d)
{
	if (*p == 'J') {
		d->kind = 'J';
		p = tz_rule_num(p + 1, 1, 365, &d->a);
	} else if (*p == 'M') {
		d->kind = 'M';
		if (!(p = tz_rule_num(p + 1, 1, 12, &d->a)) || *p != '.' ||
		    !(p = tz_rule_num(p + 1, 1, 5, &d->b)) || *p != '.' ||
		    !(p = tz_rule_num(p + 1, 0, 6, &d->c)))
			return NULL;
	} else {
		d->kind = 'D';
		p = tz_rule_num(p, 0, 365, &d->a);
	}
	if (!p)
		return NULL;
	d->time = 7200;
	if (*p == '/')
		p = tz_rule_time(p + 1, &d->time);
	return p;
}

/* Parses "STDoff[DST[off][,start[/time],end[/time]]]". */
static int tz_rule_parse(const char *s, struct tz_rule *r)
{
	const char *p = s;
	int32_t off;

	memset(r, 0, sizeof *r);
	if (!(p = tz_rule_name(p)) || !(p = tz_rule_time(p, &off)))
		return SB_ERR_INVAL;
	r->std_off = -off; /* POSIX offsets are west of Greenwich */
	r->dst_off = r->std_off;
	if (*p) {
		if (!(p = tz_rule_name(p)))
			return SB_ERR_INVAL;
		r->has_dst = true;
		r->dst_off = r->std_off + 3600;
		if (*p && *p != ',') {
			if (!(p = tz_rule_time(p, &off)))
				return SB_ERR_INVAL;
			r->dst_off = -off;
		}
		/* No dates given: the US rules of 2007, as glibc assumes. */
		r->start = (struct tz_rule_date){'M', 3, 2, 0, 7200};
		r->end = (struct tz_rule_date){'M', 11, 1, 0, 7200};
		if (*p == ',') {
			if (!(p = tz_rule_date_parse(p + 1, &r->start)) || *p != ',' ||
			    !(p = tz_rule_date_parse(p + 1, &r->end)))
				return SB_ERR_INVAL;
		}
		if (*p)
			return SB_ERR_INVAL;
	}
	/* POSIX allows hours up to 24 (167 for times of day); no zone's
	 * offset is beyond the range the type table accepts. */
	if (r->std_off < TZ_OFF_MIN || r->std_off > TZ_OFF_MAX || r->dst_off < TZ_OFF_MIN ||
	    r->dst_off > TZ_OFF_MAX)
		return SB_ERR_INVAL;
	r->valid = true;
	return SB_OK;
}

/* The local naive second of a rule date's change in year y. */
static int64_t tz_rule_date_naive(const struct tz_rule_date *d, int64_t y)
{
	int64_t days;

	if (d->kind == 'J') {
		days = cron_days_from_civil(y, 1, 1) + d->a - 1;
		if (tz_leap(y) && d->a >= 60)
			days++;
	} else if (d->kind == 'D') {
		days = cron_days_from_civil(y, 1, 1) + d->a;
	} else {
		int64_t first = cron_days_from_civil(y, d->a, 1);
		int wday = (int)((first % 7 + 11) % 7);
		int64_t day = first + (d->c - wday + 7) % 7 + (d->b - 1) * 7;
		int next_m = d->a == 12 ? 1 : d->a + 1;
		int64_t next = cron_days_from_civil(d->a == 12 ? y + 1 : y, next_m, 1);

		while (day >= next)
			day -= 7;
		days = day;
	}
	return days * 86400 + d->time;
}

static int32_t tz_rule_offset(const struct tz_rule *r, int64_t utc)
{
	int y, m, d;
	int64_t start, end;

	if (!r->has_dst)
		return r->std_off;
	cron_civil_from_days(tz_floor_div(utc + r->std_off, 86400), &y, &m, &d);
	/* The start is given in standard time, the end in daylight time. */
	start = tz_rule_date_naive(&r->start, y) - r->std_off;
	end = tz_rule_date_naive(&r->end, y) - r->dst_off;
	if (start < end)
		return utc >= start && utc < end ? r->dst_off : r->std_off;
	return utc >= end && utc < start ? r->std_off : r->dst_off;
}

/* ---- TZif ---- */

static uint32_t tz_be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t tz_be64(const unsigned char *p)
{
	return (int64_t)((uint64_t)tz_be32(p) << 32 | tz_be32(p + 4));
}

struct tz_counts {
	uint32_t isut, isstd, leap, time, type, chars;
};

static int tz_header(const unsigned char *p, size_t len, int *version, struct tz_counts *c)
{
	if (len < 44 || memcmp(p, "TZif", 4) != 0)
		return SB_ERR_INVAL;
	*version = p[4] ? p[4] - '0' : 1;
	c->isut = tz_be32(p + 20);
	c->isstd = tz_be32(p + 24);
	c->leap = tz_be32(p + 28);
	c->time = tz_be32(p + 32);
	c->type = tz_be32(p + 36);
	c->chars = tz_be32(p + 40);
	if (c->type == 0 || c->type > TZ_TYPES_MAX || c->time > TZ_TRANS_MAX * 16 ||
	    c->leap > 100000 || c->chars > 100000 || c->isut > c->type || c->isstd > c->type)
		return SB_ERR_INVAL;
	return SB_OK;
}

static size_t tz_block_len(const struct tz_counts *c, size_t tsize)
{
	return (size_t)c->time * tsize + c->time + (size_t)c->type * 6 + c->chars +
	       (size_t)c->leap * (tsize + 4) + c->isstd + c->isut;
}

void cron_tz_free(struct cron_tz *z)
{
	if (!z)
		return;
	free(z->name);
	free(z->trans);
	free(z->idx);
	free(z->utoff);
	free(z);
}

int cron_tz_parse(const unsigned char *data, size_t len, const char *name, struct cron_tz **out)
{
	struct cron_tz *z = NULL;
	struct tz_counts c;
	const unsigned char *p = data;
	size_t tsize = 4, block;
	int version, rc = SB_ERR_INVAL;

	*out = NULL;
	if (tz_header(p, len, &version, &c))
		goto out;
	block = tz_block_len(&c, 4);
	if (len - 44 < block)
		goto out;
	if (version >= 2) {
		p += 44 + block;
		len -= 44 + block;
		if (tz_header(p, len, &version, &c))
			goto out;
		tsize = 8;
		block = tz_block_len(&c, 8);
		if (len - 44 < block)
			goto out;
	}
	rc = SB_ERR_NOMEM;
	z = calloc(1, sizeof *z);
	if (!z || !(z->name = strdup(name ? name : "")))
		goto out;
	z->ntrans = c.time;
	z->ntypes = c.type;
	z->trans = calloc(c.time ? c.time : 1, sizeof *z->trans);
	z->idx = calloc(c.time ? c.time : 1, 1);
	z->utoff = calloc(c.type, sizeof *z->utoff);
	if (!z->trans || !z->idx || !z->utoff)
		goto out;
	rc = SB_ERR_INVAL;
	{
		const unsigned char *t = p + 44, *ix = t + (size_t)c.time * tsize,
		                    *ty = ix + c.time;

		for (uint32_t i = 0; i < c.time; i++) {
			z->trans[i] = tsize == 8 ? tz_be64(t + (size_t)i * 8)
			                         : (int64_t)(int32_t)tz_be32(t + (size_t)i * 4);
			if (i && z->trans[i] <= z->trans[i - 1])
				goto out;
			z->idx[i] = ix[i];
			if (ix[i] >= c.type)
				goto out;
		}
		for (uint32_t i = 0; i < c.type; i++) {
			int32_t off = (int32_t)tz_be32(ty + (size_t)i * 6);

			if (off < TZ_OFF_MIN || off > TZ_OFF_MAX)
				goto out;
			z->utoff[i] = off;
		}
	}
	if (version >= 2) {
		const unsigned char *f = p + 44 + block, *end = data + (p - data) + len;
		char rule[128];
		size_t n;

		if (f < end && *f == '\n') {
			const unsigned char *nl = memchr(f + 1, '\n', (size_t)(end - f - 1));

			n = nl ? (size_t)(nl - f - 1) : 0;
			if (nl && n > 0 && n < sizeof rule) {
				memcpy(rule, f + 1, n);
				rule[n] = '\0';
				if (tz_rule_parse(rule, &z->rule) != SB_OK)
					z->rule.valid = false;
			}
		}
	}
	*out = z;
	z = NULL;
	rc = SB_OK;
out:
	cron_tz_free(z);
	return rc;
}

int cron_tz_posix(const char *rule, struct cron_tz **out)
{
	struct cron_tz *z = calloc(1, sizeof *z);
	int rc = SB_ERR_NOMEM;

	*out = NULL;
	if (!z || !(z->name = strdup(rule)))
		goto out;
	rc = tz_rule_parse(rule, &z->rule);
	if (rc)
		goto out;
	*out = z;
	z = NULL;
out:
	cron_tz_free(z);
	return rc;
}

const char *cron_tz_name(const struct cron_tz *z)
{
	return z->name;
}

int32_t cron_tz_offset(const struct cron_tz *z, int64_t utc)
{
	size_t lo = 0, hi = z->ntrans;

	if (z->ntrans == 0)
		return z->rule.valid ? tz_rule_offset(&z->rule, utc)
		                     : (z->ntypes ? z->utoff[0] : 0);
	if (utc < z->trans[0])
		return z->utoff[0];
	if (utc >= z->trans[z->ntrans - 1] && z->rule.valid)
		return tz_rule_offset(&z->rule, utc);
	/* The last transition at or before utc. */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (z->trans[mid] <= utc)
			lo = mid;
		else
			hi = mid;
	}
	return z->utoff[z->idx[lo]];
}

int64_t cron_tz_local(const struct cron_tz *z, int64_t utc)
{
	return utc + cron_tz_offset(z, utc);
}

void cron_tz_to_tm(const struct cron_tz *z, int64_t utc, struct cron_tm *out)
{
	cron_naive_tm(cron_tz_local(z, utc), out);
}

int64_t cron_tz_utc(const struct cron_tz *z, int64_t naive, int *kind)
{
	/* Offsets a day either side: no zone changes twice within two days. */
	int32_t before = cron_tz_offset(z, naive - 86400 - 26 * 3600);
	int32_t after = cron_tz_offset(z, naive + 86400 + 26 * 3600);
	int64_t a = naive - before, b = naive - after;
	bool a_ok = cron_tz_offset(z, a) == before, b_ok = cron_tz_offset(z, b) == after;
	int64_t lo, hi;

	if (kind)
		*kind = 0;
	if (a_ok && b_ok) {
		if (a != b && kind)
			*kind = 1;
		return a < b ? a : b;
	}
	if (a_ok)
		return a;
	if (b_ok)
		return b;
	/* Also check the offset right at naive itself (a change further away
	 * than a day on one side only). */
	{
		int32_t mid = cron_tz_offset(z, naive - cron_tz_offset(z, naive));

		if (cron_tz_offset(z, naive - mid) == mid)
			return naive - mid;
	}
	/* Skipped: the instant of the change, found by bisection between the
	 * two readings (the clock jumps over naive somewhere in between). */
	if (kind)
		*kind = 2;
	lo = a < b ? a : b;
	hi = a < b ? b : a;
	while (hi - lo > 1) {
		int64_t m = lo + (hi - lo) / 2;

		if (cron_tz_offset(z, m) == cron_tz_offset(z, lo))
			lo = m;
		else
			hi = m;
	}
	return hi;
}

/* ---- loading and the cache ---- */

struct tz_cached {
	struct cron_tz *z;
	struct tz_cached *next;
};

static pthread_mutex_t tz_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tz_cached *tz_cache;

static bool tz_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n >= TZ_NAME_MAX || name[0] == '/' || name[0] == '.' || strstr(name, ".."))
		return false;
	for (const char *p = name; *p; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
		      (*p >= '0' && *p <= '9') || *p == '/' || *p == '_' || *p == '-' || *p == '+'))
			return false;
	return true;
}

static int tz_read_file(const char *path, unsigned char **out, size_t *len)
{
	struct stat st;
	unsigned char *buf = NULL;
	size_t got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = SB_ERR_NOTFOUND;

	*out = NULL;
	if (fd < 0)
		return SB_ERR_NOTFOUND;
	rc = SB_ERR_IO;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > TZ_FILE_MAX)
		goto out;
	rc = SB_ERR_NOMEM;
	if (!(buf = malloc((size_t)st.st_size + 1)))
		goto out;
	rc = SB_ERR_IO;
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);

		if (r <= 0)
			goto out;
		got += (size_t)r;
	}
	*out = buf;
	*len = got;
	buf = NULL;
	rc = SB_OK;
out:
	free(buf);
	close(fd);
	return rc;
}

static int tz_load(const char *name, struct cron_tz **out)
{
	const char *dir = getenv("TZDIR");
	char path[4200];
	unsigned char *data = NULL;
	size_t len = 0;
	int rc;

	*out = NULL;
	if (strcmp(name, "UTC") == 0 || strcmp(name, "Etc/UTC") == 0 || strcmp(name, "Z") == 0) {
		rc = cron_tz_posix("UTC0", out);
		if (rc == SB_OK) {
			free((*out)->name);
			if (!((*out)->name = strdup(name))) {
				cron_tz_free(*out);
				*out = NULL;
				rc = SB_ERR_NOMEM;
			}
		}
		return rc;
	}
	if (strcmp(name, "local") == 0) {
		const char *tz = getenv("TZ");

		if (tz && *tz == ':')
			tz++;
		/* A cut path would load another zone. */
		if (tz && *tz && tz_name_ok(tz))
			rc = FMT(path, "%s/%s", dir && *dir ? dir : TZ_DEFAULT_DIR, tz);
		else if (tz && *tz && tz[0] == '/')
			rc = FMT(path, "%s", tz);
		else
			rc = FMT(path, "/etc/localtime");
		if (rc == SB_OK)
			rc = tz_read_file(path, &data, &len);
		else
			rc = SB_ERR_NOTFOUND;
		if (rc == SB_ERR_NOTFOUND)
			return tz_load("UTC", out);
	} else {
		if (!tz_name_ok(name))
			return SB_ERR_INVAL;
		if (FMT(path, "%s/%s", dir && *dir ? dir : TZ_DEFAULT_DIR, name) != SB_OK)
			return SB_ERR_INVAL;
		rc = tz_read_file(path, &data, &len);
	}
	if (rc == SB_OK)
		rc = cron_tz_parse(data, len, name, out);
	free(data);
	return rc;
}

int cron_tz_get(const char *name, const struct cron_tz **out)
{
	struct tz_cached *c;
	struct cron_tz *z = NULL;
	int rc;

	*out = NULL;
	if (!name)
		return SB_ERR_INVAL;
	pthread_mutex_lock(&tz_mu);
	for (c = tz_cache; c; c = c->next)
		if (strcmp(c->z->name, name) == 0) {
			*out = c->z;
			pthread_mutex_unlock(&tz_mu);
			return SB_OK;
		}
	rc = tz_load(name, &z);
	if (rc == SB_OK) {
		c = calloc(1, sizeof *c);
		if (!c) {
			cron_tz_free(z);
			rc = SB_ERR_NOMEM;
		} else {
			c->z = z;
			c->next = tz_cache;
			tz_cache = c;
			*out = z;
		}
	}
	pthread_mutex_unlock(&tz_mu);
	return rc;
}
