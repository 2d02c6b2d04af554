/*
 * test_cron.c - cron expressions (parsing with error positions, next runs),
 * time zones read from the tz database (offsets, DST gaps and overlaps in
 * America/New_York and Europe/Berlin, the POSIX rule past the last
 * transition), ISO times, job definitions, backoff and auto-disable.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gateway/core/err.h"
#include "gateway/cron/cron.h"
#include "gateway/cron/cron_tz.h"

static int64_t T(const char *iso)
{
	int64_t ms = -1;

	assert_int_equal(cron_parse_time(iso, NULL, &ms), SB_OK);
	return ms / 1000;
}

static const struct cron_tz *zone(const char *name)
{
	const struct cron_tz *z = NULL;

	assert_int_equal(cron_tz_get(name, &z), SB_OK);
	assert_non_null(z);
	return z;
}

/* The next run of expr in zone after the ISO time `after`, as ISO UTC. */
static void next_is(const char *expr, const char *tz, const char *after, const char *want)
{
	struct cron_expr e;
	struct cron_error err;
	int64_t next = 0;
	char got[40];

	assert_int_equal(cron_expr_parse(expr, &e, &err), SB_OK);
	assert_int_equal(cron_expr_next(&e, zone(tz), T(after), &next), SB_OK);
	cron_format_time(next * 1000, got, sizeof got);
	if (strcmp(got, want) != 0)
		fail_msg("%s in %s after %s: got %s, want %s", expr, tz, after, got, want);
}

static void parse_fails(const char *expr, size_t pos, const char *needle)
{
	struct cron_expr e;
	struct cron_error err;

	memset(&err, 0, sizeof err);
	assert_int_equal(cron_expr_parse(expr, &e, &err), SB_ERR_INVAL);
	if (err.pos != pos || !strstr(err.msg, needle))
		fail_msg("\"%s\": got error at %zu \"%s\", want at %zu containing \"%s\"", expr,
		         err.pos, err.msg, pos, needle);
}

static void test_parse_ok(void **state)
{
	struct cron_expr e;

	(void)state;
	assert_int_equal(cron_expr_parse("*/15 9-17 * * mon-fri", &e, NULL), SB_OK);
	assert_true(e.minute == (1ull << 0 | 1ull << 15 | 1ull << 30 | 1ull << 45));
	assert_int_equal(e.hour, 0x3FE00u); /* 9..17 */
	assert_int_equal(e.wday, 0x3E);     /* 1..5 */
	assert_true(e.mday_star);
	assert_false(e.wday_star);
	assert_int_equal(cron_expr_parse("0 12 1,15 JAN,jul 7", &e, NULL), SB_OK);
	assert_int_equal(e.month, (1u << 1) | (1u << 7));
	assert_int_equal(e.wday, 1); /* 7 is Sunday */
	assert_int_equal(e.mday, (1u << 1) | (1u << 15));
	assert_int_equal(cron_expr_parse("  @daily ", &e, NULL), SB_OK);
	assert_true(e.minute == 1 && e.hour == 1);
	assert_int_equal(cron_expr_parse("5/20 * * * *", &e, NULL), SB_OK);
	assert_true(e.minute == (1ull << 5 | 1ull << 25 | 1ull << 45));
	assert_int_equal(cron_expr_parse("0 0 ? * 5", &e, NULL), SB_OK);
	assert_true(e.mday_star);
}

static void test_parse_errors(void **state)
{
	(void)state;
	parse_fails("0 9 * *", 7, "expected 5 fields");
	parse_fails("61 * * * *", 0, "61 is out of range 0-59");
	parse_fails("0 24 * * *", 2, "hour: 24 is out of range");
	parse_fails("0 9 * * mon-fro", 12, "unknown name");
	parse_fails("*/0 * * * *", 2, "step 0 is out of range");
	parse_fails("5-1 * * * *", 0, "backwards");
	parse_fails("0 9 * * * *", 10, "too many fields");
	parse_fails("@often", 0, "unknown macro");
	parse_fails("0,,5 * * * *", 2, "unexpected character ','");
	parse_fails("0 9 32 * *", 4, "day of month: 32");
	parse_fails("0 9 * 13 *", 6, "month: 13");
	parse_fails("0 9 * * 8", 8, "day of week: 8");
	parse_fails("0 9x * * *", 3, "unexpected character 'x'");
	parse_fails("", 0, "expected 5 fields");
	parse_fails("2 2 * jan 7/1", 10, "day of week: selects no value");
}

static void test_next_basic(void **state)
{
	(void)state;
	next_is("*/15 * * * *", "UTC", "2025-06-01T10:07:30Z", "2025-06-01T10:15:00Z");
	next_is("0 9 * * 1-5", "UTC", "2025-06-06T09:00:00Z", "2025-06-09T09:00:00Z");
	next_is("0 0 1 1 *", "UTC", "2025-06-01T00:00:00Z", "2026-01-01T00:00:00Z");
	next_is("0 0 29 2 *", "UTC", "2025-01-01T00:00:00Z", "2028-02-29T00:00:00Z");
	/* day-of-month and day-of-week both restricted: either matches */
	next_is("0 0 13 * 5", "UTC", "2025-06-01T00:00:00Z", "2025-06-06T00:00:00Z");
	next_is("0 0 13 * 5", "UTC", "2025-06-12T00:00:00Z", "2025-06-13T00:00:00Z");
	next_is("0 0 13 * 5", "UTC", "2025-06-13T00:00:00Z", "2025-06-20T00:00:00Z");
	/* one of them "*": both must match (a Friday the 13th is not needed) */
	next_is("0 0 13 * *", "UTC", "2025-06-01T00:00:00Z", "2025-06-13T00:00:00Z");
	next_is("0 0 * * 5", "UTC", "2025-06-06T00:00:00Z", "2025-06-13T00:00:00Z");
	/* "*" with a step is still unrestricted (Vixie cron): AND */
	next_is("0 0 */10 * 5", "UTC", "2025-01-01T00:00:00Z", "2025-01-31T00:00:00Z");
	next_is("0 9 * * *", "Asia/Tokyo", "2025-06-01T00:00:00Z", "2025-06-02T00:00:00Z");
}

static void test_next_never(void **state)
{
	struct cron_expr e;
	int64_t next;

	(void)state;
	assert_int_equal(cron_expr_parse("0 0 30 2 *", &e, NULL), SB_OK);
	assert_int_equal(cron_expr_next(&e, zone("UTC"), T("2025-01-01T00:00:00Z"), &next),
	                 SB_ERR_NOTFOUND);
}

static void test_dst_new_york(void **state)
{
	(void)state;
	/* 2025-03-09 02:00 EST -> 03:00 EDT (07:00 UTC): 02:30 does not exist
	 * and fires at the change, once; the next day at 02:30 EDT. */
	next_is("30 2 * * *", "America/New_York", "2025-03-08T12:00:00Z", "2025-03-09T07:00:00Z");
	next_is("30 2 * * *", "America/New_York", "2025-03-09T07:00:00Z", "2025-03-10T06:30:00Z");
	/* every 15 minutes across the gap: 01:45 EST, then 03:00 EDT */
	next_is("*/15 * * * *", "America/New_York", "2025-03-09T06:45:00Z", "2025-03-09T07:00:00Z");
	next_is("*/15 * * * *", "America/New_York", "2025-03-09T07:00:00Z", "2025-03-09T07:15:00Z");
	/* 09:00 stays 09:00 local: 14:00 UTC before, 13:00 UTC after */
	next_is("0 9 * * *", "America/New_York", "2025-03-08T13:00:00Z", "2025-03-08T14:00:00Z");
	next_is("0 9 * * *", "America/New_York", "2025-03-08T15:00:00Z", "2025-03-09T13:00:00Z");
	/* 2025-11-02 02:00 EDT -> 01:00 EST: 01:30 happens twice, runs once */
	next_is("30 1 * * *", "America/New_York", "2025-11-01T12:00:00Z", "2025-11-02T05:30:00Z");
	next_is("30 1 * * *", "America/New_York", "2025-11-02T05:30:00Z", "2025-11-03T06:30:00Z");
	next_is("*/30 * * * *", "America/New_York", "2025-11-02T05:30:00Z", "2025-11-02T07:00:00Z");
}

static void test_dst_berlin(void **state)
{
	(void)state;
	/* 2025-03-30 02:00 CET -> 03:00 CEST (01:00 UTC) */
	next_is("30 2 * * *", "Europe/Berlin", "2025-03-29T12:00:00Z", "2025-03-30T01:00:00Z");
	next_is("30 2 * * *", "Europe/Berlin", "2025-03-30T01:00:00Z", "2025-03-31T00:30:00Z");
	next_is("0 8 * * *", "Europe/Berlin", "2025-03-29T08:00:00Z", "2025-03-30T06:00:00Z");
	/* 2025-10-26 03:00 CEST -> 02:00 CET (01:00 UTC): 02:30 twice, runs once */
	next_is("30 2 * * *", "Europe/Berlin", "2025-10-25T12:00:00Z", "2025-10-26T00:30:00Z");
	next_is("30 2 * * *", "Europe/Berlin", "2025-10-26T00:30:00Z", "2025-10-27T01:30:00Z");
	next_is("0 8 * * *", "Europe/Berlin", "2025-10-26T05:00:00Z", "2025-10-26T07:00:00Z");
}

static void test_tz_offsets(void **state)
{
	struct cron_tz *posix = NULL;
	const struct cron_tz *berlin = zone("Europe/Berlin");
	int kind = -1;

	(void)state;
	assert_int_equal(cron_tz_offset(zone("America/New_York"), T("2025-01-15T12:00:00Z")),
	                 -5 * 3600);
	assert_int_equal(cron_tz_offset(zone("America/New_York"), T("2025-07-15T12:00:00Z")),
	                 -4 * 3600);
	assert_int_equal(cron_tz_offset(berlin, T("2025-07-01T00:00:00Z")), 2 * 3600);
	assert_int_equal(cron_tz_offset(zone("Australia/Sydney"), T("2025-01-15T00:00:00Z")),
	                 11 * 3600);
	assert_int_equal(cron_tz_offset(zone("Asia/Kolkata"), T("2025-01-15T00:00:00Z")), 19800);
	/* Far past the table: the footer's POSIX rule. */
	assert_int_equal(cron_tz_offset(berlin, T("2100-07-01T00:00:00Z")), 2 * 3600);
	assert_int_equal(cron_tz_offset(berlin, T("2100-01-01T00:00:00Z")), 3600);
	/* The POSIX rule alone agrees with the table hour by hour. */
	assert_int_equal(cron_tz_posix("CET-1CEST,M3.5.0,M10.5.0/3", &posix), SB_OK);
	for (int64_t t = T("2024-01-01T00:00:00Z"); t < T("2027-01-01T00:00:00Z"); t += 1800)
		assert_int_equal(cron_tz_offset(posix, t), cron_tz_offset(berlin, t));
	cron_tz_free(posix);
	/* Local -> UTC: skipped and repeated wall-clock times. */
	assert_int_equal(cron_tz_utc(berlin, T("2025-03-30T02:30:00Z"), &kind),
	                 T("2025-03-30T01:00:00Z"));
	assert_int_equal(kind, 2);
	assert_int_equal(cron_tz_utc(berlin, T("2025-10-26T02:30:00Z"), &kind),
	                 T("2025-10-26T00:30:00Z"));
	assert_int_equal(kind, 1);
	assert_int_equal(cron_tz_utc(berlin, T("2025-06-01T12:00:00Z"), &kind),
	                 T("2025-06-01T10:00:00Z"));
	assert_int_equal(kind, 0);
	/* Names that are not zones. */
	assert_int_equal(cron_tz_get("../etc/passwd", &berlin), SB_ERR_INVAL);
	assert_int_equal(cron_tz_get("Mars/Olympus_Mons", &berlin), SB_ERR_NOTFOUND);
	assert_int_equal(cron_tz_posix("nonsense", &posix), SB_ERR_INVAL);
	/* Offsets no zone has (found by fuzz_cron in a TZif footer): refused,
	 * while the extremes real zones use are accepted. */
	assert_int_equal(cron_tz_posix("XXX-30", &posix), SB_ERR_INVAL);
	assert_int_equal(cron_tz_posix("XXX+26", &posix), SB_ERR_INVAL);
	assert_int_equal(cron_tz_posix("AAA-10BBB-40", &posix), SB_ERR_INVAL);
	assert_int_equal(cron_tz_posix("<+14>-14", &posix), SB_OK);
	assert_int_equal(cron_tz_offset(posix, T("2025-06-01T12:00:00Z")), 14 * 3600);
	cron_tz_free(posix);
	assert_int_equal(cron_tz_posix("<-12>12", &posix), SB_OK);
	assert_int_equal(cron_tz_offset(posix, T("2025-06-01T12:00:00Z")), -12 * 3600);
	cron_tz_free(posix);
}

static void test_times(void **state)
{
	int64_t ms;
	char out[40];

	(void)state;
	assert_int_equal(cron_parse_time("2026-03-08T09:30:00Z", NULL, &ms), SB_OK);
	assert_true(ms == 1772962200000LL);
	assert_int_equal(cron_parse_time("2026-03-08T10:30:00+01:00", NULL, &ms), SB_OK);
	assert_true(ms == 1772962200000LL);
	assert_int_equal(cron_parse_time("2026-03-08T09:30:00.250Z", NULL, &ms), SB_OK);
	assert_true(ms == 1772962200250LL);
	assert_int_equal(cron_parse_time("2026-03-08 10:30", zone("Europe/Berlin"), &ms), SB_OK);
	assert_true(ms == 1772962200000LL);
	assert_int_equal(cron_parse_time("1772962200000", NULL, &ms), SB_OK);
	assert_true(ms == 1772962200000LL);
	assert_int_equal(cron_parse_time("2026-02-30T00:00:00Z", NULL, &ms), SB_ERR_INVAL);
	assert_int_equal(cron_parse_time("2026-03-08T25:00:00Z", NULL, &ms), SB_ERR_INVAL);
	assert_int_equal(cron_parse_time("yesterday", NULL, &ms), SB_ERR_INVAL);
	cron_format_time(1772962200000LL, out, sizeof out);
	assert_string_equal(out, "2026-03-08T09:30:00Z");
}

static int spec(const char *json, struct cron_spec *s, char *err, size_t size)
{
	json_t *o = json_loads(json, 0, NULL);
	int rc;

	assert_non_null(o);
	rc = cron_spec_from_json(o, s, err, size);
	json_decref(o);
	return rc;
}

static void test_spec(void **state)
{
	struct cron_spec s;
	char err[256];
	int64_t next;
	json_t *j;

	(void)state;
	assert_int_equal(
	    spec("{\"id\":\"digest\",\"cron\":\"0 9 * * 1-5\",\"tz\":\"Europe/Berlin\","
	         "\"payload\":\"Summarise\",\"delivery\":{\"mode\":\"webhook\","
	         "\"to\":\"reports\"}}",
	         &s, err, sizeof err),
	    SB_OK);
	assert_int_equal(s.kind, CRON_KIND_CRON);
	assert_int_equal(s.delivery, CRON_DELIVERY_WEBHOOK);
	assert_int_equal(s.session, CRON_SESSION_ISOLATED);
	assert_true(s.enabled);
	assert_int_equal(cron_spec_next(&s, T("2025-06-06T08:00:00Z") * 1000, 0, &next), SB_OK);
	assert_true(next == T("2025-06-09T07:00:00Z") * 1000);
	j = cron_spec_to_json(&s);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "cron")), "0 9 * * 1-5");
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(j, "delivery"), "to")), "reports");
	json_decref(j);
	cron_spec_release(&s);

	assert_int_equal(
	    spec("{\"id\":\"tick\",\"every\":\"30m\",\"anchor\":\"2025-06-01T00:10:00Z\","
	         "\"payload\":\"x\",\"session\":\"main\"}",
	         &s, err, sizeof err),
	    SB_OK);
	assert_int_equal(s.every_ms, 1800000);
	assert_int_equal(cron_spec_next(&s, T("2025-06-01T05:00:00Z") * 1000, 0, &next), SB_OK);
	assert_true(next == T("2025-06-01T05:10:00Z") * 1000);
	assert_int_equal(cron_spec_next(&s, T("2025-06-01T05:10:00Z") * 1000, 0, &next), SB_OK);
	assert_true(next == T("2025-06-01T05:40:00Z") * 1000);
	cron_spec_release(&s);

	assert_int_equal(spec("{\"id\":\"once\",\"at\":\"2025-06-01T12:00:00Z\",\"payload\":\"x\"}",
	                      &s, err, sizeof err),
	                 SB_OK);
	assert_int_equal(cron_spec_next(&s, T("2025-06-01T11:00:00Z") * 1000, 0, &next), SB_OK);
	assert_true(next == T("2025-06-01T12:00:00Z") * 1000);
	assert_int_equal(cron_spec_next(&s, T("2025-06-01T12:00:00Z") * 1000, 0, &next),
	                 SB_ERR_NOTFOUND);
	cron_spec_release(&s);

	assert_int_equal(spec("{\"id\":\"bad\",\"cron\":\"0 9 * * mon-fro\",\"payload\":\"x\"}", &s,
	                      err, sizeof err),
	                 SB_ERR_INVAL);
	assert_non_null(strstr(err, "cron: column 13: day of week: unknown name"));
	cron_spec_release(&s);
	assert_int_equal(spec("{\"id\":\"two\",\"cron\":\"* * * * *\",\"every\":\"1h\",\"payload\":"
	                      "\"x\"}",
	                      &s, err, sizeof err),
	                 SB_ERR_INVAL);
	assert_non_null(strstr(err, "exactly one schedule"));
	cron_spec_release(&s);
	assert_int_equal(
	    spec("{\"id\":\"z\",\"cron\":\"0 9 * * *\",\"tz\":\"Nowhere/City\",\"payload\":\"x\"}",
	         &s, err, sizeof err),
	    SB_ERR_INVAL);
	assert_non_null(strstr(err, "unknown time zone"));
	cron_spec_release(&s);
	assert_int_equal(spec("{\"id\":\"w\",\"every\":\"1h\",\"payload\":\"x\",\"delivery\":"
	                      "{\"mode\":\"webhook\"}}",
	                      &s, err, sizeof err),
	                 SB_ERR_INVAL);
	assert_non_null(strstr(err, "delivery.to"));
	cron_spec_release(&s);
	assert_int_equal(
	    spec("{\"id\":\"never\",\"cron\":\"0 0 31 4 *\",\"tz\":\"UTC\",\"payload\":"
	         "\"x\"}",
	         &s, err, sizeof err),
	    SB_ERR_INVAL);
	assert_non_null(strstr(err, "never matches"));
	cron_spec_release(&s);
}

static void test_backoff_and_disable(void **state)
{
	struct cron_spec s;
	struct cron_state st;
	char err[256];
	int64_t now = T("2025-06-01T00:00:00Z") * 1000;
	static const int64_t want[] = {30000, 60000, 300000, 900000, 3600000, 3600000};

	(void)state;
	for (int i = 0; i < 6; i++)
		assert_true(cron_backoff_ms(i + 1) == want[i]);
	assert_true(cron_backoff_ms(42) == 3600000);
	assert_int_equal(spec("{\"id\":\"m\",\"every\":\"1m\",\"anchor\":0,\"payload\":\"x\"}", &s,
	                      err, sizeof err),
	                 SB_OK);
	memset(&st, 0, sizeof st);
	/* Failures push the next run out by the backoff (past the schedule). */
	for (int i = 1; i < CRON_MAX_FAILURES; i++) {
		cron_state_after_run(&st, &s, false, now, 0);
		assert_int_equal(st.errors, i);
		assert_false(st.auto_disabled);
		assert_true(st.next_run_ms == now + (i == 1 ? 60000 : cron_backoff_ms(i)));
		now = st.next_run_ms;
	}
	/* A success clears the count. */
	cron_state_after_run(&st, &s, true, now, 0);
	assert_int_equal(st.errors, 0);
	assert_true(st.next_run_ms == now + 60000);
	/* Ten in a row disable the job. */
	for (int i = 1; i <= CRON_MAX_FAILURES; i++)
		cron_state_after_run(&st, &s, false, now += 1000, 0);
	assert_true(st.auto_disabled);
	assert_true(st.next_run_ms == 0);
	cron_spec_release(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_ok),     cmocka_unit_test(test_parse_errors),
	    cmocka_unit_test(test_next_basic),   cmocka_unit_test(test_next_never),
	    cmocka_unit_test(test_dst_new_york), cmocka_unit_test(test_dst_berlin),
	    cmocka_unit_test(test_tz_offsets),   cmocka_unit_test(test_times),
	    cmocka_unit_test(test_spec),         cmocka_unit_test(test_backoff_and_disable),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
