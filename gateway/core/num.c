#include "num.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

int num_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
	char *end = NULL;
	long long v;

	if (!s || !*s || isspace((unsigned char)*s))
		return SB_ERR_INVAL;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno == ERANGE)
		return SB_ERR_TOOBIG;
	if (errno || end == s || *end)
		return SB_ERR_INVAL;
	if (v < min || v > max)
		return SB_ERR_TOOBIG;
	*out = (int64_t)v;
	return SB_OK;
}

int num_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	char *end = NULL;
	unsigned long long v;

	if (!s || !isdigit((unsigned char)*s))
		return SB_ERR_INVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return SB_ERR_TOOBIG;
	if (errno || end == s || *end)
		return SB_ERR_INVAL;
	if (v > max)
		return SB_ERR_TOOBIG;
	*out = (uint64_t)v;
	return SB_OK;
}

struct num_unit {
	const char *suffix;
	int64_t mult;
};

static int num_parse_scaled(const char *s, const struct num_unit *units, int64_t *out)
{
	char digits[32];
	size_t n = 0;
	int64_t v, mult = 1;
	int rc;

	if (!s)
		return SB_ERR_INVAL;
	while (s[n] && isdigit((unsigned char)s[n]))
		n++;
	if (n == 0 || n >= sizeof digits)
		return n ? SB_ERR_TOOBIG : SB_ERR_INVAL;
	memcpy(digits, s, n);
	digits[n] = '\0';
	rc = num_parse_i64(digits, 0, INT64_MAX, &v);
	if (rc)
		return rc;
	if (s[n]) {
		const struct num_unit *u;

		for (u = units; u->suffix; u++)
			if (strcmp(s + n, u->suffix) == 0)
				break;
		if (!u->suffix)
			return SB_ERR_INVAL;
		mult = u->mult;
	}
	if (v > INT64_MAX / mult)
		return SB_ERR_TOOBIG;
	*out = v * mult;
	return SB_OK;
}

int num_parse_duration_ms(const char *s, int64_t *out_ms)
{
	static const struct num_unit units[] = {
	    {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}, {NULL, 0},
	};
	return num_parse_scaled(s, units, out_ms);
}

int num_parse_size(const char *s, int64_t *out_bytes)
{
	static const struct num_unit units[] = {
	    {"B", 1},
	    {"KiB", 1024},
	    {"MiB", 1024 * 1024},
	    {"GiB", 1024LL * 1024 * 1024},
	    {"KB", 1000},
	    {"MB", 1000 * 1000},
	    {NULL, 0},
	};
	return num_parse_scaled(s, units, out_bytes);
}
